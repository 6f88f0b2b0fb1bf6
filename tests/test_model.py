"""Tests for model.py: our Qwen3 against golden logits from Hugging Face transformers, checkpoint
I/O, packed rows, the KV-cache seam, meta-device loading and activation checkpointing.

The golden fixtures under tests/fixtures/ were written once by tests/fixtures/make_golden.py (which
needs transformers); these tests only read them. Run: pytest -q tests/test_model.py
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from model import CheckpointError, Qwen3, Qwen3Config, hf_name
from model import from_pretrained, save_pretrained

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
NAMES = ["qwen3-tiny-gqa", "qwen3-tiny-tied", "qwen3-tiny-yarn"]


def fixture(name):
    return os.path.join(FIXTURES, name)


def golden(name):
    return load_file(os.path.join(fixture(name), "golden.safetensors"))


def tokens(vocab, B, T, seed=0):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- golden logits


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers_golden(name):
    g = golden(name)
    model = from_pretrained(fixture(name))
    with torch.no_grad():
        logits = model(g["input_ids"], position_ids=g["position_ids"])
        assert logits.dtype == torch.float32 and logits.shape == g["logits"].shape
        assert (logits - g["logits"]).abs().max().item() <= 1e-4
        default_positions = model(g["input_ids"])  # position_ids default to 0..T-1
    assert torch.equal(default_positions, logits)


def test_golden_fixtures_exercise_what_they_claim():
    """Guards the golden test itself: each fixture must fail if its special feature were ignored."""
    gqa, tied, yarn = (
        Qwen3Config.from_json(os.path.join(fixture(n), "config.json")) for n in NAMES
    )
    assert gqa.num_key_value_heads < gqa.num_attention_heads and not gqa.tie_word_embeddings
    assert gqa.head_dim * gqa.num_attention_heads != gqa.hidden_size
    assert tied.tie_word_embeddings and tied.num_key_value_heads == 1
    assert yarn.rope_scaling["rope_type"] == "yarn" and yarn.rope_theta == 10_000.0
    g = golden("qwen3-tiny-yarn")
    assert g["position_ids"].max() > yarn.rope_scaling["original_max_position_embeddings"]
    model = from_pretrained(fixture("qwen3-tiny-yarn"))
    model.config.rope_scaling = None  # plain RoPE: the golden must then be far off
    model.rotary._tables.clear()
    with torch.no_grad():
        assert (model(g["input_ids"], g["position_ids"]) - g["logits"]).abs().max() > 0.1


# ----------------------------------------------------------------------------- config.json


def test_config_reads_old_and_new_rope_layouts():
    with open(os.path.join(fixture("qwen3-tiny-yarn"), "config.json")) as fh:
        new = json.load(fh)
    assert "rope_parameters" in new  # what the installed transformers wrote
    old = dict(new)
    rope = dict(old.pop("rope_parameters"))
    old["rope_theta"] = rope.pop("rope_theta")
    old["rope_scaling"] = rope
    old["torch_dtype"] = old.pop("dtype")
    a = Qwen3Config.from_hf_dict(new)
    b = Qwen3Config.from_hf_dict(old)
    assert (
        a == b and a.rope_theta == 10_000.0 and a.rope_scaling["factor"] == 2.5 and a.head_dim == 32
    )
    assert Qwen3Config.from_hf_dict(Qwen3Config.from_hf_dict(old).to_hf_dict()) == a


# ----------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("name", ["qwen3-tiny-gqa", "qwen3-tiny-tied"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_save_load_round_trip_is_bit_exact(tmp_path, name, dtype):
    model = from_pretrained(fixture(name), dtype=dtype)
    save_pretrained(model, str(tmp_path))
    with open(tmp_path / "config.json") as fh:
        assert json.load(fh)["torch_dtype"] == str(dtype).removeprefix("torch.")
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys == {hf_name(n) for n, _ in model.named_parameters()}  # HF names; tied: no lm_head
    assert ("lm_head.weight" in keys) != model.config.tie_word_embeddings
    back = from_pretrained(str(tmp_path))  # dtype None: as stored
    assert back.config == model.config
    for (n, p), (n2, p2) in zip(model.named_parameters(), back.named_parameters()):
        assert n == n2 and p.dtype == p2.dtype == dtype and torch.equal(p, p2), n
    assert (back.lm_head.weight is back.embed_tokens.weight) == model.config.tie_word_embeddings
    ids = golden(name)["input_ids"]
    with torch.no_grad():
        assert torch.equal(back(ids), model(ids))


@pytest.mark.parametrize("name", ["qwen3-tiny-gqa", "qwen3-tiny-tied"])
def test_sharded_save_loads(tmp_path, name):
    model = from_pretrained(fixture(name))
    save_pretrained(model, str(tmp_path), max_shard_bytes=60_000)
    with open(tmp_path / "model.safetensors.index.json") as fh:
        weight_map = json.load(fh)["weight_map"]
    shards = sorted(set(weight_map.values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert not (tmp_path / "model.safetensors").exists()
    back = from_pretrained(str(tmp_path))
    for (n, p), (_, p2) in zip(model.named_parameters(), back.named_parameters()):
        assert torch.equal(p, p2), n
    # re-save unsharded into the same dir
    save_pretrained(back, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]  # no stale shards


def test_meta_device_load_equals_plain_build():
    for name in ["qwen3-tiny-gqa", "qwen3-tiny-tied"]:
        cfg = Qwen3Config.from_json(os.path.join(fixture(name), "config.json"))
        stored = load_file(os.path.join(fixture(name), "model.safetensors"))
        # allocated and randomly initialised first
        plain = Qwen3(cfg)
        result = plain.load_state_dict(
            {n: stored[hf_name(n)] for n, _ in plain.named_parameters()}, strict=False
        )
        assert result.unexpected_keys == [] and set(result.missing_keys) <= {"lm_head.weight"}
        # FSDP-style: meta, then materialise, then load
        with torch.device("meta"):
            staged = Qwen3(cfg)
        staged.to_empty(device="cpu")
        staged.tie_weights()
        staged.load_state_dict(plain.state_dict())
        loaded = from_pretrained(fixture(name))  # builds on meta internally
        assert all(not p.is_meta for p in loaded.parameters())
        ids = golden(name)["input_ids"]
        with torch.no_grad():
            ref = plain(ids)
            assert torch.equal(loaded(ids), ref) and torch.equal(staged(ids), ref)


# ----------------------------------------------------------------------------- loading memory


def _storages(model):
    """{storage address: bytes} of every parameter's storage (a tied weight counted once)."""
    return {
        p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()
    }


