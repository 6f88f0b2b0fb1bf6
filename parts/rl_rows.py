"""A row of sampled responses as the RL trainer takes it. TrainSeq is one response with what the loss
needs of it (its group's advantage A, whether it is fully correct, its old logprobs); row_tensors
turns a row of them, packed in a layout (the token ids, positions and documents of the row, and for
each response token t its target and the position whose hidden state predicts it, the token
before t), into tensors; hidden_at_targets runs the policy on them and keeps the hidden states at
those positions, one per response token, which the loss multiplies by the LM head:
    logits_t = h[logit_positions[t]] @ W_lm^T,   target_t = the response token t
torch only:
    tensors = row_tensors(row, layout, device)    # layout: data.shared_prompt_layout(row, share)
    hidden = hidden_at_targets(policy, tensors)   # (N, D), N response tokens in the row
"""

from dataclasses import dataclass

import torch


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
