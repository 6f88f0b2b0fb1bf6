"""One RL step side by side: this project's `gppo.py` against TRL's GRPOTrainer (use_vllm=False),
same workload.

Both sides start from the same SFT checkpoint (a Hugging Face directory of the sums toy: `TOY=sums
OUT=out/sums bash train.sh` makes one in out/sums/sft/hf), train on the same prompts in the same
order with the same reward (reward.scorer: math-verify on the text after </think>), 32 prompts x 8
samples per rollout batch, 8 optimizer updates per batch (4 prompts each), T = 1, token-mean loss
over each mini-batch, clip 0.2 / 0.28 and dual-clip 10, no KL term, old logprobs recomputed before
the updates. TRL runs `loss_type="bnpo"`, `steps_per_generation=8`, `epsilon_high=0.28`, `delta=10`,
`beta=0`; gppo.py runs its defaults with the zero-advantage filter off (TRL trains on every group,
so both sides do the same work). Two workloads:
  toy       the sums toy's RL task as train.sh runs it: 3-digit sums, 192 new tokens at most (responses ~37 tokens);
  longtail  the same prompts, but longtail_prompts of every 32 are sums of two longtail_digits-digit numbers, which the
            toy model never learned to stop on: most of their samples run to the longtail_tokens limit (1-2K), as in
            real reasoning RL, where a batch mixes short responses with a few very long ones.
Printed: seconds per RL step (median over the timed steps) and its split (generate + reward, old
logprobs, the 8 updates), per side and as a ratio, and checks that both sides saw the same prompt
token ids and that TRL's rewards are reward.scorer's on TRL's own completions (the samples differ:
each side draws its own random numbers).

TRL and transformers are not dependencies of the project: the script makes a throwaway virtualenv
(with the system's site packages, so the same torch) and pip-installs them there (once; later runs
reuse it). TRL's side runs in that virtualenv as a child process (this file with --trl_worker); the
split is read from hooks around its _generate_and_score_completions and
_get_per_token_logps_and_entropies (old logprobs: the calls without gradients).

Threads: 1 per side by default: on a 2-core virtual machine gppo.py's toy step was faster on one
thread than on two (every small op handed to a second thread pays for waking it) and TRL's about the
same (benchmarks/RESULTS.md); --threads=2 gives each side two.

Run:  python benchmarks/bench_vs_trl.py                               # both workloads
      python benchmarks/bench_vs_trl.py --workloads=toy --steps=5     # the toy alone, ~1.5 min
"""

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as gppo.py sets it, on both sides
from parts.cli import parse_config  # noqa: E402

TRL_PINS = ("trl==1.16.0", "transformers==5.23.0")


@dataclass
class BenchConfig:
    # fmt: off
    model: str = "out/sums/sft/hf"     # the sums toy's SFT checkpoint both sides start from
    toy_dir: str = "out/sums/toy/sums"  # the sums toy's files (tools/toy.py; TOY=sums OUT=out/sums bash train.sh)
    workloads: str = "toy,longtail"
    steps: int = 4                     # timed RL steps per side (toy); the median is reported
    warmup: int = 1                    # RL steps run first and not timed (first-call costs)
    longtail_steps: int = 2            # timed RL steps per side (longtail)
    longtail_prompts: int = 4          # of every 32 prompts, this many are long sums
    longtail_digits: int = 30          # digits of each operand of a long sum
    longtail_tokens: int = 1024        # the response limit of the longtail workload
    threads: int = 1                   # torch threads per side (one process each); see the docstring
    trl_timeout_s: int = 3600          # TRL's side is stopped after this long; the steps it finished are kept
    out_dir: str = "out/bench_vs_trl"  # runs, the virtualenv, results.json
    venv: str = ""                     # default: out_dir/venv
    trl_worker: str = ""               # internal: run TRL's side from this spec file
    # fmt: on

    def __post_init__(self):
        bad = set(self.workloads.split(",")) - {"toy", "longtail"}
        if bad:
            raise ValueError(f"--workloads: unknown {sorted(bad)}; known: toy,longtail")


# ----------------------------------------------------------------------------- the workloads

PROMPTS_PER_STEP = 32
GROUP = 8
MINI_BATCH = 4


