"""Every Triton kernel of the project compiled ahead of time for the GPUs it will meet (sm_80: A100,
sm_90: H100/H200) at its real launch configuration, on a machine without a GPU:
triton.compile(ASTSource(...), target=GPUTarget(...)) runs the whole CUDA backend (Triton IR -> GPU
IR -> LLVM -> PTX -> cubin through ptxas), so a kernel that the backend rejects (an unsupported op,
a layout it cannot lower, too much shared memory) fails here, not on the first GPU.

The launch configurations come from the launchers themselves (logit_kernels._launch,
decode_kernels.decode_kernel_meta), at Qwen3-8B's shapes: vocabulary 151,936; 32 query / 8 KV heads
of 128; KV blocks of 16 tokens. The compiles run in a child process without TRITON_INTERPRET (the
tests' conftest sets it, and interpreted kernels cannot be compiled), with Triton's cache in the
test's temporary directory.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = (80, 90)


def kernels():
    """[(name, JITFunction, signature, constexprs, num_warps)] at the project's launch
    configurations."""
    import torch
    from parts import decode_kernels, logit_kernels

    cpu = torch.device("cpu")
    # BLOCK, num_warps at V = 151,936
    loss_meta = logit_kernels._launch(32768, 151936, cpu)[1]
    warps = loss_meta.pop("num_warps")
    out = []
    for dtype in ("bf16", "fp32"):  # the logits' dtype
        stats = dict(
            logits_ptr=f"*{dtype}",
            stride="i32",
            targets_ptr="*i64",
            logprobs_ptr="*fp32",
            lse_ptr="*fp32",
            entropy_ptr="*fp32",
            N="i32",
            V="i32",
            inv_temp="fp32",
            BLOCK="constexpr",
        )
        grad = dict(
            logits_ptr=f"*{dtype}",
            stride="i32",
            out_ptr=f"*{dtype}",
            out_stride="i32",
            targets_ptr="*i64",
            lse_ptr="*fp32",
            coef_ptr="*fp32",
            N="i32",
            V="i32",
            inv_temp="fp32",
            BLOCK="constexpr",
        )
        out += [
            (
                f"logit_kernels._stats_kernel {dtype}",
                logit_kernels._stats_kernel,
                stats,
                loss_meta,
                warps,
            ),
            (
                f"logit_kernels._grad_kernel {dtype}",
                logit_kernels._grad_kernel,
                grad,
                loss_meta,
                warps,
            ),
        ]
    # 4 sequences of 16K tokens
    splits = decode_kernels.decode_splits(4, 8, 1024, cpu)
    decode_meta, combine_meta = decode_kernels.decode_kernel_meta(32, 8, 16, 128, splits)
    decode = dict(
        q_ptr="*bf16",
        k_ptr="*bf16",
        v_ptr="*bf16",
        m_ptr="*fp32",
        l_ptr="*fp32",
        acc_ptr="*fp32",
        block_tables_ptr="*i32",
        context_lens_ptr="*i32",
        scale="fp32",
        stride_qb="i32",
        stride_qh="i32",
        stride_kb="i32",
        stride_ks="i32",
        stride_kh="i64",
        stride_bt="i32",
        num_q_heads="i32",
        blocks_per_split="i32",
        num_splits="i32",
        **dict.fromkeys(decode_meta, "constexpr"),
    )
    combine = dict(
        m_ptr="*fp32",
        l_ptr="*fp32",
        acc_ptr="*fp32",
        out_ptr="*bf16",
        stride_ob="i32",
        stride_oh="i32",
        num_q_heads="i32",
        num_splits="i32",
        **dict.fromkeys(combine_meta, "constexpr"),
    )
    # Launched by the JIT, an integer argument divisible by 16 and a 16-byte-aligned pointer are
    # compiled as such (tt.divisibility): Qwen3-8B's launch from the engine's pool (Hkv 8, blocks of
    # 16 x 128, 20,736 blocks), an eager step's block tables as wide as its longest sequence (1,025
    # blocks: not divisible). Compiled so, and with nothing known divisible (the worst any launch
    # can be): the kernel must not spill either way.
    launch = dict(
        stride_qb=32 * 128,
        stride_qh=128,
        stride_kb=16 * 128,
        stride_ks=128,
        stride_kh=20736 * 16 * 128,
        stride_bt=1025,
        num_q_heads=32,
        blocks_per_split=1024 // splits,
        num_splits=splits,
    )
    aligned = [name for name, kind in decode.items() if kind.startswith("*")] + [
        name for name, value in launch.items() if value % 16 == 0
    ]
    decode_attrs = {
        (decode_kernels._paged_decode_kernel.arg_names.index(name),): [["tt.divisibility", 16]]
        for name in aligned
    }
    out += [
        (
            "decode_kernels._paged_decode_kernel bf16",
            decode_kernels._paged_decode_kernel,
            decode,
            decode_meta,
            4,
            decode_attrs,
        ),
        (
            "decode_kernels._paged_decode_kernel bf16 unaligned",
            decode_kernels._paged_decode_kernel,
            decode,
            decode_meta,
            4,
        ),
        (
            "decode_kernels._combine_splits_kernel bf16",
            decode_kernels._combine_splits_kernel,
            combine,
            combine_meta,
            4,
        ),
    ]
    from parts import norm_kernels

    rounding = dict(BF16=True, EMULATE=False)
    norm = dict(
        x_ptr="*bf16",
        w_ptr="*bf16",
        out_ptr="*bf16",
        stride="i32",
        eps="fp32",
        DIM="constexpr",
        BLOCK="constexpr",
        BF16="constexpr",
        EMULATE="constexpr",
    )
    norm_rope = dict(
        x_ptr="*bf16",
        w_ptr="*bf16",
        cos_ptr="*fp32",
        sin_ptr="*fp32",
        out_ptr="*bf16",
        stride="i32",
        num_heads="i32",
        eps="fp32",
        HALF="constexpr",
        HALF_P2="constexpr",
        BF16="constexpr",
        EMULATE="constexpr",
    )
    out += [
        (
            "norm_kernels._rms_norm_kernel bf16",
            norm_kernels._rms_norm_kernel,
            norm,
            dict(norm_kernels.norm_kernel_meta(4096), **rounding),
            4,
        ),
        (
            "norm_kernels._norm_rope_kernel bf16",
            norm_kernels._norm_rope_kernel,
            norm_rope,
            dict(norm_kernels.norm_rope_kernel_meta(128), **rounding),
            4,
        ),
    ]
    return out


def compile_all():
    """Child process: compile each kernel for each target; print one JSON line per compile, with the
    registers and spilled bytes that Triton's own ptxas run reports (ptxas -v;
    TRITON_DUMP_PTXAS_LOG=1 prints its log)."""
    import contextlib
    import io
    import re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, fn, signature, constexprs, num_warps, *attrs in kernels():
        assert set(signature) == set(fn.arg_names), (name, set(fn.arg_names) ^ set(signature))
        for capability in TARGETS:
            # as launched
            options = {
                "num_warps": num_warps,
                "enable_fp_fusion": not name.startswith("norm_kernels"),
            }
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                compiled = triton.compile(
                    ASTSource(
                        fn, signature, constexprs=constexprs, attrs=attrs[0] if attrs else None
                    ),
                    target=GPUTarget("cuda", capability, 32),
                    options=options,
                )
            registers = [int(n) for n in re.findall(r"Used (\d+) registers", log.getvalue())]
            spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", log.getvalue())]
            print(
                json.dumps(
                    dict(
                        kernel=name,
                        sm=capability,
                        cubin_bytes=len(compiled.asm["cubin"]),
                        shared=compiled.metadata.shared,
                        warps=compiled.metadata.num_warps,
                        registers=registers,
                        spill_bytes=spills,
                    )
                ),
                flush=True,
            )


def test_every_triton_kernel_compiles_for_sm80_and_sm90(tmp_path):
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(
        TRITON_CACHE_DIR=str(tmp_path / "cache"),
        TRITON_HOME=str(tmp_path),
        TRITON_DEFAULT_FP_FUSION="1",
        TRITON_DUMP_PTXAS_LOG="1",
        PYTHONPATH=ROOT,
    )
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert {(r["kernel"], r["sm"]) for r in results} == {
        (name, sm)
        for name in (
            "logit_kernels._stats_kernel bf16",
            "logit_kernels._grad_kernel bf16",
            "logit_kernels._stats_kernel fp32",
            "logit_kernels._grad_kernel fp32",
            "decode_kernels._paged_decode_kernel bf16",
            "decode_kernels._paged_decode_kernel bf16 unaligned",
            "decode_kernels._combine_splits_kernel bf16",
            "norm_kernels._rms_norm_kernel bf16",
            "norm_kernels._norm_rope_kernel bf16",
        )
        for sm in TARGETS
    }
    # fits sm_80's smem
    assert all(r["cubin_bytes"] > 0 and r["shared"] <= 99 * 1024 for r in results), results
    # ptxas's report of every compile: registers (at most 255 a thread) and no spill to local
    # memory, which costs a memory-bound kernel (the paged decode) the bandwidth it lives on
    assert all(len(r["registers"]) == 1 and len(r["spill_bytes"]) == 1 for r in results), results
    assert all(r["spill_bytes"] == [0] for r in results), [
        r for r in results if r["spill_bytes"] != [0]
    ]
    decode = {
        r["sm"]: r["registers"][0]
        for r in results
        if r["kernel"] == "decode_kernels._paged_decode_kernel bf16"
    }
    # as launched: 4 programs of 4 warps fit an SM's 64K registers
    assert decode[90] <= 128, decode


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    compile_all()
