"""The bf16 paths a GPU run takes, run on the CPU: the engine's bf16 copy of the weights (loaded,
sampled from, synced from the fp32 policy), FSDP2 with MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32), and the KV pool sized from a given amount of free memory. A GPU run then meets
none of them for the first time.

Tolerances come from bf16's 8 significant bits: rounding to bf16 moves a value by at most u = 2^-8
of itself.
"""

import copy
import os
import sys

import pytest
import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gppo  # noqa: E402
import sft  # noqa: E402
from parts import trainer  # noqa: E402
from model import Qwen3, Qwen3Config  # noqa: E402
from model import from_pretrained, save_pretrained  # noqa: E402
from parts.kv_cache import kv_block_bytes, kv_cache_blocks  # noqa: E402
from rollout import LLMEngine, SamplingParams  # noqa: E402

U_BF16 = 2.0**-8  # unit roundoff of bf16 (8 significant bits, round to nearest even)


def tiny_config(tied=True):
    return Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=tied,
        torch_dtype="float32",
        max_position_embeddings=128,
    )


def policy_model(seed=0, tied=True):
    """fp32 master weights with std 0.2, so logits spread over several units (a test of logprobs on
    near-uniform logits could not tell a right model from a wrong one)."""
    return Qwen3(tiny_config(tied)).init_weights(std=0.2, seed=seed)


def no_cache_greedy(model, prompt, steps):
    """Independent reference: full forward over the whole sequence at every step, in the model's
    dtype."""
    ids = list(prompt)
    logits_per_step = []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids]))[0, -1].float()
            logits_per_step.append(logits)
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :], logits_per_step


def logit_error_bound(model, token_ids, roundings_per_layer, final_roundings):
    """How far two evaluations of the same logits may differ when they round differently to bf16.

    A rounding to bf16 perturbs a value by at most u of itself. If one path rounds k times per layer
    where the other does not (or rounds differently), the residual stream carries a relative
    perturbation of at most k*u per layer, k*u*L over L layers (first order; the RMSNorm before the
    head is scale-invariant), plus final_roundings*u at the
    head. With h the final hidden state and w_v a row of the head, |dz_v| <= rel_err(h) * sum_d |h_d w_vd|, so
        max |dz| <= (k L + final_roundings) u max_(t,v) sum_d |h_td| |w_vd|,
    the scale taken from an fp32 evaluation of the model. A logprob then moves by at most 2 max|dz|
    (|d log p_v| <= |dz_v| + |d logsumexp z|)."""
    ref = copy.deepcopy(model).float()
    with torch.no_grad():
        h = ref(torch.tensor([token_ids]), return_hidden=True)[0]  # (T, D)
        # max_t,v sum_d |h_td w_vd|
        scale = (h.abs() @ ref.lm_head.weight.abs().T).max()
    return float(
        (roundings_per_layer * model.config.num_hidden_layers + final_roundings) * U_BF16 * scale
    )


# Engine (bf16) vs a full forward of the same bf16 model: only attention differs (paged decode vs
# one SDPA); each rounds its scores, probabilities and output once: 3 per layer; both round the
# logits once: 2 at the end.
ENGINE_VS_FORWARD = dict(roundings_per_layer=3, final_roundings=2)
# bf16 compute vs fp32 compute of the same fp32 weights: per layer, along the residual path, the
# input norm (1), q/k/v (weight, input and output rounded: 3), attention (3), o_proj (3), the second
# norm (1), gate/up (3), silu (1), the product (1), down_proj (3): 19; the final norm (1) and the
# head (3): 4.
BF16_VS_FP32 = dict(roundings_per_layer=19, final_roundings=4)


# ------------------------------------------------------------------------- KV pool from free memory


def test_kv_pool_sized_from_given_free_memory():
    cfg = tiny_config()
    # one block: K and V, 2 layers, 16 tokens, 1 KV head of 16 -> 2*2*16*1*16 = 1024 values
    assert (
        kv_block_bytes(cfg, torch.float32, 16) == 4096
        and kv_block_bytes(cfg, torch.bfloat16, 16) == 2048
    )
    # bytes "free on the device", as gppo.py reads them on a GPU
    free = 1_000_000
    fraction = 0.3  # gppo.py's kv_cache_fraction
    memory = int(fraction * free)  # 300,000 bytes
    # 300000 // 4096
    assert kv_cache_blocks(cfg, torch.float32, memory, 16, max_num_seqs=64, max_model_len=128) == 73
    # // 2048
    assert (
        kv_cache_blocks(cfg, torch.bfloat16, memory, 16, max_num_seqs=64, max_model_len=128) == 146
    )
    # 4 seqs x 8 blocks
    assert kv_cache_blocks(cfg, torch.bfloat16, memory, 16, max_num_seqs=4, max_model_len=128) == 32

    engine_model = policy_model().to(torch.bfloat16)
    engine = LLMEngine(engine_model, max_num_seqs=64, max_model_len=128, kv_cache_memory=memory)
    assert engine.cache.k_pool.dtype == torch.bfloat16
    assert engine.blocks.num_blocks == 146 and engine.cache.nbytes == 146 * 2048 <= memory
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=1.0, max_tokens=20, n=4, seed=0))
    assert [len(s.token_ids) for s in out[0]] == [20] * 4
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        # 7 < 8 blocks
        LLMEngine(engine_model, max_num_seqs=64, max_model_len=128, kv_cache_memory=7 * 2048)


