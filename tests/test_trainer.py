"""parts/trainer.py's background checkpoints on 2 gloo ranks: a checkpoint holds the state as it was when save()
returned, though training changed the weights while it was being written; the last whole checkpoint stays in place
until the new one is complete on every rank, also when the job dies with a write in flight."""
import json
import os
import subprocess
import sys

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


def stored_step():
    with open(os.path.join(path, "trainer_state.json")) as fh:
        return json.load(fh)["step"]


if mode == "train":
    ckpt = trainer.Checkpointer(path)
    train_step()
    ckpt.save(model, optimizer, {"step": 1})
    ckpt.wait()
    train_step()
    at_save = weights()
    state = {"step": 2}
    ckpt.save(model, optimizer, state)
    state["step"] = 99                                   # the caller's dict moves on
    with torch.no_grad():                                # ... and so do the weights, while the write goes on
        for p in model.parameters():
            p.add_(1.0)
    train_step()
    in_flight = stored_step()
    ckpt.wait()
    if rank == 0:
        torch.save(at_save, os.path.join(out, "at_save.pt"))
        print("RESULT", json.dumps({"in_flight": in_flight, "after_wait": stored_step(),
                                    "tmp_left": os.path.exists(path + ".tmp")}))
    train_step()
    ckpt.save(model, optimizer, {"step": 3})
    if rank == 0:                                        # however far the write got, leave a part of it behind
        os.makedirs(path + ".tmp", exist_ok=True)
        open(os.path.join(path + ".tmp", "partial"), "w").close()
    os._exit(0)                                          # the job dies with this write in flight
else:
    step = trainer.load_checkpoint(path, model, optimizer)["step"]
    expected = torch.load(os.path.join(out, "at_save.pt"))
    same = all(torch.equal(v, expected[k]) for k, v in weights().items())
    ckpt = trainer.Checkpointer(path)                    # a stale path.tmp from the dead job is no obstacle
    train_step()
    ckpt.save(model, optimizer, {"step": step + 1})
    ckpt.wait()
    if rank == 0:
        print("RESULT", json.dumps({"step": step, "same": same, "next": stored_step()}))
"""


def run_ranks(script, mode, out):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, ROOT, mode,
           str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_background_checkpoint_holds_the_state_of_save_and_replaces_the_last_only_when_whole(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    trained = run_ranks(script, "train", tmp_path)
    assert trained == {"in_flight": 1, "after_wait": 2, "tmp_left": False}
    resumed = run_ranks(script, "resume", tmp_path)
    assert resumed == {"step": 2, "same": True, "next": 3}
