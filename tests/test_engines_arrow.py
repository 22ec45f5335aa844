"""engines.parquet_histogram: exact over shards of every real length file, bounded scan, errors."""

from __future__ import annotations

import contextlib
import decimal
import os
import signal
import sys

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import bucketloader
from bucketloader.engines import ScanResult, parquet_histogram
from bucketloader.histogram import JointHistogram, LengthHistogram
from bucketloader.solve import compute_boundaries
from tests.conftest import REAL_DATASETS, load_real


def _write_shards(path, table, shards, *, row_group_size=None):
    path.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, shards + 1).astype(int)
    for i in range(shards):
        part = table.slice(bounds[i], bounds[i + 1] - bounds[i])
        pq.write_table(part, path / f"part-{i:03d}.parquet", row_group_size=row_group_size)


@pytest.mark.parametrize("name", sorted(REAL_DATASETS))
def test_exact_on_every_real_file_over_shards(tmp_path, name):
    arr = load_real(name)
    table = pa.table({"length": arr} if arr.ndim == 1 else {"src": arr[:, 0], "tgt": arr[:, 1]})
    shards = 8 + len(name) * 3  # 8..64 shards, a different count per file
    _write_shards(tmp_path / "ds", table, shards, row_group_size=997)
    if arr.ndim == 1:
        r = parquet_histogram(tmp_path / "ds", "length", batch_size=4096)
        values, counts = np.unique(arr, return_counts=True)
        assert r.histogram.values.tolist() == values.tolist()
        assert r.histogram.counts.tolist() == counts.tolist()
        assert compute_boundaries(r.histogram, 8).tobytes() == compute_boundaries(arr, 8).tobytes()
    else:
        r = parquet_histogram(str(tmp_path / "ds" / "*.parquet"), ["src", "tgt"])
        rows, counts = np.unique(arr, axis=0, return_counts=True)
        assert isinstance(r.histogram, JointHistogram)
        assert r.histogram.rows.tolist() == rows.tolist()
        assert r.histogram.counts.tolist() == counts.tolist()
    assert (r.num_rows, r.num_nulls, r.engine) == (arr.shape[0], 0, "arrow")


@pytest.mark.skipif(not hasattr(pa, "string_view"), reason="pyarrow without views (< 16)")
def test_string_and_binary_views_are_measured_like_strings_and_binaries():
    """A string_view column died in pyarrow ('utf8_length' has no kernel for string_view) and a
    binary_view one was refused: views are text, measured through one text_lengths."""
    from bucketloader._arrow import text_lengths
    from bucketloader.cli.files import characters_note
    from bucketloader.hf.lengths import column_lengths

    words = ["é" * n for n in (3, 0, 7, 3)]
    table = pa.table(
        {
            "text": pa.array(words, pa.string_view()),
            "raw": pa.array([w.encode() for w in words], pa.binary_view()),
        }
    )
    ref = LengthHistogram.from_lengths([3, 0, 7, 3])
    assert parquet_histogram(table, "text").histogram == ref  # (characters)
    assert parquet_histogram(table, "raw").histogram == LengthHistogram.from_lengths([6, 0, 14, 6])
    assert column_lengths(table.column("text"), "text").tolist() == [3, 0, 7, 3]
    assert column_lengths(table.column("raw"), "raw").tolist() == [6, 0, 14, 6]
    assert "measured in characters" in characters_note(table.schema, "text", "t.parquet")
    assert text_lengths(pa.array([None, "ab"], pa.string_view())).to_pylist() == [None, 2]
    with pytest.raises(TypeError, match=r"string or binary arrays, got type int64"):
        text_lengths(pa.array([1]))


def test_list_string_and_tensor_like_columns_from_offsets(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 40, size=500)
    ids = pa.array([list(range(n)) for n in lengths], pa.list_(pa.int32()))
    text = pa.array(["é" * n for n in lengths])  # characters, not bytes
    big = pa.array([list(range(n)) for n in lengths], pa.large_list(pa.int16()))
    table = pa.table({"ids": ids, "text": text, "big": big, "n": lengths.astype(np.uint16)})
    _write_shards(tmp_path / "d", table, 5)
    ref = LengthHistogram.from_lengths(lengths)
    for col in ("ids", "text", "big", "n"):
        assert parquet_histogram(tmp_path / "d", col).histogram == ref, col
    # the other accepted sources give the same answer
    dataset = pads.dataset(str(tmp_path / "d"), format="parquet")
    assert parquet_histogram(dataset, "ids").histogram == ref
    assert parquet_histogram(table, "ids", batch_size=7).histogram == ref
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=64))
    assert parquet_histogram(reader, "ids").histogram == ref
    files = sorted(str(p) for p in (tmp_path / "d").iterdir())
    assert parquet_histogram(files, "ids").histogram == ref
    assert parquet_histogram(iter(table.to_batches(100)), "n").histogram == ref
    # an Arrow IPC (Feather) dataset is read the same way
    pads.write_dataset(table, tmp_path / "ipc", format="ipc")
    assert parquet_histogram(pads.dataset(tmp_path / "ipc", format="ipc"), "ids").histogram == ref


def test_nulls_are_counted_never_dropped(tmp_path):
    table = pa.table({"ids": pa.array([[1, 2], None, [], [3], None]), "n": [1, 2, None, 4, 5]})
    pq.write_table(table, tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"has 2 null row\(s\) out of 5.*nulls='skip'"):
        parquet_histogram(tmp_path / "x.parquet", "ids")
    r = parquet_histogram(tmp_path / "x.parquet", "ids", nulls="skip")
    assert isinstance(r, ScanResult)
    assert r.histogram.values.tolist() == [0, 1, 2] and r.histogram.counts.tolist() == [1, 1, 1]
    assert (r.num_rows, r.num_nulls) == (5, 2)
    assert r.histogram.num_samples + r.num_nulls == r.num_rows
    # several columns: a row is null when any of them is
    joint = parquet_histogram(tmp_path / "x.parquet", ["ids", "n"], nulls="skip")
    assert joint.histogram.rows.tolist() == [[1, 4], [2, 1]] and joint.num_nulls == 3
    only_nulls = pa.table({"ids": pa.array([None, None], pa.list_(pa.int64()))})
    with pytest.raises(ValueError, match="every one of its 2 rows is null"):
        parquet_histogram(only_nulls, "ids", nulls="skip")


def test_files_are_scanned_one_at_a_time_not_read_ahead(tmp_path, monkeypatch):
    """NOTE [ One file at a time ]: a consumer slower than the reader (each batch's histogram)
    let the dataset scanner buffer the files ahead, memory growing with the rows (before: the
    peak held all 512 KB of this data set; now about one file's batches)."""
    import time

    from bucketloader.engines import _common

    for i in range(8):
        pq.write_table(pa.table({"n": np.arange(8192, dtype=np.int64)}), tmp_path / f"{i}.parquet")
    peak, add = [0], _common.Accumulator.add

    def slow_add(self, lengths, num_nulls=0):
        time.sleep(0.001)
        peak[0] = max(peak[0], pa.total_allocated_bytes())
        return add(self, lengths, num_nulls)

    monkeypatch.setattr(_common.Accumulator, "add", slow_add)
    base = pa.total_allocated_bytes()  # (the process's: what earlier tests left allocated)
    assert parquet_histogram(tmp_path, "n", batch_size=2048).num_rows == 8 * 8192
    assert peak[0] - base < 8 * 8192 * 8 // 2, (peak[0], base)
    # s19-review: small files share a scan up to a batch's rows (a scanner per file doubled the
    # time of 2,000 files of 50 rows)
    from bucketloader.engines.arrow import _file_groups

    files = pads.dataset(sorted(str(p) for p in tmp_path.glob("*.parquet")))
    rows = {f.path: 8192 for f in files.get_fragments()}
    assert [len(g) for g in _file_groups(files, rows, 2048)] == [1] * 8
    assert [len(g) for g in _file_groups(files, rows, 3 * 8192)] == [3, 3, 2]


def test_progress_bar_counts_rows(tmp_path, capsys):
    pytest.importorskip("tqdm")
    pq.write_table(pa.table({"n": list(range(300))}), tmp_path / "x.parquet")
    r = parquet_histogram(tmp_path, "n", progress=True, batch_size=100)
    assert r.num_rows == 300
    assert "300/300" in capsys.readouterr().err


