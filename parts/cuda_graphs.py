"""A decode step on the device: replayed from CUDA graphs, one per batch-size bucket (as nano-vllm
and vLLM do), its block tables kept on the device.

A decode step is thousands of small kernels; each launch from Python costs microseconds, so at a
small batch the GPU waits for the CPU. A CUDA graph records the step's launches once and replays
them in one call. A graph fixes shapes and addresses, so the step reads its inputs from static
buffers of max_batch rows; a batch of n rows runs the graph of the smallest bucket >= n, rows n.. of
the buffers set to pad values that do no harm (the caller chooses them), and the result is the
graph's own output tensor, sliced to its first n rows. Buckets: 1, 2, 4, 8, then every 16.

    graphs = BucketedGraphs(step, dict(ids=torch.zeros(64, dtype=torch.long, device="cuda")), pads=dict(ids=0))
    out = graphs.run(7, ids=ids)      # ids (7,): step(ids=buffer[:8])[:7], from the bucket-8 graph, captured once

capture=False runs the same buffers, padding and slicing eagerly (no graph): on a CPU, what a test
compares with the unpadded step. A graph keeps the addresses it saw: clear() when a buffer the step
reads (weights, a KV pool) is re-allocated; capture_all() captures every bucket at once (before a
timed run).

DeviceDecode is a paged-KV decode step built on them (rollout.py's engine with the Triton
kernel): the running sequences' block tables live on the device (DeviceBlockTables, a row per
sequence, changed only where an entry changes), the step's integers go to the device in one copy,
and the step replays its bucket's graph. torch only: the paged attention kernel and the KV cache
come from the caller.
"""

import torch


def buckets_for(max_batch: int) -> list:
    """The batch sizes that get a graph: 1, 2, 4, 8, 16, 32, 48, ... and max_batch itself."""
    return sorted(
        {b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch}
    )


class BucketedGraphs:
    def __init__(self, step, buffers: dict, pads: dict, capture: bool = True):
        """step(**{name: buffer[:bucket]}) -> a tensor whose first dimension is the batch; buffers:
        name -> (max_batch, ...) tensor; pads: name -> the value of a padded row."""
        sizes = {name: b.shape[0] for name, b in buffers.items()}
        if len(set(sizes.values())) != 1 or set(pads) != set(buffers):
            raise ValueError(
                f"BucketedGraphs: buffers need one batch size and a pad each, got {sizes}, pads {pads}"
            )
        self.step = step
        self.buffers = buffers
        self.pads = pads
        self.capture = capture
        self.max_batch = next(iter(sizes.values()))
        self.buckets = buckets_for(self.max_batch)
        self.graphs = {}  # bucket -> (torch.cuda.CUDAGraph, its output tensor)
        # the memory pool the graphs share (captured one after another, they reuse it)
        self.pool = None

    def bucket(self, n: int) -> int:
        if not 1 <= n <= self.max_batch:
            raise ValueError(
                f"BucketedGraphs.run: a batch of {n} rows; the buffers hold 1..{self.max_batch}"
            )
        return next(b for b in self.buckets if b >= n)

    def run(self, n: int, **inputs):
        """inputs: name -> (n, ...) tensor (on the buffers' device). Returns step's output for the n
        rows."""
        b = self.bucket(n)
        for name, buffer in self.buffers.items():
            buffer[:n].copy_(inputs[name])
            buffer[n:b].fill_(self.pads[name])
        if not self.capture:
            return self.step(**self._views(b))[:n]
        if b not in self.graphs:
            self.graphs[b] = self._capture(b)
        graph, out = self.graphs[b]
        graph.replay()
        return out[:n]

    def capture_all(self) -> None:
        """Capture every bucket's graph now (a benchmark's warm-up: the timed calls then capture
        none)."""
        for b in self.buckets:
            if self.capture and b not in self.graphs:
                self.graphs[b] = self._capture(b)

    def clear(self) -> None:
        self.graphs = {}
        self.pool = None

    def _views(self, b: int) -> dict:
        return {name: buffer[:b] for name, buffer in self.buffers.items()}

    def _capture(self, b: int):
        # The warm-up runs for real (lazy initialisation, Triton's compile, cuBLAS's workspace
        # before the capture): on pad rows only, so it writes nothing that matters. The capture
        # itself only records.
        saved = {name: buffer[:b].clone() for name, buffer in self.buffers.items()}
        for name, buffer in self.buffers.items():
            buffer[:b].fill_(self.pads[name])
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.step(**self._views(b))
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.step(**self._views(b))
        self.pool = graph.pool()
        for name, buffer in self.buffers.items():
            buffer[:b].copy_(saved[name])
        return graph, out


class DeviceBlockTables:
    """The running sequences' block tables as one (max_num_seqs, blocks_per_seq) int32 tensor on
    the engine's device, a row per sequence, changed only where an entry changes (a sequence's
    blocks when it is admitted, a new or copied last block), in one copy per step: not rebuilt
    from Python lists each step. Unused entries hold the scratch block (a valid id; the context
    length masks it). The scheduler keeps it (admit, changed, retire: parts/scheduler.py)."""

    def __init__(self, rows: int, width: int, scratch: int, device):
        self.table = torch.full((rows, width), scratch, dtype=torch.int32, device=device)
        self.reset()

    def reset(self) -> None:
        self.free_rows = list(range(len(self.table)))[::-1]
        self.pending = {}  # (row, column) -> block, written at the next gather

    def admit(self, seq) -> None:
        seq.row = self.free_rows.pop()
        for column in range(len(seq.block_table)):
            self.update(seq, column)

    def update(self, seq, column: int) -> None:  # a row freed and reused: the last write wins
        self.pending[seq.row, column] = seq.block_table[column]

    def changed(self, seq) -> None:  # a new last block, or its private copy
        self.update(seq, len(seq.block_table) - 1)

    def retire(self, seq) -> None:
        if seq.row >= 0:
            self.free_rows.append(seq.row)
            seq.row = -1

    def gather(self, rows: torch.Tensor, width: int | None = None) -> torch.Tensor:
        """The tables of these rows (B,), their first `width` columns (None: all): (B, width)."""
        if self.pending:
            entries = list(self.pending)
            rows_cols_blocks = [
                [r for r, _ in entries],
                [c for _, c in entries],
                list(self.pending.values()),
            ]
            index = torch.tensor(rows_cols_blocks, device=self.table.device)
            self.table[index[0], index[1]] = index[2].int()
            self.pending = {}
        return (self.table if width is None else self.table[:, :width]).index_select(0, rows)


