"""The offline certificate of the joint plan (strategies/joint/_cert.py) against the oracle."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_joint import oracle, tiny

from bucketloader.strategies.joint._bound import Bound, evaluate
from bucketloader.strategies.joint._cert import certify, fix_pairs
from bucketloader.strategies.joint._grid import Grid


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    points=tiny,
    k=st.integers(1, 3),
    size=st.sampled_from(["sum", "prod"]),
    spread=st.lists(st.floats(0.0, 1.0), min_size=16, max_size=16),
    delta=st.sampled_from([-3.0, 0.0, 0.5, 1.0, 4.0, 40.0]),
)
# fixing leaves each point a pair but no one cell for both: HiGHS says infeasible (CI, session 9)
@example(points=[(1, 1, 1), (1, 6, 1)], k=1, size="sum", spread=[0.0] * 16, delta=-3.0)
def test_certificate_is_never_above_the_oracle(points, k, size, spread, delta):
    # NOTE [ Certifying a target by fixing pairs ]: at any reaches, one or two bounds (a bound
    # far from the LP's fixes the least), any target, above or below the optimum
    rows = np.array([p[:2] for p in points], dtype=np.int64)
    counts = np.array([p[2] for p in points], dtype=np.int64)
    grid = Grid.build(rows, counts, [np.unique(rows[:, d]) for d in range(2)], size)
    const = float((grid.weight * grid.point_size).sum())
    best = oracle(rows, counts, k, size) + const
    bounds = []
    for part in (spread[:8], spread[8:]):
        reach = grid.point_size + np.array(part[: grid.weight.size]) * grid.cand_size.max()
        value, gains, reach = evaluate(grid, reach, k)
        bounds.append(Bound(value, reach, gains, 1))
    target = best + delta
    ids, keep = fix_pairs(grid, bounds, k, target)
    assert keep.shape == (ids.size, grid.weight.size)
    cert, details = certify(
        grid, bounds[: 1 + int(spread[0] > 0.5)], k, target, time.perf_counter() + 30
    )
    assert cert <= best + 1e-6, details
    if delta <= 0:  # the program is exact here: a target at or below the optimum is proved
        assert cert >= target - 1e-6 and details["proved"], details


def test_a_bound_that_reaches_the_target_fixes_every_pair():
    """NOTE [ Certifying a target by fixing pairs ]: forcing a candidate open never lowers the
    bound (``L - g_c + g_(K) >= L``), so a bound already above the target leaves no pair and
    proves it without a program; at the bound's own value (within rounding) pairs stay."""
    rows = np.array([[1, 1], [1, 6], [2, 3], [3, 7], [4, 1], [4, 6], [2, 7]], dtype=np.int64)
    counts = np.array([3, 1, 2, 1, 2, 3, 1], dtype=np.int64)
    grid = Grid.build(rows, counts, [np.unique(rows[:, d]) for d in range(2)], "sum")
    value, gains, reach = evaluate(grid, grid.point_size * 1.5, 2)
    bound = Bound(value, reach, gains, 1)
    assert np.ptp(gains) > 1.0  # candidates gain unequally: forcing some raises the bound
    ids, keep = fix_pairs(grid, [bound], 2, value - 0.01)
    assert ids.size == 0 and keep.shape == (0, grid.weight.size)
    cert, details = certify(grid, [bound], 2, value - 0.01, time.perf_counter() + 30)
    assert cert == value and details["proved"] and details["solver_status"] == "no pair left"
    ids, keep = fix_pairs(grid, [bound], 2, value)
    assert ids.size and keep.any(axis=1).all()
