"""The curves of one training run, from its metrics.jsonl: sft.py's or gppo.py's (told apart by
their records).

GPPO, against the RL step: on-policy accuracy (every sampled response at T=1, all generation rounds)
with its running mean over 5 steps, held-out greedy accuracy (the eval steps), token entropy, and
the fractions of tokens clipped low and high; the numbers the README quotes are printed (first step,
mean of the last 5 steps). SFT, against the step: the loss on assistant tokens and the learning
rate; printed: the first and last loss.

Run:  python experiments/plot_train.py --metrics=out/gppo/metrics.jsonl
--out=experiments/results/toy_gppo.png
      python experiments/plot_train.py --metrics=out/sft/metrics.jsonl --out=sft.png
The figure needs matplotlib, an optional package (requirements-extras.txt); the numbers print
without it.
"""

import json
import os
import statistics
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from parts.cli import parse_config  # noqa: E402


@dataclass
class PlotConfig:
    # fmt: off
    metrics: str = "out/gppo/metrics.jsonl"   # sft.py's or gppo.py's per-step log
    out: str = ""                             # the figure (.png); empty = only print the numbers
    title: str = ""                           # empty = "GPPO on the toy task" / "SFT on the toy task"
    # fmt: on


def load(path):
    """{step: record}; a step logged twice (a resumed run) keeps its last record; null values (a
    NaN, written as null) are left out, so a curve skips them."""
    records = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                r = {k: v for k, v in json.loads(line).items() if v is not None}
                records[r["step"]] = {**records.get(r["step"], {}), **r}
    return records


def is_rl(records) -> bool:
    """gppo.py's records have an on-policy accuracy; sft.py's a loss and no accuracy."""
    return any("accuracy" in r for r in records.values())


def summary(records) -> dict:
    if not is_rl(records):
        steps = sorted(s for s, r in records.items() if "loss" in r)
        return dict(
            kind="sft",
            steps=len(steps),
            first_loss=records[steps[0]]["loss"] if steps else None,
            last_loss=records[steps[-1]]["loss"] if steps else None,
            last_step=steps[-1] if steps else None,
        )
    steps = sorted(s for s, r in records.items() if "accuracy" in r)
    evals = sorted((s, r["eval_accuracy"]) for s, r in records.items() if "eval_accuracy" in r)
    return dict(
        kind="rl",
        first_step_accuracy=records[steps[0]]["accuracy"],
        last5_accuracy=statistics.fmean(records[s]["accuracy"] for s in steps[-5:]),
        held_out_first=evals[0][1] if evals else None,
        held_out_last=evals[-1][1] if evals else None,
        steps=len(steps),
    )


def main(cfg: PlotConfig):
    try:
        records = load(cfg.metrics)
    except (OSError, ValueError, KeyError) as e:
        fail(f"error: --metrics={cfg.metrics}: not a metrics.jsonl of sft.py or gppo.py ({e})")
    s = summary(records)
    if s["kind"] == "sft":
        print(
            f"{cfg.metrics}: SFT, {s['steps']} logged steps; loss {s['first_loss']} at the first, {s['last_loss']} "
            f"at step {s['last_step']}"
        )
    else:
        print(
            f"{cfg.metrics}: {s['steps']} steps; on-policy accuracy (T=1) step 1 {s['first_step_accuracy']:.3f}, "
            f"mean of the last 5 steps {s['last5_accuracy']:.3f}; held-out greedy {s['held_out_first']} -> "
            f"{s['held_out_last']}"
        )
    if not cfg.out:
        return
    try:
        import matplotlib
    except ImportError:
        fail(
            "error: the figure needs matplotlib, an optional package: `pip install -r requirements-extras.txt` (or "
            "`pip install matplotlib`); without --out the numbers above print alone"
        )
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plot_rl(records, plt) if s["kind"] == "rl" else plot_sft(records, plt)
    fig.suptitle(
        cfg.title or ("GPPO on the toy task" if s["kind"] == "rl" else "SFT on the toy task")
    )
    fig.tight_layout()
    fig.savefig(cfg.out, dpi=110)
    print(f"wrote {cfg.out}")


def fail(message: str):
    """One line on stderr, exit status 2 (what the project's entry points do on bad input)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def plot_sft(records, plt):
    steps = sorted(st for st, r in records.items() if "loss" in r)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    axes[0].plot(steps, [records[st]["loss"] for st in steps])
    axes[0].set(xlabel="SFT step", ylabel="nats per assistant token", title="loss")
    axes[1].plot(steps, [records[st]["lr"] for st in steps])
    axes[1].set(xlabel="SFT step", ylabel="learning rate", title="learning rate")
    return fig


def plot_rl(records, plt):
    steps = sorted(st for st, r in records.items() if "accuracy" in r)
    acc = [records[st]["accuracy"] for st in steps]
    running = [statistics.fmean(acc[max(0, i - 4) : i + 1]) for i in range(len(acc))]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(steps, acc, ".", alpha=0.4, label="on-policy, T=1")
    axes[0].plot(steps, running, label="on-policy, mean of 5 steps")
    evals = sorted((st, r["eval_accuracy"]) for st, r in records.items() if "eval_accuracy" in r)
    axes[0].plot([e[0] for e in evals], [e[1] for e in evals], "o-", label="held-out, greedy")
    # gppo.py --eval_k > 0
    avg_k = sorted((st, r["eval_avg_k"]) for st, r in records.items() if "eval_avg_k" in r)
    if avg_k:
        axes[0].plot(
            [e[0] for e in avg_k], [e[1] for e in avg_k], "s-", label="held-out, Avg@k at T=1"
        )
    top = max([0.5, *acc, *(e[1] for e in evals + avg_k)]) * 1.05
    axes[0].set(xlabel="RL step", ylabel="accuracy", ylim=(0, top), title="accuracy")
    axes[0].legend(fontsize=8)
    trained = [st for st in steps if "entropy" in records[st]]
    axes[1].plot(trained, [records[st]["entropy"] for st in trained])
    axes[1].set(xlabel="RL step", ylabel="nats per token", title="token entropy")
    for key, label in (
        ("clip_frac_low", "clipped low (A<0, r<1-eps_low)"),
        ("clip_frac_high", "clipped high (A>0, r>1+eps_high)"),
    ):
        axes[2].plot(trained, [100 * records[st][key] for st in trained], label=label)
    axes[2].set(xlabel="RL step", ylabel="% of tokens", title="clipped tokens")
    axes[2].legend(fontsize=8)
    return fig


if __name__ == "__main__":
    main(parse_config(PlotConfig))
