"""Exact length histograms of a Spark ``DataFrame``, and bucket ids as a column expression.

Spark does the reduce: every row becomes its length (``size()`` of an array, ``length()`` of a
string, an integer column as it is), ``groupBy(length).count()`` runs on the executors (a partial
count per partition, then one small shuffle of at most one row per distinct length and
partition) and only the distinct lengths and their counts come back to the driver, where they
form the exact histogram. Needs ``pip install 'bucketloader[spark]'`` (and Java).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from bucketloader._arrow import (
    NUMBER_TEXT,
    NUMBER_TEXT_LONGEST,
    nested_field,
    numbers_as_text_error,
)
from bucketloader._samples import did_you_mean
from bucketloader._types import LazyModule
from bucketloader._validation import MAX_LENGTH, MissingKeyError
from bucketloader.boundaries import check_boundaries
from bucketloader.engines._common import (
    Accumulator,
    ScanResult,
    check_columns,
    check_nulls,
    missing_column,
    require,
)

if TYPE_CHECKING:
    from pyspark import sql
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    sql = LazyModule("pyspark.sql")

#: What measures a length: a column name or a ``Column`` expression; several for a joint one.
SparkLength: TypeAlias = "str | sql.Column | Sequence[str | sql.Column]"

__all__ = ["spark_bucket_ids", "spark_histogram"]


def spark_histogram(df: sql.DataFrame, column: SparkLength, *, nulls: str = "raise") -> ScanResult:
    """Exact histogram of a column of a ``pyspark.sql.DataFrame``, reduced by Spark.

    Args:
        df: the DataFrame (a batch one; a streaming DataFrame has no end).
        column: an array column (``size()``), a string / binary column (``length()``:
            characters / bytes), an integer column (read as lengths), a ``Column`` expression
            giving integer lengths (e.g. ``F.size("ids") + 2``), or a list of these for a
            :class:`~bucketloader.histogram.JointHistogram`.
        nulls: ``"raise"`` (default) or ``"skip"`` (NOTE [ Nulls ] in
            :mod:`bucketloader.engines._common`).

    Returns:
        a :class:`~bucketloader.engines.ScanResult`.

    Example (needs a SparkSession ``spark``; ``tests/test_engines_spark.py`` starts one and runs
    this)::

        >>> df = spark.createDataFrame([([1, 2, 3],), ([4],)], "ids array<int>")  # doctest: +SKIP
        >>> spark_histogram(df, "ids").histogram.values.tolist()  # doctest: +SKIP
        [1, 3]
    """
    require("pyspark.sql", "spark")

    nulls = check_nulls(nulls)
    _check_frame(df)
    items = list(column) if isinstance(column, (list, tuple)) else [column]
    if not items:
        raise TypeError("column must name at least one column, got column=[]")
    exprs = [_length_expr(df, c) for c in items]
    names = [f"__bucketloader_len{i}" for i in range(len(exprs))]
    measured = df.select(*[e.alias(n) for e, n in zip(exprs, names, strict=True)])
    what = f"the Spark DataFrame ({_describe(items)})"
    try:  # (the Spark job alone: a failure of reading the files is diagnosed below)
        collected = _collect(measured.groupBy(*names).count())
    except Exception as exc:  # NOTE [ An empty shard with a column of type null ]
        found = _untyped_empty_file(df, items) or _type_mismatch(exc)
        if found is None:
            raise
        raise ValueError(f"{what}: {found}") from None
    # (after the try: a length of 2**62 or more, refused by _ints, read up to 1,024 footers there
    # for a diagnosis it never has, s31)
    keys, counts, num_nulls = _counts(collected, names, what)
    joint = len(names) > 1
    acc = Accumulator(names if joint else None, nulls, "spark")
    if keys.size:
        lo, hi = int(keys.min()), int(keys.max())
        if lo < 0:
            raise ValueError(
                f"{what} holds the negative length {lo}; lengths count elements, so fix or "
                "filter those rows"
            )
        if hi > MAX_LENGTH:
            raise ValueError(
                f"{what} holds the length {hi}, not below 2**62 (the longest bucketloader "
                "supports); fix or filter those rows"
            )
    if num_nulls and nulls == "raise":
        found = _file_without_column(df, exprs, items)  # NOTE [ A file without the column ]
        if found is not None:
            raise ValueError(found)
    acc.add_counts(keys, counts, num_nulls)
    result = acc.result(what)
    # NOTE [ Numbers written as text ] in bucketloader._arrow: every column looked at, so that
    # the fix names the whole call, each column of numbers cast (s34: over several columns it
    # named the cast column alone, spark_histogram(df, F.col('s').cast('bigint')), a call that
    # dropped the others and made the histogram 1-D)
    short = [i for i in range(len(items)) if keys.size and keys[:, i].max() <= NUMBER_TEXT_LONGEST]
    shown = {i: _numbers_as_text(df, items[i]) for i in short}
    _refuse_numbers(column, items, {i: ex for i, ex in shown.items() if ex})
    return result


def _numbers_as_text(df: Any, item: Any) -> list[str] | None:
    """A few values of ``item`` where it is a string column (its type from the schema: any
    other reads nothing) whose every non-null value is a number written as text, else ``None``:
    one job that stops at the first value that is not (``take(1)``, which reads the partitions
    a few at a time: for real text, the first), one more for the examples (NOTE [ Numbers
    written as text ] in :mod:`bucketloader._arrow`)."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    col = item if isinstance(item, Column) else F.col(_quoted(item))
    if not isinstance(df.select(col).schema.fields[0].dataType, T.StringType):
        return None
    present = df.select(col.alias("v")).where(F.col("v").isNotNull())
    if present.where(~F.col("v").rlike(NUMBER_TEXT)).take(1):
        return None
    return [str(r["v"]) for r in present.take(3)] or None  # (nulls alone: no value to judge)


