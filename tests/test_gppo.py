"""The RL loop: 1 process == 2 processes, stop + resume == uninterrupted, a simple task is learned,
all-equal groups skip the step cleanly, and the pieces (advantages, packing) against hand-computed
values."""

import json
import math
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data  # noqa: E402
import gppo  # noqa: E402
import gppo_loss  # noqa: E402
import reward  # noqa: E402
from parts import rl_report, trainer  # noqa: E402
from parts.rl_rows import TrainSeq, mini_batches_of, row_tensors, training_sequences  # noqa: E402
from tools import filter_code  # noqa: E402
from parts.cli import parse_config  # noqa: E402
from model import from_pretrained  # noqa: E402
from rollout import Sample  # noqa: E402

SMALL = [
    "--prompts_per_step=4",
    "--mini_batch_prompts=2",
    "--group_size=4",
    "--max_response_len=16",
    "--eval_every=0",
    "--lr=1e-2",
    "--warmup_steps=1",
    "--reward_workers=2",
]


@pytest.fixture(scope="module", autouse=True)
def toy_data(toy_files):
    """The toy's 64 RL prompts (tests/conftest.py) for every run below; an option given later
    wins."""
    SMALL[:0] = toy_files["rl"]


def run(out_dir, ckpt, *extra, nproc=1, task="even", env=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
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
    cmd = launcher + [
        os.path.join(ROOT, "tests", "driver.py"),
        "gppo",
        f"--task={task}",
        f"--init_from={ckpt}",
        f"--out_dir={out_dir}",
        *SMALL,
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return read_jsonl(os.path.join(out_dir, "metrics.jsonl")), proc.stdout


@pytest.fixture(scope="module")
def run_once(tmp_path_factory):
    """run() of one command line, made once per test module and shared by the tests that read it:
    (metrics, stdout, out_dir)."""
    made = {}

    def once(ckpt, *extra, nproc=1, task="even"):
        key = (ckpt, extra, nproc, task)
        if key not in made:
            out_dir = tmp_path_factory.mktemp("run")
            made[key] = (*run(out_dir, ckpt, *extra, nproc=nproc, task=task), out_dir)
        return made[key]

    return once


def read_jsonl(path):
    """Every record of a JSON-lines file, read as strict JSON: NaN and Infinity, which Python's json
    writes by default and other readers reject, raise here."""

    def no_constant(name):
        raise ValueError(f"{path}: {name} is not JSON")

    with open(path) as fh:
        return [json.loads(line, parse_constant=no_constant) for line in fh]


def weights(out_dir):
    return {
        n: p.detach().clone()
        for n, p in from_pretrained(os.path.join(out_dir, "hf")).named_parameters()
    }


def assert_same_updates(w0, w1, w2, rel):
    """w1 and w2 trained from w0 by the same SGD steps: each tensor's update must agree to `rel` in
    2-norm."""
    for name in w0:
        d1 = w1[name] - w0[name]
        d2 = w2[name] - w0[name]
        assert (d1 - d2).norm() <= rel * d1.norm(), (name, float((d1 - d2).norm() / d1.norm()))


@pytest.mark.parametrize("task", ["even", "half"])
def test_one_process_equals_two_processes(tiny_checkpoint, tmp_path, task, run_once):
    """Same prompts, samples, rewards, losses and gradients with 1 and 2 ranks. SGD (see
    tests/driver.py): each weight moves by lr x its summed gradient, and a gradient element is a sum
    over <= 128 response tokens of a mini-batch (plus the sums inside the backward), taken in
    another order by 2 ranks. An fp32 sum of T terms is
    off by at most T x 2^-24 x (sum |terms| / |sum|): 128 x 6e-8 = 8e-6 times the cancellation ratio. Allowing a
    ratio of 100 gives rel = 1e-3 for updates and losses; a real bug (a rank's tokens missing, a
    wrong 1/world) changes them by tens of percent. `half`: groups are dropped and refilled,
    unevenly across ranks; every rank must still run the same collectives, and the survivors form
    the same mini-batches."""
    extra = ["--max_gen_rounds=3"] if task == "half" else []
    one, out = run(tmp_path / "one", tiny_checkpoint, "--steps=2", "--sgd", *extra, task=task)
    # the last line says whether every step updated the policy, and only then
    every_step_updated = all(record["updates"] for record in one)
    said = "every step of this command updated the policy" in out
    assert said == every_step_updated, out[-1000:]
    # shared with test_balancing_ranks_changes_no_gradient
    two, _, two_dir = run_once(tiny_checkpoint, "--steps=2", "--sgd", *extra, nproc=2, task=task)
    assert len(one) == len(two) == 2
    for a, b in zip(one, two):
        # the same samples: rewards equal up to float64 sums over ranks taken in another order
        assert (
            a["reward"] == pytest.approx(b["reward"], rel=1e-12)
            and a["prompts_sampled"] == b["prompts_sampled"]
        )
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-6), (a, b)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3), (a, b)
        assert a["updates"] == b["updates"] and a["groups_trained"] == b["groups_trained"]
    w0 = {n: p.detach().clone() for n, p in from_pretrained(tiny_checkpoint).named_parameters()}
    assert_same_updates(w0, weights(tmp_path / "one"), weights(two_dir), rel=1e-3)