def workload_options(cfg: BenchConfig, name: str, run_dir: str) -> list:
    """gppo.py options that define the workload (the rest are gppo.py's defaults). The sums toy,
    pinned: gppo.py's default toy is Countdown now, but this comparison and its logged numbers are
    on sums (TOY=sums bash train.sh): its RL prompts and held-out set, as train.sh's gppo stage
    reads them."""
    lr = "--lr=2e-5"  # TRL's side: the same lr (run_trl)
    if name == "toy":
        return [
            f"--math_data={cfg.toy_dir}/rl/toy_math.jsonl",
            f"--eval_data={cfg.toy_dir}/test/toy_math.jsonl",
            lr,
            "--max_response_len=192",
        ]
    return [
        f"--math_data={longtail_data(cfg, run_dir)}",
        lr,
        f"--max_response_len={cfg.longtail_tokens}",
    ]


def response_limit(options: list) -> int:
    return int([o for o in options if o.startswith("--max_response_len=")][-1].split("=", 1)[1])


def longtail_data(cfg: BenchConfig, run_dir: str) -> str:
    """A math JSONL whose prompt stream (data.stream: a seeded permutation of the rows) puts exactly
    longtail_prompts long sums among every 32 prompts: row perm[j] holds the problem for stream
    position j."""
    import random

    import numpy as np

    import data
    from gppo import GPPOConfig

    n = (cfg.warmup + cfg.longtail_steps) * PROMPTS_PER_STEP
    # the toy's 3-digit sums
    short = data.load_math_jsonl(os.path.join(cfg.toy_dir, "rl", "toy_math.jsonl"))[:n]
    rng = random.Random(0)
    d = cfg.longtail_digits
    stream = []
    for j in range(n):
        if j % PROMPTS_PER_STEP < cfg.longtail_prompts:
            a = rng.randint(10 ** (d - 1), 10**d - 1)
            b = rng.randint(10 ** (d - 1), 10**d - 1)
            stream.append(dict(problem=f"What is {a} + {b}?", answer=str(a + b)))
        else:
            stream.append(dict(problem=short[j]["prompt"], answer=short[j]["answer"]))
    perm = np.random.default_rng([GPPOConfig.seed, 0]).permutation(n)
    rows = [None] * n
    for j, p in enumerate(perm):
        rows[p] = stream[j]
    path = os.path.join(run_dir, "longtail.jsonl")
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return path


def prompt_stream(model: str, options: list, count: int) -> list:
    """The first `count` prompts gppo.py will train on with these options: {text, prompt_ids,
    answer}."""
    import data
    import gppo

    gcfg = parse_config(gppo.GPPOConfig, [f"--init_from={model}", *options])
    tokenizer = data.load_tokenizer(model)
    tasks = data.rl_prompts(gcfg, tokenizer)[0]
    return [
        dict(
            text=tokenizer.decode(t["prompt_ids"], skip_special_tokens=False),
            prompt_ids=t["prompt_ids"],
            answer=t["answer"],
        )
        for t in data.stream(tasks, 0, count, gcfg.seed)
    ]


# ----------------------------------------------------------------------------- this project's side


def run_ours(cfg: BenchConfig, model: str, run_dir: str, options: list, steps: int) -> list:
    """`python gppo.py` for warmup + steps RL steps; returns the metrics of the timed steps."""
    out = os.path.join(run_dir, "gppo")
    cmd = [
        sys.executable,
        os.path.join(ROOT, "gppo.py"),
        f"--init_from={model}",
        f"--out_dir={out}",
        f"--steps={cfg.warmup + steps}",
        "--eval_every=0",
        "--filter_zero_adv=false",
        "--resume=false",
        "--ckpt_every=0",
        "--ckpt_minutes=0",
        f"--threads={cfg.threads}",
        *options,
    ]
    log = os.path.join(run_dir, "gppo.log")
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode:
        sys.exit(f"bench_vs_trl.py: gppo.py failed ({' '.join(cmd)}); its output is in {log}")
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        records = [json.loads(line) for line in fh]
    return [r for r in records if r.get("step", 0) > cfg.warmup]


