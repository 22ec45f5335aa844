"""The bucket schedule of a stream split over ranks: the same shape at every step, on every rank.

NOTE [ A stream split over ranks ]
Under DDP every rank must take the same number of steps (or the last collective hangs) and, for
static shapes, a batch of the same shape at each step. A rank cannot see the other ranks' shards,
so both come from a rule every rank evaluates alone; nothing is communicated per step.

* **Steps.** An epoch is ``steps_per_epoch`` steps on every rank (``T``; required with more than
  one rank, since no rank can know how many steps the others' shards would fill).
* **The schedule.** Step ``t`` of epoch ``e`` is a batch of cell ``c(t)``, the same on every rank:
  cell ``c`` gets ``n_c`` of the ``T`` steps, proportional to its expected share of steps,
  ``counts_c / B_c`` (largest remainders), interleaved like a sampler's cells with keys
  ``(j + u) / n_c`` from ``SeedSequence([seed, epoch, TAG])``. The counts are measured once, when
  the stream is built: from the spec's counts when ``boundaries=`` is a ``BucketSampler`` or
  ``BucketSpec``, else from the first :data:`SCHEDULE_HEAD` samples of each rank's shard, summed
  over ranks by one ``all_reduce`` of ``K`` ints (the only collective, at construction, in the main
  process). The top cell always gets a share, so no sample is ever without a cell to leave in.
* **DataLoader workers.** A rank's ``W`` workers are lanes: worker ``w`` makes the steps
  ``w, w + W, ...``; the DataLoader hands them out round-robin, so the rank's step ``t`` is
  worker ``t mod W``'s. Every rank must use the same ``num_workers``.
* **Filling a step (the planned fallback).** A lane keeps one buffer per cell. For a step of cell
  ``c`` with batch size ``B_c`` it (1) reads its shard until ``c``'s buffer holds ``B_c``
  samples, the buffers hold their capacity (``2 * sum(B)``, at least 64, plus the shuffle
  buffer) or the shard ends; (2) takes ``c``'s samples, then samples of the cells ``c`` covers
  (shorter in every input), nearest first: they fit ``c``'s shape with more padding
  (``promoted``); (3) if that is still short of ``B_c``, keeps the batch short: the collator pads
  its rows, masked (``last_batch="pad"``, counted in ``padded_rows``), or tops it up with repeats
  of its own samples (``"fill"``, ``repeated``). A batch that would hold no sample reads on past
  the capacity until one fits. Every batch is a :class:`~bucketloader.plan.PlannedBatch` that
  carries the step's shape, so the collator pads to it even when every sample came from a
  shorter cell.
* **A shard that runs dry, or has nothing short enough** (no sample left that fits the step):
  the step still happens, as padding only: one stand-in sample (a sample the lane saw that fits
  the bucket, else its first sample cut to it) that the collator turns into masked rows
  (``num_real=0``: ``sample_mask`` False, zero attention), so the rank adds nothing to the
  gradients; under ``"fill"`` the lane repeats its last batch of ``c`` (or of a cell ``c``
  covers) instead, when it has one.
* **A lane with no sample at all** (a rank whose shard is empty, or a DataLoader worker whose
  share of a tiny shard is empty) still takes its steps as padding only, like the packing
  stream: its stand-in is the stream's *template*, a sample taken when the stream is built (in
  the main process, so every worker has it): the first sample of the rank's shard or, when that
  shard is empty and a process group is initialised, the first sample of the lowest rank that
  has one (one ``all_gather`` of a flag, and a ``broadcast_object_list`` only when some rank is
  empty; the ranks of one job trust each other's pickles, as DDP does). Without any sample
  anywhere the step is an empty :class:`~bucketloader.plan.PlannedBatch`, which the collator
  refuses with a message saying how to give it a structure.
* **The end.** After its last step a lane stops; samples still buffered, and the rest of the
  shard, are not used this epoch (``left_over`` counts the buffered ones). Choose ``T`` near
  ``samples per rank / mean batch size``; the report's ``padded_rows`` / ``left_over`` say which
  way to move it.

Equal step counts and equal shapes per step hold by construction, whatever the shards hold;
what the data decides is only how much padding and repetition a lane needs.
"""

from __future__ import annotations

import numpy as np

from bucketloader.plan.epoch import apportion

#: Samples of its shard each rank reads to estimate the schedule, when nothing else gives it.
SCHEDULE_HEAD = 2048
_TAG = 0x5343  # "SC"


def step_shares(counts: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Expected share of steps per cell: ``counts / B``; the top cell always has a share.

    Example:
        >>> step_shares(np.array([40, 0, 10]), np.array([8, 4, 2])).tolist()
        [0.5, 0.0, 0.5]
    """
    counts = np.asarray(counts, dtype=np.float64).copy()
    usable = np.asarray(batch) > 0
    counts[~usable] = 0.0
    top = int(np.flatnonzero(usable)[-1])
    counts[top] = max(counts[top], 1.0)
    steps = np.where(usable, counts / np.maximum(batch, 1), 0.0)
    return steps / steps.sum()


def schedule(shares: np.ndarray, steps: int, seed: int, epoch: int) -> np.ndarray:
    """Cell of every step of ``epoch`` (the same on every rank; NOTE [ A stream split over
    ranks ]).

    Example:
        >>> s = schedule(np.array([0.75, 0.25]), 8, seed=0, epoch=0)
        >>> np.bincount(s).tolist()
        [6, 2]
    """
    n = apportion(steps, shares)
    cell = np.repeat(np.arange(n.size), n)
    j = np.arange(steps) - np.repeat(np.cumsum(n) - n, n)
    u = np.random.default_rng(np.random.SeedSequence([seed, epoch, _TAG])).random(steps)
    key = (j + u) / n[cell]
    return cell[np.lexsort((cell, key))]


def lane_steps(total: int, lane: int, lanes: int) -> range:
    """The global steps a lane (DataLoader worker) makes."""
    return range(lane, total, lanes)
