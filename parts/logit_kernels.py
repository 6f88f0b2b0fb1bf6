"""A loss of per-token log-probabilities, fused with the logits: no (N, V) tensor wider than a
chunk of rows. Per row t of logits z (N, V), its target o_t and the temperature T:
    lse_t = log Σ_v exp(z_tv / T),   logπ_t = z_t,o_t / T − lse_t,   H_t = lse_t − Σ_v p_tv z_tv / T
(p_t = softmax(z_t / T), H_t its entropy), and back, given coef_t = ∂L/∂logπ_t:
    ∂L/∂z_t = coef_t · (onehot(o_t) − p_t) / T
LogitKernels computes both, the gradient written into `out`, which may be the logits themselves (no
second (N, V) buffer); two backends, the same numbers: a Triton kernel per direction (online
softmax over one block of the vocabulary at a time, a fixed grid of programs looping over rows; on
CUDA, or on a CPU with TRITON_INTERPRET=1), and PyTorch ops chunk_size rows at a time. The autograd
Functions LossFromLogits and LossFromHidden (logits = hidden @ lm_head.T in fp32, recomputed chunk
by chunk in the backward) take any loss of the N log-probabilities, objective(logπ) -> (loss,
coef = ∂loss/∂logπ, *parts), and carry its gradient to the logits (or to hidden and the head) by
the rule above. torch (and triton, optional) only; gppo_loss.py's fused loss is the caller:
    kernels = LogitKernels(temperature=0.7, chunk_size=256, use_triton=False)
    logprobs, lse, entropy = kernels.stats(logits, targets)   # (N, V), (N,) int64 -> (N,) fp32 each
    kernels.grad(logits, logits, targets, lse, coef)          # logits <- coef·(onehot − p)/T
    loss, logprobs, entropy, *parts = LossFromHidden.apply(hidden, weight, targets, objective, kernels)
"""

from dataclasses import dataclass

import torch

try:  # CPU-only installs may lack triton: the PyTorch path then runs everywhere.
    import triton
    import triton.language as tl
except ImportError:
    triton = None

_TRITON_BLOCK_V = 4096  # vocabulary columns per step; tests shrink it to exercise the ragged tail


@dataclass(frozen=True)
class LogitKernels:
    """How the rows are computed: the temperature, the PyTorch path's rows per chunk, and whether
    the Triton kernels run."""

    # fmt: off
    temperature: float = 1.0    # T: logπ = log_softmax(z / T)[target]
    chunk_size: int = 256       # rows of logits per chunk of the PyTorch path
    use_triton: bool = False    # the Triton kernels (CUDA, or a CPU with TRITON_INTERPRET=1)
    # fmt: on

    def stats(self, logits, targets):
        """(n, V) logits -> logπ of targets, log-sum-exp, entropy: (n,) fp32 each."""
        if not self.use_triton:
            return self._stats_torch(logits, targets)
        N, V = logits.shape
        grid, meta = _launch(*logits.shape, logits.device)
        logprobs, lse, entropy = (torch.empty(N, device=logits.device) for _ in range(3))
        _stats_kernel[grid](
            logits,
            logits.stride(0),
            targets,
            logprobs,
            lse,
            entropy,
            N,
            V,
            1 / self.temperature,
            **meta,
        )
        return logprobs, lse, entropy

    def grad(self, logits, out, targets, lse, coef):
        """out (may be logits itself) <- coef·(onehot − softmax(logits/T))/T, row by row."""
        if not self.use_triton:
            return self._grad_torch(logits, out, targets, lse, coef)
        N, V = logits.shape
        grid, meta = _launch(*logits.shape, logits.device)
        _grad_kernel[grid](
            logits,
            logits.stride(0),
            out,
            out.stride(0),
            targets,
            lse,
            coef.contiguous(),
            N,
            V,
            1 / self.temperature,
            **meta,
        )

    def _stats_torch(self, logits, targets):
        """stats in PyTorch, chunk_size rows at a time (the fp32 temporaries are that many rows
        wide)."""
        temperature = self.temperature
        chunk_size = self.chunk_size
        logprobs, lse, entropy = (torch.empty(len(logits), device=logits.device) for _ in range(3))
        for i in range(0, len(logits), chunk_size):
            # (c, V) fp32: temporaries are c rows wide
            z = logits[i : i + chunk_size].float() / temperature
            lse[i : i + chunk_size] = row_lse = torch.logsumexp(z, dim=-1)
            logprobs[i : i + chunk_size] = (
                z.gather(1, targets[i : i + chunk_size, None])[:, 0] - row_lse
            )
            log_p = z.sub_(row_lse[:, None])
            entropy[i : i + chunk_size] = -log_p.exp().mul_(log_p).sum(-1)
        return logprobs, lse, entropy

    def _grad_torch(self, logits, out, targets, lse, coef):
        """grad in PyTorch, chunk_size rows at a time."""
        temperature = self.temperature
        chunk_size = self.chunk_size
        for i in range(0, len(logits), chunk_size):
            c = coef[i : i + chunk_size, None] / temperature
            g = (
                (logits[i : i + chunk_size].float() / temperature)
                .sub_(lse[i : i + chunk_size, None])
                .exp_()
                .mul_(-c)
            )
            g.scatter_add_(1, targets[i : i + chunk_size, None], c)
            out[i : i + chunk_size] = g


