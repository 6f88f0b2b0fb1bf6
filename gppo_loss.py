"""The GPPO loss (Klear-Reasoner, arXiv 2508.07629): one readable definition of the rule, and a
fused evaluation of it.

With r = π_θ(o_t)/π_old(o_t), advantage A and sg = stop-gradient, per response token t:
    ℓ_t = max(−A·r, −A·clip(r, (1−ε_low)·r/sg(r), (1+ε_high)·r/sg(r)))   then, for A < 0: min(ℓ_t, −A·c)
    L   = Σ_t ℓ_t / num_tokens  +  α · (−Σ_{t in fully correct responses} logπ_t) / num_sft_tokens
r/sg(r) is 1 in value, so the forward is PPO with Clip-Higher and dual-clip c, but a clipped token
keeps a bounded gradient ∂ℓ_t/∂logπ_t = −F·A instead of 0 (token_losses: the per-case table of F for
GPPO, GRPO and CISPO). token_losses is the rule; policy_loss and sft_loss average it. What a
training loop calls, rl_loss_from_hidden (and _from_logits), takes ∂L/∂logπ_t by autograd through
that same rule on the N log-probabilities (objective), then applies ∂logπ_t/∂z = (onehot(o_t) −
softmax(z/T))/T a chunk of rows at a time (Triton on CUDA), z in fp32: no (N, V) tensor (the
fused logits: parts/logit_kernels.py).
    loss, metrics = rl_loss_from_hidden(hidden, lm_head.weight, targets, old_logprobs, advantages, response_mask,
                                        sft_mask=sft_mask, cfg=LossConfig(mode="gppo", alpha=0.1))   # hidden: (N, D)
Copy it with parts/logit_kernels.py: torch only (triton optional). Tests: tests/test_gppo_loss.py; speed:
benchmarks/bench_gppo_loss.py.
"""

import functools
from dataclasses import dataclass

import torch

from parts.logit_kernels import LogitKernels, LossFromHidden, LossFromLogits, triton

MODES = ("gppo", "grpo", "cispo")


@dataclass(frozen=True)
class LossConfig:
    """The whole definition of the loss: the clipping rule, its constants, the SFT term's weight and
    the sampling temperature (the paper's values by default). One object travels to every function
    below."""

    # fmt: off
    mode: str = "gppo"             # gppo | grpo (PPO with Clip-Higher) | cispo
    eps_low: float = 0.2           # r is clipped to [1 − eps_low, 1 + eps_high]
    eps_high: float = 0.28
    dual_clip: float = 10.0        # c: for A < 0 the loss is at most −A·c, with no gradient beyond (inf: off)
    beta1: float = 1.0             # GPPO: scale of the low-side clipped tokens (A < 0, r < 1 − eps_low)
    beta2: float = 1.0             # GPPO: scale of the high-side clipped tokens (A > 0, r > 1 + eps_high)
    high_side_only: bool = False   # GPPO variant: low-side clipped tokens get no gradient
    alpha: float = 0.1             # weight of the SFT term on fully correct responses (rl_loss_from_*)
    temperature: float = 1.0       # logπ = log_softmax(logits / T), T the sampling temperature (rl_loss_from_*)
    # fmt: on

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"gppo_loss: mode={self.mode!r} is not one of {MODES}")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ValueError(
                f"gppo_loss: need 0 ≤ eps_low < 1 and eps_high ≥ 0 (r is clipped to [1−eps_low, "
                f"1+eps_high]), got eps_low={self.eps_low}, eps_high={self.eps_high}"
            )
        if not self.dual_clip > 1:
            raise ValueError(
                f"gppo_loss: dual_clip={self.dual_clip} must be > 1 (use float('inf') to disable it)"
            )
        if self.beta1 < 0 or self.beta2 < 0:
            raise ValueError(f"gppo_loss: beta1={self.beta1}, beta2={self.beta2} must be ≥ 0")
        if not self.temperature > 0:
            raise ValueError(f"gppo_loss: temperature={self.temperature} must be > 0")


# ----------------------------------------------------------------------------- 1. the rule


