"""The code sandbox under real load (parts/sandbox.py through reward.py), as an RL run and an
attacker use it.

1. Honest CPU-bound candidates keep their reward when the RL loop scores many at once: reward.scorer
   at GPPOConfig's defaults on gppo's reward_workers threads, 8 responses x 2 tests of ~1 s of CPU each (on 2 cores that is
   16 s of work where 6 s is each test's limit: tests must take turns and be timed in CPU time, not wall time).
2. A candidate whose processes each start a session of their own (setsid: one CPU share each under autogroup)
   must not starve an honest candidate scored beside it.
3. Memory attacks (MAP_SHARED, a nested user namespace's tmpfs and IPC namespace, an inode flood, unmapped memfd
   files) stay within 2 x memory_mb as the kernel counts it, in cgroup and in polling mode, and the trainer
   survives: each mode's attacks run in a trainer process of its own inside a memory cgroup made for it (hard limit
   1.5 GB, so even a sandbox that bounds nothing cannot take the machine down), whose peak, less the trainer's own
   usage, is the test's memory.
4. The output comparison in the trainer costs memory bounded by the expected output, not by what a candidate
   prints (tracemalloc's peak, in a process of its own).
5. Honest programs that a sandbox used to fail: 32 threads, 400 MB shared copy-on-write with 2 forked readers,
   multiprocessing.Pool, open(__file__), and an interpreter of the user's choice (a virtualenv).
6. Two candidates at once cannot signal through file locks or pseudo-terminals, cannot hold more than their own
   few pseudo-terminals, and no process of a candidate is alive when its reward is returned.
No-leftover checks look only at this process's descendants (it is a child subreaper while these
tests run).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

import gppo
import reward
from parts import sandbox
from reward import SandboxConfig, run_tests

# adopt_orphans: this module's fixture too
from test_reward import adopt_orphans  # noqa: F401
from test_reward import descendants, respond

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def namespaced():
    info = reward.sandbox_info(SandboxConfig())
    if info["mode"] == "plain":
        pytest.skip(
            "this platform cannot create namespaces (unshare missing or not permitted): "
            + str(info)
        )
    return info


def score_all(responses: list[str], tasks: list[dict], look_after=None) -> list:
    """Score responses as the RL loop does: reward.scorer at GPPOConfig's defaults on reward_workers
    threads. look_after(i) runs in the scoring thread right after response i got its reward; its
    value comes back too."""
    cfg = gppo.GPPOConfig()
    score = reward.scorer(cfg)

    def one(i):
        verdict = score(dict(tasks[i], kind="code"), respond(responses[i]))
        result = (verdict.reward, verdict.correct)
        return result, look_after(i) if look_after else None

    with ThreadPoolExecutor(cfg.reward_workers) as pool:
        return list(pool.map(one, range(len(responses))))


# ----------------------------------------------------------------------------- 1, 2: CPU


def busy_program(seed: int) -> tuple[str, list[dict]]:
    """~1 s of CPU per test on this machine (15M loop steps), and its two tests with outputs known
    in closed form."""
    code = f"n = int(input())\ntotal = {seed}\nfor i in range(n):\n    total += i\nprint(total)"
    tests = [
        {"input": str(n), "output": str(seed + n * (n - 1) // 2)} for n in (15_000_000, 15_000_001)
    ]
    return code, tests


def test_rl_defaults_give_honest_cpu_bound_candidates_full_reward(namespaced):
    programs = [busy_program(seed) for seed in range(8)]
    results = score_all([code for code, _ in programs], [{"tests": tests} for _, tests in programs])
    assert [result for result, _ in results] == [(1.0, True)] * 8, results


def test_a_candidate_spreading_over_sessions_starves_no_neighbour(namespaced):
    """60 busy processes, each in a session of its own, beside three honest candidates scored at the
    same time."""
    hog = (
        "import os, time\nfor _ in range(60):\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n"
        "            pass\ntime.sleep(100)"
    )
    honest = [busy_program(seed) for seed in range(3)]
    responses = [hog] + [code for code, _ in honest]
    tasks = [{"tests": [{"input": "", "output": "never"}]}] + [
        {"tests": tests[:1]} for _, tests in honest
    ]
    results = score_all(responses, tasks)
    assert results[0][0] == (0.0, False)
    assert [result for result, _ in results[1:]] == [(1.0, True)] * 3, results


# ---------------------------------------------------------------- 3: memory, measured by the kernel

MEMORY_ATTACKS = {  # name: (program, memory_mb); each prints "done" only if it got all it asked for
    "MAP_SHARED in 10 processes": (
        "import mmap, os, time\nfor _ in range(10):\n    if os.fork() == 0:\n"
        "        block = mmap.mmap(-1, 200 << 20, flags=mmap.MAP_SHARED)\n"
        "        for i in range(0, 200 << 20, 4096):\n            block[i] = 1\n        time.sleep(30)\n"
        "        os._exit(0)\ntime.sleep(30)",
        256,
    ),
    "tmpfs of a nested user namespace": (
        "import subprocess\nsubprocess.run(['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c',\n"
        "                'mount -t tmpfs big /mnt && head -c 1500M /dev/zero > /mnt/fill && echo done'])",
        256,
    ),
    "System V shm of a nested IPC namespace": (
        "import subprocess, sys\n"
        "code = ('import ctypes; libc = ctypes.CDLL(None); libc.shmat.restype = ctypes.c_void_p; '\n"
        "        'segment = libc.shmget(0, 1500 << 20, 0o1600); address = libc.shmat(segment, None, 0); '\n"
        "        'ctypes.memset(address, 1, 1500 << 20); print(\"done\")')\n"
        "subprocess.run(['unshare', '--user', '--map-root-user', '--ipc', sys.executable, '-c', code])",
        256,
    ),
    "inode flood in /tmp": (
        "import os\nfor worker in range(4):\n    if os.fork() == 0:\n        os.mkdir(f'/tmp/{worker}')\n"
        "        for i in range(3_000_000):\n"
        "            os.close(os.open(f'/tmp/{worker}/{i}', os.O_CREAT | os.O_WRONLY))\n"
        "        os._exit(0)\nprint('done' if all(os.wait()[1] == 0 for _ in range(4)) else 'refused')",
        64,
    ),
    "unmapped memfd files": (
        "import os\nfiles = []\nfor _ in range(2):\n    os.fork()  # 4 processes\nfor _ in range(60):\n"
        "    fd = os.memfd_create('note')\n    for _ in range(15):\n        os.write(fd, b'x' * (1 << 20))\n"
        "    files.append(fd)\nprint('done')",
        256,
    ),
}

# The trainer: for each attack, reset the bounding cgroup's peak, run the attack, report the peak
# above the trainer's own usage. SandboxConfig gets only the fields it knows (the same script runs
# against older versions).
TRAINER = """
import dataclasses, json, os, subprocess, sys, threading
sys.path.insert(0, sys.argv[1])
import reward
bound, cgroup, attacks, busy = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
def spin():
    while True:
        pass
