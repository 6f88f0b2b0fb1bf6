"""Distillation, the paper's SFT data recipe (arXiv 2508.07629, §2): sample a teacher k times per
prompt, verify every response, keep responses by the prompt's difficulty, drop duplicate prompts and
those overlapping the benchmarks. For prompt i with k responses, c_i of them verified correct:
    d_i = c_i / k                                   the prompt's difficulty: the teacher's pass rate on it
    kept_i = all k responses       if d_i < 1/2     hard: the wrong ones too (the paper's "mixed" data)
             the c_i correct ones  otherwise        easy: only the correct ones
(the paper: mixed data helps on hard prompts, AIME24 47.29 vs 45.63, and hurts on easy ones, 45.00
vs 40.22; --keep=correct and --keep=all are that ablation's arms). The teacher: a server speaking
OpenAI's chat completions (vLLM, SGLang, an API) or a local Qwen3 checkpoint, or responses already
written (OpenR1-Math-220k's; the toy teacher's, which `python tools/toy.py` writes); samples are
journalled as they arrive, so a rerun of the same command asks only for what is missing.
docs/distillation.md: every option, the outputs.
  python distill.py --server=http://localhost:8000/v1 --served_model=deepseek-ai/DeepSeek-R1-0528 --k=16 \
      --math_prompts=numinamath-1.5.parquet --benchmarks=aime24.jsonl,aime25.jsonl --out_dir=out/distill
  python distill.py --responses=openr1-math-220k.parquet --out_dir=out/openr1   # responses already there: the rule
  python tools/toy.py && T=out/toy/countdown && python distill.py --out_dir=out/distill \
      --responses=$T/teacher/countdown_3.jsonl,$T/teacher/countdown_4.jsonl,$T/teacher/toy_code.jsonl \
      --benchmarks=$T/test/countdown_3.jsonl,$T/test/countdown_4.jsonl      # the toy, as bash train.sh runs it
"""

import hashlib
import json
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import data
import reward
from parts.chat_client import ChatRequest, ClientConfig, ServerRefused, assistant_turn, sample_chat
from parts.decontamination import Decontaminator, PromptFilter
from parts.journal import Journal, changed_settings, lock_folder

# ============================================================================= 1. prompts:
# duplicates, decontamination (parts/decontamination.py: n-gram overlap with the benchmarks)


def read_benchmarks(paths: list) -> list:
    """[(benchmark name, item id, text)] of benchmark files (math or code, guessed from the first
    row; any layout data.py's loaders read; read whole, as eval.py reads them)."""
    items = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such benchmark file (--benchmarks)")
        kind = data.guess_kind(next(data.read_rows(path))[1])
        problems = data.load_code_jsonl(path) if kind == "code" else data.load_math_jsonl(path)
        name = os.path.basename(path)
        items += [(name, p["id"], prompt_text(p["prompt"])) for p in problems]
    return items


def prompt_text(prompt) -> str:
    """The text of a prompt: the string, or the contents of its messages."""
    return prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)


# ============================================================================= 2. the recipe's
# configuration


