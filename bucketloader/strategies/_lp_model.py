"""The PuLP model behind the ``lp`` strategy (private): a path formulation on a pruned arc set.

NOTE [ Why this formulation ]
Node ``j`` (0..U) means "the first ``j`` distinct values are covered"; a binary ``x[i, j]`` picks
the bucket holding values ``i..j-1`` padded to ``v[j-1]``. One unit of flow from node 0 to node U
with at most ``k`` arcs is a valid set of boundaries, and the padding is linear in ``x``. Without
the arc budget the constraint matrix is totally unimodular (a shortest path), so the relaxation
is nearly integral and CBC closes it with little branching. Constraints live on arcs: a bucket
with fewer than ``min_count`` samples simply has no arc.

Small models (at most ``_FULL_MODEL_ARCS`` feasible arcs, about U = 100) are solved whole: CBC
sees every feasible bucket and knows nothing from the DP but the warm start. All ``U(U+1)/2`` arcs
would be 500,000 variables at U = 1,000 — far too slow to build through PuLP — so larger models
use bound-based variable fixing: the dense DP over the same arcs (:mod:`._dense`) gives, for each
arc, the least cost of any solution with at most ``k`` buckets that uses it, and arcs whose bound
exceeds the incumbent (the DP's solution, also the warm start) are left out. Those bounds are
exact, so few arcs survive and the solver's job shrinks to proving the incumbent optimal: for the
plain problem and arc-level constraints the integer program is then a certificate, computed by
code independent of the hull DP behind ``"optimal"``. Weaker relaxations (prefix and suffix bounds
without the coupling, or one spare bucket) were measured to keep 40-70 % of the arcs at U = 1,000.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

#: PuLP 4 dropped the bundled CBC (it ships no solver; HiGHS comes with ``pip install highspy``)
#: and rebuilt its modelling API (variables made by a problem, ``solve`` returning the outcome,
#: no ``LpStatus``): the models here speak both (:func:`new_variable`, :func:`linear`,
#: :func:`outcome`), tested on PuLP 2.7-3.3 and 4.2. A later major version is refused by name.
PULP_BELOW = 5


def import_pulp() -> Any:
    """``import pulp``, refusing a version this package was not built for with the fix.

    >>> import_pulp().__name__
    'pulp'
    """
    import pulp

    version = str(getattr(pulp, "__version__", "0"))
    major = version.split(".")[0]
    if major.isdigit() and int(major) >= PULP_BELOW:
        raise ImportError(
            f"bucketloader's PuLP models (strategy='lp', solve_joint(solver='pulp')) were "
            f"written for PuLP 2.7-4.x, got pulp {version}: install it with pip install "
            f"'pulp>=2.7,<{PULP_BELOW}', or use strategy='optimal' (the same boundaries, no "
            "PuLP) / solve_joint(solver='highs')"
        )
    return pulp


def has_cbc(pulp: Any) -> bool:
    """Whether this PuLP bundles CBC (``PULP_CBC_CMD``): PuLP before 4."""
    return hasattr(pulp, "PULP_CBC_CMD")


def default_solver(pulp: Any, time_limit: float, warm_start: bool) -> Any:
    """PuLP's bundled CBC (PuLP < 4), else HiGHS through ``highspy`` (PuLP 4 bundles none),
    with ``time_limit`` seconds, proving optimality to the last unit (costs are integers)."""
    with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        if has_cbc(pulp):
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, warmStart=warm_start)
        if "HiGHS" not in pulp.listSolvers(onlyAvailable=True):
            raise ImportError(
                f"strategy='lp' needs a MIP solver, and pulp {pulp.__version__} bundles none "
                "(PuLP 4 dropped CBC): install HiGHS with pip install highspy, pass solver= "
                "another of pulp.listSolvers(onlyAvailable=True), or use strategy='optimal' "
                "(the same boundaries, no PuLP)"
            )
        return pulp.HiGHS(msg=False, timeLimit=time_limit, warmStart=warm_start, gapRel=0.0)


def quiet_highs(solver: Any) -> None:
    """Before a quiet (``msg=False``) PuLP ``HiGHS`` solver first runs in this process, one
    empty HiGHS model run with its console log off: HiGHS prints a two-line banner on the
    process's standard output when a process first logs, which ``highspy.Highs()`` does as it
    is made, before any option can silence it; the banner landed in the middle of a user's own
    output (a CLI's JSON, a notebook cell). The core class (``highspy._Highs``, in highspy's
    ``__all__``) waits for ``run()`` to log, so the banner goes nowhere and no later model
    prints it. Nothing is redirected (no file descriptor is touched, so no other thread's
    output is lost); once per process; nothing for another solver, or where highspy has no
    core class (the banner is printed, as before).

    >>> quiet_highs(object())  # (not HiGHS: nothing to do)
    """
    if type(solver).__name__ != "HiGHS" or getattr(solver, "msg", True) or _QUIET[0]:
        return
    _QUIET[0] = True
    try:
        from highspy import _Highs  # type: ignore[attr-defined]
    except ImportError:  # (no highspy: PuLP says why when it runs; or no core class)
        return
    model = _Highs()
    model.setOptionValue("log_to_console", False)
    model.run()


#: Whether :func:`quiet_highs` has made this process's first HiGHS model.
_QUIET = [False]


def new_variable(pulp: Any, prob: Any, name: str, binary: bool) -> Any:
    """A variable in ``[0, 1]`` of ``prob`` (PuLP >= 3.3 makes it through the problem)."""
    cat = pulp.LpBinary if binary else pulp.LpContinuous
    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, 0, 1, cat=cat)
    return pulp.LpVariable(name, 0, 1, cat=cat)  # pragma: no cover - PuLP < 3.3


def linear(pulp: Any, terms: list[tuple[Any, float]]) -> Any:
    """``Σ coef · var`` over ``terms`` (PuLP 4, the API with ``LpSolveStatus``, builds no
    expression from a list of pairs; its ``cbc`` extra does not bring the old API back)."""
    if not hasattr(pulp, "LpSolveStatus"):
        return pulp.LpAffineExpression(terms)
    return pulp.lpDot([c for _, c in terms], [v for v, _ in terms])


def outcome(pulp: Any, prob: Any, solved: Any) -> tuple[str, bool, bool]:
    """The solver's status text, whether it proved optimality and whether it handed back a
    solution, from ``prob.solve(...)``'s return (PuLP 4: the outcome itself, whose variables
    hold leftovers when it has no solution) or the problem's statuses (PuLP < 4: the status
    and, where there is one, the solution status, since CBC stopped by its time limit with a
    plan says "Optimal" with ``sol_status`` "integer feasible"; the values are read either way,
    then checked)."""
    if hasattr(pulp, "LpSolveStatus") and not isinstance(solved, int):
        status, found = solved.status, bool(getattr(solved, "has_solution", True))
        text = str(getattr(solved, "status_str", status))
        return text, status == pulp.LpSolveStatus.Optimal and found, found
    text = pulp.LpStatus.get(prob.status, str(prob.status))
    proved = prob.status == pulp.LpStatusOptimal and (
        getattr(prob, "sol_status", pulp.LpSolutionOptimal) == pulp.LpSolutionOptimal
    )
    return text, proved, True


def build_and_solve(
    w: np.ndarray,
    keep: np.ndarray,
    k: int,
    incumbent: list[tuple[int, int]],
    solver: Any,
) -> tuple[list[tuple[int, int]] | None, dict[str, Any]]:
    """Solve the path model on the arcs where ``keep`` is true; return the chosen arcs.

    Returns ``(arcs or None, details)``; ``details["proved"]`` says whether the solver proved
    optimality, ``details["solver_status"]`` is PuLP's status text.
    """
    pulp = import_pulp()

    nodes = w.shape[0]
    ii, jj = np.nonzero(keep)
    prob = pulp.LpProblem("bucketloader_boundaries", pulp.LpMinimize)
    xs = [new_variable(pulp, prob, f"x_{i}_{j}", True) for i, j in zip(ii, jj, strict=True)]
    # integral costs (exact in float64 below 2**53) let CBC use an objective increment of 1
    prob += linear(pulp, list(zip(xs, w[ii, jj].tolist(), strict=True)))
    out_arcs: list[list[Any]] = [[] for _ in range(nodes)]
    in_arcs: list[list[Any]] = [[] for _ in range(nodes)]
    for x, i, j in zip(xs, ii.tolist(), jj.tolist(), strict=True):
        out_arcs[i].append(x)
        in_arcs[j].append(x)
    prob += pulp.lpSum(out_arcs[0]) == 1, "leave_0"
    prob += pulp.lpSum(in_arcs[nodes - 1]) == 1, "reach_end"
    for node in range(1, nodes - 1):
        if out_arcs[node] or in_arcs[node]:
            prob += (
                linear(
                    pulp, [(x, 1.0) for x in in_arcs[node]] + [(x, -1.0) for x in out_arcs[node]]
                )
                == 0,
                f"flow_{node}",
            )
    prob += pulp.lpSum(xs) <= k, "num_buckets"
    chosen = set(incumbent)
    for x, i, j in zip(xs, ii.tolist(), jj.tolist(), strict=True):
        x.setInitialValue(1 if (i, j) in chosen else 0)
    text, proved, found = outcome(pulp, prob, prob.solve(solver))
    details = {
        "solver_status": text,
        "proved": proved,
        "variables": len(xs),
        "constraints": prob.numConstraints(),
    }
    picked = [
        (i, j)
        for x, i, j in zip(xs, ii.tolist(), jj.tolist(), strict=True)
        if found and x.varValue is not None and x.varValue > 0.5
    ]
    path = _as_path(picked, nodes - 1)
    # a solver stopped without a solution may leave any values (PuLP 4: "an infeasible point"):
    # a path over kept arcs is feasible but for the bucket budget, checked here
    return (path if path is not None and len(path) <= k else None, details)


def _as_path(arcs: list[tuple[int, int]], end: int) -> list[tuple[int, int]] | None:
    """The arcs as one path ``0 -> end``, or ``None`` if they are not one (no usable solution)."""
    nxt = dict(arcs)
    if len(nxt) != len(arcs):
        return None
    path, node = [], 0
    while node != end:
        if node not in nxt:
            return None
        path.append((node, nxt[node]))
        node = nxt[node]
    return path if len(path) == len(arcs) else None
