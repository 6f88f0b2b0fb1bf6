"""
Rewards for RL on reasoning models: math answers checked by math-verify, code run against tests in a
sandbox. Standard library + math-verify only; copy this file out on its own.

The policy writes `<think> reasoning </think> answer`. Only the text after the LAST `</think>` is judged
(a `\\boxed{}` inside the thinking is not an answer; the authors' eval script forgot this).

    math:  R = correct  if verify(parse("\\boxed{" + gold + "}"), parse(answer_region))  else wrong
           (gold first: math-verify's verify() is not symmetric)
    code:  R = (# tests passed) / (# tests)        the paper's soft reward; the authors map it to 2R-1,
                                                   which gives the same GRPO advantages
    format failures: no `</think>` -> missing_think_end; no ```python block after it -> missing_code
    (defaults 0.0, on the default 0..1 scale; the authors' code used -0.5 on a +-1 scale)

Simplifications and choices, in plain words (Linux only):
1. math-verify times out with signal.alarm, which works only in a process's main thread. So every math
   check runs in a persistent worker process (there math-verify's own timeouts work), and the caller
   kills it after a wall-clock deadline (also covering C code no alarm interrupts): math_reward works
   from any thread and cannot hang. The worker has the trainer's privileges; it parses the text, never
   runs it (math-verify's plain-expression path hands sympy only digits and operators).
2. Each code test runs in its own subprocess. Outputs are compared in the trainer's process: stdin tests
   line by line after stripping, numbers as exact decimals (as LiveCodeBench); functional tests
   (`fn_name`, JSON arguments one per line) have the return value serialised to JSON by a harness in
   the child and compared here as plain data, so an object whose __eq__ is always True gains nothing.
3. The sandbox. Always: a new session whose whole process group is SIGKILLed at exit and at the timeout;
   rlimits on CPU time, address space, file size, open files, processes, core files; a scrubbed
   environment; stdout+stderr read with a size cap; expected outputs never enter the child. Started as
   root, the candidate runs as `uid` (default nobody) without capabilities, through `setpriv`. Where
   `unshare` works (as root, or non-root with user namespaces) each test also gets its own network, pid
   and mount namespaces: no network; processes that escape by setsid/double fork die with the test;
   kill(-1) reaches only the test's own processes; a root watchdog kills the candidate even if the
   trainer dies; the working directory is a fresh tmpfs on /tmp; other world-writable directories and
   top-level directories outside the system ones (/root, /home, /work, /mnt, ..., except the one holding
   the interpreter) are covered by empty read-only tmpfs, so datasets and test files there cannot be
   read. Without namespaces ("plain" mode) these are missing: a warning says so, sandbox_info() lists it.
4. The candidate's interpreter must work for the sandbox user inside the sandbox: one under /root (pyenv)
   does not, and a tmpfs on /tmp hides a virtualenv there. We use the first of `python`, sys.executable,
   python3 on a system PATH, /usr/bin/python3 that passes a probe through the real sandbox (which also
   checks it finds its own files); if none does, run_tests raises RuntimeError naming each attempt. We
   never loosen filesystem permissions for it.
5. The reward never raises because of the candidate: a crash, timeout, wrong output or format failure is
   a lower reward (per-test reasons in code_reward_details). It raises for inputs that are not the
   candidate's fault: malformed tests (validate_tests names test and field), an empty or unparseable
   gold answer, a machine where no sandbox can be built.

Public API (stable): math_reward, verify_math, code_reward, code_reward_details, run_tests, all_passed,
extract_answer_region, extract_code, stdout_mismatch, validate_tests, sandbox_info, SandboxConfig, TestResult.

How to run:
    python reward.py                                  # self-check: sandbox report + a few examples
    python reward.py --input=scored.jsonl             # lines {"response", "answer"} or {"response", "tests"}
    python reward.py --input=x.jsonl --timeout_s=2 --workers=4 --namespaces=off
    python -m pytest tests/test_reward.py             # correctness + adversarial suite
    python benchmarks/bench_reward.py                 # tests/s with 2 workers, sandbox overhead
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


@dataclass
class SandboxConfig:
    timeout_s: float = 6.0       # wall clock per test, interpreter start included (LiveCodeBench uses 6)
    cpu_s: int = 0               # RLIMIT_CPU seconds; 0 -> ceil(timeout_s) + 1
    memory_mb: int = 1024        # RLIMIT_AS of the candidate
    file_size_mb: int = 16       # RLIMIT_FSIZE, and the size of the tmpfs working directory
    open_files: int = 64         # RLIMIT_NOFILE
    processes: int = 64          # RLIMIT_NPROC (counted per user: shared by candidates running at once)
    output_mb: float = 8.0       # cap on stdout + stderr bytes read from one test
    workers: int = 0             # tests of one program run at once; 0 -> number of usable CPUs
    namespaces: str = "auto"     # "auto": use them when unshare works; "on": required; "off": never
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


# ----------------------------------------------------------------------------- math

# Runs in a worker process's main thread, so math-verify's signal.alarm timeouts work there.
_MATH_WORKER = r"""
import json, logging, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
logging.disable(logging.CRITICAL)   # math-verify logs every timed-out input in full
try:
    from math_verify import parse, verify
