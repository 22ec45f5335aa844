"""What ``last_batch="fill"`` repeats per epoch, on the tests/data length files, 1 and 8 ranks,
for BucketSampler and PackSampler, against torch's ``DistributedSampler(drop_last=False)``
(which wraps around to the start of its shuffled index list).

Per configuration, over epochs 0-3 (seed 0, every rank's batches): the extra appearances per
epoch (``report().totals["repeated"]``, checked against the batches), the distinct samples
repeated in epoch 0, the most times one sample appears in an epoch, the median length
percentile of the repeated samples (0.5: typical lengths, 1.0: the longest), how many were
repeated in every one of the 4 epochs, and whether the sampler warns (NOTE [ What fill
repeats ] in ``bucketloader/plan/epoch.py``), and each sampler's padding in epoch 0 (the price of
the fill, NOTE [ Filling a small bucket ]). Lengths: LibriSpeech in wav2vec2 frames (samples /
320), Common Voice in 20 ms frames, GSM8K question + answer + 2, Europarl en + fr + 2.

The streams (``BucketIterable``, ``PackIterable``) are measured the same way: one pass over
the whole set on 1 rank, and on 8 ranks each rank's ``[rank::8]`` shard with ``steps_per_epoch``
the sampler's step count; the bucket streams on the boundaries of the sampler's spec with a
shuffle buffer of 256 (so their epochs differ; a packing stream's are all alike); NOTE [ What
a stream's fill repeats ] in ``bucketloader/stream/resume.py``. "warns" is the stream's
end-of-pass note on any rank.

Run: ``PYTHONPATH=$PWD python benchmarks/fill_repeats.py`` (about 30 s); writes
``benchmarks/results/fill_repeats.md``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from bucketloader import BucketSampler, PackSampler  # noqa: E402
from bucketloader.stream import BucketIterable, PackIterable  # noqa: E402
from tests.conftest import load_real  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "fill_repeats.md"
EPOCHS = 4


def lengths() -> dict[str, np.ndarray]:
    """The length sets measured."""
    return {
        "librispeech": np.asarray(load_real("librispeech")) // 320,
        "commonvoice": np.asarray(load_real("commonvoice")) // 20,
        "gsm8k": np.asarray(load_real("gsm8k")).sum(1) + 2,
        "gsm8k[:4000]": np.asarray(load_real("gsm8k"))[:4000].sum(1) + 2,
        "europarl": np.asarray(load_real("europarl")).sum(1) + 2,
    }


CONFIGS = [
    (PackSampler, "gsm8k", {"row_length": (256, 512), "batch_size": 16}),
    (PackSampler, "gsm8k", {"row_length": 512, "batch_size": 16}),
    (PackSampler, "gsm8k", {"row_length": (128, 256, 512), "max_tokens": 16384}),
    (PackSampler, "gsm8k[:4000]", {"row_length": (256, 512), "batch_size": 16}),
    (PackSampler, "europarl", {"row_length": (64, 128, 256), "batch_size": 32}),
    (PackSampler, "librispeech", {"row_length": (1024, 2048), "batch_size": 8}),
    (BucketSampler, "librispeech", {"num_buckets": 8, "max_tokens": 16000}),
    (BucketSampler, "librispeech", {"num_buckets": 8, "batch_size": 32}),
    (BucketSampler, "commonvoice", {"num_buckets": 8, "max_tokens": 8000}),
    (BucketSampler, "commonvoice", {"num_buckets": 16, "batch_size": 64}),
    (BucketSampler, "gsm8k", {"num_buckets": 8, "batch_size": 32}),
    (BucketSampler, "gsm8k", {"num_buckets": 8, "max_tokens": 8192}),
    # accumulation groups round each bucket's steps up to whole groups (NOTE [ Accumulation
    # groups ]): their extra steps are filled too (NOTE [ Filling a small bucket ])
    (BucketSampler, "librispeech", {"num_buckets": 8, "batch_size": 32, "accumulate": 4}),
    (BucketSampler, "commonvoice", {"num_buckets": 16, "batch_size": 64, "accumulate": 2}),
    (BucketSampler, "gsm8k", {"num_buckets": 8, "batch_size": 32, "accumulate": 4}),
    (BucketSampler, "gsm8k", {"num_buckets": 8, "max_tokens": 8192, "accumulate": 4}),
]


#: Streams: (stream, data, the sampler options whose spec and step count it takes).
STREAMS = [
    (BucketIterable, "librispeech", {"num_buckets": 8, "batch_size": 32}),
    (BucketIterable, "librispeech", {"num_buckets": 8, "max_tokens": 16000}),
    (BucketIterable, "commonvoice", {"num_buckets": 16, "batch_size": 64}),
    (BucketIterable, "gsm8k", {"num_buckets": 8, "batch_size": 32}),
    (PackIterable, "gsm8k[:4000]", {"row_length": 512, "batch_size": 16}),
]
SHUFFLE = 256


def stream_counts(
    cls: type, lens: np.ndarray, opts: dict[str, object], r: int
) -> tuple[list[np.ndarray], bool]:
    """Appearances of each sample per epoch (epochs 0-3) over ``r`` simulated ranks, and
    whether any rank's pass warned about its fill."""
    planner = PackSampler if cls is PackIterable else BucketSampler
    samples = [(i, int(n)) for i, n in enumerate(lens)]
    steps = len(planner(lens, num_replicas=r, rank=0, last_batch="fill", **opts))  # type: ignore[operator]
    shape: dict[str, object] = dict(opts)
    if cls is BucketIterable:
        spec = BucketSampler(lens, **opts).spec  # type: ignore[arg-type]
        shape = {k: v for k, v in opts.items() if k != "num_buckets"}
        shape["boundaries"] = spec
        shape["shuffle_buffer"] = SHUFFLE  # (a packing stream has none: the same every epoch)
    split = {} if r == 1 else {"num_replicas": r, "steps_per_epoch": steps}
    counts, warned = [], False
    for e in range(EPOCHS):
        c = np.zeros(lens.size, dtype=np.int64)
        repeated = 0
        for k in range(r):
            stream = cls(
                samples[k::r],
                length_fn=lambda s: s[1],
                last_batch="fill",
                **({"rank": k} if r > 1 else {}),
                **split,
                **shape,
            )
            stream.set_epoch(e)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for batch in stream:
                    np.add.at(c, np.fromiter((x[0] for x in batch), dtype=np.int64), 1)
            warned |= any("last_batch='fill'" in str(w.message) for w in caught)
            if cls is BucketIterable:
                repeated += stream.report().totals["repeated"]
        if cls is BucketIterable:
            assert int((c - (c > 0)).sum()) == repeated
        counts.append(c)
    return counts, warned


