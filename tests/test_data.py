"""Tests for data.py and the parts it delegates to: chat format (parts/chat_template.py against
hand-written strings, real Qwen3 ids, the official Jinja template), loaders and their errors, public
data formats (hand-made rows in tests/fixtures/data: their references pass their converted tests in
reward.py's sandbox and wrong programs do not; their answers verify with math-verify), packing and
the sharded resumable loader (parts/packing.py), and the toy tasks' content (tools/toy_tasks: math
answers checked with math-verify, code solutions run in a subprocess against their tests)."""

import base64
import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

import data
from parts import chat_template, formats, packing
import reward
from tools import toy
from tools.toy_tasks import programs, sums
from tools.toy_tasks import tokenizer as qwen3_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def toy_tok(toy_files):
    return data.load_tokenizer(os.path.join(toy_files["sums"], "tokenizer"))


@pytest.fixture(scope="module")
def qwen_tok(qwen3_tokenizer_dir):
    return data.load_tokenizer(qwen3_tokenizer_dir)


# ----------------------------------------------------------------------------- chat format

U = lambda c: {"role": "user", "content": c}  # noqa: E731
A = lambda c, **kw: {"role": "assistant", "content": c, **kw}  # noqa: E731
S = lambda c: {"role": "system", "content": c}  # noqa: E731

# (messages, add_generation_prompt, enable_thinking, expected text): written by hand from the
# template's rules
CHAT_CASES = [
    ([U("Hi")], True, True, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    (
        [U("Hi")],
        True,
        False,
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    ),
    (
        [S("Be brief."), U("2+2?"), A("<think>\nadd\n</think>\n\n4")],
        False,
        True,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n",
    ),
    # an earlier assistant turn loses its reasoning; extra newlines around the last one are
    # normalised
    (
        [U("a"), A("<think>r1</think>x1"), U("b"), A("<think>\n\nr2\n\n</think>\n\n\ny")],
        False,
        True,
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nx1<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\ny<|im_end|>\n",
    ),
    # a final answer without reasoning gets an empty think block
    (
        [U("a"), A("plain")],
        False,
        True,
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nplain<|im_end|>\n",
    ),
    (
        [U("a"), A("ans", reasoning_content="\nthought\n")],
        False,
        True,
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<think>\nthought\n</think>\n\nans<|im_end|>\n",
    ),
    # a system message that is not first is an ordinary turn
    (
        [U("a"), S("mid"), U("b")],
        True,
        True,
        "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nmid<|im_end|>\n<|im_start|>user\nb<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    # no user turn at all: the template never adds a think block
    (
        [S("s"), A("<think>q</think>only")],
        False,
        True,
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>assistant\nonly<|im_end|>\n",
    ),
]


@pytest.mark.parametrize("messages,agp,thinking,expected", CHAT_CASES)
def test_render_chat_hand_written(messages, agp, thinking, expected):
    assert (
        chat_template.render_chat(messages, add_generation_prompt=agp, enable_thinking=thinking)
        == expected
    )


def test_render_chat_rejects_what_it_does_not_support():
    with pytest.raises(ValueError, match="tool"):
        chat_template.render_chat([U("a"), {"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="tool_calls"):
        chat_template.render_chat([U("a"), A("", tool_calls=[{"name": "f"}])])
    with pytest.raises(ValueError, match=r"messages\[0\].content"):
        chat_template.render_chat([{"role": "user", "content": [{"type": "text"}]}])
    with pytest.raises(ValueError, match="assistant"):
        data.encode_chat(None, [U("a")])


EXTRA_CONVERSATIONS = [
    [U("a"), S("mid"), U("<tool_response>x</tool_response>"), A("<think>t</think>z"), A("w")],
    [U("a"), A("<think>r</think>b"), A("<think>r3</think>c")],
    [U("héllo wörld ✓ 数学"), A("<think>\n日本\n</think>\n\n答え  \n  spaces")],
]


def _jinja(template):
    pytest.importorskip("jinja2", reason="jinja2 is not installed (an optional extra check)")
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    return env.from_string(template)  # the environment transformers renders chat templates in


def _all_renders(render):
    for messages in [c[0] for c in CHAT_CASES] + EXTRA_CONVERSATIONS:
        for agp in (False, True):
            for thinking in (True, False, None):
                kwargs = {} if thinking is None else {"enable_thinking": thinking}
                yield (
                    messages,
                    agp,
                    thinking,
                    render(messages=messages, add_generation_prompt=agp, **kwargs),
                )


def test_toy_chat_template_equals_render_chat():
    template = _jinja(qwen3_tokenizer.CHAT_TEMPLATE)
    for messages, agp, thinking, text in _all_renders(template.render):
        assert text == chat_template.render_chat(messages, agp, thinking is not False), (
            messages,
            agp,
            thinking,
        )


def test_real_qwen3_template_equals_render_chat(qwen3_tokenizer_dir):
    with open(os.path.join(qwen3_tokenizer_dir, "tokenizer_config.json")) as f:
        template = _jinja(json.load(f)["chat_template"])
    for messages, agp, thinking, text in _all_renders(template.render):
        assert text == chat_template.render_chat(messages, agp, thinking is not False), (
            messages,
            agp,
            thinking,
        )


def test_encode_chat_real_qwen3_ids(qwen_tok):
    messages = [U("What is 12 + 7?"), A("<think>\n2+7+0=9\n</think>\n\n\\boxed{19}")]
    ids, mask = data.encode_chat(qwen_tok, messages)
    # <|im_start|> user \n What Ġis Ġ 1 2 Ġ+ Ġ 7 ? <|im_end|> \n <|im_start|> assistant \n
    prompt = [
        151644,
        872,
        198,
        3838,
        374,
        220,
        16,
        17,
        488,
        220,
        22,
        30,
        151645,
        198,
        151644,
        77091,
        198,
    ]
    # <think> \n 2 + 7 + 0 = 9 \n </think> \n\n \ boxed { 1 9 } <|im_end|>
    answer = [
        151667,
        198,
        17,
        10,
        22,
        10,
        15,
        28,
        24,
        198,
        151668,
        271,
        59,
        79075,
        90,
        16,
        24,
        92,
        151645,
    ]
    assert ids == prompt + answer + [198]
    assert mask == [0] * len(prompt) + [1] * len(answer) + [0]
    assert data.encode_prompt(qwen_tok, "Hi") == [
        151644,
        872,
        198,
        13048,
        151645,
        198,
        151644,
        77091,
        198,
    ]
    assert data.encode_prompt(qwen_tok, [U("Hi")], enable_thinking=False) == [
        151644,
        872,
        198,
        13048,
        151645,
        198,
        151644,
        77091,
        198,
        151667,
        271,
        151668,
        271,
    ]
    assert data.special_token_ids(qwen_tok) == dict(
        im_start=151644, im_end=151645, endoftext=151643, think=151667, end_think=151668
    )
    assert data.stop_token_ids(qwen_tok) == [151645, 151643]


def _check_loss_mask(tok, messages):
    ids, mask = data.encode_chat(tok, messages)
    text = chat_template.render_chat(messages)
    assert ids == tok.encode(text, add_special_tokens=False).ids
    # trained part = the final assistant turn (after its header) through <|im_end|>; the rest is
    # context
    head = text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n")
    trained = [i for i, m in zip(ids, mask) if m]
    first = mask.index(1)
    assert tok.decode(trained, skip_special_tokens=False) == text[head:-1]
    assert tok.decode(ids[:first], skip_special_tokens=False) == text[:head]
    assert all(mask[first : len(trained) + first]) and mask[-1] == 0


def test_loss_mask_real_tokenizer(qwen_tok):
    for messages in [
        c[0] for c in CHAT_CASES if c[0][-1]["role"] == "assistant"
    ] + EXTRA_CONVERSATIONS:
        _check_loss_mask(qwen_tok, messages)


def test_loss_mask_toy_tokenizer(toy_tok):
    for messages in [
        c[0] for c in CHAT_CASES if c[0][-1]["role"] == "assistant"
    ] + EXTRA_CONVERSATIONS:
        _check_loss_mask(toy_tok, messages)
    conversations = sums.sft_conversations(20, 20, seed=3) + EXTRA_CONVERSATIONS
    for messages in conversations:
        _check_loss_mask(toy_tok, messages)
    # the batched, vectorised path gives the same ids and masks as encode_chat
    examples, _ = data.encode_sft_dataset(toy_tok, conversations, max_len=4096)
    for messages, (ids, mask) in zip(conversations, examples):
        assert (ids.tolist(), mask.astype(int).tolist()) == data.encode_chat(toy_tok, messages)


# ----------------------------------------------------------------------------- toy tokenizer


def test_toy_tokenizer_shape_and_determinism(toy_tok, tmp_path):
    assert toy.build_tokenizer("sums").to_str() == toy_tok.to_str()  # trained again: the same
    n = toy_tok.get_vocab_size()
    assert 300 <= n <= 640
    # the 26 Qwen3 added tokens, in Qwen3's order, at the end of the vocabulary, each a single token
    for k, (content, special) in enumerate(qwen3_tokenizer.QWEN3_ADDED_TOKENS):
        assert toy_tok.token_to_id(content) == n - 26 + k
        assert toy_tok.encode(f"x{content}y").tokens[1] == content
    added = {t["content"]: t["special"] for t in json.loads(toy_tok.to_str())["added_tokens"]}
    assert added == dict(qwen3_tokenizer.QWEN3_ADDED_TOKENS)
    assert toy_tok.encode("12345 + 9").tokens == ["1", "2", "3", "4", "5", "Ġ+", "Ġ", "9"]
    text = "Ünïcode ✓ 数学 <think>\n x\t\r\n</think>"
    assert toy_tok.decode(toy_tok.encode(text).ids, skip_special_tokens=False) == text
    # special: skipped
    assert toy_tok.decode(toy_tok.encode("<|im_start|>hi<|im_end|>").ids) == "hi"
    assert toy_tok.decode(toy_tok.encode("<think>hi").ids) == "<think>hi"  # not special: kept
    qwen3_tokenizer.save(toy_tok, str(tmp_path))
    again = data.load_tokenizer(str(tmp_path))
    assert again.to_str() == toy_tok.to_str()
    config = json.load(open(tmp_path / "tokenizer_config.json"))
    assert config["eos_token"] == "<|im_end|>" and config["pad_token"] == "<|endoftext|>"
    assert config["added_tokens_decoder"][str(n - 1)]["content"] == "</think>"
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        data.load_tokenizer(str(tmp_path / "nothing"))


def test_toy_tokenizer_matches_qwen_pre_tokenization(toy_tok, qwen_tok):
    # same normaliser and split regex: the pieces before BPE are the same for both tokenizers
    text = (
        chat_template.render_chat(sums.sft_conversations(3, 3, seed=5)[0]) + "it's  x\r\n\n  y 2024"
    )
    # noqa
    pieces = lambda tok: [
        p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))
    ]
    assert pieces(toy_tok) == pieces(qwen_tok)


# ----------------------------------------------------------------------------- loaders


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return str(path)


def test_load_sft_jsonl_formats(tmp_path):
    path = _write(
        tmp_path,
        "sft.jsonl",
        [
            {"messages": [U("q"), A("<think>r</think>a")]},
            "",
            {
                "system": "sys",
                "conversations": [{"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"}],
            },
            {
                "conversations": [
                    {"from": "user", "value": "q3"},
                    {"from": "assistant", "value": "a3"},
                ]
            },
            {"messages": [U("q4"), A("a4", reasoning_content="r4")]},
        ],
    )
    convs = data.load_sft_jsonl(path)
    assert convs == [
        [U("q"), A("<think>r</think>a")],
        [S("sys"), U("q2"), A("a2")],
        [U("q3"), A("a3")],
        [U("q4"), A("a4", reasoning_content="r4")],
    ]


def test_load_math_jsonl_formats(tmp_path):
    path = _write(
        tmp_path,
        "math.jsonl",
        [
            {"id": "p1", "problem": "1+1?", "answer": "2"},
            {"question": "2+2?", "answer": 4},
            {"prompt": [U("3+3?")], "answer": "6"},
            {"messages": [U("4+4?")], "meta": {"solution": "8"}},
        ],
    )
    assert data.load_math_jsonl(path) == [
        dict(id="p1", prompt="1+1?", answer="2"),
        dict(id="math.jsonl:2", prompt="2+2?", answer="4"),
        dict(id="math.jsonl:3", prompt=[U("3+3?")], answer="6"),
        dict(id="math.jsonl:4", prompt=[U("4+4?")], answer="8"),
    ]


def _compressed(obj):  # LiveCodeBench stores private tests as base64(zlib(pickle(json string)))
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(obj)))).decode()