def token_losses(logprobs, old_logprobs, advantages, cfg: LossConfig = LossConfig()):
    """ℓ_t of every token (any one shape), differentiable in logprobs; old_logprobs (the sampler's,
    after temperature) and advantages are constants. Autograd through it gives ∂ℓ_t/∂logπ_t = −F·A,
    the table:

        case                    F (GPPO)        F (GRPO)   F (CISPO)
        A>0, r ≤ 1+ε_high       r               r          clip(r)
        A>0, r > 1+ε_high       β2·(1+ε_high)   0          clip(r)
        A<0, 1−ε_low ≤ r ≤ c    r               r          clip(r)
        A<0, r < 1−ε_low        β1·(1−ε_low)    0          clip(r)     (0 in GPPO's high-side-only variant)
        A<0, r > c (dual-clip)  0               0          clip(r)
    β1, β2 (paper App. A.2) scale the clipped rows' value and gradient: the paper uses 1, the
    authors later recommend β1 = 0.25-0.5 against entropy collapse. CISPO (MiniMax-M1) is REINFORCE
    weighted by the clipped, detached ratio."""
    logp = logprobs.float()
    A = advantages.float()
    # log r above 80 is clamped: no case of the table reads r beyond max(1+ε_high, c), and exp(80)
    # stays finite in fp32, so no gradient becomes 0·inf (NaN) for a ratio that overflowed
    ratio = torch.exp((logp - old_logprobs.float()).clamp(max=80.0))
    low_bound = 1 - cfg.eps_low
    high_bound = 1 + cfg.eps_high
    # (grouped so that its gradient rounds as GPPO's: the same bits when on-policy)
    if cfg.mode == "cispo":
        return -A * (ratio.detach().clamp(low_bound, high_bound) * logp)
    # PPO's max/min picks the clipped term exactly in these three cases (strict inequalities).
    clipped_high = (A > 0) & (ratio > high_bound)
    clipped_low = (A < 0) & (ratio < low_bound)
    dual_clipped = (A < 0) & (ratio > cfg.dual_clip)
    if cfg.mode == "grpo":  # constant bounds: no gradient through a clipped token
        high = high_bound
        low = low_bound
    # GPPO: bound·r/sg(r); r/sg(r) = exp(logπ − sg(logπ)) is exactly 1, with gradient 1
    else:
        r_over_sg_r = torch.exp(logp - logp.detach())
        high = cfg.beta2 * high_bound * r_over_sg_r
        low = low_bound if cfg.high_side_only else cfg.beta1 * low_bound * r_over_sg_r
    clipped_ratio = torch.where(clipped_high, high, torch.where(clipped_low, low, ratio))
    return torch.where(dual_clipped, -A * cfg.dual_clip, -A * clipped_ratio)


def policy_loss(
    logprobs,
    old_logprobs,
    advantages,
    response_mask,
    cfg: LossConfig = LossConfig(),
    *,
    num_tokens=None,
):
    """Per-token tensors of one shape, e.g. (N,) or (B, T) -> (loss, metrics): loss = Σ_mask ℓ_t /
    num_tokens (default mask.sum(): pass the global count when the batch is split over ranks and
    micro-batches). Tokens outside the mask may hold anything (padding): they get r = 1 and A = 0.
    metrics (0-dim tensors): clip_frac_high, clip_frac_low, dual_clip_frac, ratio_mean,
    approx_kl."""
    _same_shape(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        response_mask=response_mask,
    )
    mask = response_mask.bool()
    old = torch.where(mask, old_logprobs.float(), logprobs.detach().float())
    A = torch.where(mask, advantages.float(), 0.0)
    loss = torch.where(mask, token_losses(logprobs, old, A, cfg), 0.0).sum() / _count(
        mask, num_tokens
    )
    return loss, policy_metrics(logprobs, old, A, mask, cfg)


def sft_loss(logprobs, sft_mask, num_tokens=None):
    """Token-mean NLL over the tokens of responses whose reward is exactly 1 (the caller builds
    sft_mask). The full RL loss is policy_loss + alpha · sft_loss."""
    mask = sft_mask.bool()
    return -torch.where(mask, logprobs.float(), 0.0).sum() / _count(mask, num_tokens)


