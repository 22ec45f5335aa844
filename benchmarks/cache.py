"""Cold solve vs warm BucketCache lookup, side by side in one run.

Cases: 1,000 distinct lengths (100,000 samples) and 1,000,000 lengths (about 200k distinct, like
raw 16 kHz speech sample counts), for the PuLP ``lp`` strategy and the exact ``optimal`` DP.

* cold: ``compute_boundaries(lengths, k, strategy=s, cache=BucketCache(empty dir))``: histogram,
  solve, atomic JSON write.
* warm: the same call with a *new* ``BucketCache`` object on the same directory (what the next run
  or another rank does): histogram + SHA256 key + read + validate the JSON entry. Median of
  ``--repeats`` calls.
* warm, histogram given: the same with a prebuilt ``LengthHistogram`` (the lookup alone).

Run: ``.venv/bin/python benchmarks/cache.py`` (writes ``benchmarks/results/cache.md``).
``--quick`` skips the lp cases: the full run takes about 6 minutes on a busy 2-core machine
(the two lp cold solves), ``--quick`` about 10 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from bucketloader import LengthHistogram, compute_boundaries
from bucketloader.cache import BucketCache


def lengths_with_distinct(n: int, distinct: int, seed: int) -> np.ndarray:
    """``n`` lengths (log-normal shape) taking exactly ``distinct`` values."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, distinct]))
    values = np.arange(1, distinct + 1) * 16
    p = np.exp(-0.5 * ((np.log(values) - np.log(values[distinct // 2])) / 0.6) ** 2)
    draw = rng.choice(values, size=n - distinct, p=p / p.sum())
    return rng.permutation(np.concatenate([values, draw]))


def speech_like(n: int, seed: int) -> np.ndarray:
    """``n`` raw sample counts at 16 kHz: 1-25 s, mostly 10-16 s (many distinct values)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, n]))
    secs = np.clip(rng.normal(13.5, 3.5, size=n), 1.0, 24.5)
    return np.round(secs * 16000).astype(np.int64)


def timed(fn, repeats: int = 1) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def run_case(name: str, lengths: np.ndarray, strategy: str, k: int, repeats: int) -> dict:
    hist = LengthHistogram.from_lengths(lengths)
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lp's coarsening notice is part of what is measured
        cold, b_cold = timed(
            lambda: compute_boundaries(lengths, k, strategy=strategy, cache=BucketCache(d))
        )
        warm, b_warm = timed(
            lambda: compute_boundaries(lengths, k, strategy=strategy, cache=BucketCache(d)), repeats
        )
        lookup, _ = timed(
            lambda: compute_boundaries(hist, k, strategy=strategy, cache=BucketCache(d)), repeats
        )
        entry_bytes = BucketCache(d).size()
    assert np.array_equal(b_cold, b_warm), "a warm hit must return the cold answer"
    return {
        "case": name,
        "strategy": strategy,
        "n": lengths.size,
        "distinct": hist.num_values,
        "k": k,
        "cold": cold,
        "warm": warm,
        "lookup": lookup,
        "bytes": entry_bytes,
    }


def machine() -> str:
    import pulp
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (
        f"{platform.platform()}; Python {platform.python_version()}; cpu_count {os.cpu_count()}; "
        f"load average {tuple(round(x, 1) for x in load)}; numpy {np.__version__}; "
        f"torch {torch.__version__}; pulp {pulp.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", type=int, default=16)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="skip the slow lp cases")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "cache.md"))
    args = p.parse_args(argv)
    cases = [
        ("1,000 distinct values (100k samples)", lengths_with_distinct(100_000, 1000, 0)),
        ("1,000,000 lengths (speech-like)", speech_like(1_000_000, 0)),
    ]
    strategies = ["optimal"] if args.quick else ["lp", "optimal"]
    rows = []
    for strategy in strategies:
        for name, lengths in cases:
            print(f"{strategy:>8} | {name} ...", file=sys.stderr, flush=True)
            rows.append(run_case(name, lengths, strategy, args.k, args.repeats))
    lines = [
        "# BucketCache: cold solve vs warm lookup",
        "",
        f"Command: `.venv/bin/python benchmarks/cache.py{' --quick' if args.quick else ''}` "
        f"(k={args.k}, warm = median of {args.repeats}).",
        "",
        f"Machine: {machine()}.",
        "",
        "| case | strategy | samples | distinct | cold solve (s) | warm hit (ms) | speed-up | "
        "lookup, histogram given (ms) | entry (bytes) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['strategy']} | {r['n']:,} | {r['distinct']:,} | {r['cold']:.3f} | "
            f"{r['warm'] * 1e3:.2f} | {r['cold'] / r['warm']:,.0f}x | {r['lookup'] * 1e3:.2f} | "
            f"{r['bytes']:,} |"
        )
    lines += [
        "",
        "cold = histogram + solve + atomic JSON write into an empty cache directory; warm hit = "
        "the same `compute_boundaries(..., cache=BucketCache(dir))` call again with a new cache "
        "object (the next run, or another rank): histogram + SHA256 key + read + validate the "
        "entry; the last column skips the histogram (a `LengthHistogram` is passed). `lp` "
        "coarsens histograms above its `max_values=1000` distinct lengths (status `coarsened`), "
        "so its 1M-length row solves a 1,000-value model too. On this shared 2-core machine "
        "timings vary with the load shown above; the ratios are what to read.",
        "",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
