"""The toy programming problems, each with 16+ stdin or functional tests and a reference program:
    code_problems(n, split=...)           11 families of easy programs (linear, modulo, reverse, calc, ...): the sums toy
    partial_code_problems(n, split=...)   3 families whose naive program passes only part of the tests (a leap year
                                          rule, the second largest distinct value, division toward zero): the
                                          Countdown toy's, where the soft reward (fraction of tests passed) pays it
and the toy teacher's answers to them (`<think>` plan, then a ```python block). Train and test never
share a problem (1 in 5 is test, by a hash of the problem). Standard library only.
"""

import contextlib
import io
import json
import random
import zlib
from typing import NamedTuple


class CodeFamily(NamedTuple):
    """A family of toy programming problems: one problem per parameter tuple, its texts formatted
    with them."""

    name: str  # also the function name of functional families
    # "int" (one integer on stdin), "int_mult" (half of them multiples of the first
    input_kind: str
    #                          parameter), "ints" (a line of integers), "word" (a lowercase word rich in a letter
    #                          parameter); "fn:int" / "fn:ints": functional tests (the JSON argument, the JSON result)
    params: list  # parameter tuples
    question: str
    plan: str  # the reasoning of the SFT trace
    # the reference program; the tests' expected outputs are what it produces
    solution: str


CODE_FAMILIES = [
    CodeFamily(
        "linear",
        "int",
        [(k, c) for k in range(2, 10) for c in range(10)],
        "Read an integer n and print n * {0} + {1}.",
        "Read n, multiply it by {0}, add {1}, print it.",
        "n = int(input())\nprint(n * {0} + {1})",
    ),
    CodeFamily(
        "divisible",
        "int_mult",
        [(k,) for k in range(2, 14)],
        "Read an integer n. Print YES if n is divisible by {0}, otherwise print NO.",
        "n is divisible by {0} when n % {0} is 0.",
        "n = int(input())\nprint('YES' if n % {0} == 0 else 'NO')",
    ),
    CodeFamily(
        "modulo",
        "int",
        [(k,) for k in range(2, 14)],
        "Read an integer n and print n modulo {0}.",
        "Python's % gives the remainder.",
        "n = int(input())\nprint(n % {0})",
    ),
    CodeFamily(
        "sum_above",
        "ints",
        [(t,) for t in range(10)],
        "Read a line of integers and print the sum of those greater than {0}.",
        "Split the line, keep the numbers above {0}, add them.",
        "xs = list(map(int, input().split()))\nprint(sum(x for x in xs if x > {0}))",
    ),
    CodeFamily(
        "max_plus",
        "ints",
        [(c,) for c in range(20)],
        "Read a line of integers and print the largest one plus {0}.",
        "Take the max of the numbers and add {0}.",
        "xs = list(map(int, input().split()))\nprint(max(xs) + {0})",
    ),
    CodeFamily(
        "repeat",
        "word",
        [(k,) for k in range(2, 10)],
        "Read a word and print it {0} times in a row, with no spaces.",
        "String repetition: s * {0}.",
        "s = input().strip()\nprint(s * {0})",
    ),
    CodeFamily(
        "count_letter",
        "word",
        [(ch,) for ch in "abcdefghijklmnopqrstuvwxyz"],
        "Read a word and print how many times the letter {0} appears in it.",
        "Count the {0} characters.",
        "s = input().strip()\nprint(s.count('{0}'))",
    ),
    CodeFamily(
        "reverse",
        "word",
        [(k,) for k in range(2, 8)],
        "Read a word and print it reversed, {0} times in a row.",
        "Reverse with s[::-1], then repeat {0} times.",
        "s = input().strip()\nprint(s[::-1] * {0})",
    ),
    CodeFamily(
        "calc",
        "fn:int",
        [(k, c) for k in range(2, 10) for c in range(1, 10)],
        "Write a function calc(x) that returns x * {0} - {1}.",
        "calc returns x * {0} - {1}.",
        "def calc(x):\n    return x * {0} - {1}",
    ),
    CodeFamily(
        "count_above",
        "fn:ints",
        [(t,) for t in range(10)],
        "Write a function count_above(nums) that returns how many numbers in the list nums are greater than "
        "{0}.",
        "Count the numbers above {0}.",
        "def count_above(nums):\n    return sum(1 for x in nums if x > {0})",
    ),
    CodeFamily(
        "clip",
        "fn:int",
        [(m,) for m in range(1, 31)],
        "Write a function clip(x) that returns x if x is at most {0}, and {0} otherwise.",
        "That is min(x, {0}).",
        "def clip(x):\n    return min(x, {0})",
    ),
]


