"""experiments/ablate.py without training anything: its aggregation against hand-computed numbers,
the report on synthetic run directories, the run plan, and the scheduler (order, failure, resume)
with stand-in scripts."""

import importlib.util
import json
import os
import subprocess
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location(
    "ablate", os.path.join(ROOT, "experiments", "ablate.py")
)
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
    write_jsonl(
        path,
        [
            {"step": 0, "eval_accuracy": 0.1},
            {"step": 1, "reward": 0.2},
            {"step": 2, "reward": 0.3},
            # step 2 again: a resumed run
            {"step": 2, "reward": 0.5},
            {"step": 3, "reward": 0.9},
        ],
    )
    assert ablate.read_metrics(path, max_step=2) == {
        0: {"step": 0, "eval_accuracy": 0.1},
        1: {"step": 1, "reward": 0.2},
        2: {"step": 2, "reward": 0.5},
    }
    assert ablate.read_metrics(str(tmp_path / "missing.jsonl")) == {}


def test_curve_and_the_metric_against_hand_computed_values():
    records = {1: {"accuracy": 0.0}, 2: {"accuracy": 0.5}, 3: {"accuracy": 1.0}, 4: {"other": 7}}
    assert ablate.curve(records, "accuracy") == [(1, 0.0), (2, 0.5), (3, 1.0)]
    assert ablate.curve(records, "accuracy", window=2) == [(1, 0.0), (2, 0.25), (3, 0.75)]
    run = {
        0: {"eval_avg_k": 0.2},
        **{s: {"accuracy": s / 10} for s in range(1, 6)},
        6: {"accuracy": 0.6, "eval_avg_k": 0.7},
    }
    # on_policy: steps 3..6 after a warmup of 2: (.3 + .4 + .5 + .6) / 4; held_out: the last step's
    # Avg@k
    assert ablate.metric_value(run, 6, 2, "on_policy") == pytest.approx(0.45)
    assert ablate.metric_value(run, 6, 2, "held_out") == 0.7
    # unfinished: no value
    assert ablate.metric_value(run, 7, 2, "on_policy") is None
    # no step after warmup: all steps
    assert ablate.metric_value(run, 6, 10, "on_policy") == pytest.approx(0.35)
    assert ablate.mean_std([None, None]) == (None, None) and ablate.mean_std([0.5]) == (0.5, 0.0)


def cfg(tmp_path, **kw):
    return ablate.AblateConfig(out_dir=str(tmp_path / "abl"), **kw)


def test_plan_shares_runs_one_sft_checkpoint_and_orders_seed_by_seed(tmp_path):
    jobs = ablate.plan(cfg(tmp_path, arms="loss,alpha,filter", seeds=2))
    names = [j["name"] for j in jobs]
    # the base model's toy files and data first (tools/toy.py, then distill.py's toy recipe: the
    # paper's rule), then the base model, trained on them
    runs = os.path.join(str(tmp_path / "abl"), "runs")
    assert (
        names[:3] == ["toy-s0", "distill-sft-mixed-s0", "sft-mixed-s0"]
        and "--keep=difficulty" in jobs[1]["cmd"]
    )
    assert {"--seed=0", "--rl_seed=0", "--test_problems=400", f"--out={runs}/toy-s0"} <= set(
        jobs[0]["cmd"]
    )
    assert (
        jobs[1]["after"] == ["toy-s0"]
        and f"--responses={runs}/toy-s0/teacher/countdown_3.jsonl,"
        f"{runs}/toy-s0/teacher/countdown_4.jsonl,{runs}/toy-s0/teacher/toy_code.jsonl"
        in jobs[1]["cmd"]
    )
    assert (
        jobs[2]["after"] == ["distill-sft-mixed-s0"]
        and f"--data={runs}/distill-sft-mixed-s0/sft.jsonl" in jobs[2]["cmd"]
        and f"--tokenizer={runs}/toy-s0/tokenizer" in jobs[2]["cmd"]
    )
    rl = [j for j in jobs if j["cmd"][0] == "gppo.py"]
    assert sorted(j["name"] for j in rl) == sorted(
        f"{r}-s{s}"
        for r in (
            "gppo",
            "grpo",
            "cispo",
            "gppo-b0.5",
            "gppo-b0.25",
            "alpha0",
            "alpha0.2",
            "nofilter",
        )
        for s in (0, 1)
    )
    base = os.path.join(runs, "sft-mixed-s0", "hf")
    assert all(
        f"--init_from={base}" in j["cmd"] and j["after"] == ["sft-mixed-s0", f"toy-s{j['seed']}"]
        for j in rl
    )
    # seed s trains on the RL prompts of its own toy files (tools/toy.py --rl_seed=s), as gppo.py
    # --seed=s did
    assert all(f"--math_data={runs}/toy-s{j['seed']}/rl/countdown_3.jsonl" in j["cmd"] for j in rl)
    assert [j["name"] for j in jobs if j["cmd"][0] == "tools/toy.py"] == ["toy-s0", "toy-s1"]
    assert all(
        "--prompts_per_step=16" in j["cmd"] and "--mini_batch_prompts=2" in j["cmd"] for j in rl
    )
    assert all("--warmup_steps=10" in j["cmd"] and "--eval_every=0" in j["cmd"] for j in rl)
    assert [a for a in rl[0]["cmd"] if a.startswith("--beta1")] == [] and "--beta1=0.25" in jobs[
        names.index("gppo-b0.25-s1")
    ]["cmd"]
    # every math RL run ends with a held-out eval of 400 problems x 5 at the RL temperature
    final = {j["name"]: j for j in jobs if j["cmd"][0] == "eval.py"}
    assert set(final) == {f"eval_final:{j['name']}" for j in rl}
    sets = f"--math_data={runs}/toy-s1/test/countdown_3.jsonl,{runs}/toy-s1/test/countdown_4.jsonl"
    assert {sets, "--k=5", "--temperature=1.0", "--top_p=1.0"} <= set(
        final["eval_final:gppo-s1"]["cmd"]
    )
    # seed by seed: every seed-0 job before any seed-1 job, a seed's toy files first
    seeds = [j["seed"] for j in jobs[3:]]
    assert seeds == sorted(seeds) and jobs[seeds.index(1) + 3]["name"] == "toy-s1"
    # train.sh's RL set (3-number prompts) by default; --toy_numbers moves every math run, and
    # --gppo_args comes last
    hard = ablate.plan(cfg(tmp_path, arms="loss", seeds=1, toy_numbers=4, gppo_args="--lr=1e-5"))
    first_rl = [j for j in hard if j["cmd"][0] == "gppo.py"][0]
    assert f"--math_data={runs}/toy-s0/rl/countdown_4.jsonl" in first_rl["cmd"]
    assert (
        f"--eval_data={runs}/toy-s0/test/countdown_4.jsonl" in first_rl["cmd"]
        and first_rl["cmd"][-1] == "--lr=1e-5"
    )
    # with --sft_from the sft arm still trains both of its models, the RL runs use the given one
    jobs = ablate.plan(
        cfg(tmp_path, arms="sft,code", seeds=1, sft_seeds=1, sft_from="/ckpt/sft/hf", code_steps=6)
    )
    assert {j["name"] for j in jobs if j["cmd"][0] == "sft.py"} == {
        "sft-mixed-s0",
        "sft-correct-s0",
    }
    keep = {
        j["name"]: [a for a in j["cmd"] if a.startswith("--keep=")]
        for j in jobs
        if j["cmd"][0] == "distill.py"
    }
    assert keep == {
        "distill-sft-mixed-s0": ["--keep=difficulty"],
        "distill-sft-correct-s0": ["--keep=correct"],
    }
    code = [j for j in jobs if j["cmd"][0] == "gppo.py"]
    assert all(
        "--init_from=/ckpt/sft/hf" in j["cmd"]
        and j["after"] == ["toy-s0"]
        and "--steps=6" in j["cmd"]
        and "--prompts_per_step=8" in j["cmd"]
        for j in code
    )
    runs = os.path.join(str(tmp_path / "abl"), "runs")
    assert all(
        f"--code_data={runs}/toy-s0/rl/toy_code.jsonl" in j["cmd"]
        and not any(a.startswith("--math_data") for a in j["cmd"])
        for j in code
    )
    assert {j["name"] for j in jobs if j["cmd"][0] == "eval.py"} == {
        "eval_code:base",
        "eval_code:code-soft-s0",
        "eval_code:code-binary-s0",
        "eval:sft-mixed-s0",
        "eval:sft-correct-s0",
    }
    sets = f"--math_data={runs}/toy-s0/test/countdown_3.jsonl,{runs}/toy-s0/test/countdown_4.jsonl"
    assert sets in [j for j in jobs if j["name"] == "eval:sft-mixed-s0"][0]["cmd"]


