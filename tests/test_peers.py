"""The peers' features, with the peers' invariants (issue 22): a predicate filter (Lhotse), an
explicit list of shapes with a strict token limit (NeMo), per-sample weights with or without
replacement (torch's WeightedRandomSampler) and gradient-accumulation groups (fairseq update_freq).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import load_real

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec

PAIRS = load_real("multi30k")[:3000]  # (source, target) token lengths, max (41, 45)
ONE = load_real("ecoli")[:3000]


# -- filter (Lhotse's sampler.filter): rejected samples never appear, and are counted -------------
@pytest.mark.filterwarnings("ignore:this BucketSampler leaves out:UserWarning")  # on purpose
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


def test_shapes_that_miss_samples_name_the_shape_that_keeps_them():
    """Session 21: a fixed list of image resolutions (SDXL-style) that missed COCO's largest
    images left 80.7 % of them out with a warning that named no fix."""
    from bucketloader.plan.report import DataLossWarning

    hw = {"height": [4, 4, 8, 8], "width": [4, 6, 8, 5]}
    match = r"reach \(8, 8\) \(inputs \['height', 'width'\]\): add a shape at least that large"
    with pytest.warns(DataLossWarning, match=match):
        BucketSampler(hw, shapes=[(4, 6)], batch_size=2)


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
        first = cells.lengths[sampler.spec.cell_of_sample[members[0]]]
        assert (first == lengths).all()  # ... which is its first sample's own cell
        for i in members:  # a sample's cell is the smallest covering it (a batch may hold
            covers = (PAIRS[i] <= given).all(axis=1)  # promoted ones from smaller cells)
            own = cells.lengths[sampler.spec.cell_of_sample[i]]
            assert size[covers].min() == own.sum() <= lengths.sum()
    fits = (PAIRS[:, None, :] <= given[None]).all(axis=2).any(axis=1)
    seen = sorted(i for batch in sampler for i in batch)
    assert seen == np.flatnonzero(fits).tolist()
    assert sampler.report().totals["no_shape"] == int((~fits).sum()) > 0  # reported, not lost


@pytest.mark.filterwarnings("ignore:this BucketSampler leaves out:UserWarning")  # on purpose
def test_explicit_shapes_one_input_rounding_and_conflicts():
    sampler = BucketSampler(ONE, shapes=[100, 250, 700], batch_size=4, pad_to_multiple_of=64)
    assert sampler.boundaries.tolist() == [128, 256, 704]
    with pytest.raises(ValueError, match="either shapes"):
        BucketSpec.build(ONE, shapes=[100, 700], num_buckets=3, batch_size=4)
    with pytest.raises(ValueError, match=r"2 padded length\(s\)"):
        BucketSpec.build(PAIRS, shapes=[(10, 10, 10)], batch_size=4)
    with pytest.raises(ValueError, match=r"got \(16, 700\); .* batch size comes from batch_s"):
        BucketSpec.build(ONE, shapes=[(16, 700)], batch_size=4)  # (B, L), as NeMo's lists
    state = json.loads(json.dumps(sampler.state_dict()))
    other = BucketSampler(ONE, shapes=[100, 250, 800], batch_size=4, pad_to_multiple_of=64)
    with pytest.raises(ValueError, match="different configuration"):
        other.load_state_dict(state)


# -- per-sample weights and replacement (torch's WeightedRandomSampler) ----------------------------
def _weighted(**kw):
    from bucketloader.weighted import WeightedBucketSampler

    weights = np.where(np.arange(ONE.size) % 4 == 0, 3.0, 1.0)
    weights[::7] = 0.0  # never drawn
    opts = dict(num_buckets=4, batch_size=16, seed=2)
    return WeightedBucketSampler(ONE, weights, **{**opts, **kw}), weights


def test_weighted_draws_follow_the_weights_and_keep_the_shapes():
    sampler, weights = _weighted(num_samples=2000)
    counts = np.zeros(ONE.size)
    cells = sampler.shape_table.cells
    lengths = []
    for epoch in range(12):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)  # exact, every epoch
        drawn = [i for b in batches for i in b]
        assert len(drawn) == 2000  # num_samples draws (one rank, last_batch='pad': no repeats)
        counts += np.bincount(drawn, minlength=ONE.size)
        for b, cell in zip(batches, sampler.plan().cells, strict=True):  # the shape promise
            assert (ONE[b] <= cells.lengths[cell, 0]).all() and len(b) <= cells.batch[cell]
        lengths.append(len(batches))
    assert counts[weights == 0].sum() == 0  # weight 0: never drawn
    heavy, light = counts[weights == 3].mean(), counts[weights == 1].mean()
    assert 2.6 < heavy / light < 3.4  # P(i) proportional to w_i
    assert counts.sum() == 2000 * 12


def test_weighted_without_replacement_has_no_repeats_and_checks_num_samples():
    with pytest.warns(UserWarning, match="without replacement each is drawn at most once"):
        sampler, weights = _weighted(num_samples=1500, replacement=False)  # (weight 3: 1.17)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        drawn = [i for b in sampler for i in b]
        assert len(drawn) == len(set(drawn)) == 1500
        assert not set(drawn) & set(np.flatnonzero(weights == 0).tolist())
    report = sampler.report()
    assert report.totals["seen"] == 1500 and report.totals["repeated"] == 0
    positive = int((weights > 0).sum())
    with pytest.raises(ValueError, match=f"need as many samples of positive weight.*{positive}"):
        _weighted(num_samples=positive + 1, replacement=False)
    with pytest.raises(ValueError, match="one weight per sample"):
        from bucketloader.weighted import WeightedBucketSampler

        WeightedBucketSampler(ONE, [1.0, 2.0], batch_size=4)
    groups = np.arange(ONE.size) % 2
    with pytest.raises(
        ValueError, match=r"one per group \[0, 1\]: .*BucketSampler\(lengths, groups"
    ):
        WeightedBucketSampler(ONE, [1.0, 2.0], groups=groups, batch_size=4)
    with pytest.raises(ValueError, match=r"num_samples must be an int >= 1 and <= 1099511627776"):
        _weighted(num_samples=2**70)  # (was numpy's OverflowError; s8-polish)


def test_weighted_resume_is_exact_and_ranks_agree():
    sampler, _ = _weighted(num_samples=900, num_replicas=2, rank=1)
    sampler.set_epoch(3)
    full = list(sampler)
    sampler.set_epoch(3)
    it = iter(sampler)
    head = [next(it) for _ in range(5)]
    state = json.loads(json.dumps(sampler.state_dict()))
    again, _ = _weighted(num_samples=900, num_replicas=2, rank=1)
    again.load_state_dict(state)
    assert head + list(again) == full
    other, _ = _weighted(num_samples=900, num_replicas=2, rank=0)
    other.set_epoch(3)
    theirs = list(other)
    assert len(theirs) == len(full) == len(sampler)  # equal on every rank
    cells = sampler.shape_table.cells
    assert (other.plan().cells == sampler.plan().cells).all()  # same shape at every step
    both = [i for b in theirs + full for i in b]
    assert len(both) >= 900 and cells.num_cells >= 2  # the epoch's 900 draws, split over ranks


def test_weighted_draws_without_replacement_warn_when_weights_ask_more():
    """A small dataset weighted 0.5 against one five times its size got 25% of the draws
    without replacement (each of its samples drawn at most once), silently (s21)."""
    import warnings

    from bucketloader.weighted import WeightedBucketSampler

    groups = np.repeat([0, 1], [2500, 500])
    weights = np.where(groups == 1, 0.5 / 500, 0.5 / 2500)
    opts = dict(num_buckets=4, batch_size=16, seed=1, num_samples=2000)
    with pytest.warns(
        UserWarning, match=r"ask 500 samples .*\(up to 2.00\).* about 500 draws \(25%\)"
    ):
        sampler = WeightedBucketSampler(ONE, weights, replacement=False, **opts)
    drawn = np.concatenate(list(sampler))
    assert abs(np.mean(groups[drawn] == 1) - 0.25) < 0.01  # 0.2475, where 0.5 was asked
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with replacement the weights are followed: no warning
        WeightedBucketSampler(ONE, weights, replacement=True, **opts)


def test_weighted_state_is_refused_by_a_plain_sampler():
    """Uniform draws without replacement share every config key a BucketSampler writes (same
    plan digest, batches, samples), so its state loaded with a warning and resumed other
    batches: 136 of 2,000 samples twice in the epoch (s21)."""
    opts = dict(num_buckets=4, batch_size=16, seed=1)
    from bucketloader.weighted import WeightedBucketSampler

    weighted = WeightedBucketSampler(ONE, np.ones(ONE.size), replacement=False, **opts)
    it = iter(weighted)
    next(it)
    with pytest.raises(ValueError, match=r"saved by a WeightedBucketSampler .*draws=3000"):
        BucketSampler(ONE, **opts).load_state_dict(weighted.state_dict())


# -- gradient-accumulation groups (fairseq update_freq) --------------------------------------------
@pytest.mark.parametrize("last_batch, replicas", [("pad", 1), ("fill", 2), ("drop", 3)])
def test_accumulation_groups_are_k_batches_of_one_shape_on_every_rank(last_batch, replicas):
    k = 4
    make = lambda r: BucketSampler(  # noqa: E731
        ONE,
        num_buckets=5,
        max_tokens=6000,
        last_batch=last_batch,
        accumulate=k,
        seed=1,
        num_replicas=replicas,
        rank=r,
        longest_first=(replicas == 2),
    )
    samplers = [make(r) for r in range(replicas)]
    plans = [s.plan() for s in samplers]
    assert len({len(s) for s in samplers}) == 1 and len(plans[0]) == len(samplers[0])
    assert len(samplers[0]) % k == 0
    for p in plans:
        groups = p.cells.reshape(-1, k)
        assert (groups == groups[:, :1]).all()  # k consecutive batches of one cell
        assert (p.cells == plans[0].cells).all()  # the same shape at every step on every rank
    shapes = set(samplers[0].shapes)
    cells = samplers[0].shape_table.cells
    for p in plans:
        for b in range(len(p)):
            assert cells.shapes[p.cells[b]] in shapes
    if last_batch != "drop":  # every sample still seen: the extra steps only repeat
        seen = {i for p in plans for i in p.indices.tolist()}
        assert seen == set(range(ONE.size))
    plain = BucketSampler(
        ONE, num_buckets=5, max_tokens=6000, last_batch=last_batch, num_replicas=replicas, rank=0
    )
    steps = plain.spec.num_steps(replicas)
    assert len(samplers[0]) == int((-(-steps // k) * k).sum())


def test_accumulation_resume_mid_group_and_strict_state():
    make = lambda **kw: BucketSampler(ONE, num_buckets=5, batch_size=16, seed=4, **kw)  # noqa: E731
    s = make(accumulate=3)
    s.set_epoch(1)
    full = list(s)
    s.set_epoch(1)
    it = iter(s)
    head = [next(it) for _ in range(7)]  # mid-group
    state = json.loads(json.dumps(s.state_dict()))
    again = make(accumulate=3)
    again.load_state_dict(state)
    assert head + list(again) == full
    with pytest.raises(ValueError, match="different configuration"):
        make(accumulate=2).load_state_dict(state)
    assert make(accumulate=3).report().totals["repeated"] > 0  # the groups' extra batches
    with pytest.raises(ValueError, match="last_batch='keep'"):
        make(accumulate=2, last_batch="keep")
    with pytest.raises(ValueError, match="accumulate must be an int >= 1"):
        make(accumulate=0)


def test_accumulation_repeats_under_pad_are_warned_as_fill_repeats_are():
    """s25-user: under the default last_batch="pad" the groups' extra steps repeated half of a
    small data set (and 210% of it over 2 ranks under max_tokens) without a word, while "fill"
    warned at 5%. Now the same thresholds, with the exact count report() gives."""
    lengths = np.random.default_rng(0).integers(1, 300, 500)
    with pytest.warns(
        UserWarning,
        match=r"^accumulate=16 rounds each bucket's steps .* repeats 248 samples per epoch on 1 "
        r"rank\(s\) \(49\.6% of 500\):",
    ):
        sampler = BucketSampler(lengths, num_buckets=4, batch_size=8, accumulate=16)
    assert sampler.report().totals["repeated"] == 248
    with pytest.warns(UserWarning, match=r"repeats 1,050 samples .* up to 6 times an epoch"):
        BucketSampler(
            lengths, num_buckets=4, max_tokens=2048, accumulate=16, num_replicas=2, rank=0
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BucketSampler(lengths, num_buckets=4, batch_size=8, accumulate=2)  # 24 repeats (4.8%)
    # and "fill"'s warning no longer offers "pad" as free of repeats under accumulate
    with pytest.warns(UserWarning, match=r"With accumulate=16, last_batch='pad' repeats samples"):
        BucketSampler(lengths, num_buckets=4, batch_size=8, accumulate=16, last_batch="fill")