def test_load_code_jsonl_formats(tmp_path):
    stdin = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    functional = [{"input": "[1, 2]\n3", "output": "6", "testtype": "functional"}]
    path = _write(
        tmp_path,
        "code.jsonl",
        [
            dict(
                question_id="abc",
                question_content="Double n.",
                starter_code="",
                public_test_cases=json.dumps(stdin),
                private_test_cases=_compressed(stdin * 2),
                metadata="{}",
                contest_date="2024-08-01T00:00:00",
            ),
            dict(
                question_id="lc1",
                question_content="Sum.",
                starter_code="class Solution:\n    def f(self, a, b):\n",
                public_test_cases=functional,
                private_test_cases="[]",
                metadata={"func_name": "f"},
            ),
            dict(
                prompt="Echo.",
                tests=[
                    {"input": "x", "output": "x"},
                    {"input": "1", "output": "1", "fn_name": "g"},
                ],
            ),
        ],
    )
    p = data.load_code_jsonl(path)
    assert p[0] == dict(
        id="abc",
        line=1,
        prompt="Double n.",
        tests=[{"input": "1\n", "output": "2\n"}] * 3,
        contest_date="2024-08-01T00:00:00",
    )
    assert (
        p[1]["prompt"]
        == "Sum.\n\nUse this starter code:\n```python\nclass Solution:\n    def f(self, a, b):\n\n```"
    )
    assert (
        p[1]["tests"] == [{"input": "[1, 2]\n3", "output": "6", "fn_name": "f"}]
        and "contest_date" not in p[1]
    )
    assert p[2] == dict(
        id="code.jsonl:3",
        line=3,
        prompt="Echo.",
        tests=[{"input": "x", "output": "x"}, {"input": "1", "output": "1", "fn_name": "g"}],
    )


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