def test_freeing_the_engine_while_training_changes_nothing(tiny_checkpoint, tmp_path):
    """--free_engine (auto: on a GPU) gives the engine's weights and KV pool back while the policy
    trains; step 7 copies the weights back, generate() allocates the pool again: every sample,
    reward and loss is the same as without. auto leaves them on a CPU (re-allocating the pool costs
    time there, and memory is not short)."""
    freed, _ = run(tmp_path / "freed", tiny_checkpoint, "--steps=2", "--free_engine=true")
    kept, _ = run(tmp_path / "kept", tiny_checkpoint, "--steps=2", "--free_engine=false")
    # noqa
    strip = lambda rec: {
        k: v for k, v in rec.items() if not k.startswith("time_") and not k.endswith("tok_s")
    }
    assert [strip(r) for r in freed] == [strip(r) for r in kept] and len(freed) == 2
    with pytest.raises(SystemExit, match="free_engine must be one of auto, true, false"):
        parse_config(gppo.GPPOConfig, ["--free_engine=yes"])


def test_a_rank_may_wait_longer_than_the_default_timeout(tiny_checkpoint, tmp_path):
    """Ranks decode on their own and meet afterwards: rank 0 waits in the step's first collective as
    long as rank 1's rollout takes beyond its own. Here torch's default process-group timeout is cut
    to 2 s (standing in for NCCL's 10 minutes) and rank 1's scoring sleeps twice that: the step
    completes because gppo.py sets its own timeout (--dist_timeout_minutes); a process group made
    with the default would abort it."""
    from driver import SLOW_RANK_S

    records, _ = run(
        tmp_path / "slow",
        tiny_checkpoint,
        "--steps=1",
        nproc=2,
        task="slow",
        env=dict(DEFAULT_PG_TIMEOUT_S=str(SLOW_RANK_S / 2)),
    )
    assert [r["step"] for r in records] == [1]


