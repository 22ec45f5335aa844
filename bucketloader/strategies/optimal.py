"""Exact minimum-padding boundaries: a k-segmentation DP answered by lower envelopes.

NOTE [ The hull DP ]
With distinct values ``v_0 < … < v_{U-1}``, counts ``n``, ``f(v) = v`` (linear) or ``v²``
(quadratic), prefix counts ``C_j`` and prefix sums ``S_j = Σ_{t<j} f(v_t)·n_t``, the cheapest way
to cover the first ``j`` values with at most ``t`` buckets is

    D_t[j] = min_{i<=j} D_{t-1}[i] + f(v_{j-1})·(C_j - C_i) - (S_j - S_i)

(``i = j`` is the empty bucket, so "at most" needs no extra work). With ``y_i = D_{t-1}[i] + S_i``
the term to minimise is ``y_i - f(v_{j-1})·C_i``: the lower convex hull of the points
``(C_i, y_i)`` queried at slope ``f(v_{j-1})``. One hull per layer answers every ``j`` at once.
The minimiser never has ``i > j``: for such ``i`` the term exceeds the one at ``i = j`` by
``D_{t-1}[i] - D_{t-1}[j] + Σ_{j<=t<i} n_t·(f(v_t) - f(v_{j-1})) > 0`` (``D`` is non-decreasing),
so the unconstrained hull is exact. The last layer needs only ``j = U`` (one O(U) scan), and the
DP stops early once the padding reaches zero. Arithmetic is exact (see :mod:`._hull`).

``pad_to_multiple_of`` is handled before any strategy runs
(:func:`bucketloader.solve.solve_boundaries` rounds the histogram up): ``b - L = (b - ceil_m(L)) +
(ceil_m(L) - L)`` with the second term fixed, so the DP stays exact (likewise ``b² - L²``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bucketloader._types import COSTS
from bucketloader._validation import check_choice
from bucketloader.histogram import LengthHistogram
from bucketloader.strategies._hull import envelope_argmin
from bucketloader.strategies._registry import StrategyResult, register_strategy, strategy_input


@register_strategy("optimal")
def optimal(hist: LengthHistogram, num_buckets: int, *, cost: str = "linear") -> StrategyResult:
    """Exact minimum total padding for at most ``num_buckets`` buckets.

    Args:
        hist: the length histogram (raw lengths are accepted too).
        num_buckets: at most this many buckets; more than the distinct lengths gives zero padding.
        cost: ``"linear"`` (pad elements, ``b - L``) or ``"quadratic"`` (``b² - L²``).

    Returns:
        ``StrategyResult`` with ``status="optimal"``, ``gap=0.0`` and ``info["objective"]``, the
        minimum padding cost (an exact int).

    Example:
        >>> r = optimal(LengthHistogram.from_lengths([1, 2, 9, 10]), 2)
        >>> r.boundaries.tolist(), r.info["objective"]
        ([2, 10], 2)
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    cost = check_choice("cost", cost, COSTS)
    picks, objective, info = solve_segmentation(hist.values, hist.counts, num_buckets, cost)
    boundaries = hist.values[picks].copy()
    return StrategyResult(
        boundaries, status="optimal", gap=0.0, info={"objective": objective, **info}
    )


def solve_segmentation(
    values: np.ndarray, counts: np.ndarray, k: int, cost: str
) -> tuple[np.ndarray, int, dict[str, Any]]:
    """Indices (into ``values``) of optimal boundaries, the exact objective, and solver details.

    Example:
        >>> picks, obj, _ = solve_segmentation(np.array([1, 2, 9, 10]), np.array([1, 1, 1, 1]),
        ...                                    2, "linear")
        >>> picks.tolist(), obj
        ([1, 3], 2)
    """
    u = int(values.size)
    if k >= u:
        return np.arange(u), 0, {"num_values": u, "layers": 0, "arithmetic": "none"}
    vmax, total = int(values[-1]), int(counts.sum())
    fmax = vmax * vmax if cost == "quadratic" else vmax
    if k == 1:
        power = 2 if cost == "quadratic" else 1
        real = sum(a**power * b for a, b in zip(values.tolist(), counts.tolist(), strict=True))
        pad = fmax * total - real
        return np.array([u - 1]), pad, {"num_values": u, "layers": 1, "arithmetic": "python-int"}
    # every DP quantity is an integer below 4·N·f(max): exact in float64 below 2**53 (no
    # conversions at all), in int64 below 2**62, else in Python ints (see NOTE in _hull)
    bound = 4 * total * max(fmax, 1)
    dtype: Any = np.float64 if bound < 2**53 else np.int64 if bound < 2**62 else object
    arithmetic = {np.float64: "float64-exact", np.int64: "int64", object: "python-int"}[dtype]
    v = values.astype(dtype)
    f = v * v if cost == "quadratic" else v
    c = np.concatenate([np.zeros(1, dtype), np.cumsum(counts.astype(dtype))])
    if dtype is object:
        s_all = sum(f * counts.astype(object))
    else:
        s_all = int(np.dot(f, counts.astype(dtype)))
    # layer 1: y[j] = D_1[j] + S_j = f(v_{j-1})·C_j
    y = np.concatenate([np.zeros(1, dtype), f * c[1:]])
    fc = f * c[1:]  # f(v_{j-1})·C_j, reused by every layer
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    done = False
    for _ in range(2, k):
        vertices, switch = envelope_argmin(c, y, f)
        layers.append((vertices, switch))
        runs = np.diff(np.concatenate([[0], switch, [u]]))
        # y_t[j] = y[a] + f_j·(C_j - C_a) with a piecewise constant: repeat per run, no gathers
        nxt = np.empty_like(y)
        nxt[0] = 0
        nxt[1:] = np.repeat(c[vertices], runs)
        nxt[1:] *= f
        np.subtract(fc, nxt[1:], out=nxt[1:])
        nxt[1:] += np.repeat(y[vertices], runs)
        y = nxt
        if y[u] == s_all:  # D_t[U] = 0: no padding left to remove
            done = True
            break
    if done:
        objective, first = 0, None
    else:
        # last layer, only j = U: min_i y[i] + f_max·(C_U - C_i) - S_U
        totals = y + f[-1] * (c[-1] - c) - s_all
        first = int(np.argmin(totals))
        objective = int(totals[first])
    picks = _backtrack(layers, first, u)
    info = {
        "num_values": u,
        "layers": len(layers) + (1 if done else 2),
        "arithmetic": arithmetic,
        "max_hull_size": max((len(vt) for vt, _ in layers), default=0),
    }
    return picks, objective, info


def _backtrack(
    layers: list[tuple[np.ndarray, np.ndarray]], first: int | None, u: int
) -> np.ndarray:
    """Boundary indices from the stored per-layer argmins (``first``: the last layer's pick)."""
    picks = []
    j = u
    if first is not None:  # the last layer covered values first..u-1
        if first < j:
            picks.append(j - 1)
        j = first
    for vertices, switch in reversed(layers):
        if j == 0:
            break
        i = int(vertices[np.searchsorted(switch, j - 1, side="right")])
        if i < j:
            picks.append(j - 1)
        j = i
    if j > 0:  # layer 1: one bucket over values 0..j-1
        picks.append(j - 1)
    return np.array(sorted(picks), dtype=np.int64)