def pilot_metrics(out_dir, clipped: dict, steps=15):
    """Finished pilot runs: per candidate lr, the clipped fraction logged at every step (a tenth in
    the warmup)."""
    for lr, frac in clipped.items():
        d = os.path.join(out_dir, "runs", f"pilot-lr{lr:g}-s100")
        write_jsonl(
            os.path.join(d, "metrics.jsonl"),
            [
                {
                    "step": k,
                    "accuracy": 0.4,
                    "clip_frac_low": (frac if k > 10 else frac / 10) * 0.8,
                    "clip_frac_high": (frac if k > 10 else frac / 10) * 0.2,
                }
                for k in range(1, steps + 1)
            ],
        )
        os.makedirs(os.path.join(d, "hf"))
        open(os.path.join(d, "hf", "tokenizer.json"), "w").close()


def test_the_pilot_picks_the_off_policy_lr_from_clip_fractions_only(tmp_path):
    c = cfg(tmp_path, arms="loss_off", seeds=2, pilot_lrs="1e-4,2e-4,4e-4")
    jobs = ablate.plan(c)
    # before the pilot: the base, then GPPO at each candidate lr (16 updates per batch, seed 100, no
    # held-out eval)
    assert [j["name"] for j in jobs] == [
        "toy-s0",
        "distill-sft-mixed-s0",
        "sft-mixed-s0",
        "toy-s100",
        "pilot-lr0.0001-s100",
        "pilot-lr0.0002-s100",
        "pilot-lr0.0004-s100",
    ]
    parsed = dict(a[2:].split("=", 1) for a in jobs[5]["cmd"][1:])
    assert (parsed["lr"], parsed["mini_batch_prompts"], parsed["steps"], parsed["eval_every"]) == (
        "0.0002",
        "1",
        "15",
        "0",
    )
    assert ablate.off_policy_lr(c)[0] is None
    pilot_metrics(c.out_dir, {1e-4: 0.005, 2e-4: 0.03, 4e-4: 0.09})
    lr, clipped, updated = ablate.off_policy_lr(c)
    # the smallest reaching 2% after the warmup
    assert lr == 2e-4 and clipped[2e-4] == pytest.approx(0.03) and updated[2e-4] == 5
    off = {
        j["name"]: dict(a[2:].split("=", 1) for a in j["cmd"][1:])
        for j in ablate.plan(c)
        if "-off-" in j["name"] and j["cmd"][0] == "gppo.py"
    }
    assert set(off) == {
        f"{r}-off-s{s}"
        for r in ("gppo", "grpo", "cispo", "gppo-b0.5", "gppo-b0.25")
        for s in (0, 1)
    }
    assert all((o["lr"], o["mini_batch_prompts"]) == ("0.0002", "1") for o in off.values())
    assert (
        off["gppo-b0.25-off-s1"]["beta1"] == "0.25" and off["cispo-off-s0"]["loss_mode"] == "cispo"
    )
    pilot_metrics(str(tmp_path / "none" / "abl"), {1e-4: 0.001, 2e-4: 0.002, 4e-4: 0.004})
    # none: the largest
    assert ablate.off_policy_lr(cfg(tmp_path / "none", pilot_lrs="1e-4,2e-4,4e-4"))[0] == 4e-4
    with pytest.raises(ValueError, match="pilot_steps=10 must exceed warmup_steps=10"):
        ablate.AblateConfig(pilot_steps=10)


def test_a_pilot_step_without_an_update_is_not_counted_as_clipping_nothing(tmp_path):
    """A step that made no update (every group filtered, e.g. a collapsed run) logs no clipped
    fraction: the candidate's mean is over the steps that updated, and a candidate with none is
    "no update", not 0% (its run could not clip). The rule is the protocol's: the smallest reaching
    the target, else the largest."""
    c = cfg(tmp_path, arms="loss_off", seeds=2, pilot_lrs="1e-4,2e-4,4e-4")
    pilot_metrics(c.out_dir, {1e-4: 0.01, 2e-4: 0.03, 4e-4: 0.05})
    for lr, kept in ((2e-4, (11, 14)), (4e-4, ())):
        path = os.path.join(c.out_dir, "runs", f"pilot-lr{lr:g}-s100", "metrics.jsonl")
        records = [json.loads(line) for line in open(path)]
        for r in records:
            if r["step"] > 10 and r["step"] not in kept:
                del r["clip_frac_low"], r["clip_frac_high"]
        write_jsonl(path, records)
    lr, clipped, updated = ablate.off_policy_lr(c)
    assert clipped == {1e-4: pytest.approx(0.01), 2e-4: pytest.approx(0.03), 4e-4: None}
    assert updated == {1e-4: 5, 2e-4: 2, 4e-4: 0} and lr == 2e-4
    assert ablate.pilot_text(c, clipped, updated) == (
        "lr 0.0001: 1.00%, lr 0.0002: 3.00% (2 of 5 steps updated), lr 0.0004: no update (0 of 5 "
        "steps updated)"
    )


