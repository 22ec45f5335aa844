"""A stream resumed over a source without a length refuses a source that changed since its state
was saved (NOTE [ A stream state over a source without a length ] and NOTE [ A replay over a
source without a length ] in bucketloader.stream._engine), and still resumes exactly over the
same source: in one process, behind DataLoader workers (replay and worker checkpoints), and from
a state saved before the check existed."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import numpy as np
import pytest
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from bucketloader.plan import DataLossWarning
from bucketloader.stream import BucketIterable, PackIterable
from bucketloader.stream._engine import lengths_digest
from bucketloader.stream.counters import RefusedResume

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

LENGTHS = np.random.default_rng(0).integers(1, 60, 600).tolist()
CHANGED = "read back at their positions, have other lengths than when it was saved"
REPLAYED = "batches of other sizes than the saved run"
#: A state that holds no sample: its anchor (NOTE [ A stream state that holds no sample ]).
ANCHORED = "its state holds no sample, and the newest sample it handed out"
#: The source with its last sample moved to the front: every position names another sample,
#: and the lengths' histogram (a split stream's schedule) is the same.
MOVED = [LENGTHS[-1], *LENGTHS[:-1]]
#: The traces of ``_bucket`` and ``_pack`` over ``Src(LENGTHS)`` after 20 batches, as computed
#: with ``array("q")`` (test_the_traces_a_state_records_keep_their_values).
PINNED_BUCKET_TRACE, PINNED_PACK_TRACE = 711691760022433862, 2136416091263142978


class Src:
    """Re-iterable, no ``__len__`` (s30-left's r9): each pass makes its samples again."""

    def __init__(self, lengths, crop=None):
        self.lengths, self.crop = lengths, crop

    def __iter__(self):
        for i, n in enumerate(self.lengths):
            if self.crop is not None:  # a random crop: another length on every read
                n = max(1, n - int(self.crop.integers(0, 3)))
            yield {"input_ids": [1] * n, "id": i}


def _bucket(source, **kw):
    return BucketIterable(
        source, length_fn="input_ids", boundaries=[10, 30, 60], batch_size=4, seed=1, **kw
    )


def _pack(source, **kw):
    return PackIterable(
        source, length_fn="input_ids", row_length=64, batch_size=2, open_rows=8, **kw
    )


def _split(source, **kw):
    return PackIterable(
        source,
        length_fn="input_ids",
        row_length=16,
        batch_size=2,
        overflow="split",
        open_rows=4,
        **kw,
    )


MAKERS = {
    "bucket": lambda s: _bucket(s, shuffle_buffer=64),
    "bucket-fill": lambda s: _bucket(s, shuffle_buffer=16, last_batch="fill"),
    "bucket-steps": lambda s: _bucket(s, shuffle_buffer=16, steps_per_epoch=200, last_batch="fill"),
    "bucket-steps-pad": lambda s: _bucket(s, steps_per_epoch=200),
    "pack": _pack,
    "pack-fill": lambda s: _pack(s, last_batch="fill"),
    "pack-steps": lambda s: _pack(s, steps_per_epoch=120),
}


def _ids(batches):
    return [[x["id"] for x in b] for b in batches]


def _head(stream, k):
    """The first ``k`` batches of a pass in one process, and the state after them (JSON)."""
    it = iter(stream)
    head = _ids(next(it) for _ in range(k))
    return head, json.loads(json.dumps(stream.state_dict()))


def _loader(stream):
    return DataLoader(stream, batch_size=None, collate_fn=lambda b: b, num_workers=2)


def test_a_sample_inserted_at_the_front_is_refused_not_trained_twice():
    # s30-left r9: 27 samples trained twice and 26 never, silently
    head, state = _head(MAKERS["bucket"](Src(LENGTHS)), 20)
    assert state["format"] == 2 and len(state["lengths"]) == 16
    resumed = MAKERS["bucket"](Src([5, *LENGTHS]))
    resumed.load_state_dict(state)  # (the state itself is fine: refused when the pass starts)
    with pytest.raises(ValueError, match=CHANGED) as err:
        list(resumed)
    said = str(err.value)
    assert "BucketIterable" in said and "inserted, removed or reordered" in said
    assert "reads differently each time" in said and "set_epoch(1)" in said
    # the same resume over the unchanged source is exact
    again = MAKERS["bucket"](Src(LENGTHS))
    again.load_state_dict(state)
    rest = _ids(again)
    assert head + rest == _ids(MAKERS["bucket"](Src(LENGTHS)))
    seen = Counter(i for b in head + rest for i in b)
    assert sorted(seen) == list(range(600)) and set(seen.values()) == {1}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_one_process_resume_over_the_same_source_is_exact_and_a_changed_one_refused(name):
    make = MAKERS[name]
    whole = _ids(make(Src(LENGTHS)))
    for k in (1, len(whole) // 3, len(whole) - 1):
        head, state = _head(make(Src(LENGTHS)), k)
        assert "lengths" in state  # (split over ranks, a source that cannot seek or
        # checkpoint itself gives a replay state, with the trace: NOTE [ A replay over a
        # source without a length ])
        again = make(Src(LENGTHS))
        again.load_state_dict(state)
        assert head + _ids(again) == whole, k
    changed = make(Src(MOVED))
    changed.load_state_dict(_head(make(Src(LENGTHS)), len(whole) // 3)[1])
    with pytest.raises(ValueError, match=f"{CHANGED}|{REPLAYED}"):
        list(changed)


@pytest.mark.parametrize("name", ["bucket", "pack"])
def test_a_source_that_reads_differently_each_time_is_refused(name):
    make = MAKERS[name]
    _, state = _head(make(Src(LENGTHS, crop=np.random.default_rng(1))), 20)
    resumed = make(Src(LENGTHS, crop=np.random.default_rng(2)))
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match="reads differently each time"):
        list(resumed)


@pytest.mark.parametrize("name", ["bucket", "pack"])
def test_a_source_that_now_ends_before_a_held_sample_is_still_refused(name):
    make = MAKERS[name]
    _, state = _head(make(Src(LENGTHS)), 30)
    resumed = make(Src(LENGTHS[: state["read"] - 1]))
    resumed.load_state_dict(state)
    with pytest.raises(RefusedResume, match="the source ended at sample"):  # (s32: its type)
        list(resumed)


@pytest.mark.parametrize("name", ["bucket", "pack", "bucket-steps", "pack-steps"])
def test_a_state_saved_before_the_check_still_resumes(name):
    make = MAKERS[name]
    whole = _ids(make(Src(LENGTHS)))
    head, state = _head(make(Src(LENGTHS)), 25)
    del state["lengths"]  # (as saved before s31)
    again = make(Src(LENGTHS))
    again.load_state_dict(state)
    assert head + _ids(again) == whole
    if name == "bucket":  # unchecked, as before (PackIterable counts its rows' tokens)
        changed = make(Src(MOVED))
        changed.load_state_dict(state)
        list(changed)


def test_a_source_with_a_length_records_no_lengths():
    # its length is recorded and compared instead (NOTE [ A stream state names its source's
    # size ]): the states of such sources are unchanged
    rows = list(Src(LENGTHS))
    for make in (MAKERS["bucket"], MAKERS["pack"]):
        _, state = _head(make(rows), 10)
        assert "lengths" not in state and state["config"]["samples"] == 600


def test_an_edited_lengths_key_is_refused_at_load():
    _, state = _head(MAKERS["bucket"](Src(LENGTHS)), 5)
    with pytest.raises(ValueError, match=r"state\['lengths'\] must be the digest"):
        MAKERS["bucket"](Src(LENGTHS)).load_state_dict({**state, "lengths": 3})
    for bad in (3, "2", True):  # (NOTE [ Pieces of one length ] in stream._rows)
        with pytest.raises(ValueError, match=r"state\['lengths_version'\] must be 1 or 2"):
            MAKERS["bucket"](Src(LENGTHS)).load_state_dict({**state, "lengths_version": bad})
    s = _bucket(Src(LENGTHS), shuffle_buffer=64)
    total = len(list(_loader(s)))
    replay = s.state_dict(batches_consumed=total - 3)  # (the traces of the last 16 are kept)
    assert replay["format"] != state["format"] and len(replay["lengths"]) == 2
    with pytest.raises(ValueError, match=r"state\['lengths'\] must hold None or a trace"):
        _bucket(Src(LENGTHS), shuffle_buffer=64).load_state_dict({**replay, "lengths": ["x"]})


@pytest.mark.parametrize("name", ["bucket", "pack", "bucket-steps", "pack-steps"])
def test_replay_behind_workers_is_exact_and_refuses_a_changed_source(name):
    make = MAKERS[name]
    whole = _ids(_loader(make(Src(LENGTHS))))
    first = make(Src(LENGTHS))
    it = iter(_loader(first))
    k = 21  # odd: the lanes rotate
    head = _ids(next(it) for _ in range(k))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    assert all(isinstance(t, str) for t in state["lengths"])
    again = make(Src(LENGTHS))
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == whole
    changed = make(Src(MOVED))
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED) as err:
        list(_loader(changed))
    assert "ends here" not in str(err.value)  # (not the note of a pass that failed midway)
    old = {k: v for k, v in state.items() if k != "lengths"}  # saved before the check
    again = make(Src(LENGTHS))
    again.load_state_dict(old)
    assert head + _ids(_loader(again)) == whole


def test_a_replay_over_rows_of_whole_split_pieces_refuses_a_document_inserted_before_them():
    # s32-rev's L2: under overflow="split" worker 0's first batch was two whole 16-token pieces
    # of its first document, as full with a document inserted at the front as without, so the
    # trace matched and 32 tokens trained twice, 32 never; a split document's whole length now
    # joins the trace as it is read
    first = _split(Src(LENGTHS))
    it = iter(_loader(first))
    head = [next(it)]
    del it
    assert [len(x["input_ids"]) for x in head[0]] == [16, 16]
    assert len({x["id"] for x in head[0]}) == 1  # one document's whole pieces
    state = json.loads(json.dumps(first.state_dict(batches_consumed=1)))
    again = _split(Src(LENGTHS))
    again.load_state_dict(state)
    whole = [[(x["id"], len(x["input_ids"])) for x in b] for b in _loader(_split(Src(LENGTHS)))]
    rest = [[(x["id"], len(x["input_ids"])) for x in b] for b in _loader(again)]
    assert [[(x["id"], len(x["input_ids"])) for x in b] for b in head] + rest == whole
    changed = _split(Src([7, *LENGTHS]))
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED):
        list(_loader(changed))


def test_a_replay_that_ends_before_the_resume_point_is_refused():
    make = MAKERS["bucket"]
    first = make(Src(LENGTHS))
    total = len(list(_loader(first)))
    state = first.state_dict(batches_consumed=total - 3)
    assert all(isinstance(t, str) for t in state["lengths"])
    short = make(Src(LENGTHS[:-200]))
    short.load_state_dict(state)
    with pytest.raises(ValueError, match="its pass now ends after"):
        list(_loader(short))


def test_the_way_on_a_refusal_names_works_behind_workers():
    # s32-rev: it said "skip load_state_dict and start over: stream.set_epoch(0) for this epoch
    # whole", but behind workers the main process's stream keeps the loaded state (the workers
    # refused their copies), so set_epoch(0) on it, followed, was refused again
    import traceback

    make = MAKERS["bucket"]
    first = make(Src(LENGTHS))
    it = iter(_loader(first))
    head = _ids(next(it) for _ in range(21))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=21)))
    assert head and state["lengths"]
    for fix in ("set_epoch(0)", "set_epoch(1)", "built again"):
        changed = make(Src(MOVED))
        changed.load_state_dict(state)
        with pytest.raises(ValueError, match=REPLAYED) as err:
            list(_loader(changed))
        said = str(err.value)
        traceback.clear_frames(err.value.__traceback__)  # (docs/streams.md: no 5 s waits)
        assert (
            "stream.set_epoch(1) for the next epoch, or, for this epoch whole, the stream " in said
        )
        assert "built again without load_state_dict (set_epoch(0) alone keeps the loaded" in said
        if fix == "set_epoch(0)":  # (what the message no longer offers: still refused)
            changed.set_epoch(0)
            with pytest.raises(ValueError, match=REPLAYED) as again:
                list(_loader(changed))
            traceback.clear_frames(again.value.__traceback__)
            continue
        if fix == "set_epoch(1)":
            changed.set_epoch(1)
        else:
            changed = make(Src(MOVED))
            changed.set_epoch(0)
        ids = sorted(i for b in _ids(_loader(changed)) for i in b)
        assert ids == list(range(600))


