"""Evaluation of a reasoning model: Avg@k and unbiased pass@k on math and code benchmarks.

k responses per problem, each scored by reward.py (math: math-verify after the last </think>; code:
correct = every test passes in the sandbox); with c_i of problem i's k samples correct, over N
problems:
    Avg@k  = 1/N sum_i c_i / k                                   (the unbiased estimate of pass@1)
    pass@j = 1/N sum_i [1 - C(k - c_i, j) / C(k, j)]             (Codex paper; j <= k)
(the estimators: parts/pass_at_k.py).
Problem i of benchmark B samples with seed sha256(seed, B, i): results do not depend on ranks or
batching; results.json records every setting, samples.jsonl every response with its verdict.
Sampling as the paper's: T 0.6, top-p 0.95 (the authors' script also top-k 20 and a repetition
penalty of 1.05, which the engine does not have). during_training is gppo.py's held-out evaluation
every --eval_every steps, on the run's own engine.
Run:  python eval.py --model=out/gppo/hf               # the toy's held-out sets (python tools/toy.py), CPU
  torchrun --nproc_per_node=8 eval.py --model=CKPT --math_data=aime24.jsonl,aime25.jsonl --k=64 --max_tokens=32768
  python eval.py --server=http://localhost:8000/v1 --served_model=NAME --math_data=aime24.jsonl   # a served model
  python eval.py --compare=out/eval/sft/results.json,out/eval/rl/results.json --labels=SFT,GPPO  # one table
  python eval.py --model=CKPT --prompt="What is 17 * 23?" --k=2                                  # print 2 samples
"""

import os

# read when torch loads OpenMP: see trainer.set_threads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dataclasses
import datetime
import hashlib
import inspect
import json
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch
import torch.distributed as dist

import data
import reward
from data import read
from model import from_pretrained
from parts import chat_client, trainer
from parts.results_table import TableError, compare_files, format_table
from parts.cli import parse_config
from parts.pass_at_k import pass_ks, summarize
from parts.trainer import InputError, agree_on_inputs, init_distributed, print0, run_entry_point
from parts.trainer import set_threads
from rollout import LLMEngine, SamplingParams, sample_seed


