"""parts/trainer.py's background checkpoints on 2 gloo ranks: a checkpoint holds the state as it was
when save() returned, though training changed the weights while it was being written; it is
committed as soon as it is whole, and the older one is then removed; a job that dies with a write in
flight resumes from the newest whole checkpoint, whatever the write had reached.
(tests/test_checkpoint.py kills sft.py and gppo.py at each moment of a commit.)"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json, os, sys
import torch
sys.path.insert(0, sys.argv[1])
from parts import trainer
mode, out = sys.argv[2], sys.argv[3]
rank, world, device = trainer.init_distributed("cpu")
path = os.path.join(out, "checkpoint")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(512, 512) for _ in range(4)])   # 4 MB: the write takes a while

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


torch.manual_seed(0)
model = trainer.shard_model(Net(), device)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)


steps_done = []


def train_step():
    steps_done.append(1)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(len(steps_done)))
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def weights():
    return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}


def saved(step):
    at_save = weights()                                  # collective: every rank gathers
    if rank == 0:
        torch.save(at_save, os.path.join(out, f"at_save_{step}.pt"))


if mode == "train":
    ckpt = trainer.Checkpointer(path)
    train_step()
    ckpt.save(model, optimizer, {"step": 1})
    train_step()
    saved(2)
    state = {"step": 2}
    ckpt.save(model, optimizer, state)                   # waits for step 1's write, starts step 2's
    state["step"] = 99                                   # the caller's dict moves on
    with torch.no_grad():                                # ... and so do the weights, while the write goes on
        for p in model.parameters():
            p.add_(1.0)
    train_step()
    ckpt.wait()
    if rank == 0:
        print("RESULT", json.dumps({"newest": trainer.newest_checkpoint(path)[0], "dirs": sorted(os.listdir(path))}))
    train_step()
    saved(3)
    ckpt.save(model, optimizer, {"step": 3})
    os._exit(0)                                          # the job dies with this write in flight, wherever it is
else:
    ckpt = trainer.Checkpointer(path)                    # what the dead job left is tidied
    step = ckpt.resume(model, optimizer)["step"]
    expected = torch.load(os.path.join(out, f"at_save_{step}.pt"))
    same = all(torch.equal(v, expected[k]) for k, v in weights().items())
    train_step()
    ckpt.save(model, optimizer, {"step": step + 1})
    ckpt.wait()
    if rank == 0:
        print("RESULT", json.dumps({"step": step, "same": same, "dirs": sorted(os.listdir(path))}))
"""


def run_ranks(script, mode, out):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        script,
        ROOT,
        mode,
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1")
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_background_checkpoint_holds_the_state_of_save_and_replaces_the_last_once_whole(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    trained = run_ranks(script, "train", tmp_path)
    assert trained == {"newest": 2, "dirs": ["step-2"]}
    resumed = run_ranks(script, "resume", tmp_path)
    # step 3 if its write had finished
    assert resumed["step"] in (2, 3) and resumed["same"], resumed
    assert resumed["dirs"] == [f"step-{resumed['step'] + 1}"], resumed


def test_a_training_stop_is_one_line_that_says_where_a_rerun_resumes(tmp_path, capsys):
    """A loss that is NaN (TrainingStopped: every rank raises it before the update) inside the
    training loop's Checkpointer: one line on stderr, completed with the step the same command
    resumes from, exit status 2, no traceback; without a checkpoint, and with a complete one of step
    3."""
    sys.path.insert(0, ROOT)
    import torch
    from parts import trainer

    stop_line = "loss=nan grad_norm=nan: stopping without updating (try a lower --lr)"

    def main(root, save):
        trainer.init_distributed("cpu")
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        with trainer.Checkpointer(root, background=False) as ckpt:
            if save:
                ckpt.save(model, optimizer, {"step": 3})
            raise trainer.TrainingStopped(stop_line)

    for save, where in [
        (False, "no checkpoint is complete yet: the same command starts from step 0"),
        (
            True,
            f"the newest complete checkpoint is of step 3 ({tmp_path}/with/step-3): the same "
            "command resumes from it",
        ),
    ]:
        root = str(tmp_path / ("with" if save else "without"))
        with pytest.raises(SystemExit) as stop:
            trainer.run_entry_point(main, root, save=save)
        assert stop.value.code == 2
        assert capsys.readouterr().err.splitlines() == [f"error: {stop_line}; {where}"]
