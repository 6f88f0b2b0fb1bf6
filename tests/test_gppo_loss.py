"""Tests of the GPPO loss (gppo_loss.py): the per-case table by hand, the training path's gradient
against autograd through the readable rule (token_losses / policy_loss + α·sft_loss), the chunked
and fused paths against a naive log_softmax -> gather -> loss, and the Triton kernels (under
TRITON_INTERPRET=1, see conftest.py).

Tolerances: fp32 paths agree to ~1e-6 relative (same math, different summation order). bf16 logits
are read identically by both sides and all math is fp32, so logπ, entropy and loss stay tight
(1e-4); only ∂L/∂logits is rounded to bf16 on the way out, so it is compared with 2^-7 relative
tolerance.
"""

import math

import pytest
import torch

import gppo_loss as gppo
from parts import logit_kernels

EPS_LOW = 0.2
EPS_HIGH = 0.28
C = 10.0
# One token per row of the per-case table (gppo_loss.py's docstring): (advantage, ratio, F for gppo,
# grpo, cispo).
TABLE = {
    "A>0 inside": (2.0, 1.1, dict(gppo=1.1, grpo=1.1, cispo=1.1)),
    "A>0 above": (2.0, 1.5, dict(gppo=1.28, grpo=0.0, cispo=1.28)),
    "A>0 below": (2.0, 0.5, dict(gppo=0.5, grpo=0.5, cispo=0.8)),
    "A<0 inside": (-1.0, 2.0, dict(gppo=2.0, grpo=2.0, cispo=1.28)),
    "A<0 below": (-1.0, 0.5, dict(gppo=0.8, grpo=0.0, cispo=0.8)),
    "A<0 dual-clip": (-1.0, 20.0, dict(gppo=0.0, grpo=0.0, cispo=1.28)),
}
# PPO clip-higher + dual-clip value of each row: −A·r, −A·(1+ε_h), −A·r, −A·r, −A·(1−ε_l), −A·c.
PPO_VALUE = {
    "A>0 inside": -2.2,
    "A>0 above": -2.56,
    "A>0 below": -1.0,
    "A<0 inside": 2.0,
    "A<0 below": 0.8,
    "A<0 dual-clip": 10.0,
}
LOGP = -1.0  # the new policy's logπ of every hand token; old logπ = logπ − log r


def one_token(advantage, ratio):
    logp = torch.tensor([LOGP], requires_grad=True)
    old = torch.tensor([LOGP - math.log(ratio)])
    return logp, old, torch.tensor([advantage]), torch.ones(1, dtype=torch.bool)


@pytest.mark.parametrize("mode", gppo.MODES)
@pytest.mark.parametrize("case", TABLE)
def test_table_row_by_hand(mode, case):
    advantage, ratio, F = TABLE[case]
    expected_value = (
        -advantage * min(max(ratio, 0.8), 1.28) * LOGP if mode == "cispo" else PPO_VALUE[case]
    )
    expected_coef = -F[mode] * advantage  # ∂ℓ_t/∂logπ_t
    logp, old, A, mask = one_token(advantage, ratio)
    loss, _ = gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(mode=mode))
    loss.backward()
    assert loss.item() == pytest.approx(expected_value, rel=1e-5)
    assert logp.grad.item() == pytest.approx(expected_coef, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize(
    "case, kwargs, value, F",
    [
        ("A<0 below", dict(beta1=0.5), 0.5 * 0.8, 0.5 * 0.8),  # β1 scales the low side
        ("A>0 above", dict(beta2=0.5), -2 * 0.5 * 1.28, 0.5 * 1.28),  # β2 scales the high side
        ("A>0 above", dict(beta1=0.5), -2.56, 1.28),  # β1 leaves the high side alone
        ("A<0 below", dict(high_side_only=True), 0.8, 0.0),  # PPO value, no gradient
        ("A>0 above", dict(high_side_only=True), -2.56, 1.28),
    ],
)
def test_gppo_general_form_and_high_side_only(case, kwargs, value, F):
    advantage, ratio, _ = TABLE[case]
    logp, old, A, mask = one_token(advantage, ratio)
    loss, _ = gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(mode="gppo", **kwargs))
    loss.backward()
    assert loss.item() == pytest.approx(value, rel=1e-5)
    assert logp.grad.item() == pytest.approx(-F * advantage, rel=1e-5, abs=1e-7)