def test_pool_is_sized_from_free_memory_after_emptying_the_cache(monkeypatch):
    """On a GPU, gppo.py sizes the pool from torch.cuda.mem_get_info, a (free, total) tuple, after
    the caching allocator has returned what it holds (a model loaded and dropped stays in its cache,
    unseen by mem_get_info). The GPU check's workload sizes its pool through the same function (it
    once took the tuple as a number)."""
    from parts import kv_cache

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(
        torch.cuda,
        "mem_get_info",
        lambda device=None: calls.append("mem_get_info") or (10_000, 80_000),
    )
    cuda = torch.device("cuda", 0)  # only a name here: nothing is allocated on it
    assert kv_cache.free_memory(cuda) == 10_000 and calls == ["empty_cache", "mem_get_info"]
    assert (
        kv_cache.kv_cache_bytes(0.3, cuda) == 3_000
        and kv_cache.kv_cache_bytes(0.3, torch.device("cpu")) is None
    )
    assert kv_cache.kv_cache_bytes(0.3, torch.device("cpu"), free=2**28) == int(0.3 * 2**28)
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import gpu_workloads

    sized = []
    real = kv_cache.kv_cache_bytes
    monkeypatch.setattr(kv_cache, "kv_cache_bytes", lambda *args: sized.append(args) or real(*args))
    gpu_workloads.process_group(dry=True)
    _, run, free = gpu_workloads.gppo_step_setup(
        True, torch.device("cpu"), gpu_workloads.model_config(True)
    )
    assert sized == [(0.3, torch.device("cpu"), free)] and run.engine.cache.nbytes <= int(
        0.3 * free
    )


def test_cpu_default_pool_holds_at_least_one_full_sequence(monkeypatch):
    """The CPU default is 512 MiB, unless one max_model_len sequence needs more (a real model at
    eval.py's 4K prompt limit does: the rehearsal found eval.py refusing to start). The pool itself
    is not allocated here."""
    import rollout

    monkeypatch.setattr(rollout, "PagedKVCache", lambda *args, **kwargs: None)
    cfg = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
        torch_dtype="float32",
    )
    # a block: 2 * 4 layers * 16 tokens * 8 * 128 * 4 B = 512 KiB
    model = Qwen3(cfg)
    assert kv_block_bytes(cfg, torch.float32, 16) == 2**19
    # 512 MiB: 4 x 256
    assert LLMEngine(model, max_num_seqs=4, max_model_len=4096).blocks.num_blocks == 1024
    # one sequence: 1250
    assert LLMEngine(model, max_num_seqs=4, max_model_len=20000).blocks.num_blocks == 1250


# --------------------------------------------------------------------------- the engine's bf16 copy


