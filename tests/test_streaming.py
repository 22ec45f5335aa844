"""bucketloader.streaming: planned shapes from streams, last-batch policies, overflow, resume."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import load_real
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from bucketloader.boundaries import assign_buckets
from bucketloader.plan import DataLossWarning
from bucketloader.solve import compute_boundaries
from bucketloader.stream import BucketIterable, PackIterable, estimate

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def _samples(lengths):
    return [{"id": i, "input_ids": [i % 7] * int(n)} for i, n in enumerate(lengths)]


def _ids(batches):
    return [[s["id"] for s in b] for b in batches]


@pytest.fixture(scope="module")
def europarl():
    return load_real("europarl")[:3000, 1]


def _check_planned(batches, stream, lengths, *, last_batch):
    b, sizes = stream.boundaries, stream.batch_sizes
    short = Counter()
    for batch in batches:
        lens = [len(s["input_ids"]) for s in batch]
        buckets = assign_buckets(lens, b).tolist()
        i = buckets[0]
        if len(set(buckets)) > 1:  # fill tops a bucket's last batch up with samples the
            # buckets it covers handed out (NOTE [ What a stream's fill repeats ]); the batch
            # takes its first sample's bucket
            assert last_batch == "fill" and max(buckets) == i, "a batch mixes buckets"
            short[i] += 1
        if len(batch) != sizes[i]:
            short[i] += 1
            assert last_batch in ("pad", "keep") and len(batch) < sizes[i]
    assert all(c == 1 for c in short.values()), "more than one partial batch per bucket"
    seen = Counter(s["id"] for batch in batches for s in batch)
    if last_batch in ("pad", "keep"):
        assert seen == Counter(range(len(lengths)))
    elif last_batch == "drop":
        assert all(v == 1 for v in seen.values())
        assert len(seen) >= len(lengths) - sum(n - 1 for n in sizes)
    else:  # fill: every sample at least once, repeats only to complete a bucket's last batch
        assert set(seen) == set(range(len(lengths)))
        assert sum(seen.values()) - len(lengths) < sum(sizes)


@pytest.mark.parametrize("last_batch", ["pad", "fill", "drop", "keep"])
@pytest.mark.parametrize("shuffle_buffer", [0, 100])
def test_batches_have_planned_shapes_on_real_lengths(europarl, last_batch, shuffle_buffer):
    b = compute_boundaries(europarl, 6)
    stream = BucketIterable(
        _samples(europarl),
        length_fn="input_ids",
        boundaries=b,
        max_tokens=1024,
        last_batch=last_batch,
        shuffle_buffer=shuffle_buffer,
        seed=3,
    )
    assert stream.batch_sizes == tuple(int(x) for x in 1024 // b)
    batches = list(stream)
    _check_planned(batches, stream, europarl, last_batch=last_batch)
    assert stream.report().totals["samples"] == len(europarl)
    assert stream.report().totals["batches"] == len(batches)


def test_deterministic_for_seed_and_epoch(europarl):
    def run(seed, epoch):
        s = BucketIterable(
            _samples(europarl[:600]),
            length_fn="input_ids",
            boundaries=[10, 20, 40, 113],
            batch_size=8,
            shuffle_buffer=64,
            seed=seed,
        )
        s.set_epoch(epoch)
        return _ids(s)

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(2, 0)
    assert run(1, 0) != run(1, 1)
    assert run(0, 1) != run(1, 0)  # no seed + epoch aliasing


def test_memory_stays_bounded_by_buffers(europarl):
    lengths = europarl[:2000]
    state = {"read": 0}

    def source():
        for s in _samples(lengths):
            state["read"] += 1
            yield s

    stream = BucketIterable(
        source(),
        length_fn="input_ids",
        boundaries=[8, 16, 32, 113],
        batch_size=16,
        shuffle_buffer=50,
    )
    out = 0
    for batch in stream:
        out += len(batch)
        if stream._engine.phase == "stream":
            assert state["read"] - out <= 4 * 16 + 50
    assert out == len(lengths)


@pytest.mark.filterwarnings("ignore:this BucketIterable keeps samples of length 0")  # (length 0)
def test_edges_follow_the_boundary_convention():
    lengths = [4, 5, 8, 9, 16, 1, 0, 12]
    b = [4, 8, 16]
    stream = BucketIterable(
        [[0] * n for n in lengths], boundaries=b, batch_size=3, last_batch="keep"
    )
    batches = sorted(sorted(len(s) for s in batch) for batch in stream)
    assert batches == [[0, 1, 4], [5, 8], [9, 12, 16]]
    for batch in batches:  # each batch is one bucket of the convention
        assert len(set(assign_buckets(batch, b).tolist())) == 1
    # a last boundary too large for a lookup table takes the binary search: same convention
    big = BucketIterable(
        [[0] * n for n in (3, 2, 5)], boundaries=[2, 1 << 21], batch_size=2, last_batch="keep"
    )
    assert sorted(sorted(map(len, batch)) for batch in big) == [[2], [3, 5]]


def test_overflow_policies():
    samples = _samples([3, 12, 5, 20, 7])
    for s in samples:
        s["labels"] = list(s["input_ids"])
        s["text"] = "x" * len(s["input_ids"])
    kw = {"length_fn": "input_ids", "boundaries": [4, 10], "batch_size": 1, "last_batch": "keep"}
    with pytest.raises(ValueError, match=r"sample 1 of this worker's stream has length 12 > the"):
        list(BucketIterable(samples, **kw))
    dropped = BucketIterable(samples, overflow="drop", **kw)
    assert sorted(_ids(dropped)) == [[0], [2], [4]]
    assert dropped.report().totals["too_long"] == 2
    cut = BucketIterable(samples, overflow="truncate", **kw)
    out = {b[0]["id"]: b[0] for b in cut}
    assert len(out[3]["input_ids"]) == len(out[3]["labels"]) == 10
    assert out[3]["text"] == "x" * 20 and cut.report().totals["truncated"] == 2

    def halve(sample, limit):
        return {**sample, "input_ids": sample["input_ids"][: limit // 2]}

    custom = BucketIterable(samples, overflow=halve, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sorted(len(b[0]["input_ids"]) for b in custom) == [3, 5, 5, 5, 7]
    # a callable is the user's policy (a resize loses nothing): not said to cut (s21-rev: it was
    # "cuts 2 samples (overflow='truncate': what is past the cut is never seen)"), while
    # overflow="truncate" itself is
    assert not [w for w in caught if "cuts" in str(w.message)]
    with pytest.warns(DataLossWarning, match=r"cuts 2 samples \(overflow='truncate'"):
        list(BucketIterable(samples, overflow="truncate", **kw))
    with pytest.raises(ValueError, match="overflow='truncate' cuts samples"):
        BucketIterable(samples, overflow="truncate", **{**kw, "length_fn": len})


def _fill_notes(stream):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = Counter(s["id"] for b in stream for s in b)
    return got, [str(w.message) for w in caught if "last_batch='fill'" in str(w.message)]


def test_fill_that_makes_a_batch_of_copies_is_said():
    # NOTE [ What a stream's fill repeats ]: a stream's lone sample completed to a batch of 8
    # made 8 copies of it, counted in report() but not said (s22-fill: LibriSpeech, 8 ranks, one
    # utterance 64 times an epoch); a few scattered repeats (1 of 39 here) stay silent
    lens = [2] * 39 + [9]
    kw = dict(length_fn="input_ids", boundaries=[4, 10], batch_size=8, last_batch="fill")
    got, said = _fill_notes(BucketIterable(_samples(lens[39:]), **kw))
    assert got[0] == 8 and len(said) == 1
    assert (
        "hand out 7 repeats of samples in epoch 0 (700.0% of the 1 it read), one sample 8 times"
        in said[0]
    )
    assert "last_batch='pad'" in said[0]
    # beside shorter samples, the lone one is topped up with the shorter bucket's last batch
    # (fill version 2; it was 8 copies of itself): 7 of them twice, yet 20% of what it read
    got, said = _fill_notes(BucketIterable(_samples(lens), **kw))
    assert got[39] == 1 and max(got.values()) == 2 and len(said) == 1
    assert "hand out 8 repeats of samples in epoch 0 (20.0% of the 40 it read)" in said[0]
    got, said = _fill_notes(BucketIterable(_samples(lens[:39]), **kw))
    assert max(got.values()) == 2 and said == []  # 1 repeat of 39
    # a stream split over ranks: rank 1's last steps (3 samples and one of its previous batch,
    # then, once its shard is dry, 4 of those it handed out before: 2 appearances at most,
    # was 4 of one sample, 25% of what it read all the same)
    from bucketloader import BucketSampler

    spec = BucketSampler(lens, boundaries=[4, 10], batch_size=4).spec
    s = BucketIterable(
        _samples(lens)[1::2],
        **{**kw, "boundaries": spec, "batch_size": 4},
        num_replicas=2,
        rank=1,
        steps_per_epoch=6,
    )
    got, said = _fill_notes(s)
    assert max(got.values()) == 2 and len(said) == 1 and "5 repeats of samples" in said[0]
    assert "one sample 2 times" in said[0]
    # a packing stream's last batch: one row (one document of 6 tokens) completed to 4 rows
    # with the least seen of the rows handed out last (fill version 2; it was 4 copies of its
    # own row): 3 documents twice, yet 33% of what it read
    docs = [{"id": i, "input_ids": [1] * 6} for i in range(9)]
    pk = dict(length_fn="input_ids", row_length=10, batch_size=4, last_batch="fill")
    got, said = _fill_notes(PackIterable(docs, **pk))
    assert got[8] == 1 and max(got.values()) == 2 and len(said) == 1
    assert "3 repeats of documents" in said[0] and "one document 2 times" in said[0]
    got, said = _fill_notes(PackIterable(docs[:1], **pk))  # nothing before it: its own row
    assert got[0] == 4 and len(said) == 1 and "one document 4 times" in said[0]
    got, said = _fill_notes(PackIterable(docs[:8], **pk))
    assert max(got.values()) == 1 and said == []


def test_fill_tops_up_from_the_samples_handed_out_before():
    # NOTE [ What a stream's fill repeats ]: a short batch was completed with copies of its own
    # samples, and a step with none repeated the last batch, so one sample made most of two
    # batches (LibriSpeech frames, 8 ranks: one utterance 64 times an epoch). Fill version 2
    # tops up with the least seen of the samples the bucket (then the buckets it covers) handed
    # out last and its own: here 4 simulated ranks went from up to 8 appearances to 2, one pass
    # too;
    # every step keeps its shape and count, report() counts every repeat, and a state taken
    # in the fills resumes to the same batches
    from bucketloader import BucketSampler

    lens = np.minimum(np.random.default_rng(3).geometric(0.08, 400) + 1, 40)
    samples, world = _samples(lens), 4
    spec = BucketSampler(lens, num_buckets=5, batch_size=8).spec
    steps = len(
        BucketSampler(
            lens, num_buckets=5, batch_size=8, num_replicas=world, rank=0, last_batch="fill"
        )
    )
    kw = dict(length_fn="input_ids", boundaries=spec, batch_size=8, last_batch="fill")

    def make(rank):
        if rank is None:  # one pass over every sample: the tails
            return BucketIterable(samples, **kw)
        shard = samples[rank::world]
        return BucketIterable(shard, **kw, num_replicas=world, rank=rank, steps_per_epoch=steps)

    shapes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rank in [*range(world), None]:
            stream = make(rank)
            batches = _ids(stream)
            got = Counter(i for b in batches for i in b)
            assert max(got.values()) == 2, rank  # (main: 8, 4, 2, 8; one pass 8)
            assert sum(got.values()) - len(got) == stream.report().totals["repeated"]
            assert all(len(b) == 8 for b in batches)
            if rank is not None:
                shapes.append([tuple(b.planned_shape) for b in make(rank)])
            for k in (len(batches) - 3, len(batches) - 1):  # states in the fills
                again = make(rank)
                it = iter(again)
                for _ in range(k):
                    next(it)
                resumed = make(rank)
                resumed.load_state_dict(json.loads(json.dumps(again.state_dict())))
                assert _ids(resumed) == batches[k:], (rank, k)
    assert len(shapes[0]) == steps and all(s == shapes[0] for s in shapes)
    # a one-pass stream's tail batch carries no planned shape: its collator takes the shape of
    # its first sample's bucket (s23-rev: refused, "samples of one batch fall in different
    # buckets", when the top-up took a shorter bucket's samples)
    ten_and_thirty = _samples(np.array([10] * 8 + [30] * 3))
    stream = BucketIterable(ten_and_thirty, **{**kw, "boundaries": [10, 30], "batch_size": 4})
    collate = stream.collator()
    got = [(sorted(len(x["input_ids"]) for x in b), collate(b)["input_ids"].shape) for b in stream]
    assert got[-1] == ([10, 30, 30, 30], (4, 30))


def test_fill_repeats_a_shorter_cells_batch_at_the_longer_cells_batch_size():
    # a lane's step of a long cell that finds nothing repeats a shorter cell's last batch; under
    # max_tokens that batch holds more samples than the long cell's batch size: 4 samples for
    # a planned (2, 8) raised in the collator mid-epoch (s22-fill: LibriSpeech, 32 buckets, 16
    # ranks, steps_per_epoch 30% over the sampler's count: 16 such batches)
    from bucketloader import BucketSampler

    spec = BucketSampler([2] * 16 + [7] * 8, boundaries=[4, 8], max_tokens=16).spec
    stream = BucketIterable(
        _samples([2] * 4),
        length_fn="input_ids",
        boundaries=spec,
        max_tokens=16,
        last_batch="fill",
        num_replicas=2,
        rank=0,
        steps_per_epoch=6,
    )
    collate = stream.collator()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(stream)
    assert [b.planned_shape for b in batches].count((2, 8)) == 3
    for b in batches:
        assert collate(b)["input_ids"].shape == b.planned_shape


def test_estimate_from_head_and_one_shot_iterator(europarl):
    head = europarl[:500]
    stream = BucketIterable(
        iter(_samples(europarl)),
        length_fn="input_ids",
        boundaries=estimate(4, sample_size=500),
        batch_size=8,
        overflow="drop",
    )
    np.testing.assert_array_equal(stream.boundaries, compute_boundaries(head, 4))
    n = sum(len(b) for b in stream)
    assert n + stream.report().totals["too_long"] == len(europarl)  # the head was replayed
    assert list(stream) == []  # a one-shot iterator gives one pass
    capped = BucketIterable(
        _samples(europarl),
        length_fn="input_ids",
        batch_size=4,
        overflow="truncate",
        boundaries=estimate(4, sample_size=300, max_length=40),
    )
    assert capped.boundaries[-1] == 40
    assert max(len(s["input_ids"]) for b in capped for s in b) <= 40


def test_validation_errors():
    with pytest.raises(ValueError, match=r"exactly one of batch_size \(.*\) or max_tokens"):
        BucketIterable([[1]], boundaries=[4])
    # s19-user: no boundaries was Python's "missing 1 required keyword-only argument", also
    # where num_buckets= was given
    with pytest.raises(TypeError, match=r"needs boundaries=: .*boundaries=estimate\(8\) \(from b"):
        BucketIterable([[1]], num_buckets=8, batch_size=2)
    # s23-joint: max_shapes= was "needs boundaries=", with them "did you mean max_tokens=?"
    for options in ({}, {"boundaries": [[4], [4]]}):
        with pytest.raises(TypeError, match=r"got max_shapes=4, a sampler's plan: .*BucketSampler"):
            BucketIterable([[1]], length_fn=("a", "b"), max_shapes=4, batch_size=2, **options)
    with pytest.raises(ValueError, match="last_batch must be one of"):
        BucketIterable([[1]], boundaries=[4], batch_size=2, last_batch="partial")
    with pytest.raises(
        ValueError, match=r"max_tokens=10 fits no sample of padded length\(s\) \[16\]"
    ):
        BucketIterable([[1]], boundaries=[4, 16], max_tokens=10)
    with pytest.raises(
        ValueError,
        match=r"\['a', 'b'\] are sequence-valued: which one is the length is ambiguous; "
        r"pass length_fn=",
    ):
        list(BucketIterable([{"a": [1], "b": [2]}], boundaries=[4], batch_size=1))
    with pytest.raises(ValueError, match="length_fn returned -1 for sample 0"):
        list(BucketIterable([[1]], length_fn=lambda s: -1, boundaries=[4], batch_size=1))
    # s19-user: len() of a dict counts its keys, so every sample had length 1 and went to the
    # first bucket (the collator then refused the batch); getting-started.md showed length_fn=len
    dicts = [{"input_ids": [1] * n} for n in (3, 7)]
    for stream in (
        BucketIterable(dicts, length_fn=len, boundaries=[4, 8], batch_size=2),
        PackIterable(dicts, length_fn=len, row_length=8, batch_size=1),
    ):
        with pytest.raises(TypeError, match=r"length_fn=len .* its number of keys \(1\), .*pass"):
            list(stream)
    # (s19-review: and a tuple of fields, (input_ids, label), by its 2 items)
    pairs = BucketIterable(
        [([1] * n, 0) for n in (3, 7)], length_fn=len, boundaries=[4, 8], batch_size=2
    )
    with pytest.raises(TypeError, match=r"length_fn=len .* number of items \(2\), .*length_fn=0"):
        list(pairs)
    lists = BucketIterable([[1] * 3, [1] * 7], length_fn=len, boundaries=[4, 8], batch_size=1)
    assert [len(b) for b in lists] == [1, 1]  # len() of a list sample is still its length
    tokens = BucketIterable([(1, 2, 3), (1,) * 7], length_fn=len, boundaries=[4, 8], batch_size=1)
    assert [len(b) for b in tokens] == [1, 1]  # and of a tuple of token ids
    # s19-user: left at torch's batch_size=1, a DataLoader handed the collator a list of one
    # batch: a stream of tensors came out as fields 0, 1 of one row (no "inputs"), silently
    tensors = BucketIterable([torch.ones(n) for n in (3, 2)], boundaries=[4], batch_size=2)
    with pytest.raises(TypeError, match=r"batches them again .*DataLoader\(stream, batch_size=No"):
        list(DataLoader(tensors, collate_fn=tensors.collator()))
    assert len(list(DataLoader(tensors, collate_fn=lambda b: b))) == 1  # a collate_fn of one's own
    # s8-polish: a length past 2**62 (or max_length) was numpy's OverflowError in estimate()
    with pytest.raises(ValueError, match=r"returned 1180591620717411303424 .* < 2\*\*62"):
        list(BucketIterable([2**70, 3], length_fn=int, boundaries=estimate(2), batch_size=2))
    with pytest.raises(ValueError, match="max_length must be an int >= 1 and <= 46116"):
        estimate(2, max_length=2**70)
    # a 0-d integer tensor (e.g. mask.sum()) was refused; a bool or float one still is (s8-polish)
    sums = [torch.ones(n) for n in (3, 2, 4)]
    got = list(
        BucketIterable(sums, length_fn=lambda s: (s > 0).sum(), boundaries=[4], batch_size=3)
    )
    assert [len(b) for b in got] == [3]
    for bad in (torch.tensor(True), torch.tensor(2.0)):
        with pytest.raises(ValueError, match=r"returned tensor\((True|2\.)\) .* 0-d integer"):
            list(BucketIterable(sums, length_fn=lambda s, b=bad: b, boundaries=[4], batch_size=1))
    with pytest.raises(ValueError, match="strictly increasing"):
        BucketIterable([[1]], boundaries=[4, 4], batch_size=1)


def test_estimate_checks_its_options_before_any_sample_is_read():
    """s12-polish left it: estimate(4, samples=10) was accepted, and refused only when the
    stream read its head and solved, as an option of the strategy."""
    read = []

    def source():
        for n in (3, 5, 9, 12):
            read.append(n)
            yield [1] * n

    cases = [
        (TypeError, r"^estimate got an unexpected option samples=10; did you mean sample_size=\?"),
        (TypeError, r"^estimate got an unexpected option num_bucket=3; did you mean num_buckets="),
        (TypeError, r"^estimate got an unexpected option time_limit=1; its options: cache, cost"),
        (ValueError, r"^cost must be one of 'linear', 'quadratic', got cost='cubic'"),
        (ValueError, r"^pad_to_multiple_of must be an int >= 1, got pad_to_multiple_of=0"),
        (ValueError, r"^strategy must be one of .* got strategy='opt'"),
        (TypeError, r"^cache must be None, True .* got cache='dir'"),
    ]
    options = [
        dict(samples=10), dict(num_bucket=3), dict(time_limit=1), dict(cost="cubic"),
        dict(pad_to_multiple_of=0), dict(strategy="opt"), dict(cache="dir"),
    ]  # fmt: skip
    for (kind, match), bad in zip(cases, options, strict=True):
        with pytest.raises(kind, match=match):
            BucketIterable(source(), boundaries=estimate(2, **bad), batch_size=2)
    assert read == []
    # a strategy's own options, and a strategy that takes **kwargs, still pass
    assert estimate(2, strategy="lp", time_limit=1).options == {"time_limit": 1}
    it = BucketIterable(source(), boundaries=estimate(2, strategy="lp", time_limit=5), batch_size=2)
    assert sorted(b[-1] for b in it.shapes) == [5, 12]


def _hf_source(lengths, shards=3):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {"id": list(range(len(lengths))), "input_ids": [[1] * int(n) for n in lengths]}
    )
    return ds.to_iterable_dataset(num_shards=shards)


RESUME_CASES = {
    "list-pad": lambda lens: ({"source": _samples(lens), "last_batch": "pad"}),
    "list-fill-shuffle": lambda lens: (
        {"source": _samples(lens), "last_batch": "fill", "shuffle_buffer": 40}
    ),
    "hf-keep-shuffle": lambda lens: (
        {"source": _hf_source(lens), "last_batch": "keep", "shuffle_buffer": 25}
    ),
    "hf-drop": lambda lens: ({"source": _hf_source(lens), "last_batch": "drop"}),
    # (a source that checkpoints itself: the state's checkpoints reach back to the buckets'
    # last batches, which the tail's fill tops up from; NOTE [ What a stream's fill repeats ])
    "hf-fill": lambda lens: ({"source": _hf_source(lens), "last_batch": "fill"}),
}


@pytest.mark.filterwarnings("ignore:this \\w+ starts another pass of epoch")  # on purpose
@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_yields_exactly_the_remaining_batches(europarl, case):
    lens = europarl[:700]

    def make():
        kw = RESUME_CASES[case](lens)
        return BucketIterable(
            kw.pop("source"),
            length_fn="input_ids",
            boundaries=[8, 14, 20, 30, 113],
            batch_size=12,
            seed=5,
            **kw,
        )

    full = _ids(make())
    for k in sorted({0, 1, 7, len(full) // 2, len(full) - 3, len(full) - 1, len(full)}):
        first = make()
        it = iter(first)
        head = [next(it) for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))
        second = make()
        second.load_state_dict(state)
        rest = _ids(second)
        assert _ids(head) + rest == full, f"resume after {k} batches"
        assert _ids(second) == full  # the pass after a resume starts afresh


def test_a_state_of_another_fill_version_is_refused(europarl):
    # NOTE [ What a stream's fill repeats ]: fill version 2 completes short batches with other
    # samples than version 1 did, so a state saved by version 1 (no "fill" in its config) would
    # resume into other batches than the saved run's: refused, named, with the way on; a replay
    # state from before the first batch starts the epoch over and loads
    def make():
        return BucketIterable(
            _samples(europarl[:50]),
            length_fn="input_ids",
            boundaries=[20, 113],
            batch_size=4,
            last_batch="fill",
        )

    s = make()
    fresh = s.state_dict()
    assert fresh["config"]["fill"] == 2
    it = iter(s)
    next(it)
    state = json.loads(json.dumps(s.state_dict()))
    assert state["fill"]["last"] and "seen" in state["fill"]
    make().load_state_dict(state)
    old = {**state, "config": {k: v for k, v in state["config"].items() if k != "fill"}}
    old = {k: v for k, v in old.items() if k != "fill"}
    with pytest.raises(ValueError, match=r"copies of its own samples .*set_epoch\(0\)"):
        make().load_state_dict(old)
    with pytest.raises(ValueError, match="fill version 3"):
        make().load_state_dict({**state, "config": {**state["config"], "fill": 3}})
    make().load_state_dict(
        {**fresh, "config": {k: v for k, v in fresh["config"].items() if k != "fill"}}
    )
    with pytest.raises(ValueError, match="state's buffers do not fit"):
        make().load_state_dict({**state, "fill": {"last": [[7, [0]]], "seen": []}})
    with pytest.raises(ValueError, match="state's buffers do not fit"):
        make().load_state_dict({**state, "fill": {**state["fill"], "seen": [[0, "twice"]]}})


def test_a_packing_stream_fills_from_the_rows_it_handed_out_last():
    # NOTE [ What a stream's fill repeats ]: PackIterable completed its last batch with copies
    # of its own rows and a dry lane repeated its last batch (GSM8K[:4000], one pass: a document
    # 3 times). Fill version 2 takes the least seen of the rows handed out last (its last two
    # batches) and its own; a state in the fills resumes to the same batches; a state of
    # another version is refused with the way on, a replay state from before the first batch
    # loads
    docs = [{"id": i, "input_ids": [1] * 6} for i in range(9)]  # one document a row
    pk = dict(length_fn="input_ids", row_length=10, batch_size=4, last_batch="fill")

    def make(split):
        if not split:
            return PackIterable(docs, **pk)
        return PackIterable(docs, **pk, num_replicas=2, rank=0, steps_per_epoch=7)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for split in (False, True):
            batches = _ids(make(split))
            got = Counter(i for b in batches for i in b)
            assert len(got) == 9 and batches[2][0] == 8, split
            # one pass: 8 once, 3 of the 8 rows before it twice (main: 8 four times); split, 4
            # dry steps more: 28 rows over the 8 rows kept (at most two batches) and the one
            # left behind, 2 to 4 times each (main: 8 twenty times)
            want = [1] * 6 + [2] * 3 if not split else [2] + [3] * 6 + [4] * 2
            assert sorted(got.values()) == want
            for k in range(1, len(batches)):
                first = make(split)
                it = iter(first)
                for _ in range(k):
                    next(it)
                state = json.loads(json.dumps(first.state_dict()))
                assert state["config"]["fill"] == 2 and "last" not in state
                again = make(split)
                again.load_state_dict(state)
                assert _ids(again) == batches[k:], (split, k)
    s = make(False)
    fresh = s.state_dict()
    it = iter(s)
    next(it)
    state = json.loads(json.dumps(s.state_dict()))
    assert state["fill"]["last"] == [[[i, 0]] for i in range(4)] and state["fill"]["seen"] == []
    old = {**state, "config": {k: v for k, v in state["config"].items() if k != "fill"}}
    old = {k: v for k, v in old.items() if k != "fill"}
    with pytest.raises(ValueError, match=r"copies of its own rows.*set_epoch\(0\)"):
        make(False).load_state_dict(old)
    with pytest.raises(ValueError, match="fill version 3"):
        make(False).load_state_dict({**state, "config": {**state["config"], "fill": 3}})
    make(False).load_state_dict(
        {**fresh, "config": {k: v for k, v in fresh["config"].items() if k != "fill"}}
    )
    with pytest.raises(ValueError, match="state's fill record"):
        make(False).load_state_dict({**state, "fill": {"last": [[[99, 0]]], "seen": []}})
    with pytest.raises(ValueError, match="state's fill record"):
        make(False).load_state_dict({**state, "fill": {**state["fill"], "seen": [[0, 0, 0]]}})


def test_resume_checks_config(europarl):
    s = BucketIterable(
        _samples(europarl[:50]), length_fn="input_ids", boundaries=[113], batch_size=4
    )
    state = s.state_dict()
    other = BucketIterable(
        _samples(europarl[:50]), length_fn="input_ids", boundaries=[113], batch_size=8
    )
    with pytest.raises(ValueError, match=r"state has batch_sizes=\[4\], but this BucketIterable"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="cannot resume a one-shot iterator"):
        BucketIterable(iter([[1]]), boundaries=[4], batch_size=1).load_state_dict(
            BucketIterable([[1]], boundaries=[4], batch_size=1).state_dict()
        )


def _loader_ids(stream, workers):
    loader = torch.utils.data.DataLoader(
        stream, batch_size=None, num_workers=workers, collate_fn=lambda b: b
    )
    return _ids(loader)


@pytest.mark.filterwarnings("ignore:this \\w+ starts another pass of epoch")  # on purpose
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hf", "list"])
def test_dataloader_workers_each_bucket_their_shard(europarl, kind):
    lens = europarl[:800]
    source = _hf_source(lens, shards=4) if kind == "hf" else _samples(lens)
    stream = BucketIterable(
        source,
        length_fn="input_ids",
        boundaries=[10, 20, 113],
        batch_size=16,
        shuffle_buffer=30,
        seed=2,
    )
    a = _loader_ids(stream, 2)
    assert a == _loader_ids(stream, 2)
    assert sorted(i for b in a for i in b) == list(range(len(lens)))
    sizes = Counter(len(b) for b in a)
    assert sum(c for n, c in sizes.items() if n != 16) <= 2 * 3  # one short batch per bucket/worker


@pytest.mark.filterwarnings("ignore:this BucketIterable keeps samples of length 0")  # (length 0)
@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=120),
    k=st.integers(1, 5),
    batch=st.integers(1, 9),
    shuffle=st.integers(0, 20),
    last_batch=st.sampled_from(["pad", "fill", "drop", "keep"]),
    cut=st.floats(0, 1),
)
def test_invariants_and_resume_hypothesis(lengths, k, batch, shuffle, last_batch, cut):
    b = compute_boundaries(lengths, k, strategy="linear")

    def make():
        return BucketIterable(
            _samples(lengths),
            length_fn="input_ids",
            boundaries=b,
            batch_size=batch,
            shuffle_buffer=shuffle,
            last_batch=last_batch,
            seed=9,
        )

    stream = make()
    batches = list(stream)
    _check_planned(batches, stream, lengths, last_batch=last_batch)
    at = int(cut * len(batches))
    it = iter(first := make())
    head = [next(it) for _ in range(at)]
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert _ids(head) + _ids(resumed) == _ids(batches)


@pytest.mark.parametrize("last_batch", ["pad", "fill", "drop", "keep"])
def test_collated_batches_take_exactly_the_planned_shapes(europarl, last_batch):
    pytest.importorskip("bucketloader.collate")
    lens = europarl[:1500]
    samples = [
        {"input_ids": [5] * int(n), "labels": [7] * int(n), "id": i} for i, n in enumerate(lens)
    ]
    stream = BucketIterable(
        samples,
        length_fn="input_ids",
        boundaries=compute_boundaries(lens, 4),
        max_tokens=512,
        last_batch=last_batch,
        shuffle_buffer=64,
        seed=1,
    )
    collate = stream.collator(pad_value={"input_ids": 0, "labels": -100})
    loader = torch.utils.data.DataLoader(stream, batch_size=None, collate_fn=collate)
    real = 0
    for batch in loader:
        assert tuple(batch["input_ids"].shape) in stream.shapes
        assert batch["labels"].shape == batch["input_ids"].shape
        assert (batch["labels"][~batch["attention_mask"]] == -100).all()
        real += int(batch["sample_mask"].sum())
    assert real >= len(lens) - (sum(stream.batch_sizes) if last_batch == "drop" else 0)


def test_estimate_goes_through_the_solution_cache(tmp_path, europarl):
    from bucketloader.cache import BucketCache

    cache = BucketCache(tmp_path / "cache")

    def make():
        return BucketIterable(
            _samples(europarl),
            length_fn="input_ids",
            batch_size=8,
            overflow="drop",
            boundaries=estimate(5, sample_size=400, cache=cache),
        )

    first, second = make(), make()
    np.testing.assert_array_equal(first.boundaries, second.boundaries)
    assert (cache.misses, cache.hits) == (1, 1)
    assert second.solution.params["num_buckets"] == 5


class _Sharded(torch.utils.data.IterableDataset):
    """A torch IterableDataset that shards itself by worker, as torch's contract asks."""

    def __init__(self, samples):
        self.samples = samples

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, num = (info.id, info.num_workers) if info else (0, 1)
        return iter(self.samples[wid::num])


