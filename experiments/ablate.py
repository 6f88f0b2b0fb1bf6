"""The paper's ablations in miniature, on the Countdown toy: one SFT checkpoint, one change per arm, several seeds.

Every RL run is `gppo.py` from the SAME toy SFT model (distill.py's recipe, sft.py as train.sh runs it); the runs of
an arm differ in one option and in the seed (prompt order, sampling). Per run, every eval_every steps on the same
held-out 3-number problems (train.sh's RL set; --toy_numbers=4: the hard ones): greedy accuracy, Avg@k and pass@k
of k samples at T = 1 (gppo.py --eval_k); per step: on-policy accuracy, entropy (mean, and on the clipped tokens),
clip fractions, approx KL. The protocol (arms, seeds, steps, the one metric per claim, the verdict rule) is VERDICTS
below and benchmarks/RESULTS.md, committed before the runs. Arms:
  loss     GPPO vs GRPO with Clip-Higher vs CISPO at 8 updates per rollout batch   [Fig. 2: GPPO ends highest]
  loss16   the same at 16 updates per batch (further off-policy: more tokens clipped)
  alpha    SFT-loss weight α = 0 vs 0.1 vs 0.2 (GPPO)                             [Table 6: 0.1 best]
  filter   zero-advantage groups dropped vs kept                                   [Fig. 5: dropping is better]
  code     soft (fraction of tests passed) vs all-or-nothing reward on the toy programs with partial credit
  sft      SFT data: distill.py --keep=correct vs the difficulty rule (mixed), on easy (3-number) and hard
           (4-number) held-out problems                                            [Table 2: mixed better on hard]
  offpolicy, offpolicy_lr, beta1: optional sweeps (updates per batch x rule; a higher lr; GPPO's β1).
Run (each run a subprocess with OMP_NUM_THREADS=1, its output in out_dir/runs/NAME/log.txt; --parallel at once):
  bash train.sh ablate                               # every default arm, 3 seeds (cost: benchmarks/RESULTS.md)
  python experiments/ablate.py --arms=loss --sft_from=out/sft/hf --seeds=1 --steps=10   # a subset, a given SFT model
Interrupted? Run the same command again: finished runs are skipped, unfinished ones resume from their checkpoint,
a larger --steps extends finished runs; other changed options need a new --out_dir. Writes out_dir/ablation.md (the
tables and verdicts), ablation.json (every seed's curves) and ablation.png (if matplotlib is importable).
"""
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from experiments.verdicts import Claim, family_verdicts  # noqa: E402
from parts.cli import parse_config  # noqa: E402


def held_out_kind(toy_numbers: int, gppo_args: str) -> str:
    """'3-number' or '4-number': the toy RL prompts and held-out problems of gppo.py, --toy_numbers unless
    --gppo_args overrides it (the last option wins, as parts/cli.py reads it)."""
    given = [a.split("=", 1)[1] for a in shlex.split(gppo_args) if a.startswith("--toy_numbers=")]
    return f"{given[-1] if given else toy_numbers}-number"

# arm -> (title with the paper's claim, [(variant label, run name)]); run name -> gppo.py options
ARMS = {"loss": ("GPPO vs GRPO (Clip-Higher) vs CISPO at 8 updates per batch — paper Fig. 2: GPPO ends highest",
                 [("GPPO", "gppo"), ("GRPO", "grpo"), ("CISPO", "cispo")]),
        "loss16": ("GPPO vs GRPO (Clip-Higher) vs CISPO at 16 updates per batch — further off-policy",
                   [("GPPO", "gppo-u16"), ("GRPO", "grpo-u16"), ("CISPO", "cispo-u16")]),
        "alpha": ("SFT-loss weight α (GPPO) — paper Table 6: 0.1 best",
                  [("α=0", "alpha0"), ("α=0.1", "gppo"), ("α=0.2", "alpha0.2")]),
        "filter": ("zero-advantage group filter — paper Fig. 5: filtering is better",
                   [("filter on", "gppo"), ("filter off", "nofilter")]),
        "code": ("soft vs all-or-nothing code reward, programs with partial credit — paper Fig. 3: soft better",
                 [("soft", "code-soft"), ("binary", "code-binary")]),
        "sft": ("SFT data: only-correct vs mixed traces — paper Table 2: mixed as good or better on hard problems",
                [("only-correct (--keep=correct)", "sft-correct"), ("mixed (the difficulty rule)", "sft-mixed")])}
RL_OPTIONS = {"gppo": [], "grpo": ["--loss_mode=grpo"], "cispo": ["--loss_mode=cispo"], "alpha0": ["--alpha=0"],
              "alpha0.2": ["--alpha=0.2"], "nofilter": ["--filter_zero_adv=false"],
              "code-soft": ["--code_reward=soft"], "code-binary": ["--code_reward=binary"]}
