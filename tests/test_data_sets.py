"""Public data sets in their published layout (hand-made rows in tests/fixtures/data_sets, written
from each set's schema source, listed in data.py's docstring): what comes out of the loaders (the
rendered SFT text, the ground truth, the number of tests; a correct program scores 1.0 in
reward.py's sandbox, a wrong one less), the same records from JSON lines, JSON arrays and parquet,
rows that cannot be graded refused or skipped and counted, assert programs turned into data-compared
tests, and one line for bad input from tools/data_stats.py."""

import ast
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import data
from tools import data_stats, filter_code
from parts import chat_template, formats
from parts.cli import parse_config
import reward

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = os.path.join(ROOT, "tests", "fixtures", "data_sets")
# these programs take milliseconds
SANDBOX = reward.SandboxConfig(timeout_s=4.0, workers=2, memory_mb=512)


def fixture(name):
    return os.path.join(SETS, name)


def jsonl_rows(name):
    with open(fixture(name)) as f:
        return [json.loads(line) for line in f if line.strip()]


def turn(role, text):
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


# ----------------------------------------------------------------------------- SFT

# (file, row, rendered conversation): hand-written from each set's layout and Qwen3's template
SFT_SETS = [
    (
        "openthoughts3.jsonl",
        0,
        turn("user", "What is $7 \\cdot 6$?")
        + turn("assistant", "<think>\nSeven sixes: 42.\n</think>\n\nThe product is $\\boxed{42}$."),
    ),
    # the markers become <think>; the system prompt that asks for the markers is gone
    (
        "openthoughts_114k.jsonl",
        0,
        turn("user", "Return your final response within \\boxed{}. What is $2^5$?")
        + turn(
            "assistant",
            "<think>\nDouble five times: 2, 4, 8, 16, 32.\n</think>\n\n$2^5 = \\boxed{32}$",
        ),
    ),
    (
        "openthoughts_114k_metadata.jsonl",
        1,
        turn("user", "Read a word and print it reversed.")
        + turn(
            "assistant",
            "<think>\nSlice with a step of -1.\n</think>\n\n```python\nprint(input()[::-1])\n```",
        ),
    ),
    (
        "opencodereasoning.jsonl",
        0,
        turn("user", "Read two integers and print their maximum.")
        + turn(
            "assistant",
            "<think>\nCompare the two numbers.\n</think>\n\n```python\na, b = map(int, input().split())\n"
            "print(max(a, b))\n```",
        ),
    ),
    (
        "openr1_math.jsonl",
        0,
        turn("user", "Find the remainder when $2^{10}$ is divided by $7$.")
        + turn(
            "assistant",
            "<think>\n2^10 = 1024 = 7*146 + 2.\n</think>\n\nThe remainder is $\\boxed{2}$.",
        ),
    ),
    # a short chain of thought without reasoning tags: an empty think block, as Qwen3's template
    # renders it
    (
        "numinamath_cot.jsonl",
        0,
        turn("user", "What is $15\\%$ of $40$?")
        + turn(
            "assistant",
            "<think>\n\n</think>\n\n$0.15 \\cdot 40 = 6$, so the answer is $\\boxed{6}$.",
        ),
    ),
]


@pytest.mark.parametrize("name,row,expected", SFT_SETS, ids=[s[0] for s in SFT_SETS])
def test_sft_sets_render_their_reasoning_inside_think(name, row, expected):
    conversations = data.load_sft_jsonl(fixture(name))
    assert len(conversations) == len(jsonl_rows(name))
    text = chat_template.render_chat(conversations[row])
    assert text == expected
    assert "<|begin_of_thought|>" not in text and "<|end_of_solution|>" not in text


def test_openthoughts_system_prompt_asking_for_markers_is_dropped_and_counted():
    assert (
        data.load_sft_jsonl(fixture("openthoughts_114k.jsonl")).report[
            "dropped_marker_system_prompts"
        ]
        == 2
    )


