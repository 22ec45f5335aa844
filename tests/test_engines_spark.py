"""engines.spark_histogram / spark_bucket_ids on a real local[2] SparkSession (started once)."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest

from bucketloader import LengthHistogram
from bucketloader.boundaries import assign_buckets
from bucketloader.engines import spark_bucket_ids, spark_histogram
from bucketloader.histogram import JointHistogram
from tests.conftest import load_real, run_skipped_examples

pyspark = pytest.importorskip("pyspark")


#: The JVM options of the test session: a client JIT (C1 only) and the serial collector start
#: the Java process and run a small job on about two thirds of the CPU of HotSpot's defaults
#: (30 -> 20 CPU-s for a fresh `report --engine spark`, its Java process included, s29). They
#: change what HotSpot compiles, not what Spark or bucketloader do or print.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


#: The module session's settings, given to spark-submit as a user's PYSPARK_SUBMIT_ARGS are.
SUBMIT_ARGS = (
    "--master local[2] --conf spark.sql.shuffle.partitions=2 --conf spark.default.parallelism=2"
    " --conf spark.ui.enabled=false --conf spark.sql.adaptive.enabled=false"
    f" --driver-java-options '{JAVA_OPTIONS}' pyspark-shell"
)

#: What this process's standard error (file descriptor 2) received while the module session's
#: Java process started, and since (its own standard error, if the CLI left it this one): read
#: by test_cli_engine_spark_says_only_the_error, which must find nothing there.
LAUNCH_STDERR: dict = {}


@pytest.fixture(scope="module")
def spark():
    """The module's session, started as the CLI starts one (``cli.engines._spark_session``, NOTE
    [ A quiet Spark session ]): one Java process for the module, the CLI's tests included (the
    quiet command's own, in a fresh interpreter, cost the file 11 of its 62 CPU-s, s33)."""
    import tempfile

    import pyspark.sql

    from bucketloader.cli.engines import _spark_session

    # a SparkContext takes over SIGINT; its handler outlives stop() and, when the xdist worker
    # is interrupted at shutdown, raises a KeyboardInterrupt from a dead context: give it back
    previous = signal.getsignal(signal.SIGINT)
    seen = tempfile.TemporaryFile(prefix="spark-launch-stderr-")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYSPARK_SUBMIT_ARGS", SUBMIT_ARGS)
            mp.delenv("PYSPARK_GATEWAY_PORT", raising=False)
            os.dup2(seen.fileno(), 2)
            session = _spark_session(pyspark.sql)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    LAUNCH_STDERR["file"] = seen
    yield session
    session.stop()
    seen.close()
    signal.signal(signal.SIGINT, previous)


def test_exact_reduce_by_spark(spark, monkeypatch):
    def collect(self):  # s23: a Row and Python ints per distinct length (+199 MB at 600 k)
        raise AssertionError("the counts came back by collect(), not as one Arrow table")

    pairs = load_real("multi30k")[:1500]  # (en, de) token counts
    rows = [([0] * int(a), "x" * int(b), int(a) + int(b)) for a, b in pairs]
    df = spark.createDataFrame(rows, "ids array<tinyint>, text string, n long").repartition(4)
    if hasattr(df, "toArrow"):  # (the counts: pyspark 4's toArrow)
        monkeypatch.setattr(type(df), "collect", collect)
    r = spark_histogram(df, "ids")
    values, counts = np.unique(pairs[:, 0], return_counts=True)
    assert r.histogram.values.tolist() == values.tolist()
    assert r.histogram.counts.tolist() == counts.tolist()
    assert (r.num_rows, r.num_nulls, r.engine) == (len(pairs), 0, "spark")
    joint = spark_histogram(df, ["ids", "text", "n"]).histogram
    both = np.column_stack([pairs, pairs.sum(axis=1)])
    assert isinstance(joint, JointHistogram) and joint == JointHistogram.from_lengths(both)


def test_counts_by_collect_where_pyspark_has_no_to_arrow():
    """pyspark < 4 (no DataFrame.toArrow) or no pyarrow: the counts come back by collect(),
    null lengths counted apart, the same keys and counts as the Arrow path."""
    from pyspark.sql import Row

    from bucketloader.engines.spark import _collect, _counts

    class Grouped:  # (a groupBy(...).count() of pyspark 3: collect() only)
        def collect(self):
            return [Row(a=3, b=1, count=2), Row(a=None, b=4, count=5), Row(a=0, b=7, count=1)]

    keys, counts, nulls = _counts(_collect(Grouped()), ["a", "b"])
    assert keys.tolist() == [[3, 1], [0, 7]] and keys.dtype == np.int64
    assert counts.tolist() == [2, 1] and nulls == 5
    keys, counts, nulls = _counts(
        _collect(type("Empty", (), {"collect": lambda self: []})()), ["a"]
    )
    assert keys.shape == (0, 1) and counts.size == 0 and nulls == 0


