"""
Benchmark of data.py's streaming reader: peak resident memory of `python tools/data_stats.py FILE`
on parquet files of growing length. Flat memory means the peak stays put as the file grows from 10k
to 1M rows: rows are decoded in batches of formats.PARQUET_BATCH_ROWS and only a few numbers per row
are kept. For contrast, the peak of reading the same file whole (pyarrow.parquet.read_table), and of
a bare `import data`.

    peak RSS = ru_maxrss of the child process (os.wait4), in MiB

The files are written here, in row groups of --row_group rows (Hugging Face's own parquet files hold
row groups of a few thousand to ~100k rows), with OpenThoughts3's layout (`conversations`,
from/value, a <think> block) or NuminaMath-1.5's (problem, solution, answer; --layout=math, one row
in five a "proof" to skip).

    python benchmarks/bench_data_stream.py
    python benchmarks/bench_data_stream.py --rows=10000,100000,1000000 --layout=math --dir=/tmp/bench_data
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from parts.cli import parse_config  # noqa: E402


@dataclass
class Config:
    # fmt: off
    rows: str = "10000,100000,1000000"   # file lengths to measure, comma-separated
    layout: str = "sft"                  # sft (OpenThoughts3) | math (NuminaMath-1.5)
    row_group: int = 10000               # rows per parquet row group
    dir: str = ""                        # where the files go; empty = a temporary directory, removed at the end
    # fmt: on

    def __post_init__(self):
        if self.layout not in ("sft", "math"):
            raise ValueError("--layout must be sft or math")


def rows_of(layout: str, start: int, n: int) -> pa.Table:
    """n rows of the layout, numbered from start (distinct text per row, ~400 bytes of it)."""
    ids = range(start, start + n)
    if layout == "sft":
        return pa.table(
            {
                "difficulty": [i % 10 for i in ids],
                "source": ["ai2-adapt-dev/openmath-2-math"] * n,
                "domain": ["math"] * n,
                "conversations": [
                    [
                        {
                            "from": "human",
                            "value": f"What is {i} + {i + 1}? Show the steps of the column addition.",
                        },
                        {
                            "from": "gpt",
                            "value": f"<think>\nAdd the units, carry, then the tens of {i} and {i + 1}; "
                            f"check by subtracting {i} from the total.\n</think>\n\n"
                            f"The sum is $\\boxed{{{2 * i + 1}}}$.",
                        },
                    ]
                    for i in ids
                ],
            }
        )
    return pa.table(
        {
            "problem": [
                f"Find the value of {i} times 3 plus 7, and explain each step of the computation."
                for i in ids
            ],
            "solution": [
                f"Multiply first: {i} * 3 = {3 * i}; then add seven to get $\\boxed{{{3 * i + 7}}}$."
                for i in ids
            ],
            "answer": ["proof" if i % 5 == 0 else str(3 * i + 7) for i in ids],
            "question_type": ["proof" if i % 5 == 0 else "math-word-problem" for i in ids],
            "source": ["olympiads"] * n,
            "synthetic": [False] * n,
        }
    )


def write_file(path: str, layout: str, rows: int, row_group: int) -> None:
    first = rows_of(layout, 0, min(row_group, rows))
    with pq.ParquetWriter(path, first.schema) as writer:
        writer.write_table(first)
        for start in range(row_group, rows, row_group):
            writer.write_table(rows_of(layout, start, min(row_group, rows - start)))


class _Popen(subprocess.Popen):
    """Popen that keeps the child's resource usage (os.wait4) when it reaps it."""

    rusage = None

    def _try_wait(self, wait_flags):
        pid, status, self.rusage = os.wait4(self.pid, wait_flags)
        return pid, status


def peak_rss(argv) -> tuple:
    """(peak RSS in MiB, wall seconds, first line printed) of a child process."""
    t0 = time.perf_counter()
    proc = _Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    return (
        proc.rusage.ru_maxrss / 1024,
        time.perf_counter() - t0,
        (out.strip().splitlines() or [""])[0][:110],
    )


def main(cfg: Config) -> None:
    where = cfg.dir or tempfile.mkdtemp(prefix="bench_data_")
    os.makedirs(where, exist_ok=True)
    print(
        f"layout {cfg.layout}, row groups of {cfg.row_group}, batches of 1024 rows; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)"
    )
    floor = peak_rss([sys.executable, "-c", "import data"])[0]
    print(f"bare `import data`: peak RSS {floor:.0f} MiB")
    print(
        f"{'rows':>9} {'file MiB':>9} {'stats peak MiB':>15} {'stats s':>8} {'read_table peak MiB':>20}   stats says"
    )
    try:
        for rows in [int(r) for r in cfg.rows.split(",")]:
            path = os.path.join(where, f"{cfg.layout}_{rows}.parquet")
            write_file(path, cfg.layout, rows, cfg.row_group)
            args = ["--skip_bad_rows=true"] if cfg.layout == "math" else []
            stats, wall, said = peak_rss([sys.executable, "tools/data_stats.py", path, *args])
            whole = peak_rss(
                [
                    sys.executable,
                    "-c",
                    "import sys, pyarrow.parquet as pq; print(pq.read_table(sys.argv[1]).num_rows)",
                    path,
                ]
            )[0]
            print(
                f"{rows:>9} {os.path.getsize(path) / 2**20:>9.1f} {stats:>15.0f} {wall:>8.1f} {whole:>20.0f}   "
                f"{said[len(path) + 2 :].split(';')[0]}"
            )
            os.remove(path)
    finally:
        if not cfg.dir:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main(parse_config(Config))
