"""Fuzzing the core public API (issue 12): histogram, strategies, the boundary convention.

Every test draws adversarial inputs (tests/fuzzing.py) and holds the contract: a valid result
that satisfies the invariants (checked against independent references), or one
``ValueError``/``TypeError`` naming the argument. The sampler, collator, stream, cache, analysis,
CLI and Hugging Face entry points are fuzzed in tests/test_fuzz_pipeline.py and
tests/test_fuzz_io.py.
"""

from __future__ import annotations

import bisect
import itertools

import numpy as np
import pytest
from fuzzing import (
    FUZZ,
    LIMIT,
    ODD_SCALARS,
    call,
    lengths_inputs,
    mostly,
    reference_lengths,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import LengthHistogram, compute_boundaries
from bucketloader.boundaries import assign_buckets, padding_cost, padding_ratio
from bucketloader.strategies import STRATEGIES

pytestmark = pytest.mark.timeout(120)  # a hang fails instead of blocking the suite

FAST = ["optimal", "percentile", "equal_mass", "linear", "geometric", "pad_to_max"]


def _binned(values: list[int], width: int) -> list[int]:
    return [-(-v // width) * width for v in values]


# --- LengthHistogram.from_lengths --------------------------------------------------------------
@settings(FUZZ, max_examples=300)
@given(
    lengths=lengths_inputs(),
    bin_width=st.one_of(st.integers(1, 9), st.sampled_from([0, -3, 2.0, True, None, 2**62, 2**70])),
)
def test_histogram_from_any_lengths(lengths, bin_width):
    ref = reference_lengths(lengths)
    got = call(
        lambda: LengthHistogram.from_lengths(lengths, bin_width=bin_width),
        ["lengths", "bin_width"],
    )
    bin_ok = isinstance(bin_width, int) and not isinstance(bin_width, bool) and bin_width >= 1
    if ref is None or not bin_ok:
        assert not got.ok, f"accepted invalid input {lengths!r} (bin_width={bin_width!r})"
        return
    binned = _binned(ref, bin_width)
    if max(binned) >= LIMIT:
        assert not got.ok and "bin_width" in str(got.error)
        return
    assert got.ok, got.error
    h = got.value
    values = sorted(set(binned))
    assert h.values.tolist() == values
    assert h.counts.tolist() == [binned.count(v) for v in values]
    assert h.num_samples == len(ref) and h.total == sum(binned) and h.max == max(binned)


@settings(FUZZ, max_examples=120)
@given(
    values=mostly(
        st.lists(st.integers(0, 2**62 - 1), min_size=1, max_size=5).map(lambda v: sorted(set(v))),
        st.one_of(st.lists(st.integers(-2, 2**63), max_size=5), ODD_SCALARS),
        one_in=3,
    ),
    counts=mostly(
        st.lists(st.integers(1, 2**61), min_size=1, max_size=5),
        st.one_of(st.lists(st.integers(-1, 2**62), max_size=5), ODD_SCALARS),
        one_in=3,
    ),
)
def test_histogram_constructed_directly(values, counts):
    got = call(lambda: LengthHistogram(values, counts), ["values", "counts", "LengthHistogram"])
    if got.ok:
        h = got.value
        assert (np.diff(h.values) > 0).all() and (h.counts > 0).all() and h.values[0] >= 0
        assert h.values.size == h.counts.size >= 1 and h.values[-1] < LIMIT
        assert h.num_samples == sum(h.counts.tolist()) < LIMIT
        assert h.total == sum(
            v * c for v, c in zip(h.values.tolist(), h.counts.tolist(), strict=True)
        )


# --- compute_boundaries: every strategy, any input ---------------------------------------------
def _check_boundaries(b, ref, k, m, cost):
    assert b.dtype == np.int64 and b.ndim == 1 and 1 <= b.size <= k
    assert (np.diff(b) > 0).all() and b[0] >= 0 and b[-1] < LIMIT
    assert b[-1] >= max(ref) and not (b % m).any()
    edges = b.tolist()
    buckets = [bisect.bisect_left(edges, v) for v in ref]
    assert set(buckets) == set(range(b.size)), "an empty bucket was kept"
    power = 2 if cost == "quadratic" else 1
    return sum(edges[i] ** power - v**power for i, v in zip(buckets, ref, strict=True))


@settings(FUZZ, max_examples=400)
@given(
    lengths=lengths_inputs(),
    k=st.one_of(st.integers(1, 12), st.sampled_from([0, -1, 2**62, 2**70, True, 2.0, "3", None])),
    strategy=st.sampled_from([*FAST, "bogus", None, 3]),
    cost=st.sampled_from(["linear", "linear", "quadratic", "cubic", None]),
    m=st.one_of(st.sampled_from([1, 1, 1, 2, 8, 64]), st.sampled_from([0, -8, 2.5, 2**61])),
)
def test_compute_boundaries_any_input(lengths, k, strategy, cost, m):
    got = call(
        lambda: compute_boundaries(lengths, k, strategy=strategy, cost=cost, pad_to_multiple_of=m),
        ["lengths", "num_buckets", "strategy", "cost", "pad_to_multiple_of"],
    )
    ref = reference_lengths(lengths)
    valid_k = isinstance(k, int) and not isinstance(k, bool) and k >= 1
    valid_m = isinstance(m, int) and m >= 1 and -(-max(ref or [0]) // m) * m < LIMIT
    if ref is None or not valid_k or strategy not in FAST or cost not in ("linear", "quadratic"):
        assert not got.ok, "accepted an invalid argument"
        return
    if not valid_m:
        assert not got.ok and "pad_to_multiple_of" in str(got.error)
        return
    assert got.ok, got.error
    padding = _check_boundaries(got.value, ref, k, m, cost)
    if strategy == "optimal":  # the exact DP: no other strategy pads less
        for other in FAST:
            b = compute_boundaries(ref, k, strategy=other, cost=cost, pad_to_multiple_of=m)
            assert padding <= _check_boundaries(b, ref, k, m, cost)


@settings(FUZZ, max_examples=20)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=25),
    k=st.integers(1, 4),
    options=st.fixed_dictionaries(
        {},
        optional={
            "min_bucket_fraction": st.sampled_from([0.0, 0.2, 1.0, -0.1, float("nan"), "x"]),
            "max_values": st.sampled_from([2, 5, 1000, 1, 0, 2.5]),
            "cost": st.sampled_from(["linear", "quadratic", "bad"]),
        },
    ),
)
@pytest.mark.filterwarnings("ignore:lp. .* distinct lengths exceed max_values:RuntimeWarning")
def test_lp_on_small_inputs_matches_the_dp_or_says_why(lengths, k, options):
    got = call(
        lambda: compute_boundaries(lengths, k, strategy="lp", **options),
        ["lp", "min_bucket_fraction", "max_values", "cost", "strategy"],
    )
    if not got.ok:
        return
    cost = options.get("cost", "linear")
    padding = _check_boundaries(got.value, lengths, k, 1, cost)
    exact = padding_cost(lengths, compute_boundaries(lengths, k, cost=cost), cost=cost)
    if options.get("min_bucket_fraction", 0.0) == 0.0 and options.get("max_values", 1000) >= len(
        set(lengths)
    ):
        assert padding == exact  # the same optimum as the DP
    else:
        assert padding >= exact  # a constrained or coarsened problem cannot beat the optimum


def _strategies_returning(garbage):
    def strategy(hist, num_buckets):
        return garbage

    return strategy


@settings(FUZZ, max_examples=80)
@given(
    garbage=st.one_of(
        ODD_SCALARS,
        st.lists(st.integers(-5, 2**64), max_size=4),
        st.lists(st.floats(allow_nan=True), max_size=3),
        st.sampled_from([[5, 3], [], [[1, 2]], np.array([3, 3]), np.array([1.5]), "abc"]),
    )
)
def test_a_custom_strategy_returning_garbage_is_named(garbage):
    lengths = [1, 2, 3, 10]
    got = call(
        lambda: compute_boundaries(lengths, 3, strategy=_strategies_returning(garbage)),
        ["strategy"],
    )
    if got.ok:
        _check_boundaries(got.value, lengths, 3, 1, "linear")


# --- assign_buckets, padding_cost, padding_ratio -------------------------------------------------
BOUNDARIES = st.one_of(
    st.lists(st.integers(0, 400), min_size=1, max_size=6).map(lambda b: sorted(set(b))),
    st.lists(st.integers(-3, 400), max_size=6),
    st.sampled_from(
        [[], [4, 4], [8, 4], [-1, 5], [2.5, 400], [[4, 8]], [2**70], [2**62], "48", None, 5,
         np.array([], dtype=np.int64), np.array([4, 8]), [True, 400]]
    ),
)  # fmt: skip


@settings(FUZZ, max_examples=400)
@given(lengths=lengths_inputs(), boundaries=BOUNDARIES, cost=st.sampled_from(["linear", "x"]))
def test_boundary_functions_any_input(lengths, boundaries, cost):
    names = ["lengths", "boundaries", "length", "cost"]
    ref = reference_lengths(lengths)
    ref_b = reference_lengths(boundaries)
    valid_b = ref_b is not None and all(a < b for a, b in itertools.pairwise(ref_b))
    covered = valid_b and ref is not None and max(ref) <= ref_b[-1]
    got = call(lambda: assign_buckets(lengths, boundaries), names)
    if covered:
        assert got.ok, got.error
        assert got.value.tolist() == [bisect.bisect_left(ref_b, v) for v in ref]
    else:
        assert not got.ok
    got = call(lambda: padding_cost(lengths, boundaries, cost=cost), names)
    if covered and cost == "linear":
        want = sum(ref_b[bisect.bisect_left(ref_b, v)] - v for v in ref)
        assert got.ok and got.value == want
        ratio = call(lambda: padding_ratio(lengths, boundaries), names)
        assert ratio.ok and ratio.value == (want / sum(ref) if sum(ref) else 0.0)
    else:
        assert not got.ok


@pytest.mark.parametrize("strategy", sorted(set(STRATEGIES) - {"lp"}))
@pytest.mark.parametrize("lengths", [[5, 7, 2**53 + 1], [2**62 - 1, 0, 3], [2**61] * 3 + [1]])
@pytest.mark.parametrize("k", [1, 2, 4, 2**62])
def test_every_strategy_is_exact_up_to_the_limit(strategy, lengths, k):
    """Lengths past float64's exact range (2**53) up to 2**62 - 1, and budgets far above the
    number of lengths: valid boundaries, computed without float rounding or huge allocations."""
    b = compute_boundaries(lengths, k, strategy=strategy)
    _check_boundaries(b, lengths, k, 1, "linear")
    assert padding_cost(lengths, b) == sum(
        b[bisect.bisect_left(b.tolist(), v)].item() - v for v in lengths
    )


@pytest.mark.parametrize("value", [2**62, 2**63, 2**64 - 1, 2**70, float(2**62)])
def test_lengths_past_the_limit_are_refused_never_wrapped(value):
    with pytest.raises(ValueError, match=r"^lengths must be < 2\*\*62, got \d+ at index 1; "):
        compute_boundaries([7, value], 2)
