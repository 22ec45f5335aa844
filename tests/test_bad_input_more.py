"""Bad input, second pass (session 3): one clear error naming the argument, the bad value and the
fix; never a bare ``KeyError``, an assert, or a crash inside numpy, torch or PuLP; never a lost
sample without a count and a warning; never a silently wrong resume.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

from bucketloader import BucketIterable, BucketSampler
from bucketloader._validation import MissingKeyError
from bucketloader.plan import DataLossWarning


# -- missing keys speak the library's voice (MissingKeyError: a ValueError and a KeyError) --------
def _sampler():
    return BucketSampler([3, 5, 8, 8], num_buckets=2, batch_size=2)


@pytest.mark.parametrize(
    ("make", "batch", "match"),
    [
        (lambda: _sampler().collator(fields={"x": "length"}), [{"y": torch.ones(3)}],
         r"fields names \['x'\] but the samples \(dict\) have fields \['y'\]"),
        (lambda: _sampler().collator(pad_value={"z": 1}), [{"x": torch.ones(3)}],
         r"pad_value names \['z'\]"),
        (lambda: _sampler().collator(group_key="source"), [{"x": torch.ones(3)}],
         "sample at batch position 0 has no group_key 'source'"),
    ],
)  # fmt: skip
def test_pad_collator_missing_key_is_a_missing_key_error(make, batch, match):
    with pytest.raises(MissingKeyError, match=match) as info:
        make()(batch)
    assert isinstance(info.value, ValueError) and not str(info.value).startswith(("'", '"'))


def test_stream_boundaries_mapping_without_an_input_is_a_missing_key_error():
    rows = [{"a": [1] * 3, "b": [1] * 4}] * 4
    with pytest.raises(MissingKeyError, match="boundaries has no entry for input 'b'") as info:
        BucketIterable(rows, boundaries={"a": [8]}, length_fn=("a", "b"), batch_size=2)
    assert isinstance(info.value, ValueError)


def test_report_row_lookup_lists_the_rows():
    from bucketloader import analyze

    report = analyze(np.arange(1, 50), num_buckets=[2], strategy="optimal")
    with pytest.raises(MissingKeyError, match=r"num_buckets=3; the report has .*\('optimal', 2\)"):
        report.row("optimal", 3)


# -- a map-style source is rows 0 .. len - 1, in a pass and in its resume --------------------------
class MapStyle:
    """``__len__`` and ``__getitem__``, no ``__iter__``: ``n`` rows by ``len``; ``__getitem__``
    serves ``served`` rows (``None``: every index, wrapping, so Python's fallback iteration
    would never end)."""

    def __init__(self, n, served=None):
        self.n, self.served = n, served

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.served is not None and i >= self.served:
            raise IndexError(i)
        return {"id": i, "x": [1] * (1 + (i * 7) % 13)}


def _ids(batches):
    return [s["id"] for b in batches for s in b]


def _stream(source):
    return BucketIterable(source, length_fn="x", boundaries=[5, 13], batch_size=3, shuffle_buffer=4)


@pytest.mark.parametrize("served", [None, 40])  # wraps forever; serves more rows than its len
def test_map_style_source_is_its_len_rows_and_resumes_exactly(served):
    whole = _ids(_stream(MapStyle(30, served)))
    assert sorted(whole) == list(range(30))  # ends, rows 0 .. len - 1, each once
    first = _stream(MapStyle(30, served))
    it = iter(first)
    head = [next(it) for _ in range(4)]
    again = _stream(MapStyle(30, served))
    again.load_state_dict(first.state_dict())
    assert _ids(head) + _ids(again) == whole


def test_map_style_source_whose_len_lies_is_one_clear_error():
    with pytest.raises(ValueError, match=r"IndexError at row 20, but len\(source\)=30.*__len__"):
        list(_stream(MapStyle(30, served=20)))


# -- boundaries estimated from the head resume exactly; a state from another head is refused -------
def _estimated(source):
    from bucketloader.stream.estimate import estimate

    return BucketIterable(
        source, length_fn="x", boundaries=estimate(2, sample_size=12), batch_size=3,
        shuffle_buffer=4,
    )  # fmt: skip


class Factory:
    """A re-iterable source that is not a sequence (each ``iter`` a fresh generator)."""

    def __iter__(self):
        return (MapStyle(40)[i] for i in range(40))


@pytest.mark.parametrize(
    "make", [lambda: MapStyle(40), Factory, lambda: [MapStyle(40)[i] for i in range(40)]]
)
def test_estimated_boundaries_resume_exactly_in_a_new_stream_and_epoch(make):
    import json

    first = _estimated(make())
    whole = _ids(first)
    assert sorted(whole) == list(range(40))
    first.set_epoch(1)  # the same stream after a whole pass resumes too
    second = _ids(first)
    for epoch, expected in ((0, whole), (1, second)):
        for stop in (1, 4):
            live = _estimated(make())
            live.set_epoch(epoch)
            it = iter(live)
            head = [next(it) for _ in range(stop)]
            state = json.loads(json.dumps(live.state_dict()))
            for again in (_estimated(make()), live):
                again.load_state_dict(state)
                assert _ids(head) + _ids(again) == expected


def test_estimated_boundaries_from_another_head_are_refused_with_the_fix():
    first = _estimated(MapStyle(40))
    next(iter(first))
    other = _estimated([{"id": i, "x": [1] * (1 + i)} for i in range(40)])
    assert other.boundaries.tolist() != first.boundaries.tolist()
    with pytest.raises(ValueError, match=r"state has boundaries=.*same samples first"):
        other.load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match=r"cannot resume a one-shot iterator .* re-iterable"):
        _estimated(iter(list(Factory()))).load_state_dict(first.state_dict())


# -- options that do not know about promotion say so ----------------------------------------------
def test_batched_strategy_plans_exactly_without_promotion_and_bounds_it_with():
    from bucketloader import TokenBudget

    lengths = np.random.default_rng(0).integers(5, 120, size=400)

    def padded(promote):
        sampler = BucketSampler(
            lengths, num_buckets=4, strategy="batched", shuffle=False,
            max_tokens=TokenBudget(600, promote=promote),
        )  # fmt: skip
        cells = sampler.report().cells
        return sum(c["padded"] - c["real"] for c in cells), sampler

    from bucketloader.strategies.batched import batched

    plan = batched(lengths, 4, max_tokens=600)
    exact, sampler = padded(False)
    assert sampler.boundaries.tolist() == plan.boundaries.tolist()
    planned = plan.info["padded"]
    assert exact == planned  # the objective is what runs without promotion
    promoted, _ = padded(True)
    assert promoted <= planned


def test_sharded_sampler_refuses_promote_false():
    from bucketloader import TokenBudget
    from bucketloader.sharded import ShardedSampler

    with pytest.raises(ValueError, match=r"promote=False\).*always promotes.*BucketSampler"):
        ShardedSampler([3, 5, 9], num_buckets=2, max_tokens=TokenBudget(20, promote=False))
    assert len(ShardedSampler([3, 5, 9], num_buckets=2, max_tokens=TokenBudget(20))) >= 1


# -- the bad-input pass over the public names ----------------------------------------------------
def _hist():
    from bucketloader import LengthHistogram

    return LengthHistogram.from_lengths([1, 2, 3])


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: BucketSampler([3, 5, 8], num_buckets=2, batch_size=2, accumulate=10**9),
         ValueError, r"accumulate must be an int >= 1 and <= 65536, got accumulate=1000000000"),
        (lambda: BucketSampler([3, 5, 8], num_buckets=2, batch_size=2, accumulate=2**70),
         ValueError, "accumulate must be an int >= 1 and <= 65536"),
        (lambda: BucketSampler([3, 5], num_buckets=2, batch_size=2, num_replicas=2**70, rank=0),
         ValueError, r"num_replicas must be an int >= 1 and <= 1048576"),
        (lambda: BucketSampler(np.ma.array([3, 5, 8], mask=[0, 1, 0]), num_buckets=2,
                               batch_size=2), TypeError, r"masked array.*lengths.compressed\(\)"),
        (lambda: BucketSampler(memoryview(b"ab"), num_buckets=1, batch_size=2), TypeError,
         "lengths must be a list, numpy array or torch tensor .* got memoryview"),
        (lambda: _sampler().collator()(torch.ones(2, 3)), TypeError,
         r"needs a list of samples .* got Tensor"),
        (lambda: _sampler().collator()([]), ValueError, "non-empty list of samples"),
        (lambda: _sampler().dataloader(None), TypeError, "dataset must be a map-style dataset"),
        (lambda: BucketIterable([{"a": [1]}], length_fn=("a",), boundaries={"a": [4], "b": [4]},
                                batch_size=1), MissingKeyError, "entry for 'b', which length_fn"),
        (lambda: _sampler().collator(group_key=["g"]), TypeError, "group_key must be a dict key"),
        (lambda: _hist().quantile(2), ValueError, r"q must be in \[0, 1\].*got q=2"),
        (lambda: _hist().quantile(float("nan")), ValueError, r"q must be in \[0, 1\]"),
        (lambda: _hist().quantile("half"), TypeError, "q must be a float"),
        (lambda: __import__("bucketloader").STRATEGIES["optiml"], MissingKeyError,
         r"no strategy named 'optiml'; the registered ones are \[.*'optimal'"),
        (lambda: __import__("bucketloader").recommend_num_buckets([3, 4, 5], max_buckets=3),
         TypeError, "recommend_num_buckets got an unexpected option max_buckets=3"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def _ranked(kind, **ranks):
    """One of the library's rank-aware entry points, built with ``ranks`` (no process group)."""
    from bucketloader import BucketSpec, EvalSampler, LengthHistogram, PackSampler
    from bucketloader.sharded import ShardedSampler
    from bucketloader.stream.packing import PackIterable
    from bucketloader.weighted import WeightedBucketSampler

    lengths, rows = [3, 5, 8, 8, 2, 9], [{"input_ids": [1] * n} for n in (3, 5, 8)]
    sizes, whole = {"num_buckets": 2, "batch_size": 2}, LengthHistogram.from_lengths(lengths)
    spec = BucketSpec.build(lengths, boundaries=[4, 9], batch_size=2)  # a stream's schedule
    make = {
        "bucket": lambda: BucketSampler(lengths, **sizes, **ranks),
        "weighted": lambda: WeightedBucketSampler(lengths, [1] * 6, **sizes, **ranks),
        "eval": lambda: EvalSampler(lengths, **sizes, **ranks),
        "pack": lambda: PackSampler(lengths, row_length=16, batch_size=2, **ranks),
        "sharded": lambda: ShardedSampler(
            lengths, shard_histograms=[whole] * ranks.get("num_replicas", 1), **sizes, **ranks
        ),
        "stream": lambda: BucketIterable(
            rows, length_fn="input_ids", boundaries=spec, batch_size=2, steps_per_epoch=2, **ranks
        ),
        "pack_stream": lambda: PackIterable(
            rows, length_fn="input_ids", row_length=16, batch_size=2, steps_per_epoch=2, **ranks
        ),
    }
    return make[kind]()


