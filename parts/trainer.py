"""Trainer plumbing for PyTorch training scripts with FSDP2 that run the same with 1 process and
with torchrun.

    rank, world, device = init_distributed("auto")    # gloo on CPU, nccl on CUDA; a world of one needs no torchrun
    model = shard_model(model, device)                # FSDP2 per block of model.layers, then the root
    resuming = check_run(cfg, "train.py", may_change)  # a resume must be the same run (out_dir/config.json)
    ckpt = Checkpointer(root); ckpt.resume(model, opt)   # sharded DCP: the newest complete checkpoint
    ckpt.save(model, opt, state)                      # in the background, committed atomically when whole
    run_entry_point(main, cfg)                        # bad input: one line from rank 0, exit status 2
Also: threads per rank, InputError and agree_on_inputs (every rank stops together on bad input),
TrainingStopped (a NaN: one line, the step a rerun resumes from), loading the full weights from
rank 0 into the shards (no rank holds a full fp32 copy) and copying them into a plain model in
place, work spread evenly over the ranks (balance_ranks, lockstep), the metrics file (strict JSON),
the graceful stop on SIGTERM and Ctrl-C with a checkpoint, the full state dict gathered on rank 0
for an export and its atomic publication (out_dir/hf, a link to exports/step-N). torch only.
"""

import atexit
import dataclasses
import datetime
import json
import math
import os
import re
import shutil
import signal
import sys
import time
import traceback
import zlib
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.distributed as dist

# DCP's failure, gathered from every rank
from torch.distributed.checkpoint.api import CheckpointException


# ------------------------------------------------------------ the entry point and the process group


