"""The curves of one GPPO run, from its metrics.jsonl: what the README's toy figure shows.

Panels, against the RL step: on-policy accuracy (every sampled response at T=1, all generation rounds) with
its running mean over 5 steps, held-out greedy accuracy (the eval steps), token entropy, and the fractions of
tokens clipped low and high. Also prints the numbers the README quotes (first step, mean of the last 5 steps).

Run:  python experiments/plot_train.py --metrics=out/gppo/metrics.jsonl --out=experiments/results/toy_gppo.png
(needs matplotlib for the figure, which is not a dependency; the numbers print without it)
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
    metrics: str = "out/gppo/metrics.jsonl"   # gppo.py's per-step log
    out: str = ""                             # the figure (.png); empty = only print the numbers
    title: str = "GPPO on the toy task"


def load(path):
    """{step: record}; a step logged twice (a resumed run) keeps its last record."""
    records = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            records[r["step"]] = {**records.get(r["step"], {}), **r}
    return records


def summary(records) -> dict:
    steps = sorted(s for s, r in records.items() if "accuracy" in r)
    evals = sorted((s, r["eval_accuracy"]) for s, r in records.items() if "eval_accuracy" in r)
    return dict(first_step_accuracy=records[steps[0]]["accuracy"],
                last5_accuracy=statistics.fmean(records[s]["accuracy"] for s in steps[-5:]),
                held_out_first=evals[0][1] if evals else None, held_out_last=evals[-1][1] if evals else None,
                steps=len(steps))


def main(cfg: PlotConfig):
    records = load(cfg.metrics)
    s = summary(records)
    print(f"{cfg.metrics}: {s['steps']} steps; on-policy accuracy (T=1) step 1 {s['first_step_accuracy']:.3f}, "
          f"mean of the last 5 steps {s['last5_accuracy']:.3f}; held-out greedy {s['held_out_first']} -> {s['held_out_last']}")
    if not cfg.out:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = sorted(st for st, r in records.items() if "accuracy" in r)
    acc = [records[st]["accuracy"] for st in steps]
    running = [statistics.fmean(acc[max(0, i - 4):i + 1]) for i in range(len(acc))]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(steps, acc, ".", alpha=0.4, label="on-policy, T=1")
    axes[0].plot(steps, running, label="on-policy, mean of 5 steps")
    evals = sorted((st, r["eval_accuracy"]) for st, r in records.items() if "eval_accuracy" in r)
    axes[0].plot([e[0] for e in evals], [e[1] for e in evals], "o-", label="held-out, greedy")
    avg_k = sorted((st, r["eval_avg_k"]) for st, r in records.items() if "eval_avg_k" in r)   # gppo.py --eval_k > 0
    if avg_k:
        axes[0].plot([e[0] for e in avg_k], [e[1] for e in avg_k], "s-", label="held-out, Avg@k at T=1")
    axes[0].set(xlabel="RL step", ylabel="accuracy", ylim=(0, max([0.5, *acc, *(e[1] for e in evals + avg_k)]) * 1.05), title="accuracy")
    axes[0].legend(fontsize=8)
    trained = [st for st in steps if "entropy" in records[st]]
    axes[1].plot(trained, [records[st]["entropy"] for st in trained])
    axes[1].set(xlabel="RL step", ylabel="nats per token", title="token entropy")
    for key, label in (("clip_frac_low", "clipped low (A<0, r<1-eps_low)"), ("clip_frac_high", "clipped high (A>0, r>1+eps_high)")):
        axes[2].plot(trained, [100 * records[st][key] for st in trained], label=label)
    axes[2].set(xlabel="RL step", ylabel="% of tokens", title="clipped tokens")
    axes[2].legend(fontsize=8)
    fig.suptitle(cfg.title)
    fig.tight_layout()
    fig.savefig(cfg.out, dpi=110)
    print(f"wrote {cfg.out}")


if __name__ == "__main__":
    main(parse_config(PlotConfig))