@pytest.mark.parametrize(
    "kind", ["bucket", "weighted", "eval", "pack", "sharded", "stream", "pack_stream"]
)
def test_num_replicas_without_rank_or_a_process_group_is_refused(kind):
    """8 processes started with num_replicas=8 and no rank (and no process group) all planned
    rank 0's batches: the same data 8 times, silently. torch's DistributedSampler raises there
    too; every entry point now names rank and the fix, and still takes rank when given."""
    with pytest.raises(ValueError, match=r"rank is required with num_replicas=4 when no torch\."
                       r"distributed process group is initialised .* pass rank= \(each process "
                       r"its own, 0\.\.3\)"):  # fmt: skip
        _ranked(kind, num_replicas=4)
    assert _ranked(kind, num_replicas=4, rank=3).rank == 3
    assert _ranked(kind, num_replicas=1).rank == 0  # one rank: rank 0 is the only one
    assert _ranked(kind).num_replicas == 1


@pytest.mark.parametrize("batch_size", [[8], (8,), [8, 4], {16: 8}, np.array([8]), lambda n: 8])
@pytest.mark.parametrize("kind", ["pack", "pack_stream"])
def test_packing_takes_one_batch_size_an_int(kind, batch_size):
    """PackSampler(batch_size=[8]) was taken as 8 (a BucketSampler's per-bucket sizes), [8, 4]
    with one row length spoke of buckets: rows take one int, the same for every row length."""
    from bucketloader import PackSampler
    from bucketloader.stream.packing import PackIterable

    make = {
        "pack": lambda b: PackSampler([3, 5, 8, 9] * 4, row_length=16, batch_size=b),
        "pack_stream": lambda b: PackIterable([[1] * 3] * 5, row_length=16, batch_size=b),
    }[kind]
    with pytest.raises(TypeError, match=r"batch_size must be an int >= 1 \(rows per batch, the "
                       r"same for every row length\), got batch_size=.*; for fewer rows at "
                       r"longer row lengths pass max_tokens="):  # fmt: skip
        make(batch_size)
    made = make(np.int64(2))  # numpy ints are ints
    assert made.table.batch_sizes == (2,)