BAD_LINES = [  # (loader, second line of the file, words the error must contain)
    ("sft", '{"messages": [', ["bad.jsonl:2", "malformed JSON"]),
    ("sft", "[1, 2]", ["bad.jsonl:2", "JSON object"]),
    ("sft", {"text": "hi"}, ["bad.jsonl:2", "'messages'"]),
    ("sft", {"messages": "hi"}, ["bad.jsonl:2", "'messages'", "list", "str"]),
    (
        "sft",
        {"messages": [U("q"), {"role": "assistant"}]},
        ["bad.jsonl:2", "'messages[1].content'", "missing"],
    ),
    (
        "sft",
        {"messages": [U("q"), {"role": "assistant", "content": 3}]},
        ["bad.jsonl:2", "'messages[1].content'", "int"],
    ),
    (
        "sft",
        {"messages": [{"role": "robot", "content": "x"}]},
        ["bad.jsonl:2", "'messages[0].role'", "robot"],
    ),
    ("sft", {"messages": [U("q")]}, ["bad.jsonl:2", "assistant"]),
    (
        "sft",
        {"conversations": [{"from": "human", "text": "x"}]},
        ["bad.jsonl:2", "'conversations[0].value'"],
    ),
    ("math", {"problem": "x"}, ["bad.jsonl:2", "'answer'", "missing"]),
    ("math", {"problem": 7, "answer": "1"}, ["bad.jsonl:2", "'problem'", "int"]),
    ("math", {"answer": "1"}, ["bad.jsonl:2", "'problem'"]),
    ("math", {"problem": "x", "answer": ["1"]}, ["bad.jsonl:2", "'answer'", "list"]),
    ("math", {"messages": [U("q")], "meta": {}}, ["bad.jsonl:2", "'meta.solution'"]),
    (
        "code",
        {"question_content": "q", "public_test_cases": "{oops"},
        ["bad.jsonl:2", "'public_test_cases'"],
    ),
    (
        "code",
        {"question_content": "q", "public_test_cases": [{"input": "1"}]},
        ["bad.jsonl:2", "'public_test_cases[0].output'"],
    ),
    (
        "code",
        {"question_content": "q", "public_test_cases": [{"input": 1, "output": "1"}]},
        ["bad.jsonl:2", "'public_test_cases[0].input'", "int"],
    ),
    (
        "code",
        {
            "question_content": "q",
            "public_test_cases": [{"input": "1", "output": "1", "testtype": "functional"}],
        },
        ["bad.jsonl:2", "'metadata.func_name'"],
    ),
    (
        "code",
        {
            "question_content": "q",
            "public_test_cases": [{"input": "1", "output": "1", "testtype": "magic"}],
        },
        ["bad.jsonl:2", "testtype", "magic"],
    ),
    (
        "code",
        {"question_content": "q", "metadata": "{x", "public_test_cases": []},
        ["bad.jsonl:2", "'metadata'"],
    ),
    (
        "code",
        {
            "question_content": "q",
            "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(_Boom()))).decode(),
        },
        ["bad.jsonl:2", "'private_test_cases'", "refusing"],
    ),
    ("code", {"prompt": "q"}, ["bad.jsonl:2", "'tests'", "missing"]),
    # MATH, verl and APPS/TACO rows
    ("math", {"problem": "x", "solution": "no box here"}, ["bad.jsonl:2", "'solution'", "boxed"]),
    (
        "math",
        {"problem": "x", "solution": "so $\\boxed{\\frac{1}{2}$"},
        ["bad.jsonl:2", "'solution'", "boxed"],
    ),
    ("math", {"problem": "x", "solution": "$\\boxed{ }$"}, ["bad.jsonl:2", "boxed", "empty"]),
    ("math", {"problem": "x", "answer": True}, ["bad.jsonl:2", "'answer'", "bool"]),
    (
        "math",
        {"prompt": [U("q")], "reward_model": {"style": "rule"}},
        ["bad.jsonl:2", "'reward_model.ground_truth'", "missing"],
    ),
    (
        "math",
        {"prompt": [U("q")], "reward_model": {"ground_truth": "[]"}},
        ["bad.jsonl:2", "'reward_model.ground_truth'", "empty"],
    ),
    (
        "math",
        {"prompt": [U("q")], "reward_model": {"ground_truth": ["2", 3.5, None]}},
        ["bad.jsonl:2", "'reward_model.ground_truth[2]'", "NoneType"],
    ),
    (
        "math",
        {
            "prompt": [U("q")],
            "reward_model": {"ground_truth": '{"inputs": ["1"], "outputs": ["1"]}'},
        },
        ["bad.jsonl:2", "'reward_model.ground_truth'", "code"],
    ),
    (
        "math",
        {"prompt": [{"role": "user", "content": 5}], "reward_model": {"ground_truth": "1"}},
        ["bad.jsonl:2", "'prompt[0].content'", "int"],
    ),
    ("code", {"question": "q", "input_output": "{oops"}, ["bad.jsonl:2", "'input_output'", "JSON"]),
    (
        "code",
        {"question": "q", "input_output": '{"inputs": ["1"]}'},
        ["bad.jsonl:2", "'input_output.outputs'", "missing"],
    ),
    (
        "code",
        {"question": "q", "input_output": '{"inputs": ["1"], "outputs": []}'},
        ["bad.jsonl:2", "1 inputs but 0 outputs"],
    ),
    (
        "code",
        {"question": "q", "input_output": {"inputs": [5], "outputs": ["5"]}},
        ["bad.jsonl:2", "'input_output.inputs[0]'", "int"],
    ),
    (
        "code",
        {"question": "q", "input_output": {"inputs": ["1"], "outputs": [["1", 2]]}},
        ["bad.jsonl:2", "'input_output.outputs[0]'", "list"],
    ),
    (
        "code",
        {"question": "q", "input_output": {"fn_name": "f", "inputs": ["x"], "outputs": [1]}},
        ["bad.jsonl:2", "'input_output.inputs[0]'", "arguments of f"],
    ),
    (
        "code",
        {
            "question": "q",
            "input_output": {"fn_name": "not a name", "inputs": [[1]], "outputs": [1]},
        },
        ["bad.jsonl:2", "'input_output.fn_name'"],
    ),
    (
        "code",
        {"question": 3, "input_output": {"inputs": ["1"], "outputs": ["1"]}},
        ["bad.jsonl:2", "'question'", "int"],
    ),
    (
        "code",
        {"question": "q", "input_output": {"inputs": ["1"], "outputs": ["1"]}, "solutions": "[1]"},
        ["bad.jsonl:2", "'solutions[0]'", "int"],
    ),
    (
        "code",
        {
            "question": "q",
            "input_output": {"inputs": ["1"], "outputs": ["1"]},
            "solutions": "print(1)",
        },
        ["bad.jsonl:2", "'solutions'", "JSON"],
    ),
    (
        "code",
        {"prompt": [U("q")], "reward_model": {"ground_truth": '["2"]'}},
        ["bad.jsonl:2", "'reward_model.ground_truth[0]'", "object", "str"],
    ),
]


