"""The exact DP: brute-force oracle, an independent dense DP, exact arithmetic, real data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import real_columns
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.boundaries import padding_cost, round_up
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import solve_boundaries
from bucketloader.strategies import _dense, _hull
from bucketloader.strategies._hull import _monotone_chain, envelope_argmin, lower_hull
from bucketloader.strategies.optimal import optimal

SETTINGS = settings(max_examples=150, deadline=None)


def brute_force(lengths, k, cost="linear", candidates=None):
    """Least padding over every set of at most k boundaries drawn from ``candidates``."""
    h = LengthHistogram.from_lengths(lengths)
    cands = sorted(set(h.values.tolist()) if candidates is None else candidates)
    top = cands[-1]
    rest = cands[:-1]
    best = None
    for r in range(min(k, len(cands))):
        for combo in itertools.combinations(rest, r):
            cost_ = padding_cost(h, [*combo, top], cost=cost)
            best = cost_ if best is None else min(best, cost_)
    return best


def dense_reference(hist, k, cost="linear"):
    """Independent O(k·U²) DP in exact int64 (small magnitudes only)."""
    v = hist.values.astype(np.int64)
    f = v * v if cost == "quadratic" else v
    c = np.concatenate([[0], np.cumsum(hist.counts)])
    s = np.concatenate([[0], np.cumsum(f * hist.counts)])
    big = np.int64(2**62)
    d = np.full(v.size + 1, big)
    d[0] = 0
    for _ in range(k):
        new = d.copy()
        for j in range(1, v.size + 1):
            seg = f[j - 1] * (c[j] - c[:j]) - (s[j] - s[:j])
            new[j] = min(new[j], int(np.min(np.where(d[:j] < big, d[:j] + seg, big))))
        d = new
    return int(d[-1])


lengths_st = st.lists(st.integers(0, 60), min_size=1, max_size=14)


@SETTINGS
@given(lengths=lengths_st, k=st.integers(1, 6), cost=st.sampled_from(["linear", "quadratic"]))
def test_matches_brute_force(lengths, k, cost):
    r = optimal(LengthHistogram.from_lengths(lengths), k, cost=cost)
    b = r.boundaries
    assert b.size <= k and b[-1] == max(lengths) and (np.diff(b) > 0).all()
    assert r.status == "optimal" and r.gap == 0.0
    assert r.info["objective"] == padding_cost(lengths, b, cost=cost)
    assert r.info["objective"] == brute_force(lengths, k, cost)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    k=st.integers(1, 4),
    m=st.integers(2, 8),
    cost=st.sampled_from(["linear", "quadratic"]),
)
def test_multiple_of_is_exact(lengths, k, m, cost):
    """Rounding the histogram up first (solve.py) keeps the DP exact: check against every set
    of multiples of m, not just the rounded values."""
    sol = solve_boundaries(lengths, k, strategy="optimal", pad_to_multiple_of=m, cost=cost)
    assert (sol.boundaries % m == 0).all() and sol.boundaries[-1] >= max(lengths)
    multiples = list(range(0, int(round_up(np.array([max(lengths)]), m)[0]) + 1, m))
    assert sol.objective == brute_force(lengths, k, cost, candidates=multiples)


def test_huge_magnitudes_use_exact_python_ints():
    """2·N·f(max) beyond int64: the object-dtype path must still be exact."""
    rng = np.random.default_rng(3)
    values = np.unique(rng.integers(10**9, 3 * 10**9, size=9))
    counts = rng.integers(10**8, 10**9, size=values.size)
    h = LengthHistogram(values, counts)
    for k in (2, 3, 5):
        r = optimal(h, k, cost="quadratic")
        assert r.info["arithmetic"] == "python-int"
        assert r.info["objective"] == padding_cost(h, r.boundaries, cost="quadratic")
        best = min(
            padding_cost(h, [*combo, int(values[-1])], cost="quadratic")
            for r_ in range(k)
            for combo in itertools.combinations(values[:-1].tolist(), r_)
        )
        assert r.info["objective"] == best


def test_magnitudes_past_float64_use_exact_int64():
    """4·N·f(max) in [2**53, 2**62): the int64 path, exact where float64 would round (its
    integers step by 2 or more there)."""
    rng = np.random.default_rng(5)
    values = np.unique(rng.integers(10**12, 3 * 10**12, size=9)) | 1  # (odd: no float grid)
    counts = rng.integers(10**3, 10**4, size=values.size)
    h = LengthHistogram(values, counts)
    for k in (2, 3, 5):
        r = optimal(h, k)
        best = min(
            padding_cost(h, [*combo, int(values[-1])])
            for r_ in range(k)
            for combo in itertools.combinations(values[:-1].tolist(), r_)
        )
        # (float64 here: objectives off by 4 and 10 at k = 2 and 5)
        assert r.info["objective"] == best == padding_cost(h, r.boundaries)
        assert r.info["arithmetic"] == "int64"


def test_k_at_least_distinct_values_gives_zero_padding():
    r = optimal(LengthHistogram.from_lengths([0, 0, 3, 7, 7]), 3)
    assert r.boundaries.tolist() == [0, 3, 7] and r.info["objective"] == 0
    assert optimal(LengthHistogram.from_lengths([5]), 1).boundaries.tolist() == [5]


def test_early_exit_when_padding_reaches_zero():
    h = LengthHistogram.from_lengths([1] * 5 + [2] * 5 + [9] * 5 + [10])
    r = optimal(h, 8)
    assert r.info["objective"] == 0 and r.boundaries.tolist() == [1, 2, 9, 10]


def test_raw_lengths_accepted_and_bad_options_rejected():
    assert optimal([1, 2, 9, 10], 2).boundaries.tolist() == [2, 10]
    with pytest.raises(ValueError, match="cost must be one of 'linear', 'quadratic'"):
        optimal([1, 2], 1, cost="cubic")
    with pytest.raises(ValueError, match="num_buckets must be an int >= 1, got num_buckets=0"):
        optimal([1, 2], 0)


@pytest.mark.parametrize("cost", ["linear", "quadratic"])
def test_subsample_filter_path_matches_dense_dp(cost, monkeypatch):
    """Shrink the hull's size threshold so a few hundred values take the subsample-filter path."""
    monkeypatch.setattr(_hull, "_SMALL", 16)
    monkeypatch.setattr(_hull, "_STRIDE", 5)
    rng = np.random.default_rng(7)
    lengths = np.ceil(rng.lognormal(5.5, 0.7, size=20_000)).astype(np.int64)
    h = LengthHistogram.from_lengths(lengths)
    assert h.num_values > 300
    w = _dense.arc_costs(h.values, h.counts, cost)
    ref = _dense.forward(w, 12)[:, -1]
    for k in (2, 3, 6, 12):
        r = optimal(h, k, cost=cost)
        assert r.info["objective"] == padding_cost(h, r.boundaries, cost=cost)
        assert r.info["objective"] == pytest.approx(ref[k], rel=1e-12)


