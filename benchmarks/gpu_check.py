"""One prepared GPU check: every CUDA path of the project in one command of at most 8 minutes on one H200.

No GPU has been lent to this project so far. When one is, for minutes, this script answers every open GPU question
in a single run, prints one compact table and writes the same results to JSON:

  1. loss    the fused GPPO loss (gppo_loss.py) on CUDA: Triton vs the readable reference (policy_loss + sft_loss through
             autograd) vs the chunked PyTorch path, N = 32,768 tokens x V = 151,936, bf16 and fp32 logits: max error
             of the value and the gradient against the reference, forward + backward time, peak memory, and the
             ratio to the bandwidth floor (the three passes over the logits, at the measured copy bandwidth); also
             rl_loss_from_hidden, the path training takes, at Qwen3-0.6B's hidden size
  2. decode  the paged-decode kernel (rollout.py) vs its reference on realistic block tables: 64 sequences of
             1K-16K tokens, GQA 32:8, head_dim 128, bf16 pool: error, and time per step against the K/V bytes read,
             with its context splits (flash-decoding) and with one split, also for 4 long sequences alone
  3. engine  Qwen3-0.6B's exact shape, random bf16 weights: 64 prompts x 8 samples x 512 new tokens, tokens/s; the
             same weights and workload through transformers' generate if it is importable; greedy parity
  4. fsdp    one FSDP2 step each of SFT and GPPO on one GPU (nccl, world size 1), MixedPrecisionPolicy(bf16, fp32
             reduce), 0.6B shape: step time and peak memory against the budget on paper (benchmarks/rehearsal.py);
             the GPPO step samples with an engine whose KV pool is sized from the free memory, as gppo.py does
Each section runs in its own process with its own time limit (a hang or a crash costs that section only) and
writes each result as soon as it has it; a failure is recorded in the table and the JSON, and the next section runs.

--dry_run runs the same code on tiny shapes on the CPU, Triton under its interpreter (TRITON_INTERPRET=1, set
before triton is imported) and gloo for nccl; tests/test_gpu_check.py runs it, so this script is not written blind.

Run:  python benchmarks/gpu_check.py                 # one GPU, <= 8 min; writes gpu_check.json
      python benchmarks/gpu_check.py --dry_run       # CPU rehearsal, ~30 s
      python benchmarks/gpu_check.py --sections=loss,decode --out=/tmp/gpu.json
Needs torch and triton; transformers is optional (section 3's comparison is skipped without it).
"""
import os
import sys

DRY_RUN = any(a.lower() in ("--dry_run", "--dry_run=true", "--dry_run=1") for a in sys.argv[1:])
if DRY_RUN:
    os.environ.setdefault("TRITON_INTERPRET", "1")   # must precede the first import of triton (gppo, rollout)

import json  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass, fields  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import torch  # noqa: E402

SECTIONS = ("loss", "decode", "engine", "fsdp")
SECONDS = {"loss": 130, "decode": 40, "engine": 170, "fsdp": 110}   # per section on the GPU; 450 s in all
U_BF16 = 2.0 ** -8                                                  # bf16 rounding: at most u of the value


@dataclass
class CheckConfig:
    out: str = "gpu_check.json"
    dry_run: bool = False
    sections: str = ",".join(SECTIONS)
    time_limit_s: float = 470.0        # the whole script; each section gets min(its share, what is left)
    section: str = ""                  # internal: run this section in this process
    rows_file: str = ""                # internal: where the section appends its results (JSON lines)


def parse_args(argv) -> CheckConfig:
    cfg, types = CheckConfig(), {f.name: f.type for f in fields(CheckConfig)}
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__ + "\nOptions (--key=value):\n" + "\n".join(f"  --{k}={getattr(cfg, k)!r}" for k in types))
            sys.exit(0)
        key, sep, value = arg.removeprefix("--").partition("=")
        if key == "dry_run" and not sep:
            sep, value = "=", "true"
        if not arg.startswith("--") or not sep or key not in types:
            sys.exit(f"gpu_check.py: unknown or malformed option {arg!r}; known: --{' --'.join(types)}")
        kind = {"str": str, "float": float, "bool": bool}.get(types[key], types[key])
        if kind is bool:
            setattr(cfg, key, value.lower() in ("true", "1"))
        else:
            try:
                setattr(cfg, key, kind(value))
            except ValueError:
                sys.exit(f"gpu_check.py: --{key}={value!r}: expected {kind.__name__}")
    bad = [s for s in cfg.sections.split(",") if s not in SECTIONS]
    if bad:
        sys.exit(f"gpu_check.py: --sections: unknown {bad}; known: {','.join(SECTIONS)}")
    return cfg


