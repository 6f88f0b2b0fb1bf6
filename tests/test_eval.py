"""eval.py: pass@k (parts/pass_at_k.py) against exact binomials and a brute-force count over
subsets; Avg@k, pass@k and the other metrics on a fake engine whose per-problem success is known;
clear errors for bad benchmark files; an end-to-end run on a tiny random Qwen3 (files and fields
consistent); 1 process == 2 processes."""

import itertools
import json
import math
import os
import subprocess
import sys
from fractions import Fraction

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data  # noqa: E402
import eval as ev  # noqa: E402
from rollout import Sample  # noqa: E402
from parts.pass_at_k import pass_at_k, pass_ks, summarize  # noqa: E402
from parts.trainer import InputError  # noqa: E402
from tools.toy_tasks import countdown, programs, sums  # noqa: E402

# on the sums toy's held-out sets (toy_data below)
TINY_RUN = ["--k=3", "--max_tokens=24", "--pass_k=1,2,3"]


@pytest.fixture(scope="module", autouse=True)
def toy_data(toy_files):
    """The sums toy's held-out sets (tests/conftest.py: 6 problems, 3 programs) for the runs of
    TINY_RUN."""
    TINY_RUN[:0] = [
        f"--math_data={toy_files['sums']}/test/toy_math.jsonl",
        f"--code_data={toy_files['sums']}/test/toy_code.jsonl",
    ]


@pytest.fixture(scope="module")
def tokenizer(toy_files):
    return data.load_tokenizer(os.path.join(toy_files["sums"], "tokenizer"))


