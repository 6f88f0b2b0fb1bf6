"""Hugging Face checkpoint directories in and out: config.json and safetensors files (one, or shards
with an index), read one tensor at a time straight into a model built on the meta device (never
memory-mapped, never allocated twice: an 8B model loads where its weights fit), and written back,
sharded above 5 GiB. The model is any torch module whose parameter names map to the file's by a
function (to_hf) and whose .config has tie_word_embeddings and to_hf_dict(); this file imports
torch and safetensors only.
    load(model_on_meta, path, to_hf, dtype=torch.bfloat16, device="cuda")   # one tensor at a time
    save_pretrained(model, path, to_hf)         # config.json + model.safetensors (+ index)
    export.write(model, directory, weights)     # a run's export: its dtype, tokenizer, stop ids
A directory that is not a loadable checkpoint raises CheckpointError (or FileNotFoundError) naming
the file.
    python hf_checkpoint.py CHECKPOINT_DIR      # its tensors: names, dtypes, shapes (headers only)
"""

import json
import math
import os
import shutil
import sys
from dataclasses import dataclass

import torch
from safetensors import SafetensorError


class CheckpointError(ValueError):
    """A directory that is not a loadable checkpoint (config, safetensors, names, shapes); names the
    file."""


# ----------------------------------------------------------------------------- reading


def load(model, path: str, to_hf, dtype: torch.dtype | None = None, device=None):
    """Fill `model`, built on the meta device from path's config.json, with the checkpoint's
    tensors; dtype None keeps the stored dtype, device None means CPU. The process holds one copy of
    the weights as loaded plus one tensor as stored; no file is memory-mapped (a mapping would keep
    the file's pages resident while it lives)."""
    weights = read_weights(path, model, to_hf, dtype, device)
    model.load_state_dict(weights, strict=False, assign=True)
    if model.config.tie_word_embeddings:
        model.tie_weights()  # assign=True replaced the tied Parameter object; tie again
    return model


def read_weights(path: str, model, to_hf, dtype: torch.dtype | None = None, device=None) -> dict:
    """{our parameter name: tensor} of a checkpoint, checked against `model`'s names and shapes (a
    meta model will do), each read into fresh memory and converted to dtype (None: as stored) and
    device (None: CPU) in turn."""
    device = torch.device(device if device is not None else "cpu")
    loaded = {}
    for file, name, stored_dtype, shape, offset, nbytes in weight_entries(path, model, to_hf):
        with open(file, "rb") as fh:
            tensor = read_tensor(fh, stored_dtype, shape, offset, nbytes)
        loaded[name] = tensor.to(device=device, dtype=dtype if dtype is not None else stored_dtype)
        del tensor  # the stored-dtype buffer goes before the next tensor is read
    return loaded


def checked_dtype(path: str, model, to_hf) -> torch.dtype:
    """Raise CheckpointError / FileNotFoundError, naming the file, unless `path` holds `model`'s
    every tensor with its name and shape in files of the right sizes; reads headers only. Returns
    the weights' dtype as stored (the most common one, should a file mix them)."""
    dtypes = [entry[2] for entry in weight_entries(path, model, to_hf)]
    return max(set(dtypes), key=dtypes.count)


def weight_entries(path: str, model, to_hf) -> list:
    """[(file, our name, stored dtype, shape, offset, nbytes)] of a checkpoint's tensors, checked
    against `model`."""
    expected = {to_hf(name): p for name, p in model.named_parameters()}  # tied weights appear once
    ours = {to_hf(name): name for name, _ in model.named_parameters()}
    entries = []
    for file in checkpoint_files(path):
        for key, (dtype, shape, offset, nbytes) in read_safetensors_header(file).items():
            if key.endswith("rotary_emb.inv_freq"):
                continue  # old checkpoints stored this buffer; the model recomputes it
            if key == "lm_head.weight" and model.config.tie_word_embeddings:
                continue  # tied: lm_head is embed_tokens
            if key not in expected:
                raise CheckpointError(
                    f"{file}: unexpected tensor {key!r} "
                    "(not a parameter of the model that config.json describes)"
                )
            if shape != tuple(expected[key].shape):
                raise CheckpointError(
                    f"{file}: tensor {key!r} has shape {shape}, "
                    f"config.json implies {tuple(expected[key].shape)}"
                )
            entries.append((file, ours[key], dtype, shape, offset, nbytes))
    missing = sorted(set(expected) - {to_hf(entry[1]) for entry in entries})
    if missing:
        more = " ..." if len(missing) > 5 else ""
        raise CheckpointError(f"{path}: missing tensor(s) {missing[:5]}{more}")
    return entries


