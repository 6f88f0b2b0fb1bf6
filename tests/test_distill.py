"""distill.py against a real HTTP server on 127.0.0.1 (tests/chat_server.py, started and stopped
here): every fault a server shows (429 + Retry-After, 500, an answer slower than the timeout,
malformed JSON, a dropped connection), the client killed mid-run and the server killed mid-run, each
followed by the same command; every run's samples.jsonl is checked record by record (nothing lost,
nothing twice, no torn line, each sample what the server gave for its seed). Also: both reasoning
styles, a server that ignores n, the API key never written, the difficulty rule on hand-computed
cases, decontamination with a planted benchmark problem, eval.py against the server = the same
responses scored offline, the local-engine teacher, and the toy recipe (the teacher's files of
tools/toy.py) end to end into sft.py's loader, byte for byte what the recipe wrote when the toy
teacher was built into distill.py."""

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import distill  # noqa: E402
from parts import chat_client  # noqa: E402
from parts.decontamination import Decontaminator  # noqa: E402
from parts.pass_at_k import summarize  # noqa: E402
from parts.trainer import InputError  # noqa: E402
from chat_server import ChatServer, expected_turn, qwen3_content  # noqa: E402

FAST = dict(
    retry_backoff_s=0.01, progress_s=0, served_model="teacher", concurrency=4, max_tokens=64
)


