"""The Countdown toy's calibration, on SFT statistics only (no RL): is the SFT model in the regime
where RL can matter?

After SFT, on the RL prompt distribution (held-out problems of --rl_numbers numbers: 3, as
train.sh's gppo stage trains on rl/countdown_3.jsonl, and `bash train.sh ablate`) the targets are:
    0.2 <= pass@1 at T = 1 <= 0.5      greedy accuracy <= 0.7      pass@8 >= 1.5 x pass@1
and the hard prompts markedly harder than the easy (3-number) ones: pass@1 hard <= 0.75 x pass@1
easy. It runs train.sh's first stages (tools/toy.py, distill.py on its teacher files, then sft.py as
train.sh runs it) unless --sft_dir is given, then eval.py twice on both held-out sets (k samples at
T = 1 without top-p; greedy), and prints the table.
Run:  python experiments/countdown_calibrate.py                         # toy, distill, SFT, measure: ~8 min, 2 cores
      python experiments/countdown_calibrate.py --sft_dir=out/sft/hf     # measure an SFT model, ~1 min
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from parts.cli import parse_config  # noqa: E402


@dataclass
class CalibrateConfig:
    # fmt: off
    out_dir: str = "out/calibrate"   # toy/, distill/, sft/, eval_t1/, eval_greedy/, calibration.json
    sft_dir: str = ""                # an SFT Hugging Face dir to measure; empty = make one as train.sh does
    problems: int = 200              # held-out problems per set (3 and 4 numbers)
    k: int = 8                       # samples per problem at T = 1
    max_tokens: int = 400            # new tokens per response
    nproc: int = 2                   # processes for sft.py and eval.py (one thread each)
    rl_numbers: int = 3              # the RL prompts' numbers (train.sh and its ablate: 3): the targets' set
    # fmt: on


def stage(cmd, nproc):
    launch = (
        [sys.executable]
        if nproc == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
        ]
    )
    print("$", " ".join(cmd), flush=True)
    subprocess.run(launch + cmd, cwd=ROOT, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def measure(cfg: CalibrateConfig, model: str) -> dict:
    toy = os.path.join(cfg.out_dir, "toy")
    sets = ",".join(os.path.join(toy, "test", f"countdown_{n}.jsonl") for n in (3, 4))
    common = [f"--model={model}", f"--math_data={sets}", f"--max_tokens={cfg.max_tokens}"]
    runs = {
        "t1": [f"--k={cfg.k}", "--temperature=1.0", "--top_p=1.0"],
        "greedy": ["--k=1", "--temperature=0.0"],
    }
    results = {}
    for name, options in runs.items():
        out = os.path.join(cfg.out_dir, f"eval_{name}")
        stage(["eval.py", *common, *options, f"--out_dir={out}"], cfg.nproc)
        results[name] = json.load(open(os.path.join(out, "results.json")))["benchmarks"]
    table = {}
    for bench in ("countdown_3", "countdown_4"):
        t1 = results["t1"][bench]
        greedy = results["greedy"][bench]
        table[bench] = dict(
            pass1=t1["avg_at_k"],
            pass_k=t1["pass_at_k"][str(cfg.k)],
            greedy=greedy["avg_at_k"],
            mean_length=t1["mean_length"],
            truncated=t1["truncated_rate"],
        )
    return dict(
        model=os.path.abspath(model),
        k=cfg.k,
        problems=cfg.problems,
        rl_numbers=cfg.rl_numbers,
        sets=table,
        checks=targets(table, cfg.k, cfg.rl_numbers),
    )


def targets(table: dict, k: int, rl_numbers: int) -> dict:
    """{target: met?} for a table {countdown_3|countdown_4: {pass1, pass_k, greedy}} (the
    docstring's four targets)."""
    easy = table["countdown_3"]
    hard = table["countdown_4"]
    rl = table[f"countdown_{rl_numbers}"]
    n = rl_numbers
    return {
        f"0.2 <= pass@1 <= 0.5 ({n} numbers)": 0.2 <= rl["pass1"] <= 0.5,
        f"greedy <= 0.7 ({n} numbers)": rl["greedy"] <= 0.7,
        f"pass@{k} >= 1.5 x pass@1 ({n} numbers)": rl["pass_k"] >= 1.5 * rl["pass1"],
        "pass@1 hard <= 0.75 x pass@1 easy": hard["pass1"] <= 0.75 * easy["pass1"],
    }


def main(cfg: CalibrateConfig):
    if cfg.rl_numbers not in (3, 4):
        raise SystemExit(
            f"countdown_calibrate.py: --rl_numbers must be 3 or 4 (the held-out sets), "
            f"got {cfg.rl_numbers}"
        )
    model = cfg.sft_dir
    toy = os.path.join(cfg.out_dir, "toy")
    stage(
        ["tools/toy.py", "--task=countdown", f"--test_problems={cfg.problems}", f"--out={toy}"], 1
    )
    if not model:
        teacher = ",".join(
            os.path.join(toy, "teacher", f"{n}.jsonl")
            for n in ("countdown_3", "countdown_4", "toy_code")
        )
        stage(
            [
                "distill.py",
                f"--responses={teacher}",
                f"--out_dir={cfg.out_dir}/distill",
                "--benchmarks="
                + ",".join(os.path.join(toy, "test", f"countdown_{n}.jsonl") for n in (3, 4)),
            ],
            1,
        )
        stage(
            [
                "sft.py",
                f"--data={cfg.out_dir}/distill/sft.jsonl",
                f"--tokenizer={toy}/tokenizer",
                "--epochs=1",
                "--row_tokens=1024",
                "--rows_per_step=2",
                f"--out_dir={cfg.out_dir}/sft",
            ],
            cfg.nproc,
        )
        model = os.path.join(cfg.out_dir, "sft", "hf")
    report = measure(cfg, model)
    with open(os.path.join(cfg.out_dir, "calibration.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(
        f"\n{'set':12s} {'pass@1 T=1':>10s} {'greedy':>7s} {f'pass@{cfg.k}':>7s} {'ratio':>6s} {'length':>7s}"
    )
    for bench, row in report["sets"].items():
        print(
            f"{bench:12s} {row['pass1']:10.3f} {row['greedy']:7.3f} {row['pass_k']:7.3f} "
            f"{row['pass_k'] / max(row['pass1'], 1e-9):6.2f} {row['mean_length']:7.1f}"
        )
    for check, ok in report["checks"].items():
        print(f"{'met' if ok else 'NOT MET':8s} {check}")


if __name__ == "__main__":
    main(parse_config(CalibrateConfig))
