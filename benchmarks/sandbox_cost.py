"""What one code test costs in parts/sandbox.py: CPU time per test in the processes that launch and
run it (children) and in the calling process, and the CPU time of each command of the launch chain
run alone, to see where a test's CPU goes.

The test is a one-line program on a short input (a judged program's own work is not the point).
CPU time, not wall time: on a machine shared with other work it moves less. Each chain command
runs `runs` times and reports its mean CPU per run (user + system of the child, getrusage).

Run:  python benchmarks/sandbox_cost.py               # as root for the full sandbox (namespaces)
"""

import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from parts.cli import parse_config  # noqa: E402
from parts.sandbox import SandboxConfig, run_tests  # noqa: E402

PROGRAM = "a = list(map(int, input().split()))\nprint(sorted(set(a))[-2] + 250)\n"
TEST = {"input": "6 -18 11 -11 -16 -19 0\n", "output": "256\n"}


@dataclass
class SandboxCostConfig:
    # fmt: off
    tests: int = 16    # tests per measurement (one at a time)
    repeats: int = 3   # measurements of the whole test
    runs: int = 40     # runs of each chain command
    # fmt: on


def cpu_ms(who) -> float:
    usage = resource.getrusage(who)
    return 1000 * (usage.ru_utime + usage.ru_stime)


def per_test(cfg: SandboxCostConfig):
    sandbox = SandboxConfig(cores=1)
    run_tests(PROGRAM, [TEST] * 2, sandbox)  # the probe that picks the sandbox's mode, once
    for _ in range(cfg.repeats):
        children = cpu_ms(resource.RUSAGE_CHILDREN)
        mine = cpu_ms(resource.RUSAGE_SELF)
        start = time.perf_counter()
        results = run_tests(PROGRAM, [TEST] * cfg.tests, sandbox)
        wall = 1000 * (time.perf_counter() - start)
        children = cpu_ms(resource.RUSAGE_CHILDREN) - children
        mine = cpu_ms(resource.RUSAGE_SELF) - mine
        passed = sum(r.passed for r in results)
        print(
            f"per test: children {children / cfg.tests:5.1f} ms CPU, this process "
            f"{mine / cfg.tests:4.1f} ms CPU, wall {wall / cfg.tests:5.1f} ms "
            f"({passed}/{cfg.tests} passed)"
        )


def chain(cfg: SandboxCostConfig):
    python = sys.executable
    commands = {
        "/bin/true": ["/bin/true"],
        "sh -c true": ["/bin/sh", "-c", "true"],
        "unshare (ipc, net, pid, mount)": [
            "unshare", "--ipc", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--mount", "/bin/true",
        ],
        "unshare --user": ["unshare", "--user", "--map-user=65534", "--map-group=65534", "/bin/true"],
        "setpriv (drop to a uid)": [
            "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "/bin/true",
        ],
        "python -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
        "python -I -S -c 'import ctypes'": [python, "-I", "-S", "-c", "import ctypes"],
    }  # fmt: skip
    for name, argv in commands.items():
        if not shutil.which(argv[0]):
            print(f"{name:34s} not found")
            continue
        before = cpu_ms(resource.RUSAGE_CHILDREN)
        for _ in range(cfg.runs):
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
        spent = (cpu_ms(resource.RUSAGE_CHILDREN) - before) / cfg.runs
        note = "" if done.returncode == 0 else f"  (exit {done.returncode}: not allowed here)"
        print(f"{name:34s} {spent:5.2f} ms CPU per run{note}")


def main(cfg: SandboxCostConfig):
    per_test(cfg)
    print(f"\nthe launch chain's commands alone, {cfg.runs} runs each:")
    chain(cfg)


if __name__ == "__main__":
    main(parse_config(SandboxCostConfig))