def summary(lens: np.ndarray, counts: list[np.ndarray]) -> dict[str, object]:
    """The row of one configuration from its per-epoch appearance counts."""
    c0 = counts[0]
    rep0 = np.flatnonzero(c0 > 1)
    ranked = np.sort(lens[c0 > 0])
    pct = np.searchsorted(ranked, lens[rep0], "left") / ranked.size if rep0.size else []
    every = set.intersection(*(set(np.flatnonzero(c > 1).tolist()) for c in counts))
    return {
        "repeats": [int((c - (c > 0)).sum()) for c in counts],
        "distinct": int(rep0.size),
        "most": int(max(c.max() for c in counts)),
        "pct": float(np.median(pct)) if rep0.size else float("nan"),
        "every": len(every),
    }


def measure() -> list[tuple[str, str, int, dict[str, object], str]]:
    sets = lengths()
    rows = []
    for cls, name, opts in CONFIGS:
        lens = sets[name]
        for r in (1, 8):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ss = [
                    cls(lens, num_replicas=r, rank=k, last_batch="fill", **opts) for k in range(r)
                ]
            warned = any("last_batch='fill'" in str(w.message) for w in caught)
            counts = []
            for e in range(EPOCHS):
                idx = np.concatenate([np.asarray(s.plan(e).indices) for s in ss])
                c = np.bincount(idx, minlength=lens.size)
                assert int((c - (c > 0)).sum()) == ss[0].report(e).totals["repeated"]
                counts.append(c)
            label = f"{cls.__name__} {opts}"
            row = summary(lens, counts)
            row["padding"] = f"{ss[0].report(0).padding:.2%}"  # every rank's epoch 0, filler in
            rows.append((label, name, r, row, "yes" if warned else "no"))
    for cls, name, opts in STREAMS:
        lens = sets[name]
        for r in (1, 8):
            counts, warned = stream_counts(cls, lens, opts, r)
            label = f"{cls.__name__} {opts}"
            rows.append((label, name, r, summary(lens, counts), "yes" if warned else "no"))
    for name in ("gsm8k", "librispeech"):
        lens = sets[name]
        for r in (1, 8):
            counts = []
            for e in range(EPOCHS):
                c = np.zeros(lens.size, dtype=np.int64)
                for k in range(r):
                    ds = DistributedSampler(range(lens.size), num_replicas=r, rank=k, seed=0)
                    ds.set_epoch(e)
                    np.add.at(c, np.fromiter(iter(ds), dtype=np.int64), 1)
                counts.append(c)
            rows.append(("torch DistributedSampler", name, r, summary(lens, counts), "-"))
    return rows


def main() -> None:
    lines = [
        "# What last_batch='fill' repeats per epoch",
        "",
        "Written by `benchmarks/fill_repeats.py` (see its docstring). Repeats: extra appearances "
        "per epoch, epochs 0-3, over all ranks. Distinct: samples repeated in epoch 0. Most: "
        "the most times one sample appears in an epoch. Length pct: median length percentile "
        "of the repeated samples. Every epoch: samples repeated in all 4 epochs. Padding: the "
        "sampler's `report(0).padding` (epoch 0, every rank, filler rows included; '-' for the "
        "streams and DistributedSampler).",
        "",
        "| sampler | data | ranks | repeats / epoch | distinct | most | length pct | "
        "every epoch | warns | padding |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, name, r, s, warned in measure():
        reps = ", ".join(f"{x:,}" for x in s["repeats"])  # type: ignore[attr-defined]
        lines.append(
            f"| {label} | {name} | {r} | {reps} | {s['distinct']:,} | {s['most']} | "
            f"{s['pct']:.2f} | {s['every']:,} | {warned} | {s.get('padding', '-')} |"
        )
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
