"""Tables of evaluation results: one column per results.json (eval.py writes them), a block of rows
per benchmark: problems, k, Avg@k, pass@j, mean reward, format failures, mean length, truncation
(rates in %).

    print(compare_files("out/eval/sft/results.json,out/eval/rl/results.json", "SFT,GPPO"))
    python results_table.py A/results.json,B/results.json [LABEL_A,LABEL_B]
A file that is not a readable results.json raises TableError, one line naming it. Standard library
only.
"""

import json
import sys

USAGE = "usage: python results_table.py A/results.json,B/results.json [LABEL_A,LABEL_B]"


class TableError(ValueError):
    """A results file that cannot be read as eval.py's results.json, or labels that do not match
    the files."""


def format_table(results_list: list, labels: list | None = None) -> str:
    """One table, a column per results dict, a block of metric rows per benchmark (rates in %)."""
    labels = labels or [
        r.get("model_label", r.get("model", f"run {i}")) for i, r in enumerate(results_list)
    ]
    names = list(dict.fromkeys(n for r in results_list for n in r["benchmarks"]))
    rows = [("benchmark", "metric", *labels)]
    for name in names:
        entries = [r["benchmarks"].get(name) for r in results_list]
        js = sorted({int(j) for b in entries if b for j in b["pass_at_k"]})
        metrics = [
            ("problems", lambda b: f"{b['problems']}"),
            ("k", lambda b: f"{b['k']}"),
            ("Avg@k %", lambda b: f"{100 * b['avg_at_k']:.2f}"),
        ]
        metrics += [
            (
                f"pass@{j} %",
                lambda b, j=str(j): (
                    f"{100 * b['pass_at_k'][j]:.2f}" if j in b["pass_at_k"] else "-"
                ),
            )
            for j in js
        ]
        metrics += [
            ("mean reward %", lambda b: f"{100 * b['mean_reward']:.2f}"),
            ("format fail %", lambda b: f"{100 * b['format_failure_rate']:.2f}"),
            ("mean length", lambda b: f"{b['mean_length']:.1f}"),
            ("truncated %", lambda b: f"{100 * b['truncated_rate']:.2f}"),
        ]
        for m, (metric, show) in enumerate(metrics):
            rows.append((name if m == 0 else "", metric, *[show(b) if b else "-" for b in entries]))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(w) if c < 2 else cell.rjust(w)
            for c, (cell, w) in enumerate(zip(row, widths))
        )
        for row in rows
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def compare_files(paths: str, labels: str = "") -> str:
    """The table of several results.json files (comma-separated paths), labelled by `labels` or the
    paths."""
    files = [p.strip() for p in paths.split(",") if p.strip()]
    names = [x.strip() for x in labels.split(",")] if labels else None
    if names is not None and len(names) != len(files):
        raise TableError(f"{len(names)} labels for {len(files)} files: give one label per file")
    results = []
    for path in files:
        try:
            results.append(json.load(open(path)))
        except (OSError, json.JSONDecodeError) as e:
            raise TableError(f"cannot read {path}: {e}") from None
        if not isinstance(results[-1], dict) or "benchmarks" not in results[-1]:
            raise TableError(f"{path} is not a results.json written by eval.py (no 'benchmarks')")
    return format_table(results, names)


if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(USAGE)
        sys.exit(0)
    if len(sys.argv) not in (2, 3):
        sys.exit(USAGE)
    try:
        print(compare_files(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else ""))
    except TableError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
