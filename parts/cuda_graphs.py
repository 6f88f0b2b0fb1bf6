"""A step replayed from CUDA graphs, one graph per batch-size bucket (as nano-vllm and vLLM run decode steps).

A decode step is thousands of small kernels; each launch from Python costs microseconds, so at a small batch the GPU
waits for the CPU. A CUDA graph records the step's launches once and replays them in one call. A graph fixes shapes
and addresses, so the step reads its inputs from static buffers of max_batch rows; a batch of n rows runs the graph
of the smallest bucket >= n, rows n.. of the buffers set to pad values that do no harm (the caller chooses them), and
the result is the graph's own output tensor, sliced to its first n rows. Buckets: 1, 2, 4, 8, then every 16.

    graphs = BucketedGraphs(step, dict(ids=torch.zeros(64, dtype=torch.long, device="cuda")), pads=dict(ids=0))
    out = graphs.run(7, ids=ids)      # ids (7,): step(ids=buffer[:8])[:7], from the bucket-8 graph, captured once

capture=False runs the same buffers, padding and slicing eagerly (no graph): on a CPU, what a test compares with
the unpadded step. A graph keeps the addresses it saw: clear() when a buffer the step reads (weights, a KV pool) is
re-allocated; capture_all() captures every bucket at once (before a timed run). torch only.
"""
import torch


def buckets_for(max_batch: int) -> list:
    """The batch sizes that get a graph: 1, 2, 4, 8, 16, 32, 48, ... and max_batch itself."""
    return sorted({b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch})


class BucketedGraphs:
    def __init__(self, step, buffers: dict, pads: dict, capture: bool = True):
        """step(**{name: buffer[:bucket]}) -> a tensor whose first dimension is the batch; buffers: name -> (max_batch,
        ...) tensor; pads: name -> the value of a padded row."""
        sizes = {name: b.shape[0] for name, b in buffers.items()}
        if len(set(sizes.values())) != 1 or set(pads) != set(buffers):
            raise ValueError(f"BucketedGraphs: buffers need one batch size and a pad each, got {sizes}, pads {pads}")
        self.step, self.buffers, self.pads, self.capture = step, buffers, pads, capture
        self.max_batch = next(iter(sizes.values()))
        self.buckets = buckets_for(self.max_batch)
        self.graphs = {}     # bucket -> (torch.cuda.CUDAGraph, its output tensor)
        self.pool = None     # the memory pool the graphs share (captured one after another, they reuse it)

    def bucket(self, n: int) -> int:
        if not 1 <= n <= self.max_batch:
            raise ValueError(f"BucketedGraphs.run: a batch of {n} rows; the buffers hold 1..{self.max_batch}")
        return next(b for b in self.buckets if b >= n)

    def run(self, n: int, **inputs):
        """inputs: name -> (n, ...) tensor (on the buffers' device). Returns step's output for the n rows."""
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
        """Capture every bucket's graph now (a benchmark's warm-up: the timed calls then capture none)."""
        for b in self.buckets:
            if self.capture and b not in self.graphs:
                self.graphs[b] = self._capture(b)

    def clear(self) -> None:
        self.graphs, self.pool = {}, None

    def _views(self, b: int) -> dict:
        return {name: buffer[:b] for name, buffer in self.buffers.items()}

    def _capture(self, b: int):
        # The warm-up runs for real (lazy initialisation, Triton's compile, cuBLAS's workspace before the capture):
        # on pad rows only, so it writes nothing that matters. The capture itself only records.
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
