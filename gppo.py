"""GPPO reinforcement learning for reasoning models (Klear-Reasoner, arXiv 2508.07629): the RL loop.
One step:
  1. prompts_per_step prompts, dealt round-robin to the ranks, group_size responses each (rollout.py; seeded by the
     prompt's position in the run's prompt stream, so any number of ranks samples the same responses);
  2. rewards (reward.py), each response scored by a thread as soon as it finishes, while the engine decodes the rest;
  3. GRPO advantages per group, A = (R − mean) / (std + 1e-6); a group whose rewards are all equal has no signal and
     is dropped (--max_gen_rounds > 1 samples more prompts until prompts_per_step groups survive, as the authors do);
  4. the survivors, re-packed into mini-batches of mini_batch_prompts groups, spread evenly over the ranks by tokens,
     each into rows of train_row_tokens tokens where a group's prompt appears once and its responses attend to it;
  5. the old logprobs, recomputed by the trainer before any update (their gap to the engine's is logged);
  6. one optimizer step per mini-batch (the paper: 128/16 = 8 per rollout batch), L = GPPO + α·SFT (gppo_loss.py), a
     token-mean over the mini-batch on all ranks: the policy moves away from the sampler, so the clipping rule matters;
  7. the trained weights copied into the engine's own copy, in place.
Run:  python gppo.py --init_from=out/sft/hf    # the Countdown toy on CPU, after train.sh's SFT (docs/running.md)
      torchrun --nproc_per_node=8 gppo.py --init_from=out/sft/hf --math_data=math.jsonl --prompts_per_step=128 \
          --mini_batch_prompts=16 --lr=1e-6 --max_response_len=32768 --train_row_tokens=32768"""

import os

# read when torch loads OpenMP: see trainer.set_threads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# read when torch first touches CUDA: the KV pool and the trainer's activations are freed and
# allocated again every step, in sizes that do not repeat; growable segments keep the freed memory
# usable for the next sizes (no fragmentation that would leave the next pool short)
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import dataclasses
import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

import data
import eval as ev  # held-out evaluation is eval.py's (the name `eval` alone is Python's builtin)
import reward
from data import read
from gppo_loss import METRICS, MODES, LossConfig, group_advantages, rl_loss_from_hidden, step_means
from model import check_checkpoint, from_pretrained, hf_name, logits_fp32, on_meta
from parts import hf_checkpoint, math_checker, tracking, trainer
from parts.hf_checkpoint import EXPORT_DTYPES, Export
from parts.cli import parse_config
from parts.kv_cache import kv_cache_bytes
from parts.rl_report import NO_UPDATE_WARNING_STEPS, grad_clip_metrics, log_samples
from parts.rl_report import no_update_warning, step_counts, step_line, step_record
from parts.rl_rows import hidden_at_targets, logprob_gap, mini_batches_of, row_tensors
from parts.rl_rows import training_sequences
from parts.trainer import Checkpointer, GracefulStop, InputError, MetricsLog, TrainingStopped
from parts.trainer import agree_on_inputs, balance_ranks, check_run, copy_weights, cores_per_rank
from parts.trainer import global_max, global_sums, init_distributed, lockstep, on_for_device, print0
from parts.trainer import record_run, run_entry_point, set_threads
from rollout import LLMEngine, SamplingParams


