"""What the clipping rules do to a policy, measured exactly: GRPO, CISPO and GPPO (β1 = 1, 0.5,
0.25) on a small softmax policy, with the project's own gppo_loss.token_losses, as the share of
clipped tokens grows.

The policy: K prompts, each a softmax over V answer tokens, logits_p = b_p + W·x_p (b_p fixed
random, x_p a fixed random feature vector, W (V, d) learned, so an update on some prompts moves the
others, as a network's weights do); `correct` of the V tokens earn reward 1. One RL step samples
group_size answers for batch_prompts prompts from π_old, takes GRPO advantages A = (R − mean) / (std
+ 1e-6) per group, then makes u optimizer updates (AdamW, as the trainer) on u mini-batches of the
prompts; with r = π_θ/π_old per sampled token, every rule is gppo_loss.token_losses:
    GRPO: clipped tokens (A > 0, r > 1 + ε_high; A < 0, r < 1 − ε_low) get no gradient
    CISPO: every token −sg(clip(r))·A·logπ
    GPPO: clipped tokens keep the gradient β·(1 ± ε)·A (β1 on the low side, β2 on the high side)
At u = 1, r = 1 for every token and the rules give the same update bit for bit; the more updates per
batch, the further π_θ moves from π_old inside the batch and the more tokens are clipped. Measured
without sampling noise: success = the mean over all K prompts of the probability of a correct token,
and the entropy, both exact functions of W; every seed draws its prompts and sampling uniforms once,
shared by all rules (paired, common random numbers). Per point (u) and rule: mean success over the
steps (learning speed), final entropy, the clipped fractions, the share of
the gradient's per-token coefficients |∂L/∂logπ_t| on clipped tokens, the change of logπ of the clipped tokens per
update (how each rule moves their probability mass), and the mean success when learning from the
negative samples alone (positive advantages set to 0). Differences to GRPO are paired per seed (mean
± standard error).
Run:  python experiments/clip_mechanism.py          # ~30 s on 2 cores; writes experiments/results/clip_mechanism.json
      (and clip_mechanism.png if matplotlib is installed); docs/clip_mechanism.md explains the figure.
"""

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from gppo_loss import LossConfig, token_losses  # noqa: E402
from parts.cli import parse_config  # noqa: E402

RULES = {
    "GRPO": dict(mode="grpo"),
    "CISPO": dict(mode="cispo"),
    "GPPO β1=1": dict(mode="gppo", beta1=1.0),
    "GPPO β1=0.5": dict(mode="gppo", beta1=0.5),
    "GPPO β1=0.25": dict(mode="gppo", beta1=0.25),
}


@dataclass
class MechanismConfig:
    # fmt: off
    out: str = "experiments/results/clip_mechanism.json"   # the numbers, the figure beside it (.png); relative: to the
    #   repository
    seeds: int = 64                # paired seeds (one policy, one prompt stream and one sampling stream each)
    prompts: int = 64              # K: success and entropy are exact means over all of them
    tokens: int = 6                # V answer tokens per prompt
    correct: int = 2               # ... of which this many earn reward 1
    features: int = 8              # d: the prompts share W (V, d), so an update moves every prompt
    base_scale: float = 1.5        # SD of the fixed logits b_p (the start: success about correct / tokens)
    batch_prompts: int = 16        # prompts per rollout batch
    group_size: int = 8            # answers sampled per prompt
    steps: int = 30                # rollout batches
    updates: str = "1,2,4,8,16"    # optimizer updates per rollout batch: the knob of the clipped fraction
    lr: float = 0.2                # AdamW (no weight decay), constant: u = 16 clips about 4% of tokens
    eps_low: float = 0.2           # the paper's clip range
    eps_high: float = 0.28
    threads: int = 1               # torch threads (the tensors are small: one is fastest)
    # fmt: on

    def __post_init__(self):
        u = [int(x) for x in self.updates.split(",")]
        if (
            min(u) < 1
            or any(self.batch_prompts % x for x in u)
            or not 0 < self.correct < self.tokens
        ):
            raise ValueError(
                f"MechanismConfig: every updates value must divide batch_prompts "
                f"({self.batch_prompts}) and be >= 1, got {self.updates}; 0 < correct < tokens"
            )