def math_file(path, n, start=0):
    """n AIME-style rows {id, problem, answer}: 'What is A + B?'."""
    rows = [
        dict(id=f"p{i}", problem=f"What is {100 + 7 * i} + {20 + i}?", answer=str(120 + 8 * i))
        for i in range(start, start + n)
    ]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def read_lines(path):
    """Every line of a journal, each required whole (ends with a newline) and JSON."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw == b"" or raw.endswith(b"\n"), "a torn last line"
    return [json.loads(line) for line in raw.splitlines()]


def check_samples(out_dir, rows, k, source):
    """samples.jsonl record by record: each (prompt, sample index) exactly once, with the seed
    distill.py gives it and the content the server answered to that seed."""
    records = read_lines(os.path.join(out_dir, "samples.jsonl"))
    keys = [(r["id"], r["sample"]) for r in records]
    assert len(keys) == len(set(keys)), "a sample written twice"
    assert sorted(keys) == sorted((f"{source}/{r['id']}", j) for r in rows for j in range(k)), (
        "a sample missing"
    )
    texts = {f"{source}/{r['id']}": r["problem"] for r in rows}
    for r in records:
        assert r["seed"] == distill.sample_seed(0, r["id"], r["sample"])
        assert (
            r["content"] == qwen3_content(texts[r["id"]], r["seed"])
            and r["closed"]
            and r["finish_reason"] == "stop"
        )
    return records


def check_sft(out_dir, rows, k, source, hard_below=0.5):
    """sft.jsonl = the rule applied by hand to the server's known verdicts (a seed divisible by 3
    answers wrong)."""
    sft = read_lines(os.path.join(out_dir, "sft.jsonl"))
    expected = []
    for row in rows:
        key = f"{source}/{row['id']}"
        right = [expected_turn(row["problem"], distill.sample_seed(0, key, j))[2] for j in range(k)]
        hard = sum(right) / k < hard_below
        expected += [(f"{key}/{j}", ok) for j, ok in enumerate(right) if hard or ok]
    assert sorted((r["id"], r["correct"]) for r in sft) == sorted(expected)
    return sft


@pytest.fixture
def server():
    servers = []

    def start(**kw):
        servers.append(ChatServer(**kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_every_fault_is_retried_and_the_file_is_complete(tmp_path, server, capsys):
    srv = server(faults=["429", "500", "slow", "malformed", "drop"], retry_after="1", slow_s=1.5)
    rows = math_file(tmp_path / "math.jsonl", 6)
    cfg = distill.DistillConfig(
        server=srv.url,
        math_prompts=str(tmp_path / "math.jsonl"),
        k=3,
        request_timeout_s=0.4,
        out_dir=str(tmp_path / "out"),
        **FAST,
    )
    report = distill.main(cfg)
    check_samples(cfg.out_dir, rows, 3, "math")
    check_sft(cfg.out_dir, rows, 3, "math")
    retries = report["this_run"]["teacher"]["retries"]
    assert retries == {"429": 1, "500": 1, "timeout": 1, "malformed answer": 1, "connection": 1}, (
        retries
    )
    # Retry-After: 1 was waited out: the same request (same body) came back at least a second later
    t429, body = next((t, b) for t, b, fault, _ in srv.requests if fault == "429")
    assert next(t for t, b, fault, _ in srv.requests if b == body and t > t429) - t429 >= 1.0
    assert report["teacher_usage"]["completion_tokens"] > 0 and report["truncated"] == 0


def test_client_killed_mid_run_resumes_and_writes_nothing_twice(tmp_path, server):
    # 40 samples, 2 in flight: at least 2 s of sampling, so the kill lands mid-run
    srv = server(delay=0.1)
    rows = math_file(tmp_path / "math.jsonl", 10)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        os.path.join(ROOT, "distill.py"),
        f"--server={srv.url}",
        "--served_model=teacher",
        f"--math_prompts={tmp_path / 'math.jsonl'}",
        "--k=4",
        "--concurrency=2",
        "--retry_backoff_s=0.01",
        "--progress_s=0",
        f"--out_dir={out}",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 120
    while (
        not (samples.exists() and samples.read_bytes().count(b"\n") >= 10) and proc.poll() is None
    ):
        assert time.monotonic() < deadline, "the run wrote nothing"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # what a kill in the middle of a write leaves: a last line without its end
    with open(samples, "ab") as f:
        f.write(b'{"id": "math/p3", "sample": 2, "content": "<think>\\n10')
    done = len([line for line in samples.read_bytes().split(b"\n")[:-1]])
    assert 10 <= done < 40
    n_before = len(srv.requests)
    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert "torn by a kill" in rerun.stdout
    assert len(srv.requests) - n_before == 40 - done  # only the missing samples were asked for
    check_samples(out, rows, 4, "math")
    check_sft(out, rows, 4, "math")


def test_server_killed_mid_run_then_the_same_command_finishes(tmp_path):
    def start_server(port=0):
        proc = subprocess.Popen(
            [
                sys.executable,
                os.path.join(ROOT, "tests", "chat_server.py"),
                f"--port={port}",
                "--delay=0.05",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        return proc, int(proc.stdout.readline().split()[1])

    rows = math_file(tmp_path / "math.jsonl", 8)
    proc, port = start_server()
    cfg = distill.DistillConfig(
        server=f"http://127.0.0.1:{port}/v1",
        math_prompts=str(tmp_path / "math.jsonl"),
        k=4,
        max_retries=2,
        out_dir=str(tmp_path / "out"),
        **FAST,
    )
    outcome = []

    def run():
        try:
            outcome.append(distill.main(cfg))
        except SystemExit as e:
            outcome.append(e.code)

    thread = threading.Thread(target=run)
    try:
        thread.start()
        samples = tmp_path / "out" / "samples.jsonl"
        while not (samples.exists() and samples.read_bytes().count(b"\n") >= 6):
            assert thread.is_alive(), outcome
            time.sleep(0.01)
        # the server dies mid-run: the requests in flight and the rest fail after their retries
        proc.kill()
        proc.wait()
        thread.join(timeout=120)
        assert outcome == [1], outcome  # incomplete: exit status 1, "run the same command again"
        got = read_lines(samples)
        assert 6 <= len(got) < 32 and len({(r["id"], r["sample"]) for r in got}) == len(got)
        proc, _ = start_server(port)  # the server is back, on the same address
        report = distill.main(cfg)
    finally:
        proc.kill()
        proc.wait()
    check_samples(cfg.out_dir, rows, 4, "math")
    check_sft(cfg.out_dir, rows, 4, "math")
    assert report["incomplete_prompts"] == 0


@pytest.mark.parametrize("style", ["reasoning_content", "think", "think_open"])
def test_both_reasoning_styles_are_stored_in_qwen3_form(server, style):
    srv = server(style=style)
    got = {}
    requests = [
        chat_client.ChatRequest(text, [{"role": "user", "content": text}], [(0, 5), (1, 7)])
        for text in ("What is 12 + 30?", "What is 5 + 6? LONG")
    ]
    stats = chat_client.sample_chat(
        requests,
        chat_client.ClientConfig(srv.url, "teacher", progress_s=0),
        {"max_tokens": 8},
        lambda key, j, s: got.setdefault((key, j), s),
    )
    for j, seed in ((0, 5), (1, 7)):
        s = got[("What is 12 + 30?", j)]
        assert (s["content"], s["closed"], s["finish_reason"], s["seed"]) == (
            qwen3_content("What is 12 + 30?", seed),
            True,
            "stop",
            seed,
        )
        # cut in its reasoning: kept as it came, never closed
        long = got[("What is 5 + 6? LONG", j)]
        assert (
            not long["closed"]
            and long["finish_reason"] == "length"
            and "</think>" not in long["content"]
        )
    assert stats["truncated"] == 2 and stats["samples"] == 4


def test_a_server_that_ignores_n_gets_the_rest_one_by_one(server):
    srv = server(ignore_n=True)
    got = {}
    seeds = [(j, 100 + 10 * j) for j in range(4)]
    stats = chat_client.sample_chat(
        [chat_client.ChatRequest("p", [{"role": "user", "content": "What is 1 + 2?"}], seeds)],
        chat_client.ClientConfig(srv.url, "teacher", n_per_request=4, progress_s=0),
        {},
        lambda key, j, s: got.setdefault(j, s),
    )
    assert sorted(got) == [0, 1, 2, 3] and stats["refilled"] == 3
    assert [b["n"] for _, b, _, _ in srv.requests] == [4, 1, 1, 1]
    # each its own seed
    assert sorted(b["seed"] for _, b, _, _ in srv.requests) == [100, 110, 120, 130]
    for j, seed in seeds:
        assert got[j]["content"] == qwen3_content("What is 1 + 2?", seed)


def test_the_api_key_is_sent_and_never_printed_or_written(tmp_path, server, capsys, monkeypatch):
    secret = "sk-test-5f2a9c-do-not-leak"
    srv = server(api_key=secret)
    math_file(tmp_path / "math.jsonl", 2)
    monkeypatch.setenv("DISTILL_TEST_KEY", secret)
    cfg = distill.DistillConfig(
        server=srv.url,
        math_prompts=str(tmp_path / "math.jsonl"),
        k=2,
        api_key_env="DISTILL_TEST_KEY",
        out_dir=str(tmp_path / "out"),
        **FAST,
    )
    distill.main(cfg)
    assert all(ok for *_, ok in srv.requests)
    monkeypatch.setenv("DISTILL_TEST_KEY", "wrong-key")
    with pytest.raises(InputError, match="401") as refused:
        distill.main(distill.DistillConfig(**{**cfg.__dict__, "out_dir": str(tmp_path / "out2")}))
    printed = capsys.readouterr()
    written = b"".join(
        open(os.path.join(d, f), "rb").read() for d, _, files in os.walk(tmp_path) for f in files
    )
    assert (
        secret not in printed.out + printed.err + str(refused.value)
        and secret.encode() not in written
    )


def test_difficulty_rule_on_hand_computed_cases():
    rule = distill.keep_responses
    T = True
    F = False
    # all wrong: hard, all kept
    assert rule([F, F, F, F]) == ("hard", [T, T, T, T])
    # all right: easy, all kept
    assert rule([T, T, T, T]) == ("easy", [T, T, T, T])
    assert rule([T, F, F, F]) == ("hard", [T, T, T, T])  # 1/4 < 1/2: hard
    assert rule([T, F, T, F]) == ("easy", [T, F, T, F])  # 2/4 = 1/2: a tie is easy
    assert rule([T, F, T, F], hard_below=0.51) == ("hard", [T, T, T, T])
    # 3/10 = 0.3 exactly
    assert rule([T, T, T, F, F, F, F, F, F, F], hard_below=0.3) == ("easy", [T, T, T] + [F] * 7)
    assert rule([T, T, F, F, F, F, F, F, F, F], hard_below=0.3) == ("hard", [T] * 10)
    # nothing is below 0: correct only
    assert rule([T, F, F], hard_below=0) == ("easy", [T, F, F])
    # anything short of all right is hard
    assert rule([T, T, F], hard_below=1) == ("hard", [T, T, T])
    assert rule([T, F, F, F], keep="correct") == ("hard", [T, F, F, F])  # the ablation arms
    assert rule([T, T, T, F], keep="all") == ("easy", [T, T, T, T])
    assert rule([F, F], drop_unsolved=True) == ("unsolved", [F, F])
    # nothing to verify against: kept
    assert rule([None, None]) == ("unverified", [T, T])
    assert rule([None, None], keep="correct") == ("unverified", [T, T])
    assert rule([T, None, F, F]) == ("hard", [T, T, T, T])  # 1/3 of the judged ones
    assert rule([T, None, T, F]) == ("easy", [T, F, T, F])
    assert distill.HARD_BELOW == 0.5


def test_decontamination_and_duplicates_on_a_planted_benchmark_problem(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    planted = (
        "Let $N$ be the greatest four-digit positive integer with the property that whenever one of its digits "
        "is changed to 1, the resulting number is divisible by 7."
    )
    pq.write_table(
        pa.table(
            {
                "id": [60, 61],
                "problem": [
                    planted,
                    "Find the number of ordered pairs (x, y) of integers "
                    "such that x^2 + y^2 = 2025 and x < y.",
                ],
                "answer": ["699", "12"],
            }
        ),
        tmp_path / "aime.parquet",
    )
    decon = Decontaminator(distill.read_benchmarks([str(tmp_path / "aime.parquet")]), n=8)
    reworded = (
        "let N be the greatest four digit positive integer, with the property that -- whenever one of its "
        "digits is changed to 1 -- the resulting number is divisible by 7 !"
    )
    assert decon.matches(reworded) == {("aime.parquet", "60")}
    assert (
        decon.matches("Let N be the greatest three-digit integer whose digits sum to 7.") == set()
    )
    # shorter than n: matched whole
    short = Decontaminator([("toy", "t1", "What is 12 + 34?")], n=8)
    assert (
        short.matches("Q: what is 12+34 ?") == {("toy", "t1")}
        and short.matches("What is 12 + 345?") == set()
    )
    # through the recipe: a set with its own verified responses (OpenR1 layout), no teacher needed
    # noqa: E731
    gens = lambda ok: dict(
        generations=[f"<think>r{i}</think>\\boxed{{1}}" for i in range(len(ok))],
        correctness_math_verify=ok,
        answer="1",
    )
    rows = [
        dict(uuid="copy", problem=reworded, **gens([True, False])),
        dict(
            uuid="hard",
            problem="What is one minus zero, in words?",
            **gens([True, False, False, False]),
        ),
        dict(
            uuid="easy",
            problem="How many legs does a cat have? Say 1.",
            **gens([True, True, False, True]),
        ),
        dict(uuid="dup", problem="how many LEGS does a cat have?  say 1", **gens([False, False])),
    ]
    with open(tmp_path / "openr1.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    cfg = distill.DistillConfig(
        responses=str(tmp_path / "openr1.jsonl"),
        benchmarks=str(tmp_path / "aime.parquet"),
        out_dir=str(tmp_path / "out"),
        progress_s=0,
    )
    report = distill.main(cfg)
    sft = {r["id"]: r for r in read_lines(os.path.join(cfg.out_dir, "sft.jsonl"))}
    assert sorted((i, r["difficulty"], r["correct"]) for i, r in sft.items()) == [
        ("openr1/easy/0", "easy", True),
        ("openr1/easy/1", "easy", True),
        ("openr1/easy/3", "easy", True),
        ("openr1/hard/0", "hard", True),
        ("openr1/hard/1", "hard", False),
        ("openr1/hard/2", "hard", False),
        ("openr1/hard/3", "hard", False),
    ]
    assert sft["openr1/hard/0"]["messages"] == [
        {"role": "user", "content": "What is one minus zero, in words?"},
        {"role": "assistant", "content": "<think>\nr0\n</think>\n\n\\boxed{1}"},
    ]
    d = report["decontamination"]
    assert d["sources"]["openr1"] == {"read": 4, "contaminated": 1, "duplicates": 1, "kept": 2}
    assert d["hits"] == [
        dict(benchmark="aime.parquet", item="60", prompts=1, examples=["openr1/copy"])
    ]
    assert report["counts"]["openr1"]["easy"]["dropped_wrong"] == 1


def test_eval_against_the_server_equals_the_same_responses_scored_offline(tmp_path, server):
    import eval as ev
    from rollout import sample_seed

    srv = server()
    rows = math_file(tmp_path / "bench.jsonl", 5)
    out = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "eval.py"),
            f"--server={srv.url}",
            "--served_model=teacher",
            f"--math_data={tmp_path / 'bench.jsonl'}",
            "--k=4",
            "--pass_k=1,2,4",
            f"--out_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.load(open(out / "results.json"))
    assert (results["endpoint"], results["served_model"]) == (srv.url, "teacher")
    samples = [json.loads(line) for line in open(out / "samples.jsonl")]
    # offline: the same responses scored again by eval.py's own functions
    problems = {
        p["id"]: p
        for p in ev.load_benchmarks(ev.EvalConfig(math_data=str(tmp_path / "bench.jsonl")))[0][
            "problems"
        ]
    }
    cfg = ev.EvalConfig()
    score = ev.reward.scorer(cfg)
    verdicts = [score(dict(problems[s["problem_id"]], kind="math"), s["response"]) for s in samples]
    offline = [dict(s, **verdict._asdict()) for s, verdict in zip(samples, verdicts)]
    bench = results["benchmarks"]["bench"]
    assert summarize(offline, [1, 2, 4]) == {k: bench[k] for k in summarize(offline, [1, 2, 4])}
    # and by hand: sample j of problem i is right unless its seed is divisible by 3
    correct = [
        sum(
            expected_turn(r["problem"], sample_seed(ev.problem_seed(0, "bench", i), j))[2]
            for j in range(4)
        )
        for i, r in enumerate(rows)
    ]
    assert [c for _, c in bench["correct_per_problem"]] == correct
    assert bench["avg_at_k"] == pytest.approx(sum(c / 4 for c in correct) / 5, abs=1e-12)
    assert bench["pass_at_k"]["2"] == pytest.approx(
        sum(1 - math.comb(4 - c, 2) / 6 for c in correct) / 5, abs=1e-12
    )


def test_local_engine_teacher_writes_the_same_records_and_resumes(tmp_path, toy_files):
    import shutil

    import data
    from model import Qwen3, Qwen3Config, save_pretrained

    ckpt = str(tmp_path / "tiny")
    shutil.copytree(os.path.join(toy_files["sums"], "tokenizer"), ckpt)
    tok = data.load_tokenizer(ckpt)
    save_pretrained(
        Qwen3(
            Qwen3Config(
                vocab_size=tok.get_vocab_size(),
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=16,
                tie_word_embeddings=True,
                torch_dtype="float32",
            )
        ).init_weights(seed=0),
        ckpt,
    )
    rows = math_file(tmp_path / "math.jsonl", 2)
    cfg = distill.DistillConfig(
        model=ckpt,
        math_prompts=str(tmp_path / "math.jsonl"),
        k=3,
        max_tokens=6,
        max_prompt_len=64,
        temperature=1.0,
        top_p=1.0,
        device="cpu",
        out_dir=str(tmp_path / "out"),
        progress_s=0,
    )
    report = distill.main(cfg)
    first = read_lines(os.path.join(cfg.out_dir, "samples.jsonl"))
    assert sorted((r["id"], r["sample"]) for r in first) == [
        (f"math/{r['id']}", j) for r in rows for j in range(3)
    ]
    assert all(1 <= r["completion_tokens"] <= 6 and r["prompt_tokens"] > 5 for r in first)
    cut = sum(r["finish_reason"] == "length" for r in first)
    # a random model rambles; cut responses are never trained on
    assert cut >= 1 and report["truncated"] == cut
    assert report["sft_rows"] == sum(r["closed"] and r["finish_reason"] == "stop" for r in first)
    os.remove(os.path.join(cfg.out_dir, "samples.jsonl"))
    # half lost: the rerun redoes the same samples
    with open(os.path.join(cfg.out_dir, "samples.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in first[:3])
    os.remove(os.path.join(cfg.out_dir, "verdicts.jsonl"))
    distill.main(cfg)
    again = read_lines(os.path.join(cfg.out_dir, "samples.jsonl"))
    key = lambda r: (r["id"], r["sample"])  # noqa: E731
    assert sorted(again, key=key) == sorted(first, key=key)


def teacher_files(toy_dir: str, *names) -> str:
    """--responses: the toy teacher's files that tools/toy.py wrote in toy_dir."""
    return ",".join(os.path.join(toy_dir, "teacher", f"{name}.jsonl") for name in names)