SFT_KEEP = {"sft-mixed": "difficulty", "sft-correct": "correct"}   # distill.py --keep; mixed = train.sh's data

# The off-policy sweep: how far the policy moves from the sampler within one rollout batch is set by the number of
# optimizer updates per batch, u = prompts_per_step / mini_batch_prompts. With u = 1, r = 1 for every token and the
# three rules give the same gradient; the more updates, the more tokens leave the trust region and are clipped.
RULES = {"gppo": "GPPO", "grpo": "GRPO", "cispo": "CISPO"}
UPDATES = (1, 4, 16)
BETA1 = (1.0, 0.5, 0.25)
ARMS["offpolicy"] = ("updates per rollout batch x clipping rule — GPPO, GRPO and CISPO differ only off-policy",
                     [(f"{RULES[r]} u={u}", f"{r}-u{u}") for u in UPDATES for r in RULES])
SWEEP_HIGH_LR = 2e-4
ARMS["offpolicy_lr"] = (f"the clipping rule at u={UPDATES[-1]} and a higher lr ({SWEEP_HIGH_LR:g}): further off-policy",
                        [(f"{RULES[r]} u={UPDATES[-1]} lr={SWEEP_HIGH_LR:g}", f"{r}-u{UPDATES[-1]}-lr{SWEEP_HIGH_LR:g}")
                         for r in RULES])
ARMS["beta1"] = ("GPPO's β1 (low-side clipped tokens) far off-policy — authors: 0.25-0.5 against entropy collapse",
                 [(f"β1={b:g}", f"gppo-b{b:g}-uB") for b in BETA1])


def run_name(name, cfg) -> str:
    """The run behind an arm's variant, so no run is trained twice: a rule at the base updates per batch is the loss
    arm's run; β1 = 1 is GPPO's run at beta1_updates; GRPO and CISPO at u = 1 are GPPO's u = 1 run (r = 1 up to
    rounding, no token is clipped, and inside the trust region the three rules compute the same gradient bit for bit:
    tests/test_gppo_loss.py)."""
    base_u = cfg.prompts_per_step // cfg.mini_batch_prompts
    if name == "gppo-b1-uB":
        name = f"gppo-u{cfg.beta1_updates}"
    if re.fullmatch(r"(grpo|cispo)-u1", name):
        name = "gppo-u1"
    m = re.fullmatch(r"(gppo|grpo|cispo)-u(\d+)", name)
    return m.group(1) if m and int(m.group(2)) == base_u else name


def rl_options(name, cfg) -> list:
    """gppo.py options of a run, from its name: the arms' fixed runs, `RULE-uU` (U updates per rollout batch) and
    `gppo-bB-uB` (β1 = B at cfg.beta1_updates updates per batch). Later options override earlier ones."""
    if name in RL_OPTIONS:
        return RL_OPTIONS[name]
    m = re.fullmatch(r"(gppo|grpo|cispo)-u(\d+)(?:-lr([\d.e-]+))?", name) or re.fullmatch(r"(gppo)-b([\d.]+)-uB", name)
    if not m:
        raise KeyError(name)
    updates = int(m.group(2)) if "-b" not in name else cfg.beta1_updates
    beta = [f"--beta1={m.group(2)}"] if "-b" in name else []
    lr = m.group(3) if "-b" not in name and m.group(3) else cfg.lr
    return [f"--loss_mode={m.group(1)}", f"--mini_batch_prompts={cfg.prompts_per_step // updates}", f"--lr={lr}", *beta]


