"""Memory on paper for training and serving Qwen3-shaped models the way this project does: per rank,
in bytes, phase by phase (the terms of each phase named), from a model's shape alone.

    c = SimpleNamespace(**QWEN3["8B"])        # or any object with a Qwen3 config's fields (model.Qwen3Config)
    name, peak, terms = peak_phase(gppo_phases(c, world=8, row_tokens=36864, kv_bytes=17.6e9, gpu=True, loss_chunk=2048))
sft_phases / gppo_phases / eval_phases follow the code's real choices: fp32 master weights sharded
by FSDP2 with bf16 compute, AdamW's two states, activation checkpointing (each layer's input kept,
one layer recomputed in the backward), the LM head applied a chunk of tokens at a time, and for RL
the engine's full bf16 copy and its KV pool. Standard library only. `python memory_plan.py` prints
the shapes' parameter counts and KV bytes per token.
"""

from types import SimpleNamespace

# Hugging Face config fields of the Qwen3 models (their config.json files)
QWEN3 = {
    "0.6B": dict(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=True,
        max_position_embeddings=40960,
        torch_dtype="bfloat16",
    ),
    "8B": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=False,
        max_position_embeddings=40960,
        torch_dtype="bfloat16",
    ),
    "14B": dict(
        vocab_size=151936,
        hidden_size=5120,
        intermediate_size=17408,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=False,
        max_position_embeddings=40960,
        torch_dtype="bfloat16",
    ),
}


# ----------------------------------------------------------------------------- memory on paper


def param_counts(c) -> dict:
    """Parameters: total, one decoder layer, the FSDP root (embeddings, untied head, final norm),
    the largest tensor."""
    D = c.hidden_size
    I = c.intermediate_size
    q = c.num_attention_heads * c.head_dim
    kv = c.num_key_value_heads * c.head_dim
    # q,k,v,o; gate,up,down; 2 norms; q/k norm
    layer = D * (q + 2 * kv) + q * D + 3 * D * I + 2 * D + 2 * c.head_dim
    embed = c.vocab_size * D
    root = embed * (1 if c.tie_word_embeddings else 2) + D
    return dict(
        total=root + c.num_hidden_layers * layer,
        layer=layer,
        root=root,
        embed=embed,
        largest=max(embed, D * I),
    )


def layer_activation_bytes(c, tokens: int, itemsize: int) -> int:
    """What autograd keeps for the backward of one decoder layer of model.py, for `tokens` tokens
    computed in a dtype of `itemsize` bytes. Per token:
      each RMSNorm over n features keeps its fp32 input and its output: (4 + itemsize) n; the input and post-attention
      norms (D each), q_norm (Hq hd), k_norm (Hkv hd);
      RoPE'd q and k and v, kept by attention: itemsize (Hq hd + 2 Hkv hd);
      attention's output and o_proj's contiguous input: 2 itemsize Hq hd; attention's log-sum-exp: 4 Hq;
      the MLP's gate, silu(gate), up and their product: 4 itemsize I."""
    D = c.hidden_size
    I = c.intermediate_size
    q = c.num_attention_heads * c.head_dim
    kv = c.num_key_value_heads * c.head_dim
    per_token = (
        (4 + itemsize) * (2 * D + q + kv)
        + itemsize * (q + 2 * kv)
        + 2 * itemsize * q
        + 4 * c.num_attention_heads
        + 4 * itemsize * I
    )
    return tokens * per_token


def activations_with_checkpointing(c, tokens: int, itemsize: int) -> int:
    """Activation checkpointing keeps each layer's input (L x T x D) and, in the backward, one
    layer's activations recomputed plus their gradients (counted as twice the activations)."""
    return c.num_hidden_layers * tokens * c.hidden_size * itemsize + 2 * layer_activation_bytes(
        c, tokens, itemsize
    )


def rope_table_bytes(c) -> int:
    """model.py's cos and sin tables, fp32, max_position_embeddings x head_dim each (one per model
    instance)."""
    return 2 * c.max_position_embeddings * c.head_dim * 4


