"""Watching a run: the metrics file is strict JSON and a resumed run does not log a step twice
(parts/trainer.py's MetricsLog); sft.py and gppo.py mirror it to TensorBoard and Weights & Biases
(parts/tracking.py), each read back with its own reader and compared with metrics.jsonl; a missing
optional package is one line naming requirements-extras.txt; experiments/plot_train.py on a real SFT
and a real GPPO metrics file. The tests of a backend skip, saying so, when its package is not
installed."""

import glob
import json
import math
import os
import struct
import subprocess
import sys

import pytest
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import gppo  # noqa: E402
import sft  # noqa: E402
from parts import tracking, trainer  # noqa: E402
from parts.cli import parse_config  # noqa: E402

EXTRAS = "pip install -r requirements-extras.txt"


def needs(package):
    if tracking.importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed ({EXTRAS} installs the optional packages)")


def strict(line: str):
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(line, parse_constant=no_constant)


def read_jsonl(path):
    with open(path) as fh:
        return [strict(line) for line in fh]


@pytest.fixture
def one_rank():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def test_metrics_file_is_strict_json_and_a_resume_drops_later_steps(tmp_path, one_rank):
    """NaN and infinities, at any depth, are written as null; reopened at step 1, the records of
    step 2 (logged by a run that died before its next checkpoint) are dropped; a mirror gets each
    record as written."""
    path = tmp_path / "metrics.jsonl"
    mirrored = []

    class Mirror:
        log = mirrored.append
        close = lambda self: None

    log = trainer.MetricsLog(str(path), 0, mirror=Mirror())
    log.write(
        dict(
            step=1,
            loss=0.5,
            entropy_clipped=math.nan,
            ratio=[1.0, math.inf],
            nested=dict(x=-math.inf),
        )
    )
    log.write(dict(step=2, loss=0.25))
    log.close()
    assert read_jsonl(path) == [
        dict(step=1, loss=0.5, entropy_clipped=None, ratio=[1.0, None], nested=dict(x=None)),
        dict(step=2, loss=0.25),
    ]
    assert mirrored == read_jsonl(path)
    trainer.MetricsLog(str(path), 1).close()
    assert [r["step"] for r in read_jsonl(path)] == [1]


def test_the_ablation_report_reads_null_as_a_missing_value(tmp_path):
    """experiments/ablate.py's statistics over a metrics file where one step had no clipped token
    (its entropy_clipped written as null): the mean is over the steps that have one, as it was over
    the non-NaN ones."""
    import ablate

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        "".join(
            json.dumps(dict(step=s, accuracy=0.5, entropy_clipped=e)) + "\n"
            for s, e in ((1, None), (2, 0.25), (3, 0.75))
        )
    )
    records = ablate.read_metrics(str(path))
    stats = ablate.run_stats({"entropy_clipped": [ablate.curve(records, "entropy_clipped")]})
    assert stats["entropy_clipped"][0] == 0.5


def test_report_to_names_an_unknown_backend_or_a_missing_package(monkeypatch):
    with pytest.raises(SystemExit, match="'mlflow' is not one of tensorboard, wandb"):
        parse_config(sft.SFTConfig, ["--report_to=mlflow"])
    # as if not installed
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    for config in (sft.SFTConfig, gppo.GPPOConfig):
        with pytest.raises(
            SystemExit,
            match=r"the wandb package is not installed; `pip install -r "
            r"requirements-extras.txt`",
        ):
            parse_config(config, ["--report_to=wandb"])
    assert tracking.backends("") == tracking.backends("none") == []


def tensorboard_scalars(log_dir) -> dict:
    """{tag: [(step, value)]} of every scalar in the event files under log_dir, by TensorBoard's own
    reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def wandb_history(run_dir) -> tuple:
    """(history rows {key: value, "_step": step}, config {key: value}) of the offline run under
    run_dir/wandb, read from its .wandb file: wandb's records (its own protobuf,
    wandb_internal_pb2.Record) in the LevelDB log layout it writes them in: a 7-byte file header
    (":W&B", 0xBEE1, version 0), then 32 KiB blocks of chunks, each a 7-byte header (CRC32C, length
    uint16, type: 1 whole, 2 first, 3 middle, 4 last) and its bytes."""
    from wandb.proto import wandb_internal_pb2

    files = glob.glob(os.path.join(str(run_dir), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(files) == 1, files
    raw = open(files[0], "rb").read()
    assert raw[:7] == b":W&B\xe1\xbe\x00", raw[:7]
    rows = []
    config = {}
    pos = 7
    payload = b""
    while pos + 7 <= len(raw):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if kind == 0:  # zeros: the rest of the block is padding
            pos += left
            continue
        payload += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            payload = b""
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
            elif record.WhichOneof("record_type") == "run":
                config.update(
                    {
                        item.key or "/".join(item.nested_key): json.loads(item.value_json)
                        for item in record.run.config.update
                    }
                )
    return rows, config


def assert_mirrored(metrics: list, scalars: dict, rows: list, keys: tuple):
    """Each number of each metrics record, at its step, in TensorBoard (fp32) and in wandb (as
    written)."""
    for key in keys:
        expected = [(r["step"], r[key]) for r in metrics if r.get(key) is not None]
        assert expected, key
        if scalars is not None:
            assert [step for step, _ in scalars[key]] == [step for step, _ in expected], key
            assert [v for _, v in scalars[key]] == pytest.approx(
                [v for _, v in expected], rel=2**-23
            ), key
        if rows is not None:
            assert [(row["_step"], row[key]) for row in rows if key in row] == pytest.approx(
                expected
            ), key


def run_script(*argv, cwd=ROOT, scratch=None):
    """A script run to its end; scratch: where wandb keeps its cache, config and logs (else under
    $HOME)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="offline", WANDB_SILENT="true")
    if scratch:
        env.update(
            {
                f"WANDB_{name}_DIR": str(scratch / name.lower())
                for name in ("CACHE", "CONFIG", "DATA")
            }
        )
    proc = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=400, cwd=cwd
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_sft_metrics_go_to_tensorboard_and_wandb_and_plot(tmp_path, toy_files):
    """sft.py --report_to=tensorboard,wandb: every logged number read back from both, equal to
    metrics.jsonl (fp32 in TensorBoard); the config travels with the wandb run; then plot_train.py
    on that SFT metrics file."""
    needs("tensorboard")
    needs("wandb")
    out = tmp_path / "sft"
    run_script(
        "sft.py",
        f"--out_dir={out}",
        *toy_files["sft"],
        "--max_steps=3",
        "--log_every=1",
        "--n_layer=1",
        "--hidden=32",
        "--intermediate=64",
        "--n_head=2",
        "--n_kv_head=1",
        "--head_dim=16",
        "--row_tokens=256",
        "--max_len=256",
        "--report_to=tensorboard,wandb",
        scratch=tmp_path,
    )
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3]
    rows, config = wandb_history(out)
    assert_mirrored(
        metrics, tensorboard_scalars(out / "tensorboard"), rows, ("loss", "lr", "grad_norm")
    )
    assert config["row_tokens"] == 256 and config["report_to"] == "tensorboard,wandb"
    check_plot(out / "metrics.jsonl", tmp_path / "sft.png", "SFT, 3 logged steps")


