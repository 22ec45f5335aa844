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

    Each step merges the pair of cells ``(a, b)`` whose covering cell ``max(a, b)`` adds the least
    padding, ``n_a·(size(m) − size(a)) + n_b·(size(m) − size(b))``; a third cell equal to ``m``
    absorbs both. Every sample stays in a cell that covers it.

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
    active = [tuple(c) for c in cells.tolist()]
    members: dict[tuple[int, ...], list[int]] = {c: [i] for i, c in enumerate(active)}
    weight = {c: int(n) for c, n in zip(active, counts.tolist(), strict=True)}
    while len(active) > limit:
        idx = np.asarray(active, dtype=np.int64)
        n = np.asarray([weight[c] for c in active], dtype=np.int64)
        own = lattice_size[encode(idx, ks)]
        m = np.maximum(idx[:, None, :], idx[None, :, :])
        sm = lattice_size[encode(m, ks)]
        cost = n[:, None] * (sm - own[:, None]) + n[None, :] * (sm - own[None, :])
        cost = cost.astype(np.float64)
        np.fill_diagonal(cost, np.inf)
        a, b = np.unravel_index(int(np.argmin(cost)), cost.shape)
        target = tuple(int(x) for x in m[a, b])
        for c in {active[a], active[b]}:
            if c == target:
                continue
            members.setdefault(target, []).extend(members.pop(c))
            weight[target] = weight.get(target, 0) + weight.pop(c)
        active = list(members)
    final = np.asarray(sorted(members, key=lambda c: int(encode(np.asarray(c), ks))))
    final = final.reshape(-1, cells.shape[1]).astype(np.int64)
    row = {tuple(c): r for r, c in enumerate(final.tolist())}
    mapping = np.empty(cells.shape[0], dtype=np.int64)
    for c, ids in members.items():
        mapping[ids] = row[c]
    return final, mapping


def cover_table(final_cells: np.ndarray, cell_size: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    """For every lattice point, the smallest final cell covering it (``-1`` if none)."""
    points = lattice_points(ks)
    covers = (final_cells[None, :, :] >= points[:, None, :]).all(axis=2)
    big = np.iinfo(np.int64).max
    score = np.where(covers, cell_size[None, :], big)
    best = np.argmin(score, axis=1)
    return np.where(covers.any(axis=1), best, -1).astype(np.int64)


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