def test_progress_counts_every_fragment_of_a_file(tmp_path, capsys):
    """A user's dataset may hold one file's row groups as several fragments: the rows of a
    file are the sum of its fragments (the progress total), not its last fragment's."""
    pytest.importorskip("tqdm")
    pq.write_table(pa.table({"n": list(range(300))}), tmp_path / "x.parquet", row_group_size=100)
    whole = pads.dataset(tmp_path / "x.parquet", format="parquet")
    parts = [g for f in whole.get_fragments() for g in f.split_by_row_group()]
    assert len(parts) == 3
    ds = pads.FileSystemDataset(parts, whole.schema, whole.format, whole.filesystem)
    r = parquet_histogram(ds, "n", progress=True, batch_size=100)
    assert r.num_rows == 300 and not r.empty_files
    assert "300/300" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "column", "kind", "message"),
    [
        (lambda p: pa.table({"n": pa.array([], pa.int64())}), "n", ValueError, r"has no rows"),
        (lambda p: pa.table({"n": [1, 2]}), "m", ValueError, r"column 'm' not found.*\['n'\]$"),
        (  # s34: a name missing a letter named no near one
            lambda p: pa.table({"input_ids": [[1]]}),
            "input_id",
            ValueError,
            r"has columns \['input_ids'\]; did you mean column='input_ids'\?$",
        ),
        (  # s19: a path into a struct column said 'not found' and named no way to it
            lambda p: pa.table({"meta": [{"n": 3}]}),
            "meta.n",
            ValueError,
            r"struct column 'meta'.*\{'meta\.n': pyarrow\.compute\.field\('meta', 'n'\)\}",
        ),
        (lambda p: pa.table({"f": [1.0, 2.5]}), "f", TypeError, r"holds double numbers.*int64"),
        (
            lambda p: pa.table({"d": pa.array([decimal.Decimal(3)], pa.decimal128(5, 0))}),
            "d",
            TypeError,
            r"holds decimal128\(5, 0\) numbers.*int64",
        ),
        (
            lambda p: pa.table({"nested": [[[1], [2, 3]]]}),
            "nested",
            TypeError,
            r"nested list .*ambiguous",
        ),
        (lambda p: pa.table({"s": [{"a": 1}]}), "s", TypeError, r"has type struct"),
        (lambda p: pa.table({"n": [3, -1]}), "n", ValueError, r"negative length -1"),
        (
            lambda p: pa.table({"n": [2**62]}),
            "n",
            ValueError,
            r"length 4611686018427387904.*2\*\*62",
        ),
        (
            lambda p: pa.table({"n": pa.array([2**63], pa.uint64())}),
            "n",
            ValueError,
            r"not below 2\*\*62",
        ),
        (lambda p: str(p / "none" / "*.parquet"), "n", FileNotFoundError, r"no file matches"),
        (lambda p: str(p / "missing"), "n", FileNotFoundError, r"no such file, directory or glob"),
        (lambda p: 42, "n", TypeError, r"source must be a Parquet path .* got int"),
        (lambda p: pa.table({"n": [1]}), 3, TypeError, r"column must be a column name"),
        (lambda p: pa.table({"n": [1]}), ["n", "n"], TypeError, r"list of distinct names"),
    ],
)
def test_bad_input_one_clear_error(tmp_path, make, column, kind, message):
    with pytest.raises(kind, match=message):
        parquet_histogram(make(tmp_path), column)


def test_consumed_reader_or_generator_and_bad_options(tmp_path):
    table = pa.table({"n": [1, 2, 3]})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    assert parquet_histogram(reader, "n").num_rows == 3
    with pytest.raises(ValueError, match="already consumed"):
        parquet_histogram(reader, "n")
    gen = (b for b in table.to_batches())
    parquet_histogram(gen, "n")
    with pytest.raises(ValueError, match="already consumed"):
        parquet_histogram(gen, "n")
    with pytest.raises(ValueError, match=r"nulls must be one of 'raise', 'skip', got nulls='drop'"):
        parquet_histogram(table, "n", nulls="drop")
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        parquet_histogram(table, "n", batch_size=0)
    with pytest.raises(ValueError, match=r"batch_size must be an int >= 1 and <= 46116"):
        parquet_histogram(table, "n", batch_size=2**70)  # (was pyarrow's OverflowError; s8-polish)
    for empty in ([], ()):  # (s30-scale: "source must be ... a list of paths ..., got list")
        with pytest.raises(ValueError, match=r"source is an empty (list|tuple): there are no "):
            parquet_histogram(empty, "n")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(
        ValueError,
        match=r"bad\.parquet is not a Parquet file \(it begins with b'not ', not with the Parquet "
        r"magic bytes PAR1\); it is truncated or not Parquet at all",
    ):
        parquet_histogram(tmp_path / "bad.parquet", "n")
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 and then nothing")  # (magic, no footer)
    with pytest.raises(ValueError, match="not readable as Parquet"):
        parquet_histogram(tmp_path / "cut.parquet", "n")


def test_a_corrupt_file_among_shards_is_named_on_every_engine(tmp_path):
    """s27-eng: a corrupt shard in a directory escaped as pyarrow's ArrowInvalid (local), and
    `report --engine ray|spark` said only "Parquet file size is 15 bytes, ..." with no file."""
    from bucketloader.cli.engines import _footers

    pq.write_table(pa.table({"n": [7, 3]}), tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"PAR1garbagePAR1")
    files = [str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]
    for call in (lambda: parquet_histogram(tmp_path, "n"), lambda: _footers(files, "n")):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(f"{files[1]}: not readable as Parquet (")
        assert "leave this file out" in str(info.value)


def test_engine_not_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'bucketloader\[arrow\]'"):
        parquet_histogram("x", "n")


def test_cli_reads_parquet_shards_on_the_local_engine(tmp_path, capsys, monkeypatch):
    import json

    from bucketloader.cli.main import main

    arr = load_real("ecoli")
    _write_shards(tmp_path / "shards", pa.table({"ids": pa.array([[0] * int(n) for n in arr])}), 9)
    np.savetxt(tmp_path / "lengths.txt", arr, fmt="%d")
    out = {}
    for name, source, extra in [
        ("txt", str(tmp_path / "lengths.txt"), []),
        ("dir", str(tmp_path / "shards"), ["--column", "ids"]),
        ("glob", str(tmp_path / "shards" / "part-*.parquet"), ["--engine", "local"]),
    ]:
        js = tmp_path / f"{name}.json"
        argv = ["precompute", source, "-k", "6", "--batch-size", "8", "--json", str(js), *extra]
        assert main([*argv, "--cache-dir", str(tmp_path / "cache")]) == 0, capsys.readouterr()
        out[name] = json.loads(js.read_text())
    assert out["dir"]["solution"]["boundaries"] == out["txt"]["solution"]["boundaries"]
    assert out["glob"]["buckets"] == out["txt"]["buckets"]
    assert main(["report", str(tmp_path / "shards"), "--column", "ids", "-k", "4"]) == 0
    assert "4,391" in capsys.readouterr().out
    monkeypatch.setattr(sys.modules["bucketloader.cli.main"], "MAX_BASELINE_SAMPLES", 1000)
    assert main(["report", str(tmp_path / "shards"), "--column", "ids", "-k", "4"]) == 0
    assert "dynamic-padding baseline is skipped" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "lengths.txt"), "--engine", "local"]) == 2
    assert "--engine local reads Parquet shards" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "shards"), "--column", "nope"]) == 2
    assert "column 'nope' not found" in capsys.readouterr().err


def _shard_json(path: str) -> str:
    """A worker of the docs' "any other engine" recipe: measure one shard, return JSON."""
    return parquet_histogram(path, "n").histogram.to_json()


def test_any_engine_plugs_in_through_json_and_merge_in_processes(tmp_path):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    arr = load_real("europarl")[:, 1]
    _write_shards(tmp_path, pa.table({"n": arr}), 12)
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    ctx = multiprocessing.get_context("fork")  # separate processes: only JSON comes back
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        parts = list(pool.map(_shard_json, files))
    merged = LengthHistogram.merge(LengthHistogram.from_json(p) for p in parts)
    assert merged == LengthHistogram.from_lengths(arr)
    assert compute_boundaries(merged, 8).tobytes() == compute_boundaries(arr, 8).tobytes()


def test_a_file_without_the_column_is_named(tmp_path):
    """The dataset's schema is its first file's: a later file that lacks the measured column is
    named, not read as null rows (s5-user R4)."""
    pq.write_table(pa.table({"ids": pa.array([[1] * 5, [1] * 7], pa.list_(pa.int32()))}),
                   tmp_path / "a.parquet")  # fmt: skip
    pq.write_table(pa.table({"other": pa.array([1, 2, 3])}), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"b\.parquet: no column 'ids' \(the file has columns"):
        parquet_histogram(tmp_path, column="ids")