def _exact_state():
    rows = [[1] * n for n in [3, 5, 8, 8, 2, 9, 4, 4]]
    stream = BucketIterable(rows, boundaries=[4, 9], batch_size=2)
    next(iter(stream))
    return rows, stream.state_dict()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ({"phase": "x"}, r"state\['phase'\] must be one of"),
        ({"worker": [2, 1]}, r"state\['worker'\] must be \[worker id, workers\]"),
        ({"buckets": []}, "buffers do not fit this BucketIterable"),
        ({"buckets": [[99], []]}, "buffers do not fit"),
        ({"draws": {}}, "buffers do not fit"),
        ({"source": {"position": 99, "state": None, "seek": True}}, r"must be >= 0 and <= state"),
    ],
)
def test_an_edited_stream_state_is_refused_when_loaded(edit, match):
    rows, state = _exact_state()
    stream = BucketIterable(rows, boundaries=[4, 9], batch_size=2)
    with pytest.raises(ValueError, match=match):
        stream.load_state_dict({**state, **edit})
    assert stream._resume is None  # nothing half-loaded


# -- the command: one error line, status 2 ---------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["report", "{ok}", "-k", str(2**70)], "num_buckets must be an int >= 1 and <= "),
        (["precompute", "{ok}", "-k", "2", "--cache-dir", "{ok}"],
         r"the cache directory .* is not usable \(.*\); point --cache-dir"),
        (["report", "{bad}"], r"bad.parquet is not a Parquet file \(it begins with b.garb."),
    ],
)  # fmt: skip
def test_cli_bad_input_is_one_error_line(tmp_path, capsys, argv, match):
    import re
    import warnings

    from bucketloader.cli.main import main

    ok, bad = tmp_path / "ok.txt", tmp_path / "bad.parquet"
    ok.write_text("3\n5\n8\n")
    bad.write_bytes(b"garbage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([a.format(ok=ok, bad=bad) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(match, err[0]) and err[0].startswith("bucketloader: error:")


def test_python_dash_m_bucketloader_runs_the_command(monkeypatch, capsys):
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", ["bucketloader", "report", "--help"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("bucketloader", run_name="__main__")
    assert info.value.code == 0 and "usage: bucketloader report" in capsys.readouterr().out


def test_a_user_callable_that_fails_is_named_with_its_input():
    from bucketloader import BucketSpec

    with pytest.raises(ValueError, match=r"batch_size callable raised ZeroDivisionError.*\(\d+,\)"):
        BucketSpec.build([3, 5, 8], num_buckets=2, batch_size=lambda b: 1 // 0)


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_stream_over_an_empty_source_warns(kind):
    from bucketloader.stream import PackIterable

    stream = (
        BucketIterable([], boundaries=[4], batch_size=2)
        if kind == "bucket"
        else PackIterable([], row_length=8, batch_size=2)
    )
    with pytest.warns(UserWarning, match="read no sample from its source in epoch 0"):
        assert list(stream) == []


def test_a_stream_that_leaves_samples_out_warns_with_the_counts():
    rows = [{"a": [1] * n} for n in [3, 5, 8, 2, 1, 1, 1]]
    stream = BucketIterable(
        rows, length_fn="a", boundaries=[4], batch_size=2, overflow="drop", last_batch="drop"
    )
    with pytest.warns(DataLossWarning) as caught:  # (its own category, s19)
        kept = _ids_of(list(stream))
    assert str(caught[0].message) == (
        "this BucketIterable leaves out 2 samples dropped by overflow='drop', 1 sample dropped "
        "by last_batch='drop'; its pass read 7 samples in epoch 0 (report() counts them by kind)"
    )
    totals = stream.report().totals
    assert (kept, totals["too_long"], totals["dropped"]) == (4, 2, 1)


def test_the_left_over_warning_reads_as_a_sentence():
    # s4-user defect 3: "leaves out 6 left over when steps_per_epoch ran out"
    from types import SimpleNamespace

    from bucketloader.stream.resume import _warn_at_end

    engine = SimpleNamespace(
        stats={"left_over": 6, "too_short": 1},
        read=300,
        dry=0,
        batches=9,
        fill_repeats=lambda: (0, 0),  # (no fill repeats: s22's fill note stays out of it)
    )
    with pytest.warns(UserWarning) as caught:
        list(_warn_at_end(iter([]), engine, "BucketIterable", 0, empty=False))
    assert str(caught[0].message).startswith(
        "this BucketIterable leaves out 1 sample shorter than min_length, 6 samples left over "
        "when steps_per_epoch ran out; its pass read 300 samples in epoch 0"
    )


def test_a_stream_leaving_out_at_most_one_percent_stays_quiet_like_the_samplers():
    import warnings

    rows = [{"a": [1] * n} for n in [1] + [5] * 999]  # 1 of 1,000 under min_length: 0.1%
    stream = BucketIterable(
        rows, length_fn="a", boundaries=[4, 8], batch_size=8, min_length=2, overflow="drop"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _ids_of(list(stream)) == 999
    assert stream.report().totals["too_short"] == 1  # still counted


def _ids_of(batches):
    return sum(len(b) for b in batches)


@pytest.mark.parametrize(
    "edit",
    [{"open": [[2, 26]]}, {"open": [[2, 26, [[99, 0]]]]}, {"open": [5]}, {"ready": [[[99, 0]]]}],
)
def test_an_edited_pack_stream_state_is_refused_when_loaded(edit):
    from bucketloader.stream import PackIterable

    rows = [[1] * n for n in [3, 5, 8, 8, 2, 9, 4, 4, 7, 1, 1, 3]]
    live = PackIterable(rows, row_length=16, batch_size=2)
    next(iter(live))
    stream = PackIterable(rows, row_length=16, batch_size=2)
    with pytest.raises(ValueError, match="open and ready rows do not fit this PackIterable"):
        stream.load_state_dict({**live.state_dict(), **edit})
    stream.load_state_dict(live.state_dict())  # the unedited state still loads


@pytest.mark.parametrize("kind", ["plan", "stream"])
def test_a_huge_row_length_is_refused_before_it_exhausts_memory(kind):
    from bucketloader.pack import PackSpec
    from bucketloader.stream import PackIterable

    with pytest.raises(ValueError, match=r"row_length=1,073,741,824 is above the 16,777,216"):
        if kind == "plan":  # was killed by the OOM killer (tables of row_length + 1 entries)
            PackSpec.build([3], row_length=2**30, batch_size=1024)
        else:
            PackIterable([[1] * 3], row_length=2**30, batch_size=2)


@pytest.mark.parametrize("value", [2**70, -(2**63) - 1, 2**64])
def test_pad_value_past_int64_and_uint64_is_refused_when_the_collator_is_made(value):
    # (it was an OverflowError inside torch at the first batch)
    match = (
        r"pad_value must fit in int64 or uint64 \(-2\*\*63 to 2\*\*64 - 1\), got pad_value=.*float"
    )
    with pytest.raises(ValueError, match=match):
        _sampler().collator(pad_value=value)
    with pytest.raises(ValueError, match=r"pad_value\['x'\] must fit in int64 or uint64"):
        _sampler().collator(pad_value={"x": value})


def test_pad_value_at_the_int64_and_uint64_edges_still_pads():
    for value, dtype in (
        (2**63 - 1, torch.int64),
        (-(2**63), torch.int64),
        (2**64 - 1, torch.uint64),
    ):
        out = _sampler().collator(pad_value=value)([torch.zeros(3, dtype=dtype)])
        assert out["inputs"].dtype == dtype and int(out["inputs"].numpy()[0, -1]) == value
    # a uint64 sentinel on numpy uint64 samples, and a big int on float samples (as before)
    out = _sampler().collator(pad_value=2**64 - 1)([np.zeros(3, dtype=np.uint64)])
    assert int(out["inputs"].numpy()[0, -1]) == 2**64 - 1
    for samples in ([np.zeros(3, dtype=np.uint64)], [torch.zeros(3, dtype=torch.uint64)]):
        out = _sampler().collator(pad_value=np.uint64(2**64 - 1))(samples)  # (was a TypeError)
        assert int(out["inputs"].numpy()[0, -1]) == 2**64 - 1
    out = _sampler().collator(pad_value=2**63)([torch.zeros(3, dtype=torch.float64)])
    assert out["inputs"][0, -1].item() == 2.0**63


# -- session 13: the public API fed bad input as a demanding user would --------------------------
@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_mapping_source_is_refused_not_read_as_its_keys(kind):
    """BucketIterable({"input_ids": [...]}) read the dict's keys as samples: one batch of the
    column name's characters, silently (an IterableDatasetDict likewise gave its split names)."""
    from bucketloader.stream import PackIterable

    columns = {"input_ids": [[1] * n for n in (3, 5, 8)]}
    make = {
        "bucket": lambda src: BucketIterable(src, boundaries=[4, 8], batch_size=2),
        "pack": lambda src: PackIterable(src, row_length=8, batch_size=2),
    }[kind]
    with pytest.raises(
        TypeError,
        match=r"^source must be an iterable of samples, got a dict with keys \['input_ids'\], "
        r"whose iteration gives its keys; pass one split of a DatasetDict \(source\['train'\]\)",
    ):
        make(columns)
    rows = [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    assert sum(len(b) for b in make(rows)) >= 2


def test_a_sampler_state_of_another_kind_says_so():
    """PackSampler.load_state_dict(a BucketSampler state) said "it was saved by another
    version"; s27: a state names its sampler, and another kind is refused by both names (a
    BucketSampler's state in a ShardedSampler said num_batches differed, in an EvalSampler that
    plan_digest did); a state saved before it named its sampler still says what it can."""
    from bucketloader import PackSampler
    from bucketloader.evaluation import EvalSampler
    from bucketloader.sharded import ShardedSampler

    lengths = [3, 5, 8, 8]
    samplers = {
        "BucketSampler": BucketSampler(lengths, num_buckets=2, batch_size=2),
        "PackSampler": PackSampler(lengths, row_length=16, batch_size=2),
        "EvalSampler": EvalSampler(lengths, num_buckets=2, batch_size=2),
        "ShardedSampler": ShardedSampler(
            lengths, num_buckets=2, batch_size=2, num_replicas=1, rank=0
        ),
    }
    for saved, other in itertools.permutations(samplers, 2):
        article = "an" if saved[0] == "E" else "a"
        with pytest.raises(
            ValueError,
            match=rf"^state is {article} {saved}'s \(state\['sampler'\]\), not an? {other}'s; "
            rf"load it into the {saved} that saved it, and pass {other}\.load_state_dict a dict "
            rf"from {other}\.state_dict\(\)$",
        ):
            samplers[other].load_state_dict(samplers[saved].state_dict())
    for sampler in samplers.values():
        sampler.load_state_dict(sampler.state_dict())  # its own kind loads
    # a stream's state said "state is missing ['version', 'batches_yielded']"
    stream = BucketIterable([[1] * n for n in lengths], boundaries=[4, 8], batch_size=2)
    next(iter(stream))
    with pytest.raises(ValueError, match=r"^state is a stream's \(BucketIterable\.state_dict\(\)"):
        samplers["BucketSampler"].load_state_dict(stream.state_dict())
    bucket, pack = samplers["BucketSampler"], samplers["PackSampler"]
    for sampler, state, owner in [(pack, bucket, "PackSampler"), (bucket, pack, "BucketSampler")]:
        old = {k: v for k, v in state.state_dict().items() if k != "sampler"}
        with pytest.raises(
            ValueError,
            match=r"^state\['config'\] has no '\w+' \(its keys: \[.*\]\): the state was saved "
            rf"by another kind of sampler or another version of bucketloader; pass a state from "
            rf"{owner}\.state_dict\(\)$",
        ):
            sampler.load_state_dict(old)


def test_a_failing_custom_strategy_names_itself_and_its_input():
    import sys

    from bucketloader import compute_boundaries

    def broken(hist, num_buckets):
        return [1 // 0]

    with pytest.raises(ZeroDivisionError) as info:
        compute_boundaries([3, 5, 9], 2, strategy=broken)
    if sys.version_info >= (3, 11):
        assert info.value.__notes__ == [
            "(raised by strategy 'broken' on LengthHistogram(num_samples=3, num_values=3, min=3, "
            "max=9))"
        ]


@pytest.mark.parametrize("kind", ["bucket", "pack"])
@pytest.mark.parametrize("last_batch", ["pad", "fill"])
def test_steps_per_epoch_far_past_the_shard_warns_once_when_the_shard_runs_dry(kind, last_batch):
    """steps_per_epoch=20 over 12 samples (2 per batch) made 14 padding-only (or repeated) steps
    without a word; the note comes at the first dry step, not at the pass's end (which
    steps_per_epoch=10**9 would reach only after that many steps), once; steps that fit, or
    overshoot by under a quarter, stay quiet."""
    import inspect
    import itertools
    import warnings

    from bucketloader.stream import PackIterable

    rows = [[1] * n for n in (5, 17, 3, 40, 22, 9, 9, 31, 12, 8, 27, 6)]
    owner = "BucketIterable" if kind == "bucket" else "PackIterable"
    full = 6 if kind == "bucket" else 5  # (6 batches of 2; 5 rows of 40 hold the 189 tokens)

    def make(steps):
        if kind == "bucket":
            return BucketIterable(
                rows, boundaries=[40], batch_size=2, steps_per_epoch=steps, last_batch=last_batch
            )
        return PackIterable(
            rows, row_length=40, batch_size=1, steps_per_epoch=steps, last_batch=last_batch
        )

    def notes(caught):
        return [w for w in caught if "ran out of samples" in str(w.message)]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = iter(make(10**6))
        for _ in itertools.islice(batches, full):  # the real batches: no note yet
            pass
        assert notes(caught) == []
        line = inspect.currentframe().f_lineno + 1
        next(batches)  # the first dry step: the note, at the line that asked for the batch
        (note,) = notes(caught)
        for _ in itertools.islice(batches, 50):  # more dry steps: no second note
            pass
        assert len(notes(caught)) == 1
    assert (note.filename, note.lineno) == (__file__, line)
    assert str(note.message).startswith(
        f"this {owner} ran out of samples in epoch 0: after it read 12, {10**6 - full:,} of "
        f"its {10**6:,} steps find no new sample (from step {full + 1} on: "
    )
    assert "steps_per_epoch is too high" in str(note.message)
    hint = "samples per rank / the mean batch size" if kind == "bucket" else "tokens per rank / ("
    assert f"lower it to about the {hint}" in str(note.message)  # (s21: a stream's own unit)

    with warnings.catch_warnings(record=True) as caught:  # a whole pass: one note, its count
        warnings.simplefilter("always")
        assert len(list(make(20))) == 20
    (note,) = notes(caught)
    assert f"after it read 12, {20 - full} of its 20 steps find no new sample" in str(note.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (one dry step under "fill" repeats a batch: 2 of 12 samples, which the fill note
        # counts, s22; this test is about the dry-shard note)
        warnings.filterwarnings("ignore", "last_batch='fill' made this")
        list(make(full))  # exactly enough
        list(make(full + 1))  # one dry step of 7 or 6: under a quarter


def test_a_bucket_that_runs_empty_while_others_hold_samples_is_not_a_dry_shard():
    """A step whose bucket (and the buckets it covers) is empty while longer ones still hold
    samples is padded, but the shard has not run dry: no "ran out" note (a schedule measured on
    other lengths gives the short bucket 3 of 6 steps; the stream holds 2 short samples)."""
    import warnings

    from bucketloader import BucketSpec

    spec = BucketSpec.build([5] * 6 + [30] * 6, boundaries=[10, 40], batch_size=2)
    rows = [[1] * n for n in (5, 30, 30, 5, 30, 30, 30, 30, 30, 30, 30, 30)]
    stream = BucketIterable(rows, boundaries=spec, batch_size=2, steps_per_epoch=6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        real = [len(b) for b in stream]
    assert real == [2, 2, 2, 1, 2, 1]  # (two short-bucket steps of one stand-in: padding)
    assert [str(w.message) for w in caught if "ran out of samples" in str(w.message)] == []


def test_an_edited_stream_state_past_the_epochs_steps_is_refused():
    import json

    rows = [[1] * n for n in (5, 17, 3, 40, 22, 9, 9, 31, 12, 8, 27, 6)]
    live = BucketIterable(rows, boundaries=[10, 40], batch_size=2, steps_per_epoch=3)
    next(iter(live))
    state = json.loads(json.dumps(live.state_dict()))
    stream = BucketIterable(rows, boundaries=[10, 40], batch_size=2, steps_per_epoch=3)
    with pytest.raises(
        ValueError, match=r"^state\['batches'\]=1000000 is more than the epoch's steps_per_epoch=3"
    ):
        stream.load_state_dict({**state, "batches": 10**6})
    stream.load_state_dict(state)  # the unedited state still loads
    assert len(list(stream)) == 2


def test_sample_weights_as_strings_or_past_the_float_sum_are_handled():
    """WeightedBucketSampler read ["1", ...] as numbers, and weights of 1e308 (finite, whose sum
    is not) as "all 0" with numpy's overflow warning."""
    import decimal
    import fractions
    import warnings

    from bucketloader.weighted import WeightedBucketSampler

    lengths = [5, 17, 3, 40, 22, 9, 9, 31, 12, 8, 27, 6]

    def make(weights):
        return WeightedBucketSampler(lengths, weights, num_buckets=2, batch_size=2, seed=0)

    with pytest.raises(
        TypeError,
        match=r"^weights must be numbers, got strings \(e\.g\. '1' at index 0\); convert them "
        r"first, e\.g\. weights = \[float\(w\) for w in weights\]$",
    ):
        make(["1"] * len(lengths))
    with pytest.raises(TypeError, match=r"got strings \(e\.g\. '2' at index 11\)"):
        make([1.0] * 11 + ["2"])  # (numpy reads the mix as strings: '1.0' is no string given)
    with pytest.raises(TypeError, match=r"got strings \(e\.g\. b'1' at index 3\)"):
        make(np.array([1.0, 1.0, 1.0, b"1"] + [1.0] * 8, dtype=object))
    # numbers of any kind still pass, as they did: an object column (pandas' object dtype),
    # Fraction, Decimal, bools
    expect = [list(b) for b in make([1.0] * len(lengths))]
    for weights in (
        np.array([1.0] * len(lengths), dtype=object),
        [fractions.Fraction(1, 2)] * len(lengths),
        [decimal.Decimal("0.5")] * len(lengths),
        [True] * len(lengths),
    ):
        assert [list(b) for b in make(weights)] == expect
    mine = np.ones(len(lengths))
    make(mine)
    mine[0] = 2.0  # the caller's array stays writable (it was made read-only)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        huge = make([1e308] * 6 + [2e307] * 6)
    same = make([10.0] * 6 + [2.0] * 6)  # the same proportions: the same draws
    assert [list(b) for b in huge] == [list(b) for b in same]


def test_a_bucketed_column_named_twice_is_refused():
    datasets = pytest.importorskip("datasets")
    from bucketloader import hf

    ds = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in (3, 9, 4, 8)]})
    with pytest.raises(
        ValueError, match=r"^column names \['input_ids'\] more than once, got column=\['input_ids"
    ):
        hf.for_text(ds, ["input_ids", "input_ids"], pad_token_id=0, batch_size=2)


def test_arrow_rows_names_a_missing_column_and_a_bad_index(tmp_path):
    """ArrowRows(path, columns=['nope'])[0] was Python's "zip() argument 2 is shorter than
    argument 1" (a table: pyarrow's KeyError), columns='ids' its letters, rows['a'] int()'s
    message and rows[1.0] a row."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bucketloader.stream.arrow import ArrowRows

    table = pa.table({"ids": [[1], [2, 3], [4, 5, 6]], "s": [{"a": [1], "b": 2}] * 3})
    path = tmp_path / "d.parquet"
    pq.write_table(table, path)
    for data, where in [(path, str(path)), (table, "the table")]:
        with pytest.raises(
            MissingKeyError,
            match=rf"^columns \['nope'\] not found in {re.escape(where)}; it has columns "
            r"\['ids', 's'\]",
        ):
            ArrowRows(data, columns=["ids", "nope"])
        with pytest.raises(TypeError, match=r"^columns must be a list of column names, got "):
            ArrowRows(data, columns="ids")
        rows = ArrowRows(data, columns=["ids"])
        for bad in ("a", 1.0, None):
            with pytest.raises(TypeError, match=r"^ArrowRows indices must be integers or slices"):
                rows[bad]
        assert rows[np.int64(1)] == rows[-2] == {"ids": [2, 3]}
        assert rows[1:] == [{"ids": [2, 3]}, {"ids": [4, 5, 6]}]
    assert ArrowRows(path, columns=["s.a"])[0] == {"s": {"a": [1]}}  # (a struct field of a file)


def test_eval_sampler_wrap_refuses_a_dataset_of_another_size():
    """EvalSampler.wrap(a shorter dataset) was accepted; the DataLoader then failed with the
    list's bare IndexError (dataloader() already refused it)."""
    from bucketloader import EvalSampler

    sampler = EvalSampler([5, 17, 3, 40, 22, 9], num_buckets=2, batch_size=2)
    with pytest.raises(
        ValueError,
        match=r"^dataset has 2 samples but this EvalSampler was planned on lengths for 6",
    ):
        sampler.wrap([torch.ones(5), torch.ones(17)])
    assert len(sampler.wrap([torch.ones(n) for n in (5, 17, 3, 40, 22, 9)])) == 6


def test_plan_epoch_of_raw_lengths_names_the_spec_it_needs():
    """plan_epoch([5, 17, 3]) was "'list' object has no attribute 'counts'"."""
    from bucketloader.plan import BucketSpec, plan_epoch

    with pytest.raises(
        TypeError, match=r"^spec must be a BucketSpec, got list; build one from the lengths: "
    ):
        plan_epoch([5, 17, 3, 40])
    spec = BucketSpec.build([5, 17, 3, 40], num_buckets=2, batch_size=2)
    assert len(plan_epoch(spec, shuffle=False)) == 2


@pytest.mark.parametrize(
    ("groups", "kind", "found"),
    [
        (["a"] * 3 + ["b"] * 3, TypeError, r"groups must hold integer group ids, got strings .*"),
        ([-1] * 6, ValueError, r"groups must be non-negative, got -1 at index 0"),
        ([0.5] * 6, ValueError, r"groups must be whole numbers, got 0\.5 at index 0"),
    ],
)
def test_bad_group_ids_name_the_fix_for_group_ids_not_for_lengths(groups, kind, found):
    """groups=['a', ...] was told "lengths are numbers: for texts, count their tokens"."""
    with pytest.raises(kind, match=rf"^{found}; a group id is an int >= 0 per sample") as info:
        BucketSampler([5, 17, 3, 40, 22, 9], num_buckets=2, batch_size=2, groups=groups)
    assert "token" not in str(info.value) and "length" not in str(info.value)
    ids = np.unique(np.array(groups).astype(str), return_inverse=True)[1]  # (the fix it names)
    BucketSampler([5, 17, 3, 40, 22, 9], num_buckets=2, batch_size=2, groups=ids)


def test_a_sampler_given_as_lengths_names_its_lengths():
    """s14: analyze(sampler) and PackSampler(another_sampler, ...) said "lengths must be 1-D (one
    length per sample), got an array of shape ()" (numpy read the sampler as one object)."""
    from bucketloader import analyze
    from bucketloader.pack import PackSampler

    pack = PackSampler([5, 17, 3, 40], row_length=64, batch_size=1)
    bucket = BucketSampler([5, 17, 3, 40], num_buckets=2, batch_size=2)
    for call, owner in [
        (lambda: analyze(pack), "PackSampler"),
        (lambda: PackSampler(pack, row_length=64, batch_size=1), "PackSampler"),
        (lambda: BucketSampler(bucket, num_buckets=2, batch_size=2), "BucketSampler"),
    ]:
        with pytest.raises(TypeError, match=rf"got a {owner}; pass its lengths \(lengths=<the "):
            call()

    class Sized:  # (no lengths attribute: no hint)
        def __len__(self):
            return 4

    with pytest.raises(TypeError, match=r"got a Sized$"):
        BucketSampler(Sized(), num_buckets=2, batch_size=2)
    assert analyze(pack.lengths).histogram.num_samples == 4  # (the fix it names)
