"""Sampling from logits, each row by its own settings and at its own uniform u:
    p = softmax(keep_top_k_top_p(logits / T)),   token = the first whose running mass of p > u,
    logprob = log p[token]            (temperature 0: the argmax, log_softmax(logits)[argmax])
so a row's token depends only on its logits and its u (rollout.py draws u from each sample's own
seeded stream), and its logprob is that of the distribution it was actually drawn from.
torch only:
    settings = [SimpleNamespace(temperature=1.0, top_k=0, top_p=0.9)] * B
    tokens, logprobs = sample(logits, settings, uniforms)      # logits (B, V) fp32, uniforms (B,)
"""

import torch
import torch.nn.functional as F


def sample(logits, params: list, uniforms: list):
    """logits (B, V) fp32 -> tokens (B,), logprobs (B,): row i drawn from
    softmax(keep_top_k_top_p(logits_i / T_i)) by inverse CDF at uniforms[i] (from row i's own
    stream, so a row's draw depends only on its seed)."""
    V = logits.shape[-1]
    dev = logits.device
    greedy = [p.temperature == 0 for p in params]
    temperature = [1.0 if g else p.temperature for g, p in zip(greedy, params)]
    top_k = [V if g or p.top_k == 0 else min(p.top_k, V) for g, p in zip(greedy, params)]
    top_p = [1.0 if g else p.top_p for g, p in zip(greedy, params)]
    if any(t != 1.0 for t in temperature):
        logits = logits / torch.tensor(temperature, device=dev)[:, None]
    if min(top_k) < V or min(top_p) < 1:
        top_k = torch.tensor(top_k, device=dev)
        top_p = torch.tensor(top_p, device=dev)
        logits = keep_top_k_top_p(logits, top_k, top_p)
    logprobs = torch.log_softmax(logits, dim=-1)  # (B, V)
    u = torch.tensor(uniforms, dtype=logprobs.dtype, device=dev)
    tokens = inverse_cdf(logprobs.exp(), u)
    if any(greedy):
        tokens = torch.where(torch.tensor(greedy, device=dev), logits.argmax(dim=-1), tokens)
    return tokens, logprobs.gather(1, tokens[:, None])[:, 0]


def keep_top_k_top_p(logits, top_k, top_p):
    """logits (B, V); top_k (B,) in 1..V; top_p (B,) in (0, 1] -> logits with the dropped tokens
    at -inf. Top-k first, then the nucleus of what is left: a token is kept iff the mass ranked
    above it is < top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)
    sorted_logits = sorted_logits.masked_fill(ranks >= top_k[:, None], float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs
    outside = (mass_above >= top_p[:, None]) & (top_p[:, None] < 1)
    sorted_logits = sorted_logits.masked_fill(outside, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def inverse_cdf(probs, u, chunk: int = 64):
    """probs (B, V) >= 0, not all 0 per row; u (B,) in [0, 1] -> (B,) the token where the running
    mass first exceeds u * total, never a zero-probability one (even when u * total rounds up to
    the total). Two levels (the chunk of `chunk` tokens, then the token in it), so the sequential
    cumsums cover V/chunk + chunk entries per row, not V."""
    B, V = probs.shape
    chunks = F.pad(probs, (0, -V % chunk)).view(B, -1, chunk)  # (B, V/chunk, chunk)

    def search(cdf, target):  # first index with cdf > target, target kept below the last entry
        target = torch.minimum(target, cdf[:, -1:].nextafter(torch.zeros_like(cdf[:, -1:])))
        return torch.searchsorted(cdf, target.clamp(min=0), right=True)  # (B, 1)

    chunk_cdf = chunks.sum(-1).cumsum(-1)  # (B, V/chunk)
    target = u[:, None] * chunk_cdf[:, -1:]
    c = search(chunk_cdf, target)
    inner_cdf = chunks.gather(1, c[:, :, None].expand(-1, -1, chunk))[:, 0].cumsum(-1)  # (B, chunk)
    mass_before = chunk_cdf.gather(1, c) - inner_cdf[:, -1:]
    return (c * chunk + search(inner_cdf, target - mass_before))[:, 0]