def kv_pool_bytes(c, itemsize: int, memory: float, max_num_seqs: int, max_model_len: int) -> int:
    """parts/kv_cache.py's kv_cache_blocks in bytes: whole blocks of 16 tokens that fit in
    `memory`, capped by max_num_seqs. memory=None: the engine's CPU default, 512 MiB or one
    max_model_len sequence if that is more."""
    block = 2 * c.num_hidden_layers * 16 * c.num_key_value_heads * c.head_dim * itemsize
    per_seq = -(-max_model_len // 16)
    memory = max(512 * 2**20, per_seq * block) if memory is None else memory
    return min(int(memory) // block, max_num_seqs * per_seq) * block


def sft_phases(c, *, world: int, row_tokens: int, loss_chunk: int, gpu: bool) -> dict:
    """sft.py per rank: fp32 master shard, AdamW (2 states), gradients; FSDP's unsharded root
    (embeddings/head, kept from forward to backward) and its gradient; two unsharded layers (one
    computing, one prefetched); activations; the loss's (chunk, V) blocks, recomputed in the
    backward: on CPU logits, log-softmax and its gradient in fp32 (3 x 4 bytes), on GPU the bf16
    logits and three fp32 blocks."""
    P = param_counts(c)
    cb = 2 if gpu else 4
    shard = 4 * P["total"] / world
    chunk = min(loss_chunk, row_tokens) * c.vocab_size
    states = {"fp32 master shard": shard, "AdamW states": 2 * shard}
    root = {
        "unsharded root params": cb * P["root"],
        "unsharded root grads": (cb + 4 * gpu) * P["root"],
    }
    return {
        "loss backward": {
            **states,
            **root,
            "checkpointed layer inputs": activations_with_checkpointing(c, row_tokens, cb)
            - 2 * layer_activation_bytes(c, row_tokens, cb),
            "loss chunk": chunk * (12 + 2 * gpu),
        },
        "layer backward": {
            **states,
            "gradient shards": shard,
            **root,
            "2 unsharded layers + grads": 4 * cb * P["layer"],
            "activations (checkpointing)": activations_with_checkpointing(c, row_tokens, cb),
        },
        "optimizer step": {**states, "gradient shards": shard, "foreach AdamW temporaries": shard},
    }


def gppo_phases(
    c,
    *,
    world: int,
    row_tokens: int,
    kv_bytes: int,
    gpu: bool,
    loss_chunk: int,
    engine_resident: bool = True,
) -> dict:
    """gppo.py per rank: the sft.py terms for the policy, plus the engine's full copy of the weights
    (bf16 on GPU, fp32 on CPU) and its KV pool, resident through training unless freed (gppo.py
    --free_engine: engine_resident=False, kv_bytes=0). The loss (rl_loss_from_hidden) keeps an fp32
    (V, D) accumulator for the head's gradient and per chunk the fp32 logits (CPU: also logits/T and
    its exp; GPU, Triton: and their gradient cast to bf16 for the GEMMs); the old-logprob pass (no
    gradient) takes 1,024 rows: fp32 logits, logits/T, log-softmax."""
    P = param_counts(c)
    cb = 2 if gpu else 4
    shard = 4 * P["total"] / world
    V = c.vocab_size
    D = c.hidden_size
    held = {
        "fp32 master shard": shard,
        "AdamW states": 2 * shard,
        "engine weights": cb * P["total"] * engine_resident,
        "KV pool": kv_bytes,
    }
    root = {
        "unsharded root params": cb * P["root"],
        "unsharded root grads": (cb + 4 * gpu) * P["root"],
    }
    boundaries = activations_with_checkpointing(c, row_tokens, cb) - 2 * layer_activation_bytes(
        c, row_tokens, cb
    )
    loss_chunk_bytes = loss_chunk * V * (4 + 2 if gpu else 12)
    # foreach on GPU; one tensor at a time on CPU
    optimizer_temps = shard if gpu else 4 * P["largest"]
    return {
        "old logprobs": {
            **held,
            "unsharded root params": cb * P["root"],
            "hidden states": row_tokens * D * cb,
            "logits of 1024 rows": min(1024, row_tokens) * V * 12,
        },
        "loss backward": {
            **held,
            **root,
            "checkpointed layer inputs": boundaries,
            "hidden + its gradient": 2 * row_tokens * D * cb,
            "head-gradient accumulator": 4 * V * D,
            "loss chunk": loss_chunk_bytes,
        },
        "layer backward": {
            **held,
            "gradient shards": shard,
            **root,
            "2 unsharded layers + grads": 4 * cb * P["layer"],
            "activations (checkpointing)": activations_with_checkpointing(c, row_tokens, cb),
        },
        "optimizer step": {**held, "gradient shards": shard, "AdamW temporaries": optimizer_temps},
    }


def eval_phases(c, *, kv_bytes: int, itemsize: int) -> dict:
    """eval.py: the weights (loaded in the checkpoint's own dtype: no conversion buffer) and the
    engine's KV pool."""
    return {"generate": {"weights": itemsize * param_counts(c)["total"], "KV pool": kv_bytes}}


def peak_phase(phases: dict) -> tuple:
    name = max(phases, key=lambda k: sum(phases[k].values()))
    return name, sum(phases[name].values()), phases[name]


def load_phases(c, *, world: int, gpu: bool = True) -> dict:
    """gppo.py's start per rank: the policy filled into its fp32 shards from rank 0 (one full tensor
    in flight, in the checkpoint's bf16), then the engine's full copy read tensor by tensor into its
    final dtype."""
    P = param_counts(c)
    cb = 2 if gpu else 4
    return {
        "policy from rank 0": {
            "fp32 master shard": 4 * P["total"] / world,
            "one tensor in flight": 2 * P["largest"],
        },
        "engine copy": {
            "fp32 master shard": 4 * P["total"] / world,
            "engine weights": cb * P["total"],
        },
    }


def rollout_margin(
    c, itemsize: int, max_num_seqs: int, max_model_len: int, batched_tokens: int
) -> int:
    """Bytes a generate() of rollout.py's engine allocates besides the weights and the KV pool,
    left free when the pool takes the rest (itemsize: the model's bytes per value):
      - a prefill's activations: inference keeps no earlier layer, so one layer's, of the longest
        prefill step (max(batched_tokens, max_model_len) tokens: a recomputed sequence runs
        alone), per token the residual, its norm, q/k/v, attention's and o_proj's outputs, the
        MLP's gate, up and their product;
      - sampling: sample() on (max_num_seqs, V) fp32 logits keeps up to a dozen such tensors (the
        logits, their sort and its int64 order, softmax, cumsum, masks, log-softmax, its exp,
        inverse_cdf's padded copy);
      - CUDA graphs: their shared pool holds a decode step of max_num_seqs rows (twice, for the
        pool's fragmentation) and each bucket's output, its rows x D (buckets 1, 2, 4, 8, then
        every 16: cuda_graphs.py);
      - 512 MiB for cuBLAS and Triton workspaces and the caching allocator's rounding.
    Qwen3-8B, bf16, 256 sequences of 36,864 tokens: 4.4 + 1.9 + 0.1 + 0.5 = 6.9 GB."""
    q = c.num_attention_heads * c.head_dim
    kv = c.num_key_value_heads * c.head_dim
    per_token = (4 * c.hidden_size + 3 * c.intermediate_size + q + 2 * kv) * itemsize
    prefill = max(batched_tokens, max_model_len) * per_token
    sampling = 12 * max_num_seqs * c.vocab_size * 4
    buckets = (
        {b for b in (1, 2, 4, 8) if b < max_num_seqs}
        | set(range(16, max_num_seqs, 16))
        | {max_num_seqs}
    )
    graphs = 2 * max_num_seqs * per_token + sum(buckets) * c.hidden_size * itemsize
    return prefill + sampling + graphs + 512 * 2**20


def rollout_pool_bytes(
    c,
    *,
    world: int,
    usable: float,
    max_num_seqs: int,
    max_model_len: int,
    batched_tokens: int = 16384,
) -> int:
    """The KV pool gppo.py gets on a GPU with the engine freed while training: sized at each
    generate() from what is then free (usable memory less what stays resident: the fp32 shard,
    AdamW's states, the engine's bf16 weights), less rollout_margin, in whole blocks of 16 tokens,
    capped by max_num_seqs."""
    P = param_counts(c)["total"]
    resident = 4 * P / world + 8 * P / world + 2 * P
    margin = rollout_margin(c, 2, max_num_seqs, max_model_len, batched_tokens)
    return kv_pool_bytes(c, 2, max(0, usable - resident - margin), max_num_seqs, max_model_len)


def rollout_phase(
    c,
    *,
    world: int,
    kv_bytes: int,
    max_num_seqs: int = 256,
    max_model_len: int = 36864,
    batched_tokens: int = 16384,
    gpu: bool = True,
) -> dict:
    """gppo.py while it samples: the policy's shard and AdamW states (its gradients were freed), the
    engine's weights and KV pool, and the rest of what a generate() allocates (rollout_margin: a
    prefill's activations, sampling, CUDA graphs, workspaces)."""
    P = param_counts(c)
    cb = 2 if gpu else 4
    return {
        "generate": {
            "fp32 master shard": 4 * P["total"] / world,
            "AdamW states": 8 * P["total"] / world,
            "engine weights": cb * P["total"],
            "KV pool": kv_bytes,
            "prefill, sampling, graphs": rollout_margin(
                c, cb, max_num_seqs, max_model_len, batched_tokens
            ),
        }
    }


def kv_bytes_per_token(c, itemsize: int = 2) -> int:
    """K and V of every layer for one token."""
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * itemsize


if __name__ == "__main__":
    for size, fields in QWEN3.items():
        c = SimpleNamespace(**fields)
        print(
            f"Qwen3-{size}: {param_counts(c)['total'] / 1e9:.2f}B parameters, bf16 KV {kv_bytes_per_token(c) / 2**10:.0f} "
            f"KiB per token"
        )
