"""Math answers checked by math-verify from any thread, within a deadline: math-verify times out
with signal.alarm, which works only in a process's main thread, so every check runs in a persistent
worker process (killed after a wall-clock deadline); a thread of a trainer can ask, and nothing can
hang.

    compare(gold="\\frac12", answer="0.5")   # -> (gold parsed?, equal?), or None past the deadline
The gold answer is parsed as parse("\\boxed{" + gold + "}") and compared first (math-verify's
verify() is not symmetric). At most set_workers(n) workers are busy at once. Needs math-verify.
`python math_checker.py GOLD ANSWER`.
"""

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
import time


def compare(gold: str, answer: str, timeout_s: float = 5.0) -> tuple[bool, bool] | None:
    """(math-verify could parse the gold answer, the answer equals it), or None if the worker passed
    the deadline (about timeout_s + 0.5 s of wall clock) or died: it is then killed and the next
    call starts another."""
    # math-verify's own per-operation alarms (whole seconds) let the worker recover by itself; our
    # deadline, slightly later, bounds the total and C code that ignores signals.
    reply = _WORKERS.ask(
        {"gold": gold, "answer": answer, "timeout": max(1, int(-(-timeout_s // 1)))},
        timeout_s + 0.5,
    )
    return None if reply is None else (reply["gold_parsed"], reply["equal"])


# ----------------------------------------------------------------------------- the worker pool


class _MathWorkers:
    """A pool of math worker processes, kept between calls (starting one takes a second), at most
    `size` busy at once. It owns its workers: one that misses a deadline is killed, idle ones are
    killed at exit. After a fork, the idle workers belong to the parent, which still uses them: the
    child starts its own and never touches those."""

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
                self.idle = []
                self.owner_pid = os.getpid()
            return self.idle.pop() if self.idle else None

    def _start(self) -> subprocess.Popen:
        worker = subprocess.Popen(
            [sys.executable, "-c", _MATH_WORKER, str(_MATH_WORKER_MEMORY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        hello = _read_reply(worker, deadline=time.monotonic() + 120)
        if not hello or not hello.get("ready"):
            _kill_worker(worker)
            raise RuntimeError(
                f"math-verify worker ({sys.executable}) did not start: "
                f"{(hello or {}).get('error', 'no reply')}; try `pip install math-verify`"
            )
        return worker

    def close(self):
        with self.lock:
            if self.owner_pid == os.getpid():
                for worker in self.idle:
                    _kill_worker(worker)
            self.idle.clear()


# compare takes no pool (trainers call it from many threads), so one pool per process stands behind
# it. Building it starts nothing: the first call starts the first worker.
_WORKERS = _MathWorkers(size=max(2, os.cpu_count() or 2))


def set_workers(n: int) -> None:
    """At most n math-verify worker processes busy at once (default: the machine's cores, at least
    2). A trainer that scores while it generates gives them the cores its own threads leave free:
    workers on the cores the generation runs on slow it down."""
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"set_workers({n!r}): must be an int >= 1")
    # callers already waiting keep the one they entered
    _WORKERS.slots = threading.BoundedSemaphore(n)


def _read_reply(worker: subprocess.Popen, deadline: float) -> dict | None:
    """The worker's next JSON line, or None if it died or passed the deadline. It writes one line
    per request, so nothing is left over after the newline."""
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


# The math worker's program: math-verify in the main thread of a process of its own, where its
# signal.alarm timeouts work. One JSON request per stdin line, one JSON reply per stdout line;
# argv[1]: its RLIMIT_AS in bytes.
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


if __name__ == "__main__":
    usage = (
        "usage: python math_checker.py GOLD ANSWER   (e.g. '\\frac12' 0.5): prints "
        "gold_parsed equal"
    )
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(usage)
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit(usage)
    print(*compare(sys.argv[1], sys.argv[2]) or ("timeout",))
