"""A paged-KV-cache generation engine for RL rollouts and evaluation (after nano-vllm), four ideas:
  1. continuous batching: each step is a prefill (waiting prompts, all their tokens at once) or a
     decode (one token for every running sequence), flattened into one row; out of blocks, the
     youngest sequence is preempted and later recomputed (the bookkeeping: parts/scheduler.py);
  2. a paged KV cache (the pools and their size: parts/kv_cache.py): token t of a sequence lives
     in slot   block_table[t // block_size] * block_size + t % block_size
     of its layer's pool; the n samples of a prompt share its blocks (a shared one copied on write);
  3. attention on pages: causal inside each new sequence, then one query per sequence against its
     blocks, by the decode backend chosen once at start (parts/decode_kernels.py: the formula,
     paged_decode_reference, and on CPU a C++ kernel or PyTorch ops; on CUDA Triton, where a
     decode step replays a CUDA graph: parts/cuda_graphs.py);
  4. sampling (parts/sampling.py), each sample from its own seeded stream, with the logprobs of the
     distribution sampled from:   p = softmax(keep_top_k_top_p(logits / T)),  logprob = log p[token]
The engine holds the trainer's model itself and no KV cache between generate() calls, so after an
in-place weight update the next call sees the new weights. docs/engine.md: the design, and what
vLLM does that this does not.
    engine = LLMEngine(model, max_num_seqs=256, max_model_len=4096)
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=1.0, max_tokens=64, n=8, seed=0))
    python eval.py --model=CKPT_DIR --prompt="What is 17 * 23?" --k=2      # on a checkpoint
"""

import itertools
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from model import logits_fp32
from parts import norm_kernels
from parts.cuda_graphs import DeviceDecode
from parts.decode_kernels import CPU_KERNEL_HEAD_DIMS, CascadeDecode, CpuKernelDecode
from parts.decode_kernels import load_cpu_kernel, paged_decode_triton, triton
from parts.kv_cache import PagedKVCache, free_memory, kv_block_bytes, kv_cache_blocks
from parts.memory_plan import rollout_margin
from parts.sampling import sample
from parts.scheduler import BlockManager, Scheduler, Sequence


# ----------------------------------------------------------------------------- config


def _is_int(x) -> bool:
    # True is an int to Python, not a count or a token id
    return isinstance(x, int) and not isinstance(x, bool)