def test_a_negative_length_names_the_file_that_holds_it(tmp_path):
    """Small files are scanned together, so the error said "3 files: column 'n' holds the
    negative length -3" (or only the directory's name) of a folder of shards: which one?"""
    for name, values in (("a", [3, 4]), ("b", [5, -3]), ("c", [6])):
        pq.write_table(pa.table({"n": values}), tmp_path / f"{name}.parquet")
    files = sorted(str(p) for p in tmp_path.iterdir())
    for source in (tmp_path, files):
        with pytest.raises(
            ValueError, match=r"b\.parquet: column 'n' holds the negative length -3"
        ):
            parquet_histogram(source, "n")


def test_empty_shards_are_counted_and_told_and_an_untyped_one_still_reads(tmp_path, capsys):
    """An empty Parquet shard among others was read silently (s8-fin2); one written from an
    empty list (column type null) sorted first made every other file fail to cast, a raw
    ArrowNotImplementedError (a traceback from the CLI). Both read now; the scan names the
    empty files and the CLI says how many."""
    from bucketloader.cli.engines import _footers
    from bucketloader.cli.main import main

    typed = pa.schema([("ids", pa.list_(pa.int64()))])
    for name, empty in [("typed", pa.table({"ids": []}, schema=typed)),
                        ("untyped", pa.table({"ids": []}))]:  # fmt: skip
        d = tmp_path / name
        d.mkdir()
        pq.write_table(empty, d / "part-0.parquet")  # first in sorted order
        pq.write_table(pa.table({"ids": [[1, 2], [3], [4, 5, 6]]}), d / "part-1.parquet")
        pq.write_table(empty, d / "part-2.parquet")
        r = parquet_histogram(d, "ids")
        assert (r.num_rows, r.histogram.values.tolist()) == (3, [1, 2, 3])
        assert r.empty_files == (str(d / "part-0.parquet"), str(d / "part-2.parquet"))
        assert main(["report", str(d), "-k", "2"]) == 0
        err = capsys.readouterr().err
        assert "note: 2 of the 3 Parquet files hold no rows (part-0.parquet, part-2.parquet)" in err
        files = [str(p) for p in sorted(d.iterdir())]
        assert _footers(files, "ids")[0] == r.empty_files  # what --engine ray / spark tell
    full = tmp_path / "typed" / "part-1.parquet"
    assert parquet_histogram(full, "ids").empty_files == ()  # nothing to tell
    assert main(["report", str(full), "-k", "2"]) == 0
    assert "hold no rows" not in capsys.readouterr().err


def test_an_untyped_empty_first_shard_unifies_only_the_measured_columns(tmp_path):
    """s9-rev3: the fix for an empty first shard written from empty lists (type null) unified
    the schemas of every column: shards that disagree on a column the scan never reads (an int
    label here, a string one there) then failed, where they read before. Only the measured
    columns are unified now, widening where no value is lost (int32 and int64 lengths: a length
    of 2**40 reads exactly); a float length column is still refused."""
    null = pa.array([], pa.null())
    shards = [
        pa.table({"ids": null, "n": null, "label": null}),  # sorted first: the dataset's schema
        pa.table({"ids": pa.array([[1, 2]], pa.list_(pa.int32())), "n": pa.array([3], pa.int32()),
                  "label": [1]}),
        pa.table({"ids": [[1, 2, 3]], "n": pa.array([2**40]), "label": ["x"]}),
    ]  # fmt: skip
    for i, table in enumerate(shards):
        pq.write_table(table, tmp_path / f"part-{i}.parquet")
    ids = parquet_histogram(tmp_path, "ids")
    assert (ids.histogram.values.tolist(), ids.empty_files) == (
        [2, 3],
        (str(tmp_path / "part-0.parquet"),),
    )
    assert parquet_histogram(tmp_path, "n").histogram.values.tolist() == [3, 2**40]
    pq.write_table(pa.table({"n": [2.5], "ids": [[1]], "label": [0]}), tmp_path / "part-3.parquet")
    with pytest.raises(TypeError, match="column 'n' holds double numbers; lengths are whole"):
        parquet_histogram(tmp_path, "n")


