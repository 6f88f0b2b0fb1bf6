"""Treatment checks of the RL loop: the share of the gradient's per-token coefficients |∂L/∂logπ_t| that falls on
clipped tokens (gppo_loss metrics, by hand from the per-case table of F), and the step record's
shares, grad-clip rate and largest grad norm (gppo.step_metrics, whose arithmetic is parts/rl_report.py's
step_record and grad_clip_metrics)."""

import math
import os
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import gppo  # noqa: E402
from gppo_loss import LossConfig, rl_loss_from_logits  # noqa: E402

# four tokens: (advantage A, ratio r). ε_low 0.2, ε_high 0.28: token 1 is clipped low (A < 0, r <
# 0.8), token 2 high
TOKENS = [(1.0, 1.0), (-1.0, 0.5), (2.0, 1.5), (-0.5, 1.1)]


def metrics_of(cfg):
    torch.manual_seed(0)
    logits = torch.randn(len(TOKENS), 7)
    targets = torch.tensor([3, 0, 6, 2])
    logp = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
    old = logp - torch.log(torch.tensor([r for _, r in TOKENS]))
    adv = torch.tensor([a for a, _ in TOKENS])
    _, m = rl_loss_from_logits(
        logits.clone().requires_grad_(),
        targets,
        old,
        adv,
        torch.ones(4, dtype=torch.bool),
        cfg=cfg,
        inplace_backward=False,
    )
    return {k: float(v) for k, v in m.items() if v.dim() == 0}


@pytest.mark.parametrize(
    "mode,beta1,f",
    [
        # |coef_t| = F·|A| / N with F from the table: GPPO clipped low β1·(1−ε_low), high β2·(1+ε_high), else r;
        # GRPO 0 on clipped tokens; CISPO clip(r) everywhere
        ("gppo", 1.0, [1.0, 0.8, 1.28, 1.1]),
        ("gppo", 0.25, [1.0, 0.2, 1.28, 1.1]),
        ("grpo", 1.0, [1.0, 0.0, 0.0, 1.1]),
        ("cispo", 1.0, [1.0, 0.8, 1.28, 1.1]),
    ],
)
def test_the_share_of_the_coefficients_on_clipped_tokens_by_hand(mode, beta1, f):
    m = metrics_of(LossConfig(mode=mode, beta1=beta1, alpha=0.0))
    coef = [fi * abs(a) / 4 for fi, (a, _) in zip(f, TOKENS)]  # ∂(Σ ℓ_t / 4)/∂logπ_t
    # per-token mean, as every metric here
    assert m["coef_abs"] == pytest.approx(sum(coef) / 4, rel=1e-5)
    assert m["coef_abs_clipped_low"] / m["coef_abs"] == pytest.approx(
        coef[1] / sum(coef), rel=1e-5, abs=1e-7
    )
    assert m["coef_abs_clipped_high"] / m["coef_abs"] == pytest.approx(
        coef[2] / sum(coef), rel=1e-5, abs=1e-7
    )
    assert m["clip_frac_low"] == m["clip_frac_high"] == 0.25


def test_step_record_has_the_shares_the_grad_clip_rate_and_the_largest_norm():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    updates = [
        dict(
            loss=0.1,
            grad_norm=0.5,
            entropy=1.0,
            entropy_clipped=0.02,
            clip_frac_high=0.01,
            clip_frac_low=0.03,
            dual_clip_frac=0.0,
            ratio_mean=1.0,
            approx_kl=1e-3,
            coef_abs=2.0,
            coef_abs_clipped_low=0.5,
            coef_abs_clipped_high=0.1,
        ),
        dict(
            loss=0.1,
            grad_norm=1.5,
            entropy=1.0,
            entropy_clipped=0.0,
            clip_frac_high=0.0,
            clip_frac_low=0.0,
            dual_clip_frac=0.0,
            ratio_mean=1.0,
            approx_kl=1e-3,
            coef_abs=0.0,
            coef_abs_clipped_low=0.0,
            # an update with no gradient on any token: share 0, not a NaN
            coef_abs_clipped_high=0.0,
        ),
    ]
    sample = SimpleNamespace(token_ids=[1, 2, 3], finish_reason="stop")
    group = SimpleNamespace(samples=[sample, sample], rewards=[1.0, 0.0], correct=[True, False])
    run = SimpleNamespace(
        cfg=gppo.GPPOConfig(grad_clip=1.0),
        device=torch.device("cpu"),
        world=1,
        optimizer=SimpleNamespace(param_groups=[dict(lr=1e-5)]),
    )
    rec, _ = gppo.step_metrics(
        run,
        [group],
        [group],
        [[SimpleNamespace(ids=[1, 2, 3, 4])]],
        dict(gap_sum=0.0, gap_tokens=0, gap_max=0.0),
        updates,
    )
    assert rec["coef_share_clipped_low"] == pytest.approx((0.5 / 2.0 + 0.0) / 2)
    assert rec["coef_share_clipped_high"] == pytest.approx((0.1 / 2.0 + 0.0) / 2)
    assert (
        rec["grad_clipped_frac"] == 0.5 and rec["grad_norm_max"] == 1.5 and rec["grad_norm"] == 1.0
    )
    assert rec["entropy_clipped"] == pytest.approx(0.01 / 0.02) and not math.isnan(
        rec["entropy_clipped"]
    )
