"""Issue 24 item 1: the lean map-style plan (NOTE [ A lean build ], NOTE [ Counter-based
shuffle ]): the counting paths equal the sorting ones, the lean build equals the general one,
the keyed permutations are bijections, a rank's plan allocates nothing of N in int64, and
resume stays exact (a version-1 state is refused)."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import BucketSampler, histogram
from bucketloader.plan import BucketSpec, permute, plan_epoch
from bucketloader.plan import epoch as epoch_mod
from bucketloader.plan import spec as spec_mod
from bucketloader.plan.permute import CellShuffle, ShuffledOrder, cell_shuffles
from bucketloader.plan.spec import count_cells, sort_by_cell

LIBRI = np.loadtxt("tests/data/librispeech_train_clean_100_samples.txt", dtype=np.int32)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-1, 40), min_size=1, max_size=300),
    st.sampled_from([np.int8, np.int16, np.int32, np.int64]),
    st.integers(4, 64),
)
def test_counting_sort_equals_a_stable_argsort(cells, dtype, chunk):
    cell_of = np.array(cells, dtype=dtype)
    k = 41
    old = spec_mod.CHUNK, spec_mod.SORT_CHUNK
    spec_mod.CHUNK = spec_mod.SORT_CHUNK = chunk  # several chunks even on small inputs
    try:
        counts = count_cells(cell_of, k)
        got = sort_by_cell(cell_of, counts)
    finally:
        spec_mod.CHUNK, spec_mod.SORT_CHUNK = old
    kept = np.flatnonzero(cell_of >= 0)
    assert counts.tolist() == np.bincount(cell_of[kept], minlength=k).tolist()
    assert got.tolist() == kept[np.argsort(cell_of[kept], kind="stable")].tolist()
    assert got.dtype == np.int32


@pytest.mark.parametrize("n", [1, 2, 5, 1024, 1025, 4097, 70_001])
def test_cell_shuffle_is_a_bijection_of_its_cell(n):
    pi = CellShuffle(n, np.random.SeedSequence([3, n]))
    image = pi(np.arange(n))
    assert np.array_equal(np.sort(image), np.arange(n))
    some = np.random.default_rng(n).integers(0, n, 50)
    assert np.array_equal(pi(some), image[some])  # any position alone, same value


def test_the_64_bit_network_is_a_bijection_too(monkeypatch):
    monkeypatch.setattr(permute, "TABLE_BITS", 0)  # as for a cell of more than 2**32 samples
    pi = CellShuffle(5000, np.random.SeedSequence(1))
    assert not pi.tables and pi.keys.size
    assert np.array_equal(np.sort(pi(np.arange(5000))), np.arange(5000))


def test_cell_shuffles_look_random():
    """Positions are uncorrelated with their images, neighbours land far apart, and one sample's
    position over many epochs is spread evenly (a coarse chi-square)."""
    n = 50_000
    image = CellShuffle(n, np.random.SeedSequence(7))(np.arange(n))
    assert abs(np.corrcoef(np.arange(n), image)[0, 1]) < 0.03
    assert np.median(np.abs(np.diff(image))) > n / 8
    where = np.array(
        [
            CellShuffle(2000, np.random.SeedSequence([e]))
            .__call__(np.arange(2000))
            .tolist()
            .index(0)
            for e in range(400)
        ]
    )
    hist = np.bincount(where // 200, minlength=10)
    chi2 = ((hist - 40) ** 2 / 40).sum()
    assert chi2 < 30  # 9 degrees of freedom: p < 0.001 above 27.9


def test_shuffled_order_reads_any_positions():
    base = np.arange(100, 130, dtype=np.int32)
    counts = np.array([10, 1, 19])
    pis = cell_shuffles(np.random.SeedSequence(2), counts)
    order = ShuffledOrder(base, [0, 10, 11], counts, [pis.get(c) for c in range(3)])
    whole = order[np.arange(30)]
    assert sorted(whole.tolist()) == base.tolist() and whole.dtype == np.int32
    assert sorted(whole[:10].tolist()) == list(range(100, 110))  # cells stay in place
    pos = np.array([29, 3, 10, 3])
    assert order[pos].tolist() == whole[pos].tolist()
    part = order[7:25]  # a view across three segments, as the promoted plan cuts them
    assert part.size == 18 and part[np.arange(18)].tolist() == whole[7:25].tolist()
    joined = ShuffledOrder.concat([order[20:30], order[0:5]], base)
    assert joined[np.arange(15)].tolist() == [*whole[20:30], *whole[0:5]]


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(["pad", "fill", "drop", "keep"]),
    st.sampled_from([None, 3000]),
    st.booleans(),
)
def test_the_lean_build_equals_the_general_one(seed, last_batch, max_tokens, use_list):
    rng = np.random.default_rng(seed)
    lengths = LIBRI[rng.integers(0, LIBRI.size, int(rng.integers(1, 3000)))] // 100 + 1
    opts = {"num_buckets": int(rng.integers(1, 9)), "last_batch": last_batch}
    if max_tokens:
        opts["max_tokens"] = max(max_tokens, int(lengths.max()))
    else:
        opts["batch_size"] = int(rng.integers(1, 9))
    lean = BucketSpec.build(lengths.tolist() if use_list else lengths, **opts)
    general = BucketSpec.build(lengths, filter=np.ones(lengths.size, bool), **opts)  # (general)
    assert lean.cell_of_sample.dtype == np.int8
    assert np.array_equal(lean.cell_of_sample, general.cell_of_sample)
    assert lean.cell_lengths.tolist() == general.cell_lengths.tolist()
    assert lean.cell_batch.tolist() == general.cell_batch.tolist()
    assert lean.counts.tolist() == general.counts.tolist()
    assert np.array_equal(lean.by_cell, general.by_cell)
    assert lean.digest == general.digest
    for r in range(2):
        a = plan_epoch(lean, seed=seed % 7, epoch=1, num_replicas=2, rank=r)
        b = plan_epoch(general, seed=seed % 7, epoch=1, num_replicas=2, rank=r)
        assert a.indices.tolist() == b.indices.tolist()


@pytest.mark.parametrize("last_batch", ["pad", "drop"])
def test_ranks_take_disjoint_slots_of_one_shuffled_epoch(last_batch):
    lengths = LIBRI[:5000] // 100 + 1
    spec = BucketSpec.build(lengths, num_buckets=6, batch_size=4, last_batch=last_batch)
    plans = [plan_epoch(spec, seed=3, epoch=2, num_replicas=4, rank=r) for r in range(4)]
    assert len({len(p) for p in plans}) == 1
    assert all(np.array_equal(plans[0].cells, p.cells) for p in plans)
    taken = np.concatenate([p.indices for p in plans])
    if last_batch == "drop":
        assert np.unique(taken).size == taken.size  # no sample twice
    else:
        assert set(taken.tolist()) == set(range(lengths.size))  # every sample
    other = plan_epoch(spec, seed=3, epoch=3, num_replicas=4, rank=0)
    assert other.indices.tolist() != plans[0].indices.tolist()  # a new shuffle every epoch


def _traced_peak(lengths):
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = BucketSampler(
                lengths, num_buckets=16, max_tokens=3_200_000, num_replicas=8, rank=0
            )
        plan = sampler.plan()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return sampler, plan, peak


def test_a_rank_plan_allocates_nothing_of_n_in_int64(monkeypatch):
    """Lengths held as given (no copy), int8 cells, int32 by_cell and indices; what building
    and planning allocate per extra sample (the traced peak's growth from N to 4N, so the
    histogram's fixed cost cancels) stays far below one int64 array of N (8 bytes each)."""
    monkeypatch.setattr(spec_mod, "CHUNK", 1 << 14)  # chunked temporaries: bounded
    monkeypatch.setattr(spec_mod, "SORT_CHUNK", 1 << 14)
    monkeypatch.setattr(epoch_mod, "_GATHER", 1 << 14)
    monkeypatch.setattr(histogram, "_COUNT_CHUNK", 1 << 14)
    rng = np.random.default_rng(0)
    small, big = (LIBRI[rng.integers(0, LIBRI.size, n)] for n in (100_000, 400_000))
    _, _, peak_small = _traced_peak(small)
    sampler, plan, peak_big = _traced_peak(big)
    spec = sampler.spec
    assert np.shares_memory(spec.lengths, big) and not spec.lengths.flags.writeable
    assert spec.cell_of_sample.dtype == np.int8
    assert spec.by_cell.dtype == np.int32 and plan.indices.dtype == np.int32
    per_sample = (peak_big - peak_small) / (big.size - small.size)
    # cells (1 byte) + by_cell (4 bytes) + this rank's indices (4 / 8 bytes) per sample
    assert per_sample < 6.5, f"{per_sample:.1f} bytes per sample"


def test_resume_is_exact_and_a_version_1_state_is_refused():
    lengths = LIBRI[:3000]

    def make():
        return BucketSampler(
            lengths, num_buckets=8, max_tokens=2_000_000, seed=4, num_replicas=2, rank=1
        )

    sampler = make()
    sampler.set_epoch(3)
    it = iter(sampler)
    for _ in range(7):
        next(it)
    state = sampler.state_dict()
    rest = list(it)
    again = make()
    again.load_state_dict(state)
    assert list(again) == rest
    assert state["config"]["plan_digest"].endswith("/shuffle=2")
    old = {**state, "config": {**state["config"]}}
    old["config"]["plan_digest"] = state["config"]["plan_digest"].removesuffix("/shuffle=2")
    with pytest.raises(ValueError, match=r"plan version 1.*set_epoch\(3\)"):
        make().load_state_dict(old)
    # unshuffled plans did not change: their state has no suffix
    plain = BucketSampler(lengths, num_buckets=8, max_tokens=2_000_000, shuffle=False)
    assert "/shuffle" not in plain.state_dict()["config"]["plan_digest"]


def test_filling_many_small_buckets_costs_about_their_draws():
    """NOTE [ Filling a small bucket ]: 255 buckets x 8 on 128 ranks, every one with fewer
    samples than half a step, each filled from all the shorter ones. Each cell's draw ran
    np.unique over every earlier repeat and read its (mostly repeated) pool through a search
    per sample: 2.5 s of CPU a plan at 100k samples (s23-rev); now about 0.13 s."""
    import time

    lengths = np.random.default_rng(0).integers(1, 2049, 100_000)
    spec = BucketSpec.build(
        lengths, boundaries=list(range(8, 2049, 8)), batch_size=8, last_batch="fill"
    )
    assert len(epoch_mod.fill_pools(spec, 128)) == 255
    start = time.process_time()
    plan = plan_epoch(spec, num_replicas=128, rank=3)
    assert time.process_time() - start < 0.8
    own = spec.cell_of_sample[plan.indices[plan.offsets[:-1]]]
    assert (own == plan.cells).all()  # (each batch starts with a sample of its own cell)


def test_filling_under_accumulation_reads_only_the_cells_it_draws_from(monkeypatch):
    """The accumulation fill's draw read its whole (mostly repeated) pool for every filled cell:
    5.7 s of CPU a plan at 1M samples in 255 buckets x 16 on 256 ranks. Reading only the cells
    below the level the draws reach and the closest at it (``_cells_drawn``) gives the same
    draws without shuffle (here against the whole pool), in about a tenth of the time."""
    import time

    lengths = np.random.default_rng(0).integers(1, 2049, 100_000)
    spec = BucketSpec.build(
        lengths, boundaries=list(range(8, 2049, 8)), batch_size=8, last_batch="fill"
    )
    at = {"num_replicas": 128, "rank": 3, "accumulate": 2, "shuffle": False}
    epoch_mod._LAST_DRAWS = None
    start = time.process_time()
    fast = plan_epoch(spec, **at)
    took = time.process_time() - start
    assert took < 0.8, took
    epoch_mod._LAST_DRAWS = None
    monkeypatch.setattr(epoch_mod, "_cells_drawn", lambda need, levels: None)
    whole = plan_epoch(spec, **at)
    assert np.array_equal(fast.indices, whole.indices)
    epoch_mod._LAST_DRAWS = None


def test_a_report_draws_the_fill_once_for_every_rank(monkeypatch):
    """The fill draws are the same on every rank: report() (every rank's plan) draws them once
    (s23-rev: 64 times on 64 ranks, report() 0.29 s -> 1.6 s at 1M samples), and a new epoch
    or another spec draws again."""
    calls = []
    draw = epoch_mod.fill_draws
    monkeypatch.setattr(epoch_mod, "fill_draws", lambda *a: calls.append(1) or draw(*a))
    lengths = [5] * 40 + [30] * 3
    spec = BucketSpec.build(lengths, boundaries=[5, 30], batch_size=8, last_batch="fill")
    from bucketloader.plan.report import plan_report

    at = {"seed": 0, "shuffle": True, "rank": 0, "num_replicas": 4}
    one = plan_report(spec, epoch=0, **at)
    assert len(calls) == 1 and one.totals["repeated"] == 24 + 29  # (a wrap, a filled step)
    plan_report(spec, epoch=1, **at)
    other = BucketSpec.build(lengths, boundaries=[5, 30], batch_size=8, last_batch="fill")
    plan_report(other, epoch=1, **at)
    assert len(calls) == 3
    plan_epoch(other, epoch=1, **at)
    assert len(calls) == 3
