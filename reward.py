"""Rewards for RL on reasoning models: math answers checked by math-verify, programs run against tests in a sandbox.
Standard library + math-verify only (Linux): copy this file out on its own.

The policy writes `<think> reasoning </think> answer`. Only the text after the LAST `</think>` is judged (a
`\\boxed{}` inside the thinking is not an answer; the authors' eval script forgot this). Format comes first:

    format:  no `</think>` -> missing_think_end; else no `<think>` -> missing_think_start (if the scale checks it);
             code only: no ```python block after `</think>` -> missing_code
    math:    R = correct  if verify(parse("\\boxed{" + gold + "}"), parse(answer))  else wrong
             (gold first: math-verify's verify() is not symmetric)
    code:    R = wrong + (correct - wrong) * p,   p = (# tests passed) / (# tests)   (the paper's soft reward)

How to run:
    python reward.py                                  # self-check: what the sandbox enforces here + examples
    python reward.py --input=scored.jsonl             # score a file; `--help` shows its line formats
    python reward.py --input=x.jsonl --scale=authors --timeout_s=2 --workers=4 --namespaces=off
    python -m pytest tests/test_reward.py             # correctness + adversarial suite
    python benchmarks/bench_reward.py                 # tests/s with 2 workers, sandbox overhead per test

In code: math_reward(response, gold) and code_reward(response, tests) (code_reward_details adds per-test reasons).

Two reward scales (RewardScale), and they are NOT equivalent:
    DEFAULT_SCALE  correct 1, wrong 0; every format failure 0, as a wrong answer; `<think>` is not checked. R = p.
    AUTHORS_SCALE  the authors' code (Kwai-Klear/KlearReasoner, reward_config.py) exactly: correct 1, wrong -1; no
                   `</think>` -0.5; `</think>` but no `<think>` -2.0 (both missing: -0.5); no code block -1.
                   Code: R = 2p - 1.
    Without format failures both give the same GRPO advantages (2p - 1 is affine in p, and the advantage divides by
    the group's std). With them they differ: on AUTHORS_SCALE a response that never closes its thinking (-0.5)
    ranks ABOVE a wrong answer (-1), level with passing a quarter of the tests, and one without `<think>` (-2)
    ranks below everything; on DEFAULT_SCALE both rank level with a wrong answer.

Choices, in plain words:
1. math-verify times out with signal.alarm, which works only in a process's main thread. So every math check runs
   in a persistent worker process, killed after a wall-clock deadline: math_reward works from any thread and
   cannot hang. The worker parses the text, never runs it.
2. Each code test runs in a sandbox of its own; sandbox_info() says what holds on this machine, the README has the
   table of modes. Outputs are compared here, in the trainer, in time linear in their size, by LiveCodeBench's
   rule; a functional test's return value comes back as JSON and is compared as data, so an object whose __eq__
   is always True gains nothing.
3. The reward never raises because of the candidate: a crash, timeout, wrong output or format failure is a lower
   reward (per-test reasons in code_reward_details). It raises for what is not the candidate's fault: malformed
   tests (validate_tests names test and field), an empty or unparseable gold answer, no sandbox on this machine.
"""
import atexit
import dataclasses
import decimal
import json
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class RewardScale:
    """Reward values by outcome (the module docstring compares the two instances below)."""
    correct: float = 1.0
    wrong: float = 0.0
    missing_think_end: float = 0.0                 # no `</think>`: the thinking never closed
    missing_think_start: float | None = None       # `</think>` but no `<think>`; None: not checked
    missing_code: float = 0.0                      # code: no ```python block after `</think>`


DEFAULT_SCALE = RewardScale()
AUTHORS_SCALE = RewardScale(correct=1.0, wrong=-1.0, missing_think_end=-0.5, missing_think_start=-2.0,
                            missing_code=-1.0)


@dataclass
class SandboxConfig:
    timeout_s: float = 6.0       # wall clock per test, interpreter start included (LiveCodeBench uses 6)
    cpu_s: int = 0               # RLIMIT_CPU seconds; 0 -> ceil(timeout_s) + 1
    memory_mb: int = 1024        # memory of the whole test (all its processes), and RLIMIT_AS of each process
    file_size_mb: int = 16       # RLIMIT_FSIZE, and the size of the tmpfs working directory
    open_files: int = 64         # RLIMIT_NOFILE
    processes: int = 64          # processes + threads of one test (pids.max, or RLIMIT_NPROC in its user namespace)
    output_mb: float = 8.0       # cap on stdout + stderr bytes read from one test
    workers: int = 0             # tests of one program run at once; 0 -> number of usable CPUs
    namespaces: str = "auto"     # "auto": use them when unshare works; "on": required; "off": never
    cgroup: str = "auto"         # "auto": a cgroup v2 per test if this process's cgroup allows; "off"; or a directory
    uid: int = 65534             # user the candidate runs as when we are root (65534 = nobody)
    python: str = ""             # interpreter for candidates; "" -> first one that passes the probe


class TestResult(NamedTuple):
    passed: bool
    reason: str                  # "passed", or why not: "wrong answer on line 2: ...", "timeout after 6s", ...


# ----------------------------------------------------------------------------- answer extraction

def extract_answer_region(response: str) -> str | None:
    """Text after the last `</think>`, or None when the response never closed its thinking."""
    end = response.rfind("</think>")
    return None if end < 0 else response[end + len("</think>"):]


