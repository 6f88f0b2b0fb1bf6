"""Data for Klear-Reasoner: Qwen3 chat format, JSONL loaders, packing, and built-in toy tasks.

Everything a trainer feeds the model passes through here, for real Qwen3 data and for the toy tasks alike.
Run:
    python data.py stats FILE [--tokenizer=DIR] [--row_tokens=N]   # what a JSONL file holds: records, lengths, packing
    python data.py toy --out=out/toy              # the toy tokenizer + sft/math/code JSONL files
The file, top to bottom:

1. Chat format, identical to Qwen3's chat template (tools left out):
       <|im_start|>system\n{system}<|im_end|>\n                      (only if given)
       <|im_start|>user\n{question}<|im_end|>\n
       <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n
   The generation prompt is `<|im_start|>assistant\n` (plus `<think>\n\n</think>\n\n` when thinking is off).
   Assistant turns before the last user turn lose their reasoning, as in the template. SFT trains on the
   final assistant turn only: its reasoning, answer and `<|im_end|>` (loss_mask = 1), nothing else.
2. Loaders (JSONL, one record a line; a missing or empty file, or any bad line, is an error naming file:line and
   field). Each returns Records: the list of records, plus .report (rows read, kept, dropped and why, formats
   seen), one line to print.
       SFT   {"messages": [{"role", "content"}]}  or  {"conversations": [{"from", "value"}], "system"?}
       math  {"problem"|"question"|"prompt", "answer"}       (AIME-style; a prompt may be a list of messages)
             {"problem", "solution"}                          (MATH: the answer is the solution's last \\boxed{})
             {"prompt": [messages], "reward_model": {"ground_truth"}}   (verl, Skywork-OR1: maybe several answers)
             {"messages", "meta": {"solution"}}
       code  LiveCodeBench {"question_content", "starter_code", "public_test_cases", "private_test_cases",
                            "metadata": {"func_name"}}
             APPS/TACO {"question", "starter_code", "input_output": {"inputs", "outputs", "fn_name"?}, "solutions"}
             verl {"prompt": [messages], "reward_model": {"ground_truth": APPS-style input_output, or tests}}
             {"prompt", "tests": [{"input", "output", "fn_name"?}], "solutions"?}
   Tests come out as {"input", "output"} (stdin) or {"input", "output", "fn_name"} (functional: one
   JSON argument per input line, JSON return value), the format reward.py's run_tests takes. Code problems
   with fewer than min_tests tests are dropped (counted); reference programs and a stronger model's pass
   rate, when the data has them, are kept for the code-prompt filter.
3. Packing: documents go into rows of `row_tokens` tokens by best-fit decreasing; each row carries
   position_ids that restart at 0 per document and document_ids (padding is its own document), so the
   model attends only within a document: mask[i, j] = (doc[i] == doc[j]) and (j <= i).
   PackedLoader shuffles rows by (seed, epoch), gives every rank the same number of rows per step
   (all-padding rows fill the last step), and resumes mid-epoch from state_dict().
4. Toy tasks (no download): multi-digit addition with a digit-by-digit `<think>` trace and a `\\boxed{}`
   answer (a share of the traces of 3-4 digit problems slip once and end wrong: the paper's "mixed" data),
   and small programming problems with 16+ stdin or functional tests and a ```python answer. A byte-level
   BPE tokenizer with Qwen3's pre-tokenizer and special tokens is trained on them in a second.

"""
import base64
import bisect
import contextlib
import io
import json
import math
import os
import pickle
import random
import re
import sys
import zlib
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import numpy as np
import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# ----------------------------------------------------------------------------- tokenizer

class DataError(ValueError):
    """Bad input data; the message names file:line and field."""


