"""Training throughput of a small Llama on packed rows vs padding-free flattening vs bucketing.

Run: ``python benchmarks/gpu.py`` (one command). Writes ``benchmarks/results/gpu.md`` on a CUDA
machine, ``benchmarks/results/gpu_cpu.md`` in the CPU mode.

* On a CUDA machine: a Llama-style model built from ``transformers.LlamaConfig`` (no download;
  default 4 layers, hidden 512, 8 heads, 2 KV heads) trains with AdamW (bf16 autocast) for
  ``--steps`` steps per method under ``torch.compile(mode="reduce-overhead")`` (CUDA graphs per
  captured shape, inductor kernels).
* Without CUDA the GPU run is skipped, which the script prints and writes at the top of the
  results; it then runs its **CPU mode**: the same three pipelines at a tiny size (2 layers,
  hidden 64), ``torch.compile(backend="aot_eager")`` (graph capture and autograd tracing without
  inductor's C++ compile, which would take minutes per graph on a small CPU), no CUDA graphs.
  CPU tokens/s only show that the pipelines run and how their compile counts behave, not GPU
  speed.

Methods (the same documents: GSM8K prompt + response + 2 tokens from tests/data, random ids):

1. ``pack+varlen``: ``PackSampler(row_length=L, batch_size=B)`` + ``PackCollator`` (static
   ``cu_seqlens`` length and ``max_seqlen = L``), attention through PyTorch's
   ``torch.nn.attention.varlen.varlen_attn`` (flash) on CUDA, or a reference varlen op with the
   same signature on CPU, registered as a transformers attention implementation.
   ``dynamic=False``: one graph per planned shape.
2. ``hf-flatten``: transformers' ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``
   over consecutive documents up to ``B * L`` tokens per batch: padding-free, one ``(1, total)``
   row whose length and ``max_length`` change every batch; same varlen attention;
   ``dynamic=None`` (torch's default: recompile once, then dynamic shapes).
3. ``bucket+sdpa``: ``BucketSampler(num_buckets=8, max_tokens=B * L)`` + ``PadCollator``,
   SDPA with the padding mask, ``dynamic=False``: one graph per bucket shape.

Reported per method: real (non-padding) tokens/s over the steps that compiled nothing, the ratio
to ``pack+varlen``, dynamo graphs compiled, time spent in compiling steps, step time p50 / p90 /
max over steady steps, peak CUDA memory, and padding.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results" / "gpu.md"  # a CUDA run
OUT_CPU = ROOT / "benchmarks" / "results" / "gpu_cpu.md"  # the CPU mode

from bucketloader import BucketSampler  # noqa: E402
from bucketloader.pack import PackSampler  # noqa: E402

ATTN = "bucketloader_varlen"


# --- varlen attention: PyTorch's kernel on CUDA, a reference op with its signature on CPU -------
def _segments_attention(q, k, v, cu, scale):
    """Causal attention of every non-empty segment alone (cost: the sum of squared segment
    lengths, as a varlen kernel's)."""
    rep = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    bounds = cu.tolist()
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            out[lo:hi] = F.scaled_dot_product_attention(
                q[lo:hi].transpose(0, 1),
                k[lo:hi].repeat_interleave(rep, 1).transpose(0, 1),
                v[lo:hi].repeat_interleave(rep, 1).transpose(0, 1),
                is_causal=True,
                scale=scale,
            ).transpose(0, 1)
    return out


@torch.library.custom_op("bucketloader_bench::varlen_ref", mutates_args=())
def varlen_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    scale: float,
) -> torch.Tensor:
    """Causal varlen attention on ``(total, heads, dim)``, segment by segment (a CPU
    reference with ``varlen_attn``'s arguments)."""
    return _segments_attention(q, k, v, cu_seq_q, scale)


@varlen_ref.register_fake
def _(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, scale):
    return torch.empty_like(q)