def _refuse_numbers(
    column: Any, items: list[Any], found: dict[int, list[str]], who: str = "spark_histogram"
) -> None:
    """Raise for the first of ``items`` (the measured columns, ``column`` as given) that
    ``found`` holds (their indices, with a few values each): ``who``'s call again, every found
    column cast, where each is named; else the cast in words."""
    if not found:
        return
    first = min(found)
    label = items[first] if isinstance(items[first], str) else str(items[first])
    if not all(isinstance(items[i], str) for i in found):
        fix, chars = (
            "cast it with .cast('bigint') before you measure it",
            "measure F.length() of it",
        )
    else:
        lead = "df, boundaries" if who == "spark_bucket_ids" else "df"

        def call(measure: str) -> str:
            given = [
                measure.format(repr(c)) if i in found else repr(c) if isinstance(c, str) else str(c)
                for i, c in enumerate(items)
            ]
            shown = f"[{', '.join(given)}]" if isinstance(column, (list, tuple)) else given[0]
            return f"{who}({lead}, {shown})"

        fix, chars = call("F.col({}).cast('bigint')"), call("F.length({})")
    raise ValueError(numbers_as_text_error(label, found[first], fix, chars))


def _collect(grouped: Any) -> Any:
    """``groupBy(*names).count()`` brought to the driver (the Spark job): one Arrow table where
    pyspark has ``DataFrame.toArrow`` (4.0 on) and pyarrow is installed, else its ``Row`` list.

    As one Arrow table: ``collect()`` made a ``Row`` and Python ints per distinct length, +199 MB
    of driver RSS and 5.4 s for 600 k distinct lengths (audio in samples; 2 M rows,
    ``local[1]``), where ``toArrow()`` took +24 MB and 2.1 s (s23). By ``collect()`` also where
    pyspark refuses the pyarrow installed: its floor rises with pyspark (4.3: ``pyarrow>=18``,
    above the ``pyarrow>=14`` of bucketloader's extras), and ``toArrow()`` raises
    ``PySparkImportError`` before running the job, where ``collect()`` reads the same counts
    (s23-rev2: spark_histogram failed there)."""
    import importlib.util

    to_arrow = getattr(grouped, "toArrow", None)
    if to_arrow is not None and importlib.util.find_spec("pyarrow") is not None:
        try:
            return to_arrow()
        except ImportError:  # (PySparkImportError: pyarrow older than this pyspark takes)
            pass
    return list(grouped.collect())