def test_sweep_plan_sets_updates_per_batch_rule_and_beta1(tmp_path):
    """u updates per rollout batch of 32 prompts = mini-batches of 32/u prompts; β1 = 1 at the β1
    arm's point is the sweep's own GPPO run (trained once)."""
    jobs = ablate.plan(
        cfg(
            tmp_path,
            arms="offpolicy,beta1,sft",
            seeds=3,
            sft_from="/ckpt/sft/hf",
            beta1_updates=16,
            prompts_per_step=32,
            mini_batch_prompts=4,
        )
    )
    rl = {j["name"]: j["cmd"] for j in jobs if j["cmd"][0] == "gppo.py"}
    # u = 1: one run stands for the three rules (r = 1 up to rounding: the same gradient)
    assert len(rl) == (1 + 3 + 3 + 2) * 3
    assert "grpo-u1-s0" not in rl and "cispo-u1-s0" not in rl
    assert ablate.run_name("cispo-u1", ablate.AblateConfig()) == "gppo-u1"
    # the last value of a key wins
    parsed = {n: dict(a[2:].split("=", 1) for a in c[1:]) for n, c in rl.items()}
    for rule in ("gppo", "grpo", "cispo"):
        for u, mb in ((1, "32"), (4, "8"), (16, "2")):
            o = parsed[f"{rule if u > 1 else 'gppo'}-u{u}-s2"]
            assert (o["mini_batch_prompts"], o["seed"], o["init_from"]) == (mb, "2", "/ckpt/sft/hf")
            assert o["loss_mode"] == (rule if u > 1 else "gppo")
            # the sweep's lr; full batches (refill)
            assert (float(o["lr"]), o["max_gen_rounds"]) == (5e-5, "3")
            assert "beta1" not in o
    assert (
        parsed["gppo-b0.25-uB-s0"]["beta1"] == "0.25"
        and parsed["gppo-b0.25-uB-s0"]["mini_batch_prompts"] == "2"
    )
    assert "gppo-b1-uB-s0" not in rl
    names = [j["name"] for j in jobs]
    # within a seed longest first: the SFT runs (12 core-min), then RL runs by updates per batch,
    # the evals last
    assert (
        names.index("cispo-u16-s0")
        < names.index("grpo-u4-s0")
        < names.index("gppo-u1-s0")
        < names.index("eval_final:gppo-u1-s0")
        < names.index("gppo-u1-s1")
    )
    # the higher-lr point of the sweep: its own lr, the last sweep point's updates
    assert ablate.rl_options("cispo-u16-lr0.0002", ablate.AblateConfig()) == [
        "--loss_mode=cispo",
        "--mini_batch_prompts=1",
        "--lr=0.0002",
    ]
    with pytest.raises(ValueError, match="multiple of every sweep point"):
        ablate.AblateConfig(prompts_per_step=24, mini_batch_prompts=4)


def test_run_stats_against_hand_computed_means():
    series = {
        "accuracy": [[(s, s / 10) for s in range(1, 8)], [(s, 0.5) for s in range(1, 8)]],
        "entropy": [
            [(s, 1.0) for s in range(1, 8)],
            [(s, 2.0 if s > 2 else 9.0) for s in range(1, 8)],
        ],
        "clip_frac_low": [[(1, 0.01), (2, 0.03)], [(1, 0.05), (2, 0.05)]],
        "clip_frac_high": [[(1, 0.0)], []],
        "approx_kl": [[(1, 1e-3)], [(1, 3e-3)]],
        "coef_share_clipped_low": [[(1, 0.02), (2, 0.04)], [(1, 0.0), (2, 0.0)]],
        "grad_norm": [[(1, 0.5), (2, 1.5)], [(1, 0.2), (2, 0.2)]],
        "grad_norm_max": [[(1, 0.6), (2, 2.0)], [(1, 0.3), (2, 0.2)]],
        "grad_clipped_frac": [[(1, 0.0), (2, 0.5)], [(1, 0.0), (2, 0.0)]],
    }
    st = ablate.run_stats(series)
    # seed 0: mean(.3 .. .7) = .5
    assert st["accuracy_last5"][0] == pytest.approx((0.5 + 0.5) / 2)
    assert st["accuracy_first"][0] == pytest.approx((0.1 + 0.5) / 2)  # step 1 of each seed
    # the 9.0s fall before the last 5
    assert st["entropy_last5"] == (pytest.approx(1.5), pytest.approx(0.5**0.5))
    # in %, each seed's mean over steps
    assert st["clip_frac_low_pct"][0] == pytest.approx((2.0 + 5.0) / 2)
    # a seed with no record is left out
    assert st["clip_frac_high_pct"] == (0.0, 0.0)
    assert st["approx_kl"][0] == pytest.approx(2e-3)
    assert st["share_low_pct"][0] == pytest.approx((3.0 + 0.0) / 2) and st["share_high_pct"] == (
        None,
        None,
    )
    assert st["grad_norm"][0] == pytest.approx((1.0 + 0.2) / 2)
    # each seed's largest, averaged
    assert st["grad_norm_max"][0] == pytest.approx((2.0 + 0.3) / 2)
    assert st["grad_clip_pct"][0] == pytest.approx((25.0 + 0.0) / 2)
    # no high-side share logged
    assert ablate.clipped_share(st) is None


def test_planning_sds_trace_to_the_committed_results():
    """The design's SDs are the committed 3-number run's
    (experiments/results/verdicts_corrected.json)."""
    data = json.load(open(os.path.join(ROOT, "experiments", "results", "verdicts_corrected.json")))
    family = data["families"]["countdown3_all"]
    rl = [
        c["sd_diff"]
        for c in family["on_policy_after_warmup"]["claims"]
        if not c["claim"].startswith("soft")
    ]
    code = [
        c["sd_diff"]
        for c in family["on_policy_after_warmup"]["claims"]
        if c["claim"].startswith("soft")
    ]
    assert ablate.PLANNING_SD["rl"] == pytest.approx(
        (sum(x * x for x in rl) / len(rl)) ** 0.5, abs=5e-5
    )
    assert ablate.PLANNING_SD["code"] == pytest.approx(code[0], abs=5e-5)
    sft = {c["claim"][:8]: c for c in family["claims"] if c["claim"].startswith("SFT")}
    for key, name in (("sft_easy", "SFT easy"), ("sft_hard", "SFT hard")):
        diffs = [a - b for a, b in zip(sft[name]["favoured"], sft[name]["other"])]
        mean = sum(diffs) / len(diffs)
        sd = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5
        assert ablate.PLANNING_SD[key] == pytest.approx(sd, abs=5e-4)
    rows = ablate.design(ablate.AblateConfig())
    assert len(rows) == 14 and all(
        r["mde"] <= 0.03 for r in rows if not r["claim"].startswith("sft")
    )


