"""The exact joint plan: a facility-location integer program over the candidate cells, in HiGHS
or PuLP.

NOTE [ The joint integer program ]
Binary ``y_c`` opens candidate cell ``c``; ``x_ic`` sends grid point ``i`` to an open cell ``c``
covering it (one variable per covering pair); minimise ``Σ w_i · size(c) · x_ic`` subject to
``Σ_c x_ic = 1``, ``x_ic ≤ y_c`` and ``Σ y_c ≤ K``. The strong form (one ``x ≤ y`` row per pair)
has an LP relaxation that was measured to close the gap on most of these histograms. Points
covered by the same candidates are merged into one row (their cost depends on the cell only).
``x`` may stay continuous: with ``y`` integral, sending each row to its cheapest open cell is
optimal. The model is solved only when it has at most :data:`MAX_PAIRS` covering pairs, or
:data:`PAIRS_PER_SECOND` per second left of the time limit (a third of that for PuLP/CBC, slower
on the same model: NOTE [ Two solvers for the integer program ]); the solver stops at the limit
with its own lower bound, which is kept when it beats ours. Larger histograms first fix
candidates out with the Lagrangian bound (NOTE [ Fixing candidates by the bound ] in
:mod:`._bound`); the program over the survivors is then exact for the whole grid.

NOTE [ Two solvers for the integer program ]
``solver="highs"`` (the default) hands the model to HiGHS (SciPy's ``milp``) from sparse arrays:
building it takes milliseconds, but ``milp`` takes no starting solution. ``solver="pulp"``
builds the same model with PuLP's objects and solves it with PuLP's bundled CBC, warm-started
from our plan (``warmStart=True``, CBC's ``-mips`` file) with the time left (wall clock). CBC's
answer is read honestly: a proof only from an ``Optimal`` solution status (a plan found before
the limit is "integer feasible", not proved), a plan only from an optimal or integer-feasible
status (a stop before any plan leaves the LP relaxation's fractional values in the variables),
and its lower bound from the ``Lower bound:`` line of its log, printed to 3 decimals, so read
minus 0.001. Without a readable bound the LP/Lagrangian bound stands. HiGHS gets 90 % of the
time left (it reads its clock only between long steps; measured overshoot 0.7 s at 30 s). CBC
gets 90 % as its own limit too, but it ignores it in its first LP and in the warm start's
"reduced search" (measured: 27 s past a 0.8 s limit, Europarl 800 rows K=4, 52 thousand pairs,
loaded machine), so on POSIX it runs under a watchdog that kills it at the deadline: no plan
and no bound come back from a killed CBC, and ours stand. CBC is also given a third of HiGHS's
pairs per second (:func:`pairs_per_second`): on the same model it took 8-35 s where HiGHS took
1.6-2.9 s. The LP rounds of the bound (:mod:`._lp`) use HiGHS whatever ``solver`` says.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import warnings
from typing import Any, NamedTuple

import numpy as np

from bucketloader.strategies._lp_model import import_pulp
from bucketloader.strategies.joint._grid import Grid

#: The solvers of the integer program (``solve_joint(solver=...)``).
SOLVERS = ("highs", "pulp")
#: Largest model (point, covering candidate) pairs handed to the solver ...
MAX_PAIRS = 20_000
#: ... or this many per second left of the time limit, when more (HiGHS; PuLP a third).
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


def pairs_per_second(solver: str) -> float:
    """How many covering pairs per second left the ``solver`` is trusted with."""
    return PAIRS_PER_SECOND / 3 if solver == "pulp" else PAIRS_PER_SECOND


def solve_ilp(
    grid: Grid,
    k: int,
    start: np.ndarray,
    deadline: float,
    subset: np.ndarray | None = None,
    solver: str = "highs",
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Solve NOTE [ The joint integer program ] over every candidate or only ``subset`` (which
    must hold ``start``, the plan the caller keeps if the solver finds nothing better).

    Returns ``(cells or None, details)``: ``details["proved"]`` says whether the solver proved
    optimality (over the candidates given) by ``deadline`` (``time.perf_counter()``; building
    the model counts), ``details["bound"]`` is its lower bound on ``Σ w_i · size`` over those
    candidates (``-inf`` when it has none).
    """
    ids = np.arange(grid.cand.shape[0]) if subset is None else np.asarray(subset, np.int64)
    full = grid.covers(ids)
    # points covered by the same candidates are one row (cost depends on the cell only)
    _, first, inv = np.unique(
        np.packbits(full, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    weight = np.bincount(inv.ravel(), weights=grid.weight)
    ci, pi = np.nonzero(full[:, first])
    cost = weight[pi] * grid.cand_size[ids][ci]
    details: dict[str, Any] = {
        "solver": solver,
        "proved": False,
        "bound": -np.inf,
        "variables": int(ids.size + ci.size),
    }
    model = _Model(ids.size, first.size, ci, pi, cost, k)
    if solver == "pulp":
        slot, _ = grid.assign(start)
        local = np.searchsorted(ids, np.asarray(start, np.int64)[slot[first]])
        picked = _cbc(model, local, deadline, details)
    else:
        picked = _highs(model, deadline, details)
    if picked is None or picked.size == 0:
        return None, details
    return np.sort(ids[picked]).astype(np.int64), details


class _Model(NamedTuple):
    """The integer program of NOTE [ The joint integer program ], solver-neutral: ``ny``
    candidates (local ids), ``nrow`` merged rows, one pair per covering (row ``pi[n]``,
    candidate ``ci[n]``) costing ``cost[n]``, at most ``k`` cells open."""

    ny: int
    nrow: int
    ci: np.ndarray
    pi: np.ndarray
    cost: np.ndarray
    k: int


def _highs(model: _Model, deadline: float, details: dict[str, Any]) -> np.ndarray | None:
    """The model in HiGHS (``scipy.optimize.milp``); the local ids of the cells it opens."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    ny, nrow, ci, pi, cost, k = model
    npair = ci.size
    pair = np.arange(npair)
    # columns: y (ny), then x (npair); rows: send (nrow), open (npair), max_shapes (1)
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
    left = 0.9 * (deadline - time.perf_counter())
    if left <= 0.01:
        details["solver_status"] = "no time left"
        return None
    res = milp(
        np.concatenate([np.zeros(ny), cost]),
        integrality=np.concatenate([np.ones(ny), np.zeros(npair)]),
        bounds=Bounds(0.0, 1.0),
        constraints=[LinearConstraint(send, 1.0, 1.0), LinearConstraint(opened, -np.inf, upper)],
        # HiGHS stops at a relative gap of 1e-4 by default and calls that optimal: its plan can
        # then pad more than the optimum and its value is no bound (s7-jplan: "proved" 147,079
        # over a candidate set holding a 147,067 plan). A proof is asked to close the gap.
        options={"time_limit": left, "mip_rel_gap": 0.0},
    )
    details["solver_status"] = str(res.message)
    details["proved"] = bool(res.status == 0)
    dual = getattr(res, "mip_dual_bound", None)  # valid at any stop, proved or not
    if res.status == 0 and res.fun is not None:
        dual = res.fun if dual is None or not np.isfinite(dual) else min(dual, res.fun)
    if dual is not None and np.isfinite(dual):
        details["bound"] = float(dual)
    if res.status == 2:  # infeasible: no plan at all, so +inf bounds every one (the offline
        details["bound"] = np.inf  # certificate's fixed model; solve_ilp's holds its start)
    if res.x is None:
        return None
    return np.flatnonzero(res.x[:ny] > 0.5)


def _cbc(
    model: _Model, start: np.ndarray, deadline: float, details: dict[str, Any]
) -> np.ndarray | None:
    """The model in PuLP, solved by its bundled CBC warm-started from ``start`` (each row's
    cell in our plan, local ids); the local ids of the cells it opens
    (NOTE [ Two solvers for the integer program ])."""
    pulp = import_pulp()

    ny, nrow, ci, pi, cost, k = model
    prob = pulp.LpProblem("bucketloader_joint", pulp.LpMinimize)
    y = [pulp.LpVariable(f"y{c}", 0, 1, cat=pulp.LpBinary) for c in range(ny)]
    x = [pulp.LpVariable(f"x{n}", 0, 1) for n in range(ci.size)]
    prob += pulp.LpAffineExpression(list(zip(x, cost.tolist(), strict=True)))
    rows: list[list[Any]] = [[] for _ in range(nrow)]
    for v, i in zip(x, pi.tolist(), strict=True):
        rows[i].append((v, 1.0))
    for i, terms in enumerate(rows):
        prob += pulp.LpAffineExpression(terms) == 1, f"send{i}"
    for n, (v, c) in enumerate(zip(x, ci.tolist(), strict=True)):
        prob += pulp.LpAffineExpression([(v, 1.0), (y[c], -1.0)]) <= 0, f"open{n}"
    prob += pulp.LpAffineExpression([(v, 1.0) for v in y]) <= k, "max_shapes"
    opened = np.zeros(ny, dtype=bool)
    opened[start] = True
    for c, v in enumerate(y):
        v.setInitialValue(int(opened[c]))
    for v, c, i in zip(x, ci.tolist(), pi.tolist(), strict=True):
        v.setInitialValue(int(start[i] == c))
    left = deadline - time.perf_counter()
    if left <= 0.05:
        details["solver_status"] = "no time left"
        return None
    with tempfile.TemporaryDirectory(prefix="bucketloader-joint-") as tmp:
        log = os.path.join(tmp, "cbc.log")
        with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
            warnings.simplefilter("ignore", DeprecationWarning)
            options = {"msg": False, "timeLimit": 0.9 * left, "warmStart": True, "logPath": log}
            path = None
            if os.name == "posix" and not any(c.isspace() for c in sys.executable):
                path = _watchdog(tmp, pulp.PULP_CBC_CMD(msg=False).path, time.time() + left)
            if path is not None and os.access(path, os.X_OK):
                cbc = pulp.COIN_CMD(path=path, **options)
            else:  # no shebang, or a temporary folder mounted noexec: CBC's own limit only
                cbc = pulp.PULP_CBC_CMD(**options)
            cbc.tmpDir = tmp  # PuLP's model files too: removed with tmp even when CBC is killed
            try:
                prob.solve(cbc)
            except (pulp.PulpSolverError, OSError) as exc:  # killed, or CBC could not start
                late = time.perf_counter() >= deadline - 0.05
                details["solver_status"] = "killed at the time limit" if late else f"{exc}"
                return None
            try:
                with open(log, errors="replace") as f:
                    text = f.read()
            except OSError:  # CBC wrote no log: no bound from it
                text = ""
    status = pulp.LpStatus.get(prob.status, str(prob.status))
    sol = pulp.LpSolution.get(prob.sol_status, str(prob.sol_status))
    details["solver_status"] = f"{status} ({sol})"
    proved = prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal
    details["proved"] = bool(proved)
    feasible = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if proved:
        details["bound"] = float(pulp.value(prob.objective))
    else:
        found = re.search(r"^Lower bound:\s*([-+0-9.eE]+)\s*$", text, flags=re.MULTILINE)
        if found:
            details["bound"] = float(found.group(1)) - 1e-3  # printed to 3 decimals
    if not feasible:
        return None
    values = np.array([v.varValue if v.varValue is not None else 0.0 for v in y])
    return np.flatnonzero(values > 0.5)


def _watchdog(tmp: str, cbc: str, until: float) -> str:
    """An executable in ``tmp`` that runs ``cbc`` with its arguments and kills it at ``until``
    (``time.time()``): CBC reads its clock only between steps, and its first LP and the
    warm start's "reduced search" ran 13 s each past a 0.8 s limit on Europarl (52 thousand
    pairs, loaded machine). PuLP then finds no solution file and raises."""
    script = os.path.join(tmp, "cbc_until")
    with open(script, "w") as f:
        f.write(
            f"#!{sys.executable}\n"
            "import subprocess, sys, time\n"
            "try:\n"
            f"    run = subprocess.run([{cbc!r}, *sys.argv[1:]], timeout={until!r} - time.time())\n"
            "except subprocess.TimeoutExpired:\n"
            "    sys.exit(124)\n"
            "sys.exit(run.returncode)\n"
        )
    os.chmod(script, 0o755)
    return script