_CODE_BLOCK = re.compile(r"```(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str | None:
    """The last complete ```python block after the last `</think>`, or None."""
    region = extract_answer_region(response)
    blocks = _CODE_BLOCK.findall(region) if region is not None else []
    return blocks[-1] if blocks else None


def format_failure(response: str, scale: RewardScale = DEFAULT_SCALE) -> float | None:
    """The reward of a response whose thinking is malformed, or None if it is well formed (the authors'
    order: a missing `</think>` is checked before a missing `<think>`)."""
    if "</think>" not in response:
        return scale.missing_think_end
    if scale.missing_think_start is not None and "<think>" not in response:
        return scale.missing_think_start
    return None

# ----------------------------------------------------------------------------- math

# The math worker's program: math-verify in the main thread of a process of its own, where its signal.alarm
# timeouts work. One JSON request per stdin line, one JSON reply per stdout line; argv[1]: its RLIMIT_AS in bytes.
_MATH_WORKER = r"""
import json, logging, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
logging.disable(logging.CRITICAL)   # math-verify logs every timed-out input in full
try:
    from math_verify import parse, verify
except Exception as error:
    print(json.dumps({"error": repr(error)}), flush=True)
    sys.exit(1)
print(json.dumps({"ready": True}), flush=True)
golds = {}  # parsed gold answers: the responses of one RL group share their gold
for line in sys.stdin:
    request = json.loads(line)
    seconds = request["timeout"]
    try:
        gold = golds.get(request["gold"])
        if gold is None:
            gold = parse("\\boxed{" + request["gold"] + "}", parsing_timeout=seconds)
            golds[request["gold"]] = gold
            if len(golds) > 4096:
                golds.clear()
        answer = parse(request["answer"], parsing_timeout=seconds) if gold else []
        equal = bool(gold) and bool(answer) and verify(gold, answer, timeout_seconds=seconds)
        reply = {"gold_parsed": bool(gold), "equal": bool(equal)}
    except Exception as error:
        reply = {"gold_parsed": True, "equal": False, "error": type(error).__name__}
    print(json.dumps(reply), flush=True)
"""
_MATH_WORKER_MEMORY = 4 << 30


def _read_reply(worker: subprocess.Popen, deadline: float) -> dict | None:
    """The worker's next JSON line, or None if it died or passed the deadline. It writes one line per request,
    so nothing is left over after the newline."""
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(worker.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None
            chunk = os.read(worker.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            line += chunk
    return json.loads(line)


def _kill_worker(worker: subprocess.Popen):
    worker.kill()
    worker.wait()
    worker.stdin.close()
    worker.stdout.close()


class _MathWorkers:
    """A pool of math worker processes, kept between calls (starting one takes a second), at most `size` busy at
    once. It owns its workers: one that misses a deadline is killed, idle ones are killed at exit. After a fork, the
    idle workers belong to the parent, which still uses them: the child starts its own and never touches those."""

    def __init__(self, size: int):
        self.idle: list[subprocess.Popen] = []
        self.owner_pid = os.getpid()
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(size)
        atexit.register(self.close)

    def ask(self, request: dict, timeout_s: float) -> dict | None:
        """A worker's reply, or None if it died or passed the deadline (then it is killed)."""
        with self.slots:
            worker = self._take_idle() or self._start()
            try:
                worker.stdin.write(json.dumps(request).encode() + b"\n")
                worker.stdin.flush()
                reply = _read_reply(worker, deadline=time.monotonic() + timeout_s)
            except OSError:
                reply = None
            if reply is None:
                _kill_worker(worker)
                return None
            with self.lock:
                self.idle.append(worker)
            return reply

    def _take_idle(self) -> subprocess.Popen | None:
        with self.lock:
            if self.owner_pid != os.getpid():  # we are a forked child: those are the parent's
                self.idle, self.owner_pid = [], os.getpid()
            return self.idle.pop() if self.idle else None

    def _start(self) -> subprocess.Popen:
        worker = subprocess.Popen([sys.executable, "-c", _MATH_WORKER, str(_MATH_WORKER_MEMORY)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        hello = _read_reply(worker, deadline=time.monotonic() + 120)
        if not hello or not hello.get("ready"):
            _kill_worker(worker)
            raise RuntimeError(f"math-verify worker ({sys.executable}) did not start: "
                               f"{(hello or {}).get('error', 'no reply')}; try `pip install math-verify`")
        return worker

    def close(self):
        with self.lock:
            if self.owner_pid == os.getpid():
                for worker in self.idle:
                    _kill_worker(worker)
            self.idle.clear()


# verify_math takes no pool (gppo and eval call it from many threads), so one pool per process stands behind it.
# Building it starts nothing: the first call starts the first worker.
_MATH_WORKERS = _MathWorkers(size=max(2, os.cpu_count() or 2))


def verify_math(gold, answer_text: str, timeout_s: float = 5.0) -> bool:
    """math-verify's verdict on `answer_text` against `gold`, within about timeout_s (+0.5 s) of wall clock.

    Safe to call from any thread. A pathological answer that exhausts the time is judged wrong.
    Raises ValueError if the gold answer is empty or math-verify cannot parse it (a data error)."""
    gold = str(gold)
    if not gold.strip():
        raise ValueError("math reward: the gold answer is empty")
    # math-verify's own per-operation alarms (whole seconds) let the worker recover by itself; our
    # deadline, slightly later, bounds the total and C code that ignores signals.
    reply = _MATH_WORKERS.ask({"gold": gold, "answer": answer_text, "timeout": max(1, math.ceil(timeout_s))},
                              timeout_s + 0.5)
    if reply is None:
        return False
    if not reply["gold_parsed"]:
        raise ValueError(f"math reward: math-verify cannot parse the gold answer {gold!r}")
    return reply["equal"]


def math_reward(response: str, answer, *, scale: RewardScale = DEFAULT_SCALE, timeout_s: float = 5.0) -> float:
    """Reward of one response to a math problem with gold `answer` (str or number)."""
    failure = format_failure(response, scale)
    if failure is not None:
        return failure
    return scale.correct if verify_math(answer, extract_answer_region(response), timeout_s) else scale.wrong

# ----------------------------------------------------------------------------- code: comparing outputs

def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _decimals(line: str) -> list | None:
    """The line's tokens as exact decimals (linear in the line's length), or None if one is not a number."""
    try:
        return [decimal.Decimal(token) for token in line.split()]
    except (decimal.DecimalException, ValueError):
        return None


def stdout_mismatch(got: str, expected: str) -> str | None:
    """None if `got` matches `expected` by LiveCodeBench's rule (lines after stripping; a line is equal, or both
    lines are all numbers and equal as exact decimals: 2.0 == 2, 0.30000000000000004 != 0.3), else a reason.
    As in LiveCodeBench, Python decides what a number is (Decimal: also Unicode digits such as `٣` and `３`, `1_000`,
    `inf`) and what separates tokens (str.split: any Unicode whitespace, such as NBSP and U+3000)."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(expected_lines):
        return f"wrong answer: {len(got_lines)} lines, expected {len(expected_lines)}"
    for number, (got_line, expected_line) in enumerate(zip(got_lines, expected_lines), 1):
        if got_line == expected_line:
            continue
        got_numbers, expected_numbers = _decimals(got_line), _decimals(expected_line)
        try:
            same = got_numbers is not None and got_numbers == expected_numbers
        except decimal.InvalidOperation:  # comparing a signalling NaN
            same = False
        if not same:
            return f"wrong answer on line {number}: got {_short(got_line)}, expected {_short(expected_line)}"
    return None


def _same_json(a, b) -> bool:
    """Equality of decoded JSON values; True is not 1, 1 equals 1.0 (as in LiveCodeBench)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same_json, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b  # str, None

# ----------------------------------------------------------------------------- code: the sandbox
# Each test runs in a sandbox of its own: a new session, killed as a group at exit and at the timeout; rlimits; a
# scrubbed environment; an output cap; a fresh session keyring; as root, an unprivileged uid without capabilities.
# Where `unshare` works, also network, pid, IPC, mount and user namespaces of its own, a watchdog, and a cgroup per
# test where one can be made. A _Plan says how tests are launched on this machine (_guarantees: what that enforces,
# and what not); _choose_plan, further down, picks the best plan that passes a probe.

# The trusted start of every test, run by the candidate's interpreter as `python -I -c _HARNESS SETTINGS` (SETTINGS:
# JSON). It reads the program from an inherited descriptor and closes every other one, joins a fresh session
# keyring, sets the rlimits (soft and hard, so they cannot be raised again), then runs the program as __main__
# (stdin tests) or calls `fn_name` with one JSON argument per input line and writes the JSON result (functional).
_HARNESS = r"""
import json, os, resource, sys

def _prepare():
    settings = json.loads(sys.argv[1])
    chunks, offset = [], 0
    while True:
        chunk = os.pread(settings["program_fd"], 1 << 20, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    for fd in os.listdir("/proc/self/fd"):  # the program's and the fstab's descriptors, anything inherited
        if int(fd) > 2:
            try:
                os.close(int(fd))
            except OSError:
                pass
    if settings["keyctl"]:  # keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): an empty session keyring of the test's
        import ctypes       # own, so keys added to the inherited (trainer's) one cannot reach later tests
        ctypes.CDLL(None).syscall(ctypes.c_long(settings["keyctl"]), ctypes.c_long(1), ctypes.c_void_p(None))
    for name, (soft, hard) in settings["limits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    sys.argv = ["solution.py"]
    return b"".join(chunks).decode("utf-8", "replace"), settings["fn_name"]

def _call(source, fn_name):
    result_file = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the candidate's prints go to stderr; stdout carries only the JSON result
    args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
    namespace = {"__name__": "solution"}
    exec("from typing import *; from collections import *; from heapq import *; from bisect import *; "
         "from itertools import *; from functools import *; from math import *; "
         "import collections, heapq, bisect, itertools, functools, math, string, re, sys",
         namespace)  # what LeetCode-style starter code assumes is imported
    exec(compile(source, "solution.py", "exec"), namespace)
    holder = namespace.get("Solution")
    function = getattr(holder(), fn_name) if hasattr(holder, fn_name) else namespace[fn_name]
    result_file.write(json.dumps(function(*args)))
    result_file.flush()
    os._exit(0)

_source, _fn_name = _prepare()
if _fn_name:
    _call(_source, _fn_name)
_code = compile(_source, "solution.py", "exec")
del _prepare, _call, _source, _fn_name, json, os, resource
__file__ = "solution.py"
exec(_code)
"""

_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}  # keyctl's syscall number

_PROBE = ("import os, sys, json, math, collections, heapq, bisect, itertools, functools\n"
          "prefix = os.path.realpath(sys.base_prefix)\n"
          "if not os.path.realpath(sys.executable).startswith(prefix + os.sep):\n"
          "    sys.exit('interpreter cannot find its own files (prefix %s)' % prefix)\n"
          "print(sum(map(int, input().split())))\n")

# Top-level directories left visible inside the namespaces. Every other entry of / (directories such as /root,
# /home, /work, /mnt, /opt and files such as /.dockerenv) is covered, so datasets and test files cannot be read.
_SYSTEM_DIRS = frozenset({"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "tmp",
                          "usr", "var"})
_WORLD_WRITABLE = ("/var/tmp", "/dev/shm", "/dev/mqueue")
_MEMORY_POLL_S = 0.02  # without a cgroup, the test's resident memory is summed this often
_PAGE = os.sysconf("SC_PAGESIZE")

# Run as (namespace-)root in the new namespaces, before privileges are dropped: join the test's cgroup ($2, if
# any) before anything else starts; one `mount -a` reads an fstab ($1, an inherited descriptor) that covers
# entries of / and makes the working directory a fresh tmpfs on /tmp; cap the System V shared memory of the new
# IPC namespace at $3 pages. sh stays the pid namespace's init: when the candidate exits, sh exits and the
# kernel kills everything left in the namespace.
_NS_SCRIPT = ('set -e; [ -z "$2" ] || echo $$ > "$2/cgroup.procs"; mount -a -T "$1"; '
              '{ echo "$3" > /proc/sys/kernel/shmall; } 2>/dev/null || :; shift 3; cd /tmp; set +e; "$@"')


def _limits(cfg: SandboxConfig, per_test_pids: bool) -> dict:
    cpu = cfg.cpu_s or math.ceil(cfg.timeout_s) + 1
    one = lambda value: [value, value]  # noqa: E731
    limits = {"RLIMIT_CPU": [cpu, cpu + 1],  # SIGXCPU at the soft limit, SIGKILL one second later
              "RLIMIT_AS": one(cfg.memory_mb << 20), "RLIMIT_FSIZE": one(cfg.file_size_mb << 20),
              "RLIMIT_NOFILE": one(cfg.open_files), "RLIMIT_CORE": one(0)}
    if not per_test_pids:  # counted per uid (per user namespace); a test's cgroup counts its own pids instead
        limits["RLIMIT_NPROC"] = one(cfg.processes)
    return limits


@dataclass(frozen=True)
class _Plan:
    """How each test is launched on this machine (chosen by _choose_plan)."""
    mode: str                # "namespaces", "namespaces (shared uid)", "namespaces (user namespace)" or "plain"
    python: str
    uid: int | None          # uid the candidate runs as after we drop root, None if we are not root
    launcher: tuple = ()     # unshare ... sh -c _NS_SCRIPT sandbox   (namespaces only)
    watchdog: str = ""       # coreutils `timeout`, run as root inside the namespaces (namespaces only)
    drop: tuple = ()         # setpriv ... [unshare --user ...]: become the candidate
    cgroup: str = ""         # cgroup v2 directory that gets one child cgroup per test
    no_cgroup: str = ""      # why there is none

    def argv(self, cfg: SandboxConfig, program_fd: int, fstab_fd: int, cgroup: str, fn_name: str) -> list[str]:
        shm_pages = (cfg.memory_mb << 20) // _PAGE
        before_drop = [f"/proc/self/fd/{fstab_fd}", cgroup, str(shm_pages)] if self.launcher else []
        if self.watchdog:  # kills the candidate even if the trainer died; --foreground: no new process group
            before_drop += [self.watchdog, "--foreground", "-s", "KILL", str(math.ceil(cfg.timeout_s) + 2)]
        settings = {"program_fd": program_fd, "fn_name": fn_name, "keyctl": _KEYCTL.get(os.uname().machine),
                    "limits": _limits(cfg, per_test_pids=bool(cgroup))}
        return [*self.launcher, *before_drop, *self.drop, self.python, "-I", "-c", _HARNESS, json.dumps(settings)]

    def covered(self) -> list[str]:
        """Paths a candidate must not see, directories ending in / (listed afresh for every test): the entries of
        / but the system directories, the interpreter's own and symlinks; the other world-writable directories."""
        keep = os.path.realpath(self.python).split(os.sep)[1]  # e.g. opt for /opt/conda/bin/python
        return [entry.path + "/" * entry.is_dir(follow_symlinks=False) for entry in os.scandir("/")
                if entry.name not in _SYSTEM_DIRS and entry.name != keep and not entry.is_symlink()] + \
               [path + "/" for path in _WORLD_WRITABLE if os.path.isdir(path)]

    def fstab(self, cfg: SandboxConfig) -> bytes:
        escape = lambda path: re.sub(r"[\s\\]", lambda m: "\\%03o" % ord(m.group()), path)  # noqa: E731 (fstab(5))
        lines = [f"sandbox-hide {escape(path[:-1])} tmpfs ro,size=4k,nosuid,nodev,noexec" if path.endswith("/")
                 else f"/dev/null {escape(path)} none bind,ro,nosuid,nodev,noexec"  # nodev: cannot even be opened
                 for path in self.covered()]
        uid = 0 if self.uid is None else self.uid
        lines.append(f"sandbox-work /tmp tmpfs size={cfg.file_size_mb}m,mode=700,uid={uid},gid={uid},nosuid,nodev")
        return "".join(line + " 0 0\n" for line in lines).encode()


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin",
                                                    "/usr/sbin", "/sbin"]))


def _write(path: str, value) -> None:
    with open(path, "w") as file:
        file.write(str(value))


def _make_plan(mode: str, python: str, uid: int, cgroup: str, no_cgroup: str) -> _Plan:
    """The plan of one mode: the commands that isolate a test (namespaces), then make it the candidate."""
    unshare, setpriv, root = _which("unshare"), _which("setpriv"), os.geteuid() == 0
    drop = (setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs") if root else ()
    if mode == "plain":
        return _Plan(mode, python, uid if root else None, drop=drop, no_cgroup="plain mode")
    if mode == "namespaces":  # root: then, as uid, enter a user namespace of the test's own
        drop += (unshare, "--user", f"--map-user={uid}", f"--map-group={uid}")
    elif not root:  # "namespaces (user namespace)": we are root only inside it; drop its capabilities for good
        uid, drop = None, (setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                           "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked"
                           ) if setpriv else ()
    launcher = (unshare, *(() if root else ("--user", "--map-root-user")), "--ipc", "--net", "--pid", "--fork",
                "--kill-child", "--mount-proc", "--mount", "/bin/sh", "-c", _NS_SCRIPT, "sandbox")
    return _Plan(mode, python, uid, launcher, _which("timeout") or "", drop, cgroup, no_cgroup)


def _guarantees(plan: _Plan, cfg: SandboxConfig) -> tuple[list[str], list[str]]:
    """(what the plan enforces, what it does not): sandbox_info's report, feature by feature."""
    who = "the trainer itself" if plan.uid is None else f"other candidates running as uid {plan.uid}"
    enforced = ["new session; the whole process group is SIGKILLed at exit and at the wall-clock timeout",
                "rlimits per process: CPU time, address space, file size, open files, no core files",
                "scrubbed environment (PATH, HOME, TMPDIR, LANG only)", "stdout+stderr size cap",
                "fresh working directory, removed afterwards",
                "outputs compared in the parent process, in time linear in their size"]
    gaps = []
    if os.uname().machine in _KEYCTL:
        enforced.append("a fresh, empty session keyring (not the trainer's)")
    if plan.uid is not None:
        enforced.append(f"runs as uid {plan.uid} with no capabilities (setpriv)")
    if plan.launcher:
        enforced += ["no network (new, empty network namespace)",
                     "pid namespace: no process outlives the test; kill(-1) reaches only its own processes",
                     "IPC namespace: System V IPC and POSIX message queues are the test's own and die with it",
                     "mount namespace: the working directory is a fresh tmpfs on /tmp; covered (empty): "
                     + " ".join(plan.covered())]
    else:
        gaps += ["network access", f"pid isolation: kill(-1) reaches {who}",
                 "if the trainer dies mid-test, nothing kills a sleeping candidate",
                 "processes that setsid and double-fork outlive the test (CPU-limited, not time-limited) and "
                 "escape its memory count", "files readable by the candidate's user (datasets, test files) stay readable",
                 "world-writable directories (/tmp, /var/tmp, /dev/shm) stay writable",
                 f"System V IPC, POSIX message queues, keyrings and RLIMIT_NPROC are shared with {who}, and IPC "
                 "objects outlive the test", "memory: per process (RLIMIT_AS), plus the resident memory of the "
                 "test's process tree summed every 20 ms (memfd files, pipes and escaped processes not counted)"]
    if plan.mode == "namespaces (shared uid)":  # without a cgroup, RLIMIT_NPROC (per uid) bounds its processes
        nproc = ("", "") if plan.cgroup else (" and RLIMIT_NPROC", ", and one can starve another of processes")
        gaps.append(f"no user namespace per test: kernel keyrings{nproc[0]} are per uid, shared by all candidates "
                    f"running as uid {plan.uid} at once: they can pass notes through their user keyring{nproc[1]}")
    elif plan.launcher:
        enforced.append("a user namespace per test: its keyrings and its process count (RLIMIT_NPROC, per user "
                        "namespace since Linux 5.14) are its own, not shared with other tests")
    if plan.mode == "namespaces (user namespace)":  # the candidate is the trainer's own user, mapped to root
        gaps.append("the candidate has the trainer's real uid: it can kill the watchdog (not the trainer, outside "
                    "its pid namespace), and RLIMIT_NPROC also counts the trainer's own processes")
        if not plan.drop:
            gaps.append("no setpriv: the candidate keeps its namespace capabilities and could unmount the covers")
    if plan.watchdog:
        enforced.append("a watchdog inside the namespaces kills the candidate even if the trainer dies")
    if plan.cgroup:
        enforced.append(f"a cgroup v2 per test, under {plan.cgroup}: memory.max {cfg.memory_mb} MB for all its "
                        f"processes together (also shared memory, tmpfs files, kernel memory; no swap), pids.max "
                        f"{cfg.processes}; the cgroup is killed and removed at the end")
        return enforced, gaps
    enforced.append(f"memory of the whole test: the resident memory (anonymous + shared) of all its processes "
                    f"is summed every 20 ms and the test killed above {cfg.memory_mb} MB")
    if plan.launcher:
        gaps.insert(0, f"no cgroup per test ({plan.no_cgroup}): the test's memory is the resident memory of its "
                       "processes, summed every 20 ms; memory outside their address spaces (unmapped memfd files, "
                       "pipe and socket buffers) is not counted, and a test can overshoot by what it allocates "
                       "within one poll")
    return enforced, gaps


def _cgroup_parent(setting: str) -> tuple[str, str]:
    """(a cgroup v2 directory whose child cgroups can get memory and pids limits, "") or ("", why there is none).
    "auto" takes this process's own cgroup if it already enables both controllers for its children (true of a
    root cgroup, rarely of others: a cgroup holding processes cannot enable them); a directory given by name
    gets them enabled (it must hold no processes)."""
    if setting == "off":
        return "", "cgroup='off'"
    path = setting
    try:
        if setting == "auto":
            with open("/proc/self/mountinfo") as file:
                mounts = [line.split()[4] for line in file if " - cgroup2 " in line]
            with open("/proc/self/cgroup") as file:
                own = [line[3:].strip() for line in file if line.startswith("0::")]
            if not mounts or not own:
                return "", "no cgroup v2 hierarchy"
            path = os.path.normpath(os.path.join(mounts[0], own[0].lstrip("/")))
        with open(os.path.join(path, "cgroup.subtree_control")) as file:
            missing = sorted({"memory", "pids"} - set(file.read().split()))
        if missing and setting == "auto":
            with open(os.path.join(path, "cgroup.controllers")) as file:
                available = file.read().split()
            return "", (f"{path} does not enable {' and '.join(missing)} for child cgroups "
                        f"(available there: {' '.join(available) or 'none'})")
        if missing:
            _write(os.path.join(path, "cgroup.subtree_control"), " ".join("+" + name for name in missing))
        os.rmdir(tempfile.mkdtemp(prefix="probe-", dir=path))  # may we create cgroups there?
    except OSError as error:
        if setting == "auto":
            return "", f"{path}: {error}"
        raise RuntimeError(f"SandboxConfig.cgroup={setting!r} cannot hold one cgroup per test: {error}") from None
    return path, ""


def _new_cgroup(parent: str, cfg: SandboxConfig) -> str:
    """A fresh cgroup for one test: all its processes together get memory_mb (no swap) and `processes` pids, and
    an out-of-memory kill takes the whole test."""
    path = tempfile.mkdtemp(prefix="test-", dir=parent)
    try:
        _write(os.path.join(path, "memory.max"), cfg.memory_mb << 20)
        _write(os.path.join(path, "pids.max"), cfg.processes)
        for name, value in (("memory.swap.max", 0), ("memory.oom.group", 1)):  # absent without swap accounting
            if os.path.exists(os.path.join(path, name)):
                _write(os.path.join(path, name), value)
    except OSError:
        os.rmdir(path)
        raise
    return path


def _remove_cgroup(path: str) -> bool:
    """Kill what is left in a test's cgroup and remove it; -> whether its memory limit killed something."""
    with open(os.path.join(path, "memory.events")) as file:
        oom_kills = int(dict(line.split() for line in file).get("oom_kill", 0))
    deadline = time.monotonic() + 5
    while os.path.exists(path):
        try:
            os.rmdir(path)
        except OSError:  # still populated
            if time.monotonic() > deadline:
                print(f"reward.py: WARNING: cgroup {path} still holds processes; left in place", file=sys.stderr)
                break
            if os.path.exists(os.path.join(path, "cgroup.kill")):  # Linux >= 5.14; before, the pid namespace's end
                _write(os.path.join(path, "cgroup.kill"), 1)
            time.sleep(0.002)
    return oom_kills > 0


# ----------------------------------------------------------------------------- code: running one test

def _has_exited(proc: subprocess.Popen) -> bool:
    """Exit check that does not reap, so the process group id cannot be reused before we kill it."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _tree_memory(pid: int) -> int:
    """Resident anonymous memory, in bytes, of process `pid` and all its descendants (from /proc; System V shared
    memory is capped apart, by shmall)."""
    total, pending = 0, [pid]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/statm", "rb") as file:
                resident, shared = file.read().split()[1:3]  # pages; shared = file-backed + shmem
            total += (int(resident) - int(shared)) * _PAGE
            for task in os.listdir(f"/proc/{pid}/task"):  # a child is listed under the thread that forked it
                with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                    pending += map(int, file.read().split())
        except (OSError, ValueError):
            continue  # it exited meanwhile
    return total


def _communicate(proc: subprocess.Popen, data: bytes, cfg: SandboxConfig, poll_memory: bool):
    """Feed stdin, read stdout/stderr up to cfg.output_mb in all, and (if poll_memory) check every 20 ms that the
    process tree's memory stays under cfg.memory_mb; -> (stdout, stderr, status), status in "exited", "timeout",
    "overflow", "memory". Never waits past the deadline."""
    deadline, next_memory_check = time.monotonic() + cfg.timeout_s, time.monotonic() + _MEMORY_POLL_S
    cap, memory_limit = int(cfg.output_mb * 2**20), cfg.memory_mb << 20 if poll_memory else 0
    stdout, stderr, stdin_fd = bytearray(), bytearray(), proc.stdin.fileno()
    output, sent, exited = {proc.stdout.fileno(): stdout, proc.stderr.fileno(): stderr}, 0, False
    with selectors.DefaultSelector() as selector:
        for fd in output:
            selector.register(fd, selectors.EVENT_READ)
        if data:
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while True:
            now = time.monotonic()
            if now >= deadline:
                return bytes(stdout), bytes(stderr), "timeout"
            if memory_limit and now >= next_memory_check and not exited:
                next_memory_check = now + _MEMORY_POLL_S
                if _tree_memory(proc.pid) > memory_limit:
                    return bytes(stdout), bytes(stderr), "memory"
            if not selector.get_map():  # all pipes closed: wait for the exit itself
                if exited:
                    break
                time.sleep(min(deadline - now, 0.002))
                exited = _has_exited(proc)
                continue
            # after the exit, only drain what is already there (an escaped child may hold the pipes)
            events = selector.select(0 if exited else min(deadline - now, _MEMORY_POLL_S if memory_limit else 0.05))
            if exited and not events:
                break
            for key, _ in events:
                if key.fd == stdin_fd:
                    try:
                        sent += os.write(stdin_fd, data[sent:sent + (1 << 16)])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:  # the program stopped reading its input
                        sent = len(data)
                    if sent >= len(data):
                        selector.unregister(stdin_fd)
                        proc.stdin.close()
                elif chunk := os.read(key.fd, 1 << 16):
                    output[key.fd] += chunk
                    if len(stdout) + len(stderr) > cap:
                        return bytes(stdout), bytes(stderr), "overflow"
                else:
                    selector.unregister(key.fd)
            exited = exited or _has_exited(proc)
    return bytes(stdout), bytes(stderr), "exited"


def _run_in_sandbox(plan: _Plan, cfg: SandboxConfig, program: str, test: dict, cgroup: str):
    """Run one test in a fresh sandbox; -> (returncode, stdout, stderr, status) as _communicate's, or
    (None, b"", b"", "sandbox could not start: ...")."""
    workdir = "" if plan.launcher else tempfile.mkdtemp(prefix="reward-sandbox-")  # namespaces: a tmpfs on /tmp
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir or "/tmp", "TMPDIR": workdir or "/tmp",
           "LANG": "C.UTF-8"}
    # Program and fstab are passed as open descriptors of unlinked files: no argv size limit, nothing on
    # disk to go stale, readable by the dropped user only through the descriptor.
    try:
        with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as fstab:
            if workdir and plan.uid is not None:
                os.chown(workdir, plan.uid, plan.uid)
            source.write(program.encode("utf-8", "replace"))
            source.flush()
            if plan.launcher:
                fstab.write(plan.fstab(cfg))
                fstab.flush()
            try:
                proc = subprocess.Popen(plan.argv(cfg, source.fileno(), fstab.fileno(), cgroup,
                                                  test.get("fn_name") or ""),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        cwd=workdir or "/", env=env, start_new_session=True,
                                        pass_fds=(source.fileno(), fstab.fileno()))
            except OSError as error:
                return None, b"", b"", f"sandbox could not start: {error}"
            try:
                out, err, status = _communicate(proc, test["input"].encode("utf-8", "replace"), cfg, not cgroup)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the whole session, on exit and on timeout
                except OSError:
                    pass
                proc.wait()
                for pipe in (proc.stdin, proc.stdout, proc.stderr):
                    pipe.close()  # nothing buffered: stdin was written with os.write
    finally:
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return proc.returncode, out, err, status


def _crash_reason(returncode: int, via_shell: bool, stderr: bytes) -> str:
    signum = -returncode if returncode < 0 else returncode - 128 if via_shell and returncode > 128 else 0
    if signum:
        hints = {signal.SIGKILL: "memory or process limit?", signal.SIGXCPU: "CPU time limit",
                 signal.SIGXFSZ: "file size limit", signal.SIGSEGV: "crash, e.g. a stack overflow"}
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"killed by {name}" + (f" ({hints[signum]})" if signum in hints else "")
    last = stderr.decode("utf-8", "replace").strip().split("\n")[-1]
    return f"runtime error (exit status {returncode}): {last[-200:]}"


def _run_one_test(plan: _Plan, cfg: SandboxConfig, program: str, test: dict) -> TestResult:
    """Run one test of one program in a fresh sandbox (and cgroup) and judge it here, in the parent."""
    cgroup = _new_cgroup(plan.cgroup, cfg) if plan.cgroup else ""
    try:
        returncode, out, err, status = _run_in_sandbox(plan, cfg, program, test, cgroup)
    finally:
        memory_killed = _remove_cgroup(cgroup) if cgroup else False
    if status == "memory" or memory_killed:
        return TestResult(False, f"memory limit: the test's processes held more than {cfg.memory_mb} MB together")
    if status == "timeout":
        return TestResult(False, f"timeout after {cfg.timeout_s:g}s")
    if status == "overflow":
        return TestResult(False, f"output limit exceeded ({cfg.output_mb:g} MB)")
    if returncode is None:
        return TestResult(False, status)
    if returncode != 0:
        return TestResult(False, _crash_reason(returncode, bool(plan.launcher), err))
    got = out.decode("utf-8", "replace")
    if not test.get("fn_name"):
        mismatch = stdout_mismatch(got, test["output"])
        return TestResult(mismatch is None, mismatch or "passed")
    try:
        same = _same_json(json.loads(got), json.loads(test["output"]))
    except (ValueError, RecursionError):
        return TestResult(False, f"functional test: the result is not JSON: {_short(got)}")
    return TestResult(True, "passed") if same else \
        TestResult(False, f"wrong answer: got {_short(got)}, expected {_short(test['output'])}")

# ----------------------------------------------------------------------------- code: choosing the sandbox

def _choose_plan(cfg: SandboxConfig) -> _Plan:
    """The first plan that passes a probe through the real sandbox, trying modes in order (namespaces: as root with
    a user namespace per test, then without; then plain), each with a cgroup per test and then, for "auto",
    without; each with every candidate interpreter: SandboxConfig.python, or sys.executable, python3 on a system
    PATH, /usr/bin/python3. The interpreter must work for the sandbox user inside the sandbox (one under /root does
    not, and the tmpfs on /tmp hides a virtualenv there); we never loosen permissions for it."""
    if cfg.namespaces not in ("auto", "on", "off"):
        raise ValueError(f"SandboxConfig.namespaces must be 'auto', 'on' or 'off', got {cfg.namespaces!r}")
    if cfg.namespaces == "off" and cfg.cgroup not in ("auto", "off"):
        raise ValueError("SandboxConfig.cgroup needs namespaces (a test joins its cgroup from the namespaces' init)")
    unshare, root = _which("unshare"), os.geteuid() == 0
    if root and not _which("setpriv"):
        raise RuntimeError("reward.py refuses to run untrusted code as root and cannot drop privileges: "
                           "`setpriv` (util-linux) was not found")
    pythons = [cfg.python] if cfg.python else [sys.executable, shutil.which(
        "python3", path="/usr/local/bin:/usr/bin:/bin"), "/usr/bin/python3"]
    pythons = list(dict.fromkeys(p for p in pythons if p and os.path.exists(p)))
    modes = ["namespaces", "namespaces (shared uid)"] if root else ["namespaces (user namespace)"]
    modes = (modes if cfg.namespaces != "off" and unshare else []) + (["plain"] if cfg.namespaces != "on" else [])
    cgroup, no_cgroup = _cgroup_parent(cfg.cgroup if cfg.namespaces != "off" else "off")
    cgroups = [cgroup, ""] if cgroup and cfg.cgroup == "auto" else [cgroup]  # "auto": with, then without
    attempts = [] if unshare or cfg.namespaces == "off" else ["namespaces: `unshare` not found"]
    no_cgroup = no_cgroup or f"the probe failed in a cgroup under {cgroup}"  # when "auto" falls back to none
    for mode, test_cgroup, python in [(mode, test_cgroup, python) for mode in modes
                                      for test_cgroup in (cgroups if mode != "plain" else [""]) for python in pythons]:
        plan = _make_plan(mode, python, cfg.uid, test_cgroup, no_cgroup)
        result = _run_one_test(plan, SandboxConfig(timeout_s=30), _PROBE, {"input": "1 2\n", "output": "3"})
        if result.passed:
            gaps = _guarantees(plan, cfg)[1]
            if gaps:
                print(f"reward.py: WARNING: code tests run in mode {mode!r}" + (
                      f" ({'; '.join(attempts)})" if attempts else "") + ". Not enforced: " + "; ".join(gaps),
                      file=sys.stderr)
            return plan
        attempts.append(f"{mode}{' + cgroup' if test_cgroup else ''} with {python}: {result.reason}")
    raise RuntimeError("reward.py cannot build a sandbox for code tests:\n  " + "\n  ".join(attempts or
                       ["namespaces='on' but `unshare` was not found"]))


class _PlanCache:
    """The plan of each sandbox configuration, probed on its first use and kept for the life of the process (the
    machine does not change under a running trainer). The lock makes concurrent first calls probe once."""

    def __init__(self):
        self.plans: dict[tuple, _Plan] = {}
        self.lock = threading.Lock()

    def get(self, cfg: SandboxConfig) -> _Plan:
        key = (cfg.namespaces, cfg.cgroup, cfg.uid, cfg.python)  # the fields that decide the plan
        with self.lock:
            if key not in self.plans:
                self.plans[key] = _choose_plan(cfg)  # raises for a bad configuration: nothing is cached
            return self.plans[key]


# run_tests and sandbox_info take a SandboxConfig, not a cache (their callers should not have to keep one), so one
# cache per process stands behind them: a probe costs a second, and every response of a run shares the result.
_PLANS = _PlanCache()


# ----------------------------------------------------------------------------- code: public API

def validate_tests(tests) -> None:
    """Raise ValueError naming the test and field if `tests` is not a non-empty list of
    {"input": str, "output": str} or {"input": str, "output": str, "fn_name": str} (JSON lines/JSON)."""
    if not isinstance(tests, (list, tuple)) or not tests:
        raise ValueError(f"tests must be a non-empty list of dicts, got {type(tests).__name__} {_short(str(tests))}")
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise ValueError(f"tests[{i}]: expected a dict with 'input' and 'output', got {type(test).__name__}")
        for field in ("input", "output"):
            if not isinstance(test.get(field), str):
                raise ValueError(f"tests[{i}]['{field}']: expected a string, got {type(test.get(field)).__name__}")
        fn_name = test.get("fn_name")
        if not fn_name:
            continue
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise ValueError(f"tests[{i}]['fn_name']: expected a function name, got {fn_name!r}")
        lines = [(f"['input'] line {n}", line) for n, line in enumerate(test["input"].split("\n"), 1) if line.strip()]
        for field, text in lines + [("['output']", test["output"])]:
            try:
                json.loads(text)
            except (ValueError, RecursionError) as error:
                raise ValueError(f"tests[{i}]{field}: not JSON ({error})") from None


def run_tests(program: str, tests: list[dict], config: SandboxConfig | None = None) -> list[TestResult]:
    """Run `program` on every test, each in its own sandbox, up to config.workers at once.
    Returns one TestResult(passed, reason) per test, in order; candidate failures never raise."""
    cfg = config or SandboxConfig()
    validate_tests(tests)
    if not isinstance(program, str):
        raise TypeError(f"program must be a str, got {type(program).__name__}")
    plan = _PLANS.get(cfg)
    workers = max(1, min(len(tests), cfg.workers or len(os.sched_getaffinity(0))))
    if workers == 1:
        return [_run_one_test(plan, cfg, program, test) for test in tests]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda test: _run_one_test(plan, cfg, program, test), tests))


def all_passed(results: list[TestResult]) -> bool:
    """True when there is at least one result and every test passed (the SFT-loss positives)."""
    return bool(results) and all(result.passed for result in results)


def code_reward_details(response: str, tests: list[dict], *, scale: RewardScale = DEFAULT_SCALE,
                        config: SandboxConfig | None = None) -> tuple[float, list[TestResult]]:
    """(reward, per-test results): wrong + (correct - wrong) * fraction passed. Format failures give their
    reward and no results."""
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


def code_reward(response: str, tests: list[dict], *, scale: RewardScale = DEFAULT_SCALE,
                config: SandboxConfig | None = None) -> float:
    """The soft code reward of code_reward_details, alone (the paper's: fraction of tests passed)."""
    return code_reward_details(response, tests, scale=scale, config=config)[0]


def sandbox_info(config: SandboxConfig | None = None) -> dict:
    """What the sandbox chosen on this machine runs and enforces (runs the probe on first use)."""
    cfg = config or SandboxConfig()
    plan = _PLANS.get(cfg)
    enforced, not_enforced = _guarantees(plan, cfg)
    return {"mode": plan.mode + (" + cgroup" if plan.cgroup else ""), "cgroup": plan.cgroup or None,
            "python": plan.python, "uid": plan.uid if plan.uid is not None else os.geteuid(),
            "enforced": enforced, "not_enforced": not_enforced}

# ----------------------------------------------------------------------------- command line

@dataclass
class Config:
    input: str = ""              # JSONL file to score (line formats above); "" -> self-check of this machine
    scale: str = "default"       # reward scale: default (0..1, format failure 0) or authors (+-1 with penalties)
    timeout_s: float = 6.0       # wall clock per code test
    workers: int = 0             # code tests run at once; 0 -> number of CPUs
    namespaces: str = "auto"     # auto | on | off: isolate each code test in namespaces (see SandboxConfig)
    cgroup: str = "auto"         # auto | off | a cgroup v2 directory for one cgroup per code test
    math_timeout_s: float = 5.0  # math-verify's time per answer


_INPUT_HELP = """--input is a JSONL file, one response per line, either
  math: {"response": "<think>...</think> ... \\\\boxed{42}", "answer": "42"}          (answer: str or number)
  code: {"response": "<think>...</think> ```python ...```", "tests": [{"input": "1 2\\n", "output": "3"}, ...]}
        a functional test adds "fn_name": its input holds one JSON argument per line, its output is JSON.
Each line's result is printed to stdout as {"line", "reward", "reasons"} (reasons: one per code test);
progress goes to stderr."""


def _option_help() -> dict[str, str]:
    """Each Config field's comment in this file's source: the --help text."""
    import inspect
    fields = (re.match(r"\s+(\w+): [^#]*#\s*(.*)", line) for line in inspect.getsource(Config).splitlines())
    return {match.group(1): match.group(2) for match in fields if match}


def parse_args(argv: list[str]) -> Config:
    cfg = Config()
    if any(a in ("-h", "--help") for a in argv):
        descriptions = _option_help()
        options = [f"  {f'--{f.name}={getattr(cfg, f.name)!r}':<26} {descriptions.get(f.name, '')}"
                   for f in dataclasses.fields(cfg)]
        print(__doc__.strip().split("\n\n")[0], _INPUT_HELP, "options (--key=value):", sep="\n\n")
        print("\n".join(options))
        raise SystemExit(0)
    for arg in argv:
        key, eq, value = arg[2:].partition("=")
        if not arg.startswith("--") or not eq:
            raise SystemExit(f"reward.py: arguments look like --key=value, got {arg!r}")
        if not hasattr(cfg, key):
            raise SystemExit(f"reward.py: unknown option --{key}; known: "
                             + ", ".join(f.name for f in dataclasses.fields(cfg)))
        try:
            setattr(cfg, key, type(getattr(cfg, key))(value))
        except ValueError:
            raise SystemExit(f"reward.py: --{key} expects {type(getattr(cfg, key)).__name__}, got {value!r}")
    if cfg.scale not in ("default", "authors"):
        raise SystemExit(f"reward.py: --scale must be default or authors, got {cfg.scale!r}")
    return cfg


def _self_check(sandbox: SandboxConfig, scale: RewardScale, math_timeout_s: float):
    print(json.dumps(sandbox_info(sandbox), indent=2))
    for name, response in [("right after </think>", "<think>maybe \\boxed{5}</think> So \\boxed{\\frac{3}{1}}."),
                           ("right only inside <think>", "<think>\\boxed{3}</think> \\boxed{4}"),
                           ("thinking never closed", "<think>\\boxed{3}")]:
        print(f"math, {name}:", math_reward(response, "3", scale=scale, timeout_s=math_timeout_s))
    tests = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}]
    for name, code in [("honest", "print(sum(map(int, input().split())))"),
                       ("half right", "a, b = map(int, input().split())\nprint(3 if a == 1 else 0)"),
                       ("sys.exit(0) cheat", "import sys; sys.exit(0)")]:
        reward, results = code_reward_details(f"<think>...</think>\n```python\n{code}\n```", tests, scale=scale,
                                              config=sandbox)
        print(f"code, {name}: reward {reward}  {[result.reason for result in results]}")


def main(cfg: Config):
    sandbox = SandboxConfig(timeout_s=cfg.timeout_s, workers=cfg.workers, namespaces=cfg.namespaces, cgroup=cfg.cgroup)
    scale = AUTHORS_SCALE if cfg.scale == "authors" else DEFAULT_SCALE
    if not cfg.input:
        return _self_check(sandbox, scale, cfg.math_timeout_s)
    with open(cfg.input) as file:
        lines = [line for line in file]
    start, total = time.time(), 0.0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            response = row["response"]
            if "tests" in row:
                reward, results = code_reward_details(response, row["tests"], scale=scale, config=sandbox)
                reasons = [result.reason for result in results]
            else:
                reward, reasons = math_reward(response, row["answer"], scale=scale, timeout_s=cfg.math_timeout_s), []
        except (ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"{cfg.input}:{number}: {type(error).__name__}: {error}") from None
        total += reward
        print(json.dumps({"line": number, "reward": reward, "reasons": reasons}), flush=True)
        elapsed = time.time() - start
        print(f"\r{number}/{len(lines)} lines, mean reward {total / number:.3f}, "
              f"ETA {elapsed / number * (len(lines) - number):.0f}s", end="", file=sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    try:
        main(parse_args(sys.argv[1:]))
    except (RuntimeError, ValueError) as error:  # an option or a machine the sandbox cannot work with
        raise SystemExit(f"reward.py: {error}") from None
