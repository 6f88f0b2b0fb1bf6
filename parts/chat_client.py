"""A client for servers that speak OpenAI's chat-completions protocol (vLLM, SGLang, hosted APIs),
for sampling many responses at once and surviving what such servers do: many requests in flight;
retries with exponential backoff and jitter on 429, 5xx, timeouts, dropped connections and malformed
answers, honouring Retry-After; the reasoning as `reasoning_content` or as <think> in `content`,
returned either way in Qwen3's form `<think>\n…\n</think>\n\n…`; n samples per prompt even from a
server that ignores `n`; the API key read from an environment variable, never printed or written.

    stats = sample_chat([ChatRequest(key, messages, [(0, seed0), (1, seed1)])], ClientConfig(url, model),
                        sampling=dict(temperature=0.6, max_tokens=4096), on_sample=lambda key, index, sample: ...)
Standard library only.
"""

import email.utils
import http.client
import json
import os
import queue
import random
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class ClientConfig:
    # fmt: off
    url: str                              # the server's base URL, e.g. http://localhost:8000/v1
    model: str                            # the model name the server serves
    api_key_env: str = "OPENAI_API_KEY"   # the environment variable holding the key (sent as a Bearer token)
    concurrency: int = 64                 # requests in flight
    timeout_s: float = 3600.0             # longest wait for the server's answer; a slower request is retried
    max_retries: int = 8                  # retries of one request: 429, 5xx, timeouts, dropped connections, bad JSON
    backoff_s: float = 1.0                # the first retry waits 0.5-1 x this, each later one twice as long ...
    max_backoff_s: float = 60.0           # ... up to this; a Retry-After header is waited out as the server asks
    n_per_request: int = 1                # samples asked for per request (`n`); any the server leaves out are asked
    #                                       for one by one (each with its own seed)
    progress_s: float = 10.0              # seconds between progress lines; 0 = none
    # fmt: on


class ChatRequest(NamedTuple):
    key: str  # the prompt's id
    messages: list  # [{"role", "content"}]
    samples: list  # [(sample index, seed)] still wanted


def sample_chat(requests: list, cfg: ClientConfig, sampling: dict, on_sample, log=print) -> dict:
    """Ask the server for every (prompt, sample index) of `requests`, cfg.concurrency requests in
    flight, and call on_sample(key, index, sample) from a worker thread as each arrives; sample =
    {content, closed, finish_reason, seed (the request's), choice (its place among the request's
    choices, only when n > 1), prompt_tokens, completion_tokens} (token counts per sample when one
    sample is asked per request, else None). `sampling` goes into every request body (temperature,
    top_p, max_tokens, ...). Returns the counts of the run. Raises ServerRefused on 401/403/404, and
    when no request could connect at all (after max_retries retries: a server still starting has
    that long); a request that fails for good is counted in stats["failed"] and its samples are left
    out (a rerun asks again), never raised: one bad prompt does not stop the others."""
    return _Client(cfg, sampling, on_sample, log).run(requests)


class ServerRefused(Exception):
    """The server refuses this run as a whole (401, 403, 404: a wrong key, model name or URL), or
    nothing answers at its URL: stop at once."""


class _RequestFailed(Exception):
    """One request failed for good (retries exhausted, or a 4xx such as a prompt longer than the
    server's context)."""


