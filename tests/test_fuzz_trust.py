"""Fuzzing the surface issue 21 hardened, with the fuzz suite's contract (tests/fuzzing.py): any
input gives a valid result that keeps its promises, or one ValueError / TypeError naming the
argument; a cache never raises, hangs or trusts a file it did not write.

* ``CompileCache`` records as arbitrary bytes, every file type at a record path, permissions;
  the same file types at a ``BucketCache`` entry path (both read through ``bucketloader._files``).
* ``EvalSampler`` with filters and ``restore`` / ``restore_ranks`` / ``restore_order``.
* ``GroupedDataset``.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch
from fuzzing import (
    FILE_KINDS,
    FUZZ,
    call,
    lengths_inputs,
    mostly,
    odd_ints,
    plant,
    reference_lengths,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketCache, EvalSampler, compute_boundaries
from bucketloader.cache.store import CacheWarning
from bucketloader.compile import CompileCache, CompileCacheWarning
from bucketloader.compile._key import digest
from bucketloader.evaluation import restore_order
from bucketloader.sampler import GroupedDataset

pytestmark = pytest.mark.timeout(120)

MODEL = {"model": "tiny", "layers": [1, 2]}
KEY = digest(MODEL)
SIG = {"inputs": ["int64", [2, 8]]}

JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _valid_record(directory):
    cache = CompileCache(directory)
    cache.put(KEY, MODEL, (2, 8), SIG, cold_seconds=1.5)
    (path,) = (directory / "entries" / KEY).glob("*.json")
    return cache, path, path.read_bytes()


@st.composite
def record_bytes(draw, valid: bytes):
    """Arbitrary bytes; the valid record truncated, or with a field replaced or removed; or a
    self-consistent forgery (its file name recomputed from its fields) with any shape."""
    kind = draw(st.sampled_from(["bytes", "truncated", "field", "delete", "forged", "json"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300)), None
    if kind == "truncated":
        return valid[: int(draw(st.floats(0, 1)) * len(valid))], None
    body = json.loads(valid)
    if kind == "json":
        return json.dumps(draw(JSON_VALUES), allow_nan=True).encode(), None
    key = draw(st.sampled_from(sorted(body)))
    if kind == "delete":
        del body[key]
        return json.dumps(body).encode(), None
    if kind == "field":
        body[key] = draw(JSON_VALUES)
        return json.dumps(body, allow_nan=True).encode(), None
    body["shape"] = draw(st.lists(st.one_of(st.integers(-5, 2**63), JSON_VALUES), max_size=4))
    try:
        name = CompileCache.shape_key(KEY, tuple(body["shape"]), body["batch"])
    except (TypeError, ValueError):
        name = None
    return json.dumps(body, allow_nan=True).encode(), name


@settings(FUZZ, max_examples=120)
@given(data=st.data())
def test_compile_record_with_any_contents_is_valid_or_ignored(tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("compile")
    cache, path, valid = _valid_record(directory)
    written, forged_name = data.draw(record_bytes(valid))
    path.write_bytes(written)
    if forged_name is not None:
        path.rename(path.with_name(f"{forged_name}.json"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        records = cache.records(KEY)  # never raises
        got = cache.get(KEY, (2, 8), SIG)
    assert len({str(w.message) for w in record}) <= 1
    assert all(issubclass(w.category, CompileCacheWarning) for w in record)
    for rec in records.values():  # whatever is accepted is a valid record
        assert rec.shape and all(type(x) is int and x >= 0 for x in rec.shape) and rec.shape[0] >= 1
        for s in (rec.cold_seconds, rec.warm_seconds):
            assert s is None or (isinstance(s, float) and 0 <= s < float("inf"))
    if got is not None:
        assert got.shape == (2, 8)
    cache.put(KEY, MODEL, (2, 8), SIG, warm_seconds=0.5)  # never raises either


@settings(FUZZ, max_examples=len(FILE_KINDS) * 2)
@given(kind=st.sampled_from(FILE_KINDS), which=st.sampled_from(["compile", "bucket"]))
def test_any_file_type_at_a_cache_path_never_hangs_or_raises(tmp_path_factory, kind, which):
    directory = tmp_path_factory.mktemp(which)
    lengths = [3, 4, 4, 9, 10, 31]
    if which == "compile":
        cache, path, valid = _valid_record(directory)
    else:
        compute_boundaries(lengths, 3, cache=BucketCache(directory))
        (path,) = directory.glob("*.json")
        valid = path.read_bytes()
    plant(path, kind, valid)
    category = CompileCacheWarning if which == "compile" else CacheWarning
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if which == "compile":
            got = cache.get(KEY, (2, 8), SIG)
            cache.put(KEY, MODEL, (2, 8), SIG, warm_seconds=0.5)
            again = cache.get(KEY, (2, 8), SIG)
            ok = kind in ("regular", "unreadable") or (got is None and (
                again is not None) == (kind in ("empty", "bomb", "huge")))  # fmt: skip
            assert ok, (kind, got, again)
        else:
            b = compute_boundaries(lengths, 3, cache=BucketCache(directory))
            assert b.tolist() == [4, 10, 31]
    assert all(issubclass(w.category, category) for w in record)
    if kind not in ("regular", "unreadable", "empty", "bomb", "huge"):
        assert record and os.path.lexists(path)  # left alone, and said


# --- EvalSampler with filters, and restoring ---------------------------------------------------
EVAL_NAMES = ["lengths", "num_buckets", "batch_size", "max_length", "min_length", "overflow",
              "num_replicas", "rank", "balance"]  # fmt: skip


@settings(FUZZ, max_examples=150)
@given(
    lengths=lengths_inputs(max_size=30, max_length=60),
    k=mostly(st.integers(1, 4), odd_ints()),
    limit=mostly(
        st.sampled_from(
            [
                {},
                {"max_length": 20, "overflow": "drop"},
                {"max_length": 30, "overflow": "truncate"},
                {"min_length": 5},
            ]
        ),
        st.sampled_from(
            [
                {"max_length": -1},
                {"max_length": 2.5, "overflow": "drop"},
                {"overflow": "nope", "max_length": 9},
            ]
        ),
    ),
    replicas=mostly(st.integers(1, 4), st.sampled_from([0, True])),
)
def test_eval_sampler_restores_every_kept_sample_in_order(lengths, k, limit, replicas):
    ref = reference_lengths(lengths)
    ranks = range(replicas) if isinstance(replicas, int) and replicas >= 1 else [0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the filter's warning (tested in test_trust.py)
        made = [
            call(
                lambda r=r: EvalSampler(
                    lengths, num_buckets=k, batch_size=3, num_replicas=replicas, rank=r, **limit
                ),
                EVAL_NAMES,
            )
            for r in ranks
        ]
    if not made[0].ok:
        return
    assert ref is not None
    samplers = [m.value for m in made]
    kept = samplers[0].kept
    totals = samplers[0].report().totals
    assert totals["seen"] == kept.size == samplers[0].num_samples
    assert totals["samples"] - totals["seen"] == sum(
        totals[x] for x in ("too_short", "too_long", "oversize")
    )
    gathered = samplers[0].gathered_index()
    outputs = torch.tensor(np.where(gathered >= 0, gathered * 3 + 1, -5))
    assert samplers[0].restore(outputs).tolist() == (kept * 3 + 1).tolist()
    per_rank = [np.where(s.row_index() >= 0, s.row_index() * 3 + 1, -5) for s in samplers]
    if len(samplers) == samplers[0].num_replicas:
        assert samplers[0].restore_ranks(per_rank).tolist() == (kept * 3 + 1).tolist()


INDEX_VALUES = st.one_of(
    st.lists(st.integers(-3, 8), max_size=10),
    st.lists(st.floats(-2, 8), max_size=6),
    st.lists(st.booleans(), max_size=6),
    st.sampled_from([[[0, 1]], "01", None, 3, [2**70], np.array([1, 0], dtype=np.uint64)]),
    st.permutations(list(range(6))).map(lambda p: [*p, -1]),
)


@settings(FUZZ, max_examples=200)
@given(index=INDEX_VALUES, num=st.one_of(st.none(), st.integers(-1, 9), st.just(2.5)))
def test_restore_order_any_index(index, num):
    rows = len(index) if hasattr(index, "__len__") and not isinstance(index, str) else 1
    outputs = np.arange(max(rows, 1) * 2).reshape(max(rows, 1), 2)
    out = call(lambda: restore_order(outputs, index, num_samples=num), ["index", "num_samples",
                                                                          "output"])  # fmt: skip
    if out.ok:
        idx = np.asarray(index, dtype=np.int64)
        real = idx[idx >= 0]
        assert np.issubdtype(np.asarray(index).dtype, np.integer)
        assert sorted(real.tolist()) == list(range(real.size))  # each sample exactly once
        assert out.value.shape == (real.size, 2)
        assert out.value[:, 0].tolist() == [
            2 * int(np.flatnonzero(idx == i)[0]) for i in range(real.size)
        ]


# --- GroupedDataset ----------------------------------------------------------------------------
SAMPLES = st.one_of(
    st.fixed_dictionaries({"x": st.integers(0, 3)}),
    st.fixed_dictionaries({"x": st.integers(0, 3), "dataset": st.sampled_from([0, 1, "wiki"])}),
    st.integers(0, 3),
    st.lists(st.integers(0, 3), max_size=2),
)


@settings(FUZZ, max_examples=150)
@given(
    datasets=mostly(
        st.lists(st.lists(SAMPLES, max_size=4), max_size=4),
        st.sampled_from([[], "ab", {"a": [1]}, 5, None, [[{"x": 1}], 3]]),
    ),
    key=mostly(st.sampled_from(["dataset", "source"]), st.sampled_from(["", 3, None])),
)
def test_grouped_dataset_any_input(datasets, key):
    made = call(lambda: GroupedDataset(datasets, key=key), ["datasets", "key", "dataset"])
    if not made.ok:
        return
    data = made.value
    sizes = [len(d) for d in datasets]
    assert (
        len(data) == sum(sizes)
        and data.groups.tolist() == np.repeat(np.arange(len(sizes)), sizes).tolist()
    )
    for i in range(len(data)):
        got = call(lambda i=i: data[i], ["dict samples", key])
        if got.ok:
            assert got.value[key] == data.groups[i]  # its own dataset, never another value