@dataclass
class GPPOConfig:
    # fmt: off
    # data (the formats data.py reads: .jsonl, .json or .parquet); none given = the toy's files (--toy)
    math_data: str = ""                # math RL prompts (problem + answer; Countdown's target + nums)
    code_data: str = ""                # code RL prompts (with tests)
    skip_bad_rows: bool = False        # skip rows that cannot be graded ("proof" answers, no runnable test), counted
    eval_data: str = ""                # held-out math JSONL; empty = the toy's with the toy, none with --math_data or
    #                                    --code_data (the toy would say nothing of that model)
    toy: str = "countdown"             # no data given: the toy's files (python tools/toy.py --task=TOY writes them):
    #                                    countdown: RL on 3-number problems, held out the same | sums: 3-digit sums |
    #                                    none: no toy (data.TOY_FILES)
    init_from: str = "out/sft/hf"      # the SFT checkpoint (a Hugging Face directory with tokenizer.json)
    out_dir: str = "out/gppo"          # config.json, checkpoint/, metrics.jsonl, exports/, hf (link to the newest)
    # rollout (paper: 128 prompts x 8, T=1.0, top-p 1.0, prompt 4096 left-truncated, response 32768)
    prompts_per_step: int = 32         # prompt groups trained on per step (the rollout batch)
    group_size: int = 8                # responses per prompt, n (named so torchrun's argparse cannot mistake it)
    temperature: float = 1.0           # sampling temperature (the loss uses the same T)
    top_p: float = 1.0                 # nucleus sampling (1.0 = off, as the paper)
    max_prompt_len: int = 4096         # longer prompts are left-truncated
    max_response_len: int = 320        # new tokens per response
    oversample: float = 1.0            # each generation round samples oversample x prompts_per_step prompts
    max_gen_rounds: int = 1            # rounds to fill prompts_per_step surviving groups (1: as the paper; authors: 3)
    # update (paper, math: 16 prompts per mini-batch, i.e. 8 optimizer steps per rollout batch)
    mini_batch_prompts: int = 4        # prompt groups per optimizer step: 32/4 = 8 per batch, as the paper's 128/16
    train_row_tokens: int = 8192       # tokens per forward/backward (packed): bounds activation memory
    balance_ranks: bool = True         # move sequences so each rank trains as many tokens (the gradient is the same)
    share_prompts: bool = True         # a group's prompt once per packed row, its responses attending to it
    lr: float = 5e-5                   # paper: 1e-6 math, 5e-7 code; constant after warmup
    warmup_steps: int = 10             # linear warmup, in RL steps
    weight_decay: float = 0.1          # AdamW (paper: 0.1)
    grad_clip: float = 1.0             # max global grad norm
    activation_checkpointing: str = "auto"  # recompute each layer in the backward: auto (on GPU) | true | false
    # the loss (gppo_loss.py: the formula and its per-case table; paper §3, App. A.2 for beta1, beta2)
    loss_mode: str = "gppo"            # gppo | grpo | cispo
    eps_low: float = 0.2               # r is clipped to [1 - eps_low, 1 + eps_high]
    eps_high: float = 0.28             # Clip-Higher (DAPO)
    dual_clip: float = 10.0            # c: for A < 0 the loss is at most -A*c (no gradient beyond)
    beta1: float = 1.0                 # GPPO: scale of the low-side clipped tokens (A<0, r<1-eps_low)
    beta2: float = 1.0                 # GPPO: scale of the high-side clipped tokens (A>0, r>1+eps_high)
    high_side_only: bool = False       # GPPO variant: low-side clipped tokens get no gradient
    alpha: float = 0.1                 # weight of the SFT term on fully correct responses
    old_logprobs: str = "recompute"    # recompute (trainer forward before the updates) | engine (sampler's)
    filter_zero_adv: bool = True       # drop groups whose rewards are all equal (all right / all wrong)
    mask_truncated: bool = False       # leave responses cut at max_response_len out of the loss (overlong filter)
    # rewards
    reward_scale: str = "default"      # default (1 right, 0 wrong or unformatted) | authors (reward.RewardScale)
    code_reward: str = "soft"          # soft (fraction of tests passed) | binary (all pass or not)
    min_tests: int = 16                # code prompts with fewer tests are dropped (paper: 16)
    pass_rate_field: str = ""          # a stronger model's pass rate in the code data (data.load_code_jsonl); ...
    min_pass_rate: float = 0.5         # ... prompts below this are dropped (paper: 0.5 of 16; tools/filter_code.py)
    reward_workers: int = 8            # threads scoring responses (code runs in sandboxed processes)
    math_workers: int = 0              # math-verify processes busy at once; 0 = the cores this rank's threads leave
    sandbox_cores: int = 0             # code tests running at once in this rank; 0 = usable cores / local ranks
    sandbox_python: str = ""           # interpreter for candidate programs, e.g. a virtualenv with numpy (README)
    # bookkeeping
    steps: int = 30                    # RL steps
    seed: int = 1234                   # prompt order and sampling seeds
    eval_every: int = 10               # held-out greedy accuracy every k steps (and before/after); 0 = off
    eval_problems: int = 200           # held-out problems
    eval_k: int = 4                    # and k samples each at the RL temperature: Avg@k, pass@k (0 = greedy only)
    eval_seed: int = 0                 # the held-out samples' seed; fixed, so every run (any --seed) draws the same
    log_samples: int = 4               # responses per step to out_dir/samples.jsonl (prompt, response, reward,
    #                                    advantage, finish reason), drawn at random from rank 0's; 0 = none
    report_to: str = ""                # metrics also to: tensorboard, wandb (comma-separated; parts/tracking.py)
    ckpt_every: int = 20               # DCP checkpoint (exact resume) every k steps; always at the end
    ckpt_minutes: float = 30.0         # ... and every this many minutes (0 = off); SIGTERM/Ctrl-C also save one
    ckpt_background: bool = True       # write checkpoints while training goes on (host RAM for a copy of the shards)
    export_every: int = 0              # Hugging Face export (exports/step-N) every k steps; always at the end
    export_dtype: str = "auto"         # the export's dtype: auto (the --init_from checkpoint's) | bfloat16 | float32
    keep_exports: int = 3              # step exports kept in exports/ (the newest); 0 = all
    resume: bool = True                # continue the run in out_dir (same settings); false: start over, removing it
    device: str = "auto"               # auto | cpu | cuda
    threads: int = 0                   # CPU threads per rank; 0 = usable cores / ranks on this machine
    kv_cache_fraction: float = 0.3     # GPU, engine kept (--free_engine=false): the KV pool's share of free memory
    free_engine: str = "auto"          # free the engine's weights and KV pool while training: auto (GPU) | true | false
    dist_timeout_minutes: float = 120.0  # how long a rank may wait in a collective (for the slowest rank's rollout)
    # fmt: on

    def __post_init__(self):
        switch = ("auto", "true", "false")
        choices = dict(
            loss_mode=MODES,
            old_logprobs=("recompute", "engine"),
            code_reward=("soft", "binary"),
            reward_scale=("default", "authors"),
            toy=data.TOY_TASKS,
            export_dtype=tuple(EXPORT_DTYPES),
            activation_checkpointing=switch,
            free_engine=switch,
        )
        wrong = [k for k, allowed in choices.items() if getattr(self, k) not in allowed]
        why = [f"{k} must be one of {', '.join(choices[k])}" for k in wrong]
        # group_size: GRPO's advantages compare a prompt's samples; math_workers 0: automatic
        least = dict(oversample=1, max_gen_rounds=1, group_size=2, math_workers=0, log_samples=0)
        why += [f"{k} must be >= {low}" for k, low in least.items() if getattr(self, k) < low]
        if self.prompts_per_step % self.mini_batch_prompts:
            why.append("prompts_per_step must be a multiple of mini_batch_prompts")
        if why:
            raise ValueError(f"GPPOConfig: {why[0]}")
        tracking.backends(self.report_to)  # a missing package: one line now, not after loading
        self.loss = LossConfig(
            mode=self.loss_mode,
            eps_low=self.eps_low,  # the whole loss, once
            eps_high=self.eps_high,
            dual_clip=self.dual_clip,
            beta1=self.beta1,
            beta2=self.beta2,
            high_side_only=self.high_side_only,
            alpha=self.alpha,
            temperature=self.temperature,
        )