def synthetic_run(runs, name, seed, accuracy, steps=20, share=0.05, held_out=None):
    """A finished gppo.py run: on-policy accuracy `accuracy(step)`, a constant share of the
    gradient's coefficients on clipped tokens (low side), and the final eval's Avg@4 on 3-number
    problems."""
    write_jsonl(
        os.path.join(runs, f"{name}-s{seed}", "metrics.jsonl"),
        [
            {
                "step": k,
                "reward": 0.5,
                "accuracy": accuracy(k),
                "entropy": 1.0,
                "clip_frac_low": 0.01,
                "clip_frac_high": 0.0,
                "approx_kl": 1e-3,
                "coef_share_clipped_low": share,
                "coef_share_clipped_high": 0.0,
                "grad_norm": 0.5,
                "grad_norm_max": 0.7,
                "grad_clipped_frac": 0.0,
            }
            for k in range(1, steps + 1)
        ],
    )
    if held_out is not None:
        write_results(
            os.path.join(runs, f"{name}-s{seed}", "eval_final"),
            {"countdown_3": held_out, "countdown_4": 0.1},
        )


def test_report_on_synthetic_runs(tmp_path, capsys):
    c = cfg(tmp_path, arms="loss,code,sft", seeds=3, sft_seeds=2, steps=20, code_steps=20)
    runs = os.path.join(c.out_dir, "runs")
    # on-policy accuracy: 0.3 + seed/10 at every step, GRPO 0.05 below GPPO on every seed (paired:
    # certain), CISPO +0.01 / -0.01 / 0 around GPPO (no effect); β1 variants as GPPO with seed noise
    shift = {
        "gppo": [0, 0, 0],
        "grpo": [-0.05, -0.05, -0.05],
        "cispo": [0.01, -0.01, 0.0],
        "gppo-b0.5": [0.02, -0.01, 0.0],
        "gppo-b0.25": [0.0, 0.01, -0.02],
    }
    for s in range(3):
        for name, d in shift.items():
            synthetic_run(
                runs,
                name,
                s,
                lambda k, s=s, d=d: 0.3 + s / 10 + d[s] + (0.2 if k <= 10 else 0.0),
                held_out=0.5 + d[s],
            )
        for name, d in (("code-soft", 0.0), ("code-binary", 0.02)):
            synthetic_run(runs, name, s, lambda k, s=s, d=d: 0.5 + d + s / 20)
            write_results(
                os.path.join(runs, f"{name}-s{s}", "eval_code"), {"toy_code": 0.25 + 0.5 * s}
            )
    for s in range(2):
        for name, easy, hard in (("sft-mixed", 0.9, 0.7), ("sft-correct", 1.0, 0.6)):
            write_results(
                os.path.join(runs, f"{name}-s{s}", "eval"),
                {"countdown_3": easy, "countdown_4": hard - s / 10},
            )
    ablate.report(c, [1.5, 2.5])
    md = open(os.path.join(c.out_dir, "ablation.md")).read()
    # the metric: steps 11-20 only (the warmup's +0.2 left out); per seed 0.3, 0.4, 0.5 for GPPO
    # step 1 is in the warmup (+0.2)
    assert "| GPPO | 3 | 0.400 ± 0.100 | 0.500 ± 0.000 | 0.600 ± 0.100 → 0.400 ± 0.100 |" in md
    # entropy (last 5), entropy of clipped tokens (none logged), KL, clipped % and gradient shares %
    # by side
    shown = "| 1.000 ± 0.000 | — | 0.0010 ± 0.0000 | 1.00 ± 0.00 / 0.00 ± 0.00 | 5.00 ± 0.00 / 0.00 ± 0.00 |"
    assert shown in md
    assert (
        "| 0.500 ± 0.000 (0.700 ± 0.000) | 0.0 ± 0.0 |" in md and "4 min in 2 invocation(s)" in md
    )
    assert "| only-correct (--keep=correct) | 1.000 ± 0.000 | 0.550 ± 0.071 |" in md
    out = json.load(open(os.path.join(c.out_dir, "ablation.json")))
    v = {x["claim"]: x for x in out["verdicts"]}
    # 7 claims (4 loss, code, 2 sft; none untestable at a 5% share): GRPO's deficit is the same on
    # every seed
    assert len(v) == 7 and v["loss: GPPO > GRPO"]["verdict"] == "reproduced"
    assert v["loss: GPPO > GRPO"]["effect"] == pytest.approx(0.05)
    assert v["loss: GPPO > CISPO"]["verdict"].startswith("not resolved (minimum detectable effect")
    code = v["code: soft > binary"]
    assert code["effect"] == pytest.approx(-0.02) and code["verdict"] == "reversed"
    # pairs (df), effect, 95% CI, the interval at the deciding Holm step's level (1 − 0.05/7), the
    # minimum detectable effect (no spread over the seeds: 0)
    assert (
        "| loss: GPPO > GRPO | 3 (2) | +0.050 | [+0.050, +0.050] | [+0.050, +0.050] at 99.29% | "
        "0.000 |" in md
    )
    # a claim with spread over the seeds: its MDE column is the verdict's mde (not, e.g., its SE)
    cispo = v["loss: GPPO > CISPO"]
    assert cispo["mde"] > 2 * cispo["se"] > 0
    assert f"at {100 * (1 - cispo['level']):.2f}% | {cispo['mde']:.3f} |" in md
    assert "Incomplete" not in md and out["missing_runs"] == []
    assert v["loss: GPPO > GRPO"]["seeds_paired"] == [0, 1, 2]
    # the held-out eval, beside it: paired effects with 95% intervals, no words
    held = {h["claim"]: h for h in out["held_out"]}
    assert (
        held["loss: GPPO > GRPO"]["effect"] == pytest.approx(0.05)
        and "verdict" not in held["loss: GPPO > GRPO"]
    )
    assert out["arms"]["loss"]["GPPO"]["metric"] == [
        pytest.approx(0.3),
        pytest.approx(0.4),
        pytest.approx(0.5),
    ]
    assert [r["claim"] for r in out["design"]][:2] == ["loss: GPPO > GRPO", "loss: GPPO > CISPO"]