def test_sft_rows_that_cannot_be_learned_from(tmp_path):
    path = tmp_path / "sft.jsonl"
    good = {
        "conversations": [
            {"from": "user", "value": "q"},
            {"from": "assistant", "value": "<think>r</think>a"},
        ]
    }
    unfinished = {
        "conversations": [
            {"from": "user", "value": "q"},
            {
                "from": "assistant",
                "value": "<|begin_of_thought|>\n\nr\n\n<|end_of_thought|>\n\n<|begin_of_solution|>\n\na",
            },
        ]
    }
    unfilled = {
        "id": "x",
        "input": "-",
        "output": "<think>r</think>a",
        "dataset": "taco",
        "split": "train",
        "index": "7",
    }
    path.write_text("\n".join(json.dumps(r) for r in (good, unfinished, unfilled)) + "\n")
    with pytest.raises(
        data.UngradableRow, match=r"sft.jsonl:2: field 'conversations\[1\]'.*markers.*skip_bad_rows"
    ):
        data.load_sft_jsonl(str(path))
    loaded = data.load_sft_jsonl(str(path), skip_bad_rows=True)
    assert len(loaded) == 1 and loaded.report["skipped"] == {
        "malformed reasoning markers": 1,
        "question not filled in ('-')": 1,
    }


# --------------------------------------------------------------------- several responses per prompt


def test_openr1_generations_load_as_responses_with_their_verdicts():
    rows = data.load_responses(fixture("openr1_math.jsonl"))
    first = rows[0]
    assert first["id"] == "8e2b8c1e-0001-5d6a-9a0e-000000000001" and first["answer"] == "2"
    assert (
        first["prompt"] == "Find the remainder when $2^{10}$ is divided by $7$."
        and first["source"] == "openr1-math"
    )
    # the third generation was cut at the length limit: left out, counted
    assert first["responses"] == [
        {
            "content": "<think>\n2^10 = 1024 = 7*146 + 2.\n</think>\n\nThe remainder is $\\boxed{2}$.",
            "correct": True,
        },
        {
            "content": "<think>\n1024 / 7 leaves 3, I think.\n</think>\n\nThe remainder is $\\boxed{3}$.",
            "correct": False,
        },
    ]
    assert rows[1]["answer"] is None  # "proof": nothing to verify against
    assert rows.report["unfinished_responses"] == 1 and rows.report["answers_not_gradable"] == 1
    # the source's verdicts agree with math-verify on the fixture's responses
    for r in first["responses"]:
        assert (reward.math_reward(r["content"], first["answer"]) == 1.0) == r["correct"]


def test_single_response_sources_load_through_load_responses():
    meta = data.load_responses(fixture("openthoughts_114k_metadata.jsonl"))
    assert meta[0]["answer"] == "19" and meta[0]["responses"] == [
        {
            "content": "<think>\nNine plus ten is nineteen.\n</think>\n\n$9 + 10 = \\boxed{19}$",
            "correct": None,
        }
    ]
    assert meta[1]["tests"] == [
        {"input": "abc\n", "output": "cba\n"},
        {"input": "x\n", "output": "x\n"},
    ]
    ocr = data.load_responses(fixture("opencodereasoning.jsonl"))[0]
    assert (
        ocr["id"] == "0c1d1a6b8f"
        and ocr["answer"] is None
        and ocr["responses"][0]["content"].startswith(
            "<think>\nCompare the two numbers.\n</think>\n\n```python\n"
        )
    )
    ot = data.load_responses(fixture("openthoughts_114k.jsonl"))[0]
    assert ot["prompt"] == "Return your final response within \\boxed{}. What is $2^5$?"
    assert (
        ot["responses"][0]["content"]
        == "<think>\nDouble five times: 2, 4, 8, 16, 32.\n</think>\n\n$2^5 = \\boxed{32}$"
    )


# ----------------------------------------------------------------------------- math

