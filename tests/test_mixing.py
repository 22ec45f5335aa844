"""Weighted mixing of datasets (NOTE [ Weighted epochs ]) and longest batch first (NOTE [ Longest
batch first ]): deterministic, rank-synchronous, and what an epoch means with weights."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from conftest import load_real
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec, plan_epoch
from bucketloader.plan.budget import size_values
from bucketloader.plan.epoch import apportion, fill_pools
from bucketloader.sampler import GroupedDataset


@pytest.fixture(scope="module")
def mixture():
    """Three 'languages' of very different sizes: LibriSpeech frames, Common Voice, E. coli."""
    a = load_real("librispeech")[:6000] // 320
    b = load_real("commonvoice")[:1500] // 20
    c = load_real("ecoli")[:300]
    lengths = np.concatenate([a, b, c])
    groups = np.repeat([0, 1, 2], [a.size, b.size, c.size])
    return BucketSpec.build(lengths, groups=groups, num_buckets=4, batch_size=16)


def _all_ranks(spec, r, **kw):
    return [plan_epoch(spec, num_replicas=r, rank=k, **kw) for k in range(r)]


def test_weights_set_each_datasets_share_of_every_epoch(mixture):
    spec = mixture
    natural = np.bincount(spec.cell_group, weights=spec.num_steps(2)).astype(int)
    total = int(natural.sum())
    for epoch in range(3):
        plans = _all_ranks(spec, 2, seed=7, epoch=epoch, weights=[1, 1, 2])
        assert len(plans[0]) == len(plans[1]) == total  # an epoch keeps its length
        assert (plans[0].cells == plans[1].cells).all()  # ranks in step
        steps = np.bincount(spec.cell_group[plans[0].cells], minlength=3)
        assert steps.tolist() == apportion(total, np.array([0.25, 0.25, 0.5])).tolist()
        for p in plans:  # a batch never mixes datasets
            for i in range(len(p)):
                assert len(set(spec.cell_group[spec.cell_of_sample[p.batch(i)]])) == 1


def test_a_down_weighted_dataset_cycles_through_all_its_data(mixture):
    spec = mixture
    big = np.flatnonzero(spec.groups == 0)
    per_epoch = []
    for epoch in range(4):
        idx = np.concatenate(
            [p.indices for p in _all_ranks(spec, 2, epoch=epoch, weights=[1, 1, 1])]
        )
        mine = np.intersect1d(idx, big)
        per_epoch.append(set(mine.tolist()))
        assert Counter(idx[np.isin(idx, big)].tolist()).most_common(1)[0][1] <= 2
    assert all(len(s) < big.size for s in per_epoch), "down-weighted: a part per epoch"
    assert set().union(*per_epoch) == set(big.tolist()), "and all of it over the passes"
    # an up-weighted dataset repeats whole reshuffled passes
    small = np.flatnonzero(spec.groups == 2)
    idx = np.concatenate([p.indices for p in _all_ranks(spec, 2, epoch=0, weights=[1, 1, 1])])
    counts = Counter(idx[np.isin(idx, small)].tolist())
    assert set(counts) == set(small.tolist()) and min(counts.values()) >= 5


def test_weights_are_deterministic_validated_and_resumable(mixture):
    from test_resume import check_resume

    spec = mixture
    a = plan_epoch(spec, seed=1, epoch=2, weights={0: 1, 1: 1, 2: 1})
    b = plan_epoch(spec, seed=1, epoch=2, weights=[1, 1, 1])
    assert (a.indices == b.indices).all()
    assert not np.array_equal(
        a.indices, plan_epoch(spec, seed=2, epoch=2, weights=[1, 1, 1]).indices
    )
    unweighted = plan_epoch(spec, seed=1, epoch=2)
    assert len(unweighted) == len(a) and not np.array_equal(unweighted.cells, a.cells)
    check_resume(
        lambda: BucketSampler(spec, seed=3, weights=[3, 1, 1], num_replicas=2, rank=1), "middle"
    )
    for weights, match in [
        ([1, 1], r"one weight per group \(3: \[0, 1, 2\]\), got 2"),
        ([1, -1, 1], "weights must be finite numbers >= 0, got -1 for group 1"),
        ([0, 0, 0], "weights must not all be 0"),
        ({0: 1, 5: 1, 2: 1}, r"one weight per group \[0, 1, 2\], got keys \[0, 5, 2\]"),
        ([1, float("nan"), 1], "finite numbers >= 0"),
    ]:
        with pytest.raises(ValueError, match=match):
            BucketSampler(spec, weights=weights)
    # an empty dataset of a GroupedDataset has no group: its weight is named, not "one too many"
    holes = BucketSampler([3, 4, 9, 10], groups=[0, 0, 2, 2], batch_size=2)
    for weights in ([1, 1, 1], {0: 1, 1: 1, 2: 1}):
        with pytest.raises(ValueError, match=r"group\(s\) \[1\] have no samples"):
            BucketSampler(holes.spec, weights=weights)
    with pytest.raises(ValueError, match="weights are per dataset: pass groups="):
        BucketSampler([3, 4, 5], batch_size=2, weights=[1])
    with pytest.raises(TypeError, match="weights must be a sequence"):
        BucketSampler(spec, weights="uniform")
    # a dataset of weight 0 is never seen: warned and counted like a filter's samples (s21)
    zero = int((spec.groups == 1).sum())
    with pytest.warns(
        UserWarning, match=rf"leaves out {zero:,} of .*{zero:,} by weights=0 \(group"
    ):
        sampler = BucketSampler(spec, weights=[1, 0, 1])
    assert not (spec.groups[np.concatenate(list(sampler))] == 1).any()
    import torch  # a tensor of weights, as WeightedBucketSampler takes, was a TypeError (s21)

    tensor = BucketSampler(spec, seed=3, weights=torch.tensor([3.0, 1.0, 1.0]))
    assert (
        tensor.plan().indices == BucketSampler(spec, seed=3, weights=[3, 1, 1]).plan().indices
    ).all()


def test_weights_through_grouped_dataset_and_report():
    a = [{"x": [1] * int(n)} for n in load_real("ecoli")[:500]]
    b = [{"x": [2] * int(n)} for n in load_real("ecoli")[500:560]]
    data = GroupedDataset([a, b])
    lengths = [len(s["x"]) for s in a + b]
    sampler = BucketSampler(
        lengths, groups=data.groups, num_buckets=3, batch_size=8, weights=[1, 1], seed=0
    )
    report = sampler.report()
    t = report.totals
    assert t["repeated"] > 0 and t["dropped"] > 0  # b upsampled, a downsampled
    assert t["seen"] + t["dropped"] == t["planned"] == 560
    batches = list(sampler)
    mine = Counter(int(data.groups[b[0]]) for b in batches)
    assert abs(mine[0] - mine[1]) <= 1


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=4),
    weights=st.lists(st.floats(0, 5), min_size=4, max_size=4),
    num_replicas=st.integers(1, 3),
    policy=st.sampled_from(["pad", "fill", "drop", "keep"]),
    epoch=st.integers(0, 5),
    longest=st.booleans(),
)
def test_weighted_plans_keep_ranks_in_step(sizes, weights, num_replicas, policy, epoch, longest):
    rng = np.random.default_rng(len(sizes))
    lengths = np.concatenate([rng.integers(1, 50, n) for n in sizes])
    groups = np.repeat(np.arange(len(sizes)), sizes)
    w = weights[: len(sizes)]
    if sum(w) == 0:
        w[0] = 1.0
    spec = BucketSpec.build(lengths, groups=groups, num_buckets=2, batch_size=3, last_batch=policy)
    per_group = np.bincount(spec.cell_group, weights=spec.num_steps(num_replicas))
    if per_group.sum() and not any(w[g] > 0 for g in np.flatnonzero(per_group)):
        # every weight on datasets that make no batch ("drop" of a tiny dataset): refused
        with pytest.raises(ValueError, match="make no batch"):
            _all_ranks(spec, num_replicas, seed=1, epoch=epoch, weights=w, longest_first=longest)
        with pytest.raises(ValueError, match="make no batch"):
            BucketSampler(spec, weights=w, num_replicas=num_replicas, rank=0)
        return
    plans = _all_ranks(spec, num_replicas, seed=1, epoch=epoch, weights=w, longest_first=longest)
    assert len({len(p) for p in plans}) == 1
    assert len(plans[0]) == int(spec.num_steps(num_replicas).sum())
    table = spec.shape_table(num_replicas)
    pools = fill_pools(spec, num_replicas)  # NOTE [ Filling a small bucket ], pass by pass
    for i in range(len(plans[0])):
        assert len({int(p.cells[i]) for p in plans}) == 1
        sizes_i = {len(p.batch(i)) for p in plans}
        if policy == "keep" and plans[0].partial[i]:
            assert len(sizes_i) == 1
        c = int(plans[0].cells[i])
        for p in plans:
            b = p.batch(i)
            if c in pools:  # its own sample first, then samples of the cells it covers
                assert spec.cell_of_sample[b[0]] == c
                assert np.isin(spec.cell_of_sample[b], [c, *pools[c].tolist()]).all()
                table = dataclasses.replace(table, promoted=True)
            else:
                assert (spec.cell_of_sample[b] == c).all()
            shape = table.target(lengths[b], group=int(groups[b[0]]))
            assert shape[1:] == tuple(spec.cell_lengths[c])
    if longest and len(plans[0]):  # NOTE [ Longest batch first ]: a full step when there is one
        first = int(plans[0].cells[0])
        size = size_values(spec.cell_lengths, "sum")
        assert size[first] == size[np.unique(plans[0].cells)].max()
        full = (plans[0].cells == first) & ~plans[0].partial
        assert not plans[0].partial[0] or not full.any()


# -- longest batch first ---------------------------------------------------------------------
def test_longest_first_moves_a_full_step_where_a_weighted_epoch_starts_at_a_partial_one():
    """An upweighted dataset cycles its passes, so an epoch can start past a pass's full steps
    of the largest cell and meet its partial step (the pass's last) first: longest_first still
    moves a full one (NOTE [ Longest batch first ]; a planted ``<=`` moved the partial one)."""
    lengths = [17, 47, 19, 33, 19, 23, 49, 10, 32, 21, 34, 38, 17, 33, 34, 23]
    lengths += [7, 31, 3, 44, 42, 42, 1, 48, 48, 29, 41, 38, 39, 8, 3, 13]
    groups = np.repeat([0, 1], 16)
    spec = BucketSpec.build(lengths, groups=groups, num_buckets=2, batch_size=3, last_batch="keep")
    plain = plan_epoch(spec, seed=1, epoch=2, weights=[4.25, 2.16])
    first = plan_epoch(spec, seed=1, epoch=2, weights=[4.25, 2.16], longest_first=True)
    size = size_values(spec.cell_lengths, "sum")
    best = int(np.argmax(size))
    assert plain.partial[np.flatnonzero(plain.cells == best)[0]]  # (the case: partial first)
    assert int(first.cells[0]) == best and not first.partial[0]
    assert len(first.batch(0)) == spec.cell_batch[best]


@pytest.mark.parametrize("policy", ["pad", "keep"])
def test_longest_batch_first_on_every_rank(policy):
    lengths = load_real("ecoli")
    spec = BucketSpec.build(lengths, num_buckets=6, max_tokens=8000, last_batch=policy)
    size = size_values(spec.cell_lengths, "sum")
    for epoch in range(3):
        plain = _all_ranks(spec, 3, seed=4, epoch=epoch)
        first = _all_ranks(spec, 3, seed=4, epoch=epoch, longest_first=True)
        c = int(first[0].cells[0])
        assert size[c] == size.max()
        assert all(int(p.cells[0]) == c and not p.partial[0] for p in first)
        assert len(first[0].batch(0)) == spec.cell_batch[c]
        for a, b in zip(plain, first, strict=True):  # the same batches, one moved forward
            assert sorted(map(tuple, (a.batch(i) for i in range(len(a))))) == sorted(
                map(tuple, (b.batch(i) for i in range(len(b))))
            )
    sampler = BucketSampler(spec, longest_first=True, seed=4)
    assert max(map(len, [next(iter(sampler))])) == spec.cell_batch[np.argmax(size)]
    with pytest.raises(TypeError, match="longest_first must be a bool"):
        BucketSampler(spec, longest_first=1)
