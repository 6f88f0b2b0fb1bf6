"""benchmarks/bench_rollout.py still runs (tiny workload, no timing asserted): a benchmark that has
rotted is worse than none. It checks inside that every implementation generated the whole
workload."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_rollout_runs_and_prints_its_table():
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "bench_rollout.py"),
            "--prompts=3",
            "--samples=2",
            "--new_tokens=5",
            "--min_prompt_len=3",
            "--max_prompt_len=40",
            "--skip_hf=1",
            "--repeat=2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "prefill_tokens=" in out.stdout
    rows = [
        line
        for line in out.stdout.splitlines()
        if line.startswith(("paged engine", "plain batched"))
    ]
    assert len(rows) == 2 and "speed-up vs plain batched" in out.stdout, out.stdout
    bad = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_rollout.py"), "--prompt=3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "unknown option --prompt" in bad.stdout + bad.stderr
