"""The memory plan of the real run, per GPU, computed from the code's own choices
(parts/memory_plan.py's terms with gppo.py's and sft.py's defaults and train.sh's settings):
Qwen3-8B and Qwen3-14B on 8 GPUs of 80 GB (79.65 GiB as an H100 reports it) at the paper's context,
prompts of 4K and responses of 32K tokens (rows of up to 36,864 tokens).

    python tools/memory_plan.py                          # the table the README shows
    python tools/memory_plan.py --gpus=16 --gpu_gib=139  # two nodes; or H200s
"""

import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gppo import GPPOConfig  # noqa: E402
from parts.cli import parse_config  # noqa: E402

# noqa: E402
from parts.memory_plan import QWEN3, gppo_phases, kv_bytes_per_token, kv_pool_bytes, load_phases
from parts.memory_plan import param_counts, peak_phase, rollout_phase, rollout_pool_bytes
from parts.memory_plan import sft_phases

GB = 1e9


@dataclass
class PlanConfig:
    # fmt: off
    gpus: int = 8                    # ranks (GPUs), all nodes together
    gpu_gib: float = 79.65           # memory of one GPU as torch.cuda.mem_get_info reports it (H100 80 GB: 79.65)
    context_gib: float = 1.0         # CUDA context and allocator slack, kept out of every phase
    models: str = "8B,14B"           # Qwen3 sizes (parts/memory_plan.py: 0.6B, 8B, 14B)
    prompt_tokens: int = 4096        # --max_prompt_len (train.sh)
    response_tokens: int = 32768     # --max_response_len (train.sh)
    # fmt: on


def plan(size: str, cfg: PlanConfig) -> dict:
    c = SimpleNamespace(**QWEN3[size])
    gpu = cfg.gpu_gib * 2**30
    # the longest sequence is one row of its own
    row = cfg.prompt_tokens + cfg.response_tokens
    g = GPPOConfig()
    usable = gpu - cfg.context_gib * 2**30
    load = peak_phase(load_phases(c, world=cfg.gpus))
    # what mem_get_info then reports
    free = usable - sum(load_phases(c, world=cfg.gpus)["engine copy"].values())
    kv = rollout_pool_bytes(c, world=cfg.gpus, usable=usable, max_num_seqs=256, max_model_len=row)
    kv_kept = kv_pool_bytes(c, 2, g.kv_cache_fraction * free, 256, row)
    rows = {
        "load (policy into shards, then the engine's copy)": load,
        "rollout, engine freed while training (auto on GPU)": peak_phase(
            rollout_phase(c, world=cfg.gpus, kv_bytes=kv, max_model_len=row)
        ),
        "RL training, engine freed (--free_engine, auto on GPU)": peak_phase(
            gppo_phases(
                c,
                world=cfg.gpus,
                row_tokens=row,
                kv_bytes=0,
                gpu=True,
                loss_chunk=2048,
                engine_resident=False,
            )
        ),
        "rollout, engine kept (--free_engine=false)": peak_phase(
            rollout_phase(c, world=cfg.gpus, kv_bytes=kv_kept, max_model_len=row)
        ),
        "RL training, engine kept (--free_engine=false)": peak_phase(
            gppo_phases(
                c, world=cfg.gpus, row_tokens=row, kv_bytes=kv_kept, gpu=True, loss_chunk=2048
            )
        ),
        "SFT (rows of 32K)": peak_phase(
            sft_phases(c, world=cfg.gpus, row_tokens=32768, loss_chunk=4096, gpu=True)
        ),
    }
    return dict(c=c, kv=kv, kv_kept=kv_kept, free=free, usable=usable, rows=rows, row=row)


def main(cfg: PlanConfig):
    for size in cfg.models.split(","):
        p = plan(size, cfg)
        P = param_counts(p["c"])["total"]
        seqs = lambda pool: pool / kv_bytes_per_token(p["c"]) / p["row"]  # noqa: E731
        print(
            f"Qwen3-{size}: {P / 1e9:.2f}B parameters on {cfg.gpus} GPUs of {cfg.gpu_gib:g} GiB ({p['usable'] / GB:.1f} "
            f"GB usable per GPU); after loading, {p['free'] / GB:.1f} GB free"
        )
        print(
            f"  KV pool, engine freed while training (sized at each generate: free memory less the rollout "
            f"margin): {p['kv'] / GB:.1f} GB = {seqs(p['kv']):.1f} sequences of {p['row']} tokens"
        )
        print(
            f"  KV pool, engine kept (kv_cache_fraction {GPPOConfig().kv_cache_fraction} of the free memory at "
            f"start): {p['kv_kept'] / GB:.1f} GB = {seqs(p['kv_kept']):.1f} sequences"
        )
        for label, (phase, total, terms) in p["rows"].items():
            verdict = (
                "fits"
                if total <= p["usable"]
                else f"does NOT fit ({(total - p['usable']) / GB:.1f} GB over)"
            )
            print(
                f"  {label:56s} {total / GB:6.1f} GB  {verdict}   [{phase}: "
                + ", ".join(f"{k} {v / GB:.1f}" for k, v in terms.items())
                + "]"
            )
        print()


if __name__ == "__main__":
    main(parse_config(PlanConfig))
