"""Real-shape rehearsal: Qwen3-0.6B's exact shape through the whole pipeline on a CPU, with measured
memory.

The toy pipeline (`bash train.sh`) trains a 0.86M-parameter model with a 583-token vocabulary; real
runs load Qwen3 checkpoints with a 151,936-token vocabulary, 28-36 layers and long rows. This script
runs the real code paths (model.py's checkpoint I/O, sft.main, gppo.main, eval.main, with their
--key=value configs) at Qwen3-0.6B's exact shape (its config.json: hidden 1024, intermediate 3072,
28 layers, 16 heads, 8 KV heads, head_dim 128, vocabulary 151,936, tied embeddings, RoPE theta 1e6)
with random weights and the real Qwen3 tokenizer (QWEN3_TOKENIZER_DIR), and holds each stage's peak
memory against a budget computed on paper:

  1. checkpoint  random bf16 weights -> a two-shard Hugging Face checkpoint + the tokenizer files; read back, compared
  2. load        model.from_pretrained(dtype=float32) alone: what sft.py and gppo.py do first
  3. sft         sft.main: packed rows of 1,024 tokens of long-CoT chat data (the real template), activation
                 checkpointing, FSDP2 (one process), AdamW, DCP checkpoint, Hugging Face export
  4. gppo        gppo.main: 2 steps x 2 prompts x 4 samples x 256 new tokens with the real stop tokens, reward.py,
                 the chunked loss at V = 151,936, 2 mini-batch updates per step, the engine's weights synced (checked)
  5. eval        eval.main: AIME-format problems, k = 2, scored by reward.py
Nothing is downloaded. Random weights never close their thinking, so reward.py gives every response
0; the GPPO stage adds a tie-breaker below 0.01 (from the response's token ids) so the samples of a
prompt differ and both updates carry a gradient, and flags about half the responses "fully correct"
so the alpha*SFT term has tokens.

Memory, measured honestly: each stage runs in a fresh process (this file with --stage=NAME), which
reports its own peak resident set (VmHWM of /proc/self/status, reset after start-up through
/proc/self/clear_refs) and its resident set after importing torch and the project and running one
small op ("runtime", measured). Resident set counts everything the process touches: tensors, the
allocator's free-but-kept memory, mapped files. Child processes (math-verify's workers, the code
sandbox) are not counted. The budget on paper is runtime + the largest of the stage's phases, each a
sum of terms counted in bytes from the config (functions below); a stage passes if its peak is at
most 1.25x its budget.

The allocator: by default glibc raises its mmap threshold each time a large block is freed (up to 32
MiB), so the many activation tensors of a few MB each then come from the heap, and the heap keeps
what they free (measured: ~1 GB kept at 8 layers, ~3 GB at 28, over budget). The stage processes
therefore run with MALLOC_MMAP_THRESHOLD_=131072, glibc's own starting value, held fixed: every
tensor above 128 KiB is mapped on its own and returned when freed. The same setting is advisable for
any long CPU run of sft.py or gppo.py (--malloc_mmap_threshold=0 to see without).

Run:
  python experiments/rehearsal.py              # all stages: ~13 GB of RAM at the peak, ~14 GB of disk at most
  python experiments/rehearsal.py --stages=gppo,eval  # rerun some stages on the outputs of earlier ones
  bash train.sh rehearsal
"""

import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from parts.cli import parse_config  # noqa: E402
from model import Qwen3Config  # noqa: E402

# noqa: E402
from parts.memory_plan import QWEN3, eval_phases, gppo_phases, kv_pool_bytes, param_counts
from parts.memory_plan import peak_phase, rope_table_bytes, sft_phases

GB = 1e9
STAGES = ("checkpoint", "load", "sft", "gppo", "eval")


