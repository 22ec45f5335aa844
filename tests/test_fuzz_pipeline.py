"""Fuzzing the batch pipeline (issue 12): BucketSpec.build / BucketSampler, PadCollator and
BucketIterable, with the plan invariants checked on every valid result.

Invariants: under ``last_batch="pad"`` every sample is yielded exactly once on one rank (and at
least once over several, with equal ``len`` on every rank); every batch collates to a shape
listed in ``.shapes`` before the first batch; collated tensors equal an independent padding of
the samples in their promoted dtype, with no value lost.

Inputs still mishandled by plan/, sampler.py or stream/ (fixed on the plan branch, issue 12)
are kept out of the properties by :func:`plan_bug` and pinned by the ``xfail(strict=True)``
tests at the end, which flip to failures (to be unmarked) when the fix merges.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from fuzzing import (
    FUZZ,
    call,
    lengths_inputs,
    mostly,
    odd_ints,
    reference_lengths,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bucketloader import BucketIterable, BucketSampler, BucketSpec
from bucketloader.stream import bucketize

pytestmark = pytest.mark.timeout(120)

PLAN_BRANCH = "issue 12: fixed on the plan branch"
SPEC_NAMES = [
    "lengths",
    "num_buckets",
    "strategy",
    "boundaries",
    "batch_size",
    "max_tokens",
    "last_batch",
    "num_replicas",
    "rank",
    "seed",
    "shuffle",
    "batch_multiple_of",
    "size",
    "max_shapes",
    "groups",
]
#: Budgets above this are the plan branch's to reject ("impossible budgets").
HUGE_BUDGET = 2**40


def plan_bug(lengths, ref, options) -> str | None:
    """Why an input is still mishandled outside this branch's files (None: it is not)."""
    if isinstance(lengths, torch.Tensor) and (lengths.requires_grad or lengths.dtype in (
        torch.bfloat16, torch.float16)):  # fmt: skip
        return "plan/spec.py parse_lengths calls np.asarray on the tensor"
    if ref is not None and 0 in ref and options.get("max_tokens") is not None:
        return "zero-length rows under max_tokens"
    for key in ("batch_size", "max_tokens"):
        value = options.get(key)
        if isinstance(value, int) and value > HUGE_BUDGET:
            return "impossible budgets accepted"
    return None


@st.composite
def spec_options(draw):
    options = {}
    budget = draw(mostly(st.sampled_from(["batch_size", "max_tokens"]),
                         st.sampled_from(["both", "none"])))  # fmt: skip
    if budget in ("batch_size", "both"):
        options["batch_size"] = draw(mostly(st.integers(1, 9), odd_ints()))
    if budget in ("max_tokens", "both"):
        options["max_tokens"] = draw(mostly(st.integers(300, 3000), odd_ints()))
    if draw(st.booleans()):
        options["num_buckets"] = draw(mostly(st.integers(1, 6), odd_ints()))
    if draw(st.integers(0, 3)) == 0:
        options["strategy"] = draw(mostly(st.sampled_from(["optimal", "percentile", "linear"]),
                                          st.sampled_from(["x", 3, None])))  # fmt: skip
    options["last_batch"] = draw(
        mostly(st.sampled_from(["pad", "pad", "fill", "drop", "keep"]),
               st.sampled_from(["", 0, None, "PAD"]))
    )  # fmt: skip
    if draw(st.integers(0, 4)) == 0:
        options["batch_multiple_of"] = draw(mostly(st.integers(1, 4), odd_ints()))
    return options


def _valid_int(value, minimum=1) -> bool:
    return (
        isinstance(value, (int, np.integer))
        and not isinstance(value, (bool, np.bool_))
        and (value >= minimum)
    )