# What a resume may change: how far, how often to evaluate, save and export, where and how fast it
# runs (train_row_tokens and balance_ranks change the order of float sums only). Any other option
# must be the run's own (trainer.check_run): a changed loss, model, data or sampling setting is
# another run.
RESUME_MAY_CHANGE = tuple(
    (
        "steps eval_every log_samples report_to ckpt_every ckpt_minutes ckpt_background "
        "export_every export_dtype keep_exports resume out_dir device threads dist_timeout_minutes "
        "kv_cache_fraction free_engine activation_checkpointing train_row_tokens balance_ranks "
        "reward_workers math_workers sandbox_cores"
    ).split()
)


@dataclass
class Run:
    """The objects that live as long as this process and that every step uses, built once
    (build_run): one argument instead of a dozen for each part of the step."""

    # fmt: off
    cfg: GPPOConfig
    policy: torch.nn.Module          # the trainer's: FSDP2-sharded, fp32 master weights ...
    optimizer: torch.optim.Optimizer
    engine: LLMEngine                # ... the sampler's, with its own full copy, engine_model
    engine_model: torch.nn.Module
    tokenizer: object
    tasks: list                      # the RL prompts
    score_fn: object                 # (task, text, token_ids) -> (reward, fully correct) ...
    pool: ThreadPoolExecutor         # ... run by these threads while the engine decodes
    rank: int
    world: int
    device: torch.device
    export: Export | None = None     # how the Hugging Face exports are written (--export_dtype, --keep_exports)
    free_engine: bool = False        # --free_engine, resolved (trainer.on_for_device)
    samples_log: object = None       # rank 0's MetricsLog of samples.jsonl (--log_samples), set by main
    # fmt: on


