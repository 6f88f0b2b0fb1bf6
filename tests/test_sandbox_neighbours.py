"""Tests scored at the same time share nothing, and a dead trainer leaves nothing (parts/sandbox.py,
root modes).

1. No cgroup tree: a test cannot list the machine's cgroups, so it cannot read a neighbour's pids.current or memory
   usage (a number the neighbour chose) nor see other trainers' tests.
2. No per-uid budget: the kernel keeps some budgets per host uid, not per user namespace (descriptors in flight
   over unix sockets, pipe buffer pages, message-queue bytes); tests running at once run as different host uids,
   so an honest forkserver Pool scores 1.0 beside a program holding 250 descriptors in flight.
3. stdin is a regular file holding the whole input, as judges give it: `os.read(0, os.fstat(0).st_size)` and one
   `os.read(0, 1 << 25)` read all of a 1 MB input.
4. A trainer killed as pid 1 of its own pid namespace leaves cgroups that the next trainer, in another pid
   namespace, removes; a living trainer's, seen from another pid namespace, are never removed.
"""

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

import reward
from parts import sandbox
from reward import SandboxConfig, run_tests

# adopt_orphans: this module's fixture too
from test_reward import adopt_orphans  # noqa: F401
from test_reward import descendants, leftovers
from test_sandbox_load import score_all

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = SandboxConfig(timeout_s=5, workers=2, memory_mb=256)


@pytest.fixture(scope="module")
def root_namespaced():
    if os.geteuid() != 0:
        pytest.skip("per-test host uids and cgroups need a root trainer")
    info = reward.sandbox_info(CONFIG)
    if not info["mode"].startswith(sandbox.NAMESPACES):
        pytest.skip(f"this machine runs tests in mode {info['mode']!r}, not namespaces as root")
    return info


# ----------------------------------------------------------------------------- 1. no cgroup tree

CGROUP_LOOKER = textwrap.dedent("""\
    import os, time
    found = set()
    end = time.time() + 2
    while time.time() < end:
        for top, dirs, _ in os.walk('/sys/fs/cgroup'):
            found.update(name for name in dirs if name.startswith(('test-', 'reward-')))
            if top.count('/') > 6:
                dirs.clear()
        time.sleep(0.1)
    print(sorted(found) or 'nothing')
""")


def test_a_test_sees_no_cgroup_of_its_own_or_of_a_neighbour(root_namespaced):
    """Beside a neighbour that holds 20 threads (pids.current = 21, a number it chose), the looker
    lists every cgroup directory it can see for 2 s: it must find none (today it finds its own and
    the neighbour's)."""
    holder = "import threading, time\nfor _ in range(20):\n    threading.Thread(target=time.sleep, args=(3,)).start()\nprint('held')"
    results = score_all(
        [holder, CGROUP_LOOKER],
        [
            {"tests": [{"input": "", "output": "held"}]},
            {"tests": [{"input": "", "output": "nothing"}]},
        ],
    )
    assert [result for result, _ in results] == [(1.0, True)] * 2, results
    # /proc/cgroups counts the cgroups of each hierarchy, a number that changes as tests start and
    # end
    counter = "try:\n    print(len(open('/proc/cgroups').read().splitlines()))\nexcept OSError:\n    print(0)"
    counts = run_tests(counter, [{"input": "", "output": "0"}], CONFIG)
    assert counts[0].passed, counts


# ---------------------------------------------------------------------- 2. no per-uid kernel budget


def test_tests_running_at_once_run_as_different_host_uids(root_namespaced):
    """Each of two tests held side by side prints the host uid it runs as (the outside uid of its
    user namespace's map, or its own uid without one); the two differ, and neither is the
    trainer's."""
    program = (
        "import os, time\nmapping = open('/proc/self/uid_map').read().split()\ntime.sleep(1.5)\n"
        "print(mapping[1] if mapping[0] != '0' else os.getuid())"
    )
    printed = run_tests_capturing(program, 2, SandboxConfig(timeout_s=5, workers=2))
    assert len(set(printed)) == 2 and str(os.geteuid()) not in printed, printed


def run_tests_capturing(program: str, copies: int, config: SandboxConfig) -> list[str]:
    """The stdout of `copies` runs of `program` at once (each judged against an impossible output,
    whose 'wrong answer' reason quotes what it printed)."""
    results = run_tests(program, [{"input": "", "output": "-"}] * copies, config)
    printed = []
    for result in results:
        assert result.reason.startswith("wrong answer on line 1: got "), result
        printed.append(result.reason.split("got ")[1].split(",")[0].strip("'"))
    return printed