def test_toy_recipe_end_to_end_into_sft_loader(tmp_path, toy_files):
    """The sums toy's teacher files (tools/toy.py) through the rule, by hand; the rows written are
    the same bytes as before the toy's teacher moved out of distill.py (SUMS_BEFORE); sft.py reads
    them."""
    import hashlib

    import data
    import sft

    toy = toy_files["sums"]
    cfg = distill.DistillConfig(
        responses=teacher_files(toy, "toy_math", "toy_code"),
        out_dir=str(tmp_path / "toy"),
        benchmarks=os.path.join(toy, "test", "toy_math.jsonl"),
        progress_s=0,
    )
    report = distill.main(cfg)
    rows = read_lines(os.path.join(cfg.out_dir, "sft.jsonl"))
    verdicts = {
        (v["id"], v["sample"]): v["correct"]
        for v in read_lines(os.path.join(cfg.out_dir, "verdicts.jsonl"))
    }
    by_prompt = {}
    for (pid, j), ok in verdicts.items():
        by_prompt.setdefault(pid, []).append(ok)
    for pid, oks in by_prompt.items():  # the rule, by hand, against what was written
        hard = sum(oks) / len(oks) < 0.5
        kept = sorted(r["id"] for r in rows if r["id"].rsplit("/", 1)[0] == pid)
        assert kept == sorted(f"{pid}/{j}" for j, ok in enumerate(oks) if hard or ok)
    ids = [r["id"] for r in rows]
    # shuffled by the seed
    assert ids != sorted(ids, key=lambda i: (i.rsplit("/", 1)[0], int(i.rsplit("/", 1)[1])))
    wrong = [r for r in rows if r["correct"] is False]
    # slips survive only on hard prompts
    assert wrong and all(r["difficulty"] == "hard" for r in wrong)
    assert all(r["source"] == "toy_math" for r in wrong)
    counts = report["counts"]["toy_math"]
    assert (
        counts["easy"]["dropped_wrong"] > 0
        and report["decontamination"]["benchmark_items_matched"] == 0
    )
    assert (
        report["sft_rows"]
        == len(rows)
        == sum(c["kept"] for by in report["counts"].values() for c in by.values())
    )
    with open(os.path.join(cfg.out_dir, "sft.jsonl"), "rb") as f:
        before = f.read()
    assert hashlib.sha256(before).hexdigest() == SUMS_BEFORE
    tokenizer, _, loader = sft.load_sft_data(
        sft.SFTConfig(
            data=os.path.join(cfg.out_dir, "sft.jsonl"), tokenizer=os.path.join(toy, "tokenizer")
        ),
        0,
        1,
    )
    assert (
        loader.num_rows >= 1
        and tokenizer.to_str() == data.load_tokenizer(os.path.join(toy, "tokenizer")).to_str()
    )
    distill.main(cfg)  # a rerun finds everything done and writes the same file
    assert open(os.path.join(cfg.out_dir, "sft.jsonl"), "rb").read() == before


