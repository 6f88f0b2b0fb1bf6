"""Sampled responses as the RL trainer takes them, from the groups that survived to the rows it
trains on. mini_batches_of deals the surviving groups of all ranks into mini-batches in stream
order; training_sequences makes each response a TrainSeq, with what the loss needs of it (its
group's advantage A, whether it is fully correct, its old logprobs); row_tensors turns a packed row
of them, in a layout (the token ids, positions and documents of the row, and for each response
token t its target and the position whose hidden state predicts it, the token before t), into
tensors; hidden_at_targets runs the policy on them and keeps the hidden states at those positions,
one per response token, which the loss multiplies by the LM head:
    logits_t = h[logit_positions[t]] @ W_lm^T,   target_t = the response token t
logprob_gap measures |old - engine| logprobs. torch and numpy only:
    batches = mini_batches_of(kept, size=4, limit=32, world=1)   # needs torch.distributed up
    seqs = training_sequences(batches[0], mask_truncated=False)
    tensors = row_tensors(row, layout, device)    # layout: data.shared_prompt_layout(row, share)
    hidden = hidden_at_targets(policy, tensors)   # (N, D), N response tokens in the row
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist


@dataclass
class TrainSeq:
    """One sampled response as a training sequence."""

    # fmt: off
    ids: list                # prompt + response token ids
    prompt_len: int
    group: int               # its prompt's stream position: responses of one group share the prompt in a row
    advantage: float         # its group advantage, the same for each of its tokens
    correct: bool            # fully correct: its tokens are the SFT term's
    engine_logprobs: list    # per response token, the sampler's logprob
    old_logprobs: list       # per response token, the trainer's (recomputed before the updates; until then the engine's)
    # fmt: on

    @property
    def response_len(self) -> int:
        return len(self.ids) - self.prompt_len


def mini_batches_of(kept: list, size: int, limit: int, world: int) -> list:
    """The surviving groups of all ranks (objects with a .position in the prompt stream) in
    mini-batches of `size` groups (the last may be partial), in stream order, at most `limit` in
    all: per mini-batch, this rank's groups (only positions travel between the ranks)."""
    positions = [None] * world
    dist.all_gather_object(positions, [g.position for g in kept])
    used = sorted(p for ps in positions for p in ps)[:limit]
    mine = {g.position: g for g in kept}
    return [[mine[p] for p in used[i : i + size] if p in mine] for i in range(0, len(used), size)]


def training_sequences(groups: list, mask_truncated: bool) -> list:
    """Every response of these groups (each with .position, .task["prompt_ids"], .samples,
    .advantages, .correct) as a TrainSeq; empty ones, and with mask_truncated those cut at the
    length limit, left out. The old logprobs start as the engine's."""
    return [
        TrainSeq(
            g.task["prompt_ids"] + s.token_ids,
            len(g.task["prompt_ids"]),
            g.position,
            advantage,
            correct,
            s.logprobs,
            s.logprobs,
        )
        for g in groups
        for s, advantage, correct in zip(g.samples, g.advantages.tolist(), g.correct)
        if s.token_ids and not (mask_truncated and s.finish_reason == "length")
    ]


def logprob_gap(seqs: list) -> dict:
    """|old - engine| logprob over every response token of these TrainSeqs: its sum, the token
    count and its max (a check of the engine, which should sample what the trainer scores)."""
    gaps = [np.abs(np.asarray(s.old_logprobs) - np.asarray(s.engine_logprobs)) for s in seqs]
    return dict(
        gap_sum=sum(float(g.sum()) for g in gaps),
        gap_tokens=sum(len(g) for g in gaps),
        gap_max=max((float(g.max()) for g in gaps if len(g)), default=0.0),
    )


def row_tensors(row, layout: dict | None, device) -> dict:
    """One row of TrainSeqs as tensors: its layout (input_ids, position_ids, document_ids (1, T),
    kept on the CPU, prefix_docs; per response token logit_positions and targets), then per
    response token its old logprob, advantage and SFT flag; num_tokens (host). row None: a dummy
    row of 2 tokens that adds nothing (what a rank without rows runs, to keep the ranks in step)."""
    if row is None:
        zeros = torch.zeros((1, 2), dtype=torch.long, device=device)
        one = torch.zeros(1, device=device)
        return dict(
            input_ids=zeros,
            position_ids=zeros,
            document_ids=zeros.cpu(),
            prefix_docs=None,
            logit_positions=one.long(),
            targets=one.long(),
            old=one,
            adv=one,
            sft=one,
            num_tokens=0,
        )

    def tensor(values):
        return torch.tensor(values, device=device)

    return dict(
        input_ids=tensor([layout["input_ids"]]),
        position_ids=tensor([layout["position_ids"]]),
        document_ids=torch.tensor([layout["document_ids"]]),
        prefix_docs=[layout["prefix_docs"]],
        logit_positions=tensor(layout["logit_positions"]),
        targets=tensor(layout["targets"]),
        old=tensor([v for s in row for v in s.old_logprobs]),
        adv=tensor([s.advantage for s in row for _ in range(s.response_len)]),
        sft=tensor([float(s.correct) for s in row for _ in range(s.response_len)]),
        num_tokens=len(layout["targets"]),
    )


def hidden_at_targets(policy, tensors: dict):
    """The final hidden state before each response token of a row (row_tensors): (N, D)."""
    hidden = policy(
        tensors["input_ids"],
        position_ids=tensors["position_ids"],
        document_ids=tensors["document_ids"],
        prefix_docs=tensors["prefix_docs"],
        return_hidden=True,
    )
    return hidden[0, tensors["logit_positions"]]