# (file, answers of the rows kept with skip_bad_rows, a wrong answer for the first)
MATH_SETS = [
    ("openr1_math.jsonl", ["2"], "3"),
    ("numinamath_15.jsonl", ["6", "11"], "5"),
    ("numinamath_cot.jsonl", ["6"], "7"),
    ("klear_math.jsonl", ["4"], "8"),
    ("dapo_math.jsonl", ["6"], "7"),
    ("skywork_or1_math.jsonl", ["\\frac{1}{2}"], "\\frac{1}{3}"),
    ("deepscaler.jsonl", ["15"], "30"),
    ("deepscaler_verl.jsonl", ["15"], "30"),
    ("big_math.jsonl", ["15"], "8"),
    ("aime24.jsonl", ["50"], "25"),
    ("aime25.jsonl", ["70"], "16"),
    ("hmmt_202502.jsonl", ["4", "\\frac{5}{6}"], "6"),
]


def _math_response(answer):
    return f"<think>\nwork\n</think>\nThe answer is $\\boxed{{{answer}}}$."


@pytest.mark.parametrize("name,answers,wrong", MATH_SETS, ids=[s[0] for s in MATH_SETS])
def test_math_sets_give_the_right_ground_truth(name, answers, wrong):
    problems = data.load_math_jsonl(fixture(name), skip_bad_rows=True)
    assert [p["answer"] for p in problems] == answers
    assert reward.math_reward(_math_response(answers[0]), problems[0]["answer"]) == 1.0
    assert reward.math_reward(_math_response(wrong), problems[0]["answer"]) == 0.0


def test_authors_benchmark_files_keep_their_ids_and_prompts():
    hmmt = data.load_math_jsonl(fixture("hmmt_202502.jsonl"))
    assert [p["id"] for p in hmmt] == ["0", "1"]
    assert hmmt[0]["prompt"] == [
        {
            "role": "user",
            "content": "Compute the sum of the positive divisors of $12$ that are odd.",
        }
    ]
    assert data.load_math_jsonl(fixture("skywork_or1_math.jsonl"))[0]["answers"] == [
        "\\frac{1}{2}",
        "0.5",
    ]


def test_placeholder_answers_are_refused_or_skipped_and_counted():
    with pytest.raises(
        data.UngradableRow, match=r"numinamath_15.jsonl:2: field 'answer' is 'proof'.*skip_bad_rows"
    ):
        data.load_math_jsonl(fixture("numinamath_15.jsonl"))
    problems = data.load_math_jsonl(fixture("numinamath_15.jsonl"), skip_bad_rows=True)
    assert [p["id"] for p in problems] == ["numinamath_15.jsonl:1", "numinamath_15.jsonl:5"]
    assert problems.report["rows"] == 5 and problems.report["skipped"] == {
        "placeholder answer 'proof'": 1,
        "placeholder answer 'notfound'": 1,
        "question_type 'proof'": 1,
    }


# ----------------------------------------------------------------------------- code

