"""The peers' features, with the peers' invariants (issue 22): a predicate filter (Lhotse), an
explicit list of shapes with a strict token limit (NeMo), per-sample weights with or without
replacement (torch's WeightedRandomSampler) and gradient-accumulation groups (fairseq update_freq).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import load_real

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec

PAIRS = load_real("multi30k")[:3000]  # (source, target) token lengths, max (41, 45)
ONE = load_real("ecoli")[:3000]


# -- filter (Lhotse's sampler.filter): rejected samples never appear, and are counted -------------
def test_filter_leaves_out_what_it_rejects_and_counts_it():
    keep = lambda lengths: lengths % 3 != 0  # noqa: E731 - a vectorised predicate
    sampler = BucketSampler(ONE, filter=keep, num_buckets=4, batch_size=16, seed=1)
    seen = [i for batch in sampler for i in batch]
    assert sorted(seen) == np.flatnonzero(keep(ONE)).tolist()  # each admitted sample once
    report = sampler.report()
    assert report.totals["filter"] == int((~keep(ONE)).sum())
    assert report.totals["planned"] == len(seen)
    as_mask = BucketSampler(ONE, filter=keep(ONE), num_buckets=4, batch_size=16, seed=1)
    assert list(as_mask) == list(
        BucketSampler(ONE, filter=keep, num_buckets=4, batch_size=16, seed=1)
    )
    # boundaries are fitted on the admitted samples only
    assert (
        as_mask.boundaries.tolist()
        == BucketSampler(ONE[keep(ONE)], num_buckets=4, batch_size=16).boundaries.tolist()
    )


def test_filter_after_length_filters_and_bad_masks():
    spec = BucketSpec.build(
        ONE, filter=ONE > 100, max_length=400, overflow="drop", num_buckets=3, batch_size=8
    )
    too_long = int((ONE > 400).sum())
    assert spec.filtered["too_long"] == too_long
    assert spec.filtered["filter"] == int((ONE <= 100).sum())  # not counted twice
    with pytest.raises(ValueError, match=r"boolean mask of shape \(3000,\)"):
        BucketSpec.build(ONE, filter=np.ones(5, dtype=bool), batch_size=8)
    with pytest.raises(TypeError, match="vectorised callable"):
        BucketSpec.build(ONE, filter=lambda x: True, batch_size=8)


# -- explicit shapes (NeMo's 2-D bucket list, strict token limit) ---------------------------------
SHAPES = [(16, 16), (24, 24), (32, 24), (32, 40)]


def test_explicit_shapes_are_kept_and_samples_take_the_smallest_covering_one():
    sampler = BucketSampler(PAIRS, shapes=SHAPES, max_tokens=1600, seed=0)
    cells = sampler.shape_table.cells
    assert sorted(map(tuple, cells.lengths.tolist())) == sorted(SHAPES)  # kept as given
    given = np.array(SHAPES)
    size = given.sum(axis=1)
    for shape in sampler.shapes:  # strict per-bucket token limit: no padded batch exceeds it
        assert shape[0] * (shape[1] + shape[2]) <= 1600
    for b, batch in enumerate(sampler.plan().cells):
        lengths = cells.lengths[batch]
        members = sampler.plan().batch(b)
        assert (PAIRS[members] <= lengths).all()  # every sample fits its batch's shape
        for i in members:  # ... and that shape is the smallest covering it
            covers = (PAIRS[i] <= given).all(axis=1)
            assert size[covers].min() == lengths.sum()
    fits = (PAIRS[:, None, :] <= given[None]).all(axis=2).any(axis=1)
    seen = sorted(i for batch in sampler for i in batch)
    assert seen == np.flatnonzero(fits).tolist()
    assert sampler.report().totals["no_shape"] == int((~fits).sum()) > 0  # reported, not lost


def test_explicit_shapes_one_input_rounding_and_conflicts():
    sampler = BucketSampler(ONE, shapes=[100, 250, 700], batch_size=4, pad_to_multiple_of=64)
    assert sampler.boundaries.tolist() == [128, 256, 704]
    with pytest.raises(ValueError, match="either shapes"):
        BucketSpec.build(ONE, shapes=[100, 700], num_buckets=3, batch_size=4)
    with pytest.raises(ValueError, match=r"2 padded length\(s\)"):
        BucketSpec.build(PAIRS, shapes=[(10, 10, 10)], batch_size=4)
    state = json.loads(json.dumps(sampler.state_dict()))
    other = BucketSampler(ONE, shapes=[100, 250, 800], batch_size=4, pad_to_multiple_of=64)
    with pytest.raises(ValueError, match="different configuration"):
        other.load_state_dict(state)
