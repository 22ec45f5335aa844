"""The one rule for a sample's length (bucketloader._samples), and its fast reader."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader._samples import kind_of, length_of, length_reader, sample_length

_seq = st.one_of(
    st.lists(st.integers(0, 9), max_size=6),
    st.integers(0, 5).map(lambda n: np.zeros((n, 3), dtype=np.float32)),
    st.integers(1, 5).map(lambda n: torch.zeros(n)),
    st.integers(0, 9),
    st.text(max_size=5),
    st.just({"array": np.zeros(7), "sampling_rate": 16000}),
)
_samples = st.one_of(
    _seq,
    st.dictionaries(st.sampled_from(["input_ids", "labels", "length", "x"]), _seq, max_size=3),
    st.tuples(_seq, st.integers(0, 3)),
)


def _outcome(fn, *args, **kw):
    try:
        return ("ok", fn(*args, **kw))
    except (TypeError, ValueError) as exc:
        return ("error", type(exc))


@settings(max_examples=300, deadline=None)
@given(sample=_samples, key=st.sampled_from([None, "input_ids", "labels", "length", 0]))
def test_the_fast_reader_follows_the_rule(sample, key):
    assert _outcome(length_reader(key, arg="k"), sample) == _outcome(
        sample_length, sample, key, arg="k"
    )


def test_the_rule_on_every_kind_of_sample():
    assert sample_length([1, 2, 3]) == 3
    assert sample_length(np.zeros((40, 80))) == 40  # (T, F) features: time-major
    assert sample_length(torch.zeros(16000)) == 16000
    assert sample_length({"input_ids": [1, 2], "label": 1}) == 2
    assert sample_length({"input_ids": [1, 2], "length": 9}) == 9  # a length entry wins
    assert sample_length({"audio": {"array": np.zeros(5), "sampling_rate": 8000}}) == 5
    assert sample_length(([1, 2, 3, 4], 0)) == 4  # (input, target) pairs: the input
    assert sample_length({"a": [1], "b": [1, 2]}, "b") == 2
    assert sample_length({"a": [1]}, lambda s: len(s["a"]) * 10) == 10
    assert length_of(np.array(7)) == 7
    assert kind_of(np.zeros(3)) == "bare" and kind_of(([1], 2)) == "tuple"


@pytest.mark.parametrize(
    ("sample", "key", "error", "match"),
    [
        (
            {"a": [1], "b": [2]},
            None,
            ValueError,
            r"\['a', 'b'\] are sequence-valued: which one is the length is ambiguous; pass k=",
        ),
        (
            {"label": 3.5},
            None,
            ValueError,
            "none of them sequence-valued, so none gives a length; pass k=",
        ),
        ({"a": [1]}, "b", ValueError, r"k='b' is not in the samples \(a sample has \['a'\]\)"),
        (3.5, None, TypeError, "has no length: got the float 3.5; a length is an int count"),
        # s34: a float length said only "got float"; a negative one gave no way on; a key
        # missing by a letter named no near one
        ({"x": 4.0}, "x", TypeError, r"e\.g\. lambda sample: math\.ceil\(sample\['x'\]\)$"),
        ({"x": float("nan")}, "x", TypeError, r"got the float NaN, a missing length; "),
        ({"x": -2}, "x", ValueError, "negative length, -2; lengths count elements: fix or filter"),
        ({"ids": [1]}, "id", ValueError, r"pass one of its keys; did you mean k='ids'\?$"),
        ({"x": [1, 2]}, len, TypeError, r"k=len measures a dict sample by its number of keys"),
    ],
)
def test_errors_name_the_argument_and_the_fix(sample, key, error, match):
    with pytest.raises(error, match=match):
        sample_length(sample, key, arg="k")
    with pytest.raises(TypeError, match="samples must be tensors, numpy arrays"):
        kind_of(object())
