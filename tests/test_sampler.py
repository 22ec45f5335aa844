"""BucketSampler: the torch Sampler contract, the shape promise through a DataLoader, errors."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
import torch
from conftest import load_real
from torch.utils.data import DataLoader, Dataset

from bucketloader.evaluation import EvalSampler
from bucketloader.pack import PackSampler
from bucketloader.plan import BucketSpec, TokenBudget, plan_epoch
from bucketloader.sampler import BucketSampler, GroupedDataset
from bucketloader.sharded import ShardedSampler
from bucketloader.solve import compute_boundaries


class LengthDataset(Dataset):
    """Samples are dicts with a 1-D tensor of the declared length per input."""

    def __init__(self, lengths, names=("x",)):
        self.lengths = np.asarray(lengths)
        self.names = names

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        row = np.atleast_1d(self.lengths[i])
        out = {n: torch.full((int(v),), float(i)) for n, v in zip(self.names, row, strict=True)}
        out["index"] = i
        return out


def planned_collate(table, names=("x",), group_key=None):
    """A minimal pad-to-plan collate built only on the ShapeTable (the collator's contract)."""

    def collate(samples):
        lengths = np.array([[len(s[n]) for n in names] for s in samples])
        group = None if group_key is None else samples[0][group_key]
        shape = table.target(lengths, group=group)
        rows = shape[0] if table.last_batch != "keep" else len(samples)
        out = {}
        for j, n in enumerate(names):
            t = torch.zeros(rows, shape[1 + j])
            for r, s in enumerate(samples):
                t[r, : len(s[n])] = s[n]
            out[n] = t
        out["index"] = torch.tensor([s["index"] for s in samples])
        out["shape"] = (rows, *shape[1:])
        return out

    return collate


@pytest.mark.parametrize("last_batch", ["pad", "fill", "drop", "keep"])
def test_dataloader_batches_take_only_promised_shapes(last_batch):
    lengths = load_real("ecoli")
    sampler = BucketSampler(lengths, num_buckets=6, max_tokens=8192, last_batch=last_batch)
    loader = DataLoader(
        LengthDataset(lengths),
        batch_sampler=sampler,
        collate_fn=planned_collate(sampler.shape_table),
    )
    seen, shapes = [], set()
    for batch in loader:
        shapes.add(batch["shape"])
        assert tuple(batch["x"].shape) == batch["shape"]
        seen.extend(batch["index"].tolist())
    assert shapes <= set(sampler.shapes)
    assert len(sampler.shapes) <= 6 * (2 if last_batch == "keep" else 1)
    if last_batch != "drop":
        assert set(seen) == set(range(lengths.size))
        assert len(shapes) == len(sampler.shapes)
    assert len(loader) == len(sampler) == sum(1 for _ in sampler)


def test_attributes_follow_the_interface():
    lengths = load_real("librispeech") // 320
    sampler = BucketSampler(lengths, num_buckets=5, strategy="percentile", batch_size=16)
    np.testing.assert_array_equal(
        sampler.boundaries, compute_boundaries(lengths, 5, strategy="percentile")
    )
    assert sampler.lengths is sampler.spec.lengths and sampler.groups is None
    assert sampler.last_batch == "pad" and sampler.shape_table.last_batch == "pad"
    assert sampler.shapes == [(16, int(b)) for b in sampler.boundaries]
    assert sampler.shape_table.input_names == ("length",)
    assert len(sampler) == int(np.ceil(np.bincount(sampler.spec.cell_of_sample) / 16).sum())
    table = pickle.loads(pickle.dumps(sampler.shape_table))
    assert len(pickle.dumps(sampler.shape_table)) < 20_000
    assert table.target(lengths[:3][lengths[:3] == lengths[0]]) == (
        16,
        int(sampler.boundaries[np.searchsorted(sampler.boundaries, lengths[0])]),
    )


@pytest.mark.filterwarnings("ignore:this BucketSampler plans .* of length 0:UserWarning")
def test_multi_input_attributes():
    pairs = load_real("europarl")
    sampler = BucketSampler({"src": pairs[:, 0], "tgt": pairs[:, 1]}, num_buckets=3, batch_size=8)
    assert set(sampler.boundaries) == {"src", "tgt"}
    assert all(len(s) == 3 for s in sampler.shapes)
    assert sampler.shape_table.input_names == ("src", "tgt")
    loader = DataLoader(
        LengthDataset(pairs, names=("src", "tgt")),
        batch_sampler=sampler,
        collate_fn=planned_collate(sampler.shape_table, names=("src", "tgt")),
    )
    assert {b["shape"] for b in loader} <= set(sampler.shapes)


def test_order_is_deterministic_per_seed_and_epoch():
    lengths = load_real("ecoli")
    a = BucketSampler(lengths, batch_size=8, seed=5)
    b = BucketSampler(lengths, batch_size=8, seed=5)
    a.set_epoch(0)
    b.set_epoch(0)
    first = list(a)
    assert first == list(b)
    a.set_epoch(1)
    second = list(a)
    assert second != first
    b.set_epoch(1)
    assert second == list(b)
    fixed = BucketSampler(lengths, batch_size=8, shuffle=False)
    assert list(fixed) == list(fixed)
    for batch in fixed:
        assert batch == sorted(batch)


def test_sampler_iterates_the_pure_plan():
    lengths = load_real("commonvoice")
    sampler = BucketSampler(lengths, max_tokens=60_000, seed=2, num_replicas=4, rank=3)
    sampler.set_epoch(6)
    assert sampler.promotion is not None  # leftovers promoted (NOTE [ Promotion of leftovers ])
    kw = {"seed": 2, "epoch": 6, "num_replicas": 4, "rank": 3}
    plan = plan_epoch(sampler.spec, promotion=sampler.promotion, **kw)
    assert list(sampler) == [plan.batch(i) for i in range(len(plan))]
    assert len(plan) == len(sampler) <= len(plan_epoch(sampler._even, **kw))


def test_spec_composes_with_the_sampler():
    lengths = load_real("ecoli")
    spec = BucketSpec.build(lengths, boundaries=[200, 400, 800, 2400], batch_size=4)
    sampler = BucketSampler(spec, seed=1)
    assert sampler.boundaries.tolist() == [200, 400, 800, 2400]
    with pytest.raises(TypeError, match="batch_size cannot be combined with a BucketSpec"):
        BucketSampler(spec, batch_size=3)


def test_grouped_datasets_never_mix():
    a, b = load_real("ecoli")[:700], load_real("gsm8k")[:500, 1]
    data = GroupedDataset([LengthDataset(a), LengthDataset(b)])
    assert data.groups.tolist() == [0] * 700 + [1] * 500
    sampler = BucketSampler(
        np.concatenate([a, b]),
        groups=data.groups,
        num_buckets=3,
        max_tokens=4096,
        seed=1,
        num_replicas=2,
        rank=1,
    )
    assert set(sampler.boundaries) == {0, 1}
    np.testing.assert_array_equal(sampler.boundaries[1], compute_boundaries(b, 3))
    loader = DataLoader(
        data,
        batch_sampler=sampler,
        collate_fn=planned_collate(sampler.shape_table, group_key="dataset"),
    )
    for batch in loader:
        assert batch["shape"] in sampler.shapes
    for idx in sampler:
        assert len(set(sampler.groups[idx].tolist())) == 1
    with pytest.raises(
        ValueError, match=r"groups must hold one group id per sample \(1200 samples\)"
    ):
        BucketSampler(np.concatenate([a, b]), groups=data.groups[:-3], batch_size=2)
    with pytest.raises(TypeError, match="needs dict samples"):
        GroupedDataset([[1, 2]])[0]
    with pytest.raises(TypeError, match="datasets must be a list of map-style datasets"):
        GroupedDataset("ab")
    # s34-user: one dataset's dict samples, the list brackets forgotten (GroupedDataset(a)),
    # were taken as datasets of len(sample) keys each: groups [0, 1, 2, ...] and a KeyError: 0
    # from torch's ConcatDataset at the first sample
    samples = [{"input_ids": [1] * n, "labels": [2] * n} for n in (3, 4, 9)]
    with pytest.raises(
        TypeError,
        match=r"got a dict at position 0, which reads as a sample, not a dataset: pass the "
        r"datasets themselves, GroupedDataset\(\[dataset_a, dataset_b\]\)",
    ):
        GroupedDataset(samples)
    with pytest.raises(TypeError, match="got a str at position 1"):
        GroupedDataset([samples, "ab"])


@pytest.mark.parametrize("last_batch, num_workers", [("pad", 2), ("keep", 0), ("fill", 0)])
def test_end_to_end_with_the_pad_collator_and_groups(last_batch, num_workers):
    from bucketloader.collate import PadCollator

    rng = np.random.default_rng(0)
    la, lb = rng.integers(1, 50, 150), rng.integers(20, 200, 90)
    a = [{"tokens": torch.ones(int(n), dtype=torch.long)} for n in la]
    b = [{"tokens": torch.ones(int(n), dtype=torch.long)} for n in lb]
    data = GroupedDataset([a, b])
    sampler = BucketSampler(
        np.concatenate([la, lb]),
        groups=data.groups,
        num_buckets=3,
        max_tokens=512,
        last_batch=last_batch,
    )
    collate = sampler.collator()
    assert isinstance(collate, PadCollator)
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
    shapes, rows = set(), 0
    for batch in loader:
        shapes.add(tuple(batch["tokens"].shape))
        real = batch["sample_mask"].bool()
        assert len(set(batch["dataset"][real].tolist())) == 1, "batches never mix datasets"
        # filler rows are of the batch's dataset too (s34-user: they read 0, dataset a's id, in
        # the padded batches of dataset b)
        assert len(set(batch["dataset"].tolist())) == 1
        rows += int(batch["sample_mask"].sum())
    assert shapes <= set(sampler.shapes)
    assert rows >= la.size + lb.size


def test_distributed_defaults_without_process_group():
    sampler = BucketSampler([1, 2, 3], batch_size=2)
    assert (sampler.num_replicas, sampler.rank) == (1, 0)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({}, ValueError, "pass exactly one of batch_size .* or max_tokens"),
        (
            {"batch_size": 2, "max_tokens": 50},
            ValueError,
            r"pass exactly one of batch_size .*max_tokens=TokenBudget\(50, max_batch_size=2\)$",
        ),
        ({"max_tokens": 9}, ValueError, "max_tokens=9 is below .* index 2 with length 40"),
        ({"batch_size": True}, TypeError, "batch_size must be an int >= 1, got batch_size=True"),
        (
            {"batch_size": 2, "num_replicas": 2, "rank": 2},
            ValueError,
            "rank must be an int >= 0 and < num_replicas=2, got rank=2",
        ),
        (
            {"batch_size": 2, "rank": -1},
            ValueError,
            "rank must be an int >= 0 and < num_replicas=1, got rank=-1",
        ),
        ({"batch_size": 2, "num_replicas": 0}, ValueError, "num_replicas must be an int >= 1"),
        ({"batch_size": 2, "shuffle": 1}, TypeError, "shuffle must be a bool"),
        ({"batch_size": 2, "seed": -3}, ValueError, "seed must be an int >= 0"),
        ({"batch_size": 2, "strategy": "best"}, ValueError, "strategy must be one of"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        BucketSampler([3, 5, 40], **kwargs)


def test_bad_lengths():
    with pytest.raises(ValueError, match="must be non-negative, got -1 at index 1"):
        BucketSampler([3, -1], batch_size=2)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        BucketSampler(np.zeros((2, 2, 2), dtype=int), batch_size=2)
    with pytest.raises(ValueError, match="epoch must be an int >= 0"):
        BucketSampler([3, 1], batch_size=2).set_epoch(-1)
    with pytest.raises(TypeError, match=r"is a token budget: pass it as max_tokens="):
        BucketSampler([3, 1], batch_size=TokenBudget(8))  # (was "batch_size must be an int")
    # s8-polish: strategy=0 or "" was taken as the default; a falsy value is no longer read
    with pytest.raises(ValueError, match="got strategy=''"):
        BucketSampler([3, 1], batch_size=2, strategy="")
    with pytest.raises(ValueError, match="got strategy=0"):
        BucketSampler([3, 1], batch_size=2, strategy=0)


def test_dataloader_options_are_checked_in_one_voice():
    """num_workers=2.5 or nan was accepted until the first batch, None compared with 0 in torch,
    and batch_size= named batch_sampler, which the user never passed (s8-polish)."""
    samplers = [
        BucketSampler([3, 5, 8, 9], num_buckets=2, batch_size=2),
        PackSampler([3, 5, 8, 9], row_length=16, batch_size=1),
        EvalSampler([3, 5, 8, 9], num_buckets=2, batch_size=2),
        ShardedSampler([3, 5, 8, 9], num_buckets=2, batch_size=2),  # (unchecked before s8-rev1)
    ]
    data = [[1] * n for n in (3, 5, 8, 9)]
    for sampler in samplers:
        name = type(sampler).__name__
        with pytest.raises(TypeError, match=rf"got batch_size=4, which the {name} decides"):
            sampler.dataloader(data, batch_size=4)
        # drop_last names the sampler's own option (s21-pack: it named none)
        own = "keeps every sample" if name == "EvalSampler" else "is its last_batch='drop'"
        with pytest.raises(TypeError, match=rf"drop_last=True, which .*{own}"):
            sampler.dataloader(data, drop_last=True)
        for bad, error in [(2.5, TypeError), (float("nan"), TypeError), (None, TypeError),
                           (-1, ValueError)]:  # fmt: skip
            with pytest.raises(error, match=r"num_workers must be an int >= 0, got num_workers="):
                sampler.dataloader(data, num_workers=bad)
        with pytest.raises(TypeError, match=r"collate_fn must be a callable .* got collate_fn=3"):
            sampler.dataloader(data, collate_fn=3)
        assert sampler.dataloader(data, num_workers=np.int64(0)).num_workers == 0
        # torch's defaults change nothing and were taken: loader options shared with other
        # loaders keep working (s8-rev1: s8-polish refused shuffle=False, drop_last=False)
        shared = {"shuffle": False, "drop_last": False, "sampler": None, "batch_size": 1}
        assert len(list(sampler.dataloader(data, collate_fn=list, **shared))) == len(sampler)
        for bad in ({"shuffle": True}, {"drop_last": True}, {"batch_size": None}):
            with pytest.raises(TypeError, match=rf"got {next(iter(bad))}=.*which the {name}"):
                sampler.dataloader(data, **bad)
        # s9-polish: torch took these until a batch or a worker failed (prefetch_factor=0: an
        # AssertionError at the first batch; generator=3: a random_() signature dump)
        for bad, error, match in [
            ({"prefetch_factor": 0, "num_workers": 1}, ValueError, "prefetch_factor must be an"),
            ({"pin_memory": "no"}, TypeError, "pin_memory must be a bool, got pin_memory='no'"),
            ({"worker_init_fn": 3}, TypeError, r"worker_init_fn must be a callable \(worker id"),
            ({"generator": 3}, TypeError, "generator must be a torch.Generator or None, got gen"),
        ]:  # fmt: skip
            with pytest.raises(error, match=match):
                sampler.dataloader(data, **bad)
        ok = {"pin_memory": np.bool_(False), "prefetch_factor": None, "worker_init_fn": None,
              "generator": torch.Generator(), "persistent_workers": False}  # fmt: skip
        assert len(list(sampler.dataloader(data, collate_fn=list, **ok))) == len(sampler)


def test_state_dict_is_small_and_json():
    sampler = BucketSampler(load_real("commonvoice"), batch_size=32)
    state = sampler.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert len(json.dumps(state)) < 400


def test_unknown_state_keys_are_named_once_not_refused():
    """Keys a sampler does not know were ignored silently; callers may store their own, so
    they are named in one warning and the resume goes on."""
    import warnings

    lengths = [3, 5, 8, 8, 13, 21, 2, 9] * 4
    sampler = BucketSampler(lengths, num_buckets=2, batch_size=2, seed=1)
    it = iter(sampler)
    first = [next(it), next(it)]
    state = {**sampler.state_dict(), "my_step": 7}
    state["config"] = {**state["config"], "extra": 1}
    resumed = BucketSampler(lengths, num_buckets=2, batch_size=2, seed=1)
    with pytest.warns(UserWarning, match=r"does not know: my_step, config\['extra'\]") as rec:
        resumed.load_state_dict(state)
    assert len(rec) == 1
    again = BucketSampler(lengths, num_buckets=2, batch_size=2, seed=1)
    assert first + list(resumed) == list(again)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unedited state: no warning
        resumed.load_state_dict(sampler.state_dict())


@pytest.mark.slow
def test_torch_compile_compiles_once_per_promised_shape():
    """The promise as the compiler sees it: dynamic=False compiles exactly once per shape."""
    import torch._dynamo

    lengths = load_real("ecoli")
    sampler = BucketSampler(lengths, num_buckets=5, max_tokens=8192, seed=0)
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(tuple(example_inputs[0].shape))
        return gm.forward

    def run(shapes):
        torch._dynamo.reset()
        graphs.clear()
        layer = torch.nn.Linear(1, 4)
        step = torch.compile(
            lambda x: layer(x.unsqueeze(-1)).sum(), backend=counting_backend, dynamic=False
        )
        for shape in shapes:
            step(torch.zeros(shape))
        return len(graphs)

    table = sampler.shape_table
    planned = [table.target(lengths[idx]) for idx in sampler]
    with torch._dynamo.config.patch(cache_size_limit=1000, automatic_dynamic_shapes=False):
        assert run(planned) == len(set(planned)) == len(sampler.shapes) == 5
        # The same batches padded to their own longest sample: a compile per new shape.
        to_batch_max = [(len(idx), int(lengths[idx].max())) for idx in list(sampler)[:12]]
        assert run(to_batch_max) == len(set(to_batch_max)) > len(sampler.shapes)


def test_sampler_solves_once_through_the_cache(tmp_path):
    from bucketloader.cache import BucketCache

    lengths = load_real("ecoli")
    first = BucketCache(tmp_path, distributed=False)
    a = BucketSampler(lengths, num_buckets=8, batch_size=16, cache=first)
    assert (first.hits, first.misses) == (0, 1) and len(first) == 1
    second = BucketCache(tmp_path, distributed=False)
    b = BucketSampler(lengths, num_buckets=8, batch_size=16, cache=second)
    assert (second.hits, second.misses) == (1, 0)
    np.testing.assert_array_equal(a.boundaries, b.boundaries)
    with pytest.raises(TypeError, match="cache cannot be combined with a BucketSpec"):
        BucketSampler(a.spec, cache=second)


def test_a_collator_option_typo_names_the_closest_option():
    sampler = BucketSampler([3, 4, 9, 10], num_buckets=2, batch_size=2)
    with pytest.raises(
        TypeError,
        match=r"BucketSampler.collator\(\) got an unexpected option "
        r"pad_valu=-1; did you mean pad_value=\?",
    ):
        sampler.collator(pad_valu=-1)
    assert sampler.collator(pad_value=-1).pad_value == -1


def test_a_token_count_as_batch_size_is_warned_about_once():
    """s14 left it: ``BucketSampler(lengths, batch_size=16384)`` over 1,000 samples (a token
    budget passed as batch_size) planned 4 batches of 16,384 rows, 98% of them filler, silently.
    One warning now names the counts and both fixes; max_tokens plans, batches that fit in the
    epoch, and last_batch options without filler are not warned about."""
    lengths = np.random.default_rng(0).integers(10, 500, 1000)
    with pytest.warns(
        UserWarning, match=r"^64,536 of this BucketSampler's 65,536 rows per ep"
    ) as got:
        sampler = BucketSampler(lengths, num_buckets=4, batch_size=16384)
    assert len([w for w in got if "filler rows" in str(w.message)]) == 1
    assert "more than the 1,000 samples of the whole epoch" in str(got[0].message)
    assert "pass max_tokens=<tokens per batch>" in str(got[0].message)
    assert sampler.shapes == [(16384, b) for b in sampler.boundaries]
    with pytest.warns(UserWarning, match=r"a batch holds up to 600 rows, more than the 499 samp"):
        BucketSampler(lengths[:499], num_buckets=2, batch_size=600, num_replicas=2, rank=1)
    with pytest.warns(UserWarning, match=r"up to 4 rows, more than the 1 sample of the whole"):
        BucketSampler([5], num_buckets=1, batch_size=4)  # (s30-first: was "the 1 samples")
    quiet = [
        dict(num_buckets=4, batch_size=64),
        dict(num_buckets=4, batch_size=1000),  # one batch the size of the epoch
        dict(num_buckets=4, batch_size=16384, last_batch="keep"),
        dict(num_buckets=4, batch_size=256, last_batch="drop"),
        dict(num_buckets=4, max_tokens=16384),
        dict(num_buckets=2, batch_size=300, num_replicas=4, rank=3),  # a small set over ranks
    ]
    for options in quiet:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", message=r".*last_batch='drop'")
            BucketSampler(lengths, **options)


@pytest.mark.parametrize("last_batch", ["pad", "keep"])
@pytest.mark.parametrize("budget", [{"batch_size": 8}, {"max_tokens": 2400}])
def test_repeats_for_ranks_without_a_sample_are_warned_about(last_batch, budget):
    """s28-user: 100 samples in 8 buckets over 16 ranks repeated 28 of them an epoch (over 1,000
    ranks 7,900, each sample about 80 times), silently, where "fill" and accumulate warn at 5%.
    The warning's count is report()'s; real sets over 8 ranks repeat a few rows: no warning."""
    lengths = np.random.default_rng(0).integers(5, 200, size=100)
    options = dict(num_buckets=8, last_batch=last_batch, num_replicas=16, rank=3, **budget)
    with pytest.warns(UserWarning, match=r"repeats [\d,]+ samples per epoch over 16 ranks") as got:
        sampler = BucketSampler(lengths, **options)
    said = [str(w.message) for w in got if "over 16 ranks" in str(w.message)]
    assert len(said) == 1 and "Fewer num_buckets (or fewer ranks)" in said[0]
    assert f"repeats {sampler.report().totals['repeated']:,} samples" in said[0]
    for quiet in (
        dict(lengths=lengths, num_buckets=8, num_replicas=2, rank=1),  # no repeat at all
        dict(lengths=load_real("ecoli"), num_buckets=16, num_replicas=8, rank=0),  # 6 (0.14%)
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            BucketSampler(**quiet, last_batch=last_batch, **budget)


def test_a_resume_on_other_ranks_plans_the_saved_ranks_digest_once(monkeypatch):
    # s32-fin2: load_state_dict ran _digest_on (for_replicas and the promotion over K buckets)
    # two to three times per resume of a BucketSampler state from other ranks; now once
    lengths = np.random.default_rng(0).integers(1, 300, 2_000)
    opts = dict(num_buckets=4, max_tokens=4096, seed=1)
    saved = BucketSampler(lengths, num_replicas=4, rank=0, **opts)
    saved.set_epoch(2)
    state = json.loads(json.dumps(saved.state_dict()))
    here = BucketSampler(lengths, num_replicas=2, rank=0, **opts)
    calls = []
    planned = BucketSampler._digest_on
    monkeypatch.setattr(
        BucketSampler, "_digest_on", lambda self, n: calls.append(n) or planned(self, n)
    )
    here.load_state_dict(state)
    assert calls == [4] and (here.epoch, here.state_dict()["batches_yielded"]) == (2, 0)