def _one_bucket(source, **kw):
    """One bucket, no shuffle buffer: a state saved right after a batch holds no sample."""
    return BucketIterable(source, length_fn="input_ids", boundaries=[60], batch_size=4, **kw)


def _closed_rows(source, **kw):
    """Rows of one document (max_documents // batch_size): every row closes as it opens."""
    return PackIterable(
        source, length_fn="input_ids", row_length=64, batch_size=2, max_documents=3, **kw
    )


def _hf_iterable(lengths):
    """An HF IterableDataset of these lengths in 4 shards (it shards itself among workers)."""
    datasets = pytest.importorskip("datasets")
    rows = {"id": list(range(len(lengths))), "input_ids": [[1] * n for n in lengths]}
    return datasets.Dataset.from_dict(rows).to_iterable_dataset(num_shards=4)


@pytest.mark.parametrize(
    "make", [_bucket, _pack, _one_bucket], ids=["bucket", "pack", "one-bucket"]
)
def test_worker_checkpoints_refuse_a_changed_source(make, tmp_path):
    # NOTE [ Worker checkpoints ]: a worker restores its exact state, which holds the lengths
    source = _hf_iterable
    whole = _ids(_loader(make(source(LENGTHS))))
    first = make(source(LENGTHS), checkpoint_dir=tmp_path)
    it = iter(_loader(first))
    k = len(whole) - 10 - len(whole) % 2  # even: HF shards itself by worker id
    head = _ids(next(it) for _ in range(k))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    assert all(x is not None and "lengths" in x for x in state["lanes"])
    if make is _one_bucket:  # (written right after a batch: they hold no sample)
        assert all("anchor" in x for x in state["lanes"])
    again = make(source(LENGTHS), checkpoint_dir=tmp_path)
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == whole
    changed = make(source(MOVED), checkpoint_dir=tmp_path)
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=ANCHORED if make is _one_bucket else CHANGED):
        list(_loader(changed))