def test_counts_by_collect_where_pyspark_refuses_the_installed_pyarrow(monkeypatch):
    """s23-rev2: pyspark's toArrow() checks its own pyarrow floor first (4.3: >= 18), above the
    pyarrow>=14 of bucketloader's extras; with pyarrow 17 spark_histogram raised pyspark's
    PySparkImportError where collect() (the path before s23) reads the same counts."""
    import pyarrow
    from pyspark.sql import Row

    from bucketloader.engines.spark import _collect, _counts

    utils = pytest.importorskip("pyspark.sql.pandas.utils")
    monkeypatch.setattr(pyarrow, "__version__", "1.0.0")  # (below every pyspark's floor)

    class Grouped:  # pyspark 4's toArrow: the version check, then the job
        def toArrow(self):
            utils.require_minimum_pyarrow_version()
            raise AssertionError("toArrow ran its job with a pyarrow it refuses")

        def collect(self):
            return [Row(a=3, count=2), Row(a=None, count=5)]

    keys, counts, nulls = _counts(_collect(Grouped()), ["a"])
    assert keys.tolist() == [[3]] and counts.tolist() == [2] and nulls == 5


def test_the_docstring_examples_run(spark):
    """spark_histogram's and spark_bucket_ids's examples skip in the package's doctests (no
    SparkSession there): they run here, on the test session."""
    names = {"spark": spark, "spark_histogram": spark_histogram}
    run_skipped_examples(
        [spark_histogram, spark_bucket_ids], {**names, "spark_bucket_ids": spark_bucket_ids}
    )


def test_nulls_expressions_and_bucket_ids(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [([1, 2, 3], "ab"), (None, None), ([4], "é"), ([], "xyz")], "ids array<int>, s string"
    )
    with pytest.raises(ValueError, match=r"1 null row\(s\) out of 4"):
        spark_histogram(df, "ids")
    r = spark_histogram(df, ["ids", F.length("s") * 2], nulls="skip")
    assert r.histogram.rows.tolist() == [[0, 6], [1, 2], [3, 4]] and r.num_nulls == 1
    got = spark_bucket_ids(df, [1, 3], "ids", nulls="skip").collect()
    assert [row["bucket"] for row in got] == [1, None, 0, 0]
    s = spark_bucket_ids(df.na.drop(), [1, 3], "s", name="b").select("b").collect()
    assert [row["b"] for row in s] == assign_buckets([2, 1, 3], [1, 3]).tolist()
    with pytest.raises(Exception, match="length 3 exceeds the last boundary 2"):
        spark_bucket_ids(df, [1, 2], "ids", nulls="skip").collect()
    with pytest.raises(Exception, match=r"null row .* without the column reads as null rows"):
        spark_bucket_ids(df, [1, 3], "ids").collect()  # nulls="raise" names both causes
    # s34: a negative length went to bucket 0 (-1 <= the first boundary), silently, where
    # spark_histogram, Ray and the local paths refuse it
    negative = spark.createDataFrame([(3,), (-1,), (5,)], "n long")
    with pytest.raises(Exception, match=r"negative length -1; lengths count elements: fix or"):
        spark_bucket_ids(negative, [2, 8], "n").collect()


def test_a_row_null_in_any_column_is_one_null_row(spark):
    """NOTE [ Nulls ]: with several columns a row is null if any of them is; the null rows
    are counted, not grouped away (two identical null rows are two)."""
    df = spark.createDataFrame(
        [([1, 2], "ab"), ([3], None), (None, "xyz"), (None, "xyz")], "ids array<int>, s string"
    )
    r = spark_histogram(df, ["ids", "s"], nulls="skip")
    assert r.histogram.rows.tolist() == [[2, 2]] and (r.num_rows, r.num_nulls) == (4, 3)
    with pytest.raises(ValueError, match=r"3 null row\(s\) out of 4"):
        spark_histogram(df, ["ids", "s"])


