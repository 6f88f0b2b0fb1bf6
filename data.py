"""Data for Klear-Reasoner: Qwen3's chat format, the loaders of public data sets as published, and
packing.
1. Chat format, identical to Qwen3's chat template (tools left out; parts/chat_template.py renders it);
   SFT trains on the final assistant turn only:
       <|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n
2. Loaders: SFT conversations, responses with verdicts, math problems, code problems with tests, from JSON lines, a
   .json array or .parquet as published (the adapters: parts/formats.py; the sets: docs/data_formats.md).
3. Packing: SFT's documents go into rows of row_tokens tokens by best-fit decreasing
   (parts/packing.py); positions restart per document and attention never crosses one:
       mask[i, j] = (doc[i] == doc[j]) and (j <= i)
   RL packs in order instead (here): a group's prompt once per row, its responses attending to it.
Bad input is an error naming file:row and field.
    python tools/data_stats.py FILE          # what a data file holds: records, lengths, packing (streamed)
    python tools/toy.py --task=countdown     # the toy's tokenizer and data files (the last section)
"""

import datetime
import os

import numpy as np
from tokenizers import Tokenizer

from parts import formats
from parts.chat_template import render, render_chat
from parts.formats import INPUT_ERRORS, DataError, Records, hub_hint
from parts.packing import PackingError

# what the tools and tests reach through data.py as well
from parts.formats import UngradableRow, copy_rows, guess_kind, read_rows  # noqa: F401


def read(option: str, load, *args, **kwargs):
    """load(*args, **kwargs) for an entry point: what it raises for bad input (INPUT_ERRORS: a bad
    data file, a missing path; a checkpoint's CheckpointError; a packed loader's PackingError)
    becomes one InputError naming the option, which the entry point prints as one line (exit status
    2). Anything else is a bug and keeps its traceback."""
    # here, not at the top: reading data needs no torch
    from parts.hf_checkpoint import CheckpointError

    try:
        return load(*args, **kwargs)
    except (*INPUT_ERRORS, CheckpointError, PackingError) as e:
        raise input_error(f"{option}: {e}") from None


def input_error(message: str) -> Exception:
    """The entry points' one exception for bad input (parts/trainer.InputError: one line, exit
    status 2)."""
    from parts.trainer import InputError  # here, not at the top: reading data needs no torch

    return InputError(message)


# ----------------------------------------------------------------------------- 1. the chat format


def load_tokenizer(path: str) -> Tokenizer:
    """A `tokenizers.Tokenizer` from a directory holding tokenizer.json, or from the file itself."""
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(
            f"no tokenizer at {path!r}: expected a directory with tokenizer.json, or the file"
            + hub_hint(path, "model")
        )
    try:
        tok = Tokenizer.from_file(file)
    # noqa: BLE001 (tokenizers raises a bare Exception for a file it cannot parse)
    except Exception as e:
        raise DataError(
            f"{file}: not a tokenizer.json the tokenizers library reads ({e})"
        ) from None
    special_token_ids(tok)  # fail now, not mid-training, if a chat token is missing
    return tok


def stop_token_ids(tok: Tokenizer) -> list:
    """Generation stops at <|im_end|> (end of the assistant turn) or <|endoftext|>."""
    ids = special_token_ids(tok)
    return [ids["im_end"], ids["endoftext"]]


def special_token_ids(tok: Tokenizer) -> dict:
    """Ids of the chat-control tokens: im_start, im_end, endoftext (also the pad), think,
    end_think."""
    names = dict(
        im_start="<|im_start|>",
        im_end="<|im_end|>",
        endoftext="<|endoftext|>",
        think="<think>",
        end_think="</think>",
    )
    ids = {k: tok.token_to_id(v) for k, v in names.items()}
    missing = [names[k] for k, v in ids.items() if v is None]
    if missing:
        raise DataError(
            f"tokenizer lacks the Qwen3 chat tokens {missing}; use a Qwen3 tokenizer or the toy's "
            "(python tools/toy.py)"
        )
    return ids


