"""Tests for reward.py.

Math: a table of tricky pairs judged by math-verify through our worker (from the main thread and
from threads), format failures on both reward scales (by hand from the authors' reward_config.py),
and pathological input that must not hang. Code: output comparison (LiveCodeBench's verdicts, in
linear time), test validation, honest programs, and an adversarial suite: each program must get
reward 0 (or exactly what an honest program earns), finish within its timeout, leave no process
behind and write nothing outside its temporary directory. Candidates sharing the machine: two at
once share no IPC object or keyring and cannot starve each other of processes; a test's memory limit
holds for all its processes together. The adversarial suite runs in the best sandbox this machine
allows (namespaces here); a smaller part runs in "plain" mode and as a non-root trainer. No-leftover
checks look only at this process's descendants (it is a child subreaper while these tests run), so
the suite passes beside anything else that runs sandboxes, including a second copy of itself.
"""

import ctypes
import dataclasses
import decimal
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import reward
from parts import sandbox
from parts import math_checker
from reward import SandboxConfig, code_reward, code_reward_details, math_reward, run_tests

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# For programs that finish: a generous timeout, so that they pass on a loaded machine (two copies of
# this suite at once on 2 busy cores start an interpreter in over a second); tests that expect a
# timeout set a short one. 256 MB: a memory bomb hits it quickly
FAST = SandboxConfig(timeout_s=5, workers=2, memory_mb=256)
PLAIN = SandboxConfig(timeout_s=5, workers=2, memory_mb=256, namespaces="off")
# allowed beyond the timeout: process start and teardown on a busy 2-core machine
SLACK_S = 2.0
FILE_SECRET = "reward-test-file-secret-5b1f0c93"  # only readable by opening this file
ADD = [{"input": "1 2\n", "output": "3"}, {"input": "20 22\n", "output": "42"}]
PR_SET_CHILD_SUBREAPER = 36
ADD_FN = [
    {"input": "1\n2", "output": "3", "fn_name": "add"},
    {"input": "20\n22", "output": "42", "fn_name": "add"},
]


def respond(code: str) -> str:
    return f"<think>\nLet me write it.\n</think>\nHere it is:\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def namespaced():
    """The sandbox as chosen on this machine; probed once so the probe does not count in timings."""
    info = reward.sandbox_info(FAST)
    if info["mode"] == "plain":
        pytest.skip(
            "this platform cannot create namespaces (unshare missing or not permitted): "
            + str(info)
        )
    return info


@pytest.fixture(scope="module", autouse=True)
def adopt_orphans():
    """Make this process a child subreaper while these tests run, so that whatever our sandboxes
    leave behind is re-parented to us: the no-leftover checks then read only this process's own
    descendants, never the machine's other processes (other test runs, other trainers with sandboxes
    of their own)."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    reap_adopted_zombies()


def descendants() -> list[tuple[int, str, str, bytes]]:
    """(pid, name, state, cmdline) of every descendant of this process (state "Z": a zombie)."""
    found = []
    pending = [os.getpid()]
    while pending:
        parent = pending.pop()
        try:
            children = []
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children", "rb") as file:
                    children += map(int, file.read().split())
        except OSError:
            continue  # it exited meanwhile
        for pid in children:
            try:
                with (
                    open(f"/proc/{pid}/stat", "rb") as stat,
                    open(f"/proc/{pid}/cmdline", "rb") as cmdline,
                ):
                    name, rest = stat.read().split(b"(", 1)[1].rsplit(b")", 1)
                    found.append(
                        (
                            pid,
                            name.decode(errors="replace"),
                            rest.split()[0].decode(),
                            cmdline.read(),
                        )
                    )
            except OSError:
                continue
            pending.append(pid)
    return found


def reap_adopted_zombies():
    """Reap namespace inits (sh) and launchers (unshare) re-parented to us after their parent died;
    nothing in these tests starts either directly, so no Popen object waits for them."""
    for pid, name, state, _ in descendants():
        if state == "Z" and name in ("sh", "unshare"):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def leftovers(*markers: str, harness: bool = True) -> list[str]:
    """Command lines of our live descendants that run the sandbox harness or bear a marker."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip(
            "this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) to find our descendants"
        )
    needles = [b"def _prepare()"] * harness + [marker.encode() for marker in markers]
    return [
        cmdline[:80].decode(errors="replace")
        for _, _, state, cmdline in descendants()
        if state != "Z" and any(needle in cmdline for needle in needles)
    ]