FD_HOG = textwrap.dedent("""\
    import os, socket, time
    left, right = socket.socketpair()
    file = os.open('/dev/null', os.O_RDONLY)
    left.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(__import__('array').array('i', [file] * 250))))])
    time.sleep(6)   # 250 descriptors in flight, never received, while the neighbour runs
    print('held')
""")

FORKSERVER_POOL = textwrap.dedent("""\
    import multiprocessing, time

    def square(x):
        return x * x

    if __name__ == '__main__':
        time.sleep(1.5)   # the neighbour holds its descriptors by now
        multiprocessing.set_start_method('forkserver')
        with multiprocessing.Pool(2) as pool:
            print(sum(pool.map(square, range(10))))
""")


def test_a_forkserver_pool_scores_beside_a_descriptor_hog(root_namespaced):
    """Descriptors in flight are counted per host uid against RLIMIT_NOFILE (64 here): with one uid
    for all tests, the Pool's first sendmsg fails with 'Too many references' (ETOOMANYREFS) beside
    the hog."""
    results = score_all(
        [FD_HOG, FORKSERVER_POOL],
        [{"tests": [{"input": "", "output": "held"}]}, {"tests": [{"input": "", "output": "285"}]}],
    )
    assert [result for result, _ in results] == [(1.0, True)] * 2, results


# ---------------------------------------------------------------------- 3. stdin is the whole input

MEGABYTE_INPUT = "\n".join(str(i) for i in range(150_000)) + "\n"  # ~1 MB


@pytest.mark.parametrize(
    "name, program",
    [
        (
            "fstat size",
            "import io, os\ndata = io.BytesIO(os.read(0, os.fstat(0).st_size)).read().split()\n"
            "print(sum(map(int, data)))",
        ),
        ("one big read", "import os\nprint(sum(map(int, os.read(0, 1 << 25).split())))"),
        ("by path", "print(sum(map(int, open('/dev/stdin', 'rb').read().split())))"),
    ],
)
def test_fast_input_idioms_read_the_whole_input(name, program):
    test = {"input": MEGABYTE_INPUT, "output": str(sum(range(150_000)))}
    result = run_tests(program, [test], CONFIG)[0]
    assert result.passed, result


PYRIVAL_FAST_IO = textwrap.dedent("""\
    import os, sys
    from io import BytesIO, IOBase
    BUFSIZE = 8192

    class FastIO(IOBase):
        newlines = 0

        def __init__(self, file):
            self._fd = file.fileno()
            self.buffer = BytesIO()
            self.writable = "x" in file.mode or "r" not in file.mode
            self.write = self.buffer.write if self.writable else None

        def readline(self):
            while self.newlines == 0:
                b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
                self.newlines = b.count(b"\\n") + (not b)
                ptr = self.buffer.tell()
                self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
            self.newlines -= 1
            return self.buffer.readline()

        def flush(self):
            if self.writable:
                os.write(self._fd, self.buffer.getvalue())
                self.buffer.truncate(0), self.buffer.seek(0)

    class IOWrapper(IOBase):
        def __init__(self, file):
            self.buffer = FastIO(file)
            self.flush = self.buffer.flush
            self.writable = self.buffer.writable
            self.write = lambda s: self.buffer.write(s.encode("ascii"))
            self.readline = lambda: self.buffer.readline().decode("ascii")

    sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
    input = lambda: sys.stdin.readline().rstrip("\\r\\n")
    n = int(input())
    print(sum(map(int, input().split())))
""")

