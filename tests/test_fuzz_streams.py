"""Fuzzing the streams over ranks (issue 21) with the fuzz suite's contract (tests/fuzzing.py):
``BucketIterable`` and ``PackIterable`` over 1-4 simulated ranks (each rank its own stream with
``num_replicas`` / ``rank``, no process group), shards that are empty, hold one sample or a few,
behind 1 or 2 simulated DataLoader workers, under any options: a valid result, or one ValueError /
TypeError naming the argument.

A valid result: every rank makes ``steps_per_epoch`` steps (one pass without it), the same
planned shape at every step on every rank, every batch within its shape (collated: exactly it),
and every sample counted: the samples seen plus those the report says were left out (filtered,
dropped, left over) are the samples read, and a one-pass stream reads its whole shard.
"""

from __future__ import annotations

import types
import warnings
from collections import Counter
from unittest import mock

import pytest
import torch
from fuzzing import FUZZ, call, odd_ints
from fuzzing import mostly as _mostly
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.plan import BucketSpec
from bucketloader.stream import BucketIterable, PackIterable

pytestmark = pytest.mark.timeout(120)

BUCKET_NAMES = ["source", "length_fn", "boundaries", "batch_size", "max_tokens", "last_batch",
                "shuffle_buffer", "seed", "overflow", "max_length", "min_length",
                "num_replicas", "rank", "steps_per_epoch", "length"]  # fmt: skip
PACK_NAMES = ["source", "length_fn", "row_length", "batch_size", "max_tokens", "open_rows",
              "overflow", "last_batch", "max_documents", "num_replicas", "rank",
              "steps_per_epoch"]  # fmt: skip


@st.composite
def shards(draw, max_length):
    """1-4 ranks' shards of ``{"id", "input_ids"}`` samples: empty, one sample, or a few."""
    world = draw(st.integers(1, 4))
    sizes = [draw(st.sampled_from([0, 0, 1, 1, 2, 5, 12])) for _ in range(world)]
    out, start = [], 0
    for n in sizes:
        lengths = draw(st.lists(st.integers(0, max_length), min_size=n, max_size=n))
        out.append([{"id": start + i, "input_ids": [1 + i % 5] * k} for i, k in enumerate(lengths)])
        start += n
    return out


def mostly(valid, odd):
    """A valid value, and one time in 24 an odd one (about ten options are drawn per call)."""
    return _mostly(valid, odd, one_in=24)


def steps_for(world):
    """``steps_per_epoch``: required over several ranks, optional on one; sometimes odd."""
    valid = st.integers(1, 6) if world > 1 else st.one_of(st.none(), st.integers(1, 6))
    return mostly(valid, st.sampled_from([0, -1, True, 2.5, None]))


def run_rank(stream, workers):
    """The batches a DataLoader would hand out, with ``workers`` simulated workers (each worker
    iterates its own lane; the loader takes them round-robin, skipping finished workers)."""
    if workers == 1:
        return list(stream)
    lanes = []
    for w in range(workers):
        info = types.SimpleNamespace(id=w, num_workers=workers, seed=0, dataset=stream)
        with mock.patch.object(torch.utils.data, "get_worker_info", lambda info=info: info):
            lanes.append(list(stream))
    out, t = [], 0
    while any(lanes):
        lane = lanes[t % workers]
        if lane:
            out.append(lane.pop(0))
        t += 1
    return out


def check_in_step(streams, runs, steps):
    """Equal steps and, at every step, one planned shape on every rank, which is promised."""
    if steps is None:
        return
    assert [len(r) for r in runs] == [steps] * len(runs)
    promised = set(streams[0].shapes)
    for t in range(steps):
        shapes = {tuple(r[t].planned_shape) for r in runs}
        assert len(shapes) == 1, f"step {t}: the ranks disagree {shapes}"
        assert shapes <= promised


