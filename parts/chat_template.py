"""Qwen3's chat template in Python (tools left out): the text the template renders for a list of
{"role", "content"} messages, and the character span of the last assistant turn's generated part,
which SFT trains on:
    <|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{answer}<|im_end|>\n
An assistant turn after the last user query keeps its reasoning in a <think> block (the last turn
always, even empty); earlier ones keep only their answer, as the template does. With the
generation prompt the text ends in `<|im_start|>assistant\n` (and an empty think block if thinking
is off). Other roles, tool calls and non-string content are refused (ValueError). No imports;
data.py's encoders are the caller:
    text = render_chat([{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True)
    text, (start, end) = render(messages)   # text[start:end]: the last assistant turn
"""


def render_chat(messages, add_generation_prompt: bool = False, enable_thinking: bool = True) -> str:
    """The text Qwen3's chat template renders for these messages (no tools)."""
    return render(messages, add_generation_prompt, enable_thinking)[0]


def render(messages, add_generation_prompt: bool = False, enable_thinking: bool = True) -> tuple:
    """Qwen3's chat template in Python. Returns (text, (start, end)): the character span of the last
    assistant turn's generated part, from just after `<|im_start|>assistant\\n` through `<|im_end|>`."""
    _check_messages(messages)
    parts = []
    span = None
    if messages[0]["role"] == "system":
        parts.append(f"<|im_start|>system\n{messages[0]['content']}<|im_end|>\n")
    # the last "real" user query; assistant turns after it keep their reasoning
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        c = messages[i]["content"]
        if messages[i]["role"] == "user" and not (
            c.startswith("<tool_response>") and c.endswith("</tool_response>")
        ):
            last_query = i
            break
    for i, message in enumerate(messages):
        role = message["role"]
        content = message["content"]
        if role == "user" or (role == "system" and i > 0):
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif role == "assistant":
            reasoning = message.get("reasoning_content")
            if reasoning is None:
                reasoning = ""
                if "</think>" in content:
                    reasoning = (
                        content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                    )
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
        parts.append(
            "<|im_start|>assistant\n" + ("" if enable_thinking else "<think>\n\n</think>\n\n")
        )
    return "".join(parts), span


def _check_messages(messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, message in enumerate(messages):
        roles = ("system", "user", "assistant")
        if not isinstance(message, dict) or message.get("role") not in roles:
            role = message.get("role") if isinstance(message, dict) else message
            raise ValueError(
                f"messages[{i}]: role {role!r} is not supported (system, user, assistant; "
                "tool calls are not supported by this implementation)"
            )
        if not isinstance(message.get("content"), str):
            content_type = type(message.get("content")).__name__
            raise ValueError(f"messages[{i}].content must be a string, got {content_type}")
        if message.get("tool_calls"):
            raise ValueError(f"messages[{i}]: tool_calls are not supported by this implementation")
