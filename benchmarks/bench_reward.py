"""
Benchmark of reward.py's code sandbox: test executions per second with 2 workers, and the sandbox's
overhead per test against a bare `python -c` of the same program with the same interpreter.

    overhead per test = mean wall time of one sandboxed test (workers=1) - mean wall time of a bare run
    CPU per test      = CPU time (user + system) of the trainer and of all sandbox processes, per test

Both sandbox modes are measured: the best this machine allows (namespaces, + cgroup where possible)
and "plain". The machine may be shared: the load average is printed next to the numbers, and CPU per
test is the figure that moves least when other work competes for the cores.

    python benchmarks/bench_reward.py
    python benchmarks/bench_reward.py --tests=200 --repeats=50 --workers=2
"""

import dataclasses
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reward  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class Config:
    # fmt: off
    tests: int = 100       # test executions for the throughput measurement
    repeats: int = 30      # sequential runs for the overhead measurement
    workers: int = 2
    # fmt: on


PROGRAM = "print(sum(map(int, input().split())))"
TEST = {"input": "20 22\n", "output": "42"}


def bare_seconds(python: str, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        out = subprocess.run(
            [python, "-c", PROGRAM], input=TEST["input"], capture_output=True, text=True
        ).stdout
        assert out.strip() == TEST["output"], out
    return (time.perf_counter() - start) / repeats


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its children that have been waited for."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def sandbox_seconds(config: reward.SandboxConfig, repeats: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per sequential sandboxed test."""
    start = time.perf_counter()
    cpu_start = cpu_seconds()
    results = reward.run_tests(PROGRAM, [TEST] * repeats, dataclasses.replace(config, workers=1))
    assert reward.all_passed(results), results
    return (time.perf_counter() - start) / repeats, (cpu_seconds() - cpu_start) / repeats


def throughput(config: reward.SandboxConfig, tests: int) -> float:
    start = time.perf_counter()
    results = reward.run_tests(PROGRAM, [TEST] * tests, config)
    assert reward.all_passed(results), results
    return tests / (time.perf_counter() - start)


def main(cfg: Config):
    print(f"cpus: {len(os.sched_getaffinity(0))}, load average at start: {os.getloadavg()[0]:.2f}")
    for namespaces in ("auto", "off"):
        config = reward.SandboxConfig(timeout_s=10, workers=cfg.workers, namespaces=namespaces)
        info = reward.sandbox_info(config)  # probes once, outside the timings
        bare = bare_seconds(info["python"], cfg.repeats)
        sandboxed, cpu = sandbox_seconds(config, cfg.repeats)
        rate = throughput(config, cfg.tests)
        print(f"[{info['mode']}] python {info['python']}, uid {info['uid']}")
        print(
            f"  throughput, {cfg.workers} workers: {rate:.1f} test executions/s ({cfg.tests} tests)"
        )
        print(
            f"  one test, sequential: {sandboxed * 1000:.1f} ms; bare `python -c`: {bare * 1000:.1f} ms; "
            f"sandbox overhead: {(sandboxed - bare) * 1000:.1f} ms per test; CPU per test: {cpu * 1000:.1f} ms"
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(parse_config(Config))
