"""Nothing a kill can lose: sft.py and gppo.py killed with SIGKILL at each moment of a checkpoint's
commit (1 and 2 ranks; tests/driver.py's $KILL_AT picks the moment), stopped by a NaN, killed inside
an export; each time the same command resumes from the newest complete checkpoint, and the run ends
bit-identical to an uninterrupted one. Also: a resume with other settings is refused (both scripts,
1 and 2 ranks), a damaged checkpoint and a full disk are one
line naming the file, the checkpoint layout from before is read, an export stops generating at <|im_end|> in
Hugging Face transformers."""

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import data  # noqa: E402
from model import Qwen3, Qwen3Config, from_pretrained  # noqa: E402
from parts import trainer  # noqa: E402

SFT = [
    "--row_tokens=512",
    "--rows_per_step=4",
    "--n_layer=1",
    "--hidden=32",
    "--n_head=2",
    "--n_kv_head=1",
    "--head_dim=16",
    "--intermediate=64",
    "--epochs=1",
    "--log_every=1",
    "--warmup_steps=2",
    "--lr=3e-3",
    "--min_lr=1e-3",
]
GPPO = [
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
    """The toy's small SFT set (sums, 240 + 40 conversations) and 64 RL prompts (tests/conftest.py)
    for every run."""
    SFT[:0] = toy_files["sft"]
    GPPO[:0] = toy_files["rl"]


# and time_*: the only fields that may differ
TIMING = ("tokens_per_s", "elapsed_s", "rollout_tok_s", "train_tok_s")


def command(script: str, out_dir, *options, nproc: int = 1) -> list:
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
    return [
        *launcher,
        os.path.join(ROOT, "tests", "driver.py"),
        script,
        f"--out_dir={out_dir}",
        *options,
    ]


def run(cmd: list, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1", **env),
    )


def resumed_at(proc) -> int | None:
    found = re.search(r"resumed from \S+ at step (\d+)", proc.stdout)
    return int(found[1]) if found else None


def records(out_dir) -> list:
    """metrics.jsonl without the timings (the one thing two runs of the same steps may differ
    in)."""
    with open(os.path.join(out_dir, "metrics.jsonl")) as fh:
        return [
            {
                k: v
                for k, v in json.loads(line).items()
                if k not in TIMING and not k.startswith("time_")
            }
            for line in fh
        ]


def weights(path) -> dict:
    return {n: p.detach().clone() for n, p in from_pretrained(str(path)).named_parameters()}


def assert_bit_identical(out_dir, reference):
    assert records(out_dir) == records(reference)
    ours = weights(os.path.join(out_dir, "hf"))
    theirs = weights(os.path.join(reference, "hf"))
    assert all(torch.equal(ours[name], theirs[name]) for name in theirs)


def interrupted(cmd: list, stops: list) -> list:
    """Run `cmd` once per (environment, step the next run resumes from) in `stops`, each run ended
    early by its hook, then once more to the end. Each run must resume from what the run before it
    left (a first run from nothing). Returns the runs."""
    expected = None
    runs = []
    for env, resumes_from in [*stops, ({}, None)]:
        proc = run(cmd, **env)
        assert resumed_at(proc) == expected, (
            env,
            expected,
            proc.stdout[-2000:],
            proc.stderr[-3000:],
        )
        assert (proc.returncode == 0) == (not env), (
            env,
            proc.returncode,
            proc.stdout[-2000:],
            proc.stderr[-3000:],
        )
        expected = resumes_from
        runs.append(proc)
    return runs


def refused(cmd: list, field: str) -> str:
    """A resume with another value of `field` stops before it starts: one line naming the field,
    exit status 2 (torchrun: its workers' 2, torchrun's own 1)."""
    proc = run(cmd)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode in (1, 2) and len(errors) == 1, (
        proc.returncode,
        proc.stdout[-2000:],
        proc.stderr[-3000:],
    )
    assert f"--{field}=" in errors[0] and "holds a run with other settings" in errors[0], errors
    assert "resumed" not in proc.stdout
    return errors[0]


def test_sft_killed_at_each_moment_of_a_commit_resumes_exactly(tmp_path):
    """--ckpt_every=2, 8 steps, one rank, killed (or stopped) once per run:
    1. right after DCP has written step 2's .metadata, before the rename that commits it: step 2 is complete;
    2. after step 5, with step 4's background write finished: it must be committed already, not at the next save;
    3. a NaN at step 7 (the 3rd step of that run) stops it: step 6's write in flight is waited for, and named;
    4. inside the removal of step 6's checkpoint, once step 8 is committed (shards gone, .metadata left).
    Each rerun of the same command resumes from the newest complete checkpoint: 2, 4, 6, then 8 (the
    last run only exports), and the result equals an uninterrupted run's bit for bit. Then a resume
    with another --lr is refused, though other steps and checkpoint cadence are accepted."""
    options = [*SFT, "--max_steps=8", "--ckpt_every=2"]
    reference = tmp_path / "reference"
    assert run(command("sft", reference, *options)).returncode == 0
    stops = [
        ({"KILL_AT": "metadata:1"}, 2),
        ({"KILL_AT": "step:5"}, 4),
        ({"NAN_AT": "3"}, 6),
        ({"KILL_AT": "rmtree:1"}, 8),
    ]
    cmd = command("sft", tmp_path / "run", *options)
    runs = interrupted(cmd, stops)
    nan_stop = runs[2]
    assert nan_stop.returncode == 2 and "Traceback" not in nan_stop.stderr, nan_stop.stderr[-3000:]
    line = next(line for line in nan_stop.stderr.splitlines() if "grad_norm=nan" in line)
    assert (
        f"the newest complete checkpoint is of step 6 ({tmp_path}/run/checkpoint/step-6)" in line
    ), line
    assert "done: 8 steps" in runs[-1].stdout
    assert_bit_identical(tmp_path / "run", reference)
    refused([*cmd, "--lr=1e-3", "--max_steps=9", "--ckpt_every=1"], "lr")


def test_sft_on_two_ranks_killed_during_commits_resumes_exactly(tmp_path):
    """torchrun, 2 gloo ranks, a checkpoint after every step of 4: rank 1 killed as it starts writing step 2 (the
    checkpoint stays incomplete: resume from 1); rank 0 killed right after the rename that commits
    step 2 (resume from 2); rank 0 killed inside the removal of step 2 once step 3 is committed
    (resume from 3). torchrun ends the other rank each time. The end equals an uninterrupted 2-rank
    run bit for bit; a resume with another --seed is refused."""
    options = [*SFT, "--max_steps=4", "--ckpt_every=1"]
    reference = tmp_path / "reference"
    assert run(command("sft", reference, *options, nproc=2)).returncode == 0
    stops = [
        ({"KILL_AT": "write:2:1"}, 1),
        ({"KILL_AT": "rename:1:0"}, 2),
        ({"KILL_AT": "rmtree:1:0"}, 3),
    ]
    cmd = command("sft", tmp_path / "run", *options, nproc=2)
    interrupted(cmd, stops)
    assert_bit_identical(tmp_path / "run", reference)
    refused([*cmd, "--seed=7"], "seed")


def test_gppo_nan_then_a_kill_inside_an_export_then_resumes_exactly(tiny_checkpoint, tmp_path):
    """gppo.py, 3 steps, a checkpoint and an export after each, at most 2 exports kept:
    1. a NaN in the first step: no checkpoint exists yet, and its line says so (the same command starts over);
    2. killed halfway through writing step 2's export: hf still holds step 1's export, whole; the rerun resumes from
       step 2's checkpoint or, if that write had not finished, step 1's;
    Then the run equals an uninterrupted one bit for bit, exports/ holds steps 2 and 3, hf links to
    step 3, and its
    generation_config.json stops at <|im_end|> and <|endoftext|>. A resume with another --loss_mode (1 rank) or --lr
    (2 ranks) is refused."""
    options = [
        *GPPO,
        f"--init_from={tiny_checkpoint}",
        "--steps=3",
        "--ckpt_every=1",
        "--export_every=1",
        "--keep_exports=2",
    ]
    reference = tmp_path / "reference"
    assert run(command("gppo", reference, *options)).returncode == 0
    out_dir = tmp_path / "run"
    cmd = command("gppo", out_dir, *options)
    proc = run(cmd, NAN_AT="1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "grad norm nan" in proc.stderr and "no checkpoint is complete yet" in proc.stderr, (
        proc.stderr[-2000:]
    )
    proc = run(cmd, KILL_AT="export:2")  # a run from step 0: the NaN's run left no checkpoint
    assert proc.returncode == -9 and resumed_at(proc) is None, proc.stderr[-3000:]
    assert os.readlink(out_dir / "hf") == os.path.join("exports", "step-1")
    # whole: it loads
    from_pretrained(str(out_dir / "hf"))
    proc = run(cmd)
    assert proc.returncode == 0 and resumed_at(proc) in (1, 2), (
        proc.stdout[-2000:] + proc.stderr[-3000:]
    )
    assert_bit_identical(out_dir, reference)
    assert sorted(os.listdir(out_dir / "exports")) == ["step-2", "step-3"]
    assert os.readlink(out_dir / "hf") == os.path.join("exports", "step-3")
    tokenizer = data.load_tokenizer(str(tiny_checkpoint))
    generation = json.load(open(out_dir / "hf" / "generation_config.json"))
    assert generation["eos_token_id"] == [
        tokenizer.token_to_id("<|im_end|>"),
        tokenizer.token_to_id("<|endoftext|>"),
    ]
    assert json.load(open(out_dir / "hf" / "config.json"))["eos_token_id"] == tokenizer.token_to_id(
        "<|im_end|>"
    )
    refused([*cmd, "--loss_mode=grpo"], "loss_mode")
    refused(command("gppo", out_dir, *options, "--lr=2e-2", nproc=2), "lr")


# ---------------------------------------------------------------------- in this process: the pieces


def tiny_model(seed: int = 0, tie: bool = True) -> Qwen3:
    cfg = Qwen3Config(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=tie,
        torch_dtype="float32",
    )
    return Qwen3(cfg).init_weights(seed=seed)


def saved_checkpoint(root, step: int = 1, background: bool = False):
    """A checkpoint of a tiny model and its optimizer, as the trainers write it; returns (model,
    optimizer)."""
    trainer.init_distributed("cpu")
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    optimizer.step()
    ckpt = trainer.Checkpointer(str(root), background=background)
    ckpt.save(model, optimizer, {"step": step})
    ckpt.wait()
    return model, optimizer


def damage(path, what: str):
    shard = next(f for f in sorted(os.listdir(path)) if f.endswith(".distcp"))
    if what == "shard cut short":
        os.truncate(os.path.join(path, shard), os.path.getsize(os.path.join(path, shard)) // 2)
    elif what == "shard missing":
        os.remove(os.path.join(path, shard))
    elif what == "shard byte changed":  # DCP itself loads it without a word
        with open(os.path.join(path, shard), "r+b") as fh:
            fh.seek(os.path.getsize(os.path.join(path, shard)) // 2)
            byte = fh.read(1)
            fh.seek(-1, os.SEEK_CUR)
            fh.write(bytes([byte[0] ^ 0x10]))
    elif what == "index cut short":
        os.truncate(os.path.join(path, ".metadata"), 40)
    elif what == "index missing":
        os.remove(os.path.join(path, ".metadata"))
    elif what == "state invalid":
        open(os.path.join(path, "trainer_state.json"), "w").write('{"step": 3,')
    elif what == "state missing":
        os.remove(os.path.join(path, "trainer_state.json"))
    return os.path.join(
        path, shard if "shard" in what else ".metadata" if "index" in what else "trainer_state.json"
    )


@pytest.mark.parametrize(
    "what",
    [
        "shard cut short",
        "shard missing",
        "shard byte changed",
        "index cut short",
        "index missing",
        "state invalid",
        "state missing",
    ],
)
def test_a_damaged_checkpoint_is_one_line_naming_the_file(tmp_path, what):
    model, optimizer = saved_checkpoint(tmp_path / "checkpoint")
    file = damage(tmp_path / "checkpoint" / "step-1", what)
    with pytest.raises(trainer.InputError) as refused_:
        trainer.Checkpointer(str(tmp_path / "checkpoint")).resume(model, optimizer)
    message = str(refused_.value)
    assert message.startswith(file) and "damaged" in message and "\n" not in message, message


def test_a_full_disk_while_writing_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """The disk fills up while the background write of step 2 runs: wait() (every rank) raises one
    line that names the file and says no space is left, and that step 1's checkpoint is the one
    kept."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    model, optimizer = saved_checkpoint(tmp_path / "checkpoint", step=1)
    create_stream = FileSystem.create_stream

    class Full:  # a file on a disk with room for 100 bytes
        def __init__(self, stream, name):
            self.stream = stream
            self.name = name
            self.room = 100

        def write(self, b):
            if len(b) > self.room:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.name)
            self.room -= len(b)
            return self.stream.write(b)

        def __getattr__(self, name):
            return getattr(self.stream, name)

    @contextlib.contextmanager
    def full(self, path, mode):
        with create_stream(self, path, mode) as stream:
            yield Full(stream, str(path)) if str(path).endswith(".distcp") else stream

    monkeypatch.setattr(FileSystem, "create_stream", full)
    ckpt = trainer.Checkpointer(str(tmp_path / "checkpoint"), background=True)
    ckpt.save(model, optimizer, {"step": 2})
    with pytest.raises(trainer.InputError) as stop:
        ckpt.wait()
    message = str(stop.value)
    assert (
        "No space left on device" in message
        and "step-2.tmp/__0_0.distcp" in message
        and "\n" not in message
    )
    assert (
        f"the newest complete checkpoint is of step 1 ({tmp_path}/checkpoint/step-1)" in message
    ), message


def test_the_layout_from_before_is_read_and_replaced_at_the_first_commit(tmp_path):
    """A checkpoint written before there were step directories (out_dir/checkpoint holding
    .metadata, the shards and trainer_state.json) resumes; the first new commit removes it."""
    import torch.distributed.checkpoint as dcp

    model, optimizer = saved_checkpoint(tmp_path / "new")
    root = tmp_path / "checkpoint"
    dcp.save(trainer.checkpoint_state(model, optimizer), checkpoint_id=str(root))
    (root / "trainer_state.json").write_text(json.dumps({"step": 5}))
    expected = {n: p.detach().clone() for n, p in model.named_parameters()}
    fresh = tiny_model(seed=9)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    ckpt = trainer.Checkpointer(str(root), background=False)
    assert ckpt.resume(fresh, fresh_optimizer)["step"] == 5
    assert all(torch.equal(p, expected[n]) for n, p in fresh.named_parameters())
    ckpt.save(fresh, fresh_optimizer, {"step": 6})
    assert sorted(os.listdir(root)) == ["step-6"]


@dataclass
class Settings:
    out_dir: str
    lr: float = 0.1
    steps: int = 3
    resume: bool = True


def test_a_resume_must_have_the_runs_settings_and_resume_false_starts_over(tmp_path):
    """check_run: a checkpoint in out_dir and another --lr: refused, naming lr and the ways out;
    another --steps (a field that may change): resumed. --resume=false: record_run removes the
    earlier run's checkpoint, exports, link and metrics before the new one starts (nothing of two
    runs in one file)."""
    saved_checkpoint(tmp_path / "checkpoint")
    trainer.record_run(Settings(str(tmp_path)), "x.py", ("steps", "resume"), resuming=True)
    assert trainer.check_run(Settings(str(tmp_path), steps=9), "x.py", ("steps", "resume")) is True
    with pytest.raises(
        trainer.InputError, match=r"--lr=0.1 there, 0.2 now.*--resume=false to start over"
    ):
        trainer.check_run(Settings(str(tmp_path), lr=0.2), "x.py", ("steps", "resume"))
    with pytest.raises(trainer.InputError, match="holds a run of x.py, not of y.py"):
        trainer.check_run(Settings(str(tmp_path)), "y.py", ("steps", "resume"))
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    os.makedirs(tmp_path / "exports" / "step-1")
    os.symlink("exports/step-1", tmp_path / "hf")
    over = Settings(str(tmp_path), lr=0.2, resume=False)
    assert trainer.check_run(over, "x.py", ("steps", "resume")) is False
    trainer.record_run(over, "x.py", ("steps", "resume"), resuming=False)
    assert sorted(os.listdir(tmp_path)) == ["config.json"]
    assert json.load(open(tmp_path / "config.json"))["config"]["lr"] == 0.2


def test_an_export_stops_at_im_end_in_transformers(tmp_path, monkeypatch, toy_files):
    """Hugging Face generate() on an sft.py export, with the export's own generation_config.json: a
    model that puts
    <|im_end|> first stops after it (an export without it, as before, generated max_new_tokens copies of it)."""
    pytest.importorskip(
        "transformers", reason="transformers is not installed (it is not a project dependency)"
    )
    from transformers import AutoModelForCausalLM
    from model import hf_name
    from parts import hf_checkpoint

    trainer.init_distributed("cpu")
    shutil.copytree(os.path.join(toy_files["sums"], "tokenizer"), tmp_path / "tokenizer")
    tokenizer = data.load_tokenizer(str(tmp_path / "tokenizer"))
    im_end = tokenizer.token_to_id("<|im_end|>")
    cfg = Qwen3Config(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=False,
        # as sft.py builds the toy
        torch_dtype="float32",
        bos_token_id=None,
        eos_token_id=None,
    )
    model = Qwen3(cfg).init_weights(seed=0)
    # the blocks add nothing, every embedding has +1 in dim 0, only <|im_end|> reads dim 0
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.embed_tokens.weight[:, 0] = 1.0
        model.norm.weight.zero_()
        model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[im_end, 0] = 10.0
    export = hf_checkpoint.Export(
        str(tmp_path / "run"),
        str(tmp_path / "tokenizer"),
        torch.float32,
        hf_checkpoint.generation_config(data.stop_token_ids(tokenizer)),
        hf_name,
        keep=1,
    )
    trainer.export_hf(model, export, step=1)
    monkeypatch.setenv("USE_HUB_KERNELS", "0")  # transformers 5 would fetch kernels from the Hub
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "hf"))
    prompt = torch.tensor([data.encode_prompt(tokenizer, "What is 2 + 3?")])
    out = hf.generate(prompt, max_new_tokens=20, do_sample=False)
    assert out[0, prompt.shape[1] :].tolist() == [im_end]


def test_an_export_that_fails_leaves_the_previous_one(tmp_path, monkeypatch):
    """A full disk while the export of step 2 is written (safetensors says so in its own exception):
    one line naming the directory and the cause; hf still links to step 1's export, which loads."""
    import safetensors.torch
    from safetensors import SafetensorError
    from model import hf_name
    from parts import hf_checkpoint

    trainer.init_distributed("cpu")
    export = hf_checkpoint.Export(
        str(tmp_path), None, torch.float32, {"eos_token_id": [1, 2]}, hf_name, keep=2
    )
    trainer.export_hf(tiny_model(seed=1), export, step=1)

    def full(*args, **kwargs):
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(trainer.InputError) as stop:
        trainer.export_hf(tiny_model(seed=2), export, step=2)
    message = str(stop.value)
    assert (
        message.startswith(f"{tmp_path}/exports/step-2.tmp: cannot write the export of step 2")
        and "No space left on device" in message
        and f"{tmp_path}/hf is still the one before it" in message
    ), message
    assert os.readlink(tmp_path / "hf") == os.path.join("exports", "step-1")
    reloaded = weights(tmp_path / "hf")
    assert all(torch.equal(reloaded[n], p) for n, p in tiny_model(seed=1).named_parameters())
