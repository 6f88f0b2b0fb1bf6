"""The workloads of the GPU checks (tests/test_gpu.py) and timings (benchmarks/gpu_check.py): one
definition of what is checked and what is timed, at full size on a GPU (`dry=False`) or tiny on the
CPU (`dry=True`).

  loss     N = 32,768 tokens x V = 151,936 (Qwen3's vocabulary), ratios spread over every clipping case
  decode   64 sequences of 1K-16K tokens (and 8 of 32K) on scattered blocks of a bf16 pool, GQA 32:8, head_dim 128
  engine   Qwen3-0.6B's exact shape with random bf16 weights; 64 prompts x 8 samples x 512 new tokens, with and without
           CUDA graphs; one 32K-token prompt x 4 samples
  fsdp     one SFT step on a packed row of 8,192 tokens; one GPPO step (sample, old logprobs, update, weight sync)
  load     gppo.py's load path from a checkpoint on disk (shards, engine copy, KV pool) against the memory plan
"""

import time
from dataclasses import dataclass

import torch


# ----------------------------------------------------------------------------- the workloads


def model_config(dry: bool):
    """Qwen3-0.6B's exact shape, or a tiny one for the dry run."""
    from model import Qwen3Config
    from parts.memory_plan import QWEN3

    if not dry:
        return Qwen3Config(**QWEN3["0.6B"])
    return Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
        max_position_embeddings=512,
    )


def random_qwen3(config, dtype, device, seed=0):
    """model.py's Qwen3 with N(0, 0.02) weights made directly on `device` in `dtype` (no CPU copy,
    no fp32 detour)."""
    from model import Qwen3

    with torch.device("meta"):
        model = Qwen3(config).to(dtype)
    model.to_empty(device=device)
    model.tie_weights()
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)
    return model


@dataclass
class LossWorkload:
    """Per-token inputs of the loss, (N,) each; the logits are made per dtype (random_logits)."""

    # fmt: off
    N: int
    V: int
    D: int
    block: int                 # rows per block wherever an (N, V) fp32 temporary must be avoided
    targets: torch.Tensor
    old: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    sft_mask: torch.Tensor
    # fmt: on

    def kwargs(self) -> dict:  # rl_loss_from_*'s inputs after the logits (or hidden + weight)
        return dict(
            target_ids=self.targets,
            old_logprobs=self.old,
            advantages=self.advantages,
            response_mask=self.mask,
            sft_mask=self.sft_mask,
            num_tokens=float(self.mask.sum()),
            num_sft_tokens=float(max(1, int(self.sft_mask.sum()))),
        )


def loss_workload(dry: bool, device, gen) -> LossWorkload:
    N, V, D, block = (48, 300, 32, 16) if dry else (32768, 151936, 1024, 4096)
    targets = torch.randint(0, V, (N,), generator=gen, device=device)
    # ratios spread over every clipping case
    old = -torch.rand(N, generator=gen, device=device) * 10
    advantages = torch.randn(N, generator=gen, device=device)
    mask = torch.rand(N, generator=gen, device=device) > 0.1
    return LossWorkload(N, V, D, block, targets, old, advantages, mask, mask & (advantages > 1))


def random_logits(work: LossWorkload, dtype, gen):
    """(N, V) logits of scale 3 in `dtype`, filled a block of rows at a time: no (N, V) fp32
    temporary."""
    logits = torch.empty(work.N, work.V, dtype=dtype, device=work.targets.device)
    for r in range(0, work.N, work.block):
        rows = min(work.block, work.N - r)
        logits[r : r + rows] = (
            torch.randn(rows, work.V, generator=gen, device=logits.device) * 3
        ).to(dtype)
    return logits


