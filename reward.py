"""Rewards for RL on reasoning models: math answers checked by math-verify, programs run against
tests in a sandbox.

The policy writes `<think> reasoning </think> answer`; only the text after the LAST `</think>` is
judged (a `\\boxed{}` inside the thinking is not an answer; the authors' eval script forgot this).
Format comes first, then:
    math:  R = correct if verify(parse("\\boxed{" + gold + "}"), parse(answer)) else wrong   (gold first: not symmetric)
    code:  R = wrong + (correct - wrong) * p,   p = tests passed / tests   (the paper's soft reward)
    countdown: R = correct if the boxed expression uses the numbers and hits the target else wrong (TinyZero's task)
A crash, timeout or wrong output is a lower reward, never an exception; broken data (an empty or
unparseable gold answer, malformed tests) raises BadReference. math-verify runs in worker processes
(parts/math_checker.py), programs in parts/sandbox.py (docs/sandbox.md: what it enforces, and the
attacks the tests run), Countdown's expressions in parts/countdown_check.py.
Run:
    python reward.py                                  # what the sandbox enforces here, and examples
    python reward.py --input=scored.jsonl             # score a file (`--help`: its line formats)
    python -m pytest tests/test_reward.py             # correctness and the adversarial suite
"""

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

from parts import countdown_check, math_checker
from parts.sandbox import (
    BadTests,
    SandboxConfig,
    TestResult,
    all_passed,
    run_tests,
    sandbox_info,
    validate_tests,
)


@dataclass(frozen=True)
class RewardScale:
    """Reward values by outcome. DEFAULT_SCALE: correct 1, wrong 0, every format failure 0 (as a
    wrong answer), `<think>` not checked; code R = p. AUTHORS_SCALE: the authors' code
    (Kwai-Klear/KlearReasoner, reward_config.py): correct 1, wrong -1; no `</think>` -0.5;
    `</think>` but no `<think>` -2.0; no code block -1; code R = 2p - 1. Without format failures
    both give the same GRPO advantages (2p - 1 is affine in p); with them they do not: on
    AUTHORS_SCALE a response that never closes its thinking (-0.5) ranks above a wrong answer
    (-1)."""

    # fmt: off
    correct: float = 1.0
    wrong: float = 0.0
    missing_think_end: float = 0.0                 # no `</think>`: the thinking never closed
    missing_think_start: float | None = None       # `</think>` but no `<think>`; None: not checked
    missing_code: float = 0.0                      # code: no ```python block after `</think>`
    # fmt: on


DEFAULT_SCALE = RewardScale()
AUTHORS_SCALE = RewardScale(
    correct=1.0, wrong=-1.0, missing_think_end=-0.5, missing_think_start=-2.0, missing_code=-1.0
)
SCALES = {"default": DEFAULT_SCALE, "authors": AUTHORS_SCALE}  # by the name an option gives


class BadGold(ValueError):
    """The gold answer is empty, or math-verify cannot parse it: the data's fault, never the
    candidate's."""


# what broken data raises (malformed tests name test and field): catch both
BadReference = (BadGold, BadTests)


# ----------------------------------------------------------------------------- math


def math_reward(
    response: str, answer, *, scale: RewardScale = DEFAULT_SCALE, timeout_s: float = 5.0
) -> float:
    """Reward of one response to a math problem with gold `answer` (str or number)."""
    failure = format_failure(response, scale)
    if failure is not None:
        return failure
    return (
        scale.correct
        if verify_math(answer, extract_answer_region(response), timeout_s)
        else scale.wrong
    )


def verify_math(gold, answer_text: str, timeout_s: float = 5.0) -> bool:
    """math-verify's verdict on `answer_text` against `gold`, within about timeout_s (+0.5 s) of
    wall clock.

    Safe to call from any thread. A pathological answer that exhausts the time is judged wrong.
    Raises BadGold (a ValueError) if the gold answer is empty or math-verify cannot parse it."""
    gold = str(gold)
    if not gold.strip():
        raise BadGold("math reward: the gold answer is empty")
    verdict = math_checker.compare(gold, answer_text or "", timeout_s)
    if verdict is None:
        return False
    gold_parsed, equal = verdict
    if not gold_parsed:
        raise BadGold(f"math reward: math-verify cannot parse the gold answer {gold!r}")
    return equal


# ----------------------------------------------------------------------------- code


def code_reward(
    response: str,
    tests: list[dict],
    *,
    scale: RewardScale = DEFAULT_SCALE,
    config: SandboxConfig | None = None,
) -> float:
    """The soft code reward of code_reward_details, alone (the paper's: fraction of tests
    passed)."""
    return code_reward_details(response, tests, scale=scale, config=config)[0]