@dataclass
class EvalConfig:
    # fmt: off
    model: str = "out/gppo/hf"       # a Hugging Face Qwen3 directory
    tokenizer: str = ""              # a dir or tokenizer.json; empty = the model directory
    # benchmarks: comma-separated files (the formats data.py reads); none given = the toy's held-out sets (--toy)
    math_data: str = ""              # AIME style: {problem|question, answer} or {messages, meta.solution}; or
    #                                  Countdown's {target, nums}
    code_data: str = ""              # LiveCodeBench rows, or {prompt, tests}
    date_from: str = ""              # code: keep date_from <= contest_date < date_to (YYYY-MM-DD);
    date_to: str = ""                # LCB v5 = 2024-08-01..2025-02-01, v6 = 2025-02-01..2025-05-01
    toy: str = "countdown"           # no data given: the toy's held-out sets (python tools/toy.py --task=TOY writes
    #                                  them): countdown: 3 and 4 numbers, and programs | sums: 3-digit sums, and
    #                                  programs | none: no toy (data.TOY_FILES)
    # sampling (paper: temperature 0.6, top-p 0.95; k = 64 math, 8 code; max_tokens 32768)
    k: int = 8                       # samples per problem
    pass_k: str = ""                 # e.g. 1,4,8; empty = 1, powers of 4 below k, and k
    temperature: float = 0.6         # sampling temperature (paper: 0.6)
    top_p: float = 0.95              # nucleus sampling (paper: 0.95)
    top_k: int = 0                   # 0 = off (the authors' script: 20)
    max_tokens: int = 256            # new tokens per response (paper: 32768)
    max_prompt_len: int = 4096       # longer prompts are left-truncated (counted in results.json)
    seed: int = 0                    # problem i's samples use seed sha256(seed, benchmark, i)
    # engine and scoring
    max_num_seqs: int = 256          # sequences the engine decodes together
    chunk_problems: int = 0          # problems per generate() call on a rank; 0 = 4 * max_num_seqs // k
    reward_workers: int = 8          # threads scoring responses
    sandbox_cores: int = 0           # code tests running at once in this rank; 0 = usable cores / local ranks
    sandbox_python: str = ""         # interpreter for candidate programs, e.g. a virtualenv with numpy (README)
    device: str = "auto"             # auto | cpu | cuda
    dtype: str = "auto"              # auto (bfloat16 on GPU, float32 on CPU) | bfloat16 | float32
    threads: int = 0                 # CPU threads per rank; 0 = usable cores / ranks on this machine
    dist_timeout_minutes: float = 120.0  # how long a rank may wait for the others (ranks sample on their own)
    out_dir: str = "out/eval"        # results.json and samples.jsonl
    # one-prompt mode: a look at what a model says, with the sampling options above; evaluates nothing
    prompt: str = ""                 # one user turn (Qwen3 chat template): print its k samples and their logprobs
    # a served model instead of --model: OpenAI chat completions (vLLM, SGLang, a hosted API)
    server: str = ""                 # base URL, e.g. http://localhost:8000/v1; sampled there, scored here
    served_model: str = ""           # the model name the server serves (recorded in results.json with the URL)
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the API key (never printed or written)
    concurrency: int = 64            # requests in flight
    request_timeout_s: float = 3600.0  # longest wait for one answer; slower requests are retried
    max_retries: int = 8             # retries of one request (429, 5xx, timeouts, dropped connections)
    # compare mode: one table of several results.json files side by side; evaluates nothing
    compare: str = ""                # results.json files, comma-separated: one table side by side
    labels: str = ""                 # column names for --compare, comma-separated
    # fmt: on

    def __post_init__(self):
        if self.compare:
            return
        for name, value in (("date_from", self.date_from), ("date_to", self.date_to)):
            try:
                datetime.date.fromisoformat(value) if value else None
            except ValueError:
                raise ValueError(f"--{name}={value!r} is not a date YYYY-MM-DD") from None
        checks = [
            (self.k >= 1, "k must be >= 1"),
            (self.toy in data.TOY_TASKS, f"toy must be one of {', '.join(data.TOY_TASKS)}"),
            (not self.server or bool(self.served_model), "--server needs --served_model"),
            (
                self.k <= self.max_num_seqs,
                "k must be <= max_num_seqs (a problem's samples decode together)",
            ),
            (
                self.dtype in ("auto", "bfloat16", "float32"),
                "dtype must be auto, bfloat16 or float32",
            ),
            (
                self.reward_workers >= 1 and self.chunk_problems >= 0,
                "reward_workers >= 1, chunk_problems >= 0",
            ),
            (
                not self.sandbox_python or os.path.exists(self.sandbox_python),
                f"--sandbox_python={self.sandbox_python}: no such interpreter",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise ValueError(f"EvalConfig: {why}")
        pass_ks(self)  # fails now on a bad --pass_k


# ----------------------------------------------------------------------------- main


def main(cfg: EvalConfig):
    if cfg.compare:
        try:
            return print(compare_files(cfg.compare, cfg.labels))
        except TableError as e:
            raise InputError(f"--compare={cfg.compare} (--labels={cfg.labels}): {e}") from None
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    if cfg.server:
        benchmarks = read("--math_data/--code_data", load_benchmarks, cfg)
        results, samples = evaluate_served(benchmarks, cfg)
        return write_results(
            cfg,
            dict(
                endpoint=cfg.server,
                served_model=cfg.served_model,
                model_label=cfg.served_model,
                command=shlex.join(sys.argv),
                started=started,
                wall_s=time.perf_counter() - t0,
                config=dataclasses.asdict(cfg),
                **results,
            ),
            samples,
        )
    rank, world, device = init_distributed(cfg.device, cfg.dist_timeout_minutes)
    set_threads(cfg.threads, device)
    dtype = {
        "auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
    }[cfg.dtype]

    def load():  # every rank reads; all stop together on bad input
        if not os.path.isfile(os.path.join(cfg.model, "config.json")):
            raise InputError(
                f"--model={cfg.model}: no checkpoint there (no config.json): run sft.py / gppo.py, "
                "or `bash train.sh`, or pass --model=DIR (a Hugging Face Qwen3 directory)"
                + data.hub_hint(cfg.model, "model")
            )
        tokenizer = read(
            f"--tokenizer={cfg.tokenizer or cfg.model}",
            data.load_tokenizer,
            cfg.tokenizer or cfg.model,
        )
        benchmarks = [] if cfg.prompt else read("--math_data/--code_data", load_benchmarks, cfg)
        return (
            tokenizer,
            benchmarks,
            read(f"--model={cfg.model}", from_pretrained, cfg.model, dtype=dtype, device=device),
        )

    tokenizer, benchmarks, model = agree_on_inputs(load)
    if cfg.prompt:
        return print_samples(model, tokenizer, cfg) if rank == 0 else None
    sizes = ", ".join(f"{b['name']} ({len(b['problems'])})" for b in benchmarks)
    print0(
        f"evaluating {cfg.model} on {sizes} | k={cfg.k} T={cfg.temperature} top_p={cfg.top_p} top_k={cfg.top_k} "
        f"max_tokens={cfg.max_tokens} | {world} rank(s)"
    )
    results, samples = evaluate_model(model, tokenizer, benchmarks, cfg)
    if rank == 0:
        write_results(
            cfg,
            dict(
                model=os.path.abspath(cfg.model),
                model_label=model_label(cfg.model),
                tokenizer=os.path.abspath(cfg.tokenizer or cfg.model),
                command=shlex.join(sys.argv),
                device=str(device),
                dtype=str(dtype).removeprefix("torch."),
                device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                started=started,
                wall_s=time.perf_counter() - t0,
                config=dataclasses.asdict(cfg),
                **results,
            ),
            samples,
        )


def model_label(path: str) -> str:
    """A model directory's name in tables: its path relative to the working directory (out/gppo/hf,
    not just hf)."""
    return (
        os.path.relpath(path)
        if not os.path.relpath(path).startswith("..")
        else os.path.normpath(path)
    )


def write_results(cfg, results: dict, samples: list):
    os.makedirs(cfg.out_dir, exist_ok=True)
    with open(os.path.join(cfg.out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(cfg.out_dir, "samples.jsonl"), "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in samples)
    print(format_table([results], [results["model_label"]]))
    print(
        f"wrote {cfg.out_dir}/results.json and samples.jsonl ({len(samples)} samples) in {results['wall_s']:.1f}s"
    )


# ----------------------------------------------------------------------------- benchmarks


def load_benchmarks(cfg) -> list:
    """[{name, kind, source, problems}] from the data files (.jsonl, .json or .parquet; a benchmark
    is read whole, no row skipped), or the toy's held-out sets if none (a set of Countdown rows is
    of kind countdown)."""
    benchmarks = []
    math_data = cfg.math_data
    code_data = cfg.code_data
    if not (math_data or code_data or cfg.toy == "none"):
        math_data = read(f"--toy={cfg.toy}", data.toy_files, cfg.toy, "eval_math")
        code_data = read(f"--toy={cfg.toy}", data.toy_files, cfg.toy, "eval_code")
    for kind, files in (("math", math_data), ("code", code_data)):
        for path in [f.strip() for f in files.split(",") if f.strip()]:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{path}: no such benchmark file (--{kind}_data)")
            problems = data.load_math_jsonl(path) if kind == "math" else data.load_code_jsonl(path)
            # Countdown rows: countdown
            graded_as = problems[0].get("kind", kind) if problems else kind
            bench = dict(
                name=os.path.splitext(os.path.basename(path))[0],
                kind=graded_as,
                source=os.path.abspath(path),
            )
            if kind == "code" and (cfg.date_from or cfg.date_to):
                bench.update(
                    problems_in_file=len(problems), date_window=[cfg.date_from, cfg.date_to]
                )
                problems = data.in_date_window(problems, path, cfg.date_from, cfg.date_to)
            if not problems:
                window = " in the date window" if "date_window" in bench else ""
                raise data.DataError(f"{path}: no problems to evaluate{window}")
            while bench["name"] in {b["name"] for b in benchmarks}:
                bench["name"] += "_"
            benchmarks.append(dict(bench, problems=problems))
    if not benchmarks:
        raise InputError(
            "nothing to evaluate: give --math_data / --code_data, or --toy=countdown|sums"
        )
    return benchmarks


# ------------------------------------------------------------- sampling, then scoring as it arrives


def evaluate_model(model, tokenizer, benchmarks: list, cfg):
    """In-process entry point: build an engine around `model` and evaluate (under torchrun:
    sharded)."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    engine = LLMEngine(
        model, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_prompt_len + cfg.max_tokens
    )
    return evaluate(engine, tokenizer, benchmarks, cfg, rank, world)


def evaluate(engine, tokenizer, benchmarks: list, cfg, rank: int = 0, world: int = 1):
    """Sample k responses per problem with `engine` (an LLMEngine, or anything with its generate()),
    score and aggregate. Every rank gets the same (results, samples), samples sorted by benchmark,
    problem, sample."""

    def sample(bench, emit):
        problems, report = data.encode_prompts(
            tokenizer, bench["problems"], cfg.max_prompt_len, "truncate"
        )
        for record in sample_share(
            engine, tokenizer, dict(bench, problems=problems), cfg, rank, world
        ):
            emit(record, problems[record["problem_index"]])
        return dict(prompts=report)

    return score_benchmarks(
        benchmarks, cfg, sample, dict(sampling=sampling_settings(cfg, tokenizer)), rank, world
    )


def during_training(
    engine, tokenizer, problems: list, cfg, step: int, rank: int, world: int
) -> dict:
    """A training run's held-out accuracy after `step` steps (gppo.py's --eval_every), on its
    engine, the problems shared out among the ranks: greedy (eval_accuracy) and, with cfg.eval_k
    samples each at the run's temperature and top-p, Avg@k (eval_avg_k) and pass@k (eval_pass_k);
    printed. cfg: the run's (GPPOConfig's sampling, eval_* and sandbox fields)."""
    held_out = [dict(name="held_out", kind=problems[0]["kind"], problems=problems)]
    settings = dict(
        max_tokens=cfg.max_response_len,
        max_prompt_len=cfg.max_prompt_len,
        seed=cfg.eval_seed,
        reward_workers=cfg.reward_workers,
        sandbox_cores=cfg.sandbox_cores,
        sandbox_python=cfg.sandbox_python,
    )

    def results(**sampling) -> dict:
        eval_cfg = EvalConfig(**settings, **sampling)
        found, _ = evaluate(engine, tokenizer, held_out, eval_cfg, rank, world)
        return found["benchmarks"]["held_out"]

    greedy = results(k=1, temperature=0.0, top_p=1.0)
    metrics = dict(eval_accuracy=greedy["avg_at_k"])
    line = f"step {step} held-out greedy {metrics['eval_accuracy']:.3f}"
    k = cfg.eval_k
    if k:
        sampled = results(k=k, temperature=cfg.temperature, top_p=cfg.top_p)
        metrics.update(eval_avg_k=sampled["avg_at_k"], eval_pass_k=sampled["pass_at_k"][str(k)])
        line += f" Avg@{k} {metrics['eval_avg_k']:.3f} pass@{k} {metrics['eval_pass_k']:.3f}"
    print0(line)
    return metrics


def evaluate_served(benchmarks: list, cfg):
    """--server: sample k responses per problem from a served model (parts/chat_client.py: many
    requests in flight, retries), each sample with the seed the engine would use, then score and
    aggregate as evaluate() does. A sample the server never answered stops the run (an estimate
    needs all k)."""
    client = chat_client.ClientConfig(
        url=cfg.server,
        model=cfg.served_model,
        api_key_env=cfg.api_key_env,
        concurrency=cfg.concurrency,
        timeout_s=cfg.request_timeout_s,
        max_retries=cfg.max_retries,
    )
    request = dict(
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_tokens=cfg.max_tokens,
        **(dict(top_k=cfg.top_k) if cfg.top_k else {}),
    )

    def sample(bench, emit):
        name = bench["name"]
        problems = bench["problems"]
        lock = threading.Lock()
        requests = [
            chat_client.ChatRequest(
                str(i),
                data.chat_messages(p["prompt"]),
                [(j, sample_seed(problem_seed(cfg.seed, name, i), j)) for j in range(cfg.k)],
            )
            for i, p in enumerate(problems)
        ]

        def on_sample(key, j, s):
            i = int(key)
            with lock:
                emit(
                    dict(
                        benchmark=name,
                        problem_id=problems[i]["id"],
                        problem_index=i,
                        sample=j,
                        seed=s["seed"],
                        length=s["completion_tokens"] or 0,
                        finish_reason=s["finish_reason"],
                        response=s["content"],
                    ),
                    problems[i],
                )

        try:
            stats = chat_client.sample_chat(
                requests,
                client,
                request,
                on_sample,
                log=lambda line: print(f"{name}: {line}", flush=True),
            )
        except chat_client.ServerRefused as e:
            raise InputError(f"--server={cfg.server}: {e}") from None
        if stats["failed"]:
            raise InputError(
                f"--server={cfg.server}: {stats['failed']} samples of {name} got no answer, e.g. "
                f"{stats['failures'][0]}"
            )
        return dict(
            prompts=dict(prompts=len(problems)),
            requests=stats["requests"],
            retries=dict(stats["retries"]),
            generated_tokens=stats["completion_tokens"],
        )

    settings = dict(
        request,
        k=cfg.k,
        seed=cfg.seed,
        problem_seed=inspect.getsource(problem_seed),
        sample_seed=inspect.getsource(sample_seed),
        chat_template="the server's",
    )
    return score_benchmarks(benchmarks, cfg, sample, dict(sampling=settings))


def score_benchmarks(benchmarks: list, cfg, sample, results: dict, rank: int = 0, world: int = 1):
    """For each benchmark: sample(bench, emit) calls emit(record, problem) for every response it
    samples (this rank's share), each scored in a pool of threads while sampling goes on; then
    gathered, aggregated, printed."""
    ks = pass_ks(cfg)
    results = dict(results, world_size=world, benchmarks={})
    all_samples = []
    score = reward.scorer(cfg)
    with ThreadPoolExecutor(cfg.reward_workers) as pool:
        for bench in benchmarks:
            name = bench["name"]
            kind = bench["kind"]
            t0 = time.perf_counter()
            jobs = []

            def emit(record, problem):
                task = {"kind": kind, **problem}  # a row's own kind (countdown) first
                jobs.append((record, pool.submit(score, task, record["response"])))

            extra = sample(bench, emit)
            generate_s = time.perf_counter() - t0
            wait_for_scores([job for _, job in jobs], name, rank)
            # the record, its score, the response last
            mine = [
                {
                    **{k: v for k, v in r.items() if k != "response"},
                    **verdict(job, name),
                    "response": r["response"],
                }
                for r, job in jobs
            ]
            shards = trainer.all_gather(
                dict(
                    samples=mine,
                    generate_s=generate_s,
                    total_s=time.perf_counter() - t0,
                    tokens=sum(r["length"] for r, _ in jobs),
                )
            )
            samples = sorted(
                (s for shard in shards for s in shard["samples"]),
                key=lambda s: (s["problem_index"], s["sample"]),
            )
            tokens = extra.pop("generated_tokens", sum(s["tokens"] for s in shards))
            slowest = max(s["generate_s"] for s in shards)
            window = {k: bench[k] for k in ("problems_in_file", "date_window") if k in bench}
            b = results["benchmarks"][name] = dict(
                kind=kind,
                source=bench.get("source", ""),
                **window,
                prompts=extra.pop("prompts"),
                **summarize(samples, ks),
                generated_tokens=tokens,
                generate_s=slowest,
                tokens_per_s=tokens / max(slowest, 1e-9),
                total_s=max(s["total_s"] for s in shards),
                **extra,
            )
            all_samples += samples
            print0(
                f"{name}: Avg@{cfg.k} {100 * b['avg_at_k']:.2f} | {tokens} tokens in {slowest:.1f}s "
                f"({b['tokens_per_s']:.0f} tok/s over {world} rank(s)) | scored by {b['total_s']:.1f}s"
            )
    return results, all_samples


def sample_share(engine, tokenizer, bench: dict, cfg, rank: int, world: int):
    """Sample cfg.k responses for this rank's share of the benchmark's (encoded) problems, every
    world-th from the rank-th, chunk_problems problems per generate() call, each problem with its
    own seed. Yields one record per response as each chunk finishes, with progress on rank 0."""
    name = bench["name"]
    problems = bench["problems"]
    stop_ids = tuple(data.stop_token_ids(tokenizer))
    chunk = cfg.chunk_problems or max(1, 4 * cfg.max_num_seqs // cfg.k)
    mine = list(range(rank, len(problems), world))
    tokens = 0
    t0 = time.perf_counter()
    for start in range(0, len(mine), chunk):
        indices = mine[start : start + chunk]
        params = [
            SamplingParams(
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=cfg.top_k,
                n=cfg.k,
                max_tokens=cfg.max_tokens,
                stop_token_ids=stop_ids,
                seed=problem_seed(cfg.seed, name, i),
            )
            for i in indices
        ]
        outputs = engine.generate([problems[i]["prompt_ids"] for i in indices], params)
        for i, p, samples in zip(indices, params, outputs):
            for j, s in enumerate(samples):
                tokens += len(s.token_ids)
                yield dict(
                    benchmark=name,
                    problem_id=problems[i]["id"],
                    problem_index=i,
                    sample=j,
                    seed=p.seed,
                    length=len(s.token_ids),
                    finish_reason=s.finish_reason,
                    response=tokenizer.decode(s.token_ids, skip_special_tokens=False),
                )
        if rank == 0:  # rank 0's share stands for all: shards differ by at most one problem
            done = start + len(indices)
            elapsed = time.perf_counter() - t0
            print(
                f"{name}: {done}/{len(mine)} problems (rank 0's share of {len(problems)}) | {tokens} tokens, "
                f"{tokens / elapsed:.0f} tok/s | ETA {elapsed / done * (len(mine) - done):.0f}s",
                flush=True,
            )


def print_samples(model, tokenizer, cfg):
    """--prompt: cfg.k samples of one user turn from the paged-KV engine, each with its mean
    logprob, then the speed."""
    engine = LLMEngine(
        model, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.max_prompt_len + cfg.max_tokens
    )
    params = SamplingParams(
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        n=cfg.k,
        seed=cfg.seed,
        max_tokens=cfg.max_tokens,
        stop_token_ids=tuple(data.stop_token_ids(tokenizer)),
    )
    t0 = time.perf_counter()
    samples = engine.generate(
        [data.encode_prompt(tokenizer, cfg.prompt)[-cfg.max_prompt_len :]], params, True
    )[0]
    for j, s in enumerate(samples):
        print(
            f"--- sample {j}: {len(s.token_ids)} tokens, finish={s.finish_reason}, mean logprob "
            f"{sum(s.logprobs) / len(s.logprobs):.3f}\n{tokenizer.decode(s.token_ids, skip_special_tokens=False)}"
        )
    generated = sum(len(s.token_ids) for s in samples)
    seconds = time.perf_counter() - t0
    print(
        f"--- {generated} tokens in {seconds:.1f}s ({generated / seconds:.1f} tok/s); {engine.stats}"
    )


def sampling_settings(cfg, tokenizer) -> dict:
    return dict(
        k=cfg.k,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_tokens=cfg.max_tokens,
        stop_token_ids=data.stop_token_ids(tokenizer),
        repetition_penalty="none (not supported by rollout.py)",
        max_prompt_len=cfg.max_prompt_len,
        prompt_overlong="left-truncate",
        seed=cfg.seed,
        problem_seed=inspect.getsource(problem_seed),
        sample_seed=inspect.getsource(sample_seed),
    )


def problem_seed(seed: int, benchmark: str, index: int) -> int:
    """The sampling seed of one problem: the same whichever rank or batch it lands in."""
    return int.from_bytes(
        hashlib.sha256(f"{seed}/{benchmark}/{index}".encode()).digest()[:7], "little"
    )


# ----------------------------------------------------------------------------- scoring


def verdict(job, name: str) -> dict:
    """A scoring job's verdict (reward.scorer): reward (code: fraction of tests passed), correct,
    format_failure and reason. The data's fault (a gold answer math-verify cannot parse, malformed
    tests) is an InputError naming benchmark and problem."""
    try:
        return job.result()._asdict()
    except reward.BadReference as e:
        raise InputError(f"{name}: {e}") from None


def wait_for_scores(jobs: list, name: str, rank: int, every_s: float = 5.0) -> None:
    """Wait for the scoring jobs still running after generation (code tests can take minutes), with
    progress."""
    t0 = time.perf_counter()
    pending = jobs
    while pending := wait(pending, timeout=every_s)[1]:
        print0(
            f"{name}: scoring, {len(jobs) - len(pending)}/{len(jobs)} responses scored (rank 0) | "
            f"{time.perf_counter() - t0:.0f}s"
        )


if __name__ == "__main__":
    run_entry_point(
        main,
        parse_config(
            EvalConfig,
            usage="usage: python eval.py [--key=value ...]   "
            "(torchrun --nproc_per_node=N eval.py ... for N processes)",
        ),
    )
