"""Length filters on the map-style sampler (NOTE [ Length filters ]), the collator's cut for
``overflow="truncate"``, the warning about silent losses, and the sampler's report."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from conftest import load_real
from test_plan import check_plan_invariants
from torch.utils.data import DataLoader

from bucketloader import BucketSampler, PackSampler, TokenBudget
from bucketloader.boundaries import padding_ratio
from bucketloader.plan import BucketSpec, plan_epoch
from bucketloader.stream import BucketIterable
from bucketloader.weighted import WeightedBucketSampler


def test_europarl_empty_sentences_error_drop_or_count():
    en = load_real("europarl")[:, 0]
    with pytest.raises(ValueError, match=r"35 samples have length shorter than min_length=1 "):
        BucketSampler(en, num_buckets=8, max_tokens=4096, min_length=1)
    sampler = BucketSampler(en, num_buckets=8, max_tokens=4096, min_length=1, overflow="drop")
    assert sampler.spec.filtered == {"too_short": 35, "too_long": 0, "truncated": 0, "oversize": 0}
    assert not set(np.flatnonzero(en == 0)) & {i for b in sampler for i in b}
    assert sampler.report().totals["too_short"] == 35
    check_plan_invariants(sampler.spec, 2, seed=1)


def test_librispeech_outliers_no_longer_cost_a_bucket():
    lengths = load_real("librispeech")
    cut = int(np.percentile(lengths, 99.9))
    free = BucketSpec.build(lengths, num_buckets=16, batch_size=8)
    dropped = BucketSpec.build(
        lengths, num_buckets=16, batch_size=8, max_length=cut, overflow="drop"
    )
    kept = lengths[lengths <= cut]
    # the 16 buckets now all go to the kept samples: less padding on exactly those samples
    assert dropped.filtered["too_long"] == int((lengths > cut).sum()) == 29
    assert dropped.boundaries[0][0][-1] <= cut < free.boundaries[0][0][-1]
    before, after = free.boundaries[0][0], dropped.boundaries[0][0]
    assert padding_ratio(kept, after) < padding_ratio(kept, before)
    cut_spec = BucketSpec.build(
        lengths, num_buckets=16, batch_size=8, max_length=cut, overflow="truncate"
    )
    assert cut_spec.filtered["truncated"] == 29 and cut_spec.num_planned == lengths.size
    assert cut_spec.boundaries[0][0][-1] == cut
    assert cut_spec.shape_table().truncate == (cut,)
    check_plan_invariants(cut_spec, 2, seed=0)


def test_per_input_limits_and_their_errors():
    pairs = load_real("gsm8k")
    lengths = {"question": pairs[:, 0], "answer": pairs[:, 1]}
    spec = BucketSpec.build(
        lengths, num_buckets=3, batch_size=8, max_length={"answer": 150}, overflow="drop"
    )
    planned = spec.cell_of_sample >= 0
    assert planned.sum() == (pairs[:, 1] <= 150).sum() < pairs.shape[0]
    assert spec.boundaries[0][1][-1] <= 150
    assert spec.boundaries[0][0][-1] == pairs[planned, 0].max() < pairs[:, 0].max()
    with pytest.raises(ValueError, match=r"samples have input 'answer' length longer than "):
        BucketSpec.build(lengths, batch_size=8, max_length={"answer": 150})
    with pytest.raises(ValueError, match=r"max_length names input 'label', but the inputs are"):
        BucketSpec.build(lengths, batch_size=8, max_length={"label": 150})
    with pytest.raises(ValueError, match="min_length must be <= max_length, got min_length=9"):
        BucketSpec.build([3, 4], batch_size=2, min_length=9, max_length=5)
    with pytest.raises(ValueError, match="overflow must be one of 'drop', 'error', 'truncate'"):
        BucketSpec.build([3, 4], batch_size=2, max_length=3, overflow="cut")
    with pytest.raises(ValueError, match=r"every one of the 2 samples is left out \(2 too short\)"):
        BucketSpec.build([3, 4], batch_size=2, min_length=9, overflow="drop")
    with pytest.raises(ValueError, match=r"every sample of group 1 is left out"):
        BucketSpec.build([3, 40], groups=[0, 1], batch_size=2, max_length=9, overflow="drop")
    with pytest.raises(TypeError, match=r"max_length must be an int >= 1, got max_length=2.5"):
        BucketSpec.build([3, 4], batch_size=2, max_length=2.5)


def _dataset(lengths):
    return [
        {"input_ids": list(range(int(n))), "labels": [7] * int(n), "frames": torch.ones(int(n), 2)}
        for n in lengths
    ]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_truncate_end_to_end_through_the_collator(num_workers):
    """The plan puts long samples at max_length; the collator cuts them, never fails."""
    lengths = load_real("ecoli")[:600]
    sampler = BucketSampler(
        lengths, num_buckets=4, max_tokens=4000, max_length=400, overflow="truncate", seed=2
    )
    data = _dataset(lengths)
    collate = sampler.collator(
        fields={"input_ids": "length", "labels": "length", "frames": _frames()},
        pad_value={"labels": -100},
    )
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
    seen = 0
    for batch in loader:
        assert tuple(batch["input_ids"].shape) in sampler.shapes
        real = batch["sample_mask"]
        n = batch["lengths"][real]
        assert (n <= 400).all()
        assert batch["labels"].shape == batch["input_ids"].shape
        assert batch["frames"].shape[:2] == batch["input_ids"].shape
        for row, m in zip(batch["input_ids"][real], n.tolist(), strict=True):
            assert row[:m].tolist() == list(range(m))  # the first max_length elements
        seen += int(real.sum())
    assert seen == lengths.size
    assert data[int(np.argmax(lengths))]["labels"] == [7] * int(lengths.max()), "data untouched"


def _frames():
    from bucketloader.collate import Field

    return Field(input="length", dims=0)


def test_truncate_cuts_only_what_the_plan_truncates():
    sampler = BucketSampler([3, 5, 30, 8], boundaries=[5, 8], batch_size=2, max_length=8,
                            overflow="truncate")  # fmt: skip
    collate = sampler.collator()
    out = collate([torch.arange(30), torch.arange(8)])
    assert out["inputs"].shape == (2, 8) and out["lengths"].tolist() == [8, 8]
    plain = BucketSampler([3, 5, 8], boundaries=[5, 8], batch_size=2).collator()
    with pytest.raises(ValueError, match="beyond the longest planned length 8"):
        plain([torch.arange(30), torch.arange(8)])


def test_stream_takes_the_same_filters():
    en = load_real("europarl")[:2000, 0]
    samples = [{"id": i, "input_ids": [1] * int(n)} for i, n in enumerate(en)]
    kw = {"length_fn": "input_ids", "boundaries": [10, 20, 40, 121], "batch_size": 16}
    with pytest.raises(ValueError, match=r"has length 0 < min_length=1; pass overflow='drop'"):
        list(BucketIterable(samples, min_length=1, **kw))
    stream = BucketIterable(samples, min_length=1, max_length=30, overflow="drop", **kw)
    got = [s["id"] for b in stream for s in b]
    keep = (en >= 1) & (en <= 30)
    assert sorted(got) == np.flatnonzero(keep).tolist()
    t = stream.report().totals
    assert (t["too_short"], t["too_long"]) == (1, 50)
    cut = BucketIterable(samples, max_length=30, overflow="truncate", **kw)
    with pytest.warns(UserWarning, match="keeps samples of length 0 .*min_length=1"):
        assert max(len(s["input_ids"]) for b in cut for s in b) == 30
    assert cut.report().totals["zero_length"] == 1  # (kept: the one min_length refused above)
    with pytest.raises(ValueError, match=r"max_length=200 is beyond the last boundary 121"):
        BucketIterable(samples, max_length=200, **kw)


# -- silent losses (issue 12) ----------------------------------------------------------------
def test_warns_once_when_a_plan_drops_a_lot():
    lengths = load_real("commonvoice")[:3001]
    with pytest.warns(UserWarning, match=r"leaves out 505 of 3,001 samples \(16.8%\) .* 2 rank"):
        lossy = BucketSampler(
            lengths,
            num_buckets=16,
            strategy="percentile",
            batch_size=32,
            last_batch="drop",
            num_replicas=2,
            rank=0,
        )
    assert lossy.report().totals["dropped"] == 505  # the plan agrees with the warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BucketSampler(load_real("commonvoice"), num_buckets=4, batch_size=8, last_batch="drop")
        BucketSampler(lengths, num_buckets=16, batch_size=32, num_replicas=2, rank=0)


def test_an_epoch_with_no_batch_is_refused():
    """last_batch="drop" that leaves out every sample used to warn ("100.0%") and make an empty
    epoch, while the filters raise for the same outcome: one ValueError naming the fix."""
    fix = r"with last_batch='drop' .* all 3 samples would be left out; pass last_batch='pad'"
    with pytest.raises(ValueError, match=r"BucketSampler would make no batch per epoch: " + fix):
        BucketSampler([5, 6, 7], num_buckets=1, batch_size=4, last_batch="drop")
    with pytest.raises(ValueError, match=r"a step takes 4 rows on 2 rank\(s\)"):
        BucketSampler([1, 2, 3, 4, 5], batch_size=2, last_batch="drop", num_replicas=2, rank=0)
    with pytest.raises(ValueError, match=r"PackSampler would make no batch per epoch"):
        PackSampler([5, 6, 7], row_length=8, batch_size=4, last_batch="drop")
    assert len(BucketSampler([5, 6, 7], num_buckets=1, batch_size=4)) == 1  # "pad": one batch
    # weighted draws fill batches the 3 samples cannot: not an empty epoch
    drawn = WeightedBucketSampler(
        [5, 6, 7], weights=[1, 1, 1], num_samples=100, batch_size=4, last_batch="drop"
    )
    assert len(drawn) > 20


@pytest.mark.parametrize("bad", ["", 0, None, "Pad"])
def test_last_batch_must_be_a_policy(bad):
    with pytest.raises(ValueError, match=r"last_batch must be one of 'drop', 'fill', 'keep',"):
        BucketSampler([3, 4], batch_size=2, last_batch=bad)
    with pytest.raises(ValueError, match=r"last_batch must be one of"):
        BucketIterable([[1]], boundaries=[4], batch_size=2, last_batch=bad)


# -- the report ------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:this BucketSampler leaves out")
@pytest.mark.parametrize("policy", ["pad", "fill", "drop", "keep"])
def test_report_matches_counting_the_batches(policy):
    lengths = load_real("ecoli")
    sampler = BucketSampler(
        lengths,
        num_buckets=5,
        max_tokens=TokenBudget(6000, max_batch_size=40),
        last_batch=policy,
        max_length=1500,
        overflow="truncate",
        num_replicas=3,
        rank=1,
        seed=5,
    )
    kw = {"seed": 5, "epoch": 0, "num_replicas": 3, "promotion": sampler.promotion}
    plans = [plan_epoch(sampler.spec, rank=r, **kw) for r in range(3)]
    cut = np.minimum(lengths, 1500)
    appear = np.bincount(np.concatenate([p.indices for p in plans]), minlength=lengths.size)
    report = sampler.report()
    t = report.totals
    assert (t["samples"], t["planned"], t["truncated"]) == (4391, 4391, int((lengths > 1500).sum()))
    assert t["seen"] == int((appear > 0).sum())
    assert t["repeated"] == int(appear.sum() - (appear > 0).sum())
    assert t["dropped"] == 4391 - t["seen"]
    real = padded = 0
    for p in plans:
        for i in range(len(p)):
            idx = p.batch(i)
            shape = sampler.shape_table.target(cut[idx])
            rows = shape[0] if policy in ("pad", "fill") else len(idx)
            real += int(cut[idx].sum())
            padded += rows * shape[1]
    assert sum(c["real"] for c in report.cells) == real
    assert sum(c["padded"] for c in report.cells) == padded
    assert report.padding == pytest.approx((padded - real) / real)
    assert report.batches_left == len(sampler) and report.samples_left == plans[1].offsets[-1]
    it = iter(sampler)
    for _ in range(5):
        next(it)
    now = sampler.report()
    assert (now.batches_done, now.batches_left) == (5, len(sampler) - 5)
    assert now.samples_left == plans[1].offsets[-1] - plans[1].offsets[5]
    assert "padding" in str(now) and now.as_dict()["totals"] == dict(now.totals)
    if policy == "pad":  # the recommender's epoch totals agree with the report on one rank
        from bucketloader.analysis.recommend import epoch_cost

        one = BucketSampler(sampler.spec, num_replicas=1).report()
        cost = epoch_cost(
            lengths,
            sampler.spec.boundaries[0][0],
            max_tokens=TokenBudget(6000, max_batch_size=40),
            max_length=1500,
            overflow="truncate",
        )
        assert cost.padded_tokens == sum(c["padded"] for c in one.cells)
        assert cost.real_tokens == sum(c["real"] for c in one.cells)
