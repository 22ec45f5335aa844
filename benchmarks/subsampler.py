"""Balanced subsampling: ``bucketloader.static.balanced_subsample`` against two baselines.

Run: ``.venv/bin/python benchmarks/subsampler.py`` (a few minutes on 2 shared cores; ``--quick``
for a smoke run). Writes ``benchmarks/results/subsampler.md``.

Four implementations with the same semantics (``K_pos = floor(K * fraction + 0.5)`` positives and
``K - K_pos`` negatives per row, the other class fills a shortfall, uniformly random order, output
``[B, K, F]`` padded with zeros when fewer than ``K`` candidates exist):

1. ``reference``: per batch row, ``nonzero`` of each class, ``randperm`` each, take the quotas,
   concatenate, ``randperm`` the result, index the values (eager; cannot be compiled fullgraph);
2. ``two topk``: random keys masked per class, ``topk`` K over N for each class, combined by quota
   with ``where``/``gather``, then a random order; ``torch.compile(fullgraph=True, dynamic=False)``;
3. ``ours eager``: ``balanced_subsample(values, labels, K, seed=<0-d int64 tensor>)``;
4. ``ours compiled``: the same under ``torch.compile(fullgraph=True, dynamic=False)``.

Grid: B in {1, 32}, N in {1e3, 1e4, 1e5, 1e6}, K = N / 10, F = 4 float32, ~25% positives,
positive_fraction 0.5. Every implementation's output is checked first (class counts per row equal
the quotas, valid indices unique, values match the indices) on the benchmark input and on a
shortfall/padding input. Timing: the first call is the compile time (compile caches disabled, so
it is cold); then rounds that alternate the implementations; median and best ms per call. With
CUDA, the same table runs on the GPU (``torch.cuda.synchronize()`` around each call) and ours is
run under ``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "subsampler.md"

from bucketloader.static import balanced_subsample  # noqa: E402

FRACTION = 0.5
FEATS = 4


def quotas(n_pos: torch.Tensor, n_neg: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row class quotas with shortfall fill (tensors in, tensors out; no sync)."""
    k_pos = int(k * FRACTION + 0.5)
    k_neg = k - k_pos
    q_pos = torch.minimum(n_pos, k_pos + torch.clamp(k_neg - n_neg, min=0))
    q_neg = torch.minimum(n_neg, k_neg + torch.clamp(k_pos - n_pos, min=0))
    return q_pos, q_neg


def reference(values: torch.Tensor, labels: torch.Tensor, k: int):
    """The nonzero + randperm formulation, looped over the batch rows."""
    b, _, f = values.shape
    out = values.new_zeros(b, k, f)
    out_idx = torch.zeros(b, k, dtype=torch.int64, device=values.device)
    valid = torch.zeros(b, k, dtype=torch.bool, device=values.device)
    k_pos = int(k * FRACTION + 0.5)
    for r in range(b):
        pos = torch.nonzero(labels[r]).squeeze(1)
        neg = torch.nonzero(~labels[r]).squeeze(1)
        pos = pos[torch.randperm(len(pos), device=pos.device)]
        neg = neg[torch.randperm(len(neg), device=neg.device)]
        q_pos = min(len(pos), k_pos + max(k - k_pos - len(neg), 0))
        q_neg = min(len(neg), k - k_pos + max(k_pos - len(pos), 0))
        idx = torch.cat([pos[:q_pos], neg[:q_neg]])
        idx = idx[torch.randperm(len(idx), device=idx.device)]
        out[r, : len(idx)] = values[r, idx]
        out_idx[r, : len(idx)] = idx
        valid[r, : len(idx)] = True
    return out, out_idx, valid


def two_topk(values: torch.Tensor, labels: torch.Tensor, k: int):
    """The fixed-shape formulation: masked random keys, one ``topk`` per class, gather by quota."""
    b, n, f = values.shape
    kk = min(k, n)
    keys = torch.rand(b, n, device=values.device)
    pos_idx = torch.topk(torch.where(labels, keys, float("-inf")), kk, dim=1).indices
    neg_idx = torch.topk(torch.where(labels, float("-inf"), keys), kk, dim=1).indices
    n_pos = labels.sum(1, keepdim=True)
    q_pos, q_neg = quotas(n_pos, n - n_pos, k)
    slot = torch.arange(k, device=values.device).expand(b, k)
    from_pos = pos_idx.gather(1, slot.clamp(max=kk - 1))
    from_neg = neg_idx.gather(1, (slot - q_pos).clamp(0, kk - 1))
    valid = slot < q_pos + q_neg
    idx = torch.where(slot < q_pos, from_pos, from_neg).masked_fill(~valid, 0)
    # Random order of the valid slots, padding last: sort random keys (padding keyed 2).
    order = torch.where(valid, torch.rand(b, k, device=values.device), 2.0).argsort(1)
    idx, valid = idx.gather(1, order), valid.gather(1, order)
    out = values.gather(1, idx.unsqueeze(-1).expand(b, k, f)).masked_fill(~valid.unsqueeze(-1), 0)
    return out, idx, valid