# ----------------------------------------------------------------- one RL step: the docstring's 1-7


def rl_step(run: Run, step: int, prompt_cursor: int) -> tuple:
    """One RL step, the docstring's 1-7 (more sampling rounds while allowed and too few groups
    survive). Returns (metrics record, the stream position after the step)."""
    cfg = run.cfg
    t0 = time.time()
    sampled = []  # the groups of every round
    kept = []  # ... those with a learning signal
    rounds = 0
    engine_s = 0.0
    per_round = math.ceil(cfg.oversample * cfg.prompts_per_step)
    while rounds < cfg.max_gen_rounds:  # 1-3. sample, score, advantages
        new, seconds = sample_groups(run, prompt_cursor, per_round)
        engine_s += seconds
        prompt_cursor += per_round
        rounds += 1
        sampled += new
        kept += [g for g in new if g.keep]
        if global_sums(dict(kept=len(kept)), run.device)["kept"] >= cfg.prompts_per_step:
            break
    if run.samples_log is not None and run.rank == 0:  # --log_samples of them
        log_samples(run.samples_log, sampled, step + 1, cfg, run.tokenizer)
    # training gets the engine's memory; step 7 gives its weights back, generate() its KV pool
    if run.free_engine:
        run.engine.cache.release()
        for p in run.engine_model.parameters():
            p.data = p.data.new_empty(0)
    # 4. the survivors, re-packed (parts/rl_rows.py)
    size = cfg.mini_batch_prompts
    groups_by_batch = mini_batches_of(kept, size, cfg.prompts_per_step, run.world)
    mini_batches = [training_sequences(groups, cfg.mask_truncated) for groups in groups_by_batch]
    if cfg.balance_ranks:  # a rank trains what it sampled; the others would wait for the busiest
        mini_batches = balance_ranks(mini_batches, lambda seq: len(seq.ids), run.rank, run.world)
    t1 = time.time()
    gap = dict(gap_sum=0.0, gap_tokens=0, gap_max=0.0)  # 5. old logprobs (or engine's)
    if cfg.old_logprobs == "recompute":
        gap = recompute_old_logprobs(run, [seq for seqs in mini_batches for seq in seqs])
    t2 = time.time()
    updates = [train_mini_batch(run, seqs) for seqs in mini_batches]  # 6. a step per mini-batch
    updates = [update for update in updates if update]
    t3 = time.time()
    if updates or run.free_engine:  # 7. the engine's weights
        copy_weights(run.policy, run.engine_model)
    record, totals = step_metrics(run, sampled, kept, mini_batches, gap, updates)
    speed = dict(
        rollout_tok_s=totals["tokens"] / max(t1 - t0, 1e-9),
        train_tok_s=totals["train_tokens"] / max(t3 - t1, 1e-9),
        time_generate_and_reward=t1 - t0,
        time_engine=engine_s,
        time_old_logprobs=t2 - t1,
        time_train=t3 - t2,
        time_sync=time.time() - t3,
    )
    return dict(step=step + 1, gen_rounds=rounds, **record, **speed), prompt_cursor