def test_bad_input_one_clear_error(spark):
    df = spark.createDataFrame(
        [(1.5, [[1]], -2, 2**62)], "f double, nested array<array<int>>, neg long, big long"
    )
    with pytest.raises(ValueError, match=r"column 'm' not found; the DataFrame has columns"):
        spark_histogram(df, "m")
    with pytest.raises(ValueError, match=r"'big'\]; did you mean column='nested'\?$"):
        spark_bucket_ids(df, [2], "nestd")  # (s34: a name missing a letter named no near one)
    nested = spark.createDataFrame([((3,),)], "s struct<x:int>")  # (s19: a path into a struct)
    with pytest.raises(ValueError, match=r"'s\.x' is a field of the struct column 's'.*F\.col"):
        spark_histogram(nested, "s.x")
    with pytest.raises(TypeError, match=r"holds double numbers"):
        spark_histogram(df, "f")
    with pytest.raises(TypeError, match=r"nested array"):
        spark_histogram(df, "nested")
    with pytest.raises(ValueError, match=r"negative length -2"):
        spark_histogram(df, "neg")
    with pytest.raises(ValueError, match=r"length 4611686018427387904, not below 2\*\*62"):
        spark_histogram(df, "big")
    with pytest.raises(ValueError, match="has no rows"):
        spark_histogram(df.limit(0), "neg")
    with pytest.raises(TypeError, match=r"df must be a pyspark\.sql\.DataFrame, got list"):
        spark_histogram([1, 2], "n")
    with pytest.raises(ValueError, match="already has a column 'f'"):
        spark_bucket_ids(df, [4], "neg", name="f")
    with pytest.raises(TypeError, match=r"name must be a non-empty column name, got name=''"):
        spark_bucket_ids(df, [4], "neg", name="")
    with pytest.raises(TypeError, match=r"column must be one column, got column=\['neg'\]"):
        spark_bucket_ids(df, [4], ["neg"])
    with pytest.raises(ValueError, match="boundaries must be strictly increasing, got 4 then 2"):
        spark_bucket_ids(df, [4, 2], "neg")
    with pytest.raises(TypeError, match=r"df must be a pyspark\.sql\.DataFrame, got list"):
        spark_bucket_ids([1, 2], [4], "n")
    stream = spark.readStream.format("rate").load()  # never started: no job runs
    with pytest.raises(ValueError, match="streaming DataFrame, which never ends"):
        spark_histogram(stream, "value")
    # s23: a frame of a stopped session gave pyspark's bare AssertionError (as after
    # spark.stop(), which sets the context's _jsc to None; the module's session stays up)
    frame = spark.createDataFrame([(3,)], "n long")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spark.sparkContext, "_jsc", None)
        for call in (
            lambda: spark_histogram(frame, "n"),
            lambda: spark_bucket_ids(frame, [4], "n"),
        ):
            with pytest.raises(ValueError, match=r"SparkSession that was stopped \(spark\.stop"):
                call()


def test_engine_not_installed_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(ImportError, match=r"pip install 'bucketloader\[spark\]'"):
        spark_histogram(object(), "n")


def test_cli_engine_spark_reads_parquet_shards(spark, tmp_path, capsys):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main
    from bucketloader.solve import compute_boundaries

    arr = load_real("librispeech")[:5000]
    for i, part in enumerate(np.array_split(arr, 3)):
        pq.write_table(pa.table({"n": part}), tmp_path / f"p{i}.parquet")
    js = tmp_path / "out.json"
    argv = ["precompute", str(tmp_path), "--engine", "spark", "-k", "4", "--json", str(js)]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 0, capsys.readouterr().err
    got = json.loads(js.read_text())["solution"]["boundaries"]
    assert got == compute_boundaries(arr, 4).tolist()


