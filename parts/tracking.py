"""Experiment trackers for a training loop's metric records: TensorBoard and Weights & Biases, both
optional.

    tracker = Tracker("tensorboard,wandb", out_dir, config=dict(lr=1e-6), first_step=step)   # on rank 0 only
    tracker.log({"step": 3, "loss": 0.51, "entropy_clipped": None})   # each number at its step; None, text left out
    tracker.close()
The JSON-lines metrics file stays the run's record; a tracker mirrors each record as it is written,
to be watched. A backend's library is imported only when it is asked for; the optional packages are
declared in requirements-extras.txt, and a missing one is named with that file in one line, before
anything runs (backends()).
  tensorboard: event files in out_dir/tensorboard (`tensorboard --logdir out_dir/tensorboard`); a run resumed at step
               s purges the events after s, as the metrics file drops its records after s.
  wandb:       offline unless $WANDB_MODE says otherwise (no account, no network), one run per invocation in
               out_dir/wandb, the config attached; `wandb sync out_dir/wandb/offline-run-*` uploads it later.
               $WANDB_PROJECT names the project (default klear-reasoner).
Standard library only, plus the backends asked for.
"""

import importlib.util
import math
import os

BACKENDS = ("tensorboard", "wandb")
EXTRAS = "requirements-extras.txt"  # where the optional packages are declared (pip install -r it)


def backends(report_to: str) -> list:
    """The backends named in a --report_to value (comma-separated; "" or "none": none). ValueError,
    one line, for a name that is not a backend or whose package is not installed (checked without
    importing it)."""
    names = [name.strip() for name in report_to.split(",") if name.strip() not in ("", "none")]
    for name in names:
        if name not in BACKENDS:
            raise ValueError(
                f"--report_to={report_to}: {name!r} is not one of {', '.join(BACKENDS)} (or none)"
            )
        if importlib.util.find_spec(name) is None:
            raise ValueError(
                f"--report_to={report_to}: the {name} package is not installed; `pip install -r "
                f"{EXTRAS}` installs the optional packages (or `pip install {name}`)"
            )
    return names


class Tracker:
    """The trackers of --report_to for one run, written to under out_dir; with none, log() and
    close() do nothing."""

    def __init__(self, report_to: str, out_dir: str, config: dict, first_step: int = 0):
        self.tensorboard = None
        self.wandb_run = None
        names = backends(report_to)
        if "tensorboard" in names:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            # purge_step: events at or after it, left by a run that died before its checkpoint, are
            # dropped
            self.tensorboard = SummaryWriter(
                os.path.join(out_dir, "tensorboard"), purge_step=first_step + 1
            )
            self.tensorboard.add_text(
                "config", "\n".join(f"    {k} = {v!r}" for k, v in config.items())
            )
        if "wandb" in names:
            import wandb

            self.wandb_run = wandb.init(
                dir=out_dir,
                mode=os.environ.get("WANDB_MODE", "offline"),
                project=os.environ.get("WANDB_PROJECT", "klear-reasoner"),
                name=os.path.basename(os.path.abspath(out_dir)),
                config=config,
                # our stdout stays ours
                settings=wandb.Settings(console="off"),
            )

    def log(self, record: dict):
        """Every finite number of the record (a metrics record: it has "step") at that step."""
        step = record["step"]
        numbers = {
            k: float(v)
            for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and math.isfinite(v)
        }
        if self.tensorboard:
            for name, value in numbers.items():
                self.tensorboard.add_scalar(name, value, step)
            self.tensorboard.flush()
        if self.wandb_run:
            self.wandb_run.log(numbers, step=step)

    def close(self):
        if self.tensorboard:
            self.tensorboard.close()
        if self.wandb_run:
            self.wandb_run.finish()