def ours_split(rec: dict) -> dict:
    return dict(
        generate_and_reward=rec["time_generate_and_reward"],
        old_logprobs=rec["time_old_logprobs"],
        updates=rec["time_train"] + rec["time_sync"],
        engine_generate=rec["time_engine"],
        step=rec["time_generate_and_reward"]
        + rec["time_old_logprobs"]
        + rec["time_train"]
        + rec["time_sync"],
        num_updates=rec["updates"],
        response_len_mean=rec["response_len_mean"],
        response_len_max=rec["response_len_max"],
        truncated=rec["truncated"],
    )


# ----------------------------------------------------------------------------- TRL's side


def ensure_venv(cfg: BenchConfig) -> str:
    """The virtualenv's python, with TRL installed (made on first use)."""
    venv = cfg.venv or os.path.join(cfg.out_dir, "venv")
    python = os.path.join(venv, "bin", "python")
    probe = [
        python,
        "-c",
        "import trl, transformers; print(trl.__version__, transformers.__version__)",
    ]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"making a virtualenv for TRL in {venv} (once): {' '.join(TRL_PINS)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *TRL_PINS], check=True)
    return python


def run_trl(
    cfg: BenchConfig,
    python: str,
    run_dir: str,
    model: str,
    prompts: list,
    max_tokens: int,
    steps: int,
):
    spec = dict(
        model=model,
        prompts=prompts,
        max_tokens=max_tokens,
        rl_steps=cfg.warmup + steps,
        warmup=cfg.warmup,
        threads=cfg.threads,
        out=os.path.join(run_dir, "trl.json"),
        trl_dir=os.path.join(run_dir, "trl"),
    )
    spec_path = os.path.join(run_dir, "trl_spec.json")
    with open(spec_path, "w") as fh:
        json.dump(spec, fh)
    log = os.path.join(run_dir, "trl.log")
    if os.path.exists(spec["out"]):
        os.remove(spec["out"])
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(
                [python, os.path.abspath(__file__), f"--trl_worker={spec_path}"],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                timeout=cfg.trl_timeout_s,
            )
            failed = proc.returncode != 0
        # the worker writes its results after every RL step: keep those
        except subprocess.TimeoutExpired:
            print(
                f"bench_vs_trl.py: TRL's run passed --trl_timeout_s={cfg.trl_timeout_s}; stopped",
                flush=True,
            )
            failed = False
    if failed or not os.path.exists(spec["out"]):
        sys.exit(
            f"bench_vs_trl.py: TRL's run failed or finished no timed step; its output is in {log}"
        )
    with open(spec["out"]) as fh:
        return json.load(fh)