def _counts(
    collected: Any, names: list[str], what: str = "the Spark DataFrame"
) -> tuple[np.ndarray, np.ndarray, int]:
    """The distinct non-null lengths ``(U, D)`` in what :func:`_collect` brought (an Arrow
    table or ``Row`` s) as ``int64`` (:func:`_ints`), their counts (``int64``) and the rows with
    a null length."""
    width = len(names)
    if not isinstance(collected, list):  # (an Arrow table)
        table = collected
        null = np.zeros(table.num_rows, dtype=bool)
        for n in names:
            null |= table.column(n).is_null().to_numpy(zero_copy_only=False)
        cols = [
            _ints(table.column(n).fill_null(0).to_numpy(zero_copy_only=False), what) for n in names
        ]
        keys = np.stack(cols, axis=1) if cols else np.zeros((table.num_rows, 0), np.int64)
        counts = table.column("count").to_numpy().astype(np.int64)
        return keys[~null], counts[~null], int(counts[null].sum())
    listed, counted, num_nulls = [], [], 0
    for r in collected:
        key = [r[n] for n in names]
        if any(k is None for k in key):
            num_nulls += int(r["count"])
            continue
        listed.append(key)
        counted.append(int(r["count"]))
    keys = _ints(np.array(listed, dtype=object).reshape(len(listed), width), what)
    return keys, np.array(counted, dtype=np.int64), num_nulls


def _ints(values: np.ndarray, what: str) -> np.ndarray:
    """Grouped lengths as ``int64``; whole ``Decimal`` ones (a ``decimal(p,0)`` column, see
    :func:`_length_expr`) through Python ints, a value of ``2**62`` or more named."""
    if values.dtype != object:
        return values.astype(np.int64)
    ints = [int(v) for v in values.ravel()]
    if ints and max(ints) > MAX_LENGTH:
        raise ValueError(
            f"{what} holds the length {max(ints)}, not below 2**62 (the longest bucketloader "
            "supports); fix or filter those rows"
        )
    return np.array(ints, np.int64).reshape(values.shape)


def spark_bucket_ids(
    df: sql.DataFrame,
    boundaries: ArrayLike,
    column: str | sql.Column,
    *,
    name: str = "bucket",
    nulls: str = "raise",
) -> sql.DataFrame:
    """``df`` with an integer column ``name``: each row's bucket under ``boundaries``.

    Bucket ``i`` holds lengths ``b[i-1] < L <= b[i]``
    (:func:`~bucketloader.boundaries.assign_buckets`). A pure column expression (no Python UDF);
    a length above the last boundary, a negative one (or a null row with ``nulls="raise"``)
    fails the job with Spark's ``raise_error``; with ``nulls="skip"`` a null row gets a null
    bucket. A string column (measured in characters) is looked at first, as
    :func:`spark_histogram` does: one job, stopping at a value that is not a number; numbers
    alone are refused (NOTE [ Numbers written as text ] in :mod:`bucketloader._arrow`).

    Example (needs a SparkSession ``spark``; run by ``tests/test_engines_spark.py``)::

        >>> df = spark.createDataFrame([([1, 2, 3],), ([4],)], "ids array<int>")  # doctest: +SKIP
        >>> spark_bucket_ids(df, [1, 4], "ids").collect()  # doctest: +SKIP
        [Row(ids=[1, 2, 3], bucket=1), Row(ids=[4], bucket=0)]
    """
    require("pyspark.sql", "spark")
    from pyspark.sql import functions as F

    nulls = check_nulls(nulls)
    _check_frame(df)
    if isinstance(column, (list, tuple)):
        raise TypeError(
            f"column must be one column, got column={column!r}; for several inputs add one "
            "bucket column per input (call once per column with its own name=)"
        )
    b = check_boundaries(boundaries)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty column name, got name={name!r}")
    if name in df.columns:
        raise ValueError(
            f"the DataFrame already has a column {name!r}; choose another name= for the bucket ids"
        )
    length = _length_expr(df, column)
    examples = _numbers_as_text(df, column)  # NOTE [ Numbers written as text ]
    _refuse_numbers(column, [column], {0: examples} if examples else {}, "spark_bucket_ids")
    on_null = (
        F.lit(None).cast("long")
        if nulls == "skip"
        else F.raise_error(
            F.lit(
                "bucketloader: a null row has no length (pass nulls='skip'); a Parquet file "
                "without the column reads as null rows (spark_histogram names it)"
            )
        )
    )
    negative = F.concat(  # (s34: a negative length went to bucket 0, silently)
        F.lit("bucketloader: negative length "),
        length.cast("string"),
        F.lit("; lengths count elements: fix or filter those rows"),
    )
    expr = F.when(length.isNull(), on_null).when(length < F.lit(0), F.raise_error(negative))
    for i, edge in enumerate(b.tolist()):
        expr = expr.when(length <= F.lit(edge), F.lit(i))
    too_long = F.concat(
        F.lit("bucketloader: length "),
        length.cast("string"),
        F.lit(f" exceeds the last boundary {int(b[-1])}; recompute the boundaries"),
    )
    return df.withColumn(name, expr.otherwise(F.raise_error(too_long)).cast("long"))