# (file, tests per kept problem, {problem id: (a correct program, a wrong one)}): programs written
# by hand
CODE_SETS = [
    (
        "livecodebench.jsonl",
        [3, 3],
        {
            "abc999_a": (
                "a, b = map(int, input().split())\nprint(a + b)",
                "a, b = map(int, input().split())\nprint(a * b)",
            ),
            "3999": (
                "class Solution:\n    def largest(self, nums):\n        return max(nums)",
                "class Solution:\n    def largest(self, nums):\n        return nums[0]",
            ),
        },
    ),
    (
        "taco.jsonl",
        [3, 3],
        {
            "taco.jsonl:2": (
                "def double_it(n):\n    return n + n",
                "def double_it(n):\n    return [2 * n]",
            )
        },
    ),
    (
        "apps.jsonl",
        [2],
        {"4999": ("input()\nprint(sum(map(int, input().split())))", "print(input())")},
    ),
    (
        "skywork_or1_code.jsonl",
        [3],
        {
            "skywork_or1_code.jsonl:1": (
                "n = int(input())\nprint(n * (n + 1) // 2)",
                "n = int(input())\nprint(n * n)",
            )
        },
    ),
    (
        "klear_code.jsonl",
        [3, 3],
        {
            "klear_code.jsonl:1": (
                "n = int(input())\nd = [input() for _ in range(n)]\n"
                "print('No' if any(d[i] == d[i + 1] == 'sweet' for i in range(n - 2)) else 'Yes')",
                "print('Yes')",
            ),
            "klear_code.jsonl:2": (
                "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
                "        for i, x in enumerate(nums):\n            if target - x in seen:\n"
                "                return [seen[target - x], i]\n            seen[x] = i",
                "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]",
            ),
        },
    ),
    (
        "code_r1.jsonl",
        [3, 3],
        {
            "code_r1.jsonl:2": (
                "def count_upper(s):\n    return sum(c.isupper() for c in s)",
                "def count_upper(s):\n    return [sum(c.isupper() for c in s)]",
            )
        },
    ),
    (
        "rllm_deepcoder.jsonl",
        [2, 2, 2],
        {
            "rllm_deepcoder.jsonl:1": (
                "class Solution:\n    def smallest(self, nums):\n        return min(nums)",
                "class Solution:\n    def smallest(self, nums):\n        return nums[-1]",
            ),
            "rllm_deepcoder.jsonl:3": (
                "import math\nprint(math.factorial(int(input())))",
                "print(int(input()) * 2)",
            ),
        },
    ),
    (
        "rllm_leetcode.json",
        [3, 2],
        {
            "rllm_leetcode.json:1": (
                "class Solution:\n    def isPalindrome(self, x):\n        return str(x) == str(x)[::-1]",
                "class Solution:\n    def isPalindrome(self, x):\n        return x >= 0",
            )
        },
    ),
    (
        "primeintellect.jsonl",
        [2, 2],
        {
            "vfc_1000_A": ("print(int(input()) % 3)", "print(int(input()) % 2)"),
            "vfc_2999": (
                "def join_words(words, sep):\n    return sep.join(words)",
                "def join_words(words, sep):\n    return ''.join(words)",
            ),
        },
    ),
    (
        "deepcoder_preview.jsonl",
        [2, 2],
        {
            "deepcoder_preview.jsonl:1": (
                "class Solution:\n    def countEven(self, nums):\n        return len([x for x in nums if x % 2 == 0])",
                "class Solution:\n    def countEven(self, nums):\n        return len(nums)",
            )
        },
    ),
    (
        "code_contests.jsonl",
        [4],
        {
            "1999_A. Min of Three": (
                "print(sorted(map(int, input().split()))[0])",
                "print(input().split()[0])",
            )
        },
    ),
]


def _code_response(program):
    return f"<think>\nplan\n</think>\n\n```python\n{program}\n```"


@pytest.mark.parametrize("name,n_tests,programs", CODE_SETS, ids=[s[0] for s in CODE_SETS])
def test_code_sets_load_every_test_and_grade_programs(name, n_tests, programs):
    problems = data.load_code_jsonl(fixture(name), skip_bad_rows=True)
    assert [len(p["tests"]) for p in problems] == n_tests
    by_id = {p["id"]: p for p in problems}
    for pid, (right, wrong) in programs.items():
        tests = by_id[pid]["tests"]
        reward.validate_tests(tests)
        assert reward.code_reward(_code_response(right), tests, config=SANDBOX) == 1.0, (
            pid,
            "right",
        )
        assert reward.code_reward(_code_response(wrong), tests, config=SANDBOX) < 1.0, (
            pid,
            "wrong",
        )