def make_world(cfg, seed_base=0):
    """Per seed: fixed logits b (S, K, V), features x (S, K, d), the correct tokens (S, K, V) and,
    for every step, the prompts drawn (S, P) and the sampling uniforms (S, P, G), shared by every
    rule and every u."""
    g = torch.Generator().manual_seed(seed_base)
    S = cfg.seeds
    K = cfg.prompts
    V = cfg.tokens
    d = cfg.features
    base = cfg.base_scale * torch.randn(S, K, V, generator=g)
    x = torch.randn(S, K, d, generator=g)
    x = x / x.norm(dim=-1, keepdim=True)
    order = torch.rand(S, K, V, generator=g).argsort(-1)
    correct = torch.zeros(S, K, V).scatter_(-1, order[..., : cfg.correct], 1.0)
    # (T, S, P)
    prompts = torch.rand(cfg.steps, S, K, generator=g).argsort(-1)[..., : cfg.batch_prompts]
    # (T, S, P, G)
    uniforms = torch.rand(cfg.steps, S, cfg.batch_prompts, cfg.group_size, generator=g)
    return dict(base=base, x=x, correct=correct, prompts=prompts, uniforms=uniforms)


@torch.no_grad()
def exact_metrics(W, world) -> tuple:
    """W (..., S, V, d) -> (success, entropy), each (..., S): the probability of a correct token and
    the entropy of the policy, mean over all K prompts."""
    logp = torch.log_softmax(world["base"] + torch.einsum("...svd,skd->...skv", W, world["x"]), -1)
    p = logp.exp()
    return (p * world["correct"]).sum(-1).mean(-1), -(p * logp).sum(-1).mean(-1)


def group_advantages(rewards):
    """(S, P, G) rewards -> GRPO advantages per group (unbiased std, as gppo_loss's)."""
    return (rewards - rewards.mean(-1, keepdim=True)) / (rewards.std(-1, keepdim=True) + 1e-6)


