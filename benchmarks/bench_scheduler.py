"""The engine's scheduler on the paper's rollout, per rank, with the network stubbed out: how many
decode steps a pool of a given size takes, how full the batches are, how often sequences are
preempted and how many tokens are computed again, against the ideal of a pool that never preempts.

The workload (the paper's RL rollout on 8 GPUs: 128 prompts x 8 responses, so 16 prompts x 8 = 128
sequences per rank, prompts of up to 4,096 and responses of up to 32,768 tokens), at 1/scale of its
lengths:
  - prompt lengths uniform in [128, 1024] tokens;
  - response lengths log-normal, median 9,000 tokens, sigma 0.9 (mean 12.0K once cut; 7.6% reach the 32,768 limit
    and are cut there), drawn per sample;
  - lengths, the pool, the token budget (16,384) and max_model_len (36,864) all divided by `scale` (16 by default:
    responses of up to 2,048 tokens), blocks of 16 tokens.
An 8B decode step reads all weights whatever the batch (bandwidth-bound), so decode steps stand for
time; a prefill step is counted apart (its cost grows with its tokens, which are printed).

The stub: the next token is a function of the current one, and LLMEngine runs as it does on a GPU
(rollout.py's _prefill, _decode, sample(); parts/scheduler.py's admit, BlockManager, preemption; the
Triton path's device block tables, without launching a kernel). The prompt ends with a START token
whose logits are the log-probabilities of the response lengths: each sample draws its own from its
seeded stream (temperature 1). A token k > 0 is followed by k - 1 and 0 is the stop token, so the
response is k, k - 1, ..., 1, 0: k + 1 tokens. The logits of a token k are 2000 at k - 1 (two
coordinates of a one-hot code agree) and at most 1000 elsewhere, so its successor has probability 1
in fp32.

Pools, in sequences of max_model_len tokens per rank (Qwen3-8B, 8 x H100 80 GB;
tools/memory_plan.py): 3.5 was 0.3 of the memory free at start, 9.0 is what is free during rollout
with the engine freed while training.

Run:  python benchmarks/bench_scheduler.py                      # scale 16, pools 3.5 and 9.0 and the ideal
      python benchmarks/bench_scheduler.py --scale=64 --pools=9.0 --prompts=4
"""

import math
import os
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from parts.cli import parse_config  # noqa: E402
import rollout  # noqa: E402
from rollout import LLMEngine, SamplingParams  # noqa: E402


@dataclass
class SchedulerBenchConfig:
    # fmt: off
    scale: int = 16                  # lengths, pool and budget divided by this
    prompts: int = 16                # prompts per rank (the paper: 128 over 8 GPUs)
    samples: int = 8                 # responses per prompt
    prompt_min: int = 128            # prompt tokens, uniform (real scale)
    prompt_max: int = 1024
    median_response: float = 9000.0  # response tokens: log-normal (real scale), cut at max_response
    sigma: float = 0.9
    max_response: int = 32768
    max_prompt: int = 4096           # max_model_len = max_prompt + max_response
    batched_tokens: int = 16384      # the engine's max_num_batched_tokens (real scale)
    max_num_seqs: int = 256          # as gppo.py builds the engine
    pools: str = "3.5,9.0"           # KV pools to run, in sequences of max_model_len tokens; the ideal is added
    admit_watermark: float = 0.2     # the engine's: share of the pool a group must leave free to join running ones
    seed: int = 0
    # fmt: on


# ----------------------------------------------------------------------------- the stub network


