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

from typing import Any

import numpy as np

#: PuLP 4 dropped the bundled CBC (it ships no solver at all) and rebuilt its modelling API
#: (``LpVariable`` is made by a problem, expressions from lists fail): every model here was
#: written and tested against PuLP 2.7-3.3, so a later major version is refused by name.
PULP_BELOW = 4


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
            f"bucketloader's PuLP models (strategy='lp', solve_joint(solver='pulp')) need PuLP "
            f"< {PULP_BELOW}, got pulp {version}: PuLP {PULP_BELOW} ships no CBC solver and "
            f"a new modelling API: install it with pip install 'pulp>=2.7,<{PULP_BELOW}', or use "
            "strategy='optimal' (the same boundaries, no PuLP) / solve_joint(solver='highs')"
        )
    return pulp


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
    if hasattr(prob, "add_variable"):  # PuLP >= 3.3 (LpVariable(...) is deprecated there)
        xs = [
            prob.add_variable(f"x_{i}_{j}", 0, 1, cat=pulp.LpBinary)
            for i, j in zip(ii, jj, strict=True)
        ]
    else:  # pragma: no cover - older PuLP
        xs = [
            pulp.LpVariable(f"x_{i}_{j}", 0, 1, cat=pulp.LpBinary)
            for i, j in zip(ii, jj, strict=True)
        ]
    # integral costs (exact in float64 below 2**53) let CBC use an objective increment of 1
    prob += pulp.LpAffineExpression(list(zip(xs, w[ii, jj].tolist(), strict=True)))
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
                pulp.LpAffineExpression(
                    [(x, 1.0) for x in in_arcs[node]] + [(x, -1.0) for x in out_arcs[node]]
                )
                == 0,
                f"flow_{node}",
            )
    prob += pulp.lpSum(xs) <= k, "num_buckets"
    chosen = set(incumbent)
    for x, i, j in zip(xs, ii.tolist(), jj.tolist(), strict=True):
        x.setInitialValue(1 if (i, j) in chosen else 0)
    prob.solve(solver)
    details = {
        "solver_status": pulp.LpStatus.get(prob.status, str(prob.status)),
        "proved": prob.status == pulp.LpStatusOptimal
        and getattr(prob, "sol_status", pulp.LpSolutionOptimal) == pulp.LpSolutionOptimal,
        "variables": len(xs),
        "constraints": prob.numConstraints(),
    }
    picked = [
        (i, j)
        for x, i, j in zip(xs, ii.tolist(), jj.tolist(), strict=True)
        if x.varValue is not None and x.varValue > 0.5
    ]
    return (_as_path(picked, nodes - 1), details)


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