class DeviceDecode:
    """One decode step of a paged KV cache on the device. attention(q (B, Hq, hd), k_pool, v_pool
    (Hkv, blocks, bs, hd), block_tables (B, width) int32, context_lens (B,) int32) -> (B, Hq, hd):
    the paged kernel. The cache (given to new_pool): k_pool/v_pool (L, Hkv, blocks, bs, hd),
    block_size, device, write(layer_idx, slots, k, v), and a `step` its attend() hands each
    layer's q, k, v to (here: attend below). graphs=True: replayed from CUDA graphs (on a CPU the
    same padded buffers without capture); their pad rows write a scratch block, one more in the
    pool (block num_blocks)."""

    name = "Triton"
    extra_blocks = 1

    def __init__(self, model, attention, max_num_seqs: int, blocks_per_seq: int, graphs: bool):
        self.model = model
        self.attention = attention
        self.max_num_seqs = max_num_seqs
        self.blocks_per_seq = blocks_per_seq
        self.use_graphs = graphs
        self.graphs = None
        self.tables = None

    def new_pool(self, cache, num_blocks: int) -> None:
        """Tables and graphs for this pool. A graph replays the addresses it was captured on: a
        new pool gets new graphs, and the weights' storage is checked at every start() (graphs are
        kept across calls while both stay: no re-capture per call)."""
        self.cache = cache
        self.tables = DeviceBlockTables(
            self.max_num_seqs, self.blocks_per_seq, num_blocks, cache.device
        )
        self.graphs = self._graphs(num_blocks) if self.use_graphs else None
        self.graphed_weights = self._weight_addresses()

    def start(self) -> None:
        weights = self._weight_addresses()
        if self.graphs is not None and self.graphed_weights != weights:
            # captured on weights freed and re-allocated since (a trainer that frees the engine's
            # copy while it trains); in-place updates keep the addresses
            self.graphs.clear()
            self.graphed_weights = weights
        self.tables.reset()

    def hidden(self, running: list, slots: list):
        """The step's integers in one host-to-device copy, the block tables gathered on the
        device, the model run directly or replayed from a CUDA graph (whose tables are full width:
        static shapes) -> (B, D)."""
        integers = [
            [seq.token_ids[-1] for seq in running],
            [len(seq.token_ids) - 1 for seq in running],
            slots,
            [len(seq.token_ids) for seq in running],
            [seq.row for seq in running],
        ]
        device_ints = torch.tensor(integers, device=self.cache.device)  # (5, B)
        ids, positions, slots, lengths, rows = device_ints
        if self.graphs is not None:
            return self.graphs.run(
                len(running),
                input_ids=ids,
                positions=positions,
                slots=slots,
                block_tables=self.tables.gather(rows),
                context_lens=lengths.int(),
            )
        width = max(len(seq.block_table) for seq in running)
        return self.step(ids, positions, slots, self.tables.gather(rows, width), lengths.int())

    def step(self, input_ids, positions, slots, block_tables, context_lens):
        """(B,) tokens at (B,) positions, K/V written to (B,) slots -> final hidden states (B, D);
        graph-capturable: tensors in, tensors out, no host synchronisation."""
        self.slots = slots
        self.block_tables = block_tables
        self.context_lens = context_lens
        self.cache.step = self
        try:
            return self.model(
                input_ids[None],
                position_ids=positions[None],
                kv_cache=self.cache,
                return_hidden=True,
            )[0]
        finally:
            self.cache.step = None

    def attend(self, cache, layer_idx, q, k, v):  # q (B, Hq, hd), k/v (B, Hkv, hd) -> like q
        cache.write(layer_idx, self.slots, k, v)
        k_pool = cache.k_pool[layer_idx]
        v_pool = cache.v_pool[layer_idx]
        return self.attention(q, k_pool, v_pool, self.block_tables, self.context_lens)

    def _graphs(self, scratch: int) -> BucketedGraphs:
        def full(value, *shape, dtype=torch.long):
            return torch.full(shape, value, dtype=dtype, device=self.cache.device)

        rows = self.max_num_seqs
        buffers = dict(
            input_ids=full(0, rows),
            positions=full(0, rows),
            slots=full(0, rows),
            block_tables=full(scratch, rows, self.blocks_per_seq, dtype=torch.int32),
            context_lens=full(1, rows, dtype=torch.int32),
        )
        # a padded row: token 0 at position 0, its K/V written into the scratch block and read
        # back from it alone
        pads = dict(
            input_ids=0,
            positions=0,
            slots=scratch * self.cache.block_size,
            block_tables=scratch,
            context_lens=1,
        )
        return BucketedGraphs(self.step, buffers, pads, capture=self.cache.device.type == "cuda")

    def _weight_addresses(self) -> tuple:
        return tuple(t.data_ptr() for t in (*self.model.parameters(), *self.model.buffers()))