def special_token_ids(tok: Tokenizer) -> dict:
    """Ids of the chat-control tokens: im_start, im_end, endoftext (also the pad), think, end_think."""
    names = dict(im_start="<|im_start|>", im_end="<|im_end|>", endoftext="<|endoftext|>", think="<think>",
                 end_think="</think>")
    ids = {k: tok.token_to_id(v) for k, v in names.items()}
    missing = [names[k] for k, v in ids.items() if v is None]
    if missing:
        raise ValueError(f"tokenizer lacks the Qwen3 chat tokens {missing}; use a Qwen3 tokenizer or build_toy_tokenizer()")
    return ids


def load_tokenizer(path: str) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a directory holding tokenizer.json, or from the file itself."""
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(f"no tokenizer at {path!r}: expected a directory with tokenizer.json, or the file")
    tok = Tokenizer.from_file(file)
    special_token_ids(tok)  # fail now, not mid-training, if a chat token is missing
    return tok


def stop_token_ids(tok: Tokenizer) -> list:
    """Generation stops at <|im_end|> (end of the assistant turn) or <|endoftext|>."""
    ids = special_token_ids(tok)
    return [ids["im_end"], ids["endoftext"]]


# ----------------------------------------------------------------------------- chat format


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


def render_chat(messages, add_generation_prompt: bool = False, enable_thinking: bool = True) -> str:
    """The text Qwen3's chat template renders for these messages (no tools)."""
    return _render(messages, add_generation_prompt, enable_thinking)[0]


def _loss_mask(offsets, span) -> list:
    # a token is trained if any of its characters lies in the final assistant turn's span
    start, end = span
    return [int(e > start and s < end) for s, e in offsets]


def encode_chat(tok: Tokenizer, messages) -> tuple:
    """(input_ids, loss_mask) of the rendered conversation; loss_mask = 1 on the final assistant turn
    (think block, answer, <|im_end|>). The ids are those of tokenizing render_chat(messages) whole."""
    if messages[-1].get("role") != "assistant":
        raise ValueError("encode_chat needs a conversation that ends with an assistant turn")
    text, span = _render(messages, False, True)
    enc = tok.encode(text, add_special_tokens=False)
    return enc.ids, _loss_mask(enc.offsets, span)


def encode_prompt(tok: Tokenizer, messages_or_text, enable_thinking: bool = True) -> list:
    """Token ids of a prompt ending in the generation prompt `<|im_start|>assistant\\n`.
    Takes a user message as a string, or a list of messages."""
    messages = [{"role": "user", "content": messages_or_text}] if isinstance(messages_or_text, str) else messages_or_text
    return tok.encode(render_chat(messages, True, enable_thinking), add_special_tokens=False).ids


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

# ----------------------------------------------------------------------------- JSONL loaders


class Records(list):
    """What a loader returns: the records, as a plain list, plus `report`, a dict of what was read, kept and
    dropped and why, printable on one line: print(f"code data: {problems.report}")."""

    def __init__(self, items, report: dict):
        super().__init__(items)
        self.report = report


def _read_jsonl(path: str):
    """Yield (line_number, record) for every non-blank line. A missing file, an empty one, malformed JSON or
    text that is not UTF-8 is an error naming the file (and line)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such data file")
    n_records = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{n}: not UTF-8 text ({e.reason} at byte {e.start})") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(rec, dict):
                raise DataError(f"{path}:{n}: expected a JSON object, got {type(rec).__name__}")
            n_records += 1
            yield n, rec
    if not n_records:
        raise DataError(f"{path}: no records (the file is empty)")


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def _field(rec, key, types, where, name=None):
    """rec[key], checked against types; `where` is "file:line" and `name` the field's full path."""
    name = name or key
    if key not in rec or rec[key] is None:
        raise DataError(f"{where}: missing field '{name}'")
    if not isinstance(rec[key], types) or (isinstance(rec[key], bool) and bool not in _tuple(types)):
        want = " or ".join(t.__name__ for t in _tuple(types))
        raise DataError(f"{where}: field '{name}' must be {want}, got {type(rec[key]).__name__}")
    return rec[key]


