"""Decode attention on a paged KV cache, fast: one query per sequence against its K/V blocks, read
in place.

    out = paged_decode_triton(q, k_pool, v_pool, block_tables, context_lens)   # CUDA (or TRITON_INTERPRET=1)
    out = paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens)      # a C++ kernel, built on first use
    out = cascade_decode(q, k_pool, v_pool, cascade_batch(seqs, block_size, device))   # PyTorch ops, shared prompts
    out = paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens)   # the formula: gather, masked SDPA
q (B, Hq, hd); k_pool/v_pool (Hkv, num_blocks, block_size, hd); block_tables (B, max_blocks) int32;
context_lens (B,) int32: out[b] = softmax(q[b] K_b^T / sqrt(hd)) V_b over the first context_lens[b]
tokens of sequence b's blocks (GQA: query head h reads KV head h // (Hq / Hkv)). Triton:
flash-decoding, each KV head's K/V read once for its whole query group, long contexts split over
programs. C++: one task per (sequence, KV head), fp32, OpenMP threads. Cascade: the n samples of a
prompt meet its keys in one matmul. CascadeDecode and CpuKernelDecode (the section before the
self-check) are rollout.py's decode steps on CPU built on them (on CUDA: parts/cuda_graphs.py's
DeviceDecode). torch (and triton, optional) only; `python decode_kernels.py` checks every path
available here against paged_decode_reference.
"""

import dataclasses
import hashlib
import math
import os
import platform
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:  # CPU-only installs may lack triton: the C++ and PyTorch paths remain.
    import triton
    import triton.language as tl
except ImportError:
    triton = None


def _require(ok, message: str) -> None:  # a check of the caller's input in one line
    if not ok:
        raise ValueError(message)


# ----------------------------------------------------------------------------- the formula


def paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens):
    """One query per sequence against its pages in plain PyTorch, the oracle of the faster paths:
    gather each sequence's blocks into a padded copy, then masked SDPA. q (B, Hq, hd); k_pool/v_pool
    (Hkv, num_blocks, bs, hd); block_tables (B, max_blocks) padded with any valid id; context_lens
    (B,) -> (B, Hq, hd)."""
    B, Hq, hd = q.shape
    Hkv, _, bs, _ = k_pool.shape
    L = block_tables.shape[1] * bs
    blocks = block_tables.flatten().long()
    # (B, Hkv, L, hd)
    k, v = (
        pool.index_select(1, blocks).view(Hkv, B, L, hd).transpose(0, 1).to(q.dtype)
        for pool in (k_pool, v_pool)
    )
    visible = torch.arange(L, device=q.device) < context_lens[:, None]  # (B, L)
    # GQA: the Hq/Hkv query heads of one KV head attend as that head's Hq/Hkv queries (heads h -> h
    # // group)
    out = F.scaled_dot_product_attention(
        q.view(B, Hkv, Hq // Hkv, hd), k, v, attn_mask=visible[:, None, None, :]
    )
    return out.reshape(B, Hq, hd)


# ------------------------------------------------------------------- shared prompts, in PyTorch ops


@dataclass
class CascadeBatch:
    """A decode step's B sequences split at their group's shared prompt blocks, made once per step
    for every layer: P groups of at most n sequences; prefixes padded to L_pre tokens, own blocks to
    L_own (multiples of the block)."""

    # fmt: off
    prefix_blocks: torch.Tensor  # (P*L_pre/bs,) int64: the groups' prefix block tables, padded and flattened
    own_blocks: torch.Tensor     # (B*L_own/bs,) int64: the sequences' own block tables, padded and flattened
    P: int
    n: int
    L_pre: int
    L_own: int
    group_rows: torch.Tensor     # (P*n,) int64: the sequence in row r of the grouped layout (B: a padding row)
    seq_rows: torch.Tensor       # (B,) int64: the row of sequence i in that layout
    hidden: torch.Tensor         # (B, L_pre + L_own) bool: the padding positions of sequence i's prefix + own part
    slots: torch.Tensor          # (B, L_pre + L_own) int64: the pool slot of each of those positions
    key: tuple = ()              # the block tables it was made from: equal keys, equal layouts (see cascade_batch)
    _v_rows: torch.Tensor | None = None
    # fmt: on

    def v_rows(self, num_kv_heads: int, group: int, num_slots: int) -> torch.Tensor:
        """(Hkv*B*G, L) rows of a (Hkv*num_slots, hd) view of a V pool: query (h, i, g) reads V[h,
        slots[i]]."""
        if self._v_rows is None:
            heads = (
                torch.arange(num_kv_heads, device=self.slots.device)[:, None, None, None]
                * num_slots
            )
            # (Hkv, B, 1, L)
            rows = heads + self.slots[None, :, None, :]
            self._v_rows = rows.expand(-1, -1, group, -1).reshape(-1, self.slots.shape[1])
        return self._v_rows


def cascade_batch(
    seqs: list, block_size: int, device, reuse: CascadeBatch | None = None
) -> CascadeBatch:
    """Group the running sequences by the prompt prefill they share (prefix_id) and split each block
    table into its group's prefix (the prompt's full blocks) and its own blocks (the rest: written
    by it alone). reuse: the previous step's batch. A block table changes only when a sequence
    starts a block or copies a shared one (its length or last block id), so while the key is the
    same only the lengths (the mask) are new: most decode steps skip the Python work of rebuilding
    the tables."""
    key = tuple((id(seq), len(seq.block_table), seq.block_table[-1]) for seq in seqs)
    # tokens sequence i reads from its prefix
    prefix_len = [seq.prefix_blocks * block_size for seq in seqs]
    # and from its own blocks: >= 1 (the new token)
    own_len = [len(seq) - m for seq, m in zip(seqs, prefix_len)]
    # the same tables: only own_len grew
    if reuse is not None and reuse.key == key:
        own_hidden = _past(own_len, reuse.L_own, device)
        return dataclasses.replace(
            reuse, hidden=torch.cat([reuse.hidden[:, : reuse.L_pre], own_hidden], 1)
        )
    # 1. the grouped layout: P groups, each a row of n places (its sequences, then padding)
    by_prefix = {}
    for i, seq in enumerate(seqs):
        by_prefix.setdefault(seq.prefix_id, []).append(i)
    groups = list(by_prefix.values())  # P lists of sequence indices
    B = len(seqs)
    P = len(groups)
    n = max(map(len, groups))
    # (P*n,): B = a padding place
    group_rows = [i for members in groups for i in members + [B] * (n - len(members))]
    # (B,): the place of sequence i, p*n + j
    seq_rows = [0] * B
    for p, members in enumerate(groups):
        for j, i in enumerate(members):
            seq_rows[i] = p * n + j
    # 2. the block tables, padded with block 0 (its positions are hidden): each group's prefix, each
    # sequence's own
    prefix_tables = [
        seqs[members[0]].block_table[: seqs[members[0]].prefix_blocks] for members in groups
    ]
    own_tables = [seq.block_table[seq.prefix_blocks :] for seq in seqs]
    max_prefix = max(map(len, prefix_tables))
    max_own = max(map(len, own_tables))
    tensor = lambda x: torch.tensor(x, dtype=torch.int64, device=device)  # noqa: E731
    prefix_blocks = tensor(_padded(prefix_tables, max_prefix))  # (P*max_prefix,)
    own_blocks = tensor(_padded(own_tables, max_own))  # (B*max_own,)
    seq_rows = tensor(seq_rows)
    # 3. per sequence, its L_pre prefix and L_own own positions: which are padding, and the pool
    # slot of each
    L_pre = max_prefix * block_size
    L_own = max_own * block_size
    # (B, L_pre + L_own)
    hidden = torch.cat([_past(prefix_len, L_pre, device), _past(own_len, L_own, device)], 1)
    # (B, L_pre): its group's
    prefix_slots = _slots(prefix_blocks.view(P, max_prefix), block_size)[seq_rows // n]
    # (B, L_own)
    own_slots = _slots(own_blocks.view(B, max_own), block_size)
    return CascadeBatch(
        prefix_blocks,
        own_blocks,
        P,
        n,
        L_pre,
        L_own,
        tensor(group_rows),
        seq_rows,
        hidden,
        torch.cat([prefix_slots, own_slots], 1),
        key,
    )


def _padded(tables: list, width: int) -> list:
    """Block tables, each padded with block 0 to `width` blocks, flattened: (len(tables) *
    width,)."""
    return [block for table in tables for block in table + [0] * (width - len(table))]


def _past(lengths: list, width: int, device) -> torch.Tensor:
    """(len(lengths), width) bool: position t of row i lies past its lengths[i] tokens (padding,
    hidden)."""
    return (
        torch.arange(width, device=device)
        >= torch.tensor(lengths, dtype=torch.int64, device=device)[:, None]
    )


def _slots(blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """(R, W) block ids -> (R, W * block_size) pool slots, block b's token t at slot b * block_size
    + t."""
    R, W = blocks.shape
    return (
        blocks.view(R, W, 1) * block_size + torch.arange(block_size, device=blocks.device)
    ).view(R, W * block_size)


def cascade_workspace_size(k_pool, batch: CascadeBatch) -> int:
    Hkv, _, bs, hd = k_pool.shape
    return Hkv * (len(batch.prefix_blocks) + len(batch.own_blocks)) * bs * hd


def cascade_decode(q, k_pool, v_pool, batch: CascadeBatch, workspace=None):
    """Same result as paged_decode_reference, the n samples of a group meeting its prompt keys in
    one matmul:
        scores_i = [ q_i K_prompt(g)^T | q_i K_own(i)^T ],   out_i = sum_l softmax(scores_i)_l V[slot_l]
    Keys are gathered into contiguous buffers (per group for the prompt, per sequence for the rest);
    values are not (the sum over V rows is an embedding_bag on the pool). workspace: optional 1-d
    buffer of at least cascade_workspace_size() elements for the keys; PagedKVCache reuses one, as
    allocating a context-sized tensor per layer and step costs on CPU as much as the attention (page
    faults, cold caches). q, out: (B, Hq, hd)."""
    B, Hq, hd = q.shape
    Hkv, num_blocks, bs, _ = k_pool.shape
    # G: query heads per KV head
    G = Hq // Hkv
    P = batch.P
    n = batch.n
    L = batch.L_pre + batch.L_own
    # (Hkv*P, L_pre, hd), (Hkv*B, L_own, hd)
    k_pre, k_own = _gather_keys(k_pool, batch, workspace)
    # (Hkv, B, G, hd), scaled
    q_heads = (q.view(B, Hkv, G, hd).transpose(0, 1) * hd**-0.5).to(k_pool.dtype)
    # 1. against the prompt: the n samples of a group side by side, one (n*G, hd) x (hd, L_pre) matmul per group
    # (Hkv, P*n, G, hd); pad: 0
    q_grouped = F.pad(q_heads, (0, 0, 0, 0, 0, 1))[:, batch.group_rows]
    # (Hkv*P, n*G, L_pre)
    scores_pre = torch.bmm(q_grouped.reshape(Hkv * P, n * G, hd), k_pre.transpose(1, 2))
    # (Hkv, B, G, L_pre)
    scores_pre = scores_pre.view(Hkv, P * n, G, batch.L_pre)[:, batch.seq_rows]
    # 2. against its own keys, one sequence at a time
    # (Hkv*B, G, L_own)
    scores_own = torch.bmm(q_heads.reshape(Hkv * B, G, hd), k_own.transpose(1, 2))
    # (Hkv, B, G, L)
    scores = torch.cat([scores_pre, scores_own.view(Hkv, B, G, batch.L_own)], -1)
    # 3. softmax over a sequence's L positions in fp32, padding hidden
    probs = scores.float().masked_fill_(batch.hidden[None, :, None, :], float("-inf")).softmax(-1)
    # 4. the probability-weighted sum of V rows, read from the pool by slot: row (h, i, g) sums V[h,
    # slots[i]]
    out = F.embedding_bag(
        batch.v_rows(Hkv, G, num_blocks * bs),
        v_pool.view(-1, hd),
        mode="sum",
        # (Hkv*B*G, hd)
        per_sample_weights=probs.view(-1, L).to(v_pool.dtype),
    )
    return out.view(Hkv, B, G, hd).transpose(0, 1).reshape(B, Hq, hd).to(q.dtype)


def _gather_keys(k_pool, batch: CascadeBatch, workspace=None) -> tuple:
    """The step's keys copied into contiguous buffers (the workspace): each group's prompt blocks
    (Hkv*P, L_pre, hd) and each sequence's own blocks (Hkv*B, L_own, hd)."""
    Hkv, _, bs, hd = k_pool.shape
    if workspace is None:
        workspace = k_pool.new_empty(cascade_workspace_size(k_pool, batch))
    n_pre, n_own = (
        Hkv * len(blocks) * bs * hd for blocks in (batch.prefix_blocks, batch.own_blocks)
    )
    k_pre = torch.index_select(
        k_pool, 1, batch.prefix_blocks, out=workspace[:n_pre].view(Hkv, -1, bs, hd)
    )
    k_own = torch.index_select(
        k_pool, 1, batch.own_blocks, out=workspace[n_pre : n_pre + n_own].view(Hkv, -1, bs, hd)
    )
    return k_pre.view(Hkv * batch.P, batch.L_pre, hd), k_own.view(
        Hkv * len(batch.seq_rows), batch.L_own, hd
    )


def paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens, k_new=None, v_new=None):
    """Same contract as paged_decode_reference, fp32 only: a fused C++ kernel (below) that reads
    each sequence's K/V in place from the pool, no gather and no padding. Why C++: the cascade
    path's dozen ops per layer (index_select, two bmm of 2-row matrices, masked softmax,
    embedding_bag) take several times what reading the step's K/V once costs, and Triton has no CPU
    backend. block_tables (B, max_blocks), context_lens (B,): int32. k_new, v_new (B, Hkv, hd),
    optional: first write them at each sequence's position context_len - 1 (what PagedKVCache's
    index_copy_ does), inside the same pass: the slot's line is one the task reads next. Tasks run
    in parallel, so no other sequence of the call may read a written slot (the engine's are in
    unshared blocks)."""
    kernel = load_cpu_kernel(required=True)
    if not (
        q.dtype == k_pool.dtype == v_pool.dtype == torch.float32
        and q.shape[2] in CPU_KERNEL_HEAD_DIMS
    ):
        _require(
            False,
            f"paged_decode_cpu: fp32 and head_dim in {CPU_KERNEL_HEAD_DIMS} only "
            f"(got {q.dtype}, {q.shape[2]})",
        )
    _require(
        (k_new is None) == (v_new is None),
        "paged_decode_cpu: give both k_new and v_new, or neither",
    )
    k_new, v_new = (
        (q.new_empty(0), q.new_empty(0))
        if k_new is None
        else (k_new.contiguous(), v_new.contiguous())
    )
    return kernel.paged_decode(
        q.contiguous(),
        k_pool,
        v_pool,
        block_tables.contiguous(),
        context_lens.contiguous(),
        k_new,
        v_new,
    )


# compile-time in the kernel: the dot products unroll into registers
CPU_KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)
# One (sequence, KV head) per task: it writes the sequence's new K/V row (decode), then its G
# queries meet its L tokens in three passes over the block table (scores, softmax, the weighted sum
# of V), while the next task's rows are prefetched. The group runs in chunks of 4, 2 or 1 query
# heads, sizes fixed at compile time so a chunk's queries stay in registers; each chunk reads the
# K/V rows once. Tasks run on torch's (OpenMP) threads.
CPU_KERNEL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

template <int HD, int G>   // head dim, query heads in this chunk
static void attend(const float* q, const float* k_head, const float* v_head, const int32_t* table, int64_t L,
                   int64_t bs, float scale, float* scores, float* out) {
  const int64_t Lp = (L + 15) / 16 * 16;   // score rows padded to 16: the vectorized exp then has no scalar tail
  float qs[G * HD], acc[G * HD], total[G];
  for (int i = 0; i < G * HD; ++i) { qs[i] = q[i] * scale; acc[i] = 0.f; }
  for (int64_t t0 = 0, j = 0; t0 < L; t0 += bs, ++j) {            // 1. s[g, t] = q_g . k_t / sqrt(HD)
    const float* k_block = k_head + (int64_t)table[j] * bs * HD;  //    (no omp simd: -O3 -ffast-math vectorizes
    for (int64_t i = 0, n = std::min(bs, L - t0); i < n; ++i)     //    these sums with the G rows in registers)
      for (int g = 0; g < G; ++g) {
        float s = 0.f;
        for (int d = 0; d < HD; ++d) s += qs[g * HD + d] * k_block[i * HD + d];
        scores[g * Lp + t0 + i] = s;
      }
  }
  for (int g = 0; g < G; ++g) {                                   // 2. p[g, t] = exp(s - max), total = sum p
    float *s = scores + g * Lp, m = s[0], sum = 0.f;              //    (max from a real score: no infinities)
    for (int64_t t = 1; t < L; ++t) m = std::max(m, s[t]);
    for (int64_t t = L; t < Lp; ++t) s[t] = m - 80.f;             //    padding, never summed or used; its exp is a
    #pragma omp simd                                              //    normal float (far below -80 the vector exp
    for (int64_t t = 0; t < Lp; ++t) s[t] = std::exp(s[t] - m);   //    takes a slow path)
    #pragma omp simd reduction(+:sum)
    for (int64_t t = 0; t < L; ++t) sum += s[t];
    total[g] = sum;
  }
  for (int64_t t0 = 0, j = 0; t0 < L; t0 += bs, ++j) {            // 3. out_g = sum_t p[g, t] v_t / total_g
    const float* v_block = v_head + (int64_t)table[j] * bs * HD;
    for (int64_t i = 0, n = std::min(bs, L - t0); i < n; ++i)
      for (int g = 0; g < G; ++g) {
        const float p = scores[g * Lp + t0 + i];
        #pragma omp simd
        for (int d = 0; d < HD; ++d) acc[g * HD + d] += p * v_block[i * HD + d];
      }
  }
  for (int g = 0; g < G; ++g)
    for (int d = 0; d < HD; ++d) out[g * HD + d] = acc[g * HD + d] / total[g];
}

template <int HD>
static void run(const torch::Tensor& q, const torch::Tensor& k_pool, const torch::Tensor& v_pool,
                const torch::Tensor& tables, const torch::Tensor& lens, const torch::Tensor& k_new,
                const torch::Tensor& v_new, torch::Tensor& out) {
  const int64_t B = q.size(0), Hq = q.size(1), Hkv = k_pool.size(0), bs = k_pool.size(2), G = Hq / Hkv;
  const int64_t num_blocks = k_pool.size(1), head_stride = num_blocks * bs * HD, W = tables.size(1);
  const float* qp = q.data_ptr<float>();
  float *kp = k_pool.data_ptr<float>(), *vp = v_pool.data_ptr<float>(), *op = out.data_ptr<float>();   // (pools: the
  const int32_t *tp = tables.data_ptr<int32_t>(), *lp = lens.data_ptr<int32_t>();                    // new K/V)
  const float *knp = k_new.numel() ? k_new.data_ptr<float>() : nullptr, *vnp = knp ? v_new.data_ptr<float>() : nullptr;
  const float scale = 1.f / std::sqrt((float)HD);
  // A task's blocks lie scattered over the pool, where the hardware prefetcher (it follows sequential streams)
  // cannot guess them: while one task computes, the next one's K/V rows are fetched.
  auto prefetch = [&](int64_t task) {
    const int64_t b = task / Hkv, h = task % Hkv, L = std::min<int64_t>(lp[b], W * bs);
    for (int64_t t0 = 0, j = 0; t0 < L; t0 += bs, ++j) {
      const int64_t block = tp[b * W + j];
      if (block < 0 || block >= num_blocks) continue;   // reported when the task runs
      const float *k_rows = kp + h * head_stride + block * bs * HD, *v_rows = vp + h * head_stride + block * bs * HD;
      for (int64_t x = 0, n = std::min(bs, L - t0) * HD; x < n; x += 16) {   // 16 floats: one 64-byte line
        __builtin_prefetch(k_rows + x);
        __builtin_prefetch(v_rows + x);
      }
    }
  };
  at::parallel_for(0, B * Hkv, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / Hkv, h = task % Hkv, L = lp[b];
      TORCH_CHECK(L >= 1 && L <= W * bs, "paged_decode: context length ", L, " outside 1..", W * bs);
      for (int64_t j = 0; j < (L + bs - 1) / bs; ++j)
        TORCH_CHECK(tp[b * W + j] >= 0 && tp[b * W + j] < num_blocks, "paged_decode: block id ", tp[b * W + j]);
      if (task + 1 < end) prefetch(task + 1);
      if (knp) {   // the newest token's K/V into its slot (position L - 1), on a line this task reads next anyway
        const int64_t slot = (int64_t)tp[b * W + (L - 1) / bs] * bs + (L - 1) % bs, from = (b * Hkv + h) * HD;
        std::copy(knp + from, knp + from + HD, kp + h * head_stride + slot * HD);
        std::copy(vnp + from, vnp + from + HD, vp + h * head_stride + slot * HD);
      }
      const float *k_head = kp + h * head_stride, *v_head = vp + h * head_stride;
      scores.resize(4 * ((L + 15) / 16 * 16));
      for (int64_t g = 0; g < G;) {
        auto chunk = [&](auto size) {   // query heads h*G + g .. + size of sequence b
          const int64_t at = (b * Hq + h * G + g) * HD;
          attend<HD, decltype(size)::value>(qp + at, k_head, v_head, tp + b * W, L, bs, scale, scores.data(), op + at);
          g += decltype(size)::value;
        };
        if (G - g >= 4) chunk(std::integral_constant<int, 4>{});
        else if (G - g >= 2) chunk(std::integral_constant<int, 2>{});
        else chunk(std::integral_constant<int, 1>{});
      }
    }
  });
}