# ----------------------------------------------------------------------------- measuring

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn, device, repeats: int = 3) -> float:
    """Wall seconds of fn() after one warm-up call (compilation, caches), averaged over repeats. The dry run times one
    call without warm-up: under the Triton interpreter a call takes seconds, and its time means nothing anyway."""
    if DRY_RUN:
        repeats = 1
    else:
        fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeats


def peak_added(fn, device):
    """Bytes fn() adds to the CUDA allocator at its peak (None on the CPU, without calling fn: no statistics there)."""
    if device.type != "cuda":
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated(device) - before


def copy_bandwidth(device, nbytes: int) -> float:
    """Bytes per second a plain copy moves (read + write), the floor every memory-bound kernel is held to."""
    big = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = seconds_per_call(lambda: big.clone(), device, repeats=5)
    del big
    return 2 * nbytes / seconds


def random_qwen3(config, dtype, device, seed=0):
    """model.py's Qwen3 with N(0, 0.02) weights made directly on `device` in `dtype` (no CPU copy, no fp32 detour)."""
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


def model_config(dry: bool):
    from rehearsal import qwen3_0_6b
    if not dry:
        return qwen3_0_6b()
    from model import Qwen3Config
    return Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=512)


# ----------------------------------------------------------------------------- 1. the fused loss

def reference_loss(logits, targets, old, advantages, mask, sft_mask, n_tokens, n_sft, rows_per_block):
    """The readable reference (gppo.policy_loss + alpha * gppo.sft_loss, autograd through log_softmax of fp32 logits),
    evaluated rows_per_block rows at a time with the global token counts: the same value and gradient as one call on
    all N rows, without an (N, V) fp32 autograd graph (at N = 32,768 that alone is four 20 GB tensors).
    Returns (value, gradient (N, V) fp32)."""
    import gppo_loss as gppo
    grad, value = torch.empty(logits.shape, dtype=torch.float32, device=logits.device), 0.0
    for r in range(0, len(logits), rows_per_block):
        rows = slice(r, r + rows_per_block)
        z = logits[rows].detach().float().requires_grad_()
        logprobs = torch.log_softmax(z, dim=-1).gather(1, targets[rows, None])[:, 0]
        loss = gppo.policy_loss(logprobs, old[rows], advantages[rows], mask[rows], num_tokens=n_tokens)[0] \
            + 0.1 * gppo.sft_loss(logprobs, sft_mask[rows], num_tokens=n_sft)
        loss.backward()
        grad[rows], value = z.grad, value + loss.item()
    return value, grad


def max_abs_diff(a, b, rows_per_block: int) -> float:
    """max |a - b| over two (N, V) tensors, a block of rows at a time (no (N, V) fp32 temporaries)."""
    return max(float((a[r:r + rows_per_block].float() - b[r:r + rows_per_block].float()).abs().max())
               for r in range(0, len(a), rows_per_block))


