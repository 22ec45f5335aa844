"""One resume harness: start / middle / end of epoch / next epoch, over shuffle, policies, ranks."""

from __future__ import annotations

import functools
import json
import warnings

import numpy as np
import pytest
import torch
from conftest import load_real
from torch.utils.data import DataLoader

from bucketloader._types import LAST_BATCH
from bucketloader.evaluation import EvalSampler
from bucketloader.pack import PackSampler
from bucketloader.plan import BucketSpec, TokenBudget
from bucketloader.sampler import BucketSampler

EPOCH = 2
POSITIONS = ("start", "middle", "end", "next_epoch")


@functools.cache
def spec_for(last_batch: str) -> BucketSpec:
    return BucketSpec.build(
        load_real("ecoli"), num_buckets=5, max_tokens=6000, last_batch=last_batch
    )


def roundtrip(state):
    return json.loads(json.dumps(state))


def check_resume(make, position):
    """Resuming from a state saved at ``position`` yields exactly the remaining batches of that
    epoch and then the same next epoch as an uninterrupted run."""
    ref = make()
    ref.set_epoch(EPOCH)
    this_epoch = list(ref)
    ref.set_epoch(EPOCH + 1)
    next_epoch = list(ref)
    assert len(this_epoch) == len(next_epoch) == len(ref)

    live = make()
    live.set_epoch(EPOCH)
    it = iter(live)
    k = {"start": 0, "middle": len(this_epoch) // 2, "end": len(this_epoch)}.get(position)
    for _ in range(len(this_epoch) if k is None else k):
        next(it)
    if position == "next_epoch":
        assert next(it, None) is None
        live.set_epoch(EPOCH + 1)
        k = 0
    state = roundtrip(live.state_dict())
    assert state["batches_yielded"] == k

    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])  # a training loop re-sets the epoch; the position stays
    expected = next_epoch if position == "next_epoch" else this_epoch[k:]
    assert list(resumed) == expected
    if position != "next_epoch":
        resumed.set_epoch(EPOCH + 1)
        assert list(resumed) == next_epoch


@pytest.mark.filterwarnings("ignore:this BucketSampler leaves out")
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("num_replicas", [1, 3])
@pytest.mark.parametrize("last_batch", LAST_BATCH)
@pytest.mark.parametrize("shuffle", [True, False])
def test_resume(shuffle, last_batch, num_replicas, position):
    for rank in {0, num_replicas - 1}:
        check_resume(
            lambda r=rank: BucketSampler(
                spec_for(last_batch), shuffle=shuffle, seed=11, num_replicas=num_replicas, rank=r
            ),
            position,
        )


@pytest.mark.parametrize("position", POSITIONS)
def test_resume_multi_input_groups(position):
    pairs = load_real("gsm8k")[:3000]
    spec = BucketSpec.build(
        pairs,
        num_buckets=3,
        max_tokens=4096,
        max_shapes=5,
        groups=np.arange(3000) % 2,
        last_batch="keep",
    )
    check_resume(lambda: BucketSampler(spec, seed=3, num_replicas=2, rank=1), position)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize(
    "joint, accumulate, weights", [(False, 1, None), (True, 1, None), (False, 3, None),
                                   (False, 1, [1, 2])]
)  # fmt: skip
def test_resume_fill_of_a_small_bucket(joint, accumulate, weights, position):
    # NOTE [ Filling a small bucket ]: the shorter samples drawn into the longest bucket's step
    # are part of the pure plan (one input; two inputs with groups; accumulation groups, the
    # longest group first; a weighted epoch's passes over two datasets)
    if weights is not None:
        spec = BucketSpec.build(load_real("ecoli")[:2000], num_buckets=6, batch_size=32,
                                groups=np.arange(2000) % 2, last_batch="fill")  # fmt: skip
    elif joint:
        pairs = load_real("gsm8k")[:3000]
        spec = BucketSpec.build(pairs, num_buckets=3, batch_size=48, max_shapes=5,
                                groups=np.arange(3000) % 2, last_batch="fill")  # fmt: skip
    else:
        spec = BucketSpec.build(load_real("ecoli")[:2000], num_buckets=6, batch_size=32,
                                last_batch="fill")  # fmt: skip
    make = functools.partial(BucketSampler, spec, seed=5, num_replicas=4, rank=3, weights=weights,
                             accumulate=accumulate, longest_first=accumulate > 1)  # fmt: skip
    assert make()._fill_pools
    check_resume(make, position)