def _check_frame(df: Any) -> None:
    from pyspark.sql import DataFrame

    ok = isinstance(df, DataFrame)
    # Spark Connect's DataFrame is another class with the same API; a Connect frame means its
    # module is loaded. Never import it here: without grpc, pyspark's import calls sys.exit(0)
    # in an interpreter whose __main__ has no file (``python -c``, pytest-xdist's workers).
    connect = sys.modules.get("pyspark.sql.connect.dataframe")
    if not ok and connect is not None:
        ok = isinstance(df, connect.DataFrame)
    if not ok:
        raise TypeError(f"df must be a pyspark.sql.DataFrame, got {type(df).__name__}")
    session = getattr(df, "sparkSession", None)  # (a classic frame: its context; Connect has none)
    context = getattr(session, "_sc", None)
    if context is not None and getattr(context, "_jsc", True) is None:  # (s23: pyspark's bare
        # AssertionError from F.col, no message, was all a user saw)
        raise ValueError(
            "df belongs to a SparkSession that was stopped (spark.stop()), so Spark cannot run "
            "its job; compute the histogram before stopping the session, or read the data "
            "again on a live one (SparkSession.builder.getOrCreate())"
        )
    if df.isStreaming:
        raise ValueError(
            "df is a streaming DataFrame, which never ends; compute the histogram of a batch "
            "DataFrame (spark.read instead of spark.readStream)"
        )


def _file_without_column(df: Any, exprs: list[Any], items: list[Any]) -> str | None:
    """A Parquet file that gave null rows and lacks a measured column another file of ``df``
    holds (Spark reads its rows as nulls; NOTE [ A file without the column ] in
    :mod:`bucketloader.engines._common`), named; ``None`` when there is none or no file holds
    the column (made after the read). Asked only once a scan found nulls: one more job lists
    up to 8 files that gave null rows (``input_file_name``), whose footers are then read; when
    one lacks the column, one more reads the merged schema of up to 1,024 of ``df``'s files
    (``inputFiles``) to see that some file holds it (when Spark cannot merge their schemas,
    e.g. another column has another type in some file, a read of the measured columns alone
    looks for a non-null row). Best effort: a DataFrame not read from Parquet files keeps the
    null count's error."""
    from pyspark.sql import functions as F

    columns = [c for c in items if isinstance(c, str)]
    if not columns:
        return None
    null = exprs[0].isNull()
    for e in exprs[1:]:
        null = null | e.isNull()
    try:
        rows = df.where(null).select(F.input_file_name().alias("f")).distinct().limit(8)
        files = sorted(r["f"] for r in rows.collect() if r["f"])
        spark = df.sparkSession
        paths = df.inputFiles()[:1024]

        def others() -> list[str]:
            try:  # the files' column names: their merged schema (footers only)
                return spark.read.option("mergeSchema", "true").parquet(*paths).columns
            except Exception:  # another column of another type in some file: Spark refuses
                # to merge; read the measured columns alone (a schema given, none merged), and
                # a column some file holds has a non-null row
                return [c for c in columns if _in_some_file(spark, df.schema[c], paths)]

        return missing_column(((f, spark.read.parquet(f).columns) for f in files), columns, others)
    except Exception:  # a diagnosis on the error path: never hide the null count's error
        return None