def encode_sft_dataset(tok: Tokenizer, conversations, max_len: int, overlong: str = "truncate"):
    """Tokenize conversations for SFT. Returns (examples, report): examples are (input_ids int32,
    loss_mask bool) numpy pairs; a conversation longer than max_len tokens is cut to its first
    max_len tokens ("truncate"), left out ("drop"), or raises ("error"); report counts each case
    (print it: nothing vanishes silently)."""
    if overlong not in ("truncate", "drop", "error"):
        raise ValueError(f"overlong={overlong!r}: use truncate, drop or error")
    rendered = [render(c) for c in conversations]
    encodings = tok.encode_batch([text for text, _ in rendered], add_special_tokens=False)
    examples = []
    report = dict(
        conversations=len(conversations),
        kept=0,
        truncated=0,
        dropped=0,
        max_len=max_len,
        overlong=overlong,
    )
    for k, (enc, (_, span)) in enumerate(zip(encodings, rendered)):
        # same rule as _loss_mask, vectorised
        offsets = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
        ids = np.asarray(enc.ids, dtype=np.int32)
        mask = (offsets[:, 1] > span[0]) & (offsets[:, 0] < span[1])
        if len(ids) > max_len:
            if overlong == "error":
                raise DataError(
                    f"conversation {k} has {len(ids)} tokens > max_len={max_len} (overlong=error)"
                )
            # nothing left to learn from: drop, counted
            if overlong == "drop" or not mask[:max_len].any():
                report["dropped"] += 1
                continue
            ids = ids[:max_len]
            mask = mask[:max_len]
            report["truncated"] += 1
        report["kept"] += 1
        examples.append((ids, mask))
    return examples, report


def encode_prompts(tok: Tokenizer, problems, max_prompt_len: int, overlong: str = "drop"):
    """Add "prompt_ids" (with the generation prompt) to each problem. Longer prompts are
    left-truncated ("truncate", as the paper's RL does), left out ("drop") or raise ("error").
    Returns (problems, report)."""
    if overlong not in ("truncate", "drop", "error"):
        raise ValueError(f"overlong={overlong!r}: use truncate, drop or error")
    kept = []
    report = dict(
        prompts=len(problems), kept=0, truncated=0, dropped=0, max_prompt_len=max_prompt_len
    )
    for p in problems:
        ids = encode_prompt(tok, p["prompt"])
        if len(ids) > max_prompt_len:
            if overlong == "error":
                raise DataError(
                    f"prompt {p['id']} has {len(ids)} tokens > max_prompt_len={max_prompt_len}"
                )
            if overlong == "drop":
                report["dropped"] += 1
                continue
            ids = ids[-max_prompt_len:]
            report["truncated"] += 1
        kept.append({**p, "prompt_ids": ids})
        report["kept"] += 1
    return kept, report


def encode_prompt(tok: Tokenizer, messages_or_text, enable_thinking: bool = True) -> list:
    """Token ids of a prompt ending in the generation prompt `<|im_start|>assistant\\n`.
    Takes a user message as a string, or a list of messages."""
    return tok.encode(
        render_chat(chat_messages(messages_or_text), True, enable_thinking),
        add_special_tokens=False,
    ).ids


def chat_messages(messages_or_text) -> list:
    """A prompt as chat messages: a string is one user turn; a list of messages stays as it is."""
    return (
        [{"role": "user", "content": messages_or_text}]
        if isinstance(messages_or_text, str)
        else messages_or_text
    )


def encode_chat(tok: Tokenizer, messages) -> tuple:
    """(input_ids, loss_mask) of the rendered conversation; loss_mask = 1 on the final assistant
    turn
    (think block, answer, <|im_end|>). The ids are those of tokenizing render_chat(messages) whole."""
    if messages[-1].get("role") != "assistant":
        raise ValueError("encode_chat needs a conversation that ends with an assistant turn")
    text, span = render(messages)
    enc = tok.encode(text, add_special_tokens=False)
    return enc.ids, _loss_mask(enc.offsets, span)


def _loss_mask(offsets, span) -> list:
    # a token is trained if any of its characters lies in the final assistant turn's span
    start, end = span
    return [int(e > start and s < end) for s, e in offsets]


