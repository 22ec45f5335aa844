"""The batch-size rule (NOTE [ The batch-size rule ]): token budget + cap, per-bucket sizes, pad
multiples, fairseq's batch multiple, oversize policies, empty buckets, exact sizes, and budgets no
device can hold."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_real
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plan import check_plan_invariants

from bucketloader import BucketSampler, TokenBudget, compute_boundaries
from bucketloader.plan import BucketSpec, DataLossWarning, batch_sizes
from bucketloader.plan.budget import MAX_BATCH_ELEMENTS
from bucketloader.stream import BucketIterable


# -- a token budget and a batch cap ------------------------------------------------------------
def test_cap_and_budget_together_on_real_lengths():
    lengths = load_real("commonvoice")
    free = BucketSpec.build(lengths, num_buckets=6, max_tokens=400_000)
    capped = BucketSpec.build(
        lengths, num_buckets=6, max_tokens=TokenBudget(400_000, max_batch_size=128)
    )
    b = free.cell_lengths[:, 0]
    np.testing.assert_array_equal(capped.cell_lengths[:, 0], b)
    np.testing.assert_array_equal(capped.cell_batch, np.minimum(128, 400_000 // b))
    assert free.cell_batch.max() > 128 and capped.cell_batch.max() == 128
    check_plan_invariants(capped, 2, seed=3)


def test_fairseq_batch_multiple_less_than_n_or_a_multiple_of_n():
    # issue 14: BucketSpec.build([1, 9], max_tokens=9, batch_multiple_of=2) raised; fairseq
    # makes a batch of 1 ("batch size less than N or a multiple of N")
    spec = BucketSpec.build([1, 9], boundaries=[1, 9], max_tokens=TokenBudget(9, multiple_of=2))
    assert spec.cell_batch.tolist() == [8, 1]
    got = batch_sizes([10, 90, 300, 900], max_tokens=TokenBudget(1000, multiple_of=8))
    assert got.tolist() == [96, 8, 3, 1]
    capped = TokenBudget(1000, max_batch_size=20, multiple_of=8)
    assert batch_sizes([10, 90], max_tokens=capped).tolist() == [16, 8]  # cap, then multiple


def test_per_bucket_batch_sizes_sequence_mapping_callable():
    lengths = load_real("ecoli")
    b = [200, 400, 800, 2358]
    seq = BucketSpec.build(lengths, boundaries=b, batch_size=[64, 32, 8, 2])
    assert seq.cell_batch.tolist() == [64, 32, 8, 2]
    sizes = {200: 64, 400: 32, 800: 8, 2358: 2}
    mapping = BucketSpec.build(lengths, boundaries=b, batch_size=sizes)
    func = BucketSpec.build(lengths, boundaries=b, batch_size=lambda shape: 16_000 // shape[0])
    assert mapping.cell_batch.tolist() == [64, 32, 8, 2]
    assert func.cell_batch.tolist() == [80, 40, 20, 6]
    check_plan_invariants(seq, 3, seed=1)
    # the same sizes for a stream (tf.data's bucket_batch_sizes)
    stream = BucketIterable([[0] * 5], boundaries=b, batch_size=[64, 32, 8, 2])
    assert stream.shapes == [(2, 2358), (8, 800), (32, 400), (64, 200)]
    # NeMo-style 2-D: one batch size per joint (input, output) cell
    pairs = load_real("multi30k")[:3000]
    grid = BucketSpec.build(
        {"src": pairs[:, 0], "tgt": pairs[:, 1]},
        boundaries={"src": [15, 41], "tgt": [15, 45]},
        batch_size={(15, 15): 128, (15, 45): 64, (41, 15): 64, (41, 45): 32},
    )
    cells = map(tuple, grid.cell_lengths.tolist())
    assert dict(zip(cells, grid.cell_batch.tolist(), strict=True)) == {
        (15, 15): 128,
        (15, 45): 64,
        (41, 15): 64,
        (41, 45): 32,
    }


@pytest.mark.parametrize(
    "batch_size, match",
    [
        ([64, 32], r"batch_size gives 2 batch sizes but the plan has 4 buckets \(padded lengths"),
        ({200: 4, 400: 4}, r"batch_size has no entry for the bucket of padded length 800"),
        ([64, 0, 8, 2], r"batch_size\[1\] must be an int >= 1, got batch_size\[1\]=0"),
        (lambda shape: 0, r"batch_size\(200,\) must be an int >= 1"),
        ([], "batch_size must not be an empty sequence"),
    ],
)
def test_per_bucket_batch_size_errors(batch_size, match):
    with pytest.raises(ValueError, match=match):
        BucketSpec.build(
            load_real("ecoli"), boundaries=[200, 400, 800, 2358], batch_size=batch_size
        )


# -- pad multiples -------------------------------------------------------------------------------
def test_pad_to_multiple_of_is_the_constrained_optimum_everywhere():
    lengths = load_real("europarl")[:, 1]
    sampler = BucketSampler(lengths, num_buckets=6, max_tokens=4096, pad_to_multiple_of=8)
    want = compute_boundaries(lengths, 6, pad_to_multiple_of=8)
    np.testing.assert_array_equal(sampler.boundaries, want)
    assert all(s[1] % 8 == 0 for s in sampler.shapes)
    # the optimum under the constraint beats rounding the unconstrained optimum up
    rounded = np.unique(-(-compute_boundaries(lengths, 6) // 8) * 8)
    from bucketloader.boundaries import padding_cost

    assert padding_cost(lengths, want) <= padding_cost(lengths, rounded)
    # per input, and given boundaries are rounded up
    pairs = load_real("gsm8k")
    spec = BucketSpec.build(
        {"q": pairs[:, 0], "a": pairs[:, 1]},
        num_buckets=3,
        batch_size=8,
        pad_to_multiple_of={"q": 16, "a": 64},
    )
    assert (spec.boundaries[0][0] % 16 == 0).all() and (spec.boundaries[0][1] % 64 == 0).all()
    given_ = BucketSpec.build([3, 9, 30], boundaries=[5, 30], batch_size=2, pad_to_multiple_of=8)
    assert given_.boundaries[0][0].tolist() == [8, 32]
    stream = BucketIterable([[0] * 3], boundaries=[5, 9, 30], batch_size=2, pad_to_multiple_of=8)
    assert stream.boundaries.tolist() == [8, 16, 32]


# -- max_tokens below the longest sample -------------------------------------------------------
def test_oversize_error_single_or_drop():
    lengths = load_real("ecoli")  # longest 2358
    with pytest.raises(ValueError, match=r"max_tokens=2000 is below .*oversize='single' \| "):
        BucketSpec.build(lengths, num_buckets=6, max_tokens=2000)
    single = BucketSpec.build(
        lengths, num_buckets=6, max_tokens=TokenBudget(2000, oversize="single")
    )
    over = single.cell_lengths[:, 0] > 2000
    assert over.any() and (single.cell_batch[over] == 1).all()
    assert (single.cell_batch[~over] == 2000 // single.cell_lengths[~over, 0]).all()
    assert single.num_planned == lengths.size
    drop = TokenBudget(2000, oversize="drop")
    dropped = BucketSpec.build(lengths, num_buckets=6, max_tokens=drop)
    assert dropped.filtered["oversize"] == int((lengths > 2000).sum()) > 0
    assert (dropped.cell_lengths[:, 0] <= 2000).all() and (dropped.cell_batch >= 1).all()
    planned = dropped.cell_of_sample >= 0
    assert (lengths[planned] <= 2000).all() and not planned[lengths > 2000].any()
    check_plan_invariants(dropped, 2, seed=4)
    report = BucketSampler(single).report()
    assert report.totals["single"] == int(single.counts[over].sum())
    # joint cells: padding pushes a cell past the budget although its samples fit alone
    pairs = np.array([[60, 60], [10, 100], [100, 10], [5, 5]])
    joint = BucketSpec.build(
        pairs, boundaries=[[10, 100], [10, 100]], max_tokens=TokenBudget(120, oversize="drop")
    )
    assert joint.cell_of_sample.tolist() == [-1, 1, 2, 0] and joint.filtered["oversize"] == 1
    assert joint.cell_lengths.tolist() == [[10, 10], [10, 100], [100, 10]]
    assert joint.cell_batch.tolist() == [6, 1, 1]


@pytest.mark.filterwarnings("ignore:this BucketSampler plans .* of length 0")  # (length 0)
# -- empty samples, exact sizes, impossible budgets --------------------------------------------
def test_empty_samples_batch_like_the_shortest_bucket():
    lengths = load_real("europarl")[:, 0].copy()
    lengths[::7] = 0  # issue 12: 14% empty sentences
    # the batch-size rule itself (full rows; even batches are tested in test_plan.py)
    full = TokenBudget(16384, balance=False)
    sampler = BucketSampler(lengths, num_buckets=8, max_tokens=full, strategy="percentile")
    shapes = sorted(sampler.shapes, key=lambda s: s[1])
    assert shapes[0][1] == 0 and shapes[0][0] == shapes[1][0] == 16384 // shapes[1][1]
    even = BucketSampler(lengths, num_buckets=8, max_tokens=16384, strategy="percentile")
    assert len(even) == len(sampler)
    evens = sorted(even.shapes, key=lambda s: s[1])
    assert [s[1] for s in evens] == [s[1] for s in shapes]  # the same padded lengths
    assert all(e[0] <= f[0] for e, f in zip(evens, shapes, strict=True))  # never more rows
    capped = BucketSampler(
        lengths,
        num_buckets=8,
        max_tokens=TokenBudget(16384, max_batch_size=100, balance=False),
        strategy="percentile",
    )
    assert min(capped.shapes, key=lambda s: s[1]) == (100, 0)
    with pytest.warns(DataLossWarning, match=r"leaves out 2,889 of 20,000 samples \(14.4%\)"):
        filtered = BucketSampler(
            lengths, num_buckets=8, max_tokens=16384, min_length=1, overflow="drop"
        )
    assert min(s[1] for s in filtered.shapes) > 0
    assert filtered.spec.filtered["too_short"] == int((lengths == 0).sum())
    # every sample empty: an empty row counts as one token
    assert BucketSpec.build([0, 0, 0], max_tokens=4).cell_batch.tolist() == [4]


def test_a_batch_size_callable_gets_a_tuple_for_one_input_too():
    """s31: the callable gets the padded lengths tuple, ``(L,)`` for one input (NOTE [ The
    batch-size rule ], as ``size``'s callable), where a mapping also takes a plain length as the
    key; ``lambda b: 640 // b`` failed on the tuple, and the error now says to read shape[0]
    (only for one input: a pair's tuple is no surprise)."""
    seen = []
    BucketSpec.build([3, 5, 8, 9] * 4, boundaries=[5, 9], batch_size=lambda s: seen.append(s) or 2)
    assert seen == [(5,), (9,)]
    hint = r"to an int \(a tuple for one input too: its padded length is shape\[0\]"
    with pytest.raises(
        ValueError, match=r"raised TypeError: .* for padded lengths \(5,\); .*" + hint
    ):
        BucketSampler([3, 5, 8, 9] * 4, boundaries=[5, 9], batch_size=lambda b: 640 // b)
    with pytest.raises(ValueError, match=r"for padded lengths \(5, 9\); fix .* to an int$"):
        BucketSpec.build([[3, 9], [5, 9]], max_shapes=1, batch_size=lambda b: 640 // b)


def test_sizes_are_exact_never_wrapped():
    # issue 12: the size 2**62 + 2**62 overflowed int64 and the shape came out (10, 2**62, 2**62).
    # Lengths are < 2**62 now (as_lengths), but three of the longest still sum past int64.
    top = 2**62 - 1
    big = {"a": [top] * 4, "b": [top] * 4, "c": [top] * 4}
    with pytest.raises(ValueError, match=rf"below the padded size {3 * top} "):
        BucketSampler(big, num_buckets=1, max_tokens=10)
    with pytest.raises(ValueError, match=r"lengths\['a'\] must be < 2\*\*62"):
        BucketSampler({"a": [2**62] * 4}, num_buckets=1, max_tokens=10)
    with pytest.raises(ValueError, match=r"below the padded size 18446744073709551616 "):
        BucketSampler({"h": [2**32] * 2, "w": [2**32] * 2}, max_tokens=10, size="prod")
    with pytest.raises(ValueError, match=r"more than the 1099511627776 \(2\*\*40\)"):
        BucketSampler(big, num_buckets=1, batch_size=1)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"batch_size": 2**62}, r"batch_size=4611686018427387904 plans batches of shape"),
        ({"max_tokens": 2**63 - 1}, r"lower max_tokens, or cap the rows with"),
        ({"max_tokens": 2**63}, r"max_tokens must be an int >= 1 and <= 9223372036854775807"),
        ({"batch_size": [2**41, 1]}, r"batch_size=\(2199023255552, 1\) plans batches"),
    ],
)
def test_impossible_budgets_are_refused_at_construction(options, match):
    with pytest.raises(ValueError, match=match):
        BucketSampler([3, 40, 7], boundaries=[7, 40], **options)
    if "max_tokens" in options and options["max_tokens"] < 2**63:
        with pytest.raises(ValueError, match=match):
            BucketIterable([[0] * 3], boundaries=[7, 40], **options)
    # the largest possible batch is accepted
    ok = BucketSampler([3, 40], boundaries=[7, 40], batch_size=MAX_BATCH_ELEMENTS // 40)
    assert ok.shapes[-1][0] * 40 <= MAX_BATCH_ELEMENTS


def test_token_budget_validation():
    for kwargs, match in [
        ({"max_tokens": 0}, "max_tokens must be an int >= 1"),
        ({"max_tokens": 8, "multiple_of": 0}, "multiple_of must be an int >= 1"),
        ({"max_tokens": 8, "max_batch_size": 0}, "max_batch_size must be an int >= 1"),
        ({"max_tokens": 8, "oversize": "shrink"}, "oversize must be one of 'drop', 'error'"),
        # (2**70 was numpy's OverflowError in even_batch; s8-polish)
        ({"max_tokens": 8, "multiple_of": 2**70}, r"multiple_of must be an int >= 1 and <= 1099"),
        ({"max_tokens": 8, "max_batch_size": 2**70}, r"max_batch_size must be .* <= 1099"),
    ]:
        with pytest.raises(ValueError, match=match):
            TokenBudget(**kwargs)
    with pytest.raises(TypeError, match="max_batch_size must be an int"):
        TokenBudget(8, max_batch_size=2.5)


# -- every rule keeps the plan's invariants ----------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=150),
    k=st.integers(1, 5),
    budget=st.integers(1, 2000),
    cap=st.none() | st.integers(1, 40),
    multiple=st.integers(1, 8),
    oversize=st.sampled_from(["single", "drop"]),
    pad=st.sampled_from([1, 8]),
    num_replicas=st.integers(1, 3),
    policy=st.sampled_from(["pad", "fill", "drop", "keep"]),
    lo=st.none() | st.integers(0, 20),
    hi=st.none() | st.integers(20, 300),
    overflow=st.sampled_from(["drop", "truncate"]),
)
def test_rules_keep_the_plan_invariants(
    lengths, k, budget, cap, multiple, oversize, pad, num_replicas, policy, lo, hi, overflow
):
    lengths = np.array(lengths)
    rule = TokenBudget(budget, max_batch_size=cap, multiple_of=multiple, oversize=oversize)
    try:
        spec = BucketSpec.build(
            lengths,
            num_buckets=k,
            max_tokens=rule,
            pad_to_multiple_of=pad,
            last_batch=policy,
            min_length=lo,
            max_length=hi,
            overflow=overflow,
        )
    except ValueError as exc:
        assert "every one of the" in str(exc) or "no bucket fits" in str(exc)
        return
    kept = spec.cell_of_sample >= 0
    planned = spec.planned_lengths()[:, 0]
    if lo is not None:
        assert not kept[lengths < lo].any()
    if hi is not None:
        assert (planned[kept] <= hi).all()
        assert overflow == "truncate" or not kept[lengths > hi].any()
    assert spec.filtered["too_short"] == (0 if lo is None else int((lengths < lo).sum()))
    b = spec.cell_batch
    size = spec.cell_lengths[:, 0]
    over = size > budget
    assert (b >= 1).all()
    if cap is not None:
        assert (b[~over & (size > 0)] <= cap).all()
    fits = b[~over & (size > 0)]
    assert ((fits < multiple) | (fits % multiple == 0)).all()
    assert (fits * size[~over & (size > 0)] <= budget).all()
    if oversize == "single":
        assert (b[over] == 1).all()
    else:
        assert not over.any()
        assert not kept[planned > budget].any()
    assert (spec.cell_lengths % pad == 0).all()
    plans = check_plan_invariants(spec, num_replicas, seed=2)
    assert all((spec.cell_of_sample[p.indices] >= 0).all() for p in plans)


def test_hf_helpers_pass_pad_to_multiple_of_through():
    datasets = pytest.importorskip("datasets")
    lengths = load_real("multi30k")[:400, 0]
    ds = datasets.Dataset.from_dict({"input_ids": [[5] * int(n) for n in lengths]})
    from bucketloader.hf import for_audio, for_text

    sampler, collate, data = for_text(
        ds, pad_token_id=0, num_buckets=4, batch_size=8, pad_to_multiple_of=8
    )
    np.testing.assert_array_equal(
        sampler.boundaries, compute_boundaries(lengths, 4, pad_to_multiple_of=8)
    )
    assert collate([data[i] for i in next(iter(sampler))])["input_ids"].shape[1] % 8 == 0
    audio = datasets.Dataset.from_dict({"input_values": [[0.5] * int(n) for n in lengths]})
    sampler, _, _ = for_audio(audio, "input_values", num_buckets=3, max_tokens=640,
                              pad_to_multiple_of=64)  # fmt: skip
    assert all(s[1] % 64 == 0 for s in sampler.shapes)