@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_loaded_weights_own_exactly_their_bytes(tmp_path, dtype):
    """Counting live tensor bytes: after from_pretrained the parameters' storages add up to one copy
    of the weights in the loaded dtype, each storage exactly its parameter's size (a loader
    returning views into one buffer per file would show storages as large as the file), and no
    checkpoint file is still mapped into this process (a mapping keeps the file's pages in the
    resident set, on top of any converted copy)."""
    model = from_pretrained(fixture("qwen3-tiny-gqa"), dtype=torch.bfloat16)
    # bf16 on disk, several shards
    save_pretrained(model, str(tmp_path), max_shard_bytes=60_000)
    back = from_pretrained(str(tmp_path), dtype=dtype)
    itemsize = (dtype or torch.bfloat16).itemsize
    weights = sum(p.numel() for p in back.parameters()) * itemsize
    storages = _storages(back)
    # no two parameters share memory
    assert len(storages) == len(list(back.parameters()))
    assert sum(storages.values()) == weights
    for p in back.parameters():
        assert p.untyped_storage().nbytes() == p.numel() * itemsize and p.storage_offset() == 0
    # Linux: this process's own mappings
    if os.path.exists("/proc/self/maps"):
        with open("/proc/self/maps") as fh:
            mapped = [line.split()[-1] for line in fh if str(tmp_path) in line]
        assert mapped == [], f"checkpoint files still mapped after loading: {sorted(set(mapped))}"


