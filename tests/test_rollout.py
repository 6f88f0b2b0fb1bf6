"""Tests of rollout.py against independent references: a no-cache greedy decode (full forward at
every step), teacher-forced logprobs of model.py with a separately written top-k/top-p filter, and a
per-token loop over block tables for the paged attention kernels. A tiny random fp32 Qwen3 keeps
everything fast on a CPU."""

import copy
import dataclasses
import math
import os
import shutil

import pytest
import torch

import rollout
from parts import decode_kernels, kv_cache, norm_kernels
from model import Qwen3, Qwen3Config
from parts.sampling import inverse_cdf
from parts.decode_kernels import cascade_batch, cascade_decode, cascade_workspace_size
from parts.decode_kernels import paged_decode_cpu, paged_decode_reference, paged_decode_triton
from rollout import LLMEngine, SamplingParams, Sequence

V = 97


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is faster, and steadier on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    cfg = Qwen3Config(
        vocab_size=V,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    # std 0.2: peaked enough that greedy has no near-ties
    return Qwen3(cfg).init_weights(std=0.2, seed=0)


def require_cpu_kernel():
    """The C++ decode kernel must build wherever a compiler and ninja exist (a failed build fails
    the test)."""
    import sysconfig
    from torch.utils import cpp_extension

    if (
        shutil.which(os.environ.get("CXX", "c++")) is None
        or not cpp_extension.is_ninja_available()
        or not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
    ):
        pytest.skip(
            "no C++ compiler, ninja or Python.h: the engine decodes on CPU with its PyTorch cascade path"
        )
    rollout.load_cpu_kernel(required=True)


@pytest.fixture(params=[True, False], ids=["cpu_kernel", "cascade"])
def cpu_kernel(request):
    """Engine tests run with each CPU decode path: the C++ kernel and the PyTorch cascade
    attention."""
    if request.param:
        require_cpu_kernel()
    return request.param


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(V, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def reference_greedy(model, prompt, max_tokens, stop=()):
    ids = list(prompt)
    for _ in range(max_tokens):
        token = int(model(torch.tensor([ids]))[0, -1].argmax())
        ids.append(token)
        if token in stop:
            break
    return ids[len(prompt) :]


@torch.no_grad()
def teacher_forced_logprobs(model, prompt, response, temperature, top_k=0, top_p=1.0):
    """log p(response_t) under softmax(filtered logits / T), the filter written as a plain loop over
    ranks."""
    # (R, V)
    logits = (
        model(torch.tensor([prompt + response]))[0, len(prompt) - 1 : -1].double() / temperature
    )
    out = []
    for token, row in zip(response, logits):
        order = row.argsort(descending=True).tolist()
        kept = order[:top_k] if top_k else order
        probs = torch.softmax(row[kept], 0).tolist()
        if top_p < 1:
            mass = 0.0
            nucleus = []
            for tok, p in zip(kept, probs):
                if mass >= top_p:
                    break
                nucleus.append(tok)
                mass += p
            kept = nucleus
        if token not in kept:
            out.append(-math.inf)
            continue
        out.append(float(torch.log_softmax(row[kept], 0)[kept.index(token)]))
    return out


def assert_no_leaks(engine):
    assert engine.blocks.num_free == engine.blocks.num_blocks
    assert all(c == 0 for c in engine.blocks.ref_counts)


def test_greedy_equals_no_cache_reference_mixed_lengths(model, cpu_kernel):
    prompts = prompts_of([1, 5, 15, 16, 17, 33])  # around block boundaries of block_size 16
    engine = LLMEngine(model, max_num_seqs=8, max_model_len=128, cpu_kernel=cpu_kernel)
    params = [SamplingParams(temperature=0, max_tokens=k) for k in (24, 3, 20, 17, 1, 30)]
    out = engine.generate(prompts, params)
    for prompt, p, samples in zip(prompts, params, out):
        ref = reference_greedy(model, prompt, p.max_tokens)
        assert samples[0].token_ids == ref
        assert samples[0].finish_reason == "length"
        # greedy logprob: the unscaled log_softmax at the argmax
        assert samples[0].logprobs == pytest.approx(
            teacher_forced_logprobs(model, prompt, ref, 1.0), abs=1e-4
        )
    assert engine.stats.prefill_tokens == sum(map(len, prompts)) and engine.stats.preemptions == 0
    assert isinstance(engine.decode, decode_kernels.CpuKernelDecode) == cpu_kernel
    assert_no_leaks(engine)


def test_greedy_under_preemption(model, cpu_kernel):
    prompts = prompts_of([3, 9, 14, 20, 6, 11], seed=1)
    max_model_len = 40
    # the pool holds one full-length sequence (10 blocks of 4): most sequences must be preempted and
    # recomputed
    engine = LLMEngine(
        model,
        max_num_seqs=6,
        max_model_len=max_model_len,
        num_blocks=10,
        block_size=4,
        cpu_kernel=cpu_kernel,
    )
    out = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=25, n=2))
    assert engine.stats.preemptions > 0 and engine.stats.recompute_tokens > 0
    assert engine.stats.peak_blocks_used <= 10
    for prompt, samples in zip(prompts, out):
        ref = reference_greedy(model, prompt, min(25, max_model_len - len(prompt)))
        assert [s.token_ids for s in samples] == [ref, ref]
    assert isinstance(engine.decode, decode_kernels.CpuKernelDecode) == cpu_kernel
    assert_no_leaks(engine)


