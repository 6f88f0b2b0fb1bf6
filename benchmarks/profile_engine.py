"""Where the engine's time goes on one RL step's batch, by wall clock, and the floor its matmuls
set.

gppo.py's rollout batches (prompts x samples from its prompt stream, T = 1, at most max_tokens new
tokens each, the chat template's stop tokens, gppo.py's per-prompt seeds) are generated from a
Hugging Face checkpoint: batch 0 to warm up, then `repeat` timed batches, the engine's time their
median. With transformers importable (it is not a dependency; e.g. the virtualenv bench_vs_trl.py
makes), its generate() runs each batch right after the engine: each prompt repeated `samples` times,
left-padded, sampling at T = 1 with the same stop tokens. Then batch 1 runs again with timing
wrappers around the model's modules and the engine's functions, which split its
wall clock into:
  matmuls        every nn.Linear call (q/k/v/o, the MLP, lm_head)
  attention      PagedKVCache.attend: writing the step's K/V into the pool, then the decode (or prefill) attention
                 (decode: the C++ kernel of parts/decode_kernels.py, or with --cpu_kernel=False the PyTorch
                 cascade path)
  norms, rotary  the RMSNorm calls; apply_rope
  rest of model  the forward minus the above: the input tensors, embedding, the cos/sin lookup, residual adds,
                 SiLU * up, reshapes, the logits' rows
  sampling       rollout.sample (softmax, the inverse CDF)
  engine         generate minus the forward and sampling: scheduling, block tables (or the cascade layout),
                 copy-on-write, appending tokens
The wrappers' own cost lands in "rest of model" and "engine"; it shows in the two totals printed,
the batch with the wrappers and without. torch.profiler is not used: on small ops its per-op times
disagree with the wall clock of the calls that contain them. Last, the matmul floor: the FLOPs of
every Linear call (2 x rows x in x out), each at the rate its shape reaches alone in a hot loop.

Run:  python benchmarks/profile_engine.py --model=out/sums/sft/hf                                 # the toy's step batch
      out/bench_vs_trl/venv/bin/python benchmarks/profile_engine.py --model=out/sums/sft/hf        # + transformers
"""

import os
import statistics
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as gppo.py sets it
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import data  # noqa: E402
import gppo  # noqa: E402
import model as model_py  # noqa: E402
from model import from_pretrained  # noqa: E402
from parts import kv_cache  # noqa: E402
from parts.cli import parse_config  # noqa: E402
import rollout  # noqa: E402
from parts.trainer import run_entry_point  # noqa: E402


@dataclass
class ProfileConfig:
    # fmt: off
    model: str = "out/sums/sft/hf"   # a Hugging Face checkpoint directory (with its tokenizer)
    math_data: str = "out/sums/toy/sums/rl/toy_math.jsonl"   # RL prompts as gppo.py reads them; the default: the
    #                               sums toy's, of the logged numbers (TOY=sums OUT=out/sums bash train.sh)
    prompts: int = 32             # gppo.py's prompts_per_step
    samples: int = 8              # gppo.py's group_size
    max_tokens: int = 192         # gppo.py's max_response_len
    threads: int = 1              # torch threads (bench_vs_trl.py's default)
    repeat: int = 4               # timed batches per side, after one untimed warm-up batch
    skip_hf: bool = False         # leave transformers' generate out even if it is importable
    cpu_kernel: bool = True       # decode attention in the engine's C++ kernel if it builds; False: the cascade path
    # fmt: on

    def __post_init__(self):
        for name in ("prompts", "max_tokens", "threads", "repeat"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name}={getattr(self, name)}: must be >= 1")
        if self.samples < 2:
            raise ValueError(f"--samples={self.samples}: must be >= 2 (gppo.py's group_size)")
        if not os.path.isfile(os.path.join(self.model, "config.json")):
            raise ValueError(
                f"--model={self.model!r} has no config.json (give a Hugging Face "
                "checkpoint directory, e.g. sft.py's out_dir/hf)"
            )