@pytest.fixture(scope="module")
def mixed_spec():
    """Every shaping option of issues 12 and 14 at once: filters, truncation, a capped token
    budget with a batch multiple, pad multiples, groups."""
    a, b = load_real("ecoli"), load_real("commonvoice")[:2000] // 10
    return BucketSpec.build(
        np.concatenate([a, b]),
        groups=np.repeat([0, 1], [a.size, b.size]),
        num_buckets=4,
        max_tokens=TokenBudget(8000, max_batch_size=48, multiple_of=8, oversize="single"),
        min_length=20,
        max_length=1500,
        overflow="truncate",
        pad_to_multiple_of=16,
        last_batch="fill",
    )


@pytest.mark.parametrize("position", POSITIONS)
def test_resume_weights_longest_first_and_filters(mixed_spec, position):
    check_resume(
        lambda: BucketSampler(
            mixed_spec, seed=9, num_replicas=2, rank=1, weights=[1, 3], longest_first=True
        ),
        position,
    )


def test_state_saved_on_one_rank_restores_another():
    state = BucketSampler(spec_for("pad"), num_replicas=2, rank=0)
    state.set_epoch(1)
    it = iter(state)
    next(it)
    saved = roundtrip(state.state_dict())
    other = BucketSampler(spec_for("pad"), num_replicas=2, rank=1)
    other.load_state_dict(saved)
    ref = BucketSampler(spec_for("pad"), num_replicas=2, rank=1)
    ref.set_epoch(1)
    assert list(other) == list(ref)[1:]


def test_resume_behind_a_prefetching_dataloader():
    sampler = BucketSampler(spec_for("pad"), seed=4)
    loader = DataLoader(
        list(range(spec_for("pad").lengths.size)),
        batch_sampler=sampler,
        num_workers=1,
        prefetch_factor=3,
        collate_fn=torch.tensor,
    )
    consumed = []
    for step, batch in enumerate(loader):
        consumed.append(batch.tolist())
        if step == 4:
            break
    with pytest.warns(UserWarning, match="ahead of your loop"):
        assert sampler.state_dict()["batches_yielded"] > 5, "the DataLoader runs ahead"
    state = roundtrip(sampler.state_dict(batches_consumed=5))
    resumed = BucketSampler(spec_for("pad"), seed=4)
    resumed.load_state_dict(state)
    ref = BucketSampler(spec_for("pad"), seed=4)
    assert consumed + list(resumed) == list(ref)


def test_batches_consumed_past_the_batches_handed_out_is_refused():
    """s28-user: ``state_dict(batches_consumed=5)`` after 2 batches was accepted, and the resume
    skipped 3 batches no loop had received (24 of 200 samples never seen that epoch): a global
    step, a sample count or a count taken after ``set_epoch`` passed by mistake."""
    lengths = list(range(1, 201))
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=8, seed=0)
    it = iter(sampler)
    next(it), next(it)
    with pytest.raises(ValueError, match=r"batches_consumed=5 is more than the 2 batches this "):
        sampler.state_dict(batches_consumed=5)
    assert sampler.state_dict(batches_consumed=2)["batches_yielded"] == 2
    list(it)
    sampler.set_epoch(1)  # the next epoch: nothing of it handed out yet
    with pytest.raises(ValueError, match=r"handed out in epoch 1"):
        sampler.state_dict(batches_consumed=len(sampler))
    resumed = BucketSampler(lengths, num_buckets=4, batch_size=8, seed=0)
    resumed.load_state_dict({**sampler.state_dict(), "epoch": 0, "batches_yielded": 3})
    assert resumed.state_dict(batches_consumed=3)["batches_yielded"] == 3  # the resume point
    evaluation = EvalSampler(lengths, num_buckets=4, batch_size=8)
    next(iter(evaluation))
    with pytest.raises(ValueError, match=r"the 1 batches this EvalSampler has handed out"):
        evaluation.state_dict(batches_consumed=2)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"seed": 12}, "seed=11 in the state but seed=12 in this sampler"),
        ({"shuffle": False}, "shuffle=True in the state but shuffle=False"),
        # (num_replicas: this state, saved before epoch 0's first batch, now loads on 2 ranks;
        # test_a_state_between_epochs_loads_on_another_number_of_ranks refuses one mid-epoch)
        ({"last_batch": "drop"}, "last_batch='pad' in the state but last_batch='drop'"),
        # (s21: a grown dataset or a new max_tokens named no argument and no way on; s29: the
        # state is saved before epoch 0's first batch, so the way on is epoch 0, not 1)
        (
            {"lengths": True},
            r"num_samples=4390 .*another number of samples.*set_epoch\(0\) \(the state was "
            "saved before",
        ),
        (
            {"max_tokens": 7000},
            r"num_batches=285 in this sampler \(batch_size, max_tokens.*set_epoch",
        ),
        ({"reverse": True}, r"plan_digest=.* \(the lengths, boundaries, row lengths, batch sizes"),
        ({"longest_first": True}, "longest_first=False in the state but longest_first=True"),
    ],
)
def test_state_from_another_configuration_is_refused(change, match):
    saved = roundtrip(BucketSampler(spec_for("pad"), seed=11).state_dict())
    lengths = load_real("ecoli")[:-1] if change.pop("lengths", False) else load_real("ecoli")
    lengths = lengths[::-1] if change.pop("reverse", False) else lengths  # same counts, new order
    spec = BucketSpec.build(
        lengths,
        num_buckets=5,
        max_tokens=change.pop("max_tokens", 6000),
        last_batch=change.pop("last_batch", "pad"),
    )
    other = BucketSampler(spec, **{"seed": 11, **change})
    with pytest.raises(ValueError, match=match):
        other.load_state_dict(saved)