def code_reward_details(
    response: str,
    tests: list[dict],
    *,
    scale: RewardScale = DEFAULT_SCALE,
    config: SandboxConfig | None = None,
) -> tuple[float, list[TestResult]]:
    """(reward, per-test results): wrong + (correct - wrong) * fraction passed. Format failures give
    their reward and no results."""
    validate_tests(tests)  # broken data fails loudly even when the response has no code
    failure = format_failure(response, scale)
    if failure is not None:
        return failure, []
    program = extract_code(response)
    if program is None:
        return scale.missing_code, []
    results = run_tests(program, tests, config)
    passed = sum(result.passed for result in results) / len(results)
    return scale.wrong + (scale.correct - scale.wrong) * passed, results


# ------------------------------------------------------------------------- one response to one task


class Verdict(NamedTuple):
    reward: float
    # fully correct: the right answer, or every test passed (the SFT term's positives)
    correct: bool
    format_failure: bool  # no </think> (code: or no ```python block after it)
    # "correct", "wrong answer", "3/4 tests passed; first failure: ...", "format: ..."
    reason: str


def judge(
    task: dict,
    response: str,
    *,
    scale: RewardScale = DEFAULT_SCALE,
    sandbox: SandboxConfig | None = None,
    binary_code: bool = False,
    math_timeout_s: float = 5.0,
) -> Verdict:
    """The reward of one response to a task {"kind": "math", "answer"[, "answers"]} (any listed
    answer is right), {"kind": "code", "tests"} or {"kind": "countdown", "numbers", "target"};
    binary_code gives all-or-nothing instead of the fraction of tests passed."""
    if task["kind"] == "countdown":
        if format_failure(response, scale) is not None:
            return Verdict(format_failure(response, scale), False, True, "format: no </think>")
        right = countdown_check.countdown_reward(response, task["numbers"], task["target"]) == 1.0
        return Verdict(
            scale.correct if right else scale.wrong,
            right,
            False,
            "correct" if right else "wrong answer",
        )
    if task["kind"] == "math":
        r = max(
            math_reward(response, answer, scale=scale, timeout_s=math_timeout_s)
            for answer in task.get("answers", [task["answer"]])
        )
        if format_failure(response, scale) is not None:
            return Verdict(r, False, True, "format: no </think>")
        return Verdict(
            r, r == scale.correct, False, "correct" if r == scale.correct else "wrong answer"
        )
    r, results = code_reward_details(response, task["tests"], scale=scale, config=sandbox)
    if not results:
        why = (
            "no </think>"
            if format_failure(response, scale) is not None
            else "no ```python block after </think>"
        )
        return Verdict(r, False, True, "format: " + why)
    passed = all_passed(results)
    first_failure = next((t.reason for t in results if not t.passed), None)
    reason = f"{sum(t.passed for t in results)}/{len(results)} tests passed"
    return Verdict(
        scale.correct if passed else scale.wrong if binary_code else r,
        passed,
        False,
        reason + (f"; first failure: {first_failure}" if first_failure else ""),
    )