@pytest.mark.parametrize("kind,line,words", BAD_LINES)
def test_loader_errors_name_file_line_and_field(tmp_path, kind, line, words):
    good = {
        "sft": {"messages": [U("q"), A("a")]},
        "math": {"problem": "p", "answer": "1"},
        "code": {"prompt": "p", "tests": [{"input": "1", "output": "1"}]},
    }[kind]
    path = _write(tmp_path, "bad.jsonl", [good, line, good])
    loader = {
        "sft": data.load_sft_jsonl,
        "math": data.load_math_jsonl,
        "code": data.load_code_jsonl,
    }[kind]
    with pytest.raises(data.DataError) as err:
        loader(path)
    for word in words:
        assert word in str(err.value), (str(err.value), word)


def test_missing_or_empty_files_are_errors_naming_the_file(tmp_path):
    loaders = (data.load_sft_jsonl, data.load_math_jsonl, data.load_code_jsonl)
    for content in ("", "\n  \n\n"):
        path = tmp_path / "empty.jsonl"
        path.write_text(content)
        for loader in loaders:
            with pytest.raises(data.DataError, match=f"^{re.escape(str(path))}: no records"):
                loader(str(path))
    for loader in loaders:
        with pytest.raises(
            FileNotFoundError,
            match=f"^{re.escape(str(tmp_path / 'nope.jsonl'))}: no such data file",
        ):
            loader(str(tmp_path / "nope.jsonl"))
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"problem": "p", "answer": "1"}\n{"problem": "caf\xe9", "answer": "1"}\n')
    with pytest.raises(data.DataError, match=f"^{re.escape(str(path))}:2: not UTF-8"):
        data.load_math_jsonl(str(path))


def test_load_code_jsonl_drops_problems_with_few_tests_and_reports_them(tmp_path):
    tests = lambda k: [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(k)]  # noqa: E731
    path = _write(
        tmp_path,
        "code.jsonl",
        [dict(id=f"p{k}", prompt="Echo.", tests=tests(k)) for k in (0, 3, 16, 15, 20)],
    )
    problems = data.load_code_jsonl(path, min_tests=16)
    assert [p["id"] for p in problems] == ["p16", "p20"]
    assert problems.report == dict(
        file=path,
        rows=5,
        kept=2,
        min_tests=16,
        dropped_few_tests=3,
        with_solutions=0,
        formats={"tests": 5},
    )
    assert "\n" not in str(problems.report)  # one line to print
    # default 1: keep all with tests
    assert [p["id"] for p in data.load_code_jsonl(path)] == ["p3", "p16", "p15", "p20"]
    assert len(data.load_code_jsonl(path, min_tests=0)) == 5
    with pytest.raises(
        data.DataError,
        match=r"code.jsonl: no problem has at least min_tests=21 tests .*'dropped_few_tests': 5",
    ):
        data.load_code_jsonl(path, min_tests=21)
    # the loaders' results are still plain lists to everything else
    assert data.load_code_jsonl(path, min_tests=20) == [
        dict(id="p20", line=5, prompt="Echo.", tests=tests(20))
    ]


# A wrong program for each fixture problem (by id), and the references of verl rows, which carry
# none.
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "data")
WRONG_PROGRAMS = {
    "4001": "a, b = map(int, input().split())\nprint(a - b)\n",
    "apps_taco.jsonl:2": "n = int(input())\nfor _ in range(n):\n    print(input())\n",
    "4002": "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)\n",
    "apps_taco.jsonl:4": "class Solution:\n    def topK(self, nums, k):\n        return sorted(nums)[:k]\n",
    # the wrapped list
    "apps_taco.jsonl:5": "def split_digits(n):\n    return [[int(c) for c in str(n)]]\n",
    "verl_code.jsonl:1": "print(min(map(int, input().split())))\n",
    # wrong on ""
    "verl_code.jsonl:2": "def is_palindrome(s):\n    return len(s) > 0 and s == s[::-1]\n",
}
VERL_REFERENCES = {
    "verl_code.jsonl:1": "print(max(map(int, input().split())))\n",
    "verl_code.jsonl:2": "class Solution:\n    def is_palindrome(self, s):\n        return s == s[::-1]\n",
}
# these programs take milliseconds
SANDBOX = reward.SandboxConfig(timeout_s=4.0, workers=2, memory_mb=512)


def _passes(program, tests) -> list:
    return [r.passed for r in reward.run_tests(program, tests, SANDBOX)]


def test_apps_and_taco_rows_load_as_tests_their_references_pass():
    problems = data.load_code_jsonl(os.path.join(FIXTURES, "apps_taco.jsonl"))
    by_id = {p["id"]: p for p in problems}
    assert list(by_id) == [
        "4001",
        "apps_taco.jsonl:2",
        "4002",
        "apps_taco.jsonl:4",
        "apps_taco.jsonl:5",
    ]
    # row 6: no tests
    assert problems.report["dropped_few_tests"] == 1 and problems.report["with_solutions"] == 5
    # hand-converted: TACO's lists of lines are joined; call-based arguments one JSON per line;
    # outputs unwrapped when every output of the problem is a one-element list (count_vowels, topK),
    # kept otherwise (split_digits)
    assert by_id["apps_taco.jsonl:2"]["tests"][0] == {
        "input": "3\nab\ncd\nef",
        "output": "ef\ncd\nab",
    }
    assert by_id["4002"]["tests"][3] == {
        "input": '"a\\ne"',
        "output": "2",
        "fn_name": "count_vowels",
    }
    assert by_id["apps_taco.jsonl:4"]["tests"][:2] == [
        {"input": "[3, 1, 4, 1, 5]\n2", "output": "[5, 4]", "fn_name": "topK"},
        {"input": "[7]\n1", "output": "[7]", "fn_name": "topK"},
    ]
    assert [t["output"] for t in by_id["apps_taco.jsonl:5"]["tests"]] == [
        "[1, 2, 3]",
        "[7]",
        "[9, 0]",
    ]
    assert by_id["4002"]["prompt"].endswith(
        "Use this starter code:\n```python\ndef count_vowels(s):\n\t\n```"
    )
    assert len(by_id["4001"]["solutions"]) == 2
    for pid, p in by_id.items():
        reward.validate_tests(p["tests"])
        for solution in p["solutions"]:
            assert all(_passes(solution, p["tests"])), (pid, solution)
        assert not all(_passes(WRONG_PROGRAMS[pid], p["tests"])), pid


