"""Shared test setup.

TRITON_INTERPRET=1 must be set before triton is first imported, so that every Triton kernel in the
project runs on the CPU under the interpreter and can be checked against its PyTorch reference.
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402


@pytest.fixture
def run_here(monkeypatch):
    """`python SCRIPT ARGS...` run in this process (runpy, as __main__), for the many --help and
    bad-input checks that end before any work: a CompletedProcess-like (returncode, stdout, stderr), without
    a torch import (~3 s) per case. What the script changes in the process (argv, sys.path, the
    environment it setdefaults, torch's thread count, the working directory) is put back after.
    An exception that leaves the script (a bug) is exit status 1 with its traceback on stderr, as
    a process would show it; each entry point also has a check run as a real process."""
    import contextlib
    import io
    import runpy
    import subprocess
    import traceback

    import torch

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def run(script: str, *args: str, cwd: str = root) -> subprocess.CompletedProcess:
        path = os.path.join(root, script)
        out = io.StringIO()
        err = io.StringIO()
        threads = torch.get_num_threads()
        environment = dict(os.environ)
        with monkeypatch.context() as patch:
            patch.setattr(sys, "argv", [path, *args])
            patch.setattr(sys, "path", list(sys.path))
            patch.chdir(cwd)
            status = 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    runpy.run_path(path, run_name="__main__")
                except SystemExit as stop:
                    status = stop.code if isinstance(stop.code, int) else 1
                    if isinstance(stop.code, str):
                        print(stop.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
                    status = 1
        torch.set_num_threads(threads)
        for name in set(os.environ) - set(environment):
            del os.environ[name]
        os.environ.update(environment)
        return subprocess.CompletedProcess(path, status, out.getvalue(), err.getvalue())

    return run


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir():
    """The real Qwen3 tokenizer fixture, or a skip that says how to provide it."""
    path = os.environ.get("QWEN3_TOKENIZER_DIR")
    if not path or not os.path.exists(os.path.join(path, "tokenizer.json")):
        pytest.skip(
            "set QWEN3_TOKENIZER_DIR to a directory with Qwen3's tokenizer.json and "
            "tokenizer_config.json (CI uses ../shared/fixtures/qwen3-tokenizer)"
        )
    return path


@pytest.fixture(scope="session")
def toy_files(tmp_path_factory):
    """The toy tasks' files as `python tools/toy.py` writes them, small, once per session:
    {"countdown": its directory, "sums": its directory, "sft": the options of a small SFT set (sums:
    240 addition and 40 programming conversations, seed 1234, with the sums tokenizer), "rl": the
    option of 64 RL prompts (4-number Countdown, seed 1234), "held_out": the option of 4 held-out
    ones}."""
    import json

    from tools import toy
    from tools.toy_tasks import sums

    sizes = {
        "countdown": dict(
            easy_prompts=25,
            hard_prompts=25,
            code_prompts=6,
            code_k=4,
            rl_problems=64,
            rl_programs=8,
            test_problems=4,
            test_programs=2,
        ),
        "sums": dict(
            math_prompts=60,
            code_prompts=3,
            code_tests=2,
            code_k=2,
            rl_problems=96,
            rl_programs=4,
            test_problems=6,
            test_programs=3,
        ),
    }
    files = {}
    for task, options in sizes.items():
        files[task] = str(tmp_path_factory.mktemp(task))
        toy.main(toy.ToyConfig(task=task, out=files[task], **options))
    sft = os.path.join(files["sums"], "sft_mix.jsonl")
    with open(sft, "w") as f:
        f.writelines(
            json.dumps({"messages": c}) + "\n" for c in sums.sft_conversations(240, 40, seed=1234)
        )
    files["sft"] = [f"--data={sft}", f"--tokenizer={files['sums']}/tokenizer"]
    files["rl"] = [f"--math_data={files['countdown']}/rl/countdown_4.jsonl"]
    files["held_out"] = [f"--eval_data={files['countdown']}/test/countdown_4.jsonl"]
    return files


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, toy_files):
    """A random 1-layer Qwen3 with the sums toy's tokenizer, saved as a Hugging Face directory (one
    per test module)."""
    import shutil

    import data
    from model import Qwen3, Qwen3Config
    from model import save_pretrained

    path = str(tmp_path_factory.mktemp("tiny"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(toy_files["sums"], "tokenizer", name), path)
    tok = data.load_tokenizer(path)
    cfg = Qwen3Config(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        tie_word_embeddings=True,
        torch_dtype="float32",
        max_position_embeddings=512,
    )
    save_pretrained(Qwen3(cfg).init_weights(seed=0), path)
    return path


@pytest.fixture(scope="session", autouse=True)
def cpu_kernel_built():
    """Build the engine's C++ decode kernel (parts/decode_kernels.py), or learn that it cannot be
    built, once, before any test: the first build takes ~40 s, and a test's subprocess with its own
    timeout should not be the one that pays it."""
    import rollout

    rollout.load_cpu_kernel()
