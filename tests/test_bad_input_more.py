"""Bad input, second pass (session 3): one clear error naming the argument, the bad value and the
fix; never a bare ``KeyError``, an assert, or a crash inside numpy, torch or PuLP; never a lost
sample without a count and a warning; never a silently wrong resume.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bucketloader import BucketIterable, BucketSampler
from bucketloader._validation import MissingKeyError


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