def test_verl_code_rows_load_with_a_pass_rate_from_a_stronger_model():
    path = os.path.join(FIXTURES, "verl_code.jsonl")
    problems = data.load_code_jsonl(
        path, pass_rate_field="extra_info.model_difficulty.DeepSeek-R1-Distill-Qwen-1.5B/16"
    )
    # a key with a dot in it, a count of 16
    assert [p["pass_rate"] for p in problems] == [12 / 16, 3 / 16]
    assert problems[0]["prompt"] == [U("Read a line of integers and print the largest one.")]
    assert problems[1]["tests"][0] == {
        "input": '"abba"',
        "output": "true",
        "fn_name": "is_palindrome",
    }
    for p in problems:
        assert all(_passes(VERL_REFERENCES[p["id"]], p["tests"])), p["id"]
        assert not all(_passes(WRONG_PROGRAMS[p["id"]], p["tests"])), p["id"]
    assert "pass_rate" not in data.load_code_jsonl(path)[0]


def test_pass_rate_field(tmp_path):
    # noqa: E731
    row = lambda **kw: dict(prompt="Echo.", tests=[{"input": "1", "output": "1"}], **kw)
    path = _write(tmp_path, "rates.jsonl", [row(pass_rate=0.5), row(pass_rate=1), row(pass_rate=0)])
    assert [p["pass_rate"] for p in data.load_code_jsonl(path, pass_rate_field="pass_rate")] == [
        0.5,
        1.0,
        0.0,
    ]
    for bad, words in [
        (row(), ["rates.jsonl:2", "missing field 'pass_rate'"]),
        (row(pass_rate=1.5), ["rates.jsonl:2", "'pass_rate'", "[0, 1]", "1.5"]),
        (row(pass_rate=True), ["rates.jsonl:2", "'pass_rate'", "True"]),
        (row(pass_rate="0.5"), ["rates.jsonl:2", "'pass_rate'", "'0.5'"]),
    ]:
        path = _write(tmp_path, "rates.jsonl", [row(pass_rate=0.5), bad])
        with pytest.raises(data.DataError) as err:
            data.load_code_jsonl(path, pass_rate_field="pass_rate")
        assert all(w in str(err.value) for w in words), (str(err.value), words)
    # longest key wins
    path = _write(tmp_path, "counts.jsonl", [row(meta={"a": {"b": {"c": 0}}, "a.b": {"c": 4}})])
    assert data.load_code_jsonl(path, pass_rate_field="meta.a.b.c/8")[0]["pass_rate"] == 0.5
    with pytest.raises(data.DataError, match=r"'meta.a.b.c' must be a number in \[0, 2\]"):
        data.load_code_jsonl(path, pass_rate_field="meta.a.b.c/2")


def test_last_boxed_hand_written_cases():
    cases = [
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2^{3}}}", "\\frac{1}{2^{3}}"),
        ("\\boxed {12}", "12"),
        ("\\boxed\n{12}", "12"),
        ("\\fbox{7}", "7"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{a\\}b}", "a\\}b"),
        ("$\\boxed 5$.", "5"),
        ("\\boxed{\\boxed{3}}", "3"),
        ("x\\boxed{}", ""),
        ("no answer", None),
        ("\\boxed{1", None),
        ("\\boxedfoo{1}", None),
        ("\\boxed{1} \\boxed{2", None),
    ]
    for text, expected in cases:
        assert formats._last_boxed(text) == expected, text


def _math_response(answer: str) -> str:
    return f"<think>\nwork\n</think>\nThe answer is $\\boxed{{{answer}}}$."


def test_math_rows_whose_answer_is_the_last_boxed_of_the_solution():
    problems = data.load_math_jsonl(os.path.join(FIXTURES, "math_boxed.jsonl"))
    expected = ["\\frac{3}{4}", "29", "12", "7", "\\{1, 2\\}", "2\\sqrt{2}", "5", "6"]
    wrong = ["\\frac{2}{3}", "2", "13", "8", "\\{1, 3\\}", "2\\sqrt{3}", "6", "7"]
    assert [p["answer"] for p in problems] == expected
    assert problems.report["formats"] == {"MATH solution": 7, "answer": 1}
    assert problems[7]["id"] == "test/algebra/1.json" and problems[0]["id"] == "math_boxed.jsonl:1"
    for p, right, bad in zip(problems, expected, wrong):
        assert reward.math_reward(_math_response(right), p["answer"]) == 1.0, p
        assert reward.math_reward(_math_response(bad), p["answer"]) == 0.0, p


def test_verl_and_skywork_math_rows():
    problems = data.load_math_jsonl(os.path.join(FIXTURES, "verl_math.jsonl"))
    assert [p["answer"] for p in problems] == [
        "2",
        "\\frac{\\sqrt{3}}{2}",
        "72",
        "34",
        "18",
        "[-1, 3]",
    ]
    assert problems[1]["answers"] == ["\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"]
    # only where a row lists several
    assert all("answers" not in p for i, p in enumerate(problems) if i != 1)
    assert problems[0]["prompt"] == [
        U("How many primes are less than 5? Put your final answer within \\boxed{}.")
    ]
    wrong = ["3", "\\frac{1}{2}", "71", "35", "17", "(-1, 3)"]
    for p, bad in zip(problems, wrong):
        for answer in p.get("answers", [p["answer"]]):
            assert reward.math_reward(_math_response(answer), p["answer"]) == 1.0, (p, answer)
        assert reward.math_reward(_math_response(bad), p["answer"]) == 0.0, p


def test_overlong_rules_are_counted(toy_tok):
    short = [U("hi"), A("ok")]
    long = [U("hi " * 40), A("long " * 40)]
    n_short = len(data.encode_chat(toy_tok, short)[0])
    n_long = len(data.encode_chat(toy_tok, long)[0])
    max_len = n_short + 5
    ex, rep = data.encode_sft_dataset(toy_tok, [short, long, short], max_len, "drop")
    assert len(ex) == 2 and rep == dict(
        conversations=3, kept=2, truncated=0, dropped=1, max_len=max_len, overlong="drop"
    )
    ex, rep = data.encode_sft_dataset(toy_tok, [short, long], max_len, "truncate")
    # cut inside the prompt: nothing left to learn, dropped
    assert rep["truncated"] == 0 and rep["dropped"] == 1
    ex, rep = data.encode_sft_dataset(toy_tok, [short, long], n_long - 3, "truncate")
    assert (
        rep["truncated"] == 1 and rep["kept"] == 2 and len(ex[1][0]) == n_long - 3 and ex[1][1][-1]
    )
    assert list(ex[0][0]) == data.encode_chat(toy_tok, short)[0]
    with pytest.raises(data.DataError, match="max_len"):
        data.encode_sft_dataset(toy_tok, [long], max_len, "error")
    problems = [dict(id="a", prompt="x"), dict(id="b", prompt="word " * 50)]
    kept, rep = data.encode_prompts(toy_tok, problems, 30, "drop")
    assert [p["id"] for p in kept] == ["a"] and rep["dropped"] == 1
    kept, rep = data.encode_prompts(toy_tok, problems, 30, "truncate")
    assert (
        rep["truncated"] == 1
        and kept[1]["prompt_ids"] == data.encode_prompt(toy_tok, "word " * 50)[-30:]
    )


# ----------------------------------------------------------------------------- packing


def _random_examples(n, seed, lo=1, hi=300):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        length = int(rng.integers(lo, hi + 1))
        out.append((rng.integers(0, 1000, length).tolist(), (rng.random(length) < 0.5).tolist()))
    return out