@dataclass
class RehearsalConfig:
    # fmt: off
    out_dir: str = "runs/rehearsal"
    tokenizer: str = ""              # a directory with Qwen3's tokenizer.json; empty = $QWEN3_TOKENIZER_DIR
    stages: str = ",".join(STAGES)   # which stages to run, in this order (later ones read earlier outputs)
    threads: int = 2
    malloc_mmap_threshold: int = 131072   # MALLOC_MMAP_THRESHOLD_ of the stage processes (see the docstring); 0 = unset
    seed: int = 0
    # sft
    sft_steps: int = 3
    sft_row_tokens: int = 1024       # tokens per packed row (one row per step)
    sft_conversations: int = 24
    sft_loss_chunk: int = 4096       # sft.py's default
    # gppo
    gppo_steps: int = 2
    prompts: int = 2                 # per step; one per mini-batch, so 2 optimizer updates per step
    samples: int = 4                 # group_size
    new_tokens: int = 256
    train_row_tokens: int = 2048
    # eval
    eval_problems: int = 4
    eval_k: int = 2
    eval_max_tokens: int = 128
    # bookkeeping
    max_ratio: float = 1.25          # peak / budget allowed per stage
    time_limit_min: float = 25.0     # the whole rehearsal, on 2 cores
    cleanup: bool = True             # delete the DCP checkpoints (7 GB each) once their stage has passed
    stage: str = ""                  # internal: run this one stage in this process
    # fmt: on

    def __post_init__(self):
        unknown = [s for s in self.stages.split(",") if s not in STAGES]
        if unknown:
            raise ValueError(f"--stages: unknown stage(s) {unknown}; known: {','.join(STAGES)}")
        self.tokenizer = self.tokenizer or os.environ.get("QWEN3_TOKENIZER_DIR", "")


def qwen3_0_6b() -> Qwen3Config:
    return Qwen3Config(**QWEN3["0.6B"])


def stage_budget(stage: str, cfg: RehearsalConfig, facts: dict) -> dict:
    """The paper budget of one rehearsal stage, without the measured runtime. Stages that read text
    also hold one Qwen3 tokenizer (its size measured once in the driver) and run the model (its RoPE
    tables: one per model instance)."""
    c = qwen3_0_6b()
    P = param_counts(qwen3_0_6b())
    if stage == "checkpoint":
        phases = {
            "save + read back": {
                "bf16 weights written": 2 * P["total"],
                "bf16 weights read back": 2 * P["total"],
            }
        }
    elif stage == "load":
        phases = {
            "load as fp32": {
                "fp32 weights": 4 * P["total"],
                "one tensor as stored (bf16)": 2 * P["largest"],
            }
        }
    elif stage == "sft":
        phases = sft_phases(
            c,
            world=1,
            row_tokens=cfg.sft_row_tokens,
            loss_chunk=min(cfg.sft_loss_chunk, cfg.sft_row_tokens - 1),
            gpu=False,
        )
    elif stage == "gppo":
        # the engine's CPU default
        kv = kv_pool_bytes(c, 4, None, 256, facts["max_model_len"])
        phases = gppo_phases(
            c, world=1, row_tokens=facts["max_row_tokens"], kv_bytes=kv, gpu=False, loss_chunk=256
        )
    else:
        # eval.py: max_prompt_len 4096
        kv = kv_pool_bytes(c, 4, None, 256, 4096 + cfg.eval_max_tokens)
        phases = eval_phases(c, kv_bytes=kv, itemsize=4)
    if stage in ("sft", "gppo", "eval"):
        # gppo: the policy and the engine
        models = 2 if stage == "gppo" else 1
        for terms in phases.values():
            terms.update(
                {
                    "tokenizer (measured)": facts["tokenizer_bytes"],
                    "RoPE tables": models * rope_table_bytes(c),
                }
            )
    name, total, terms = peak_phase(phases)
    return dict(phase=name, bytes=total, terms=terms)


# --------------------------------------------------------------- data (written once, deterministic)


