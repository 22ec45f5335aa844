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
  over ranks by one ``all_reduce`` of ``K`` ints after a checkpoint (one ``all_reduce`` of a code
  per rank; collectives only at construction, in the main process): a rank that cannot count its
  head (a refused length, a failing ``length_fn``) raises its own error and tells the others at
  that checkpoint, and every other rank raises one naming it and its error, instead of waiting
  for it in a later collective (NOTE [ Checkpoints before a collective ] in
  :mod:`bucketloader._dist`). The top cell always gets a share,
  so no sample is ever without a cell to leave in.
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
  (``"fill"``, ``repeated``): of the samples the lane handed out last in ``c`` and the cells it
  covers, then of its own (NOTE [ What a stream's fill repeats ] in
  :mod:`bucketloader.stream.resume`). A batch that would hold no sample reads on past
  the capacity until one fits. Every batch is a :class:`~bucketloader.plan.PlannedBatch` that
  carries the step's shape, so the collator pads to it even when every sample came from a
  shorter cell. The capacity bounds a lane's memory, and its price falls on a cell with a small
  share and a large batch, early in a pass: LibriSpeech in 8 ranks' shards with ``max_tokens=
  16000`` (benchmarks/results/fill_repeats.md, "most" 3), rank 4's second step is the shortest
  cell's, ``B_c = 62``, but the 442 buffered plus 256 shuffled samples read by then hold 28 of
  it (6.5 % of the samples): 34 copies top the batch up, six samples three times (session 25).
  Filling it would take about 950 reads, a capacity twice as large for every lane and cell.
* **A shard that runs dry, or has nothing short enough** (no sample left that fits the step):
  the step still happens, as padding only: one stand-in sample (a sample the lane saw that fits
  the bucket, else its first sample cut to it) that the collator turns into masked rows
  (``num_real=0``: ``sample_mask`` False, zero attention), so the rank adds nothing to the
  gradients; under ``"fill"`` the lane repeats samples it handed out last in ``c`` or a cell
  ``c`` covers instead, when it has some (the same NOTE).
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

from collections.abc import Iterator

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


#: Steps a schedule is built in at a time: its memory is about 50 bytes a step of one chunk, not
#: of ``steps_per_epoch`` (NOTE [ A schedule in chunks ]).
SCHEDULE_CHUNK = 1 << 16


def schedule_chunks(
    shares: np.ndarray, steps: int, seed: int, epoch: int, chunk: int = SCHEDULE_CHUNK
) -> Iterator[np.ndarray]:
    """Cell of every step of ``epoch``, in order, about ``chunk`` steps at a time (the same on
    every rank; NOTE [ A stream split over ranks ]).

    NOTE [ A schedule in chunks ]
    Cell ``c`` gets ``n_c`` steps (largest remainders) with keys ``(j + u) / n_c``, ``j < n_c``,
    one uniform ``u`` per step drawn in cell order (cell 0's ``n_0``, then cell 1's, ...) from
    one PCG64 stream; the steps go in order of key, ties to the lower cell. Sorting all ``T``
    keys at once takes ~50 bytes a step (5 GB at ``steps_per_epoch=10**8``), so the keys are
    taken in windows ``[x0, x1)`` of ``[0, 1]``, each holding about ``chunk`` steps: cell ``c``'s
    keys in a window have ``j < ceil(x1 * n_c) + 2`` (``key >= j / n_c`` up to one rounding), so
    each cell reads its draws in order, from its own copy of the stream advanced to its first
    draw (PCG64 draws one 64-bit word per double), and keeps the keys past ``x1`` for the next
    window. Each window is sorted by (key, cell) alone; windows partition the keys, so the
    chunks joined are exactly the one sort's order (tested against it).

    Example:
        >>> parts = list(schedule_chunks(np.array([0.75, 0.25]), 8, seed=0, epoch=0, chunk=3))
        >>> [p.size for p in parts], np.bincount(np.concatenate(parts)).tolist()
        ([3, 2, 3], [6, 2])
    """
    n = apportion(steps, shares)
    start = np.cumsum(n) - n
    root = np.random.PCG64(np.random.SeedSequence([seed, epoch, _TAG]))
    cells = [int(c) for c in np.flatnonzero(n)]
    draws = {}
    for c in cells:
        bits = np.random.PCG64()
        bits.state = root.state
        draws[c] = np.random.Generator(bits.advance(int(start[c])))
    read = dict.fromkeys(cells, 0)  # draws taken per cell
    keep = {c: np.zeros(0) for c in cells}  # keys read, past the last window
    windows = max(1, -(-steps // max(1, chunk)))
    for w in range(1, windows + 1):
        last = w == windows
        x1 = w / windows
        keys, owners = [], []
        for c in cells:
            size = int(n[c])
            stop = size if last else min(size, int(np.ceil(x1 * size)) + 2)
            got = keep[c]
            if stop > read[c]:
                j = np.arange(read[c], stop)
                fresh = (j + draws[c].random(stop - read[c])) / size
                got = np.concatenate((got, fresh)) if got.size else fresh
                read[c] = stop
            if last:
                now = got
            else:
                now, keep[c] = got[got < x1], got[got >= x1]
            keys.append(now)
            owners.append(np.full(now.size, c, dtype=np.int64))
        key, cell = np.concatenate(keys), np.concatenate(owners)
        if key.size:
            yield cell[np.lexsort((cell, key))]


def lane_cells(
    shares: np.ndarray, steps: int, seed: int, epoch: int, lane: int, lanes: int, done: int
) -> Iterator[int]:
    """The cells of a lane's steps (:func:`lane_steps`) after its first ``done``, in order."""
    first = lane + lanes * done  # the global step the lane makes next
    offset = 0
    for part in schedule_chunks(shares, steps, seed, epoch):
        end = offset + part.size
        if end > first:
            yield from part[first - offset :: lanes].tolist()
            first += -(-(end - first) // lanes) * lanes
        offset = end


def lane_steps(total: int, lane: int, lanes: int) -> range:
    """The global steps a lane (DataLoader worker) makes."""
    return range(lane, total, lanes)
