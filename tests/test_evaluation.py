"""EvalSampler: every sample exactly once, planned shapes, even ranks, outputs in dataset order."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import load_real
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from bucketloader import BucketSampler
from bucketloader.evaluation import EvalBatch, EvalSampler, restore_order
from bucketloader.plan import BucketSpec


def all_ranks(lengths, reps, **options):
    return [EvalSampler(lengths, num_replicas=reps, rank=r, **options) for r in range(reps)]


def check_plan(samplers, n):
    """The invariants of NOTE [ Evaluation plan ] over simulated ranks."""
    steps = {len(s) for s in samplers}
    assert len(steps) == 1  # equal step counts on every rank
    per_rank = [list(s) for s in samplers]
    seen = []
    table = samplers[0].shape_table
    for step in zip(*per_rank, strict=True):
        cells = {b.cell for b in step}
        assert len(cells) == 1  # the same planned shape at each step on every rank
        shape = table.cells.shapes[cells.pop()]
        assert shape in samplers[0].shapes
        for b in step:
            assert isinstance(b, EvalBatch) and len(b.rows) == shape[0]
            assert b.rows[: len(b)].tolist() == list(b) and (b.rows[len(b) :] == -1).all()
            assert (len(b) == 0) == (b.fill is not None)
            seen.extend(b)
    assert sorted(seen) == list(range(n))  # every sample exactly once: no repeat, no drop
    gathered = samplers[0].gathered_index()
    per_step = [np.concatenate([b.rows for b in step]) for step in zip(*per_rank, strict=True)]
    assert gathered.tolist() == np.concatenate(per_step).tolist()
    for r, s in enumerate(samplers):
        assert s.row_index().tolist() == np.concatenate([b.rows for b in per_rank[r]]).tolist()
    return per_rank


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=80),
    reps=st.integers(1, 5),
    budget=st.one_of(st.integers(1, 6).map(lambda b: {"batch_size": b}), st.just({})),
    grouped=st.booleans(),
    balance=st.booleans(),
)
def test_every_sample_once_even_ranks_planned_shapes_any_lengths(
    lengths, reps, budget, grouped, balance
):
    lengths = np.array(lengths)
    options = budget or {"max_tokens": int(lengths.max()) * 3}
    if grouped:
        options["groups"] = np.arange(lengths.size) % 2
    samplers = all_ranks(lengths, reps, num_buckets=3, balance=balance, **options)
    check_plan(samplers, lengths.size)
    spec = BucketSpec.build(lengths, num_buckets=3, **options)
    batch = samplers[0].spec.cells.batch
    assert (batch <= spec.cells.batch).all()  # balancing never asks for more memory
    steps = -(-spec.counts // (reps * spec.cells.batch))
    assert len(samplers[0]) == int(steps.sum())  # nor more steps
    if balance:  # fewer filler rows than ranks x steps in every cell
        fillers = reps * steps * batch - spec.counts
        assert (fillers < reps * steps).all()
    # outputs gathered step by step, or per rank, come back in dataset order
    values = np.arange(lengths.size) * 10 + 7
    gathered = samplers[0].gathered_index()
    outputs = np.where(gathered >= 0, values[gathered], -1)
    assert samplers[0].restore(outputs).tolist() == values.tolist()
    per_rank = [np.where(s.row_index() >= 0, values[s.row_index()], -1) for s in samplers]
    assert samplers[reps - 1].restore_ranks(per_rank).tolist() == values.tolist()


def test_real_lengths_four_ranks_through_dataloaders_and_restore():
    lengths = load_real("librispeech")[:500] // 400
    samplers = all_ranks(lengths, 4, num_buckets=4, max_tokens=4000)
    check_plan(samplers, lengths.size)
    data = [torch.arange(int(n), dtype=torch.float32) + i for i, n in enumerate(lengths)]
    outs, index = [], []
    for s in samplers:
        loader = s.dataloader(data)
        rank_out, rank_index = [], []
        for batch in loader:
            x, mask, sm, idx = (
                batch[k] for k in ("inputs", "attention_mask", "sample_mask", "index")
            )
            assert tuple(x.shape) in s.shapes
            assert torch.equal(sm, idx >= 0)
            assert batch["lengths"][sm].tolist() == lengths[idx[sm].numpy()].tolist()
            assert mask[sm].sum(1).tolist() == batch["lengths"][sm].tolist()
            if sm.any():  # padded filler rows; a batch with no sample of this rank holds the
                assert (mask[~sm].sum(1) == 1).all()  # a filler attends one position; the
                # fill sample's data of a batch with no sample of this rank: sample_mask only
            rank_out.append(x[:, 0])  # each row's first value is its dataset index
            rank_index.append(idx)
        outs.append(torch.cat(rank_out))
        index.append(torch.cat(rank_index))
        assert torch.equal(index[-1], torch.from_numpy(s.row_index()))
    restored = samplers[0].restore_ranks(outs)
    assert restored.tolist() == list(range(lengths.size))
    # lists of one entry per row (generated text; s25-user: restore_ranks failed inside numpy,
    # "zero-dimensional arrays cannot be concatenated", and restore said "got str")
    texts = [[f"s{int(i)}" for i in o] for o in outs]
    assert samplers[0].restore_ranks(texts) == [f"s{i}" for i in range(lengths.size)]
    flat_texts = [t for rank in texts for t in rank]
    assert restore_order(flat_texts, torch.cat(index), num_samples=500)[:3] == ["s0", "s1", "s2"]
    # ... but a list of outputs as long as the rows is outputs (s25-rev: [logits, None] on 2
    # rows had its two entries swapped, the logits left in batch order)
    two = torch.tensor([1, 0])
    got = restore_order([torch.tensor([10, 11]), None], two)
    assert got[0].tolist() == [11, 10] and got[1] is None
    assert restore_order([{"a": torch.tensor([10, 11])}] * 2, two)[1]["a"].tolist() == [11, 10]
    assert restore_order([{"text": "b"}, {"text": "a"}], two) == [{"text": "a"}, {"text": "b"}]
    # the index carried by the batches restores outputs gathered in any order
    order = torch.randperm(sum(len(o) for o in outs), generator=torch.Generator().manual_seed(0))
    flat_out, flat_index = torch.cat(outs)[order], torch.cat(index)[order]
    assert restore_order(flat_out, flat_index, num_samples=500).tolist() == list(range(500))
    # padding: filler rows are at most R - 1 empty batches plus the cells' partial rows
    pad_rows = sum(int((s.row_index() < 0).sum()) for s in samplers)
    cells = samplers[0].spec.cells.num_cells
    assert pad_rows < cells * 4 * int(samplers[0].spec.cells.batch.max())


def test_a_rank_with_no_sample_loads_filler_data_and_masks_it():
    lengths = [3, 4, 9, 10, 10]
    samplers = all_ranks(lengths, 3, num_buckets=2, batch_size=1)
    empty = [b for b in samplers[2] if len(b) == 0]
    assert len(empty) == 1 and empty[0].fill == 0 and empty[0].rows.tolist() == [-1]
    data = [torch.ones(n) * (i + 1) for i, n in enumerate(lengths)]
    batches = list(samplers[2].dataloader(data))
    filler = next(b for b in batches if not b["sample_mask"].any())
    assert filler["index"].tolist() == [-1] and tuple(filler["inputs"].shape) in samplers[2].shapes
    # a plain DataLoader over the plain dataset never repeats a sample: it fails loudly
    plain = DataLoader(data, batch_sampler=samplers[2], collate_fn=samplers[2].collator())
    with pytest.raises(TypeError, match=r"EvalSampler\.wrap\(dataset\)"):
        list(plain)
    raw = DataLoader(data, batch_sampler=samplers[2], collate_fn=lambda x: x)
    assert sorted(len(b) for b in raw) == [0, 1]


def test_the_fill_row_of_a_rank_with_no_sample_has_ignored_labels():
    """NOTE [ Evaluation plan ]: the fill row keeps its sample's data but its integer labels are
    -100, as every filler row's, so that cross_entropy does not count that sample twice (it
    held the sample's real label)."""
    lengths = [3, 4, 2]
    data = [{"input_ids": [1] * n, "label": i, "labels": [i] * n} for i, n in enumerate(lengths)]
    ranks = all_ranks(lengths, 4, num_buckets=1, batch_size=4)
    batches = [b for sampler in ranks for b in sampler.dataloader(data)]
    fill = batches[3]
    assert fill["sample_mask"].tolist() == [False] and fill["input_ids"][0, 0] == 1
    assert fill["label"].tolist() == [-100] and (fill["labels"] == -100).all()
    assert [b["label"].tolist() for b in batches[:3]] == [[0], [1], [2]]


