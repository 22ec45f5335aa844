"""Exact length histograms of Parquet / Arrow data on one machine, out of core.

A directory or glob of Parquet files (thousands of shards are fine), a ``pyarrow.dataset``
(Parquet, Arrow IPC / Feather, ...), a ``pyarrow.Table`` or a ``RecordBatchReader`` is read one
record batch at a time, only the measured column(s) (a projection: no other column is read), and
each batch's lengths come from the Arrow list / string offsets (``list_value_length``): no row is
turned into Python objects. Memory is bounded by one batch (``batch_size`` rows) plus the Parquet
reader's buffer of the current row group's column chunk, whatever the dataset's size; each batch's
histogram is merged exactly into the total (NOTE [ Exact merge ] in
:mod:`bucketloader.histogram`). ``benchmarks/engines.py`` measures both the rate and the bound.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from bucketloader._arrow import (
    WITHOUT_LENGTH_FN,
    is_bytes,
    is_list,
    is_text,
    nested_field,
    parquet_files,
    scan_parquet,
    skipped_note,
)
from bucketloader._samples import did_you_mean
from bucketloader._types import LazyModule
from bucketloader._validation import (
    MissingKeyError,
    check_bool,
    check_int,
    checks_options,
)
from bucketloader.engines._common import (
    Accumulator,
    NumbersAsText,
    ScanResult,
    check_arrow_type,
    check_columns,
    check_nulls,
    describe_columns,
    missing_column,
    require,
    table_lengths,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    pa, pads = LazyModule("pyarrow"), LazyModule("pyarrow.dataset")

#: Where the rows come from (see :func:`parquet_histogram`).
ParquetSource: TypeAlias = (
    "str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | pads.Dataset | pa.Table"
    " | pa.RecordBatchReader | Iterator[pa.RecordBatch]"
)

__all__ = ["parquet_files", "parquet_histogram"]

_log = logging.getLogger(__name__)

#: Rows per record batch of the scan (the memory bound is about this many rows of the column).
DEFAULT_BATCH_SIZE = 65536


@checks_options
def parquet_histogram(
    source: ParquetSource,
    column: str | list[str],
    *,
    nulls: str = "raise",
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool | None = None,
) -> ScanResult:
    """Exact histogram of a column over Parquet files or Arrow data, in bounded memory.

    Args:
        source: a Parquet file, a directory of them (its Parquet files, searched
            recursively, hive partitions included; other files are skipped and logged, names
            starting with ``_`` or ``.`` skipped silently: NOTE [ Which files a directory of
            Parquet shards holds ] in :mod:`bucketloader._arrow`), a glob
            (``"shards/*.parquet"``), a list of files, a ``pyarrow.dataset.Dataset``, a
            ``pyarrow.Table`` or a ``pyarrow.RecordBatchReader`` (or an iterator of record
            batches; those can be read only once), or a ``datasets.Dataset`` (its logical rows,
            a batch at a time; a streamed ``IterableDataset`` with features too).
        column: what to measure: a list column (its list lengths), a string / binary column
            (characters / bytes), an integer column (read as lengths), or a list of such
            columns for a :class:`~bucketloader.histogram.JointHistogram`.
        nulls: ``"raise"`` (default) or ``"skip"`` (NOTE [ Nulls ] in
            :mod:`bucketloader.engines._common`).
        batch_size: rows per record batch read.
        progress: show a progress bar over rows (needs ``tqdm``; default: when stderr is a
            terminal and tqdm is installed).

    Returns:
        a :class:`~bucketloader.engines.ScanResult` (``.histogram``, ``.num_rows``,
        ``.num_nulls``).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> for i in range(3):
        ...     pq.write_table(pa.table({"ids": [[1] * (i + 1), [2, 3]]}), f"{d}/{i}.parquet")
        >>> r = parquet_histogram(d, "ids")
        >>> r.histogram.values.tolist(), r.histogram.counts.tolist(), r.num_rows
        ([1, 2, 3], [1, 4, 1], 6)
    """
    pa = require("pyarrow", "arrow")
    columns: list[str] = check_columns(column)  # type: ignore[assignment]
    nulls = check_nulls(nulls)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=2**62)  # (an Arrow int64)
    if progress is not None:
        progress = check_bool("progress", progress)
    schema, batches, total, what, rows = _open(pa, source, columns, batch_size, nulls)
    missing = [c for c in columns if c not in schema.names]
    if missing:
        path = ", ".join(repr(part) for part in missing[0].split("."))
        fix = (  # (a projection of the field, read batch by batch: still out of core)
            "measure the field as a column of its own record batches, "
            f"parquet_histogram(pyarrow.dataset.dataset(path).to_batches(columns={{"
            f"{missing[0]!r}: pyarrow.compute.field({path})}}), {missing[0]!r}), or "
            "write it to a column of its own"
        )
        raise MissingKeyError(
            f"column {missing[0]!r} not found in {what}; it has columns {schema.names}"
            + did_you_mean("column", missing[0], schema.names)
            + nested_field(missing[0], [f.name for f in schema if pa.types.is_struct(f.type)], fix)
        )
    for c in columns:
        check_arrow_type(schema.field(c).type, c, other=WITHOUT_LENGTH_FN)
    acc = Accumulator(columns, nulls, "arrow")
    text = NumbersAsText([c for c in columns if _kind(pa, schema.field(c).type) == "text"])
    bar = _progress_bar(progress, total, what)
    seen, nulls_in = 0, None  # rows read; the first file holding a null row (files only)
    try:
        for batch in batches:
            try:
                lengths, num_nulls = table_lengths(batch, columns)
            except ValueError as exc:  # a negative or huge length: which file holds it
                raise ValueError(f"{_holder(rows, columns) or what}: {exc}") from None
            if num_nulls and nulls_in is None and len(rows) > 1 and nulls == "raise":
                nulls_in = _null_holder(rows, columns, seen, batch.num_rows)
            seen += batch.num_rows
            acc.add(lengths, num_nulls)
            if text.found:
                text.add(batch)
            if bar is not None:
                bar.update(batch.num_rows)
    finally:
        if bar is not None:
            bar.close()
    first = f", the first in {nulls_in}" if nulls_in else ""  # (error path: nulls="raise")
    result = acc.result(f"{what} ({describe_columns(columns)}{first})")
    numeric = [c for c, examples in text.found.items() if examples]
    text.check(  # NOTE [ Numbers written as text ]
        lambda c: _read_as_integers(pa, source, c, columns, numeric),
        lambda c: f"pass a table of pyarrow.compute.utf8_length(column) as {c!r} in its place",
    )
    empty = tuple(path for path, n in rows.items() if n == 0)
    return dataclasses.replace(result, empty_files=empty) if empty else result


def _read_as_integers(
    pa: Any, source: Any, column: str, columns: Sequence[str] = (), numeric: Sequence[str] = ()
) -> str:
    """How to measure ``column`` of ``source`` as integers (NOTE [ Numbers written as text ] in
    :mod:`bucketloader.engines._common`): files read through a dataset of the integer type
    (pyarrow casts the text as it reads, still out of core); data in memory cast first. Where
    several ``columns`` are measured, the call keeps them all, each of ``numeric`` (the columns
    of numbers written as text) cast (s34: it named a dataset of the one column, and the call
    on it alone, which lost the others)."""
    if isinstance(source, (pa.Table, pa.RecordBatch, pa.RecordBatchReader, Iterator)):
        return (
            f"cast the column first, e.g. table.set_column(table.schema.get_field_index("
            f"{column!r}), {column!r}, pyarrow.compute.cast(table[{column!r}], pyarrow.int64()))"
        )
    if len(columns) <= 1:
        return (
            f"parquet_histogram(pyarrow.dataset.dataset(path, schema=pyarrow.schema({{{column!r}: "
            f"pyarrow.int64()}})), {column!r}) casts them as it reads (or write the column as "
            "int64)"
        )
    cast = "; ".join(
        f"schema = schema.set(schema.get_field_index({c!r}), pyarrow.field({c!r}, pyarrow.int64()))"
        for c in (numeric or [column])
    )
    return (
        f"schema = pyarrow.dataset.dataset(path).schema; {cast}; then "
        f"parquet_histogram(pyarrow.dataset.dataset(path, schema=schema), {list(columns)!r}) "
        "casts them as it reads (or write the columns as int64)"
    )


def _open(
    pa: Any, source: Any, columns: list[str], batch_size: int, nulls: str = "raise"
) -> tuple[Any, Iterator[Any], int | None, str, dict[str, int]]:
    """Schema, an iterator of record batches (only ``columns``), row total (if known), name,
    and the rows of each file (a dataset of files; else none)."""
    import pyarrow.dataset as pads

    what = f"the {type(source).__name__}"
    if isinstance(source, (list, tuple)) and not source:  # (s30-scale: "got list", as if a
        # list were not a source)
        raise ValueError(
            f"source is an empty {type(source).__name__}: there are no Parquet files to read; "
            "pass at least one file, directory or glob (an empty list often means a glob "
            "that matched nothing upstream)"
        )
    own = isinstance(source, (str, os.PathLike)) or (
        isinstance(source, (list, tuple))
        and bool(source)
        and all(isinstance(s, (str, os.PathLike)) for s in source)
    )
    if own:  # paths: the dataset of their whole Parquet files
        names = [source] if isinstance(source, (str, os.PathLike)) else list(source)
        files = []
        for name in names:
            listed, skipped = scan_parquet(name)
            if skipped:  # (a directory's README.md: NOTE [ Which files a directory of Parquet
                _log.info(skipped_note(name, listed, skipped))  # shards holds ])
            files += listed
        _check_listed_once(names, files)
        what = os.fspath(names[0]) if len(names) == 1 else f"{len(files)} files"
        try:
            source = pads.dataset(files, format="parquet")
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"{what}: not readable as Parquet ({exc})") from None
        untyped = [c for c in columns if _is_null(pa, source.schema, c)]
        if len(files) > 1 and untyped:
            source = _typed(pa, pads, source, files, what, untyped)
        absent = [c for c in columns if c not in source.schema.names]
        if len(files) > 1 and absent:  # (the first file's schema: NOTE [ A file without the
            source = _held(pa, pads, source, absent)  # column ] in engines._common)
            if any(c not in source.schema.names for c in columns):  # held by no file
                return _every_field(pa, source), iter(()), None, what, {}
        present = [c for c in columns if c in source.schema.names]
        if len(files) > 1 and present:  # (the footers, read here, are read once)
            source = _widened(pa, pads, source, present)
            _check_kinds(pa, source, present)
        if len(files) > 1 and nulls == "raise" and present:  # the schema is the first file's
            # (NOTE [ A file without the column ] in bucketloader.engines._common)
            footers = ((f.path, f.physical_schema.names) for f in source.get_fragments())
            found = missing_column(footers, present)  # (read until a file decides)
            if found is not None:
                raise ValueError(found)
    if isinstance(source, pads.Dataset):
        present = [c for c in columns if c in source.schema.names]
        options = {"columns": present, "batch_size": batch_size, "batch_readahead": 1}
        # NOTE [ One file at a time ]: the dataset's scanner reads ahead of a consumer slower
        # than the reader (the histogram of each batch is), batch_readahead and
        # fragment_readahead notwithstanding: its buffer grew with the rows, peak RSS 159, 231
        # and 318 MB for 1.25 M, 20 M and 60 M int64 lengths (pool 11, 40, 82 MB; 365 MB of
        # 60 M rows with 3 ms of work per batch). Scanning the files we listed one fragment at
        # a time, cast to the dataset's schema, holds one batch: 143 MB and a 3 MB pool at
        # 60 M rows, as fast. A user's dataset keeps its own scan (its filter, its partitions).
        # Small files go together, up to a batch's rows a scan (s19-review: one scanner per
        # file cost 0.1 to 0.2 ms a file, 0.35 -> 0.74 s for 2,000 files of 50 rows; grouped,
        # as before, while a scan still holds about one batch).
        rows = (
            _rows_per_file(pa, source, what, footers=own)
            if isinstance(source, pads.FileSystemDataset)
            else {}
        )
        reading: list[Any] = []  # (the files being read: a damaged one is named)

        def groups() -> Iterator[list[Any]]:
            for group in _file_groups(source, rows, batch_size):
                reading[:] = group
                yield group

        batches = (
            (
                b
                for group in groups()
                for b in pads.FileSystemDataset(
                    group, source.schema, source.format, source.filesystem
                ).to_batches(fragment_readahead=1, **options)
            )
            if own
            else source.to_batches(fragment_readahead=1, **options)
        )
        total = sum(rows.values()) if rows else None
        checked = _checked_batches(pa, batches, what, source, present, reading)
        return source.schema, checked, total, what, rows
    if isinstance(source, pa.Table):
        return (
            source.schema,
            iter(source.to_batches(max_chunksize=batch_size)),
            source.num_rows,
            ("the pyarrow.Table"),
            {},
        )
    if isinstance(source, pa.RecordBatchReader):
        return (
            source.schema,
            _once(iter(source), "the RecordBatchReader"),
            None,
            ("the RecordBatchReader"),
            {},
        )
    hf = _hf_dataset(source, columns, batch_size)
    if hf is not None:
        return hf
    if isinstance(source, Iterator):
        if inspect.isgenerator(source) and inspect.getgeneratorstate(source) == "GEN_CLOSED":
            raise ValueError(
                "source is a generator that was already consumed (or closed); an iterator of "
                "record batches can be read once: create a new one, or pass the files"
            )
        try:
            first = next(source)
        except StopIteration:
            raise ValueError(
                "source is an iterator with no record batch left: empty, or already consumed "
                "(an iterator can be read once); pass the files or a pyarrow.dataset instead"
            ) from None
        if not isinstance(first, pa.RecordBatch):
            raise TypeError(
                f"source iterator must yield pyarrow.RecordBatch objects, got "
                f"{type(first).__name__}"
            )
        return first.schema, _chain(first, source), None, "the record batch iterator", {}
    raise TypeError(
        "source must be a Parquet path (file, directory or glob), a list of paths, a "
        "pyarrow.dataset.Dataset, a pyarrow.Table, a pyarrow.RecordBatchReader or a "
        f"datasets.Dataset, got {type(source).__name__}"
    )


def _hf_dataset(
    source: Any, columns: list[str], batch_size: int
) -> tuple[Any, Iterator[Any], int | None, str, dict[str, int]] | None:
    """A Hugging Face ``datasets.Dataset`` opened as :func:`_open` opens a source (``None`` for
    anything else): its rows in their logical order (after ``filter``, ``select``,
    ``shuffle``), one batch at a time from its Arrow table (memory-mapped when loaded from disk),
    only the measured columns; an ``IterableDataset`` (streamed, with its features) the same
    way, read once through. A ``DatasetDict`` is refused with its splits. (s32-user: a
    ``load_from_disk`` dataset was refused as a source, and its directory as "no Parquet file".)
    """
    if not type(source).__module__.startswith("datasets"):
        return None
    if isinstance(source, dict):  # (a DatasetDict: a dict of splits)
        splits = list(source)
        raise TypeError(
            f"source is a datasets.DatasetDict of the splits {splits}; measure one split, "
            f"e.g. parquet_histogram(source[{(splits or ['train'])[0]!r}], ...)"
        )
    if not hasattr(source, "with_format") or not hasattr(source, "select_columns"):
        return None
    if source.features is None:  # (an IterableDataset whose columns datasets does not know)
        raise TypeError(
            f"source is a datasets.{type(source).__name__} without features (its columns are "
            "known only once read); give it its features (dataset.cast(features), or "
            "map(..., features=...)) or pass its Parquet files"
        )
    present = [c for c in columns if c in source.features]
    view = source.select_columns(present) if present else source
    schema = view.features.arrow_schema

    def batches() -> Iterator[Any]:
        for table in view.with_format("arrow").iter(batch_size=batch_size):
            yield from table.to_batches()

    total = len(source) if hasattr(source, "__len__") else None  # (an IterableDataset: none)
    return schema, batches(), total, f"the datasets.{type(source).__name__}", {}


def _check_listed_once(names: list[Any], files: list[str]) -> None:
    """Refuse a file that ``names`` (paths, directories, globs) reach twice: its rows would be
    counted twice (pyarrow's dataset reads a file once per listing), a histogram of more samples
    than the data set has. A file is its directory's real path (a symbolic link to a directory
    reaches the same files) and its own name, not followed: two names of one blob in a Hub
    snapshot are two files of the data set."""
    real: dict[str, str] = {}  # directory -> its real path (one lookup per directory)
    seen: dict[str, str] = {}  # file -> the name that first reached it
    for f in files:
        folder, name = os.path.split(os.path.abspath(f))
        if folder not in real:
            real[folder] = os.path.realpath(folder)
        key = os.path.normcase(os.path.join(real[folder], name))
        if key in seen:
            given = [os.fspath(n) for n in names]
            also = "" if seen[key] == f else f", also as {f}"
            raise ValueError(
                f"source reaches the file {seen[key]} twice{also} (source={given!r:.300}), so "
                "its rows would be counted twice; list every file once (a directory or a glob "
                "already reads the files under it)"
            )
        seen[key] = f


def _is_null(pa: Any, schema: Any, column: str) -> bool:
    """Whether ``schema`` has ``column`` with type null (a shard written from an empty list)."""
    return column in schema.names and bool(pa.types.is_null(schema.field(column).type))


def _typed(
    pa: Any, pads: Any, dataset: Any, files: list[str], what: str, untyped: list[str]
) -> Any:
    """``dataset`` with the measured columns ``untyped`` typed from all its files where the first
    one (whose schema a dataset takes) has them of type null: an empty shard written from an
    empty list, which made every later file's rows fail to cast ("Unsupported cast from
    list<...> to null"). Only those columns are unified: the scan reads no other, so files that
    disagree on another column's type still read (as they did before)."""
    try:
        fields = [
            pa.schema([s.field(c) for c in untyped if c in s.names])
            for s in (f.physical_schema for f in dataset.get_fragments())
        ]
        typed = pa.unify_schemas(fields, promote_options="permissive")  # (pyarrow >= 14)
        schema = dataset.schema
        for c in untyped:
            schema = schema.set(schema.get_field_index(c), typed.field(c))
        return pads.dataset(files, format="parquet", schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise ValueError(f"{what}: the files' schemas do not agree ({exc})") from None


def _held(pa: Any, pads: Any, dataset: Any, columns: list[str]) -> Any:
    """``dataset`` (of files listed here) with each of ``columns``, absent from its schema (the
    first file's), added as the first file that holds it has it: a first shard without the
    measured column made the whole scan say the column was "not found in 2 files" while the
    other held it (s28-eng), where a later file without it is named (NOTE [ A file without the
    column ] in :mod:`bucketloader.engines._common`). A column no file holds stays absent (its
    own error). Read only on that path: the footers up to the first file holding each."""
    try:
        fragments = list(dataset.get_fragments())
        schema = dataset.schema
        for c in columns:
            own = (f.physical_schema for f in fragments)
            holder = next((o for o in own if c in o.names), None)
            if holder is not None:
                schema = schema.append(holder.field(c))
    except (pa.ArrowInvalid, OSError):
        return dataset  # (an unreadable footer: the scan names it)
    if schema.equals(dataset.schema):
        return dataset
    return pads.FileSystemDataset(fragments, schema, dataset.format, dataset.filesystem)


def _every_field(pa: Any, dataset: Any) -> Any:
    """The fields of every file of ``dataset`` (the first file's, then each later file's new
    ones), for the error of a column no file holds: a dataset's schema is its first file's, so
    the error listed only that file's columns where a later file had more (s29-left). Its
    footers were read by :func:`_held` just before."""
    fields = {f.name: f for f in dataset.schema}
    try:
        for fragment in dataset.get_fragments():
            for f in fragment.physical_schema:
                fields.setdefault(f.name, f)
    except (pa.ArrowInvalid, OSError):
        pass  # (an unreadable footer: the columns read so far)
    return pa.schema(list(fields.values()))


def _widened(pa: Any, pads: Any, dataset: Any, columns: list[str]) -> Any:
    """``dataset`` (of files listed here) with each measured integer column typed to hold every
    file's values, where the files disagree: an ``int32`` column in the first file (whose type
    a dataset takes) and ``int64`` in a later one failed the cast of a value ``>= 2**31`` (s19,
    refused with a fix to write by hand). Widening an integer is exact, and only integers are
    widened (a float or string column keeps the first file's type, and its own error). The
    footers this reads are the ones :func:`_rows_per_file` reads next, cached on the same
    fragments: 2,000 files cost 31 ms either way, and 2 ms more to rebuild the dataset."""
    try:
        fragments = list(dataset.get_fragments())
        schema = dataset.schema
        for c in columns:
            own = (f.physical_schema for f in fragments)
            found = {o.field(c).type for o in own if c in o.names} | {schema.field(c).type}
            if len(found) < 2 or not all(pa.types.is_integer(t) for t in found):
                continue
            one = [pa.schema([pa.field(c, t)]) for t in found]
            wide = pa.unify_schemas(one, promote_options="permissive").field(c).type
            if pa.types.is_integer(wide) and wide != schema.field(c).type:
                at = schema.get_field_index(c)
                schema = schema.set(at, schema.field(c).with_type(wide))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError):
        return dataset  # (no common type, an unreadable footer: the scan says what it meets)
    if schema.equals(dataset.schema):
        return dataset
    return pads.FileSystemDataset(fragments, schema, dataset.format, dataset.filesystem)


