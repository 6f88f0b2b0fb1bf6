"""Multi-digit sums, the first toy task: addition with a digit-by-digit `<think>` trace and a
`\\boxed{}` answer.

    problems = math_problems(200, split="test", min_digits=3, max_digits=3)   # [{id, prompt, answer}]
    math_response(a, b, rng, slip_probability=0.7)   # the toy teacher: its trace slips once, sometimes
Train and test never share a problem (the split is a hash of the problem). The toy teacher's slips
are what the paper's difficulty rule keeps on hard prompts ("mixed" data; distill.py on the files
`python tools/toy.py --task=sums` writes). docs/toy_sums.md tells the task and what the toy model
learns. Standard library only.
"""

import random
import zlib

from . import programs


def math_problems(
    n: int, seed: int | str = 0, split: str = "train", min_digits: int = 1, max_digits: int = 4
) -> list:
    """n addition problems {id, prompt, answer}; each operand has a uniform number of digits in
    [min_digits, max_digits]. 10% of all pairs are held out as "test" (distinct problems there)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    rng = random.Random(f"toy-math-{split}-{seed}")
    seen = set()
    problems = []
    for _ in range(200 * n + 1000):
        if len(problems) == n:
            break
        a, b = (_number(rng, rng.randint(min_digits, max_digits)) for _ in range(2))
        if _split_of(f"{a}+{b}", 10) != split or (split == "test" and (a, b) in seen):
            continue
        seen.add((a, b))
        problems.append(dict(id=f"add-{a}-{b}", prompt=f"What is {a} + {b}?", answer=str(a + b)))
    if len(problems) < n:
        raise ValueError(
            f"only {len(problems)} distinct {split} problems with {min_digits}-{max_digits} digits; "
            "ask for fewer"
        )
    return problems


def _split_of(key: str, test_every: int) -> str:
    """A problem's split from a hash of its content, so train and test never share a problem."""
    return "test" if zlib.crc32(key.encode()) % test_every == 0 else "train"


def _number(rng, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def addition_trace(a: int, b: int, slip_column: int | None = None, slip: int = 1) -> tuple:
    """The digit-by-digit chain of thought, right to left, one line 'x+y+carry=sum' per column, and
    the answer it leads to. slip_column adds `slip` to that column's sum; later columns and the
    answer follow the mistake, as a flawed but self-consistent teacher trace would."""
    da = str(a)[::-1]
    db = str(b)[::-1]
    lines = []
    digits = []
    carry = 0
    for j in range(max(len(da), len(db))):
        x = int(da[j]) if j < len(da) else 0
        y = int(db[j]) if j < len(db) else 0
        s = x + y + carry + (slip if j == slip_column else 0)
        lines.append(f"{x}+{y}+{carry}={s}")
        digits.append(s % 10)
        carry = s // 10
    if carry:
        digits.append(carry)
    return "\n".join(lines), int("".join(map(str, reversed(digits))))


def math_response(a: int, b: int, rng: random.Random, slip_probability: float) -> str:
    """A toy teacher's answer to `a + b`: the `<think>` trace and the `\\boxed{}` sum. With
    probability slip_probability the trace slips once, by one, in a random column (drawn from rng
    only then), and the answer follows the slip: a wrong answer from a self-consistent trace."""
    slip_column = slip = None
    if slip_probability > 0 and rng.random() < slip_probability:
        slip_column = rng.randrange(max(len(str(a)), len(str(b))))
        s = int(addition_trace(a, b)[0].split("\n")[slip_column].split("=")[1])
        slip = -1 if s == 19 else (1 if s == 0 else rng.choice((-1, 1)))  # keep the sum in 0..19
    trace, answer = addition_trace(a, b, slip_column, slip or 0)
    return f"<think>\n{trace}\n</think>\n\n\\boxed{{{answer}}}"


def math_sft_examples(
    n: int, seed: int = 0, wrong_fraction: float = 0.6, min_digits: int = 1, max_digits: int = 4
) -> list:
    """n SFT conversations on train-split problems: user question, assistant `<think>` trace +
    `\\boxed{}`. On hard problems (an operand with >= 3 digits) a wrong_fraction of the traces slip
    once in a random column and end in a wrong answer; wrong_fraction=0 gives only-correct data. A
    fixed mix, made without the recipe: the sums tokenizer's corpus is made of it; `TOY=sums bash
    train.sh` makes its SFT data with distill.py (the toy teacher sampled k times per prompt, then
    the paper's rule)."""
    rng = random.Random(f"toy-math-sft-{seed}")
    conversations = []
    # not the RL prompts' stream
    for p in math_problems(n, f"sft-{seed}", "train", min_digits, max_digits):
        a, b = map(int, p["id"].split("-")[1:])
        hard = max(len(str(a)), len(str(b))) >= 3
        conversations.append(
            [
                {"role": "user", "content": p["prompt"]},
                {
                    "role": "assistant",
                    "content": math_response(a, b, rng, wrong_fraction if hard else 0.0),
                },
            ]
        )
    return conversations


def sft_conversations(n_math: int, n_code: int, seed: int = 0, wrong_fraction: float = 0.6) -> list:
    """The toy SFT mix: n_math addition and n_code programming conversations, shuffled by seed."""
    conversations = math_sft_examples(n_math, seed, wrong_fraction) + programs.code_sft_examples(
        n_code, seed
    )
    random.Random(f"toy-sft-mix-{seed}").shuffle(conversations)
    return conversations