def run_entry_point(main, cfg, **kwargs):
    """What every `python X.py` runs: main(cfg), with bad input as one line from rank 0 (exit status
    2) and Ctrl-C outside the training loop as one line (exit status 130), never a traceback per
    rank."""
    status = 0
    try:
        main(cfg, **kwargs)
    except (InputError, TrainingStopped) as e:  # every rank raised it: rank 0 says it, all leave
        print0(f"error: {e}", file=sys.stderr)
        status = 2
        if dist.is_initialized() and dist.get_world_size() > 1:
            # no rank exits before rank 0 has printed (torchrun stops the others when one exits)
            dist.barrier()
    # a training loop's Checkpointer says which step a rerun resumes from
    except KeyboardInterrupt as e:
        print0(f"interrupted (Ctrl-C){': ' + str(e) if str(e) else ''}", file=sys.stderr)
        status = 130
    except SystemExit as e:  # a deliberate exit that has said why (a graceful stop: 128 + signal)
        if isinstance(e.code, str):
            print0(e.code, file=sys.stderr)
        status = e.code if isinstance(e.code, int) else 2
    # a bug, or this rank ran out of memory: its traceback, then leave at once
    except BaseException:
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            raise
        # The other ranks may be waiting for this one in a collective (for --dist_timeout_minutes):
        # tearing the process group down could wait on them too. Exiting ends the job: torchrun
        # stops the others.
        traceback.print_exc()
        print(
            f"rank {dist.get_rank()}: stopped by the error above; torchrun stops the other ranks",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(status)


def init_distributed(device: str = "auto", timeout_minutes: float = 120.0):
    """One code path for 1 and N processes: always a process group (gloo on CPU, nccl on CUDA).
    timeout_minutes: how long a rank may wait in a collective for the others. Ranks decode their
    rollouts on their own and meet afterwards, so a rank waits as long as the slowest one's rollout
    takes beyond its own; NCCL's default of 10 minutes would abort a run with 32K-token responses.
    Returns (rank, world_size, device)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    timeout = datetime.timedelta(minutes=timeout_minutes)
    if not dist.is_initialized():
        if "RANK" in os.environ:  # launched by torchrun
            dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timeout)
        else:  # plain `python x.py`: a world of one, no ports
            dist.init_process_group(
                "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
            )
        # a script that never destroys the group (a copy of this file used alone): torn down
        # before the interpreter's own teardown (a defence against one SIGABRT seen at exit,
        # "terminate called without an active exception"; its cause was not proven)
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())
    rank = dist.get_rank()
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    return rank, dist.get_world_size(), dev


def set_threads(threads: int, device: torch.device) -> int:
    """Intra-op threads of this process, chosen on purpose: --threads, else $OMP_NUM_THREADS, else
    the usable cores shared out among the ranks of this machine. Threads that wait actively for each
    other (OpenMP's default) crawl when a core is busy with other work, so every entry point sets
    OMP_WAIT_POLICY=PASSIVE before torch loads (unless the environment sets it;
    benchmarks/RESULTS.md has the measurement)."""
    if threads:
        n = threads
        why = "--threads"
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit():
        n = int(os.environ["OMP_NUM_THREADS"])
        why = "$OMP_NUM_THREADS"
    else:
        n = cores_per_rank()
        why = f"usable cores / {os.environ.get('LOCAL_WORLD_SIZE', 1)} local rank(s)"
    torch.set_num_threads(n)
    print0(
        f"threads: {n} per rank ({why}; OpenMP wait policy {os.environ.get('OMP_WAIT_POLICY', 'default')}) on {device}"
    )
    return n


def cores_per_rank() -> int:
    """This machine's usable cores (its CPU affinity) shared out among the ranks it runs, at least
    1."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def print0(*args, **kwargs):
    """print on rank 0 only (and in a single process)."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, **kwargs, flush=True)


class InputError(Exception):
    """Bad input from the user (an option, a data file, a checkpoint): shown as one line, exit
    status 2."""


class TrainingStopped(Exception):
    """A run that cannot go on, though its input was good: a loss or gradient norm that is NaN or
    infinite. Every rank raises it at the same step, before the update; shown as one line that the
    Checkpointer completes with the step a rerun resumes from, exit status 2."""


def agree_on_inputs(load):
    """Run load() on every rank; if it raised InputError on any rank, raise the first one on every
    rank, so all exit together (rank 0 prints it) instead of some waiting forever in the next
    collective."""
    try:
        result = load()
        error = None
    except InputError as e:
        result = None
        error = str(e)
    errors = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    first = next((e for e in errors if e), None)
    if first:
        raise InputError(first)
    return result


def global_sums(values: dict, device) -> dict:
    """{name: number or 0-dim tensor} summed over all ranks: one all-reduce in float64, one transfer
    to the host."""
    t = torch.stack(
        [
            torch.as_tensor(v, dtype=torch.float64, device=device).reshape(())
            for v in values.values()
        ]
    )
    dist.all_reduce(t)
    return dict(zip(values, t.tolist()))


def all_gather(obj) -> list:
    """Every rank's `obj` (any picklable value), in rank order, on every rank."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def global_max(x, device) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


# ----------------------------------------------------------------------------- work over the ranks


def balance_ranks(batches: list, size, rank: int, world: int) -> list:
    """Per batch (this rank's list of items), move items between ranks so that each rank holds
    about the mean total size(item): every rank waits for the busiest in each collective. Only the
    sizes travel to plan (balance_plan); then only the items that move, which join their new rank's
    list by source rank and index (so items that were together stay together). Collective."""
    if world == 1:
        return batches
    sizes = [None] * world
    dist.all_gather_object(sizes, [[size(item) for item in items] for items in batches])
    plans = [balance_plan([sizes[r][b] for r in range(world)]) for b in range(len(batches))]
    outgoing = [
        (b, rank, i, item)
        for b, items in enumerate(batches)
        for i, item in enumerate(items)
        if plans[b][rank][i] != rank
    ]
    moved = [None] * world
    dist.all_gather_object(moved, outgoing)
    balanced = [
        [item for i, item in enumerate(items) if plans[b][rank][i] == rank]
        for b, items in enumerate(batches)
    ]
    arrivals = sorted((move for moves in moved for move in moves), key=lambda move: move[:3])
    for b, source, i, item in arrivals:
        if plans[b][source][i] == rank:
            balanced[b].append(item)
    return balanced


def balance_plan(sizes: list) -> list:
    """sizes[r]: the sizes of rank r's items -> dest[r][i], the rank that takes each. Each rank
    keeps its own, in order, while they fit under the mean load; the rest go largest first to the
    least loaded rank (its own on a tie). No rank ends above the mean by more than the largest
    item."""
    world = len(sizes)
    target = sum(map(sum, sizes)) / world
    dest = [[r] * len(items) for r, items in enumerate(sizes)]
    load = [0] * world
    spill = []
    for r, items in enumerate(sizes):
        for i, n in enumerate(items):
            if load[r] + n <= target:
                load[r] += n
            else:
                spill.append((-n, r, i))
    for neg_n, r, i in sorted(spill):
        to = min(range(world), key=lambda q: (load[q], q != r, q))
        dest[r][i] = to
        load[to] -= neg_n
    return dest


def lockstep(rows: list, device) -> list:
    """This rank's rows, then None as many times as the busiest rank has more: FSDP's forward and
    backward are collectives, so every rank runs the same number of passes (a rank with fewer runs
    dummy ones). Collective."""
    return rows + [None] * (int(global_max(len(rows), device)) - len(rows))


# ----------------------------------------------------------------------------- FSDP2


def shard_model(model, device: torch.device, param_dtype: torch.dtype | None = None):
    """FSDP2 as torchtitan does it: each block of model.layers is a unit, then the root (embeddings,
    norm, head). Parameters are gathered for compute in param_dtype and gradients reduced in fp32;
    the sharded master weights keep their own dtype (fp32). param_dtype None: bf16 on GPU, no cast
    on CPU (all fp32); torch.bfloat16 on CPU runs the GPU's mixed precision there (the tests do).
    One CPU rank without a cast keeps the plain module (DCP checkpoints and the HF export read it
    the same way)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if param_dtype is None and device.type == "cuda":
        param_dtype = torch.bfloat16
    if param_dtype is None and dist.get_world_size() == 1:
        # one rank, nothing to cast: FSDP2 would only copy every parameter in and every gradient out
        # of its flat buffers on each pass (~10% of a toy update); the plain module computes the
        # same numbers
        return model
    mp = (
        MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
        if param_dtype is not None
        else MixedPrecisionPolicy()
    )
    for layer in model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def is_sharded(model) -> bool:
    return hasattr(next(model.parameters()), "full_tensor")


def fill_from_rank0(model, read_weights, device: torch.device):
    """A sharded model built on the meta device, given storage and its parameters' values: rank 0
    calls read_weights() for the full state dict (host memory, any dtype) and each tensor is
    broadcast in turn; every rank keeps its shard, cast to its parameter's dtype (torch's
    set_model_state_dict, broadcast_from_rank0). No rank holds more than its shards and one tensor
    in flight."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model.to_empty(device=device)
    weights = read_weights() if dist.get_rank() == 0 else {}
    set_model_state_dict(
        model,
        weights,
        options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False),
    )
    return model