def main(c: ProfileConfig):
    torch.set_num_threads(c.threads)
    rl = gppo.GPPOConfig(math_data=c.math_data, group_size=c.samples, max_response_len=c.max_tokens)
    tokenizer = data.load_tokenizer(c.model)
    tasks = data.rl_prompts(rl, tokenizer)[0]
    model = from_pretrained(c.model, dtype=torch.float32, device=torch.device("cpu")).eval()
    engine = rollout.LLMEngine(
        model,
        max_num_seqs=c.prompts * c.samples,
        max_model_len=rl.max_prompt_len + c.max_tokens,
        cpu_kernel=None if c.cpu_kernel else False,
    )
    stop = tuple(data.stop_token_ids(tokenizer))
    hf = None if c.skip_hf else load_hf(c.model)
    print(
        f"{c.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, fp32; {c.threads} threads; "
        f"{c.prompts} prompts x {c.samples} samples, T = 1, <= {c.max_tokens} new tokens; "
        f"transformers: {'not importable' if hf is None and not c.skip_hf else 'skipped' if hf is None else 'yes'}; "
        f"decode attention: {engine.decode.name}"
    )

    def batch(k):  # gppo.py's k-th rollout batch: its prompts and per-prompt seeds
        first = k * c.prompts
        chosen = data.stream(tasks, first, c.prompts, rl.seed)
        return [t["prompt_ids"] for t in chosen], gppo.sampling_params(
            rl, range(first, first + c.prompts), stop
        )

    times = {"engine": [], "transformers": []}
    for k in range(c.repeat + 1):  # batch 0 warms up both sides
        prompts, params = batch(k)
        start = time.perf_counter()
        outs = engine.generate(prompts, params)
        seconds = time.perf_counter() - start
        lengths = [len(s.token_ids) for group in outs for s in group]
        line = f"batch {k}: engine {seconds:.3f} s ({engine.stats.steps} steps, {sum(lengths)} tokens, longest {max(lengths)})"
        if k:
            times["engine"].append(seconds)
        if hf is not None:
            seconds, new = hf_generate(hf, prompts, c.samples, c.max_tokens, list(stop), seed=k)
            line += f"; transformers {seconds:.3f} s ({new} steps)"
            if k:
                times["transformers"].append(seconds)
        print(line + (" (warm-up)" if k == 0 else ""), flush=True)
    plain = statistics.median(times["engine"])
    print(f"\nengine, median of {c.repeat}: {plain:.3f} s")
    if times["transformers"]:
        theirs = statistics.median(times["transformers"])
        print(
            f"transformers generate, median of {c.repeat}: {theirs:.3f} s: the engine is {theirs / plain:.2f}x as fast"
        )

    prompts, params = batch(1)  # the first timed batch again, now split by part
    with split_timers() as parts:
        start = time.perf_counter()
        engine.generate(prompts, params)
        total = time.perf_counter() - start
    rows = split(parts, total)
    print(f"\nbatch 1 with timing wrappers: {total:.3f} s (plain: {times['engine'][0]:.3f} s)")
    print(f"{'part':<16}{'seconds':>9}{'share':>8}")
    for name, seconds in rows:
        print(f"{name:<16}{seconds:>9.3f}{seconds / total:>8.0%}")
    flops, floor = matmul_floor(parts["linear_shapes"])
    print(
        f"\nmatmuls: {flops / 1e9:.1f} GFLOP in {parts['matmuls']:.3f} s ({flops / parts['matmuls'] / 1e9:.0f} GFLOP/s); "
        f"the same shapes alone in a hot loop: {floor:.3f} s ({flops / floor / 1e9:.0f} GFLOP/s), "
        f"so the matmuls run at {floor / parts['matmuls']:.0%} of their floor"
    )
    print(
        f"everything else: {total - parts['matmuls']:.3f} s over {engine.stats.steps} engine steps "
        f"({(total - parts['matmuls']) / engine.stats.steps * 1e3:.2f} ms a step)"
    )


