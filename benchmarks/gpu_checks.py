"""GPU checks, one short run on a CUDA machine: the loss helpers' host syncs, and which compiles of
``balanced_subsample`` torch's inductor can generate.

1. ``masked_loss`` on a tiny config-built Llama under ``torch.cuda.set_sync_debug_mode("warn")``:
   batches with real rows and with none (the loss must be 0 with zero gradients there); every
   synchronising call is listed with the file that made it.
2. ``balanced_subsample`` compiled (``fullgraph=True, dynamic=False``) at several ``B x N``, and
   its parts compiled alone, each in a fresh process (``--case``), so one inductor error does not
   hide the others.

Run: ``python benchmarks/gpu_checks.py`` (about 2 minutes on an H100); results go to
``benchmarks/results/subsampler_gpu.md`` by hand (the partial subsampler run is there).
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
import warnings

import numpy as np
import torch

SIZES = [(1, 10_000), (32, 1_000), (8, 10_000), (32, 10_000), (32, 1_000_000)]
PARTS = ("counts", "select", "counts+select")


def sync_check() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:  # (bucketloader.hf wants it; the loss helpers do not use it)
        sys.modules["datasets"] = types.ModuleType("datasets")
    from transformers import LlamaConfig, LlamaForCausalLM

    from bucketloader import BucketSampler
    from bucketloader.hf.loss import masked_loss

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(config).to("cuda")
    lengths = np.random.default_rng(0).integers(5, 60, size=64)
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=8)
    data = [torch.randint(1, 128, (int(n),)) for n in lengths]
    collate = sampler.collator()
    syncs: list[str] = []

    def record(message, category, filename, lineno, file=None, line=None):
        syncs.append(f"{filename}:{lineno}")

    for real in (True, False):
        for indices in list(sampler)[:3]:
            b = collate([data[i] for i in indices])
            ids = b["inputs"].pin_memory().to("cuda", non_blocking=True)
            att = b["attention_mask"].pin_memory().to("cuda", non_blocking=True)
            sample_mask = b["sample_mask"] & real
            labels = torch.where(att.bool() & sample_mask.to("cuda")[:, None], ids, -100)
            batch = {"input_ids": ids, "attention_mask": att, "labels": labels}
            batch["sample_mask"] = sample_mask.to("cuda")
            torch.cuda.synchronize()
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = record
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    model.zero_grad(set_to_none=True)
                    loss, _ = masked_loss(model, batch)
                    loss.backward()
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            grad = sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)
            print(f"real rows: {real}, loss {float(loss.detach()):.4f}, |grad| {grad:.3f}")
            if not real:
                assert float(loss.detach()) == 0.0 and grad == 0.0, "no real row: 0 and no grad"
    ours = sorted({s for s in syncs if "bucketloader" in s})
    print(f"synchronising calls: {len(syncs)}, made in bucketloader: {ours or 'none'}")
    print("made in:", sorted(set(syncs)))


def case(part: str, b: int, n: int) -> str:
    from bucketloader.static import balanced_subsample
    from bucketloader.static._select import quota_select

    torch._inductor.config.force_disable_caches = True
    g = torch.Generator(device="cuda").manual_seed(0)
    labels = torch.rand(b, n, device="cuda", generator=g) < 0.25
    values = torch.randn(b, n, 4, device="cuda", generator=g)
    seed = torch.tensor(1, device="cuda")
    k = n // 10

    def counts(lab):
        p = lab != 0
        return p.sum(-1, keepdim=True), (~p).sum(-1, keepdim=True)

    def select(lab):
        p = lab != 0
        q = torch.full((b, 1), k // 2, device="cuda")
        return quota_select(p, ~p, q, q, k, seed)

    def both(lab):
        p = lab != 0
        n_pos, n_neg = p.sum(-1, keepdim=True), (~p).sum(-1, keepdim=True)
        h = k // 2
        qp = torch.minimum(n_pos, h + torch.clamp(h - n_neg, min=0))
        qn = torch.minimum(n_neg, h + torch.clamp(h - n_pos, min=0))
        return quota_select(p, ~p, qp, qn, k, seed)

    def whole(lab):
        out = balanced_subsample(values, lab, k, seed=seed)
        return out.values, out.indices, out.valid

    fn = {"counts": counts, "select": select, "counts+select": both, "library": whole}[part]
    try:
        torch.compile(fn, fullgraph=True, dynamic=False)(labels)
        torch.cuda.synchronize()
        return "ok"
    except Exception as exc:  # the point is to record it
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--case":
        print(json.dumps(case(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    print(torch.__version__, torch.cuda.get_device_name())
    sync_check()
    # the parts before the largest size, whose compile can outrun a short lease
    runs = [("library", b, n) for b, n in SIZES[:-1]] + [(p, 8, 10_000) for p in PARTS]
    runs += [("library", *SIZES[-1])]
    for part, b, n in runs:
        cmd = [sys.executable, __file__, "--case", part, str(b), str(n)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        last = out.stdout.strip().splitlines()[-1:] or [out.stderr.strip()[-200:]]
        print(f"compile {part} at {b} x {n}: {last[0]}")


if __name__ == "__main__":
    main()