def long_cot_conversation(rng: random.Random) -> list:
    """A user problem and an assistant turn shaped like a distilled long chain of thought: <think>
    with many steps, then a short answer with \\boxed{}."""
    a = rng.randint(100, 999)
    b = rng.randint(100, 999)
    m = rng.choice([7, 11, 13, 17, 19, 23])
    problem = f"Let N be the number of integers n with 1 <= n <= {a * b} such that n^2 + {a} n + {b} is divisible by {m}. Find N mod 1000."
    steps = ["Okay, let me think about this carefully. We need to count residues first."]
    for k in range(rng.randint(5, 22)):
        x = rng.randint(2, 99)
        y = rng.randint(2, 99)
        steps.append(
            rng.choice(
                [
                    f"Step {k + 1}: for n = {x}, n^2 + {a} n + {b} = {x * x + a * x + b}, and {x * x + a * x + b} mod {m} = {(x * x + a * x + b) % m}.",
                    f"Wait, let me double-check: {x} * {y} = {x * y}, so {x * y} mod {m} is {(x * y) % m}. That matches.",
                    f"Hmm, alternatively the discriminant {a}^2 - 4 * {b} = {a * a - 4 * b} tells us whether roots exist mod {m}.",
                    f"So far the count of good residues is {rng.randint(0, m)}; the period is {m}, and {a * b} // {m} = {a * b // m}.",
                ]
            )
        )
    answer = rng.randint(0, 999)
    return [
        {"role": "user", "content": problem},
        {
            "role": "assistant",
            "content": "<think>\n" + "\n".join(steps) + "\n</think>\n\n"
            f"Counting the good residues over each period gives N, and N mod 1000 = {answer}. \\boxed{{{answer}}}",
        },
    ]


def aime_problem(rng: random.Random, i: int) -> dict:
    """AIME format: an integer answer in [0, 999]."""
    a = rng.randint(10, 99)
    b = rng.randint(10, 99)
    return {
        "id": f"rehearsal-{i}",
        "problem": f"Find the remainder when {a}^{b} + {b}^{a} is divided by 1000.",
        "answer": str((pow(a, b, 1000) + pow(b, a, 1000)) % 1000),
    }


def write_data(cfg: RehearsalConfig) -> dict:
    rng = random.Random(cfg.seed)
    paths = {k: os.path.join(cfg.out_dir, "data", f"{k}.jsonl") for k in ("sft", "math", "aime")}
    os.makedirs(os.path.dirname(paths["sft"]), exist_ok=True)
    rows = {
        "sft": [{"messages": long_cot_conversation(rng)} for _ in range(cfg.sft_conversations)],
        "math": [aime_problem(rng, i) for i in range(cfg.prompts * cfg.gppo_steps)],
        "aime": [aime_problem(rng, 100 + i) for i in range(cfg.eval_problems)],
    }
    for k, path in paths.items():
        with open(path, "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows[k])
    return paths


# ------------------------------------------------------------- the stages (each in its own process)


def stage_checkpoint(cfg, paths):
    from model import Qwen3
    from model import from_pretrained, save_pretrained

    c = qwen3_0_6b()
    ckpt = os.path.join(cfg.out_dir, "base")
    with torch.device("meta"):
        model = Qwen3(c).to(torch.bfloat16)
    model.to_empty(device="cpu")  # bf16 storage from the start: no fp32 copy of the model is made
    model.tie_weights()
    model.init_weights(seed=cfg.seed)
    save_pretrained(model, ckpt, max_shard_bytes=2**30)  # 1.19 GB: two shards
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(cfg.tokenizer, name), os.path.join(ckpt, name))
    back = from_pretrained(ckpt)
    same = all(torch.equal(p, q) for p, q in zip(model.parameters(), back.parameters()))
    if not same or back.config != model.config:
        raise SystemExit("rehearsal: the checkpoint read back differs from the weights written")
    shards = sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))
    return dict(
        shards=len(shards),
        checkpoint_bytes=sum(os.path.getsize(os.path.join(ckpt, f)) for f in shards),
        parameters=sum(p.numel() for p in model.parameters()),
    )


