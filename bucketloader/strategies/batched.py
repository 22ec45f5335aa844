"""Boundaries and batch sizes chosen together: the fewest padded elements of the planned batches.

NOTE [ Batched boundaries ]
``"optimal"`` minimises the padding of samples to their bucket's boundary. Under a token budget
the batches add *filler rows*: a bucket of ``n`` samples at padded length ``b`` has
``B = min(max_batch_size, max_tokens // b)`` rows at most (``multiple_of`` rounding as in NOTE
[ The batch-size rule ]), needs ``m = ceil(n / (R·B))`` steps over ``R`` ranks and is planned at
the even ``B' = ceil(n / (R·m))`` rows (NOTE [ Even batches ]), so it costs
``R·m·B'·b - sum(L)`` padded elements: its boundary padding plus ``(R·m·B' - n)·b`` of filler.
``"batched"`` minimises that sum over at most ``k`` buckets, i.e. the padded elements of one
epoch's even batches, exactly what a ``BucketSampler(max_tokens=TokenBudget(...,
promote=False))`` will run (for ``R`` ranks).

It does not model promotion of leftovers (NOTE [ Promotion of leftovers ] in
:mod:`bucketloader.plan.promote`), which a sampler does by default for ``max_tokens`` with
``last_batch="pad"``: promotion fills spare rows with samples of shorter buckets, so the padded
elements that run are at most ``info["padded"]`` (promotion never adds any), but the filler this
objective trades boundary padding against is mostly gone anyway, and ``"optimal"`` boundaries
are then usually as good (LibriSpeech k=16 in ``docs/padding.md``: 3.14% against 3.16%). Use
``"batched"`` with ``promote=False``; with promotion, prefer ``"optimal"``. The promotion
schedule couples the buckets (a bucket's promoted samples depend on every longer bucket's spare
rows), so it does not fit this DP's per-bucket cost.
Moving a boundary by a few distinct lengths can make a bucket's count fill its ``m`` batches
exactly, so a little boundary padding buys back the filler: on Common Voice at k=252 shapes the
planned padding falls from 0.34% (``"optimal"`` boundaries, even rows) to 0.16%.

The cost of a bucket is not Monge (the ceilings), so the hull DP of ``"optimal"`` does not apply.
With ``U`` distinct lengths the exact DP over every ``(first, last)`` pair costs ``O(k·U²)``; it
runs when ``k·U² <= 3·10⁸`` and ``U <= 4096`` (``status="optimal"``). Otherwise the ``"optimal"``
boundaries are refined by coordinate descent: each boundary moves to the best position within
64 distinct lengths of itself, given its neighbours, until no move lowers the total
(``status="heuristic"``; never worse than the ``"optimal"`` boundaries with even rows).
"""

from __future__ import annotations

import numpy as np

from bucketloader._validation import MAX_REPLICAS, check_int
from bucketloader.histogram import LengthHistogram
from bucketloader.strategies._registry import StrategyResult, register_strategy, strategy_input
from bucketloader.strategies.optimal import optimal, solve_segmentation

#: The exact DP runs up to this many ``k·U²`` cell updates (and ``U <= _MAX_EXACT_VALUES``).
_MAX_EXACT_WORK = 300_000_000
_MAX_EXACT_VALUES = 4096
_WINDOW = 64
_MAX_PASSES = 50


