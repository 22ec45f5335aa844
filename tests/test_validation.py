"""The one voice for argument errors: every bad input gets one clear message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bucketloader._validation import as_lengths, check_choice, check_float, check_int


def test_check_int():
    assert check_int("n", np.int32(3), minimum=1) == 3
    with pytest.raises(ValueError, match=r"^batch_size must be an int >= 1, got batch_size=0$"):
        check_int("batch_size", 0, minimum=1)
    with pytest.raises(TypeError, match=r"^n must be an int >= 1, got n=True$"):
        check_int("n", True, minimum=1)
    with pytest.raises(TypeError, match=r"^n must be an int, got n=2.0$"):
        check_int("n", 2.0)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0 and <= 5, got n=6$"):
        check_int("n", 6, minimum=0, maximum=5)


def test_check_float():
    assert check_float("f", 1, minimum=0.0, maximum=1.0) == 1.0
    with pytest.raises(ValueError, match=r"^f must be a number in \[0.0, 1.0\], got f=nan$"):
        check_float("f", float("nan"), minimum=0.0, maximum=1.0)
    with pytest.raises(TypeError, match=r"got f=False"):
        check_float("f", False, minimum=0.0, maximum=1.0)
    with pytest.raises(TypeError, match=r"got f='0.5'"):
        check_float("f", "0.5", minimum=0.0, maximum=1.0)


def test_check_choice_lists_every_option():
    assert check_choice("cost", "linear", ["quadratic", "linear"]) == "linear"
    with pytest.raises(
        ValueError, match=r"^cost must be one of 'linear', 'quadratic', got cost='cubic'$"
    ):
        check_choice("cost", "cubic", ["quadratic", "linear"])


@pytest.mark.parametrize(
    "good",
    [[3, 0, 5], (3, 0, 5), np.array([3, 0, 5], dtype=np.uint16), np.array([3.0, 0.0, 5.0]),
     torch.tensor([3, 0, 5]), [np.int64(3), 0, 5.0]],
)  # fmt: skip
def test_as_lengths_accepts(good):
    out = as_lengths(good)
    assert out.dtype == np.int64 and out.tolist() == [3, 0, 5]


def test_as_lengths_2d_when_allowed():
    assert as_lengths([[1, 2], [3, 4]], ndim=(1, 2)).shape == (2, 2)
    with pytest.raises(ValueError, match=r"must be 1-D or 2-D .*, or \(N, D\)"):
        as_lengths(np.zeros((2, 2, 2), dtype=int), ndim=(1, 2))


@pytest.mark.parametrize(
    ("bad", "kind", "message"),
    [
        ([3, -1, 5], ValueError, r"lengths must be non-negative, got -1 at index 1; .*drop or fix"),
        ([3.0, float("nan")], ValueError, r"whole numbers, got nan at index 1; .*drop or fix"),
        (np.array([3, None, 5], dtype=float), ValueError, r"got nan at index 1; .*drop or fix"),
        ([3.0, 2.5], ValueError, r"whole numbers, got 2.5 at index 1; round lengths up"),
        ([1.0, float("inf")], ValueError, r"whole numbers, got inf at index 1; .*drop or fix"),
        (np.array([2, np.nan], dtype=object), ValueError, r"got nan at index 1; .*drop or fix"),
        ([True, False], TypeError, r"must hold integer lengths, got True at index 0; convert"),
        (np.array([True]), TypeError, r"must hold integer lengths, got booleans; .*astype\(int\)"),
        ([[1, 2], (3, False)], TypeError, r"got False at index \(1, 1\)"),
        ([3, True], TypeError, r"must hold integer lengths, got True at index 1"),
        ([3, None], TypeError, r"must hold integer lengths, got None at index 1"),
        ([], ValueError, r"lengths must not be empty, got lengths of shape \(0,\)"),
        ([[1, 2], [3, 4]], ValueError, r"lengths must be 1-D \(one length per sample\)"),
        (5, TypeError, r"lengths must be a list, numpy array or torch tensor .*got int"),
        ("123", TypeError, r"got str"),
        ([[1, 2], [3]], ValueError, r"rectangular array"),
        (np.array(["a"]), TypeError, r"must hold integer lengths, got dtype <U1"),
        (np.array([2**64 - 1], dtype=np.uint64), ValueError, r"must be < 2\*\*62, got 1844674"),
        (torch.tensor([1, -2]), ValueError, r"non-negative, got -2 at index 1"),
        # (were "must be 1-D ..., got an array of shape ()": numpy reads them as one object)
        ({3, 5}, TypeError, r"got a set; a set has no order: pass a list in sample order"),
        ({0: 3, 1: 5}, TypeError, r"got a dict; pass a list .*\(list\(lengths\.values\(\)\)"),
    ],
)
def test_as_lengths_rejects(bad, kind, message):
    with pytest.raises(kind, match=message):
        as_lengths(bad)


def test_as_lengths_names_the_argument_and_2d_index():
    with pytest.raises(ValueError, match=r"^max_tokens must be non-negative, got -3 at index"):
        as_lengths([-3], name="max_tokens")
    with pytest.raises(ValueError, match=r"got -1 at index \(1, 0\)"):
        as_lengths([[1, 2], [-1, 4]], ndim=2)