# ------------------------------------------------------------------- 1-3. sample, score, advantages


def sample_groups(run: Run, first: int, count: int) -> tuple:
    """Sample and score prompts first..first+count-1 of the stream, every world-th on this rank,
    each seeded by its stream position (so samples do not depend on the number of ranks). Returns
    (groups, seconds in generate)."""
    cfg = run.cfg
    tokenizer = run.tokenizer
    positions = list(range(first + run.rank, first + count, run.world))
    chosen = data.stream(run.tasks, first, count, cfg.seed)[run.rank :: run.world]
    params = sampling_params(cfg, positions, tuple(data.stop_token_ids(tokenizer)))
    # (prompt, sample) -> its score, computed by the pool while the engine decodes the other samples
    jobs = {}

    def score_when_done(prompt: int, sample: int, out):
        text = tokenizer.decode(out.token_ids, skip_special_tokens=False)
        jobs[prompt, sample] = run.pool.submit(run.score_fn, chosen[prompt], text, out.token_ids)

    start = time.time()
    prompts = [task["prompt_ids"] for task in chosen]
    outs = run.engine.generate(prompts, params, on_finish=score_when_done) if chosen else []
    engine_s = time.time() - start
    groups = []
    for p, (position, task, samples) in enumerate(zip(positions, chosen, outs)):
        scored = [jobs[p, j].result() for j in range(len(samples))]
        rewards = [r for r, _ in scored]
        correct = [c for _, c in scored]
        advantages, keep = group_advantages([rewards])
        keep = bool(keep[0]) or not cfg.filter_zero_adv
        groups.append(Group(position, task, samples, rewards, correct, advantages[0], keep))
    return groups, engine_s


def sampling_params(cfg, positions: list, stop_ids: tuple) -> list:
    """SamplingParams of the prompts at these stream positions: group_size samples each, seeded by
    the position."""
    return [
        SamplingParams(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_tokens=cfg.max_response_len,
            n=cfg.group_size,
            stop_token_ids=stop_ids,
            seed=cfg.seed * 1_000_003 + p,
        )
        for p in positions
    ]


@dataclass
class Group:
    """One prompt's group_size responses, scored, on the rank that sampled them."""

    # fmt: off
    position: int            # the prompt's position in the run's prompt stream (orders groups across ranks)
    task: dict
    samples: list            # rollout.Sample per response
    rewards: list            # float per response
    correct: list            # bool per response (fully correct: the SFT term's positives)
    advantages: torch.Tensor  # (group_size,)
    keep: bool               # False: all rewards equal, no signal (dropped when filter_zero_adv)
    # fmt: on


# ------------------------------------------------------------------ 5. old logprobs, by the trainer


@torch.no_grad()
def recompute_old_logprobs(run: Run, seqs: list) -> dict:
    """Old logprobs from the trainer's forward, before any update of the step; returns the sum,
    count and max of |trainer − engine| over the tokens, a check of the engine (it should sample
    exactly what the trainer scores)."""
    cfg = run.cfg
    rows = data.pack_in_order(seqs, cfg.train_row_tokens, cfg.share_prompts)
    for row in lockstep(rows, run.device):
        layout = data.shared_prompt_layout(row, cfg.share_prompts) if row else None
        tensors = row_tensors(row, layout, run.device)
        logprobs = row_logprobs(run.policy, tensors, cfg.temperature)
        start = 0
        for seq in row or []:
            seq.old_logprobs = logprobs[start : start + seq.response_len]
            start += seq.response_len
    return logprob_gap(seqs)


