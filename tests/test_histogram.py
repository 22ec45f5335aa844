"""LengthHistogram: counting, bin_width, deterministic sampling, quantiles, digest, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.histogram import LengthHistogram


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60), st.integers(1, 50))
def test_counts_and_bin_width_round_up(lengths, width):
    h = LengthHistogram.from_lengths(lengths)
    values, counts = np.unique(lengths, return_counts=True)
    assert h.values.tolist() == values.tolist() and h.counts.tolist() == counts.tolist()
    assert h.num_samples == len(lengths) and h.total == sum(lengths)
    assert (h.min, h.max, h.num_values) == (min(lengths), max(lengths), values.size)
    binned = LengthHistogram.from_lengths(lengths, bin_width=width)
    rounded = [-(-x // width) * width for x in lengths]
    assert binned == LengthHistogram.from_lengths(rounded)
    assert (binned.values % width == 0).all() and binned.max >= max(lengths)
    # re-binning a histogram equals binning the lengths
    assert LengthHistogram.from_lengths(h, bin_width=width) == binned


def test_zero_is_a_real_length():
    h = LengthHistogram.from_lengths([0, 0, 3], bin_width=4)
    assert h.values.tolist() == [0, 4] and h.counts.tolist() == [2, 1]
    assert LengthHistogram.from_lengths([0]).total == 0


def test_containers_agree():
    lengths = [5, 3, 5, 9]
    ref = LengthHistogram.from_lengths(lengths)
    for other in (tuple(lengths), np.array(lengths, dtype=np.int32), torch.tensor(lengths)):
        assert LengthHistogram.from_lengths(other) == ref
    assert LengthHistogram.from_lengths(lengths[::-1]).digest() == ref.digest()


def test_sample_is_deterministic_bounded_and_a_subset():
    lengths = np.random.default_rng(0).integers(0, 500, size=5000)
    a = LengthHistogram.from_lengths(lengths, sample_size=300, seed=4)
    b = LengthHistogram.from_lengths(lengths, sample_size=300, seed=4)
    c = LengthHistogram.from_lengths(lengths, sample_size=300, seed=5)
    assert a == b and a != c and a.num_samples == 300
    assert set(a.values.tolist()) <= set(lengths.tolist())
    full = LengthHistogram.from_lengths(lengths)
    # sampling a histogram draws from the same multiset
    d = LengthHistogram.from_lengths(full, sample_size=300, seed=4)
    assert d.num_samples == 300 and set(d.values.tolist()) <= set(lengths.tolist())
    # asking for more than there is keeps everything
    assert LengthHistogram.from_lengths(lengths, sample_size=10**6) == full
    assert LengthHistogram.from_lengths(full, sample_size=10**6) == full


def test_sample_then_bin():
    h = LengthHistogram.from_lengths(range(1000), sample_size=100, bin_width=10, seed=1)
    assert h.num_samples == 100 and (h.values % 10 == 0).all()


def test_quantile_matches_numpy_lower():
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 100, size=777)
    h = LengthHistogram.from_lengths(lengths)
    qs = np.linspace(0, 1, 21)
    expected = np.percentile(lengths, qs * 100, method="lower")
    assert h.quantile(qs).tolist() == expected.tolist()


def test_equality_hash_repr():
    h = LengthHistogram.from_lengths([1, 2, 2])
    assert h == LengthHistogram(np.array([1, 2]), np.array([1, 2]))
    assert h != LengthHistogram.from_lengths([1, 2])
    assert (h == "x") is False
    with pytest.raises(TypeError):
        hash(h)
    assert repr(h) == "LengthHistogram(num_samples=3, num_values=2, min=1, max=2)"
    with pytest.raises(ValueError, match="read-only"):
        h.values[0] = 7


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"bin_width": 0}, ValueError, r"^bin_width must be an int >= 1, got bin_width=0$"),
        ({"bin_width": 2.0}, TypeError, r"^bin_width must be an int >= 1, got bin_width=2.0$"),
        ({"sample_size": 0}, ValueError, r"^sample_size must be an int >= 1, got sample_size=0$"),
        ({"seed": -1}, ValueError, r"^seed must be an int >= 0, got seed=-1$"),
        ({"seed": True}, TypeError, r"^seed must be an int >= 0, got seed=True$"),
    ],
)
def test_bad_options(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        LengthHistogram.from_lengths([1, 2], **kwargs)


@pytest.mark.parametrize(
    ("lengths", "kind", "message"),
    [
        ([1, -2], ValueError, r"lengths must be non-negative, got -2 at index 1"),
        ([1.5], ValueError, r"lengths must be whole numbers, got 1.5 at index 0"),
        ([float("nan")], ValueError, r"whole numbers, got nan at index 0"),
        ([True], TypeError, r"got True at index 0"),
        ([], ValueError, r"lengths must not be empty"),
        ([[1, 2]], ValueError, r"lengths must be 1-D"),
    ],
)
def test_bad_lengths(lengths, kind, message):
    with pytest.raises(kind, match=message):
        LengthHistogram.from_lengths(lengths)


def test_direct_construction_is_checked():
    with pytest.raises(ValueError, match="strictly increasing non-negative ints"):
        LengthHistogram(np.array([2, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="positive counts"):
        LengthHistogram(np.array([1, 2]), np.array([1, 0]))
    with pytest.raises(ValueError, match="same non-zero size"):
        LengthHistogram(np.array([1, 2]), np.array([1]))
