"""Continuous batching's bookkeeping for a paged KV cache: which sequences run, which wait, which blocks each owns.

A pool of num_blocks blocks of block_size tokens; a sequence owns a block table (a list of block ids), and its
token t lives in slot  block_table[t // block_size] * block_size + t % block_size.  Blocks are reference-counted:
the n samples of a prompt share its blocks (prefilled once), and a shared last block is copied on its first write.

Each step is a prefill (Scheduler.admit: waiting groups while sequences, tokens and blocks allow) or a decode
(Scheduler.decode_slots: one more slot for every running sequence; out of blocks, the youngest is preempted: its
blocks freed, it waits at the head of the queue and is later recomputed from its prompt and its tokens so far).
DeviceBlockTables mirrors the running sequences' tables on a device, changed only where an entry changes.

A sequence here is any object with token_ids (a list), block_table (a list, filled here), finish_reason (None
while it runs), preempted (bool), and prefix_id, prefix_blocks, row (set here). No tensors but the device tables;
torch only (rollout.py's engine is the caller):
    scheduler = Scheduler(BlockManager(num_blocks=64, block_size=16), max_num_seqs=8, max_num_batched_tokens=512)
    scheduler.start(groups)                     # groups: lists of sequences, a prompt's samples each
    while scheduler.busy:
        admitted = scheduler.admit()            # a prefill step for these groups, or (empty) a decode step:
        plan = scheduler.decode_slots() if not admitted else None
        ...                                     # run the model, append tokens, finish(seq) the finished ones
        scheduler.drop_finished()
"""
from collections import deque
from dataclasses import dataclass

import torch


class BlockManager:
    """Free list and reference counts of the pool's blocks. Pure bookkeeping: the tensors live with the caller."""

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
            src = seq.block_table[-1]
            dst = self.allocate()
            self.ref_counts[src] -= 1                       # the other owners keep src as it is
            seq.block_table[-1] = dst
            copy = (src, dst)
        return seq.block_table[index] * self.block_size + offset, copy


@dataclass
class DecodePlan:
    """What a decode step needs from the bookkeeping (the running sequences are Scheduler.running, oldest first)."""
    slots: list        # the slot of each running sequence's last token, where its K/V goes
    copies: list       # (src, dst) blocks to copy before the step writes (copy-on-write)
    changed: list      # sequences whose last block is new or a new private copy
    preempted: list    # sequences preempted by this step (their blocks freed; waiting again)


class Scheduler:
    """First come, first served, a prompt's samples together. max_num_seqs: sequences decoded together;
    max_num_batched_tokens: the tokens a prefill step adds to its first group; watermark: the blocks a group must
    leave free to join running sequences (else the youngest is preempted again within a few steps and recomputed
    again: a pool too small for the batch thrashes)."""

    def __init__(self, blocks: BlockManager, max_num_seqs: int, max_num_batched_tokens: int, watermark: int = 0):
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.watermark = watermark
        self.waiting = deque()     # groups of sequences, a preempted one alone, first in line at the left
        self.running = []          # oldest first: the last one is preempted first
        self.num_prefixes = 0      # prefix ids handed out (a group's samples share one)

    def start(self, groups: list) -> None:
        self.waiting = deque(list(group) for group in groups)
        self.running = []
        self.blocks.peak_used = 0

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self) -> list:
        """Take waiting groups while sequences, tokens and blocks allow, give each its blocks (the samples of a
        group share their prompt's) and start running them; returns them (empty: this step decodes). An idle engine
        always takes the head group (it fits: the pool holds one full-length sequence). A group longer than the
        token budget (a preempted sequence recomputed) is a step's only group, admitted once its blocks are free."""
        admitted = []
        num_seqs = len(self.running)
        num_tokens = 0
        free = self.blocks.num_free
        while self.waiting:
            group = self.waiting[0]
            need = self.blocks.blocks_for(len(group[0].token_ids))
            over_budget = num_tokens + len(group[0].token_ids) > self.max_num_batched_tokens
            too_many = num_seqs + len(group) > self.max_num_seqs
            too_big = need + len(group) + self.watermark > free   # + one block per sample for its first decode
            if (admitted and over_budget) or (admitted or self.running) and (too_many or too_big):
                break
            admitted.append(self.waiting.popleft())
            num_seqs += len(group)
            num_tokens += len(group[0].token_ids)
            free -= need
        for group in admitted:
            self._give_blocks(group)
            self.running += group
        return admitted

    def _give_blocks(self, group: list) -> None:
        lead = group[0]
        num_tokens = len(lead.token_ids)
        lead.block_table = [self.blocks.allocate() for _ in range(self.blocks.blocks_for(num_tokens))]
        for seq in group[1:]:
            seq.block_table = self.blocks.share(lead.block_table)
        self.num_prefixes += 1
        for seq in group:   # the prompt's full blocks are never written again: shared for good
            seq.prefix_id = self.num_prefixes
            seq.prefix_blocks = num_tokens // self.blocks.block_size

    def decode_slots(self) -> DecodePlan:
        """One more token's slot for every running sequence, oldest first; when a block is needed and none is free,
        preempt the youngest (if it is the sequence itself, the loop ends; else that sequence tries again)."""
        plan = DecodePlan([], [], [], [])
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            blocks_before = len(seq.block_table)
            appended = self.blocks.append(seq)
            if appended is None:
                victim = self.running.pop()
                self.blocks.release(victim)
                victim.preempted = True
                self.waiting.appendleft([victim])   # recomputed first when blocks free up
                plan.preempted.append(victim)
                continue
            slot, copy = appended
            plan.slots.append(slot)
            if copy:
                plan.copies.append(copy)
            if copy or len(seq.block_table) != blocks_before:
                plan.changed.append(seq)
            i += 1
        return plan

    def finish(self, seq) -> None:
        """A finished sequence gives its blocks back at once, for the waiting ones."""
        self.blocks.release(seq)

    def drop_finished(self) -> None:
        self.running = [seq for seq in self.running if seq.finish_reason is None]


class DeviceBlockTables:
    """The running sequences' block tables as one (max_num_seqs, blocks_per_seq) int32 tensor on the engine's
    device, a row per sequence, changed only where an entry changes (a sequence's blocks when it is admitted, a new or
    copied last block), in one copy per step: not rebuilt from Python lists each step. Unused entries hold the
    scratch block (a valid id; the context length masks it)."""

    def __init__(self, rows: int, width: int, scratch: int, device):
        self.table = torch.full((rows, width), scratch, dtype=torch.int32, device=device)
        self.reset()

    def reset(self) -> None:
        self.free_rows = list(range(len(self.table)))[::-1]
        self.pending = {}   # (row, column) -> block, written at the next gather

    def admit(self, seq) -> None:
        seq.row = self.free_rows.pop()
        for column in range(len(seq.block_table)):
            self.update(seq, column)

    def update(self, seq, column: int) -> None:
        self.pending[seq.row, column] = seq.block_table[column]   # a row freed and reused: the last write wins

    def free(self, seq) -> None:
        if seq.row >= 0:
            self.free_rows.append(seq.row)
            seq.row = -1

    def gather(self, rows: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """The tables of these rows (B,), their first `width` columns (None: all) -> (B, width) int32."""
        if self.pending:
            positions = list(self.pending)
            rows_cols_blocks = [[r for r, _ in positions], [c for _, c in positions], list(self.pending.values())]
            index = torch.tensor(rows_cols_blocks, device=self.table.device)
            self.table[index[0], index[1]] = index[2].int()
            self.pending = {}
        return (self.table if width is None else self.table[:, :width]).index_select(0, rows)