def assert_no_leftovers(*markers: str, within_s: float = 1.0):
    deadline = time.monotonic() + within_s
    while (found := leftovers(*markers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    reap_adopted_zombies()
    assert not found, f"processes left behind: {found}"


# ----------------------------------------------------------------------------- math

EQUAL = [
    ("\\frac12", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("073", "73"),
    ("73", "073"),
    ("2\\sqrt2", "\\sqrt8"),
    ("30\\%", "0.3"),
    ("\\{1,2,3\\}", "\\{3,2,1\\}"),
    ("3", "x=3"),
    ("10^{10}", "10000000000"),
]
UNEQUAL = [
    ("\\frac13", "0.333"),
    ("(1,2)", "(2,1)"),
    ("(1,2)", "[1,2]"),
    ("5", "6"),
    # two boxed answers, the last one wrong
    ("3", "3} Wait, that is wrong: the answer is \\boxed{4"),
]


def boxed(answer: str) -> str:
    return f"<think>\nwork\n</think>\nThe answer is $\\boxed{{{answer}}}$."


def test_answer_region_is_text_after_last_think_end():
    assert reward.extract_answer_region("<think>a</think>b</think>c") == "c"
    assert reward.extract_answer_region("<think>no end") is None
    assert reward.extract_answer_region("</think>") == ""


@pytest.mark.parametrize("gold,answer", EQUAL)
def test_math_equal_pairs(gold, answer):
    assert math_reward(boxed(answer), gold) == 1.0


@pytest.mark.parametrize("gold,answer", UNEQUAL)
def test_math_unequal_pairs(gold, answer):
    assert math_reward(boxed(answer), gold) == 0.0


def test_math_judges_only_after_last_think_end():
    assert math_reward("<think>so \\boxed{3}</think> The answer is \\boxed{4}.", "3") == 0.0
    assert math_reward("<think>so \\boxed{4}</think> The answer is \\boxed{3}.", "3") == 1.0
    # gold may be a number
    assert math_reward("<think>so \\boxed{3}</think> I am not sure.", 3) == 0.0


# (response, gold, reward on DEFAULT_SCALE, reward on AUTHORS_SCALE), by hand from the authors'
# reward_config.py (correct 1, incorrect -1, wo_eos_think -0.5, wo_bos_think -2.0; `</think>`
# checked before `<think>`)
MATH_SCALES = [
    ("<think>x</think> \\boxed{3}", "3", 1.0, 1.0),
    ("<think>x</think> \\boxed{2}", "3", 0.0, -1.0),
    ("<think>\\boxed{3} and never closed", "3", 0.0, -0.5),  # no </think>
    # no <think>: only the authors check
    ("\\boxed{3} and never opened </think> \\boxed{3}", "3", 1.0, -2.0),
    # both missing: </think> is checked first
    ("no thinking at all, \\boxed{3}", "3", 0.0, -0.5),
]


@pytest.mark.parametrize("response,gold,default,authors", MATH_SCALES)
def test_math_reward_scales(response, gold, default, authors):
    assert math_reward(response, gold) == default
    assert math_reward(response, gold, scale=reward.DEFAULT_SCALE) == default
    assert math_reward(response, gold, scale=reward.AUTHORS_SCALE) == authors


def test_math_works_from_threads_where_math_verify_alone_fails():
    import math_verify

    with ThreadPoolExecutor(2) as pool:
        # why the worker exists: signal.alarm needs the main thread
        with pytest.raises(ValueError, match="thread"):
            pool.submit(math_verify.parse, "\\boxed{1}").result()
        pairs = EQUAL + UNEQUAL
        got = list(pool.map(lambda pair: math_reward(boxed(pair[1]), pair[0]), pairs))
    assert got == [1.0] * len(EQUAL) + [0.0] * len(UNEQUAL)


def test_set_workers_bounds_the_busy_math_workers(monkeypatch):
    """At most n math-verify processes at once: with n = 1, eight threads' requests queue for one
    worker (only one is ever started, where a pool of 4 starts one per waiting request up to 4); a
    bad n is an error."""
    pool = math_checker._MathWorkers(size=4)
    monkeypatch.setattr(math_checker, "_WORKERS", pool)
    math_checker.set_workers(1)
    started = []
    start = pool._start
    monkeypatch.setattr(pool, "_start", lambda: started.append(1) or start())
    pairs = (EQUAL * 8)[:8]
    try:
        with ThreadPoolExecutor(8) as threads:
            got = list(threads.map(lambda pair: math_reward(boxed(pair[1]), pair[0]), pairs))
    finally:
        pool.close()
    assert got == [1.0] * 8 and len(started) == 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="set_workers"):
            math_checker.set_workers(bad)


@pytest.mark.parametrize(
    "answer",
    [
        "9^{9^{9^{9}}}",
        "(10^{10})!",
        "(" * 5000,
        "\\frac{1}{" * 400 + "2" + "}" * 400,
        "9" * 200_000,
    ],
)
def test_math_pathological_input_finishes(answer):
    # a worker already running: starting one (~1 s of CPU) is not what the bound is about
    assert math_reward(boxed("1"), "1") == 1.0
    start = time.monotonic()
    assert math_reward(boxed(answer), "3", timeout_s=1.0) == 0.0
    assert time.monotonic() - start < 1.0 + 0.5 + SLACK_S


def test_math_deadline_kills_a_stuck_worker_and_recovers():
    # The worker's own alarm fires after a whole second; our 0.3 s (+0.5 s) deadline kills it first.
    assert math_reward(boxed("1"), "1") == 1.0  # a worker already running, as above
    start = time.monotonic()
    assert math_reward(boxed("9^{9^{9^{9}}}"), "3", timeout_s=0.3) == 0.0
    assert time.monotonic() - start < 0.8 + SLACK_S
    assert math_reward(boxed("\\frac12"), "0.5") == 1.0  # a fresh worker takes over


def test_math_bad_gold_raises():
    # the data's fault, not the candidate's
    with pytest.raises(reward.BadReference, match="empty"):
        math_reward(boxed("3"), "  ")
    assert all(issubclass(error, ValueError) for error in reward.BadReference)


# --------------------------------------------------------------- comparison, extraction, validation

STDOUT_PAIRS = [  # (got, expected, match)
    ("3\n", "3", True),
    ("1 2 3   \n", "1 2 3", True),
    ("1\r\n2\r\n", "1\n2\n", True),
    ("2.0", "2", True),
    ("0.50", "0.5", True),
    ("1e3", "1000", True),
    ("1  2", "1 2", True),
    ("\n\n3\n\n", "3", True),
    ("0.30000000000000004", "0.3", False),
    ("nan", "nan", True),
    ("nan", "NaN", False),
    ("nan 1", "nan  1", False),
    ("sNaN", "sNaN", True),
    ("sNaN", "1", False),
    ("YES", "yes", False),
    ("1\n2", "1", False),
    ("1", "1\n2", False),
    ("1 2", "1 2 3", False),
    ("", "0", False),
    ("", "", True),
    ("3 4", "3 5", False),
    ("-0", "0", True),
    # LiveCodeBench compares a line as numbers only if every token of both lines is one
    ("YES 3.0", "YES 3", False),
    ("Case 1: 2", "Case 1: 2", True),
    # what Python's Decimal and str.split accept, as LiveCodeBench does: Unicode digits, `_`
    # grouping, inf, Unicode whitespace (NBSP, ideographic space) between tokens and around lines
    ("\u0663", "3", True),
    ("\uff13", "3", True),
    ("\u0663\u0664", "34", True),
    ("1_0", "10", True),
    ("inf", "Infinity", True),
    ("1\u00a02", "1 2", True),
    ("1\u30002", "1 2", True),
    ("\u00a03\u3000", "3", True),
    ("\u0663", "\u0664", False),
    ("1\u00a02", "12", False),
]


def livecodebench_accepts(got: str, expected: str) -> bool:
    """LiveCodeBench's verdict on one stdin test, transcribed from grade_stdio and its helpers in
    lcb_runner/evaluation/testing_util.py (an error while comparing counts as a failure)."""

    def stripped_lines(text):
        return [line.strip() for line in text.strip().split("\n")]

    def decimals(line):
        try:
            return True, [decimal.Decimal(token) for token in line.split()]
        except Exception:
            return False, []

    got_lines = stripped_lines(got)
    expected_lines = stripped_lines(expected)
    if len(got_lines) != len(expected_lines):
        return False
    for got_line, expected_line in zip(got_lines, expected_lines):
        if got_line == expected_line:
            continue
        (ok_got, got_numbers) = decimals(got_line)
        (ok_expected, expected_numbers) = decimals(expected_line)
        try:
            if not (ok_got and ok_expected and got_numbers == expected_numbers):
                return False
        except decimal.InvalidOperation:
            return False
    return True


@pytest.mark.parametrize("got,expected,match", STDOUT_PAIRS)
def test_stdout_comparison(got, expected, match):
    assert (sandbox.stdout_mismatch(got, expected) is None) == match
    # the table is LiveCodeBench's verdict, pair by pair
    assert livecodebench_accepts(got, expected) == match


def test_comparison_is_linear_in_the_output_size():
    """A 1 MB token (or line, or code block) must be judged in well under a second: this runs in the
    trainer. Today's linear code takes ~0.1 s here; a backtracking number regex took 66 s on a 40 KB
    token (hours on 1 MB), so the 30 s bound only catches super-linear work, never a slow
    machine."""
    code = (
        "import reward\nfrom parts import sandbox\n"
        "mega = '1' * (1 << 20)\n"
        "assert sandbox.stdout_mismatch(mega + 'x', '1') is not None\n"
        "assert sandbox.stdout_mismatch(mega, mega + '1') is not None\n"
        "assert sandbox.stdout_mismatch(mega + '.5', mega + '.50') is None\n"
        "assert sandbox.stdout_mismatch('1.' * (1 << 19), '1') is not None\n"
        "assert sandbox.stdout_mismatch('1 ' * (1 << 19), '1 ' * (1 << 19)) is None\n"
        "assert reward.extract_code('</think>' + '```python' + ' ' * (1 << 20)) is None\n"
        "reward.extract_code('</think>' + '```python\\n' * (1 << 16))\n"
    )
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=30)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    "a,b,same",
    [
        (True, 1, False),
        (1, 1.0, True),
        ([1, [2, {"k": None}]], [1, [2, {"k": None}]], True),
        ("1", 1, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([1, 2], [2, 1], False),
        (None, 0, False),
    ],
)
def test_functional_json_equality(a, b, same):
    assert sandbox._same_json(a, b) == same


def test_extract_code_takes_last_block_after_think():
    text = "<think>```python\nprint('thinking')\n```</think>```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```"
    assert reward.extract_code(text) == "print(2)\n"
    assert reward.extract_code("<think>```python\nprint(1)\n```</think> no code") is None
    assert reward.extract_code("<think>x</think>```python\nprint(1)\n") is None  # truncated block
    assert reward.extract_code("```python\nprint(1)\n```") is None  # no </think>


def test_code_format_failures_get_their_rewards():
    authors = reward.AUTHORS_SCALE
    assert code_reward_details("<think>never closed ```python\nprint(3)\n```", ADD) == (0.0, [])
    assert code_reward("<think>never closed ```python\nprint(3)\n```", ADD, scale=authors) == -0.5
    assert (
        code_reward("no think at all</think>```python\nprint(3)\n```", ADD, scale=authors) == -2.0
    )
    assert code_reward_details("<think>x</think> I cannot solve it.", ADD) == (0.0, [])
    # format_error_score
    assert code_reward("<think>x</think> I cannot solve it.", ADD, scale=authors) == -1.0
    custom = reward.RewardScale(missing_code=-0.25)
    assert code_reward("<think>x</think> nothing", ADD, scale=custom) == -0.25


@pytest.mark.parametrize(
    "tests,message",
    [
        ([], "non-empty"),
        ([{"input": "1"}], r"tests\[0\]\['output'\]"),
        ([{"input": 1, "output": "1"}], r"\['input'\]"),
        ([{"input": "", "output": "3"}, "x"], r"tests\[1\]"),
        ([{"input": "1\n{", "output": "3", "fn_name": "f"}], "line 2"),
        ([{"input": "1", "output": "[1", "fn_name": "f"}], r"\['output'\]: not JSON"),
        ([{"input": "1", "output": "1", "fn_name": "not a name"}], "fn_name"),
    ],
)
def test_bad_tests_are_named_in_the_error(tests, message):
    # the data's fault, not the candidate's
    with pytest.raises(reward.BadReference, match=message):
        code_reward(respond("print(3)"), tests)


# ----------------------------------------------------------------------------- honest programs


@pytest.mark.parametrize(
    "program,tests",
    [
        ("print(sum(map(int, input().split())))", ADD),
        (
            "a, b = map(float, input().split())\nprint(a / b)",
            [
                {"input": "1 4", "output": "0.25"},
                # prints 2.0
                {"input": "6 3", "output": "2"},
            ],
        ),
        (
            "n = int(input())\nprint(*range(n), end=' \\n')\nprint('done  ')",
            [{"input": "3", "output": "0 1 2\ndone"}],
        ),
        ("import sys\nsys.stdout.write('1\\r\\n2\\r\\n')", [{"input": "", "output": "1\n2"}]),
        (
            "import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data)))\nsys.exit(0)",
            [{"input": "1\n" * 300_000, "output": "300000"}],
        ),  # 600 KB of input, exit(0) after the output
        (
            "import sys\nsys.setrecursionlimit(10000)\ndef f(n): return n and 1 + f(n - 1)\nprint(f(int(input())))",
            [{"input": "3000", "output": "3000"}],
        ),
        # larger than one argv string
        ("# " + "x" * 300_000 + "\nprint(3)", [{"input": "", "output": "3"}]),
    ],
)
def test_honest_programs_pass(namespaced, program, tests):
    reward_value, results = code_reward_details(respond(program), tests, config=FAST)
    assert reward_value == 1.0, results
    assert reward.all_passed(results)


def test_soft_reward_is_fraction_passed(namespaced):
    program = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)"
    tests = ADD + [{"input": "3 4", "output": "7"}, {"input": "10 1", "output": "11"}]
    value, results = code_reward_details(respond(program), tests, config=FAST)
    # paper: 2 of 4 -> 0.5
    assert value == 0.5 and [r.passed for r in results] == [True, False, True, False]
    assert "wrong answer on line 1: got '0', expected '42'" == results[1].reason
    assert not reward.all_passed(results)
    # the authors' scale: the mean of +1 per passed and -1 per failed test, i.e. 2p - 1 (by hand: (1
    # - 1 - 1 - 1) / 4)
    assert code_reward(respond(program), tests, scale=reward.AUTHORS_SCALE, config=FAST) == 0.0
    one_of_four = ADD + [{"input": "10 1", "output": "11"}, {"input": "12 3", "output": "15"}]
    assert (
        code_reward(respond(program), one_of_four, scale=reward.AUTHORS_SCALE, config=FAST) == -0.5
    )
    assert code_reward(respond(program), one_of_four, config=FAST) == 0.25