# ----------------------------------------------------------------------------- the wrappers


@contextmanager
def split_timers():
    """Seconds per part while inside; patches the classes and module functions the engine calls,
    restores them."""
    parts = Counter()
    parts["linear_shapes"] = Counter()  # (rows, in, out) -> calls
    parts["calls"] = Counter()  # part -> calls
    patches = []

    def timed(owner, name, part, shapes=None):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = original(*args, **kwargs)
            parts[part] += time.perf_counter() - start
            parts["calls"][part] += 1
            if shapes == "linear":  # nn.Linear.forward(self, x)
                layer, x = args
                parts["linear_shapes"][
                    x.numel() // x.shape[-1], layer.in_features, layer.out_features
                ] += 1
            elif shapes == "logits":  # logits_fp32(hidden (n, D), weight (V, D))
                hidden, weight = args
                parts["linear_shapes"][hidden.shape[0], weight.shape[1], weight.shape[0]] += 1
            return out

        patches.append((owner, name, original))
        setattr(owner, name, wrapper)

    try:
        timed(torch.nn.Linear, "forward", "matmuls", shapes="linear")
        # the LM head: one GEMM with an fp32 output
        timed(rollout, "logits_fp32", "matmuls", shapes="logits")
        timed(kv_cache.PagedKVCache, "attend", "attention")
        timed(model_py.RMSNorm, "forward", "norms")
        # Attention.forward looks it up in model.py's namespace
        timed(model_py, "apply_rope", "rotary")
        # so does LLMEngine._append_tokens in rollout.py's
        timed(rollout, "sample", "sampling")
        timed(kv_cache.PagedKVCache, "run", "forward")
        timed(rollout, "logits_fp32", "lm_head")  # the rows sampled from: a forward ends there
        yield parts
    finally:
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def split(parts, total: float) -> list:
    """(part, seconds) rows; the model's rest and the engine's own work are what the wrappers do not
    cover."""
    leaves = ["matmuls", "attention", "norms", "rotary"]
    forward = parts["forward"] + parts["lm_head"]  # cache.run, then the LM head on sampled rows
    rest_of_model = forward - sum(parts[p] for p in leaves)
    engine = total - forward - parts["sampling"]
    return [(p, parts[p]) for p in leaves] + [
        ("rest of model", rest_of_model),
        ("sampling", parts["sampling"]),
        ("engine", engine),
    ]


def matmul_floor(shapes: Counter, repeats: int = 5) -> tuple:
    """(FLOPs, seconds) of the recorded Linear calls, each shape timed alone (the best of `repeats`
    hot calls)."""
    flops = seconds = 0.0
    with torch.inference_mode():
        for (rows, n_in, n_out), calls in shapes.items():
            x = torch.randn(rows, n_in)
            w = torch.randn(n_out, n_in)
            F.linear(x, w)
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                F.linear(x, w)
                best = min(best, time.perf_counter() - start)
            flops += 2 * rows * n_in * n_out * calls
            seconds += best * calls
    return flops, seconds


# ---------------------------------------------------------------------- transformers, if importable


def load_hf(path: str):
    try:
        import transformers
    except ImportError:
        return None
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.inference_mode()
def hf_generate(hf, prompts: list, samples: int, max_tokens: int, stop: list, seed: int) -> tuple:
    """(seconds, decode steps) of generate() on the batch: each prompt `samples` times,
    left-padded."""
    rows = [p for p in prompts for _ in range(samples)]
    width = max(map(len, rows))
    input_ids = torch.tensor([[stop[0]] * (width - len(r)) + r for r in rows])
    attention_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = hf.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_tokens,
        eos_token_id=stop,
        pad_token_id=stop[0],
    )
    return time.perf_counter() - start, out.shape[1] - width


if __name__ == "__main__":
    # bad --math_data: one line, not a traceback
    run_entry_point(main, parse_config(ProfileConfig))
