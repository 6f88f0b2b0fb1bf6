"""experiments/readme_table.py: the README's ablation table made from an ablation.json, row by row
against hand-written rows, and the check that fails when the README and the JSON differ."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "experiments", "readme_table.py")


def stats(low: float, high: float) -> dict:
    """The part of one arm's stats readme_table reads: [mean, sd] over seeds of the clipped
    tokens' share of the gradient's coefficients, % by side."""
    return {"stats": {"share_low_pct": [low, 0.1], "share_high_pct": [high, 0.0]}}


RESULTS = {
    "arms": {
        "loss": {
            "GPPO": stats(0.10, 0.05),
            "GRPO": stats(0.0, 0.01),
            "GPPO β1=0.5": stats(1.5, 0.25),
        },
        "code": {
            "soft": {"stats": {"partial_credit": [0.0584, 0.004]}},
            "binary": {"stats": {"partial_credit": [0.0, 0.0]}},
        },
        "filter": {
            "filter on": {"stats": {"dropped_pct": [14.23, 1.4]}},
            "filter off": {"stats": {"dropped_pct": [0.0, 0.0]}},
        },
        "sft": {"a": {"per_seed": {}}, "b": {"per_seed": {}}},
    },
    "verdicts": [
        {
            "claim": "loss: GPPO > GRPO",
            "n": 8,
            "df": 7,
            "effect": -0.0123,
            "ci95": [-0.05, 0.0254],
            "verdict": "untestable in this regime (clipped tokens carry 0.15% of ...)",
        },
        {
            "claim": "code: soft > binary",
            "n": 8,
            "df": 7,
            "effect": 0.0456,
            "ci95": [0.02, 0.071],
            "ci_holm": [0.0049, 0.0863],
            "level": 0.025,
            "family_size": 2,
            "mde": 0.0312,
            "verdict": "reproduced",
        },
        {
            "claim": "loss: GPPO β1=0.5 > GPPO",
            "n": 8,
            "df": 7,
            "effect": -0.2,
            "ci95": [-0.3, -0.1],
            "ci_holm": [-0.35, -0.05],
            "level": 0.0125,
            "family_size": 2,
            "mde": 0.1234,
            "verdict": "reversed",
        },
        {
            "claim": "filter: filter on > filter off",
            "n": 8,
            "df": 7,
            "effect": 0.01,
            "ci95": [-0.01, 0.03],
            "ci_holm": [-0.02, 0.04],
            "level": 0.05 / 3,
            "family_size": 2,
            "mde": 0.04,
            "verdict": "not resolved (minimum detectable effect 0.040 at 80% power)",
        },
        {
            "claim": "sft_easy: a > b",
            "n": 5,
            "df": 4,
            "effect": 0.1,
            "ci95": [-0.2, 0.4],
            "ci_holm": [-0.3, 0.5],
            "level": 0.05,
            "family_size": 2,
            "mde": 0.4521,
            "verdict": "not resolved (minimum detectable effect 0.452 at 80% power)",
        },
    ],
}
ROWS = [
    "| claim (paper) | seeds (df) | effect, 95% interval | "
    "Holm-level interval (family of 2 testable claims) | "
    "MDE | treatment check (favoured / other) | verdict |",
    "|---|---|---|---|---|---|---|",
    "| loss: GPPO > GRPO (Fig. 2) | 8 (7) | −0.012 [−0.050, +0.025] | — | — | "
    "clipped tokens' share of the gradient 0.15 / 0.01% | "
    "untestable in this regime (clipped tokens carry 0.15% of ...) |",
    "| code: soft > binary (Fig. 3) | 8 (7) | +0.046 [+0.020, +0.071] | [+0.005, +0.086] at 97.50% | "
    "0.031 | partial credit 0.058 / 0.000 | **reproduced** |",
    "| loss: GPPO β1=0.5 > GPPO (the authors) | 8 (7) | −0.200 [−0.300, −0.100] | "
    "[−0.350, −0.050] at 98.75% | 0.123 | clipped tokens' share of the gradient 1.75 / 0.15% | "
    "**reversed** |",
    "| filter: filter on > filter off (Fig. 5) | 8 (7) | +0.010 [−0.010, +0.030] | "
    "[−0.020, +0.040] at 98.33% | 0.040 | zero-advantage groups dropped 14.2 / 0.0% | "
    "not resolved (minimum detectable effect 0.040 at "
    "80% power) |",
    "| sft_easy: a > b (Table 2) | 5 (4) | +0.100 [−0.200, +0.400] | [−0.300, +0.500] at 95.00% | 0.452 | "
    "— | not resolved (minimum detectable effect 0.452 at 80% power) |",
]


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=ROOT)


def test_the_table_against_hand_written_rows(tmp_path):
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(RESULTS))
    done = run(f"--results={path}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("<!-- ablation table: made by experiments/readme_table.py from ")
    assert lines[1:-1] == ROWS and lines[-1] == "<!-- end of the ablation table -->"


def test_the_readme_check_fails_when_the_readme_and_the_json_differ(tmp_path):
    path = tmp_path / "ablation.json"
    path.write_text(json.dumps(RESULTS))
    readme = tmp_path / "README.md"
    # the markers as a README holds them, with an older table between them
    before = (
        "# x\n\ntext before\n"
        "<!-- ablation table: made by experiments/readme_table.py from old.json; edit the JSON, not "
        "this -->\n| old |\n<!-- end of the ablation table -->\ntext after\n"
    )
    readme.write_text(before)
    assert run(f"--results={path}", f"--readme={readme}").returncode == 1
    assert run(f"--results={path}", f"--readme={readme}", "--write=true").returncode == 0
    text = readme.read_text()
    assert text.startswith("# x\n\ntext before\n") and text.endswith("\ntext after\n")
    assert "\n".join(ROWS) in text and "| old |" not in text
    assert run(f"--results={path}", f"--readme={readme}").returncode == 0
    # one number of the JSON changes: the README no longer matches it
    changed = json.loads(json.dumps(RESULTS))
    changed["verdicts"][1]["ci95"][0] = 0.021
    path.write_text(json.dumps(changed))
    failed = run(f"--results={path}", f"--readme={readme}")
    assert failed.returncode == 1 and "differs" in failed.stderr
    # a README with CRLF line ends keeps them
    path.write_text(json.dumps(RESULTS))
    readme.write_bytes(before.replace("\n", "\r\n").encode())
    assert run(f"--results={path}", f"--readme={readme}").returncode == 1
    assert run(f"--results={path}", f"--readme={readme}", "--write=true").returncode == 0
    assert readme.read_bytes() == text.replace("\n", "\r\n").encode()
    assert run(f"--results={path}", f"--readme={readme}").returncode == 0
    # bad input: one line, exit 2. No markers, two tables (the second could be stale), no README,
    # no JSON, a JSON without verdicts
    two = text.replace("text after", text)
    for bad_readme in ("# no table\n", two):
        readme.write_text(bad_readme)
        failed = run(f"--results={path}", f"--readme={readme}")
        assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"arms": {}}))
    # the results of the protocols before 2026-12-07 hold their verdicts as a dict
    older = tmp_path / "older.json"
    older.write_text(json.dumps({"verdicts": {"loss": "reproduced"}}))
    for args in (
        [f"--results={path}", f"--readme={tmp_path / 'none.md'}"],
        [f"--results={tmp_path / 'none.json'}"],
        [f"--results={other}"],
        [f"--results={older}"],
    ):
        failed = run(*args)
        assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
