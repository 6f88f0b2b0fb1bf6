"""Continuous batching's bookkeeping for a paged KV cache: which sequences run, which wait, and
which blocks each one owns.

A pool of num_blocks blocks of block_size tokens; a sequence owns a block table (a list of block
ids), and its token t lives in slot
    block_table[t // block_size] * block_size + t % block_size
Blocks are reference-counted: the n samples of a prompt share its blocks (prefilled once), and a
shared last block is copied on its first write.

Each step is a prefill (Scheduler.admit: waiting groups, while sequences, tokens and blocks allow)
or a decode (Scheduler.decode_slots: one more slot for every running sequence; out of blocks, the
youngest is preempted: its blocks freed, it waits at the head of the queue, and is recomputed from
its prompt and its tokens so far when it comes back).

A Sequence is one sample being generated; it draws its sampling uniforms from its own seeded
stream. torch only (for that stream); rollout.py's engine is the caller:
    scheduler = Scheduler(BlockManager(num_blocks=64, block_size=16), max_num_seqs=8,
                          max_num_batched_tokens=512)
    scheduler.start(groups)                 # groups: lists of Sequences, a prompt's samples each
    while scheduler.busy:
        admitted = scheduler.admit()        # a prefill of these groups, or (if empty) a decode:
        plan = None if admitted else scheduler.decode_slots()
        ...                                 # run the model, append tokens, finish(seq) if done
        scheduler.drop_finished()
"""

from collections import deque
from dataclasses import dataclass

import torch


class Sequence:
    """One sample being generated: prompt + output tokens, its block table and its random stream
    (params: its sampling settings, which the caller reads)."""

    def __init__(self, prompt: list, params, max_len: int, seed: int, index: tuple = (0, 0)):
        self.index = index  # (prompt, sample) in the request
        self.token_ids = list(prompt)  # prompt + generated so far
        self.prompt_len = len(prompt)
        self.params = params
        self.max_len = max_len  # stop with "length" at this many tokens
        # CPU: the stream does not depend on the device
        self.generator = torch.Generator().manual_seed(seed)
        self.uniforms: list[float] = []  # the next uniforms of its stream, last = next
        self.logprobs: list[float] = []
        # block ids holding the KV of token_ids[:-1] (+ the last one's, after a step)
        self.block_table: list[int] = []
        # samples with the same prefix_id share block_table[:prefix_blocks]: the full blocks of
        # the prompt prefilled for them (never written again)
        self.prefix_id = -1
        self.prefix_blocks = 0
        self.finish_reason: str | None = None
        self.preempted = False  # its next prefill is a recomputation
        self.row = -1  # its row of a device block table while it runs

    def __len__(self):
        return len(self.token_ids)

    def next_uniform(self) -> float:
        """The next uniform of its stream (one per sampled token), drawn 64 at a time: one
        generator call per 64 tokens."""
        if not self.uniforms:
            drawn = torch.rand(64, generator=self.generator, dtype=torch.float64)
            self.uniforms = drawn.tolist()[::-1]
        return self.uniforms.pop()


class BlockManager:
    """Free list and reference counts of the pool's blocks. Pure bookkeeping: the tensors live
    with the caller."""

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
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

    def release(self, seq) -> None:
        for block in seq.block_table:
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_ids.append(block)
        seq.block_table = []

    def slot(self, seq, pos: int) -> int:
        return seq.block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def append(self, seq) -> tuple[int, tuple | None] | None:
        """Make the last token's slot writable: a new block if the token starts one, a private
        copy if its block is shared. Returns (slot, (src, dst) block copy or None), or None if that
        needs a block and none is free. (Called for every sequence at every step: the common
        case, neither, costs a few list lookups.)"""
        index, offset = divmod(len(seq.token_ids) - 1, self.block_size)
        copy = None
        if index == len(seq.block_table):
            if not self.free_ids:
                return None
            seq.block_table.append(self.allocate())
        elif self.ref_counts[seq.block_table[-1]] > 1:
            if not self.free_ids:
                return None
            src = seq.block_table[-1]
            dst = self.allocate()
            self.ref_counts[src] -= 1  # the other owners keep src as it is
            seq.block_table[-1] = dst
            copy = (src, dst)
        return seq.block_table[index] * self.block_size + offset, copy


