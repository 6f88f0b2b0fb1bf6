"""What judging one code test costs the trainer: tracemalloc's peak over reward.run_tests, as a
multiple of the bytes the candidate wrote, and the wall time per test, for outputs near the 8 MB cap
(a crash with a long stderr, the same stderr with exit 0, a long wrong answer, non-ASCII and
non-UTF-8 output). Also the five programs that reopen their standard streams by path, and whether
they pass.

    python benchmarks/judge_memory.py
"""

import os
import sys
import time
import tracemalloc
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reward  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class Config:
    """Judging memory and time for outputs near the output cap, and programs that reopen their
    streams by path."""

    # fmt: off
    timeout_s: float = 5.0       # CPU time per test
    # fmt: on


N = 2_700_000  # repetitions of 'ab\n': 7.7 MB
OUTPUTS = {
    "crash, 7.7 MB of stderr": f"import sys\nsys.stderr.write('ab\\n' * {N})\nsys.exit(1)",
    "exit 0, 7.7 MB of stderr": f"import sys\nsys.stderr.write('ab\\n' * {N})\nprint(3)",
    "7.7 MB of stdout": f"import sys\nsys.stdout.write('ab\\n' * {N})",
    "one 4-byte character + 7.7 MB": f"import sys\nsys.stdout.write('\\U0001F600' + 'ab\\n' * {N})",
    "7.7 MB of 0xff bytes": f"import sys\nsys.stdout.buffer.write(b'\\xff' * {3 * N})",
}
REOPEN = {
    "open('/dev/stdin')": "print(sum(map(int, open('/dev/stdin').read().split())))",
    "open('/proc/self/fd/0')": "print(sum(map(int, open('/proc/self/fd/0').read().split())))",
    "open('/dev/fd/0')": "print(sum(map(int, open('/dev/fd/0').read().split())))",
    "open('/dev/stdout', 'w')": "open('/dev/stdout', 'w').write(str(sum(map(int, input().split()))) + '\\n')",
    "open('/dev/stderr', 'w')": "open('/dev/stderr', 'w').write('x\\n')\nprint(sum(map(int, input().split())))",
}


def main(cfg: Config):
    config = reward.SandboxConfig(timeout_s=cfg.timeout_s, memory_mb=256, output_mb=8.0)
    tests = [{"input": "", "output": "3"}]
    print(f"sandbox: {reward.sandbox_info(config)['mode']}")
    for name, program in OUTPUTS.items():
        reward.run_tests("print(3)", tests, config)
        tracemalloc.start()
        start = time.perf_counter()
        result = reward.run_tests(program, tests, config)[0]
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(
            f"{name:32s} peak {peak / 1e6:6.1f} MB = {peak / (3 * N):5.2f}x the output  {seconds:5.2f} s  "
            f"{result.reason[:60]}"
        )
    for name, program in REOPEN.items():
        result = reward.run_tests(program, [{"input": "1 2\n", "output": "3"}], config)[0]
        print(f"{name:32s} {'passes' if result.passed else 'fails: ' + result.reason[:70]}")


if __name__ == "__main__":
    main(parse_config(Config))
