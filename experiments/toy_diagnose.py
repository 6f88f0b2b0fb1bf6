"""Where do the toy model's addition samples go wrong? A diagnosis by digit count.

The toy trace is one line `x+y+carry=s` per column, right to left, then `\\boxed{answer}`
(sums.addition_trace in tools/toy_tasks/sums.py; the held-out sums of each digit count are made by
its generator). Each sample is sorted into exactly one bucket, checked against the true column sums
of its own problem:

    right     the boxed answer is the sum
    trace     some line of the trace is wrong (a wrong digit, carry or sum, or a missing/extra column)
    assemble  every trace line is right but the boxed answer is not the number the lines spell
    format    no parsable trace or no \\boxed{} (cut off, or a malformed line)

Run (after `TOY=sums bash train.sh`, or on any sums checkpoint):
  python experiments/toy_diagnose.py --model=out/sft/hf                     # T=1 and greedy, 1..4 digits
  python experiments/toy_diagnose.py --model=out/gppo/hf --samples=8 --problems=100
"""

import os
import re
import sys
from dataclasses import dataclass

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import data  # noqa: E402
from parts.cli import parse_config  # noqa: E402
from tools.toy_tasks import sums  # noqa: E402
from model import from_pretrained  # noqa: E402
from rollout import LLMEngine, SamplingParams  # noqa: E402


@dataclass
class DiagnoseConfig:
    # fmt: off
    model: str = "out/sft/hf"    # a toy Hugging Face directory (with tokenizer.json)
    problems: int = 100          # held-out problems per digit count
    samples: int = 4             # samples per problem at temperature 1 (greedy: one)
    max_digits: int = 4          # digit counts 1..max_digits (both operands have that many digits)
    max_tokens: int = 192        # new tokens per sample
    seed: int = 0
    # fmt: on


LINE = re.compile(r"^(\d)\+(\d)\+(\d)=(\d+)$")


def classify(a: int, b: int, text: str) -> str:
    """right | trace | assemble | format, for one sample's text (see the module docstring)."""
    boxed = re.search(r"\\boxed\{(-?\d+)\}", text)
    think = re.search(r"<think>\n(.*?)\n</think>", text, re.S)
    if boxed and int(boxed.group(1)) == a + b:
        return "right"
    if not boxed or not think:
        return "format"
    lines = think.group(1).split("\n")
    if not all(LINE.match(line) for line in lines):
        return "format"
    truth = sums.addition_trace(a, b)[0].split("\n")
    if lines != truth:
        return "trace"
    return "assemble"  # the trace is the true one, yet the answer is not its sum


def main(cfg: DiagnoseConfig):
    torch.manual_seed(cfg.seed)
    model = from_pretrained(cfg.model).eval()
    tokenizer = data.load_tokenizer(cfg.model)
    engine = LLMEngine(model, max_num_seqs=256, max_model_len=64 + cfg.max_tokens)
    stop = tuple(data.stop_token_ids(tokenizer))
    print(
        f"{cfg.model}: {cfg.problems} held-out problems per digit count; T=1: {cfg.samples} samples each"
    )
    print(f"{'digits':>6} {'mode':>6} {'right':>6} {'trace':>6} {'assemble':>8} {'format':>6}")
    for digits in range(1, cfg.max_digits + 1):
        # 1-digit sums have only 10 held-out pairs; the count per digit count is whatever exists up
        # to --problems
        problems = sums.math_problems(
            min(cfg.problems, 10 if digits == 1 else cfg.problems), cfg.seed, "test", digits, digits
        )
        prompts = data.encode_prompts(tokenizer, problems, 64)[0]
        # one seed per problem: with a single seed, sample j of every problem would draw the same
        # uniforms, and one extreme uniform would put the same tail token into the same position of
        # every problem's sample j
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
        for mode, params in (
            ("T=1", sampled),
            (
                "greedy",
                SamplingParams(temperature=0.0, max_tokens=cfg.max_tokens, stop_token_ids=stop),
            ),
        ):
            outputs = engine.generate([p["prompt_ids"] for p in prompts], params)
            counts = dict(right=0, trace=0, assemble=0, format=0)
            for p, samples in zip(prompts, outputs):
                a, b = map(int, p["id"].split("-")[1:])
                for s in samples:
                    counts[
                        classify(a, b, tokenizer.decode(s.token_ids, skip_special_tokens=False))
                    ] += 1
            total = sum(counts.values())
            print(
                f"{digits:>6} {mode:>6} "
                + " ".join(
                    f"{counts[k] / total:>{w}.2f}"
                    for k, w in (("right", 6), ("trace", 6), ("assemble", 8), ("format", 6))
                )
            )


if __name__ == "__main__":
    main(parse_config(DiagnoseConfig))