@pytest.mark.slow
def test_torch_iterable_dataset_shards_itself(europarl):
    lens = europarl[:400]
    stream = BucketIterable(
        _Sharded(_samples(lens)), length_fn="input_ids", boundaries=[12, 113], batch_size=10
    )
    got = _loader_ids(stream, 2)
    assert sorted(i for b in got for i in b) == list(range(len(lens)))  # no duplicates


def _pairs(pairs):
    return [
        {"id": i, "input_ids": [3] * int(a), "attention_mask": [1] * int(a), "labels": [4] * int(t)}
        for i, (a, t) in enumerate(pairs)
    ]


@pytest.mark.parametrize("last_batch", ["pad", "keep"])
def test_per_input_buckets_for_seq2seq_streams(last_batch):
    pytest.importorskip("bucketloader.collate")
    pairs = load_real("europarl")[:1200]
    pairs = pairs[(pairs > 0).all(axis=1)]
    stream = BucketIterable(
        _pairs(pairs),
        length_fn=("input_ids", "labels"),
        max_tokens=600,
        boundaries=estimate(3, sample_size=len(pairs)),
        last_batch=last_batch,
        shuffle_buffer=50,
    )
    b = stream.boundaries
    assert set(b) == {"input_ids", "labels"} and len(stream.batch_sizes) == 9
    batches = list(stream)
    assert sorted(s["id"] for batch in batches for s in batch) == list(range(len(pairs)))
    short = Counter()
    for batch in batches:
        src = assign_buckets([len(s["input_ids"]) for s in batch], b["input_ids"])
        tgt = assign_buckets([len(s["labels"]) for s in batch], b["labels"])
        assert len(set(zip(src.tolist(), tgt.tolist(), strict=True))) == 1, "batch mixes cells"
        shape = (b["input_ids"][src[0]], b["labels"][tgt[0]])
        full = [s[0] for s in stream.shapes if s[1:] == shape and s[0] >= len(batch)]
        short[shape] += len(batch) < max(full)
    assert max(short.values()) <= 1
    collate = stream.collator(
        fields={"input_ids": "input_ids", "attention_mask": "input_ids", "labels": "labels"},
        pad_value={"labels": -100},
    )
    for batch in batches:
        out = collate(batch)
        (n, ls), (n2, lt) = out["input_ids"].shape, out["labels"].shape
        assert n == n2 and (n, ls, lt) in stream.shapes


