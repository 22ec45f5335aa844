"""Fuzzing the batch pipeline (issue 12): BucketSpec.build / BucketSampler, PadCollator and
BucketIterable, with the plan invariants checked on every valid result.

Invariants: under ``last_batch="pad"`` every sample is yielded exactly once on one rank (and at
least once over several, with equal ``len`` on every rank); every batch collates to a shape
listed in ``.shapes`` before the first batch; collated tensors equal an independent padding of
the samples in their promoted dtype, with no value lost.

The plan items of issue 12 (zero-length rows, exact sizes, impossible budgets, drop warnings,
stream validation, tensors with grad or bf16) are inside the properties and also pinned by the
regression tests at the end.
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
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketIterable, BucketSampler, BucketSpec
from bucketloader.plan import TokenBudget

pytestmark = pytest.mark.timeout(120)

SPEC_NAMES = [
    "lengths",
    "pad_to_multiple_of",
    "min_length",
    "max_length",
    "overflow",
    "multiple_of",
    "max_batch_size",
    "oversize",
    "weights",
    "longest_first",
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
    "size",
    "max_shapes",
    "groups",
]


@st.composite
def spec_options(draw):
    """Any mix of BucketSpec.build options: the batch-size rule (an int, per-bucket sizes, a
    TokenBudget with caps, multiples and an oversize policy), length filters, pad multiples."""
    options = {}
    budget = draw(mostly(st.sampled_from(["batch_size", "max_tokens"]),
                         st.sampled_from(["both", "none"])))  # fmt: skip
    if budget in ("batch_size", "both"):
        options["batch_size"] = draw(
            mostly(
                st.integers(1, 9),
                st.one_of(odd_ints(), st.lists(st.integers(0, 9), max_size=4), st.just({})),
            )
        )
    if budget in ("max_tokens", "both"):
        tokens = draw(mostly(st.integers(300, 3000), odd_ints()))
        if draw(st.integers(0, 2)) == 0 and isinstance(tokens, int) and tokens >= 1:
            tokens = call(
                lambda: TokenBudget(
                    tokens,
                    max_batch_size=draw(
                        st.one_of(st.none(), mostly(st.integers(1, 9), odd_ints()))
                    ),
                    multiple_of=draw(mostly(st.integers(1, 4), odd_ints())),
                    oversize=draw(
                        mostly(
                            st.sampled_from(["error", "single", "drop"]),
                            st.sampled_from(["x", None]),
                        )
                    ),
                ),
                ["max_tokens", "max_batch_size", "multiple_of", "oversize"],
            ).value
        if tokens is not None:
            options["max_tokens"] = tokens
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
        options["pad_to_multiple_of"] = draw(mostly(st.integers(1, 8), odd_ints()))
    if draw(st.integers(0, 3)) == 0:
        options["min_length"] = draw(mostly(st.integers(0, 20), odd_ints()))
    if draw(st.integers(0, 3)) == 0:
        options["max_length"] = draw(mostly(st.integers(1, 200), odd_ints()))
    if draw(st.integers(0, 3)) == 0:
        options["overflow"] = draw(mostly(st.sampled_from(["error", "drop", "truncate"]),
                                          st.sampled_from(["", "cut", None])))  # fmt: skip
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
    spec = samplers[0].spec
    planned = spec.planned_lengths()[:, 0]  # cut to max_length under overflow="truncate"
    kept = set(range(len(ref))) if spec.kept is None else set(spec.kept.tolist())
    seen = []
    for sampler in samplers:
        shapes = set(sampler.shapes)  # the promise, listed before the first batch
        collate = sampler.collator()
        batches = list(sampler)
        assert len(batches) == len(sampler) == len(samplers[0])
        for batch in batches:
            assert batch and all(i in kept for i in batch)  # filtered samples never come
            seen.extend(batch)
            if max(ref) > 4096:  # a planned shape too large to allocate: check it arithmetically
                b, length = collate.shape_table.target(planned[batch])[:2]
                assert len(batch) <= b and max(planned[batch]) <= length
                assert any(s[1] == length for s in shapes)
                continue
            out = collate([torch.zeros(int(lengths_np[i])) for i in batch])
            assert tuple(out["inputs"].shape) in shapes
            assert out["lengths"][out["sample_mask"]].tolist() == planned[batch].tolist()
    if spec.last_batch in ("pad", "keep"):
        assert set(seen) == kept  # nothing the filters kept is dropped
        if len(samplers) == 1:
            assert sorted(seen) == sorted(kept)  # exactly once


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


def _one_dim(value) -> bool:
    """A flat list of numbers, or a 1-D tensor or array: what the reference padding handles."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.ndim == 1
    return isinstance(value, list) and not any(isinstance(v, (list, tuple, dict)) for v in value)