for _ in range(busy):  # a busy trainer: threads that hold its GIL, processes that share its session's CPU
    threading.Thread(target=spin, daemon=True).start()
# they spin while the trainer lives: one that dies mid-attack (the failure measured here) leaves none behind
spinner = f"import os\\nwhile os.getppid() == {os.getpid()}:\\n    pass"
neighbours = [subprocess.Popen([sys.executable, "-c", spinner]) for _ in range(busy)]
known = {field.name for field in dataclasses.fields(reward.SandboxConfig)}
def read(name):
    with open(os.path.join(bound, name)) as file:
        return int(file.read())
for name, (program, memory_mb) in attacks.items():
    fields = dict(timeout_s=3, wall_timeout_s=8, memory_mb=memory_mb, workers=1, cgroup=cgroup)
    config = reward.SandboxConfig(**{key: value for key, value in fields.items() if key in known})
    reward.sandbox_info(config)  # the probe, before the measurement
    with open(os.path.join(bound, "memory.max_usage_in_bytes"), "w") as file:
        file.write("0")
    own = read("memory.usage_in_bytes")
    result = reward.run_tests(program, [{"input": "", "output": "done"}], config)[0]
    print(json.dumps({"name": name, "peak_mb": (read("memory.max_usage_in_bytes") - own) / 2**20,
                      "passed": result.passed, "reason": result.reason}), flush=True)
for neighbour in neighbours:
    neighbour.kill()
    neighbour.wait()
