"""Cells: the planned batch shapes of a plan, independent of which samples fill them.

A *cell* is one planned batch shape ``(B, L_1, ..., L_D)``: a bucket for plain lengths, a joint
cell of per-input buckets for several inputs, always within one group (dataset). :class:`Cells`
holds the boundaries, every cell's padded lengths and batch size, and the tables that send a
sample's lengths to its cell. :class:`~bucketloader.plan.BucketSpec` builds one from the lengths of
a dataset; a stream (:class:`~bucketloader.stream.BucketIterable`) builds one from boundaries
alone; :class:`~bucketloader.plan.ShapeTable` keeps one to tell the collator a batch's shape.

NOTE [ Joint cells ]
With D bucketed inputs (source and target, height and width) each input ``d`` has its own
boundaries ``b_d`` (k_d values). A sample's bucket index per input comes from
:func:`~bucketloader.boundaries.assign_buckets`; its *joint cell* is the tuple of indices, encoded
in mixed radix as one int (the "lattice code", first input most significant). A dataset's plan
keeps only occupied cells (merged down to ``max_shapes`` if asked); a stream, which cannot know
its occupancy, plans every lattice point. A cell's padded shape is
``(b_0[i_0], ..., b_{D-1}[i_{D-1}])``; because boundaries increase, the elementwise max of two
index tuples is the smallest cell covering both, which is what the ``max_shapes`` merge and the
``cover`` table use.

The batch size of every cell follows NOTE [ The batch-size rule ] in
:mod:`bucketloader.plan.budget`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import Size
from bucketloader.boundaries import assign_buckets
from bucketloader.plan.budget import BatchRule, resolve_size, size_values

_MAX_MERGE = 4096
#: Joint lattices larger than this are refused (a lookup table per group is this long).
MAX_LATTICE = 1 << 22


@dataclass(frozen=True, eq=False)
class Cells:
    """The planned cells of a plan (see the module docstring).

    Attributes:
        input_names: names of the bucketed inputs (``("length",)`` for plain lengths).
        group_values: the distinct group ids, or ``None`` without groups.
        boundaries: ``boundaries[g][d]``: boundaries of input ``d`` in group index ``g``.
        lengths: ``(K, D)`` padded lengths of every cell.
        group: ``(K,)`` group index of every cell.
        batch: ``(K,)`` full batch size ``B`` of every cell.
        lookup: per group, lattice code → cell id (the covering cell for unoccupied codes, ``-1``
            where none covers).
        cover: per group, lattice code → smallest covering cell id (``-1`` if none).

    Example:
        >>> cells = Cells.build([[np.array([4, 10])]], ("length",), rule=BatchRule(batch_size=2))
        >>> cells.lengths.ravel().tolist(), cells.batch.tolist()
        ([4, 10], [2, 2])
        >>> cells.cell_of(np.array([[3], [9], [10]])).tolist()
        [0, 1, 1]
    """

    input_names: tuple[str, ...]
    group_values: tuple[int, ...] | None
    boundaries: tuple[tuple[np.ndarray, ...], ...]
    lengths: np.ndarray
    group: np.ndarray
    batch: np.ndarray
    lookup: tuple[np.ndarray, ...]
    cover: tuple[np.ndarray, ...]

    @classmethod
    def build(
        cls,
        boundaries: Sequence[Sequence[np.ndarray]],
        input_names: tuple[str, ...],
        *,
        group_values: tuple[int, ...] | None = None,
        occupancy: Sequence[np.ndarray] | None = None,
        max_shapes: int | None = None,
        size: Size = "sum",
        rule: BatchRule,
        joint: Sequence[np.ndarray] | None = None,
    ) -> Cells:
        """Cells from per-group, per-input boundaries (validated by the caller).

        Args:
            boundaries: ``boundaries[g][d]`` for every group ``g`` and input ``d``.
            input_names: one name per input.
            group_values: the group ids (``None``: one group, no per-dataset bucketing).
            occupancy: per group, samples per lattice code (``np.bincount`` of
                :func:`lattice_codes`): only occupied codes become cells, merged down to
                ``max_shapes``. ``None`` (a stream): every lattice point is a cell.
            max_shapes: with ``occupancy``, merge rare cells until each group has at most this
                many (see :func:`merge_cells`).
            size: how a padded shape is counted (``"sum"``, ``"prod"`` or a callable): the
                ``max_shapes`` merge cost and the token budget.
            rule: the :class:`~bucketloader.plan.budget.BatchRule` (NOTE [ The batch-size rule ]);
                oversize cells get ``B = 0`` unless ``oversize="single"`` (the caller decides).
            joint: per group, ``(K, D)`` index tuples of planned cells (a joint plan from
                :func:`~bucketloader.strategies.joint.solve_joint`, sorted by code) instead of
                the occupied lattice points: every sample goes to the cheapest cell covering it
                and, with ``occupancy``, cells no sample uses are dropped.
        """
        size = resolve_size(size)
        lookups: list[np.ndarray] = []
        covers: list[np.ndarray] = []
        cells: list[np.ndarray] = []
        cgroups: list[np.ndarray] = []
        for gi, bs in enumerate(boundaries):
            ks = [int(b.size) for b in bs]
            total = int(np.prod(ks))
            if total > MAX_LATTICE:
                raise ValueError(
                    f"{' x '.join(map(str, ks))} joint cells are too many; use fewer num_buckets"
                )
            lat_size = _lattice_size(bs, ks, size)
            offset = sum(c.shape[0] for c in cells)
            if joint is not None:
                final = np.asarray(joint[gi], dtype=np.int64)
                cover = cover_table(final, lat_size[encode(final, ks)], ks)
                if occupancy is not None:
                    used = np.unique(cover[np.flatnonzero(np.asarray(occupancy[gi]))])
                    final = final[used[used >= 0]]
                    cover = cover_table(final, lat_size[encode(final, ks)], ks)
                cover = np.where(cover >= 0, cover + offset, -1)
                lookup = cover.copy()
            elif occupancy is None:
                final = lattice_points(ks)
                lookup = np.arange(total, dtype=np.int64) + offset
                cover = lookup.copy()
            else:
                counts = np.asarray(occupancy[gi])
                occ = np.flatnonzero(counts)
                occ_cells = np.stack(np.unravel_index(occ, ks), axis=1).astype(np.int64)
                if max_shapes is not None and occ.size > max_shapes:
                    final, mapping = merge_cells(occ_cells, counts[occ], lat_size, ks, max_shapes)
                else:
                    final, mapping = occ_cells, np.arange(occ.size)
                cover = cover_table(final, lat_size[encode(final, ks)], ks)
                cover = np.where(cover >= 0, cover + offset, -1)
                lookup = cover.copy()
                lookup[occ] = mapping + offset
            lookups.append(lookup)
            covers.append(cover)
            cells.append(np.stack([bs[d][final[:, d]] for d in range(len(bs))], axis=1))
            cgroups.append(np.full(final.shape[0], gi, dtype=np.int64))
        lengths = np.concatenate(cells).astype(np.int64)
        batch = rule.sizes(lengths, size)
        for arr in (lengths, batch, *lookups, *covers):
            arr.setflags(write=False)
        return cls(
            input_names=tuple(input_names),
            group_values=None if group_values is None else tuple(group_values),
            boundaries=tuple(tuple(bs) for bs in boundaries),
            lengths=lengths,
            group=np.concatenate(cgroups),
            batch=batch,
            lookup=tuple(lookups),
            cover=tuple(covers),
        )

    @property
    def num_cells(self) -> int:
        """Number of cells ``K``."""
        return int(self.lengths.shape[0])

    @functools.cached_property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """Full batch shape ``(B, L_1, ..., L_D)`` of every cell (cell id → shape)."""
        return tuple(
            (int(b), *map(int, ls)) for b, ls in zip(self.batch, self.lengths, strict=True)
        )

    def group_index(self, group: Any) -> int:
        """Index of a group id in :attr:`group_values` (0 without groups), or a clear error."""
        if self.group_values is None:
            if group is not None:
                raise ValueError(
                    f"this plan has no per-dataset groups, got group={group!r}; pass group=None"
                )
            return 0
        if group is None:
            raise ValueError(
                "this plan buckets per dataset (groups), so a batch needs its group id; "
                "PadCollator reads it from each sample's group_key field (see "
                "bucketloader.sampler.GroupedDataset)"
            )
        values = np.unique(np.asarray(group).ravel())
        if values.size != 1 or int(values[0]) not in self.group_values:
            raise ValueError(
                f"group must be one of {list(self.group_values)} (one group per batch), "
                f"got group={group!r}"
            )
        return self.group_values.index(int(values[0]))

    def codes(self, table: np.ndarray, gi: int = 0) -> np.ndarray:
        """Lattice code of every row of ``table`` (``(n, D)`` lengths) in group index ``gi``."""
        return lattice_codes(self.boundaries[gi], table)

    def cell_of(self, table: np.ndarray, gi: int = 0) -> np.ndarray:
        """Cell id of every row of ``table`` (``(n, D)`` lengths within the last boundaries)."""
        return self.lookup[gi][self.codes(table, gi)]

    def covering(self, table: np.ndarray, gi: int = 0) -> int:
        """The smallest cell covering every row of ``table`` (``-1`` if none does)."""
        bs = self.boundaries[gi]
        idx = np.stack([assign_buckets(table[:, d], b) for d, b in enumerate(bs)], axis=1)
        return int(self.cover[gi][encode(idx.max(axis=0), [b.size for b in bs])])


def lattice_codes(bs: Sequence[np.ndarray], table: np.ndarray) -> np.ndarray:
    """Mixed-radix lattice code of every row of ``table`` (``(n, D)``), per-input buckets by
    :func:`~bucketloader.boundaries.assign_buckets`; equal to :func:`encode` of the indices."""
    code: np.ndarray | None = None
    for d, b in enumerate(bs):
        i = assign_buckets(table[:, d], b)
        code = i if code is None else code * b.size + i
    return code  # type: ignore[return-value]


def _lattice_size(bs: Sequence[np.ndarray], ks: list[int], size: Size) -> np.ndarray:
    idx = np.unravel_index(np.arange(int(np.prod(ks))), ks)
    padded = np.stack([b[i] for b, i in zip(bs, idx, strict=True)], axis=1)
    return size_values(padded, size)


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