@pytest.mark.parametrize(
    "program",
    [
        "class Solution:\n    def add(self, a: int, b: int) -> int:\n        print('debug output is ignored')\n"
        "        return a + b",
        "def add(a, b):\n    return a + b",
        # starter-code names imported
        "class Solution:\n    def add(self, a, b) -> List[int]:\n        return (a + b,)[0]",
    ],
)
def test_functional_programs_pass(namespaced, program):
    assert code_reward(respond(program), ADD_FN, config=FAST) == 1.0


def test_functional_results_compare_as_json(namespaced):
    tests = [
        {"input": "[3, 1, 2]", "output": "[1, 2, 3]", "fn_name": "sort"},
        {"input": "[]", "output": "[]", "fn_name": "sort"},
        {"input": "[1]", "output": "true", "fn_name": "sort"},
    ]
    results = run_tests("def sort(xs):\n    return tuple(sorted(xs))", tests, FAST)
    # a tuple is a JSON list; [1] is not true
    assert [r.passed for r in results] == [True, True, False]


def test_tests_of_one_program_run_in_parallel(namespaced):
    tests = [{"input": "", "output": "ok"}] * 4
    start = time.monotonic()
    config = SandboxConfig(timeout_s=4, workers=4, cores=4)
    results = run_tests("import time\ntime.sleep(1.0)\nprint('ok')", tests, config)
    assert all(r.passed for r in results) and time.monotonic() - start < 4 * 1.0


@pytest.mark.parametrize(
    "program",
    [
        "print(sum(map(int, open(0).read().split())))",
        "print(sum(map(int, open('/dev/stdin').read().split())))",
        "print(sum(map(int, open('/proc/self/fd/0').read().split())))",
        "print(sum(map(int, open('/dev/fd/0').read().split())))",
        "out = open('/dev/stdout', 'w')\nout.write(str(sum(map(int, input().split()))) + '\\n')\nout.close()",
        "err = open('/dev/stderr', 'w')\nerr.write('working\\n')\nerr.close()\nprint(sum(map(int, input().split())))",
    ],
)
def test_programs_reopening_their_streams_by_path_pass(namespaced, program):
    """Competitive-programming templates reopen stdin/stdout by path; the kernel then checks the
    pipe's owner and mode, so the pipes must belong to the candidate's user, not to the (root)
    trainer."""
    assert code_reward(respond(program), ADD, config=FAST) == 1.0, run_tests(program, ADD, FAST)


def test_a_test_cannot_reach_another_tests_pipes_through_proc(namespaced):
    """With the pipes given to the candidates' user, a test running beside another must still find
    none of its pipes under /proc (its own pid namespace): it can neither read the other's input nor
    write into its output."""
    secret = f"secret-{uuid.uuid4().hex}"
    holder = "import time\ntime.sleep(3)\nprint(input())"  # its input waits in the pipe for 3 s
    prober = (
        "import os, time\nme, found = os.getpid(), set()\nend = time.time() + 2\n"
        "while time.time() < end:\n"
        "    for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != me]:\n"
        "        for fd, mode in (('0', os.O_RDONLY), ('1', os.O_WRONLY)):\n"
        "            try:\n                f = os.open(f'/proc/{pid}/fd/{fd}', mode | os.O_NONBLOCK)\n"
        "            except OSError:\n                continue\n"
        "            found.add(pid + '/' + fd)\n"
        "            try:\n                os.read(f, 100) if fd == '0' else os.write(f, b'forged\\n')\n"
        "            except OSError:\n                pass\n"
        "            os.close(f)\n"
        "    time.sleep(0.05)\nprint('found', len(found))"
    )
    config = SandboxConfig(timeout_s=5, memory_mb=256)
    held, probed = run_side_by_side(
        (holder, [{"input": secret, "output": secret}]),
        (prober, [{"input": "", "output": "found 0"}]),
        config,
    )
    assert held[0].passed, held  # its input was not read, nor its output forged...
    assert probed[0].passed, probed  # ...and no other process's pipe could be opened at all
    assert_no_leftovers()


CRASH_OUTPUT = 2_700_000  # repetitions of 'ab\n': 7.7 MB, under output_mb


