"""The exact joint plan: a facility-location integer program over the candidate cells, in HiGHS.

NOTE [ The joint integer program ]
Binary ``y_c`` opens candidate cell ``c``; ``x_ic`` sends grid point ``i`` to an open cell ``c``
covering it (one variable per covering pair); minimise ``Σ w_i · size(c) · x_ic`` subject to
``Σ_c x_ic = 1``, ``x_ic ≤ y_c`` and ``Σ y_c ≤ K``. The strong form (one ``x ≤ y`` row per
pair) has an LP relaxation that was measured to close the gap on most of these histograms.
Points covered by the same candidates are merged into one row (their cost depends on the cell
only). The model goes to HiGHS (SciPy's ``milp``, from sparse arrays: building it takes
milliseconds, where PuLP's objects took seconds) only when it has at most :data:`MAX_PAIRS`
covering pairs, or :data:`PAIRS_PER_SECOND` per second left of the time limit; HiGHS stops at
the limit with its own lower bound, which is kept when it beats ours. Larger histograms first
fix candidates out with the Lagrangian bound (NOTE [ Fixing candidates by the bound ] in
:mod:`._bound`); the program over the survivors is then exact for the whole grid.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bucketloader.strategies.joint._grid import Grid

#: Largest model (point, covering candidate) pairs handed to the solver ...
MAX_PAIRS = 20_000
#: ... or this many per second left of the time limit, when more.
PAIRS_PER_SECOND = 5_000


def num_pairs(grid: Grid, subset: np.ndarray | None = None) -> int:
    """Covering (point, candidate) pairs of ``subset`` (every candidate by default): the model's
    ``x`` variables before points with the same covering candidates merge (an upper bound on
    them), by one prefix sum of the grid's occupancy."""
    ids = np.arange(grid.cand.shape[0]) if subset is None else np.asarray(subset, np.int64)
    occ = np.zeros(grid.shape)
    occ.ravel()[grid.point_flat] = 1.0
    for ax in range(occ.ndim):
        np.cumsum(occ, axis=ax, out=occ)
    return int(occ.ravel()[grid.cand_flat[ids]].sum())


def solve_ilp(
    grid: Grid, k: int, start: np.ndarray, deadline: float, subset: np.ndarray | None = None
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Solve NOTE [ The joint integer program ] over every candidate or only ``subset`` (which
    must hold ``start``, the plan the caller keeps if the solver finds nothing better).

    Returns ``(cells or None, details)``: ``details["proved"]`` says whether HiGHS proved
    optimality (over the candidates given) by ``deadline`` (``time.perf_counter()``; building
    the model counts), ``details["bound"]`` is its lower bound on ``Σ w_i · size`` over those
    candidates (``-inf`` when it has none).
    """
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    ids = np.arange(grid.cand.shape[0]) if subset is None else np.asarray(subset, np.int64)
    full = grid.covers(ids)
    # points covered by the same candidates are one row (cost depends on the cell only)
    _, first, inv = np.unique(
        np.packbits(full, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    weight = np.bincount(inv.ravel(), weights=grid.weight)
    cover = full[:, first]
    ci, pi = np.nonzero(cover)
    ny, npair, nrow = ids.size, ci.size, first.size
    pair = np.arange(npair)
    # columns: y (ny), then x (npair); rows: send (nrow), open (npair), max_shapes (1)
    cost = np.concatenate([np.zeros(ny), weight[pi] * grid.cand_size[ids][ci]])
    send = sp.csr_matrix((np.ones(npair), (pi, ny + pair)), shape=(nrow, ny + npair))
    opened = sp.csr_matrix(
        (
            np.concatenate([np.ones(npair), -np.ones(npair), np.ones(ny)]),
            (np.concatenate([pair, pair, np.full(ny, npair)]),
             np.concatenate([ny + pair, ci, np.arange(ny)])),
        ),
        shape=(npair + 1, ny + npair),
    )  # fmt: skip
    upper = np.concatenate([np.zeros(npair), [float(k)]])
    # HiGHS reads its clock between steps (presolve, a simplex run, a cut round) that can
    # outlast the limit: it gets 90 % of the time left (measured overshoot up to 0.7 s at 30 s)
    left = 0.9 * (deadline - time.perf_counter())
    details: dict[str, Any] = {"proved": False, "bound": -np.inf, "variables": int(ny + npair)}
    if left <= 0.01:
        details["solver_status"] = "no time left"
        return None, details
    res = milp(
        cost,
        integrality=np.concatenate([np.ones(ny), np.zeros(npair)]),
        bounds=Bounds(0.0, 1.0),
        constraints=[LinearConstraint(send, 1.0, 1.0), LinearConstraint(opened, -np.inf, upper)],
        options={"time_limit": left},
    )
    details["solver_status"] = str(res.message)
    details["proved"] = bool(res.status == 0)
    dual = getattr(res, "mip_dual_bound", None)
    if res.status == 0 and res.fun is not None:
        dual = res.fun
    if dual is not None and np.isfinite(dual):
        details["bound"] = float(dual)
    if res.x is None:
        return None, details
    picked = ids[res.x[:ny] > 0.5]
    if picked.size == 0:
        return None, details
    return np.sort(picked).astype(np.int64), details