def test_an_error_on_one_rank_ends_the_job_promptly(tiny_checkpoint, tmp_path):
    """A bug or an out-of-memory error on one rank while the other waits in a collective: the job
    ends with that rank's traceback, well before the collective's timeout (two hours), instead of
    the other rank waiting it out; the traceback says which checkpoint the same command resumes
    from."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        os.path.join(ROOT, "tests", "driver.py"),
        "gppo",
        "--task=crash",
        f"--init_from={tiny_checkpoint}",
        f"--out_dir={tmp_path}",
        *SMALL,
        "--steps=2",
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode != 0
    assert (
        "simulated out-of-memory on rank 1" in proc.stderr
        and "rank 1: stopped by the error above" in proc.stderr
    )
    # the traceback ends with what a rerun resumes from: here, nothing had been checkpointed yet
    assert "no checkpoint is complete yet: the same command starts from step 0" in proc.stderr, (
        proc.stderr[-3000:]
    )


@pytest.mark.parametrize("task,extra", [("half", ["--max_gen_rounds=3"])])
def test_stop_and_resume_is_exact(tiny_checkpoint, tmp_path, task, extra):
    """With over-generation, where a step consumes a varying number of prompts (the checkpoint keeps
    the position in the prompt stream). Without it: tests/test_checkpoint.py (a NaN, then a kill
    inside an export)."""
    full, _ = run(tmp_path / "full", tiny_checkpoint, "--steps=3", *extra, task=task)
    run(tmp_path / "split", tiny_checkpoint, "--steps=1", *extra, task=task)
    resumed, out = run(tmp_path / "split", tiny_checkpoint, "--steps=3", *extra, task=task)
    assert "resumed from" in out
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for a, b in zip(full[1:], resumed[1:]):
        assert a["reward"] == b["reward"] and a["loss"] == b["loss"], (a, b)
    w_full = weights(tmp_path / "full")
    w_split = weights(tmp_path / "split")
    for name in w_full:
        assert torch.equal(w_full[name], w_split[name]), name


def test_simple_task_is_learned(tiny_checkpoint, tmp_path):
    metrics, _ = run(
        tmp_path / "learn",
        tiny_checkpoint,
        "--steps=8",
        "--prompts_per_step=8",
        "--mini_batch_prompts=4",
        "--lr=3e-2",
        "--max_response_len=24",
    )
    rewards = [m["reward"] for m in metrics]
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.05, rewards  # random: ~0.5


def test_all_equal_groups_skip_the_step(tiny_checkpoint, tmp_path):
    """Every response right: every group dropped, no step updates the policy; after
    NO_UPDATE_WARNING_STEPS such steps in a row one warning names the cause (always right) and the
    fixes, and the last line counts the idle steps."""
    steps = rl_report.NO_UPDATE_WARNING_STEPS
    metrics, out = run(tmp_path / "const", tiny_checkpoint, f"--steps={steps}", task="constant")
    assert "no update this step" in out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{steps} steps in a row without an update" in warnings[0], out[
        -3000:
    ]
    assert "always solves these prompts" in warnings[0] and "--group_size" in warnings[0], warnings
    assert (
        f"done: {steps} steps, {steps} of the {steps} steps of this command updated nothing" in out
    ), out[-1000:]
    assert all(m["updates"] == 0 and m["groups_kept"] == 0 and "loss" not in m for m in metrics)
    before = {n: p for n, p in from_pretrained(tiny_checkpoint).named_parameters()}
    for name, w in weights(tmp_path / "const").items():
        assert torch.equal(w, before[name]), name


def test_no_update_warning_names_the_cause():
    """The cause follows the on-policy accuracy of the step: never right, always right, or prompts
    all-or-nothing."""
    # noqa: E731
    said = lambda accuracy: rl_report.no_update_warning(
        dict(accuracy=accuracy), 3, gppo.GPPOConfig()
    )
    assert "never solves these prompts: train the SFT model longer" in said(0.0)
    assert "always solves these prompts: give harder prompts" in said(1.0)
    assert "all of its samples or by none" in said(0.5)


def test_real_prompts_without_eval_data_evaluate_nothing_and_samples_are_logged(
    tiny_checkpoint, tmp_path
):
    """--math_data without --eval_data: no held-out evaluation (the toy's would measure nothing of
    this model), said once. samples.jsonl, here every response of the step (4 prompts x 4): their
    rewards average to the step's logged reward, and within each prompt's group the advantages are
    GRPO's of the logged rewards, recomputed here. A run that died after logging step 2 and before
    its checkpoint: the resumed run logs step 2 again, once."""
    rows = [dict(id=f"q{i}", problem=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(16)]
    (tmp_path / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "math"
    args = (f"--math_data={tmp_path / 'math.jsonl'}", "--eval_every=1", "--log_samples=16")
    metrics, stdout = run(out, tiny_checkpoint, "--steps=1", *args)
    assert (
        stdout.count("held-out evaluation: off (--math_data/--code_data without --eval_data)") == 1
    ), stdout
    assert "held-out greedy" not in stdout and not any("eval_accuracy" in r for r in metrics)
    # what a run killed after step 2's log, before its checkpoint, left
    with open(out / "samples.jsonl", "a") as fh:
        fh.write(json.dumps(dict(step=2, response="from the killed run")) + "\n")
    metrics, stdout = run(out, tiny_checkpoint, "--steps=2", *args)
    assert "resumed from" in stdout and [r["step"] for r in metrics] == [1, 2]
    samples = read_jsonl(out / "samples.jsonl")
    assert [s["step"] for s in samples] == [1] * 16 + [2] * 16, [s["step"] for s in samples]
    for rec in metrics:
        mine = [s for s in samples if s["step"] == rec["step"]]
        assert np.mean([s["reward"] for s in mine]) == pytest.approx(rec["reward"], rel=1e-12)
        for position in {s["prompt_position"] for s in mine}:
            group = sorted(
                (s for s in mine if s["prompt_position"] == position), key=lambda s: s["sample"]
            )
            r = np.array([s["reward"] for s in group])
            expected = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
            # fp32 of values < 2
            assert [s["advantage"] for s in group] == pytest.approx(expected, abs=1e-6)
            assert all(s["group_kept"] == (r.max() > r.min()) for s in group)
            assert all(s["prompt"].startswith("<|im_start|>user\nWhat is ") for s in group)
            assert all(
                s["finish_reason"] in ("stop", "length") and isinstance(s["response"], str)
                for s in group
            )


def test_log_samples_draws_a_fixed_number_per_step_the_same_on_resume(toy_files):
    """rl_report.log_samples: min(log_samples, responses) records per step, in stream order, drawn by a
    generator seeded by the step (a resumed run draws the same ones); another step draws others."""
    from types import SimpleNamespace

    tok = data.load_tokenizer(os.path.join(toy_files["sums"], "tokenizer"))
    groups = [
        gppo.Group(
            position,
            dict(prompt_ids=[1, 2]),
            [Sample([3, 4], [0.0, 0.0], "stop")] * 8,
            [float(j % 2) for j in range(8)],
            [bool(j % 2) for j in range(8)],
            torch.zeros(8),
            True,
        )
        for position in range(4)
    ]

    def drawn(step, n):
        written = []
        log = SimpleNamespace(write=written.append)
        rl_report.log_samples(log, groups, step, gppo.GPPOConfig(log_samples=n), tok)
        return [(w["prompt_position"], w["sample"]) for w in written]

    assert (
        len(drawn(1, 3)) == 3 and drawn(1, 3) == sorted(drawn(1, 3)) and drawn(1, 3) == drawn(1, 3)
    )
    assert drawn(1, 3) != drawn(2, 3) and len(drawn(1, 100)) == 32


def test_no_sft_checkpoint_says_what_to_do(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "gppo.py"), f"--init_from={tmp_path}/nothing"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode != 0 and "run `python sft.py` first" in proc.stderr + proc.stdout


def test_group_advantages_by_hand():
    adv, keep = gppo_loss.group_advantages(
        [[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0.25, 0.5, 0.5, 1.0]]
    )
    s = (4 / 3 * 0.25) ** 0.5  # unbiased std of [1, 0, 0, 1]
    torch.testing.assert_close(adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (s + 1e-6))
    assert keep.tolist() == [True, False, False, True]
    assert torch.equal(adv[1], torch.zeros(4)) and torch.equal(adv[2], torch.zeros(4))


def seq(ids, prompt_len, old, advantage, correct=False, group=0):
    return TrainSeq(
        ids,
        prompt_len,
        group,
        advantage,
        correct,
        engine_logprobs=[0.0] * len(old),
        old_logprobs=old,
    )


def test_packing_and_logit_positions():
    seqs = [
        seq([1, 2, 3, 4, 5], 3, [0.1, 0.2], 1.0, group=0),
        seq([6, 7, 8], 1, [0.3, 0.4], -1.0, True, group=1),
        seq([9] * 7, 2, [0.0] * 5, 0.5, group=2),
    ]
    rows = data.pack_in_order(seqs, row_tokens=8)
    assert [len(r) for r in rows] == [2, 1]
    t = row_tensors(rows[0], data.shared_prompt_layout(rows[0]), torch.device("cpu"))
    assert t["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
    assert t["document_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1]]
    assert t["logit_positions"].tolist() == [2, 3, 5, 6] and t["targets"].tolist() == [4, 5, 7, 8]
    assert (
        t["adv"].tolist() == [1.0, 1.0, -1.0, -1.0]
        and t["sft"].tolist() == [0, 0, 1, 1]
        and t["num_tokens"] == 4
    )
    assert t["old"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_shared_prompt_packing_by_hand():
    """Two responses of group 7 share its prompt [1, 2, 3] in the row; group 8's sequence starts a
    new prompt."""
    seqs = [
        seq([1, 2, 3, 4, 5], 3, [0.1, 0.2], 1.0, group=7),
        seq([1, 2, 3, 6], 3, [0.3], -1.0, True, group=7),
        seq([9, 8, 7], 2, [0.5], 0.5, group=8),
    ]
    # 5 + 1 + 3
    assert [len(r) for r in data.pack_in_order(seqs, row_tokens=9, share_prompts=True)] == [3]
    # 5 + 4, 3
    assert [len(r) for r in data.pack_in_order(seqs, row_tokens=9)] == [2, 1]
    layout = data.shared_prompt_layout(seqs, share_prompts=True)
    t = row_tensors(seqs, layout, torch.device("cpu"))
    assert t["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 9, 8, 7]]
    assert t["position_ids"].tolist() == [[0, 1, 2, 3, 4, 3, 0, 1, 2]]
    assert t["document_ids"].tolist() == [[0, 0, 0, 1, 1, 2, 3, 3, 4]] and t["prefix_docs"] == [
        [-1, 0, 0, -1, 3]
    ]
    # response tokens 4, 5 | 6 | 7: predicted by the prompt's last state (2), then by 4 (3); by 2;
    # by 8 (7)
    assert t["logit_positions"].tolist() == [2, 3, 2, 7] and t["targets"].tolist() == [4, 5, 6, 7]
    assert t["adv"].tolist() == [1.0, 1.0, -1.0, 0.5]
    # what a rank without rows runs to keep FSDP in lockstep
    dummy = row_tensors(None, None, torch.device("cpu"))
    assert dummy["num_tokens"] == 0 and dummy["input_ids"].shape == (1, 2)


def test_shared_prompts_give_the_logprobs_of_separate_sequences():
    """row_logprobs on a real group (float64 tiny model): sharing the prompt changes no logprob
    beyond rounding. The hidden states agree to float64 rounding (~1e-15 relative), but row_logprobs
    casts the logits to fp32 before its log-softmax (as training does), where two values that close
    can still round one fp32 ulp apart; the
    log-softmax carries that to a few ulps of the logsumexp: atol 16 * 2^-23 * max(1, max|logprob|). A response
    scored against the wrong position or without its prompt is off by O(1)."""
    model = from_pretrained(
        os.path.join(os.path.dirname(__file__), "fixtures", "qwen3-tiny-gqa")
    ).double()
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(128, (5,), generator=gen).tolist()
    seqs = [
        seq(prompt + torch.randint(128, (n,), generator=gen).tolist(), 5, [0.0] * n, 1.0)
        for n in (3, 8, 1, 5)
    ]
    out = {}
    for share in (False, True):
        out[share] = torch.tensor(
            [
                lp
                for row in data.pack_in_order(seqs, 64, share)
                for lp in gppo.row_logprobs(
                    model,
                    row_tensors(row, data.shared_prompt_layout(row, share), torch.device("cpu")),
                    1.0,
                )
            ],
            dtype=torch.float64,
        )
    assert len(out[True]) == 17
    atol = 16 * 2**-23 * max(1.0, float(out[False].abs().max()))
    torch.testing.assert_close(out[True], out[False], rtol=0, atol=atol)


# ----------------------------------------------------------------------------- method fidelity


def toy_prompt_ids(first, count, seed=1234):
    """The ids of stream positions first..first+count-1, as gppo.main orders the RL prompts of
    SMALL's file."""
    tasks = data.load_math_jsonl(SMALL[0].split("=", 1)[1])
    return [t["id"] for t in data.stream(tasks, first, count, seed)]