@pytest.mark.slow
def test_librispeech_matches_dense_dp(librispeech):
    """3,409 distinct values: the real-size hull path against the dense DP (both costs, k=16)."""
    h = LengthHistogram.from_lengths(librispeech)
    for cost in ("linear", "quadratic"):
        ref = _dense.forward(_dense.arc_costs(h.values, h.counts, cost), 16)[:, -1]
        for k in (4, 16):
            assert optimal(h, k, cost=cost).info["objective"] == pytest.approx(ref[k], rel=1e-12)


def test_hull_helpers_agree_with_monotone_chain():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 50, 5000, 9000):
        x = np.cumsum(rng.integers(1, 5, n))
        y = rng.integers(-50, 50, n).cumsum() ** 2
        assert lower_hull(x, y).tolist() == _monotone_chain(x.tolist(), y.tolist())
    # a convex chain ending far below: one removal per pass, handed to the monotone chain
    x = np.arange(3000)
    y = x * x
    y[-1] = -(10**9)
    assert lower_hull(x, y).tolist() == [0, 2999]
    x, y = np.arange(40), rng.integers(0, 100, 40)
    s = np.arange(-300, 300, 7)
    vert, switch = envelope_argmin(x, y, s)
    arg = vert[np.searchsorted(switch, np.arange(s.size), side="right")]
    vals = y[None, :] - s[:, None] * x[None, :]
    assert (vals[np.arange(s.size), arg] == vals.min(axis=1)).all()


def test_small_real_columns_match_dense_reference():
    for name, col, lengths in real_columns():
        h = LengthHistogram.from_lengths(lengths)
        if h.num_values > 200:
            continue
        for k in (4, 8):
            r = optimal(h, k)
            assert r.info["objective"] == dense_reference(h, k), (name, col, k)


@pytest.mark.slow
@pytest.mark.parametrize("cost", ["linear", "quadratic"])
def test_real_columns_match_dense_dp(cost):
    for name, col, lengths in real_columns():
        h = LengthHistogram.from_lengths(lengths)
        for k in (4, 8, 16):
            r = optimal(h, k, cost=cost)
            exact = r.info["objective"]
            assert exact == padding_cost(h, r.boundaries, cost=cost)
            if h.num_values <= 1000:
                w = _dense.arc_costs(h.values, h.counts, cost)
                ref = _dense.forward(w, k)[k, -1]
                assert exact == pytest.approx(ref, rel=1e-12), (name, col, k)


@pytest.mark.parametrize("small", [16, 4096])
def test_scaling_all_lengths_scales_the_answer_exactly(small, monkeypatch):
    """Lengths × 10⁷ push the quadratic DP into Python ints; the optimal objective scales by
    exactly 10⁷ (linear) or 10¹⁴ (quadratic), through the small and the filtered hull paths."""
    monkeypatch.setattr(_hull, "_SMALL", small)
    rng = np.random.default_rng(11)
    h = LengthHistogram.from_lengths(np.ceil(rng.lognormal(5.0, 0.5, size=3000)).astype(int))
    scaled = LengthHistogram(h.values * 10**7, h.counts)
    for cost, power in (("linear", 1), ("quadratic", 2)):
        for k in (3, 8):
            base, big = optimal(h, k, cost=cost), optimal(scaled, k, cost=cost)
            if cost == "quadratic":
                assert big.info["arithmetic"] == "python-int"
            assert big.info["objective"] == base.info["objective"] * 10 ** (7 * power)
            assert big.info["objective"] == padding_cost(scaled, big.boundaries, cost=cost)
