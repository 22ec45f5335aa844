"""LengthHistogram: counting, bin_width, sampling, quantiles, digest, merge, JSON, joint, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.histogram import JointHistogram, LengthHistogram
from bucketloader.solve import compute_boundaries


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60), st.integers(1, 50))
def test_counts_and_bin_width_round_up(lengths, width):
    h = LengthHistogram.from_lengths(lengths)
    values, counts = np.unique(lengths, return_counts=True)
    assert h.values.tolist() == values.tolist() and h.counts.tolist() == counts.tolist()
    assert h.num_samples == len(lengths) and h.total == sum(lengths)
    assert (h.min, h.max, h.num_values) == (min(lengths), max(lengths), values.size)
    binned = LengthHistogram.from_lengths(lengths, bin_width=width)
    rounded = [-(-x // width) * width for x in lengths]
    assert binned == LengthHistogram.from_lengths(rounded)
    assert (binned.values % width == 0).all() and binned.max >= max(lengths)
    # re-binning a histogram equals binning the lengths
    assert LengthHistogram.from_lengths(h, bin_width=width) == binned


def test_zero_is_a_real_length():
    h = LengthHistogram.from_lengths([0, 0, 3], bin_width=4)
    assert h.values.tolist() == [0, 4] and h.counts.tolist() == [2, 1]
    assert LengthHistogram.from_lengths([0]).total == 0


def test_containers_agree():
    lengths = [5, 3, 5, 9]
    ref = LengthHistogram.from_lengths(lengths)
    for other in (tuple(lengths), np.array(lengths, dtype=np.int32), torch.tensor(lengths)):
        assert LengthHistogram.from_lengths(other) == ref
    assert LengthHistogram.from_lengths(lengths[::-1]).digest() == ref.digest()


def test_sample_is_deterministic_bounded_and_a_subset():
    lengths = np.random.default_rng(0).integers(0, 500, size=5000)
    a = LengthHistogram.from_lengths(lengths, sample_size=300, seed=4)
    b = LengthHistogram.from_lengths(lengths, sample_size=300, seed=4)
    c = LengthHistogram.from_lengths(lengths, sample_size=300, seed=5)
    assert a == b and a != c and a.num_samples == 300
    assert set(a.values.tolist()) <= set(lengths.tolist())
    full = LengthHistogram.from_lengths(lengths)
    # sampling a histogram draws from the same multiset
    d = LengthHistogram.from_lengths(full, sample_size=300, seed=4)
    assert d.num_samples == 300 and set(d.values.tolist()) <= set(lengths.tolist())
    # asking for more than there is keeps everything
    assert LengthHistogram.from_lengths(lengths, sample_size=10**6) == full
    assert LengthHistogram.from_lengths(full, sample_size=10**6) == full


def test_sample_then_bin():
    h = LengthHistogram.from_lengths(range(1000), sample_size=100, bin_width=10, seed=1)
    assert h.num_samples == 100 and (h.values % 10 == 0).all()


def test_quantile_matches_numpy_lower():
    rng = np.random.default_rng(2)
    lengths = rng.integers(0, 100, size=777)
    h = LengthHistogram.from_lengths(lengths)
    qs = np.linspace(0, 1, 21)
    expected = np.percentile(lengths, qs * 100, method="lower")
    assert h.quantile(qs).tolist() == expected.tolist()


def test_quantile_of_more_samples_than_float64_counts_exactly_stays_in_range():
    """Above 2**53 samples q * (n - 1) rounds up to n in float64, and q=1 indexed one past the
    last length (IndexError); analyze of an engine's histogram that large reached it through
    the percentile strategy once histograms were no longer expanded."""
    from bucketloader import analyze

    values = np.arange(1, 101)
    hist = LengthHistogram.from_counts(values, np.full(values.size, 10**15))  # 10**17 samples
    assert hist.quantile([0.0, 1.0]).tolist() == [1, 100]
    report = analyze(hist, num_buckets=[4])
    assert report.row("percentile", 4).boundaries[-1] == 100
    assert report.recommended.boundaries == (25, 50, 75, 100)


def test_equality_hash_repr():
    h = LengthHistogram.from_lengths([1, 2, 2])
    assert h == LengthHistogram(np.array([1, 2]), np.array([1, 2]))
    assert h != LengthHistogram.from_lengths([1, 2])
    assert (h == "x") is False
    with pytest.raises(TypeError):
        hash(h)
    assert repr(h) == "LengthHistogram(num_samples=3, num_values=2, min=1, max=2)"
    with pytest.raises(ValueError, match="read-only"):
        h.values[0] = 7


@pytest.mark.parametrize(
    ("kwargs", "kind", "message"),
    [
        ({"bin_width": 0}, ValueError, r"^bin_width must be an int >= 1, got bin_width=0$"),
        ({"bin_width": 2.0}, TypeError, r"^bin_width must be an int >= 1, got bin_width=2.0$"),
        ({"sample_size": 0}, ValueError, r"^sample_size must be an int >= 1, got sample_size=0$"),
        ({"seed": -1}, ValueError, r"^seed must be an int >= 0, got seed=-1$"),
        ({"seed": True}, TypeError, r"^seed must be an int >= 0, got seed=True$"),
    ],
)
def test_bad_options(kwargs, kind, message):
    with pytest.raises(kind, match=message):
        LengthHistogram.from_lengths([1, 2], **kwargs)


@pytest.mark.parametrize(
    ("lengths", "kind", "message"),
    [
        ([1, -2], ValueError, r"lengths must be non-negative, got -2 at index 1"),
        ([1.5], ValueError, r"lengths must be whole numbers, got 1.5 at index 0"),
        ([float("nan")], ValueError, r"whole numbers, got nan at index 0"),
        ([True], TypeError, r"got True at index 0"),
        ([], ValueError, r"lengths must not be empty"),
        ([[1, 2]], ValueError, r"lengths must be 1-D"),
    ],
)
def test_bad_lengths(lengths, kind, message):
    with pytest.raises(kind, match=message):
        LengthHistogram.from_lengths(lengths)


def test_direct_construction_is_checked():
    with pytest.raises(ValueError, match="strictly increasing non-negative ints"):
        LengthHistogram(np.array([2, 1]), np.array([1, 1]))
    with pytest.raises(ValueError, match="positive counts"):
        LengthHistogram(np.array([1, 2]), np.array([1, 0]))
    with pytest.raises(ValueError, match="same non-zero size"):
        LengthHistogram(np.array([1, 2]), np.array([1]))


# --- merge, JSON, joint (NOTE [ Exact merge ]) ---------------------------------------------

_FAST = ("optimal", "percentile", "equal_mass", "linear", "geometric", "pad_to_max")
_shards = st.lists(
    st.lists(st.integers(0, 300) | st.integers(0, 2**62 - 1), min_size=1, max_size=30),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(_shards, st.randoms(use_true_random=False), st.integers(1, 6))
def test_merge_equals_histogram_of_the_concatenation(shards, rnd, k):
    parts = [LengthHistogram.from_lengths(s) for s in shards]
    flat = [x for s in shards for x in s]
    whole = LengthHistogram.from_lengths(flat)
    rnd.shuffle(parts)
    merged = LengthHistogram.merge(parts)
    assert merged == whole and merged.digest() == whole.digest()
    # associative and order-free: any grouping gives the same histogram
    cut = rnd.randint(1, len(parts))
    left = LengthHistogram.merge(parts[:cut])
    assert (left + LengthHistogram.merge(parts[cut:]) if cut < len(parts) else left) == whole
    values, counts = np.unique(np.array(flat, dtype=np.int64), return_counts=True)
    assert merged.values.tolist() == values.tolist() and merged.counts.tolist() == counts.tolist()
    assert merged.counts.dtype == np.int64
    # JSON round trip is exact, and the boundaries are identical bit for bit
    shipped = LengthHistogram.merge(LengthHistogram.from_json(p.to_json()) for p in parts)
    assert shipped == whole
    for name in _FAST:
        a = compute_boundaries(shipped, k, strategy=name)
        b = compute_boundaries(flat, k, strategy=name)
        assert a.dtype == b.dtype == np.int64 and a.tobytes() == b.tobytes(), name


def test_merging_many_parts_of_one_span_holds_one_counter_per_length():
    """Regression (s23): merging every rank's histogram (ShardedSampler does it on every rank)
    concatenated and sorted all the parts: 101 MB peak for 8 parts of 335 k distinct lengths.
    Parts whose values span fewer lengths than they hold entries are now added into one dense
    counter: the peak stays below the concatenation of the parts' values alone."""
    import tracemalloc

    rng = np.random.default_rng(0)
    parts = [LengthHistogram.from_lengths(rng.integers(0, 30_000, 60_000)) for _ in range(8)]
    entries = sum(p.values.size for p in parts)  # ~8 x 26 k over a span of 30 k lengths
    tracemalloc.start()
    try:
        merged = LengthHistogram.merge(parts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * entries  # the sort path: ~40 bytes per entry
    whole = np.zeros(30_000, dtype=np.int64)
    for p in parts:
        whole[p.values] += p.counts
    assert merged.values.tolist() == np.flatnonzero(whole).tolist()
    assert merged.counts.tolist() == whole[whole > 0].tolist()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), min_size=1, max_size=20),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 4),
)
def test_joint_merge_marginals_and_json(shards, k):
    parts = [JointHistogram.from_lengths(s) for s in shards]
    flat = np.array([r for s in shards for r in s], dtype=np.int64)
    whole = JointHistogram.from_lengths(flat)
    merged = JointHistogram.merge(reversed(parts))
    rows, counts = np.unique(flat, axis=0, return_counts=True)
    assert merged == whole
    assert merged.rows.tolist() == rows.tolist() and merged.counts.tolist() == counts.tolist()
    assert JointHistogram.from_json(merged.to_json()) == merged
    for d in range(2):
        assert merged.marginal(d) == LengthHistogram.from_lengths(flat[:, d])
        assert (
            compute_boundaries(merged.marginal(d), k).tobytes()
            == compute_boundaries(flat[:, d], k).tobytes()
        )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda d: st.lists(
            st.lists(
                st.sampled_from([0, 1, 2, 7, 2**20, 2**31 - 1, 2**40, 2**62 - 1]),
                min_size=d,
                max_size=d,
            ),
            min_size=1,
            max_size=40,
        )
    ),
    st.integers(1, 3),
)
def test_joint_rows_by_one_key_or_by_the_rows_agree_with_numpy(table, repeat):
    # NOTE [ Rows by one key ]: spans whose product fits an int64 take one key per row, wider
    # ones (2**62 in two inputs) the sort of the rows; both must give numpy's distinct rows
    flat = np.array(table * repeat, dtype=np.int64)
    rows, counts = np.unique(flat, axis=0, return_counts=True)
    for hist in (
        JointHistogram.from_lengths(flat),
        JointHistogram.from_counts(flat, np.ones(len(flat), dtype=np.int64)),
        JointHistogram.merge(
            [JointHistogram.from_lengths(flat[:1]), JointHistogram.from_lengths(flat)]
        ),
    ):
        assert hist.rows.tolist() == rows.tolist()
    assert JointHistogram.from_lengths(flat).counts.tolist() == counts.tolist()


