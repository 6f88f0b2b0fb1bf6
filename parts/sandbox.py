"""A sandbox for untrusted programs: run a candidate program on tests, each test in a sandbox of its
own, and judge its output by LiveCodeBench's rule, with the judging's time and memory bounded by the
expected output.

    results = run_tests(program, [{"input": "1 2\n", "output": "3"}], SandboxConfig(timeout_s=6))   # [TestResult]
    results = run_tests(program, [{"input": "1\n2", "output": "3", "fn_name": "add"}])   # functional: JSON in, out
Each test: a new session; as root, an unprivileged host uid that no other test running on the
machine has, without capabilities; rlimits; a seccomp filter (no file locks); its whole input as a
regular file on stdin; and where `unshare` works network, pid, IPC, mount and user namespaces of its
own (no view of the cgroup tree), a memory/pids/CPU cgroup; at most `cores` tests of the whole
process at once; CPU time of all its processes, a wall-clock backstop. Linux, standard library only.
`python sandbox.py` prints what is enforced on this machine and runs two examples.
"""

import atexit
import contextlib
import decimal
import errno
import fcntl
import itertools
import json
import marshal
import math
import mmap
import os
import re
import selectors
import shutil
import signal
import stat
import struct
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
    # fmt: off
    timeout_s: float = 6.0       # CPU time per test, all its processes together (LiveCodeBench's limit: 6 s)
    wall_timeout_s: float = 0.0  # wall-clock backstop per test, from when it starts; 0 -> 2 * timeout_s + 5
    memory_mb: int = 1024        # memory of the whole test: all its processes, shared memory once, its tmpfs files
    file_size_mb: int = 16       # RLIMIT_FSIZE, and the size of the tmpfs working directory
    open_files: int = 64         # RLIMIT_NOFILE
    processes: int = 64          # processes + threads of one test (pids.max, or RLIMIT_NPROC in its user namespace)
    output_mb: float = 8.0       # cap on stdout + stderr bytes read from one test
    workers: int = 0             # tests of one program run at once; 0 -> cores
    cores: int = 0               # tests of this whole process run at once, on as many cores; 0 -> usable CPUs
    #                              shared among this machine's ranks of a job ($LOCAL_WORLD_SIZE)
    namespaces: str = "auto"     # "auto": use them when unshare works; "on": required; "off": never
    cgroup: str = "auto"         # "auto": cgroups (v2 or v1) per test where we may make them; "off"; or a v2 directory
    uid: int = 65534             # as root: the uid a candidate has inside its user namespace (65534 = nobody)
    first_uid: int = 1_900_000_000  # as root: tests run at once run as host uids first_uid, first_uid + 1, ...
    uid_count: int = 1024        # ... (this many, machine-wide), so none shares a per-uid kernel budget; 0 = all as uid
    python: str = ""             # interpreter for candidates (e.g. a virtualenv with numpy); "" -> first one that works
    # fmt: on


class TestResult(NamedTuple):
    passed: bool
    # "passed", or why not: "wrong answer on line 2: ...", "timeout after 6s", ...
    reason: str


class BadTests(ValueError):
    """The tests themselves are broken (the data's fault, never the candidate's): validate_tests
    names test and field."""


# ----------------------------------------------------------------------------- running tests


def all_passed(results: list[TestResult]) -> bool:
    """True when there is at least one result and every test passed (the SFT-loss positives)."""
    return bool(results) and all(result.passed for result in results)


def validate_tests(tests) -> None:
    """Raise BadTests (a ValueError) naming the test and field if `tests` is not a non-empty list of
    {"input": str, "output": str} or {"input": str, "output": str, "fn_name": str} (JSON
    lines/JSON)."""
    if not isinstance(tests, (list, tuple)) or not tests:
        raise BadTests(
            f"tests must be a non-empty list of dicts, got {type(tests).__name__} {_short(str(tests))}"
        )
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise BadTests(
                f"tests[{i}]: expected a dict with 'input' and 'output', got {type(test).__name__}"
            )
        for field in ("input", "output"):
            if not isinstance(test.get(field), str):
                raise BadTests(
                    f"tests[{i}]['{field}']: expected a string, got {type(test.get(field)).__name__}"
                )
        fn_name = test.get("fn_name")
        if not fn_name:
            continue
        if not isinstance(fn_name, str) or not fn_name.isidentifier():
            raise BadTests(f"tests[{i}]['fn_name']: expected a function name, got {fn_name!r}")
        lines = [
            (f"['input'] line {n}", line)
            for n, line in enumerate(test["input"].split("\n"), 1)
            if line.strip()
        ]
        for field, text in lines + [("['output']", test["output"])]:
            try:
                json.loads(text)
            except (ValueError, RecursionError) as error:
                raise BadTests(f"tests[{i}]{field}: not JSON ({error})") from None


def run_tests(
    program: str, tests: list[dict], config: SandboxConfig | None = None
) -> list[TestResult]:
    """Run `program` on every test, each in its own sandbox, up to config.workers at once (and never
    more than config.cores tests of this whole process at once). Returns one TestResult(passed,
    reason) per test, in order; candidate failures never raise."""
    cfg = config or SandboxConfig()
    validate_tests(tests)
    if not isinstance(program, str):
        raise TypeError(f"program must be a str, got {type(program).__name__}")
    plan = _PLANS.get(cfg)
    workers = max(1, min(len(tests), cfg.workers or _cores(cfg)))
    if workers == 1:
        return [_run_one_test(plan, cfg, program, test) for test in tests]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda test: _run_one_test(plan, cfg, program, test), tests))


def sandbox_info(config: SandboxConfig | None = None) -> dict:
    """What the sandbox chosen on this machine runs and enforces (runs the probe on first use)."""
    cfg = config or SandboxConfig()
    plan = _PLANS.get(cfg)
    enforced, not_enforced = _guarantees(plan, cfg)
    return {
        "mode": plan.mode + (" + cgroup" if plan.cgroups else ""),
        "cgroup": f"v{plan.cgroups.version}: " + " ".join(plan.cgroups.directories())
        if plan.cgroups
        else None,
        "python": plan.python,
        "uid": plan.uid if plan.uid is not None else os.geteuid(),
        "host_uids": [plan.host_uids[0], plan.host_uids[-1]] if plan.host_uids else None,
        "cores": _cores(cfg),
        "enforced": enforced,
        "not_enforced": not_enforced,
    }


# ----------------------------------------------------------------------------- code: the sandbox
# Each test runs in a sandbox of its own: a new session; rlimits; a scrubbed environment; an output
# cap; a fresh session keyring; no file locks (a seccomp filter); as root, an unprivileged uid
# without capabilities. Where `unshare` works, also network, pid, IPC, mount and user namespaces of
# its own (the test's own /tmp, /dev/shm and /dev/pts), a watchdog, and where this process may
# create them, cgroups of its own (memory, pids, CPU). At most `cores` tests of the whole process
# run at once, whatever thread asks. A _Plan says how tests are launched on this machine
# (_guarantees: what that enforces, and what not); _choose_plan picks the best plan that passes a
# probe.

# The modes, best first. The names are shown to the user; code compares modes only through these
# constants (to build a plan: _make_plan), and a plan's behaviour comes from its fields.
NAMESPACES = "namespaces"  # root; a user namespace per test
NAMESPACES_NO_USER_NAMESPACE = "namespaces (no user namespace)"  # root; user namespaces refused
NAMESPACES_UNPRIVILEGED = "namespaces (user namespace)"  # the trainer is not root
PLAIN = "plain"  # no namespaces


# ----------------------------------------------------------------------- code: choosing the sandbox


class _PlanCache:
    """The plan of each sandbox configuration, probed on its first use and kept for the life of the
    process (the machine does not change under a running trainer). The lock makes concurrent first
    calls probe once."""

    def __init__(self):
        self.plans: dict[tuple, _Plan] = {}
        self.lock = threading.Lock()

    def get(self, cfg: SandboxConfig) -> "_Plan":
        # what decides it
        key = (cfg.namespaces, cfg.cgroup, cfg.uid, cfg.first_uid, cfg.uid_count, cfg.python)
        with self.lock:
            if key not in self.plans:
                # raises for a bad configuration: nothing is cached
                self.plans[key] = _choose_plan(cfg)
            return self.plans[key]


# run_tests and sandbox_info take a SandboxConfig, not a cache (their callers should not have to
# keep one), so one cache per process stands behind them: a probe costs a second, and every response
# of a run shares the result.
_PLANS = _PlanCache()


def _choose_plan(cfg: SandboxConfig) -> "_Plan":
    """The first plan that passes a probe through the real sandbox, trying modes in order
    (namespaces: as root with a user namespace per test, then without; then plain), each with
    cgroups per test and then, for "auto", without; each with every candidate interpreter:
    SandboxConfig.python, or sys.executable, python3 on a system PATH, /usr/bin/python3. The
    interpreter must work for the sandbox user inside the sandbox (one under /root does not, and the
    tmpfs on /tmp hides a virtualenv there); we never loosen permissions for it."""
    if cfg.namespaces not in ("auto", "on", "off"):
        raise ValueError(
            f"SandboxConfig.namespaces must be 'auto', 'on' or 'off', got {cfg.namespaces!r}"
        )
    if cfg.namespaces == "off" and cfg.cgroup not in ("auto", "off"):
        raise ValueError(
            "SandboxConfig.cgroup needs namespaces (a test joins its cgroup from the namespaces' init)"
        )
    unshare = _which("unshare")
    root = os.geteuid() == 0
    if root and not _which("setpriv"):
        raise RuntimeError(
            "reward.py refuses to run untrusted code as root and cannot drop privileges: "
            "`setpriv` (util-linux) was not found"
        )
    pythons = (
        [os.path.abspath(cfg.python)]
        if cfg.python
        else [
            sys.executable,
            shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin"),
            "/usr/bin/python3",
        ]
    )
    pythons = list(dict.fromkeys(p for p in pythons if p and os.path.exists(p)))
    if cfg.python and not pythons:
        raise ValueError(f"SandboxConfig.python: {cfg.python} does not exist")
    modes = [NAMESPACES, NAMESPACES_NO_USER_NAMESPACE] if root else [NAMESPACES_UNPRIVILEGED]
    modes = (modes if cfg.namespaces != "off" and unshare else []) + (
        [PLAIN] if cfg.namespaces != "on" else []
    )
    cgroups, no_cgroup = _find_cgroups(cfg.cgroup if cfg.namespaces != "off" else "off")
    # "auto": with, then without
    choices = [cgroups, None] if cgroups and cfg.cgroup == "auto" else [cgroups]
    attempts = [] if unshare or cfg.namespaces == "off" else ["namespaces: `unshare` not found"]
    no_cgroup = no_cgroup or "the probe failed with cgroups under " + " ".join(
        cgroups.directories()
    )
    for mode, test_cgroups, python in [
        (mode, test_cgroups, python)
        for mode in modes
        for test_cgroups in (choices if mode != PLAIN else [None])
        for python in pythons
    ]:
        plan = _make_plan(mode, python, cfg, test_cgroups, no_cgroup)
        result = _run_one_test(
            plan,
            SandboxConfig(timeout_s=30, cores=_cores(cfg)),
            _PROBE,
            {"input": "1 2\n", "output": "3"},
        )
        if result.passed:
            gaps = _guarantees(plan, cfg)[1]
            if gaps:
                print(
                    f"reward.py: WARNING: code tests run in mode {mode!r}"
                    + (f" ({'; '.join(attempts)})" if attempts else "")
                    + ". Not enforced: "
                    + "; ".join(gaps),
                    file=sys.stderr,
                )
            return plan
        attempts.append(
            f"{mode}{' + cgroup' if test_cgroups else ''} with {python}: {result.reason}"
        )
    raise RuntimeError(
        "reward.py cannot build a sandbox for code tests:\n  "
        + "\n  ".join(attempts or ["namespaces='on' but `unshare` was not found"])
    )