def test_code_sets_decode_each_encoding_as_written():
    lcb = data.load_code_jsonl(fixture("livecodebench.jsonl"))
    assert lcb[1]["tests"] == [
        {"input": "[1, 5, 2]", "output": "5", "fn_name": "largest"},
        {"input": "[-3, -1]", "output": "-1", "fn_name": "largest"},
        {"input": "[7]", "output": "7", "fn_name": "largest"},
    ]
    contests = data.load_code_jsonl(fixture("code_contests.jsonl"))[0]
    # public+private+generated
    assert [t["input"] for t in contests["tests"]] == ["1 2 3\n", "5 -1 7\n", "4 4 4\n", "0 0 -9\n"]
    assert contests["solutions"] == ["print(min(map(int, input().split())))\n"]  # Python 3 only
    prime = {
        p["id"]: p
        for p in data.load_code_jsonl(fixture("primeintellect.jsonl"), skip_bad_rows=True)
    }
    # the markdown fence removed
    assert prime["vfc_1000_A"]["solutions"] == ["print(int(input()) % 3)\n"]
    assert prime["vfc_2999"]["tests"][0] == {
        "input": '["a", "b"]\n"-"',
        "output": '"a-b"',
        "fn_name": "join_words",
    }
    deepcoder = data.load_code_jsonl(fixture("rllm_deepcoder.jsonl"))
    # per-test metadata
    assert deepcoder[0]["tests"][0] == {"input": "[4, 2, 9]", "output": "2", "fn_name": "smallest"}
    leetcode = data.load_code_jsonl(fixture("rllm_leetcode.json"))
    assert leetcode[1]["tests"] == [
        {"input": "[3, 2, 2, 3]\n3", "output": "2", "fn_name": "removeElement"},
        {"input": "[0, 1, 2, 2, 3, 0, 4, 2]\n2", "output": "5", "fn_name": "removeElement"},
    ]
    assert leetcode[1]["solutions"][0].startswith("class Solution:\n    def removeElement(")
    code_r1 = data.load_code_jsonl(fixture("code_r1.jsonl"))
    assert [t["output"] for t in code_r1[0]["tests"]] == ["true", "false", "true"]
    # o[0] unwrapped
    assert code_r1[1]["tests"][0] == {"input": '"aBC"', "output": "2", "fn_name": "count_upper"}
    assert code_r1[0]["solutions"] == [
        "class Solution:\n    def isPalindrome(self, s: str) -> bool:\n        return s == s[::-1]\n"
    ]
    for pid, p in {
        p["id"]: p for p in data.load_code_jsonl(fixture("deepcoder_preview.jsonl"))
    }.items():
        assert all(
            reward.all_passed(reward.run_tests(s, p["tests"], SANDBOX)) for s in p["solutions"]
        ), pid


def test_code_rows_without_runnable_tests_are_refused_or_skipped_and_counted():
    with pytest.raises(
        data.UngradableRow,
        match=r"klear_code.jsonl:3: field 'reward_model.ground_truth.functional': "
        r"no assert could be turned into a test",
    ):
        data.load_code_jsonl(fixture("klear_code.jsonl"))
    klear = data.load_code_jsonl(fixture("klear_code.jsonl"), skip_bad_rows=True)
    # row 2: the tolerance assert is not converted; row 3: its one assert calls helpers on
    # non-literal values
    assert klear.report["asserts_not_converted"] == 2 and klear.report["skipped"] == {
        "no convertible assert": 1
    }
    with pytest.raises(data.UngradableRow, match=r"primeintellect.jsonl:3: .*'rust'"):
        data.load_code_jsonl(fixture("primeintellect.jsonl"))


# ------------------------------------------------------------------ assert programs, parsed not run

SIGNATURE = "class Solution:\n    def f(self, nums: List[int], target: int = 0, *, flag=False) -> List[int]:\n"


@pytest.mark.parametrize(
    "assertion,expected",
    [
        ("assert candidate(nums = [2,7], target = 9) == [0,1]", ("[2, 7]\n9", "[0, 1]")),
        # the signature's order
        ("assert candidate(target = 9, nums = [2,7]) == [0,1]", ("[2, 7]\n9", "[0, 1]")),
        ("assert candidate([2, 7], target = 9) == [0, 1]", ("[2, 7]\n9", "[0, 1]")),
        # a default left out at the end
        ("assert candidate(nums = [1]) == []", ("[1]", "[]")),
        ("assert [1] == candidate([1], 2)", ("[1]\n2", "[1]")),
        ("assert candidate([], -1) is None", ("[]\n-1", "null")),
        ("assert candidate([3], 1)", ("[3]\n1", "true")),
        ("assert not candidate([3], 1)", ("[3]\n1", "false")),
        (
            "assert candidate(nums = ['a', \"b\"], target = 2) == {'k': [None, 1.5]}",
            ('["a", "b"]\n2', '{"k": [null, 1.5]}'),
        ),
        ("assert candidate(target = 1) == [0]", None),  # nums left to no default: a gap
        ("assert candidate(nums = [1], flag = True) == [0]", None),  # keyword-only: no position
        ("assert candidate(nums = x) == [0]", None),  # a name, not a literal
        ("assert candidate(tree_node([1, 2])) == [0]", None),  # a call, not a literal
        ("assert abs(candidate([1], 2)[0] - 0.5) < 1e-6", None),  # a tolerance
        ("assert candidate([1], 2) == (0, 1)", None),  # a tuple is not a list
        ("assert candidate([1], 2) == {0, 1}", None),  # a set has no JSON
        # JSON would turn the key into "1"
        ("assert candidate([1], 2) == {1: 2}", None),
        ("assert candidate([1], 2) != [0]", None),
        ("assert sorted(candidate([2, 1], 2)) == [1, 2]", None),  # a helper around the call
    ],
)
def test_assert_conversion_hand_written_cases(assertion, expected):
    program = f"def check(candidate):\n    {assertion}\n\n\ncheck(Solution().f)"
    tests, lost = formats._asserts_as_tests(ast.parse(program), SIGNATURE)
    if expected is None:
        assert (tests, lost) == ([], 1)
    else:
        assert (tests, lost) == ([{"input": expected[0], "output": expected[1], "fn_name": "f"}], 0)