@pytest.mark.parametrize(
    "spans",
    [
        [2**31, 2**32],  # product 2**63: the last one the sort of the rows takes
        [2**31, 2**32 - 1],  # just below: one key per row
        [2**32, 2**32],  # 2**64: a key would wrap to 0
        [2**21 + 1, 2**21 + 1, 2**21 + 1],  # three inputs just past 2**63
        [2**21, 2**21, 2**21 - 1],  # three inputs just below
        [2**8] * 8,  # eight inputs: 2**64
        [16] * 16,  # sixteen inputs: 2**64
        [3, 2**62 - 10],  # one input near the longest length (2**62 - 1), another short
    ],
)
def test_joint_rows_keyed_near_the_int64_limit_never_wrap(spans):
    # NOTE [ Rows by one key ]: the mixed-radix key holds a row only while the spans' product
    # stays below 2**63; past it the rows are sorted as they are. Rows at each input's shortest
    # and longest, far from zero (lengths near 2**31 and 2**40), so a key that wrapped would
    # merge or misorder them (s30-rev: the hypothesis test above passed with the guard at 2**70)
    d = len(spans)
    base = np.array([5 + (2**40 if s < 2**21 else 0) for s in spans], dtype=np.int64)
    top = base + np.array(spans, dtype=np.int64) - 1
    corners = [np.where(np.arange(d) % 3 == r, top, base) for r in range(3)]
    table = np.array([base, top, top - 1, base + 1, *corners, top, base], dtype=np.int64)
    rows, counts = np.unique(table, axis=0, return_counts=True)
    for hist in (
        JointHistogram.from_lengths(table),
        JointHistogram.from_counts(table, np.ones(len(table), dtype=np.int64)),
        JointHistogram(rows, counts),  # (its check of the order keys the rows too)
    ):
        assert hist.rows.tolist() == rows.tolist() and hist.counts.tolist() == counts.tolist()
    with pytest.raises(ValueError, match="distinct and in lexicographic order"):
        JointHistogram(rows[::-1], counts[::-1])