def test_a_clipping_claim_where_clipped_tokens_carry_no_gradient_is_untestable(tmp_path):
    """Both arms with 0.4% of the gradient's coefficients on clipped tokens (under untestable_share
    1%): no verdict, and the claim leaves Holm's family, so the other claims are corrected for one
    claim fewer."""
    c = cfg(tmp_path, arms="loss", seeds=3, steps=20)
    runs = os.path.join(c.out_dir, "runs")
    for s in range(3):
        for name, d, share in (
            ("gppo", 0.0, 0.004),
            ("grpo", -0.05, 0.0),
            ("cispo", -0.01 * s, 0.02),
            ("gppo-b0.5", 0.0, 0.004),
            ("gppo-b0.25", 0.0, 0.004),
        ):
            synthetic_run(runs, name, s, lambda k, s=s, d=d: 0.3 + s / 10 + d, share=share)
    ablate.report(c, [1.0])
    v = {
        x["claim"]: x for x in json.load(open(os.path.join(c.out_dir, "ablation.json")))["verdicts"]
    }
    assert v["loss: GPPO > GRPO"]["verdict"] == (
        "untestable in this regime (clipped tokens carry 0.40% of the gradient's coefficients)"
    )
    assert (
        v["loss: GPPO > GRPO"]["effect"] == pytest.approx(0.05)
        and "ci_holm" not in v["loss: GPPO > GRPO"]
    )
    assert v["loss: GPPO β1=0.5 > GPPO"]["verdict"].startswith("untestable")
    # CISPO's 2% share: tested, alone in the family
    assert v["loss: GPPO > CISPO"]["family_size"] == 1
    assert v["loss: GPPO > GRPO"]["share"] == pytest.approx(0.004)
    assert v["loss: GPPO > GRPO"]["threshold"] == 0.01


def test_a_missing_run_is_named_and_its_claim_stays_in_the_family(tmp_path):
    """A run that failed or has not finished: the report says it is incomplete and names the run,
    the arm's row counts the seeds it has, and the claim keeps its place in Holm's family."""
    c = cfg(tmp_path, arms="loss,alpha,filter", seeds=3, steps=20)
    runs = os.path.join(c.out_dir, "runs")
    for s in range(3):
        for name, d in (
            ("gppo", 0.0),
            ("grpo", -0.05),
            ("cispo", 0.0),
            ("gppo-b0.5", 0.0),
            ("gppo-b0.25", 0.0),
            ("alpha0", 0.0),
            ("alpha0.2", 0.0),
            ("nofilter", 0.0),
        ):
            if (name, s) in (("cispo", 1), ("cispo", 2), ("gppo", 2)):
                continue  # runs that never finished: CISPO keeps one pair, too few to test
            synthetic_run(
                runs, name, s, lambda k, s=s, d=d: 0.3 + s / 10 + d, held_out=None if s else 0.5
            )
    ablate.report(c, [1.0])
    md = open(os.path.join(c.out_dir, "ablation.md")).read()
    out = json.load(open(os.path.join(c.out_dir, "ablation.json")))
    # GPPO's seed 2 is also alpha's α=0.1 and filter's "on": named once; a run without its held-out
    # evaluation is named too
    assert out["missing_runs"][:4] == [
        "gppo-s2",
        "gppo-s1 (held-out eval)",
        "gppo-s2 (held-out eval)",
        "grpo-s1 (held-out eval)",
    ]
    # 3 unfinished runs, and 8 variants' held-out evals of seeds 1 and 2
    assert len(out["missing_runs"]) == len(set(out["missing_runs"])) == 3 + 8 * 2
    assert "cispo-s1, cispo-s2, cispo-s1 (held-out eval)" in md
    assert "**Incomplete: 19 runs or evaluations without a result" in md
    assert "| CISPO | 1 | 0.300 ± 0.000 |" in md and "| GPPO | 2 | 0.350 ± 0.071 |" in md
    v = {x["claim"]: x for x in out["verdicts"]}
    assert v["loss: GPPO > CISPO"]["verdict"] == "missing runs"
    # seven claims in the family although one cannot be tested; GRPO's deficit is the same on
    # both pairs (p = 0): the first Holm step, at 0.05/7
    assert v["loss: GPPO > GRPO"]["family_size"] == 7
    assert v["loss: GPPO > GRPO"]["level"] == pytest.approx(0.05 / 7)
    assert v["loss: GPPO > GRPO"]["seeds_paired"] == [0, 1]


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


def test_scheduler_runs_in_dependency_order_skips_dependents_of_failures_and_resumes(
    tmp_path, capsys
):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    runs = tmp_path / "runs"

    def job(name, after=(), fail=False):
        d = str(runs / name)
        return dict(
            name=name,
            dir=d,
            cmd=[str(script), d, "fail" if fail else "ok"],
            after=list(after),
            steps=None,
            done=lambda: os.path.exists(os.path.join(d, "done")),
        )

    jobs = [
        job("base"),
        job("a", ["base"]),
        job("bad", ["base"], fail=True),
        job("after_bad", ["bad"]),
        job("b", ["a"]),
    ]
    # after_each (ablate.py saves its archive with it): once per finished job, after it is done
    seen = []
    after_each = lambda: seen.append(sorted(j["name"] for j in jobs if j["done"]()))  # noqa: E731
    failed = ablate.run_jobs(jobs, ablate.AblateConfig(parallel=2), after_each=after_each)
    assert failed == {"bad", "after_bad"}
    assert seen[0] == ["base"] and seen[-1] == ["a", "b", "base"] and len(seen) == 3
    order = (runs / "order.txt").read_text().split()
    assert order[0] == "base" and order.index("a") < order.index("b") and "after_bad" not in order
    assert "FAILED bad (exit 3)" in capsys.readouterr().out
    # a second invocation runs only what is not done
    (runs / "order.txt").unlink()
    jobs[2] = job("bad", ["base"])
    assert ablate.run_jobs(jobs, ablate.AblateConfig(parallel=2)) == set()
    assert sorted((runs / "order.txt").read_text().split()) == ["after_bad", "bad"]


