"""ArrowRows: the rows of Parquet files or an Arrow table as a stream source that can seek.

A stream reads its source sample by sample; Parquet files and Arrow tables are read fastest in
record batches, and a resume wants to start at a row offset without reading the rows before it
(NOTE [ Seeking a source ] in :mod:`bucketloader.stream.source`). :class:`ArrowRows` gives both:
iterating it reads record batches (one row group at a time for Parquet) and yields one ``dict``
per row; ``len`` and indexing make it a sequence, so a stream over it resumes by seeking to the
recorded row (the Parquet footer says which row group holds a row: nothing before it is read).

NOTE [ A stream state names the files it read ]
A directory is read recursively (NOTE [ Which files a directory of Parquet shards holds ] in
:mod:`bucketloader._arrow`; before, only its top-level ``*.parquet``), so the same
``ArrowRows("data/")`` may read other files than when a state was saved: a ``val/`` subfolder,
a shard added since. A state's positions are rows of the files it was saved over; over other
files they name other samples. So :meth:`ArrowRows.fingerprint` records the files (their
paths relative to the files' common folder, and their row counts, as a digest, plus the counts
for messages), a stream puts it in its state's configuration, and a resume over files whose
digest differs is refused, naming both counts (:func:`bucketloader.stream.resume.check_config`).
A state saved before the files were recorded is taken only where the directory has no Parquet
file in a subfolder (the old rule read the same files then); with one, it is refused, and the
error says how to read the top level only. The paths are relative, so the data may move.
Reading files from several places (the top level and a subfolder that is not a partition,
``year=2024/``, or several such subfolders) warns once, naming the subfolders, their files and
rows: a ``val/`` beside the training shards is read too. Files all in one subfolder (a Hub
snapshot's ``data/``) are read quietly.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import operator
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from bucketloader._arrow import NAMED_SKIPS, is_text_like, numbers_throughout, parquet_files
from bucketloader._validation import MissingKeyError, checks_options

__all__ = ["ArrowRows"]


@checks_options
class ArrowRows(Sequence):  # type: ignore[type-arg]
    """Rows of Parquet files (or a ``pyarrow.Table``) as dicts, read in record batches.

    Args:
        data: a ``pyarrow.Table``, a Parquet file, a directory of them (its Parquet
            files, recursively, sorted by path: NOTE [ Which files a directory of Parquet shards
            holds ] in :mod:`bucketloader._arrow`), a glob, or a list of Parquet files (read in
            that order).
        columns: the columns to read (default: all).
        batch_rows: rows per record batch read.

    Example:
        >>> import pyarrow as pa
        >>> rows = ArrowRows(pa.table({"ids": [[1], [1, 2], [1, 2, 3]]}))
        >>> len(rows), rows[1], [len(r["ids"]) for r in rows.iter_from(1)]
        (3, {'ids': [1, 2]}, [2, 3])
    """

    def __init__(
        self, data: Any, *, columns: Sequence[str] | None = None, batch_rows: int = 1024
    ) -> None:
        import pyarrow as pa

        from bucketloader._validation import check_int

        if isinstance(columns, str):  # (list("ids") would be its letters)
            raise TypeError(
                f"columns must be a list of column names, got columns={columns!r}; pass "
                f"columns=[{columns!r}]"
            )
        self.columns = None if columns is None else list(columns)
        self.batch_rows = check_int("batch_rows", batch_rows, minimum=1)
        self.table = data if isinstance(data, pa.Table) else None
        self.files: list[str] = [] if self.table is not None else _parquet_files(data)
        # (file, row group) of every row group, and the first row of each
        self.groups: list[tuple[int, int]] = []
        self.starts: list[int] = []
        self._fingerprint: dict[str, Any] | None = None
        if self.table is not None:
            if self.columns is not None:
                _check_columns(self.columns, self.table.column_names, "the table")
                self.table = self.table.select(self.columns)
            self.size = self.table.num_rows
        else:
            import pyarrow.parquet as pq

            at = 0
            rows = []
            for f, path in enumerate(self.files):
                first = at
                file = pq.ParquetFile(path)
                if self.columns is not None:  # (else a row group read fewer rows than it has)
                    _check_columns(self.columns, file.schema_arrow.names, path, nested=True)
                meta = file.metadata
                for g in range(meta.num_row_groups):
                    self.groups.append((f, g))
                    self.starts.append(at)
                    at += meta.row_group(g).num_rows
                rows.append(at - first)
            self.size = at
            root = os.fspath(data) if isinstance(data, (str, os.PathLike)) else None
            nested = _nested(root, self.files, rows) if root and os.path.isdir(root) else {}
            self._fingerprint = _fingerprint(self.files, rows, sum(n for n, _ in nested.values()))
            _warn_nested(root, nested, self.files, at)  # (NOTE [ A stream state names the files
            # it read ])

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        try:
            i = operator.index(index)  # (ints, numpy ints and bools, as a list takes them)
        except TypeError:
            raise TypeError(
                f"ArrowRows indices must be integers or slices, got {type(index).__name__} "
                f"{index!r:.60}"
            ) from None
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(f"row {index} is out of range for {self.size} rows")
        return self.take_rows([i])[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_from(0)

    def __reduce__(self) -> Any:  # pickles its arguments (DataLoader workers)
        data = self.table if self.table is not None else self.files
        return _rebuild, (data, self.columns, self.batch_rows, self._fingerprint)

    def fingerprint(self) -> dict[str, Any] | None:
        """What a stream's state records of the Parquet files read (``None`` for a table):
        ``{"files": n, "rows": total, "digest": ..., "nested": files in subfolders}``; the
        digest covers each file's path relative to the files' common folder and its rows
        (NOTE [ A stream state names the files it read ]).

        Example:
            >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
            >>> d = tempfile.mkdtemp()
            >>> pq.write_table(pa.table({"ids": [[1], [2, 3]]}), f"{d}/a.parquet")
            >>> record = ArrowRows(d).fingerprint()
            >>> record["files"], record["rows"], record["nested"], len(record["digest"])
            (1, 2, 0, 16)
        """
        return None if self._fingerprint is None else dict(self._fingerprint)

    def numbers_as_text(self, column: str) -> list[str] | None:
        """A few values of ``column`` where it is a string column whose every non-null value is
        a number written as text (NOTE [ Numbers written as text ] in
        :mod:`bucketloader._arrow`), else ``None`` (a column of another type, or not one of
        these columns). Its type is known from the schema before any row is read; a text column
        is read alone, a record batch at a time, until one settles it (for real text, the
        first); a column of numbers as text is read whole, as ``parquet_histogram`` reads it.

        Example:
            >>> import pyarrow as pa
            >>> rows = ArrowRows(pa.table({"n": ["3", "120"], "text": ["a cat", "12"]}))
            >>> rows.numbers_as_text("n"), rows.numbers_as_text("text")
            (['3', '120'], None)
        """
        if self.columns is not None and column not in self.columns:
            return None  # (not in the rows: the stream says so, naming the columns read)
        if self.table is not None:
            if column not in self.table.column_names:
                return None
            if not is_text_like(self.table.schema.field(column).type):
                return None
            return numbers_throughout(self.table.column(column).chunks)

        def batches() -> Iterator[Any]:
            import pyarrow.parquet as pq

            for path in self.files:  # (a file whose column is not text is passed over: its
                file = pq.ParquetFile(path)  # values are measured as they are)
                names = file.schema_arrow.names
                if column in names and is_text_like(file.schema_arrow.field(column).type):
                    for batch in file.iter_batches(batch_size=65_536, columns=[column]):
                        yield batch.column(0)

        return numbers_throughout(batches())

    def iter_from(self, first: int, step: int = 1) -> Iterator[dict[str, Any]]:
        """Rows ``first, first + step, ...``, reading nothing before ``first``."""
        at = first
        for start, batch in self._batches_from(first):
            rows = batch.to_pylist()
            while at - start < len(rows):
                yield rows[at - start]
                at += step

    def take_rows(self, rows: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at ``rows``, in that order: each row group read once for all its rows."""
        if self.table is not None:
            return self.table.take(list(rows)).to_pylist()  # type: ignore[no-any-return]
        by_group: dict[int, list[int]] = {}
        for at, i in enumerate(rows):
            by_group.setdefault(bisect.bisect_right(self.starts, i) - 1, []).append(at)
        out: list[Any] = [None] * len(rows)
        for g, ats in by_group.items():
            local = [rows[a] - self.starts[g] for a in ats]
            for a, row in zip(ats, self._read_group(g).take(local).to_pylist(), strict=True):
                out[a] = row
        return out

    def _read_group(self, g: int) -> Any:
        import pyarrow.parquet as pq

        f, group = self.groups[g]
        return pq.ParquetFile(self.files[f]).read_row_group(group, columns=self.columns)

    def _batches_from(self, first: int) -> Iterator[tuple[int, Any]]:
        """``(first row of the batch, record batch)`` from the batch holding row ``first``."""
        if self.table is not None:
            at = first
            for batch in self.table.slice(first).to_batches(max_chunksize=self.batch_rows):
                yield at, batch
                at += batch.num_rows
            return
        import pyarrow.parquet as pq

        g0 = max(bisect.bisect_right(self.starts, first) - 1, 0)
        for g in range(g0, len(self.groups)):
            f, group = self.groups[g]
            at = self.starts[g]
            pf = pq.ParquetFile(self.files[f])
            for batch in pf.iter_batches(
                batch_size=self.batch_rows, row_groups=[group], columns=self.columns
            ):
                if at + batch.num_rows > first:
                    yield at, batch
                at += batch.num_rows