def load_sharded(model, read_weights, device: torch.device, param_dtype: torch.dtype | None = None):
    """A model built on the meta device (fp32), FSDP2-sharded (shard_model) and filled with a
    checkpoint's weights, no rank holding a full fp32 copy: read_weights(dtype, device) returns the
    full state dict, called by rank 0 with no arguments (host memory, as stored; fill_from_rank0).
    One rank left unsharded reads straight into fp32 on the device, one tensor at a time."""
    model = shard_model(model, device, param_dtype)
    if is_sharded(model):
        return fill_from_rank0(model, read_weights, device)
    model.load_state_dict(read_weights(torch.float32, device), strict=False, assign=True)
    model.tie_weights()  # assign=True replaced a tied Parameter object; tie again
    return model


def full_state_dict(model) -> dict | None:
    """The whole model's parameters on rank 0's CPU (None on the other ranks), gathered shard by
    shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return sd if dist.get_rank() == 0 else None


@torch.no_grad()
def copy_weights(model, into):
    """Copy a (possibly FSDP2-sharded) model's weights into `into`, a plain model of the same
    architecture, in place, one full parameter at a time (all ranks gather): whoever holds `into`'s
    tensors (an inference engine) sees the new weights. A parameter of `into` emptied to free its
    memory gets its storage back first."""
    for (name, p), (name2, q) in zip(model.named_parameters(), into.named_parameters()):
        assert name == name2, (name, name2)
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        if q.numel() != full.numel():
            q.data = q.data.new_empty(full.shape)
        q.copy_(full)


def on_for_device(what: str, setting: str, device: torch.device) -> bool:
    """An auto | true | false setting whose auto is on on a GPU and off on a CPU, resolved and said once at start:
    --activation_checkpointing (a 32K-token row of Qwen3-8B saves 7.7 GiB per layer for the backward
    without it), --free_engine (memory is short on a GPU; on a CPU freeing only costs time)."""
    on = device.type == "cuda" if setting == "auto" else setting == "true"
    print0(
        f"{what}: {'on' if on else 'off'}"
        + (f" (auto, on {device.type})" if setting == "auto" else "")
    )
    return on


# --------------------------------------------------------- a run's directory: settings, checkpoints

RUN_FILES = (
    "checkpoint",
    "checkpoint.tmp",
    "exports",
    "hf",
    "metrics.jsonl",
    "samples.jsonl",
    "tensorboard",
    "wandb",
)  # what a run writes in out_dir


def check_run(cfg, script: str, may_change: tuple) -> bool:
    """Does this run resume the one in out_dir? Called first, it writes nothing (collective). A
    resume (--resume=true and a complete checkpoint in out_dir) continues the run that wrote it, so
    its settings must be those in out_dir/config.json but for the fields in `may_change` (how far,
    how often to log, save and export, where and how fast): else every rank raises InputError naming
    the fields that differ and the ways out."""
    settings = json.loads(json.dumps(dataclasses.asdict(cfg)))  # as config.json holds them

    def resumes() -> bool:
        if not cfg.resume or newest_checkpoint(os.path.join(cfg.out_dir, "checkpoint")) is None:
            return False
        before = read_run_settings(cfg.out_dir)
        if before is None:
            print0(
                f"{cfg.out_dir} has no config.json (a run from before it was written): its settings are not checked"
            )
            return True
        if before.get("script") != script:
            raise InputError(
                f"{cfg.out_dir} holds a run of {before.get('script')}, not of {script}: use another "
                "--out_dir"
            )
        defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
        old = before["config"]
        changed = [
            k for k in settings if k not in may_change and old.get(k, defaults[k]) != settings[k]
        ]
        if changed:
            differences = "; ".join(
                f"--{k}={old.get(k, defaults[k])!r} there, {settings[k]!r} now" for k in changed
            )
            raise InputError(
                f"{cfg.out_dir} holds a run with other settings ({differences}): resuming it needs its "
                "settings (config.json lists those that may change); else use another --out_dir, or "
                "--resume=false to start over there (removes its checkpoints, exports and metrics)"
            )
        return True

    return agree_on_inputs(resumes)


def record_run(cfg, script: str, may_change: tuple, resuming: bool, run_files: tuple = RUN_FILES):
    """Once the inputs are read: the run's settings written to out_dir/config.json; a run that
    starts at step 0 first removes what an earlier run left in out_dir (`run_files`: checkpoints,
    exports, metrics), so that no file mixes two runs. Collective."""
    if dist.get_rank() == 0:
        os.makedirs(cfg.out_dir, exist_ok=True)
        earlier = (
            []
            if resuming
            else [name for name in run_files if os.path.lexists(os.path.join(cfg.out_dir, name))]
        )
        for name in earlier:
            path = os.path.join(cfg.out_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        if earlier:
            print0(
                f"starting from step 0 in {cfg.out_dir}: removed {', '.join(earlier)} of an earlier run"
            )
        settings = json.loads(json.dumps(dataclasses.asdict(cfg)))
        write_json(
            os.path.join(cfg.out_dir, "config.json"),
            dict(script=script, config=settings, may_change_on_resume=list(may_change)),
        )
    dist.barrier()


def read_run_settings(out_dir: str) -> dict | None:
    """out_dir/config.json as record_run wrote it, None if there is none; InputError if it is
    damaged."""
    path = os.path.join(out_dir, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            settings = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(
            f"{path}: not valid JSON ({e}); restore it, or --resume=false to start over"
        ) from None
    if not isinstance(settings, dict) or not isinstance(settings.get("config"), dict):
        raise InputError(
            f"{path}: no 'config' object in it; restore it, or --resume=false to start over"
        )
    return settings


def write_json(path: str, obj):
    """path replaced whole by obj, or left as it was (a kill or a full disk midway leaves the old
    file)."""
    with open(path + ".tmp", "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(path + ".tmp", path)


class Checkpointer:
    """Sharded DCP checkpoints of (model, optimizer, trainer state) in `root` (out_dir/checkpoint),
    one directory per step, written in the background:
        root/step-N.tmp/   being written: trainer_state.json (rank 0, first), every rank's shards, DCP's .metadata,
                           checksums.json (each shard's CRC-32, checked at resume: a changed byte is refused)
        root/step-N/       committed: rank 0 renames step-N.tmp once checksums.json is written
    DCP writes .metadata (through a rename of its own) only once every rank has written its shards,
    so a step-N.tmp that holds it is complete too: resume() loads the newest complete checkpoint,
    whatever moment a kill hit. After a commit the older checkpoints are renamed step-M.old, then
    removed: a kill while removing leaves nothing that looks complete. save() copies this rank's
    shards to host memory (the only pause training sees) and returns; a thread writes them through
    its own gloo group (its collectives never interleave with training's) and, on rank 0, commits.
    background=False: written and committed before save() returns. Used as `with ckpt:` around the
    training loop, every way out of it but the end says which step the same command resumes from."""

    def __init__(self, root: str, background: bool = True):
        self.root = root
        self.rank = dist.get_rank()
        self.future = None  # this rank's write in flight (on rank 0, with its commit)
        self.step = None  # ... of this step
        self.group = dist.new_group(backend="gloo") if background else None
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="checkpoint") if background else None
        if self.rank == 0:
            os.makedirs(root, exist_ok=True)
            self._tidy()
        dist.barrier()

    def _tidy(self):
        """After a kill: commit a step-N.tmp that was written whole; remove unfinished ones and
        step-M.old."""
        for name in sorted(os.listdir(self.root)):
            found = STEP_DIR.fullmatch(name)
            path = os.path.join(self.root, name)
            if not found or not found[2] or not os.path.isdir(path):
                continue
            committed = os.path.join(self.root, f"step-{found[1]}")
            if found[2] == ".tmp" and is_whole(path) and not os.path.exists(committed):
                os.rename(path, committed)
            else:
                shutil.rmtree(path)
        # the layout before, unfinished
        if os.path.isdir(self.root + ".tmp") and not is_whole(self.root + ".tmp"):
            shutil.rmtree(self.root + ".tmp")

    def resume(self, model, optimizer) -> dict | None:
        """Load the newest complete checkpoint into model and optimizer; its trainer state, or None
        if there is none. Collective. A damaged one: InputError naming the file and the cause, on
        every rank."""
        newest = newest_checkpoint(self.root)
        if newest is None:
            return None
        state = agree_on_inputs(
            lambda: check_checkpoint_files(newest[1], dist.get_rank(), dist.get_world_size())
        )
        load_checkpoint(newest[1], model, optimizer)
        print0(f"resumed from {newest[1]} at step {state['step']}")
        return state

    def save(self, model, optimizer, trainer_state: dict):
        """Start writing a checkpoint of this moment (model, optimizer, trainer_state with its
        "step"). Collective; the write before it is finished first."""
        import torch.distributed.checkpoint as dcp

        self.wait()
        step = trainer_state["step"]
        tmp = os.path.join(self.root, f"step-{step}.tmp")

        # rank 0: a fresh step-N.tmp holding the trainer state; all ranks stop if it cannot
        def prepare():
            if self.rank == 0:
                try:
                    if os.path.exists(tmp):
                        shutil.rmtree(tmp)
                    os.makedirs(tmp)
                    write_json(os.path.join(tmp, "trainer_state.json"), trainer_state)
                except OSError as e:
                    raise InputError(
                        f"{e.filename or tmp}: cannot write the checkpoint of step {step}: "
                        f"{e.strerror}{free_space(self.root)}; {self.kept()}"
                    ) from None

        agree_on_inputs(prepare)
        state = checkpoint_state(model, optimizer)
        self.step = step
        if self.writer is not None:
            # returns once copied
            upload = dcp.async_save(state, checkpoint_id=tmp, process_group=self.group)
            self.future = self.writer.submit(self._finish, upload, step)
            return
        self.future = Future()
        try:
            dcp.save(state, checkpoint_id=tmp)
            self.future.set_result(self._finish(None, step))
        # noqa: BLE001 (wait() says it in one line, on every rank)
        except (Exception, CheckpointException) as e:
            self.future.set_exception(e)
        self.wait()

    def _finish(self, upload, step: int):
        """In the writer thread: this rank's part of the write done (DCP has written .metadata, so
        every rank's part is); each rank's share of the files' CRC-32s into checksums.json; on rank
        0 the commit, then the older checkpoints removed."""
        if upload is not None:
            upload.result()
        tmp = os.path.join(self.root, f"step-{step}.tmp")
        try:
            share = checksums(tmp, self.rank, dist.get_world_size())
        except OSError as e:  # gathered like a share: no rank waits for one that failed
            share = e
        shares = [share]
        if dist.get_world_size() > 1:
            shares = [None] * dist.get_world_size()
            dist.all_gather_object(shares, share, group=self.group)
        failed = next((s for s in shares if isinstance(s, OSError)), None)
        if failed is not None:
            raise failed
        if self.rank != 0:
            return
        write_json(
            os.path.join(tmp, "checksums.json"),
            {name: crc for part in shares for name, crc in part.items()},
        )
        committed = os.path.join(self.root, f"step-{step}")
        # the same step saved again: the old copy moves aside first
        if os.path.exists(committed):
            remove_aside(committed)
        os.rename(committed + ".tmp", committed)  # the commit: one atomic rename
        sync_directory(self.root)
        for older_step, path in complete_checkpoints(self.root):
            if older_step < step:
                remove_aside(path)

    def wait(self):
        """Every rank's write in flight finished and committed. Collective; a write that failed on
        any rank raises InputError on every rank: one line naming the file and the cause (a full
        disk), and what is kept."""
        failure = self._wait_here()
        failures = [f for f in all_gather(failure) if f]
        if failures:
            raise InputError(f"{failures[0]}; {self.kept()}")

    def write_failed(self) -> bool:
        """Has this rank's write in flight ended with an error? (Each step's poll: not a
        collective.)"""
        return (
            self.future is not None and self.future.done() and self.future.exception() is not None
        )

    def _wait_here(self) -> str | None:
        """This rank's write in flight finished: None, or one line saying why it failed."""
        if self.future is None:
            return None
        future, self.future = self.future, None
        try:
            future.result()
            return None
        # noqa: BLE001 (a full disk, a file system error: one line)
        except (Exception, CheckpointException) as e:
            return (
                f"writing {self.root}/step-{self.step}.tmp (the checkpoint of step {self.step}) failed: "
                f"{write_error(e)}{free_space(self.root)}"
            )

    def kept(self) -> str:
        """Which step the same command resumes from, as the files on disk say now."""
        newest = newest_checkpoint(self.root)
        if newest is None:
            return "no checkpoint is complete yet: the same command starts from step 0"
        step, path = newest
        # .tmp: soon
        path = (
            os.path.join(self.root, f"step-{step}") if os.path.dirname(path) == self.root else path
        )
        return f"the newest complete checkpoint is of step {step} ({path}): the same command resumes from it"

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback_):
        """A TrainingStopped (a non-finite loss), Ctrl-C, or an error on this rank: this rank's
        write in flight is waited for (not a collective: the other ranks may be elsewhere), then
        which step a rerun resumes from is added to what is said. SIGTERM's stop (a SystemExit) and
        a failed write have said it already."""
        if error is not None and not isinstance(error, (InputError, SystemExit)):
            failure = None
            try:
                failure = self._wait_here()
            except KeyboardInterrupt:  # Ctrl-C again: stop waiting
                failure = f"the checkpoint of step {self.step} was still being written"
            where = self.kept() + (f" ({failure})" if failure else "")
            if self.writer is not None:
                self.writer.shutdown(wait=False)
            if isinstance(error, TrainingStopped):
                raise TrainingStopped(f"{error}; {where}") from None
            if isinstance(error, KeyboardInterrupt):
                raise KeyboardInterrupt(where) from None
            error.add_note(where)
        elif self.writer is not None:
            self.writer.shutdown(wait=False)
        return False