@pytest.mark.parametrize(
    "program",
    [
        # a crash with a long traceback
        f"import sys\nsys.stderr.write('ab\\n' * {CRASH_OUTPUT})\nsys.exit(1)",
        # the same stderr, exit 0
        f"import sys\nsys.stderr.write('ab\\n' * {CRASH_OUTPUT})\nprint(3)",
        f"import sys\nsys.stdout.write('ab\\n' * {CRASH_OUTPUT})",  # a long wrong answer
        # ... ending in the right number
        f"import sys\nsys.stdout.write('ab\\n' * {CRASH_OUTPUT} + '3')",
        # one 4-byte character
        f"import sys\nsys.stdout.write('\\U0001F600' + 'ab\\n' * {CRASH_OUTPUT})",
        f"import sys\nsys.stdout.buffer.write(b'\\xff' * {3 * CRASH_OUTPUT})",  # not UTF-8
    ],
)
def test_judging_an_output_costs_at_most_3x_its_size(namespaced, program):
    """The trainer's memory for judging one test (reading its output, finding a crash's reason,
    comparing) stays within 3x the bytes the candidate wrote, measured by tracemalloc over the whole
    run_tests call."""
    import tracemalloc

    config = SandboxConfig(timeout_s=5, memory_mb=256, output_mb=8.0)
    tests = [{"input": "", "output": "3"}]
    run_tests("print(3)", tests, config)  # the plan's probe, outside the measurement
    tracemalloc.start()
    try:
        result = run_tests(program, tests, config)[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    written = 3 * CRASH_OUTPUT
    assert peak <= 3 * written, f"peak {peak / written:.2f}x the output ({result.reason[:80]})"
    assert not result.passed or "print(3)" in program, result
    if "exit(1)" in program:
        assert result.reason == "runtime error (exit status 1): ab", result


def test_a_crash_reason_reads_only_the_end_of_stderr():
    """_last_line gives what decoding, stripping and splitting the whole stderr gives (the old way),
    on hand-made and random outputs, and on 7.7 MB of stderr allocates a few kilobytes, not a copy
    per line."""
    import random
    import tracemalloc

    # noqa: E731
    old = lambda output: output.decode("utf-8", "replace").strip().split("\n")[-1].strip()
    cases = [
        b"",
        b"  \n\n ",
        b"x",
        b"  only line  \n",
        b"a\nb\n",
        b"Traceback\n  File x\nValueError: bad\n\n",
        b"a\n  indented last  \n",
        "é\n€ end\n".encode(),
        b"\xff\xfe\n\xff",
        b"a" * 10_000 + b"\n",
        b"\n" * 9000,
    ]
    rng = random.Random(0)
    cases += [
        bytes(rng.choice(b"ab \n\t\xc3\xa9") for _ in range(rng.randint(0, 60))) for _ in range(500)
    ]
    for output in cases:
        expected = old(output)
        for tail in (16, 4096):
            line = sandbox._last_line(output, tail=tail)
            # the whole line fits in the tail
            if len(output.rstrip().rsplit(b"\n", 1)[-1]) <= tail:
                assert line == expected, (output, tail)
            else:  # its last `tail` bytes (the first character may be a cut one, replaced)
                assert expected.endswith(line[1:]) and len(line.encode()) >= tail - 8, (
                    output,
                    tail,
                )
    big = bytearray(b"ab\n" * CRASH_OUTPUT + b"ValueError: the end\n" + b" \n" * 5000)
    tracemalloc.start()
    try:
        line = sandbox._last_line(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert line == "ValueError: the end" and peak < 64 << 10, peak


# ----------------------------------------------------------------------------- adversarial suite

TAG = f"reward-escape-{uuid.uuid4().hex[:8]}"
ESCAPE_PATHS = [
    f"/tmp/{TAG}",
    f"/var/tmp/{TAG}",
    f"/dev/shm/{TAG}",
    f"/run/lock/{TAG}",
    f"{REPO}/{TAG}",
    f"/{TAG}",
    os.path.join(os.path.expanduser("~"), TAG),
]
# unique sleep duration, to find an escaped process
ESCAPE_SLEEP = "97.0" + str(uuid.uuid4().int % 10**6)

ADVERSARIAL = {  # name: (program, tests, reward an honest program with the same output would earn)
    "sys.exit(0) before output": (
        "import sys\nsys.exit(0)\nprint(sum(map(int, input().split())))",
        ADD,
        0.0,
    ),
    "os._exit(0) before output": ("import os\nos._exit(0)", ADD, 0.0),
    "__eq__ always True": (
        "class Anything:\n    def __eq__(self, other): return True\n    def __ne__(self, other): "
        "return False\nclass Solution:\n    def add(self, a, b): return Anything()",
        ADD_FN,
        0.0,
    ),
    "int subclass with __eq__ always True": (
        "class Sneaky(int):\n    def __eq__(self, other): return True\n"
        "def add(a, b): return Sneaky(0)",
        ADD_FN,
        0.0,
    ),
    "reads the caller's frames and memory": (
        "import gc, json, sys\ndef add(a, b):\n    frame = sys._getframe()\n    while frame:\n"
        "        for key in ('expected', 'output', 'test', 'tests'):\n"
        "            if key in frame.f_locals: return frame.f_locals[key]\n        frame = frame.f_back\n"
        "    for obj in gc.get_objects():\n        if isinstance(obj, dict) and 'output' in obj:\n"
        "            return json.loads(obj['output'])\n    return -1",
        ADD_FN,
        0.0,
    ),
    "reads the test file": (
        f"import glob, re\nfor path in [{os.path.abspath(__file__)!r}] + glob.glob('/*/*/tests/test_reward.py'):\n"
        "    try:\n        print(re.search('FILE_SECRET = \"(.*?)\"', open(path).read()).group(1))\n        break\n"
        "    except Exception:\n        pass",
        [{"input": "", "output": FILE_SECRET}],
        0.0,
    ),
    "prints part of the output": ("print(1)\nprint(2)", [{"input": "", "output": "1\n2\n3"}], 0.0),
    "infinite loop": ("while True:\n    pass", ADD, 0.0),
    "sleep": ("import time\ntime.sleep(100)\nprint(3)", ADD[:1], 0.0),
    "fork bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        ADD,
        0.0,
    ),
    "memory bomb": (
        "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 << 20))  # written, so resident",
        ADD[:1],
        0.0,
    ),
    "1 GB of output": (
        "import sys\nchunk = 'x' * (1 << 20) + '\\n'\nfor _ in range(1024):\n    sys.stdout.write(chunk)",
        ADD[:1],
        0.0,
    ),
    "huge file": (
        "with open('big', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * (1 << 20))\nprint(3)",
        ADD[:1],
        0.0,
    ),
    "ignores SIGTERM": (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
        ADD[:1],
        0.0,
    ),
    "double fork + setsid escape": (
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(0.3)\n"
        "        try:\n            print(3, flush=True)  # claim the answer after the main process is gone\n"
        "        except OSError:\n            pass\n"
        f"        os.execv('/bin/sleep', ['sleep', '{ESCAPE_SLEEP}'])\n    os._exit(0)\n"
        "sys.exit(0)",
        ADD[:1],
        0.0,
    ),
    "creates a user namespace": (
        "import subprocess\nmade = subprocess.run(['unshare', '--user', 'true']).returncode == 0\n"
        "print('created' if made else 'refused')",
        [{"input": "", "output": "created"}],
        0.0,
    ),
    "writes outside its directory": (
        f"for path in {ESCAPE_PATHS + [f'../{TAG}']!r}:\n    try:\n        open(path, 'w').write('escaped')\n"
        "    except OSError:\n        pass\nprint('ok')",
        [{"input": "", "output": "ok"}],
        1.0,
    ),
}


# 1.5 s of CPU time; the wall-clock backstop is what a sleeping program meets, or a busy one on a
# loaded machine
ADVERSARIAL_CONFIG = SandboxConfig(
    timeout_s=1.5, wall_timeout_s=4, workers=2, memory_mb=256, output_mb=1.0
)


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial(namespaced, name):
    program, tests, honest_reward = ADVERSARIAL[name]
    config = ADVERSARIAL_CONFIG
    start = time.monotonic()
    value, results = code_reward_details(respond(program), tests, config=config)
    elapsed = time.monotonic() - start
    assert value == honest_reward, results
    assert elapsed < config.wall_timeout_s + SLACK_S, (elapsed, results)
    assert_no_leftovers(ESCAPE_SLEEP)
    assert not [path for path in ESCAPE_PATHS if os.path.exists(path)]


def test_adversarial_reasons_say_what_happened(namespaced):
    program, tests, _ = ADVERSARIAL["memory bomb"]
    reason = run_tests(program, tests, FAST)[0].reason
    # the limit, or the RLIMIT_AS backstop
    assert reason.startswith("memory limit") or "MemoryError" in reason, reason
    program, tests, _ = ADVERSARIAL["infinite loop"]
    assert run_tests(program, tests, ADVERSARIAL_CONFIG)[0].reason in (
        # the second: a busy machine
        "timeout: more than 1.5s of CPU time",
        "timeout: more than 4s of wall-clock time",
    )
    program, tests, _ = ADVERSARIAL["sleep"]
    assert (
        run_tests(program, tests, SandboxConfig(timeout_s=1.5, wall_timeout_s=2))[0].reason
        == "timeout: more than 2s of wall-clock time"
    )
    program, tests, _ = ADVERSARIAL["1 GB of output"]
    assert (
        "output limit"
        in run_tests(program, tests, SandboxConfig(timeout_s=1.5, output_mb=1))[0].reason
    )
    program, tests, _ = ADVERSARIAL["__eq__ always True"]
    assert "not JSON serializable" in run_tests(program, tests, FAST)[0].reason


def test_kill_minus_one_and_killpg_hurt_nobody_else(namespaced):
    program = (
        "import os, signal, time\nwhat = input().strip()\nif what == 'kill':\n    try:\n"
        "        os.kill(-1, signal.SIGKILL)  # Linux spares the caller itself\n    except OSError:\n        pass\n"
        "if what == 'killpg':\n    os.killpg(0, signal.SIGKILL)\n    os.killpg(os.getpgid(0), signal.SIGKILL)\n"
        "time.sleep(0.8)\nprint('alive')"
    )
    tests = [
        {"input": "kill", "output": "alive"},
        {"input": "killpg", "output": "alive"},
        {"input": "wait", "output": "alive"},
        {"input": "wait", "output": "alive"},
    ]
    with ThreadPoolExecutor(1) as pool:  # another program's tests, running at the same time
        other = pool.submit(
            run_tests, "import time\ntime.sleep(1.0)\nprint('alive')", tests[2:], FAST
        )
        results = run_tests(program, tests, SandboxConfig(timeout_s=6, workers=4))
        assert [r.passed for r in other.result()] == [True, True]
    # kill(-1) reached nothing but itself is spared: it earns what an honest program earns; killpg
    # killed itself
    assert [r.passed for r in results] == [True, False, True, True], results
    assert_no_leftovers()


def run_side_by_side(first: tuple, second: tuple, config: SandboxConfig):
    """Run two programs' tests at the same time, as the RL loop scores many responses at once; ->
    their results."""
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run_tests, *first, config)
        # while the first runs (not after: result() would wait)
        second_results = run_tests(*second, config)
        return future.result(), second_results


