"""Exact resume behind DataLoader workers; a new pass without set_epoch (issue 22, traps 1-2)."""

from __future__ import annotations

import gc
import inspect
import json
import logging
import signal
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bucketloader import BucketSampler, PackSampler
from bucketloader.loader import ResumableDataLoader
from bucketloader.sharded import ShardedSampler

N = 3000
LENGTHS = np.random.default_rng(0).integers(5, 400, N)
OPTIONS = dict(num_buckets=4, batch_size=32, seed=3)


def _indices(batch):
    return batch.tolist() if hasattr(batch, "tolist") else list(batch)


def collate(samples):  # module level: picklable for the workers
    return samples


def _resume_run(make_loader, load, *, epoch=1, stop=17):
    """The issue's replay: train 17 batches, checkpoint, restart, finish the epoch."""
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    sampler.set_epoch(epoch)
    loader, state_of = make_loader(sampler)
    seen = []
    for step, batch in enumerate(loader):
        seen += _indices(batch)
        if step + 1 == stop:
            state = json.loads(json.dumps(state_of(loader, sampler)))
            break
    _stop(loader)  # the workers stop; a real job would crash here
    fresh = BucketSampler(LENGTHS, **OPTIONS)
    loader2, _ = make_loader(fresh)
    load(loader2, fresh, state)
    for batch in loader2:
        seen += _indices(batch)
    return seen, state


