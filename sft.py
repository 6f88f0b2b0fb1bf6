"""Long chain-of-thought SFT with FSDP2 — stage one of Klear-Reasoner.

The model learns to imitate a teacher's reasoning: for every assistant token t of every conversation
in the global batch (all ranks, all micro-batches),

    L = (1 / N_assistant_tokens) * sum_t  -log p_theta(x_t | x_<t)

Conversations are packed into fixed-size rows (positions restart per document and attention never
crosses a document boundary, see data.py), so no compute is spent on padding. The paper (§2, §4.1):
LR 8e-5 with cosine decay to 4e-5, 4 epochs, 32K context, loss on assistant tokens only, and on hard
prompts keep incorrect teacher responses too ("mixed" data).

Simplifications, in plain words:
  1. one optimizer step per global batch of `rows_per_step` packed rows; gradient accumulation over
     micro-batches of `micro_rows` rows; the loss is normalised by the global number of assistant
     tokens, so results do not depend on the number of ranks or on accumulation;
  2. the LM head is applied in chunks of tokens (never a (tokens x vocab) fp32 logits tensor);
  3. checkpoints are `torch.distributed.checkpoint` (sharded): model, optimizer, data position and step.

Run:
  python sft.py                                   # toy task on CPU: tiny model from scratch, a few minutes
  torchrun --nproc_per_node=2 sft.py              # same, 2 processes (gloo on CPU)
  torchrun --nproc_per_node=8 sft.py --init_from=/ckpt/Qwen3-8B-Base --data=sft.jsonl \\
      --tokenizer=/ckpt/Qwen3-8B-Base --max_len=32768 --row_tokens=32768 --rows_per_step=64 \\
      --lr=8e-5 --min_lr=4e-5 --epochs=4 --activation_checkpointing=true --out_dir=out/sft
  (several nodes: torchrun --nnodes=2 --node_rank=R --master_addr=HOST --nproc_per_node=8 sft.py ...)
SIGTERM or Ctrl-C stops at a step boundary with a checkpoint; the same command resumes from it.
The file reads: config, main(), the SFT pieces main() calls in that order; then the trainer plumbing that gppo.py
and eval.py share (entry point, process group, one-line input errors, FSDP2, DCP checkpoints, graceful stop,
Hugging Face export). It lives here, in the first trainer, because sft.py imports only data.py and model.py,
which every trainer and eval.py import anyway; the command-line parser they share is data.py's.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads OpenMP: see sft.set_threads

import datetime
import json
import math
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

import data
from data import parse_config
from model import CheckpointError, Qwen3, Qwen3Config, check_checkpoint, on_meta, read_weights, save_pretrained


@dataclass
class SFTConfig:
    # data
    data: str = ""                   # conversations (.jsonl, .json or .parquet; the formats data.py reads); empty = the toy tasks
    skip_bad_rows: bool = False      # skip rows that cannot be learned from (malformed reasoning markers), counted
    tokenizer: str = ""              # dir or tokenizer.json; empty with toy data = the toy tokenizer
    max_len: int = 512               # longer conversations follow `overlong`
    overlong: str = "truncate"       # truncate | drop (either way the count is reported) | error
    toy_math_examples: int = 12000   # toy addition conversations (with toy data)
    toy_code_examples: int = 2000    # toy programming conversations (with toy data)
    toy_wrong_fraction: float = 0.6  # share of hard (3+ digit) toy math traces that slip once and end wrong
    #   ("mixed" data): the SFT model samples such slips at T=1, and RL has them to unlearn (this fixed toy mix is
    #   for `python sft.py` alone; bash train.sh makes its toy data with distill.py, the paper's recipe)
    # model
    init_from: str = ""              # a Hugging Face Qwen3 directory; empty = a tiny Qwen3 from scratch (sizes below)
    n_layer: int = 4                 # from scratch: decoder layers
    hidden: int = 128                # from scratch: hidden size
    n_head: int = 4                  # from scratch: query heads
    n_kv_head: int = 2               # from scratch: key/value heads (GQA)
    head_dim: int = 32               # from scratch: dimension per head
    intermediate: int = 384          # from scratch: SwiGLU hidden size
    # optimisation
    row_tokens: int = 2048           # tokens per packed row
    rows_per_step: int = 2           # global batch, in rows (across all ranks); the toy learns faster from more, smaller steps
    micro_rows: int = 1              # rows per forward/backward on one rank
    epochs: int = 4                  # passes over the packed rows (paper: 4)
    max_steps: int = -1              # stop after this many steps (the LR schedule still spans all epochs); -1 = all
    lr: float = 2e-3                 # peak learning rate (paper: 8e-5 for Qwen3-8B; the tiny toy model needs far more)
    min_lr: float = 1e-4             # cosine decay ends here (paper: 4e-5)
    warmup_steps: int = 20           # linear warmup steps
    weight_decay: float = 0.1        # AdamW weight decay
    beta1: float = 0.9               # AdamW beta1
    beta2: float = 0.95              # AdamW beta2
    grad_clip: float = 1.0           # max global gradient norm
    activation_checkpointing: str = "auto"  # recompute each layer in the backward: auto (on GPU, where rows are
    #   32K tokens: 7.7 GiB per layer saved otherwise) | true | false
    export_dtype: str = "auto"       # dtype of the Hugging Face export: auto (the --init_from checkpoint's, bf16 for
    #   Qwen3 base models; float32 from scratch) | bfloat16 | float32
    loss_chunk: int = 4096           # tokens per LM-head chunk in the loss
    # bookkeeping
    out_dir: str = "out/sft"         # checkpoint/, metrics.jsonl, hf/ (the trained model + tokenizer)
    seed: int = 1234                 # model init, data order
    log_every: int = 10              # print and log a metrics record every k steps
    ckpt_every: int = 200            # DCP checkpoint every k steps (and at the end); 0 = only at the end
    ckpt_minutes: float = 5.0        # ... and every this many minutes of wall clock (0 = off); SIGTERM/Ctrl-C also save one
    resume: bool = True              # continue from out_dir/checkpoint if it exists
    device: str = "auto"             # auto | cpu | cuda
    threads: int = 0                 # CPU threads per rank; 0 = usable cores / ranks on this machine
    dist_timeout_minutes: float = 120.0  # how long a rank may wait for the others in a collective (NCCL's default: 10)

    def __post_init__(self):
        checks = [(self.overlong in ("truncate", "drop", "error"), "overlong must be truncate, drop or error"),
                  (self.activation_checkpointing in ("auto", "true", "false"), "activation_checkpointing must be auto, "
                   "true or false"),
                  (self.export_dtype in EXPORT_DTYPES, f"export_dtype must be one of {', '.join(EXPORT_DTYPES)}"),
                  (self.n_head % self.n_kv_head == 0, "n_head must be a multiple of n_kv_head (GQA)"),
                  (self.micro_rows >= 1 and self.rows_per_step >= 1, "micro_rows and rows_per_step must be >= 1")]
        for ok, why in checks:
            if not ok:
                raise SystemExit(f"error: SFTConfig: {why}")


# ----------------------------------------------------------------------------- the SFT story: main, then what it calls

def main(cfg: SFTConfig):
    rank, world, device = init_distributed(cfg.device, cfg.dist_timeout_minutes)
    set_threads(cfg.threads, device)
    torch.manual_seed(cfg.seed)
    if cfg.rows_per_step % (world * cfg.micro_rows):
        raise InputError(f"--rows_per_step={cfg.rows_per_step} must be a multiple of world size x --micro_rows "
                         f"= {world} x {cfg.micro_rows}")
    os.makedirs(cfg.out_dir, exist_ok=True)

    def load():
        tokenizer, tokenizer_dir, loader = load_sft_data(cfg, rank, world)
        stored = read_input(f"--init_from={cfg.init_from}", check_checkpoint, cfg.init_from) if cfg.init_from else None
        return tokenizer.get_vocab_size(), tokenizer_dir, loader, stored
    vocab_size, tokenizer_dir, loader, stored_dtype = agree_on_inputs(load)
    model = build_model(cfg, vocab_size, device)   # collectives: only once every rank has its inputs
    export_dtype = export_dtype_of(cfg.export_dtype, stored_dtype or torch.float32)
    total_steps = loader.steps_per_epoch * cfg.epochs          # the LR schedule always spans all epochs
    stop_step = total_steps if cfg.max_steps < 0 else min(cfg.max_steps, total_steps)
    print0(f"packing: {loader.num_rows} rows of {cfg.row_tokens} tokens, {loader.efficiency:.1%} real tokens; "
           f"{loader.steps_per_epoch} steps/epoch, {total_steps} steps" + (f", stopping after {stop_step}" if stop_step < total_steps else ""))
    n_params = sum(p.numel() for p in model.parameters())   # a shard's numel() is its whole parameter's
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                  weight_decay=cfg.weight_decay, foreach=True)
    print0(f"model: {n_params / 1e6:.2f}M parameters, world size {world}, device {device}")

    ckpt_dir = os.path.join(cfg.out_dir, "checkpoint")
    step = 0
    if cfg.resume and os.path.exists(ckpt_dir):
        state = read_input(f"{ckpt_dir} (--resume=true)", load_checkpoint, ckpt_dir, model, optimizer)
        step = state["step"]
        read_input(f"{ckpt_dir} (--resume=true)", loader.load_state_dict, state["loader"])
        print0(f"resumed from {ckpt_dir} at step {step}")
    metrics_file = open_metrics(os.path.join(cfg.out_dir, "metrics.jsonl"), step)
    stop = GracefulStop(cfg.ckpt_minutes, device)
    t_start, tokens_seen, start_step = time.time(), 0, step
    try:
        while step < stop_step:
            rows = loader.next_step()                       # this rank's rows for one optimizer step
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, cfg.lr, cfg.min_lr, cfg.warmup_steps)
            loss, grad_norm = train_step(model, optimizer, rows, cfg, device, world)
            step += 1
            tokens_seen += sum(r["input_ids"].numel() for r in rows) * world
            if step % cfg.log_every == 0 or step == stop_step:
                elapsed = time.time() - t_start
                rec = dict(step=step, loss=round(loss, 5), lr=optimizer.param_groups[0]["lr"], grad_norm=grad_norm,
                           tokens_per_s=round(tokens_seen / elapsed, 1), epoch=loader.epoch, elapsed_s=round(elapsed, 1))
                eta = (stop_step - step) * elapsed / (step - start_step)
                print0(f"step {step}/{stop_step} loss {loss:.4f} lr {rec['lr']:.2e} grad_norm {grad_norm:.3f} "
                       f"tok/s {rec['tokens_per_s']:.0f} eta {eta / 60:.1f}min")
                if metrics_file:
                    metrics_file.write(json.dumps(rec) + "\n")
                    metrics_file.flush()
            stopping, checkpoint_now = stop.poll()
            if checkpoint_now or (cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == stop_step:
                save_checkpoint(ckpt_dir, model, optimizer, {"step": step, "loader": loader.state_dict()})
                stop.checkpointed()
            if stopping:
                stop.exit(step, ckpt_dir)
    finally:
        stop.close()
        if metrics_file:
            metrics_file.close()
    export_hf(model, os.path.join(cfg.out_dir, "hf"), tokenizer_dir, export_dtype)
    print0(f"done: {step} steps in {(time.time() - t_start) / 60:.1f} min; Hugging Face export in {cfg.out_dir}/hf")


def load_sft_data(cfg: SFTConfig, rank: int, world: int):
    """The tokenizer (and the directory its files are in) and this rank's packed-row loader, from --data and
    --tokenizer or from the built-in toy tasks. Raises InputError for anything wrong in what the user gave."""
    if cfg.data:
        if not cfg.tokenizer:
            raise InputError("--data needs --tokenizer (a dir or tokenizer.json, e.g. the base model's dir)")
        tokenizer = read_input(f"--tokenizer={cfg.tokenizer}", data.load_tokenizer, cfg.tokenizer)
        tokenizer_dir = cfg.tokenizer if os.path.isdir(cfg.tokenizer) else os.path.dirname(cfg.tokenizer)
        conversations = read_input("--data", data.load_sft_jsonl, cfg.data, skip_bad_rows=cfg.skip_bad_rows)
        print0(f"data file: {conversations.report}")
    else:
        tokenizer = data.build_toy_tokenizer()      # deterministic: every rank builds the same one
        tokenizer_dir = os.path.join(cfg.out_dir, "tokenizer")
        if rank == 0:
            data.save_tokenizer(tokenizer, tokenizer_dir)
        conversations = data.toy_sft_conversations(cfg.toy_math_examples, cfg.toy_code_examples,
                                                   seed=cfg.seed, wrong_fraction=cfg.toy_wrong_fraction)
    examples, report = read_input("--data", data.encode_sft_dataset, tokenizer, conversations, cfg.max_len, cfg.overlong)
    print0(f"data: {report}")
    if not examples:
        raise InputError(f"--data={cfg.data or '(toy)'}: no conversation left to train on ({report})")
    loader = data.PackedLoader(examples, row_tokens=cfg.row_tokens, rows_per_step=cfg.rows_per_step, rank=rank,
                               world_size=world, seed=cfg.seed, pad_id=data.special_token_ids(tokenizer)["endoftext"])
    return tokenizer, tokenizer_dir, loader


def build_model(cfg, vocab_size: int, device: torch.device) -> Qwen3:
    """The trainable model in fp32 master weights, FSDP2-sharded: a Hugging Face checkpoint, or a tiny one from
    scratch."""
    if cfg.init_from:
        model = load_sharded(cfg.init_from, device)
    else:
        mcfg = Qwen3Config(vocab_size=vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                           num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                           num_key_value_heads=cfg.n_kv_head, head_dim=cfg.head_dim, max_position_embeddings=4096,
                           tie_word_embeddings=True, torch_dtype="float32", bos_token_id=None, eos_token_id=None)
        model = shard_model(Qwen3(mcfg).to(device).init_weights(seed=cfg.seed), device)
    model.activation_checkpointing = checkpointing_on(cfg.activation_checkpointing, device)
    return model


def lr_at(step: int, total_steps: int, lr: float, min_lr: float, warmup: int) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def train_step(model, optimizer, rows, cfg: SFTConfig, device, world: int) -> tuple:
    """One optimizer step on this rank's packed rows; the loss is a token-mean over all ranks' assistant tokens.
    Returns (loss, grad_norm)."""
    # global normaliser: assistant tokens of this step on all ranks (counted as the loss counts them)
    local_tokens = sum(int(target_mask(r["loss_mask"], r["document_ids"]).sum()) for r in rows)
    n_tokens = torch.tensor([local_tokens], dtype=torch.float64, device=device)
    dist.all_reduce(n_tokens)
    n_tokens = max(1.0, n_tokens.item())
    loss_sum = torch.zeros((), device=device)
    for i in range(0, len(rows), cfg.micro_rows):
        batch = {k: torch.stack([r[k] for r in rows[i:i + cfg.micro_rows]]).to(device) for k in rows[0]}
        micro = sft_loss_sum(model, batch, cfg.loss_chunk)
        # FSDP averages gradients over ranks; multiply by world so the result is a global token-mean
        (micro * world / n_tokens).backward()
        loss_sum += micro.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    dist.all_reduce(loss_sum)
    loss = loss_sum.item() / n_tokens
    if not math.isfinite(loss) or not math.isfinite(grad_norm):
        raise SystemExit(f"error: loss={loss} grad_norm={grad_norm}: stopping without updating; the last good "
                         f"checkpoint is in {cfg.out_dir}/checkpoint (try a lower --lr)")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def sft_loss_sum(model, batch, chunk: int):
    """batch: tensors (B, T). Sum of the NLL over assistant tokens (label = next token)."""
    hidden = model(batch["input_ids"], position_ids=batch["position_ids"], document_ids=batch["document_ids"],
                   return_hidden=True)                                     # (B, T, D)
    targets, mask = batch["input_ids"][:, 1:], target_mask(batch["loss_mask"], batch["document_ids"])
    D = hidden.shape[-1]
    return chunked_nll_sum(hidden[:, :-1].reshape(-1, D), model.lm_head.weight, targets.reshape(-1),
                           mask.reshape(-1), chunk)


def target_mask(loss_mask, document_ids):
    """(..., T) -> (..., T-1): which next-token targets the loss counts. Token t predicts t+1 only if t+1 is an
    assistant token and both are in the same document."""
    return loss_mask[..., 1:] & (document_ids[..., 1:] == document_ids[..., :-1])


def chunked_nll_sum(hidden, lm_head_weight, targets, mask, chunk: int):
    """sum over masked tokens of -log softmax(hidden @ W^T)[target], one chunk of tokens at a time.
    hidden (N, D), targets/mask (N,). Each chunk is recomputed in the backward (checkpoint), so only one
    (chunk, V) block of logits is alive at a time."""
    from torch.utils.checkpoint import checkpoint

    def piece(h, t, m):
        logits = (h @ lm_head_weight.T).float()                            # (chunk, V)
        return (F.cross_entropy(logits, t, reduction="none") * m).sum()

    # start from a zero that is connected to the graph: a step whose rows are all padding must still run a
    # backward on every rank (FSDP's collectives), and every parameter must get a (zero) gradient
    total = (hidden.sum() + lm_head_weight.sum()).float() * 0.0
    for s in range(0, hidden.shape[0], chunk):
        sl = slice(s, s + chunk)
        if mask[sl].any():
            total = total + checkpoint(piece, hidden[sl], targets[sl], mask[sl].float(), use_reentrant=False)
    return total


# ----------------------------------------------------------------------------- trainer plumbing, shared with gppo.py and eval.py
# Read the SFT story above first; what follows is what any trainer here needs and gppo.py / eval.py import:
# the wrapper of every entry point, process groups and threads, one-line input errors, FSDP2 wrapping, DCP
# checkpoints and the metrics file, the graceful stop, and the Hugging Face export.

def run_entry_point(main, cfg, **kwargs):
    """What every `python X.py` runs: main(cfg), with bad input as one line from rank 0 (exit status 2) and
    Ctrl-C outside the training loop as one line (exit status 130), never a traceback per rank."""
    status = 0
    try:
        main(cfg, **kwargs)
    except InputError as e:   # every rank raised it (agree_on_inputs): rank 0 says it once, then all leave together
        print0(f"error: {e}", file=sys.stderr)
        status = 2
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()    # no rank exits before rank 0 has printed (torchrun stops the others when one exits)
    except KeyboardInterrupt:
        ckpt_dir = os.path.join(getattr(cfg, "out_dir", ""), "checkpoint")
        where = "" if not hasattr(cfg, "resume") else (
            f": the last checkpoint, {ckpt_dir}, is intact; run the same command again to resume from it"
            if os.path.exists(ckpt_dir) else ": no checkpoint had been written yet")
        print0(f"interrupted (Ctrl-C){where}", file=sys.stderr)
        status = 130
    except SystemExit as e:   # a check that failed with a message (e.g. an impossible batch size), or a stop
        if isinstance(e.code, str):
            print0(e.code, file=sys.stderr)
        status = e.code if isinstance(e.code, int) else 2
    except BaseException:     # a bug, or this rank ran out of memory: its traceback, then leave at once
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            raise
        # The other ranks may be waiting for this one in a collective (for --dist_timeout_minutes): tearing the
        # process group down could wait on them too. Exiting ends the job: torchrun stops the others.
        traceback.print_exc()
        print(f"rank {dist.get_rank()}: stopped by the error above; torchrun stops the other ranks", file=sys.stderr,
              flush=True)
        sys.stdout.flush()
        os._exit(1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(status)


def init_distributed(device: str = "auto", timeout_minutes: float = 120.0):
    """One code path for 1 and N processes: always a process group (gloo on CPU, nccl on CUDA).
    timeout_minutes: how long a rank may wait in a collective for the others. Ranks decode their rollouts on their
    own and meet afterwards, so a rank waits as long as the slowest one's rollout takes beyond its own; NCCL's
    default of 10 minutes would abort a run with 32K-token responses. Returns (rank, world_size, device)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    timeout = datetime.timedelta(minutes=timeout_minutes)
    if not dist.is_initialized():
        if "RANK" in os.environ:   # launched by torchrun
            dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
        else:                      # plain `python x.py`: a world of one, no ports
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    rank = dist.get_rank()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    return rank, dist.get_world_size(), dev


