"""The joint heuristic: greedy additions, then best swaps with Lloyd steps, over candidate cells.

NOTE [ Greedy, swap, Lloyd ]
Greedy starts from the one cell covering everything and adds, K − 1 times, the candidate that
removes the most padding (every candidate's gain at once, NOTE [ Gains by prefix sums ]). Then,
for each cell in turn, a swap removes it (its samples fall to their next cheapest cell, or to "no
cell" at a large size) and adds the candidate with the largest gain against that: the best
exchange for that cell. An exchange is kept when it lowers the padding; after each one a Lloyd
step lowers every cell to the longest of its samples. It stops when a full round finds nothing or
at the deadline. Each swap costs one gain pass, O(K · grid).
"""

from __future__ import annotations

import time

import numpy as np

from bucketloader.strategies.joint._grid import Grid


def total(grid: Grid, size: np.ndarray) -> float:
    """Weighted sum of the sizes each point is padded to (``inf`` if any is uncovered)."""
    return float((grid.weight * size).sum())


def _levels(size: np.ndarray, big: float) -> tuple[np.ndarray, np.ndarray]:
    value, level = np.unique(np.where(np.isfinite(size), size, big), return_inverse=True)
    return level.ravel(), value


def greedy(grid: Grid, k: int) -> np.ndarray:
    """K cells by greedy addition from the covering cell (candidate ids)."""
    top = grid.point.max(axis=0)
    cells = [int(grid.cand_of_flat[np.ravel_multi_index(tuple(top), grid.shape)])]
    _, size = grid.assign(np.array(cells))
    while len(cells) < k:
        gain = grid.gains(*_levels(size, 0.0))
        gain[cells] = -1.0
        best = int(np.argmax(gain))
        if gain[best] <= 0:
            break
        cells.append(best)
        _, size = grid.assign(np.array(cells))
    return np.array(sorted(cells), dtype=np.int64)


def lattice_drop(grid: Grid, k: int, per_input: int = 8) -> np.ndarray:
    """K cells by greedy removal from the occupied cells of a per-input lattice (the optimal 1-D
    boundaries of each input, ``per_input`` buckets), each lowered to its samples' maximum."""
    from bucketloader.histogram import LengthHistogram
    from bucketloader.strategies.optimal import optimal

    idx = []
    for d in range(grid.point.shape[1]):
        hist = LengthHistogram(
            np.arange(grid.shape[d]),
            np.bincount(grid.point[:, d], weights=grid.weight, minlength=grid.shape[d])
            .round()
            .astype(np.int64)
            .clip(min=1),
        )
        b = np.asarray(optimal(hist, per_input).boundaries)
        idx.append(np.searchsorted(b, grid.point[:, d]))
    _, group = np.unique(np.stack(idx, axis=1), axis=0, return_inverse=True)
    group = group.ravel()
    cells = np.unique(
        [
            int(
                grid.cand_of_flat[
                    np.ravel_multi_index(tuple(grid.point[group == j].max(0)), grid.shape)
                ]
            )
            for j in range(int(group.max()) + 1)
        ]
    )
    return drop_to(grid, cells, k)


def drop_to(grid: Grid, cells: np.ndarray, k: int) -> np.ndarray:
    """Remove cells, each time the one whose samples lose least, until at most ``k`` remain (the
    cell covering everything is added first and kept, so every sample stays covered)."""
    top = grid.point.max(axis=0)
    cells = np.asarray(cells, dtype=np.int64)
    if cells.size <= k:
        return cells
    cover_all = int(grid.cand_of_flat[np.ravel_multi_index(tuple(top), grid.shape)])
    cells = np.union1d(cells, [cover_all])
    cost = np.where(grid.covers(cells), grid.cand_size[cells][:, None], np.inf)
    while cells.size > k:  # the covering cell stays: every other removal is then feasible
        two = np.partition(cost, 1, axis=0)  # each point's cheapest and next cheapest cell
        slot = cost.argmin(axis=0)
        extra = np.bincount(slot, weights=grid.weight * (two[1] - two[0]), minlength=cells.size)
        extra[cells == cover_all] = np.inf
        drop = int(np.argmin(extra))
        cells, cost = np.delete(cells, drop), np.delete(cost, drop, axis=0)
    return cells


def improve(grid: Grid, cells: np.ndarray, k: int, deadline: float) -> tuple[np.ndarray, bool]:
    """Swaps and Lloyd steps from ``cells`` until no swap helps or ``deadline`` (perf_counter).

    Returns ``(cells, converged)``; ``converged`` is False when the deadline stopped it.
    """
    cells = drop_to(grid, cells, k)
    slot, size = grid.assign(cells)
    cells = grid.tighten(cells, slot)
    slot, size = grid.assign(cells)
    best = total(grid, size)
    big = float(grid.cand_size.max()) * 4.0 + 1.0
    changed, cost = True, 0.0
    while changed:
        changed = False
        for j in range(len(cells)):
            t0 = time.perf_counter()
            if t0 + cost > deadline:  # the last swap's cost must still fit
                return cells, False
            if j >= len(cells):
                break
            rest = np.delete(cells, j)
            _, after = grid.assign(rest) if rest.size else (None, np.full(size.shape, np.inf))
            gain = grid.gains(*_levels(after, big))
            gain[rest] = -1.0
            add = int(np.argmax(gain))
            trial = np.unique(np.append(rest, add))
            tslot, tsize = grid.assign(trial)
            if not np.isfinite(tsize).all():
                continue
            trial = grid.tighten(trial, tslot)
            tslot, tsize = grid.assign(trial)
            value = total(grid, tsize)
            if value < best * (1 - 1e-12) - 1e-9:
                cells, size, best, changed = trial, tsize, value, True
            cost = time.perf_counter() - t0
    return cells, True