def test_scheduler_stops_starting_at_the_deadline_and_adds_what_the_plan_adds(tmp_path, capsys):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    runs = tmp_path / "runs"

    def job(name, after=()):
        d = str(runs / name)
        return dict(
            name=name,
            dir=d,
            cmd=[str(script), d, "ok"],
            after=list(after),
            steps=None,
            done=lambda: os.path.exists(os.path.join(d, "done")),
        )

    # past the deadline nothing starts; the jobs stay for the next invocation
    assert ablate.run_jobs([job("a")], ablate.AblateConfig(parallel=1), deadline=0.0) == set()
    assert not (runs / "a").exists() and "1 run(s) not started" in capsys.readouterr().out
    # ... but the evaluation of a finished run (its model need not be kept for the next one)
    evaluation = tmp_path / "eval.py"
    evaluation.write_text(STAND_IN)
    finished = job("run")
    os.makedirs(finished["dir"])
    open(os.path.join(finished["dir"], "done"), "w").close()
    evals = [
        dict(job(f"eval:{r}", [r]), cmd=[str(evaluation), str(runs / f"eval-{r}"), "ok"])
        for r in ("run", "a")
    ]
    for e, r in zip(evals, ("run", "a")):
        e["done"] = lambda r=r: (runs / f"eval-{r}" / "done").exists()
    jobs = [finished, job("a"), *evals]
    assert ablate.run_jobs(jobs, ablate.AblateConfig(parallel=1), deadline=0.0) == set()
    assert (runs / "order.txt").read_text().split() == ["eval-run"]
    assert "2 run(s) not started" in capsys.readouterr().out
    (runs / "order.txt").unlink()
    # a plan that grows once "pilot" is done (the off-policy runs wait for the pilot's choice)
    # noqa
    plan = lambda: (
        [job("pilot")] + ([job("off", ["pilot"])] if (runs / "pilot" / "done").exists() else [])
    )
    assert ablate.run_jobs(plan(), ablate.AblateConfig(parallel=1), replan=plan) == set()
    assert (runs / "order.txt").read_text().split() == ["pilot", "off"]


def test_every_planned_command_parses_with_its_entry_points_config(tmp_path):
    """The options ablate.py writes (new ones included: --warmup_steps, --eval_every=0, eval.py at T
    = 1) are options the entry points have, with values their types accept: parsed by the entry
    point's own config class."""
    import distill
    import eval as evaluate
    import gppo
    import sft
    from parts.cli import parse_config
    from tools import toy

    configs = {
        "gppo.py": gppo.GPPOConfig,
        "eval.py": evaluate.EvalConfig,
        "sft.py": sft.SFTConfig,
        "distill.py": distill.DistillConfig,
        "tools/toy.py": toy.ToyConfig,
    }
    c = cfg(tmp_path, seeds=1, sft_seeds=1, pilot_lrs="1e-4,2e-4")
    pilot_metrics(c.out_dir, {1e-4: 0.01, 2e-4: 0.03})
    jobs = ablate.plan(c)
    assert {j["cmd"][0] for j in jobs} == set(configs) and any("-off-" in j["name"] for j in jobs)
    for j in jobs:
        parse_config(configs[j["cmd"][0]], j["cmd"][1:])


def test_the_default_plan_asks_the_toy_for_problems_it_has(tmp_path):
    """Every tools/toy.py command of the default plan asks for held-out problems the toy's test
    split holds (its 3-number problems in 1..12 number 439: a plan asking for 500 failed at its
    first job)."""
    from parts.cli import parse_config
    from tools import toy
    from tools.toy_tasks import countdown

    jobs = [
        j
        for j in ablate.plan(ablate.AblateConfig(out_dir=str(tmp_path)))
        if j["cmd"][0] == "tools/toy.py"
    ]
    assert jobs
    for job in jobs:
        asked = parse_config(toy.ToyConfig, job["cmd"][1:]).test_problems
        for numbers in (3, 4):
            assert len(countdown.problems(asked, numbers, toy.TEST_SEED, "test")) == asked


def test_sigterm_exits_as_a_stop_not_a_failure(capsys):
    """SIGTERM's handler says how to go on and exits 128 + SIGTERM, the status train.sh reads as a
    stop (it would call exit 1 a failure)."""
    with pytest.raises(SystemExit) as stop:
        ablate.stop_on_sigterm(15, None)
    assert stop.value.code == 143
    assert "rerun the same command to resume" in capsys.readouterr().err


def test_the_report_names_commits_cost_and_a_changed_analysis_setting(tmp_path):
    """Invocations recorded before commits were (wall minutes only) count at --parallel; a change of
    the metric or the untestable threshold between invocations is printed as a warning."""
    c = cfg(tmp_path, arms="loss", seeds=2)
    invocations = [
        dict(wall_minutes=10.0),
        dict(
            wall_minutes=5.0,
            parallel=1,
            commit="abc1234",
            metric="on_policy",
            untestable_share=0.01,
        ),
        dict(
            wall_minutes=2.5,
            parallel=2,
            commit="abc1234+",
            metric="held_out",
            untestable_share=0.01,
        ),
    ]
    lines, core = ablate.invocation_lines(c, invocations)
    assert core == pytest.approx(10 * 2 + 5 * 1 + 2.5 * 2)
    assert lines[0] == (
        "Cost: 30 core-minutes (wall time x --parallel; reward workers not counted), 1 invocation(s) "
        "recorded no settings "
        "(counted at --parallel=2). Commits: abc1234 (1), abc1234+ (1)."
    )
    assert lines[1:] == ["**Warning: --metric differed between invocations: held_out, on_policy.**"]
    # each invocation's CPU kind, where recorded (floating-point sums differ between kinds)
    kinds = [
        dict(invocations[1], cpu="EPYC, avx512f"),
        dict(invocations[1], cpu="EPYC, no avx512f"),
    ]
    assert ablate.invocation_lines(c, kinds)[0][0].endswith(
        "CPUs: EPYC, avx512f (1), EPYC, no avx512f (1)."
    )
    same = [
        dict(wall_minutes=1.0, parallel=2, commit="", metric="on_policy", untestable_share=0.01)
    ]
    assert ablate.invocation_lines(c, same)[0] == [
        "Cost: 2 core-minutes (wall time x --parallel; reward workers not counted). Commits: "
        "unknown (1)."
    ]
    os.makedirs(c.out_dir)
    ablate.report(c, [10.0, 5.0, 2.5], invocations)
    out = json.load(open(os.path.join(c.out_dir, "ablation.json")))
    assert out["core_minutes"] == pytest.approx(30) and out["invocations"] == invocations
    assert (
        ablate.git_commit().rstrip("+")
        == subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    )


