"""No silent loss, and siblings that honour the same contract (issue 21, classes 3, 5 and 6).

Every producer that leaves a sample out counts it in ``report()`` and warns once with the count;
evaluation over a filtered set stays whole over the kept samples; bad inputs give one clear
error naming the argument and the fix.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_real

import bucketloader.plan
from bucketloader import BucketSampler, EvalSampler, PackSampler, static
from bucketloader.cli.files import LengthFileError, read_lengths
from bucketloader.evaluation import restore_order
from bucketloader.plan import DataLossWarning, TokenBudget
from bucketloader.sampler import GroupedDataset


def _warned(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


# -- class 3: silent loss -----------------------------------------------------------------------
def test_pack_overflow_drop_counts_and_warns_once():
    lengths = [3, 20, 4, 30, 5, 25]
    sampler, msgs = _warned(
        lambda: PackSampler(lengths, row_length=8, batch_size=2, overflow="drop", seed=0)
    )
    assert len(msgs) == 1 and "3 by overflow='drop'" in msgs[0]
    with pytest.warns(DataLossWarning, match="this PackSampler leaves out 3 of 6"):  # (s19)
        PackSampler(lengths, row_length=8, batch_size=2, overflow="drop", seed=0)
    # s14: it read "leaves out documents every epoch on 1 rank(s), of 6: 3 by ..."
    assert msgs[0].startswith("this PackSampler leaves out 3 of 6 documents (50.0%) every epoch")
    totals = sampler.report().totals
    assert (totals["samples"], totals["too_long"], totals["seen"]) == (6, 3, 3)
    assert sorted(i for b in sampler for i in b) == [0, 2, 4]


def test_truncation_past_one_percent_is_warned_with_the_elements_cut():
    # overflow="truncate" keeps the samples but loses what is past the cut: it was counted in
    # report() only, never warned (s21-pack: GSM8K in rows of 200, 964 tokens, silently)
    lengths = [10] * 97 + [30, 40, 50]  # 3 of 100 cut to 20: 10 + 20 + 30 elements of 1,090
    for make, unit in (
        (
            lambda: BucketSampler(
                lengths, num_buckets=2, batch_size=4, max_length=20, overflow="truncate"
            ),
            "samples",
        ),
        (
            lambda: EvalSampler(
                lengths, num_buckets=2, batch_size=4, max_length=20, overflow="truncate"
            ),
            "samples",
        ),
        (
            lambda: PackSampler(lengths, row_length=20, batch_size=4, overflow="truncate"),
            "documents",
        ),
    ):
        sampler, msgs = _warned(make)
        option = "row_length" if unit == "documents" else "max_length"
        assert [m for m in msgs if "cuts" in m] == [
            f"this {make().__class__.__name__} cuts 3 of 100 {unit} (3.0%) (overflow='truncate'): "
            "60 of the 1,090 elements declared (5.5%) are past the cut and never seen, every "
            f"epoch; report().totals['truncated'] counts them. A longer {option} keeps them "
            "whole (filter bucketloader.plan.DataLossWarning where the cut is what you want)"
        ]
        # the hint's code runs and counts the same (s21-rev: report()['truncated'] was a
        # TypeError, and DataLossWarning is not importable from bucketloader itself)
        assert sampler.report().totals["truncated"] == 3
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", category=bucketloader.plan.DataLossWarning)
            make()
    _, msgs = _warned(
        lambda: PackSampler([10] * 199 + [30], row_length=20, batch_size=4, overflow="truncate")
    )
    assert not [m for m in msgs if "cuts" in m]  # (1 of 200: at most 1%, as leaving out)


@pytest.mark.parametrize("ranks", [2, 3])
def test_pack_last_batch_drop_over_ranks_is_counted_exactly(ranks):
    lengths = [4] * 101  # 51 rows: 3 left over at 2 x 2 and at 3 x 2 rows per step
    samplers, msgs = _warned(
        lambda: [
            PackSampler(
                lengths, row_length=8, batch_size=2, last_batch="drop", num_replicas=ranks, rank=r
            )
            for r in range(ranks)
        ]
    )
    seen = {i for s in samplers for b in s for i in b}
    totals = samplers[0].report().totals
    assert totals["dropped"] == 101 - len(seen) > 0 and totals["seen"] == len(seen)
    assert msgs and all("last_batch='drop'" in m for m in msgs)
    for s in samplers:  # each rank's report agrees (it is over all ranks)
        assert s.report().totals == totals


def test_last_batch_drop_of_a_whole_row_length_or_bucket_names_what_is_never_seen():
    # s21-pack: the 2 rows of 16 are fewer than a step (4), so the two 12-token documents (only
    # those rows hold them) were never seen in any epoch, without a word (0.5% < LOSS_WARNING)
    lengths = [4] * 402 + [12] * 2
    sampler, (msg,) = _warned(
        lambda: PackSampler(lengths, row_length=(8, 16), batch_size=4, last_batch="drop")
    )
    assert "2 row(s) of 16 tokens (a step takes 4) make no batch" in msg
    assert "so 2 document(s) of 12 tokens are never seen, the same ones every epoch" in msg
    assert sampler.shapes == [(4, 8)] and {402, 403}.isdisjoint(i for b in sampler for i in b)
    # its twin in BucketSampler: a bucket with fewer samples than one step makes no batch
    lengths = [5] * 1000 + [30] * 5
    sampler, (msg,) = _warned(
        lambda: BucketSampler(lengths, boundaries=[5, 30], batch_size=8, last_batch="drop")
    )
    assert (
        "1 bucket(s) hold fewer samples than one step takes, padded lengths (30,) (5 of a "
        "step's 8), so their 5 samples are never seen, the same ones every epoch"
    ) in msg
    assert sampler.shapes == [(8, 5)]


def test_last_batch_fill_of_a_small_row_length_or_bucket_says_what_it_repeats():
    # s22-fill: a row length (bucket) with fewer rows (samples) than one step repeated all of
    # them, up to ceil(R * B / n) times an epoch, the longest documents, without a word (s21-pack
    # saw GSM8K's 16 documents of its 6 rows of 512 trained up to 22 times an epoch on 8 ranks).
    # Now shorter rows drawn at random fill that step (NOTE [ Filling a small row length ]): the
    # two 12-token documents once each (they were 4 times), random 4-token ones twice
    lengths = [4] * 402 + [12] * 2
    samplers, msgs = _warned(
        lambda: [
            PackSampler(lengths, row_length=(8, 16), batch_size=4, last_batch="fill",
                        num_replicas=2, rank=r)
            for r in (0, 1)
        ]
    )  # fmt: skip
    assert msgs == []  # (12 repeats, 3.0%, none more than twice)
    appear = np.bincount([i for s in samplers for b in s for i in b], minlength=404)
    assert appear[402:].tolist() == [1, 1] and appear.max() == 2
    assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 404 == 12
    for s in samplers:  # the small step keeps its shape on both ranks
        collate, plan = s.collator(), s.plan()
        (i,) = np.flatnonzero(plan.kinds == 1)
        out = collate([[1] * lengths[j] for j in plan.batch(int(i))])
        assert tuple(out["input_ids"].shape) == (4, 16)
    state = samplers[0].state_dict()
    state["config"]["plan_digest"] = samplers[0]._older_digest  # (a state of the older plan)
    with pytest.raises(ValueError, match=r"cannot resume its epoch exactly. Start that epoch"):
        samplers[0].load_state_dict(state)
    # the shortest row length has no shorter rows: its own rows repeat, said
    _, (msg,) = _warned(
        lambda: PackSampler([12] * 3, row_length=16, batch_size=4, last_batch="fill",
                            num_replicas=2, rank=0)
    )  # fmt: skip
    assert "repeat about 5 documents per epoch on 2 rank(s)" in msg
    assert "some of them up to 3 times an epoch" in msg
    assert (
        "3 row(s) of 16 tokens (a step takes 8) are fewer than one step takes, so all of them "
        "repeat, with their 3 document(s) of 12 tokens, every epoch"
    ) in msg
    assert "last_batch='pad' completes the short steps with masked padding rows" in msg
    # a few random repeats, each once (what DistributedSampler does), stay silent
    lengths = [5] * 1000 + [30] * 5
    _, msgs = _warned(lambda: BucketSampler(lengths[:1000], batch_size=8, last_batch="fill"))
    assert msgs == []
    # accumulation groups round a bucket's steps up: their extra steps repeat too, counted
    # (s23-rev: 3 samples in batches of 4, accumulate=2, said 1 repeat of 5, each once)
    s, (msg,) = _warned(
        lambda: BucketSampler([5] * 3, batch_size=4, last_batch="fill", accumulate=2)
    )
    appear = np.bincount([i for b in s for i in b])
    assert s.report().totals["repeated"] == int(appear.sum()) - 3 == 5 and appear.max() == 3
    assert "repeat 5 samples per epoch" in msg and "up to 3 times an epoch" in msg


def test_a_rank_without_a_row_of_a_small_row_length_repeats_one_document():
    # s24-packfill: LibriSpeech frames at (1024, 2048), batch_size=8, on 8 ranks: the one row of
    # 2,048 (the only document longer than 1,024 frames, 1,226, and a row-mate of 822) went to
    # every rank, both 8 times an epoch. Each rank's batch of that step must hold a document
    # longer than 1,024 for the collator to lay it out at 2,048, so that one repeats; its
    # row-mate need not (NOTE [ Filling a small row length ], plan_digest '/fill=3')
    lengths = [4] * 402 + [12]  # one row of 16: the 12 and a 4
    samplers, msgs = _warned(
        lambda: [
            PackSampler(lengths, row_length=(8, 16), batch_size=4, last_batch="fill",
                        num_replicas=4, rank=r)
            for r in range(4)
        ]
    )  # fmt: skip
    appear = np.bincount([i for s in samplers for b in s for i in b], minlength=403)
    assert appear[402] == 4 and appear[:402].max() == 2  # (main: its row-mate 4 times too)
    assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 403
    for s in samplers:  # the step keeps its shape on every rank
        plan = s.plan()
        (i,) = np.flatnonzero(plan.kinds == 1)
        out = s.collator()([[1] * lengths[j] for j in plan.batch(int(i))])
        assert tuple(out["input_ids"].shape) == (4, 16)
    msg = msgs[0]  # (each rank's sampler says it)
    assert len(msgs) == 4 and "some of them up to 4 times an epoch" in msg
    assert (
        "1 row(s) of 16 tokens are fewer than the 4 ranks, and each rank's batch of that step "
        "must hold a document longer than 8 tokens"
    ) in msg
    assert "one row length, or documents cut to 8 tokens" in msg
    state = samplers[1].state_dict()
    assert state["config"]["plan_digest"].endswith("/fill=3")
    state["config"]["plan_digest"] = samplers[1]._older_digest + "/fill=2"
    with pytest.raises(ValueError, match=r"a copy of a whole row .*set_epoch\(0\)"):
        samplers[1].load_state_dict(state)
    # a row holding three documents only it can hold: the 3 ranks without one take them in
    # turn, twice each (main: the row 4 times, all three 4 times), so it is not said
    lengths = [4] * 402 + [10] * 3
    samplers, msgs = _warned(
        lambda: [
            PackSampler(lengths, row_length=(8, 32), batch_size=4, last_batch="fill",
                        num_replicas=4, rank=r)
            for r in range(4)
        ]
    )  # fmt: skip
    appear = np.bincount([i for s in samplers for b in s for i in b], minlength=405)
    assert appear[402:].tolist() == [2, 2, 2] and appear.max() == 2
    assert "up to" not in msgs[0] and "fewer than the 4 ranks" not in msgs[0]
    # as many rows as ranks: each rank its own, the plan of '/fill=2'
    two = PackSampler([*lengths, 12], row_length=(8, 16), batch_size=4, last_batch="fill",
                      num_replicas=2, rank=0)  # fmt: skip
    assert two.state_dict()["config"]["plan_digest"].endswith("/fill=2")


def test_last_batch_fill_of_a_small_bucket_takes_shorter_samples():
    # s23-bucketfill: a bucket with fewer samples than one step repeated all of them, up to
    # ceil(R * B / n) times an epoch, the same longest samples every epoch (GSM8K, 8 buckets of
    # 32 on 8 ranks: up to 6 times; s22-fill). Now its samples are split over the ranks and
    # shorter samples drawn at random fill the step (NOTE [ Filling a small bucket ])
    def fill(lengths, ranks, **opts):
        return _warned(
            lambda: [
                BucketSampler(lengths, batch_size=8, last_batch="fill", num_replicas=ranks,
                              rank=r, **opts)
                for r in range(ranks)
            ]
        )  # fmt: skip

    def appearances(samplers, n):
        return np.bincount([i for s in samplers for b in s for i in b], minlength=n)

    lengths = [5] * 200 + [12] * 100 + [40] * 3  # a tiny longest bucket, 4 ranks
    samplers, msgs = fill(lengths, 4, boundaries=[5, 12, 40])
    appear = appearances(samplers, 303)
    assert appear.min() == 1 and appear.max() == 2  # (the 3 samples of 40 were up to 11 times)
    assert sorted(appear[300:].tolist()) == [1, 1, 2]  # (a rank without one of its own repeats one)
    (msg,) = set(msgs)  # (81 repeats: 27% of the samples, said; none 3 times)
    assert "repeat 81 samples per epoch on 4 rank(s)" in msg and "times an epoch" not in msg
    assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 303 == 81
    for s in samplers:  # the small bucket's batch keeps its shape, its own sample first
        collate, plan = s.collator(), s.plan()
        (i,) = np.flatnonzero(plan.cells == 2)
        batch = plan.batch(int(i))
        assert batch[0] >= 300 and tuple(
            collate([[1] * lengths[j] for j in batch])["inputs"].shape
        ) == (8, 40)
    state = samplers[1].state_dict()
    state["config"]["plan_digest"] = samplers[1]._plan_digest(fill=False)  # (an older state)
    with pytest.raises(ValueError, match=r"cannot resume its epoch exactly. Start that epoch"):
        samplers[1].load_state_dict(state)
    lengths = [5] * 1000 + [30] * 5  # 2 ranks: no longer said (19 repeats, none 3 times)
    samplers, msgs = fill(lengths, 2, boundaries=[5, 30])
    appear = appearances(samplers, 1005)
    assert msgs == [] and appear[1000:].tolist() == [1] * 5 and appear.max() == 2
    assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 1005 == 19
    # a group's shortest bucket has no shorter sample of its own group: it repeats its own, said
    groups = [0] * 100 + [1] * 3
    samplers, msgs = fill([5] * 100 + [30] * 3, 2, groups=groups, num_buckets=1)
    appear = appearances(samplers, 103)
    assert all(len({groups[i] for i in b}) == 1 for s in samplers for b in s)
    (msg,) = set(msgs)
    assert "up to 6 times an epoch; 1 bucket(s) hold fewer samples than one step takes" in msg
    assert "padded lengths (30,) (3 of a step's 16), so all their 3 samples repeat" in msg
    assert appear[100:].max() == 6
    # two inputs: a sample fills a cell's step only if the cell covers it in every input
    w = [3] * 100 + [3] * 100 + [40, 45, 50]
    h = [3] * 100 + [30] * 100 + [3, 5, 9]
    samplers, _ = fill({"w": w, "h": h}, 4, boundaries={"w": [10, 50], "h": [10, 50]})
    for s in samplers:
        plan = s.plan()
        (i,) = np.flatnonzero(plan.cells == 2)
        assert {(w[j], h[j]) for j in plan.batch(int(i))[1:]} <= {(3, 3), (40, 3), (45, 5), (50, 9)}


def test_last_batch_fill_of_a_small_bucket_in_accumulation_groups():
    # s24-accfill: accumulate=k rounds a bucket's steps up to whole groups of k, whose extra
    # steps repeated its own samples: 20 samples of 40 in 4 steps of 4 x 8, each up to 7 times
    # (GSM8K, 8 buckets of 32 on 8 ranks, accumulate=4: up to 21). Now shorter samples fill
    # them too, the least repeated first, with one of its own first in every batch
    lengths = [5] * 200 + [12] * 100 + [40] * 20
    samplers, msgs = _warned(
        lambda: [
            BucketSampler(lengths, boundaries=[5, 12, 40], batch_size=8, last_batch="fill",
                          accumulate=4, num_replicas=4, rank=r)
            for r in range(4)
        ]
    )  # fmt: skip
    plans = [s.plan() for s in samplers]
    appear = np.bincount(np.concatenate([p.indices for p in plans]), minlength=320)
    assert appear.min() == 1 and appear.max() == 2 and appear[300:].tolist() == [1] * 20
    assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 320 == 192
    (msg,) = set(msgs)
    assert "repeat 192 samples per epoch on 4 rank(s)" in msg and "times an epoch" not in msg
    cells = plans[0].cells
    assert (cells.reshape(-1, 4) == cells[::4, None]).all()  # (groups of 4 steps of one bucket)
    for s, plan in zip(samplers, plans, strict=True):
        assert (plan.cells == plans[0].cells).all()
        for i in np.flatnonzero(plan.cells == 2).tolist():
            batch = plan.batch(i)
            assert batch[0] >= 300 and tuple(
                s.collator()([[1] * lengths[j] for j in batch])["inputs"].shape
            ) == (8, 40)
    state = samplers[1].state_dict()
    state["config"]["plan_digest"] = samplers[1]._plan_digest(fill=False)  # (an older state)
    with pytest.raises(ValueError, match=r"accumulation groups \(accumulate=4\) of a bucket"):
        samplers[1].load_state_dict(state)


def test_last_batch_fill_of_a_small_bucket_in_weighted_epochs_and_draws():
    # s24-accfill: weighted epochs (each pass over a dataset a plain plan of it) and
    # WeightedBucketSampler's draws repeated a small bucket's own samples: the 3 samples of 40
    # up to 22 and 21 times an epoch on 4 ranks. Now their steps take shorter samples too
    from bucketloader.weighted import WeightedBucketSampler

    lengths = [5] * 200 + [40] * 3 + [7] * 100
    opts = {"boundaries": [5, 7, 40], "batch_size": 8, "last_batch": "fill", "num_replicas": 4}
    weighted = [
        BucketSampler(lengths, groups=[0] * 203 + [1] * 100, weights=[1, 1], rank=r, **opts)
        for r in range(4)
    ]
    drawn = [WeightedBucketSampler(lengths, [1.0] * 303, rank=r, **opts) for r in range(4)]
    for samplers, epoch in ((weighted, 1), (drawn, 0)):
        plans = [s.plan(epoch) for s in samplers]
        appear = np.bincount(np.concatenate([p.indices for p in plans]), minlength=303)
        assert appear[200:203].max() <= 3 and appear.max() <= 6
        repeated = samplers[0].report(epoch).totals["repeated"]
        assert repeated == int(appear.sum() - (appear > 0).sum())
        for s, plan in zip(samplers, plans, strict=True):
            long = s.spec.cell_of_sample[200]  # (the bucket of 40: its own sample first)
            for i in np.flatnonzero(plan.cells == long).tolist():
                batch = plan.batch(i)
                group = None if s.spec.groups is None else 0
                shape = s.shape_table.target(np.asarray(lengths)[batch], group=group)
                assert 200 <= batch[0] < 203 and shape == (8, 40)
    # the draws' shortest planned length is the data's: a batch of short draws in a bucket whose
    # first sample is long was refused as other units ('below half of 20')
    s = WeightedBucketSampler([20] + [3] * 50, [1.0] * 51, boundaries=[20], batch_size=4)
    batch = next(b for b in s if 0 not in b)
    assert tuple(s.collator()([[1] * 3 for _ in batch])["inputs"].shape) == (4, 20)


def test_two_small_row_lengths_fill_from_the_least_repeated_shorter_rows():
    # s22-rev: a row of 32 and a row of 64 (each fewer than a step of 6 x 4) both filled their
    # step from the rows of 16 left after leaving out the 22 their own last step repeats: the
    # same 4 rows were drawn by both, a document 14 times an epoch (the warning said 6)
    lengths = [7, 3, 14, 7, 10, 6, 15, 2, 2, 7, 9, 10, 14, 6, 15, 11, 9, 4, 12, 3, 1, 12, 4]
    lengths += [11, 9, 7, 7, 3, 5, 10, 6, 12, 15, 3, 3, 11, 4, 6, 14, 14, 14, 12, 1, 5, 10]
    lengths += [15, 4, 1, 11, 3, 14, 4, 27, 49]
    for shuffle in (False, True):
        samplers, msgs = _warned(
            lambda shuffle=shuffle: [
                PackSampler(lengths, row_length=(16, 32, 64), batch_size=4, last_batch="fill",
                            num_replicas=6, rank=r, shuffle=shuffle)
                for r in range(6)
            ]
        )  # fmt: skip
        appear = np.bincount([i for s in samplers for b in s for i in b], minlength=54)
        slots, offsets, kind = samplers[0].spec.layout
        docs = samplers[0].spec.by_size[slots]
        long = [d for r in np.flatnonzero(kind > 0) for d in docs[offsets[r] : offsets[r + 1]]]
        if not shuffle:  # (shuffled, a short document can share the repeated rows of 32, 64)
            assert np.delete(appear, long).max() == 4
        (msg,) = set(msgs)
        assert f"some of them up to {appear.max()} times an epoch" in msg
        assert samplers[0].report().totals["repeated"] == int(appear.sum()) - 54


def test_eval_sampler_with_a_filter_is_whole_over_the_kept_samples():
    lengths = [3, 4, 9, 10, 12, 8, 2]
    samplers, msgs = _warned(
        lambda: [
            EvalSampler(
                lengths, num_buckets=2, batch_size=2, max_length=9, overflow="drop",
                num_replicas=2, rank=r,
            )
            for r in (0, 1)
        ]
    )  # fmt: skip
    assert len(msgs) == 2 and "evaluates 5 of 7 samples" in msgs[0]
    assert "(2 by max_length (too long))" in msgs[0] and "drop max_length (or use" in msgs[0]
    # a filter= was counted but not named ("2 left out ()") and the fix named max_length
    _, (msg,) = _warned(
        lambda: EvalSampler(lengths, num_buckets=2, batch_size=2, filter=[True] * 5 + [False] * 2)
    )
    assert "2 left out (2 by filter= (filter))" in msg and "drop filter= to evaluate" in msg
    # oversize='drop': dropping oversize= makes them an error; 'single' evaluates them (s9-rev1)
    budget = TokenBudget(11, oversize="drop")
    _, (msg,) = _warned(lambda: EvalSampler(lengths, num_buckets=2, max_tokens=budget))
    assert " by oversize (oversize))" in msg and "drop" not in msg.split("indices);")[1]
    assert "pass max_tokens=TokenBudget(..., oversize='single') to evaluate" in msg
    single = TokenBudget(11, oversize="single")
    assert not _warned(lambda: EvalSampler(lengths, num_buckets=2, max_tokens=single))[1]
    s = samplers[0]
    assert s.kept.tolist() == [0, 1, 2, 5, 6] and s.num_samples == 5
    totals = s.report().totals
    assert (totals["too_long"], totals["seen"], totals["repeated"]) == (2, 5, 0)
    gathered = s.gathered_index()
    outputs = np.where(gathered >= 0, gathered * 10, -7)  # a model's output per gathered row
    assert s.restore(outputs).tolist() == [0, 10, 20, 50, 60]
    per_rank = [np.where(x.row_index(x.rank) >= 0, x.row_index(x.rank) * 10, -7) for x in samplers]
    assert s.restore_ranks(per_rank).tolist() == [0, 10, 20, 50, 60]
    whole, msgs = _warned(lambda: EvalSampler(lengths, num_buckets=2, batch_size=2))
    assert not msgs and whole.kept.tolist() == list(range(7))


def test_bucket_sampler_drop_over_ranks_still_warns():
    _, msgs = _warned(
        lambda: BucketSampler(
            [5] * 5, num_buckets=1, batch_size=2, last_batch="drop", num_replicas=2, rank=0
        )
    )
    assert msgs and "last_batch='drop'" in msgs[0]


# -- class 5: contracts ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("index", "error", "match"),
    [
        ([0, -2, 1], ValueError, "-2 at position 1"),
        ([0.0, 1.0], TypeError, "integer dataset indices"),
        (np.array([True, False]), TypeError, "integer dataset indices"),
        (torch.tensor([0.5, 1.0]), TypeError, "integer dataset indices"),
        ([[0, 1]], ValueError, "1-D"),
    ],
)
def test_restore_order_refuses_what_is_not_an_index(index, error, match):
    with pytest.raises(error, match=match):
        restore_order(np.zeros((len(index), 1)), index)
    assert restore_order(np.array([7, 5, 0]), torch.tensor([1, 0, -1])).tolist() == [5, 7]


def test_grouped_dataset_contract():
    with pytest.raises(ValueError, match="at least one dataset"):
        GroupedDataset([])
    data = GroupedDataset([[{"x": 1, "dataset": "wiki"}], [{"x": 2}]])
    assert data[1] == {"x": 2, "dataset": 1}
    with pytest.raises(ValueError, match="already has a field 'dataset'"):
        data[0]
    assert GroupedDataset([[{"x": 1, "dataset": "wiki"}]], key="source")[0]["source"] == 0

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield {"x": 1}

    for bad in ([Stream()], [[{"x": 1}], 5]):
        with pytest.raises(TypeError, match="map-style datasets"):
            GroupedDataset(bad)


def test_pack_sampler_leaves_the_callers_array_writable():
    lengths = np.array([5, 3, 2, 5, 3, 2, 8])
    sampler = PackSampler(lengths, row_length=8, batch_size=2)
    assert lengths.flags.writeable and not sampler.lengths.flags.writeable
    lengths[0] = 1  # the caller's array; the sampler keeps its own copy
    assert sampler.lengths[0] == 5


def test_subsample_refuses_an_output_that_is_all_padding():
    values, labels = torch.randn(2, 100, 4), torch.zeros(2, 100, dtype=torch.bool)
    with pytest.raises(ValueError, match="num_samples=1000000000 exceeds the N=100"):
        static.balanced_subsample(values, labels, 10**9)
    with pytest.raises(ValueError, match="k=1000000000 exceeds"):
        static.masked_select_k(labels, 10**9)
    assert static.balanced_subsample(values, labels, 200).values.shape == (2, 200, 4)


@pytest.mark.filterwarnings("ignore:this BucketSampler plans .* of length 0")  # (length 0)
# -- class 6: peer invariants ---------------------------------------------------------------------
def test_token_budget_rounds_the_batch_of_empty_samples_like_fairseq():
    budget = TokenBudget(9, max_batch_size=5, multiple_of=2)
    sampler = BucketSampler([0] * 5 + [3] * 2, num_buckets=2, max_tokens=budget)
    assert (4, 0) in sampler.shapes and all(b % 2 == 0 for b, _ in sampler.shapes)


def test_cli_reads_lengths_exactly_or_refuses(tmp_path):
    txt = tmp_path / "l.txt"
    txt.write_text("9007199254740993.0\n5\n1e3\n")
    assert read_lengths(txt).tolist() == [9007199254740993, 5, 1000]
    jsonl = tmp_path / "l.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"n": v}) for v in (3, 4)) + '\n{"n": 9007199254740993.0}\n'
    )
    assert read_lengths(jsonl, "n").tolist() == [3, 4, 9007199254740993]
    npy = tmp_path / "l.npy"
    np.save(npy, np.array([3.0, 2.0**53 + 2]))
    with pytest.raises(LengthFileError, match="store the lengths as integers"):
        read_lengths(npy)
    np.save(npy, np.array([3.0, 5.0]))
    assert read_lengths(npy).tolist() == [3, 5]
    txt.write_text("3\nnan\n")
    with pytest.raises(LengthFileError, match="whole number"):
        read_lengths(txt)
    txt.write_text("3\n-1\n")  # (the first length below 0: the edge of the check)
    with pytest.raises(LengthFileError, match=r"line 2: lengths must be non-negative, got -1$"):
        read_lengths(txt)
    # a huge exponent is refused as written, before any integer of that many digits is built
    txt.write_text("3\n1e5000\n")
    with pytest.raises(LengthFileError, match=r"line 2: lengths must be < 2\*\*62, got '1e5000'$"):
        read_lengths(txt)


def test_bucket_trainer_evaluates_a_filtered_set_in_order(tmp_path):
    """BucketTrainer over an EvalSampler with max_length + overflow='drop': the predictions are
    the kept samples', in dataset order, with the filter's warning (not a restore error)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    import datasets
    import transformers

    from bucketloader import hf

    rng = np.random.default_rng(0)
    lens = rng.integers(2, 30, size=24)
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [list(rng.integers(1, 50, n)) for n in lens],
            "label": [i % 2 for i in range(24)],
        }
    )
    config = transformers.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=16)  # fmt: skip
    args = transformers.TrainingArguments(
        str(tmp_path), report_to=[], use_cpu=True, per_device_eval_batch_size=4,
        disable_tqdm=True, dataloader_pin_memory=False,
    )  # fmt: skip
    trainer = hf.BucketTrainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        eval_dataset=ds,
        bucketing={"num_buckets": 2, "batch_size": 4},
        eval_bucketing={"max_length": 20, "overflow": "drop"},
    )
    with pytest.warns(UserWarning, match="EvalSampler evaluates"):
        out = trainer.predict(ds)
    kept = np.flatnonzero(lens <= 20)
    assert out.label_ids.tolist() == (kept % 2).tolist() and out.predictions.shape[0] == kept.size