def stage_load(cfg, paths):
    from model import from_pretrained

    model = from_pretrained(os.path.join(cfg.out_dir, "base"), dtype=torch.float32)
    return dict(dtype=str(next(model.parameters()).dtype))


def stage_sft(cfg, paths):
    import sft

    out = os.path.join(cfg.out_dir, "sft")
    base = os.path.join(cfg.out_dir, "base")
    sft.main(
        parse_config(
            sft.SFTConfig,
            [
                f"--data={paths['sft']}",
                f"--tokenizer={base}",
                f"--init_from={base}",
                f"--out_dir={out}",
                f"--max_len={cfg.sft_row_tokens}",
                f"--row_tokens={cfg.sft_row_tokens}",
                "--rows_per_step=1",
                "--micro_rows=1",
                "--epochs=1",
                f"--max_steps={cfg.sft_steps}",
                "--lr=8e-5",
                "--min_lr=4e-5",
                "--warmup_steps=1",
                "--activation_checkpointing=true",
                f"--loss_chunk={cfg.sft_loss_chunk}",
                "--log_every=1",
                "--ckpt_every=0",
                "--ckpt_minutes=0",
                "--resume=false",
                "--device=cpu",
                f"--seed={cfg.seed}",
            ],
        )
    )
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        losses = [json.loads(line)["loss"] for line in fh]
    return dict(steps=len(losses), losses=losses)


def stage_gppo(cfg, paths):
    import gppo
    import reward

    out = os.path.join(cfg.out_dir, "gppo")
    syncs = []
    sync = gppo.copy_weights

    def checked_sync(policy, engine_model):
        """gppo.py's copy_weights (step 7), then a check that the engine's weights now equal the
        policy's (torch.equal: no temporaries beyond a bool mask, so the check adds little to the
        measured peak)."""
        sync(policy, engine_model)
        with torch.no_grad():
            syncs.append(
                all(
                    torch.equal(
                        q, (p.full_tensor() if hasattr(p, "full_tensor") else p).to(q.dtype)
                    )
                    for p, q in zip(policy.parameters(), engine_model.parameters())
                )
            )

    def rehearsal_reward(task, text, token_ids):
        # 0 unless `</think>` and a right \boxed{}
        r = reward.math_reward(text, task["answer"])
        # math-verify itself on the raw text, as a stress
        reward.verify_math(task["answer"], text)
        # in [0, 1): differs between samples
        tie = (sum(token_ids) % 1000) / 1000
        return r + 0.01 * tie, r == 1.0 or tie >= 0.5

    gppo.copy_weights = checked_sync
    max_prompt = 256
    gppo.main(
        parse_config(
            gppo.GPPOConfig,
            [
                f"--init_from={os.path.join(cfg.out_dir, 'sft', 'hf')}",
                f"--math_data={paths['math']}",
                f"--out_dir={out}",
                f"--prompts_per_step={cfg.prompts}",
                f"--group_size={cfg.samples}",
                "--mini_batch_prompts=1",
                f"--max_prompt_len={max_prompt}",
                f"--max_response_len={cfg.new_tokens}",
                f"--train_row_tokens={cfg.train_row_tokens}",
                "--lr=1e-6",
                "--warmup_steps=1",
                "--activation_checkpointing=true",
                f"--steps={cfg.gppo_steps}",
                "--eval_every=0",
                "--eval_problems=1",
                "--ckpt_every=0",
                "--ckpt_minutes=0",
                "--export_every=0",
                "--resume=false",
                "--device=cpu",
                "--reward_workers=2",
                f"--seed={cfg.seed}",
            ],
        ),
        reward_fn=rehearsal_reward,
    )
    with open(os.path.join(out, "metrics.jsonl")) as fh:
        steps = [json.loads(line) for line in fh]
    if any(s["updates"] < 2 for s in steps) or len(syncs) != len(steps) or not all(syncs):
        raise SystemExit(
            f"rehearsal: expected >= 2 updates per step and an exact engine sync after each; got "
            f"updates {[s['updates'] for s in steps]}, engine equal to policy after each sync: {syncs}"
        )
    keys = (
        "loss",
        "updates",
        "response_len_mean",
        "truncated",
        "logprob_diff_max",
        "time_generate_and_reward",
        "time_train",
    )
    return dict(steps=[{k: s.get(k) for k in keys} for s in steps], engine_synced=syncs)