def ours(values, labels, k, seed):
    out = balanced_subsample(values, labels, k, positive_fraction=FRACTION, seed=seed)
    return out.values, out.indices, out.valid


def check(name: str, fn, values: torch.Tensor, labels: torch.Tensor, k: int) -> None:
    """Counts per class equal the quotas, valid indices unique and first, values match."""
    out, idx, valid = (t.cpu() for t in fn(values, labels, k))
    values, labels = values.cpu(), labels.cpu()
    n_pos = labels.sum(1)
    q_pos, q_neg = quotas(n_pos, labels.shape[1] - n_pos, k)
    if out.shape != (labels.shape[0], k, FEATS):
        raise AssertionError(f"{name}: output shape {tuple(out.shape)}")
    for r in range(labels.shape[0]):
        m = int(valid[r].sum())
        got = idx[r, :m]
        ok = bool(valid[r, :m].all()) and len(set(got.tolist())) == m
        ok &= int(labels[r, got].sum()) == int(q_pos[r]) and m == int(q_pos[r] + q_neg[r])
        ok &= torch.equal(out[r, :m], values[r, got]) and not out[r, m:].any()
        if not ok:
            raise AssertionError(f"{name}: wrong sample in row {r} (k={k}, n_pos={int(n_pos[r])})")


def inputs(b: int, n: int, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(b, n, FEATS, generator=g)
    labels = torch.rand(b, n, generator=g) < 0.25
    return values.to(device), labels.to(device)


def shortfall_inputs(device: str):
    """N=40. Row 0: 3 positives; row 1: 3 negatives; rows 2-3: random (~25% positives)."""
    values, labels = inputs(4, 40, device, seed=1)
    labels[0] = False
    labels[0, :3] = True
    labels[1] = True
    labels[1, 4:7] = False
    return values, labels


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str, *args) -> float:
    sync(device)
    t = time.perf_counter()
    fn(*args)
    sync(device)
    return (time.perf_counter() - t) * 1e3


def bench_device(device: str, grid, rounds_for, log) -> tuple[list[dict], str]:
    topk_c = torch.compile(two_topk, fullgraph=True, dynamic=False)
    ours_c = torch.compile(ours, fullgraph=True, dynamic=False)
    seeds = iter(torch.randint(2**62, (100_000,)).to(device))  # 0-d int64 tensors, drawn up front
    impls = {
        "reference": reference,
        "two topk": topk_c,
        "ours eager": lambda v, lab, k: ours(v, lab, k, next(seeds)),
        "ours compiled": lambda v, lab, k: ours_c(v, lab, k, next(seeds)),
    }
    values, labels = shortfall_inputs(device)
    for name, fn in impls.items():
        for k in (16, 48):  # shortfall fill at K=16, padding at K=48 > N (compiles: not timed)
            check(name, fn, values, labels, k)
    sync_note = "not run (CPU)"
    if device == "cuda":  # ours must not synchronise: eager and compiled, on a warm shape
        sync_note = "ours eager and ours compiled ran without raising"
        torch.cuda.set_sync_debug_mode("error")
        try:
            impls["ours eager"](values, labels, 16)
            impls["ours compiled"](values, labels, 16)
        except RuntimeError as e:  # record it: the table is still worth having
            sync_note = f"**raised**: {str(e).splitlines()[0]}"
        finally:
            torch.cuda.set_sync_debug_mode(0)
        log(f"cuda sync debug mode 'error': {sync_note}")
    rows = []
    for b, n in grid:
        k = n // 10
        values, labels = inputs(b, n, device)
        first = {}
        for name, fn in impls.items():
            first[name] = timed(fn, device, values, labels, k) / 1e3
            check(name, fn, values, labels, k)
        times: dict[str, list[float]] = {name: [] for name in impls}
        for _ in range(rounds_for(b, n)):
            for name, fn in impls.items():
                times[name].append(timed(fn, device, values, labels, k))
        row = {"B": b, "N": n, "K": k, "first": first, "rounds": rounds_for(b, n)}
        row["median"] = {name: statistics.median(t) for name, t in times.items()}
        row["best"] = {name: min(t) for name, t in times.items()}
        rows.append(row)
        med = row["median"]
        log(f"{device} B={b} N={n:,}: " + ", ".join(f"{m} {t:.2f} ms" for m, t in med.items()))
    return rows, sync_note


def table(rows: list[dict]) -> list[str]:
    names = ["reference", "two topk", "ours eager", "ours compiled"]
    lines = [
        "| B | N | K | rounds | "
        + " | ".join(f"{m} median (best) ms" for m in names)
        + " | two topk / ref | ours compiled / ref | ours eager / ref"
        + " | compile s: two topk, ours |",
        "|---:|---:|---:|---:|" + "---:|" * (len(names) + 4),
    ]
    for r in rows:
        med, best, ref = r["median"], r["best"], r["median"]["reference"]
        cells = [f"{med[m]:.2f} ({best[m]:.2f})" for m in names]
        ratios = [f"{med[m] / ref:.2f}x" for m in ("two topk", "ours compiled", "ours eager")]
        compile_s = f"{r['first']['two topk']:.1f}, {r['first']['ours compiled']:.1f}"
        lines.append(
            f"| {r['B']} | {r['N']:,} | {r['K']:,} | {r['rounds']} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(ratios)
            + f" | {compile_s} |"
        )
    return lines