def set_threads(threads: int, device: torch.device) -> int:
    """Intra-op threads of this process, chosen on purpose: --threads, else $OMP_NUM_THREADS, else the usable
    cores shared out among the ranks of this machine. Threads that wait actively for each other (OpenMP's
    default) crawl when a core is busy with other work: one RL step's generation on 2 cores beside a busy
    process took 62 s with 2 threads, 4.8 s with 1, 7.2 s with 2 and OMP_WAIT_POLICY=PASSIVE, which every
    entry point therefore sets before torch loads (unless the environment sets it)."""
    if threads:
        n, why = threads, "--threads"
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit():
        n, why = int(os.environ["OMP_NUM_THREADS"]), "$OMP_NUM_THREADS"
    else:
        n, why = cores_per_rank(), f"usable cores / {os.environ.get('LOCAL_WORLD_SIZE', 1)} local rank(s)"
    torch.set_num_threads(n)
    print0(f"threads: {n} per rank ({why}; OpenMP wait policy {os.environ.get('OMP_WAIT_POLICY', 'default')}) on {device}")
    return n


def cores_per_rank() -> int:
    """This machine's usable cores (its CPU affinity) shared out among the ranks it runs, at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def print0(*args, **kwargs):
    """print on rank 0 only (and in a single process)."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs, flush=True)