def _kind(pa: Any, t: Any) -> str | None:
    """How a length is read from a column of Arrow type ``t``: ``None`` for a column of nulls
    only (an empty shard's), else its number, list, text, ... (a dictionary's by its values)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_null(t):
        return None
    for kind, test in (
        ("integer", pa.types.is_integer),
        ("list", is_list),
        ("text", is_text),
        ("binary", is_bytes),
        ("float or decimal", lambda t: pa.types.is_floating(t) or pa.types.is_decimal(t)),
    ):
        if test(t):
            return kind
    return str(t)


def _footer(pa: Any, fragment: Any) -> Any:
    """The schema of one file of a dataset made here; a file that is not Parquet (a truncated
    or corrupt ``.parquet``) is named with a fix, where pyarrow's own ArrowInvalid came first."""
    try:
        return fragment.physical_schema
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(
            f"{fragment.path}: not readable as Parquet ({exc}); leave this file out (list the "
            f"others) or write it again"
        ) from None


def _check_kinds(pa: Any, dataset: Any, columns: list[str]) -> None:
    """Refuse a file (of a dataset of files listed here) whose measured column is of another
    kind than the dataset's type, the first file's (NOTE [ A file of another kind ])."""
    # NOTE [ A file of another kind ]: a dataset casts every file's column to its schema's
    # type (the first file's), so a later file's column is cast, not measured, wherever the
    # cast succeeds (s27-eng): an int64 file then a string file of "12" counted the length 12
    # (the string alone is 2 characters), in the other order the int 7 was cast to "7" and
    # counted 1; a double 2.0 or a bool after an int64 file read as 2 and 1, where either file
    # first (or alone) is refused. The result hung on the files' names. Widths of one kind
    # (int32 / int64, string / large_string, list / large_list) read the same either way and
    # still read; the footers are the ones _widened just read.
    schema = dataset.schema
    for c in columns:
        want = _kind(pa, schema.field(c).type)
        if want not in ("integer", "list", "text", "binary"):
            continue  # (nulls only: typed by _typed; another type: the scan refuses it)
        for fragment in dataset.get_fragments():
            own = _footer(pa, fragment)
            if c not in own.names:
                continue
            have = _kind(pa, own.field(c).type)
            if have is not None and have != want:
                of = f" ({have})" if have != str(own.field(c).type) else ""
                raise ValueError(
                    f"{fragment.path}: column {c!r} is {own.field(c).type}{of} there but "
                    f"{schema.field(c).type} ({want}) in the dataset's schema (its first "
                    f"file's): the scan would cast this file's values to it, not measure them, "
                    f"and the lengths would depend on the files' order. Fix: write the column "
                    f"with one type in every file (the length column as an integer), or leave "
                    f"this file out"
                )


