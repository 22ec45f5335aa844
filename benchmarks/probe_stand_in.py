"""The cost of BucketTrainer's packing probe on a model versus on its small stand-in.

Where no rank can read a model's weights (DeepSpeed ZeRO-3, the meta device) the probe runs on a
small copy of the architecture (NOTE [ The probe of a model no rank can read ] in
:mod:`bucketloader.hf.trainer`). Measured here, on the CPU in float32, ``torch.set_num_threads(1)``
(with 2 threads on this shared 2-core machine each small matmul waited on the other thread: the
stand-in's pass measured 16x slower): one probe pass on a TinyLlama-1.1B-shaped ``LlamaForCausalLM``
with random weights (the probe of a model whose weights can be read; up to four passes when the
trainer refuses), and for that config and larger ones (Llama-3-8B-, Qwen2.5-72B-, Gemma-3-27B-shaped
text models, Qwen3-235B-A22B- and DBRX-132B-shaped mixtures of experts, built on the meta device:
no weights) the stand-in's build (its parameters counted on the meta device first, then built)
and its pass. Wall-clock seconds, the best of 3 (the first call apart: it pays allocation and
kernel warm-up). The verdicts of both are compared in tests/test_pack_hf.py, not here.

Run: ``PYTHONPATH=$PWD python benchmarks/probe_stand_in.py [SHAPE ...]`` (about two minutes; the
full 1.1B model takes ~5 GB: run under ``ulimit -v 9000000``). Writes
``benchmarks/results/probe_stand_in.md`` when run over every shape.
"""

from __future__ import annotations

import copy
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.hf.packing import PackedInputs  # noqa: E402
from bucketloader.hf.trainer import _packing_leak, _shrink, _stand_in  # noqa: E402
from bucketloader.pack import PackSampler  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "probe_stand_in.md"

#: name: (model class, config class, config)
SHAPES = {
    "TinyLlama-1.1B": ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)),
    "Llama-3-8B": ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
        bos_token_id=128000, eos_token_id=128001)),
    "Qwen2.5-72B": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        vocab_size=152064, hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
        num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=32768,
        bos_token_id=151643, eos_token_id=151645)),
    "Gemma-3-27B (text)": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        vocab_size=262208, hidden_size=5376, intermediate_size=21504, num_hidden_layers=62,
        num_attention_heads=32, num_key_value_heads=16, head_dim=128, sliding_window=1024,
        max_position_embeddings=131072)),
    # mixtures of experts (s34-probe): experts in the config, and in a sub-config (DBRX's
    # ffn_config; attn_config's clip_qkv and rope_theta as its config.json has them)
    "Qwen3-235B-A22B": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=94,
        num_attention_heads=64, num_key_value_heads=4, head_dim=128, num_experts=128,
        num_experts_per_tok=8, moe_intermediate_size=1536, max_position_embeddings=40960,
        bos_token_id=151643, eos_token_id=151645)),
    "DBRX-132B": ("DbrxForCausalLM", "DbrxConfig", dict(
        d_model=6144, n_heads=48, n_layers=40, max_seq_len=32768, vocab_size=100352,
        attn_config=dict(kv_n_heads=8, clip_qkv=8, rope_theta=500000),
        ffn_config=dict(ffn_hidden_size=10752, moe_num_experts=16, moe_top_k=4))),
}  # fmt: skip


def timed(fn, rounds: int = 3) -> tuple[float, float, object]:
    """(first call's seconds, best of the next ``rounds``, the last result)."""
    t = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return first, best, out


def counted(model) -> int:
    """The stand-in's parameters counted on the meta device, as ``_stand_in`` counts them before
    it builds one (s34-probe): the part of its build time that is the count."""
    config = copy.deepcopy(model.config)
    _shrink(config)
    with torch.device("meta"):
        return sum(p.numel() for p in type(model)(config).parameters())


def main() -> None:
    torch.set_num_threads(1)
    collate = PackedInputs(PackSampler([3, 3, 3, 3], row_length=6, batch_size=2).collator())
    rows = []
    only = sys.argv[1:]  # (shape names; the results file is written for a full run only)
    for name, (model_class, config_class, options) in SHAPES.items():
        if only and name not in only:
            continue
        config = getattr(transformers, config_class)(
            **options, attn_implementation="sdpa", use_cache=False
        )  # (as Trainer sets it)
        with torch.device("meta"):
            model = getattr(transformers, model_class)(config)
        params = sum(p.numel() for p in model.parameters())
        full = None
        if name == "TinyLlama-1.1B":
            real = getattr(transformers, model_class)(config).eval()  # (random weights, fp32)
            first, best, leak = timed(
                lambda real=real: _packing_leak(real, "positions", collate, 0, use_cache=None)
            )
            full = (first, best, leak)
            del real
        count = timed(lambda model=model: counted(model))
        build = timed(lambda model=model: _stand_in(model))
        stand, why = build[2]
        assert stand is not None, why
        small = sum(p.numel() for p in stand.parameters())
        assert small == count[2], (small, count[2])
        first, best, leak = timed(
            lambda stand=stand: _packing_leak(stand, "positions", collate, 0, use_cache=None)
        )
        rows.append(
            f"| {name} | {params / 1e9:.2f}B | "
            + (f"{full[0]:.2f} / {full[1]:.2f} | {full[2]} | " if full else "- | - | ")
            + f"{small / 1e6:.1f}M | {build[0]:.3f} / {build[1]:.3f} | {count[0]:.3f} / "
            f"{count[1]:.3f} | {first:.3f} / {best:.3f} | {leak} |"
        )
        print(rows[-1], flush=True)
    text = (
        "# The packing probe on a model and on its stand-in (benchmarks/probe_stand_in.py)\n\n"
        f"Command: `PYTHONPATH=$PWD python benchmarks/probe_stand_in.py`. {platform.machine()}, "
        f"{os.cpu_count()} cores (1 thread), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, a shared machine (load average {os.getloadavg()[0]:.1f}). "
        "One probe pass (attention='positions', use_cache=False as Trainer sets it), float32, "
        "seconds: first call / best of 3 next; leak = the probe's answer (0.0: kept apart). "
        "The stand-in's build includes counting its parameters on the meta device first "
        '(s34-probe: a copy over the limit is not built), shown alone as "its count".\n\n'
        "| shape | parameters | full model's pass | its leak | stand-in | stand-in build | "
        "its count | stand-in pass | its leak |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )
    print(text)
    if not only:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