def section_loss(dry: bool, emit):
    import gppo_loss as gppo
    device = torch.device("cpu" if dry else "cuda")
    N, V, D, block = (48, 300, 32, 16) if dry else (32768, 151936, 1024, 4096)
    gen = torch.Generator(device=device).manual_seed(0)
    targets = torch.randint(0, V, (N,), generator=gen, device=device)
    old = -torch.rand(N, generator=gen, device=device) * 10          # ratios spread over every clipping case
    advantages = torch.randn(N, generator=gen, device=device)
    mask = torch.rand(N, generator=gen, device=device) > 0.1
    sft_mask = mask & (advantages > 1)
    n_tokens, n_sft = float(mask.sum()), float(max(1, int(sft_mask.sum())))
    bandwidth = copy_bandwidth(device, 2**24 if dry else 2**30)
    emit("copy bandwidth", bandwidth_GB_s=bandwidth / 1e9)
    args = (targets, old, advantages, mask)
    kwargs = dict(sft_mask=sft_mask, num_tokens=n_tokens, num_sft_tokens=n_sft)
    ref_args = (*args, sft_mask, n_tokens, n_sft)   # the same inputs, in reference_loss's positional order
    for dtype in (torch.bfloat16, torch.float32):
        tag = "bf16" if dtype == torch.bfloat16 else "fp32"
        logits = torch.empty(N, V, dtype=dtype, device=device)
        for r in range(0, N, block):                                  # filled in blocks: no (N, V) fp32 temporary
            logits[r:r + block] = (torch.randn(min(block, N - r), V, generator=gen, device=device) * 3).to(dtype)
        floor = 3 * logits.numel() * logits.element_size() / bandwidth   # read (fwd), read + write (bwd)
        ref_value, ref_grad = reference_loss(logits, *ref_args, block)
        grad_scale = float(ref_grad.abs().max())
        ref_time = seconds_per_call(lambda: reference_loss(logits, *ref_args, block), device, repeats=1)
        emit(f"reference {tag} (autograd, {block} rows at a time)", ms=ref_time * 1e3, x_floor=ref_time / floor,
             peak_GB=_gb(peak_added(lambda: reference_loss(logits, *ref_args, block), device)),
             note="the reference for the errors below")
        # the paths under test: the logits are a non-leaf view (as lm_head's output is), so the backward may
        # overwrite them with the gradient; each timed call therefore starts from a fresh copy, whose time is subtracted
        # ~2 bf16 roundings of the gradient (the bf16 rows: the gradient is stored in bf16) or fp32 sums over V
        grad_bound = 2 * U_BF16 if dtype == torch.bfloat16 else 1e-5
        for backend in ("torch", "triton"):
            def run(backend=backend):
                leaf = logits.clone().requires_grad_()
                loss, _ = gppo.rl_loss_from_logits(leaf.view(N, V), *args, backend=backend, **kwargs)
                loss.backward()
                return loss, leaf
            try:
                loss, leaf = run()
                value_err = abs(float(loss) - ref_value) / max(1.0, abs(ref_value))
                grad_err = max_abs_diff(leaf.grad, ref_grad, block) / grad_scale
                del leaf, loss
                seconds = seconds_per_call(run, device) - seconds_per_call(lambda: logits.clone(), device)
                # issue 6's goals for the fused kernel: >= 10x the reference, within 1.5x of the bandwidth floor
                goals = (f"10x ref: {'met' if ref_time / seconds >= 10 else 'NOT met'}; 1.5x floor: "
                         f"{'met' if seconds / floor <= 1.5 else 'NOT met'}") if backend == "triton" else None
                emit(f"rl_loss_from_logits {tag} backend={backend}", ms=seconds * 1e3, x_floor=seconds / floor,
                     speedup_vs_ref=ref_time / seconds, peak_GB=_gb(peak_added(run, device)), goals=goals,
                     value_rel_err=value_err, grad_err_rel_max=grad_err, grad_bound=grad_bound,
                     status="ok" if value_err <= 1e-5 and grad_err <= grad_bound else "MISMATCH")
            except Exception as e:                                    # noqa: BLE001 (recorded, the section goes on)
                emit(f"rl_loss_from_logits {tag} backend={backend}", status="error", error=_short(e))
        del ref_grad, logits
        _empty_cache(device)
    hidden = (torch.randn(N, D, generator=gen, device=device) / D ** 0.5).to(torch.bfloat16)
    weight = (torch.randn(V, D, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    for backend in ("torch", "triton"):
        def run_hidden(backend=backend):
            h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
            loss, _ = gppo.rl_loss_from_hidden(h, w, *args, backend=backend, **kwargs)
            loss.backward()
        try:
            seconds = seconds_per_call(run_hidden, device)
            matmul_s = 4 * 2 * N * D * V / _matmul_flops(device, D)   # GEMMs: logits, again in the backward, 2 grads
            emit(f"rl_loss_from_hidden bf16 backend={backend} D={D}", ms=seconds * 1e3,
                 peak_GB=_gb(peak_added(run_hidden, device)), x_gemm_time=seconds / matmul_s,
                 note="the training path: logits one chunk at a time")
        except Exception as e:                                        # noqa: BLE001
            emit(f"rl_loss_from_hidden bf16 backend={backend}", status="error", error=_short(e))


def _matmul_flops(device, D) -> float:
    """Measured bf16 GEMM throughput at the loss's shape (flop/s), for the from-hidden row's reference time."""
    a = torch.randn(2048, D, device=device).to(torch.bfloat16)
    b = torch.randn(D, 8192, device=device).to(torch.bfloat16)
    return 2 * 2048 * D * 8192 / seconds_per_call(lambda: a @ b, device, repeats=3)


# ----------------------------------------------------------------------------- 2. paged decode

def section_decode(dry: bool, emit):
    from rollout import decode_splits, paged_decode_reference, paged_decode_triton
    device = torch.device("cpu" if dry else "cuda")
    B, Hq, Hkv, hd, bs = (4, 4, 2, 16, 16) if dry else (64, 32, 8, 128, 16)
    gen, gen_device = torch.Generator().manual_seed(0), torch.Generator(device=device).manual_seed(0)
    lo, hi = (5, 70) if dry else (1024, 16384)
    contexts = torch.linspace(lo, hi, B).round().long()[torch.randperm(B, generator=gen)]
    blocks_per_seq = [-(-int(c) // bs) for c in contexts]
    num_blocks = sum(blocks_per_seq) + 8
    order = torch.randperm(num_blocks, generator=gen).tolist()        # scattered blocks, as after many requests
    tables, start = [], 0
    for n in blocks_per_seq:
        tables.append(order[start:start + n] + [0] * (max(blocks_per_seq) - n))
        start += n
    block_tables = torch.tensor(tables, dtype=torch.int32, device=device)
    context_lens = contexts.to(torch.int32).to(device)
    k_pool, v_pool = (torch.randn(Hkv, num_blocks, bs, hd, generator=gen_device, device=device).to(torch.bfloat16)
                      for _ in range(2))                              # 1.1 GB each at full size, made on the GPU
    q = torch.randn(B, Hq, hd, generator=gen_device, device=device).to(torch.bfloat16)
    kv_bytes = int(contexts.sum()) * Hkv * hd * 2 * 2                 # K and V of every context token, bf16
    bandwidth = copy_bandwidth(device, 2**24 if dry else 2**30)
    reference = paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens).float()
    ref_s = seconds_per_call(lambda: paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens), device)
    emit(f"reference (gather + SDPA), {B} seqs {lo}-{hi} tokens, GQA {Hq}:{Hkv}, hd {hd}", ms=ref_s * 1e3,
         KV_GB=kv_bytes / 1e9)
    floor = kv_bytes / bandwidth                                      # K/V read once, at a copy's bytes per second
    # the kernel reads each K/V block once per KV head (its whole query group per program); splits = the parts of each
    # context run by separate programs (flash-decoding), auto = decode_splits(); a few long contexts test the split
    cases = [("", B, None), (" splits=2", B, 2)] if dry else \
        [("", B, None), (" splits=1", B, 1), (" 4 seqs", 4, None), (" 4 seqs splits=1", 4, 1)]
    for tag, b, splits in cases:
        qb, tables, lens = q[:b], block_tables[:b], context_lens[:b]
        expected = reference if b == B else paged_decode_reference(qb, k_pool, v_pool, tables, lens).float()
        out = paged_decode_triton(qb, k_pool, v_pool, tables, lens, splits).float()
        err = float((out - expected).abs().max()) / float(expected.abs().max())
        seconds = seconds_per_call(lambda: paged_decode_triton(qb, k_pool, v_pool, tables, lens, splits), device)
        case_bytes = kv_bytes * float(contexts[:b].sum()) / float(contexts.sum())
        # both outputs are rounded to bf16 once; their fp32 values differ only by summation order: 2u of the largest
        emit(f"paged_decode_triton{tag} (one step, one layer)", ms=seconds * 1e3, read_GB_s=case_bytes / seconds / 1e9,
             x_floor=seconds / (floor * case_bytes / kv_bytes), speedup_vs_ref=ref_s / seconds if b == B else None,
             splits=splits or decode_splits(b, Hkv, tables.shape[1], device), err_rel_max=err, err_bound=2 * U_BF16,
             status="ok" if err <= 2 * U_BF16 else "MISMATCH")


# ----------------------------------------------------------------------------- 3. the engine

def section_engine(dry: bool, emit):
    from rollout import LLMEngine, SamplingParams
    device = torch.device("cpu" if dry else "cuda")
    config = model_config(dry)
    P, n, T, (lo, hi) = (2, 2, 4, (3, 12)) if dry else (64, 8, 512, (64, 256))
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, config.vocab_size, (int(torch.randint(lo, hi + 1, (), generator=gen)),),
                             generator=gen).tolist() for _ in range(P)]
    model = random_qwen3(config, torch.bfloat16, device).eval()
    engine = LLMEngine(model, max_num_seqs=P * n, max_model_len=hi + T, use_triton=True if dry else None)
    params = SamplingParams(temperature=1.0, max_tokens=T, n=n, seed=0)   # no stop tokens: every sample is T long
    engine.generate(prompts[:2], SamplingParams(temperature=1.0, max_tokens=4, n=2, seed=1))   # warm-up, compile
    sync(device)
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    sync(device)
    engine_s = time.perf_counter() - start
    tokens = sum(len(s.token_ids) for o in outs for s in o)
    emit(f"engine, {P} prompts x {n} samples x {T} tokens", tokens_per_s=tokens / engine_s, wall_s=engine_s,
         tokens=tokens, KV_pool_GB=engine.cache.nbytes / 1e9, preemptions=engine.stats.preemptions,
         status="ok" if tokens == P * n * T else "MISMATCH")
    del engine
    _empty_cache(device)

    # greedy parity: the engine vs a full forward per step of the same bf16 model (model.py, no cache)
    greedy_prompts, steps = prompts[:4], (4 if dry else 32)
    engine = LLMEngine(model, max_num_seqs=8, max_model_len=hi + steps, use_triton=True if dry else None)
    ours = [o[0].token_ids for o in engine.generate(greedy_prompts, SamplingParams(temperature=0.0, max_tokens=steps))]
    del engine
    reference = [_no_cache_greedy(model, p, steps) for p in greedy_prompts]
    emit("greedy parity: engine vs model.py full forward (bf16)", **_agreement(ours, reference))

    try:
        import transformers
    except ImportError:
        emit("transformers generate", status="skipped", note="transformers is not importable")
        return
    hf = _transformers_twin(model, config, device)
    hf_prompts = _left_padded(prompts, device)
    hf.generate(**_left_padded(prompts[:2], device), do_sample=True, max_new_tokens=4, min_new_tokens=4,
                pad_token_id=0, eos_token_id=None)                                      # warm-up
    sync(device)
    start = time.perf_counter()
    out = hf.generate(**hf_prompts, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=n,
                      max_new_tokens=T, min_new_tokens=T, pad_token_id=0, eos_token_id=None)
    sync(device)
    hf_s = time.perf_counter() - start
    hf_tokens = (out.shape[1] - hf_prompts["input_ids"].shape[1]) * out.shape[0]
    emit(f"transformers {transformers.__version__} generate, same workload", tokens_per_s=hf_tokens / hf_s,
         wall_s=hf_s, engine_speedup=(tokens / engine_s) / (hf_tokens / hf_s))
    hf_greedy = [hf.generate(**_left_padded([p], device), do_sample=False, max_new_tokens=steps, min_new_tokens=steps,
                             pad_token_id=0, eos_token_id=None)[0, len(p):].tolist() for p in greedy_prompts]
    emit("greedy parity: engine vs transformers (bf16)", **_agreement(ours, hf_greedy))