def checkpoint_files(path: str) -> list[str]:
    """The safetensors files of a checkpoint directory: the index's shards, or model.safetensors."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as fh:
            weight_map = json.load(fh).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: field 'weight_map' missing or not an object")
        files = [os.path.join(path, f) for f in sorted(set(weight_map.values()))]
        absent = [f for f in files if not os.path.exists(f)]
        if absent:
            raise FileNotFoundError(f"{index} lists shard(s) that do not exist: {absent}")
        return files
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return [single]
    raise FileNotFoundError(
        f"{path}: neither model.safetensors nor model.safetensors.index.json found"
    )


# safetensors layout: 8 bytes (little-endian header length n), n bytes of JSON header
# {name: {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
# then the data; offsets count from the end of the header.
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors_header(file: str) -> dict:
    """{name: (dtype, shape, absolute byte offset, byte length)} of one .safetensors file,
    validated."""
    size = os.path.getsize(file)
    with open(file, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if not 0 < n <= size - 8:
            raise CheckpointError(
                f"{file}: not a safetensors file (header length {n}, file size {size})"
            )
        try:
            header = json.loads(fh.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{file}: safetensors header is not valid JSON ({e})") from None
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            shape = info["shape"]
            begin, end = info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"{file}: tensor {name!r}: header entry {info} is not a supported "
                f"safetensors entry (dtypes {sorted(SAFETENSORS_DTYPES)})"
            ) from None
        nbytes = math.prod(shape) * dtype.itemsize
        if end - begin != nbytes or begin < 0 or 8 + n + end > size:
            raise CheckpointError(
                f"{file}: tensor {name!r}: data_offsets {[begin, end]} do not hold "
                f"{nbytes} bytes of a {shape} {info['dtype']} tensor inside the file "
                f"({size} bytes)"
            )
        entries[name] = (dtype, tuple(shape), 8 + n + begin, nbytes)
    return entries


def read_tensor(fh, dtype: torch.dtype, shape: tuple, offset: int, nbytes: int) -> torch.Tensor:
    """One tensor read from an open file into fresh memory (never memory-mapped, so nothing of the
    file stays resident after the caller drops the tensor)."""
    buf = bytearray(nbytes)
    fh.seek(offset)
    if fh.readinto(buf) != nbytes:
        raise CheckpointError(
            f"{fh.name}: file ends inside a tensor (offset {offset}, {nbytes} bytes)"
        )
    if not nbytes:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buf, dtype=dtype).view(shape)


# ----------------------------------------------------------------------------- writing


def save_pretrained(
    model,
    path: str,
    to_hf,
    state_dict: dict | None = None,
    max_shard_bytes: int = 5 * 2**30,
    generation_config: dict | None = None,
) -> None:
    """Write config.json + safetensors (sharded with an index above max_shard_bytes), in the
    tensors' dtype. state_dict: our parameter names -> full tensors, when the model is sharded
    (FSDP) and rank 0 gathered a full copy; else the model's own parameters. Tensors on a GPU reach
    the host one shard at a time. generation_config: written as generation_config.json, which
    transformers, vLLM and SGLang read for the ids to stop at (eos_token_id, a list allowed) and the
    sampling defaults; config.json's eos_token_id is then its first stop id."""
    from safetensors.torch import save_file

    cfg = model.config
    if state_dict is None:
        state_dict = {name: p.detach() for name, p in model.named_parameters()}
    tensors = {}
    for name, tensor in state_dict.items():
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        if hasattr(tensor, "full_tensor"):  # an FSDP2 shard
            raise TypeError(
                f"save_pretrained: {name} is a sharded DTensor; pass state_dict= a full "
                "state dict (get_model_state_dict with StateDictOptions("
                "full_state_dict=True, cpu_offload=True))"
            )
        tensors[to_hf(name)] = tensor.detach()
    os.makedirs(path, exist_ok=True)
    hf_cfg = cfg.to_hf_dict()
    hf_cfg["torch_dtype"] = str(next(iter(tensors.values())).dtype).replace("torch.", "")
    if generation_config is not None:
        stop = generation_config["eos_token_id"]
        hf_cfg["eos_token_id"] = stop[0] if isinstance(stop, list) else stop
        with open(os.path.join(path, "generation_config.json"), "w") as fh:
            json.dump(generation_config, fh, indent=2)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(hf_cfg, fh, indent=2)
    nbytes = {key: t.numel() * t.element_size() for key, t in tensors.items()}
    shards = [[]]
    for key in sorted(tensors):
        if shards[-1] and sum(nbytes[k] for k in shards[-1]) + nbytes[key] > max_shard_bytes:
            shards.append([])
        shards[-1].append(key)
    for stale in os.listdir(path):  # an older save with another shard count leaves no file
        if stale.startswith("model") and stale.endswith((".safetensors", ".index.json")):
            os.remove(os.path.join(path, stale))
    names = ["model.safetensors"]
    if len(shards) > 1:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    for fname, keys in zip(names, shards):
        shard = {k: tensors[k].to("cpu").contiguous() for k in keys}
        save_file(shard, os.path.join(path, fname), metadata={"format": "pt"})
    if len(shards) > 1:
        weight_map = {k: fname for fname, keys in zip(names, shards) for k in keys}
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as fh:
            index = {"metadata": {"total_size": sum(nbytes.values())}, "weight_map": weight_map}
            json.dump(index, fh, indent=2)