@torch.library.custom_op("bucketloader_bench::varlen_ref_backward", mutates_args=())
def varlen_ref_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of :func:`varlen_ref` (an op of its own: opaque to the compiler, as a real
    kernel's backward is), by the softmax-attention backward formulas, segment by segment."""
    rep = q.shape[1] // k.shape[1]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    bounds = cu.tolist()
    for lo, hi in itertools.pairwise(bounds):
        if hi <= lo:
            continue
        qs = q[lo:hi].transpose(0, 1)  # (H, n, D)
        ks = k[lo:hi].repeat_interleave(rep, 1).transpose(0, 1)
        vs = v[lo:hi].repeat_interleave(rep, 1).transpose(0, 1)
        gs = grad[lo:hi].transpose(0, 1)
        n = hi - lo
        scores = (qs @ ks.transpose(1, 2)) * scale
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        p = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        dvs = p.transpose(1, 2) @ gs
        dp = gs @ vs.transpose(1, 2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dqs = (ds @ ks) * scale
        dks = (ds.transpose(1, 2) @ qs) * scale
        h_kv = k.shape[1]
        dq[lo:hi] = dqs.transpose(0, 1)
        dk[lo:hi] = dks.view(h_kv, rep, n, -1).sum(1).transpose(0, 1)
        dv[lo:hi] = dvs.view(h_kv, rep, n, -1).sum(1).transpose(0, 1)
    return dq, dk, dv


@varlen_ref_backward.register_fake
def _(grad, q, k, v, cu, scale):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _ref_backward(ctx, grad):
    q, k, v, cu = ctx.saved_tensors
    dq, dk, dv = varlen_ref_backward(grad, q, k, v, cu, ctx.scale)
    return dq, dk, dv, None, None, None, None, None


def _ref_setup(ctx, inputs, output):
    q, k, v, cu, _, _, _, scale = inputs
    ctx.save_for_backward(q, k, v, cu)
    ctx.scale = scale


varlen_ref.register_autograd(_ref_backward, setup_context=_ref_setup)


def torch_varlen_causal(q, k, v, cu, max_len, *, scale=None):
    """PyTorch's ``varlen_attn``, causal, across the torch releases that have it: 2.13 takes
    ``window_size=(-1, 0)``, ``scale`` and ``enable_gqa``; earlier releases ``is_causal`` and
    equal head counts (the keys and values are repeated for grouped-query attention)."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    kw = {}
    if "window_size" in params:
        kw["window_size"] = (-1, 0)
    else:
        kw["is_causal"] = True
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    if scale is not None and "scale" in params:
        kw["scale"] = scale
    return varlen_attn(q, k, v, cu, cu, max_len, max_len, **kw)


def varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
    """A transformers attention implementation over ``cu_seq_lens_q`` / ``max_length_q``:
    ``(B, H, L, D)`` in, ``(B, L, H, D)`` out, the batch flattened to ``(B * L, H, D)``."""
    b, h, n, d = query.shape
    q, k, v = (t.transpose(1, 2).reshape(b * n, t.shape[1], d) for t in (query, key, value))
    cu, max_len = kw["cu_seq_lens_q"], kw["max_length_q"]
    if query.is_cuda:
        if q.dtype not in (torch.float16, torch.bfloat16):  # flash kernels: half types only
            q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        out = torch_varlen_causal(q, k, v, cu, max_len, scale=scaling)
    else:
        out = varlen_ref(q, k, v, cu, cu, max_len, max_len, float(scaling))
    return out.view(b, n, h, d).to(query.dtype), None


def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN, varlen_attention)


# --- data ------------------------------------------------------------------------------------
def documents(n: int, vocab: int, seed: int = 0) -> tuple[np.ndarray, list[list[int]]]:
    g = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64)
    lengths = g.sum(1)[:n] + 2
    rng = np.random.default_rng(seed)
    return lengths, [rng.integers(1, vocab, int(k)).tolist() for k in lengths]


def pack_batches(lengths, docs, row_length, rows):
    sampler = PackSampler(lengths, row_length=row_length, batch_size=rows, seed=0)
    collate = sampler.collator()
    for idx in sampler:
        out = collate([docs[i] for i in idx])
        yield (
            {
                "input_ids": out["input_ids"],
                "position_ids": out["position_ids"],
                "labels": out["labels"],
                "cu_seq_lens_q": out["cu_seqlens"],
                "cu_seq_lens_k": out["cu_seqlens"],
                "max_length_q": out["max_seqlen"],
                "max_length_k": out["max_seqlen"],
            },
            int((out["document_ids"] >= 0).sum()),
        )


def flatten_batches(lengths, docs, row_length, rows):
    from transformers import DataCollatorWithFlattening

    collate = DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    order = np.random.default_rng(0).permutation(len(docs))
    budget, batch, used = row_length * rows, [], 0
    for i in order.tolist():
        if used + len(docs[i]) > budget and batch:
            out = collate([{"input_ids": docs[j]} for j in batch])
            out["cu_seq_lens_q"] = out["cu_seq_lens_q"].to(torch.int32)
            out["cu_seq_lens_k"] = out["cu_seq_lens_k"].to(torch.int32)
            yield out, used
            batch, used = [], 0
        batch.append(i)
        used += len(docs[i])


def bucket_batches(lengths, docs, row_length, rows):
    sampler = BucketSampler(lengths, num_buckets=8, max_tokens=row_length * rows, seed=0)
    collate = sampler.collator(pad_value={"labels": -100})
    for idx in sampler:
        out = collate([{"input_ids": docs[i], "labels": docs[i]} for i in idx])
        yield (
            {
                "input_ids": out["input_ids"],
                "labels": out["labels"],
                "attention_mask": out["attention_mask"].long(),
            },
            int(out["lengths"].sum()),
        )


METHODS = {
    "pack+varlen": (pack_batches, ATTN, False),
    "hf-flatten": (flatten_batches, ATTN, None),
    "bucket+sdpa": (bucket_batches, "sdpa", False),
}


# --- training --------------------------------------------------------------------------------
def build_model(attn: str, size: dict, device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=size["vocab"],
        hidden_size=size["hidden"],
        intermediate_size=size["hidden"] * 4,
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        max_position_embeddings=4096,
        attn_implementation=attn,
        use_cache=False,
    )
    return LlamaForCausalLM(config).to(device)


def run_method(name, lengths, docs, args, size, device, backend, mode) -> dict:
    make, attn, dynamic = METHODS[name]
    model = build_model(attn, size, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, mode=mode, dynamic=dynamic)
    counters = torch._dynamo.utils.counters
    counters.clear()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times, real, compiling, compile_s, shapes, slots = [], [], 0, 0.0, set(), 0
    for step, (batch, tokens) in enumerate(make(lengths, docs, args.row_length, args.rows)):
        if step >= args.steps:
            break
        batch = {
            k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
        }
        shapes.add(tuple(batch["input_ids"].shape))
        before = counters["stats"]["unique_graphs"]
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = compiled(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if counters["stats"]["unique_graphs"] > before or step < args.warmup:
            compiling += counters["stats"]["unique_graphs"] > before
            compile_s += dt
            continue
        times.append(dt)
        real.append(tokens)
        slots += batch["input_ids"].numel()
    t = np.array(times)
    return {
        "method": name,
        "steps": len(t) + compiling,
        "tokens_s": float(np.sum(real) / t.sum()) if t.size else float("nan"),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "shapes": len(shapes),
        "compile_s": compile_s,
        "p50": float(np.percentile(t, 50) * 1e3) if t.size else float("nan"),
        "p90": float(np.percentile(t, 90) * 1e3) if t.size else float("nan"),
        "max": float(t.max() * 1e3) if t.size else float("nan"),
        "peak": f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB" if cuda else "n/a (CPU)",
        "fill": float(np.sum(real) / max(1, slots)) if slots else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/gpu.md on CUDA, gpu_cpu.md without"
    )
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    args.out = args.out or (OUT if cuda else OUT_CPU)
    if cuda:
        size = {"vocab": 32000, "hidden": 512, "layers": 4, "heads": 8, "kv_heads": 2}
        args.row_length, args.rows, args.warmup = 2048, 8, 3
        args.steps = args.steps or 200
        n_docs, backend, mode, device = 7473, "inductor", "reduce-overhead", "cuda"
        header = [f"Device: {torch.cuda.get_device_name()} (CUDA {torch.version.cuda})."]
    else:
        msg = (
            "CUDA is not available: the GPU benchmark is skipped. Running the small CPU mode "
            "instead (tiny model, backend='aot_eager', no CUDA graphs); its tokens/s are not "
            "GPU figures."
        )
        print(msg, flush=True)
        size = {"vocab": 256, "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2}
        args.row_length, args.rows, args.warmup = 512, 2, 1
        args.steps = args.steps or 40
        n_docs, backend, mode, device = 1200, "aot_eager", None, "cpu"
        torch.set_num_threads(1)
        header = [
            "**CPU mode: no GPU was available on the machine that produced this file.** " + msg,
        ]
    register_attention()
    lengths, docs = documents(n_docs, size["vocab"])
    t_start = time.perf_counter()
    rows: list[dict] = []
    for name in METHODS:
        res = run_method(name, lengths, docs, args, size, device, backend, mode)
        print(res, flush=True)
        rows.append(res)
        # written after every method, so a run stopped by a time limit keeps what it measured
        write(
            args,
            rows,
            header,
            size,
            docs,
            backend,
            mode,
            cuda,
            t_start,
            done=len(rows) == len(METHODS),
        )
    print(f"wrote {args.out}")


def write(args, rows, header, size, docs, backend, mode, cuda, t_start, *, done) -> None:
    base = rows[0]["tokens_s"]
    lines = [
        "# Training throughput: packed rows vs padding-free flattening vs bucketing",
        "",
        *header,
        "",
        f"Generated by `python benchmarks/gpu.py` on {platform.machine()} / {platform.system()}, "
        f"torch {torch.__version__}. Model: LlamaConfig({size}); batches of "
        f"{args.rows} x {args.row_length} tokens (bucketing and flattening: the same token "
        f"budget); up to {args.steps} steps per method (at most one pass over the documents: "
        "the `steps` column is what a method's pass gave), "
        f"the first {args.warmup} and every step that "
        f"compiled a graph excluded from the steady figures; torch.compile backend={backend!r}, "
        f"mode={mode!r}. Documents: GSM8K prompt + response + 2 ({len(docs)} documents).",
        "",
        "| method | shapes seen | graphs compiled | steps | real tokens/s | vs pack+varlen | "
        "time in compiling steps (s) | step p50 / p90 / max (ms) | peak memory | real tokens "
        "/ slots |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['shapes']} | {r['graphs']} | {r['steps']} | "
            f"{r['tokens_s']:,.0f} | {r['tokens_s'] / base:.2f} | {r['compile_s']:.1f} | "
            f"{r['p50']:.1f} / {r['p90']:.1f} / {r['max']:.1f} | {r['peak']} | "
            f"{r['fill']:.3f} |"
        )
    lines += [
        "",
        "`graphs compiled` counts dynamo graphs (torch._dynamo counters, unique_graphs). "
        "pack+varlen compiles one graph per planned shape because every varlen argument is "
        "static per shape (cu_seqlens has a fixed length, max_seqlen is the row length); "
        "hf-flatten's (1, total) row and max_length change every batch, so it recompiles and "
        "falls back to dynamic shapes (no CUDA graph can be captured once per shape); bucketing "
        "compiles one graph per bucket shape and pays for its padding.",
        "",
        *(
            []
            if cuda
            else [
                "CPU mode caveats: the varlen attention here is a Python reference op (one "
                "SDPA call per segment, forward and backward), while bucketing calls PyTorch's "
                "native SDPA once per layer, so CPU tokens/s measure that reference's overhead, "
                "not the kernels; the machine was shared (load average "
                f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end of the run). "
                "The compile counts are the meaningful CPU figures.",
                "",
            ]
        ),
        f"Total run time: {time.perf_counter() - t_start:.0f} s."
        + ("" if done else f" **Partial: {len(rows)} of {len(METHODS)} methods measured.**"),
        "",
    ]
    args.out.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
