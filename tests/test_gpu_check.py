"""benchmarks/gpu_check.py --dry_run: the GPU timings' code, on tiny shapes on the CPU (Triton under
its interpreter, gloo for nccl), so the one command a GPU session runs has run before. No timing is
asserted: the numbers of a dry run mean nothing; its bookkeeping does. The correctness of what it
times is tests/test_gpu.py."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def test_dry_run_runs_every_section_and_records_its_results(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "gpu_check.py"),
            "--dry_run",
            f"--out={out}",
            "--time_limit_s=1500",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and list(report["sections"]) == [
        "loss",
        "decode",
        "engine",
        "fsdp",
        "load",
    ]
    rows = {(r["section"], r["name"]): r for s in report["sections"].values() for r in s["rows"]}
    bad = {k: r for k, r in rows.items() if r["status"] not in ("ok", "skipped")}
    assert not bad, bad
    # every loss path timed, against the reference and the floor
    for dtype in ("bf16", "fp32"):
        for backend in ("torch", "triton"):
            r = rows[("loss", f"rl_loss_from_logits {dtype} backend={backend}")]
            assert r["ms"] > 0 and r["x_floor"] > 0 and r["speedup_vs_ref"] > 0, r
    assert any(
        k[0] == "loss" and k[1].startswith("rl_loss_from_hidden bf16 backend=triton") for k in rows
    )
    decode = rows[("decode", "paged_decode_triton (one step, one layer)")]
    assert decode["ms"] > 0 and decode["splits"] >= 1
    for graphs, fused in ((True, True), (False, True), (True, False)):
        row = rows[
            (
                "engine",
                f"engine, 2 prompts x 2 samples x 4 tokens, cuda_graphs={graphs}, fused_norms={fused}",
            )
        ]
        assert row["tokens"] == 2 * 2 * 4
    assert rows[("engine", "CUDA-graph decode vs eager, greedy tokens")]["identical"] == 2
    assert rows[("engine", "fused norm kernels vs eager, greedy tokens")]["identical"] == 2
    assert (
        rows[("decode", "paged_decode_triton, 4 seqs 70-70 tokens, GQA 4:2, hd 16")]["max_abs_err"]
        < 2**-7
    )
    gaps = [rows[("fsdp", f"engine vs trainer |logπ gap|, {t} logits")] for t in ("fp32", "bf16")]
    assert all(g["tokens"] > 0 and g["gap_max"] >= g["gap_mean"] >= 0 for g in gaps)
    load = rows[("load", "checkpoint on disk -> fp32 shards -> engine copy -> KV pool, vs plan")]
    # CPU: the plan's arithmetic and the code's agree exactly
    assert load["pool_over_plan"] == pytest.approx(1.0)
    pool = rows[("load", "KV pool sized at generate() from the free memory, less the margin")]
    # whole blocks of it
    assert 0.99 < pool["pool_over_free_less_margin"] <= 1 and pool["tokens"] == 2 * 2 * 4
    gppo_step = next(r for k, r in rows.items() if k[1].startswith("GPPO step"))
    assert gppo_step["train_s"] > 0 and gppo_step["budget_GB"] > 0
    assert next(r for k, r in rows.items() if k[1].startswith("SFT step"))["step_s"] > 0
    assert not list(tmp_path.glob(".gpu_check.*"))  # the per-section result files are cleaned up
    table = proc.stdout[proc.stdout.index("section result") :]
    assert all(f"\n{s}" in table for s in ("loss", "decode", "engine", "fsdp", "load"))


def test_a_failing_section_is_recorded_not_fatal(tmp_path, monkeypatch):
    import gpu_check

    def broken(dry, emit):
        emit("first result", value=1.0)
        raise ZeroDivisionError("on purpose")

    monkeypatch.setattr(gpu_check, "section_decode", broken)
    rows_file = tmp_path / "rows.jsonl"
    gpu_check.run_section_here(
        gpu_check.CheckConfig(section="decode", dry_run=True, rows_file=str(rows_file))
    )
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1]["error"] == "ZeroDivisionError: on purpose"