def test_a_stream_counts_max_tokens_as_its_spec_does():
    """Session 21: an image stream given a spec planned in pixels (size="prod") counted
    max_tokens as height + width, about 20 times the pixels per batch the spec planned."""
    from bucketloader import BucketSpec

    wh = load_real("coco")[:300] // 16  # (width, height)
    budget = 40 * 40 * 16
    spec = BucketSpec.build(
        {"height": wh[:, 1], "width": wh[:, 0]}, num_buckets=[2, 2], size="prod", max_tokens=budget
    )
    rows = [{"height": int(h), "width": int(w)} for w, h in wh]
    stream = BucketIterable(rows, length_fn=("height", "width"), boundaries=spec, max_tokens=budget)
    assert stream.shapes == list(spec.shape_table().shapes)  # (16, 40, 40), ...: was (320, 40, 40)
    assert max(b * h * w for b, h, w in stream.shapes) <= budget
    # plain boundaries: size= says what max_tokens counts (a stream had no size= of its own)
    bounds = dict(zip(("height", "width"), spec.boundaries[0], strict=True))
    plain = BucketIterable(
        rows, length_fn=("height", "width"), boundaries=bounds, max_tokens=budget, size="prod"
    )
    assert plain.shapes == stream.shapes
    # the spec's batch rule too, when the stream is given none (s22: "pass exactly one of
    # batch_size or max_tokens" asked for what the spec was planned with); one given wins
    inherit = BucketIterable(rows, length_fn=("height", "width"), boundaries=spec)
    assert inherit.shapes == stream.shapes
    fixed = BucketSpec.build({"height": wh[:, 1], "width": wh[:, 0]}, num_buckets=2, batch_size=4)
    assert set(
        BucketIterable(rows, length_fn=("height", "width"), boundaries=fixed).batch_sizes
    ) == {4}
    own = BucketIterable(rows, length_fn=("height", "width"), boundaries=fixed, batch_size=3)
    assert set(own.batch_sizes) == {3}
    with pytest.raises(ValueError, match=r"size='sum' contradicts the BucketSpec .* size='prod'"):
        BucketIterable(
            rows, length_fn=("height", "width"), boundaries=spec, max_tokens=budget, size="sum"
        )
    with pytest.raises(ValueError, match="size must be one of"):
        BucketIterable(
            rows, length_fn=("height", "width"), boundaries=bounds, max_tokens=budget, size="pixels"
        )