def _untyped_empty_file(df: Any, items: list[Any]) -> str | None:
    """Why Spark could not read ``df``, when an empty shard with a column of type null gave it
    its schema; ``None`` otherwise (the caller re-raises Spark's error).

    NOTE [ An empty shard with a column of type null ]
    A Parquet file written from an empty list (``pa.table({"ids": pa.array([], pa.null())})``)
    holds its column as type null; when ``spark.read.parquet`` takes the DataFrame's schema from
    that file (it reads one footer), the column reads as ``int`` and every file with rows fails
    inside Spark's reader (``FAILED_READ_FILE``). ``mergeSchema`` does not help (Spark refuses
    to merge ``int`` with the real type); a schema given to the reader does where Spark can read
    the empty file's column as the real type (a primitive, an array of one, a map: not a struct
    or an array of structs, :func:`_reads_as` tries it), and leaving the empty files out always
    does (what ``bucketloader report --engine spark`` does). Asked only once the
    scan failed: the footers of up to 1,024 of ``df``'s files (``inputFiles``) are read with
    pyarrow, and the file is named only when one with rows has the column with another type than
    the DataFrame's. Best effort: anything else keeps Spark's error."""
    columns = [c for c in items if isinstance(c, str)]
    if not columns:
        return None
    try:
        import pyarrow as pa
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        empty: tuple[str, str] | None = None  # (the empty file, its column of type null)
        with_rows: list[tuple[str, list[str]]] = []  # (a file with rows, its measured columns)
        typed: str | None = None
        for path in df.inputFiles()[:1024]:
            fs, local = pafs.FileSystem.from_uri(path)
            meta = pq.read_metadata(local, filesystem=fs)
            schema = meta.schema.to_arrow_schema()
            held = [c for c in columns if c in schema.names]
            untyped = [c for c in held if pa.types.is_null(schema.field(c).type)]
            if meta.num_rows == 0 and untyped and empty is None:
                empty = (path, untyped[0])
            elif meta.num_rows > 0:
                with_rows.append((path, held))
            if empty is not None:
                typed = next((p for p, cs in with_rows if empty[1] in cs), None)
                if typed is not None:
                    break
        if empty is None or typed is None:
            return None
        path, column = empty
        real = df.sparkSession.read.parquet(typed).schema[column].dataType.simpleString()
        read_as = df.schema[column].dataType.simpleString()
        if real == read_as:
            return None
    except Exception:  # a diagnosis on the error path: never hide Spark's error
        return None
    name = column if _PLAIN.fullmatch(column) else _quoted(column)
    ddl = f"{name} {real}"
    fix = "leave the empty files out (spark.read.parquet(*the files with rows))"
    if _reads_as(df.sparkSession, path, column, ddl):
        fix += f", or give the schema: spark.read.schema({ddl!r}).parquet(...)"
    else:  # (Spark reads a column of type null as a primitive or an array of one, not a group)
        fix += f" (Spark cannot read the empty file's column as {real}, even given the schema)"
    return (
        f"{path}: an empty Parquet file whose column {column!r} has type null (written from an "
        f"empty list); Spark took the DataFrame's schema from it ({name} {read_as}) and could "
        f"not read the files that hold rows ({name} {real}). Fix: {fix}"
    )


#: Spark's error for a file whose column has another type than the DataFrame's (Spark 4).
_MISMATCH = re.compile(
    r"reading file (\S+?)\. Data type mismatches when reading Parquet column \[(.+?)\]\. "
    r"Expected Spark type (\w+), actual Parquet type (\w+)"
)

#: Spark's type for a Parquet integer's physical type (the width a reader schema must give).
_WIDER = {"INT64": "bigint", "INT32": "int"}


def _type_mismatch(exc: Exception) -> str | None:
    """Why Spark could not read a file, when its column has another type than the DataFrame's,
    whose schema Spark took from one file (shards from two writers: ``int32`` lengths in one,
    ``int64`` in another). Spark fails inside its reader with a Java trace of about 170 lines
    (``FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH``); this names the file, the column,
    both types and the fix. ``None`` for any other error (Spark's then stands)."""
    found = _MISMATCH.search(str(exc))
    if found is None:
        return None
    path, column, expected, actual = found.groups()
    # a list column's elements: Spark names the Parquet path "ids, list, element" (s27: the fix
    # then offered the schema '`ids, list, element` bigint', which Spark cannot read)
    element = re.fullmatch(r"(.+), list, element", column)
    top = element.group(1) if element is not None else column
    name = top if _PLAIN.fullmatch(top) else _quoted(top)
    wider = _WIDER.get(actual)
    ddl = f"{name} array<{wider}>" if element is not None else f"{name} {wider}"
    fix = (
        f"read the files with the wider type, spark.read.schema({ddl!r})"
        ".parquet(...), or write the column with one type in every file"
        if wider is not None and expected in ("tinyint", "smallint", "int") and ", " not in top
        else "write the column with one type in every file"
    )
    what = f"the list elements of column {top!r} are" if element else f"column {top!r} is"
    return (
        f"{path}: {what} Parquet {actual} in this file but {expected} in the "
        f"DataFrame's schema (Spark took it from another file), and Spark does not convert it. "
        f"Fix: {fix}"
    )


def _reads_as(spark: Any, path: str, column: str, ddl: str) -> bool:
    """Whether Spark reads the empty file ``path`` given the schema ``ddl``: it does where its
    column of type null is read as a primitive, an array of one or a map of them, and fails
    for a struct or an array of structs, arrays or maps ("... (UNKNOWN) is not a group", Spark
    4.3), so the schema fix is offered only where it was seen to read. Error path only: one
    job over an empty file."""
    from pyspark.sql import functions as F

    try:
        spark.read.schema(ddl).parquet(path).select(F.col(_quoted(column))).collect()
    except Exception:
        return False
    return True


