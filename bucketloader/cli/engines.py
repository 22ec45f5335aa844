"""Length histograms for the command line from Parquet shards, on a chosen engine.

``bucketloader report`` and ``precompute`` take a directory or glob of Parquet files (or one
file) with ``--engine local`` (:func:`~bucketloader.engines.parquet_histogram`, bounded memory on
this machine), ``--engine ray`` (``ray.data.read_parquet``; joins a running cluster when
``RAY_ADDRESS`` is set, else starts a local one) or ``--engine spark``
(``spark.read.parquet``; the session ``spark-submit`` configured, else a local one). Only the
histogram comes back, never the per-sample lengths.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.histogram import JointHistogram, LengthHistogram

ENGINES = ("local", "ray", "spark")
#: ``--nulls``: the engines' ``nulls=`` choices.
NULLS = ("raise", "skip")


def is_parquet_set(path: str) -> bool:
    """Whether ``path`` names Parquet shards: a glob, a ``.parquet`` file, or a directory (read
    as the Parquet files under it: NOTE [ Which files a directory of Parquet shards holds ]
    in :mod:`bucketloader._arrow`).

    A directory written by ``datasets.Dataset.save_to_disk`` (Arrow files, with its
    ``state.json`` or ``dataset_dict.json``) is not.

    Example:
        >>> is_parquet_set("shards/*.parquet"), is_parquet_set("lengths.txt")
        (True, False)
    """
    if glob.has_magic(path):
        return True
    p = Path(path)
    if p.is_dir():
        return not is_saved_dataset(p)
    return p.suffix.lower() == ".parquet"


def is_saved_dataset(directory: Path) -> bool:
    """Whether ``directory`` was written by ``datasets`` ``save_to_disk`` (a ``Dataset``'s
    ``state.json``, or a ``DatasetDict``'s ``dataset_dict.json``)."""
    return (directory / "state.json").is_file() or (directory / "dataset_dict.json").is_file()


def engine_histogram(
    path: str, column: str | list[str] | None, engine: str, nulls: str = "raise"
) -> tuple[LengthHistogram | JointHistogram, int]:
    """The exact histogram of ``column`` over the Parquet shards ``path``, and the null count;
    several columns (a joint plan's) give the :class:`JointHistogram` of their rows (a row
    with any of them null is one null row).

    ``nulls`` is the engines' (``--nulls``); their errors name the command's option where they
    name the Python one. Files that hold no row are told on stderr with their count (a note:
    nothing is lost, but a writer that left empty shards may have lost rows upstream).
    """
    from bucketloader._arrow import WITH_LENGTH_FN, WITHOUT_LENGTH_FN

    try:
        return _engine_histogram(path, column, engine, nulls)
    except (ValueError, TypeError) as exc:
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        said = text
        for python, command in (  # (s28: Python's fixes, which the command has no flag for)
            ("nulls='skip'", "--nulls skip"),
            ("(they are then counted in ScanResult.num_nulls)", "(a note counts them)"),
            (WITH_LENGTH_FN, WITHOUT_LENGTH_FN),  # Ray's
            ("pass a Column expression of lengths", WITHOUT_LENGTH_FN),  # Spark's
            ("pass a Column expression", WITHOUT_LENGTH_FN),
        ):
            text = text.replace(python, command)
        if text == said:
            raise
        raise type(exc)(text) from None


def _engine_histogram(
    path: str, column: str | list[str] | None, engine: str, nulls: str
) -> tuple[LengthHistogram | JointHistogram, int]:
    from bucketloader._arrow import scan_parquet, skipped_note

    files, skipped = scan_parquet(path)
    if skipped:  # (a README.md beside the shards is normal: said, not refused)
        print(f"bucketloader: note: {skipped_note(path, files, skipped)}", file=sys.stderr)
    columns = [_only_column(files[0])] if column is None else _as_list(column)
    measured: str | list[str] = columns[0] if len(columns) == 1 else columns  # (the engines')
    empty, wider, partial = _footers(files, columns) if engine in ("ray", "spark") else ((), {}, {})
    # Ray and Spark read only the files that hold rows (they add nothing else): an empty shard
    # written from an empty list has columns of type null, and Spark, whose schema then came from
    # it, failed on the others with a Java traceback ("Invalid Spark read type")
    read = [f for f in files if f not in empty] or files
    if engine == "local":
        from bucketloader.engines import parquet_histogram

        result = parquet_histogram(files, measured, nulls=nulls)
    elif engine == "ray":
        from bucketloader.engines import ray_histogram

        ray = _import("ray.data", "ray")
        with _quiet_ray():  # NOTE [ A quiet Ray ]
            if not ray.is_initialized():
                from bucketloader.engines.ray import check_ray_address

                check_ray_address("--engine ray")
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            context = ray.data.DataContext.get_current()
            context.enable_progress_bars = False
            context.print_on_execution_start = False
            import pyarrow.fs

            try:
                ds = ray.data.read_parquet(
                    [str(Path(f).resolve()) for f in read],
                    filesystem=pyarrow.fs.LocalFileSystem(),  # local paths (no fsspec/http probing)
                ).select_columns(columns)
            except pyarrow.ArrowTypeError as exc:  # Ray unifies the files' schemas as it reads:
                # "Unable to merge: Field n has incompatible types: int64 vs string", no file named
                found = next(filter(None, (_disagreeing_file(read, c) for c in columns)), None)
                if found is None:
                    raise
                raise ValueError(f"{found} (Ray: {exc})") from None
            try:
                result = ray_histogram(ds, measured, nulls=nulls)
            except TypeError:  # ("holds double numbers": Ray widened int64 shards to double)
                found = next(filter(None, (_disagreeing_file(read, c) for c in columns)), None)
                if found is None:
                    raise
                raise ValueError(found) from None
            except ray.exceptions.RayError as exc:  # (its worker's traceback was the text of
                # the command's error: 68 lines)
                raise ValueError(_engine_failure("ray", exc)) from None
    elif engine == "spark":
        from bucketloader.engines import spark_histogram

        spark = _spark_session(_import("pyspark.sql", "spark"))
        reader = spark.read
        if wider or partial:  # int32 lengths (or token ids) in one shard, int64 in another:
            # Spark reads every file as the one file's type it took and fails on a wider one
            # (the local and Ray engines widen); given bigint, it reads them all (the other
            # measured columns as Spark reads them). A column that the file Spark takes its
            # schema from lacks (the first by path) was "not found" (s28-eng): its type is
            # read from a file that holds it, and the file without it is then named, or its
            # rows skipped (NOTE [ A file without the column ] in engines._common)
            taken = (  # (a column that no file holds is left to spark_histogram's error)
                {}
                if len(wider) == len(columns)
                else {f.name: f.dataType.simpleString() for f in reader.parquet(*read).schema}
            )
            for c, holder in partial.items():
                if c not in wider and c not in taken:
                    field = reader.parquet(holder).schema[c]
                    taken[c] = field.dataType.simpleString()
            types = {c: wider.get(c) or taken.get(c) for c in columns}
            reader = reader.schema(
                ", ".join(f"`{c.replace('`', '``')}` {t}" for c, t in types.items() if t)
            )
        try:
            result = spark_histogram(reader.parquet(*read), measured, nulls=nulls)
        except (ValueError, TypeError, KeyError):
            raise  # (bucketloader's own errors, and pyspark's of the same kinds: one line)
        except Exception as exc:  # a Py4JJavaError: 190 lines of Java, exit 1
            raise ValueError(_engine_failure("spark", exc)) from None
    else:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got --engine {engine}")
    empty = result.empty_files if engine == "local" else empty
    if empty:
        names = ", ".join(Path(f).name for f in empty[:3]) + (", ..." if len(empty) > 3 else "")
        print(
            f"bucketloader: note: {len(empty):,} of the {len(files):,} Parquet files "
            f"{'holds' if len(empty) == 1 else 'hold'} no rows ({names}); the histogram counts "
            "the rows of the others",
            file=sys.stderr,
        )
    return result.histogram, result.num_nulls


def _as_list(column: str | list[str]) -> list[str]:
    return [column] if isinstance(column, str) else list(column)


def _footers(
    files: list[str], columns: str | list[str]
) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """Each file's Parquet footer, read once: the files that count no row (what
    ``parquet_histogram`` tells the local engine's scan), per column of ``columns`` the
    Spark type that reads it in every other file where they hold it as integers of several
    widths (``bigint``), or lists of them (``array<bigint>``: token ids written by two
    writers; s27); a column Spark's own read takes is not listed (its errors then stand); and
    per column that some file with rows lacks while another holds it, the first that holds
    it (NOTE [ A file without the column ] in :mod:`bucketloader.engines._common`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader._arrow import nested_field
    from bucketloader._validation import MissingKeyError

    columns = _as_list(columns)
    empty: list[str] = []
    held: set[str] = set()
    types: dict[str, set[Any]] = {c: set() for c in columns}
    holders: dict[str, str] = {}  # (the first file with rows that holds each column)
    lacked: set[str] = set()  # (the columns some file with rows lacks)
    for f in files:
        try:
            meta = pq.read_metadata(f)
        except (ValueError, OSError) as exc:  # (pyarrow's ArrowInvalid is a ValueError) Ray's
            # and Spark's runs read these footers first, and pyarrow's message named no file
            raise ValueError(
                f"{f}: not readable as Parquet ({exc}); leave this file out (list the others) "
                f"or write it again"
            ) from None
        schema = meta.schema.to_arrow_schema()
        held.update(schema.names)
        if meta.num_rows == 0:
            empty.append(f)
            continue
        for c in columns:
            if c in schema.names:
                types[c].add(schema.field(c).type)
                holders.setdefault(c, f)
            else:
                lacked.add(c)
    for c in columns:  # (Ray said "not found; the Ray dataset has columns []"; a partition
        if c not in held and f"{c}=" not in files[0]:  # key, name=value in a path, is no file's)
            first = pq.read_schema(files[0])
            structs = [x.name for x in first if pa.types.is_struct(x.type)]
            fix = "write the field to a column of its own and measure that"
            raise MissingKeyError(
                f"column {c!r} not found in {files[0]}"
                + (", nor in the other Parquet files there" if len(files) > 1 else "")
                + f"; it has columns {first.names}: choose one with --column NAME"
                + nested_field(c, structs, fix)
            )
    wider = {}
    for c, seen in types.items():
        lists = [t.value_type for t in seen if pa.types.is_list(t) or pa.types.is_large_list(t)]
        if len(seen) > 1 and all(pa.types.is_integer(t) for t in seen):
            wider[c] = "bigint"
        elif len(lists) == len(seen) and len(set(lists)) > 1:
            if all(pa.types.is_integer(t) for t in lists):
                wider[c] = "array<bigint>"
    partial = {c: holders[c] for c in columns if c in lacked and c in holders}
    return tuple(empty), wider, partial


def _engine_failure(engine: str, exc: BaseException) -> str:
    """One line for a failure inside Ray or Spark that is no error of bucketloader's: the file
    the engine names, its message and (Spark's) root cause, and the fix. A shard whose footer
    reads but whose pages are damaged ended ``--engine spark`` in a 190-line Py4JJavaError
    traceback (exit 1), and ``--engine ray`` in an error whose text was Ray's worker traceback
    (68 lines; s28); the local scan names such a file and its problem in one line.

    Example:
        >>> text = "ray::Read()\\nOSError: Corrupt data.\\nFailed to read fragment /d/a.parquet"
        >>> print(_engine_failure("ray", RuntimeError(text)))  # doctest: +NORMALIZE_WHITESPACE
        --engine ray failed reading /d/a.parquet (OSError: Corrupt data.); if that file is
        damaged, leave it out or write it again (--engine local reads the shards on this
        machine and names a file it cannot read, and why)
    """
    import re

    text = str(exc)
    where = re.search(r"(?:reading file|read fragment) (\S+?)\.?(?:\s|$)", text)
    spark = re.search(r"\[[A-Z][A-Z_.]+\] [^\n]+?(?=\s+SQLSTATE|$)", text, re.MULTILINE)
    errors = re.findall(r"^(?:Caused by: )?([\w.$]+(?:Error|Exception): [^\n]+)$", text, re.M)
    what = spark.group(0) if spark else errors[-1] if errors else text.strip().split("\n")[0]
    cause = errors[-1] if spark and errors and errors[-1] not in what else ""
    return (
        f"--engine {engine} failed reading {where.group(1) if where else 'the shards'} "
        f"({what[:300]}{'; caused by ' + cause[:200] if cause else ''}); if that file is "
        "damaged, leave it out or write it again (--engine local reads the shards on this "
        "machine and names a file it cannot read, and why)"
    )


def _disagreeing_file(files: list[str], column: str) -> str | None:
    """The error naming the first of ``files`` whose ``column`` has a type that does not unify
    with the earlier files' (an ``int64`` length column and a ``string`` one), or that unifies
    by turning integers into floats (``int64`` and ``double``: Ray read them all as ``double``,
    refused as "holds double numbers" with no file named; s28), or ``None``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def floats(t: Any) -> bool:
        return bool(pa.types.is_floating(t) or pa.types.is_decimal(t))

    first: tuple[str, Any] | None = None
    for f in files:
        schema = pq.read_schema(f)
        if column not in schema.names:
            continue
        t = schema.field(column).type
        if first is None:
            first = (f, t)
            continue
        try:
            pa.unify_schemas(
                [pa.schema([(column, first[1])]), pa.schema([(column, t)])],
                promote_options="permissive",
            )
            ints = [pa.types.is_integer(x) for x in (first[1], t)]
            agree = not (any(ints) and any(floats(x) for x in (first[1], t)))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            agree = False
        if not agree:
            return (
                f"{f}: column {column!r} is {t} in this file but {first[1]} in {first[0]}; "
                "every file must hold the measured column with one type: write it again with "
                f"the same type (e.g. {first[1]}), or leave the file out"
            )
    return None


# NOTE [ A quiet Ray ]
# Ray's console lines are the CLI's noise: the token authentication notice of ray.init, Ray
# Data's INFO lines (the execution's start, plan and end), its WARNING that progress bars are
# off (the CLI turns them off) and, for a bad input, ERROR lines of the failed task before the
# command's own error (s28). They are muted on the console while the CLI starts Ray and scans
# (``print_on_execution_start`` off too); Ray Data's log file (its session's logs/ray-data)
# keeps every line, and every failure reaches the user as the Python-side error.


@contextlib.contextmanager
def _quiet_ray() -> Iterator[None]:
    """Ray's console lines muted inside (NOTE [ A quiet Ray ]): the ``ray`` logger's (whose
    handler ``ray.init`` removes: Python's last-resort handler then printed them) and the
    console handlers of ``ray.data``'s (its file handler keeps every line)."""
    import logging

    top = logging.getLogger("ray")
    level = top.level
    muted = [
        (h, h.level)
        for h in logging.getLogger("ray.data").handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    top.setLevel(logging.CRITICAL + 1)
    for h, _ in muted:
        h.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        top.setLevel(level)
        for h, was in muted:
            h.setLevel(was)


# NOTE [ A quiet Spark session ]
# The CLI's Spark session says nothing on stderr of its own: a bad input printed Java's
# start-up lines, log4j warnings, progress bars and, for an error Spark met in a task, each
# task's Java stack trace at ERROR (~100 lines) before the command's one-line error (s28). Where
# the CLI starts Spark's Java process, that process's stderr goes to an unlinked temporary file
# (what it said is read back only to explain a start that failed); the log level is OFF for the
# job either way (a session that spark-submit started keeps its stderr: its own start-up lines
# came before the CLI ran). Every failure still reaches the user as the Python-side error.


def _spark_session(sql: Any) -> Any:
    """The CLI's Spark session, quiet (NOTE [ A quiet Spark session ]); one error line where it
    cannot start."""
    import tempfile

    launched = "PYSPARK_GATEWAY_PORT" not in os.environ  # (else spark-submit's Java process)
    builder = sql.SparkSession.builder.appName("bucketloader")
    with tempfile.TemporaryFile(prefix="bucketloader-spark-") as log:
        try:
            with _stderr_to(log) if launched else contextlib.nullcontext():
                spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
        except Exception as exc:  # (s23: a master that does not answer ended the CLI, after
            # Spark's 3 tries (68 s), in a 200-line Py4JJavaError traceback, exit 1)
            log.seek(0)
            raise ValueError(_no_session(exc, log.read().decode(errors="replace"))) from None
    spark.sparkContext.setLogLevel("OFF")
    return spark


@contextlib.contextmanager
def _stderr_to(log: Any) -> Iterator[None]:
    """File descriptor 2 written to ``log`` inside (and by the processes started there, for
    their life); this process's own stderr is back on exit."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _no_session(exc: BaseException, said: str = "") -> str:
    """The one-line error for a Spark session that could not start: the Java exception's own
    line where there is one, and where the master came from. ``said``: what Spark's Java
    process (or its launch script) wrote on stderr."""
    import re

    text = str(exc)
    java = re.search(r"^: ([\w.$]+(?:Exception|Error)\b.*)$", text, re.MULTILINE)
    what = java.group(1) if java else (text.strip().splitlines() or [type(exc).__name__])[0]
    if "JAVA_GATEWAY_EXITED" in text:  # (s23-rev2: no Java, or a JAVA_HOME without one, was
        # blamed on the master; the launch script's first line says which, e.g. "JAVA_HOME is
        # not set" or ".../spark-class: line 71: /opt/jdk/bin/java: No such file or directory")
        first = [line.strip() for line in said.splitlines() if line.strip()][:1]
        what += f"; it said: {first[0][:200]}" if first else ""
        failed, name, hint = "Spark's Java process", "JAVA_HOME", ": Spark needs Java 17 or later"
        fix = "install it, or point JAVA_HOME{} at one, or use --engine local (no Java)"
    else:
        failed, name, hint = "a Spark session", "PYSPARK_SUBMIT_ARGS", ""
        fix = (
            "its master comes from spark-submit, PYSPARK_SUBMIT_ARGS{} or spark-defaults.conf: "
            "start the master it names, or leave them out to run Spark on this machine"
        )
    value = os.environ.get(name)
    here = f" (here {name}={value!r})" if value else ""
    return f"--engine spark could not start {failed} ({what[:300]}){hint}; {fix.format(here)}"


def _import(module: str, extra: str) -> Any:
    """``import module``, returning its top-level package, or the error naming the extra."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"--engine {extra} needs {module!r} ({exc}); install it with "
            f"pip install 'bucketloader[{extra}]'"
        ) from None
    return sys.modules[module.split(".")[0]] if extra == "ray" else sys.modules[module]


def _only_column(file: str) -> str:
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(file).names
    except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{file}: not readable as Parquet ({exc})") from None
    if len(names) != 1:
        raise ValueError(f"{file} has columns {names}; choose one with --column NAME")
    return names[0]