# tests/driver.py's `half` task: these prompts have a learning signal, the others are dropped
def odd(task_id):
    return zlib.crc32(task_id.encode()) % 2 == 1


@pytest.mark.parametrize("rounds,oversample", [(1, 1.0), (4, 1.0), (2, 1.5)])
def test_dropped_groups_are_refilled_and_repacked(tiny_checkpoint, tmp_path, rounds, oversample):
    """--task=half: by hand, from the prompt stream, how many groups survive each round (each round
    samples ceil(oversample x 4) prompts); survivors are trained in full mini-batches of 2 (the last
    may be partial), at most 4 groups, and rounds stop once 4 have survived."""
    metrics, _ = run(
        tmp_path / "half",
        tiny_checkpoint,
        "--steps=2",
        f"--max_gen_rounds={rounds}",
        f"--oversample={oversample}",
        task="half",
    )
    # prompts per round: ceil(oversample x prompts_per_step)
    cursor = 0
    per_round = math.ceil(oversample * 4)
    for rec in metrics:
        kept = 0
        used = 0
        while used < rounds and kept < 4:
            kept += sum(map(odd, toy_prompt_ids(cursor, per_round)))
            cursor, used = cursor + per_round, used + 1
        assert rec["gen_rounds"] == used and rec["prompts_sampled"] == per_round * used, rec
        assert rec["groups_trained"] == min(kept, 4) and rec["updates"] == -(-min(kept, 4) // 2), (
            rec
        )
        assert rec["groups_dropped"] == per_round * used - kept


