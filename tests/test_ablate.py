"""experiments/ablate.py without training anything: its aggregation against hand-computed numbers, the report
on synthetic run directories, the run plan, and the scheduler (order, failure, resume) with stand-in scripts."""
import importlib.util
import json
import os
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("ablate", os.path.join(ROOT, "experiments", "ablate.py"))
ablate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablate)


def write_jsonl(path, records):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def write_results(out_dir, avg_at_k: dict):
    """The part of eval.py's results.json that ablate.py reads: {benchmark: Avg@k}."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"benchmarks": {bench: {"avg_at_k": v} for bench, v in avg_at_k.items()}}, f)


def test_read_metrics_keeps_the_last_record_of_a_step_and_cuts_at_max_step(tmp_path):
    path = str(tmp_path / "m.jsonl")
    write_jsonl(path, [{"step": 0, "eval_accuracy": 0.1}, {"step": 1, "reward": 0.2}, {"step": 2, "reward": 0.3},
                       {"step": 2, "reward": 0.5}, {"step": 3, "reward": 0.9}])   # step 2 again: a resumed run
    assert ablate.read_metrics(path, max_step=2) == {0: {"step": 0, "eval_accuracy": 0.1}, 1: {"step": 1, "reward": 0.2},
                                                     2: {"step": 2, "reward": 0.5}}
    assert ablate.read_metrics(str(tmp_path / "missing.jsonl")) == {}


def test_curve_window_and_summary_against_hand_computed_values():
    records = {1: {"accuracy": 0.0}, 2: {"accuracy": 0.5}, 3: {"accuracy": 1.0}, 4: {"other": 7}}
    assert ablate.curve(records, "accuracy") == [(1, 0.0), (2, 0.5), (3, 1.0)]
    assert ablate.curve(records, "accuracy", window=2) == [(1, 0.0), (2, 0.25), (3, 0.75)]
    seeds = [[(0, 0.2), (10, 0.6), (20, 0.9)], [(0, 0.4), (10, 0.95), (20, 1.0)], [(0, 0.3), (10, 0.5), (20, 0.7)]]
    s = ablate.summarize(seeds, [0, 20], target=0.9)
    assert s["at"][0][0] == pytest.approx(0.3) and s["at"][0][1] == pytest.approx(0.1)       # stdev(.2,.4,.3) = .1
    assert s["at"][20][0] == pytest.approx(2.6 / 3)
    assert s["to_target"][0] == pytest.approx(15.0) and s["to_target"][1] == pytest.approx(50 ** 0.5)  # steps 20, 10
    assert s["to_target"][2:] == (2, 3)                                                            # 2 of 3 seeds
    assert ablate.mean_std([None, None]) == (None, None) and ablate.mean_std([0.5]) == (0.5, 0.0)
    table = ablate.arm_table([("GPPO", s, [])], [0, 20], 0.9)
    assert "| GPPO | 0.300 ± 0.100 | 0.867 ± 0.153 | 15 ± 7 (2/3 seeds) |" in table


def test_table_steps_are_at_most_five_evenly_spread_eval_steps():
    assert ablate.table_steps(40, 10) == [0, 10, 20, 30, 40]
    assert ablate.table_steps(100, 5) == [0, 25, 50, 75, 100]
    assert ablate.table_steps(2, 1) == [0, 1, 2]
    assert ablate.table_steps(25, 10) == [0, 10, 20, 25]


def cfg(tmp_path, **kw):
    return ablate.AblateConfig(out_dir=str(tmp_path / "abl"), **kw)


def test_plan_shares_runs_one_sft_checkpoint_and_several_updates_per_batch(tmp_path):
    jobs = ablate.plan(cfg(tmp_path, arms="loss,alpha,filter", seeds=2))
    names = [j["name"] for j in jobs]
    # the base model's data first (distill.py's toy recipe, the paper's rule), then the base model, trained on it
    assert names[:2] == ["distill-sft-mixed-s0", "sft-mixed-s0"] and "--keep=difficulty" in jobs[0]["cmd"]
    data_dir = os.path.join(str(tmp_path / "abl"), "runs", "distill-sft-mixed-s0")
    assert jobs[1]["after"] == ["distill-sft-mixed-s0"] and f"--data={data_dir}/sft.jsonl" in jobs[1]["cmd"]
    rl = [j for j in jobs if j["cmd"][0] == "gppo.py"]
    assert sorted(j["name"] for j in rl) == sorted(f"{r}-s{s}" for r in ("gppo", "grpo", "cispo", "alpha0", "alpha0.2",
                                                                        "nofilter") for s in (0, 1))
    base = os.path.join(str(tmp_path / "abl"), "runs", "sft-mixed-s0", "hf")
    assert all(f"--init_from={base}" in j["cmd"] and j["after"] == ["sft-mixed-s0"] for j in rl)
    assert all("--prompts_per_step=16" in j["cmd"] and "--mini_batch_prompts=2" in j["cmd"] for j in rl)
    # train.sh's RL set (3-number prompts) by default; --toy_numbers moves every math run, and --gppo_args comes last
    assert all("--toy_numbers=3" in j["cmd"] for j in rl)
    hard = ablate.plan(cfg(tmp_path, arms="loss", seeds=1, toy_numbers=4, gppo_args="--toy_numbers=5"))
    assert [a for a in hard[-1]["cmd"] if a.startswith("--toy_numbers=")] == ["--toy_numbers=4", "--toy_numbers=5"]
    # with --sft_from the sft arm still trains both of its models, the RL runs use the given one
    jobs = ablate.plan(cfg(tmp_path, arms="sft,code", seeds=1, sft_from="/ckpt/sft/hf", code_steps=6))
    assert {j["name"] for j in jobs if j["cmd"][0] == "sft.py"} == {"sft-mixed-s0", "sft-correct-s0"}
    keep = {j["name"]: [a for a in j["cmd"] if a.startswith("--keep=")] for j in jobs if j["cmd"][0] == "distill.py"}
    assert keep == {"distill-sft-mixed-s0": ["--keep=difficulty"], "distill-sft-correct-s0": ["--keep=correct"]}
    code = [j for j in jobs if j["cmd"][0] == "gppo.py"]
    assert all("--init_from=/ckpt/sft/hf" in j["cmd"] and "--toy_problems=0" in j["cmd"] and j["after"] == []
               and "--steps=6" in j["cmd"] and "--prompts_per_step=8" in j["cmd"] for j in code)
    assert {j["name"] for j in jobs if j["cmd"][0] == "eval.py"} == {
        "eval_code:base", "eval_code:code-soft-s0", "eval_code:code-binary-s0", "eval:sft-mixed-s0",
        "eval:sft-correct-s0"}


def test_sweep_plan_sets_updates_per_batch_rule_and_beta1(tmp_path):
    """u updates per rollout batch of 32 prompts = mini-batches of 32/u prompts; β1 = 1 at the β1 arm's point is the
    sweep's own GPPO run (trained once); the sweep's runs come before the other arms' and the other SFT runs."""
    jobs = ablate.plan(cfg(tmp_path, arms="offpolicy,beta1,sft", seeds=3, sft_from="/ckpt/sft/hf", beta1_updates=16,
                           prompts_per_step=32, mini_batch_prompts=4))
    rl = {j["name"]: j["cmd"] for j in jobs if j["cmd"][0] == "gppo.py"}
    # u = 1: one run stands for the three rules (r = 1 up to rounding: the same gradient)
    assert len(rl) == (1 + 3 + 3 + 2) * 3
    assert "grpo-u1-s0" not in rl and "cispo-u1-s0" not in rl
    assert ablate.run_name("cispo-u1", ablate.AblateConfig()) == "gppo-u1"
    parsed = {n: dict(a[2:].split("=", 1) for a in c[1:]) for n, c in rl.items()}   # the last value of a key wins
    for rule in ("gppo", "grpo", "cispo"):
        for u, mb in ((1, "32"), (4, "8"), (16, "2")):
            o = parsed[f"{rule if u > 1 else 'gppo'}-u{u}-s2"]
            assert (o["mini_batch_prompts"], o["seed"], o["init_from"]) == (mb, "2", "/ckpt/sft/hf")
            assert o["loss_mode"] == (rule if u > 1 else "gppo")
            assert (float(o["lr"]), o["max_gen_rounds"]) == (5e-5, "3")   # the sweep's lr; full batches (refill)
            assert "beta1" not in o
    assert parsed["gppo-b0.25-uB-s0"]["beta1"] == "0.25" and parsed["gppo-b0.25-uB-s0"]["mini_batch_prompts"] == "2"
    assert "gppo-b1-uB-s0" not in rl
    names = [j["name"] for j in jobs]
    # longest first: the SFTs (8 min, each after its data), then RL runs by updates per batch (u = 16 takes longest),
    # the evals last
    kinds = [j["cmd"][0] for j in jobs]
    assert kinds == sorted(kinds, key=["distill.py", "sft.py", "gppo.py", "eval.py"].index)
    assert names.index("cispo-u16-s2") < names.index("grpo-u4-s0") < names.index("gppo-u1-s0")
    # the higher-lr point of the sweep: its own lr, the last sweep point's updates
    assert ablate.rl_options("cispo-u16-lr0.0002", ablate.AblateConfig()) == [
        "--loss_mode=cispo", "--mini_batch_prompts=1", "--lr=0.0002"]
    with pytest.raises(SystemExit, match="multiple of every sweep point"):
        ablate.AblateConfig(prompts_per_step=24, mini_batch_prompts=4)


