"""Throughput of rollout.py's paged engine on CPU, against a plain batched generate with a
contiguous KV cache and against Hugging Face transformers' generate (if installed; it is not a
project dependency), on the same random weights and the same RL-shaped workload: P prompts x N
samples x T new tokens, temperature 1.

The plain baseline repeats every prompt N times, left-pads the batch, and keeps a (B, max_len) cache
per layer with an attention mask; it is what a first implementation looks like. Peak KV memory:
blocks actually used by the engine (and its allocated pool) vs the contiguous cache of the baseline
(transformers' DynamicCache grows to the same size).

Each implementation runs --repeat times, interleaved (so a slow spell of a shared machine hits all
of them); the table shows the fastest run of each and lists all wall times. Every run generates
every token (no stop tokens): the engine's advantage from freeing finished samples early is not
counted here.

Run:  python benchmarks/bench_rollout.py                 (defaults: 16 prompts x 8 samples x 128 tokens, 1 thread)
      python benchmarks/bench_rollout.py --prompts=4 --new_tokens=32 --skip_hf=1 --repeat=1
"""

import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from parts.cli import parse_config  # noqa: E402
from model import Qwen3, Qwen3Config, hf_name  # noqa: E402
from rollout import LLMEngine, SamplingParams  # noqa: E402


@dataclass
class BenchConfig:
    # fmt: off
    prompts: int = 16
    samples: int = 8
    new_tokens: int = 128
    min_prompt_len: int = 32
    max_prompt_len: int = 96
    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 768
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    block_size: int = 16
    threads: int = 1          # torch threads; 1 is steadiest on a shared 2-core machine (0 = torch default)
    repeat: int = 3           # timed runs of each implementation, interleaved; the table shows the fastest
    skip_hf: bool = False     # leave transformers' generate out (it is not a project dependency)
    cpu_kernel: bool = True   # the engine's decode attention in its C++ kernel if it builds; False: the cascade path
    # fmt: on


class ContiguousKVCache:
    """The plain cache: k/v (B, S, Hkv, hd) per layer, written at [length, length + T); attention
    with a mask that hides left padding and future positions."""

    def __init__(self, cfg, batch, max_len, pad_lens, dtype):
        shape = (cfg.num_hidden_layers, batch, max_len, cfg.num_key_value_heads, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.pad_lens = pad_lens  # (B,) left padding of each row
        self.length = 0  # positions filled (same for all rows)
        self.nbytes = 2 * self.k.numel() * self.k.element_size()

    def attend(self, layer_idx, q, k, v):  # q (B, T, Hq, hd), k/v (B, T, Hkv, hd)
        T = q.shape[1]
        start = self.length
        end = self.length + T
        self.k[layer_idx, :, start:end] = k
        self.v[layer_idx, :, start:end] = v
        keys = torch.arange(end)
        queries = torch.arange(start, end)
        visible = (keys[None, None, :] <= queries[None, :, None]) & (
            keys[None, None, :] >= self.pad_lens[:, None, None]
        )
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            self.k[layer_idx, :, :end].transpose(1, 2),
            self.v[layer_idx, :, :end].transpose(1, 2),
            attn_mask=visible[:, None],
            enable_gqa=q.shape[2] != k.shape[2],
        )
        if layer_idx == len(self.k) - 1:
            self.length = end
        return out.transpose(1, 2)


@torch.inference_mode()
def contiguous_generate(model, prompts, samples, new_tokens, seed=0):
    rows = [p for p in prompts for _ in range(samples)]
    B = len(rows)
    P = max(map(len, rows))
    pad_lens = torch.tensor([P - len(r) for r in rows])
    input_ids = torch.tensor([[0] * (P - len(r)) + r for r in rows])
    positions = (torch.arange(P)[None, :] - pad_lens[:, None]).clamp(min=0)
    cache = ContiguousKVCache(
        model.config, B, P + new_tokens, pad_lens, next(model.parameters()).dtype
    )
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(new_tokens):
        logits = model(input_ids, position_ids=positions, kv_cache=cache, return_hidden=True)[:, -1]
        logits = model.lm_head(logits).float()
        token = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)  # (B, 1)
        out.append(token)
        input_ids, positions = token, positions[:, -1:] + 1
    return torch.cat(out, 1), cache.nbytes


@torch.inference_mode()
def hf_generate(hf_model, prompts, samples, new_tokens):
    P = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (P - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    return hf_model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_return_sequences=samples,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=0,
        eos_token_id=None,
    )


