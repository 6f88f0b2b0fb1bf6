"""The GPU timings in one command of at most 5.5 minutes on one H100 or H200: every CUDA path of the
project, timed.

Correctness on the GPU is tests/test_gpu.py (same workloads, same shapes): run it first, then this
script; each of the two commands fits in 6 minutes (docs/gpu_check.md).
    timeout 360 env TRITON_INTERPRET=0 python -m pytest -q tests/test_gpu.py   # the checks (full shapes)
    python benchmarks/gpu_check.py                                # the timings; writes gpu_check.json

  1. loss    the fused GPPO loss (gppo_loss.py), N = 32,768 tokens x V = 151,936, bf16 and fp32 logits: forward +
             backward time of the chunked PyTorch path and the Triton kernels against the readable reference
             (autograd) and against the bandwidth floor (three passes over the logits at the measured copy
             bandwidth), peak memory; the kernel's goals: >= 10x the reference, <= 1.5x the floor. Also
             rl_loss_from_hidden, the path training takes, at Qwen3-0.6B's hidden size
  2. decode  the paged-decode kernel (parts/decode_kernels.py) on realistic block tables: 64 sequences of
             1K-16K tokens, GQA 32:8, head_dim 128, bf16 pool: time per step against the K/V bytes read, with
             its context splits (flash-decoding) and with one split, also for 4 long sequences alone and 8 of
             32K tokens
  3. engine  Qwen3-0.6B's exact shape, random bf16 weights: 64 prompts x 8 samples x 512 new tokens, tokens/s, with
             the defaults (CUDA-graph decode steps, fused norm/RoPE kernels) and each turned off, each timed after a
             warm-up (kernels compiled, every graph captured); greedy tokens of 8 prompts compared as numbers (how
             many identical, the logprob gap before the first difference: bits may differ); one 32K-token prompt;
             the same weights and workload through transformers' generate if it is importable
  4. fsdp    one FSDP2 step each of SFT and GPPO on one GPU (nccl, world size 1), MixedPrecisionPolicy(bf16, fp32
             reduce), 0.6B shape: step time and its split, peak memory and the budget on paper (parts/memory_plan.py);
             the engine-vs-trainer logπ gap after a sync, with fp32 logits and (for comparison) bf16 logits
  5. load    gppo.py's load path from a checkpoint on disk (fp32 shards, the engine's bf16 copy, the KV pool sized
             from the memory left) at the 0.6B shape: peak, free memory and pool, measured and as planned; then the
             pool of an engine freed while training, sized at generate() from all the free memory less the margin,
             and a generate() into it (does the margin suffice?)
Each section runs in its own process with its own time limit (a hang or a crash costs that section
only) and writes each result as soon as it has it; a failure is recorded in the table and the JSON,
and the next section runs.

--dry_run runs the same code on tiny shapes on the CPU, Triton under its interpreter
(TRITON_INTERPRET=1, set before triton is imported) and gloo for nccl, without warm-up calls;
tests/test_gpu_check.py runs it, so this script is not run blind.

Run:  python benchmarks/gpu_check.py                 # one GPU, <= 5.5 min; writes gpu_check.json
      python benchmarks/gpu_check.py --dry_run       # CPU rehearsal
      python benchmarks/gpu_check.py --sections=loss,decode --out=/tmp/gpu.json
Needs torch and triton; transformers is optional (section 3's comparison is skipped without it).
"""

import os
import sys

DRY_RUN = any(a.lower() in ("--dry_run", "--dry_run=true", "--dry_run=1") for a in sys.argv[1:])
if DRY_RUN:
    # must precede the first import of triton (gppo_loss, rollout)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import torch  # noqa: E402

from parts.cli import parse_config  # noqa: E402

# noqa: E402
from gpu_workloads import DECODE_CASES, decode_workload, engine_workload, fused_loss
from gpu_workloads import gppo_step_setup, left_padded, load_path, logprob_gap, loss_workload
from gpu_workloads import model_config, pool_from_free_memory, process_group, random_logits
from gpu_workloads import random_qwen3, reference_loss, sft_step_setup, step_peak_and_time, sync
from gpu_workloads import transformers_twin