def test_ipc_objects_and_keyrings_belong_to_one_test(namespaced):
    """One candidate leaves a note in System V shared memory, a POSIX message queue and its user
    keyring; another, running at the same time and again afterwards, must find none of them, nor may
    they outlive the test."""
    tag = uuid.uuid4().hex[:12]
    shm_key = int(tag[:7], 16)
    queue = f"/reward-note-{tag}".encode()
    key_name = f"reward-note-{tag}".encode()
    # system call numbers
    keyctl = {"add_key": 248, "keyctl": 250} if os.uname().machine == "x86_64" else None
    prelude = (
        "import ctypes, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        f"SHM_KEY, QUEUE, KEY_NAME, KEYCTL = {shm_key}, {queue!r}, {key_name!r}, {keyctl!r}\n"
    )
    leave = prelude + (
        "segment = libc.shmget(SHM_KEY, 4096, 0o1666)\n"  # IPC_CREAT | 0666
        "ctypes.memmove(libc.shmat(segment, None, 0), b'note', 4)\n"
        "queue = libc.mq_open(QUEUE, os.O_CREAT | os.O_RDWR, 0o666, None)\n"
        "libc.mq_send(queue, b'note', 4, 0)\n"
        "if KEYCTL:\n    libc.syscall(KEYCTL['add_key'], b'user', KEY_NAME, b'note', 4, -4)  # -4: the user keyring\n"
        "print('left', segment >= 0, queue >= 0)\ntime.sleep(1.5)"
    )
    look = prelude + (
        "time.sleep(0.7)\n"
        "found = [libc.shmget(SHM_KEY, 0, 0) >= 0, libc.mq_open(QUEUE, os.O_RDONLY) >= 0,\n"
        # SEARCH
        "         bool(KEYCTL) and libc.syscall(KEYCTL['keyctl'], 10, -4, b'user', KEY_NAME, 0) >= 0]\n"
        "print(*['found' if hit else '-' for hit in found])"
    )
    alone = [{"input": "", "output": "- - -"}]
    config = SandboxConfig(timeout_s=4, memory_mb=256)
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        left, during = run_side_by_side(
            (leave, [{"input": "", "output": "left True True"}]), (look, alone), config
        )
        after = run_tests(look, alone, config)
        assert left[0].passed, left  # the note was written...
        # ...and nobody else could read it
        assert during[0].passed and after[0].passed, (during, after)
        assert libc.shmget(shm_key, 0, 0) < 0 and libc.mq_open(queue, os.O_RDONLY) < 0, (
            "outlived the test"
        )
    finally:  # what a sandbox without an IPC namespace left on the machine
        segment = libc.shmget(shm_key, 0, 0)
        if segment >= 0:
            libc.shmctl(segment, 0, None)  # IPC_RMID
        libc.mq_unlink(queue)
    assert_no_leftovers()


def test_session_keyring_is_fresh_for_each_test(namespaced):
    """A trainer with a session keyring of its own (as under pam_keyinit or runc) hands it down to
    every test: a key one candidate adds there must not reach the next one."""
    if os.uname().machine != "x86_64":
        pytest.skip("the keyctl system call numbers below are x86_64's")
    name = f"reward-session-note-{uuid.uuid4().hex[:8]}".encode()
    # -3: session
    add = f"import ctypes\nprint(ctypes.CDLL(None).syscall(248, b'user', {name!r}, b'note', 4, -3) > 0)"
    find = f"import ctypes\nprint(ctypes.CDLL(None).syscall(249, b'user', {name!r}, None, 0) > 0)"
    trainer = (
        f"import ctypes, sys\nsys.path.insert(0, {REPO!r})\nimport reward\n"
        "assert ctypes.CDLL(None).syscall(250, 1, b'reward-test-trainer') > 0  # KEYCTL_JOIN_SESSION_KEYRING\n"
        "config = reward.SandboxConfig(timeout_s=5)\n"
        f"print(reward.run_tests({add!r}, [{{'input': '', 'output': 'True'}}], config)[0].passed,\n"
        f"      reward.run_tests({find!r}, [{{'input': '', 'output': 'False'}}], config)[0].passed)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", trainer], capture_output=True, text=True, timeout=60
    )
    # added there; not found next time
    assert proc.stdout.split() == ["True", "True"], proc.stdout + proc.stderr
    assert_no_leftovers()


def test_memory_limit_holds_for_the_test_as_a_whole(namespaced):
    """Three children of 150 MB each stay under the 256 MB per-process limit, but not the test's 256
    MB."""
    program = (
        "import os, time\nchildren = []\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
        "        block = b'x' * (150 << 20)  # written, so resident\n"
        "        time.sleep(1.5)\n        os._exit(0)\n"
        "    children.append(pid)\nfor pid in children:\n    os.waitpid(pid, 0)\nprint('done')"
    )
    config = SandboxConfig(timeout_s=4, memory_mb=256)
    start = time.monotonic()
    value, results = code_reward_details(
        respond(program), [{"input": "", "output": "done"}], config=config
    )
    assert value == 0.0 and "memory limit" in results[0].reason, results
    assert time.monotonic() - start < config.timeout_s + SLACK_S
    assert_no_leftovers()


# 600 MB written at once, above FAST's 256 MB, and held for 2 s: long enough for a fallback that
# starts late
MEMORY_BOMB = "import time\nblock = bytearray(600 << 20)\ntime.sleep(2)\nprint('done')"


