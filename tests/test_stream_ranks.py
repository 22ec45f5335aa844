"""A stream split over ranks (NOTE [ A stream split over ranks ]): equal steps and equal shapes
per step on every rank whatever the shards hold, the planned fallback counted, DataLoader
workers, exact resume, the report from the main process, and validation at the call.

Ranks are simulated in one process here (the schedule comes from a ``BucketSpec``, so no process
group is needed); ``tests/test_distributed.py`` runs real gloo processes."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import load_real
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec, PlannedBatch, TokenBudget
from bucketloader.plan.epoch import apportion
from bucketloader.stream import BucketIterable, estimate
from bucketloader.stream._schedule import (
    SCHEDULE_CHUNK,
    lane_cells,
    schedule_chunks,
    step_shares,
)


@pytest.fixture(scope="module")
def europarl():
    return load_real("europarl")[:6000, 1]


def _samples(lengths, offset=0):
    return [{"id": offset + i, "input_ids": [1] * int(n)} for i, n in enumerate(lengths)]


def _streams(shards, spec, steps, **kw):
    options = {"max_tokens": 2048, "seed": 1, **kw}
    return [
        BucketIterable(
            shard,
            length_fn="input_ids",
            boundaries=spec,
            num_replicas=len(shards),
            rank=r,
            steps_per_epoch=steps,
            **options,
        )
        for r, shard in enumerate(shards)
    ]


def _run(streams, workers=0):
    out = []
    for s in streams:
        loader = torch.utils.data.DataLoader(
            s, batch_size=None, num_workers=workers, collate_fn=lambda b: b
        )
        out.append(list(loader))
    return out


def check_in_step(streams, runs, steps):
    """Every rank: exactly ``steps`` batches; at each step the same planned shape; every batch
    fits its shape; the counters add up."""
    assert [len(r) for r in runs] == [steps] * len(runs)
    promised = set(streams[0].shapes)
    for t in range(steps):
        shapes = {b[t].planned_shape for b in runs}
        assert len(shapes) == 1, f"step {t}: ranks disagree {shapes}"
        (shape,) = shapes
        assert shape in promised
        for r in runs:
            batch = r[t]
            assert 1 <= len(batch) <= shape[0] and 0 <= batch.num_real <= len(batch)
            assert max(len(s["input_ids"]) for s in batch) <= shape[1]
    for s, r in zip(streams, runs, strict=True):
        t = s.report().totals
        rows = Counter(x["id"] for b in r for x in b[: b.num_real])
        assert sum(rows.values()) - len(rows) == t["repeated"]
        assert t["batches"] == steps
        assert t["padded_rows"] == sum(b.planned_shape[0] - b.num_real for b in r)


@pytest.mark.parametrize("layout", ["round_robin", "sorted", "uneven"])
@pytest.mark.parametrize("num_replicas", [2, 4])
def test_ranks_make_equal_steps_with_equal_shapes(europarl, layout, num_replicas):
    spec = BucketSpec.build(europarl, num_buckets=5, max_tokens=2048)
    samples = _samples(europarl)
    if layout == "round_robin":
        shards = [samples[r::num_replicas] for r in range(num_replicas)]
    elif layout == "sorted":  # the worst case: each rank holds one band of lengths
        order = sorted(samples, key=lambda s: len(s["input_ids"]))
        shards = [list(c) for c in np.array_split(np.array(order, dtype=object), num_replicas)]
    else:  # one rank has a tenth of the others' data
        cut = len(samples) // (10 * num_replicas)
        shards = [samples[:cut]] + [
            samples[cut + r :: num_replicas] for r in range(num_replicas - 1)
        ]
    steps = int(spec.num_steps(num_replicas).sum())  # what a map-style sampler would make
    streams = _streams(shards, spec, steps, shuffle_buffer=32)
    runs = _run(streams)
    check_in_step(streams, runs, steps)
    totals = [s.report().totals for s in streams]
    if layout == "round_robin":  # balanced shards: about the sampler's padding
        # at full rows, as a stream plans them (a sampler's default even rows pad less)
        full = BucketSpec.build(
            europarl, num_buckets=5, max_tokens=TokenBudget(2048, balance=False)
        )
        sampler = BucketSampler(full, num_replicas=num_replicas, rank=0)
        assert all(s.report().padding < sampler.report().padding + 0.05 for s in streams)
        assert all(t["left_over"] < 0.03 * len(europarl) / num_replicas for t in totals)
    if layout == "sorted":  # no rank has the lengths the schedule asks for: fallback
        assert sum(t["promoted"] + t["padded_rows"] for t in totals) > steps
    if layout == "uneven":  # the small shard runs dry: padding-only steps, still in step
        assert sum(b.num_real == 0 for b in runs[0]) > steps // 2
        assert totals[0]["repeated"] == 0 and totals[1]["padded_rows"] < totals[0]["padded_rows"]


@settings(max_examples=15, deadline=None)
@given(
    shard_sizes=st.lists(st.integers(1, 80), min_size=2, max_size=3),
    steps=st.integers(1, 30),
    seed=st.integers(0, 3),
    last_batch=st.sampled_from(["pad", "fill"]),
    shuffle=st.sampled_from([0, 7]),
)
def test_any_shards_any_steps_stay_in_step(shard_sizes, steps, seed, last_batch, shuffle):
    rng = np.random.default_rng(seed)
    spec = BucketSpec.build(rng.integers(1, 60, 300), boundaries=[15, 30, 59], batch_size=4)
    shards, start = [], 0
    for n in shard_sizes:
        lengths = rng.integers(1, 60, n)
        shards.append(_samples(lengths, start))
        start += n
    streams = [
        BucketIterable(
            shard,
            length_fn="input_ids",
            boundaries=spec,
            batch_size=4,
            num_replicas=len(shards),
            rank=r,
            steps_per_epoch=steps,
            seed=seed,
            shuffle_buffer=shuffle,
            last_batch=last_batch,
        )
        for r, shard in enumerate(shards)
    ]
    runs = [list(s) for s in streams]
    check_in_step(streams, runs, steps)
    if last_batch == "fill":
        assert all(len(b) == b.planned_shape[0] for r in runs for b in r)


def test_collated_batches_take_the_planned_shape_even_when_promoted(europarl):
    spec = BucketSpec.build(europarl, num_buckets=5, max_tokens=2048)
    order = sorted(_samples(europarl), key=lambda s: len(s["input_ids"]))
    shards = [order[: len(order) // 2], order[len(order) // 2 :]]
    streams = _streams(shards, spec, 40)
    collate = streams[0].collator()
    runs = _run(streams)
    promoted = 0
    for t in range(40):
        shapes = {tuple(collate(r[t])["input_ids"].shape) for r in runs}
        assert shapes == {runs[0][t].planned_shape}
        promoted += sum(
            max(len(s["input_ids"]) for s in r[t]) < r[t].planned_shape[1] for r in runs
        )
    assert promoted > 0


def test_a_step_with_nothing_that_fits_is_padding_only():
    spec = BucketSpec.build([2, 3, 30, 40], boundaries=[5, 40], batch_size=2)
    only_long = BucketIterable(
        _samples([30, 35, 40], offset=10),
        length_fn="input_ids",
        boundaries=spec,
        batch_size=2,
        num_replicas=2,
        rank=1,
        steps_per_epoch=6,
    )
    batches = list(only_long)
    assert len(batches) == 6
    short = [b for b in batches if b.planned_shape == (2, 5)]
    assert short and all(b.num_real == 0 for b in short)  # nothing of length <= 5 here
    assert sum(b.num_real for b in batches) == 3  # the long samples, once each
    empty = [b for b in short if len(b[0]["input_ids"]) == 5]  # a stand-in cut to the bucket
    out = only_long.collator()(empty[0])
    assert out["input_ids"].shape == (2, 5) and not out["sample_mask"].any()
    # filler rows attend one pad position (NOTE [ Filler rows attend one position ])
    assert out["attention_mask"].sum(1).tolist() == [1, 1] and out["lengths"].tolist() == [0, 0]
    # the stand-in's content and fixed fields are padding too (a label or an id never leaks)
    assert out["input_ids"].eq(0).all() and out["id"].tolist() == [0, 0]
    out = only_long.collator(pad_value={"input_ids": 3, "id": -1})(empty[0])
    assert out["input_ids"].eq(3).all() and out["id"].tolist() == [-1, -1]
    # an empty shard still takes its steps, as padding only (issue 21 item 4); with no sample
    # anywhere (no process group to borrow one from) the collator says how to give it fields
    empty = BucketIterable(
        [],
        length_fn="input_ids",
        boundaries=spec,
        batch_size=2,
        num_replicas=2,
        rank=1,
        steps_per_epoch=2,
    )
    dry = list(empty)
    assert len(dry) == 2 and all(list(b) == [] and b.num_real == 0 for b in dry)
    assert {b.planned_shape for b in dry} <= set(empty.shapes)
    assert empty.report().totals["padded_rows"] == 4 and empty.report().totals["samples"] == 0
    with pytest.raises(ValueError, match="no rank of the stream had a sample"):
        empty.collator()(dry[0])


def test_a_worker_without_samples_stands_in_with_the_ranks_first_sample(monkeypatch):
    """A 1-sample shard behind 2 DataLoader workers: worker 1 reads nothing, yet makes its
    steps with a stand-in of the rank's first sample (taken when the stream was built)."""
    import types

    spec = BucketSpec.build([2, 3, 30, 40], boundaries=[5, 40], batch_size=2)
    stream = BucketIterable(
        _samples([30]),
        length_fn="input_ids",
        boundaries=spec,
        batch_size=2,
        num_replicas=2,
        rank=0,
        steps_per_epoch=4,
    )
    per_worker = []
    for w in range(2):
        info = types.SimpleNamespace(id=w, num_workers=2, seed=0, dataset=stream)
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda info=info: info)
        per_worker.append(list(stream))
    assert [len(b) for b in per_worker] == [2, 2]
    assert sum(b.num_real for b in per_worker[0]) == 1
    assert all(b.num_real == 0 and len(b) >= 1 for b in per_worker[1])
    collate = stream.collator()
    for batch in per_worker[1]:
        out = collate(batch)
        assert tuple(out["input_ids"].shape) == batch.planned_shape
        assert not out["sample_mask"].any()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["list", "hf"])