SECTIONS = ("loss", "decode", "engine", "fsdp", "load")
# per section on the GPU; 330 s in all
SECONDS = {"loss": 75, "decode": 35, "engine": 130, "fsdp": 60, "load": 30}


@dataclass
class CheckConfig:
    # fmt: off
    out: str = "gpu_check.json"        # the results, written after every section
    dry_run: bool = False              # tiny shapes on the CPU (Triton interpreted, gloo): a rehearsal
    sections: str = ",".join(SECTIONS)  # which sections, in this order
    time_limit_s: float = 330.0        # the whole script; each section gets min(its share, what is left)
    section: str = ""                  # internal: run this section in this process
    rows_file: str = ""                # internal: where the section appends its results (JSON lines)
    # fmt: on

    def __post_init__(self):
        bad = [s for s in self.sections.split(",") if s not in SECTIONS]
        if bad:
            raise ValueError(f"--sections: unknown {bad}; known: {','.join(SECTIONS)}")


# ----------------------------------------------------------------------------- measuring


def seconds_per_call(fn, device, repeats: int = 3) -> float:
    """Wall seconds of fn() after one warm-up call (compilation, caches), averaged over repeats. The
    dry run times one call without warm-up: under the Triton interpreter a call takes seconds, and
    its time means nothing anyway."""
    if DRY_RUN:
        repeats = 1
    else:
        fn()
    start = sync(device)
    for _ in range(repeats):
        fn()
    return (sync(device) - start) / repeats


def peak_added(fn, device):
    """Bytes fn() adds to the CUDA allocator at its peak (None on the CPU, without calling fn: no
    statistics there)."""
    if device.type != "cuda":
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated(device) - before


def copy_bandwidth(device, nbytes: int) -> float:
    """Bytes per second a plain copy moves (read + write), the floor every memory-bound kernel is
    held to."""
    big = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = seconds_per_call(lambda: big.clone(), device, repeats=5)
    big = None  # freed (a lambda above still names it)
    return 2 * nbytes / seconds


def _gb(nbytes):
    return None if nbytes is None else nbytes / 1e9