def test_mini_batches_are_full_and_in_stream_order():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    groups = [gppo.Group(p, {}, [], [], [], torch.zeros(2), True) for p in (9, 1, 7, 2, 5, 12)]
    batches = mini_batches_of(groups[:5], size=3, limit=6, world=1)
    assert [[g.position for g in b] for b in batches] == [[1, 2, 5], [7, 9]]
    # more survivors than a step trains on
    assert [[g.position for g in b] for b in mini_batches_of(groups, 2, 4, world=1)] == [
        [1, 2],
        [5, 7],
    ]


def test_balance_plan_by_hand_and_its_bound():
    # 110 tokens, mean 55: rank 0 keeps 50 (30 and 20 would pass the mean), rank 1 keeps its 10 and
    # takes both
    assert trainer.balance_plan([[50, 30, 20], [10]]) == [[0, 1, 1], [1]]
    # balanced already: nothing moves
    assert trainer.balance_plan([[5, 5], [5, 5]]) == [[0, 0], [1, 1]]
    # a rank with no groups gets half
    assert trainer.balance_plan([[], [7, 7, 7, 7]]) == [[], [1, 1, 0, 0]]
    rng = np.random.default_rng(0)
    for _ in range(300):
        world = int(rng.integers(2, 6))
        lengths = [
            rng.integers(1, 400, size=int(rng.integers(0, 7))).tolist() for _ in range(world)
        ]
        dest = trainer.balance_plan(lengths)
        load = [0] * world
        for r, ls in enumerate(lengths):
            for i, n in enumerate(ls):
                load[dest[r][i]] += n
        total = sum(map(sum, lengths))
        assert sum(load) == total
        assert max(load) <= total / world + max(map(max, filter(None, lengths)), default=0), (
            lengths,
            dest,
        )
        assert max(load) <= max(map(sum, lengths))  # never worse than not moving


