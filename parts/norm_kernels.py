"""RMSNorm, and Qwen3's per-head q/k RMSNorm followed by RoPE, as one Triton kernel each: the
engine's decode step.

A decode step at a small batch is launch-bound: eager RMSNorm is six kernels (cast, square, mean,
add, rsqrt, multiply twice) and RoPE's rotate_half five more, per layer and per use. These kernels
compute the same formulas with the same roundings, one launch each:

    rms_norm(x, w)       = w * bf16(x / sqrt(mean(x^2) + eps))              (x in fp32, as Hugging Face's Qwen3)
    norm_rope(x, w, c, s) = bf16(bf16(n * c) + bf16(rotate_half(n) * s)),   n = rms_norm(x, w) per head
    rotate_half([x1, x2]) = [-x2, x1];  c, s: cos, sin of the position (fp32, rounded to x's dtype first)

Every product and sum is rounded to x's dtype where eager PyTorch rounds it, and no multiply-add is
contracted (enable_fp_fusion=False), so the only difference from eager is the order of the fp32 sum
of squares: it can move r = 1/sqrt(mean + eps) by a few fp32 ulps, and so, rarely, an output by one
bf16 ulp. Inference only (no backward).

    y = rms_norm(x, weight, eps)                   # x (..., D) -> (..., D), x's dtype
    q = norm_rope(q, q_norm_weight, eps, cos, sin)  # q (B, T, H, hd), cos/sin (B, T, 1, hd) fp32 -> (B, T, H, hd)

Runs on CUDA, or on a CPU under TRITON_INTERPRET=1 (set before importing triton). torch and triton
only.
"""

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the callers keep the eager formulas
    triton = None


def rms_norm(x, weight, eps: float):
    """x (..., D), weight (D,) of x's dtype -> (..., D)."""
    _check(x, weight, x.shape[-1])
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    meta = norm_kernel_meta(x.shape[-1])
    _rms_norm_kernel[(rows.shape[0],)](
        rows, weight, out, rows.stride(0), eps, **meta, **_rounding(x), enable_fp_fusion=False
    )
    return out.view(x.shape)


def norm_rope(x, weight, eps: float, cos, sin):
    """x (B, T, H, hd), weight (hd,), cos/sin (B, T, 1, hd) fp32 -> rope(rms_norm(x) per head), (B,
    T, H, hd)."""
    B, T, H, hd = x.shape
    _check(x, weight, hd)
    if hd % 2 or cos.shape != (B, T, 1, hd) or sin.shape != cos.shape:
        raise ValueError(
            f"norm_rope: x {tuple(x.shape)} needs an even head_dim and cos/sin of ({B}, {T}, 1, {hd}), "
            f"got {tuple(cos.shape)}, {tuple(sin.shape)}"
        )
    rows = x.reshape(B * T * H, hd)
    cos, sin = (
        cos.reshape(B * T, hd).float().contiguous(),
        sin.reshape(B * T, hd).float().contiguous(),
    )
    out = torch.empty_like(rows)
    _norm_rope_kernel[(rows.shape[0],)](
        rows,
        weight,
        cos,
        sin,
        out,
        rows.stride(0),
        H,
        eps,
        **norm_rope_kernel_meta(hd),
        **_rounding(x),
        enable_fp_fusion=False,
    )
    return out.view(B, T, H, hd)


def norm_kernel_meta(dim: int) -> dict:
    return dict(DIM=dim, BLOCK=triton.next_power_of_2(dim))


def norm_rope_kernel_meta(head_dim: int) -> dict:
    return dict(HALF=head_dim // 2, HALF_P2=triton.next_power_of_2(head_dim // 2))


def _rounding(x) -> dict:
    """BF16: round intermediates to bf16 (else x is fp32 and nothing is rounded). EMULATE: Triton's
    interpreter casts fp32 to bf16 by truncation, a GPU to the nearest even; the kernels then round
    to nearest even by hand."""
    return dict(BF16=x.dtype == torch.bfloat16, EMULATE=os.environ.get("TRITON_INTERPRET") == "1")


def _check(x, weight, dim: int) -> None:
    if triton is None:
        raise RuntimeError("parts/norm_kernels.py needs triton")
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"norm kernels: x is {x.dtype}; they take bfloat16 or float32")
    if weight.shape != (dim,) or weight.dtype != x.dtype or not x.is_contiguous():
        raise ValueError(
            f"norm kernels: x {tuple(x.shape)} {x.dtype} (contiguous: {x.is_contiguous()}) needs a "
            f"weight of ({dim},) in its dtype, got {tuple(weight.shape)} {weight.dtype}"
        )