# ----------------------------------------------------------------------------- code: a mode's plan

# The trusted start of every test, run by the candidate's interpreter as `python -I -S -c _HARNESS
# SETTINGS` (SETTINGS: a dict in marshal's format 4, as hex; json and the `re` it imports would
# cost every test ~7 ms of CPU). -S, then site.main() called by the harness with two steps made
# no-ops: the host's startup hooks (the import lines of .pth files, sitecustomize) run in no test,
# while sys.path (with the directories .pth files add), a virtualenv's prefixes and the builtins
# site adds (exit, quit, help) are what `python -I` gives. (A Python whose site ran import lines
# other than by exec(line) would run them, inside the test, as without -S.) Processes a candidate
# starts with the interpreter's flags (multiprocessing's spawn and forkserver) start with -S too:
# sys.path comes from multiprocessing, the builtins do not. The harness reads the program from an
# inherited descriptor, closes every other one and writes the program to solution.py in its
# working directory (a real __file__); joins a
# fresh session keyring; volunteers for the OOM killer; sets the rlimits (soft and hard, so they
# cannot be raised again); turns file locks into no-ops (below); then runs the program as __main__
# (stdin tests) or calls `fn_name` with one JSON argument per input line and writes the JSON result
# (functional tests).
#
# Why no file locks: a lock on a file that two tests can both open (/etc/passwd, /dev/null, any
# library) is a bit that one test sets and another reads, 32 files make a 32-bit channel, and
# /proc/locks shows every lock of the machine. A seccomp filter sees only the descriptor, not the
# file, so it cannot allow locks on the test's own files alone; it makes every flock() and fcntl()
# record lock succeed without taking anything (a program that locks its own files still runs;
# processes of one test no longer exclude each other) and F_GETLK fail with ENOLCK. The same filter
# refuses kernel AIO and io_uring (ENOSYS, as on a kernel without them, which Python's own I/O never
# needs): their budget is the machine's (fs.aio-max-nr), and one test taking it all failed a
# neighbour's io_setup.
_HARNESS = r"""
import marshal, os, resource, sys

def _seccomp_filter(audit_arch, flock, fcntl, refused):
    import ctypes
    LD, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06       # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    ALLOW, KILL, NOOP, NOLCK = 0x7FFF0000, 0x80000000, 0x50000, 0x50000 | 37  # SECCOMP_RET_*; ERRNO 0 = success
    NOSYS = 0x50000 | 38
    program = [(LD, 0, 0, 4), (JEQ, 1, 0, audit_arch), (RET, 0, 0, KILL),   # another system call ABI: kill
               (LD, 0, 0, 0), (JGE, 0, 1, 0x40000000), (RET, 0, 0, KILL)]   # x32 numbers: kill
    for number in refused:
        program += [(JEQ, 0, 1, number), (RET, 0, 0, NOSYS)]
    program += [(JEQ, 0, 1, flock), (RET, 0, 0, NOOP), (JEQ, 1, 0, fcntl), (RET, 0, 0, ALLOW),
               (LD, 0, 0, 24)]                                               # fcntl's command: args[1]
    for command, verdict in ((6, NOOP), (7, NOOP), (37, NOOP), (38, NOOP), (5, NOLCK), (36, NOLCK)):
        program += [(JEQ, 0, 1, command), (RET, 0, 0, verdict)]  # F_SETLK(W), F_OFD_SETLK(W); F_GETLK, F_OFD_GETLK
    program.append((RET, 0, 0, ALLOW))
    class Program(ctypes.Structure):
        _fields_ = [("length", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    filters = (ctypes.c_uint64 * len(program))(*[c | t << 16 | f << 24 | k << 32 for c, t, f, k in program])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Program(len(program), ctypes.addressof(filters))),
                                                0, 0):  # PR_SET_NO_NEW_PRIVS; PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        sys.exit("sandbox: seccomp filter refused: " + os.strerror(ctypes.get_errno()))

def _prepare():
    settings = marshal.loads(bytes.fromhex(sys.argv[1]))
    import site  # under -S importing it runs nothing; its main() runs here, minus the host's hooks:
    customize = site.execsitecustomize
    site.exec = lambda line: None  # a .pth file's import line (site.addpackage: exec(line))
    site.execsitecustomize = lambda: None
    site.main()
    del site.exec
    site.execsitecustomize = customize
    if settings["cgroup"]:  # wait until the namespace's init has moved us into the test's cgroups
        import time
        name, count = settings["cgroup"]
        deadline = time.monotonic() + 10
        while open("/proc/self/cgroup").read().count("/" + name + "\n") < count:
            if time.monotonic() > deadline:
                sys.exit("sandbox: not moved into the test's cgroups")
            time.sleep(0.001)
    os.dup2(settings["input_fd"], 0)
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
    with open("/proc/self/oom_score_adj", "w") as file:  # the kernel's OOM killer takes candidates first
        file.write("1000")
    path = os.path.join(os.getcwd(), "solution.py")
    with open(path, "wb") as file:
        file.write(b"".join(chunks))
    for name, (soft, hard) in settings["limits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if settings["seccomp"]:
        _seccomp_filter(*settings["seccomp"])
    sys.argv = [path]
    return b"".join(chunks).decode("utf-8", "replace"), path, settings["fn_name"]

def _call(source, path, fn_name):
    import json
    result_file = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the candidate's prints go to stderr; stdout carries only the JSON result
    args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
    namespace = {"__name__": "solution", "__file__": path}
    exec("from typing import *; from collections import *; from heapq import *; from bisect import *; "
         "from itertools import *; from functools import *; from math import *; "
         "import collections, heapq, bisect, itertools, functools, math, string, re, sys",
         namespace)  # what LeetCode-style starter code assumes is imported
    exec(compile(source, path, "exec"), namespace)
    holder = namespace.get("Solution")
    function = getattr(holder(), fn_name) if hasattr(holder, fn_name) else namespace[fn_name]
    result_file.write(json.dumps(function(*args)))
    result_file.flush()
    os._exit(0)

_source, __file__, _fn_name = _prepare()
if _fn_name:
    _call(_source, __file__, _fn_name)
_code = compile(_source, __file__, "exec")
del _prepare, _call, _seccomp_filter, _source, _fn_name, marshal, os, resource
exec(_code)
"""

# keyctl's syscall number
_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 271, "s390x": 280}
# AUDIT_ARCH_*, the numbers of flock and fcntl, and of the calls refused (io_setup, io_uring_setup)
_SECCOMP = {"x86_64": (0xC000003E, 73, 72, (206, 425)), "aarch64": (0xC00000B7, 32, 25, (0, 425))}

_PROBE = (
    "import os, sys, json, math, collections, heapq, bisect, itertools, functools\n"
    "prefix = os.path.realpath(sys.base_prefix)\n"
    "if not os.path.realpath(sys.executable).startswith(prefix + os.sep):\n"
    "    sys.exit('interpreter cannot find its own files (prefix %s)' % prefix)\n"
    "print(sum(map(int, input().split())))\n"
)

# Top-level directories left visible inside the namespaces. Every other entry of / (directories such
# as /root, /home, /work, /mnt, /opt and files such as /.dockerenv) is covered, so datasets and test
# files cannot be read.
_SYSTEM_DIRS = frozenset(
    {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "sys",
        "tmp",
        "usr",
        "var",
    }
)
_COVERED_WRITABLE = ("/var/tmp", "/dev/mqueue")  # world-writable directories a test must not share
# What a test would learn of other tests through the system directories: the cgroup tree (every
# test's cgroup, with its pids.current and memory usage, numbers a neighbour chooses) and the count
# of cgroups per hierarchy. A test's limits are the kernel's business; it needs to see none of it.
_COVERED_SYSTEM = ("/sys/fs/cgroup/", "/proc/cgroups")
# a test's CPU time (and, without a memory cgroup, its memory) is read this often
_POLL_S = 0.02
# how long a killed test's pid namespace may take to die before we stop waiting
_TEARDOWN_S = 10
_TMPFS_INODES = 4096  # files a test may create in its /tmp, and in its /dev/shm
_PTYS = 16  # pseudo-terminals a test may open (its own devpts instance)
_CANDIDATE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    # glibc reserves 64 MB of address space per thread arena otherwise
    "MALLOC_ARENA_MAX": "2",
    # one core each
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_PAGE = os.sysconf("SC_PAGESIZE")
_TICKS = os.sysconf("SC_CLK_TCK")

# Run as (namespace-)root in the new namespaces, before privileges are dropped: volunteer for the
# OOM killer; one `mount -a` reads an fstab ($1, an inherited descriptor) that covers entries of /
# and gives the test its own /tmp, /dev/shm and devpts (and covers the cgroup tree); cap the System
# V shared memory of the new IPC namespace at $2 pages; if $3 is 1 (the namespaces belong to a user
# namespace of the test's own), forbid nested user namespaces. Then start the candidate and move it
# into the test's cgroups ($5: their directories as /proc/self/fd/N, open descriptors that still
# reach them under the cover) while its interpreter starts (joining a cgroup waits for an RCU grace
# period, ~8 ms; the harness runs nothing of the candidate's before it is in them); a watchdog kills
# it after $4 seconds even if the trainer died. sh stays the pid namespace's init: when the
# candidate exits, sh exits and the kernel kills everything left in the namespace.
_NS_SCRIPT = (
    "set -e; fstab=$1 shmall=$2 nested=$3 seconds=$4 cgroups=$5; shift 5; "
    'echo 1000 > /proc/self/oom_score_adj; mount -a -T "$fstab"; '
    '{ echo "$shmall" > /proc/sys/kernel/shmall; } 2>/dev/null || :; '
    '[ "$nested" = 0 ] || echo 0 > /proc/sys/user/max_user_namespaces; cd /tmp; '
    '"$@" & candidate=$!; '
    'for cgroup in $cgroups; do echo $candidate > "$cgroup/cgroup.procs"; done; '
    '{ sleep "$seconds"; kill -KILL $candidate; } & '
    "set +e; wait $candidate"
)
# In the test's own user namespace, with the capabilities it holds there for a moment: the limit on
# user namespaces is per user namespace and applies to all below it, so 0 here forbids the candidate
# to create one (as root in one, it could mount a tmpfs or get an IPC namespace of its own, outside
# every limit).
_NO_NESTED_USER_NAMESPACES = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'