@pytest.fixture(scope="module")
def rl_run(tiny_checkpoint, tmp_path_factory, toy_files):
    """A 3-step GPPO run (tests/driver.py's reward) reporting to TensorBoard, resumed once at step 2
    after a run that died having logged step 3; or None when tensorboard is not installed."""
    if tracking.importlib.util.find_spec("tensorboard") is None:
        return None
    out = tmp_path_factory.mktemp("rl") / "gppo"
    args = (
        "tests/driver.py",
        "gppo",
        f"--init_from={tiny_checkpoint}",
        f"--out_dir={out}",
        "--prompts_per_step=4",
        "--mini_batch_prompts=2",
        "--group_size=4",
        "--max_response_len=16",
        "--eval_every=2",
        "--eval_k=0",
        "--eval_problems=4",
        *toy_files["rl"],
        *toy_files["held_out"],
        "--lr=1e-2",
        "--warmup_steps=1",
        "--reward_workers=2",
        "--report_to=tensorboard",
    )
    run_script(*args, "--steps=2")
    first = read_jsonl(out / "metrics.jsonl")
    # a run that logged step 3, then died before its checkpoint
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps(dict(first[-1], step=3, reward=-1.0)) + "\n")
    stale = dict(first[-1], step=3, reward=-1.0)
    tracking.Tracker("tensorboard", str(out), {}, first_step=2).log(stale)  # ... and mirrored it
    run_script(*args, "--steps=3")
    return out


def test_gppo_metrics_go_to_tensorboard_a_resume_purges_the_dead_run_and_plot(rl_run, tmp_path):
    """gppo.py --report_to=tensorboard: the records of steps 0 (held-out), 1, 2, 3 read back equal
    to metrics.jsonl, the dead run's step 3 purged; then plot_train.py on that RL metrics file."""
    needs("tensorboard")
    metrics = read_jsonl(rl_run / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [0, 1, 2, 3] and -1.0 not in [
        r.get("reward") for r in metrics
    ]
    assert_mirrored(
        metrics,
        tensorboard_scalars(rl_run / "tensorboard"),
        None,
        ("reward", "accuracy", "eval_accuracy", "response_len_mean", "lr"),
    )
    check_plot(
        rl_run / "metrics.jsonl", tmp_path / "rl.png", "3 steps; on-policy accuracy (T=1) step 1"
    )


def check_plot(metrics, figure, expected):
    out = run_script("experiments/plot_train.py", f"--metrics={metrics}")
    assert expected in out, out
    if tracking.importlib.util.find_spec("matplotlib") is None:
        return
    out = run_script("experiments/plot_train.py", f"--metrics={metrics}", f"--out={figure}")
    assert f"wrote {figure}" in out and open(figure, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_where_it_is_declared(tmp_path):
    """matplotlib made unimportable: the numbers print, then one line names the package and
    requirements-extras.txt, exit status 2."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(dict(step=s, loss=1.0 / s, lr=1e-3)) + "\n" for s in (1, 2)))
    code = (
        f"import sys; sys.modules['matplotlib'] = None; sys.path.insert(0, {os.path.join(ROOT, 'experiments')!r});"
        f" import plot_train; from parts.cli import parse_config; "
        f"plot_train.main(parse_config(plot_train.PlotConfig, ['--metrics={path}', '--out={tmp_path}/x.png']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (
        proc.returncode == 2
        and "SFT, 2 logged steps; loss 1.0 at the first, 0.5 at step 2" in proc.stdout
    )
    errors = proc.stderr.strip().splitlines()
    assert (
        len(errors) == 1 and "matplotlib" in errors[0] and "requirements-extras.txt" in errors[0]
    ), proc.stderr
