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


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A random 1-layer Qwen3 with the toy tokenizer, saved as a Hugging Face directory (one per test module)."""
    import data
    from model import Qwen3, Qwen3Config, save_pretrained
    path = str(tmp_path_factory.mktemp("tiny"))
    tok = data.build_toy_tokenizer()
    data.save_tokenizer(tok, path)
    cfg = Qwen3Config(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, tie_word_embeddings=True,
                      torch_dtype="float32", max_position_embeddings=512)
    save_pretrained(Qwen3(cfg).init_weights(seed=0), path)
    return path


@pytest.fixture(scope="session", autouse=True)
def cpu_kernel_built():
    """Build rollout.py's C++ decode kernel (or learn that it cannot be built) once, before any test: the first
    build takes ~40 s, and a test's subprocess with its own timeout should not be the one that pays it."""
    import rollout
    rollout.load_cpu_kernel()