def test_replay_behind_workers_refuses_a_changed_source_under_full_packed_rows():
    # s31-user2: under the default open_rows best fit fills every row, so every batch had 2 rows
    # of 128 tokens and a trace of those alone let a moved source replay (documents trained
    # twice and never); the trace now folds each row's documents and their lengths
    def make(source):
        return PackIterable(source, length_fn="input_ids", row_length=64, batch_size=2)

    full = [sum(len(x["input_ids"]) for x in b) for b in make(Src(LENGTHS))][:20]
    assert full == [128] * 20
    first = make(Src(LENGTHS))
    it = iter(_loader(first))
    head = _ids(next(it) for _ in range(10))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=10)))
    again = make(Src(LENGTHS))
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == _ids(_loader(make(Src(LENGTHS))))
    changed = make(Src(MOVED))
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED):
        list(_loader(changed))


@pytest.mark.parametrize("name", ["bucket", "pack"])
def test_a_state_saved_over_a_source_with_a_length_is_refused_over_one_without(name):
    # s31-user2: such a state records only the length (no digest, no traces), so over a source
    # without one it resumed unchecked: one sample inserted at the front trained 26 twice and 26
    # never; behind workers a datasets.Dataset's state over its .to_iterable_dataset() (same
    # rows, split between the workers by shard) trained 35 twice and 35 never
    make = MAKERS[name]
    rows = list(Src(LENGTHS))
    whole = _ids(make(rows))
    head, exact = _head(make(rows), 20)
    first = make(rows)
    it = iter(_loader(first))
    next(it), next(it)
    del it
    replay = json.loads(json.dumps(first.state_dict(batches_consumed=2)))
    for state in (exact, replay):
        assert "samples" in state["config"] and "lengths" not in state
        for source in (Src(LENGTHS), Src([5, *LENGTHS])):
            with pytest.raises(ValueError, match="source has no length") as err:
                make(source).load_state_dict(state)
            said = str(err.value)
            assert "600 samples" in said and "not its .to_iterable_dataset()" in said
            # (s32-tidyB: it said "to go on with these options instead"; the source changed)
            assert "to go on over this source instead, skip load_state_dict and start the " in said
            assert "options" not in said and "stream.set_epoch(1)" in said
    with pytest.raises(ValueError, match="to go on over this source instead") as err:
        make(rows[:-1]).load_state_dict(exact)  # (another length: the same way on)
    assert "options" not in str(err.value)
    # the way on, followed: the next epoch over the source without a length, as over the list
    nxt, ref = make(Src(LENGTHS)), make(rows)
    nxt.set_epoch(1), ref.set_epoch(1)
    assert _ids(nxt) == _ids(ref)
    again = make(rows)  # over the source it was saved over: exact, as before
    again.load_state_dict(exact)
    assert head + _ids(again) == whole


