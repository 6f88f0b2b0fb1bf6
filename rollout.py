"""A paged-KV-cache generation engine for RL rollouts and evaluation (in the spirit of nano-vllm).

RL spends most of its time generating n responses per prompt. This engine does it in four ideas, which the file
follows in this order after the config (the engine first, then what it calls):
  1. Continuous batching. Each step is a prefill (admit waiting prompts, compute all their tokens at once) or a
     decode (one new token for every running sequence), its tokens flattened into one row with per-token position
     ids: no padding. Finished sequences free their blocks at once; when the pool is full, the youngest running
     sequence is preempted (its blocks freed, it is later recomputed from its prompt and its tokens so far).
  2. Paged KV cache. Per layer, one pool of `num_blocks` blocks of `block_size` tokens, k_pool[layer]:
     (Hkv, num_blocks, block_size, hd), allocated once. A sequence owns a block table (a list of block ids); its
     token t lives in slot  block_table[t // block_size] * block_size + t % block_size.  Blocks are reference-counted:
     the n samples of a prompt share its blocks (prefilled once); a shared last block is copied on its first write.
  3. Attention on pages. Prefill: causal attention inside each new sequence. Decode: one query per sequence against
     its blocks, bound by the bytes of K/V read, in four versions that tests/test_rollout.py holds against a
     per-token loop: a readable PyTorch reference (gather, masked SDPA); on CPU, shared-prefix ("cascade")
     attention in PyTorch ops, which reads a prompt's keys once for all its samples, and a fused C++ kernel that
     writes the step's new K/V and reads K/V in place (built on first use by torch.utils.cpp_extension where a
     compiler is found, else the cascade path runs); on CUDA, a Triton kernel (K/V read in place, once per KV head
     for its whole query group, long contexts split over programs: flash-decoding).
  4. Sampling. Each sample draws from its own random stream, seeded by the request's seed and the sample's index,
     so its tokens depend on nothing else (not on the batch, nor on preemption). Its logprobs are those of the
     distribution actually sampled from (temperature 0: the argmax, with log_softmax(logits)[argmax]):
         p = softmax( keep_top_k_top_p(logits / T) ),     logprob = log p[token]

The engine holds the trainer's nn.Module itself (not a copy) and keeps no KV cache across generate() calls, so after
an in-place weight update the next generate() sees the new weights. Simplifications compared with vLLM: no prefix
cache, no chunked prefill, no CUDA graphs, prefill and decode steps are not mixed, preemption only by recompute.

Use it:
    engine = LLMEngine(model, max_num_seqs=256, max_model_len=4096)
    out = engine.generate([[1, 2, 3], [4, 5]], SamplingParams(temperature=1.0, max_tokens=64, n=8, seed=0))
    out[0][7].token_ids, out[0][7].logprobs, out[0][7].finish_reason, engine.stats    # prompt 0, sample 7
    engine.generate(prompts, params, on_finish=lambda prompt, sample, out: ...)      # each sample as it finishes
Run it on a Hugging Face Qwen3 checkpoint (eval.py's one-prompt mode: the chat template, this engine, the samples):
    python eval.py --model=CKPT_DIR --prompt="What is 17 * 23?" --k=2
Tests (every attention path against a per-token loop, sampling, preemption): python -m pytest tests/test_rollout.py
"""
import dataclasses
import hashlib
import math
import os
import platform
import sys
import time
from collections import deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F

try:  # CPU-only installs may lack triton: the engine then runs its PyTorch attention everywhere.
    import triton
    import triton.language as tl
except ImportError:
    triton = None


# ----------------------------------------------------------------------------- config


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)   # True is an int to Python, not a count or a token id


def _require(ok, message: str) -> None:   # a check of the user's input in one line; message: what is wrong, what to do
    if not ok:
        raise ValueError(message)


@dataclass
class SamplingParams:
    temperature: float = 1.0        # 0 = greedy
    top_p: float = 1.0              # keep a token iff the mass of the tokens ranked above it is < top_p
    top_k: int = 0                  # keep the k most likely tokens (0 = all)
    max_tokens: int = 256           # new tokens per sample (fewer if max_model_len is reached first)
    n: int = 1                      # samples per prompt; they share the prompt's KV blocks
    stop_token_ids: tuple = ()      # finish ("stop") after sampling one of these; it is kept in the output
    seed: int | None = None         # None: drawn from torch's global RNG (so torch.manual_seed fixes it)

    def __post_init__(self):
        def check(name, ok, why):
            _require(ok, f"SamplingParams.{name}={getattr(self, name)!r}: {why}")

        t, p = self.temperature, self.top_p
        check("temperature", isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0,
              "must be a finite number >= 0 (0 means greedy)")
        check("top_p", isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 1, "must be in (0, 1]")
        check("top_k", _is_int(self.top_k) and self.top_k >= 0, "must be an int >= 0 (0 disables top-k)")
        check("max_tokens", _is_int(self.max_tokens) and self.max_tokens >= 1, "must be an int >= 1")
        check("n", _is_int(self.n) and self.n >= 1, "must be an int >= 1 (samples per prompt)")
        check("seed", self.seed is None or _is_int(self.seed), "must be an int or None")
        check("stop_token_ids", not isinstance(self.stop_token_ids, (str, bytes)) and all(
            _is_int(i) and i >= 0 for i in self.stop_token_ids), "must be a sequence of non-negative int token ids")
        self.stop_token_ids = tuple(self.stop_token_ids)


@dataclass
class Sample:
    token_ids: list      # the generated tokens (a stop token, if any, is the last one)
    logprobs: list       # logprob of each token under the distribution it was sampled from
    finish_reason: str   # "stop" (a stop token) or "length" (max_tokens or max_model_len)


@dataclass
class EngineStats:
    prefill_tokens: int = 0      # prompt tokens computed: each unique prompt once, whatever its n
    recompute_tokens: int = 0    # tokens computed again after a preemption
    decode_tokens: int = 0       # tokens computed one at a time in decode steps
    preemptions: int = 0
    peak_blocks_used: int = 0
    steps: int = 0


# ----------------------------------------------------------------------------- 1. the engine: continuous batching

