"""Exact lower-envelope machinery for the ``optimal`` DP (private).

NOTE [ Exactness of the hull DP ]
Every DP quantity is an integer: prefix counts ``C``, prefix sums ``S`` of ``f(v)·count`` and the
costs ``D``. The caller keeps them in ``int64`` when every product below fits in 62 bits and in
Python ints (``dtype=object``: slower, still exact) otherwise. Floats are only used to *guess*:

* hull pruning compares two slopes through a float cross product; any comparison whose float value
  lies within a proven rounding bound of zero is redone exactly with Python ints;
* the query index at which the optimum moves from one hull vertex to the next is guessed with a
  float ``searchsorted`` and then corrected with exact integer comparisons.

So every layer's minimum is exact, and the DP's optimum is exact, whatever the magnitudes.
"""

from __future__ import annotations

import numpy as np

#: Bound on the relative error of a float product of two exact integers (each rounded once on
#: conversion, once on multiplication): 3·2**-53, doubled for the subtraction, with margin.
_EPS = 2.0**-49
#: Conservative tolerance (relative to max |y|) of the float subsample filter in lower_hull.
_TOL = 2.0**-40
_SMALL = 4096
_MAX_PASSES = 64
_STRIDE = 32


def lower_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the strict lower convex hull of points with strictly increasing ``x``.

    Large inputs are first filtered against the hull of a strided subsample: its edges are chords
    between real points, so any point not strictly below them (up to a conservative float
    tolerance) cannot be a strict hull vertex. The few survivors go through :func:`_prune`.

    Example:
        >>> lower_hull(np.array([0, 1, 2, 3]), np.array([0, 5, 1, 3])).tolist()
        [0, 2, 3]
    """
    n = x.size
    if n <= _SMALL:
        return _prune(x, y)
    sample = np.append(np.arange(0, n - 1, _STRIDE), n - 1)
    top = sample[lower_hull(x[sample], y[sample])]
    fx = x.astype(np.float64, copy=False)
    fy = y.astype(np.float64, copy=False)
    chord = np.interp(fx, fx[top], fy[top])
    tol = _TOL * max(float(np.abs(fy).max()), 1.0)
    cand = np.flatnonzero(fy <= chord + tol)
    return cand[_prune(x[cand], y[cand])]


def _prune(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact strict lower hull by vectorised passes (then a monotone chain if passes drag on).

    Each pass removes every point lying on or above the chord of its current neighbours (such a
    point is never a strict hull vertex, so removing all of them at once is safe). On DP data the
    set shrinks geometrically; an adversarial chain that loses one point per pass is finished by
    Andrew's monotone chain in exact Python ints instead, so the worst case stays O(n) passes-free.
    """
    idx = np.arange(x.size)
    for _ in range(_MAX_PASSES):
        if idx.size < 3:
            return idx
        dx = np.diff(x)
        dy = np.diff(y)
        fx = dx.astype(np.float64, copy=False)
        fy = dy.astype(np.float64, copy=False)
        a = fy[:-1] * fx[1:]  # slope(left edge) >= slope(right edge)  <=>  a >= b
        b = fy[1:] * fx[:-1]
        remove = a >= b
        unsure = np.abs(a - b) <= _EPS * (np.abs(a) + np.abs(b))
        if unsure.any():
            for u in np.flatnonzero(unsure).tolist():
                remove[u] = int(dy[u]) * int(dx[u + 1]) >= int(dy[u + 1]) * int(dx[u])
        if not remove.any():
            break
        keep = np.ones(idx.size, dtype=bool)
        keep[1:-1] = ~remove
        idx, x, y = idx[keep], x[keep], y[keep]
    else:
        return idx[_monotone_chain(x.tolist(), y.tolist())]
    return idx


def _monotone_chain(xs: list[int], ys: list[int]) -> list[int]:
    """Andrew's monotone chain (lower hull, strict vertices) in exact Python ints."""
    hull: list[int] = []
    for k in range(len(xs)):
        xk, yk = int(xs[k]), int(ys[k])
        while len(hull) >= 2:
            i, j = hull[-2], hull[-1]
            # drop j if it is on or above the chord i -> k
            if (int(ys[j]) - int(ys[i])) * (xk - int(xs[j])) >= (yk - int(ys[j])) * (
                int(xs[j]) - int(xs[i])
            ):
                hull.pop()
            else:
                break
        hull.append(k)
    return hull


def envelope_argmin(x: np.ndarray, y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimise ``y[i] - s[j]·x[i]`` over ``i`` for every query slope ``s[j]``, exactly.

    ``x`` strictly increasing, ``s`` strictly increasing; exact integer arrays (``int64`` or
    ``object``). Returns ``(vertices, switch)``: the answer for query ``j`` is
    ``vertices[np.searchsorted(switch, j, side="right")]`` (``switch[e]`` is the first query at
    which vertex ``e + 1`` is strictly better than vertex ``e``), a compact form of the argmin.

    Example:
        >>> vertices, switch = envelope_argmin(
        ...     np.array([0, 1, 2]), np.array([0, 0, 3]), np.array([-1, 1, 5]))
        >>> vertices.tolist(), switch.tolist()
        ([0, 1, 2], [1, 2])
    """
    hull = lower_hull(x, y)
    if hull.size == 1:
        return hull, np.zeros(0, dtype=np.int64)
    dx = np.diff(x[hull])
    dy = np.diff(y[hull])
    # vertex e + 1 beats vertex e at query j  <=>  s[j]·dx[e] > dy[e]; monotone in j
    guess = np.searchsorted(
        s.astype(np.float64, copy=False),
        dy.astype(np.float64, copy=False) / dx.astype(np.float64, copy=False),
        side="right",
    )
    n = s.size
    while True:  # exact correction, usually zero or one step
        up = guess < n
        up[up] = s[guess[up]] * dx[up] <= dy[up]
        down = guess > 0
        down[down] = s[guess[down] - 1] * dx[down] > dy[down]
        if not (up.any() or down.any()):
            break
        guess = guess + up - down
    return hull, guess.astype(np.int64)
