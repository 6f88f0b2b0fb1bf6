"""Runs gppo.main on a tiny random Qwen3 with a deliberately simple task, for tests/test_gppo.py.

The task: reward = fraction of response tokens whose id is even. A random model scores about 0.5; the
policy can raise it within a few steps, and every group has distinct rewards (so no group is dropped).
`--task=constant` gives every response reward 1 (all groups dropped: the step must be skipped cleanly).
Usage: [torchrun --nproc_per_node=2] tests/gppo_driver.py --task=even|constant --init_from=DIR [GPPOConfig options]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gppo  # noqa: E402
from sft import parse_config  # noqa: E402


def even_reward(task, text, token_ids):
    r = sum(t % 2 == 0 for t in token_ids) / max(1, len(token_ids))
    return r, r == 1.0


def constant_reward(task, text, token_ids):
    return 1.0, True


if __name__ == "__main__":
    task = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--task=")), "even")
    argv = [a for a in sys.argv[1:] if not a.startswith("--task=")]
    gppo.main(parse_config(gppo.GPPOConfig, argv), reward_fn={"even": even_reward, "constant": constant_reward}[task])
