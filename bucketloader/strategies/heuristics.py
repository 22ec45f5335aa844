"""Fast O(U) heuristics on the length histogram: percentile, equal_mass, linear, geometric,
pad_to_max. None of them minimises padding; the exact ``"optimal"`` strategy is their oracle.

NOTE [ Exact arithmetic and huge shape budgets ]
Lengths go up to ``2**62 - 1`` (:data:`bucketloader._validation.MAX_LENGTH`), where float64 no
longer holds every integer, so the rules that define a boundary by integer arithmetic compute it
in integers: ``linear`` and ``equal_mass`` exactly (``int64`` when every product fits, Python ints
otherwise), ``percentile`` by positions in the sorted lengths. ``geometric`` is a float rule by
nature; its last boundary is the longest length exactly. Up to ``2**16`` buckets a rule returns
every boundary it defines; past that (a budget far above the number of distinct lengths) it
returns only the boundaries that hold a length, which is the same answer once
:func:`~bucketloader.compute_boundaries` drops empty buckets, without allocating ``num_buckets``
of anything.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from bucketloader.histogram import LengthHistogram
from bucketloader.strategies._registry import register_strategy, strategy_input

#: Up to this many buckets a rule computes all its boundaries; past it, only occupied ones.
_DENSE_MAX = 1 << 16
_INT64_SAFE = 2**62


@register_strategy("percentile")
def percentile(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """The wav2vec / fairseq rule: unique lower percentiles at ``linspace(0, 100, k + 1)[1:]``.

    Example:
        >>> percentile(LengthHistogram.from_lengths(range(1, 101)), 4).tolist()
        [25, 50, 75, 100]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    n = hist.num_samples
    if num_buckets >= n:  # the positions i·(n-1)/k, i = 1..k, hit every sample
        return hist.values.copy()
    if num_buckets <= _DENSE_MAX:
        return np.unique(hist.quantile(np.linspace(0.0, 1.0, num_buckets + 1)[1:]))
    # value t holds sorted positions lo..hi-1; it is a boundary iff the first i >= 1 whose
    # position i·(n-1)//k reaches lo is <= k and its position is still below hi
    k, m = num_buckets, n - 1
    keep = []
    lo = 0
    for t, hi in enumerate(np.cumsum(hist.counts).tolist()):
        i = max(1, -(-lo * k // m))
        if i <= k and i * m // k < hi:
            keep.append(t)
        lo = hi
    return hist.values[keep]


@register_strategy("equal_mass")
def equal_mass(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Equal total length per bucket (the idea of Lhotse's duration bins).

    Boundary ``j`` is the first length at which the running total of lengths reaches
    ``j / k`` of the grand total. Lhotse's ``estimate_duration_buckets`` restarts its total at
    each bucket and starts the next bucket at the length after the share is exceeded, so its
    edges can sit one length lower, or drift on a long tail: docs/coming-from.md says where.

    Example:
        >>> equal_mass(LengthHistogram.from_lengths([1] * 8 + [8]), 2).tolist()
        [1, 8]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    k = num_buckets
    if hist.total == 0:
        return hist.values[-1:].copy()
    total = hist.total
    if total * min(k, _DENSE_MAX) < _INT64_SAFE:  # exact in int64
        mass = np.cumsum(hist.values * hist.counts)
        if k <= _DENSE_MAX:
            # first t with mass_t >= j·total / k  <=>  mass_t·k >= j·total
            idx = np.searchsorted(mass * k, np.arange(1, k, dtype=np.int64) * total, side="left")
            return np.unique(np.append(hist.values[idx], hist.max))
    mass_list = np.cumsum(np.asarray(hist.values, dtype=object) * hist.counts).tolist()
    if k <= _DENSE_MAX:
        scaled = [m * k for m in mass_list]
        picks = [bisect.bisect_left(scaled, j * total) for j in range(1, k)]
        return np.unique(np.append(hist.values[picks], hist.max))
    keep = []  # value t is a boundary iff some j in 1..k-1 has mass_{t-1}·k < j·total <= mass_t·k
    prev = 0
    for t, m in enumerate(mass_list):
        j = prev * k // total + 1
        if j <= k - 1 and j * total <= m * k:
            keep.append(t)
        prev = m
    return hist.values[np.unique(np.append(keep, hist.num_values - 1))]


@register_strategy("linear")
def linear(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Constant-width buckets between the shortest and the longest length (exact integers).

    Boundary ``i`` is ``ceil(lo + (hi - lo) · i / k)`` for ``i = 1..k``.

    Example:
        >>> linear(LengthHistogram.from_lengths([0, 100]), 4).tolist()
        [25, 50, 75, 100]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    lo, hi, k = hist.min, hist.max, num_buckets
    span = hi - lo
    if span == 0:
        return hist.values[-1:].copy()
    if k <= _DENSE_MAX:
        q, r = divmod(span, k)  # span·i/k = q·i + r·i/k, with r·i < k² <= 2**32
        steps = np.arange(1, k + 1, dtype=np.int64)
        return np.unique(lo + q * steps + (-(-(r * steps) // k)))
    edges = set()
    for v in hist.values.tolist():  # only the edge of each length's bucket: the first i
        i = max(1, (v - lo - 1) * k // span + 1)  # with ceil(span·i/k) >= v - lo
        edges.add(lo + -(-span * i // k))
    return np.array(sorted(edges), dtype=np.int64)


@register_strategy("geometric")
def geometric(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Boundaries in geometric progression from the shortest (at least 1) to the longest length.

    Computed in float64 (the rule is a real-valued progression); the last boundary is the
    longest length exactly, so every length is covered at any magnitude.

    Example:
        >>> geometric(LengthHistogram.from_lengths([1, 1000]), 3).tolist()
        [10, 100, 1000]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    if hist.max == 0:
        return np.zeros(1, dtype=np.int64)
    lo, hi, k = max(hist.min, 1), hist.max, num_buckets
    if lo == hi:
        return np.array([hi], dtype=np.int64)
    ratio = math.log(hi / lo)

    def edge(i: np.ndarray) -> np.ndarray:
        return np.ceil(np.round(lo * (hi / lo) ** (i / k), 9))

    if k <= _DENSE_MAX:
        out = _clamp(edge(np.arange(1, k + 1)), hi)
        out[-1] = hi  # exact: float64 cannot hold every length past 2**53
        return np.unique(out)
    # only the edge of each length's bucket: the first i with edge(i) >= v
    v = hist.values.astype(np.float64)
    guess = np.floor(k * np.log(np.maximum(v - 1, lo) / lo) / ratio) + 1
    i = np.clip(np.where(v - 1 >= lo, guess, 1), 1, k)
    below = edge(np.maximum(i - 1, 1))
    edges = np.where((i > 1) & (below >= v), below, edge(i))
    out = _clamp(edges, hi)
    return np.unique(np.maximum(out, hist.values))  # exact cover despite float rounding


def _clamp(edges: np.ndarray, hi: int) -> np.ndarray:
    """Float edges as ints no larger than ``hi`` (``float(hi)`` may round above it)."""
    return np.minimum(np.minimum(edges, float(hi)).astype(np.int64), hi)


@register_strategy("pad_to_max")
def pad_to_max(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """One bucket: everything padded to the longest length.

    Example:
        >>> pad_to_max(LengthHistogram.from_lengths([3, 7]), 8).tolist()
        [7]
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    return hist.values[-1:].copy()