class CountdownModel(torch.nn.Module):
    """What LLMEngine needs of a model (config, rotary.reserve, parameters, forward -> hidden,
    lm_head), whose next token follows from the current one alone. Tokens: 0 (stop), 1..limit (a
    countdown), START, FILL (prompt filler). hidden = a table row per token; logits = hidden @
    lm_head.weight.T (rollout's logits_fp32)."""

    def __init__(self, limit: int, first_token_logprobs: torch.Tensor, max_model_len: int):
        super().__init__()
        self.start = limit + 1
        self.fill = limit + 2
        V = limit + 3
        # token v < S*S has the code (v // S, v % S), two one-hots
        S = math.isqrt(limit) + 1
        D = 2 * S + 1  # the last coordinate carries the START row
        self.config = SimpleNamespace(
            vocab_size=V,
            max_position_embeddings=max_model_len,
            num_hidden_layers=1,
            num_key_value_heads=1,
            num_attention_heads=1,
            head_dim=1,
            hidden_size=D,
            intermediate_size=1,
        )
        self.rotary = SimpleNamespace(reserve=lambda n: None)
        code = torch.zeros(V, D)
        v = torch.arange(limit + 1)
        code[v, v // S] = 1.0
        code[v, S + v % S] = 1.0
        self.lm_head = torch.nn.Linear(D, V, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(code)
            # START row: only lengths
            self.lm_head.weight[:, -1] = -1e4
            self.lm_head.weight[: limit + 1, -1] = first_token_logprobs
        table = torch.zeros(V, D)
        # token k -> logits peak at k - 1
        table[1 : limit + 1] = 1000.0 * code[:limit]
        table[self.start, -1] = 1.0
        self.register_buffer("table", table)

    def forward(self, input_ids, position_ids=None, kv_cache=None, return_hidden=True):
        return self.table[input_ids]  # (1, N, D)


def first_token_logprobs(cfg: SchedulerBenchConfig, limit: int) -> torch.Tensor:
    """log P(first token = k), k = 0..limit: a response of k + 1 tokens (at this scale); the tail
    beyond the limit is put on k = limit (cut at max_tokens = limit)."""
    mu = math.log(cfg.median_response / cfg.scale)
    sigma = cfg.sigma
    cdf = lambda x: 0.5 * math.erfc(-(math.log(x) - mu) / (sigma * math.sqrt(2)))  # noqa: E731
    edges = [cdf(n + 0.5) for n in range(1, limit + 1)]  # P(length <= n + 1/2), n = 1..limit
    probs = [edges[0]] + [b - a for a, b in zip(edges, edges[1:])] + [1 - edges[-1]]
    return torch.tensor(probs).clamp(min=1e-30).log()


def workload(cfg: SchedulerBenchConfig, model: CountdownModel) -> list:
    gen = torch.Generator().manual_seed(cfg.seed)
    lo = cfg.prompt_min // cfg.scale
    hi = cfg.prompt_max // cfg.scale
    lengths = torch.randint(max(1, lo), max(lo, hi) + 1, (cfg.prompts,), generator=gen).tolist()
    return [[model.fill] * (n - 1) + [model.start] for n in lengths]


# ----------------------------------------------------------------------------- one run


def run(cfg: SchedulerBenchConfig, model, prompts, pool_seqs: float | None) -> dict:
    """Generate the workload with a pool of pool_seqs sequences of max_model_len tokens (None: never
    preempts)."""
    max_model_len = (cfg.max_prompt + cfg.max_response) // cfg.scale
    blocks_per_seq = -(-max_model_len // 16)
    total = cfg.prompts * cfg.samples
    num_blocks = (
        total * blocks_per_seq if pool_seqs is None else int(pool_seqs * max_model_len) // 16
    )
    engine = LLMEngine(
        model,
        max_num_seqs=cfg.max_num_seqs,
        max_model_len=max_model_len,
        num_blocks=num_blocks,
        block_size=16,
        max_num_batched_tokens=cfg.batched_tokens // cfg.scale,
        admit_watermark=cfg.admit_watermark,
        use_triton=rollout.triton is not None,
        cuda_graphs=False,
        cpu_kernel=False,
    )
    params = [
        SamplingParams(
            temperature=1.0,
            max_tokens=cfg.max_response // cfg.scale,
            n=cfg.samples,
            seed=i,
            stop_token_ids=(0,),
        )
        for i in range(len(prompts))
    ]
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    s = engine.stats
    generated = sum(len(x.token_ids) for o in outs for x in o)
    # the KV token-steps the responses occupy over their lives (a sequence of prompt p and response
    # r holds p + t tokens at its t-th step): no pool of C tokens decodes them in fewer than
    # occupancy / C steps
    occupancy = sum(
        len(p) * len(x.token_ids) + len(x.token_ids) ** 2 / 2
        for p, o in zip(prompts, outs)
        for x in o
    )
    cut = sum(x.finish_reason == "length" for o in outs for x in o)
    decode_steps = s.steps - s.prefill_steps
    return dict(
        pool="never preempts" if pool_seqs is None else f"{pool_seqs:g} seqs",
        blocks=num_blocks,
        decode_steps=decode_steps,
        prefill_steps=s.prefill_steps,
        prefill_tokens=s.prefill_tokens + s.recompute_tokens,
        mean_batch=s.decode_tokens / max(1, decode_steps),
        preemptions=s.preemptions,
        recomputed=s.recompute_tokens / max(1, generated),
        generated=generated,
        mean_response=generated / total,
        cut=cut / total,
        seconds=time.perf_counter() - start,
        bound=occupancy / (num_blocks * 16),
    )


def main(cfg: SchedulerBenchConfig):
    limit = cfg.max_response // cfg.scale
    model = CountdownModel(
        limit, first_token_logprobs(cfg, limit), (cfg.max_prompt + cfg.max_response) // cfg.scale
    )
    prompts = workload(cfg, model)
    print(
        f"bench_scheduler: {cfg.prompts} prompts x {cfg.samples} samples per rank at 1/{cfg.scale} of the lengths "
        f"(responses <= {limit}, max_model_len {(cfg.max_prompt + cfg.max_response) // cfg.scale}, token budget "
        f"{cfg.batched_tokens // cfg.scale}, admit_watermark {cfg.admit_watermark:g}); response lengths "
        f"log-normal, median {cfg.median_response:g} sigma {cfg.sigma:g} (real scale)"
    )
    ideal = run(cfg, model, prompts, None)
    rows = [run(cfg, model, prompts, float(p)) for p in cfg.pools.split(",") if p] + [ideal]
    print(
        f"mean response {ideal['mean_response']:.0f} tokens ({ideal['mean_response'] * cfg.scale:.0f} real), "
        f"{ideal['cut']:.1%} cut at the limit\n"
    )
    print(
        f"{'pool':>15s} {'blocks':>7s} {'decode steps':>12s} {'x ideal':>7s} {'bound':>6s} {'mean batch':>10s} "
        f"{'preempted':>9s} {'recomputed':>10s} {'prefill steps':>13s} {'prefill tokens':>14s} {'wall s':>7s}"
    )
    for r in rows:
        bound = max(r["bound"], ideal["decode_steps"]) / ideal["decode_steps"]
        print(
            f"{r['pool']:>15s} {r['blocks']:>7d} {r['decode_steps']:>12d} "
            f"{r['decode_steps'] / ideal['decode_steps']:>7.2f} {bound:>6.2f} {r['mean_batch']:>10.1f} "
            f"{r['preemptions']:>9d} {r['recomputed']:>10.1%} {r['prefill_steps']:>13d} {r['prefill_tokens']:>14d} "
            f"{r['seconds']:>7.1f}"
        )
    print(
        "\nrecomputed: tokens prefilled again after a preemption / tokens generated. bound: the fewest decode steps "
        "any scheduler needs with this pool (the KV token-steps of the responses / the pool's tokens), x ideal. "
        "Goal: <= 1.2x the ideal's decode steps, <= 10% recomputed."
    )
    return rows


if __name__ == "__main__":
    main(parse_config(SchedulerBenchConfig))