READ_TWO_LINES = "n = int(input())\nvalues = list(map(int, input().split()))\n"
HONEST_IDIOMS = {  # name: (program, input); each prints 6 for the input "3\n1 2 3\n"
    "PyRival FastIO": (PYRIVAL_FAST_IO, "3\n1 2 3\n"),
    "sys.stdin.readline": (
        "import sys\ninput = sys.stdin.readline\n" + READ_TWO_LINES + "print(sum(values))",
        "3\n1 2 3\n",
    ),
    "stdin.buffer.readline": (
        "import sys\ninput = sys.stdin.buffer.readline\n" + READ_TWO_LINES + "print(sum(values))",
        "3\n1 2 3\n",
    ),
    "sep and end": (READ_TWO_LINES + "print(sum(values), sep=' ', end='\\n')", "3\n1 2 3\n"),
    "CRLF input": (READ_TWO_LINES + "print(sum(values))", "3\r\n1 2 3\r\n"),
    "exit()": (READ_TWO_LINES + "print(sum(values))\nexit()", "3\n1 2 3\n"),
    "quit()": (READ_TWO_LINES + "print(sum(values))\nquit()", "3\n1 2 3\n"),
    "256 MB thread stack, deep recursion": (
        "import sys, threading\nsys.setrecursionlimit(1 << 20)\nthreading.stack_size(256 << 20)\n"
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "thread = threading.Thread(target=lambda: print(depth(100_000) // 100_000 * 6))\n"
        "thread.start()\nthread.join()",
        "",
    ),
    "shared_memory": (
        "from multiprocessing import shared_memory\nblock = shared_memory.SharedMemory(create=True, "
        "size=1024)\nblock.buf[0] = 6\nprint(block.buf[0])\nblock.close()\nblock.unlink()",
        "",
    ),
    "Pool(os.cpu_count())": (
        "import os\nfrom multiprocessing import Pool\nif __name__ == '__main__':\n"
        "    with Pool(os.cpu_count()) as pool:\n        print(sum(pool.map(int, '123')))",
        "",
    ),
    "ProcessPoolExecutor": (
        "from concurrent.futures import ProcessPoolExecutor\nif __name__ == '__main__':\n"
        "    with ProcessPoolExecutor(2) as pool:\n        print(sum(pool.map(int, '123')))",
        "",
    ),
    "subprocess of sys.executable": (
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
        "'print(6)'], capture_output=True, text=True).stdout.strip())",
        "",
    ),
    "stdout.buffer": ("import sys\nsys.stdout.buffer.write(b'6\\n')", ""),
    "os.write(1)": ("import os\nos.write(1, b'6\\n')", ""),
}


@pytest.mark.parametrize("name", list(HONEST_IDIOMS))
def test_honest_idioms_still_score(name):
    program, stdin = HONEST_IDIOMS[name]
    result = run_tests(program, [{"input": stdin, "output": "6"}], SandboxConfig(timeout_s=10))[0]
    assert result.passed, result


STDIN_WRITER = textwrap.dedent("""\
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    done = []
    if libc.fallocate(0, 1, 0, 64 << 20) == 0:   # FALLOC_FL_KEEP_SIZE: reserve 64 MB of the file's disk
        done.append('fallocate')
    for how in (os.O_WRONLY, os.O_RDWR | os.O_APPEND):
        try:
            fd = os.open('/proc/self/fd/0', how)
            os.write(fd, b'x')
            done.append('reopened for writing')
        except OSError:
            pass
    try:
        os.truncate(0, 1 << 30)
        done.append('grown')
    except OSError:
        pass
    print(done or 'refused')
""")


def test_a_test_cannot_write_grow_or_reserve_its_stdin(root_namespaced):
    """A file the candidate could write would let it reserve the trainer's disk (fallocate is not
    bounded by RLIMIT_FSIZE) and signal its neighbours through the free space."""
    result = run_tests(STDIN_WRITER, [{"input": "40 2\n", "output": "refused"}], CONFIG)[0]
    assert result.passed, result


def test_kernel_aio_is_refused():
    """fs.aio-max-nr is the machine's budget: one test taking it all failed a neighbour's
    io_setup."""
    program = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\ncontext = ctypes.c_ulong(0)\n"
        "number = {'x86_64': 206, 'aarch64': 0}[__import__('os').uname().machine]\n"
        "print('refused' if libc.syscall(number, 128, ctypes.byref(context)) else 'allowed')"
    )
    if os.uname().machine not in sandbox._SECCOMP:
        pytest.skip(f"no seccomp filter on {os.uname().machine}")
    assert run_tests(program, [{"input": "", "output": "refused"}], CONFIG)[0].passed