@pytest.mark.slow
def test_batches_pickle_into_workers():
    lengths = load_real("gsm8k")[:300, 0]
    sampler = EvalSampler(lengths, num_buckets=3, batch_size=16, num_replicas=2, rank=1)
    data = [list(range(int(n))) for n in lengths]
    one = [b["index"] for b in sampler.dataloader(data)]
    two = [b["index"] for b in sampler.dataloader(data, num_workers=2)]
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_same_shapes_as_training_when_given_its_boundaries():
    lengths = load_real("multi30k")[:800, 0]
    train = BucketSampler(lengths[:600], num_buckets=4, batch_size=16)
    bounds = np.append(train.boundaries[:-1], max(train.boundaries[-1], lengths.max()))
    evaluation = EvalSampler(lengths[600:], boundaries=bounds, batch_size=16, balance=False)
    assert set(evaluation.shapes) <= {(16, int(b)) for b in bounds}
    spec = BucketSpec.build(lengths, num_buckets=3, batch_size=8, last_batch="drop")
    from_spec = EvalSampler(spec)  # a spec's last_batch is ignored: nothing is dropped
    assert sorted(i for b in from_spec for i in b) == list(range(800))


def test_errors_name_the_fix():
    with pytest.raises(TypeError, match="EvalSampler takes no last_batch"):
        EvalSampler([1, 2], batch_size=1, last_batch="drop")
    with pytest.raises(TypeError, match=r"EvalSampler takes no shuffle: its batches are determ"):
        EvalSampler([1, 2], batch_size=1, shuffle=True)  # (s25-user: "unexpected option")
    with pytest.raises(ValueError, match="rank must be an int >= 0 and < num_replicas=2"):
        EvalSampler([1, 2], batch_size=1, num_replicas=2, rank=2)
    spec = BucketSpec.build([1, 2], batch_size=1)
    with pytest.raises(TypeError, match="cannot be combined with a BucketSpec"):
        EvalSampler(spec, batch_size=2)
    with pytest.raises(ValueError, match=r"repeated: \[1\], missing: \[2\]"):
        restore_order(np.zeros(4), [0, 1, 1, -1], num_samples=3)
    with pytest.raises(ValueError, match=r"past 1: \[2\] \(is num_samples=2 the dataset"):
        restore_order(np.zeros(4), [0, 1, 2, -1], num_samples=2)  # (was: repeated [], missing [])
    with pytest.raises(ValueError, match="one row per index entry"):
        restore_order(np.zeros(3), [0, 1, -1, 2])
    with pytest.raises(TypeError, match=r"EvalSampler yields whole batches .*batch_sampler="):
        next(iter(DataLoader([1, 2], sampler=EvalSampler([1, 2], batch_size=1))))
    sampler = EvalSampler([1, 2, 3], batch_size=2, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="one output per rank"):
        sampler.restore_ranks([np.zeros(2)])