def run_cli(*args, nproc=1, cwd=ROOT):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launcher = (
        [sys.executable]
        if nproc == 1
        else [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
        ]
    )
    return subprocess.run(
        launcher + [os.path.join(ROOT, "eval.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=cwd,
    )


def read_run(out_dir):
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(out_dir, "samples.jsonl")) as f:
        return results, [json.loads(line) for line in f]


# ----------------------------------------------------------------------------- pass@k


def test_pass_at_k_hand_computed():
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)
    assert pass_at_k(4, 0, 2) == 0.0
    # n - c < k: every pair has a hit
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    # large n where C(n, k) overflows a float: the product form stays exact to ~1e-12
    exact = 1 - Fraction(math.comb(5000, 100), math.comb(10000, 100))
    assert pass_at_k(10000, 5000, 100) == pytest.approx(float(exact), abs=1e-12)
    exact = 1 - Fraction(math.comb(1990, 64), math.comb(2000, 64))
    assert pass_at_k(2000, 10, 64) == pytest.approx(float(exact), rel=1e-10)
    for bad in [(4, 5, 1), (4, 1, 5), (4, 1, 0), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_pass_at_k_equals_brute_force_over_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                brute = sum(any(s) for s in subsets) / len(subsets)
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_default_pass_ks_and_bad_values():
    assert pass_ks(ev.EvalConfig(k=8)) == [1, 4, 8]
    assert pass_ks(ev.EvalConfig(k=64)) == [1, 4, 16, 64]
    assert pass_ks(ev.EvalConfig(k=3)) == [1, 3]
    with pytest.raises(ValueError, match="1..k=4"):
        ev.EvalConfig(k=4, pass_k="1,8")
    with pytest.raises(ValueError, match="integers"):
        ev.EvalConfig(pass_k="1,four")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        ev.EvalConfig(date_from="Aug 2024")


# ----------------------------------------------------------------------------- a fake engine


class FakeEngine:
    """Answers problem p with scripted responses (by prompt); records the seeds it is asked for."""

    def __init__(self, tokenizer, script):
        self.tokenizer = tokenizer
        self.script = script
        self.seeds = []

    def generate(self, prompt_token_ids, params):
        out = []
        for ids, p in zip(prompt_token_ids, params):
            self.seeds.append(p.seed)
            texts = self.script[tuple(ids)]
            assert len(texts) == p.n
            out.append(
                [
                    Sample(
                        self.tokenizer.encode(t).ids,
                        [0.0] * len(self.tokenizer.encode(t).ids),
                        "length" if t.endswith("...") else "stop",
                    )
                    for t in texts
                ]
            )
        return out


def scripted(tokenizer, problems, responses):
    return {
        tuple(p["prompt_ids"]): r
        for p, r in zip(data.encode_prompts(tokenizer, problems, 4096)[0], responses)
    }


def test_avg_at_k_on_fake_engine_with_known_success(tokenizer):
    problems = sums.math_problems(4, seed=0, split="test")
    right = lambda p: f"<think>\nadding\n</think>\n\n\\boxed{{{p['answer']}}}<|im_end|>"
    wrong = lambda p: f"<think>\nadding\n</think>\n\n\\boxed{{{int(p['answer']) + 1}}}<|im_end|>"
    # cut at max length: no </think>
    unfinished = "<think>\nadding and adding ..."
    correct_counts = [0, 1, 2, 4]
    responses = [[right(p)] * c + [wrong(p)] * (4 - c) for p, c in zip(problems, correct_counts)]
    # 1 format failure, truncated
    responses[0][3] = unfinished
    engine = FakeEngine(tokenizer, scripted(tokenizer, problems, responses))
    cfg = ev.EvalConfig(k=4, pass_k="1,2,4", reward_workers=2, chunk_problems=3)
    results, samples = ev.evaluate(
        engine, tokenizer, [dict(name="m", kind="math", problems=problems)], cfg
    )
    b = results["benchmarks"]["m"]
    assert b["problems"] == 4 and b["k"] == 4
    assert b["avg_at_k"] == pytest.approx((0 + 1 / 4 + 2 / 4 + 1) / 4)
    assert b["pass_at_k"]["1"] == pytest.approx(b["avg_at_k"])
    assert b["pass_at_k"]["2"] == pytest.approx((0 + (1 - 3 / 6) + (1 - 1 / 6) + 1) / 4)
    assert b["pass_at_k"]["4"] == pytest.approx(3 / 4)
    assert b["mean_reward"] == pytest.approx(7 / 16)
    assert b["format_failure_rate"] == pytest.approx(1 / 16) and b[
        "truncated_rate"
    ] == pytest.approx(1 / 16)
    lengths = [len(tokenizer.encode(t).ids) for r in responses for t in r]
    assert b["mean_length"] == pytest.approx(sum(lengths) / 16)
    assert b["correct_per_problem"] == [[p["id"], c] for p, c in zip(problems, correct_counts)]
    # per-sample records, in problem/sample order, with the text the model wrote
    assert [(s["problem_index"], s["sample"]) for s in samples] == [
        (i, j) for i in range(4) for j in range(4)
    ]
    assert [s["response"] for s in samples] == [t for r in responses for t in r]
    assert [s["correct"] for s in samples] == [j < c for c in correct_counts for j in range(4)]
    assert samples[3]["reason"] == "format: no </think>" and samples[3]["finish_reason"] == "length"
    assert samples[0]["reason"] == "wrong answer" and samples[-1]["reason"] == "correct"
    # seeds: one per problem, from (seed, benchmark, index) only, recorded per sample
    assert engine.seeds == [ev.problem_seed(0, "m", i) for i in range(4)]
    assert [s["seed"] for s in samples] == [
        ev.problem_seed(0, "m", i) for i in range(4) for _ in range(4)
    ]
    assert len(set(engine.seeds)) == 4 and ev.problem_seed(1, "m", 0) != engine.seeds[0]
    # the aggregation alone, from the records
    summary = summarize(samples, [1, 2, 4])
    assert summary == {k: b[k] for k in summary}


def test_code_correct_means_all_tests_pass(tokenizer):
    tests = [{"input": f"{n}\n", "output": f"{2 * n}\n"} for n in range(4)]
    problem = dict(id="double", prompt="Read n and print 2n.", tests=tests)
    block = lambda code: f"<think>\nplan\n</think>\n\n```python\n{code}\n```<|im_end|>"
    responses = [
        [
            block("n = int(input())\nprint(2 * n)"),
            # right for n = 0 and 2: soft reward 0.5
            block("n = int(input())\nprint(n * n)"),
            "<think>\nplan\n</think>\n\nno code<|im_end|>",
            "no thinking at all<|im_end|>",
        ]
    ]
    engine = FakeEngine(tokenizer, scripted(tokenizer, [problem], responses))
    cfg = ev.EvalConfig(k=4, reward_workers=2)
    results, samples = ev.evaluate(
        engine, tokenizer, [dict(name="c", kind="code", problems=[problem])], cfg
    )
    b = results["benchmarks"]["c"]
    assert [s["correct"] for s in samples] == [True, False, False, False]
    assert [s["reward"] for s in samples] == [1.0, 0.5, 0.0, 0.0]
    assert b["avg_at_k"] == 0.25 and b["mean_reward"] == pytest.approx(1.5 / 4)
    assert b["format_failure_rate"] == 0.5 and b["pass_at_k"]["4"] == 1.0
    assert samples[0]["reason"] == "4/4 tests passed"
    assert samples[1]["reason"].startswith("2/4 tests passed; first failure:")
    assert "no ```python block" in samples[2]["reason"] and "no </think>" in samples[3]["reason"]


# ----------------------------------------------------------------------------- benchmark files


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize(
    "kind, lines, where, what",
    [
        (
            "math",
            ['{"problem": "1+1?", "answer": "2"}', '{"problem": "2+2?", "answer": '],
            ":2",
            "malformed JSON",
        ),
        ("math", ['{"problem": "1+1?", "answer": "2"}', '{"question": "x"}'], ":2", "'answer'"),
        (
            "code",
            [
                '{"prompt": "p", "tests": [{"input": "1", "output": "1"}]}',
                '{"prompt": "p", "tests": [{"input": "1"}]}',
            ],
            ":2",
            "tests[0].output",
        ),
    ],
)
def test_malformed_benchmark_file_names_file_and_line(
    tiny_checkpoint, tmp_path, kind, lines, where, what
):
    path = write_lines(tmp_path / f"bench_{kind}.jsonl", lines)
    with pytest.raises(InputError) as e:
        ev.main(
            ev.EvalConfig(
                model=tiny_checkpoint, out_dir=str(tmp_path / "out"), **{f"{kind}_data": path}
            )
        )
    assert f"bench_{kind}.jsonl{where}" in str(e.value) and what in str(e.value)
    assert not (tmp_path / "out").exists()


def test_cli_exits_nonzero_on_bad_input(tiny_checkpoint, tmp_path, run_here):
    """A process for the first; the rest in this process (conftest.run_here)."""
    path = write_lines(
        tmp_path / "aime.jsonl", ['{"problem": "1+1?", "answer": "2"}', "", "not json"]
    )
    proc = run_cli(f"--model={tiny_checkpoint}", f"--math_data={path}", f"--out_dir={tmp_path}/out")
    assert proc.returncode != 0 and "aime.jsonl:3: malformed JSON" in proc.stderr, proc.stderr[
        -2000:
    ]
    assert "Traceback" not in proc.stderr
    proc = run_here("eval.py", f"--model={tmp_path}/no_such_model")
    assert (
        proc.returncode == 2
        and "no checkpoint there" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    proc = run_here("eval.py", "--temprature=0.6")
    assert proc.returncode != 0 and "unknown option --temprature" in proc.stderr
    proc = run_here("eval.py", f"--model={tiny_checkpoint}", "--toy=none")
    assert (
        proc.returncode == 2
        and "nothing to evaluate" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_only_a_bad_reference_becomes_an_input_error(monkeypatch):
    """Malformed tests or an unparseable gold answer are the data's fault: an InputError naming
    benchmark and problem. Any other error while scoring is a bug and reaches the caller as it was
    raised."""
    from concurrent.futures import ThreadPoolExecutor

    cfg = ev.EvalConfig()

    # as eval.py scores: reward.scorer's score in a thread, then its verdict
    def score(kind, problem, text):
        with ThreadPoolExecutor(1) as pool:
            job = pool.submit(ev.reward.scorer(cfg), dict(problem, kind=kind), text)
            return ev.verdict(job, "bench")

    problem = dict(id="p1", tests=[{"input": "1"}])  # no output: reward.validate_tests refuses it
    with pytest.raises(InputError, match=r"bench: problem p1: tests\[0\]\['output'\]"):
        score("code", problem, "<think>\n</think>\n\n```python\nprint(1)\n```")

    def buggy_judge(*args, **kwargs):
        raise ValueError("a bug while scoring")

    monkeypatch.setattr(ev.reward, "judge", buggy_judge)
    with pytest.raises(ValueError, match="a bug while scoring") as e:
        score("math", dict(id="p2", answer="1"), "x")
    assert type(e.value) is ValueError


def test_one_prompt_mode_prints_the_engines_samples(tiny_checkpoint, tokenizer, tmp_path, capsys):
    """--prompt: the k samples printed are the engine's own for the chat-formatted prompt and seed;
    nothing is written."""
    from model import from_pretrained
    from rollout import LLMEngine, SamplingParams

    cfg = ev.EvalConfig(
        model=tiny_checkpoint,
        prompt="What is 2 + 3?",
        k=2,
        max_tokens=6,
        max_num_seqs=4,
        seed=7,
        temperature=1.0,
        out_dir=str(tmp_path / "out"),
        threads=1,
    )
    ev.main(cfg)
    printed = capsys.readouterr().out
    engine = LLMEngine(
        from_pretrained(tiny_checkpoint), max_num_seqs=4, max_model_len=cfg.max_prompt_len + 6
    )
    expected = engine.generate(
        [data.encode_prompt(tokenizer, "What is 2 + 3?")],
        SamplingParams(
            temperature=1.0,
            top_p=cfg.top_p,
            n=2,
            max_tokens=6,
            seed=7,
            stop_token_ids=tuple(data.stop_token_ids(tokenizer)),
        ),
    )[0]
    for j, s in enumerate(expected):
        assert f"--- sample {j}: {len(s.token_ids)} tokens, finish={s.finish_reason}" in printed
        assert tokenizer.decode(s.token_ids, skip_special_tokens=False) in printed
    assert "rollout: 2/2 samples done" in printed and not os.path.exists(cfg.out_dir)


def test_date_window_on_contest_date(tmp_path):
    row = lambda i, date: json.dumps(
        {
            "question_id": f"q{i}",
            "question_content": "print 1",
            "contest_date": date,
            "public_test_cases": json.dumps([{"input": "", "output": "1", "testtype": "stdin"}]),
        }
    )
    path = write_lines(
        tmp_path / "lcb.jsonl",
        [
            row(0, "2024-07-31T00:00:00"),
            row(1, "2024-08-01T00:00:00"),
            row(2, "2025-01-31T23:00:00"),
            row(3, "2025-02-01T00:00:00"),
        ],
    )
    cfg = ev.EvalConfig(code_data=path, date_from="2024-08-01", date_to="2025-02-01")
    [bench] = ev.load_benchmarks(cfg)
    # [from, to): v5 and v6 do not overlap
    assert [p["id"] for p in bench["problems"]] == ["q1", "q2"]
    assert bench["problems_in_file"] == 4 and bench["name"] == "lcb"
    write_lines(
        tmp_path / "lcb.jsonl",
        [
            row(0, "2024-09-01"),
            json.dumps({"prompt": "p", "tests": [{"input": "", "output": "1"}]}),
        ],
    )
    with pytest.raises(data.DataError, match="lcb.jsonl: problem lcb.jsonl:2 has no contest_date"):
        ev.load_benchmarks(cfg)
    write_lines(tmp_path / "lcb.jsonl", [row(0, "2024-09-01")])
    with pytest.raises(data.DataError, match="no problems to evaluate in the date window"):
        ev.load_benchmarks(ev.EvalConfig(code_data=path, date_from="2030-01-01"))


# ----------------------------------------------------------------------- end to end on a tiny model


@pytest.fixture(scope="module")
def one_process_run(tiny_checkpoint, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("one"))
    proc = run_cli(f"--model={tiny_checkpoint}", f"--out_dir={out}", *TINY_RUN)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_end_to_end_files_are_complete_and_consistent(one_process_run, tiny_checkpoint):
    out, stdout = one_process_run
    results, samples = read_run(out)
    assert results["model"] == os.path.abspath(tiny_checkpoint) and "--k=3" in results["command"]
    assert (
        results["world_size"] == 1
        and results["wall_s"] > 0
        and results["config"]["max_tokens"] == 24
    )
    s = results["sampling"]
    assert (s["temperature"], s["top_p"], s["top_k"], s["k"], s["max_tokens"], s["seed"]) == (
        0.6,
        0.95,
        0,
        3,
        24,
        0,
    )
    assert s["stop_token_ids"] == data.stop_token_ids(data.load_tokenizer(tiny_checkpoint))
    assert list(results["benchmarks"]) == ["toy_math", "toy_code"]
    assert len(samples) == (6 + 3) * 3
    keys = {
        "benchmark",
        "problem_id",
        "problem_index",
        "sample",
        "seed",
        "response",
        "reward",
        "correct",
        "format_failure",
        "reason",
        "length",
        "finish_reason",
    }
    assert all(set(x) == keys for x in samples)
    for name, problems in (
        ("toy_math", sums.math_problems(6, 0, "test", 3, 3)),
        ("toy_code", programs.code_problems(3, 0, "test")),
    ):
        mine = [x for x in samples if x["benchmark"] == name]
        b = results["benchmarks"][name]
        assert [x["problem_id"] for x in mine] == [p["id"] for p in problems for _ in range(3)]
        assert [x["sample"] for x in mine] == [0, 1, 2] * len(problems)
        assert all(
            x["length"] <= 24 and (x["finish_reason"] == "length") == (x["length"] == 24)
            for x in mine
        )
        assert b["generated_tokens"] == sum(x["length"] for x in mine) and b["tokens_per_s"] > 0
        summary = summarize(mine, [1, 2, 3])
        assert {k: b[k] for k in summary} == summary
        assert set(b["pass_at_k"]) == {"1", "2", "3"}
    for metric in (
        "toy_math",
        "toy_code",
        "Avg@k %",
        "pass@3 %",
        "format fail %",
        "mean length",
        "truncated %",
    ):
        assert metric in stdout


def test_countdown_sets_are_judged_by_the_checker(tiny_checkpoint, tmp_path, toy_files):
    """The default toy (--toy=countdown, no data option): the held-out sets in out/toy/countdown/ of
    the working directory, 3- and 4-number Countdown problems and the toy programs with partial
    credit; each verdict is countdown_reward's on the sampled text (recomputed here)."""
    from parts.countdown_check import countdown_reward

    os.makedirs(tmp_path / "out" / "toy")
    os.symlink(toy_files["countdown"], tmp_path / "out" / "toy" / "countdown")
    proc = run_cli(
        f"--model={tiny_checkpoint}", "--out_dir=eval", "--k=2", "--max_tokens=16", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results, samples = read_run(tmp_path / "eval")
    assert list(results["benchmarks"]) == ["countdown_3", "countdown_4", "toy_code"]
    assert [b["kind"] for b in results["benchmarks"].values()] == ["countdown", "countdown", "code"]
    for n in (3, 4):
        problems = {p["id"]: p for p in countdown.problems(4, n, 0, "test")}
        mine = [x for x in samples if x["benchmark"] == f"countdown_{n}"]
        assert [x["problem_id"] for x in mine] == [pid for pid in problems for _ in range(2)]
        assert all(
            x["correct"]
            == (
                countdown_reward(
                    x["response"],
                    problems[x["problem_id"]]["numbers"],
                    problems[x["problem_id"]]["target"],
                )
                == 1.0
            )
            for x in mine
        )
    code = [x["problem_id"] for x in samples if x["benchmark"] == "toy_code"]
    assert code == [p["id"] for p in programs.partial_code_problems(2, 0, "test") for _ in range(2)]


def test_one_process_equals_two_processes(one_process_run, tiny_checkpoint, tmp_path):
    proc = run_cli(f"--model={tiny_checkpoint}", f"--out_dir={tmp_path}", *TINY_RUN, nproc=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one, one_samples = read_run(one_process_run[0])
    two, two_samples = read_run(tmp_path)
    assert two["world_size"] == 2
    assert two_samples == one_samples
    timing = {"generate_s", "tokens_per_s", "total_s"}
    for name in one["benchmarks"]:
        assert {k: v for k, v in one["benchmarks"][name].items() if k not in timing} == {
            k: v for k, v in two["benchmarks"][name].items() if k not in timing
        }


def test_compare_table(one_process_run, tmp_path, capsys):
    results, _ = read_run(one_process_run[0])
    better = json.loads(json.dumps(results))
    better["benchmarks"]["toy_math"].update(avg_at_k=0.625, pass_at_k={"1": 0.625, "4": 0.9})
    del better["benchmarks"]["toy_code"]
    (tmp_path / "b.json").write_text(json.dumps(better))
    ev.main(
        ev.EvalConfig(
            compare=f"{one_process_run[0]}/results.json,{tmp_path}/b.json", labels="SFT,GPPO"
        )
    )
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["benchmark", "metric", "SFT", "GPPO"] and set(table[1]) == {"-"}
    rows = {}
    bench = None
    for line in table[2:]:
        bench = line.split()[0] if not line.startswith(" ") else bench
        rows[bench, " ".join(line.split()[:-2]).removeprefix(bench).strip()] = line.split()[-2:]
    assert rows["toy_math", "Avg@k %"] == ["0.00", "62.50"]
    assert rows["toy_math", "pass@4 %"] == ["-", "90.00"] and rows["toy_math", "pass@3 %"] == [
        "0.00",
        "-",
    ]
    assert rows["toy_code", "problems"] == ["3", "-"] and rows["toy_code", "Avg@k %"] == [
        "0.00",
        "-",
    ]
    with pytest.raises(InputError, match="2 labels for 1 files"):
        ev.main(ev.EvalConfig(compare=f"{tmp_path}/b.json", labels="SFT,GPPO"))
    with pytest.raises(InputError, match="cannot read"):
        ev.main(ev.EvalConfig(compare=f"{tmp_path}/missing.json"))