def test_recomputed_sequence_longer_than_the_token_budget_does_not_wait_for_the_batch(
    model, monkeypatch
):
    """A preempted sequence comes back with all its tokens to recompute, which may pass
    max_num_batched_tokens (the real run: up to 36,864 against 16,384). It must be admitted, alone,
    once its blocks are free, while the others keep decoding: not only when every running sequence
    has finished. Greedy tokens stay the reference's."""
    prompts = prompts_of([3, 5, 4, 6, 2, 5], seed=2)
    engine = LLMEngine(
        model,
        max_num_seqs=6,
        max_model_len=40,
        num_blocks=14,
        block_size=4,
        max_num_batched_tokens=8,
        cpu_kernel=False,
    )
    # (its tokens, sequences then running) of each recomputation longer than the budget
    admissions = []
    admit = engine.scheduler.admit

    def recording_admit():
        running = len(engine.scheduler.running)
        groups = admit()
        admissions.extend((len(g[0]), running) for g in groups if g[0].preempted and len(g[0]) > 8)
        return groups

    monkeypatch.setattr(engine.scheduler, "admit", recording_admit)
    out = engine.generate(
        prompts, [SamplingParams(temperature=0, max_tokens=k) for k in (30, 12, 33, 9, 35, 20)]
    )
    assert admissions, "the workload must preempt sequences longer than the budget"
    assert any(running > 0 for _, running in admissions), admissions
    for prompt, k, samples in zip(prompts, (30, 12, 33, 9, 35, 20), out):
        assert samples[0].token_ids == reference_greedy(model, prompt, k)
    assert_no_leaks(engine)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (0.9, 0, 0.8), (1.0, 10, 0.9)],
)
def test_logprobs_equal_teacher_forced(model, temperature, top_k, top_p):
    prompts = prompts_of([7, 21, 2], seed=2)
    engine = LLMEngine(model, max_num_seqs=16, max_model_len=64)
    params = SamplingParams(
        temperature=temperature, top_k=top_k, top_p=top_p, max_tokens=12, n=3, seed=5
    )
    out = engine.generate(prompts, params)
    for prompt, samples in zip(prompts, out):
        for s in samples:
            ref = teacher_forced_logprobs(model, prompt, s.token_ids, temperature, top_k, top_p)
            assert all(math.isfinite(r) for r in ref), "sampled a token outside the top-k/top-p set"
            assert s.logprobs == pytest.approx(ref, abs=1e-4)
    # the filter actually removed mass: logprobs are renormalised, above the unfiltered ones
    if top_k == 5:
        s = out[0][0]
        unfiltered = teacher_forced_logprobs(model, prompts[0], s.token_ids, temperature)
        assert all(a > b + 1e-6 for a, b in zip(s.logprobs, unfiltered))
    assert_no_leaks(engine)


def test_n_samples_share_the_prompt(model, cpu_kernel):
    """Prefill computes each prompt once; the partly filled last block is copied on write, and the
    samples' logprobs (which read that block) still match teacher forcing, so no sample overwrote
    another's K/V."""
    # 21 = one full block + a shared partial block
    prompts = prompts_of([21, 40], seed=3)
    engine = LLMEngine(model, max_num_seqs=16, max_model_len=80, cpu_kernel=cpu_kernel)
    out = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=10, n=4, seed=0))
    assert engine.stats.prefill_tokens == 21 + 40  # not 4x
    # the first token of each sample comes from the prefill
    assert engine.stats.decode_tokens == 8 * 9
    # prompt blocks 2 + 3 shared; each sample owns at most 1 copy-on-write + 1 new block
    assert engine.stats.peak_blocks_used <= 5 + 8 * 2
    assert len({tuple(s.token_ids) for s in out[0]}) > 1  # distinct random streams per sample
    for prompt, samples in zip(prompts, out):
        for s in samples:
            assert s.logprobs == pytest.approx(
                teacher_forced_logprobs(model, prompt, s.token_ids, 1.0), abs=1e-4
            )
    assert isinstance(engine.decode, decode_kernels.CpuKernelDecode) == cpu_kernel
    assert_no_leaks(engine)


def test_groups_that_shrink_unevenly_stay_exact(model, cpu_kernel):
    """Samples of a prompt stop at different steps (stop tokens), so decode steps see groups of
    different sizes (padded group rows in the shared-prefix attention) next to singletons after
    preemption; every logprob must still be the teacher-forced one."""
    # 2, 1, 3 and 0 full blocks of 16 to share
    prompts = prompts_of([35, 18, 50, 3], seed=9)
    engine = LLMEngine(
        model,
        max_num_seqs=12,
        max_model_len=96,
        num_blocks=12,
        block_size=16,
        cpu_kernel=cpu_kernel,
        admit_watermark=0,
    )  # all admitted at once, then preempted
    params = SamplingParams(
        temperature=1.0, max_tokens=40, n=4, seed=3, stop_token_ids=list(range(0, V, 16))
    )
    out = engine.generate(prompts, params)
    lengths = [len(s.token_ids) for samples in out for s in samples]
    assert len(set(lengths)) > 3 and engine.stats.preemptions > 0, (lengths, engine.stats)
    for prompt, samples in zip(prompts, out):
        for s in samples:
            assert s.logprobs == pytest.approx(
                teacher_forced_logprobs(model, prompt, s.token_ids, 1.0), abs=1e-4
            )
    assert isinstance(engine.decode, decode_kernels.CpuKernelDecode) == cpu_kernel
    assert_no_leaks(engine)


def test_same_seed_same_samples_whatever_the_batch(model):
    prompt = prompts_of([10], seed=4)[0]
    params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=20, n=3, seed=123)
    alone = LLMEngine(model, max_num_seqs=8, max_model_len=64).generate([prompt], params)[0]
    again = LLMEngine(model, max_num_seqs=8, max_model_len=64).generate([prompt], params)[0]
    others = prompts_of([4, 30, 12], seed=5)
    # in another batch, with other requests before it, and with preemptions (a pool of 2 full
    # sequences)
    crowded = LLMEngine(model, max_num_seqs=8, max_model_len=64, num_blocks=8, block_size=16)
    mixed = crowded.generate(
        others[:2] + [prompt] + others[2:],
        [SamplingParams(temperature=0.8, max_tokens=30, n=2, seed=1)] * 2
        + [params]
        + [SamplingParams(temperature=0, max_tokens=15)],
    )[2]
    assert crowded.stats.preemptions > 0
    for a, b, c in zip(alone, again, mixed):
        assert a.token_ids == b.token_ids == c.token_ids
        assert a.logprobs == pytest.approx(c.logprobs, abs=1e-5)
    other_seed = LLMEngine(model, max_num_seqs=8, max_model_len=64).generate(
        [prompt], SamplingParams(temperature=1.0, top_p=0.95, max_tokens=20, n=3, seed=124)
    )[0]
    assert [s.token_ids for s in other_seed] != [s.token_ids for s in alone]
    assert_no_leaks(crowded)