def _balance_worker(rank, store_path, results):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        # noqa
        seq = lambda n, tag: TrainSeq(
            [tag] * n, 1, tag, 0.0, False, [0.0] * (n - 1), [0.0] * (n - 1)
        )
        mine = (
            [[seq(50, 0), seq(30, 1), seq(20, 2)], [seq(8, 3)]]
            if rank == 0
            else [[seq(10, 4)], [seq(8, 5)]]
        )
        results[rank] = [
            [(s.group, len(s.ids), len(s.old_logprobs)) for s in seqs]
            for seqs in trainer.balance_ranks(mine, lambda s: len(s.ids), rank, 2)
        ]
    finally:
        dist.destroy_process_group()


def test_balance_ranks_moves_sequences_between_two_ranks(tmp_path):
    """Two gloo ranks: in the first mini-batch rank 0 holds 100 tokens and rank 1 10, so rank 1
    takes the 30 and the 20 (the plan above); the second mini-batch is balanced and stays. Each
    sequence arrives whole."""
    import torch.multiprocessing as mp

    results = mp.Manager().dict()
    mp.spawn(_balance_worker, args=(str(tmp_path / "store"), results), nprocs=2, join=True)
    assert results[0] == [[(0, 50, 49)], [(3, 8, 7)]]
    assert results[1] == [[(4, 10, 9), (1, 30, 29), (2, 20, 19)], [(5, 8, 7)]]


def test_balancing_ranks_changes_no_gradient(tiny_checkpoint, tmp_path, run_once):
    """Two ranks whose groups are dropped unevenly (task `half`): the same losses and updates with
    sequences moved between ranks as without (rel 1e-3: fp32 sums in another order, as
    test_one_process_equals_two_processes)."""
    args = ["--steps=2", "--sgd", "--max_gen_rounds=3"]
    moved, _, moved_dir = run_once(tiny_checkpoint, *args, nproc=2, task="half")
    stay, _ = run(
        tmp_path / "stay", tiny_checkpoint, *args, "--balance_ranks=false", nproc=2, task="half"
    )
    for a, b in zip(moved, stay):
        assert (
            a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-6)
            and a["updates"] == b["updates"]
        )
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-3)
        assert 1.0 <= a["rank_load_max"] and 1.0 <= b["rank_load_max"]
    w0 = {n: p.detach().clone() for n, p in from_pretrained(tiny_checkpoint).named_parameters()}
    assert_same_updates(w0, weights(moved_dir), weights(tmp_path / "stay"), rel=1e-3)


def test_truncated_responses_can_be_left_out_of_the_loss():
    samples = [
        Sample([5, 6, 7], [-1.0, -1.0, -1.0], "length"),
        Sample([5, 2], [-0.5, -0.5], "stop"),
    ]
    group = gppo.Group(
        0,
        {"prompt_ids": [1, 2]},
        samples,
        [0.0, 1.0],
        [False, True],
        torch.tensor([-0.7, 0.7]),
        True,
    )
    every = training_sequences([group], mask_truncated=False)
    assert [s.ids for s in every] == [[1, 2, 5, 6, 7], [1, 2, 5, 2]]
    assert (
        every[1].advantage == pytest.approx(0.7) and every[1].correct and every[1].prompt_len == 2
    )
    assert every[1].old_logprobs == every[1].engine_logprobs == [-0.5, -0.5]
    masked = training_sequences([group], mask_truncated=True)
    assert [s.ids for s in masked] == [[1, 2, 5, 2]]


