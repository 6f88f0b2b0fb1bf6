"""Where one gppo.py RL step's time goes on a CPU: wall and CPU seconds of this process per part,
median over the timed steps, on bench_vs_trl.py's toy workload (the sums toy's SFT checkpoint, 32
prompts x 8, 8 updates, <= 192 new tokens, the zero-advantage filter off, 1 thread).

Parts, timed by wrappers around gppo.py's and rollout.py's own functions and the engine's
forward through its KV cache (parts/kv_cache.py's PagedKVCache.run; nested parts are indented):
  sample_groups    generate() and the wait for the last rewards (math-verify runs in processes meanwhile);
  old logprobs     the trainer's forward over every response (gppo.recompute_old_logprobs);
  8 updates        gppo.train_mini_batch: the trainer's forward, the loss, the backward, AdamW;
  sync             the trained weights into the engine's copy.
CPU seconds are this process's (time.process_time): on a machine shared with other jobs they move
less than wall seconds, and they leave out the math-verify processes.

Run:  python benchmarks/profile_step.py --init_from=out/sums/sft/hf     # after TOY=sums OUT=out/sums bash train.sh
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as gppo.py sets it
import torch  # noqa: E402

import gppo  # noqa: E402
import rollout  # noqa: E402
from parts import kv_cache, trainer  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class ProfileConfig:
    # fmt: off
    init_from: str = "out/sums/sft/hf"   # the sums toy's SFT checkpoint (bench_vs_trl.py's)
    math_data: str = ""                  # RL prompts; empty = the sums toy's (python tools/toy.py --task=sums)
    steps: int = 4                       # timed RL steps, after one warm-up step
    threads: int = 1
    out_dir: str = "out/profile_step"
    # fmt: on


def timed(totals: dict, name: str, fn):
    """fn, adding its wall and CPU seconds to totals[name]."""

    def wrapper(*args, **kwargs):
        wall = time.perf_counter()
        cpu = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = totals.setdefault(name, [0.0, 0.0])
            spent[0] += time.perf_counter() - wall
            spent[1] += time.process_time() - cpu

    return wrapper


def main(cfg: ProfileConfig):
    options = [
        f"--init_from={cfg.init_from}",
        "--eval_every=0",
        "--filter_zero_adv=false",
        "--resume=false",
        "--ckpt_every=0",
        "--ckpt_minutes=0",
        f"--threads={cfg.threads}",
        "--toy=sums",
        *([f"--math_data={cfg.math_data}"] if cfg.math_data else []),
        "--lr=2e-5",
        "--max_response_len=192",
        f"--out_dir={cfg.out_dir}",
    ]
    gcfg = parse_config(gppo.GPPOConfig, options)
    totals = {}
    parts = [
        (gppo, "sample_groups", "sample_groups (generate + reward)"),
        (rollout.LLMEngine, "generate", "  generate()"),
        (kv_cache.PagedKVCache, "run", "    engine forward (prefill + decode)"),
        (rollout, "sample", "    sample()"),
        (gppo, "recompute_old_logprobs", "old logprobs"),
        (gppo, "train_mini_batch", "8 updates"),
        (gppo, "hidden_at_targets", "  trainer forward (old logprobs + updates)"),
        (gppo, "rl_loss_from_hidden", "  loss forward"),
        (torch.Tensor, "backward", "  backward"),
        (torch.optim.AdamW, "step", "  AdamW step"),
        (gppo, "copy_weights", "sync"),
    ]
    for owner, attr, name in parts:
        setattr(owner, attr, timed(totals, name, getattr(owner, attr)))
    rank, world, device = trainer.init_distributed(gcfg.device, gcfg.dist_timeout_minutes)
    trainer.set_threads(gcfg.threads, device)
    torch.manual_seed(gcfg.seed)
    run, _ = gppo.build_run(gcfg, None, rank, world, device)
    steps = []
    cursor = 0
    for step in range(cfg.steps + 1):
        totals.clear()
        wall = time.perf_counter()
        cpu = time.process_time()
        _, cursor = gppo.rl_step(run, step, cursor)
        totals["whole step"] = [time.perf_counter() - wall, time.process_time() - cpu]
        if step:  # step 0: the warm-up
            steps.append(dict(totals))
    run.pool.shutdown()
    print(
        f"profile_step: median of {cfg.steps} steps after 1 warm-up, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'part':45s} {'wall s':>7s} {'CPU s':>7s}")
    for name in [name for _, _, name in parts if name in steps[0]] + ["whole step"]:
        print(
            f"{name:45s} {statistics.median(s[name][0] for s in steps):7.3f} "
            f"{statistics.median(s[name][1] for s in steps):7.3f}"
        )


if __name__ == "__main__":
    main(parse_config(ProfileConfig))
