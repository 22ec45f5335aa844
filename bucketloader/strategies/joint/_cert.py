"""An offline certificate for the joint plan: fix pairs against a target, then the exact program.

NOTE [ Certifying a target by fixing pairs ]
To certify that a plan pads within a factor ``1 + ε`` of the optimum it is enough to prove that
**no** plan has ``Σ w_i · size`` below the *target* ``T`` (the plan's padding / ``(1 + ε)`` plus
the constant ``Σ w_i · size_i``); no plan needs to be found. A Lagrangian bound ``L`` at reaches
``r`` (NOTE [ The Lagrangian bound ] in :mod:`._bound`) gives, for every covering pair ``(i, c)``
(point ``i`` sent to candidate ``c``), a bound on every plan that sends ``i`` to ``c``: force
``y_c = 1`` (``L − g_c + g_(K)`` when ``c`` is not among the K largest gains, NOTE [ Fixing
candidates by the bound ]) and ``x_ic = 1``, which adds ``w_i · max(0, size(c) − r_i)`` (the
relaxation sent ``i`` to ``c`` only when that was negative; the other pairs stay free, so the
other terms of ``L`` are unchanged). Pairs whose forced bound reaches ``T`` are in no plan
below ``T`` and leave the model, and so do candidates with no pair left. The program over
what is left (rows merged where their pairs agree, NOTE [ The joint integer program ] in
:mod:`._ilp`) is exact for every plan below ``T``; if its optimum, or any lower bound on it,
is at least ``T``, no plan is below ``T``. So ``min(T, the program's bound)`` is a lower bound
on every plan (``+inf`` in the program when a point has no pair left). Unlike the LP's value
this can exceed the LP relaxation: fixing ``x_ic`` to 0 uses integrality (a pair in a plan is
used wholly, paying its whole forced bound; the LP may use it fractionally). Checked against the
brute-force oracle on tiny histograms (``tests/test_joint_cert.py``). Not used by
:func:`~bucketloader.strategies.joint.solve_joint`: ``benchmarks/joint_cert.py`` runs it
offline on the GSM8K cases the time limit leaves open. Measured there (NOTE [ Stronger
relaxations, measured ] in :mod:`._bound`): far too many pairs survive for the program, so it
certifies none of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bucketloader.strategies.joint._bound import Bound, _kth
from bucketloader.strategies.joint._grid import Grid
from bucketloader.strategies.joint._ilp import _highs, _Model


def fix_pairs(
    grid: Grid, bounds: Sequence[Bound], k: int, target: float
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates and covering pairs that a plan below ``target`` (on ``Σ w_i · size``) may
    use, by NOTE [ Certifying a target by fixing pairs ] at each of ``bounds`` (Lagrangian
    bounds at any reaches: every one fixes validly, so a pair stays only if none fixes it):
    ``(ids, keep)`` with ``keep`` the ``(len(ids), n)`` pairs kept (a point with no pair kept:
    no plan is below ``target``)."""
    slack = 1e-9 * max(1.0, abs(target)) + 1e-6  # rounding: keep what is at the target
    forced = []
    for bound in bounds:
        kth = _kth(bound.gains, k)
        forced.append(np.where(bound.gains >= kth, bound.value, bound.value - bound.gains + kth))
    ids = np.flatnonzero(np.max(forced, axis=0) < target + slack)
    keep = np.zeros((ids.size, grid.weight.size), dtype=bool)
    for lo in range(0, ids.size, 256):
        part = ids[lo : lo + 256]
        mine = grid.covers(part)
        for bound, opened in zip(bounds, forced, strict=True):
            extra = grid.weight[None, :] * np.maximum(
                grid.cand_size[part][:, None] - bound.reach[None, :], 0.0
            )
            mine &= opened[part][:, None] + extra < target + slack
        keep[lo : lo + 256] = mine
    used = keep.any(axis=1)
    return ids[used], keep[used]


def certify(
    grid: Grid, bounds: Sequence[Bound], k: int, target: float, deadline: float
) -> tuple[float, dict[str, Any]]:
    """A lower bound on ``Σ w_i · size`` of every plan with at most ``k`` cells: ``target``
    when the program over the pairs :func:`fix_pairs` keeps is proved at or above it, else the
    program's own bound when lower (NOTE [ Certifying a target by fixing pairs ]), else
    the best of ``bounds``. ``details``: the model's size, the solver's status and bound."""
    ids, keep = fix_pairs(grid, bounds, k, target)
    best = max(bound.value for bound in bounds)
    details: dict[str, Any] = {"candidates": int(ids.size), "pairs": int(keep.sum())}
    details.update(proved=False, bound=-np.inf)
    if not keep.any(axis=0).all():  # a point no plan below the target can serve
        details.update(rows=0, proved=True, bound=np.inf, solver_status="no pair left")
        return max(best, float(target)), details
    _, first, inv = np.unique(
        np.packbits(keep, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    weight = np.bincount(inv.ravel(), weights=grid.weight)
    ci, pi = np.nonzero(keep[:, first])
    details["rows"] = int(first.size)
    model = _Model(ids.size, first.size, ci, pi, weight[pi] * grid.cand_size[ids][ci], k)
    began = time.perf_counter()
    _highs(model, deadline, details)
    details["seconds"] = time.perf_counter() - began
    details["proved"] = details["proved"] or details["bound"] >= target
    return max(best, min(float(target), details["bound"])), details