def _launch(N, V, device):
    """A fixed grid (8 programs per SM) whatever N, and the vocabulary block size."""
    programs = (
        8 * torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 4
    )
    block = min(_TRITON_BLOCK_V, triton.next_power_of_2(V))
    return (max(1, min(N, programs)),), dict(BLOCK=block, num_warps=8 if block >= 2048 else 4)


# ------------------------------------------- a loss of logπ, with autograd, from logits or hidden


class LossFromLogits(torch.autograd.Function):
    """logits (N, V), targets (N,) -> (loss, logπ (N,), entropy (N,), *parts) where
    (loss, coef, *parts) = objective(logπ) and coef = ∂loss/∂logπ (N,): the caller's loss of the N
    log-probabilities, differentiated on them. The backward writes ∂L/∂logits into the logits
    buffer itself when inplace (no second (N, V) buffer); the logits are garbage after backward."""

    @staticmethod
    def forward(ctx, logits, targets, objective, kernels: LogitKernels, inplace: bool):
        logprobs, lse, entropy = kernels.stats(logits, targets)
        loss, coef, *parts = objective(logprobs)
        ctx.save_for_backward(logits, targets, lse, coef)
        ctx.kernels = kernels
        ctx.inplace = inplace
        ctx.mark_non_differentiable(logprobs, entropy, *parts)
        return loss, logprobs, entropy, *parts

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        logits, targets, lse, coef = ctx.saved_tensors
        out = logits if ctx.inplace else torch.empty_like(logits)
        ctx.kernels.grad(logits, out, targets, lse, coef * grad_loss)
        # any later reader of these logits now fails loudly instead of reading gradients
        if ctx.inplace:
            torch.autograd.graph.increment_version(logits)
        return out, None, None, None, None


