"""The verdicts of every committed Countdown ablation, recomputed with the valid rule
(experiments/verdicts.py).

The first ablation tables called a difference "reproduced" or "reversed" beyond 2 standard errors on
a normal scale, 3 seeds per arm, no correction for the number of claims: with no true effect at all,
about 0.7 of a 10-claim table would hold at least one such word. Here every claim of each committed
protocol is tested again on its own pre-registered metric (the one in its JSON file), with the arms
paired by seed (every arm of a protocol ran seeds 0, 1, 2 from the same base model or data seed), a
t test, and Holm's correction over the claims of that protocol (one protocol = one family). Beside
each claim: the old rule's effect, 2 × SE and word, for the record. Also, not a verdict: the mean
on-policy accuracy over the steps after the 10 warmup steps, paired by seed, the metric the next
protocol pre-registers; its per-seed spread sets that protocol's minimum detectable effects. Run:
python experiments/committed_verdicts.py
      # prints the tables, writes experiments/results/verdicts_corrected.json
"""

import json
import os
import statistics
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from experiments.verdicts import Claim, family_verdicts  # noqa: E402
from parts.cli import parse_config  # noqa: E402

RESULTS = os.path.join(ROOT, "experiments", "results")
WARMUP = 10  # gppo.py's warmup_steps in every committed run
MIXED = "mixed (the difficulty rule)"
CORRECT = "only-correct (--keep=correct)"