@pytest.mark.parametrize("given", ["files", "dataset"])
def test_an_out_of_range_value_for_the_first_files_type_is_a_failed_cast(tmp_path, given):
    """s10: the first file's int32 length column set the dataset's type, and a later file's int64
    value past 2**31 failed the cast: the error said the file "could not be read as Parquet". It
    says what happened: the column, the file, the value, both types, and the fix (which reads).
    s20: files listed here read, widened to int64 (exact); a user's dataset keeps its schema."""
    pq.write_table(pa.table({"n": pa.array([3, 4], pa.int32())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": pa.array([5, 2**40, 7], pa.int64())}), tmp_path / "b.parquet")
    if given == "files":
        for source in (tmp_path, [tmp_path / "a.parquet", tmp_path / "b.parquet"]):
            r = parquet_histogram(source, "n")
            assert (r.histogram.values.tolist(), r.num_rows) == ([3, 4, 5, 7, 2**40], 5)
        pq.write_table(pa.table({"n": pa.array([2**8], pa.uint16())}), tmp_path / "c.parquet")
        pq.write_table(pa.table({"m": [1]}), tmp_path / "d.parquet")  # (no n: skipped)
        r = parquet_histogram(tmp_path, "n", nulls="skip")
        assert (r.histogram.values.tolist(), r.num_nulls) == ([3, 4, 5, 7, 256, 2**40], 1)
        return
    source = pads.dataset(tmp_path)
    with pytest.raises(ValueError) as info:
        parquet_histogram(source, "n")
    message = str(info.value)
    assert "could not be read as Parquet" not in message
    assert "b.parquet" in message and "column 'n'" in message
    assert "1099511627776" in message and "int32" in message and "int64" in message
    assert "pyarrow.dataset.dataset(" in message and "pa.int64()" in message
    fixed = pads.dataset(tmp_path, schema=pa.schema([("n", pa.int64())]))  # the fix it names
    assert parquet_histogram(fixed, "n").histogram.values.tolist() == [3, 4, 5, 7, 2**40]


@pytest.mark.parametrize(
    ("first", "fine", "bad", "arrow"),
    [
        (pa.int64(), pa.array([5.0, 6.0]), pa.array([7.0, 7.5]), "Float value 7.5"),
        (pa.int64(), pa.array(["5", "6"]), pa.array(["7", "x"]), "Failed to parse string: 'x'"),
        (pa.int64(), pa.array([5], pa.int32()), pa.array([[1]], pa.list_(pa.int64())),
         "but list<element: int64> in"),
        (pa.int32(), pa.array([5, 6], pa.int64()), pa.array([9, 2**40]), "value 1099511627776"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("given", ["files", "dataset"])
def test_a_failed_cast_names_the_file_that_holds_the_bad_value(
    tmp_path, first, fine, bad, arrow, given
):
    """s10 left alone: the error named the first file whose type differed from the dataset's
    (b, whose values cast), not the one whose values did not (c); a list where a number is
    escaped as Arrow's own ArrowNotImplementedError."""
    pq.write_table(pa.table({"n": pa.array([3, 4], first)}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": fine}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"n": bad}), tmp_path / "c.parquet")
    if given == "files" and pa.types.is_integer(bad.type) and pa.types.is_integer(fine.type):
        got = parquet_histogram(tmp_path, "n").histogram.values.tolist()  # (s20: widened)
        assert got == sorted([3, 4, *fine.to_pylist(), *bad.to_pylist()])
        return
    if given == "files":  # a file of another kind is refused before any cast (s27-eng)
        with pytest.raises(ValueError) as info:
            parquet_histogram(tmp_path, "n")
        other = "c" if pa.types.is_integer(fine.type) else "b"
        assert f"{other}.parquet: column 'n' is " in str(info.value), str(info.value)
        assert "would cast this file's values" in str(info.value)
        return
    with pytest.raises(ValueError) as info:
        parquet_histogram(pads.dataset(tmp_path), "n")
    message = str(info.value)
    assert "c.parquet" in message and "b.parquet" not in message, message
    assert f"is {first} in the dataset's schema" in message and arrow in message
    assert "the cast to the dataset's type failed" in message


@pytest.mark.parametrize(
    "other",
    [pa.array(["12"]), pa.array([2.0]), pa.array([True]), pa.array([3], pa.decimal128(5, 0))],
    ids=["string", "double", "bool", "decimal"],
)
@pytest.mark.parametrize("int_first", [True, False])
def test_a_file_of_another_kind_is_refused_not_cast(tmp_path, other, int_first):
    """s27-eng: an int64 file then a string file of "12" counted the length 12 (alone, "12" is
    2 characters); in the other order the int 7 was cast to "7" and counted 1; a double 2.0 or
    a bool after the int file read as 2 / 1, where it first is refused (NOTE [ A file of
    another kind ])."""
    first, second = (pa.array([7]), other) if int_first else (other, pa.array([7]))
    pq.write_table(pa.table({"n": first}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": second}), tmp_path / "b.parquet")
    with pytest.raises((ValueError, TypeError)) as info:
        parquet_histogram(tmp_path, "n")
    message = str(info.value)
    if int_first or pa.types.is_string(other.type):  # (else the first file's type is refused)
        assert "b.parquet: column 'n' is " in message and "one type in every file" in message


def test_a_directory_reads_its_parquet_files_only(tmp_path, caplog):
    """A Hub download's README.md beside the shards was read as Parquet and failed (s10-user);
    names starting with _ or . are skipped as pyarrow.dataset and Spark skip them (NOTE [ Which
    files a directory of Parquet shards holds ])."""
    import logging

    root = tmp_path / "ds"
    _write_shards(root / "year=2024", pa.table({"n": [1, 2, 3]}), 1)  # hive partition
    pq.write_table(pa.table({"n": [4]}), root / "B.PARQUET")
    pq.write_table(pa.table({"n": [99]}), root / "_tmp.parquet")  # skipped, as pyarrow does
    (root / "_temporary").mkdir()
    pq.write_table(pa.table({"n": [99]}), root / "_temporary" / "part-0.parquet")
    (root / ".cache").mkdir()
    pq.write_table(pa.table({"n": [99]}), root / ".cache" / "x.parquet")
    (root / "_SUCCESS").write_text("")
    (root / "README.md").write_text("# a dataset card\n")
    (root / "year=2024" / "notes.txt").write_text("written by hand\n")
    with caplog.at_level(logging.INFO, logger="bucketloader.engines.arrow"):
        r = parquet_histogram(root, "n")
    assert sorted(np.repeat(r.histogram.values, r.histogram.counts).tolist()) == [1, 2, 3, 4]
    assert (
        f"{root}: read 2 Parquet files; skipped 2 other files (README.md, "
        f"year=2024{os.sep}notes.txt)"
    ) in caplog.text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, r"ds: the directory holds no Parquet file \(it is empty\)"),
        (
            lambda d: (d / "README.md").write_text("hi"),
            r"no Parquet file; it holds 1 other file: README\.md; a directory is read as the "
            r"Parquet files under it \(\*\.parquet, or where there is none, the files that begin "
            r"with the Parquet magic bytes PAR1\), skipping names that start with _ or \.: pass",
        ),
        (
            lambda d: (d / "_SUCCESS").write_text(""),
            r"no Parquet file; 1 entry whose names start with _ or \. \(skipped, as pyarrow and "
            r"Spark skip them\): _SUCCESS",
        ),
    ],
)
def test_a_directory_without_parquet_files_is_an_error(tmp_path, make, message):
    (tmp_path / "ds").mkdir()
    make(tmp_path / "ds")
    with pytest.raises(FileNotFoundError, match=message):
        parquet_histogram(tmp_path / "ds", "n")


def test_a_glob_or_file_that_is_not_parquet_names_the_file(tmp_path):
    _write_shards(tmp_path, pa.table({"n": [1, 2]}), 1)
    (tmp_path / "lengths.txt").write_text("12\n7\n")
    with pytest.raises(
        ValueError,
        match=r"^the glob .*/\* matched .*/lengths\.txt, which is not a Parquet file \(it begins "
        r"with b'12\\n7', not with the Parquet magic bytes PAR1\); a glob names Parquet files "
        r"only: narrow it to them, e\.g\. 'data/\*\.parquet', or pass the directory .* itself, "
        r"which skips files that are not Parquet; a \.txt file of lengths is read on its own",
    ):
        parquet_histogram(str(tmp_path / "*"), "n")
    assert parquet_histogram(str(tmp_path / "*.parquet"), "n").num_rows == 2
    with pytest.raises(ValueError, match=r"^.*lengths\.txt is not a Parquet file .*pass Parquet"):
        parquet_histogram(tmp_path / "lengths.txt", "n")
    with pytest.raises(ValueError, match=r"lengths\.txt is not a Parquet file"):  # in a list too
        parquet_histogram([tmp_path / "part-000.parquet", tmp_path / "lengths.txt"], "n")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (
            "lang=*/",
            r"matches 2 directories \(.*lang=a/, .*lang=b/\) and no file; .*lang=\*/\*\.parquet",
        ),
        ("*", r"matches 2 directories \(.*lang=a, .*lang=b\); .*name them all \(.*/\*\*/\*"),
    ],
)
def test_a_glob_that_matches_directories_names_them(tmp_path, pattern, message):
    """s19: a glob's directories are not read; 'data/lang=*/' said "no file matches the glob"
    (it matches two), and 'data/*' beside partition folders read the top file alone, the
    folders' rows left out without a word."""
    for part in ("a", "b"):
        _write_shards(tmp_path / f"lang={part}", pa.table({"n": [1, 2]}), 1)
    pq.write_table(pa.table({"n": [3]}), tmp_path / "top.parquet")
    for folder in ("empty", "_temporary", "logs"):  # no Parquet to leave out: not named
        (tmp_path / folder).mkdir()
    (tmp_path / "logs" / "run.log").write_text("hi")
    with pytest.raises(FileNotFoundError, match=message):
        parquet_histogram(f"{tmp_path}/{pattern}", "n")
    (tmp_path / "logs" / "run.log").unlink()  # (** matches it, a file that is not Parquet)
    assert parquet_histogram(str(tmp_path / "**"), "n").num_rows == 5  # (every folder's files)


def test_a_glob_that_matches_no_file_says_what_its_directory_holds(tmp_path):
    # s34-user2: "no file matches the glob X" gave no way on; a suffix typo ('*.parq') and a
    # directory that does not exist call for different fixes
    _write_shards(tmp_path / "d", pa.table({"n": [1, 2]}), 2)
    with pytest.raises(FileNotFoundError, match="no file matches the glob") as err:
        parquet_histogram(f"{tmp_path}/d/*.parq", "n")
    said = str(err.value)
    assert "holds 2 files, none matching" in said and ".parquet" in said
    assert f"or pass the directory itself ({tmp_path}/d)" in said
    with pytest.raises(FileNotFoundError, match="no file matches the glob") as err:
        parquet_histogram(f"{tmp_path}/nope/*.parquet", "n")
    assert f"{tmp_path}/nope does not exist" in str(err.value)


def test_the_stream_source_lists_a_directory_by_the_same_rule(tmp_path):
    from bucketloader.stream.arrow import ArrowRows

    _write_shards(tmp_path / "ds" / "sub", pa.table({"n": [1, 2]}), 1)
    pq.write_table(pa.table({"n": [3]}), tmp_path / "ds" / "a.parquet")
    (tmp_path / "ds" / "README.md").write_text("hi")
    pq.write_table(pa.table({"n": [99]}), tmp_path / "ds" / "_tmp.parquet")
    with pytest.warns(UserWarning, match=r"1 of them in subfolders: sub/ \(1 file, 2 rows\)"):
        assert [row["n"] for row in ArrowRows(tmp_path / "ds")] == [3, 1, 2]  # (sorted by path)
    assert [row["n"] for row in ArrowRows(str(tmp_path / "ds" / "*.parquet"))] == [99, 3]


def _lengths_stream(source, kind):
    from bucketloader.stream import BucketIterable, PackIterable

    if kind == "bucket":
        return BucketIterable(
            source, length_fn="ids", boundaries=[4, 8, 16], batch_size=4, shuffle_buffer=8
        )
    return PackIterable(source, length_fn="ids", row_length=16, batch_size=2, open_rows=4)


def _train_dir(root):
    root.mkdir(parents=True)
    for i in range(3):
        rows = [[100 * i + j] * (1 + (7 * j + i) % 13) for j in range(40)]  # (row ids)
        pq.write_table(pa.table({"ids": rows}), root / f"part-{i}.parquet")
    return root


def _flat(batches):
    return [[sample["ids"] for sample in batch] for batch in batches]


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_stream_state_is_refused_over_other_files(tmp_path, kind):
    """ArrowRows(dir) reads subfolders now: a state saved over a directory, resumed once a val/
    subfolder (or a new shard) is there, would read other rows at the saved positions. The state
    records the files (a digest); other files are refused naming both counts; the same files,
    listed otherwise (a glob), resume exactly."""
    import glob

    from bucketloader.stream.arrow import ArrowRows

    root = _train_dir(tmp_path / "train")
    stream = _lengths_stream(ArrowRows(root), kind)
    it = iter(stream)
    for _ in range(3):
        next(it)
    state = stream.state_dict()
    rest = _flat(it)
    assert state["config"]["source"]["files"] == 3 and state["config"]["source"]["nested"] == 0
    (root / "val").mkdir()
    pq.write_table(pa.table({"ids": [[7] * 3] * 10}), root / "val" / "v.parquet")
    with pytest.warns(UserWarning, match=r"in subfolders: val/ \(1 file, 10 rows\)"):
        widened = ArrowRows(root)
    with pytest.raises(
        ValueError,
        match=r"^state was saved over 3 Parquet files \(120 rows\), but this \w+'s source "
        r"reads 4 Parquet files \(130 rows\) .*set_epoch",
    ):
        _lengths_stream(widened, kind).load_state_dict(state)
    same = _lengths_stream(ArrowRows(sorted(glob.glob(str(root / "*.parquet")))), kind)
    same.load_state_dict(state)
    assert _flat(same) == rest
    with pytest.raises(ValueError, match=r"^state was saved over 3 Parquet files .*records no"):
        _lengths_stream([{"ids": [1]}] * 120, kind).load_state_dict(state)


@pytest.mark.parametrize("kind", ["bucket", "pack"])
def test_a_list_state_over_parquet_files_compares_their_rows(tmp_path, kind):
    """s32: a state saved over a list records its length, and ArrowRows over Parquet files
    records its files instead, so the length was compared with nothing: one row inserted at the
    front resumed silently (26 samples twice and 26 never, r5). The files' rows count as the
    length; the same rows resume exactly."""
    from bucketloader.stream.arrow import ArrowRows

    root = _train_dir(tmp_path / "train")
    rows = list(ArrowRows(root))
    stream = _lengths_stream(rows, kind)
    it = iter(stream)
    for _ in range(3):
        next(it)
    state = stream.state_dict()
    rest = _flat(it)
    assert state["config"]["samples"] == 120
    same = _lengths_stream(ArrowRows(root), kind)
    same.load_state_dict(state)
    assert _flat(same) == rest
    pq.write_table(pa.table({"ids": [[5] * 3]}), root / "part-0-first.parquet")
    with pytest.raises(ValueError, match=r"^state was saved over a source of 120 samples, but"):
        _lengths_stream(ArrowRows(root), kind).load_state_dict(state)


def test_a_state_saved_before_the_files_were_recorded(tmp_path):
    """A state without the record (saved before it existed) resumes where the directory has no
    file in a subfolder (the old rule read the same files), and is refused where one is."""
    import glob

    from bucketloader.stream.arrow import ArrowRows

    root = _train_dir(tmp_path / "train")
    stream = _lengths_stream(ArrowRows(root), "bucket")
    it = iter(stream)
    next(it)
    state = stream.state_dict()
    rest = _flat(it)
    state["config"].pop("source")
    again = _lengths_stream(ArrowRows(root), "bucket")
    again.load_state_dict(state)
    assert _flat(again) == rest
    (root / "val").mkdir()
    pq.write_table(pa.table({"ids": [[7] * 3] * 10}), root / "val" / "v.parquet")
    with pytest.warns(UserWarning, match="in subfolders"):
        widened = _lengths_stream(ArrowRows(root), "bucket")
    with pytest.raises(ValueError, match=r"^state was saved before .* 1 of them in subfolders"):
        widened.load_state_dict(state)
    top = _lengths_stream(ArrowRows(sorted(glob.glob(str(root / "*.parquet")))), "bucket")
    top.load_state_dict(state)
    assert _flat(top) == rest


@pytest.mark.parametrize("record", [{"digest": "0" * 16}, "abc", {"files": "3", "rows": 1}])
def test_a_state_whose_file_record_is_malformed_is_refused_clearly(tmp_path, record):
    """A hand-edited record was formatted as a count: ValueError "Cannot specify ',' with
    's'." or AttributeError, naming nothing."""
    from bucketloader.stream.arrow import ArrowRows

    stream = _lengths_stream(ArrowRows(_train_dir(tmp_path / "train")), "bucket")
    state = stream.state_dict()
    state["config"]["source"] = record
    with pytest.raises(ValueError, match=r"^state\['config'\]\['source'\] must record the files"):
        stream.load_state_dict(state)


def test_partitions_read_quietly_and_workers_keep_the_record(tmp_path):
    import pickle
    import warnings

    from bucketloader.stream.arrow import ArrowRows

    root = tmp_path / "events"
    for year in (2023, 2024):
        _write_shards(root / f"year={year}", pa.table({"ids": [[1, 2]] * 5}), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (hive partitions are the reason to read recursively)
        rows = ArrowRows(root)
        copy = pickle.loads(pickle.dumps(rows))  # (a DataLoader worker's copy: no warning)
    assert len(rows) == 10 and rows.fingerprint()["nested"] == 4
    assert copy.fingerprint() == rows.fingerprint()
    moved = tmp_path / "moved"
    root.rename(moved)  # (paths are recorded relative to the files' folder: data may move)
    assert ArrowRows(moved).fingerprint() == copy.fingerprint()
    assert ArrowRows(pa.table({"ids": [[1]]})).fingerprint() is None
    hub = tmp_path / "snapshot"
    _write_shards(hub / "data", pa.table({"ids": [[1]] * 4}), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (all in one subfolder: nothing mixed)
        assert len(ArrowRows(hub)) == 4
    _write_shards(hub / "val", pa.table({"ids": [[1]] * 3}), 1)
    with pytest.warns(
        UserWarning,
        match=r"3 of them in subfolders: data/ \(2 files, 4 rows\), "
        r"val/ \(1 file, 3 rows\); .*pass its folder, e\.g\. ArrowRows\('.*data'\)",
    ) as record:
        assert len(ArrowRows(hub)) == 7
    assert record[0].filename == __file__  # (at the line building it)


def test_a_directory_reads_parquet_shards_named_without_the_extension(tmp_path):
    """Hive writes ``000000_0``, Impala ``*.parq``, others ``*.pq``: a directory of them was read
    before the *.parquet rule (main, s10) and must still be, by their magic bytes; a README.md
    beside them is still skipped (s11-rev1)."""
    from bucketloader.stream.arrow import ArrowRows

    root = tmp_path / "warehouse" / "t"
    root.mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2]}), root / "000000_0")
    pq.write_table(pa.table({"n": [3]}), root / "abc_1_data.0.parq")
    pq.write_table(pa.table({"n": [4]}), root / "d.pq")
    (root / "README.md").write_text("# card\n")
    (root / "000001_0").write_text("")  # an empty file written by a failed task: skipped
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "pipe")  # never opened: its open blocks until a writer comes
    with _fails_after(30):  # (fail, never hang the suite)
        r = parquet_histogram(root, "n")
    assert sorted(np.repeat(r.histogram.values, r.histogram.counts).tolist()) == [1, 2, 3, 4]
    assert sorted(row["n"] for row in ArrowRows(root)) == [1, 2, 3, 4]


def test_a_glob_matching_a_marker_file_names_the_directory_as_the_fix(tmp_path):
    """``out/*`` over a Spark output matches ``_SUCCESS``: the error says the directory itself
    skips it (s11-rev1)."""
    _write_shards(tmp_path / "out", pa.table({"n": [1, 2]}), 1)
    (tmp_path / "out" / "_SUCCESS").write_text("")
    with pytest.raises(ValueError, match=r"or pass the directory .*out itself"):
        parquet_histogram(str(tmp_path / "out" / "*"), "n")
    assert parquet_histogram(tmp_path / "out", "n").num_rows == 2


def test_files_named_otherwise_are_read_only_where_no_parquet_name_is(tmp_path):
    """A Hub cache repo holds its shards twice: ``blobs/<sha>`` (Parquet bytes, no extension) and
    ``snapshots/<rev>/data/*.parquet``: where any ``*.parquet`` exists, only those are read, or
    every row would count twice (s11-rev1)."""
    repo = tmp_path / "datasets--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc" / "data").mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2, 3]}), repo / "blobs" / "9f2c1e")
    os.symlink(repo / "blobs" / "9f2c1e", repo / "snapshots" / "abc" / "data" / "train.parquet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    r = parquet_histogram(repo, "n")
    assert sorted(np.repeat(r.histogram.values, r.histogram.counts).tolist()) == [1, 2, 3]


def _hub_repo(tmp_path, revisions, main=None):
    """A Hub cache repo, as huggingface_hub lays it out: every revision's shard is a symlink to
    a blob (revision i has i + 3 rows)."""
    repo = tmp_path / "datasets--org--name"
    (repo / "blobs").mkdir(parents=True)
    for i, rev in enumerate(revisions):
        pq.write_table(pa.table({"n": list(range(1, i + 4))}), repo / "blobs" / f"b{i}")
        (repo / "snapshots" / rev / "data").mkdir(parents=True)
        os.symlink(repo / "blobs" / f"b{i}", repo / "snapshots" / rev / "data" / "train.parquet")
    if main is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(main)
    return repo


def test_a_hub_cache_with_several_revisions_reads_the_one_refs_main_names(tmp_path, caplog):
    """Each snapshot revision holds a copy of the shards: the lister read them all, counting
    every row once per revision (3 + 4 rows here, not 4)."""
    import logging

    from bucketloader._arrow import scan_parquet
    from bucketloader.stream.arrow import ArrowRows

    repo = _hub_repo(tmp_path, ["aaa", "bbb"], main="bbb\n")
    with caplog.at_level(logging.INFO, logger="bucketloader"):
        r = parquet_histogram(repo, "n")
    assert r.num_rows == 4
    assert sorted(np.repeat(r.histogram.values, r.histogram.counts).tolist()) == [1, 2, 3, 4]
    assert "skipped 1 other entry (snapshots/aaa/)" in caplog.text
    assert [row["n"] for row in ArrowRows(repo)] == [1, 2, 3, 4]
    files, skipped = scan_parquet(repo / "snapshots")  # (the snapshots folder itself)
    assert len(files) == 1 and [os.path.basename(s.rstrip(os.sep)) for s in skipped] == ["aaa"]
    assert parquet_histogram(repo / "snapshots" / "aaa", "n").num_rows == 3  # (one, by path)


@pytest.mark.parametrize("main", [None, "ccc"])
def test_a_hub_cache_with_several_revisions_and_no_main_is_an_error(tmp_path, main):
    repo = _hub_repo(tmp_path, ["aaa", "bbb"], main=main)
    said = "has no refs/main" if main is None else "its refs/main names 'ccc', not one of them"
    with pytest.raises(
        ValueError,
        match=rf"Hub cache holding 2 snapshot revisions \(aaa, bbb\), each a copy of the shards, "
        rf"and {said}: pass the snapshot to read, e\.g\. .*snapshots.aaa$",
    ):
        parquet_histogram(repo, "n")
    one = _hub_repo(tmp_path / "one", ["aaa"])  # one revision, no refs: that one
    assert parquet_histogram(one, "n").num_rows == 3


def test_a_hub_cache_whose_main_holds_no_parquet_reads_the_parquet_export(tmp_path):
    """``datasets`` loads some repos from their Parquet export: huggingface_hub then keeps
    ``refs/main`` (a snapshot of the card alone) and ``refs/refs/convert/parquet`` (the
    ``refs/convert/parquet`` revision's shards). Reading refs/main's snapshot only found no
    Parquet file (the lister read both revisions before, so the shards were found)."""
    repo = _hub_repo(tmp_path, ["bbb"])  # (the export's revision: 3 rows)
    (repo / "blobs" / "card").write_text("# card")
    (repo / "snapshots" / "aaa").mkdir()
    os.symlink(repo / "blobs" / "card", repo / "snapshots" / "aaa" / "README.md")
    (repo / "refs" / "refs" / "convert").mkdir(parents=True)
    (repo / "refs" / "main").write_text("aaa")
    (repo / "refs" / "refs" / "convert" / "parquet").write_text("bbb")
    assert parquet_histogram(repo, "n").num_rows == 3
    (repo / "refs" / "main").unlink()  # (no main: the one ref that names shards)
    assert parquet_histogram(repo, "n").num_rows == 3
    (repo / "refs" / "main").write_text("aaa")  # (main holds shards too: main is read)
    pq.write_table(pa.table({"n": [5] * 7}), repo / "blobs" / "m0")
    os.symlink(repo / "blobs" / "m0", repo / "snapshots" / "aaa" / "train.parquet")
    assert parquet_histogram(repo, "n").num_rows == 7


@contextlib.contextmanager
def _fails_after(seconds):
    """Raise instead of blocking for ever (POSIX: SIGALRM interrupts a blocking open)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def fail(*_):
        raise RuntimeError(f"blocked for {seconds} s")  # (not OSError, which a read catches)

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_file_listed_twice_is_refused_not_counted_twice(tmp_path):
    """A list of sources that reaches one file twice (the file twice, or a directory and a file
    in it) counted that file's rows twice, silently: a histogram of more samples than the data
    set holds."""
    _write_shards(tmp_path / "ds", pa.table({"n": np.arange(1, 7)}), 2)
    first = tmp_path / "ds" / "part-000.parquet"
    for source in ([first, first], [tmp_path / "ds", first], [first, f"{tmp_path}/ds/*.parquet"]):
        with pytest.raises(ValueError, match=r"reaches the file .*part-000\.parquet twice.*once"):
            parquet_histogram(source, "n")
    both = [first, tmp_path / "ds" / "part-001.parquet"]
    assert parquet_histogram(both, "n").histogram == LengthHistogram.from_lengths(range(1, 7))
    # through a symbolic link to the directory: the same files (they were counted twice)
    (tmp_path / "link").symlink_to(tmp_path / "ds", target_is_directory=True)
    with pytest.raises(ValueError, match=r"part-000\.parquet twice, also as .*link.part-000"):
        parquet_histogram([tmp_path / "ds", tmp_path / "link"], "n")
    # two links to one file (two names of one blob in a Hub snapshot) stay two files
    (tmp_path / "hub").mkdir()
    for name in ("a.parquet", "b.parquet"):
        (tmp_path / "hub" / name).symlink_to(first)
    assert parquet_histogram(tmp_path / "hub", "n").histogram.num_samples == 6


def test_nulls_in_a_directory_of_shards_name_the_file_that_holds_them(tmp_path):
    """A directory of shards with null rows said only "64 files (column 'n') has 1 null row(s)
    out of ...": which of the files to fill or filter was left to the user to find (s34-user2;
    one file alone was named). The first file holding a null is named now, among small files
    read together in one batch too, and a file read in several batches."""
    shards = {i: [3, 4, 5, 6] for i in range(6)} | {3: [7, None, 9, None], 5: [1, None]}
    for i, values in shards.items():
        pq.write_table(pa.table({"n": pa.array(values, pa.int64())}), tmp_path / f"p{i}.parquet")
    for batch_size in (2, 3, 65_536):  # a file in several batches; files sharing one batch
        with pytest.raises(ValueError, match=r"\(column 'n', the first in ") as e:
            parquet_histogram(tmp_path, "n", batch_size=batch_size)
        assert f"the first in {tmp_path / 'p3.parquet'}) has 3 null row(s)" in str(e.value)
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))  # a list: "6 files (...)"
    with pytest.raises(ValueError, match=r"^6 files \(column 'n', the first in .*p3\.parquet\)"):
        parquet_histogram(files, "n", batch_size=3)
    r = parquet_histogram(tmp_path, "n", nulls="skip")
    assert (r.num_rows, r.num_nulls) == (22, 3)


def test_a_scan_result_where_its_histogram_belongs_names_the_histogram(tmp_path):
    """``compute_boundaries(parquet_histogram(...), k)``, the first thing written after a scan,
    said only "lengths must be a list, numpy array or torch tensor ..., got ScanResult", and
    ``LengthHistogram.merge`` of scans pointed at ``from_json`` (s34-user2); both now name
    ``.histogram``, as ``ShardedSampler(shard_histograms=...)`` did."""
    from bucketloader.strategies.joint import solve_joint

    pq.write_table(pa.table({"n": [3, 4, 5, 9], "m": [1, 2, 2, 1]}), tmp_path / "a.parquet")
    result = parquet_histogram(tmp_path / "a.parquet", "n")
    with pytest.raises(TypeError, match=r"got ScanResult.*compute_boundaries\(result\.histogram"):
        compute_boundaries(result, 2)
    assert compute_boundaries(result.histogram, 2).tolist() == [5, 9]
    with pytest.raises(TypeError, match=r"got ScanResult at position 0.*its \.histogram"):
        LengthHistogram.merge([result, result])
    joint = parquet_histogram(tmp_path / "a.parquet", ["n", "m"])
    with pytest.raises(TypeError, match=r"got ScanResult.*solve_joint\(result\.histogram"):
        solve_joint(joint, 2)
    with pytest.raises(TypeError, match=r"got ScanResult.*\.histogram"):
        bucketloader.BucketSampler(result, num_buckets=2, batch_size=2)


def test_a_dictionary_encoded_column_is_measured_by_its_values(tmp_path):
    """A pandas ``category`` column written to Parquet reads back dictionary-encoded; it was
    refused with a fix parquet_histogram does not take (``pass length_fn=``)."""
    text = pa.array(["ab", "c", None, "ab", "dddd"]).dictionary_encode()
    ints = pa.array([3, 4, 3, 3, 9]).dictionary_encode()
    pq.write_table(pa.table({"text": text, "n": ints}), tmp_path / "a.parquet")
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "a.parquet").field("text").type)
    r = parquet_histogram(tmp_path / "a.parquet", "text", nulls="skip")
    assert r.histogram == LengthHistogram.from_lengths([2, 1, 2, 4]) and r.num_nulls == 1
    assert parquet_histogram(pa.table({"n": ints}), "n").histogram == LengthHistogram.from_lengths(
        [3, 4, 3, 3, 9]
    )
    with pytest.raises(ValueError, match="1 null row"):
        parquet_histogram(tmp_path / "a.parquet", "text")


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1.5, 2.0]),
        pa.array([{"x": 1}]),
        pa.array([[[1], [2, 3]]]),
        pa.array([True]),
        pa.array([1.5]).dictionary_encode(),
    ],
)
def test_a_type_without_a_length_names_a_fix_parquet_histogram_takes(column):
    """parquet_histogram has no ``length_fn=``; its type errors named it as the fix."""
    with pytest.raises(TypeError, match=r"column 'a' .*integer column and measure that") as info:
        parquet_histogram(pa.table({"a": column}), "a")
    assert "length_fn" not in str(info.value)


def test_the_file_without_a_column_named_is_the_first_one():
    """NOTE [ A file without the column ]: with two columns each missing from a different
    file, the error names the earlier file (and its column), not the later one."""
    from bucketloader.engines._common import missing_column

    found = missing_column([("f0.parquet", ["b"]), ("f1.parquet", ["a"])], ["a", "b"])
    assert found is not None and found.startswith("f0.parquet: no column 'a'")


def test_nulls_skip_reads_a_file_without_the_column_as_null_rows(tmp_path):
    """NOTE [ A file without the column ]: under nulls="raise" the file is named; under
    nulls="skip" its rows are nulls, left out and counted (a schema that grew a column)."""
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"other": [5]}), tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"b\.parquet: no column 'n'"):
        parquet_histogram(tmp_path, "n")
    r = parquet_histogram(tmp_path, "n", nulls="skip")
    assert r.histogram.values.tolist() == [1, 2] and (r.num_rows, r.num_nulls) == (3, 1)


def test_a_first_file_without_the_column_is_named_too(tmp_path):
    """s28-eng: the dataset's schema is its first file's, so a first file without the measured
    column made the scan say "column 'b' not found in 2 files; it has columns ['a']" while the
    second held it; now the column is taken from a file that holds it (an int32 / int64 column
    beside it widened as before), so the first file is named, or its rows skipped."""
    pq.write_table(pa.table({"a": pa.array([3, 4, 5], pa.int32())}), tmp_path / "0.parquet")
    pq.write_table(
        pa.table({"a": pa.array([6, 2**40], pa.int64()), "b": [2, 3]}), tmp_path / "1.parquet"
    )
    for columns in ("b", ["a", "b"]):
        with pytest.raises(ValueError, match=r"0\.parquet: no column 'b' \(the file has col"):
            parquet_histogram(tmp_path, columns)
    r = parquet_histogram(tmp_path, "b", nulls="skip")
    assert r.histogram.values.tolist() == [2, 3] and (r.num_rows, r.num_nulls) == (5, 3)
    r = parquet_histogram(tmp_path, ["a", "b"], nulls="skip")
    assert r.histogram.num_samples == 2 and r.num_nulls == 3
    with pytest.raises(KeyError, match=r"column 'c' not found in .*; it has columns"):  # (none)
        parquet_histogram(tmp_path, "c")


def test_a_column_no_file_holds_names_the_columns_of_every_file(tmp_path):
    """s29-left: a column held by no file was "not found ...; it has columns ['a']", the first
    file's only (a dataset's schema is its first file's), while a later file had 'b' and a
    struct 's' whose field the user may have meant; now every file's columns are named."""
    pq.write_table(pa.table({"a": [[1], [1, 2]]}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"a": [[1]], "b": [[3]], "s": [{"x": 1}]}), tmp_path / "1.parquet")
    with pytest.raises(KeyError, match=r"'c' not found in .*; it has columns \['a', 'b', 's'\]$"):
        parquet_histogram(tmp_path, "c")
    with pytest.raises(KeyError, match=r"'s\.x' is a field of the struct column 's'"):
        parquet_histogram(tmp_path, ["a", "s.x"])


