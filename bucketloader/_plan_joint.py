"""Joint cells for several bucketed inputs: the lattice, the size rule and the max_shapes merge.

NOTE [ Joint cells ]
With D bucketed inputs (source and target, height and width) each input ``d`` has its own
boundaries ``b_d`` (k_d values). A sample's bucket index per input comes from
:func:`~bucketloader.boundaries.assign_buckets`; its *joint cell* is the tuple of indices, encoded
in mixed radix as one int (the "lattice code"). Only occupied cells matter. A cell's padded shape
is ``(b_0[i_0], ..., b_{D-1}[i_{D-1}])``; because boundaries increase, the elementwise max of two
index tuples is the smallest cell covering both, which is what the ``max_shapes`` merge uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SIZES = ("prod", "sum")
_MAX_MERGE = 4096


def lattice_points(ks: Sequence[int]) -> np.ndarray:
    """All index tuples of the lattice, shape ``(prod(ks), D)``, in code order."""
    grids = np.meshgrid(*[np.arange(k) for k in ks], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)


def encode(idx: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """Mixed-radix code of index tuples ``idx`` (shape ``(..., D)``), consistent with
    :func:`lattice_points`."""
    code = np.zeros(idx.shape[:-1], dtype=np.int64)
    for d, k in enumerate(ks):
        code = code * k + idx[..., d]
    return code


def size_values(padded: np.ndarray, size: Any) -> np.ndarray:
    """Size of each padded shape row of ``padded`` (``(M, D)``): ``"sum"``, ``"prod"`` or a
    callable taking one padded-lengths tuple of ints and returning an int."""
    padded = np.asarray(padded, dtype=np.int64)
    if size == "sum":
        return padded.sum(axis=1)
    if size == "prod":
        return padded.prod(axis=1)
    out = np.empty(padded.shape[0], dtype=np.int64)
    for i, row in enumerate(padded.tolist()):
        value = size(tuple(row))
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"size callable must return a non-negative int, got {value!r} for padded "
                f"lengths {tuple(row)}"
            )
        out[i] = int(value)
    return out


def merge_cells(
    cells: np.ndarray, counts: np.ndarray, lattice_size: np.ndarray, ks: Sequence[int], limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Greedily merge occupied cells until at most ``limit`` remain.

    Each step merges the pair of cells ``(a, b)`` whose covering cell ``m = max(a, b)`` adds the
    least padding, ``n_a·(size(m) − size(a)) + n_b·(size(m) − size(b))``; a third cell equal to
    ``m`` absorbs both. Every sample stays in a cell that covers it. The pair costs live in one
    matrix; a merge recomputes one row and column and the row minima it invalidates, so a step
    costs O(K) rather than O(K²).

    Args:
        cells: ``(K, D)`` occupied index tuples.
        counts: ``(K,)`` samples per cell.
        lattice_size: size of every lattice point, indexed by code.
        ks: buckets per input.
        limit: the ``max_shapes`` budget (>= 1).

    Returns:
        ``(final_cells, mapping)``: ``(K1, D)`` index tuples sorted by code, and for each input
        cell the row of ``final_cells`` that covers it.
    """
    k0 = cells.shape[0]
    if k0 > _MAX_MERGE:
        raise ValueError(
            f"{k0} occupied joint cells are too many to merge down to max_shapes={limit}; use "
            f"fewer num_buckets per input (at most {_MAX_MERGE} occupied cells)"
        )
    idx = cells.astype(np.int64).copy()
    n = counts.astype(np.float64).copy()
    alive = np.ones(k0, dtype=bool)
    owner = np.arange(k0)  # input cell -> slot
    slot_of = {int(c): i for i, c in enumerate(encode(idx, ks))}

    def row(t: int) -> np.ndarray:
        m = np.maximum(idx[t], idx)
        own = lattice_size[encode(idx, ks)]
        sm = lattice_size[encode(m, ks)]
        r = n[t] * (sm - own[t]) + n * (sm - own)
        r[~alive] = np.inf
        r[t] = np.inf
        return r

    cost = np.stack([row(t) for t in range(k0)]) if k0 else np.zeros((0, 0))
    best = cost.argmin(axis=1) if k0 else np.zeros(0, dtype=np.int64)
    low = cost[np.arange(k0), best] if k0 else np.zeros(0)
    while int(alive.sum()) > limit:
        a = int(np.argmin(np.where(alive, low, np.inf)))
        b = int(best[a])
        m = np.maximum(idx[a], idx[b])
        code = int(encode(m, ks))
        t = slot_of.get(code)
        if t is None:  # a new covering cell takes a's slot
            t = a
            del slot_of[int(encode(idx[a], ks))]
            idx[a], slot_of[code] = m, a
        killed = [x for x in (a, b) if x != t]
        for x in killed:
            n[t] += n[x]
            n[x] = 0.0
            alive[x] = False
            owner[owner == x] = t
            del slot_of[int(encode(idx[x], ks))]
        cost[killed, :] = np.inf
        cost[:, killed] = np.inf
        low[killed] = np.inf
        r = row(t)
        cost[t, :] = r
        cost[:, t] = r
        stale = alive & (np.isin(best, [*killed, t]))
        stale[t] = True
        for i in np.flatnonzero(stale).tolist():
            best[i] = int(np.argmin(cost[i]))
            low[i] = cost[i, best[i]]
        better = alive & ~stale & ((r < low) | ((r == low) & (t < best)))
        best[better], low[better] = t, r[better]
    slots = np.flatnonzero(alive)
    codes = encode(idx[slots], ks)
    order = np.argsort(codes)
    final = idx[slots[order]]
    rank_of = np.empty(k0, dtype=np.int64)
    rank_of[slots[order]] = np.arange(slots.size)
    return final, rank_of[owner]


def cover_table(final_cells: np.ndarray, cell_size: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """For every lattice point, the smallest final cell covering it (``-1`` if none)."""
    points = lattice_points(ks)
    out = np.empty(points.shape[0], dtype=np.int64)
    big = np.iinfo(np.int64).max
    step = max(1, 20_000_000 // max(1, final_cells.size))  # bound the (points, cells) temporary
    for lo in range(0, points.shape[0], step):
        covers = np.all(final_cells[None, :, :] >= points[lo : lo + step, None, :], axis=2)
        best = np.argmin(np.where(covers, cell_size[None, :], big), axis=1)
        out[lo : lo + step] = np.where(np.any(covers, axis=1), best, -1)
    return out


def batch_from_size(
    csize: np.ndarray, *, batch_size: int | None, max_tokens: int | None, multiple_of: int
) -> np.ndarray:
    """``B`` per cell: ``batch_size``, or ``max_tokens // size`` rounded down to ``multiple_of``
    (a size of 0 counts as 1). May return values < 1; callers name the failure."""
    csize = np.asarray(csize, dtype=np.int64)
    if batch_size is not None:
        return np.full(csize.shape[0], batch_size, dtype=np.int64)
    return max_tokens // np.maximum(csize, 1) // multiple_of * multiple_of


def resolve_size(size: Any) -> str | Callable[..., Any]:
    """Check the ``size`` rule: ``"sum"``, ``"prod"`` or a callable."""
    if callable(size) or size in SIZES:
        return size
    raise ValueError(
        "size must be one of 'prod', 'sum' or a callable on the padded lengths tuple, "
        f"got size={size!r}"
    )
