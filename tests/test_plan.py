"""The pure epoch plan: specs, batch sizes, joint cells, max_shapes, and plan invariants."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from conftest import load_real
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader._types import LAST_BATCH
from bucketloader.boundaries import assign_buckets
from bucketloader.plan import BucketSpec, TokenBudget, batch_sizes, plan_epoch
from bucketloader.plan.epoch import fill_pools
from bucketloader.solve import compute_boundaries


def all_ranks(spec, num_replicas, **kw):
    return [plan_epoch(spec, num_replicas=num_replicas, rank=r, **kw) for r in range(num_replicas)]


def check_plan_invariants(spec, num_replicas, *, seed=0, epoch=0, shuffle=True):
    """Coverage, the shape promise, and equal per-step shapes / counts over ranks."""
    plans = all_ranks(spec, num_replicas, seed=seed, epoch=epoch, shuffle=shuffle)
    table = spec.shape_table(num_replicas)
    n_steps = len(plans[0])
    assert all(len(p) == n_steps for p in plans)
    full, q = spec.cell_steps(num_replicas)
    policy = spec.last_batch
    expected_steps = full + ((q > 0) & (policy != "drop"))
    assert n_steps == int(expected_steps.sum())
    table2d = spec.planned_lengths()  # cut to max_length under overflow="truncate"
    pools = fill_pools(spec, num_replicas)  # NOTE [ Filling a small bucket ]
    seen = Counter()
    for i in range(n_steps):
        cells = {int(p.cells[i]) for p in plans}
        assert len(cells) == 1, "all ranks must be in the same cell at each step"
        c = cells.pop()
        batches = [p.batch(i) for p in plans]
        sizes = {len(b) for b in batches}
        bsz = int(spec.cell_batch[c])
        if policy == "keep" and plans[0].partial[i]:
            assert len(sizes) == 1, "keep: partial batches of one step share a shape"
            shape = (sizes.pop(), *spec.cell_lengths[c].tolist())
        else:
            shape = (bsz, *spec.cell_lengths[c].tolist())
            if policy != "pad" or not plans[0].partial[i]:
                assert sizes == {bsz}
        assert tuple(shape) in table.shapes
        for b in batches:
            assert 1 <= len(b) <= bsz
            if c in pools:  # its own sample first, then samples of the cells it covers
                assert spec.cell_of_sample[b[0]] == c
                assert np.isin(spec.cell_of_sample[b], [c, *pools[c].tolist()]).all()
            else:
                assert (spec.cell_of_sample[b] == c).all(), "a batch never mixes cells"
            assert (table2d[b] <= spec.cell_lengths[c]).all()
            assert table.target(table2d[b], group=_group(spec, b))[1:] == shape[1:]
            seen.update(b)
    planned = spec.cell_of_sample >= 0  # the length filters / oversize="drop" leave some out
    n = int(planned.sum())
    assert n == spec.num_planned
    covered = np.zeros(planned.size, dtype=bool)
    covered[list(seen)] = True
    assert not covered[~planned].any(), "a sample left out by the filters appears"
    counts = spec.counts
    assert counts.sum() == n
    if policy == "drop":
        dropped = np.bincount(spec.cell_of_sample[planned & ~covered], minlength=counts.size)
        assert (dropped == q).all()
        assert max(seen.values(), default=1) == 1
    else:
        assert covered[planned].all(), "every sample appears in the epoch"
        repeats = sum(seen.values()) - n
        if policy == "pad":
            assert repeats == int(np.maximum(num_replicas - q[q > 0], 0).sum())
        elif policy == "keep":
            assert repeats <= (num_replicas - 1) * int((q > 0).sum())
        else:
            assert repeats == int((spec.cell_batch * num_replicas - q)[q > 0].sum())
    return plans


def _group(spec, batch):
    return None if spec.groups is None else int(spec.groups[batch[0]])


# -- batch_sizes ---------------------------------------------------------------------------------
def test_batch_sizes_variable_and_rounding():
    b = np.array([16, 100, 1000])
    assert batch_sizes(b, batch_size=4).tolist() == [4, 4, 4]
    assert batch_sizes(b, max_tokens=1600).tolist() == [100, 16, 1]
    # fairseq: "less than N or a multiple of N"
    assert batch_sizes(b, max_tokens=TokenBudget(1600, multiple_of=8)).tolist() == [96, 16, 1]
    cells = np.array([[10, 20], [30, 40]])
    assert batch_sizes(cells, max_tokens=1200, size="sum").tolist() == [40, 17]
    assert batch_sizes(cells, max_tokens=1200, size="prod").tolist() == [6, 1]
    assert batch_sizes(cells, max_tokens=1200, size=lambda shape: shape[0]).tolist() == [120, 40]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, r"exactly one of batch_size \(.*\) or max_tokens"),
        ({"batch_size": 2, "max_tokens": 9}, r"exactly one of batch_size \(.*\) or max_tokens"),
        ({"batch_size": 0}, "batch_size must be an int >= 1, got batch_size=0"),
        ({"max_tokens": 2**63}, r"max_tokens must be an int >= 1 and <= 9223372036854775807"),
        ({"max_tokens": 8, "size": "area"}, "size must be one of 'prod', 'sum'"),
    ],
)
def test_batch_sizes_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        batch_sizes([4, 8], **kwargs)


# -- BucketSpec ----------------------------------------------------------------------------------
def test_spec_follows_boundary_convention_on_real_lengths():
    lengths = load_real("librispeech") // 320
    spec = BucketSpec.build(lengths, num_buckets=8, max_tokens=20_000)
    b = compute_boundaries(lengths, 8)
    np.testing.assert_array_equal(spec.boundaries[0][0], b)
    np.testing.assert_array_equal(spec.cell_lengths[:, 0], b)
    np.testing.assert_array_equal(spec.cell_of_sample, assign_buckets(lengths, b))
    np.testing.assert_array_equal(spec.cell_batch, 20_000 // b)
    assert spec.shape_table().shapes == tuple(sorted((int(20_000 // x), int(x)) for x in b))


def test_precomputed_boundaries_and_tie_at_edge():
    spec = BucketSpec.build([4, 5, 8, 8], boundaries=[4, 8], batch_size=2)
    assert spec.cell_of_sample.tolist() == [0, 1, 1, 1]  # 4 is in bucket 0, 5 in bucket 1
    with pytest.raises(ValueError, match="last boundary 8 < max length 9"):
        BucketSpec.build([4, 9], boundaries=[4, 8], batch_size=2)
    with pytest.raises(ValueError, match=r"either boundaries .* or num_buckets"):
        BucketSpec.build([4, 9], boundaries=[4, 9], num_buckets=2, batch_size=2)


def test_joint_cells_per_input_boundaries_and_strategies():
    pairs = load_real("multi30k")
    spec = BucketSpec.build(
        {"src": pairs[:, 0], "tgt": pairs[:, 1]},
        num_buckets={"src": 4, "tgt": 3},
        strategy={"src": "optimal", "tgt": "percentile"},
        max_tokens=2000,
        size="sum",
    )
    assert spec.input_names == ("src", "tgt")
    b_src, b_tgt = spec.boundaries[0]
    np.testing.assert_array_equal(b_src, compute_boundaries(pairs[:, 0], 4))
    np.testing.assert_array_equal(b_tgt, compute_boundaries(pairs[:, 1], 3, strategy="percentile"))
    cells = spec.cell_lengths[spec.cell_of_sample]
    np.testing.assert_array_equal(cells[:, 0], b_src[assign_buckets(pairs[:, 0], b_src)])
    np.testing.assert_array_equal(cells[:, 1], b_tgt[assign_buckets(pairs[:, 1], b_tgt)])
    np.testing.assert_array_equal(spec.cell_batch, 2000 // spec.cell_lengths.sum(axis=1))


def test_max_shapes_merges_rare_cells_into_covering_ones():
    wh = load_real("coco")
    free = BucketSpec.build(wh, num_buckets=6, max_tokens=640 * 640 * 4, size="prod")
    merged = BucketSpec.build(
        wh, num_buckets=6, max_tokens=640 * 640 * 4, size="prod", max_shapes=5
    )
    assert free.cell_lengths.shape[0] > 5
    assert merged.cell_lengths.shape[0] <= 5
    assert len(merged.shape_table().shapes) <= 5
    own = merged.cell_lengths[merged.cell_of_sample]
    assert (own >= wh).all(), "every sample's cell covers it"
    before = free.cell_lengths[free.cell_of_sample]
    assert (own >= before).all(), "merging only moves samples to covering cells"

    def padding(cells):
        return int((cells.prod(axis=1) - wh.prod(axis=1)).sum())

    big = np.broadcast_to(free.cell_lengths.max(axis=0), wh.shape)
    assert padding(before) <= padding(own) < padding(big)
    # The greedy merge beats merging every rare cell into the all-max cell.
    ranked = np.argsort(np.bincount(free.cell_of_sample))[::-1]
    keep = set(ranked[:4].tolist())
    naive = np.where(
        np.isin(free.cell_of_sample, list(keep))[:, None], before, free.cell_lengths.max(axis=0)
    )
    assert padding(own) <= padding(naive)


def test_groups_fit_per_group_and_never_mix():
    a = load_real("ecoli")
    b = load_real("gsm8k")[:, 0]
    lengths = np.concatenate([a, b])
    groups = np.repeat([3, 7], [a.size, b.size])
    spec = BucketSpec.build(lengths, groups=groups, num_buckets=4, batch_size=16)
    assert spec.group_values == (3, 7)
    np.testing.assert_array_equal(spec.boundaries[0][0], compute_boundaries(a, 4))
    np.testing.assert_array_equal(spec.boundaries[1][0], compute_boundaries(b, 4))
    assert (spec.cell_group[spec.cell_of_sample] == np.repeat([0, 1], [a.size, b.size])).all()
    check_plan_invariants(spec, 3, seed=5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_tokens": 100}, r"max_tokens=100 is below the padded size 1226 .* index 1"),
        ({"batch_size": 2, "groups": [0, 1]}, r"one group id per sample \(3 samples\), got 2"),
        ({"batch_size": 2, "last_batch": "repeat"}, "last_batch must be one of 'drop'"),
        ({"batch_size": 2, "num_buckets": 0}, "num_buckets must be an int >= 1"),
        ({"batch_size": 2, "max_shapes": 0}, "max_shapes must be an int >= 1"),
    ],
)
def test_spec_errors(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        BucketSpec.build([5, 1226, 7], **kwargs)


def test_spec_input_errors():
    with pytest.raises(
        ValueError, match="one length per sample, got 'a': 2, 'b': 3; give each input"
    ):
        BucketSpec.build({"a": [1, 2], "b": [1, 2, 3]}, batch_size=2)
    with pytest.raises(ValueError, match="must not be empty"):
        BucketSpec.build([], batch_size=2)
    with pytest.raises(ValueError, match="num_buckets must give one value per input"):
        BucketSpec.build([[1, 2], [3, 4]], num_buckets=[2, 2, 2], batch_size=2)
    spec = BucketSpec.build([3, 5, 8, 9], num_buckets=2, batch_size=2)
    for bad, error in [(-1, ValueError), (float("nan"), TypeError), (2**70, ValueError)]:
        with pytest.raises(error, match="num_replicas must be an int >= 1 and <= "):
            spec.num_steps(bad)  # (-1 gave negative steps, nan NaN ones; s8-polish)


# -- ShapeTable ----------------------------------------------------------------------------------
def test_shape_table_target_and_errors():
    spec = BucketSpec.build(
        {"h": [10, 20, 30, 40], "w": [40, 30, 20, 10]},
        boundaries=[[20, 40], [20, 40]],
        max_tokens=3200,
        size="prod",
    )
    table = spec.shape_table()
    assert table.input_names == ("h", "w")
    assert table.target([[10, 40]]) == (4, 20, 40)
    assert table.target([[30, 20], [40, 10]]) == (4, 40, 20)
    # A batch mixing cells gets the smallest planned cell covering all of it (or an error).
    with pytest.raises(ValueError, match="no planned shape covers"):
        table.target([[10, 40], [40, 10]])
    with pytest.raises(ValueError, match="position 1 of the batch has input 'w' length 41"):
        table.target([[10, 40], [10, 41]])
    with pytest.raises(ValueError, match=r"shape \(n,\) or \(n, 2\)"):
        table.target([])
    clone = pickle.loads(pickle.dumps(table))
    assert clone.shapes == table.shapes and clone.target([[10, 40]]) == (4, 20, 40)


def test_shape_table_groups_require_group():
    spec = BucketSpec.build([3, 9, 3, 30], groups=[0, 0, 1, 1], num_buckets=2, batch_size=2)
    table = spec.shape_table()
    assert table.target([3], group=0) == (2, 3)
    assert table.target([3], group=1) == (2, 3)
    assert table.target([20], group=1) == (2, 30)
    with pytest.raises(ValueError, match="a batch needs its group id"):
        table.target([3])
    with pytest.raises(ValueError, match=r"group must be one of \[0, 1\]"):
        table.target([3], group=5)
    with pytest.raises(ValueError, match="beyond the longest planned length 9 in group 0"):
        table.target([30], group=0)


# -- plan_epoch ----------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", LAST_BATCH)
@pytest.mark.parametrize("num_replicas", [1, 3])
def test_plan_invariants_on_real_lengths(policy, num_replicas):
    lengths = load_real("commonvoice")
    spec = BucketSpec.build(lengths, num_buckets=6, max_tokens=200_000, last_batch=policy)
    check_plan_invariants(spec, num_replicas, seed=1, epoch=2)


def test_plan_is_pure_and_epochs_differ():
    spec = BucketSpec.build(load_real("ecoli"), num_buckets=5, batch_size=8)
    a = plan_epoch(spec, seed=3, epoch=1)
    b = plan_epoch(spec, seed=3, epoch=1)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, plan_epoch(spec, seed=3, epoch=2).indices)
    assert not np.array_equal(a.indices, plan_epoch(spec, seed=4, epoch=1).indices)
    # seed + epoch collisions (Lhotse's seed + epoch) do not happen.
    assert not np.array_equal(
        plan_epoch(spec, seed=0, epoch=1).indices, plan_epoch(spec, seed=1, epoch=0).indices
    )


def test_unshuffled_plan_is_sorted_within_buckets_and_interleaved():
    spec = BucketSpec.build(load_real("ecoli"), num_buckets=4, batch_size=16)
    plan = plan_epoch(spec, shuffle=False)
    for c in range(4):
        mine = plan.indices[np.repeat(plan.cells, np.diff(plan.offsets)) == c]
        assert (np.diff(mine) > 0).all()
    check_drains_evenly(plan.cells)


def check_drains_evenly(cells):
    """At every prefix of the epoch each cell has used about the same fraction of its batches."""
    cells = np.asarray(cells)
    total = np.bincount(cells)
    used = np.zeros(total.size)
    worst = 0.0
    for i, c in enumerate(cells.tolist()):
        used[c] += 1
        frac = (i + 1) / cells.size
        occupied = total > 0
        dev = np.abs(used[occupied] / total[occupied] - frac) * total[occupied]
        worst = max(worst, float(dev.max()))
    return worst


def test_shuffled_plan_drains_buckets_evenly():
    lengths = load_real("librispeech") // 320
    spec = BucketSpec.build(lengths, num_buckets=8, max_tokens=16_000)
    plan = plan_epoch(spec, seed=7)
    # Stratified keys: each bucket is at most ~2 batches away from its proportional share.
    assert check_drains_evenly(plan.cells) <= 2.5
    sequential = np.sort(plan.cells)
    assert check_drains_evenly(sequential) > 50


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=120),
    k=st.integers(1, 5),
    budget=st.one_of(
        st.tuples(st.just("batch_size"), st.integers(1, 9)),
        st.tuples(st.just("max_tokens"), st.integers(300, 3000)),
    ),
    policy=st.sampled_from(LAST_BATCH),
    num_replicas=st.integers(1, 4),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_plan_invariants_hypothesis(lengths, k, budget, policy, num_replicas, shuffle, seed):
    spec = BucketSpec.build(
        lengths, num_buckets=k, strategy="linear", last_batch=policy, **{budget[0]: budget[1]}
    )
    check_plan_invariants(spec, num_replicas, seed=seed, epoch=seed % 3, shuffle=shuffle)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pairs=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1, max_size=80),
    max_shapes=st.integers(1, 6),
    policy=st.sampled_from(LAST_BATCH),
    num_replicas=st.integers(1, 3),
    groups=st.integers(1, 2),
)
def test_joint_plan_invariants_hypothesis(pairs, max_shapes, policy, num_replicas, groups):
    arr = np.array(pairs)
    spec = BucketSpec.build(
        arr,
        num_buckets=3,
        max_tokens=4000,
        size="prod",
        max_shapes=max_shapes,
        last_batch=policy,
        groups=np.arange(arr.shape[0]) % groups,
    )
    for g in range(len(spec.group_values)):
        assert (spec.cell_group == g).sum() <= max_shapes
    assert (spec.cell_lengths[spec.cell_of_sample] >= arr).all()
    check_plan_invariants(spec, num_replicas, seed=len(pairs))


def reference_merge(cells, counts, lattice_size, ks, limit):
    """The plain greedy merge, recomputing every pair cost at every step (O(K²) per step): the
    oracle for the incremental one. Slots as there: a new covering cell takes the slot of the
    first cell of the pair, ties go to the lowest (row, column)."""
    from bucketloader.plan.cells import encode

    slots = [tuple(c) for c in cells.tolist()]
    members = [[i] for i in range(len(slots))]
    weight = [int(n) for n in counts.tolist()]
    while sum(s is not None for s in slots) > limit:
        best = None
        for a, ca in enumerate(slots):
            for b, cb in enumerate(slots):
                if a == b or ca is None or cb is None:
                    continue
                m = tuple(max(x, y) for x, y in zip(ca, cb, strict=True))
                sm, sa, sb = (int(lattice_size[encode(np.array(c), ks)]) for c in (m, ca, cb))
                cost = weight[a] * (sm - sa) + weight[b] * (sm - sb)
                if best is None or cost < best[0]:
                    best = (cost, a, b, m)
        _, a, b, m = best
        t = slots.index(m) if m in slots else a
        slots[t] = m
        for x in {a, b} - {t}:
            members[t] += members[x]
            weight[t] += weight[x]
            slots[x], members[x], weight[x] = None, [], 0
    return {c: members[i] for i, c in enumerate(slots) if c is not None}


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=40),
    limit=st.integers(1, 12),
    size=st.sampled_from(["sum", "prod"]),
)
def test_incremental_merge_matches_the_plain_greedy(pairs, limit, size):
    from bucketloader.plan.budget import size_values
    from bucketloader.plan.cells import lattice_points, merge_cells

    ks = [6, 6]
    cells, counts = np.unique(np.array(pairs), axis=0, return_counts=True)
    lat = size_values(lattice_points(ks) * 3 + 1, size)
    final, mapping = merge_cells(cells, counts, lat, ks, limit)
    expected = reference_merge(cells, counts, lat, ks, limit)
    got = {
        tuple(f): sorted(np.flatnonzero(mapping == r).tolist())
        for r, f in enumerate(final.tolist())
    }
    assert got == {c: sorted(v) for c, v in expected.items()}


def test_precomputed_boundaries_per_group_and_per_input():
    lengths = np.array([[3, 30], [9, 10], [3, 5], [30, 50]])
    spec = BucketSpec.build(
        lengths,
        groups=[0, 0, 1, 1],
        boundaries={0: [[4, 9], [10, 30]], 1: {"0": [30], "1": [5, 50]}},
        batch_size=2,
    )
    assert [b.tolist() for b in spec.boundaries[0]] == [[4, 9], [10, 30]]
    assert [b.tolist() for b in spec.boundaries[1]] == [[30], [5, 50]]
    assert spec.cell_lengths[spec.cell_of_sample].tolist() == [[4, 30], [9, 10], [30, 5], [30, 50]]
    with pytest.raises(ValueError, match=r"boundaries\['1'\] \(group 1\) must cover the longest"):
        BucketSpec.build(
            lengths,
            groups=[0, 0, 1, 1],
            boundaries={0: [[9], [30]], 1: [[30], [40]]},
            batch_size=2,
        )


def test_a_spec_lists_its_shapes_as_a_sampler_does():
    """``spec.shapes`` (one rank), as ``sampler.shapes``; it was ``spec.shape_table().shapes``
    only (s25-user: an AttributeError)."""
    lengths = [3, 4, 9, 10, 10, 17, 30]
    for options in ({"batch_size": 2, "last_batch": "keep"}, {"max_tokens": 40}):
        spec = BucketSpec.build(lengths, num_buckets=3, **options)
        assert spec.shapes == list(spec.shape_table().shapes)
        sampler = BucketSampler(lengths, num_buckets=3, **options)
        assert sampler.spec.shapes == sampler.shapes
