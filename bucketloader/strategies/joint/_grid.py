"""The joint histogram on its grid: candidate cells and the gains of every candidate at once.

NOTE [ Candidate cells ]
Per input ``d`` the distinct lengths ``U_d`` span a grid; a sample sits at the grid point of its
lengths. In an optimal plan every cell can be lowered, input by input, to the longest of its own
samples (no sample leaves it, its size cannot grow), so every cell's coordinate ``d`` is the
length ``d`` of one of the samples it covers: a *tight* grid point. Only tight grid points are
candidates; that keeps every optimum and drops most of the grid. A grid point is tight in input
``d`` when some sample has exactly its length ``d`` and at most its other lengths (a cumulative
OR of the occupancy along every other axis).

NOTE [ Cells within a size limit ]
Under a token budget (``max_tokens``) a cell is usable only if its padded size fits it, although
a cell whose samples each fit can exceed it: it pads every input to the longest of its samples
there (GSM8K[:2000], ``max_tokens=299``, its longest pair, K = 4: a cell of 158 + 205 = 363 in
the unlimited plan). With ``max_size`` the candidates are the tight points within it, so every
plan the search, the bound and the integer program consider is within it (the bound is then the
bound of those plans). The cell covering everything is usually not among them, so what the
starts keep instead is a *cover*: cells within the limit that cover every point together. With
two inputs the points no other dominates form a staircase (x rising, y falling) and a cell
covers a contiguous run of it, the smallest for a run from ``i`` to ``j`` being ``(x_j, y_i)``:
taking each run as long as its cell fits gives the fewest cells (an interval cover), and a K
below that count has no plan (:class:`TooFewCells`; a sampler then plans the samples K cells
hold, the most: NOTE [ Covering the most samples within a size limit ]). With more inputs a
greedy cover (each time the largest sample left, by the cell over it holding the most) can take
more cells than needed, and a K below its count was refused though a plan existed (2,993 random
cases of 3-8 triples: the greedy above the fewest in 22), so where it takes three or more an
integer program finds the fewest (:func:`_fewest_cover`: a set cover of the points no other
dominates by the candidates no other dominates, in HiGHS under a node limit, the same on every
rank). On 20,000 lognormal triples at the 99th percentile it took 0.3 s beside the greedy's
0.2 s (94 cells for the greedy's 95; "prod" 137 for 138) and proved them the fewest.
A coarsened grid rounds the samples up onto its values, which can put a sample within the limit
above it, where no cell within the limit covers it. So under a limit :func:`coarse_values` adds
the lengths of the samples no other dominates (with two inputs the staircase above) where they
take at most half the values: every sample then rounds to at most one of them, so the exact
cover's cells are on the grid (and its count is exact). Where they are more, it adds those of
the samples *at risk* (rounded past the limit) no other at risk dominates, each then sitting
exactly (more values only lower the places: none is newly at risk); where even those are too
many (three inputs), one length per sample at risk, greedily. Fewer values make room where
the grid outgrows :data:`MAX_GRID`. benchmarks/joint_dropfew.py (its third table: 20,000
lognormal pairs of about 720 distinct lengths per input, the budget at the 99th percentile of
the size, oversize="drop"): the sampler planned without the limit and lost, past the samples
above the budget, 3,488 pairs at K = 2 with size="sum", now 357, where the fewest any two cells
within the budget lose is 354 (K = 8: 961 -> 46, fewest 43; "prod" K = 2: all 19,800, an
error, -> 691, fewest 679; K = 8: 2,121 -> 98, fewest 90); the grid grows from 313 x 311
values to 333 x 338 (with JOINT_FORMAT 9's placed values, NOTE [ A coarsened grid's values ]:
129 x 129 to 156 x 161, and 357, 47, 688 and 95 lost). At the cover: an error before, none
now. Only where no such values fit (three inputs, a budget well inside the data: 20,000 random
triples at the 90th percentile) is a sample still rounded past the limit (:class:`OverLimit`;
a sampler then plans without it).

NOTE [ A coarsened grid's values ]
A grid of more than :data:`MAX_GRID` points (very many distinct lengths, or three inputs) is
pre-binned: per input a few values, every sample rounded *up* onto them for the plan (its cells
sit on them) and *down* for the bound (a relaxation: every cell covering a sample covers the
rounded sample, and a cell off the values can be lowered onto them, so the least padding of
the rounded samples, less what the rounding took from each, is at most any plan's). Until
JOINT_FORMAT 9 the values were weighted quantiles (up to 512 per input), the same for both.
Quantiles put few values where few samples are, but a long tail's few samples carry much of
the padding: the plan's cells could only sit on values hundreds apart there. Now each input's
values are the 1-D optimal boundaries of that input's own histogram (:func:`placed_values`,
the exact DP: the values that round its lengths up least), about ``COARSE_GRID ** (1 / D)`` of
them (128 with two inputs), so the search's grid is small and fast; the bound's are the
boundaries of the mirrored lengths (``top - length``), which round them *down* least. The
bound is the Lagrangian of such a rounded-down grid (``_ladder`` in
:mod:`bucketloader.strategies.joint`): with two inputs first half as many values per input for
a share of the time (it converges fast; its ascent measures an evaluation's cost), then as
many as the plan's where enough of its evaluations are predicted to fit (a finer grid's bound
is higher once it has run a few dozen steps), else the first grid's ascent resumed; with three
inputs (no bundle to resume) one grid of the plan's count. benchmarks/results/joint_large.md
(K = 16, 5 s; padding now / before, and the gap before -> now): 1,000,000 translation-like
lognormal pairs 0.886 (52.2% -> 19.7%; 17.7-26.8% in two earlier runs: the finer grid runs
only where the load leaves it time), with ``size="prod"`` 0.595 (81.2% -> 30.5%); 20,000 such
pairs (about 700 distinct lengths per input) 0.966 (51.4% -> 26.9%) and 0.852 (73.8% ->
25.8%); 1,000,000 uniform pairs 0.983 (49.7% -> 17.1%); LibriSpeech's real durations with
synthetic transcripts 0.964 (61.3% -> 23.7%); 1,000,000 triples 0.726 (76.1% -> 55.0%), with
``"prod"`` 0.281 (96.2% -> 83.4%). A gap this large is mostly the bound's (what rounding down
to about 128 values per input takes, and the time): the plans' padding hardly moves with more
time (the first case at 30 s: 0.6% less padding, gap 11.9%).

NOTE [ Gains by prefix sums ]
The heuristic and the bound both need, for every candidate ``c``, a sum over the samples it
covers of ``w_i · max(0, r_i − size(c))`` where ``r_i`` is one of a few *levels* (the size of a
sample's current cell, or its Lagrangian reach rounded down to a level). Per level the covered
weight is a D-dimensional prefix sum of that level's weight grid, so every candidate's gain costs
O(levels · grid) in numpy, never O(candidates · samples).

NOTE [ Gains by sorted blocks ]
With many distinct levels (the bound's reaches: one per point) the prefix sums above cost
O(levels · grid). Sorted from the largest value down, the points a candidate gains from are a
*prefix* of that order (those whose value exceeds its size). So the order is cut into blocks of
``b`` points, the prefix sums of whole blocks (weights and weighted values, O(n / b · grid))
give every candidate its whole blocks by one lookup, and the last, partial block (under ``b``
points) is compared point by point (O(candidates · b)). That is exact, whatever the number of
levels; :meth:`Grid.gains` takes whichever way costs less (``b`` about
``sqrt(n · grid / candidates)``). On GSM8K (3,736 points, a 20,618-point grid, 13,276
candidates) one evaluation at the bound's 1,024 levels took 1.23 s by levels and 0.69 s by
blocks (exact) on a machine at load 11 (one run each).

NOTE [ Gains by rows ]
With two inputs there is an exact way linear in the points, for one value per point (the
bound's reaches, no levels at all). Take as *rows* the input with fewer grid values. In row
``x`` the points at or below it (``a_i <= x``) gain on the cells ``(x, y)`` with ``y >= b_i``
(covered) and ``size(x, y) < r_i``; the size grows with ``y``, so that is one contiguous range
of ``y`` indices, ``[b_i, e_i)``, with ``e_i`` the first value at or above the threshold
``r_i − x`` (sum) or ``r_i / x`` (prod): a table lookup for integer lengths (a cell exactly
at the threshold adds 0 either way, give or take one rounding). On the cells of that range
the point adds ``w_i · r_i − w_i · size(x, y)``, so two difference arrays per row
(``Σ w_i r_i`` and ``Σ w_i``, +at ``b_i``, −at ``e_i``; one ``bincount`` for all rows) and a
cumulative sum along ``y`` give ``gain(x, y) = A − B · size(x, y)`` for every cell at once:
O(rows · points) work, the (row, point) pairs kept from one call to the next. GSM8K (122 rows,
about 230,000 pairs): 10-18 ms per evaluation against 110 ms by blocks at the same exact
reaches (one quiet run each); Europarl and COCO about 1 ms. :meth:`Grid.gains` still prefers
the prefix sums with few levels (the search's K + 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bucketloader.histogram import LengthHistogram
from bucketloader.strategies.optimal import optimal

#: Grids with more points than this are pre-binned (coordinates kept per input, see
#: :func:`coarse_values`).
MAX_GRID = 1 << 18
#: A pre-binned grid's points, about (NOTE [ A coarsened grid's values ]).
COARSE_GRID = 1 << 14
#: Bound the (levels, grid) temporary of :func:`gains` to this many float64 values, and the
#: (row, point) pairs kept by NOTE [ Gains by rows ] (near the cap: about 160 MB per grid, and
#: as much again in temporaries per evaluation).
_GAIN_CHUNK = 1 << 22


def _shown(x: float) -> str:
    """A size as the user wrote it: ``299``, not ``299.0`` or ``2.4e+07``."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class OverLimit(ValueError):
    """A sample above ``max_size`` where it sits on the grid (rounded up onto a coarsened grid,
    NOTE [ Joint time limit and fallbacks ]): no cell within the limit covers it.

    Example:
        >>> from bucketloader.strategies.joint import solve_joint
        >>> try:
        ...     solve_joint([[3, 100], [50, 50]], max_shapes=2, size="prod", max_size=1000)
        ... except OverLimit as exc:
        ...     print(str(exc).split(":")[0])
        max_size=1000 is below the size 2500 of a sample (lengths [50, 50])
    """