def test_an_invocation_on_a_state_from_before_the_record_keeps_it_and_adds_its_own(
    tmp_path, monkeypatch
):
    """A state file written before invocations were recorded (wall minutes only) resumes: its
    invocations are kept as wall minutes, and the new one adds its commit, --parallel and the
    analysis settings."""
    c = cfg(tmp_path, arms="alpha", seeds=1, parallel=1)
    os.makedirs(c.out_dir)
    fixed = ablate.fixed_settings(c)
    path = os.path.join(c.out_dir, "ablate_state.json")
    json.dump(dict(settings=fixed, wall_minutes=[50.0, 40.0]), open(path, "w"))
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    reported = []
    monkeypatch.setattr(ablate, "report", lambda cfg, wall, inv: reported.append((wall, inv)))
    ablate.main(c)
    state = json.load(open(path))
    assert state["wall_minutes"][:2] == [50.0, 40.0] and len(state["wall_minutes"]) == 3
    old, older, new = state["invocations"]
    assert old == {"wall_minutes": 50.0} and older == {"wall_minutes": 40.0}
    assert (new["parallel"], new["metric"], new["untestable_share"]) == (1, "on_policy", 0.01)
    assert new["commit"] == ablate.git_commit() and reported[0][1] == state["invocations"]
    assert new["cpu"] == ablate.cpu_kind() and "family" in new["cpu"]
    # an older checkout resumed it meanwhile: it appended wall minutes only
    state["wall_minutes"].append(30.0)
    json.dump(state, open(path, "w"))
    ablate.main(c)
    state = json.load(open(path))
    assert [i["wall_minutes"] for i in state["invocations"][:4]] == [
        50.0,
        40.0,
        new["wall_minutes"],
        30.0,
    ]
    assert state["invocations"][3] == {"wall_minutes": 30.0} and "commit" in state["invocations"][4]
    assert len(state["wall_minutes"]) == len(state["invocations"]) == 5
    assert not os.path.exists(path + ".tmp")


def test_job_estimates_match_the_measured_durations_of_each_kind(tmp_path):
    """--dry_run's cost comes from core_minutes(): for each kind of job of the default plan it must
    be within 15% of the mean measured in the 2026-12-07 rerun (its logs' "done NAME in X min").
    Before, an eval.py run on code was put at 1.2 minutes (measured 12.8: each sample runs its
    tests in the sandbox) and one on math at 5 (measured 1.5)."""
    measured = json.load(
        open(os.path.join(ROOT, "experiments", "results", "ablate_job_minutes_2026-12-07.json"))
    )["kinds"]
    c = ablate.AblateConfig(out_dir=str(tmp_path))
    jobs = ablate.plan(c)
    # loss_off's runs join the plan after the pilot: one as dry_run estimates it
    off = f"--mini_batch_prompts={c.prompts_per_step // c.off_updates}"
    jobs.append(dict(name="gppo-off-s0", cmd=["gppo.py", "--steps=30", off]))

    def kind(job):
        cmd = job["cmd"]
        code = any(a.startswith("--code_data=") for a in cmd)
        if cmd[0] == "eval.py":
            if code:
                return "eval.py code (200 problems x 5)"
            sft = job["name"].startswith("eval:")
            return "eval.py math" + (", SFT models" if sft else "") + " (800 problems x 5)"
        if cmd[0] == "gppo.py":
            if code:
                return "gppo.py code (20 steps)"
            sixteen = job["name"].startswith("pilot") or "-off-" in job["name"]
            return f"gppo.py math, {16 if sixteen else 8} updates (30 steps)"
        if cmd[0] == "sft.py":
            return "sft.py only-correct" if "correct" in job["name"] else "sft.py mixed"
        return cmd[0]

    seen = set()
    for job in jobs:
        if job["name"].startswith("pilot"):  # 15 steps, 5 runs: not measured as a kind
            continue
        mean = measured[kind(job)]["mean"]
        # the logs give minutes to 0.1
        estimate = ablate.core_minutes(job, c)
        assert estimate == pytest.approx(mean, rel=0.15, abs=0.05), job["name"]
        seen.add(kind(job))
    assert seen == set(measured)


def test_the_eta_counts_each_pending_job_by_its_kind_scaled_by_this_invocation(
    tmp_path, monkeypatch
):
    """The progress line's total: every pending job at its own estimate, scaled by how long the
    finished jobs took against theirs. Before, a pending eval.py run on code was guessed at the
    mean of the eval.py runs on math that had finished (1.5 minutes instead of 12.8)."""
    c = cfg(tmp_path, parallel=2)
    none = str(tmp_path / "none")
    code = dict(
        name="eval_code:code-soft-s1",
        dir=none,
        steps=None,
        cmd=["eval.py", "--code_data=t.jsonl"],
        problems=200,
    )
    math_eval = dict(
        name="eval_final:gppo-s1",
        dir=none,
        steps=None,
        cmd=["eval.py", "--max_tokens=320"],
        problems=800,
    )
    estimates = [ablate.core_minutes(j, c) for j in (code, math_eval)]
    assert estimates == pytest.approx([12.8, 1.5])
    # finished jobs took twice their estimates (measured, estimated minutes); nothing runs
    line = ablate.eta([], [code, math_eval], [(3.0, 2.0), (9.0, 4.0)], c)
    assert line.endswith(f"all planned: ETA {round(2 * sum(estimates) / 2)} min"), line
    # an evaluation running for a minute (no progress to read): its estimate less that minute
    monkeypatch.setattr(ablate.time, "time", lambda: 1000.0)
    running = dict(code, start=940.0)
    line = ablate.eta([running], [], [], c, deadline=1000.0 + 25 * 60)
    assert "eval_code:code-soft-s1 (ETA ~11.8 min)" in line
    assert line.endswith("all planned: ETA 6 min; no run starts after 25 more min"), line


def checkpoint(run_dir, step: int):
    """A complete checkpoint of `step` as parts/trainer.py's Checkpointer leaves it (the files
    newest_checkpoint looks for)."""
    path = os.path.join(str(run_dir), "checkpoint", f"step-{step}")
    os.makedirs(path)
    for name in (".metadata", "trainer_state.json"):
        open(os.path.join(path, name), "w").close()


