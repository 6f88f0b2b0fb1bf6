"""Public data sets as published: rows read from JSON lines, a JSON array or parquet (streamed), and
one adapter per family of formats (SFT conversations, several responses per prompt, math problems,
code problems with tests), each a table of field paths where formats differ only in names. Bad input
is a DataError naming file:row and field; a row that reads fine but cannot be graded is an
UngradableRow (skip_bad_rows=True skips and counts it).

    problems = load("math", "aime24.parquet")            # Records: a list of {id, prompt, answer}, and .report
    for n, row in read_rows("big.jsonl"): ...           # (row number, dict), one at a time
Code tests come out as {"input", "output"[, "fn_name"]} (stdin, or one JSON argument per input
line); assert programs are parsed, never run. numpy is not needed; pyarrow only for .parquet. The
formats and where each schema was read: docs/data_formats.md.
"""

import ast
import base64
import datetime
import decimal
import io
import json
import math
import os
import pickle
import re
import zlib
from typing import NamedTuple


class DataError(ValueError):
    """Bad input data; the message names file:line and field."""


# What reading a user's files raises for bad input: shown as one line naming the file; anything else
# is a bug and keeps its traceback.
INPUT_ERRORS = (
    DataError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


class Records(list):
    """What a loader returns: the records, as a plain list, plus `report`, a dict of what was read,
    kept and dropped and why, printable on one line: print(f"code data: {problems.report}")."""

    def __init__(self, items, report: dict):
        super().__init__(items)
        self.report = report


class UngradableRow(DataError):
    """A row that reads fine but cannot be graded or learned from (a placeholder answer such as
    "proof", a code row whose tests cannot be run). Refused by default; with skip_bad_rows=True the
    loader skips it and counts `reason` in its report."""

    def __init__(self, where: str, message: str, reason: str):
        super().__init__(f"{where}: {message} (skip_bad_rows=true skips such rows and counts them)")
        self.reason = reason


def load(kind: str, path: str, skip_bad_rows: bool = False, **options) -> "Records":
    """Every record of `path` read as `kind` ("sft", "responses", "math" or "code"; code takes
    min_tests and pass_rate_field), as Records: the list, and its .report."""
    records, report = stream(kind, path, skip_bad_rows, **options)
    return Records(records, report)


def stream(kind: str, path: str, skip_bad_rows: bool = False, **options) -> tuple:
    """(an iterator over the records, the report it fills as it goes): a file of any size in flat
    memory."""
    if kind not in _READERS:
        raise ValueError(f"formats: kind={kind!r}: use one of {', '.join(_READERS)}")
    report = _new_report(path)
    return _records(path, _READERS[kind](path, report, **options), report, skip_bad_rows), report


# What each kind reads (from JSON lines, a .json array and .parquet alike):
#   SFT        {"messages": [{"role", "content"}]}  or  {"conversations": [{"from", "value"}], "system"?}
#              {"problem", "deepseek_reasoning", "deepseek_solution"}   {"input", "output"}
#   responses  several teacher responses per prompt with the source's verdict (load_responses)
#   math       {"problem"|"question"|"prompt", "answer"}       (AIME-style; a prompt may be a list of messages)
#              {"problem", "solution"}                          (MATH: the answer is the solution's last \boxed{})
#              {"prompt": [messages], "reward_model": {"ground_truth"}}   (verl, Skywork-OR1: maybe several answers)
#              {"messages", "meta": {"solution"}}  or  {"messages", "answer"}
#              Countdown {"target", "nums"} (a problem of its own kind, "countdown": reach target from nums with
#                         + - * /, each number once; a prompt in "problem" | "question" | "prompt", else one made)
#   code       LiveCodeBench {"question_content", "starter_code", "public_test_cases", "private_test_cases",
#                             "metadata": {"func_name"}}
#              code_contests {"description", "public_tests" / "private_tests" / "generated_tests":
#                             {"input": [...], "output": [...]}, "solutions": {"language", "solution"}}
#              APPS/TACO {"question", "starter_code", "input_output": {"inputs", "outputs", "fn_name"?}, "solutions"}
#              PrimeIntellect {"prompt", "verification_info": {"language", "test_cases"}, "gold_standard_solution"}
#              verl {"prompt": [messages], "reward_model": {"ground_truth": APPS-style tests, a list of test
#                   cases (per-test metadata.func_name), or {"functional": assert program}}}
#              {"problem", "tests", "solutions"} (DeepCoder, rllm)   {"prompt", "tests": [...], "solutions"?}
# The public sets these cover, and where each schema was read (data set cards; repositories: path):
#   SFT    OpenThoughts3-1.2M (conversations with <think>); OpenThoughts-114k (open-thoughts/open-thoughts:
#          open_thoughts/prompt.py: its <|begin_of_thought|>...<|end_of_thought|> <|begin_of_solution|>...
#          <|end_of_solution|> markers become <think>, and the system prompt asking for them is dropped, counted),
#          and its metadata config; OpenCodeReasoning (card: input, output with <think>, solution; split_1 rows
#          hold "-" for the question, to be filled from the source sets); NuminaMath-CoT and OpenR1-Math-220k
#          (`messages`)
#   responses  OpenR1-Math-220k (card: generations, correctness_math_verify), and every SFT set above; with
#              Countdown's {target, nums} or code tests ({test_cases}) beside its generations, the task to verify
#   math   NuminaMath-1.5 and -CoT, OpenR1-Math-220k, Big-Math, DeepScaleR (raw, and agentica-project/rllm:
#          scripts/data/deepscaler_dataset.py), DAPO-Math-17k, Skywork-OR1 (SkyworkAI/Skywork-OR1:
#          or1_scripts/data_preprocess/), KlearReasoner-MathSub-30K and the authors' AIME24/25 and HMMT-202502
#          files (Kwai-Klear/KlearReasoner: README, benchmarks/); Countdown-Tasks-3to4 (TinyZero's, card:
#          target, nums; Jiayi-Pan/TinyZero: examples/data_preprocess/countdown.py)
#   code   LiveCodeBench (LiveCodeBench/LiveCodeBench: lcb_runner/benchmarks/code_generation.py), APPS, TACO,
#          deepmind/code_contests (card; Python 3 solutions kept), PrimeIntellect verifiable-coding-problems
#          (huggingface/open-r1: src/open_r1/rewards.py; Python rows only), Skywork-OR1 code,
#          KlearReasoner-CodeSub-15K (Kwai-Klear/KlearReasoner: verl/utils/reward_score/code_r1_compute.py),
#          Code-R1 (ganler/code-r1: examples/data_preprocess/coder1.py), rllm DeepCoder and leetcode
#          (agentica-project/rllm: scripts/data/deepcoder_dataset.py, rllm/rewards/code_reward.py,
#          rllm/data/train/code/leetcode.json), DeepCoder-Preview-Dataset (card: problem, tests, solutions)
# Tests come out as {"input", "output"} (stdin) or {"input", "output", "fn_name"} (functional: one JSON argument per
# input line, JSON return value), the format reward.py's run_tests takes; every test a row has is kept (public,
# private and generated). Code problems with fewer than min_tests tests are dropped (counted); reference programs
# and a stronger model's pass rate, when the data has them, are kept for the code-prompt filter.


def copy_rows(src: str, dst: str, keep) -> int:
    """Write the rows of src numbered in `keep` (read_rows' n) to dst, in src's own format: JSON
    lines byte for byte, a JSON array as a JSON array, parquet with src's schema. Returns how many
    were written."""
    keep, written = set(keep), 0
    if src.endswith(".parquet"):
        import pyarrow
        import pyarrow.parquet

        source = pyarrow.parquet.ParquetFile(src, pre_buffer=False)
        with pyarrow.parquet.ParquetWriter(dst, source.schema_arrow) as writer:
            start = 1
            for batch in source.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                picked = [i for i in range(batch.num_rows) if start + i in keep]
                if picked:
                    writer.write_batch(batch.take(pyarrow.array(picked, pyarrow.int64())))
                start, written = start + batch.num_rows, written + len(picked)
        return written
    if src.endswith(".json") and _first_char(src) == "[":
        with open(dst, "w", encoding="utf-8") as out:
            out.write("[")
            for n, rec in read_rows(src):
                if n in keep:
                    out.write(("," if written else "") + "\n" + json.dumps(rec, ensure_ascii=False))
                    written += 1
            out.write("\n]\n")
        return written
    with open(src, "rb") as f, open(dst, "wb") as out:
        for n, line in enumerate(f, 1):
            if n in keep:
                out.write(line)
                written += 1
    return written


def read_rows(path: str):
    """Yield (n, record) for every record of a data file, n counting from 1: the line of a JSONL
    file, the element of a JSON array, the row of a parquet file. `.parquet` is read in batches
    (pyarrow); `.json` holds one JSON array (one line or pretty-printed, read incrementally) or JSON
    lines; anything else is JSON lines. A missing or empty file, malformed JSON, text that is not
    UTF-8, or a record that is not an object is an error naming the file (and n)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such data file" + hub_hint(path, "dataset"))
    if path.endswith(".parquet"):
        rows = _parquet_rows(path)
    elif path.endswith(".json") and _first_char(path) == "[":
        rows = _json_array_rows(path)
    else:
        rows = _json_lines(path)
    n_records = 0
    for n, rec in rows:
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{n}: expected a JSON object, got {type(rec).__name__}")
        n_records += 1
        yield n, rec
    if not n_records:
        raise DataError(f"{path}: no records (the file is empty)")


# ----------------------------------------------------------------------------- reading rows


def hub_hint(path: str, repo_type: str) -> str:
    """For a path that does not exist and has the shape of a Hugging Face Hub id (owner/name): how
    to download it (repo_type "model" or "dataset") with the usual tools, as a clause to add to the
    error; "" otherwise."""
    if os.path.exists(path) or not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path):
        return ""
    local = path.split("/")[1]
    if repo_type == "model":
        return (
            f"; if {path} is a Hugging Face Hub model, this project reads local directories: `hf download {path} "
            f"--local-dir {local}` (or `huggingface-cli download` with the same arguments), then pass {local}"
        )
    return (
        f"; if {path} is a Hugging Face Hub data set, this project reads local files: `hf download {path} "
        f"--repo-type dataset --local-dir {local}` (or `huggingface-cli download` with the same arguments), "
        f"then pass its .parquet or .jsonl file(s) under {local}/"
    )


# rows decoded at a time: memory stays that of one batch, however long the file
PARQUET_BATCH_ROWS = 1024


def _parquet_rows(path: str):
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    n = 0
    try:
        # pre_buffer=False: with it, pyarrow keeps the buffers of every row group read so far
        # (memory grows with the file), without it memory stays that of one batch
        for batch in pyarrow.parquet.ParquetFile(path, pre_buffer=False).iter_batches(
            batch_size=PARQUET_BATCH_ROWS
        ):
            for rec in batch.to_pylist():
                n += 1
                yield n, _plain(rec, f"{path}:{n}")
    except (pyarrow.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file (after {n} rows: {e})") from None


def _plain(value, where: str):
    """A parquet value as its JSON twin would decode: bytes as UTF-8 text, a map's (key, value)
    pairs as an object, dates and times in ISO format, decimals and numpy scalars as Python numbers;
    lists, structs and None as they are."""
    if isinstance(value, dict):
        return {k: _plain(v, where) for k, v in value.items()}
    if isinstance(value, list):
        # pyarrow's view of a map
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {_plain(k, where): _plain(v, where) for k, v in value}
        return [_plain(v, where) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{where}: a binary value is not UTF-8 text ({e.reason} at byte {e.start})"
            ) from None
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if type(value).__module__ == "numpy":  # half floats come back as numpy scalars
        return value.item()
    return value


def _first_char(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b" \t\r\n\xef\xbb\xbf")  # (and a UTF-8 byte-order mark)
    return head[:1].decode("latin-1")


def _json_array_rows(path: str, chunk_chars: int = 1 << 20):
    """The elements of one JSON array, decoded one at a time from a growing window of the text, so a
    multi-gigabyte array never sits in memory whole."""
    decoder = json.JSONDecoder()
    buf = ""
    pos = 0
    eof = False
    n = 0
    with open(path, encoding="utf-8-sig") as f:

        def more(at_least: int = chunk_chars) -> bool:
            nonlocal buf, pos, eof
            try:
                text = f.read(max(at_least, chunk_chars))
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n + 1}: not UTF-8 text ({e.reason})") from None
            buf, pos, eof = buf[pos:] + text, 0, not text
            return bool(text)

        # the next non-blank character (consumed), "" at the end of the file
        def next_char() -> str:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf):
                    pos += 1
                    return buf[pos - 1]
                if not more():
                    return ""

        if next_char() != "[":
            raise DataError(f"{path}: malformed JSON (expected the array's opening '[')")
        while True:
            c = next_char()
            if c == "]" and n == 0:
                break
            pos -= 1
            while True:
                try:
                    rec, end = decoder.raw_decode(buf, pos)
                    break
                # ran off the window's end: widen it; else the JSON is bad
                except json.JSONDecodeError as e:
                    truncated = e.pos >= len(buf) - 16 or e.msg.startswith("Unterminated string")
                    if eof or not truncated or not more(len(buf)):
                        raise DataError(f"{path}:{n + 1}: malformed JSON ({e.msg})") from None
            n, pos = n + 1, end
            yield n, rec
            c = next_char()
            if c == "]":
                break
            if c != ",":
                raise DataError(
                    f"{path}:{n}: malformed JSON (expected ',' or ']' after element {n})"
                )
        if next_char():
            raise DataError(f"{path}: malformed JSON (text after the array's closing ']')")


def _json_lines(path: str):
    hint = (
        " (a .json file holds one JSON array, or one JSON object per line)"
        if path.endswith(".json")
        else ""
    )
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start})"
                ) from None
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(
                    f"{path}:{n}: malformed JSON ({e.msg} at column {e.colno}){hint}"
                ) from None


# ----------------------------------------------------------------------------- the format adapters


def _records(path: str, read_row, report: dict, skip_bad_rows: bool):
    """Yield read_row(rec, where, n)'s record for every row of the file, counting rows, kept records
    and formats in report; read_row returns (format, record), or (format, None) for a row it dropped
    and counted itself. An UngradableRow is raised, or, with skip_bad_rows, counted by its reason in
    report["skipped"]."""
    for n, rec in read_rows(path):
        report["rows"] += 1
        try:
            fmt, item = read_row(rec, f"{path}:{n}", n)
        except UngradableRow as e:
            if not skip_bad_rows:
                raise
            skipped = report.setdefault("skipped", {})
            skipped[e.reason] = skipped.get(e.reason, 0) + 1
            continue
        report["formats"][fmt] = report["formats"].get(fmt, 0) + 1
        if item is not None:
            report["kept"] += 1
            yield item


def _new_report(path: str) -> dict:
    return dict(file=path, rows=0, kept=0, formats={})


# SFT. A conversation ends with the assistant turn to learn; its reasoning goes inside <think>.


def _sft_reader(path: str, report: dict):
    return lambda rec, where, n: _conversation(rec, where, report)


# SFT rows that are one question and one answer in named fields: (format, question field, reasoning
# field or None when the answer holds its own <think> block, answer field)
_SFT_FIELDS = [
    ("openthoughts-metadata", "problem", "deepseek_reasoning", "deepseek_solution"),
    ("opencodereasoning", "input", None, "output"),
]


def _conversation(rec, where, report) -> tuple:
    """(format, messages) of an SFT row."""
    if "messages" in rec:
        fmt = "messages"
        msgs = _messages(_field(rec, "messages", list, where), where, "messages")
    elif "conversations" in rec:
        fmt = "conversations"
        msgs = _messages(
            _field(rec, "conversations", list, where), where, "conversations", "from", "value"
        )
        if rec.get("system"):
            msgs.insert(0, {"role": "system", "content": _field(rec, "system", str, where)})
    else:
        fmt, question, reasoning, answer = next(
            (f for f in _SFT_FIELDS if f[1] in rec and f[3] in rec), (None, None, None, None)
        )
        if fmt is None:
            raise DataError(
                f"{where}: missing field 'messages' (or 'conversations', or problem + deepseek_solution, "
                f"or input + output); keys are {sorted(rec)}"
            )
        text = _field(rec, question, str, where)
        if fmt == "opencodereasoning" and text.strip() == "-":
            raise UngradableRow(
                where,
                "field 'input' is '-': OpenCodeReasoning's split_1 keeps its questions in the "
                "source sets (fields 'dataset', 'split', 'index'); fill them in first",
                "question not filled in ('-')",
            )
        content = _field(rec, answer, str, where)
        if reasoning:
            content = assistant_content(_field(rec, reasoning, str, where), content)
        msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": content}]
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            m["content"] = _unmark(m["content"], where, f"{fmt}[{i}]")
    if msgs and msgs[0]["role"] == "system" and "<|begin_of_thought|>" in msgs[0]["content"]:
        # the system prompt asks for the markers the assistant turns no longer have: training on it
        # would teach the model to ignore its system prompt
        msgs.pop(0)
        _count(report, "dropped_marker_system_prompts")
    if not msgs or msgs[-1]["role"] != "assistant":
        raise DataError(f"{where}: field '{fmt}' must end with an assistant turn to learn from")
    return fmt, msgs


_MARKED = re.compile(
    r"\s*<\|begin_of_thought\|>(.*)<\|end_of_thought\|>\s*<\|begin_of_solution\|>(.*)"
    r"<\|end_of_solution\|>\s*",
    re.DOTALL,
)


_MARKERS = (
    "<|begin_of_thought|>",
    "<|end_of_thought|>",
    "<|begin_of_solution|>",
    "<|end_of_solution|>",
)


def _unmark(text: str, where: str, field: str) -> str:
    """OpenThoughts-114k's `<|begin_of_thought|> R <|end_of_thought|> <|begin_of_solution|> A <|end_of_solution|>`
    as `<think>\\nR\\n</think>\\n\\nA`; text without these markers as it is."""
    if not any(marker in text for marker in _MARKERS):
        return text
    m = _MARKED.fullmatch(text)
    if not m or any(marker in m.group(1) + m.group(2) for marker in _MARKERS):
        raise UngradableRow(
            where,
            f"field '{field}' holds the markers <|begin_of_thought|> ... <|end_of_solution|>, "
            "but not as one thought then one solution",
            "malformed reasoning markers",
        )
    return assistant_content(m.group(1), m.group(2))


def assistant_content(reasoning: str, answer: str) -> str:
    """An assistant turn in Qwen3's format: `<think>\\n{reasoning}\\n</think>\\n\\n{answer}`."""
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{answer.strip()}"


# Several responses per prompt, for SFT data built from a teacher's samples (the paper keeps all
# responses of hard prompts, correct or not: its "mixed" data).


def _responses_reader(path: str, report: dict):
    def read_row(rec, where, n):
        if "generations" in rec:
            fmt = "openr1-math"
            prompt = _field(rec, "problem", str, where)
            responses = _generations(rec, where, report)
        else:
            fmt, messages = _conversation(rec, where, report)
            prompt, responses = _final_turn(messages)
        record = dict(
            id=_record_id(rec, path, n),
            prompt=prompt,
            answer=_response_answer(rec, where, report),
            source=fmt,
            responses=responses,
        )
        if "target" in rec and "nums" in rec:  # Countdown problems' responses
            record.update((k, v) for k, v in _countdown(rec, where).items() if k != "prompt")
        if rec.get("test_cases"):  # OpenThoughts-114k's code rows: APPS-style tests
            record["tests"] = _test_cases(
                rec["test_cases"], where, "test_cases", _CodeContext(report=report)
            )
        return fmt, record

    return read_row


def _generations(rec, where, report) -> list:
    """OpenR1-Math-220k's responses: every one of `generations` that closes its reasoning (the
    others are counted), correct = its `correctness_math_verify` flag (or None)."""
    generations = _field(rec, "generations", list, where)
    flags = rec.get("correctness_math_verify")
    flags = (
        [None] * len(generations)
        if flags is None
        else _field(rec, "correctness_math_verify", list, where)
    )
    if len(flags) != len(generations):
        raise DataError(
            f"{where}: field 'correctness_math_verify' has {len(flags)} flags for "
            f"{len(generations)} generations"
        )
    responses = []
    for i, (text, flag) in enumerate(zip(generations, flags)):
        text = _typed(text, str, where, f"generations[{i}]")
        if flag is not None and not isinstance(flag, bool):
            raise DataError(
                f"{where}: field 'correctness_math_verify[{i}]' must be true, false or null"
            )
        parts = split_think(text)
        if parts is None:
            _count(report, "unfinished_responses")
            continue
        responses.append({"content": assistant_content(*parts), "correct": flag})
    if not responses:
        raise UngradableRow(
            where, "no generation closes its reasoning with </think>", "no finished response"
        )
    return responses


def _final_turn(messages) -> tuple:
    """(prompt, [its final assistant turn as a response without a verdict]) of an SFT conversation;
    a prompt that is one user turn becomes that turn's text."""
    last = messages[-1]
    prompt = messages[:-1]
    parts = (
        (last["reasoning_content"], last["content"])
        if "reasoning_content" in last
        else split_think(last["content"]) or ("", last["content"])
    )
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        prompt = prompt[0]["content"]
    return prompt, [{"content": assistant_content(*parts), "correct": None}]


def split_think(content: str):
    """(reasoning, answer) of a turn written `<think>reasoning</think>answer` (the opening tag may
    be missing, as in generations from a prompt that ends with it), by the chat template's rule;
    None without `</think>`."""
    if "</think>" not in content:
        return None
    return content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip(
        "\n"
    ), content.split("</think>")[-1]


def _response_answer(rec, where, report):
    """The math answer a row's responses can be verified against, or None."""
    try:
        if rec.get("answer") is not None:
            return _gradable(rec, _answer_text(rec["answer"], where, "answer"), where, "answer")
        if rec.get("domain") == "math" and isinstance(rec.get("ground_truth_solution"), str):
            boxed = _last_boxed(rec["ground_truth_solution"])  # OpenThoughts-114k's metadata rows
            return _gradable(rec, boxed, where, "ground_truth_solution") if boxed else None
    except UngradableRow:
        _count(report, "answers_not_gradable")
    return None


# Math. Every row gives a prompt and its acceptable answers (strings for math-verify's gold side).


def _math_reader(path: str, report: dict):
    def read_row(rec, where, n):
        if "target" in rec and "nums" in rec:
            return "countdown", dict(id=_record_id(rec, path, n), **_countdown(rec, where))
        key = next((k for k in ("problem", "question", "prompt") if k in rec), None)
        if key is not None:
            prompt = _prompt(rec, key, where)
            fmt, answers, name = _math_answer(rec, where)
        elif "messages" in rec:
            prompt = [
                m
                for m in _messages(_field(rec, "messages", list, where), where, "messages")
                if m["role"] != "assistant"
            ]
            if rec.get("answer") is not None:
                fmt = "messages+answer"
                name = "answer"
                answer = rec["answer"]
            else:
                fmt = "messages+meta.solution"
                name = "meta.solution"
                answer = _field(
                    _field(rec, "meta", dict, where), "solution", (str, int, float), where, name
                )
            answers = [_answer_text(answer, where, name)]
        else:
            raise DataError(
                f"{where}: missing field 'problem' (or 'question', 'prompt', 'messages'); "
                f"keys are {sorted(rec)}"
            )
        answers = [_gradable(rec, a, where, name) for a in answers]
        problem = dict(id=_record_id(rec, path, n), prompt=prompt, answer=answers[0])
        if len(answers) > 1:
            problem["answers"] = answers
        return fmt, problem

    return read_row


def _countdown(rec, where) -> dict:
    """{prompt, numbers, target, kind: "countdown"} of a Countdown row; without a prompt field the
    prompt says the problem: "Use 12 5 3 to make 41." (the answer's format, a \\boxed{} expression,
    is learnt in SFT)."""
    target = _field(rec, "target", int, where)
    numbers = [
        _typed(v, int, where, f"nums[{i}]") for i, v in enumerate(_field(rec, "nums", list, where))
    ]
    if not numbers:
        raise DataError(f"{where}: field 'nums' is empty")
    key = next((k for k in ("problem", "question", "prompt") if k in rec), None)
    prompt = (
        _prompt(rec, key, where) if key else f"Use {' '.join(map(str, numbers))} to make {target}."
    )
    return dict(prompt=prompt, numbers=numbers, target=target, kind="countdown")


def _math_answer(rec, where):
    """(format, acceptable answers): `answer`, else verl's `reward_model.ground_truth`, else the
    last \\boxed{} of `solution` (MATH)."""
    if rec.get("answer") is not None:
        return "answer", [_answer_text(rec["answer"], where, "answer")], "answer"
    if "reward_model" in rec:
        return "verl ground_truth", _ground_truth_answers(rec, where), "reward_model.ground_truth"
    if rec.get("solution") is not None:
        answer = _last_boxed(_field(rec, "solution", str, where))
        if answer is None:
            raise DataError(
                f"{where}: field 'solution' has no complete \\boxed{{...}} answer, and no 'answer'"
            )
        return "MATH solution", [answer.strip()], "solution's \\boxed{}"
    raise DataError(
        f"{where}: missing field 'answer' (or 'reward_model.ground_truth', or a \\boxed{{}} 'solution')"
    )


def _ground_truth_answers(rec, where) -> list:
    """verl's reward_model.ground_truth: a string or a number (verl's gsm8k, DAPO-Math), or a JSON
    list of acceptable answers (Skywork-OR1 stores '["2"]'), as text or already decoded. A string is
    read as such a list only when it decodes to a list of strings: "[-1, 3]" stays one answer (an
    interval)."""
    name = "reward_model.ground_truth"
    truth = _field(
        _field(rec, "reward_model", dict, where),
        "ground_truth",
        (str, int, float, list, dict),
        where,
        name,
    )
    if isinstance(truth, str) and truth.lstrip()[:1] in ("[", "{"):
        try:
            decoded = json.loads(truth)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, dict) or (
            isinstance(decoded, list) and all(isinstance(a, str) for a in decoded)
        ):
            truth = decoded
    if isinstance(truth, dict):
        raise DataError(
            f"{where}: field '{name}' holds code tests, not a math answer: load this file as code data"
        )
    if not isinstance(truth, list):
        return [_answer_text(truth, where, name)]
    if not truth:
        raise UngradableRow(where, f"field '{name}' is an empty list", "empty answer")
    return [_answer_text(a, where, f"{name}[{i}]") for i, a in enumerate(truth)]


