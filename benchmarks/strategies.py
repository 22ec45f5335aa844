"""Benchmark of the bucketing strategies: padding on real data, and solve-time scaling.

Run from the repository root (a few minutes on a 2-core machine)::

    .venv/bin/python benchmarks/strategies.py [--quick]

Writes ``benchmarks/results/strategies.md``:

1. for every column of every real length file in ``tests/data`` and k in {4, 8, 16, 32}:
   the padding ratio of every registered strategy, its ratio to the optimum, and its solve time;
2. scaling of ``optimal`` (k = 16) from 10³ to 2·10⁵ distinct values, plus one million lognormal
   speech-like lengths, next to a plain numpy divide-and-conquer DP (the reference speed);
3. scaling of ``lp`` from 100 to 1,000 distinct values, with and without ``min_bucket_fraction``.

Times are wall-clock, best of a few repeats (the machine is shared, so single runs are noisy).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._data import DATA, FILES  # noqa: E402
from bucketloader.boundaries import padding_cost  # noqa: E402
from bucketloader.histogram import LengthHistogram  # noqa: E402
from bucketloader.solve import solve_boundaries  # noqa: E402
from bucketloader.strategies import STRATEGIES  # noqa: E402
from bucketloader.strategies.lp import lp  # noqa: E402
from bucketloader.strategies.optimal import optimal  # noqa: E402

COLUMN_NAMES = {
    "multi30k": ["en", "de"],
    "europarl": ["en", "fr"],
    "gsm8k": ["question", "answer"],
    "coco": ["width", "height"],
}


def best_time(fn, repeats=3):
    """(best wall time in seconds, last result) over ``repeats`` calls."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def best_cpu(fn, repeats=3):
    """Best process CPU time in seconds: what the call costs when it has a core to itself."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def fmt_s(seconds):
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def real_columns():
    for name, fname in FILES.items():
        path = DATA / fname
        if not path.exists():
            continue
        arr = np.loadtxt(path, dtype=np.int64, ndmin=1)
        if arr.ndim == 1:
            yield name, arr
        else:
            for c in range(arr.shape[1]):
                yield f"{name} ({COLUMN_NAMES[name][c]})", arr[:, c]


def dc_reference(hist, k, cost="linear"):
    """Plain numpy divide-and-conquer DP, O(k·U·log U): the usual exact implementation."""
    v = hist.values.astype(np.float64)
    f = v * v if cost == "quadratic" else v
    c = np.concatenate([[0.0], np.cumsum(hist.counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(f * hist.counts)])
    u = v.size
    prev = f * c[1:] - s[1:]  # one bucket over values 0..j
    prev = np.concatenate([[0.0], prev])
    for _ in range(1, min(k, u)):
        cur = prev.copy()
        stack = [(1, u, 0, u)]
        while stack:
            lo, hi, olo, ohi = stack.pop()
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            i = np.arange(olo, min(mid, ohi) + 1)
            cand = prev[i] + f[mid - 1] * (c[mid] - c[i]) - (s[mid] - s[i])
            a = int(np.argmin(cand))
            cur[mid] = cand[a]
            stack.append((lo, mid - 1, olo, olo + a))
            stack.append((mid + 1, hi, olo + a, ohi))
        prev = cur
    return prev[-1]


def synthetic_hist(u, seed=0):
    """``u`` distinct lengths with a lognormal-shaped count profile (speech-like skew)."""
    rng = np.random.default_rng(seed)
    values = np.unique(rng.choice(np.arange(1000, 1000 + 8 * u), size=u, replace=False))
    dens = np.exp(-((np.log(values) - np.log(values).mean()) ** 2) / (2 * 0.3**2))
    counts = 1 + rng.poisson(20 * dens / dens.mean())
    return LengthHistogram(values, counts)


def lognormal_million(seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.ceil(rng.lognormal(12.0, 0.3125, size=10**6))
    return np.clip(lengths, 8000, 400_000).astype(np.int64)


def section_real(lines, ks, repeats):
    names = sorted(STRATEGIES)
    lines += [
        "## 2. Padding on real data",
        "",
        "Cell: padding ratio = pad elements / real elements (lower is better), then (×padding",
        "relative to `optimal`'s, time of the strategy call only, histogram already built, best",
        f"of {repeats}). `lp` above 1,000 distinct values is solved on a coarsened histogram",
        "(status `coarsened`).",
        "",
    ]
    summary = []
    for label, lengths in real_columns():
        h = LengthHistogram.from_lengths(lengths)
        lines += [
            f"### {label}: {h.num_samples:,} samples, {h.num_values:,} distinct lengths "
            f"({h.min}–{h.max})",
            "",
        ]
        lines.append("| strategy | " + " | ".join(f"k={k}" for k in ks) + " |")
        lines.append("|---|" + "---|" * len(ks))
        best = {k: solve_boundaries(h, k).objective for k in ks}
        for name in names:
            cells = []
            for k in ks:
                reps = 1 if name == "lp" else repeats
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    sol = min(
                        (solve_boundaries(h, k, strategy=name) for _ in range(reps)),
                        key=lambda s: s.solve_seconds,
                    )
                rel = sol.objective / best[k] if best[k] else 1.0
                tag = "" if sol.status in ("optimal", "heuristic") else f" [{sol.status}]"
                cells.append(
                    f"{sol.padding_ratio:.2%} (×{rel:.2f}, {fmt_s(sol.solve_seconds)}){tag}"
                )
                if k == 16:
                    summary.append((label, name, sol.padding_ratio, rel))
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        lines.append("")
    return summary


def section_optimal_scaling(lines, sizes, dc_max, repeats):
    lines += [
        "## 3. `optimal` scaling (k = 16, linear cost)",
        "",
        "Synthetic histograms with a lognormal count profile. Reference: a plain numpy",
        "divide-and-conquer DP (O(k·U·log U), vectorised inner minimum), run where it takes",
        "under a minute. Both exact; objectives are checked equal.",
        "",
        "| distinct values | `optimal` | max hull size | D&C reference | speed-up |",
        "|---:|---:|---:|---:|---:|",
    ]
    for u in sizes:
        h = synthetic_hist(u)
        t, r = best_time(lambda h=h: optimal(h, 16), repeats)
        if u <= dc_max:
            t_ref, ref = best_time(lambda h=h: dc_reference(h, 16), 1)
            assert abs(ref - r.info["objective"]) <= 1e-9 * max(ref, 1), (ref, r.info)
            ref_cells = f"{fmt_s(t_ref)} | ×{t_ref / t:.0f}"
        else:
            ref_cells = "— | —"
        lines.append(f"| {u:,} | {fmt_s(t)} | {r.info['max_hull_size']:,} | {ref_cells} |")
    lines.append("")


def section_targets(lines, repeats, dc_million):
    lines += ["## 1. Targets: LibriSpeech and one million lognormal lengths (k = 16)", ""]
    lines += [
        "Wall times are best of the repeats; `CPU` is the process CPU time of `optimal` (best of",
        "the repeats), which is what the call costs with a core to itself — on a shared machine",
        "wall time also includes waiting for a core (see the load average above). End to end =",
        "`solve_boundaries(lengths, 16)`: histogram, strategy, validation, objective.",
        "",
        "| case | distinct | cost | histogram | `optimal` wall | `optimal` CPU | end to end "
        "| D&C reference |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    libri = DATA / FILES["librispeech"]
    cases = []
    if libri.exists():
        cases.append(("LibriSpeech train-clean-100", np.loadtxt(libri, dtype=np.int64)))
    cases.append(("10⁶ lognormal lengths", lognormal_million()))
    out = {}
    for label, lengths in cases:
        t_hist, h = best_time(lambda x=lengths: LengthHistogram.from_lengths(x), repeats)
        for cost in ("linear", "quadratic"):
            t_opt, r = best_time(lambda h=h, c=cost: optimal(h, 16, cost=c), repeats)
            cpu = best_cpu(lambda h=h, c=cost: optimal(h, 16, cost=c), repeats)
            t_e2e, sol = best_time(
                lambda x=lengths, c=cost: solve_boundaries(x, 16, cost=c), repeats
            )
            assert sol.objective == r.info["objective"] == padding_cost(h, r.boundaries, cost=cost)
            ref = "—"
            if cost == "linear" and (h.num_values < 10_000 or dc_million):
                t_ref, val = best_time(lambda h=h: dc_reference(h, 16), 1)
                assert abs(val - r.info["objective"]) <= 1e-9 * val
                ref = f"{fmt_s(t_ref)} (×{t_ref / t_opt:.0f})"
            lines.append(
                f"| {label} | {h.num_values:,} | {cost} | {fmt_s(t_hist)} | {fmt_s(t_opt)} | "
                f"{fmt_s(cpu)} | "
                f"{fmt_s(t_e2e)} | {ref} |"
            )
            out[(label, cost)] = (t_opt, t_e2e)
    lines.append("")
    return out


def section_lp(lines, sizes):
    lines += [
        "## 4. `lp` scaling (PuLP + CBC, k = 16)",
        "",
        "Total = validation, dense bounds, model building and CBC. `arcs` = bucket variables",
        "kept / feasible. Every row is checked against `optimal` (plain rows) or is proved",
        "optimal by CBC (`min_bucket_fraction` rows).",
        "",
        "| distinct values | constraint | total | bounds | build + CBC | arcs | status "
        "| = optimal |",
        "|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for u in sizes:
        h = synthetic_hist(u, seed=1)
        for frac in (0.0, 0.05):
            t, r = best_time(lambda h=h, f=frac: lp(h, 16, min_bucket_fraction=f), 1)
            same = "yes" if r.info["objective"] == optimal(h, 16).info["objective"] else "no"
            same = same if frac == 0 else "n/a"
            lines.append(
                f"| {u:,} | {'min_bucket_fraction=0.05' if frac else '—'} | {fmt_s(t)} | "
                f"{fmt_s(r.info['bounds_seconds'])} | {fmt_s(r.info['solve_seconds'])} | "
                f"{r.info['arcs_kept']:,} / {r.info['arcs_total']:,} | {r.status} | {same} |"
            )
    lines.append("")


def machine_info():
    import pulp
    import scipy
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("n/a",)
    return [
        "## Machine",
        "",
        f"- CPU count: {os.cpu_count()} ({platform.processor() or platform.machine()}); "
        f"load average at start: {', '.join(f'{x:.1f}' for x in load)} (shared machine)",
        f"- Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}"
        f", torch {torch.__version__}, pulp {pulp.__version__}",
        f"- {platform.platform()}",
        "",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "strategies.md"))
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else 5
    start = time.perf_counter()
    lines = ["# Strategies benchmark", ""]
    lines += ["Reproduce: `.venv/bin/python benchmarks/strategies.py`", ""]
    lines += machine_info()
    targets_lines: list[str] = []
    section_targets(targets_lines, repeats, dc_million=not args.quick)
    lines += targets_lines
    summary = section_real(lines, [4, 8, 16, 32], repeats)
    sizes = [1_000, 3_000, 10_000, 30_000, 100_000, 200_000]
    section_optimal_scaling(lines, sizes[:3] if args.quick else sizes, 30_000, repeats)
    section_lp(lines, [100, 300, 1000] if args.quick else [100, 200, 500, 1000])
    worst = {}
    for _, name, _, rel in summary:
        worst[name] = max(worst.get(name, 0.0), rel)
    lines += [
        "## Summary (k = 16)",
        "",
        "Worst padding relative to `optimal` over all real columns:",
        "",
        *(f"- `{n}`: ×{w:.2f}" for n, w in sorted(worst.items(), key=lambda kv: kv[1])),
        "",
        f"Benchmark wall time: {time.perf_counter() - start:.0f} s.",
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
