"""Exact minimum-padding boundaries by dynamic programming (temporary O(k·U²) version)."""

from __future__ import annotations

import numpy as np

from bucketloader.histogram import LengthHistogram
from bucketloader.strategies._registry import StrategyResult, register_strategy


@register_strategy("optimal")
def optimal(hist: LengthHistogram, num_buckets: int, *, cost: str = "linear") -> StrategyResult:
    """Exact minimum total padding for at most ``num_buckets`` buckets.

    Example:
        >>> optimal(LengthHistogram.from_lengths([1, 2, 9, 10]), 2).boundaries.tolist()
        [2, 10]
    """
    v = hist.values.astype(np.float64)
    f = v if cost == "linear" else v * v
    c = np.concatenate([[0.0], np.cumsum(hist.counts)])
    g = np.concatenate([[0.0], np.cumsum(f * hist.counts)])
    u = v.size
    k = min(num_buckets, u)
    j = np.arange(u)
    i = np.arange(u)
    # seg[i, j]: cost of one bucket holding values i..j (inf if i > j)
    seg = f[None, :] * (c[None, j + 1] - c[i, None]) - (g[None, j + 1] - g[i, None])
    seg[i[:, None] > j[None, :]] = np.inf
    d = seg[0].copy()
    arg = [np.zeros(u, dtype=np.int64)]
    for _ in range(1, k):
        cand = np.concatenate([[np.inf], d[:-1]])[:, None] + seg
        cand = np.minimum(cand, d[None, :] + np.where(i[:, None] == j[None, :], 0.0, np.inf))
        a = np.argmin(cand, axis=0)
        d = cand[a, j]
        arg.append(a)
    out, jj = [], u - 1
    for a in reversed(arg):
        out.append(jj)
        jj = int(a[jj]) - 1
        if jj < 0:
            break
    return StrategyResult(np.unique(hist.values[out]), status="optimal", gap=0.0)