except Exception as error:
    print(json.dumps({"error": repr(error)}), flush=True)
    sys.exit(1)
print(json.dumps({"ready": True}), flush=True)
golds = {}
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
""".replace("MEMORY", str(4 << 30))


class _MathWorker:
    """One math-verify process, driven by JSON lines over its stdin/stdout."""

    def __init__(self):
        self.owner_pid = os.getpid()  # a forked trainer must not share our pipes
        self.proc = subprocess.Popen([sys.executable, "-c", _MATH_WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = b""
        hello = self._read_reply(deadline=time.monotonic() + 120)
        if not hello or not hello.get("ready"):
            self.close()
            raise RuntimeError(f"math-verify worker ({sys.executable}) did not start: "
                               f"{(hello or {}).get('error', 'no reply')}; try `pip install math-verify`")

    def ask(self, request: dict, timeout_s: float) -> dict | None:
        """The reply, or None if the worker died or passed the deadline (it is then unusable)."""
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        return self._read_reply(deadline=time.monotonic() + timeout_s)

    def _read_reply(self, deadline: float) -> dict | None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return None
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


_math_idle: list[_MathWorker] = []
_math_lock = threading.Lock()
_math_slots = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))  # at most this many workers


@atexit.register
def _close_math_workers():
    with _math_lock:
        for worker in _math_idle:
            if worker.owner_pid == os.getpid():
                worker.close()
        _math_idle.clear()


def verify_math(gold, answer_text: str, timeout_s: float = 5.0) -> bool:
    """math-verify's verdict on `answer_text` against `gold`, within about timeout_s (+0.5 s) of wall clock.

    Safe to call from any thread. A pathological answer that exhausts the time is judged wrong.
    Raises ValueError if the gold answer is empty or math-verify cannot parse it (a data error)."""
    gold = str(gold)
    if not gold.strip():
        raise ValueError("math reward: the gold answer is empty")
    # math-verify's own per-operation alarms (whole seconds) let the worker recover by itself; our
    # deadline, slightly later, bounds the total and C code that ignores signals.
    request = {"gold": gold, "answer": answer_text, "timeout": max(1, math.ceil(timeout_s))}
    with _math_slots:
        with _math_lock:
            worker = None
            while _math_idle and worker is None:
                candidate = _math_idle.pop()
                worker = candidate if candidate.owner_pid == os.getpid() else None
        if worker is None:
            worker = _MathWorker()
        reply = worker.ask(request, timeout_s + 0.5)
        if reply is None:
            worker.close()
            return False
        with _math_lock:
            _math_idle.append(worker)
    if not reply["gold_parsed"]:
        raise ValueError(f"math reward: math-verify cannot parse the gold answer {gold!r}")
    return reply["equal"]


def math_reward(response: str, answer, *, correct: float = 1.0, wrong: float = 0.0,
                missing_think_end: float = 0.0, timeout_s: float = 5.0) -> float:
    """Reward of one response to a math problem with gold `answer` (str or number)."""
    region = extract_answer_region(response)
    if region is None:
        return missing_think_end
    return correct if verify_math(answer, region, timeout_s) else wrong


# ----------------------------------------------------------------------------- code: comparing outputs

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # no "nan", "inf" or "1_000"


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _same_tokens(got_line: str, expected_line: str) -> bool:
    got, expected = got_line.split(), expected_line.split()
    if len(got) != len(expected):
        return False
    for a, b in zip(got, expected):
        if a == b:
            continue
        if not (_NUMBER.fullmatch(a) and _NUMBER.fullmatch(b)):
            return False
        try:
            if decimal.Decimal(a) != decimal.Decimal(b):  # exact: 2.0 == 2, 0.30000000000000004 != 0.3
                return False
        except (decimal.DecimalException, ValueError, OverflowError):
            return False
    return True


def stdout_mismatch(got: str, expected: str) -> str | None:
    """None if `got` matches `expected` (line by line after stripping, numbers as exact decimals),
    else a short reason."""
    got_lines = [line.strip() for line in got.strip().split("\n")]
    expected_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(expected_lines):
        return f"wrong answer: {len(got_lines)} lines, expected {len(expected_lines)}"
    for number, (g, e) in enumerate(zip(got_lines, expected_lines), 1):
        if g != e and not _same_tokens(g, e):
            return f"wrong answer on line {number}: got {_short(g)}, expected {_short(e)}"
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

# Trusted prelude run by the candidate's interpreter before the candidate's code: read the program from
# an inherited file descriptor, set the rlimits (soft and hard, so they cannot be raised again), then run
# it as __main__ (stdin tests) or call `fn_name` with JSON arguments and write the JSON result (functional).
_HARNESS = r"""
import json, os, resource, sys