def test_small_losses_are_counted_and_only_evaluation_warns_of_them():
    """docs/trust.md, promise 3 (s34-user): it said every producer that leaves samples out
    "says so once, with the count"; the samplers warn above 1% of the data (``LOSS_WARNING``)
    and count fewer in ``report()`` silently, the page's own example: Europarl's 35 sentences of
    0 tokens of 20,000 left out by ``min_length=1, overflow="drop"``. EvalSampler warns of any."""
    src = load_real("europarl")[:, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataLossWarning)
        sampler = BucketSampler(src, min_length=1, overflow="drop", num_buckets=6, batch_size=32)
        pack = PackSampler(np.r_[np.full(1_000, 8), 9], row_length=8, batch_size=4, overflow="drop")
    assert (src.size, sampler.report().totals["too_short"]) == (20_000, 35)
    assert pack.report().totals["too_long"] == 1
    with pytest.warns(DataLossWarning, match=r"leaves out 201 of 10,000 samples \(2\.0%\)"):
        BucketSampler(np.arange(10_000), min_length=201, overflow="drop", batch_size=32)
    with pytest.warns(UserWarning, match="evaluates 999 of 1,000 samples: 1 left out"):
        EvalSampler(np.arange(1, 1_001), batch_size=4, max_length=999, overflow="drop")
    page = (Path(__file__).parents[1] / "docs" / "trust.md").read_text()
    assert "when they are more than 1% of the data" in page and "35 Europarl sentences" in page
