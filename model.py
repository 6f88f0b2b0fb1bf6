"""Qwen3, written by hand in plain PyTorch, with Hugging Face checkpoint I/O. For each of L layers,
x (B, T, D):
    h = x + o_proj( Attention( rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))), v_proj(rms(x)) ) )
    x = h + down_proj( silu(gate_proj(rms(h))) * up_proj(rms(h)) )                 then logits = lm_head(rms(x))
Qwen3 rather than Llama: a per-head RMSNorm on q and k before RoPE; head_dim its own field; no
biases; RMSNorm in fp32; RoPE theta 1e6 on two halves (rotate_half), optionally YaRN-scaled; small
models tie lm_head to embed_tokens. Three seams for the rest of the project:
  - packed rows: document_ids (B, T) and position_ids restarting per document; attention never crosses documents
    (one causal SDPA call each, no (T, T) mask); prefix_docs lets a document continue another (an RL group's prompt
    packed once, each response attending to it, then to itself);
  - an external KV cache: kv_cache= any object with attend(layer_idx, q, k, v) -> out (parts/kv_cache.py's pool);
    if its `kernels` is set (parts/norm_kernels.py), norms and RoPE run as those (same roundings);
  - return_hidden=True: the final normed hidden states, so a loss applies the LM head itself, in chunks.
Checkpoints are Hugging Face directories; from_pretrained builds the model on the meta device and
reads one tensor at a time into its final dtype and device (an 8B model is never allocated twice,
nor kept memory-mapped).
    python model.py CHECKPOINT_DIR        # load one and print a summary
"""

import json
import math
import os
import sys
from dataclasses import dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from parts import hf_checkpoint  # Hugging Face directories, one tensor at a time
from parts.hf_checkpoint import CheckpointError


# ----------------------------------------------------------------------------- config