# ----------------------------------------------------------------------------- 2. the loaders
# Each reads JSON lines, a .json array or .parquet (they keep their `_jsonl` names); every format is
# in docs/data_formats.md. Each returns Records: the records, and .report (read, kept, dropped and
# why).


def load_sft_jsonl(path: str, skip_bad_rows: bool = False) -> Records:
    """Conversations (lists of {"role", "content"[, "reasoning_content"]}) from the SFT formats
    (docs/data_formats.md) (ShareGPT's `from` may be human/user/gpt/assistant/system), each ending
    with the assistant turn SFT learns. OpenThoughts' reasoning markers become `<think>`, and a
    system prompt that asks for those markers is dropped (counted)."""
    return formats.load("sft", path, skip_bad_rows)


def load_responses(path: str, skip_bad_rows: bool = False) -> Records:
    """Prompts with their teacher responses: {"id", "prompt" (a string, or a list of messages),
    "answer" (the math answer to verify against, or None), "source" (the row's format), "responses":
    [{"content", "correct"}]}, plus "tests" where a code row carries them. `content` is the
    assistant turn in Qwen3's format (`<think>\\n{reasoning}\\n</think>\\n\\n{answer}`); `correct`
    is the source's own verdict, or None.
    - OpenR1-Math-220k: every one of `generations`, correct = `correctness_math_verify`; a generation that never
      closes its reasoning (cut at the length limit) is left out and counted ("unfinished_responses").
    - every SFT row load_sft_jsonl reads: its final assistant turn, correct None.
    A row with Countdown's {target, nums} also gives "numbers", "target" and "kind": "countdown"
    (the task its responses are verified on). A placeholder answer (`proof`, `notfound`) becomes
    None, counted ("answers_not_gradable")."""
    return formats.load("responses", path, skip_bad_rows)


def load_math_jsonl(path: str, skip_bad_rows: bool = False) -> Records:
    """Math problems {id, prompt, answer[, answers]} from the math formats (docs/data_formats.md;
    `messages` + `meta.solution`: the authors' AIME files; `messages` + `answer`: their HMMT file);
    a numeric answer becomes a string. `answers` (all acceptable answers, answer = answers[0]) is
    there only when a row gives more than one (Skywork-OR1's lists): a response is right if it
    matches any of them. A row whose answer cannot be graded (empty, a placeholder such as
    NuminaMath-1.5's "proof" / "notfound", question_type "proof") is an UngradableRow. A Countdown
    row (TinyZero's {target, nums}) is {id, prompt, numbers, target, kind: "countdown"}: reward.py
    grades it with Countdown's checker, not math-verify."""
    return formats.load("math", path, skip_bad_rows)


def load_code_jsonl(
    path: str, min_tests: int = 1, pass_rate_field: str = "", skip_bad_rows: bool = False
) -> Records:
    """Code problems {id, line, prompt, tests[, solutions][, pass_rate][, contest_date]} (line: n of
    the row in the file) from the code formats (docs/data_formats.md). The prompt is the question
    plus its starter code in a ```python block (verl: the `prompt` messages as they are).
    - Problems with fewer than `min_tests` tests are dropped and counted in the report (the paper keeps only
      those with >= 16). A row whose tests cannot be run (all its asserts unconvertible, another language than
      Python, pytest files) is an UngradableRow.
    - `solutions`: the row's reference programs, when it has any.
    - `pass_rate`: with pass_rate_field="FIELD" (dotted path, a rate in [0, 1]) or "FIELD/N" (a count out of
      N samples), a stronger model's pass rate, e.g. "pass_rate", or Skywork-OR1's correct-of-16 counts
      "extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-32B/16". A row without that field is an error."""
    problems = formats.load(
        "code", path, skip_bad_rows, min_tests=min_tests, pass_rate_field=pass_rate_field
    )
    if not problems:
        raise DataError(
            f"{path}: no problem has at least min_tests={min_tests} tests ({problems.report})"
        )
    return problems