def random_tokens(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(shape, generator=gen) * 5
    old = logp - (torch.rand(shape, generator=gen) * 8 - 4)  # ratios from e^-4 to e^4: every case
    A = torch.randn(shape, generator=gen)
    A[..., :3] = 0.0
    mask = torch.rand(shape, generator=gen) > 0.25
    return logp, old, A, mask


def test_gppo_forward_equals_ppo_clip_higher_exactly():
    logp, old, A, mask = random_tokens((4, 64))
    gppo_loss, _ = gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(mode="gppo"))
    grpo_loss, _ = gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(mode="grpo"))
    assert torch.equal(gppo_loss, grpo_loss)


def test_metrics_and_token_mean():
    rows = list(TABLE.values())
    logp = torch.full((6,), LOGP)
    ratio = torch.tensor([r for _, r, _ in rows])
    old = logp - ratio.log()
    A = torch.tensor([a for a, _, _ in rows])
    loss, metrics = gppo.policy_loss(logp, old, A, torch.ones(6), gppo.LossConfig(mode="gppo"))
    assert loss.item() == pytest.approx(sum(PPO_VALUE.values()) / 6, rel=1e-5)
    assert metrics["clip_frac_high"].item() == pytest.approx(1 / 6)
    assert metrics["clip_frac_low"].item() == pytest.approx(1 / 6)
    assert metrics["dual_clip_frac"].item() == pytest.approx(1 / 6)
    assert metrics["ratio_mean"].item() == pytest.approx(ratio.mean().item(), rel=1e-5)
    k3 = sum(r - 1 - math.log(r) for _, r, _ in rows) / 6
    assert metrics["approx_kl"].item() == pytest.approx(k3, rel=1e-5)


def test_global_token_count_and_masked_garbage():
    logp, old, A, mask = random_tokens((2, 50), seed=2)
    old = torch.where(mask, old, torch.nan)  # padding may hold anything
    full, _ = gppo.policy_loss(logp, old, A, mask)
    n = mask.sum()
    halves = [gppo.policy_loss(logp[i], old[i], A[i], mask[i], num_tokens=n)[0] for i in range(2)]
    assert torch.isfinite(full)
    torch.testing.assert_close(halves[0] + halves[1], full)  # same result on 1 rank or 2
    sft_mask = torch.tensor([True, False] * 50).view(2, 50)
    assert gppo.sft_loss(logp, sft_mask).item() == pytest.approx(
        -logp[sft_mask].mean().item(), rel=1e-6
    )