def test_assert_programs_at_top_level_and_in_loops():
    top = "assert Solution().f([1], 2) == [3]\nassert f([4]) == [5]\nfor x in range(3):\n    assert f([x]) == [x]\n"
    tests, lost = formats._asserts_as_tests(ast.parse(top), SIGNATURE)
    # the loop's assert is not converted
    assert [t["input"] for t in tests] == ["[1]\n2", "[4]"] and lost == 1
    # g: not the problem's
    assert formats._asserts_as_tests(ast.parse("assert g([1]) == 2"), SIGNATURE) == ([], 1)
    tolerant = (
        "_inputs = [[1], [2]]\n_outputs = [[0.5], [1]]\nfor i, o in zip(_inputs, _outputs):\n"
        "    assert _deep_eq(f(*i), o[0])\n"
    )
    tests, lost = formats._asserts_as_tests(ast.parse(tolerant), SIGNATURE)
    # 0.5 is compared with a tolerance
    assert tests == [{"input": "2", "output": "1", "fn_name": "f"}] and lost == 1


def test_an_always_equal_object_gains_nothing_from_a_converted_assert_program():
    """In Code-R1's grader `assert candidate(...) == [0, 1]` runs in the candidate's process, and an
    object whose __eq__ always says True passes; converted, the result is compared as JSON data
    outside it."""
    tests = data.load_code_jsonl(fixture("klear_code.jsonl"), skip_bad_rows=True)[1]["tests"]
    cheat = (
        "class Solution:\n    def twoSum(self, nums, target):\n        class Always(list):\n"
        "            def __eq__(self, other):\n                return True\n        return Always()"
    )
    assert reward.code_reward(_code_response(cheat), tests, config=SANDBOX) == 0.0


# -------------------------------------------------------------------------- JSON arrays and parquet


def write_twins(tmp_path, name):
    """The fixture as a pretty-printed JSON array, a one-line JSON array and parquet (pyarrow infers
    structs and lists, as Hugging Face's parquet files have them)."""
    rows = jsonl_rows(name)
    stem = os.path.splitext(name)[0]
    paths = {
        "pretty": tmp_path / f"{stem}.pretty.json",
        "line": tmp_path / f"{stem}.line.json",
        "parquet": tmp_path / f"{stem}.parquet",
    }
    paths["pretty"].write_text(json.dumps(rows, indent=2))
    paths["line"].write_text(json.dumps(rows))
    columns = {
        k: pa.array([r.get(k) for r in rows]) for k in dict.fromkeys(k for r in rows for k in r)
    }
    pq.write_table(pa.table(columns), paths["parquet"])
    return {k: str(v) for k, v in paths.items()}


def _same(loaded, twin):
    assert list(loaded) == list(twin)
    assert {**loaded.report, "file": None} == {**twin.report, "file": None}


