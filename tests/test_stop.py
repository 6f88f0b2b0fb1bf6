"""Stopping without losing work: SIGTERM (what a cluster scheduler sends before preemption) or
Ctrl-C mid-SFT and mid-GPPO writes a checkpoint at a step boundary, says where it is in one line and
exits 128 + signal; the same command then resumes from it. A hard kill (SIGKILL) loses at most
--ckpt_minutes of work."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


SFT = [
    "--row_tokens=256",
    "--rows_per_step=2",
    "--n_layer=1",
    "--hidden=32",
    "--n_head=2",
    "--n_kv_head=1",
    "--head_dim=16",
    "--intermediate=64",
    "--epochs=100",
    "--log_every=1",
    "--ckpt_every=0",
]
GPPO = [
    "gppo",
    "--prompts_per_step=4",
    "--mini_batch_prompts=2",
    "--group_size=4",
    "--max_response_len=16",
    "--eval_every=0",
    "--lr=1e-2",
    "--warmup_steps=1",
    "--reward_workers=2",
    "--ckpt_every=0",
]


@pytest.fixture(scope="module", autouse=True)
def toy_data(toy_files):
    """The toy's small SFT set and RL prompts (tests/conftest.py) for every run below."""
    SFT[:0] = toy_files["sft"]
    GPPO[1:1] = toy_files["rl"]


def start(cmd):
    return subprocess.Popen(
        [sys.executable, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1"),
    )


def signal_after_step(proc, signum, step: int = 2):
    """Send `signum` once the run has printed `step k/`; return (exit status, stdout, stderr)."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(f"step {step}/"):
            proc.send_signal(signum)
            break
    out, err = proc.communicate(timeout=300)
    return proc.returncode, "".join(seen) + out, err


def checkpoint_step(out_dir) -> int:
    """The step of the newest committed checkpoint (out_dir/checkpoint/step-N), read from its
    trainer_state.json."""
    root = os.path.join(out_dir, "checkpoint")
    newest = max(
        (d for d in os.listdir(root) if d.startswith("step-") and "." not in d),
        key=lambda d: int(d[5:]),
    )
    with open(os.path.join(root, newest, "trainer_state.json")) as f:
        return json.load(f)["step"]


def metric_steps(out_dir) -> list:
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if "loss" in json.loads(line)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sft_stops_with_a_checkpoint_and_resumes(tmp_path, signum):
    cmd = [os.path.join(ROOT, "sft.py"), f"--out_dir={tmp_path}", *SFT, "--max_steps=400"]
    status, out, err = signal_after_step(start(cmd), signum)
    assert status == 128 + signum, (status, out[-2000:], err[-2000:])
    assert "Traceback" not in err
    k = checkpoint_step(tmp_path)
    assert 2 <= k < 400
    assert (
        f"stopped by {signal.Signals(signum).name} after step {k}: the newest complete checkpoint is of step {k} "
        f"({tmp_path}/checkpoint/step-{k}): the same command resumes from it" in out
    )
    assert not os.path.exists(os.path.join(tmp_path, "hf"))  # it stopped, it did not finish
    proc = subprocess.run(
        [sys.executable, *cmd[:-1], f"--max_steps={k + 3}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resumed from {tmp_path}/checkpoint/step-{k} at step {k}" in proc.stdout
    # every step once, none lost, none twice
    assert metric_steps(tmp_path) == list(range(1, k + 4))


@pytest.mark.parametrize(
    "signum,nproc", [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2)]
)
def test_gppo_stops_with_a_checkpoint_and_resumes(tiny_checkpoint, tmp_path, signum, nproc):
    """nproc=2: the signal goes to torchrun, which passes it to both ranks; they agree on the step
    to stop after (one all-reduce per step), checkpoint together, and the same command resumes.
    torchrun then exits non-zero with its own status (not 128 + signal), so only the ranks' line and
    the checkpoint are checked there."""
    launcher = (
        []
        if nproc == 1
        else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    )
    cmd = [
        *launcher,
        os.path.join(ROOT, "tests", "driver.py"),
        *GPPO,
        f"--init_from={tiny_checkpoint}",
        f"--out_dir={tmp_path}",
    ]
    status, out, err = signal_after_step(start(cmd + ["--steps=200"]), signum)
    assert status == 128 + signum if nproc == 1 else status != 0, (status, out[-2000:], err[-2000:])
    if nproc == 1:
        assert "Traceback" not in err, err[-2000:]
    # the thread count each rank chose, said at start (the tests set OMP_NUM_THREADS=1; torchrun
    # keeps it)
    assert "threads: 1 per rank ($OMP_NUM_THREADS; OpenMP wait policy PASSIVE)" in out, out[:2000]
    k = checkpoint_step(tmp_path)
    name = signal.Signals(signum).name
    assert (
        2 <= k < 200
        and f"stopped by {name} after step {k}: the newest complete checkpoint is of step {k} "
        f"({tmp_path}/checkpoint/step-{k})"
        in out
    ), out[-2000:]
    proc = subprocess.run(
        [sys.executable, *cmd, f"--steps={k + 2}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resumed from {tmp_path}/checkpoint/step-{k} at step {k}" in proc.stdout
    assert metric_steps(tmp_path) == list(range(1, k + 3))


def test_wall_clock_checkpoints_bound_what_a_hard_kill_loses(tmp_path):
    """--ckpt_every=0 (no step-based checkpoints) but --ckpt_minutes=0.001 (every 60 ms): after
    SIGKILL, which nothing can catch, a checkpoint of a step taken during the run is there."""
    proc = start(
        [
            os.path.join(ROOT, "sft.py"),
            f"--out_dir={tmp_path}",
            *SFT,
            "--max_steps=400",
            "--ckpt_minutes=0.001",
        ]
    )
    for line in proc.stdout:
        if line.startswith("step 5/"):
            break
    deadline = time.monotonic() + 120
    root = os.path.join(tmp_path, "checkpoint")
    while (
        not (os.path.isdir(root) and any("." not in d for d in os.listdir(root)))
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    proc.kill()
    proc.communicate(timeout=60)
    assert 1 <= checkpoint_step(tmp_path) < 400