class TooFewCells(ValueError):
    """``max_shapes`` below the fewest cells within ``max_size`` that cover every sample
    (NOTE [ Cells within a size limit ]); ``need``: that count (with more than two inputs, a
    greedy cover's, or on a coarsened grid: at most that many).

    Example:
        >>> from bucketloader.strategies.joint import solve_joint
        >>> try:
        ...     solve_joint([[3, 100], [100, 3], [50, 50]], max_shapes=1, size="prod",
        ...                 max_size=5000)
        ... except TooFewCells as exc:
        ...     print(exc.need, exc.exact)
        2 True
    """

    def __init__(self, k: int, need: int, max_size: float, exact: bool) -> None:
        self.need, self.exact = need, exact
        fewest = "the fewest cells" if exact else "a cover, not proved the fewest"
        super().__init__(
            f"max_shapes={k} is below the {need} cells within max_size={_shown(max_size)} that "
            f"cover every sample ({fewest}): pass max_shapes={need} or more, or a larger max_size"
        )


def sizes_of(coords: np.ndarray, size: str) -> np.ndarray:
    """Size of each row of ``coords`` (``(M, D)`` lengths) as float64: ``"sum"`` or ``"prod"``."""
    coords = np.asarray(coords, dtype=np.float64)
    return coords.sum(axis=1) if size == "sum" else coords.prod(axis=1)


