"""Correctness of every CUDA path, on the workloads benchmarks/gpu_check.py times
(benchmarks/gpu_workloads.py).

On a CUDA machine, with compiled kernels and the full shapes (Qwen3's 151,936-token vocabulary,
32,768 loss tokens, 64 decode sequences of up to 16K tokens, Qwen3-0.6B's shape):
    TRITON_INTERPRET=0 python -m pytest -q tests/test_gpu.py
Anywhere else, and under the Triton interpreter (tests/conftest.py turns it on for the CPU tests),
the same checks run on gpu_check.py's tiny dry-run shapes on the CPU, the kernels interpreted; the
peak-memory checks need CUDA's allocator statistics and are skipped there, with that reason.
Tolerances: bf16 rounds to 8 significant bits, u = 2^-8; see each test.
"""

import math
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import gpu_workloads as workloads  # noqa: E402
import gppo_loss  # noqa: E402
from parts import logit_kernels  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes")
ON_GPU = torch.cuda.is_available() and not INTERPRETED
DRY = not ON_GPU  # gpu_check.py's tiny shapes
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
U_BF16 = 2.0**-8

pytestmark = pytest.mark.skipif(gppo_loss.triton is None, reason="triton is not installed")
needs_cuda = pytest.mark.skipif(
    not ON_GPU,
    reason="peak memory needs a CUDA device and compiled kernels: "
    "TRITON_INTERPRET=0 python -m pytest tests/test_gpu.py",
)


def full(p):
    """A parameter's full value, whether FSDP2 sharded it (a DTensor) or not."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def max_abs_diff(a, b, rows_per_block: int) -> float:
    """max |a - b| over two (N, V) tensors, a block of rows at a time (no (N, V) fp32 temporaries)."""
    return max(
        float((a[r : r + rows_per_block].float() - b[r : r + rows_per_block].float()).abs().max())
        for r in range(0, len(a), rows_per_block)
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_fused_loss_matches_the_readable_reference(dtype):
    """rl_loss_from_logits, chunked PyTorch and Triton, against policy_loss + 0.1 sft_loss through
    autograd. Value: fp32 sums over V in another order, relative 1e-5. Gradient, relative to its
    largest entry: the bf16 path stores it in bf16 (one rounding, u) from fp32 terms (another, u):
    2u; fp32 logits: fp32 sums, 1e-5."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    work = workloads.loss_workload(DRY, DEVICE, gen)
    logits = workloads.random_logits(work, dtype, gen)
    ref_value, ref_grad = workloads.reference_loss(logits, work)
    grad_scale = float(ref_grad.abs().max())
    grad_bound = 2 * U_BF16 if dtype == torch.bfloat16 else 1e-5
    for backend in ("torch", "triton"):
        loss, grad = workloads.fused_loss(logits, work, backend)
        value_err = abs(float(loss.detach()) - ref_value) / max(1.0, abs(ref_value))
        grad_err = max_abs_diff(grad, ref_grad, work.block) / grad_scale
        assert value_err <= 1e-5 and grad_err <= grad_bound, (backend, value_err, grad_err)
        del loss, grad


