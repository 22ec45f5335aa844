"""The joint plan's integer program in two other solvers: SCIP (PySCIPOpt) and OR-Tools CP-SAT.

Neither solver is a dependency of bucketloader, of its tests or of its other benchmarks: they
are measured here, offline, to learn whether the optimum of the three GSM8K cases above 1 % of
their certified bound (``benchmarks/results/joint.md``), or of their coarsened versions
(``benchmarks/results/joint_gap.md``), can be proved at all by a solver family other than
HiGHS / CBC, and how far the 5 s plans are from it. Three steps; the first needs bucketloader
(the project's venv), the second only numpy and the solver, so it runs from a throwaway venv::

    python3 -m venv /tmp/venv-solve
    /tmp/venv-solve/bin/pip install numpy pyscipopt ortools
    # 1. the models and the 5 s plans (project venv); again with --fixed for the fixed models
    .venv/bin/python benchmarks/joint_external.py export --dir /tmp/jx \\
        --cases 16:prod:8,8:prod:8,6:prod:8,6:prod:16
    .venv/bin/python benchmarks/joint_external.py export --dir /tmp/jx --fixed \\
        --cases 16:prod:8,8:prod:8,6:prod:8,6:prod:16
    # 2. each case and solver, niced, one process each, under a memory limit
    (ulimit -v 8000000; nice -n 10 /tmp/venv-solve/bin/python benchmarks/joint_external.py \\
        solve --dir /tmp/jx --case 6:prod:8 --solver scip --model chain --seconds 540 \\
        [--fixed] --records /tmp/jx/records.jsonl)
    # 3. the table
    .venv/bin/python benchmarks/joint_external.py table --dir /tmp/jx \\
        --records /tmp/jx/records.jsonl --command "..."

Writes ``benchmarks/results/joint_external.md``. A case is ``s:size:K``: GSM8K's lengths
rounded up to multiples of ``s`` tokens (``s = 1``: the real histogram), ``size`` ``sum`` or
``prod``, ``K`` cells. The model is NOTE [ The joint integer program ] in
``bucketloader/strategies/joint/_ilp.py`` over every tight candidate (points covered by the same
candidates merged into one row; every cost an exact integer), in one of two forms:

* ``pairs``: binaries ``y_c``, one continuous ``x`` per covering (row, cell) pair,
  ``Σ_c x_ic = 1``, ``x_ic <= y_c``, ``Σ y <= K`` (the model HiGHS solves);
* ``chain``: per row ``i`` its covering sizes ``D_1 < ... < D_m`` and one binary ``z_ij``
  ("every covering cell of size at most ``D_j`` is closed"), ``z_i1 + Σ_{size D_1} y >= 1``,
  ``z_ij - z_i(j-1) + Σ_{size D_j} y >= 0``, ``-z_i(m-1) + Σ_{size D_m} y >= 0``, cost
  ``D_1 + Σ_j (D_(j+1) - D_j) z_ij`` (each point at its cheapest open cell; Elloumi's p-median
  formulation, same LP value, one literal per pair and a clause per size: CP-SAT's natural form).

``--fixed``: the same over only the candidates and pairs that a plan padding less than the 5 s
plan may use (NOTE [ Certifying a target by fixing pairs ] in ``_cert.py`` at the explicit LP's
duals: the model HiGHS was given in ``joint_gap.md``); its optimum, where below the 5 s plan, is
the optimum, so the bound on every plan is the lesser of the 5 s plan and the solver's bound.

Both solvers start from the 5 s plan (``solve_joint(time_limit=5)``; not in a fixed model,
which excludes it): SCIP as a first solution, CP-SAT as a hint. SCIP runs single-threaded at
its defaults; CP-SAT on 2 workers with its ``max_lp`` worker (the full LP; at 2 workers its
portfolio has only ``default_lp``, whose LP lacks the clauses: see :data:`LINEARIZATION`).
Every plan a solver returns is checked here: its padding is recomputed from the arrays (each
row at its cheapest open covering cell), and that padding is what the table shows. A solver's
dual bound is on the model's optimum, which is the optimum over all plans
(the candidates keep every optimum: NOTE [ Candidate cells ]).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "joint_external.md"
INSTALL = (
    "this step needs {what}, which is not a dependency of bucketloader: install it in a "
    "throwaway venv (python3 -m venv /tmp/venv-solve && /tmp/venv-solve/bin/pip install numpy "
    "pyscipopt ortools) and run this step with /tmp/venv-solve/bin/python"
)


def _case_name(case: str) -> tuple[int, str, int]:
    s, size, k = case.split(":")
    if size not in ("sum", "prod") or int(s) < 1 or int(k) < 1:
        raise SystemExit(f"--cases: a case is s:size:K (s >= 1, sum or prod, K >= 1), got {case}")
    return int(s), size, int(k)


def _file(folder: Path, case: str, fixed: bool = False) -> Path:
    return folder / f"gsm8k_{case.replace(':', '_')}{'_fixed' if fixed else ''}.npz"


# -- 1. export (bucketloader) ------------------------------------------------------------------
def export(folder: Path, cases: list[str], plan_seconds: float, fixed: bool) -> None:
    """The model of each case and its 5 s plan, as arrays in ``folder``; with ``fixed``, also
    the model over the pairs that the explicit LP's duals leave against the 5 s plan."""
    sys.path.insert(0, str(ROOT))
    from benchmarks._data import DATA, FILES
    from bucketloader.strategies.joint import JointHistogram, solve_joint
    from bucketloader.strategies.joint._grid import MAX_GRID, Grid, coarse_values

    folder.mkdir(parents=True, exist_ok=True)
    table = np.loadtxt(DATA / FILES["gsm8k"], dtype=np.int64)
    for case in cases:
        s, size, k = _case_name(case)
        hist = JointHistogram.from_lengths(-(-table // s))
        values = coarse_values(hist.rows, hist.counts, MAX_GRID)
        grid = Grid.build(hist.rows, hist.counts, values, size)
        if not all(np.array_equal(v, h) for v, h in zip(values, _distinct(hist.rows), strict=True)):
            raise SystemExit(f"{case}: the grid is coarsened, so its model is not the plan's")
        const = float((grid.weight * grid.point_size).sum())
        if fixed and _file(folder, case).exists():  # against the 5 s plan exported before
            _export_fixed(folder, case, grid, k, _load(folder, case)["plan_padding"] + const)
            continue
        t0 = time.perf_counter()
        sol = solve_joint(hist, k, size=size, time_limit=plan_seconds)
        seconds = time.perf_counter() - t0
        idx = np.stack([np.searchsorted(values[d], sol.cells[:, d]) for d in range(2)], axis=1)
        plan = grid.cand_of_flat[np.ravel_multi_index(tuple(idx.T), grid.shape)]
        if (plan < 0).any():
            raise SystemExit(f"{case}: a cell of the 5 s plan is not a tight candidate")
        ids = np.arange(grid.cand.shape[0])
        # points covered by the same candidates are one row (in chunks of points: the real
        # histogram's (candidates, points) table is 50 MB as bools, its pairs 29.6 million)
        full = grid.covers(ids)
        _, first, inv = np.unique(
            np.packbits(full, axis=0).T, axis=0, return_index=True, return_inverse=True
        )
        weight = np.bincount(inv.ravel(), weights=grid.weight)
        rows_ci, rows_pi = np.nonzero(full[:, first])
        del full
        np.savez_compressed(
            _file(folder, case),
            weight=np.rint(weight).astype(np.int64),
            size=np.rint(grid.cand_size).astype(np.int64),
            pi=rows_pi.astype(np.int32),
            ci=rows_ci.astype(np.int32),
            k=k,
            const=np.int64(round(const)),
            plan=np.sort(plan).astype(np.int64),
            plan_padding=np.int64(sol.objective),
            plan_bound=np.int64(sol.lower_bound),
            plan_seconds=seconds,
            cells=grid.lengths(ids).astype(np.int64),
            points=grid.weight.size,
        )
        model = _load(folder, case)
        check = _padding(model, model["plan"])
        if check != int(sol.objective):
            raise SystemExit(
                f"{case}: the model prices the 5 s plan at {check}, not {sol.objective}"
            )
        print(
            f"{case}: {grid.weight.size} points, {first.size} rows, {ids.size} candidates, "
            f"{rows_ci.size:,} pairs; 5 s plan {sol.objective:,} (bound {sol.lower_bound:,}, "
            f"{seconds:.1f} s)",
            flush=True,
        )
        if fixed:
            _export_fixed(folder, case, grid, k, float(sol.objective) + const)


def _export_fixed(folder: Path, case: str, grid: Any, k: int, upper: float) -> None:
    """The model over the candidates and pairs a plan padding less than ``upper`` (on ``Σ w
    size``) may use, by NOTE [ Certifying a target by fixing pairs ] at the explicit LP's
    duals (``benchmarks/joint_gap.py``, where HiGHS was given the same model)."""
    from benchmarks.joint_gap import explicit_lp
    from bucketloader.strategies.joint._bound import Bound, evaluate
    from bucketloader.strategies.joint._cert import fix_pairs

    _, reach = explicit_lp(grid, k, 600)
    value, gains, reach = evaluate(grid, reach, k)
    ids, keep = fix_pairs(grid, [Bound(value, reach, gains, 0)], k, upper - 0.5)
    if not keep.any(axis=0).all():
        print(f"{case}: no plan is below the 5 s plan (a point has no pair left)", flush=True)
        return
    _, first, inv = np.unique(
        np.packbits(keep, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    weight = np.bincount(inv.ravel(), weights=grid.weight)
    ci, pi = np.nonzero(keep[:, first])
    full = dict(np.load(_file(folder, case)))
    full.update(
        weight=np.rint(weight).astype(np.int64),
        size=np.rint(grid.cand_size[ids]).astype(np.int64),
        pi=pi.astype(np.int32),
        ci=ci.astype(np.int32),
        cand=ids.astype(np.int64),
        plan=np.zeros(0, np.int64),  # (the 5 s plan is not below itself: no start here)
    )
    np.savez_compressed(_file(folder, case, fixed=True), **full)
    print(f"{case} fixed: {first.size} rows, {ids.size} candidates, {ci.size:,} pairs", flush=True)


def _distinct(rows: np.ndarray) -> list[np.ndarray]:
    return [np.unique(rows[:, d]) for d in range(rows.shape[1])]


# -- the arrays --------------------------------------------------------------------------------
def _load(folder: Path, case: str, fixed: bool = False) -> dict[str, Any]:
    with np.load(_file(folder, case, fixed)) as f:
        out = {name: f[name] for name in f.files}
    for name in ("k", "const", "plan_padding", "plan_bound", "points"):
        out[name] = int(out[name])
    out["plan_seconds"] = float(out["plan_seconds"])
    out["rows"] = int(out["weight"].size)
    # pairs by row, then by size (the chain model and the pricing of a plan read them so)
    order = np.lexsort((out["size"][out["ci"]], out["pi"]))
    out["pi"], out["ci"] = out["pi"][order], out["ci"][order]
    out["ptr"] = np.searchsorted(out["pi"], np.arange(out["rows"] + 1))
    return out


def _padding(model: dict[str, Any], cells: np.ndarray) -> int:
    """The padding of the plan opening ``cells``: each row at its cheapest open covering cell
    (``-1`` when a row has none)."""
    opened = np.zeros(model["size"].size, dtype=bool)
    opened[np.asarray(cells, np.int64)] = True
    cost = np.where(opened[model["ci"]], model["size"][model["ci"]], np.iinfo(np.int64).max)
    best = np.minimum.reduceat(cost, model["ptr"][:-1])
    if (best == np.iinfo(np.int64).max).any():
        return -1
    return int((model["weight"] * best).sum()) - model["const"]


def _levels(model: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair, its size level within its row (0 for the cheapest covering size), per row the
    number of levels, and per (row, level) the size: ``(level, count, level_size)`` with
    ``level_size`` flat, row by row."""
    size = model["size"][model["ci"]]
    new = np.ones(size.size, dtype=bool)
    new[1:] = (size[1:] != size[:-1]) | (model["pi"][1:] != model["pi"][:-1])
    start = np.zeros(size.size, dtype=bool)
    start[model["ptr"][:-1]] = True
    cum = np.cumsum(new)
    level = cum - cum[model["ptr"][:-1]][model["pi"]]
    count = level[model["ptr"][1:] - 1] + 1
    return level, count, size[new]


# -- 2. solve (numpy + the solver) -------------------------------------------------------------
def solve(
    folder: Path, case: str, solver: str, form: str, seconds: float, hint: bool, fixed: bool
) -> dict:
    model = _load(folder, case, fixed)
    hint = hint and model["plan"].size > 0
    t0 = time.perf_counter()
    if solver == "scip":
        out = _scip(model, form, seconds, hint)
    else:
        out = _cpsat(model, form, seconds, hint)
    out["wall"] = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["maxrss_mb"] = usage.ru_maxrss / 1024
    out["cpu_s"] = usage.ru_utime + usage.ru_stime  # the machine is shared: wall time is not
    found = out.pop("opened", None)
    if found is not None and fixed:  # the fixed model's local candidate ids
        found = model["cand"][np.asarray(found, np.int64)]
    # every plan priced on the whole model (the fixed one's rows lack pairs)
    whole = _load(folder, case) if fixed else model
    out["plan"] = _padding(whole, found) if found is not None and len(found) else None
    out["cells"] = [] if found is None else sorted(int(c) for c in found)
    out.update(case=case, solver=solver, form=form, seconds=seconds, hint=hint, fixed=fixed)
    out["load"] = os.getloadavg()[0]
    out["date"] = time.strftime("%Y-%m-%d %H:%M")
    return out


def _scip(model: dict[str, Any], form: str, seconds: float, hint: bool) -> dict:
    try:
        import pyscipopt
    except ImportError:
        raise SystemExit(INSTALL.format(what="pyscipopt")) from None
    m = pyscipopt.Model()
    if not os.environ.get("JOINT_EXTERNAL_LOG"):
        m.hideOutput()
    m.setParam("limits/time", seconds)
    m.setParam("limits/memory", 5500)
    m.setParam("parallel/maxnthreads", 1)
    size, ci, pi, ptr, w = model["size"], model["ci"], model["pi"], model["ptr"], model["weight"]
    t0 = time.perf_counter()
    y = [m.addVar(vtype="B", name=f"y{c}") for c in range(size.size)]
    m.addCons(pyscipopt.quicksum(y) <= model["k"])
    start = _start(model)
    sol_values: list[tuple[Any, float]] = []
    if form == "pairs":
        x = [
            m.addVar(lb=0.0, ub=1.0, obj=float(w[i] * size[c])) for c, i in zip(ci, pi, strict=True)
        ]
        for i in range(model["rows"]):
            m.addCons(pyscipopt.quicksum(x[n] for n in range(ptr[i], ptr[i + 1])) == 1)
        for n, c in enumerate(ci):
            m.addCons(x[n] - y[c] <= 0)
        sol_values = [(x[n], float(start["pair"][n])) for n in range(ci.size)]
    else:
        level, count, level_size = _levels(model)
        base = np.concatenate([[0], np.cumsum(count)])
        const = 0.0
        z: list[Any] = []
        zoff = np.concatenate([[0], np.cumsum(count - 1)])
        for i in range(model["rows"]):
            sz = level_size[base[i] : base[i + 1]]
            const += float(w[i] * sz[0])
            z.extend(
                m.addVar(vtype="B", obj=float(w[i] * (sz[j + 1] - sz[j])))
                for j in range(sz.size - 1)
            )
        m.addObjoffset(const)
        for i in range(model["rows"]):
            zi = z[zoff[i] : zoff[i + 1]]
            cells = ci[ptr[i] : ptr[i + 1]]
            lv = level[ptr[i] : ptr[i + 1]]
            for j in range(count[i]):
                terms = [y[c] for c in cells[lv == j]]
                if j < count[i] - 1:
                    terms.append(zi[j])
                if j > 0:
                    m.addCons(pyscipopt.quicksum(terms) - zi[j - 1] >= 0)
                else:
                    m.addCons(pyscipopt.quicksum(terms) >= 1)
        sol_values = [(z[n], float(v)) for n, v in enumerate(start["chain"])]
    built = time.perf_counter() - t0
    if hint:
        sol = m.createSol()
        opened = np.zeros(size.size)
        opened[model["plan"]] = 1.0
        for c in range(size.size):
            m.setSolVal(sol, y[c], opened[c])
        for var, v in sol_values:
            m.setSolVal(sol, var, v)
        accepted = m.addSol(sol, free=True)
    else:
        accepted = None
    m.optimize()
    status = m.getStatus()
    opened_cells = None
    if m.getNSols() > 0:
        best = m.getBestSol()
        opened_cells = [c for c in range(size.size) if m.getSolVal(best, y[c]) > 0.5]
    dual = m.getDualbound()
    return {
        "status": status,
        "proved": status == "optimal",
        "bound": _floor_padding(dual, model),
        "root": _floor_padding(m.getDualboundRoot(), model),
        "nodes": m.getNNodes(),
        "solve_s": m.getSolvingTime(),
        "build_s": built,
        "hint_accepted": accepted,
        "opened": opened_cells,
        "variables": m.getNVars(),
        "constraints": m.getNConss(),
    }


#: CP-SAT's linearization: 2 puts every clause into its LP (at its default, 1, the bound stayed
#: at 0 and 8,907 after 60 s on 16:prod:8, whose optimum is 41,196).
LINEARIZATION = int(os.environ.get("JOINT_EXTERNAL_LINEARIZATION", "2"))


def _cpsat(model: dict[str, Any], form: str, seconds: float, hint: bool) -> dict:
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise SystemExit(INSTALL.format(what="ortools")) from None
    size, ci, pi, ptr, w = model["size"], model["ci"], model["pi"], model["ptr"], model["weight"]
    t0 = time.perf_counter()
    m = cp_model.CpModel()
    y = [m.new_bool_var(f"y{c}") for c in range(size.size)]
    m.add(sum(y) <= model["k"])
    start = _start(model)
    obj_vars: list[Any] = []
    obj_coefs: list[int] = []
    const = 0
    hints: list[tuple[Any, int]] = []
    if form == "pairs":
        x = [m.new_bool_var("") for _ in range(ci.size)]
        for i in range(model["rows"]):
            m.add_exactly_one(x[ptr[i] : ptr[i + 1]])
        for n, c in enumerate(ci):
            m.add_implication(x[n], y[c])
        obj_vars, obj_coefs = x, [int(w[i] * size[c]) for c, i in zip(ci, pi, strict=True)]
        hints = [(x[n], int(v)) for n, v in enumerate(start["pair"])]
    else:
        level, count, level_size = _levels(model)
        base = np.concatenate([[0], np.cumsum(count)])
        for i in range(model["rows"]):
            sz = level_size[base[i] : base[i + 1]]
            const += int(w[i] * sz[0])
            cells = ci[ptr[i] : ptr[i + 1]]
            lv = level[ptr[i] : ptr[i + 1]]
            prev = None
            for j in range(count[i]):
                lits = [y[c] for c in cells[lv == j]]
                if prev is not None:
                    lits.append(prev.Not())
                if j < count[i] - 1:
                    zj = m.new_bool_var("")
                    lits.append(zj)
                    obj_vars.append(zj)
                    obj_coefs.append(int(w[i] * (sz[j + 1] - sz[j])))
                    prev = zj
                m.add_bool_or(lits)
        z = obj_vars
        hints = [(z[n], int(v)) for n, v in enumerate(start["chain"])]
    m.minimize(cp_model.LinearExpr.weighted_sum(obj_vars, obj_coefs) + const)
    if hint:
        opened = set(model["plan"].tolist())
        for c in range(size.size):
            m.add_hint(y[c], c in opened)
        for var, v in hints:
            m.add_hint(var, v)
    built = time.perf_counter() - t0
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = 0
    solver.parameters.linearization_level = LINEARIZATION
    if LINEARIZATION == 2:  # the default_lp worker forces 1; max_lp is the full LP one
        solver.parameters.subsolvers.append("max_lp")
    solver.parameters.log_search_progress = bool(os.environ.get("JOINT_EXTERNAL_LOG"))
    code = solver.solve(m)
    status = solver.status_name(code)
    opened_cells = None
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        opened_cells = [c for c in range(size.size) if solver.boolean_value(y[c])]
    return {
        "status": status,
        "proved": code == cp_model.OPTIMAL,
        "bound": _floor_padding(solver.best_objective_bound, model),
        "root": None,
        "nodes": solver.num_branches,
        "solve_s": solver.wall_time,
        "build_s": built,
        "hint_accepted": None,
        "opened": opened_cells,
        "variables": len(m.proto.variables),
        "constraints": len(m.proto.constraints),
    }


def _floor_padding(value: float, model: dict[str, Any]) -> int | None:
    """A solver's dual bound on ``Σ w size`` as a bound on the padding: the costs are integers,
    so the bound rounds up to an integer, less a tolerance of 1e-6 relative (the solvers'
    feasibility tolerances)."""
    if value is None or not math.isfinite(value) or abs(value) >= 1e19:  # SCIP's infinity
        return None
    return math.ceil(value - 1e-6 * max(1.0, abs(value))) - model["const"]


def _start(model: dict[str, Any]) -> dict[str, np.ndarray]:
    """The 5 s plan's values of the ``pairs`` model's ``x`` and the ``chain`` model's ``z``."""
    size, ci, ptr = model["size"], model["ci"], model["ptr"]
    if model["plan"].size == 0:  # a fixed model: no start
        return {"pair": np.zeros(0, np.int64), "chain": np.zeros(0, np.int64)}
    opened = np.zeros(size.size, dtype=bool)
    opened[model["plan"]] = True
    # each row's first open pair (pairs are sorted by size within a row)
    pos = np.where(opened[ci], np.arange(ci.size), ci.size)
    first = np.minimum.reduceat(pos, ptr[:-1])
    pair = np.zeros(ci.size, dtype=np.int64)
    pair[first] = 1
    level, count, _ = _levels(model)
    chosen = level[first]  # the level of the row's cheapest open cell
    chain = np.concatenate(
        [(np.arange(count[i] - 1) < chosen[i]).astype(np.int64) for i in range(count.size)]
    )
    return {"pair": pair, "chain": chain}


# -- 3. the table ------------------------------------------------------------------------------
#: What HiGHS reached on the same cases (joint_gap.md: the explicit program over the pairs the LP
#: fixes; joint_benders.md: Benders), for the table.
KNOWN = {
    "16:sum:16": "3,188 proved (0 s)",
    "16:prod:8": "41,196 proved (2 s)",
    "8:sum:16": "12,592 proved (75 s; Benders 119 s)",
    "8:prod:8": "201,499 proved (87 s; Benders 188 s)",
    "8:prod:16": "110,309 proved (75 s; Benders 421 s)",
    "6:sum:16": "19,046 proved (301 s; Benders 222 s)",
    "6:prod:8": "371,616 - 379,435 (Benders, 540 s)",
    "6:prod:16": "212,328 - 216,030 (540 s)",
}
#: The LP relaxation's value (joint_gap.md), a bound of the LP's kind.
LP = {
    "16:sum:16": 3162.6,
    "16:prod:8": 40129.6,
    "8:sum:16": 12405.4,
    "8:prod:8": 197273.7,
    "8:prod:16": 108706.6,
    "6:sum:16": 18894.5,
    "6:prod:8": 369291.3,
    "6:prod:16": 211493.9,
}


def table(folder: Path, records: list[Path], out: Path, command: str) -> None:
    recs = [
        json.loads(line)
        for path in records
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    lines = [
        "# Joint plans: the integer program in SCIP and CP-SAT (GSM8K, coarsened)",
        "",
        f"{command} on {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}; one process per line, two at a time (a SCIP and a "
        "CP-SAT), on a machine other sessions loaded too (*load*: the 1-minute load average at "
        "the end; *CPU s*: the seconds the process got, where recorded). **Offline**: "
        "minutes past any time limit. GSM8K's lengths rounded up to multiples of *s* tokens "
        "(case *s:size:K*); padding in units of *s* tokens, as in `joint_gap.md`. *5 s plan*: "
        "`solve_joint(time_limit=5)` of this run, every solver's start, and its certified "
        "bound. *LP*: the LP relaxation's value (`joint_gap.md`). *model*: `pairs` (HiGHS's "
        "model) or `chain` (one literal per pair), `fixed`: only the pairs the explicit LP's "
        "duals leave against the 5 s plan (HiGHS's model in `joint_gap.md`; no start). "
        "*bound*: the solver's dual bound on every plan's padding (for a fixed model, the "
        "lesser of it and the 5 s plan), *proved* where it meets its plan; SCIP's at or below "
        "0 is the trivial bound (its root LP had not finished). *best plan*: the solver's best "
        "plan, re-priced from the arrays. *HiGHS*: the optimum or bracket `joint_gap.md` / "
        "`joint_benders.md` reached (load 4-14).",
        "",
        "| case | rows (pairs) | 5 s plan (its bound) | LP | solver | model | status | bound "
        "| best plan | vs 5 s plan | wall s (CPU s) | nodes | memory (MB) | load | HiGHS |",
        "|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def order(r: dict) -> tuple:
        s, size, k = _case_name(r["case"])
        return (-s, size, k, bool(r.get("fixed")), r["form"], r["solver"])

    for r in sorted(recs, key=order):
        fixed = bool(r.get("fixed"))
        model = _load(folder, r["case"], fixed)
        plan5 = model["plan_padding"]
        best = r["plan"]
        vs = "-" if best is None else f"{(best - plan5) / plan5:+.2%}"
        low = r["bound"]
        if fixed and low is not None:  # the fixed model holds only the plans below the 5 s one
            low = min(low, plan5)
        proved = "proved " if r["proved"] else ""
        bound = "-" if low is None else f"{proved}{low:,}"
        cpu = f" ({r['cpu_s']:.0f})" if "cpu_s" in r else ""
        lp = LP.get(r["case"])
        lines.append(
            f"| {r['case']} | {model['rows']:,} ({model['ci'].size:,}) | {plan5:,} "
            f"({model['plan_bound']:,}) | {'-' if lp is None else f'{lp:,.1f}'} "
            f"| {r['solver']} | {r['form']}{', fixed' if fixed else ''} | {r['status']} "
            f"| {bound} | {'-' if best is None else f'{best:,}'} | {vs} "
            f"| {r['wall']:.0f}{cpu} | {r['nodes']:,} | {r['maxrss_mb']:,.0f} | {r['load']:.1f} "
            f"| {KNOWN.get(r['case'], '-')} |"
        )
        if r["proved"] and low is not None and low < model["plan_bound"]:
            raise SystemExit(f"{r['case']}: proved {low} below the certified {model['plan_bound']}")
    lines.append("")
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("export")
    p.add_argument("--dir", required=True)
    p.add_argument("--cases", default="8:sum:16,8:prod:8,8:prod:16,6:sum:16,6:prod:8,6:prod:16")
    p.add_argument("--plan-seconds", type=float, default=5.0)
    p.add_argument("--fixed", action="store_true", help="also the LP-fixed models")
    p = sub.add_parser("solve")
    p.add_argument("--dir", required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--solver", choices=("scip", "cpsat"), required=True)
    p.add_argument("--model", choices=("pairs", "chain"), default="pairs")
    p.add_argument("--seconds", type=float, default=540.0)
    p.add_argument("--no-hint", action="store_true")
    p.add_argument("--fixed", action="store_true", help="the LP-fixed model (export --fixed)")
    p.add_argument("--records", required=True)
    p = sub.add_parser("table")
    p.add_argument("--dir", required=True)
    p.add_argument("--records", required=True, help="comma-separated JSON-lines files")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--command", default="")
    args = parser.parse_args()
    if args.step == "export":
        export(Path(args.dir), args.cases.split(","), args.plan_seconds, args.fixed)
    elif args.step == "solve":
        _case_name(args.case)
        r = solve(
            Path(args.dir),
            args.case,
            args.solver,
            args.model,
            args.seconds,
            not args.no_hint,
            args.fixed,
        )
        with open(args.records, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(json.dumps({k: v for k, v in r.items() if k != "cells"}), flush=True)
    else:
        records = [Path(p) for p in args.records.split(",")]
        table(Path(args.dir), records, Path(args.out), args.command)


if __name__ == "__main__":
    main()