def scorer(cfg, scale: str = "default", code: str = "soft"):
    """score(task, response) -> Verdict: judge() with a run's options (gppo.py, eval.py), its
    sandbox built once: code tests of all its scoring threads run on cfg.sandbox_cores cores (0:
    this machine's usable cores shared among the ranks it runs) with cfg.sandbox_python; scale names
    a RewardScale (SCALES), code is soft (the fraction of tests passed) or binary. A bad response is
    a low reward, never an exception; broken data raises BadReference naming the task."""
    cores = cfg.sandbox_cores
    if not cores:  # as parts/trainer.cores_per_rank: this file needs no torch
        usable = os.cpu_count() or 1
        if hasattr(os, "sched_getaffinity"):
            usable = len(os.sched_getaffinity(0))
        cores = max(1, usable // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    sandbox = SandboxConfig(cores=cores, python=cfg.sandbox_python)

    def score(task: dict, response: str) -> Verdict:
        try:
            return judge(
                task, response, scale=SCALES[scale], sandbox=sandbox, binary_code=code == "binary"
            )
        except BadReference as e:
            raise type(e)(f"problem {task.get('id', '?')}: {e}") from None

    return score


# --------------------------------------------------------------------- format and answer extraction


def format_failure(response: str, scale: RewardScale = DEFAULT_SCALE) -> float | None:
    """The reward of a response whose thinking is malformed, or None if it is well formed (the
    authors' order: a missing `</think>` is checked before a missing `<think>`)."""
    if "</think>" not in response:
        return scale.missing_think_end
    if scale.missing_think_start is not None and "<think>" not in response:
        return scale.missing_think_start
    return None


def extract_answer_region(response: str) -> str | None:
    """Text after the last `</think>`, or None when the response never closed its thinking."""
    end = response.rfind("</think>")
    return None if end < 0 else response[end + len("</think>") :]


_CODE_BLOCK = re.compile(r"```(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str | None:
    """The last complete ```python block after the last `</think>`, or None."""
    region = extract_answer_region(response)
    blocks = _CODE_BLOCK.findall(region) if region is not None else []
    return blocks[-1] if blocks else None


# ----------------------------------------------------------------------------- command line


@dataclass
class Config:
    """`python reward.py`: with no --input, what the sandbox enforces on this machine and a few
    examples; with --input, a JSONL file scored one response per line, either
      math: {"response": "<think>...</think> ... \\\\boxed{42}", "answer": "42"}          (answer: str or number)
      code: {"response": "<think>...</think> ```python ...```", "tests": [{"input": "1 2\\n", "output": "3"}, ...]}
            a functional test adds "fn_name": its input holds one JSON argument per line, its output is JSON.
    Each line's result is printed to stdout as {"line", "reward", "reasons"} (reasons: one per code
    test); progress goes to stderr."""

    # fmt: off
    input: str = ""              # JSONL file to score (line formats above); "" -> self-check of this machine
    scale: str = "default"       # reward scale: default (0..1, format failure 0) or authors (+-1 with penalties)
    timeout_s: float = 6.0       # CPU time per code test (a wall-clock limit of 2 * timeout_s + 5 backs it)
    workers: int = 0             # tests of one program run at once; 0 -> cores
    cores: int = 0               # code tests run at once in this process, on as many cores; 0 -> number of CPUs
    namespaces: str = "auto"     # auto | on | off: isolate each code test in namespaces (see SandboxConfig)
    cgroup: str = "auto"         # auto | off | a cgroup v2 directory for one cgroup per code test
    python: str = ""             # interpreter for candidate programs, e.g. a virtualenv with numpy; "" -> found
    math_timeout_s: float = 5.0  # math-verify's time per answer
    # fmt: on

    def __post_init__(self):
        if self.scale not in ("default", "authors"):
            raise ValueError(f"--scale must be default or authors, got {self.scale!r}")


def _self_check(sandbox: SandboxConfig, scale: RewardScale, math_timeout_s: float):
    print(json.dumps(sandbox_info(sandbox), indent=2))
    for name, response in [
        ("right after </think>", "<think>maybe \\boxed{5}</think> So \\boxed{\\frac{3}{1}}."),
        ("right only inside <think>", "<think>\\boxed{3}</think> \\boxed{4}"),
        ("thinking never closed", "<think>\\boxed{3}"),
    ]:
        print(f"math, {name}:", math_reward(response, "3", scale=scale, timeout_s=math_timeout_s))
    tests = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}]
    for name, code in [
        ("honest", "print(sum(map(int, input().split())))"),
        ("half right", "a, b = map(int, input().split())\nprint(3 if a == 1 else 0)"),
        ("sys.exit(0) cheat", "import sys; sys.exit(0)"),
    ]:
        reward, results = code_reward_details(
            f"<think>...</think>\n```python\n{code}\n```", tests, scale=scale, config=sandbox
        )
        print(f"code, {name}: reward {reward}  {[result.reason for result in results]}")


def main(cfg: Config):
    sandbox = SandboxConfig(
        timeout_s=cfg.timeout_s,
        workers=cfg.workers,
        cores=cfg.cores,
        namespaces=cfg.namespaces,
        cgroup=cfg.cgroup,
        python=cfg.python,
    )
    scale = SCALES[cfg.scale]
    if not cfg.input:
        return _self_check(sandbox, scale, cfg.math_timeout_s)
    with open(cfg.input) as file:
        lines = [line for line in file]
    start = time.time()
    reward_sum = 0.0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            response = row["response"]
            if "tests" in row:
                reward, results = code_reward_details(
                    response, row["tests"], scale=scale, config=sandbox
                )
                reasons = [result.reason for result in results]
            else:
                reward = math_reward(
                    response, row["answer"], scale=scale, timeout_s=cfg.math_timeout_s
                )
                reasons = []
        except (*BadReference, json.JSONDecodeError, KeyError, TypeError) as error:  # its fault
            print(file=sys.stderr)  # ends the progress line
            raise ValueError(f"{cfg.input}:{number}: {type(error).__name__}: {error}") from None
        reward_sum += reward
        print(json.dumps({"line": number, "reward": reward, "reasons": reasons}), flush=True)
        elapsed = time.time() - start
        print(
            f"\r{number}/{len(lines)} lines, mean reward {reward_sum / number:.3f}, "
            f"ETA {elapsed / number * (len(lines) - number):.0f}s",
            end="",
            file=sys.stderr,
        )
    print(file=sys.stderr)


if __name__ == "__main__":
    from parts.cli import parse_config  # the project's one command-line parser

    try:
        main(parse_config(Config))
    except (OSError, RuntimeError, ValueError) as error:  # a bad line or option, or a machine
        print(f"error: reward.py: {error}", file=sys.stderr)  # that the sandbox cannot use
        sys.exit(2)
