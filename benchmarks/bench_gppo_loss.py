"""Memory and speed of the GPPO loss paths in gppo_loss.py: naive PyTorch vs chunked vs fused
Triton.

CPU (always): peak memory of loss + backward at N tokens × V vocabulary, for
  naive    logits = hidden @ W.T (fp32), log_softmax over all N×V, gather, policy_loss + α·sft_loss;
  logits   rl_loss_from_logits: the same fp32 logits, chunked stats, ∂L/∂logits written in place;
  hidden   rl_loss_from_hidden: logits exist only chunk_size rows at a time (forward and backward).
Method: each path runs in a fresh subprocess. After its inputs exist, it resets the kernel's
peak-RSS counter (write "5" to /proc/self/clear_refs), runs forward + backward, and reads VmHWM
(peak RSS) and VmRSS from /proc/self/status. Peak − baseline RSS is what the path added; divided by
N·V it gives bytes per logit. Large tensors are mmap'ed by the allocator, so freed memory leaves RSS
and the peak is a true high-water mark. (tracemalloc does not see torch's allocations.) The small D
keeps the lm_head and its gradient (V·D·4 bytes each, the same for every path) negligible next to
N·V.

GPU (only when CUDA is available): time and peak memory (torch.cuda.max_memory_allocated) of
forward + backward from bf16 logits, Triton (rl_loss_from_logits) vs naive PyTorch, at N = 8,192 and
32,768, V = 151,936. The logits already exist (as they would, from lm_head); "peak added" is what
the loss and its backward add on top, the gradient with respect to the logits included. The
bandwidth floor is three passes over the bf16 logits (read in the forward, read + write in the
backward) at the device's measured copy bandwidth.

Measured on the 2-core CPU machine (N=2048, V=151,936, D=128, chunk_size=256): naive 12.05
bytes/logit (3.49 GiB), logits 5.54 (4 of them the fp32 logits buffer itself), hidden 1.54 (0.45
GiB).

Run: python benchmarks/bench_gppo_loss.py [--N=2048 --V=151936 --D=128 --chunk_size=256 --skip_gpu]
"""

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, fields

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import gppo_loss as gppo  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class Config:
    # fmt: off
    N: int = 2048            # tokens (CPU section)
    V: int = 151936          # vocabulary (Qwen3)
    D: int = 128             # hidden size (CPU section); small so the lm_head is negligible
    chunk_size: int = 256    # rows per chunk of the chunked paths
    skip_gpu: bool = False   # CPU section only
    case: str = ""           # internal: the CPU path one subprocess measures
    # fmt: on


def make_batch(N, V, D, device="cpu", seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden = torch.randn(N, D, generator=gen, device=device) / D**0.5
    weight = torch.randn(V, D, generator=gen, device=device)
    targets = torch.randint(0, V, (N,), generator=gen, device=device)
    # ratios spread over every clipping case
    old = -torch.rand(N, generator=gen, device=device) * 10
    advantages = torch.randn(N, generator=gen, device=device)
    mask = torch.rand(N, generator=gen, device=device) > 0.1
    sft_mask = mask & (advantages > 1)
    return hidden, weight, targets, old, advantages, mask, sft_mask


def naive_loss(logits, targets, old, advantages, mask, sft_mask):
    logprobs = torch.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None])[:, 0]
    loss, _ = gppo.policy_loss(logprobs, old, advantages, mask)
    return loss + 0.1 * gppo.sft_loss(logprobs, sft_mask)


def rss_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def measure_cpu_case(config):
    """Runs in a subprocess: one path's loss + backward; prints a JSON line."""
    hidden, weight, targets, old, A, mask, sft_mask = make_batch(config.N, config.V, config.D)
    hidden.requires_grad_(), weight.requires_grad_()
    baseline = rss_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    start = time.perf_counter()
    if config.case == "naive":
        loss = naive_loss(hidden @ weight.T, targets, old, A, mask, sft_mask)
    elif config.case == "logits":
        loss, _ = gppo.rl_loss_from_logits(
            hidden @ weight.T,
            targets,
            old,
            A,
            mask,
            sft_mask=sft_mask,
            chunk_size=config.chunk_size,
        )
    else:
        loss, _ = gppo.rl_loss_from_hidden(
            hidden, weight, targets, old, A, mask, sft_mask=sft_mask, chunk_size=config.chunk_size
        )
    loss.backward()
    seconds = time.perf_counter() - start
    peak = rss_kib("VmHWM")
    print(
        json.dumps(
            dict(
                case=config.case,
                loss=loss.item(),
                seconds=seconds,
                peak_added=(peak - baseline) * 1024,
                grad_w_norm=weight.grad.norm().item(),
            )
        )
    )