def test_malformed_states_are_refused():
    sampler = BucketSampler(spec_for("pad"))
    good = sampler.state_dict()
    with pytest.raises(ValueError, match="state is missing"):
        sampler.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="version=2 but this BucketSampler reads version=1"):
        sampler.load_state_dict({**good, "version": 2})
    with pytest.raises(ValueError, match="exceeds the epoch's"):
        sampler.load_state_dict({**good, "batches_yielded": len(sampler) + 1})
    with pytest.raises(ValueError, match=r"state\['epoch'\] must be an int >= 0"):
        sampler.load_state_dict({**good, "epoch": -1})
    with pytest.raises(TypeError, match="state must be a dict"):
        sampler.load_state_dict([1, 2])


def test_a_path_is_told_to_be_loaded_and_numpy_integers_are_accepted(tmp_path):
    """s29-user: load_state_dict("state.json") said only "state must be a dict ... got
    'state.json'", and a state holding np.int64 positions (rebuilt from arrays) was refused as
    "must be an int"; now the path is told to be json.load-ed (a stream's too), and numpy
    integers resume as the ints they are, the caller's dict left as it was."""
    from bucketloader.stream import BucketIterable

    make = functools.partial(BucketSampler, spec_for("pad"))
    live = make()
    live.set_epoch(1)
    it = iter(live)
    rest = [next(it) for _ in range(3)] and list(it)
    state = live.state_dict()
    (tmp_path / "state.json").write_text(json.dumps(state))
    stream = BucketIterable(list(range(9)), boundaries=[4, 9], batch_size=2, length_fn=int)
    for owner, name in ((make(), "sampler"), (stream, "stream")):
        for path in ("state.json", tmp_path / "state.json"):
            with pytest.raises(TypeError, match=rf"got the \w+ .*state\.json.*{name}\.load_s"):
                owner.load_state_dict(path)
    held = {**state, "epoch": np.int64(1), "batches_yielded": np.int64(3)}
    resumed = make()
    resumed.load_state_dict(held)
    assert list(resumed) == rest and type(held["epoch"]) is np.int64
    assert resumed.state_dict()["batches_yielded"] == len(resumed)
    for bad in (np.float64(3), np.bool_(True), True):
        with pytest.raises(ValueError, match=r"state\['batches_yielded'\] must be an int"):
            make().load_state_dict({**state, "batches_yielded": bad})


def test_a_state_from_another_world_size_names_what_resumes():
    """A job restarted on 2 ranks with a state saved on 4 was told to "build the sampler exactly
    as when the state was saved", which it cannot: the error now says a state resumes its
    epoch on as many ranks as saved it, and names the set_epoch that goes on."""
    lengths = load_real("ecoli")[:600]
    saved = BucketSampler(lengths, num_replicas=4, rank=3, num_buckets=4, batch_size=8, seed=1)
    saved.set_epoch(2)
    next(iter(saved))
    state = roundtrip(saved.state_dict())
    other = BucketSampler(lengths, num_replicas=2, rank=0, num_buckets=4, batch_size=8, seed=1)
    with pytest.raises(ValueError, match="num_replicas=4 in the state but num_replicas=2") as exc:
        other.load_state_dict(state)
    assert "resumes its epoch only on as many ranks" in str(exc.value)
    assert "sampler.set_epoch(3)" in str(exc.value) and "set_epoch(2) runs" in str(exc.value)
    # the state holds no rank: rank 3's state resumes rank 0 on 4 ranks
    same = BucketSampler(lengths, num_replicas=4, rank=0, num_buckets=4, batch_size=8, seed=1)
    same.load_state_dict(state)
    assert len(list(same)) == len(same) - 1
    # an evaluation's batches are the same every epoch: it says to evaluate again
    ev = EvalSampler(lengths, num_replicas=4, rank=3, num_buckets=4, batch_size=8)
    next(iter(ev))
    other_ev = EvalSampler(lengths, num_replicas=2, rank=0, num_buckets=4, batch_size=8)
    with pytest.raises(ValueError, match="num_replicas=4 in the state but num_replicas=2") as exc:
        other_ev.load_state_dict(roundtrip(ev.state_dict()))
    assert "evaluate again from the start" in str(exc.value)
    assert "set_epoch" not in str(exc.value)