def _json_field(rec, key, types, where, name=None):
    """Like _field, for a value that public sets store either as itself or as a JSON string of it."""
    value = _field(rec, key, (str, *_tuple(types)), where, name)
    if isinstance(value, str) and str not in _tuple(types):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise DataError(f"{where}: field '{name or key}' is not valid JSON") from None
        return _field({key: value}, key, types, where, name)
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


def _record_id(rec, path: str, n: int) -> str:
    """The row's own id (id, LiveCodeBench's question_id, APPS's problem_id, MATH-500's unique_id), else file:line."""
    pid = next((rec[k] for k in ("id", "question_id", "problem_id", "unique_id") if rec.get(k) is not None), None)
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


def load_sft_jsonl(path: str) -> Records:
    """Conversations (lists of {"role", "content"[, "reasoning_content"]}) from OpenAI `messages` or
    ShareGPT/OpenThoughts `conversations` (from: human/user/gpt/assistant/system; optional top-level
    `system`). Each must end with an assistant turn, the one SFT learns."""
    conversations, formats = [], {}
    for n, rec in _read_jsonl(path):
        where = f"{path}:{n}"
        if "messages" in rec:
            msgs, fmt = _messages(_field(rec, "messages", list, where), where, "messages"), "messages"
        elif "conversations" in rec:
            msgs = _messages(_field(rec, "conversations", list, where), where, "conversations", "from", "value")
            fmt = "conversations"
            if rec.get("system"):
                msgs.insert(0, {"role": "system", "content": _field(rec, "system", str, where)})
        else:
            raise DataError(f"{where}: missing field 'messages' (or 'conversations'); keys are {sorted(rec)}")
        if not msgs or msgs[-1]["role"] != "assistant":
            raise DataError(f"{where}: field 'messages' must end with an assistant turn to learn from")
        conversations.append(msgs)
        formats[fmt] = formats.get(fmt, 0) + 1
    return Records(conversations, dict(file=path, rows=len(conversations), kept=len(conversations), formats=formats))

# Math. Every row gives a prompt and its acceptable answers (strings for math-verify's gold side).


def _answer_text(value, where, name) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field '{name}' must be str or a number, got {type(value).__name__}")
    if not str(value).strip():
        raise DataError(f"{where}: field '{name}' is empty")
    return str(value)


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
        raise DataError(f"{where}: field '{name}' is an empty list")
    return [_answer_text(a, where, f"{name}[{i}]") for i, a in enumerate(truth)]


def _math_answer(rec, where):
    """(format, acceptable answers): `answer`, else verl's `reward_model.ground_truth`, else the last
    \\boxed{} of `solution` (MATH)."""
    if rec.get("answer") is not None:
        return "answer", [_answer_text(rec["answer"], where, "answer")]
    if "reward_model" in rec:
        return "verl ground_truth", _ground_truth_answers(rec, where)
    if rec.get("solution") is not None:
        answer = _last_boxed(_field(rec, "solution", str, where))
        if answer is None:
            raise DataError(f"{where}: field 'solution' has no complete \\boxed{{...}} answer, and no 'answer'")
        return "MATH solution", [_answer_text(answer.strip(), where, "solution's \\boxed{}")]
    raise DataError(f"{where}: missing field 'answer' (or 'reward_model.ground_truth', or a \\boxed{{}} 'solution')")