def test_a_parquet_file_without_the_column_is_named(spark, tmp_path):
    """Spark reads a Parquet file without the measured column as null rows: under
    nulls='raise' the file is named, as the local scan names it (NOTE [ A file without the
    column ]); a genuine null row keeps the count's error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    # (x: an int here and a string in b: Spark cannot merge their schemas, so the check for a
    # file holding 'ids' reads that column alone)
    pq.write_table(
        pa.table({"ids": [[1] * 5, [1] * 7, None], "x": [1, 2, 3]}), tmp_path / "a.parquet"
    )
    df = spark.read.parquet(str(tmp_path))
    with pytest.raises(ValueError, match=r"1 null row\(s\) out of 3"):
        spark_histogram(df, "ids")
    with pytest.raises(ValueError, match=r"'tokens'\) has 1 null row\(s\) out of 3"):
        spark_histogram(df.withColumnRenamed("ids", "tokens"), "tokens")  # in no file
    pq.write_table(pa.table({"other": [1, 2, 3], "x": list("abc")}), tmp_path / "b.parquet")
    df = spark.read.parquet(str(tmp_path))
    with pytest.raises(ValueError, match=r"b\.parquet: no column 'ids' \(the file has columns"):
        spark_histogram(df, "ids")  # (was the count's error: the merged schema failed)
    from pyspark.sql import types as T

    from bucketloader.engines.spark import _in_some_file

    renamed = T.StructField("tokens", df.schema["ids"].dataType)  # a column in no file
    assert not _in_some_file(spark, renamed, df.inputFiles())
    r = spark_histogram(df, "ids", nulls="skip")  # its rows read as nulls, left out
    assert (r.histogram.values.tolist(), r.num_rows, r.num_nulls) == ([5, 7], 6, 4)
    # s30-scale: the file without the column sorted first gives Spark its schema, so the
    # DataFrame has no such column: "not found" alone; now it names mergeSchema, which reads it
    first = tmp_path / "first"
    first.mkdir()
    pq.write_table(pa.table({"other": [1, 2]}), first / "a.parquet")
    pq.write_table(pa.table({"n": [4, 5, 5], "other": [1, 2, 3]}), first / "b.parquet")
    with pytest.raises(KeyError, match=r"other files hold 'n'.*option\('mergeSchema', 'true'\)"):
        spark_histogram(spark.read.parquet(str(first)), "n", nulls="skip")
    merged = spark.read.option("mergeSchema", "true").parquet(str(first))
    r = spark_histogram(merged, "n", nulls="skip")
    assert (r.histogram.values.tolist(), r.histogram.counts.tolist(), r.num_nulls) == (
        [4, 5],
        [1, 2],
        2,
    )
    with pytest.raises(ValueError, match=r"a\.parquet: no column 'n'"):
        spark_histogram(merged, "n")
    with pytest.raises(KeyError) as exc:  # in no file: no such hint
        spark_histogram(merged, "m")
    assert "mergeSchema" not in str(exc.value)


def test_a_parquet_uint64_column_is_read_exactly(spark, tmp_path):
    """s30-scale: Spark reads a Parquet uint64 column as decimal(20,0), which was refused as
    "holds decimal(20,0) numbers; lengths are whole numbers" (they are); now its lengths are
    counted exactly (bucket ids too), and a value of 2**62 or more is named, past 2**63 too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths = [3, 7, 7, 2**40, 0, 12]
    pq.write_table(pa.table({"n": pa.array([*lengths, None], pa.uint64())}), tmp_path / "a.parquet")
    df = spark.read.parquet(str(tmp_path))
    r = spark_histogram(df, "n", nulls="skip")
    assert r.histogram == LengthHistogram.from_lengths(lengths) and r.num_nulls == 1
    assert r.histogram.values.dtype == np.int64
    ids = spark_bucket_ids(df.dropna(), [7, 2**40], "n").select("bucket").collect()
    assert sorted(x["bucket"] for x in ids) == [0, 0, 0, 0, 1, 1]
    both = spark_histogram(df, ["n", "n"], nulls="skip")  # joint: each column as one length
    assert both.histogram.rows.tolist() == [[v, v] for v in sorted(set(lengths))]
    for big in (2**62, 2**63 + 5):
        pq.write_table(pa.table({"n": pa.array([3, big], pa.uint64())}), tmp_path / "a.parquet")
        with pytest.raises(ValueError, match=rf"holds the length {big}, not below 2\*\*62"):
            spark_histogram(spark.read.parquet(str(tmp_path)), "n")
    with pytest.raises(TypeError, match=r"decimal\(10,2\) numbers"):  # a fraction: refused
        spark_histogram(spark.createDataFrame([(1,)], "n int").selectExpr(
            "cast(n as decimal(10,2)) as n"), "n")  # fmt: skip