@pytest.mark.filterwarnings("ignore:this BucketIterable keeps samples of length 0")  # (length 0)
def test_per_input_overflow_resume_and_errors():
    pairs = load_real("europarl")[:400]
    kw = {"length_fn": ("input_ids", "labels"), "batch_size": 8, "seed": 2, "shuffle_buffer": 20}
    bounds = {"input_ids": [8, 16, 24], "labels": [12, 24]}
    cut = BucketIterable(_pairs(pairs), boundaries=bounds, overflow="truncate", **kw)
    got = [s for batch in cut for s in batch]
    assert len(got) == len(pairs) and cut.report().totals["truncated"] > 0
    assert all(len(s["input_ids"]) == len(s["attention_mask"]) <= 24 for s in got)
    assert max(len(s["labels"]) for s in got) == 24
    full = _ids(BucketIterable(_pairs(pairs), boundaries=bounds, overflow="drop", **kw))
    first = BucketIterable(_pairs(pairs), boundaries=bounds, overflow="drop", **kw)
    it = iter(first)
    head = [next(it) for _ in range(10)]
    again = BucketIterable(_pairs(pairs), boundaries=bounds, overflow="drop", **kw)
    again.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert _ids(head) + _ids(again) == full
    with pytest.raises(KeyError, match="boundaries has no entry for input 'labels'"):
        BucketIterable(_pairs(pairs), boundaries={"input_ids": [40]}, **kw)
    with pytest.raises(ValueError, match="length_fn measures one input"):
        BucketIterable(_pairs(pairs), boundaries=bounds, **{**kw, "length_fn": len})
    with pytest.raises(ValueError, match=r"length_fn returned \(3, 4\) for sample 0"):
        list(
            BucketIterable(_pairs(pairs), boundaries=[50], batch_size=2, length_fn=lambda s: (3, 4))
        )


