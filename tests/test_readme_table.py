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
        "loss": {"GPPO": stats(0.10, 0.05), "GRPO": stats(0.0, 0.01)},
        "code": {"soft": stats(0.02, 0.0), "binary": stats(0.01, 0.0)},
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
            "verdict": "reproduced",
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
            "verdict": "not resolved (minimum detectable effect 0.452 at 80% power)",
        },
    ],
}
ROWS = [
    "| claim (paper) | seeds (df) | effect, 95% interval | Holm-level interval (2 claims) | "
    "gradient share on clipped tokens, % | verdict |",
    "|---|---|---|---|---|---|",
    "| loss: GPPO > GRPO (Fig. 2) | 8 (7) | −0.012 [−0.050, +0.025] | — | 0.15 / 0.01 | "
    "untestable in this regime (clipped tokens carry 0.15% of ...) |",
    "| code: soft > binary (Fig. 3) | 8 (7) | +0.046 [+0.020, +0.071] | [+0.005, +0.086] at 97.50% | "
    "0.02 / 0.01 | **reproduced** |",
    "| sft_easy: a > b (Table 2) | 5 (4) | +0.100 [−0.200, +0.400] | [−0.300, +0.500] at 95.00% | — | "
    "not resolved (minimum detectable effect 0.452 at 80% power) |",
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
    readme.write_text(
        "# x\n\ntext before\n"
        "<!-- ablation table: made by experiments/readme_table.py from old.json; edit the JSON, not "
        "this -->\n| old |\n<!-- end of the ablation table -->\ntext after\n"
    )
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
    # a README without the markers, a missing JSON: one line, exit 2
    readme.write_text("# no table\n")
    assert run(f"--results={path}", f"--readme={readme}").returncode == 2
    missing = run(f"--results={tmp_path / 'none.json'}")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