@dataclass(frozen=True)
class _Rows:
    """Per (row, point) pair of NOTE [ Gains by rows ]: everything but the values."""

    r: int  # the input of the rows
    pt: np.ndarray  # the point
    x: np.ndarray  # the row's value
    base: np.ndarray  # the row's first flat index in the (rows, ys + 1) table
    start: np.ndarray  # flat index of the point's own y in its row
    w: np.ndarray  # the point's weight
    ys: np.ndarray  # the other input's values
    table: np.ndarray | None  # y index of the first value >= t, for integer t
    const: np.ndarray  # the weights added at the starts


@dataclass(frozen=True, eq=False)
class Grid:
    """The joint histogram on the per-input value grid, with its candidate cells.

    Attributes:
        values: per input, the grid coordinates (sorted distinct lengths, or a coarser set).
        shape: grid shape (``len(values[d])`` per input).
        weight: ``(n,)`` samples per grid point that holds any (float64).
        point: ``(n, D)`` grid index of those points.
        point_flat: ``(n,)`` flat grid index of the points.
        point_size: ``(n,)`` size of the points (at grid coordinates).
        cand: ``(C, D)`` grid index of the candidate cells.
        cand_flat: ``(C,)`` flat grid index of the candidates.
        cand_size: ``(C,)`` size of the candidates.
        cand_of_flat: ``(G,)`` candidate id of every grid point (``-1`` if not a candidate).
        size: ``"sum"`` or ``"prod"``.
        by_size: the candidate ids from the smallest size to the largest.
        sorted_size: ``cand_size[by_size]`` (kept: every gains round searches it).
        cover: candidate ids that together cover every point (the starts keep them; NOTE
            [ Cells within a size limit ]): the cell covering everything, or with
            ``max_size`` the fewest cells within it (two inputs; with more, a greedy cover or
            the integer program's where it has fewer cells).
        row_point: ``(M,)`` the point of each row :meth:`build` was given.
        max_size: the largest size a candidate may have (``None``: any).
        cover_exact: whether ``cover`` is proved the fewest (the integer program, with more
            than two inputs, may stop at its node limit).
    """

    values: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    weight: np.ndarray
    point: np.ndarray
    point_flat: np.ndarray
    point_size: np.ndarray
    cand: np.ndarray
    cand_flat: np.ndarray
    cand_size: np.ndarray
    cand_of_flat: np.ndarray
    size: str
    by_size: np.ndarray
    sorted_size: np.ndarray
    cover: np.ndarray
    row_point: np.ndarray
    max_size: float | None = None
    cover_exact: bool = True

    @classmethod
    def build(
        cls,
        rows: np.ndarray,
        counts: np.ndarray,
        values: list[np.ndarray],
        size: str,
        max_size: float | None = None,
    ) -> Grid:
        """The grid of ``values`` with the rows (``(n, D)``, each at most the last value of its
        input) rounded up onto it, and the tight candidates (NOTE [ Candidate cells ]) of size
        at most ``max_size`` (NOTE [ Cells within a size limit ]; every point must be within
        it)."""
        d = rows.shape[1]
        idx = np.stack([np.searchsorted(values[k], rows[:, k]) for k in range(d)], axis=1)
        shape = tuple(int(v.size) for v in values)
        flat = np.ravel_multi_index(tuple(idx.T), shape)
        # the occupied points by one count per grid point, not a sort of the rows (the grid has
        # at most MAX_GRID points; 884,548 rows: 0.10 -> 0.02 s)
        held = np.bincount(flat, minlength=int(np.prod(shape))) > 0
        uflat = np.flatnonzero(held)
        inv = (np.cumsum(held) - 1)[flat]
        weight = np.bincount(inv, weights=counts.astype(np.float64), minlength=uflat.size)
        point = np.stack(np.unravel_index(uflat, shape), axis=1).astype(np.int64)
        occ = np.zeros(shape, dtype=bool)
        occ.ravel()[uflat] = True
        tight = np.ones(shape, dtype=bool)
        for k in range(d):
            t = occ
            for ax in range(d):
                if ax != k:
                    t = np.logical_or.accumulate(t, axis=ax)
            tight &= t
        cand_flat = np.flatnonzero(tight)
        cand = np.stack(np.unravel_index(cand_flat, shape), axis=1).astype(np.int64)
        cand_size = sizes_of(cls._coords(values, cand), size)
        point_size = sizes_of(cls._coords(values, point), size)
        if max_size is not None:
            own = sizes_of(rows, size)
            if own.max() > max_size:  # (the sample itself, not its place on a coarsened grid)
                raise OverLimit(
                    f"max_size={_shown(max_size)} is below the size {_shown(own.max())} of a "
                    f"sample (lengths {rows[int(np.argmax(own))].tolist()}): no cell "
                    "within it holds that sample; leave out the samples above it first, or "
                    "pass a larger max_size"
                )
            if point_size.max() > max_size:
                raise OverLimit(
                    f"max_size={_shown(max_size)} is below the size {_shown(point_size.max())} "
                    "of a sample "
                    "where it sits on the grid (rounded up onto the grid's values, which a grid "
                    f"of more than {MAX_GRID:,} points coarsens): no cell within it covers that "
                    "sample; pass a larger max_size, or fewer distinct lengths "
                    "(pad_to_multiple_of)"
                )
            within = cand_size <= max_size
            cand_flat, cand, cand_size = cand_flat[within], cand[within], cand_size[within]
        cand_of_flat = np.full(int(np.prod(shape)), -1, dtype=np.int64)
        cand_of_flat[cand_flat] = np.arange(cand_flat.size)
        by_size = np.argsort(cand_size, kind="stable")
        cover_exact = True
        if max_size is None:  # the cell covering everything (a tight point: each input's top)
            top = np.ravel_multi_index(tuple(point.max(axis=0)), shape)
            cover = cand_of_flat[[top]]
        else:
            cover = _cover(point, cand, cand_of_flat, shape, point_size)
            # a greedy cover of one or two cells is the fewest (one cell over every point is
            # over the largest, and covers the most: the greedy's first pick)
            if d > 2 and cover.size > 2:
                fewer, proved = _fewest_cover(point, cand, cand_of_flat, shape)
                cover_exact = proved
                if fewer is not None and fewer.size < cover.size:
                    cover = fewer
        return cls(
            values=tuple(values),
            shape=shape,
            weight=weight,
            point=point,
            point_flat=uflat,
            point_size=point_size,
            cand=cand,
            cand_flat=cand_flat,
            cand_size=cand_size,
            cand_of_flat=cand_of_flat,
            size=size,
            by_size=by_size,
            sorted_size=cand_size[by_size],
            cover=cover,
            max_size=max_size,
            cover_exact=cover_exact,
            row_point=inv,
        )

    @staticmethod
    def _coords(values: tuple[np.ndarray, ...] | list[np.ndarray], idx: np.ndarray) -> np.ndarray:
        return np.stack([values[k][idx[:, k]] for k in range(idx.shape[1])], axis=1)

    def lengths(self, cand_ids: np.ndarray) -> np.ndarray:
        """``(k, D)`` padded lengths of candidates ``cand_ids``."""
        return self._coords(self.values, self.cand[np.asarray(cand_ids, dtype=np.int64)])

    def assign(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each point's cheapest covering cell among candidate ids ``cells``: ``(slot, size)``,
        size ``inf`` (slot ``-1``) where none covers."""
        cells = np.asarray(cells, dtype=np.int64)
        cost = np.where(self.covers(cells), self.cand_size[cells][:, None], np.inf)
        slot = cost.argmin(axis=0)
        best = cost[slot, np.arange(slot.size)]
        return np.where(np.isfinite(best), slot, -1), best

    def tighten(self, cells: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """Lloyd step: every used cell lowered to the longest of its points (a tight candidate);
        unused cells dropped. Padding never grows."""
        out = []
        for k in range(len(cells)):
            mine = slot == k
            if mine.any():
                top = self.point[mine].max(axis=0)
                out.append(int(self.cand_of_flat[np.ravel_multi_index(tuple(top), self.shape)]))
        return np.unique(np.array(out, dtype=np.int64))

    def gains(self, level: np.ndarray, level_value: np.ndarray) -> np.ndarray:
        """For every candidate ``c``: ``sum_i w_i · max(0, level_value[level[i]] − size(c))`` over
        the points ``i`` it covers (NOTE [ Gains by prefix sums ], NOTE [ Gains by sorted
        blocks ]: whichever costs less)."""
        cost, block = self._costs(int(level_value.size))
        way = min(cost, key=cost.__getitem__)
        if way == "rows" and self._rows is not None:
            return self._gains_by_rows(level_value[level], self._rows)
        if way == "blocks":
            return self._gains_by_blocks(level_value[level], block)
        return self._gains_by_levels(level, level_value)

    def _costs(self, nl: int) -> tuple[dict[str, float], int]:
        """The cost model of :meth:`gains` at ``nl`` levels (in grid-point operations) per way,
        and the block length of the blocks way."""
        g = int(np.prod(self.shape))
        n, nc = self.weight.size, self.cand_flat.size
        block = max(1, int(np.sqrt(n * g / max(nc, 1))), -(-n * g // _GAIN_CHUNK))
        cost = {
            "levels": float(nl * (g + nc)),
            "blocks": float(2 * (-(-n // block) * g + nc * block)),
            # (measured: a pair costs about 3 grid points of the prefix sums)
            "rows": 3.0 * self._rows.pt.size + 2 * g if self._rows is not None else np.inf,
        }
        return cost, block

    @property
    def by_rows(self) -> bool:
        """Whether :meth:`gains_at` is exact at any reaches for the cost of a few levels (NOTE
        [ Gains by rows ]); else each distinct reach is a level (or a block pass)."""
        return self._rows is not None

    def gains_cost(self, levels: int) -> float:
        """:meth:`gains_at`'s estimated cost (grid-point operations) at ``levels`` distinct
        values; with the time of one evaluation it predicts the next's."""
        cost, _ = self._costs(max(int(levels), 1))
        return cost["rows"] if self._rows is not None else min(cost["levels"], cost["blocks"])

    def gains_at(self, value: np.ndarray) -> np.ndarray:
        """:meth:`gains` at one value per point (``value``, float64), the cheapest exact way."""
        value = np.asarray(value, dtype=np.float64)
        if self._rows is not None:
            return self._gains_by_rows(value, self._rows)
        distinct, level = np.unique(value, return_inverse=True)
        return self.gains(level.ravel(), distinct)

    @cached_property
    def _rows(self) -> _Rows | None:
        """The value-free part of NOTE [ Gains by rows ] (``None``: not two inputs, or too many
        pairs to keep)."""
        if len(self.shape) != 2:
            return None
        r = int(np.argmin(self.shape))  # the rows: the input with fewer grid values
        c = 1 - r
        nx, ny = self.shape[r], self.shape[c]
        order = np.argsort(self.point[:, r], kind="stable")
        active = np.searchsorted(self.point[order, r], np.arange(nx), side="right")
        total = int(active.sum())
        if total > _GAIN_CHUNK:
            return None
        # every (row x, point i) with the point at or below the row: a prefix of ``order``
        row = np.repeat(np.arange(nx), active)
        pt = order[np.arange(total) - np.repeat(np.cumsum(active) - active, active)]
        base = row * (ny + 1)
        start = base + self.point[pt, c]
        w = self.weight[pt]
        ys = self.values[c]
        table = None
        if int(ys[-1]) <= _GAIN_CHUNK:  # integer lengths: a lookup instead of a search
            table = np.searchsorted(ys, np.arange(int(ys[-1]) + 2)).astype(np.int64)
        return _Rows(
            r=r,
            pt=pt,
            x=self.values[r][row].astype(np.float64),
            base=base,
            start=start,
            w=w,
            ys=ys.astype(np.float64),
            table=table,
            const=np.bincount(start, weights=w, minlength=nx * (ny + 1)),
        )

    def _gains_by_rows(self, value: np.ndarray, rows: _Rows) -> np.ndarray:
        """NOTE [ Gains by rows ]: ``value`` per point, exact (no levels); ``rows`` is
        :attr:`_rows` (built: the caller checked it is not ``None``)."""
        r, c = rows.r, 1 - rows.r
        nx, ny = self.shape[r], self.shape[c]
        v = value[rows.pt]
        if self.size == "sum":
            thr = v - rows.x
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                thr = np.where(rows.x > 0, v / np.where(rows.x > 0, rows.x, 1.0), np.inf)
        # the first y index with size(x, y) >= value: every y before it gains (a cell at the
        # threshold itself adds 0, give or take one rounding)
        if rows.table is not None:
            at = np.ceil(np.clip(thr, 0.0, rows.table.size - 1)).astype(np.int64)
            end = rows.table[at]
        else:
            end = np.searchsorted(rows.ys, thr, side="left")
        end = np.maximum(rows.base + end, rows.start)  # nothing where the range is empty
        wv = rows.w * v
        m = nx * (ny + 1)
        a = np.bincount(rows.start, weights=wv, minlength=m)
        a -= np.bincount(end, weights=wv, minlength=m)
        b = rows.const - np.bincount(end, weights=rows.w, minlength=m)
        a = np.cumsum(a.reshape(nx, ny + 1), axis=1)
        b = np.cumsum(b.reshape(nx, ny + 1), axis=1)
        ci, cj = self.cand[:, r], self.cand[:, c]
        return np.maximum(a[ci, cj] - b[ci, cj] * self.cand_size, 0.0)

    def _gains_by_levels(self, level: np.ndarray, level_value: np.ndarray) -> np.ndarray:
        nl = int(level_value.size)
        g = int(np.prod(self.shape))
        out = np.zeros(self.cand_flat.size)
        step = max(1, _GAIN_CHUNK // max(g, 1))
        sorted_size = self.sorted_size
        for lo in range(0, nl, step):
            hi = min(nl, lo + step)
            mine = (level >= lo) & (level < hi)
            if not mine.any():
                continue
            key = (level[mine] - lo) * g + self.point_flat[mine]
            grid = np.bincount(key, weights=self.weight[mine], minlength=(hi - lo) * g)
            grid = grid.reshape((hi - lo, *self.shape))
            for ax in range(1, grid.ndim):
                np.cumsum(grid, axis=ax, out=grid)
            # only candidates smaller than the chunk's top level gain anything from it
            some = self.by_size[: np.searchsorted(sorted_size, level_value[hi - 1], "left")]
            covered = grid.reshape(hi - lo, g)[:, self.cand_flat[some]]
            slope = np.maximum(level_value[lo:hi, None] - self.cand_size[some][None, :], 0.0)
            out[some] += (slope * covered).sum(axis=0)
        return out

    def _gains_by_blocks(self, value: np.ndarray, block: int) -> np.ndarray:
        """NOTE [ Gains by sorted blocks ]: ``value`` per point, exact (no levels)."""
        n, g = self.weight.size, int(np.prod(self.shape))
        order = np.argsort(-value, kind="stable")
        desc = value[order]
        # every candidate gains from the first ``many`` points in that order, and only those
        many = np.searchsorted(-desc, -self.cand_size, side="left")
        nb = -(-n // block)
        key = (np.arange(n) // block) * g + self.point_flat[order]
        w = self.weight[order]
        sums = np.empty((2, nb, *self.shape))
        sums[0].ravel()[:] = np.bincount(key, weights=w, minlength=nb * g)
        sums[1].ravel()[:] = np.bincount(key, weights=w * desc, minlength=nb * g)
        for ax in range(1, sums.ndim):
            np.cumsum(sums, axis=ax, out=sums)
        full = many // block  # whole blocks; the prefix sums of blocks < full
        out = np.zeros(self.cand_flat.size)
        some = np.flatnonzero(full > 0)
        at = (full[some] - 1) * g + self.cand_flat[some]
        flat = sums.reshape(2, nb * g)
        out[some] = flat[1, at] - self.cand_size[some] * flat[0, at]
        # the rest: fewer than ``block`` points per candidate, compared one by one
        rest = np.flatnonzero(many > full * block)
        step = max(1, _GAIN_CHUNK // (4 * block))
        offset = np.arange(block, dtype=np.int32)
        pt = self.point[order].astype(np.int32)  # in value order: the rest are contiguous
        cand = self.cand.astype(np.int32)
        for lo in range(0, rest.size, step):
            c = rest[lo : lo + step]
            start = (full[c] * block).astype(np.int32)
            pos = np.minimum(start[:, None] + offset[None, :], n - 1)
            ok = offset[None, :] < (many[c] - start)[:, None]
            for d in range(pt.shape[1]):
                ok &= pt[pos, d] <= cand[c, d][:, None]
            part = np.where(ok, w[pos] * (desc[pos] - self.cand_size[c][:, None]), 0.0)
            out[c] += part.sum(axis=1)
        return out

    def covers(self, cells: np.ndarray) -> np.ndarray:
        """``(k, n)``: whether candidate ``cells[j]`` covers point ``i``."""
        corner = self.cand[np.asarray(cells, dtype=np.int64)]
        # input by input: 7x faster than one (k, n, D) comparison reduced over D (GSM8K, K = 16)
        out = corner[:, 0, None] >= self.point[None, :, 0]
        for d in range(1, corner.shape[1]):
            out &= corner[:, d, None] >= self.point[None, :, d]
        return out


def _cover(
    point: np.ndarray,
    cand: np.ndarray,
    cand_of_flat: np.ndarray,
    shape: tuple[int, ...],
    point_size: np.ndarray,
    most: int | None = None,
) -> np.ndarray:
    """Candidate ids that together cover every point (NOTE [ Cells within a size limit ]): with
    two inputs the fewest, from the staircase of the points no other dominates; with more, a
    greedy cover (each time the largest uncovered point, by the candidate over it that covers
    the most uncovered points; :meth:`Grid.build` then tries :func:`_fewest_cover`). ``most``:
    only the first that many (left to right along the staircase, or in the greedy's order)."""
    if point.shape[1] == 2:
        # the staircase: x rising, y falling (a point with a larger y at an x at or above its
        # own dominates it)
        order = np.lexsort((-point[:, 1], -point[:, 0]))  # x falling, y falling among ties
        y = point[order, 1]
        top = np.maximum.accumulate(y)
        keep = np.ones(y.size, dtype=bool)
        keep[1:] = y[1:] > top[:-1]
        stair = point[order[keep]][::-1]
        out: list[int] = []
        i = 0
        while i < len(stair) and len(out) != most:
            j, yi = i, stair[i, 1]
            while (
                j + 1 < len(stair)
                and cand_of_flat[np.ravel_multi_index((stair[j + 1, 0], yi), shape)] >= 0
            ):
                j += 1
            out.append(int(cand_of_flat[np.ravel_multi_index((stair[j, 0], yi), shape)]))
            i = j + 1
        return np.array(sorted(out), dtype=np.int64)
    left = np.ones(point.shape[0], dtype=bool)
    flat = np.ravel_multi_index(tuple(point.T), shape)
    cand_flat = np.ravel_multi_index(tuple(cand.T), shape)
    picked: list[int] = []
    while left.any() and len(picked) != most:
        p = int(np.flatnonzero(left)[np.argmax(point_size[left])])
        over = np.flatnonzero((cand >= point[p]).all(axis=1))
        # the uncovered points each candidate covers: one prefix sum of the grid per pick
        grid = np.zeros(shape, dtype=np.int64)
        grid.ravel()[flat[left]] = 1
        for ax in range(grid.ndim):
            np.cumsum(grid, axis=ax, out=grid)
        best = int(over[int(np.argmax(grid.ravel()[cand_flat[over]]))])
        picked.append(best)
        left &= ~(point <= cand[best]).all(axis=1)
    return np.array(sorted(picked), dtype=np.int64)


#: The exact cover with more than two inputs (:func:`_fewest_cover`): its largest model
#: (undominated points x maximal candidates) and the branch-and-bound nodes HiGHS may take (a
#: count, not seconds, so every rank gets the same cover).
COVER_MODEL, COVER_NODES = 4_000_000, 500


def _maximal(on: np.ndarray) -> np.ndarray:
    """Of the ``True`` points of the boolean grid ``on``, those no other ``True`` point is at
    least as long as in every input (flat indices): a point is dominated where the box above it,
    one step further along some input, holds one (suffix ORs, one per input)."""
    above = on.copy()
    for ax in range(on.ndim):
        above = np.flip(np.logical_or.accumulate(np.flip(above, ax), axis=ax), ax)
    dominated = np.zeros(on.shape, dtype=bool)
    for ax in range(on.ndim):
        step = [slice(None)] * on.ndim
        step[ax] = slice(1, None)
        head = [slice(None)] * on.ndim
        head[ax] = slice(None, -1)
        dominated[tuple(head)] |= above[tuple(step)]
    return np.flatnonzero(on & ~dominated)


def _fewest_cover(
    point: np.ndarray, cand: np.ndarray, cand_of_flat: np.ndarray, shape: tuple[int, ...]
) -> tuple[np.ndarray | None, bool]:
    """The fewest candidates covering every point, with more than two inputs (NOTE [ Cells
    within a size limit ]): a set cover of the points no other dominates by the candidates no
    other dominates, an integer program in SciPy's HiGHS, and whether HiGHS proved it the
    fewest; ``None`` where the model is larger than :data:`COVER_MODEL`, SciPy is missing, or
    HiGHS finds no cover within :data:`COVER_NODES` nodes."""
    try:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import csr_array
    except ImportError:
        return None, False
    grid = np.zeros(shape, dtype=bool)
    grid.ravel()[np.ravel_multi_index(tuple(point.T), shape)] = True
    top = np.stack(np.unravel_index(_maximal(grid), shape), axis=1)
    grid[:] = False
    grid.ravel()[np.ravel_multi_index(tuple(cand.T), shape)] = True
    best = np.stack(np.unravel_index(_maximal(grid), shape), axis=1)
    if top.shape[0] * best.shape[0] > COVER_MODEL:
        return None, False
    covers = (top[:, None, :] <= best[None, :, :]).all(axis=2)
    res = milp(
        np.ones(best.shape[0]),
        constraints=LinearConstraint(csr_array(covers.astype(np.float64)), lb=1.0),
        integrality=np.ones(best.shape[0]),
        bounds=Bounds(0.0, 1.0),
        options={"node_limit": COVER_NODES},
    )
    if res.x is None:
        return None, False
    picked = best[np.flatnonzero(res.x > 0.5)]
    cells = np.sort(cand_of_flat[np.ravel_multi_index(tuple(picked.T), shape)])
    return cells, bool(res.status == 0)


def coarse_values(
    rows: np.ndarray,
    counts: np.ndarray,
    limit: int,
    size: str = "sum",
    max_size: float | None = None,
    *,
    coarse: int | None = None,
    hists: list[LengthHistogram] | None = None,
) -> list[np.ndarray]:
    """Per-input grid coordinates whose product is about ``limit`` at most: every distinct length
    where that fits, else, for a grid of about ``coarse`` points (default ``limit``), the
    values the 1-D DP places per input (NOTE [ A coarsened grid's values ]; samples round up
    onto them for the plan). With ``max_size`` (of ``size``), also the lengths of the samples
    within it that no other dominates, or where they are too many of those the values would
    round past it, with fewer values to stay within ``limit`` (NOTE [ Cells within a size
    limit ]). ``hists``: :func:`marginals` of the rows, where the caller has them."""
    d = rows.shape[1]
    hists = marginals(rows, counts) if hists is None else hists
    exact = [h.values for h in hists]
    if int(np.prod([float(v.size) for v in exact])) <= limit:
        return exact
    per = max(2, int(min(limit, coarse or limit) ** (1.0 / d)))
    first = placed_values(hists, per)
    if max_size is None:
        return first
    fits = sizes_of(rows, size) <= max_size
    most = int(limit ** (1.0 / d))
    # the samples within it that no other dominates (with two inputs its staircase), where they
    # take at most half the values: every sample within it then rounds to at most one of them,
    # so the cells of the exact cover (and of the fewest lost) are on the grid too
    front = _undominated(rows[fits], most // 2)
    out = first
    while True:
        extra = front
        if extra is None:
            up = np.stack([out[k][np.searchsorted(out[k], rows[:, k])] for k in range(d)], 1)
            risk = fits & (sizes_of(up, size) > max_size)
            if not risk.any():
                return out
            # else those at risk no other at risk dominates: each then sits exactly, and a
            # sample one dominates rounds to at most its place (more values only lower the
            # places: none is newly at risk)
            extra = _undominated(rows[risk], most)
        if extra is not None:
            out = [np.union1d(out[k], extra[:, k]) for k in range(d)]
            grid = float(np.prod([float(v.size) for v in out]))
        else:  # too many: one length each, greedily (more inputs)
            fixed = _one_length_each(rows, fits, out, size, max_size, limit)
            if fixed is not None:
                return fixed
            grid = float(limit) * 2.0**d  # (half the values next)
        if grid <= limit:
            return out
        if per == 2:  # no room: the placed values alone (Grid.build then raises OverLimit)
            return first
        per = max(2, min(per - 1, int(per * (limit / grid) ** (1.0 / d))))
        out = placed_values(hists, per)


def _one_length_each(
    rows: np.ndarray,
    fits: np.ndarray,
    values: list[np.ndarray],
    size: str,
    max_size: float,
    limit: int,
) -> list[np.ndarray] | None:
    """``values`` with lengths added until no sample within ``max_size`` (``fits``) rounds past
    it: each time the one rounded highest gets its own length in the input that lowers its
    place the most; ``None`` once the grid would exceed ``limit``."""
    out = list(values)
    while True:
        up = np.stack([out[k][np.searchsorted(out[k], rows[:, k])] for k in range(len(out))], 1)
        placed = sizes_of(up, size)
        risk = np.flatnonzero(fits & (placed > max_size))
        if risk.size == 0:
            return out
        i = int(risk[np.argmax(placed[risk])])
        low = up[i].astype(np.float64) - rows[i]
        if size == "prod":
            low = low / up[i] * placed[i]
        k = int(np.argmax(low))
        out[k] = np.union1d(out[k], rows[i, k : k + 1])
        if float(np.prod([float(v.size) for v in out])) > limit:
            return None


def marginals(rows: np.ndarray, counts: np.ndarray) -> list[LengthHistogram]:
    """Each input's own histogram (``rows``: ``(M, D)`` lengths with ``counts``), exact.

    Example:
        >>> [h.counts.tolist() for h in marginals(np.array([[1, 5], [2, 5]]), np.array([1, 2]))]
        [[1, 2], [3]]
    """
    out = []
    small = float(counts.sum()) < 2.0**53  # (float sums of integer counts are exact below it)
    for k in range(rows.shape[1]):
        col = rows[:, k]
        lo, span = int(col.min()), int(col.max()) - int(col.min()) + 1
        if small and span <= 4 * col.size + 1024:
            # one dense counter per length: 884,815 rows, 1,999 lengths: 64 -> 4 ms per input
            acc = np.bincount(col - lo, weights=counts, minlength=span)
            at = np.flatnonzero(acc)
            out.append(LengthHistogram(at + lo, acc[at].astype(np.int64)))
        else:
            out.append(LengthHistogram.from_counts(col, counts))
    return out


def placed_values(
    hists: list[LengthHistogram], per: int, *, down: bool = False
) -> list[np.ndarray]:
    """NOTE [ A coarsened grid's values ]: ``per`` values per input (``hists``: each input's
    histogram, :func:`marginals`; its distinct lengths kept where they are no more), the
    shortest and the longest always among them: the 1-D optimal boundaries of that histogram,
    which round its lengths up least; with ``down``, those of the mirrored lengths, which round
    them *down* least (the bound's)."""
    out = []
    for hist in hists:
        values = hist.values
        if values.size <= per:
            out.append(values)
            continue
        top = values[-1]
        if down:
            hist = LengthHistogram(top - values[::-1], hist.counts[::-1])
        b = np.asarray(optimal(hist, per).boundaries, dtype=values.dtype)
        out.append(np.unique(np.concatenate([top - b if down else b, values[[0, -1]]])))
    return out


def _undominated(points: np.ndarray, most: int) -> np.ndarray | None:
    """The rows of ``points`` (``(n, D)``) that no other row dominates (at least as long in
    every input); ``None`` when there are more than ``most`` (they could not all be values of
    a grid of ``most ** D`` points)."""
    points = np.unique(points, axis=0)
    if points.shape[1] == 2:  # the staircase: x falling, y rising (as in :func:`_cover`)
        order = np.lexsort((-points[:, 1], -points[:, 0]))
        y = points[order, 1]
        keep = np.ones(y.size, dtype=bool)
        keep[1:] = y[1:] > np.maximum.accumulate(y)[:-1]
        top = points[order[keep]]
        return top if top.shape[0] <= most else None
    points = points[np.argsort(-points.sum(axis=1), kind="stable")]
    kept: list[np.ndarray] = []
    while points.shape[0]:  # the largest sum left: no row left or dropped dominates it
        if len(kept) == most:
            return None
        kept.append(points[0])
        points = points[~(points <= points[0]).all(axis=1)]
    return np.array(kept, dtype=np.int64).reshape(-1, points.shape[1])