def _answer_text(value, where, name) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(
            f"{where}: field '{name}' must be str or a number, got {type(value).__name__}"
        )
    return str(value)


# Answers that stand for "nothing to check" (NuminaMath-1.5, and OpenR1-Math-220k built on it).
PLACEHOLDER_ANSWERS = frozenset({"proof", "notfound"})


def _gradable(rec, answer: str, where: str, name: str) -> str:
    """answer, unless it cannot be graded: empty, a placeholder, or the answer of a row whose
    question_type is "proof" (NuminaMath-1.5 tags proofs so, whatever their answer field says)."""
    if not answer.strip():
        raise UngradableRow(where, f"field '{name}' is empty", "empty answer")
    if answer.strip().lower() in PLACEHOLDER_ANSWERS:
        raise UngradableRow(
            where,
            f"field '{name}' is {answer!r}, a placeholder with nothing to verify",
            f"placeholder answer {answer.strip().lower()!r}",
        )
    if rec.get("question_type") == "proof":
        raise UngradableRow(
            where, "field 'question_type' is 'proof': no answer to verify", "question_type 'proof'"
        )
    return answer


_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` or `\\fbox{...}` in text (a space may precede the
    brace; nested braces are matched, `\\{` and `\\}` are literal), or the token after an unbraced
    `\\boxed 5$`. None when there is none, or its braces never close."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i = starts[-1]
    while i < len(text) and text[i].isspace():
        i += 1
    if not text.startswith("{", i):
        return re.match(r"[^\s$]*", text[i:]).group()  # MATH writes a few answers as `$\boxed 5$`
    depth = 0
    j = i
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
        j += 1
    return None


# Code. Each format gives a prompt, tests in reward.py's format and maybe reference programs.


def _code_reader(path: str, report: dict, min_tests: int = 1, pass_rate_field: str = ""):
    report.update(min_tests=min_tests, dropped_few_tests=0, with_solutions=0)

    def read_row(rec, where, n):
        fmt, prompt, tests, solutions, id_key, extra = _code_row(rec, where, report)
        pass_rate = _pass_rate(rec, pass_rate_field, where) if pass_rate_field else None
        if len(tests) < min_tests:
            report["dropped_few_tests"] += 1
            return fmt, None
        problem = dict(
            id=_record_id(rec, path, n, id_key), line=n, prompt=prompt, tests=tests, **extra
        )
        if solutions:
            problem["solutions"] = solutions
            report["with_solutions"] += 1
        if pass_rate_field:
            problem["pass_rate"] = pass_rate
        return fmt, problem

    return read_row


# Code formats, tried in order (the first whose marking keys the row has):
# (format, marking keys, question field, test fields (? = may be absent or empty), reference programs (field, shape),
#  id field). Schema sources: the table that opens the loaders.
_CODE_FORMATS = [
    (
        "livecodebench",
        ("question_content",),
        "question_content",
        ("?public_test_cases", "?private_test_cases"),
        None,
        None,
    ),
    (
        "code_contests",
        ("description", "public_tests"),
        "description",
        ("?public_tests", "?private_tests", "?generated_tests"),
        ("solutions", "by language"),
        "name",
    ),
    ("apps/taco", ("input_output",), "question", ("?input_output",), ("solutions", "list"), None),
    (
        "primeintellect",
        ("verification_info",),
        "prompt",
        ("verification_info",),
        ("gold_standard_solution", "markdown"),
        None,
    ),
    (
        "verl",
        ("reward_model",),
        "prompt",
        ("reward_model.ground_truth",),
        ("extra_info.reference", "program"),
        None,
    ),
    (
        "deepcoder/rllm",
        ("problem", "tests"),
        "problem",
        ("tests",),
        ("solutions", "list or program"),
        None,
    ),
    ("tests", ("tests",), "prompt", ("tests",), ("solutions", "list"), None),
]


def _code_row(rec, where, report):
    """(format, prompt, tests, reference programs, id key, extra fields) of one code row."""
    spec = next((f for f in _CODE_FORMATS if all(k in rec for k in f[1])), None)
    if spec is None:
        raise DataError(
            f"{where}: missing field 'tests' (or 'question_content' for LiveCodeBench, 'input_output' "
            f"for APPS/TACO, 'reward_model.ground_truth' for verl, 'verification_info' for "
            f"PrimeIntellect, 'public_tests' for code_contests); keys are {sorted(rec)}"
        )
    fmt, _, question, test_fields, programs, id_key = spec
    prompt = _code_question(rec, question, where)
    solutions = _solutions(rec, *programs, where) if programs else []
    meta = _json_value(rec["metadata"], dict, where, "metadata") if rec.get("metadata") else {}
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    starter = rec.get("starter_code") if isinstance(rec.get("starter_code"), str) else ""
    ctx = _CodeContext(meta.get("func_name"), "\n".join([starter, text, *solutions]), report)
    tests = []
    for field in test_fields:
        optional, field = field.startswith("?"), field.lstrip("?")
        value = _get(rec, field) if optional else _path(rec, field, where)
        if value is None and not optional:
            raise DataError(f"{where}: missing field '{field}'")
        if value not in (None, "", [], {}):
            tests += _test_cases(value, where, field, ctx)
    extra = {"contest_date": str(rec["contest_date"])} if rec.get("contest_date") else {}
    return fmt, prompt, tests, solutions, id_key, extra


def _code_question(rec, key, where):
    """The question, plus the starter code (if any) in a ```python block; a list of messages (verl)
    as it is."""
    prompt = _prompt(rec, key, where)
    if isinstance(prompt, list):
        return prompt
    starter = _typed(rec.get("starter_code") or "", str, where, "starter_code")
    return prompt + (
        f"\n\nUse this starter code:\n```python\n{starter}\n```" if starter.strip() else ""
    )


def _solutions(rec, field, shape, where) -> list:
    """Reference programs, by how the format stores them:
    list         a list of programs or a JSON string of one (APPS/TACO, DeepCoder; "" when none)
    program      one program (verl's extra_info.reference)
    by language  code_contests' {"language": [...], "solution": [...]}: the Python 3 ones (language
    3)
    markdown     PrimeIntellect's gold_standard_solution: the last ```python block of the text"""
    value = _get(rec, field)
    if not value:
        return []
    if shape == "list or program":  # rllm's leetcode rows hold one program, DeepCoder's rows a list
        shape = (
            "list" if not isinstance(value, str) or value.lstrip().startswith("[") else "program"
        )
    if shape == "list":
        solutions = _json_value(value, list, where, field)
    elif shape == "by language":
        by_language = _json_value(value, dict, where, field)
        languages = _field(by_language, "language", list, where, f"{field}.language")
        programs = _field(by_language, "solution", list, where, f"{field}.solution")
        solutions = [s for lang, s in zip(languages, programs) if lang in (3, "PYTHON3")]
    else:
        solutions = [_typed(value, str, where, field)]
        if shape == "markdown":
            blocks = re.findall(r"```python[^\n]*\n(.*?)```", value, re.DOTALL)
            solutions = blocks[-1:] or solutions
    for i, s in enumerate(solutions):
        if not isinstance(s, str):
            raise DataError(
                f"{where}: field '{field}[{i}]' must be a program (str), got {type(s).__name__}"
            )
    return [s for s in solutions if s.strip()]


