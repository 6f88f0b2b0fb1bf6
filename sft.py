"""Long chain-of-thought SFT with FSDP2 — stage one of Klear-Reasoner.

The model learns to imitate a teacher's reasoning: for every assistant token t of every conversation
in the global batch (all ranks, all micro-batches),

    L = (1 / N_assistant_tokens) * sum_t  -log p_theta(x_t | x_<t)

Conversations are packed into fixed-size rows (positions restart per document and attention never
crosses a document boundary, see data.py), so no compute is spent on padding. The paper (method.md §1):
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
Infrastructure shared with gppo.py and eval.py lives here too: the `--key=value` config parser,
process-group setup, FSDP2 wrapping, checkpoints and Hugging Face export.
"""
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

import data
from model import Qwen3, Qwen3Config, from_pretrained, save_pretrained


@dataclass
class SFTConfig:
    # data: a JSONL of conversations (`messages` or `conversations`); empty = the built-in toy tasks
    data: str = ""
    tokenizer: str = ""              # dir or tokenizer.json; empty with toy data = the toy tokenizer
    max_len: int = 512               # longer conversations follow `overlong`
    overlong: str = "truncate"       # truncate | drop (either way the count is reported)
    toy_math_examples: int = 12000
    toy_code_examples: int = 3000
    toy_wrong_fraction: float = 0.3  # share of hard toy math traces that end wrong ("mixed" data)
    # model: a Hugging Face directory, or empty = a tiny Qwen3 from scratch with the sizes below
    init_from: str = ""
    n_layer: int = 4
    hidden: int = 128
    n_head: int = 4
    n_kv_head: int = 2
    head_dim: int = 32
    intermediate: int = 384
    # optimisation
    row_tokens: int = 2048           # tokens per packed row
    rows_per_step: int = 8           # global batch, in rows (across all ranks)
    micro_rows: int = 1              # rows per forward/backward on one rank
    epochs: int = 4
    max_steps: int = -1              # stop after this many steps (the LR schedule still spans all epochs); -1 = all
    lr: float = 2e-3
    min_lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    activation_checkpointing: bool = False
    loss_chunk: int = 4096           # tokens per LM-head chunk in the loss
    # bookkeeping
    out_dir: str = "out/sft"
    seed: int = 1234
    log_every: int = 10
    ckpt_every: int = 200            # DCP checkpoint every k steps (and at the end); 0 = only at the end
    resume: bool = True              # continue from out_dir/checkpoint if it exists
    device: str = "auto"             # auto | cpu | cuda


# ----------------------------------------------------------------------------- shared infrastructure

def parse_config(cls, argv=None):
    """Build a config dataclass from `--key=value` arguments; unknown keys and bad values fail loudly."""
    argv = sys.argv[1:] if argv is None else argv
    types = {f.name: f.type for f in dataclasses.fields(cls)}
    values = {}
    for arg in argv:
        if arg in ("-h", "--help"):
            print(f"{cls.__name__} options (--key=value):")
            for f in dataclasses.fields(cls):
                print(f"  --{f.name}={f.default!r}")
            sys.exit(0)
        if not arg.startswith("--") or "=" not in arg:
            raise SystemExit(f"error: argument {arg!r} is not of the form --key=value")
        key, raw = arg[2:].split("=", 1)
        if key not in types:
            close = [k for k in types if k.split("_")[0] == key.split("_")[0]]
            raise SystemExit(f"error: unknown option --{key} for {cls.__name__}" + (f" (did you mean {close}?)" if close else ""))
        typ = types[key] if isinstance(types[key], type) else eval(types[key], {})  # annotations may be strings
        try:
            if typ is bool:
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError("expected true or false")
                values[key] = raw.lower() in ("true", "1")
            else:
                values[key] = typ(raw)
        except ValueError as e:
            raise SystemExit(f"error: --{key}={raw!r}: not a valid {typ.__name__} ({e})") from None
    return cls(**values)


def print0(*args, **kwargs):
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs, flush=True)


