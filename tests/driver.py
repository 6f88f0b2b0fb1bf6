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
    odd, constant on the others (for refilling the batch by over-generation).
"""
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import data  # noqa: E402
import gppo  # noqa: E402
import sft  # noqa: E402


def even_reward(task, text, token_ids):
    r = sum(t % 2 == 0 for t in token_ids) / max(1, len(token_ids))
    return r, r == 1.0


def constant_reward(task, text, token_ids):
    return 1.0, True


def half_reward(task, text, token_ids):
    """`even` on the prompts whose id hashes odd, constant on the others (their groups are dropped)."""
    return even_reward(task, text, token_ids) if zlib.crc32(task["id"].encode()) % 2 else (1.0, True)


def plain_sgd(params, lr, weight_decay=0.0, **adam_only):
    return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)


if __name__ == "__main__":
    script, argv = sys.argv[1], sys.argv[2:]
    if "--sgd" in argv:
        argv.remove("--sgd")
        torch.optim.AdamW = plain_sgd
    if script == "sft":
        sft.run_entry_point(sft.main, data.parse_config(sft.SFTConfig, argv))
    task = next((a.split("=", 1)[1] for a in argv if a.startswith("--task=")), "even")
    argv = [a for a in argv if not a.startswith("--task=")]
    sft.run_entry_point(gppo.main, data.parse_config(gppo.GPPOConfig, argv),
                        reward_fn={"even": even_reward, "constant": constant_reward, "half": half_reward}[task])
