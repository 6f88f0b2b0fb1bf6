"""Long chain-of-thought SFT with FSDP2, stage one of Klear-Reasoner: the model learns to imitate a
teacher's reasoning.

For every assistant token t of every conversation in the global batch (all ranks, all
micro-batches):
    L = (1 / N_assistant_tokens) * sum_t -log p_theta(x_t | x_<t)
Conversations are packed into rows of row_tokens (parts/packing.py: attention never crosses a
document), the LM head runs in chunks of tokens (no tokens x vocabulary fp32 logits), checkpoints
are sharded (DCP) and resume exactly. The paper (§2, §4.1): LR 8e-5 cosine to 4e-5, 4 epochs, 32K
context, loss on assistant tokens only; on hard prompts keep the teacher's incorrect responses too
("mixed" data, distill.py).
Run:
  python sft.py                                   # the toy on CPU (train.sh's data): a tiny model from scratch
  torchrun --nproc_per_node=8 sft.py --init_from=/ckpt/Qwen3-8B-Base --tokenizer=/ckpt/Qwen3-8B-Base \
      --data=sft.jsonl --max_len=32768 --row_tokens=32768 --rows_per_step=64 --lr=8e-5 --min_lr=4e-5 --epochs=4
SIGTERM or Ctrl-C stops at a step boundary with a checkpoint; the same command resumes from it
(docs/running.md).
"""

import os

# read when torch loads OpenMP: see trainer.set_threads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dataclasses
import functools
import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

import data
from data import read
from model import Qwen3, Qwen3Config, check_checkpoint, hf_name, on_meta
from parts import hf_checkpoint, packing, tracking, trainer
from parts.hf_checkpoint import EXPORT_DTYPES, Export
from parts.cli import parse_config
from parts.trainer import Checkpointer, GracefulStop, InputError, MetricsLog, TrainingStopped
from parts.trainer import agree_on_inputs, check_run, init_distributed, on_for_device, print0
from parts.trainer import record_run, run_entry_point, set_threads, shard_model


