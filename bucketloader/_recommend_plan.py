"""What one epoch of a bucketed plan costs, from the length histogram alone (no per-sample plan).

NOTE [ Epoch cost from the histogram ]
Bucket ``i`` (padded length ``b[i]``) holds ``n_i`` samples and is cut into batches of ``B_i =
batch_size`` or ``max_tokens // b[i]`` rows. With ``last_batch="pad"`` (the sampler's default) the
last, partial batch of a bucket is padded with extra rows to the full ``(B_i, b[i])`` shape, so the
bucket costs ``ceil(n_i / B_i) * B_i * b[i]`` padded tokens and adds one shape; ``"drop"`` drops the
partial batch; ``"keep"`` keeps it at ``(n_i mod B_i, b[i])``, which is one more shape. Shuffling
moves samples between batches of one bucket but changes none of these totals, so they are exact for
every epoch and seed. ``tests/test_recommend.py`` checks them against the sampler's own ``.shapes``
and batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bucketloader.histogram import LengthHistogram

LAST_BATCH = ("drop", "keep", "pad")


@dataclass(frozen=True)
class EpochCost:
    """Totals of one epoch under one set of boundaries.

    Attributes:
        shapes: every distinct ``(rows, padded_length)`` batch shape, sorted.
        steps: batches per epoch.
        padded_tokens: ``sum(rows * padded_length)`` over the epoch's batches (batch-padding rows
            included).
        real_tokens: sum of the real lengths of the samples the epoch uses.
    """

    shapes: tuple[tuple[int, int], ...]
    steps: int
    padded_tokens: int
    real_tokens: int


def rows_per_batch(
    boundaries: np.ndarray, *, batch_size: int | None, max_tokens: int | None
) -> np.ndarray:
    """Rows of each bucket's batch: ``batch_size``, or ``max_tokens // boundary``."""
    b = np.asarray(boundaries, dtype=np.int64)
    if batch_size is not None:
        return np.full(b.shape, batch_size, dtype=np.int64)
    assert max_tokens is not None  # internal: the caller checked exactly one is set
    if int(b[-1]) > max_tokens:
        raise ValueError(
            f"max_tokens must be >= the longest padded length {int(b[-1])} so that every batch "
            f"holds at least one sample, got max_tokens={max_tokens}; raise max_tokens"
        )
    return max_tokens // np.maximum(b, 1)


def epoch_cost(
    hist: LengthHistogram,
    boundaries: np.ndarray,
    *,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    last_batch: str = "pad",
) -> EpochCost:
    """Exact per-epoch totals of a bucketed plan (see NOTE [ Epoch cost from the histogram ]).

    Example:
        >>> h = LengthHistogram.from_lengths([3, 4, 4, 9, 10])
        >>> c = epoch_cost(h, np.array([4, 10]), batch_size=2)
        >>> c.shapes, c.steps, c.padded_tokens, c.real_tokens
        (((2, 4), (2, 10)), 3, 36, 30)
    """
    b = np.asarray(boundaries, dtype=np.int64)
    bucket = np.searchsorted(b, hist.values, side="left")
    n = np.bincount(bucket, weights=hist.counts, minlength=b.size).astype(np.int64)
    real = np.bincount(bucket, weights=hist.values * hist.counts, minlength=b.size)
    rows = rows_per_batch(b, batch_size=batch_size, max_tokens=max_tokens)
    full, rest = np.divmod(n, rows)
    shapes = {(int(r), int(v)) for r, v, f in zip(rows, b, full, strict=True) if f > 0}
    if last_batch == "pad":
        steps = full + (rest > 0)
        padded = steps * rows * b
        shapes |= {(int(r), int(v)) for r, v, m in zip(rows, b, rest, strict=True) if m > 0}
        used_real = real
    elif last_batch == "keep":
        steps = full + (rest > 0)
        padded = n * b
        shapes |= {(int(m), int(v)) for v, m in zip(b, rest, strict=True) if m > 0}
        used_real = real
    else:  # "drop": a random subset of each bucket is dropped; count its expected real tokens
        steps = full
        padded = full * rows * b
        used_real = np.divide(real * (full * rows), n, out=np.zeros(b.size), where=n > 0)
    return EpochCost(
        shapes=tuple(sorted(shapes)),
        steps=int(steps.sum()),
        padded_tokens=int(padded.sum()),
        real_tokens=round(float(np.sum(used_real))),
    )