def test_streams_pickle_into_spawned_workers():
    """Length readers are objects, not closures: a ``spawn`` DataLoader worker (macOS, Windows,
    CUDA users) receives the stream by pickle."""
    import pickle

    data = [[1] * n for n in [3, 7, 2, 8, 4, 1, 5, 6]]
    for length_fn in (None, "x", ("x", "y")):
        rows = data if length_fn is None else [{"x": d, "y": d} for d in data]
        bounds = [4, 8] if not isinstance(length_fn, tuple) else {"x": [4, 8], "y": [4, 8]}
        stream = BucketIterable(rows, length_fn=length_fn, boundaries=bounds, batch_size=2)
        again = pickle.loads(pickle.dumps(stream))
        assert [len(b) for b in again] == [len(b) for b in stream]
    stream = BucketIterable(data, boundaries=[4, 8], batch_size=2)
    loader = torch.utils.data.DataLoader(
        stream,
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
        collate_fn=stream.collator(),
    )
    assert sum(int(b["sample_mask"].sum()) for b in loader) == len(data)


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_pass_that_leaves_out_every_sample_says_so_while_it_reads(monkeypatch, kind):
    """s25-user: where the filters leave out every sample, a pass read its whole source before
    its first batch without a word, and an endless source hung silently, also with
    steps_per_epoch. Now the ALL_LEFT_OUT-th sample left out, after only such, warns (here as
    an error, which ends the endless read); a run of them followed by a kept one does not."""
    from bucketloader.stream import _engine

    monkeypatch.setattr(_engine, "ALL_LEFT_OUT", 50)

    class Endless:
        def __init__(self, short_from=None):
            self.short_from = short_from

        def __iter__(self):
            i = 0
            while True:
                n = 5 if self.short_from is not None and i >= self.short_from else 100
                yield {"input_ids": [1] * n}
                i += 1

    def make(source):
        if kind == "bucket":
            return BucketIterable(
                source, length_fn="input_ids", boundaries=[10], batch_size=2, overflow="drop",
                steps_per_epoch=3,
            )  # fmt: skip
        return PackIterable(
            source, length_fn="input_ids", row_length=10, batch_size=2, overflow="drop",
            steps_per_epoch=3,
        )  # fmt: skip

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*left out every one")
        said = r"the first 50 samples of epoch 0 and left out every one \(50 (too_long|overflow_d)"
        with pytest.raises(UserWarning, match=said):
            next(iter(make(Endless())))
        assert len(list(make(Endless(short_from=49)))) == 3  # a kept 50th sample: silent


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_state_saved_before_its_epochs_first_batch_names_that_epoch_as_the_way_on(kind):
    """s29-user: a stream state saved after set_epoch(2), before a batch, loaded into a stream
    built with another option was told "start the next epoch: stream.set_epoch(3)", which
    skips all of epoch 2. It now names set_epoch(2); a state saved mid-epoch still names 3."""
    rows = [{"input_ids": [1] * (1 + i % 9)} for i in range(40)]

    def make(**changed):
        if kind == "pack":
            return PackIterable(rows, row_length=changed.get("row_length", 9), batch_size=2)
        return BucketIterable(
            rows, length_fn="input_ids", boundaries=[3, 6, 9], batch_size=4, **changed
        )

    other = {"row_length": 10} if kind == "pack" else {"seed": 3}
    stream = make()
    stream.set_epoch(2)
    with pytest.raises(ValueError, match=r"run epoch 2 whole: stream.set_epoch\(2\)"):
        make(**other).load_state_dict(json.loads(json.dumps(stream.state_dict())))
    it = iter(stream)
    next(it)
    with pytest.raises(ValueError, match=r"start the next epoch: stream.set_epoch\(3\)$"):
        make(**other).load_state_dict(json.loads(json.dumps(stream.state_dict())))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_pass_that_raised_says_it_is_over_and_counts_what_it_read(kind, workers):
    """s29-user: a loop that catches a bad sample's error and calls next() again got the end of
    the pass (of that worker's share behind workers): 80 of 599 samples, no word, and report()
    said samples=0 after 10 batches. The error now says the pass ends there, and the counters
    hold what it read."""
    rows = [{"id": i, "input_ids": [1] * (1 + i % 9)} for i in range(200)]
    rows[120] = {"id": 120, "text": "no input_ids"}
    if kind == "pack":
        stream = PackIterable(rows, length_fn="input_ids", row_length=9, batch_size=2)
    else:
        stream = BucketIterable(rows, length_fn="input_ids", boundaries=[3, 6, 9], batch_size=4)
    it = iter(DataLoader(stream, batch_size=None, collate_fn=list, num_workers=workers))
    received = 0
    with pytest.raises(ValueError, match="length_fn='input_ids' is not in the samples") as exc:
        while True:
            next(it)
            received += 1
    said = str(exc.value) + "".join(getattr(exc.value, "__notes__", ()))
    if sys.version_info >= (3, 11):
        assert "this stream's pass" in said and "ends here" in said
        assert ("DataLoader worker" in said) == (workers > 0)
    if workers == 0:
        assert next(it, None) is None  # the pass is over: the rest of the source is not read
        assert stream.report().totals["samples"] == 121  # (was 0: flushed only at the end)
    assert received > 0