def load_math_jsonl(path: str) -> Records:
    """Math problems {id, prompt, answer[, answers]}. The prompt is `problem`, `question` or `prompt` (a string,
    or a list of messages); the answer comes from `answer` (numbers become strings), verl's
    `reward_model.ground_truth`, or the last `\\boxed{}` of a MATH `solution`; or the row is `messages` +
    `meta.solution`. `answers` (all acceptable answers, answer = answers[0]) is there only when a row gives
    more than one (Skywork-OR1's lists): a response is right if it matches any of them."""
    problems, formats = [], {}
    for n, rec in _read_jsonl(path):
        where = f"{path}:{n}"
        key = next((k for k in ("problem", "question", "prompt") if k in rec), None)
        if key is not None:
            prompt = _prompt(rec, key, where)
            fmt, answers = _math_answer(rec, where)
        elif "messages" in rec:
            prompt = [m for m in _messages(_field(rec, "messages", list, where), where, "messages")
                      if m["role"] != "assistant"]
            fmt = "messages+meta.solution"
            answers = [_answer_text(_field(_field(rec, "meta", dict, where), "solution", (str, int, float), where,
                                           "meta.solution"), where, "meta.solution")]
        else:
            raise DataError(f"{where}: missing field 'problem' (or 'question', 'prompt', 'messages'); keys are {sorted(rec)}")
        problem = dict(id=_record_id(rec, path, n), prompt=prompt, answer=answers[0])
        if len(answers) > 1:
            problem["answers"] = answers
        problems.append(problem)
        formats[fmt] = formats.get(fmt, 0) + 1
    return Records(problems, dict(file=path, rows=len(problems), kept=len(problems), formats=formats))

# Code. Each format gives (prompt, tests, extra fields); tests come out in reward.py's format.


def _tests_from_cases(cases, where, field, func_name=None) -> list:
    """[{input, output, testtype?: stdin|functional, fn_name?}] (LiveCodeBench, plain) as tests; a functional
    test without its own fn_name takes func_name (LiveCodeBench's metadata.func_name)."""
    tests = []
    for i, t in enumerate(cases):
        name = f"{field}[{i}]"
        if not isinstance(t, dict):
            raise DataError(f"{where}: field '{name}' must be an object, got {type(t).__name__}")
        test = {"input": _field(t, "input", str, where, name + ".input"),
                "output": _field(t, "output", str, where, name + ".output")}
        kind = t.get("testtype", "functional" if t.get("fn_name") else "stdin")
        if kind == "functional":
            fn = t.get("fn_name") or func_name
            if not isinstance(fn, str) or not fn:
                raise DataError(f"{where}: field 'metadata.func_name' is needed by functional test '{name}'")
            test["fn_name"] = fn
        elif kind != "stdin":
            raise DataError(f"{where}: field '{name}.testtype' is {kind!r}; use stdin or functional")
        tests.append(test)
    return tests


