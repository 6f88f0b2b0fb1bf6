"""The toy tasks as files, in the formats of public data sets, so the pipeline runs on them as on
real data:

    python tools/toy.py --task=countdown          # writes out/toy/countdown/ (~1 min on one core)
    python tools/toy.py --task=sums               # the first toy, multi-digit sums: out/toy/sums/

out/toy/<task>/ holds
    tokenizer/        tokenizer.json + tokenizer_config.json: Qwen3's shape, trained on the task (sft.py --tokenizer)
    teacher/*.jsonl   the distillation prompts, each with the toy teacher's k responses in OpenR1-Math-220k's layout
                      ({id, problem, generations} + the task's fields): distill.py --responses verifies them and keeps
                      them by the paper's rule, as it does for OpenR1's
    rl/*.jsonl        RL prompts (gppo.py --math_data / --code_data)
    test/*.jsonl      held-out sets (eval.py --math_data / --code_data; gppo.py --eval_data)
The formats: Countdown rows as TinyZero publishes them ({target, nums}, plus id and problem, the
prompt), sums as {id, problem, answer}, programs as LiveCodeBench rows (teacher files: {problem,
test_cases}). Every file is a pure function of the options: the same options write the same bytes.
The content (generators, teachers, tokenizer trainer) lives in tools/toy_tasks/;
docs/toy_countdown.md and docs/toy_sums.md tell the tasks.
"""

import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from parts import chat_template  # noqa: E402  (the chat format the tokenizer is trained on)
from parts.cli import parse_config  # noqa: E402
from tools.toy_tasks import countdown, programs, sums, tokenizer  # noqa: E402

TASKS = ("countdown", "sums")
# the held-out sets are the same whatever --seed: every run is evaluated on the same problems
TEST_SEED = 0


@dataclass
class ToyConfig:
    # fmt: off
    task: str = "countdown"      # countdown (reach a target from numbers; the teacher searches) | sums (it slips)
    out: str = ""                # the directory written; empty = out/toy/<task>
    seed: int = 0                # the teacher's prompts and its samples
    rl_seed: int = 1234          # which RL prompts
    # the teacher's files (distill.py applies the paper's rule to them)
    k: int = 4                   # responses per prompt
    easy_prompts: int = 2500     # countdown: prompts with 3 numbers
    hard_prompts: int = 5000     # countdown: prompts with 4 numbers
    math_prompts: int = 16000    # sums: addition prompts (1-4 digit operands)
    code_prompts: int = 0        # programming prompts; 0 = the task's: countdown 400, sums 224 (all there are)
    code_k: int = 0              # responses per programming prompt; 0 = the task's: countdown 8, sums 36 (~ the 8,000
    #   programs its toy model needs: its teacher always writes the one reference program)
    code_tests: int = 4          # tests per programming prompt the teacher's programs are run on
    naive: float = 0.5           # countdown's programs: the teacher's chance of the naive one (partial credit)
    slip_hard: float = 0.72      # sums: the teacher's chance of one slip in a trace with a 3+ digit operand
    slip_easy: float = 0.05      # sums: ... with 1-2 digit operands (the rule drops these slips: easy prompts)
    # RL prompts and held-out sets (sums: 3-digit operands, where the SFT model slips at T = 1)
    rl_problems: int = 2000      # RL prompts per set (countdown: 3 and 4 numbers)
    rl_programs: int = 200       # RL programming prompts (16 tests each)
    test_problems: int = 200     # held-out problems per set
    test_programs: int = 20      # held-out programs (16 tests each)
    vocab_size: int = 0          # the tokenizer's vocabulary; 0 = the task's: countdown 512, sums 640
    # fmt: on

    def __post_init__(self):
        if self.task not in TASKS:
            raise SystemExit(f"error: --task={self.task!r}: use {' or '.join(TASKS)}")
        defaults = TASK_DEFAULTS[self.task]
        self.code_prompts = self.code_prompts or defaults["code_prompts"]
        self.code_k = self.code_k or defaults["code_k"]
        self.vocab_size = self.vocab_size or defaults["vocab_size"]
        self.out = self.out or os.path.join("out", "toy", self.task)


