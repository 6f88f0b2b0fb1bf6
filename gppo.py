"""GPPO reinforcement learning for reasoning models (Klear-Reasoner, arXiv 2508.07629): the RL loop. One step:
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

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads OpenMP: see trainer.set_threads
# read when torch first touches CUDA: the KV pool and the trainer's activations are freed and allocated again every
# step, in sizes that do not repeat; growable segments keep the freed memory usable for the next sizes (no
# fragmentation that would leave the next pool short)
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import dataclasses
import math
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

import data
import reward
from gppo_loss import MODES, LossConfig, rl_loss_from_hidden
from model import check_checkpoint, from_pretrained, logits_fp32
from parts import math_checker, tracking
from parts.cli import parse_config
from parts.trainer import (Checkpointer, GracefulStop, InputError, MetricsLog, agree_on_inputs, on_for_device,
                           check_run, cores_per_rank, global_max, global_sums, init_distributed, print0,
                           record_run, run_entry_point, set_threads)
from rollout import LLMEngine, SamplingParams, kv_cache_bytes
from sft import EXPORT_DTYPES, Export, export_hf, generation_config, load_sharded, read


@dataclass
class GPPOConfig:
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

    def __post_init__(self):
        checks = [(self.loss_mode in MODES, f"loss_mode must be one of {MODES}"),
                  (self.old_logprobs in ("recompute", "engine"), "old_logprobs must be recompute or engine"),
                  (self.code_reward in ("soft", "binary"), "code_reward must be soft or binary"),
                  (self.reward_scale in ("default", "authors"), "reward_scale must be default or authors"),
                  (self.prompts_per_step % self.mini_batch_prompts == 0, "prompts_per_step % mini_batch_prompts != 0"),
                  (self.oversample >= 1 and self.max_gen_rounds >= 1, "oversample and max_gen_rounds must be >= 1"),
                  (self.group_size >= 2, "group_size must be >= 2 (GRPO advantages compare the samples of a prompt)"),
                  (self.math_workers >= 0, "math_workers must be >= 0 (0: the cores this rank's threads leave)"),
                  (self.log_samples >= 0, "log_samples must be >= 0 (0: none)"),
                  (self.toy in data.TOY_TASKS, f"toy must be one of {', '.join(data.TOY_TASKS)}"),
                  ({self.activation_checkpointing, self.free_engine} <= {"auto", "true", "false"},
                   "activation_checkpointing and free_engine must be auto, true or false"),
                  (self.export_dtype in EXPORT_DTYPES, f"export_dtype must be one of {', '.join(EXPORT_DTYPES)}")]
        for ok, why in checks:
            if not ok:
                raise SystemExit(f"error: GPPOConfig: {why}")
        try:
            tracking.backends(self.report_to)   # a missing package: one line now, not after the model is loaded
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
        try:   # the loss's whole definition, built once: the update passes it on as it is
            self.loss = LossConfig(mode=self.loss_mode, eps_low=self.eps_low, eps_high=self.eps_high,
                                   dual_clip=self.dual_clip, beta1=self.beta1, beta2=self.beta2,
                                   high_side_only=self.high_side_only, alpha=self.alpha, temperature=self.temperature)
        except ValueError as e:
            raise SystemExit(f"error: GPPOConfig: {e}") from None


# What a resume may change: how far, how often to evaluate, save and export, where and how fast it runs
# (train_row_tokens and balance_ranks change the order of float sums only). Any other option must be the run's own
# (trainer.check_run): a changed loss, model, data or sampling setting is another run.
RESUME_MAY_CHANGE = ("steps", "eval_every", "log_samples", "report_to", "ckpt_every", "ckpt_minutes", "ckpt_background", "export_every",
                     "export_dtype", "keep_exports", "resume", "out_dir", "device", "threads", "dist_timeout_minutes",
                     "kv_cache_fraction", "free_engine", "activation_checkpointing", "train_row_tokens",
                     "balance_ranks", "reward_workers", "math_workers", "sandbox_cores")


@dataclass
class Run:
    """What the parts of an RL step share, built once by main (it only saves passing a dozen arguments around)."""
    cfg: GPPOConfig
    policy: torch.nn.Module          # FSDP2-sharded, fp32 master weights
    optimizer: torch.optim.Optimizer
    engine: LLMEngine                # generates with its own full copy of the weights, engine_model
    engine_model: torch.nn.Module
    tokenizer: object
    tasks: list                      # the RL prompts
    score_fn: object                 # (task, text, token_ids) -> (reward, fully correct)
    pool: ThreadPoolExecutor         # scoring threads
    rank: int
    world: int
    device: torch.device
    export: Export | None = None     # how the Hugging Face exports are written (--export_dtype, --keep_exports)
    free_engine: bool = False        # --free_engine, resolved (trainer.on_for_device)
    samples_log: object = None       # rank 0's MetricsLog of samples.jsonl (--log_samples), set by main


# ----------------------------------------------------------------------------- one RL step: the docstring's 1-7

def rl_step(run: Run, step: int, prompt_cursor: int) -> tuple:
    """One RL step, the docstring's 1-7 (more sampling rounds while allowed and too few groups survive). Returns
    (metrics record, the stream position after the step)."""
    cfg, t0 = run.cfg, time.time()
    sampled, kept, rounds, engine_s, per_round = [], [], 0, 0.0, math.ceil(cfg.oversample * cfg.prompts_per_step)
    while rounds < cfg.max_gen_rounds:                                          # 1-3. sample, score, advantages
        new, seconds = sample_groups(run, prompt_cursor, per_round)
        engine_s += seconds
        prompt_cursor, rounds = prompt_cursor + per_round, rounds + 1
        sampled += new
        kept += [g for g in new if g.keep]
        if global_sums(dict(kept=len(kept)), run.device)["kept"] >= cfg.prompts_per_step:
            break
    log_samples(run, step + 1, sampled)
    if run.free_engine:   # training gets the engine's memory; step 7 gives its weights back, generate() its KV pool
        run.engine.cache.release()
        for p in run.engine_model.parameters():
            p.data = p.data.new_empty(0)
    seqs_by_mb = [training_sequences(groups, cfg) for groups in mini_batches_of(kept, cfg, run.world)]   # 4.
    if cfg.balance_ranks:
        seqs_by_mb = balance_ranks(seqs_by_mb, run.rank, run.world)
    t1 = time.time()
    gap = recompute_old_logprobs(run, [s for seqs in seqs_by_mb for s in seqs]) if cfg.old_logprobs == "recompute" \
        else dict(gap_sum=0.0, gap_tokens=0, gap_max=0.0)                      # 5. old logprobs (or the engine's)
    t2 = time.time()
    updates = [u for u in (train_mini_batch(run, seqs) for seqs in seqs_by_mb) if u]   # 6. one step per mini-batch
    t3 = time.time()
    if updates or run.free_engine:                                              # 7. the engine's weights
        sync_engine(run.policy, run.engine_model)
    rec, total = step_metrics(run, sampled, kept, seqs_by_mb, gap, updates)
    rec = dict(step=step + 1, gen_rounds=rounds, **rec, rollout_tok_s=total["tokens"] / max(t1 - t0, 1e-9),
               train_tok_s=total["train_tokens"] / max(t3 - t1, 1e-9), time_generate_and_reward=t1 - t0,
               time_engine=engine_s, time_old_logprobs=t2 - t1, time_train=t3 - t2, time_sync=time.time() - t3)
    return rec, prompt_cursor


# ----------------------------------------------------------------------------- 1-3. sample, score, advantages

def sample_groups(run: Run, first: int, count: int) -> tuple:
    """Sample and score prompts first..first+count-1 of the stream, every world-th on this rank, each seeded by its
    stream position (so samples do not depend on the number of ranks). Returns (groups, seconds in generate)."""
    cfg, tokenizer = run.cfg, run.tokenizer
    positions = list(range(first + run.rank, first + count, run.world))
    chosen = prompts_at(run.tasks, first, count, cfg.seed)[run.rank::run.world]
    params = sampling_params(cfg, positions, tuple(data.stop_token_ids(tokenizer)))
    jobs = {}   # (prompt, sample) -> its score, computed by the pool while the engine decodes the other samples

    def score_when_done(prompt: int, sample: int, out):
        text = tokenizer.decode(out.token_ids, skip_special_tokens=False)
        jobs[prompt, sample] = run.pool.submit(run.score_fn, chosen[prompt], text, out.token_ids)

    start = time.time()
    outs = run.engine.generate([t["prompt_ids"] for t in chosen], params, on_finish=score_when_done) if chosen else []
    engine_s = time.time() - start
    groups = []
    for p, (position, task, samples) in enumerate(zip(positions, chosen, outs)):
        scored = [jobs[p, j].result() for j in range(len(samples))]
        advantages, keep = group_advantages([[r for r, _ in scored]])
        groups.append(Group(position, task, samples, [r for r, _ in scored], [c for _, c in scored], advantages[0],
                            bool(keep[0]) or not cfg.filter_zero_adv))
    return groups, engine_s


def sampling_params(cfg, positions: list, stop_ids: tuple) -> list:
    """SamplingParams of the prompts at these stream positions: group_size samples each, seeded by the position."""
    return [SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_response_len,
                           n=cfg.group_size, stop_token_ids=stop_ids, seed=cfg.seed * 1_000_003 + p) for p in positions]


@dataclass
class Group:
    """One prompt's group_size responses, scored, on the rank that sampled them."""
    position: int            # the prompt's position in the run's prompt stream (orders groups across ranks)
    task: dict
    samples: list            # rollout.Sample per response
    rewards: list            # float per response
    correct: list            # bool per response (fully correct: the SFT term's positives)
    advantages: torch.Tensor  # (group_size,)
    keep: bool               # False: all rewards equal, no signal (dropped when filter_zero_adv)