torch::Tensor paged_decode(torch::Tensor q, torch::Tensor k_pool, torch::Tensor v_pool, torch::Tensor tables,
                           torch::Tensor lens, torch::Tensor k_new, torch::Tensor v_new) {
  for (const auto& t : {q, k_pool, v_pool, k_new, v_new})
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous(),
                "paged_decode: q, the pools and the new K/V must be contiguous fp32 CPU tensors");
  TORCH_CHECK(tables.scalar_type() == torch::kInt && lens.scalar_type() == torch::kInt && tables.is_contiguous() &&
              lens.is_contiguous(), "paged_decode: block tables and lengths must be contiguous int32");
  TORCH_CHECK(q.dim() == 3 && k_pool.dim() == 4 && k_pool.sizes() == v_pool.sizes() && k_pool.size(3) == q.size(2) &&
              q.size(1) % k_pool.size(0) == 0 && tables.dim() == 2 && tables.size(0) == q.size(0) &&
              lens.dim() == 1 && lens.size(0) == q.size(0), "paged_decode: shapes do not match: q (B, Hq, hd), pools "
              "(Hkv, num_blocks, block_size, hd) with Hkv dividing Hq, tables (B, max_blocks), lengths (B,)");
  TORCH_CHECK((k_new.numel() == 0 && v_new.numel() == 0) || (k_new.dim() == 3 && k_new.sizes() == v_new.sizes() &&
              k_new.size(0) == q.size(0) && k_new.size(1) == k_pool.size(0) && k_new.size(2) == q.size(2)),
              "paged_decode: the new K/V must both be empty or (B, Hkv, hd)");
  auto out = torch::empty_like(q);
  pybind11::gil_scoped_release no_gil;   // other Python threads (gppo.py's scoring) run meanwhile
  switch (q.size(2)) {
    case 16: run<16>(q, k_pool, v_pool, tables, lens, k_new, v_new, out); break;
    case 32: run<32>(q, k_pool, v_pool, tables, lens, k_new, v_new, out); break;
    case 64: run<64>(q, k_pool, v_pool, tables, lens, k_new, v_new, out); break;
    case 128: run<128>(q, k_pool, v_pool, tables, lens, k_new, v_new, out); break;
    case 256: run<256>(q, k_pool, v_pool, tables, lens, k_new, v_new, out); break;
    default: TORCH_CHECK(false, "paged_decode: head_dim must be 16, 32, 64, 128 or 256");
  }
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("paged_decode", &paged_decode); }
"""
# -ffast-math at compile time only (the link step does not see it, so loading the kernel does not
# flush denormals in the process): it lets exp and the sums vectorize; the kernel never meets an
# infinity or a NaN of its own. -fopenmp: at::parallel_for's threads
CPU_KERNEL_FLAGS = ["-O3", "-march=native", "-fopenmp", "-ffast-math"]
_cpu_kernel = None  # the loaded module, or the one-line reason it could not be built
_cpu_kernel_notice_shown = False


def load_cpu_kernel(required: bool = False):
    """Build the CPU kernel with torch.utils.cpp_extension (a C++ compiler, ninja and Python's
    headers; once per machine: the build is cached in $TORCH_EXTENSIONS_DIR or torch's default
    extensions directory, under a hash of source, flags, compiler, Python, torch and CPU, since
    -march=native code must not run on another CPU) and load it (~0.1 s). Returns the module, or
    None after a one-line notice on stderr if it cannot be built (once per process); required=True
    raises instead."""
    global _cpu_kernel, _cpu_kernel_notice_shown
    if _cpu_kernel is None:
        try:
            _cpu_kernel = _build_cpu_kernel()
        except Exception as e:  # no compiler, no ninja, a failed compile: the PyTorch paths remain
            lines = str(e).strip().splitlines() or [""]
            cause = next(
                (
                    line
                    for line in lines
                    if "error" in line.lower() and "Error building" not in line
                ),
                # the compiler's first error, not ninja's closing "subcommand failed"
                lines[0],
            )
            _cpu_kernel = f"{type(e).__name__}: {cause.strip()}"[:300]
    if isinstance(_cpu_kernel, str):
        _require(
            not required,
            f"decode_kernels.py: the CPU attention kernel could not be built ({_cpu_kernel})",
        )
        if not _cpu_kernel_notice_shown:
            _cpu_kernel_notice_shown = True
            print(
                f"decode_kernels.py: the CPU attention kernel could not be built ({_cpu_kernel}); decoding with the "
                f"slower PyTorch path (LLMEngine(cpu_kernel=False) skips the attempt)",
                file=sys.stderr,
            )
        return None
    return _cpu_kernel


def _build_cpu_kernel():
    import fcntl
    import logging
    import shutil
    import sysconfig
    from torch.utils import cpp_extension

    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        raise RuntimeError(f"no C++ compiler: {os.environ.get('CXX', 'c++')} is not on PATH")
    if not cpp_extension.is_ninja_available():
        raise RuntimeError("ninja is not on PATH (pip install ninja)")
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        raise RuntimeError(
            f"no Python.h in {sysconfig.get_paths()['include']} (install Python's development headers)"
        )
    try:
        with open("/proc/cpuinfo") as fh:  # the instruction sets -march=native compiles for
            cpu = next((line for line in fh if line.startswith("flags")), platform.processor())
    except OSError:
        cpu = platform.processor()
    key = "\n".join(
        [
            CPU_KERNEL_SOURCE,
            *CPU_KERNEL_FLAGS,
            compiler,
            sys.version,
            str(sysconfig.get_config_var("EXT_SUFFIX")),
            torch.__version__,
            cpu,
        ]
    )
    name = "klear_paged_decode_" + hashlib.sha1(key.encode()).hexdigest()[:12]
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    build_dir = os.path.join(root, name)
    os.makedirs(build_dir, exist_ok=True)
    # One builder at a time (torchrun ranks start together), through a lock the kernel releases when
    # its process dies. Whoever holds it may delete torch's own lock file: only a killed build can
    # have left that behind, and torch would wait on it forever.
    with open(os.path.join(build_dir, "build.flock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(build_dir, "lock")):
            os.remove(os.path.join(build_dir, "lock"))
        if not os.path.exists(os.path.join(build_dir, name + ".so")):
            print(
                f"decode_kernels.py: building the CPU attention kernel in {build_dir} (once per machine, under a minute)",
                file=sys.stderr,
            )
        torch_log = logging.getLogger("torch.utils.cpp_extension")
        level = torch_log.level
        # its compiler-ABI warnings: a failed build is reported in one line
        torch_log.setLevel(logging.ERROR)
        try:
            return cpp_extension.load_inline(
                name,
                cpp_sources=CPU_KERNEL_SOURCE,
                extra_cflags=CPU_KERNEL_FLAGS,
                build_directory=build_dir,
            )
        finally:
            torch_log.setLevel(level)


def paged_decode_triton(
    q, k_pool, v_pool, block_tables, context_lens, num_splits: int | None = None
):
    """Same contract as paged_decode_reference; K/V are read in place from the pool (no gather),
    once per KV head. num_splits: parts of each context run by separate programs (flash-decoding);
    None = decode_splits()."""
    q = q.contiguous()
    B, Hq, hd = q.shape
    Hkv, _, bs, _ = k_pool.shape
    assert k_pool.is_contiguous() and v_pool.stride() == k_pool.stride()
    assert k_pool.stride(0) < 2**31, (
        "paged_decode_triton: one KV head of the pool must hold < 2**31 elements"
    )
    max_blocks = block_tables.shape[1]
    splits = num_splits or decode_splits(B, Hkv, max_blocks, q.device)
    blocks_per_split = -(-max_blocks // splits)
    m, l = (torch.empty(B, Hq, splits, dtype=torch.float32, device=q.device) for _ in range(2))
    acc = torch.empty(B, Hq, splits, hd, dtype=torch.float32, device=q.device)
    decode_meta, combine_meta = decode_kernel_meta(Hq, Hkv, bs, hd, splits)
    _paged_decode_kernel[(B, Hkv, splits)](
        q,
        k_pool,
        v_pool,
        m,
        l,
        acc,
        block_tables,
        context_lens,
        1.0 / math.sqrt(hd),
        q.stride(0),
        q.stride(1),
        k_pool.stride(1),
        k_pool.stride(2),
        k_pool.stride(0),
        block_tables.stride(0),
        Hq,
        blocks_per_split,
        splits,
        **decode_meta,
    )
    out = torch.empty_like(q)
    _combine_splits_kernel[(B, Hq)](
        m, l, acc, out, out.stride(0), out.stride(1), Hq, splits, **combine_meta
    )
    return out


def decode_splits(batch: int, num_kv_heads: int, max_blocks: int, device) -> int:
    """Splits of each context for the paged-decode kernel: enough programs to fill the GPU (4 per
    SM) when the batch alone does not, but each split at least 16 blocks long. Depends only on
    shapes (no device-to-host sync)."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 32
    )
    wanted = -(-4 * sms // (batch * num_kv_heads))
    return max(1, min(wanted, max_blocks // 16))


DECODE_TOKENS = 64  # tokens of K/V per iteration of the decode kernel (4 blocks of 16)


def decode_kernel_meta(
    num_q_heads: int, num_kv_heads: int, block_size: int, head_dim: int, splits: int
) -> tuple:
    """The compile-time constants of the two decode kernels (an ahead-of-time compile for
    sm_80/sm_90 uses them). A dot needs at least 16 rows, columns and inner elements: the query
    group, the tokens and head_dim are padded."""
    group = num_q_heads // num_kv_heads
    head_dim_p2 = max(16, triton.next_power_of_2(head_dim))
    return (
        dict(
            GROUP=group,
            Q_ROWS=max(16, triton.next_power_of_2(group)),
            BLOCK_SIZE=block_size,
            TOKENS=max(DECODE_TOKENS, triton.next_power_of_2(block_size)),
            HEAD_DIM=head_dim,
            HEAD_DIM_P2=head_dim_p2,
            UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        ),
        dict(SPLITS_P2=triton.next_power_of_2(splits), HEAD_DIM=head_dim, HEAD_DIM_P2=head_dim_p2),
    )


if triton is not None:

    @triton.jit
    def _dot(a, b, UPCAST: tl.constexpr):
        """a @ b with fp32 accumulation; products of bf16 (or fp32, "ieee": no TF32) operands are
        exact."""
        if UPCAST:
            return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        return tl.dot(a, b, input_precision="ieee")

    @triton.jit
    def _paged_decode_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        m_ptr,
        l_ptr,
        acc_ptr,
        block_tables_ptr,
        context_lens_ptr,
        scale,
        stride_qb,
        stride_qh,
        stride_kb,
        stride_ks,
        stride_kh,
        stride_bt,
        num_q_heads,
        blocks_per_split,
        num_splits,
        GROUP: tl.constexpr,
        Q_ROWS: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TOKENS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_P2: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        # One program per (sequence, KV head, split of the context). All GROUP query heads that
        # share the KV head are processed together, so each K/V block is read once for the whole
        # group (GQA 32:8: once, not 4 times); the split covers blocks_per_split blocks of the block
        # table (flash-decoding), so a long context runs on many programs. Each iteration takes
        # TOKENS tokens (several KV blocks, each token's block looked up in the table) and
        # multiplies on the tensor cores: scores = q k^T, (Q_ROWS, TOKENS), and p v, (Q_ROWS,
        # HEAD_DIM); the query group is padded to Q_ROWS >= 16 rows (a dot's smallest M) with zero
        # rows that are never stored. Online softmax per query head: running max m, normaliser l,
        # accumulator acc; the partial (m, l, acc) of each split goes to fp32 scratch, and
        # _combine_splits_kernel merges the splits. Products of the pool's dtype are exact in the
        # fp32 accumulators; p is rounded to that dtype for p v, as flash attention does. UPCAST
        # (Triton's interpreter, whose dot misreads bf16): the same rounded operands multiplied in
        # fp32, so the same products, summed in another order.
        seq = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        g = tl.arange(0, Q_ROWS)
        d = tl.arange(0, HEAD_DIM_P2)
        g_ok = g < GROUP
        d_ok = d < HEAD_DIM
        # (Q_ROWS,) query heads
        heads = kv_head * GROUP + g
        q = tl.load(
            q_ptr + seq * stride_qb + heads[:, None] * stride_qh + d[None, :],
            # (Q_ROWS, HEAD_DIM_P2)
            mask=g_ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        context_len = tl.load(context_lens_ptr + seq)
        first = split * blocks_per_split * BLOCK_SIZE
        last = tl.minimum(context_len, first + blocks_per_split * BLOCK_SIZE)
        t = tl.arange(0, TOKENS)
        m = tl.full([Q_ROWS], float("-inf"), tl.float32)
        l = tl.zeros([Q_ROWS], tl.float32)
        acc = tl.zeros([Q_ROWS, HEAD_DIM_P2], tl.float32)
        # offsets: int64 to the KV head (a layer's pool can pass 2**31 elements), int32 inside it
        # (the launcher checks that a head fits): an int64 offset per element of a tile costs two
        # registers each and, when the strides are not known divisible by 16, the tile is loaded
        # element by element; and the head_dim mask only where head_dim is not a power of two (so a
        # tile's rows load as 16-byte vectors): no spills at Qwen3-8B's shapes either way
        # (tests/test_aot_compile.py)
        head_offset = kv_head.to(tl.int64) * stride_kh
        k_head = k_ptr + head_offset
        v_head = v_ptr + head_offset
        # an empty split (first >= context_len) skips the loop
        for start in range(first, last, TOKENS):
            position = start + t  # (TOKENS,)
            # this split's tokens only: a tile may reach the next's
            t_ok = position < last
            block = tl.load(
                block_tables_ptr + seq * stride_bt + position // BLOCK_SIZE, mask=t_ok, other=0
            )
            kv_offs = (
                block[:, None] * stride_kb
                + (position % BLOCK_SIZE)[:, None] * stride_ks
                + d[None, :]
            )
            if HEAD_DIM == HEAD_DIM_P2:
                kv_ok = t_ok[:, None]
            else:
                kv_ok = t_ok[:, None] & d_ok[None, :]
            # (TOKENS, HEAD_DIM_P2)
            k = tl.load(k_head + kv_offs, mask=kv_ok, other=0.0)
            v = tl.load(v_head + kv_offs, mask=kv_ok, other=0.0)
            # (Q_ROWS, TOKENS) scores
            s = _dot(q, tl.trans(k), UPCAST) * scale
            s = tl.where(t_ok[None, :], s, float("-inf"))
            # finite: every tile visited has a visible token
            m_new = tl.maximum(m, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, UPCAST)
            m = m_new
        # scratch (B, Hq, splits[, hd])
        row = (seq * num_q_heads + heads) * num_splits + split
        tl.store(m_ptr + row, m, mask=g_ok)
        tl.store(l_ptr + row, l, mask=g_ok)
        tl.store(
            acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=g_ok[:, None] & d_ok[None, :]
        )

    @triton.jit
    def _combine_splits_kernel(
        m_ptr,
        l_ptr,
        acc_ptr,
        out_ptr,
        stride_ob,
        stride_oh,
        num_q_heads,
        num_splits,
        SPLITS_P2: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_P2: tl.constexpr,
    ):
        # One program per (sequence, query head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M)
        # l_s, M = max_s m_s (an empty split has m = -inf, l = 0, acc = 0, so its weight is 0; split
        # 0 is never empty).
        seq = tl.program_id(0)
        head = tl.program_id(1)
        s = tl.arange(0, SPLITS_P2)
        d = tl.arange(0, HEAD_DIM_P2)
        s_ok = s < num_splits
        d_ok = d < HEAD_DIM
        row = (seq * num_q_heads + head) * num_splits + s
        m = tl.load(m_ptr + row, mask=s_ok, other=float("-inf"))
        l = tl.load(l_ptr + row, mask=s_ok, other=0.0)
        acc = tl.load(
            acc_ptr + row[:, None] * HEAD_DIM + d[None, :],
            mask=s_ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        w = tl.exp(m - tl.max(m, axis=0))  # (SPLITS_P2,)
        out = tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * l, axis=0)
        tl.store(
            out_ptr + seq * stride_ob + head * stride_oh + d,
            out.to(out_ptr.dtype.element_ty),
            mask=d_ok,
        )


# ------------------------------------------------------------- the engine's decode steps on CPU


class DecodeBackend:
    """A decode step's attention on the pages, one of three that rollout.py's engine chooses once
    at start (on CUDA: parts/cuda_graphs.py's DeviceDecode, with the same methods): the engine
    calls hidden(running, slots) -> (B, D), which runs the model for one step (cache.run), and
    each attention layer comes back to attend(cache, layer_idx, q, k, v) -> (B, Hq, hd).
    new_pool(cache, num_blocks) and start() (each generate) reset what it keeps; tables: its own
    copy of the block tables, kept by the scheduler (DeviceDecode's), or None. running: the
    engine's sequences (token_ids, block_table, prefix_id, prefix_blocks); cache: the engine's
    paged KV cache (k_pool, v_pool, block_size, device, workspace, write, run)."""

    extra_blocks = 0  # blocks it needs in the pool besides the sequences' (a scratch block)
    tables = None

    def __init__(self, model):
        self.model = model
        self.cache = None

    def new_pool(self, cache, num_blocks: int) -> None:
        self.cache = cache

    def start(self) -> None:
        pass


def last_tokens(running: list, device) -> tuple:
    """A decode step's input: each sequence's last token (B,) and its position (B,)."""
    ids = torch.tensor([seq.token_ids[-1] for seq in running], device=device)
    positions = torch.tensor([len(seq) - 1 for seq in running], device=device)
    return ids, positions


class CascadeDecode(DecodeBackend):
    """On CPU in PyTorch ops: shared-prefix ("cascade") attention, which reads a prompt's keys
    once for all its samples (cascade_decode, above); where the C++ kernel does not build."""

    name = "PyTorch cascade"

    def start(self) -> None:
        self.batch = None  # the last step's CascadeBatch: reused while the tables stay the same

    def hidden(self, running: list, slots: list):
        device = self.cache.device
        self.slots = torch.tensor(slots, device=device)
        self.batch = cascade_batch(running, self.cache.block_size, device, self.batch)
        return self.cache.run(self.model, self, *last_tokens(running, device))

    def attend(self, cache, layer_idx, q, k, v):
        cache.write(layer_idx, self.slots, k, v)
        k_pool = cache.k_pool[layer_idx]
        need = cascade_workspace_size(k_pool, self.batch)
        if len(cache.workspace) < need:
            cache.workspace = k_pool.new_empty(need * 5 // 4)
        return cascade_decode(q, k_pool, cache.v_pool[layer_idx], self.batch, cache.workspace)


class CpuKernelDecode(DecodeBackend):
    """On CPU in the fused C++ kernel (paged_decode_cpu): it writes the step's new K/V at each
    sequence's last position itself (no slots) and reads K/V in place."""

    name = "C++ kernel"

    def hidden(self, running: list, slots: list):
        width = max(len(seq.block_table) for seq in running)
        tables = [seq.block_table + [0] * (width - len(seq.block_table)) for seq in running]
        self.block_tables = torch.tensor(tables, dtype=torch.int32)  # (B, width)
        lengths = [len(seq) for seq in running]
        self.context_lens = torch.tensor(lengths, dtype=torch.int32)  # (B,)
        return self.cache.run(self.model, self, *last_tokens(running, self.cache.device))

    def attend(self, cache, layer_idx, q, k, v):
        k_pool = cache.k_pool[layer_idx]
        v_pool = cache.v_pool[layer_idx]
        return paged_decode_cpu(q, k_pool, v_pool, self.block_tables, self.context_lens, k, v)


# ----------------------------------------------------------------------------- self-check

# every path available here against gather + masked SDPA, on scattered blocks
if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    B = 3
    Hq = 4
    Hkv = 2
    hd = 32
    bs = 16
    blocks = 24
    q = torch.randn(B, Hq, hd, generator=gen)
    k_pool, v_pool = (torch.randn(Hkv, blocks, bs, hd, generator=gen) for _ in range(2))
    tables = torch.randperm(blocks, generator=gen)[: B * 4].view(B, 4).int()
    lengths = torch.tensor([5, 40, 64], dtype=torch.int32)
    reference = paged_decode_reference(q, k_pool, v_pool, tables, lengths)
    paths = {
        "cpu kernel": lambda: (
            paged_decode_cpu(q, k_pool, v_pool, tables, lengths) if load_cpu_kernel() else None
        )
    }
    if triton is not None and (
        torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
    ):
        paths["triton"] = lambda: paged_decode_triton(q, k_pool, v_pool, tables, lengths)
    for name, run in paths.items():
        out = run()
        print(
            f"{name}: "
            + (
                "not available"
                if out is None
                else f"max |out - reference| = {(out - reference).abs().max():.2e}"
            )
        )
