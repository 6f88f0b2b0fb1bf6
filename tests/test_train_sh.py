"""train.sh passes only options its scripts know: the real pipeline cannot run here (it needs GPUs
and data), so a renamed or removed option would otherwise only fail on a cluster. `bash train.sh
quick`, the README's first command, runs end to end (about 3 minutes on 2 cores, too long for the
suite: .ci/run runs it with TRAIN_SH_QUICK=1)."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import distill  # noqa: E402
import eval as ev  # noqa: E402
import gppo  # noqa: E402
import sft  # noqa: E402
from tools import filter_code, toy  # noqa: E402


def commands():
    """(script, [option names]) for every call of toy.py / distill.py / sft.py / gppo.py / eval.py /
    filter_code.py in train.sh."""
    text = open(os.path.join(ROOT, "train.sh")).read().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for m in re.finditer(r"\b(toy|distill|sft|gppo|eval|filter_code)\.py\b", line):
            rest = re.split(r"\bstage\b|;|&&|\|\|", line[m.end() :])[0]
            script = m.group(1)
            found.append((script, re.findall(r"(?<![\w-])--(\w+)=", rest)))
    return found


CONFIGS = {
    "toy": toy.ToyConfig,
    "distill": distill.DistillConfig,
    "sft": sft.SFTConfig,
    "gppo": gppo.GPPOConfig,
    "eval": ev.EvalConfig,
    "filter_code": filter_code.CodeFilterConfig,
}


def test_train_sh_uses_only_known_options():
    calls = commands()
    assert {script for script, _ in calls} == set(CONFIGS), calls  # the parser sees every stage
    for script, options in calls:
        unknown = set(options) - set(CONFIGS[script].__dataclass_fields__)
        assert not unknown, f"train.sh passes unknown options to {script}: {sorted(unknown)}"


def test_quick_run_passes_only_known_options():
    """`bash train.sh quick` sets TOY_ARGS, SFT_ARGS, GPPO_ARGS and EVAL_ARGS for the stages below
    it."""
    text = open(os.path.join(ROOT, "train.sh")).read()
    found = re.findall(r'^\s*(TOY|DISTILL|SFT|GPPO|EVAL)_ARGS="([^"$]*)', text, flags=re.M)
    assert {stage for stage, _ in found} == {"TOY", "SFT", "GPPO", "EVAL"}, found
    for stage, args in found:
        config = CONFIGS[stage.lower()]
        unknown = set(re.findall(r"--(\w+)=", args)) - set(config.__dataclass_fields__)
        assert not unknown, (
            f"train.sh quick passes unknown options to {stage.lower()}: {sorted(unknown)}"
        )


def strict_jsonl(path):
    def no_constant(name):
        raise ValueError(f"{path}: {name} is not JSON")

    with open(path) as fh:
        return [json.loads(line, parse_constant=no_constant) for line in fh]


def test_ci_runs_the_readmes_test_command_with_what_it_needs():
    """CI must run the suite exactly as the README tells a user to, and requirements.txt must install
    the plugin that command's `-n` needs."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    lines = [line.split("#")[0].strip() for line in readme.splitlines()]
    suite = [
        line for line in lines if line.startswith("python -m pytest") and line.endswith(" tests")
    ]
    assert len(suite) == 1, suite
    ci = [line.strip() for line in open(os.path.join(ROOT, ".ci", "run")).read().splitlines()]
    assert suite[0] in ci
    requirements = open(os.path.join(ROOT, "requirements.txt")).read()
    if re.search(r"\s-n\s", suite[0]):
        assert re.search(r"^pytest-xdist\b", requirements, re.M)


@pytest.mark.skipif(
    os.environ.get("TRAIN_SH_QUICK") != "1",
    reason="bash train.sh quick takes about 3 minutes on 2 "
    "cores: .ci/run runs it (TRAIN_SH_QUICK=1 python -m pytest -q tests/test_train_sh.py)",
)
def test_quick_runs_every_stage_on_the_toy(tmp_path):
    """Each stage finishes and leaves what the next one reads: SFT data, an SFT export, 5 GPPO steps
    with their samples, both models' evaluations and the table comparing them; the metrics files are
    strict JSON."""
    out = tmp_path / "quick"
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "train.sh"), "quick"],
        capture_output=True,
        text=True,
        env=dict(os.environ, OUT=str(out)),
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for stage in ("toy", "distill", "sft", "gppo", "eval-sft", "eval-rl"):
        assert f"=== [{stage}] done in" in proc.stdout, stage
    report = json.load(open(out / "distill" / "report.json"))
    assert report["sft_rows"] == len(strict_jsonl(out / "distill" / "sft.jsonl")) > 0
    sft_steps = int(re.search(r"^done: (\d+) steps in", proc.stdout, flags=re.M).group(1))
    assert strict_jsonl(out / "sft" / "metrics.jsonl")[-1]["step"] == sft_steps > 0
    for model in ("sft", "gppo"):
        assert os.path.isfile(out / model / "hf" / "config.json") and os.path.isfile(
            out / model / "hf" / "tokenizer.json"
        )
    assert [r["step"] for r in strict_jsonl(out / "gppo" / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    samples = strict_jsonl(out / "gppo" / "samples.jsonl")
    assert [s["step"] for s in samples] == [step for step in range(1, 6) for _ in range(4)]
    assert all(
        {"prompt", "response", "reward", "advantage", "finish_reason"} <= set(s) for s in samples
    )
    for label in ("sft", "rl"):
        results = json.load(open(out / "eval" / label / "results.json"))
        assert {name: b["problems"] for name, b in results["benchmarks"].items()} == {
            "countdown_3": 40,
            "countdown_4": 40,
            "toy_code": 4,
        }
    table = proc.stdout[proc.stdout.index("=== SFT vs GPPO") :]
    assert "SFT" in table and "GPPO" in table and "countdown_3" in table, table
    # plot_train.py, both files
    assert "SFT, " in proc.stdout and "5 steps; on-policy accuracy" in proc.stdout


def test_train_sh_syntax():
    assert subprocess.run(["bash", "-n", os.path.join(ROOT, "train.sh")]).returncode == 0


def stage_function() -> str:
    """train.sh's own stage() function, as its text."""
    text = open(os.path.join(ROOT, "train.sh")).read()
    return re.search(r"^stage\(\) \{.*?^\}\n", text, flags=re.S | re.M).group(0)


@pytest.mark.parametrize(
    "exit_status,said,status",
    [
        (143, "stopped by a signal (exit 143)", 143),
        (130, "stopped by a signal", 130),
        (3, "failed", 1),
    ],
)
def test_a_stopped_stage_is_not_called_a_failure(exit_status, said, status):
    """A stage that exits 128 + SIGTERM or SIGINT (gppo.py, sft.py and ablate.py after a graceful
    stop) was stopped: train.sh says so and how to go on, and keeps its status; any other nonzero
    status is a failure (exit 1)."""
    script = f"set -euo pipefail\n{stage_function()}stage demo bash -c 'exit {exit_status}'\n"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == status and said in proc.stderr, (proc.returncode, proc.stderr)
    stopped = exit_status in (130, 143)
    assert ("rerun the same command to go on" in proc.stderr) == stopped, proc.stderr
    assert ("fix it and rerun" in proc.stderr) == (not stopped), proc.stderr