def prompts_at(tasks, first: int, count: int, seed: int) -> list:
    """Prompts first..first+count-1 of the run's prompt stream: a fresh permutation of all prompts per epoch.
    A function of (seed, position) only, so a resumed run and any number of ranks see the same prompts."""
    n = len(tasks)
    epochs = range(first // n, (first + count - 1) // n + 1)
    perms = {e: np.random.default_rng([seed, e]).permutation(n) for e in epochs}
    return [tasks[perms[i // n][i % n]] for i in range(first, first + count)]


def score(task, text, cfg):
    """(reward, fully correct?) of one response, on the scale of --reward_scale; code runs in this rank's sandbox,
    whose tests (of all its scoring threads) share sandbox_cores cores. Never raises for a bad response."""
    sandbox = reward.SandboxConfig(cores=cfg.sandbox_cores or cores_per_rank(), python=cfg.sandbox_python)
    verdict = reward.judge(task, text, scale=reward.AUTHORS_SCALE if cfg.reward_scale == "authors" else
                           reward.DEFAULT_SCALE, sandbox=sandbox, binary_code=cfg.code_reward == "binary")
    return verdict.reward, verdict.correct


def group_advantages(rewards):
    """rewards (G, n) -> advantages (G, n) and keep (G,): a group whose rewards are all equal has no signal."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)   # std unbiased, as verl's GRPO
    keep = (r.max(1).values - r.min(1).values) > 1e-9
    return adv.float(), keep


def log_samples(run: Run, step: int, groups: list):
    """cfg.log_samples of the step's responses on rank 0 (all rounds), drawn at random (seeded by the step, so a
    resumed run draws the same), to samples.jsonl: what the policy writes, with its reward and advantage."""
    if run.samples_log is None or run.rank != 0:
        return
    responses = [(g, j) for g in groups for j in range(len(g.samples))]
    drawn = random.Random(run.cfg.seed * 1_000_003 + step).sample(responses, min(run.cfg.log_samples, len(responses)))
    for g, j in sorted(drawn, key=lambda pair: (pair[0].position, pair[1])):
        s = g.samples[j]
        run.samples_log.write(dict(step=step, prompt_position=g.position, sample=j, reward=g.rewards[j],
                                   advantage=float(g.advantages[j]), correct=bool(g.correct[j]),
                                   group_kept=g.keep, finish_reason=s.finish_reason, response_tokens=len(s.token_ids),
                                   prompt=run.tokenizer.decode(g.task["prompt_ids"], skip_special_tokens=False),
                                   response=run.tokenizer.decode(s.token_ids, skip_special_tokens=False)))


# ----------------------------------------------------------------------------- 4. the survivors, re-packed

def mini_batches_of(kept: list, cfg, world: int) -> list:
    """The surviving groups of all ranks in mini-batches of mini_batch_prompts (the last may be partial), in stream
    order, at most prompts_per_step in all: per mini-batch, this rank's groups (only positions travel)."""
    positions = [None] * world
    dist.all_gather_object(positions, [g.position for g in kept])
    used = sorted(p for ps in positions for p in ps)[:cfg.prompts_per_step]
    mine = {g.position: g for g in kept}
    M = cfg.mini_batch_prompts
    return [[mine[p] for p in used[i:i + M] if p in mine] for i in range(0, len(used), M)]


@dataclass
class TrainSeq:
    """One sampled response as a training sequence."""
    ids: list                # prompt + response token ids
    prompt_len: int
    group: int               # its prompt's stream position: responses of one group share the prompt in a row
    advantage: float         # its group advantage, the same for each of its tokens
    correct: bool            # fully correct: its tokens are the SFT term's
    engine_logprobs: list    # per response token, the sampler's logprob
    old_logprobs: list       # per response token, the trainer's (recomputed in step 5; the engine's until then)

    @property
    def response_len(self) -> int:
        return len(self.ids) - self.prompt_len


def training_sequences(groups: list, cfg) -> list:
    """Every kept response of these groups as a TrainSeq (empty ones, and with mask_truncated cut ones, left out)."""
    return [TrainSeq(g.task["prompt_ids"] + s.token_ids, len(g.task["prompt_ids"]), g.position, advantage, correct,
                     s.logprobs, s.logprobs)
            for g in groups for s, advantage, correct in zip(g.samples, g.advantages.tolist(), g.correct)
            if s.token_ids and not (cfg.mask_truncated and s.finish_reason == "length")]


def balance_ranks(seqs_by_mb: list, rank: int, world: int) -> list:
    """Per mini-batch, move sequences between ranks so that each trains about as many tokens as the others: a rank
    holds the groups it sampled, 0 to mini_batch_prompts of them, and every other rank would wait for the busiest
    one. The loss is a token-mean over all ranks' tokens, so where a sequence trains does not change the gradient.
    Only the lengths travel to plan; then only the sequences that move."""
    if world == 1:
        return seqs_by_mb
    lengths = [None] * world
    dist.all_gather_object(lengths, [[len(s.ids) for s in seqs] for seqs in seqs_by_mb])
    plans = [balance_plan([lengths[r][mb] for r in range(world)]) for mb in range(len(seqs_by_mb))]
    outgoing = [(mb, rank, i, s) for mb, seqs in enumerate(seqs_by_mb) for i, s in enumerate(seqs)
                if plans[mb][rank][i] != rank]
    moved = [None] * world
    dist.all_gather_object(moved, outgoing)
    balanced = [[s for i, s in enumerate(seqs) if plans[mb][rank][i] == rank] for mb, seqs in enumerate(seqs_by_mb)]
    for mb, src, i, s in sorted((m for ms in moved for m in ms), key=lambda m: m[:3]):  # by source: groups together
        if plans[mb][src][i] == rank:
            balanced[mb].append(s)
    return balanced


def balance_plan(lengths: list) -> list:
    """lengths[r]: the token counts of rank r's sequences -> dest[r][i], the rank that trains each. Each rank keeps
    its own, in order, while they fit under the mean load; the rest go longest first to the least loaded rank
    (its own on a tie). No rank ends above the mean by more than the longest sequence."""
    world = len(lengths)
    target = sum(map(sum, lengths)) / world
    dest, load, spill = [[r] * len(ls) for r, ls in enumerate(lengths)], [0] * world, []
    for r, ls in enumerate(lengths):
        for i, n in enumerate(ls):
            if load[r] + n <= target:
                load[r] += n
            else:
                spill.append((-n, r, i))
    for neg_n, r, i in sorted(spill):
        to = min(range(world), key=lambda q: (load[q], q != r, q))
        dest[r][i], load[to] = to, load[to] - neg_n
    return dest


def pack_micro_batches(seqs: list, row_tokens: int, share_prompts: bool = False) -> list:
    """Greedy, in order: sequences into rows of at most row_tokens tokens (a longer one gets its own row). With
    share_prompts, a sequence that follows one of its group (the same prompt) in a row adds only its response."""
    rows, used = [[]], 0
    for s in seqs:
        shared = share_prompts and rows[-1] and rows[-1][-1].group == s.group
        size = len(s.ids) - (s.prompt_len if shared else 0)
        if rows[-1] and used + size > row_tokens:
            rows.append([])
            used, size = 0, len(s.ids)
        rows[-1].append(s)
        used += size
    return [row for row in rows if row]


def lockstep(rows: list, device) -> list:
    """This rank's rows, then None as many times as the busiest rank has more: FSDP's forward and backward are
    collectives, so every rank runs the same number of passes (a rank whose groups were dropped runs dummy rows)."""
    return rows + [None] * (int(global_max(len(rows), device)) - len(rows))


def row_tensors(row, device, share_prompts: bool = False) -> dict:
    """One packed row (None: a dummy row of 2 tokens that adds nothing): input_ids, position_ids, document_ids (1, T),
    prefix_docs (model.py); per response token where its logit is (the hidden state before it), its target, old
    logprob, advantage and SFT flag; num_tokens (host). Each sequence is a document [prompt; response]; with
    share_prompts a group's prompt goes in once, as its own document, and each response is a document continuing it
    (positions going on from the prompt's), so each token sees the same attention. document_ids stay on the CPU."""
    if row is None:
        zeros = torch.zeros((1, 2), dtype=torch.long, device=device)
        one = torch.zeros(1, device=device)
        return dict(input_ids=zeros, position_ids=zeros, document_ids=zeros.cpu(), prefix_docs=None,
                    where=one.long(), targets=one.long(), old=one, adv=one, sft=one, num_tokens=0)
    ids, pos, doc, prefixes, where, targets = [], [], [], [], [], []
    group, prompt_doc, prompt_last = None, -1, -1

    def add(tokens, positions, prefix):
        doc.extend([len(prefixes)] * len(tokens))
        prefixes.append(prefix)
        ids.extend(tokens)
        pos.extend(positions)

    for s in row:
        P, n = s.prompt_len, s.response_len
        if not share_prompts:
            start = len(ids)
            add(s.ids, range(P + n), -1)
            where.extend(range(start + P - 1, start + P - 1 + n))
        else:
            if s.group != group:                                     # a new prompt: its own document
                group, prompt_doc, prompt_last = s.group, len(prefixes), len(ids) + P - 1
                add(s.ids[:P], range(P), -1)
            start = len(ids)
            add(s.ids[P:], range(P, P + n), prompt_doc)
            where.extend([prompt_last, *range(start, start + n - 1)])
        targets.extend(s.ids[P:])
    tensor = lambda x, **kw: torch.tensor(x, device=device, **kw)   # noqa: E731
    return dict(input_ids=tensor([ids]), position_ids=tensor([pos]), document_ids=torch.tensor([doc]),
                prefix_docs=[prefixes], where=tensor(where), targets=tensor(targets),
                old=tensor([v for s in row for v in s.old_logprobs]),
                adv=tensor([s.advantage for s in row for _ in range(s.response_len)]),
                sft=tensor([float(s.correct) for s in row for _ in range(s.response_len)]),
                num_tokens=len(targets))


def hidden_at_targets(policy, t: dict):
    """The final hidden state before each response token of a row: (N, D)."""
    return policy(t["input_ids"], position_ids=t["position_ids"], document_ids=t["document_ids"],
                  prefix_docs=t["prefix_docs"], return_hidden=True)[0, t["where"]]


# ----------------------------------------------------------------------------- 5. old logprobs, by the trainer

@torch.no_grad()
def recompute_old_logprobs(run: Run, seqs: list) -> dict:
    """Old logprobs from the trainer's forward, before any update of the step; returns the sum, count and max of
    |trainer − engine| over the tokens, a check of the engine (it should sample exactly what the trainer scores)."""
    cfg = run.cfg
    for row in lockstep(pack_micro_batches(seqs, cfg.train_row_tokens, cfg.share_prompts), run.device):
        k, logprobs = 0, row_logprobs(run.policy, row_tensors(row, run.device, cfg.share_prompts), cfg.temperature)
        for s in row or []:
            s.old_logprobs, k = logprobs[k:k + s.response_len], k + s.response_len
    gaps = [np.abs(np.asarray(s.old_logprobs) - np.asarray(s.engine_logprobs)) for s in seqs]
    return dict(gap_sum=sum(float(g.sum()) for g in gaps), gap_tokens=sum(len(g) for g in gaps),
                gap_max=max((float(g.max()) for g in gaps if len(g)), default=0.0))


@torch.no_grad()
def row_logprobs(policy, t: dict, temperature: float) -> list:
    """logπ of each response token of a row (row_tensors): log-softmax of fp32 logits / T, 1024 tokens at a time."""
    hidden, weight = hidden_at_targets(policy, t), policy.lm_head.weight
    return torch.cat([torch.log_softmax(logits_fp32(hidden[i:i + 1024], weight) / temperature, -1)
                      .gather(1, t["targets"][i:i + 1024, None])[:, 0] for i in range(0, len(hidden), 1024)]).tolist()


# ----------------------------------------------------------------------------- 6. one optimizer step per mini-batch

METRICS = ("entropy", "clipped_entropy", "clip_frac_high", "clip_frac_low", "dual_clip_frac", "ratio_mean", "approx_kl",
           "coef_abs", "coef_abs_clipped_low", "coef_abs_clipped_high")


def train_mini_batch(run: Run, seqs: list):
    """One optimizer step on this rank's sequences of a mini-batch, a token-mean over all ranks' tokens. Returns its
    metrics (kept on the device until one transfer at the end), or None if no rank has a token."""
    cfg, device = run.cfg, run.device
    counts = global_sums(dict(tokens=sum(s.response_len for s in seqs),
                              sft_tokens=sum(s.response_len for s in seqs if s.correct)), device)
    if counts["tokens"] == 0:
        return None
    sums = dict.fromkeys(("loss", "weight") + METRICS, 0.0)
    for row in lockstep(pack_micro_batches(seqs, cfg.train_row_tokens, cfg.share_prompts), device):
        t = row_tensors(row, device, cfg.share_prompts)
        mask = torch.full_like(t["adv"], row is not None, dtype=torch.bool)   # a dummy row adds zero
        loss, m = rl_loss_from_hidden(hidden_at_targets(run.policy, t), run.policy.lm_head.weight, t["targets"],
                                      t["old"], t["adv"], mask, sft_mask=t["sft"], cfg=cfg.loss,
                                      num_tokens=counts["tokens"], num_sft_tokens=max(counts["sft_tokens"], 1.0))
        (loss * run.world).backward()   # FSDP averages gradients over ranks; the loss is already a global mean
        for k in METRICS:
            sums[k] = sums[k] + m[k] * t["num_tokens"]
        sums["loss"], sums["weight"] = sums["loss"] + loss.detach(), sums["weight"] + t["num_tokens"]
    grad_norm = torch.nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.grad_clip)
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    sums = global_sums(dict(sums, grad_norm=grad_norm), device)   # one transfer for the metrics and the norm
    grad_norm = sums.pop("grad_norm") / run.world                 # every rank added the same global norm
    if not math.isfinite(grad_norm):
        raise SystemExit(f"error: grad norm {grad_norm}: stopping before the update (try a lower --lr)")
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return dict(loss=sums["loss"], grad_norm=grad_norm, **{k: sums[k] / max(sums["weight"], 1.0) for k in METRICS})


# ----------------------------------------------------------------------------- 7. the engine's copy of the weights

@torch.no_grad()
def sync_engine(policy, engine_model):
    """Copy the trained weights into the engine's model, one full parameter at a time (all ranks gather); a freed
    parameter (free_engine) gets its storage back first."""
    for (name, p), (name2, q) in zip(policy.named_parameters(), engine_model.named_parameters()):
        assert name == name2, (name, name2)
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        if q.numel() != full.numel():
            q.data = q.data.new_empty(full.shape)
        q.copy_(full)


# ----------------------------------------------------------------------------- metrics, over all ranks

def step_metrics(run: Run, sampled: list, kept: list, seqs_by_mb: list, gap: dict, updates: list) -> tuple:
    """The step's record over all ranks (every sampled response, all rounds; the groups kept; the engine-trainer
    logprob gap; the updates' means), and the summed totals."""
    cfg = run.cfg
    samples = [s for g in sampled for s in g.samples]
    lengths = [len(s.token_ids) for s in samples]
    total = global_sums(dict(
        reward=sum(r for g in sampled for r in g.rewards), correct=sum(c for g in sampled for c in g.correct),
        responses=len(samples), tokens=sum(lengths), truncated=sum(s.finish_reason == "length" for s in samples),
        kept=len(kept), sampled=len(sampled), gap_sum=gap["gap_sum"], gap_tokens=gap["gap_tokens"],
        train_tokens=sum(len(s.ids) for seqs in seqs_by_mb for s in seqs)), run.device)
    busiest = global_max(sum(len(s.ids) for seqs in seqs_by_mb for s in seqs), run.device)
    n, groups, survived = max(total["responses"], 1), int(total["sampled"]), int(total["kept"])
    rec = dict(reward=total["reward"] / n, accuracy=total["correct"] / n, prompts_sampled=groups,
               groups_kept=survived / max(groups, 1), groups_dropped=groups - survived,
               groups_trained=min(survived, cfg.prompts_per_step), response_len_mean=total["tokens"] / n,
               response_len_max=int(global_max(max(lengths, default=0), run.device)),
               truncated=int(total["truncated"]), rank_load_max=busiest * run.world / max(total["train_tokens"], 1),
               logprob_diff_mean=total["gap_sum"] / max(total["gap_tokens"], 1),
               logprob_diff_max=global_max(gap["gap_max"], run.device), updates=len(updates),
               lr=run.optimizer.param_groups[0]["lr"])
    for k in ("loss", "grad_norm") + METRICS if updates else ():
        rec[k] = sum(u[k] for u in updates) / len(updates)
    if updates:   # the mean entropy of the tokens whose gradient GRPO's clip drops (GPPO keeps it)
        clipped = rec["clip_frac_high"] + rec["clip_frac_low"]
        rec["entropy_clipped"] = rec.pop("clipped_entropy") / clipped if clipped else float("nan")
        rec.update(treatment_checks(updates, cfg.grad_clip))
    return rec, total


def treatment_checks(updates: list, grad_clip: float) -> dict:
    """How much the clipping rules act, from the step's updates: the share of the gradient's per-token coefficients
    |∂L/∂logπ_t| that falls on clipped tokens, per side (mean over updates; what GPPO keeps and GRPO zeroes), how often
    the grad-norm clip acted (grad_norm > grad_clip) and the largest grad norm."""
    share = lambda u, side: u[f"coef_abs_clipped_{side}"] / u["coef_abs"] if u["coef_abs"] else 0.0  # noqa: E731
    return dict(coef_share_clipped_low=sum(share(u, "low") for u in updates) / len(updates),
                coef_share_clipped_high=sum(share(u, "high") for u in updates) / len(updates),
                grad_clipped_frac=sum(u["grad_norm"] > grad_clip for u in updates) / len(updates),
                grad_norm_max=max(u["grad_norm"] for u in updates))


def print_step(rec, cfg, eta_s):
    trained = "loss {loss:.4f} ent {entropy:.3f} (clipped {entropy_clipped:.3f}) clip_hi {clip_frac_high:.3f} " \
        "clip_lo {clip_frac_low:.3f} kl {approx_kl:.2e} gnorm {grad_norm:.2f} ".format(**rec) if rec["updates"] \
        else "no update this step (every group's rewards are equal) "
    print0(f"step {rec['step']}/{cfg.steps} reward {rec['reward']:.3f} acc {rec['accuracy']:.3f} "
           f"kept {rec['groups_trained']}/{rec['prompts_sampled']} ({rec['gen_rounds']} round(s)) "
           f"len {rec['response_len_mean']:.0f} {trained}| gen+rew {rec['time_generate_and_reward']:.1f}s "
           f"train {rec['time_old_logprobs'] + rec['time_train']:.1f}s sync {rec['time_sync']:.1f}s "
           f"({rec['rollout_tok_s']:.0f} tok/s) eta {eta_s / 60:.1f}min")


def evaluate(run: Run, problems: list, step: int) -> dict:
    """Held-out accuracy after `step` steps, the problems sharded across ranks, printed: greedy (eval_accuracy) and,
    with eval_k samples each at the RL temperature, Avg@k (their mean accuracy, pass@1) and pass@k (any right)."""
    cfg, mine, stop = run.cfg, problems[run.rank::run.world], tuple(data.stop_token_ids(run.tokenizer))
    params = [SamplingParams(temperature=0.0, max_tokens=cfg.max_response_len, stop_token_ids=stop)] * len(mine)
    params += [SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_response_len,
                              n=cfg.eval_k, stop_token_ids=stop, seed=cfg.eval_seed * 1_000_003 + i)   # by problem
               for i in range(run.rank, len(problems), run.world) if cfg.eval_k]
    outs = run.engine.generate([p["prompt_ids"] for p in mine] * (1 + bool(cfg.eval_k)), params) if mine else []
    right = [[score(p, run.tokenizer.decode(s.token_ids, skip_special_tokens=False), cfg)[1] for s in o]
             for p, o in zip(mine + mine, outs)]
    total = global_sums(dict(greedy=sum(c[0] for c in right[:len(mine)]), problems=len(mine),
                             avg=sum(sum(c) / len(c) for c in right[len(mine):]),
                             any=sum(any(c) for c in right[len(mine):])), run.device)
    n = max(total["problems"], 1)
    print0(f"step {step} held-out greedy {total['greedy'] / n:.3f}" + (
        f" Avg@{cfg.eval_k} {total['avg'] / n:.3f} pass@{cfg.eval_k} {total['any'] / n:.3f}" if cfg.eval_k else ""))
    return dict(eval_accuracy=total["greedy"] / n,
                **(dict(eval_avg_k=total["avg"] / n, eval_pass_k=total["any"] / n) if cfg.eval_k else {}))


# ----------------------------------------------------------------------------- main

def main(cfg: GPPOConfig, reward_fn=None):
    """reward_fn(task, text, token_ids) -> (reward, fully_correct) replaces `score` (tests use a simple task)."""
    rank, world, device = init_distributed(cfg.device, cfg.dist_timeout_minutes)
    set_threads(cfg.threads, device)
    if cfg.mini_batch_prompts % world:
        raise InputError(f"--mini_batch_prompts={cfg.mini_batch_prompts} must be a multiple of world size {world}")
    resuming = check_run(cfg, "gppo.py", RESUME_MAY_CHANGE)   # a resume must be the run in out_dir: checked first
    torch.manual_seed(cfg.seed)
    run, eval_problems = build_run(cfg, reward_fn, rank, world, device)
    record_run(cfg, "gppo.py", RESUME_MAY_CHANGE, resuming)   # config.json; from step 0: an earlier run removed
    ckpt = Checkpointer(os.path.join(cfg.out_dir, "checkpoint"), cfg.ckpt_background)
    state = ckpt.resume(run.policy, run.optimizer) if resuming else None   # the newest complete checkpoint
    step = state["step"] if state else 0
    prompt_cursor = state.get("prompt_cursor", step * cfg.prompts_per_step) if state else 0   # older: no cursor
    if state:
        sync_engine(run.policy, run.engine_model)
    tracker = tracking.Tracker(cfg.report_to, cfg.out_dir, dataclasses.asdict(cfg), step) if rank == 0 else None
    metrics = MetricsLog(os.path.join(cfg.out_dir, "metrics.jsonl"), step, mirror=tracker)
    run.samples_log = MetricsLog(os.path.join(cfg.out_dir, "samples.jsonl"), step) if cfg.log_samples else None
    stop = GracefulStop(cfg.ckpt_minutes, device)
    evaluating = bool(cfg.eval_every and eval_problems)
    if evaluating and step == 0:
        metrics.write({"step": 0, **evaluate(run, eval_problems, 0)})
    t_run = time.time()
    start_step = step
    streak = 0       # steps without an update, in a row
    idle_steps = 0   # ... and in all
    try:
        with ckpt:   # a stop or an error says which step the same command resumes from
            while step < cfg.steps:
                for group in run.optimizer.param_groups:
                    group["lr"] = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
                rec, prompt_cursor = rl_step(run, step, prompt_cursor)
                step += 1
                print_step(rec, cfg, (time.time() - t_run) / (step - start_step) * (cfg.steps - step))
                streak = 0 if rec["updates"] else streak + 1
                idle_steps += not rec["updates"]
                if streak == NO_UPDATE_WARNING_STEPS:
                    print0(no_update_warning(rec, streak, cfg))
                if evaluating and (step % cfg.eval_every == 0 or step == cfg.steps):
                    rec.update(evaluate(run, eval_problems, step))
                metrics.write(rec)
                state = dict(step=step, prompt_cursor=prompt_cursor)
                stop.step_done(step, (cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == cfg.steps,
                               lambda: ckpt.save(run.policy, run.optimizer, state), ckpt)
                if (cfg.export_every and step % cfg.export_every == 0) or step == cfg.steps:
                    export_hf(run.policy, run.export, step)
            ckpt.wait()
    finally:
        stop.close()
        run.pool.shutdown(cancel_futures=True)
        metrics.close()
        if run.samples_log:
            run.samples_log.close()
    idle = f"{idle_steps} of the {step - start_step} steps of this command updated nothing (every group's rewards " \
        "were equal)" if idle_steps else "every step of this command updated the policy"
    print0(f"done: {step} steps, {idle}; Hugging Face export in {cfg.out_dir}/hf")


NO_UPDATE_WARNING_STEPS = 3   # steps in a row without an update before the run says why and what to do


def no_update_warning(rec: dict, streak: int, cfg: GPPOConfig) -> str:
    """Why `streak` steps in a row updated nothing, and what to change: every group's rewards were equal, so every
    advantage was 0 (GRPO compares a prompt's samples with each other) and the filter dropped every group."""
    accuracy = rec["accuracy"]
    if accuracy == 0:
        cause = "The policy never solves these prompts: train the SFT model longer, or give easier prompts"
    elif accuracy == 1:
        cause = "The policy always solves these prompts: give harder prompts"
    else:
        cause = "Each prompt is solved by all of its samples or by none: give prompts of middling difficulty"
    return (f"warning: {streak} steps in a row without an update: every group's {cfg.group_size} rewards were equal "
            f"(on-policy accuracy {accuracy:.3f}), so no advantage was nonzero. {cause}; a larger "
            f"--group_size (now {cfg.group_size}) or --max_gen_rounds=3 (more prompts sampled until groups survive; "
            f"now {cfg.max_gen_rounds}) finds more groups that differ.")


def build_run(cfg: GPPOConfig, reward_fn, rank: int, world: int, device) -> tuple:
    """Read the inputs (all ranks agree on any error), build the sharded policy, its optimizer, the engine and
    the scoring pool. Returns (Run, held-out problems)."""
    def load():
        if not os.path.isfile(os.path.join(cfg.init_from, "config.json")):
            raise InputError(f"--init_from={cfg.init_from}: no SFT checkpoint there (no config.json): run `python "
                             "sft.py` first (or `bash train.sh`), or pass --init_from=DIR (a Hugging Face directory)"
                             + data.hub_hint(cfg.init_from, "model"))
        tokenizer = read(f"--init_from={cfg.init_from} (its tokenizer)", data.load_tokenizer, cfg.init_from)
        tasks = load_tasks(cfg, tokenizer)
        eval_problems = held_out_problems(cfg, tokenizer)
        stored_dtype = read(f"--init_from={cfg.init_from}", check_checkpoint, cfg.init_from)
        export = Export(cfg.out_dir, cfg.init_from, EXPORT_DTYPES[cfg.export_dtype] or stored_dtype,
                        generation_config(tokenizer, cfg.init_from), cfg.keep_exports)
        return tokenizer, tasks, eval_problems, export
    tokenizer, tasks, eval_problems, export = agree_on_inputs(load)
    # the trained policy: fp32 master weights, FSDP2-sharded as it loads (no rank holds a full fp32 copy); the
    # engine's own full copy, bf16 on GPU; then the KV pool, from the memory left once the allocator's cache is empty
    policy = load_sharded(cfg.init_from, device)
    policy.activation_checkpointing = on_for_device("activation checkpointing", cfg.activation_checkpointing, device)
    policy.rotary.reserve(cfg.max_prompt_len + cfg.max_response_len)   # RoPE table: no position check on a GPU
    engine_model = from_pretrained(cfg.init_from, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                                   device=device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999))
    free_engine = on_for_device("engine freed while training", cfg.free_engine, device)
    # the KV pool: with the engine freed while training, the engine's default, sized at each generate() from the
    # memory then free (training's activations and gradients gone), less rollout.rollout_margin; kept, a fraction of
    # what is free now (None on CPU: the engine's default)
    kv_bytes = None if free_engine else kv_cache_bytes(cfg.kv_cache_fraction, device)
    engine = LLMEngine(engine_model, max_num_seqs=256, max_model_len=cfg.max_prompt_len + cfg.max_response_len,
                       kv_cache_memory=kv_bytes)
    # math-verify's worker processes run while the engine decodes, off its cores (on GPU: its Python loop's)
    engine_cores = torch.get_num_threads() if device.type == "cpu" else 1
    math_workers = cfg.math_workers or max(1, cores_per_rank() - engine_cores)
    math_checker.set_workers(math_workers)
    print0(f"reward: {cfg.reward_workers} scoring threads, at most {math_workers} math-verify processes at once")
    score_fn = reward_fn or (lambda task, text, ids: score(task, text, cfg))
    run = Run(cfg, policy, optimizer, engine, engine_model, tokenizer, tasks, score_fn,
              ThreadPoolExecutor(cfg.reward_workers), rank, world, device, export, free_engine)
    return run, eval_problems


def load_tasks(cfg, tokenizer):
    """RL prompts as dicts {id, kind: math|countdown|code, prompt, answer|numbers+target|tests, prompt_ids}."""
    tasks = []
    math_data = cfg.math_data
    if not (cfg.math_data or cfg.code_data or cfg.toy == "none"):   # the toy's RL prompts
        math_data = read(f"--toy={cfg.toy}", data.toy_files, cfg.toy, "rl")
    if math_data:
        problems = read("--math_data", data.load_math_jsonl, math_data, skip_bad_rows=cfg.skip_bad_rows)
        print0(f"math data: {problems.report}")
        tasks += [{"kind": "math", **p} for p in problems]   # a Countdown row is of kind countdown
    if cfg.code_data:
        problems = read("--code_data", data.load_code_jsonl, cfg.code_data, min_tests=cfg.min_tests,
                        pass_rate_field=cfg.pass_rate_field, skip_bad_rows=cfg.skip_bad_rows)
        trusted = [p for p in problems if p.get("pass_rate", 1.0) >= cfg.min_pass_rate]   # the paper's filter
        print0(f"code data: {problems.report}; {len(problems) - len(trusted)} below --min_pass_rate")
        tasks += [dict(p, kind="code") for p in trusted]
    if not tasks:
        raise InputError("no RL prompts: give --math_data / --code_data, or --toy=countdown|sums")
    tasks, report = data.encode_prompts(tokenizer, tasks, cfg.max_prompt_len, overlong="truncate")
    print0(f"prompts: {report}")
    return tasks


def held_out_problems(cfg, tokenizer) -> list:
    """The problems evaluated every eval_every steps, encoded: --eval_data, else the toy's held-out set when the
    RL prompts are the toy's. Real prompts without --eval_data: none, said once (a toy's accuracy would measure
    nothing of a math or code model, at the cost of a rollout step at every evaluation)."""
    eval_data = cfg.eval_data
    if not (eval_data or cfg.math_data or cfg.code_data or cfg.toy == "none"):
        eval_data = read(f"--toy={cfg.toy}", data.toy_files, cfg.toy, "held_out")
    if not eval_data:
        if cfg.eval_every:
            print0("held-out evaluation: off (--math_data/--code_data without --eval_data); give --eval_data=FILE "
                   "to evaluate every --eval_every steps, or run eval.py on the exports")
        return []
    problems = [{"kind": "math", **p} for p in read("--eval_data", data.load_math_jsonl, eval_data)]
    return data.encode_prompts(tokenizer, problems[:cfg.eval_problems], cfg.max_prompt_len, "truncate")[0]


if __name__ == "__main__":
    run_entry_point(main, parse_config(GPPOConfig, usage="usage: python gppo.py [--key=value ...]   "
                                                         "(torchrun --nproc_per_node=N gppo.py ... for N processes)"))