def stage_eval(cfg, paths):
    import eval as evaluation

    out = os.path.join(cfg.out_dir, "eval")
    evaluation.main(
        parse_config(
            evaluation.EvalConfig,
            [
                f"--model={os.path.join(cfg.out_dir, 'gppo', 'hf')}",
                f"--math_data={paths['aime']}",
                f"--k={cfg.eval_k}",
                f"--max_tokens={cfg.eval_max_tokens}",
                f"--out_dir={out}",
                "--device=cpu",
                "--reward_workers=2",
            ],
        )
    )
    with open(os.path.join(out, "results.json")) as fh:
        bench = json.load(fh)["benchmarks"]["aime"]
    return {k: bench[k] for k in ("problems", "k", "avg_at_k", "generated_tokens", "tokens_per_s")}


def status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))


def run_stage_here(cfg: RehearsalConfig):
    """Child process: run one stage, then print one line: REHEARSAL_RESULT {json}."""
    import data  # noqa: F401  (the project's imports belong to the runtime, not to the stage)
    import eval  # noqa: F401
    import gppo  # noqa: F401
    import sft  # noqa: F401

    torch.set_num_threads(cfg.threads)
    # one-time set-up of the first ops
    torch.randn(512, 512).to(torch.bfloat16).float().sum()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            # VmHWM := VmRSS (start-up peaks excluded)
            fh.write("5")
    except OSError:
        pass
    runtime = status_kib("VmRSS") * 1024
    paths = {k: os.path.join(cfg.out_dir, "data", f"{k}.jsonl") for k in ("sft", "math", "aime")}
    start = time.perf_counter()
    facts = globals()[f"stage_{cfg.stage}"](cfg, paths)
    print(
        "REHEARSAL_RESULT "
        + json.dumps(
            dict(
                stage=cfg.stage,
                wall_s=time.perf_counter() - start,
                peak=status_kib("VmHWM") * 1024,
                runtime=runtime,
                facts=facts,
            )
        ),
        flush=True,
    )


# ----------------------------------------------------------------------------- the driver


def run_stage_process(cfg: RehearsalConfig, stage: str) -> dict:
    args = [sys.executable, os.path.abspath(__file__), f"--stage={stage}"] + [
        f"--{f.name}={getattr(cfg, f.name)}" for f in fields(cfg) if f.name not in ("stage", "plan")
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg.threads))
    if cfg.malloc_mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(cfg.malloc_mmap_threshold)
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
    )
    result = None
    for line in proc.stdout:
        if line.startswith("REHEARSAL_RESULT "):
            result = json.loads(line[len("REHEARSAL_RESULT ") :])
        else:
            print(f"    [{stage}] {line}", end="", flush=True)
    proc.wait()
    if proc.returncode != 0 or result is None:
        return dict(stage=stage, error=f"exit code {proc.returncode} (its output is above)")
    return result


