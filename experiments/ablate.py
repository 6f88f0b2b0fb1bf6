"""The paper's ablations in miniature, on the Countdown toy: one SFT checkpoint, one change per arm,
paired seeds.

Every RL run is `gppo.py` from the SAME toy SFT model (distill.py's recipe, sft.py as train.sh runs
it); the runs of an arm differ in one option and in the seed (the RL prompts, their order, sampling:
seed s trains on the files `tools/toy.py --seed=s --rl_seed=s` writes), and every arm runs the same
seeds, so two variants are compared seed by seed. Per step gppo.py logs the on-policy accuracy on
fresh prompts and the treatment checks (approx KL, clip fractions by side, the share of the
gradient's per-token coefficients on clipped tokens, the grad norm and whether the clip at grad_clip
acted, the entropy of all and of the clipped tokens); after the last step eval.py scores the final
model on final_eval_problems held-out problems x eval_k samples at T = 1. Protocol
(benchmarks/RESULTS.md, committed before the runs): per claim ONE metric (--metric): the mean
on-policy accuracy over the steps after the warmup, one value per seed; a paired t test per claim
and Holm's correction over the report's claims (experiments/verdicts.py); a claim about the clipping
rule where the clipped tokens carry under untestable_share of the gradient's coefficients is
"untestable in this regime". Arms:
  loss      GPPO (β1 = 1, 0.5, 0.25) vs GRPO with Clip-Higher vs CISPO, 8 updates per batch [Fig. 2: GPPO highest]
  loss_off  the same far enough off-policy that a few % of tokens are clipped: 16 updates per batch at the lr a short
            pilot on process metrics picks (the clipped fraction only, never which rule learns best)
  alpha     SFT-loss weight α = 0 vs 0.1 vs 0.2 (GPPO)                             [Table 6: 0.1 best]
  filter    zero-advantage groups dropped vs kept                                   [Fig. 5: dropping is better]
  code      soft (fraction of tests passed) vs all-or-nothing reward on the toy programs with partial credit
  sft       SFT data: distill.py --keep=correct vs the difficulty rule (mixed), on easy (3-number) and hard
            (4-number) held-out problems                                            [Table 2: mixed better on hard]
  loss16, offpolicy, offpolicy_lr, beta1: the earlier protocols' arms and sweeps (optional).
Run (each run a subprocess with OMP_NUM_THREADS=1, its output in out_dir/runs/NAME/log.txt;
--parallel at once):
  bash train.sh ablate --dry_run                     # the plan: runs, core-minutes, the design's detectable effects
  bash train.sh ablate                               # every default arm (cost: benchmarks/RESULTS.md)
  bash train.sh ablate --stop_after_minutes=120      # ... in parts: no new run starts after 2 h (but the evals of
                                                       finished runs); rerun to go on
  python experiments/ablate.py --arms=loss --sft_from=out/sft/hf --seeds=1 --steps=10   # a subset, a given SFT model
Interrupted? Run the same command again: finished runs are skipped, unfinished ones resume from
their checkpoint, seeds run in order (every arm's seed 0, then seed 1, ...), so a partial result is
still paired; a larger --steps or --seeds extends; other changed options need a new --out_dir.
Another machine? --archive=DIR keeps the finished runs' results in a directory to commit; the next
invocation anywhere restores them from it first (experiments/ablate_archive.py).
Writes out_dir/ablation.md (the tables and verdicts), ablation.json (every seed's curves) and
ablation.png (if matplotlib is importable); experiments/readme_table.py makes the README's verdict
table from ablation.json.
"""

import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# noqa: E402
from experiments import ablate_archive  # noqa: E402
from experiments.verdicts import ALPHA, Claim, compare, family_verdicts, interval, mde, seeds_needed
from parts.cli import CommandLineError, parse_config  # noqa: E402


# arm -> (title with the paper's claim, [(variant label, run name)]); run name -> gppo.py options
ARMS = {
    "loss": (
        "GPPO (β1 = 1, 0.5, 0.25) vs GRPO (Clip-Higher) vs CISPO at 8 updates per batch — paper Fig. 2: "
        "GPPO ends highest; the authors: β1 = 0.25-0.5 where entropy collapses",
        [
            ("GPPO", "gppo"),
            ("GRPO", "grpo"),
            ("CISPO", "cispo"),
            ("GPPO β1=0.5", "gppo-b0.5"),
            ("GPPO β1=0.25", "gppo-b0.25"),
        ],
    ),
    "loss_off": (
        "the same, off-policy: 16 updates per batch at the pilot's lr (a few % of tokens clipped)",
        [
            ("GPPO", "gppo-off"),
            ("GRPO", "grpo-off"),
            ("CISPO", "cispo-off"),
            ("GPPO β1=0.5", "gppo-b0.5-off"),
            ("GPPO β1=0.25", "gppo-b0.25-off"),
        ],
    ),
    "loss16": (
        "GPPO vs GRPO (Clip-Higher) vs CISPO at 16 updates per batch — further off-policy",
        [("GPPO", "gppo-u16"), ("GRPO", "grpo-u16"), ("CISPO", "cispo-u16")],
    ),
    "alpha": (
        "SFT-loss weight α (GPPO) — paper Table 6: 0.1 best",
        [("α=0", "alpha0"), ("α=0.1", "gppo"), ("α=0.2", "alpha0.2")],
    ),
    "filter": (
        "zero-advantage group filter — paper Fig. 5: filtering is better",
        [("filter on", "gppo"), ("filter off", "nofilter")],
    ),
    "code": (
        "soft vs all-or-nothing code reward, programs with partial credit — paper Fig. 3: soft better",
        [("soft", "code-soft"), ("binary", "code-binary")],
    ),
    "sft": (
        "SFT data: only-correct vs mixed traces — paper Table 2: mixed as good or better on hard problems",
        [
            ("only-correct (--keep=correct)", "sft-correct"),
            ("mixed (the difficulty rule)", "sft-mixed"),
        ],
    ),
}
RL_OPTIONS = {
    "gppo": [],
    "grpo": ["--loss_mode=grpo"],
    "cispo": ["--loss_mode=cispo"],
    "alpha0": ["--alpha=0"],
    "alpha0.2": ["--alpha=0.2"],
    "nofilter": ["--filter_zero_adv=false"],
    "gppo-b0.5": ["--beta1=0.5"],
    "gppo-b0.25": ["--beta1=0.25"],
    "code-soft": ["--code_reward=soft"],
    "code-binary": ["--code_reward=binary"],
}
# distill.py --keep; mixed = train.sh's data
SFT_KEEP = {"sft-mixed": "difficulty", "sft-correct": "correct"}
# claims about the clipping rule: untestable where it does not act
CLIP_ARMS = ("loss", "loss_off", "loss16")

# The off-policy sweep: how far the policy moves from the sampler within one rollout batch is set by
# the number of optimizer updates per batch, u = prompts_per_step / mini_batch_prompts. With u = 1,
# r = 1 for every token and the three rules give the same gradient; the more updates, the more
# tokens leave the trust region and are clipped.
RULES = {"gppo": "GPPO", "grpo": "GRPO", "cispo": "CISPO"}
UPDATES = (1, 4, 16)
BETA1 = (1.0, 0.5, 0.25)
ARMS["offpolicy"] = (
    "updates per rollout batch x clipping rule — GPPO, GRPO and CISPO differ only off-policy",
    [(f"{RULES[r]} u={u}", f"{r}-u{u}") for u in UPDATES for r in RULES],
)
SWEEP_HIGH_LR = 2e-4
ARMS["offpolicy_lr"] = (
    f"the clipping rule at u={UPDATES[-1]} and a higher lr ({SWEEP_HIGH_LR:g}): further off-policy",
    [
        (
            f"{RULES[r]} u={UPDATES[-1]} lr={SWEEP_HIGH_LR:g}",
            f"{r}-u{UPDATES[-1]}-lr{SWEEP_HIGH_LR:g}",
        )
        for r in RULES
    ],
)
ARMS["beta1"] = (
    "GPPO's β1 (low-side clipped tokens) far off-policy — authors: 0.25-0.5 against entropy collapse",
    [(f"β1={b:g}", f"gppo-b{b:g}-uB") for b in BETA1],
)


def run_name(name, cfg) -> str:
    """The run behind an arm's variant, so no run is trained twice: a rule at the base updates per
    batch is the loss arm's run; β1 = 1 is GPPO's run at beta1_updates; GRPO and CISPO at u = 1 are
    GPPO's u = 1 run (r = 1 up to rounding, no token is clipped, and inside the trust region the
    three rules compute the same gradient bit for bit: tests/test_gppo_loss.py)."""
    base_u = cfg.prompts_per_step // cfg.mini_batch_prompts
    if name == "gppo-b1-uB":
        name = f"gppo-u{cfg.beta1_updates}"
    if re.fullmatch(r"(grpo|cispo)-u1", name):
        name = "gppo-u1"
    m = re.fullmatch(r"(gppo|grpo|cispo)-u(\d+)", name)
    return m.group(1) if m and int(m.group(2)) == base_u else name