def test_the_eta_of_a_resumed_run_counts_only_what_this_launch_did(tmp_path, monkeypatch):
    """A run resumed at step 12 of 20 that did steps 13-14 in its first minute has 6 steps, 3
    minutes, left (before: its 70% was taken as the first minute's work, 0.4 minutes left). It
    resumes from its checkpoint, not from its metrics' last step (after a kill they run past it).
    Just launched, it counts at its estimate for the steps left; pending, the same."""
    c = cfg(tmp_path, parallel=1)
    d = tmp_path / "code-binary-s0"
    cmd = ["gppo.py", "--code_data=c.jsonl", "--steps=20", "--mini_batch_prompts=1"]
    job = dict(name="code-binary-s0", dir=str(d), steps=20, cmd=cmd)
    # killed at step 15, its last checkpoint of step 12
    write_jsonl(str(d / "metrics.jsonl"), [{"step": s} for s in range(1, 16)])
    checkpoint(d, 12)
    assert ablate.done_before(job) == pytest.approx(0.6)
    # pending: 8 of its 20 steps left, at 14 minutes per 20
    assert ablate.eta([], [job], [], c).endswith(f"ETA {round(14 * 8 / 20)} min")
    # launched a minute ago, its metrics not yet cut back to its checkpoint: the old run's 75% is
    # not this launch's work
    written = os.path.getmtime(d / "metrics.jsonl")
    monkeypatch.setattr(ablate.time, "time", lambda: written + 61)
    job.update(start=written + 1, start_progress=ablate.done_before(job))
    line = ablate.eta([job], [], [], c)
    assert f"code-binary-s0 (ETA ~{14 * 8 / 20 - 1:.1f} min)" in line, line
    monkeypatch.setattr(ablate.time, "time", lambda: 1000.0)
    job.update(start=940.0)
    # the rerun cut its metrics back to step 12 and has done 13-14
    write_jsonl(str(d / "metrics.jsonl"), [{"step": s} for s in range(1, 15)])
    line = ablate.eta([job], [], [], c)
    assert "code-binary-s0 70% (ETA 3.0 min)" in line and line.endswith("ETA 3 min"), line
    # just launched (nothing done in this launch yet): 8 steps at 14 minutes per 20, less a minute
    write_jsonl(str(d / "metrics.jsonl"), [{"step": s} for s in range(1, 13)])
    line = ablate.eta([job], [], [], c)
    assert f"code-binary-s0 (ETA ~{14 * 8 / 20 - 1:.1f} min)" in line, line
    # not started in this invocation: 8 of its 20 steps left
    assert ablate.eta([], [job], [], c).endswith(f"ETA {round(14 * 8 / 20)} min")
    # past --stop_after_minutes' deadline: the line says no run will start
    assert ablate.eta([], [job], [], c, deadline=999.0).endswith("; no more starts")


def test_a_resumed_run_says_so_when_done(tmp_path, capsys):
    """'done NAME in X min' of a run resumed at step 2 of 4 (its checkpoint's) says so: its minutes
    are this launch's (before, a resumed run looked like a whole run done in a fraction of its
    time)."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    d = tmp_path / "runs" / "r"
    # killed after step 3, its checkpoint of step 2
    write_jsonl(str(d / "metrics.jsonl"), [{"step": s} for s in (1, 2, 3)])
    checkpoint(d, 2)
    job = dict(
        name="r",
        dir=str(d),
        cmd=[str(script), str(d), "ok"],
        after=[],
        steps=4,
        done=lambda: os.path.exists(os.path.join(str(d), "done")),
    )
    assert ablate.run_jobs([job], ablate.AblateConfig(parallel=1)) == set()
    assert "(resumed at step 2 of 4) [1/1]" in capsys.readouterr().out


def test_without_final_evals_a_finished_ablation_is_not_called_incomplete(tmp_path, capsys):
    """--final_eval_problems=0 plans no held-out evaluation of the math runs: a report whose runs
    are all done must not open with "Incomplete" for evaluations never planned (before: it named
    each run's "held-out eval"), and the dry run adds one job per loss_off run, not two."""
    c = cfg(tmp_path, arms="filter", seeds=2, steps=20, final_eval_problems=0)
    runs = os.path.join(c.out_dir, "runs")
    for s in range(2):
        for name in ("gppo", "nofilter"):
            synthetic_run(runs, name, s, lambda k, s=s: 0.3 + s / 10)
    ablate.report(c, [1.0])
    md = open(os.path.join(c.out_dir, "ablation.md")).read()
    assert "Incomplete" not in md and "none of the math runs (--final_eval_problems=0)" in md
    ablate.dry_run(cfg(tmp_path / "dry", arms="loss_off", seeds=2, final_eval_problems=0))
    out = capsys.readouterr().out
    assert "+ 10 loss_off runs after the pilot" in out and "(+ 10 after the pilot)" in out


def test_an_invocation_whose_checkout_changed_while_it_ran_records_both_commits(
    tmp_path, monkeypatch
):
    """Each run starts from the checkout: a commit made while an invocation runs is the code of its
    later runs, so the record and the report name both commits (before: only the first)."""
    c = cfg(tmp_path, arms="alpha", seeds=1, parallel=1)
    commits = iter(["abc1234", "def5678"])
    monkeypatch.setattr(ablate, "git_commit", lambda: next(commits))
    monkeypatch.setattr(ablate, "run_jobs", lambda *a, **k: set())
    ablate.main(c)
    (record,) = json.load(open(os.path.join(c.out_dir, "ablate_state.json")))["invocations"]
    assert (record["commit"], record["commit_at_end"]) == ("abc1234", "def5678")
    assert "Commits: abc1234 -> def5678 (1)." in open(os.path.join(c.out_dir, "ablation.md")).read()


@pytest.mark.parametrize("field", ["steps", "code_steps", "pilot_steps"])
def test_a_run_of_no_steps_is_refused(field):
    """A run of 0 steps would be estimated at 0 minutes (and could not report progress): refused
    with the rule that names it."""
    with pytest.raises(ValueError, match=f"{field}.*>= 1"):
        ablate.AblateConfig(**{field: 0})


def test_the_dry_run_counts_a_resumed_run_for_its_steps_left(tmp_path, capsys):
    """A run with a checkpoint at step 15 of 30 costs half its estimate in --dry_run's total."""
    c = cfg(tmp_path, arms="filter", seeds=1, final_eval_problems=0)
    checkpoint(os.path.join(c.out_dir, "runs", "gppo-s0"), 15)
    ablate.dry_run(c)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  gppo-s0 "))
    whole = ablate.core_minutes(dict(cmd=["gppo.py", "--steps=30", "--mini_batch_prompts=2"]), c)
    assert f" {whole / 2:5.1f} core-min " in line, line


def test_the_filter_and_code_treatments_against_hand_computed_values():
    """What the filter and the soft code reward change, per step, then per run: the share of sampled
    groups dropped for a zero advantage (1 − groups_kept) and the partial credit (mean reward −
    share fully correct)."""
    records = {
        1: {"step": 1, "groups_kept": 0.75, "reward": 0.5, "accuracy": 0.375},
        2: {"step": 2, "groups_kept": 1.0, "reward": 0.25, "accuracy": 0.25},
    }
    ablate.with_treatment_metrics(records)
    assert [records[s]["groups_dropped_frac"] for s in (1, 2)] == [0.25, 0.0]
    assert [records[s]["partial_credit"] for s in (1, 2)] == [0.125, 0.0]
    series = {k: [ablate.curve(records, k)] for k in ablate.SWEEP_METRICS}
    stats = ablate.run_stats(series)
    assert stats["dropped_pct"] == (12.5, 0.0) and stats["partial_credit"] == (0.0625, 0.0)
    assert ablate.rl_cells(stats)[-2:] == ["12.5 ± 0.0", "0.062 ± 0.000"]