def _check_planned(out, sampler) -> None:
    """Every padded tensor of a collated batch has a planned (B, L) in its dims."""
    shapes = set(sampler.shapes)
    for key, value in out.items():
        if key != "attention_mask" and isinstance(value, torch.Tensor) and value.dim() >= 2:
            assert any((value.shape[0], n) in shapes for n in value.shape[1:]), (key, value.shape)


def _as_python(values):
    return [complex(v) if isinstance(v, complex) else v for v in values]


@pytest.mark.filterwarnings(
    "ignore:this BucketSampler plans .* of length 0"
)  # length-0 samples on purpose
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
    if not all(_one_dim(s) for s in samples):  # nested or multi-dim samples: shapes only
        _check_planned(out, sampler)
        return
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


@pytest.mark.filterwarnings(
    "ignore:this BucketSampler plans .* of length 0"
)  # length-0 samples on purpose
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
    fields = (
        [s.get("ids") for s in samples]
        if kind == "dict"
        else [t[0] if t else None for t in samples]
    )
    if not all(_one_dim(f) for f in fields):  # ids missing, nested or multi-dim: shapes only
        _check_planned(out, sampler)
        return
    x = out[key]
    assert tuple(x.shape) in sampler.shapes
    assert out["lengths"][out["sample_mask"]].tolist() == lengths
    want = _reference([s[key] for s in samples], *x.shape, "right", -1)
    assert x.dtype == want.dtype and torch.equal(x.detach(), want)


# --- BucketIterable: streams -----------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:this BucketIterable keeps samples of length 0")  # (length 0)
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


# --- the plan items of issue 12, each pinned by a regression test -----------------------------
def _zero_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 400, size=2000)
    lengths[:300] = 0
    return lengths


@pytest.mark.filterwarnings(
    "ignore:this BucketSampler plans .* of length 0"
)  # length-0 samples on purpose
def test_plan_zero_length_rows_get_a_sane_batch_size():
    sampler = BucketSampler(_zero_lengths(), num_buckets=8, max_tokens=16384, strategy="percentile")
    assert (16384, 0) not in sampler.shapes


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


@pytest.mark.parametrize(
    "budget", [{"batch_size": 2**62}, {"max_tokens": 2**63 - 1}, {"max_tokens": 2**70}]
)  # (2**70: an OverflowError from plan/cells.py; recommend_num_buckets(max_tokens=) too)
def test_plan_impossible_budgets_are_rejected_at_construction(budget):
    with pytest.raises(ValueError, match=r"batch_size|max_tokens"):
        BucketSampler([3, 4], num_buckets=1, **budget)


def test_plan_warns_when_drop_loses_data():
    lengths = np.random.default_rng(0).integers(1, 300, size=3001)
    with pytest.warns(UserWarning, match=r"\d"):
        BucketSampler(
            lengths, num_buckets=8, batch_size=32, strategy="percentile", last_batch="drop",
            num_replicas=2, rank=0,
        )  # fmt: skip


def test_plan_bucketize_rejects_a_non_iterable_source_at_the_call():
    with pytest.raises(TypeError, match="source"):
        BucketIterable(5, boundaries=[4], batch_size=2)


@pytest.mark.parametrize("state", [{"format": 1}, {"format": 1, "config": {}, "epoch": "x"}])
def test_plan_stream_load_state_dict_rejects_garbage(state):
    stream = BucketIterable([[1] * 3, [1] * 4], length_fn=len, boundaries=[4], batch_size=2)
    with pytest.raises(ValueError, match="state"):
        stream.load_state_dict(state)


@pytest.mark.parametrize(
    "lengths",
    [
        torch.tensor([3.0, 4.0], requires_grad=True),
        torch.tensor([3.0, 4.0], dtype=torch.bfloat16),
    ],
)
def test_plan_sampler_takes_any_tensor_compute_boundaries_takes(lengths):
    assert BucketSampler(lengths, num_buckets=1, batch_size=1).shapes == [(1, 4)]