@pytest.mark.parametrize("name", ["bucket", "pack"])
def test_a_replay_state_saved_without_a_length_is_checked_over_a_source_with_one(name):
    # its traces were not compared there (the resumed pass kept none, its source having a
    # length): a moved source replayed silently; now the resumed pass keeps a trace for them
    make = MAKERS[name]
    first = make(Src(LENGTHS))
    it = iter(_loader(first))
    head = _ids(next(it) for _ in range(21))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=21)))
    assert "samples" not in state["config"] and all(isinstance(t, str) for t in state["lengths"])
    again = make(list(Src(LENGTHS)))
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == _ids(_loader(make(Src(LENGTHS))))
    changed = make(list(Src(MOVED)))
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED) as err:
        list(_loader(changed))
    assert "a source of another kind than the one it was saved over" in str(err.value)


def test_a_refused_resume_behind_workers_frees_the_loader_iterator_at_once():
    # NOTE [ A refused resume behind DataLoader workers ]: torch re-raised it from a local, a
    # reference cycle that kept the iterator to a later collection, which shut its workers down
    # in 10 s (5 s each, their queues finalised first) or, in a DataLoader's forked workers,
    # printed "can only test a child process"; now it goes when the except block ends
    import gc
    import weakref

    first = MAKERS["bucket"](Src(LENGTHS))
    it = iter(_loader(first))
    for _ in range(10):
        next(it)
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=10)))
    changed = MAKERS["bucket"](Src(MOVED))
    changed.load_state_dict(state)
    gc.collect()
    gc.disable()
    try:
        it = iter(_loader(changed))
        ref = weakref.ref(it)
        try:
            next(it)
        except RefusedResume as err:
            assert REPLAYED in str(err)
        else:
            raise AssertionError("the changed source was not refused")
        del it
        assert ref() is None, "the iterator outlived the except block (a reference cycle)"
    finally:
        gc.enable()


