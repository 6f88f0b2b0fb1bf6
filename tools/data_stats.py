"""What a data file holds, read as a stream in flat memory: records kept and dropped (and why),
tests per code problem, verdicts of responses, and with a tokenizer the token lengths and how the
conversations pack.

    python tools/data_stats.py FILE [--kind=sft|responses|math|code] [--tokenizer=DIR] [--row_tokens=N]
"""

import array
import os
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data  # noqa: E402
from parts import formats, packing  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class StatsConfig:
    """What a data file (.jsonl, .json or .parquet) holds, read as a stream."""

    # fmt: off
    positional: ClassVar[str] = "file"   # `data_stats.py FILE` is `data_stats.py --file=FILE`
    file: str = ""        # the data file
    kind: str = ""        # sft | responses | math | code; empty = guessed from the first row
    tokenizer: str = ""   # a tokenizer dir/file: token lengths and packing too
    row_tokens: int = 2048  # with a tokenizer: the packed row length whose fill is reported
    skip_bad_rows: bool = False  # skip rows that cannot be graded, counted in the report, instead of stopping
    # fmt: on


def stats(cfg: StatsConfig) -> None:
    """Stream the file once (flat memory: per row only its lengths are kept) and print what it
    holds."""
    kinds = ("sft", "responses", "math", "code")
    if cfg.kind and cfg.kind not in kinds:
        raise SystemExit(
            f"error: --kind={cfg.kind!r}: use {', '.join(kinds)} (or leave it empty to guess)"
        )
    kind = cfg.kind or data.guess_kind(next(data.read_rows(cfg.file))[1])
    tok = data.load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None
    records, report = formats.stream(kind, cfg.file, cfg.skip_bad_rows)
    lengths = array.array("q")
    trained = 0
    n_tests = array.array("q")
    functional = 0
    verdicts = {}
    pending = []  # SFT conversations waiting to be tokenized as one batch

    def tokenize_pending():
        nonlocal trained
        for ids, mask in data.encode_sft_dataset(tok, pending, max_len=10**9)[0]:
            lengths.append(len(ids))
            trained += int(mask.sum())
        pending.clear()

    n = 0
    for n, item in enumerate(records, 1):
        if n % 200_000 == 0:
            print(f"... {n} records", file=sys.stderr, flush=True)
        if kind == "code":
            n_tests.append(len(item["tests"]))
            functional += "fn_name" in item["tests"][0] if item["tests"] else 0
        if kind == "responses":
            for r in item["responses"]:
                verdicts[r["correct"]] = verdicts.get(r["correct"], 0) + 1
        if tok is not None and kind == "sft":
            pending.append(item)
            if len(pending) == 512:
                tokenize_pending()
        elif tok is not None:
            lengths.append(len(data.encode_prompt(tok, item["prompt"])))
    if pending:
        tokenize_pending()
    if kind == "code" and not n:
        raise data.DataError(f"{cfg.file}: no problem has at least min_tests=1 tests ({report})")
    print(f"{cfg.file}: {n} {kind} records; {report}")
    if kind == "code":
        print(
            f"tests per problem: min {min(n_tests)} mean {np.mean(n_tests):.1f} max {max(n_tests)}; "
            f"{sum(k >= 16 for k in n_tests)} problems with >= 16; {functional} functional"
        )
    if kind == "responses":
        print(
            f"responses: {sum(verdicts.values())} ({verdicts.get(True, 0)} correct, {verdicts.get(False, 0)} wrong, "
            f"{verdicts.get(None, 0)} without a verdict)"
        )
    if tok is not None and lengths:
        _print_lengths(lengths, trained if kind == "sft" else None, cfg.row_tokens)


def _print_lengths(lengths, trained: int | None, row_tokens: int) -> None:
    """Token lengths per record; for SFT conversations (`trained`: their loss-mask tokens) also how
    they pack."""
    if trained is not None:
        print(f"tokens: {sum(lengths)}, {trained / sum(lengths):.1%} trained")
    q = np.percentile(np.frombuffer(lengths, dtype=np.int64), [0, 50, 90, 99, 100])
    print("tokens per record: min {:.0f} median {:.0f} p90 {:.0f} p99 {:.0f} max {:.0f}".format(*q))
    if trained is not None:
        fits = [k for k in lengths if k <= row_tokens]
        rows = packing.plan_packing(fits, row_tokens)
        print(
            f"packed into {len(rows)} rows of {row_tokens}: {sum(fits) / (len(rows) * row_tokens):.2%} real "
            f"tokens ({len(lengths) - len(fits)} records longer than a row left out)"
        )


if __name__ == "__main__":
    try:
        stats(parse_config(StatsConfig))
    # bad input: one line, as the trainers print it; anything else keeps its traceback
    except data.INPUT_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