def reference_loss(logits, work: LossWorkload):
    """The readable reference (policy_loss + 0.1 * sft_loss, autograd through log_softmax of fp32
    logits), evaluated work.block rows at a time with the global token counts: the same value and
    gradient as one call on all N rows, without an (N, V) fp32 autograd graph (at N = 32,768 that
    alone is four 20 GB tensors). Returns (value, gradient (N, V) fp32)."""
    import gppo_loss

    k = work.kwargs()
    grad = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    value = 0.0
    for r in range(0, work.N, work.block):
        rows = slice(r, r + work.block)
        z = logits[rows].detach().float().requires_grad_()
        logprobs = torch.log_softmax(z, dim=-1).gather(1, work.targets[rows, None])[:, 0]
        loss = gppo_loss.policy_loss(
            logprobs,
            work.old[rows],
            work.advantages[rows],
            work.mask[rows],
            num_tokens=k["num_tokens"],
        )[0] + 0.1 * gppo_loss.sft_loss(
            logprobs, work.sft_mask[rows], num_tokens=k["num_sft_tokens"]
        )
        loss.backward()
        grad[rows], value = z.grad, value + loss.item()
    return value, grad


def fused_loss(logits, work: LossWorkload, backend: str):
    """rl_loss_from_logits forward + backward on a fresh non-leaf copy of the logits (as lm_head's
    output is, so the backward may overwrite it with the gradient). Returns (loss, gradient (N, V)
    in the logits' dtype)."""
    import gppo_loss

    leaf = logits.clone().requires_grad_()
    loss, _ = gppo_loss.rl_loss_from_logits(
        leaf.view(work.N, work.V), **work.kwargs(), backend=backend
    )
    loss.backward()
    return loss, leaf.grad


@dataclass
class DecodeWorkload:
    # fmt: off
    q: torch.Tensor             # (B, Hq, hd) bf16
    k_pool: torch.Tensor        # (Hkv, num_blocks, bs, hd) bf16
    v_pool: torch.Tensor
    block_tables: torch.Tensor  # (B, max_blocks) int32: scattered blocks, as after many requests
    context_lens: torch.Tensor  # (B,) int32
    describe: str
    # fmt: on


