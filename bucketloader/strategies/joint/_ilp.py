"""The exact joint plan: a facility-location integer program over the candidate cells, in PuLP.

NOTE [ The joint integer program ]
Binary ``y_c`` opens candidate cell ``c``; ``x_ic`` sends grid point ``i`` to an open cell ``c``
covering it (one variable per covering pair); minimise ``Σ w_i · size(c) · x_ic`` subject to
``Σ_c x_ic = 1``, ``x_ic ≤ y_c`` and ``Σ y_c ≤ K``. The strong form (one ``x ≤ y`` row per
pair) has an LP relaxation that was measured to close the gap on these histograms, so CBC
mostly proves the warm start. Points covered by the same candidates are merged into one row
(their cost depends on the cell only). The model is built only when it has at most
:data:`MAX_PAIRS` covering pairs, or :data:`PAIRS_PER_SECOND` per second left of the time
limit (PuLP builds about 30,000 variables a second). Larger histograms first fix candidates
out with the Lagrangian bound (NOTE [ Fixing candidates by the bound ] in :mod:`._bound`); the
program over the survivors is then exact for the whole grid.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from bucketloader.strategies.joint._grid import Grid

#: Largest model (point, covering candidate) pairs handed to the solver ...
MAX_PAIRS = 20_000
#: ... or this many per second left of the time limit, when more.
PAIRS_PER_SECOND = 5_000


def num_pairs(grid: Grid, subset: np.ndarray | None = None) -> int:
    """Covering (row, candidate) pairs, the model's ``x`` variables: points with the same
    covering candidates make one row."""
    ids = np.arange(grid.cand.shape[0]) if subset is None else np.asarray(subset, np.int64)
    if ids.size > 4096:
        return sum(int(grid.covers(ids[lo : lo + 512]).sum()) for lo in range(0, ids.size, 512))
    cover = grid.covers(ids)
    _, first = np.unique(np.packbits(cover, axis=0).T, axis=0, return_index=True)
    return int(cover[:, first].sum())


def solve_ilp(
    grid: Grid, k: int, start: np.ndarray, deadline: float, subset: np.ndarray | None = None
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Solve NOTE [ The joint integer program ] from the warm start ``start`` (candidate ids),
    over every candidate or only ``subset`` (which must hold ``start``).

    Returns ``(cells or None, details)``; ``details["proved"]`` says whether CBC proved
    optimality (over the candidates given) by ``deadline`` (``time.perf_counter()``; building
    the model counts).
    """
    import pulp

    ids = np.arange(grid.cand.shape[0]) if subset is None else np.asarray(subset, np.int64)
    full = grid.covers(ids)
    # points covered by the same candidates are one row (cost depends on the cell only)
    _, first, inv = np.unique(
        np.packbits(full, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    weight = np.bincount(inv.ravel(), weights=grid.weight)
    cover = full[:, first]
    ci, pi = np.nonzero(cover)
    ci = ids[ci]
    prob = pulp.LpProblem("bucketloader_joint", pulp.LpMinimize)
    add = prob.add_variable if hasattr(prob, "add_variable") else None

    def var(name: str) -> Any:
        if add is not None:
            return add(name, 0, 1, cat=pulp.LpBinary)
        return pulp.LpVariable(name, 0, 1, cat=pulp.LpBinary)  # pragma: no cover - older PuLP

    used = np.unique(ci)
    y = {int(c): var(f"y_{c}") for c in used}
    x = [var(f"x_{c}_{i}") for c, i in zip(ci.tolist(), pi.tolist(), strict=True)]
    cost = (weight[pi] * grid.cand_size[ci]).tolist()
    prob += pulp.LpAffineExpression(list(zip(x, cost, strict=True)))
    rows: list[list[Any]] = [[] for _ in range(first.size)]
    for v, i in zip(x, pi.tolist(), strict=True):
        rows[i].append(v)
    for i, vs in enumerate(rows):
        prob += pulp.LpAffineExpression([(v, 1.0) for v in vs]) == 1, f"send_{i}"
    for n, (v, c) in enumerate(zip(x, ci.tolist(), strict=True)):
        prob += pulp.LpAffineExpression([(v, 1.0), (y[c], -1.0)]) <= 0, f"open_{n}"
    prob += pulp.lpSum(y.values()) <= k, "max_shapes"
    slot, _ = grid.assign(start)
    slot = slot[first]
    chosen = set(start.tolist())
    for c, v in y.items():
        v.setInitialValue(1 if c in chosen else 0)
    for v, c, i in zip(x, ci.tolist(), pi.tolist(), strict=True):
        v.setInitialValue(1 if start[slot[i]] == c else 0)
    with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        left = max(deadline - time.perf_counter(), 0.01)
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=left, warmStart=True)
    prob.solve(solver)
    proved = (
        prob.status == pulp.LpStatusOptimal
        and getattr(prob, "sol_status", pulp.LpSolutionOptimal) == pulp.LpSolutionOptimal
    )
    picked = [c for c, v in y.items() if v.varValue is not None and v.varValue > 0.5]
    details = {
        "solver_status": pulp.LpStatus.get(prob.status, str(prob.status)),
        "proved": bool(proved),
        "variables": len(x) + len(y),
    }
    if not picked:
        return None, details
    return np.array(sorted(picked), dtype=np.int64), details
