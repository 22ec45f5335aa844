"""``bucketloader demo``: the whole idea on real LibriSpeech lengths, in under a minute.

NOTE [ The scaled view ]
LibriSpeech train-clean-100 is 28,539 utterances of up to 392,400 samples (16 kHz): as float32
audio that is 23 GB. The demo works in 20 ms frames (samples / 320, rounded up: the wav2vec2 frame
rate) with 80 features per frame, i.e. log-mel-like ``(frames, 80)`` tensors generated lazily in
``__getitem__``. Padding and shape counts are exact over one full epoch, computed from the index
batches each loader's batch sampler yields; real tensors are materialised through a real
``DataLoader`` only for the first ``max_batches`` batches of each loader, and every one of them is
checked against the sampler's planned shapes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from bucketloader._validation import OptionError, check_int
from bucketloader.analysis import analyze
from bucketloader.cli.files import default_lengths
from bucketloader.collate import Field
from bucketloader.sampler import BucketSampler

FRAME = 320  # samples per 20 ms frame at 16 kHz
FEATURES = 80


class SyntheticFeatures(Dataset[dict[str, Any]]):
    """Map-style dataset: item ``i`` is ``{"features": randn(frames[i], dim)}``, seeded by ``i``."""

    def __init__(self, frames: np.ndarray, dim: int = FEATURES) -> None:
        self.frames = np.asarray(frames, dtype=np.int64)
        self.dim = dim

    def __len__(self) -> int:
        return int(self.frames.size)

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(int(i))
        return {"features": torch.randn(int(self.frames[i]), self.dim, generator=g)}


def pad_to_longest(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Dynamic padding: pad the batch to its own longest item (the usual collate)."""
    from torch.nn.utils.rnn import pad_sequence

    return {"features": pad_sequence([it["features"] for it in items], batch_first=True)}


def epoch_stats(batches: Any, frames: np.ndarray, shape_of: Any) -> dict[str, Any]:
    """Distinct (batch, time) shapes and padded / real frames over one epoch of index batches."""
    shapes: set[tuple[int, int]] = set()
    padded = real = n = 0
    for batch in batches:
        lengths = frames[np.asarray(batch)]
        shape = shape_of(lengths)
        shapes.add(shape)
        padded += shape[0] * shape[1]
        real += int(lengths.sum())
        n += 1
    return {"shapes": len(shapes), "padding": (padded - real) / real, "batches": n}


#: The largest batch the demo materialises (its batches are real tensors).
_MAX_BATCH_BYTES = 2**30


def run_demo(*, num_buckets: int, batch_size: int, max_batches: int, plot: str | None) -> int:
    k = check_int("num_buckets", num_buckets, minimum=1)
    bs = check_int("batch_size", batch_size, minimum=1)
    max_batches = check_int("max_batches", max_batches, minimum=1)
    start = time.perf_counter()
    samples = default_lengths()
    frames = -(-samples // FRAME)
    per_row = int(frames.max()) * FEATURES * 4  # bytes of the widest bucket's float32 row
    if bs * per_row > _MAX_BATCH_BYTES:  # (--batch-size 100000 asked for 39 GB per batch)
        raise OptionError(
            lambda o: (
                f"{o('batch_size', bs)} makes demo batches of up to {bs:,} x "
                f"{int(frames.max())} frames x {FEATURES} features, {bs * per_row / 2**30:.1f} GiB "
                f"of float32 each; use at most {o('batch_size', _MAX_BATCH_BYTES // per_row)}"
            )
        )
    hours = samples.sum() / 16000 / 3600
    print(
        f"LibriSpeech train-clean-100: {samples.size:,} utterances, {hours:.1f} h of 16 kHz audio "
        f"(package data). Scaled view: 20 ms frames (samples / {FRAME}) x {FEATURES} features "
        f"per frame, generated lazily in __getitem__; {max_batches} batches per loader are "
        "materialised, padding and shapes are counted over the full epoch.\n"
    )
    report = analyze(frames, num_buckets=sorted({4, 8, k, 32}), batch_size=bs)
    report = dataclasses.replace(report, source="LibriSpeech train-clean-100, 20 ms frames")
    print(report)

    dataset = SyntheticFeatures(frames)
    fields = {"features": Field(dims=-2)}
    loaders: dict[str, tuple[Any, Any, Any, Any]] = {}
    for name in ("optimal", "percentile"):
        sampler = BucketSampler(frames, num_buckets=k, strategy=name, batch_size=bs, seed=0)
        table = sampler.shape_table
        loaders[f"bucketloader, {name} k={k}"] = (
            sampler,
            DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator(fields=fields)),
            lambda lengths, t=table: tuple(int(x) for x in t.target(lengths)),
            {tuple(int(x) for x in s) for s in sampler.shapes},
        )
    gen = torch.Generator().manual_seed(0)
    dyn_batches = BatchSampler(RandomSampler(dataset, generator=gen), bs, drop_last=False)
    loaders[f"dynamic padding, batch {bs}"] = (
        dyn_batches,
        DataLoader(dataset, batch_sampler=dyn_batches, collate_fn=pad_to_longest),
        lambda lengths: (int(lengths.size), int(lengths.max())),
        None,
    )

    print(
        f"\nOne epoch through three loaders (batch_size={bs}; padding = padded frames / real "
        "frames - 1, including the masked padding rows of partial batches; shapes = distinct "
        "(batch, frames) tensor shapes = torch.compile(dynamic=False) / XLA compilations; the "
        "dynamic-padding loader draws its own random batches, so its figures differ a little "
        "from the report's estimate above):"
    )
    print(f"  {'loader':<34}{'shapes':>8}{'padding':>10}{'batches':>9}   tensors checked")
    results = {}
    for label, (batches, loader, shape_of, planned) in loaders.items():
        stats = epoch_stats(batches, frames, shape_of)
        seen = set()
        for i, batch in enumerate(loader):
            shape = tuple(batch["features"].shape)
            if shape[2] != FEATURES or (planned is not None and shape[:2] not in planned):
                raise RuntimeError(f"{label}: batch {i} has unplanned shape {shape}")
            seen.add(shape)
            if i + 1 >= max_batches:
                break
        check = f"first {i + 1} batches: {len(seen)} shapes" + (
            ", all planned" if planned is not None else ""
        )
        results[label] = stats
        print(
            f"  {label:<34}{stats['shapes']:>8,}{stats['padding']:>10.2%}"
            f"{stats['batches']:>9,}   {check}"
        )
    ours, pct_rule, dyn = results.values()
    print(
        f"\nbucketloader pads {ours['padding']:.2%} with {ours['shapes']} shapes; the percentile "
        f"rule pads {pct_rule['padding']:.2%} with {pct_rule['shapes']} "
        f"({pct_rule['padding'] / max(ours['padding'], 1e-12):.1f}x more); dynamic padding pads "
        f"{dyn['padding']:.2%} and makes {dyn['shapes']:,} shapes."
    )
    if plot:
        print(f"plot written to {report.plot(plot)}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0