class InputError(Exception):
    """Bad input from the user (an option, a data file, a checkpoint): shown as one line, exit status 2."""


# The errors the project declares for bad input: data that cannot be read (data.DataError), a path that is not there
# (FileNotFoundError and kin), a directory that is not a Qwen3 checkpoint (model.CheckpointError). Anything else
# (a ValueError or KeyError inside model building, say) is a bug and keeps its traceback.
_INPUT_ERRORS = (*data.INPUT_ERRORS, CheckpointError)


def read_input(option: str, load, *args, **kwargs):
    """load(*args, **kwargs), with a declared input error turned into one InputError naming the option."""
    try:
        return load(*args, **kwargs)
    except _INPUT_ERRORS as e:
        raise InputError(f"{option}: {e}") from None


def agree_on_inputs(load):
    """Run load() on every rank; if it raised InputError on any rank, raise the first one on every rank, so
    all exit together (rank 0 prints it) instead of some waiting forever in the next collective."""
    try:
        result, error = load(), None
    except InputError as e:
        result, error = None, str(e)
    errors = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    first = next((e for e in errors if e), None)
    if first:
        raise InputError(first)
    return result


def shard_model(model: Qwen3, device: torch.device, param_dtype: torch.dtype | None = None):
    """FSDP2 as torchtitan does it: each decoder layer is a unit, then the root (embeddings, norm, head).
    Parameters are gathered for compute in param_dtype and gradients reduced in fp32; the sharded master
    weights keep their own dtype (fp32). param_dtype None: bf16 on GPU, no cast on CPU (all fp32);
    torch.bfloat16 on CPU runs the GPU's mixed precision there (the tests do). One CPU rank without a cast keeps
    the plain module (DCP checkpoints and the HF export read it the same way)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    if param_dtype is None and device.type == "cuda":
        param_dtype = torch.bfloat16
    if param_dtype is None and dist.get_world_size() == 1:
        # one rank, nothing to cast: FSDP2 would only copy every parameter in and every gradient out of its flat
        # buffers on each pass (~10% of a toy update); the plain module computes the same numbers
        return model
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype is not None \
        else MixedPrecisionPolicy()
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def load_sharded(path: str, device: torch.device, param_dtype: torch.dtype | None = None) -> Qwen3:
    """A Hugging Face checkpoint as fp32 master weights, FSDP2-sharded (shard_model), without any rank ever holding a
    full fp32 copy: the model is built on the meta device and sharded, rank 0 reads the checkpoint in its stored dtype
    (host memory), and each tensor is broadcast in turn; every rank keeps its shard, cast to fp32 (torch's
    set_model_state_dict, broadcast_from_rank0). Per GPU, an 8B model then costs its 1/N fp32 shard and one tensor in
    flight, not 30.5 GiB. One rank without a cast: the plain module, read straight into fp32."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    model = shard_model(on_meta(path, torch.float32), device, param_dtype)
    if not hasattr(next(model.parameters()), "full_tensor"):   # not sharded (one CPU rank): read in place
        model.load_state_dict(read_weights(path, model, torch.float32, device), strict=False, assign=True)
        model.tie_weights()
        return model
    model.to_empty(device=device)
    weights = read_weights(path, model) if dist.get_rank() == 0 else {}   # errors: every rank reads the header
    if model.config.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                                  strict=False))
    return model


