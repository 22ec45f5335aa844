"""Linear programs for the joint bound, solved by HiGHS (``scipy.optimize.linprog``).

NOTE [ Why HiGHS for the LP ]
The column-generation LP (NOTE [ The LP bound by columns ] in :mod:`._bound`) has tens of
thousands of rows and columns. Before, it went to CBC (PuLP's binary) as an MPS file written
in Python; HiGHS, which SciPy bundles (a core dependency), takes the sparse arrays in memory,
stops at a wall-clock limit, and solved the same rounds in about the same time (measured on
Europarl: 1.8-2.8 s against CBC's 2.3-3.4 s per round of 18-25 thousand pairs, loaded machine).
The integer program goes to HiGHS as well (:mod:`._ilp`).
"""

from __future__ import annotations

import numpy as np


def solve_lp(
    cost: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    vals: np.ndarray,
    sense: np.ndarray,
    rhs: np.ndarray,
    time_limit: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Minimise ``cost @ x`` over ``0 <= x <= 1`` subject to ``A x (sense) rhs``.

    ``A`` is given as coordinates (``rows``, ``cols``, ``vals``); ``sense`` holds ``"E"`` or
    ``"L"`` per row. Returns ``(x, duals)`` (``duals[i]``: the objective's change per unit of
    ``rhs[i]``) when HiGHS finds the optimum within ``time_limit`` seconds, else ``None``.

    Example:
        >>> import numpy as np
        >>> x, d = solve_lp(np.array([1.0, 2.0]), np.array([0, 0]), np.array([0, 1]),
        ...                 np.array([1.0, 1.0]), np.array(["E"]), np.array([1.5]), 5.0)
        >>> x.tolist(), d.tolist()
        ([1.0, 0.5], [2.0])
    """
    import scipy.sparse as sp
    from scipy.optimize import linprog

    nrows, ncols = int(rhs.size), int(cost.size)
    eq = np.asarray(sense) == "E"
    # renumber the rows of each kind: the equalities, then the inequalities
    pos = np.empty(nrows, dtype=np.int64)
    pos[eq] = np.arange(int(eq.sum()))
    pos[~eq] = np.arange(int((~eq).sum()))
    on_eq = eq[rows]

    def block(mask: np.ndarray, n: int) -> sp.csr_matrix | None:
        if n == 0:
            return None
        return sp.csr_matrix((vals[mask], (pos[rows[mask]], cols[mask])), shape=(n, ncols))

    neq, nub = int(eq.sum()), int((~eq).sum())
    res = linprog(
        cost,
        A_ub=block(~on_eq, nub),
        b_ub=rhs[~eq] if nub else None,
        A_eq=block(on_eq, neq),
        b_eq=rhs[eq] if neq else None,
        bounds=(0.0, 1.0),
        method="highs",
        options={"time_limit": max(float(time_limit), 0.01), "presolve": True},
    )
    if res.status != 0 or res.x is None:
        return None
    duals = np.zeros(nrows)
    if neq:
        duals[eq] = res.eqlin.marginals
    if nub:
        duals[~eq] = res.ineqlin.marginals
    return np.asarray(res.x, dtype=np.float64), duals