@torch.no_grad()
def reference_sample(model, prompt, params, sample_index):
    """Sample j of a request written out without the engine: a full forward over all tokens at
    every step (no KV cache), the top-k/top-p filter as a loop over ranks, a float64 softmax over
    the kept tokens and the inverse CDF as one float64 cumsum in token-id order, at the uniforms
    of sample j's own stream (rollout.py's contract: torch.Generator seeded with
    sample_seed(seed, j), float64 uniforms drawn 64 at a time, one per token)."""
    generator = torch.Generator().manual_seed(rollout.sample_seed(params.seed, sample_index))
    uniforms = []
    ids = list(prompt)
    for _ in range(params.max_tokens):
        if not uniforms:
            uniforms = torch.rand(64, generator=generator, dtype=torch.float64).tolist()[::-1]
        u = uniforms.pop()
        row = model(torch.tensor([ids]))[0, -1].double() / params.temperature  # (V,)
        order = row.argsort(descending=True).tolist()
        kept = order[: params.top_k] if params.top_k else order
        probs = torch.softmax(row[kept], 0).tolist()
        mass = 0.0
        nucleus = []
        for token, p in zip(kept, probs):
            if mass >= params.top_p and params.top_p < 1:
                break
            nucleus.append(token)
            mass += p
        nucleus.sort()  # token-id order
        cdf = torch.softmax(row[nucleus], 0).cumsum(0)
        token = nucleus[int(torch.searchsorted(cdf, u * cdf[-1:], right=True))]
        ids.append(token)
        if token in params.stop_token_ids:
            break
    return ids[len(prompt) :]


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.8, 6, 0.9)])
def test_seeded_samples_equal_a_no_cache_sampler(model, cpu_kernel, temperature, top_k, top_p):
    """The tokens of seeded samples are pinned: each sample's are those of reference_sample,
    whatever the decode path, with preemptions (a pool of 2 full-length sequences) and samples
    stopping at different steps."""
    prompts = prompts_of([4, 19, 9], seed=12)
    params = SamplingParams(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        max_tokens=14,
        n=3,
        seed=7,
        stop_token_ids=[5, 50],
    )
    engine = LLMEngine(
        model, max_num_seqs=9, max_model_len=40, num_blocks=20, block_size=4, cpu_kernel=cpu_kernel
    )
    out = engine.generate(prompts, params)
    assert engine.stats.preemptions > 0
    for prompt, samples in zip(prompts, out):
        expected = [reference_sample(model, prompt, params, j) for j in range(3)]
        assert [s.token_ids for s in samples] == expected
    assert_no_leaks(engine)


@pytest.mark.parametrize("V", [1, 7, 64, 65, 300])
def test_inverse_cdf_equals_a_float64_search_and_never_picks_a_zero(V):
    """The two-level search vs one float64 cumsum; rows with zero-probability tokens (as top-k/top-p
    leave them) at the start, inside and at the end; u = 0 and u = 1 (u * total rounding up to the
    total) included."""
    g = torch.Generator().manual_seed(V)
    probs = torch.rand(6, V, generator=g) ** 3
    probs[:, ::3] = 0  # zeros inside, and token 0 is a zero
    probs[:, -1] = 0  # and at the end
    probs[:, min(1, V - 1)] += 0.01  # every row keeps some mass
    cdf = probs.double().cumsum(1)
    for u in torch.rand(50, generator=g).tolist() + [0.0, 1.0, 1 - 1e-12]:
        got = inverse_cdf(probs, torch.full((6,), u))
        assert (probs.gather(1, got[:, None]) > 0).all(), f"u={u}: picked a zero-probability token"
        # away from the ends, fp32 vs fp64 rounding cannot move the boundary
        if 1e-4 < u < 1 - 1e-4:
            expected = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0]
            assert got.tolist() == expected.tolist(), f"u={u}"


def test_stop_tokens_and_lengths(model):
    prompt = prompts_of([6], seed=6)[0]
    ref = reference_greedy(model, prompt, 30)
    stop = ref[4]
    first = ref.index(stop)
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=20)
    out = engine.generate(
        [prompt] * 3,
        [
            SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop]),
            SamplingParams(temperature=0, max_tokens=1),
            SamplingParams(temperature=0, max_tokens=30),
        ],
    )
    # stop token kept
    assert out[0][0].token_ids == ref[: first + 1] and out[0][0].finish_reason == "stop"
    assert out[1][0].token_ids == ref[:1] and out[1][0].finish_reason == "length"
    # capped by max_model_len
    assert out[2][0].token_ids == ref[: 20 - 6] and out[2][0].finish_reason == "length"
    assert_no_leaks(engine)


def test_released_pool_comes_back_with_the_same_samples(model):
    """gppo.py releases the KV pool while it trains (its activations get the room): the pool's
    memory is gone until the next generate(), which allocates it again and samples exactly what an
    engine that never released does."""
    prompts = prompts_of([6, 20, 11], seed=8)
    params = SamplingParams(temperature=1.0, max_tokens=16, n=2, seed=5)
    kept, released = (LLMEngine(model, max_num_seqs=8, max_model_len=64) for _ in range(2))
    first = released.generate(prompts, params)
    nbytes = released.cache.nbytes
    released.cache.release()
    assert (
        released.cache.k_pool is None
        and released.cache.v_pool is None
        and released.cache.nbytes == nbytes
    )
    again = released.generate(prompts, params)
    reference = kept.generate(prompts, params)
    assert (
        [[s.token_ids for s in g] for g in again]
        == [[s.token_ids for s in g] for g in reference]
        == [[s.token_ids for s in g] for g in first]
    )
    assert released.cache.k_pool.shape == kept.cache.k_pool.shape
    assert_no_leaks(released)