@torch.no_grad()
def policy_metrics(logprobs, old_logprobs, advantages, response_mask, cfg: LossConfig) -> dict:
    """Fractions of response tokens clipped high / low / dual-clipped, mean ratio, and approx_kl =
    mean of k3 = (r−1) − log r, an unbiased estimate of KL(π_old ‖ π_θ) from samples of π_old."""
    mask = response_mask.bool()
    n = mask.sum().clamp(min=1)
    log_ratio = logprobs.float() - old_logprobs.float()
    r = log_ratio.exp()
    A = advantages.float()
    mean = lambda x: torch.where(mask, x.float(), 0.0).sum() / n  # noqa: E731
    return {
        "clip_frac_high": mean((A > 0) & (r > 1 + cfg.eps_high)),
        "clip_frac_low": mean((A < 0) & (r < 1 - cfg.eps_low)),
        "dual_clip_frac": mean((A < 0) & (r > cfg.dual_clip)),
        "ratio_mean": mean(r),
        "approx_kl": mean((r - 1) - log_ratio),
    }


def _same_shape(**tensors):
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"gppo_loss: per-token tensors must have one shape, got {shapes}")


def _count(mask, given):
    """Token-mean denominator: the caller's global count (all ranks, all micro-batches) or the local
    one."""
    return given if given is not None else mask.sum().clamp(min=1)


# ---------------------------------------------------------------- 2. the loss a training loop calls


def rl_loss_from_logits(
    logits,
    target_ids,
    old_logprobs,
    advantages,
    response_mask,
    *,
    sft_mask=None,
    cfg: LossConfig = LossConfig(),
    num_tokens=None,
    num_sft_tokens=None,
    chunk_size=None,
    backend="auto",
    inplace_backward=True,
):
    """policy_loss + cfg.alpha·sft_loss from logits (N, V), bf16 or fp32, with logπ =
    log_softmax(logits/cfg.temperature).

    Per-token inputs (N,); num_tokens / num_sft_tokens: the token-mean's denominators when the batch
    is split over ranks and micro-batches (default: this call's own counts). Triton kernel on CUDA
    (backend="auto"), chunked PyTorch elsewhere. With inplace_backward the backward overwrites
    `logits` with ∂L/∂logits (saves an (N, V) buffer); do not read them afterwards. Returns (loss,
    metrics): policy metrics, policy_loss, sft_loss, entropy (mean over response tokens),
    entropy_clipped (the clipped tokens' entropy, summed, over the response tokens),
    coef_abs and coef_abs_clipped_low / _high (|∂L/∂logπ_t| summed over all response tokens / the
    clipped tokens of a side, over the response tokens: a side's share of the gradient's
    coefficients is their ratio) and logprobs (N,) detached — the new policy's, for logging or the
    next mini-batch.
    """
    if logits.dim() != 2:
        raise ValueError(f"gppo_loss: logits must be (N, V), got shape {tuple(logits.shape)}")
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    batch = TokenBatch(
        target_ids, old_logprobs, advantages, response_mask, sft_mask, num_tokens, num_sft_tokens
    ).checked(*logits.shape)
    kernels = _kernels(cfg, chunk_size, backend, logits.shape[1], logits.device)
    inplace = inplace_backward and not logits.is_leaf  # a leaf's .grad would alias its own data
    rule = functools.partial(objective, batch=batch, cfg=cfg)
    outputs = LossFromLogits.apply(logits, batch.targets, rule, kernels, inplace)
    return _with_metrics(outputs, batch, cfg)


def rl_loss_from_hidden(
    hidden,
    lm_head_weight,
    target_ids,
    old_logprobs,
    advantages,
    response_mask,
    *,
    sft_mask=None,
    cfg: LossConfig = LossConfig(),
    num_tokens=None,
    num_sft_tokens=None,
    chunk_size=None,
    backend="auto",
):
    """Same as rl_loss_from_logits with logits = hidden (N, D) @ lm_head_weight (V, D).T, computed
    chunk_size rows at a time (default 2048 on CUDA; on CPU 16 MB of fp32 logits, 256 rows at V =
    151,936) in the forward and recomputed in the backward: no (N, V) tensor ever exists. Gradients
    flow to hidden and lm_head_weight."""
    if hidden.dim() != 2 or lm_head_weight.dim() != 2 or hidden.shape[1] != lm_head_weight.shape[1]:
        raise ValueError(
            f"gppo_loss: need hidden (N, D) and lm_head_weight (V, D), got "
            f"{tuple(hidden.shape)} and {tuple(lm_head_weight.shape)}"
        )
    batch = TokenBatch(
        target_ids, old_logprobs, advantages, response_mask, sft_mask, num_tokens, num_sft_tokens
    ).checked(len(hidden), len(lm_head_weight))
    kernels = _kernels(cfg, chunk_size, backend, len(lm_head_weight), hidden.device)
    rule = functools.partial(objective, batch=batch, cfg=cfg)
    outputs = LossFromHidden.apply(hidden, lm_head_weight, batch.targets, rule, kernels)
    return _with_metrics(outputs, batch, cfg)