@pytest.mark.parametrize("kind", ["replay", "exact"])
def test_a_resume_refused_for_its_worker_count_frees_the_loader_iterator_at_once(kind):
    # s32-tidyB: "state was saved with 2 DataLoader workers, this loader has 1" (a replay) and
    # "state was saved in a single process, this pass runs in worker 0 of 2" (an exact state)
    # are refused in the worker before its first batch, but were plain ValueErrors: torch's
    # reference cycle kept the iterator (NOTE [ A refused resume behind DataLoader workers ])
    import gc
    import weakref

    first = MAKERS["bucket"](Src(LENGTHS))
    if kind == "replay":
        it = iter(_loader(first))
        for _ in range(10):
            next(it)
        del it
        state, workers = first.state_dict(batches_consumed=10), 1
    else:
        state, workers = _head(first, 10)[1], 2
    again = MAKERS["bucket"](Src(LENGTHS))
    again.load_state_dict(json.loads(json.dumps(state)))
    gc.collect()
    gc.disable()
    try:
        it = iter(DataLoader(again, batch_size=None, collate_fn=lambda b: b, num_workers=workers))
        ref = weakref.ref(it)
        try:
            next(it)
        except RefusedResume as err:
            assert "resume with the same num_workers" in str(err)
        else:
            raise AssertionError("another worker count was not refused")
        del it
        assert ref() is None, "the iterator outlived the except block (a reference cycle)"
    finally:
        gc.enable()


def test_the_two_refusals_of_a_changed_source_say_the_same_after_naming_their_digest():
    # s31-tidyA: the length digest's and the replay trace's refusals were two near-copies; one
    # helper now builds both: each names its check and the two digests, then the same causes,
    # harm and ways on
    _, exact = _head(MAKERS["bucket"](Src(LENGTHS)), 20)
    resumed = MAKERS["bucket"](Src(MOVED))
    resumed.load_state_dict(exact)
    with pytest.raises(ValueError, match=CHANGED) as by_digest:
        list(resumed)
    first = MAKERS["bucket"](Src(LENGTHS))
    it = iter(_loader(first))
    for _ in range(20):  # (even: an odd count rotates the lanes, whose refusal says more)
        next(it)
    del it
    replay = json.loads(json.dumps(first.state_dict(batches_consumed=20)))
    resumed = MAKERS["bucket"](Src(MOVED))
    resumed.load_state_dict(replay)
    with pytest.raises(ValueError, match=REPLAYED) as by_trace:
        list(_loader(resumed))
    digest, trace = str(by_digest.value), str(by_trace.value).splitlines()[-1]
    assert re.search(r"\(length digest [0-9a-f]{16}, the state's [0-9a-f]{16}\)\. ", digest)
    assert re.search(r"\(replay trace [0-9a-f]{10}, the state's [0-9a-f]{10}\)\. ", trace)
    common = digest[digest.index(". The source gives other samples") :]
    assert trace.endswith(common), (digest, trace)
    for said in (
        "inserted, removed or reordered",
        "reads differently each time",
        "seed any random transform",
        "stream.set_epoch(1) for the next epoch",
        "built again without load_state_dict",
        "caught at load_state_dict",
    ):
        assert said in common


@pytest.mark.parametrize("make", [_bucket, _pack, _split], ids=["bucket", "pack", "split"])
def test_a_replay_state_after_a_worker_checkpoint_resume_is_still_checked(make, tmp_path):
    # s31-stream: a worker resumed from its checkpoint (an exact state) knew no trace, so every
    # later replay state recorded None for it and its resume was not checked; an exact state
    # now records its pass's trace, which the resumed pass goes on from
    source = _hf_iterable
    whole = _ids(_loader(make(source(LENGTHS))))
    first = make(source(LENGTHS), checkpoint_dir=tmp_path)
    it = iter(_loader(first))
    k = 40  # even: HF shards itself by worker id
    head = _ids(next(it) for _ in range(k))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    assert all(x is not None and isinstance(x["trace"], int) for x in state["lanes"])
    second = make(source(LENGTHS), checkpoint_dir=tmp_path)
    second.load_state_dict(state)
    it = iter(_loader(second))
    head += _ids(next(it) for _ in range(6))
    del it
    later = json.loads(json.dumps(second.state_dict(batches_consumed=k + 6)))
    assert all(isinstance(t, str) for t in later["lengths"]), later["lengths"]
    later.pop("lanes", None)  # (a replay from the epoch's start, checked by the traces alone)
    again = make(source(LENGTHS))
    again.load_state_dict(later)
    assert head + _ids(_loader(again)) == whole
    changed = make(source(MOVED))
    changed.load_state_dict(later)
    with pytest.raises(ValueError, match=REPLAYED):
        list(_loader(changed))


def test_an_edited_trace_key_is_refused_at_load():
    _, state = _head(MAKERS["bucket"](Src(LENGTHS)), 5)
    assert isinstance(state["trace"], int)
    for bad in (-1, 2**61 - 1, True, "0a", 1.5):
        with pytest.raises(ValueError, match=r"state\['trace'\] must be its pass's trace"):
            MAKERS["bucket"](Src(LENGTHS)).load_state_dict({**state, "trace": bad})