def _holder(rows: dict[str, int], columns: list[str]) -> str | None:
    """The first file (of ``rows``, a dataset's files in order) whose ``columns`` hold a length
    :func:`table_lengths` refuses, read again one file at a time: asked only on the error path,
    since a batch spans several small files (NOTE [ One file at a time ]) and said only "2
    files: column 'n' holds the negative length -3" of a directory of shards."""
    import pyarrow.parquet as pq

    for path in rows:
        try:
            table_lengths(pq.read_table(path, columns=columns), columns)
        except ValueError:
            return path
        except Exception:  # (a file without the column: --nulls skip; not this error)
            continue
    return None


def _null_holder(rows: dict[str, int], columns: list[str], start: int, count: int) -> str | None:
    """The first file (of ``rows``, a dataset's files in order, read in that order) whose
    ``columns`` hold a null row among the files spanning rows ``start`` to ``start + count`` of
    the scan: the batch that found the first null. One file is named at once; small files
    read together in that batch are read again, one at a time (error path only: at most a
    batch's rows). (s34-user2: a directory of shards said "64 files (column 'n') has 1 null
    row(s)", naming none.)"""
    import pyarrow.parquet as pq

    spanned, end = [], 0
    for path, n in rows.items():
        if end + n > start and end < start + count:
            spanned.append(path)
        end += n
    if len(spanned) == 1:
        return spanned[0]
    for path in spanned:
        try:
            if table_lengths(pq.read_table(path, columns=columns), columns)[1]:
                return path
        except Exception:  # (a file without the column reads as nulls: named elsewhere)
            continue
    return None


