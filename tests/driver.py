"""Runs sft.main or gppo.main as the tests need them, through the same entry-point wrapper as the
scripts.

    [torchrun --nproc_per_node=2] tests/driver.py sft|gppo [--sgd] [--task=even|constant] [options of the script]

--sgd: plain SGD instead of AdamW, for the 1-process == 2-process tests. Two runs differ in the last
bits of
    their gradients (fp32 sums taken in another order); AdamW divides each gradient by its own running RMS, so
    an element whose gradient is ~1e-9 turns a 1e-12 difference into an update-sized one (up to lr). SGD
    moves each weight by lr x gradient, so a last-bit gradient difference stays a last-bit weight difference
    and the tolerance can be derived. The optimizer is elementwise and the same in both runs; what the test
    checks is that N ranks compute the same gradients as one.
--task (gppo only): the reward. `even`: the fraction of response tokens whose id is even (a random
model scores
    ~0.5, a policy can raise it within a few steps, every group has distinct rewards); `constant`: always 1, so
    every group is dropped and each step must be skipped cleanly; `half`: `even` on the prompts whose id hashes
    odd, constant on the others (for refilling the batch by over-generation); `slow`: `even`, but rank 1 sleeps
    SLOW_RANK_S seconds in its first score, so rank 0 waits that long in the step's first collective; `crash`: rank 1
    raises in its first score.
$DEFAULT_PG_TIMEOUT_S, if set, replaces torch's default process-group timeout (NCCL's is 10 minutes) before the
    process group is made: a test can then show that the scripts set their own.
$KILL_AT=WHAT:N[:RANK] kills this process with SIGKILL (as `kill -9` does: nothing runs after it) at one moment of a
    checkpoint's or an export's commit, the N-th time this process reaches it (on rank RANK only, if given):
      metadata:N  right after DCP has written the N-th checkpoint's .metadata (every rank's shards are written)
      write:N     as this rank starts writing its shards of the N-th checkpoint
      rename:N    right after the N-th rename of a checkpoint directory NAME.tmp (the commit)
      rmtree:N    inside the N-th removal of a directory holding .metadata (an old checkpoint), once its shards are
                  gone and .metadata and trainer_state.json are not yet
      step:K      after step K's boundary, once the checkpoint write in flight (if any) has finished
      export:N    halfway through writing the N-th export's weights file
$NAN_AT=K: the K-th gradient clipping of the run returns a NaN norm, as a diverged step would.
"""

import datetime
import os
import shutil
import signal
import sys
import threading
import time
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    """`even` on the prompts whose id hashes odd, constant on the others (their groups are
    dropped)."""
    return (
        even_reward(task, text, token_ids) if zlib.crc32(task["id"].encode()) % 2 else (1.0, True)
    )


SLOW_RANK_S = 4.0
_slept = threading.Event()


def slow_reward(task, text, token_ids):
    """`even`, after rank 1 has slept SLOW_RANK_S seconds once (its rollout takes that much
    longer)."""
    import torch.distributed as dist

    if dist.get_rank() == 1 and not _slept.is_set():
        _slept.set()
        time.sleep(SLOW_RANK_S)
    return even_reward(task, text, token_ids)


def crash_reward(task, text, token_ids):
    """Rank 1 fails in its first score, as a rank that runs out of memory would; rank 0 goes on to
    the next collective and waits there for it."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise RuntimeError("simulated out-of-memory on rank 1")
    return even_reward(task, text, token_ids)


def plain_sgd(params, lr, weight_decay=0.0, **adam_only):
    return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)


def kill_at(what: str, n: int, rank: int | None = None):
    """Install $KILL_AT's hook (see the docstring): patches in this process only."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    seen = []

    def reached() -> bool:  # the n-th time, on the chosen rank
        seen.append(1)
        return len(seen) == n and (rank is None or dist.get_rank() == rank)

    def die():
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    if what == "metadata":
        finish = FileSystemWriter.finish
        FileSystemWriter.finish = lambda self, *a, **k: (
            finish(self, *a, **k),
            reached() and die(),
        )[0]
    elif what == "write":
        write_data = FileSystemWriter.write_data
        FileSystemWriter.write_data = lambda self, *a, **k: (
            reached() and die(),
            write_data(self, *a, **k),
        )[1]
    elif what == "rename":
        for name in ("rename", "replace"):

            def moved(src, dst, _move=getattr(os, name)):
                _move(src, dst)
                if (
                    str(src).endswith(".tmp")
                    and os.path.isfile(os.path.join(dst, ".metadata"))
                    and reached()
                ):
                    die()

            setattr(os, name, moved)
    elif what == "rmtree":
        rmtree = shutil.rmtree

        def removing(path, *a, **k):
            if os.path.isfile(os.path.join(path, ".metadata")) and reached():
                # the shards first: what is left looks like a checkpoint
                for f in os.listdir(path):
                    if f not in (".metadata", "trainer_state.json"):
                        os.remove(os.path.join(path, f))
                die()
            rmtree(path, *a, **k)

        shutil.rmtree = removing
    elif what == "step":
        step_done = trainer.GracefulStop.step_done

        def after(self, step, due, save, checkpointer):
            step_done(self, step, due, save, checkpointer)
            if step == n:
                future = getattr(checkpointer, "future", None)
                if future is not None:
                    future.exception()  # finished, however it ended
                die()

        trainer.GracefulStop.step_done = after
    elif what == "export":
        import safetensors.torch

        save_file = safetensors.torch.save_file

        def half_written(tensors, filename, *a, **k):
            save_file(tensors, filename, *a, **k)
            if reached():
                os.truncate(filename, os.path.getsize(filename) // 2)
                die()

        safetensors.torch.save_file = half_written
    else:
        raise SystemExit(f"driver.py: unknown KILL_AT {what!r}")


def nan_at(k: int):
    """Install $NAN_AT's hook: the k-th torch.nn.utils.clip_grad_norm_ returns NaN (after clipping
    as usual)."""
    clip = torch.nn.utils.clip_grad_norm_
    calls = []

    def clip_or_nan(*args, **kwargs):
        norm = clip(*args, **kwargs)
        calls.append(1)
        return norm * float("nan") if len(calls) == k else norm

    torch.nn.utils.clip_grad_norm_ = clip_or_nan


if __name__ == "__main__":
    script = sys.argv[1]
    argv = sys.argv[2:]
    if os.environ.get("KILL_AT"):
        what, n, *rank = os.environ["KILL_AT"].split(":")
        kill_at(what, int(n), int(rank[0]) if rank else None)
    if os.environ.get("NAN_AT"):
        nan_at(int(os.environ["NAN_AT"]))
    if os.environ.get("DEFAULT_PG_TIMEOUT_S"):
        import torch.distributed.distributed_c10d as c10d

        c10d.default_pg_timeout = datetime.timedelta(
            seconds=float(os.environ["DEFAULT_PG_TIMEOUT_S"])
        )
    if "--sgd" in argv:
        argv.remove("--sgd")
        torch.optim.AdamW = plain_sgd
    if script == "sft":
        trainer.run_entry_point(sft.main, parse_config(sft.SFTConfig, argv))
    task = next((a.split("=", 1)[1] for a in argv if a.startswith("--task=")), "even")
    argv = [a for a in argv if not a.startswith("--task=")]
    trainer.run_entry_point(
        gppo.main,
        parse_config(gppo.GPPOConfig, argv),
        reward_fn={
            "even": even_reward,
            "constant": constant_reward,
            "half": half_reward,
            "slow": slow_reward,
            "crash": crash_reward,
        }[task],
    )