# sha256 of sft.jsonl as distill.py wrote it when the toy teacher was built in (commit 949362f), for
# the toy_files fixture's sizes: `python distill.py --toy=true --toy_task=sums --toy_math_prompts=60
# --toy_code_prompts=3 --toy_code_tests=2 --toy_code_k=2`, and `python distill.py --toy=true
# --toy_easy_prompts=25 --toy_hard_prompts=25 --toy_code_prompts=6 --toy_code_tests=4 --toy_code_k=4
# --benchmarks=bench.jsonl` with bench.jsonl the one row {"problem": "Use 7 1 7 to make 14.",
# "answer": "1"} (the first 3-number prompt). The same bytes now: the teacher's samples (seeded per
# prompt and sample as distill.py seeded them), the verdicts, the rule and the row order.
SUMS_BEFORE = "35c10f570098b72b65abf94633e27f4b0cd3f12f271e70234e5de5e41685abd1"
COUNTDOWN_BEFORE = "e6a761e5e9557b5209fa4ad54865392f32ec07a73440f4049a7b4db7cd9aab74"


def test_countdown_recipe_verifies_with_the_checker_and_keeps_by_difficulty(tmp_path, toy_files):
    """The default toy: the searching teacher's traces are verified by countdown_reward (recomputed
    here), the rule keeps every trace of a prompt the teacher solved less than half the time and
    only the right ones of the others; its programs' naive answers (partial credit, judged wrong)
    survive only on hard prompts; a benchmark item equal to a train prompt removes that prompt. The
    rows are the same bytes as before the teacher moved out of distill.py (COUNTDOWN_BEFORE)."""
    import hashlib

    from parts.countdown_check import countdown_reward
    from tools.toy_tasks import countdown, programs

    problems = {
        f"countdown_{n}/{p['id']}": p
        for n in (3, 4)
        for p in countdown.problems(25, n, "distill-0", "train")
    }
    leaked = next(iter(problems.values()))
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"problem": leaked["prompt"], "answer": "1"}) + "\n")
    responses = teacher_files(toy_files["countdown"], "countdown_3", "countdown_4", "toy_code")
    cfg = distill.DistillConfig(
        responses=responses, benchmarks=str(bench), out_dir=str(tmp_path / "cd"), progress_s=0
    )
    report = distill.main(cfg)
    assert report["decontamination"]["benchmark_items_matched"] == 1
    samples = {
        (s["id"], s["sample"]): s["content"]
        for s in read_lines(os.path.join(cfg.out_dir, "samples.jsonl"))
    }
    verdicts = {
        (v["id"], v["sample"]): v["correct"]
        for v in read_lines(os.path.join(cfg.out_dir, "verdicts.jsonl"))
    }
    by_prompt = {}
    for (pid, j), ok in sorted(verdicts.items()):
        if pid in problems:
            p = problems[pid]
            assert ok == (countdown_reward(samples[pid, j], p["numbers"], p["target"]) == 1.0)
        by_prompt.setdefault(pid, []).append(ok)
    assert f"countdown_3/{leaked['id']}" not in by_prompt and len(by_prompt) == 49 + 6
    rows = read_lines(os.path.join(cfg.out_dir, "sft.jsonl"))
    for pid, oks in by_prompt.items():
        hard = sum(oks) / len(oks) < 0.5
        kept = sorted(r["id"] for r in rows if r["id"].rsplit("/", 1)[0] == pid)
        assert kept == sorted(f"{pid}/{j}" for j, ok in enumerate(oks) if hard or ok)
    wrong = [r for r in rows if r["correct"] is False]
    assert {r["source"] for r in wrong} >= {"countdown_4"} and all(
        r["difficulty"] == "hard" for r in wrong
    )
    naive = {p["naive"] for p in programs.partial_code_problems(6, 0, "train", 4)}
    assert any(
        r["source"] == "toy_code" and any(n in r["messages"][-1]["content"] for n in naive)
        for r in wrong
    )
    with open(os.path.join(cfg.out_dir, "sft.jsonl"), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == COUNTDOWN_BEFORE


def test_the_client_runs_alone_without_torch(server, tmp_path):
    """parts/chat_client.py copied alone into an empty folder, torch made unimportable: it samples
    from a real server."""
    import shutil

    shutil.copy(os.path.join(ROOT, "parts", "chat_client.py"), tmp_path)
    srv = server()
    code = (
        "import sys; sys.modules['torch'] = None; import chat_client; got = []; "
        f"chat_client.sample_chat([chat_client.ChatRequest('a', [{{'role': 'user', 'content': 'What is 1 + 1?'}}], "
        f"[(0, 4)])], chat_client.ClientConfig({srv.url!r}, 'teacher', progress_s=0), {{}}, "
        "lambda *a: got.append(a)); print(got[0][2]['content'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == qwen3_content("What is 1 + 1?", 4).strip()


def test_another_writer_or_other_settings_in_out_dir_are_refused_naming_why(tmp_path):
    """A second run into an out_dir another process holds (its .lock file flocked), or with other
    sampling settings than the samples there, stops with one line (an InputError) saying which; the
    same settings run again."""
    import fcntl

    row = dict(
        uuid="q",
        problem="What is 1 + 1?",
        generations=["<think>a</think>\\boxed{2}", "<think>b</think>\\boxed{3}"],
        correctness_math_verify=[True, False],
        answer="2",
    )
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    cfg = dict(responses=str(tmp_path / "rows.jsonl"), out_dir=str(tmp_path / "out"), progress_s=0)
    distill.main(distill.DistillConfig(**cfg))
    with pytest.raises(InputError, match=r"other sampling settings \(temperature, top_p differ\)"):
        distill.main(distill.DistillConfig(**cfg, temperature=0.7, top_p=0.9))
    held = open(os.path.join(cfg["out_dir"], ".lock"), "w")
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        with pytest.raises(InputError, match="another distill.py is writing to"):
            distill.main(distill.DistillConfig(**cfg))
    finally:
        held.close()
    assert distill.main(distill.DistillConfig(**cfg))["sft_rows"] == 1  # easy: the right one


def test_bad_input_is_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "distill.py"),
            "--server=http://127.0.0.1:9/v1",
            "--served_model=x",
            f"--math_prompts={tmp_path / 'missing.jsonl'}",
            f"--out_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "missing.jsonl" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_server_that_is_not_there_stops_the_run_with_one_line_naming_it(tmp_path, run_here):
    """Nothing listens at --server: the first refusal is said once, each request retries max_retries
    times, then the run stops (exit status 2) with one line naming the URL, instead of counting
    failed samples (and, with the default 10 s progress lines, 'ETA infs') for each request in turn.
    The port is ours: bound, never listening."""
    import socket

    math_file(tmp_path / "math.jsonl", 3)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        proc = run_here(
            "distill.py",
            f"--server={url}",
            "--served_model=x",
            f"--math_prompts={tmp_path / 'math.jsonl'}",
            "--k=2",
            "--max_retries=2",
            "--retry_backoff_s=0.01",
            "--progress_s=0.001",
            f"--out_dir={tmp_path / 'out'}",
        )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"cannot connect to {url}" in errors[0] and "after 2 retries" in errors[0], errors
    assert proc.stdout.count("cannot connect") == 1 and "ETA inf" not in proc.stdout, proc.stdout[
        -2000:
    ]
    assert "Traceback" not in proc.stderr
