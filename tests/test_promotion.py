"""Promotion of leftovers (NOTE [ Promotion of leftovers ]): under max_tokens with
last_batch="pad" a cell's spare rows take samples of the shorter cells it covers, so filler rows
stay under 1% on 8 ranks; every sample once, one shape per step on every rank, exact resume."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec, TokenBudget
from bucketloader.plan.budget import size_values
from bucketloader.plan.promote import promote
from tests.conftest import load_real


def _budget(lengths: np.ndarray) -> int:
    return int(64 * size_values(lengths.reshape(len(lengths), -1), "sum").max())


def _epoch(sampler: BucketSampler) -> tuple[list[list[int]], float, float]:
    """All ranks' batches of the epoch (rank-major per step), filler and padding share."""
    rep = sampler.report()
    real = sum(c["real"] for c in rep.cells)
    size = size_values(sampler.spec.cell_lengths, "sum")
    filler = sum(
        (c["shape"][0] * c["batches"] - c["rows"]) * s for c, s in zip(rep.cells, size, strict=True)
    )
    padded = sum(c["padded"] for c in rep.cells)
    return rep, filler / real, (padded - real) / real


@pytest.mark.parametrize("name", ["ecoli", "gsm8k"])
def test_eight_ranks_fill_under_one_percent_with_every_sample_once(name):
    lengths = load_real(name)
    opts = {"num_buckets": 16, "max_shapes": 16 if lengths.ndim == 2 else None}
    budget = _budget(lengths)
    ranks = [
        BucketSampler(lengths, max_tokens=budget, num_replicas=8, rank=r, seed=3, **opts)
        for r in range(8)
    ]
    even = BucketSampler(
        lengths,
        max_tokens=TokenBudget(budget, promote=False),
        num_replicas=8,
        rank=0,
        seed=3,
        **opts,
    )
    rep, filler, padding = _epoch(ranks[0])
    _, even_filler, even_padding = _epoch(even)
    assert filler <= 0.01 < even_filler
    assert padding < even_padding and len(ranks[0]) <= len(even)
    assert rep.totals["promoted"] > 0 and rep.totals["seen"] == len(lengths)
    plans = [s.plan() for s in ranks]
    seen = np.concatenate([p.indices for p in plans])
    # every sample once; the only repeats are the ones even batches make too (a cell of < 8)
    assert rep.totals["repeated"] == even.report().totals["repeated"]
    assert np.setdiff1d(np.arange(len(lengths)), seen).size == 0
    table = ranks[0].shape_table
    cells = ranks[0].spec.cells
    for i in range(len(plans[0])):
        planned = cells.shapes[int(plans[0].cells[i])]
        for p in plans:
            assert int(p.cells[i]) == int(plans[0].cells[i])
            batch = p.batch(i)
            assert len(batch) <= planned[0]
            # the samples alone give the step's shape (a plain DataLoader + the collator)
            assert table.target(lengths[batch]) == planned
    assert set(table.shapes) == {cells.shapes[c] for c in np.unique(plans[0].cells)}


def test_the_collator_pads_promoted_batches_to_the_steps_shape():
    lengths = load_real("ecoli")
    sampler = BucketSampler(
        lengths, num_buckets=16, max_tokens=_budget(lengths), num_replicas=8, rank=5, seed=1
    )
    collate = sampler.collator()
    cells = sampler.spec.cells
    plan = sampler.plan()
    mixed = 0
    for i, batch in enumerate(sampler):
        planned = cells.shapes[int(plan.cells[i])]
        out = collate([torch.ones(int(lengths[j]), dtype=torch.long) for j in batch])
        assert tuple(out["inputs"].shape) == planned
        mixed += len({int(sampler.spec.cell_of_sample[j]) for j in batch}) > 1
    assert mixed > 0  # some batches hold promoted samples, first one of their own
    with pytest.raises(ValueError, match="different buckets"):  # a batch not from the plan
        short, long = np.argsort(lengths)[[0, -1]]
        collate([torch.ones(int(lengths[j]), dtype=torch.long) for j in (short, long)])


