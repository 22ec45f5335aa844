"""Streams resume by seeking where the source can (NOTE [ Seeking a source ] in
bucketloader.stream.source): exact from random points, and without re-reading the source from
the start of the epoch (rows counted)."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest
from conftest import load_real

from bucketloader.stream import BucketIterable, PackIterable
from bucketloader.stream.arrow import ArrowRows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

N = 600


@pytest.fixture(scope="module")
def lengths():
    return load_real("europarl")[:N, 1] % 60 + 1


def _columns(lengths):
    return {"id": list(range(len(lengths))), "input_ids": [[1] * int(n) for n in lengths]}


class Counted:
    """A seekable source (``__len__`` and ``__getitem__``, iterated by index) counting rows."""

    def __init__(self, rows):
        self.rows, self.reads = rows, 0

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if i >= len(self.rows):
            raise IndexError(i)
        self.reads += 1
        return self.rows[i]


class Stateful:
    """A plain iterable that checkpoints itself (``state_dict``: the samples handed out) and
    does not split itself among workers: the stream splits it round-robin."""

    def __init__(self, rows):
        self.rows, self.pos, self.start = rows, 0, 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]

    def __iter__(self):
        start, self.start = self.start, 0
        for i in range(start, len(self.rows)):
            self.pos = i + 1
            yield self.rows[i]


def _source(kind, lengths, tmp_path):
    cols = _columns(lengths)
    if kind == "stateful":
        return Stateful(_source("list", lengths, tmp_path))
    if kind == "list":
        return [dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True)]
    if kind == "counted":
        return Counted(_source("list", lengths, tmp_path))
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(cols)
    if kind == "hf-iterable":
        return ds.to_iterable_dataset(num_shards=4)
    if kind == "hf-table":
        return ds
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(cols)
    for i, part in enumerate(np.array_split(np.arange(len(lengths)), 3)):
        pq.write_table(
            table.slice(int(part[0]), len(part)), tmp_path / f"part-{i}.parquet", row_group_size=64
        )
    return ArrowRows(tmp_path, batch_rows=50)


def _bucket(source, **kw):
    return BucketIterable(
        source,
        length_fn="input_ids",
        boundaries=[8, 16, 32, 60],
        batch_size=4,
        shuffle_buffer=32,
        **kw,
    )


def _pack(source, **kw):
    return PackIterable(
        source, length_fn="input_ids", row_length=64, batch_size=2, open_rows=8, **kw
    )


def _ids(batches):
    return [[(s["id"], len(s["input_ids"])) for s in b] for b in batches]


@pytest.mark.parametrize("kind", ["list", "hf-table", "parquet", "hf-iterable"])
@pytest.mark.parametrize("make", [_bucket, _pack], ids=["bucket", "pack"])
def test_resume_from_random_points_is_exact(lengths, tmp_path, kind, make):
    source = _source(kind, lengths, tmp_path)
    whole = _ids(make(source))
    rng = np.random.default_rng(len(whole))
    for k in sorted(rng.choice(np.arange(1, len(whole)), 2, replace=False).tolist()):
        first = make(source)
        it = iter(first)
        head = _ids(next(it) for _ in range(k))
        state = json.loads(json.dumps(first.state_dict()))
        if kind != "hf-iterable":  # positions only: the source seeks there
            assert state["source"]["seek"] and state["source"]["state"] is None
        again = make(source)
        again.load_state_dict(state)
        assert head + _ids(again) == whole, f"{kind}: resume after {k} batches"


@pytest.mark.parametrize("make", [_bucket, _pack], ids=["bucket", "pack"])
def test_resume_reads_only_the_buffered_samples_and_the_rest(lengths, tmp_path, make):
    source = _source("counted", lengths, tmp_path)
    whole = _ids(make(source))
    first = make(source)
    it = iter(first)
    head = _ids(next(it) for _ in range(len(whole) - 3))  # late in the epoch
    state = first.state_dict()
    buffered = len(first._engine._positions())
    source.reads = 0
    again = make(source)
    again.load_state_dict(state)
    rest = _ids(again)
    assert head + rest == whole
    # O(buffer): the buffered samples by index, then the rows never read before; a replay
    # would read all N rows again
    assert source.reads == buffered + (N - state["read"])
    assert source.reads < 80 < N


@pytest.mark.parametrize("last_batch", ["pad", "fill"])
@pytest.mark.parametrize("make", [_bucket, _pack], ids=["bucket", "pack"])
def test_a_stream_split_over_ranks_resumes_by_seeking(lengths, tmp_path, make, last_batch):
    # steps_per_epoch (the schedule of a stream split over ranks) past the end of the shard:
    # the state holds positions (buffers, stand-ins, the last batch a dry step repeats), the
    # resume fetches those and reads on from the recorded row, never from the epoch's start
    source = _source("counted", lengths, tmp_path)
    kw = {"steps_per_epoch": 200 if make is _bucket else 160, "last_batch": last_batch}
    full = make(source, **kw)
    whole = _ids(full)
    total = full._engine.read  # rows the whole pass read
    dry = full._engine.stats["repeated" if make is _bucket else "repeated_rows"]
    assert total == N and (dry > 0) == (last_batch == "fill")  # the shard runs dry
    for k in (30, len(whole) - 2):
        first = make(source, **kw)
        it = iter(first)
        head = _ids(next(it) for _ in range(k))
        state = json.loads(json.dumps(first.state_dict()))
        assert state["format"] == first.STATE_FORMAT and state["source"]["seek"]
        again = make(source, **kw)
        again.load_state_dict(state)
        source.reads = 0
        assert head + _ids(again) == whole, f"resume after {k} steps"
        wanted = again._engine._wanted(state)
        assert source.reads == len(wanted) + total - state["read"] < total


def test_parquet_resume_starts_at_the_row_group_of_the_read_position(lengths, tmp_path):
    source = _source("parquet", lengths, tmp_path)
    groups = []
    batches_from = source._batches_from
    source._batches_from = lambda first: (groups.append(first), batches_from(first))[1]
    whole = _ids(_bucket(source))
    first = _bucket(source)
    it = iter(first)
    head = _ids(next(it) for _ in range(len(whole) // 2))
    state = first.state_dict()
    assert 0 < state["read"] < N
    groups.clear()
    again = _bucket(source)
    again.load_state_dict(state)
    assert head + _ids(again) == whole
    assert groups == [state["read"]]  # one read, from the recorded row on


@pytest.fixture
def reads(monkeypatch):
    """The positions a resume pulls from the restarted source (its replay), in order."""
    from bucketloader.stream import _engine

    pulled = []
    replay = _engine.replay

    def counted(it, start, stop):
        for x in replay(it, start, stop):
            pulled.append(x[0])
            yield x

    monkeypatch.setattr(_engine, "replay", counted)
    return pulled


def test_hf_iterable_resume_rereads_only_the_segments_holding_buffered_samples(
    lengths, tmp_path, reads
):
    source = _source("hf-iterable", lengths, tmp_path)
    whole = _ids(_bucket(source))
    for k in (len(whole) // 2, len(whole) - 3):
        first = _bucket(source)
        it = iter(first)
        head = _ids(next(it) for _ in range(k))
        state = json.loads(json.dumps(first.state_dict()))
        segments = state["source"]["segments"]  # [position, HF state_dict()] checkpoints
        reads.clear()
        again = _bucket(source)
        again.load_state_dict(state)
        assert head + _ids(again) == whole
        # each checkpoint is read only up to its last buffered sample (at most K = 64 rows,
        # the checkpoint interval here), the last one up to where the pass stopped
        assert state["read"] - segments[-1][0] <= 64
        assert len(reads) <= 64 * len(segments) < state["read"]
        assert len(reads) < state["read"] - state["source"]["position"]  # less than one replay


def _hf_rank(lengths, rank, **shuffle):
    """Rank ``rank`` of 2 of an HF ``IterableDataset`` (``split_dataset_by_node``), 900 rows."""
    datasets = pytest.importorskip("datasets")
    from datasets.distributed import split_dataset_by_node

    ds = datasets.Dataset.from_dict(_columns(np.tile(lengths, 3))).to_iterable_dataset(4)
    if shuffle:
        ds = ds.shuffle(**shuffle)
    return split_dataset_by_node(ds, rank=rank, world_size=2)


def _hf_steps(make, source, rank):
    """A stream split over 2 ranks, its steps past the end of the rank's shard (dry steps)."""
    from bucketloader import BucketSpec

    if make is _bucket:
        spec = BucketSpec.build(np.arange(1, 61), boundaries=[8, 16, 32, 60], batch_size=4)
        return BucketIterable(
            source,
            length_fn="input_ids",
            boundaries=spec,
            batch_size=4,
            shuffle_buffer=32,
            num_replicas=2,
            rank=rank,
            steps_per_epoch=260,
            last_batch="fill",
        )
    return _pack(source, num_replicas=2, rank=rank, steps_per_epoch=260, last_batch="fill")