def _prepare():
    fd, limits, fn_name = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    chunks, offset = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    for extra in os.listdir("/proc/self/fd"):  # the program's and fstab's descriptors, anything inherited
        if int(extra) > 2:
            try:
                os.close(int(extra))
            except OSError:
                pass
    for name, (soft, hard) in limits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    sys.argv = ["solution.py"]
    return b"".join(chunks).decode("utf-8", "replace"), fn_name

def _call(source, fn_name):
    result_file = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the candidate's prints go to stderr; stdout carries only the JSON result
    args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
    namespace = {"__name__": "solution"}
    exec(PRELUDE, namespace)
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
""".replace("PRELUDE", repr(  # what LeetCode-style starter code assumes is already imported
    "from typing import *\nfrom collections import *\nfrom heapq import *\nfrom bisect import *\n"
    "from itertools import *\nfrom functools import *\nfrom math import *\n"
    "import collections, heapq, bisect, itertools, functools, math, string, re, sys\n"))

_PROBE = ("import os, sys, json, math, collections, heapq, bisect, itertools, functools\n"
          "prefix = os.path.realpath(sys.base_prefix)\n"
          "if not os.path.realpath(sys.executable).startswith(prefix + os.sep):\n"
          "    sys.exit('interpreter cannot find its own files (prefix %s)' % prefix)\n"
          "print(sum(map(int, input().split())))\n")

# Top-level directories left visible inside the namespaces; all others (/root, /home, /work, /mnt, /opt,
# /srv, /run ...) get an empty read-only tmpfs on top, so datasets and test files there cannot be read.
_SYSTEM_DIRS = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "tmp",
                "usr", "var"}
_WORLD_WRITABLE = ("/var/tmp", "/dev/shm", "/dev/mqueue")

# Run as (namespace-)root in the new mount namespace, before privileges are dropped: one `mount -a` reads
# an fstab (an inherited descriptor, see _fstab) that hides directories and makes the working directory a
# fresh tmpfs on /tmp. sh stays the pid namespace's init: when the candidate exits, sh exits and the kernel
# kills everything left in the namespace.
_NS_SCRIPT = 'set -e; mount -a -T "$1"; shift; cd /tmp; set +e; "$@"'


@dataclass(frozen=True)
class _Plan:
    mode: str                # "namespaces", "namespaces (user namespace)" or "plain"
    python: str
    uid: int | None          # uid the candidate runs as after we drop root, None if we are not root
    launcher: tuple = ()     # unshare ... sh -c _NS_SCRIPT sandbox   (namespaces only)
    watchdog: str = ""       # coreutils `timeout`, run as root inside the namespace (namespaces only)
    drop: tuple = ()         # setpriv ...
    hidden: tuple = ()       # covered by an empty read-only tmpfs (namespaces only)

    def argv(self, cfg: SandboxConfig, program_fd: int, fstab_fd: int, fn_name: str) -> list[str]:
        before_drop = [f"/proc/self/fd/{fstab_fd}"] if self.launcher else []
        if self.watchdog:  # kills the candidate even if the trainer died; --foreground: no new process group
            before_drop += [self.watchdog, "--foreground", "-s", "KILL", str(math.ceil(cfg.timeout_s) + 2)]
        return [*self.launcher, *before_drop, *self.drop, self.python, "-I", "-c", _HARNESS, str(program_fd),
                json.dumps(_limits(cfg)), fn_name]

    def fstab(self, cfg: SandboxConfig) -> bytes:
        escape = lambda path: re.sub(r"[\s\\]", lambda m: "\\%03o" % ord(m.group()), path)  # noqa: E731 (fstab(5))
        hide = "".join(f"sandbox-hide {escape(path)} tmpfs ro,size=4k,nosuid,nodev,noexec 0 0\n" for path in self.hidden)
        uid = 0 if self.uid is None else self.uid
        return (hide + f"sandbox-work /tmp tmpfs size={cfg.file_size_mb}m,mode=700,uid={uid},gid={uid},"
                "nosuid,nodev 0 0\n").encode()


def _limits(cfg: SandboxConfig) -> dict:
    cpu = cfg.cpu_s or math.ceil(cfg.timeout_s) + 1
    one = lambda value: [value, value]  # noqa: E731
    return {"RLIMIT_CPU": [cpu, cpu + 1],  # SIGXCPU at the soft limit, SIGKILL one second later
            "RLIMIT_AS": one(cfg.memory_mb << 20), "RLIMIT_FSIZE": one(cfg.file_size_mb << 20),
            "RLIMIT_NOFILE": one(cfg.open_files), "RLIMIT_NPROC": one(cfg.processes), "RLIMIT_CORE": one(0)}


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin", "/bin",
                                                    "/usr/sbin", "/sbin"]))


def _make_plan(namespaces: bool, python: str, uid: int, unshare: str | None, setpriv: str | None) -> _Plan:
    root = os.geteuid() == 0
    drop = (setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs") if root else ()
    if not namespaces:
        return _Plan("plain", python, uid if root else None, drop=drop)
    if root:
        user_ns = ()
    else:  # we are root only inside the user namespace; drop its capabilities for good
        uid, user_ns = None, ("--user", "--map-root-user")
        drop = (setpriv, "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked") if setpriv else ()
    keep = os.path.realpath(python).split(os.sep)[1]  # e.g. /opt of /opt/conda/bin/python
    hidden = tuple(path for name in sorted(os.listdir("/")) if name not in _SYSTEM_DIRS and name != keep
                   for path in ["/" + name] if os.path.isdir(path) and not os.path.islink(path))
    hidden += tuple(path for path in _WORLD_WRITABLE if os.path.isdir(path))
    launcher = (unshare, *user_ns, "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount",
                "/bin/sh", "-c", _NS_SCRIPT, "sandbox")
    return _Plan("namespaces" if root else "namespaces (user namespace)", python, uid, launcher,
                 _which("timeout") or "", drop, hidden)


_plans: dict = {}
_plan_lock = threading.Lock()


def _sandbox_plan(cfg: SandboxConfig) -> _Plan:
    """How candidates are run, chosen once per (namespaces, uid, python) by probing the real sandbox."""
    if cfg.namespaces not in ("auto", "on", "off"):
        raise ValueError(f"SandboxConfig.namespaces must be 'auto', 'on' or 'off', got {cfg.namespaces!r}")
    key = (cfg.namespaces, cfg.uid, cfg.python)
    with _plan_lock:
        if key in _plans:
            return _plans[key]
        unshare, setpriv = _which("unshare"), _which("setpriv")
        if os.geteuid() == 0 and not setpriv:
            raise RuntimeError("reward.py refuses to run untrusted code as root and cannot drop privileges: "
                               "`setpriv` (util-linux) was not found")
        pythons = [cfg.python] if cfg.python else [sys.executable, shutil.which(
            "python3", path="/usr/local/bin:/usr/bin:/bin"), "/usr/bin/python3"]
        pythons = list(dict.fromkeys(p for p in pythons if p and os.path.exists(p)))
        modes = ([True] if cfg.namespaces != "off" and unshare else []) + ([False] if cfg.namespaces != "on" else [])
        attempts = [] if unshare or cfg.namespaces == "off" else ["namespaces: `unshare` not found"]
        for namespaces in modes:
            for python in pythons:
                plan = _make_plan(namespaces, python, cfg.uid, unshare, setpriv)
                result = _execute(plan, SandboxConfig(timeout_s=30), _PROBE, {"input": "1 2\n", "output": "3"})
                if result.passed:
                    if not namespaces:
                        print("reward.py: WARNING: code tests run WITHOUT namespaces (" + "; ".join(attempts)
                              + "). Not enforced: " + "; ".join(_not_enforced(plan)), file=sys.stderr)
                    _plans[key] = plan
                    return plan
                attempts.append(f"{plan.mode} with {python}: {result.reason}")
        raise RuntimeError("reward.py cannot build a sandbox for code tests:\n  " + "\n  ".join(attempts or
                           ["namespaces='on' but `unshare` was not found"]))


def _not_enforced(plan: _Plan) -> list[str]:
    if plan.mode == "namespaces":
        return []
    if plan.mode != "plain":  # user namespace: the candidate is the trainer's own user, mapped to root
        return ["the candidate has the trainer's real uid: it can kill the watchdog (not the trainer, outside "
                "its pid namespace), and RLIMIT_NPROC also counts the trainer's own processes"] + (
                [] if plan.drop else ["no setpriv: the candidate keeps its namespace capabilities and could "
                                      "unmount the hiding tmpfs"])
    same_user = "the trainer itself" if plan.uid is None else f"other candidates running as uid {plan.uid}"
    return ["network access", "pid isolation: kill(-1) reaches " + same_user,
            "if the trainer dies mid-test, nothing kills a sleeping candidate",
            "processes that setsid and double-fork outlive the test (CPU-limited, not time-limited)",
            "files readable by the candidate's user (datasets, test files) stay readable",
            "world-writable directories (/tmp, /var/tmp, /dev/shm) stay writable"]


def _has_exited(proc: subprocess.Popen) -> bool:
    """Exit check that does not reap, so the process group id cannot be reused before we kill it."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _communicate(proc: subprocess.Popen, data: bytes, timeout_s: float, cap: int):
    """Feed stdin, read stdout/stderr up to `cap` bytes in all; -> (stdout, stderr, status), status in
    "exited", "timeout", "overflow". Never waits past the deadline."""
    deadline = time.monotonic() + timeout_s
    output = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    stdin_fd, sent, total, exited = proc.stdin.fileno(), 0, 0, False
    status = "exited"
    with selectors.DefaultSelector() as selector:
        for fd in output:
            selector.register(fd, selectors.EVENT_READ)
        if data:
            os.set_blocking(stdin_fd, False)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while status == "exited":
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            if not selector.get_map():  # all pipes closed: wait for the exit itself
                if exited:
                    break
                time.sleep(min(remaining, 0.002))
                exited = _has_exited(proc)
                continue
            # after the exit, only drain what is already there (an escaped child may hold the pipes)
            events = selector.select(0 if exited else min(remaining, 0.05))
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
                    continue
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                output[key.fd] += chunk
                total += len(chunk)
                if total > cap:
                    status = "overflow"
                    break
            exited = exited or _has_exited(proc)
    return bytes(output[proc.stdout.fileno()]), bytes(output[proc.stderr.fileno()]), status


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