def _file_groups(dataset: Any, rows: dict[str, int], limit: int) -> Iterator[list[Any]]:
    """The fragments of ``dataset`` in order, in runs of at most ``limit`` rows (a larger file
    alone): what one scan may read ahead (NOTE [ One file at a time ])."""
    group: list[Any] = []
    held = 0
    for f in dataset.get_fragments():
        n = rows.get(f.path, 0)
        if group and held + n > limit:
            yield group
            group, held = [], 0
        group.append(f)
        held += n
    if group:
        yield group


def _rows_per_file(pa: Any, dataset: Any, what: str, *, footers: bool) -> dict[str, int]:
    """Rows of each file of ``dataset`` (which tell the empty files): with ``footers`` (a
    dataset of whole Parquet files, made here) from the files' footers, faster than the
    dataset's ``count_rows()`` (42 against 97 ms for 1,000 small files); else by counting each
    fragment (a user's dataset may hold a file's row groups in several fragments)."""
    try:
        counts: dict[str, int] = {}
        for f in dataset.get_fragments():
            n = f.metadata.num_rows if footers else _fragment_rows(f)
            counts[f.path] = counts.get(f.path, 0) + n
        return counts
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{what}: a file could not be read as Parquet ({exc})") from None


def _fragment_rows(fragment: Any) -> int:
    """Rows of one fragment: a Parquet fragment's own row groups, else ``count_rows()``.
    pyarrow's ``count_rows()`` gives a fragment of some of a file's row groups (from
    ``split_by_row_group``) the whole file's rows (pyarrow 26: 900 rows for a 300-row file in
    three such fragments); its row groups' own counts come from the footer it holds."""
    groups = getattr(fragment, "row_groups", None)
    if groups is None:  # (not Parquet: an Arrow IPC / Feather fragment counts its own rows)
        return int(fragment.count_rows())
    return sum(int(g.num_rows) for g in groups)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _once(batches: Iterator[Any], what: str) -> Iterator[Any]:
    """Batches of a reader; none at all reads as empty or already consumed (one message)."""
    seen = False
    for b in batches:
        seen = True
        yield b
    if not seen:
        raise ValueError(
            f"{what} yielded no record batch: it is empty, or was already consumed (a reader "
            "can be read once); pass the files or a pyarrow.dataset instead"
        )