# --export_dtype: auto (None) exports in the dtype the run started from: a Qwen3 base model's bf16,
# not the fp32 master weights (16 GB instead of 33 for 8B); float32 for a model trained from
# scratch.
EXPORT_DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass
class Export:
    """How a run writes its Hugging Face exports (built once at start): out_dir/exports/step-N, and
    out_dir/hf a link to the newest (the trainer publishes them)."""

    # fmt: off
    out_dir: str
    tokenizer_dir: str | None      # its tokenizer.json and tokenizer_config.json are copied in
    dtype: torch.dtype
    generation_config: dict        # generation_config.json (generation_config())
    to_hf: object                  # our parameter name -> the file's (model.hf_name)
    keep: int = 3                  # step exports kept, the newest; 0 = all
    # fmt: on

    def write(self, model, directory: str, weights: dict):
        """The full weights (our names) as a Hugging Face directory: in self.dtype, with the
        tokenizer's files. A failed write (a full disk: safetensors says it in its own exception) is
        an OSError."""
        weights = {name: tensor.to(self.dtype) for name, tensor in weights.items()}
        try:
            save_pretrained(
                model,
                directory,
                self.to_hf,
                state_dict=weights,
                generation_config=self.generation_config,
            )
        except SafetensorError as e:
            raise OSError(f"{e}") from None
        for name in ("tokenizer.json", "tokenizer_config.json") if self.tokenizer_dir else ():
            if os.path.exists(os.path.join(self.tokenizer_dir, name)):
                shutil.copy(os.path.join(self.tokenizer_dir, name), os.path.join(directory, name))


SAMPLING_DEFAULTS = ("do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def generation_config(stop_ids: list, init_from: str = "") -> dict:
    """generation_config.json of the exports: stop at the ids a chat turn ends with (stop_ids:
    <|im_end|>, then <|endoftext|>, the padding id), which transformers, vLLM and SGLang read
    (without it they generate past <|im_end|>); the sampling defaults (temperature, top-p, ...) of
    init_from's generation_config.json, if any."""
    config = dict(eos_token_id=stop_ids, pad_token_id=stop_ids[-1])
    path = os.path.join(init_from, "generation_config.json") if init_from else ""
    if path and os.path.isfile(path):
        try:
            with open(path) as fh:
                before = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{path}: not valid JSON ({e})") from None
        config.update({k: before[k] for k in SAMPLING_DEFAULTS if k in before})
    return config


if __name__ == "__main__":  # one positional argument
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: python hf_checkpoint.py CHECKPOINT_DIR   (its tensors: name, dtype, shape)")
        sys.exit(0 if sys.argv[1:] in (["--help"], ["-h"]) else 2)
    try:
        for file in checkpoint_files(sys.argv[1]):
            for name, (dtype, shape, _, _) in sorted(read_safetensors_header(file).items()):
                dtype_name = str(dtype).removeprefix("torch.")
                print(f"{os.path.basename(file)}  {name}  {dtype_name}  {list(shape)}")
    except (CheckpointError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