# --- BucketSampler: any lengths, any options --------------------------------------------------
@settings(FUZZ, max_examples=300)
@given(
    lengths=lengths_inputs(max_size=30),
    options=spec_options(),
    replicas=mostly(st.integers(1, 3), st.sampled_from([0, -1, True, 2.5])),
    shuffle=mostly(st.booleans(), st.sampled_from([1, None])),
    seed=mostly(st.integers(0, 2**64), st.sampled_from([-1, 2**70 * 1.0, "0"])),
)
def test_sampler_any_input_keeps_the_plan_promises(lengths, options, replicas, shuffle, seed):
    ref = reference_lengths(lengths)
    assume(plan_bug(lengths, ref, options) is None)
    ranks = range(replicas) if _valid_int(replicas) else [0]
    made = [
        call(
            lambda r=r: BucketSampler(
                lengths, shuffle=shuffle, seed=seed, num_replicas=replicas, rank=r, **options
            ),
            SPEC_NAMES,
        )
        for r in ranks
    ]
    if not made[0].ok:
        assert all(not m.ok for m in made)
        return
    assert ref is not None, f"accepted invalid lengths {lengths!r}"
    samplers = [m.value for m in made]
    lengths_np = np.array(ref)
    seen = []
    for sampler in samplers:
        shapes = set(sampler.shapes)  # the promise, listed before the first batch
        collate = sampler.collator()
        batches = list(sampler)
        assert len(batches) == len(sampler) == len(samplers[0])
        for batch in batches:
            assert batch and all(0 <= i < len(ref) for i in batch)
            seen.extend(batch)
            if max(ref) > 4096:  # a planned shape too large to allocate: check it arithmetically
                b, length = collate.shape_table.target(lengths_np[batch])[:2]
                assert len(batch) <= b and max(lengths_np[batch]) <= length
                assert any(s[1] == length for s in shapes)
                continue
            out = collate([torch.zeros(int(lengths_np[i])) for i in batch])
            assert tuple(out["inputs"].shape) in shapes
            assert out["lengths"][out["sample_mask"]].tolist() == lengths_np[batch].tolist()
    if sampler.spec.last_batch in ("pad", "keep"):
        assert set(seen) == set(range(len(ref)))  # nothing dropped
        if len(samplers) == 1:
            assert sorted(seen) == list(range(len(ref)))  # exactly once


@settings(FUZZ, max_examples=100)
@given(
    src=st.lists(st.integers(1, 40), min_size=1, max_size=20),
    data=st.data(),
    size=st.sampled_from(["sum", "prod", "max", None, 3]),
    max_shapes=st.one_of(st.none(), st.integers(1, 5), st.sampled_from([0, -1, 2.5, True])),
)
def test_two_input_specs(src, data, size, max_shapes):
    tgt = data.draw(st.lists(st.integers(1, 40), min_size=len(src), max_size=len(src)))
    if data.draw(st.booleans()):
        tgt = tgt[:-1] or [1, 2]  # a length mismatch
    got = call(
        lambda: BucketSpec.build(
            {"src": src, "tgt": tgt}, num_buckets=2, max_tokens=200, size=size,
            max_shapes=max_shapes,
        ),
        SPEC_NAMES,
    )  # fmt: skip
    if got.ok:
        spec = got.value
        assert len(src) == len(tgt)
        table = spec.shape_table()
        for s in spec.cells.shapes:
            assert tuple(s) in table.shapes
        if max_shapes is not None:
            assert len(table.shapes) <= max_shapes


# --- PadCollator: samples of any dtype and shape -----------------------------------------------
DTYPES = [
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
]  # fmt: skip