@pytest.mark.parametrize("kind", ["bucket", "pack"])
@pytest.mark.parametrize("source", ["list", "hf"])
def test_a_state_over_a_source_of_another_length_is_refused(kind, source):
    # s29-user: one sample inserted at the front of 600 before the resume: the state's
    # positions named the next samples, 17 repeated and 17 never seen that epoch, silently
    lengths = np.random.default_rng(0).integers(3, 120, size=600)
    rows = [{"id": i, "input_ids": [1] * int(n)} for i, n in enumerate(lengths)]

    def make(data):
        if source == "hf":
            import datasets

            data = datasets.Dataset.from_list(data)
        if kind == "bucket":
            return BucketIterable(
                data, length_fn="input_ids", boundaries=[16, 40, 80, 120], batch_size=8
            )
        return PackIterable(data, length_fn="input_ids", row_length=128, batch_size=4)

    stream = make(rows)
    it = iter(stream)
    head = [[x["id"] for x in next(it)] for _ in range(20)] if kind == "bucket" else None
    for _ in range(20 if kind == "pack" else 0):
        next(it)
    state = json.loads(json.dumps(stream.state_dict()))
    assert state["config"]["samples"] == 600
    grown = make([{"id": 600, "input_ids": [1] * 50}, *rows])
    with pytest.raises(ValueError, match=r"source of 600 samples.* has 601: .*set_epoch\(1\)"):
        grown.load_state_dict(state)
    old = {**state, "config": {k: v for k, v in state["config"].items() if k != "samples"}}
    make(rows).load_state_dict(old)  # saved before the length was recorded: taken as before
    again = make(rows)
    again.load_state_dict(state)
    if head is not None:  # the same source resumes exactly: every sample once
        seen = Counter(i for b in head + [[x["id"] for x in b] for b in again] for i in b)
        assert set(seen) == set(range(600)) and set(seen.values()) == {1}
    with pytest.raises(ValueError, match=r"state\['config'\]\['samples'\] must be"):
        make(rows).load_state_dict({**state, "config": {**state["config"], "samples": "600"}})


