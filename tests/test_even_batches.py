"""Even batches (NOTE [ Even batches ]): under max_tokens a bucket's samples are spread evenly
over the steps it needs, so its last batch has few filler rows; steps and padded lengths stay."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler
from bucketloader.plan import BucketSpec, TokenBudget
from bucketloader.plan.budget import even_batch, size_values
from tests.conftest import REAL_DATASETS, load_real


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 5000),
    b=st.integers(1, 300),
    reps=st.integers(1, 9),
    mult=st.sampled_from([1, 2, 8]),
)
def test_even_batch_keeps_the_steps_with_the_fewest_rows(n, b, reps, mult):
    if mult > 1 and b >= mult:
        b -= b % mult  # the rule's B: below multiple_of, or a multiple of it
    got = int(even_batch([n], [b], reps, mult)[0])
    if n == 0:
        assert got == b
        return
    steps = -(-n // (reps * b))
    assert 1 <= got <= b
    assert -(-n // (reps * got)) == steps  # the same number of steps
    step = mult if b % mult == 0 else 1
    assert got % step == 0 or got == b
    assert reps * steps * got - n < reps * steps * step  # fewer than R*m (x multiple) fillers
    if got - step >= 1:  # and one step of rows less would need more steps
        assert -(-n // (reps * (got - step))) > steps


def _filler_share(spec: BucketSpec, reps: int) -> float:
    """Masked filler elements per real element over one epoch, from the plan's arithmetic."""
    n, rows = spec.counts, spec.cell_batch
    full, q = spec.cell_steps(reps)
    steps = spec.num_steps(reps)
    filled = full * reps * rows + np.minimum(np.maximum(q, reps), reps * rows) * (q > 0)
    filler = steps * reps * rows - filled  # slots neither real nor a repeat (q < R repeats)
    size = size_values(spec.cell_lengths, spec.size)
    real = size_values(spec.planned_lengths(), spec.size).sum()
    assert (filler >= 0).all() and (filled >= n).all()
    return float((filler * size).sum() / real)


@pytest.mark.parametrize("name", sorted(REAL_DATASETS))
def test_every_real_set_pads_at_most_one_percent_of_filler(name):
    lengths = load_real(name)
    size = "prod" if name == "coco" else "sum"
    budget = int(64 * size_values(lengths.reshape(len(lengths), -1), size).max())
    for k in (8, 16):
        opts = {"num_buckets": k, "size": size, "max_shapes": k if lengths.ndim == 2 else None}
        full = BucketSpec.build(lengths, max_tokens=TokenBudget(budget, balance=False), **opts)
        spec = BucketSpec.build(lengths, max_tokens=budget, **opts)
        assert full.cell_lengths.tolist() == spec.cell_lengths.tolist()
        for reps in (1, 8):
            even = spec.for_replicas(reps)
            assert (even.num_steps(reps) == full.num_steps(reps)).all()
            assert len(even.shape_table(reps).shapes) == len(full.shape_table(reps).shapes)
            assert (even.cell_batch <= full.cell_batch).all()
            share = _filler_share(even, reps)
            assert share <= _filler_share(full, reps)
            # fewer than R * steps filler rows per bucket: the rule's guarantee
            steps = even.num_steps(reps)
            assert (steps * reps * even.cell_batch - even.counts < reps * steps).all()
            if reps == 1:
                assert share <= 0.01, (name, k, share)


def test_the_report_counts_the_same_filler_as_the_arithmetic():
    lengths = load_real("ecoli")
    sampler = BucketSampler(
        lengths,
        num_buckets=16,
        max_tokens=TokenBudget(64 * 2358, promote=False),  # even batches alone
        num_replicas=8,
        rank=3,
    )
    report = sampler.report()
    filler = sum((c["shape"][0] * c["batches"] - c["rows"]) * c["shape"][1] for c in report.cells)
    assert filler / int(lengths.sum()) == pytest.approx(_filler_share(sampler.spec, 8))
    old = BucketSampler(
        lengths,
        num_buckets=16,
        max_tokens=TokenBudget(64 * 2358, balance=False),
        num_replicas=8,
        rank=3,
    )
    assert report.totals["padded_rows"] < old.report().totals["padded_rows"] // 20


def test_n100_b32_is_four_batches_of_25_and_every_epoch_keeps_the_shape():
    sampler = BucketSampler([8] * 100, num_buckets=1, max_tokens=256, seed=5)
    assert sampler.shapes == [(25, 8)] and len(sampler) == 4
    collate = sampler.collator()
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(100))
        for b in batches:
            out = collate([{"input_ids": [1] * 8} for _ in b])
            assert tuple(out["input_ids"].shape) in sampler.shapes


@pytest.mark.parametrize("last_batch", ["drop", "keep"])
def test_drop_and_keep_keep_full_batches(last_batch):
    lengths = load_real("ecoli")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "drop" warns about the samples it drops
        s = BucketSampler(lengths, num_buckets=8, max_tokens=20000, last_batch=last_batch)
    full = BucketSpec.build(
        lengths, num_buckets=8, max_tokens=20000, last_batch=last_batch
    ).cell_batch
    assert s.spec.cell_batch.tolist() == full.tolist()


def test_batch_size_plans_and_balance_false_are_unchanged():
    lengths = load_real("ecoli")
    s = BucketSampler(lengths, num_buckets=8, batch_size=64)
    assert {b for b, _ in s.shapes} == {64}
    off = BucketSampler(lengths, num_buckets=8, max_tokens=TokenBudget(20000, balance=False))
    assert [b for b, _ in sorted(off.shapes, key=lambda x: x[1])] == [
        20000 // int(x) for x in off.boundaries
    ]


