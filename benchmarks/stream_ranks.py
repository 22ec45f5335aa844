"""What keeping ranks in step costs a stream: padding against the map-style sampler.

Run from the repository root (about a minute on a 2-core machine)::

    .venv/bin/python benchmarks/stream_ranks.py

Writes ``benchmarks/results/stream_ranks.md``. For LibriSpeech train-clean-100 (10 ms frames)
and Europarl fr, 8 optimal buckets under ``max_tokens``, each rank streams its round-robin shard
(``samples[rank::R]``) with ``steps_per_epoch`` set to the map-style sampler's step count for
the same ranks, and a 64-sample shuffle buffer. Ranks are simulated in one process (the bucket
schedule comes from the ``BucketSpec``, as with ``boundaries=spec``; real gloo ranks compute the
same schedule from an all-reduced head). Columns, summed over ranks:

* padding: padded elements of the planned batches over real elements (masked rows included);
* masked rows: rows the collator pads because a rank had too few samples for its step;
* promoted: samples batched in a longer bucket than their own to keep the step's shape;
* unused: samples still buffered or unread when the epoch's steps ran out.

The ``BucketSampler`` row is the same spec planned with full knowledge of the lengths; the
"one pass" row is the stream without ``steps_per_epoch`` on one rank, and "unsynchronised" gives
the step counts such streams make on each rank's shard (different counts: a hang at the end of
the epoch under DDP). "Sorted" gives
each rank one contiguous band of lengths (the adversarial case: the schedule asks every rank for
every bucket). Pure planning and bucketing, no timing.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import BucketSampler, BucketSpec  # noqa: E402
from bucketloader.stream import BucketIterable  # noqa: E402

DATA = ROOT / "tests" / "data"


def load(name: str, column: int | None = None) -> np.ndarray:
    arr = np.loadtxt(DATA / name, dtype=np.int64, ndmin=1)
    return arr if column is None else arr[:, column]


def samples(lengths: np.ndarray) -> list[dict]:
    return [{"id": i, "x": np.zeros(int(n), dtype=np.int8)} for i, n in enumerate(lengths)]


def run_ranks(spec, shards, steps, max_tokens):
    padded = real = masked = promoted = unused = 0
    for r, shard in enumerate(shards):
        stream = BucketIterable(
            shard,
            length_fn="x",
            boundaries=spec,
            max_tokens=max_tokens,
            num_replicas=len(shards),
            rank=r,
            steps_per_epoch=steps,
            shuffle_buffer=64,
            seed=0,
        )
        for _ in stream:
            pass
        rep = stream.report()
        t = rep.totals
        real += sum(c["real"] for c in rep.cells)
        padded += sum(c["padded"] for c in rep.cells)
        masked += t["padded_rows"]
        promoted += t["promoted"]
        unused += t["left_over"] + len(shard) - t["samples"]
    return (padded - real) / real, masked, promoted, unused


def table(name: str, lengths: np.ndarray, max_tokens: int, lines: list[str]) -> None:
    spec = BucketSpec.build(lengths, num_buckets=8, max_tokens=max_tokens)
    lines += [
        f"## {name}: {lengths.size:,} samples, 8 buckets, `max_tokens={max_tokens}`",
        "",
        "| ranks | plan | steps per rank | padding | masked rows | promoted | unused |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    one = BucketIterable(
        samples(lengths), length_fn="x", boundaries=spec, max_tokens=max_tokens,
        shuffle_buffer=64,
    )  # fmt: skip
    for _ in one:
        pass
    rep = one.report()
    lines.append(
        f"| 1 | stream, one pass | {rep.totals['batches']} | {rep.padding:.2%} | "
        f"{rep.totals['padded_rows']} | 0 | 0 |"
    )
    order = np.argsort(lengths, kind="stable")
    for r in (1, 2, 4, 8):
        sampler = BucketSampler(spec, num_replicas=r, rank=0)
        steps = len(sampler)
        rep = sampler.report()
        lines.append(
            f"| {r} | `BucketSampler` | {steps} | {rep.padding:.2%} | "
            f"{rep.totals['padded_rows']} | - | {rep.totals['dropped']} |"
        )
        data = samples(lengths)
        shards = [data[k::r] for k in range(r)]
        if r > 1:  # before: an unsynchronised one-pass stream per rank
            counts = []
            for shard in shards:
                alone = BucketIterable(shard, length_fn="x", boundaries=spec,
                                       max_tokens=max_tokens, shuffle_buffer=64)  # fmt: skip
                counts.append(sum(1 for _ in alone))
            lines.append(
                f"| {r} | one-pass stream per rank (unsynchronised) | {min(counts)}-"
                f"{max(counts)} | - | - | - | - |"
            )
        pad, masked, promoted, unused = run_ranks(spec, shards, steps, max_tokens)
        lines.append(
            f"| {r} | stream, round-robin shards | {steps} | {pad:.2%} | {masked} | "
            f"{promoted} | {unused} |"
        )
        if r > 1:
            bands = [[data[i] for i in part] for part in np.array_split(order, r)]
            pad, masked, promoted, unused = run_ranks(spec, bands, steps, max_tokens)
            lines.append(
                f"| {r} | stream, sorted shards | {steps} | {pad:.2%} | {masked} | "
                f"{promoted} | {unused} |"
            )
    lines.append("")


def main() -> None:
    load_avg = os.getloadavg()
    lines = [
        "# A stream split over ranks: what equal steps and shapes cost",
        "",
        "Command: `.venv/bin/python benchmarks/stream_ranks.py` (deterministic; no timing). "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load_avg[0]:.2f} / {load_avg[1]:.2f} / {load_avg[2]:.2f}.",
        "",
    ]
    table(
        "LibriSpeech train-clean-100 (10 ms frames)",
        load("librispeech_train_clean_100_samples.txt") // 160,
        40_000,
        lines,
    )
    table("Europarl fr (tokens)", load("europarl_v7_en_fr_20k_tokens.txt", 1), 4096, lines)
    out = ROOT / "benchmarks" / "results" / "stream_ranks.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