class _Client:
    def __init__(self, cfg: ClientConfig, sampling: dict, on_sample, log):
        self.cfg = cfg
        self.sampling = sampling
        self.on_sample = on_sample
        self.log = log
        url = urllib.parse.urlsplit(cfg.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"server URL {cfg.url!r}: expected http(s)://host[:port]/v1")
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port
        self.path = url.path.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
        if key:
            # kept here only: never logged, never written
            self.headers["Authorization"] = f"Bearer {key}"
        self.local = threading.local()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.units = queue.Queue()
        self.outstanding = 0
        self.fatal = None
        self.unreachable_said = False  # "cannot connect, retrying" is said once, not per request
        self.stats = dict(
            requests=0,
            samples=0,
            prompt_tokens=0,
            completion_tokens=0,
            truncated=0,
            retries=Counter(),
            failed=0,
            failures=[],
            refilled=0,
        )

    def run(self, requests: list) -> dict:
        n = max(1, self.cfg.n_per_request)
        units = [
            (r.key, r.messages, r.samples[i : i + n])
            for r in requests
            for i in range(0, len(r.samples), n)
        ]
        total = sum(len(r.samples) for r in requests)
        if not units:
            return self.stats
        self.outstanding = len(units)
        for unit in units:
            self.units.put(unit)
        workers = [
            threading.Thread(target=self._worker, daemon=True)
            for _ in range(min(self.cfg.concurrency, len(units)))
        ]
        t0 = last = time.monotonic()
        for w in workers:
            w.start()
        try:
            for w in workers:
                while w.is_alive():
                    w.join(timeout=0.2)
                    if self.cfg.progress_s and time.monotonic() - last >= self.cfg.progress_s:
                        last = time.monotonic()
                        self.log(self._progress(total, last - t0))
        except KeyboardInterrupt:
            # the workers are daemons: what arrived is written, what is in flight is lost
            self.stop.set()
            raise
        if self.fatal:
            raise self.fatal
        if self.cfg.progress_s:
            self.log(self._progress(total, time.monotonic() - t0))
        return self.stats

    def _progress(self, total: int, elapsed: float) -> str:
        s = self.stats
        rate = s["samples"] / max(elapsed, 1e-9)
        eta = f"{(total - s['samples'] - s['failed']) / rate:.0f}s" if rate else "unknown"
        retries = ", ".join(f"{k}: {v}" for k, v in sorted(s["retries"].items())) or "none"
        return (
            f"samples {s['samples']}/{total} | {s['requests'] / max(elapsed, 1e-9):.1f} req/s, "
            f"{s['completion_tokens'] / max(elapsed, 1e-9):.0f} tok/s | tokens in {s['prompt_tokens']} out "
            f"{s['completion_tokens']} | truncated {s['truncated']} | retries ({retries}) | failed {s['failed']} | "
            f"ETA {eta}"
        )

    def _worker(self):
        while True:
            unit = self.units.get()
            if unit is None:
                return
            try:
                if not self.stop.is_set():
                    self._do(unit)
            except ServerRefused as e:
                with self.lock:
                    self.fatal = self.fatal or e
                self.stop.set()
            except _RequestFailed as e:
                with self.lock:
                    self.stats["failed"] += len(unit[2])
                    if len(self.stats["failures"]) < 20:
                        self.stats["failures"].append(f"{unit[0]}: {e}")
                self.log(f"request for {unit[0]} (samples {[i for i, _ in unit[2]]}) failed: {e}")
            finally:
                with self.lock:
                    self.outstanding -= 1
                    finished = self.outstanding == 0 or self.stop.is_set()
                if finished:  # wake every worker: nothing is left to do
                    for _ in range(self.cfg.concurrency):
                        self.units.put(None)

    def _do(self, unit):
        key, messages, samples = unit
        body = dict(
            self.sampling,
            model=self.cfg.model,
            messages=messages,
            n=len(samples),
            seed=samples[0][1],
        )
        answer = self._post(json.dumps(body).encode())
        choices = sorted(answer["choices"], key=lambda c: c.get("index", 0))[: len(samples)]
        usage = answer.get("usage") or {}
        one = len(samples) == 1
        for position, ((index, _), choice) in enumerate(zip(samples, choices)):
            content, closed = assistant_turn(choice["message"])
            finish = choice.get("finish_reason")
            # what the sample came from: the request's seed (and, with n > 1, its place among the
            # request's choices)
            origin = dict(seed=samples[0][1]) if one else dict(seed=samples[0][1], choice=position)
            self.on_sample(
                key,
                index,
                dict(
                    content=content,
                    closed=closed,
                    finish_reason=finish,
                    **origin,
                    prompt_tokens=usage.get("prompt_tokens") if one else None,
                    completion_tokens=usage.get("completion_tokens") if one else None,
                ),
            )
            with self.lock:
                self.stats["samples"] += 1
                self.stats["truncated"] += finish == "length"
        with self.lock:
            self.stats["prompt_tokens"] += usage.get("prompt_tokens") or 0
            self.stats["completion_tokens"] += usage.get("completion_tokens") or 0
            # a server that ignores `n`: the rest one by one, each with its seed
            missing = samples[len(choices) :]
            self.stats["refilled"] += len(missing)
            self.outstanding += len(missing)
        for sample in missing:
            self.units.put((key, messages, [sample]))

    def _post(self, body: bytes) -> dict:
        """The server's JSON answer to one request, retried as the server and the network
        require."""
        for attempt in range(self.cfg.max_retries + 1):
            wait = None
            try:
                status, retry_after, data = self._send(body)
            except TimeoutError:
                reason = "timeout"
                self._drop_connection()
            except (OSError, http.client.HTTPException) as e:  # refused, reset, dropped mid-answer
                reason = "connection"
                last_error = str(e) or type(e).__name__
                self._drop_connection()
                self._unreachable(attempt, last_error)
            else:
                with self.lock:
                    self.stats["requests"] += 1
                if status == 200:
                    try:
                        return _checked_answer(json.loads(data))
                    except (ValueError, TypeError, AttributeError) as e:
                        reason = "malformed answer"
                        last_error = str(e)
                elif status in (401, 403, 404):
                    raise ServerRefused(
                        f"{self.cfg.url} answered {status} {_snippet(data)} (check the URL, "
                        f"--served_model, and the key in ${self.cfg.api_key_env})"
                    )
                elif status in (408, 429) or status >= 500:
                    reason = str(status)
                    wait = retry_after
                else:
                    raise _RequestFailed(f"HTTP {status} {_snippet(data)}")
            with self.lock:
                self.stats["retries"][reason] += 1
            if attempt == self.cfg.max_retries or self.stop.is_set():
                if reason == "connection":
                    self._unreachable(attempt, last_error, final=True)
                detail = f": {last_error}" if reason in ("malformed answer", "connection") else ""
                raise _RequestFailed(f"gave up after {attempt} retries (last: {reason}{detail})")
            # exponential backoff with jitter, so retries from many threads do not arrive together
            if wait is None:
                cap = min(self.cfg.max_backoff_s, self.cfg.backoff_s * 2**attempt)
                wait = cap * (0.5 + 0.5 * random.random())
            self.stop.wait(wait)

    def _unreachable(self, attempt: int, error: str, final: bool = False):
        """While no request has ever connected: say once that the URL does not answer and that it is
        retried (a server may still be starting); when a request's retries are used up, stop the run
        with ServerRefused."""
        with self.lock:
            # the server has answered before: a dropped connection, retried as usual
            if self.stats["requests"]:
                return
            said, self.unreachable_said = self.unreachable_said, True
        if final:
            raise ServerRefused(
                f"cannot connect to {self.cfg.url} ({error}) after {attempt} retries: is the server "
                "running and listening there? Check --server"
            )
        if not said:
            self.log(
                f"cannot connect to {self.cfg.url} ({error}); retrying up to {self.cfg.max_retries} times, "
                "with growing waits, in case the server is still starting"
            )

    def _send(self, body: bytes) -> tuple:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = self.local.conn = cls(self.host, self.port, timeout=self.cfg.timeout_s)
        conn.request("POST", self.path, body=body, headers=self.headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, _retry_after(response.getheader("Retry-After")), data

    def _drop_connection(self):
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None


def _checked_answer(answer) -> dict:
    """The answer if it has the shape of a chat completion, else ValueError (retried as a malformed
    answer)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("no 'choices' list")
    for c in choices:
        message = c.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content") or "", str):
            raise ValueError("a choice without a message holding text content")
    return answer


def _retry_after(value) -> float | None:
    """Seconds to wait from a Retry-After header: a number of seconds or an HTTP date."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _snippet(data: bytes, limit: int = 300) -> str:
    text = data.decode("utf-8", "replace").strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def assistant_turn(message: dict) -> tuple:
    """(content in Qwen3's form `<think>\\n…\\n</think>\\n\\n…`, reasoning closed?) of a
    chat-completions message. Reasoning comes as `reasoning_content` (DeepSeek's API, vLLM's
    reasoning parsers; `reasoning` in newer vLLM) or inside `content` between <think> tags (the
    opening tag may be in the prompt's template, so only </think> is needed). A reply whose
    reasoning never closed comes back as it is, with closed=False."""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    content = message.get("content") or ""
    if reasoning:
        if not content.strip():  # everything went to the reasoning: it never reached </think>
            return "<think>\n" + reasoning, False
        return _qwen3_turn(reasoning, content), True
    if "</think>" not in content:
        return content, False
    # Qwen3's chat template's reading: the reasoning ends at the first </think>, the answer follows
    # the last one
    return _qwen3_turn(
        content.split("</think>")[0].split("<think>")[-1], content.split("</think>")[-1]
    ), True


def _qwen3_turn(reasoning: str, answer: str) -> str:
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{answer.strip()}"  # Qwen3's assistant turn