def test_loss_from_hidden_triton_matches_torch():
    """rl_loss_from_hidden at the training path's shapes (bf16 hidden and head) runs on both
    backends with finite gradients; both see the same bf16 logits chunks and differ only in fp32
    summation order: loss within 1e-5."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    work = workloads.loss_workload(DRY, DEVICE, gen)
    hidden = (torch.randn(work.N, work.D, generator=gen, device=DEVICE) / work.D**0.5).to(
        torch.bfloat16
    )
    weight = (torch.randn(work.V, work.D, generator=gen, device=DEVICE) * 0.02).to(torch.bfloat16)
    results = {}
    for backend in ("torch", "triton"):
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        loss, _ = gppo_loss.rl_loss_from_hidden(h, w, **work.kwargs(), backend=backend)
        loss.backward()
        assert (
            math.isfinite(float(loss.detach()))
            and bool(h.grad.isfinite().all())
            and bool(w.grad.isfinite().all())
        )
        results[backend] = float(loss.detach())
    assert abs(results["triton"] - results["torch"]) <= 1e-5 * max(1.0, abs(results["torch"]))


@pytest.mark.parametrize(
    "case", workloads.DECODE_CASES[DRY], ids=lambda case: case[0].strip() or "all"
)
def test_paged_decode_kernel_matches_the_reference(case):
    """The Triton paged-decode kernel (in place, split contexts) against gather + SDPA on scattered
    block tables. Both outputs are rounded to bf16 once, and the kernel rounds each weight p_t to
    bf16 for its p·V dot, so its
    weighted mean of V rows moves by at most that relative rounding times max|V|; scores and sums in fp32 add only
    fp32 rounding, far below that. A rounding is relative u to nearest (a GPU, the reference), 2u
    under Triton's
    interpreter, whose fp32 -> bf16 cast truncates: u + 2u of the largest output, 2u max|V|."""
    from parts.decode_kernels import paged_decode_reference, paged_decode_triton

    _, b, splits = case
    w = workloads.decode_workload(DRY, DEVICE)
    tables = w.block_tables[:b]
    lens = w.context_lens[:b]
    expected = paged_decode_reference(w.q[:b], w.k_pool, w.v_pool, tables, lens).float()
    out = paged_decode_triton(w.q[:b], w.k_pool, w.v_pool, tables, lens, splits).float()
    bound = 3 * U_BF16 * float(expected.abs().max()) + 2 * U_BF16 * float(
        w.v_pool.float().abs().max()
    )
    assert float((out - expected).abs().max()) <= bound


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def engine_model(request):
    """The engine's model in fp32 (every path of the engine, rounding at 24 bits: the bounds below
    are tight) and in bf16 (what a GPU run samples with: the same bounds, 2^16 times wider)."""
    config = workloads.model_config(DRY)
    return config, workloads.random_qwen3(config, request.param, DEVICE).eval()


def test_engine_generates_the_whole_workload(engine_model):
    """No stop tokens: every sample of every prompt is exactly T tokens long, whatever the pool's
    preemptions."""
    from rollout import LLMEngine, SamplingParams

    config, model = engine_model
    prompts, n, T, longest = workloads.engine_workload(config, DRY)
    engine = LLMEngine(
        model, max_num_seqs=len(prompts) * n, max_model_len=longest + T, use_triton=True
    )
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=T, n=n, seed=0))
    assert sum(len(s.token_ids) for o in outs for s in o) == len(prompts) * n * T


def greedy_from_the_engine(model, config, steps):
    from rollout import LLMEngine, SamplingParams

    prompts, _, _, longest = workloads.engine_workload(config, DRY)
    engine = LLMEngine(model, max_num_seqs=8, max_model_len=longest + steps, use_triton=True)
    outs = engine.generate(prompts[:4], SamplingParams(temperature=0.0, max_tokens=steps))
    return [(p, o[0].token_ids, o[0].logprobs) for p, o in zip(prompts, outs)]


def assert_greedy_within(compared: dict, tol: float, fp32: bool):
    """Like with like: the engine's greedy tokens are taken from fp32 logits, and so are the
    reference's (teacher forced on the engine's tokens). Where bits legitimately differ, a token may
    be the reference's argmax only up to the rounding bound tol on each logit (it falls short of the
    largest by <= 2 tol), and its logprob moves by <= 2 tol. In fp32 the bound is tight: a wrong
    token would be caught where the reference's top two logits are more than 2 tol apart, and most
    positions must be so (else the check could not fail)."""
    shortfall = torch.cat([c["shortfall"] for c in compared])
    gap = torch.cat([c["gap"] for c in compared])
    margin = torch.cat([c["margin"] for c in compared])
    assert float(shortfall.max()) <= 2 * tol, (float(shortfall.max()), tol)
    assert float(gap.max()) <= 2 * tol, (float(gap.max()), tol)
    if fp32:
        assert float((margin > 2 * tol).float().mean()) >= 0.9, (margin.median(), tol)


def test_engine_greedy_is_the_full_forwards_argmax(engine_model):
    """The engine (paged KV cache, Triton decode, on CUDA its graphs and fused norms) against
    model.py's full forward over the same tokens: 3 roundings a layer differ
    (workloads.ENGINE_VS_FORWARD)."""
    config, model = engine_model
    generated = greedy_from_the_engine(model, config, 4 if DRY else 32)
    compared = [
        workloads.greedy_against(workloads.teacher_forced_logits(model, p, t), t, lp)
        for p, t, lp in generated
    ]
    tol = max(
        workloads.logit_error_bound(model, p + t, **workloads.ENGINE_VS_FORWARD)
        for p, t, _ in generated
    )
    assert_greedy_within(compared, tol, next(model.parameters()).dtype == torch.float32)


def test_engine_greedy_is_transformers_argmax(engine_model):
    """The same against transformers' Qwen3ForCausalLM with the same weights and dtype, teacher
    forced: 14 roundings a layer may differ (workloads.ENGINE_VS_TRANSFORMERS)."""
    pytest.importorskip(
        "transformers", reason="transformers is not installed (it is not a project dependency)"
    )
    config, model = engine_model
    dtype = next(model.parameters()).dtype
    hf = workloads.transformers_twin(model, config, DEVICE, dtype)
    generated = greedy_from_the_engine(model, config, 4 if DRY else 32)
    compared = [
        workloads.greedy_against(workloads.transformers_teacher_forced_logits(hf, p, t), t, lp)
        for p, t, lp in generated
    ]
    tol = max(
        workloads.logit_error_bound(model, p + t, **workloads.ENGINE_VS_TRANSFORMERS)
        for p, t, _ in generated
    )
    assert_greedy_within(compared, tol, dtype == torch.float32)


def test_head_gradient_accumulates_in_place():
    """gppo_loss's backward adds each chunk's head gradient into its fp32 accumulator (on CUDA one
    addmm with an fp32 output, no (V, D) product): equal to the fp32 product of the bf16 operands up
    to the order of the sums
    ((c + 2) fp32 roundings of the sum of |products|), and on CUDA no allocation the size of the accumulator."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    V, D, c = (300, 32, 16) if DRY else (151936, 1024, 2048)
    acc = torch.randn(V, D, generator=gen, device=DEVICE)
    a = torch.randn(V, c, generator=gen, device=DEVICE).to(torch.bfloat16)
    b = torch.randn(c, D, generator=gen, device=DEVICE).to(torch.bfloat16)
    expected = acc + a.float() @ b.float()
    bound = (c + 2) * 2.0**-24 * (acc.abs() + a.float().abs() @ b.float().abs())
    if ON_GPU:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    logit_kernels._addmm_fp32_(acc, a, b)
    if ON_GPU:
        torch.cuda.synchronize()
        assert torch.cuda.max_memory_allocated() - before < V * D * 4 // 2, (
            "a (V, D) temporary was allocated"
        )
    assert bool(((acc - expected).abs() <= bound).all())


