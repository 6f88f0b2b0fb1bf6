"""Runs sft.main or gppo.main as the tests need them, through the same entry-point wrapper as the scripts.

    [torchrun --nproc_per_node=2] tests/driver.py sft|gppo [--sgd] [--task=even|constant] [options of the script]

--sgd: plain SGD instead of AdamW, for the 1-process == 2-process tests. Two runs differ in the last bits of
    their gradients (fp32 sums taken in another order); AdamW divides each gradient by its own running RMS, so
    an element whose gradient is ~1e-9 turns a 1e-12 difference into an update-sized one (up to lr). SGD
    moves each weight by lr x gradient, so a last-bit gradient difference stays a last-bit weight difference
    and the tolerance can be derived. The optimizer is elementwise and the same in both runs; what the test
    checks is that N ranks compute the same gradients as one.
--task (gppo only): the reward. `even`: the fraction of response tokens whose id is even (a random model scores
    ~0.5, a policy can raise it within a few steps, every group has distinct rewards); `constant`: always 1, so
    every group is dropped and each step must be skipped cleanly; `half`: `even` on the prompts whose id hashes
    odd, constant on the others (for refilling the batch by over-generation); `slow`: `even`, but rank 1 sleeps
    SLOW_RANK_S seconds in its first score, so rank 0 waits that long in the step's first collective; `crash`: rank 1
    raises in its first score.
$DEFAULT_PG_TIMEOUT_S, if set, replaces torch's default process-group timeout (NCCL's is 10 minutes) before the
    process group is made: a test can then show that the scripts set their own.
"""
import datetime
import os
import sys
import threading
import time
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import data  # noqa: E402
from parts.cli import parse_config  # noqa: E402
import gppo  # noqa: E402
import sft  # noqa: E402
from parts import trainer  # noqa: E402


def even_reward(task, text, token_ids):
    r = sum(t % 2 == 0 for t in token_ids) / max(1, len(token_ids))
    return r, r == 1.0


def constant_reward(task, text, token_ids):
    return 1.0, True


def half_reward(task, text, token_ids):
    """`even` on the prompts whose id hashes odd, constant on the others (their groups are dropped)."""
    return even_reward(task, text, token_ids) if zlib.crc32(task["id"].encode()) % 2 else (1.0, True)


SLOW_RANK_S = 4.0
_slept = threading.Event()


def slow_reward(task, text, token_ids):
    """`even`, after rank 1 has slept SLOW_RANK_S seconds once (its rollout takes that much longer)."""
    import torch.distributed as dist
    if dist.get_rank() == 1 and not _slept.is_set():
        _slept.set()
        time.sleep(SLOW_RANK_S)
    return even_reward(task, text, token_ids)


def crash_reward(task, text, token_ids):
    """Rank 1 fails in its first score, as a rank that runs out of memory would; rank 0 goes on to the next
    collective and waits there for it."""
    import torch.distributed as dist
    if dist.get_rank() == 1:
        raise RuntimeError("simulated out-of-memory on rank 1")
    return even_reward(task, text, token_ids)


def plain_sgd(params, lr, weight_decay=0.0, **adam_only):
    return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)


if __name__ == "__main__":
    script, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get("DEFAULT_PG_TIMEOUT_S"):
        import torch.distributed.distributed_c10d as c10d
        c10d.default_pg_timeout = datetime.timedelta(seconds=float(os.environ["DEFAULT_PG_TIMEOUT_S"]))
    if "--sgd" in argv:
        argv.remove("--sgd")
        torch.optim.AdamW = plain_sgd
    if script == "sft":
        trainer.run_entry_point(sft.main, parse_config(sft.SFTConfig, argv))
    task = next((a.split("=", 1)[1] for a in argv if a.startswith("--task=")), "even")
    argv = [a for a in argv if not a.startswith("--task=")]
    trainer.run_entry_point(gppo.main, parse_config(gppo.GPPOConfig, argv),
                        reward_fn={"even": even_reward, "constant": constant_reward, "half": half_reward,
                                   "slow": slow_reward, "crash": crash_reward}[task])