@dataclass
class TokenBatch:
    """The per-token inputs of the fused loss, (N,) each; the counts are the token-mean's
    denominators (the caller's global ones when the batch is split over ranks and micro-batches).
    checked() validates and normalises them."""

    # fmt: off
    targets: torch.Tensor          # int64 ids of the sampled tokens (0 where neither mask is set)
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor    # bool: tokens of the policy loss
    sft_mask: torch.Tensor | None  # bool: tokens of fully correct responses (the SFT term); None = none
    num_tokens: object             # float, or None = response_mask.sum()
    num_sft_tokens: object
    # fmt: on

    def checked(self, n_rows: int, vocab: int) -> "TokenBatch":
        """The same inputs with (n_rows,) shapes checked, bool masks, and targets that index the
        vocabulary."""
        sft_mask = (
            torch.zeros_like(self.response_mask, dtype=torch.bool)
            if self.sft_mask is None
            else self.sft_mask
        )
        _same_shape(
            target_ids=self.targets,
            old_logprobs=self.old_logprobs,
            advantages=self.advantages,
            response_mask=self.response_mask,
            sft_mask=sft_mask,
        )
        if self.targets.shape != (n_rows,):
            raise ValueError(
                f"gppo_loss: per-token tensors must have shape ({n_rows},), got {tuple(self.targets.shape)}"
            )
        response_mask = self.response_mask.bool()
        sft_mask = sft_mask.bool()
        # Inactive rows may hold any id (e.g. -100 padding); active ones must index the vocabulary.
        targets = torch.where(response_mask | sft_mask, self.targets, 0).long().contiguous()
        outside = ((targets < 0) | (targets >= vocab)).any()
        # checked on the device, without the host waiting for it (a bad id fails the step)
        if targets.is_cuda:
            torch._assert_async(
                ~outside, f"gppo_loss: target_ids of response/SFT tokens must lie in [0, {vocab})"
            )
        elif n_rows and outside:
            raise ValueError(
                f"gppo_loss: target_ids of response/SFT tokens must lie in [0, {vocab}), got "
                f"[{targets.min().item()}, {targets.max().item()}]"
            )
        return TokenBatch(
            targets,
            self.old_logprobs,
            self.advantages,
            response_mask,
            sft_mask,
            self.num_tokens,
            self.num_sft_tokens,
        )


def _kernels(cfg: LossConfig, chunk_size, backend: str, vocab: int, device) -> LogitKernels:
    """How logits become logπ and back: Triton on CUDA (backend="auto"), chunked PyTorch
    elsewhere; chunk_size None = _default_chunk."""
    if not isinstance(cfg, LossConfig):
        raise TypeError(f"gppo_loss: cfg must be a LossConfig, got {type(cfg).__name__}")
    if backend not in ("auto", "torch", "triton") or (backend == "triton" and triton is None):
        raise ValueError(
            f"gppo_loss: backend={backend!r} must be 'auto', 'torch' or 'triton' (triton "
            f"{'not ' if triton is None else ''}installed)"
        )
    use_triton = backend == "triton" or (
        backend == "auto" and triton is not None and device.type == "cuda"
    )
    chunk_size = chunk_size or _default_chunk(vocab, device)
    return LogitKernels(cfg.temperature, chunk_size, use_triton)