def naive_rl_loss(logits, targets, old, A, mask, sft_mask, temperature, alpha=0.1, **kwargs):
    """The obvious implementation: fp32 log_softmax over all (N, V), gather, reference losses."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1).gather(1, targets[:, None])[:, 0]
    loss, _ = gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(**kwargs))
    return loss + alpha * gppo.sft_loss(logp, sft_mask), logp


def rl_batch(N, V, D=8, seed=0, temperature=1.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, D, generator=gen).to(dtype)
    weight = (torch.randn(V, D, generator=gen) * 2).to(dtype)
    targets = torch.randint(0, V, (N,), generator=gen)
    logp = torch.log_softmax((hidden @ weight.T).float() / temperature, -1).gather(
        1, targets[:, None]
    )[:, 0]
    old = logp - (torch.rand(N, generator=gen) * 2 - 1)  # ratios e^-1..e^1
    A = torch.randn(N, generator=gen)
    mask = torch.rand(N, generator=gen) > 0.3
    sft_mask = mask & (torch.rand(N, generator=gen) > 0.5)
    targets[~mask & ~sft_mask] = -100  # ignored ids at inactive tokens are allowed
    return hidden, weight, targets, old, A, mask, sft_mask


def naive_grads(hidden, weight, targets, old, A, mask, sft_mask, temperature, **kwargs):
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    logits = h @ w.T
    logits.retain_grad()
    loss, logp = naive_rl_loss(
        logits, targets.clamp(min=0), old, A, mask, sft_mask, temperature, **kwargs
    )
    loss.backward()
    return loss.detach(), logp.detach(), logits.grad, h.grad, w.grad


@pytest.mark.parametrize("mode", gppo.MODES)
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_paths_match_naive(mode, temperature):
    batch = rl_batch(37, 50, seed=3, temperature=temperature)
    hidden, weight, targets, old, A, mask, sft_mask = batch
    loss0, logp0, glogits0, gh0, gw0 = naive_grads(*batch, temperature, mode=mode)
    # From logits, chunks of 8 rows (37 is not a multiple), gradient written in place.
    leaf = hidden.clone().requires_grad_()
    logits = leaf @ weight.T
    loss, metrics = gppo.rl_loss_from_logits(
        logits,
        targets,
        old,
        A,
        mask,
        sft_mask=sft_mask,
        cfg=gppo.LossConfig(mode=mode, temperature=temperature),
        chunk_size=8,
        backend="torch",
    )
    loss.backward()
    torch.testing.assert_close(loss.detach(), loss0)
    torch.testing.assert_close(metrics["logprobs"], logp0)
    torch.testing.assert_close(logits.detach(), glogits0)  # the buffer now holds ∂L/∂logits
    torch.testing.assert_close(leaf.grad, gh0)
    # From hidden: logits only ever exist 8 rows at a time.
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    loss, metrics = gppo.rl_loss_from_hidden(
        h,
        w,
        targets,
        old,
        A,
        mask,
        sft_mask=sft_mask,
        cfg=gppo.LossConfig(mode=mode, temperature=temperature),
        chunk_size=8,
        backend="torch",
    )
    loss.backward()
    torch.testing.assert_close(loss.detach(), loss0)
    torch.testing.assert_close(h.grad, gh0)
    torch.testing.assert_close(w.grad, gw0)
    p = torch.softmax((hidden @ weight.T) / temperature, -1)
    entropy = -(p * p.log()).sum(-1)
    torch.testing.assert_close(metrics["entropy"], entropy[mask].mean())


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mode="gppo"),
        dict(mode="grpo"),
        dict(mode="cispo"),
        dict(mode="gppo", beta1=0.3, beta2=0.7),
        dict(mode="gppo", high_side_only=True),
        dict(mode="gppo", dual_clip=3.0, alpha=0.2, temperature=0.8),
    ],
)
def test_training_gradient_is_autograd_through_the_readable_rule(kwargs):
    """What gppo.py trains with (rl_loss_from_hidden, chunked, in fp32) against autograd through
    log_softmax -> gather -> policy_loss + α·sft_loss, with ratios from e^-4 to e^4 (every row of
    the table). Both compute the same logits; they differ in rounding only: ∂L/∂z here is
    coef·(onehot − exp(z/T − lse))/T (about 4 roundings per element), and each element of ∂L/∂hidden
    sums V products, of ∂L/∂W sums N. So the bound per element is (V or N + 4)·ε_fp32 times the sum
    of the absolute products."""
    N = 33
    V = 47
    D = 8
    hidden, weight, targets, old, A, mask, sft_mask = rl_batch(
        N, V, D, seed=9, temperature=kwargs.get("temperature", 1)
    )
    # ratios e^-4..e^4
    old = old - (torch.rand(N, generator=torch.Generator().manual_seed(1)) * 6 - 3)
    cfg = gppo.LossConfig(**kwargs)
    h0 = hidden.clone().requires_grad_()
    w0 = weight.clone().requires_grad_()
    logits = h0 @ w0.T
    logits.retain_grad()
    logp = torch.log_softmax(logits / cfg.temperature, -1).gather(1, targets.clamp(min=0)[:, None])[
        :, 0
    ]
    reference = gppo.policy_loss(logp, old, A, mask, cfg)[0] + cfg.alpha * gppo.sft_loss(
        logp, sft_mask
    )
    reference.backward()
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    loss, _ = gppo.rl_loss_from_hidden(
        h, w, targets, old, A, mask, sft_mask=sft_mask, cfg=cfg, chunk_size=8, backend="torch"
    )
    loss.backward()
    eps = torch.finfo(torch.float32).eps
    g = logits.grad.abs()
    assert (h.grad - h0.grad).abs().le((V + 4) * eps * (g @ weight.abs()) + 1e-30).all(), kwargs
    assert (w.grad - w0.grad).abs().le((N + 4) * eps * (g.T @ hidden.abs()) + 1e-30).all(), kwargs
    assert (
        abs(loss.item() - reference.item())
        <= (N + 4) * eps * max(abs(reference.item()), 1e-30) * 10
    ), kwargs


def test_on_policy_the_three_rules_give_the_same_gradient_bit_for_bit():
    """One update per rollout batch: old logπ = logπ (recomputed, so r = 1 up to rounding), every
    token inside the trust region, F = r for GPPO, GRPO and CISPO alike. experiments/ablate.py
    relies on it: its u = 1 point trains one run for the three rules."""
    hidden, weight, targets, _, A, mask, sft_mask = rl_batch(29, 40, seed=6)
    logp = torch.log_softmax(hidden @ weight.T, -1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
    grads = {}
    for mode in gppo.MODES:
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        loss, metrics = gppo.rl_loss_from_hidden(
            h,
            w,
            targets,
            logp,
            A,
            mask,
            sft_mask=sft_mask,
            chunk_size=8,
            backend="torch",
            cfg=gppo.LossConfig(mode=mode),
        )
        loss.backward()
        assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0
        grads[mode] = (h.grad, w.grad)
    for mode in ("grpo", "cispo"):
        assert torch.equal(grads[mode][0], grads["gppo"][0]) and torch.equal(
            grads[mode][1], grads["gppo"][1]
        )


def test_not_inplace_keeps_logits_and_bf16_torch_path():
    batch = rl_batch(20, 40, seed=4)
    hidden, weight, targets, old, A, mask, sft_mask = batch
    _, _, glogits0, _, _ = naive_grads(*batch, 1.0)
    logits = (hidden @ weight.T).requires_grad_()  # a leaf: never overwritten
    before = logits.detach().clone()
    loss, _ = gppo.rl_loss_from_logits(
        logits, targets, old, A, mask, sft_mask=sft_mask, backend="torch"
    )
    loss.backward()
    assert torch.equal(logits.detach(), before)
    torch.testing.assert_close(logits.grad, glogits0)
    h = hidden.bfloat16().requires_grad_()
    w = weight.bfloat16().requires_grad_()
    loss, _ = gppo.rl_loss_from_hidden(
        h, w, targets, old, A, mask, sft_mask=sft_mask, chunk_size=6, backend="torch"
    )
    loss.backward()
    _, _, _, gh0, gw0 = naive_grads(h.detach(), w.detach(), targets, old, A, mask, sft_mask, 1.0)
    torch.testing.assert_close(
        h.grad.float(), gh0.float(), rtol=2e-2, atol=2e-2 * gh0.abs().max().item()
    )
    torch.testing.assert_close(
        w.grad.float(), gw0.float(), rtol=2e-2, atol=2e-2 * gw0.abs().max().item()
    )


@pytest.mark.skipif(gppo.triton is None, reason="triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode", ["gppo", "cispo"])
def test_triton_kernel_matches_reference(dtype, mode, monkeypatch):
    monkeypatch.setattr(
        logit_kernels, "_TRITON_BLOCK_V", 128
    )  # V = 300: two full blocks and a ragged one
    N = 16
    V = 300
    T = 0.7
    hidden, weight, targets, _, A, mask, sft_mask = rl_batch(N, V, seed=5, temperature=T)
    logits = ((hidden @ weight.T) * 3).to(dtype)  # peaked rows: extreme logprobs too
    logp = torch.log_softmax(logits.float() / T, -1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
    ratio = torch.tensor([1e-8, 1e8] * 4 + [0.5, 0.9, 1.0, 1.1, 1.5, 3.0, 20.0, 1.0])  # every case
    old = logp - ratio.log()
    A[:8] = torch.tensor([1.0, 1.0, -1.0, -1.0] * 2)
    mask[:8] = True
    targets[:8] = targets[:8].clamp(min=0)
    leaf = logits.float().clone().requires_grad_()
    loss0, logp0 = naive_rl_loss(leaf, targets.clamp(min=0), old, A, mask, sft_mask, T, mode=mode)
    loss0.backward()
    fused = logits.clone().requires_grad_().clone()  # a non-leaf buffer the kernel may overwrite
    loss, metrics = gppo.rl_loss_from_logits(
        fused,
        targets,
        old,
        A,
        mask,
        sft_mask=sft_mask,
        cfg=gppo.LossConfig(mode=mode, temperature=T),
        backend="triton",
    )
    loss.backward()
    grad = fused.detach().float()
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss.detach(), loss0.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(metrics["logprobs"], logp0.detach(), rtol=1e-5, atol=1e-5)
    p = torch.softmax(logits.float() / T, -1)
    entropy = -(p * torch.log_softmax(logits.float() / T, -1)).sum(-1)
    torch.testing.assert_close(metrics["entropy"], entropy[mask].mean(), rtol=1e-5, atol=1e-5)
    tol = (
        dict(rtol=1e-5, atol=1e-6)
        if dtype == torch.float32
        else dict(rtol=2**-7, atol=2**-7 * grad.abs().max())
    )
    torch.testing.assert_close(grad, leaf.grad, **tol)
    assert not grad[~mask & ~sft_mask].any()  # inactive tokens get exactly zero gradient


@pytest.mark.skipif(gppo.triton is None, reason="triton is not installed")
def test_triton_from_hidden_matches_torch_path(monkeypatch):
    monkeypatch.setattr(logit_kernels, "_TRITON_BLOCK_V", 64)
    batch = rl_batch(11, 100, seed=6, temperature=1.3)
    hidden, weight, targets, old, A, mask, sft_mask = batch
    results = []
    for backend in ("torch", "triton"):
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        loss, metrics = gppo.rl_loss_from_hidden(
            h,
            w,
            targets,
            old,
            A,
            mask,
            sft_mask=sft_mask,
            cfg=gppo.LossConfig(temperature=1.3, beta1=0.5),
            chunk_size=4,
            backend=backend,
        )
        loss.backward()
        results.append((loss.detach(), metrics["entropy"], h.grad, w.grad))
    for torch_value, triton_value in zip(*results):
        torch.testing.assert_close(triton_value, torch_value)


def test_the_rule_survives_overflowing_ratios():
    """r = exp(200) overflows fp32 and exp(-200) is 0: the value and the gradient stay finite in
    every mode."""
    logp = torch.tensor([0.0, 0.0, 0.0, 0.0], requires_grad=True)
    old = torch.tensor([-200.0, -200.0, -200.0, 200.0])
    A = torch.tensor([1.0, -1.0, 0.0, -1.0])
    for mode in gppo.MODES:
        logp.grad = None
        loss, _ = gppo.policy_loss(
            logp, old, A, torch.ones(4, dtype=torch.bool), gppo.LossConfig(mode=mode)
        )
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all(), mode


def test_bad_inputs_fail_loudly(monkeypatch):
    logp, old, A, mask = random_tokens((8,))
    with pytest.raises(ValueError, match="mode"):
        gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(mode="ppo"))
    with pytest.raises(ValueError, match="one shape"):
        gppo.policy_loss(logp, old[:4], A, mask)
    with pytest.raises(ValueError, match="dual_clip"):
        gppo.policy_loss(logp, old, A, mask, gppo.LossConfig(dual_clip=0.5))
    logits = torch.randn(8, 5)
    targets = torch.full((8,), 7)
    with pytest.raises(ValueError, match=r"target_ids .* \[0, 5\)"):
        gppo.rl_loss_from_logits(logits, targets, old, A, mask)
    with pytest.raises(TypeError, match="eps_hi"):
        gppo.rl_loss_from_logits(logits, targets % 5, old, A, mask, eps_hi=0.3)
    with pytest.raises(ValueError, match="one shape"):
        gppo.rl_loss_from_logits(logits, targets % 5, old, A[:3], mask)
    monkeypatch.setattr(gppo, "triton", None)  # a CPU install without triton still runs
    loss, _ = gppo.rl_loss_from_logits(logits, targets % 5, old, A, mask)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="triton not installed"):
        gppo.rl_loss_from_logits(logits, targets % 5, old, A, mask, backend="triton")


class _NewTensors(torch.utils._python_dispatch.TorchDispatchMode):
    """Records (shape, dtype) of every tensor an op allocates: not a view, not an input written in
    place (addmm_, out=), the returns whose schema declares no alias."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.made += [
            (tuple(t.shape), t.dtype)
            for t, r in zip(outs, func._schema.returns)
            if isinstance(t, torch.Tensor) and r.alias_info is None
        ]
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_gradient_is_accumulated_in_place(dtype, monkeypatch):
    """The backward adds each chunk's ∂L/∂W into the one fp32 (V, D) accumulator: no op makes a
    second fp32 (V, D) tensor (the product a chunk used to allocate: 2.5 GB at Qwen3-8B). Its value
    is the old one's, a fresh fp32 product added per chunk, up to the order of the sums: each
    element sums N products, so the accumulators differ by
    at most (N + 2)·ε_fp32·Σ|products|, and the bf16 results by one rounding more (2^-8 relative)."""
    N = 40
    V = 48
    D = 16
    hidden, weight, targets, old, A, mask, sft_mask = rl_batch(N, V, D, seed=11, dtype=dtype)

    def head_gradient():
        w = weight.clone().requires_grad_()
        loss, _ = gppo.rl_loss_from_hidden(
            hidden, w, targets, old, A, mask, sft_mask=sft_mask, chunk_size=8, backend="torch"
        )
        with _NewTensors() as record:
            loss.backward()
        return w.grad.float(), record.made

    new, made = head_gradient()
    assert made.count(((V, D), torch.float32)) == 1, (
        "the accumulator and no other fp32 (V, D) tensor"
    )
    # the old rule
    monkeypatch.setattr(
        logit_kernels, "_addmm_fp32_", lambda acc, a, b: acc.add_(logit_kernels._mm_fp32(a, b))
    )
    before, _ = head_gradient()
    grad_logits = naive_grads(hidden.float(), weight.float(), targets, old, A, mask, sft_mask, 1.0)[
        2
    ]
    # Σ_n |∂L/∂z_nv|·|h_nd| (2: ∂L/∂z's bf16 rounding)
    products = 2 * grad_logits.abs().T @ hidden.float().abs()
    bound = (N + 2) * torch.finfo(torch.float32).eps * products + 2**-8 * before.abs() * (
        dtype != torch.float32
    )
    assert (new - before).abs().le(bound).all()