def test_set_epoch_is_accepted_and_changes_no_batch():
    """HF Trainer / accelerate call ``set_epoch`` on every sampler; EvalSampler had none."""
    lengths = load_real("librispeech")[:300]
    sampler = EvalSampler(lengths, num_buckets=3, batch_size=16, num_replicas=2, rank=1)
    before = [list(b) for b in sampler]
    sampler.set_epoch(7)
    assert sampler.epoch == 7 and [list(b) for b in sampler] == before
    state = sampler.state_dict(batches_consumed=2)
    fresh = EvalSampler(lengths, num_buckets=3, batch_size=16, num_replicas=2, rank=1)
    fresh.load_state_dict(state)
    fresh.set_epoch(1)  # a pending resume position survives set_epoch
    # s27: report() said epoch 0 and every batch left, whatever the position
    report = fresh.report()
    assert (report.epoch, report.batches_done, report.batches_left) == (1, 2, len(before) - 2)
    assert report.samples_left == sum(map(len, before[2:]))
    assert [list(b) for b in fresh] == before[2:]
    assert (fresh.report().batches_done, fresh.report().batches_left) == (len(before), 0)
    fresh.set_epoch(2)  # after a pass, the next one starts over, and so does the state
    assert fresh.state_dict()["batches_yielded"] == 0  # (s25-user: it was the pass's end)
    with pytest.raises(ValueError, match="epoch"):
        sampler.set_epoch(-1)