def prompt_facts(cfg: RehearsalConfig, paths: dict) -> dict:
    """What the budgets need besides the config: the longest GPPO row (a mini-batch's samples,
    prompt + new tokens each), and the resident memory one Qwen3 tokenizer takes (measured here, in
    this process, as the RSS it adds)."""
    import data

    before = status_kib("VmRSS")
    tok = data.load_tokenizer(cfg.tokenizer)
    tokenizer_bytes = (status_kib("VmRSS") - before) * 1024
    with open(paths["math"]) as fh:
        prompts = [data.encode_prompt(tok, json.loads(line)["problem"]) for line in fh]
    longest = max(map(len, prompts))
    return dict(
        max_model_len=256 + cfg.new_tokens,
        tokenizer_bytes=tokenizer_bytes,
        max_row_tokens=min(cfg.train_row_tokens, cfg.samples * (longest + cfg.new_tokens)),
    )


def print_table(results: list, cfg: RehearsalConfig) -> bool:
    ok = True
    print(
        f"\n{'stage':11s} {'wall':>8s} {'peak RSS':>9s} {'budget':>8s} {'peak/budget':>11s}  budget's peak phase "
        f"(runtime measured + terms on paper)"
    )
    for r in results:
        if "error" in r:
            print(f"{r['stage']:11s} FAILED: {r['error']}")
            ok = False
            continue
        b = r["budget"]
        ratio = r["peak"] / (b["bytes"] + r["runtime"])
        ok &= ratio <= cfg.max_ratio
        terms = ", ".join(f"{k} {v / GB:.2f}" for k, v in b["terms"].items())
        print(
            f"{r['stage']:11s} {r['wall_s']:7.0f}s {r['peak'] / GB:8.2f}G {(b['bytes'] + r['runtime']) / GB:7.2f}G "
            f"{ratio:11.2f}  {b['phase']}: runtime {r['runtime'] / GB:.2f} + {terms} (GB)"
            + ("" if ratio <= cfg.max_ratio else f"  OVER {cfg.max_ratio}x")
        )
    return ok


def main(cfg: RehearsalConfig):
    if not os.path.isfile(os.path.join(cfg.tokenizer, "tokenizer.json")):
        sys.exit(
            "rehearsal.py: set QWEN3_TOKENIZER_DIR (or --tokenizer=) to a directory with Qwen3's tokenizer.json "
            "and tokenizer_config.json"
        )
    if cfg.stage:
        run_stage_here(cfg)
        return
    os.makedirs(cfg.out_dir, exist_ok=True)
    paths = write_data(cfg)
    facts = prompt_facts(cfg, paths)
    print(
        f"rehearsal: Qwen3-0.6B shape, random weights, {cfg.threads} threads, out_dir {cfg.out_dir}; "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )
    results = []
    t0 = time.perf_counter()
    for stage in cfg.stages.split(","):
        print(f"=== stage {stage}", flush=True)
        r = run_stage_process(cfg, stage)
        if "error" not in r:
            r["budget"] = stage_budget(stage, cfg, facts)
            print(
                f"=== stage {stage}: {r['wall_s']:.0f} s, peak {r['peak'] / GB:.2f} GB, facts {r['facts']}",
                flush=True,
            )
            if cfg.cleanup:
                shutil.rmtree(os.path.join(cfg.out_dir, stage, "checkpoint"), ignore_errors=True)
        results.append(r)
        if "error" in r:
            break
    total_min = (time.perf_counter() - t0) / 60
    ok = print_table(results, cfg)
    in_time = total_min <= cfg.time_limit_min
    print(
        f"whole rehearsal: {total_min:.1f} min ({'within' if in_time else 'OVER'} the {cfg.time_limit_min:.0f} min "
        f"target for 2 cores; load average now {os.getloadavg()[0]:.1f})"
    )
    with open(os.path.join(cfg.out_dir, "rehearsal.json"), "w") as fh:
        json.dump(dict(config=asdict(cfg), total_min=total_min, stages=results), fh, indent=2)
    print(f"wrote {os.path.join(cfg.out_dir, 'rehearsal.json')}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main(parse_config(RehearsalConfig))