@pytest.mark.parametrize("change", ["seed", "num_samples"])
@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_state_at_an_epoch_boundary_names_the_epoch_that_goes_on(change, kind):
    """s29-user: a checkpoint taken after set_epoch(2), before its first batch, then loaded on
    another number of ranks (or with another seed or dataset) was told to go on with
    set_epoch(3), "the rest of epoch 2 is then not seen": all of epoch 2, skipped by following
    the error's advice. Such a state now names set_epoch(2); one saved after the epoch's last
    batch names set_epoch(3) and says nothing is left of epoch 2."""
    lengths = load_real("ecoli")[:600]

    def make(replicas=2, seed=1, n=600):
        options = dict(num_replicas=replicas, rank=0, seed=seed)
        if kind == "pack":
            return PackSampler(lengths[:n], row_length=4_096, batch_size=4, **options)
        return BucketSampler(lengths[:n], num_buckets=4, batch_size=8, **options)

    other = {"num_replicas": dict(replicas=1), "seed": dict(seed=2), "num_samples": dict(n=599)}
    saved = make()
    saved.set_epoch(2)
    at_start = roundtrip(saved.state_dict())
    assert at_start["batches_yielded"] == 0
    with pytest.raises(ValueError, match=rf"{change}.*in the state but") as exc:
        make(**other[change]).load_state_dict(at_start)
    assert "sampler.set_epoch(2) (the state was saved before the first batch" in str(exc.value)
    assert "set_epoch(3)" not in str(exc.value)
    list(saved)  # the whole epoch, then a checkpoint before set_epoch(3)
    at_end = roundtrip(saved.state_dict())
    with pytest.raises(ValueError, match=rf"{change}.*in the state but") as exc:
        make(**other[change]).load_state_dict(at_end)
    assert "sampler.set_epoch(3) (the state was saved after the last batch of epoch 2)" in str(
        exc.value
    )
    saved.set_epoch(2)
    next(iter(saved))  # mid-epoch: the next epoch, and what it leaves out
    with pytest.raises(ValueError, match="the rest of epoch 2 is then not seen"):
        make(**other[change]).load_state_dict(roundtrip(saved.state_dict()))