@dataclass
class Qwen3Config:
    # fmt: off
    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 36
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: dict | None = None       # e.g. {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 32768}
    max_position_embeddings: int = 40960
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"          # dtype of the weights (as stored, or as loaded with dtype=)
    bos_token_id: int | None = 151643
    eos_token_id: int | None = 151645
    # fmt: on

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("yarn", "default", None):
                raise ValueError(
                    f"rope_scaling type {kind!r} is not supported (only 'yarn' and 'default')"
                )
            if kind in ("default", None):
                self.rope_scaling = None
            elif not self.rope_scaling.get("factor"):
                raise ValueError(
                    f"rope_scaling {self.rope_scaling}: YaRN needs a 'factor' (e.g. 2.5)"
                )

    @classmethod
    def from_hf_dict(cls, cfg: dict, source: str = "config.json") -> "Qwen3Config":
        # (RoPE: top-level rope_theta / rope_scaling, or one rope_parameters)
        archs = cfg.get("architectures") or []
        if cfg.get("model_type") != "qwen3" and "Qwen3ForCausalLM" not in archs:
            raise CheckpointError(
                f"{source}: model_type={cfg.get('model_type')!r}, architectures={archs}: "
                "this file implements Qwen3 (dense) only; Qwen3-MoE, Qwen2 and others are not supported"
            )
        for field, qwen3_value in (
            ("attention_bias", False),
            ("hidden_act", "silu"),
            ("use_sliding_window", False),
        ):
            if cfg.get(field, qwen3_value) != qwen3_value:
                raise CheckpointError(
                    f"{source}: {field}={cfg[field]!r} is not supported (Qwen3 uses {qwen3_value!r})"
                )
        rope_params = dict(cfg.get("rope_parameters") or {})
        rope_theta = cfg.get("rope_theta", rope_params.get("rope_theta", 1_000_000.0))
        rope_scaling = cfg.get("rope_scaling")
        if rope_scaling is None and rope_params.get("rope_type", "default") != "default":
            rope_scaling = {k: v for k, v in rope_params.items() if k != "rope_theta"}
        kwargs = {
            f.name: cfg[f.name]
            for f in fields(cls)
            if f.name in cfg and f.name not in ("rope_theta", "rope_scaling")
        }
        missing = [
            k
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
            )
            if k not in cfg
        ]
        if missing:
            raise CheckpointError(f"{source}: missing required field(s) {missing}")
        if cfg.get("head_dim") is None:
            kwargs["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
        kwargs["torch_dtype"] = str(cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))).replace(
            "torch.", ""
        )
        if isinstance(kwargs.get("eos_token_id"), list):
            kwargs["eos_token_id"] = kwargs["eos_token_id"][0]
        try:
            return cls(rope_theta=float(rope_theta), rope_scaling=rope_scaling, **kwargs)
        except ValueError as e:
            raise CheckpointError(f"{source}: {e}") from None

    @classmethod
    def from_json(cls, path: str) -> "Qwen3Config":
        try:
            with open(path) as fh:
                cfg = json.load(fh)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path}: no config.json here; is this a Hugging Face checkpoint directory?"
            ) from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
        return cls.from_hf_dict(cfg, source=path)

    def to_hf_dict(self) -> dict:
        """A config.json that transformers' Qwen3ForCausalLM loads unchanged. It uses the older
        layout (top-level rope_theta / rope_scaling / torch_dtype), which transformers 4.x reads and
        5.x converts."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(
            architectures=["Qwen3ForCausalLM"],
            model_type="qwen3",
            hidden_act="silu",
            attention_bias=False,
            attention_dropout=0.0,
            use_cache=True,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=self.num_hidden_layers,
            initializer_range=0.02,
        )
        if d["rope_scaling"] is None:
            del d["rope_scaling"]
        return d


# ----------------------------------------------------------------------------- building blocks


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + eps), computed in fp32 and cast back before the weight (as HF
    does)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, kernels=None):
        if kernels is not None:  # the engine's: this formula, these roundings
            return kernels.rms_norm(x, self.weight, self.eps)
        # the same formula as one fused op (faster decode)
        if x.dtype == torch.float32 == self.weight.dtype:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_inv_freq(cfg: Qwen3Config) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (head_dim/2,) and the attention scale folded into cos/sin (1.0 without
    YaRN)."""
    dim = cfg.head_dim
    base = cfg.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    inv_freq = 1.0 / pos_freqs
    if cfg.rope_scaling is None:
        return inv_freq, 1.0
    # YaRN (Peng et al. 2023): divide the low frequencies by `factor`, keep the high ones, blend
    # linearly in between; scale attention logits by attention_factor^2 via cos/sin. Accepted:
    # rope_scaling (or rope_parameters) {rope_type: yarn, factor, original_max_position_embeddings
    # (default: max_position_embeddings), attention_factor | mscale + mscale_all_dim, beta_fast,
    # beta_slow, truncate}.
    rs = cfg.rope_scaling
    factor = float(rs["factor"])
    original_max = rs.get("original_max_position_embeddings") or cfg.max_position_embeddings

    def mscale(m=1.0):
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0

    attention_factor = rs.get("attention_factor")
    if attention_factor is None:  # mscale / mscale_all_dim: DeepSeek-style configs
        both = rs.get("mscale") and rs.get("mscale_all_dim")
        attention_factor = mscale(rs["mscale"]) / mscale(rs["mscale_all_dim"]) if both else mscale()

    # the dimension whose wavelength fits num_rotations times in original_max
    def correction_dim(num_rotations):
        return (dim * math.log(original_max / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = correction_dim(rs.get("beta_fast") or 32)
    high = correction_dim(rs.get("beta_slow") or 1)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high += 0.001 if low == high else 0
    # (hd/2,)
    keep = 1 - ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    # not inv_freq / factor: equal, but rounds as HF does
    interpolated = 1.0 / (factor * pos_freqs)
    return interpolated * (1 - keep) + inv_freq * keep, float(attention_factor)


class RotaryEmbedding(nn.Module):
    """Precomputed fp32 cos/sin tables, looked up by position id. Not a buffer (so meta-device
    builds and FSDP never see it); built on first use on each device, max(max_position_embeddings,
    reserve()'s) long. Positions on the CPU grow it on demand; on a GPU that check would wait for
    the device, so callers reserve (the engine: max_model_len)."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.cfg = cfg
        self.reserved = cfg.max_position_embeddings
        self._tables = {}

    def reserve(self, positions: int):
        self.reserved = max(self.reserved, positions)

    def forward(self, position_ids: torch.Tensor):  # (B, T) -> cos, sin: (B, T, 1, hd) fp32
        device = position_ids.device
        needed = (
            int(position_ids.max()) + 1
            if position_ids.numel() and device.type == "cpu"
            else self.reserved
        )
        table = self._tables.get(device)
        if table is None or table[0].shape[0] < needed:
            n = max(needed, self.reserved)
            inv_freq, scale = rope_inv_freq(self.cfg)
            freqs = torch.outer(torch.arange(n, dtype=torch.float32), inv_freq)  # (n, hd/2)
            emb = torch.cat([freqs, freqs], dim=-1)  # (n, hd)
            table = ((emb.cos() * scale).to(device), (emb.sin() * scale).to(device))
            self._tables[device] = table
        cos, sin = table
        return cos[position_ids].unsqueeze(2), sin[position_ids].unsqueeze(2)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):  # x: (B, T, H, hd); cos/sin: (B, T, 1, hd) fp32
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


def causal_attention(q, k, v, docs=None):
    """softmax(q k^T / sqrt(hd) + causal mask) v, with q: (B, Hq, T, hd), k/v: (B, Hkv, T, hd) ->
    (B, Hq, T, hd).

    docs: None (each row is one sequence) or, per row, (lengths, prefixes): the lengths of its
    documents in order and, per document, the index of an earlier document it continues (-1: none).
    Each document is its own causal SDPA call, which equals a block-diagonal causal mask without
    building the (T, T) mask or computing the masked-out blocks. A document with a prefix attends to
    the prefix's tokens, then causally to its own: its call runs on [prefix; document], exactly the
    call it would get packed with its own copy of the prefix, and keeps the document's rows (the
    prefix's own rows come from the prefix's call).
    """
    gqa = q.shape[1] != k.shape[1]
    if docs is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    rows = []
    for b, (lengths, prefixes) in enumerate(docs):
        # per tensor: (1, H, length, hd) per doc
        parts = [t[b : b + 1].split(lengths, dim=2) for t in (q, k, v)]
        outs = []
        for d, prefix in enumerate(prefixes):
            if prefix < 0:
                outs.append(
                    F.scaled_dot_product_attention(
                        *(p[d] for p in parts), is_causal=True, enable_gqa=gqa
                    )
                )
            else:
                qd, kd, vd = (torch.cat([p[prefix], p[d]], dim=2) for p in parts)
                y = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, enable_gqa=gqa)
                outs.append(y[:, :, lengths[prefix] :])
        rows.append(torch.cat(outs, dim=2))
    return torch.cat(rows, dim=0)


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, docs, kv_cache, kernels=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        if kernels is not None:  # the engine on a GPU: a norm and its RoPE as one kernel
            q = kernels.norm_rope(q, self.q_norm.weight, self.q_norm.eps, cos, sin)
            k = kernels.norm_rope(k, self.k_norm.weight, self.k_norm.eps, cos, sin)
        else:
            q = apply_rope(self.q_norm(q), cos, sin)
            k = apply_rope(self.k_norm(k), cos, sin)
        if kv_cache is not None:
            y = kv_cache.attend(self.layer_idx, q, k, v)  # (B, T, Hq, hd)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
            y = causal_attention(q, k, v, docs).transpose(1, 2)
        return self.o_proj(y.reshape(B, T, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, docs=None, kv_cache=None, kernels=None):
        x = x + self.self_attn(self.input_layernorm(x, kernels), cos, sin, docs, kv_cache, kernels)
        return x + self.mlp(self.post_attention_layernorm(x, kernels))


def documents(document_ids: torch.Tensor, prefix_docs=None) -> list[tuple[list, list]]:
    """(B, T) ids, each document a contiguous run of one id -> per row, (its documents' lengths,
    their prefixes). prefix_docs: None, or per row a list with one entry per document: the index of
    an earlier document (itself without a prefix) whose tokens it continues, or -1. One
    device-to-host copy per forward; every layer reuses it."""
    lengths = [
        torch.unique_consecutive(row, return_counts=True)[1].tolist() for row in document_ids.cpu()
    ]
    if prefix_docs is None:
        return [(row, [-1] * len(row)) for row in lengths]
    if len(prefix_docs) != len(lengths):
        raise ValueError(f"prefix_docs has {len(prefix_docs)} rows, document_ids {len(lengths)}")
    for b, (row, prefixes) in enumerate(zip(lengths, prefix_docs)):
        if len(prefixes) != len(row):
            raise ValueError(
                f"prefix_docs[{b}] has {len(prefixes)} entries for the row's {len(row)} documents"
            )
        for d, p in enumerate(prefixes):
            if not (p == -1 or (0 <= p < d and prefixes[p] == -1)):
                raise ValueError(
                    f"prefix_docs[{b}][{d}] = {p}: expected -1 or an earlier document without a prefix"
                )
    return [(row, list(prefixes)) for row, prefixes in zip(lengths, prefix_docs)]


# ----------------------------------------------------------------------------- the model


class Qwen3(nn.Module):
    """Parameter names are Hugging Face's without the leading `model.` (see `hf_name`)."""

    def __init__(self, cfg: Qwen3Config):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(cfg)
        self.activation_checkpointing = False
        self.tie_weights()

    def tie_weights(self):
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @torch.no_grad()
    def init_weights(self, std: float = 0.02, seed: int | None = None):
        """Fresh weights for training from scratch (the toy model): N(0, std) matrices, unit
        norms."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        return self

    def forward(
        self,
        input_ids,
        position_ids=None,
        document_ids=None,
        kv_cache=None,
        return_hidden=False,
        prefix_docs=None,
    ):
        """input_ids (B, T) -> logits (B, T, V) (or final hidden (B, T, D) with return_hidden).

        position_ids (B, T): default 0..T-1. document_ids (B, T): packed rows, each document a
        contiguous run of one id; tokens attend only within their document (the caller restarts
        position_ids per document). prefix_docs: per row, per document, the earlier document it
        continues or -1 (see `documents`); a continuing document's positions go on from its
        prefix's. kv_cache: see module docstring.
        """
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        for name, ids in (("position_ids", position_ids), ("document_ids", document_ids)):
            if ids is not None and ids.shape != input_ids.shape:
                raise ValueError(
                    f"{name} has shape {tuple(ids.shape)}, input_ids {tuple(input_ids.shape)}"
                )
        if document_ids is not None and kv_cache is not None:
            raise ValueError(
                "document_ids and kv_cache were both given: with a cache, its attend() alone "
                "decides what each query sees; pass document_ids=None"
            )
        if prefix_docs is not None and document_ids is None:
            raise ValueError(
                "prefix_docs needs document_ids: it names documents by their index in the row"
            )
        docs = documents(document_ids, prefix_docs) if document_ids is not None else None
        cos, sin = self.rotary(position_ids)
        x = self.embed_tokens(input_ids)  # (B, T, D)
        kernels = getattr(kv_cache, "kernels", None)  # the engine's norm kernels, or None
        for layer in self.layers:
            if self.activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, cos, sin, docs, kv_cache, use_reentrant=False)
            else:
                x = layer(x, cos, sin, docs, kv_cache, kernels)
        x = self.norm(x, kernels)
        return x if return_hidden else self.lm_head(x)


def logits_fp32(hidden, weight):
    """hidden (n, D) @ weight (V, D).T -> logits (n, V) in fp32, accumulated in fp32 and never
    rounded to bf16. A
    bf16 output rounds each logit to 8 mantissa bits (|z| ~ 10 moves by up to 0.03), and logπ with it, differently
    in the engine and the trainer: noise in the ratio r = π/π_old next to a 0.2 clip band. On CUDA
    one bf16 GEMM with an fp32 output (torch >= 2.8); elsewhere (or on an older torch) the operands
    are cast to fp32 first."""
    if hidden.dtype == torch.float32 and weight.dtype == torch.float32:
        return hidden @ weight.T
    if hidden.is_cuda and hidden.dtype == weight.dtype:
        try:
            return torch.mm(hidden, weight.T, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            # a torch without mm(out_dtype=): the exact same values through an fp32 copy of the
            # operands
            pass
    return hidden.float() @ weight.float().T


def hf_name(name: str) -> str:
    return name if name.startswith("lm_head.") else "model." + name


# ----------------------------------------------------------------------------- checkpoints


def from_pretrained(path: str, dtype: torch.dtype | None = None, device=None) -> Qwen3:
    """Load a Hugging Face Qwen3 directory; dtype None keeps the stored dtype, device None means CPU
    (one tensor at a time: parts/hf_checkpoint.py)."""
    return hf_checkpoint.load(on_meta(path, dtype), path, hf_name, dtype, device)


def check_checkpoint(path: str) -> torch.dtype:
    """The dtype a Qwen3 directory stores its weights in, once config.json and every tensor's name,
    shape and bytes are checked (headers only); CheckpointError or FileNotFoundError naming the file
    otherwise."""
    return hf_checkpoint.checked_dtype(path, on_meta(path), hf_name)


def save_pretrained(model: Qwen3, path: str, **options) -> None:
    """Write a Hugging Face directory (parts/hf_checkpoint.save_pretrained's options: state_dict,
    max_shard_bytes, generation_config)."""
    hf_checkpoint.save_pretrained(model, path, hf_name, **options)


def on_meta(path: str, dtype: torch.dtype | None = None) -> Qwen3:
    """The model of a checkpoint directory's config.json, on the meta device (no storage): shapes
    and names only."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: checkpoint directory does not exist")
    cfg = Qwen3Config.from_json(os.path.join(path, "config.json"))
    if dtype is not None:
        cfg.torch_dtype = str(dtype).removeprefix("torch.")
    with torch.device("meta"):
        return Qwen3(cfg)


if __name__ == "__main__":  # one positional argument
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: python model.py CHECKPOINT_DIR   (loads it and prints a summary)")
        sys.exit(0 if len(sys.argv) == 2 else 2)
    model = from_pretrained(sys.argv[1])
    parameters = sum(p.numel() for p in model.parameters())
    print(
        f"{model.config}\n{parameters / 1e6:.2f}M parameters, dtype {next(model.parameters()).dtype}"
    )
    with torch.no_grad():
        print("logits[0, -1, :5] =", model(torch.tensor([[1, 2, 3, 4]]))[0, -1, :5].tolist())