def test_the_traces_a_state_records_keep_their_values():
    """A state over a source without a length records its pass's replay trace (``"trace"``;
    a replay state, each worker's in ``"lengths"``), and a resume refuses any other: a trace's
    value is part of the state's format, and a change of how it is computed (s33 packs a
    packed batch's documents per row and lengths with ``struct.pack`` in place of
    ``array("q")``, the same native int64 bytes, so the same blake2b digest, about 4 us less a
    batch of 200 documents) must leave it alone, or every saved state is refused. Pinned on
    this file's source, for both streams, as computed before that change."""
    traces = []
    for make in (_bucket, _pack):
        stream = make(Src(LENGTHS))
        it = iter(stream)
        for _ in range(20):
            next(it)
        traces.append(stream.state_dict()["trace"])
    assert traces == [PINNED_BUCKET_TRACE, PINNED_PACK_TRACE]


class Checkpointed(Src):
    """A source that checkpoints itself (HF's contract): a resume restarts it at a checkpoint."""

    def __init__(self, lengths):
        super().__init__(lengths)
        self.pos, self.start = 0, 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]

    def __iter__(self):
        start, self.start = self.start, 0
        for i in range(start, len(self.lengths)):
            self.pos = i + 1
            yield {"input_ids": [1] * self.lengths[i], "id": i}


