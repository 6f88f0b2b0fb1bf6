"""Throughput of distill.py's chat-completions client against a local server that answers every
request after a fixed delay (tests/chat_server.py in its own process). With C requests in flight and
a delay of D seconds, a client that keeps C requests in flight at all times finishes C / D requests
per second; the goal is at least 0.8 x C / D.

    python benchmarks/bench_client.py                                   # C = 16, 64, 256; D = 0.5 s; 6 x C requests each
    python benchmarks/bench_client.py --concurrency=32,128 --delay=0.2 --rounds=10
Prints one line per C: requests/s, the ideal C / D, their ratio, and whether it reaches 0.8.
"""

import os
import subprocess
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from parts import chat_client  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class BenchConfig:
    # fmt: off
    concurrency: str = "16,64,256"  # requests in flight, one measurement each
    delay: float = 0.5               # seconds the server waits before each answer
    rounds: int = 6                  # requests per measurement: rounds x concurrency
    # fmt: on


def main(concurrency=(16, 64, 256), delay=0.5, rounds=6):
    server = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, "tests", "chat_server.py"),
            "--port=0",
            f"--delay={delay}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}/v1"
        print(
            f"server {url}, answering after {delay} s; load average {open('/proc/loadavg').read().split()[:3]}"
        )
        for c in concurrency:
            n = rounds * c
            requests = [
                chat_client.ChatRequest(
                    f"p{i}", [{"role": "user", "content": f"What is {i} + {i}?"}], [(0, i)]
                )
                for i in range(n)
            ]
            got = []
            t0 = time.perf_counter()
            stats = chat_client.sample_chat(
                requests,
                chat_client.ClientConfig(url, "bench", concurrency=c, progress_s=0),
                {"max_tokens": 16},
                lambda *a: got.append(a),
            )
            seconds = time.perf_counter() - t0
            rate = n / seconds
            ideal = c / delay
            assert len(got) == n and stats["failed"] == 0, stats
            print(
                f"C={c:4d}: {n} requests in {seconds:.2f} s = {rate:.1f} req/s; C/D = {ideal:.1f}; "
                f"ratio {rate / ideal:.2f} ({'>= 0.8: ok' if rate >= 0.8 * ideal else 'BELOW 0.8'}); "
                f"retries {dict(stats['retries']) or 'none'}"
            )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    cfg = parse_config(BenchConfig)
    main(tuple(int(c) for c in cfg.concurrency.split(",")), cfg.delay, cfg.rounds)