def _stop(loader):
    it = getattr(loader, "_iterator", None)
    shutdown = getattr(getattr(it, "_inner", it), "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    gc.collect()


def test_sampler_dataloader_resumes_exactly_behind_workers():
    def make(sampler):
        return sampler.dataloader(list(range(N)), num_workers=2, collate_fn=collate), None

    def state_of(loader, sampler):
        return sampler.state_dict()  # the README's call, no batches_consumed

    def load(loader, sampler, state):
        sampler.load_state_dict(state)

    def make_loader(sampler):
        loader, _ = make(sampler)
        return loader, state_of

    seen, state = _resume_run(make_loader, load)
    assert state["batches_yielded"] == 17 and state["epoch"] == 1
    assert len(seen) == N and len(set(seen)) == N  # 3,000 of 3,000 seen, no duplicates


def test_loader_state_dict_is_the_samplers_and_counts_the_loop():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = sampler.dataloader(list(range(N)), num_workers=2, collate_fn=collate)
    assert isinstance(loader, ResumableDataLoader)
    it = iter(loader)
    for _ in range(5):
        next(it)
    assert sampler._yielded > 5  # the workers ran ahead ...
    assert loader.state_dict()["batches_yielded"] == 5  # ... the state did not
    del it


def test_stateful_dataloader_resumes_exactly():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make_loader(sampler):
        loader = stateful.StatefulDataLoader(
            list(range(N)), batch_sampler=sampler, num_workers=2, collate_fn=collate
        )
        return loader, lambda loader, sampler: loader.state_dict()

    def load(loader, sampler, state):
        loader.load_state_dict(state)

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*ahead of your loop")  # must not fire here
        seen, _ = _resume_run(make_loader, load, epoch=0)
    assert len(seen) == N and len(set(seen)) == N


def test_plain_dataloader_with_workers_warns_once_when_state_runs_ahead():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = DataLoader(list(range(N)), batch_sampler=sampler, num_workers=2, collate_fn=collate)
    it = iter(loader)
    for _ in range(3):
        next(it)
    with pytest.warns(UserWarning, match=r"sampler.dataloader\(dataset.*batches_consumed"):
        assert sampler.state_dict()["batches_yielded"] > 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.state_dict()  # once
        assert sampler.state_dict(batches_consumed=3)["batches_yielded"] == 3
    del it


def test_single_process_loader_is_exact_and_silent():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = DataLoader(list(range(N)), batch_sampler=sampler, collate_fn=collate)
    it = iter(loader)
    for _ in range(4):
        next(it)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sampler.state_dict()["batches_yielded"] == 4


# -- trap 2: a second pass without set_epoch ------------------------------------------------------
def test_second_pass_without_set_epoch_advances_the_epoch(caplog):
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    ref = BucketSampler(LENGTHS, **OPTIONS)
    with caplog.at_level(logging.INFO, logger="bucketloader.sampler"):
        first, second, third = list(sampler), list(sampler), list(sampler)
    assert first != second != third
    ref.set_epoch(1)
    assert second == list(ref)
    assert sampler.epoch == 2
    assert sum("without set_epoch" in r.getMessage() for r in caplog.records) == 1  # once


def test_set_epoch_every_pass_behaves_as_before():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    runs = []
    for epoch in (0, 1, 1):
        sampler.set_epoch(epoch)
        runs.append(list(sampler))
    assert runs[0] != runs[1] and runs[1] == runs[2]  # set_epoch(1) twice repeats on purpose
    assert sampler.epoch == 1
    # a state saved after set_epoch(1) again (its pass finished, or left early) is the epoch's
    # start, as the next pass is (s25-user: it said the finished pass's position, and a resume
    # skipped the repeated epoch); a pending resume in that epoch is kept
    for stop in (None, 3):
        for i, _ in enumerate(sampler):
            if i == stop:
                break
        sampler.set_epoch(1)
        resumed = BucketSampler(LENGTHS, **OPTIONS)
        resumed.load_state_dict(sampler.state_dict())
        assert list(resumed) == runs[1]
    resumed = BucketSampler(LENGTHS, **OPTIONS)
    resumed.load_state_dict({**sampler.state_dict(), "batches_yielded": 2})
    resumed.set_epoch(1)
    assert resumed.state_dict()["batches_yielded"] == 2 and list(resumed) == runs[1][2:]


def test_a_pass_left_early_restarts_the_same_epoch():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    full = list(BucketSampler(LENGTHS, **OPTIONS))
    for i, _ in enumerate(sampler):
        if i == 3:
            break
    assert list(sampler) == full and sampler.epoch == 0


def test_loader_passes_advance_and_resume_after_a_finished_epoch():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = sampler.dataloader(list(range(N)), collate_fn=collate)
    one = [b for b in loader]
    two = [b for b in loader]
    assert one != two and sampler.epoch == 1
    state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (1, len(sampler))


def test_pack_sampler_gets_the_same_behaviour():
    sampler = PackSampler(LENGTHS, row_length=512, batch_size=4, seed=1)
    a, b = list(sampler), list(sampler)
    assert a != b and sampler.epoch == 1


# -- trap 6: typos and the wrong DataLoader argument -----------------------------------------------
def test_a_typo_names_the_sampler_and_the_closest_option():
    with pytest.raises(
        TypeError,
        match=r"^BucketSampler got an unexpected option num_bucket=8; "
        r"did you mean num_buckets=\?",
    ):
        BucketSampler(LENGTHS, num_bucket=8)
    with pytest.raises(TypeError, match=r"PackSampler .*batch_sise=2; did you mean batch_size="):
        PackSampler(LENGTHS, row_length=512, batch_sise=2)
    with pytest.raises(TypeError, match=r"did you mean shuffle="):
        BucketSampler(LENGTHS, shufle=False)


def test_a_dataloader_typo_names_the_closest_option():
    sampler = BucketSampler(LENGTHS, num_buckets=2, batch_size=4)
    with pytest.raises(  # (was torch's "DataLoader.__init__() got an unexpected keyword")
        TypeError,
        match=r"^dataloader\(\) got an unexpected option num_worker=2; did you mean "
        r"num_workers=\?; its options: .*pin_memory",
    ):
        sampler.dataloader(list(range(len(LENGTHS))), num_worker=2)


@pytest.mark.parametrize("which", ["bucket", "pack", "sharded", "eval"])
def test_dataloader_refuses_batches_out_of_order(which):
    # s29-user: in_order=False (torch >= 2.6) hands the loop a slow batch after later ones;
    # the state counted the first n batches of the plan, so a resume after batches 0, 1, 3, 4
    # skipped batch 2 and repeated batch 4 (8 samples each), silently
    if "in_order" not in inspect.signature(DataLoader.__init__).parameters:
        pytest.skip("this torch's DataLoader has no in_order option")
    from bucketloader import EvalSampler

    make = {
        "bucket": lambda: BucketSampler(LENGTHS, **OPTIONS),
        "pack": lambda: PackSampler(LENGTHS, row_length=400, batch_size=4),
        "sharded": lambda: ShardedSampler(LENGTHS, num_buckets=4, batch_size=32),
        "eval": lambda: EvalSampler(LENGTHS, num_buckets=4, batch_size=32),
    }[which]
    dataset = [[1] * int(n) for n in LENGTHS]
    for value in (False, None, 0):  # (torch reads it by truth: None and 0 are out of order too)
        with pytest.raises(
            ValueError,
            match=rf"^dataloader\(\) got in_order={value}: .*Leave in_order out \(True\)$",
        ):
            make().dataloader(dataset, num_workers=2, in_order=value)
    assert make().dataloader(dataset, num_workers=2, in_order=True) is not None
    if which == "eval":
        return  # (its dataloader() is torch's own, which counts nothing)
    # built directly, as its docstring allows (s30-rev: it took in_order=False unchecked)
    with pytest.raises(ValueError, match=r"^ResumableDataLoader got in_order=False: "):
        ResumableDataLoader(dataset, batch_sampler=make(), num_workers=2, in_order=False)
    plain = ResumableDataLoader(dataset, batch_sampler=[[0, 1]], num_workers=2, in_order=False)
    assert plain.in_order is False  # (a batch sampler of its own: nothing counted, left alone)


def test_dataloader_sampler_instead_of_batch_sampler_says_which_argument():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = DataLoader(list(range(N)), sampler=sampler, collate_fn=collate)
    with pytest.raises(TypeError, match=r"batch_sampler=sampler"):
        next(iter(loader))
    data = np.arange(N)  # a dataset that takes a list of indices (as a datasets.Dataset does)
    loader = DataLoader(data, sampler=sampler, batch_size=None, collate_fn=collate)
    assert len(next(iter(loader))) == 32  # no batching by torch: left alone


class _OneBadSample(torch.utils.data.Dataset):
    """A dataset whose sample ``bad`` is corrupt (module level: picklable for the workers)."""

    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return N

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"corrupt sample {i}")
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_a_batch_that_raised_is_used_up_and_a_later_state_repeats_nothing(workers):
    # s29-user: a loop that skips the batch holding a corrupt sample got the next batch from
    # torch's iterator, but the count left the failed batch out: a state saved 10 trained
    # batches later resumed one batch early and trained the batch before it again, silently
    plan = [list(b) for b in BucketSampler(LENGTHS, **OPTIONS)]
    bad = plan[3][0]
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    it = iter(sampler.dataloader(_OneBadSample(bad), num_workers=workers, collate_fn=collate))
    trained = []
    while len(trained) < 10:
        try:
            trained.append(next(it))
        except ValueError as exc:
            assert "corrupt sample" in str(exc)
    state = sampler.state_dict()
    assert state["batches_yielded"] == 11  # 10 trained, 1 raised
    del it
    resumed = BucketSampler(LENGTHS, **OPTIONS)
    resumed.load_state_dict(state)
    assert trained + [list(b) for b in resumed] == plan[:3] + plan[4:]