@torch.no_grad()
def row_logprobs(policy, tensors: dict, temperature: float) -> list:
    """logπ of each response token of a row (row_tensors): log-softmax of fp32 logits / T, 1024
    tokens at a time."""
    hidden = hidden_at_targets(policy, tensors)
    weight = policy.lm_head.weight
    targets = tensors["targets"]
    chunks = []
    for i in range(0, len(hidden), 1024):
        logprobs = torch.log_softmax(logits_fp32(hidden[i : i + 1024], weight) / temperature, -1)
        chunks.append(logprobs.gather(1, targets[i : i + 1024, None])[:, 0])
    return torch.cat(chunks).tolist()


# ------------------------------------------------------------- 6. one optimizer step per mini-batch


def train_mini_batch(run: Run, seqs: list):
    """One optimizer step on this rank's sequences of a mini-batch, a token-mean over all ranks'
    tokens. Returns its metrics (kept on the device until one transfer at the end), or None if no
    rank has a token."""
    cfg = run.cfg
    device = run.device
    tokens = sum(s.response_len for s in seqs)
    sft_tokens = sum(s.response_len for s in seqs if s.correct)
    counts = global_sums(dict(tokens=tokens, sft_tokens=sft_tokens), device)
    if counts["tokens"] == 0:
        return None
    sums = dict.fromkeys(("loss", "weight") + METRICS, 0.0)
    for row in lockstep(data.pack_in_order(seqs, cfg.train_row_tokens, cfg.share_prompts), device):
        layout = data.shared_prompt_layout(row, cfg.share_prompts) if row else None
        tensors = row_tensors(row, layout, device)
        mask = torch.full_like(tensors["adv"], row is not None, dtype=torch.bool)  # dummy: zero
        hidden = hidden_at_targets(run.policy, tensors)
        loss, metrics = rl_loss_from_hidden(
            hidden,
            run.policy.lm_head.weight,
            tensors["targets"],
            tensors["old"],
            tensors["adv"],
            mask,
            sft_mask=tensors["sft"],
            cfg=cfg.loss,
            num_tokens=counts["tokens"],
            num_sft_tokens=max(counts["sft_tokens"], 1.0),
        )
        # FSDP averages gradients over ranks; the loss is already a global mean
        (loss * run.world).backward()
        for key in METRICS:
            sums[key] = sums[key] + metrics[key] * tensors["num_tokens"]
        sums["loss"] = sums["loss"] + loss.detach()
        sums["weight"] = sums["weight"] + tensors["num_tokens"]
    grad_norm = torch.nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.grad_clip)
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    # one transfer for the metrics and the norm
    sums = global_sums(dict(sums, grad_norm=grad_norm), device)
    # every rank added the same global norm
    grad_norm = sums.pop("grad_norm") / run.world
    if not math.isfinite(grad_norm):  # the same on every rank: all stop here, none is left waiting
        raise TrainingStopped(
            f"grad norm {grad_norm}: stopping before the update (try a lower --lr)"
        )
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    means = {key: sums[key] / max(sums["weight"], 1.0) for key in METRICS}
    return dict(loss=sums["loss"], grad_norm=grad_norm, **means)


# -------------------------------------------------------------------------- metrics, over all ranks


def step_metrics(
    run: Run, sampled: list, kept: list, mini_batches: list, gap: dict, updates: list
) -> tuple:
    """The step's record over all ranks (every sampled response, all rounds; the groups kept; the
    engine-trainer logprob gap; the updates' means), and the summed totals (parts/rl_report.py)."""
    counts, highest = step_counts(sampled, kept, mini_batches, gap)
    totals = global_sums(counts, run.device)
    maxima = {key: global_max(value, run.device) for key, value in highest.items()}
    lr = run.optimizer.param_groups[0]["lr"]
    record = step_record(totals, maxima, run.world, run.cfg.prompts_per_step, len(updates), lr)
    if updates:  # the loss's metrics (gppo_loss.step_means); how often the grad-norm clip acted
        norms = [update["grad_norm"] for update in updates]
        record.update(step_means(updates), **grad_clip_metrics(norms, run.cfg.grad_clip))
    return record, totals


# ----------------------------------------------------------------------------- main


