"""The Countdown checker: is a response's answer an expression that reaches the target from the
given numbers?

A Countdown problem (TinyZero's data set, Jiayi-Pan/Countdown-Tasks-3to4: rows {"target": 41,
"nums": [12, 5, 3]}) asks for the target from the numbers with + - * / and parentheses, each number
used exactly once. The response's answer is the last \\boxed{} after its last </think>:

    countdown_reward(response, numbers, target) = 1.0 if the boxed text is an expression of decimal integer literals,
        binary + - * / and parentheses, its literals equal the numbers as a multiset, and its exact value (with
        fractions) equals the target; else 0.0

Linear in the response's length (a boxed text over MAX_EXPR_CHARS characters scores 0); nothing is
ever evaluated but the parsed tree of those literals and operators. Standard library only.
    python countdown_check.py "<think>x</think> \\boxed{12*3+5}" --numbers=12,5,3 --target=41   # prints 1.0
"""

import ast
import re
import sys
from collections import Counter
from fractions import Fraction

# a longer boxed expression scores 0 (it cannot be a use of a few small numbers anyway)
MAX_EXPR_CHARS = 200

_EXPR_CHARS = re.compile(r"[0-9+\-*/() ]*")  # fullmatch on <= MAX_EXPR_CHARS characters: linear
_BOX = "\\boxed{"


def countdown_reward(response: str, numbers, target) -> float:
    """1.0 when the response's answer (the last \\boxed{} after the last </think>) is an allowed
    expression that uses the given numbers exactly (as a multiset) and equals the target; else
    0.0."""
    parsed = parse_expression(extract_answer(response))
    if parsed is None:
        return 0.0
    literals, tree = parsed
    if Counter(literals) != Counter(int(v) for v in numbers):
        return 0.0
    try:
        value = evaluate(tree)
    except (ZeroDivisionError, RecursionError):
        return 0.0
    return 1.0 if value == Fraction(target) else 0.0


def extract_answer(response: str):
    """The boxed expression of the answer: after the last `</think>`, the last `\\boxed{...}`'s
    content (it holds no braces), or None."""
    cut = response.rfind("</think>")
    if cut < 0:
        return None
    answer = response[cut + len("</think>") :]
    start = answer.rfind(_BOX)
    if start < 0:
        return None
    end = answer.find("}", start + len(_BOX))
    if end < 0:
        return None
    return answer[start + len(_BOX) : end]


def parse_expression(text: str):
    """(literals, tree) of an allowed expression, or None: decimal integer literals, binary + - * /,
    parentheses."""
    if (
        text is None
        or len(text) > MAX_EXPR_CHARS
        or not _EXPR_CHARS.fullmatch(text)
        or not text.strip()
    ):
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    literals = []

    def ok(node) -> bool:
        if isinstance(node, ast.BinOp):
            return (
                isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div))
                and ok(node.left)
                and ok(node.right)
            )
        if isinstance(node, ast.Constant) and type(node.value) is int:
            literals.append(node.value)
            return True
        return False  # names, calls, unary ops, **, //, %, floats, comparisons ...

    try:
        return (literals, tree.body) if ok(tree.body) else None
    except RecursionError:
        return None


def evaluate(node) -> Fraction:
    """Exact value of a parsed tree (raises ZeroDivisionError)."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    left = evaluate(node.left)
    right = evaluate(node.right)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return left / right


if __name__ == "__main__":
    options = {
        a.split("=", 1)[0]: a.split("=", 1)[1]
        for a in sys.argv[1:]
        if a.startswith("--") and "=" in a
    }
    texts = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--help" in sys.argv or len(texts) != 1 or set(options) != {"--numbers", "--target"}:
        print(
            "usage: python countdown_check.py RESPONSE --numbers=12,5,3 --target=41   (prints 1.0 or 0.0)"
        )
        sys.exit(0 if "--help" in sys.argv else 2)
    print(
        countdown_reward(
            texts[0], [int(v) for v in options["--numbers"].split(",")], int(options["--target"])
        )
    )
