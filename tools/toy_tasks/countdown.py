"""Countdown, the toy task where the teacher's chain of thought *searches*: reach a target from 3-5
numbers with + - * /, each number used exactly once. The problem generator and a teacher that tries,
checks, moves on:

    <think>
    12+5=17*3=51 vs 41 no
    12*3=36+5=41 vs 41 yes
    </think>

    \\boxed{(12*3)+5}

The reward is the checker of Countdown's public data set (parts/countdown_check.py). Every target is
reachable by the teacher's own search (left-deep chains); a problem's split (1 in 10 is test) is a
hash of its sorted numbers and target. docs/toy_countdown.md tells the generator, the teacher and
its calibration; `python tools/toy.py` writes the files. Standard library and
parts/countdown_check.py.
"""

import itertools
import random
import zlib

from parts.countdown_check import countdown_reward

CAP = 100  # the teacher's (and the generator's) intermediate values stay in 1..CAP
TEST_EVERY = 10  # 1 problem in TEST_EVERY (by hash) is held out as "test"
OPS = "+-*/"

# default task parameters (calibrated with experiments/countdown_calibrate.py; see its report)
DEFAULTS = dict(lo=1, hi=12, max_target=100)
# teacher budget (attempts per response), drawn uniformly from this range, per number of numbers
DEFAULT_BUDGET = {3: (4, 8), 4: (6, 10), 5: (6, 10)}


# ----------------------------------------------------------------------------- problems


def split_of(numbers, target) -> str:
    """A problem's split from a hash of its sorted numbers and target: train and test never share a
    problem."""
    key = ",".join(map(str, sorted(numbers))) + f"->{target}"
    return "test" if zlib.crc32(key.encode()) % TEST_EVERY == 0 else "train"


def make_prompt(numbers, target) -> str:
    return f"Use {' '.join(map(str, numbers))} to make {target}."


def problem_id(numbers, target) -> str:
    return f"cd-{'-'.join(map(str, sorted(numbers)))}-t{target}"


def step(x: int, y: int, op: str, cap: int = CAP):
    """One step `x op y` of a chain: (x, op, y, result), or None when it is not allowed (a result
    that is not a positive integer <= cap: x - y needs x > y, x / y needs y to divide x)."""
    if op == "+":
        r = x + y
    elif op == "*":
        r = x * y
    elif op == "-":
        r = x - y
    else:
        r = x // y if y and x % y == 0 else 0
    return (x, op, y, r) if 0 < r <= cap else None


def random_chain(numbers, rng: random.Random, cap: int = CAP, target=None):
    """A random left-deep chain over all the numbers: a random order, the first two larger first,
    then each number in turn joins the running value (value op number); each operation random among
    the allowed ones, except the last when `target` is given: then the allowed operation whose
    result is closest to the target (ties: the first of + - * /). Returns the steps (x, op, y,
    result), or None when a link has no allowed operation."""
    order = list(numbers)
    rng.shuffle(order)
    value = max(order[0], order[1])
    steps = []
    rest = [min(order[0], order[1])] + order[2:]
    for k, y in enumerate(rest):
        options = [s for s in (step(value, y, op, cap) for op in OPS) if s]
        if not options:
            return None
        if target is not None and k == len(rest) - 1:
            s = min(options, key=lambda s: abs(s[3] - target))
        else:
            s = rng.choice(options)
        steps.append(s)
        value = s[3]
    return tuple(steps)


def random_target(numbers, rng: random.Random, cap: int = CAP) -> int:
    """The value of a random chain over all the numbers (each intermediate in 1..cap), 0 if the
    chain got stuck."""
    steps = random_chain(numbers, rng, cap)
    return steps[-1][3] if steps else 0


