"""Countdown: the checker (parts/countdown_check.py, the reward of TinyZero's public task), and the
toy's searching teacher and problem generator (tools/toy_tasks/countdown.py)."""

import os
import random
import re
import sys
import time
from fractions import Fraction

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from parts import countdown_check as check  # noqa: E402
from tools.toy_tasks import countdown as cd  # noqa: E402
from tools.toy_tasks import programs  # noqa: E402


def answer(expr: str, think: str = "12+5=17*3=51 vs 41 no") -> str:
    return f"<think>\n{think}\n</think>\n\n\\boxed{{{expr}}}<|im_end|>"


# ----------------------------------------------------------------------------- the checker


@pytest.mark.parametrize(
    "expr", ["(12*3)+5", "12*3+5", "5+3*12", " ( 12 * 3 ) + 5 ", "((12*3)+5)", "3*12+5"]
)
def test_right_answers(expr):
    assert check.countdown_reward(answer(expr), [12, 3, 5], 41) == 1.0


@pytest.mark.parametrize(
    "expr,why",
    [
        ("12*3-5", "wrong value"),
        ("12+3+5", "wrong value"),
        ("12*3", "a number missing"),
        ("12*3+5+5", "a number reused"),
        ("12*3+5-1+1", "numbers not given"),
        ("12*4+5", "a number replaced"),
        ("41", "the target alone"),
    ],
)
def test_wrong_answers(expr, why):
    assert check.countdown_reward(answer(expr), [12, 3, 5], 41) == 0.0, why


def test_duplicates_in_the_given_numbers():
    assert check.countdown_reward(answer("3*3+5"), [3, 3, 5], 14) == 1.0
    assert check.countdown_reward(answer("(5-3)*3"), [3, 5, 3], 6) == 1.0
    # a 3 swapped for a 1
    assert check.countdown_reward(answer("3*5-1"), [3, 3, 5], 14) == 0.0
    assert check.countdown_reward(answer("3*3+5+3"), [3, 3, 5], 17) == 0.0  # three 3s for two
    assert check.countdown_reward(answer("9+5"), [3, 3, 5], 14) == 0.0  # 3*3 pre-computed
    assert check.countdown_reward(answer("2*2*2*2"), [2, 2, 2, 2], 16) == 1.0


@pytest.mark.parametrize(
    "expr",
    [
        "(12*3+5",
        "12*3+5)",
        "12*+3 5",
        "",
        "   ",
        "12 3 5",
        "12*3+5=41",
        "(12*3)(5)",
        "abs(12)*3+5",
        "__import__('os')",
        "x*3+5",
        "12*3+5 if 1 else 0",
        "[12,3,5]",
        "12**3+5",
        "12//3+5",
        "12%3+5",
        "-3+12*5",
        "+12*3+5",
        "12*3.0+5",
        "1.2e1*3+5",
        "0x0c*3+5",
        "1_2*3+5",
        "12*3+5j",
        "(" * 150 + "12*3+5" + ")" * 150,
    ],
)
def test_malformed_or_forbidden_expressions(expr):
    assert check.countdown_reward(answer(expr), [12, 3, 5], 41) == 0.0


def test_forbidden_syntax_is_refused_by_the_parser_not_only_the_charset():
    for expr in ["-3+12*5", "12**3+5", "12//3+5", "(-3)*5"]:
        assert set(expr) <= set("0123456789+-*/() ")
        assert check.parse_expression(expr) is None
    assert check.parse_expression("12*3+5")[0] == [12, 3, 5]


def test_exact_fractions_and_division_by_zero():
    assert check.countdown_reward(answer("7/2*2"), [7, 2, 2], 7) == 1.0  # 3.5 * 2, exactly
    assert check.countdown_reward(answer("(1/3+1/3+1/3)*9"), [1, 3, 1, 3, 1, 3, 9], 9) == 1.0
    assert check.countdown_reward(answer("(1/3)*3"), [1, 3, 3], 1) == 1.0
    assert check.countdown_reward(answer("2/(5-5)"), [5, 5, 2], 0) == 0.0
    assert check.countdown_reward(answer("2*(5-5)"), [5, 5, 2], 0) == 1.0
    assert check.countdown_reward(answer("10/4"), [10, 4], Fraction(5, 2)) == 1.0


def test_only_the_text_after_the_last_think_counts():
    right = "\\boxed{(12*3)+5}"
    wrong = "\\boxed{12+3+5}"
    assert check.countdown_reward(f"<think>\n{wrong}\n</think>\n\n{right}", [12, 3, 5], 41) == 1.0
    assert check.countdown_reward(f"<think>\n{right}\n</think>\n\n{wrong}", [12, 3, 5], 41) == 0.0
    assert (
        check.countdown_reward(f"<think>\n{right}\n</think>\n\nno box here", [12, 3, 5], 41) == 0.0
    )
    assert (
        check.countdown_reward(f"<think>\n</think>{right}\n</think>\n\n{wrong}", [12, 3, 5], 41)
        == 0.0
    )
    assert (
        check.countdown_reward(f"<think>\n</think>{wrong}\n</think>\n\n{right}", [12, 3, 5], 41)
        == 1.0
    )
    # never closed
    assert (
        check.countdown_reward(f"<think>\n12*3=36+5=41 vs 41 yes\n{right}", [12, 3, 5], 41) == 0.0
    )
    # no </think>
    assert check.countdown_reward(right, [12, 3, 5], 41) == 0.0
    # bare close: fine
    assert check.countdown_reward(f"</think>{right}", [12, 3, 5], 41) == 1.0
    # the last box
    assert check.countdown_reward(f"</think>{wrong} then {right}", [12, 3, 5], 41) == 1.0
    # unclosed box
    assert check.countdown_reward("</think>\\boxed{12*3+5", [12, 3, 5], 41) == 0.0