def test_resume_is_exact_and_an_even_batch_state_is_refused():
    lengths = load_real("ecoli")
    opts = {"num_buckets": 8, "num_replicas": 8, "rank": 2, "seed": 4}
    sampler = BucketSampler(lengths, max_tokens=_budget(lengths), **opts)
    sampler.set_epoch(1)
    it = iter(sampler)
    for _ in range(3):
        next(it)
    state = sampler.state_dict()
    rest = list(it)
    again = BucketSampler(lengths, max_tokens=_budget(lengths), **opts)
    again.load_state_dict(state)
    assert list(again) == rest
    old = BucketSampler(lengths, max_tokens=TokenBudget(_budget(lengths), promote=False), **opts)
    with pytest.raises(ValueError, match="promote=False"):
        again.load_state_dict(old.state_dict())
    old.load_state_dict(old.state_dict())  # the opt-out resumes its own state


@pytest.mark.parametrize("last_batch", ["fill", "drop", "keep"])
def test_other_last_batch_options_do_not_promote(last_batch):
    lengths = load_real("ecoli")
    with pytest.warns(UserWarning) if last_batch == "drop" else contextlib.nullcontext():
        s = BucketSampler(
            lengths, num_buckets=8, max_tokens=20000, last_batch=last_batch, num_replicas=8, rank=0
        )
    assert s.promotion is None and s.report().totals["promoted"] == 0  # (s19: was absent)


def test_a_cell_settles_before_the_cells_it_covers():
    # 2-D: (4, 4) covers (2, 4) and (4, 2), which do not cover each other
    lengths = np.array([[2, 4]] * 5 + [[4, 2]] * 5 + [[4, 4]] * 5)
    spec = BucketSpec.build(lengths, boundaries=[[2, 4], [2, 4]], max_tokens=32)
    p = promote(spec, num_replicas=1)
    out = {(int(a), int(b)): int(n) for a, b, n in p.moves.tolist()}
    assert sum(out.values()) == p.num_promoted > 0
    for (a, b), _ in out.items():
        assert (spec.cell_lengths[b] >= spec.cell_lengths[a]).all()
    slots = p.steps * p.rows
    held = p.stay + np.bincount(p.moves[:, 1], weights=p.moves[:, 2], minlength=3).astype(int)
    assert (held <= slots).all() and held.sum() == len(lengths)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=120),
    pairs=st.booleans(),
    k=st.integers(1, 6),
    reps=st.integers(1, 4),
    rows=st.integers(1, 9),
    mult=st.sampled_from([1, 2, 4]),
    longest_first=st.booleans(),
)
def test_every_sample_once_one_shape_per_step_and_own_sample_first(
    lengths, pairs, k, reps, rows, mult, longest_first
):
    x = np.array(lengths)
    if pairs:
        x = np.stack([x, x[::-1]], axis=1)
    top = int(x.reshape(len(x), -1).max(axis=0).sum())  # the largest padded size
    opts = {"num_buckets": k, "max_tokens": TokenBudget(rows * top, multiple_of=mult)}
    samplers = [
        BucketSampler(x, num_replicas=reps, rank=r, longest_first=longest_first, **opts)
        for r in range(reps)
    ]
    plans = [s.plan() for s in samplers]
    spec, table = samplers[0].spec, samplers[0].shape_table
    no = TokenBudget(rows * top, multiple_of=mult, promote=False)
    even = BucketSampler(x, num_replicas=reps, rank=0, num_buckets=k, max_tokens=no)
    assert len(samplers[0]) == len(plans[0]) <= len(even)  # never more steps
    seen = np.concatenate([p.indices for p in plans])
    assert set(seen.tolist()) == set(range(len(x)))  # nothing lost
    cells = spec.cells
    for i in range(len(plans[0])):
        c = int(plans[0].cells[i])
        for p in plans:
            batch = p.batch(i)
            assert int(p.cells[i]) == c and 1 <= len(batch) <= cells.batch[c]
            assert int(spec.cell_of_sample[batch[0]]) == c  # its own sample first
            assert table.target(x[batch]) == cells.shapes[c]
    if samplers[0].promotion is not None:  # repeats only where a cell has too few samples
        held = np.bincount(seen, minlength=len(x))
        assert samplers[0].report().totals["promoted"] == samplers[0].promotion.num_promoted
        assert held.sum() - len(x) <= reps * len(plans[0])
