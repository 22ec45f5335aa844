"""The small-batch paths of the padding kernels agree with the general ones (issue 26)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader.collate import _pad


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=20),
    extra=st.integers(0, 5),
    side=st.sampled_from(["right", "left"]),
)
def test_small_mask_is_the_run_pattern_mask(lengths, extra, side):
    size = max(lengths) + extra
    lens = np.array(lengths)
    got = _pad.sequence_mask(lens, size, len(lengths), side)  # small: one compare
    ar = np.arange(size)
    want = ar < lens[:, None] if side == "right" else ar >= size - lens[:, None]
    assert got.dtype == np.bool_ and got.shape == want.shape and (got == want).all()


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 30), min_size=1, max_size=8),
    pad_rows=st.integers(0, 3),
    side=st.sampled_from(["right", "left"]),
    kind=st.sampled_from(["torch", "numpy", "float"]),
)
def test_few_rows_take_the_interleaved_path_and_match_np_pad(lengths, pad_rows, side, kind):
    size = max(lengths) + 1
    rows = len(lengths) + pad_rows
    if kind == "numpy":
        values = [np.arange(1, n + 1, dtype=np.int32) for n in lengths]
    else:
        dtype = torch.float32 if kind == "float" else torch.int64
        values = [torch.arange(1, n + 1, dtype=dtype) for n in lengths]
    lens = np.zeros(rows, dtype=np.int64)
    lens[: len(lengths)] = lengths
    mask = _pad.sequence_mask(lens, size, rows, side)
    out = _pad.pad_1d(values, list(lengths), size, rows, side, -7, "x", mask, {})
    want = np.full((rows, size), -7, dtype=np.float64)
    for i, n in enumerate(lengths):
        row = np.arange(1, n + 1)
        if side == "right":
            want[i, :n] = row
        else:
            want[i, size - n :] = row
    assert tuple(out.shape) == (rows, size)
    assert (out.numpy().astype(np.float64) == want).all()


def test_an_8_row_token_batch_equals_pad_sequence_plus_masks():
    lengths = np.array([5, 9, 7, 8, 9, 6, 9, 8] * 4)
    sampler = BucketSampler(lengths, num_buckets=1, batch_size=8, shuffle=False)
    collate = sampler.collator()
    for batch in sampler:
        xs = [torch.arange(1, int(lengths[i]) + 1) for i in batch]
        out = collate(xs)
        ref = torch.nn.utils.rnn.pad_sequence(xs, batch_first=True)
        assert torch.equal(out["inputs"][:, : ref.shape[1]], ref)
        assert torch.equal(out["attention_mask"], out["inputs"] != 0)
        assert out["lengths"].tolist() == [int(lengths[i]) for i in batch]


def test_short_batches_keep_gradients_and_fill_their_padding_rows():
    xs = [torch.ones(n, requires_grad=True) for n in (3, 5)]
    lens = np.array([3, 5, 0, 0, 0])
    mask = _pad.sequence_mask(lens, 6, 5, "right")
    out = _pad.pad_1d(xs, [3, 5], 6, 5, "right", 0.0, "x", mask, {})
    assert out.requires_grad and tuple(out.shape) == (5, 6)
    out.sum().backward()
    assert xs[0].grad.tolist() == [1.0] * 3
    ints = [torch.arange(1, n + 1) for n in (3, 5)]
    out = _pad.pad_1d(
        ints, [3, 5], 600, 5, "right", -1, "x", _pad.sequence_mask(lens, 600, 5, "right"), {}
    )
    assert (
        out[2:].eq(-1).all() and out[1, :5].tolist() == [1, 2, 3, 4, 5] and out[1, 5:].eq(-1).all()
    )


def test_a_mixed_batch_neither_poisons_the_cell_cache_nor_passes_without_promotion():
    lengths = np.array([5] * 50 + [100] * 50)
    sampler = BucketSampler(lengths, batch_size=4, boundaries=[16, 128])  # no promotion
    assert sampler.promotion is None and not sampler.shape_table.promoted
    collate = sampler.collator()
    for order in ([100, 5], [5, 100], [100, 5]):  # either order, before and after caching
        with pytest.raises(ValueError, match="different buckets"):
            collate([torch.ones(n, dtype=torch.long) for n in order])
    collate([torch.ones(100, dtype=torch.long)] * 4)  # caches the long cell
    out = collate([torch.ones(5, dtype=torch.long)] * 4)
    assert tuple(out["inputs"].shape) == (4, 16)


def test_promoted_batches_leave_each_length_its_own_cell():
    # a short bucket of two lengths next to a long tail: promoted batches mix 7 and 8 with
    # longer cells; a later batch of only 7s and 8s must still take the (B, 8) cell
    rng = np.random.default_rng(11)
    short = rng.choice([7, 8], int(rng.integers(20, 300)))
    lengths = np.concatenate([short, rng.integers(9, 300, 3000)])
    sampler = BucketSampler(
        lengths,
        max_tokens=2048,
        boundaries=[8, 64, 128, 300],
        last_batch="pad",
        num_replicas=4,
        rank=0,
        seed=11,
    )
    assert sampler.promotion is not None and sampler.shape_table.promoted
    collate, table = sampler.collator(), sampler.shape_table
    for batch in sampler:
        out = collate([torch.ones(int(lengths[i]), dtype=torch.long) for i in batch])
        assert tuple(out["inputs"].shape) == table.target(lengths[batch])


@pytest.mark.parametrize("least", [0, 1 << 40])  # every output numpy's / torch's
@pytest.mark.parametrize("frames", [0, 3])
def test_outputs_own_fresh_memory_batch_after_batch(monkeypatch, least, frames):
    """Each batch's outputs (short path, lean path, a padded last batch; NOTE [ Where a large
    batch is written ]) share memory with no sample, no other output and no earlier batch: an
    in-place edit of one batch changes nothing else."""
    from bucketloader.collate import collator

    monkeypatch.setattr(collator, "NUMPY_MIN_BYTES", least)
    lengths = np.array([300, 310, 320, 330, 290, 305, 315, 325, 299])
    sampler = BucketSampler(lengths, num_buckets=1, batch_size=4, shuffle=False)
    collate = sampler.collator()
    big = torch.randn(int(lengths.sum()) * max(frames, 1))  # samples: views of one tensor
    starts = np.concatenate([[0], np.cumsum(lengths)]) * max(frames, 1)
    shape = (lambda n: (n, frames)) if frames else (lambda n: (n,))

    def span(t):
        s = t.untyped_storage()
        return s.data_ptr(), s.data_ptr() + s.nbytes()

    kept, seen = [], []
    for _ in range(2):
        for idx in sampler:
            xs = [big[starts[i] : starts[i + 1]].view(shape(int(lengths[i]))) for i in idx]
            out = collate(xs)
            kept.append((out, {k: v.clone() for k, v in out.items()}))
            for t in out.values():
                lo, hi = span(t)
                assert all(hi <= a or b <= lo for a, b in seen), "an output shares memory"
                seen.append((lo, hi))
    lo, hi = span(big)
    assert all(b <= lo or hi <= a for a, b in seen), "an output shares the samples' memory"
    before = big.clone()
    for out, _ in kept[::2]:
        for t in out.values():
            t.logical_not_() if t.dtype == torch.bool else t.add_(1)
    assert torch.equal(big, before)
    for out, copy in kept[1::2]:
        assert all(torch.equal(out[k], copy[k]) for k in copy)


def _pin_batches():
    """Batches of every output route: audio rows allocated by numpy (``least``=0) or torch,
    ``(T, F)`` features, and dict samples with a fixed-size label and a string."""
    lengths = np.array([20000, 19000, 18000, 17000, 300, 310, 320, 330])
    makers = [  # (lengths // per: frames of 100 samples, the sample)
        (1, lambda i, n: torch.full((n,), float(i))),
        (100, lambda i, n: torch.full((n, 80), float(i))),
        (1, lambda i, n: {"x": torch.full((n,), i), "label": i, "name": f"s{i}"}),
    ]
    for per, make in makers:
        sampler = BucketSampler(lengths // per, num_buckets=2, batch_size=4, shuffle=False)
        data = [make(i, int(n)) for i, n in enumerate(lengths // per)]
        yield sampler, data, sampler.collator()


@pytest.mark.parametrize("least", [0, 1 << 40])
def test_outputs_are_plain_tensors_that_pin_memory_walks(monkeypatch, least):
    """``DataLoader(pin_memory=True)`` runs ``torch.utils.data._utils.pin_memory.pin_memory``
    on each batch: a plain dict whose tensors (numpy-backed ones included) are plain
    ``torch.Tensor`` objects, each pinned by ``Tensor.pin_memory()`` (a copy; without CUDA that
    raises, so here it is a recorded clone); other values (a list of strings) pass as they are."""
    from torch.utils.data._utils.pin_memory import pin_memory

    from bucketloader.collate import collator

    monkeypatch.setattr(collator, "NUMPY_MIN_BYTES", least)
    pinned = []

    def fake_pin(self, device=None):
        pinned.append(self)
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    for sampler, data, collate in _pin_batches():
        for _ in range(2):  # the second epoch takes the short paths
            for idx in sampler:
                out = collate([data[i] for i in idx])
                assert type(out) is dict
                tensors = [v for v in out.values() if isinstance(v, torch.Tensor)]
                assert {k for k, v in out.items() if not isinstance(v, torch.Tensor)} <= {"name"}
                assert all(type(v) is torch.Tensor for v in tensors)
                del pinned[:]
                got = pin_memory(out)
                assert type(got) is dict and list(got) == list(out)
                assert len(pinned) == len(tensors) and all(
                    any(p is t for p in pinned) for t in tensors
                )
                for key, value in out.items():
                    if isinstance(value, torch.Tensor):
                        assert torch.equal(got[key], value)
                    else:
                        assert got[key] == value


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs CUDA")
@pytest.mark.parametrize("least", [0, 1 << 40])
def test_dataloader_pins_every_output_on_cuda(monkeypatch, least):
    """With CUDA: ``DataLoader(pin_memory=True)`` pins every tensor of every batch, numpy-backed
    outputs included, and the values are the collator's."""
    from bucketloader.collate import collator

    monkeypatch.setattr(collator, "NUMPY_MIN_BYTES", least)
    for sampler, data, collate in _pin_batches():
        loader = torch.utils.data.DataLoader(
            data, batch_sampler=sampler, collate_fn=collate, pin_memory=True
        )
        for idx, out in zip(list(sampler), loader, strict=True):
            want = collate([data[i] for i in idx])
            for key, value in want.items():
                if isinstance(value, torch.Tensor):
                    assert out[key].is_pinned() and torch.equal(out[key], value), key
                else:
                    assert out[key] == value


