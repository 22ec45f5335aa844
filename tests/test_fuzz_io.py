"""Fuzzing the edges that meet files and users (issue 12): the solution cache under arbitrary
entry bytes, analyze / recommend_num_buckets, the ``bucketloader`` command line with arbitrary
arguments and file contents, and the Hugging Face helpers on small generated datasets.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from fuzzing import FUZZ, ODD_SCALARS, call, lengths_inputs, mostly, reference_lengths
from hypothesis import event, given, settings
from hypothesis import strategies as st

from bucketloader import BucketCache, analyze, compute_boundaries, recommend_num_buckets
from bucketloader.cache import CacheWarning

pytestmark = pytest.mark.timeout(180)

LENGTHS = [3, 4, 4, 9, 10, 31, 31, 7, 12, 18]


# --- BucketCache: whatever an entry file holds -------------------------------------------------
def _valid_entry(directory: Path) -> tuple[Path, bytes]:
    cache = BucketCache(directory)
    compute_boundaries(LENGTHS, 3, cache=cache)
    (path,) = directory.glob("*.json")
    return path, path.read_bytes()


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def entry_bytes(draw, valid: bytes):
    """Arbitrary bytes, or the valid entry with one field replaced / removed / truncated."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=300))
    if kind == 1:  # (a fraction: the entry's length varies with its timestamps)
        return valid[: int(draw(st.floats(0, 1)) * len(valid))]
    body = json.loads(valid)
    where = body["solution"] if kind in (2, 3) else body
    key = draw(st.sampled_from(sorted(where)))
    if kind == 4:
        del where[key]
    else:
        where[key] = draw(JSON_VALUES)
    if kind == 5 and draw(st.booleans()):
        body = draw(JSON_VALUES)
    return json.dumps(body, allow_nan=True).encode()


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_cache_entry_with_any_contents_is_a_miss_with_one_warning(tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("cache")
    path, valid = _valid_entry(directory)
    written = data.draw(entry_bytes(valid))
    path.write_bytes(written)
    want = compute_boundaries(LENGTHS, 3).tolist()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = compute_boundaries(LENGTHS, 3, cache=BucketCache(directory))  # never raises
    assert got.tolist() == want
    cache_warnings = [w for w in record if issubclass(w.category, CacheWarning)]
    assert len(cache_warnings) <= 1
    if cache_warnings:  # unusable: recomputed and replaced, so the next call is a clean hit
        assert "ignoring unusable cache entry" in str(cache_warnings[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = BucketCache(directory)
            assert compute_boundaries(LENGTHS, 3, cache=again).tolist() == want
            assert again.hits == 1
    else:  # still usable (an edit that changes nothing the entry promises)
        body = json.loads(written)
        assert body["solution"]["boundaries"] == want


# --- analyze and recommend_num_buckets ---------------------------------------------------------
KS = mostly(
    st.one_of(st.integers(1, 10), st.lists(st.integers(1, 10), min_size=1, max_size=3)),
    st.one_of(ODD_SCALARS, st.lists(st.one_of(st.integers(-2, 3), ODD_SCALARS), max_size=3)),
    one_in=8,
)
TARGETS = mostly(st.floats(0, 1), st.sampled_from([-0.1, 1.5, float("nan"), "5%", None]), 8)
COSTS = mostly(
    st.sampled_from([None, {"compile_seconds_per_shape": 10.0, "seconds_per_token": 1e-6}]),
    st.sampled_from(
        [
            {"compile_seconds_per_shape": -1.0, "seconds_per_token": 1e-6},
            {"compile_seconds_per_shape": float("nan"), "seconds_per_token": 0.0},
            {"seconds_per_token": 1e-6},
            {"compile_seconds_per_shape": "x", "seconds_per_token": 1e-6},
            "fast",
            3,
        ]
    ),
    one_in=8,
)
ANALYSIS_NAMES = ["lengths", "data", "num_buckets", "strategy", "batch_size", "padding_target",
                  "costs", "compile_seconds_per_shape", "seconds_per_token", "num_epochs",
                  "num_steps", "max_tokens", "column"]  # fmt: skip


@st.composite
def datasets_of_samples(draw):
    """A list of samples (a map-style dataset) and a column to measure."""
    n = draw(st.integers(1, 8))
    kind = draw(st.sampled_from(["tensors", "dicts", "lists", "mixed"]))
    rows = [draw(st.integers(0, 20)) for _ in range(n)]
    if kind == "tensors":
        return [torch.zeros(r) for r in rows], draw(st.sampled_from([None, None, "x", 0]))
    if kind == "dicts":
        items = [{"ids": list(range(r)), "label": 0} for r in rows]
        return items, draw(st.sampled_from(["ids", "ids", None, "label", "nope", len]))
    if kind == "lists":
        return [list(range(r)) for r in rows], None
    return [torch.zeros(rows[0]), "abc", None, {"a": 1}][: max(n, 2)], None


@settings(FUZZ, max_examples=60)
@given(made=datasets_of_samples())
def test_analyze_a_dataset_of_samples(made):
    items, column = made
    got = call(lambda: analyze(items, column=column, num_buckets=[2], progress=False),
               [*ANALYSIS_NAMES, "sample"])  # fmt: skip
    if got.ok:
        assert got.value.histogram.num_samples == len(items)


@settings(FUZZ, max_examples=150)
@given(
    lengths=lengths_inputs(max_size=40),
    k=KS,
    strategy=mostly(
        st.sampled_from([None, "optimal", ["percentile", "linear"]]),
        st.sampled_from(["x", [None], 3, []]),
        8,
    ),
    batch_size=mostly(st.one_of(st.none(), st.integers(1, 8)), st.sampled_from([0, -1, 2.5]), 8),
    target=TARGETS,
    costs=COSTS,
)
def test_analyze_any_input(lengths, k, strategy, batch_size, target, costs):
    got = call(
        lambda: analyze(lengths, num_buckets=k, strategy=strategy, batch_size=batch_size,
                        padding_target=target, costs=costs, progress=False),
        ANALYSIS_NAMES,
    )  # fmt: skip
    if got.ok:
        report = got.value
        samples = isinstance(lengths, (list, tuple)) and isinstance(lengths[0], (list, tuple))
        assert reference_lengths(lengths) is not None or samples  # lengths, or a dataset
        assert report.rows and report.recommended in report.rows
        for row in report.rows:
            assert row.padding_ratio >= 0 and row.num_shapes >= 1
        assert str(report)  # the text summary renders


@settings(FUZZ, max_examples=150)
@given(
    lengths=lengths_inputs(max_size=40),
    k=KS,
    strategy=mostly(
        st.sampled_from(["optimal", ["percentile", "optimal"]]),
        st.sampled_from(["x", [None], 3, []]),
        8,
    ),
    costs=COSTS,
    target=TARGETS,
    run=mostly(
        st.sampled_from(
            [
                {"batch_size": 4},
                {"num_epochs": 2, "max_tokens": 64},
                {"num_steps": 100, "batch_size": 2},
                {},
            ]
        ),
        st.sampled_from(
            [
                {"num_epochs": -1},
                {"num_steps": 0},
                {"batch_size": 0},
                {"num_epochs": 1, "num_steps": 5},
                {"max_tokens": -5},
            ]
        ),
        8,
    ),
)
def test_recommend_num_buckets_any_input(lengths, k, strategy, costs, target, run):
    got = call(
        lambda: recommend_num_buckets(lengths, num_buckets=k, strategy=strategy, costs=costs,
                                      padding_target=target, **run),
        ANALYSIS_NAMES,
    )  # fmt: skip
    if got.ok:
        rec = got.value
        assert rec.best in rec.table and rec.num_buckets >= 1
        ref = reference_lengths(lengths)
        assert ref is not None and max(ref) <= rec.boundaries[-1]


# --- the command line: arbitrary arguments, arbitrary files ------------------------------------
FILE_CONTENTS = {
    "ok.txt": "5\n17\n3\n40\n9\n",
    "one_value.txt": "512\n" * 20,
    "two_cols.txt": "5\t7\n3\t4\n",
    "huge.txt": f"5\n{2**70}\n",
    "limit.txt": f"{2**62 - 1}\n1\n",
    "neg.txt": "4\n-2\n",
    "floats.txt": "4.0\n2.5\n",
    "words.txt": "four\n",
    "inf.txt": "1e400\n",
    "empty.txt": "",
    "binary.txt": b"\xff\xfe\x00\x01",
    "t.csv": "id,n\na,5\nb,7\n",
    "bad.csv": "n\n5\nx\n",
    "t.jsonl": '{"n": 5}\n{"n": [1, 2]}\n',
    "deep.jsonl": "[" * 5000 + "]" * 5000 + "\n",
    "nan.jsonl": '{"n": NaN}\n',
    "t.tsv": "n\n5\n",
    "weird.xyz": "5\n",
}


def _files(root: Path) -> dict[str, str]:
    root.mkdir(exist_ok=True)
    for name, content in FILE_CONTENTS.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    np.save(root / "ok.npy", np.array([5, 9, 3]))
    np.save(root / "float.npy", np.array([5.5, 9]))
    np.save(root / "2d.npy", np.array([[5, 9], [3, 4]]))
    np.save(root / "u64.npy", np.array([2**64 - 1], dtype=np.uint64))
    (root / "a_dir").mkdir(exist_ok=True)
    return {p.name: str(p) for p in root.iterdir()}


TOKENS = st.one_of(
    st.sampled_from(["-k", "--num-buckets", "--column", "--strategy", "--batch-size",
                     "--max-tokens", "--padding-target", "--cost", "--pad-to-multiple-of",
                     "--json", "--plot", "--help", "--version", "-x", "--"]),
    st.sampled_from(["0", "1", "3", "-1", "2.5", "nan", "1e400", "n", "optimal", "linear",
                     "percentile", "magic", "quadratic", str(2**62), str(2**70), ""]),
    st.text(alphabet="abc-=0123456789.", max_size=6),
)  # fmt: skip


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_cli_any_argv_exits_0_or_2_with_one_line(tmp_path_factory, data, capsys):
    from bucketloader.cli import main

    root = tmp_path_factory.mktemp("cli")
    files = _files(root / "in")
    command = data.draw(st.sampled_from(["report", "precompute", "report", "precompute", "demo",
                                         "bogus", None]))  # fmt: skip
    argv = [] if command is None else [command]
    if command in ("report", "precompute"):
        argv.append(data.draw(st.sampled_from([*sorted(files.values()), str(root / "nope.txt")])))
    if command == "precompute" and data.draw(st.booleans()):
        argv += ["-k", data.draw(st.sampled_from(["2", "0", "x", str(2**70)]))]
    argv += data.draw(st.lists(TOKENS, max_size=6))
    if command == "demo":  # the demo itself takes seconds: only its argument errors here
        bad = [["--num-buckets", "0"], ["--batch-size", "-3"], ["--max-batches", "x"],
               ["--plot", "demo.txt"]]  # fmt: skip
        argv += data.draw(st.sampled_from(bad))
    for option in ("--json", "--plot"):  # outputs stay in tmp (a valid PNG is tested elsewhere)
        if option in argv:
            i = argv.index(option)
            argv[i + 1 : i + 2] = [
                str(root / data.draw(st.sampled_from(["o.txt", "in", "o.json"])))
            ]
    argv += ["--cache-dir", str(root / "cache")] if command == "precompute" else []
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    event(f"exit {code}")
    assert code in (0, 2), (argv, code, out.err)
    assert "Traceback" not in out.err
    if code == 2 and "usage:" not in out.out and "usage:" not in out.err:
        lines = [x for x in out.err.strip().splitlines() if not x.startswith("solving (")]
        assert len(lines) == 1 and lines[0].startswith("bucketloader: error: "), (argv, out.err)


# --- Hugging Face: lengths and for_text on small generated datasets ---------------------------
COLUMN_VALUES = {
    "ids": st.lists(st.integers(0, 9), max_size=6),
    "text": st.text(max_size=8),
    "n": st.integers(0, 50),
    "f": st.floats(0, 50, allow_nan=False),
    "nested": st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=3),
    "maybe": st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=4)),
    "flag": st.booleans(),
}