def test_a_ranks_state_loaded_on_another_rank_of_another_shard_length_says_whose_it_is():
    # s29-rev: 601 samples over 2 ranks (shards of 301 and 300), rank 1 given rank 0's state
    # (a checkpoint written by rank 0 only) was told only that its source changed
    from bucketloader import BucketSampler

    rows = [{"input_ids": [1] * (3 + (i * 7) % 90)} for i in range(601)]
    spec = BucketSampler([len(x["input_ids"]) for x in rows], boundaries=[16, 40, 96], batch_size=4)

    def make(rank):
        return BucketIterable(
            rows[rank::2], length_fn="input_ids", boundaries=spec, batch_size=4,
            num_replicas=2, rank=rank, steps_per_epoch=20,
        )  # fmt: skip

    first = make(0)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    with pytest.raises(ValueError, match=r"301 samples.* has 300: .*each rank loads the state it "):
        make(1).load_state_dict(state)
    make(0).load_state_dict(state)  # its own rank's state loads
    single = BucketIterable(rows[:9], length_fn="input_ids", boundaries=[16, 40, 96], batch_size=4)
    saved = single.state_dict()  # one rank: no such hint
    with pytest.raises(ValueError, match=r"8 samples.* has 9: ") as info:
        single.load_state_dict({**saved, "config": {**saved["config"], "samples": 8}})
    assert "each rank" not in str(info.value)