def test_a_length_past_2_62_reads_no_footer(spark, tmp_path, monkeypatch):
    """s31: a length of 2**62 or more in a Parquet uint64 column (decimal(20,0) to Spark) was
    refused inside the try around the Spark job, whose error path reads the footers of up to
    1,024 of the files for a diagnosis of Spark's reading errors, then raised the same error;
    the lengths are now converted after it: the same error, and no footer read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(3):
        big = [3, 2**62 + i] if i else [3]
        pq.write_table(pa.table({"n": pa.array(big, pa.uint64())}), tmp_path / f"{i}.parquet")
    read = []
    footer = pq.read_metadata
    monkeypatch.setattr(pq, "read_metadata", lambda *a, **k: read.append(a) or footer(*a, **k))
    df = spark.read.parquet(str(tmp_path))
    with pytest.raises(ValueError, match=rf"holds the length {2**62 + 2}, not below 2\*\*62"):
        spark_histogram(df, "n")
    assert read == []


def test_not_a_frame_is_a_type_error_where_main_has_no_file(monkeypatch):
    """In ``python -c`` (or a pytest-xdist worker) ``__main__`` has no file; without grpc,
    importing pyspark's Connect DataFrame there calls ``sys.exit(0)``, which made a bad ``df``
    end the program with status 0. The check never imports it: one TypeError."""
    import types

    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    for name in [m for m in sys.modules if m.startswith("pyspark.sql.connect")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(TypeError, match=r"df must be a pyspark\.sql\.DataFrame, got list"):
        spark_histogram([1, 2], "n")
    assert "pyspark.sql.connect.dataframe" not in sys.modules


def test_cli_engine_spark_reads_past_an_untyped_empty_first_shard(spark, tmp_path, capsys):
    """s9-rev3: an empty shard written from an empty list (column type null), sorted first,
    gave Spark its schema and `report --engine spark` ended in a Java traceback on the other
    files ("Invalid Spark read type"); the CLI reads only the files that hold rows and tells
    the empty ones."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    pq.write_table(pa.table({"ids": pa.array([], pa.null())}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"ids": [[1, 2], [3], [4, 5, 6]]}), tmp_path / "part-1.parquet")
    assert main(["report", str(tmp_path), "-k", "2", "--engine", "spark"]) == 0
    out = capsys.readouterr()
    assert "note: 1 of the 2 Parquet files holds no rows (part-0.parquet)" in out.err
    assert "recommended" in out.out, out.err


def test_int32_and_int64_shards_read_on_the_cli_and_are_named_in_python(spark, tmp_path, capsys):
    """s19: shards whose lengths are int32 in one file and int64 in another (two writers) ended
    `report --engine spark` in a Py4JJavaError and 170 lines of Java (Spark reads every file as
    the type of the one it took the schema from: PARQUET_COLUMN_DATA_TYPE_MISMATCH), where the
    local and Ray engines read them; the CLI now gives Spark bigint, and the Python API names
    the file, both types and that fix."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    pq.write_table(pa.table({"n": pa.array([3, 4], pa.int32())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": pa.array([5, 6], pa.int64())}), tmp_path / "b.parquet")
    assert main(["report", str(tmp_path), "--column", "n", "-k", "2", "--engine", "spark"]) == 0
    assert "samples 4 " in capsys.readouterr().out
    with pytest.raises(
        ValueError,
        match=r"b\.parquet: column 'n' is Parquet INT64 in this file"
        r" but int .*spark\.read\.schema\('n bigint'\)",
    ):
        spark_histogram(spark.read.parquet(str(tmp_path)), "n")
    # s27: token-list shards, int32 ids in one file and int64 in the other: the fix offered
    # the schema '`ids, list, element` bigint' (Spark's name of the Parquet path), unreadable
    lists = tmp_path / "lists"
    lists.mkdir()
    pq.write_table(
        pa.table({"ids": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}), lists / "a.parquet"
    )
    pq.write_table(
        pa.table({"ids": pa.array([[1, 2, 3, 4]], pa.list_(pa.int64()))}), lists / "b.parquet"
    )
    with pytest.raises(
        ValueError,
        match=r"b\.parquet: the list elements of column 'ids' are Parquet INT64 in this file but "
        r"int .*spark\.read\.schema\('ids array<bigint>'\)",
    ):
        spark_histogram(spark.read.parquet(str(lists)), "ids")
    r = spark_histogram(spark.read.schema("ids array<bigint>").parquet(str(lists)), "ids")
    assert (r.histogram.values.tolist(), r.histogram.counts.tolist()) == ([1, 2, 4], [1, 1, 1])
    assert main(["report", str(lists), "--column", "ids", "-k", "2", "--engine", "spark"]) == 0
    assert "samples 3 " in capsys.readouterr().out


def test_python_api_names_an_untyped_empty_first_shard_and_the_fix(spark, tmp_path):
    """s10: `spark_histogram(spark.read.parquet(dir))` where the shard Spark takes its schema
    from is empty with a column of type null (written from an empty list) failed inside Spark's
    reader on the other files (a Java traceback); it is one ValueError naming the empty file and
    the two fixes, and the schema it gives reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"ids": pa.array([], pa.null())}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"ids": [[1, 2], [3], [4, 5, 6]]}), tmp_path / "part-1.parquet")
    with pytest.raises(ValueError) as info:
        spark_histogram(spark.read.parquet(str(tmp_path)), "ids")
    message = str(info.value)
    assert "part-0.parquet: an empty Parquet file whose column 'ids' has type null" in message
    assert "leave the empty files out" in message
    fix = "spark.read.schema('ids array<bigint>')"
    assert fix in message, message
    r = spark_histogram(spark.read.schema("ids array<bigint>").parquet(str(tmp_path)), "ids")
    assert (r.histogram.values.tolist(), r.num_rows) == ([1, 2, 3], 3)
    typed = spark.read.parquet(str(tmp_path / "part-1.parquet"))  # the other fix
    assert spark_histogram(typed, "ids").histogram.values.tolist() == [1, 2, 3]