#: A column name that Spark's DDL and SQL read as it is (others go in backticks).
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _quoted(name: str) -> str:
    """``name`` as one Spark SQL identifier (spaces, dots, quotes kept): in backticks, a
    backtick inside doubled.

    Example:
        >>> print(_quoted("a.b"), _quoted("x`y"))
        `a.b` `x``y`
    """
    return "`" + name.replace("`", "``") + "`"


def _in_some_file(spark: Any, field: Any, paths: list[str]) -> bool:
    """Whether a Parquet file of ``paths`` holds ``field`` (read as itself, with no schema
    merged: a row of it that is not null; a file without it reads as nulls)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    read = spark.read.schema(T.StructType([field])).parquet(*paths)
    return bool(read.where(F.col(_quoted(field.name)).isNotNull()).limit(1).count())


def _merged_hint(df: Any, column: str) -> str:
    """Where ``column`` is in some of ``df``'s Parquet files but not in the one Spark took the
    schema from (``spark.read.parquet`` reads one file's footer, not all), say so and name
    ``mergeSchema``: s30-scale, shards written before the column was added, sorted first, gave
    only "column 'n' not found; the DataFrame has columns ['other']", though the files held it.
    Best effort on the error path (the merged schema of up to 1,024 of the files' footers)."""
    try:
        paths = df.inputFiles()[:1024]
        if not paths:
            return ""
        merged = df.sparkSession.read.option("mergeSchema", "true").parquet(*paths).columns
    except Exception:  # (not read from Parquet files, or schemas Spark cannot merge)
        return ""
    if column not in merged:
        return ""
    return (
        f" (its schema came from one Parquet file; other files hold {column!r}: read them "
        "with spark.read.option('mergeSchema', 'true').parquet(...), whose files without the "
        "column read as null rows, named under nulls='raise' and left out under nulls='skip')"
    )


def _describe(items: list[Any]) -> str:
    text = [c if isinstance(c, str) else str(c) for c in items]
    return f"column {text[0]!r}" if len(text) == 1 else f"columns {text}"


def _length_expr(df: Any, column: Any) -> Any:
    """The length of each row as a ``long`` column expression (type checked, nulls kept)."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(column, Column):
        col, label = column, str(column)
        dtype = df.select(column).schema.fields[0].dataType
    else:
        check_columns(column)
        if column not in df.columns:
            fix = f"pass it as a Column, F.col({column!r})"
            raise MissingKeyError(
                f"column {column!r} not found; the DataFrame has columns {df.columns}"
                + did_you_mean("column", column, df.columns)
                + _merged_hint(df, column)
                + nested_field(
                    column,
                    [f.name for f in df.schema.fields if isinstance(f.dataType, T.StructType)],
                    fix,
                )
            )
        col, label = F.col(_quoted(column)), column
        dtype = df.schema[column].dataType
    if isinstance(dtype, T.ArrayType):
        if isinstance(dtype.elementType, (T.ArrayType, T.MapType)):
            raise TypeError(
                f"column {label!r} is a nested array ({dtype.simpleString()}): which level is "
                "the length is ambiguous; flatten it or pass a Column expression of lengths"
            )
        return F.when(col.isNull(), F.lit(None)).otherwise(F.size(col)).cast("long")
    if isinstance(dtype, (T.StringType, T.BinaryType)):
        return F.length(col).cast("long")
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return col.cast("long")
    if isinstance(dtype, T.DecimalType) and dtype.scale == 0:
        # whole numbers: how Spark reads a Parquet uint64 column (decimal(20,0)). Grouped as
        # they are (a cast to long fails on a value past 2**63 under ANSI, or turns it into
        # a null), and made ints on the driver, where the 2**62 limit names the value (s30-scale:
        # refused as "decimal(20,0) numbers; lengths are whole numbers", which they were)
        return col
    if isinstance(dtype, (T.FloatType, T.DoubleType, T.DecimalType)):
        raise TypeError(
            f"column {label!r} holds {dtype.simpleString()} numbers; lengths are whole numbers: "
            "cast it to long (after rounding up), or pass a Column expression of lengths"
        )
    raise TypeError(
        f"column {label!r} has type {dtype.simpleString()}; lengths come from an array column "
        "(size), a string column (length) or an integer column; or pass a Column expression"
    )