def test_workers_resume_exactly(europarl, kind):
    lengths = europarl[:3000]
    spec = BucketSpec.build(lengths, num_buckets=4, max_tokens=2048)

    def make():
        if kind == "hf":
            datasets = pytest.importorskip("datasets")
            source = datasets.Dataset.from_dict(
                {"id": list(range(len(lengths))), "input_ids": [[1] * int(n) for n in lengths]}
            ).to_iterable_dataset(num_shards=4)
        else:
            source = _samples(lengths)
        return BucketIterable(
            source,
            length_fn="input_ids",
            boundaries=spec,
            max_tokens=2048,
            num_replicas=2,
            rank=0,
            steps_per_epoch=41,
            shuffle_buffer=16,
            seed=5,
        )

    def ids(loader_or_list):
        return [[s["id"] for s in b] for b in loader_or_list]

    def loader(stream):
        return torch.utils.data.DataLoader(
            stream, batch_size=None, num_workers=2, collate_fn=lambda b: b
        )

    full = ids(loader(make()))
    assert len(full) == 41
    k = 20 if kind == "hf" else 13  # HF shards itself by worker id: resume at a multiple of 2
    first = make()
    head = []
    for i, batch in enumerate(loader(first)):
        head.append([s["id"] for s in batch])
        if i + 1 == k:
            break
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    assert state["skip"] == [len(range(0, k, 2)), len(range(1, k, 2))]
    again = make()
    again.load_state_dict(state)
    assert head + ids(loader(again)) == full
    if kind == "hf":
        with pytest.raises(ValueError, match="save the state after a multiple of num_workers"):
            first.state_dict(batches_consumed=13)