def test_pool_is_sized_again_at_each_generate_from_what_is_free(model):
    """A trainer that frees the engine's pool while it trains (gppo.py on a GPU) gets a pool sized
    at each generate() from the memory then free: kv_cache_memory asked when the pool is allocated,
    not at start (nothing allocated at start: an optimizer's states read on resume come after). The
    samples do not depend on the pool's size."""
    prompts = prompts_of([6, 20, 11], seed=8)
    params = SamplingParams(temperature=1.0, max_tokens=16, n=2, seed=5)
    block_bytes = kv_cache.kv_block_bytes(model.config, torch.float32, 16)
    asked = []
    # blocks' worth of bytes at each question: start, then three generate() calls
    free_now = iter([30, 12, 20, 9])
    engine = LLMEngine(
        model,
        max_num_seqs=8,
        max_model_len=64,
        kv_cache_memory=lambda: asked.append(1) or next(free_now) * block_bytes,
    )
    # checked at start (a pool too small fails there), not made
    assert engine.cache.k_pool is None and len(asked) == 1
    reference = LLMEngine(model, max_num_seqs=8, max_model_len=64).generate(prompts, params)
    for blocks in (12, 20, 9):
        out = engine.generate(prompts, params)
        assert engine.blocks.num_blocks == blocks and engine.cache.nbytes == blocks * block_bytes
        assert [[s.token_ids for s in g] for g in out] == [
            [s.token_ids for s in g] for g in reference
        ]
        assert_no_leaks(engine)
        engine.cache.release()
    assert len(asked) == 4


def test_cuda_pool_is_the_free_memory_less_the_rollout_margin(model, monkeypatch):
    """On CUDA with no size given, the pool is what free_memory() reports when it is allocated less
    rollout_margin: a prefill's activations, sample()'s (B, V) fp32 temporaries, the CUDA graphs,
    512 MiB of workspaces (one formula, parts/memory_plan.py's, for the engine and the plan on
    paper); for Qwen3-8B ~6.9 GB, by hand here with the buckets parts/cuda_graphs.py captures."""
    from types import SimpleNamespace
    from parts import memory_plan
    from parts.cuda_graphs import buckets_for

    qwen3_8b = SimpleNamespace(**memory_plan.QWEN3["8B"])
    margin = rollout.rollout_margin(qwen3_8b, 2, 256, 36864, 16384)  # bf16: 2 bytes a value
    # one layer's prefill activations
    per_token = (4 * 4096 + 3 * 12288 + 32 * 128 + 2 * 8 * 128) * 2
    graphs = 2 * 256 * per_token + sum(buckets_for(256)) * 4096 * 2
    # the longest prefill goes alone
    assert margin == 36864 * per_token + 12 * 256 * 151936 * 4 + graphs + 2**29
    assert 6.8e9 < margin < 7.0e9
    fake_cuda = SimpleNamespace(
        model=model,
        device=torch.device("cuda"),
        dtype=torch.float32,
        block_size=4,
        max_model_len=64,
        max_num_seqs=8,
        max_num_batched_tokens=32,
        num_blocks=None,
        kv_cache_memory=None,
    )
    block_bytes = kv_cache.kv_block_bytes(model.config, torch.float32, 4)
    margin = rollout.rollout_margin(model.config, 4, 8, 64, 32)  # fp32: 4 bytes a value
    free = margin + 100 * block_bytes + 7
    monkeypatch.setattr(rollout, "free_memory", lambda device: free)
    assert rollout.pool_blocks(fake_cuda) == 100
    # less than one sequence of 64 tokens (16 blocks): a clear error
    free = margin + 5 * block_bytes
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        rollout.pool_blocks(fake_cuda)


def test_weight_update_is_seen_by_the_next_generate(model):
    """The engine shares the module and caches nothing across generate() calls."""
    model = Qwen3(model.config).init_weights(std=0.2, seed=1)  # a private copy we may modify
    prompts = prompts_of([5, 18], seed=7)
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=64)
    params = SamplingParams(temperature=0, max_tokens=12)
    before = [o[0].token_ids for o in engine.generate(prompts, params)]
    # a training step on what was generated (generate()'s inference mode must not leak into
    # training)
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    model(torch.tensor([prompts[0] + before[0]])).logsumexp(-1).mean().backward()
    optimizer.step()
    after = [o[0].token_ids for o in engine.generate(prompts, params)]
    assert after == [reference_greedy(model, p, 12) for p in prompts]
    assert after != before
    assert_no_leaks(engine)