@pytest.mark.parametrize("source", [Src, Checkpointed], ids=["replayed", "checkpointed"])
@pytest.mark.parametrize("make", [_one_bucket, _closed_rows], ids=["one-bucket", "closed-rows"])
def test_a_state_that_holds_no_sample_checks_the_last_sample_it_handed_out(make, source):
    # s32-rev's L1: such a state's digest was of nothing (all zeros), so one sample inserted at
    # the front resumed silently and a sample was trained twice (NOTE [ A stream state that
    # holds no sample ] in bucketloader.stream._engine)
    whole = _ids(make(source(LENGTHS)))
    for k in (1, len(whole) // 2, len(whole) - 1):
        head, state = _head(make(source(LENGTHS)), k)
        assert state["anchor"] == [state["read"] - 1, 0], k  # (here: the last sample read)
        assert state["lengths"] != "0" * 16
        again = make(source(LENGTHS))
        again.load_state_dict(state)
        assert head + _ids(again) == whole, k
        inserted = make(source([5, *LENGTHS]))
        inserted.load_state_dict(state)
        with pytest.raises(ValueError, match=ANCHORED):
            list(inserted)
    old = {**state, "lengths": "0" * 16}  # saved before s33: no anchor, a digest of nothing
    del old["anchor"]
    again = make(source(LENGTHS))
    again.load_state_dict(old)
    assert head + _ids(again) == whole  # (it still resumes, unchecked as before)


def test_a_state_that_holds_a_sample_as_new_names_no_anchor_and_an_edited_one_is_refused():
    _, state = _head(MAKERS["bucket"](Src(LENGTHS)), 20)
    assert "anchor" not in state  # (its held samples' digest, as before)
    _, state = _head(_one_bucket(Src(LENGTHS)), 5)
    for bad in ([state["read"], 0], [-1, 0], [3], "3", [1, True]):
        with pytest.raises(ValueError, match=r"state\['anchor'\] must be \[position, piece\]"):
            _one_bucket(Src(LENGTHS)).load_state_dict({**state, "anchor": bad})


class SelfSharding:
    """Splits itself among DataLoader workers by get_worker_info(), yet is no torch
    IterableDataset, and reads the worker info only after its first sample (each worker gives
    sample 0), which the stream's watch does not see (NOTE [ A plain source that splits itself ]
    in stream.source: one that reads it for its first sample is refused at once, s33-twice)."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __iter__(self):
        for i, n in enumerate(self.lengths):
            info = get_worker_info() if i else None
            if info is None or i % info.num_workers == info.id:
                yield {"input_ids": [1] * n, "id": i}


def test_a_replay_refused_after_rotated_lanes_names_a_source_that_shards_itself():
    # s32-rev's L3: after an odd count the lanes rotate, so such a source hands each worker its
    # own share where the resume wants another's; the refusal blamed a changed source only,
    # whose fix (the same source) cannot help. It now names the ways that do.
    first = _bucket(SelfSharding(LENGTHS))
    it = iter(_loader(first))
    for _ in range(7):
        next(it)
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=7)))
    assert state["first"] == 1
    again = _bucket(SelfSharding(LENGTHS))
    again.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED) as err:
        list(_loader(again))
    said = str(err.value).splitlines()[-1]
    assert "get_worker_info() without being a torch IterableDataset" in said
    assert "after a multiple of num_workers=2 batches" in said
    assert "make it a torch.utils.data.IterableDataset" in said
    # (without rotated lanes the refusal does not say it: a changed source is the cause)
    first = _bucket(Src(LENGTHS))
    it = iter(_loader(first))
    for _ in range(8):
        next(it)
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=8)))
    changed = _bucket(Src(MOVED))
    changed.load_state_dict(state)
    with pytest.raises(ValueError, match=REPLAYED) as err:
        list(_loader(changed))
    assert "get_worker_info" not in str(err.value)


def test_a_state_saved_after_a_dropped_tail_names_an_anchor_it_can_resume_at():
    # s33-tidyB: the last batch handed out (its anchor, sample 7) came before a run of samples
    # left out by overflow; the snapshot taken while the tail (samples 250-252) was buffered
    # trimmed every one before sample 7, and once last_batch="drop" emptied the buffers,
    # state_dict() at the end of the epoch failed (max() of an empty sequence)
    lengths = list(range(1, 9)) + [100] * 242 + [5] * 3 + [100] * 67

    def make(lengths):
        return _one_bucket(Checkpointed(lengths), overflow="drop", last_batch="drop")

    stream = make(lengths)
    with pytest.warns(DataLossWarning):
        assert _ids(stream) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    state = json.loads(json.dumps(stream.state_dict()))
    assert state["phase"] == "done" and state["anchor"] == [7, 0]
    assert state["source"]["position"] <= 7  # (the source restarts at or before its anchor)
    again = make(lengths)
    again.load_state_dict(state)
    assert _ids(again) == []
    inserted = make([9, *lengths])  # (sample 7 read back there has length 7, not 8)
    inserted.load_state_dict(state)
    with pytest.raises(ValueError, match=ANCHORED):
        list(inserted)


class Docs:
    """No ``__len__``; each document carries its own id (so a shifted one is still itself)."""

    def __init__(self, docs):
        self.docs = docs

    def __iter__(self):
        for i, n in self.docs:
            yield {"input_ids": [1] * n, "id": i}


def test_a_packing_state_that_holds_no_sample_names_the_newest_document_it_handed_out():
    # s33-tidyB: rows close out of read order (row 0's document 0 closes stale after the rows
    # of documents 1-4), so the last batch's row held document 0 alone; the state named it,
    # and a document inserted before document 4 (handed out) resumed silently: document 4 was
    # read again at position 5 and trained twice
    docs = list(enumerate([10] + [64] * 20 + [5] * 30))

    def make(docs):
        return PackIterable(
            Docs(docs), length_fn="input_ids", row_length=64, batch_size=1, open_rows=2
        )

    head, state = _head(make(docs), 5)
    assert head == [[1], [2], [3], [4], [0]] and state["open"] == state["ready"] == []
    assert state["anchor"] == [4, 0]  # (was [0, 0]: the last batch's document)
    again = make(docs)
    again.load_state_dict(state)
    assert head + _ids(again) == _ids(make(docs))
    inserted = make([*docs[:4], ("new", 30), *docs[4:]])
    inserted.load_state_dict(state)
    with pytest.raises(ValueError, match=ANCHORED):
        list(inserted)


#: Documents of 16, 32 and 48 tokens (s33-left's sweep): cut into rows of 16 every piece has 16.
SIXTEENS = (np.random.default_rng(1).integers(1, 4, 60) * 16).tolist()


@pytest.mark.parametrize(("overflow", "ks"), [("split", (13, 12)), ("truncate", (6, 12))])
def test_pieces_of_one_length_are_digested_by_their_document_whole_length(overflow, ks):
    # s33-left: a state's digest took each piece's size, 16 for every piece, so it could not
    # tell which document a piece came from, and a document inserted at the front resumed
    # silently from most states, pieces trained twice or never (NOTE [ Pieces of one length ]
    # in bucketloader.stream._rows)
    def make(lengths):
        return PackIterable(
            Src(lengths), length_fn="input_ids", row_length=16, batch_size=2, overflow=overflow
        )

    whole = _ids(make(SIXTEENS))
    for k in ks:  # (states that resumed silently: 13 and 6 hold no piece, 12 holds two)
        head, state = _head(make(SIXTEENS), k)
        again = make(SIXTEENS)
        again.load_state_dict(state)
        assert head + _ids(again) == whole, k
        inserted = make([7, *SIXTEENS])
        inserted.load_state_dict(state)
        with pytest.raises(ValueError, match=f"{CHANGED}|{ANCHORED}"):
            list(inserted)
        assert state["lengths_version"] == 2, k
    # a state saved before (no "lengths_version") digested the pieces' sizes (16), of those it
    # holds or of its anchor: it still resumes, checked as it was
    old = {key: v for key, v in state.items() if key != "lengths_version"}
    keys = [p * 65_536 + j for _, _, items in state["open"] for p, j in items]
    keys += [p * 65_536 + j for items in state["ready"] for p, j in items]
    keys = keys or [state["anchor"][0] * 65_536 + state["anchor"][1]]
    old["lengths"] = lengths_digest(keys, [16] * len(keys))
    again = make(SIXTEENS)
    again.load_state_dict(old)
    assert head + _ids(again) == whole


@pytest.mark.parametrize("kind", ["pack", "bucket"])
def test_a_state_whose_held_samples_are_all_older_than_the_newest_handed_out_names_it(kind):
    # s34-split: such a state named no anchor (it holds samples), so a sample inserted after
    # the newest held one and before the newest handed out moved nothing it checked, and the
    # resume read the newest handed out again: trained twice (NOTE [ A stream state that holds
    # no sample ] in bucketloader.stream._engine). Packed: document 0 (10 tokens) stays in its
    # row while documents of 64 tokens close theirs; buckets: sample 0 waits in the short
    # bucket while the long one hands out samples 1-4.
    if kind == "pack":
        docs = list(enumerate([10] + [64] * 20 + [5] * 30))
        k, expect = 4, [[1], [2], [3], [4]]

        def make(docs):
            return PackIterable(
                Docs(docs), length_fn="input_ids", row_length=64, batch_size=1, open_rows=2
            )

    else:
        docs = list(enumerate([5, 40, 40, 40, 40, 6] + [7, 8, 9] * 10))
        k, expect = 1, [[1, 2, 3, 4]]

        def make(docs):
            return BucketIterable(
                Docs(docs), length_fn="input_ids", boundaries=[10, 60], batch_size=4
            )

    whole = _ids(make(docs))
    head, state = _head(make(docs), k)
    assert head == expect and state["read"] == 5
    # a pass resumed from it goes on from its anchor (one that held samples knew only the
    # documents handed out since: the packed one's next state named document 0)
    again = make(docs)
    again.load_state_dict(state)
    it = iter(again)
    more = _ids([next(it)])
    later = json.loads(json.dumps(again.state_dict()))
    assert head + more + _ids(it) == whole
    inserted = [*docs[:4], ("new", 20), *docs[4:]]
    for saved in (state, later):
        changed = make(inserted)
        changed.load_state_dict(saved)
        with pytest.raises(ValueError, match=f"{CHANGED}|{ANCHORED}"):
            list(changed)
    assert state["anchor"] == [4, 0] and state["ready" if kind == "pack" else "buckets"][0]


class ShortShard(IterableDataset):
    """Splits itself among DataLoader workers (a torch IterableDataset): worker 0's share (12
    samples, 3 batches) ends long before worker 1's (48)."""

    def __iter__(self):
        info = get_worker_info()
        wid = info.id if info is not None else 0
        for i in range(12 if wid == 0 else 48):
            yield {"input_ids": [1] * (1 + (7 * i + wid) % 50), "id": [wid, i]}


