"""A chat-completions server for the tests and benchmarks/bench_client.py: OpenAI's POST
/v1/chat/completions on 127.0.0.1, deterministic answers, and the faults a real server shows, on
demand.

Answers: to "What is A + B?" the reasoning is "A+B=S (seed N)" and the answer \\boxed{S}, except
that a seed divisible by 3 answers S + 1 (wrong): the tests know which sample is right from its seed
alone (expected_turn). A prompt holding LONG is cut at max_tokens (finish_reason "length", the
reasoning never closed). Anything else gets an echo. Reasoning styles: "reasoning_content" (a
separate field, as DeepSeek's API and vLLM's reasoning parsers), "think" (<think>...</think> inside
content), "think_open" (only </think>: the template opened <think> in the prompt). Faults, taken by
arriving requests in order: "429" (with Retry-After), "500", "slow" (answers after slow_s, past the
client's timeout), "malformed" (200 with broken JSON), "drop" (the connection closed without an
answer).

    python tests/chat_server.py [--port=0] [--delay=0.1] [--style=think]     # prints "port N", serves until killed
    server = ChatServer(faults=["429", "drop"]); server.url; server.requests; server.close()     # in a test
"""

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def expected_turn(user_text: str, seed: int) -> tuple:
    """(reasoning, answer, correct) the server gives to `user_text` with `seed`."""
    m = re.search(r"What is (\d+) \+ (\d+)\?", user_text)
    if not m:
        return f"echo (seed {seed})", user_text[:40], None
    a = int(m.group(1))
    b = int(m.group(2))
    correct = seed % 3 != 0
    return (
        f"{a}+{b}={a + b} (seed {seed})",
        f"\\boxed{{{a + b if correct else a + b + 1}}}",
        correct,
    )


def qwen3_content(user_text: str, seed: int) -> str:
    """The stored form of a finished answer: what distill.assistant_turn must make of every
    style."""
    reasoning, answer, _ = expected_turn(user_text, seed)
    return f"<think>\n{reasoning}\n</think>\n\n{answer}"


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # the listen backlog: hundreds of clients connect at once (the default, 5, drops SYNs)
    request_queue_size = 1024

    def __init__(
        self,
        port: int = 0,
        style: str = "reasoning_content",
        faults=(),
        retry_after: str = "1",
        slow_s: float = 2.0,
        delay: float = 0.0,
        ignore_n: bool = False,
        api_key: str | None = None,
        serve: bool = True,
    ):
        super().__init__(("127.0.0.1", port), _Handler)
        self.style = style
        self.faults = list(faults)
        self.retry_after = retry_after
        self.slow_s = slow_s
        self.delay = delay
        self.ignore_n = ignore_n
        self.api_key = api_key
        # (arrival time, body, fault, authorization ok)
        self.lock = threading.Lock()
        self.requests = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        if serve:
            self.thread = threading.Thread(target=self.serve_forever, daemon=True)
            self.thread.start()

    def close(self):
        self.shutdown()
        self.server_close()

    def answer(self, body: dict) -> dict:
        user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        n = 1 if self.ignore_n else body.get("n", 1)
        seed = body.get("seed", 0)
        choices = []
        completion = 0
        for i in range(n):
            # n > 1: choice i as if seeded seed + i
            reasoning, answer, _ = expected_turn(user, seed + i)
            if "LONG" in user:
                message = self._unfinished(reasoning)
                finish = "length"
            else:
                message = self._finished(reasoning, answer)
                finish = "stop"
            choices.append(dict(index=i, message=message, finish_reason=finish))
            completion += len(reasoning.split()) + len(answer.split()) + 3
        prompt = sum(len(m["content"].split()) for m in body["messages"])
        return dict(
            id="chatcmpl-test",
            object="chat.completion",
            model=body.get("model"),
            choices=choices,
            usage=dict(
                prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
            ),
        )

    def _finished(self, reasoning, answer):
        if self.style == "reasoning_content":
            return dict(role="assistant", reasoning_content=reasoning, content=answer)
        opening = "<think>\n" if self.style == "think" else ""
        return dict(role="assistant", content=f"{opening}{reasoning}\n</think>\n\n{answer}")

    def _unfinished(self, reasoning):
        if self.style == "reasoning_content":
            return dict(role="assistant", reasoning_content=reasoning, content=None)
        return dict(
            role="assistant", content=("<think>\n" if self.style == "think" else "") + reasoning
        )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server

    def log_message(self, *args):
        pass

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        authorized = (
            server.api_key is None
            or self.headers.get("Authorization") == f"Bearer {server.api_key}"
        )
        with server.lock:
            fault = server.faults.pop(0) if server.faults and authorized else None
            server.requests.append((time.monotonic(), body, fault, authorized))
        if not self.path.endswith("/chat/completions"):
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        if not authorized:
            return self._send(401, {"error": {"message": "invalid API key"}})
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "429":
            return self._send(
                429, {"error": {"message": "rate limited"}}, {"Retry-After": server.retry_after}
            )
        if fault == "500":
            return self._send(500, {"error": {"message": "internal error"}})
        time.sleep(server.slow_s if fault == "slow" else server.delay)
        if fault == "malformed":
            return self._send(200, b'{"choices": [{"message": ')
        self._send(200, server.answer(body))

    def _send(self, status, payload, headers=None):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up first (a slow answer past its timeout)
            self.close_connection = True


if __name__ == "__main__":
    options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
    server = ChatServer(
        port=int(options.get("port", 0)),
        style=options.get("style", "reasoning_content"),
        delay=float(options.get("delay", 0)),
        serve=False,
    )
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()