def test_the_report_skips_the_dynamic_baseline_above_its_sample_limit(
    tmp_path, capsys, monkeypatch
):
    """Above MAX_BASELINE_SAMPLES (a histogram from Parquet shards), the report says the
    baseline is skipped and skips it (it would hold every length in memory)."""
    import importlib
    import json

    cli = importlib.import_module("bucketloader.cli.main")  # (bucketloader.cli.main: the function)

    pq.write_table(pa.table({"n": [3, 5, 5, 9, 12, 12, 20]}), tmp_path / "a.parquet")
    out = tmp_path / "r.json"
    monkeypatch.setattr(cli, "MAX_BASELINE_SAMPLES", 6)
    assert cli.main(["report", str(tmp_path), "--column", "n", "-k", "2", "--json", str(out)]) == 0
    err = capsys.readouterr().err  # (the prefix of every other note: it had none)
    assert err.startswith("bucketloader: note: 7 samples: the dynamic-padding baseline is skipped")
    assert json.loads(out.read_text())["dynamic"] is None
    monkeypatch.setattr(cli, "MAX_BASELINE_SAMPLES", 7)
    assert cli.main(["report", str(tmp_path), "--column", "n", "-k", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["dynamic"] is not None


def test_shards_of_another_lengths_shape_are_one_error_naming_it():
    """s23-rev2: ray_histogram's length_fn giving 1-D lengths for one batch and (n, 2) for
    another (its blocks stream into one Accumulator) ended in 'LengthHistogram.merge takes
    LengthHistogram objects, got JointHistogram ...; load JSON with LengthHistogram.from_json'."""
    from bucketloader.engines import _common

    acc = _common.Accumulator(None, "raise", "ray")
    acc.add_counts(np.array([[3], [4]]), np.array([1, 2]), 0)
    with pytest.raises(ValueError, match=r"changed shape between shards: 1 per row in one, 2 in"):
        acc.add_counts(np.array([[3, 4]]), np.array([1]), 0)
    acc = _common.Accumulator(None, "raise", "ray")
    acc.add_counts(np.array([[3, 4]]), np.array([1]), 0)
    with pytest.raises(ValueError, match=r"2 per row in one, 3 in another"):
        acc.add_counts(np.array([[3, 4, 5]]), np.array([1]), 0)
    acc.add_counts(np.array([[1, 2]]), np.array([2]), 0)  # (the same shape: merged)
    assert acc.result("x").histogram.counts.tolist() == [2, 1]


def test_a_shard_with_damaged_pages_is_named(tmp_path, capsys):
    """s28: a shard whose footer reads but whose pages are damaged, among others, was "2 files:
    a file could not be read as Parquet (Corrupt snappy compressed data.)": neither the file
    nor the fix. The scan names the file (the one of the files it was reading that fails
    alone), on the command line too."""
    from conftest import damaged_shard

    from bucketloader.cli.main import main

    pq.write_table(pa.table({"n": list(range(50))}), tmp_path / "0.parquet")
    shard = damaged_shard(tmp_path)
    with pytest.raises(ValueError) as info:
        parquet_histogram(tmp_path, "n")
    assert str(info.value).startswith(f"{shard}: could not be read as Parquet (")
    assert str(info.value).endswith("; leave this file out or write it again")
    assert main(["report", str(tmp_path)]) == 2
    assert f"error: {shard}: could not be read as Parquet" in capsys.readouterr().err


def test_a_string_column_of_numbers_is_refused_not_measured_in_characters(tmp_path):
    """s32-user: lengths stored as text ("120": a CSV read as strings, then to_parquet) were
    measured as text, in characters: E. coli's protein lengths gave a histogram of 1 to 4
    (digits), with no error. Every value a number is refused, naming the column, its values and
    the read that casts them (NOTE [ Numbers written as text ])."""
    lengths = load_real("ecoli")
    text = pa.array([None if i % 97 == 0 else str(n) for i, n in enumerate(lengths)])
    _write_shards(tmp_path / "ds", pa.table({"n": text}), 4)
    with pytest.raises(ValueError) as info:
        parquet_histogram(tmp_path / "ds", "n", nulls="skip", batch_size=500)
    message = str(info.value)
    assert "column 'n' is a string column whose every value is a number" in message, message
    assert f"{str(lengths[1])!r}" in message and f"({len(str(lengths[1]))}," in message
    assert "schema=pyarrow.schema({'n': pyarrow.int64()})" in message
    fixed = pads.dataset(tmp_path / "ds", schema=pa.schema({"n": pa.int64()}))  # the fix named
    kept = np.array([n for i, n in enumerate(lengths) if i % 97])
    assert parquet_histogram(fixed, "n", nulls="skip").histogram == LengthHistogram.from_lengths(
        kept
    )
    # s34: over several columns the fix named a dataset of the one column and the call on it
    # alone, which lost the others; it keeps the call whole, each column of numbers cast
    _write_shards(tmp_path / "two", pa.table({"m": pa.array(lengths), "n": text}), 4)
    with pytest.raises(ValueError) as info:
        parquet_histogram(tmp_path / "two", ["m", "n"], nulls="skip", batch_size=500)
    fix = (
        "schema = pyarrow.dataset.dataset(path).schema; schema = schema.set(schema."
        "get_field_index('n'), pyarrow.field('n', pyarrow.int64())); then parquet_histogram("
        "pyarrow.dataset.dataset(path, schema=schema), ['m', 'n']) casts them as it reads"
    )
    assert fix in str(info.value), info.value
    schema = pads.dataset(tmp_path / "two").schema  # the fix named, run
    schema = schema.set(schema.get_field_index("n"), pa.field("n", pa.int64()))
    both = parquet_histogram(pads.dataset(tmp_path / "two", schema=schema), ["m", "n"],
                             nulls="skip").histogram  # fmt: skip
    assert both == JointHistogram.from_lengths(np.stack([kept, kept], axis=1))
    # in memory (a table, a view, a dictionary; in a joint scan): the cast is named instead
    for column in (text, text.cast(pa.string_view()), text.dictionary_encode()):
        with pytest.raises(ValueError, match=r"pyarrow.compute.cast\(table\['n'\]"):
            parquet_histogram(pa.table({"n": column, "m": pa.array(lengths)}), ["m", "n"],
                              nulls="skip")  # fmt: skip
    # one value that is not a number, in the last batch of the last file, makes it text
    words = pa.array([*text.to_pylist()[:-1], "MKV"])
    _write_shards(tmp_path / "words", pa.table({"n": words}), 4)
    r = parquet_histogram(tmp_path / "words", "n", nulls="skip", batch_size=500)
    assert r.histogram == LengthHistogram.from_lengths(
        [len(w) for w in words.drop_null().to_pylist()]
    )


def test_a_stream_over_arrow_refuses_the_string_column_of_numbers_parquet_histogram_does(tmp_path):
    """s33: a stream over those shards (ArrowRows, length_fn naming the column) bucketed "120"
    as 3, where parquet_histogram now refuses the column. The stream makes the histogram's
    decision over the whole column when it is built (its type from the schema; a text column
    is read until a batch settles it): refused with the fix, for both streams, the default
    'length' entry and a datasets.Dataset source; one word in the last file keeps it text,
    measured in characters by both."""
    from bucketloader.stream import BucketIterable, PackIterable
    from bucketloader.stream.arrow import ArrowRows

    lengths = load_real("ecoli")[:3000]
    text = [str(n) for n in lengths]
    _write_shards(tmp_path / "ds", pa.table({"n": text, "id": np.arange(len(text))}), 4)
    rows = ArrowRows(tmp_path / "ds", batch_rows=256)
    longest = int(lengths.max())
    streams = {
        "bucket": lambda src, fn: BucketIterable(
            src, length_fn=fn, boundaries=[64, 256, longest], batch_size=8
        ),
        "pack": lambda src, fn: PackIterable(src, length_fn=fn, row_length=longest, batch_size=4),
    }
    with pytest.raises(ValueError, match="column 'n' is a string column whose every value"):
        parquet_histogram(tmp_path / "ds", "n", batch_size=500)
    for make in streams.values():
        with pytest.raises(ValueError) as info:
            make(rows, "n")
        message = str(info.value)
        assert "column 'n' is a string column whose every value is a number" in message, message
        assert "pass length_fn=lambda sample: int(sample['n']); or, where the digits" in message
        assert message.endswith("count its characters: length_fn=lambda sample: len(sample['n'])")
    by_chars = streams["bucket"](rows, lambda sample: len(sample["n"]))  # the other way named
    assert sorted(len(s["n"]) for b in by_chars for s in b) == sorted(len(t) for t in text)
    # a column the rows leave out (columns=) is not looked at: the stream names it as missing
    with pytest.raises(ValueError, match=r"length_fn='n' is not in the samples"):
        next(iter(streams["bucket"](ArrowRows(tmp_path / "ds", columns=["id"]), "n")))
    fixed = streams["bucket"](rows, lambda sample: int(sample["n"]))  # the fix named
    assert sorted(s["id"] for b in fixed for s in b) == list(range(len(text)))
    assert sorted(int(s["n"]) for b in fixed for s in b) == sorted(lengths.tolist())
    # no key: a dict is measured by its 'length' entry, the length itself; text there is refused
    # by its type at the first sample, from any source (as hf.lengths with no column named)
    fix = "length_fn=lambda sample: int(sample['length'])"
    for source in (ArrowRows(pa.table({"length": text})), [{"length": t} for t in text]):
        for make in streams.values():
            with pytest.raises(TypeError, match=r"'length' entry, read as its length when no "):
                next(iter(make(source, None)))
    with pytest.raises(TypeError) as info:
        bucketloader.analyze([{"length": t, "ids": [1]} for t in text])  # (column= in its words)
    assert str(info.value).endswith(
        f"for lengths stored as text, {fix.replace('length_fn', 'column')}"
    )
    datasets = pytest.importorskip("datasets")
    with pytest.raises(ValueError, match=r"cast_column\('n', datasets.Value\('int64'\)\)"):
        streams["bucket"](datasets.Dataset.from_dict({"n": text}), "n")
    # one value that is not a number, in the last file: text, measured in characters by both
    words = pa.table({"n": [*text[:-1], "MKV"]})
    _write_shards(tmp_path / "words", words, 4)
    chars = sorted(len(w) for w in words.column("n").to_pylist())
    hist = parquet_histogram(tmp_path / "words", "n", batch_size=500).histogram
    assert hist == LengthHistogram.from_lengths(chars)
    stream = BucketIterable(
        ArrowRows(tmp_path / "words"), length_fn="n", boundaries=[2, 4], batch_size=8
    )
    assert sorted(len(s["n"]) for b in stream for s in b) == chars


def test_a_hugging_face_dataset_is_read_and_its_saved_directory_named(tmp_path):
    """s32-user: a datasets.Dataset was refused as a source ("got Dataset"), its save_to_disk
    directory was told to pass "the shards' files or a glob", and its .arrow files, so passed,
    to "pass the directory itself": a loop, as neither is Parquet. A Dataset (or a streamed
    IterableDataset) is read batch by batch in its logical rows; the directory, its files and
    a glob of them name datasets.load_from_disk."""
    datasets = pytest.importorskip("datasets")
    europarl = load_real("europarl")
    ds = datasets.Dataset.from_dict(
        {"ids": [[0] * int(n) for n in europarl[:, 1]], "src": europarl[:, 0]}
    )
    ds.save_to_disk(tmp_path / "saved")
    loaded = datasets.load_from_disk(str(tmp_path / "saved"))
    r = parquet_histogram(loaded, ["src", "ids"], batch_size=3000)
    assert r.histogram == JointHistogram.from_lengths(europarl)
    assert (r.num_rows, r.num_nulls) == (len(europarl), 0)
    long = loaded.filter(lambda row: row["src"] > 20).shuffle(seed=0)  # an indices mapping
    assert parquet_histogram(long, "src").histogram == LengthHistogram.from_lengths(
        europarl[europarl[:, 0] > 20, 0]
    )
    streamed = loaded.to_iterable_dataset(num_shards=4)
    assert parquet_histogram(streamed, "ids").histogram == LengthHistogram.from_lengths(
        europarl[:, 1]
    )
    fix = f"datasets.load_from_disk({str(tmp_path / 'saved')!r}), and pass that Dataset"
    arrow = sorted((tmp_path / "saved").glob("*.arrow"))[0]
    for source in (tmp_path / "saved", arrow, str(tmp_path / "saved" / "*.arrow")):
        with pytest.raises((FileNotFoundError, ValueError)) as info:
            parquet_histogram(source, "src")
        assert "written by datasets' save_to_disk" in str(info.value), str(info.value)
        assert fix in str(info.value) and "pass the directory" not in str(info.value)
    splits = datasets.DatasetDict({"train": ds, "test": ds.select(range(5))})
    splits.save_to_disk(tmp_path / "splits")
    with pytest.raises(FileNotFoundError, match=r"load_from_disk\(.*\)\['train'\] \(its splits"):
        parquet_histogram(tmp_path / "splits", "src")
    with pytest.raises(TypeError, match=r"DatasetDict of the splits \['train', 'test'\]"):
        parquet_histogram(splits, "src")
