"""Regression tests from a user trial: what a new user ran into, each test the case as the user
met it (a stream given a merged-cell spec, a joint-plan state from another plan, ranks that each
solve a joint plan alone, a shape of width zero, a masked loss with no real row)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bucketloader import BucketIterable, BucketSampler, BucketSpec
from bucketloader.weighted import WeightedBucketSampler

PAIRS = np.loadtxt("tests/data/multi30k_train_en_de_tokens.txt", dtype=np.int64)[:300]
LENGTHS = {"input_ids": PAIRS[:, 0], "labels": PAIRS[:, 1]}
ITEMS = [{"input_ids": [1] * int(s), "labels": [1] * int(t)} for s, t in PAIRS]


def _stream(boundaries):
    return BucketIterable(
        ITEMS, length_fn=("input_ids", "labels"), boundaries=boundaries, max_tokens=2048
    )


@pytest.mark.parametrize(
    ("options", "how"),
    [({"max_shapes": 3}, "a joint plan"), ({"num_buckets": [3, 3], "max_shapes": 3}, "merged")],
)
def test_stream_refuses_a_spec_with_fewer_cells_than_its_lattice(options, how):
    # Before: a stream given a max_shapes=6 spec planned the whole 6 x 6 lattice (36 shapes,
    # 107% padding on Europarl against the sampler's 27%), silently.
    spec = BucketSpec.build(LENGTHS, max_tokens=2048, **options)
    with pytest.raises(ValueError, match=f"{how}.*every point of the per-input lattice"):
        _stream(spec)
    with pytest.raises(ValueError, match="BucketSampler whose plan has 3 shapes"):
        _stream(BucketSampler(spec))
    assert len(_stream(spec.boundaries[0]).shapes) == np.prod([b.size for b in spec.boundaries[0]])


def test_stream_takes_a_lattice_spec():
    spec = BucketSpec.build(LENGTHS, num_buckets=[3, 2], max_tokens=2048)
    assert len(_stream(spec).shapes) == 6


def test_joint_state_from_another_plan_names_the_cache():
    sampler = BucketSampler(LENGTHS, max_shapes=3, batch_size=8, seed=0)
    state = sampler.state_dict()
    state["config"]["plan_digest"] = "0123456789abcdef/shuffle=2"  # a re-solved plan
    with pytest.raises(ValueError, match=r"cache=True.*sampler.set_epoch\(1\)"):
        sampler.load_state_dict({**state, "epoch": 0})
    state["config"]["num_replicas"] = 2  # another option differs: the generic message
    # (s32-user: it named num_replicas, saying to resume on 2 ranks, where this plan's digest
    # on 2 ranks is not the state's either: the plan's difference is named, not the ranks')
    with pytest.raises(ValueError, match="plan_digest='0123456789abcdef/shuffle=2' in the st"):
        sampler.load_state_dict(state)


def test_weighted_error_shows_a_plain_number():
    with pytest.raises(ValueError, match=r"got -1\.0 at index 1$"):
        WeightedBucketSampler(
            [3, 4, 5], [1.0, -1.0, 1.0], num_samples=2, num_buckets=1, batch_size=2
        )


@pytest.mark.parametrize("kind", ["BucketSampler", "EvalSampler"])
def test_ranks_solving_a_joint_plan_alone_are_warned(kind):
    """s5-user R1: ranks without a process group each solve a time-limited joint plan, which can
    differ; the sampler says so and how to share one plan (a spec given to every rank: silent).
    s23-joint: an EvalSampler's ranks solved theirs without a word."""
    from bucketloader.evaluation import EvalSampler

    sampler = {"BucketSampler": BucketSampler, "EvalSampler": EvalSampler}[kind]
    pairs = np.stack([np.arange(40) % 7 + 3, np.arange(40) % 5 + 2], axis=1)
    said = (
        rf"this {kind} \(rank 1 of num_replicas=2\) solved"
        if kind == "EvalSampler"
        else (r"rank 1 of num_replicas=2\) solved its joint plan")
    )
    with pytest.warns(UserWarning, match=said):
        s = sampler(pairs, max_shapes=3, batch_size=4, num_replicas=2, rank=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler(s.spec, num_replicas=2, rank=0)  # the same plan on every rank
        sampler(pairs, max_shapes=3, batch_size=4)  # one process


def test_a_shape_of_width_zero_is_warned_with_the_fix():
    """s5-user R5: samples of length 0 can get a bucket of their own, a (B, 0) batch most models
    cannot take; the sampler says so and names min_length=1, overflow='drop'."""
    lengths = np.array([0, 0, 3, 5, 7, 0, 9, 12])
    with pytest.warns(
        UserWarning,
        match=r"3 of 8 samples of length 0: .*1 cell\(s\) of width 0 of their own "
        r"\(\(0,\) first, 3 samples\)",
    ):
        BucketSampler(lengths, num_buckets=3, batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BucketSampler(lengths[lengths > 0], num_buckets=3, batch_size=2)


@pytest.mark.parametrize("lengths", [np.ones((5, 2), dtype=np.int64), {"a": [1, 2], "b": [3, 4]}])
def test_sharded_sampler_with_several_inputs_names_bucket_sampler(lengths):
    """s5-user R7: ShardedSampler plans one input; the error says where joint shapes live."""
    from bucketloader.sharded import ShardedSampler

    with pytest.raises(ValueError, match=r"plans one input, got .*use BucketSampler with"):
        ShardedSampler(lengths, batch_size=2, num_buckets=2, num_replicas=1, rank=0)


@pytest.mark.filterwarnings("ignore:Tagger. bucketloader assumes its loss ignores")
def test_masked_loss_with_no_real_row_has_finite_gradients_for_a_masked_mean_model():
    """Review s5-rev3: a CPU sample_mask with no real row gives 0 and finite (zero) gradients
    also for a model whose own loss is a masked mean (0 / 0), and zero_loss keeps a tuple's
    logits (no 0-d loss first) in the graph."""
    import torch

    from bucketloader.hf.loss import masked_loss, zero_loss

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)

        def forward(self, input_ids, labels=None):
            logits = self.head(self.emb(input_ids))
            keep = (labels != -100).reshape(-1)
            ce = torch.nn.functional.cross_entropy(
                logits.reshape(-1, 3), labels.clamp(min=0).reshape(-1), reduction="none"
            )
            return {"loss": (ce * keep).sum() / keep.sum(), "logits": logits}

    model = Tagger()
    batch = {"input_ids": torch.ones(2, 5, dtype=torch.long), "labels": torch.full((2, 5), -100)}
    batch["sample_mask"] = torch.zeros(2, dtype=torch.bool)
    loss, _ = masked_loss(model, batch)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    logits = torch.nn.Linear(2, 3)(torch.ones(1, 2))
    zero = zero_loss((logits,))
    assert zero.requires_grad and float(zero.detach()) == 0.0


@pytest.mark.parametrize("cache", [None, False])
def test_ranks_solving_alone_are_warned_also_with_no_cache(cache):
    pairs = np.stack([np.arange(40) % 7 + 3, np.arange(40) % 5 + 2], axis=1)
    with pytest.warns(UserWarning, match=r"solved its joint plan on its own"):
        BucketSampler(pairs, max_shapes=3, batch_size=4, num_replicas=2, rank=1, cache=cache)


def test_ranks_solving_alone_at_a_cache_miss_are_warned_and_a_hit_says_cached(tmp_path):
    """s23-joint: with cache= given nothing warned, though at a miss every rank solves at once
    (no lock) and can plan other cells; an entry read is the same on every rank."""
    import warnings

    from bucketloader import BucketCache
    from bucketloader.strategies.joint import Joint

    pairs = np.stack([np.arange(40) % 7 + 3, np.arange(40) % 5 + 2], axis=1)
    kw = {"strategy": Joint(exact=False), "max_shapes": 3, "batch_size": 4, "num_replicas": 2}
    with pytest.warns(UserWarning, match=r"on its own.*written before the ranks start: the cac"):
        first = BucketSampler(pairs, rank=0, cache=BucketCache(tmp_path), **kw)
    assert first.spec.joint[0]["cached"] is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = BucketSampler(pairs, rank=1, cache=BucketCache(tmp_path), **kw)
    assert again.spec.joint[0]["cached"] is True and again.shapes == first.shapes
    assert ", cached)" in str(again.report()) and ", cached)" not in str(first.report())


def test_ranks_solving_alone_with_a_work_limit_are_not_warned():
    """A counted search plans the same cells on every rank: nothing to warn about."""
    import warnings

    from bucketloader.strategies.joint import Joint

    pairs = np.stack([np.arange(40) % 7 + 3, np.arange(40) % 5 + 2], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shapes = [
            BucketSampler(
                pairs,
                strategy=Joint(work_limit=10),
                max_shapes=3,
                batch_size=4,
                num_replicas=2,
                rank=rank,
                cache=False,
            ).shapes
            for rank in (0, 1)
        ]
    assert shapes[0] == shapes[1]


def test_a_per_row_loss_is_the_mean_over_real_rows_and_int32_labels_are_single_label():
    """masked_loss of a regression head (num_labels=1) averages over the real rows only
    ((1 - 3)**2 = 4, the filler row left out, not 4 / 2); settle_problem_type reads int32
    labels as single-label, as int64 (transformers' rule)."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from bucketloader.hf import masked_loss
    from bucketloader.hf.loss import settle_problem_type

    class TinyForSequenceClassification(torch.nn.Module):
        def __init__(self, num_labels: int) -> None:
            super().__init__()
            self.config = SimpleNamespace(num_labels=num_labels, problem_type=None)

        def forward(self, x):
            return {"logits": x}

    batch = {"x": torch.tensor([[1.0], [5.0]]), "labels": torch.tensor([3.0, 0.0]),
             "sample_mask": torch.tensor([True, False])}  # fmt: skip
    loss, _ = masked_loss(TinyForSequenceClassification(1), batch)
    assert float(loss) == 4.0
    model = TinyForSequenceClassification(3)
    settle_problem_type(model, torch.tensor([0, 2], dtype=torch.int32))
    assert model.config.problem_type == "single_label_classification"