def trl_worker(spec_path: str):
    """Child process, in the virtualenv: GRPOTrainer on the spec's prompts; writes timings and the
    first batch."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import data
    import gppo
    from reward import scorer

    with open(spec_path) as fh:
        spec = json.load(fh)
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    ours = data.load_tokenizer(spec["model"])
    stop_ids = data.stop_token_ids(ours)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(spec["model"], "tokenizer.json"),
        eos_token=ours.id_to_token(stop_ids[0]),
        pad_token=ours.id_to_token(stop_ids[-1]),
    )
    model = AutoModelForCausalLM.from_pretrained(
        spec["model"], dtype=torch.float32, attn_implementation="sdpa"
    )
    model.generation_config.eos_token_id = list(stop_ids)
    score_cfg = gppo.GPPOConfig()
    score = scorer(score_cfg, score_cfg.reward_scale, score_cfg.code_reward)
    first = {}

    def reward(prompts, completions, completion_ids, answer, **unused):
        texts = [ours.decode(ids, skip_special_tokens=False) for ids in completion_ids]
        rewards = [
            score(dict(kind="math", answer=a), text).reward for a, text in zip(answer, texts)
        ]
        first.setdefault("rewards", rewards)
        first.setdefault("completion_ids", [list(map(int, ids)) for ids in completion_ids])
        return rewards

    prompts = spec["prompts"]
    dataset = Dataset.from_list([dict(prompt=p["text"], answer=p["answer"]) for p in prompts])
    args = GRPOConfig(
        output_dir=spec["trl_dir"],
        per_device_train_batch_size=MINI_BATCH * GROUP,
        gradient_accumulation_steps=1,
        steps_per_generation=PROMPTS_PER_STEP // MINI_BATCH,
        num_generations=GROUP,
        num_iterations=1,
        max_completion_length=spec["max_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=2e-5,
        lr_scheduler_type="constant",
        weight_decay=0.1,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        delta=10.0,
        loss_type="bnpo",
        scale_rewards="group",
        mask_truncated_completions=False,
        use_vllm=False,
        shuffle_dataset=False,
        remove_unused_columns=False,
        max_steps=spec["rl_steps"] * 8,
        logging_steps=10**6,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,
        dataloader_num_workers=0,
        seed=1234,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    clock = dict(begin=[], end=[], generate_and_score=[], old_logprobs=[], generate=[])
    inner = dict(no_grad=0.0)

    generate_and_score = trainer._generate_and_score_completions
    logps = trainer._get_per_token_logps_and_entropies
    model_generate = trainer.model.generate

    def timed_generate_and_score(inputs):
        inner["no_grad"] = 0.0
        start = time.perf_counter()
        out = generate_and_score(inputs)
        clock["generate_and_score"].append(time.perf_counter() - start)
        clock["old_logprobs"].append(inner["no_grad"])
        if "prompt_ids" not in first:
            first["prompt_ids"] = [
                ids[mask.bool()].tolist()
                for ids, mask in zip(out["prompt_ids"], out["prompt_mask"])
            ]
        return out

    def timed_logps(*args, **kwargs):
        start = time.perf_counter()
        out = logps(*args, **kwargs)
        if not torch.is_grad_enabled():
            inner["no_grad"] += time.perf_counter() - start
        return out

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        out = model_generate(*args, **kwargs)
        clock["generate"].append(time.perf_counter() - start)
        return out

    trainer._generate_and_score_completions = timed_generate_and_score
    trainer._get_per_token_logps_and_entropies = timed_logps
    trainer.model.generate = timed_generate

    def save():  # after every RL step, so a run stopped from outside keeps the steps it finished
        steps = []
        # RL step k = optimizer steps 8k .. 8k+7, one generation first
        for k in range(len(clock["end"]) // 8):
            total = clock["end"][8 * k + 7] - clock["begin"][8 * k]
            gen = clock["generate_and_score"][k]
            steps.append(
                dict(
                    step=total,
                    generate_and_reward=gen - clock["old_logprobs"][k],
                    old_logprobs=clock["old_logprobs"][k],
                    updates=total - gen,
                    engine_generate=clock["generate"][k],
                )
            )
        if len(steps) > spec["warmup"]:
            with open(spec["out"] + ".tmp", "w") as fh:
                json.dump(dict(steps=steps[spec["warmup"] :], first=first), fh)
            os.replace(spec["out"] + ".tmp", spec["out"])

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock["begin"].append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            clock["end"].append(time.perf_counter())
            if len(clock["end"]) % 8 == 0:
                save()

    trainer.add_callback(Clock())
    trainer.train()


# ----------------------------------------------------------------------------- comparison


def check_same_inputs(model: str, prompts: list, trl: dict) -> dict:
    """TRL's first batch against ours: the prompt token ids of every completion (TRL repeats each
    prompt GROUP times), and reward.scorer on TRL's completions = the rewards TRL trained on."""
    import data
    import gppo
    from reward import scorer

    tokenizer = data.load_tokenizer(model)
    score_cfg = gppo.GPPOConfig()
    score = scorer(score_cfg, score_cfg.reward_scale, score_cfg.code_reward)
    expected = [p["prompt_ids"] for p in prompts[:PROMPTS_PER_STEP] for _ in range(GROUP)]
    same_prompts = trl["first"]["prompt_ids"] == expected
    rescored = [
        score(
            dict(kind="math", answer=p["answer"]), tokenizer.decode(ids, skip_special_tokens=False)
        ).reward
        for p, ids in zip(
            [p for p in prompts[:PROMPTS_PER_STEP] for _ in range(GROUP)],
            trl["first"]["completion_ids"],
        )
    ]
    return dict(
        same_prompt_ids=same_prompts,
        same_rewards=rescored == trl["first"]["rewards"],
        trl_reward_mean=sum(rescored) / len(rescored),
    )


def median_split(steps: list) -> dict:
    return {k: statistics.median(s[k] for s in steps) for k in steps[0]}