def save_checkpoint(path: str, model, optimizer, trainer_state: dict):
    """Sharded DCP checkpoint written to a temp dir and renamed, so a kill never leaves half a checkpoint."""
    import torch.distributed.checkpoint as dcp
    tmp = path + ".tmp"
    if dist.get_rank() == 0 and os.path.exists(tmp):
        shutil.rmtree(tmp)
    dist.barrier()
    dcp.save(checkpoint_state(model, optimizer), checkpoint_id=tmp)
    if dist.get_rank() == 0:
        with open(os.path.join(tmp, "trainer_state.json"), "w") as fh:
            json.dump(trainer_state, fh)
        if os.path.exists(path):
            shutil.rmtree(path)
        os.rename(tmp, path)
    dist.barrier()


def load_checkpoint(path: str, model, optimizer) -> dict:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict
    state = checkpoint_state(model, optimizer)
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    with open(os.path.join(path, "trainer_state.json")) as fh:
        return json.load(fh)


def checkpoint_state(model, optimizer):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def open_metrics(path: str, step: int):
    """Rank 0's metrics JSONL, positioned at `step`: records of later steps (logged by a run that died
    before its next checkpoint) are dropped, so a resumed run does not log a step twice."""
    if dist.get_rank() != 0:
        return None
    kept = []
    if os.path.exists(path):
        with open(path) as fh:
            kept = [line for line in fh if line.strip() and json.loads(line).get("step", 0) <= step]
    fh = open(path, "w")
    fh.writelines(kept)
    fh.flush()
    return fh


