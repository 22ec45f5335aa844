"""Length filters and the token-budget cap, measured on the real lengths in ``tests/data``.

Run from the repository root (a few seconds)::

    .venv/bin/python benchmarks/filters.py

Writes ``benchmarks/results/filters.md``:

1. LibriSpeech train-clean-100 at k = 8 and 16 (optimal boundaries): padding of every batch the
   sampler plans over one epoch (masked rows included), with no filter, with
   ``max_length`` at the 99.9th percentile (``overflow="drop"`` and ``"truncate"``), and the
   padding of the last bucket (the one the outliers claim);
2. Europarl en: the empty sentences (``min_length=1``) and what ``max_tokens`` makes of them with
   and without the filter and with ``max_batch_size``.

Padding is counted as the sampler's report counts it: elements of the planned batches minus the
real elements (after truncation), over the real elements. Pure planning, no timing, so the load
of the shared machine does not matter; it is recorded anyway.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import BucketSampler, TokenBudget  # noqa: E402

DATA = ROOT / "tests" / "data"


def load(name: str) -> np.ndarray:
    return np.loadtxt(DATA / name, dtype=np.int64, ndmin=1)


def row(label: str, sampler: BucketSampler) -> str:
    rep = sampler.report()
    last = rep.cells[-1]
    last_pad = (last["padded"] - last["real"]) / last["real"] if last["real"] else 0.0
    t = rep.totals
    left_out = t["too_short"] + t["too_long"] + t["oversize"]
    shapes = ", ".join("x".join(map(str, c["shape"])) for c in rep.cells[-2:])
    return (
        f"| {label} | {rep.padding:.2%} | {last_pad:.1%} ({last['samples']} samples) | "
        f"{left_out} | {t['truncated']} | {len(sampler)} | {shapes} |"
    )


def shortest(sampler: BucketSampler, n: int) -> str:
    shapes = sorted(sampler.shapes, key=lambda x: x[1])[:n]
    return ", ".join("x".join(map(str, sh)) for sh in shapes)


def librispeech(lines: list[str]) -> None:
    lengths = load("librispeech_train_clean_100_samples.txt")
    cut = int(np.percentile(lengths, 99.9))
    over = int((lengths > cut).sum())
    lines += [
        "## LibriSpeech train-clean-100: one epoch's planned batches",
        "",
        f"{lengths.size:,} utterances (16 kHz samples), longest {lengths.max():,}; the 99.9th "
        f"percentile is {cut:,} and {over} utterances are longer. `max_tokens=3_200_000` "
        "(200 s of audio per batch), optimal boundaries, `last_batch='pad'`.",
        "",
        "| k, filter | padding (epoch) | last bucket's padding | left out | truncated | batches"
        " | two largest shapes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for k in (8, 16):
        common = {"num_buckets": k, "max_tokens": 3_200_000, "seed": 0}
        lines.append(row(f"k={k}, none", BucketSampler(lengths, **common)))
        for policy in ("drop", "truncate"):
            s = BucketSampler(lengths, max_length=cut, overflow=policy, **common)
            lines.append(row(f"k={k}, `max_length={cut}`, `{policy}`", s))
    lines.append("")


def europarl(lines: list[str]) -> None:
    en = load("europarl_v7_en_fr_20k_tokens.txt")[:, 0]
    empty = int((en == 0).sum())
    lines += [
        "## Europarl en: empty sentences under a token budget",
        "",
        f"{en.size:,} sentences, {empty} of them empty (0 tokens), "
        "`num_buckets=8`, `strategy='percentile'`, `max_tokens=16384`.",
        "",
        "| options | batch shapes (rows x length), shortest buckets | left out |",
        "|---|---|---:|",
    ]
    common = {"num_buckets": 8, "strategy": "percentile", "seed": 0}
    cases = {
        "`max_tokens=16384`": {"max_tokens": 16384},
        "`max_tokens=TokenBudget(16384, max_batch_size=512)`": {
            "max_tokens": TokenBudget(16384, max_batch_size=512)
        },
        "`max_tokens=16384, min_length=1, overflow='drop'`": {
            "max_tokens": 16384,
            "min_length": 1,
            "overflow": "drop",
        },
    }
    for label, kw in cases.items():
        s = BucketSampler(en, **common, **kw)
        shapes = shortest(s, 3)
        lines.append(f"| {label} | {shapes} | {s.report().totals['too_short']} |")
    lines += [
        "",
        "Here the empty sentences share the first bucket (padded to its boundary) and are "
        "trained on as all-padding rows unless `min_length=1` leaves them out (the report "
        "counts them either way).",
        "",
        "When empty samples are common enough to get a bucket of their own (issue 12's case: "
        "Europarl en with every 7th sentence emptied, 14.3%), that bucket has padded size 0:",
        "",
        "| options | shapes of the two shortest buckets |",
        "|---|---|",
    ]
    holed = en.copy()
    holed[::7] = 0
    for label, kw in {
        "`max_tokens=16384`": {"max_tokens": 16384},
        "`max_tokens=TokenBudget(16384, max_batch_size=256)`": {
            "max_tokens": TokenBudget(16384, max_batch_size=256)
        },
    }.items():
        s = BucketSampler(holed, **common, **kw)
        shapes = shortest(s, 2)
        lines.append(f"| {label} | {shapes} |")
    lines += [
        "",
        "Before, a size of 0 counted as 1, so that bucket's batches were 16384x0. Now an empty "
        "bucket takes `max_batch_size`, else the batch size of the shortest non-empty bucket "
        "(NOTE [ The batch-size rule ]).",
        "",
    ]


def main() -> None:
    load_avg = os.getloadavg()
    lines = [
        "# Length filters and the batch cap",
        "",
        "Command: `.venv/bin/python benchmarks/filters.py` (pure planning, deterministic). "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load_avg[0]:.2f} / {load_avg[1]:.2f} / {load_avg[2]:.2f}.",
        "",
    ]
    librispeech(lines)
    europarl(lines)
    out = ROOT / "benchmarks" / "results" / "filters.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