@dataclass
class SFTConfig:
    # fmt: off
    # data (the formats data.py reads: .jsonl, .json or .parquet)
    data: str = ""                   # SFT conversations; empty = the toy's (--toy)
    skip_bad_rows: bool = False      # skip rows that cannot be learned from (malformed reasoning markers), counted
    tokenizer: str = ""              # dir or tokenizer.json; empty with the toy = the toy's
    max_len: int = 512               # longer conversations follow `overlong`
    overlong: str = "truncate"       # truncate | drop (either way the count is reported) | error
    toy: str = "countdown"           # no --data: the toy's run, distill.py's out/distill/sft.jsonl with the tokenizer
    #                                  out/toy/TOY/tokenizer (python tools/toy.py --task=TOY; train.sh makes both) |
    #                                  none: no toy (countdown | sums | none)
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
    rows_per_step: int = 2           # global batch in rows (all ranks); the toy learns faster from more, smaller steps
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
    activation_checkpointing: str = "auto"  # recompute each layer in the backward: auto (on GPU) | true | false
    loss_chunk: int = 4096           # tokens per LM-head chunk in the loss
    # bookkeeping
    out_dir: str = "out/sft"         # config.json, checkpoint/, metrics.jsonl, exports/, hf (link to the newest export)
    export_dtype: str = "auto"       # the export's dtype: auto (the --init_from checkpoint's; fp32 from scratch) | ...
    keep_exports: int = 3            # step exports kept in exports/ (the newest); 0 = all
    seed: int = 1234                 # model init, data order
    log_every: int = 10              # print and log a metrics record every k steps
    report_to: str = ""              # metrics also to: tensorboard, wandb (comma-separated; parts/tracking.py)
    ckpt_every: int = 200            # DCP checkpoint every k steps (and at the end); 0 = only at the end
    ckpt_minutes: float = 30.0       # ... and every this many minutes (0 = off); SIGTERM/Ctrl-C also save one
    ckpt_background: bool = True     # write checkpoints while training goes on (host RAM: a copy of the shards)
    resume: bool = True              # continue the run in out_dir (same settings); false: start over, removing it
    device: str = "auto"             # auto | cpu | cuda
    threads: int = 0                 # CPU threads per rank; 0 = usable cores / ranks on this machine
    dist_timeout_minutes: float = 120.0  # how long a rank may wait for the others in a collective
    # fmt: on

    def __post_init__(self):
        checks = [
            (
                self.overlong in ("truncate", "drop", "error"),
                "overlong must be truncate, drop or error",
            ),
            (
                self.activation_checkpointing in ("auto", "true", "false"),
                "activation_checkpointing must be auto, true or false",
            ),
            (
                self.export_dtype in EXPORT_DTYPES,
                f"export_dtype must be one of {', '.join(EXPORT_DTYPES)}",
            ),
            (self.n_head % self.n_kv_head == 0, "n_head must be a multiple of n_kv_head (GQA)"),
            (self.toy in data.TOY_TASKS, f"toy must be one of {', '.join(data.TOY_TASKS)}"),
            (
                self.micro_rows >= 1 and self.rows_per_step >= 1,
                "micro_rows and rows_per_step must be >= 1",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise ValueError(f"SFTConfig: {why}")
        tracking.backends(self.report_to)  # a missing package: one line now, before the data


# What a resume may change: how far, how often to log, save and export, where and how fast it runs
# (micro_rows and loss_chunk change the order of float sums only). Any other option must be the
# run's own (trainer.check_run).
RESUME_MAY_CHANGE = (
    "max_steps",
    "log_every",
    "report_to",
    "ckpt_every",
    "ckpt_minutes",
    "ckpt_background",
    "resume",
    "out_dir",
    "export_dtype",
    "keep_exports",
    "device",
    "threads",
    "dist_timeout_minutes",
    "activation_checkpointing",
    "micro_rows",
    "loss_chunk",
)


# ------------------------------------------------------------------------- main, then what it calls


def main(cfg: SFTConfig):
    rank, world, device = init_distributed(cfg.device, cfg.dist_timeout_minutes)
    set_threads(cfg.threads, device)
    torch.manual_seed(cfg.seed)
    if cfg.rows_per_step % (world * cfg.micro_rows):
        raise InputError(
            f"--rows_per_step={cfg.rows_per_step} must be a multiple of world size x --micro_rows "
            f"= {world} x {cfg.micro_rows}"
        )
    # a resume must be the run in out_dir: checked first
    resuming = check_run(cfg, "sft.py", RESUME_MAY_CHANGE)

    # the checkpoint first: a wrong --init_from is said before the data is read and tokenized
    def load():
        stored = None  # the dtype its weights are stored in
        if cfg.init_from:
            if not os.path.isdir(cfg.init_from):  # a Hugging Face Hub id, say: how to download it
                raise InputError(
                    f"--init_from={cfg.init_from}: no such directory"
                    + data.hub_hint(cfg.init_from, "model")
                )
            stored = read(f"--init_from={cfg.init_from}", check_checkpoint, cfg.init_from)
        tokenizer, tokenizer_dir, loader = load_sft_data(cfg, rank, world)
        generation = read(
            f"--init_from={cfg.init_from}",
            hf_checkpoint.generation_config,
            data.stop_token_ids(tokenizer),
            cfg.init_from,
        )
        export = Export(
            cfg.out_dir,
            tokenizer_dir,
            EXPORT_DTYPES[cfg.export_dtype] or stored or torch.float32,
            generation,
            hf_name,
            cfg.keep_exports,
        )
        return tokenizer.get_vocab_size(), loader, export

    vocab_size, loader, export = agree_on_inputs(load)
    # config.json; from step 0: an earlier run removed
    record_run(cfg, "sft.py", RESUME_MAY_CHANGE, resuming)
    # collectives: only once every rank has its inputs
    model = build_model(cfg, vocab_size, device)
    # the LR schedule always spans all epochs
    total_steps = loader.steps_per_epoch * cfg.epochs
    stop_step = total_steps if cfg.max_steps < 0 else min(cfg.max_steps, total_steps)
    print0(
        f"packing: {loader.num_rows} rows of {cfg.row_tokens} tokens, {loader.efficiency:.1%} real tokens; "
        f"{loader.steps_per_epoch} steps/epoch, {total_steps} steps, stopping after {stop_step}"
    )
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        weight_decay=cfg.weight_decay,
        foreach=True,
    )
    print0(
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, world size {world}, {device}"
    )
    ckpt = Checkpointer(os.path.join(cfg.out_dir, "checkpoint"), cfg.ckpt_background)
    state = ckpt.resume(model, optimizer) if resuming else None  # the newest complete checkpoint
    step = state["step"] if state else 0
    if state:
        read(f"{cfg.out_dir}/checkpoint (--resume=true)", loader.load_state_dict, state["loader"])
    tracker = (
        tracking.Tracker(cfg.report_to, cfg.out_dir, dataclasses.asdict(cfg), step)
        if rank == 0
        else None
    )
    metrics = MetricsLog(os.path.join(cfg.out_dir, "metrics.jsonl"), step, mirror=tracker)
    stop = GracefulStop(cfg.ckpt_minutes, device)
    t_start = time.time()
    tokens_seen = 0
    start_step = step
    try:
        with ckpt:  # a stop or an error says which step the same command resumes from
            while step < stop_step:
                # this rank's rows for one optimizer step
                rows = loader.next_step()
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, total_steps, cfg.lr, cfg.min_lr, cfg.warmup_steps)
                loss, grad_norm = train_step(model, optimizer, rows, cfg, device, world)
                step += 1
                tokens_seen += sum(r["input_ids"].numel() for r in rows) * world
                if step % cfg.log_every == 0 or step == stop_step:
                    elapsed = time.time() - t_start
                    metrics.write(
                        dict(
                            step=step,
                            loss=round(loss, 5),
                            lr=optimizer.param_groups[0]["lr"],
                            grad_norm=grad_norm,
                            tokens_per_s=round(tokens_seen / elapsed, 1),
                            epoch=loader.epoch,
                            elapsed_s=round(elapsed, 1),
                        )
                    )
                    print0(
                        f"step {step}/{stop_step} loss {loss:.4f} lr {optimizer.param_groups[0]['lr']:.2e} "
                        f"grad_norm {grad_norm:.3f} tok/s {tokens_seen / elapsed:.0f} "
                        f"eta {(stop_step - step) * elapsed / (step - start_step) / 60:.1f}min"
                    )
                stop.step_done(
                    step,
                    (cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == stop_step,
                    lambda: ckpt.save(
                        model, optimizer, {"step": step, "loader": loader.state_dict()}
                    ),
                    ckpt,
                )
            ckpt.wait()
    finally:
        stop.close()
        metrics.close()
    trainer.export_hf(model, export, step)
    print0(
        f"done: {step} steps in {(time.time() - t_start) / 60:.1f} min; Hugging Face export in {cfg.out_dir}/hf"
    )


def load_sft_data(cfg: SFTConfig, rank: int, world: int):
    """The tokenizer (and the directory its files are in) and this rank's packed-row loader, from
    --data and --tokenizer, or the toy's. Raises InputError for anything wrong in what the user
    gave."""
    sft_data = cfg.data
    tokenizer_path = cfg.tokenizer
    # the toy: distill.py's output on the toy teacher's files
    if not (sft_data or cfg.toy == "none"):
        sft_data = os.path.join("out", "distill", "sft.jsonl")
        if not os.path.isfile(sft_data):
            raise InputError(
                f"--toy={cfg.toy}: no {sft_data}: distill.py writes it from the files of `python "
                f"tools/toy.py --task={cfg.toy}` (bash train.sh runs both), or give --data"
            )
        tokenizer_path = tokenizer_path or read(
            f"--toy={cfg.toy}", data.toy_files, cfg.toy, "tokenizer"
        )
    if not sft_data:
        raise InputError("no SFT data: give --data (or --toy=countdown|sums)")
    if not tokenizer_path:
        raise InputError(
            "--data needs --tokenizer (a dir or tokenizer.json, e.g. the base model's dir)"
        )
    tokenizer = read(f"--tokenizer={tokenizer_path}", data.load_tokenizer, tokenizer_path)
    tokenizer_dir = (
        tokenizer_path if os.path.isdir(tokenizer_path) else os.path.dirname(tokenizer_path)
    )
    conversations = read("--data", data.load_sft_jsonl, sft_data, skip_bad_rows=cfg.skip_bad_rows)
    print0(f"data file: {conversations.report}")
    examples, report = read(
        "--data", data.encode_sft_dataset, tokenizer, conversations, cfg.max_len, cfg.overlong
    )
    print0(f"data: {report}")
    if not examples:
        raise InputError(f"--data={sft_data}: no conversation left to train on ({report})")
    loader = packing.PackedLoader(
        examples,
        row_tokens=cfg.row_tokens,
        rows_per_step=cfg.rows_per_step,
        rank=rank,
        world_size=world,
        seed=cfg.seed,
        pad_id=data.special_token_ids(tokenizer)["endoftext"],
    )
    return tokenizer, tokenizer_dir, loader


def build_model(cfg, vocab_size: int, device: torch.device) -> Qwen3:
    """The trainable model in fp32 master weights, FSDP2-sharded: a Hugging Face checkpoint, or a
    tiny one."""
    if cfg.init_from:
        # sharded, then filled from rank 0's reading
        on_meta_fp32 = on_meta(cfg.init_from, torch.float32)
        weights = functools.partial(
            hf_checkpoint.read_weights, cfg.init_from, on_meta_fp32, hf_name
        )
        model = trainer.load_sharded(on_meta_fp32, weights, device)
    else:
        mcfg = Qwen3Config(
            vocab_size=vocab_size,
            hidden_size=cfg.hidden,
            intermediate_size=cfg.intermediate,
            num_hidden_layers=cfg.n_layer,
            num_attention_heads=cfg.n_head,
            num_key_value_heads=cfg.n_kv_head,
            head_dim=cfg.head_dim,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            torch_dtype="float32",
            bos_token_id=None,
            eos_token_id=None,
        )
        model = shard_model(Qwen3(mcfg).to(device).init_weights(seed=cfg.seed), device)
    model.activation_checkpointing = on_for_device(
        "activation checkpointing", cfg.activation_checkpointing, device
    )
    # the RoPE table long enough, so positions on a GPU need no check
    model.rotary.reserve(cfg.row_tokens)
    return model


def lr_at(step: int, total_steps: int, lr: float, min_lr: float, warmup: int) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def train_step(model, optimizer, rows, cfg: SFTConfig, device, world: int) -> tuple:
    """One optimizer step on this rank's packed rows; the loss is a token-mean over all ranks'
    assistant tokens. Returns (loss, grad_norm)."""
    # global normaliser: assistant tokens of this step on all ranks (counted as the loss counts
    # them)
    local_tokens = sum(int(target_mask(r["loss_mask"], r["document_ids"]).sum()) for r in rows)
    n_tokens = torch.tensor([local_tokens], dtype=torch.float64, device=device)
    dist.all_reduce(n_tokens)
    n_tokens = max(1.0, n_tokens.item())
    loss_sum = torch.zeros((), device=device)
    for i in range(0, len(rows), cfg.micro_rows):
        # on the CPU
        batch = {k: torch.stack([r[k] for r in rows[i : i + cfg.micro_rows]]) for k in rows[0]}
        micro = sft_loss_sum(model, batch, cfg.loss_chunk)
        # FSDP averages gradients over ranks; multiply by world so the result is a global token-mean
        (micro * world / n_tokens).backward()
        loss_sum += micro.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
    dist.all_reduce(loss_sum)
    # one transfer for both
    loss, grad_norm = torch.stack([loss_sum / n_tokens, grad_norm.float()]).tolist()
    # the Checkpointer adds what a rerun resumes from
    if not math.isfinite(loss) or not math.isfinite(grad_norm):
        raise TrainingStopped(
            f"loss={loss} grad_norm={grad_norm}: stopping without updating (try a lower --lr)"
        )
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, grad_norm


def sft_loss_sum(model, batch, chunk: int):
    """batch: tensors (B, T), best on the CPU (ids are moved to the model's device). Sum of the NLL
    over assistant tokens (label = next token). Documents and masks stay on the CPU: reading them
    never waits for the GPU."""
    device = next(model.parameters()).device
    documents = batch["document_ids"].cpu()
    ids = batch["input_ids"].to(device)
    hidden = model(
        ids,
        position_ids=batch["position_ids"].to(device),
        document_ids=documents,
        return_hidden=True,
    )
    mask = target_mask(batch["loss_mask"].cpu(), documents)  # (B, T-1)
    D = hidden.shape[-1]
    return chunked_nll_sum(
        hidden[:, :-1].reshape(-1, D),
        model.lm_head.weight,
        ids[:, 1:].reshape(-1),
        mask.reshape(-1),
        chunk,
    )


def target_mask(loss_mask, document_ids):
    """(..., T) -> (..., T-1): which next-token targets the loss counts. Token t predicts t+1 only
    if t+1 is an assistant token and both are in the same document."""
    return loss_mask[..., 1:] & (document_ids[..., 1:] == document_ids[..., :-1])


def chunked_nll_sum(hidden, lm_head_weight, targets, mask, chunk: int):
    """sum over masked tokens of -log softmax(hidden @ W^T)[target] (hidden (N, D), targets (N,),
    mask (N,) on the CPU), a chunk of tokens at a time, recomputed in the backward: one (chunk, V)
    block of logits alive at a time."""
    from torch.utils.checkpoint import checkpoint

    def piece(hidden_chunk, target_chunk, counted):
        logits = (hidden_chunk @ lm_head_weight.T).float()  # (chunk, V)
        return (F.cross_entropy(logits, target_chunk, reduction="none") * counted).sum()

    # start from a zero that is connected to the graph: a step whose rows are all padding must still
    # run a backward on every rank (FSDP's collectives), and every parameter must get a (zero)
    # gradient
    nll_sum = (hidden.sum() + lm_head_weight.sum()).float() * 0.0
    for s in range(0, hidden.shape[0], chunk):
        sl = slice(s, s + chunk)
        if mask[sl].any():
            counted = mask[sl].to(hidden.device).float()
            chunk_nll = checkpoint(piece, hidden[sl], targets[sl], counted, use_reentrant=False)
            nll_sum = nll_sum + chunk_nll
    return nll_sum


if __name__ == "__main__":
    run_entry_point(
        main,
        parse_config(
            SFTConfig,
            usage="usage: python sft.py [--key=value ...]   "
            "(torchrun --nproc_per_node=N sft.py ... for N processes)",
        ),
    )
