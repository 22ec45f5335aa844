"""Boundaries from an integer program solved with PuLP (CBC by default).

The exact DP (``"optimal"``) is faster for the plain problem; the integer program earns its place
with constraints the Monge DP cannot take, here ``min_bucket_fraction`` (every bucket holds at least
that share of the samples), alongside ``pad_to_multiple_of``. The model is a path formulation over
buckets, pruned by DP bounds (see :mod:`._lp_model`); the DP's answer is the warm start and the
cross-check (``info["solution_from"]`` says which solution was returned), and the status never
claims more than the solver proved.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from bucketloader._types import COSTS
from bucketloader._validation import check_choice, check_float, check_int
from bucketloader.boundaries import padding_cost
from bucketloader.histogram import LengthHistogram
from bucketloader.strategies import _dense
from bucketloader.strategies._lp_model import (
    build_and_solve,
    default_solver,
    import_pulp,
    quiet_highs,
)
from bucketloader.strategies._registry import StrategyResult, register_strategy, strategy_input
from bucketloader.strategies.optimal import optimal

#: Models with at most this many feasible arcs are solved whole, without bound-based fixing.
_FULL_MODEL_ARCS = 5000


@register_strategy("lp")
def lp(
    hist: LengthHistogram,
    num_buckets: int,
    *,
    cost: str = "linear",
    pad_to_multiple_of: int = 1,
    min_bucket_fraction: float = 0.0,
    time_limit: float = 10.0,
    max_values: int = 1000,
    solver: Any = None,
    warm_start: bool = True,
) -> StrategyResult:
    """Least padding for at most ``num_buckets`` buckets under extra constraints, via PuLP.

    Args:
        hist: the length histogram (raw lengths are accepted too).
        num_buckets: at most this many buckets.
        cost: ``"linear"`` (``b - L``) or ``"quadratic"`` (``b² - L²``).
        pad_to_multiple_of: every boundary a multiple of this (the last one rounded up past the
            max).
        min_bucket_fraction: every bucket holds at least this share of the samples (0 to 1).
        time_limit: seconds the solver may run (the DP bounds before it are not counted); if it
            stops there, the result says so (``status="time_limit"`` with the gap to the DP's
            bound).
        max_values: above this many distinct lengths the histogram is coarsened (rounded up to a
            bin width) first, with a warning, and the result has ``status="coarsened"``. The
            dense bounds take O(k·U²) time and 8·U² bytes (8 MB at U = 1,000).
        solver: ``None`` (CBC bundled with PuLP before 4; with PuLP 4, HiGHS through
            ``highspy``), a solver name from ``pulp.listSolvers()`` or a
            PuLP solver object (used as given: set its own time limit; one whose
            ``available()`` is false is refused).
        warm_start: start the solver from the DP's solution.

    Example:
        >>> r = lp(LengthHistogram.from_lengths([1, 2, 9, 10]), 2)
        >>> r.boundaries.tolist(), r.status, r.info["objective"]
        ([2, 10], 'optimal', 2)
        >>> lp(LengthHistogram.from_lengths([1, 2, 9, 10]), 2, min_bucket_fraction=0.3).boundaries
        array([ 2, 10])
    """
    hist, num_buckets = strategy_input(hist, num_buckets)
    cost = check_choice("cost", cost, COSTS)
    pad_to_multiple_of = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
    fraction = check_float("min_bucket_fraction", min_bucket_fraction, minimum=0.0, maximum=1.0)
    time_limit = check_float("time_limit", time_limit, minimum=1e-3, maximum=1e6)
    max_values = check_int("max_values", max_values, minimum=2)
    if not isinstance(warm_start, (bool, np.bool_)):
        raise TypeError(f"warm_start must be True or False, got warm_start={warm_start!r}")
    solver_obj = _make_solver(solver, time_limit, bool(warm_start))
    quiet_highs(solver_obj)
    fine = (
        LengthHistogram.from_lengths(hist, bin_width=pad_to_multiple_of)
        if pad_to_multiple_of > 1
        else hist
    )
    work, width = _coarsen(fine, max_values, pad_to_multiple_of)
    min_count = math.ceil(round(fraction * fine.num_samples, 9))
    k = min(num_buckets, work.num_values)

    start = time.perf_counter()
    w = _dense.arc_costs(work.values, work.counts, cost, min_count)
    fwd = _dense.forward(w, k)
    incumbent = _dense.best_path(w, fwd)
    bound = float(fwd[k, -1])  # the DP over the same arcs: the incumbent's value
    keep = np.isfinite(w)
    if keep.sum() > _FULL_MODEL_ARCS:  # bound-based fixing (see _lp_model); small models: all
        slack = 1e-9 * abs(bound) + 1.0  # float rounding margin: keep rather than drop
        keep &= _dense.arc_lower_bounds(w, fwd, _dense.backward(w, k)) <= (bound + slack)
    bounds_seconds = time.perf_counter() - start

    start = time.perf_counter()
    path, details = build_and_solve(w, keep, k, incumbent, solver_obj)
    solve_seconds = time.perf_counter() - start

    cand = _boundaries(work, incumbent)
    best = padding_cost(work, cand, cost=cost)
    source = "dp-incumbent"
    if path is not None:
        mine = _boundaries(work, path)
        obj = padding_cost(work, mine, cost=cost)
        if obj <= best:
            cand, best, source = mine, obj, "solver"
    if min_count == 0:
        # cross-check with the exact (integer) DP: the model's float64 costs cannot separate
        # solutions whose padding differs below 2**-52 of the total (huge quadratic costs)
        exact = optimal(work, k, cost=cost)
        if exact.info["objective"] < best:
            cand, best, source = exact.boundaries, exact.info["objective"], "exact-dp"
    info: dict[str, Any] = {
        **details,
        "objective": padding_cost(hist, cand, cost=cost),
        "arcs_total": int(np.isfinite(w).sum()),
        "arcs_kept": int(keep.sum()),
        "min_count": int(min_count),
        "bounds_seconds": bounds_seconds,
        "solve_seconds": solve_seconds,
        "solution_from": source,
        "num_values": work.num_values,
    }
    if width > pad_to_multiple_of:
        info["bin_width"] = width
        # the exact unconstrained optimum on the uncoarsened histogram (a lower bound), measured
        # on the histogram as given, like the objective
        exact = padding_cost(hist, optimal(fine, num_buckets, cost=cost).boundaries, cost=cost)
        gap = (info["objective"] - exact) / info["objective"] if info["objective"] else 0.0
        info["lower_bound"] = exact
        return StrategyResult(cand, status="coarsened", gap=gap, info=info)
    if not details["proved"]:
        gap = (best - bound) / best if best else 0.0
        return StrategyResult(cand, status="time_limit", gap=max(gap, 0.0), info=info)
    return StrategyResult(cand, status="optimal", gap=0.0, info=info)


def _boundaries(hist: LengthHistogram, arcs: list[tuple[int, int]]) -> np.ndarray:
    return np.array([hist.values[j - 1] for _, j in arcs], dtype=np.int64)


def _coarsen(hist: LengthHistogram, max_values: int, pad_to_multiple_of: int) -> tuple[Any, int]:
    """``hist`` rounded up to the smallest bin width (a multiple of ``pad_to_multiple_of``) that
    leaves at most ``max_values`` distinct values; warns when it has to."""
    if hist.num_values <= max_values:
        return hist, pad_to_multiple_of
    span = hist.max - hist.min
    steps = max(1, -(-span // ((max_values - 1) * pad_to_multiple_of)))
    while True:
        width = steps * pad_to_multiple_of
        coarse = LengthHistogram.from_lengths(hist, bin_width=width)
        if coarse.num_values <= max_values:
            break
        steps += 1
    warnings.warn(
        f"lp: {hist.num_values} distinct lengths exceed max_values={max_values}; solving on "
        f"lengths rounded up to multiples of {width} ({coarse.num_values} values), so the result "
        "is exact only for that coarsened histogram (status 'coarsened'). Raise max_values, or "
        "use strategy='optimal' for the exact boundaries.",
        RuntimeWarning,
        stacklevel=3,
    )
    return coarse, width


def _make_solver(solver: Any, time_limit: float, warm_start: bool) -> Any:
    pulp = import_pulp()

    if solver is None:
        return default_solver(pulp, time_limit, warm_start)
    if isinstance(solver, str):
        available = pulp.listSolvers(onlyAvailable=True)
        if solver not in available:
            listed = ", ".join(repr(s) for s in sorted(available))
            raise ValueError(
                f"solver must be None, a PuLP solver object or one of the available solver names "
                f"{listed}, got solver={solver!r}"
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.getSolver(solver, msg=False, timeLimit=time_limit, warmStart=warm_start)
    if isinstance(solver, pulp.LpSolver):
        try:
            usable = solver.available()
        except NotImplementedError:  # (a solver class of the user's own that does not say)
            usable = True
        if not usable:  # (it failed inside PuLP: "cannot execute cbc")
            listed = ", ".join(repr(s) for s in sorted(pulp.listSolvers(onlyAvailable=True)))
            raise ValueError(
                f"solver={type(solver).__name__}(...) is not available here (its available() "
                f"is false: its program or package is missing); install it, or pass one of the "
                f"available solver names {listed or '(none)'} or solver=None"
            )
        return solver
    raise TypeError(
        f"solver must be None, a solver name or a PuLP solver object, got solver={solver!r}"
    )