def test_multiple_of_and_max_batch_size_are_kept():
    lengths = load_real("librispeech") // 320
    budget = TokenBudget(20000, max_batch_size=96, multiple_of=8)
    s = BucketSampler(lengths, num_buckets=8, max_tokens=budget, num_replicas=4, rank=0)
    full = BucketSpec.build(lengths, num_buckets=8, max_tokens=budget).cell_batch
    for b, f in zip(s.spec.cell_batch.tolist(), full.tolist(), strict=True):
        assert b <= f <= 96 and (b % 8 == 0 or f < 8)


def test_a_state_saved_before_even_batches_is_refused_with_the_fix_and_resumes_with_it():
    lengths = load_real("ecoli")
    old_budget = TokenBudget(20000, balance=False)
    old = BucketSampler(lengths, num_buckets=8, max_tokens=old_budget, seed=2)
    it = iter(old)
    for _ in range(5):
        next(it)
    state = old.state_dict()
    rest = list(it)
    new = BucketSampler(lengths, num_buckets=8, max_tokens=20000, seed=2)
    with pytest.raises(ValueError, match=r"balance=False\) to resume this state exactly"):
        new.load_state_dict(state)
    again = BucketSampler(lengths, num_buckets=8, max_tokens=old_budget, seed=2)
    again.load_state_dict(state)
    assert list(again) == rest
    # a state of the even plan resumes exactly on the even plan
    it = iter(new)
    for _ in range(5):
        next(it)
    state, rest = new.state_dict(), list(it)
    fresh = BucketSampler(lengths, num_buckets=8, max_tokens=20000, seed=2)
    fresh.load_state_dict(state)
    assert list(fresh) == rest


def test_balance_must_be_a_bool():
    with pytest.raises(TypeError, match="balance"):
        TokenBudget(100, balance=1)


# -- strategy="batched": boundaries and even rows chosen together (NOTE [ Batched boundaries ]) --
def _planned_padding(lengths, boundaries, max_tokens, reps=1, max_batch_size=None, mult=1):
    """Reference: padded minus real elements of even batches, bucket by bucket."""
    lengths = np.asarray(lengths)
    total = 0
    lo = -1
    for b in boundaries:
        members = lengths[(lengths > lo) & (lengths <= b)]
        lo = b
        if members.size == 0:
            continue
        rows = max(max_tokens // max(int(b), 1), 1)
        if max_batch_size is not None:
            rows = min(rows, max_batch_size)
        if rows >= mult:
            rows -= rows % mult
        rows = int(even_batch([members.size], [rows], reps, mult)[0])
        steps = -(-members.size // (reps * rows))
        total += reps * steps * rows * int(b) - int(members.sum())
    return total


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    k=st.integers(1, 4),
    rows=st.integers(1, 6),
    reps=st.sampled_from([1, 3]),
    mult=st.sampled_from([1, 4]),
    cap=st.sampled_from([None, 5]),
)
def test_batched_is_the_exact_minimum_of_planned_padding(lengths, k, rows, reps, mult, cap):
    import itertools

    from bucketloader.strategies.batched import batched

    budget = rows * max(lengths)
    got = batched(
        lengths, k, max_tokens=budget, num_replicas=reps, multiple_of=mult, max_batch_size=cap
    )
    assert got.status == "optimal"
    args = (budget, reps, cap, mult)
    mine = _planned_padding(lengths, got.boundaries.tolist(), *args)
    assert got.info["padded"] == mine
    values = sorted(set(lengths))
    best = min(
        _planned_padding(lengths, [*inner, values[-1]], *args)
        for r in range(min(k, len(values)))
        for inner in itertools.combinations(values[:-1], r)
    )
    assert mine == best


def test_batched_heuristic_is_never_worse_than_optimal_boundaries(monkeypatch):
    from bucketloader.strategies import batched as module

    lengths = load_real("librispeech") // 160
    budget = 32 * int(lengths.max())
    exact = module.batched(lengths, 16, max_tokens=budget)
    monkeypatch.setattr(module, "_MAX_EXACT_WORK", 0)
    rough = module.batched(lengths, 16, max_tokens=budget)
    assert exact.status == "optimal" and rough.status == "heuristic"
    start = BucketSpec.build(lengths, num_buckets=16, max_tokens=budget).cell_lengths.ravel()
    plain = _planned_padding(lengths, start.tolist(), budget)
    assert exact.info["padded"] <= rough.info["padded"] <= plain
    assert exact.info["padded"] < plain  # the joint choice pays off on real data


def test_a_sampler_passes_its_budget_to_batched_and_pads_less():
    lengths = load_real("commonvoice")
    budget = 32 * int(lengths.max())
    report = {}
    even = TokenBudget(budget, promote=False)  # the plan "batched" models: no promotion
    for strategy in ("optimal", "batched"):
        for key, tokens in ((strategy, even), (f"{strategy}+promote", budget)):
            s = BucketSampler(lengths, num_buckets=64, max_tokens=tokens, strategy=strategy)
            cells = s.report().cells
            report[key] = sum(c["padded"] - c["real"] for c in cells)
            assert len(s.shapes) <= 64
    from bucketloader.strategies.batched import batched

    assert report["batched"] == batched(lengths, 64, max_tokens=budget).info["padded"]
    assert report["batched"] < report["optimal"]
    assert report["batched+promote"] <= report["batched"]  # promotion never pads more
    # without a token budget there are no batches to plan: "batched" is "optimal"
    plain = BucketSampler(lengths, num_buckets=8, batch_size=32, strategy="batched")
    assert (
        plain.boundaries.tolist()
        == BucketSampler(lengths, num_buckets=8, batch_size=32).boundaries.tolist()
    )