def test_without_a_cgroup_a_watchdog_process_of_its_own_reads_the_memory(namespaced):
    """cgroup="off": the test's memory is read by a watchdog process in a session of its own (so the
    trainer's busy session does not delay it), at nice -10 where permitted; the trainer's reads take
    over when that process dies or cannot start, and a watchdog that stops answering is replaced."""
    config = dataclasses.replace(FAST, cgroup="off")
    bomb = [{"input": "", "output": "done"}]
    assert "memory limit" in run_tests(MEMORY_BOMB, bomb, config)[0].reason
    watchdog = sandbox._WATCHDOG.proc
    assert sandbox._WATCHDOG.alive() and os.getsid(watchdog.pid) == watchdog.pid != os.getsid(0)
    may_raise = (
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import os; os.setpriority(os.PRIO_PROCESS, 0, {sandbox._WATCHDOG_NICE})",
            ],
            # the permission, not a guess from the uid
            capture_output=True,
        ).returncode
        == 0
    )
    assert sandbox._WATCHDOG.nice == (
        sandbox._WATCHDOG_NICE if may_raise else os.getpriority(os.PRIO_PROCESS, 0)
    )
    assert run_tests("print(sum(map(int, input().split())))", ADD, config)[0].passed

    watchdog.kill()  # dead: restarted at the next test
    watchdog.wait()
    assert "memory limit" in run_tests(MEMORY_BOMB, bomb, config)[0].reason
    assert sandbox._WATCHDOG.alive() and sandbox._WATCHDOG.proc.pid != watchdog.pid

    # not answering: killed, and the trainer reads
    os.kill(sandbox._WATCHDOG.proc.pid, signal.SIGSTOP)
    stopped = sandbox._WATCHDOG.proc
    real, sandbox._WATCHDOG_REPLY_S = sandbox._WATCHDOG_REPLY_S, 0.5
    try:
        assert "memory limit" in run_tests(MEMORY_BOMB, bomb, config)[0].reason
    finally:
        sandbox._WATCHDOG_REPLY_S = real
        # the replacement had 0.5 s to answer; if load made it miss that, no wait for the next test
        sandbox._WATCHDOG.retry_at = 0.0
    assert stopped.poll() is not None

    unable = sandbox._Watchdog()  # cannot start at all: no interpreter where sys.executable says
    executable, sys.executable = sys.executable, "/nonexistent/python"
    try:
        assert unable.watch(os.getpid(), 1 << 30, False) is None and not unable.alive()
    finally:
        sys.executable = executable
        unable._close()
    assert_no_leftovers()


def a_running_watchdog(config) -> subprocess.Popen:
    """The watchdog process, started if need be: an earlier failed start (under load, within a
    shortened reply time) would leave the next tests without one for _WATCHDOG_RETRY_S."""
    with sandbox._WATCHDOG.lock:
        sandbox._WATCHDOG.retry_at = 0.0
    assert run_tests("print(sum(map(int, input().split())))", ADD, config)[0].passed
    assert sandbox._WATCHDOG.alive()
    return sandbox._WATCHDOG.proc


def test_a_test_whose_watchdog_was_replaced_during_it_is_read_by_the_trainer(namespaced):
    """The watchdog dies while a test runs, and another test starts its replacement, which does not
    know the first: the first test's memory is read by the trainer from then on. The bomb allocates
    3 s after it starts; if the replacement came later than that, the trainer read it anyway (a dead
    watchdog), so load cannot fail this test, only keep it from catching the bug."""
    config = dataclasses.replace(FAST, cgroup="off", wall_timeout_s=30)
    late_bomb = (
        "import time\ntime.sleep(3)\nblock = bytearray(600 << 20)\ntime.sleep(2)\nprint('done')"
    )
    first = a_running_watchdog(config)
    result = []
    thread = threading.Thread(
        target=lambda: result.extend(
            run_tests(late_bomb, [{"input": "", "output": "done"}], config)
        )
    )
    thread.start()
    # the bomb's test is watched by `first` by now (if not yet, it starts its own: still a pass)
    time.sleep(1.0)
    first.kill()
    first.wait()
    # starts the replacement
    assert run_tests("print(sum(map(int, input().split())))", ADD, config)[0].passed
    assert sandbox._WATCHDOG.alive() and sandbox._WATCHDOG.proc is not first
    thread.join(timeout=60)
    assert not thread.is_alive() and "memory limit" in result[0].reason, result
    assert_no_leftovers()


def test_a_test_whose_watchdog_is_stopped_during_it_is_read_by_the_trainer(namespaced):
    """The watchdog is stopped (alive, reading nothing) while a test runs: the trainer reads that
    test's memory from the next poll on, and the stopped watchdog is replaced at the next request.
    As above, load can only keep this test from catching the bug (the bomb allocates 3 s after it
    starts), never fail it."""
    config = dataclasses.replace(FAST, cgroup="off", wall_timeout_s=30)
    late_bomb = (
        "import time\ntime.sleep(3)\nblock = bytearray(600 << 20)\ntime.sleep(2)\nprint('done')"
    )
    watchdog = a_running_watchdog(config)
    result = []
    # the stopped one's forget() times out
    real, sandbox._WATCHDOG_REPLY_S = sandbox._WATCHDOG_REPLY_S, 0.5
    try:
        thread = threading.Thread(
            target=lambda: result.extend(
                run_tests(late_bomb, [{"input": "", "output": "done"}], config)
            )
        )
        thread.start()
        # the bomb's test is watched by now (if not yet, its watch() times out: still a pass)
        time.sleep(1.0)
        os.kill(watchdog.pid, signal.SIGSTOP)
        thread.join(timeout=60)
    finally:
        sandbox._WATCHDOG_REPLY_S = real
    assert not thread.is_alive() and "memory limit" in result[0].reason, result
    assert watchdog.poll() is not None  # killed when it did not answer
    assert_no_leftovers()


# A watchdog that answers every request but never reads: it writes one heartbeat at start, then none
HUNG_WATCHDOG = (
    "import os, struct, sys, time\nos.pwrite(int(sys.argv[-1]), struct.pack('d', time.monotonic()), 0)\n"
    "os.write(1, b'ready 0\\n')\nfor line in sys.stdin.buffer:\n"
    "    os.write(1, b'ok\\n' if line.startswith(b'watch') else b'0\\n')\n"
)


def test_a_watchdog_that_answers_but_has_stopped_reading_is_noticed_by_its_heartbeat(
    namespaced, monkeypatch
):
    """A watchdog hung in its reads (here: one that answers requests but never reads) is not stopped
    and not dead; its heartbeat goes stale, and from then on the trainer reads the test's memory:
    the bomb, which holds 600 MB for 8 s, is killed once the heartbeat is _WATCHDOG_STALE_S old. The
    hung one is replaced at the next test."""
    config = dataclasses.replace(FAST, cgroup="off", wall_timeout_s=30)
    holder = "import time\nblock = bytearray(600 << 20)\ntime.sleep(8)\nprint('done')"
    with sandbox._WATCHDOG.lock:
        sandbox._WATCHDOG._close()
    monkeypatch.setattr(
        sandbox, "_watchdog_command", lambda: [sys.executable, "-I", "-c", HUNG_WATCHDOG]
    )
    try:
        assert (
            "memory limit" in run_tests(holder, [{"input": "", "output": "done"}], config)[0].reason
        )
        hung = sandbox._WATCHDOG.proc
        assert hung is not None and hung.poll() is None and not sandbox._WATCHDOG.beating(hung)
        monkeypatch.undo()
        assert run_tests("print(sum(map(int, input().split())))", ADD, config)[0].passed
        assert (
            hung.poll() is not None
            and sandbox._WATCHDOG.alive()
            and sandbox._WATCHDOG.proc is not hung
        )
    finally:
        monkeypatch.undo()
        with sandbox._WATCHDOG.lock:
            sandbox._WATCHDOG._close()
    assert_no_leftovers()


def test_a_watchdog_that_cannot_start_is_not_tried_again_at_every_test(monkeypatch):
    """Each failed start costs a process start; after one, tests go without a watchdog for
    _WATCHDOG_RETRY_S."""
    unable = sandbox._Watchdog()
    tries = []
    monkeypatch.setattr(
        sandbox, "_watchdog_command", lambda: tries.append(1) or ["/nonexistent/python"]
    )
    # no load can make the wait pass between two calls
    monkeypatch.setattr(sandbox, "_WATCHDOG_RETRY_S", 3600.0)
    try:
        assert (
            unable.watch(os.getpid(), 1 << 30, False) is None
            and unable.watch(os.getpid(), 1 << 30, False) is None
        )
        assert len(tries) == 1 and unable.retry_at > time.monotonic()
        unable.retry_at = 0.0  # the wait is over
        assert unable.watch(os.getpid(), 1 << 30, False) is None and len(tries) == 2
    finally:
        unable._close()