@dataclass
class AblateConfig:
    out_dir: str = "out/ablate"
    arms: str = "loss,loss16,alpha,filter,code,sft"  # any subset, comma-separated (also: offpolicy, offpolicy_lr, beta1)
    seeds: int = 3
    parallel: int = 2                  # runs at once, one thread each
    sft_from: str = ""                 # an SFT Hugging Face dir for the RL arms; empty = train one (mixed, seed 0)
    sft_args: str = "--epochs=1 --row_tokens=1024 --rows_per_step=2"   # sft.py options of every SFT run (train.sh's)
    toy_numbers: int = 3               # Countdown numbers per RL prompt and held-out problem (train.sh's RL set: 3,
    #   where the SFT model meets the calibration; 4: the hard prompts)
    gppo_args: str = ""                # extra gppo.py options for every RL run
    steps: int = 30                    # RL steps (rollout batches) of the Countdown arms
    prompts_per_step: int = 16         # prompt groups per rollout batch (train.sh: 32; halved so the arms fit 2 cores)
    mini_batch_prompts: int = 2        # 16/2 = 8 optimizer steps per rollout batch, as the paper's 128/16
    lr: float = 5e-5                   # train.sh's
    group_size: int = 8
    max_response_len: int = 320        # train.sh's
    eval_every: int = 10               # gppo.py's held-out eval (and checkpoint) every k steps
    eval_problems: int = 100           # held-out problems per eval (gppo.py) and per set (eval.py, the sft arm)
    rl_eval_k: int = 4                 # gppo.py --eval_k: samples per held-out problem at T = 1 (Avg@k, pass@k)
    code_steps: int = 12               # the code arm: each sample runs its tests in the sandbox
    code_prompts_per_step: int = 8
    code_prompts: int = 200            # toy code RL prompts (programs with partial credit)
    eval_k: int = 4                    # eval.py samples per problem (code and sft arms)
    eval_code_problems: int = 40       # held-out toy code problems
    target: float = 0.5                # held-out Avg@k for "steps to target"; change it and rerun to redo the tables
    max_gen_rounds: int = 3            # runs refill dropped groups, so every rollout batch trains prompts_per_step
    #   groups and u updates per batch is what it says
    beta1_updates: int = 16            # the beta1 arm's updates per rollout batch

    def __post_init__(self):
        bad = set(self.arms.split(",")) - set(ARMS)
        if bad or min(self.seeds, self.parallel, self.eval_every) < 1 or \
                self.prompts_per_step % self.mini_batch_prompts or self.code_prompts_per_step % self.mini_batch_prompts \
                or any(self.prompts_per_step % u for u in (*UPDATES, self.beta1_updates)):
            raise SystemExit(f"error: AblateConfig: arms must be a subset of {list(ARMS)} (unknown: {sorted(bad)}); "
                             "seeds, parallel, eval_every >= 1; (code_)prompts_per_step multiples of mini_batch_prompts; "
                             f"prompts_per_step a multiple of every sweep point {UPDATES} and of beta1_updates")


# ---- metrics -> tables (pure functions; tests/test_ablate.py)

def read_metrics(path, max_step=None):
    """metrics.jsonl -> {step: record}; a step logged twice (a resumed run) keeps its last record."""
    records = [json.loads(line) for line in open(path) if line.strip()] if os.path.exists(path) else []
    return {r["step"]: r for r in records if max_step is None or r["step"] <= max_step}


def curve(records, key, window=1):
    """[(step, value)] of `key`; window > 1: each value is the mean of the steps in (step − window, step]."""
    points = sorted((s, r[key]) for s, r in records.items() if key in r)
    return points if window <= 1 else [(s, statistics.fmean(v for t, v in points if s - window < t <= s))
                                       for s, _ in points]


def mean_std(values):
    values = [v for v in values if v is not None]
    return (None, None) if not values else (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


def summarize(curves, at_steps, target):
    """One [(step, value)] curve per seed -> {at: {step: (mean, std)}, to_target: (mean, std, seeds reached, seeds)}."""
    reached = [next((s for s, v in c if v >= target), None) for c in curves]
    return dict(at={s: mean_std([dict(c).get(s) for c in curves]) for s in at_steps},
                to_target=(*mean_std(reached), sum(r is not None for r in reached), len(curves)))


def fmt(mean, std, digits=3):
    return "—" if mean is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def table_steps(steps, eval_every, columns=5):
    """At most `columns` evenly spread eval steps out of 0, eval_every, 2·eval_every, ..., steps."""
    points = sorted({*range(0, steps + 1, eval_every), steps})
    return sorted({points[round(i * (len(points) - 1) / (columns - 1))] for i in range(columns)})


def arm_table(rows, at_steps, target, extra_header=()):
    """rows: [(label, summary, [extra cells])] -> a Markdown table."""
    head = ["variant", *(f"step {s}" for s in at_steps), f"steps to {target:g}", *extra_header]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, summary, extra in rows:
        m, sd, reached, n = summary["to_target"]
        cells = [fmt(*summary["at"][s]) for s in at_steps] + [f"{fmt(m, sd, 0)} ({reached}/{n} seeds)", *extra]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines)


# ---- the runs: jobs {name, dir, cmd, done(), after, steps}, run by a small scheduler