def test_a_source_that_shards_itself_resumes_after_a_worker_finished():
    # s33-left: once worker 0 had finished, the next batch was always worker 1's, so
    # state_dict(batches_consumed=k) refused every later k, advising "a multiple of num_workers
    # batches (e.g. 42 or 44)" at k = 42 too; a finished worker plays no part in a resume, so
    # such a state needs no rotation (NOTE [ A source that shards itself, once a worker
    # finished ] in bucketloader.stream.resume)
    def make():
        return BucketIterable(ShortShard(), length_fn="input_ids", boundaries=[60], batch_size=4)

    whole = _ids(_loader(make()))
    assert len(whole) == 15
    for k in (8, 9):  # (worker 0 made batches 0, 2 and 4, then stopped)
        first = make()
        it = iter(_loader(first))
        head = _ids(next(it) for _ in range(k))
        state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
        del it
        assert state["first"] == 0 and state["skip"] == [3, k - 3]
        again = make()
        again.load_state_dict(state)
        assert head + _ids(_loader(again)) == whole


def test_pack_states_saved_by_6ff2a30_resume_exactly_and_so_do_the_states_after_them() -> None:
    # States written by bucketloader 6ff2a30 (before "lengths_version": NOTE [ Pieces of one
    # length ]): cut pieces digested by their sizes, anchors by the old rule. Each resumes
    # exactly over the same source, and so does a state the resumed pass saves a batch later.
    path = os.path.join(os.path.dirname(__file__), "data", "pack_states_6ff2a30.json")
    with open(path) as f:
        saved = json.load(f)
    lengths = saved["lengths"]

    class Docs:  # re-iterable, without a length (as when the states were saved)
        def __iter__(self) -> object:
            return ({"input_ids": [1] * n, "id": i} for i, n in enumerate(lengths))

    def make(overflow: str) -> PackIterable:
        source = Docs()
        return PackIterable(
            source, length_fn="input_ids", row_length=16, batch_size=2, overflow=overflow
        )

    def ids(batches: object) -> list[list[int]]:
        return [[x["id"] for x in b] for b in batches]  # type: ignore[attr-defined]

    assert len(saved["states"]) == 6
    for name, state in saved["states"].items():
        overflow, k = name.split()[0], int(name.split()[1])
        assert "lengths_version" not in state and state["lengths"] != "0" * 16
        whole = ids(make(overflow))
        again = make(overflow)
        again.load_state_dict(state)
        assert whole[:k] + ids(again) == whole, name
        on = make(overflow)
        on.load_state_dict(state)
        it = iter(on)
        one = ids([next(it)])
        later = json.loads(json.dumps(on.state_dict()))
        assert later["lengths_version"] == 2
        last = make(overflow)
        last.load_state_dict(later)
        assert whole[:k] + one + ids(last) == whole, name