MEASURE_LOAD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from model import Qwen3, Qwen3Config
from model import from_pretrained

def kib(field):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))

torch.randn(256, 256).to(torch.bfloat16).float()             # the first conversion's one-time setup, outside the peak
with torch.device("meta"):
    Qwen3(Qwen3Config.from_json(sys.argv[2] + "/config.json"))
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")                                        # reset the peak (VmHWM) to the current RSS
except OSError:
    pass                                                     # then VmHWM also holds the (small) start-up peak
base = kib("VmRSS")
model = from_pretrained(sys.argv[2], dtype=torch.float32)
print(json.dumps(dict(peak_added=(kib("VmHWM") - base) * 1024,
                      weights=sum(p.numel() * p.element_size() for p in model.parameters()))))
"""


@pytest.mark.skipif(
    not os.path.exists("/proc/self/status"), reason="reads the peak resident set from /proc (Linux)"
)
def test_from_pretrained_peak_memory_is_one_copy(tmp_path):
    """Peak RSS of a fresh process loading a bf16 checkpoint as fp32: one fp32 copy of the weights
    plus at most one tensor as stored, not the file's pages as well. Only this test's own child
    process is measured. Bound = fp32 weights + the largest stored tensor + 16 MiB (Python objects,
    the header, allocator granularity); a loader that keeps the file mapped (or read whole) while
    converting adds the whole file (50 MB here), far above the slack. Sizes are exact byte counts,
    so the bound does not depend on the machine."""
    cfg = Qwen3Config(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    model = Qwen3(cfg).init_weights(seed=0).to(torch.bfloat16)
    save_pretrained(model, str(tmp_path))  # one 50 MB file
    file_bytes = os.path.getsize(tmp_path / "model.safetensors")
    largest = max(p.numel() * p.element_size() for p in model.parameters())
    del model
    root = os.path.dirname(os.path.dirname(FIXTURES))
    out = subprocess.run(
        [sys.executable, "-c", MEASURE_LOAD, root, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["weights"] == 2 * (
        file_bytes
        - 8
        - int.from_bytes(open(tmp_path / "model.safetensors", "rb").read(8), "little")
    )
    bound = r["weights"] + largest + 16 * 2**20
    assert r["peak_added"] <= bound, (
        f"from_pretrained added {r['peak_added'] / 2**20:.1f} MiB at its peak; one fp32 "
        f"copy is {r['weights'] / 2**20:.1f} MiB, the file {file_bytes / 2**20:.1f} MiB"
    )
    # the bound does exclude holding the whole file as well
    assert bound < r["weights"] + file_bytes


def test_error_corrupt_safetensors_header(tmp_path):
    dst, _ = _copy_fixture(tmp_path)
    data = bytearray(open(dst / "model.safetensors", "rb").read())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    # claims more bytes than its shape
    header["model.norm.weight"]["data_offsets"][1] += 4
    text = json.dumps(header, separators=(",", ":")).encode()
    # same header length: pad with spaces
    assert len(text) <= n
    (dst / "model.safetensors").write_bytes(bytes(data[:8]) + text.ljust(n) + bytes(data[8 + n :]))
    with pytest.raises(ValueError, match=r"model\.safetensors.*model\.norm\.weight.*data_offsets"):
        from_pretrained(str(dst))
    (dst / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ValueError, match="not a safetensors file"):
        from_pretrained(str(dst))


def _copy_fixture(tmp_path, name="qwen3-tiny-gqa"):
    dst = tmp_path / "ckpt"
    shutil.copytree(fixture(name), dst)
    return dst, load_file(str(dst / "model.safetensors"))


def test_error_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        from_pretrained(str(tmp_path / "does-not-exist"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        from_pretrained(str(tmp_path / "empty"))


def test_error_missing_tensor(tmp_path):
    dst, sd = _copy_fixture(tmp_path)
    del sd["model.layers.1.self_attn.k_norm.weight"]
    save_file(sd, str(dst / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"missing tensor.*model\.layers\.1\.self_attn\.k_norm\.weight"
    ):
        from_pretrained(str(dst))


def test_error_untied_checkpoint_without_lm_head(tmp_path):
    dst, sd = _copy_fixture(tmp_path)
    del sd["lm_head.weight"]
    save_file(sd, str(dst / "model.safetensors"))
    with pytest.raises(CheckpointError, match="lm_head.weight"):
        from_pretrained(str(dst))


def test_error_unexpected_tensor(tmp_path):
    dst, sd = _copy_fixture(tmp_path)
    sd["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(128)
    save_file(sd, str(dst / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors.*unexpected tensor.*q_proj\.bias"
    ):
        from_pretrained(str(dst))


def test_error_wrong_shape(tmp_path):
    dst, sd = _copy_fixture(tmp_path)
    sd["model.layers.0.mlp.up_proj.weight"] = torch.zeros(95, 64)
    save_file(sd, str(dst / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"model\.safetensors.*up_proj\.weight.*\(95, 64\).*\(96, 64\)"
    ):
        from_pretrained(str(dst))


def test_error_missing_shard(tmp_path):
    save_pretrained(
        from_pretrained(fixture("qwen3-tiny-gqa")), str(tmp_path), max_shard_bytes=60_000
    )
    shard = sorted(f for f in os.listdir(tmp_path) if f.startswith("model-"))[1]
    os.remove(tmp_path / shard)
    with pytest.raises(FileNotFoundError, match=r"index\.json.*" + shard):
        from_pretrained(str(tmp_path))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
            "model_type='llama'.*Qwen3",
        ),
        ({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]}, "qwen3_moe"),
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}, "linear"),
    ],
)
def test_error_not_qwen3_config(tmp_path, change, message):
    dst, _ = _copy_fixture(tmp_path)
    with open(dst / "config.json") as fh:
        cfg = json.load(fh)
    cfg.update(change)
    with open(dst / "config.json", "w") as fh:
        json.dump(cfg, fh)
    with pytest.raises(ValueError, match=r"config\.json.*" + message):
        from_pretrained(str(dst))


# ----------------------------------------------------------------------------- forward features


def test_packed_row_equals_separate_documents():
    model = from_pretrained(fixture("qwen3-tiny-yarn"))
    lengths = [7, 12, 5]
    docs = [tokens(128, 1, n, seed=i) for i, n in enumerate(lengths)]
    row = torch.cat(docs, dim=1)  # (1, 24)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    document_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    # A second row packed differently (one long document, then padding as its own document) checks
    # that rows are split independently.
    row2 = torch.cat([docs[1], docs[0], docs[2]], dim=1)
    pos2 = torch.cat([torch.arange(19), torch.arange(5)])[None]
    doc2 = torch.cat([torch.zeros(19, dtype=torch.long), torch.ones(5, dtype=torch.long)])[None]
    with torch.no_grad():
        packed = model(
            torch.cat([row, row2]),
            position_ids=torch.cat([position_ids, pos2]),
            document_ids=torch.cat([document_ids, doc2]),
        )
        separate = torch.cat([model(d) for d in docs], dim=1)[0]
        unpacked = model(row)[0]  # what leaking attention across documents would give
        long_doc = model(row2[:, :19])[0]
    torch.testing.assert_close(packed[0], separate, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[1, :19], long_doc, rtol=0, atol=1e-5)
    torch.testing.assert_close(packed[1, 19:], separate[19:], rtol=0, atol=1e-5)
    assert (unpacked[7:] - separate[7:]).abs().max() > 0.1


def test_shared_prefix_equals_each_document_with_its_own_copy_of_the_prefix():
    """prefix_docs: [prompt][resp1][resp2] with both responses continuing the prompt gives, for
    every response token, the hidden state and the gradients of [prompt; resp1][prompt; resp2]
    packed separately. The forward is the same per-row arithmetic in both (float64, ~1e-15 apart:
    atol 1e-10). A parameter's gradient is a sum over tokens, grouped differently in the two
    layouts, of terms that pass through RMSNorm, which runs in fp32 even in a float64
    model (as in HF): they agree to a few fp32 ulps of the largest entry (atol 64 * 2^-23 * max|grad|, ~8e-6)."""
    model = from_pretrained(fixture("qwen3-tiny-gqa")).double()
    prompt = tokens(128, 1, 6, seed=1)
    r1 = tokens(128, 1, 9, seed=2)
    r2 = tokens(128, 1, 4, seed=3)
    P = 6
    n1 = 9
    n2 = 4

    def run(shared):
        model.zero_grad(set_to_none=True)
        if shared:
            ids = torch.cat([prompt, r1, r2], 1)
            pos = torch.cat([torch.arange(P), torch.arange(P, P + n1), torch.arange(P, P + n2)])[
                None
            ]
            doc = torch.tensor([0] * P + [1] * n1 + [2] * n2)[None]
            hidden = model(
                ids,
                position_ids=pos,
                document_ids=doc,
                prefix_docs=[[-1, 0, 0]],
                return_hidden=True,
            )[0]
            prompt_h = hidden[:P]
            h1 = hidden[P : P + n1]
            h2 = hidden[P + n1 :]
        else:
            ids = torch.cat([prompt, r1, prompt, r2], 1)
            pos = torch.cat([torch.arange(P + n1), torch.arange(P + n2)])[None]
            doc = torch.tensor([0] * (P + n1) + [1] * (P + n2))[None]
            hidden = model(ids, position_ids=pos, document_ids=doc, return_hidden=True)[0]
            prompt_h = hidden[:P]
            h1 = hidden[P : P + n1]
            h2 = hidden[2 * P + n1 :]
        out = torch.cat([prompt_h, h1, h2])
        (out.sin().sum()).backward()  # any scalar that uses every state
        return out.detach(), {
            name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None
        }

    shared, shared_grads = run(True)
    separate, separate_grads = run(False)
    assert (
        shared_grads.keys() == separate_grads.keys()
        and "layers.0.self_attn.q_proj.weight" in separate_grads
    )
    torch.testing.assert_close(shared, separate, rtol=0, atol=1e-10)
    for name, grad in separate_grads.items():
        atol = 64 * 2**-23 * float(grad.abs().max())
        torch.testing.assert_close(
            shared_grads[name], grad, rtol=0, atol=atol, msg=lambda m: f"{name}: {m}"
        )
    # a response that did not see its prompt would differ by far more
    alone = model(r1, position_ids=torch.arange(P, P + n1)[None], return_hidden=True)[0].detach()
    assert (alone - separate[P : P + n1]).abs().max() > 1e-3


@pytest.mark.parametrize(
    "prefix_docs,message",
    [
        ([[-1, 0]], "2 entries for the row's 3 documents"),
        ([[-1, 2, -1]], r"prefix_docs\[0\]\[1\] = 2"),
        ([[-1, 0, 1]], r"prefix_docs\[0\]\[2\] = 1"),
        ([[-1, 0, 0], [-1]], "2 rows"),
    ],
)
def test_bad_prefix_docs_are_named(prefix_docs, message):
    model = from_pretrained(fixture("qwen3-tiny-gqa"))
    ids = tokens(128, 1, 6, seed=1)
    doc = torch.tensor([[0, 0, 1, 1, 2, 2]])
    with pytest.raises(ValueError, match=message):
        model(ids, document_ids=doc, prefix_docs=prefix_docs)
    with pytest.raises(ValueError, match="prefix_docs needs document_ids"):
        model(ids, prefix_docs=[[-1]])


def test_return_hidden_then_lm_head_equals_logits():
    for name in ["qwen3-tiny-gqa", "qwen3-tiny-tied"]:
        model = from_pretrained(fixture(name))
        ids = golden(name)["input_ids"]
        with torch.no_grad():
            hidden = model(ids, return_hidden=True)
            assert hidden.shape == (*ids.shape, model.config.hidden_size)
            assert torch.equal(model.lm_head(hidden), model(ids))


def test_activation_checkpointing_gives_identical_loss_and_grads():
    model = from_pretrained(fixture("qwen3-tiny-gqa")).train()
    ids = tokens(128, 2, 16, seed=3)
    document_ids = torch.tensor([0] * 10 + [1] * 6).expand(2, 16)
    # a pre-hook: non-reentrant checkpointing may stop the recompute before forward hooks run
    calls = []
    model.layers[0].register_forward_pre_hook(lambda *_: calls.append(1))

    def loss_and_grads(checkpointing):
        model.activation_checkpointing = checkpointing
        model.zero_grad(set_to_none=True)
        calls.clear()
        logits = model(ids[:, :-1], document_ids=document_ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, len(calls)

    loss_ref, grads_ref, calls_ref = loss_and_grads(False)
    loss_ckpt, grads_ckpt, calls_ckpt = loss_and_grads(True)
    assert calls_ref == 1 and calls_ckpt == 2  # the layer really was recomputed in backward
    assert torch.equal(loss_ref, loss_ckpt)
    for n in grads_ref:
        torch.testing.assert_close(grads_ckpt[n], grads_ref[n], rtol=0, atol=0, msg=n)


class ConcatKVCache:
    """The contract of the kv_cache seam, implemented the plainest way: per layer, append this
    call's K/V to everything seen before and let the new queries attend causally to all of it."""

    def __init__(self):
        self.k = {}
        self.v = {}

    def attend(self, layer_idx, q, k, v):  # q: (B, T, Hq, hd); k, v: (B, T, Hkv, hd)
        if layer_idx in self.k:
            k = torch.cat([self.k[layer_idx], k], dim=1)
            v = torch.cat([self.v[layer_idx], v], dim=1)
        self.k[layer_idx] = k
        self.v[layer_idx] = v
        B, T, Hq, hd = q.shape
        S = k.shape[1]
        Hkv = k.shape[2]
        k, v = (t.repeat_interleave(Hq // Hkv, dim=2) for t in (k, v))  # (B, S, Hq, hd)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / hd**0.5  # (B, Hq, T, S)
        query_pos = torch.arange(S - T, S)[:, None]
        scores = scores.masked_fill(torch.arange(S)[None, :] > query_pos, float("-inf"))
        return torch.einsum("bhts,bshd->bthd", scores.softmax(-1), v)  # (B, T, Hq, hd)


@pytest.mark.parametrize("name", ["qwen3-tiny-gqa", "qwen3-tiny-yarn"])
def test_kv_cache_seam_incremental_decoding_matches_full_forward(name):
    model = from_pretrained(fixture(name))
    ids = golden(name)["input_ids"]  # yarn: positions run past original_max (64)
    T = ids.shape[1]
    prefill = ids.shape[1] - 6
    positions = torch.arange(T).expand_as(ids)
    cache = ConcatKVCache()
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :prefill], position_ids=positions[:, :prefill], kv_cache=cache)]
        for t in range(prefill, T):  # one token at a time, then a 2-token chunk
            if t == T - 2:
                steps.append(model(ids[:, t:], position_ids=positions[:, t:], kv_cache=cache))
                break
            steps.append(
                model(ids[:, t : t + 1], position_ids=positions[:, t : t + 1], kv_cache=cache)
            )
    assert cache.k[0].shape[1] == T
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="document_ids"):
        model(ids, document_ids=torch.zeros_like(ids), kv_cache=ConcatKVCache())


def test_model_py_cli_prints_summary():
    root = os.path.dirname(os.path.dirname(FIXTURES))
    out = subprocess.run(
        [sys.executable, os.path.join(root, "model.py"), fixture("qwen3-tiny-tied")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (
        "tie_word_embeddings=True" in out.stdout
        and "parameters" in out.stdout
        and "logits" in out.stdout
    )
