"""A byte-level BPE tokenizer shaped like Qwen3's, trained in a second on any texts (no download):
NFC, Qwen's split regex (digits are single tokens), byte-level bytes, and Qwen3's 26 added tokens
after the learned vocabulary, so chat
code written for Qwen3 (its <|im_start|>, <|im_end|>, <think> tokens) runs on it unchanged: the toy tasks' tokenizer.

    tok = train(texts, vocab_size=640)          # a tokenizers.Tokenizer; deterministic for the same texts
    save(tok, "out/tokenizer")                   # tokenizer.json + a Qwen3-style tokenizer_config.json
Needs the tokenizers library only.
"""

import json
import os
import re

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)


def train(texts, vocab_size: int = 640) -> Tokenizer:
    """The tokenizer, its BPE trained on `texts` (the text between added tokens is what it learns
    from, as the finished tokenizer will see it); vocab_size counts the added tokens."""
    tok = Tokenizer(models.BPE())  # no unk token: every byte has a token
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN3_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(QWEN3_ADDED_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    added = "|".join(re.escape(c) for c, _ in QWEN3_ADDED_TOKENS)
    tok.train_from_iterator(
        [piece for text in texts for piece in re.split(added, text) if piece], trainer
    )
    for content, special in QWEN3_ADDED_TOKENS:  # one by one, so ids follow Qwen3's order
        token = AddedToken(content, special=special, normalized=False)
        tok.add_special_tokens([token]) if special else tok.add_tokens([token])
    return tok


def save(tok: Tokenizer, out_dir: str, model_max_length: int = 131072) -> None:
    """Write tokenizer.json and a Qwen3-style tokenizer_config.json (special tokens, eos, pad, chat
    template), so transformers' AutoTokenizer loads the directory too."""
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    added = {
        str(tok.token_to_id(c)): dict(
            content=c, lstrip=False, normalized=False, rstrip=False, single_word=False, special=s
        )
        for c, s in QWEN3_ADDED_TOKENS
    }
    config = dict(
        add_bos_token=False,
        add_prefix_space=False,
        added_tokens_decoder=added,
        additional_special_tokens=[c for c, s in QWEN3_ADDED_TOKENS[1:] if s],
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        eos_token="<|im_end|>",
        errors="replace",
        model_max_length=model_max_length,
        pad_token="<|endoftext|>",
        split_special_tokens=False,
        tokenizer_class="Qwen2Tokenizer",
        unk_token=None,
    )
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


# Qwen3's added tokens in id order (151643...151668); True = "special" (dropped by
# skip_special_tokens).
QWEN3_ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]


# Qwen's pre-tokenizer: words, single digits, punctuation runs, newlines, spaces.
QWEN3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


# Qwen3's chat template without tools, for tokenizer_config.json (a test renders it with jinja2
# against data.py's).
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
