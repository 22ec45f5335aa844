"""bucketloader.static: exact counts, uniformity, compile parity, sync-freedom, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch._dynamo
from conftest import run_snippet
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import static
from bucketloader.static import _select
from bucketloader.static._select import _geometry, _round_keys, feistel, feistel_tabulated

# scipy.stats (~1 CPU-s of imports) and torch._dynamo.testing are imported by the tests that use
# them: every pytest-xdist worker collects this file, only the one that runs it needs them.

# --- an independent oracle for the counts ------------------------------------------------------


def expected_counts(n_pos: int, n_neg: int, k: int, fraction: float) -> tuple[int, int]:
    """(positives, negatives) the issue asks for: round-half-up target, shortfall filled."""
    target = math.floor(k * fraction + 0.5)
    take_pos = min(n_pos, max(target, k - n_neg))
    return take_pos, min(n_neg, k - take_pos)


def check_sample(values, labels, mask, out, k, fraction):
    """Every invariant of one balanced_subsample call, row by row."""
    rows = labels.reshape(-1, labels.shape[-1])
    elig = torch.ones_like(rows) if mask is None else mask.reshape(rows.shape)
    feats = values.reshape(rows.shape[0], rows.shape[1], -1)
    idx = out.indices.reshape(rows.shape[0], k)
    valid = out.valid.reshape(rows.shape[0], k)
    got_labels = out.labels.reshape(rows.shape[0], k)
    got_values = out.values.reshape(rows.shape[0], k, -1)
    for r in range(rows.shape[0]):
        positive = (rows[r] != 0) & elig[r]
        negative = (rows[r] == 0) & elig[r]
        want_pos, want_neg = expected_counts(int(positive.sum()), int(negative.sum()), k, fraction)
        m = want_pos + want_neg
        assert valid[r].tolist() == [True] * m + [False] * (k - m)  # valid rows first
        chosen = idx[r, :m]
        assert len(set(chosen.tolist())) == m  # no duplicates
        assert bool(elig[r, chosen].all())
        assert int(positive[chosen].sum()) == want_pos
        assert int(negative[chosen].sum()) == want_neg
        assert torch.equal(got_labels[r, :m], rows[r, chosen])
        assert torch.equal(got_values[r, :m], feats[r, chosen])
        assert not got_values[r, m:].any() and not got_labels[r, m:].any()
        assert not idx[r, m:].any()


# --- exact counts in every regime ----------------------------------------------------------------


def mixed_batch(n: int = 40):
    """Six rows, one regime each: both plenty, few positives, few negatives, few eligible,
    all positive, all negative."""
    labels = torch.zeros(6, n, dtype=torch.bool)
    labels[0, :15] = True
    labels[1, :2] = True
    labels[2, 3:] = True
    labels[3, ::2] = True
    labels[4] = True
    mask = torch.ones(6, n, dtype=torch.bool)
    mask[3, 6:] = False  # row 3: 6 candidates in total (3 positive)
    values = torch.randn(6, n, 3, generator=torch.Generator().manual_seed(0))
    return values, labels, mask


@pytest.mark.parametrize("k", [1, 2, 7, 16, 40, 57])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_counts_every_regime_batched(k, fraction):
    values, labels, mask = mixed_batch()
    out = static.balanced_subsample(
        values, labels, k, positive_fraction=fraction, mask=mask, seed=k
    )
    assert out.values.shape == (6, k, 3) and out.indices.dtype == torch.int64
    check_sample(values, labels, mask, out, k, fraction)


def test_rounding_is_half_up_and_leading_dims():
    labels = torch.tensor([[1, 0] * 10] * 4).view(2, 2, 20)  # int labels, 2 leading dims
    values = torch.arange(80.0).view(2, 2, 20, 1)
    for k, fraction, want in [(3, 0.5, 2), (5, 0.3, 2), (5, 0.1, 1), (1, 0.5, 1), (4, 0.125, 1)]:
        out = static.balanced_subsample(values, labels, k, positive_fraction=fraction, seed=0)
        assert out.labels.shape == (2, 2, k) and out.labels.dtype == labels.dtype
        assert out.labels.sum(-1).flatten().tolist() == [want] * 4


def test_gradients_reach_the_sampled_values_only():
    """RoI-style use: the loss on the sample trains the features it picked, padding adds nothing."""
    values = torch.randn(2, 50, 3, requires_grad=True)
    labels = torch.arange(100).view(2, 50) % 3 == 0
    out = static.balanced_subsample(values, labels, 20, seed=1)
    out.values.sum().backward()
    picked = torch.zeros(2, 50).scatter_(1, out.indices, 1.0)
    assert picked.sum().item() == 40
    assert torch.equal(values.grad, picked.unsqueeze(-1).expand(2, 50, 3))
    few = torch.randn(1, 5, 2, requires_grad=True)  # 5 < 8: 3 padded rows gather index 0
    static.balanced_subsample(few, torch.ones(1, 5), 8, seed=2).values.sum().backward()
    assert torch.equal(few.grad, torch.ones(1, 5, 2))  # index 0 gets 1, not 4


def test_n_equals_k_and_fewer_than_k_and_empty():
    values = torch.randn(2, 8, 2)
    labels = torch.tensor([[1, 1, 0, 0, 0, 0, 0, 0], [0] * 8]).bool()
    out = static.balanced_subsample(values, labels, 8, seed=1)  # N == K: a permutation
    assert sorted(out.indices[0].tolist()) == list(range(8)) and out.valid.all()
    short = static.balanced_subsample(values, labels, 11, seed=1)  # N < K: padded
    assert short.valid.sum(-1).tolist() == [8, 8] and short.indices.shape == (2, 11)
    empty = static.balanced_subsample(torch.randn(3, 0, 2), torch.zeros(3, 0), 4, seed=1)
    assert not empty.valid.any() and empty.values.shape == (3, 4, 2)
    none = static.balanced_subsample(torch.randn(0, 5, 2), torch.zeros(0, 5), 4)
    assert none.indices.shape == (0, 4)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 70),
    rows=st.integers(1, 4),
    k=st.integers(1, 80),
    fraction=st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.75, 1.0]),
    seed=st.integers(-(2**63), 2**63 - 1),
    data=st.data(),
)
def test_counts_property(n, rows, k, fraction, seed, data):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    p_pos, p_mask = data.draw(st.floats(0, 1)), data.draw(st.floats(0, 1))
    labels = (torch.rand(rows, n, generator=gen) < p_pos).to(torch.int64)
    mask = torch.rand(rows, n, generator=gen) >= p_mask * 0.8
    values = torch.randn(rows, n, 2, generator=gen)
    out = static.balanced_subsample(
        values, labels, k, positive_fraction=fraction, mask=mask, seed=seed
    )
    check_sample(values, labels, mask, out, k, fraction)


def test_masked_select_k_counts():
    mask = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
    idx, valid = static.masked_select_k(mask, 3, seed=4)
    assert valid.tolist() == [[True] * 3, [False] * 3, [True] * 3]
    assert sorted(idx[0].tolist()) == [0, 2, 3] and not idx[1].any()
    assert len(set(idx[2].tolist())) == 3 and bool(mask[2, idx[2]].all())
    idx, valid = static.masked_select_k(mask.view(3, 1, 5), 7, seed=4)  # k > N, 2 leading dims
    assert idx.shape == (3, 1, 7) and valid.sum(-1).flatten().tolist() == [3, 0, 5]


def test_positions_up_to_the_limit_come_back_whole(monkeypatch):
    """s23: a position and its class share one int32 (``(j << 2) | class``), so positions past
    2**29 came back negative, and the limit was 2**30. The packing is checked at the limit with
    a stand-in permutation (a real row of 2**29 needs ~18 GB), the limit on meta tensors."""
    top = static.subsample.MAX_CANDIDATES - 1
    j = torch.tensor([[0, 1, 2, top]], dtype=torch.int32)
    fake = (torch.arange(4, dtype=torch.int32).view(1, 4), j)  # the identity order, j's labels
    monkeypatch.setattr(_select, "permuted_positions", lambda seed, rows, n: fake)
    mask, one = torch.tensor([[False, False, False, True]]), torch.tensor([[1]])
    assert _select.quota_select(mask, None, one, None, 1, torch.tensor(0))[0].tolist() == [[top]]
    monkeypatch.undo()
    too_long = torch.empty(2**29 + 1, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"at most 2\*\*29 entries, got N=536870913; split"):
        static.masked_select_k(too_long, 4)
    with pytest.raises(ValueError, match=r"at most 2\*\*29 entries, got N=536870913"):
        static.balanced_subsample(torch.empty(2**29 + 1, 1, device="meta"), too_long, 4)


# --- uniformity and random order -----------------------------------------------------------------


def test_each_candidate_equally_likely_and_order_random():
    from scipy import stats

    rows, n, k = 24000, 20, 6
    labels = torch.zeros(rows, n, dtype=torch.bool)
    labels[:, 3:11] = True  # 8 positives (3 chosen), 12 negatives (3 chosen)
    out = static.balanced_subsample(torch.zeros(rows, n, 1), labels, k, seed=2024)
    hits = torch.bincount(out.indices.flatten(), minlength=n).double()
    assert stats.chisquare(hits[3:11]).pvalue > 1e-3  # positives: each 3/8 of the rows
    assert stats.chisquare(torch.cat([hits[:3], hits[11:]])).pvalue > 1e-3
    assert hits[3:11].mean() == pytest.approx(rows * 3 / 8)
    by_slot = out.labels.sum(0).double()  # positives per output slot: uniform, not first
    assert stats.chisquare(by_slot).pvalue > 1e-3 and by_slot[0] < rows * 0.6
    first = torch.bincount(out.indices[:, 0], minlength=n).double()  # first slot: any pick
    assert stats.chisquare(first[3:11]).pvalue > 1e-3  # each positive 3/8 * 1/6 of the rows
    assert stats.chisquare(torch.cat([first[:3], first[11:]])).pvalue > 1e-3
    assert stats.binomtest(int(first[3:11].sum()), rows).pvalue > 1e-3  # positive half the time


def chisquare_without_replacement(hits, p):
    """p-value that ``hits`` (per-candidate counts, each Binomial(rows, p), fixed total) are
    uniform: Pearson's statistic divided by ``1 - p`` is chi-square with ``len(hits) - 1``
    degrees of freedom (plain ``chisquare`` assumes ``1 - p ~ 1`` and would never fail)."""
    from scipy import stats

    expected = hits.mean()
    statistic = float(((hits - expected) ** 2 / expected).sum()) / (1 - p)
    return stats.chi2.sf(statistic, len(hits) - 1)


@pytest.mark.parametrize(("n", "rows"), [(100, 20000), (5000, 600)])
def test_uniform_on_the_permutation_path(n, rows):
    """N > 64 runs the keyed Feistel permutation: with structured labels and a mask, every
    eligible candidate of a class is equally likely, and positives are spread over all slots."""
    k = n // 10
    labels = torch.zeros(rows, n, dtype=torch.bool)
    labels[:, ::3] = True  # interleaved positives ...
    labels[:, n // 2 : n // 2 + n // 10] = True  # ... and a contiguous block
    mask = torch.ones(rows, n, dtype=torch.bool)
    mask[:, 1::7] = False
    out = static.balanced_subsample(torch.zeros(rows, n, 1), labels, k, mask=mask, seed=n)
    assert bool(out.valid.all())
    hits = torch.bincount(out.indices.flatten(), minlength=n).double()
    for cls in (labels[0] & mask[0], ~labels[0] & mask[0]):
        share = (k // 2) / int(cls.sum())
        assert chisquare_without_replacement(hits[cls], share) > 1e-3
        assert not hits[~mask[0]].any()
    by_slot = out.labels.sum(0).double()  # each slot holds a positive half the time
    assert chisquare_without_replacement(by_slot, 0.5) > 1e-3


def test_ordered_subsets_uniform_small_n():
    from scipy import stats

    rows, n, k = 40000, 12, 2  # all 132 ordered pairs equally likely
    idx, _ = static.masked_select_k(torch.ones(rows, n, dtype=torch.bool), k, seed=7)
    code = idx[:, 0] * n + idx[:, 1]
    counts = torch.bincount(code, minlength=n * n).view(n, n)
    assert not counts.diagonal().any()
    off = counts[~torch.eye(n, dtype=torch.bool)].double()
    assert stats.chisquare(off).pvalue > 1e-3


@pytest.mark.parametrize("n", [10**4, 10**6])
def test_large_permutation_pairs_look_independent(n):
    """Elements in the same grid column (the Feistel's weakest pair) land independently."""
    from scipy import stats

    rows = 100000
    a, b, s = _geometry(n)
    keys = (_round_keys(torch.tensor(99), rows, 6) & 0xFFFF).int()
    q = feistel(torch.tensor([[0, b, 1]], dtype=torch.int32), keys, a, b, s).long()
    cells = (q * 8 // (a * b)).T
    for other in (cells[1], cells[2]):
        joint = torch.bincount(cells[0] * 8 + other, minlength=64).double()
        assert stats.chisquare(joint).pvalue > 1e-3
    assert stats.binomtest(int((q[:, 0] < q[:, 1]).sum()), rows).pvalue > 1e-3


@pytest.mark.parametrize("wide_index", [False, True])
@pytest.mark.parametrize("n", [65, 100, 4096, 4097, 12345, 10**6])
def test_eager_tables_equal_the_arithmetic_permutation(n, wide_index, monkeypatch):
    """Eager mode applies the round functions as per-row tables; compiled mode computes them.
    Both must be the same permutation, bit for bit (compiled == eager relies on it); also with
    the int64 ``gather`` indices torch 2.1 needs (``wide_index``)."""
    if wide_index:
        monkeypatch.setattr(_select, "_GATHER_INT32", False)
    a, b, s = _geometry(n)
    for seed in (0, -7, 2**62):
        keys = (_round_keys(torch.tensor(seed), 3, 10 if n <= 4096 else 6) & 0xFFFF).int()
        j = torch.arange(a * b, dtype=torch.int32).view(1, -1)
        got = feistel_tabulated(keys, a, b, s)
        assert got.dtype == torch.int32 and torch.equal(got, feistel(j, keys, a, b, s))
    assert torch.equal(got.sort(dim=1).values[0], j[0])  # a permutation of the grid


def test_runs_on_the_api_of_torch_before_2_3():
    """torch 2.1 and 2.2 (the dependency floor is 2.1) have no ``torch.compiler.is_compiling``:
    imported there, the subsampler takes ``torch._dynamo.is_compiling``, which Dynamo traces as
    True, so compiled code still takes the compiled paths and eager code the eager ones."""
    code = """if True:
        import torch, torch._dynamo
        new = torch.compiler.is_compiling  # (Dynamo itself needs it back after the import)
        del torch.compiler.is_compiling
        from bucketloader import static
        from bucketloader.static import _select
        torch.compiler.is_compiling = new
        assert _select.is_compiling is torch._dynamo.is_compiling
        probe = torch.compile(lambda x: x + 1 if _select.is_compiling() else x - 1, backend="eager")
        assert probe(torch.zeros(1)).item() == 1 and not _select.is_compiling()
        values, labels = torch.randn(2, 300, 3), torch.rand(2, 300) < 0.2
        out = static.balanced_subsample(values, labels, 40, seed=torch.tensor(3))
        assert out.values.shape == (2, 40, 3) and out.valid.sum(1).tolist() == [40, 40]
        print("ok")
    """
    run_snippet(code, warm=("torch._dynamo",))  # static is not imported there (the assert above)


def test_determinism_and_independence():
    values, labels, _ = mixed_batch()
    a = static.balanced_subsample(values, labels, 9, generator=torch.Generator().manual_seed(5))
    b = static.balanced_subsample(values, labels, 9, generator=torch.Generator().manual_seed(5))
    c = static.balanced_subsample(values, labels, 9, generator=torch.Generator().manual_seed(6))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a.indices, c.indices)
    d = static.balanced_subsample(values, labels, 9, seed=torch.tensor(5))
    assert torch.equal(d.indices, static.balanced_subsample(values, labels, 9, seed=5).indices)
    twins = static.masked_select_k(torch.ones(2, 50, dtype=torch.bool), 10, seed=0).indices
    assert not torch.equal(twins[0], twins[1])  # identical rows, independent draws


# --- torch.compile: parity, zero graph breaks ----------------------------------------------------


def test_zero_graph_breaks():
    values, labels, mask = mixed_batch()
    for fn, args, kwargs in [
        (static.balanced_subsample, (values, labels, 9), {"mask": mask, "seed": torch.tensor(1)}),
        (static.balanced_subsample, (values, labels.long(), 5), {"positive_fraction": 0.3}),
        (static.masked_select_k, (mask, 4), {}),
        (static.masked_mean, (values, mask.unsqueeze(-1)), {"dim": 1}),
    ]:
        torch._dynamo.reset()
        explained = torch._dynamo.explain(fn)(*args, **kwargs)
        assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compiled_static_shapes_match_eager(monkeypatch):
    """dynamic=False on the Feistel path (N > 64): same seed, bit-identical samples. The compiled
    graph takes the blocked scans (tiny blocks here: two levels), eager the single cumsum."""
    torch._dynamo.reset()
    compiled = torch.compile(static.balanced_subsample, fullgraph=True, dynamic=False)
    values, labels, mask = mixed_batch(100)
    seed = torch.tensor(123)
    want = static.balanced_subsample(values, labels, 9, positive_fraction=0.3, mask=mask, seed=seed)
    for name, value in (("_SCAN_BLOCK", 8), ("_MIN_BLOCK", 2), ("_BLOCKED_SCANS", True)):
        monkeypatch.setattr(_select, name, value)
    got = compiled(values, labels, 9, positive_fraction=0.3, mask=mask, seed=seed)
    assert all(torch.equal(x, y) for x, y in zip(want, got, strict=True))
    again = compiled(values, labels, 9, positive_fraction=0.3, mask=mask, seed=seed + 1)
    check_sample(values, labels, mask, again, 9, 0.3)  # a seed tensor: no recompile
    assert not torch.equal(again.indices, got.indices)
    # fullgraph=True: Dynamo wraps our error ("Observed exception"), keeping its message
    with pytest.raises(Exception, match="pass seed="):
        compiled(values, labels, 9, generator=torch.Generator())
    with pytest.raises(Exception, match=r"labels must have shape values.shape\[:-1\]"):
        compiled(values, labels[:, :-1], 9, seed=seed)
    torch._dynamo.reset()


def test_blocked_scans_equal_the_single_cumsum(monkeypatch):
    """NOTE [ Blocked scans ]: the same integers at every level count, and the same samples."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(3, 104), (2, 10112), (1, 3 * 2**12), (2, 2**11 * 7), (2, 1025), (4, 65)]
    shapes += [(2, 1172 * 1024), (1, 3907 * 8)]  # totals rows of 1,172 / 3,907: padded blocks
    scanned = []
    cumsum = torch.cumsum

    def recorded(t, dim, **kwargs):
        scanned.append(t.shape[dim])
        return cumsum(t, dim, **kwargs)

    values, labels, mask = mixed_batch(3000)  # the grid: 47 x 64, so D = 3008 > 1024
    monkeypatch.setattr(_select, "_BLOCKED_SCANS", False)
    want = static.balanced_subsample(values, labels, 700, mask=mask, seed=9)
    monkeypatch.setattr(_select, "_BLOCKED_SCANS", True)
    for block, least in ((1024, 16), (8, 2)):  # the default; tiny blocks: three or more levels
        monkeypatch.setattr(_select, "_SCAN_BLOCK", block)
        monkeypatch.setattr(_select, "_MIN_BLOCK", least)
        for rows, d in shapes:
            x = (torch.rand(rows, d, generator=gen) < 0.3).to(torch.int32)
            monkeypatch.setattr(torch, "cumsum", recorded)
            scanned.clear()
            got = _select._prefix_sum(x)
            monkeypatch.setattr(torch, "cumsum", cumsum)
            assert max(scanned) <= block  # no scan over a longer row, at any level
            assert got.dtype == torch.int32 and torch.equal(got, x.cumsum(1, dtype=torch.int32))
        got_sample = static.balanced_subsample(values, labels, 700, mask=mask, seed=9)
        assert all(torch.equal(a, b) for a, b in zip(want, got_sample, strict=True))


def test_compiled_dynamic_batch_unseeded():
    """dynamic=True: fresh randomness drawn inside the graph; a new batch size reuses the graph."""
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("eager")  # counts graphs
    compiled = torch.compile(
        static.balanced_subsample, fullgraph=True, dynamic=True, backend=counter
    )
    values, labels, mask = mixed_batch(100)  # N > 64: the Feistel path
    first = compiled(values, labels, 9, mask=mask)
    check_sample(values, labels, mask, first, 9, 0.5)
    frames = counter.frame_count
    assert not torch.equal(first.indices, compiled(values, labels, 9, mask=mask).indices)
    part = compiled(values[1:4], labels[1:4], 9, mask=mask[1:4])
    check_sample(values[1:4], labels[1:4], mask[1:4], part, 9, 0.5)
    assert counter.frame_count == frames  # the batch dimension stayed symbolic: no recompile
    # s22: N stays symbolic too, guarded into the ranges the algorithm branches on (N <= 64,
    # 64 < N <= 4096, ...): a new N in the range reuses the graph, and equals eager bit for bit
    # (equal to eager with a seed tensor: checked by hand, 100/200/1000 under inductor)
    for n in (300, 4000):
        values, labels, mask = mixed_batch(n)
        check_sample(values, labels, mask, compiled(values, labels, 9, mask=mask), 9, 0.5)
        assert counter.frame_count == frames, n
    torch._dynamo.reset()


# --- CUDA: no synchronisation --------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_no_sync():
    dev = torch.device("cuda")
    values = torch.randn(4, 1000, 8, device=dev)
    labels = torch.rand(4, 1000, device=dev) < 0.1
    mask = torch.rand(4, 1000, device=dev) < 0.9
    seed = torch.randint(2**62, (), device=dev)
    torch._dynamo.reset()
    compiled = torch.compile(static.balanced_subsample, fullgraph=True)
    compiled(values, labels, 64, mask=mask, seed=seed)  # compile outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = static.balanced_subsample(values, labels.float(), 64, mask=mask)
        static.balanced_subsample(values, labels, 64, seed=5)  # an int seed: a non-blocking copy
        static.balanced_subsample(values, labels, 64, seed=torch.tensor(5))  # a CPU tensor seed
        again = compiled(values, labels, 64, mask=mask, seed=seed)
        eager = static.balanced_subsample(values, labels, 64, mask=mask, seed=seed)
        static.masked_select_k(mask, 32)
        static.masked_mean(values, mask.unsqueeze(-1), dim=1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(torch.equal(x, y) for x, y in zip(again, eager, strict=True))
    check_sample(values.cpu(), labels.float().cpu(), mask.cpu(), _cpu(out), 64, 0.5)
    torch._dynamo.reset()


def _cpu(out):
    return type(out)(*(t.cpu() for t in out))


# --- masked reductions ---------------------------------------------------------------------------


def test_masked_reductions_match_boolean_indexing():
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(3))
    mask = x > 0.3
    assert torch.allclose(static.masked_sum(x, mask), x[mask].sum())
    assert torch.allclose(static.masked_mean(x, mask), x[mask].mean())
    for i in range(3):
        assert torch.allclose(static.masked_sum(x, mask, dim=(1, 2))[i], x[i][mask[i]].sum())
        assert torch.allclose(static.masked_mean(x, mask, dim=(1, 2))[i], x[i][mask[i]].mean())
    row_mask = torch.tensor([True, False, True, False, True]).view(5, 1)  # broadcasts over x
    got = static.masked_sum(x, row_mask, dim=1, keepdim=True)
    assert torch.allclose(got, x[:, [0, 2, 4]].sum(1, keepdim=True))
    assert static.masked_mean(x, torch.zeros_like(mask)).isnan()  # like x[empty].mean()
    assert static.masked_sum(torch.arange(6), torch.arange(6) > 3).item() == 9
    # s23, NOTE [ Half-precision means ]: the float16 sum overflowed (inf), bfloat16 gave 100.5
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.full((2, 3000), 100.0, dtype=dtype)
        mask = torch.ones_like(x, dtype=torch.bool)
        mask[:, ::3] = False
        for dim in (None, -1):
            got = static.masked_mean(x, mask, dim=dim)
            assert got.dtype == dtype and (got == 100).all(), (dtype, dim, got)


# --- bad input: one voice, naming argument, value and fix ----------------------------------------


BAD_CALLS = [
    (dict(values=torch.zeros(5)), TypeError, r"values must be a tensor of shape \[\.\.\., N, F\]"),
    # s23: the fixes (a feature dimension, a bool mask, a fixed capacity) were not said
    (dict(values=torch.zeros(10)), TypeError, r"shape \(10,\); for one value per candidate pass"),
    (dict(mask=torch.ones(2, 10, dtype=torch.int64)), TypeError, r"convert it with mask.bool\(\)"),
    (dict(num_samples=torch.tensor(4)), TypeError, r"got num_samples=tensor\(4\), a tensor: it is"),
    (dict(labels=[1, 0]), TypeError, r"labels must be a tensor of shape \[\.\.\., N\], got list"),
    (
        dict(labels=torch.zeros(2, 9)),
        ValueError,
        r"labels must have shape values.shape\[:-1\]=\(2, 10\), got labels.shape=\(2, 9\)",
    ),
    (dict(labels=torch.full((2, 10), 2)), ValueError, r"labels must be binary .*got a label of 2"),
    (dict(labels=torch.full((2, 10), 0.5)), ValueError, r"got a label of 0.5; map classes"),
    (dict(labels=torch.zeros(2, 10, dtype=torch.complex64)), TypeError, r"labels must be bool"),
    (dict(num_samples=0), ValueError, r"num_samples must be an int >= 1, got num_samples=0"),
    (dict(num_samples=-3), ValueError, r"got num_samples=-3"),
    (dict(num_samples=True), TypeError, r"num_samples must be an int >= 1, got num_samples=True"),
    (dict(num_samples=2.0), TypeError, r"got num_samples=2.0"),
    (
        dict(positive_fraction=1.5),
        ValueError,
        r"positive_fraction must be a number in \[0.0, 1.0\]",
    ),
    (dict(positive_fraction=-0.1), ValueError, r"got positive_fraction=-0.1"),
    (dict(positive_fraction=float("nan")), ValueError, r"got positive_fraction=nan"),
    (dict(positive_fraction=True), TypeError, r"got positive_fraction=True"),
    (dict(positive_fraction="0.5"), TypeError, r"got positive_fraction='0.5'"),
    (dict(mask=torch.ones(2, 10)), TypeError, r"mask must be None or a bool tensor"),
    (dict(mask=torch.ones(2, 9, dtype=torch.bool)), ValueError, r"mask must have labels.shape"),
    (dict(seed=1, generator=torch.Generator()), ValueError, r"either seed or generator"),
    (dict(seed=1.5), TypeError, r"seed must be an int or a 0-d integer tensor, got seed=1.5"),
    (dict(seed=True), TypeError, r"got seed=True"),
    (dict(seed=torch.tensor([1.0])), TypeError, r"seed must be an int or a 0-d integer tensor"),
    (dict(seed=torch.arange(3)), TypeError, r"seed must be .* shape \(3,\)"),
    (dict(generator=3), TypeError, r"generator must be a torch.Generator, got int 3"),
    # was torch's TypeError; a range error with the fix (s8-polish)
    (dict(seed=2**70), ValueError, r"seed must be an int in \[-2\*\*63, .*=1180.*% 2\*\*63"),
    (dict(seed=-(2**63) - 1), ValueError, r"seed must be an int in \[-2\*\*63"),
    # numpy 2 arrays have .device: they were described as "a tensor" (s16-user)
    (
        dict(values=np.zeros((2, 10, 3), dtype=np.float32)),
        TypeError,
        r"values must be a tensor .*got a numpy array of dtype float32 and shape \(2, 10, 3\); "
        r"convert it with torch.from_numpy",
    ),
    (dict(mask=np.ones((2, 10), dtype=bool)), TypeError, r"got a numpy array of dtype bool"),
]


@pytest.mark.parametrize(("override", "error", "match"), BAD_CALLS)
def test_bad_input_balanced(override, error, match):
    kwargs = dict(values=torch.zeros(2, 10, 3), labels=torch.zeros(2, 10), num_samples=4)
    kwargs.update(override)
    with pytest.raises(error, match=match):
        static.balanced_subsample(**kwargs)


def test_bad_input_module_and_helpers():
    with pytest.raises(ValueError, match="num_samples must be an int >= 1, got num_samples=0"):
        static.BalancedSubsampler(0)
    with pytest.raises(ValueError, match="got positive_fraction=2"):
        static.BalancedSubsampler(3, positive_fraction=2)
    with pytest.raises(TypeError, match=r"mask must be a bool tensor of shape \[\.\.\., N\]"):
        static.masked_select_k(torch.ones(3), 2)
    with pytest.raises(ValueError, match="k must be an int >= 1, got k=0"):
        static.masked_select_k(torch.ones(3, dtype=torch.bool), 0)
    with pytest.raises(TypeError, match=r"torch.int64 and shape \(3,\); convert it with mask.bool"):
        static.masked_select_k(torch.ones(3, dtype=torch.int64), 2)  # an attention mask, say
    with pytest.raises(TypeError, match=r"k must be a Python int >= 1, got k=tensor\(2\), a tens"):
        static.masked_select_k(torch.ones(3, dtype=torch.bool), torch.tensor(2))
    with pytest.raises(
        ValueError, match=r"device meta, .*=cpu; create it with torch.Generator\('meta'\)"
    ):
        # s23: the fix read torch.Generator(device(type='meta')), not code to run
        static.masked_select_k(
            torch.ones(3, dtype=torch.bool, device="meta"), 2, generator=torch.Generator()
        )
    with pytest.raises(ValueError, match=r"mask must be on x.device=cpu, got mask.device=meta; "):
        static.masked_mean(torch.ones(3), torch.ones(3, dtype=torch.bool, device="meta"))
    # a 0-d CPU mask is left to torch, which takes it with x elsewhere: masked_mean too
    # (s23-rev: its count stayed on the CPU, "Tensor on device cpu is not on the expected
    # device meta!" where masked_sum worked)
    on_meta = torch.ones(2, 3, device="meta")
    for reduce in (static.masked_sum, static.masked_mean):
        assert reduce(on_meta, torch.tensor(True), dim=-1).shape == (2,)
    with pytest.raises(ValueError, match=r"mask must be broadcastable to x.shape=\(2, 3\)"):
        static.masked_sum(torch.ones(2, 3), torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool tensor broadcastable to x"):
        static.masked_sum(torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor .* x.float\(\)"):
        static.masked_mean(torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3, dtype=torch.bool))


def test_masked_reductions_name_a_bad_dim():
    """dim=5 was torch's IndexError, dim=(0, 0) its RuntimeError, keepdim=1 its TypeError
    (s8-polish); numpy ints and bools are taken as torch's own."""
    x, mask = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)
    dims = r"dim must be None, an int or a tuple of distinct ints in \[-2, 1\] \(x has 2 dim"
    for fn in (static.masked_sum, static.masked_mean):
        with pytest.raises(ValueError, match=dims + r".*got dim=5; e.g. dim=-1"):
            fn(x, mask, dim=5)
        with pytest.raises(ValueError, match=r"got dim=\(0, -2\)"):
            fn(x, mask, dim=(0, -2))
        with pytest.raises(TypeError, match=r"got dim='1'"):
            fn(x, mask, dim="1")
        with pytest.raises(TypeError, match="keepdim must be a bool, got keepdim=1"):
            fn(x, mask, keepdim=1)
        assert fn(x, mask, dim=np.int64(-1), keepdim=np.bool_(True)).shape == (2, 1)
        assert fn(x, mask, dim=[0, 1]).item() == fn(x, mask).item()
    assert static.masked_sum(torch.tensor(2.0), torch.tensor(True), dim=0).item() == 2.0