def in_date_window(problems: list, path: str, date_from: str, date_to: str) -> list:
    """Code problems with date_from <= contest_date < date_to (YYYY-MM-DD): LiveCodeBench's versions
    are windows."""
    kept = []
    for p in problems:
        if "contest_date" not in p:
            raise DataError(
                f"{path}: problem {p['id']} has no contest_date, but --date_from/--date_to was given"
            )
        try:
            day = datetime.date.fromisoformat(p["contest_date"][:10]).isoformat()
        except ValueError:
            raise DataError(
                f"{path}: problem {p['id']}: contest_date {p['contest_date']!r} "
                "does not start with YYYY-MM-DD"
            ) from None
        if (not date_from or day >= date_from) and (not date_to or day < date_to):
            kept.append(p)
    return kept


def rl_prompts(cfg, tok: Tokenizer) -> tuple:
    """gppo.py's prompts. The RL prompts of --math_data and --code_data, or the toy's, encoded
    (left-truncated to --max_prompt_len), as dicts {id, kind: math|countdown|code, prompt,
    answer|numbers+target|tests, prompt_ids}; code prompts below --min_pass_rate (a stronger
    model's, --pass_rate_field) dropped: the paper's filter. The held-out problems evaluated every
    --eval_every steps, as read (eval.py encodes them): --eval_data, else the toy's held-out set
    when the RL prompts are the toy's, else none (a toy's accuracy would say nothing of a real
    model). Returns (RL prompts, held-out problems, the lines that say what was read)."""
    tasks = []
    report = []
    math_data = cfg.math_data
    eval_data = cfg.eval_data
    if not (cfg.math_data or cfg.code_data or cfg.toy == "none"):  # the toy's prompts
        math_data = read(f"--toy={cfg.toy}", toy_files, cfg.toy, "rl")
        eval_data = eval_data or read(f"--toy={cfg.toy}", toy_files, cfg.toy, "held_out")
    if math_data:
        problems = read("--math_data", load_math_jsonl, math_data, skip_bad_rows=cfg.skip_bad_rows)
        report.append(f"math data: {problems.report}")
        tasks += [{"kind": "math", **p} for p in problems]  # a Countdown row is of kind countdown
    if cfg.code_data:
        problems = read(
            "--code_data",
            load_code_jsonl,
            cfg.code_data,
            min_tests=cfg.min_tests,
            pass_rate_field=cfg.pass_rate_field,
            skip_bad_rows=cfg.skip_bad_rows,
        )
        trusted = [p for p in problems if p.get("pass_rate", 1.0) >= cfg.min_pass_rate]
        below = len(problems) - len(trusted)
        report.append(f"code data: {problems.report}; {below} below --min_pass_rate")
        tasks += [dict(p, kind="code") for p in trusted]
    if not tasks:
        raise input_error("no RL prompts: give --math_data / --code_data, or --toy=countdown|sums")
    tasks, encoded = encode_prompts(tok, tasks, cfg.max_prompt_len, overlong="truncate")
    report.append(f"prompts: {encoded}")
    held_out = []  # as read: eval.py encodes what it evaluates
    if eval_data:
        held_out = [{"kind": "math", **p} for p in read("--eval_data", load_math_jsonl, eval_data)]
        held_out = held_out[: cfg.eval_problems]
    elif cfg.eval_every:
        report.append(
            "held-out evaluation: off (--math_data/--code_data without --eval_data); "
            "give --eval_data=FILE to evaluate every --eval_every steps, "
            "or run eval.py on the exports"
        )
    return tasks, held_out, report


# ---------------------------------------------- 3. RL's rows: the prompt stream, packed in order


