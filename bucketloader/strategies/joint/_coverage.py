"""The cells within a size limit that cover the most samples, when fewer cells than the cover
are allowed.

NOTE [ Covering the most samples within a size limit ]
Under ``max_size`` (a token budget) a ``max_shapes`` below the cover (NOTE [ Cells within a size
limit ]) leaves samples that no planned cell within the limit holds: a sampler drops them or
batches them alone (``oversize="drop"`` / ``"single"``). The fewest are lost by the K cells within
the limit that cover the most samples (weighted by count); the plan is then solved over the
samples they cover, whose cover is at most K, so its padding is still the least for what is
kept. Planned over every sample instead (as before), the unlimited plan's cells above the
limit lost their samples: 51 of 120 random pairs at K = 2 (s24-rev); on GSM8K at its 99th
percentile (210 tokens) and K = 2, 1,611 of the 7,399 within it, now 88
(``benchmarks/results/joint_dropfew.md``). With "single" a sample no cell within the limit
holds needs a cell above it, so K - 1 cells within it hold the most and one cell above it the
rest, each in batches of one: the fewest batches of one.

The fewest lost has a price: cells spent on holding samples are not spent on padding. Where K
is near the cover every cell sits on the limit's staircase, far above most samples (GSM8K at
210, K = 8: 9 lost, padding 118%); keeping what 2 cells hold instead loses 88 and pads 27%
(the results' second table). The policy is the fewest lost, as ``max_tokens`` with "drop"
promises to leave out only what does not fit; ``max_shapes`` at the cover (the warning names
it) or a larger budget is the way to both.

With two inputs this is exact. A cell within the limit can be raised to a *maximal* one (no
cell within the limit dominates it) covering at least the same samples, and the maximal
candidates form a staircase (x rising, y falling): the cells over a sample ``(a, b)`` are those
with ``x >= a`` (a suffix) and ``y >= b`` (a prefix), a contiguous run ``[l, r]``. Choosing K
staircase cells to cover the most weight is then covering the most intervals with K points: a
DP over the last cell chosen, ``f_t(j) = max_{i < j} f_{t-1}(i) + S(i + 1, j)`` with ``S(i, j)``
the weight of the runs that start in ``[i, j]`` and hold ``j`` (runs holding both ``i`` and
``j`` are counted at ``i``): O(K m^2) for m staircase cells, at most 512 (the grid has at most
2**18 points), a few milliseconds. With more inputs the cells within the limit have no such
order, and a greedy max-coverage stands in (each time the candidate covering the most
uncovered weight; the classic ``1 - 1/e`` of the best). On a coarsened grid (NOTE [ Joint time
limit and fallbacks ]) both count the samples where they sit on it.
"""

from __future__ import annotations

import numpy as np

from bucketloader.strategies.joint._grid import Grid


def most_covered(grid: Grid, k: int) -> np.ndarray:
    """Candidate ids of at most ``k`` cells of ``grid`` (its candidates: those within its
    ``max_size``) covering the most weight, sorted: exact with two inputs, greedy with more
    (NOTE [ Covering the most samples within a size limit ])."""
    if grid.point.shape[1] == 2:
        return _staircase(grid, k)
    return _greedy(grid, k)


def _staircase(grid: Grid, k: int) -> np.ndarray:
    cand = grid.cand
    order = np.lexsort((-cand[:, 1], -cand[:, 0]))  # x falling, y falling among ties
    y = cand[order, 1]
    keep = np.ones(y.size, dtype=bool)
    keep[1:] = y[1:] > np.maximum.accumulate(y)[:-1]
    stair = order[keep][::-1]  # the maximal candidates, x rising and y falling
    sx, sy = cand[stair, 0], cand[stair, 1]
    m = int(stair.size)
    # each point's run [l, r] of the staircase cells over it (every point is within the
    # limit, so it sits under one: l <= r)
    left = np.searchsorted(sx, grid.point[:, 0], side="left")
    right = np.searchsorted(-sy, -grid.point[:, 1], side="right") - 1
    w = grid.weight
    # hold[l, j]: the weight of the runs starting at l that hold j; S[i, j] = sum over l >= i
    width = m + 1
    diff = np.bincount(left * width + left, weights=w, minlength=m * width)
    diff -= np.bincount(left * width + right + 1, weights=w, minlength=m * width)
    hold = np.cumsum(diff.reshape(m, width), axis=1)[:, :m]
    s = np.cumsum(hold[::-1], axis=0)[::-1]
    after = np.full((m, m), -np.inf)  # after[i, j] = S[i + 1, j] for i < j
    upper = np.triu_indices(m, 1)
    after[upper] = s[upper[0] + 1, upper[1]]
    f = [s[0].copy()]  # f[t][j]: the most weight t + 1 cells cover, the last at j
    back = []
    for _ in range(1, min(k, m)):
        total = f[-1][:, None] + after
        arg = np.argmax(total, axis=0)
        back.append(arg)
        f.append(total[arg, np.arange(m)])
    best = np.array([row.max() for row in f])
    t = int(np.argmax(best))  # (the fewest cells reaching the most: the first maximum)
    j = int(np.argmax(f[t]))
    picked = [j]
    for arg in back[:t][::-1]:
        j = int(arg[j])
        picked.append(j)
    return np.sort(stair[picked])


def _greedy(grid: Grid, k: int) -> np.ndarray:
    left = np.ones(grid.weight.size, dtype=bool)
    picked: list[int] = []
    for _ in range(k):
        if not left.any():
            break
        # the uncovered weight under every candidate: one prefix sum of the grid per pick
        sums = np.zeros(grid.shape)
        sums.ravel()[grid.point_flat[left]] = grid.weight[left]
        for ax in range(sums.ndim):
            np.cumsum(sums, axis=ax, out=sums)
        best = int(np.argmax(sums.ravel()[grid.cand_flat]))
        picked.append(best)
        left &= ~(grid.point <= grid.cand[best]).all(axis=1)
    return np.array(sorted(picked), dtype=np.int64)