def _execute(plan: _Plan, cfg: SandboxConfig, program: str, test: dict) -> TestResult:
    """Run one test of one program in a fresh sandbox and judge it here, in the parent."""
    fn_name = test.get("fn_name") or ""
    workdir = None
    # Program and fstab are passed as open descriptors of unlinked files: no argv size limit, nothing on
    # disk to go stale, readable by the dropped user only through the descriptor.
    with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as fstab:
        source.write(program.encode("utf-8", "replace"))
        source.flush()
        fstab.write(plan.fstab(cfg))
        fstab.flush()
        if plan.launcher:
            env_home = "/tmp"  # the tmpfs made by _NS_SCRIPT
        else:
            workdir = env_home = tempfile.mkdtemp(prefix="reward-sandbox-")
            if plan.uid is not None:
                os.chown(workdir, plan.uid, plan.uid)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": env_home, "TMPDIR": env_home, "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen(plan.argv(cfg, source.fileno(), fstab.fileno(), fn_name), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir or "/", env=env,
                                    start_new_session=True, pass_fds=(source.fileno(), fstab.fileno()))
        except OSError as error:
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            return TestResult(False, f"sandbox could not start: {error}")
        try:
            out, err, status = _communicate(proc, test["input"].encode("utf-8", "replace"), cfg.timeout_s, int(cfg.output_mb * 2**20))
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the whole session, on exit and on timeout
            except OSError:
                pass
            proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                pipe.close()  # nothing buffered: stdin was written with os.write
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
    if status == "timeout":
        return TestResult(False, f"timeout after {cfg.timeout_s:g}s")
    if status == "overflow":
        return TestResult(False, f"output limit exceeded ({cfg.output_mb:g} MB)")
    if proc.returncode != 0:
        return TestResult(False, _crash_reason(proc.returncode, bool(plan.launcher), err))
    got = out.decode("utf-8", "replace")
    if not fn_name:
        mismatch = stdout_mismatch(got, test["output"])
        return TestResult(mismatch is None, mismatch or "passed")
    try:
        same = _same_json(json.loads(got), json.loads(test["output"]))
    except (ValueError, RecursionError):
        return TestResult(False, f"functional test: the result is not JSON: {_short(got)}")
    return TestResult(True, "passed") if same else \
        TestResult(False, f"wrong answer: got {_short(got)}, expected {_short(test['output'])}")


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
        for number, line in enumerate(test["input"].split("\n"), 1):
            try:
                if line.strip():
                    json.loads(line)
            except (ValueError, RecursionError) as error:
                raise ValueError(f"tests[{i}]['input'] line {number}: not JSON ({error})") from None
        try:
            json.loads(test["output"])
        except (ValueError, RecursionError) as error:
            raise ValueError(f"tests[{i}]['output']: not JSON ({error})") from None