def test_merge_counts_stay_exact_beyond_float():
    big = 2**61 - 1  # not representable in float64
    a = LengthHistogram(np.array([7]), np.array([big]))
    b = LengthHistogram(np.array([7, 9]), np.array([1, 2]))
    m = a + b
    assert m.counts.tolist() == [2**61, 2] and m.num_samples == 2**61 + 2
    assert LengthHistogram.from_json(m.to_json()) == m
    with pytest.raises(ValueError, match="would hold 6917529027641081853 samples"):
        LengthHistogram.merge(a, a, a)


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (lambda: LengthHistogram.merge(), ValueError, r"needs at least one histogram"),
        (lambda: LengthHistogram.merge([]), ValueError, r"needs at least one histogram"),
        (
            lambda: LengthHistogram.merge([LengthHistogram.from_lengths([1]), "{}"]),
            TypeError,
            r"got str at position 1; load JSON with LengthHistogram.from_json",
        ),
        (
            lambda: JointHistogram.merge(
                JointHistogram.from_lengths([[1, 2]]), JointHistogram.from_lengths([[1, 2, 3]])
            ),
            ValueError,
            r"same number of inputs, got \[2, 3\]",
        ),
        (
            lambda: LengthHistogram.from_lengths([1]) + JointHistogram.from_lengths([[1]]),
            TypeError,
            r"unsupported operand",
        ),
        (
            lambda: JointHistogram(np.array([[2, 1], [1, 5]]), np.array([1, 1])),
            ValueError,
            r"lexicographic order",
        ),
        (lambda: JointHistogram.from_lengths([1, 2]), ValueError, r"must be \(N, D\)"),
    ],
)
def test_merge_errors(call, kind, message):
    with pytest.raises(kind, match=message):
        call()