@pytest.mark.parametrize("kind", ["bucket", "tokens", "tokens-fill", "pack"])
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2), (2, 3), (4, 2)])
def test_a_state_between_epochs_loads_on_another_number_of_ranks(kind, before, after):
    """NOTE [ An epoch boundary on another number of ranks ]: a checkpoint taken between epochs
    (before an epoch's first batch, or after its last) was refused on another number of ranks
    (s29-user), though it has no position to carry: an elastic restart could not load it. Now
    it loads where nothing else changed; a state within an epoch is refused as before. Under
    max_tokens the spec itself follows the ranks (even batches, promotion), and such a state
    was still refused (s32-user: Common Voice, 4 ranks then 2), or, saved on one rank, taken
    for an older library's ("filled every batch to max_tokens // size rows")."""
    lengths = load_real("ecoli")[:600]

    def make(replicas, rank=0, seed=1):
        options = dict(num_replicas=replicas, rank=rank, seed=seed)
        if kind == "pack":
            return PackSampler(lengths, row_length=4_096, batch_size=4, **options)
        if kind.startswith("tokens"):
            fill = {"last_batch": "fill"} if kind == "tokens-fill" else {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (fill's repeats)
                return BucketSampler(lengths, num_buckets=4, max_tokens=8_192, **options, **fill)
        return BucketSampler(lengths, num_buckets=4, batch_size=8, **options)

    saved = make(before)
    saved.set_epoch(2)
    at_start = roundtrip(saved.state_dict())
    for rank in range(after):  # every rank of the new world: epoch 2 whole, as a fresh run's
        resumed, fresh = make(after, rank), make(after, rank)
        resumed.load_state_dict(at_start)
        fresh.set_epoch(2)
        assert resumed.epoch == 2 and [list(b) for b in resumed] == [list(b) for b in fresh]
        assert resumed.state_dict()["batches_yielded"] == len(fresh)
    list(saved)
    at_end = roundtrip(saved.state_dict())
    resumed = make(after)
    resumed.load_state_dict(at_end)  # epoch 2 is over: nothing of it again, then epoch 3
    assert resumed.epoch == 2 and list(resumed) == []
    resumed.set_epoch(3)
    fresh = make(after)
    fresh.set_epoch(3)
    assert [list(b) for b in resumed] == [list(b) for b in fresh]
    with pytest.raises(ValueError, match=r"seed=1 in the state but seed=2"):
        make(after, seed=2).load_state_dict(at_start)  # another plan: refused as before
    saved.set_epoch(2)
    next(iter(saved))  # within the epoch: refused, naming the rank counts
    with pytest.raises(ValueError, match=rf"num_replicas={before} in the state.*between epochs"):
        make(after).load_state_dict(roundtrip(saved.state_dict()))


@pytest.mark.parametrize("options", ["seed", "num_samples", "max_tokens"])
def test_a_state_of_other_options_on_other_ranks_names_the_option_not_the_ranks(options):
    """s32-user: a state saved on 4 ranks, loaded on 2 by a sampler of other data or options,
    was refused for its ranks: "Resume on 4 rank(s) to finish epoch 4 exactly", where the state
    would then be refused for what else differs. That is named instead, between epochs and
    within one."""
    lengths = load_real("commonvoice")[:3000]

    def make(replicas, seed=1, n=3000, max_tokens=60_000):
        return BucketSampler(lengths[:n], num_buckets=6, max_tokens=max_tokens, seed=seed,
                             num_replicas=replicas, rank=0)  # fmt: skip

    other = {
        "seed": dict(seed=2),
        "num_samples": dict(n=2999),
        "max_tokens": {"max_tokens": 50_000},
    }
    named = {"seed": "seed=1 in the state", "num_samples": "num_samples=3000 in the state",
             "max_tokens": r"num_batches=\d+ in the state.*max_tokens"}  # fmt: skip
    saved = make(4)
    saved.set_epoch(4)
    for state in (roundtrip(saved.state_dict()), None):
        if state is None:
            next(iter(saved))  # within the epoch
            state = roundtrip(saved.state_dict())
        with pytest.raises(ValueError, match=named[options]) as exc:
            make(2, **other[options]).load_state_dict(state)
        assert "Resume on 4 rank(s)" not in str(exc.value)


@pytest.mark.parametrize("kind", ["bucket-fill", "pack-fill", "pack-balance"])
@pytest.mark.parametrize("before, after", [(1, 2), (2, 8), (8, 1), (3, 1)])
def test_a_state_between_epochs_loads_on_another_number_of_ranks_whatever_they_decide(
    kind, before, after
):
    """s29-rev: what the number of ranks alone decides kept the rule above from applying: a
    last_batch="fill" plan's digest gains or changes its fill version with the batches per step
    ('/fill=2' on 2 ranks, none on 1; a PackSampler's '/fill=3' on 8; and PackSampler's own
    fill-version check read that as an older library's state), and balance=True resolves to
    False on one rank (and drops '/w1'). Each such state between epochs was refused."""
    rng = np.random.default_rng(0)
    lengths = [*rng.integers(3, 60, size=400).tolist(), *rng.integers(900, 1000, size=6).tolist()]

    def make(replicas, rank=0):
        options = dict(num_replicas=replicas, rank=rank, seed=1)
        if kind == "bucket-fill":
            return BucketSampler(lengths, boundaries=[60, 1000], batch_size=8, **options,
                                 last_batch="fill")  # fmt: skip
        if kind == "pack-fill":
            return PackSampler(lengths, row_length=[128, 1024], batch_size=2, **options,
                               last_batch="fill")  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (balance=True has no effect on one rank)
            return PackSampler(lengths, row_length=1024, batch_size=4, balance=True, **options)

    saved = make(before)
    saved.set_epoch(2)
    state = roundtrip(saved.state_dict())
    for rank in range(after):
        resumed, fresh = make(after, rank), make(after, rank)
        resumed.load_state_dict(state)
        fresh.set_epoch(2)
        assert [list(b) for b in resumed] == [list(b) for b in fresh]
    next(iter(saved))  # within the epoch: still refused, naming the rank counts
    if len(saved) > 1:  # (else that one batch ended the epoch)
        with pytest.raises(ValueError, match=rf"num_replicas={before} in the state"):
            make(after).load_state_dict(roundtrip(saved.state_dict()))