"""


def own_memory_cgroup() -> str | None:
    """This process's cgroup in a cgroup v1 memory hierarchy, or None."""
    with open("/proc/self/cgroup") as file:
        own = [
            line.rstrip("\n").split(":", 2)[2]
            for line in file
            if "memory" in line.split(":")[1].split(",")
        ]
    with open("/proc/self/mountinfo") as file:
        mounts = [
            line.split()
            for line in file
            if " - cgroup " in line and "memory" in line.split()[-1].split(",")
        ]
    if not own or not mounts:
        return None
    root, mount_point = mounts[0][3:5]
    return os.path.normpath(mount_point + "/" + os.path.relpath(own[0], root))


@pytest.fixture
def bounding_cgroup():
    """A cgroup v1 memory cgroup of 1.5 GB (no swap) under this process's own, removed
    afterwards."""
    memory = own_memory_cgroup()
    if os.geteuid() != 0 or not memory or not os.access(memory, os.W_OK):
        pytest.skip(
            "measuring a test's memory needs root and a cgroup v1 memory hierarchy (cgroup v2: memory.peak "
            "is not resettable before Linux 6.12)"
        )
    path = tempfile.mkdtemp(prefix="reward-bound-", dir=memory)
    for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
        if os.path.exists(os.path.join(path, name)):
            with open(os.path.join(path, name), "w") as file:
                file.write(str(1536 << 20))
    yield path
    deadline = time.monotonic() + 30
    while os.path.exists(path):
        try:
            os.rmdir(path)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.mark.parametrize(
    "cgroup, busy",
    [("auto", 0), ("off", 0), ("off", 4)],
    ids=["cgroup", "polled", "polled-busy-trainer"],
)
def test_memory_attacks_stay_within_twice_the_limit(namespaced, bounding_cgroup, cgroup, busy):
    """busy: the trainer runs that many GIL-holding threads and as many busy processes in its
    session, as an RL loop under load does (without a cgroup, memory is read by a watchdog process
    whose reads must still come on time: a trainer's own polling thread fell 2-3x the limit
    behind)."""
    proc = subprocess.run(
        [
            "/bin/sh",
            "-c",
            'echo $$ > "$1/cgroup.procs" && shift && exec "$@"',
            "sh",
            bounding_cgroup,
            sys.executable,
            "-c",
            TRAINER,
            REPO,
            bounding_cgroup,
            cgroup,
            json.dumps(MEMORY_ATTACKS),
            str(busy),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    reports = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(reports) == len(MEMORY_ATTACKS), (
        f"the trainer did not survive (exit {proc.returncode}): {reports} {proc.stderr[-2000:]}"
    )
    print("\n".join(map(json.dumps, reports)))  # shown with -s: each attack's peak
    for report in reports:
        limit = MEMORY_ATTACKS[report["name"]][1]
        assert not report["passed"], report
        assert report["peak_mb"] <= 2 * limit, report


# ----------------------------------------------------------------------- 4: the comparison's memory


def test_comparison_memory_is_bounded_by_the_expected_output():
    """8 MB of output (4M tokens, or 4M lines, or a 4M-element JSON list) against small and large
    expected outputs: the trainer's peak allocation stays within 3x the output's size (it holds the
    text, one line of it, and its decoded JSON only when that cannot be larger than the expected
    data). Measured by tracemalloc."""
    code = textwrap.dedent("""
        import sys, tracemalloc
        sys.path.insert(0, sys.argv[1])
        from parts import sandbox
        zeros = '0 ' * (4 << 20)                          # one line, 4M tokens, 8 MB
        lines = '0\\n' * (4 << 20)                         # 4M lines
        json_list = '[' + '0,' * (4 << 20) + '0]'          # a 4M-element list
        checks = [('stdout_mismatch', zeros, '0 0 1'), ('stdout_mismatch', zeros, '0 ' * (1 << 18) + '1'),
                  ('stdout_mismatch', lines, '0'), ('stdout_mismatch', lines, '0\\n' * (1 << 18) + '1'),
                  ('functional_mismatch', json_list, '[0, 0]')]
        for name, got, expected in checks:
            tracemalloc.start()
            assert getattr(sandbox, name)(got, expected) is not None
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(name, len(got), peak)
            assert peak < 3 * len(got), (name, peak, len(got))
        """)
    proc = subprocess.run(
        [sys.executable, "-c", code, REPO],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: __import__("resource").setrlimit(
            __import__("resource").RLIMIT_AS, (3 << 30, 3 << 30)
        ),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def test_token_walk_splits_as_str_split_does():
    """_same_numbers walks tokens with a regex; it must see the tokens str.split() sees
    (LiveCodeBench's), for every whitespace character Python knows."""
    spaces = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
    line = "1" + "2".join(spaces) + "3"
    assert [m.group() for m in sandbox._TOKEN.finditer(line)] == line.split()
    assert sandbox._same_numbers(line, " ".join(line.split())) and not sandbox._same_numbers(
        line, "1 2"
    )


# ----------------------------------------------------------------------------- 5: honest programs

HONEST = {  # name: (program, expected output)
    "32 threads": (
        "from concurrent.futures import ThreadPoolExecutor\nfrom threading import Barrier\n"
        "barrier = Barrier(32)  # every thread must exist at once\n"
        "with ThreadPoolExecutor(32) as pool:\n    print(sum(pool.map(lambda _: barrier.wait() >= 0, "
        "range(32))))",
        "32",
    ),
    "400 MB read by 2 forked children": (
        "import os\ndata = b'x' * (400 << 20)\nfor _ in range(2):\n    if os.fork() == 0:\n"
        "        os._exit(0 if data.count(b'x') == len(data) else 1)\n"
        "print(sum(os.wait()[1] == 0 for _ in range(2)))",
        "2",
    ),
    "multiprocessing.Pool": (
        "from multiprocessing import Pool\nwith Pool(2) as pool:\n"
        "    print(sum(pool.map(abs, range(-5, 5))))",
        "25",
    ),
    "open(__file__)": (
        "# the first line\nprint(open(__file__).read().splitlines()[0])",
        "# the first line",
    ),
    "oom_score_adj": ("print(open('/proc/self/oom_score_adj').read())", "1000"),
    # the builtins site adds, though the harness starts without site (-S)
    "exit()": ("print('done')\nexit()\nprint('not reached')", "done"),
    "help and quit": ("print(type(help).__name__, type(quit).__name__)", "_Helper Quitter"),
}


def test_a_candidate_sees_the_interpreters_own_sys_path_and_builtins(namespaced):
    """What `python -I` would give a program: sys.path (site-packages and what .pth files add),
    the prefixes, site's own state and the names of the builtins, though the harness starts
    without site."""
    look = (
        "import site, sys; print(sys.path, sys.prefix, sys.exec_prefix, site.ENABLE_USER_SITE, "
        "site.getsitepackages(), sorted(dir(__builtins__)))"
    )
    outside = subprocess.run(
        [namespaced["python"], "-I", "-c", look], capture_output=True, text=True, check=True
    ).stdout
    result = run_tests(look, [{"input": "", "output": outside}], SandboxConfig(timeout_s=10))
    assert result[0].passed, result


@pytest.mark.parametrize("cgroup", ["auto", "off"], ids=["cgroup", "polled"])
@pytest.mark.parametrize("name", list(HONEST))
def test_honest_programs_work_as_outside_a_sandbox(namespaced, name, cgroup):
    program, output = HONEST[name]
    result = run_tests(
        program, [{"input": "", "output": output}], SandboxConfig(timeout_s=10, cgroup=cgroup)
    )[0]
    assert result.passed, result


def test_a_virtualenv_chosen_as_the_candidates_interpreter(namespaced):
    """SandboxConfig.python: a virtualenv outside /tmp that the sandbox user can read (here with a
    module of its own, as it would have numpy, and a .pth file) serves candidates; the default
    interpreter does not have that module. The .pth file's directory is on the candidate's path;
    its import line, code of the host's, runs outside the test only."""
    base = "/usr/bin/python3"
    if not os.path.exists(base):
        pytest.skip("needs /usr/bin/python3 to make a virtualenv from")
    # top level: the sandbox keeps its directory
    top = tempfile.mkdtemp(prefix="reward-test-venv-", dir="/")
    try:
        os.chmod(top, 0o755)
        made = subprocess.run(
            [base, "-m", "venv", "--without-pip", os.path.join(top, "venv")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if made.returncode != 0:
            pytest.skip(f"{base} cannot make a virtualenv: {made.stderr.strip()[-200:]}")
        site = subprocess.run(
            [
                os.path.join(top, "venv/bin/python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
        ).stdout
        with open(os.path.join(site.strip(), "reward_test_extra.py"), "w") as file:
            file.write("VALUE = 'from the virtualenv'\n")
        # a .pth file: its directory line is the interpreter's sys.path, its import line a host
        # startup hook that must not run inside a test
        os.makedirs(os.path.join(top, "added"))
        with open(os.path.join(top, "added", "reward_test_added.py"), "w") as file:
            file.write("VALUE = 'from a .pth directory'\n")
        with open(os.path.join(site.strip(), "reward_test.pth"), "w") as file:
            file.write(os.path.join(top, "added") + "\n")
            file.write("import os; os.environ['REWARD_TEST_HOOK'] = 'ran'\n")
        subprocess.run(["chmod", "-R", "a+rX", top], check=True)
        program = (
            "import os, sys, reward_test_extra, reward_test_added\n"
            "print(reward_test_extra.VALUE)\nprint(reward_test_added.VALUE)\n"
            "print(os.environ.get('REWARD_TEST_HOOK', 'no hook'))\nprint(sys.prefix)"
        )
        expected = ["from the virtualenv", "from a .pth directory", "no hook", f"{top}/venv"]
        test = {"input": "", "output": "\n".join(expected)}
        config = SandboxConfig(timeout_s=10, python=os.path.join(top, "venv/bin/python"))
        chosen = run_tests(program, [test], config)
        assert chosen[0].passed, chosen
        # not a weaker mode that could run it
        assert reward.sandbox_info(config)["mode"] == namespaced["mode"]
        assert (
            "ModuleNotFoundError"
            in run_tests(program, [test], SandboxConfig(timeout_s=10))[0].reason
        )
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ----------------------------------------------------------------------- 6: candidates side by side

SHARED_FILES = ["/etc/passwd", "/etc/hostname", "/usr/bin/env", "/dev/null"]


def test_two_candidates_at_once_share_no_lock_and_no_terminal(namespaced):
    """One candidate locks files every test can open and holds a pseudo-terminal; another, scored at
    the same time, looks for both for as long as the first holds them. Then one opens as many
    terminals as it can."""
    holder = (
        f"import fcntl, os, time\nheld = [open(path, 'rb') for path in {SHARED_FILES!r}]\n"
        "for file in held:\n    fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "terminal = os.openpty()\ntime.sleep(3)\nprint('held')"
    )
    looker = (
        f"import fcntl, glob, os, time\nseen, mine = set(), set()\nend = time.time() + 3\n"
        "while time.time() < end:\n"
        f"    for path in {SHARED_FILES!r}:\n        with open(path, 'rb') as file:\n"
        "            try:\n                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "            except BlockingIOError:\n                seen.add('lock ' + path)\n"
        "    for terminal in glob.glob('/dev/pts/[0-9]*'):\n        try:\n"
        "            os.close(os.open(terminal, os.O_RDWR | os.O_NOCTTY))\n            seen.add(terminal)\n"
        "        except OSError:\n            pass\n    time.sleep(0.05)\nprint(sorted(seen) or 'nothing')"
    )
    hoarder = (
        "import os\nopened = 0\ntry:\n    while opened < 40:  # 40: past a small limit, harmless without one\n"
        "        os.openpty()\n        opened += 1\nexcept OSError:\n    pass\nprint(opened)"
    )
    results = score_all(
        [holder, looker],
        [
            {"tests": [{"input": "", "output": "held"}]},
            {"tests": [{"input": "", "output": "nothing"}]},
        ],
    )
    assert [result for result, _ in results] == [(1.0, True)] * 2, results
    results = score_all([hoarder], [{"tests": [{"input": "", "output": str(sandbox._PTYS)}]}])
    assert results[0][0] == (1.0, True), results


def test_no_process_of_a_candidate_outlives_its_reward(namespaced):
    """Four candidates at once, each with 8 children in sessions of their own holding 50 MB and
    named after it, are stopped by the output cap; as each reward comes back, none of its children
    may be alive."""
    names = [f"rw{uuid.uuid4().hex[:10]}" for _ in range(4)]
    program = (
        "import ctypes, os, sys, time\nname = input().encode()\nfor _ in range(8):\n    if os.fork() == 0:\n"
        "        os.setsid()\n        block = b'x' * (50 << 20)\n"
        "        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME\n        time.sleep(100)\n"
        "time.sleep(0.5)\nsys.stdout.write('x' * (9 << 20))  # past the 8 MB output cap: the test is stopped"
    )

    def alive(i):
        return [pid for pid, name, state, _ in descendants() if name == names[i] and state != "Z"]

    results = score_all(
        [program] * 4, [{"tests": [{"input": name, "output": "x"}]} for name in names], alive
    )
    assert [result for result, _ in results] == [(0.0, False)] * 4, results
    assert [left for _, left in results] == [[]] * 4, (
        "processes alive after their reward was returned"
    )