@pytest.mark.parametrize(
    "name,load",
    [
        ("openthoughts_114k.jsonl", data.load_sft_jsonl),
        ("openthoughts_114k_metadata.jsonl", data.load_responses),
        ("openr1_math.jsonl", lambda p: data.load_math_jsonl(p, skip_bad_rows=True)),
        ("openr1_math.jsonl", data.load_responses),
        ("code_contests.jsonl", data.load_code_jsonl),
        ("livecodebench.jsonl", data.load_code_jsonl),
        ("primeintellect.jsonl", lambda p: data.load_code_jsonl(p, skip_bad_rows=True)),
    ],
)
def test_json_array_and_parquet_twins_load_to_the_same_records(tmp_path, name, load):
    expected = load(fixture(name))
    for path in write_twins(tmp_path, name).values():
        twin = load(path)
        # ids made of file:n name the twin's file
        if isinstance(expected[0], dict) and "id" in expected[0]:
            twin = data.Records(
                [{**r, "id": r["id"].replace(os.path.basename(path), name)} for r in twin],
                twin.report,
            )
        _same(expected, twin)


def test_parquet_values_decode_as_their_json_twin():
    table = pa.table(
        {
            "text": pa.array(["é", None], pa.large_string()),
            "blob": pa.array([b'{"inputs": ["1"]}', b"x"], pa.binary()),
            "scores": pa.array([[("a", 1)], None], pa.map_(pa.string(), pa.int64())),
            "date": pa.array([__import__("datetime").datetime(2024, 8, 1), None]),
            "nested": pa.array(
                [{"tests": [{"input": "1", "output": "2"}], "n": 1}, {"tests": [], "n": None}]
            ),
            "flag": pa.array([True, False]),
            "half": pa.array([1.5, None], pa.float16()),
        }
    )
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"values-{os.getpid()}.parquet")
    pq.write_table(table, path)
    try:
        rows = list(data.read_rows(path))
        assert type(rows[0][1]["half"]) is float  # not numpy's float16, which JSON cannot write
        assert rows == [
            (
                1,
                {
                    "text": "é",
                    "blob": '{"inputs": ["1"]}',
                    "scores": {"a": 1},
                    "date": "2024-08-01T00:00:00",
                    "nested": {"tests": [{"input": "1", "output": "2"}], "n": 1},
                    "flag": True,
                    "half": 1.5,
                },
            ),
            (
                2,
                {
                    "text": None,
                    "blob": "x",
                    "scores": None,
                    "date": None,
                    "nested": {"tests": [], "n": None},
                    "flag": False,
                    "half": None,
                },
            ),
        ]
    finally:
        os.remove(path)


def test_parquet_is_read_in_batches(tmp_path, monkeypatch):
    path = str(tmp_path / "many.parquet")
    pq.write_table(
        pa.table(
            {
                "problem": [f"{i} + 1?" for i in range(2500)],
                "answer": [str(i + 1) for i in range(2500)],
            }
        ),
        path,
        row_group_size=1000,
    )
    seen = []
    real = pq.ParquetFile.iter_batches

    def iter_batches(self, *args, **kwargs):  # the batches the loader asks for, as they come
        for batch in real(self, *args, **kwargs):
            seen.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)
    problems = data.load_math_jsonl(path)
    assert len(problems) == 2500 and problems[-1] == dict(
        id="many.parquet:2500", prompt="2499 + 1?", answer="2500"
    )
    assert max(seen) <= formats.PARQUET_BATCH_ROWS and sum(seen) == 2500


def test_json_arrays_stream_through_a_small_window_and_name_the_bad_element(tmp_path):
    rows = [
        {"problem": f"{i}?", "answer": str(i), "note": "x" * (i * 7) + '\\"\u00e9 true'}
        for i in range(40)
    ]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(rows, indent=1))
    # every cut point survives
    assert [r for _, r in formats._json_array_rows(str(path), chunk_chars=5)] == rows
    path.write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")  # a .json file of JSON lines
    assert [r for _, r in data.read_rows(str(path))] == rows[:3]
    for text, words in [
        ("[]", "no records"),
        ('[{"a": 1} {"b": 2}]', "a.json:1: malformed JSON (expected ','"),
        ('[{"a": 1}, {"b": }]', "a.json:2: malformed JSON"),
        ('[{"a": 1}] x', "after the array"),
        ('[{"a": 1}, {"b": "open', "a.json:2: malformed JSON"),
        ('[{"a": 1}, 3]', "a.json:2: expected a JSON object"),
    ]:
        path.write_text(text)
        with pytest.raises(data.DataError, match=words.replace("(", r"\(")):
            list(data.read_rows(str(path)))


