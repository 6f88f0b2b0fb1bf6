"""Data for Klear-Reasoner: Qwen3 chat format, loaders for public data as published, packing, and toy tasks.

Everything a trainer feeds the model passes through here, for real Qwen3 data and for the toy tasks alike.
Run:
    python data.py stats FILE [--kind=sft|responses|math|code] [--tokenizer=DIR] [--row_tokens=N] [--skip_bad_rows=true]
                                                  # what a data file holds: records, lengths, packing (streamed)
    python data.py toy --out=out/toy              # the toy tokenizer + sft/math/code JSONL files
The file, top to bottom:

1. Chat format, identical to Qwen3's chat template (tools left out):
       <|im_start|>system\n{system}<|im_end|>\n                      (only if given)
       <|im_start|>user\n{question}<|im_end|>\n
       <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n
   The generation prompt is `<|im_start|>assistant\n` (plus `<think>\n\n</think>\n\n` when thinking is off).
   Assistant turns before the last user turn lose their reasoning, as in the template. SFT trains on the
   final assistant turn only: its reasoning, answer and `<|im_end|>` (loss_mask = 1), nothing else.
2. Loaders: load_sft_jsonl, load_responses, load_math_jsonl and load_code_jsonl read the public sets as published
   (the table of formats and sets opens that part), from JSON lines, a `.json` array or `.parquet`, streamed
   (read_rows). Bad input (a missing or empty file, malformed JSON, a missing or mistyped field) is an error naming
   file:n and the field. A row that reads fine but cannot be graded or learned from (a placeholder answer such as
   NuminaMath-1.5's "proof", code whose tests cannot be run) is an UngradableRow: refused by default, skipped and
   counted with skip_bad_rows=True. Each loader returns Records: the records, plus .report (rows read, kept,
   dropped or skipped and why, formats seen), one line to print.
3. Packing: documents go into rows of `row_tokens` tokens by best-fit decreasing; each row carries
   position_ids that restart at 0 per document and document_ids (padding is its own document), so the
   model attends only within a document: mask[i, j] = (doc[i] == doc[j]) and (j <= i).
   PackedLoader shuffles rows by (seed, epoch), gives every rank the same number of rows per step
   (all-padding rows fill the last step), and resumes mid-epoch from state_dict().
4. Reading rows: JSON lines; one JSON array (one line or pretty-printed, decoded element by element); parquet,
   read in batches of 1024 rows with pyarrow, its values decoded as their JSON twin's would be. A file of a
   million rows is never in memory whole.
5. Format adapters, one family of formats after another (SFT, responses, math, code), as tables of field paths
   where the formats differ only in names, then the checked field access they share. Code tests come out in
   reward.py's format; assert programs are parsed, never run.
6. Toy tasks (no download): multi-digit addition with a digit-by-digit `<think>` trace and a `\\boxed{}`
   answer (a toy teacher's traces may slip once and end wrong: distill.py samples it and keeps the slips of the
   prompts it finds hard, the paper's "mixed" data; toy_math_sft_examples is a fixed mix made without the recipe),
   and small programming problems with 16+ stdin or functional tests and a ```python answer. A byte-level
   BPE tokenizer with Qwen3's pre-tokenizer and special tokens is trained on them in a second.
7. The command line: parse_config, the one `--key=value` parser of every entry point and benchmark (it lives here,
   in the file every other one imports and that imports none of them), and `python data.py toy|stats`.
"""
import array
import ast
import base64
import bisect
import contextlib
import datetime
import decimal
import inspect
import io
import json
import math
import os
import pickle
import random
import re
import sys
import tokenize
import zlib
from dataclasses import dataclass, fields, replace
from typing import ClassVar, NamedTuple

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers


class DataError(ValueError):
    """Bad input data; the message names file:line and field."""