class LLMEngine:
    """Holds the model (shared with the trainer, not copied; generation runs on its device), the block pool and the
    scheduler. max_num_seqs: sequences decoded together; max_model_len: prompt + output tokens of one sequence
    (default: the model's max_position_embeddings); num_blocks: pool size, or None to derive it from kv_cache_memory
    bytes (default: 90% of free CUDA memory; on CPU 512 MiB, or one max_model_len sequence if that is larger), capped
    at what max_num_seqs full-length sequences need. use_triton: None = on CUDA. cpu_kernel: decode attention on CPU
    with the fused C++ kernel (paged_decode_cpu); None = if the model is fp32 with a supported head_dim and the
    kernel builds (else the PyTorch cascade path, with a one-line notice), False = never, True = required."""

    def __init__(self, model, *, max_num_seqs: int = 256, max_model_len: int | None = None,
                 num_blocks: int | None = None, block_size: int = 16, max_num_batched_tokens: int = 16384,
                 kv_cache_memory: int | None = None, use_triton: bool | None = None,
                 cpu_kernel: bool | None = None):
        cfg, param = model.config, next(model.parameters())
        self.model, self.device, self.dtype, self.vocab_size = model, param.device, param.dtype, cfg.vocab_size
        self.max_model_len = cfg.max_position_embeddings if max_model_len is None else max_model_len
        for name, value in (("max_num_seqs", max_num_seqs), ("max_model_len", self.max_model_len),
                            ("block_size", block_size), ("max_num_batched_tokens", max_num_batched_tokens)):
            _require(_is_int(value) and value >= 1, f"LLMEngine({name}={value!r}): must be a positive int")
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        blocks_per_seq, block_bytes = -(-self.max_model_len // block_size), kv_block_bytes(cfg, param.dtype, block_size)
        if num_blocks is None:
            if kv_cache_memory is None:
                kv_cache_memory = int(0.9 * free_memory(self.device)) if self.device.type == "cuda" \
                    else max(512 * 2**20, blocks_per_seq * block_bytes)   # ~1 GB for Qwen3-0.6B's 4K tokens in fp32
            num_blocks = kv_cache_blocks(cfg, param.dtype, kv_cache_memory, block_size, max_num_seqs, self.max_model_len)
        _require(num_blocks >= blocks_per_seq, f"LLMEngine: a pool of {num_blocks} blocks x {block_size} tokens cannot "
                 f"hold one sequence of max_model_len={self.max_model_len} tokens ({blocks_per_seq} blocks, "
                 f"{block_bytes} bytes each); raise num_blocks / kv_cache_memory or lower max_model_len")
        self.blocks = BlockManager(num_blocks, block_size)
        use_triton = self.device.type == "cuda" and triton is not None if use_triton is None else use_triton
        _require(not (use_triton and triton is None), "LLMEngine(use_triton=True): triton is not installed")
        _require(not (cpu_kernel and (self.device.type != "cpu" or use_triton)),
                 "LLMEngine(cpu_kernel=True): the C++ kernel is for CPU engines without use_triton")
        on_cpu_kernel = self.device.type == "cpu" and not use_triton and cpu_kernel is not False
        if on_cpu_kernel:
            fits = self.dtype == torch.float32 and cfg.head_dim in CPU_KERNEL_HEAD_DIMS
            _require(fits or not cpu_kernel, f"LLMEngine(cpu_kernel=True): the CPU kernel takes fp32 and head_dim in "
                     f"{CPU_KERNEL_HEAD_DIMS}, not {self.dtype} and {cfg.head_dim}")
            on_cpu_kernel = fits and load_cpu_kernel(required=bool(cpu_kernel)) is not None
        self.cache = PagedKVCache(cfg, num_blocks, block_size, dtype=self.dtype, device=self.device,
                                  use_triton=use_triton, cpu_kernel=on_cpu_kernel)
        self.stats = EngineStats()
        self.num_prefixes = 0          # prefix ids handed out (a group's samples share one)

    @torch.inference_mode()
    def generate(self, prompt_token_ids: list, params, progress: bool = False, on_finish=None) -> list:
        """prompt_token_ids: list of prompts (lists of ints); params: one SamplingParams or one per prompt.
        Returns result[prompt][sample] = Sample(token_ids, logprobs, finish_reason). on_finish(prompt, sample, Sample),
        if given, is called as soon as a sample is finished (e.g. to score it while the others are still decoding)."""
        groups = make_groups(prompt_token_ids, params, self.max_model_len, self.vocab_size, self.max_num_seqs)
        self.on_finish, self._cascade = on_finish, None   # _cascade: the last decode step's CascadeBatch
        self.stats = EngineStats()
        self.blocks.peak_used = 0
        waiting, running = deque(list(g) for g in groups), []
        all_seqs = [seq for g in groups for seq in g]
        t0 = last_print = time.perf_counter()
        try:
            while waiting or running:
                admitted = self._admit(waiting, running)
                if admitted:
                    running += self._prefill(admitted)
                else:
                    self._decode(running, waiting)
                running[:] = [seq for seq in running if seq.finish_reason is None]
                self.stats.steps += 1
                if progress and (time.perf_counter() - last_print > 2 or not (waiting or running)):
                    last_print = time.perf_counter()
                    print_progress(self, all_seqs, running, waiting, last_print - t0)
        finally:   # also on an exception: no block may stay allocated
            for seq in all_seqs:
                self.blocks.release(seq)
        assert self.blocks.num_free == self.blocks.num_blocks, "rollout.py: KV blocks leaked"
        self.stats.peak_blocks_used = self.blocks.peak_used
        return [[seq.result() for seq in g] for g in groups]

    def _admit(self, waiting: deque, running: list) -> list:
        """First come, first served: take waiting groups while sequences, tokens and blocks allow.
        An idle engine always takes the head group (it fits: num_blocks >= one max_model_len sequence)."""
        admitted, num_seqs, num_tokens, free = [], len(running), 0, self.blocks.num_free
        while waiting:
            group = waiting[0]
            need = self.blocks.blocks_for(len(group[0]))
            if (admitted or running) and (num_seqs + len(group) > self.max_num_seqs or need + len(group) > free
                                          or num_tokens + len(group[0]) > self.max_num_batched_tokens):
                break   # (need + len(group): one more block per sample for its first decode step)
            admitted.append(waiting.popleft())
            num_seqs, num_tokens, free = num_seqs + len(group), num_tokens + len(group[0]), free - need
        return admitted

    def _forward(self, input_ids: list, positions: list, step: "StepBatch", rows: list | None = None):
        """Run the model on one flattened row of tokens; return the logits (len(rows), V) fp32 at `rows` (None: all)."""
        self.cache.step = step
        try:
            hidden = self.model(torch.tensor([input_ids], device=self.device),
                                position_ids=torch.tensor([positions], device=self.device),
                                kv_cache=self.cache, return_hidden=True)[0]               # (N, D)
        finally:
            self.cache.step = None
        return self.model.lm_head(hidden if rows is None else hidden[rows]).float()   # only the rows sampled from

    def _prefill(self, groups: list) -> list:
        """Compute each group's prompt once, share its blocks with the group's other samples, sample each one."""
        ids, positions, slots, cu_seqlens = [], [], [], [0]
        for group in groups:
            lead = group[0]
            lead.block_table = [self.blocks.allocate() for _ in range(self.blocks.blocks_for(len(lead)))]
            for seq in group[1:]:
                seq.block_table = self.blocks.share(lead.block_table)
            self.num_prefixes += 1
            for seq in group:
                seq.prefix_id, seq.prefix_blocks = self.num_prefixes, len(lead) // self.blocks.block_size
            ids += lead.token_ids
            positions += range(len(lead))
            slots += [self.blocks.slot(lead, t) for t in range(len(lead))]
            cu_seqlens.append(len(ids))
            if lead.preempted:
                self.stats.recompute_tokens += len(lead)
            else:
                self.stats.prefill_tokens += len(lead)
        step = StepBatch(True, torch.tensor(slots, device=self.device), cu_seqlens)
        logits = self._forward(ids, positions, step, [end - 1 for end in cu_seqlens[1:]])   # (G, V)
        seqs = [seq for group in groups for seq in group]
        self._append_tokens(seqs, logits[[g for g, group in enumerate(groups) for _ in group]])
        return [seq for seq in seqs if seq.finish_reason is None]

    def _decode(self, running: list, waiting: deque) -> None:
        """One token for every running sequence, oldest first; preempt the youngest when blocks run out."""
        slots, copies, i = [], [], 0
        while i < len(running):
            seq = running[i]
            appended = self.blocks.append(seq)
            if appended is None:                         # it needs a block and none is free
                victim = running.pop()                   # the youngest (if it is seq, the loop ends; else seq retries)
                self.blocks.release(victim)
                victim.preempted = True
                waiting.appendleft([victim])             # recomputed first when blocks free up
                self.stats.preemptions += 1
                continue
            slot, copy = appended
            slots.append(slot)
            if copy:
                copies.append(copy)
            i += 1
        if not running:
            return
        self.cache.copy_blocks(copies)   # before the forward writes into the copies
        # (the CPU kernel writes the new K/V at each sequence's last position itself: no slots to hand it)
        step = StepBatch(False, None if self.cache.cpu_kernel else torch.tensor(slots, device=self.device))
        lengths = [len(seq.token_ids) for seq in running]
        if self.cache.use_triton or self.cache.cpu_kernel:
            max_blocks = max(len(seq.block_table) for seq in running)
            step.block_tables = torch.tensor([seq.block_table + [0] * (max_blocks - len(seq.block_table))
                                              for seq in running], dtype=torch.int32, device=self.device)
            step.context_lens = torch.tensor(lengths, dtype=torch.int32, device=self.device)
        else:
            step.cascade = self._cascade = cascade_batch(running, self.blocks.block_size, self.device, self._cascade)
        logits = self._forward([seq.token_ids[-1] for seq in running], [n - 1 for n in lengths], step)
        self.stats.decode_tokens += len(running)
        self._append_tokens(running, logits)

    def _append_tokens(self, seqs: list, logits) -> None:
        uniforms = [0.0 if seq.params.temperature == 0 else seq.next_uniform() for seq in seqs]
        tokens, logprobs = sample(logits, [seq.params for seq in seqs], uniforms)
        for seq, token, logprob in zip(seqs, tokens.tolist(), logprobs.tolist()):
            seq.token_ids.append(token)
            seq.logprobs.append(logprob)
            stop = token in seq.params.stop_token_ids
            seq.finish_reason = "stop" if stop else "length" if len(seq) >= seq.max_len else None
            if seq.finish_reason:
                self.blocks.release(seq)                 # free at once, for the waiting requests
                if self.on_finish is not None:
                    self.on_finish(*seq.index, seq.result())


def make_groups(prompt_token_ids, params, max_model_len: int, vocab_size: int, max_num_seqs: int) -> list:
    """Validate the requests and make, per prompt, its group of n sequences (they will share the prompt)."""
    _require(isinstance(prompt_token_ids, (list, tuple)),
             "generate(prompt_token_ids=...): expected a list of prompts, each a list of token ids")
    params = [params] * len(prompt_token_ids) if isinstance(params, SamplingParams) else params
    _require(len(params) == len(prompt_token_ids), f"generate: {len(params)} SamplingParams for "
             f"{len(prompt_token_ids)} prompts; pass one SamplingParams, or one per prompt")
    groups = []
    for i, (prompt, p) in enumerate(zip(prompt_token_ids, params)):
        where = f"generate: prompt_token_ids[{i}]"
        _require(isinstance(p, SamplingParams), f"generate: params[{i}] is {type(p).__name__}, expected SamplingParams")
        prompt = prompt.tolist() if isinstance(prompt, torch.Tensor) else prompt
        _require(not isinstance(prompt, (str, bytes)) and all(_is_int(t) for t in prompt),
                 f"{where}: expected a list of int token ids (tokenize text first)")
        _require(len(prompt) > 0, f"{where} is empty: a prompt needs at least one token")
        _require(len(prompt) < max_model_len, f"{where} has {len(prompt)} tokens; max_model_len={max_model_len} "
                 "leaves no room for a response (truncate the prompt or raise max_model_len)")
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        _require(not bad, f"{where}: token ids {bad[:3]} outside the model's vocabulary [0, {vocab_size})")
        _require(p.n <= max_num_seqs, f"generate: params[{i}].n={p.n} > max_num_seqs={max_num_seqs}; "
                 "the samples of a prompt are decoded together")
        seed = int(torch.randint(2**62, ())) if p.seed is None else p.seed
        max_len = min(len(prompt) + p.max_tokens, max_model_len)
        groups.append([Sequence(prompt, p, max_len, sample_seed(seed, j), (i, j)) for j in range(p.n)])
    return groups


def sample_seed(request_seed: int, sample_index: int) -> int:
    """Sample j's seed: a function of the request's seed and j alone (not of the batch, the rank or preemption)."""
    return (request_seed * 1_000_003 + sample_index) % 2**63


def print_progress(engine, all_seqs, running, waiting, elapsed):
    done = sum(seq.finish_reason is not None for seq in all_seqs)
    generated = sum(len(seq) - seq.prompt_len for seq in all_seqs)
    left = sum(seq.max_len - len(seq) for seq in all_seqs if seq.finish_reason is None)
    rate, blocks = generated / max(elapsed, 1e-9), engine.blocks
    print(f"rollout: {done}/{len(all_seqs)} samples done | {generated} tokens, {rate:.0f} tok/s | running "
          f"{len(running)}, waiting {sum(len(g) for g in waiting)} | KV blocks {blocks.num_blocks - blocks.num_free}/"
          f"{blocks.num_blocks} | preemptions {engine.stats.preemptions} | ETA <= {left / max(rate, 1e-9):.0f}s",
          flush=True)


def free_memory(device) -> int:
    """Bytes free on a CUDA device once PyTorch's caching allocator has returned the blocks it holds unused (a model
    loaded and freed stays cached otherwise, invisible to mem_get_info)."""
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(device)[0]


def kv_block_bytes(cfg, dtype: torch.dtype, block_size: int) -> int:
    """Bytes of one KV block: K and V of block_size tokens in every layer, 2 x L x block_size x Hkv x hd x itemsize."""
    return 2 * cfg.num_hidden_layers * block_size * cfg.num_key_value_heads * cfg.head_dim * dtype.itemsize


def kv_cache_blocks(cfg, dtype: torch.dtype, memory_bytes: int, block_size: int, max_num_seqs: int, max_model_len: int):
    """The pool size in blocks that fits in memory_bytes (e.g. a fraction of the free GPU memory once the weights are
    in place; bf16 blocks take half the bytes), capped at what max_num_seqs sequences of max_model_len tokens use."""
    return min(int(memory_bytes) // kv_block_bytes(cfg, dtype, block_size), max_num_seqs * -(-max_model_len // block_size))


# ----------------------------------------------------------------------------- 2. the paged KV cache's bookkeeping

class Sequence:
    """One sample being generated: prompt + output tokens, its block table and its random stream."""

    def __init__(self, prompt: list, params: SamplingParams, max_len: int, seed: int, index: tuple = (0, 0)):
        self.index = index                     # (prompt, sample) in the request
        self.token_ids = list(prompt)          # prompt + generated so far
        self.prompt_len = len(prompt)
        self.params = params
        self.max_len = max_len                 # stop with "length" at this many tokens
        self.generator = torch.Generator().manual_seed(seed)   # CPU: the stream does not depend on the device
        self.uniforms: list[float] = []        # the next uniforms of its stream, last = next; drawn 64 at a time
        self.logprobs: list[float] = []
        self.block_table: list[int] = []       # block ids holding the KV of token_ids[:-1] (+ the last after a step)
        self.prefix_id = -1                    # samples with the same prefix_id share block_table[:prefix_blocks]:
        self.prefix_blocks = 0                 # the full blocks of the prompt prefilled for them (never written again)
        self.finish_reason: str | None = None
        self.preempted = False                 # its next prefill is a recomputation

    def __len__(self):
        return len(self.token_ids)

    def result(self) -> "Sample":
        return Sample(self.token_ids[self.prompt_len:], self.logprobs, self.finish_reason)

    def next_uniform(self) -> float:
        """The next uniform of its stream (one per sampled token), drawn 64 at a time: one generator call per 64."""
        if not self.uniforms:
            self.uniforms = torch.rand(64, generator=self.generator, dtype=torch.float64).tolist()[::-1]
        return self.uniforms.pop()


class BlockManager:
    """Free list and reference counts of the pool's blocks. Pure bookkeeping; the tensors live in PagedKVCache."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref_counts = [0] * num_blocks
        self.free_ids = deque(range(num_blocks))
        self.peak_used = 0

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self) -> int:
        block = self.free_ids.popleft()
        self.ref_counts[block] = 1
        self.peak_used = max(self.peak_used, self.num_blocks - self.num_free)
        return block

    def share(self, block_table: list) -> list:
        for block in block_table:
            self.ref_counts[block] += 1
        return list(block_table)

    def release(self, seq: "Sequence") -> None:
        for block in seq.block_table:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_ids.append(block)
        seq.block_table = []

    def slot(self, seq: "Sequence", pos: int) -> int:
        return seq.block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def append(self, seq: "Sequence") -> tuple[int, tuple | None] | None:
        """Make the last token's slot writable: a new block if the token starts one, a private copy if its block is
        shared. Returns (slot, (src, dst) block copy or None), or None if that needs a block and none is free.
        (Called for every sequence at every step: the common case, neither, costs a few list lookups.)"""
        index, offset = divmod(len(seq.token_ids) - 1, self.block_size)
        copy = None
        if index == len(seq.block_table):
            if not self.free_ids:
                return None
            seq.block_table.append(self.allocate())
        elif self.ref_counts[seq.block_table[-1]] > 1:
            if not self.free_ids:
                return None
            src, dst = seq.block_table[-1], self.allocate()
            self.ref_counts[src] -= 1                       # the other owners keep src as it is
            seq.block_table[-1], copy = dst, (src, dst)
        return seq.block_table[index] * self.block_size + offset, copy


# ----------------------------------------------------------------------------- 3. attention on pages

@dataclass
class StepBatch:
    """What attend() needs to know about the tokens of one step (all flattened into one row of N tokens)."""
    is_prefill: bool
    slot_mapping: torch.Tensor | None            # (N,) pool slot of each token's K/V (None: CPU kernel decode)
    cu_seqlens: list | None = None               # prefill: sequence i is tokens cu_seqlens[i]:cu_seqlens[i+1]
    block_tables: torch.Tensor | None = None     # decode, kernels: (B, max_blocks) int32, padded with 0
    context_lens: torch.Tensor | None = None     # decode, kernels: (B,) int32, tokens to attend to (the new one too)
    cascade: "CascadeBatch | None" = None          # decode, CPU


class PagedKVCache:
    """The block pools of every layer (cfg: the model's config); model.py calls attend() in every attention layer."""

    def __init__(self, cfg, num_blocks: int, block_size: int, *, dtype, device, use_triton: bool,
                 cpu_kernel: bool = False):
        # head-major: gathering blocks of one head yields (Hkv, B, L, hd), ready for a batched matmul, no transpose
        shape = (cfg.num_hidden_layers, cfg.num_key_value_heads, num_blocks, block_size, cfg.head_dim)
        # zeros, not empty: padded slots are read (and masked) by the PyTorch paths; NaN * 0 would be NaN
        self.k_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.v_pool = torch.zeros(shape, dtype=dtype, device=device)
        self.use_triton, self.cpu_kernel = use_triton, cpu_kernel   # decode: Triton, the C++ kernel, else cascade
        self.workspace = self.k_pool.new_empty(0)   # cascade_decode's gather buffer, grown on demand
        self.step: StepBatch | None = None

    @property
    def nbytes(self) -> int:
        return 2 * self.k_pool.numel() * self.k_pool.element_size()

    def copy_blocks(self, copies: list) -> None:   # copy-on-write, all layers at once
        if copies:
            src, dst = (torch.tensor(c, device=self.k_pool.device) for c in zip(*copies))
            self.k_pool[:, :, dst] = self.k_pool[:, :, src]
            self.v_pool[:, :, dst] = self.v_pool[:, :, src]

    def attend(self, layer_idx, q, k, v):   # q (1, N, Hq, hd), k/v (1, N, Hkv, hd) -> (1, N, Hq, hd)
        step = self.step
        q, k, v = q[0], k[0], v[0]
        k_pool, v_pool = self.k_pool[layer_idx], self.v_pool[layer_idx]       # (Hkv, num_blocks, bs, hd)
        Hkv, _, _, hd = k_pool.shape
        if self.cpu_kernel and not step.is_prefill:   # the kernel writes the new K/V itself (see paged_decode_cpu)
            return paged_decode_cpu(q, k_pool, v_pool, step.block_tables, step.context_lens, k, v).unsqueeze(0)
        k_pool.view(Hkv, -1, hd).index_copy_(1, step.slot_mapping, k.transpose(0, 1).to(k_pool.dtype))
        v_pool.view(Hkv, -1, hd).index_copy_(1, step.slot_mapping, v.transpose(0, 1).to(v_pool.dtype))
        if step.is_prefill:   # no cached prefix: causal attention inside each new sequence
            outs = []
            for s, e in zip(step.cu_seqlens[:-1], step.cu_seqlens[1:]):
                qi, ki, vi = (t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v))   # (1, H, Ti, hd)
                y = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
                outs.append(y[0].transpose(0, 1))
            return torch.cat(outs).unsqueeze(0)
        if self.use_triton:
            return paged_decode_triton(q, k_pool, v_pool, step.block_tables, step.context_lens).unsqueeze(0)
        if len(self.workspace) < cascade_workspace_size(k_pool, step.cascade):
            self.workspace = k_pool.new_empty(cascade_workspace_size(k_pool, step.cascade) * 5 // 4)
        return cascade_decode(q, k_pool, v_pool, step.cascade, self.workspace).unsqueeze(0)


def paged_decode_reference(q, k_pool, v_pool, block_tables, context_lens):
    """One query per sequence against its pages in plain PyTorch, the oracle of the faster paths: gather each
    sequence's blocks into a padded copy, then masked SDPA. q (B, Hq, hd); k_pool/v_pool (Hkv, num_blocks, bs, hd);
    block_tables (B, max_blocks) padded with any valid id; context_lens (B,) -> (B, Hq, hd)."""
    B, Hq, hd = q.shape
    Hkv, _, bs, _ = k_pool.shape
    L = block_tables.shape[1] * bs
    blocks = block_tables.flatten().long()
    k, v = (pool.index_select(1, blocks).view(Hkv, B, L, hd).transpose(0, 1).to(q.dtype)   # (B, Hkv, L, hd)
            for pool in (k_pool, v_pool))
    visible = torch.arange(L, device=q.device) < context_lens[:, None]                  # (B, L)
    # GQA: the Hq/Hkv query heads of one KV head attend as that head's Hq/Hkv queries (heads h -> h // group)
    out = F.scaled_dot_product_attention(q.view(B, Hkv, Hq // Hkv, hd), k, v, attn_mask=visible[:, None, None, :])
    return out.reshape(B, Hq, hd)


@dataclass
class CascadeBatch:
    """A decode step's B sequences split at their group's shared prompt blocks, made once per step for every layer:
    P groups of at most n sequences; prefixes padded to L_pre tokens, own blocks to L_own (multiples of the block)."""
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

    def v_rows(self, num_kv_heads: int, group: int, num_slots: int) -> torch.Tensor:
        """(Hkv*B*G, L) rows of a (Hkv*num_slots, hd) view of a V pool: query (h, i, g) reads V[h, slots[i]]."""
        if self._v_rows is None:
            heads = torch.arange(num_kv_heads, device=self.slots.device)[:, None, None, None] * num_slots
            rows = heads + self.slots[None, :, None, :]                                  # (Hkv, B, 1, L)
            self._v_rows = rows.expand(-1, -1, group, -1).reshape(-1, self.slots.shape[1])
        return self._v_rows


def cascade_batch(seqs: list, block_size: int, device, reuse: CascadeBatch | None = None) -> CascadeBatch:
    """Group the running sequences by the prompt prefill they share (prefix_id) and split each block table
    into its group's prefix (the prompt's full blocks) and its own blocks (the rest: written by it alone).
    reuse: the previous step's batch. A block table changes only when a sequence starts a block or copies a shared
    one (its length or last block id), so while the key is the same only the lengths (the mask) are new: most
    decode steps skip the Python work of rebuilding the tables."""
    key = tuple((id(seq), len(seq.block_table), seq.block_table[-1]) for seq in seqs)
    prefix_len = [seq.prefix_blocks * block_size for seq in seqs]     # tokens sequence i reads from its prefix
    own_len = [len(seq) - m for seq, m in zip(seqs, prefix_len)]      # and from its own blocks: >= 1 (the new token)
    if reuse is not None and reuse.key == key:                        # the same tables: only own_len grew
        own_hidden = _past(own_len, reuse.L_own, device)
        return dataclasses.replace(reuse, hidden=torch.cat([reuse.hidden[:, :reuse.L_pre], own_hidden], 1))
    # 1. the grouped layout: P groups, each a row of n places (its sequences, then padding)
    by_prefix = {}
    for i, seq in enumerate(seqs):
        by_prefix.setdefault(seq.prefix_id, []).append(i)
    groups = list(by_prefix.values())                                 # P lists of sequence indices
    B, P, n = len(seqs), len(groups), max(map(len, groups))
    group_rows = [i for members in groups for i in members + [B] * (n - len(members))]   # (P*n,): B = a padding place
    seq_rows = [0] * B                                                # (B,): the place of sequence i, p*n + j
    for p, members in enumerate(groups):
        for j, i in enumerate(members):
            seq_rows[i] = p * n + j
    # 2. the block tables, padded with block 0 (its positions are hidden): each group's prefix, each sequence's own
    prefix_tables = [seqs[members[0]].block_table[:seqs[members[0]].prefix_blocks] for members in groups]
    own_tables = [seq.block_table[seq.prefix_blocks:] for seq in seqs]
    max_prefix, max_own = max(map(len, prefix_tables)), max(map(len, own_tables))
    tensor = lambda x: torch.tensor(x, dtype=torch.int64, device=device)   # noqa: E731
    prefix_blocks = tensor(_padded(prefix_tables, max_prefix))        # (P*max_prefix,)
    own_blocks = tensor(_padded(own_tables, max_own))                 # (B*max_own,)
    seq_rows = tensor(seq_rows)
    # 3. per sequence, its L_pre prefix and L_own own positions: which are padding, and the pool slot of each
    L_pre, L_own = max_prefix * block_size, max_own * block_size
    hidden = torch.cat([_past(prefix_len, L_pre, device), _past(own_len, L_own, device)], 1)   # (B, L_pre + L_own)
    prefix_slots = _slots(prefix_blocks.view(P, max_prefix), block_size)[seq_rows // n]   # (B, L_pre): its group's
    own_slots = _slots(own_blocks.view(B, max_own), block_size)                            # (B, L_own)
    return CascadeBatch(prefix_blocks, own_blocks, P, n, L_pre, L_own, tensor(group_rows), seq_rows, hidden,
                        torch.cat([prefix_slots, own_slots], 1), key)


def _padded(tables: list, width: int) -> list:
    """Block tables, each padded with block 0 to `width` blocks, flattened: (len(tables) * width,)."""
    return [block for table in tables for block in table + [0] * (width - len(table))]


def _past(lengths: list, width: int, device) -> torch.Tensor:
    """(len(lengths), width) bool: position t of row i lies past its lengths[i] tokens (padding, hidden)."""
    return torch.arange(width, device=device) >= torch.tensor(lengths, dtype=torch.int64, device=device)[:, None]


def _slots(blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """(R, W) block ids -> (R, W * block_size) pool slots, block b's token t at slot b * block_size + t."""
    R, W = blocks.shape
    return (blocks.view(R, W, 1) * block_size + torch.arange(block_size, device=blocks.device)).view(R, W * block_size)


def cascade_workspace_size(k_pool, batch: CascadeBatch) -> int:
    Hkv, _, bs, hd = k_pool.shape
    return Hkv * (len(batch.prefix_blocks) + len(batch.own_blocks)) * bs * hd


def cascade_decode(q, k_pool, v_pool, batch: CascadeBatch, workspace=None):
    """Same result as paged_decode_reference, the n samples of a group meeting its prompt keys in one matmul:
        scores_i = [ q_i K_prompt(g)^T | q_i K_own(i)^T ],   out_i = sum_l softmax(scores_i)_l V[slot_l]
    Keys are gathered into contiguous buffers (per group for the prompt, per sequence for the rest); values are
    not (the sum over V rows is an embedding_bag on the pool). workspace: optional 1-d buffer of at least
    cascade_workspace_size() elements for the keys; PagedKVCache reuses one, as allocating a context-sized tensor
    per layer and step costs on CPU as much as the attention (page faults, cold caches). q, out: (B, Hq, hd)."""
    B, Hq, hd = q.shape
    Hkv, num_blocks, bs, _ = k_pool.shape
    G, P, n, L = Hq // Hkv, batch.P, batch.n, batch.L_pre + batch.L_own     # G: query heads per KV head
    k_pre, k_own = _gather_keys(k_pool, batch, workspace)             # (Hkv*P, L_pre, hd), (Hkv*B, L_own, hd)
    q_heads = (q.view(B, Hkv, G, hd).transpose(0, 1) * hd ** -0.5).to(k_pool.dtype)   # (Hkv, B, G, hd), scaled
    # 1. against the prompt: the n samples of a group side by side, one (n*G, hd) x (hd, L_pre) matmul per group
    q_grouped = F.pad(q_heads, (0, 0, 0, 0, 0, 1))[:, batch.group_rows]               # (Hkv, P*n, G, hd); pad: 0
    scores_pre = torch.bmm(q_grouped.reshape(Hkv * P, n * G, hd), k_pre.transpose(1, 2))   # (Hkv*P, n*G, L_pre)
    scores_pre = scores_pre.view(Hkv, P * n, G, batch.L_pre)[:, batch.seq_rows]        # (Hkv, B, G, L_pre)
    # 2. against its own keys, one sequence at a time
    scores_own = torch.bmm(q_heads.reshape(Hkv * B, G, hd), k_own.transpose(1, 2))    # (Hkv*B, G, L_own)
    scores = torch.cat([scores_pre, scores_own.view(Hkv, B, G, batch.L_own)], -1)     # (Hkv, B, G, L)
    # 3. softmax over a sequence's L positions in fp32, padding hidden
    probs = scores.float().masked_fill_(batch.hidden[None, :, None, :], float("-inf")).softmax(-1)
    # 4. the probability-weighted sum of V rows, read from the pool by slot: row (h, i, g) sums V[h, slots[i]]
    out = F.embedding_bag(batch.v_rows(Hkv, G, num_blocks * bs), v_pool.view(-1, hd), mode="sum",
                          per_sample_weights=probs.view(-1, L).to(v_pool.dtype))      # (Hkv*B*G, hd)
    return out.view(Hkv, B, G, hd).transpose(0, 1).reshape(B, Hq, hd).to(q.dtype)


def _gather_keys(k_pool, batch: CascadeBatch, workspace=None) -> tuple:
    """The step's keys copied into contiguous buffers (the workspace): each group's prompt blocks
    (Hkv*P, L_pre, hd) and each sequence's own blocks (Hkv*B, L_own, hd)."""
    Hkv, _, bs, hd = k_pool.shape
    if workspace is None:
        workspace = k_pool.new_empty(cascade_workspace_size(k_pool, batch))
    n_pre, n_own = (Hkv * len(blocks) * bs * hd for blocks in (batch.prefix_blocks, batch.own_blocks))
    k_pre = torch.index_select(k_pool, 1, batch.prefix_blocks, out=workspace[:n_pre].view(Hkv, -1, bs, hd))
    k_own = torch.index_select(k_pool, 1, batch.own_blocks, out=workspace[n_pre:n_pre + n_own].view(Hkv, -1, bs, hd))
    return k_pre.view(Hkv * batch.P, batch.L_pre, hd), k_own.view(Hkv * len(batch.seq_rows), batch.L_own, hd)


def paged_decode_cpu(q, k_pool, v_pool, block_tables, context_lens, k_new=None, v_new=None):
    """Same contract as paged_decode_reference, fp32 only: a fused C++ kernel (below) that reads each sequence's K/V
    in place from the pool, no gather and no padding. Why C++: the cascade path's dozen ops per layer (index_select,
    two bmm of 2-row matrices, masked softmax, embedding_bag) take several times what reading the step's K/V once
    costs, and Triton has no CPU backend. block_tables (B, max_blocks), context_lens (B,): int32.
    k_new, v_new (B, Hkv, hd), optional: first write them at each sequence's position context_len - 1 (what
    PagedKVCache's index_copy_ does), inside the same pass: the slot's line is one the task reads next. Tasks run
    in parallel, so no other sequence of the call may read a written slot (the engine's are in unshared blocks)."""
    kernel = load_cpu_kernel(required=True)
    if not (q.dtype == k_pool.dtype == v_pool.dtype == torch.float32 and q.shape[2] in CPU_KERNEL_HEAD_DIMS):
        _require(False, f"paged_decode_cpu: fp32 and head_dim in {CPU_KERNEL_HEAD_DIMS} only "
                 f"(got {q.dtype}, {q.shape[2]})")
    _require((k_new is None) == (v_new is None), "paged_decode_cpu: give both k_new and v_new, or neither")
    k_new, v_new = (q.new_empty(0), q.new_empty(0)) if k_new is None else (k_new.contiguous(), v_new.contiguous())
    return kernel.paged_decode(q.contiguous(), k_pool, v_pool, block_tables.contiguous(), context_lens.contiguous(),
                               k_new, v_new)


CPU_KERNEL_HEAD_DIMS = (16, 32, 64, 128, 256)   # compile-time in the kernel: the dot products unroll into registers
# One (sequence, KV head) per task: it writes the sequence's new K/V row (decode), then its G queries meet its L tokens
# in three passes over the block table (scores, softmax, the weighted sum of V), while the next task's rows are
# prefetched. The group runs in chunks of 4, 2 or 1 query heads, sizes fixed at compile time so a chunk's queries stay
# in registers; each chunk reads the K/V rows once. Tasks run on torch's (OpenMP) threads.
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
# -ffast-math at compile time only (the link step does not see it, so loading the kernel does not flush denormals
# in the process): it lets exp and the sums vectorize; the kernel never meets an infinity or a NaN of its own.
CPU_KERNEL_FLAGS = ["-O3", "-march=native", "-fopenmp", "-ffast-math"]   # -fopenmp: at::parallel_for's threads
_cpu_kernel = None   # the loaded module, or the one-line reason it could not be built
_cpu_kernel_notice_shown = False


def load_cpu_kernel(required: bool = False):
    """Build the CPU kernel with torch.utils.cpp_extension (a C++ compiler, ninja and Python's headers; ~40 s, once
    per machine: the build is cached in $TORCH_EXTENSIONS_DIR or torch's default extensions directory, under a hash
    of source, flags, compiler, Python, torch and CPU, since -march=native code must not run on another CPU) and load
    it (~0.1 s). Returns the module, or None after a one-line notice on stderr if it cannot be built (once per
    process); required=True raises instead."""
    global _cpu_kernel, _cpu_kernel_notice_shown
    if _cpu_kernel is None:
        try:
            _cpu_kernel = _build_cpu_kernel()
        except Exception as e:   # no compiler, no ninja, a failed compile: the PyTorch paths remain
            lines = str(e).strip().splitlines() or [""]
            cause = next((line for line in lines if "error" in line.lower() and "Error building" not in line),
                         lines[0])   # the compiler's first error, not ninja's closing "subcommand failed"
            _cpu_kernel = f"{type(e).__name__}: {cause.strip()}"[:300]
    if isinstance(_cpu_kernel, str):
        _require(not required, f"rollout.py: the CPU attention kernel could not be built ({_cpu_kernel})")
        if not _cpu_kernel_notice_shown:
            _cpu_kernel_notice_shown = True
            print(f"rollout.py: the CPU attention kernel could not be built ({_cpu_kernel}); decoding with the "
                  f"slower PyTorch path (LLMEngine(cpu_kernel=False) skips the attempt)", file=sys.stderr)
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
        raise RuntimeError(f"no Python.h in {sysconfig.get_paths()['include']} (install Python's development headers)")
    try:
        with open("/proc/cpuinfo") as fh:   # the instruction sets -march=native compiles for
            cpu = next((line for line in fh if line.startswith("flags")), platform.processor())
    except OSError:
        cpu = platform.processor()
    key = "\n".join([CPU_KERNEL_SOURCE, *CPU_KERNEL_FLAGS, compiler, sys.version, str(sysconfig.get_config_var(
        "EXT_SUFFIX")), torch.__version__, cpu])
    name = "klear_paged_decode_" + hashlib.sha1(key.encode()).hexdigest()[:12]
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    build_dir = os.path.join(root, name)
    os.makedirs(build_dir, exist_ok=True)
    # One builder at a time (torchrun ranks start together), through a lock the kernel releases when its process
    # dies. Whoever holds it may delete torch's own lock file: only a killed build can have left that behind, and
    # torch would wait on it forever.
    with open(os.path.join(build_dir, "build.flock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(build_dir, "lock")):
            os.remove(os.path.join(build_dir, "lock"))
        if not os.path.exists(os.path.join(build_dir, name + ".so")):
            print(f"rollout.py: building the CPU attention kernel in {build_dir} (once per machine, ~40 s)",
                  file=sys.stderr)
        torch_log = logging.getLogger("torch.utils.cpp_extension")
        level = torch_log.level
        torch_log.setLevel(logging.ERROR)   # its compiler-ABI warnings: a failed build is reported in one line
        try:
            return cpp_extension.load_inline(name, cpp_sources=CPU_KERNEL_SOURCE, extra_cflags=CPU_KERNEL_FLAGS,
                                             build_directory=build_dir)
        finally:
            torch_log.setLevel(level)


def paged_decode_triton(q, k_pool, v_pool, block_tables, context_lens, num_splits: int | None = None):
    """Same contract as paged_decode_reference; K/V are read in place from the pool (no gather), once per KV head.
    num_splits: parts of each context run by separate programs (flash-decoding); None = decode_splits()."""
    q = q.contiguous()
    B, Hq, hd = q.shape
    Hkv, _, bs, _ = k_pool.shape
    assert k_pool.is_contiguous() and v_pool.stride() == k_pool.stride()
    max_blocks = block_tables.shape[1]
    splits = num_splits or decode_splits(B, Hkv, max_blocks, q.device)
    blocks_per_split = -(-max_blocks // splits)
    m, l = (torch.empty(B, Hq, splits, dtype=torch.float32, device=q.device) for _ in range(2))
    acc = torch.empty(B, Hq, splits, hd, dtype=torch.float32, device=q.device)
    decode_meta, combine_meta = decode_kernel_meta(Hq, Hkv, bs, hd, splits)
    _paged_decode_kernel[(B, Hkv, splits)](
        q, k_pool, v_pool, m, l, acc, block_tables, context_lens, 1.0 / math.sqrt(hd),
        q.stride(0), q.stride(1), k_pool.stride(1), k_pool.stride(2), k_pool.stride(0), block_tables.stride(0), Hq,
        blocks_per_split, splits, **decode_meta)
    out = torch.empty_like(q)
    _combine_splits_kernel[(B, Hq)](m, l, acc, out, out.stride(0), out.stride(1), Hq, splits, **combine_meta)
    return out


def decode_splits(batch: int, num_kv_heads: int, max_blocks: int, device) -> int:
    """Splits of each context for the paged-decode kernel: enough programs to fill the GPU (4 per SM) when the batch
    alone does not, but each split at least 16 blocks long. Depends only on shapes (no device-to-host sync)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 32
    wanted = -(-4 * sms // (batch * num_kv_heads))
    return max(1, min(wanted, max_blocks // 16))


def decode_kernel_meta(num_q_heads: int, num_kv_heads: int, block_size: int, head_dim: int, splits: int) -> tuple:
    """The compile-time constants of the two decode kernels (tests/test_aot_compile.py compiles them with these)."""
    group, head_dim_p2 = num_q_heads // num_kv_heads, triton.next_power_of_2(head_dim)
    return (dict(GROUP=group, GROUP_P2=triton.next_power_of_2(group), BLOCK_SIZE=block_size,
                 BLOCK_P2=triton.next_power_of_2(block_size), HEAD_DIM=head_dim, HEAD_DIM_P2=head_dim_p2),
            dict(SPLITS_P2=triton.next_power_of_2(splits), HEAD_DIM=head_dim, HEAD_DIM_P2=head_dim_p2))


if triton is not None:
    @triton.jit
    def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr, block_tables_ptr, context_lens_ptr, scale,
                             stride_qb, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, num_q_heads,
                             blocks_per_split, num_splits,
                             GROUP: tl.constexpr, GROUP_P2: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                             BLOCK_P2: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_P2: tl.constexpr):
        # One program per (sequence, KV head, split of the context). All GROUP query heads that share the KV head
        # are processed together, so each K/V block is read once for the whole group (GQA 32:8: once, not 4 times);
        # the split covers blocks_per_split blocks of the block table (flash-decoding), so a long context runs on
        # many programs. Online softmax per query head: running max m, normaliser l, accumulator acc; the partial
        # (m, l, acc) of each split goes to fp32 scratch, and _combine_splits_kernel merges the splits.
        seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        g = tl.arange(0, GROUP_P2)
        d = tl.arange(0, HEAD_DIM_P2)
        g_ok, d_ok = g < GROUP, d < HEAD_DIM
        heads = kv_head * GROUP + g                                               # (GROUP_P2,) query heads
        q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * stride_qh + d[None, :],
                    mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32) * scale   # (GROUP_P2, HEAD_DIM_P2)
        context_len = tl.load(context_lens_ptr + seq)
        first = split * blocks_per_split * BLOCK_SIZE
        last = tl.minimum(context_len, first + blocks_per_split * BLOCK_SIZE)
        offs = tl.arange(0, BLOCK_P2)
        m = tl.full([GROUP_P2], float("-inf"), tl.float32)
        l = tl.zeros([GROUP_P2], tl.float32)
        acc = tl.zeros([GROUP_P2, HEAD_DIM_P2], tl.float32)
        head_offset = kv_head.to(tl.int64) * stride_kh    # a whole head of the pool can pass 2**31 elements
        for start in range(first, last, BLOCK_SIZE):      # an empty split (first >= context_len) skips the loop
            block = tl.load(block_tables_ptr + seq * stride_bt + start // BLOCK_SIZE).to(tl.int64)
            t_ok = (offs < BLOCK_SIZE) & (start + offs < context_len)
            kv_offs = head_offset + block * stride_kb + offs[:, None] * stride_ks + d[None, :]
            kv_ok = t_ok[:, None] & d_ok[None, :]
            k = tl.load(k_ptr + kv_offs, mask=kv_ok, other=0.0).to(tl.float32)    # (BLOCK_P2, HEAD_DIM_P2)
            v = tl.load(v_ptr + kv_offs, mask=kv_ok, other=0.0).to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)                     # (GROUP_P2, BLOCK_P2) scores
            s = tl.where(t_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))      # finite: every block visited has a visible token
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m = m_new
        row = (seq * num_q_heads + heads) * num_splits + split                   # scratch (B, Hq, splits[, hd])
        tl.store(m_ptr + row, m, mask=g_ok)
        tl.store(l_ptr + row, l, mask=g_ok)
        tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=g_ok[:, None] & d_ok[None, :])

    @triton.jit
    def _combine_splits_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, stride_ob, stride_oh, num_q_heads, num_splits,
                               SPLITS_P2: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_P2: tl.constexpr):
        # One program per (sequence, query head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s, M = max_s m_s
        # (an empty split has m = -inf, l = 0, acc = 0, so its weight is 0; split 0 is never empty).
        seq, head = tl.program_id(0), tl.program_id(1)
        s = tl.arange(0, SPLITS_P2)
        d = tl.arange(0, HEAD_DIM_P2)
        s_ok, d_ok = s < num_splits, d < HEAD_DIM
        row = (seq * num_q_heads + head) * num_splits + s
        m = tl.load(m_ptr + row, mask=s_ok, other=float("-inf"))
        l = tl.load(l_ptr + row, mask=s_ok, other=0.0)
        acc = tl.load(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], mask=s_ok[:, None] & d_ok[None, :], other=0.0)
        w = tl.exp(m - tl.max(m, axis=0))                                         # (SPLITS_P2,)
        out = tl.sum(w[:, None] * acc, axis=0) / tl.sum(w * l, axis=0)
        tl.store(out_ptr + seq * stride_ob + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


# ----------------------------------------------------------------------------- 4. sampling

def sample(logits, params: list, uniforms: list):
    """logits (B, V) fp32 -> tokens (B,), logprobs (B,): row i drawn from softmax(keep_top_k_top_p(logits_i / T_i))
    by inverse CDF at uniforms[i] (from row i's own stream, so a row's draw depends only on its seed)."""
    (B, V), dev = logits.shape, logits.device
    greedy = [p.temperature == 0 for p in params]
    temperature = [1.0 if g else p.temperature for g, p in zip(greedy, params)]
    top_k = [V if g or p.top_k == 0 else min(p.top_k, V) for g, p in zip(greedy, params)]
    top_p = [1.0 if g else p.top_p for g, p in zip(greedy, params)]
    if any(t != 1.0 for t in temperature):
        logits = logits / torch.tensor(temperature, device=dev)[:, None]
    if min(top_k) < V or min(top_p) < 1:
        logits = keep_top_k_top_p(logits, torch.tensor(top_k, device=dev), torch.tensor(top_p, device=dev))
    logprobs = torch.log_softmax(logits, dim=-1)                                 # (B, V)
    tokens = inverse_cdf(logprobs.exp(), torch.tensor(uniforms, dtype=logprobs.dtype, device=dev))
    if any(greedy):
        tokens = torch.where(torch.tensor(greedy, device=dev), logits.argmax(dim=-1), tokens)
    return tokens, logprobs.gather(1, tokens[:, None])[:, 0]


def keep_top_k_top_p(logits, top_k, top_p):
    """logits (B, V); top_k (B,) in 1..V; top_p (B,) in (0, 1] -> logits with the dropped tokens at -inf.
    Top-k first, then the nucleus of what is left: a token is kept iff the mass ranked above it is < top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks >= top_k[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs
    sorted_logits = sorted_logits.masked_fill((mass_above >= top_p[:, None]) & (top_p[:, None] < 1), float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def inverse_cdf(probs, u, chunk: int = 64):
    """probs (B, V) >= 0, not all 0 per row; u (B,) in [0, 1] -> (B,) the token where the running mass first exceeds
    u * total, never a zero-probability one (even when u * total rounds up to the total). Two levels (the chunk of
    `chunk` tokens, then the token in it), so the sequential cumsums cover V/chunk + chunk entries per row, not V."""
    B, V = probs.shape
    chunks = F.pad(probs, (0, -V % chunk)).view(B, -1, chunk)                        # (B, V/chunk, chunk)

    def search(cdf, target):   # first index with cdf > target, target kept below the last (positive) entry
        target = torch.minimum(target, cdf[:, -1:].nextafter(torch.zeros_like(cdf[:, -1:])))
        return torch.searchsorted(cdf, target.clamp(min=0), right=True)            # (B, 1)

    chunk_cdf = chunks.sum(-1).cumsum(-1)                                           # (B, V/chunk)
    target = u[:, None] * chunk_cdf[:, -1:]
    c = search(chunk_cdf, target)
    inner_cdf = chunks.gather(1, c[:, :, None].expand(-1, -1, chunk))[:, 0].cumsum(-1)   # (B, chunk)
    mass_before = chunk_cdf.gather(1, c) - inner_cdf[:, -1:]
    return (c * chunk + search(inner_cdf, target - mass_before))[:, 0]