@st.composite
def datasets_(draw, ids=False):
    import datasets

    rows = draw(st.integers(1, 6))
    names = draw(st.lists(st.sampled_from(sorted(COLUMN_VALUES)), min_size=1, max_size=3,
                          unique=True))  # fmt: skip
    if ids and "ids" not in names:
        names.append("ids")
    columns = {n: [draw(COLUMN_VALUES[n]) for _ in range(rows)] for n in names}
    ds = datasets.Dataset.from_dict(columns)
    if draw(st.booleans()) and rows > 1:
        ds = ds.select(list(range(rows))[::-1])  # an indices mapping
    return ds, columns


def _reference_hf(values):
    out = []
    for v in values:
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, (list, str)):
            out.append(len(v))
        elif isinstance(v, int):
            out.append(v)
        elif isinstance(v, float) and v == int(v):
            out.append(int(v))
        else:
            return None
    return out


@settings(FUZZ, max_examples=60)
@given(
    made=datasets_(),
    data=st.data(),
)
def test_hf_lengths_any_column(made, data):
    from bucketloader import hf

    ds, columns = made
    column = data.draw(
        mostly(
            st.sampled_from(sorted(columns)),
            st.sampled_from([None, 123, ["ids", "n"], [], ("ids",), "ids.x", "", ["ids", 3], 2.5,
                             "missing"]),
            one_in=3,
        )
    )  # fmt: skip
    got = call(lambda: hf.lengths(ds, column), ["column", "lengths"])
    if got.ok and isinstance(column, str) and column in columns:
        logical = list(range(len(ds)))
        if getattr(ds, "_indices", None) is not None:
            logical = logical[::-1]
        want = _reference_hf([columns[column][i] for i in logical])
        if want is not None:
            assert got.value.tolist() == want