def print_table(name: str, ours: dict, trl: dict, checks: dict, goal: float):
    print(
        f"\n{name}: seconds per RL step, median of {ours['n']} (ours) / {trl['n']} (TRL) timed steps; "
        f"inputs: prompt ids identical {checks['same_prompt_ids']}, "
        f"TRL rewards = reward.scorer {checks['same_rewards']}"
    )
    print(f"{'':22s} {'gppo.py':>9s} {'TRL':>9s} {'TRL / ours':>11s}")
    for key, label in (
        ("step", "whole step"),
        ("generate_and_reward", "generate + reward"),
        ("old_logprobs", "old logprobs"),
        ("updates", "8 updates"),
        ("engine_generate", "  of which generate()"),
    ):
        print(
            f"{label:22s} {ours[key]:9.2f} {trl[key]:9.2f} {trl[key] / max(ours[key], 1e-9):10.2f}x"
        )
    per_update = ours["updates"] / max(ours["num_updates"], 1)
    print(
        f"{'one update':22s} {per_update:9.3f} {trl['updates'] / 8:9.3f} {trl['updates'] / 8 / per_update:10.2f}x"
    )
    speedup = trl["step"] / ours["step"]
    print(
        "(generate(): ours scores each finished response meanwhile (threads; math-verify in processes on the cores "
        "the engine leaves), TRL scores after it. The engine alone against transformers: benchmarks/profile_engine.py)"
    )
    print(
        f"responses: mean {ours['response_len_mean']:.0f} tokens, longest {ours['response_len_max']:.0f}, "
        f"{ours['truncated']:.0f} of 256 at the limit (ours, median step)"
    )
    print(
        f"goal: RL step >= {goal}x TRL's speed: {speedup:.2f}x -> {'met' if speedup >= goal else 'NOT met'}"
    )
    return speedup


def main(cfg: BenchConfig):
    model = os.path.abspath(cfg.model)
    if not os.path.isfile(os.path.join(model, "config.json")):
        sys.exit(
            f"bench_vs_trl.py: --model={cfg.model}: no SFT checkpoint there; run `python sft.py` (or "
            "`bash train.sh`) first, or pass --model=DIR"
        )
    python = ensure_venv(cfg)
    load = os.getloadavg()
    results = dict(config=asdict(cfg), load_average_start=load, workloads={})
    print(
        f"bench_vs_trl: model {model}; {cfg.threads} threads per side; load average {load[0]:.2f} {load[1]:.2f}"
    )
    for name in cfg.workloads.split(","):
        run_dir = os.path.abspath(os.path.join(cfg.out_dir, name))
        os.makedirs(run_dir, exist_ok=True)
        steps = cfg.steps if name == "toy" else cfg.longtail_steps
        options = workload_options(cfg, name, run_dir)
        prompts = prompt_stream(model, options, (cfg.warmup + steps) * PROMPTS_PER_STEP)
        # TRL's max_completion_length: gppo.py's, from the same options
        max_tokens = response_limit(options)
        start = time.time()
        ours_steps = [ours_split(r) for r in run_ours(cfg, model, run_dir, options, steps)]
        print(
            f"[{name}] gppo.py: {len(ours_steps)} timed steps in {time.time() - start:.0f} s (with start-up)",
            flush=True,
        )
        start = time.time()
        trl = run_trl(cfg, python, run_dir, model, prompts, max_tokens, steps)
        print(
            f"[{name}] TRL: {len(trl['steps'])} timed steps in {time.time() - start:.0f} s (with start-up)",
            flush=True,
        )
        checks = check_same_inputs(model, prompts, trl)
        ours_med = median_split(ours_steps)
        trl_med = median_split(trl["steps"])
        ours_med["n"] = len(ours_steps)
        trl_med["n"] = len(trl["steps"])
        speedup = print_table(name, ours_med, trl_med, checks, goal=1.5 if name == "toy" else 3.0)
        results["workloads"][name] = dict(
            ours=ours_steps, trl=trl["steps"], checks=checks, speedup=speedup
        )
    results["load_average_end"] = os.getloadavg()
    print(
        f"\nload average at the end {results['load_average_end'][0]:.2f}; all steps in {cfg.out_dir}/results.json"
    )
    with open(os.path.join(cfg.out_dir, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    config = parse_config(BenchConfig)
    if config.trl_worker:
        trl_worker(config.trl_worker)
    else:
        main(config)
