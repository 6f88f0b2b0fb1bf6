"""The paper's code-prompt filter, run once, offline: keep the code prompts whose tests can be
trusted. The paper keeps a prompt only if a strong model passes all its tests in >= 50% of 16
samples: the point is to drop prompts with broken tests, not hard ones. With what a user has: a
stronger model's pass rate in the data (--pass_rate_field), and the reference solutions data sets
ship (APPS, TACO: one of them must pass every test of its prompt).

    python tools/filter_code.py --code_data=IN.jsonl --out=OUT.jsonl [--pass_rate_field=FIELD] [--min_tests=16]
"""

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data  # noqa: E402
import reward  # noqa: E402
from parts.cli import parse_config  # noqa: E402
from parts.trainer import InputError, print0, run_entry_point  # noqa: E402
from data import read  # noqa: E402


@dataclass
class CodeFilterConfig:
    """Keeps the code prompts whose tests can be trusted (check_code_prompts) and copies their rows
    to --out."""

    # fmt: off
    code_data: str = ""                # the code prompts (.jsonl, .json or .parquet; the formats data.py reads)
    out: str = ""                      # where the rows that pass every check are written, in the input's format
    skip_bad_rows: bool = False        # skip rows whose tests cannot be run (counted) instead of stopping
    min_tests: int = 16                # drop problems with fewer tests (paper: 16)
    pass_rate_field: str = ""          # a stronger model's pass rate per row (see data.load_code_jsonl); empty = none
    min_pass_rate: float = 0.5         # keep rows whose pass rate is >= this (paper: 0.5 of 16 samples)
    check_references: bool = True      # run each row's reference solutions on its tests; drop it if none passes
    timeout_s: float = 6.0             # per test
    workers: int = 0                   # prompts checked at once; 0 = usable cores
    # fmt: on


def filter_code_main(cfg: CodeFilterConfig):
    """The code-prompt filter, once, offline; the kept rows are written to OUT in IN's own format
    (data.copy_rows: JSON lines byte for byte, a JSON array, parquet)."""
    if not cfg.code_data or not cfg.out:
        raise InputError("filter_code needs --code_data=IN.jsonl and --out=OUT.jsonl")
    if os.path.splitext(cfg.code_data)[1] != os.path.splitext(cfg.out)[1]:
        raise InputError(
            f"--out={cfg.out}: use the extension of --code_data ({cfg.code_data}): rows keep their format"
        )
    problems = read(
        "--code_data",
        data.load_code_jsonl,
        cfg.code_data,
        min_tests=cfg.min_tests,
        pass_rate_field=cfg.pass_rate_field,
        skip_bad_rows=cfg.skip_bad_rows,
    )
    print0(f"code data: {problems.report}")
    kept, counts = check_code_prompts(
        problems,
        cfg.min_pass_rate,
        cfg.check_references,
        timeout_s=cfg.timeout_s,
        workers=cfg.workers,
    )
    data.copy_rows(cfg.code_data, cfg.out, {p["line"] for p in kept})
    counts = dict(
        rows=problems.report["rows"],
        dropped_few_tests=problems.report["dropped_few_tests"],
        **counts,
    )
    print0(f"wrote {cfg.out}: {counts}")
    return counts


def check_code_prompts(
    problems,
    min_pass_rate: float,
    check_references: bool,
    *,
    timeout_s: float = 6.0,
    workers: int = 0,
    max_references: int = 3,
):
    """Keep the code prompts whose tests can be trusted. The paper keeps a prompt only if a strong
    model passes all its tests in >= 50% of 16 samples: the point is to drop prompts with *broken
    tests*, not hard ones (sampling the policy being trained instead would drop exactly the prompts
    RL can learn from). With what a user has:
      - problem["pass_rate"], a stronger model's precomputed rate (data.load_code_jsonl's pass_rate_field), must be
        >= min_pass_rate;
      - with check_references, a reference solution (problem["solutions"], as APPS/TACO ship them) must pass all
        the prompt's tests: the first of up to max_references that does keeps it; if all fail, the tests are broken.
    A prompt with neither is kept. `workers` prompts at a time (0 = usable cores), each prompt's
    tests in turn, timeout_s per test. Returns (kept problems, counts)."""
    counts = dict(
        code_prompts=len(problems),
        dropped_pass_rate=0,
        dropped_references_fail=0,
        references_checked=0,
        kept=0,
    )
    trusted = [p for p in problems if p.get("pass_rate", 1.0) >= min_pass_rate]
    counts["dropped_pass_rate"] = len(problems) - len(trusted)
    if check_references:
        checked = [p for p in trusted if p.get("solutions")]
        mine = checked
        t0 = time.time()
        broken = []
        sandbox = reward.SandboxConfig(timeout_s=timeout_s, workers=1)
        with ThreadPoolExecutor(workers or len(os.sched_getaffinity(0))) as pool:
            verdicts = pool.map(
                lambda p: any(
                    reward.all_passed(reward.run_tests(s, p["tests"], sandbox))
                    for s in p["solutions"][:max_references]
                ),
                mine,
            )
            for i, (problem, ok) in enumerate(zip(mine, verdicts), 1):
                if not ok:
                    broken.append(problem["id"])
                if i % 50 == 0 or i == len(mine):
                    print0(
                        f"checking reference solutions: {i}/{len(mine)} prompts in {time.time() - t0:.0f}s, "
                        f"{len(broken)} with broken tests so far"
                    )
        broken = set(broken)
        counts.update(references_checked=len(checked), dropped_references_fail=len(broken))
        trusted = [p for p in trusted if p["id"] not in broken]
    counts["kept"] = len(trusted)
    return trusted, counts


if __name__ == "__main__":
    run_entry_point(filter_code_main, parse_config(CodeFilterConfig))