# per protocol: name, the JSON files, the metric, and its claims (name, favoured, other) as paths
# into the files
FAMILIES = [
    dict(
        name="4-number prompts, 30 steps (protocol ef038a0, run 2026-12-04/05)",
        key="countdown",
        metric="held-out Avg@4 at step 30 (100 4-number problems); code: eval.py Avg@4 on 40 programs; sft: "
        "eval.py Avg@4 (T = 0.6) of the SFT models on 100 easy / hard problems",
        claims=[
            (
                "GPPO > GRPO, 8 updates",
                ("countdown/ablation.json", "loss", "GPPO"),
                ("loss", "GRPO"),
            ),
            (
                "GPPO > CISPO, 8 updates",
                ("countdown/ablation.json", "loss", "GPPO"),
                ("loss", "CISPO"),
            ),
            (
                "GPPO > GRPO, 16 updates",
                ("countdown/ablation.json", "loss16", "GPPO"),
                ("loss16", "GRPO"),
            ),
            (
                "GPPO > CISPO, 16 updates",
                ("countdown/ablation.json", "loss16", "GPPO"),
                ("loss16", "CISPO"),
            ),
            ("α = 0.1 > 0", ("countdown/ablation.json", "alpha", "α=0.1"), ("alpha", "α=0")),
            ("α = 0.1 > 0.2", ("countdown/ablation.json", "alpha", "α=0.1"), ("alpha", "α=0.2")),
            (
                "filter on > off",
                ("countdown/ablation.json", "filter", "filter on"),
                ("filter", "filter off"),
            ),
            (
                "soft > binary code reward",
                ("countdown/ablation.json", "code", "soft"),
                ("code", "binary"),
            ),
            (
                "SFT easy: only-correct > mixed",
                ("countdown/ablation_sft.json", "easy", CORRECT),
                ("easy", MIXED),
            ),
            (
                "SFT hard: mixed > only-correct",
                ("countdown/ablation_sft.json", "hard", MIXED),
                ("hard", CORRECT),
            ),
        ],
    ),
    dict(
        name="3-number prompts, loss arm, 60 steps (protocol a93aa16, run 2026-12-06)",
        key="countdown3",
        metric="held-out Avg@4 at step 60 (100 3-number problems)",
        claims=[
            (
                "GPPO > GRPO, 8 updates",
                ("countdown3/ablation.json", "loss", "GPPO"),
                ("loss", "GRPO"),
            ),
            (
                "GPPO > CISPO, 8 updates",
                ("countdown3/ablation.json", "loss", "GPPO"),
                ("loss", "CISPO"),
            ),
        ],
    ),
    dict(
        name="3-number prompts, every arm, 30 steps (protocol b0292ad, run 2026-12-06)",
        key="countdown3_all",
        metric="held-out Avg@4 at step 30 (100 3-number problems); code: eval.py Avg@4 on 40 programs; sft: "
        "eval.py Avg@4 (T = 0.6) of the SFT models on 100 easy / hard problems",
        claims=[
            (
                "GPPO > GRPO, 8 updates",
                ("countdown3_all/ablation.json", "loss", "GPPO"),
                ("loss", "GRPO"),
            ),
            (
                "GPPO > CISPO, 8 updates",
                ("countdown3_all/ablation.json", "loss", "GPPO"),
                ("loss", "CISPO"),
            ),
            (
                "GPPO > GRPO, 16 updates",
                ("countdown3_all/ablation.json", "loss16", "GPPO"),
                ("loss16", "GRPO"),
            ),
            (
                "GPPO > CISPO, 16 updates",
                ("countdown3_all/ablation.json", "loss16", "GPPO"),
                ("loss16", "CISPO"),
            ),
            ("α = 0.1 > 0", ("countdown3_all/ablation.json", "alpha", "α=0.1"), ("alpha", "α=0")),
            (
                "α = 0.1 > 0.2",
                ("countdown3_all/ablation.json", "alpha", "α=0.1"),
                ("alpha", "α=0.2"),
            ),
            (
                "filter on > off",
                ("countdown3_all/ablation.json", "filter", "filter on"),
                ("filter", "filter off"),
            ),
            (
                "soft > binary code reward",
                ("countdown3_all/ablation.json", "code", "soft"),
                ("code", "binary"),
            ),
            (
                "SFT easy: only-correct > mixed",
                ("countdown3_all/ablation.json", "easy", CORRECT),
                ("easy", MIXED),
            ),
            (
                "SFT hard: mixed > only-correct",
                ("countdown3_all/ablation.json", "hard", MIXED),
                ("hard", CORRECT),
            ),
        ],
    ),
    dict(
        name="SFT follow-up: only-correct at 2 epochs vs mixed at 1 (protocol fc77b57, run 2026-12-06)",
        key="sft_followup",
        metric="eval.py Avg@4 (T = 0.6) of the SFT models on 100 easy / hard problems",
        claims=[
            (
                "SFT easy: only-correct (2 epochs) > mixed",
                ("countdown/sft_followup.json", "easy", "only-correct, 2 epochs"),
                ("countdown/ablation_sft.json", "easy", MIXED),
            ),
            (
                "SFT hard: mixed > only-correct (2 epochs)",
                ("countdown/ablation_sft.json", "hard", MIXED),
                ("countdown/sft_followup.json", "hard", "only-correct, 2 epochs"),
            ),
        ],
    ),
]


@dataclass
class CommittedVerdictsConfig:
    # fmt: off
    out: str = "experiments/results/verdicts_corrected.json"   # the recomputed verdicts (relative: to the repository)
    # fmt: on


def load(path):
    with open(os.path.join(RESULTS, path)) as f:
        return json.load(f)


def per_seed(ref, default_file) -> tuple:
    """(final metric per seed, the run's record or None) of one arm: ref = ([file,] arm or kind,
    label)."""
    file, where, label = ref if len(ref) == 3 else (default_file, *ref)
    data = load(file)
    if "per_seed" in data and "arms" not in data:  # the follow-up's file
        return data["per_seed"][label][where], None
    # the sft arm: eval.py Avg@4 of the SFT models
    if where in ("easy", "hard"):
        return data["arms"]["sft"][label]["per_seed"][where], None
    record = data["arms"][where][label]
    return record["final"], record


def old_rule(favoured, other) -> dict:
    """The retracted rule, as ablate.py computed it: effect beyond 2 × sqrt(s_a²/n_a + s_b²/n_b),
    normal scale."""
    se = (
        statistics.variance(favoured) / len(favoured) + statistics.variance(other) / len(other)
    ) ** 0.5
    effect = statistics.fmean(favoured) - statistics.fmean(other)
    word = "reproduced" if effect > 2 * se else "reversed" if effect < -2 * se else "not reproduced"
    return dict(effect=effect, two_se=2 * se, verdict=word)