def test_engine_bf16_copy_loads_samples_and_syncs(tmp_path):
    policy = policy_model(seed=1)
    # fp32 on disk, as sft.py exports
    save_pretrained(policy, str(tmp_path))
    # gppo.py's engine copy on a GPU
    engine_model = from_pretrained(str(tmp_path), dtype=torch.bfloat16)
    for (name, p), (_, q) in zip(policy.named_parameters(), engine_model.named_parameters()):
        # round to nearest
        assert q.dtype == torch.bfloat16 and torch.equal(q, p.detach().to(torch.bfloat16)), name
    engine = LLMEngine(engine_model, max_num_seqs=8, max_model_len=64, kv_cache_memory=2**20)
    assert engine.cache.k_pool.dtype == torch.bfloat16

    def check_greedy_and_logprobs():
        prompts = [[5, 9, 2, 33, 7], [11, 3]]
        outs = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12))
        compared = 0
        for prompt, out in zip(prompts, outs):
            tokens, ref_logits = no_cache_greedy(engine_model, prompt, 12)
            tol = logit_error_bound(engine_model, prompt + tokens, **ENGINE_VS_FORWARD)
            for t, (ours, theirs, logits) in enumerate(zip(out[0].token_ids, tokens, ref_logits)):
                top2 = logits.topk(2).values
                # allowed only at a near-tie, which the error bound may flip; then stop comparing
                if ours != theirs:
                    assert top2[0] - top2[1] <= 2 * tol, (prompt, t, float(top2[0] - top2[1]), tol)
                    break
                # |d log p| <= |dz_token| + |d logsumexp| <= 2 max|dz|
                assert (
                    abs(out[0].logprobs[t] - float(torch.log_softmax(logits, -1)[theirs]))
                    <= 2 * tol
                )
                compared += 1
        assert compared >= 12, f"only {compared} steps compared"

    check_greedy_and_logprobs()
    # its own stream: the same weights whatever ran before
    step = torch.Generator().manual_seed(2)
    # a training step moves the fp32 policy ...
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=step) * 0.05)
    # ... the bf16 engine copy follows, in place
    trainer.copy_weights(policy, engine_model)
    for (name, p), (_, q) in zip(policy.named_parameters(), engine_model.named_parameters()):
        assert q.dtype == torch.bfloat16 and torch.equal(q, p.detach().to(torch.bfloat16)), name
    # the next generate() samples from the new weights
    check_greedy_and_logprobs()


# --------------------------------------------------------------------- FSDP2 mixed precision on CPU