def test_copy_rows_keeps_the_input_format(tmp_path):
    twins = write_twins(tmp_path, "deepcoder_preview.jsonl")
    for kind in ("pretty", "parquet"):
        out = str(tmp_path / f"kept.{kind}{os.path.splitext(twins[kind])[1]}")
        assert data.copy_rows(twins[kind], out, {2}) == 1
        assert [r for _, r in data.read_rows(out)] == [
            r for n, r in data.read_rows(twins[kind]) if n == 2
        ]
    assert pq.read_schema(str(tmp_path / "kept.parquet.parquet")).equals(
        pq.read_schema(twins["parquet"])
    )
    out = str(tmp_path / "kept.jsonl")
    data.copy_rows(fixture("deepcoder_preview.jsonl"), out, {1})
    assert open(out).read() == open(fixture("deepcoder_preview.jsonl")).readline()


def test_filter_code_writes_kept_rows_in_the_input_format(tmp_path):
    twins = write_twins(tmp_path, "deepcoder_preview.jsonl")
    for kind in ("line", "parquet"):
        out = str(tmp_path / f"filtered{os.path.splitext(twins[kind])[1]}")
        counts = filter_code.filter_code_main(
            filter_code.CodeFilterConfig(code_data=twins[kind], out=out, min_tests=1, workers=1)
        )
        assert counts["kept"] == 2
        assert [r for _, r in data.read_rows(out)] == [r for _, r in data.read_rows(twins[kind])]


def test_eval_reads_the_authors_benchmark_files_in_any_format(tmp_path):
    import eval as ev

    aime = write_twins(tmp_path, "aime24.jsonl")["parquet"]
    cfg = ev.EvalConfig(math_data=f"{fixture('hmmt_202502.jsonl')},{aime}")
    benchmarks = ev.load_benchmarks(cfg)
    assert [(b["name"], len(b["problems"])) for b in benchmarks] == [
        ("hmmt_202502", 2),
        ("aime24", 1),
    ]
    assert benchmarks[1]["problems"][0]["answer"] == "50"


# ----------------------------------------------------------------------------- tools/data_stats.py


def test_stats_reads_every_format_and_gives_one_line_for_bad_input(tmp_path, capsys):
    parquet = write_twins(tmp_path, "numinamath_15.jsonl")["parquet"]
    data_stats.stats(parse_config(data_stats.StatsConfig, [parquet, "--skip_bad_rows=true"]))
    out = capsys.readouterr().out
    assert "2 math records" in out
    assert (
        """'skipped': {"placeholder answer 'proof'": 1, "placeholder answer 'notfound'": 1""" in out
    )
    data_stats.stats(parse_config(data_stats.StatsConfig, [fixture("openr1_math.jsonl")]))
    out = capsys.readouterr().out
    assert "2 responses records" in out and "1 correct, 3 wrong" in out, out
    with pytest.raises(
        data.UngradableRow, match="numinamath_15.parquet:2: field 'answer' is 'proof'"
    ):
        data_stats.stats(parse_config(data_stats.StatsConfig, [parquet]))
    with pytest.raises(SystemExit, match="is not true or false"):
        parse_config(data_stats.StatsConfig, [parquet, "--skip_bad_rows=yes"])
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    # as a user runs it: one line, exit status 2
    for bad in (str(tmp_path / "broken.parquet"), parquet):
        out = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools", "data_stats.py"), bad],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            out.returncode == 2 and out.stdout == "" and len(out.stderr.strip().splitlines()) == 1
        ), out
        assert out.stderr.startswith("error: ") and (
            "not a readable parquet" in out.stderr or "'proof'" in out.stderr
        )