def main(b: BenchConfig):
    if b.threads:
        torch.set_num_threads(b.threads)
    cfg = Qwen3Config(
        vocab_size=b.vocab_size,
        hidden_size=b.hidden_size,
        intermediate_size=b.intermediate_size,
        num_hidden_layers=b.num_layers,
        num_attention_heads=b.num_heads,
        num_key_value_heads=b.num_kv_heads,
        head_dim=b.head_dim,
        max_position_embeddings=b.max_prompt_len + b.new_tokens,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = Qwen3(cfg).init_weights(std=0.02, seed=0).eval()
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(
            b.vocab_size,
            (int(torch.randint(b.min_prompt_len, b.max_prompt_len + 1, (), generator=g)),),
            generator=g,
        ).tolist()
        for _ in range(b.prompts)
    ]
    total = b.prompts * b.samples * b.new_tokens
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {n_params / 1e6:.2f}M params fp32 (hidden {b.hidden_size}, {b.num_layers} layers, {b.num_heads}/{b.num_kv_heads} "
        f"heads x {b.head_dim}, vocab {b.vocab_size}); {torch.get_num_threads()} torch threads"
    )
    print(
        f"workload: {b.prompts} prompts ({sum(map(len, prompts))} tokens, {b.min_prompt_len}-{b.max_prompt_len} each) "
        f"x {b.samples} samples x {b.new_tokens} new tokens = {total} generated tokens, temperature 1"
    )
    runs = {}  # name -> (function that generates the whole workload and returns its peak KV bytes)

    engine = LLMEngine(
        model,
        max_num_seqs=b.prompts * b.samples,
        max_model_len=b.max_prompt_len + b.new_tokens,
        block_size=b.block_size,
        cpu_kernel=None if b.cpu_kernel else False,
    )
    block_bytes = engine.cache.nbytes // engine.blocks.num_blocks
    # warm-up
    engine.generate(prompts[:2], SamplingParams(temperature=1.0, max_tokens=4, n=2))

    def run_engine():
        out = engine.generate(
            prompts, SamplingParams(temperature=1.0, max_tokens=b.new_tokens, n=b.samples, seed=0)
        )
        assert sum(len(s.token_ids) for o in out for s in o) == total
        return engine.stats.peak_blocks_used * block_bytes

    runs["paged engine (rollout.py)"] = run_engine

    # warm-up
    contiguous_generate(model, prompts[:2], 2, 4)
    runs["plain batched, contiguous cache"] = lambda: contiguous_generate(
        model, prompts, b.samples, b.new_tokens
    )[1]
    kv_bytes = (
        2
        * cfg.num_hidden_layers
        * b.prompts
        * b.samples
        * (max(map(len, prompts)) + b.new_tokens)
        # a (B, max_len) fp32 K and V per layer
        * cfg.num_key_value_heads
        * cfg.head_dim
        * 4
    )

    try:
        import transformers
    except ImportError:
        transformers = None
    if b.skip_hf or transformers is None:
        print(
            "transformers comparison skipped: "
            + (
                "--skip_hf=1"
                if b.skip_hf
                else "transformers is not installed "
                "(pip install transformers, for this benchmark only; it is not a project dependency)"
            )
        )
    else:
        hf_model = transformers.Qwen3ForCausalLM(
            transformers.Qwen3Config(**cfg.to_hf_dict())
        ).eval()
        hf_model.load_state_dict({hf_name(n): p for n, p in model.state_dict().items()})
        with torch.inference_mode():  # same weights, same function: compare logits once
            ids = torch.tensor([prompts[0]])
            diff = (hf_model(ids).logits - model(ids)).abs().max().item()
        print(
            f"transformers {transformers.__version__}: max |logits - ours| = {diff:.2e} on one prompt; "
            f"attention implementation {hf_model.config._attn_implementation}"
        )
        # warm-up
        hf_generate(hf_model, prompts[:2], 2, 4)

        def run_hf():
            out = hf_generate(hf_model, prompts, b.samples, b.new_tokens)
            assert out.shape == (b.prompts * b.samples, max(map(len, prompts)) + b.new_tokens), (
                out.shape
            )
            # its DynamicCache ends this size
            return kv_bytes

        runs[f"transformers {transformers.__version__} generate"] = run_hf

    # name -> [(wall s, CPU s)], runs interleaved so drift hits all alike
    times = {name: [] for name in runs}
    for _ in range(b.repeat):
        for name, run in runs.items():
            t0 = time.perf_counter()
            c0 = time.process_time()
            peak_kv = run()
            times[name].append((time.perf_counter() - t0, time.process_time() - c0, peak_kv))
    print(
        f"engine stats (last run): {engine.stats}; pool allocated {engine.cache.nbytes / 2**20:.1f} MiB; decode "
        f"attention: {engine.decode.name}"
    )

    # CPU seconds (all threads) are less disturbed than wall seconds when others share the machine
    print(f"\nfastest of {b.repeat} interleaved runs each (all wall times in brackets)")
    print(
        f"{'':34s} {'wall s':>8s} {'tokens/s':>9s} {'CPU s':>8s} {'tokens/CPU s':>13s} {'peak KV MiB':>12s}  all wall s"
    )
    best = {}
    for name, ts in times.items():
        seconds = min(t[0] for t in ts)
        cpu = min(t[1] for t in ts)
        best[name] = (seconds, cpu)
        print(
            f"{name:34s} {seconds:8.2f} {total / seconds:9.0f} {cpu:8.2f} {total / cpu:13.0f} {ts[-1][2] / 2**20:12.2f}  "
            f"[{' '.join(f'{t[0]:.2f}' for t in ts)}]"
        )
    names = list(best)
    for other in names[1:]:
        print(
            f"engine speed-up vs {other}: {best[other][0] / best[names[0]][0]:.2f}x wall, "
            f"{best[other][1] / best[names[0]][1]:.2f}x CPU time"
        )


if __name__ == "__main__":
    main(parse_config(BenchConfig))