@pytest.mark.filterwarnings("ignore:this BucketIterable leaves out")
@pytest.mark.parametrize("make", [_bucket, _pack], ids=["bucket", "pack"])
def test_an_hf_stream_split_over_ranks_resumes_from_its_checkpoints(lengths, reads, make):
    # an HF IterableDataset split over 2 ranks (steps_per_epoch): the exact state lists the
    # source's state_dict() checkpoints that precede a sample it names (buffers, each cell's
    # stand-in, the last batches a dry step repeats); the resume restarts the source at each,
    # never from the start of the epoch, and gives the uninterrupted run's batches
    for rank in range(2):
        source = _hf_rank(lengths, rank)
        full = _hf_steps(make, source, rank)
        whole = _ids(full)
        engine = full._engine
        every, shard = engine.every, engine.read
        assert len(whole) == 260 and shard == 900
        # the first stop after each new checkpoint (the newest is just behind it), and others
        after, other, dry, newest = [], [], [], 0
        probe = _hf_steps(make, source, rank)
        it = iter(probe)
        repeats = "repeated" if make is _bucket else "repeated_rows"
        for k in range(1, len(whole)):
            was = probe._engine.stats[repeats] if probe._engine else 0
            next(it)
            at = probe._engine.snaps[-1][0]
            (after if at != newest else other).append(k)
            newest = at
            e = probe._engine
            if e.stats[repeats] > was and e.read == 900 and not e._positions():
                dry.append(k)  # a dry step: it repeats a batch the pass made before
        assert len(after) > 4 and len(dry) > 2
        for k in (after[1], after[len(after) // 2], other[len(other) // 2], dry[0], dry[-1]):
            first = _hf_steps(make, source, rank)
            it = iter(first)
            head = _ids(next(it) for _ in range(k))
            state = json.loads(json.dumps(first.state_dict()))
            assert state["format"] == first.STATE_FORMAT  # exact, not a replay from the start
            segments = state["source"]["segments"]
            reads.clear()
            again = _hf_steps(make, source, rank)
            again.load_state_dict(state)
            assert head + _ids(again) == whole, f"rank {rank}: resume after {k} steps"
            # at most K samples per checkpoint listed; fewer than a replay late in the epoch
            assert len(reads) <= every * len(segments), (k, len(reads), len(segments))
            if state["read"] > shard // 2:
                assert len(reads) < state["read"] and len(segments) < state["read"] // every


@pytest.mark.parametrize("make", [_bucket, _pack], ids=["bucket", "pack"])
def test_an_hf_shuffle_buffer_is_replayed_not_restarted_at_a_checkpoint(lengths, make):
    # an HF IterableDataset's state_dict() leaves its shuffle buffer out (a restart there reads
    # other samples): such a source replays the epoch, exactly
    source = _hf_rank(lengths, 0, seed=1, buffer_size=40)
    whole = _ids(make(source))
    first = make(source)
    it = iter(first)
    head = _ids(next(it) for _ in range(len(whole) // 2))
    state = json.loads(json.dumps(first.state_dict()))
    assert state["source"]["state"] is None and "segments" not in state["source"]
    again = make(source)
    again.load_state_dict(state)
    assert head + _ids(again) == whole


def _loader(stream):
    from torch.utils.data import DataLoader

    return DataLoader(stream, batch_size=None, collate_fn=lambda b: b, num_workers=2)


def _bucket_steps(source, **kw):  # split over ranks: a schedule of steps past the shard's end
    return _bucket(source, steps_per_epoch=200, last_batch="fill", **kw)


def _pack_steps(source, **kw):
    return _pack(source, steps_per_epoch=160, last_batch="fill", **kw)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (_bucket, "list"),
        (_pack, "list"),
        (_bucket, "stateful"),
        (_pack, "stateful"),
        (_bucket, "hf-iterable"),
        (_pack, "hf-iterable"),
        (_bucket_steps, "list"),
        (_pack_steps, "list"),
        (_bucket_steps, "hf-iterable"),
        (_pack_steps, "hf-iterable"),
    ],
)
def test_resume_behind_workers_starts_at_each_workers_checkpoint(lengths, tmp_path, make, kind):
    # NOTE [ Worker checkpoints ] (opted in with checkpoint_dir): each worker restores its own
    # exact state and replays only the batches after it, instead of its pass from the start
    from bucketloader.stream.resume import CHECKPOINT_EVERY

    source = _source(kind, lengths, tmp_path)
    whole = _ids(_loader(make(source)))
    # late; a list is split by the stream (its lanes rotate when k is odd), an HF source
    # shards itself by worker id (k even). A source that checkpoints itself but is split by
    # the stream restores each worker's share from its checkpoint (s33: it resumed reading
    # every sample, and its unchanged resume was refused)
    k = len(whole) - (8 if kind == "hf-iterable" else 7)
    first = make(source, checkpoint_dir=tmp_path)
    private = first._lane_states.path
    assert os.path.dirname(private) == str(tmp_path) and os.stat(private).st_mode & 0o777 == 0o700
    it = iter(_loader(first))
    head = _ids(next(it) for _ in range(k))
    del it
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    lanes = state["lanes"]
    assert all(x is not None for x in lanes)
    behind = [s - x["batches"] for s, x in zip(state["skip"], lanes, strict=True)]
    assert all(0 <= b < CHECKPOINT_EVERY for b in behind)
    again = make(source, checkpoint_dir=tmp_path)
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == whole
    del first
    assert not os.path.exists(private)  # removed with the stream


def test_worker_checkpoints_are_off_by_default_and_prune_earlier_epochs(
    lengths, tmp_path, monkeypatch
):
    source = _source("list", lengths, tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where files went before
    os.mkdir(tempfile.tempdir)
    off = _bucket(source)
    it = iter(_loader(off))
    k = 9
    head = _ids(next(it) for _ in range(k))
    del it
    state = off.state_dict(batches_consumed=k)
    assert "lanes" not in state  # a replay, as before checkpoints: nothing written anywhere
    assert off._lane_states is None and os.listdir(tempfile.tempdir) == []
    monkeypatch.undo()
    again = _bucket(source)
    again.load_state_dict(state)
    assert head + _ids(_loader(again)) == _ids(_loader(_bucket(source)))

    on = _bucket(source, checkpoint_dir=tmp_path)
    files = []
    for epoch in range(3):
        on.set_epoch(epoch)
        assert _ids(_loader(on))
        files.append(sorted(os.listdir(on._lane_states.path)))
    # the newest CHECKPOINTS_KEPT per worker of the current epoch only, whatever the epoch
    assert len(files[0]) == len(files[1]) == len(files[2]) > 0
    assert all(name.startswith(f"e{e}-") for e, names in enumerate(files) for name in names)

    with pytest.raises(ValueError, match=r"checkpoint_dir must be None .* got 3"):
        _bucket(source, checkpoint_dir=3)
    with pytest.raises(ValueError, match="existing directory"):
        _pack(source, checkpoint_dir=tmp_path / "missing")


def test_a_worker_checkpoint_too_large_or_failing_is_skipped(tmp_path, monkeypatch):
    from bucketloader.stream.resume import LaneStates

    store = LaneStates(tmp_path)
    state = {"epoch": 0, "worker": [0, 2], "batches": 4, "buffer": list(range(10))}
    monkeypatch.setattr(LaneStates, "max_bytes", 20)
    with pytest.warns(RuntimeWarning, match="more than the 20 a worker checkpoint may take"):
        assert store.write(state) is False
    monkeypatch.setattr(LaneStates, "max_bytes", 1 << 18)
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("full")))
    assert store.write(state) is True  # a failed write: that worker replays, nothing left over
    assert os.listdir(store.path) == []


@pytest.mark.filterwarnings("ignore:this \\w+ starts another pass of epoch")  # on purpose
@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_state_after_set_epoch_is_the_new_epochs_start(kind):
    """A finished pass of epoch 0, then set_epoch(1): the state is epoch 1's start (before,
    a BucketIterable handed out the old pass's end, which resumed an empty epoch 0)."""
    data = [[1] * n for n in [3, 5, 9, 4, 7, 2, 8, 6] * 8]

    def make():
        if kind == "bucket":
            return BucketIterable(data, boundaries=[4, 9], batch_size=4, shuffle_buffer=8, seed=3)
        return PackIterable(data, row_length=16, batch_size=2)

    stream = make()
    list(stream)
    stream.set_epoch(1)
    state = stream.state_dict()
    assert state["epoch"] == 1
    fresh, resumed = make(), make()
    fresh.set_epoch(1)
    resumed.load_state_dict(state)
    dump = lambda batches: [json.dumps(b, default=lambda a: a.tolist()) for b in batches]  # noqa: E731
    want = dump(fresh)
    assert want and dump(resumed) == want
    # set_epoch(1) again after a pass of epoch 1 (run to its end, or left early): the state is
    # still epoch 1's start (s25-user: it was that pass's end or stop, and a resume skipped it)
    for stop in (None, 2):
        for i, _ in enumerate(resumed):
            if i == stop:
                break
        resumed.set_epoch(1)
        again = make()
        again.load_state_dict(resumed.state_dict())
        assert dump(again) == want


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_set_epoch_of_the_epoch_in_flight_keeps_its_position(kind):
    """set_epoch(e) inside a pass of epoch e (a loop that calls it at every step) leaves that
    pass's position: a checkpoint after it resumes after the batches handed out (s26b: it read
    the epoch's start for the rest of the pass, and a resume repeated them)."""
    data = [[1] * n for n in [3, 5, 9, 4, 7, 2, 8, 6] * 8]

    def make():
        if kind == "bucket":
            return BucketIterable(data, boundaries=[4, 9], batch_size=4, shuffle_buffer=8, seed=3)
        return PackIterable(data, row_length=16, batch_size=2)

    dump = lambda batches: [json.dumps(b, default=lambda a: a.tolist()) for b in batches]  # noqa: E731
    want = dump(make())
    stream = make()
    it = iter(stream)
    for _ in range(3):
        next(it)
        stream.set_epoch(0)
    resumed = make()
    resumed.load_state_dict(stream.state_dict())
    assert len(want) > 3 and dump(resumed) == want[3:]


def test_a_workers_first_checkpoint_of_an_epoch_keeps_the_other_workers_of_that_epoch(tmp_path):
    """NOTE [ Worker checkpoints ]: the workers share one directory; a worker's first write of
    an epoch removes the earlier epochs' files, never a file of its own epoch that another
    worker (its copy of the store) wrote before it."""
    import pickle

    from bucketloader.stream.resume import LaneStates

    store = LaneStates(tmp_path)
    first, second = pickle.loads(pickle.dumps(store)), pickle.loads(pickle.dumps(store))
    assert first.write({"epoch": 0, "worker": [0, 2], "batches": 4})
    assert first.write({"epoch": 1, "worker": [0, 2], "batches": 4})
    assert second.write({"epoch": 1, "worker": [1, 2], "batches": 4})  # (its first of epoch 1)
    assert store.best(epoch=1, lane=0, lanes=2, at_most=9)["batches"] == 4
    assert store.best(epoch=1, lane=1, lanes=2, at_most=9)["batches"] == 4
    assert store.best(epoch=0, lane=0, lanes=2, at_most=9) is None  # pruned