def init_distributed(device: str = "auto"):
    """One code path for 1 and N processes: always a process group (gloo on CPU, nccl on CUDA).
    Returns (rank, world_size, device)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if not dist.is_initialized():
        if "RANK" in os.environ:   # launched by torchrun
            dist.init_process_group("nccl" if use_cuda else "gloo")
        else:                      # plain `python x.py`: a world of one, no ports
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank = dist.get_rank()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    return rank, dist.get_world_size(), dev


def shard_model(model: Qwen3, device: torch.device, param_dtype: torch.dtype | None = None):
    """FSDP2 as torchtitan does it: each decoder layer is a unit, then the root (embeddings, norm, head).
    Parameters are gathered for compute in param_dtype and gradients reduced in fp32; the sharded master
    weights keep their own dtype (fp32). param_dtype None: bf16 on GPU, no cast on CPU (all fp32);
    torch.bfloat16 on CPU runs the GPU's mixed precision there (the tests do)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    if param_dtype is None and device.type == "cuda":
        param_dtype = torch.bfloat16
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype is not None \
        else MixedPrecisionPolicy()
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def build_model(cfg, vocab_size: int, device: torch.device) -> Qwen3:
    """The trainable model in fp32 master weights: a Hugging Face checkpoint, or a tiny one from scratch."""
    if cfg.init_from:
        model = from_pretrained(cfg.init_from, dtype=torch.float32, device=device)
    else:
        mcfg = Qwen3Config(vocab_size=vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                           num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                           num_key_value_heads=cfg.n_kv_head, head_dim=cfg.head_dim, max_position_embeddings=4096,
                           tie_word_embeddings=True, torch_dtype="float32", bos_token_id=None, eos_token_id=None)
        model = Qwen3(mcfg).to(device).init_weights(seed=cfg.seed)
    model.activation_checkpointing = cfg.activation_checkpointing
    return model


def checkpoint_state(model, optimizer):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


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


def export_hf(model, out_dir: str, tokenizer_dir: str | None = None):
    """Gather the full weights on rank 0 and write a Hugging Face directory (+ tokenizer files)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        save_pretrained(model, out_dir, state_dict=sd)
        if tokenizer_dir:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                src = os.path.join(tokenizer_dir, name)
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(out_dir, name))
    dist.barrier()


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


def lr_at(step: int, total_steps: int, lr: float, min_lr: float, warmup: int) -> float:
    """Linear warmup, then cosine decay from lr to min_lr at the last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


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


# ----------------------------------------------------------------------------- the SFT loop

def sft_loss_sum(model, batch, chunk: int):
    """batch: tensors (B, T). Sum of the NLL over assistant tokens (label = next token)."""
    hidden = model(batch["input_ids"], position_ids=batch["position_ids"], document_ids=batch["document_ids"],
                   return_hidden=True)                                     # (B, T, D)
    # next-token targets within each document: token t predicts t+1 only if both are in the same document
    targets = batch["input_ids"][:, 1:]
    mask = batch["loss_mask"][:, 1:] & (batch["document_ids"][:, 1:] == batch["document_ids"][:, :-1])
    D = hidden.shape[-1]
    return chunked_nll_sum(hidden[:, :-1].reshape(-1, D), model.lm_head.weight, targets.reshape(-1),
                           mask.reshape(-1), chunk)