# What reading a user's files raises for bad input: shown as one line naming the file; anything else is a bug and
# keeps its traceback.
INPUT_ERRORS = (DataError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


# ----------------------------------------------------------------------------- 1. the chat format

def load_tokenizer(path: str) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a directory holding tokenizer.json, or from the file itself."""
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer at {path!r}: expected a directory with tokenizer.json, or the file")
    try:
        tok = Tokenizer.from_file(file)
    except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception for a file it cannot parse)
        raise DataError(f"{file}: not a tokenizer.json the tokenizers library reads ({e})") from None
    special_token_ids(tok)  # fail now, not mid-training, if a chat token is missing
    return tok


def stop_token_ids(tok: Tokenizer) -> list:
    """Generation stops at <|im_end|> (end of the assistant turn) or <|endoftext|>."""
    ids = special_token_ids(tok)
    return [ids["im_end"], ids["endoftext"]]


def special_token_ids(tok: Tokenizer) -> dict:
    """Ids of the chat-control tokens: im_start, im_end, endoftext (also the pad), think, end_think."""
    names = dict(im_start="<|im_start|>", im_end="<|im_end|>", endoftext="<|endoftext|>", think="<think>",
                 end_think="</think>")
    ids = {k: tok.token_to_id(v) for k, v in names.items()}
    missing = [names[k] for k, v in ids.items() if v is None]
    if missing:
        raise DataError(f"tokenizer lacks the Qwen3 chat tokens {missing}; use a Qwen3 tokenizer or "
                        "build_toy_tokenizer()")
    return ids


def encode_sft_dataset(tok: Tokenizer, conversations, max_len: int, overlong: str = "truncate"):
    """Tokenize conversations for SFT. Returns (examples, report): examples are (input_ids int32, loss_mask bool)
    numpy pairs; a conversation longer than max_len tokens is cut to its first max_len tokens ("truncate"),
    left out ("drop"), or raises ("error"); report counts each case (print it: nothing vanishes silently)."""
    if overlong not in ("truncate", "drop", "error"):
        raise ValueError(f"overlong={overlong!r}: use truncate, drop or error")
    rendered = [_render(c, False, True) for c in conversations]
    encodings = tok.encode_batch([text for text, _ in rendered], add_special_tokens=False)
    examples, report = [], dict(conversations=len(conversations), kept=0, truncated=0, dropped=0,
                                max_len=max_len, overlong=overlong)
    for k, (enc, (_, span)) in enumerate(zip(encodings, rendered)):
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)  # same rule as _loss_mask, vectorised
        ids, mask = np.asarray(enc.ids, dtype=np.int32), (offsets[:, 1] > span[0]) & (offsets[:, 0] < span[1])
        if len(ids) > max_len:
            if overlong == "error":
                raise DataError(f"conversation {k} has {len(ids)} tokens > max_len={max_len} (overlong=error)")
            if overlong == "drop" or not mask[:max_len].any():  # nothing left to learn from: drop, counted
                report["dropped"] += 1
                continue
            ids, mask = ids[:max_len], mask[:max_len]
            report["truncated"] += 1
        report["kept"] += 1
        examples.append((ids, mask))
    return examples, report


def encode_prompts(tok: Tokenizer, problems, max_prompt_len: int, overlong: str = "drop"):
    """Add "prompt_ids" (with the generation prompt) to each problem. Longer prompts are left-truncated
    ("truncate", as the paper's RL does), left out ("drop") or raise ("error"). Returns (problems, report)."""
    if overlong not in ("truncate", "drop", "error"):
        raise ValueError(f"overlong={overlong!r}: use truncate, drop or error")
    kept, report = [], dict(prompts=len(problems), kept=0, truncated=0, dropped=0, max_prompt_len=max_prompt_len)
    for p in problems:
        ids = encode_prompt(tok, p["prompt"])
        if len(ids) > max_prompt_len:
            if overlong == "error":
                raise DataError(f"prompt {p['id']} has {len(ids)} tokens > max_prompt_len={max_prompt_len}")
            if overlong == "drop":
                report["dropped"] += 1
                continue
            ids, report["truncated"] = ids[-max_prompt_len:], report["truncated"] + 1
        kept.append({**p, "prompt_ids": ids})
        report["kept"] += 1
    return kept, report


def encode_prompt(tok: Tokenizer, messages_or_text, enable_thinking: bool = True) -> list:
    """Token ids of a prompt ending in the generation prompt `<|im_start|>assistant\\n`.
    Takes a user message as a string, or a list of messages."""
    return tok.encode(render_chat(chat_messages(messages_or_text), True, enable_thinking), add_special_tokens=False).ids


def chat_messages(messages_or_text) -> list:
    """A prompt as chat messages: a string is one user turn; a list of messages stays as it is."""
    return [{"role": "user", "content": messages_or_text}] if isinstance(messages_or_text, str) else messages_or_text


def encode_chat(tok: Tokenizer, messages) -> tuple:
    """(input_ids, loss_mask) of the rendered conversation; loss_mask = 1 on the final assistant turn
    (think block, answer, <|im_end|>). The ids are those of tokenizing render_chat(messages) whole."""
    if messages[-1].get("role") != "assistant":
        raise ValueError("encode_chat needs a conversation that ends with an assistant turn")
    text, span = _render(messages, False, True)
    enc = tok.encode(text, add_special_tokens=False)
    return enc.ids, _loss_mask(enc.offsets, span)


def _loss_mask(offsets, span) -> list:
    # a token is trained if any of its characters lies in the final assistant turn's span
    start, end = span
    return [int(e > start and s < end) for s, e in offsets]


def render_chat(messages, add_generation_prompt: bool = False, enable_thinking: bool = True) -> str:
    """The text Qwen3's chat template renders for these messages (no tools)."""
    return _render(messages, add_generation_prompt, enable_thinking)[0]


def _render(messages, add_generation_prompt: bool, enable_thinking: bool):
    """Qwen3's chat template in Python. Returns (text, (start, end)): the character span of the last
    assistant turn's generated part, from just after `<|im_start|>assistant\\n` through `<|im_end|>`."""
    _check_messages(messages)
    parts, span = [], None
    if messages[0]["role"] == "system":
        parts.append(f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n")
    # the last "real" user query; assistant turns after it keep their reasoning
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        c = messages[i]["content"]
        if messages[i]["role"] == "user" and not (c.startswith("<tool_response>") and c.endswith("</tool_response>")):
            last_query = i
            break
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        if role == "user" or (role == "system" and i > 0):
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif role == "assistant":
            reasoning = m.get("reasoning_content")
            if reasoning is None:
                reasoning = ""
                if "</think>" in content:
                    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                    content = content.split("</think>")[-1].lstrip("\n")
            if i > last_query and (i == len(messages) - 1 or reasoning):
                body = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n" + content.lstrip("\n")
            else:
                body = content
            head = "<|im_start|>assistant\n"
            start = sum(map(len, parts)) + len(head)
            parts.append(head + body + "<|im_end|>\n")
            span = (start, start + len(body) + len("<|im_end|>"))
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n" + ("" if enable_thinking else "<think>\n\n</think>\n\n"))
    return "".join(parts), span


def _check_messages(messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            role = m.get("role") if isinstance(m, dict) else m
            raise ValueError(f"messages[{i}]: role {role!r} is not supported (system, user, assistant; "
                             "tool calls are not supported by this implementation)")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}].content must be a string, got {type(m.get('content')).__name__}")
        if m.get("tool_calls"):
            raise ValueError(f"messages[{i}]: tool_calls are not supported by this implementation")


# ----------------------------------------------------------------------------- 2. the loaders
# What each loader reads (every loader reads JSON lines, a .json array and .parquet; they keep their `_jsonl` names):
#   SFT        {"messages": [{"role", "content"}]}  or  {"conversations": [{"from", "value"}], "system"?}
#              {"problem", "deepseek_reasoning", "deepseek_solution"}   {"input", "output"}
#   responses  several teacher responses per prompt with the source's verdict (load_responses)
#   math       {"problem"|"question"|"prompt", "answer"}       (AIME-style; a prompt may be a list of messages)
#              {"problem", "solution"}                          (MATH: the answer is the solution's last \boxed{})
#              {"prompt": [messages], "reward_model": {"ground_truth"}}   (verl, Skywork-OR1: maybe several answers)
#              {"messages", "meta": {"solution"}}  or  {"messages", "answer"}
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
#   responses  OpenR1-Math-220k (card: generations, correctness_math_verify), and every SFT set above
#   math   NuminaMath-1.5 and -CoT, OpenR1-Math-220k, Big-Math, DeepScaleR (raw, and agentica-project/rllm:
#          scripts/data/deepscaler_dataset.py), DAPO-Math-17k, Skywork-OR1 (SkyworkAI/Skywork-OR1:
#          or1_scripts/data_preprocess/), KlearReasoner-MathSub-30K and the authors' AIME24/25 and HMMT-202502
#          files (Kwai-Klear/KlearReasoner: README, benchmarks/)
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

class Records(list):
    """What a loader returns: the records, as a plain list, plus `report`, a dict of what was read, kept and
    dropped and why, printable on one line: print(f"code data: {problems.report}")."""

    def __init__(self, items, report: dict):
        super().__init__(items)
        self.report = report


class UngradableRow(DataError):
    """A row that reads fine but cannot be graded or learned from (a placeholder answer such as "proof", a code row
    whose tests cannot be run). Refused by default; with skip_bad_rows=True the loader skips it and counts `reason`
    in its report."""

    def __init__(self, where: str, message: str, reason: str):
        super().__init__(f"{where}: {message} (skip_bad_rows=true skips such rows and counts them)")
        self.reason = reason


def load_sft_jsonl(path: str, skip_bad_rows: bool = False) -> Records:
    """Conversations (lists of {"role", "content"[, "reasoning_content"]}) from the SFT formats above (ShareGPT's
    `from` may be human/user/gpt/assistant/system), each ending with the assistant turn SFT learns. OpenThoughts'
    reasoning markers become `<think>`, and a system prompt that asks for those markers is dropped (counted)."""
    report = _new_report(path)
    return Records(_records(path, _sft_reader(path, report), report, skip_bad_rows), report)


def load_responses(path: str, skip_bad_rows: bool = False) -> Records:
    """Prompts with their teacher responses: {"id", "prompt" (a string, or a list of messages), "answer" (the math
    answer to verify against, or None), "source" (the row's format), "responses": [{"content", "correct"}]}, plus
    "tests" where a code row carries them. `content` is the assistant turn in Qwen3's format
    (`<think>\\n{reasoning}\\n</think>\\n\\n{answer}`); `correct` is the source's own verdict, or None.
    - OpenR1-Math-220k: every one of `generations`, correct = `correctness_math_verify`; a generation that never
      closes its reasoning (cut at the length limit) is left out and counted ("unfinished_responses").
    - every SFT row load_sft_jsonl reads: its final assistant turn, correct None.
    A placeholder answer (`proof`, `notfound`) becomes None, counted ("answers_not_gradable")."""
    report = _new_report(path)
    return Records(_records(path, _responses_reader(path, report), report, skip_bad_rows), report)


def load_math_jsonl(path: str, skip_bad_rows: bool = False) -> Records:
    """Math problems {id, prompt, answer[, answers]} from the math formats above (`messages` + `meta.solution`: the
    authors' AIME files; `messages` + `answer`: their HMMT file); a numeric answer becomes a string. `answers` (all
    acceptable answers, answer = answers[0]) is there only when a row gives more than one (Skywork-OR1's lists):
    a response is right if it matches any of them. A row whose answer cannot be graded (empty, a placeholder
    such as NuminaMath-1.5's "proof" / "notfound", question_type "proof") is an UngradableRow."""
    report = _new_report(path)
    return Records(_records(path, _math_reader(path, report), report, skip_bad_rows), report)


def load_code_jsonl(path: str, min_tests: int = 1, pass_rate_field: str = "", skip_bad_rows: bool = False) -> Records:
    """Code problems {id, line, prompt, tests[, solutions][, pass_rate][, contest_date]} (line: n of the row in the
    file) from the code formats above. The prompt is the question plus its starter code in a ```python block (verl:
    the `prompt` messages as they are).
    - Problems with fewer than `min_tests` tests are dropped and counted in the report (the paper keeps only
      those with >= 16). A row whose tests cannot be run (all its asserts unconvertible, another language than
      Python, pytest files) is an UngradableRow.
    - `solutions`: the row's reference programs, when it has any.
    - `pass_rate`: with pass_rate_field="FIELD" (dotted path, a rate in [0, 1]) or "FIELD/N" (a count out of
      N samples), a stronger model's pass rate, e.g. "pass_rate", or Skywork-OR1's correct-of-16 counts
      "extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-32B/16". A row without that field is an error."""
    report = _new_report(path)
    problems = Records(_records(path, _code_reader(path, report, min_tests, pass_rate_field), report, skip_bad_rows),
                       report)
    if not problems:
        raise DataError(f"{path}: no problem has at least min_tests={min_tests} tests ({report})")
    return problems


def copy_rows(src: str, dst: str, keep) -> int:
    """Write the rows of src numbered in `keep` (read_rows' n) to dst, in src's own format: JSON lines byte for
    byte, a JSON array as a JSON array, parquet with src's schema. Returns how many were written."""
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
    """Yield (n, record) for every record of a data file, n counting from 1: the line of a JSONL file, the
    element of a JSON array, the row of a parquet file. `.parquet` is read in batches (pyarrow); `.json` holds
    one JSON array (one line or pretty-printed, read incrementally) or JSON lines; anything else is JSON lines.
    A missing or empty file, malformed JSON, text that is not UTF-8, or a record that is not an object is an
    error naming the file (and n)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such data file")
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


# ----------------------------------------------------------------------------- 3. packing

class PackedLoader:
    """Packed rows for SFT, the same on every rank: shuffled by (seed, epoch), each optimizer step takes
    rows_per_step rows, rank r gets the r-th contiguous slice of them. The last step of an epoch is filled
    with all-padding rows (no loss), so every rank runs the same number of steps. state_dict() holds the
    epoch and step, so a restart continues with the next unseen step."""

    def __init__(self, examples, row_tokens: int, rows_per_step: int, pad_id: int, *, seed: int = 0,
                 rank: int = 0, world_size: int = 1):
        if rows_per_step % world_size:
            raise ValueError(f"rows_per_step={rows_per_step} must be a multiple of world_size={world_size}")
        if not examples:
            raise ValueError("PackedLoader got no examples")
        self.examples, self.row_tokens, self.pad_id = examples, row_tokens, pad_id
        self.rows_per_step, self.seed, self.rank, self.world_size = rows_per_step, seed, rank, world_size
        self.rows = plan_packing([len(x) for x, _ in examples], row_tokens)
        self.num_rows = len(self.rows)
        self.steps_per_epoch = -(-self.num_rows // rows_per_step)
        self.empty_rows_per_epoch = self.steps_per_epoch * rows_per_step - self.num_rows
        self.efficiency = sum(len(x) for x, _ in examples) / (self.num_rows * row_tokens)  # real / packed tokens
        self.epoch, self.step = 0, 0
        self._order_epoch, self._order = None, None

    def __len__(self):
        return self.steps_per_epoch

    def _epoch_order(self, epoch: int) -> list:
        if self._order_epoch != epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.num_rows).tolist()
            self._order = perm + [None] * self.empty_rows_per_epoch
            self._order_epoch = epoch
        return self._order

    def rows_for(self, epoch: int, step: int) -> list:
        """This rank's rows of one step: a list of rows_per_step / world_size dicts of (row_tokens,) tensors."""
        per_rank = self.rows_per_step // self.world_size
        start = step * self.rows_per_step + self.rank * per_rank
        picked = self._epoch_order(epoch)[start:start + per_rank]
        rows = [None if r is None else self.rows[r] for r in picked]
        return _build_rows(self.examples, rows, self.row_tokens, self.pad_id)

    def next_step(self) -> list:
        """The rows of the next step, advancing (and wrapping into the next epoch at the end)."""
        rows = self.rows_for(self.epoch, self.step)
        self.step += 1
        if self.step == self.steps_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0
        return rows

    def state_dict(self) -> dict:
        return dict(epoch=self.epoch, step=self.step, seed=self.seed, rows_per_step=self.rows_per_step,
                    num_rows=self.num_rows)

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "rows_per_step", "num_rows"):
            if state[key] != getattr(self, key):
                raise DataError(f"cannot resume: the checkpoint's data loader had {key}={state[key]}, now "
                                 f"{getattr(self, key)}; resume with the same data, seed and batch settings")
        self.epoch, self.step = int(state["epoch"]), int(state["step"])


def pack_examples(examples, row_tokens: int, pad_id: int) -> list:
    """Pack (input_ids, loss_mask) pairs into rows: a list of dicts of (row_tokens,) tensors input_ids,
    loss_mask (bool), position_ids (restart at 0 per document) and document_ids (0, 1, ... per row)."""
    return _build_rows(examples, plan_packing([len(x) for x, _ in examples], row_tokens), row_tokens, pad_id)


def plan_packing(lengths, row_tokens: int) -> list:
    """Best-fit decreasing: longest document first, into the row whose free space fits it most tightly.
    Returns rows as lists of document indices. Deterministic (ties broken by index)."""
    too_long = [i for i, n in enumerate(lengths) if n > row_tokens or n <= 0]
    if too_long:
        i = too_long[0]
        raise DataError(f"{len(too_long)} documents do not fit a row (e.g. #{i}: {lengths[i]} tokens, row_tokens="
                         f"{row_tokens}); cut or drop them first (encode_sft_dataset's max_len <= row_tokens)")
    rows, free = [], []  # free: sorted (space left, row index)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        j = bisect.bisect_left(free, (lengths[i], -1))  # smallest space that still fits
        if j < len(free):
            space, r = free.pop(j)
        else:
            space, r = row_tokens, len(rows)
            rows.append([])
        rows[r].append(i)
        if space - lengths[i] > 0:
            bisect.insort(free, (space - lengths[i], r))
    return rows


def _build_rows(examples, rows, row_tokens: int, pad_id: int) -> list:
    """Materialise rows (lists of example indices, or None for an all-padding row): one dict of (row_tokens,)
    tensors per row, views of (B, row_tokens) tensors built at once."""
    B = len(rows)
    ids = np.full((B, row_tokens), pad_id, dtype=np.int64)
    mask = np.zeros((B, row_tokens), dtype=bool)
    pos = np.zeros((B, row_tokens), dtype=np.int64)
    doc = np.zeros((B, row_tokens), dtype=np.int64)
    for b, row in enumerate(rows):
        t = 0
        for d, i in enumerate(row or []):
            x, m = examples[i]
            n = len(x)
            ids[b, t:t + n], mask[b, t:t + n], pos[b, t:t + n], doc[b, t:t + n] = x, m, np.arange(n), d
            t += n
        pos[b, t:] = np.arange(row_tokens - t)  # padding: one more document of its own
        doc[b, t:] = len(row or [])
    import torch  # here, not at the top: reading data (`data.py stats`, the loaders) needs no torch
    batch = dict(input_ids=torch.from_numpy(ids), loss_mask=torch.from_numpy(mask),
                 position_ids=torch.from_numpy(pos), document_ids=torch.from_numpy(doc))
    return [{k: v[b] for k, v in batch.items()} for b in range(B)]


# ----------------------------------------------------------------------------- 4. reading rows

PARQUET_BATCH_ROWS = 1024  # rows decoded at a time: memory stays that of one batch, however long the file


def _parquet_rows(path: str):
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    n = 0
    try:
        # pre_buffer=False: with it, pyarrow keeps the buffers of every row group read so far (memory grows with
        # the file: +60 MiB over 3M short rows, measured), without it memory stays that of one batch
        for batch in pyarrow.parquet.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for rec in batch.to_pylist():
                n += 1
                yield n, _plain(rec, f"{path}:{n}")
    except (pyarrow.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file (after {n} rows: {e})") from None


def _plain(value, where: str):
    """A parquet value as its JSON twin would decode: bytes as UTF-8 text, a map's (key, value) pairs as an
    object, dates and times in ISO format, decimals and numpy scalars as Python numbers; lists, structs and None
    as they are."""
    if isinstance(value, dict):
        return {k: _plain(v, where) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # pyarrow's view of a map
            return {_plain(k, where): _plain(v, where) for k, v in value}
        return [_plain(v, where) for v in value]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{where}: a binary value is not UTF-8 text ({e.reason} at byte {e.start})") from None
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
    decoder, buf, pos, eof, n = json.JSONDecoder(), "", 0, False, 0
    with open(path, encoding="utf-8-sig") as f:

        def more(at_least: int = chunk_chars) -> bool:
            nonlocal buf, pos, eof
            try:
                text = f.read(max(at_least, chunk_chars))
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n + 1}: not UTF-8 text ({e.reason})") from None
            buf, pos, eof = buf[pos:] + text, 0, not text
            return bool(text)

        def next_char() -> str:  # the next non-blank character (consumed), "" at the end of the file
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
                except json.JSONDecodeError as e:  # ran off the window's end: widen it; else the JSON is bad
                    truncated = e.pos >= len(buf) - 16 or e.msg.startswith("Unterminated string")
                    if eof or not truncated or not more(len(buf)):
                        raise DataError(f"{path}:{n + 1}: malformed JSON ({e.msg})") from None
            n, pos = n + 1, end
            yield n, rec
            c = next_char()
            if c == "]":
                break
            if c != ",":
                raise DataError(f"{path}:{n}: malformed JSON (expected ',' or ']' after element {n})")
        if next_char():
            raise DataError(f"{path}: malformed JSON (text after the array's closing ']')")


def _json_lines(path: str):
    hint = " (a .json file holds one JSON array, or one JSON object per line)" if path.endswith(".json") else ""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: malformed JSON ({e.msg} at column {e.colno}){hint}") from None


# ----------------------------------------------------------------------------- 5. the format adapters

def _records(path: str, read_row, report: dict, skip_bad_rows: bool):
    """Yield read_row(rec, where, n)'s record for every row of the file, counting rows, kept records and formats
    in report; read_row returns (format, record), or (format, None) for a row it dropped and counted itself. An
    UngradableRow is raised, or, with skip_bad_rows, counted by its reason in report["skipped"]."""
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


# SFT rows that are one question and one answer in named fields:
# (format, question field, reasoning field or None when the answer holds its own <think> block, answer field)
_SFT_FIELDS = [("openthoughts-metadata", "problem", "deepseek_reasoning", "deepseek_solution"),
               ("opencodereasoning", "input", None, "output")]


def _conversation(rec, where, report) -> tuple:
    """(format, messages) of an SFT row."""
    if "messages" in rec:
        fmt, msgs = "messages", _messages(_field(rec, "messages", list, where), where, "messages")
    elif "conversations" in rec:
        fmt = "conversations"
        msgs = _messages(_field(rec, "conversations", list, where), where, "conversations", "from", "value")
        if rec.get("system"):
            msgs.insert(0, {"role": "system", "content": _field(rec, "system", str, where)})
    else:
        fmt, question, reasoning, answer = next((f for f in _SFT_FIELDS if f[1] in rec and f[3] in rec),
                                                (None, None, None, None))
        if fmt is None:
            raise DataError(f"{where}: missing field 'messages' (or 'conversations', or problem + deepseek_solution, "
                            f"or input + output); keys are {sorted(rec)}")
        text = _field(rec, question, str, where)
        if fmt == "opencodereasoning" and text.strip() == "-":
            raise UngradableRow(where, "field 'input' is '-': OpenCodeReasoning's split_1 keeps its questions in the "
                                       "source sets (fields 'dataset', 'split', 'index'); fill them in first",
                                "question not filled in ('-')")
        content = _field(rec, answer, str, where)
        if reasoning:
            content = assistant_content(_field(rec, reasoning, str, where), content)
        msgs = [{"role": "user", "content": text}, {"role": "assistant", "content": content}]
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            m["content"] = _unmark(m["content"], where, f"{fmt}[{i}]")
    if msgs and msgs[0]["role"] == "system" and "<|begin_of_thought|>" in msgs[0]["content"]:
        # the system prompt asks for the markers the assistant turns no longer have: training on it would teach
        # the model to ignore its system prompt
        msgs.pop(0)
        _count(report, "dropped_marker_system_prompts")
    if not msgs or msgs[-1]["role"] != "assistant":
        raise DataError(f"{where}: field '{fmt}' must end with an assistant turn to learn from")
    return fmt, msgs


_MARKED = re.compile(r"\s*<\|begin_of_thought\|>(.*)<\|end_of_thought\|>\s*<\|begin_of_solution\|>(.*)"
                     r"<\|end_of_solution\|>\s*", re.DOTALL)


_MARKERS = ("<|begin_of_thought|>", "<|end_of_thought|>", "<|begin_of_solution|>", "<|end_of_solution|>")


def _unmark(text: str, where: str, field: str) -> str:
    """OpenThoughts-114k's `<|begin_of_thought|> R <|end_of_thought|> <|begin_of_solution|> A <|end_of_solution|>`
    as `<think>\\nR\\n</think>\\n\\nA`; text without these markers as it is."""
    if not any(marker in text for marker in _MARKERS):
        return text
    m = _MARKED.fullmatch(text)
    if not m or any(marker in m.group(1) + m.group(2) for marker in _MARKERS):
        raise UngradableRow(where, f"field '{field}' holds the markers <|begin_of_thought|> ... <|end_of_solution|>, "
                                   "but not as one thought then one solution", "malformed reasoning markers")
    return assistant_content(m.group(1), m.group(2))


def assistant_content(reasoning: str, answer: str) -> str:
    """An assistant turn in Qwen3's format: `<think>\\n{reasoning}\\n</think>\\n\\n{answer}`."""
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{answer.strip()}"


# Several responses per prompt, for SFT data built from a teacher's samples (the paper keeps all responses of
# hard prompts, correct or not: its "mixed" data).


def _responses_reader(path: str, report: dict):
    def read_row(rec, where, n):
        if "generations" in rec:
            fmt, prompt, responses = "openr1-math", _field(rec, "problem", str, where), _generations(rec, where, report)
        else:
            fmt, messages = _conversation(rec, where, report)
            prompt, responses = _final_turn(messages)
        record = dict(id=_record_id(rec, path, n), prompt=prompt, answer=_response_answer(rec, where, report),
                      source=fmt, responses=responses)
        if rec.get("test_cases"):  # OpenThoughts-114k's code rows: APPS-style tests
            record["tests"] = _test_cases(rec["test_cases"], where, "test_cases", _CodeContext(report=report))
        return fmt, record

    return read_row


def _generations(rec, where, report) -> list:
    """OpenR1-Math-220k's responses: every one of `generations` that closes its reasoning (the others are counted),
    correct = its `correctness_math_verify` flag (or None)."""
    generations = _field(rec, "generations", list, where)
    flags = rec.get("correctness_math_verify")
    flags = [None] * len(generations) if flags is None else _field(rec, "correctness_math_verify", list, where)
    if len(flags) != len(generations):
        raise DataError(f"{where}: field 'correctness_math_verify' has {len(flags)} flags for "
                        f"{len(generations)} generations")
    responses = []
    for i, (text, flag) in enumerate(zip(generations, flags)):
        text = _typed(text, str, where, f"generations[{i}]")
        if flag is not None and not isinstance(flag, bool):
            raise DataError(f"{where}: field 'correctness_math_verify[{i}]' must be true, false or null")
        parts = split_think(text)
        if parts is None:
            _count(report, "unfinished_responses")
            continue
        responses.append({"content": assistant_content(*parts), "correct": flag})
    if not responses:
        raise UngradableRow(where, "no generation closes its reasoning with </think>", "no finished response")
    return responses


def _final_turn(messages) -> tuple:
    """(prompt, [its final assistant turn as a response without a verdict]) of an SFT conversation; a prompt that is
    one user turn becomes that turn's text."""
    last, prompt = messages[-1], messages[:-1]
    parts = ((last["reasoning_content"], last["content"]) if "reasoning_content" in last else
             split_think(last["content"]) or ("", last["content"]))
    if len(prompt) == 1 and prompt[0]["role"] == "user":
        prompt = prompt[0]["content"]
    return prompt, [{"content": assistant_content(*parts), "correct": None}]


def split_think(content: str):
    """(reasoning, answer) of a turn written `<think>reasoning</think>answer` (the opening tag may be missing, as
    in generations from a prompt that ends with it), by the chat template's rule; None without `</think>`."""
    if "</think>" not in content:
        return None
    return content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n"), content.split("</think>")[-1]


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
        key = next((k for k in ("problem", "question", "prompt") if k in rec), None)
        if key is not None:
            prompt = _prompt(rec, key, where)
            fmt, answers, name = _math_answer(rec, where)
        elif "messages" in rec:
            prompt = [m for m in _messages(_field(rec, "messages", list, where), where, "messages")
                      if m["role"] != "assistant"]
            if rec.get("answer") is not None:
                fmt, name, answer = "messages+answer", "answer", rec["answer"]
            else:
                fmt, name = "messages+meta.solution", "meta.solution"
                answer = _field(_field(rec, "meta", dict, where), "solution", (str, int, float), where, name)
            answers = [_answer_text(answer, where, name)]
        else:
            raise DataError(f"{where}: missing field 'problem' (or 'question', 'prompt', 'messages'); "
                            f"keys are {sorted(rec)}")
        answers = [_gradable(rec, a, where, name) for a in answers]
        problem = dict(id=_record_id(rec, path, n), prompt=prompt, answer=answers[0])
        if len(answers) > 1:
            problem["answers"] = answers
        return fmt, problem

    return read_row


def _math_answer(rec, where):
    """(format, acceptable answers): `answer`, else verl's `reward_model.ground_truth`, else the last
    \\boxed{} of `solution` (MATH)."""
    if rec.get("answer") is not None:
        return "answer", [_answer_text(rec["answer"], where, "answer")], "answer"
    if "reward_model" in rec:
        return "verl ground_truth", _ground_truth_answers(rec, where), "reward_model.ground_truth"
    if rec.get("solution") is not None:
        answer = _last_boxed(_field(rec, "solution", str, where))
        if answer is None:
            raise DataError(f"{where}: field 'solution' has no complete \\boxed{{...}} answer, and no 'answer'")
        return "MATH solution", [answer.strip()], "solution's \\boxed{}"
    raise DataError(f"{where}: missing field 'answer' (or 'reward_model.ground_truth', or a \\boxed{{}} 'solution')")


def _ground_truth_answers(rec, where) -> list:
    """verl's reward_model.ground_truth: a string or a number (verl's gsm8k, DAPO-Math), or a JSON list of
    acceptable answers (Skywork-OR1 stores '["2"]'), as text or already decoded. A string is read as such a
    list only when it decodes to a list of strings: "[-1, 3]" stays one answer (an interval)."""
    name = "reward_model.ground_truth"
    truth = _field(_field(rec, "reward_model", dict, where), "ground_truth", (str, int, float, list, dict), where, name)
    if isinstance(truth, str) and truth.lstrip()[:1] in ("[", "{"):
        try:
            decoded = json.loads(truth)
        except (json.JSONDecodeError, RecursionError):
            decoded = None
        if isinstance(decoded, dict) or (isinstance(decoded, list) and all(isinstance(a, str) for a in decoded)):
            truth = decoded
    if isinstance(truth, dict):
        raise DataError(f"{where}: field '{name}' holds code tests, not a math answer: load this file as code data")
    if not isinstance(truth, list):
        return [_answer_text(truth, where, name)]
    if not truth:
        raise UngradableRow(where, f"field '{name}' is an empty list", "empty answer")
    return [_answer_text(a, where, f"{name}[{i}]") for i, a in enumerate(truth)]


def _answer_text(value, where, name) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field '{name}' must be str or a number, got {type(value).__name__}")
    return str(value)


# Answers that stand for "nothing to check" (NuminaMath-1.5, and OpenR1-Math-220k built on it).
PLACEHOLDER_ANSWERS = frozenset({"proof", "notfound"})


def _gradable(rec, answer: str, where: str, name: str) -> str:
    """answer, unless it cannot be graded: empty, a placeholder, or the answer of a row whose question_type is
    "proof" (NuminaMath-1.5 tags proofs so, whatever their answer field says)."""
    if not answer.strip():
        raise UngradableRow(where, f"field '{name}' is empty", "empty answer")
    if answer.strip().lower() in PLACEHOLDER_ANSWERS:
        raise UngradableRow(where, f"field '{name}' is {answer!r}, a placeholder with nothing to verify",
                            f"placeholder answer {answer.strip().lower()!r}")
    if rec.get("question_type") == "proof":
        raise UngradableRow(where, "field 'question_type' is 'proof': no answer to verify", "question_type 'proof'")
    return answer


_BOXED = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` or `\\fbox{...}` in text (a space may precede the brace; nested
    braces are matched, `\\{` and `\\}` are literal), or the token after an unbraced `\\boxed 5$`.
    None when there is none, or its braces never close."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i = starts[-1]
    while i < len(text) and text[i].isspace():
        i += 1
    if not text.startswith("{", i):
        return re.match(r"[^\s$]*", text[i:]).group()   # MATH writes a few answers as `$\boxed 5$`
    depth, j = 0, i
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
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
        problem = dict(id=_record_id(rec, path, n, id_key), line=n, prompt=prompt, tests=tests, **extra)
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
    ("livecodebench", ("question_content",), "question_content", ("?public_test_cases", "?private_test_cases"),
     None, None),
    ("code_contests", ("description", "public_tests"), "description",
     ("?public_tests", "?private_tests", "?generated_tests"), ("solutions", "by language"), "name"),
    ("apps/taco", ("input_output",), "question", ("?input_output",), ("solutions", "list"), None),
    ("primeintellect", ("verification_info",), "prompt", ("verification_info",),
     ("gold_standard_solution", "markdown"), None),
    ("verl", ("reward_model",), "prompt", ("reward_model.ground_truth",), ("extra_info.reference", "program"), None),
    ("deepcoder/rllm", ("problem", "tests"), "problem", ("tests",), ("solutions", "list or program"), None),
    ("tests", ("tests",), "prompt", ("tests",), ("solutions", "list"), None),
]


def _code_row(rec, where, report):
    """(format, prompt, tests, reference programs, id key, extra fields) of one code row."""
    spec = next((f for f in _CODE_FORMATS if all(k in rec for k in f[1])), None)
    if spec is None:
        raise DataError(f"{where}: missing field 'tests' (or 'question_content' for LiveCodeBench, 'input_output' "
                        f"for APPS/TACO, 'reward_model.ground_truth' for verl, 'verification_info' for "
                        f"PrimeIntellect, 'public_tests' for code_contests); keys are {sorted(rec)}")
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
    """The question, plus the starter code (if any) in a ```python block; a list of messages (verl) as it is."""
    prompt = _prompt(rec, key, where)
    if isinstance(prompt, list):
        return prompt
    starter = _typed(rec.get("starter_code") or "", str, where, "starter_code")
    return prompt + (f"\n\nUse this starter code:\n```python\n{starter}\n```" if starter.strip() else "")


def _solutions(rec, field, shape, where) -> list:
    """Reference programs, by how the format stores them:
    list         a list of programs or a JSON string of one (APPS/TACO, DeepCoder; "" when none)
    program      one program (verl's extra_info.reference)
    by language  code_contests' {"language": [...], "solution": [...]}: the Python 3 ones (language 3)
    markdown     PrimeIntellect's gold_standard_solution: the last ```python block of the text"""
    value = _get(rec, field)
    if not value:
        return []
    if shape == "list or program":  # rllm's leetcode rows hold one program, DeepCoder's rows a list
        shape = "list" if not isinstance(value, str) or value.lstrip().startswith("[") else "program"
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
            raise DataError(f"{where}: field '{field}[{i}]' must be a program (str), got {type(s).__name__}")
    return [s for s in solutions if s.strip()]


def _pass_rate(rec, spec: str, where) -> float:
    """The value at `spec`, "FIELD" (a rate in [0, 1]) or "FIELD/N" (a count of N samples, divided by N)."""
    field, _, scale = spec.rpartition("/")
    if not field or not re.fullmatch(r"\d+(\.\d*)?", scale) or not float(scale):
        field, scale = spec, "1"
    value = _path(rec, field, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value / float(scale) <= 1:
        raise DataError(f"{where}: field '{field}' must be a number in [0, {scale}] (pass_rate_field={spec!r}), "
                        f"got {value!r}")
    return value / float(scale)


class _CodeContext(NamedTuple):
    """What test decoding needs from the rest of its row: the function name LiveCodeBench keeps in
    metadata.func_name, the text where the function's signature can be found (starter code, prompt, reference
    programs: for keyword arguments of assert programs), and the report that counts asserts not converted."""
    func_name: str | None = None
    signatures: str = ""
    report: dict | None = None


def _test_cases(raw, where, field, ctx: _CodeContext) -> list:
    """Tests as stored, as themselves, as JSON text, or as base64(zlib(pickle(JSON text))) (LiveCodeBench's
    private tests): a list of cases (_tests_from_cases), APPS-style {"inputs", "outputs"[, "fn_name"]},
    code_contests' {"input": [...], "output": [...]}, PrimeIntellect's {"language", "test_cases"}, or Code-R1's
    {"functional": assert program, or a list of them} (_tests_from_asserts)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            try:
                raw = json.loads(_NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(raw)))).load())
            except Exception as e:
                raise DataError(f"{where}: field '{field}' is neither JSON nor LiveCodeBench's compressed form "
                                f"({e})") from None
    if isinstance(raw, list):
        return _tests_from_cases(raw, where, field, ctx)
    if not isinstance(raw, dict):
        raise DataError(f"{where}: field '{field}' must be a list of tests, got {type(raw).__name__}")
    if "functional" in raw:
        programs = raw["functional"]
        programs = [programs] if isinstance(programs, str) else programs
        if not isinstance(programs, list) or not all(isinstance(p, str) for p in programs):
            raise DataError(f"{where}: field '{field}.functional' must be an assert program or a list of them")
        return _tests_from_asserts(programs, where, f"{field}.functional", ctx)
    if "test_cases" in raw:
        language = raw.get("language") or "python"
        if language != "python":
            raise UngradableRow(where, f"field '{field}.language' is {language!r}: the sandbox runs Python programs",
                                f"language {language!r}")
        return _tests_from_cases(_field(raw, "test_cases", list, where, f"{field}.test_cases"), where,
                                 f"{field}.test_cases", ctx)
    if "inputs" in raw or "outputs" in raw:
        return _tests_from_io(raw, where, field)
    if "input" in raw and "output" in raw:  # code_contests: {"input": [stdin, ...], "output": [stdout, ...]}
        inputs = _field(raw, "input", list, where, f"{field}.input")
        outputs = _field(raw, "output", list, where, f"{field}.output")
        if len(inputs) != len(outputs):
            raise DataError(f"{where}: field '{field}' has {len(inputs)} inputs but {len(outputs)} outputs")
        return [{"input": _typed(x, str, where, f"{field}.input[{i}]"),
                 "output": _typed(y, str, where, f"{field}.output[{i}]")}
                for i, (x, y) in enumerate(zip(inputs, outputs))]
    if "pytest" in raw:
        raise UngradableRow(where, f"field '{field}' holds pytest files, which this project does not run",
                            "pytest tests")
    raise DataError(f"{where}: field '{field}' has none of 'inputs'/'outputs', 'input'/'output', 'test_cases', "
                    f"'functional'; keys are {sorted(raw)}")


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # plain data only: a pickle can never name code to run
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from test data")


def _tests_from_cases(cases, where, field, ctx: _CodeContext) -> list:
    """A list of test cases as tests:
      LiveCodeBench  {input, output, testtype: stdin|functional}; functional: one JSON argument per input line, the
                     JSON result; the function's name in metadata.func_name (of the row, or of each test: rllm)
      PrimeIntellect {input, output, type: stdin_stdout|function_call, fn_name}; function_call: the argument list
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
            tests.append({"input": _field(t, "input", str, where, name + ".input"),
                          "output": _field(t, "output", str, where, name + ".output")})
            continue
        if kind not in ("functional", "function_call"):
            raise DataError(f"{where}: field '{name}.{kind_key}' is {kind!r}; use stdin or functional")
        meta = _json_value(t["metadata"], dict, where, name + ".metadata") if t.get("metadata") else {}
        fn = t.get("fn_name") or meta.get("func_name") or ctx.func_name
        if not isinstance(fn, str) or not fn.isidentifier():
            raise DataError(f"{where}: field 'metadata.func_name' is needed by functional test '{name}' "
                            f"(a function name, got {fn!r})")
        args = _field(t, "input", (str, list), where, name + ".input")
        if "output" not in t:
            raise DataError(f"{where}: missing field '{name}.output'")
        out = t["output"]
        if kind == "function_call":
            args, out = _literal(args, where, name + ".input"), _literal(out, where, name + ".output", text_ok=True)
            if not isinstance(args, (list, tuple)):
                raise DataError(f"{where}: field '{name}.input' must be the argument list, got {type(args).__name__}")
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
        raise DataError(f"{where}: field '{name}' holds a {type(value).__name__}, which JSON cannot carry") from None


def _literal(value, where, name, text_ok=False):
    """A Python literal given as text (or already a value); with text_ok, text that is no literal is a string."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        if text_ok:
            return value.strip()
        raise DataError(f"{where}: field '{name}' is not a Python literal") from None


def _tests_from_io(io_spec, where, field) -> list:
    """APPS/TACO tests {"inputs", "outputs"[, "fn_name"]} as tests.
    stdin: each input and output is a string or a list of lines.
    call-based (`fn_name`, a function, or a method of class Solution): each input is the argument list, written
    one JSON argument per line; each output is the return value, as JSON. APPS usually wraps that value in a
    one-element list, and its checker accepts the value or the wrapped value. Our rule: when EVERY output of
    the problem is a one-element list, the lists are wrappers and are unwrapped; otherwise outputs stay as
    they are. The rule guesses wrong for an unwrapped function whose every return value happens to be a
    one-element list; the reference solutions then fail their own tests, which the code-prompt filter
    catches. Not handled: APPS's conversion of string dict keys back to ints."""
    inputs = _field(io_spec, "inputs", list, where, f"{field}.inputs")
    outputs = _field(io_spec, "outputs", list, where, f"{field}.outputs")
    if len(inputs) != len(outputs):
        raise DataError(f"{where}: field '{field}' has {len(inputs)} inputs but {len(outputs)} outputs")
    fn = io_spec.get("fn_name")
    if not fn:
        return [{"input": _stdin_text(x, where, f"{field}.inputs[{i}]"),
                 "output": _stdin_text(y, where, f"{field}.outputs[{i}]")}
                for i, (x, y) in enumerate(zip(inputs, outputs))]
    if not isinstance(fn, str) or not fn.isidentifier():
        raise DataError(f"{where}: field '{field}.fn_name' must be a function name, got {fn!r}")
    if all(isinstance(y, list) and len(y) == 1 for y in outputs):
        outputs = [y[0] for y in outputs]
    tests = []
    for i, (args, y) in enumerate(zip(inputs, outputs)):
        if not isinstance(args, list):
            raise DataError(f"{where}: field '{field}.inputs[{i}]' must be the list of arguments of {fn}, "
                            f"got {type(args).__name__}")
        tests.append(_call_test(fn, args, y))
    return tests


def _stdin_text(value, where, name) -> str:
    """APPS/TACO stdin data: a string, or a list of lines (joined by newlines, as their testing_util does)."""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' must be a string or a list of lines, got {type(value).__name__}")
    return value


# Assert programs (Code-R1, KlearReasoner-CodeSub, rllm leetcode: `def check(candidate): assert candidate(nums=[2, 7],
# target=9) == [0, 1]` + `check(Solution().twoSum)`) are NOT run with the candidate's program, as their authors do:
# there, code in the candidate's own process decides the verdict, and an object whose __eq__ always says True passes
# every assert. They are parsed instead (ast, never executed): each `assert f(literal args) == literal` (or
# `assert f(...)`: true, `assert not f(...)`: false) becomes one functional test whose result the sandbox compares as
# JSON data; keyword arguments are put in the order of the signature found in the row's starter code or prompt. An
# assert that cannot be converted exactly (arguments that are not literals, a tolerance, a helper function) is
# counted; a row left with no test is an UngradableRow. Each assert is its own test, so the soft reward counts them
# one by one (the authors' grader scores a whole program pass or fail).


def _tests_from_asserts(programs: list, where: str, field: str, ctx: _CodeContext) -> list:
    """Functional tests {input: one JSON argument per line, output: JSON, fn_name} from assert programs. Each
    `assert` is one test; one that cannot be converted safely is counted in report["asserts_not_converted"].
    A row left with no test is an UngradableRow."""
    tests, missed = [], 0
    for k, program in enumerate(programs):
        name = field if len(programs) == 1 else f"{field}[{k}]"
        try:
            tree = ast.parse(program)
        except SyntaxError as e:
            raise DataError(f"{where}: field '{name}' is not a Python program ({e.msg}, line {e.lineno})") from None
        got, lost = _asserts_as_tests(tree, ctx.signatures)
        tests, missed = tests + got, missed + lost
    if ctx.report is not None:
        _count(ctx.report, "asserts_not_converted", missed)
    if not tests:
        raise UngradableRow(where, f"field '{field}': no assert could be turned into a test ({missed} not converted: "
                                   "values that are not literals, tolerances, helper functions)",
                            "no convertible assert")
    return tests


def _asserts_as_tests(tree, signatures: str) -> tuple:
    """(tests, asserts not converted) of one parsed program. Recognised: the LeetCode form
    `def check(candidate): assert candidate(...) == value ...` + `check(Solution().name)`, asserts at the top level
    (`assert Solution().name(...) == value`, `assert name(...)`, `assert not name(...)`), and Code-R1's TACO loop
    `_inputs = [...]; _outputs = [...]; for i, o in zip(_inputs, _outputs): assert _deep_eq(name(*i), o)`."""
    body, defs = tree.body, {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    # the LeetCode form: the function check(...) is called on the candidate
    entry = next((node.value for node in body if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                  and isinstance(node.value.func, ast.Name) and node.value.func.id in defs
                  and len(node.value.args) == 1), None)
    asserts, lost = [], 0
    aliases = {}
    if entry is not None:
        check, fn = defs[entry.func.id], _callee(entry.args[0], {}, signatures, bare=True)
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
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
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
    if len({t["fn_name"] for t in tests}) > 1:  # asserts on several functions: not one problem's tests
        return [], lost + len(tests)
    return tests, lost


def _callee(node, aliases: dict, signatures: str, bare: bool = False):
    """The function name a call target stands for: `Solution().name`, a parameter bound to the candidate, or (where
    the starter code or prompt defines it, or `bare`) a plain `name`; None for anything else."""
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
    `assert not f(args)` (false) with literal arguments and value, as a test; None for anything else."""
    node, expected = stmt.test, True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node, expected = node.operand, False
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if not isinstance(left, ast.Call):
            left, right = right, left
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value in (None, True, False):
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
    """True if value survives JSON unchanged (no tuples, sets or bytes; dict keys are strings; floats finite)."""
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
    """The call's arguments as a positional list of literal values (keywords placed by the parameter order of
    `def fn(...)` in the signatures text), or None if a value is not a literal or a keyword cannot be placed."""
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None  # starred arguments, names, calls (a tree_node([...]) argument), ...
    if None in kwargs:
        return None  # **kwargs
    if kwargs:
        params = _parameters(fn, signatures)
        if params is None or not set(kwargs) <= set(params[len(args):]):
            return None
        order = params[len(args):]
        given = [p in kwargs for p in order]
        if any(given[i + 1] and not given[i] for i in range(len(given) - 1)):
            return None  # a gap: a parameter left to its default before one that is given
        args += [kwargs[p] for p in order if p in kwargs]
    return args if all(map(_json_exact, args)) else None


def _parameters(fn: str, signatures: str) -> list | None:
    """The positional parameter names of `def fn(...)` found in the text (starter code, prompt), `self` left out."""
    for m in re.finditer(rf"\bdef\s+{re.escape(fn)}\s*\(", signatures):
        depth, j = 1, m.end()
        while j < len(signatures) and depth:
            depth += {"(": 1, ")": -1}.get(signatures[j], 0)
            j += 1
        try:
            tree = ast.parse(f"def {fn}({signatures[m.end():j - 1]}): pass")
        except SyntaxError:
            continue
        params = [a.arg for a in tree.body[0].args.posonlyargs + tree.body[0].args.args]
        return params[1:] if params[:1] == ["self"] else params
    return None


def _taco_loop(loop: ast.For, literals: dict, signatures: str) -> list | None:
    """Tests from Code-R1's loop over TACO's call-based cases, `for i, o in zip(_inputs, _outputs): assert
    _deep_eq(name(*i), o)` (or `o[0]`), with _inputs and _outputs literal lists; None if the loop is not that.
    _deep_eq compares floats with a tolerance: a case whose expected value holds a float is not converted."""
    if not (isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2 and len(loop.body) == 1
            and isinstance(loop.body[0], ast.Assert) and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "zip" and len(loop.iter.args) == 2
            and all(isinstance(a, ast.Name) and isinstance(literals.get(a.id), list) for a in loop.iter.args)):
        return None
    i_name, o_name = (getattr(e, "id", None) for e in loop.target.elts)
    check = loop.body[0].test
    if not (isinstance(check, ast.Call) and len(check.args) == 2 and isinstance(check.args[0], ast.Call)):
        return None
    call, want = check.args
    fn = _callee(call.func, {}, signatures, bare=True)
    if not (fn and len(call.args) == 1 and isinstance(call.args[0], ast.Starred) and not call.keywords
            and getattr(call.args[0].value, "id", None) == i_name):
        return None
    wrapped = (isinstance(want, ast.Subscript) and getattr(want.value, "id", None) == o_name
               and isinstance(want.slice, ast.Constant) and want.slice.value == 0)
    if not (wrapped or getattr(want, "id", None) == o_name):
        return None
    inputs, outputs = (literals[a.id] for a in loop.iter.args)
    tests = []
    for args, out in zip(inputs, outputs):
        if wrapped:
            out = out[0] if isinstance(out, (list, tuple)) and out else float("nan")  # nan: not converted
        exact = isinstance(args, (list, tuple)) and _json_exact(list(args)) and _json_exact(out) \
            and not any(isinstance(x, float) for x in _leaves(out))
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
    """A functional test in reward.py's format: one JSON argument per input line, the JSON result."""
    return {"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(result), "fn_name": fn}


# Field access shared by the adapters: every value checked, every error naming file:n and the field.


def _count(report: dict, key: str, k: int = 1) -> None:
    """A count that appears in the report only once it is not zero."""
    if k:
        report[key] = report.get(key, 0) + k


def _field(rec, key, types, where, name=None):
    """rec[key], checked against types (_typed); `where` is "file:n" and `name` the field's full path."""
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
    """Like _typed, for a value that public sets store either as itself or as a JSON string of it."""
    value = _typed(value, (str, *_tuple(types)), where, name)
    if isinstance(value, str) and str not in _tuple(types):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise DataError(f"{where}: field '{name}' is not valid JSON") from None
        return _typed(value, types, where, name)
    return value


def _path(rec, dotted: str, where: str):
    """rec's value at a dotted path such as "extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-1.5B"
    (a key may itself hold dots: at each level the longest key that fits the rest of the path wins)."""
    value, rest = rec, dotted
    while rest:
        keys = [k for k in value if rest == k or rest.startswith(k + ".")] if isinstance(value, dict) else []
        if not keys:
            raise DataError(f"{where}: missing field '{dotted}'")
        key = max(keys, key=len)
        value, rest = value[key], rest[len(key) + 1:]
    return value


def _get(rec, dotted: str):
    """rec's value at a dotted path, or None where the path is absent."""
    try:
        return _path(rec, dotted, "")
    except DataError:
        return None


def _record_id(rec, path: str, n: int, key: str | None = None) -> str:
    """The row's own id (`key` if the format names one, else id, LiveCodeBench's question_id, APPS's problem_id,
    MATH-500's unique_id, OpenR1's uuid), else file:n."""
    keys = ((key,) if key else ()) + ("id", "question_id", "problem_id", "unique_id", "uuid")
    pid = next((rec[k] for k in keys if rec.get(k) is not None), None)
    return str(pid) if pid is not None else f"{os.path.basename(path)}:{n}"


def _messages(items, where, field, role_key="role", content_key="content") -> list:
    roles = {"system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant"}
    out = []
    for i, m in enumerate(items):
        if not isinstance(m, dict):
            raise DataError(f"{where}: field '{field}[{i}]' must be an object, got {type(m).__name__}")
        role = _field(m, role_key, str, where, f"{field}[{i}].{role_key}")
        if role not in roles:
            raise DataError(f"{where}: field '{field}[{i}].{role_key}' is {role!r}; supported: {sorted(roles)}")
        msg = {"role": roles[role], "content": _field(m, content_key, str, where, f"{field}[{i}].{content_key}")}
        if m.get("reasoning_content") is not None:
            msg["reasoning_content"] = _field(m, "reasoning_content", str, where, f"{field}[{i}].reasoning_content")
        out.append(msg)
    return out


def _prompt(rec, key, where):
    """A prompt: a string (the user turn), or a list of messages (verl's `prompt`)."""
    prompt = _field(rec, key, (str, list), where)
    return _messages(prompt, where, key) if isinstance(prompt, list) else prompt


# ----------------------------------------------------------------------------- 6. toy tasks

def toy_math_problems(n: int, seed: int | str = 0, split: str = "train", min_digits: int = 1,
                      max_digits: int = 4) -> list:
    """n addition problems {id, prompt, answer}; each operand has a uniform number of digits in
    [min_digits, max_digits]. 10% of all pairs are held out as "test" (distinct problems there)."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    rng, seen, problems = random.Random(f"toy-math-{split}-{seed}"), set(), []
    for _ in range(200 * n + 1000):
        if len(problems) == n:
            break
        a, b = (_number(rng, rng.randint(min_digits, max_digits)) for _ in range(2))
        if _split_of(f"{a}+{b}", 10) != split or (split == "test" and (a, b) in seen):
            continue
        seen.add((a, b))
        problems.append(dict(id=f"add-{a}-{b}", prompt=f"What is {a} + {b}?", answer=str(a + b)))
    if len(problems) < n:
        raise ValueError(f"only {len(problems)} distinct {split} problems with {min_digits}-{max_digits} digits; "
                         "ask for fewer")
    return problems


def _split_of(key: str, test_every: int) -> str:
    """A problem's split from a hash of its content, so train and test never share a problem."""
    return "test" if zlib.crc32(key.encode()) % test_every == 0 else "train"


def _number(rng, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)


def addition_trace(a: int, b: int, slip_column: int | None = None, slip: int = 1) -> tuple:
    """The digit-by-digit chain of thought, right to left, one line 'x+y+carry=sum' per column, and the
    answer it leads to. slip_column adds `slip` to that column's sum; later columns and the answer follow
    the mistake, as a flawed but self-consistent teacher trace would."""
    da, db, lines, digits, carry = str(a)[::-1], str(b)[::-1], [], [], 0
    for j in range(max(len(da), len(db))):
        x, y = int(da[j]) if j < len(da) else 0, int(db[j]) if j < len(db) else 0
        s = x + y + carry + (slip if j == slip_column else 0)
        lines.append(f"{x}+{y}+{carry}={s}")
        digits.append(s % 10)
        carry = s // 10
    if carry:
        digits.append(carry)
    return "\n".join(lines), int("".join(map(str, reversed(digits))))


def toy_math_response(a: int, b: int, rng: random.Random, slip_probability: float) -> str:
    """A toy teacher's answer to `a + b`: the `<think>` trace and the `\\boxed{}` sum. With probability
    slip_probability the trace slips once, by one, in a random column (drawn from rng only then), and the
    answer follows the slip: a wrong answer from a self-consistent trace."""
    slip_column = slip = None
    if slip_probability > 0 and rng.random() < slip_probability:
        slip_column = rng.randrange(max(len(str(a)), len(str(b))))
        s = int(addition_trace(a, b)[0].split("\n")[slip_column].split("=")[1])
        slip = -1 if s == 19 else (1 if s == 0 else rng.choice((-1, 1)))  # keep the sum in 0..19
    trace, answer = addition_trace(a, b, slip_column, slip or 0)
    return f"<think>\n{trace}\n</think>\n\n\\boxed{{{answer}}}"


def toy_math_sft_examples(n: int, seed: int = 0, wrong_fraction: float = 0.6, min_digits: int = 1,
                          max_digits: int = 4) -> list:
    """n SFT conversations on train-split problems: user question, assistant `<think>` trace + `\\boxed{}`.
    On hard problems (an operand with >= 3 digits) a wrong_fraction of the traces slip once in a random
    column and end in a wrong answer; wrong_fraction=0 gives only-correct data. A fixed mix, made without the
    recipe: `python sft.py` alone trains on it and the toy tokenizer's corpus is made of it; `bash train.sh`
    makes its SFT data with distill.py (the toy teacher sampled k times per prompt, then the paper's rule)."""
    rng = random.Random(f"toy-math-sft-{seed}")
    conversations = []
    for p in toy_math_problems(n, f"sft-{seed}", "train", min_digits, max_digits):  # not the RL prompts' stream
        a, b = map(int, p["id"].split("-")[1:])
        hard = max(len(str(a)), len(str(b))) >= 3
        conversations.append([{"role": "user", "content": p["prompt"]},
                              {"role": "assistant",
                               "content": toy_math_response(a, b, rng, wrong_fraction if hard else 0.0)}])
    return conversations


class CodeFamily(NamedTuple):
    """A family of toy programming problems: one problem per parameter tuple, its texts formatted with them."""
    name: str                # also the function name of functional families
    input_kind: str          # "int" (one integer on stdin), "int_mult" (half of them multiples of the first
    #                          parameter), "ints" (a line of integers), "word" (a lowercase word rich in a letter
    #                          parameter); "fn:int" / "fn:ints": functional tests (the JSON argument, the JSON result)
    params: list             # parameter tuples
    question: str
    plan: str                # the reasoning of the SFT trace
    solution: str            # the reference program; the tests' expected outputs are what it produces


_CODE_FAMILIES = [
    CodeFamily("linear", "int", [(k, c) for k in range(2, 10) for c in range(10)],
               "Read an integer n and print n * {0} + {1}.", "Read n, multiply it by {0}, add {1}, print it.",
               "n = int(input())\nprint(n * {0} + {1})"),
    CodeFamily("divisible", "int_mult", [(k,) for k in range(2, 14)],
               "Read an integer n. Print YES if n is divisible by {0}, otherwise print NO.",
               "n is divisible by {0} when n % {0} is 0.", "n = int(input())\nprint('YES' if n % {0} == 0 else 'NO')"),
    CodeFamily("modulo", "int", [(k,) for k in range(2, 14)], "Read an integer n and print n modulo {0}.",
               "Python's % gives the remainder.", "n = int(input())\nprint(n % {0})"),
    CodeFamily("sum_above", "ints", [(t,) for t in range(10)],
               "Read a line of integers and print the sum of those greater than {0}.",
               "Split the line, keep the numbers above {0}, add them.",
               "xs = list(map(int, input().split()))\nprint(sum(x for x in xs if x > {0}))"),
    CodeFamily("max_plus", "ints", [(c,) for c in range(20)],
               "Read a line of integers and print the largest one plus {0}.",
               "Take the max of the numbers and add {0}.",
               "xs = list(map(int, input().split()))\nprint(max(xs) + {0})"),
    CodeFamily("repeat", "word", [(k,) for k in range(2, 10)],
               "Read a word and print it {0} times in a row, with no spaces.",
               "String repetition: s * {0}.", "s = input().strip()\nprint(s * {0})"),
    CodeFamily("count_letter", "word", [(ch,) for ch in "abcdefghijklmnopqrstuvwxyz"],
               "Read a word and print how many times the letter {0} appears in it.", "Count the {0} characters.",
               "s = input().strip()\nprint(s.count('{0}'))"),
    CodeFamily("reverse", "word", [(k,) for k in range(2, 8)], "Read a word and print it reversed, {0} times in a row.",
               "Reverse with s[::-1], then repeat {0} times.", "s = input().strip()\nprint(s[::-1] * {0})"),
    CodeFamily("calc", "fn:int", [(k, c) for k in range(2, 10) for c in range(1, 10)],
               "Write a function calc(x) that returns x * {0} - {1}.", "calc returns x * {0} - {1}.",
               "def calc(x):\n    return x * {0} - {1}"),
    CodeFamily("count_above", "fn:ints", [(t,) for t in range(10)],
               "Write a function count_above(nums) that returns how many numbers in the list nums are greater than "
               "{0}.",
               "Count the numbers above {0}.", "def count_above(nums):\n    return sum(1 for x in nums if x > {0})"),
    CodeFamily("clip", "fn:int", [(m,) for m in range(1, 31)],
               "Write a function clip(x) that returns x if x is at most {0}, and {0} otherwise.",
               "That is min(x, {0}).",
               "def clip(x):\n    return min(x, {0})"),
]


def toy_code_problems(n: int, seed: int = 0, split: str = "train", num_tests: int = 16) -> list:
    """n distinct programming problems {id, prompt, tests, plan, solutions} of one split, families
    interleaved so every family is represented. Each has num_tests tests."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: use train or test")
    rng = random.Random(f"toy-code-{split}-{seed}")
    pools = _code_pools(split)
    for pool in pools:
        rng.shuffle(pool)
    order = [pool[i] for i in range(max(map(len, pools))) for pool in pools if i < len(pool)]
    if n > len(order):
        raise ValueError(f"only {len(order)} distinct toy code problems in the {split} split; asked for {n}")
    return [_code_problem(f, p, num_tests) for f, p in order[:n]]


def _code_pools(split: str) -> list:
    """Per family, the (family, params) pairs of one split (20% of all problems are held out as "test")."""
    return [[(f, p) for p in f.params if _split_of(f"{f.name}-" + "-".join(map(str, p)), 5) == split]
            for f in _CODE_FAMILIES]


def _code_problem(family: CodeFamily, params, num_tests: int) -> dict:
    pid = f"{family.name}-" + "-".join(map(str, params))
    solution = family.solution.format(*params)
    functional, kind = family.input_kind.startswith("fn:"), family.input_kind.split(":")[-1]
    rng = random.Random(f"toy-code-tests-{pid}")  # the tests depend on the problem only, not on any seed
    tests = []
    for _ in range(num_tests):
        if kind == "int_mult" and rng.random() < 0.5:  # else "print NO" would pass nearly every test
            arg = params[0] * rng.randint(-5, 10)
        elif kind == "ints":
            arg = [rng.randint(-20, 30) for _ in range(rng.randint(1, 8))]
        elif kind in ("int", "int_mult"):
            arg = rng.randint(-60, 120)
        else:
            letters = "abcdeilmnorst" + "".join(3 * p for p in params if isinstance(p, str))
            arg = "".join(rng.choice(letters) for _ in range(rng.randint(1, 9)))
        out = _run_reference(solution, family.name if functional else None, arg)
        if functional:
            tests.append(_call_test(family.name, [arg], out))
        else:
            tests.append({"input": (" ".join(map(str, arg)) if kind == "ints" else str(arg)) + "\n", "output": out})
    return dict(id=pid, prompt=family.question.format(*params), tests=tests, plan=family.plan.format(*params),
                solutions=[solution])


def _run_reference(program: str, fn_name: str | None, arg):
    """What our own (trusted) reference program returns for `arg` (functional) or prints for it on stdin."""
    if fn_name:
        namespace = {}
        exec(program, namespace)
        return namespace[fn_name](arg)
    stdin = " ".join(map(str, arg)) if isinstance(arg, list) else str(arg)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(program, {"input": lambda: stdin})
    return printed.getvalue()


def toy_code_sft_examples(n: int, seed: int = 0) -> list:
    """n SFT conversations on train-split problems (a uniform family, then a uniform problem of it, with
    replacement): the question, then a `<think>` plan and the reference program in a ```python block."""
    rng, pools = random.Random(f"toy-code-sft-{seed}"), [p for p in _code_pools("train") if p]
    conversations = []
    for _ in range(n):
        p = _code_problem(*rng.choice(rng.choice(pools)), num_tests=0)
        conversations.append([{"role": "user", "content": p["prompt"]},
                              {"role": "assistant", "content": toy_code_response(p)}])
    return conversations


def toy_code_response(problem: dict) -> str:
    """The toy teacher's answer to a toy programming problem: its plan in `<think>`, then the reference program."""
    return f"<think>\n{problem['plan']}\n</think>\n\n```python\n{problem['solutions'][0]}\n```"


def toy_sft_conversations(n_math: int, n_code: int, seed: int = 0, wrong_fraction: float = 0.6) -> list:
    """The toy SFT mix: n_math addition and n_code programming conversations, shuffled by seed."""
    conversations = toy_math_sft_examples(n_math, seed, wrong_fraction) + toy_code_sft_examples(n_code, seed)
    random.Random(f"toy-sft-mix-{seed}").shuffle(conversations)
    return conversations


# ----------------------------------------------------------------------------- the toy tokenizer
# A byte-level BPE shaped like Qwen3's, trained in-process on the toy conversations above (no download).


def build_toy_tokenizer(vocab_size: int = 640) -> Tokenizer:
    """A byte-level BPE tokenizer shaped like Qwen3's (NFC, Qwen's split regex so digits are single tokens,
    byte-level bytes, the same 26 added tokens after the learned vocabulary), trained in-process on toy data.
    Deterministic: the same vocab_size gives the same tokenizer.json."""
    tok = Tokenizer(models.BPE())  # no unk token: every byte has a token
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    n_learned = vocab_size - len(QWEN3_ADDED_TOKENS)
    trainer = trainers.BpeTrainer(vocab_size=n_learned, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    # train on the text between added tokens, as the finished tokenizer will see it
    added = "|".join(re.escape(c) for c, _ in QWEN3_ADDED_TOKENS)
    # a fixed corpus (wrong_fraction pinned too), so the vocabulary stays the same when the toy data's mix changes
    corpus = [piece for c in toy_sft_conversations(3000, 1500, seed=20250807, wrong_fraction=0.3)
              for piece in re.split(added, render_chat(c)) if piece]
    tok.train_from_iterator(corpus, trainer)
    for content, special in QWEN3_ADDED_TOKENS:  # one by one, so ids follow Qwen3's order
        token = AddedToken(content, special=special, normalized=False)
        tok.add_special_tokens([token]) if special else tok.add_tokens([token])
    return tok


def save_tokenizer(tok: Tokenizer, out_dir: str, model_max_length: int = 131072) -> None:
    """Write tokenizer.json and a Qwen3-style tokenizer_config.json (special tokens, eos, pad, chat template),
    so transformers' AutoTokenizer loads the directory too."""
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    added = {str(tok.token_to_id(c)): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                                             single_word=False, special=s) for c, s in QWEN3_ADDED_TOKENS}
    config = dict(add_bos_token=False, add_prefix_space=False, added_tokens_decoder=added,
                  additional_special_tokens=[c for c, s in QWEN3_ADDED_TOKENS[1:] if s], bos_token=None,
                  chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False, eos_token="<|im_end|>",
                  errors="replace", model_max_length=model_max_length, pad_token="<|endoftext|>",
                  split_special_tokens=False, tokenizer_class="Qwen2Tokenizer", unk_token=None)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


# Qwen3's added tokens in id order (151643...151668); True = "special" (dropped by skip_special_tokens).
QWEN3_ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False)]


# Qwen's pre-tokenizer: words, single digits, punctuation runs, newlines, spaces.
QWEN3_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                     r"|\s*[\r\n]+|\s+(?!\S)|\s+")


# Qwen3's chat template without tools, for the toy tokenizer_config.json (a test renders both with jinja2).
CHAT_TEMPLATE = r"""{%- if tools %}{{- raise_exception('this chat template has no tool support') }}{%- endif %}
{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}
{%- set ns = namespace(found=false, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}
{%- if not ns.found and message.role == 'user' and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
{%- set ns.found = true %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}{%- set content = message.content %}{%- set reasoning_content = '' %}
{%- if message.reasoning_content is defined and message.reasoning_content is not none %}{%- set reasoning_content = message.reasoning_content %}
{%- elif '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}
{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
{{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
{%- else %}{{- '<|im_start|>assistant\n' + content }}{%- endif %}{{- '<|im_end|>\n' }}
{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}"""


# ----------------------------------------------------------------------------- 7. the command line

def parse_config(config, argv=None, usage: str = ""):
    """The command line of every entry point here: `--key=value` options into a config dataclass.

    config: a dataclass, or {command: dataclass} for a script with commands (`python data.py stats FILE`); the
    key "" is the dataclass used when the first argument is no command (`python gppo.py --steps=5` beside
    `python gppo.py filter_code ...`). A value is converted to its field's type; a bool takes true/false/1/0, and
    a bare `--flag` means true. A dataclass with a class variable `positional = "name"` takes one bare argument as
    that field (`stats FILE`). Unknown keys, bad values and stray words raise SystemExit with a one-line message;
    -h / --help prints a usage line (`usage` replaces the one of a run without a command word), the dataclass's
    docstring if it has one, and every option with its default and the comment beside it; exit status 0.
    Returns the config (its __post_init__ checks combinations); with commands, its class says which one ran."""
    argv = sys.argv[1:] if argv is None else list(argv)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0].endswith(".py") else "SCRIPT"
    commands = config if isinstance(config, dict) else {"": config}
    command = argv[0] if argv and argv[0] in commands else ""
    argv = argv[1:] if command else argv
    if command not in commands:                  # a script whose every run names a command (data.py)
        if argv[:1] in (["-h"], ["--help"]):
            _print_help(script, commands, None, usage)
        raise SystemExit(f"error: python {script} needs a command first: {' | '.join(commands)} (--help for more)")
    cls = commands[command]
    positional, types, values = getattr(cls, "positional", None), {f.name: f.type for f in fields(cls)}, {}
    for arg in argv:
        if arg in ("-h", "--help"):
            _print_help(script, commands, command, usage)
        if not arg.startswith("--"):
            if positional is None or positional in values:
                raise SystemExit(f"error: argument {arg!r} is not of the form --key=value")
            key, raw = positional, arg
        else:
            key, _, raw = arg[2:].partition("=")
            if key in types and "=" not in arg:  # a bare --flag: true
                if _field_type(types[key]) is not bool:
                    raise SystemExit(f"error: --{key} needs a value: --{key}=VALUE")
                raw = "true"
        if key not in types:
            close = [k for k in types if k.split("_")[0] == key.split("_")[0]]
            raise SystemExit(f"error: unknown option --{key} for {cls.__name__}"
                             + (f" (did you mean {', '.join('--' + k for k in close)}?)" if close else ""))
        values[key] = _option_value(key, raw, _field_type(types[key]))
    return cls(**values)


def _option_value(key: str, raw: str, typ):
    if typ is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise SystemExit(f"error: --{key}={raw!r} is not true or false")
        return raw.lower() in ("true", "1")
    try:
        return typ(raw)
    except ValueError:
        raise SystemExit(f"error: --{key}={raw!r}: not a valid {typ.__name__}") from None


def _field_type(annotation):
    """int, float, str or bool from a field's annotation (a class, or its name when annotations are strings)."""
    typ = {"int": int, "float": float, "str": str, "bool": bool}.get(annotation, annotation)
    if typ not in (int, float, str, bool):
        raise TypeError(f"parse_config: option fields must be int, float, str or bool, not {annotation!r}")
    return typ


def _print_help(script: str, commands: dict, command, usage: str):
    """--help, then exit 0: with no command chosen (command None) the list of commands; else the usage line, the
    dataclass's own docstring if it has one, and its options."""
    if command is None:
        print(usage or f"usage: python {script} {'|'.join(commands)} [--key=value ...]   "
                       f"(python {script} COMMAND --help: its options)")
        print("\n".join(f"  {name:8s} {(cls.__doc__ or '').strip().splitlines()[0]}" for name, cls in commands.items()))
        raise SystemExit(0)
    cls, others = commands[command], "|".join(c for c in commands if c)
    positional = getattr(cls, "positional", None)
    words = ["usage: python", script, command or (f"[{others}]" if others else ""),
             positional.upper() if positional else "", "[--key=value ...]"]
    print(usage if usage and not command else " ".join(w for w in words if w))
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):   # written by hand, not dataclass's own
        print(inspect.cleandoc(cls.__doc__))
    print("\n".join(option_help(cls)))
    raise SystemExit(0)


def option_help(cls) -> list:
    """--help text of a config dataclass: every field with its default and the comment written beside it;
    a full-line comment above fields is a section heading. Read from the class's source, so the comments in
    the code are the documentation and cannot drift from it."""
    source = inspect.getsource(cls)
    comments = {tok.start[0]: tok.string.lstrip("#").strip() for tok in
                tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    defaults = {f.name: f.default for f in fields(cls)}
    lines, last = [], None
    for number, line in enumerate(source.splitlines(), 1):
        field = re.match(r"\s+(\w+)\s*:", line)
        if field and field.group(1) in defaults:
            last = f"  --{field.group(1)}={defaults[field.group(1)]!r}"
            lines.append(last.ljust(34) + "  " + comments.get(number, "") if number in comments else last)
        elif number in comments and line.strip().startswith("#"):
            indent = len(line) - len(line.lstrip())
            # a comment continued under the one beside a field: indented past the fields, or written `#   more`
            if last is not None and (indent > 8 or line.lstrip().startswith("#  ")):
                lines[-1] += " " + comments[number]
            else:                                     # a heading for the fields below it
                lines.append(comments[number])
                last = None
    return lines


@dataclass
class ToyConfig:
    """`python data.py toy`: the toy tokenizer and data sets as files (write_toy_datasets), in the formats the
    loaders read."""
    out: str = "out/toy"         # the directory written: tokenizer/, sft.jsonl, math_*.jsonl, code_*.jsonl
    seed: int = 0                # which problems
    n_sft_math: int = 12000      # addition conversations in sft.jsonl
    n_sft_code: int = 2000       # programming conversations in sft.jsonl
    wrong_fraction: float = 0.6  # as sft.py's toy data; 0 = only-correct traces (the paper's ablation)
    n_math_train: int = 2000     # math_train.jsonl problems
    n_math_test: int = 500       # math_test.jsonl problems
    n_code_train: int = 150      # code_train.jsonl problems (LiveCodeBench rows)
    n_code_test: int = 50        # code_test.jsonl problems
    vocab_size: int = 640        # the toy BPE tokenizer's vocabulary


def write_toy_datasets(out_dir: str, **sizes) -> dict:
    """Write the toy tokenizer (out_dir/tokenizer) and the toy data as JSONL in the formats the loaders read:
    sft.jsonl (messages), math_{train,test}.jsonl (problem/answer), code_{train,test}.jsonl (LiveCodeBench
    rows). `sizes` override ToyConfig's fields (seed, n_sft_math, ...). Returns {name: path}."""
    cfg = replace(ToyConfig(), out=out_dir, **sizes)
    os.makedirs(out_dir, exist_ok=True)
    paths = {"tokenizer": os.path.join(out_dir, "tokenizer")}
    save_tokenizer(build_toy_tokenizer(cfg.vocab_size), paths["tokenizer"])

    def write(name, records):
        paths[name] = os.path.join(out_dir, f"{name}.jsonl")
        with open(paths[name], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    conversations = toy_sft_conversations(cfg.n_sft_math, cfg.n_sft_code, cfg.seed, cfg.wrong_fraction)
    write("sft", ({"messages": c} for c in conversations))
    for split, n in (("train", cfg.n_math_train), ("test", cfg.n_math_test)):
        write(f"math_{split}", ({"id": p["id"], "problem": p["prompt"], "answer": p["answer"]}
                                for p in toy_math_problems(n, cfg.seed, split)))
    for split, n in (("train", cfg.n_code_train), ("test", cfg.n_code_test)):
        rows = []
        for p in toy_code_problems(n, cfg.seed, split):
            cases = [{"input": t["input"], "output": t["output"],
                      "testtype": "functional" if "fn_name" in t else "stdin"} for t in p["tests"]]
            fn = p["tests"][0].get("fn_name")
            rows.append(dict(question_id=p["id"], question_content=p["prompt"], starter_code="",
                             public_test_cases=json.dumps(cases[:3]), private_test_cases=json.dumps(cases[3:]),
                             metadata=json.dumps({"func_name": fn} if fn else {})))
        write(f"code_{split}", rows)
    return paths


@dataclass
class StatsConfig:
    """`python data.py stats FILE`: what a data file (.jsonl, .json or .parquet) holds, read as a stream."""
    positional: ClassVar[str] = "file"   # `stats FILE` is `stats --file=FILE`
    file: str = ""        # the data file
    kind: str = ""        # sft | responses | math | code; empty = guessed from the first row
    tokenizer: str = ""   # a tokenizer dir/file: token lengths and packing too
    row_tokens: int = 2048  # with a tokenizer: the packed row length whose fill is reported
    skip_bad_rows: bool = False  # skip rows that cannot be graded, counted in the report, instead of stopping


def _stats(cfg: StatsConfig) -> None:
    """Stream the file once (flat memory: per row only its lengths are kept) and print what it holds."""
    readers = {"sft": _sft_reader, "responses": _responses_reader, "math": _math_reader, "code": _code_reader}
    if cfg.kind and cfg.kind not in readers:
        raise SystemExit(f"error: --kind={cfg.kind!r}: use {', '.join(readers)} (or leave it empty to guess)")
    kind = cfg.kind or guess_kind(next(read_rows(cfg.file))[1])
    tok = load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None
    report = _new_report(cfg.file)
    records = _records(cfg.file, readers[kind](cfg.file, report), report, cfg.skip_bad_rows)
    lengths, trained, n_tests, functional, verdicts = array.array("q"), 0, array.array("q"), 0, {}
    pending = []  # SFT conversations waiting to be tokenized as one batch

    def tokenize_pending():
        nonlocal trained
        for ids, mask in encode_sft_dataset(tok, pending, max_len=10 ** 9)[0]:
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
            lengths.append(len(encode_prompt(tok, item["prompt"])))
    if pending:
        tokenize_pending()
    if kind == "code" and not n:
        raise DataError(f"{cfg.file}: no problem has at least min_tests=1 tests ({report})")
    print(f"{cfg.file}: {n} {kind} records; {report}")
    if kind == "code":
        print(f"tests per problem: min {min(n_tests)} mean {np.mean(n_tests):.1f} max {max(n_tests)}; "
              f"{sum(k >= 16 for k in n_tests)} problems with >= 16; {functional} functional")
    if kind == "responses":
        print(f"responses: {sum(verdicts.values())} ({verdicts.get(True, 0)} correct, {verdicts.get(False, 0)} wrong, "
              f"{verdicts.get(None, 0)} without a verdict)")
    if tok is not None and lengths:
        _print_lengths(lengths, trained if kind == "sft" else None, cfg.row_tokens)


def _print_lengths(lengths, trained: int | None, row_tokens: int) -> None:
    """Token lengths per record; for SFT conversations (`trained`: their loss-mask tokens) also how they pack."""
    if trained is not None:
        print(f"tokens: {sum(lengths)}, {trained / sum(lengths):.1%} trained")
    q = np.percentile(np.frombuffer(lengths, dtype=np.int64), [0, 50, 90, 99, 100])
    print("tokens per record: min {:.0f} median {:.0f} p90 {:.0f} p99 {:.0f} max {:.0f}".format(*q))
    if trained is not None:
        fits = [k for k in lengths if k <= row_tokens]
        rows = plan_packing(fits, row_tokens)
        print(f"packed into {len(rows)} rows of {row_tokens}: {sum(fits) / (len(rows) * row_tokens):.2%} real "
              f"tokens ({len(lengths) - len(fits)} records longer than a row left out)")


def guess_kind(rec: dict) -> str:
    """What a row is, from its keys: several responses (OpenR1's generations), code, SFT, or math."""
    if "generations" in rec:
        return "responses"
    if {"question_content", "input_output", "tests", "public_tests", "verification_info"} & set(rec) or \
            rec.get("ability") in ("code", "coding"):
        return "code"
    if "conversations" in rec or ("messages" in rec and "meta" not in rec and "answer" not in rec) or \
            any(question in rec and answer in rec for _, question, _, answer in _SFT_FIELDS):
        return "sft"
    return "math"


if __name__ == "__main__":
    cfg = parse_config({"toy": ToyConfig, "stats": StatsConfig})
    try:
        if isinstance(cfg, ToyConfig):
            sizes = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "out"}
            paths = write_toy_datasets(cfg.out, **sizes)
            for name, path in paths.items():
                print(f"{name:12s} {path}")
        else:
            _stats(cfg)
    except INPUT_ERRORS as e:  # bad input: one line, as the trainers print it; anything else keeps its traceback
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