@dataclass
class DecodePlan:
    """What a decode step needs from the bookkeeping (its sequences: Scheduler.running)."""

    # fmt: off
    slots: list            # the slot of each running sequence's last token, where its K/V goes
    copies: list           # (src, dst) blocks to copy before the step writes (copy-on-write)
    preemptions: int = 0   # sequences preempted by this step (their blocks freed; waiting again)
    # fmt: on


class Scheduler:
    """First come, first served, a prompt's samples together. max_num_seqs: sequences decoded
    together; max_num_batched_tokens: the tokens a prefill step adds to its first group;
    watermark: the blocks a group must leave free to join running sequences (else the youngest is
    preempted again within a few steps and recomputed again: a pool too small for the batch
    thrashes). mirror: None, or a copy of the running sequences' block tables kept elsewhere (on
    CUDA, a device tensor: cuda_graphs.DeviceBlockTables), told when a sequence starts running
    (admit), when its last block is new or a private copy (changed), and when it stops (retire)."""

    def __init__(
        self,
        blocks: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        watermark: int = 0,
        mirror=None,
    ):
        self.blocks = blocks
        self.mirror = mirror
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.watermark = watermark
        self.waiting = deque()  # groups of sequences (a preempted one alone), next on the left
        self.running = []  # oldest first: the last one is preempted first
        self.num_prefixes = 0  # prefix ids handed out (a group's samples share one)

    def start(self, groups: list) -> None:
        self.waiting = deque(list(group) for group in groups)
        self.running = []
        self.blocks.peak_used = 0

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self) -> list:
        """Take waiting groups while sequences, tokens and blocks allow, give each its blocks (a
        group's samples share their prompt's) and start running them; returns them (empty: this
        step decodes). An idle engine always takes the head group (it fits: the pool holds one
        full-length sequence). A group longer than the token budget (a preempted sequence
        recomputed) is a step's only group, admitted as soon as its blocks are free."""
        admitted = []
        num_seqs = len(self.running)
        num_tokens = 0
        free = self.blocks.num_free
        while self.waiting:
            group = self.waiting[0]
            need = self.blocks.blocks_for(len(group[0].token_ids))
            over_budget = num_tokens + len(group[0].token_ids) > self.max_num_batched_tokens
            too_many = num_seqs + len(group) > self.max_num_seqs
            # + one block per sample for its first decode step
            too_big = need + len(group) + self.watermark > free
            if (admitted and over_budget) or (admitted or self.running) and (too_many or too_big):
                break
            admitted.append(self.waiting.popleft())
            num_seqs += len(group)
            num_tokens += len(group[0].token_ids)
            free -= need
        for group in admitted:
            self._give_blocks(group)
            self.running += group
            if self.mirror is not None:
                for seq in group:
                    self.mirror.admit(seq)
        return admitted

    def _give_blocks(self, group: list) -> None:
        lead = group[0]
        num_tokens = len(lead.token_ids)
        num_blocks = self.blocks.blocks_for(num_tokens)
        lead.block_table = [self.blocks.allocate() for _ in range(num_blocks)]
        for seq in group[1:]:
            seq.block_table = self.blocks.share(lead.block_table)
        self.num_prefixes += 1
        for seq in group:  # the prompt's full blocks are never written again: shared for good
            seq.prefix_id = self.num_prefixes
            seq.prefix_blocks = num_tokens // self.blocks.block_size

    def decode_slots(self) -> DecodePlan:
        """One more token's slot for every running sequence, oldest first; when a block is needed
        and none is free, preempt the youngest (if it is the sequence itself, the loop ends; else
        that sequence tries again)."""
        plan = DecodePlan([], [])
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            blocks_before = len(seq.block_table)
            appended = self.blocks.append(seq)
            if appended is None:
                victim = self.running.pop()
                self.finish(victim)
                victim.preempted = True
                self.waiting.appendleft([victim])  # recomputed first when blocks free up
                plan.preemptions += 1
                continue
            slot, copy = appended
            plan.slots.append(slot)
            if copy:
                plan.copies.append(copy)
            if (copy or len(seq.block_table) != blocks_before) and self.mirror is not None:
                self.mirror.changed(seq)
            i += 1
        return plan

    def finish(self, seq) -> None:
        """A finished (or preempted) sequence gives its blocks back at once, for the waiting."""
        self.blocks.release(seq)
        if self.mirror is not None:
            self.mirror.retire(seq)

    def drop_finished(self) -> None:
        self.running = [seq for seq in self.running if seq.finish_reason is None]