def test_masked_reductions_take_tensor_and_numpy_dims_eager_and_compiled():
    """A 0-d integer tensor dim (taken by torch) was refused by the dim check, and under
    torch.compile(fullgraph=True) numpy and tensor dims (traced as arrays) failed it (s8-rev1)."""
    x, mask = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)
    assert static.masked_sum(x, mask, dim=torch.tensor(1)).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match=r"got dim=tensor\(True\)"):
        static.masked_sum(x, mask, dim=torch.tensor(True))
    with pytest.raises(ValueError, match=r"got dim=tensor\(2\)"):
        static.masked_sum(x, mask, dim=torch.tensor(2))
    for dim in (np.int64(1), torch.tensor(1), (np.int64(0), 1)):
        torch._dynamo.reset()
        compiled = torch.compile(
            lambda x, dim=dim: static.masked_sum(x, mask, dim=dim), fullgraph=True, backend="eager"
        )
        assert torch.equal(compiled(x), static.masked_sum(x, mask, dim=dim))
    torch._dynamo.reset()


def test_module_wraps_function():
    sampler = static.BalancedSubsampler(6, positive_fraction=0.25)
    assert repr(sampler) == "BalancedSubsampler(num_samples=6, positive_fraction=0.25)"
    values, labels, mask = mixed_batch()
    got = sampler(values, labels, mask=mask, seed=3)
    want = static.balanced_subsample(values, labels, 6, positive_fraction=0.25, mask=mask, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True))
    assert list(sampler.parameters()) == [] and list(sampler.buffers()) == []


def test_a_seed_tensor_reaches_the_cpu_by_a_blocking_copy():
    """s23: a GPU seed tensor for CPU data was copied with non_blocking=True, and a non-blocking
    device-to-host copy may be read before it lands. (Spied: no GPU here; the copy a GPU run
    takes, to a GPU, stays non-blocking: test_cuda_no_sync.)"""
    copies = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to and "non_blocking" in (kwargs or {}):
                copies.append(kwargs["non_blocking"])
            return super().__torch_function__(func, types, args, kwargs or {})

    mask = torch.ones(2, 5, dtype=torch.bool)
    got = static.masked_select_k(mask, 3, seed=torch.tensor(3).as_subclass(Spy)).indices
    assert copies == [False]
    assert torch.equal(got.as_subclass(torch.Tensor), static.masked_select_k(mask, 3, seed=3)[0])