def targets(rows: list[dict], device: str) -> list[str]:
    out = []
    for r in rows:
        if device == "cpu" and r["B"] != 32:
            continue
        ratio = r["median"]["ours compiled"] / r["median"]["reference"]
        if device == "cpu":
            goal, limit = ("<= 1.0x", 1.0) if r["N"] <= 10_000 else ("<= 1.2x", 1.2)
        else:
            goal, limit = ("<= 0.33x (>= 3x faster)", 1 / 3)
        met = "met" if ratio <= limit else "**not met**"
        out.append(
            f"- B={r['B']}, N={r['N']:,}: ours compiled / reference = {ratio:.2f}x "
            f"(target {goal}): {met}"
        )
    return out


def machine() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (
        f"{platform.platform()}; Python {platform.python_version()}; cpu_count {os.cpu_count()}; "
        f"load average {tuple(round(x, 1) for x in load)}; torch {torch.__version__}; "
        f"torch threads {torch.get_num_threads()}"
    )


def cpu_section(rows: list[dict], threads: int) -> list[str]:
    return [
        "## CPU",
        "",
        f"`torch.set_num_threads({threads})` (`--threads`). One thread by default because "
        "on a shared 2-core box, a compiled kernel's OpenMP barriers wait for whichever thread "
        "another job has descheduled: while writing this benchmark (load average ~2.5), ours "
        "compiled at B=1, N=1e3 took ~31 ms per call with 2 threads and 0.08 ms with 1.",
        "",
        *table(rows),
        "",
        "Target (CPU, compiled, B=32): ours at least as fast as the reference up to N=1e4, "
        "within 1.2x above.",
        "",
        *targets(rows, "cpu"),
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N up to 1e4, 3 rounds (smoke run)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads on CPU")
    p.add_argument("--out", default=str(OUT))
    p.add_argument(
        "--cuda-only", action="store_true", help="the GPU table alone (a short lease on a GPU)"
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    start, mach = time.perf_counter(), machine()
    torch._inductor.config.force_disable_caches = True  # compile times are cold, as on a new job
    torch._dynamo.config.recompile_limit = 64  # one graph per shape (dynamic=False)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
    grid = [(b, n) for b in (1, 32) for n in sizes]

    def rounds_for(b: int, n: int) -> int:  # fewer rounds where one call takes ~seconds
        return 3 if args.quick else (3 if b * n >= 10**7 else args.rounds)

    results = {} if args.cuda_only else {"cpu": bench_device("cpu", grid, rounds_for, print)[0]}
    if torch.cuda.is_available():
        results["cuda"], sync_note = bench_device("cuda", grid, rounds_for, print)
    wall = time.perf_counter() - start
    cmd = "python benchmarks/subsampler.py" + (" --quick" if args.quick else "")
    cmd += " --cuda-only" if args.cuda_only else ""
    cmd += f" --threads {args.threads}" if args.threads != 1 else ""
    lines = [
        "# Balanced subsampling: reference vs two topk vs bucketloader.static",
        "",
        f"Command: `.venv/bin/{cmd}` ({wall:.0f} s).",
        "",
        f"Machine: {mach}.",
        "",
        "How it works: ours replaces the per-class `topk` with a keyed Feistel permutation "
        "(elementwise integer hashing), a `cumsum` that counts each element's rank within its "
        "class in that order, and one `scatter` that compacts the chosen elements into their "
        "slots (see NOTE [ Selection algorithm ] in `bucketloader/static/_select.py`).",
        "",
        "Setup: values `[B, N, 4]` float32, bool labels with ~25% positives, K = N / 10, "
        "positive_fraction 0.5. Each implementation is checked before timing (class counts "
        "per row equal the quotas, valid indices unique, values match; also on a shortfall and "
        "padding input). Compile time = the first call at that shape, compile caches disabled. "
        "Then rounds alternating the four implementations; ms per call, median (best). "
        "Ratios use medians; below 1 means faster than the reference.",
        "",
        "Reference figures from the issue (two topk, compiled, vs reference): B=32 N=1e4 "
        "5.9 vs 7.3 ms, B=32 N=1e5 63 vs 53 ms, B=1 N=1e6 39 vs 22 ms.",
        "",
        *(cpu_section(results["cpu"], args.threads) if "cpu" in results else []),
        "## GPU",
        "",
    ]
    if "cuda" in results:
        lines += [
            f"Device: {torch.cuda.get_device_name()}. Under "
            f'`torch.cuda.set_sync_debug_mode("error")`: {sync_note}.',
            "",
            *table(results["cuda"]),
            "",
            "Target (GPU): ours compiled >= 3x faster than the reference.",
            "",
            *targets(results["cuda"], "cuda"),
        ]
    else:
        lines.append(
            "No GPU was available for this run: the GPU table and the sync-free check were not run."
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