def decode_workload(dry: bool, device, long: bool = False) -> DecodeWorkload:
    """64 sequences of 1K-16K tokens; long: 8 of 32,768 (a 32K rollout's last steps)."""
    B, Hq, Hkv, hd, bs = (4, 4, 2, 16, 16) if dry else (8 if long else 64, 32, 8, 128, 16)
    gen = torch.Generator().manual_seed(0)
    gen_device = torch.Generator(device=device).manual_seed(0)
    lo, hi = ((70, 70) if long else (5, 70)) if dry else ((32768, 32768) if long else (1024, 16384))
    contexts = torch.linspace(lo, hi, B).round().long()[torch.randperm(B, generator=gen)]
    blocks_per_seq = [-(-int(c) // bs) for c in contexts]
    num_blocks = sum(blocks_per_seq) + 8
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = []
    start = 0
    for n in blocks_per_seq:
        tables.append(order[start : start + n] + [0] * (max(blocks_per_seq) - n))
        start += n
    k_pool, v_pool = (
        torch.randn(Hkv, num_blocks, bs, hd, generator=gen_device, device=device).to(torch.bfloat16)
        # 1.1 GB each at full size, made on the GPU
        for _ in range(2)
    )
    q = torch.randn(B, Hq, hd, generator=gen_device, device=device).to(torch.bfloat16)
    return DecodeWorkload(
        q,
        k_pool,
        v_pool,
        torch.tensor(tables, dtype=torch.int32, device=device),
        contexts.to(torch.int32).to(device),
        f"{B} seqs {lo}-{hi} tokens, GQA {Hq}:{Hkv}, hd {hd}",
    )


# the kernel's cases: (name, sequences, splits); splits = parts of each context run by separate
# programs (flash-decoding), None = decode_splits(); a few long contexts alone test the split
DECODE_CASES = {
    True: [("", 4, None), (" splits=2", 4, 2)],
    False: [("", 64, None), (" splits=1", 64, 1), (" 4 seqs", 4, None), (" 4 seqs splits=1", 4, 1)],
}


def engine_workload(config, dry: bool) -> tuple:
    """(prompts, samples per prompt, new tokens per sample, longest prompt)."""
    P, n, T, (lo, hi) = (2, 2, 4, (3, 12)) if dry else (64, 8, 512, (64, 256))
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(
            0,
            config.vocab_size,
            (int(torch.randint(lo, hi + 1, (), generator=gen)),),
            generator=gen,
        ).tolist()
        for _ in range(P)
    ]
    return prompts, n, T, hi


def process_group(dry: bool):
    """A world of one (nccl on the GPU, gloo for the dry run), as trainer.init_distributed makes
    it."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "gloo" if dry else "nccl"
    try:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    # a broad except: any failure falls back to a TCP store
    except Exception:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
        )


def sft_step_setup(dry: bool, device, config):
    """sft.py's step on one packed row of T tokens (several documents), activation checkpointing,
    FSDP2 with bf16 compute, foreach AdamW. Returns (step() -> loss, the policy, T)."""
    import sft
    from parts import trainer

    T = 64 if dry else 8192
    policy = random_qwen3(config, torch.float32, device)
    policy.activation_checkpointing = True
    trainer.shard_model(policy, device, param_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, weight_decay=0.1, foreach=True)
    gen = torch.Generator().manual_seed(0)
    lengths = [T // 4, T // 2, T // 4]
    row = dict(
        input_ids=torch.randint(0, config.vocab_size, (T,), generator=gen),
        position_ids=torch.cat([torch.arange(n) for n in lengths]),
        document_ids=torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)]),
        loss_mask=torch.rand(T, generator=gen) < 0.8,
    )
    row = {k: v[None].to(device) for k, v in row.items()}

    def step():
        loss = sft.sft_loss_sum(policy, row, 4096)
        (loss / max(1, int(row["loss_mask"].sum()))).backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step, policy, T


def gppo_step_setup(dry: bool, device, config):
    """One GPPO step with gppo.py's building blocks: the engine (its bf16 copy, its KV pool
    kv_cache_fraction of the free memory, as gppo.py sizes a kept engine's; pool_from_free_memory
    checks the freed engine's) samples, recompute_old_logprobs, train_mini_batch
    (rl_loss_from_hidden, Triton on CUDA), trainer.copy_weights. Returns (step() -> (sequences,
    metrics, seconds per part), gppo.Run, free bytes)."""
    import gppo
    from parts import kv_cache, rl_rows, trainer
    from rollout import LLMEngine, SamplingParams

    policy = random_qwen3(config, torch.float32, device, seed=1)
    policy.activation_checkpointing = True
    # gppo.py's engine copy on a GPU: bf16
    engine_model = random_qwen3(config, torch.bfloat16, device, seed=2)
    trainer.shard_model(policy, device, param_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.1)
    gcfg = gppo.GPPOConfig(
        group_size=4,
        train_row_tokens=64 if dry else 8192,
        max_prompt_len=16 if dry else 256,
        max_response_len=4 if dry else 128,
        kv_cache_fraction=0.3,
    )
    # CPU: a given 256 MiB "free"
    free = kv_cache.free_memory(device) if device.type == "cuda" else 2**28
    engine = LLMEngine(
        engine_model,
        max_num_seqs=256,
        max_model_len=gcfg.max_prompt_len + gcfg.max_response_len,
        # engine kept
        kv_cache_memory=kv_cache.kv_cache_bytes(gcfg.kv_cache_fraction, device, free),
    )
    run = gppo.Run(
        gcfg,
        policy,
        optimizer,
        engine,
        engine_model,
        tokenizer=None,
        tasks=[],
        score_fn=None,
        pool=None,
        # what train_mini_batch and recompute_old_logprobs use
        rank=0,
        world=1,
        device=device,
    )
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, config.vocab_size, (gcfg.max_prompt_len // 2,), generator=gen).tolist()
        for _ in range(2 if dry else 8)
    ]

    def step():
        t0 = time.perf_counter()
        outs = engine.generate(
            prompts,
            SamplingParams(
                temperature=1.0, max_tokens=gcfg.max_response_len, n=gcfg.group_size, seed=0
            ),
        )
        seqs = [
            rl_rows.TrainSeq(
                p + s.token_ids,
                len(p),
                group=i,
                advantage=float(j % 2) - 0.5,
                correct=j == 0,
                engine_logprobs=s.logprobs,
                old_logprobs=s.logprobs,
            )
            for i, (p, o) in enumerate(zip(prompts, outs))
            for j, s in enumerate(o)
        ]
        t1 = sync(device)
        gppo.recompute_old_logprobs(run, seqs)
        t2 = sync(device)
        metrics = gppo.train_mini_batch(run, seqs)
        t3 = sync(device)
        trainer.copy_weights(policy, engine_model)
        times = dict(
            generate_s=t1 - t0, old_logprobs_s=t2 - t1, train_s=t3 - t2, sync_s=sync(device) - t3
        )
        return seqs, metrics, times

    return step, run, free


def load_path(dry: bool, device, config, directory: str, fraction: float = 0.3) -> dict:
    """gppo.py's start on this device, from a bf16 checkpoint on disk: the policy read into fp32
    FSDP2 shards (trainer.load_sharded, as gppo.py), the engine's bf16 copy (from_pretrained), then
    the KV pool from the memory left (kv_cache.kv_cache_bytes after emptying the allocator's cache);
    measured, and planned by parts/memory_plan.py."""
    import functools

    from model import from_pretrained, hf_name, on_meta, save_pretrained
    from parts import hf_checkpoint, kv_cache, trainer
    from parts.memory_plan import load_phases, peak_phase

    save_pretrained(random_qwen3(config, torch.bfloat16, device), directory)
    cuda = device.type == "cuda"
    free_before = kv_cache.free_memory(device) if cuda else 2**30  # CPU: a given 1 GiB "free"
    base = torch.cuda.memory_allocated(device) if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    policy = on_meta(directory, torch.float32)
    weights = functools.partial(hf_checkpoint.read_weights, directory, policy, hf_name)
    policy = trainer.load_sharded(policy, weights, device)
    engine_model = from_pretrained(directory, dtype=torch.bfloat16, device=device)
    loaded = sum(
        p.numel() * p.element_size() for m in (policy, engine_model) for p in m.parameters()
    )
    peak = torch.cuda.max_memory_allocated(device) - base if cuda else None
    free = kv_cache.free_memory(device) if cuda else free_before - loaded
    pool = kv_cache.kv_cache_bytes(fraction, device, None if cuda else free)
    phases = load_phases(config, world=1)
    plan_free = free_before - sum(phases["engine copy"].values())
    del policy, engine_model
    return dict(
        load_peak_GB=None if peak is None else peak / 1e9,
        plan_load_GB=peak_phase(phases)[1] / 1e9,
        free_GB=free / 1e9,
        plan_free_GB=plan_free / 1e9,
        pool_GB=pool / 1e9,
        plan_pool_GB=fraction * plan_free / 1e9,
        pool_over_plan=pool / (fraction * plan_free),
    )


def logprob_gap(run, config, bf16_logits: bool) -> dict:
    """The engine-vs-trainer logπ gap on the sampled tokens, the engine's bf16 copy synced from the
    policy (FSDP2, bf16 compute): with fp32 logits (the code) or, for comparison, the LM head's bf16
    output cast after (before)."""
    import gppo
    import rollout
    from parts import rl_rows, trainer
    from rollout import SamplingParams

    saved = rollout.logits_fp32, gppo.logits_fp32
    if bf16_logits:
        rollout.logits_fp32 = gppo.logits_fp32 = lambda hidden, weight: (hidden @ weight.T).float()
    try:
        trainer.copy_weights(run.policy, run.engine_model)
        gen = torch.Generator().manual_seed(5)
        prompts = [
            torch.randint(
                0, config.vocab_size, (run.cfg.max_prompt_len // 2,), generator=gen
            ).tolist()
            for _ in range(4)
        ]
        outs = run.engine.generate(
            prompts,
            SamplingParams(
                temperature=1.0, max_tokens=run.cfg.max_response_len, n=run.cfg.group_size, seed=3
            ),
        )
        seqs = [
            rl_rows.TrainSeq(
                p + s.token_ids,
                len(p),
                group=i,
                advantage=0.0,
                correct=False,
                engine_logprobs=s.logprobs,
                old_logprobs=s.logprobs,
            )
            for i, (p, o) in enumerate(zip(prompts, outs))
            for s in o
        ]
        gap = gppo.recompute_old_logprobs(run, seqs)
    finally:
        rollout.logits_fp32, gppo.logits_fp32 = saved
    return dict(
        gap_mean=gap["gap_sum"] / max(1, gap["gap_tokens"]),
        gap_max=gap["gap_max"],
        tokens=gap["gap_tokens"],
    )


# ------------------------------------------------------------------------- comparing like with like

# unit roundoff: round to nearest, 8 or 24 bits
U = {torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}
# Two evaluations of the same model that round differently: the engine against model.py's full
# forward differs in attention only (paged decode against one SDPA: scores, probabilities, output, 3
# roundings a layer), and both round the logits' inputs once more at the head (2); against
# transformers, also both RMSNorms and the q/k norms (normalised value, times weight: 2 each, 8),
# RoPE on q and k (2) and SiLU times up (1): 14 a layer.
ENGINE_VS_FORWARD = dict(roundings_per_layer=3, final_roundings=2)
ENGINE_VS_TRANSFORMERS = dict(roundings_per_layer=14, final_roundings=2)


@torch.no_grad()
def logit_error_bound(model, ids, roundings_per_layer: int, final_roundings: int) -> float:
    """How far two evaluations of the same logits may move apart when they round differently
    (tests/test_bf16.py's argument): k roundings of relative error u a layer perturb the residual
    stream by at most k u L over L layers, plus final_roundings u at the head; with h the final
    hidden state and w_v a row of the head,
    |dz_v| <= (k L + final) u max_(t,v) sum_d |h_td| |w_vd|, the scale taken from an fp32 copy of the model. A
    logprob then moves by at most 2 max|dz|. ids: the sequence (prompt + tokens) the logits are read on."""
    import copy

    reference = copy.deepcopy(model).float()
    hidden = reference(
        torch.tensor([ids], device=next(model.parameters()).device), return_hidden=True
    )[0]
    scale = float((hidden.abs() @ reference.lm_head.weight.abs().T).max())
    del reference
    u = U[next(model.parameters()).dtype]
    return (roundings_per_layer * model.config.num_hidden_layers + final_roundings) * u * scale


@torch.no_grad()
def teacher_forced_logits(model, prompt: list, tokens: list):
    """The fp32 logits (model.logits_fp32, as the engine takes them) that predict each of `tokens`
    after `prompt`, from one full forward of model.py over prompt + tokens: (len(tokens), V)."""
    from model import logits_fp32

    ids = torch.tensor([prompt + tokens], device=next(model.parameters()).device)
    hidden = model(ids, return_hidden=True)[0, len(prompt) - 1 : -1]
    return logits_fp32(hidden, model.lm_head.weight)


@torch.no_grad()
def transformers_teacher_forced_logits(hf, prompt: list, tokens: list):
    """The same from transformers: its final normed hidden states through our fp32-logits rule."""
    from model import logits_fp32

    ids = torch.tensor([prompt + tokens], device=hf.device)
    hidden = hf.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1 : -1]
    return logits_fp32(hidden, hf.lm_head.weight)


def greedy_against(logits, tokens: list, logprobs: list) -> dict:
    """Greedy tokens and their logprobs against the reference's logits for them (len(tokens), V):
    how far each token
    falls short of the reference's largest logit (0 where it is the argmax), the |logprob gap|, and the reference's
    margin between its two largest logits (what a wrong token would have to fall short by)."""
    logits = logits.float()
    chosen = logits.gather(1, torch.tensor(tokens, device=logits.device)[:, None])[:, 0]
    top2 = logits.topk(2, dim=-1).values
    reference = torch.log_softmax(logits, -1).gather(
        1, torch.tensor(tokens, device=logits.device)[:, None]
    )[:, 0]
    gap = (reference.cpu().double() - torch.tensor(logprobs, dtype=torch.float64)).abs()
    return dict(
        shortfall=(top2[:, 0] - chosen).cpu(),
        gap=gap,
        margin=(top2[:, 0] - top2[:, 1]).cpu(),
        argmax=int((chosen == top2[:, 0]).sum()),
        tokens=len(tokens),
    )


def pool_from_free_memory(dry: bool, device, config) -> dict:
    """gppo.py's pool with the engine freed while training: sized when generate() allocates it, from
    the memory then free less rollout.rollout_margin (on the CPU: a given 100 blocks more), then a
    generate() of the engine workload's prompts into it: does what the margin leaves suffice?
    Returns the numbers."""
    import rollout
    from parts import kv_cache
    from rollout import LLMEngine, SamplingParams

    model = random_qwen3(config, torch.bfloat16, device)
    max_model_len = 64 if dry else 4096 + 32768
    margin = rollout.rollout_margin(config, 2, 256, max_model_len, 16384)  # bf16
    # CPU: 100 blocks' worth "free"
    given = margin + 100 * kv_cache.kv_block_bytes(config, torch.bfloat16, 16) + 7
    engine = LLMEngine(
        model,
        max_num_seqs=256,
        max_model_len=max_model_len,
        kv_cache_memory=None if device.type == "cuda" else (lambda: given - margin),
        use_triton=True if dry else None,
    )
    # allocated by generate(), not here
    assert engine.cache.k_pool is None
    free = kv_cache.free_memory(device) if device.type == "cuda" else given
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    prompts, n, _, _ = engine_workload(config, dry)
    outs = engine.generate(
        prompts, SamplingParams(temperature=1.0, max_tokens=4 if dry else 64, n=n, seed=0)
    )
    total = torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else None
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    result = dict(
        free_GB=free / 1e9,
        margin_GB=margin / 1e9,
        pool_GB=engine.cache.nbytes / 1e9,
        # (+1 scratch block)
        pool_over_free_less_margin=engine.blocks.num_blocks
        * kv_cache.kv_block_bytes(config, torch.bfloat16, 16)
        / (free - margin),
        tokens=sum(len(s.token_ids) for o in outs for s in o),
        peak_GB=None if peak is None else peak / 1e9,
        total_GB=None if total is None else total / 1e9,
    )
    del engine, model
    return result


# ----------------------------------------------------------------------------- measuring


def sync(device) -> float:
    """Wait for the device; returns time.perf_counter() after it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def step_peak_and_time(step, device):
    """Peak bytes allocated during one step (None on the CPU) and its wall seconds."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    step()
    seconds = sync(device) - start
    return (torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None), seconds


# -------------------------------------------------------------- transformers, when it is importable


def transformers_twin(model, config, device, dtype=torch.bfloat16):
    """transformers' Qwen3ForCausalLM with our model's weights, in `dtype`, on the same device."""
    import transformers
    from model import hf_name

    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**config.to_hf_dict()))
    finally:
        torch.set_default_dtype(default)
    missing, unexpected = hf.load_state_dict(
        {hf_name(n): p for n, p in model.named_parameters()}, strict=False
    )
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"transformers twin: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


def left_padded(prompts, device) -> dict:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return dict(input_ids=ids, attention_mask=mask)
