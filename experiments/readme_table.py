"""The README's verdict table of an ablation, made from its ablation.json (experiments/ablate.py),
so that every number the README shows is one the JSON holds.

One row per claim: the paired seeds and degrees of freedom, the effect (favoured − other, on the
claim's metric) with its unadjusted 95% interval and its Holm-level interval (the level of the Holm
step that decided it: it excludes 0 exactly when the claim is resolved), the minimum detectable
effect at that level (80% power), the treatment check (what the compared rule changes, each arm's
mean over seeds: for a clipping claim the share of the gradient's per-token coefficients on
clipped tokens, under the threshold in both arms making it untestable; the zero-advantage groups
the filter drops; the partial credit a soft code reward adds), and the verdict. In the README the
table sits between the two marker lines below; --write replaces what is between them, and without
it the README's table is checked against the JSON (exit 1 if they differ).

    python experiments/readme_table.py --results=experiments/results/ablate_2026-12-07/ablation.json
    python experiments/readme_table.py --results=... --readme=README.md --write=true  # put it there
    python experiments/readme_table.py --results=... --readme=README.md               # check it
"""

import json
import os
import sys
from dataclasses import dataclass
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from parts.cli import parse_config  # noqa: E402

BEGIN = (
    "<!-- ablation table: made by experiments/readme_table.py from {results}; "
    "edit the JSON, not this -->"
)
END = "<!-- end of the ablation table -->"
# the paper's figure or table behind each arm's claims (arXiv 2508.07629)
PAPER = {
    "loss": "Fig. 2",
    "loss_off": "Fig. 2, off-policy",
    "alpha": "Table 6",
    "filter": "Fig. 5",
    "code": "Fig. 3",
    "sft_easy": "Table 2",
    "sft_hard": "Table 2",
}
# the β1 claims test the authors' later advice (β1 = 0.25-0.5 against entropy collapse), not the
# paper
AUTHORS = "the authors"


@dataclass
class ReadmeTableConfig:
    # fmt: off
    results: str = ""    # an ablation.json of experiments/ablate.py's, in experiments/results/
    readme: str = ""     # a README holding the marker lines; empty = print the table
    write: bool = False  # replace the README's table (else check it: exit 1 if it differs)
    # fmt: on

    def __post_init__(self):
        if not self.results:
            raise ValueError("give --results=PATH (an ablation.json)")


def signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def interval(lo_hi) -> str:
    lo, hi = lo_hi
    return f"[{signed(lo)}, {signed(hi)}]"


class Treatment(NamedTuple):
    """What an arm's rule changes, as experiments/ablate.py's run stats measure it."""

    label: str
    keys: tuple  # the stats summed (mean over seeds of each)
    digits: int
    unit: str


# The clipping claims: the share of the gradient's coefficients on clipped tokens (low + high); the
# filter: the zero-advantage groups it drops; the code reward: the partial credit a soft reward adds
# (mean reward − share fully correct). α and the SFT data have none to show.
CLIPPED = Treatment(
    "clipped tokens' share of the gradient", ("share_low_pct", "share_high_pct"), 2, "%"
)
TREATMENT = {
    "loss": CLIPPED,
    "loss_off": CLIPPED,
    "loss16": CLIPPED,
    "filter": Treatment("zero-advantage groups dropped", ("dropped_pct",), 1, "%"),
    "code": Treatment("partial credit", ("partial_credit",), 3, ""),
}


def treatment_cell(out: dict, arm: str, favoured: str, other: str) -> str:
    """'label a / b unit': the favoured and the other arm's treatment measure (mean over seeds);
    '—' where the claim has none (α, the SFT data) or the runs did not log it."""
    if arm not in TREATMENT:
        return "—"
    t = TREATMENT[arm]
    variants = out["arms"].get(arm, {})
    values = []
    for variant in (favoured, other):
        stats = variants.get(variant, {}).get("stats", {})
        if any(stats.get(k, [None])[0] is None for k in t.keys):
            return "—"
        values.append(sum(stats[k][0] for k in t.keys))
    return f"{t.label} {values[0]:.{t.digits}f} / {values[1]:.{t.digits}f}{t.unit}"


def table(out: dict) -> list[str]:
    """The markdown lines of the verdict table of ablation.json's `out`."""
    family = max((v.get("family_size", 0) for v in out["verdicts"]), default=0)
    lines = [
        "| claim (paper) | seeds (df) | effect, 95% interval | "
        f"Holm-level interval (family of {family} testable claims) | "
        "MDE | treatment check (favoured / other) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in out["verdicts"]:
        arm, rest = v["claim"].split(": ", 1)
        favoured, other = rest.split(" > ")
        seeds = f"{v['n']} ({v['df']})" if "n" in v else "—"
        effect = f"{signed(v['effect'])} {interval(v['ci95'])}" if "effect" in v else "—"
        holm = (
            f"{interval(v['ci_holm'])} at {100 * (1 - v['level']):.2f}%" if "ci_holm" in v else "—"
        )
        verdict = v["verdict"]
        if verdict in ("reproduced", "reversed"):
            verdict = f"**{verdict}**"
        mde = f"{v['mde']:.3f}" if "mde" in v else "—"  # none outside Holm's family
        source = AUTHORS if "β1" in favoured else PAPER.get(arm, "—")
        lines.append(
            f"| {v['claim']} ({source}) | {seeds} | {effect} | {holm} | {mde} | "
            f"{treatment_cell(out, arm, favoured, other)} | {verdict} |"
        )
    return lines


def block(out: dict, results: str) -> str:
    return "\n".join([BEGIN.format(results=results), *table(out), END])


def main(cfg: ReadmeTableConfig) -> int:
    try:
        out = json.load(open(cfg.results))
        if not isinstance(out, dict) or not isinstance(out.get("verdicts"), list):
            # e.g. the committed results of the protocols before 2026-12-07 (a dict of verdicts)
            raise TypeError("its 'verdicts' is not a list")
        made = block(out, os.path.relpath(os.path.abspath(cfg.results), ROOT))
    except (OSError, ValueError) as error:
        print(f"error: {cfg.results}: {error}", file=sys.stderr)
        return 2
    except (KeyError, TypeError) as error:  # not an ablation.json of experiments/ablate.py's
        print(
            f"error: {cfg.results}: not an ablation.json of experiments/ablate.py's: {error}",
            file=sys.stderr,
        )
        return 2
    if not cfg.readme:
        print(made)
        return 0
    try:
        # newline="": a README with CRLF line ends keeps them
        text = open(cfg.readme, newline="").read()
    except OSError as error:
        print(f"error: {cfg.readme}: {error}", file=sys.stderr)
        return 2
    opening = BEGIN.split("{results}")[0]
    start = text.find(opening)
    end = text.find(END, start)
    if start < 0 or end < 0 or text.count(opening) > 1:
        print(
            f"error: {cfg.readme}: needs exactly one ablation table between its marker lines",
            file=sys.stderr,
        )
        return 2
    shown = text[start : end + len(END)]
    if cfg.write:
        ends = made.replace("\n", "\r\n") if "\r\n" in text else made
        with open(cfg.readme, "w", newline="") as f:
            f.write(text[:start] + ends + text[end + len(END) :])
        print(f"wrote the table into {cfg.readme}")
        return 0
    if shown.replace("\r\n", "\n") != made:
        print(
            f"{cfg.readme}: its ablation table differs from {cfg.results}'s; "
            "rerun with --write=true",
            file=sys.stderr,
        )
        return 1
    print(f"{cfg.readme}: its ablation table is {cfg.results}'s")
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_config(ReadmeTableConfig)))