DOUBLE = [{"input": f"{x}\n", "output": f"{2 * x}\n"} for x in (1, 2, 3)]


def test_code_prompts_are_filtered_by_their_tests_not_by_difficulty():
    problems = [
        dict(id="weak-model-fails", tests=DOUBLE, pass_rate=0.3),
        dict(
            id="reference-passes",
            tests=DOUBLE,
            pass_rate=0.6,
            solutions=["print(2 * int(input()))"],
        ),
        dict(
            id="broken-tests",
            tests=DOUBLE[:2] + [{"input": "3\n", "output": "7\n"}],
            solutions=["print(2 * int(input()))", "print(int(input()) * 2)"],
        ),
        dict(
            id="second-reference-passes",
            tests=DOUBLE,
            solutions=["print(0)", "n = int(input())\nprint(n + n)"],
        ),
        dict(id="nothing-to-check", tests=DOUBLE),
    ]
    kept, counts = filter_code.check_code_prompts(
        problems, min_pass_rate=0.5, check_references=True, timeout_s=10
    )
    assert [p["id"] for p in kept] == [
        "reference-passes",
        "second-reference-passes",
        "nothing-to-check",
    ]
    assert counts == dict(
        code_prompts=5, dropped_pass_rate=1, dropped_references_fail=1, references_checked=3, kept=3
    )
    kept, counts = filter_code.check_code_prompts(
        problems, min_pass_rate=0.5, check_references=False
    )
    assert len(kept) == 4 and counts["references_checked"] == 0


def test_filter_code_command_copies_the_kept_rows(tmp_path):
    rows = [
        dict(id="ok", prompt="Double n.", tests=DOUBLE * 6, solutions=["print(2 * int(input()))"]),
        dict(
            id="few-tests", prompt="Double n.", tests=DOUBLE, solutions=["print(2 * int(input()))"]
        ),
        dict(
            id="broken",
            prompt="Double n.",
            tests=DOUBLE * 5 + [{"input": "1\n", "output": "3\n"}] * 3,
            solutions=["print(2 * int(input()))"],
        ),
        dict(id="unchecked", prompt="Double n.", tests=DOUBLE * 6),
    ]
    lines = [json.dumps(r) + "\n" for r in rows]
    # a blank line too
    (tmp_path / "in.jsonl").write_text("".join(lines[:2]) + "\n" + "".join(lines[2:]))
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "filter_code.py"),
            f"--code_data={tmp_path}/in.jsonl",
            f"--out={tmp_path}/out.jsonl",
            "--timeout_s=10",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out.jsonl").read_text() == lines[0] + lines[3]
    assert "'dropped_few_tests': 1" in proc.stdout and "'dropped_references_fail': 1" in proc.stdout


def score(task, text, cfg):
    """(reward, fully correct) as gppo.py scores a response: reward.scorer on --reward_scale and
    --code_reward."""
    verdict = reward.scorer(cfg, cfg.reward_scale, cfg.code_reward)(task, text)
    return verdict.reward, verdict.correct


def test_any_listed_answer_is_right():
    task = dict(kind="math", answer="2", answers=["2", "-2"])
    assert score(task, "<think>x</think> \\boxed{-2}", gppo.GPPOConfig()) == (1.0, True)
    assert score(task, "<think>x</think> \\boxed{3}", gppo.GPPOConfig()) == (0.0, False)


@pytest.mark.parametrize(
    "scale,text,expected",
    [
        ("default", "<think>x</think> \\boxed{4}", (1.0, True)),
        ("default", "<think>x</think> \\boxed{5}", (0.0, False)),
        ("default", "<think>x \\boxed{4}", (0.0, False)),
        ("default", "x</think> \\boxed{4}", (1.0, True)),
        ("authors", "<think>x</think> \\boxed{4}", (1.0, True)),
        ("authors", "<think>x</think> \\boxed{5}", (-1.0, False)),
        # no </think>: -0.5, above a wrong answer
        ("authors", "<think>x \\boxed{4}", (-0.5, False)),
        ("authors", "x</think> \\boxed{4}", (-2.0, False)),  # no <think>: -2
        # both missing: </think> is checked first
        ("authors", "x \\boxed{4}", (-0.5, False)),
    ],
)
def test_reward_scales_math(scale, text, expected):
    assert (
        score(dict(kind="math", answer="4"), text, gppo.GPPOConfig(reward_scale=scale)) == expected
    )


