"""The paged KV cache: one pool of blocks per layer, how many blocks fit in the bytes given, and
the forward that attends through it.

Per layer a pool of num_blocks blocks of block_size tokens, head-major: k_pool[layer] is
(Hkv, num_blocks, block_size, hd), so the blocks of one head gather into (Hkv, B, L, hd), ready for
a batched matmul. A sequence owns a block table (a list of block ids); its token t lives in slot
    block_table[t // block_size] * block_size + t % block_size
of its layer's pool, and one block costs, K and V of every layer,
    2 x num_layers x block_size x Hkv x hd x itemsize   bytes.
The pool is allocated once (or again after release()); cache.run(model, step, ...) runs a forward
in which the model calls cache.attend() in every attention layer, which hands q, k, v to the step
(the caller's prefill or decode step, with an attend(cache, layer_idx, q, k, v) method). torch only;
rollout.py's engine is the caller:
    cache = PagedKVCache(model.config, num_blocks=64, block_size=16, dtype=torch.float32, device="cpu")
    cache.write(layer_idx, slots, k, v)          # k/v (N, Hkv, hd) into slots (N,)
    hidden = cache.run(model, step, input_ids, positions)     # (N,) tokens -> (N, D)
    kv_cache_blocks(model.config, torch.bfloat16, 2**30, 16, max_num_seqs=8, max_model_len=4096)
"""

import math

import torch


class PagedKVCache:
    """The block pools of every layer (cfg: the model's config: num_hidden_layers,
    num_key_value_heads, head_dim); the model calls attend() in every attention layer. kernels:
    the norm kernels module if the model's norms and RoPE run as its kernels (the model reads it
    once a forward), else None."""

    def __init__(
        self,
        cfg,
        num_blocks: int,
        block_size: int,
        *,
        dtype,
        device,
        kernels=None,
        allocate: bool = True,
    ):
        # head-major: gathering blocks of one head yields (Hkv, B, L, hd), ready for a batched
        # matmul, no transpose
        self.shape = (
            cfg.num_hidden_layers,
            cfg.num_key_value_heads,
            num_blocks,
            block_size,
            cfg.head_dim,
        )
        self.block_size = block_size
        self.dtype = dtype
        self.device = device
        self.kernels = kernels
        self.step = None  # what the running forward's tokens are: a prefill or a decode step
        self.k_pool = self.v_pool = self.workspace = None
        if allocate:
            self.allocate()

    def allocate(self) -> None:
        """The pools (again, after release()); zeros, not empty: padded slots are read (and masked)
        by the PyTorch paths, and NaN * 0 would be NaN."""
        if self.k_pool is None:
            self.k_pool, self.v_pool = (
                torch.zeros(self.shape, dtype=self.dtype, device=self.device) for _ in range(2)
            )
            # cascade_decode's gather buffer, grown on demand
            self.workspace = self.k_pool.new_empty(0)

    def release(self) -> None:
        """Give the pools' memory back (a trainer between rollouts: its activations then have the
        room); the next generate() allocates them again. Nothing survives between generate() calls,
        so nothing is lost."""
        self.k_pool = self.v_pool = self.workspace = None

    @property
    def nbytes(self) -> int:
        return 2 * math.prod(self.shape) * self.dtype.itemsize

    def copy_blocks(self, copies: list) -> None:  # copy-on-write, all layers at once
        if copies:
            src, dst = (torch.tensor(c, device=self.k_pool.device) for c in zip(*copies))
            self.k_pool[:, :, dst] = self.k_pool[:, :, src]
            self.v_pool[:, :, dst] = self.v_pool[:, :, src]

    def write(self, layer_idx: int, slots, k, v) -> None:  # k/v (N, Hkv, hd) into slots (N,)
        k_pool = self.k_pool[layer_idx]  # (Hkv, num_blocks, bs, hd)
        v_pool = self.v_pool[layer_idx]
        Hkv, _, _, hd = k_pool.shape
        k_pool.view(Hkv, -1, hd).index_copy_(1, slots, k.transpose(0, 1).to(k_pool.dtype))
        v_pool.view(Hkv, -1, hd).index_copy_(1, slots, v.transpose(0, 1).to(v_pool.dtype))

    def run(self, model, step, input_ids, positions):
        """One flattened row of tokens (N,) at positions (N,) through the model -> its final
        hidden states (N, D); each attention layer calls attend(), which hands q, k, v to
        step.attend() (the caller's prefill or decode step)."""
        self.step = step
        try:
            return model(
                input_ids[None], position_ids=positions[None], kv_cache=self, return_hidden=True
            )[0]
        finally:
            self.step = None

    def attend(self, layer_idx, q, k, v):  # q (1, N, Hq, hd), k/v (1, N, Hkv, hd) -> like q
        return self.step.attend(self, layer_idx, q[0], k[0], v[0]).unsqueeze(0)


# ----------------------------------------------------------------------- the pool's size in blocks


def free_memory(device) -> int:
    """Bytes free on a CUDA device once PyTorch's caching allocator has returned the blocks it holds
    unused (a model loaded and freed stays cached otherwise, invisible to mem_get_info)."""
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(device)[0]


def kv_cache_bytes(fraction: float, device, free: int | None = None) -> int | None:
    """The engine's KV pool in bytes: `fraction` of the device memory still free once the policy and
    the engine's weights are in place (free: given, or measured by free_memory); None on CPU (the
    engine's default)."""
    if device.type != "cuda" and free is None:
        return None
    return int(fraction * (free if free is not None else free_memory(device)))


def kv_block_bytes(cfg, dtype: torch.dtype, block_size: int) -> int:
    """Bytes of one KV block: K and V of block_size tokens in every layer, 2 x L x block_size x Hkv
    x hd x itemsize."""
    return (
        2
        * cfg.num_hidden_layers
        * block_size
        * cfg.num_key_value_heads
        * cfg.head_dim
        * dtype.itemsize
    )


def kv_cache_blocks(
    cfg,
    dtype: torch.dtype,
    memory_bytes: int,
    block_size: int,
    max_num_seqs: int,
    max_model_len: int,
):
    """The pool size in blocks that fits in memory_bytes (e.g. a fraction of the free GPU memory
    once the weights are in place; bf16 blocks take half the bytes), capped at what max_num_seqs
    sequences of max_model_len tokens use."""
    return min(
        int(memory_bytes) // kv_block_bytes(cfg, dtype, block_size),
        max_num_seqs * -(-max_model_len // block_size),
    )