def test_the_schema_fix_reads_a_column_whose_name_needs_quoting(spark, tmp_path):
    """s10 left alone: the fix for an untyped empty first shard wrote the column name bare in the
    DDL (`spark.read.schema('token ids array<bigint>')` is a ParseException; a quote in the name
    ended the Python string), and a backtick in the name failed the measure itself. The code in
    the message, pasted as it is, reads the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = "a.b `c's"  # a dot, a space, a backtick, a quote
    pq.write_table(pa.table({name: pa.array([], pa.null())}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({name: [[1, 2], [3], [4, 5, 6]]}), tmp_path / "part-1.parquet")
    with pytest.raises(ValueError) as info:
        spark_histogram(spark.read.parquet(str(tmp_path)), name)
    message = str(info.value)
    code = message[message.index("spark.read.schema(") :]
    assert code == """spark.read.schema("`a.b ``c's` array<bigint>").parquet(...)""", message
    pasted = eval(code.replace("(...)", "(path)"), {"spark": spark, "path": str(tmp_path)})
    r = spark_histogram(pasted, name)
    assert (r.histogram.values.tolist(), r.num_rows) == ([1, 2, 3], 3)


def test_the_schema_fix_is_offered_only_where_it_reads(spark, tmp_path):
    """s11: for an array of structs (chat messages) the schema fix failed too: Spark cannot read
    the empty file's column of type null as a group ("... (UNKNOWN) is not a group"). The
    message offers the fix that reads (the files with rows) and says why not the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    messages = [[{"from": "user", "value": "hi"}] * n for n in (1, 2, 3)]
    pq.write_table(pa.table({"conv": pa.array([], pa.null())}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"conv": messages}), tmp_path / "part-1.parquet")
    with pytest.raises(ValueError) as info:
        spark_histogram(spark.read.parquet(str(tmp_path)), "conv")
    message = str(info.value)
    assert "spark.read.schema(" not in message, message
    assert "leave the empty files out" in message and "even given the schema" in message
    r = spark_histogram(spark.read.parquet(str(tmp_path / "part-1.parquet")), "conv")
    assert r.histogram.values.tolist() == [1, 2, 3]