TASK_DEFAULTS = {
    "countdown": dict(code_prompts=400, code_k=8, vocab_size=512),
    "sums": dict(code_prompts=224, code_k=36, vocab_size=640),
}


def main(cfg: ToyConfig) -> dict:
    """Write every file of the task; returns {relative path: rows} (the tokenizer: its vocabulary
    size)."""
    t0 = time.time()
    written = {}

    def write(name, rows):
        path = os.path.join(cfg.out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        os.replace(path + ".tmp", path)
        written[name] = len(rows)

    tok = build_tokenizer(cfg.task, cfg.vocab_size)
    tokenizer.save(tok, os.path.join(cfg.out, "tokenizer"))
    written["tokenizer/"] = tok.get_vocab_size()
    if cfg.task == "countdown":
        write_countdown(cfg, write)
    else:
        write_sums(cfg, write)
    for name, rows in written.items():
        print(
            f"{os.path.join(cfg.out, name):48s} {rows:>6d} {'tokens' if name == 'tokenizer/' else 'rows'}"
        )
    print(f"wrote {cfg.task}'s files in {time.time() - t0:.1f}s")
    return written


def write_countdown(cfg: ToyConfig, write) -> None:
    """The searching teacher on 3- and 4-number prompts, and its programs that earn partial credit
    (the naive one with probability cfg.naive); RL prompts and held-out sets of both sizes and of
    programs."""
    for n, count in ((3, cfg.easy_prompts), (4, cfg.hard_prompts)):
        source = f"countdown_{n}"
        rows = []
        for p in countdown.problems(count, n, f"distill-{cfg.seed}", "train"):
            responses = [
                countdown.teacher_response(p, teacher_rng(cfg.seed, source, p["id"], j))
                for j in range(cfg.k)
            ]
            rows.append(dict(countdown_row(p), generations=responses))
        write(f"teacher/{source}.jsonl", rows)
    rows = []
    for p in programs.partial_code_problems(cfg.code_prompts, cfg.seed, "train", cfg.code_tests):
        responses = [
            programs.partial_code_response(
                p, teacher_rng(cfg.seed, "toy_code", p["id"], j), cfg.naive
            )
            for j in range(cfg.code_k)
        ]
        rows.append(
            dict(id=p["id"], problem=p["prompt"], test_cases=p["tests"], generations=responses)
        )
    write("teacher/toy_code.jsonl", rows)
    for n in (3, 4):
        rl = countdown.problems(cfg.rl_problems, n, cfg.rl_seed)
        write(f"rl/countdown_{n}.jsonl", [countdown_row(p) for p in rl])
        write(
            f"test/countdown_{n}.jsonl",
            [countdown_row(p) for p in countdown.problems(cfg.test_problems, n, TEST_SEED, "test")],
        )
    write(
        "rl/toy_code.jsonl",
        [
            livecodebench_row(p)
            for p in programs.partial_code_problems(cfg.rl_programs, cfg.rl_seed, "train")
        ],
    )
    write(
        "test/toy_code.jsonl",
        [
            livecodebench_row(p)
            for p in programs.partial_code_problems(cfg.test_programs, TEST_SEED, "test")
        ],
    )


def write_sums(cfg: ToyConfig, write) -> None:
    """The slipping teacher on addition prompts (slip_hard on sums with a 3+ digit operand,
    slip_easy otherwise), its one reference program k times per programming prompt; RL prompts and
    held-out sets of 3-digit sums and of programs."""
    rows = []
    for p in sums.math_problems(cfg.math_prompts, seed=f"distill-{cfg.seed}", split="train"):
        a, b = map(int, p["id"].split("-")[1:])
        slip = cfg.slip_hard if max(len(str(a)), len(str(b))) >= 3 else cfg.slip_easy
        responses = [
            sums.math_response(a, b, teacher_rng(cfg.seed, "toy_math", p["id"], j), slip)
            for j in range(cfg.k)
        ]
        rows.append(
            dict(id=p["id"], problem=p["prompt"], answer=p["answer"], generations=responses)
        )
    write("teacher/toy_math.jsonl", rows)
    rows = [
        dict(
            id=p["id"],
            problem=p["prompt"],
            test_cases=p["tests"],
            generations=[programs.code_response(p)] * cfg.code_k,
        )
        for p in programs.code_problems(cfg.code_prompts, cfg.seed, "train", cfg.code_tests)
    ]
    write("teacher/toy_code.jsonl", rows)
    for folder, n, seed, split in (
        ("rl", cfg.rl_problems, cfg.rl_seed, "train"),
        ("test", cfg.test_problems, TEST_SEED, "test"),
    ):
        write(
            f"{folder}/toy_math.jsonl",
            [
                dict(id=p["id"], problem=p["prompt"], answer=p["answer"])
                for p in sums.math_problems(n, seed, split, min_digits=3, max_digits=3)
            ],
        )
    write(
        "rl/toy_code.jsonl",
        [livecodebench_row(p) for p in programs.code_problems(cfg.rl_programs, cfg.rl_seed)],
    )
    write(
        "test/toy_code.jsonl",
        [
            livecodebench_row(p)
            for p in programs.code_problems(cfg.test_programs, TEST_SEED, "test")
        ],
    )


def teacher_rng(seed: int, source: str, pid: str, j: int) -> random.Random:
    """Sample j's random stream: seeded by sha256 of (seed, the file's name / the prompt's id, j),
    the seed distill.py gives sample j of that prompt (distill.sample_seed), so a sample never
    depends on which others were drawn."""
    key = f"{seed}/{source}/{pid}/{j}"
    return random.Random(
        int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") & 0x7FFFFFFF
    )


def countdown_row(p: dict) -> dict:
    """A Countdown problem as TinyZero's data set writes one ({target, nums}), with its id and
    prompt."""
    return dict(id=p["id"], problem=p["prompt"], target=p["target"], nums=p["numbers"])


def livecodebench_row(p: dict) -> dict:
    """A toy programming problem as a LiveCodeBench row: 3 public tests, the rest private, the
    function's name (of functional tests) in the metadata."""
    cases = [
        dict(
            input=t["input"],
            output=t["output"],
            testtype="functional" if "fn_name" in t else "stdin",
        )
        for t in p["tests"]
    ]
    fn = p["tests"][0].get("fn_name")
    return dict(
        question_id=p["id"],
        question_content=p["prompt"],
        starter_code="",
        public_test_cases=json.dumps(cases[:3]),
        private_test_cases=json.dumps(cases[3:]),
        metadata=json.dumps({"func_name": fn} if fn else {}),
    )


def build_tokenizer(task: str, vocab_size: int = 0):
    """The task's tokenizer, trained on a fixed corpus of its conversations rendered in the chat
    format (seeds of their own), so its vocabulary stays the same when the files' sizes or seeds
    change."""
    if task == "countdown":  # its searches and its programs
        rng = random.Random(20251204)
        pairs = [
            (p["prompt"], countdown.teacher_response(p, rng))
            for n, count in ((3, 1300), (4, 2700))
            for p in countdown.problems(count, n, "tokenizer", "train")
        ]
        pairs += [
            (p["prompt"], programs.partial_code_response(p, rng))
            for p in programs.partial_code_problems(600, "tokenizer")
        ]
        conversations = [
            [{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in pairs
        ]
    else:
        conversations = sums.sft_conversations(3000, 1500, seed=20250807, wrong_fraction=0.3)
    vocab_size = vocab_size or TASK_DEFAULTS[task]["vocab_size"]
    return tokenizer.train([chat_template.render_chat(c) for c in conversations], vocab_size)


if __name__ == "__main__":
    main(
        parse_config(
            ToyConfig, usage="usage: python tools/toy.py [--task=countdown|sums] [--key=value ...]"
        )
    )