@dataclass
class DistillConfig:
    # fmt: off
    # prompts: comma-separated files (.jsonl, .json or .parquet), in any layout data.py reads
    math_prompts: str = ""          # problem + answer (data.load_math_jsonl): responses verified by math-verify
    code_prompts: str = ""          # problems with tests (data.load_code_jsonl): responses run in reward.py's sandbox
    sft_prompts: str = ""           # SFT rows (OpenThoughts, OpenCodeReasoning): the turns before the last answer are
    #   the prompt; verified when the row has an answer or tests, else kept unverified (data.load_responses)
    responses: str = ""             # rows that already hold several responses with verdicts (OpenR1-Math-220k's
    #   generations + correctness_math_verify): no sampling, the same rule (data.load_responses)
    skip_bad_rows: bool = False     # skip rows that cannot be graded (counted) instead of stopping
    math_template: str = "{prompt}"  # the user turn sent for a math_prompts problem
    code_template: str = "{prompt}"  # the user turn sent for a code_prompts problem
    benchmarks: str = ""            # benchmark files (AIME, HMMT, LiveCodeBench; any layout eval.py reads): prompts
    #   that overlap one are dropped and the report names the items they matched
    ngram: int = 8                  # words in a row a prompt must share with a benchmark item to be dropped (open-r1: 8;
    #   the paper reports 9)
    # the teacher: a server (OpenAI chat completions: vLLM, SGLang, a hosted API) or a local checkpoint
    server: str = ""                # base URL, e.g. http://localhost:8000/v1
    served_model: str = ""          # the model name the server serves
    api_key_env: str = "OPENAI_API_KEY"  # name of the environment variable holding the API key (never printed or written)
    concurrency: int = 64           # requests in flight
    request_timeout_s: float = 3600.0  # longest wait for one answer (32K tokens take minutes); slower requests are retried
    max_retries: int = 8            # retries of one request before its samples are left for a rerun
    retry_backoff_s: float = 1.0    # the first retry's wait, doubled for each next one (up to 60 s), with jitter
    n_per_request: int = 1          # samples per request (`n`); 1 spreads a prompt's samples over the server's batch
    #   and loses at most one sample per request in flight to a kill
    model: str = ""                 # a local Qwen3 checkpoint directory, sampled with rollout.py's engine
    tokenizer: str = ""             # the local model's tokenizer (a dir or tokenizer.json); empty = the model directory
    max_prompt_len: int = 4096      # local model: longer prompts are left out (counted): their answer would not match
    max_num_seqs: int = 256         # local model: sequences decoded together
    device: str = "auto"            # local model: auto | cpu | cuda
    # sampling (DeepSeek's recommendation for R1: temperature 0.6, top-p 0.95)
    k: int = 16                     # responses per prompt (the paper's at most 16); --responses rows bring their own
    temperature: float = 0.6        # sampling temperature
    top_p: float = 0.95             # nucleus sampling
    top_k: int = 0                  # 0 = not sent (OpenAI's API has no top_k; vLLM and SGLang take it)
    max_tokens: int = 32768         # new tokens per response (the paper's SFT context: 32K)
    extra_body: str = ""            # JSON object merged into every request, e.g. '{"min_p": 0.05}'
    seed: int = 0                   # sample j of prompt p asks for seed sha256(seed, p, j): reruns ask the same
    # the rule
    keep: str = "difficulty"        # difficulty (the paper's rule) | correct (correct only, everywhere) | all (everything)
    hard_below: float = 0.5         # a prompt is hard when the teacher's pass rate is below this (see HARD_BELOW)
    drop_unsolved: bool = False     # drop prompts no response solved (a wrong gold answer looks like that); the paper
    #   keeps them: they are the hardest
    verify_workers: int = 0         # threads verifying responses; 0 = the number of CPUs
    math_timeout_s: float = 5.0     # math-verify's time per response
    code_timeout_s: float = 6.0     # wall clock per code test (LiveCodeBench's limit)
    out_dir: str = "out/distill"    # samples.jsonl, verdicts.jsonl, sft.jsonl, report.json
    progress_s: float = 10.0        # seconds between progress lines
    # fmt: on

    def __post_init__(self):
        teachers = [name for name, on in (("--server", self.server), ("--model", self.model)) if on]
        prompts = self.math_prompts or self.code_prompts or self.sft_prompts
        checks = [
            (len(teachers) <= 1, f"give one teacher, not {' and '.join(teachers)}"),
            (
                bool(teachers) or not prompts,
                "prompts to sample need a teacher: --server or --model",
            ),
            (
                bool(prompts or self.responses),
                "nothing to do: give --math_prompts / --code_prompts / --sft_prompts "
                "with a teacher, or --responses (the toy's: python tools/toy.py writes them)",
            ),
            (
                bool(prompts) or not teachers,
                "a teacher needs prompts: --math_prompts, --code_prompts or --sft_prompts",
            ),
            (
                not self.server or bool(self.served_model),
                "--server needs --served_model (the name the server serves)",
            ),
            (
                not self.model or os.path.isdir(self.model),
                f"--model={self.model}: no such directory" + data.hub_hint(self.model, "model"),
            ),
            (
                self.keep in ("difficulty", "correct", "all"),
                f"--keep={self.keep!r}: use difficulty, correct or all",
            ),
            (0 <= self.hard_below <= 1, "--hard_below must be in [0, 1]"),
            (
                self.k >= 1
                and self.ngram >= 1
                and self.concurrency >= 1
                and self.max_retries >= 0
                and self.n_per_request >= 1,
                "--k, --ngram, --concurrency, --n_per_request >= 1 and --max_retries >= 0",
            ),
            (
                "{prompt}" in self.math_template and "{prompt}" in self.code_template,
                "--math_template and --code_template must contain {prompt}",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise ValueError(f"DistillConfig: {why}")
        try:
            extra = json.loads(self.extra_body) if self.extra_body else {}
        except ValueError as e:
            raise ValueError(f"--extra_body={self.extra_body!r} is not JSON ({e})") from None
        if not isinstance(extra, dict):
            raise ValueError(f"--extra_body={self.extra_body!r} must be a JSON object")


# Why hard_below = 0.5. The paper (§2) splits its SFT prompts into easy and hard by the pass rate of
# a model's samples (it names Qwen3-8B as the judge of difficulty) and finds that keeping incorrect
# responses helps on the hard part and hurts on the easy part; it does not publish the cut-off, and
# reports that most of its prompts were hard, so it kept all responses. Here the judge is the
# teacher itself (its k samples are already there and verified), and the cut is the middle: a prompt
# is hard when the teacher fails more often than it succeeds (d < 1/2); a tie (exactly half right)
# is easy, so its wrong half is dropped. With k = 16 that makes 0-7 correct hard and 8-16 easy.
HARD_BELOW = DistillConfig.hard_below


def teacher_info(cfg: DistillConfig) -> dict:
    """What the samples in out_dir came from: a rerun with another teacher or other sampling must
    use another out_dir."""
    if cfg.server:
        teacher = dict(kind="server", model=cfg.served_model)
    elif cfg.model:
        teacher = dict(kind="local", model=os.path.abspath(cfg.model))
    else:
        teacher = dict(kind="none (--responses only)")
    sampling = dict(
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
        math_template=cfg.math_template,
        code_template=cfg.code_template,
        extra_body=json.loads(cfg.extra_body) if cfg.extra_body else {},
    )
    return dict(teacher=teacher, sampling=sampling)


def sample_seed(seed: int, key: str, index: int) -> int:
    """The seed of sample `index` of prompt `key`: the same in every run, whatever was sampled
    before."""
    return (
        int.from_bytes(hashlib.sha256(f"{seed}/{key}/{index}".encode()).digest()[:4], "little")
        & 0x7FFFFFFF
    )


# ============================================================================= 3. reading the
# prompts


def read_prompts(cfg: DistillConfig, keep) -> tuple:
    """(prompts, loader reports). A prompt is {key, source, messages, answers (math) or None, tests
    (code) or None, k, responses (only from --responses)}; keep(source, key, text) says whether it
    stays (duplicates, benchmarks)."""
    prompts = []
    reports = {}
    taken = set()

    def add(source, pid, prompt, messages, **given):  # given: answers, tests, task, responses
        key = f"{source}/{pid}"
        if keep(source, key, prompt_text(prompt)):
            p = (
                dict(
                    key=key,
                    source=source,
                    messages=messages,
                    answers=None,
                    tests=None,
                    task=None,
                    k=cfg.k,
                    responses=None,
                )
                | given
            )
            prompts.append(dict(p, k=len(p["responses"]) if p["responses"] else p["k"]))

    for path in _files(cfg.math_prompts):
        records = data.load_math_jsonl(path, skip_bad_rows=cfg.skip_bad_rows)
        source = _source_name(path, taken)
        reports[source] = records.report
        for p in records:
            answers = p.get("answers", [p["answer"]]) if "answer" in p else None
            add(
                source,
                p["id"],
                p["prompt"],
                _messages(p["prompt"], cfg.math_template),
                answers=answers,
                task=countdown_task(p),
            )
    for path in _files(cfg.code_prompts):
        records = data.load_code_jsonl(path, skip_bad_rows=cfg.skip_bad_rows)
        source = _source_name(path, taken)
        reports[source] = records.report
        for p in records:
            add(
                source,
                p["id"],
                p["prompt"],
                _messages(p["prompt"], cfg.code_template),
                tests=p["tests"],
            )
    for option, with_responses in ((cfg.sft_prompts, False), (cfg.responses, True)):
        for path in _files(option):
            records = data.load_responses(path, skip_bad_rows=cfg.skip_bad_rows)
            source = _source_name(path, taken)
            reports[source] = records.report
            for p in records:
                answers = [p["answer"]] if p["answer"] is not None else None
                add(
                    source,
                    p["id"],
                    p["prompt"],
                    _messages(p["prompt"]),
                    answers=answers,
                    tests=p.get("tests"),
                    task=countdown_task(p),
                    responses=p["responses"] if with_responses else None,
                )
    return prompts, reports


def countdown_task(p: dict) -> dict | None:
    """The task of a Countdown row (its responses are verified by Countdown's checker), else
    None."""
    return (
        dict(kind="countdown", numbers=p["numbers"], target=p["target"])
        if p.get("kind") == "countdown"
        else None
    )


def _files(option: str) -> list:
    return [p.strip() for p in option.split(",") if p.strip()]


def _source_name(path: str, taken: set) -> str:
    name = os.path.splitext(os.path.basename(path))[0]
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _messages(prompt, template: str = "{prompt}") -> list:
    if isinstance(prompt, str):
        return [{"role": "user", "content": template.replace("{prompt}", prompt)}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


# ============================================================================= 4. the teachers


def sample_server(cfg: DistillConfig, todo: list, samples: Journal) -> dict:
    """The missing samples `todo` ([(prompt, index)]) from the server, appended to `samples` as they
    arrive."""
    client = ClientConfig(
        url=cfg.server,
        model=cfg.served_model,
        api_key_env=cfg.api_key_env,
        concurrency=cfg.concurrency,
        timeout_s=cfg.request_timeout_s,
        max_retries=cfg.max_retries,
        backoff_s=cfg.retry_backoff_s,
        n_per_request=cfg.n_per_request,
        progress_s=cfg.progress_s,
    )
    sampling = dict(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens)
    if cfg.top_k:
        sampling["top_k"] = cfg.top_k
    sampling.update(json.loads(cfg.extra_body) if cfg.extra_body else {})
    wanted = {}
    for p, j in todo:
        wanted.setdefault(p["key"], (p, []))[1].append((j, sample_seed(cfg.seed, p["key"], j)))
    requests = [ChatRequest(key, p["messages"], pairs) for key, (p, pairs) in wanted.items()]

    def on_sample(key, index, sample):
        samples.append(dict(id=key, sample=index, **sample))

    return sample_chat(requests, client, sampling, on_sample)


def sample_local(cfg: DistillConfig, todo: list, samples: Journal) -> dict:
    """The missing samples from a local Qwen3 checkpoint through rollout.py's engine (torch is
    imported here only). A prompt's k samples are generated together with seed sample_seed(seed,
    prompt, 0); those already written are not written again, so a rerun writes the same samples."""
    import torch

    from model import from_pretrained
    from rollout import LLMEngine, SamplingParams

    use_cuda = torch.cuda.is_available() if cfg.device == "auto" else cfg.device == "cuda"
    device = torch.device("cuda" if use_cuda else "cpu")
    tokenizer = data.load_tokenizer(cfg.tokenizer or cfg.model)
    model = from_pretrained(
        cfg.model, dtype=torch.bfloat16 if use_cuda else torch.float32, device=device
    )
    engine = LLMEngine(
        model, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_prompt_len + cfg.max_tokens
    )
    stop_ids = tuple(data.stop_token_ids(tokenizer))
    prompts = list({p["key"]: p for p, _ in todo}.values())
    stats = Counter()
    t0 = time.monotonic()
    chunk = max(1, 4 * cfg.max_num_seqs // cfg.k)
    for start in range(0, len(prompts), chunk):
        batch = []
        ids = []
        for p in prompts[start : start + chunk]:
            prompt_ids = data.encode_prompt(tokenizer, p["messages"])
            if len(prompt_ids) > cfg.max_prompt_len:
                stats["prompts_too_long"] += 1
                continue
            batch.append(p)
            ids.append(prompt_ids)
        params = [
            SamplingParams(
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=cfg.top_k,
                n=cfg.k,
                max_tokens=cfg.max_tokens,
                stop_token_ids=stop_ids,
                seed=sample_seed(cfg.seed, p["key"], 0),
            )
            for p in batch
        ]

        def on_finish(i, j, s):
            content, closed = assistant_turn(
                {"content": tokenizer.decode(s.token_ids, skip_special_tokens=True)}
            )
            if samples.append(
                dict(
                    id=batch[i]["key"],
                    sample=j,
                    content=content,
                    closed=closed,
                    finish_reason=s.finish_reason,
                    seed=params[i].seed,
                    prompt_tokens=len(ids[i]),
                    completion_tokens=len(s.token_ids),
                )
            ):
                stats["samples"] += 1
                stats["prompt_tokens"] += len(ids[i])
                stats["completion_tokens"] += len(s.token_ids)
                stats["truncated"] += s.finish_reason == "length"

        if batch:
            engine.generate(ids, params, on_finish=on_finish)
        elapsed = time.monotonic() - t0
        print(
            f"local teacher: {min(start + chunk, len(prompts))}/{len(prompts)} prompts | {stats['completion_tokens']} "
            f"tokens, {stats['completion_tokens'] / max(elapsed, 1e-9):.0f} tok/s",
            flush=True,
        )
    return dict(stats)


# ============================================================================= 5. verification and
# the rule


def verify_all(cfg: DistillConfig, prompts: list, samples: Journal, verdicts: Journal) -> None:
    """A verdict for every sample that has none yet, appended to `verdicts` (resumable like the
    samples). A response cut at max_tokens or whose reasoning never closed is wrong without a check;
    a source's own verdict is taken as it is; a gold answer math-verify cannot read is recorded as
    an error of its prompt."""
    from concurrent.futures import ThreadPoolExecutor

    todo = [
        p
        for p in prompts
        if any((p["key"], j) in samples and (p["key"], j) not in verdicts for j in range(p["k"]))
    ]
    if not todo:
        return
    done = [0]
    t0 = time.monotonic()
    last = [time.monotonic()]
    lock = threading.Lock()
    total = sum(p["k"] for p in todo)  # responses to judge

    def one_prompt(p):
        judged = {}
        for j in range(p["k"]):
            key = (p["key"], j)
            if key not in samples or key in verdicts:
                continue
            s = samples.read(key)
            if "source_correct" in s and s["source_correct"] is not None:
                v = dict(correct=s["source_correct"], reward=None, reason="the source's verdict")
            elif s["finish_reason"] == "length":
                v = dict(correct=False, reward=None, reason="truncated at max_tokens")
            elif not s["closed"]:
                v = dict(correct=False, reward=None, reason="unfinished reasoning (no </think>)")
            else:
                part = _judged_part(p, s["content"])
                if part not in judged:
                    try:
                        judged[part] = verify(p, s["content"], cfg)
                    # the gold answer or the tests are broken: the data's fault
                    except reward.BadReference as e:
                        judged[part] = dict(
                            correct=None, reward=None, reason="cannot verify", error=str(e)
                        )
                v = judged[part]
            verdicts.append(dict(id=p["key"], sample=j, **v))
            with lock:
                done[0] += 1
                if cfg.progress_s and time.monotonic() - last[0] >= cfg.progress_s:
                    last[0] = time.monotonic()
                    rate = done[0] / (last[0] - t0)
                    print(
                        f"verified {done[0]}/{total} | {rate:.1f}/s | ETA {(total - done[0]) / rate:.0f}s",
                        flush=True,
                    )

    with ThreadPoolExecutor(cfg.verify_workers or os.cpu_count() or 1) as pool:
        for _ in pool.map(one_prompt, todo):
            pass


def verify(prompt: dict, content: str, cfg: DistillConfig) -> dict:
    """{correct: True | False | None (nothing to verify against), reward, reason} of one finished response."""
    if prompt["task"]:
        task = prompt["task"]
    elif prompt["answers"] is not None:
        task = dict(kind="math", answer=prompt["answers"][0], answers=prompt["answers"])
    elif prompt["tests"]:
        task = dict(kind="code", tests=prompt["tests"])
    else:
        return dict(correct=None, reward=None, reason="unverified: no answer or tests")
    v = reward.judge(
        task,
        content,
        sandbox=reward.SandboxConfig(timeout_s=cfg.code_timeout_s),
        math_timeout_s=cfg.math_timeout_s,
    )
    return dict(correct=v.correct, reward=v.reward, reason=v.reason)


def _judged_part(prompt: dict, content: str):
    """What a verdict depends on: the text after the last </think> (math), the program (code). Equal
    parts of one prompt's responses are judged once (a real teacher rarely repeats itself; the toy
    teacher does)."""
    return (
        reward.extract_code(content)
        if prompt["tests"] and prompt["answers"] is None
        else reward.extract_answer_region(content)
    )


def write_sft(
    cfg: DistillConfig, prompts: list, samples: Journal, verdicts: Journal, path: str
) -> dict:
    """Apply the rule to every prompt whose k samples all have verdicts and write the kept responses
    as SFT rows {messages, id, source, difficulty, pass_rate, correct}, in a random order fixed by
    the seed (sft.py packs documents of one length in file order: the k responses of a prompt side
    by side would fill a batch with few prompts), to a temporary file, then renamed. Returns the
    counts per source x difficulty and the prompts left out (incomplete, or whose verification
    failed)."""
    counts = {}
    incomplete = 0
    errors = []
    rows = []
    for p in prompts:
        keys = [(p["key"], j) for j in range(p["k"])]
        if not all(key in verdicts for key in keys):
            incomplete += 1
            continue
        judged = [verdicts.read(key) for key in keys]
        broken = next((v for v in judged if "error" in v), None)
        if broken:
            errors.append(f"{p['key']}: {broken['error']}")
            continue
        flags = [v["correct"] for v in judged]
        difficulty, kept = keep_responses(flags, cfg.keep, cfg.hard_below, cfg.drop_unsolved)
        c = counts.setdefault(p["source"], {}).setdefault(difficulty, Counter())
        c["prompts"] += 1
        c["responses"] += len(keys)
        c["correct"] += sum(f is True for f in flags)
        for key, flag, keep_it, v in zip(keys, flags, kept, judged):
            if not keep_it:
                c["dropped_" + ("unsolved" if difficulty == "unsolved" else "wrong")] += 1
            # kept by the rule, never trained on
            elif v["reason"].startswith(("truncated", "unfinished")):
                c["dropped_" + v["reason"].split()[0]] += 1
            else:
                c["kept"] += 1
                c["kept_wrong"] += flag is False
                c["kept_unverified"] += flag is None
                rows.append(
                    (
                        p,
                        key,
                        difficulty,
                        [sum(f is True for f in flags), sum(f is not None for f in flags)],
                        flag,
                    )
                )
    random.Random(f"sft-order-{cfg.seed}").shuffle(rows)
    with open(path + ".tmp", "w") as out:
        for p, key, difficulty, pass_rate, flag in rows:
            row = dict(
                messages=p["messages"]
                + [{"role": "assistant", "content": samples.read(key)["content"]}],
                id=f"{key[0]}/{key[1]}",
                source=p["source"],
                difficulty=difficulty,
                pass_rate=pass_rate,
                correct=flag,
            )
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    return dict(
        counts={s: {d: dict(c) for d, c in by.items()} for s, by in counts.items()},
        incomplete_prompts=incomplete,
        verification_errors=errors,
    )


def keep_responses(
    verdicts: list,
    keep: str = "difficulty",
    hard_below: float = HARD_BELOW,
    drop_unsolved: bool = False,
) -> tuple:
    """The rule for one prompt: (difficulty, kept flags) from its responses' verdicts (True correct,
    False wrong, None no verdict). difficulty: "hard" or "easy" by the pass rate d = correct /
    verdicts (hard iff d < hard_below, compared exactly: 1/2 < 0.5 is false), "unsolved" when
    drop_unsolved drops a prompt no response solved, or "unverified" when no response has a verdict
    (every response is kept, under every rule)."""
    judged = [v for v in verdicts if v is not None]
    if not judged:
        return "unverified", [True] * len(verdicts)
    correct = sum(judged)
    if drop_unsolved and correct == 0:
        return "unsolved", [False] * len(verdicts)
    hard = Fraction(correct, len(judged)) < Fraction(str(hard_below))
    difficulty = "hard" if hard else "easy"
    if keep == "all" or (keep == "difficulty" and hard):
        return difficulty, [True] * len(verdicts)
    return difficulty, [v is True for v in verdicts]


# ============================================================================= 6. main


def main(cfg: DistillConfig) -> dict:
    t0 = time.monotonic()
    os.makedirs(cfg.out_dir, exist_ok=True)
    try:  # two runs appending to one journal would write a sample twice
        lock = lock_folder(cfg.out_dir)
    except BlockingIOError:
        _bad_input(
            f"another distill.py is writing to {cfg.out_dir}; wait for it or use another --out_dir"
        )
    journals = []
    try:
        # samples already there must come from the same teacher and sampling, or the rule would mix them
        changed = changed_settings(os.path.join(cfg.out_dir, "run.json"), teacher_info(cfg))
        if changed:
            _bad_input(
                f"{cfg.out_dir} holds samples of another teacher or other sampling settings "
                f"({', '.join(changed)} differ); use another --out_dir"
            )
        try:
            items = read_benchmarks(_files(cfg.benchmarks))
            prompt_filter = PromptFilter(Decontaminator(items, cfg.ngram) if items else None)
            prompts, loader_reports = read_prompts(cfg, prompt_filter.keep)
            journals += [
                Journal(os.path.join(cfg.out_dir, name))
                for name in ("samples.jsonl", "verdicts.jsonl")
            ]
        except (data.DataError, OSError, ValueError) as e:
            _bad_input(str(e))
        samples, verdicts = journals
        print(
            f"prompts: {len(prompts)} kept of {sum(c['read'] for c in prompt_filter.counts.values())} read "
            f"({len(items)} benchmark items checked, n = {cfg.ngram})",
            flush=True,
        )
        for journal in journals:
            if journal.torn:
                print(
                    f"{journal.path}: dropped a last line torn by a kill ({journal.torn} bytes); it is redone"
                )
        t_sample = time.monotonic()
        sampling = sample_missing(cfg, prompts, samples)
        sample_s = time.monotonic() - t_sample
        t_verify = time.monotonic()
        verify_all(cfg, prompts, samples, verdicts)
        verify_s = time.monotonic() - t_verify
        written = write_sft(cfg, prompts, samples, verdicts, os.path.join(cfg.out_dir, "sft.jsonl"))
        report = dict(
            teacher_info(cfg),
            endpoint=cfg.server or None,
            k=cfg.k,
            rule=dict(keep=cfg.keep, hard_below=cfg.hard_below, drop_unsolved=cfg.drop_unsolved),
            loaders=loader_reports,
            decontamination=dict(
                ngram=cfg.ngram,
                benchmarks=sorted({b for b, _, _ in items}),
                **prompt_filter.report(),
            ),
            **written,
            **sample_totals(prompts, samples),
            this_run=dict(
                teacher={k: v for k, v in sampling.items() if k != "failures"},
                failures=sampling.get("failures", []),
                sample_s=round(sample_s, 1),
                verify_s=round(verify_s, 1),
                total_s=round(time.monotonic() - t0, 1),
            ),
            sft_file=os.path.join(cfg.out_dir, "sft.jsonl"),
            sft_rows=sum(
                c.get("kept", 0) for by in written["counts"].values() for c in by.values()
            ),
        )
        with open(os.path.join(cfg.out_dir, "report.json"), "w") as f:
            json.dump(report, f, indent=2)
        print_report(report)
        print(
            f"wrote {report['sft_rows']} SFT rows to {report['sft_file']} and {cfg.out_dir}/report.json "
            f"(sampling {sample_s:.1f}s, verification {verify_s:.1f}s, {time.monotonic() - t0:.1f}s in all)"
        )
        if not _check_complete(cfg, written, sampling):
            # prompts still miss samples: a script knows to run the command again
            raise SystemExit(1)
        return report
    finally:
        for journal in journals:
            journal.close()
        lock.close()


def sample_missing(cfg: DistillConfig, prompts: list, samples: Journal) -> dict:
    """Copy in the responses of rows that bring their own (judged later by the same rule), then ask
    the teacher for every sample not yet in the journal. Returns the teacher's counts of this
    run."""
    for p in prompts:
        for j, r in enumerate(p["responses"] or []):
            samples.append(
                dict(
                    id=p["key"],
                    sample=j,
                    content=r["content"],
                    closed=True,
                    finish_reason=None,
                    source_correct=r["correct"],
                )
            )
    todo = [
        (p, j)
        for p in prompts
        if not p["responses"]
        for j in range(p["k"])
        if (p["key"], j) not in samples
    ]
    print(f"samples: {len(samples)} in {samples.path}, {len(todo)} to sample", flush=True)
    teacher = sample_server if cfg.server else sample_local
    try:
        return teacher(cfg, todo, samples) if todo else {}
    except ServerRefused as e:
        _bad_input(str(e))


def _check_complete(cfg: DistillConfig, written: dict, sampling: dict) -> bool:
    """Prompts that could not be verified stop the run (an InputError, exit 2) unless skip_bad_rows;
    prompts still missing samples are said, and False returned (main exits 1, so a script knows to
    run the command again)."""
    if written["verification_errors"] and not cfg.skip_bad_rows:
        _bad_input(
            f"{len(written['verification_errors'])} prompt(s) could not be verified, e.g. "
            f"{written['verification_errors'][0]}; fix the data, or --skip_bad_rows=true leaves them out "
            "(listed in report.json)"
        )
    if written["incomplete_prompts"]:
        print(
            f"distill.py: {written['incomplete_prompts']} prompt(s) still miss samples ({sampling.get('failed', 0)} "
            "failed in this run, see above); run the same command again to ask for them",
            flush=True,
        )
        return False
    return True


def sample_totals(prompts: list, samples: Journal) -> dict:
    """Truncated and unfinished responses and the teacher's token usage over every sample of the
    kept prompts."""
    usage = Counter()
    truncated = 0
    unfinished = 0
    for p in prompts:
        for j in range(p["k"]):
            if (p["key"], j) in samples:
                s = samples.read((p["key"], j))
                usage["prompt_tokens"] += s.get("prompt_tokens") or 0
                usage["completion_tokens"] += s.get("completion_tokens") or 0
                truncated += s["finish_reason"] == "length"
                unfinished += not s["closed"] and s["finish_reason"] != "length"
    return dict(
        truncated=truncated,
        unfinished=unfinished,
        teacher_usage=dict(usage) if any(usage.values()) else "not reported by this teacher",
    )


def print_report(report: dict) -> None:
    print(
        f"{'source':24s} {'difficulty':10s} {'prompts':>8s} {'responses':>9s} {'correct':>8s} {'kept':>7s} "
        f"{'kept wrong':>10s}  dropped"
    )
    for source, by in report["counts"].items():
        for difficulty, c in sorted(by.items()):
            dropped = (
                ", ".join(f"{k[8:]} {v}" for k, v in sorted(c.items()) if k.startswith("dropped_"))
                or "-"
            )
            print(
                f"{source:24s} {difficulty:10s} {c.get('prompts', 0):8d} {c.get('responses', 0):9d} "
                f"{c.get('correct', 0):8d} {c.get('kept', 0):7d} {c.get('kept_wrong', 0):10d}  {dropped}"
            )
    d = report["decontamination"]
    print(
        "prompts read / duplicates / contaminated per source: "
        + "; ".join(
            f"{s}: {c.get('read', 0)} / {c.get('duplicates', 0)} / {c.get('contaminated', 0)}"
            for s, c in d["sources"].items()
        )
        + f" | benchmark items matched: {d['benchmark_items_matched']}"
    )
    for hit in d["hits"][:10]:
        print(
            f"  {hit['benchmark']} item {hit['item']}: {hit['prompts']} prompt(s), e.g. {', '.join(hit['examples'])}"
        )


def _bad_input(message: str):
    """Bad input: an InputError, one line and exit status 2 at the entry point (run_entry_point)."""
    from parts.trainer import InputError  # here, not at the top: distill.py itself needs no torch

    raise InputError(message)


if __name__ == "__main__":
    from parts.cli import parse_config  # the project's one option parser

    # bad input as one line, exit status 2 (imports torch)
    from parts.trainer import run_entry_point

    run_entry_point(
        main,
        parse_config(
            DistillConfig,
            usage="usage: python distill.py [--key=value ...]   (examples at "
            "the top of distill.py)",
        ),
    )