def _pass_rate(rec, spec: str, where) -> float:
    """The value at `spec`, "FIELD" (a rate in [0, 1]) or "FIELD/N" (a count of N samples, divided
    by N)."""
    field, _, scale = spec.rpartition("/")
    if not field or not re.fullmatch(r"\d+(\.\d*)?", scale) or not float(scale):
        field = spec
        scale = "1"
    value = _path(rec, field, where)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 <= value / float(scale) <= 1
    ):
        raise DataError(
            f"{where}: field '{field}' must be a number in [0, {scale}] (pass_rate_field={spec!r}), "
            f"got {value!r}"
        )
    return value / float(scale)


class _CodeContext(NamedTuple):
    """What test decoding needs from the rest of its row: the function name LiveCodeBench keeps in
    metadata.func_name, the text where the function's signature can be found (starter code, prompt,
    reference programs: for keyword arguments of assert programs), and the report that counts
    asserts not converted."""

    func_name: str | None = None
    signatures: str = ""
    report: dict | None = None


def _test_cases(raw, where, field, ctx: _CodeContext) -> list:
    """Tests as stored, as themselves, as JSON text, or as base64(zlib(pickle(JSON text)))
    (LiveCodeBench's private tests): a list of cases (_tests_from_cases), APPS-style {"inputs",
    "outputs"[, "fn_name"]}, code_contests' {"input": [...], "output": [...]}, PrimeIntellect's
    {"language", "test_cases"}, or Code-R1's {"functional": assert program, or a list of them}
    (_tests_from_asserts)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            try:
                raw = json.loads(
                    _NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(raw)))).load()
                )
            except Exception as e:
                raise DataError(
                    f"{where}: field '{field}' is neither JSON nor LiveCodeBench's compressed form "
                    f"({e})"
                ) from None
    if isinstance(raw, list):
        return _tests_from_cases(raw, where, field, ctx)
    if not isinstance(raw, dict):
        raise DataError(
            f"{where}: field '{field}' must be a list of tests, got {type(raw).__name__}"
        )
    if "functional" in raw:
        programs = raw["functional"]
        programs = [programs] if isinstance(programs, str) else programs
        if not isinstance(programs, list) or not all(isinstance(p, str) for p in programs):
            raise DataError(
                f"{where}: field '{field}.functional' must be an assert program or a list of them"
            )
        return _tests_from_asserts(programs, where, f"{field}.functional", ctx)
    if "test_cases" in raw:
        language = raw.get("language") or "python"
        if language != "python":
            raise UngradableRow(
                where,
                f"field '{field}.language' is {language!r}: the sandbox runs Python programs",
                f"language {language!r}",
            )
        return _tests_from_cases(
            _field(raw, "test_cases", list, where, f"{field}.test_cases"),
            where,
            f"{field}.test_cases",
            ctx,
        )
    if "inputs" in raw or "outputs" in raw:
        return _tests_from_io(raw, where, field)
    # code_contests: {"input": [stdin, ...], "output": [stdout, ...]}
    if "input" in raw and "output" in raw:
        inputs = _field(raw, "input", list, where, f"{field}.input")
        outputs = _field(raw, "output", list, where, f"{field}.output")
        if len(inputs) != len(outputs):
            raise DataError(
                f"{where}: field '{field}' has {len(inputs)} inputs but {len(outputs)} outputs"
            )
        return [
            {
                "input": _typed(x, str, where, f"{field}.input[{i}]"),
                "output": _typed(y, str, where, f"{field}.output[{i}]"),
            }
            for i, (x, y) in enumerate(zip(inputs, outputs))
        ]
    if "pytest" in raw:
        raise UngradableRow(
            where,
            f"field '{field}' holds pytest files, which this project does not run",
            "pytest tests",
        )
    raise DataError(
        f"{where}: field '{field}' has none of 'inputs'/'outputs', 'input'/'output', 'test_cases', "
        f"'functional'; keys are {sorted(raw)}"
    )


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # plain data only: a pickle can never name code to run
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from test data")


def _tests_from_cases(cases, where, field, ctx: _CodeContext) -> list:
    """A list of test cases as tests:
    LiveCodeBench  {input, output, testtype: stdin|functional}; functional: one JSON argument per
    input line, the
                   JSON result; the function's name in metadata.func_name (of the row, or of each test: rllm)
    PrimeIntellect {input, output, type: stdin_stdout|function_call, fn_name}; function_call: the
    argument list
                   and the result as Python literals (`str(result)` for a string result, as its verifier compares)
    plain          {input, output[, fn_name]}, reward.py's own format; a functional input may also be the
                   argument list and its output the value itself (DeepCoder's PrimeIntellect rows)"""
    tests = []
    for i, t in enumerate(cases):
        name = f"{field}[{i}]"
        if not isinstance(t, dict):
            raise DataError(f"{where}: field '{name}' must be an object, got {type(t).__name__}")
        kind_key = "type" if "type" in t and "testtype" not in t else "testtype"
        kind = t.get(kind_key) or ("functional" if t.get("fn_name") else "stdin")
        if kind in ("stdin", "stdin_stdout"):
            tests.append(
                {
                    "input": _field(t, "input", str, where, name + ".input"),
                    "output": _field(t, "output", str, where, name + ".output"),
                }
            )
            continue
        if kind not in ("functional", "function_call"):
            raise DataError(
                f"{where}: field '{name}.{kind_key}' is {kind!r}; use stdin or functional"
            )
        meta = (
            _json_value(t["metadata"], dict, where, name + ".metadata") if t.get("metadata") else {}
        )
        fn = t.get("fn_name") or meta.get("func_name") or ctx.func_name
        if not isinstance(fn, str) or not fn.isidentifier():
            raise DataError(
                f"{where}: field 'metadata.func_name' is needed by functional test '{name}' "
                f"(a function name, got {fn!r})"
            )
        args = _field(t, "input", (str, list), where, name + ".input")
        if "output" not in t:
            raise DataError(f"{where}: missing field '{name}.output'")
        out = t["output"]
        if kind == "function_call":
            args, out = (
                _literal(args, where, name + ".input"),
                _literal(out, where, name + ".output", text_ok=True),
            )
            if not isinstance(args, (list, tuple)):
                raise DataError(
                    f"{where}: field '{name}.input' must be the argument list, got {type(args).__name__}"
                )
        if not isinstance(args, str):
            args = "\n".join(_dumps(a, where, name + ".input") for a in args)
        if not (isinstance(out, str) and kind == "functional"):
            out = _dumps(out, where, name + ".output")
        tests.append({"input": args, "output": out, "fn_name": fn})
    return tests


def _dumps(value, where, name) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        raise DataError(
            f"{where}: field '{name}' holds a {type(value).__name__}, which JSON cannot carry"
        ) from None


def _literal(value, where, name, text_ok=False):
    """A Python literal given as text (or already a value); with text_ok, text that is no literal is
    a string."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        if text_ok:
            return value.strip()
        raise DataError(f"{where}: field '{name}' is not a Python literal") from None


def _tests_from_io(io_spec, where, field) -> list:
    """APPS/TACO tests {"inputs", "outputs"[, "fn_name"]} as tests. stdin: each input and output is
    a string or a list of lines. call-based (`fn_name`, a function, or a method of class Solution):
    each input is the argument list, written one JSON argument per line; each output is the return
    value, as JSON. APPS usually wraps that value in a one-element list, and its checker accepts the
    value or the wrapped value. Our rule: when EVERY output of the problem is a one-element list,
    the lists are wrappers and are unwrapped; otherwise outputs stay as they are. The rule guesses
    wrong for an unwrapped function whose every return value happens to be a one-element list; the
    reference solutions then fail their own tests, which the code-prompt filter catches. Not
    handled: APPS's conversion of string dict keys back to ints."""
    inputs = _field(io_spec, "inputs", list, where, f"{field}.inputs")
    outputs = _field(io_spec, "outputs", list, where, f"{field}.outputs")
    if len(inputs) != len(outputs):
        raise DataError(
            f"{where}: field '{field}' has {len(inputs)} inputs but {len(outputs)} outputs"
        )
    fn = io_spec.get("fn_name")
    if not fn:
        return [
            {
                "input": _stdin_text(x, where, f"{field}.inputs[{i}]"),
                "output": _stdin_text(y, where, f"{field}.outputs[{i}]"),
            }
            for i, (x, y) in enumerate(zip(inputs, outputs))
        ]
    if not isinstance(fn, str) or not fn.isidentifier():
        raise DataError(f"{where}: field '{field}.fn_name' must be a function name, got {fn!r}")
    if all(isinstance(y, list) and len(y) == 1 for y in outputs):
        outputs = [y[0] for y in outputs]
    tests = []
    for i, (args, y) in enumerate(zip(inputs, outputs)):
        if not isinstance(args, list):
            raise DataError(
                f"{where}: field '{field}.inputs[{i}]' must be the list of arguments of {fn}, "
                f"got {type(args).__name__}"
            )
        tests.append(_call_test(fn, args, y))
    return tests


def _stdin_text(value, where, name) -> str:
    """APPS/TACO stdin data: a string, or a list of lines (joined by newlines, as their testing_util
    does)."""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DataError(
            f"{where}: field '{name}' must be a string or a list of lines, got {type(value).__name__}"
        )
    return value


# Assert programs (Code-R1, KlearReasoner-CodeSub, rllm leetcode: `def check(candidate): assert
# candidate(nums=[2, 7], target=9) == [0, 1]` + `check(Solution().twoSum)`) are NOT run with the
# candidate's program, as their authors do: there, code in the candidate's own process decides the
# verdict, and an object whose __eq__ always says True passes every assert. They are parsed instead
# (ast, never executed): each `assert f(literal args) == literal` (or `assert f(...)`: true, `assert
# not f(...)`: false) becomes one functional test whose result the sandbox compares as JSON data;
# keyword arguments are put in the order of the signature found in the row's starter code or prompt.
# An assert that cannot be converted exactly (arguments that are not literals, a tolerance, a helper
# function) is counted; a row left with no test is an UngradableRow. Each assert is its own test, so
# the soft reward counts them one by one (the authors' grader scores a whole program pass or fail).


def _tests_from_asserts(programs: list, where: str, field: str, ctx: _CodeContext) -> list:
    """Functional tests {input: one JSON argument per line, output: JSON, fn_name} from assert
    programs. Each `assert` is one test; one that cannot be converted safely is counted in
    report["asserts_not_converted"]. A row left with no test is an UngradableRow."""
    tests = []
    missed = 0
    for k, program in enumerate(programs):
        name = field if len(programs) == 1 else f"{field}[{k}]"
        try:
            tree = ast.parse(program)
        except SyntaxError as e:
            raise DataError(
                f"{where}: field '{name}' is not a Python program ({e.msg}, line {e.lineno})"
            ) from None
        got, lost = _asserts_as_tests(tree, ctx.signatures)
        tests, missed = tests + got, missed + lost
    if ctx.report is not None:
        _count(ctx.report, "asserts_not_converted", missed)
    if not tests:
        raise UngradableRow(
            where,
            f"field '{field}': no assert could be turned into a test ({missed} not converted: "
            "values that are not literals, tolerances, helper functions)",
            "no convertible assert",
        )
    return tests


def _asserts_as_tests(tree, signatures: str) -> tuple:
    """(tests, asserts not converted) of one parsed program. Recognised: the LeetCode form `def
    check(candidate): assert candidate(...) == value ...` + `check(Solution().name)`, asserts at the
    top level (`assert Solution().name(...) == value`, `assert name(...)`, `assert not name(...)`),
    and Code-R1's TACO loop `_inputs = [...]; _outputs = [...]; for i, o in zip(_inputs, _outputs):
    assert _deep_eq(name(*i), o)`."""
    body = tree.body
    defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    # the LeetCode form: the function check(...) is called on the candidate
    entry = next(
        (
            node.value
            for node in body
            if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in defs
            and len(node.value.args) == 1
        ),
        None,
    )
    asserts = []
    lost = 0
    aliases = {}
    if entry is not None:
        check = defs[entry.func.id]
        fn = _callee(entry.args[0], {}, signatures, bare=True)
        params = [a.arg for a in check.args.args]
        if fn and params:
            aliases[params[0]] = fn
        for stmt in check.body:
            if isinstance(stmt, ast.Assert):
                asserts.append(stmt)
            else:  # a loop or a condition around asserts: not converted
                lost += sum(isinstance(n, ast.Assert) for n in ast.walk(stmt))
    literals = {}
    for stmt in body:
        if isinstance(stmt, ast.Assert):
            asserts.append(stmt)
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            try:
                literals[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        elif isinstance(stmt, ast.For):
            got = _taco_loop(stmt, literals, signatures)
            if got is None:
                lost += sum(isinstance(n, ast.Assert) for n in ast.walk(stmt))
            else:
                asserts.extend(got)
        elif isinstance(stmt, (ast.While, ast.If, ast.With, ast.Try)):
            lost += sum(isinstance(n, ast.Assert) for n in ast.walk(stmt))
    tests = []
    for item in asserts:
        test = _assert_as_test(item, aliases, signatures) if isinstance(item, ast.Assert) else item
        if test is None:
            lost += 1
        else:
            tests.append(test)
    # asserts on several functions: not one problem's tests
    if len({t["fn_name"] for t in tests}) > 1:
        return [], lost + len(tests)
    return tests, lost


def _callee(node, aliases: dict, signatures: str, bare: bool = False):
    """The function name a call target stands for: `Solution().name`, a parameter bound to the
    candidate, or (where the starter code or prompt defines it, or `bare`) a plain `name`; None for
    anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) and not node.value.args:
        if isinstance(node.value.func, ast.Name) and node.value.func.id == "Solution":
            return node.attr
        return None
    if isinstance(node, ast.Name):
        if node.id in aliases:
            return aliases[node.id]
        if bare or re.search(rf"\bdef\s+{re.escape(node.id)}\s*\(", signatures):
            return node.id
    return None


def _assert_as_test(stmt: ast.Assert, aliases: dict, signatures: str) -> dict | None:
    """`assert f(args) == value` (either side), `assert f(args) is None|True|False`, `assert f(args)` (true) and
    `assert not f(args)` (false) with literal arguments and value, as a test; None for anything
    else."""
    node = stmt.test
    expected = True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node, expected = node.operand, False
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        left = node.left
        right = node.comparators[0]
        op = node.ops[0]
        if not isinstance(left, ast.Call):
            left, right = right, left
        if (
            isinstance(op, ast.Is)
            and isinstance(right, ast.Constant)
            and right.value in (None, True, False)
        ):
            expected = right.value
        elif isinstance(op, ast.Eq):
            try:
                expected = ast.literal_eval(right)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return None
        else:
            return None
        node = left
    if not isinstance(node, ast.Call):
        return None
    fn = _callee(node.func, aliases, signatures)
    args = _call_arguments(node, fn, signatures) if fn else None
    if args is None or not _json_exact(expected):
        return None
    return _call_test(fn, args, expected)


_JSON_EXACT = (type(None), bool, int, float, str)


def _json_exact(value) -> bool:
    """True if value survives JSON unchanged (no tuples, sets or bytes; dict keys are strings;
    floats finite)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, _JSON_EXACT):
        return True
    if isinstance(value, list):
        return all(map(_json_exact, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_exact(v) for k, v in value.items())
    return False


def _call_arguments(call: ast.Call, fn: str, signatures: str) -> list | None:
    """The call's arguments as a positional list of literal values (keywords placed by the parameter
    order of `def fn(...)` in the signatures text), or None if a value is not a literal or a keyword
    cannot be placed."""
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None  # starred arguments, names, calls (a tree_node([...]) argument), ...
    if None in kwargs:
        return None  # **kwargs
    if kwargs:
        params = _parameters(fn, signatures)
        if params is None or not set(kwargs) <= set(params[len(args) :]):
            return None
        order = params[len(args) :]
        given = [p in kwargs for p in order]
        if any(given[i + 1] and not given[i] for i in range(len(given) - 1)):
            return None  # a gap: a parameter left to its default before one that is given
        args += [kwargs[p] for p in order if p in kwargs]
    return args if all(map(_json_exact, args)) else None


def _parameters(fn: str, signatures: str) -> list | None:
    """The positional parameter names of `def fn(...)` found in the text (starter code, prompt),
    `self` left out."""
    for m in re.finditer(rf"\bdef\s+{re.escape(fn)}\s*\(", signatures):
        depth = 1
        j = m.end()
        while j < len(signatures) and depth:
            depth += {"(": 1, ")": -1}.get(signatures[j], 0)
            j += 1
        try:
            tree = ast.parse(f"def {fn}({signatures[m.end() : j - 1]}): pass")
        except SyntaxError:
            continue
        params = [a.arg for a in tree.body[0].args.posonlyargs + tree.body[0].args.args]
        return params[1:] if params[:1] == ["self"] else params
    return None


def _taco_loop(loop: ast.For, literals: dict, signatures: str) -> list | None:
    """Tests from Code-R1's loop over TACO's call-based cases, `for i, o in zip(_inputs, _outputs):
    assert _deep_eq(name(*i), o)` (or `o[0]`), with _inputs and _outputs literal lists; None if the
    loop is not that. _deep_eq compares floats with a tolerance: a case whose expected value holds a
    float is not converted."""
    if not (
        isinstance(loop.target, ast.Tuple)
        and len(loop.target.elts) == 2
        and len(loop.body) == 1
        and isinstance(loop.body[0], ast.Assert)
        and isinstance(loop.iter, ast.Call)
        and isinstance(loop.iter.func, ast.Name)
        and loop.iter.func.id == "zip"
        and len(loop.iter.args) == 2
        and all(
            isinstance(a, ast.Name) and isinstance(literals.get(a.id), list) for a in loop.iter.args
        )
    ):
        return None
    i_name, o_name = (getattr(e, "id", None) for e in loop.target.elts)
    check = loop.body[0].test
    if not (
        isinstance(check, ast.Call) and len(check.args) == 2 and isinstance(check.args[0], ast.Call)
    ):
        return None
    call, want = check.args
    fn = _callee(call.func, {}, signatures, bare=True)
    if not (
        fn
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Starred)
        and not call.keywords
        and getattr(call.args[0].value, "id", None) == i_name
    ):
        return None
    wrapped = (
        isinstance(want, ast.Subscript)
        and getattr(want.value, "id", None) == o_name
        and isinstance(want.slice, ast.Constant)
        and want.slice.value == 0
    )
    if not (wrapped or getattr(want, "id", None) == o_name):
        return None
    inputs, outputs = (literals[a.id] for a in loop.iter.args)
    tests = []
    for args, out in zip(inputs, outputs):
        if wrapped:
            # nan: not converted
            out = out[0] if isinstance(out, (list, tuple)) and out else float("nan")
        exact = (
            isinstance(args, (list, tuple))
            and _json_exact(list(args))
            and _json_exact(out)
            and not any(isinstance(x, float) for x in _leaves(out))
        )
        tests.append(_call_test(fn, args, out) if exact else None)
    return tests


def _leaves(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    else:
        yield value


def _call_test(fn: str, args, result) -> dict:
    """A functional test in reward.py's format: one JSON argument per input line, the JSON
    result."""
    return {
        "input": "\n".join(json.dumps(a) for a in args),
        "output": json.dumps(result),
        "fn_name": fn,
    }


# Field access shared by the adapters: every value checked, every error naming file:n and the field.


def _count(report: dict, key: str, k: int = 1) -> None:
    """A count that appears in the report only once it is not zero."""
    if k:
        report[key] = report.get(key, 0) + k


def _field(rec, key, types, where, name=None):
    """rec[key], checked against types (_typed); `where` is "file:n" and `name` the field's full
    path."""
    return _typed(rec.get(key), types, where, name or key)


def _typed(value, types, where, name):
    """value, if it is one of `types` (a bool is not an int); else a DataError naming the field."""
    if value is None:
        raise DataError(f"{where}: missing field '{name}'")
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types)):
        want = " or ".join(t.__name__ for t in _tuple(types))
        raise DataError(f"{where}: field '{name}' must be {want}, got {type(value).__name__}")
    return value


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _json_value(value, types, where, name):
    """Like _typed, for a value that public sets store either as itself or as a JSON string of
    it."""
    value = _typed(value, (str, *_tuple(types)), where, name)
    if isinstance(value, str) and str not in _tuple(types):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise DataError(f"{where}: field '{name}' is not valid JSON") from None
        return _typed(value, types, where, name)
    return value