def _checked_batches(
    pa: Any,
    batches: Iterator[Any],
    what: str,
    dataset: Any,
    columns: list[str],
    reading: list[Any] | None = None,
) -> Iterator[Any]:
    """Re-raise a corrupt file's Arrow error as one ValueError naming the file (the one of
    ``reading``, the fragments being read, that fails alone) or else the source, and a failed
    cast to the dataset's type as what it is (:func:`_failed_cast`)."""
    try:
        yield from batches
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        cast = None if isinstance(exc, OSError) else _failed_cast(pa, dataset, columns, exc)
        if cast:
            raise ValueError(f"{what}: {cast}") from None
        bad = _damaged(reading or [], columns)  # (s28: "2 files: a file could not be read
        raise ValueError(  # as Parquet (Corrupt snappy compressed data.)", no file named)
            f"{bad or what}: {'a file ' if bad is None else ''}could not be read as Parquet "
            f"({exc}); leave {'it' if bad is None else 'this file'} out or write it again"
        ) from None


def _damaged(fragments: list[Any], columns: list[str]) -> str | None:
    """The path of the first of ``fragments`` whose ``columns`` fail to read alone (a file
    whose footer reads but whose pages are damaged), or ``None``. Error path only: the files
    of one scan (one file, or small files up to a batch's rows)."""
    for f in fragments:
        try:
            f.to_table(columns=columns)
        except Exception:  # (pyarrow's ArrowInvalid / OSError, whichever the damage gives)
            return str(f.path)
    return None


