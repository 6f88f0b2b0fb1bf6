"""The toy tasks as files: the toy tokenizer and SFT, math and code data sets in the formats data.py's loaders read
(messages; problem/answer; LiveCodeBench rows), for trying the scripts on files.

    python tools/toy_data.py --out=out/toy        # tokenizer/, sft.jsonl, math_{train,test}.jsonl, code_{train,test}.jsonl
"""
import json
import os
import sys
from dataclasses import dataclass, fields, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import data  # noqa: E402
from parts import toy  # noqa: E402
from parts.cli import parse_config  # noqa: E402


@dataclass
class ToyConfig:
    """The toy tokenizer and data sets as files (write_toy_datasets), in the formats the loaders read."""
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
    data.save_tokenizer(data.build_toy_tokenizer("sums", cfg.vocab_size), paths["tokenizer"])

    def write(name, records):
        paths[name] = os.path.join(out_dir, f"{name}.jsonl")
        with open(paths[name], "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    conversations = toy.sft_conversations(cfg.n_sft_math, cfg.n_sft_code, cfg.seed, cfg.wrong_fraction)
    write("sft", ({"messages": c} for c in conversations))
    for split, n in (("train", cfg.n_math_train), ("test", cfg.n_math_test)):
        write(f"math_{split}", ({"id": p["id"], "problem": p["prompt"], "answer": p["answer"]}
                                for p in toy.math_problems(n, cfg.seed, split)))
    for split, n in (("train", cfg.n_code_train), ("test", cfg.n_code_test)):
        rows = []
        for p in toy.code_problems(n, cfg.seed, split):
            cases = [{"input": t["input"], "output": t["output"],
                      "testtype": "functional" if "fn_name" in t else "stdin"} for t in p["tests"]]
            fn = p["tests"][0].get("fn_name")
            rows.append(dict(question_id=p["id"], question_content=p["prompt"], starter_code="",
                             public_test_cases=json.dumps(cases[:3]), private_test_cases=json.dumps(cases[3:]),
                             metadata=json.dumps({"func_name": fn} if fn else {})))
        write(f"code_{split}", rows)
    return paths


if __name__ == "__main__":
    cfg = parse_config(ToyConfig)
    for name, path in write_toy_datasets(cfg.out, **{f.name: getattr(cfg, f.name) for f in fields(cfg)
                                                      if f.name != "out"}).items():
        print(f"{name:12s} {path}")