def _path(rec, dotted: str, where: str):
    """rec's value at a dotted path such as
    "extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-1.5B" (a key may itself hold dots: at each
    level the longest key that fits the rest of the path wins)."""
    value = rec
    rest = dotted
    while rest:
        keys = (
            [k for k in value if rest == k or rest.startswith(k + ".")]
            if isinstance(value, dict)
            else []
        )
        if not keys:
            raise DataError(f"{where}: missing field '{dotted}'")
        key = max(keys, key=len)
        value, rest = value[key], rest[len(key) + 1 :]
    return value


def _get(rec, dotted: str):
    """rec's value at a dotted path, or None where the path is absent."""
    try:
        return _path(rec, dotted, "")
    except DataError:
        return None


def _record_id(rec, path: str, n: int, key: str | None = None) -> str:
    """The row's own id (`key` if the format names one, else id, LiveCodeBench's question_id, APPS's
    problem_id, MATH-500's unique_id, OpenR1's uuid), else file:n."""
    keys = ((key,) if key else ()) + ("id", "question_id", "problem_id", "unique_id", "uuid")
    pid = next((rec[k] for k in keys if rec.get(k) is not None), None)
    return str(pid) if pid is not None else f"{os.path.basename(path)}:{n}"


def _messages(items, where, field, role_key="role", content_key="content") -> list:
    roles = {
        "system": "system",
        "user": "user",
        "human": "user",
        "assistant": "assistant",
        "gpt": "assistant",
    }
    out = []
    for i, m in enumerate(items):
        if not isinstance(m, dict):
            raise DataError(
                f"{where}: field '{field}[{i}]' must be an object, got {type(m).__name__}"
            )
        role = _field(m, role_key, str, where, f"{field}[{i}].{role_key}")
        if role not in roles:
            raise DataError(
                f"{where}: field '{field}[{i}].{role_key}' is {role!r}; supported: {sorted(roles)}"
            )
        msg = {
            "role": roles[role],
            "content": _field(m, content_key, str, where, f"{field}[{i}].{content_key}"),
        }
        if m.get("reasoning_content") is not None:
            msg["reasoning_content"] = _field(
                m, "reasoning_content", str, where, f"{field}[{i}].reasoning_content"
            )
        out.append(msg)
    return out


def _prompt(rec, key, where):
    """A prompt: a string (the user turn), or a list of messages (verl's `prompt`)."""
    prompt = _field(rec, key, (str, list), where)
    return _messages(prompt, where, key) if isinstance(prompt, list) else prompt


def guess_kind(rec: dict) -> str:
    """What a row is, from its keys: several responses (OpenR1's generations), code, SFT, or
    math."""
    if "generations" in rec:
        return "responses"
    if {"question_content", "input_output", "tests", "public_tests", "verification_info"} & set(
        rec
    ) or rec.get("ability") in ("code", "coding"):
        return "code"
    if (
        "conversations" in rec
        or ("messages" in rec and "meta" not in rec and "answer" not in rec)
        or any(question in rec and answer in rec for _, question, _, answer in _SFT_FIELDS)
    ):
        return "sft"
    return "math"


_READERS = {
    "sft": _sft_reader,
    "responses": _responses_reader,
    "math": _math_reader,
    "code": _code_reader,
}
