"""Trainer plumbing for PyTorch training scripts with FSDP2 that run the same with 1 process and with torchrun.

    rank, world, device = init_distributed("auto")    # gloo on CPU, nccl on CUDA; a world of one needs no torchrun
    model = shard_model(model, device)                # FSDP2 per block of model.layers, then the root
    ckpt = Checkpointer(path); ckpt.save(model, optimizer, state)  # sharded DCP, in the background
    run_entry_point(main, cfg)                        # bad input: one line from rank 0, exit status 2
Also: threads per rank, InputError and agree_on_inputs (every rank stops together on bad input), loading the full
weights from rank 0 into the shards (no rank holds a full fp32 copy), the metrics file (strict JSON), the graceful
stop on SIGTERM and Ctrl-C with a checkpoint, and the full state dict gathered on rank 0 for an export. torch only.
"""
import datetime
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist


# ----------------------------------------------------------------------------- the entry point and the process group

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
    cores shared out among the ranks of this machine. Threads that wait actively for each other (OpenMP's default)
    crawl when a core is busy with other work, so every entry point sets OMP_WAIT_POLICY=PASSIVE before torch loads
    (unless the environment sets it; benchmarks/RESULTS.md has the measurement)."""
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


FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def read_input(option: str, load, *args, errors: tuple = FILE_ERRORS, **kwargs):
    """load(*args, **kwargs), with an exception of the declared input `errors` turned into one InputError naming the
    option. Anything else is a bug and keeps its traceback."""
    try:
        return load(*args, **kwargs)
    except errors as e:
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


def global_sums(values: dict, device) -> dict:
    """{name: number or 0-dim tensor} summed over all ranks: one all-reduce in float64, one transfer to the host."""
    t = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device).reshape(()) for v in values.values()])
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


# ----------------------------------------------------------------------------- FSDP2 and checkpoints

def shard_model(model, device: torch.device, param_dtype: torch.dtype | None = None):
    """FSDP2 as torchtitan does it: each block of model.layers is a unit, then the root (embeddings, norm, head).
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


def is_sharded(model) -> bool:
    return hasattr(next(model.parameters()), "full_tensor")


def fill_from_rank0(model, read_weights, device: torch.device):
    """A sharded model built on the meta device, given storage and its parameters' values: rank 0 calls
    read_weights() for the full state dict (host memory, any dtype) and each tensor is broadcast in turn; every rank
    keeps its shard, cast to its parameter's dtype (torch's set_model_state_dict, broadcast_from_rank0). No rank
    holds more than its shards and one tensor in flight."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    model.to_empty(device=device)
    weights = read_weights() if dist.get_rank() == 0 else {}
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True,
                                                                  strict=False))
    return model


def full_state_dict(model) -> dict | None:
    """The whole model's parameters on rank 0's CPU (None on the other ranks), gathered shard by shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return sd if dist.get_rank() == 0 else None


def on_for_device(what: str, setting: str, device: torch.device) -> bool:
    """An auto | true | false setting whose auto is on on a GPU and off on a CPU, resolved and said once at start:
    --activation_checkpointing (a 32K-token row of Qwen3-8B saves 7.7 GiB per layer for the backward without it),
    --free_engine (memory is short on a GPU; on a CPU freeing only costs time)."""
    on = device.type == "cuda" if setting == "auto" else setting == "true"
    print0(f"{what}: {'on' if on else 'off'}" + (f" (auto, on {device.type})" if setting == "auto" else ""))
    return on


class Checkpointer:
    """Sharded DCP checkpoints of (model, optimizer, trainer state) at `path`, written in the background.

    save() copies this rank's shards to CPU memory (the only pause training sees: host RAM for one copy of the shards)
    and returns; a thread writes them to path.tmp through its own gloo process group, so its collectives never
    interleave with training's. wait() (called by the next save(), by the graceful stop and after the last step) waits
    for every rank's write, then rank 0 adds trainer_state.json and renames path.tmp to path: a kill at any moment
    leaves the last whole checkpoint. background=False writes before save() returns."""

    def __init__(self, path: str, background: bool = True):
        self.path, self.tmp, self.future, self.trainer_state = path, path + ".tmp", None, None
        self.group = dist.new_group(backend="gloo") if background else None

    def save(self, model, optimizer, trainer_state: dict):
        import torch.distributed.checkpoint as dcp
        self.wait()
        if dist.get_rank() == 0 and os.path.exists(self.tmp):
            shutil.rmtree(self.tmp)
        dist.barrier()
        state = checkpoint_state(model, optimizer)
        self.trainer_state = json.loads(json.dumps(trainer_state))   # as it is now: the caller's dict moves on
        if self.group is None:
            dcp.save(state, checkpoint_id=self.tmp)
            self.wait()
        else:
            self.future = dcp.async_save(state, checkpoint_id=self.tmp, process_group=self.group)

    def wait(self):
        """Finish the save in flight, if any: every rank's shards written, then the rename. Collective."""
        if self.trainer_state is None:
            return
        if self.future is not None:
            self.future.result()
            self.future = None
        dist.barrier()
        if dist.get_rank() == 0:
            with open(os.path.join(self.tmp, "trainer_state.json"), "w") as fh:
                json.dump(self.trainer_state, fh)
            if os.path.exists(self.path):
                shutil.rmtree(self.path)
            os.rename(self.tmp, self.path)
        dist.barrier()
        self.trainer_state = None


def save_checkpoint(path: str, model, optimizer, trainer_state: dict):
    """One checkpoint written before returning (see Checkpointer)."""
    Checkpointer(path, background=False).save(model, optimizer, trainer_state)


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


class MetricsLog:
    """Rank 0's JSON-lines log of records keyed by "step" (metrics.jsonl, samples.jsonl), positioned at `step`:
    records of later steps (logged by a run that died before its next checkpoint) are dropped, so a resumed run does
    not log a step twice. Strict JSON: a NaN or infinity is written as null (JSON has neither; strict readers reject
    them). mirror: an object whose log(record) and close() get every record as written (an experiment tracker,
    parts/tracking.py). write() on other ranks: no-op."""

    def __init__(self, path: str, step: int, mirror=None):
        self.file, self.mirror = None, mirror
        if dist.get_rank() != 0:
            return
        kept = []
        if os.path.exists(path):
            with open(path) as fh:
                kept = [line for line in fh if line.strip() and json.loads(line).get("step", 0) <= step]
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
    """value with every float that is NaN or infinite, at any depth of dicts and lists, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


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

    def step_done(self, step: int, due: bool, save, checkpointer: "Checkpointer"):
        """After each step, on every rank: save() a checkpoint when `due` (the run's own schedule), when the clock says
        so or when a signal asked to stop; then, if asked to stop, exit."""
        stopping, checkpoint_now = self.poll()
        if due or checkpoint_now:
            save()
            self.checkpointed()
        if stopping:
            self.exit(step, checkpointer)

    def exit(self, step: int, checkpointer: "Checkpointer"):
        """The stop's checkpoint written, one line saying where it is, then exit 128 + the signal's number."""
        checkpointer.wait()
        print0(f"stopped by {signal.Signals(self.signum).name} after step {step}: checkpoint in {checkpointer.path}; "
               "run the same command again to resume from it")
        raise SystemExit(128 + self.signum)

    def close(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
