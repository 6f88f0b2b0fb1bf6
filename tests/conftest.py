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


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir():
    """The real Qwen3 tokenizer fixture, or a skip that says how to provide it."""
    path = os.environ.get("QWEN3_TOKENIZER_DIR")
    if not path or not os.path.exists(os.path.join(path, "tokenizer.json")):
        pytest.skip("set QWEN3_TOKENIZER_DIR to a directory with Qwen3's tokenizer.json and "
                    "tokenizer_config.json (CI uses ../shared/fixtures/qwen3-tokenizer)")
    return path