def run_tests(program: str, tests: list[dict], config: SandboxConfig | None = None) -> list[TestResult]:
    """Run `program` on every test, each in its own sandbox, up to config.workers at once.
    Returns one TestResult(passed, reason) per test, in order; candidate failures never raise."""
    cfg = config or SandboxConfig()
    validate_tests(tests)
    if not isinstance(program, str):
        raise TypeError(f"program must be a str, got {type(program).__name__}")
    plan = _sandbox_plan(cfg)
    workers = max(1, min(len(tests), cfg.workers or len(os.sched_getaffinity(0))))
    if workers == 1:
        return [_execute(plan, cfg, program, test) for test in tests]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda test: _execute(plan, cfg, program, test), tests))


def all_passed(results: list[TestResult]) -> bool:
    """True when there is at least one result and every test passed (the SFT-loss positives)."""
    return bool(results) and all(result.passed for result in results)


def code_reward_details(response: str, tests: list[dict], *, missing_think_end: float = 0.0,
                        missing_code: float = 0.0, config: SandboxConfig | None = None
                        ) -> tuple[float, list[TestResult]]:
    """(soft reward, per-test results). Format failures give their reward and no results."""
    validate_tests(tests)  # broken data fails loudly even when the response has no code
    if extract_answer_region(response) is None:
        return missing_think_end, []
    program = extract_code(response)
    if program is None:
        return missing_code, []
    results = run_tests(program, tests, config)
    return sum(result.passed for result in results) / len(results), results