#: A sample of length ``n`` whose every value is ``v``, per kind of sample.
_FILLED = {
    "audio": lambda n, v: torch.full((n,), v),
    "frames": lambda n, v: torch.full((n, 3), v),
    "numpy": lambda n, v: np.full(n, v, dtype=np.float32),
    "tokens": lambda n, v: torch.full((n,), int(v), dtype=torch.int64),
    "lists": lambda n, v: {"ids": [int(v)] * n},
}


@pytest.mark.parametrize("least", [0, 1 << 40])  # every output numpy's / torch's
@pytest.mark.parametrize("kind", sorted(_FILLED))
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("last_batch", ["drop", "pad"])
def test_padding_never_holds_an_earlier_batchs_values(monkeypatch, least, kind, side, last_batch):
    """Outputs are written into uninitialised memory (NOTE [ Where a large batch is written ]):
    a batch of huge values, dropped, then a shorter batch of the same cell, most likely in the
    memory the first one freed (and memory of that size filled with huge values and freed just
    before): every padding element holds the pad value, the mask and lengths are the short
    batch's, on every path (the first call takes the full path, the next ones the short paths),
    with filler rows (``last_batch="pad"``, a batch of 3 in a 4-row cell) too."""
    from bucketloader.collate import collator

    monkeypatch.setattr(collator, "NUMPY_MIN_BYTES", least)
    monkeypatch.setattr(_pad, "NUMPY_MIN_BYTES", least)
    width = 20_000 if kind != "frames" else 2_000
    lengths = np.array([width] * 8 + [width // 2 + 1] * 8)
    sampler = BucketSampler(lengths, batch_size=4, boundaries=[width], last_batch=last_batch)
    pad = -3
    collate = sampler.collator(pad_value=pad, side=side)
    make = _FILLED[kind]
    big = 7e9 if kind in ("tokens", "lists") else 3e38
    short = [width // 2 + 1, width - 1, width // 2 + 7, width // 2 + 1]
    for rows in (4, 4, 3, 3, 4):
        if last_batch == "drop" and rows < 4:
            continue
        collate([make(width, big) for _ in range(4)])  # huge values everywhere, then freed
        for nbytes in (4 * width * 8, 4 * width * 4 * (3 if kind == "frames" else 1)):
            torch.full((nbytes // 4,), 3e38)  # torch's memory of that size, refilled
            np.full(nbytes // 4, 3e38, dtype=np.float32)  # and numpy's
        sizes = short[:rows]
        out = collate([make(n, 1) for n in sizes])
        key = "ids" if kind == "lists" else "inputs"
        x = out[key].numpy()
        assert x.shape[:2] == (4 if last_batch == "pad" else rows, width)
        want = np.zeros(x.shape[:2], dtype=bool)  # True on real elements
        for i, n in enumerate(sizes):
            want[i, :n] = True
        if side == "left":
            want = want[:, ::-1]
        real = want if x.ndim == 2 else want[:, :, None].repeat(x.shape[2], axis=2)
        assert (x[real] == 1).all() and (x[~real] == pad).all()
        assert out["lengths"].tolist() == sizes + [0] * (x.shape[0] - rows)
        mask = out["attention_mask"].numpy()
        assert (mask[:rows] == want[:rows]).all()
        assert (mask[rows:].sum(axis=1) == 1).all()  # filler rows attend one position
        assert out["sample_mask"].tolist() == [True] * rows + [False] * (x.shape[0] - rows)