def _default_chunk(vocab: int, device) -> int:
    """Rows of logits per chunk: 2048 on CUDA; on CPU ~16 MB of fp32 logits (256 rows at V =
    151,936, the whole batch of a toy's 583-token vocabulary: each chunk costs a dozen small ops, so
    a tiny vocabulary wants few)."""
    return 2048 if device.type == "cuda" else max(256, 2**22 // vocab)


def _with_metrics(outputs, batch: TokenBatch, cfg: LossConfig):
    loss, logprobs, entropy, policy, sft = outputs
    mask = batch.response_mask
    metrics = policy_metrics(logprobs, batch.old_logprobs, batch.advantages, mask, cfg)
    r = (logprobs - batch.old_logprobs).exp()
    A = batch.advantages
    clipped_low = mask & (A < 0) & (r < 1 - cfg.eps_low)
    clipped_high = mask & (A > 0) & (r > 1 + cfg.eps_high)
    # GRPO drops these tokens' gradient
    clipped = clipped_low | clipped_high
    n = mask.sum().clamp(min=1)
    # a sum over the tokens given, divided by all response tokens
    per_token = lambda x, tokens: torch.where(tokens, x, 0.0).sum() / n  # noqa: E731
    # Treatment check: how much of the gradient the clipping rule decides. |∂L/∂logπ_t| (objective()'s coef, again:
    # N scalars) summed over the clipped tokens of each side and over all; their ratio is that side's share.
    coef = objective(logprobs, batch, cfg)[1].abs()
    metrics.update(
        policy_loss=policy,
        sft_loss=sft,
        logprobs=logprobs,
        entropy=per_token(entropy, mask),
        entropy_clipped=per_token(entropy, clipped),
        coef_abs=per_token(coef, mask),
        coef_abs_clipped_low=per_token(coef, clipped_low),
        coef_abs_clipped_high=per_token(coef, clipped_high),
    )
    return loss, metrics


def group_advantages(rewards):
    """GRPO's advantages: rewards (G, n) of G groups of n responses to one prompt each ->
    advantages (G, n), A = (R − mean) / (std + 1e-6) within each group, and keep (G,): a group
    whose rewards are all equal has no signal."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)  # std unbiased, as verl
    keep = (r.max(1).values - r.min(1).values) > 1e-9
    return adv.float(), keep


# The metrics of rl_loss_from_* that a training step logs: per-token means (a sum over the tokens
# said, divided by all response tokens), averaged by a trainer over its rows (weighted by tokens),
# then over its updates (step_means).
METRICS = (
    "entropy",
    "entropy_clipped",
    "clip_frac_high",
    "clip_frac_low",
    "dual_clip_frac",
    "ratio_mean",
    "approx_kl",
    "coef_abs",
    "coef_abs_clipped_low",
    "coef_abs_clipped_high",
)


def step_means(updates: list) -> dict:
    """A step's loss metrics from its optimizer updates, each {loss, grad_norm, METRICS}: their
    means over the updates, with entropy_clipped turned into the mean entropy of the clipped tokens
    (those whose gradient GRPO's clip drops and GPPO keeps; NaN without any), and each side's share
    of the gradient's per-token coefficients |∂L/∂logπ_t| that falls on its clipped tokens (mean
    over updates; 0 for an update without gradient): how much the clipping rule decides."""
    keys = ("loss", "grad_norm") + METRICS
    means = {key: sum(u[key] for u in updates) / len(updates) for key in keys}
    clipped = means["clip_frac_high"] + means["clip_frac_low"]  # the clipped tokens' share of all
    entropy_sum = means.pop("entropy_clipped")  # their entropy, over all tokens
    means["entropy_clipped"] = entropy_sum / clipped if clipped else float("nan")
    for side in ("low", "high"):
        shares = [
            u[f"coef_abs_clipped_{side}"] / u["coef_abs"] if u["coef_abs"] else 0.0 for u in updates
        ]
        means[f"coef_share_clipped_{side}"] = sum(shares) / len(updates)
    return means


# ----------------------------------------------------------- 3. the rule on the N log-probabilities


def objective(logprobs, batch: TokenBatch, cfg: LossConfig) -> tuple:
    """(N,) logπ -> (loss, coef (N,) = ∂loss/∂logπ, policy part, sft part), detached fp32:
    policy_loss + α·sft_loss, the readable definition itself, differentiated by autograd on N
    scalars (the (N, V) part is the caller's)."""
    with torch.enable_grad():
        logp = logprobs.detach().float().requires_grad_()
        policy = policy_loss(
            logp,
            batch.old_logprobs,
            batch.advantages,
            batch.response_mask,
            cfg,
            num_tokens=batch.num_tokens,
        )[0]
        sft = sft_loss(logp, batch.sft_mask, batch.num_sft_tokens)
        loss = policy + cfg.alpha * sft
        (coef,) = torch.autograd.grad(loss, logp)
    return loss.detach(), coef, policy.detach(), sft.detach()
