"""Dense O(k·U²) segmentation DP over an explicit arc set (private; used by ``lp`` for bounds).

Node ``j`` (0..U) means "the first ``j`` distinct values are covered"; arc ``i -> j`` (``i < j``) is
one bucket holding values ``i..j-1`` padded to ``v[j-1]``. Costs are float64 (``inf`` = no arc):
good for bounds and incumbents; exact objectives are always recomputed with integer arithmetic
by :func:`bucketloader.boundaries.padding_cost`.
"""

from __future__ import annotations

import numpy as np


def arc_costs(values: np.ndarray, counts: np.ndarray, cost: str, min_count: int = 0) -> np.ndarray:
    """``(U+1, U+1)`` matrix of bucket costs; ``inf`` where ``i >= j`` or the bucket is too small.

    Example:
        >>> arc_costs(np.array([1, 3]), np.array([2, 1]), "linear")[0].tolist()
        [inf, 0.0, 4.0]
    """
    v = values.astype(np.float64)
    f = v * v if cost == "quadratic" else v
    c = np.concatenate([[0.0], np.cumsum(counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(f * counts)])
    w = np.full((v.size + 1, v.size + 1), np.inf)
    w[:, 1:] = f[None, :] * (c[None, 1:] - c[:, None]) - (s[None, 1:] - s[:, None])
    i, j = np.indices(w.shape)
    w[(i >= j) | (c[None, :] - c[:, None] < min_count)] = np.inf
    return w


def forward(w: np.ndarray, k: int) -> np.ndarray:
    """``F[t, j]``: least cost of covering the first ``j`` values with at most ``t`` buckets.

    Example:
        >>> forward(arc_costs(np.array([1, 3]), np.array([2, 1]), "linear"), 2)[:, -1].tolist()
        [inf, 4.0, 0.0]
    """
    out = np.full((k + 1, w.shape[0]), np.inf)
    out[0, 0] = 0.0
    for t in range(1, k + 1):
        out[t] = np.minimum(out[t - 1], (out[t - 1][:, None] + w).min(axis=0))
    return out


def backward(w: np.ndarray, k: int) -> np.ndarray:
    """``B[t, i]``: least cost of covering values ``i..U-1`` with at most ``t`` buckets.

    Example:
        >>> backward(arc_costs(np.array([1, 3]), np.array([2, 1]), "linear"), 2)[:, 0].tolist()
        [inf, 4.0, 0.0]
    """
    out = np.full((k + 1, w.shape[0]), np.inf)
    out[0, -1] = 0.0
    for t in range(1, k + 1):
        out[t] = np.minimum(out[t - 1], (w + out[t - 1][None, :]).min(axis=1))
    return out


def arc_lower_bounds(w: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> np.ndarray:
    """Least cost of any solution with at most ``k`` buckets that uses arc ``i -> j``.

    ``fwd`` and ``bwd`` come from :func:`forward` and :func:`backward` with the same ``k``.
    """
    k = fwd.shape[0] - 1
    best = np.full(w.shape, np.inf)
    for t in range(k):  # t buckets before the arc, at most k - 1 - t after it
        np.minimum(best, fwd[t][:, None] + bwd[k - 1 - t][None, :], out=best)
    return best + w


def best_path(w: np.ndarray, fwd: np.ndarray) -> list[tuple[int, int]]:
    """Arcs of a least-cost path ``0 -> U`` with at most ``k`` arcs (``fwd`` from forward)."""
    k = fwd.shape[0] - 1
    j, t, arcs = w.shape[0] - 1, k, []
    while j > 0:
        while t > 1 and fwd[t - 1][j] <= fwd[t][j]:
            t -= 1  # fewer buckets do as well
        i = int(np.argmin(fwd[t - 1] + w[:, j]))
        arcs.append((i, j))
        j, t = i, t - 1
    return arcs[::-1]