def short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def _empty_cache(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- 1. the fused loss


def section_loss(dry: bool, emit):
    import gppo_loss

    device = torch.device("cpu" if dry else "cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    work = loss_workload(dry, device, gen)
    bandwidth = copy_bandwidth(device, 2**24 if dry else 2**30)
    emit("copy bandwidth", bandwidth_GB_s=bandwidth / 1e9)
    for dtype in (torch.bfloat16, torch.float32):
        tag = "bf16" if dtype == torch.bfloat16 else "fp32"
        logits = random_logits(work, dtype, gen)
        # read (fwd), read + write (bwd)
        floor = 3 * logits.numel() * logits.element_size() / bandwidth
        ref_s = seconds_per_call(lambda: reference_loss(logits, work), device, repeats=1)
        emit(
            f"reference {tag} (autograd, {work.block} rows at a time)",
            ms=ref_s * 1e3,
            x_floor=ref_s / floor,
            peak_GB=_gb(peak_added(lambda: reference_loss(logits, work), device)),
        )
        for backend in ("torch", "triton"):
            name = f"rl_loss_from_logits {tag} backend={backend}"
            # each call starts from a fresh copy of the logits (the backward overwrites them): its
            # time is subtracted
            try:
                seconds = seconds_per_call(
                    lambda: fused_loss(logits, work, backend), device
                ) - seconds_per_call(lambda: logits.clone(), device)
                peak = peak_added(lambda: fused_loss(logits, work, backend), device)
            # noqa: BLE001 (recorded, the section goes on)
            except Exception as e:
                emit(name, status="error", error=short(e))
                continue
            goals = (
                (
                    f"10x ref: {'met' if ref_s / seconds >= 10 else 'NOT met'}; 1.5x floor: "
                    f"{'met' if seconds / floor <= 1.5 else 'NOT met'}"
                )
                if backend == "triton"
                else None
            )
            emit(
                name,
                ms=seconds * 1e3,
                x_floor=seconds / floor,
                speedup_vs_ref=ref_s / seconds,
                peak_GB=_gb(peak),
                goals=goals,
            )
        logits = None  # freed before the next dtype's copy
        _empty_cache(device)
    hidden = (torch.randn(work.N, work.D, generator=gen, device=device) / work.D**0.5).to(
        torch.bfloat16
    )
    weight = (torch.randn(work.V, work.D, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    # logits twice, 2 gradients
    matmul_s = 4 * 2 * work.N * work.D * work.V / _matmul_flops(device, work.D)

    def from_hidden(backend):
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        gppo_loss.rl_loss_from_hidden(h, w, **work.kwargs(), backend=backend)[0].backward()

    for backend in ("torch", "triton"):
        name = f"rl_loss_from_hidden bf16 backend={backend} D={work.D}"
        try:
            seconds = seconds_per_call(lambda: from_hidden(backend), device)
            emit(
                name,
                ms=seconds * 1e3,
                peak_GB=_gb(peak_added(lambda: from_hidden(backend), device)),
                x_gemm_time=seconds / matmul_s,
                note="the training path: logits one chunk at a time",
            )
        except Exception as e:  # noqa: BLE001
            emit(name, status="error", error=short(e))


def _matmul_flops(device, D) -> float:
    """Measured bf16 GEMM throughput at the loss's shape (flop/s), for the from-hidden row's
    reference time."""
    a = torch.randn(2048, D, device=device).to(torch.bfloat16)
    b = torch.randn(D, 8192, device=device).to(torch.bfloat16)
    return 2 * 2048 * D * 8192 / seconds_per_call(lambda: a @ b, device, repeats=3)


# ----------------------------------------------------------------------------- 2. paged decode


def section_decode(dry: bool, emit):
    from parts.decode_kernels import decode_splits, paged_decode_triton
    from parts.decode_kernels import paged_decode_reference

    device = torch.device("cpu" if dry else "cuda")
    w = decode_workload(dry, device)
    # K and V, bf16
    kv_bytes = int(w.context_lens.sum()) * w.k_pool.shape[0] * w.k_pool.shape[3] * 2 * 2
    # K/V read once, at a copy's bytes/s
    floor = kv_bytes / copy_bandwidth(device, 2**24 if dry else 2**30)
    ref_s = seconds_per_call(
        lambda: paged_decode_reference(w.q, w.k_pool, w.v_pool, w.block_tables, w.context_lens),
        device,
    )
    emit(f"reference (gather + SDPA), {w.describe}", ms=ref_s * 1e3, KV_GB=kv_bytes / 1e9)
    for tag, b, splits in DECODE_CASES[dry]:
        tables = w.block_tables[:b]
        lens = w.context_lens[:b]
        seconds = seconds_per_call(
            lambda: paged_decode_triton(w.q[:b], w.k_pool, w.v_pool, tables, lens, splits), device
        )
        # of the K/V bytes: this case's
        share = float(lens.sum()) / float(w.context_lens.sum())
        emit(
            f"paged_decode_triton{tag} (one step, one layer)",
            ms=seconds * 1e3,
            read_GB_s=kv_bytes * share / seconds / 1e9,
            x_floor=seconds / (floor * share),
            speedup_vs_ref=ref_s / seconds if b == len(w.q) else None,
            splits=splits or decode_splits(b, w.k_pool.shape[0], tables.shape[1], device),
        )
    del w
    _empty_cache(device)
    w = decode_workload(dry, device, long=True)  # a 32K rollout's last steps: the longest contexts
    kv_bytes = int(w.context_lens.sum()) * w.k_pool.shape[0] * w.k_pool.shape[3] * 2 * 2
    seconds = seconds_per_call(
        lambda: paged_decode_triton(w.q, w.k_pool, w.v_pool, w.block_tables, w.context_lens), device
    )
    error = (
        (
            paged_decode_triton(w.q, w.k_pool, w.v_pool, w.block_tables, w.context_lens).float()
            - paged_decode_reference(
                w.q, w.k_pool, w.v_pool, w.block_tables, w.context_lens
            ).float()
        )
        .abs()
        .max()
    )
    emit(
        f"paged_decode_triton, {w.describe}",
        ms=seconds * 1e3,
        read_GB_s=kv_bytes / seconds / 1e9,
        x_floor=seconds / (kv_bytes / copy_bandwidth(device, 2**24 if dry else 2**30)),
        max_abs_err=float(error),
    )


# ----------------------------------------------------------------------------- 3. the engine


def section_engine(dry: bool, emit):
    from rollout import LLMEngine, SamplingParams

    device = torch.device("cpu" if dry else "cuda")
    config = model_config(dry)
    prompts, n, T, longest = engine_workload(config, dry)
    model = random_qwen3(config, torch.bfloat16, device).eval()
    greedy = {}
    tokens_per_s = {}
    # the engine's defaults on CUDA first (CUDA graphs, fused norm kernels); then each turned off,
    # for comparison
    for graphs, fused in ((True, True), (False, True), (True, False)):
        engine = LLMEngine(
            model,
            max_num_seqs=len(prompts) * n,
            max_model_len=longest + T,
            use_triton=True if dry else None,
            cuda_graphs=graphs,
            fused_norms=fused,
        )
        # the kernels compiled for the block-table widths the timed call meets, the pool allocated,
        if not dry:
            engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=64, n=n, seed=1))
        captured = engine.decode.graphs
        if captured is not None:  # and every bucket's graph captured: the timed call replays only
            captured.capture_all()
        start = sync(device)
        # no stop tokens
        outs = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=T, n=n, seed=0))
        engine_s = sync(device) - start
        tokens = sum(len(s.token_ids) for o in outs for s in o)
        tokens_per_s[graphs, fused] = tokens / engine_s
        emit(
            f"engine, {len(prompts)} prompts x {n} samples x {T} tokens, cuda_graphs={graphs}, fused_norms={fused}",
            tokens_per_s=tokens / engine_s,
            wall_s=engine_s,
            tokens=tokens,
            KV_pool_GB=engine.cache.nbytes / 1e9,
            preemptions=engine.stats.preemptions,
        )
        # 8 prompts decoded greedily to the end: the same arithmetic up to its order (a graph's
        # full-width block tables may split a context where the eager step does not; the fused norms
        # sum in another order), so a near-tie may flip a token and the rest of its sequence:
        # numbers, not a verdict
        greedy[graphs, fused] = [
            (o[0].token_ids, o[0].logprobs)
            for o in engine.generate(
                prompts[:8], SamplingParams(temperature=0.0, max_tokens=4 if dry else 32)
            )
        ]
        del engine
        _empty_cache(device)
    for name, other in (
        ("CUDA-graph decode vs eager", (False, True)),
        ("fused norm kernels vs eager", (True, False)),
    ):
        pairs = list(zip(greedy[True, True], greedy[other]))
        agree = [
            next((i for i, (x, y) in enumerate(zip(a[0], b[0])) if x != y), len(a[0]))
            for a, b in pairs
        ]
        gap = max(
            (abs(x - y) for (a, b), k in zip(pairs, agree) for x, y in zip(a[1][:k], b[1][:k])),
            default=0.0,
        )
        emit(
            f"{name}, greedy tokens",
            identical=sum(k == len(a[0]) for (a, _), k in zip(pairs, agree)),
            of=len(pairs),
            tokens_before_first_difference=sum(agree),
            max_logprob_gap_before=gap,
            speedup=tokens_per_s[True, True] / tokens_per_s[other],
        )
    tokens_per_s = tokens_per_s[True, True]
    long_prompt = torch.randint(
        0, config.vocab_size, (40 if dry else 32000,), generator=torch.Generator().manual_seed(3)
    ).tolist()
    new = 4 if dry else 64
    engine = LLMEngine(
        model,
        max_num_seqs=4,
        max_model_len=len(long_prompt) + new,
        use_triton=True if dry else None,
    )
    start = sync(device)
    outs = engine.generate(
        [long_prompt], SamplingParams(temperature=1.0, max_tokens=new, n=4, seed=2)
    )
    long_s = sync(device) - start
    emit(
        f"engine, one {len(long_prompt)}-token prompt x 4 samples x {new} tokens",
        wall_s=long_s,
        tokens=sum(len(s.token_ids) for s in outs[0]),
        KV_pool_GB=engine.cache.nbytes / 1e9,
    )
    del engine
    _empty_cache(device)
    try:
        import transformers
    except ImportError:
        emit("transformers generate", status="skipped", note="transformers is not importable")
        return
    hf = transformers_twin(model, config, device)
    hf.generate(
        **left_padded(prompts[:2], device),
        do_sample=True,
        max_new_tokens=4,
        min_new_tokens=4,
        # warm-up, as ours had
        pad_token_id=0,
        eos_token_id=None,
    )
    batch = left_padded(prompts, device)
    start = sync(device)
    out = hf.generate(
        **batch,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_return_sequences=n,
        max_new_tokens=T,
        min_new_tokens=T,
        pad_token_id=0,
        eos_token_id=None,
    )
    hf_s = sync(device) - start
    hf_tokens = (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
    emit(
        f"transformers {transformers.__version__} generate, same workload",
        tokens_per_s=hf_tokens / hf_s,
        # the default engine (CUDA graphs)
        wall_s=hf_s,
        engine_speedup=tokens_per_s / (hf_tokens / hf_s),
    )


# ----------------------------------------------------------------------------- 4. FSDP2 steps


def section_fsdp(dry: bool, emit):
    import data
    from parts.memory_plan import gppo_phases, peak_phase, sft_phases

    device = torch.device("cpu" if dry else "cuda")
    process_group(dry)
    config = model_config(dry)
    sft_step, policy, T = sft_step_setup(dry, device, config)
    if not dry:
        # AdamW's states appear in the first step
        sft_step()
    peak, seconds = step_peak_and_time(sft_step, device)
    name, budget, _ = peak_phase(
        sft_phases(config, world=1, row_tokens=T, loss_chunk=4096, gpu=True)
    )
    emit(
        f"SFT step, {T} tokens, FSDP2 bf16/fp32",
        step_s=seconds,
        tokens_per_s=T / seconds,
        peak_GB=_gb(peak),
        budget_GB=budget / 1e9,
        peak_over_budget=None if peak is None else peak / budget,
        budget_phase=name,
    )
    del policy, sft_step
    _empty_cache(device)

    gppo_step, run, free = gppo_step_setup(dry, device, config)
    emit(
        "engine KV pool from free memory",
        free_GB=free / 1e9,
        fraction=run.cfg.kv_cache_fraction,
        pool_GB=run.engine.cache.nbytes / 1e9,
        blocks=run.engine.blocks.num_blocks,
    )
    if not dry:
        # AdamW's states appear in the first step
        gppo_step()
    result = {}
    peak, seconds = step_peak_and_time(lambda: result.update(out=gppo_step()), device)
    seqs, metrics, times = result["out"]
    rows = data.pack_in_order(seqs, run.cfg.train_row_tokens)
    longest = max(sum(len(s.ids) for s in r) for r in rows)
    name, budget, _ = peak_phase(
        gppo_phases(
            config,
            world=1,
            row_tokens=longest,
            kv_bytes=run.engine.cache.nbytes,
            gpu=True,
            loss_chunk=2048,
        )
    )
    emit(
        f"GPPO step, {len(seqs)} samples in {len(rows)} row(s) of <= {longest} tokens",
        step_s=seconds,
        **{k: round(v, 3) for k, v in times.items()},
        loss=metrics["loss"],
        peak_GB=_gb(peak),
        budget_GB=budget / 1e9,
        peak_over_budget=None if peak is None else peak / budget,
        budget_phase=name,
    )
    # the noise floor of the ratio r, next to its 0.2/0.28 clip band
    for bf16_logits in (False, True):
        emit(
            f"engine vs trainer |logπ gap|, {'bf16' if bf16_logits else 'fp32'} logits",
            **logprob_gap(run, config, bf16_logits),
        )


# ----------------------------------------------------------------------------- 5. the load path


def section_load(dry: bool, emit):
    import tempfile

    device = torch.device("cpu" if dry else "cuda")
    process_group(dry)
    with tempfile.TemporaryDirectory() as directory:
        emit(
            "checkpoint on disk -> fp32 shards -> engine copy -> KV pool, vs plan",
            **load_path(dry, device, model_config(dry), directory),
        )
    _empty_cache(device)
    emit(
        "KV pool sized at generate() from the free memory, less the margin",
        **pool_from_free_memory(dry, device, model_config(dry)),
    )


# ----------------------------------------------------------------------------- the runner


def main(cfg: CheckConfig):
    if cfg.section:
        return run_section_here(cfg)
    if not cfg.dry_run and not torch.cuda.is_available():
        raise SystemExit(
            "error: gpu_check.py: no CUDA device; run with --dry_run to rehearse on the CPU"
        )
    import triton

    started = time.perf_counter()
    try:
        import transformers

        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    device_name = "cpu (dry run)" if cfg.dry_run else torch.cuda.get_device_name()
    report = dict(
        device=device_name,
        dry_run=cfg.dry_run,
        torch=torch.__version__,
        triton=triton.__version__,
        transformers=hf_version,
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
        sections={},
    )
    print(
        f"gpu_check: {device_name}, torch {torch.__version__}, triton {triton.__version__}, transformers "
        f"{hf_version or 'not importable'}; limit {cfg.time_limit_s:.0f} s",
        flush=True,
    )
    rows_dir = os.path.dirname(os.path.abspath(cfg.out))
    os.makedirs(rows_dir, exist_ok=True)
    for section in cfg.sections.split(","):
        left = cfg.time_limit_s - (time.perf_counter() - started)
        if left < 10:
            report["sections"][section] = dict(status="not run: out of time", seconds=0.0, rows=[])
            continue
        rows_file = os.path.join(rows_dir, f".gpu_check.{section}.{os.getpid()}.jsonl")
        # a dry run's seconds mean nothing (a loaded CPU interprets the kernels slowly): only the
        # whole limit
        budget = left if cfg.dry_run else min(SECONDS[section], left)
        print(f"--- section {section} (at most {budget:.0f} s)", flush=True)
        result = run_section_process(cfg, section, budget, rows_file)
        if os.path.exists(rows_file):
            os.remove(rows_file)
        report["sections"][section] = result
        # after every section: a run killed from outside keeps what it measured
        with open(cfg.out, "w") as fh:
            json.dump(
                dict(report, total_s=time.perf_counter() - started, partial=True),
                fh,
                indent=2,
                default=str,
            )
        for row in result["rows"]:
            if row["name"] == "section process":
                print(format_row(row), flush=True)
    report["total_s"] = time.perf_counter() - started
    with open(cfg.out, "w") as fh:
        json.dump(report, fh, indent=2, default=str)
    print(
        f"\n{'section':7s} {'result':58s} {'status':11s} numbers (ms, GB, GB/s; x_floor = time / bandwidth floor)"
    )
    for section, result in report["sections"].items():
        for row in result["rows"] or [
            dict(section=section, name="(no results)", status=result["status"])
        ]:
            print(format_row(row))
    print(f"total {report['total_s']:.0f} s; wrote {cfg.out}")


def run_section_process(cfg: CheckConfig, section: str, seconds: float, rows_file: str) -> dict:
    args = [
        sys.executable,
        os.path.abspath(__file__),
        f"--section={section}",
        f"--rows_file={rows_file}",
    ] + (["--dry_run"] if cfg.dry_run else [])
    start = time.perf_counter()
    # its output goes straight to ours (seen live); its own process group, so a timeout kills all of
    # it
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


def run_section_here(cfg: CheckConfig):
    """Child process: one section; every result is appended to rows_file at once, so a timeout keeps
    what was done."""

    def emit(name, status="ok", **numbers):
        row = dict(section=cfg.section, name=name, status=status, **numbers)
        with open(cfg.rows_file, "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        print(format_row(row), flush=True)

    torch.manual_seed(0)
    try:
        globals()[f"section_{cfg.section}"](cfg.dry_run, emit)
    # a broad except: any failure is recorded for the table
    except Exception as e:
        emit(
            "section aborted",
            status="error",
            error=short(e),
            where=traceback.format_exc().splitlines()[-3:],
        )


def format_row(row: dict) -> str:
    parts = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in row.items()
        if k not in ("section", "name", "status") and v is not None
    ]
    return f"{row['section']:7s} {row['name'][:58]:58s} {row['status']:11s} {' '.join(parts)}"


if __name__ == "__main__":
    main(parse_config(CheckConfig))