def code_problems(n: int, seed: int = 0, split: str = "train", num_tests: int = 16) -> list:
    """n distinct programming problems {id, prompt, tests, plan, solutions} of one split, families
    interleaved so every family is represented. Each has num_tests tests."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    rng = random.Random(f"toy-code-{split}-{seed}")
    pools = _code_pools(split)
    for pool in pools:
        rng.shuffle(pool)
    order = [pool[i] for i in range(max(map(len, pools))) for pool in pools if i < len(pool)]
    if n > len(order):
        raise ValueError(
            f"only {len(order)} distinct toy code problems in the {split} split; asked for {n}"
        )
    return [_code_problem(f, p, num_tests) for f, p in order[:n]]


def _code_pools(split: str) -> list:
    """Per family, the (family, params) pairs of one split (20% of all problems are held out as
    "test")."""
    return [
        [(f, p) for p in f.params if _split_of(f"{f.name}-" + "-".join(map(str, p)), 5) == split]
        for f in CODE_FAMILIES
    ]


def _code_problem(family: CodeFamily, params, num_tests: int) -> dict:
    pid = f"{family.name}-" + "-".join(map(str, params))
    solution = family.solution.format(*params)
    functional = family.input_kind.startswith("fn:")
    kind = family.input_kind.split(":")[-1]
    # the tests depend on the problem only, not on any seed
    rng = random.Random(f"toy-code-tests-{pid}")
    tests = []
    for _ in range(num_tests):
        # else "print NO" would pass nearly every test
        if kind == "int_mult" and rng.random() < 0.5:
            arg = params[0] * rng.randint(-5, 10)
        elif kind == "ints":
            arg = [rng.randint(-20, 30) for _ in range(rng.randint(1, 8))]
        elif kind in ("int", "int_mult"):
            arg = rng.randint(-60, 120)
        else:
            letters = "abcdeilmnorst" + "".join(3 * p for p in params if isinstance(p, str))
            arg = "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))
        out = _run_reference(solution, family.name if functional else None, arg)
        if functional:
            tests.append(_call_test(family.name, [arg], out))
        else:
            tests.append(
                {
                    "input": (" ".join(map(str, arg)) if kind == "ints" else str(arg)) + "\n",
                    "output": out,
                }
            )
    return dict(
        id=pid,
        prompt=family.question.format(*params),
        tests=tests,
        plan=family.plan.format(*params),
        solutions=[solution],
    )


def _run_reference(program: str, fn_name: str | None, arg):
    """What our own (trusted) reference program returns for `arg` (functional) or prints for it on
    stdin."""
    if fn_name:
        namespace = {}
        exec(program, namespace)
        return namespace[fn_name](arg)
    stdin = " ".join(map(str, arg)) if isinstance(arg, list) else str(arg)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(program, {"input": lambda: stdin})
    return printed.getvalue()


def code_sft_examples(n: int, seed: int = 0) -> list:
    """n SFT conversations on train-split problems (a uniform family, then a uniform problem of it,
    with replacement): the question, then a `<think>` plan and the reference program in a ```python
    block."""
    rng = random.Random(f"toy-code-sft-{seed}")
    pools = [p for p in _code_pools("train") if p]
    conversations = []
    for _ in range(n):
        p = _code_problem(*rng.choice(rng.choice(pools)), num_tests=0)
        conversations.append(
            [
                {"role": "user", "content": p["prompt"]},
                {"role": "assistant", "content": code_response(p)},
            ]
        )
    return conversations


def code_response(problem: dict) -> str:
    """The toy teacher's answer to a toy programming problem: its plan in `<think>`, then the
    reference program."""
    return f"<think>\n{problem['plan']}\n</think>\n\n```python\n{problem['solutions'][0]}\n```"


# ---------------------------------------------------------------- programs that earn partial credit

# A family's naive program is right on ordinary inputs and wrong on one class of edge cases, so it
# passes part of the tests: the soft reward (the fraction passed) pays it, the binary one does not.
# (question, the right plan, the naive plan, the right program, the naive program, an ordinary
# input, an edge-case input); {0}: the problem's offset.
PARTIAL_FAMILIES = {
    "leap": (
        "Read a year y and print {0} plus 1 if y is a leap year (Gregorian calendar), else {0}.",
        "Leap: divisible by 4, except centuries, which must be divisible by 400.",
        "Leap years are the multiples of 4.",
        "y = int(input())\nleap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)\nprint({0} + (1 if leap else 0))",
        "y = int(input())\nprint({0} + (1 if y % 4 == 0 else 0))",
        lambda rng: str(rng.randint(1901, 2099)),
        lambda rng: str(100 * rng.choice([k for k in range(15, 30) if k % 4])),
    ),
    "second_max": (
        "Read a line of integers (at least two distinct) and print the second largest distinct value plus "
        "{0}.",
        "Drop duplicates first, then take the second largest.",
        "Sort and take the second element from the end.",
        "xs = sorted(set(map(int, input().split())))\nprint(xs[-2] + {0})",
        "xs = sorted(map(int, input().split()))\nprint(xs[-2] + {0})",
        lambda rng: " ".join(map(str, rng.sample(range(-20, 40), rng.randint(2, 7)))),
        lambda rng: (
            lambda xs: " ".join(
                map(str, rng.sample(xs + [max(xs)] * rng.randint(1, 2), len(xs) + 1))
            )
        )(rng.sample(range(-20, 40), 3)),
    ),
    "trunc_div": (
        "Read two integers a and b (b not 0) and print a / b rounded toward zero, plus {0}.",
        "Divide the absolute values, then put the sign back: Python's // rounds down, not toward zero.",
        "Integer division: a // b.",
        "a, b = map(int, input().split())\nq = abs(a) // abs(b)\nprint((q if (a < 0) == (b < 0) else -q) + {0})",
        "a, b = map(int, input().split())\nprint(a // b + {0})",
        lambda rng: f"{rng.randint(0, 99)} {rng.randint(1, 9)}",
        lambda rng: rng.choice(
            [
                f"{-rng.randint(1, 99)} {rng.randint(2, 9)}",
                f"{rng.randint(1, 99)} {-rng.randint(2, 9)}",
            ]
        ),
    ),
}


def partial_code_problems(
    n: int, seed=0, split: str = "train", num_tests: int = 16, edge_share: float = 0.375
):
    """n problems {id, prompt, tests, plan, solutions, naive, naive_plan} of one split (1 in 5 is
    test), the families interleaved. Of the tests, round(edge_share * num_tests) are edge cases on
    which the naive program is wrong (checked), the others ordinary inputs on which it is right: the
    naive program scores 1 - edge_share."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    ids = [
        (name, k)
        for k in range(1000)
        for name in sorted(PARTIAL_FAMILIES)
        if _split_of(f"{name}-{k}", 5) == split
    ]
    random.Random(f"toy-partial-{split}-{seed}").shuffle(ids)
    if n > len(ids):
        raise ValueError(
            f"only {len(ids)} partial-credit code problems in the {split} split; asked for {n}"
        )
    out = []
    for name, k in ids[:n]:
        question, plan, naive_plan, right, naive, ordinary, edge = PARTIAL_FAMILIES[name]
        right, naive, rng, tests = (
            right.format(k),
            naive.format(k),
            random.Random(f"toy-partial-{name}-{k}"),
            [],
        )
        for i in range(num_tests):
            is_edge = i < round(edge_share * num_tests)
            stdin = (edge if is_edge else ordinary)(rng)
            while (
                _run_reference(right, None, stdin) != _run_reference(naive, None, stdin)
            ) != is_edge:
                stdin = (edge if is_edge else ordinary)(rng)
            tests.append({"input": stdin + "\n", "output": _run_reference(right, None, stdin)})
        rng.shuffle(tests)
        out.append(
            dict(
                id=f"{name}-{k}",
                prompt=question.format(k),
                tests=tests,
                plan=plan,
                solutions=[right],
                naive=naive,
                naive_plan=naive_plan,
            )
        )
    return out


def partial_code_response(problem: dict, rng: random.Random, naive_probability: float = 0.5) -> str:
    """The toy teacher's answer: with naive_probability the naive plan and program, else the right
    ones."""
    naive = rng.random() < naive_probability
    plan, program = (
        (problem["naive_plan"], problem["naive"])
        if naive
        else (problem["plan"], problem["solutions"][0])
    )
    return f"<think>\n{plan}\n</think>\n\n```python\n{program}\n```"


def _call_test(fn: str, args, result) -> dict:
    """A functional test: one JSON argument per input line, the JSON result."""
    return {
        "input": "\n".join(json.dumps(a) for a in args),
        "output": json.dumps(result),
        "fn_name": fn,
    }


def _split_of(key: str, test_every: int) -> str:
    """A problem's split from a hash of its content, so train and test never share a problem."""
    return "test" if zlib.crc32(key.encode()) % test_every == 0 else "train"