def test_the_checker_is_linear_in_the_response():
    nasty = [
        "(" * 1_000_000,
        "</think>" * 200_000,
        "</think>" + "\\boxed{" * 200_000,
        "</think>\\boxed{" + "1+" * 500_000 + "1}",
        "<think>" + "12*3=36+5=41 vs 41 no\n" * 50_000 + "</think>\\boxed{(12*3)+5}",
    ]
    t0 = time.perf_counter()
    scores = [check.countdown_reward(t, [12, 3, 5], 41) for t in nasty]
    assert time.perf_counter() - t0 < 2.0
    assert scores == [0.0, 0.0, 0.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- the teacher

LINK = re.compile(r"([-+*/])(\d+)=(\d+)")


def check_trace(problem, response):
    """Parse a teacher response; returns (lines, solved). Every line is a left-deep chain `a op b=r
    op c=r2 ...` over the given numbers, each used once (the first two larger first), with right
    arithmetic, and ends with `vs TARGET yes|no`, yes iff the chain's value is the target. The
    answer is the last line written out."""
    m = re.fullmatch(r"<think>\n(.*)\n</think>\n\n\\boxed\{([0-9+\-*/()]+)\}", response, re.S)
    assert m, response
    lines = m.group(1).split("\n")
    for line in lines:
        first, links, target, verdict = re.fullmatch(
            r"(\d+)((?:[-+*/]\d+=\d+)+) vs (\d+) (yes|no)", line
        ).groups()
        assert int(target) == problem["target"]
        pool = list(problem["numbers"])
        value = int(first)
        pool.remove(value)
        for k, (op, y, r) in enumerate(LINK.findall(links)):
            y, r = int(y), int(r)
            assert cd.step(value, y, op) == (value, op, y, r)
            assert k > 0 or value >= y
            pool.remove(y)
            value = r
        assert not pool
        assert (verdict == "yes") == (value == problem["target"])
    assert all(line.endswith(" no") for line in lines[:-1])  # stops at the first yes
    assert len(set(lines)) == len(lines)  # never repeats an attempt
    expr = check.parse_expression(m.group(2))
    assert expr is not None
    # the answer is the last attempt written out
    assert check.evaluate(expr[1]) == value
    assert m.group(2).replace("(", "").replace(")", "") == re.sub(
        r"=\d+", "", lines[-1].split(" vs ")[0]
    )
    return lines, lines[-1].endswith(" yes")


@pytest.mark.parametrize("n_numbers", [3, 4, 5])
def test_teacher_traces_parse_and_yes_answers_score_one(n_numbers):
    lo, hi = cd.DEFAULT_BUDGET[n_numbers]
    for i, p in enumerate(cd.problems(150, n_numbers, seed=3)):
        response = cd.teacher_response(p, random.Random(i))
        lines, solved = check_trace(p, response)
        assert 1 <= len(lines) <= hi
        assert (
            solved
            or len(lines) >= lo
            or len(lines)
            == len(
                {
                    cd.random_chain(p["numbers"], random.Random(s), cd.CAP, p["target"])
                    for s in range(2000)
                }
                - {None}
            )
        )
        assert check.countdown_reward(response, p["numbers"], p["target"]) == (
            1.0 if solved else 0.0
        )


def test_teacher_is_seeded_and_its_pass_rate_varies():
    p = cd.problems(1, 4, seed=0)[0]
    assert cd.teacher_response(p, random.Random(5)) == cd.teacher_response(p, random.Random(5))
    easy = [cd.teacher_pass_rate(p, 8) for p in cd.problems(60, 3, seed=1)]
    hard = [cd.teacher_pass_rate(p, 8) for p in cd.problems(60, 4, seed=1)]
    assert sum(easy) / 60 > sum(hard) / 60 + 0.15
    # varies prompt to prompt
    assert sum(r < 0.5 for r in hard) > 10 and sum(r >= 0.5 for r in hard) > 10
    assert sum(r >= 0.5 for r in easy) > 40


def test_intermediate_values_stay_under_the_cap():
    for cap in (30, 100):
        for i, p in enumerate(cd.problems(100, 4, seed=2, cap=cap)):
            response = cd.teacher_response(p, random.Random(i), cap=cap)
            think = response.split("</think>")[0]
            assert max(int(v) for v in re.findall(r"=(\d+)", think)) <= cap
            assert cd.solutions(p["numbers"], p["target"], cap)


def test_teacher_budget_bounds_the_attempts():
    p = cd.problems(1, 4, seed=0)[0]
    for s in range(50):
        lines = cd.teacher_response(p, random.Random(s), budget=(1, 1)).split("\n")[1:-3]
        assert len(lines) == 1


# ----------------------------------------------------------------------------- problems


@pytest.mark.parametrize("n_numbers", [3, 4, 5])
def test_problems_are_solvable_and_well_formed(n_numbers):
    ps = cd.problems(200, n_numbers, seed=0)
    assert len({p["id"] for p in ps}) == 200
    for p in ps:
        assert len(p["numbers"]) == n_numbers
        assert all(cd.DEFAULTS["lo"] <= v <= cd.DEFAULTS["hi"] for v in p["numbers"])
        assert 1 <= p["target"] <= cd.DEFAULTS["max_target"]
        assert p["prompt"] == cd.make_prompt(p["numbers"], p["target"])
        assert p["id"] == cd.problem_id(p["numbers"], p["target"])
        if n_numbers <= 4:
            found = cd.solutions(p["numbers"], p["target"])
            assert (
                found and check.countdown_reward(answer(found[0]), p["numbers"], p["target"]) == 1.0
            )
    assert any(len(set(p["numbers"])) < n_numbers for p in ps)  # ties occur


def test_splits_are_disjoint_and_deterministic():
    for n_numbers in (3, 4):
        train = cd.problems(3000, n_numbers, seed=0, split="train")
        test = cd.problems(300, n_numbers, seed=0, split="test")
        assert not {p["id"] for p in train} & {p["id"] for p in test}
        assert all(cd.split_of(p["numbers"], p["target"]) == "train" for p in train)
        assert all(cd.split_of(p["numbers"], p["target"]) == "test" for p in test)
        assert cd.problems(50, n_numbers, seed=0, split="test") == test[:50]
    # a reordering of a problem's numbers is the same problem: same split
    assert cd.split_of([12, 3, 5], 41) == cd.split_of([5, 12, 3], 41)
    with pytest.raises(ValueError):
        cd.problems(1, 3, split="dev")


# --------------------------------------------------------------- the toy's programs: partial credit


def test_a_naive_program_passes_exactly_the_ordinary_tests():
    """Each family's right program passes every test; its naive one exactly the 10 of 16 ordinary
    ones (the 6 edge cases are checked to tell them apart), in the sandbox, so the soft reward is
    0.625 where the binary one is 0."""
    import reward

    problems = programs.partial_code_problems(3, seed=0, split="test")
    for p in problems:
        # noqa: E731
        answer = lambda program: f"<think>\nplan\n</think>\n\n```python\n{program}\n```"
        assert reward.code_reward(answer(p["solutions"][0]), p["tests"]) == 1.0
        assert reward.code_reward(answer(p["naive"]), p["tests"]) == 10 / 16
    train = {p["id"] for p in programs.partial_code_problems(400, seed=0, split="train")}
    assert not train & {p["id"] for p in programs.partial_code_problems(100, seed=0, split="test")}
    rng = random.Random(0)
    naive = sum(
        problems[0]["naive"] in programs.partial_code_response(problems[0], rng, 0.5)
        for _ in range(400)
    )
    assert 150 < naive < 250  # binomial(400, 0.5): 200 ± 10; outside 150..250 is a 5-sigma event


# ---------------------------------------------------------------------- Countdown rows as published


def test_published_rows_are_countdown_tasks_graded_by_the_checker(tmp_path):
    """TinyZero's rows {target, nums} (Jiayi-Pan/Countdown-Tasks-3to4) read as tasks of kind
    countdown, with a prompt that states the problem when the row has none, and reward.judge grades
    them with the checker; a malformed row is a DataError naming file:row and field."""
    import json

    import data
    import reward

    path = tmp_path / "countdown.jsonl"
    path.write_text(
        json.dumps({"target": 41, "nums": [12, 5, 3]})
        + "\n"
        + json.dumps({"id": "q2", "problem": "Reach 6 from 2 and 3.", "target": 6, "nums": [2, 3]})
        + "\n"
    )
    first, second = data.load_math_jsonl(str(path))
    assert first == dict(
        id="countdown.jsonl:1",
        prompt="Use 12 5 3 to make 41.",
        numbers=[12, 5, 3],
        target=41,
        kind="countdown",
    )
    assert second["id"] == "q2" and second["prompt"] == "Reach 6 from 2 and 3."
    assert (
        reward.judge(first, answer("(12*3)+5")).correct
        and not reward.judge(first, answer("12+5*3")).correct
    )
    for row, field in [
        ({"target": "41", "nums": [12, 5, 3]}, "'target' must be int"),
        ({"target": 41, "nums": [12, True, 3]}, "'nums[1]' must be int"),
        ({"target": 41, "nums": "12 5 3"}, "'nums' must be list"),
        ({"target": 41, "nums": []}, "'nums' is empty"),
    ]:
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(data.DataError, match=re.escape(f"countdown.jsonl:1: field {field}")):
            data.load_math_jsonl(str(path))