@torch.no_grad()
def _no_cache_greedy(model, prompt, steps):
    ids = list(prompt)
    device = next(model.parameters()).device
    for _ in range(steps):
        ids.append(int(model(torch.tensor([ids], device=device))[0, -1].argmax()))
    return ids[len(prompt):]


def _agreement(ours, theirs) -> dict:
    """Identical sequences, and the first step at which each pair differs (bf16 near-ties may flip one token)."""
    first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), len(x)) for x, y in zip(ours, theirs)]
    return dict(identical=f"{sum(x == y for x, y in zip(ours, theirs))}/{len(ours)}", first_difference=first,
                status="ok" if all(f >= min(4, len(x)) for f, x in zip(first, ours)) else "MISMATCH")


def _transformers_twin(model, config, device):
    """transformers' Qwen3ForCausalLM with our model's weights, bf16, on the same device."""
    import transformers
    from model import hf_name
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**config.to_hf_dict()))
    finally:
        torch.set_default_dtype(default)
    missing, unexpected = hf.load_state_dict({hf_name(n): p for n, p in model.named_parameters()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"transformers twin: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


def _left_padded(prompts, device) -> dict:
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    return dict(input_ids=ids, attention_mask=mask)


# ----------------------------------------------------------------------------- 4. FSDP2 steps

def _process_group(dry: bool):
    import torch.distributed as dist
    if dist.is_initialized():
        return
    backend = "gloo" if dry else "nccl"
    try:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    except Exception:                                                 # noqa: BLE001: fall back to a TCP store
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def packed_row(vocab, lengths, device, gen):
    """One packed row of documents of the given lengths, as sft.py's loader makes them."""
    ids = torch.randint(0, vocab, (sum(lengths),), generator=gen)
    pos = torch.cat([torch.arange(n) for n in lengths])
    doc = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    mask = torch.rand(sum(lengths), generator=gen) < 0.8
    return {k: v[None].to(device) for k, v in dict(input_ids=ids, position_ids=pos, document_ids=doc, loss_mask=mask).items()}


def section_fsdp(dry: bool, emit):
    import sft
    from rehearsal import peak_phase, sft_phases
    device = torch.device("cpu" if dry else "cuda")
    _process_group(dry)
    config = model_config(dry)
    gen = torch.Generator().manual_seed(0)
    T = 64 if dry else 8192

    # SFT: sft.py's step on one packed row of T tokens (several documents), activation checkpointing, foreach AdamW
    policy = random_qwen3(config, torch.float32, device)
    policy.activation_checkpointing = True
    sft.shard_model(policy, device, param_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, weight_decay=0.1, foreach=True)
    row = packed_row(config.vocab_size, [T // 4, T // 2, T // 4], device, gen)

    def sft_step():
        loss = sft.sft_loss_sum(policy, row, 4096)
        (loss / max(1, int(row["loss_mask"].sum()))).backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    sft_step()                                                     # AdamW's states appear in the first step
    peak, seconds = _step_peak_and_time(sft_step, device)
    name, budget, _ = peak_phase(sft_phases(config, world=1, row_tokens=T, loss_chunk=4096, gpu=True))
    emit(f"SFT step, {T} tokens, FSDP2 bf16/fp32", step_s=seconds, tokens_per_s=T / seconds, peak_GB=_gb(peak),
         budget_GB=budget / 1e9, peak_over_budget=None if peak is None else peak / budget, budget_phase=name,
         status="ok" if peak is None or peak <= 1.25 * budget else "OVER BUDGET")
    del policy, optimizer, row
    _empty_cache(device)
    section_fsdp_gppo(dry, emit, config, device, gen)


def section_fsdp_gppo(dry, emit, config, device, gen):
    """One GPPO step with gppo.py's building blocks: the engine (its bf16 copy, its KV pool sized from the free
    memory) samples, recompute_logprobs, train_mini_batch (rl_loss_from_hidden, Triton on CUDA), sync_engine."""
    import gppo
    import sft
    from rehearsal import gppo_phases, peak_phase
    from rollout import LLMEngine, SamplingParams
    policy = random_qwen3(config, torch.float32, device, seed=1)
    policy.activation_checkpointing = True
    engine_model = random_qwen3(config, torch.bfloat16, device, seed=2)   # gppo.py's engine copy on a GPU: bf16
    sft.shard_model(policy, device, param_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6, weight_decay=0.1)
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 2**28   # CPU: a given 256 MiB "free"
    gcfg = gppo.GPPOConfig(group_size=4, train_row_tokens=64 if dry else 8192, max_prompt_len=16 if dry else 256,
                           max_response_len=4 if dry else 128, kv_cache_fraction=0.3)
    engine = LLMEngine(engine_model, max_num_seqs=256, max_model_len=gcfg.max_prompt_len + gcfg.max_response_len,
                       kv_cache_memory=int(gcfg.kv_cache_fraction * free))        # Triton decode on CUDA only
    emit("engine KV pool from free memory", free_GB=free / 1e9, fraction=gcfg.kv_cache_fraction,
         pool_GB=engine.cache.nbytes / 1e9, blocks=engine.blocks.num_blocks,
         status="ok" if engine.cache.nbytes <= gcfg.kv_cache_fraction * free else "MISMATCH")
    run = gppo.Run(gcfg, policy, optimizer, engine, engine_model, tokenizer=None, tasks=[], score_fn=None, pool=None,
                   rank=0, world=1, device=device)   # what train_mini_batch and recompute_old_logprobs use
    prompts = [torch.randint(0, config.vocab_size, (gcfg.max_prompt_len // 2,), generator=gen).tolist()
               for _ in range(2 if dry else 8)]

    def gppo_step():
        times = {}
        t0 = time.perf_counter()
        outs = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=gcfg.max_response_len,
                                                       n=gcfg.group_size, seed=0))
        seqs = [dict(ids=p + s.token_ids, prompt_len=len(p), adv=[float(j % 2) - 0.5] * len(s.token_ids),
                     old=s.logprobs, engine=s.logprobs, sft=[float(j == 0)] * len(s.token_ids))
                for p, o in zip(prompts, outs) for j, s in enumerate(o)]
        sync(device)
        t1 = time.perf_counter()
        gppo.recompute_old_logprobs(run, seqs)
        sync(device)
        t2 = time.perf_counter()
        metrics = gppo.train_mini_batch(run, seqs)
        sync(device)
        t3 = time.perf_counter()
        gppo.sync_engine(policy, engine_model)
        sync(device)
        times.update(generate_s=t1 - t0, old_logprobs_s=t2 - t1, train_s=t3 - t2, sync_s=time.perf_counter() - t3)
        return seqs, metrics, times

    gppo_step()                                                    # AdamW's states appear in the first step
    result = {}
    peak, seconds = _step_peak_and_time(lambda: result.update(out=gppo_step()), device)
    seqs, metrics, times = result["out"]
    rows = gppo.pack_micro_batches(seqs, gcfg.train_row_tokens)
    longest = max(sum(len(s["ids"]) for s in r) for r in rows)
    synced = all(torch.equal(q, p.full_tensor().to(q.dtype)) for p, q in zip(policy.parameters(), engine_model.parameters()))
    name, budget, _ = peak_phase(gppo_phases(config, world=1, row_tokens=longest, kv_bytes=engine.cache.nbytes,
                                             gpu=True, loss_chunk=2048))
    emit(f"GPPO step, {len(seqs)} samples in {len(rows)} row(s) of <= {longest} tokens", step_s=seconds,
         **{k: round(v, 3) for k, v in times.items()}, loss=metrics["loss"], peak_GB=_gb(peak), budget_GB=budget / 1e9,
         peak_over_budget=None if peak is None else peak / budget, budget_phase=name, engine_synced=synced,
         status="ok" if synced and math.isfinite(metrics["loss"]) and (peak is None or peak <= 1.25 * budget)
         else "MISMATCH")


def _step_peak_and_time(step, device):
    """Peak bytes allocated during one step (None on the CPU) and its wall seconds."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    step()
    sync(device)
    seconds = time.perf_counter() - start
    return (torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None), seconds


# ----------------------------------------------------------------------------- small helpers

def _gb(nbytes):
    return None if nbytes is None else nbytes / 1e9


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def _empty_cache(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- driver

def run_section_here(cfg: CheckConfig):
    """Child process: one section; every result is appended to rows_file at once, so a timeout keeps what was done."""
    def emit(name, status="ok", **numbers):
        row = dict(section=cfg.section, name=name, status=status, **numbers)
        with open(cfg.rows_file, "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        print(format_row(row), flush=True)

    torch.manual_seed(0)
    try:
        globals()[f"section_{cfg.section}"](cfg.dry_run, emit)
    except Exception as e:                                            # noqa: BLE001: recorded for the table
        emit("section aborted", status="error", error=_short(e), where=traceback.format_exc().splitlines()[-3:])


def format_row(row: dict) -> str:
    skip = ("section", "name", "status")
    parts = []
    for k, v in row.items():
        if k in skip or v is None:
            continue
        parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return f"{row['section']:7s} {row['name'][:58]:58s} {row['status']:11s} {' '.join(parts)}"


def run_section_process(cfg: CheckConfig, section: str, seconds: float, rows_file: str) -> dict:
    args = [sys.executable, os.path.abspath(__file__), f"--section={section}", f"--rows_file={rows_file}"] + \
        (["--dry_run"] if cfg.dry_run else [])
    start = time.perf_counter()
    # its output goes straight to ours (seen live); its own process group, so a timeout kills all of it
    proc = subprocess.Popen(args, cwd=ROOT, start_new_session=True)
    try:
        proc.wait(timeout=seconds)
        status = "ok" if proc.returncode == 0 else f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = f"timeout after {seconds:.0f} s"
    rows = []
    if os.path.exists(rows_file):
        with open(rows_file) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    if status != "ok" or not rows:
        rows.append(dict(section=section, name="section process", status="error", error=status))
    return dict(status=status, seconds=time.perf_counter() - start, rows=rows)


def main(cfg: CheckConfig):
    if cfg.section:
        run_section_here(cfg)
        return
    if not cfg.dry_run and not torch.cuda.is_available():
        sys.exit("gpu_check.py: no CUDA device; run with --dry_run to rehearse on the CPU")
    import triton
    started = time.perf_counter()
    try:
        import transformers
        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    device_name = "cpu (dry run)" if cfg.dry_run else torch.cuda.get_device_name()
    report = dict(device=device_name, dry_run=cfg.dry_run, torch=torch.__version__, triton=triton.__version__,
                  transformers=hf_version, started=time.strftime("%Y-%m-%d %H:%M:%S"), sections={})
    print(f"gpu_check: {device_name}, torch {torch.__version__}, triton {triton.__version__}, transformers "
          f"{hf_version or 'not importable'}; limit {cfg.time_limit_s:.0f} s", flush=True)
    rows_dir = os.path.dirname(os.path.abspath(cfg.out))
    os.makedirs(rows_dir, exist_ok=True)
    for section in cfg.sections.split(","):
        left = cfg.time_limit_s - (time.perf_counter() - started)
        if left < 10:
            report["sections"][section] = dict(status="not run: out of time", seconds=0.0, rows=[])
            continue
        rows_file = os.path.join(rows_dir, f".gpu_check.{section}.{os.getpid()}.jsonl")
        budget = min(SECONDS[section] * (0.5 if cfg.dry_run else 1), left)
        print(f"--- section {section} (at most {budget:.0f} s)", flush=True)
        result = run_section_process(cfg, section, budget, rows_file)
        if os.path.exists(rows_file):
            os.remove(rows_file)
        report["sections"][section] = result
        with open(cfg.out, "w") as fh:       # after every section: a run killed from outside keeps what it measured
            json.dump(dict(report, total_s=time.perf_counter() - started, partial=True), fh, indent=2, default=str)
        for row in result["rows"]:
            if row["name"] == "section process":
                print(format_row(row), flush=True)
    report["total_s"] = time.perf_counter() - started
    with open(cfg.out, "w") as fh:
        json.dump(report, fh, indent=2, default=str)
    print(f"\n{'section':7s} {'result':58s} {'status':11s} numbers (ms, GB, GB/s; x_floor = time / bandwidth floor)")
    for section, result in report["sections"].items():
        for row in result["rows"] or [dict(section=section, name="(no results)", status=result["status"])]:
            print(format_row(row))
    print(f"total {report['total_s']:.0f} s; wrote {cfg.out}")


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
