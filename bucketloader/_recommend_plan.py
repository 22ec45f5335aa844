"""What one epoch of the sampler's plan costs: shapes, steps, padded and real tokens.

NOTE [ Epoch cost from the plan ]
The totals come from the sampler's own :class:`~bucketloader.plan.BucketSpec` and
:func:`~bucketloader.plan.shape_table` (one rank), so the recommender counts exactly the shapes a
``BucketSampler`` with the same options promises. Bucket ``i`` (padded length ``b[i]``) holds
``n_i`` samples cut into batches of ``B_i`` rows: with ``last_batch="pad"`` or ``"fill"`` the last,
partial batch keeps the full ``(B_i, b[i])`` shape, so the bucket costs
``ceil(n_i / B_i) * B_i * b[i]`` padded tokens; ``"drop"`` drops it; ``"keep"`` keeps it at
``(n_i mod B_i, b[i])``, an extra shape. Shuffling moves samples between the batches of a bucket
but changes none of these totals, so they hold for every epoch and seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bucketloader.plan import BucketSpec, cell_steps, shape_table

LAST_BATCH = ("drop", "fill", "keep", "pad")


@dataclass(frozen=True)
class EpochCost:
    """Totals of one epoch under one set of boundaries.

    Attributes:
        shapes: every distinct batch shape ``(rows, padded_length)`` (the sampler's ``.shapes``).
        steps: batches per epoch (``len(sampler)``).
        padded_tokens: ``sum(rows * padded_length)`` over the epoch's batches (batch-padding rows
            included).
        real_tokens: real tokens the epoch trains on (``"drop"``: the expected value; ``"fill"``:
            counting only the first copy of a sample, the repeats count as padding).
    """

    shapes: tuple[tuple[int, ...], ...]
    steps: int
    padded_tokens: int
    real_tokens: int


def epoch_cost(
    lengths: np.ndarray,
    boundaries: np.ndarray,
    *,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    last_batch: str = "pad",
) -> EpochCost:
    """Exact per-epoch totals of the sampler's plan (see NOTE [ Epoch cost from the plan ]).

    Example:
        >>> c = epoch_cost(np.array([3, 4, 4, 9, 10]), np.array([4, 10]), batch_size=2)
        >>> c.shapes, c.steps, c.padded_tokens, c.real_tokens
        (((2, 4), (2, 10)), 3, 36, 30)
    """
    spec = BucketSpec.build(
        lengths,
        boundaries=boundaries,
        batch_size=batch_size,
        max_tokens=max_tokens,
        last_batch=last_batch,
    )
    table = shape_table(spec)
    rows = spec.cell_batch.astype(np.int64)
    width = np.prod(spec.cell_lengths, axis=1).astype(np.int64)
    n = spec.counts.astype(np.int64)
    real = np.bincount(
        spec.cell_of_sample,
        weights=np.asarray(spec.lengths).reshape(n.sum(), -1).sum(axis=1),
        minlength=n.size,
    )
    full, rest = cell_steps(spec)
    if last_batch in ("pad", "fill"):
        steps = full + (rest > 0)
        padded = steps * rows * width
        used_real = real
    elif last_batch == "keep":
        steps = full + (rest > 0)
        padded = n * width
        used_real = real
    else:  # "drop": a random subset of each bucket is dropped; count its expected real tokens
        steps = full
        padded = full * rows * width
        used_real = np.divide(real * (full * rows), n, out=np.zeros(n.size), where=n > 0)
    return EpochCost(
        shapes=tuple(table.shapes),
        steps=int(steps.sum()),
        padded_tokens=int(padded.sum()),
        real_tokens=round(float(np.sum(used_real))),
    )