def test_reward_scales_code():
    # the last test fails
    task = dict(kind="code", tests=DOUBLE + [{"input": "4\n", "output": "9\n"}])
    code = "<think>x</think>\n```python\nprint(2 * int(input()))\n```"
    assert score(task, code, gppo.GPPOConfig()) == (0.75, False)
    # 2 * 0.75 - 1
    assert score(task, code, gppo.GPPOConfig(reward_scale="authors")) == (0.5, False)
    assert score(task, code, gppo.GPPOConfig(reward_scale="authors", code_reward="binary")) == (
        -1.0,
        False,
    )
    assert score(task, "<think>x</think> no code", gppo.GPPOConfig(reward_scale="authors")) == (
        -1.0,
        False,
    )
    assert score(dict(task, tests=DOUBLE), code, gppo.GPPOConfig(code_reward="binary")) == (
        1.0,
        True,
    )


def test_the_rl_loop_drops_code_prompts_with_fewer_than_min_tests(tmp_path, toy_files):
    """data.rl_prompts (gppo.py's) passes --min_tests to the loader: rows of 3 and 15 tests are
    dropped at 16 (the paper's threshold, the default) and the count is reported (gppo.py prints
    it); --min_tests=3 keeps them."""
    rows = [
        dict(
            id=f"p{k}",
            prompt="Echo.",
            tests=[{"input": f"{i}\n", "output": f"{i}\n"} for i in range(k)],
        )
        for k in (3, 16, 15, 20)
    ]
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = data.load_tokenizer(os.path.join(toy_files["sums"], "tokenizer"))
    tasks, _, report = data.rl_prompts(gppo.GPPOConfig(code_data=str(path)), tok)
    assert [t["id"] for t in tasks] == ["p16", "p20"] and all(t["kind"] == "code" for t in tasks)
    assert "'dropped_few_tests': 2" in report[0], report
    assert len(data.rl_prompts(gppo.GPPOConfig(code_data=str(path), min_tests=3), tok)[0]) == 4


def test_held_out_greedy_avg_at_k_and_pass_at_k_by_hand(toy_files):
    """eval.during_training() with a GPPOConfig, as gppo.py evaluates: one greedy and eval_k sampled
    responses per held-out problem, each problem seeded as eval.py seeds it (by --eval_seed, the
    set's name and the problem's index); three Countdown problems whose responses are right 1/4,
    0/4 and 4/4 times (greedy right only on the first): greedy 1/3, Avg@4 (1/4 + 0 + 1) / 3,
    pass@4 2/3."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    import eval as ev
    from tools.toy_tasks import countdown

    tok = data.load_tokenizer(os.path.join(toy_files["countdown"], "tokenizer"))
    held_out = data.load_math_jsonl(
        os.path.join(toy_files["countdown"], "test", "countdown_3.jsonl")
    )[:3]
    cfg = gppo.GPPOConfig(eval_k=4, eval_seed=5)
    problems = data.encode_prompts(tok, held_out, cfg.max_prompt_len)[0]  # as eval.py encodes them
    for p in problems:
        assert len(p["numbers"]) == 3 and p["kind"] == "countdown"
    index = {tuple(p["prompt_ids"]): i for i, p in enumerate(problems)}
    # noqa
    right = lambda p: (
        "<think>\nx\n</think>\n\n\\boxed{" + countdown.solutions(p["numbers"], p["target"])[0] + "}"
    )
    wrong = "<think>\nx\n</think>\n\n\\boxed{1+1}"
    sampled_right = {0: 1, 1: 0, 2: 4}
    calls = []

    class Engine:
        def generate(self, prompts, params):
            calls.append([(p.temperature, p.n, p.seed) for p in params])
            out = []
            for ids, p in zip(prompts, params):
                i = index[tuple(ids)]
                texts = (
                    [right(problems[i]) if i == 0 else wrong]
                    if p.temperature == 0
                    else [right(problems[i]) if j < sampled_right[i] else wrong for j in range(p.n)]
                )
                out.append([Sample(tok.encode(t).ids, [0.0], "stop") for t in texts])
            return out

    got = ev.during_training(Engine(), tok, held_out, cfg, step=0, rank=0, world=1)
    assert got == pytest.approx(
        dict(eval_accuracy=1 / 3, eval_avg_k=(0.25 + 0 + 1) / 3, eval_pass_k=2 / 3)
    )
    seeds = [ev.problem_seed(5, "held_out", i) for i in range(3)]
    assert calls == [[(0.0, 1, seed) for seed in seeds], [(1.0, 4, seed) for seed in seeds]]