def test_a_dead_worker_does_not_count_the_batch_it_never_made():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    # (torch notices the dead workers when its queue stays empty for ``timeout`` seconds: it
    # raises "DataLoader worker ... exited unexpectedly", as at 5 s, which the test waited)
    loader = sampler.dataloader(list(range(N)), num_workers=2, collate_fn=collate, timeout=1)
    it = iter(loader)
    got = [next(it) for _ in range(2)]
    # (torch's SIGCHLD handler raises "is killed by signal" wherever it runs: between a kill
    # and the join that reaps the worker, out here (1 run of 23); the loop below is the place)
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for worker in it._inner._workers:
        worker.kill()
        worker.join()
    signal.signal(signal.SIGCHLD, handler)
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        while True:  # (the batches already made may still come)
            got.append(next(it))
    assert sampler.state_dict()["batches_yielded"] == len(got)
    del it


def test_iterating_directly_after_a_loader_pass_counts_again():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    loader = sampler.dataloader(list(range(N)), collate_fn=collate)
    it = iter(loader)
    for _ in range(3):
        next(it)
    assert sampler.state_dict()["batches_yielded"] == 3
    del it
    direct = iter(sampler)  # the same epoch again, by hand
    next(direct)
    assert sampler.state_dict()["batches_yielded"] == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: BucketSampler(LENGTHS, **OPTIONS),
        # s14: PackSampler.report() counted the batches the workers had prefetched (10 here)
        lambda: PackSampler(LENGTHS, row_length=512, batch_size=8, seed=3),
        # s27: ShardedSampler's report had no position (nor padding, totals, as_dict, str)
        lambda: ShardedSampler(LENGTHS, num_replicas=1, rank=0, **OPTIONS),
    ],
    ids=["bucket", "pack", "sharded"],
)
def test_report_counts_what_the_loop_received(make):
    sampler = make()
    loader = sampler.dataloader(list(range(N)), num_workers=2, collate_fn=collate)
    it = iter(loader)
    for _ in range(6):
        next(it)
    report = sampler.report()
    assert report.batches_done == 6 and report.batches_left == len(sampler) - 6
    del it
    # and every other path: a resumed sampler before its pass, in-process iteration, an epoch on
    again = make()
    again.load_state_dict(sampler.state_dict())
    assert again.report().batches_done == 6
    alone = iter(again)
    next(alone)
    assert again.report().batches_done == 7
    again.set_epoch(1)
    assert again.report().batches_done == 0
    next(iter(again))
    assert again.report().batches_done == 1
    # the protocol every producer's report speaks
    report = again.report()
    assert report.epoch == 1 and report.batches_left == len(again) - 1
    assert 0 < report.padding < 1 and report.totals["batches"] == len(again)
    assert json.loads(json.dumps(report.as_dict()))["batches_done"] == 1
    assert str(report).startswith("epoch 1 (") and f"padding {report.padding:.2%}" in str(report)