def rl_options(name, cfg, off_lr=None) -> list:
    """gppo.py options of a run, from its name: the arms' fixed runs, `RULE-uU` (U updates per
    rollout batch), `gppo-bB-uB` (β1 = B at cfg.beta1_updates updates per batch), `RULE-off` /
    `gppo-bB-off` (cfg.off_updates per batch at the pilot's lr off_lr) and `pilot-lrX` (GPPO at
    cfg.off_updates and lr X). Later options override."""
    if name in RL_OPTIONS:
        return RL_OPTIONS[name]
    off = re.fullmatch(r"(gppo|grpo|cispo)(?:-b([\d.]+))?-off", name)
    if off:
        beta = [f"--beta1={off.group(2)}"] if off.group(2) else []
        return [
            f"--loss_mode={off.group(1)}",
            f"--mini_batch_prompts={cfg.prompts_per_step // cfg.off_updates}",
            f"--lr={off_lr}",
            *beta,
        ]
    pilot = re.fullmatch(r"pilot-lr([\d.e-]+)", name)
    if pilot:
        return [
            "--loss_mode=gppo",
            f"--mini_batch_prompts={cfg.prompts_per_step // cfg.off_updates}",
            f"--lr={pilot.group(1)}",
        ]
    m = re.fullmatch(r"(gppo|grpo|cispo)-u(\d+)(?:-lr([\d.e-]+))?", name) or re.fullmatch(
        r"(gppo)-b([\d.]+)-uB", name
    )
    if not m:
        raise KeyError(name)
    updates = int(m.group(2)) if "-b" not in name else cfg.beta1_updates
    beta = [f"--beta1={m.group(2)}"] if "-b" in name else []
    lr = m.group(3) if "-b" not in name and m.group(3) else cfg.lr
    return [
        f"--loss_mode={m.group(1)}",
        f"--mini_batch_prompts={cfg.prompts_per_step // updates}",
        f"--lr={lr}",
        *beta,
    ]


@dataclass
class AblateConfig:
    # fmt: off
    out_dir: str = "out/ablate"
    arms: str = "loss,loss_off,alpha,filter,code,sft"  # any subset, comma-separated (also: loss16, offpolicy, ...)
    seeds: int = 8                     # seeds 0..seeds-1 of every RL arm (the same seeds in each: paired)
    sft_seeds: int = 5                 # seeds of the sft arm (each an SFT data set and model of its own)
    parallel: int = 2                  # runs at once, one thread each
    stop_after_minutes: float = 0.0    # start no run after this many minutes (running ones finish, and the
    #   evaluations of finished runs still start); 0 = no limit
    dry_run: bool = False              # print the plan (runs, core-minutes, detectable effects) and stop
    sft_from: str = ""                 # an SFT Hugging Face dir for the RL arms; empty = train one (mixed, seed 0)
    sft_args: str = "--epochs=1 --row_tokens=1024 --rows_per_step=2"   # sft.py options of every SFT run (train.sh's)
    toy_numbers: int = 3               # Countdown numbers per RL prompt and held-out problem (train.sh's RL set: 3,
    #   where the SFT model meets the calibration; 4: the hard prompts)
    gppo_args: str = ""                # extra gppo.py options for every RL run
    steps: int = 30                    # RL steps (rollout batches) of the Countdown arms
    warmup_steps: int = 10             # gppo.py's linear lr warmup; the metric averages the steps after it
    metric: str = "on_policy"          # the verdicts' metric: on_policy (mean on-policy accuracy after the warmup) |
    #   held_out (gppo.py's held-out Avg@k at the last step: the protocols before 2026-12-07; needs eval_every)
    prompts_per_step: int = 16         # prompt groups per rollout batch (train.sh: 32; halved so the arms fit 2 cores)
    mini_batch_prompts: int = 2        # 16/2 = 8 optimizer steps per rollout batch, as the paper's 128/16
    lr: float = 5e-5                   # train.sh's
    group_size: int = 8
    max_response_len: int = 320        # train.sh's
    eval_every: int = 0                # gppo.py's held-out eval every k steps (eval_problems x rl_eval_k); 0 = none
    ckpt_every: int = 10               # gppo.py's checkpoint (exact resume) every k steps
    eval_problems: int = 100           # held-out problems per gppo.py eval
    rl_eval_k: int = 4                 # gppo.py --eval_k: samples per held-out problem at T = 1 (Avg@k, pass@k)
    final_eval_problems: int = 400     # eval.py on each final math RL model (T = 1, eval_k samples) and on the sft
    #   arm's models (T = 0.6): 400 x 5 puts the eval's own sampling SD at about 0.01 (the toy's test split
    #   holds 439 distinct 3-number problems, so not 500); 0 = no final eval
    code_steps: int = 20               # the code arm: each sample runs its tests in the sandbox
    code_prompts_per_step: int = 8
    code_prompts: int = 200            # toy code RL prompts (programs with partial credit)
    eval_k: int = 5                    # eval.py samples per problem
    eval_code_problems: int = 200      # held-out toy code problems (the code arm's final eval)
    max_gen_rounds: int = 3            # runs refill dropped groups, so every rollout batch trains prompts_per_step
    #   groups and u updates per batch is what it says
    beta1_updates: int = 16            # the beta1 sweep's updates per rollout batch
    off_updates: int = 16              # loss_off: updates per rollout batch (mini-batches of prompts_per_step / this)
    pilot_lrs: str = "7e-5,1e-4,1.4e-4,2e-4,2.8e-4"   # loss_off: the pilot's candidate lrs (GPPO, one run each)
    pilot_steps: int = 15              # ... steps of each pilot run (the clipped fraction is read after the warmup)
    pilot_seed: int = 100              # ... its seed (no arm runs it)
    off_clip_target: float = 0.02      # loss_off's lr: the smallest candidate whose pilot clips this fraction of tokens
    #   (low + high, mean over the steps after warmup); none: the largest
    archive: str = ""                  # a directory of the finished runs (experiments/ablate_archive.py): restored
    #   into out_dir first (--dry_run too), saved after each finished job; carries one ablation across machines
    untestable_share: float = 0.01     # a clipping-rule claim whose arms put less of the gradient's coefficients on
    # fmt: on
    #   clipped tokens is "untestable in this regime" (docs/clip_mechanism.md: the rules' outcomes
    #   then agree)

    def __post_init__(self):
        bad = set(self.arms.split(",")) - set(ARMS)
        split = (
            self.prompts_per_step % self.mini_batch_prompts
            or self.code_prompts_per_step % self.mini_batch_prompts
        )
        counts = (
            min(self.seeds, self.sft_seeds, self.parallel, self.ckpt_every) < 1
            or min(self.steps, self.code_steps, self.pilot_steps) < 1
            or self.eval_every < 0
        )
        if (
            bad
            or split
            or counts
            or any(
                self.prompts_per_step % u for u in (*UPDATES, self.beta1_updates, self.off_updates)
            )
        ):
            raise ValueError(
                f"AblateConfig: arms must be a subset of {list(ARMS)} "
                f"(unknown: {sorted(bad)}); "
                "seeds, sft_seeds, parallel, ckpt_every, steps, code_steps, pilot_steps >= 1, "
                "eval_every >= 0; (code_)prompts_per_step "
                "multiples of mini_batch_prompts; prompts_per_step a multiple of every sweep point "
                f"{UPDATES}, of beta1_updates and of off_updates"
            )
        if self.metric not in ("on_policy", "held_out") or (
            self.metric == "held_out" and not self.eval_every
        ):
            raise ValueError(
                f"AblateConfig: metric={self.metric!r} must be on_policy or held_out "
                "(held_out needs eval_every > 0)"
            )
        if self.pilot_steps <= self.warmup_steps:
            raise ValueError(
                f"AblateConfig: pilot_steps={self.pilot_steps} must exceed "
                f"warmup_steps={self.warmup_steps} (the pilot reads the clipped fraction "
                "after the warmup)"
            )


# ---- metrics -> tables (pure functions; tests/test_ablate.py)


def read_metrics(path, max_step=None):
    """metrics.jsonl -> {step: record}; a step logged twice (a resumed run) keeps its last record. A
    null (a NaN, as the metrics file writes it) is left out, as a value the step does not have."""
    records = (
        [json.loads(line) for line in open(path) if line.strip()] if os.path.exists(path) else []
    )
    return {
        r["step"]: {k: v for k, v in r.items() if v is not None}
        for r in records
        if max_step is None or r["step"] <= max_step
    }


def with_treatment_metrics(records: dict) -> dict:
    """The per-step values the filter and code claims' treatments act on, added to each record:
    groups_dropped_frac, the share of sampled groups dropped for a zero advantage (what the filter
    changes; 0 with it off); partial_credit, the mean reward less the share of fully correct samples
    (what a soft code reward adds over a binary one: 0 when every reward is 0 or 1, as on gppo.py's
    default reward scale; on one with negative rewards it is not partial credit)."""
    for record in records.values():
        if "groups_kept" in record:
            record["groups_dropped_frac"] = 1 - record["groups_kept"]
        if "reward" in record and "accuracy" in record:
            record["partial_credit"] = record["reward"] - record["accuracy"]
    return records


def curve(records, key, window=1):
    """[(step, value)] of `key`; window > 1: each value is the mean of the steps in (step − window,
    step]."""
    points = sorted((s, r[key]) for s, r in records.items() if key in r)
    return (
        points
        if window <= 1
        else [(s, statistics.fmean(v for t, v in points if s - window < t <= s)) for s, _ in points]
    )