def problems(
    n: int,
    n_numbers: int,
    seed=0,
    split: str = "train",
    lo: int = DEFAULTS["lo"],
    hi: int = DEFAULTS["hi"],
    max_target: int = DEFAULTS["max_target"],
    cap: int = CAP,
) -> list:
    """n distinct problems {id, prompt, numbers, target} of the split, n_numbers numbers each from
    lo..hi (with replacement), target in 1..max_target reachable by construction. Deterministic in
    (seed, split, parameters)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    if not 2 <= n_numbers <= 6 or not 1 <= lo <= hi:
        raise ValueError("need 2 <= n_numbers <= 6 and 1 <= lo <= hi")
    rng = random.Random(f"countdown-{n_numbers}-{lo}-{hi}-{max_target}-{cap}-{split}-{seed}")
    seen = set()
    out = []
    for _ in range(200 * n + 1000):
        if len(out) == n:
            break
        numbers = [rng.randint(lo, hi) for _ in range(n_numbers)]
        target = random_target(numbers, rng, cap)
        if not 1 <= target <= max_target or split_of(numbers, target) != split:
            continue
        key = problem_id(numbers, target)
        if key in seen:
            continue
        seen.add(key)
        out.append(
            dict(id=key, prompt=make_prompt(numbers, target), numbers=numbers, target=target)
        )
    if len(out) < n:
        raise ValueError(
            f"only {len(out)} distinct {split} problems with {n_numbers} numbers in {lo}..{hi}"
        )
    return out


# ----------------------------------------------------------------------------- the teacher


def expression(steps) -> str:
    """A chain written out as one expression: `((8+2)*3)-5`."""
    expr = f"{steps[0][0]}{steps[0][1]}{steps[0][2]}"
    for _, op, y, _ in steps[1:]:
        expr = f"({expr}){op}{y}"
    return expr


def format_attempt(steps, target) -> str:
    """One attempt line: the chain, each result carried into the next step, then the check against
    the target, e.g. `8+2=10*3=30-5=25 vs 25 yes`."""
    text = f"{steps[0][0]}" + "".join(f"{op}{y}={r}" for _, op, y, r in steps)
    return text + f" vs {target}" + (" yes" if steps[-1][3] == target else " no")


def teacher_response(problem: dict, rng: random.Random, budget=None, cap: int = CAP) -> str:
    """A searching teacher's response: distinct attempts, one line each, checked against the target,
    up to a budget drawn from `budget` (a (min, max) range; default DEFAULT_BUDGET by the number of
    numbers); the first "yes" or, when the budget runs out, the last attempt is the answer."""
    numbers = problem["numbers"]
    target = problem["target"]
    lo, hi = budget or DEFAULT_BUDGET.get(len(numbers), (4, 8))
    attempts = rng.randint(lo, hi)
    tried = set()
    lines = []
    last = None
    for _ in range(attempts):
        for _ in range(200):  # a new attempt; a small search space may run out of them
            steps = random_chain(numbers, rng, cap, target)
            if steps and steps not in tried:
                break
        else:
            break
        tried.add(steps)
        lines.append(format_attempt(steps, target))
        last = steps
        if steps[-1][3] == target:
            break
    # (no chain found: never seen)
    answer = expression(last) if last else solutions(numbers, target, cap)[0]
    return "<think>\n" + "\n".join(lines) + "\n</think>\n\n\\boxed{" + answer + "}"


def teacher_pass_rate(problem: dict, k: int, seed=0, budget=None, cap: int = CAP) -> float:
    """The teacher's pass rate on a problem over k seeded samples."""
    wins = 0
    for j in range(k):
        rng = random.Random(f"teacher-{seed}-{problem['id']}-{j}")
        wins += countdown_reward(
            teacher_response(problem, rng, budget, cap), problem["numbers"], problem["target"]
        )
    return wins / k


def solutions(numbers, target, cap: int = CAP) -> list:
    """Every chain of the teacher's space (any order, any allowed operations, the last one too) that
    reaches the target, as answer expressions: the exhaustive search behind the tests' 'solvable'
    check."""
    found = set()

    def extend(steps, value, rest):
        if not rest:
            if value == target:
                found.add(expression(steps))
            return
        for op in OPS:
            s = step(value, rest[0], op, cap)
            if s:
                extend(steps + [s], s[3], rest[1:])

    for order in set(itertools.permutations(numbers)):
        if order[0] >= order[1]:
            for op in OPS:
                s = step(order[0], order[1], op, cap)
                if s:
                    extend([s], s[3], list(order[2:]))
    return sorted(found)