# --- BucketIterable ---------------------------------------------------------------------------
@st.composite
def bucket_options(draw):
    options = {}
    budget = draw(mostly(st.sampled_from(["batch_size", "max_tokens"]), st.just("both")))
    if budget in ("batch_size", "both"):
        options["batch_size"] = draw(mostly(st.integers(1, 4), odd_ints()))
    if budget in ("max_tokens", "both"):
        options["max_tokens"] = draw(mostly(st.integers(40, 200), odd_ints()))
    options["last_batch"] = draw(
        mostly(st.sampled_from(["pad", "fill"]), st.sampled_from(["drop", "keep", "", None]))
    )
    options["overflow"] = draw(
        mostly(
            st.sampled_from(["drop", "truncate"] * 2 + ["error"]), st.sampled_from(["", "split"])
        )
    )
    if draw(st.integers(0, 3)) == 0:
        options["min_length"] = draw(mostly(st.integers(0, 8), odd_ints()))
    if draw(st.integers(0, 3)) == 0:
        options["max_length"] = draw(mostly(st.integers(5, 40), odd_ints()))
    options["shuffle_buffer"] = draw(mostly(st.integers(0, 4), odd_ints()))
    options["seed"] = draw(mostly(st.integers(0, 3), odd_ints()))
    return options


@settings(FUZZ, max_examples=160)
@given(data=st.data(), parts=shards(max_length=50), options=bucket_options())
def test_bucket_streams_over_ranks_keep_step_and_count_every_sample(data, parts, options):
    world = len(parts)
    steps = data.draw(steps_for(world), label="steps")
    workers = data.draw(st.sampled_from([1, 1, 2]), label="workers")
    given_bounds = data.draw(
        mostly(
            st.lists(st.integers(1, 40), min_size=1, max_size=3, unique=True).map(sorted),
            st.sampled_from([[], [5, 3], [0, 4], "abc", [2**70], [[4, 8]]]),
        ),
        label="boundaries",
    )
    ranks = [data.draw(mostly(st.just(r), st.sampled_from([world, -1, True])), label="rank")
             for r in range(world)]  # fmt: skip

    def build_and_run():
        bounds = given_bounds
        ints = isinstance(bounds, list) and bounds and all(isinstance(b, int) for b in bounds)
        if world > 1 and ints and bounds == sorted(set(bounds)):
            # split over ranks, the schedule comes from a spec built on the lengths
            top = max(bounds)
            lengths = [min(len(s["input_ids"]), top) for p in parts for s in p] + bounds
            if bounds[0] >= 1:
                bounds = BucketSpec.build(lengths, boundaries=bounds, batch_size=2)
        streams = [
            BucketIterable(
                part,
                length_fn="input_ids",
                boundaries=bounds,
                num_replicas=world,
                rank=rank,
                steps_per_epoch=steps,
                **options,
            )
            for part, rank in zip(parts, ranks, strict=True)
        ]
        return streams, [run_rank(s, workers) for s in streams]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # drops and uneven shards warn, on purpose
        got = call(build_and_run, BUCKET_NAMES)
    if not got.ok:
        return
    streams, runs = got.value
    check_in_step(streams, runs, steps)
    collate = streams[0].collator()
    for stream, part, run in zip(streams, parts, runs, strict=True):
        seen = Counter()
        for t, batch in enumerate(run):
            real = batch[: getattr(batch, "num_real", len(batch))]
            seen.update(s["id"] for s in real)
            shape = getattr(batch, "planned_shape", None)
            if batch and t < 3:  # collated: exactly the planned shape
                out = collate(batch)
                assert shape is None or tuple(out["input_ids"].shape) == tuple(shape)
                assert tuple(out["input_ids"].shape) in set(stream.shapes)
        totals = stream.report().totals
        assert totals["batches"] == len(run)
        assert sum(seen.values()) - len(seen) == totals["repeated"]
        left_out = sum(totals[k] for k in ("too_short", "too_long", "oversize", "dropped"))
        assert len(seen) + left_out + totals["left_over"] == totals["samples"], totals
        assert totals["samples"] <= len(part)
        if steps is None:  # one pass: the whole shard read
            assert totals["samples"] == len(part) and totals["left_over"] == 0