def cpu_section(config):
    n_logits = config.N * config.V
    print(
        f"CPU: loss + backward, N={config.N}, V={config.V}, D={config.D}, chunk_size={config.chunk_size}, "
        f"{torch.get_num_threads()} threads; N·V·4 bytes = {n_logits * 4 / 2**30:.2f} GiB"
    )
    results = {}
    for case in ("naive", "logits", "hidden"):
        args = [sys.executable, os.path.abspath(__file__), f"--case={case}"] + [
            f"--{f.name}={getattr(config, f.name)}"
            for f in fields(Config)
            if f.name in ("N", "V", "D", "chunk_size")
        ]
        out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"  {case}: failed\n{out.stderr[-2000:]}")
            continue
        r = results[case] = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"  {case:7s} peak added {r['peak_added'] / 2**30:6.2f} GiB = {r['peak_added'] / n_logits:5.2f} "
            f"bytes/logit   time {r['seconds']:6.2f} s   loss {r['loss']:.6f}"
        )
    if len(results) == 3:
        same = all(
            abs(results[c]["loss"] - results["naive"]["loss"])
            < 1e-4 * (1 + abs(results["naive"]["loss"]))
            for c in results
        )
        print(f"  all three losses agree: {same}")


def cuda_time(fn, repeats=5):
    fn()  # warm-up and compilation
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats / 1e3


def gpu_section(V):
    device = torch.device("cuda")
    big = torch.empty(2**30, dtype=torch.uint8, device=device)
    # read + write bytes per second
    copy_bandwidth = 2 * big.numel() / cuda_time(lambda: big.clone())
    big = None  # freed (a lambda above still names it)
    print(f"GPU: {torch.cuda.get_device_name()}, copy bandwidth {copy_bandwidth / 1e12:.2f} TB/s")
    for N in (8192, 32768):
        _, _, targets, old, A, mask, sft_mask = make_batch(N, V, 8, device=device)
        logits_bf16 = torch.randn(N, V, device=device).to(torch.bfloat16)
        floor = 3 * logits_bf16.numel() * 2 / copy_bandwidth
        rows = {}
        for name in ("triton", "naive"):

            def loss_and_backward(leaf):
                # a non-leaf, like lm_head's output, that the kernel may overwrite
                logits = leaf.view(N, V)
                if name == "naive":
                    loss = naive_loss(logits, targets, old, A, mask, sft_mask)
                else:
                    loss, _ = gppo.rl_loss_from_logits(
                        logits, targets, old, A, mask, sft_mask=sft_mask
                    )
                loss.backward()

            try:
                copy = lambda: logits_bf16.clone().requires_grad_()  # noqa: E731
                seconds = cuda_time(lambda: loss_and_backward(copy())) - cuda_time(copy)
                leaf = copy()
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                loss_and_backward(leaf)
                torch.cuda.synchronize()
                rows[name] = (seconds, torch.cuda.max_memory_allocated() - before)
                del leaf
            except torch.cuda.OutOfMemoryError:
                rows[name] = None
            torch.cuda.empty_cache()
        for name, row in rows.items():
            if row is None:
                print(f"  N={N:6d} {name:6s} out of memory")
                continue
            seconds, peak = row
            print(
                f"  N={N:6d} {name:6s} {seconds * 1e3:8.2f} ms  peak added {peak / 2**30:6.2f} GiB "
                f"({peak / (N * V):5.2f} bytes/logit)  {floor / seconds:5.1%} of the 3-pass bandwidth floor "
                f"({floor * 1e3:.2f} ms)"
            )
        if rows.get("naive") and rows.get("triton"):
            print(f"  N={N:6d} speed-up {rows['naive'][0] / rows['triton'][0]:.1f}x")
        logits_bf16 = None  # freed before the next size's copy


if __name__ == "__main__":
    config = parse_config(Config)
    torch.set_grad_enabled(True)
    if config.case:
        measure_cpu_case(config)
    else:
        cpu_section(config)
        if torch.cuda.is_available() and not config.skip_gpu:
            gpu_section(config.V)
        elif not config.skip_gpu:
            print("GPU: skipped (no CUDA device)")