def main(cfg: GPPOConfig, reward_fn=None):
    """reward_fn(task, text, token_ids) -> (reward, fully_correct) replaces reward.scorer (tests use
    a simple task)."""
    rank, world, device = init_distributed(cfg.device, cfg.dist_timeout_minutes)
    set_threads(cfg.threads, device)
    if cfg.mini_batch_prompts % world:
        raise InputError(
            f"--mini_batch_prompts={cfg.mini_batch_prompts} must be a multiple of world size {world}"
        )
    # a resume must be the run in out_dir: checked first
    resuming = check_run(cfg, "gppo.py", RESUME_MAY_CHANGE)
    torch.manual_seed(cfg.seed)
    run, eval_problems = build_run(cfg, reward_fn, rank, world, device)
    # config.json; from step 0: an earlier run removed
    record_run(cfg, "gppo.py", RESUME_MAY_CHANGE, resuming)
    ckpt = Checkpointer(os.path.join(cfg.out_dir, "checkpoint"), cfg.ckpt_background)
    # the newest complete checkpoint
    state = ckpt.resume(run.policy, run.optimizer) if resuming else None
    step = state["step"] if state else 0
    # older: no cursor
    prompt_cursor = state.get("prompt_cursor", step * cfg.prompts_per_step) if state else 0
    if state:
        copy_weights(run.policy, run.engine_model)
    tracker = None
    if rank == 0:
        tracker = tracking.Tracker(cfg.report_to, cfg.out_dir, dataclasses.asdict(cfg), step)
    metrics = MetricsLog(os.path.join(cfg.out_dir, "metrics.jsonl"), step, mirror=tracker)
    if cfg.log_samples:
        run.samples_log = MetricsLog(os.path.join(cfg.out_dir, "samples.jsonl"), step)
    stop = GracefulStop(cfg.ckpt_minutes, device)
    evaluating = bool(cfg.eval_every and eval_problems)

    def evaluate(at_step: int) -> dict:  # held-out accuracy: eval.py's, on the run's engine
        return ev.during_training(
            run.engine, run.tokenizer, eval_problems, cfg, at_step, rank, world
        )

    if evaluating and step == 0:
        metrics.write({"step": 0, **evaluate(0)})
    t_run = time.time()
    start_step = step
    streak = 0  # steps without an update, in a row
    idle_steps = 0  # ... and in all
    try:
        with ckpt:  # a stop or an error says which step the same command resumes from
            while step < cfg.steps:
                for group in run.optimizer.param_groups:
                    group["lr"] = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
                record, prompt_cursor = rl_step(run, step, prompt_cursor)
                step += 1
                eta_s = (time.time() - t_run) / (step - start_step) * (cfg.steps - step)
                print0(step_line(record, cfg.steps, eta_s))
                streak = 0 if record["updates"] else streak + 1
                idle_steps += not record["updates"]
                if streak == NO_UPDATE_WARNING_STEPS:
                    print0(no_update_warning(record, streak, cfg))
                if evaluating and (step % cfg.eval_every == 0 or step == cfg.steps):
                    record.update(evaluate(step))
                metrics.write(record)
                state = dict(step=step, prompt_cursor=prompt_cursor)
                stop.step_done(
                    step,
                    (cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == cfg.steps,
                    lambda: ckpt.save(run.policy, run.optimizer, state),
                    ckpt,
                )
                if (cfg.export_every and step % cfg.export_every == 0) or step == cfg.steps:
                    trainer.export_hf(run.policy, run.export, step)
            ckpt.wait()
    finally:
        stop.close()
        run.pool.shutdown(cancel_futures=True)
        metrics.close()
        if run.samples_log:
            run.samples_log.close()
    idle = "every step of this command updated the policy"
    if idle_steps:
        idle = f"{idle_steps} of the {step - start_step} steps of this command updated nothing"
        idle += " (every group's rewards were equal)"
    print0(f"done: {step} steps, {idle}; Hugging Face export in {cfg.out_dir}/hf")


def build_run(cfg: GPPOConfig, reward_fn, rank: int, world: int, device) -> tuple:
    """Read the inputs (all ranks agree on any error), build the sharded policy, its optimizer, the
    engine and the scoring pool. Returns (Run, held-out problems)."""

    def load():
        if not os.path.isfile(os.path.join(cfg.init_from, "config.json")):
            raise InputError(
                f"--init_from={cfg.init_from}: no SFT checkpoint there (no config.json): run `python "
                "sft.py` first (or `bash train.sh`), or pass --init_from=DIR (a Hugging Face directory)"
                + data.hub_hint(cfg.init_from, "model")
            )
        label = f"--init_from={cfg.init_from}"
        tokenizer = read(f"{label} (its tokenizer)", data.load_tokenizer, cfg.init_from)
        tasks, eval_problems, report = data.rl_prompts(cfg, tokenizer)
        print0("\n".join(report))
        stop_ids = data.stop_token_ids(tokenizer)
        stored = read(label, check_checkpoint, cfg.init_from)
        generation = read(label, hf_checkpoint.generation_config, stop_ids, cfg.init_from)
        dtype = EXPORT_DTYPES[cfg.export_dtype] or stored
        export = Export(cfg.out_dir, cfg.init_from, dtype, generation, hf_name, cfg.keep_exports)
        return tokenizer, tasks, eval_problems, export

    tokenizer, tasks, eval_problems, export = agree_on_inputs(load)
    # the trained policy: fp32 master weights, FSDP2-sharded as it loads (no rank holds a full fp32
    # copy); the engine's own full copy, bf16 on GPU; then the KV pool, from the memory left once
    # the allocator's cache is empty
    on_meta_fp32 = on_meta(cfg.init_from, torch.float32)
    weights = functools.partial(hf_checkpoint.read_weights, cfg.init_from, on_meta_fp32, hf_name)
    policy = trainer.load_sharded(on_meta_fp32, weights, device)
    policy.activation_checkpointing = on_for_device(
        "activation checkpointing", cfg.activation_checkpointing, device
    )
    # RoPE table: no position check on a GPU
    policy.rotary.reserve(cfg.max_prompt_len + cfg.max_response_len)
    engine_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    engine_model = from_pretrained(cfg.init_from, dtype=engine_dtype, device=device)
    optimizer = torch.optim.AdamW(
        policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999)
    )
    free_engine = on_for_device("engine freed while training", cfg.free_engine, device)
    # the KV pool: with the engine freed while training, the engine's default, sized at each
    # generate() from the memory then free (training's activations and gradients gone), less
    # rollout.rollout_margin; kept, a fraction of what is free now (None on CPU: the engine's
    # default)
    kv_bytes = None if free_engine else kv_cache_bytes(cfg.kv_cache_fraction, device)
    engine = LLMEngine(
        engine_model,
        max_num_seqs=256,
        max_model_len=cfg.max_prompt_len + cfg.max_response_len,
        kv_cache_memory=kv_bytes,
    )
    # math-verify's worker processes run while the engine decodes, off its cores (on GPU: its Python
    # loop's)
    engine_cores = torch.get_num_threads() if device.type == "cpu" else 1
    math_workers = cfg.math_workers or max(1, cores_per_rank() - engine_cores)
    math_checker.set_workers(math_workers)
    scorers = f"{cfg.reward_workers} scoring threads"
    print0(f"reward: {scorers}, at most {math_workers} math-verify processes at once")

    score = reward.scorer(cfg, cfg.reward_scale, cfg.code_reward)

    def score_fn(task, text, token_ids):  # (reward, fully correct)
        verdict = score(task, text)
        return verdict.reward, verdict.correct

    run = Run(
        cfg,
        policy,
        optimizer,
        engine,
        engine_model,
        tokenizer,
        tasks,
        reward_fn or score_fn,
        ThreadPoolExecutor(cfg.reward_workers),
        rank,
        world,
        device,
        export,
        free_engine,
    )
    return run, eval_problems


if __name__ == "__main__":
    run_entry_point(
        main,
        parse_config(
            GPPOConfig,
            usage="usage: python gppo.py [--key=value ...]   "
            "(torchrun --nproc_per_node=N gppo.py ... for N processes)",
        ),
    )
