"""Where sft.py's step time goes on a CPU: torch.profiler's operators, by self CPU time, over a
window of steps of a real sft.py run (one process; its options as given).

The window skips the first steps (the allocator and the caches warm up) and ends the run after it.
Self CPU time is the operator's own, not its children's: on a CPU, aten::mm is the GEMMs and the
flash-attention entries are the per-document attention of model.causal_attention.

Run:  python benchmarks/profile_sft.py --sft_args="--data=out/distill/sft.jsonl \\
          --tokenizer=out/toy/countdown/tokenizer --epochs=1 --row_tokens=1024 --rows_per_step=2"
"""

import os
import shlex
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import sft  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class ProfileSFTConfig:
    # fmt: off
    sft_args: str = ""   # sft.py's options (data, tokenizer, rows, ...); --out_dir, --max_steps, --threads are set
    first: int = 20      # profile from this step ...
    last: int = 40       # ... to this one (the run stops there)
    threads: int = 1     # sft.py --threads
    rows: int = 25       # operators shown
    # fmt: on

    def __post_init__(self):
        if not 0 < self.first < self.last:
            raise ValueError("need 0 < first < last")


def main(cfg: ProfileSFTConfig):
    steps = {"done": 0}
    profiler = profile(activities=[ProfilerActivity.CPU])
    train_step = sft.train_step

    def profiled_step(*args, **kwargs):
        steps["done"] += 1
        if steps["done"] == cfg.first:
            profiler.__enter__()
        result = train_step(*args, **kwargs)
        if steps["done"] == cfg.last:
            profiler.__exit__(None, None, None)
        return result

    sft.train_step = profiled_step
    with tempfile.TemporaryDirectory() as out_dir:
        argv = shlex.split(cfg.sft_args) + [
            f"--out_dir={out_dir}",
            f"--max_steps={cfg.last}",
            f"--threads={cfg.threads}",
        ]
        sft.main(parse_config(sft.SFTConfig, argv))
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=cfg.rows)
    print(f"steps {cfg.first}-{cfg.last}, by self CPU time:\n{table}")


if __name__ == "__main__":
    main(parse_config(ProfileSFTConfig))
