"""benchmarks/bench_scheduler.py at a tiny scale: the real scheduler on the stubbed network
generates the workload it states (response lengths drawn per sample, some cut at the limit), the
ideal pool never preempts, a pool of a few sequences does, and the engine's admission watermark
recomputes fewer tokens than none on the same workload."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_scheduler  # noqa: E402


def test_bench_scheduler_at_tiny_scale(capsys):
    cfg = bench_scheduler.SchedulerBenchConfig(scale=128, prompts=6, samples=4, pools="3.5")
    small, ideal = bench_scheduler.main(cfg)
    limit = cfg.max_response // cfg.scale
    assert ideal["preemptions"] == 0 and ideal["recomputed"] == 0 and ideal["prefill_steps"] == 1
    # the longest runs to the limit, alone
    assert ideal["decode_steps"] <= limit and 0 < ideal["cut"] < 1
    assert small["preemptions"] > 0 and small["decode_steps"] > ideal["decode_steps"]
    # the same responses, whatever the pool
    assert small["generated"] == ideal["generated"]
    none = bench_scheduler.main(
        bench_scheduler.SchedulerBenchConfig(
            scale=128, prompts=6, samples=4, pools="3.5", admit_watermark=0.0
        )
    )[0]
    assert none["generated"] == small["generated"] and none["recomputed"] > small["recomputed"]
    assert "x ideal" in capsys.readouterr().out


def test_first_token_distribution_is_the_stated_one():
    """P(response = n tokens) from the log-normal, the tail beyond the limit on the limit (cut
    there)."""
    import math
    import torch

    cfg = bench_scheduler.SchedulerBenchConfig(scale=16)
    logp = bench_scheduler.first_token_logprobs(cfg, 2048)
    probs = logp.exp().double()
    assert abs(float(probs.sum()) - 1) < 1e-6
    z = (math.log(2048.5) - math.log(9000 / 16)) / 0.9
    assert abs(float(probs[-1]) - 0.5 * math.erfc(z / math.sqrt(2))) < 1e-6  # cut: ~7.6%
    mean = float((probs * (torch.arange(2049).double() + 1).clamp(max=2048)).sum())
    # ~12K tokens at full scale
    assert 700 < mean < 800