@pytest.mark.parametrize(
    "make",
    [
        lambda: BucketSampler(LENGTHS, **OPTIONS),
        lambda: PackSampler(LENGTHS, row_length=512, batch_size=8, seed=3),
    ],
    ids=["bucket", "pack"],
)
def test_a_resumed_run_checkpoints_from_where_it_started(make):
    """A run resumed twice: a checkpoint taken before the first batch after a restore keeps
    the restored position, and one taken behind a loader counts the batches before the
    restore too (the loader counts only its own pass)."""
    whole = list(make())
    first = make()
    it = iter(first.dataloader(list(range(N)), collate_fn=collate))
    seen = [next(it) for _ in range(4)]
    again = make()
    again.load_state_dict(first.state_dict())
    assert again.state_dict()["batches_yielded"] == 4  # (nothing drawn yet)
    it = iter(again.dataloader(list(range(N)), collate_fn=collate))
    seen += [next(it) for _ in range(3)]
    assert again.state_dict()["batches_yielded"] == 7 and again.report().batches_done == 7
    third = make()
    third.load_state_dict(json.loads(json.dumps(again.state_dict())))
    seen += list(third)
    assert [_indices(b) for b in seen] == [_indices(b) for b in whole]


# -- s10: what collate_fn=None means in every dataloader() ----------------------------------------
def _every_dataloader_sampler():
    from bucketloader import EvalSampler
    from bucketloader.sharded import ShardedSampler

    lengths = LENGTHS[:64]
    options = dict(num_buckets=2, batch_size=8)
    return [
        BucketSampler(lengths, **options, seed=1),
        PackSampler(lengths, row_length=512, batch_size=2, seed=1),
        ShardedSampler(lengths, num_replicas=1, rank=0, **options),
        EvalSampler(lengths, **options),
    ]