def test_a_forked_child_judges_tests_even_while_the_parent_held_every_lock_and_slot(namespaced):
    """fork() while other threads are inside the sandbox (the watchdog's lock, the plan cache's and
    the process cgroups' locks held, every test slot taken): the child has none of those threads, so
    nothing would ever release them there. The child must judge a test with a watchdog of its own,
    the parent's pipes closed in it."""
    config = dataclasses.replace(FAST, cgroup="off")
    parent_watchdog = a_running_watchdog(config)
    watchdog = sandbox._WATCHDOG
    inherited = (parent_watchdog.stdin.fileno(), parent_watchdog.stdout.fileno())
    with watchdog.lock, sandbox._PLANS.lock, sandbox._PROCESS_CGROUPS.lock:
        sandbox._SLOTS.busy += 1000  # as if 1,000 tests of the parent's threads were running
        try:
            pid = os.fork()
            if pid == 0:  # the child: exit status 0 only if all is well
                status = 1
                try:
                    closed = []
                    for fd in inherited:
                        try:
                            os.fstat(fd)
                            closed.append(False)
                        except OSError:
                            closed.append(True)
                    judged = run_tests("print(sum(map(int, input().split())))", ADD, config)[
                        0
                    ].passed
                    status = (
                        0
                        if all(closed) and judged and watchdog.proc not in (None, parent_watchdog)
                        else 2
                    )
                finally:
                    os._exit(status)
        finally:
            sandbox._SLOTS.busy -= 1000
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child could not judge a test (a lock or slot held at the fork)")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    # the parent's is untouched
    assert watchdog.proc is parent_watchdog and parent_watchdog.poll() is None
    assert_no_leftovers()


@pytest.mark.skipif(
    os.geteuid() != 0, reason="lowering another process's RLIMIT_NOFILE needs root or its uid"
)
def test_a_watchdog_that_cannot_open_files_stops_instead_of_reading_zero(namespaced):
    """A candidate of the watchdog's uid can lower its RLIMIT_NOFILE (prlimit), so that every read
    of /proc fails with EMFILE: read as "that process exited", the test would hold 0 bytes. The
    watchdog ends instead, and the trainer reads the memory: the 600 MB bomb is killed."""
    config = dataclasses.replace(FAST, cgroup="off", wall_timeout_s=30)
    watchdog = a_running_watchdog(config)
    resource.prlimit(watchdog.pid, resource.RLIMIT_NOFILE, (3, 3))
    holder = "import time\nblock = bytearray(600 << 20)\ntime.sleep(8)\nprint('done')"
    assert "memory limit" in run_tests(holder, [{"input": "", "output": "done"}], config)[0].reason
    # it ended (the trainer's reads took over), and a new one serves
    assert watchdog.wait(timeout=30) != 0
    assert run_tests("print(sum(map(int, input().split())))", ADD, config)[0].passed
    assert sandbox._WATCHDOG.proc is not watchdog and sandbox._WATCHDOG.alive()
    assert_no_leftovers()


def test_the_watchdog_kills_what_it_watches_above_the_limit_and_says_so():
    """The watchdog protocol on its own: a process tree holding 64 MB is killed under a 32 MB limit
    (forget -> it killed it), one under a 1 GB limit is left alone."""
    watchdog = sandbox._Watchdog()
    holder = "import time\nblock = bytearray(64 << 20)\ntime.sleep(30)"
    procs = [
        subprocess.Popen([sys.executable, "-c", holder], start_new_session=True) for _ in range(2)
    ]
    try:
        time.sleep(0.5)  # ~20 ms to start; generous for a loaded machine
        assert watchdog.watch(procs[0].pid, 32 << 20, False) and watchdog.watch(
            procs[1].pid, 1 << 30, False
        )
        assert procs[0].wait(timeout=30) == -signal.SIGKILL
        assert watchdog.forget(procs[0].pid) is True and watchdog.forget(procs[1].pid) is False
        assert procs[1].poll() is None
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        watchdog._close()


def test_one_test_cannot_starve_another_of_processes(namespaced):
    """One candidate holds every process it may have; an honest threaded program started meanwhile
    must still start its threads (RLIMIT_NPROC counts per uid, and every test runs as the same
    one)."""
    config = SandboxConfig(timeout_s=8, workers=1, processes=24)
    hog = (
        "import os, time\nheld = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n    held += 1\n"
        "print('held', held)\ntime.sleep(5)"
    )
    threaded = (
        "import threading, time\n"
        "threads = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(8)]\n"
        "for thread in threads:\n    thread.start()\nfor thread in threads:\n    thread.join()\nprint('ok')"
    )
    with ThreadPoolExecutor(1) as pool:
        hogged = pool.submit(run_tests, hog, [{"input": "", "output": "held 23"}], config)
        deadline = time.monotonic() + 10
        # until the hog holds its processes
        while len(leftovers()) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(leftovers()) >= 20, "the hog never held its processes"
        honest = run_tests(threaded, [{"input": "", "output": "ok"}], config)
        assert hogged.result()[0].reason.startswith(("passed", "wrong answer")), hogged.result()
    assert honest[0].passed, honest  # alone it passes; beside the hog it must too
    assert_no_leftovers()


def test_top_level_files_are_hidden(namespaced):
    path = f"/reward-test-secret-{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex
    with open(path, "w") as file:
        file.write(secret)
    os.chmod(path, 0o644)  # readable by anyone who can see it
    try:
        program = f"try:\n    print(open({path!r}).read())\nexcept OSError as error:\n    print('hidden', error)"
        assert code_reward(respond(program), [{"input": "", "output": secret}], config=FAST) == 0.0
    finally:
        os.remove(path)


def test_no_network(namespaced):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    program = (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=0.5)\n    print('connected')\n"
        "except OSError as error:\n    print('blocked', error)"
    ) % port
    try:
        assert (
            code_reward(respond(program), [{"input": "", "output": "connected"}], config=FAST)
            == 0.0
        )
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody came
    finally:
        listener.close()
    assert_no_leftovers()


def test_watchdog_kills_the_candidate_when_the_trainer_dies(namespaced):
    marker = "60.0" + str(uuid.uuid4().int % 10**6)  # the candidate becomes `sleep <marker>`
    code = (
        f"import sys\nsys.path.insert(0, {REPO!r})\nimport reward\n"
        f'reward.run_tests(\'import os\\nos.execv("/bin/sleep", ["sleep", "{marker}"])\', '
        "[{'input': '', 'output': ''}], reward.SandboxConfig(timeout_s=1, wall_timeout_s=1))"
    )
    trainer = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while not leftovers(f"sleep\0{marker}", harness=False) and time.monotonic() < deadline:
        time.sleep(0.02)
    trainer.kill()  # nothing in the trainer can kill its sandboxes now
    trainer.wait()
    assert leftovers(f"sleep\0{marker}", harness=False), "the candidate never started"
    start = time.monotonic()
    # the watchdog's limit is ceil(wall_timeout_s) + 2
    assert_no_leftovers(marker, within_s=1 + 2 + SLACK_S)
    assert time.monotonic() - start > 1.0  # it was the watchdog, not something faster
    cgroups = sandbox._PLANS.get(SandboxConfig()).cgroups
    if cgroups:  # the killed trainer's cgroups are left behind; the next trainer removes them
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys\nsys.path.insert(0, {REPO!r})\nimport reward\n"
                "reward.run_tests('print(3)', [{'input': '', 'output': '3'}])",
            ],
            check=True,
            timeout=60,
        )
        left = [
            name
            for directory in cgroups.directories()
            for name in os.listdir(directory)
            if name.startswith("reward-") and name.endswith(f"-{trainer.pid}")
        ]
        assert not left, left


def test_environment_is_scrubbed(monkeypatch):
    secret = "reward-env-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("REWARD_TEST_SECRET", secret)
    program = (
        "import glob, os\nfound = os.environ.get('REWARD_TEST_SECRET', '')\nfor path in glob.glob('/proc/*/environ'):\n"
        "    try:\n        text = open(path, 'rb').read().decode(errors='replace')\n    except OSError:\n        continue\n"
        "    if 'REWARD_TEST_SECRET=' in text:\n        found = text.split('REWARD_TEST_SECRET=')[1].split('\\0')[0]\n"
        "print(found)"
    )
    for config in (FAST, PLAIN):
        assert (
            code_reward(respond(program), [{"input": "", "output": secret}], config=config) == 0.0
        )
    assert_no_leftovers()


# ----------------------------------------------------------------------------- other modes