STEP_DIR = re.compile(r"step-(\d+)(\.tmp|\.old)?")  # root/step-N, being written, being removed


def complete_checkpoints(root: str) -> list:
    """[(step, path)] of the complete checkpoints in root, oldest first: step-N (committed), a
    step-N.tmp holding DCP's .metadata (written whole, not renamed yet), and the layout written
    before there were step directories (root itself holding .metadata and trainer_state.json, or
    root.tmp, its write in flight)."""
    found = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        step = STEP_DIR.fullmatch(name)
        path = os.path.join(root, name)
        if step and step[2] != ".old" and os.path.isdir(path) and (not step[2] or is_whole(path)):
            found.append((int(step[1]), path))
    # the layout before: read if whole, removed at the first new commit
    for path in (root, root + ".tmp"):
        if is_whole(path):
            found.append((stored_step(path), path))
    return sorted(found, key=lambda f: (f[0], f[1].endswith(".tmp")))


def newest_checkpoint(root: str) -> tuple | None:
    """(step, path) of the newest complete checkpoint in root, None if there is none."""
    found = complete_checkpoints(root)
    return found[-1] if found else None


def is_whole(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, f)) for f in (".metadata", "trainer_state.json"))


def stored_step(path: str) -> int:
    """The step in a checkpoint's trainer_state.json; -1 if it cannot be read (loading it then says
    why)."""
    try:
        with open(os.path.join(path, "trainer_state.json")) as fh:
            return int(json.load(fh)["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def remove_aside(path: str):
    """Remove a checkpoint so that a kill midway leaves nothing that looks complete: a directory is
    renamed NAME.old first (one atomic step), then removed; the layout before (files in root itself)
    loses its trainer_state.json first."""
    if (
        os.path.isfile(os.path.join(path, "trainer_state.json"))
        and STEP_DIR.fullmatch(os.path.basename(path)) is None
        and not path.endswith(".tmp")
    ):
        os.remove(os.path.join(path, "trainer_state.json"))
        for name in os.listdir(path):
            if name == ".metadata" or name.endswith(".distcp"):
                os.remove(os.path.join(path, name))
        return
    if os.path.exists(path + ".old"):
        shutil.rmtree(path + ".old")
    os.rename(path, path + ".old")
    shutil.rmtree(path + ".old")


def sync_directory(path: str):
    """fsync a directory: a rename in it survives a power loss, not only a kill."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def free_space(path: str) -> str:
    """' (N MiB free on its disk now)': a write that failed for want of space says so."""
    try:
        return f" ({shutil.disk_usage(path).free / 2**20:.1f} MiB free on its disk now)"
    except OSError:
        return ""


def write_error(error: BaseException) -> str:
    """One line for a failed DCP write. DCP gathers every rank's failure into a CheckpointException;
    an OSError (no space, no permission) names its file; a full disk inside torch's zip writer is
    only 'unexpected pos'."""
    failures = getattr(error, "failures", None)
    if failures:  # {rank: exception, or (exception, traceback)}
        rank, first = next(iter(sorted(failures.items())))
        error = first[0] if isinstance(first, tuple) else first
    chain = [error]
    while chain[-1].__cause__ or chain[-1].__context__:
        chain.append(chain[-1].__cause__ or chain[-1].__context__)
    os_error = next((e for e in chain if isinstance(e, OSError)), None)
    if os_error is not None:
        return f"{os_error.filename + ': ' if os_error.filename else ''}{os_error.strerror or os_error}"
    if "unexpected pos" in str(error):
        return "a file was written short (torch's zip writer: 'unexpected pos'), as when the disk is full"
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def check_checkpoint_files(path: str, rank: int = 0, world: int = 1) -> dict:
    """A checkpoint's trainer_state.json, once its files are checked against DCP's index
    (.metadata): every file it names is there and as long as the index says; then this rank's share
    of them (all of them with world 1) against checksums.json, where there is one. Raises InputError
    naming the damaged file and the cause."""
    from torch.distributed.checkpoint import FileSystemReader

    way_out = f"(remove {path} to resume from an older checkpoint if there is one, or --resume=false to start over)"
    state_file = os.path.join(path, "trainer_state.json")
    try:
        with open(state_file) as fh:
            state = json.load(fh)
    except FileNotFoundError:
        raise InputError(f"{state_file}: missing, the checkpoint is damaged {way_out}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(
            f"{state_file}: not valid JSON ({e}), the checkpoint is damaged {way_out}"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise InputError(f"{state_file}: no step number in it, the checkpoint is damaged {way_out}")
    index = os.path.join(path, ".metadata")
    if not os.path.isfile(index):
        raise InputError(f"{index}: missing, the checkpoint is damaged {way_out}")
    try:
        metadata = FileSystemReader(path).read_metadata()
    # noqa: BLE001 (unpickling damaged bytes raises almost anything: EOFError, KeyError, ...)
    except Exception as e:
        raise InputError(
            f"{index}: unreadable ({type(e).__name__}: {e}), the checkpoint is damaged {way_out}"
        ) from None
    needed = {}  # file -> the bytes its items span
    for item in metadata.storage_data.values():
        needed[item.relative_path] = max(
            needed.get(item.relative_path, 0), item.offset + item.length
        )
    for name, size in sorted(needed.items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise InputError(f"{file}: missing, the checkpoint is damaged {way_out}")
        if os.path.getsize(file) < size:
            raise InputError(
                f"{file}: {os.path.getsize(file)} bytes, its index (.metadata) says {size}: cut short, "
                f"the checkpoint is damaged {way_out}"
            )
    if os.path.isfile(os.path.join(path, "checksums.json")):
        with open(os.path.join(path, "checksums.json")) as fh:
            expected = json.load(fh)
        for name, crc in checksums(path, rank, world).items():
            if expected.get(name, crc) != crc:
                raise InputError(
                    f"{os.path.join(path, name)}: its CRC-32 is not the one written "
                    f"(checksums.json), the checkpoint is damaged {way_out}"
                )
    return state


def checksums(path: str, rank: int, world: int) -> dict:
    """{file: CRC-32} of this rank's share of a checkpoint's DCP files (every world-th, in name
    order): the ranks share the reading."""
    names = sorted(f for f in os.listdir(path) if f.endswith(".distcp"))
    sums = {}
    for name in names[rank::world]:
        crc = 0
        with open(os.path.join(path, name), "rb") as fh:
            while block := fh.read(2**24):
                crc = zlib.crc32(block, crc)
        sums[name] = crc
    return sums


def load_checkpoint(path: str, model, optimizer):
    """A checkpoint directory's model and optimizer state loaded into model and optimizer
    (collective). Check its files first (check_checkpoint_files); what DCP still cannot read raises
    InputError on every rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = checkpoint_state(model, optimizer)
    try:
        dcp.load(state, checkpoint_id=path)
    except CheckpointException as e:  # DCP gathers every rank's failure: every rank raises it
        raise InputError(
            f"{path}: cannot be loaded, {write_error(e)} (remove it to resume from an older "
            "checkpoint if there is one, or --resume=false to start over)"
        ) from None
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )


def checkpoint_state(model, optimizer):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def export_hf(model, export, step: int):
    """Gather the full weights on rank 0 and write them as out_dir/exports/step-N
    (export.write(model, directory, weights): a Hugging Face directory), written beside the previous
    export and then swapped in (publish_export): a kill or a full disk midway leaves out_dir/hf the
    previous one, whole. export: anything with out_dir, keep and write. Collective; a failed write
    is one line (InputError) on every rank. A step already exported (a finished run run again, or
    redone after a resume) is left as it is."""
    final = os.path.join(export.out_dir, "exports", f"step-{step}")
    if os.path.isdir(final):  # weights equal to these: a resume is exact
        print0(f"{final}: the export of step {step} is there already")
        if dist.get_rank() == 0:
            publish_export(export.out_dir, step, export.keep)  # hf linked, if a kill came before
        dist.barrier()
        return
    weights = full_state_dict(model)

    def write():  # rank 0 writes; every rank stops with its error
        if weights is None:
            return
        tmp = final + ".tmp"
        try:
            if os.path.exists(tmp):
                shutil.rmtree(tmp)
            export.write(model, tmp, weights)
            publish_export(export.out_dir, step, export.keep)
        except OSError as e:
            hf = os.path.join(export.out_dir, "hf")
            kept = "there is no export before it"
            if os.path.exists(hf):
                kept = f"{hf} is still the one before it, whole ({os.path.realpath(hf)})"
            raise InputError(
                f"{e.filename or tmp}: cannot write the export of step {step}: "
                f"{e.strerror or e}{free_space(export.out_dir)}; {kept}"
            ) from None

    agree_on_inputs(write)


def publish_export(out_dir: str, step: int, keep: int):
    """Rank 0, once out_dir/exports/step-N.tmp is a whole Hugging Face directory (or step-N is there
    already): rename it step-N, point the link out_dir/hf at the newest step export (a new link
    renamed over the old one: atomic), then remove the oldest step exports beyond `keep` (0: keep
    all) and unfinished ones. A kill at any moment leaves hf a whole export."""
    exports = os.path.join(out_dir, "exports")
    final = os.path.join(exports, f"step-{step}")
    if os.path.isdir(final + ".tmp"):
        os.rename(final + ".tmp", final)
    steps = sorted(
        int(m[1]) for m in map(STEP_DIR.fullmatch, os.listdir(exports)) if m and not m[2]
    )
    link = os.path.join(out_dir, "hf")
    if os.path.lexists(link + ".new"):
        os.remove(link + ".new")
    os.symlink(os.path.join("exports", f"step-{steps[-1]}"), link + ".new")
    # the layout before: hf/ a directory (moved aside once)
    if os.path.isdir(link) and not os.path.islink(link):
        os.rename(link, link + ".old")
    os.replace(link + ".new", link)
    if os.path.exists(link + ".old"):
        shutil.rmtree(link + ".old")
    sync_directory(out_dir)
    for old in steps[:-keep] if keep else []:
        remove_aside(os.path.join(exports, f"step-{old}"))
    # unfinished exports (a kill), and removals a kill interrupted
    for name in os.listdir(exports):
        if name.endswith((".tmp", ".old")):
            shutil.rmtree(os.path.join(exports, name))


class MetricsLog:
    """Rank 0's JSON-lines log of records keyed by "step" (metrics.jsonl, samples.jsonl), positioned
    at `step`: records of later steps (logged by a run that died before its next checkpoint) are
    dropped, so a resumed run does not log a step twice. Strict JSON: a NaN or infinity is written
    as null (JSON has neither; strict readers reject them). mirror: an object whose log(record) and
    close() get every record as written (an experiment tracker, parts/tracking.py). write() on other
    ranks: no-op."""

    def __init__(self, path: str, step: int, mirror=None):
        self.file = None
        self.mirror = mirror
        if dist.get_rank() != 0:
            return
        kept = []
        if os.path.exists(path):
            with open(path) as fh:
                kept = [
                    line for line in fh if line.strip() and json.loads(line).get("step", 0) <= step
                ]
        self.file = open(path, "w")
        self.file.writelines(kept)
        self.file.flush()

    def write(self, record: dict):
        if self.file:
            record = finite_or_none(record)
            self.file.write(json.dumps(record, allow_nan=False) + "\n")
            self.file.flush()
            if self.mirror:
                self.mirror.log(record)

    def close(self):
        if self.file:
            self.file.close()
        if self.mirror:
            self.mirror.close()


def finite_or_none(value):
    """value with every float that is NaN or infinite, at any depth of dicts and lists, replaced by
    None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


class GracefulStop:
    """SIGTERM (what cluster schedulers send before preemption) and Ctrl-C ask the training loop to
    stop at the next step boundary and write a checkpoint. A second Ctrl-C, after the first has been
    acknowledged, quits at once (the newest complete checkpoint stays: see Checkpointer). `poll()`
    is called once per step by every rank; one all-reduce makes every rank take the same decision,
    also for the wall-clock checkpoint (every `minutes`), so a hard kill loses at most that much
    work, and for a background write that failed on a rank."""

    def __init__(self, minutes: float, device):
        self.minutes = minutes
        self.device = device
        self.signum = None
        self.acknowledged = False
        self.last_checkpoint = time.monotonic()
        self.previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, frame):
        if self.acknowledged and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = self.signum or signum

    def poll(self, checkpointer: "Checkpointer") -> tuple:
        """(stop now?, checkpoint now?, has a checkpoint write failed on any rank?), the same on
        every rank."""
        due = self.minutes > 0 and time.monotonic() - self.last_checkpoint > 60 * self.minutes
        flags = torch.tensor(
            [self.signum or 0, float(due), float(checkpointer.write_failed())],
            dtype=torch.float64,
            device=self.device,
        )
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        if flags[0] and not self.acknowledged:
            self.signum = int(flags[0])
            self.acknowledged = True
            print0(
                f"received {signal.Signals(self.signum).name}: stopping at this step boundary, "
                "writing a checkpoint first (Ctrl-C again to quit without it)"
            )
        return bool(flags[0]), bool(flags[0] or flags[1]), bool(flags[2])

    def checkpointed(self):
        self.last_checkpoint = time.monotonic()

    def step_done(self, step: int, due: bool, save, checkpointer: "Checkpointer"):
        """After each step, on every rank: a failed background write stops every rank (InputError,
        one line); save() a checkpoint when `due` (the run's own schedule), when the clock says so
        or when a signal asked to stop; then, if asked to stop, exit."""
        stopping, checkpoint_now, write_failed = self.poll(checkpointer)
        if write_failed:
            checkpointer.wait()
        if due or checkpoint_now:
            save()
            self.checkpointed()
        if stopping:
            self.exit(step, checkpointer)

    def exit(self, step: int, checkpointer: "Checkpointer"):
        """The stop's checkpoint written, one line saying where it is, then exit 128 + the signal's
        number."""
        checkpointer.wait()
        print0(
            f"stopped by {signal.Signals(self.signum).name} after step {step}: {checkpointer.kept()}"
        )
        raise SystemExit(128 + self.signum)

    def close(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