_GOOD = '{"format":"bucketloader.LengthHistogram","version":1,"num_samples":3,'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", r"is not valid JSON \(Expecting value"),
        ("[1, 2]", r"must be an object, got \[1, 2\]"),
        ('{"format":"pickle","version":1}', r"has format 'pickle', expected"),
        (_GOOD.replace('"version":1', '"version":2') + '"values":[1],"counts":[3]}', "version 2"),
        (_GOOD + '"values":[1],"counts":[3],"extra":1}', r"unknown \['extra'\]"),
        (_GOOD + '"values":[1]}', r"missing \['counts'\]"),
        (_GOOD + '"values":[1, 2],"counts":[4, -1]}', r"counts must be in \[0, 2\*\*62\), got -1"),
        (_GOOD + '"values":[1, 2],"counts":[3, 0]}', r"counts must be >= 1, got 0 at index 1"),
        (_GOOD + '"values":[1.0],"counts":[3]}', r"values must hold ints, got 1.0 at index 0"),
        (_GOOD + '"values":[true],"counts":[3]}', r"values must hold ints, got True"),
        (_GOOD + '"values":["1"],"counts":[3]}', r"values must hold ints, got '1'"),
        (_GOOD + '"values":[4611686018427387904],"counts":[3]}', r"in \[0, 2\*\*62\)"),
        (_GOOD + '"values":[2, 1],"counts":[1, 2]}', r"strictly increasing"),
        (_GOOD + '"values":[1],"counts":[2]}', r"num_samples=3 but the counts sum to 2"),
        (_GOOD + '"values":[],"counts":[]}', r"holds no samples"),
        (_GOOD + '"values":{"a":1},"counts":[3]}', r"values must be a list of ints"),
    ],
)
def test_from_json_is_strict(text, message):
    with pytest.raises(ValueError, match=message):
        LengthHistogram.from_json(text)


def test_joint_from_json_is_strict():
    good = JointHistogram.from_lengths([[1, 2], [3, 4]]).to_json()
    with pytest.raises(ValueError, match=r"expected 'bucketloader\.LengthHistogram'"):
        LengthHistogram.from_json(good)
    with pytest.raises(ValueError, match="one entry per count"):
        JointHistogram.from_json(good.replace("[[1,3],[2,4]]", "[[1,3],[2]]"))
    with pytest.raises(ValueError, match="num_inputs must be an int >= 1"):
        JointHistogram.from_json(good.replace('"num_inputs":2', '"num_inputs":0'))
    with pytest.raises(TypeError, match="must be str or bytes"):
        JointHistogram.from_json({"format": "x"})


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 5)), min_size=1, max_size=30))
def test_from_counts_adds_repeated_pairs_in_any_order(pairs):
    values, counts = zip(*pairs, strict=True)
    flat = [v for v, c in pairs for _ in range(c)]
    assert LengthHistogram.from_counts(values, counts) == LengthHistogram.from_lengths(flat)
    rows = [[v, v % 3] for v in values]
    joint = JointHistogram.from_counts(rows, counts)
    assert joint == JointHistogram.from_lengths([[v, v % 3] for v in flat])
    with pytest.raises(ValueError, match="same shape"):
        LengthHistogram.from_counts(values, [*counts, 1])