@pytest.mark.parametrize("which", range(4))
def test_collate_fn_none_means_torch_default_and_leaving_it_out_the_collator(which):
    """s10: ``collate_fn=None`` meant the sampler's collator in ``EvalSampler.dataloader`` but
    torch's default_collate in the others. Everywhere it now means what it means to
    ``DataLoader``: torch's default; left out, the sampler's collator. EvalSampler, whose
    None meant the collator, refuses it loudly (torch's default would count its filler rows
    as samples) and says how to ask for either."""
    from torch.utils.data import default_collate

    sampler = _every_dataloader_sampler()[which]
    tokens = [[1] * int(n) for n in LENGTHS[:64]]
    first = next(iter(sampler.dataloader(tokens)))  # left out: the collator's padded batch
    key = "input_ids" if "input_ids" in first else "inputs"  # (PackCollator: input_ids)
    assert isinstance(first, dict) and tuple(first[key].shape) in sampler.shapes
    ids = list(range(64))
    if type(sampler).__name__ == "EvalSampler":
        with pytest.raises(TypeError, match=r"collate_fn=None.* torch's default_collate"):
            sampler.dataloader(ids, collate_fn=None)
        batch = next(iter(sampler.dataloader(ids, collate_fn=default_collate)))  # asked for
    else:
        batch = next(iter(sampler.dataloader(ids, collate_fn=None)))
        again = next(iter(DataLoader(ids, batch_sampler=sampler, collate_fn=None)))
        assert torch.equal(batch, again)  # what DataLoader(collate_fn=None) gives
    assert isinstance(batch, torch.Tensor) and batch.dtype == torch.int64


# -- a dataset that disagrees with the lengths (s10-user D2) ---------------------------------------
def _mismatch_samplers():
    from bucketloader import EvalSampler
    from bucketloader.sharded import ShardedSampler

    lengths = LENGTHS[:100]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {
            "bucket": BucketSampler(lengths, **OPTIONS),
            "pack": PackSampler(lengths, row_length=512, batch_size=4, seed=1),
            "eval": EvalSampler(lengths, num_buckets=2, batch_size=8),
            "sharded": ShardedSampler(lengths, num_replicas=1, rank=0, num_buckets=2, batch_size=8),
        }


@pytest.mark.parametrize("kind", ["bucket", "pack", "eval", "sharded"])
@pytest.mark.parametrize("size", [50, 200])
def test_dataloader_refuses_a_dataset_of_another_size(kind, size):
    sampler = _mismatch_samplers()[kind]
    with pytest.raises(ValueError, match=rf"dataset has {size} samples .* lengths for 100;") as e:
        sampler.dataloader(list(range(size)))
    assert ("Subset(dataset, range(100))" in str(e.value)) == (size > 100)
    assert len(list(sampler.dataloader(list(range(100)), collate_fn=collate))) == len(sampler)


@pytest.mark.parametrize("kind", ["bucket", "pack", "eval", "sharded"])
def test_dataloader_names_a_dataset_dict_of_splits(kind):
    """s34-user: a DatasetDict (what load_dataset returns) given where its train split goes
    was told "dataset has 1 samples but ... lengths for 100", its number of splits."""
    datasets = pytest.importorskip("datasets")
    sampler = _mismatch_samplers()[kind]
    split = datasets.Dataset.from_dict({"x": list(range(100))})
    for splits in (datasets.DatasetDict({"train": split}), {"train": split, "test": split}):
        with pytest.raises(
            ValueError,
            match=r"dataset is a \w+ of the splits \['train'.*\], not a dataset of samples .*"
            r"pass the split the lengths were read from, e.g. dataset\['train'\]$",
        ):
            sampler.dataloader(splits)
    with pytest.raises(ValueError, match=r"^dataset has 2 samples"):  # (keys of samples: size)
        sampler.dataloader({0: 0, 1: 1})


def test_sharded_dataloader_with_global_ids_takes_the_whole_dataset():
    from bucketloader.sharded import ShardedSampler

    ids = np.arange(50, 150)
    sampler = ShardedSampler(
        LENGTHS[ids], shard_indices=ids, num_replicas=1, rank=0, num_buckets=2, batch_size=8
    )
    got = sorted(i for b in sampler.dataloader(list(range(300)), collate_fn=collate) for i in b)
    assert got == list(range(50, 150))
    with pytest.raises(ValueError, match=r"dataset has 120 samples .* at least 150;"):
        sampler.dataloader(list(range(120)))