def on_policy_after_warmup(record) -> list:
    """Per seed: the mean on-policy accuracy over the logged steps after the warmup (None without a
    curve)."""
    if record is None or "series" not in record:
        return None
    return [
        statistics.fmean(v for s, v in c if s > WARMUP) if any(s > WARMUP for s, _ in c) else None
        for c in record["series"]["accuracy"]
    ]


def recompute(family) -> dict:
    rows = []
    claims = []
    explore = []
    for name, fav_ref, other_ref in family["claims"]:
        favoured, fav_record = per_seed(fav_ref, None)
        other, other_record = per_seed(other_ref, fav_ref[0])
        claims.append(Claim(name, favoured, other, paired=True))
        rows.append(dict(claim=name, favoured=favoured, other=other, old=old_rule(favoured, other)))
        a = on_policy_after_warmup(fav_record)
        b = on_policy_after_warmup(other_record)
        # (the code arm's 12 steps leave 2 after warmup)
        if a and b:
            explore.append(Claim(name, a, b, paired=True))
    for row, v in zip(rows, family_verdicts(claims)):
        row["new"] = v
    out = dict(name=family["name"], metric=family["metric"], claims=rows)
    if explore:
        out["on_policy_after_warmup"] = dict(
            what=f"not a verdict (not the pre-registered metric): per seed, mean on-policy accuracy over the steps "
            f"after the warmup ({WARMUP + 1} to the last); paired t, Holm over these claims",
            claims=[
                dict(
                    claim=c.name,
                    favoured=c.favoured,
                    other=c.other,
                    **{k: v[k] for k in ("effect", "se", "df", "p", "p_holm", "ci95", "ci_holm")},
                    sd_diff=statistics.stdev(a - b for a, b in zip(c.favoured, c.other)),
                )
                for c, v in zip(explore, family_verdicts(explore))
            ],
        )
    return out


def pval(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def short(verdict: str) -> str:
    return verdict.split(" (")[0] if verdict.startswith("not resolved") else f"**{verdict}**"


def main(cfg: CommittedVerdictsConfig):
    families = [dict(recompute(f), key=f["key"]) for f in FAMILIES]
    out = dict(
        date="2026-12-07",
        rule=__doc__.split("\n\n")[1].replace("\n", " "),
        alpha=0.05,
        families={f.pop("key"): f for f in families},
    )
    with open(os.path.join(ROOT, cfg.out), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    for key, fam in out["families"].items():
        print(f"\n## {fam['name']}\nmetric: {fam['metric']}\n")
        print(
            "| claim | effect | 95% CI | Holm-adjusted CI (level) | p (Holm) | verdict | old rule: 2 × SE, word |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in fam["claims"]:
            v = r["new"]
            o = r["old"]
            print(
                f"| {r['claim']} | {v['effect']:+.3f} | [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] | "
                f"[{v['ci_holm'][0]:+.3f}, {v['ci_holm'][1]:+.3f}] ({1 - v['level']:.4f}) | {pval(v['p'])} "
                f"({v['p_holm']:.3f}) | {short(v['verdict'])}, MDE {v['mde']:.3f} | "
                f"{o['two_se']:.3f}, {o['verdict']} |"
            )
        explore = fam.get("on_policy_after_warmup", {}).get("claims", [])
        if explore:
            print(
                f"\nNot a verdict: mean on-policy accuracy over steps {WARMUP + 1} to the last, paired by seed\n"
            )
            print(
                "| claim | effect | 95% CI | p (Holm) | SD of the per-seed differences |\n|---|---|---|---|---|"
            )
        for c in explore:
            print(
                f"| {c['claim']} | {c['effect']:+.4f} | [{c['ci95'][0]:+.4f}, {c['ci95'][1]:+.4f}] | {c['p']:.3f} "
                f"({c['p_holm']:.3f}) | {c['sd_diff']:.4f} |"
            )
    print(f"\nwrote {cfg.out}")


if __name__ == "__main__":
    main(parse_config(CommittedVerdictsConfig))