def test_pack_examples_keeps_every_token_and_marks_documents():
    examples = _random_examples(200, 0)
    rows = packing.pack_examples(examples, row_tokens=512, pad_id=-7)
    seen = []
    for row in rows:
        assert all(v.shape == (512,) for v in row.values())
        ids = row["input_ids"]
        mask = row["loss_mask"]
        pos = row["position_ids"]
        doc = row["document_ids"]
        assert mask.dtype == torch.bool
        for d in doc.unique().tolist():
            where = (doc == d).nonzero().flatten()
            assert (where == torch.arange(where[0], where[-1] + 1)).all()  # contiguous
            # positions restart at 0
            assert (pos[where] == torch.arange(len(where))).all()
            seen.append((ids[where].tolist(), mask[where].tolist()))
        assert doc[0] == 0 and (doc[1:] - doc[:-1]).ge(0).all() and (doc[1:] - doc[:-1]).le(1).all()
    padding = [s for s in seen if set(s[0]) == {-7}]
    real = [s for s in seen if set(s[0]) != {-7}]
    assert all(not any(m) for _, m in padding)
    # nothing lost, nothing doubled
    assert sorted(map(str, real)) == sorted(map(str, examples))
    efficiency = sum(len(x) for x, _ in examples) / (len(rows) * 512)
    assert efficiency >= 0.95, efficiency
    with pytest.raises(ValueError, match="do not fit"):
        packing.pack_examples(examples, row_tokens=100, pad_id=0)


@pytest.mark.parametrize(
    "name,lengths,row_tokens",
    [
        # long chain-of-thought SFT: lognormal lengths (median ~6K tokens), 32K rows
        (
            "long-CoT 32K",
            np.clip(np.random.default_rng(1).lognormal(np.log(6000), 0.8, 3000), 200, 32768).astype(
                int
            ),
            32768,
        ),
        # short chat mix with a heavy tail
        (
            "chat 4K",
            np.clip(np.random.default_rng(2).lognormal(np.log(400), 1.0, 5000), 20, 4096).astype(
                int
            ),
            4096,
        ),
        ("uniform 1..row", np.random.default_rng(3).integers(1, 2049, 2000), 2048),
    ],
)
def test_packing_efficiency_on_realistic_mixes(name, lengths, row_tokens):
    rows = packing.plan_packing(lengths.tolist(), row_tokens)
    assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in r) <= row_tokens for r in rows)
    efficiency = lengths.sum() / (len(rows) * row_tokens)
    print(f"packing efficiency {name}: {efficiency:.4f}")
    assert efficiency >= 0.95, (name, efficiency)


def test_packing_efficiency_on_toy_data(toy_tok):
    examples, _ = data.encode_sft_dataset(toy_tok, sums.sft_conversations(1500, 500, seed=1), 512)
    loader = packing.PackedLoader(examples, row_tokens=2048, rows_per_step=8, pad_id=0)
    print(f"packing efficiency toy: {loader.efficiency:.4f}")
    assert loader.efficiency >= 0.95


def _rows_key(rows):
    return [tuple(r["input_ids"].tolist()) for r in rows]


def test_packed_loader_shards_equal_steps_and_covers_each_row_once():
    examples = _random_examples(145, 4, hi=120)
    loaders = [
        packing.PackedLoader(
            examples, 256, rows_per_step=4, pad_id=-1, seed=7, rank=r, world_size=2
        )
        for r in range(2)
    ]
    single = packing.PackedLoader(examples, 256, rows_per_step=4, pad_id=-1, seed=7)
    assert (
        loaders[0].steps_per_epoch
        == loaders[1].steps_per_epoch
        == single.steps_per_epoch
        == len(single)
    )
    assert single.num_rows % 4 != 0, "pick sizes whose last step needs all-padding rows"
    for epoch in range(2):
        got = []
        for step in range(single.steps_per_epoch):
            parts = [ld.next_step() for ld in loaders]
            assert len(parts[0]) == len(parts[1]) == 2
            # 2 ranks = 1 process
            assert _rows_key(parts[0] + parts[1]) == _rows_key(single.next_step())
            got += parts[0] + parts[1]
        real = [r for r in got if (r["input_ids"] != -1).any()]
        empty = [r for r in got if (r["input_ids"] == -1).all()]
        assert len(real) == single.num_rows and len(empty) == single.empty_rows_per_epoch
        assert all(not r["loss_mask"].any() for r in empty)
        assert len(set(_rows_key(real))) == single.num_rows
        if epoch == 0:
            first_epoch = _rows_key(got)
    # reshuffled per epoch
    assert _rows_key(got) != first_epoch
    assert loaders[0].epoch == 2 and loaders[0].step == 0


def test_packed_loader_resumes_mid_epoch():
    examples = _random_examples(120, 5, hi=100)
    # noqa
    make = lambda: packing.PackedLoader(
        examples, 200, rows_per_step=2, pad_id=0, seed=3, rank=1, world_size=2
    )
    straight = make()
    reference = [_rows_key(straight.next_step()) for _ in range(2 * straight.steps_per_epoch + 3)]
    k = straight.steps_per_epoch + 2  # stop in the middle of the second epoch
    first = make()
    for _ in range(k):
        first.next_step()
    state = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint as plain data
    resumed = make()
    resumed.load_state_dict(state)
    assert [_rows_key(resumed.next_step()) for _ in range(len(reference) - k)] == reference[k:]
    other = packing.PackedLoader(examples, 200, rows_per_step=4, pad_id=0, seed=3)
    with pytest.raises(ValueError, match="rows_per_step"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="multiple of world_size"):
        packing.PackedLoader(examples, 200, rows_per_step=3, pad_id=0, world_size=2)


def test_a_resume_with_other_batch_settings_is_one_input_error():
    """sft.py restores its loader through data.read: a checkpoint's loader state from other batch
    settings is the user's input (one line naming the option, exit status 2), not a bug."""
    from parts.trainer import InputError

    loader = packing.PackedLoader(_random_examples(40, 6, hi=100), 200, rows_per_step=4, pad_id=0)
    state = dict(loader.state_dict(), rows_per_step=2)
    with pytest.raises(InputError, match=r"^--resume: cannot resume: .* rows_per_step=2, now 4"):
        data.read("--resume", loader.load_state_dict, state)


# ----------------------------------------------------------------------------- toy math


def _after_think(text):
    return text.split("</think>")[-1]