class GracefulStop:
    """SIGTERM (what cluster schedulers send before preemption) and Ctrl-C ask the training loop to stop at
    the next step boundary and write a checkpoint. A second Ctrl-C, after the first has been acknowledged,
    quits at once (the last checkpoint stays intact: checkpoints are written to a temp dir, then renamed).
    `poll()` is called once per step by every rank; one all-reduce makes every rank take the same decision,
    also for the wall-clock checkpoint (every `minutes`), so a hard kill loses at most that much work."""

    def __init__(self, minutes: float, device):
        self.minutes, self.device, self.signum, self.acknowledged = minutes, device, None, False
        self.last_checkpoint = time.monotonic()
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, frame):
        if self.acknowledged and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    def poll(self) -> tuple:
        """(stop now?, checkpoint now?), the same on every rank."""
        due = self.minutes > 0 and time.monotonic() - self.last_checkpoint > 60 * self.minutes
        flags = torch.tensor([self.signum or 0, float(due)], dtype=torch.float64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        if flags[0] and not self.acknowledged:
            self.signum, self.acknowledged = int(flags[0]), True
            print0(f"received {signal.Signals(self.signum).name}: stopping at this step boundary, "
                   "writing a checkpoint first (Ctrl-C again to quit without it)")
        return bool(flags[0]), bool(flags[0] or flags[1])

    def checkpointed(self):
        self.last_checkpoint = time.monotonic()

    def exit(self, step: int, ckpt_dir: str):
        """After the stop's checkpoint: one line saying where it is, then exit 128 + the signal's number."""
        print0(f"stopped by {signal.Signals(self.signum).name} after step {step}: checkpoint in {ckpt_dir}; "
               "run the same command again to resume from it")
        raise SystemExit(128 + self.signum)

    def close(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def checkpointing_on(setting: str, device: torch.device) -> bool:
    """--activation_checkpointing: auto is on on a GPU (a 32K-token row saves 7.7 GiB per layer of Qwen3-8B for the
    backward without it) and off on CPU (the toy's rows are short); said once at start."""
    on = device.type == "cuda" if setting == "auto" else setting == "true"
    print0(f"activation checkpointing: {'on' if on else 'off'}" + (f" (auto, on {device.type})" if setting == "auto" else ""))
    return on


EXPORT_DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}


def export_dtype_of(setting: str, stored: torch.dtype) -> torch.dtype:
    """--export_dtype: auto exports in the dtype the run started from (a Qwen3 base model's bf16, not the fp32 master
    weights: 16 GB instead of 33 for 8B; float32 for a model trained from scratch)."""
    return EXPORT_DTYPES[setting] or stored


def export_hf(model, out_dir: str, tokenizer_dir: str | None = None, dtype: torch.dtype = torch.float32):
    """Gather the full weights on rank 0 and write a Hugging Face directory (+ tokenizer files), in `dtype`."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        save_pretrained(model, out_dir, state_dict={name: t.to(dtype) for name, t in sd.items()})
        if tokenizer_dir:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                src = os.path.join(tokenizer_dir, name)
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(out_dir, name))
    dist.barrier()


if __name__ == "__main__":
    run_entry_point(main, parse_config(SFTConfig, usage="usage: python sft.py [--key=value ...]   "
                                                        "(torchrun --nproc_per_node=N sft.py ... for N processes)"))
