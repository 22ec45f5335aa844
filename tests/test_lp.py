"""The PuLP strategy: same optimum as the DP, extra constraints against brute force, honesty."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pulp
import pytest
from conftest import load_real, real_columns
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.boundaries import padding_cost
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import compute_boundaries, solve_boundaries
from bucketloader.strategies.lp import lp
from bucketloader.strategies.optimal import optimal


def brute_force(lengths, k, cost="linear", min_fraction=0.0, multiple_of=1):
    """Least padding over all boundary sets of size <= k (multiples of m) with every non-empty
    bucket holding at least ceil(min_fraction · N) samples."""
    h = LengthHistogram.from_lengths(lengths)
    top = -(-h.max // multiple_of) * multiple_of
    cands = sorted({-(-v // multiple_of) * multiple_of for v in h.values.tolist()} - {top})
    need = math.ceil(round(min_fraction * h.num_samples, 9))
    best = None
    for r in range(min(k, len(cands) + 1)):
        for combo in itertools.combinations(cands, r):
            b = np.array([*combo, top])
            sizes = np.bincount(np.searchsorted(b, h.values), weights=h.counts, minlength=b.size)
            if (sizes[sizes > 0] < need).any():
                continue
            c = padding_cost(h, b, cost=cost)
            best = c if best is None else min(best, c)
    return best


#: the solver this PuLP runs by name: its bundled CBC (PuLP < 4), else HiGHS (PuLP 4)
NAMED = "PULP_CBC_CMD" if hasattr(pulp, "PULP_CBC_CMD") else "HiGHS"


def _stopped(solver, lp, found):
    """A time limit's outcome in the installed PuLP's API, with a solution (``found``: the
    variables' values) or without."""
    if hasattr(pulp, "LpSolveStatus"):  # PuLP 4: solve returns the outcome
        from pulp.apis.core import clocks

        return solver.buildStats(lp, pulp.LpSolveStatus.TimeLimit, found, start=clocks())
    if found:  # (CBC stopped with a plan says "Optimal", the plan "integer feasible")
        lp.assignStatus(pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible)
    else:
        lp.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
    return lp.status


class _StopsWithIncumbent(pulp.LpSolver):
    """Pretends to hit a time limit: returns the warm start as 'integer feasible'."""

    def actualSolve(self, lp, **kwargs):
        return _stopped(self, lp, True)


class _FindsNothing(pulp.LpSolver):
    """Pretends to stop before finding any solution (PuLP 4 keeps the warm start's values)."""

    def actualSolve(self, lp, **kwargs):
        for v in lp.variables():
            v.varValue = None
        return _stopped(self, lp, False)


class _LeavesEveryArc(pulp.LpSolver):
    """Stops without a solution, its variables holding leftovers (PuLP 4's docs: maybe an
    infeasible point): here one bucket per distinct length."""

    def actualSolve(self, lp, **kwargs):
        for v in lp.variables():
            i, j = map(int, v.name.split("_")[1:])
            v.varValue = 1.0 if j == i + 1 else 0.0
        return _stopped(self, lp, False)


small = st.lists(st.integers(0, 30), min_size=1, max_size=10)


@settings(max_examples=25, deadline=None)
@given(lengths=small, k=st.integers(1, 5), cost=st.sampled_from(["linear", "quadratic"]))
def test_same_optimum_as_dp(lengths, k, cost):
    h = LengthHistogram.from_lengths(lengths)
    r = lp(h, k, cost=cost)
    assert r.status == "optimal" and r.gap == 0.0
    assert r.boundaries.size <= k and r.boundaries[-1] == h.max
    assert r.info["objective"] == padding_cost(h, r.boundaries, cost=cost)
    assert r.info["objective"] == optimal(h, k, cost=cost).info["objective"]
    assert r.info["solution_from"] == "solver"  # CBC's own answer, not the DP fallback


@settings(max_examples=25, deadline=None)
@given(
    lengths=small,
    k=st.integers(1, 4),
    frac=st.sampled_from([0.0, 0.1, 0.2, 0.34, 0.5, 1.0]),
    m=st.sampled_from([1, 4]),
)
def test_min_bucket_fraction_and_multiple_of_match_brute_force(lengths, k, frac, m):
    r = lp(LengthHistogram.from_lengths(lengths), k, min_bucket_fraction=frac, pad_to_multiple_of=m)
    b = r.boundaries
    assert r.status == "optimal" and (b % m == 0).all() and b[-1] >= max(lengths)
    sizes = np.bincount(np.searchsorted(b, lengths), minlength=b.size)
    assert (sizes[sizes > 0] >= math.ceil(round(frac * len(lengths), 9))).all()
    assert r.info["objective"] == brute_force(lengths, k, min_fraction=frac, multiple_of=m)


def test_min_bucket_fraction_changes_the_answer():
    lengths = [1] * 10 + [50] + [100] * 10
    assert lp(lengths, 3).boundaries.tolist() == [1, 50, 100]
    r = lp(lengths, 3, min_bucket_fraction=0.2)
    assert r.boundaries.tolist() == [1, 100] and r.status == "optimal"
    assert r.info["objective"] == brute_force(lengths, 3, min_fraction=0.2)


def test_through_compute_boundaries_with_options():
    lengths = [3, 4, 4, 9, 10, 31, 33]
    b = compute_boundaries(
        lengths, 3, strategy="lp", pad_to_multiple_of=8, min_bucket_fraction=0.25
    )
    assert (b % 8 == 0).all() and b[-1] >= 33
    sol = solve_boundaries(lengths, 3, strategy="lp", cost="quadratic")
    assert sol.status == "optimal"
    assert sol.objective == solve_boundaries(lengths, 3, cost="quadratic").objective


def test_large_model_uses_bound_fixing_and_stays_exact():
    rng = np.random.default_rng(5)
    values = np.unique(rng.choice(np.arange(1, 20_000), size=400, replace=False))
    h = LengthHistogram(values, rng.integers(1, 40, size=values.size))
    for k, cost in [(4, "linear"), (16, "quadratic")]:
        r = lp(h, k, cost=cost)
        assert r.status == "optimal" and r.info["arcs_kept"] < r.info["arcs_total"]
        assert r.info["solution_from"] == "solver"
        assert r.info["objective"] == optimal(h, k, cost=cost).info["objective"]


def test_coarsens_above_max_values_with_a_warning():
    lengths = np.arange(1, 301).repeat(2)
    with pytest.warns(RuntimeWarning, match=r"300 distinct lengths exceed max_values=50"):
        r = lp(lengths, 4, max_values=50)
    assert r.status == "coarsened" and r.info["bin_width"] == 7
    coarse = LengthHistogram.from_lengths(lengths, bin_width=r.info["bin_width"])
    assert coarse.num_values <= 50
    assert padding_cost(coarse, r.boundaries) == optimal(coarse, 4).info["objective"]
    exact = optimal(LengthHistogram.from_lengths(lengths), 4).info["objective"]
    assert r.info["lower_bound"] == exact
    assert r.gap == pytest.approx((r.info["objective"] - exact) / r.info["objective"])


def test_exactly_max_values_distinct_lengths_are_solved_exactly():
    """max_values is inclusive: 50 distinct lengths under max_values=50 are not coarsened."""
    import warnings

    lengths = np.arange(1, 51).repeat(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = lp(lengths, 4, max_values=50)
    assert r.status == "optimal" and "bin_width" not in r.info
    assert (
        r.info["objective"] == optimal(LengthHistogram.from_lengths(lengths), 4).info["objective"]
    )


def test_time_limit_is_reported_never_optimal():
    h = LengthHistogram.from_lengths([1, 2, 3, 5, 8, 13, 21, 34])
    r = lp(h, 3, solver=_StopsWithIncumbent())
    assert r.status == "time_limit" and r.gap == 0.0  # the warm start was optimal already
    assert r.info["objective"] == optimal(h, 3).info["objective"]
    r = lp(h, 3, solver=_FindsNothing())
    assert r.status == "time_limit" and r.info["solution_from"] == "dp-incumbent"
    with pytest.warns(RuntimeWarning, match="stopped at its time limit"):
        compute_boundaries(h, 3, strategy="lp", solver=_FindsNothing())


@pytest.mark.parametrize("fraction", [0.0, 0.1])
def test_leftover_values_past_the_bucket_budget_are_no_solution(fraction):
    """Such leftovers form a path of 8 buckets, less padding than any 3: it was returned for
    k=3 (boundaries [1, 2, 3, 5, 8, 13, 21, 34], "solution_from": "solver")."""
    h = LengthHistogram.from_lengths([1, 2, 3, 5, 8, 13, 21, 34])
    r = lp(h, 3, solver=_LeavesEveryArc(), min_bucket_fraction=fraction)
    assert r.info["solution_from"] in ("dp-incumbent", "exact-dp")
    assert r.boundaries.tolist() == optimal(h, 3).boundaries.tolist() and r.status == "time_limit"


def test_solver_by_name_and_real_time_limit():
    r = lp([1, 2, 9, 10], 2, solver=NAMED, time_limit=5.0, warm_start=False)
    assert r.boundaries.tolist() == [2, 10] and r.status == "optimal"


def test_a_solver_object_that_cannot_run_here_is_one_error(tmp_path):
    """A PuLP solver object whose program is missing (PuLP 4's CBC is ``COIN_CMD``, without
    ``pulp[cbc]``) failed inside PuLP: ``PulpSolverError: Pulp: cannot execute ...``."""
    missing = pulp.COIN_CMD(path=str(tmp_path / "cbc"), msg=False)
    with pytest.raises(
        ValueError, match=rf"solver=COIN_CMD\(\.\.\.\) is not available here .*'{NAMED}'"
    ):
        lp([1, 2, 9, 10], 2, solver=missing)


@pytest.mark.parametrize(
    ("options", "kind", "message"),
    [
        ({"cost": "cubic"}, ValueError, "cost must be one of 'linear', 'quadratic'"),
        ({"min_bucket_fraction": 1.5}, ValueError, r"min_bucket_fraction must be a number in"),
        ({"min_bucket_fraction": True}, TypeError, r"min_bucket_fraction=True"),
        ({"time_limit": 0}, ValueError, r"time_limit must be a number in \[0.001"),
        ({"max_values": 1}, ValueError, "max_values must be an int >= 2, got max_values=1"),
        (
            {"pad_to_multiple_of": 0},
            ValueError,
            "multiple_of must be an int >= 1, got pad_to_multiple_of=0",
        ),
        ({"solver": "NOPE"}, ValueError, rf"available solver names .*'{NAMED}'.*NOPE"),
        ({"solver": 3}, TypeError, "solver must be None, a solver name or a PuLP solver"),
        ({"warm_start": "yes"}, TypeError, "warm_start must be True or False"),
    ],
)
def test_bad_options(options, kind, message):
    with pytest.raises(kind, match=message):
        lp([1, 2, 3], 2, **options)


@pytest.mark.slow
@pytest.mark.parametrize("k", [4, 8, 16])
def test_real_columns_agree_with_optimal(k):
    for name, col, lengths in real_columns():
        h = LengthHistogram.from_lengths(lengths)
        if h.num_values > 1000:
            with pytest.warns(RuntimeWarning, match="coarsened|exceed max_values"):
                r = lp(h, k)
            assert r.status == "coarsened"
            h = LengthHistogram.from_lengths(h, bin_width=r.info["bin_width"])
        else:
            r = lp(h, k)
            assert r.status == "optimal"
        got = padding_cost(h, r.boundaries)
        assert got == optimal(h, k).info["objective"], (name, col, k)
        assert r.info["solution_from"] == "solver", (name, col, k)


def constrained_reference(h, k, min_count):
    """Independent O(k·U²) DP in Python ints where every bucket needs >= min_count samples."""
    v, n = h.values.tolist(), h.counts.tolist()
    u = len(v)
    c = [0, *itertools.accumulate(n)]
    s = [0, *itertools.accumulate(a * b for a, b in zip(v, n, strict=True))]
    inf = float("inf")
    d = [0] + [inf] * u
    for _ in range(k):
        d = [
            min(
                [d[j]]
                + [
                    d[i] + v[j - 1] * (c[j] - c[i]) - (s[j] - s[i])
                    for i in range(j)
                    if c[j] - c[i] >= min_count and d[i] < inf
                ]
            )
            for j in range(u + 1)
        ]
    return d[u]


@pytest.mark.parametrize("frac", [0.05, 0.15])
def test_min_bucket_fraction_on_real_columns_matches_reference_dp(frac):
    """Up to ~100 distinct values the whole model goes to CBC (no DP bounds): independent."""
    for name, col, lengths in real_columns():
        h = LengthHistogram.from_lengths(lengths)
        if h.num_values > 100:
            continue
        need = math.ceil(frac * h.num_samples)
        r = lp(h, 8, min_bucket_fraction=frac)
        assert r.status == "optimal" and r.info["solution_from"] == "solver"
        assert r.info["arcs_kept"] == r.info["arcs_total"]  # CBC saw every feasible bucket
        sizes = np.bincount(np.searchsorted(r.boundaries, h.values), weights=h.counts)
        assert (sizes[sizes > 0] >= need).all(), (name, col)
        assert r.info["objective"] == constrained_reference(h, 8, need), (name, col)


def test_coarsened_gap_with_multiple_of_is_measured_on_the_same_basis():
    lengths = np.arange(1, 401)
    with pytest.warns(RuntimeWarning, match="exceed max_values=20"):
        r = lp(lengths, 4, pad_to_multiple_of=8, max_values=20)
    assert r.status == "coarsened" and r.info["bin_width"] % 8 == 0
    assert (r.boundaries % r.info["bin_width"] == 0).all()
    best8 = solve_boundaries(lengths, 4, pad_to_multiple_of=8)
    assert r.info["lower_bound"] == best8.objective <= r.info["objective"]
    assert 0.0 <= r.gap == pytest.approx(1 - best8.objective / r.info["objective"])


def test_real_cbc_time_limit_never_claims_an_unproved_optimum():
    rng = np.random.default_rng(1)
    values = np.unique(rng.choice(np.arange(1000, 1800), size=100, replace=False))
    h = LengthHistogram(values, 1 + rng.poisson(20, size=values.size))
    r = lp(h, 16, min_bucket_fraction=0.05, time_limit=0.05)  # CBC needs ~1 s to prove it here
    assert r.status in ("optimal", "time_limit")
    assert (r.status == "optimal") == r.info["proved"]
    assert r.gap is not None and r.gap >= 0.0
    sizes = np.bincount(np.searchsorted(r.boundaries, h.values), weights=h.counts)
    assert (sizes[sizes > 0] >= math.ceil(0.05 * h.num_samples)).all()


@pytest.mark.parametrize("multiple_of", [1, 64])
def test_coarsened_boundaries_are_snapped_down_to_the_data(multiple_of):
    """Coarse-grid boundaries drop to each bucket's longest length: same buckets, less pad."""
    from conftest import load_real

    from bucketloader.solve import solve_boundaries

    lengths = load_real("librispeech")
    with pytest.warns(RuntimeWarning, match="coarsen"):
        sol = solve_boundaries(lengths, 16, strategy="lp", pad_to_multiple_of=multiple_of)
    assert sol.status == "coarsened"
    snapped = -(-np.unique(lengths) // multiple_of) * multiple_of
    assert np.isin(sol.boundaries, snapped).all()
    assert sol.boundaries[-1] == -(-lengths.max() // multiple_of) * multiple_of
    exact = solve_boundaries(lengths, 16, pad_to_multiple_of=multiple_of)
    assert exact.objective <= sol.objective <= exact.objective * 1.02


@pytest.mark.parametrize("version", ["5.0.0", "6"])
def test_a_pulp_past_the_apis_it_speaks_is_refused_by_name(monkeypatch, version):
    """PuLP 4 broke every model here (no CBC, a new modelling API: session 15, on the lent GPU
    machine's Python 3.12); the models now speak PuLP 2.7-4.x, and a later major version is one
    ImportError naming the version and the fix, for both the lp strategy and the joint ILP."""
    from bucketloader.strategies.joint import solve_joint

    monkeypatch.setattr(pulp, "__version__", version)
    lengths = np.arange(1, 60)
    with pytest.raises(ImportError, match=rf"PuLP 2.7-4.x, got pulp {version}: .*'pulp>=2.7,<5'"):
        lp(LengthHistogram.from_lengths(lengths), 4)
    with pytest.raises(ImportError, match=r"PuLP 2.7-4.x.*solver='highs'"):
        solve_joint(np.array([[3, 4], [5, 6], [7, 2]]), 2, solver="pulp")
    monkeypatch.setattr(pulp, "__version__", "4.2.0")  # the versions it speaks pass
    assert lp(LengthHistogram.from_lengths(lengths), 4).boundaries[-1] == 59


def test_without_a_bundled_cbc_the_lp_strategy_solves_with_highs(monkeypatch):
    """PuLP 4 (what pip picks on Python 3.12+) bundles no CBC: the lp strategy's default solver
    is then HiGHS through highspy (a dependency there), proving the same optimum as the DP, the
    constraints kept; without HiGHS either, one error names the fixes. (Here PuLP 3's CBC is
    taken away; on Python 3.12 this whole file runs on PuLP 4 itself: 150 random brute-force
    cases and LibriSpeech at k = 16 matched in session 16.)"""
    pytest.importorskip("highspy")
    from bucketloader.strategies.joint import solve_joint

    monkeypatch.delattr(pulp, "PULP_CBC_CMD", raising=False)  # (PuLP 4 has none)
    lengths = load_real("librispeech")[:3000] // 320
    got = lp(LengthHistogram.from_lengths(lengths), 8)
    assert got.status == "optimal" and got.info["solution_from"] == "solver"
    assert got.info["solver_status"] == "Optimal"
    assert (
        got.boundaries.tolist()
        == optimal(LengthHistogram.from_lengths(lengths), 8).boundaries.tolist()
    )
    short = [1, 1, 2, 9, 10, 10, 11]
    want = brute_force(short, 3, min_fraction=0.3)
    con = lp(LengthHistogram.from_lengths(short), 3, min_bucket_fraction=0.3)
    assert padding_cost(LengthHistogram.from_lengths(short), con.boundaries) == want
    with pytest.raises(
        ImportError, match=r"solver='pulp'\) runs PuLP's bundled CBC.*solver='highs'"
    ):
        solve_joint(np.array([[3, 4], [5, 6], [7, 2]]), 2, solver="pulp")
    monkeypatch.setattr(pulp, "listSolvers", lambda onlyAvailable=False: [])
    with pytest.raises(
        ImportError, match=r"bundles none .*pip install highspy.*strategy='optimal'"
    ):
        lp(LengthHistogram.from_lengths(short), 3)


def test_a_quiet_highs_prints_nothing_on_the_process_standard_output():
    """HiGHS prints a two-line banner on file descriptor 1 when a process makes its first
    model, before PuLP's ``msg=False`` can turn its output off (PuLP 4's default solver, or
    ``solver="HiGHS"``): the strategy absorbs it (``_lp_model.quiet_highs``). A fresh process,
    since the banner comes once per process; with the absorber off, the banner is there."""
    import subprocess
    import sys

    if "HiGHS" not in pulp.listSolvers(onlyAvailable=True):
        pytest.skip("no HiGHS (highspy) here")
    code = (
        "import numpy as np, bucketloader.strategies._lp_model as m\n"
        "from bucketloader import compute_boundaries\n"
        "m._QUIET[0] = {off}\n"
        "print('before', flush=True)\n"
        "r = compute_boundaries(np.arange(1, 300), num_buckets=3, strategy='lp', solver='HiGHS')\n"
        "print(r.tolist())\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code.format(off=off)], capture_output=True, text=True, check=True
        ).stdout
        for off in (False, True)
    ]
    lines = [run.splitlines() for run in runs]
    assert lines[0][0] == "before" and lines[0][1].startswith("[") and len(lines[0]) == 2, runs
    assert "Running HiGHS" in runs[1] and lines[1][-1] == lines[0][1], runs