def plan(cfg):
    arms, seeds, jobs = cfg.arms.split(","), range(cfg.seeds), []
    run_dir = lambda name: os.path.join(cfg.out_dir, "runs", name)  # noqa: E731
    exported = lambda d: lambda: os.path.exists(os.path.join(d, "hf", "tokenizer.json"))  # noqa: E731 (written last)
    # in the order of cfg.arms (the sweep first by default: it is what the others are read against)
    rl_runs = list(dict.fromkeys(run_name(r, cfg) for a in arms if a != "sft" for _, r in ARMS[a][1]))
    sft_runs = [f"{v}-s{s}" for v in SFT_KEEP for s in seeds] if "sft" in arms else []
    if rl_runs and not cfg.sft_from:   # the base model first, so the RL runs can start early
        sft_runs = ["sft-mixed-s0"] + [r for r in sft_runs if r != "sft-mixed-s0"]
    base, base_after = (cfg.sft_from, []) if cfg.sft_from else (os.path.join(run_dir("sft-mixed-s0"), "hf"), ["sft-mixed-s0"])

    def eval_job(of, model, out, options, after):
        done = os.path.join(out, "results.json")
        return dict(name=f"{os.path.basename(out)}:{of}", dir=out, after=after, steps=None,
                    done=lambda: os.path.exists(done), cmd=["eval.py", f"--model={model}", f"--out_dir={out}",
                                                            f"--k={cfg.eval_k}", "--max_tokens=400", "--reward_workers=2",
                                                            *options])

    def sft_jobs(name):
        """The SFT run `name` and, before it, the distill.py run that makes its data (same seed)."""
        d, seed, data_dir = run_dir(name), name.rsplit("-s", 1)[1], run_dir("distill-" + name)
        made = os.path.join(data_dir, "report.json")
        return [dict(name="distill-" + name, dir=data_dir, done=lambda: os.path.exists(made), after=[], steps=None,
                     cmd=["distill.py", "--toy=true", f"--keep={SFT_KEEP[name.rsplit('-', 1)[0]]}", f"--seed={seed}",
                          f"--out_dir={data_dir}"]),
                dict(name=name, dir=d, done=exported(d), after=["distill-" + name], steps=None, cmd=[
                    "sft.py", f"--out_dir={d}", f"--seed={seed}", f"--data={data_dir}/sft.jsonl",
                    f"--tokenizer={data_dir}/tokenizer", *shlex.split(cfg.sft_args)])]

    code_eval = ["--toy_math=0", f"--toy_code={cfg.eval_code_problems}"]
    for name in sft_runs[:1] if rl_runs and not cfg.sft_from else []:
        jobs += sft_jobs(name)
    if "code" in arms:
        jobs.append(eval_job("base", base, os.path.join(run_dir("base"), "eval_code"), code_eval, base_after))
    for name in rl_runs:
        code = name.startswith("code")
        steps = cfg.code_steps if code else cfg.steps
        task = ["--toy_problems=0", f"--toy_code_prompts={cfg.code_prompts}", "--eval_every=0",
                f"--prompts_per_step={cfg.code_prompts_per_step}", "--max_response_len=256"] if code else \
            [f"--toy_numbers={cfg.toy_numbers}", f"--eval_every={cfg.eval_every}",
             f"--eval_problems={cfg.eval_problems}", f"--eval_k={cfg.rl_eval_k}",
             f"--prompts_per_step={cfg.prompts_per_step}", f"--max_gen_rounds={cfg.max_gen_rounds}",
             f"--max_response_len={cfg.max_response_len}"]
        for s in seeds:
            d = run_dir(f"{name}-s{s}")
            done = lambda d=d, n=steps: max(read_metrics(os.path.join(d, "metrics.jsonl")) or [0]) >= n and exported(d)()
            jobs.append(dict(name=f"{name}-s{s}", dir=d, done=done, after=base_after, steps=steps, cmd=[
                "gppo.py", f"--init_from={base}", f"--out_dir={d}", f"--seed={s}", f"--steps={steps}",
                f"--mini_batch_prompts={cfg.mini_batch_prompts}", f"--lr={cfg.lr}", f"--group_size={cfg.group_size}", f"--ckpt_every={cfg.eval_every}", "--reward_workers=2",
                *task, *rl_options(name, cfg), *shlex.split(cfg.gppo_args)]))
            if code:
                jobs.append(eval_job(f"{name}-s{s}", os.path.join(d, "hf"), os.path.join(d, "eval_code"), code_eval,
                                     [f"{name}-s{s}"]))
    for name in sft_runs[1:] if rl_runs and not cfg.sft_from else sft_runs:
        jobs += sft_jobs(name)
    for name in sft_runs if "sft" in arms else []:   # easy (3 numbers) and hard (4 numbers) held-out problems
        jobs.append(eval_job(name, os.path.join(run_dir(name), "hf"), os.path.join(run_dir(name), "eval"),
                             ["--toy_code=0", f"--toy_math={cfg.eval_problems}"], [name]))
    # longest first (LPT), so the last minutes are short jobs on both cores rather than one long job on one; the
    # base SFT stays first (the RL runs wait for it). Minutes on one core of Countdown, two runs at once: math RL 4
    # at 8 updates per batch, 5.5 at 16; code RL 7; SFT about 12 (twice train.sh's 2-process 6); eval 0.5-2.
    def minutes(job):
        if job["cmd"][0] != "gppo.py":
            return {"sft.py": 12, "distill.py": 13, "eval.py": 1}[job["cmd"][0]]   # distill: 2.5 min, before its SFT
        mini = int([a for a in job["cmd"] if a.startswith("--mini_batch_prompts=")][-1].split("=")[1])
        return 7 if "--toy_problems=0" in job["cmd"] else 2.5 + 3 * (cfg.prompts_per_step // mini) / 16
    first = 2 if rl_runs and not cfg.sft_from else 0   # the base model's data, then the base model
    return jobs[:first] + sorted(jobs[first:], key=minutes, reverse=True)


def progress(job):
    """Fraction done of a running gppo.py or sft.py run (from its metrics and log), else None."""
    step = max(read_metrics(os.path.join(job["dir"], "metrics.jsonl")) or [0])
    if job["steps"]:
        return step / job["steps"]
    total = re.findall(r"stopping after (\d+)|(\d+) steps\n", open(job["log"]).read()) if job["cmd"][0] == "sft.py" else []
    return step / int(total[-1][0] or total[-1][1]) if total else None


def eta(running, pending, durations, parallel):
    """'running: A 40% (ETA 2.1 min), ...; all: ETA N min'. A kind of run (sft, gppo, eval) with none finished
    yet is estimated from a running one; the total is left out while a pending kind has no estimate."""
    parts, left, guess = [], 0.0, {k: statistics.fmean(v) for k, v in durations.items()}
    for j in running:
        f, elapsed = progress(j), time.time() - j["start"]
        total = elapsed / f if f and f > 0.02 else guess.get(j["cmd"][0])
        guess.setdefault(j["cmd"][0], total)
        left += max(0.0, (total or 0) - elapsed)
        parts.append(f"{j['name']} {f:.0%} (ETA {(total - elapsed) / 60:.1f} min)" if f and total else j["name"])
    todo = [guess.get(j["cmd"][0]) for j in pending]
    return "running: " + ", ".join(parts) + ("" if None in todo else f"; all: ETA {(left + sum(todo)) / parallel / 60:.0f} min")


def run_jobs(jobs, cfg):
    """Start ready jobs (every `after` finished) in list order, cfg.parallel at once. Returns the failed ones."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    finished = {j["name"] for j in jobs if j["done"]()}
    pending, running, failed, durations = [j for j in jobs if j["name"] not in finished], {}, set(), {}
    print(f"ablate: {len(jobs)} runs, {len(finished)} already done, {len(pending)} to run, {cfg.parallel} at once")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("ablate: terminated; rerun the same command to resume"))
    t0, last_print = time.time(), time.time()
    try:
        while pending or running:
            for j in [j for j in pending if all(a in finished | failed for a in j["after"])]:
                if any(a in failed for a in j["after"]):
                    pending.remove(j), failed.add(j["name"]), print(f"  skip  {j['name']}: it needs a failed run")
                elif len(running) < cfg.parallel:
                    pending.remove(j)
                    os.makedirs(j["dir"], exist_ok=True)
                    j["log"], j["start"] = os.path.join(j["dir"], "log.txt"), time.time()
                    cmd = [sys.executable, os.path.join(ROOT, j["cmd"][0]), *j["cmd"][1:]]
                    with open(j["log"], "a") as log:
                        log.write(f"$ {shlex.join(cmd)}\n")
                        log.flush()
                        running[j["name"]] = (j, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
                    print(f"  start {j['name']}: {shlex.join(j['cmd'])}")
            time.sleep(1)
            for name, (j, p) in list(running.items()):
                if p.poll() is None:
                    continue
                del running[name]
                if p.returncode == 0 and j["done"]():
                    finished.add(name)
                    durations.setdefault(j["cmd"][0], []).append(time.time() - j["start"])
                    print(f"  done  {name} in {(time.time() - j['start']) / 60:.1f} min [{len(finished)}/{len(jobs)}]")
                else:
                    failed.add(name)
                    print(f"  FAILED {name} (exit {p.returncode}); the end of {j['log']}:\n    " +
                          "    ".join(open(j["log"]).readlines()[-5:]))
            if running and time.time() - last_print > 60:
                last_print = time.time()
                print(f"[{(last_print - t0) / 60:.1f} min] {len(finished)}/{len(jobs)} done; "
                      + eta([j for j, _ in running.values()], pending, durations, cfg.parallel))
    finally:  # interrupted (Ctrl-C, kill): stop our children; their checkpoints stay for the resume
        for j, p in running.values():
            p.terminate()
            p.wait()
    return failed


# ---- the report: ablation.md, ablation.json, ablation.png

SWEEP_METRICS = ("accuracy", "eval_avg_k", "eval_accuracy", "eval_pass_k", "entropy", "entropy_clipped",
                 "clip_frac_low", "clip_frac_high", "approx_kl")

# The protocol: per claim, the one metric, the variant the paper favours and the ones it is compared with. RL arms:
# held-out Avg@k at the last step; code: eval.py's held-out Avg@k (all tests pass) of the final models; sft: eval.py's
# Avg@k of the SFT models on hard (4-number) problems (mixed favoured) and on easy (3-number) ones (only-correct
# favoured: the paper finds mixed data hurts on easy prompts). The verdict (experiments/verdicts.py): every arm runs
# seeds 0..seeds-1 from the same base model or data seed, so each claim is a paired t test on the per-seed
# differences, Holm's correction over all claims of the report, "reproduced"/"reversed" only where the Holm-adjusted
# 95% interval excludes 0, else "not resolved (minimum detectable effect X at 80% power)".
VERDICTS = {"loss": ("GPPO", ("GRPO", "CISPO")), "loss16": ("GPPO", ("GRPO", "CISPO")),
            "alpha": ("α=0.1", ("α=0", "α=0.2")), "filter": ("filter on", ("filter off",)),
            "code": ("soft", ("binary",)), "sft_hard": ("mixed (the difficulty rule)", ("only-correct (--keep=correct)",)),
            "sft_easy": ("only-correct (--keep=correct)", ("mixed (the difficulty rule)",))}


def verdict_lines(verdicts: list) -> list:
    """Markdown lines of the family's verdicts: effect, unadjusted and Holm-adjusted 95% intervals, the word."""
    lines = ["", "## Verdicts: paired t per claim, Holm over the claims above (experiments/verdicts.py)",
             "| claim | effect | 95% CI | Holm-adjusted 95% CI | p (Holm) | verdict |", "|---|---|---|---|---|---|"]
    for v in verdicts:
        if "effect" not in v:
            lines.append(f"| {v['claim']} | — | — | — | — | {v['verdict']} |")
            continue
        lines.append(f"| {v['claim']} | {v['effect']:+.3f} | [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] | "
                     f"[{v['ci_holm'][0]:+.3f}, {v['ci_holm'][1]:+.3f}] | {v['p']:.3g} ({v['p_holm']:.3g}) | "
                     f"**{v['verdict']}** |")
    return lines


def run_stats(series) -> dict:
    """series {metric: one [(step, value)] curve per seed} -> {stat: (mean, std) over seeds} of each seed's own mean:
    on-policy accuracy and entropy over its last 5 logged steps, clip fractions (in %), approx KL and the entropy of
    the clipped tokens over all; the last held-out greedy accuracy and pass@k."""
    def per_seed(key, last=None, scale=1.0):
        out = []
        for c in series.get(key, []):
            values = [v for _, v in c[-last if last else 0:] if v == v]   # nan: a step without a clipped token
            out.append(scale * statistics.fmean(values) if values else None)
        return out
    return dict(accuracy_last5=mean_std(per_seed("accuracy", 5)), entropy_last5=mean_std(per_seed("entropy", 5)),
                entropy_clipped=mean_std(per_seed("entropy_clipped")),
                clip_frac_low_pct=mean_std(per_seed("clip_frac_low", scale=100)),
                clip_frac_high_pct=mean_std(per_seed("clip_frac_high", scale=100)), approx_kl=mean_std(per_seed("approx_kl")),
                greedy_last=mean_std(per_seed("eval_accuracy", 1)), pass_k_last=mean_std(per_seed("eval_pass_k", 1)))


def avg_at_k(path, bench):
    return json.load(open(path))["benchmarks"][bench]["avg_at_k"] if os.path.exists(path) else None


def report(cfg, wall_minutes):
    run_file = lambda *p: os.path.join(cfg.out_dir, "runs", *p)  # noqa: E731
    seeds = range(cfg.seeds)
    md = [f"# Countdown ablations: {cfg.seeds} seed(s), {cfg.steps} RL steps of {cfg.prompts_per_step} prompts x "
          f"{cfg.group_size} samples, {cfg.prompts_per_step // cfg.mini_batch_prompts} updates per step unless "
          f"labelled, lr {cfg.lr:g}",
          f"Mean ± std over seeds. Held-out: {cfg.eval_problems} {held_out_kind(cfg.toy_numbers, cfg.gppo_args)} "
          "problems per eval, greedy and "
          f"Avg@{cfg.rl_eval_k} / pass@{cfg.rl_eval_k} at T = 1. Wall time: {sum(wall_minutes):.0f} min in "
          f"{len(wall_minutes)} invocation(s). Command: `{shlex.join(sys.argv)}`"]
    out, plots, sweep, claims = dict(config=asdict(cfg), wall_minutes=wall_minutes, arms={}), {}, [], []
    for arm in cfg.arms.split(","):
        title, variants = ARMS[arm]
        md += ["", f"## {arm}: {title}"]
        rows, out["arms"][arm], finals = [], {}, {}
        if arm == "sft":
            md += [f"eval.py Avg@{cfg.eval_k} (T=0.6) of the SFT models on {cfg.eval_problems} held-out problems of each "
                   "kind.", "| SFT data | easy (3 numbers) | hard (4 numbers) |", "|---|---|---|"]
            for label, name in variants:
                scores = {p: [avg_at_k(run_file(f"{name}-s{s}", "eval", "results.json"), f"countdown_{n}") for s in seeds]
                          for p, n in (("easy", 3), ("hard", 4))}
                out["arms"][arm][label] = dict(run=name, per_seed=scores)
                finals.setdefault("sft_easy", {})[label], finals.setdefault("sft_hard", {})[label] = \
                    scores["easy"], scores["hard"]
                md.append(f"| {label} | {fmt(*mean_std(scores['easy']))} | {fmt(*mean_std(scores['hard']))} |")
        else:
            code = arm == "code"
            steps, window = (cfg.code_steps, max(1, cfg.code_steps // 4)) if code else (cfg.steps, 1)
            at_steps = table_steps(steps, cfg.eval_every) if not code else table_steps(steps, window)[1:]
            if code:
                base = avg_at_k(run_file("base", "eval_code", "results.json"), "toy_code")
                md.append(f"{cfg.code_steps} RL steps of {cfg.code_prompts_per_step} code prompts x {cfg.group_size} "
                          f"samples. Columns: the on-policy fraction of samples passing all tests (mean of the last "
                          f"{window} steps), then eval.py Avg@{cfg.eval_k} (all tests pass) on {cfg.eval_code_problems} "
                          f"held-out toy programs (the SFT model: {fmt(base, 0)[:5]}).")
            else:
                md.append(f"Columns: held-out Avg@{cfg.rl_eval_k} at eval steps; steps to the target; the last greedy "
                          f"accuracy and pass@{cfg.rl_eval_k}; then, mean over seeds of each run's mean: on-policy "
                          "accuracy (T=1) and token entropy of the last 5 steps, the entropy of the clipped tokens, % of "
                          "tokens clipped low / high and approx KL over all steps.")
            for label, name in variants:
                name = run_name(name, cfg)
                records = [read_metrics(run_file(f"{name}-s{s}", "metrics.jsonl"), steps) for s in seeds]
                curves = [curve(r, "accuracy", window) if code else curve(r, "eval_avg_k") for r in records]
                final = [avg_at_k(run_file(f"{name}-s{s}", "eval_code", "results.json"), "toy_code") for s in seeds] \
                    if code else [c[-1][1] if c and c[-1][0] == steps else None for c in curves]
                summary, rewards = summarize(curves, at_steps, cfg.target), [curve(r, "reward") for r in records]
                series = {k: [curve(r, k) for r in records] for k in SWEEP_METRICS}
                stats = run_stats(series)
                rows.append((label, summary, [fmt(*mean_std(final))] if code else [
                    fmt(*stats["greedy_last"]), fmt(*stats["pass_k_last"]), fmt(*stats["accuracy_last5"]),
                    fmt(*stats["entropy_last5"]), fmt(*stats["entropy_clipped"]), fmt(*stats["clip_frac_low_pct"], 2),
                    fmt(*stats["clip_frac_high_pct"], 2), fmt(*stats["approx_kl"], 4)]))
                out["arms"][arm][label] = dict(run=name, curves=curves, rewards=rewards, summary=summary, final=final,
                                               series=series, stats=stats)
                finals.setdefault(arm, {})[label] = final
                plots.setdefault(arm, []).append((label, [curve(r, "reward", 5) for r in records], curves))
                if arm.startswith("offpolicy"):
                    sweep.append((label, series, curves))
            md.append(arm_table(rows, at_steps, cfg.target, ["held-out code Avg@k (final)"] if code else
                                ["greedy (last)", f"pass@{cfg.rl_eval_k} (last)", "on-policy acc (last 5)",
                                 "entropy (last 5)", "entropy, clipped tokens", "clip low %", "clip high %",
                                 "approx KL"]))
        for claim, values in finals.items():
            if claim in VERDICTS and VERDICTS[claim][0] in values:
                favoured, others = VERDICTS[claim]
                claims += [Claim(f"{claim}: {favoured} > {other}", values[favoured], values[other], paired=True)
                           for other in others]
    out["verdicts"] = family_verdicts(claims)
    md += verdict_lines(out["verdicts"])
    text = "\n".join(md) + "\n"
    print("\n" + text)
    with open(os.path.join(cfg.out_dir, "ablation.md"), "w") as f:
        f.write(text)
    with open(os.path.join(cfg.out_dir, "ablation.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {cfg.out_dir}/ablation.md and ablation.json")
    if plots:
        plot(plots, os.path.join(cfg.out_dir, "ablation.png"))
    if sweep:
        plot_sweep(sweep, os.path.join(cfg.out_dir, "offpolicy.png"))


def plot(plots, path):
    """Per RL arm: training reward and the table's accuracy; mean over seeds bold, each seed faint."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print("matplotlib is not installed: no plot (the tables hold the numbers)")
    fig, axes = plt.subplots(len(plots), 2, figsize=(11, 3.2 * len(plots)), squeeze=False)
    for (arm, variants), (ax_reward, ax_acc) in zip(plots.items(), axes):
        for label, rewards, curves in variants:
            for ax, series in ((ax_reward, rewards), (ax_acc, curves)):
                steps = sorted({s for c in series for s, _ in c})
                mean = [statistics.fmean(v for c in series for t, v in c if t == s) for s in steps]
                color = ax.plot(steps, mean, label=label)[0].get_color()
                for c in (c for c in series if c):
                    ax.plot(*zip(*c), color=color, alpha=0.25, linewidth=0.8)
        ax_reward.set_title(f"{arm}: training reward (mean of 5 steps)")
        ax_acc.set_title(f"{arm}: " + ("samples passing all tests (on-policy)" if arm == "code" else "held-out Avg@k"))
        for ax in (ax_reward, ax_acc):
            ax.set_xlabel("RL step")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def plot_sweep(sweep, path):
    """The off-policy sweep: one column per number of updates per rollout batch, one row per metric, one line per
    rule (mean over seeds bold, each seed faint), against the rollout batch (= RL step)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print("matplotlib is not installed: no sweep plot (ablation.json holds the curves)")
    rows = (("accuracy", "on-policy accuracy (T=1)"), ("eval_avg_k", "held-out Avg@k"),
            ("entropy", "token entropy"), ("clip_frac_low", "clipped low (fraction)"),
            ("clip_frac_high", "clipped high (fraction)"), ("approx_kl", "approx KL"))
    points = list(dict.fromkeys(label.split(" ", 1)[1] for label, _, _ in sweep))   # "u=4", ..., "u=16 lr=0.0002"
    fig, axes = plt.subplots(len(rows), len(points), figsize=(3.3 * len(points), 2.3 * len(rows)), squeeze=False)
    colors = dict(zip(RULES.values(), ("tab:red", "tab:blue", "tab:green")))
    for label, series, curves in sweep:
        rule, u = label.split(" ", 1)
        col = points.index(u)
        for row, (key, title) in enumerate(rows):
            ax, runs = axes[row][col], (curves if key == "eval_avg_k" else series[key])
            steps = sorted({s for c in runs for s, _ in c})
            if not steps:
                continue
            ax.plot(steps, [statistics.fmean(v for c in runs for t, v in c if t == s) for s in steps],
                    color=colors[rule], label=rule)
            for c in (c for c in runs if c):
                ax.plot(*zip(*c), color=colors[rule], alpha=0.2, linewidth=0.7)
            ax.set_title(f"{title}, {u}", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("rollout batch", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"wrote {path}")


def main(cfg):
    os.makedirs(cfg.out_dir, exist_ok=True)
    if cfg.sft_from and not os.path.exists(os.path.join(cfg.sft_from, "config.json")):
        raise SystemExit(f"error: --sft_from={cfg.sft_from!r} has no config.json (give an sft.py out_dir/hf)")
    # runs made with other settings must not be mixed in; only these may change between invocations
    fixed = {k: v for k, v in asdict(cfg).items()
             if k not in ("out_dir", "arms", "seeds", "parallel", "steps", "code_steps", "target")}
    state_path = os.path.join(cfg.out_dir, "ablate_state.json")
    state = json.load(open(state_path)) if os.path.exists(state_path) else dict(settings=fixed, wall_minutes=[])
    diff = {k: (state["settings"].get(k), v) for k, v in fixed.items() if state["settings"].get(k) != v}
    if diff:
        raise SystemExit(f"error: {cfg.out_dir} holds runs made with other settings, {{option: (old, new)}} = {diff}; "
                         "use another --out_dir or the old values")
    t0 = time.time()
    try:
        failed = run_jobs(plan(cfg), cfg)
    finally:
        state["wall_minutes"].append(round((time.time() - t0) / 60, 2))
        json.dump(state, open(state_path, "w"), indent=1)
    report(cfg, state["wall_minutes"])
    if failed:
        raise SystemExit(f"error: {len(failed)} run(s) failed or were skipped: {sorted(failed)}; rerun to retry them")


if __name__ == "__main__":
    main(parse_config(AblateConfig))