# --- PackIterable -----------------------------------------------------------------------------
@st.composite
def pack_options(draw):
    options = {"row_length": draw(mostly(st.integers(1, 40), odd_ints()))}
    budget = draw(mostly(st.sampled_from(["batch_size", "max_tokens"]), st.just("both")))
    if budget in ("batch_size", "both"):
        options["batch_size"] = draw(mostly(st.integers(1, 3), odd_ints()))
    if budget in ("max_tokens", "both"):
        options["max_tokens"] = draw(mostly(st.integers(40, 200), odd_ints()))
    options["open_rows"] = draw(mostly(st.integers(1, 4), odd_ints()))
    options["overflow"] = draw(
        mostly(
            st.sampled_from(["drop", "split", "truncate"] * 2 + ["error"]),
            st.sampled_from(["", None]),
        )
    )
    options["last_batch"] = draw(
        mostly(st.sampled_from(["pad", "fill"]), st.sampled_from(["drop", "keep", ""]))
    )
    if draw(st.integers(0, 4)) == 0:
        options["max_documents"] = draw(mostly(st.integers(1, 30), odd_ints()))
    return options


@settings(FUZZ, max_examples=160)
@given(data=st.data(), parts=shards(max_length=60), options=pack_options())
def test_pack_streams_over_ranks_keep_step_and_count_every_document(data, parts, options):
    world = len(parts)
    steps = data.draw(steps_for(world), label="steps")
    workers = data.draw(st.sampled_from([1, 1, 2]), label="workers")
    ranks = [data.draw(mostly(st.just(r), st.sampled_from([world, -1, True])), label="rank")
             for r in range(world)]  # fmt: skip

    def build_and_run():
        streams = [
            PackIterable(
                part,
                length_fn="input_ids",
                num_replicas=world,
                rank=rank,
                steps_per_epoch=steps,
                **options,
            )
            for part, rank in zip(parts, ranks, strict=True)
        ]
        return streams, [run_rank(s, workers) for s in streams]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = call(build_and_run, PACK_NAMES)
    if not got.ok:
        return
    streams, runs = got.value
    check_in_step(streams, runs, steps)
    (shape,) = streams[0].shapes
    collate = streams[0].collator()
    lengths = {s["id"]: len(s["input_ids"]) for p in parts for s in p}
    for stream, part, run in zip(streams, parts, runs, strict=True):
        tokens = Counter()
        for t, batch in enumerate(run):
            for doc in batch:
                tokens[doc["id"]] += len(doc["input_ids"])
            if t < 3:  # collated: exactly the one shape (padding-only steps too)
                assert tuple(collate(batch)["input_ids"].shape) == shape
        stats = stream.stats
        totals = stream.report().totals
        assert totals["batches"] == len(run)
        assert totals["samples"] <= len(part)
        if steps is None:
            assert totals["samples"] == len(part)
        if options["last_batch"] == "pad" and stream.overflow != "split":
            # every document read is seen once, or counted where it went
            left_out = totals["too_long"] + totals["dropped"] + totals["left_over"]
            assert len(tokens) + left_out == totals["samples"], (stats, totals)
        assert all(n <= lengths[i] or stream.last_batch == "fill" for i, n in tokens.items())


# --- what the fuzzing found (each failed before the fix) --------------------------------------
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"row_length": 2**70, "batch_size": 1}, "row_length must be an int >= 1 and <= "),
        ({"row_length": 8, "batch_size": 2, "max_documents": 2**40}, "max_documents must be "),
        (
            {"row_length": 8, "batch_size": 2, "max_documents": 17},
            "<= batch_size \\* row_length = 16",
        ),
    ],
)
def test_a_packing_stream_refuses_bounds_it_cannot_lay_out(options, match):
    """``row_length=2**70`` raised OverflowError; ``max_documents=2**40`` was accepted and the
    collator then tried to allocate a 4 TiB ``cu_seqlens``."""
    with pytest.raises(ValueError, match=match):
        PackIterable([[1, 2]], **options)
    assert PackIterable([[1, 2]], row_length=8, batch_size=2, max_documents=16).max_documents == 16