def code_reward(response: str, tests: list[dict], *, missing_think_end: float = 0.0,
                missing_code: float = 0.0, config: SandboxConfig | None = None) -> float:
    """Fraction of tests passed by the last ```python block after `</think>` (the paper's soft reward)."""
    return code_reward_details(response, tests, missing_think_end=missing_think_end,
                               missing_code=missing_code, config=config)[0]


def sandbox_info(config: SandboxConfig | None = None) -> dict:
    """What the sandbox chosen on this machine runs and enforces (runs the probe on first use)."""
    cfg = config or SandboxConfig()
    plan = _sandbox_plan(cfg)
    enforced = ["new session; the whole process group is SIGKILLed at exit and at the wall-clock timeout",
                "rlimits: CPU time, address space, file size, open files, processes, no core files",
                "scrubbed environment (PATH, HOME, TMPDIR, LANG only)", "stdout+stderr size cap",
                "fresh working directory, removed afterwards", "outputs compared in the parent process"]
    if plan.uid is not None:
        enforced.append(f"runs as uid {plan.uid} with no capabilities (setpriv), so RLIMIT_NPROC applies")
    if plan.launcher:
        enforced += ["no network (new, empty network namespace)",
                     "pid namespace: escaped processes die with the test; kill(-1) reaches only its own processes",
                     "mount namespace: working directory is a fresh tmpfs on /tmp; hidden by empty read-only "
                     "tmpfs: " + " ".join(plan.hidden)]
    if plan.watchdog:
        enforced.append("a watchdog inside the namespace kills the candidate even if the trainer dies")
    return {"mode": plan.mode, "python": plan.python, "uid": plan.uid if plan.uid is not None else os.geteuid(),
            "enforced": enforced, "not_enforced": _not_enforced(plan)}


