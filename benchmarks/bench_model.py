"""Forward+backward time of model.py's Qwen3 against Hugging Face transformers' Qwen3, same weights,
CPU.

Both models get identical fp32 weights (ours is loaded from theirs by parameter name); each timed
step is logits -> cross-entropy -> backward. Runs of the contenders are interleaved so that a noisy
shared machine slows them alike; the median step time is reported. A last line times our packed path
(document_ids, 4 documents per row), which transformers' eager model has no equivalent of.

Needs `pip install transformers` (benchmark only; not a project dependency). Run from the repo root:

    python benchmarks/bench_model.py                      # hidden 256, 4 layers, B=4, T=256
    python benchmarks/bench_model.py --threads=2 --steps=10 --T=512
"""

import copy
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import model as ours  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class BenchConfig:
    """One training step (forward + backward) of model.py's Qwen3 vs transformers' eager and SDPA
    models."""

    # fmt: off
    hidden: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    head_dim: int = 64
    intermediate: int = 768
    vocab: int = 4096
    B: int = 4               # rows per step
    T: int = 256             # tokens per row
    steps: int = 10          # timed steps (the median is reported)
    warmup: int = 2          # untimed steps first
    threads: int = 2         # torch threads
    seed: int = 0
    # fmt: on


def step_time(model, input_ids, targets, **kwargs) -> float:
    start = time.perf_counter()
    logits = model(input_ids, **kwargs)
    logits = logits if torch.is_tensor(logits) else logits.logits
    F.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main(a):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    hf_cfg = Qwen3Config(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    contenders = {}
    for impl in ("eager", "sdpa"):
        # a config copy per model: _from_config records attn_implementation on the config object it
        # gets
        m = Qwen3ForCausalLM._from_config(
            copy.deepcopy(hf_cfg), attn_implementation=impl, dtype=torch.float32
        ).train()
        assert m.config._attn_implementation == impl
        if contenders:
            m.load_state_dict(next(iter(contenders.values())).state_dict())
        else:  # weights big enough that a wrong implementation could not match by accident
            with torch.no_grad():
                for name, p in m.named_parameters():
                    p.copy_(
                        1 + 0.1 * torch.randn_like(p)
                        if name.endswith("norm.weight")
                        else 0.05 * torch.randn_like(p)
                    )
        contenders[f"transformers {impl}"] = m
    hf_state = contenders["transformers eager"].state_dict()
    mine = ours.Qwen3(ours.Qwen3Config.from_hf_dict(hf_cfg.to_dict())).train()
    mine.load_state_dict({n: hf_state[ours.hf_name(n)] for n, _ in mine.named_parameters()})
    contenders = {"ours": mine, **contenders}

    B = a.B
    T = a.T
    V = a.vocab
    input_ids = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    # same weights, same function: the logits must agree before timing means anything
    with torch.no_grad():
        ref = contenders["transformers eager"](input_ids).logits
        diff = (mine(input_ids) - ref).abs().max().item()
        assert 0 < diff < 1e-4, (
            f"ours and transformers disagree (or are suspiciously identical): {diff}"
        )
    print(
        f"config: hidden {a['hidden']}, {a['layers']} layers, {a['heads']}/{a['kv_heads']} heads x {a['head_dim']}, "
        f"ffn {a['intermediate']}, vocab {V}; B={B} T={T}; {a['threads']} threads; torch {torch.__version__}; "
        f"max |logits ours - eager| = {diff:.2e}"
    )

    doc_len = T // 4  # packed: 4 documents per row, positions restarting per document
    document_ids = torch.arange(T).div(doc_len, rounding_mode="floor").expand(B, T)
    position_ids = (torch.arange(T) % doc_len).expand(B, T)
    runs = {
        **{name: (m, {}) for name, m in contenders.items()},
        "ours packed (4 docs/row)": (
            mine,
            dict(position_ids=position_ids, document_ids=document_ids),
        ),
    }
    times = {name: [] for name in runs}
    for i in range(a.warmup + a.steps):
        for name, (m, kwargs) in runs.items():
            t = step_time(m, input_ids, targets, **kwargs)
            if i >= a.warmup:
                times[name].append(t)
    base = statistics.median(times["ours"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:28s} fwd+bwd median {med * 1e3:8.1f} ms  (min {min(ts) * 1e3:7.1f})  "
            f"{B * T / med:8.0f} tok/s  time / ours = {med / base:.2f}"
        )


if __name__ == "__main__":
    main(parse_config(BenchConfig))