@pytest.mark.filterwarnings("ignore:this BucketSampler plans .* of length 0")  # (length 0)
@settings(FUZZ, max_examples=40)
@given(
    made=datasets_(ids=True),
    column=mostly(
        st.just("ids"), st.sampled_from(["nested", "text", "n", "missing", ["ids", "n"]]), one_in=3
    ),
    pad=mostly(st.integers(0, 5), st.sampled_from([-1, 2.5, None, "0", 2**70]), 3),
    options=st.sampled_from(
        [
            {"batch_size": 2},
            {"max_tokens": 16},
            {"batch_size": 0},
            {"num_buckets": 2, "batch_size": 3},
            {},
            {"bogus": 1},
        ]
    ),
)
def test_hf_for_text_any_input(made, column, pad, options):
    from bucketloader import hf

    ds, _ = made
    got = call(
        lambda: hf.for_text(ds, column, pad_token_id=pad, **options),
        ["column", "pad_token_id", "tokenizer", "batch_size", "max_tokens", "lengths", "bogus",
         "num_buckets", "option"],
    )  # fmt: skip
    if got.ok:
        sampler, collate, data = got.value
        for batch in sampler:  # a column that is not token ids is refused, at the latest here
            out = call(lambda b=batch: collate([data[i] for i in b]), ["field", "column"])
            if out.ok and isinstance(column, str):
                assert tuple(out.value[column].shape) in sampler.shapes
            break


def test_hf_for_text_names_a_bad_column():
    import datasets

    from bucketloader import hf

    ds = datasets.Dataset.from_dict({"ids": [[1, 2], [3]]})
    with pytest.raises(TypeError, match="column"):
        hf.for_text(ds, 3, pad_token_id=0, batch_size=2)
