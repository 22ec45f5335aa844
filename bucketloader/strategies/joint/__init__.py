"""Joint shapes: the K cells of several inputs with the least padding, with a certified bound.

For paired lengths (source and target, prompt and response, width and height) a *cell* is one
padded shape ``(c_1, ..., c_D)``; a sample fits a cell covering it in every input and goes to the
cheapest such cell (:func:`~bucketloader.boundaries.joint_assign`). :func:`solve_joint` picks at
most ``max_shapes`` cells minimising the padding over a joint histogram, counted per input
(``size="sum"``) or as elements of the product shape (``"prod"``). No per-input ``num_buckets``
is needed: the per-input boundaries are whatever the cells use.

How (one module per part):

* :mod:`._grid`: candidate cells (tight grid points; NOTE [ Candidate cells ]) and every
  candidate's gain at once by prefix sums (NOTE [ Gains by prefix sums ]);
* :mod:`._search`: greedy, then best swaps with Lloyd steps (NOTE [ Greedy, swap, Lloyd ]),
  and shakes of the plan in the time left (NOTE [ Shakes ], NOTE [ Every exchange at once ]);
* :mod:`._bound`: a Lagrangian lower bound (NOTE [ The Lagrangian bound ]);
* :mod:`._lp`: the LP rounds of the bound, in HiGHS (NOTE [ Why HiGHS for the LP ]);
* :mod:`._ilp`: the exact facility-location program for small histograms, in HiGHS or PuLP/CBC
  (NOTE [ The joint integer program ], NOTE [ Two solvers for the integer program ]).
* :mod:`._coverage`: the cells within a size limit covering the most samples, where fewer
  than the cover are allowed (NOTE [ Covering the most samples within a size limit ]);
* :mod:`._cert`: an offline certificate (pairs fixed against a target, then the program over
  the rest; NOTE [ Certifying a target by fixing pairs ]), used only by
  ``benchmarks/joint_cert.py``.

NOTE [ Joint time limit and fallbacks ]
``time_limit`` covers the whole call, from the moment :func:`solve_joint` (or :meth:`Joint.solve`,
which the samplers call with the lengths) starts: the histogram of the lengths, the grid, the
search, the bound, the LP, the integer program, the shakes (which start only with
:data:`SHAKE_MIN` of the limit left, NOTE [ Shakes ]) and each row's cell. What the histogram and
the grid took comes off the deadline, but the search and the bound get at least :data:`FLOOR` of
the limit after them, so a large histogram under a small limit still gets a searched plan (and
returns that much late). Every loop reads the clock before each step and starts one only when its
last measured cost still fits, and the solvers (HiGHS, or CBC for ``solver="pulp"``) get the time
left. What always runs on top is the greedy plan and one bound evaluation, so even a tiny limit
returns a valid plan with a valid bound (``status="time_limit"``), late by those fixed costs:
measured on GSM8K at 0.001-0.05 s limits, up to 0.1 s at load 1 and 0.29 s at load 3-7 (K = 16,
prod); at 5 s every solve of ``benchmarks/results/joint.md`` returned before its limit. After the
deadline only each row's cell is found (through its grid point: one lookup per row, tens of
milliseconds for 1,000,000 distinct rows) and the padding counted. Before, the clock started after
the histogram and stopped before that assignment, and both were slow: 1,000,000 pairs took
5.5-6.9 s at 5 s, triples up to 9.3 s (the histogram's sort of the rows up to 0.7 s, the
assignment up to 1 s; session 29), now 5.0-5.1 s (``benchmarks/results/joint_large.md``). The
clock stops while the solvers' modules are imported (``info["import_seconds"]``): a cold
``scipy.optimize`` took up to 6 s on a loaded machine, once per process, and is an import, not the
solve; counted, it would leave the first solve of every process the floor's plan. Nor does the
limit cover writing the plan to a cache (``cache=``) or, under ``torch.distributed``, the ranks'
waits for each other: the other ranks' for rank 0's plan (NOTE [ One joint plan for every rank ]),
and rank 0's, from its cache lookup (the key's hash included) until every rank has reached it
(counted, a rank started late took its delay off rank 0's search). ``solve_seconds`` is the call's
time the limit covers. Where gains are not exact by rows, each evaluation's cost is predicted before
it starts (NOTE [ Bounds without rows ] in :mod:`._bound`). A histogram with one input is solved
exactly by the 1-D DP (``"optimal"``), whatever the options. A grid of more than
:data:`._grid.MAX_GRID` points (three inputs, or very many distinct lengths) is pre-binned: the
cells sit on per-input values placed by the 1-D DP (``status="coarsened"``) and the bound comes from
grids of their own with every sample rounded *down* (a relaxation), so it stays certified
(NOTE [ A coarsened grid's values ] in :mod:`._grid`). ``max_shapes`` at least the number of
distinct rows gives every row its own cell (no padding).

NOTE [ One joint plan for every rank ]
A time limit makes the plan depend on the machine's speed, and ranks must agree on their
shapes. Under an initialised ``torch.distributed`` group of several ranks, the solve therefore
always goes through a :class:`~bucketloader.BucketCache` (a temporary one when none is given):
rank 0 solves and broadcasts the entry's JSON, every rank plans the same cells. Like the cache,
that is a collective: every rank builds the plan (as every rank builds its sampler).
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from bucketloader._dist import default_ranks
from bucketloader._validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_options,
    checks_options,
)
from bucketloader.boundaries import joint_assign, joint_padding, row_sizes, weighted_size
from bucketloader.histogram import JointHistogram, LengthHistogram, input_table
from bucketloader.solution import JointSolution
from bucketloader.strategies._lp_model import has_cbc, import_pulp
from bucketloader.strategies._registry import resolve_strategy
from bucketloader.strategies.joint._bound import lagrangian, lp_bound, survivors
from bucketloader.strategies.joint._coverage import most_covered
from bucketloader.strategies.joint._grid import (
    COARSE_GRID,
    MAX_GRID,
    Grid,
    OverLimit,
    TooFewCells,
    _cover,
    coarse_values,
    marginals,
    placed_values,
    sizes_of,
)
from bucketloader.strategies.joint._ilp import (
    MAX_PAIRS,
    SOLVERS,
    num_pairs,
    pairs_per_second,
    solve_ilp,
)
from bucketloader.strategies.joint._search import first_plan, greedy, improve, iterate, total

__all__ = [
    "Joint",
    "JointHistogram",
    "JointSolution",
    "OverLimit",
    "TooFewCells",
    "cover_most",
    "resolve_joint",
    "solve_joint",
]

#: The share of the time left after the search that the Lagrangian's bundle ascent gets before the
#: LP rounds (NOTE [ The LP bound by columns ]); with ``exact=False`` the shakes get the rest,
#: and a stall does not end the ascent (GSM8K, 6 s, K = 8 / 16: giving the bundle the LP's
#: share too moved the gaps 0.63 -> 0.43 and 1.74 -> 1.78 % (sum), 2.27 -> 2.20 and
#: 5.13 -> 5.88 % (prod), one run each at load 0.5: mixed, so the shakes keep theirs).
BUNDLE_SHARE = 0.5
#: ... and of Polyak's subgradient steps where gains are not exact by rows (NOTE [ Bounds
#: without rows ]): session 4's share, which measured better there than the bundle's.
SUBGRADIENT_SHARE = 0.1
#: ``time_limit``'s range in seconds: below a millisecond only the fixed steps (the grid, the
#: greedy plan, one bound evaluation) run anyway; ``inf`` is refused (a deadline must be a
#: number), so "no limit" is the largest value, about 11.6 days.
MIN_TIME, MAX_TIME = 1e-3, 1e6
#: Bump when the joint solver's answer for the same inputs changes (part of the cache key; 6:
#: under ``work_limit`` the shakes run every counted table, NOTE [ Work instead of seconds ]; 7:
#: under ``max_size`` a coarsened grid holds the undominated samples' lengths too, NOTE [ Cells
#: within a size limit ]; 8: with more than two inputs the cover there is the fewest cells; 9: a
#: coarsened grid's values placed by the 1-D DP, its bound on a ladder of its own grids, NOTE
#: [ A coarsened grid's values ] in :mod:`._grid`).
JOINT_FORMAT = 9
#: A coarsened grid's bound: the share of the time left that the coarser grid's ascent gets
#: first, and how many evaluations of the finer grid must be predicted to fit before it starts
#: (NOTE [ A coarsened grid's values ] in :mod:`._grid`).
LADDER_PROBE, LADDER_EVALS = 0.25, 20
#: The LP rounds' share of the time left after the bundle ascent; the rest goes to the search
#: from the LP's cells, the integer program, or the shakes (NOTE [ Shakes ]). 0.85 until the
#: shakes; at 0.7 four GSM8K K = 8/16 solves of 30 s (side by side, load 4) ended with the same
#: bounds (within 0.02 %) and plans 0.29 / 0.24 / 0.00 % lower and 0.11 % higher (shake luck).
LP_SHARE = 0.7
#: The first search's share of the time limit: the descents and swaps from the greedy and
#: lattice starts, cheapest first (NOTE [ The search under load ]; session 6 ended the
#: descents at this share too).
SEARCH = 0.45
#: The least share of the time limit the search and the bound get after the histogram and the
#: grid, however long those took (NOTE [ Joint time limit and fallbacks ]).
FLOOR = 0.2
#: The shakes start only when this share of the time limit is left (their first step's cost
#: is not known yet; NOTE [ Joint time limit and fallbacks ]).
SHAKE_MIN = 0.02


def solve_joint(
    lengths: Any,
    max_shapes: int,
    *,
    size: str = "sum",
    cache: Any = None,
    max_size: float | None = None,
    **options: Any,
) -> JointSolution:
    """At most ``max_shapes`` cells with the least padding, and a certified lower bound.

    Args:
        lengths: ``(N, D)`` lengths (D inputs), ``{name: lengths}`` (one input each, as the
            samplers take them) or a :class:`JointHistogram`.
        max_shapes: the shape budget K (>= 1).
        size: ``"sum"`` (padding per input, summed) or ``"prod"`` (padded elements of the
            product shape, e.g. height x width).
        cache: ``None`` (solve every time), ``True`` (the default
            :class:`~bucketloader.BucketCache`) or a cache: keyed by SHA256 of the histogram and
            every parameter.
        max_size: ``None`` (any cell), or the largest size (by ``size``) a cell may have, as a
            token budget needs (``max_tokens``: NOTE [ Cells within a size limit ]); every
            sample must be within it, and ``max_shapes`` at least the fewest cells within it
            that cover every sample (else :class:`ValueError` naming that count).
        **options: the solve's options, the fields of :class:`Joint` with their defaults:
            ``time_limit=5.0`` (seconds for the whole call: the histogram, the search, the
            bound and the integer program, not a first import of SciPy; NOTE [ Joint time
            limit and fallbacks ]; the best plan so far is returned with its gap when it runs
            out), ``tolerance=0.001`` (stop once the relative gap
            ``(objective - bound) / objective`` is at most this), ``exact=True`` (solve the LP
            relaxation and the integer program when the model is small enough and the gap is
            still above ``tolerance``) and ``solver="highs"`` (the integer program's solver:
            SciPy's HiGHS, or ``"pulp"``: PuLP's bundled CBC warm-started from the heuristic's
            plan; the LP rounds of the bound use HiGHS either way, NOTE [ Two solvers for the
            integer program ]) and ``work_limit=None`` (or a count of exchange tables for the
            shakes instead of the clock: the same cells on every machine, NOTE [ Work instead
            of seconds ]).

    Returns:
        A :class:`~bucketloader.solution.JointSolution` (``cells``, ``objective``,
        ``lower_bound``, ``gap``, ``status``).

    Example:
        >>> pairs = [[3, 4], [4, 3], [10, 12], [12, 10], [11, 11]]
        >>> sol = solve_joint(pairs, 2)
        >>> sol.cells.tolist(), sol.objective, sol.lower_bound, sol.status
        ([[4, 4], [12, 12]], 8, 8, 'optimal')
    """
    check_options("solve_joint", options, [f.name for f in fields(Joint)])
    return Joint(**options).solve(lengths, max_shapes, size=size, cache=cache, max_size=max_size)


def cover_most(lengths: Any, max_shapes: int, *, size: str = "sum", max_size: float) -> np.ndarray:
    """Which samples at most ``max_shapes`` cells within ``max_size`` hold, chosen to hold the
    most: where ``max_shapes`` is below the cells within it that cover every sample
    (:class:`TooFewCells`), the samples to plan so that the fewest are lost (NOTE [ Covering
    the most samples within a size limit ]). Exact with two inputs; a greedy choice with more.
    :func:`solve_joint` with that ``max_size`` plans the samples kept in ``max_shapes`` cells.

    Args:
        lengths: ``(N, D)`` lengths or ``{name: lengths}``, each sample's size (by ``size``)
            within ``max_size`` (else :class:`OverLimit`, as :func:`solve_joint` says).
        max_shapes: the number of cells K (>= 1).
        size: ``"sum"`` or ``"prod"``, as for :func:`solve_joint`.
        max_size: the largest size a cell may have.

    Returns:
        ``(N,)`` bool: the samples kept (held by the K cells).

    Example:
        >>> pairs = [[150, 20], [20, 150], [100, 100], [90, 90], [10, 10]]
        >>> cover_most(pairs, 1, max_size=200).tolist()
        [False, False, True, True, True]
    """
    k = check_int("max_shapes", max_shapes, minimum=1)
    size = check_choice("size", size, ("prod", "sum"))
    cap = check_float("max_size", max_size, minimum=1.0, maximum=math.inf)
    table = input_table(lengths) if isinstance(lengths, Mapping) else np.asarray(lengths)
    hist = JointHistogram.from_lengths(table)
    table = np.asarray(table, dtype=np.int64).reshape(-1, hist.num_inputs)

    def grid_of(keep: np.ndarray) -> Grid:
        rows, counts = hist.rows[keep], hist.counts[keep]
        values = coarse_values(rows, counts, MAX_GRID, size, cap, coarse=COARSE_GRID)
        return Grid.build(rows, counts, values, size, cap)  # (the plan's own grid)

    def held(cells: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.zeros(rows.shape[0], dtype=bool)
        for cell in cells:
            out |= (rows <= cell).all(axis=1)
        return out

    grid = grid_of(np.ones(hist.rows.shape[0], dtype=bool))
    cells = grid.lengths(most_covered(grid, k))
    keep = held(cells, hist.rows)
    out = held(cells, table)
    # the cover the plan's grid takes of them (a greedy one with more than two inputs, or on
    # a coarsened grid) can need more cells than the K that hold them: then the samples of its
    # first K cells too (whose own cover makes the same first picks; the staircase's exact
    # count never needs this)
    sub = grid_of(keep)
    if sub.cover.size > k:
        first = _cover(sub.point, sub.cand, sub.cand_of_flat, sub.shape, sub.point_size, k)
        out &= held(sub.lengths(first), table)
    return out


def _joint(sol: Any) -> JointSolution:
    if not isinstance(sol, JointSolution):
        raise TypeError(f"the cache returned {type(sol).__name__}, expected a JointSolution")
    return sol


def _solve(hist: JointHistogram, params: dict[str, Any], started: float) -> JointSolution:
    """The solve; ``started``: when the call began (``perf_counter``), the start of
    ``time_limit``'s clock, which stops during the imports below (NOTE [ Joint time limit and
    fallbacks ])."""
    importing = time.perf_counter()
    if params["exact"] and hist.rows.shape[1] > 1:
        # the solvers' modules, imported while the clock stops: a cold ``scipy.optimize``
        # took up to 6 s on a loaded machine, once per process, and is no part of the solve
        # (NOTE [ Joint time limit and fallbacks ])
        try:
            import scipy.optimize  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "the exact joint solver (exact=True, the default) needs SciPy's HiGHS "
                f"({exc}), a dependency of bucketloader: install it with pip install "
                "'scipy>=1.11', or pass exact=False (strategy=Joint(exact=False) to a sampler: "
                "the search and its bound need numpy only)"
            ) from exc
        if params["solver"] == "pulp" and not has_cbc(pulp := import_pulp()):
            raise ImportError(
                f"solve_joint(solver='pulp') runs PuLP's bundled CBC (warm-started from the "
                f"search's plan), which pulp {pulp.__version__} does not ship (PuLP 4 dropped "
                "it): use solver='highs' (the default: the same model in SciPy's HiGHS), or pip "
                "install 'pulp>=2.7,<4'"
            )
    now = time.perf_counter()
    start = started + (now - importing)  # (the imports left out)
    k, size = params["max_shapes"], params["size"]
    rows, counts = hist.rows, hist.counts
    info: dict[str, Any] = {"inputs": int(rows.shape[1]), "rows": int(rows.shape[0])}
    info["import_seconds"] = now - importing
    real = weighted_size(rows, counts, size)
    if rows.shape[1] == 1:
        cells, status = _one_input(rows, counts, k), "optimal"
        info["method"] = "dp"
        lower, which = None, joint_assign(rows, cells, size)
    else:
        cells, lower, status, which = _search_and_bound(rows, counts, params, start, info)
    if (which < 0).any():
        joint_padding(rows, counts, cells, size)  # (its error names the row)
    if hist.num_samples < 2**53:  # the samples per cell: float sums of integers, exact below it
        per_cell = np.bincount(which, weights=counts, minlength=cells.shape[0]).astype(np.int64)
        cells = cells[per_cell > 0]  # drop cells nobody uses
        held = [int(n) for n in per_cell[per_cell > 0]]
        objective = sum(s * n for s, n in zip(row_sizes(cells, size), held, strict=True)) - real
    else:
        held_mask = np.bincount(which, minlength=cells.shape[0]) > 0
        which = (np.cumsum(held_mask) - 1)[which]
        cells = cells[held_mask]
        objective = weighted_size(cells[which], counts, size) - real
    cells.setflags(write=False)
    lower_bound = objective if lower is None else min(objective, max(0, lower))
    if lower_bound == objective and status != "coarsened":
        status = "optimal"
    gap = (objective - lower_bound) / objective if objective else 0.0
    return JointSolution(
        cells=cells,
        strategy="joint",
        params=dict(params),
        objective=objective,
        lower_bound=lower_bound,
        padding_ratio=objective / real if real else 0.0,
        num_samples=hist.num_samples,
        status=status,
        gap=gap,
        info=info,
        solve_seconds=time.perf_counter() - start,
    )


def _one_input(rows: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    from bucketloader.strategies.optimal import optimal

    hist = LengthHistogram(rows[:, 0], counts)
    b = np.asarray(optimal(hist, k).boundaries, dtype=np.int64)
    used = np.unique(b[np.searchsorted(b, rows[:, 0])])
    out = used[:, None].copy()
    out.setflags(write=False)
    return out


def _search_and_bound(
    rows: np.ndarray, counts: np.ndarray, params: dict[str, Any], start: float, info: dict
) -> tuple[np.ndarray, int, str, np.ndarray]:
    """The cells (lexicographic order), the lower bound, the status and each row's cell."""
    k, size = params["max_shapes"], params["size"]
    limit = params["time_limit"]
    tol = params["tolerance"]
    cap = params.get("max_size")  # (a coarsened grid keeps every sample within it there)
    hists = marginals(rows, counts)  # (each input's own histogram: the grid's and the bound's)
    values = coarse_values(rows, counts, MAX_GRID, size, cap, coarse=COARSE_GRID, hists=hists)
    coarsened = any(v.size < h.num_values for v, h in zip(values, hists, strict=True))
    grid = Grid.build(rows, counts, values, size, cap)
    info.update(grid=int(np.prod(grid.shape)), candidates=int(grid.cand.shape[0]))
    if cap is not None:
        info["cover"] = int(grid.cover.size)
        if k < grid.cover.size:
            # (a coarsened grid without the staircase's lengths rounds the samples up: its
            # cover can need more cells than theirs)
            proved = grid.cover_exact and not coarsened
            raise TooFewCells(k, int(grid.cover.size), cap, exact=proved)
    const = float((grid.weight * grid.point_size).sum())
    t0 = time.perf_counter()
    # what the call took so far (the histogram, the grid) comes off the limit, down to a floor
    deadline = max(start + limit, t0 + FLOOR * limit)
    info["setup_seconds"] = t0 - start
    budget = deadline - t0
    work = params.get("work_limit")  # no clock decides the cells (NOTE [ Work instead of seconds ])
    # both starts' descents and swaps, cheapest first (NOTE [ The search under load ])
    cells, local, converged = first_plan(
        grid, k, math.inf if work is not None else t0 + SEARCH * budget
    )
    if work:
        # the count alone stops them: no patience (NOTE [ Work instead of seconds ])
        cells, info["shakes"] = iterate(grid, k, cells, math.inf, patience=math.inf, steps=work)
    if work is not None:
        deadline = time.perf_counter() + limit  # the bound's own time
    _, reach = grid.assign(cells)
    upper = total(grid, reach)
    info["search_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if coarsened:  # the bound of relaxations: every sample rounded down onto a grid's values
        lower, bound, info["bound_values"] = _ladder(rows, counts, hists, size, k, deadline, tol)
    else:
        share = BUNDLE_SHARE if grid.by_rows else SUBGRADIENT_SHARE
        soon = min(deadline, t0 + share * (deadline - t0))
        bound = lagrangian(grid, k, reach, upper, soon, tol, restart=not params["exact"])
        if upper - bound.value > max(tol * (upper - const), 0.5) and params["exact"]:
            lp_deadline = time.perf_counter() + LP_SHARE * (deadline - time.perf_counter())
            bound, seed = lp_bound(grid, k, cells, bound, upper, lp_deadline, tol)
            info["lp_rounds"] = bound.log
            if work is None and time.perf_counter() < deadline:
                # another search from the LP's cells and from the K largest gains at the
                # bound's reaches (a Lagrangian heuristic)
                again, known = ([], cells) if local else ([cells], None)
                starts = [*again, np.argsort(bound.gains)[-k:]]
                if seed is not None:
                    starts.insert(len(again), seed)
                soon = time.perf_counter() + 0.3 * (deadline - time.perf_counter())
                found, _ = _best_search(grid, k, starts, soon, known)
                _, got = grid.assign(found)
                if total(grid, got) < upper:
                    cells, upper = found, total(grid, got)
        lower = bound.value - const
    info.update(bound_iterations=bound.iterations, bound_seconds=time.perf_counter() - t0)
    status = "heuristic" if converged else "time_limit"
    pad = upper - const
    info["method"] = "search+lagrangian"
    subset, late = None, time.perf_counter() >= deadline
    if params["exact"] and not coarsened and pad - lower > max(tol * pad, 0.5):
        subset = _ilp_subset(grid, bound, k, upper, cells, deadline, params["solver"])
    left = deadline - time.perf_counter()
    open_gap = pad - lower > max(tol * pad, 0.5)
    if work is None and subset is None and open_gap and left > SHAKE_MIN * budget:
        # no integer program: the time left shakes the plan (NOTE [ Shakes ])
        t0 = time.perf_counter()
        found, info["shakes"] = iterate(grid, k, cells, deadline)
        info["shake_seconds"] = time.perf_counter() - t0
        _, got = grid.assign(found)
        if total(grid, got) < upper:
            cells, upper = found, total(grid, got)
            pad = upper - const
    if subset is not None:
        info["ilp_candidates"] = int(subset.size)
        t0 = time.perf_counter()
        picked, details = solve_ilp(grid, k, cells, deadline, subset, params["solver"])
        info.update(ilp_seconds=time.perf_counter() - t0, ilp=details, method="ilp")
        value = np.inf
        if picked is not None:
            _, got = grid.assign(picked)
            value = total(grid, got)
        if picked is not None and value <= upper and work is None:
            cells, upper = picked, value
        if details["proved"]:  # the solver's optimum (not the plan, under work_limit)
            lower = min(upper, value) - const
        else:
            # every plan better than ``upper`` uses only the survivors, whose optimum HiGHS bounds
            lower = max(lower, min(upper, details["bound"]) - const)
            if time.perf_counter() >= deadline:
                status = "time_limit"
    elif late:  # the shakes only use the time left (the search had converged)
        status = "time_limit"
    if coarsened:
        status = "coarsened"
    scale = max(1.0, abs(upper))
    lower_int = math.ceil(lower - 1e-10 * scale - 1e-6)  # float sums: never round up past it
    out = grid.lengths(cells)
    order = np.lexsort(out.T[::-1])
    out = out[order]
    out.setflags(write=False)
    # each row's cell through its grid point, as joint_assign rules (a cell on the grid's values
    # covers a row iff it covers the row's point; the same sizes, the first cell on ties)
    slot, _ = grid.assign(np.asarray(cells, dtype=np.int64)[order])
    return out, lower_int, status, slot[grid.row_point]


def _ladder(
    rows: np.ndarray,
    counts: np.ndarray,
    hists: list[LengthHistogram],
    size: str,
    k: int,
    deadline: float,
    tol: float,
) -> tuple[float, Any, int]:
    """NOTE [ A coarsened grid's values ] in :mod:`._grid`: the bound on the padding from a grid
    onto whose values every sample is rounded down (placed to round down least). With two
    inputs: half as many values per input as the plan's grid for a :data:`LADDER_PROBE` share
    of the time left before ``deadline``, then as many as the plan's where :data:`LADDER_EVALS`
    of its evaluations are predicted to fit, else the first grid's ascent resumed; with more
    (no bundle to resume), as many as the plan's until ``deadline``. The better bound, with its
    Lagrangian run and values per input (``hists``: each input's histogram, :func:`marginals`)."""
    d = rows.shape[1]
    real = float(np.dot(sizes_of(rows, size), counts))
    fine = max(2, int(min(COARSE_GRID, MAX_GRID) ** (1.0 / d)))
    per = max(2, fine // 2) if d == 2 else fine
    t0 = time.perf_counter()
    grid, reach, finest = _rounded_down(rows, counts, hists, per, size, k)
    t1 = time.perf_counter()
    share = LADDER_PROBE if per < fine else 1.0
    bound = lagrangian(grid, k, reach, total(grid, reach), t1 + share * (deadline - t1), tol)
    best = bound.value
    t2 = time.perf_counter()
    # the finer grid has about 2**d times the points: its set-up and evaluations too
    need = 2**d * ((t1 - t0) + LADDER_EVALS * (t2 - t1) / max(bound.iterations, 1))
    if not finest and per < fine and t2 + need <= deadline:
        grid, reach, _ = _rounded_down(rows, counts, hists, fine, size, k)
        fine_bound = lagrangian(grid, k, reach, total(grid, reach), deadline, tol)
        if fine_bound.value > best:
            return fine_bound.value - real, fine_bound, fine
    elif (bundle := bound.bundle) is not None and time.perf_counter() < deadline:
        bound = bundle.run(deadline, tol)  # (the best so far: never lower)
        best = max(best, bound.value)
    return best - real, bound, per


def _rounded_down(
    rows: np.ndarray, counts: np.ndarray, hists: list[Any], per: int, size: str, k: int
) -> tuple[Grid, np.ndarray, bool]:
    """The grid of every sample rounded down onto ``per`` values per input (placed to round
    down least; ``hists``: each input's histogram), the greedy plan's reaches there, and
    whether the values are the exact lengths (nothing rounded)."""
    values = placed_values(hists, per, down=True)
    low = np.stack(
        [
            values[j][np.searchsorted(values[j], rows[:, j], side="right") - 1]
            for j in range(len(values))
        ],
        axis=1,
    )
    grid = Grid.build(low, counts, values, size)
    _, reach = grid.assign(greedy(grid, k))
    return grid, reach, all(v.size == h.num_values for v, h in zip(values, hists, strict=True))


def _ilp_subset(
    grid: Grid,
    bound: Any,
    k: int,
    upper: float,
    cells: np.ndarray,
    deadline: float,
    solver: str,
) -> np.ndarray | None:
    """The bound's survivors, when the integer program over them fits the time left, else
    ``None`` (NOTE [ The joint integer program ])."""
    remaining = deadline - time.perf_counter()
    if remaining <= 0.05:
        return None
    subset = survivors(bound, k, upper, cells)
    fits = num_pairs(grid, subset) <= max(MAX_PAIRS, pairs_per_second(solver) * remaining)
    return subset if fits else None


def _best_search(
    grid: Grid,
    k: int,
    starts: list[np.ndarray],
    deadline: float,
    known: np.ndarray | None = None,
) -> tuple[np.ndarray, bool]:
    """The best plan of swaps + Lloyd steps from each start (NOTE [ Greedy, swap, Lloyd ]), or
    ``known`` (a plan no swap improves, not searched again) if none pads less."""
    best, best_value, converged = starts[0], np.inf, True
    if known is not None:
        best, best_value = known, total(grid, grid.assign(known)[1])
    for start in starts:
        cells, done = improve(grid, np.asarray(start, dtype=np.int64), k, deadline)
        converged = converged and done
        _, size = grid.assign(cells)
        value = total(grid, size)
        if value < best_value:
            best, best_value = cells, value
    return best, converged


@checks_options
@dataclass(frozen=True)
class Joint:
    """``strategy=Joint(...)`` for :class:`~bucketloader.BucketSampler` / ``BucketSpec.build``:
    the joint plan of several inputs with its options (``strategy="joint"`` is ``Joint()``),
    also the options of :func:`solve_joint`.

    It needs ``max_shapes=K`` and takes the place of ``num_buckets`` / ``boundaries``: the cells
    (and so each input's boundaries) come from :func:`solve_joint`, per group.

    Attributes:
        time_limit: seconds per solve, the histogram of the lengths included (NOTE [ Joint
            time limit and fallbacks ]).
        tolerance: stop once the relative gap is at most this.
        exact: try the LP relaxation and the integer program when the model is small.
        solver: the integer program's solver, ``"highs"`` or ``"pulp"``
            (NOTE [ Two solvers for the integer program ]).
        work_limit: ``None`` (the default: the clock bounds the search), or the number of
            exchange tables the shakes run (every one: up to about 30 ms each on GSM8K at
            K = 16), which makes the cells the same on every machine and load;
            ``time_limit`` then bounds the bound alone, after the search (NOTE [ Work instead
            of seconds ]).

    Example:
        >>> from bucketloader import BucketSampler
        >>> pairs = [[3, 4], [4, 3], [10, 12], [12, 10], [11, 11]]
        >>> s = BucketSampler(pairs, strategy=Joint(time_limit=1.0), max_shapes=2, batch_size=2)
        >>> s.shapes
        [(2, 4, 4), (2, 12, 12)]
    """

    time_limit: float = 5.0
    tolerance: float = 0.001
    exact: bool = True
    solver: str = "highs"
    work_limit: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        try:
            check_float("time_limit", self.time_limit, minimum=MIN_TIME, maximum=MAX_TIME)
        except (TypeError, ValueError) as exc:  # (the fix, which the generic check cannot name)
            raise type(exc)(
                f"{exc}, the solver's seconds per group (default 5.0); pass time_limit=1e6 for "
                "no limit, or work_limit=N for cells that do not depend on the clock"
            ) from None
        check_float("tolerance", self.tolerance, minimum=0.0, maximum=1.0)
        check_bool("exact", self.exact)
        check_choice("solver", self.solver, SOLVERS)
        if self.work_limit is not None:  # (a Python int: numpy's would stay in the field)
            limit = check_int("work_limit", self.work_limit, minimum=0, maximum=10**9)
            object.__setattr__(self, "work_limit", int(limit))

    def params(self, max_shapes: int, size: str, max_size: float | None = None) -> dict[str, Any]:
        """Every parameter that determines a joint solution, checked, in canonical form (the
        cache key includes all of them and :data:`JOINT_FORMAT`).

        ``solver`` is part of the key: two solvers that both prove optimality reach the same
        padding, but not always the same cells (ties), and before a proof their plans, bounds
        and statuses differ.

        Example:
            >>> Joint(time_limit=2).params(4, "prod")["time_limit"]
            2.0
        """
        params = {
            "exact": bool(self.exact),
            "format": JOINT_FORMAT,
            "max_shapes": check_int("max_shapes", max_shapes, minimum=1),
            "size": check_choice("size", size, ("prod", "sum")),
            "solver": self.solver,
            "time_limit": float(self.time_limit),
            "tolerance": float(self.tolerance),
        }
        if self.work_limit is not None:  # (absent by default: the keys written before it
            params["work_limit"] = int(self.work_limit)  # existed are still read)
        if max_size is not None:  # (absent by default too)
            params["max_size"] = check_float("max_size", max_size, minimum=1.0, maximum=math.inf)
        return params

    def solve(
        self,
        lengths: Any,
        max_shapes: int,
        *,
        size: str = "sum",
        cache: Any = None,
        max_size: float | None = None,
    ) -> JointSolution:
        """:func:`solve_joint` with these options.

        Example:
            >>> Joint(time_limit=1).solve([[3, 4], [4, 3], [10, 12]], 2).objective
            2
        """
        from bucketloader.solve import check_cache

        # the limit covers the whole call (NOTE [ Joint time limit and fallbacks ])
        started = time.perf_counter()
        # (a path given as cache= reached cache.get_or_solve: AttributeError 'str' object has
        # no attribute 'get_or_solve'; the 1-D solve names the fix; s23-rev)
        cache = check_cache(cache)
        params = self.params(max_shapes, size, max_size)
        if isinstance(lengths, JointHistogram):
            hist = lengths
        else:
            hist = JointHistogram.from_lengths(lengths)
        from bucketloader.cache import BucketCache

        ranks = "torch" in sys.modules and default_ranks()[0] > 1
        if (cache is None or cache is False) and not ranks:
            return _solve(hist, params, started)
        asked = time.perf_counter()  # (set again just before the lookup; solve() reads it then)

        def solve() -> JointSolution:
            # Under several ranks rank 0 solves once every rank has reached the lookup's
            # collective (NOTE [ One joint plan for every rank ]): that wait for the others is no
            # part of the solve, as the others' wait for rank 0 is not (s30-rev: a rank that
            # came 1.5 s late took 1.5 s off rank 0's search and bound, down to FLOOR)
            return _solve(hist, params, started + (time.perf_counter() - asked if ranks else 0))

        if cache is None or cache is False:  # NOTE [ One joint plan for every rank ]
            with tempfile.TemporaryDirectory(prefix="bucketloader-joint-") as tmp:
                fresh = BucketCache(tmp)
                asked = time.perf_counter()
                return _joint(fresh.get_or_solve(hist, "joint", params, solve))
        if cache is True:
            cache = BucketCache()
        asked = time.perf_counter()
        return _joint(cache.get_or_solve(hist, "joint", params, solve))


def resolve_joint(
    strategy: Any,
    *,
    max_shapes: int | None,
    num_buckets: Any,
    boundaries: Any,
    num_inputs: int,
    size: Any,
    shapes: Any = None,
) -> Joint | None:
    """The joint options a spec uses, or ``None`` for the per-input lattice.

    The joint plan is used for ``strategy="joint"`` / ``Joint(...)``, and by default for two or
    more inputs when ``max_shapes`` is given without ``num_buckets``, ``strategy`` or
    ``boundaries`` and ``size`` is ``"sum"`` or ``"prod"`` (a callable ``size`` keeps the lattice
    with the default ``num_buckets``).

    Example:
        >>> options = dict(boundaries=None, num_inputs=2, size="sum")
        >>> resolve_joint(None, max_shapes=8, num_buckets=None, **options).time_limit
        5.0
        >>> resolve_joint(None, max_shapes=8, num_buckets=[3, 3], **options) is None  # lattice
        True
    """
    if isinstance(strategy, type) and issubclass(strategy, Joint):
        # the class is callable, so it would pass for a 1-D strategy and fail on a histogram
        raise TypeError(
            f"strategy={strategy.__name__} is the options' class; pass an instance, "
            f"strategy={strategy.__name__}() (or {strategy.__name__}(time_limit=...)), or "
            "strategy='joint'"
        )
    if isinstance(strategy, Mapping) and any(
        isinstance(v, Joint) or (isinstance(v, str) and v == "joint") for v in strategy.values()
    ):
        raise ValueError(
            f"strategy={dict(strategy)!r} names the joint plan for one input, but it plans every "
            "input at once: pass it once, strategy='joint' (or Joint(...)), with max_shapes=K"
        )
    explicit = isinstance(strategy, Joint) or (isinstance(strategy, str) and strategy == "joint")
    if explicit and shapes is not None:  # (was "needs max_shapes", then "drop max_shapes")
        raise ValueError(
            "strategy='joint' chooses the cells itself; drop shapes=..., or drop strategy "
            "and max_shapes to batch at the shapes you give"
        )
    if not (explicit or strategy is None or callable(strategy) or isinstance(strategy, Mapping)):
        # a misspelt name or a value of another type: the list names "joint" too (strategy=5
        # listed every name but it; s28-user)
        resolve_strategy(strategy, also=("joint",))
    if not explicit:
        implicit = (
            strategy is None
            and num_buckets is None
            and boundaries is None
            and max_shapes is not None
            and num_inputs >= 2
            and isinstance(size, str)
            and size in ("prod", "sum")
        )
        return Joint() if implicit else None
    if max_shapes is None:
        raise ValueError(
            "strategy='joint' needs max_shapes=K, the number of shapes to plan; pass "
            "max_shapes=8 (for example)"
        )
    if num_buckets is not None or boundaries is not None:
        given = "num_buckets" if num_buckets is not None else "boundaries"
        raise ValueError(
            f"strategy='joint' chooses every input's boundaries itself; drop {given}=..., or "
            "use another strategy to fit per-input buckets"
        )
    if not (isinstance(size, str) and size in ("prod", "sum")):
        raise ValueError(
            f"strategy='joint' counts padding by size='sum' or size='prod', got size={size!r}; "
            "pass one of those, or use num_buckets=... with max_shapes for a callable size"
        )
    return strategy if isinstance(strategy, Joint) else Joint()