def _cores(cfg: SandboxConfig) -> int:
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # torchrun's ranks here
    return cfg.cores or max(1, len(os.sched_getaffinity(0)) // local_processes)


def _limits(cfg: SandboxConfig, per_test_pids: bool, memory_cgroup: bool) -> dict:
    # a backstop per process: the test's CPU time, all processes, is read
    cpu = math.ceil(cfg.timeout_s) + 1
    one = lambda value: [value, value]  # noqa: E731
    limits = {
        "RLIMIT_CPU": [cpu, cpu + 1],  # SIGXCPU at the soft limit, SIGKILL one second later
        "RLIMIT_FSIZE": one(cfg.file_size_mb << 20),
        "RLIMIT_NOFILE": one(cfg.open_files),
        "RLIMIT_CORE": one(0),
    }
    # a backstop for what one process can allocate between two reads of its memory
    if not memory_cgroup:
        limits["RLIMIT_AS"] = one((2 * cfg.memory_mb + 1024) << 20)
    # counted per uid (per user namespace); a test's cgroup counts its own pids instead
    if not per_test_pids:
        limits["RLIMIT_NPROC"] = one(cfg.processes)
    return limits


@dataclass(frozen=True)
class _Plan:
    """How each test is launched on this machine (chosen by _choose_plan)."""

    # fmt: off
    mode: str                # NAMESPACES, NAMESPACES_NO_USER_NAMESPACE, NAMESPACES_UNPRIVILEGED or PLAIN (shown only)
    python: str
    uid: int | None          # as root: the candidate's uid in its user namespace, and its host uid without
                             # host_uids; None if we are not root
    launcher: tuple = ()     # unshare ... sh -c _NS_SCRIPT sandbox   (namespaces only)
    drop: tuple = ()         # setpriv ... [unshare --user ...]: become the candidate (_HOST_UID: the test's host uid)
    own_user_namespace: bool = False   # each test has a user namespace of its own
    cgroups: "_Cgroups | None" = None  # where each test gets cgroups of its own
    no_cgroup: str = ""      # why there are none
    host_uids: range | None = None  # as root: the host uids tests lease, one per test running on the machine
    no_host_uids: str = ""   # why there are none (then every test runs as uid)
    # fmt: on

    def argv(
        self,
        cfg: SandboxConfig,
        fds: dict,
        cgroup: "_TestCgroup | None",
        fn_name: str,
        host_uid: int | None,
    ) -> list[str]:
        """fds: the inherited descriptors "program", "input", "fstab" and "cgroups" (a list: the
        test's cgroup directories, reached through them once the cgroup tree is covered)."""
        before_drop = []
        if self.launcher:
            # made by the trainer's user
            nested = "1" if self.own_user_namespace and self.uid is None else "0"
            cgroup_dirs = " ".join(f"/proc/self/fd/{fd}" for fd in fds["cgroups"])
            before_drop = [
                f"/proc/self/fd/{fds['fstab']}",
                str((cfg.memory_mb << 20) // 4 // _PAGE),
                nested,
                str(math.ceil(_wall_timeout(cfg)) + 2),
                cgroup_dirs,
            ]
        drop = [str(host_uid) if part == _HOST_UID else part for part in self.drop]
        settings = {
            "program_fd": fds["program"],
            "input_fd": fds["input"],
            "fn_name": fn_name,
            "cgroup": [cgroup.name, len(cgroup.paths)] if cgroup else None,
            "keyctl": _KEYCTL.get(os.uname().machine),
            "seccomp": _SECCOMP.get(os.uname().machine),
            "limits": _limits(cfg, per_test_pids=bool(cgroup), memory_cgroup=bool(cgroup)),
        }
        return [
            *self.launcher,
            *before_drop,
            *drop,
            self.python,
            "-I",
            "-S",
            "-c",
            _HARNESS,
            marshal.dumps(settings, 4).hex(),
        ]

    def covered(self) -> list[str]:
        """Paths a candidate must not see, directories ending in / (listed afresh for every test):
        the entries of / but the system directories, the interpreter's own (as named, e.g. a
        virtualenv's, and as resolved) and symlinks; the world-writable directories that are not the
        test's own; the cgroup tree."""
        # e.g. opt
        keep = {self.python.split(os.sep)[1], os.path.realpath(self.python).split(os.sep)[1]}
        return (
            [
                entry.path + "/" * entry.is_dir(follow_symlinks=False)
                for entry in os.scandir("/")
                if entry.name not in _SYSTEM_DIRS | keep and not entry.is_symlink()
            ]
            + [path + "/" for path in _COVERED_WRITABLE if os.path.isdir(path)]
            + [path for path in _COVERED_SYSTEM if os.path.exists(path)]
        )

    def fstab(self, cfg: SandboxConfig, host_uid: int | None) -> bytes:
        # noqa: E731 (fstab(5))
        escape = lambda path: re.sub(r"[\s\\]", lambda m: "\\%03o" % ord(m.group()), path)
        lines = [
            f"sandbox-hide {escape(path[:-1])} tmpfs ro,size=4k,nosuid,nodev,noexec"
            if path.endswith("/")
            # nodev: cannot even be opened
            else f"/dev/null {escape(path)} none bind,ro,nosuid,nodev,noexec"
            for path in self.covered()
        ]
        # sources named sandbox-*: `mount -a` skips a mounted source
        uid = 0 if host_uid is None else host_uid
        lines += [
            f"sandbox-work /tmp tmpfs size={cfg.file_size_mb}m,nr_inodes={_TMPFS_INODES},mode=700,uid={uid},"
            f"gid={uid},nosuid,nodev",
            f"sandbox-shm /dev/shm tmpfs size={cfg.memory_mb}m,nr_inodes={_TMPFS_INODES},mode=1777,nosuid,nodev",
            f"sandbox-pts /dev/pts devpts newinstance,ptmxmode=0666,mode=0620,max={_PTYS},nosuid,noexec",
            "/dev/pts/ptmx /dev/ptmx none bind",
        ]
        return "".join(line + " 0 0\n" for line in lines).encode()


def _wall_timeout(cfg: SandboxConfig) -> float:
    return cfg.wall_timeout_s or 2 * cfg.timeout_s + 5


def _which(name: str) -> str | None:
    return shutil.which(
        name,
        path=os.pathsep.join(
            [os.environ.get("PATH", ""), "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        ),
    )


def _write(path: str, value) -> None:
    with open(path, "w") as file:
        file.write(str(value))


# In a plan's `drop`, the place of the test's host uid (leased per test from the plan's host_uids,
# else plan.uid).
_HOST_UID = "{host uid}"


def _make_plan(
    mode: str, python: str, cfg: SandboxConfig, cgroups: "_Cgroups | None", no_cgroup: str
) -> _Plan:
    """The plan of one mode: the commands that isolate a test (namespaces), then make it the
    candidate."""
    unshare = _which("unshare")
    setpriv = _which("setpriv")
    root = os.geteuid() == 0
    uid = cfg.uid
    host_uids, no_host_uids = _usable_host_uids(cfg) if root else (None, "the trainer is not root")
    drop = (
        (
            setpriv,
            "--reuid",
            _HOST_UID,
            "--regid",
            _HOST_UID,
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        )
        if root
        else ()
    )
    if mode == PLAIN:
        return _Plan(
            mode,
            python,
            uid if root else None,
            drop=drop,
            no_cgroup="plain mode",
            host_uids=host_uids,
            no_host_uids=no_host_uids,
        )
    own_user_namespace = mode != NAMESPACES_NO_USER_NAMESPACE
    # root: as the host uid, enter a user namespace of the test's own where it is `uid`,
    if mode == NAMESPACES:
        # forbid nested ones,
        drop += (
            unshare,
            "--user",
            f"--map-user={uid}",
            f"--map-group={uid}",
            "--keep-caps",
            "/bin/sh",
            "-c",
            _NO_NESTED_USER_NAMESPACES,
            "sandbox",
            setpriv,
            "--inh-caps=-all",
            "--bounding-set=-all",
        )  # then drop its capabilities
    # NAMESPACES_UNPRIVILEGED: we are root only inside it; drop its capabilities for good
    elif not root:
        uid = None
        drop = (
            (
                setpriv,
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
            )
            if setpriv
            else ()
        )
    launcher = (
        unshare,
        *(() if root else ("--user", "--map-root-user")),
        "--ipc",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--mount",
        "/bin/sh",
        "-c",
        _NS_SCRIPT,
        "sandbox",
    )
    return _Plan(
        mode,
        python,
        uid,
        launcher,
        drop,
        own_user_namespace,
        cgroups,
        no_cgroup,
        host_uids,
        no_host_uids,
    )


def _usable_host_uids(cfg: SandboxConfig) -> tuple[range | None, str]:
    """(the host uids tests may lease, "") or (None, why not): all mapped in this user namespace
    (uid and gid), and none a user or group of this machine. The default range sits above systemd's
    container uids (up to 1879048191) and below its foreign range (2147352576 and up)."""
    if cfg.uid_count <= 0:
        return None, "SandboxConfig.uid_count=0"
    uids = range(cfg.first_uid, cfg.first_uid + cfg.uid_count)
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/self/{name}") as file:
            spans = [tuple(map(int, line.split())) for line in file]  # (inside, outside, count)
        if not any(inside <= uids[0] and uids[-1] < inside + count for inside, _, count in spans):
            return (
                None,
                f"host uids {uids[0]}-{uids[-1]} are not all mapped here (/proc/self/{name})",
            )
    for path in ("/etc/passwd", "/etc/group"):
        try:
            with open(path) as file:
                entries = [line.split(":") for line in file]
        except OSError:
            continue
        for entry in entries:
            if len(entry) > 2 and entry[2].isdigit() and int(entry[2]) in uids:
                return (
                    None,
                    f"{path} has {entry[0]!r} (id {entry[2]}) among host uids {uids[0]}-{uids[-1]}",
                )
    return uids, ""


def _guarantees(plan: _Plan, cfg: SandboxConfig) -> tuple[list[str], list[str]]:
    """(what the plan enforces, what it does not): sandbox_info's report, feature by feature."""
    who = (
        "the trainer itself"
        if plan.uid is None
        else (
            "what an earlier test of its leased uid left if that test's trainer died"
            if plan.host_uids
            else "other candidates running as its uid"
        )
    )
    wall = _wall_timeout(cfg)
    enforced = [
        f"at most {_cores(cfg)} tests of this process run at once (all threads, all programs together)",
        f"time: {cfg.timeout_s:g} s of CPU time for all the test's processes together, and {wall:g} s of "
        "wall-clock time (a test waiting for its turn is not timed); rlimits per process: CPU time, file "
        "size, open files, no core files",
        "new session; the whole process group is SIGKILLed at exit and at a timeout",
        "the program is a file, solution.py, in a fresh working directory removed afterwards",
        "scrubbed environment (PATH, LANG, HOME and TMPDIR, one thread for BLAS/OpenMP)",
        "stdout+stderr size cap; outputs compared in the trainer with time and memory bounded by the "
        "expected output, never building per-token objects of the candidate's output",
        "candidates are the OOM killer's first choice (oom_score_adj 1000)",
    ]
    gaps = []
    if os.uname().machine in _KEYCTL:
        enforced.append("a fresh, empty session keyring (not the trainer's)")
    if os.uname().machine in _SECCOMP:
        enforced.append(
            "no file locks: flock() and fcntl() locks succeed without locking (seccomp), so they "
            "carry nothing between tests; no kernel AIO or io_uring (ENOSYS), whose budget is the "
            "machine's"
        )
    else:
        gaps.append(
            f"file locks (flock, fcntl) on shared files can carry bits between tests ({os.uname().machine}: "
            "no seccomp filter here)"
        )
    if plan.host_uids:
        enforced.append(
            f"runs with no capabilities (setpriv) as a host uid of its own among {plan.host_uids[0]}-"
            f"{plan.host_uids[-1]}, leased for the test (no other test running on this machine at the "
            "same time has it), so no budget the kernel keeps per uid is shared: descriptors in flight "
            "over unix sockets, pipe buffer pages, message-queue bytes, key quota, RLIMIT_NPROC"
            + (f"; uid {plan.uid} inside its user namespace" if plan.own_user_namespace else "")
        )
    elif plan.uid is not None:
        enforced.append(f"runs as uid {plan.uid} with no capabilities (setpriv)")
        gaps.append(
            f"every test runs as host uid {plan.uid} ({plan.no_host_uids}): the budgets the kernel keeps per "
            "uid are shared by tests running at once (descriptors in flight over unix sockets, pipe buffer "
            "pages, message-queue bytes, key quota), so a neighbour can make an honest test fail"
        )
    if plan.launcher:
        enforced += [
            "no network (new, empty network namespace)",
            "pid namespace: kill(-1) reaches only its own processes; none outlives the test's result (the "
            "namespace is torn down before the result is returned)",
            "IPC namespace: System V IPC and POSIX message queues are the test's own and die with it",
            f"mount namespace: the working directory is a fresh tmpfs on /tmp ({cfg.file_size_mb} MB, "
            f"{_TMPFS_INODES} files), with a writable /dev/shm of its own ({_TMPFS_INODES} files) and a "
            f"devpts of its own ({_PTYS} pseudo-terminals); covered (empty): "
            + " ".join(plan.covered()),
        ]
    else:
        escaped = (
            (
                "processes that setsid and double-fork escape its memory and CPU count until the test ends "
                "(then every process of its leased uid is killed)"
            )
            if plan.host_uids
            else (
                "processes that setsid and double-fork outlive the test (CPU-limited, not time-limited) and "
                "escape its memory and CPU count"
            )
        )
        gaps += [
            "network access",
            f"pid isolation: kill(-1) reaches {who}, and /proc/PID/fd their input and output pipes",
            "if the trainer dies mid-test, nothing kills a sleeping candidate",
            escaped,
            "files readable by the candidate's user (datasets, test files) stay readable",
            "world-writable directories (/tmp, /var/tmp, /dev/shm) and the host's "
            "pseudo-terminals are shared",
            f"System V IPC, POSIX message queues, keyrings and RLIMIT_NPROC "
            f"are shared with {who}, and IPC objects outlive the test",
        ]
    if plan.own_user_namespace:
        enforced.append(
            "a user namespace per test, in which nested user namespaces are forbidden: its keyrings "
            "and its process count (RLIMIT_NPROC, per user namespace since Linux 5.14) are its own"
        )
    elif plan.launcher:  # without a cgroup, RLIMIT_NPROC (per uid) bounds its processes
        nproc = (
            ("", "")
            if plan.cgroups
            else (" and RLIMIT_NPROC", ", and one can starve another of processes")
        )
        if not plan.host_uids:
            gaps.append(
                f"no user namespace per test: kernel keyrings{nproc[0]} are per uid, shared by all "
                f"candidates running as uid {plan.uid} at once: they can pass notes through their user "
                f"keyring{nproc[1]}"
            )
    # the candidate is the trainer's own user, mapped to root
    if plan.launcher and plan.uid is None:
        gaps.append(
            "the candidate has the trainer's real uid: it can kill the watchdog (not the trainer, outside "
            "its pid namespace), and RLIMIT_NPROC also counts the trainer's own processes"
        )
        if not plan.drop:
            gaps.append(
                "no setpriv: the candidate keeps its namespace capabilities and could unmount the covers"
            )
    if plan.launcher:
        enforced.append(
            "a watchdog inside the namespaces kills the candidate even if the trainer dies"
        )
    if plan.cgroups:
        enforced += plan.cgroups.guarantees(cfg)
        gaps += plan.cgroups.gaps()
        return enforced, gaps
    enforced.append(
        f"memory of the whole test, read every {_POLL_S * 1000:g} ms by a watchdog process in a session "
        f"of its own (nice {_WATCHDOG_NICE} where permitted, so a busy trainer does not delay the reads; "
        "the trainer reads it itself if that process cannot run): the proportional set size of all "
        "its processes (shared and copy-on-write pages counted once), memfd files they hold and, in "
        f"namespaces, its /tmp and /dev/shm; the test is killed above {cfg.memory_mb} MB; System V "
        f"shared memory is capped at a quarter of that; each process's address space at "
        f"{2 * cfg.memory_mb + 1024} MB"
    )
    gaps.insert(
        0,
        f"no cgroup per test ({plan.no_cgroup}): memory and CPU time are read from /proc every "
        f"{_POLL_S * 1000:g} ms, so a test can overshoot by what it allocates between two reads; pipe and "
        "socket buffers are not counted; no CPU fairness: a test that spreads over many sessions (setsid) "
        "gets more CPU than its neighbours",
    )
    return enforced, gaps


# ----------------------------------------------------------------------------- code: cgroups


@dataclass(frozen=True)
class _Cgroups:
    """Where this process may create cgroups: version 2 (one directory, every controller in it) or
    version 1 (one directory per hierarchy). Under each, the process gets a parent cgroup of its own
    (its CPU quota: `cores`), and each test a child of it: memory (all its processes together, no
    swap), pids, and an equal CPU share."""

    # fmt: off
    version: int
    hierarchies: tuple  # ((directory, controllers), ...): this process's own cgroup in each hierarchy
    # fmt: on

    def directories(self) -> list[str]:
        return [directory for directory, _ in self.hierarchies]

    def has(self, controller: str) -> bool:
        return any(controller in controllers for _, controllers in self.hierarchies)

    def guarantees(self, cfg: SandboxConfig) -> list[str]:
        where = " ".join(self.directories())
        if self.version == 2:
            memory = f"memory.max {cfg.memory_mb} MB, memory.swap.max 0"
        else:
            memory = f"memory.limit_in_bytes {cfg.memory_mb} MB" + (
                " (and memsw: no swap)" if self._memsw() else ""
            )
        said = [
            f"cgroup v{self.version} per test, under {where}: {memory} for all its processes together (anonymous, "
            f"shared, tmpfs and kernel memory, copy-on-write pages once), pids.max {cfg.processes}; removed, with "
            "nothing left in it, before the result is returned"
        ]
        if self.has("cpu"):
            said.append(
                f"CPU: each running test's cgroup has an equal share, whatever sessions its processes start; "
                f"all of them together weigh as {_cores(cfg)} processes against the rest of the machine and "
                f"use at most {_cores(cfg)} cores (a parent cgroup's shares and quota)"
            )
        return said

    def gaps(self) -> list[str]:
        return (
            []
            if self.has("cpu")
            else [
                "no cpu controller for the tests' cgroups: a test that spreads over many "
                "sessions (setsid) gets more CPU than its neighbours"
            ]
        )

    def _memsw(self) -> bool:
        return any(
            os.path.exists(os.path.join(directory, "memory.memsw.limit_in_bytes"))
            for directory, controllers in self.hierarchies
            if "memory" in controllers
        )


def _find_cgroups(setting: str) -> tuple[_Cgroups | None, str]:
    """(where tests get cgroups, "") or (None, why there is none). "auto": cgroup v2 if this
    process's cgroup enables memory and pids for its children (true of a root cgroup, rarely of
    others: a cgroup holding processes cannot enable them), else cgroup v1 if its memory and pids
    hierarchies are mounted and this process may create cgroups in its own cgroup there; a directory
    given by name is a cgroup v2 that gets the controllers enabled (it must hold no processes)."""
    if setting == "off":
        return None, "cgroup='off'"
    try:
        with open("/proc/self/mountinfo") as file:
            mounts = [line.split(" - ") for line in file]
        with open("/proc/self/cgroup") as file:
            own = dict(line.rstrip("\n").split(":", 2)[1:] for line in file)  # controllers -> path
    except OSError as error:
        return None, f"cannot read this process's cgroups: {error}"
    v2 = setting
    if setting == "auto":
        v2_mounts = [head.split()[4] for head, tail in mounts if tail.startswith("cgroup2 ")]
        v2 = (
            os.path.normpath(os.path.join(v2_mounts[0], own.get("", "/").lstrip("/")))
            if v2_mounts
            else ""
        )
    why = []
    if v2:
        try:
            with open(os.path.join(v2, "cgroup.subtree_control")) as file:
                enabled = file.read().split()
            missing = sorted({"memory", "pids"} - set(enabled))
            if missing and setting == "auto":
                with open(os.path.join(v2, "cgroup.controllers")) as file:
                    available = file.read().split()
                raise OSError(
                    f"does not enable {' and '.join(missing)} for child cgroups (available there: "
                    f"{' '.join(available) or 'none'})"
                )
            if missing:
                _write(
                    os.path.join(v2, "cgroup.subtree_control"),
                    " ".join("+" + name for name in missing),
                )
            os.rmdir(tempfile.mkdtemp(prefix="probe-", dir=v2))  # may we create cgroups there?
            with open(os.path.join(v2, "cgroup.subtree_control")) as file:
                controllers = tuple(
                    name for name in ("memory", "pids", "cpu") if name in file.read().split()
                )
            if re.search(r"\s", v2):
                # the namespace's init splits the test's paths on it
                raise OSError("whitespace in its path")
            return _Cgroups(2, ((v2, controllers),)), ""
        except OSError as error:
            if setting != "auto":
                raise RuntimeError(
                    f"SandboxConfig.cgroup={setting!r} cannot hold one cgroup per test: {error}"
                ) from None
            why.append(f"cgroup v2 {v2}: {error}")
    hierarchies = []
    # cgroup v1: one mount per hierarchy, its controllers in the super options
    for head, tail in mounts:
        if not tail.startswith("cgroup "):
            continue
        controllers = tuple(
            name
            for name in tail.split()[-1].split(",")
            if name in ("memory", "pids", "cpu", "cpuacct")
        )
        path = next(
            (path for names, path in own.items() if set(controllers) <= set(names.split(","))), None
        )
        # the path is relative to the hierarchy's root, the mount's is `root`
        if controllers and path is not None:
            root, mount_point = head.split()[3:5]
            hierarchies.append(
                (os.path.normpath(mount_point + "/" + os.path.relpath(path, root)), controllers)
            )
    found = _Cgroups(1, tuple(hierarchies))
    if not (found.has("memory") and found.has("pids")):
        return None, "; ".join(why + ["no cgroup v1 memory and pids hierarchies"])
    try:
        for directory in found.directories():
            if re.search(r"\s", directory):
                raise OSError(f"whitespace in the path {directory!r}")
            os.rmdir(tempfile.mkdtemp(prefix="probe-", dir=directory))
    except OSError as error:
        return None, "; ".join(why + [f"cgroup v1: {error}"])
    return found, ""


class _ProcessCgroups:
    """This process's parent cgroups for its tests (one per hierarchy), made on first use and
    removed at exit; made afresh in a forked child. Their CPU quota holds all tests of the process
    to `cores` cores.

    A trainer that is killed leaves its parents behind, and the next one must tell a dead trainer's
    from a living one's whatever pid namespace each ran in (a container's trainer is pid 1 of its
    own: its pid means nothing elsewhere). So each parent holds a child cgroup `alive` with a
    sentinel in it, a small process that exits when its trainer does (at the end of a pipe only the
    trainer holds). The kernel removes only an empty cgroup: removing `alive` succeeds exactly when
    the sentinel, and so its trainer, is gone, and that rmdir both tests and claims a stale parent
    (_remove_stale_parents, at first use and at exit)."""

    def __init__(self):
        self.parents: dict[tuple, list[str]] = {}
        self.lock = threading.Lock()
        self.sentinel: subprocess.Popen | None = None
        self.owner = os.getpid()  # the process that started the sentinel
        atexit.register(self.remove)

    def get(self, cgroups: _Cgroups, cores: int) -> list[str]:
        key = (os.getpid(), cgroups)
        with self.lock:
            made = self.parents.get(key)
            if not made or not all(map(os.path.isdir, made)) or not self._sentinel_running():
                self.parents[key] = [
                    self._make(cgroups, directory, controllers, cores)
                    for directory, controllers in cgroups.hierarchies
                ]
            return self.parents[key]

    def _make(self, cgroups: _Cgroups, directory: str, controllers: tuple, cores: int) -> str:
        _remove_stale_parents(directory)
        path = os.path.join(
            directory, f"reward-{os.stat('/proc/self/ns/pid').st_ino}-{os.getpid()}"
        )
        for attempt in range(3):
            try:
                os.makedirs(path, exist_ok=True)
                self._limit(cgroups, path, controllers, cores)
                os.makedirs(os.path.join(path, "alive"), exist_ok=True)
                _write(os.path.join(path, "alive", "cgroup.procs"), self._sentinel().pid)
                return path
            except FileNotFoundError:
                # another trainer's cleaning took it between two steps, three times
                if attempt == 2:
                    raise
        return path

    @staticmethod
    def _limit(cgroups: _Cgroups, path: str, controllers: tuple, cores: int):
        # CPU: the tests together weigh as `cores` busy processes against the rest of the machine
        # (each of which weighs one), and use at most `cores` cores
        if cgroups.version == 2:
            _write(
                os.path.join(path, "cgroup.subtree_control"),
                " ".join("+" + name for name in controllers),
            )
            if "cpu" in controllers:
                _write(os.path.join(path, "cpu.weight"), min(10_000, 100 * cores))
                _write(os.path.join(path, "cpu.max"), f"{cores * 100_000} 100000")
        elif "cpu" in controllers:
            _write(os.path.join(path, "cpu.shares"), 1024 * cores)
            _write(os.path.join(path, "cpu.cfs_period_us"), 100_000)
            _write(os.path.join(path, "cpu.cfs_quota_us"), cores * 100_000)

    def _sentinel_running(self) -> bool:
        return (
            self.sentinel is not None and self.owner == os.getpid() and self.sentinel.poll() is None
        )

    def _sentinel(self) -> subprocess.Popen:
        """The sentinel: `sh` waiting to read a line from a pipe whose writing end only this process
        holds (a forked child closes its copy), so it exits when this process does; in a session of
        its own, so a Ctrl-C to the trainer's terminal does not end it while the trainer lives
        on."""
        if not self._sentinel_running():
            self.sentinel = subprocess.Popen(
                ["/bin/sh", "-c", "read -r line  # sandbox cgroup sentinel"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.owner = os.getpid()
        return self.sentinel

    def after_fork_in_child(self):
        """A forked child gets a fresh lock and closes its copy of the sentinel's pipe: the parent's
        sentinel must end with the parent. The child makes parents (and a sentinel) of its own."""
        self.lock = threading.Lock()
        sentinel, self.sentinel = self.sentinel, None
        if sentinel is not None:
            with contextlib.suppress(OSError):
                sentinel.stdin.close()

    def remove(self):
        with self.lock:
            mine = [paths for (pid, _), paths in self.parents.items() if pid == os.getpid()]
            self.parents.clear()
            if self._sentinel_running():
                self.sentinel.stdin.close()
                self.sentinel.wait()
            for path in (path for paths in mine for path in paths):
                _remove_empty_cgroups([os.path.join(path, "alive"), path])
                _remove_stale_parents(os.path.dirname(path))


def _remove_stale_parents(directory: str):
    """Remove the parents of dead trainers under `directory`, and their test cgroups (see
    _ProcessCgroups). A test cgroup that still holds processes (a test's pid namespace that is being
    torn down) is left to the next sweep."""
    for entry in os.scandir(directory):
        if (
            entry.name.startswith("reward-")
            and entry.is_dir(follow_symlinks=False)
            and not _trainer_alive(entry.path, entry.name)
        ):
            tests = [
                child.path
                for child in os.scandir(entry.path)
                if child.is_dir(follow_symlinks=False)
            ]
            _remove_empty_cgroups(tests + [entry.path])


def _trainer_alive(path: str, name: str) -> bool:
    """Is the trainer that made parent cgroup `path` alive? Its `alive` cgroup cannot be removed
    while its sentinel is in it. Without one (a trainer that died while making it, or made by an
    earlier version), only a trainer of our own pid namespace whose pid (the name's last part) still
    runs counts as alive."""
    try:
        os.rmdir(os.path.join(path, "alive"))
        return False  # it was empty: the sentinel, and so its trainer, is gone
    except FileNotFoundError:
        namespace, _, pid = name[len("reward-") :].partition("-")
        ours = namespace == str(os.stat("/proc/self/ns/pid").st_ino)
        return ours and pid.isdigit() and os.path.exists(f"/proc/{pid}")
    except OSError:
        return True  # busy: the sentinel is in it


def _remove_empty_cgroups(paths: list[str]):
    """rmdir each of `paths` that is empty, in order (the others, still holding processes, stay)."""
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            pass


_PROCESS_CGROUPS = _ProcessCgroups()
_TEST_NUMBERS = itertools.count()


class _TestCgroup:
    """The cgroups of one test (one per hierarchy): made with its limits, read while it runs,
    removed after."""

    def __init__(self, cgroups: _Cgroups, cfg: SandboxConfig):
        # memory, cpu: directories
        self.version = cgroups.version
        self.paths = []
        self.memory = ""
        self.cpu = ""
        self.name = f"test-{os.getpid()}-{next(_TEST_NUMBERS)}"  # the same in every hierarchy
        try:
            for parent, (_, controllers) in zip(
                _PROCESS_CGROUPS.get(cgroups, _cores(cfg)), cgroups.hierarchies
            ):
                path = os.path.join(parent, self.name)
                os.mkdir(path)
                self.paths.append(path)
                self._limit(path, controllers, cfg)
                if "memory" in controllers:
                    self.memory = path
                if "cpuacct" in controllers or self.version == 2:
                    self.cpu = path
        except OSError:
            self.remove()
            raise

    def _limit(self, path: str, controllers: tuple, cfg: SandboxConfig):
        # noqa: E731
        memory = cfg.memory_mb << 20
        exists = lambda name: os.path.exists(os.path.join(path, name))
        if self.version == 2:
            settings = [
                ("memory.max", memory),
                ("pids.max", cfg.processes),
                ("memory.swap.max", 0),
                ("memory.oom.group", 1),
            ]  # the last two: absent without swap accounting
        else:
            settings = [
                ("memory.limit_in_bytes", memory),
                ("memory.memsw.limit_in_bytes", memory),
                ("pids.max", cfg.processes),
            ]  # memsw: absent without swap accounting
        for name, value in settings:
            if exists(name):
                _write(os.path.join(path, name), value)

    def cpu_seconds(self) -> float | None:
        """CPU time of all the test's processes so far, or None without a CPU-accounting cgroup."""
        if not self.cpu:
            return None
        if self.version == 1:
            with open(os.path.join(self.cpu, "cpuacct.usage")) as file:
                return int(file.read()) / 1e9
        with open(os.path.join(self.cpu, "cpu.stat")) as file:
            return int(dict(line.split() for line in file)["usage_usec"]) / 1e6

    def oom_killed(self) -> bool:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with open(os.path.join(self.memory, name)) as file:
            return int(dict(line.split() for line in file).get("oom_kill", 0)) > 0

    def remove(self) -> bool:
        """Remove the test's cgroups once nothing is left in them; -> whether its memory limit
        killed something."""
        killed = bool(self.memory) and self.oom_killed()
        deadline = time.monotonic() + _TEARDOWN_S
        for path in reversed(self.paths):
            while os.path.exists(path):
                try:
                    os.rmdir(path)
                except OSError:  # still populated: the pid namespace is being torn down
                    if time.monotonic() > deadline:
                        print(
                            f"reward.py: WARNING: cgroup {path} still holds processes; left in place",
                            file=sys.stderr,
                        )
                        break
                    if os.path.exists(os.path.join(path, "cgroup.kill")):  # v2, Linux >= 5.14
                        _write(os.path.join(path, "cgroup.kill"), 1)
                    time.sleep(0.002)
        return killed


# --------------------------------------------------------------------------- code: running one test


def _run_one_test(plan: _Plan, cfg: SandboxConfig, program: str, test: dict) -> TestResult:
    """Run one test of one program in a fresh sandbox (and cgroups), when the process-wide budget
    has a slot for it, and judge it here, in the parent."""
    with _SLOTS.take(_cores(cfg)), _host_uid(plan) as host_uid:
        cgroup = _TestCgroup(plan.cgroups, cfg) if plan.cgroups else None
        try:
            returncode, out, err, status = _run_in_sandbox(
                plan, cfg, program, test, cgroup, host_uid
            )
        finally:
            memory_killed = cgroup.remove() if cgroup else False
    if status == "memory" or memory_killed:
        return TestResult(
            False, f"memory limit: the test's processes held more than {cfg.memory_mb} MB together"
        )
    if status == "timeout":
        return TestResult(False, f"timeout: more than {cfg.timeout_s:g}s of CPU time")
    if status == "wall timeout":
        return TestResult(False, f"timeout: more than {_wall_timeout(cfg):g}s of wall-clock time")
    if status == "overflow":
        return TestResult(False, f"output limit exceeded ({cfg.output_mb:g} MB)")
    if returncode is None:
        return TestResult(False, status)
    if returncode != 0:
        return TestResult(False, _crash_reason(returncode, bool(plan.launcher), err))
    expected = test["output"]
    if not out.isascii() and len(out) > 4 * len(expected.encode()) + (64 << 10):
        # Decoded, one character beyond U+FFFF makes Python store every character in 4 bytes (4x the
        # output). A match is the expected text up to white space and number formatting: judged
        # wrong without decoding it.
        return TestResult(
            False,
            f"wrong answer: {len(out)} bytes of non-ASCII output, "
            f"{len(expected.encode())} expected",
        )
    got = out.decode("utf-8", "replace")
    # judged from `got` alone: the raw bytes would double the memory a long output costs
    del out, err
    mismatch = (
        functional_mismatch(got, expected)
        if test.get("fn_name")
        else stdout_mismatch(got, expected)
    )
    return TestResult(mismatch is None, mismatch or "passed")


class _TestSlots:
    """The process-wide budget: at most `cores` tests run at once, whichever thread and program they
    belong to (an RL loop scores many responses on many threads, each running its tests on threads
    of its own). A test waiting for a slot is not timed."""

    def __init__(self):
        self.busy = 0
        self.changed = threading.Condition()

    @contextlib.contextmanager
    def take(self, cores: int):
        with self.changed:
            self.changed.wait_for(lambda: self.busy < cores)
            self.busy += 1
        try:
            yield
        finally:
            with self.changed:
                self.busy -= 1
                self.changed.notify_all()


_SLOTS = _TestSlots()


@contextlib.contextmanager
def _host_uid(plan: _Plan):
    """The host uid a test runs as: leased from plan.host_uids for the test's duration, else
    plan.uid (None: the trainer's own, not root)."""
    if not plan.host_uids:
        yield plan.uid
        return
    lease, uid = _UID_LEASES.take(plan.host_uids)
    plain = not plan.launcher
    try:
        # marked: a plain-mode test of this uid ended without its sweep (its trainer died)
        if os.pread(lease, 1, 0):
            _kill_every_process_of(uid)
            os.ftruncate(lease, 0)
        # no pid namespace: what it leaves behind (setsid, double fork) is killed when it ends
        if plain:
            os.pwrite(lease, b"plain", 0)
        yield uid
    finally:
        try:
            if plain:
                _kill_every_process_of(uid)
                os.ftruncate(lease, 0)
        finally:
            _UID_LEASES.release(lease)


def _kill_every_process_of(uid: int):
    """SIGKILL every process of host uid `uid` in this pid namespace and those below it: kill(-1)
    sent by a process of that uid, which reaches exactly its uid's processes. The uids of the range
    belong to the sandbox alone."""
    subprocess.run(
        [
            _which("setpriv"),
            "--reuid",
            str(uid),
            "--regid",
            str(uid),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "/bin/sh",
            "-c",
            "kill -KILL -1",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class _UidLeases:
    """Host uids for tests, one per test running on this machine at once, whichever trainer process
    runs it: a uid is leased by holding an exclusive flock on its file in a directory only root may
    enter, so the kernel releases it when the test ends or its trainer dies. Each process goes round
    the range from a random place (not always to the lowest free uid), so what a test leaves in a
    per-uid budget until the kernel collects it (keys, descriptors of a dying namespace) meets no
    test soon after. A plain-mode test (no pid namespace to end its processes) marks its lease file,
    and every process of its uid is killed when it ends, or at the next lease of that uid if its
    trainer died first (_host_uid). Trainers that do not share /run (or the temporary directory) but
    do share host uids, such as containers without user namespaces, need ranges of their own
    (SandboxConfig.first_uid)."""

    def __init__(self):
        self.lock = threading.Lock()
        # where the next search starts (mod the range's size)
        self.next = int.from_bytes(os.urandom(4), "little")
        self.directory = ""
        self.held: set[int] = set()  # the descriptors of the leases this process holds

    def release(self, lease: int):
        with self.lock:
            self.held.discard(lease)
        os.close(lease)  # releases the lock

    def after_fork_in_child(self):
        """A forked child closes its copies of the parent's leases: an flock lives as long as any
        copy of its descriptor, so a child that outlived the test would keep its uid leased."""
        self.lock = threading.Lock()
        for lease in self.held:
            with contextlib.suppress(OSError):
                os.close(lease)
        self.held = set()

    def take(self, uids: range) -> tuple[int, int]:
        """-> (the lock's descriptor: close it to release the uid, the uid); waits while every uid
        is leased."""
        directory = self._directory()
        while True:
            with self.lock:
                start = self.next
            for offset in range(len(uids)):
                index = (start + offset) % len(uids)
                path = os.path.join(directory, str(uids[index]))
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                with self.lock:
                    self.next = index + 1
                    self.held.add(fd)
                return fd, uids[index]
            # more tests at once on this machine than uids in the range: wait for one
            time.sleep(0.01)

    def _directory(self) -> str:
        with self.lock:
            if not self.directory:
                parent = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
                directory = os.path.join(parent, "sandbox-uids")
                os.makedirs(directory, mode=0o700, exist_ok=True)
                info = os.lstat(directory)
                if (
                    not stat.S_ISDIR(info.st_mode)
                    or info.st_uid != os.geteuid()
                    or info.st_mode & 0o077
                ):
                    raise RuntimeError(
                        f"sandbox: {directory} must be a directory of uid {os.geteuid()} that no one "
                        "else may enter (the host uids' leases are taken there); remove it"
                    )
                self.directory = directory
            return self.directory


_UID_LEASES = _UidLeases()


def _run_in_sandbox(
    plan: _Plan,
    cfg: SandboxConfig,
    program: str,
    test: dict,
    cgroup: "_TestCgroup | None",
    host_uid: int | None,
):
    """Run one test in a fresh sandbox as `host_uid` (None: the trainer's own uid); -> (returncode,
    stdout, stderr, status) as _communicate's, or (None, b"", b"", "sandbox could not start:
    ...")."""
    # namespaces: a tmpfs on /tmp
    workdir = "" if plan.launcher else tempfile.mkdtemp(prefix="reward-sandbox-")
    env = dict(_CANDIDATE_ENV, HOME=workdir or "/tmp", TMPDIR=workdir or "/tmp")
    # The test's stdout and stderr are pipes of our own, given to the candidate's user: a program
    # may reopen them by path ('/dev/stdout', '/proc/self/fd/1'), and the kernel then checks the
    # pipe's owner and mode (0600), which would refuse a root-owned pipe to the dropped user. Its
    # stdin is a file holding the whole input (_input_file).
    stdin = _input_file(test["input"].encode("utf-8", "replace"))
    pipes = [os.pipe() for _ in range(2)]  # (read, write) of stdout, stderr
    (out_read, out_write), (err_read, err_write) = pipes
    ours = [stdin, out_read, err_read]
    theirs = [out_write, err_write]
    cgroup_dirs = []
    try:
        if host_uid is not None:
            for read_end, _ in pipes:
                # a pipe is one inode: both ends change owner
                os.fchown(read_end, host_uid, host_uid)
        # Program, input and fstab are passed as open descriptors of unlinked files: no argv size
        # limit, nothing on disk to go stale, readable by the dropped user only through the
        # descriptor.
        with tempfile.TemporaryFile() as source, tempfile.TemporaryFile() as fstab:
            if workdir and host_uid is not None:
                os.chown(workdir, host_uid, host_uid)
            source.write(program.encode("utf-8", "replace"))
            source.flush()
            if plan.launcher:
                fstab.write(plan.fstab(cfg, host_uid))
                fstab.flush()
            # the test's cgroup directories, which its namespace's init joins it to after the tree
            # is covered
            cgroup_dirs = [
                os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                for path in (cgroup.paths if cgroup else [])
            ]
            fds = {
                "program": source.fileno(),
                "input": stdin,
                "fstab": fstab.fileno(),
                "cgroups": cgroup_dirs,
            }
            try:
                proc = subprocess.Popen(
                    plan.argv(cfg, fds, cgroup, test.get("fn_name") or "", host_uid),
                    stdin=subprocess.DEVNULL,
                    stdout=out_write,
                    stderr=err_write,
                    cwd=workdir or "/",
                    env=env,
                    start_new_session=True,
                    pass_fds=(source.fileno(), stdin, fstab.fileno(), *cgroup_dirs),
                )
            except OSError as error:
                return None, b"", b"", f"sandbox could not start: {error}"
            # the candidate holds them now; its pipes close when its last process exits
            for fd in theirs + cgroup_dirs:
                os.close(fd)
            theirs = []
            cgroup_dirs = []
            watcher = None
            try:
                # without a memory cgroup, the watchdog process reads the test's memory (and kills
                # it above the limit); watcher is the one that accepted this test, None if none did
                watcher = (
                    None
                    if cgroup
                    else _WATCHDOG.watch(proc.pid, cfg.memory_mb << 20, bool(plan.launcher))
                )
                out, err, status = _communicate(
                    proc,
                    out_read,
                    err_read,
                    cfg,
                    _Meter(proc, cfg, cgroup, bool(plan.launcher), watcher),
                )
            finally:
                try:
                    # forgotten before _stop reaps the launcher: in plain mode its pid cannot be
                    # reused while it is watched
                    if watcher is not None and _WATCHDOG.forget(proc.pid, watcher):
                        status = "memory"
                finally:
                    _stop(proc, bool(plan.launcher))
    finally:
        for fd in ours + theirs + cgroup_dirs:
            os.close(fd)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return proc.returncode, out, err, status


def _input_file(data: bytes) -> int:
    """A descriptor of a file holding `data`, the test's stdin, as judges give it:
    os.fstat(0).st_size is its size and one os.read(0, n) reads up to n bytes (from a pipe fed in
    chunks, both read only a part). Nothing can write it, through this descriptor or by reopening
    /proc/self/fd/0: a memfd sealed against writing, growing and shrinking (a file the candidate
    could write would let it reserve the trainer's disk with fallocate, past RLIMIT_FSIZE, and
    signal its neighbours through the free space). Without memfd: a root-owned 0444 file,
    read-only."""
    try:
        fd = os.memfd_create("sandbox-stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        with tempfile.TemporaryFile() as file:
            file.write(data)
            file.flush()
            os.fchmod(file.fileno(), 0o444)
            return os.open(f"/proc/self/fd/{file.fileno()}", os.O_RDONLY | os.O_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    fcntl.fcntl(
        fd,
        fcntl.F_ADD_SEALS,
        fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL,
    )
    return fd


class _Meter:
    """What a running test has used: CPU time of all its processes (its cgroup's, or summed from
    /proc), and without cgroups its memory (_test_memory) unless the watchdog process that accepted
    this test (watcher) is still the one running: a replacement started for another test does not
    know this one. over() says which limit it passed, if any."""

    def __init__(
        self,
        proc: subprocess.Popen,
        cfg: SandboxConfig,
        cgroup: "_TestCgroup | None",
        isolated: bool,
        watcher: "subprocess.Popen | None" = None,
    ):
        self.proc = proc
        self.cfg = cfg
        self.cgroup = cgroup
        self.isolated = isolated
        self.watcher = watcher

    def over(self) -> str | None:
        # the kernel counts its memory, and its CPU time where there is a cpuacct (or v2) cgroup
        if self.cgroup:
            if self.cgroup.oom_killed():
                return "memory"
            cpu = self.cgroup.cpu_seconds()
            cpu = _tree_usage(self.proc.pid)[0] if cpu is None else cpu
            return "timeout" if cpu > self.cfg.timeout_s else None
        if _WATCHDOG.serves(self.watcher):  # it reads the memory; the CPU time is read here
            return (
                "timeout"
                if _tree_usage(self.proc.pid, memory=False)[0] > self.cfg.timeout_s
                else None
            )
        cpu, memory = _tree_usage(self.proc.pid)
        if self.isolated:
            memory += sum(map(_tmpfs_usage, _children(self.proc.pid)))
        if cpu > self.cfg.timeout_s:
            return "timeout"
        return "memory" if memory > self.cfg.memory_mb << 20 else None


def _communicate(
    proc: subprocess.Popen, stdout_fd: int, stderr_fd: int, cfg: SandboxConfig, meter: _Meter
):
    """Read stdout_fd/stderr_fd up to cfg.output_mb in all, and check every 20 ms that the test is
    within its CPU time and memory; -> (stdout, stderr, status), the outputs as the bytearrays they
    were read into (no copy), status in "exited", "timeout", "wall timeout", "overflow", "memory".
    Never waits past the wall-clock deadline."""
    deadline = time.monotonic() + _wall_timeout(cfg)
    next_check = time.monotonic() + _POLL_S
    cap = int(cfg.output_mb * 2**20)
    stdout = bytearray()
    stderr = bytearray()
    output = {stdout_fd: stdout, stderr_fd: stderr}
    exited = False
    with selectors.DefaultSelector() as selector:
        for fd in output:
            selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return stdout, stderr, "wall timeout"
            if now >= next_check and not exited:
                next_check = now + _POLL_S
                if over := meter.over():
                    return stdout, stderr, over
            if not selector.get_map():  # all pipes closed: wait for the exit itself
                if exited:
                    break
                time.sleep(min(deadline - now, 0.002))
                exited = _has_exited(proc)
                continue
            # after the exit, only drain what is already there (an escaped child may hold the pipes)
            events = selector.select(0 if exited else min(deadline - now, _POLL_S))
            if exited and not events:
                break
            for key, _ in events:
                if chunk := os.read(key.fd, 1 << 16):
                    output[key.fd] += chunk
                    if len(stdout) + len(stderr) > cap:
                        return stdout, stderr, "overflow"
                else:
                    selector.unregister(key.fd)
            exited = exited or _has_exited(proc)
    return stdout, stderr, "exited"


def _stop(proc: subprocess.Popen, isolated: bool):
    """Kill what is left of a test and wait until none of its processes is left. Namespaces: the pid
    namespace dies with its init, and the launcher exits only once the kernel has reaped the whole
    namespace (killing the launcher first would return while the namespace is still dying)."""
    _kill_test(proc.pid, isolated)
    if isolated:
        try:
            proc.wait(timeout=_TEARDOWN_S)
        except subprocess.TimeoutExpired:
            pass
        _kill_test(proc.pid, False)  # what is left of the launcher
    proc.wait()


def _kill_test(pid: int, isolated: bool):
    """SIGKILL a test started as process `pid`: in namespaces its pid namespace's init (the kernel
    then kills the whole namespace), otherwise its process group (the session it started)."""
    if isolated:
        for init in _children(pid):
            try:
                os.kill(init, signal.SIGKILL)
            except OSError:
                pass
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _crash_reason(returncode: int, via_shell: bool, stderr) -> str:
    """Why a test crashed: the signal that killed it, or its exit status and the end of the last
    line of its stderr. Only the tail of stderr is looked at, so judging a crash costs no more than
    the output read (up to output_mb)."""
    signum = (
        -returncode if returncode < 0 else returncode - 128 if via_shell and returncode > 128 else 0
    )
    if signum:
        hints = {
            signal.SIGKILL: "memory or process limit?",
            signal.SIGXCPU: "CPU time limit",
            signal.SIGXFSZ: "file size limit",
            signal.SIGSEGV: "crash, e.g. a stack overflow",
        }
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"killed by {name}" + (f" ({hints[signum]})" if signum in hints else "")
    return f"runtime error (exit status {returncode}): {_last_line(stderr)[-200:]}"


def _last_line(output, tail: int = 4096) -> str:
    """The last non-blank line of `output` (bytes), stripped, its last `tail` bytes at most: what
    decoding, stripping and splitting the whole output would give, without a copy or decode of it
    (trailing white space is skipped a block at a time, the line found by rfind)."""
    end = len(output)
    while end and not (block := bytes(output[max(0, end - tail) : end]).rstrip()):
        end = max(0, end - tail)  # a block of white space only
    if not end:
        return ""
    end = max(0, end - tail) + len(block)
    start = max(output.rfind(b"\n", 0, end) + 1, end - tail)
    return bytes(output[start:end]).decode("utf-8", "replace").strip()


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as file:
            return [int(child) for child in file.read().split()]
    except OSError:
        return []


def _has_exited(proc: subprocess.Popen) -> bool:
    """Exit check that does not reap, so the process group id cannot be reused before we kill it."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _test_memory(pid: int, isolated: bool) -> int:
    """Bytes a test started as process `pid` holds: _tree_usage's, plus in namespaces its /tmp and
    /dev/shm."""
    return _tree_usage(pid)[1] + (sum(map(_tmpfs_usage, _children(pid))) if isolated else 0)


def _stat_fields(pid: int) -> list[bytes]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): [state, ppid,
    ...]."""
    with open(f"/proc/{pid}/stat", "rb") as file:
        return file.read().rsplit(b")", 1)[1].split()


def _stopped(pid: int) -> bool:
    """Is process `pid` stopped (state T, or t: traced)? A process that is gone counts as
    stopped."""
    try:
        return _stat_fields(pid)[0] in (b"T", b"t")
    except (OSError, IndexError):
        return True


def _tree_usage(pid: int, memory: bool = True) -> tuple[float, int]:
    """(CPU seconds, memory bytes) of process `pid` and its descendants, from /proc: user + system
    time, with that of their reaped children; proportional set size (a page that n processes map
    counts 1/n to each, so shared and copy-on-write pages count once) plus the memfd files they hold
    open, each file once (0 if not `memory`)."""
    ticks = 0
    used = 0
    files = set()
    pending = [pid]
    while pending:
        pid = pending.pop()
        try:
            ticks += sum(map(int, _stat_fields(pid)[11:15]))  # utime stime cutime cstime
            if memory:
                with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
                    used += next(
                        (int(line.split()[1]) << 10 for line in file if line.startswith(b"Pss:")), 0
                    )
                for fd in os.scandir(f"/proc/{pid}/fd"):
                    if os.readlink(fd.path).startswith("/memfd:"):
                        stat = os.stat(fd.path)
                        if (stat.st_dev, stat.st_ino) not in files:
                            files.add((stat.st_dev, stat.st_ino))
                            used += stat.st_blocks * 512
            # a child is listed under the thread that forked it
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                    pending += map(int, file.read().split())
        except (OSError, ValueError) as error:
            if getattr(error, "errno", None) in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                # this reader cannot read (a candidate of its uid may lower its RLIMIT_NOFILE): not
                # a 0
                raise
            continue  # it exited meanwhile
    return ticks / _TICKS, used


def _tmpfs_usage(init: int) -> int:
    """Bytes held in the test's own /tmp and /dev/shm (seen through its pid namespace's init), once
    mounted."""
    used = 0
    for path in ("/tmp", "/dev/shm"):
        try:
            mine = os.stat(f"/proc/{init}/root{path}")
            # the test's tmpfs, not yet the trainer's directory
            if mine.st_dev != os.stat(path).st_dev:
                stat = os.statvfs(f"/proc/{init}/root{path}")
                used += (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        except OSError:
            pass
    return used


# ------------------------------------------------------------------------ code: the memory watchdog
# Without a memory cgroup nothing in the kernel bounds a test's processes together: their memory is
# read from /proc every _POLL_S and the test is killed above its limit. How much a test overshoots
# is what it allocates between two reads, so the reads must come on time even when the trainer is
# busy: its own threads (rollouts, the optimizer) and whatever else runs in its session share its
# CPU, and a thread of the trainer was measured to fall behind while a 10-process attack filled
# memory. The reads therefore run in a small process of their own: a session of its own (in the root
# cpu cgroup, the scheduler's autogroups share the CPU between sessions first; inside a cpu cgroup
# the nice value alone gives it the lead) at nice -10 where that is permitted. After each round of
# reads it writes the time (CLOCK_MONOTONIC, one clock for every process) into a small shared file,
# its heartbeat: a watchdog whose heartbeat is older than _WATCHDOG_STALE_S (hung, stopped or
# starved) no longer counts as reading anything.

_WATCHDOG_NICE = -10
# a watchdog that does not answer within this is killed and replaced by the trainer's reads
_WATCHDOG_REPLY_S = 10.0
# a heartbeat older than this (100 rounds of reads missed): the trainer reads the memory
_WATCHDOG_STALE_S = 2.0
# after a failed start, tests go without a watchdog this long before the next try
_WATCHDOG_RETRY_S = 5.0


def _watchdog_main(beat_fd: int):
    """The watchdog process (`python sandbox.py --memory-watchdog BEAT_FD`): reads requests on
    stdin, one line each, `watch PID LIMIT_BYTES ISOLATED` and `forget PID`, and answers each with
    one line (`ok`; for forget `1` if it killed that test, else `0`); every _POLL_S it reads the
    memory of each test it watches and sends SIGKILL to one above its limit (its process group, or
    its pid namespace's init; the trainer's _stop reaps it). Exits when stdin closes (the trainer is
    gone). After every read of a test's memory, and every round, it writes time.monotonic() to file
    BEAT_FD (8 bytes, a double, at offset 0): the trainer checks that heartbeat at each of its polls
    (_Watchdog.serves). A read that fails for want of descriptors or memory ends the watchdog (the
    trainer then reads), rather than counting that test as holding nothing."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, _WATCHDOG_NICE)
        with open("/proc/self/autogroup", "w") as file:  # the session's weight among sessions
            file.write(str(_WATCHDOG_NICE))
    except OSError:
        pass  # not permitted: it keeps nice 0, in a session of its own
    os.pwrite(beat_fd, struct.pack("d", time.monotonic()), 0)
    os.write(1, b"ready %d\n" % os.getpriority(os.PRIO_PROCESS, 0))
    # watched: pid -> [limit, isolated, killed]
    watched = {}
    pending = b""
    next_check = time.monotonic()
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        while True:
            if selector.select(max(0.0, next_check - time.monotonic())):
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    verb, pid, *rest = line.split()
                    if verb == b"watch":
                        watched[int(pid)] = [int(rest[0]), rest[1] == b"1", False]
                        os.write(1, b"ok\n")
                    else:
                        entry = watched.pop(int(pid), None)
                        os.write(1, b"1\n" if entry and entry[2] else b"0\n")
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + _POLL_S
                for pid, entry in watched.items():
                    if not entry[2] and _test_memory(pid, entry[1]) > entry[0]:
                        _kill_test(pid, entry[1])
                        entry[2] = True
                    # progress, so a long round is not stale
                    os.pwrite(beat_fd, struct.pack("d", time.monotonic()), 0)
                os.pwrite(beat_fd, struct.pack("d", time.monotonic()), 0)


class _Watchdog:
    """The trainer's side of the watchdog process, started at the first test without a memory cgroup
    (and again in a forked child, or after it died or its heartbeat went stale). watch() after a
    test starts -> the watchdog process that accepted it; forget() -> whether that one killed it,
    before the test is reaped. Where the process cannot start (then not again for _WATCHDOG_RETRY_S)
    or stops answering, watch() says None and the trainer reads the memory itself (_Meter), as it
    does for every test whose watchdog has died, been replaced, stopped or gone stale since
    (serves())."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc = None
        self.owner = None
        self.nice = None
        self.pending = b""
        self.retry_at = 0.0

    def after_fork_in_child(self):
        """The child of a fork starts a watchdog of its own: a lock another thread held at the fork
        is never released in the child, and the parent's pipes must not stay open in it (the
        parent's watchdog would not see its stdin close when the parent exits)."""
        self.lock = threading.Lock()
        proc, self.proc, self.pending, self.retry_at = self.proc, None, b"", 0.0
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()  # the child's copies only; the parent's watchdog keeps running

    def alive(self) -> bool:
        proc = self.proc
        return proc is not None and self.owner == os.getpid() and proc.poll() is None

    def serves(self, watcher: "subprocess.Popen | None") -> bool:
        """Is `watcher` (what watch() returned) still the running watchdog, so that it reads that
        test's memory? Not if it died, was replaced, is stopped (SIGSTOP: alive, but reading
        nothing) or its heartbeat is stale."""
        return (
            watcher is not None and watcher is self.proc and self.alive() and self.reading(watcher)
        )

    def reading(self, watcher: "subprocess.Popen") -> bool:
        """Not stopped, and its heartbeat fresh."""
        return not _stopped(watcher.pid) and self.beating(watcher)

    @staticmethod
    def beating(watcher: "subprocess.Popen") -> bool:
        """Did `watcher` read a test's memory or finish a round within the last _WATCHDOG_STALE_S?
        Its heartbeat is mapped into this process and the mapping stays with the Popen, so no
        descriptor can be closed or reused under a reader; a torn read can only look stale, and then
        the trainer reads, which is always safe."""
        last = struct.unpack_from("d", watcher.heartbeat, 0)[0]
        return 0.0 <= time.monotonic() - last < _WATCHDOG_STALE_S

    def watch(self, pid: int, limit: int, isolated: bool) -> "subprocess.Popen | None":
        with self.lock:
            if self.alive() and not self.reading(self.proc):
                # hung, starved or stopped: asking would block this test's checks for
                # _WATCHDOG_REPLY_S
                self._close()
            if not self.alive() and (time.monotonic() < self.retry_at or not self._start()):
                return None
            proc = self.proc
            return (
                proc if self._ask(b"watch %d %d %d\n" % (pid, limit, isolated)) == b"ok" else None
            )

    def forget(self, pid: int, watcher: "subprocess.Popen | None" = None) -> bool:
        """Whether the watchdog killed test `pid`; False if `watcher` (watch()'s answer, if given)
        is gone."""
        with self.lock:
            if watcher is not None and watcher is not self.proc:
                return False
            return self.alive() and self._ask(b"forget %d\n" % pid) == b"1"

    def _start(self) -> bool:
        """Start a watchdog; after a failure (here or in its first answer) no other try for
        _WATCHDOG_RETRY_S."""
        self._close()
        beat = None
        try:
            # close-on-exec: tests never see it
            beat = os.memfd_create("sandbox-watchdog-heartbeat")
            # a mapping needs the bytes to exist
            os.ftruncate(beat, mmap.PAGESIZE)
            heartbeat = mmap.mmap(beat, mmap.PAGESIZE, prot=mmap.PROT_READ)
            self.proc = subprocess.Popen(
                [*_watchdog_command(), str(beat)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(beat,),
            )
        except (OSError, ValueError, TypeError, AttributeError):
            # no usable interpreter path (an embedded Python: None), or no memfd_create (glibc <
            # 2.27)
            self.retry_at = time.monotonic() + _WATCHDOG_RETRY_S
            return False
        finally:
            if beat is not None:
                os.close(beat)  # the mapping, and the watchdog's copy, keep the file
        self.proc.heartbeat = heartbeat
        self.owner = os.getpid()
        self.pending = b""
        ready = self._reply()
        if not ready.startswith(b"ready "):
            self._close()
            # counted from the failure: a hung start too
            self.retry_at = time.monotonic() + _WATCHDOG_RETRY_S
            return False
        self.nice = int(ready.split()[1])
        self.retry_at = 0.0
        return True

    def _ask(self, request: bytes) -> bytes:
        try:
            os.write(self.proc.stdin.fileno(), request)
        except OSError:
            self._close()
            return b""
        try:
            return self._reply()
        # interrupted mid-reply (Ctrl-C): an unread answer would pair with the next request
        except BaseException:
            self._close()
            raise

    def _reply(self) -> bytes:
        """One line from the watchdog, or b"" (and the watchdog closed) if it ends or does not
        answer in time."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + _WATCHDOG_REPLY_S
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                left = deadline - time.monotonic()
                chunk = os.read(fd, 4096) if left > 0 and selector.select(left) else b""
                if not chunk:
                    self._close()
                    return b""
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def _close(self):
        proc, self.proc = self.proc, None
        if proc is None or self.owner != os.getpid():
            return  # a forked child leaves its parent's watchdog alone
        proc.kill()
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def _watchdog_command() -> list[str]:
    """The watchdog's command line, before the heartbeat's file descriptor."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), "--memory-watchdog"]


_WATCHDOG = _Watchdog()
atexit.register(_WATCHDOG._close)


def _after_fork_in_child():
    """A forked child has only the thread that forked: every lock another thread held stays held in
    it, and the slots of the parent's running tests stay taken. Fresh ones; the probed plans stay
    (the machine is the same)."""
    _PLANS.lock = threading.Lock()
    _PROCESS_CGROUPS.after_fork_in_child()
    _UID_LEASES.after_fork_in_child()
    _SLOTS.__init__()
    _WATCHDOG.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


# -------------------------------------------------------------------------- code: comparing outputs
# Outputs are judged here, in the trainer, so the cost of judging is bounded by the expected output
# (the trusted data), not by what a candidate prints: lines and tokens are walked one at a time and
# the walk stops at the first difference, so memory stays a small multiple of the output cap and no
# per-token list is ever built.


def stdout_mismatch(got: str, expected: str) -> str | None:
    """None if `got` matches `expected` by LiveCodeBench's rule (lines after stripping; a line is
    equal, or both lines are all numbers and equal as exact decimals: 2.0 == 2, 0.30000000000000004
    != 0.3), else a reason. As in LiveCodeBench, Python decides what a number is (Decimal: also
    Unicode digits such as `٣` and `３`, `1_000`, `inf`) and what separates tokens (str.split: any
    Unicode whitespace, such as NBSP and U+3000)."""
    got, expected = got.strip(), expected.strip()
    got_count = got.count("\n") + 1
    expected_count = expected.count("\n") + 1
    if got_count != expected_count:
        return f"wrong answer: {got_count} lines, expected {expected_count}"
    for number, (got_line, expected_line) in enumerate(zip(_lines(got), _lines(expected)), 1):
        got_line, expected_line = got_line.strip(), expected_line.strip()
        if got_line != expected_line and not _same_numbers(got_line, expected_line):
            return f"wrong answer on line {number}: got {_short(got_line)}, expected {_short(expected_line)}"
    return None


def functional_mismatch(got: str, expected: str) -> str | None:
    """None if the JSON text `got` decodes to the same data as `expected` (_same_json), else a
    reason. JSON never escapes `,`, `[` or `{`, so equal data cannot hold more of them than
    json.dumps(expected) does: a larger count is rejected before a single object is built, and what
    is decoded is no bigger than the expected data."""
    structure = lambda text: text.count(",") + text.count("[") + text.count("{")  # noqa: E731
    if structure(got) > structure(json.dumps(json.loads(expected))):
        return f"wrong answer: got {_short(got)}, expected {_short(expected)}"
    try:
        same = _same_json(json.loads(got), json.loads(expected))
    except (ValueError, RecursionError):
        return f"functional test: the result is not JSON: {_short(got)}"
    return None if same else f"wrong answer: got {_short(got)}, expected {_short(expected)}"


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


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _lines(text: str):
    """The lines of `text`, one at a time (str.split("\\n") would build them all at once)."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1
    yield text[start:]


# \S in a str pattern is exactly what str.split() keeps (both use Unicode isspace)
_TOKEN = re.compile(r"\S+")


def _same_numbers(got_line: str, expected_line: str) -> bool:
    """Both lines are all numbers and equal as exact decimals, token by token (LiveCodeBench's
    rule). At most one token more than the expected line has is ever read from the candidate's
    line."""
    got_tokens = _TOKEN.finditer(got_line)
    try:
        for expected in _TOKEN.finditer(expected_line):
            got = next(got_tokens, None)
            if got is None or decimal.Decimal(got.group()) != decimal.Decimal(expected.group()):
                return False
    except (decimal.DecimalException, ValueError):  # not a number, or a signalling NaN compared
        return False
    return next(got_tokens, None) is None


# ----------------------------------------------------------------------------- self-check

if __name__ == "__main__" and sys.argv[1:2] == ["--memory-watchdog"]:  # started by _Watchdog
    try:
        _watchdog_main(int(sys.argv[2]))
    except OSError as error:
        sys.exit(
            f"sandbox memory watchdog: cannot read /proc ({error}); the trainer reads the memory itself"
        )
elif __name__ == "__main__":  # what the sandbox enforces on this machine, and two programs judged
    print(json.dumps(sandbox_info(), indent=2))
    tests = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}]
    for name, program in [
        ("honest", "print(sum(map(int, input().split())))"),
        ("sys.exit(0) cheat", "import sys; sys.exit(0)"),
    ]:
        print(f"{name}: {[result.reason for result in run_tests(program, tests)]}")