class LossFromHidden(torch.autograd.Function):
    """hidden (N, D), lm_head weight (V, D), targets (N,) -> (loss, logπ, entropy, *parts), as
    LossFromLogits with logits = hidden @ weight.T in fp32; the logits exist one chunk of
    kernels.chunk_size rows at a time, in the forward and again (recomputed) in the backward."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, objective, kernels: LogitKernels):
        logprobs, lse, entropy = (torch.empty(len(hidden), device=hidden.device) for _ in range(3))
        chunk_size = kernels.chunk_size
        for i in range(0, len(hidden), chunk_size):
            rows = slice(i, i + chunk_size)
            # (c, V) fp32, from the compute dtype's operands
            logits = _mm_fp32(hidden[rows], weight.T)
            stats = kernels.stats(logits, targets[rows])
            logprobs[rows], lse[rows], entropy[rows] = stats
        loss, coef, *parts = objective(logprobs)
        ctx.save_for_backward(hidden, weight, targets, lse, coef)
        ctx.kernels = kernels
        ctx.mark_non_differentiable(logprobs, entropy, *parts)
        return loss, logprobs, entropy, *parts

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        hidden, weight, targets, lse, coef = ctx.saved_tensors
        kernels = ctx.kernels
        coef = coef * grad_loss
        grad_hidden = torch.empty_like(hidden)
        # fp32 accumulator
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        chunk_size = kernels.chunk_size
        for i in range(0, len(hidden), chunk_size):
            rows = slice(i, i + chunk_size)
            logits = _mm_fp32(hidden[rows], weight.T)  # the forward's fp32 logits, recomputed
            kernels.grad(logits, logits, targets[rows], lse[rows], coef[rows])
            # ∂L/∂z (c, V): the GEMMs take the compute dtype
            grad_logits = logits.to(weight.dtype)
            grad_hidden[rows] = grad_logits @ weight
            # in place: no (V, D) temporary per chunk
            _addmm_fp32_(grad_weight, grad_logits.T, hidden[rows])
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def _addmm_fp32_(acc, a, b):
    """acc += a @ b, acc fp32 (V, D), the sum taken in fp32 and written into acc itself: a product
    the size of acc (2.5 GB for Qwen3-8B's head) is never allocated. bf16 on CUDA: one GEMM that
    adds into acc (addmm with out_dtype=float32); a torch without it takes acc's rows _ACC_SLAB at a
    time (a slab x D temporary). Elsewhere addmm_ on fp32 operands (copies of a (V, c) and b (c, D)
    when they are bf16, never of acc)."""
    if a.is_cuda and a.dtype == b.dtype != torch.float32:
        try:
            torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
            return
        except (TypeError, RuntimeError):
            pass  # a torch whose addmm(out_dtype=) wants acc in a's dtype, or has no out_dtype
        for i in range(0, len(a), _ACC_SLAB):
            acc[i : i + _ACC_SLAB] += _mm_fp32(a[i : i + _ACC_SLAB], b)
        return
    acc.addmm_(a.float(), b.float())


# rows of the head's gradient per GEMM where the GEMM cannot add into acc (256 MB fp32 at D=8192)
_ACC_SLAB = 8192


def _mm_fp32(a, b):
    """a @ b with an fp32 result, accumulated in fp32 (model.logits_fp32's rule, repeated so this
    file stands alone): bf16 logits would move logπ by up to a few hundredths, the size of the
    ratio's clip band's noise."""
    if a.dtype == torch.float32 and b.dtype == torch.float32:
        return a @ b
    if a.is_cuda and a.dtype == b.dtype:
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            pass  # a torch without mm(out_dtype=): the same values through fp32 copies
    return a.float() @ b.float()


if triton is not None:

    @triton.jit
    def _stats_kernel(
        logits_ptr,
        stride,
        targets_ptr,
        logprobs_ptr,
        lse_ptr,
        entropy_ptr,
        N,
        V,
        inv_temp,
        BLOCK: tl.constexpr,
    ):
        # A fixed grid of programs loops over rows: no grid-size limit on N; int64 row offsets
        # because N·V passes 2^31 (32,768 × 151,936).
        offs = tl.arange(0, BLOCK)
        for row in tl.range(tl.program_id(0).to(tl.int64), N, tl.num_programs(0)):
            row_ptr = logits_ptr + row * stride
            # Online softmax, one lane per column slot: running max m, Σ exp(z−m), Σ exp(z−m)·z.
            m = tl.full([BLOCK], float("-inf"), tl.float32)
            s = tl.zeros([BLOCK], tl.float32)
            a = tl.zeros([BLOCK], tl.float32)
            for start in tl.range(0, V, BLOCK):
                cols = start + offs
                z = (
                    tl.load(row_ptr + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
                    * inv_temp
                )
                m_new = tl.maximum(m, z)
                m_safe = tl.where(m_new > float("-inf"), m_new, 0.0)  # lanes that saw no column yet
                correction = tl.exp(m - m_safe)
                p = tl.exp(z - m_safe)
                s = s * correction + p
                a = a * correction + p * tl.where(p > 0, z, 0.0)
                m = m_new
            m_row = tl.max(m, 0)
            lane_scale = tl.exp(m - m_row)
            s_row = tl.sum(s * lane_scale, 0)
            lse = m_row + tl.log(s_row)
            z_target = tl.load(row_ptr + tl.load(targets_ptr + row)).to(tl.float32) * inv_temp
            tl.store(logprobs_ptr + row, z_target - lse)
            tl.store(lse_ptr + row, lse)
            tl.store(entropy_ptr + row, lse - tl.sum(a * lane_scale, 0) / s_row)  # H = lse − E_p[z]

    @triton.jit
    def _grad_kernel(
        logits_ptr,
        stride,
        out_ptr,
        out_stride,
        targets_ptr,
        lse_ptr,
        coef_ptr,
        N,
        V,
        inv_temp,
        BLOCK: tl.constexpr,
    ):
        # out may alias logits: each element is read, then written, by the same program.
        offs = tl.arange(0, BLOCK)
        for row in tl.range(tl.program_id(0).to(tl.int64), N, tl.num_programs(0)):
            row_ptr = logits_ptr + row * stride
            out_row_ptr = out_ptr + row * out_stride
            c = tl.load(coef_ptr + row) * inv_temp
            lse = tl.load(lse_ptr + row)
            target = tl.load(targets_ptr + row)
            for start in tl.range(0, V, BLOCK):
                cols = start + offs
                z = tl.load(row_ptr + cols, mask=cols < V, other=0.0).to(tl.float32) * inv_temp
                g = tl.where(cols == target, c, 0.0) - c * tl.exp(z - lse)
                tl.store(out_row_ptr + cols, g.to(out_ptr.dtype.element_ty), mask=cols < V)