def _failed_cast(pa: Any, dataset: Any, columns: list[str], exc: Exception) -> str | None:
    """What failed when a scan of ``dataset`` raised ``exc``, if it was a cast: a file holds a
    measured column with another type than the dataset's (whose schema came from its first
    file, or its maker), and its values do not cast (``int64`` ``2**40`` in an ``int32``
    column, ``7.5`` or ``"x"`` in an ``int64`` one, a list where a number is). ``None`` for
    anything else (the file is then unreadable as it is). Asked only on the error path: the
    footers of the dataset's files, then the column of each file whose type differs, cast as
    the scan casts it, until one fails: that file is named (a file of another type whose values
    cast is not the one that failed)."""
    import pyarrow.compute as pc

    try:
        schema = dataset.schema
        for fragment in dataset.get_fragments():
            own = fragment.physical_schema
            for c in columns:
                if c not in own.names or own.field(c).type == schema.field(c).type:
                    continue
                want, have = schema.field(c).type, own.field(c).type
                col = fragment.to_table(columns=[c], schema=own).column(c)
                try:
                    col.cast(want)  # (safe, as the scan casts)
                    continue  # this file's values cast: not the one that failed
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as failed:
                    why = failed
                if pa.types.is_integer(want) and pa.types.is_integer(have):
                    lo, hi = (x.as_py() for x in pc.min_max(col).values())
                    bits = want.bit_width
                    least = -(2 ** (bits - 1)) if pa.types.is_signed_integer(want) else 0
                    value = lo if lo is not None and lo < least else hi
                    return (
                        f"column {c!r} is {want} in the dataset's schema (its first file's, or "
                        f"the one it was given) but {have} in {fragment.path}, which holds the "
                        f"value {value}, which does not fit {want} (Arrow: {exc}): the file "
                        f"reads, the cast to the dataset's type failed. Fix: write the column "
                        f"as {have} in every file, or scan the files as {have}: pass "
                        f"pyarrow.dataset.dataset(files, format='parquet', "
                        f"schema=pa.schema([({c!r}, pa.{have}())]))"
                    )
                return (
                    f"column {c!r} is {want} in the dataset's schema (its first file's, or the "
                    f"one it was given) but {have} in {fragment.path}, whose values do not cast "
                    f"to {want} (Arrow: {why}): the file reads, the cast to the dataset's type "
                    f"failed. Fix: write the column with the same type in every file (e.g. "
                    f"{want} in all of them)"
                )
    except Exception:  # a diagnosis on the error path: never hide the scan's error
        return None
    return None


def _progress_bar(progress: bool | None, total: int | None, what: str) -> Any:
    if progress is False:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress:
            raise ImportError(
                "progress=True needs tqdm; install it with pip install tqdm"
            ) from None
        return None
    if progress is None and not sys.stderr.isatty():
        return None
    return tqdm(total=total, unit=" rows", unit_scale=True, desc=f"lengths of {what}")