def mean_std(values):
    values = [v for v in values if v is not None]
    return (
        (None, None)
        if not values
        else (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
    )


def fmt(mean, std, digits=3):
    return "—" if mean is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def metric_value(records, steps, warmup, metric) -> float:
    """One run's value of the protocol's metric, None if the run has not reached `steps`: on_policy,
    the mean on-policy accuracy over the steps after the warmup (all of them if the run is no longer
    than the warmup); held_out, the held-out Avg@k logged at the last step."""
    if max(records, default=0) < steps:
        return None
    if metric == "held_out":
        return records[steps].get("eval_avg_k")
    after = [r["accuracy"] for s, r in records.items() if warmup < s <= steps and "accuracy" in r]
    return statistics.fmean(
        after or [r["accuracy"] for s, r in records.items() if 0 < s <= steps and "accuracy" in r]
    )


def pilot_lrs(cfg) -> list:
    return [float(x) for x in cfg.pilot_lrs.split(",")]


def off_policy_lr(cfg) -> tuple:
    """loss_off's lr from the finished pilot: (lr, {candidate lr: clipped fraction}, {candidate lr:
    steps after the warmup with an update}); lr None while a pilot run is unfinished. The clipped
    fraction (low + high) is each run's mean over its steps after the warmup that made an update
    (a step without one logs none), None if none did; the rule picks the smallest candidate that
    reaches off_clip_target, else the largest. Process metrics only."""
    clipped = {}
    updated = {}
    for lr in pilot_lrs(cfg):
        records = read_metrics(
            os.path.join(cfg.out_dir, "runs", f"pilot-lr{lr:g}-s{cfg.pilot_seed}", "metrics.jsonl"),
            cfg.pilot_steps,
        )
        if max(records, default=0) < cfg.pilot_steps:
            return None, clipped, updated
        after = [
            r["clip_frac_low"] + r["clip_frac_high"]
            for s, r in records.items()
            if s > cfg.warmup_steps and "clip_frac_low" in r
        ]
        clipped[lr] = statistics.fmean(after) if after else None
        updated[lr] = len(after)
    reached = [lr for lr in sorted(clipped) if (clipped[lr] or 0.0) >= cfg.off_clip_target]
    return (reached[0] if reached else max(clipped)), clipped, updated


def pilot_text(cfg, clipped: dict, updated: dict) -> str:
    """One candidate's pilot result: its clipped %, and how many steps after the warmup updated
    (one update per batch is on-policy and cannot clip; a collapsed run updates on none)."""
    after = cfg.pilot_steps - cfg.warmup_steps
    return ", ".join(
        f"lr {lr:g}: "
        + ("no update" if v is None else f"{100 * v:.2f}%")
        + ("" if updated[lr] == after else f" ({updated[lr]} of {after} steps updated)")
        for lr, v in clipped.items()
    )


# ---- the runs: jobs {name, dir, cmd, done(), after, steps}, run by a small scheduler


def plan(cfg):
    """Every job of the arms, in the order to start them: the base model's data and the base model,
    the pilot, then seed by seed (each seed's runs of every arm, longest first), so that a stopped
    invocation leaves paired seeds. loss_off's runs are planned once the pilot has finished (main
    plans again after each pass)."""
    arms = cfg.arms.split(",")
    jobs = []
    run_dir = lambda name: os.path.join(cfg.out_dir, "runs", name)  # noqa: E731
    # noqa: E731 (written last)
    exported = lambda d: lambda: os.path.exists(os.path.join(d, "hf", "tokenizer.json"))
    off_lr = off_policy_lr(cfg)[0] if "loss_off" in arms else None
    # in the order of cfg.arms
    rl_runs = list(
        dict.fromkeys(
            run_name(r, cfg)
            for a in arms
            if a != "sft" and (a != "loss_off" or off_lr)
            for _, r in ARMS[a][1]
        )
    )
    sft_runs = (
        [f"{v}-s{s}" for v in SFT_KEEP for s in range(cfg.sft_seeds)] if "sft" in arms else []
    )
    needs_base = (rl_runs or "loss_off" in arms) and not cfg.sft_from
    if needs_base:  # the base model first, so the RL runs can start early
        sft_runs = ["sft-mixed-s0"] + [r for r in sft_runs if r != "sft-mixed-s0"]
    base, base_after = (
        (cfg.sft_from, [])
        if cfg.sft_from
        else (os.path.join(run_dir("sft-mixed-s0"), "hf"), ["sft-mixed-s0"])
    )

    def eval_job(of, model, out, options, after, seed, problems):
        done = os.path.join(out, "results.json")
        return dict(
            name=f"{os.path.basename(out)}:{of}",
            dir=out,
            after=after,
            steps=None,
            seed=seed,
            problems=problems,
            done=lambda: os.path.exists(done),
            cmd=[
                "eval.py",
                f"--model={model}",
                f"--out_dir={out}",
                f"--k={cfg.eval_k}",
                "--reward_workers=2",
                *options,
            ],
        )

    toys = {}  # seed -> the job writing the toy's files of that seed (tools/toy.py), planned once

    def toy_job(seed):
        """The toy's files of a seed: the teacher's responses (distill.py), RL prompts, held-out
        sets (the same for every seed: sized for the evals below). Returns the directory; the job
        joins the plan the first time."""
        d = run_dir(f"toy-s{seed}")
        if seed not in toys:
            last = os.path.join(d, "test", "toy_code.jsonl")  # written last
            toys[seed] = dict(
                name=f"toy-s{seed}",
                dir=d,
                done=lambda: os.path.exists(last),
                after=[],
                steps=None,
                seed=seed,
                cmd=[
                    "tools/toy.py",
                    "--task=countdown",
                    f"--seed={seed}",
                    f"--rl_seed={seed}",
                    f"--rl_programs={cfg.code_prompts}",
                    f"--test_problems={test_problems}",
                    f"--test_programs={cfg.eval_code_problems}",
                    f"--out={d}",
                ],
            )
            jobs.append(toys[seed])
        return d

    def sft_jobs(name):
        """The SFT run `name` and, before it, the distill.py run that makes its data (same seed)
        from the toy's."""
        d = run_dir(name)
        seed = int(name.rsplit("-s", 1)[1])
        data_dir = run_dir("distill-" + name)
        made = os.path.join(data_dir, "report.json")
        toy = toy_job(seed)
        teacher = ",".join(
            os.path.join(toy, "teacher", f"{n}.jsonl")
            for n in ("countdown_3", "countdown_4", "toy_code")
        )
        benchmarks = ",".join(os.path.join(toy, "test", f"countdown_{n}.jsonl") for n in (3, 4))
        return [
            dict(
                name="distill-" + name,
                dir=data_dir,
                done=lambda: os.path.exists(made),
                after=[f"toy-s{seed}"],
                steps=None,
                seed=seed,
                cmd=[
                    "distill.py",
                    f"--responses={teacher}",
                    f"--benchmarks={benchmarks}",
                    f"--keep={SFT_KEEP[name.rsplit('-', 1)[0]]}",
                    f"--seed={seed}",
                    f"--out_dir={data_dir}",
                ],
            ),
            dict(
                name=name,
                dir=d,
                done=lambda d=d: exported(d)() or ablate_archive.restored(d),
                after=["distill-" + name],
                steps=None,
                seed=seed,
                cmd=[
                    "sft.py",
                    f"--out_dir={d}",
                    f"--seed={seed}",
                    f"--data={data_dir}/sft.jsonl",
                    f"--tokenizer={toy}/tokenizer",
                    *shlex.split(cfg.sft_args),
                ],
            ),
        ]

    def rl_job(name, seed, steps, code, options, eval_every):
        d = run_dir(f"{name}-s{seed}")
        toy = toy_job(seed)
        done = lambda d=d, n=steps: (
            max(read_metrics(os.path.join(d, "metrics.jsonl")) or [0]) >= n
            and (exported(d)() or ablate_archive.restored(d))
        )
        task = (
            [
                f"--code_data={toy}/rl/toy_code.jsonl",
                f"--prompts_per_step={cfg.code_prompts_per_step}",
                "--max_response_len=256",
            ]
            if code
            else [
                f"--math_data={toy}/rl/countdown_{cfg.toy_numbers}.jsonl",
                f"--eval_data={toy}/test/countdown_{cfg.toy_numbers}.jsonl",
                *math_task,
            ]
        )
        return dict(
            name=f"{name}-s{seed}",
            dir=d,
            done=done,
            after=base_after + [f"toy-s{seed}"],
            steps=steps,
            seed=seed,
            cmd=[
                "gppo.py",
                f"--init_from={base}",
                f"--out_dir={d}",
                f"--seed={seed}",
                f"--steps={steps}",
                f"--mini_batch_prompts={cfg.mini_batch_prompts}",
                f"--lr={cfg.lr}",
                f"--group_size={cfg.group_size}",
                f"--warmup_steps={cfg.warmup_steps}",
                f"--eval_every={eval_every}",
                f"--ckpt_every={cfg.ckpt_every}",
                "--reward_workers=2",
                *task,
                *options,
                *shlex.split(cfg.gppo_args),
            ],
        )

    # the held-out sets' size (gppo.py reads a prefix)
    test_problems = cfg.final_eval_problems or cfg.eval_problems
    # noqa: E731
    held_out = lambda seed, code: (
        [f"--code_data={toy_job(seed)}/test/toy_code.jsonl"]
        if code
        else [
            f"--math_data={toy_job(seed)}/test/countdown_3.jsonl,"
            f"{toy_job(seed)}/test/countdown_4.jsonl"
        ]
    )
    code_eval = ["--max_tokens=400"]
    # the RL temperature (gppo.py's held-out eval samples as the policy does): 3- and 4-number sets,
    # the metric reads the RL prompts' kind
    final_eval = ["--temperature=1.0", "--top_p=1.0", f"--max_tokens={cfg.max_response_len}"]
    math_task = [
        f"--eval_problems={cfg.eval_problems}",
        f"--eval_k={cfg.rl_eval_k}",
        f"--prompts_per_step={cfg.prompts_per_step}",
        f"--max_gen_rounds={cfg.max_gen_rounds}",
        f"--max_response_len={cfg.max_response_len}",
    ]
    for name in sft_runs[:1] if needs_base else []:
        jobs += sft_jobs(name)
    # the pilot: GPPO at each candidate lr, no held-out eval (process metrics only)
    if "loss_off" in arms:
        jobs += [
            rl_job(
                f"pilot-lr{lr:g}",
                cfg.pilot_seed,
                cfg.pilot_steps,
                False,
                rl_options(f"pilot-lr{lr:g}", cfg),
                0,
            )
            for lr in pilot_lrs(cfg)
        ]
    first = len(jobs)  # the base model's toy files, its data and the base model; the pilot
    if "code" in arms:
        jobs.append(
            eval_job(
                "base",
                base,
                os.path.join(run_dir("base"), "eval_code"),
                held_out(0, True) + code_eval,
                base_after + ["toy-s0"],
                0,
                cfg.eval_code_problems,
            )
        )
    for name in rl_runs:
        code = name.startswith("code")
        for s in range(cfg.seeds):
            jobs.append(
                rl_job(
                    name,
                    s,
                    cfg.code_steps if code else cfg.steps,
                    code,
                    rl_options(name, cfg, off_lr),
                    0 if code else cfg.eval_every,
                )
            )
            d = run_dir(f"{name}-s{s}")
            if code:
                jobs.append(
                    eval_job(
                        f"{name}-s{s}",
                        os.path.join(d, "hf"),
                        os.path.join(d, "eval_code"),
                        held_out(s, True) + code_eval,
                        [f"{name}-s{s}"],
                        s,
                        cfg.eval_code_problems,
                    )
                )
            elif cfg.final_eval_problems:
                jobs.append(
                    eval_job(
                        f"{name}-s{s}",
                        os.path.join(d, "hf"),
                        os.path.join(d, "eval_final"),
                        held_out(s, False) + final_eval,
                        [f"{name}-s{s}"],
                        s,
                        2 * test_problems,
                    )
                )
    for name in sft_runs[1:] if needs_base else sft_runs:
        jobs += sft_jobs(name)
    # easy (3 numbers) and hard (4 numbers) held-out problems
    for name in sft_runs if "sft" in arms else []:
        seed = int(name.rsplit("-s", 1)[1])
        jobs.append(
            eval_job(
                name,
                os.path.join(run_dir(name), "hf"),
                os.path.join(run_dir(name), "eval"),
                held_out(seed, False) + ["--max_tokens=400"],
                [name],
                seed,
                2 * test_problems,
            )
        )
    # seed by seed: its toy files first (the rest reads them), then longest first (LPT, so the last
    # minutes are short jobs on both cores), its evals last noqa: E731
    order = lambda j: (
        j["seed"],
        j["cmd"][0] != "tools/toy.py",
        j["cmd"][0] == "eval.py",
        -core_minutes(j, cfg),
    )
    return jobs[:first] + sorted(jobs[first:], key=order)


def core_minutes(job, cfg) -> float:
    """A job's expected minutes on one core, two runs at once on the 2-core machine: the mean
    durations of the jobs of invocations 6-7 of the 2026-12-07 rerun (benchmarks/RESULTS.md).
    Math RL, 30 steps: 3.6 at 8 updates per batch, 3.8 at 16. Code RL: 14 per 20 steps (every
    sample's tests run in the sandbox). SFT 12.4 on mixed data (only-correct data: 6.8).
    distill.py 2; tools/toy.py 0.13. eval.py: 1.5 per 4,000 math samples of up to 320 tokens (2.0
    measured at 400), 12.8 per 1,000 code samples (each runs about 16 tests in the sandbox)."""
    tool = job["cmd"][0]
    cmd = job["cmd"]
    code = any(a.startswith("--code_data=") for a in cmd)
    if tool == "gppo.py":
        steps = int([a for a in cmd if a.startswith("--steps=")][-1].split("=")[1])
        mini = int([a for a in cmd if a.startswith("--mini_batch_prompts=")][-1].split("=")[1])
        updates = cfg.prompts_per_step // mini
        if code:
            return 14 * steps / 20
        return (3.4 + 0.025 * updates) * steps / 30
    if tool == "eval.py":
        samples = job["problems"] * cfg.eval_k
        if code:
            return max(0.5, samples * 12.8 / 1000)
        # generation: in proportion to the longest response allowed (the final evals: 320)
        max_tokens = [int(a.split("=")[1]) for a in cmd if a.startswith("--max_tokens=")]
        return max(0.5, samples * 1.5 / 4000 * (max_tokens or [320])[-1] / 320)
    if tool == "sft.py" and job.get("name", "").startswith("sft-correct"):
        return 6.8
    # any other script (the scheduler's tests run stand-ins): a minute
    return {"sft.py": 12.4, "distill.py": 2, "tools/toy.py": 0.13}.get(tool, 1.0)


def total_steps(job) -> int | None:
    """The steps of a gppo.py run, or of an sft.py run once its log has said them; else None."""
    if job["steps"]:
        return job["steps"]
    log = os.path.join(job["dir"], "log.txt")
    total = (
        re.findall(r"stopping after (\d+)|(\d+) steps\n", open(log).read())
        if job["cmd"][0] == "sft.py" and os.path.exists(log)
        else []
    )
    return int(total[-1][0] or total[-1][1]) if total else None


def progress(job):
    """Fraction done of a gppo.py or sft.py run (its metrics' last step), else None."""
    total = total_steps(job)
    step = max(read_metrics(os.path.join(job["dir"], "metrics.jsonl")) or [0])
    return step / total if total else None


def resumes_at(job) -> int:
    """The step a run starts from when launched: its newest complete checkpoint's (a stop saves
    one at its last step; after a kill, the steps logged since the last checkpoint are done
    again), 0 without one."""
    from parts.trainer import newest_checkpoint  # imports torch: only where a run's progress counts

    newest = newest_checkpoint(os.path.join(job["dir"], "checkpoint"))
    return newest[0] if newest else 0


def done_before(job) -> float:
    """Fraction of a run done before its launch (resumes_at over its steps)."""
    total = total_steps(job)
    return min(1.0, resumes_at(job) / total) if total else 0.0


def eta(running, pending, ratios, cfg, deadline=None):
    """'running: A 40% (ETA 2.1 min), B (ETA ~12.8 min), ...; all planned: ETA N min'. A run's
    time left is its progress in this launch extrapolated (a resumed run's steps before it do not
    count), else (an evaluation, a run just started) core_minutes()'s estimate of what is left
    times how long this invocation's finished jobs took against their estimates (ratios: pairs of
    measured and estimated minutes). Pending runs count at the same scaled estimates, a resumed
    one for its steps left; runs the plan adds later (loss_off's, after the pilot) are not in it."""
    estimated = sum(e for _, e in ratios)
    scale = sum(m for m, _ in ratios) / estimated if estimated > 0 else 1.0
    parts = []
    left = 0.0
    for j in running:
        f = progress(j)
        before = j.get("start_progress") or 0.0
        elapsed = time.time() - j["start"]
        # a restarted run first cuts its metrics back to its checkpoint: until it has written them,
        # they are the old launch's steps
        metrics = os.path.join(j["dir"], "metrics.jsonl")
        fresh = os.path.exists(metrics) and os.path.getmtime(metrics) >= j["start"]
        measured = bool(f and fresh and f - before > 0.02)
        remaining = (
            elapsed * (1 - f) / (f - before)
            if measured
            else max(0.0, core_minutes(j, cfg) * (1 - before) * 60 * scale - elapsed)
        )
        left += remaining
        parts.append(
            f"{j['name']} {f:.0%} (ETA {remaining / 60:.1f} min)"
            if measured
            else f"{j['name']} (ETA ~{remaining / 60:.1f} min)"
        )
    todo = sum(core_minutes(j, cfg) * (1 - done_before(j)) * 60 * scale for j in pending)
    stop = ""
    if deadline is not None:
        after = (deadline - time.time()) / 60
        stop = f"; no run starts after {after:.0f} more min" if after > 0 else "; no more starts"
    return (
        "running: "
        + ", ".join(parts)
        + f"; all planned: ETA {(left + todo) / cfg.parallel / 60:.0f} min{stop}"
    )


def stop_on_sigterm(*_):
    """SIGTERM: say how to go on, then exit 128 + SIGTERM, as a stopped job does (train.sh tells a
    stop from a failure by it); run_jobs' finally stops the running jobs at their checkpoints."""
    print("ablate: terminated; rerun the same command to resume", file=sys.stderr, flush=True)
    sys.exit(128 + signal.SIGTERM)


def run_jobs(jobs, cfg, deadline=None, replan=None, after_each=None):
    """Start ready jobs (every `after` finished) in list order, cfg.parallel at once, none after
    `deadline` (a time.time(); the running ones finish) but the evaluations of finished runs (a
    run without its evaluation counts for nothing, and its model would have to be kept).
    replan(): the plan again, asked after each finished job; jobs it adds (loss_off's, once the
    pilot is done) join the pending ones in its order. after_each(): called after each finished
    job. Returns the failed ones."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    finished = {j["name"] for j in jobs if j["done"]()}
    pending = [j for j in jobs if j["name"] not in finished]
    running = {}
    failed = set()
    ratios = []  # each finished job: (its minutes, core_minutes()'s estimate of what it had to do)
    print(
        f"ablate: {len(jobs)} runs, {len(finished)} already done, {len(pending)} to run, {cfg.parallel} at once"
    )
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    t0 = time.time()
    last_print = time.time()
    past = lambda: deadline is not None and time.time() > deadline  # noqa: E731
    evaluation = lambda j: os.path.basename(j["cmd"][0]) == "eval.py"  # noqa: E731
    ready = lambda j: all(a in finished | failed for a in j["after"])  # noqa: E731
    try:
        while running or any(not past() or (evaluation(j) and ready(j)) for j in pending):
            for j in [j for j in pending if ready(j)]:
                if past() and not evaluation(j):
                    continue
                if any(a in failed for a in j["after"]):
                    (
                        pending.remove(j),
                        failed.add(j["name"]),
                        print(f"  skip  {j['name']}: it needs a failed run"),
                    )
                elif len(running) < cfg.parallel:
                    pending.remove(j)
                    os.makedirs(j["dir"], exist_ok=True)
                    j["log"] = os.path.join(j["dir"], "log.txt")
                    j["start"] = time.time()
                    # a run resumed from its checkpoint: what it had done before this launch
                    j["start_progress"] = done_before(j)
                    cmd = [sys.executable, os.path.join(ROOT, j["cmd"][0]), *j["cmd"][1:]]
                    with open(j["log"], "a") as log:
                        log.write(f"$ {shlex.join(cmd)}\n")
                        log.flush()
                        running[j["name"]] = (
                            j,
                            subprocess.Popen(
                                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                            ),
                        )
                    print(f"  start {j['name']}: {shlex.join(j['cmd'])}")
            time.sleep(1)
            for name, (j, p) in list(running.items()):
                if p.poll() is None:
                    continue
                del running[name]
                if p.returncode == 0 and j["done"]():
                    finished.add(name)
                    minutes = (time.time() - j["start"]) / 60
                    before = j.get("start_progress") or 0.0
                    estimate = core_minutes(j, cfg) * (1 - before)
                    ratios.append((minutes, estimate))
                    resumed = (
                        f" (resumed at step {round(before * total_steps(j))} of {total_steps(j)})"
                        if before
                        else ""
                    )
                    print(
                        f"  done  {name} in {minutes:.1f} min{resumed} [{len(finished)}/{len(jobs)}]"
                    )
                    if after_each:  # e.g. save the archive: a machine lost mid-way loses less
                        after_each()
                    fresh = replan() if replan else []
                    known = {k["name"] for k in jobs}
                    if any(k["name"] not in known for k in fresh):
                        order = {k["name"]: i for i, k in enumerate(fresh)}
                        added = [k for k in fresh if k["name"] not in known and not k["done"]()]
                        jobs, pending = (
                            jobs + added,
                            sorted(pending + added, key=lambda k: order.get(k["name"], -1)),
                        )
                        print(
                            f"  plan  {len(added)} more run(s): "
                            + ", ".join(k["name"] for k in added)
                        )
                else:
                    failed.add(name)
                    print(
                        f"  FAILED {name} (exit {p.returncode}); the end of {j['log']}:\n    "
                        + "    ".join(open(j["log"]).readlines()[-5:])
                    )
            if running and time.time() - last_print > 60:
                last_print = time.time()
                print(
                    f"[{(last_print - t0) / 60:.1f} min] {len(finished)}/{len(jobs)} done; "
                    + eta([j for j, _ in running.values()], pending, ratios, cfg, deadline)
                )
    finally:  # interrupted (Ctrl-C, kill): stop our children; their checkpoints stay for the resume
        for j, p in running.values():
            p.terminate()
            p.wait()
    if pending:
        print(
            f"ablate: stop_after_minutes reached, {len(pending)} run(s) not started; run the same command to go on"
        )
    return failed


# ---- the report: ablation.md, ablation.json, ablation.png

SWEEP_METRICS = (
    "accuracy",
    "reward",
    "eval_avg_k",
    "eval_accuracy",
    "eval_pass_k",
    "entropy",
    "entropy_clipped",
    "clip_frac_low",
    "clip_frac_high",
    "approx_kl",
    "coef_share_clipped_low",
    "coef_share_clipped_high",
    "grad_norm",
    "grad_norm_max",
    "grad_clipped_frac",
    "groups_dropped_frac",
    "partial_credit",
)
MIXED = "mixed (the difficulty rule)"
CORRECT = "only-correct (--keep=correct)"

# The protocol's claims: (arm, the variant the paper favours, the one it is compared with), each on
# the metric of --metric (RL and code arms) or eval.py's Avg@k of the SFT models on easy (3-number)
# and hard (4-number) problems (sft; the paper finds mixed data hurts on easy prompts and helps on
# hard ones). Verdicts: experiments/verdicts.py, paired by seed (every arm runs the same seeds from
# the same base model or data seed), Holm over the report's claims.
CLAIMS = [
    (arm, favoured, other)
    for arm in ("loss", "loss_off")
    for favoured, other in (
        ("GPPO", "GRPO"),
        ("GPPO", "CISPO"),
        ("GPPO β1=0.5", "GPPO"),
        ("GPPO β1=0.25", "GPPO"),
    )
] + [
    ("loss16", "GPPO", "GRPO"),
    ("loss16", "GPPO", "CISPO"),
    ("alpha", "α=0.1", "α=0"),
    ("alpha", "α=0.1", "α=0.2"),
    ("filter", "filter on", "filter off"),
    ("code", "soft", "binary"),
    ("sft_easy", CORRECT, MIXED),
    ("sft_hard", MIXED, CORRECT),
]

# The SD of a claim's per-seed differences on the on-policy metric, for the minimum detectable
# effects stated before the runs, from the committed 3-number run
# (experiments/results/verdicts_corrected.json, family countdown3_all): RL claims, pooled over its 7
# RL claims' on_policy_after_warmup; code, its 2 steps after the warmup; sft, the endpoint's
# (eval.py Avg@4 on 100 problems; 400 x 5 now, so these overstate its sampling part).
PLANNING_SD = {"rl": 0.0127, "code": 0.0119, "sft_easy": 0.104, "sft_hard": 0.009}


def claims_of(cfg) -> list:
    arms = cfg.arms.split(",")
    return [c for c in CLAIMS if c[0] in arms or (c[0].startswith("sft_") and "sft" in arms)]


def design(cfg) -> list:
    """Per claim, before the runs: the planning SD of its per-seed differences, its seeds, the
    minimum detectable effect at 80% power at Holm's strictest level α/m (m = the report's claims)
    and the seeds that would make it 0.03."""
    claims = claims_of(cfg)
    rows = []
    for arm, favoured, other in claims:
        sd = PLANNING_SD.get(arm if arm in ("code", "sft_easy", "sft_hard") else "rl")
        n = cfg.sft_seeds if arm.startswith("sft") else cfg.seeds
        rows.append(
            dict(
                claim=f"{arm}: {favoured} > {other}",
                sd=sd,
                seeds=n,
                mde=mde(sd / math.sqrt(n), n - 1, ALPHA / len(claims)) if n > 1 else None,
                seeds_for_0_03=seeds_needed(sd, 0.03, len(claims)),
            )
        )
    return rows


def design_lines(rows) -> list:
    lines = [
        "| claim | planning SD of the per-seed differences | seeds | MDE (80% power, α/m) | seeds for MDE 0.03 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        mde_text = "—" if r["mde"] is None else f"{r['mde']:.3f}"
        lines.append(
            f"| {r['claim']} | {r['sd']:.4f} | {r['seeds']} | {mde_text} | "
            f"{r['seeds_for_0_03'] if r['seeds_for_0_03'] <= 64 else '> 64'} |"
        )
    return lines


def run_stats(series) -> dict:
    """series {metric: one [(step, value)] curve per seed} -> {stat: (mean, std) over seeds} of each
    seed's own mean: on-policy accuracy at step 1 and over the last 5 steps, entropy over the last
    5; over all steps: the entropy of the clipped tokens, clip fractions and the shares of the
    gradient's coefficients on clipped tokens (in %), approx KL, the grad norm, its largest value
    and how often the clip acted (in %), the zero-advantage groups dropped (in %) and the partial
    credit (with_treatment_metrics); the last held-out greedy and pass@k."""

    def per_seed(key, last=None, scale=1.0, first=None, reduce=statistics.fmean):
        out = []
        for c in series.get(key, []):
            # nan: none clipped
            values = [v for _, v in (c[:first] if first else c[-last if last else 0 :]) if v == v]
            out.append(scale * reduce(values) if values else None)
        return out

    return dict(
        accuracy_first=mean_std(per_seed("accuracy", first=1)),
        accuracy_last5=mean_std(per_seed("accuracy", 5)),
        entropy_last5=mean_std(per_seed("entropy", 5)),
        entropy_clipped=mean_std(per_seed("entropy_clipped")),
        clip_frac_low_pct=mean_std(per_seed("clip_frac_low", scale=100)),
        clip_frac_high_pct=mean_std(per_seed("clip_frac_high", scale=100)),
        share_low_pct=mean_std(per_seed("coef_share_clipped_low", scale=100)),
        share_high_pct=mean_std(per_seed("coef_share_clipped_high", scale=100)),
        approx_kl=mean_std(per_seed("approx_kl")),
        grad_norm=mean_std(per_seed("grad_norm")),
        grad_norm_max=mean_std(per_seed("grad_norm_max", reduce=max)),
        grad_clip_pct=mean_std(per_seed("grad_clipped_frac", scale=100)),
        dropped_pct=mean_std(per_seed("groups_dropped_frac", scale=100)),
        partial_credit=mean_std(per_seed("partial_credit")),
        greedy_last=mean_std(per_seed("eval_accuracy", 1)),
        pass_k_last=mean_std(per_seed("eval_pass_k", 1)),
    )


RL_COLUMNS = [
    "on-policy acc., step 1 → last 5",
    "entropy (last 5)",
    "entropy, clipped tokens",
    "approx KL",
    "clipped low / high %",
    "gradient share on clipped low / high %",
    "grad norm (max)",
    "grad clip acts %",
    "zero-advantage groups dropped, % of sampled",
    "mean reward − accuracy (partial credit)",
]


def rl_cells(st) -> list:
    both = lambda a, b, d=2: f"{fmt(*st[a], d)} / {fmt(*st[b], d)}"  # noqa: E731
    return [
        f"{fmt(*st['accuracy_first'])} → {fmt(*st['accuracy_last5'])}",
        fmt(*st["entropy_last5"]),
        fmt(*st["entropy_clipped"]),
        fmt(*st["approx_kl"], 4),
        both("clip_frac_low_pct", "clip_frac_high_pct"),
        both("share_low_pct", "share_high_pct"),
        f"{fmt(*st['grad_norm'])} ({fmt(*st['grad_norm_max'])})",
        fmt(*st["grad_clip_pct"], 1),
        fmt(*st["dropped_pct"], 1),
        fmt(*st["partial_credit"]),
    ]


def clipped_share(stats: dict) -> float:
    """The fraction of the gradient's coefficients on clipped tokens (both sides; mean over steps
    and seeds), None for runs that did not log it."""
    low = stats["share_low_pct"][0]
    high = stats["share_high_pct"][0]
    return None if low is None or high is None else (low + high) / 100


def verdict_lines(verdicts: list) -> list:
    """Markdown lines of the family's verdicts: pairs and degrees of freedom, effect, the unadjusted
    95% interval, the interval at the Holm level that decided the claim (the level of its minimum
    detectable effect too), the word."""
    family = max((v.get("family_size", 0) for v in verdicts), default=0)
    lines = [
        "",
        f"## Verdicts: paired t per claim, Holm over a family of {family} (the untestable claims left out)",
        "Holm-level CI: the interval at the level of the Holm step that decided the claim (shown as its "
        "coverage); it excludes 0 exactly when the claim is resolved, and a minimum detectable effect is "
        "at that level. A claim with missing runs stays in the family (p = 1). MDE: the minimum "
        "detectable effect, the true effect this design would resolve 4 times in 5 at that level.",
        "| claim | seeds (df) | effect | 95% CI | Holm-level CI | MDE | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        if "effect" not in v:
            lines.append(f"| {v['claim']} | — | — | — | — | — | — | {v['verdict']} |")
            continue
        holm = (
            "—"
            if "ci_holm" not in v
            else f"[{v['ci_holm'][0]:+.3f}, {v['ci_holm'][1]:+.3f}] at {100 * (1 - v['level']):.2f}%"
        )
        p_holm = f" ({v['p_holm']:.3g})" if "p_holm" in v else ""
        mde = f"{v['mde']:.3f}" if "mde" in v else "—"  # none: untestable, or runs missing
        lines.append(
            f"| {v['claim']} | {v['n']} ({v['df']:g}) | {v['effect']:+.3f} | "
            f"[{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] | {holm} | {mde} | "
            f"{v['p']:.3g}{p_holm} | **{v['verdict']}** |"
        )
    return lines


def judge(cfg, finals: dict, shares: dict) -> list:
    """The family's verdicts, from finals {arm: {variant: per-seed values}} and shares {(arm,
    variant): the fraction of the gradient's coefficients on clipped tokens}. A clipping-rule claim
    whose two arms both put less than cfg.untestable_share there is "untestable in this regime":
    reported with its unadjusted 95% interval and left out of Holm's family (the share is a process
    metric, read before any outcome)."""
    claims = []
    untestable = {}
    for arm, favoured, other in claims_of(cfg):
        if arm not in finals:
            continue
        claims.append(
            Claim(
                f"{arm}: {favoured} > {other}",
                finals[arm][favoured],
                finals[arm][other],
                paired=True,
            )
        )
        share = [shares.get((arm, favoured)), shares.get((arm, other))]
        if arm in CLIP_ARMS and None not in share and max(share) < cfg.untestable_share:
            untestable[claims[-1].name] = max(share)
    tested = family_verdicts([c for c in claims if c.name not in untestable])
    by_name = {v["claim"]: v for v in tested}
    out = []
    for c in claims:
        paired = [
            s
            for s, (a, b) in enumerate(zip(c.favoured, c.other))
            if a is not None and b is not None
        ]
        if c.name in by_name:
            out.append(dict(by_name[c.name], seeds_paired=paired))
            continue
        v = compare(c) or {}
        if v:
            v["ci95"] = interval(v["effect"], v["se"], v["df"], ALPHA)
        out.append(
            dict(
                v,
                claim=c.name,
                seeds_paired=paired,
                verdict=f"untestable in this regime (clipped tokens carry "
                f"{100 * untestable[c.name]:.2f}% of the gradient's coefficients)",
                share=untestable[c.name],
                threshold=cfg.untestable_share,
            )
        )
    return out


def avg_at_k(path, bench):
    return json.load(open(path))["benchmarks"][bench]["avg_at_k"] if os.path.exists(path) else None


def cpu_kind() -> str:
    """'AMD EPYC, family 25 model 17, avx512f' from /proc/cpuinfo (its first processor), or what
    platform knows elsewhere: the kind of machine an invocation's runs ran on."""
    import platform

    try:
        info = dict(
            line.split(":", 1)
            for line in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines()
            if ":" in line
        )
        info = {k.strip(): v.strip() for k, v in info.items()}
        vector = "avx512f" if "avx512f" in info.get("flags", "").split() else "no avx512f"
        return f"{info['model name']}, family {info['cpu family']} model {info['model']}, {vector}"
    except (OSError, KeyError):
        return platform.processor() or platform.machine()