# a check of the user's input in one line; message: what is wrong, what to do
def _require(ok, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass
class SamplingParams:
    # fmt: off
    temperature: float = 1.0        # 0 = greedy
    top_p: float = 1.0              # keep a token iff the mass of the tokens ranked above it is < top_p
    top_k: int = 0                  # keep the k most likely tokens (0 = all)
    max_tokens: int = 256           # new tokens per sample (fewer if max_model_len is reached first)
    n: int = 1                      # samples per prompt; they share the prompt's KV blocks
    stop_token_ids: tuple = ()      # finish ("stop") after sampling one of these; it is kept in the output
    seed: int | None = None         # None: drawn from torch's global RNG (so torch.manual_seed fixes it)
    # fmt: on

    def __post_init__(self):
        def check(name, ok, why):
            _require(ok, f"SamplingParams.{name}={getattr(self, name)!r}: {why}")

        t = self.temperature
        p = self.top_p
        check(
            "temperature",
            isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0,
            "must be a finite number >= 0 (0 means greedy)",
        )
        check(
            "top_p",
            isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 1,
            "must be in (0, 1]",
        )
        check(
            "top_k",
            _is_int(self.top_k) and self.top_k >= 0,
            "must be an int >= 0 (0 disables top-k)",
        )
        check(
            "max_tokens", _is_int(self.max_tokens) and self.max_tokens >= 1, "must be an int >= 1"
        )
        check("n", _is_int(self.n) and self.n >= 1, "must be an int >= 1 (samples per prompt)")
        check("seed", self.seed is None or _is_int(self.seed), "must be an int or None")
        check(
            "stop_token_ids",
            not isinstance(self.stop_token_ids, (str, bytes))
            and all(_is_int(i) and i >= 0 for i in self.stop_token_ids),
            "must be a sequence of non-negative int token ids",
        )
        self.stop_token_ids = tuple(self.stop_token_ids)


@dataclass
class Sample:
    # fmt: off
    token_ids: list      # the generated tokens (a stop token, if any, is the last one)
    logprobs: list       # logprob of each token under the distribution it was sampled from
    finish_reason: str   # "stop" (a stop token) or "length" (max_tokens or max_model_len)
    # fmt: on


@dataclass
class EngineStats:
    # fmt: off
    prefill_tokens: int = 0      # prompt tokens computed: each unique prompt once, whatever its n
    recompute_tokens: int = 0    # tokens computed again after a preemption
    decode_tokens: int = 0       # tokens computed one at a time in decode steps
    preemptions: int = 0
    peak_blocks_used: int = 0
    steps: int = 0               # prefill and decode steps
    prefill_steps: int = 0
    # fmt: on


# --------------------------------------------------------------- 1. the engine: continuous batching


class LLMEngine:
    """The model (the trainer's, not a copy; generation runs on its device), the KV pool, the
    scheduler (parts/scheduler.py) and the decode backend, chosen once here (choose_decode).
    max_num_seqs: sequences decoded together; max_model_len: prompt + output tokens of a sequence
    (None: the model's max_position_embeddings); num_blocks, kv_cache_memory: the pool's size in
    blocks, or in bytes (both None: the device's default; see pool_blocks). admit_watermark: the
    share of the pool a group must leave free to join running sequences. use_triton, cpu_kernel,
    cuda_graphs, fused_norms: see choose_decode (None: the device's)."""

    def __init__(
        self,
        model,
        *,
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
        num_blocks: int | None = None,
        block_size: int = 16,
        max_num_batched_tokens: int = 16384,
        kv_cache_memory=None,
        admit_watermark: float = 0.2,
        use_triton: bool | None = None,
        cpu_kernel: bool | None = None,
        cuda_graphs: bool | None = None,
        fused_norms: bool | None = None,
    ):
        param = next(model.parameters())
        self.model = model
        self.device = param.device
        self.dtype = param.dtype
        if max_model_len is None:
            max_model_len = model.config.max_position_embeddings
        self.max_model_len = max_model_len
        check_limits(
            max_num_seqs, max_model_len, block_size, max_num_batched_tokens, admit_watermark
        )
        model.rotary.reserve(max_model_len)  # the RoPE table: positions on a GPU need no check
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_size = block_size
        self.admit_watermark = admit_watermark
        self.num_blocks = num_blocks  # the pool's size, or how to find it
        self.kv_cache_memory = kv_cache_memory
        blocks_per_seq = -(-max_model_len // block_size)
        self.decode = choose_decode(
            model, use_triton, cpu_kernel, cuda_graphs, max_num_seqs, blocks_per_seq
        )
        device_decode = isinstance(self.decode, DeviceDecode)
        self.norm_kernels = choose_norm_kernels(model, device_decode, fused_norms)
        self._make_pool(pool_blocks(self), allocate=not sized_when_used(self))
        self.stats = EngineStats()

    def _make_pool(self, num_blocks: int, allocate: bool = True) -> None:
        """A pool of num_blocks blocks (tensors now, or by generate()), its scheduler, decoder."""
        self.cache = PagedKVCache(
            self.model.config,
            num_blocks + self.decode.extra_blocks,
            self.block_size,
            dtype=self.dtype,
            device=self.device,
            kernels=self.norm_kernels,
            allocate=allocate,
        )
        self.decode.new_pool(self.cache, num_blocks)
        self.blocks = BlockManager(num_blocks, self.block_size)
        watermark = int(self.admit_watermark * num_blocks)  # blocks left free for running seqs
        # the scheduler keeps the decode backend's own copy of the block tables, if it has one
        self.scheduler = Scheduler(
            self.blocks,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            watermark,
            mirror=self.decode.tables,
        )

    @torch.inference_mode()
    def generate(
        self, prompt_token_ids: list, params, progress: bool = False, on_finish=None
    ) -> list:
        """prompt_token_ids: a list of prompts (lists of ints); params: a SamplingParams, or one per
        prompt. Returns result[prompt][sample] = Sample(token_ids, logprobs, finish_reason).
        on_finish(prompt, sample, Sample), if given, is called as soon as a sample is finished."""
        groups = make_groups(prompt_token_ids, params, self)
        if self.cache.k_pool is None:  # after a release(): sized again, from the memory free now
            self._make_pool(pool_blocks(self))
        self.decode.start()
        self.scheduler.start(groups)
        self.on_finish = on_finish
        self.stats = EngineStats()
        all_seqs = [seq for g in groups for seq in g]
        t0 = last_print = time.perf_counter()
        try:
            while self.scheduler.busy:
                admitted = self.scheduler.admit()
                if admitted:
                    self._prefill(admitted)
                else:
                    self._decode()
                self.scheduler.drop_finished()
                self.stats.steps += 1
                if progress and (time.perf_counter() - last_print > 2 or not self.scheduler.busy):
                    last_print = time.perf_counter()
                    print_progress(self, all_seqs, last_print - t0)
        finally:  # also on an exception: no block may stay allocated
            for seq in all_seqs:
                self.blocks.release(seq)
        assert self.blocks.num_free == self.blocks.num_blocks, "rollout.py: KV blocks leaked"
        self.stats.peak_blocks_used = self.blocks.peak_used
        return [[result(seq) for seq in g] for g in groups]

    def _prefill(self, groups: list) -> None:
        """Each group's prompt computed once (its samples share its blocks); each sample's first
        token sampled."""
        leads = [group[0] for group in groups]
        recomputed = sum(len(lead) for lead in leads if lead.preempted)
        step = Prefill.of(leads, self.blocks, self.device)
        self.stats.recompute_tokens += recomputed
        self.stats.prefill_tokens += len(step.input_ids) - recomputed
        hidden = self.cache.run(self.model, step, step.input_ids, step.positions)  # (N, D)
        ends = step.cu_seqlens[1:]  # (G,)
        logits = logits_fp32(hidden[[end - 1 for end in ends]], self.model.lm_head.weight)  # (G, V)
        seqs = [seq for group in groups for seq in group]
        self._append_tokens(seqs, logits[[g for g, group in enumerate(groups) for _ in group]])
        self.stats.prefill_steps += 1

    def _decode(self) -> None:
        """One token for every running sequence (the scheduler preempts the youngest if need be)."""
        plan = self.scheduler.decode_slots()
        self.stats.preemptions += plan.preemptions
        running = self.scheduler.running
        if not running:
            return
        self.cache.copy_blocks(plan.copies)  # before the forward writes into the copies
        hidden = self.decode.hidden(running, plan.slots)  # (B, D)
        self.stats.decode_tokens += len(running)
        self._append_tokens(running, logits_fp32(hidden, self.model.lm_head.weight))

    def _append_tokens(self, seqs: list, logits) -> None:
        uniforms = [0.0 if seq.params.temperature == 0 else seq.next_uniform() for seq in seqs]
        tokens, logprobs = sample(logits, [seq.params for seq in seqs], uniforms)
        for seq, token, logprob in zip(seqs, tokens.tolist(), logprobs.tolist()):
            seq.token_ids.append(token)
            seq.logprobs.append(logprob)
            stop = token in seq.params.stop_token_ids
            seq.finish_reason = "stop" if stop else "length" if len(seq) >= seq.max_len else None
            if seq.finish_reason:
                self.scheduler.finish(seq)  # its blocks free at once, for the waiting requests
                if self.on_finish is not None:
                    self.on_finish(*seq.index, result(seq))


def check_limits(
    max_num_seqs, max_model_len, block_size, max_num_batched_tokens, admit_watermark
) -> None:
    """LLMEngine's sizes: positive ints; admit_watermark: a fraction of the pool in [0, 1)."""
    for name, value in (
        ("max_num_seqs", max_num_seqs),
        ("max_model_len", max_model_len),
        ("block_size", block_size),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        _require(
            _is_int(value) and value >= 1,
            f"LLMEngine({name}={value!r}): must be a positive int",
        )
    _require(
        isinstance(admit_watermark, (int, float)) and 0 <= admit_watermark < 1,
        f"LLMEngine(admit_watermark={admit_watermark!r}): must be a fraction of the pool in [0, 1)",
    )


def make_groups(prompt_token_ids, params, engine) -> list:
    """Validate the requests and make, per prompt, its group of n sequences (sharing the prompt)."""
    max_model_len = engine.max_model_len
    vocab_size = engine.model.config.vocab_size
    _require(
        isinstance(prompt_token_ids, (list, tuple)),
        "generate(prompt_token_ids=...): expected a list of prompts, each a list of token ids",
    )
    params = [params] * len(prompt_token_ids) if isinstance(params, SamplingParams) else params
    _require(
        len(params) == len(prompt_token_ids),
        f"generate: {len(params)} SamplingParams for "
        f"{len(prompt_token_ids)} prompts; pass one SamplingParams, or one per prompt",
    )
    groups = []
    for i, (prompt, p) in enumerate(zip(prompt_token_ids, params)):
        where = f"generate: prompt_token_ids[{i}]"
        _require(
            isinstance(p, SamplingParams),
            f"generate: params[{i}] is {type(p).__name__}, expected SamplingParams",
        )
        prompt = prompt.tolist() if isinstance(prompt, torch.Tensor) else prompt
        _require(
            not isinstance(prompt, (str, bytes)) and all(_is_int(t) for t in prompt),
            f"{where}: expected a list of int token ids (tokenize text first)",
        )
        _require(len(prompt) > 0, f"{where} is empty: a prompt needs at least one token")
        _require(
            len(prompt) < max_model_len,
            f"{where} has {len(prompt)} tokens; max_model_len="
            f"{max_model_len} leaves no room for a response (truncate the prompt or raise "
            "max_model_len)",
        )
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        _require(
            not bad,
            f"{where}: token ids {bad[:3]} outside the model's vocabulary [0, {vocab_size})",
        )
        _require(
            p.n <= engine.max_num_seqs,
            f"generate: params[{i}].n={p.n} > max_num_seqs="
            f"{engine.max_num_seqs}; the samples of a prompt are decoded together",
        )
        seed = int(torch.randint(2**62, ())) if p.seed is None else p.seed
        max_len = min(len(prompt) + p.max_tokens, max_model_len)
        groups.append(
            [Sequence(prompt, p, max_len, sample_seed(seed, j), (i, j)) for j in range(p.n)]
        )
    return groups


def result(seq: Sequence) -> Sample:
    return Sample(seq.token_ids[seq.prompt_len :], seq.logprobs, seq.finish_reason)


def sample_seed(request_seed: int, sample_index: int) -> int:
    """Sample j's seed: a function of the request's seed and j alone (not of the batch, the rank or
    preemption)."""
    return (request_seed * 1_000_003 + sample_index) % 2**63


def print_progress(engine, all_seqs: list, elapsed: float) -> None:
    done = sum(seq.finish_reason is not None for seq in all_seqs)
    generated = sum(len(seq) - seq.prompt_len for seq in all_seqs)
    left = sum(seq.max_len - len(seq) for seq in all_seqs if seq.finish_reason is None)
    rate = generated / max(elapsed, 1e-9)
    used = engine.blocks.num_blocks - engine.blocks.num_free
    waiting = sum(len(g) for g in engine.scheduler.waiting)
    print(
        f"rollout: {done}/{len(all_seqs)} samples done | {generated} tokens, {rate:.0f} tok/s | "
        f"running {len(engine.scheduler.running)}, waiting {waiting} | KV blocks {used}/"
        f"{engine.blocks.num_blocks} | preemptions {engine.stats.preemptions} | "
        f"ETA <= {left / max(rate, 1e-9):.0f}s",
        flush=True,
    )


def pool_blocks(engine) -> int:
    """The engine's pool size in blocks now: num_blocks, or what kv_cache_memory holds: bytes, or a
    function returning them, asked whenever the pool is allocated (at start, and at the first
    generate() after a release()), or None: on CUDA the memory then free less rollout_margin (a
    prefill's activations, sampling, CUDA graphs), on CPU 512 MiB or one max_model_len sequence if
    that is more; capped at max_num_seqs full-length sequences."""
    cfg = engine.model.config
    block_bytes = kv_block_bytes(cfg, engine.dtype, engine.block_size)
    blocks_per_seq = -(-engine.max_model_len // engine.block_size)
    num_blocks = engine.num_blocks
    if num_blocks is None:
        memory = engine.kv_cache_memory
        memory = memory() if callable(memory) else memory
        if memory is None and engine.device.type == "cuda":
            margin = rollout_margin(
                cfg,
                engine.dtype.itemsize,
                engine.max_num_seqs,
                engine.max_model_len,
                engine.max_num_batched_tokens,
            )
            memory = free_memory(engine.device) - margin
        elif memory is None:  # ~1 GB for Qwen3-0.6B's 4K tokens, fp32
            memory = max(512 * 2**20, blocks_per_seq * block_bytes)
        num_blocks = kv_cache_blocks(
            cfg, engine.dtype, memory, engine.block_size, engine.max_num_seqs, engine.max_model_len
        )
    _require(
        num_blocks >= blocks_per_seq,
        f"LLMEngine: a pool of {num_blocks} blocks x {engine.block_size} tokens cannot hold "
        f"one sequence of max_model_len={engine.max_model_len} tokens "
        f"({blocks_per_seq} blocks, {block_bytes} bytes each); "
        "raise num_blocks / kv_cache_memory or lower max_model_len",
    )
    return num_blocks


def sized_when_used(engine) -> bool:
    """True if the pool is sized from the memory free, and so allocated by the first generate():
    what the caller allocates before it (say, an optimizer's states read on resume) is then not
    counted in it."""
    memory = engine.kv_cache_memory
    cuda = engine.device.type == "cuda"
    from_free = callable(memory) or (memory is None and cuda)
    return engine.num_blocks is None and from_free


# ---------------------------------------------------------------------------- 3. attention on pages


def choose_decode(
    model, use_triton, cpu_kernel, cuda_graphs, max_num_seqs: int, blocks_per_seq: int
):
    """The decode backend, chosen once. use_triton (None: on CUDA, if triton is installed):
    DeviceDecode, with cuda_graphs (None: on CUDA; True on a CPU runs the same padded buffers
    without capture, what tests compare with the plain step). Else on CPU CpuKernelDecode if
    cpu_kernel allows (None: if the model is fp32 with a supported head_dim and the kernel builds,
    else with a one-line notice; False: never; True: required), else CascadeDecode. Each is one
    object the decode step calls and each attention layer hands its q, k, v to (its methods:
    parts/decode_kernels.py's DecodeBackend)."""
    param = next(model.parameters())
    device = param.device
    if use_triton is None:
        use_triton = device.type == "cuda" and triton is not None
    _require(
        not (use_triton and triton is None), "LLMEngine(use_triton=True): triton is not installed"
    )
    _require(
        not (cpu_kernel and (device.type != "cpu" or use_triton)),
        "LLMEngine(cpu_kernel=True): the C++ kernel is for CPU engines without use_triton",
    )
    graphs = device.type == "cuda" and bool(use_triton) if cuda_graphs is None else cuda_graphs
    _require(
        not (graphs and not use_triton),
        "LLMEngine(cuda_graphs=True): graphs replay the "
        "Triton decode step; pass use_triton=True (on a CPU: with TRITON_INTERPRET=1)",
    )
    if use_triton:
        return DeviceDecode(model, paged_decode_triton, max_num_seqs, blocks_per_seq, graphs)
    if device.type == "cpu" and cpu_kernel is not False:
        head_dim = model.config.head_dim
        fits = param.dtype == torch.float32 and head_dim in CPU_KERNEL_HEAD_DIMS
        _require(
            fits or not cpu_kernel,
            f"LLMEngine(cpu_kernel=True): the CPU kernel takes fp32 "
            f"and head_dim in {CPU_KERNEL_HEAD_DIMS}, not {param.dtype} and {head_dim}",
        )
        if fits and load_cpu_kernel(required=bool(cpu_kernel)) is not None:
            return CpuKernelDecode(model)
    return CascadeDecode(model)


def choose_norm_kernels(model, device_decode: bool, fused_norms):
    """parts/norm_kernels.py if the model's RMSNorms, and its q/k norms with RoPE, run as its
    Triton kernels (the same roundings; fused_norms None: with DeviceDecode on CUDA; True:
    required), else None (eager)."""
    param = next(model.parameters())
    kernels_take = triton is not None and param.dtype in (torch.float32, torch.bfloat16)
    fused = param.device.type == "cuda" and device_decode and kernels_take
    fused = fused if fused_norms is None else fused_norms
    _require(
        not fused or kernels_take,
        f"LLMEngine(fused_norms=True) needs triton and a bf16 or fp32 model, not {param.dtype}",
    )
    return norm_kernels if fused else None


@dataclass
class Prefill:
    """A prefill step: the new sequences' tokens flattened into one row; no cached prefix, so
    causal attention inside each sequence."""

    # fmt: off
    input_ids: torch.Tensor   # (N,) the sequences' tokens, one after another
    positions: torch.Tensor   # (N,) each token's position in its sequence
    slots: torch.Tensor       # (N,) pool slot of each token's K/V
    cu_seqlens: list          # sequence i is tokens cu_seqlens[i]:cu_seqlens[i+1]
    # fmt: on

    @staticmethod
    def of(seqs: list, blocks, device) -> "Prefill":
        """The step of these sequences, each whole (blocks: the BlockManager that gave their
        slots)."""
        ids = [token for seq in seqs for token in seq.token_ids]
        positions = [t for seq in seqs for t in range(len(seq))]
        slots = [blocks.slot(seq, t) for seq in seqs for t in range(len(seq))]
        ends = list(itertools.accumulate(len(seq) for seq in seqs))
        return Prefill(
            torch.tensor(ids, device=device),
            torch.tensor(positions, device=device),
            torch.tensor(slots, device=device),
            [0] + ends,
        )

    def attend(self, cache, layer_idx, q, k, v):  # q (N, Hq, hd), k/v (N, Hkv, hd) -> like q
        cache.write(layer_idx, self.slots, k, v)
        gqa = q.shape[1] != k.shape[1]
        outs = []
        for s, e in zip(self.cu_seqlens[:-1], self.cu_seqlens[1:]):
            qi, ki, vi = (t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # (1, H, T, hd)
            y = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, enable_gqa=gqa)
            outs.append(y[0].transpose(0, 1))
        return torch.cat(outs)