@st.composite
def one_sample(draw, length):
    kind = draw(st.sampled_from(["tensor", "tensor", "numpy", "list", "odd"]))
    if kind == "odd":
        return draw(
            st.sampled_from(
                [
                    torch.zeros(length, 2),
                    torch.tensor(3.0),
                    np.array(["a"] * length),
                    np.array([None] * length, dtype=object),
                    np.arange(length, dtype=np.uint64),
                    np.arange(length).astype(">i4"),
                    torch.arange(length + 1),  # disagrees with the declared length
                    [[1]] * length,
                    ["a"] * length,
                    [None] * length,
                    "abc",
                    None,
                    {"x": [1]},
                    [2**70] * length,
                    [1.5, 2] * (length // 2) + [3] * (length % 2),
                    [True] * length,
                    torch.arange(length, dtype=torch.float32).requires_grad_(),
                ]
            )
        )
    values = draw(
        st.lists(
            st.one_of(st.integers(-300, 300), st.floats(-1e3, 1e3, allow_nan=False), st.booleans()),
            min_size=length,
            max_size=length,
        )
    )
    if kind == "list":
        return values
    dtype = draw(st.sampled_from(DTYPES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overflow on casting to narrow dtypes is the point
        t = torch.tensor(values, dtype=torch.float64).to(dtype)
    return t if kind == "tensor" else _to_numpy(t)


def _to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def _as_tensor(sample, list_dtype):
    if isinstance(sample, torch.Tensor):
        return sample
    if isinstance(sample, np.ndarray):
        return torch.from_numpy(np.asarray(sample, dtype=sample.dtype.newbyteorder("=")))
    return torch.tensor(sample, dtype=list_dtype)


def _list_dtype(samples):
    """torch.tensor's rule over the whole batch: any float -> float32, only bools -> bool,
    else int64 (also for a batch of empty lists: token ids)."""
    flat = [v for s in samples if isinstance(s, list) for v in s]
    if any(isinstance(v, float) for v in flat):
        return torch.float32
    if flat and all(isinstance(v, bool) for v in flat):
        return torch.bool
    return torch.int64


def _reference(samples, rows, size, side, pad):
    """Pad with torch's own promotion rules, independently of the collator's kernels."""
    list_dtype = _list_dtype(samples)
    tensors = [_as_tensor(s, list_dtype) for s in samples]
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    out = torch.full((rows, size), pad, dtype=dtype)
    for i, t in enumerate(tensors):
        n = t.shape[0]
        if side == "right":
            out[i, :n] = t.detach()
        else:
            out[i, size - n :] = t.detach()
    return out


def _as_python(values):
    return [complex(v) if isinstance(v, complex) else v for v in values]


@settings(FUZZ, max_examples=400)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    side=st.sampled_from(["right", "left"]),
    pad=st.sampled_from([0, -1, 1, 0.5, 300, True]),
)
def test_collator_any_samples_pads_exactly_or_says_why(data, lengths, side, pad):
    sampler = BucketSampler(lengths, num_buckets=2, batch_size=len(lengths))
    collate = sampler.collator(pad_value=pad, side=side)
    samples = [data.draw(one_sample(n)) for n in lengths]
    got = call(lambda: collate(samples), ["field", "sample", "samples", "pad value", "batch"])
    if not got.ok:
        return
    out = got.value
    x = out["inputs"]
    assert tuple(x.shape) in sampler.shapes
    rows, size = x.shape
    real = out["sample_mask"]
    assert real.sum() == len(samples) and out["lengths"][real].tolist() == lengths
    want = _reference(samples, rows, size, side, pad)
    assert x.dtype == want.dtype
    assert torch.equal(x.detach(), want), "the output differs from the reference padding"
    for i, s in enumerate(samples):  # no value lost: each sample reads back as given
        n = lengths[i]
        row = x[i, :n] if side == "right" else x[i, size - n :]
        given_values = _as_tensor(s, _list_dtype(samples)).detach()
        assert torch.equal(row.detach().to(given_values.dtype), given_values) or (
            isinstance(s, list) and any(isinstance(v, float) for v in s)  # floats -> float32
        )
    mask = out["attention_mask"]
    assert mask.shape == x.shape and mask.sum(1)[: len(samples)].tolist() == lengths


@st.composite
def dict_sample(draw, length):
    ids = draw(one_sample(length))
    sample = {"ids": ids, "label": draw(st.sampled_from([0, 1, 2.5, "a", None, [1, 2],
                                                          torch.tensor(1)]))}  # fmt: skip
    change = draw(st.sampled_from(["none"] * 6 + ["drop ids", "extra", "nest", "rename"]))
    if change == "drop ids":
        del sample["ids"]
    elif change == "extra":
        sample["more"] = draw(st.sampled_from([torch.zeros(length), [1] * length, "x"]))
    elif change == "nest":
        sample["ids"] = {"inner": ids}
    elif change == "rename":
        sample = {"lengths": ids}
    return sample


@settings(FUZZ, max_examples=150)
@given(
    data=st.data(),
    lengths=st.lists(st.integers(0, 12), min_size=1, max_size=5),
    kind=st.sampled_from(["dict", "tuple"]),
)
def test_collator_dict_and_tuple_samples(data, lengths, kind):
    sampler = BucketSampler(lengths, num_buckets=2, batch_size=len(lengths))
    collate = sampler.collator(pad_value=-1)
    samples = [data.draw(dict_sample(n)) for n in lengths]
    if kind == "tuple":
        samples = [tuple(s.values()) for s in samples]
    got = call(lambda: collate(samples), ["field", "sample", "samples", "key", "pad value"])
    if not got.ok:
        return
    out = got.value
    key = "ids" if kind == "dict" else 0
    x = out[key]
    assert tuple(x.shape) in sampler.shapes
    assert out["lengths"][out["sample_mask"]].tolist() == lengths
    want = _reference([s[key] for s in samples], *x.shape, "right", -1)
    assert x.dtype == want.dtype and torch.equal(x.detach(), want)


# --- BucketIterable: streams -----------------------------------------------------------------
@settings(FUZZ, max_examples=250)
@given(
    items=st.lists(st.integers(0, 50), max_size=40),
    boundaries=st.one_of(
        st.lists(st.integers(1, 60), min_size=1, max_size=4).map(lambda b: sorted(set(b))),
        st.sampled_from([[], [5, 5], [9, 4], [-1], [2.5], [2**70], None, "10"]),
    ),
    budget=st.sampled_from(
        [
            ("batch_size", 3),
            ("max_tokens", 60),
            ("batch_size", 0),
            ("max_tokens", 1),
            ("batch_size", None),
            ("both", 3),
        ]
    ),
    last_batch=st.sampled_from(["pad", "fill", "drop", "keep", "", None]),
    overflow=st.sampled_from(["error", "skip", "truncate", "x"]),
    shuffle_buffer=st.one_of(st.integers(0, 8), st.sampled_from([-1, 2.5])),
)
def test_stream_any_input(items, boundaries, budget, last_batch, overflow, shuffle_buffer):
    key, value = budget
    sizes = {"batch_size": value, "max_tokens": value} if key == "both" else {key: value}
    names = ["boundaries", "batch_size", "max_tokens", "last_batch", "overflow", "shuffle_buffer",
             "length", "source"]  # fmt: skip
    samples = [[7] * n for n in items]
    made = call(
        lambda: BucketIterable(
            samples, length_fn=len, boundaries=boundaries, last_batch=last_batch,
            overflow=overflow, shuffle_buffer=shuffle_buffer, **sizes,
        ),
        names,
    )  # fmt: skip
    if not made.ok:
        return
    stream = made.value
    shapes = set(stream.shapes)
    got = call(lambda: list(stream), names)
    if not got.ok:  # only a sample longer than the last boundary, under overflow="error"
        assert overflow == "error" and max(items) > max(boundaries), got.error
        return
    emitted = 0
    for batch in got.value:
        assert batch
        longest = max(len(s) for s in batch)
        assert any(len(batch) <= s[0] and longest <= s[1] for s in shapes)
        emitted += len(batch)
    if last_batch in ("pad", "keep") and overflow == "error":
        assert emitted == len(items)


# --- the plan branch's items: pinned here until its fixes merge ------------------------------
def _zero_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 400, size=2000)
    lengths[:300] = 0
    return lengths


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: zero-length rows under max_tokens")
def test_plan_zero_length_rows_get_a_sane_batch_size():
    sampler = BucketSampler(_zero_lengths(), num_buckets=8, max_tokens=16384, strategy="percentile")
    assert (16384, 0) not in sampler.shapes


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: int64 size overflow of several inputs")
@pytest.mark.parametrize(
    ("lengths", "size"),
    [
        ({"a": [2**62 - 1] * 4, "b": [2**62 - 1] * 4, "c": [2**62 - 1] * 4}, "sum"),
        ({"a": [2**32] * 4, "b": [2**32] * 4}, "prod"),
    ],
)
def test_plan_padded_sizes_never_overflow(lengths, size):
    with pytest.raises(ValueError, match="max_tokens"):
        BucketSampler(lengths, num_buckets=1, max_tokens=10, size=size)


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: impossible budgets accepted")
@pytest.mark.parametrize(
    "budget", [{"batch_size": 2**62}, {"max_tokens": 2**63 - 1}, {"max_tokens": 2**70}]
)  # (2**70: an OverflowError from plan/cells.py; recommend_num_buckets(max_tokens=) too)
def test_plan_impossible_budgets_are_rejected_at_construction(budget):
    with pytest.raises(ValueError, match=r"batch_size|max_tokens"):
        BucketSampler([3, 4], num_buckets=1, **budget)


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: silent drops under last_batch='drop'")
def test_plan_warns_when_drop_loses_data():
    lengths = np.random.default_rng(0).integers(1, 300, size=3001)
    with pytest.warns(UserWarning, match=r"\d"):
        BucketSampler(
            lengths, num_buckets=8, batch_size=32, strategy="percentile", last_batch="drop",
            num_replicas=2, rank=0,
        )  # fmt: skip


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: bucketize validates at the call")
def test_plan_bucketize_rejects_a_non_iterable_source_at_the_call():
    with pytest.raises(TypeError, match="source"):
        bucketize(5, boundaries=[4], batch_size=2)


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: load_state_dict validates its input")
@pytest.mark.parametrize("state", [{"format": 1}, {"format": 1, "config": {}, "epoch": "x"}])
def test_plan_stream_load_state_dict_rejects_garbage(state):
    stream = BucketIterable([[1] * 3, [1] * 4], length_fn=len, boundaries=[4], batch_size=2)
    with pytest.raises(ValueError, match="state"):
        stream.load_state_dict(state)


@pytest.mark.xfail(strict=True, reason=f"{PLAN_BRANCH}: plan/spec.py parse_lengths np.asarray")
@pytest.mark.parametrize(
    "lengths",
    [
        torch.tensor([3.0, 4.0], requires_grad=True),
        torch.tensor([3.0, 4.0], dtype=torch.bfloat16),
    ],
)
def test_plan_sampler_takes_any_tensor_compute_boundaries_takes(lengths):
    assert BucketSampler(lengths, num_buckets=1, batch_size=1).shapes == [(1, 4)]