def test_plain_mode_kills_what_a_test_leaves_behind(root_namespaced):
    """Without a pid namespace a test can leave a process behind (setsid, double fork); with a
    leased uid, every process of that uid is killed when the test ends, so it cannot wait for a
    later test of the same uid."""
    marker = f"pl{uuid.uuid4().hex[:10]}"  # its name (comm holds 15 characters)
    program = (
        f"import ctypes, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        ctypes.CDLL(None).prctl(15, b'{marker}', 0, 0, 0)\n        time.sleep(60)\n"
        "    os._exit(0)\nos.wait()\nprint('left')"
    )
    config = SandboxConfig(timeout_s=5, namespaces="off")
    assert run_tests(program, [{"input": "", "output": "left"}], config)[0].passed
    deadline = time.monotonic() + 5
    while (alive := named(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, alive


def named(name: str) -> list[int]:
    """Our live descendants called `name` (the double fork re-parents them to us: we are a child
    subreaper)."""
    return [pid for pid, comm, state, _ in descendants() if comm == name and state != "Z"]


def test_a_forked_child_holds_no_uid_lease(root_namespaced):
    """A trainer forked (no exec) while a test runs: the child's copy of the lease would keep the
    uid leased for as long as the child lives."""
    code = textwrap.dedent(f"""\
        import os, sys, threading, time
        sys.path.insert(0, {REPO!r})
        import reward
        test = threading.Thread(target=reward.run_tests, args=('import time\\ntime.sleep(2)', [{{'input': '',
                                'output': ''}}], reward.SandboxConfig(timeout_s=5)))
        test.start()
        time.sleep(1.0)   # the test holds its lease now
        child = os.fork()
        if child == 0:
            held = []
            for fd in os.listdir('/proc/self/fd'):
                try:
                    held.append(os.readlink('/proc/self/fd/' + fd))
                except OSError:   # the descriptor listdir itself used
                    pass
            os._exit(1 if any('sandbox-uids' in path for path in held) else 0)
        test.join()
        _, status = os.waitpid(child, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


# ---------------------------------------------------------------------- 4. a dead trainer's cgroups

TRAINER = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {repo!r})
    import reward
    from parts import sandbox
    print(os.stat('/proc/self/ns/pid').st_ino, flush=True)   # its pid namespace: the name of its parents
    reward.run_tests({program!r}, [{{'input': '', 'output': 'x'}}], reward.SandboxConfig(timeout_s=30, wall_timeout_s=30))
    print('scored', flush=True)
    sys.stdin.read()   # alive until the test closes its stdin
""")


def start_trainer_in_own_pid_namespace(program: str) -> tuple[subprocess.Popen, str]:
    """A trainer that is pid 1 of a pid namespace of its own (as a container's main process); ->
    (its launcher, the prefix of its parent cgroups' names)."""
    code = TRAINER.format(repo=REPO, program=program)
    launcher = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    namespace = launcher.stdout.readline().strip()
    assert namespace.isdigit(), namespace
    return launcher, f"reward-{namespace}-1"


def parents_named(prefix: str) -> list[str]:
    cgroups = sandbox._PLANS.get(CONFIG).cgroups
    return [
        os.path.join(directory, name)
        for directory in cgroups.directories()
        for name in os.listdir(directory)
        if name == prefix
    ]


def clean_up_as_a_new_trainer():
    """A trainer in this pid namespace starts (its first test makes its parents, removing stale
    ones) and exits."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys\nsys.path.insert(0, {REPO!r})\nimport reward\n"
            "assert reward.run_tests('print(3)', [{'input': '', 'output': '3'}])[0].passed",
        ],
        check=True,
        timeout=120,
    )


def test_a_trainer_killed_in_its_own_pid_namespace_leaves_nothing(root_namespaced):
    if not root_namespaced["cgroup"]:
        pytest.skip("no cgroups per test on this machine")
    marker = "61.0" + str(uuid.uuid4().int % 10**6)  # the candidate becomes `sleep <marker>`
    launcher, prefix = start_trainer_in_own_pid_namespace(
        f'import os\nos.execv("/bin/sleep", ["sleep", "{marker}"])'
    )
    try:
        deadline = time.monotonic() + 60
        while not leftovers(f"sleep\0{marker}", harness=False) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert leftovers(f"sleep\0{marker}", harness=False), "the candidate never started"
        trainer = int(open(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read().split()[0])
        # read before the kill: once the trainer is dead, any other trainer on the machine (a test
        # running beside this one) may sweep its cgroups before we look
        assert parents_named(prefix), "the trainer made no cgroups: nothing to test"
        os.kill(trainer, 9)  # pid 1 of its namespace: the kernel kills everything in it
        launcher.wait(timeout=30)
        clean_up_as_a_new_trainer()
        assert not parents_named(prefix), "a dead trainer's cgroups were left behind"
    finally:
        launcher.kill()
        launcher.wait()


def test_a_living_trainer_in_another_pid_namespace_keeps_its_cgroups(root_namespaced):
    if not root_namespaced["cgroup"]:
        pytest.skip("no cgroups per test on this machine")
    launcher, prefix = start_trainer_in_own_pid_namespace("print('x')")
    try:
        assert launcher.stdout.readline().strip() == "scored"
        made = parents_named(prefix)
        assert made, "the trainer made no parent cgroups"
        clean_up_as_a_new_trainer()
        assert parents_named(prefix) == made, "a living trainer's cgroups were removed"
        launcher.stdin.close()  # it exits normally, removing its own
        assert launcher.wait(timeout=60) == 0
        assert not parents_named(prefix), "a trainer's cgroups outlived its normal exit"
    finally:
        launcher.kill()
        launcher.wait()
