"""The one boundary convention: assignment (ties at an edge), padding cost, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.boundaries import (
    assign_buckets,
    check_boundaries,
    padding_cost,
    padding_ratio,
    round_up,
)
from bucketloader.histogram import LengthHistogram


def test_a_length_equal_to_a_boundary_belongs_to_that_bucket():
    b = [4, 8, 16]
    assert assign_buckets([0, 4, 5, 8, 9, 16], b).tolist() == [0, 0, 1, 1, 2, 2]
    assert padding_cost([4, 8, 16], b) == 0
    assert padding_cost([5], b) == 3


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 200), min_size=1, max_size=40),
    extra=st.lists(st.integers(0, 250), max_size=6),
    cost=st.sampled_from(["linear", "quadratic"]),
)
def test_padding_cost_is_the_per_sample_sum(lengths, extra, cost):
    b = np.unique([*extra, max(lengths)])
    b = b[b <= max(lengths) + 50]
    idx = assign_buckets(lengths, b)
    assert idx.tolist() == np.searchsorted(b, lengths, side="left").tolist()
    padded = b[idx]
    assert (padded >= lengths).all()
    lower = np.where(idx > 0, b[np.maximum(idx - 1, 0)], -1)
    assert (lower < np.array(lengths)).all()  # b[i-1] < L <= b[i]
    p = 1 if cost == "linear" else 2
    want = sum(int(x) ** p - int(y) ** p for x, y in zip(padded, lengths, strict=True))
    assert padding_cost(lengths, b, cost=cost) == want
    assert padding_cost(LengthHistogram.from_lengths(lengths), b, cost=cost) == want


def test_padding_ratio_and_zero_total():
    assert padding_ratio([2, 4], [4]) == pytest.approx(2 / 6)
    assert padding_ratio([0, 0], [0]) == 0.0
    assert padding_ratio([0, 0], [3]) == 0.0  # no real elements: defined as 0


def test_padding_cost_never_overflows():
    h = LengthHistogram(np.array([3 * 10**9]), np.array([10**9]))
    big = 4 * 10**9
    assert padding_cost(h, [big], cost="quadratic") == (big**2 - (3 * 10**9) ** 2) * 10**9
    assert padding_cost(h, [big]) == 10**9 * 10**9


def test_two_dimensional_lengths_are_assigned_elementwise():
    out = assign_buckets(np.array([[1, 9], [4, 5]]), [4, 8, 16])
    assert out.tolist() == [[0, 2], [0, 1]]


def test_length_beyond_the_last_boundary_is_named():
    with pytest.raises(ValueError, match=r"length 17 at index 2 exceeds the last boundary 16"):
        assign_buckets([1, 2, 17], [4, 16])


def test_round_up():
    assert round_up(np.array([0, 1, 8, 9]), 8).tolist() == [0, 8, 8, 16]
    assert round_up(np.array([5]), 1).tolist() == [5]
    with pytest.raises(ValueError, match="multiple_of must be an int >= 1, got multiple_of=0"):
        round_up(np.array([5]), 0)


def test_check_boundaries_ok_and_read_only():
    b = check_boundaries([4, 8, 16], max_length=16, num_buckets=3)
    assert b.tolist() == [4, 8, 16] and not b.flags.writeable


@pytest.mark.parametrize(
    ("bad", "kwargs", "kind", "message"),
    [
        ([4, 4, 8], {}, ValueError, r"strictly increasing, got 4 then 4 at index 1; sort them"),
        ([8, 4], {}, ValueError, r"strictly increasing, got 8 then 4 at index 1"),
        ([1, 2, 3], {"num_buckets": 2}, ValueError, r"has 3 values but at most num_buckets=2"),
        ([4, 8], {"max_length": 9}, ValueError, r"last boundary 8 < max length 9; append 9"),
        ([-1, 4], {}, ValueError, r"non-negative.*\(boundaries follow the same rules"),
        ([1.5, 4], {}, ValueError, r"whole numbers"),
        ([], {}, ValueError, r"boundaries must not be empty"),
        ([True, 4], {}, TypeError, r"got True at index 0"),
    ],
)
def test_check_boundaries_errors(bad, kwargs, kind, message):
    with pytest.raises(kind, match=message):
        check_boundaries(bad, **kwargs)


def test_bad_cost_is_named():
    with pytest.raises(ValueError, match="cost must be one of 'linear', 'quadratic', got cost='x'"):
        padding_cost([1], [1], cost="x")