def git_commit() -> str:
    """The commit of the checkout this script runs from, '+' if tracked files differ from it; ''
    where there is no git."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        changed = subprocess.run(
            ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("+" if changed.stdout.strip() else "")


def invocation_lines(cfg, invocations: list) -> tuple:
    """-> (markdown lines, core-minutes): the commits the invocations ran from, the cost in
    core-minutes (wall time x --parallel, the runs' reward workers not counted), and a warning
    where the analysis settings (metric, untestable_share), which may change between invocations,
    did."""
    unknown = [i for i in invocations if "commit" not in i]
    core_minutes = sum(i["wall_minutes"] * i.get("parallel", cfg.parallel) for i in invocations)

    def commits_of(invocation):  # "start -> end" where the checkout changed while it ran
        ends = [invocation["commit_at_end"]] if "commit_at_end" in invocation else []
        return " -> ".join(c or "unknown" for c in [invocation["commit"], *ends])

    commits = Counter(commits_of(i) for i in invocations if "commit" in i)
    lines = [
        f"Cost: {core_minutes:.0f} core-minutes (wall time x --parallel; reward workers not counted)"
        + (
            f", {len(unknown)} invocation(s) recorded no settings (counted at --parallel={cfg.parallel})"
            if unknown
            else ""
        )
        + ". Commits: "
        + (", ".join(f"{c} ({n})" for c, n in commits.items()) or "not recorded")
        + "."
    ]
    cpus = Counter(i["cpu"] for i in invocations if "cpu" in i)
    if cpus:  # floating-point sums differ between CPU kinds (AVX2, AVX-512): say which ran
        lines[0] += " CPUs: " + ", ".join(f"{c} ({n})" for c, n in cpus.items()) + "."
    for key in ("metric", "untestable_share"):
        used = sorted({str(i[key]) for i in invocations if key in i} | {str(getattr(cfg, key))})
        if len(used) > 1:
            lines.append(f"**Warning: --{key} differed between invocations: {', '.join(used)}.**")
    return lines, core_minutes


def report(cfg, wall_minutes, invocations=None):
    run_file = lambda *p: os.path.join(cfg.out_dir, "runs", *p)  # noqa: E731
    seeds = range(cfg.seeds)
    kind = f"{cfg.toy_numbers}-number"
    invocations = invocations or [dict(wall_minutes=w) for w in wall_minutes]
    cost, core_minutes = invocation_lines(cfg, invocations)
    after = f"steps {cfg.warmup_steps + 1}-{cfg.steps}"
    metric = (
        f"on-policy accuracy, mean over {after}"
        if cfg.metric == "on_policy"
        else f"held-out Avg@{cfg.rl_eval_k} at step {cfg.steps}"
    )
    final = (
        f"eval.py Avg@{cfg.eval_k} at T = 1 on {cfg.final_eval_problems} {kind} problems"
        if cfg.final_eval_problems
        else "none of the math runs (--final_eval_problems=0)"
    )
    md = [
        f"# Countdown ablations: {cfg.seeds} seed(s), {cfg.steps} RL steps of {cfg.prompts_per_step} prompts x "
        f"{cfg.group_size} samples, {cfg.prompts_per_step // cfg.mini_batch_prompts} updates per step unless "
        f"labelled, lr {cfg.lr:g}",
        f"Mean ± std over seeds. Metric of the verdicts: {metric} ({kind} prompts; code: the fraction of samples "
        f"passing every test). Held-out (final): {final} (code: {cfg.eval_code_problems} programs). Wall time: {sum(wall_minutes):.0f} min in "
        f"{len(wall_minutes)} invocation(s). Command: `{shlex.join(sys.argv)}`",
        "",
        *cost,
        "",
        "Treatment checks (approx KL, clipped %, gradient share on clipped tokens, grad norm, grad clip acts): "
        "each run's mean over its steps that made an update (a step without one logs none), the warmup "
        "included; the entropy of clipped tokens over the steps that clipped some. A clipping-rule claim is "
        "untestable in this regime where both arms put under "
        f"{100 * cfg.untestable_share:g}% of the gradient's coefficients on clipped tokens "
        "(low + high). The filter's treatment: the zero-advantage groups it drops (mean over all "
        "steps); the code reward's: the partial credit a soft reward adds over the share of fully "
        "correct samples.",
        "",
        "## Design: minimum detectable effects at these seeds (stated before the runs)",
        *design_lines(design(cfg)),
    ]
    out = dict(
        config=asdict(cfg),
        wall_minutes=wall_minutes,
        invocations=invocations,
        core_minutes=core_minutes,
        design=design(cfg),
        arms={},
    )
    if "loss_off" in cfg.arms.split(","):
        off_lr, clipped, updated = off_policy_lr(cfg)
        out["pilot"] = dict(
            lr=off_lr,
            clipped={f"{lr:g}": v for lr, v in clipped.items()},
            steps_updated={f"{lr:g}": k for lr, k in updated.items()},
        )
        md += [
            "",
            f"Pilot (GPPO, {cfg.off_updates} updates per batch, seed {cfg.pilot_seed}, {cfg.pilot_steps} "
            "steps): tokens clipped after the warmup, mean over the steps that updated: "
            + pilot_text(cfg, clipped, updated)
            + f"; loss_off runs at lr {off_lr if off_lr is None else f'{off_lr:g}'} (the smallest reaching "
            f"{100 * cfg.off_clip_target:g}%, else the largest).",
        ]
    plots = {}
    sweep = []
    missing = []  # runs of the plan without a metric value: unfinished or failed
    finals = {}
    secondary = {}
    shares = {}
    for arm in cfg.arms.split(","):
        title, variants = ARMS[arm]
        md += ["", f"## {arm}: {title}"]
        out["arms"][arm] = {}
        if arm == "sft":
            problems = cfg.final_eval_problems or cfg.eval_problems
            md += [
                f"eval.py Avg@{cfg.eval_k} (T=0.6) of the SFT models on {problems} held-out problems of each kind.",
                "| SFT data | easy (3 numbers) | hard (4 numbers) |",
                "|---|---|---|",
            ]
            for label, name in variants:
                scores = {
                    p: [
                        avg_at_k(run_file(f"{name}-s{s}", "eval", "results.json"), f"countdown_{n}")
                        for s in range(cfg.sft_seeds)
                    ]
                    for p, n in (("easy", 3), ("hard", 4))
                }
                missing += [
                    f"{name}-s{s}"
                    for s in range(cfg.sft_seeds)
                    if None in (scores["easy"][s], scores["hard"][s])
                ]
                out["arms"][arm][label] = dict(run=name, per_seed=scores)
                finals.setdefault("sft_easy", {})[label] = scores["easy"]
                finals.setdefault("sft_hard", {})[label] = scores["hard"]
                md.append(
                    f"| {label} | {fmt(*mean_std(scores['easy']))} | {fmt(*mean_std(scores['hard']))} |"
                )
            continue
        code = arm == "code"
        steps = cfg.code_steps if code else cfg.steps
        rows = [
            "| variant | seeds | metric | held-out (final) | " + " | ".join(RL_COLUMNS) + " |",
            "|---" * (4 + len(RL_COLUMNS)) + "|",
        ]
        for label, name in variants:
            name = run_name(name, cfg)
            records = [
                with_treatment_metrics(
                    read_metrics(run_file(f"{name}-s{s}", "metrics.jsonl"), steps)
                )
                for s in seeds
            ]
            values = [metric_value(r, steps, cfg.warmup_steps, cfg.metric) for r in records]
            held_out = [
                avg_at_k(run_file(f"{name}-s{s}", "eval_code", "results.json"), "toy_code")
                if code
                else avg_at_k(
                    run_file(f"{name}-s{s}", "eval_final", "results.json"), f"countdown_{kind[0]}"
                )
                for s in seeds
            ]
            missing += [f"{name}-s{s}" for s in seeds if values[s] is None]
            if code or cfg.final_eval_problems:  # planned
                missing += [f"{name}-s{s} (held-out eval)" for s in seeds if held_out[s] is None]
            series = {k: [curve(r, k) for r in records] for k in SWEEP_METRICS}
            stats = run_stats(series)
            done = sum(v is not None for v in values)
            rows.append(
                f"| {label} | {done} | {fmt(*mean_std(values))} | {fmt(*mean_std(held_out))} | "
                + " | ".join(rl_cells(stats))
                + " |"
            )
            out["arms"][arm][label] = dict(
                run=name, metric=values, held_out=held_out, series=series, stats=stats
            )
            finals.setdefault(arm, {})[label] = values
            secondary.setdefault(arm, {})[label] = held_out
            shares[(arm, label)] = clipped_share(stats)
            plots.setdefault(arm, []).append(
                (label, [curve(r, "accuracy", 5) for r in records], series["entropy"])
            )
            if arm.startswith("offpolicy"):
                sweep.append((label, series, series["eval_avg_k"]))
        md += rows
    # a run shared by arms (loss's GPPO is alpha's α=0.1 and filter's "on") is named once
    missing = list(dict.fromkeys(missing))
    out["missing_runs"] = missing
    if missing:
        md[2:2] = [
            "",
            f"**Incomplete: {len(missing)} runs or evaluations without a result (unfinished or "
            f"failed), so this is not a result**: {', '.join(missing)}",
        ]
    out["verdicts"] = judge(cfg, finals, shares)
    md += verdict_lines(out["verdicts"])
    held = [
        Claim(f"{arm}: {fav} > {other}", secondary[arm][fav], secondary[arm][other], paired=True)
        for arm, fav, other in claims_of(cfg)
        if arm in secondary
    ]
    out["held_out"] = [
        dict(claim=c.name, **dict(s, ci95=interval(s["effect"], s["se"], s["df"], ALPHA)))
        for c, s in ((c, compare(c)) for c in held)
        if s
    ]
    md += [
        "",
        "## Held-out (final), paired by seed: not a verdict (the verdicts' metric is above)",
        "| claim | effect | 95% CI (unadjusted) |",
        "|---|---|---|",
    ] + [
        f"| {h['claim']} | {h['effect']:+.3f} | [{h['ci95'][0]:+.3f}, {h['ci95'][1]:+.3f}] |"
        for h in out["held_out"]
    ]
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
    """Per RL arm: on-policy accuracy (the verdicts' metric, mean of 5 steps) and token entropy;
    mean over seeds bold, each seed faint."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print(
            "matplotlib is not installed (pip install -r requirements-extras.txt): no plot (the tables "
            "hold the numbers)"
        )
    fig, axes = plt.subplots(len(plots), 2, figsize=(11, 3.2 * len(plots)), squeeze=False)
    for (arm, variants), (ax_acc, ax_entropy) in zip(plots.items(), axes):
        for label, accuracy, entropy in variants:
            for ax, series in ((ax_acc, accuracy), (ax_entropy, entropy)):
                steps = sorted({s for c in series for s, _ in c})
                if not steps:
                    continue
                mean = [statistics.fmean(v for c in series for t, v in c if t == s) for s in steps]
                color = ax.plot(steps, mean, label=label)[0].get_color()
                for c in (c for c in series if c):
                    ax.plot(*zip(*c), color=color, alpha=0.25, linewidth=0.8)
        ax_acc.set_title(
            f"{arm}: "
            + ("samples passing all tests" if arm == "code" else "on-policy accuracy")
            + " (mean of 5 steps)"
        )
        ax_entropy.set_title(f"{arm}: token entropy")
        for ax in (ax_acc, ax_entropy):
            ax.set_xlabel("RL step")
            if ax.get_legend_handles_labels()[0]:  # no curve yet: nothing to label
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def plot_sweep(sweep, path):
    """The off-policy sweep: one column per number of updates per rollout batch, one row per metric,
    one line per rule (mean over seeds bold, each seed faint), against the rollout batch (= RL
    step)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print(
            "matplotlib is not installed (pip install -r requirements-extras.txt): no sweep plot "
            "(ablation.json holds the curves)"
        )
    rows = (
        ("accuracy", "on-policy accuracy (T=1)"),
        ("eval_avg_k", "held-out Avg@k"),
        ("entropy", "token entropy"),
        ("clip_frac_low", "clipped low (fraction)"),
        ("clip_frac_high", "clipped high (fraction)"),
        ("approx_kl", "approx KL"),
    )
    # "u=4", ..., "u=16 lr=0.0002"
    points = list(dict.fromkeys(label.split(" ", 1)[1] for label, _, _ in sweep))
    fig, axes = plt.subplots(
        len(rows), len(points), figsize=(3.3 * len(points), 2.3 * len(rows)), squeeze=False
    )
    colors = dict(zip(RULES.values(), ("tab:red", "tab:blue", "tab:green")))
    for label, series, curves in sweep:
        rule, u = label.split(" ", 1)
        col = points.index(u)
        for row, (key, title) in enumerate(rows):
            ax = axes[row][col]
            runs = curves if key == "eval_avg_k" else series[key]
            steps = sorted({s for c in runs for s, _ in c})
            if not steps:
                continue
            ax.plot(
                steps,
                [statistics.fmean(v for c in runs for t, v in c if t == s) for s in steps],
                color=colors[rule],
                label=rule,
            )
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


def dry_run(cfg):
    """Print what an invocation would run and its cost, and the design's minimum detectable
    effects."""
    jobs = plan(cfg)
    todo = [j for j in jobs if not j["done"]()]
    # a run resumed from a checkpoint: its steps left
    left = {j["name"]: core_minutes(j, cfg) * (1 - done_before(j)) for j in todo}
    minutes = sum(left.values())
    waiting = []
    # planned after the pilot
    if "loss_off" in cfg.arms.split(",") and off_policy_lr(cfg)[0] is None:
        mini = f"--mini_batch_prompts={cfg.prompts_per_step // cfg.off_updates}"
        one = core_minutes(dict(cmd=["gppo.py", f"--steps={cfg.steps}", mini]), cfg)
        one += (
            core_minutes(dict(cmd=["eval.py"], problems=2 * cfg.final_eval_problems), cfg)
            if cfg.final_eval_problems
            else 0
        )
        waiting = [len(ARMS["loss_off"][1]) * cfg.seeds, len(ARMS["loss_off"][1]) * cfg.seeds * one]
    for j in todo:
        print(f"  {j['name']:<34} {left[j['name']]:5.1f} core-min  {shlex.join(j['cmd'])}")
    if waiting:
        print(
            f"  + {waiting[0]} loss_off runs{' and their evals' if cfg.final_eval_problems else ''}"
            f" after the pilot: {waiting[1]:.0f} core-min"
        )
    total = minutes + (waiting[1] if waiting else 0)
    per_run = 2 if cfg.final_eval_problems else 1  # a run and its final eval
    later = f" (+ {per_run * waiting[0]} after the pilot)" if waiting else ""
    print(
        f"ablate --dry_run: {len(todo)} of {len(jobs)} planned jobs to run{later}, about {total:.0f} core-minutes "
        f"({total / cfg.parallel / 60:.1f} h at {cfg.parallel} at once)"
    )
    print("\n".join(["", "design (stated before the runs):", *design_lines(design(cfg))]))


def fixed_settings(cfg) -> dict:
    """The settings every invocation on one out_dir must share: runs made with other settings must
    not be mixed in. Only the excluded ones may change between invocations (the analysis settings,
    metric and untestable_share, are recorded per invocation)."""
    return {
        k: v
        for k, v in asdict(cfg).items()
        if k
        not in (
            "out_dir",
            "arms",
            "seeds",
            "sft_seeds",
            "parallel",
            "steps",
            "code_steps",
            "metric",
            "stop_after_minutes",
            "dry_run",
            "untestable_share",
            "archive",
        )
    }


def main(cfg):
    fixed = fixed_settings(cfg)
    manifest = os.path.join(cfg.archive, ablate_archive.MANIFEST)
    if cfg.archive and os.path.exists(cfg.archive) and not os.path.exists(manifest):
        if not os.path.isdir(cfg.archive) or os.listdir(cfg.archive):
            raise CommandLineError(
                f"error: --archive={cfg.archive} is neither an ablation archive nor a new or empty directory"
            )
    if cfg.archive:
        ablate_archive.apart(cfg.archive, cfg.out_dir)
    if cfg.archive and os.path.exists(manifest):  # first: --dry_run counts what it holds as done
        # checked before anything is written, against the plan the archive's own pilot makes
        # (with loss_off's runs), then restored
        in_archive = plan(AblateConfig(**{**asdict(cfg), "out_dir": cfg.archive}))
        ablate_archive.check(cfg.archive, cfg.out_dir, fixed, in_archive, planned_in=cfg.archive)
        count = ablate_archive.restore(cfg.archive, cfg.out_dir, fixed, plan(cfg))
        print(f"ablate: restored {count} finished run(s) from {cfg.archive} into {cfg.out_dir}")
    if cfg.dry_run:
        return dry_run(cfg)
    os.makedirs(cfg.out_dir, exist_ok=True)
    if cfg.sft_from and not os.path.exists(os.path.join(cfg.sft_from, "config.json")):
        raise SystemExit(
            f"error: --sft_from={cfg.sft_from!r} has no config.json (give an sft.py out_dir/hf)"
        )
    state_path = os.path.join(cfg.out_dir, ablate_archive.STATE)
    state = (
        json.load(open(state_path))
        if os.path.exists(state_path)
        else dict(settings=fixed, wall_minutes=[])
    )
    diff = {
        k: (state["settings"].get(k), v) for k, v in fixed.items() if state["settings"].get(k) != v
    }
    if diff:
        raise CommandLineError(
            f"error: {cfg.out_dir} holds runs made with other settings, {{option: (old, new)}} = {diff}; "
            "use another --out_dir or the old values"
        )
    # states written before invocations were recorded: their wall minutes only
    # wall minutes that no record has (states from before the record, or written by older code)
    state.setdefault("invocations", [])
    state["invocations"] += [
        dict(wall_minutes=w) for w in state["wall_minutes"][len(state["invocations"]) :]
    ]
    # the code that runs now; each run starts from the checkout, so a commit made meanwhile runs
    # in the later ones (recorded below)
    commit = git_commit()

    def save_archive():
        """(runs the archive holds, "") or (None, why it was not saved): a failed save must not
        stop the runs or hide the report."""
        try:
            return ablate_archive.save(cfg.archive, cfg.out_dir, plan(cfg)), ""
        except (OSError, SystemExit) as e:
            unsaved = f"the archive {cfg.archive} was not saved ({e})"
            print(f"ablate: {unsaved}", file=sys.stderr, flush=True)
            return None, unsaved

    unsaved = ""
    t0 = time.time()
    deadline = t0 + 60 * cfg.stop_after_minutes if cfg.stop_after_minutes else None
    try:  # planned again after each finished run: the pilot's choice adds the loss_off runs
        failed = run_jobs(
            plan(cfg),
            cfg,
            deadline,
            replan=lambda: plan(cfg),
            after_each=save_archive if cfg.archive else None,
        )
    finally:
        wall = round((time.time() - t0) / 60, 2)
        state["wall_minutes"].append(wall)
        invocation = dict(
            wall_minutes=wall,
            parallel=cfg.parallel,
            commit=commit,
            cpu=cpu_kind(),
            metric=cfg.metric,
            untestable_share=cfg.untestable_share,
            argv=sys.argv[1:],
        )
        end_commit = git_commit()
        if end_commit != commit:
            invocation["commit_at_end"] = end_commit
        state["invocations"].append(invocation)
        with open(state_path + ".tmp", "w") as f:  # a stop mid-write leaves the old state whole
            json.dump(state, f, indent=1)
        os.replace(state_path + ".tmp", state_path)
        if cfg.archive:
            kept, unsaved = save_archive()
            if kept is not None:
                print(f"ablate: {cfg.archive} holds {kept} finished run(s); commit it to go on")
    report(cfg, state["wall_minutes"], state["invocations"])
    if failed:
        raise SystemExit(
            f"error: {len(failed)} run(s) failed or were skipped: {sorted(failed)}; rerun to retry them"
        )
    if unsaved:
        raise SystemExit(f"error: {unsaved}; rerun to save it (finished runs are skipped)")


if __name__ == "__main__":
    main(parse_config(AblateConfig))
