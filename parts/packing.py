"""Packing documents into rows for SFT: rows of row_tokens tokens filled by best-fit decreasing
(longest document first, into the row whose free space fits it most tightly), positions restarting
at 0 per document, so that with a mask that never crosses a document
    mask[i, j] = (doc[i] == doc[j]) and (j <= i)
a packed row trains as its documents would alone; the rest of a row is padding, a document of its
own with no loss. PackedLoader serves the rows for distributed training, the same on every rank:
shuffled by (seed, epoch), each step's rows split over the ranks, resumable from its state_dict().
numpy and torch only; sft.py is the caller:
    rows = plan_packing([len(ids) for ids, _ in examples], row_tokens=2048)   # document indices
    loader = PackedLoader(examples, 2048, rows_per_step=8, pad_id=0, rank=0, world_size=2)
    batch = loader.next_step()   # this rank's rows of this step
examples: (input_ids, loss_mask) pairs of numpy arrays (or lists), one per document; a row: a
dict of (row_tokens,) tensors input_ids, loss_mask, position_ids, document_ids.
"""

import bisect

import numpy as np


class PackingError(ValueError):
    """Documents that do not fit a row, or a resume with other data or batch settings: the
    caller's input, said in one line."""


class PackedLoader:
    """Packed rows for SFT, the same on every rank: shuffled by (seed, epoch), each optimizer step
    takes rows_per_step rows, rank r gets the r-th contiguous slice of them. The last step of an
    epoch is filled with all-padding rows (no loss), so every rank runs the same number of steps.
    state_dict() holds the epoch and step, so a restart continues with the next unseen step."""

    def __init__(
        self,
        examples,
        row_tokens: int,
        rows_per_step: int,
        pad_id: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ):
        if rows_per_step % world_size:
            raise ValueError(
                f"rows_per_step={rows_per_step} must be a multiple of world_size={world_size}"
            )
        if not examples:
            raise ValueError("PackedLoader got no examples")
        self.examples = examples
        self.row_tokens = row_tokens
        self.pad_id = pad_id
        self.rows_per_step = rows_per_step
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.rows = plan_packing([len(x) for x, _ in examples], row_tokens)
        self.num_rows = len(self.rows)
        self.steps_per_epoch = -(-self.num_rows // rows_per_step)
        self.empty_rows_per_epoch = self.steps_per_epoch * rows_per_step - self.num_rows
        # real / packed tokens
        self.efficiency = sum(len(x) for x, _ in examples) / (self.num_rows * row_tokens)
        self.epoch = 0
        self.step = 0
        self._order_epoch = None
        self._order = None

    def __len__(self):
        return self.steps_per_epoch

    def _epoch_order(self, epoch: int) -> list:
        if self._order_epoch != epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_rows).tolist()
            self._order = perm + [None] * self.empty_rows_per_epoch
            self._order_epoch = epoch
        return self._order

    def rows_for(self, epoch: int, step: int) -> list:
        """This rank's rows of one step: a list of rows_per_step / world_size dicts of (row_tokens,)
        tensors."""
        per_rank = self.rows_per_step // self.world_size
        start = step * self.rows_per_step + self.rank * per_rank
        picked = self._epoch_order(epoch)[start : start + per_rank]
        rows = [None if r is None else self.rows[r] for r in picked]
        return _build_rows(self.examples, rows, self.row_tokens, self.pad_id)

    def next_step(self) -> list:
        """The rows of the next step, advancing (and wrapping into the next epoch at the end)."""
        rows = self.rows_for(self.epoch, self.step)
        self.step += 1
        if self.step == self.steps_per_epoch:
            self.epoch += 1
            self.step = 0
        return rows

    def state_dict(self) -> dict:
        return dict(
            epoch=self.epoch,
            step=self.step,
            seed=self.seed,
            rows_per_step=self.rows_per_step,
            num_rows=self.num_rows,
        )

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "rows_per_step", "num_rows"):
            if state[key] != getattr(self, key):
                raise PackingError(
                    f"cannot resume: the checkpoint's data loader had {key}={state[key]}, now "
                    f"{getattr(self, key)}; resume with the same data, seed and batch settings"
                )
        self.epoch = int(state["epoch"])
        self.step = int(state["step"])


def pack_examples(examples, row_tokens: int, pad_id: int) -> list:
    """Pack (input_ids, loss_mask) pairs into rows: a list of dicts of (row_tokens,) tensors
    input_ids, loss_mask (bool), position_ids (restart at 0 per document) and document_ids (0, 1,
    ... per row)."""
    return _build_rows(
        examples, plan_packing([len(x) for x, _ in examples], row_tokens), row_tokens, pad_id
    )


def plan_packing(lengths, row_tokens: int) -> list:
    """Best-fit decreasing: longest document first, into the row whose free space fits it most
    tightly. Returns rows as lists of document indices. Deterministic (ties broken by index)."""
    too_long = [i for i, n in enumerate(lengths) if n > row_tokens or n <= 0]
    if too_long:
        i = too_long[0]
        raise PackingError(
            f"{len(too_long)} documents do not fit a row (e.g. #{i}: {lengths[i]} tokens, row_tokens="
            f"{row_tokens}); cut or drop them first (encode_sft_dataset's max_len <= row_tokens)"
        )
    rows = []
    free = []  # sorted (space left, row index)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        j = bisect.bisect_left(free, (lengths[i], -1))  # smallest space that still fits
        if j < len(free):
            space, r = free.pop(j)
        else:
            space = row_tokens
            r = len(rows)
            rows.append([])
        rows[r].append(i)
        if space - lengths[i] > 0:
            bisect.insort(free, (space - lengths[i], r))
    return rows


def _build_rows(examples, rows, row_tokens: int, pad_id: int) -> list:
    """Materialise rows (lists of example indices, or None for an all-padding row): one dict of
    (row_tokens,) tensors per row, views of (B, row_tokens) tensors built at once."""
    B = len(rows)
    ids = np.full((B, row_tokens), pad_id, dtype=np.int64)
    mask = np.zeros((B, row_tokens), dtype=bool)
    pos = np.zeros((B, row_tokens), dtype=np.int64)
    doc = np.zeros((B, row_tokens), dtype=np.int64)
    for b, row in enumerate(rows):
        start = 0  # where the row's next document goes
        for d, i in enumerate(row or []):
            input_ids, loss_mask = examples[i]
            end = start + len(input_ids)
            ids[b, start:end] = input_ids
            mask[b, start:end] = loss_mask
            pos[b, start:end] = np.arange(end - start)
            doc[b, start:end] = d
            start = end
        pos[b, start:] = np.arange(row_tokens - start)  # padding: one more document of its own
        doc[b, start:] = len(row or [])
    import torch  # here, not at the top: planning rows (tools/data_stats.py) needs no torch

    batch = dict(
        input_ids=torch.from_numpy(ids),
        loss_mask=torch.from_numpy(mask),
        position_ids=torch.from_numpy(pos),
        document_ids=torch.from_numpy(doc),
    )
    return [{k: v[b] for k, v in batch.items()} for b in range(B)]