def test_bad_requests_give_clear_errors(model):
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=32)
    ok = SamplingParams(max_tokens=4)
    cases = [
        ([[]], ok, "is empty"),
        ([list(range(32))], ok, "max_model_len=32"),
        ([[1, 2, V]], ok, "outside the model's vocabulary"),
        (["hello"], ok, "list of int token ids"),
        ([[1], [2]], [ok], "2 prompts"),
        ([[1]], SamplingParams(n=5), "max_num_seqs=4"),
    ]
    for prompts, params, message in cases:
        with pytest.raises(ValueError, match=message):
            engine.generate(prompts, params)
    for kwargs, field in [
        (dict(n=0), "n"),
        (dict(temperature=-1.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(stop_token_ids=[-3]), "stop_token_ids"),
        (dict(seed=1.5), "seed"),
        (dict(temperature=float("nan")), "temperature"),
    ]:
        with pytest.raises(ValueError, match=f"SamplingParams.{field}="):
            SamplingParams(**kwargs)
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        LLMEngine(model, max_model_len=64, num_blocks=3, block_size=16)
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLMEngine(model, max_num_seqs=0, max_model_len=64)
    assert_no_leaks(engine)


def paged_attention_by_hand(q, k_pool, v_pool, block_tables, context_lens):
    """Per sequence, per token: look the slot up in the block table; then softmax(q k^T / sqrt(hd))
    v."""
    B, Hq, hd = q.shape
    Hkv = k_pool.shape[0]
    bs = k_pool.shape[2]
    out = torch.empty_like(q)
    for b in range(B):
        n = int(context_lens[b])
        # (n, Hkv, hd)
        k = torch.stack([k_pool[:, block_tables[b, t // bs], t % bs] for t in range(n)])
        v = torch.stack([v_pool[:, block_tables[b, t // bs], t % bs] for t in range(n)])
        for h in range(Hq):
            kv = h // (Hq // Hkv)
            weights = torch.softmax(k[:, kv] @ q[b, h] / math.sqrt(hd), 0)
            out[b, h] = weights @ v[:, kv]
    return out


@pytest.mark.parametrize(
    "block_size,head_dim,group", [(16, 16, 2), (4, 12, 1), (8, 32, 4), (4, 16, 3), (16, 128, 4)]
)
def test_paged_decode_kernel_equals_reference(block_size, head_dim, group):
    """The Triton kernel (under TRITON_INTERPRET=1 on CPU) and the PyTorch reference vs a per-token
    loop. The kernel runs a KV head's whole query group per program (a group of 3 pads to 4 lanes),
    and splits each context into 1, 2 or 3 parts (flash-decoding): with 3 blocks per table, the
    1-token and 1-block contexts leave splits empty. (16, 128, 4): Qwen3-8B's blocks, head_dim and
    query group, the shape tests/test_aot_compile.py compiles."""
    g = torch.Generator().manual_seed(block_size)
    num_blocks = 12
    Hkv = 2
    B = 4
    k_pool = torch.randn(Hkv, num_blocks, block_size, head_dim, generator=g)
    v_pool = torch.randn(Hkv, num_blocks, block_size, head_dim, generator=g)
    q = torch.randn(B, Hkv * group, head_dim, generator=g)
    context_lens = torch.tensor(
        [1, block_size, block_size + 1, 3 * block_size - 2], dtype=torch.int32
    )
    # blocks scattered through the pool, as after reuse
    perm = torch.randperm(num_blocks, generator=g)
    block_tables = perm[: B * 3].view(B, 3).to(torch.int32)
    expected = paged_attention_by_hand(q, k_pool, v_pool, block_tables, context_lens)
    torch.testing.assert_close(
        paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens),
        expected,
        atol=1e-5,
        rtol=1e-5,
    )
    for splits in (1, 2, 3):
        torch.testing.assert_close(
            paged_decode_triton(q, k_pool, v_pool, block_tables, context_lens, splits),
            expected,
            atol=1e-5,
            rtol=1e-5,
        )


def test_paged_decode_kernel_tiles_span_blocks_and_splits():
    """The kernel takes DECODE_TOKENS (64) tokens per iteration, each token's block looked up in the
    table: contexts shorter than, equal to, one past and longer than a tile, in 1 split (two
    iterations), 2 (one tile per split, the last partial) and 4 (splits of 2 blocks, shorter than a
    tile: the tile's end belongs to the next split and must be masked), against the per-token
    loop."""
    from parts.decode_kernels import DECODE_TOKENS

    assert DECODE_TOKENS == 64
    g = torch.Generator().manual_seed(7)
    block_size = 16
    head_dim = 32
    Hkv = 2
    group = 4
    width = 8
    k_pool, v_pool = (
        torch.randn(Hkv, 3 * width, block_size, head_dim, generator=g) for _ in range(2)
    )
    context_lens = torch.tensor([1, 63, 64, 65, 128], dtype=torch.int32)
    # scattered
    block_tables = torch.stack(
        [torch.randperm(3 * width, generator=g)[:width] for _ in range(5)]
    ).int()
    q = torch.randn(5, Hkv * group, head_dim, generator=g)
    expected = paged_attention_by_hand(q, k_pool, v_pool, block_tables, context_lens)
    for splits in (1, 2, 4):
        torch.testing.assert_close(
            paged_decode_triton(q, k_pool, v_pool, block_tables, context_lens, splits),
            expected,
            atol=1e-5,
            rtol=1e-5,
        )


@pytest.mark.parametrize(
    "block_size,head_dim,group", [(16, 16, 2), (4, 32, 1), (8, 64, 3), (1, 128, 8), (16, 256, 5)]
)
def test_paged_decode_cpu_kernel_equals_float64_loop(block_size, head_dim, group):
    """The C++ kernel vs the per-token loop in float64. Its query group runs in chunks of 4, 2 and 1
    heads (3 = 2 + 1, 5 = 4 + 1, 8 = 4 + 4); contexts of 1 token, exactly one block, one more, and a
    partial last block, with the blocks scattered through the pool. Bound, from fp32 rounding (u =
    2^-24): a score sums hd products, so it is off
    by at most hd u |q||k| / sqrt(hd); a weight p_t = exp(s_t - m) / sum is then off by a relative
    2 (that + 4u for exp) + L u for the sum; the output, a weighted mean of V rows, by that times max |V| plus the
    L u max |V| of its own sum."""
    g = torch.Generator().manual_seed(head_dim + group)
    num_blocks = 40
    Hkv = 2
    B = 5
    k_pool = torch.randn(Hkv, num_blocks, block_size, head_dim, generator=g)
    v_pool = torch.randn(Hkv, num_blocks, block_size, head_dim, generator=g)
    q = torch.randn(B, Hkv * group, head_dim, generator=g)
    max_blocks = -(-(3 * block_size + 5) // block_size)
    context_lens = torch.tensor(
        [1, block_size, block_size + 1, 2 * block_size + 3, 3 * block_size + 5], dtype=torch.int32
    )
    block_tables = (
        torch.randperm(num_blocks, generator=g)[: B * max_blocks]
        .view(B, max_blocks)
        .to(torch.int32)
    )
    require_cpu_kernel()
    out = paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens)
    expected = paged_attention_by_hand(
        q.double(), k_pool.double(), v_pool.double(), block_tables, context_lens
    )
    err = float((out.double() - expected).abs().max())
    bound = fp32_attention_bound(q, k_pool, v_pool, context_lens)
    assert err <= bound, (err, bound)
    assert err > 0  # fp32 arithmetic, not a float64 path in disguise


def fp32_attention_bound(q, k_pool, v_pool, context_lens):
    """The fp32 rounding bound of the docstring above, for these inputs."""
    u = 2.0**-24
    L = int(context_lens.max())
    hd = q.shape[-1]
    score_err = hd * u * float(q.norm(dim=-1).max() * k_pool.norm(dim=-1).max()) / math.sqrt(hd)
    return float(v_pool.abs().max()) * (2 * (score_err + 4 * u) + 2 * L * u)


def test_paged_decode_cpu_kernel_is_the_same_on_two_threads():
    """128 (sequence, KV head) tasks split over torch's threads: each is computed alone, so the
    result is bitwise the same on 1 and 2 threads."""
    require_cpu_kernel()
    g = torch.Generator().manual_seed(1)
    k_pool = torch.randn(2, 64, 16, 32, generator=g)
    v_pool = torch.randn(2, 64, 16, 32, generator=g)
    q = torch.randn(64, 4, 32, generator=g)
    block_tables = torch.randint(64, (64, 3), generator=g, dtype=torch.int32)
    context_lens = torch.randint(1, 48, (64,), generator=g, dtype=torch.int32)
    one = paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    expected = paged_attention_by_hand(
        q.double(), k_pool.double(), v_pool.double(), block_tables, context_lens
    )
    assert float((two.double() - expected).abs().max()) <= fp32_attention_bound(
        q, k_pool, v_pool, context_lens
    )


@pytest.mark.parametrize("block_size,group", [(4, 2), (1, 3), (16, 1)])
def test_paged_decode_cpu_kernel_writes_the_new_token_first(block_size, group):
    """With k_new/v_new the kernel first writes each sequence's newest K/V at position context_len -
    1 (the first slot of a fresh block, the middle or the end of one), then attends: the same pools
    and, bitwise, the same output as writing them by hand through the block table and calling it
    without."""
    require_cpu_kernel()
    g = torch.Generator().manual_seed(block_size)
    Hkv = 2
    B = 6
    hd = 32
    width = 4
    k_pool = torch.randn(Hkv, 30, block_size, hd, generator=g)
    v_pool = torch.randn(Hkv, 30, block_size, hd, generator=g)
    q = torch.randn(B, Hkv * group, hd, generator=g)
    k_new = torch.randn(B, Hkv, hd, generator=g)
    v_new = torch.randn(B, Hkv, hd, generator=g)
    block_tables = torch.randperm(30, generator=g)[: B * width].view(B, width).to(torch.int32)
    context_lens = torch.tensor(
        [1, block_size, block_size + 1, 2 * block_size, 3 * block_size + 1, width * block_size],
        dtype=torch.int32,
    ).clamp(max=width * block_size)
    k_hand = k_pool.clone()
    v_hand = v_pool.clone()
    for b, n in enumerate(context_lens.tolist()):
        block = int(block_tables[b, (n - 1) // block_size])
        offset = (n - 1) % block_size
        k_hand[:, block, offset] = k_new[b]
        v_hand[:, block, offset] = v_new[b]
    expected = paged_decode_cpu(q, k_hand, v_hand, block_tables, context_lens)
    out = paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens, k_new, v_new)
    assert torch.equal(k_pool, k_hand) and torch.equal(v_pool, v_hand)
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="both k_new and v_new"):
        paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens, k_new)
    with pytest.raises(RuntimeError, match="new K/V must both be empty or"):
        paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens, k_new[:, :1], v_new[:, :1])


def test_cpu_kernel_fallback_and_errors(model, monkeypatch, capsys, tmp_path):
    """The kernel checks its inputs. Without a working compiler the engine says why in one line and
    decodes with the cascade path (same tokens); cpu_kernel=True then fails in one line, as it does
    for a model the kernel does not take (bf16) and on a Triton engine; a failed compile is reported
    by the compiler's first error. Loading the kernel (built with -ffast-math) leaves denormals
    alone in the process."""
    require_cpu_kernel()
    tiny = torch.tensor([1e-40])
    assert float(tiny * 1.0) > 0, "loading the CPU kernel switched on flush-to-zero"
    prompts = prompts_of([5, 18], seed=11)
    params = SamplingParams(temperature=0, max_tokens=6)
    with_kernel = LLMEngine(model, max_num_seqs=4, max_model_len=32)
    assert isinstance(with_kernel.decode, decode_kernels.CpuKernelDecode)
    expected = with_kernel.generate(prompts, params)
    # a kernel copied elsewhere checks what it is given
    pool = torch.zeros(1, 2, 4, 16)
    q = torch.zeros(1, 2, 16)
    one = torch.tensor([1], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="block id 2"):
        paged_decode_cpu(q, pool, pool, torch.tensor([[2]], dtype=torch.int32), one)
    with pytest.raises(RuntimeError, match="context length 5 outside 1..4"):
        paged_decode_cpu(q, pool, pool, torch.tensor([[0]], dtype=torch.int32), one * 5)
    with pytest.raises(RuntimeError, match="shapes do not match"):
        paged_decode_cpu(q, pool, pool, torch.tensor([[0], [0]], dtype=torch.int32), one)
    with pytest.raises(ValueError, match="fp32 and head_dim"):
        paged_decode_cpu(
            q.double(), pool.double(), pool.double(), torch.tensor([[0]], dtype=torch.int32), one
        )
    with pytest.raises(ValueError, match="cpu_kernel=True.*fp32"):
        LLMEngine(
            Qwen3(model.config).init_weights(seed=0).to(torch.bfloat16),
            max_model_len=32,
            cpu_kernel=True,
        )

    # no compiler: the engine says why in one line (once per process) and decodes with the cascade
    # path nothing here touches the real build cache
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setattr(decode_kernels, "_cpu_kernel", None)
    monkeypatch.setattr(decode_kernels, "_cpu_kernel_notice_shown", False)
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=32)
    err = capsys.readouterr().err
    assert isinstance(engine.decode, decode_kernels.CascadeDecode)
    assert err.count("\n") == 1 and "no-such-c++ is not on PATH" in err, err
    out = engine.generate(prompts, params)
    assert [[s.token_ids for s in g] for g in out] == [[s.token_ids for s in g] for g in expected]
    LLMEngine(model, max_num_seqs=4, max_model_len=32)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="could not be built .RuntimeError: no C.. compiler"):
        LLMEngine(model, max_model_len=32, cpu_kernel=True)
    # a failed compile: the compiler's first error is the reason given, not ninja's closing line
    monkeypatch.delenv("CXX")
    monkeypatch.setattr(decode_kernels, "_cpu_kernel", None)

    def failed_build(*args, **kwargs):
        raise RuntimeError(
            "Error building extension 'k': [1/2] c++ -MMD -c main.cpp -o main.o\nFAILED: main.o\n"
            "main.cpp:3:1: error: 'x' was not declared in this scope\n"
            "ninja: build stopped: subcommand failed."
        )

    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "load_inline", failed_build)
    with pytest.raises(
        ValueError, match="could not be built .RuntimeError: main.cpp:3:1: error: 'x' was not"
    ):
        LLMEngine(model, max_model_len=32, cpu_kernel=True)
    with pytest.raises(ValueError, match="for CPU engines without use_triton"):
        LLMEngine(model, max_model_len=32, cpu_kernel=True, use_triton=True)


# second: no group has a full prompt block
@pytest.mark.parametrize("prompt_lens", [(9, 3, 14), (2, 3, 1)])
def test_cascade_decode_equals_per_token_loop(prompt_lens):
    """Shared-prefix attention vs the per-token loop: groups of 3, 1 and 2 samples (so padded group
    rows), their members interleaved in the batch, own parts of different lengths, blocks scattered
    in the pool."""
    g = torch.Generator().manual_seed(len(prompt_lens) + prompt_lens[0])
    bs = 4
    Hkv = 2
    group = 3
    hd = 8
    num_blocks = 40
    k_pool = torch.randn(Hkv, num_blocks, bs, hd, generator=g)
    v_pool = torch.randn(Hkv, num_blocks, bs, hd, generator=g)
    free = torch.randperm(num_blocks, generator=g).tolist()
    seqs = []
    for prefix_id, (prompt_len, n) in enumerate(zip(prompt_lens, (3, 1, 2))):
        # the prompt's full blocks, shared by the group
        prefix = [free.pop() for _ in range(prompt_len // bs)]
        for j in range(n):
            # 1 + 2j generated
            seq = Sequence([0] * (prompt_len + 2 * j + 1), SamplingParams(), 100, seed=0)
            own = -(-len(seq) // bs) - len(prefix)
            seq.block_table = prefix + [free.pop() for _ in range(own)]
            seq.prefix_id = prefix_id
            seq.prefix_blocks = len(prefix)
            seqs.append(seq)
    # members of a group not side by side
    seqs = [seqs[i] for i in (0, 3, 4, 1, 5, 2)]
    q = torch.randn(len(seqs), Hkv * group, hd, generator=g)
    max_blocks = max(len(s.block_table) for s in seqs)
    block_tables = torch.tensor(
        [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in seqs]
    )
    context_lens = torch.tensor([len(s) for s in seqs])
    expected = paged_attention_by_hand(q, k_pool, v_pool, block_tables, context_lens)
    batch = cascade_batch(seqs, bs, "cpu")
    assert batch.P == 3 and batch.n == 3 and batch.L_pre == bs * (max(prompt_lens) // bs)
    torch.testing.assert_close(
        cascade_decode(q, k_pool, v_pool, batch), expected, atol=1e-5, rtol=1e-5
    )
    # stale garbage is overwritten
    workspace = torch.full((cascade_workspace_size(k_pool, batch) + 5,), float("nan"))
    torch.testing.assert_close(
        cascade_decode(q, k_pool, v_pool, batch, workspace), expected, atol=1e-5, rtol=1e-5
    )
    # the next step: every sequence one token longer. Those whose last block has room keep their
    # tables and the batch is reused (only the mask moves); one that starts a block changes the key
    # and the batch is rebuilt
    for grow, same_tables in ((lambda seq: len(seq) % bs != 0, True), (lambda seq: True, False)):
        stepped = [
            Sequence(s.token_ids + [0] * grow(s), SamplingParams(), 100, seed=0) for s in seqs
        ]
        for new, old in zip(stepped, seqs):
            extra = -(-len(new) // bs) - len(old.block_table)
            new.block_table = old.block_table + [free.pop() for _ in range(extra)]
            new.prefix_id = old.prefix_id
            new.prefix_blocks = old.prefix_blocks
        stepped_batch = cascade_batch(stepped, bs, "cpu")
        # same tables: the reuse path must recompute the mask (given a stale one); another key: a
        # rebuild
        previous = dataclasses.replace(stepped_batch, hidden=batch.hidden) if same_tables else batch
        reused = cascade_batch(stepped, bs, "cpu", reuse=previous)
        assert (reused.slots is previous.slots) == same_tables
        assert torch.equal(reused.hidden, stepped_batch.hidden) and torch.equal(
            reused.slots, stepped_batch.slots
        )
        lens = torch.tensor([len(s) for s in stepped])
        tables = torch.tensor(
            [
                s.block_table
                + [0] * (max(len(t.block_table) for t in stepped) - len(s.block_table))
                for s in stepped
            ]
        )
        torch.testing.assert_close(
            cascade_decode(q, k_pool, v_pool, reused),
            paged_attention_by_hand(q, k_pool, v_pool, tables, lens),
            atol=1e-5,
            rtol=1e-5,
        )


def test_engine_with_triton_decode_equals_reference(model):
    prompts = prompts_of([5, 17], seed=8)
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=32, use_triton=True)
    out = engine.generate(prompts, SamplingParams(temperature=0, max_tokens=4, n=2))
    for prompt, samples in zip(prompts, out):
        assert [s.token_ids for s in samples] == [reference_greedy(model, prompt, 4)] * 2
    assert_no_leaks(engine)


def test_on_finish_hands_over_each_sample_as_it_finishes(model):
    """generate(on_finish=) is called once per sample, with the Sample generate returns, as soon as
    it is done: the 2-token samples before the 6-token ones (gppo.py scores them while the others
    are decoding)."""
    prompts = prompts_of([5, 9], seed=3)
    seen = []
    out = LLMEngine(model, max_num_seqs=8, max_model_len=32).generate(
        prompts,
        [SamplingParams(max_tokens=6, n=2, seed=1), SamplingParams(max_tokens=2, n=3, seed=2)],
        on_finish=lambda p, j, sample: seen.append((p, j, sample)),
    )
    assert sorted((p, j) for p, j, _ in seen) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert [p for p, _, _ in seen] == [1, 1, 1, 0, 0]
    for p, j, sample in seen:
        assert sample == out[p][j]


# ---------------------------------------------------------- the device-side decode step (CUDA path)


def test_device_block_tables_follow_the_sequences_tables(model, monkeypatch):
    """The Triton path's block tables live on the device and change only where an entry changes
    (admission, a new block, a copy-on-write, a row freed by a finished or preempted sequence and
    reused): at every decode step each running sequence's row must hold exactly its block table. A
    pool of 10 blocks forces preemptions; n=3 samples share their prompt's blocks
    (copy-on-write)."""
    engine = LLMEngine(
        model, max_num_seqs=6, max_model_len=32, num_blocks=10, block_size=4, use_triton=True
    )
    checked = []
    original = engine.decode.hidden

    def checking(running, slots):
        rows = torch.tensor([seq.row for seq in running])
        width = max(len(seq.block_table) for seq in running)
        tables = engine.decode.tables.gather(rows, width)
        for seq, row in zip(running, tables.tolist()):
            assert row[: len(seq.block_table)] == seq.block_table
        # a row per running sequence
        assert len({seq.row for seq in running}) == len(running) >= 1
        checked.append(len(running))
        return original(running, slots)

    monkeypatch.setattr(engine.decode, "hidden", checking)
    prompts = prompts_of([6, 9, 3], seed=4)
    out = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=14, n=3, seed=5))
    assert engine.stats.preemptions > 0 and len(checked) > 10
    assert [[len(s.token_ids) for s in o] for o in out] == [[14] * 3] * 3
    assert_no_leaks(engine)
    # the PyTorch path
    plain = LLMEngine(model, max_num_seqs=6, max_model_len=32, num_blocks=10, block_size=4)
    expected = plain.generate(prompts, SamplingParams(temperature=1.0, max_tokens=14, n=3, seed=5))
    assert [[s.token_ids for s in o] for o in out] == [[s.token_ids for s in o] for o in expected]


def test_cuda_graph_decode_equals_the_plain_decode(model, monkeypatch):
    """cuda_graphs=True runs each decode step on static buffers padded to a bucket (on a CPU without
    capturing: the padding, the scratch block and the slicing are what a graph replays). Its tokens
    are the plain Triton step's, and its logprobs equal to fp32 rounding: real rows never see the
    padded ones."""
    prompts = prompts_of([5, 17, 2], seed=9)
    params = [
        SamplingParams(temperature=0.0, max_tokens=9),
        SamplingParams(temperature=1.0, max_tokens=12, n=2, seed=3),
        SamplingParams(temperature=0.8, max_tokens=7, n=2, seed=4),
    ]
    plain = LLMEngine(model, max_num_seqs=8, max_model_len=48, use_triton=True, cuda_graphs=False)
    graphed = LLMEngine(model, max_num_seqs=8, max_model_len=48, use_triton=True, cuda_graphs=True)
    graphs = graphed.decode.graphs
    assert plain.decode.graphs is None and graphs is not None and not graphs.capture
    batches = []
    run = graphs.run
    monkeypatch.setattr(graphs, "run", lambda n, **kw: batches.append(n) or run(n, **kw))
    expected = plain.generate(prompts, params)
    got = graphed.generate(prompts, params)
    assert {n for n in batches} - set(graphs.buckets)  # some steps were padded
    for a, b in zip(expected, got):
        for x, y in zip(a, b):
            assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
            assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) <= 1e-4
    assert got[0][0].token_ids == reference_greedy(model, prompts[0], 9)
    with pytest.raises(
        ValueError, match=r"cuda_graphs=True\): graphs replay the Triton decode step"
    ):
        LLMEngine(model, max_num_seqs=8, max_model_len=48, cuda_graphs=True)


def test_cuda_graphs_are_kept_while_the_pool_and_weights_stay(model):
    """A graph replays the addresses it was captured on. The engine keeps its graphs across
    generate() calls (an in-place weight update keeps the addresses), drops them when the weights
    were re-allocated (gppo.py frees and refills the engine's weights around training) and makes new
    ones with a new pool (after a release())."""
    # a private copy whose storage we replace
    model = Qwen3(model.config).init_weights(std=0.2, seed=1)
    engine = LLMEngine(model, max_num_seqs=8, max_model_len=48, use_triton=True, cuda_graphs=True)
    params = SamplingParams(temperature=0.0, max_tokens=4)
    engine.generate([[1, 2, 3]], params)
    engine.decode.graphs.graphs[8] = "captured"  # what a CUDA capture would have left
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.0)  # in place: the same storage
    engine.generate([[1, 2, 3]], params)
    assert engine.decode.graphs.graphs == {8: "captured"}
    for p in model.parameters():
        p.data = p.data.clone()  # freed and refilled: new storage
    engine.generate([[1, 2, 3]], params)
    assert engine.decode.graphs.graphs == {}
    engine.decode.graphs.graphs[8] = "captured"
    graphs = engine.decode.graphs
    engine.cache.release()
    engine.generate([[1, 2, 3]], params)
    assert engine.decode.graphs is not graphs and engine.decode.graphs.graphs == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_norm_kernels_leave_the_engines_tokens_unchanged(model, dtype):
    """fused_norms=True runs every RMSNorm, and the q/k norms with RoPE, as parts/norm_kernels.py's
    Triton kernels (interpreted here), in prefill and decode; with the same roundings as the eager
    formulas the greedy tokens are the eager engine's and the model's own, and the logprobs agree to
    the dtype's rounding (bf16: a logit moved by
    a flipped rounding of a norm moves logπ by at most a few bf16 ulps of the logits, ~0.1 at |z| ~ 10)."""
    m = model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    prompts = prompts_of([5, 17, 2], seed=11)
    params = [
        SamplingParams(temperature=0.0, max_tokens=10),
        SamplingParams(temperature=0.0, max_tokens=10),
        SamplingParams(temperature=0.0, max_tokens=10),
    ]
    calls = []
    fused = LLMEngine(m, max_num_seqs=8, max_model_len=48, use_triton=True, fused_norms=True)
    assert fused.cache.kernels is norm_kernels
    original = norm_kernels.norm_rope
    try:
        norm_kernels.norm_rope = lambda *a: calls.append(1) or original(*a)
        got = fused.generate(prompts, params)
    finally:
        norm_kernels.norm_rope = original
    expected = LLMEngine(
        m, max_num_seqs=8, max_model_len=48, use_triton=True, fused_norms=False
    ).generate(prompts, params)
    # q and k, every layer, prefill and decode
    assert len(calls) >= 2 * m.config.num_hidden_layers * 2
    tolerance = 1e-4 if dtype == torch.float32 else 0.1
    for a, b in zip(expected, got):
        assert a[0].token_ids == b[0].token_ids
        assert max(abs(p - q) for p, q in zip(a[0].logprobs, b[0].logprobs)) <= tolerance
    if dtype == torch.float32:
        assert got[0][0].token_ids == reference_greedy(m, prompts[0], 10)
    cpu_engine = LLMEngine(m, max_num_seqs=8, max_model_len=48)
    assert cpu_engine.cache.kernels is None  # a CPU engine: eager by default