@register_strategy("batched")
def batched(
    hist: LengthHistogram,
    num_buckets: int,
    *,
    max_tokens: int | None = None,
    max_batch_size: int | None = None,
    multiple_of: int = 1,
    num_replicas: int = 1,
) -> StrategyResult:
    """Boundaries with the fewest padded elements in even batches under ``max_tokens``.

    See NOTE [ Batched boundaries ]. A :class:`~bucketloader.BucketSampler` (or ``BucketSpec``)
    with ``max_tokens=`` passes its budget to this strategy itself (for one rank):
    ``BucketSampler(lengths, strategy="batched", max_tokens=TokenBudget(16384,
    promote=False))``. Promotion of leftovers (the sampler's default) is not modelled: with it,
    what runs pads at most ``info["padded"]``, and ``"optimal"`` is usually as good.

    Args:
        hist: the length histogram (raw lengths are accepted too).
        num_buckets: at most this many buckets.
        max_tokens: the token budget per batch; without one there are no batches to plan and
            this is ``"optimal"``.
        max_batch_size: at most this many rows per batch.
        multiple_of: rows rounded as in ``TokenBudget(multiple_of=...)``.
        num_replicas: ranks the batches are split over (a step is one batch per rank).

    Returns:
        ``StrategyResult`` with ``info["padded"]``, the planned padded elements of one epoch.

    Example:
        >>> lengths = [1, 1, 1, 2, 5, 6, 8]
        >>> r = batched(lengths, 2, max_tokens=20)  # 2 batches of (2, 8): no filler row
        >>> r.boundaries.tolist(), r.info["padded"]
        ([1, 8], 11)
        >>> from bucketloader import compute_boundaries
        >>> compute_boundaries(lengths, 2).tolist()  # less boundary padding, one (8-long) filler
        [2, 8]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    if max_tokens is None:  # no batches to plan: the least boundary padding
        return optimal(hist, num_buckets)
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    if max_batch_size is not None:
        max_batch_size = check_int("max_batch_size", max_batch_size, minimum=1)
    multiple_of = check_int("multiple_of", multiple_of, minimum=1)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
    values = hist.values.astype(np.int64)
    counts = hist.counts.astype(np.int64)
    cost = _BucketCost(values, counts, max_tokens, max_batch_size, multiple_of, num_replicas)
    u = values.size
    k = min(num_buckets, u)  # one bucket per value need not be best: filler rows count too
    if u <= _MAX_EXACT_VALUES and k * u * u <= _MAX_EXACT_WORK:
        ends = _exact(cost, k)
        status = "optimal"
    else:
        start, _, _ = solve_segmentation(values, counts, num_buckets, "linear")
        ends = _descend(cost, np.asarray(start, dtype=np.int64))
        status = "heuristic"
    starts = np.concatenate([[0], ends[:-1] + 1])
    padded = int(cost(starts, ends).sum())
    return StrategyResult(
        values[ends].copy(), status=status, info={"padded": padded, "num_values": int(u)}
    )


class _BucketCost:
    """Padded minus real elements of the bucket holding distinct values ``lo..hi`` (inclusive),
    planned in even batches (NOTE [ Batched boundaries ]); vectorised over ``lo`` / ``hi``."""

    def __init__(
        self,
        values: np.ndarray,
        counts: np.ndarray,
        max_tokens: int,
        max_batch_size: int | None,
        multiple_of: int,
        reps: int,
    ) -> None:
        self.values = values
        self.c = np.concatenate([[0], np.cumsum(counts)])
        self.s = np.concatenate([[0], np.cumsum(counts * values)])
        rows = max_tokens // np.maximum(values, 1)  # an empty row counts as one token
        rows = np.maximum(rows, 1)  # oversize: batches of one (the plan names the policy)
        if max_batch_size is not None:
            rows = np.minimum(rows, max_batch_size)
        if multiple_of > 1:
            rows = np.where(rows >= multiple_of, rows - rows % multiple_of, rows)
        self.rows = rows
        self.multiple_of = multiple_of
        self.reps = reps

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        n = self.c[hi + 1] - self.c[lo]
        b = self.values[hi]
        full = self.rows[hi]
        per = full * self.reps
        m = np.maximum(-(-n // per), 1)
        even = -(-n // (m * self.reps))
        if self.multiple_of > 1:
            up = -(-even // self.multiple_of) * self.multiple_of
            even = np.where(full % self.multiple_of == 0, np.minimum(up, full), even)
        return self.reps * m * even * b - (self.s[hi + 1] - self.s[lo])


def _exact(cost: _BucketCost, k: int) -> np.ndarray:
    """Last value index of each bucket of the exact minimum (O(k·U²), one ``(U, U)`` table)."""
    u = cost.values.size
    lo, hi = np.triu_indices(u)
    table = np.full((u, u), np.inf)
    table[lo, hi] = cost(lo, hi)
    best = table[0].copy()  # one bucket over values 0..j
    picks = []
    for _ in range(1, k):
        before = np.concatenate([[np.inf], best[:-1]])  # best over values 0..i-1
        total = before[:, None] + table
        arg = np.argmin(total, axis=0)
        cur = total[arg, np.arange(u)]
        keep = best <= cur  # fewer buckets are as good: "at most k"
        picks.append(np.where(keep, -1, arg))
        best = np.where(keep, best, cur)
    ends = [u - 1]
    j = u - 1
    for arg in reversed(picks):  # layer t: the last bucket starts at arg[j] (-1: t buckets do)
        i = int(arg[j])
        if i < 0:
            continue
        ends.append(i - 1)
        j = i - 1
    return np.array(sorted(ends), dtype=np.int64)


def _descend(cost: _BucketCost, ends: np.ndarray) -> np.ndarray:
    """Coordinate descent on the boundaries (NOTE [ Batched boundaries ])."""
    ends = ends.copy()
    for _ in range(_MAX_PASSES):
        moved = False
        for t in range(ends.size - 1):
            lo = 0 if t == 0 else int(ends[t - 1]) + 1
            nxt = int(ends[t + 1])
            cand = np.arange(
                max(lo, int(ends[t]) - _WINDOW), min(nxt - 1, int(ends[t]) + _WINDOW) + 1
            )
            total = cost(np.full(cand.size, lo), cand) + cost(cand + 1, np.full(cand.size, nxt))
            here = total[cand == ends[t]][0]
            pick = int(np.argmin(total))
            if total[pick] < here:
                ends[t] = cand[pick]
                moved = True
        if not moved:
            break
    return ends