def stream(items: list, first: int, count: int, seed: int) -> list:
    """Items first..first+count-1 of an endless stream of `items`, a fresh permutation of all of
    them per epoch (RL's prompts): a function of (seed, position) only, so a resumed run and any
    number of ranks see the same items."""
    n = len(items)
    epochs = range(first // n, (first + count - 1) // n + 1)
    perms = {e: np.random.default_rng([seed, e]).permutation(n) for e in epochs}
    return [items[perms[i // n][i % n]] for i in range(first, first + count)]


def pack_in_order(seqs: list, row_tokens: int, share_prompts: bool = False) -> list:
    """RL's rows: sequences (each with .ids, .prompt_len and .group, the prompt it answers) put
    greedily, in order, into rows of at most row_tokens tokens (a longer one gets its own row); with
    share_prompts, a sequence that follows one of its group in a row adds only its response. In
    order, not best-fit: a group stays together."""
    rows = [[]]
    used = 0
    for s in seqs:
        shared = share_prompts and rows[-1] and rows[-1][-1].group == s.group
        size = len(s.ids) - (s.prompt_len if shared else 0)
        if rows[-1] and used + size > row_tokens:
            rows.append([])
            used = 0
            size = len(s.ids)
        rows[-1].append(s)
        used += size
    return [row for row in rows if row]


def shared_prompt_layout(row: list, share_prompts: bool = False) -> dict:
    """The token layout of one row of pack_in_order, as lists: input_ids, position_ids,
    document_ids and prefix_docs (model.py), then per response token its target and
    logit_positions, the position whose hidden state predicts it (the token before it). Each
    sequence is a document [prompt; response]; with share_prompts a group's prompt goes in once, as
    its own document, and each response is a document continuing it (positions going on from the
    prompt's), so each token sees what it would see in its own sequence."""
    layout = dict(
        input_ids=[],
        position_ids=[],
        document_ids=[],
        prefix_docs=[],
        logit_positions=[],
        targets=[],
    )
    ids = layout["input_ids"]
    group = None
    prompt_doc = -1  # the document of the group's prompt in this row
    prompt_last = -1  # the position of its last token: it predicts each response's first token

    def add(tokens, positions, prefix):
        layout["document_ids"].extend([len(layout["prefix_docs"])] * len(tokens))
        layout["prefix_docs"].append(prefix)
        ids.extend(tokens)
        layout["position_ids"].extend(positions)

    for s in row:
        prompt_len = s.prompt_len
        response_len = len(s.ids) - prompt_len
        if not share_prompts:
            start = len(ids)
            add(s.ids, range(prompt_len + response_len), -1)
            first = start + prompt_len - 1
            layout["logit_positions"].extend(range(first, first + response_len))
        else:
            if s.group != group:  # a new prompt: its own document
                group = s.group
                prompt_doc = len(layout["prefix_docs"])
                prompt_last = len(ids) + prompt_len - 1
                add(s.ids[:prompt_len], range(prompt_len), -1)
            start = len(ids)
            add(s.ids[prompt_len:], range(prompt_len, prompt_len + response_len), prompt_doc)
            layout["logit_positions"].extend([prompt_last, *range(start, start + response_len - 1)])
        layout["targets"].extend(s.ids[prompt_len:])
    return layout


# ----------------------------------------------------------------------------- the toy's files

# The toy tasks are data sets like the others: `python tools/toy.py --task=TASK` writes them into
# out/toy/TASK/ (Countdown: docs/toy_countdown.md; sums: docs/toy_sums.md). With no data option,
# sft.py, gppo.py and eval.py read the files of the task their --toy option names: {task: {what: the
# files under out/toy/TASK/}}, what being the tokenizer, the RL prompts (gppo.py), the held-out set
# of the RL runs (gppo.py) and eval.py's sets.
TOY_FILES = {
    "countdown": dict(
        tokenizer="tokenizer",
        rl="rl/countdown_3.jsonl",
        held_out="test/countdown_3.jsonl",
        eval_math="test/countdown_3.jsonl,test/countdown_4.jsonl",
        eval_code="test/toy_code.jsonl",
    ),
    "sums": dict(
        tokenizer="tokenizer",
        rl="rl/toy_math.jsonl",
        held_out="test/toy_math.jsonl",
        eval_math="test/toy_math.jsonl",
        eval_code="test/toy_code.jsonl",
    ),
}
TOY_TASKS = (*TOY_FILES, "none")  # none: no toy; the data options must be given


def toy_files(task: str, what: str) -> str:
    """The toy's files of one kind (comma-separated, as the data options take them), each checked: a
    missing one is a FileNotFoundError that names the command writing them."""
    paths = [os.path.join("out", "toy", task, name) for name in TOY_FILES[task][what].split(",")]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"no {path}: the {task} toy's files are written by `python tools/toy.py "
                f"--task={task}`"
            )
    return ",".join(paths)