def test_run_stats_against_hand_computed_means():
    series = {"accuracy": [[(s, s / 10) for s in range(1, 8)], [(s, 0.5) for s in range(1, 8)]],
              "entropy": [[(s, 1.0) for s in range(1, 8)], [(s, 2.0 if s > 2 else 9.0) for s in range(1, 8)]],
              "clip_frac_low": [[(1, 0.01), (2, 0.03)], [(1, 0.05), (2, 0.05)]],
              "clip_frac_high": [[(1, 0.0)], []], "approx_kl": [[(1, 1e-3)], [(1, 3e-3)]]}
    st = ablate.run_stats(series)
    assert st["accuracy_last5"][0] == pytest.approx((0.5 + 0.5) / 2)         # seed 0: mean(.3 .. .7) = .5
    assert st["entropy_last5"] == (pytest.approx(1.5), pytest.approx(0.5 ** 0.5))   # the 9.0s fall before the last 5
    assert st["clip_frac_low_pct"][0] == pytest.approx((2.0 + 5.0) / 2)       # in %, each seed's mean over steps
    assert st["clip_frac_high_pct"] == (0.0, 0.0)                             # a seed with no record is left out
    assert st["approx_kl"][0] == pytest.approx(2e-3)


def test_report_on_synthetic_runs(tmp_path, capsys):
    c = cfg(tmp_path, arms="loss,code,sft", seeds=2, steps=20, code_steps=20, eval_every=10, target=0.75)
    runs = os.path.join(c.out_dir, "runs")
    for s, accs in enumerate(([0.5, 0.7, 0.9], [0.5, 0.9, 0.9])):
        for name, shift in (("gppo", 0.0), ("grpo", -0.1), ("cispo", -0.05)):
            write_jsonl(os.path.join(runs, f"{name}-s{s}", "metrics.jsonl"),
                        [{"step": 0, "eval_avg_k": accs[0]}] + [
                            {"step": k, "reward": 0.5, **({"eval_avg_k": accs[k // 10] + shift} if k % 10 == 0 else {})}
                            for k in range(1, 21)])
        for name in ("code-soft", "code-binary"):
            write_jsonl(os.path.join(runs, f"{name}-s{s}", "metrics.jsonl"),
                        [{"step": k, "reward": 0.5, "accuracy": k / 20} for k in range(1, 21)])
            write_results(os.path.join(runs, f"{name}-s{s}", "eval_code"), {"toy_code": 0.25 + 0.5 * s})
        for name, easy, hard in (("sft-mixed", 0.9, 0.7), ("sft-correct", 1.0, 0.6)):
            write_results(os.path.join(runs, f"{name}-s{s}", "eval"), {"countdown_3": easy, "countdown_4": hard})
    ablate.report(c, [1.5, 2.5])
    md = open(os.path.join(c.out_dir, "ablation.md")).read()
    assert "| GPPO | 0.500 ± 0.000 | 0.800 ± 0.141 | 0.900 ± 0.000 | 15 ± 7 (2/2 seeds) |" in md
    assert "| GRPO | 0.500 ± 0.000 | 0.700 ± 0.141 | 0.800 ± 0.000 | 15 ± 7 (2/2 seeds) |" in md
    # code: on-policy accuracy k/20 at step k, averaged over the last 20/4 = 5 steps; ≥ 0.75 from step 17 on
    assert "| soft | 0.150 ± 0.000 | 0.400 ± 0.000 | 0.650 ± 0.000 | 0.900 ± 0.000 | 17 ± 0 (2/2 seeds) | 0.500 ± 0.354 |" in md
    assert "| only-correct (--keep=correct) | 1.000 ± 0.000 | 0.600 ± 0.000 |" in md and "4 min in 2 invocation(s)" in md
    # the verdicts: paired by seed, Holm over the report's 5 claims. Last held-out Avg@k 0.9 vs 0.8 on both seeds: the
    # same difference on each seed (no spread), so paired it is certain; code 0.25 / 0.75 in both arms: no difference
    assert "| loss: GPPO > GRPO | +0.100 | [+0.100, +0.100] | [+0.100, +0.100] | 0 (0) | **reproduced** |" in md
    assert "| code: soft > binary | +0.000 |" in md and "**not resolved (minimum detectable effect 0.000" in md
    assert "| sft_hard: mixed (the difficulty rule) > only-correct (--keep=correct) | +0.100 |" in md
    assert "| sft_easy: only-correct (--keep=correct) > mixed (the difficulty rule) | +0.100 |" in md
    out = json.load(open(os.path.join(c.out_dir, "ablation.json")))
    # loss: GPPO − CISPO is 0.05 on both seeds; the family's p values go to Holm together
    assert [v["claim"] for v in out["verdicts"]] == [
        "loss: GPPO > GRPO", "loss: GPPO > CISPO", "code: soft > binary",
        "sft_easy: only-correct (--keep=correct) > mixed (the difficulty rule)",
        "sft_hard: mixed (the difficulty rule) > only-correct (--keep=correct)"]
    assert out["verdicts"][1]["effect"] == pytest.approx(0.05) and out["verdicts"][1]["verdict"] == "reproduced"
    assert out["arms"]["loss"]["GPPO"]["curves"][1] == [[0, 0.5], [10, 0.9], [20, 0.9]]


STAND_IN = textwrap.dedent("""
    import os, sys
    out, fail = sys.argv[1], sys.argv[2] == "fail"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "..", "order.txt"), "a") as f:
        f.write(os.path.basename(out) + "\\n")
    if fail:
        sys.exit(3)
    open(os.path.join(out, "done"), "w").close()
""")


def test_scheduler_runs_in_dependency_order_skips_dependents_of_failures_and_resumes(tmp_path, capsys):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    runs = tmp_path / "runs"

    def job(name, after=(), fail=False):
        d = str(runs / name)
        return dict(name=name, dir=d, cmd=[str(script), d, "fail" if fail else "ok"], after=list(after), steps=None,
                    done=lambda: os.path.exists(os.path.join(d, "done")))
    jobs = [job("base"), job("a", ["base"]), job("bad", ["base"], fail=True), job("after_bad", ["bad"]), job("b", ["a"])]
    failed = ablate.run_jobs(jobs, ablate.AblateConfig(parallel=2))
    assert failed == {"bad", "after_bad"}
    order = (runs / "order.txt").read_text().split()
    assert order[0] == "base" and order.index("a") < order.index("b") and "after_bad" not in order
    assert "FAILED bad (exit 3)" in capsys.readouterr().out
    # a second invocation runs only what is not done
    (runs / "order.txt").unlink()
    jobs[2] = job("bad", ["base"])
    assert ablate.run_jobs(jobs, ablate.AblateConfig(parallel=2)) == set()
    assert sorted((runs / "order.txt").read_text().split()) == ["after_bad", "bad"]


def test_held_out_kind_follows_gppo_args():
    assert ablate.held_out_kind(3, "") == "3-number"
    assert ablate.held_out_kind(3, "--toy_numbers=4") == "4-number"
    # the last one wins, as parts/cli.py reads it
    assert ablate.held_out_kind(4, "--lr=1e-5 --toy_numbers=4 --toy_numbers=3") == "3-number"