# ----------------------------------------------------------------------------- command line

@dataclass
class Config:
    input: str = ""              # JSONL to score: {"response", "answer"} (math) or {"response", "tests"} (code)
    timeout_s: float = 6.0       # per code test
    workers: int = 0             # code tests at once; 0 -> number of CPUs
    namespaces: str = "auto"     # see SandboxConfig
    math_timeout_s: float = 5.0


def parse_args(argv: list[str]) -> Config:
    cfg = Config()
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip().split("\n\n")[0] + "\n\noptions (--key=value):\n"
              + "\n".join(f"  --{f.name}={getattr(cfg, f.name)!r}" for f in dataclasses.fields(cfg)))
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
    return cfg


def _self_check(sandbox: SandboxConfig, math_timeout_s: float):
    print(json.dumps(sandbox_info(sandbox), indent=2))
    thinking = "<think>maybe \\boxed{5}</think>"
    print("math, right after </think>:", math_reward(thinking + "So \\boxed{\\frac12}.", "0.5", timeout_s=math_timeout_s))
    print("math, right only inside <think>:", math_reward("<think>\\boxed{3}</think> \\boxed{4}", "3"))
    tests = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}]
    for name, code in [("honest", "print(sum(map(int, input().split())))"),
                       ("half right", "a, b = map(int, input().split())\nprint(3 if a == 1 else 0)"),
                       ("sys.exit(0) cheat", "import sys; sys.exit(0)")]:
        reward, results = code_reward_details(f"<think>...</think>\n```python\n{code}\n```", tests, config=sandbox)
        print(f"code, {name}: reward {reward}  {[result.reason for result in results]}")


def main(cfg: Config):
    sandbox = SandboxConfig(timeout_s=cfg.timeout_s, workers=cfg.workers, namespaces=cfg.namespaces)
    if not cfg.input:
        return _self_check(sandbox, cfg.math_timeout_s)
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
                reward, results = code_reward_details(response, row["tests"], config=sandbox)
                reasons = [result.reason for result in results]
            else:
                reward, reasons = math_reward(response, row["answer"], timeout_s=cfg.math_timeout_s), []
        except (ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"{cfg.input}:{number}: {type(error).__name__}: {error}") from None
        total += reward
        print(json.dumps({"line": number, "reward": reward, "reasons": reasons}), flush=True)
        elapsed = time.time() - start
        print(f"\r{number}/{len(lines)} lines, mean reward {total / number:.3f}, "
              f"ETA {elapsed / number * (len(lines) - number):.0f}s", end="", file=sys.stderr)
    print(file=sys.stderr)


if __name__ == "__main__":
    main(parse_args(sys.argv[1:]))
