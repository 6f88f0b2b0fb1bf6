"""benchmarks/bench_vs_trl.py's own logic, without TRL (it is not a dependency; the script installs
it in a virtualenv of its own): the long-tail workload puts exactly the asked number of long sums
among every 32 prompts of gppo.py's prompt stream, and the prompt stream it hands TRL is the one
gppo.py trains on (its seeded permutation)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

import bench_vs_trl  # noqa: E402
import data  # noqa: E402
import gppo  # noqa: E402
from parts.cli import parse_config  # noqa: E402


def test_longtail_stream_has_the_long_prompts_where_asked(tmp_path, toy_files):
    # a tokenizer is all prompt_stream reads of the model
    model = os.path.join(toy_files["sums"], "tokenizer")
    cfg = bench_vs_trl.BenchConfig(
        warmup=1,
        longtail_steps=2,
        longtail_prompts=3,
        longtail_digits=12,
        toy_dir=toy_files["sums"],
    )
    options = bench_vs_trl.workload_options(cfg, "longtail", str(tmp_path))
    prompts = bench_vs_trl.prompt_stream(str(model), options, 3 * 32)
    # two 12-digit operands: a 12- or 13-digit sum
    long = [len(p["answer"]) >= 12 for p in prompts]
    assert long == [j % 32 < 3 for j in range(3 * 32)]
    # the same stream as gppo.py's own: its tasks, permuted by data.stream
    gcfg = parse_config(gppo.GPPOConfig, [f"--init_from={model}", *options])
    tasks = data.rl_prompts(gcfg, data.load_tokenizer(str(model)))[0]
    stream = data.stream(tasks, 0, 96, gcfg.seed)
    assert [p["prompt_ids"] for p in prompts] == [t["prompt_ids"] for t in stream]
    # the chat template
    assert "What is" in prompts[0]["text"] and prompts[0]["text"].count("<|im_start|>") == 2


def test_toy_workload_is_the_sums_toy_both_sides_cut_at_the_same_length(tmp_path, toy_files):
    """gppo.py's default toy is Countdown; the benchmark's toy workload (and its logged numbers) is
    the sums toy's RL prompts, and TRL's completion limit is read from the same options gppo.py runs
    with."""
    model = os.path.join(toy_files["sums"], "tokenizer")
    options = bench_vs_trl.workload_options(
        bench_vs_trl.BenchConfig(toy_dir=toy_files["sums"]), "toy", str(tmp_path)
    )
    prompts = bench_vs_trl.prompt_stream(str(model), options, 32)
    assert all(p["text"].count("What is") == 1 and p["answer"].isdigit() for p in prompts)
    gcfg = parse_config(gppo.GPPOConfig, [f"--init_from={model}", *options])
    assert bench_vs_trl.response_limit(options) == gcfg.max_response_len == 192 and gcfg.lr == 2e-5