def train(cfg, world, loss_cfgs: list, negatives_only: list, updates: int) -> list:
    """Every (rule, negatives only?) pair at one number of updates per rollout batch, all seeds at
    once: one weight tensor W (C, S, V, d) for the C pairs, one token_losses call per pair. Returns
    per pair the per-seed tensors: the success after each step (T, S), the final entropy, and sums
    over all updates of the tokens, the clipped tokens,
    |∂L/∂logπ| on all and on clipped tokens, and Δlogπ of the clipped tokens (per side)."""
    C = len(loss_cfgs)
    S = cfg.seeds
    V = cfg.tokens
    W = torch.zeros(C, S, V, cfg.features, requires_grad=True)
    opt = torch.optim.AdamW([W], lr=cfg.lr, weight_decay=0.0)
    keys = ("tokens", "low", "high", "coef", "coef_low", "coef_high", "dlogp_low", "dlogp_high")
    sums = {k: torch.zeros(C, S) for k in keys}
    negative = torch.tensor(negatives_only)[:, None, None, None]
    success = []
    per_update = cfg.batch_prompts // updates
    for t in range(cfg.steps):
        prompts = world["prompts"][t]  # (S, P)
        base = world["base"].gather(1, prompts[..., None].expand(-1, -1, V))  # (S, P, V)
        x = world["x"].gather(1, prompts[..., None].expand(-1, -1, cfg.features))  # (S, P, d)
        right = world["correct"].gather(1, prompts[..., None].expand(-1, -1, V))  # (S, P, V)
        # noqa: E731 (C,S,p,V)
        logits = lambda rows: base[:, rows] + torch.einsum("csvd,spd->cspv", W, x[:, rows])
        # sample from π_old
        with torch.no_grad():
            old_all = torch.log_softmax(logits(slice(None)), -1)  # (C, S, P, V)
            # (C, S, P, G): shared
            u = world["uniforms"][t].expand(C, -1, -1, -1).contiguous()
            answers = torch.searchsorted(old_all.exp().cumsum(-1), u).clamp(max=V - 1)
            rewards = right.expand(C, -1, -1, -1).gather(-1, answers)
            adv = group_advantages(rewards)
            adv = torch.where(negative, adv.clamp(max=0.0), adv)
            old = old_all.gather(-1, answers)
        for m in range(updates):
            rows = slice(m * per_update, (m + 1) * per_update)
            # (C, S, P/u, G)
            logp = torch.log_softmax(logits(rows), -1).gather(-1, answers[:, :, rows])
            logp.retain_grad()
            A = adv[:, :, rows]
            old_rows = old[:, :, rows]
            loss = sum(
                token_losses(logp[c], old_rows[c], A[c], loss_cfgs[c]).mean(dim=(1, 2)).sum()
                for c in range(C)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                coef = logp.grad.abs()  # |∂L/∂logπ_t|
                r = (logp - old_rows).exp()
                low = ((A < 0) & (r < 1 - cfg.eps_low)).float()
                high = ((A > 0) & (r > 1 + cfg.eps_high)).float()
                moved = torch.log_softmax(logits(rows), -1).gather(-1, answers[:, :, rows]) - logp
                for k, v in (
                    ("tokens", torch.ones_like(low)),
                    ("low", low),
                    ("high", high),
                    ("coef", coef),
                    ("coef_low", coef * low),
                    ("coef_high", coef * high),
                    ("dlogp_low", moved * low),
                    ("dlogp_high", moved * high),
                ):
                    sums[k] += v.sum(dim=(2, 3))
        success.append(exact_metrics(W.detach(), world)[0])
    success = torch.stack(success, 1)  # (C, T, S)
    entropy = exact_metrics(W.detach(), world)[1]
    return [
        dict(success=success[c], entropy=entropy[c], **{k: v[c] for k, v in sums.items()})
        for c in range(C)
    ]


def paired(x, y) -> tuple:
    """Mean and standard error over seeds of x − y (per-seed tensors)."""
    d = (x - y).double()
    return float(d.mean()), float(d.std() / math.sqrt(len(d))) if len(d) > 1 else 0.0


def summarize(runs: dict, negative_runs: dict) -> dict:
    """Per rule: seed means of the metrics and, against GRPO, paired differences (mean, SE)."""
    out = {}
    ref = runs["GRPO"]
    for rule, run in runs.items():
        auc = run["success"].mean(0)  # (S,) mean success over the steps
        neg_auc = negative_runs[rule]["success"].mean(0)
        low = run["low"].clamp(min=1)
        high = run["high"].clamp(min=1)
        per_seed = dict(
            success_auc=auc,
            entropy=run["entropy"],
            neg_success_auc=neg_auc,
            clip_low=run["low"] / run["tokens"],
            clip_high=run["high"] / run["tokens"],
            share_low=run["coef_low"] / run["coef"],
            share_high=run["coef_high"] / run["coef"],
            dlogp_low=run["dlogp_low"] / low,
            dlogp_high=run["dlogp_high"] / high,
        )
        out[rule] = {k: float(v.double().mean()) for k, v in per_seed.items()}
        out[rule]["vs_grpo"] = dict(
            success_auc=paired(auc, ref["success"].mean(0)),
            entropy=paired(run["entropy"], ref["entropy"]),
            neg_success_auc=paired(neg_auc, negative_runs["GRPO"]["success"].mean(0)),
        )
        out[rule]["success_curve"] = [float(v) for v in run["success"].mean(1)]
    return out


def main(cfg: MechanismConfig):
    torch.set_num_threads(cfg.threads)
    t0 = time.time()
    world = make_world(cfg)
    # W = 0
    start_success, start_entropy = exact_metrics(
        torch.zeros(cfg.seeds, cfg.tokens, cfg.features), world
    )
    loss_cfgs = [
        LossConfig(eps_low=cfg.eps_low, eps_high=cfg.eps_high, alpha=0.0, **o)
        for o in RULES.values()
    ]
    points = []
    for u in [int(x) for x in cfg.updates.split(",")]:
        trained = train(cfg, world, loss_cfgs * 2, [False] * len(RULES) + [True] * len(RULES), u)
        rules = summarize(
            dict(zip(RULES, trained[: len(RULES)])), dict(zip(RULES, trained[len(RULES) :]))
        )
        clipped = sum(rules[r]["clip_low"] + rules[r]["clip_high"] for r in RULES) / len(RULES)
        points.append(dict(updates=u, clipped=clipped, rules=rules))
        print(
            f"u={u:>2}: clipped {100 * clipped:5.2f}% (mean over rules); vs GRPO, mean success over "
            f"{cfg.steps} steps: "
            + ", ".join(
                f"{r} {rules[r]['vs_grpo']['success_auc'][0]:+.4f} ± {rules[r]['vs_grpo']['success_auc'][1]:.4f}"
                for r in RULES
                if r != "GRPO"
            )
        )
    out = dict(
        config=asdict(cfg),
        seconds=round(time.time() - t0, 1),
        start=dict(success=float(start_success.mean()), entropy=float(start_entropy.mean())),
        points=points,
    )
    path = os.path.join(ROOT, cfg.out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(f"wrote {cfg.out} ({out['seconds']} s)")
    plot(out, os.path.splitext(path)[0] + ".png")
    return out


def plot(out, path):
    """Six panels against the updates per rollout batch (and the clipped fraction they produce):
    success and entropy relative to GRPO, the share of the gradient's coefficients on clipped
    tokens, Δlogπ of the clipped negative and positive tokens per update, and learning from negative
    samples alone."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return print("matplotlib is not installed: no figure (the JSON holds every number)")
    points = out["points"]
    x = [math.log2(p["updates"]) for p in points]
    ticks = [f"{p['updates']}\n{100 * p['clipped']:.1f}%" for p in points]
    panels = [
        ("success_auc", "mean success over the steps, minus GRPO's", "vs"),
        ("entropy", "final entropy, minus GRPO's", "vs"),
        ("share", "share of |∂L/∂logπ| on clipped tokens", "share"),
        ("dlogp_low", "Δ log π of a clipped negative token, per update", "abs"),
        ("dlogp_high", "Δ log π of a clipped positive token, per update", "abs"),
        (
            "neg_success_auc",
            "learning from negative samples only:\nmean success, minus GRPO's",
            "vs",
        ),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.4))
    for ax, (key, title, kind) in zip(axes.flat, panels):
        for rule in RULES:
            rules = [p["rules"][rule] for p in points]
            if kind == "vs":  # paired difference to GRPO, ± 2 standard errors over seeds
                ax.errorbar(
                    x,
                    [r["vs_grpo"][key][0] for r in rules],
                    yerr=[2 * r["vs_grpo"][key][1] for r in rules],
                    label=rule,
                    marker="o",
                    markersize=3,
                    capsize=2,
                )
            elif kind == "share":
                share = [100 * (r["share_low"] + r["share_high"]) for r in rules]
                ax.plot(x, share, label=rule, marker="o", markersize=3)
            else:  # no clipped token at u = 1: no point
                ax.plot(x[1:], [r[key] for r in rules[1:]], label=rule, marker="o", markersize=3)
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.set_xticks(x, ticks, fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[1]:
        ax.set_xlabel("updates per rollout batch / tokens clipped", fontsize=8)
    axes[0][2].set_ylabel("%", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"wrote {path}")


if __name__ == "__main__":
    main(parse_config(MechanismConfig))