def _rebuild(data: Any, columns: Any, batch_rows: int, fingerprint: Any = None) -> ArrowRows:
    rows = ArrowRows(data, columns=columns, batch_rows=batch_rows)
    if fingerprint is not None:  # (the record of the directory it was built from)
        rows._fingerprint = fingerprint
    return rows


def _fingerprint(files: list[str], rows: list[int], nested: int) -> dict[str, Any]:
    """The record of ``files`` (NOTE [ A stream state names the files it read ])."""
    base = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
    names = [os.path.relpath(os.path.abspath(f), base).replace(os.sep, "/") for f in files]
    text = json.dumps([[n, r] for n, r in zip(names, rows, strict=True)], separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return {"files": len(files), "rows": sum(rows), "digest": digest, "nested": nested}


def _nested(root: str, files: list[str], rows: list[int]) -> dict[str, tuple[int, int]]:
    """The first-level subfolders of ``root`` that hold files read: ``{name: (files, rows)}``."""
    out: dict[str, tuple[int, int]] = {}
    for f, n in zip(files, rows, strict=True):
        parts = os.path.relpath(f, root).split(os.sep)
        if len(parts) > 1:
            k, r = out.get(parts[0], (0, 0))
            out[parts[0]] = (k + 1, r + n)
    return out


def _warn_nested(
    root: Any, nested: dict[str, tuple[int, int]], files: list[str], rows: int
) -> None:
    """One warning when a directory's files come from several places, the top level (with its
    partitions, ``key=value``) and subfolders, or several subfolders: a ``val/`` beside the
    training shards. It names the subfolders, their files and rows, and how to read one place."""
    named = {d: v for d, v in nested.items() if "=" not in d}
    top_files = len(files) - sum(k for k, _ in named.values())
    if not named or (len(named) == 1 and not top_files):  # (all in one place: data/, a snapshot)
        return
    shown = [
        f"{d}/ ({k:,} file{'s' if k != 1 else ''}, {r:,} rows)"
        for d, (k, r) in list(named.items())[:NAMED_SKIPS]
    ]
    more = f", and {len(named) - NAMED_SKIPS:,} more" if len(named) > NAMED_SKIPS else ""
    if top_files:
        pattern = os.path.join(root, "*.parquet")
        fix = f"to read its top level only, pass ArrowRows(sorted(glob.glob({pattern!r})))"
    else:
        folder = os.path.join(root, next(iter(named)))
        fix = f"to read one of them, pass its folder, e.g. ArrowRows({folder!r})"
    warnings.warn(
        f"ArrowRows({root!r}) reads {len(files):,} Parquet files ({rows:,} rows), "
        f"{len(files) - top_files:,} of them in subfolders: {', '.join(shown)}{more}; a directory "
        f"is read recursively: {fix}",
        UserWarning,
        stacklevel=3,
    )


def _parquet_files(data: Any) -> list[str]:
    if isinstance(data, (str, os.PathLike)):  # a file, a directory or a glob: the one rule
        return parquet_files(data)  # (NOTE [ Which files a directory of Parquet shards holds ])
    if isinstance(data, Sequence) and data and all(isinstance(f, (str, os.PathLike)) for f in data):
        files = [os.fspath(f) for f in data]
    else:
        raise TypeError(
            "data must be a pyarrow.Table, a Parquet file, a directory of Parquet files or a "
            f"list of Parquet files, got {type(data).__name__} {data!r:.60}"
        )
    missing = [f for f in files if not os.path.isfile(f)]
    if not files or missing:
        raise ValueError(
            f"data names no readable Parquet file: {missing[0] if missing else data!r}; pass "
            "existing .parquet files or a directory holding them"
        )
    return files


def _check_columns(columns: list[str], names: list[str], where: str, nested: bool = False) -> None:
    """``columns`` (ArrowRows') all in ``names``, the columns of ``where`` (with ``nested``,
    a Parquet file's: ``"struct.field"`` paths read one field)."""
    missing = [c for c in columns if c not in names and not (nested and c.split(".")[0] in names)]
    if missing:
        raise MissingKeyError(
            f"columns {missing} not found in {where}; it has columns {names}: pass some of them"
        )