@pytest.mark.slow
def test_report_and_resume_behind_workers_without_ranks(europarl):
    """A one-pass stream under 2 workers: the main process sees the counters, and a state taken
    mid-epoch (workers ending at different times) resumes exactly."""
    lengths = europarl[:2500]
    samples = _samples(lengths)

    def make():
        return BucketIterable(
            samples,
            length_fn="input_ids",
            boundaries=[10, 20, 40, 113],
            max_tokens=TokenBudget(1024, max_batch_size=64),
            min_length=1,
            overflow="drop",
            shuffle_buffer=20,
            seed=2,
        )

    def loader(stream):
        return torch.utils.data.DataLoader(
            stream, batch_size=None, num_workers=2, collate_fn=lambda b: b
        )

    stream = make()
    full = [[s["id"] for s in b] for b in loader(stream)]
    report = stream.report()  # the main process never iterated
    t = report.totals
    assert t["samples"] == len(lengths) and t["batches"] == len(full)
    assert t["too_short"] == int((lengths == 0).sum())
    assert sum(c["rows"] for c in report.cells) == sum(map(len, full))
    assert report.batches_left == 0
    assert report.extra["workers"] == report.extra["workers_counted"] == 2
    assert stream.report().totals["samples"] == len(lengths)
    for k in (1, len(full) // 2, len(full) - 2):
        first = make()
        head = []
        for i, b in enumerate(loader(first)):
            head.append([s["id"] for s in b])
            if i + 1 == k:
                break
        state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
        again = make()
        again.load_state_dict(state)
        assert head + [[s["id"] for s in b] for b in loader(again)] == full, f"after {k}"


def test_in_process_resume_of_a_split_stream(europarl):
    spec = BucketSpec.build(europarl, num_buckets=5, max_tokens=2048)
    shard = _samples(europarl)[1::2]

    def make():
        return BucketIterable(
            shard,
            length_fn="input_ids",
            boundaries=spec,
            max_tokens=2048,
            num_replicas=2,
            rank=1,
            steps_per_epoch=50,
            shuffle_buffer=40,
        )

    full = [[s["id"] for s in b] for b in make()]
    for k in (0, 17, 50):
        first = make()
        it = iter(first)
        head = [[s["id"] for s in next(it)] for _ in range(k)]
        second = make()
        second.load_state_dict(json.loads(json.dumps(first.state_dict())))
        assert head + [[s["id"] for s in b] for b in second] == full
        assert len(second) == 50


def test_validation_at_the_call(europarl):
    with pytest.raises(TypeError, match=r"source must be an iterable of samples .* got int 5"):
        BucketIterable(5, boundaries=[4], batch_size=1)
    kw = {"length_fn": "input_ids", "boundaries": [20, 113], "batch_size": 4}
    stream = BucketIterable(_samples(europarl[:50]), **kw)
    good = stream.state_dict()
    for bad, exc, match in [
        ({}, ValueError, "with format 2 or 3, got format None"),
        ([1], TypeError, "state must be a dict"),
        ({"format": 3}, ValueError, "state is missing 'config'"),
        ({**good, "epoch": -1}, ValueError, r"state\['epoch'\] must be an int >= 0, got -1"),
        ({**good, "format": 3, "workers": 2, "skip": [1]}, ValueError, r"state\['skip'\]"),
        ({**good, "config": {}}, ValueError, "configuration keys"),
    ]:
        with pytest.raises(exc, match=match):
            stream.load_state_dict(bad)
    with pytest.raises(ValueError, match="needs steps_per_epoch"):
        BucketIterable(_samples(europarl[:50]), num_replicas=2, rank=0, **kw)
    with pytest.raises(ValueError, match="last_batch must be 'pad'"):
        BucketIterable(_samples([3]), steps_per_epoch=3, last_batch="keep", **kw)
    with pytest.raises(ValueError, match="sums the counts over ranks, which needs an initialised"):
        BucketIterable(_samples([3]), steps_per_epoch=3, num_replicas=2, rank=0, **kw)
    with pytest.raises(ValueError, match=r"estimate\(...\) on 2 ranks needs an initialised"):
        BucketIterable(
            _samples(europarl[:50]),
            length_fn="input_ids",
            boundaries=estimate(3),
            batch_size=4,
            steps_per_epoch=3,
            num_replicas=2,
            rank=0,
        )
    with pytest.raises(TypeError, match="pass steps_per_epoch for a length"):
        len(stream)
    assert isinstance(
        next(iter(BucketIterable(_samples([3]), steps_per_epoch=1, **kw))), PlannedBatch
    )


def _one_sort(shares, steps, seed, epoch):
    """The schedule as one sort of every step's key (NOTE [ A schedule in chunks ])."""
    n = apportion(steps, shares)
    cell = np.repeat(np.arange(n.size), n)
    j = np.arange(steps) - np.repeat(np.cumsum(n) - n, n)
    u = np.random.default_rng(np.random.SeedSequence([seed, epoch, 0x5343])).random(steps)
    return cell[np.lexsort((cell, (j + u) / n[cell]))]


@settings(max_examples=60, deadline=None)
@given(
    shares=st.lists(st.sampled_from([0.0, 1e-3, 0.1, 0.3, 1.0, 5.0]), min_size=1, max_size=9),
    steps=st.integers(1, 3000),
    chunk=st.sampled_from([1, 2, 7, 64, 1 << 16]),
    seed=st.integers(0, 2**31),
    lanes=st.integers(1, 4),
    data=st.data(),
)
def test_a_schedule_in_chunks_is_the_one_sort(shares, steps, chunk, seed, lanes, data):
    shares = np.asarray(shares)
    if shares.sum() == 0:
        shares[-1] = 1.0
    shares = shares / shares.sum()
    whole = _one_sort(shares, steps, seed, 3)
    parts = list(schedule_chunks(shares, steps, seed, 3, chunk))
    assert np.array_equal(np.concatenate(parts), whole)
    assert max(p.size for p in parts) <= chunk + 2 * 3 * shares.size + 2  # no window holds all
    lane = data.draw(st.integers(0, lanes - 1))
    done = data.draw(st.integers(0, steps // lanes + 1))
    assert list(lane_cells(shares, steps, seed, 3, lane, lanes, done)) == (
        whole[lane::lanes][done:].tolist()
    )


@pytest.mark.parametrize("lanes", [2, 3])
def test_a_lanes_cells_cross_the_schedules_windows(lanes):
    """A lane's steps past the first window of SCHEDULE_CHUNK steps keep its stride: the
    window sizes are not multiples of the lane count, so each window starts the lane at a
    different offset (the property test above stays inside one window)."""
    shares = np.array([0.5, 0.2, 0.3])
    steps = 3 * SCHEDULE_CHUNK + 7
    whole = _one_sort(shares, steps, 5, 3)
    for lane, done in [(0, 0), (lanes - 1, 0), (1, SCHEDULE_CHUNK // lanes + 3)]:
        got = np.fromiter(lane_cells(shares, steps, 5, 3, lane, lanes, done), dtype=np.int64)
        assert np.array_equal(got, whole[lane::lanes][done:])


def test_step_shares_give_the_top_cell_a_share_and_unusable_cells_none():
    """The top usable cell gets a step even when the counts saw none of its samples (a later
    sample there has a cell to leave in); a cell of batch size 0 (oversize='drop') gets none,
    even with samples counted, and does not count as the top cell."""
    shares = step_shares(np.array([12, 0]), np.array([4, 2]))  # steps 3 and 0 -> 1 (of 2)
    assert shares.tolist() == pytest.approx([6 / 7, 1 / 7])
    shares = step_shares(np.array([12, 6, 5]), np.array([4, 2, 0]))
    assert shares.tolist() == [0.5, 0.5, 0.0]
    shares = step_shares(np.array([12, 0, 5]), np.array([4, 2, 0]))
    assert shares.tolist() == pytest.approx([6 / 7, 1 / 7, 0.0])


def test_a_stream_of_many_steps_starts_without_the_whole_schedule(europarl):
    """Each step's cell comes from a window of the schedule: ten million steps start at once,
    in a few MB (one sort of every step took ~50 bytes a step: 480 MB here)."""
    spec = BucketSpec.build(europarl, num_buckets=5, max_tokens=2048)
    stream = BucketIterable(
        _samples(europarl[:400]),
        length_fn="input_ids",
        boundaries=spec,
        max_tokens=2048,
        num_replicas=2,
        rank=0,
        steps_per_epoch=10**7,
    )
    tracemalloc.start()
    try:
        batches = list(itertools.islice(iter(stream), 3))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(batches) == 3 and peak < 64 * 2**20, peak


def test_a_short_step_takes_the_nearest_covered_cell_first():
    """NOTE [ A stream split over ranks ], filling a step: a step of the top cell with none of
    its own samples takes the cells it covers nearest first (the 6s before the 3s: less
    padding)."""
    spec = BucketSpec.build([12] * 10 + [3, 6], boundaries=[4, 8, 16], batch_size=2)
    stream = BucketIterable(
        _samples([3, 6, 3, 6]),
        length_fn="input_ids",
        boundaries=spec,
        batch_size=2,
        num_replicas=2,
        rank=0,
        steps_per_epoch=2,
    )
    batches = list(stream)
    assert [b.planned_shape for b in batches] == [(2, 16), (2, 16)]
    assert [sorted(x["id"] for x in b) for b in batches] == [[1, 3], [0, 2]]
    assert stream.report().totals["promoted"] == 4


def test_left_over_counts_the_shuffle_buffer_too():
    """A lane that stops at steps_per_epoch leaves its buffers unused: the samples still in
    the shuffle buffer count in left_over like those in the cell buffers (every sample read
    is used or left over here)."""
    spec = BucketSpec.build([12] * 10 + [3, 6], boundaries=[4, 8, 16], batch_size=2)
    stream = BucketIterable(
        _samples(list(range(1, 17)) * 4),
        length_fn="input_ids",
        boundaries=spec,
        batch_size=2,
        num_replicas=2,
        rank=0,
        steps_per_epoch=2,
        shuffle_buffer=10,
    )
    batches = list(stream)
    t = stream.report().totals
    assert t["left_over"] >= 10  # (the shuffle buffer is full when the lane stops)
    assert t["samples"] == sum(b.num_real for b in batches) + t["left_over"]