@pytest.mark.parametrize("tied", [True, False])
def test_fsdp2_bf16_mixed_precision_runs_on_cpu(tied):
    """shard_model(param_dtype=bf16): the forward and backward compute in bf16 (the same numbers as
    a bf16 copy of the model), gradients arrive in fp32 on the fp32 master shards, and AdamW updates
    the fp32 master."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    master = policy_model(seed=2, tied=tied)
    reference_bf16 = copy.deepcopy(master).to(torch.bfloat16)
    reference_fp32 = copy.deepcopy(master)
    sharded = trainer.shard_model(
        copy.deepcopy(master), torch.device("cpu"), param_dtype=torch.bfloat16
    )
    compute_dtypes = []
    sharded.layers[0].mlp.down_proj.register_forward_hook(
        lambda module, args, out: compute_dtypes.append((module.weight.dtype, out.dtype))
    )

    T = 24
    ids = torch.randint(0, 64, (1, T), generator=torch.Generator().manual_seed(0))
    batch = dict(
        input_ids=ids,
        position_ids=torch.cat([torch.arange(10), torch.arange(14)])[None],
        document_ids=torch.cat([torch.zeros(10), torch.ones(14)]).long()[None],
        loss_mask=torch.rand(1, T, generator=torch.Generator().manual_seed(1)) < 0.7,
    )
    losses = {
        name: sft.sft_loss_sum(m, batch, chunk=8)
        for name, m in (("sharded", sharded), ("bf16", reference_bf16), ("fp32", reference_fp32))
    }
    assert compute_dtypes == [(torch.bfloat16, torch.bfloat16)]
    for loss in losses.values():
        loss.backward()
    # the same bf16 arithmetic as a bf16 copy of the model: equal, not merely close (on one rank the
    # fp32 reduce-scatter of a bf16 gradient is its exact upcast)
    assert torch.equal(losses["sharded"].float(), losses["bf16"].float())
    n_tokens = int(
        (
            batch["loss_mask"][:, 1:]
            & (batch["document_ids"][:, 1:] == batch["document_ids"][:, :-1])
        ).sum()
    )
    # against fp32: each token's NLL moves by <= 2 max|dz|, so the mean over tokens too
    fp32_gap = abs(float(losses["sharded"].detach()) - float(losses["fp32"].detach())) / n_tokens
    bound = 2 * logit_error_bound(master, ids[0].tolist(), **BF16_VS_FP32)
    assert 0 < fp32_gap <= bound, (fp32_gap, bound)  # > 0: bf16 really was used

    for (name, p), (_, r) in zip(sharded.named_parameters(), reference_bf16.named_parameters()):
        # fp32 master and gradient
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
        assert torch.equal(p.grad.full_tensor(), r.grad.float()), name

    optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-2, weight_decay=0.1)
    optimizer.step()
    # the fp32 update a single process makes from those gradients
    expected = copy.deepcopy(master)
    for p, r in zip(expected.parameters(), reference_bf16.parameters()):
        p.grad = r.grad.float()
    torch.optim.AdamW(expected.parameters(), lr=1e-2, weight_decay=0.1).step()
    for (name, p), (_, e) in zip(sharded.named_parameters(), expected.named_parameters()):
        full = p.full_tensor()
        assert full.dtype == torch.float32 and not torch.equal(full, master.get_parameter(name)), (
            name
        )
        # fp32 AdamW, one step: a few ulps
        torch.testing.assert_close(full, e.detach(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------- fp32 logits from bf16 operands

U_FP32 = 2.0**-24  # unit roundoff of fp32


def bf16_head(seed, n=48, V=700, D=256):
    """bf16 hidden states (n, D) and head (V, D) whose logits spread over +-10 or so, like a trained
    model's, and their exact logits: fp64 products of the same bf16 values (exact, 16 significant
    bits each) summed in fp64."""
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(n, D, generator=g) * 1.0).bfloat16()
    w = (torch.randn(V, D, generator=g) * 0.25).bfloat16()
    exact = h.double() @ w.double().T
    # fp32 summation of D terms
    bound = D * U_FP32 / (1 - D * U_FP32) * (h.double().abs() @ w.double().abs().T)
    return h, w, exact, bound


def test_logits_fp32_are_fp32_accumulations_of_bf16_operands():
    from model import logits_fp32

    h, w, exact, bound = bf16_head(seed=0)
    z = logits_fp32(h, w)
    assert z.dtype == torch.float32 and z.shape == exact.shape
    err = (z.double() - exact).abs()
    # + the final rounding to fp32
    assert (err <= bound + exact.abs() * U_FP32).all(), float((err - bound).max())
    # what the code did before (a bf16 output): each logit rounded to 8 bits, an error the bound
    # above excludes
    old = (h @ w.T).float().double()
    assert ((old - exact).abs() > bound + exact.abs() * U_FP32).float().mean() > 0.5
    assert (old - exact).abs().max() > 100 * err.max()


def test_loss_from_bf16_hidden_takes_logprobs_from_fp32_logits():
    """rl_loss_from_hidden with bf16 hidden and head (a GPU run's compute dtype): the logπ it
    reports and trains on are log_softmax of the fp32 logits, within fp32 rounding of the exact
    value, not of bf16 logits."""
    import gppo_loss

    h, w, exact, bound = bf16_head(seed=1)
    n, V = exact.shape
    targets = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(2))
    exact_logp = torch.log_softmax(exact, -1).gather(1, targets[:, None])[:, 0]
    mask = torch.ones(n, dtype=torch.bool)
    A = torch.linspace(-1, 1, n)
    _, metrics = gppo_loss.rl_loss_from_hidden(
        h, w, targets, exact_logp.float(), A, mask, chunk_size=16, backend="torch"
    )
    # |d logπ| <= |dz_target| + |d lse| <= 2 max|dz| per row, plus the fp32 roundings of the log-sum-exp (a few ulp
    # of its magnitude)
    z_bound = (bound + exact.abs() * U_FP32).max(-1).values
    lse = torch.logsumexp(exact, -1)
    tol = 2 * z_bound + 8 * U_FP32 * (lse.abs() + exact.abs().max(-1).values)
    err = (metrics["logprobs"].double() - exact_logp).abs()
    assert (err <= tol).all(), float((err - tol).max())
    bf16_logp = torch.log_softmax((h @ w.T).float().double(), -1).gather(1, targets[:, None])[:, 0]
    # the old path would fail the bound above
    assert (bf16_logp - exact_logp).abs().max() > 10 * tol.max()


def test_engine_and_trainer_logprobs_of_a_bf16_model_agree():
    """The engine's sampled-token logπ and the trainer's recomputation (gppo.row_logprobs) from one
    bf16 model: both take fp32 logits, so they differ only by the attention path (paged decode vs
    one SDPA call)."""
    model = policy_model(seed=3).to(torch.bfloat16)
    engine = LLMEngine(model, max_num_seqs=4, max_model_len=64, kv_cache_memory=2**20)
    prompt = [5, 9, 2, 33, 7]
    out = engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=20, seed=0))[0][0]
    ids = prompt + list(out.token_ids)
    tensors = dict(
        input_ids=torch.tensor([ids]),
        position_ids=torch.arange(len(ids))[None],
        document_ids=torch.zeros(1, len(ids), dtype=torch.long),
        prefix_docs=None,
        logit_positions=torch.arange(len(prompt) - 1, len(ids) - 1),
        targets=torch.tensor(out.token_ids),
    )
    trainer_logp = torch.tensor(gppo.row_logprobs(model, tensors, temperature=1.0))
    # attention only (see above)
    tol = logit_error_bound(model, ids, roundings_per_layer=3, final_roundings=0)
    gap = (trainer_logp - torch.tensor(out.logprobs)).abs().max()
    assert gap <= 2 * tol, (float(gap), tol)