if triton is not None:

    @triton.jit
    def _round(x, BF16: tl.constexpr, EMULATE: tl.constexpr):
        """fp32 x rounded to the kernel's dtype (to nearest, ties to even), returned as fp32."""
        if not BF16:
            return x
        if EMULATE:  # keep the top 16 bits of the fp32 pattern, rounded to nearest even (finite x)
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        return x.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _rms_norm_kernel(
        x_ptr,
        w_ptr,
        out_ptr,
        stride,
        eps,
        DIM: tl.constexpr,
        BLOCK: tl.constexpr,
        BF16: tl.constexpr,
        EMULATE: tl.constexpr,
    ):
        # One program per row. The eager formula: y = x.float() * rsqrt(mean(x^2) + eps), rounded to
        # x's dtype, then the weight's product, rounded again (a bf16 * bf16 multiply is an fp32
        # product rounded once).
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        ok = cols < DIM
        x = tl.load(x_ptr + row * stride + cols, mask=ok, other=0.0).to(tl.float32)
        r = tl.math.rsqrt(tl.sum(x * x, axis=0) / DIM + eps)
        y = _round(x * r, BF16, EMULATE)
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        out = _round(w * y, BF16, EMULATE)
        tl.store(out_ptr + row * stride + cols, out.to(out_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _norm_rope_kernel(
        x_ptr,
        w_ptr,
        cos_ptr,
        sin_ptr,
        out_ptr,
        stride,
        num_heads,
        eps,
        HALF: tl.constexpr,
        HALF_P2: tl.constexpr,
        BF16: tl.constexpr,
        EMULATE: tl.constexpr,
    ):
        # One program per (token, head) row of head_dim = 2 HALF: its two halves x1, x2 are loaded apart, because
        # RoPE pairs element i with element i + HALF. n = RMSNorm(x) as _rms_norm_kernel; then, each term rounded as
        # eager does (x * cos, rotate_half(x) * sin, their sum):
        #   out1 = n1 c1 - n2 s1,   out2 = n2 c2 + n1 s2
        row = tl.program_id(0).to(tl.int64)
        token = row // num_heads
        i = tl.arange(0, HALF_P2)
        ok = i < HALF
        base = row * stride
        x1 = tl.load(x_ptr + base + i, mask=ok, other=0.0).to(tl.float32)
        x2 = tl.load(x_ptr + base + HALF + i, mask=ok, other=0.0).to(tl.float32)
        r = tl.math.rsqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / (2 * HALF) + eps)
        w1 = tl.load(w_ptr + i, mask=ok, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + HALF + i, mask=ok, other=0.0).to(tl.float32)
        n1 = _round(w1 * _round(x1 * r, BF16, EMULATE), BF16, EMULATE)
        n2 = _round(w2 * _round(x2 * r, BF16, EMULATE), BF16, EMULATE)
        angles = token * (2 * HALF)
        c1 = _round(tl.load(cos_ptr + angles + i, mask=ok, other=0.0), BF16, EMULATE)
        c2 = _round(tl.load(cos_ptr + angles + HALF + i, mask=ok, other=0.0), BF16, EMULATE)
        s1 = _round(tl.load(sin_ptr + angles + i, mask=ok, other=0.0), BF16, EMULATE)
        s2 = _round(tl.load(sin_ptr + angles + HALF + i, mask=ok, other=0.0), BF16, EMULATE)
        out1 = _round(
            _round(n1 * c1, BF16, EMULATE) + _round(-n2 * s1, BF16, EMULATE), BF16, EMULATE
        )
        out2 = _round(
            _round(n2 * c2, BF16, EMULATE) + _round(n1 * s2, BF16, EMULATE), BF16, EMULATE
        )
        tl.store(out_ptr + base + i, out1.to(out_ptr.dtype.element_ty), mask=ok)
        tl.store(out_ptr + base + HALF + i, out2.to(out_ptr.dtype.element_ty), mask=ok)
