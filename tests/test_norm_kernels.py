"""parts/norm_kernels.py (under TRITON_INTERPRET=1, which conftest sets) against model.py's eager
RMSNorm and RoPE.

In bf16 the kernels round where eager PyTorch rounds (x / rms, then the weight's product; cos and
sin; x * cos, rotate_half(x) * sin, their sum), so they agree bit for bit; only the order of the
fp32 sum of squares differs, which moves r = 1/sqrt(mean(x^2) + eps) by a few fp32 ulps (relative ~
D u32 at worst, ~1e-7 in practice) and flips a bf16 rounding only where x * r lies within that
distance of a rounding boundary: a chance of about 1e-7 / 2^-8 ~ 3e-5 per element. The tests allow
1% of the elements to differ, each by at most 2 bf16 ulps of the row's largest value (a flipped n
moves n * cos by one ulp, and the sum by its own rounding): far below what a missing or extra
rounding does (a quarter or more of the elements), which the tests' last case shows.
"""

import pytest
import torch

import model as model_py

triton = pytest.importorskip("triton")
from parts import norm_kernels  # noqa: E402

U_BF16 = 2.0**-8
U_FP32 = 2.0**-24


def eager_norm(x, weight, eps):
    norm = model_py.RMSNorm(x.shape[-1], eps).to(x.dtype)
    norm.weight.data.copy_(weight)
    return norm(x)


def eager_norm_rope(x, weight, eps, cos, sin):
    return model_py.apply_rope(eager_norm(x, weight, eps), cos, sin)


def inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    weight = (1 + 0.3 * torch.randn(shape[-1], generator=g)).to(dtype)
    angles = torch.rand(shape[0], shape[1], 1, shape[-1], generator=g) * 100  # positions up to 100
    return x, weight, angles.cos(), angles.sin()


def assert_bf16_agrees(got, expected):
    differ = got != expected
    scale = expected.float().abs().amax(-1, keepdim=True)
    assert float(differ.float().mean()) <= 0.01, (
        f"{float(differ.float().mean()):.3%} of the elements differ"
    )
    assert bool(((got.float() - expected.float()).abs() <= 2 * U_BF16 * scale).all())


@pytest.mark.parametrize("dim", [16, 96, 128])
def test_rms_norm_rounds_as_eager_bf16(dim):
    x, weight, _, _ = inputs((4, 6, dim), torch.bfloat16, dim)
    assert_bf16_agrees(norm_kernels.rms_norm(x, weight, 1e-6), eager_norm(x, weight, 1e-6))


@pytest.mark.parametrize("head_dim", [16, 64, 128])
def test_norm_rope_rounds_as_eager_bf16(head_dim):
    x, weight, cos, sin = inputs((2, 5, 3, head_dim), torch.bfloat16, head_dim)
    assert_bf16_agrees(
        norm_kernels.norm_rope(x, weight, 1e-6, cos, sin),
        eager_norm_rope(x, weight, 1e-6, cos, sin),
    )


def test_norm_rope_is_bit_exact_where_the_sum_of_squares_is():
    """Rows of ±c (c a power of 2) and eps = 0: mean(x^2) = c^2 and r = 1/c exactly in any order, so
    every output is determined by the roundings alone, and they must be eager's to the bit."""
    g = torch.Generator().manual_seed(1)
    B = 2
    T = 4
    H = 3
    hd = 32
    c = 2.0 ** torch.randint(-3, 4, (B, T, H, 1), generator=g)
    x = (c * torch.randint(0, 2, (B, T, H, hd), generator=g).mul(2).sub(1)).bfloat16()
    weight = (1 + 0.3 * torch.randn(hd, generator=g)).bfloat16()
    angles = torch.rand(B, T, 1, hd, generator=g) * 50
    got = norm_kernels.norm_rope(x, weight, 0.0, angles.cos(), angles.sin())
    assert torch.equal(got, eager_norm_rope(x, weight, 0.0, angles.cos(), angles.sin()))
    assert torch.equal(norm_kernels.rms_norm(x, weight, 0.0), eager_norm(x, weight, 0.0))


def test_fp32_agrees_to_rounding():
    """fp32: nothing is rounded to bf16; the sum of D positive squares is off by at most D u
    relative, r by half of that plus rsqrt's own, each product by u. RoPE's difference n1 c1 - n2 s1
    can cancel, so the bound is relative
    to |n1 c1| + |n2 s1|."""
    x, weight, cos, sin = inputs((2, 5, 3, 64), torch.float32, 3)
    eps = 1e-6
    n = eager_norm(x, weight, eps)
    bound = (64 + 8) * U_FP32
    torch.testing.assert_close(norm_kernels.rms_norm(x, weight, eps), n, rtol=bound, atol=0)
    terms = n.abs() * cos.abs() + model_py.rotate_half(n).abs() * sin.abs()
    got = norm_kernels.norm_rope(x, weight, eps, cos, sin)
    assert bool(((got - eager_norm_rope(x, weight, eps, cos, sin)).abs() <= bound * terms).all())


def test_a_missing_rounding_is_caught():
    """The instrument: eager without the bf16 rounding of x / rms (the fp32 value times the weight,
    rounded once) differs from the kernels in far more than 1% of the elements."""
    x, weight, _, _ = inputs((4, 6, 128), torch.bfloat16, 5)
    xf = x.float()
    unrounded = (
        weight.float() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    ).bfloat16()
    with pytest.raises(AssertionError, match="of the elements differ"):
        assert_bf16_agrees(norm_kernels.rms_norm(x, weight, 1e-6), unrounded)


def test_bad_inputs_fail_in_one_line():
    x = torch.zeros(2, 3, 2, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="weight of \\(16,\\) in its dtype"):
        norm_kernels.rms_norm(x, torch.ones(16), 1e-6)
    with pytest.raises(ValueError, match="they take bfloat16 or float32"):
        norm_kernels.rms_norm(x.half(), torch.ones(16).half(), 1e-6)
    with pytest.raises(ValueError, match="cos/sin of"):
        norm_kernels.norm_rope(
            x,
            torch.ones(16, dtype=torch.bfloat16),
            1e-6,
            torch.zeros(2, 3, 1, 8),
            torch.zeros(2, 3, 1, 8),
        )