def main(cfg: SFTConfig):
    rank, world, device = init_distributed(cfg.device)
    torch.manual_seed(cfg.seed)
    if cfg.rows_per_step % (world * cfg.micro_rows):
        raise SystemExit(f"error: rows_per_step={cfg.rows_per_step} must be a multiple of "
                         f"world_size*micro_rows={world}*{cfg.micro_rows}")
    os.makedirs(cfg.out_dir, exist_ok=True)

    # --- data: tokenizer, conversations, packed rows
    if cfg.data:
        if not cfg.tokenizer:
            raise SystemExit("error: --data needs --tokenizer (a dir or tokenizer.json, e.g. the base model's dir)")
        tokenizer, tokenizer_dir = data.load_tokenizer(cfg.tokenizer), cfg.tokenizer
        conversations = data.load_sft_jsonl(cfg.data)
    else:
        tokenizer_dir = os.path.join(cfg.out_dir, "tokenizer")
        if rank == 0:
            data.save_tokenizer(data.build_toy_tokenizer(), tokenizer_dir)
        dist.barrier()
        tokenizer = data.load_tokenizer(tokenizer_dir)
        conversations = data.toy_sft_conversations(cfg.toy_math_examples, cfg.toy_code_examples,
                                                   seed=cfg.seed, wrong_fraction=cfg.toy_wrong_fraction)
    tokenizer_dir = tokenizer_dir if os.path.isdir(tokenizer_dir) else os.path.dirname(tokenizer_dir)
    examples, report = data.encode_sft_dataset(tokenizer, conversations, cfg.max_len, cfg.overlong)
    print0(f"data: {report}")
    loader = data.PackedLoader(examples, row_tokens=cfg.row_tokens, rows_per_step=cfg.rows_per_step,
                               rank=rank, world_size=world, seed=cfg.seed, pad_id=data.special_token_ids(tokenizer)["endoftext"])
    total_steps = loader.steps_per_epoch * cfg.epochs          # the LR schedule always spans all epochs
    stop_step = total_steps if cfg.max_steps < 0 else min(cfg.max_steps, total_steps)
    print0(f"packing: {loader.num_rows} rows of {cfg.row_tokens} tokens, {loader.efficiency:.1%} real tokens; "
           f"{loader.steps_per_epoch} steps/epoch, {total_steps} steps" + (f", stopping after {stop_step}" if stop_step < total_steps else ""))

    # --- model, FSDP2, optimizer
    model = build_model(cfg, tokenizer.get_vocab_size(), device)
    n_params = sum(p.numel() for p in model.parameters())
    shard_model(model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                  weight_decay=cfg.weight_decay, foreach=True)
    print0(f"model: {n_params / 1e6:.2f}M parameters, world size {world}, device {device}")

    ckpt_dir = os.path.join(cfg.out_dir, "checkpoint")
    step = 0
    if cfg.resume and os.path.exists(ckpt_dir):
        state = load_checkpoint(ckpt_dir, model, optimizer)
        step = state["step"]
        loader.load_state_dict(state["loader"])
        print0(f"resumed from {ckpt_dir} at step {step}")
    metrics_file = open_metrics(os.path.join(cfg.out_dir, "metrics.jsonl"), step)

    t_start, tokens_seen, start_step = time.time(), 0, step
    while step < stop_step:
        rows = loader.next_step()                       # this rank's rows for one optimizer step
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total_steps, cfg.lr, cfg.min_lr, cfg.warmup_steps)
        # global normaliser: assistant tokens of this step on all ranks (counted as the loss counts them)
        local_tokens = sum(int((r["loss_mask"][1:] & (r["document_ids"][1:] == r["document_ids"][:-1])).sum())
                           for r in rows)
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
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        dist.all_reduce(loss_sum)
        loss = loss_sum.item() / n_tokens
        if not math.isfinite(loss) or not math.isfinite(float(grad_norm)):
            raise SystemExit(f"error: loss={loss} grad_norm={float(grad_norm)} at step {step}: stopping without "
                             f"updating; the last good checkpoint is {ckpt_dir} (try a lower --lr)")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        tokens_seen += sum(r["input_ids"].numel() for r in rows) * world
        if step % cfg.log_every == 0 or step == stop_step:
            elapsed = time.time() - t_start
            tok_s = tokens_seen / elapsed
            eta = (stop_step - step) * elapsed / (step - start_step)
            rec = dict(step=step, loss=round(loss, 5), lr=optimizer.param_groups[0]["lr"], grad_norm=float(grad_norm),
                       tokens_per_s=round(tok_s, 1), epoch=loader.epoch, elapsed_s=round(elapsed, 1))
            print0(f"step {step}/{stop_step} loss {loss:.4f} lr {rec['lr']:.2e} grad_norm {rec['grad_norm']:.3f} "
                   f"tok/s {tok_s:.0f} eta {eta / 60:.1f}min")
            if metrics_file:
                metrics_file.write(json.dumps(rec) + "\n")
                metrics_file.flush()
        if (cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == stop_step:
            save_checkpoint(ckpt_dir, model, optimizer, {"step": step, "loader": loader.state_dict()})

    export_hf(model, os.path.join(cfg.out_dir, "hf"), tokenizer_dir)
    print0(f"done: {step} steps in {(time.time() - t_start) / 60:.1f} min; Hugging Face export in {cfg.out_dir}/hf")
    if metrics_file:
        metrics_file.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(parse_config(SFTConfig))