def test_cli_engine_spark_names_a_session_that_cannot_start(tmp_path, monkeypatch, capsys):
    """s23: a master that does not answer (PYSPARK_SUBMIT_ARGS='--master spark://...') ended
    `report --engine spark`, after Spark's 3 tries (68 s), in a 200-line Py4JJavaError
    traceback with exit 1. (The failure is simulated: no session starts here.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    from bucketloader.cli.main import main

    pq.write_table(pa.table({"n": [3, 4]}), tmp_path / "a.parquet")
    java = (
        "An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
        ": java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n"
        "This stopped SparkContext was created at:"
    )

    def get_or_create(self):
        raise RuntimeError(java)  # (what a Py4JJavaError's text holds)

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)
    submit = "--master spark://127.0.0.1:7077 pyspark-shell"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit)
    argv = ["report", str(tmp_path), "--column", "n", "-k", "2", "--engine", "spark"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "could not start a Spark session (java.lang.IllegalStateException: Cannot" in err, err
    assert f"PYSPARK_SUBMIT_ARGS={submit!r}" in err and err.count("\n") == 1
    # s23-rev2: no Java (JAVA_HOME without one) was blamed on the master: pyspark's own error
    from pyspark.errors import PySparkRuntimeError

    def no_java(self):
        raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", no_java)
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "could not start Spark's Java process ([JAVA_GATEWAY_EXITED]" in err, err
    assert "Java 17 or later" in err and "JAVA_HOME='/nonexistent'" in err and "master" not in err


def test_cli_engine_spark_says_only_the_error(spark, tmp_path, capfd):
    """s28: `report --engine spark` on a bad input (int64 lengths in one shard, strings in
    another) printed Java's start-up lines, log4j warnings, progress bars and each failed
    task's Java stack trace (103 lines) before its one-line error; now stderr is that line
    (NOTE [ A quiet Spark session ]). The module's session was started by the CLI's own
    ``_spark_session``: Java's process has written nothing to this process's stderr, at its
    start or in the failed job. No Java at JAVA_HOME (a fresh ``python -m bucketloader.cli``):
    the launch script's own line is in the error (it went to the quiet session's log)."""
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    pq.write_table(pa.table({"n": [3, 4]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"n": ["x", "yy"]}), tmp_path / "b.parquet")
    argv = ["report", str(tmp_path), "--column", "n", "--engine", "spark"]
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS}
    env = {k: v for k, v in env.items() if k != "PYSPARK_GATEWAY_PORT"}
    env["JAVA_HOME"] = str(tmp_path / "no-java")
    # (a fresh process: it starts no Java, its launch script ends first; beside the job below)
    no_java = subprocess.Popen(
        [sys.executable, "-m", "bucketloader.cli", *argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        capfd.readouterr()
        assert main(argv) == 2
        err = capfd.readouterr().err
        _, no_java_err = no_java.communicate(timeout=300)
    finally:
        no_java.kill()
        no_java.wait()
    lines = err.splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("bucketloader: error: ") and "b.parquet: column 'n'" in lines[0]
    assert "\tat org.apache" not in err and "WARN" not in err
    launch = LAUNCH_STDERR["file"]
    launch.seek(0)
    java = launch.read().decode(errors="replace")
    assert java == "", java[-3000:]  # (Java's start-up lines, WARN, "\tat org.apache" traces)
    assert no_java.returncode == 2 and len(no_java_err.splitlines()) == 1, no_java_err
    assert "it said: " in no_java_err and "no-java/bin/java" in no_java_err, no_java_err


def test_cli_joint_precompute_of_shards_on_spark(spark, tmp_path, capsys):
    """s28: `precompute SHARDS --column src,tgt --max-shapes K --engine spark` was refused
    ("--engine spark does not apply to a joint plan"); Spark reduces the pairs' histogram.
    Shards whose lengths are int32 in one file and int64 in another read too (Spark is given
    bigint for that column and the other column's own type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main
    from tests.conftest import check_joint_precompute_of_shards

    check_joint_precompute_of_shards(tmp_path, capsys, "--engine", "spark")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(
        pa.table({"a": pa.array([3, 4], pa.int32()), "b": [[1], [2, 3]]}), mixed / "0.parquet"
    )
    pq.write_table(pa.table({"a": pa.array([5], pa.int64()), "b": [[4]]}), mixed / "1.parquet")
    argv = ["precompute", str(mixed), "--column", "a,b", "--max-shapes", "2", "--batch-size", "2"]
    assert main([*argv, "--engine", "spark", "--cache-dir", str(tmp_path / "c2")]) == 0
    assert "mixed: 3 samples" in capsys.readouterr().out
    # s28-eng: a column the first file (by path: Spark's schema) lacks, beside one to widen,
    # was "column 'b' not found; the DataFrame has columns ['a']" while 1.parquet held it: the
    # file without it is named (or its rows skipped), as the other engines do
    pq.write_table(pa.table({"a": pa.array([7, 8], pa.int32())}), mixed / "0-first.parquet")
    for engine in ("spark", "local"):
        args = [*argv, "--engine", engine, "--cache-dir", str(tmp_path / "c3")]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "0-first.parquet: no column 'b' (the file has columns ['a']); every file" in err
        assert main([*args, "--nulls", "skip"]) == 0
        assert "--nulls skip left out 2 null row(s) of 5" in capsys.readouterr().err
    assert main(["report", str(mixed), "--column", "b", "--engine", "spark"]) == 2
    assert "0-first.parquet: no column 'b'" in capsys.readouterr().err


def test_cli_engine_spark_errors_name_the_files_and_the_commands_fixes(spark, tmp_path, capsys):
    """s28: a column of floats named a fix the command has no flag for ("or pass a Column
    expression of lengths"); a column no shard holds is named with the files, before Spark
    runs, as on the other engines."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    for name, table in [("missing", pa.table({"m": [3, 4]})), ("floats", pa.table({"n": [3.5]}))]:
        (tmp_path / name).mkdir()
        pq.write_table(table, tmp_path / name / "a.parquet")
    pq.write_table(pa.table({"m": [5]}), tmp_path / "missing" / "b.parquet")
    argv = ["report", "--engine", "spark", "--column", "n"]
    assert main([*argv, str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert f"column 'n' not found in {tmp_path / 'missing' / 'a.parquet'}, nor in the" in err
    assert main([*argv, str(tmp_path / "floats")]) == 2
    err = capsys.readouterr().err
    assert "Column expression" not in err and "to an integer column and measure that" in err, err


def test_cli_engine_spark_names_a_shard_with_damaged_pages(spark, tmp_path, capsys):
    """s28: a shard whose footer reads but whose pages are damaged ended `--engine spark` in a
    190-line Py4JJavaError traceback, exit 1; one line names the file, Spark's error class,
    the root cause and the fix."""
    from conftest import damaged_shard

    from bucketloader.cli.main import main

    shard = damaged_shard(tmp_path)
    assert main(["report", str(tmp_path), "--engine", "spark"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\tat " not in err, err
    assert f"--engine spark failed reading file://{shard} ([FAILED_READ_FILE" in err, err
    assert "caused by java.io.IOException" in err and "--engine local" in err


def test_a_string_column_of_numbers_is_refused_not_measured_in_characters(spark):
    """s32-user: a column of lengths stored as text (a CSV read without a schema) was measured
    with length(), in characters ("120" as 3). When the longest text is short enough to be a
    number, one more job looks for a value that is not: none, and the scan is refused with the
    cast to use (NOTE [ Numbers written as text ])."""
    from pyspark.sql import functions as F

    ecoli = load_real("ecoli")[:1500]
    rows = [(None if i % 50 == 0 else str(n), int(n), "x" * int(n % 9 + 1)) for i, n in
            enumerate(ecoli)]  # fmt: skip
    df = spark.createDataFrame(rows, "s string, n long, w string").repartition(3)
    # s34: over several columns the fix named the one cast column, spark_histogram(df,
    # F.col('s').cast('bigint')), a call that dropped the others; it names the whole call, each
    # column of numbers cast
    for column, call in (
        ("s", "{}"),
        (["n", "s"], "['n', {}]"),
        (["s", F.length("w"), "t"], "[{}, Column<'length(w)'>, {}]"),
    ):
        with pytest.raises(ValueError) as info:
            spark_histogram(df.withColumn("t", F.col("s")), column, nulls="skip")
        message = str(info.value)
        assert "column 's' is a string column whose every value is a number" in message, message
        cast = call.replace("{}", "F.col('s').cast('bigint')", 1)
        cast = cast.replace("{}", "F.col('t').cast('bigint')")
        assert f"spark_histogram(df, {cast}); or" in message, message
        chars = call.replace("{}", "F.length('s')", 1).replace("{}", "F.length('t')")
        assert message.endswith(f"count its characters: spark_histogram(df, {chars})")
    fixed = spark_histogram(df, F.col("s").cast("bigint"), nulls="skip").histogram  # the fix
    kept = [n for i, n in enumerate(ecoli) if i % 50]
    assert fixed == LengthHistogram.from_lengths(kept)
    both = spark_histogram(df, ["n", F.col("s").cast("bigint")], nulls="skip").histogram
    assert both == JointHistogram.from_lengths([(n, n) for n in kept])
    # short text that is not numbers alone is text: characters
    r = spark_histogram(df, "w")
    assert r.histogram == LengthHistogram.from_lengths(ecoli % 9 + 1)
    # s33: spark_bucket_ids gave such a column buckets by its digits ("120" in the bucket of
    # 3); it makes the histogram's decision over the whole column when called (the string type
    # from the schema, one job stopping at a value that is not a number), for a name and a
    # Column alike; the cast named works, and one word keeps the column text
    bounds = [64, 256, int(ecoli.max())]
    for column, fix in (("s", "F.col('s').cast('bigint')"), (F.col("s"), ".cast('bigint')")):
        with pytest.raises(ValueError) as info:
            spark_bucket_ids(df, bounds, column, nulls="skip")
        message = str(info.value)
        assert "is a string column whose every value is a number" in message, message
        assert fix in message
    assert message.endswith("count its characters: measure F.length() of it")
    ids = spark_bucket_ids(df, bounds, F.col("s").cast("bigint"), nulls="skip")
    got = [r["bucket"] for r in ids.orderBy("n").collect() if r["s"] is not None]
    assert got == assign_buckets(np.sort(np.array(kept)), bounds).tolist()
    words = spark.createDataFrame([("120",), ("3",), ("MKV",)], "s string").repartition(2)
    assert sorted(r["bucket"] for r in spark_bucket_ids(words, [2, 3], "s").collect()) == [0, 1, 1]