def test_toy_math_traces_verify_with_math_verify(toy_tok):
    math_verify = pytest.importorskip("math_verify")
    convs = sums.math_sft_examples(300, seed=11)
    n_hard = n_wrong = 0
    for user, assistant in convs:
        a, b = map(int, re.fullmatch(r"What is (\d+) \+ (\d+)\?", user["content"]).groups())
        content = assistant["content"]
        assert content.startswith("<think>\n") and "\n</think>\n\n\\boxed{" in content
        boxed = int(re.fullmatch(r"\\boxed\{(\d+)\}", _after_think(content).strip()).group(1))
        correct = math_verify.verify(
            math_verify.parse("\\boxed{" + str(a + b) + "}"),
            math_verify.parse(_after_think(content)),
        )
        assert correct == (boxed == a + b)
        # the trace is arithmetic a reader can check: at most one column slips, by one, and the
        # answer follows it
        lines = content.split("<think>\n")[1].split("\n</think>")[0].split("\n")
        carry = 0
        digits = []
        slips = 0
        for j, line in enumerate(lines):
            x, y, c, s = map(int, re.fullmatch(r"(\d)\+(\d)\+(\d)=(\d+)", line).groups())
            assert (x, y, c) == ((a // 10**j) % 10, (b // 10**j) % 10, carry)
            slips += s != x + y + c
            assert abs(s - (x + y + c)) <= 1
            digits.append(s % 10)
            carry = s // 10
        assert boxed == int("".join(map(str, reversed(digits + ([carry] if carry else [])))))
        hard = max(len(str(a)), len(str(b))) >= 3
        assert slips == (boxed != a + b) and (hard or slips == 0)
        n_hard += hard
        n_wrong += slips
        assert len(data.encode_chat(toy_tok, [user, assistant])[0]) < 120
    # each hard trace slips with probability p (the default wrong_fraction), independently: the
    # count is Binomial(n_hard, p), so 4 standard deviations either side (a seeded draw, the same on
    # every machine)
    p = inspect.signature(sums.math_sft_examples).parameters["wrong_fraction"].default
    assert abs(n_wrong / n_hard - p) < 4 * (p * (1 - p) / n_hard) ** 0.5, (n_wrong / n_hard, p)
    assert all(
        _after_think(a["content"]).strip() == "\\boxed{" + str(eval(u["content"][8:-1])) + "}"
        for u, a in sums.math_sft_examples(200, seed=11, wrong_fraction=0.0)
    )


def test_toy_math_splits_and_difficulty():
    train = sums.math_problems(3000, seed=0, split="train")
    test = sums.math_problems(400, seed=0, split="test")
    assert not {p["id"] for p in train} & {p["id"] for p in test}
    assert len({p["id"] for p in test}) == 400
    assert {p["id"] for p in sums.math_problems(300, seed=1, split="test")}.isdisjoint(
        {p["id"] for p in train}
    )
    assert sums.math_problems(50, seed=0) == train[:50]
    for p in test:
        a, b = map(int, p["id"].split("-")[1:])
        assert p["answer"] == str(a + b) and p["prompt"] == f"What is {a} + {b}?"
    hard = sums.math_problems(100, seed=0, split="test", min_digits=3, max_digits=4)
    assert all(3 <= len(s) <= 4 for p in hard for s in p["prompt"][8:-1].split(" + "))
    with pytest.raises(ValueError, match="distinct"):
        sums.math_problems(50, seed=0, split="test", min_digits=1, max_digits=1)
    sft_prompts = {c[0]["content"] for c in sums.math_sft_examples(2000, seed=0)}
    assert sft_prompts.isdisjoint(p["prompt"] for p in test)


# ----------------------------------------------------------------------------- toy code

HARNESS = r"""
import contextlib, io, json, sys
results = []
for job in json.load(sys.stdin):
    outs = []
    for test in job["tests"]:
        buf = io.StringIO()
        try:
            if "fn_name" in test:
                scope = {}
                exec(job["code"], scope)
                args = [json.loads(line) for line in test["input"].split("\n") if line.strip()]
                outs.append(json.dumps(scope[test["fn_name"]](*args)))
            else:
                sys.stdin = io.StringIO(test["input"])
                with contextlib.redirect_stdout(buf):
                    exec(job["code"], {"__name__": "__main__"})
                outs.append(buf.getvalue())
        except Exception as e:
            outs.append("ERROR " + repr(e))
    results.append(outs)
print(json.dumps(results))
"""


def _run_programs(jobs):
    """Run (code, tests) jobs in one plain subprocess; compare outputs here, in the parent."""
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS],
        input=json.dumps([{"code": c, "tests": t} for c, t in jobs]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    passed = []
    for (code, tests), outs in zip(jobs, json.loads(proc.stdout)):
        ok = []
        for test, out in zip(tests, outs):
            if "fn_name" in test:
                ok.append(
                    not out.startswith("ERROR") and json.loads(out) == json.loads(test["output"])
                )
            else:
                ok.append(
                    [s.strip() for s in out.strip().split("\n")]
                    == [s.strip() for s in test["output"].strip().split("\n")]
                )
        passed.append(ok)
    return passed


def test_toy_code_solutions_pass_their_tests():
    problems = programs.code_problems(200, seed=0, split="train") + programs.code_problems(
        60, seed=0, split="test"
    )
    assert all(len(p["tests"]) >= 16 for p in problems)
    assert {p["id"].rsplit("-", 1)[0].split("-")[0] for p in problems} == {
        f[0] for f in programs.CODE_FAMILIES
    }
    assert any("fn_name" in p["tests"][0] for p in problems) and any(
        "fn_name" not in p["tests"][0] for p in problems
    )
    results = _run_programs([(p["solutions"][0], p["tests"]) for p in problems])
    assert all(all(r) for r in results), [p["id"] for p, r in zip(problems, results) if not all(r)]
    # the check can fail: a slightly wrong program passes only some tests (room for a soft reward)
    wrong = next(p for p in problems if p["id"].startswith("divisible"))
    [r] = _run_programs([(wrong["solutions"][0].replace("'YES'", "'NO'", 1), wrong["tests"])])
    assert 0 < sum(r) < len(r)


def test_toy_code_sft_answers_and_splits(toy_tok):
    train = programs.code_problems(len(sum(programs._code_pools("train"), [])), split="train")
    test = programs.code_problems(len(sum(programs._code_pools("test"), [])), split="test")
    assert not {p["id"] for p in train} & {p["id"] for p in test}
    by_prompt = {p["prompt"]: p for p in train}
    convs = programs.code_sft_examples(60, seed=2)
    jobs = []
    for user, assistant in convs:
        assert user["content"] in by_prompt, "SFT code problems come from the train split only"
        match = re.fullmatch(
            r"<think>\n.+\n</think>\n\n```python\n(.+)\n```", assistant["content"], re.S
        )
        jobs.append((match.group(1), by_prompt[user["content"]]["tests"]))
        assert len(data.encode_chat(toy_tok, [user, assistant])[0]) < 120
    assert all(all(r) for r in _run_programs(jobs))
    with pytest.raises(ValueError, match="distinct"):
        programs.code_problems(10**4, split="test")


# --------------------------------------------------------------------------- files and command line


def test_toy_files_round_trip_through_the_loaders(toy_files):
    """What tools/toy.py writes reads back, through the loaders of the public formats, as the
    generators' problems: Countdown rows as {id, prompt, numbers, target, kind: countdown}, sums as
    {id, prompt, answer}, programs as LiveCodeBench rows (tests as the sandbox takes them), teacher
    files as prompts with their k responses."""
    from tools.toy_tasks import countdown

    cd = toy_files["countdown"]
    sm = toy_files["sums"]
    for n in (3, 4):
        expected = [dict(p, kind="countdown") for p in countdown.problems(64, n, seed=1234)]
        assert data.load_math_jsonl(os.path.join(cd, "rl", f"countdown_{n}.jsonl")) == expected
        teacher = data.load_responses(os.path.join(cd, "teacher", f"countdown_{n}.jsonl"))
        problems = countdown.problems(25, n, "distill-0", "train")
        assert [
            (t["id"], t["prompt"], t["numbers"], t["target"], t["kind"], t["answer"])
            for t in teacher
        ] == [
            (p["id"], p["prompt"], p["numbers"], p["target"], "countdown", None) for p in problems
        ]
        assert all(
            len(t["responses"]) == 4 and all(r["correct"] is None for r in t["responses"])
            for t in teacher
        )
    loaded = data.load_code_jsonl(os.path.join(cd, "test", "toy_code.jsonl"))
    expected = programs.partial_code_problems(2, 0, "test")
    key = lambda p: (p["id"], p["prompt"], p["tests"])  # noqa: E731
    assert list(map(key, loaded)) == list(map(key, expected))
    assert data.load_math_jsonl(os.path.join(sm, "test", "toy_math.jsonl")) == sums.math_problems(
        6, 0, "test", min_digits=3, max_digits=3
    )
    loaded = data.load_code_jsonl(os.path.join(sm, "rl", "toy_code.jsonl"))  # functional tests too
    expected = programs.code_problems(4, 1234)
    key = lambda p: (p["id"], p["prompt"], p["tests"])  # noqa: E731
    assert list(map(key, loaded)) == list(map(key, expected))
    teacher = data.load_responses(os.path.join(sm, "teacher", "toy_code.jsonl"))
    expected = programs.code_problems(3, 0, "train", num_tests=2)
    assert [(t["id"], t["tests"], t["responses"][0]["content"]) for t in teacher] == [
        (p["id"], p["tests"], programs.code_response(p)) for p in expected
    ]


# sha256 of the toy's sets as the code before tools/toy.py made them (commit 949362f,
# data.toy_problems with gppo.py's and eval.py's settings at the toy_files fixture's sizes), each
# the JSON (sort_keys) of the list of {id, prompt, numbers, target, answer, tests, kind} of its
# problems, kind as gppo.py gives it.
BEFORE_FILES = {
    "countdown/rl/countdown_3": "7f10ceb87e558be59a0742b143c9503c646cd470310fc936d85ab68f0d97fdff",
    "countdown/rl/countdown_4": "4c8da1bc66da5d71c8a27c8c0fdabc1d17aab51ce3157f7e6338df7e2ffd7e57",
    "countdown/rl/toy_code": "70b0837fd59dc61114fa197aa95e5207ac8f00c65627077e8f3823e8fffa1cca",
    "countdown/test/countdown_3": "90c6eff9f0b4f193006e73ee0ee75db04444b723aef752b1725011f0b430f2cc",
    "countdown/test/countdown_4": "932b430b5066e58482d2a662aaf374e0643db08d4dd4e0f2f79710f98332c9ad",
    "countdown/test/toy_code": "851c0fc8ab79a3284f9aaaffbc9c87ff6e43cfea2aaa1a99b2ca222333fa8077",
    "sums/rl/toy_code": "7c159469d8c7a30529edc96462f5d02dc8040371ac7a09d4541db033ef354b4c",
    "sums/rl/toy_math": "09b6dc383036f04832d3de23e39c21c608e8c562b97e606d1c485d64092bcb93",
    "sums/test/toy_code": "f1647b7bcdaaf3ba37256010293812493cd8e673a27a46fd06ba498cfe3661a2",
    "sums/test/toy_math": "50290e0ca4c5e8ed3b64f39078791c3a55b1baa29df73f54e67d26e3fd3c3818",
    # tokenizer.json as data.build_toy_tokenizer(task) saved it
    "countdown/tokenizer": "cbbbeb6c4aa763f8592f4b8f68ec9193fa2d867787bc8e979df8549069f451d0",
    "sums/tokenizer": "801b9b8e262efc22ac73fe6bea291d6f743e55ed1f7b8922657293424815ce61",
}


def test_toy_files_hold_what_the_toy_gave_before_it_became_files(toy_files):
    """The RL prompts, held-out sets and tokenizers of tools/toy.py, read as gppo.py and eval.py
    read them, are the ones the entry points built in before (BEFORE_FILES): same problems, same
    order, same tokenizer bytes."""
    import hashlib

    keys = ("id", "prompt", "numbers", "target", "answer", "tests", "kind")
    found = {}
    for task in ("countdown", "sums"):
        for folder in ("rl", "test"):
            for name in sorted(os.listdir(os.path.join(toy_files[task], folder))):
                path = os.path.join(toy_files[task], folder, name)
                problems = (
                    [dict(p, kind="code") for p in data.load_code_jsonl(path)]
                    if name == "toy_code.jsonl"
                    else [{"kind": "math", **p} for p in data.load_math_jsonl(path)]
                )
                text = json.dumps(
                    [{k: p[k] for k in keys if k in p} for p in problems], sort_keys=True
                )
                found[f"{task}/{folder}/{name[:-6]}"] = hashlib.sha256(text.encode()).hexdigest()
        with open(os.path.join(toy_files[task], "tokenizer", "tokenizer.json"), "rb") as f:
            found[f"{task}/tokenizer"] = hashlib.sha256(f.read()).hexdigest()
    assert found == BEFORE_FILES


def test_command_line(tmp_path, toy_files):
    # noqa: E731
    run = lambda tool, *args: subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", tool), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run(
        "toy.py",
        "--task=sums",
        f"--out={tmp_path}",
        "--math_prompts=60",
        "--code_prompts=3",
        "--code_tests=2",
        "--code_k=2",
        "--rl_problems=96",
        "--rl_programs=4",
        "--test_problems=6",
        "--test_programs=3",
    )
    assert out.returncode == 0, out.stderr
    written = sorted(
        os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs
    )
    assert written == [
        "rl/toy_code.jsonl",
        "rl/toy_math.jsonl",
        "teacher/toy_code.jsonl",
        "teacher/toy_math.jsonl",
        "test/toy_code.jsonl",
        "test/toy_math.jsonl",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
    ]
    # another process (another hash seed) writes the same bytes: the tokenizer, the teacher's
    # samples, every set
    for name in written:
        assert (
            open(tmp_path / name, "rb").read()
            == open(os.path.join(toy_files["sums"], name), "rb").read()
        ), name
    out = run(
        "data_stats.py",
        str(tmp_path / "test" / "toy_math.jsonl"),
        f"--tokenizer={tmp_path / 'tokenizer'}",
    )
    assert out.returncode == 0 and "6 math records" in out.stdout, out.stdout + out.stderr
    out = run("data_stats.py", os.path.join(FIXTURES, "apps_taco.jsonl"))
    assert (
        out.returncode == 0
        and "5 code records" in out.stdout
        and "'dropped_few_tests': 1" in out.stdout
    ), out.stdout
    out = run("toy.py", "--task=chess")
    assert out.returncode != 0 and "--task='chess': use countdown or sums" in out.stderr, out.stderr
