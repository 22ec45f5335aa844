"""Fast O(U) heuristics on the length histogram: percentile, equal_mass, linear, geometric,
pad_to_max. None of them minimises padding; the exact ``"optimal"`` strategy is their oracle.
"""

from __future__ import annotations

import numpy as np

from bucketloader.histogram import LengthHistogram
from bucketloader.strategies._registry import register_strategy


@register_strategy("percentile")
def percentile(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """The wav2vec / fairseq rule: unique lower percentiles at ``linspace(0, 100, k + 1)[1:]``.

    Example:
        >>> percentile(LengthHistogram.from_lengths(range(1, 101)), 4).tolist()
        [25, 50, 75, 100]
    """
    return np.unique(hist.quantile(np.linspace(0.0, 1.0, num_buckets + 1)[1:]))


@register_strategy("equal_mass")
def equal_mass(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Equal total length per bucket (Lhotse's duration-bucket rule).

    Boundary ``j`` is the first length at which the running total of lengths reaches
    ``j / k`` of the grand total.

    Example:
        >>> equal_mass(LengthHistogram.from_lengths([1] * 8 + [8]), 2).tolist()
        [1, 8]
    """
    mass = np.cumsum(hist.values * hist.counts)
    if mass[-1] == 0:
        return hist.values[-1:].copy()
    targets = mass[-1] * np.arange(1, num_buckets) / num_buckets
    idx = np.searchsorted(mass, targets, side="left")
    return np.unique(np.append(hist.values[idx], hist.max))


@register_strategy("linear")
def linear(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Constant-width buckets between the shortest and the longest length.

    Example:
        >>> linear(LengthHistogram.from_lengths([0, 100]), 4).tolist()
        [25, 50, 75, 100]
    """
    lo, hi = hist.min, hist.max
    edges = np.ceil(lo + (hi - lo) * np.arange(1, num_buckets + 1) / num_buckets)
    return np.unique(np.minimum(edges.astype(np.int64), hi))


@register_strategy("geometric")
def geometric(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """Boundaries in geometric progression from the shortest (at least 1) to the longest length.

    Example:
        >>> geometric(LengthHistogram.from_lengths([1, 1000]), 3).tolist()
        [10, 100, 1000]
    """
    lo, hi = max(hist.min, 1), max(hist.max, 1)
    edges = np.ceil(np.round(lo * (hi / lo) ** (np.arange(1, num_buckets + 1) / num_buckets), 9))
    out = np.unique(np.minimum(edges.astype(np.int64), hi))
    return out if hist.max > 0 else np.zeros(1, dtype=np.int64)


@register_strategy("pad_to_max")
def pad_to_max(hist: LengthHistogram, num_buckets: int) -> np.ndarray:
    """One bucket: everything padded to the longest length.

    Example:
        >>> pad_to_max(LengthHistogram.from_lengths([3, 7]), 8).tolist()
        [7]
    """
    return hist.values[-1:].copy()
