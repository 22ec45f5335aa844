"""Gradient-accumulation groups: k consecutive steps of one shape (fairseq's ``update_freq``).

NOTE [ Accumulation groups ]
With ``accumulate=k`` an epoch is a sequence of *groups* of ``k`` consecutive global steps of one
cell, so the ``k`` batches a training loop accumulates into one optimizer step share one shape on
every rank (an accumulation step never mixes shapes, and a compiled step sees one shape per
update). Each cell's ``S_c`` steps are rounded up to ``ceil(S_c / k) * k``: the extra steps are
full batches of the cell's own samples, repeated cyclically from the start of its shuffled order
(counted as ``repeated`` in ``report()``), so nothing is dropped and every group is whole. Under
``last_batch="fill"`` a cell whose groups take at least twice its samples fills them with shorter
samples instead (NOTE [ Filling a small bucket ] in :mod:`bucketloader.plan.epoch`). Groups,
not steps, are interleaved across cells (key ``(g + u) / G_c`` for group ``g`` of ``G_c``), so
step ``t`` of the epoch belongs to group ``t // k``, aligned with the loop's accumulation windows
(``step % k``) from the epoch start. ``len()`` is ``sum_c ceil(S_c / k) * k`` on every rank, and a
resume is exact because the groups are part of the pure plan.
"""

from __future__ import annotations

import numpy as np

__all__ = ["grouped_steps", "interleave_groups", "longest_group_first"]


def grouped_steps(steps: np.ndarray, k: int) -> np.ndarray:
    """Steps per cell rounded up to whole groups of ``k``.

    Example:
        >>> grouped_steps(np.array([5, 4, 0, 1]), 4).tolist()
        [8, 4, 0, 4]
    """
    return -(-np.asarray(steps, dtype=np.int64) // k) * k


def interleave_groups(
    steps: np.ndarray, k: int, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """Steps ``(cell, j)`` in groups of ``k`` steps of one cell, groups interleaved so cells
    drain evenly (NOTE [ Accumulation groups ]); ``steps`` are already whole groups.

    Example:
        >>> sc, sj = interleave_groups(np.array([4, 2]), 2, None)
        >>> sc.tolist(), sj.tolist()
        ([0, 0, 1, 1, 0, 0], [0, 1, 0, 1, 2, 3])
    """
    groups = steps // k
    total = int(groups.sum())
    g_cell = np.repeat(np.arange(groups.size), groups)
    g_idx = np.arange(total) - np.repeat(np.cumsum(groups) - groups, groups)
    u = rng.random(total) if rng is not None else 0.5
    key = (g_idx + u) / np.maximum(groups[g_cell], 1)
    pick = np.lexsort((g_cell, key))
    sc = np.repeat(g_cell[pick], k)
    sj = (np.repeat(g_idx[pick], k) * k) + np.tile(np.arange(k), total)
    return sc, sj


def longest_group_first(
    best: int, k: int, sc: np.ndarray, sj: np.ndarray, seg: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move the first whole group of cell ``best`` to the front (NOTE [ Longest batch first ]
    in :mod:`bucketloader.plan.epoch`, by groups).

    Example:
        >>> sc = np.array([0, 0, 1, 1, 0, 0])  # the batches' cells, in groups of k = 2
        >>> sc2, sj2, _ = longest_group_first(1, 2, sc, np.arange(6), np.arange(6))
        >>> sc2.tolist(), sj2.tolist()
        ([1, 1, 0, 0, 0, 0], [2, 3, 0, 1, 4, 5])
    """
    starts = np.flatnonzero(sc[::k] == best) * k
    if starts.size == 0 or starts[0] == 0:
        return sc, sj, seg
    i = int(starts[0])
    move = np.r_[i : i + k, 0:i, i + k : sc.size]
    return sc[move], sj[move], seg[move]