@pytest.mark.parametrize(
    "name",
    [
        "sys.exit(0) before output",
        "__eq__ always True",
        "infinite loop",
        "memory bomb",
        "1 GB of output",
        "huge file",
        "ignores SIGTERM",
    ],
)
def test_plain_mode_still_blocks_what_it_can(name):
    program, tests, honest_reward = ADVERSARIAL[name]
    start = time.monotonic()
    config = dataclasses.replace(ADVERSARIAL_CONFIG, namespaces="off")
    value, results = code_reward_details(respond(program), tests, config=config)
    assert value == honest_reward, results
    assert time.monotonic() - start < config.wall_timeout_s + SLACK_S
    assert_no_leftovers()


def test_plain_mode_runs_honest_code_and_reports_its_limits():
    assert code_reward(respond("print(sum(map(int, input().split())))"), ADD, config=PLAIN) == 1.0
    info = reward.sandbox_info(PLAIN)
    assert info["mode"] == "plain" and any("network" in item for item in info["not_enforced"])


def test_sandbox_report(namespaced):
    enforced = " ".join(namespaced["enforced"])
    assert (
        "no network" in enforced and "IPC namespace" in enforced and "session keyring" in enforced
    )
    assert (
        "CPU time for all the test's processes together" in enforced
        and "oom_score_adj 1000" in enforced
    )
    # the best this sandbox has: the kernel bounds the test's memory and CPU
    if namespaced["cgroup"]:
        assert namespaced["mode"].endswith("+ cgroup") and (
            "memory.max" in enforced or "memory.limit_in_bytes" in enforced
        )
    polled = reward.sandbox_info(dataclasses.replace(FAST, cgroup="off"))
    assert (
        "read every 20 ms" in " ".join(polled["enforced"])
        and "no cgroup" in polled["not_enforced"][0]
    )
    if os.geteuid() == 0:
        assert namespaced["uid"] == FAST.uid != 0
        assert (
            namespaced["mode"].startswith("namespaces") and "a user namespace per test" in enforced
        )
        # cgroups with a cpu controller: no gap left
        if namespaced["mode"].startswith(sandbox.NAMESPACES + " +"):
            assert (
                namespaced["not_enforced"] == []
                or "no cpu controller" in namespaced["not_enforced"][0]
            )


def test_help_says_what_input_holds_and_what_each_option_does():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "reward.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert all(word in proc.stdout for word in ('"response"', '"answer"', '"tests"', '"fn_name"'))
    for option in (
        "input",
        "scale",
        "timeout_s",
        "workers",
        "cores",
        "namespaces",
        "cgroup",
        "python",
        "math_timeout_s",
    ):
        line = next(
            line for line in proc.stdout.splitlines() if line.strip().startswith(f"--{option}=")
        )
        assert len(line.split(maxsplit=1)) == 2, f"--{option} has no description: {line!r}"


def test_cli_option_errors_are_one_line():
    for option, message in [
        ("--scale=paper", "--scale must be"),
        ("--namespaces=maybe", "namespaces must be"),
        ("--cgroup=/nonexistent-cgroup", "cannot hold one cgroup per test"),
    ]:
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, "reward.py"), option],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (
            proc.returncode == 2
            and message in proc.stderr
            and len(proc.stderr.strip().splitlines()) == 1
        ), proc.stderr


def test_a_bad_input_line_is_one_line_naming_it(tmp_path):
    """--input with a line that is not a scoring row: one line on stderr naming file:line and the
    missing field, exit status 2 (as every entry point says bad input), after the good lines before
    it were scored."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"response": "</think> \\\\boxed{2}", "answer": "2"}\n{"response": "x"}\n')
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "reward.py"), f"--input={rows}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 2 and errors == [f"error: reward.py: {rows}:2: KeyError: 'answer'"], (
        proc.stderr
    )
    assert json.loads(proc.stdout.splitlines()[0])["line"] == 1, proc.stdout


def test_interpreter_the_sandbox_user_cannot_run_is_refused():
    python = os.path.realpath(sys.executable)
    parents = [os.path.dirname(python)]
    while parents[-1] != "/":
        parents.append(os.path.dirname(parents[-1]))
    blocked = os.geteuid() == 0 and any(os.stat(p).st_mode & 0o001 == 0 for p in parents)
    config = SandboxConfig(timeout_s=3, python=sys.executable)
    if blocked:  # e.g. pyenv under /root: we must not run it, nor loosen permissions for it
        with pytest.raises(RuntimeError, match="cannot build a sandbox"):
            run_tests("print(3)", ADD[:1], config)
    else:
        assert run_tests("print(3)", ADD[:1], config)[0].passed


def test_non_root_trainer_uses_a_user_namespace():
    """The trainer itself running as an unprivileged user (here: nobody, with the system python). It
    runs a copy of parts/sandbox.py, copied alone into a world-readable directory this test makes
    and removes: the checkout itself may be private (a clone under /root, or in a mode-0700
    temporary directory)."""
    if os.geteuid() != 0:
        pytest.skip("the suite already runs as non-root: every other test covers this path")
    python = "/usr/bin/python3"
    setpriv = shutil.which("setpriv")
    missing = [
        what
        for what, found in [(python, os.path.exists(python)), ("setpriv (util-linux)", setpriv)]
        if not found
    ]
    if missing:
        pytest.skip("running a trainer as nobody needs " + " and ".join(missing))
    # /tmp: every user may pass through it
    home = tempfile.mkdtemp(prefix="reward-nobody-trainer-", dir="/tmp")
    try:
        os.chmod(home, 0o755)
        shutil.copy(os.path.join(REPO, "parts", "sandbox.py"), home)
        os.chmod(os.path.join(home, "sandbox.py"), 0o644)
        nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        userns = (
            subprocess.run(
                nobody + ["unshare", "--user", "--map-root-user", "--net", "true"],
                capture_output=True,
            ).returncode
            == 0
        )
        code = (
            "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport sandbox\n"
            "config = sandbox.SandboxConfig(timeout_s=3)\n"
            'env = sandbox.run_tests(\'import os\\nprint(os.environ.get("REWARD_TEST_SECRET", "none"))\', '
            "[{'input': '', 'output': 'none'}], config)\n"
            "add = sandbox.run_tests('print(sum(map(int, input().split())))', [{'input': '1 2', 'output': '3'}], "
            "config)\n"
            "nest = sandbox.run_tests('import subprocess\\n"
            'print(subprocess.run(["unshare", "--user", "true"]).returncode)\', '
            "[{'input': '', 'output': '1'}], config)\n"  # a nested user namespace is refused
            "print(json.dumps({'mode': sandbox.sandbox_info(config)['mode'], 'passed': [env[0].passed, "
            "add[0].passed, nest[0].passed]}))"
        )
        env = {"PATH": "/usr/bin:/bin", "REWARD_TEST_SECRET": "secret"}
        proc = subprocess.run(
            nobody + [python, "-c", code, home],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
            env=env,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["passed"] == [True, True, True]
    assert report["mode"] == (sandbox.NAMESPACES_UNPRIVILEGED if userns else sandbox.PLAIN)
    assert_no_leftovers()


@pytest.mark.parametrize(
    "response,expected",
    [
        (
            "<think>\n12*3=36+5=41 vs 41 yes\n</think>\n\n\\boxed{(12*3)+5}",
            reward.Verdict(1.0, True, False, "correct"),
        ),
        (
            "<think>\n\\boxed{(12*3)+5}\n</think>\n\n\\boxed{12+3+5}",
            reward.Verdict(0.0, False, False, "wrong answer"),
        ),
        (
            "<think>\n12*3=36+5=41 vs 41 yes\n\\boxed{(12*3)+5}",
            reward.Verdict(0.0, False, True, "format: no </think>"),
        ),
    ],
)
def test_countdown_is_judged_after_the_last_think_end(response, expected):
    task = {"kind": "countdown", "numbers": [12, 3, 5], "target": 41}
    assert reward.judge(task, response) == expected
    # the same verdict on the authors' scale
    authors = reward.judge(task, response, scale=reward.AUTHORS_SCALE)
    assert (
        authors.reward == {1.0: 1.0, 0.0: -1.0}[expected.reward]
        if not expected.format_failure
        else authors.reward == -0.5
    )
