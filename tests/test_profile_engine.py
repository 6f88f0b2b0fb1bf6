"""benchmarks/profile_engine.py: its wrappers see every call of what they time (call counts and
matmul FLOPs counted by hand from the model's shapes and the engine's step and token counts), the
patched functions are restored (also after an error), and the script runs end to end on a tiny
checkpoint (no timing asserted)."""

import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

import model as model_py  # noqa: E402
from model import from_pretrained  # noqa: E402
import profile_engine  # noqa: E402
import rollout  # noqa: E402
from parts import kv_cache  # noqa: E402


def test_split_counts_every_matmul_and_restores_what_it_patched(tiny_checkpoint):
    model = from_pretrained(tiny_checkpoint, dtype=torch.float32, device=torch.device("cpu"))
    cfg = model.config
    engine = rollout.LLMEngine(model, max_num_seqs=8, max_model_len=64)
    originals = (
        torch.nn.Linear.forward,
        kv_cache.PagedKVCache.attend,
        model_py.RMSNorm.forward,
        model_py.apply_rope,
        rollout.sample,
        kv_cache.PagedKVCache.run,
        rollout.logits_fp32,
    )
    prompts = [[1, 2, 3, 4, 5], list(range(3, 23))]
    with profile_engine.split_timers() as parts:
        outs = engine.generate(
            prompts, rollout.SamplingParams(temperature=1.0, max_tokens=6, n=3, seed=0)
        )
    assert originals == (
        torch.nn.Linear.forward,
        kv_cache.PagedKVCache.attend,
        model_py.RMSNorm.forward,
        model_py.apply_rope,
        rollout.sample,
        kv_cache.PagedKVCache.run,
        rollout.logits_fp32,
    )
    # by hand: every token the layers computed meets each layer's 7 projections; lm_head meets each
    # decoded token and each prompt's last token once (its n samples draw their first token from the
    # same logits)
    D = cfg.hidden_size
    I = cfg.intermediate_size
    hd = cfg.head_dim
    Hq = cfg.num_attention_heads
    Hkv = cfg.num_key_value_heads
    per_token = cfg.num_hidden_layers * (D * Hq * hd + 2 * D * Hkv * hd + Hq * hd * D + 3 * D * I)
    computed = (
        engine.stats.prefill_tokens + engine.stats.recompute_tokens + engine.stats.decode_tokens
    )
    assert (
        engine.stats.preemptions == 0
        and sum(len(s.token_ids) for group in outs for s in group) == 6 * 6
    )
    logit_rows = engine.stats.decode_tokens + len(prompts)
    flops, seconds = profile_engine.matmul_floor(parts["linear_shapes"], repeats=1)
    assert flops == 2 * (computed * per_token + logit_rows * D * cfg.vocab_size)
    assert seconds > 0 and parts["matmuls"] > 0
    # every call reached its wrapper: per engine step one forward and one sample(); per layer 7
    # projections, 4 norms (input, q, k, post-attention), 2 apply_rope, 1 attend; lm_head and the
    # final norm once per forward
    L = cfg.num_hidden_layers
    steps = engine.stats.steps
    assert parts["calls"] == dict(
        forward=steps,
        lm_head=steps,
        sampling=steps,
        matmuls=steps * (7 * L + 1),
        norms=steps * (4 * L + 1),
        rotary=steps * 2 * L,
        attention=steps * L,
    )
    leaves = parts["matmuls"] + parts["attention"] + parts["norms"] + parts["rotary"]
    assert parts["forward"] + parts["lm_head"] > leaves
    rows = dict(profile_engine.split(parts, total=1.0))
    assert list(rows) == [
        "matmuls",
        "attention",
        "norms",
        "rotary",
        "rest of model",
        "sampling",
        "engine",
    ]


def test_split_restores_the_patched_functions_after_an_error():
    originals = (
        torch.nn.Linear.forward,
        model_py.apply_rope,
        rollout.sample,
        kv_cache.PagedKVCache.run,
    )
    try:
        with profile_engine.split_timers():
            assert torch.nn.Linear.forward is not originals[0]
            raise KeyError("inside")
    except KeyError:
        pass
    now = (torch.nn.Linear.forward, model_py.apply_rope, rollout.sample, kv_cache.PagedKVCache.run)
    assert now == originals


def test_script_runs_on_a_tiny_checkpoint(tiny_checkpoint, toy_files):
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "profile_engine.py"),
            f"--model={tiny_checkpoint}",
            f"--math_data={toy_files['sums']}/rl/toy_math.jsonl",
            "--prompts=3",
            "--samples=2",
            "--max_tokens=5",
            "--repeat=1",
            "--skip_hf=true",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for part in ("matmuls", "attention", "sampling", "engine", "GFLOP", "transformers: skipped"):
        assert part in out.stdout, out.stdout
    for option, message in (
        ("--repeat=0", "--repeat=0: must be >= 1"),
        ("--model=/nonexistent", "has no config.json"),
    ):
        bad = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "profile_engine.py"), option],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            bad.returncode != 0
            and message in bad.stderr + bad.stdout
            and "Traceback" not in bad.stderr
        )


def test_profile_step_times_every_part_of_a_step(tiny_checkpoint, toy_files, tmp_path):
    """benchmarks/profile_step.py, one timed step on a tiny checkpoint: every part it wraps was
    called (a part it no longer reaches, or an option gppo.py renamed, once broke the script
    silently or loudly), and the whole step is printed."""
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "profile_step.py"),
            f"--init_from={tiny_checkpoint}",
            f"--math_data={toy_files['sums']}/rl/toy_math.jsonl",
            "--steps=1",
            f"--out_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    table = out.stdout.split("profile_step: median of 1 steps")[-1].splitlines()[2:]
    rows = [line[:45].strip() for line in table]
    assert rows == [
        "sample_groups (generate + reward)",
        "generate()",
        "engine forward (prefill + decode)",
        "sample()",
        "old logprobs",
        "8 updates",
        "trainer forward (old logprobs + updates)",
        "loss forward",
        "backward",
        "AdamW step",
        "sync",
        "whole step",
    ], out.stdout