# ------------------------------------------------------ FSDP2 steps, as sft.py and gppo.py run them


def test_sft_step_trains():
    workloads.process_group(DRY)
    step, policy, _ = workloads.sft_step_setup(DRY, DEVICE, workloads.model_config(DRY))
    before = [full(p).clone() for p in policy.parameters()]
    losses = [step(), step()]
    assert all(math.isfinite(x) for x in losses)
    assert any(not torch.equal(b, full(p)) for b, p in zip(before, policy.parameters()))


def test_gppo_step_trains_and_syncs_the_engine():
    """One GPPO step: the engine's KV pool takes the configured share of the free memory; after
    copy_weights the engine's bf16 weights are exactly the policy's, rounded to bf16; the loss is
    finite."""
    workloads.process_group(DRY)
    step, run, free = workloads.gppo_step_setup(DRY, DEVICE, workloads.model_config(DRY))
    assert run.engine.cache.nbytes <= run.cfg.kv_cache_fraction * free
    # the second step starts from AdamW's states
    for _ in range(2):
        seqs, metrics, times = step()
    assert math.isfinite(metrics["loss"]) and times["train_s"] > 0
    assert all(
        torch.equal(q, full(p).to(q.dtype))
        for p, q in zip(run.policy.parameters(), run.engine_model.parameters())
    )


@needs_cuda
def test_sft_step_peak_memory_within_the_budget_on_paper():
    """Peak allocated bytes of an SFT step <= 1.25 x parts/memory_plan.py's budget (its largest
    phase)."""
    from parts.memory_plan import peak_phase, sft_phases

    workloads.process_group(DRY)
    config = workloads.model_config(DRY)
    step, _, T = workloads.sft_step_setup(DRY, DEVICE, config)
    # AdamW's states appear in the first step
    step()
    peak, _ = workloads.step_peak_and_time(step, DEVICE)
    _, budget, _ = peak_phase(sft_phases(config, world=1, row_tokens=T, loss_chunk=4096, gpu=True))
    assert peak <= 1.25 * budget, (peak, budget)


@needs_cuda
def test_gppo_step_peak_memory_within_the_budget_on_paper():
    import data
    from parts.memory_plan import gppo_phases, peak_phase

    workloads.process_group(DRY)
    config = workloads.model_config(DRY)
    step, run, _ = workloads.gppo_step_setup(DRY, DEVICE, config)
    step()
    result = {}
    peak, _ = workloads.step_peak_and_time(lambda: result.update(out=step()), DEVICE)
    rows = data.pack_in_order(result["out"][0], run.cfg.train_row_tokens)
    longest = max(sum(len(s.ids) for s in r) for r in rows)
    _, budget, _ = peak_phase(
        gppo_phases(
            config,
            world=1,
            row_tokens=longest,
            kv_bytes=run.engine.cache.nbytes,
            gpu=True,
            loss_chunk=2048,
        )
    )
    assert peak <= 1.25 * budget, (peak, budget)


def test_pool_takes_the_free_memory_and_a_generate_fits_beside_it():
    """gppo.py's pool with the engine freed while training: at generate() it takes the memory then
    free less rollout.rollout_margin (whole blocks of it), and a generate() of 64 prompts x 8
    samples runs beside it: the margin suffices for the prefill, sampling and CUDA graphs (on the
    CPU: a given free memory, no peak)."""
    config = workloads.model_config(DRY)
    result = workloads.pool_from_free_memory(DRY, DEVICE, config)
    prompts, n, _, _ = workloads.engine_workload(config, DRY)
    assert 0.99 < result["pool_over_free_less_margin"] <= 1, result
    assert result["tokens"] == len(prompts) * n * (4 if DRY else 64)
    if ON_GPU:
        assert result["peak_GB"] <= result["total_GB"], result
