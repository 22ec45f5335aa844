"""Streams resume by seeking where the source can (NOTE [ Seeking a source ] in
bucketloader.stream.source): exact from random points, and without re-reading the source from
the start of the epoch (rows counted)."""

from __future__ import annotations

import json
import os

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


def _source(kind, lengths, tmp_path):
    cols = _columns(lengths)
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


def _bucket(source):
    return BucketIterable(
        source, length_fn="input_ids", boundaries=[8, 16, 32, 60], batch_size=4, shuffle_buffer=32
    )


def _pack(source):
    return PackIterable(source, length_fn="input_ids", row_length=64, batch_size=2, open_rows=8)


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


def test_hf_iterable_resume_rereads_only_the_segments_holding_buffered_samples(
    lengths, tmp_path, monkeypatch
):
    from bucketloader.stream import _engine

    reads = []
    replay = _engine.replay

    def counted(it, start, stop):  # the samples the resume pulls from the restarted source
        for x in replay(it, start, stop):
            reads.append(x[0])
            yield x

    monkeypatch.setattr(_engine, "replay", counted)
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
