"""How dense the code reads: per group of files, the share of lines over 100 characters, paired
assignments (`a, b = x, y`) per 1,000 lines, the mean line length, and the size of the root files
and of LLMEngine.

    python tools/code_density.py            # the story files, the parts, and the size limits of the reading pass
    python tools/code_density.py --json     # the same numbers as JSON

The anchors this project reads against (nanoGPT, nano-vllm, gpt-fast) keep 0.1-5.7% of lines over
100 characters and 2-7 paired assignments per 1,000 lines. A paired assignment is an `Assign` whose
single target and value are both tuples (what a reader must unzip to follow two values); unpacking a
call's result (`a, b = f()`) is not one.
"""

import ast
import glob
import json
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from parts.cli import parse_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORY = [
    "model.py",
    "data.py",
    "distill.py",
    "sft.py",
    "rollout.py",
    "reward.py",
    "gppo_loss.py",
    "gppo.py",
    "eval.py",
]
LIMITS = {"gppo.py": 620, "rollout.py": 560, "model.py": 552}  # root files' line budgets
ROOT_TOTAL = 5000


def density(paths: list[str]) -> dict:
    lines = long_lines = paired = characters = 0
    for path in paths:
        with open(path) as file:
            source = file.read()
        text_lines = source.splitlines()
        lines += len(text_lines)
        long_lines += sum(len(line) > 100 for line in text_lines)
        characters += sum(len(line) for line in text_lines)
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Tuple)
            ):
                paired += 1
    return {
        "files": len(paths),
        "lines": lines,
        "over_100_pct": round(100 * long_lines / max(lines, 1), 2),
        "paired_per_1000": round(1000 * paired / max(lines, 1), 2),
        "mean_line": round(characters / max(lines, 1), 1),
    }


def class_lines(path: str, name: str) -> int | None:
    with open(path) as file:
        tree = ast.parse(file.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node.end_lineno - node.lineno + 1
    return None


def report() -> dict:
    root_files = sorted(glob.glob(os.path.join(ROOT, "*.py")))
    sizes = {os.path.basename(path): sum(1 for _ in open(path)) for path in root_files}
    return {
        "story": density([os.path.join(ROOT, name) for name in STORY]),
        "parts": density(
            sorted(glob.glob(os.path.join(ROOT, "parts", "**", "*.py"), recursive=True))
        ),
        "root_lines": sizes,
        "root_total": sum(sizes.values()),
        "llm_engine_lines": class_lines(os.path.join(ROOT, "rollout.py"), "LLMEngine"),
    }


@dataclass
class DensityConfig:
    # fmt: off
    json: bool = False   # print the numbers as JSON instead of sentences
    # fmt: on


def main(cfg: DensityConfig):
    numbers = report()
    if cfg.json:
        print(json.dumps(numbers, indent=2))
        return
    for group in ("story", "parts"):
        d = numbers[group]
        print(
            f"{group}: {d['lines']} lines in {d['files']} files, {d['over_100_pct']}% over 100 characters, "
            f"{d['paired_per_1000']} paired assignments per 1,000 lines, mean line {d['mean_line']}"
        )
    for name, limit in LIMITS.items():
        print(f"{name}: {numbers['root_lines'].get(name)} lines (budget {limit})")
    print(
        f"root files: {numbers['root_total']} lines (budget {ROOT_TOTAL}); "
        f"LLMEngine: {numbers['llm_engine_lines']} lines (budget 150)"
    )


if __name__ == "__main__":
    main(parse_config(DensityConfig, usage="usage: python tools/code_density.py [--json]"))