def _stdin_text(value, where, name) -> str:
    """APPS/TACO stdin data: a string, or a list of lines (joined by newlines, as their testing_util does)."""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' must be a string or a list of lines, got {type(value).__name__}")
    return value


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
        tests.append({"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(y), "fn_name": fn})
    return tests


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # plain data only: a pickle can never name code to run
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from test data")


def _test_cases(raw, where, field, func_name=None) -> list:
    """Tests as stored: a list of cases (LiveCodeBench, plain) or an APPS-style {"inputs", "outputs"} object;
    either one as itself, as JSON text, or as base64(zlib(pickle(JSON text))) (LiveCodeBench's private tests)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            try:
                raw = json.loads(_NoGlobalsUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(raw)))).load())
            except Exception as e:
                raise DataError(f"{where}: field '{field}' is neither JSON nor LiveCodeBench's compressed form ({e})") from None
    if isinstance(raw, dict):
        return _tests_from_io(raw, where, field)
    if not isinstance(raw, list):
        raise DataError(f"{where}: field '{field}' must be a list of tests, got {type(raw).__name__}")
    return _tests_from_cases(raw, where, field, func_name)


def _code_question(rec, key, where) -> str:
    """The question, plus the starter code (if any) in a ```python block."""
    prompt = _field(rec, key, str, where)
    starter = rec.get("starter_code") or ""
    if not isinstance(starter, str):
        raise DataError(f"{where}: field 'starter_code' must be str, got {type(starter).__name__}")
    return prompt + (f"\n\nUse this starter code:\n```python\n{starter}\n```" if starter.strip() else "")


def _livecodebench_row(rec, where):
    meta = _json_field(rec, "metadata", dict, where) if rec.get("metadata") else {}
    tests = []
    for key in ("public_test_cases", "private_test_cases"):
        if rec.get(key):
            tests += _test_cases(rec[key], where, key, meta.get("func_name"))
    extra = {"contest_date": str(rec["contest_date"])} if rec.get("contest_date") else {}
    return _code_question(rec, "question_content", where), tests, extra


def _apps_row(rec, where):
    tests = []  # APPS rows without tests hold "" (min_tests then drops the row)
    if rec["input_output"]:
        tests = _tests_from_io(_json_field(rec, "input_output", dict, where), where, "input_output")
    return _code_question(rec, "question", where), tests, {}


def _verl_code_row(rec, where):
    name = "reward_model.ground_truth"
    truth = _field(_field(rec, "reward_model", dict, where), "ground_truth", (str, dict, list), where, name)
    return _prompt(rec, "prompt", where), _test_cases(truth, where, name), {}


def _plain_code_row(rec, where):
    return _prompt(rec, "prompt", where), _test_cases(_field(rec, "tests", (list, str), where), where, "tests"), {}


# (name, key that marks the format, reader), tried in order
_CODE_FORMATS = [("livecodebench", "question_content", _livecodebench_row), ("apps/taco", "input_output", _apps_row),
                 ("verl", "reward_model", _verl_code_row), ("tests", "tests", _plain_code_row)]


def _solutions(rec, where) -> list:
    """Reference programs: APPS/TACO `solutions`, a list of strings or a JSON string of one ("" when none)."""
    if not rec.get("solutions"):
        return []
    solutions = _json_field(rec, "solutions", list, where)
    for i, s in enumerate(solutions):
        if not isinstance(s, str):
            raise DataError(f"{where}: field 'solutions[{i}]' must be a program (str), got {type(s).__name__}")
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


def load_code_jsonl(path: str, min_tests: int = 1, pass_rate_field: str = "") -> Records:
    """Code problems {id, line, prompt, tests[, solutions][, pass_rate][, contest_date]} (line: of the row in the
    file) from LiveCodeBench, APPS/TACO,
    verl (Skywork-OR1) or {prompt, tests} rows. The prompt is the question plus its starter code in a ```python
    block (verl: the `prompt` messages as they are).
    - Problems with fewer than `min_tests` tests are dropped and counted in the report (the paper keeps only
      those with >= 16).
    - `solutions`: the row's reference programs, when it has any (APPS/TACO).
    - `pass_rate`: with pass_rate_field="FIELD" (dotted path, a rate in [0, 1]) or "FIELD/N" (a count out of
      N samples), a stronger model's pass rate, e.g. "pass_rate", or Skywork-OR1's correct-of-16 counts
      "extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-32B/16". A row without that field is an error."""
    problems, formats, dropped = [], {}, 0
    for n, rec in _read_jsonl(path):
        where = f"{path}:{n}"
        fmt, read = next(((name, read) for name, key, read in _CODE_FORMATS if key in rec), (None, None))
        if read is None:
            raise DataError(f"{where}: missing field 'tests' (or 'question_content' for LiveCodeBench, 'input_output' "
                            f"for APPS/TACO, 'reward_model.ground_truth' for verl); keys are {sorted(rec)}")
        prompt, tests, extra = read(rec, where)
        formats[fmt] = formats.get(fmt, 0) + 1
        solutions = _solutions(rec, where)
        pass_rate = _pass_rate(rec, pass_rate_field, where) if pass_rate_field else None
        if len(tests) < min_tests:
            dropped += 1
            continue
        problem = dict(id=_record_id(rec, path, n), line=n, prompt=prompt, tests=tests, **extra)
        if solutions:
            problem["solutions"] = solutions
        if pass_rate_field:
            problem["pass_rate"] = pass_rate
        problems.append(problem)
    report = dict(file=path, rows=len(problems) + dropped, kept=len(problems), min_tests=min_tests,
                  dropped_few_tests=dropped, with_solutions=sum("solutions" in p for p in problems), formats=formats)
    if not problems:
        raise DataError(f"{path}: no problem has at least min_tests={min_tests} tests ({report})")
    return Records(problems, report)

# ----------------------------------------------------------------------------- packing


def plan_packing(lengths, row_tokens: int) -> list:
    """Best-fit decreasing: longest document first, into the row whose free space fits it most tightly.
    Returns rows as lists of document indices. Deterministic (ties broken by index)."""
    too_long = [i for i, n in enumerate(lengths) if n > row_tokens or n <= 0]
    if too_long:
        i = too_long[0]
        raise ValueError(f"{len(too_long)} documents do not fit a row (e.g. #{i}: {lengths[i]} tokens, row_tokens="
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
    batch = dict(input_ids=torch.from_numpy(ids), loss_mask=torch.from_numpy(mask),
                 position_ids=torch.from_numpy(pos), document_ids=torch.from_numpy(doc))
    return [{k: v[b] for k, v in batch.items()} for b in range(B)]


def pack_examples(examples, row_tokens: int, pad_id: int) -> list:
    """Pack (input_ids, loss_mask) pairs into rows: a list of dicts of (row_tokens,) tensors input_ids,
    loss_mask (bool), position_ids (restart at 0 per document) and document_ids (0, 1, ... per row)."""
    return _build_rows(examples, plan_packing([len(x) for x, _ in examples], row_tokens), row_tokens, pad_id)


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
        return _build_rows(self.examples, [None if r is None else self.rows[r] for r in picked], self.row_tokens, self.pad_id)

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
                raise ValueError(f"cannot resume: the checkpoint's data loader had {key}={state[key]}, now "
                                 f"{getattr(self, key)}; resume with the same data, seed and batch settings")
        self.epoch, self.step = int(state["epoch"]), int(state["step"])

# ----------------------------------------------------------------------------- toy tasks


def _split_of(key: str, test_every: int) -> str:
    """A problem's split from a hash of its content, so train and test never share a problem."""
    return "test" if zlib.crc32(key.encode()) % test_every == 0 else "train"


def _number(rng, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)


def toy_math_problems(n: int, seed: int | str = 0, split: str = "train", min_digits: int = 1, max_digits: int = 4) -> list:
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
        raise ValueError(f"only {len(problems)} distinct {split} problems with {min_digits}-{max_digits} digits; ask for fewer")
    return problems


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


def toy_math_sft_examples(n: int, seed: int = 0, wrong_fraction: float = 0.6, min_digits: int = 1,
                          max_digits: int = 4) -> list:
    """n SFT conversations on train-split problems: user question, assistant `<think>` trace + `\\boxed{}`.
    On hard problems (an operand with >= 3 digits) a wrong_fraction of the traces slip once in a random
    column and end in a wrong answer (the paper's "mixed" data); wrong_fraction=0 gives only-correct data."""
    rng = random.Random(f"toy-math-sft-{seed}")
    conversations = []
    for p in toy_math_problems(n, f"sft-{seed}", "train", min_digits, max_digits):  # not the RL prompts' stream
        a, b = map(int, p["id"].split("-")[1:])
        slip_column = slip = None
        if max(len(str(a)), len(str(b))) >= 3 and rng.random() < wrong_fraction:
            slip_column = rng.randrange(max(len(str(a)), len(str(b))))
            s = int(addition_trace(a, b)[0].split("\n")[slip_column].split("=")[1])
            slip = -1 if s == 19 else (1 if s == 0 else rng.choice((-1, 1)))  # keep the sum in 0..19
        trace, answer = addition_trace(a, b, slip_column, slip or 0)
        conversations.append([{"role": "user", "content": p["prompt"]},
                              {"role": "assistant", "content": f"<think>\n{trace}\n</think>\n\n\\boxed{{{answer}}}"}])
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
    CodeFamily("max_plus", "ints", [(c,) for c in range(20)], "Read a line of integers and print the largest one plus {0}.",
               "Take the max of the numbers and add {0}.", "xs = list(map(int, input().split()))\nprint(max(xs) + {0})"),
    CodeFamily("repeat", "word", [(k,) for k in range(2, 10)], "Read a word and print it {0} times in a row, with no spaces.",
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
               "Write a function count_above(nums) that returns how many numbers in the list nums are greater than {0}.",
               "Count the numbers above {0}.", "def count_above(nums):\n    return sum(1 for x in nums if x > {0})"),
    CodeFamily("clip", "fn:int", [(m,) for m in range(1, 31)],
               "Write a function clip(x) that returns x if x is at most {0}, and {0} otherwise.", "That is min(x, {0}).",
               "def clip(x):\n    return min(x, {0})"),
]


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
            tests.append({"input": json.dumps(arg), "output": json.dumps(out), "fn_name": family.name})
        else:
            tests.append({"input": (" ".join(map(str, arg)) if kind == "ints" else str(arg)) + "\n", "output": out})
    return dict(id=pid, prompt=family.question.format(*params), tests=tests, plan=family.plan.format(*params),
                solutions=[solution])


def _code_pools(split: str) -> list:
    """Per family, the (family, params) pairs of one split (20% of all problems are held out as "test")."""
    return [[(f, p) for p in f.params if _split_of(f"{f.name}-" + "-".join(map(str, p)), 5) == split] for f in _CODE_FAMILIES]


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


def toy_code_sft_examples(n: int, seed: int = 0) -> list:
    """n SFT conversations on train-split problems (a uniform family, then a uniform problem of it, with
    replacement): the question, then a `<think>` plan and the reference program in a ```python block."""
    rng, pools = random.Random(f"toy-code-sft-{seed}"), [p for p in _code_pools("train") if p]
    conversations = []
    for _ in range(n):
        p = _code_problem(*rng.choice(rng.choice(pools)), num_tests=0)
        answer = f"<think>\n{p['plan']}\n</think>\n\n```python\n{p['solutions'][0]}\n```"
        conversations.append([{"role": "user", "content": p["prompt"]}, {"role": "assistant", "content": answer}])
    return conversations


def toy_sft_conversations(n_math: int, n_code: int, seed: int = 0, wrong_fraction: float = 0.6) -> list:
    """The toy SFT mix: n_math addition and n_code programming conversations, shuffled by seed."""
    conversations = toy_math_sft_examples(n_math, seed, wrong_fraction) + toy_code_sft_examples(n_code, seed)
    random.Random(f"toy-sft-mix-{seed}").shuffle(conversations)
    return conversations


# ----------------------------------------------------------------------------- the toy tokenizer
# A byte-level BPE shaped like Qwen3's, trained in-process on the toy conversations above (no download).

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


# ----------------------------------------------------------------------------- command line

@dataclass
class ToyConfig:
    """`python data.py toy`: sizes of the toy datasets written by write_toy_datasets."""
    out: str = "out/toy"
    seed: int = 0
    n_sft_math: int = 12000
    n_sft_code: int = 2000
    wrong_fraction: float = 0.6  # as sft.py's toy data; 0 = only-correct traces (the paper's ablation)
    n_math_train: int = 2000
    n_math_test: int = 500
    n_code_train: int = 150
    n_code_test: int = 50
    vocab_size: int = 640


@dataclass
class StatsConfig:
    """`python data.py stats FILE`: what a JSONL file holds."""
    file: str = ""
    tokenizer: str = ""   # a tokenizer dir/file: token lengths and packing too
    row_tokens: int = 2048


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

    write("sft", ({"messages": c} for c in toy_sft_conversations(cfg.n_sft_math, cfg.n_sft_code, cfg.seed, cfg.wrong_fraction)))
    for split, n in (("train", cfg.n_math_train), ("test", cfg.n_math_test)):
        write(f"math_{split}", ({"id": p["id"], "problem": p["prompt"], "answer": p["answer"]}
                                for p in toy_math_problems(n, cfg.seed, split)))
    for split, n in (("train", cfg.n_code_train), ("test", cfg.n_code_test)):
        rows = []
        for p in toy_code_problems(n, cfg.seed, split):
            cases = [{"input": t["input"], "output": t["output"], "testtype": "functional" if "fn_name" in t else "stdin"}
                     for t in p["tests"]]
            fn = p["tests"][0].get("fn_name")
            rows.append(dict(question_id=p["id"], question_content=p["prompt"], starter_code="",
                             public_test_cases=json.dumps(cases[:3]), private_test_cases=json.dumps(cases[3:]),
                             metadata=json.dumps({"func_name": fn} if fn else {})))
        write(f"code_{split}", rows)
    return paths


def _parse(cls, argv):
    """--key=value arguments into a config dataclass; a bare argument fills the first field."""
    kinds, values = {f.name: f.type for f in fields(cls)}, {}
    for arg in argv:
        if not arg.startswith("--"):
            key, raw = fields(cls)[0].name, arg
        elif "=" in arg:
            key, raw = arg[2:].split("=", 1)
        else:
            raise SystemExit(f"error: {arg!r} is not of the form --key=value")
        if key not in kinds:
            raise SystemExit(f"error: unknown option --{key}; options: {', '.join(kinds)}")
        kind = {"int": int, "float": float, "str": str}.get(kinds[key], kinds[key])
        try:
            values[key] = kind(raw)
        except ValueError:
            raise SystemExit(f"error: --{key}={raw!r} is not a valid {kind.__name__}") from None
    return cls(**values)


def _stats(cfg: StatsConfig) -> None:
    first = next(_read_jsonl(cfg.file))[1]
    kind = ("sft" if "conversations" in first or ("messages" in first and "meta" not in first) else
            "code" if {"question_content", "input_output", "tests"} & set(first) or first.get("ability") == "code" else
            "math")
    records = {"sft": load_sft_jsonl, "math": load_math_jsonl, "code": load_code_jsonl}[kind](cfg.file)
    print(f"{cfg.file}: {len(records)} {kind} records; {records.report}")
    if kind == "code":
        n_tests = [len(p["tests"]) for p in records]
        print(f"tests per problem: min {min(n_tests)} mean {np.mean(n_tests):.1f} max {max(n_tests)}; "
              f"{sum(n >= 16 for n in n_tests)} problems with >= 16; {sum('fn_name' in p['tests'][0] for p in records)} functional")
    if cfg.tokenizer:
        tok = load_tokenizer(cfg.tokenizer)
        if kind == "sft":
            examples = encode_sft_dataset(tok, records, max_len=10 ** 9)[0]
            lengths = [len(x) for x, _ in examples]
            print(f"tokens: {sum(lengths)}, {sum(int(m.sum()) for _, m in examples) / sum(lengths):.1%} trained")
        else:
            lengths = [len(encode_prompt(tok, p["prompt"])) for p in records]
        q = np.percentile(lengths, [0, 50, 90, 99, 100])
        print("tokens per record: min {:.0f} median {:.0f} p90 {:.0f} p99 {:.0f} max {:.0f}".format(*q))
        if kind == "sft":
            fits = [n for n in lengths if n <= cfg.row_tokens]
            rows = plan_packing(fits, cfg.row_tokens)
            print(f"packed into {len(rows)} rows of {cfg.row_tokens}: {sum(fits) / (len(rows) * cfg.row_tokens):.2%} real "
                  f"tokens ({len(lengths) - len(fits)} records longer than a row left out)")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("toy", "stats"):
        print("usage:" + __doc__.split("Run:")[1].split("The file, top to bottom:")[0].rstrip())
        raise SystemExit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    if sys.argv[1] == "toy":
        cfg = _parse(ToyConfig, sys.argv[2:])
        paths = write_toy_datasets(cfg.out, **{f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "out"})
        for name, path in paths.items():
            print(f"{name:12s} {path}")
    else:
        _stats(_parse(StatsConfig, sys.argv[2:]))
