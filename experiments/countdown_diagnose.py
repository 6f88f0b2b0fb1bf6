"""Where do a Countdown model's samples go wrong? Each sample is sorted into exactly one bucket,
checked line by line against its own problem (the teacher's format: one attempt per line,
`12+5=17*3=51 vs 41 no`; tools/toy_tasks/countdown.py):

    right       the reward is 1
    format      no `</think>`, no parsable boxed answer, or a think line that is not an attempt (often: cut off)
    arithmetic  some attempt has a wrong result (x op y != r) or an operation outside the teacher's (r <= 0, r > cap,
                an inexact division)
    numbers     every step is right, but some attempt does not use exactly the given numbers
    false_yes   every attempt is well formed, but one says "yes" for a value that is not the target (or "no" for one
                that is)
    answer      an attempt reached the target and said yes, yet the boxed answer is wrong
    gave_up     every attempt is right, none reached the target: the search ran out (the teacher's budget does too)

and, beside the buckets: attempts per response (right and gave_up), repeated attempts, response
tokens. A model that mostly gives up after correct attempts can gain from searching longer or better
(RL's job); one whose attempts are wrong needs more SFT. The problems: the toy's held-out sets
(python tools/toy.py). Run (after `bash train.sh`, or on any
Countdown checkpoint):
  python experiments/countdown_diagnose.py --model=out/sft/hf
  python experiments/countdown_diagnose.py --model=out/gppo/hf --numbers=3 --problems=100
"""

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import data  # noqa: E402
from parts import countdown_check  # noqa: E402
from parts.cli import parse_config  # noqa: E402
from tools.toy_tasks import countdown  # noqa: E402
from model import from_pretrained  # noqa: E402
from rollout import LLMEngine, SamplingParams  # noqa: E402

BUCKETS = ("right", "format", "arithmetic", "numbers", "false_yes", "answer", "gave_up")


@dataclass
class DiagnoseConfig:
    # fmt: off
    model: str = "out/sft/hf"    # a Countdown Hugging Face directory (with tokenizer.json)
    numbers: str = "3,4"         # numbers per problem, one table row each
    toy_dir: str = "out/toy/countdown"   # the toy's files: test/countdown_<numbers>.jsonl (python tools/toy.py)
    problems: int = 200          # held-out problems per row (the first of the file)
    samples: int = 8             # samples per problem at temperature 1 (greedy: one)
    max_tokens: int = 400        # new tokens per sample (eval.py's toy default in train.sh)
    seed: int = 0                # the sampling seeds
    threads: int = 0             # torch threads; 0 = torch's default
    # fmt: on


LINE = re.compile(r"^(\d+)((?:[-+*/]\d+=\d+)+) vs (\d+) (yes|no)$")
STEP = re.compile(r"([-+*/])(\d+)=(\d+)")


def parse_attempt(line: str):
    """(first number, [(op, y, r)], target written, said yes) of an attempt line, or None."""
    m = LINE.match(line)
    if not m:
        return None
    return (
        int(m.group(1)),
        [(op, int(y), int(r)) for op, y, r in STEP.findall(m.group(2))],
        int(m.group(3)),
        m.group(4) == "yes",
    )


def classify(text: str, numbers, target) -> tuple:
    """(bucket, attempts) of one sample's text: see the module docstring."""
    if countdown_check.countdown_reward(text, numbers, target) == 1.0:
        return "right", text.count(" vs ")
    think = re.search(r"<think>\n(.*?)\n</think>", text, re.S)
    if not think or countdown_check.parse_expression(countdown_check.extract_answer(text)) is None:
        return "format", text.count(" vs ")
    attempts = [parse_attempt(line) for line in think.group(1).split("\n")]
    if not attempts or any(a is None for a in attempts):
        return "format", len(attempts)
    worst = "gave_up"
    for first, steps, written_target, yes in attempts:
        value = first
        used = [first]
        for op, y, r in steps:
            s = countdown.step(value, y, op)
            if s is None or s[3] != r:
                return "arithmetic", len(attempts)
            value = r
            used.append(y)
        if Counter(used) != Counter(int(v) for v in numbers):
            worst = "numbers"
        elif worst == "gave_up" and (yes != (value == target) or written_target != target):
            worst = "false_yes"
        elif worst == "gave_up" and yes:
            worst = "answer"
    return worst, len(attempts)


def main(cfg: DiagnoseConfig):
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model = from_pretrained(cfg.model).eval()
    tokenizer = data.load_tokenizer(cfg.model)
    engine = LLMEngine(model, max_num_seqs=256, max_model_len=64 + cfg.max_tokens)
    stop = tuple(data.stop_token_ids(tokenizer))
    print(
        f"{cfg.model}: {cfg.problems} held-out problems per row, {cfg.samples} samples at T=1 and greedy; "
        f"fractions of samples"
    )
    print(
        f"{'numbers':>7} {'mode':>6} "
        + " ".join(f"{b:>10}" for b in BUCKETS)
        + "  attempts(right/gave_up) repeats tokens"
    )
    rows = []
    for n in [int(v) for v in cfg.numbers.split(",")]:
        problems = data.load_math_jsonl(os.path.join(cfg.toy_dir, "test", f"countdown_{n}.jsonl"))[
            : cfg.problems
        ]
        prompts = data.encode_prompts(tokenizer, problems, 64)[0]
        sampled = [
            SamplingParams(
                temperature=1.0,
                n=cfg.samples,
                max_tokens=cfg.max_tokens,
                stop_token_ids=stop,
                seed=cfg.seed * 1_000_003 + i,
            )
            for i in range(len(prompts))
        ]
        greedy = SamplingParams(temperature=0.0, max_tokens=cfg.max_tokens, stop_token_ids=stop)
        for mode, params in (("T=1", sampled), ("greedy", greedy)):
            outputs = engine.generate([p["prompt_ids"] for p in prompts], params)
            counts = Counter()
            attempts = {"right": [], "gave_up": []}
            repeats = 0
            tokens = []
            for p, samples in zip(prompts, outputs):
                for s in samples:
                    text = tokenizer.decode(s.token_ids, skip_special_tokens=False)
                    bucket, k = classify(text, p["numbers"], p["target"])
                    counts[bucket] += 1
                    attempts.get(bucket, []).append(k)
                    lines = [line for line in text.split("\n") if " vs " in line]
                    repeats += len(lines) > len(set(lines))
                    tokens.append(len(s.token_ids))
            total = sum(counts.values())
            mean = {b: sum(v) / len(v) if v else float("nan") for b, v in attempts.items()}
            row = dict(
                n=n,
                mode=mode,
                samples=total,
                **{b: counts[b] / total for b in BUCKETS},
                attempts_right=mean["right"],
                attempts_gave_up=mean["gave_up"],
                repeats=repeats / total,
                tokens=sum(tokens) / total,
            )
            rows.append(row)
            print(
                f"{n:>7} {mode:>6} "
                + " ".join(f"{row[b]:>10.3f}" for b in BUCKETS)
                + f"  {mean['right']:>5.1f} / {mean['gave_up']:>4.1f}        {row['repeats']:>6.3f} {row['tokens']:>6.1f}"
            )
    return rows


if __name__ == "__main__":
    main(parse_config(DiagnoseConfig))
