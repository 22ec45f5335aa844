"""Machinery every engine shares: the scan result, the nulls policy, Arrow length measures.

NOTE [ Nulls ]
A null row has no length, and dropping it silently would make the histogram describe fewer
samples than the dataset holds (a sampler built on it would index past the end). Every engine
counts null rows (a null list, string or integer; with several columns, a row with any of them
null) while it scans. ``nulls="raise"`` (the default) refuses them with the count, after the
scan; ``nulls="skip"`` keeps them out of the histogram and reports them in
:attr:`ScanResult.num_nulls`, so ``num_rows == histogram.num_samples + num_nulls`` always.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader._arrow import (
    WITH_LENGTH_FN,
    is_bytes,
    is_list,
    is_text,
    numbers_as_text,
    numbers_as_text_error,
    text_lengths,
)
from bucketloader._validation import MAX_LENGTH, check_choice
from bucketloader.histogram import JointHistogram, LengthHistogram

NULLS = ("raise", "skip")

#: Merge buffered partial histograms once this many are waiting (bounded memory on long scans).
_MERGE_EVERY = 64


@dataclass(frozen=True)
class ScanResult:
    """What an engine's histogram scan found.

    Attributes:
        histogram: the exact histogram of the non-null rows (a ``LengthHistogram`` for one
            column, a ``JointHistogram`` for several).
        num_rows: rows scanned, nulls included.
        num_nulls: rows without a length (NOTE [ Nulls ]); 0 unless ``nulls="skip"``.
        engine: ``"arrow"``, ``"ray"`` or ``"spark"``.
        empty_files: the files of the scan that hold no row (read from their footers; files
            the engine lists, so far :func:`~bucketloader.engines.parquet_histogram`'s): they
            add nothing, and a writer's empty shards should not go unnoticed.

    Example:
        >>> r = ScanResult(LengthHistogram.from_lengths([3, 5]), num_rows=3, num_nulls=1,
        ...                engine="arrow")
        >>> r.histogram.num_samples + r.num_nulls == r.num_rows
        True
    """

    histogram: LengthHistogram | JointHistogram
    num_rows: int
    num_nulls: int
    engine: str
    empty_files: tuple[str, ...] = field(default=(), repr=False)


def require(module: str, extra: str) -> Any:
    """Import an engine's package or raise an ``ImportError`` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this needs {module!r}, which is not installed ({exc}); install it with "
            f"pip install 'bucketloader[{extra}]'"
        ) from None


def check_columns(column: Any, *, allow_none: bool = False) -> list[str] | None:
    """One column name or a non-empty sequence of names, as a list (``None`` if allowed)."""
    if column is None and allow_none:
        return None
    if isinstance(column, str):
        return [column]
    if (
        isinstance(column, Sequence)
        and column
        and all(isinstance(c, str) for c in column)
        and len(set(column)) == len(column)
    ):
        return list(column)
    raise TypeError(
        "column must be a column name or a list of distinct names, got "
        f"column={column!r}; pass e.g. column='input_ids' or column=['input_ids', 'labels']"
    )


def check_nulls(nulls: Any) -> str:
    return check_choice("nulls", nulls, NULLS)


class Accumulator:
    """Per-shard partial histograms, merged exactly (buffered, merged every few dozen)."""

    def __init__(self, columns: list[str] | None, nulls: str, engine: str) -> None:
        self.columns, self.nulls, self.engine = columns, nulls, engine
        self.joint = columns is not None and len(columns) > 1
        self._parts: list[Any] = []
        self.num_rows = 0
        self.num_nulls = 0

    def add(self, lengths: np.ndarray, num_nulls: int = 0) -> None:
        """Add one shard's non-null lengths (``(n,)`` or ``(n, D)``) and its null count."""
        self.num_rows += int(lengths.shape[0]) + int(num_nulls)
        self.num_nulls += int(num_nulls)
        if lengths.shape[0]:
            cls = JointHistogram if self.joint else LengthHistogram
            self.add_histogram(cls.from_lengths(lengths), 0)

    def add_nulls(self, num_nulls: int) -> None:
        """Count ``num_nulls`` null rows (NOTE [ Nulls ])."""
        self.num_rows += int(num_nulls)
        self.num_nulls += int(num_nulls)

    def add_histogram(self, hist: Any, num_nulls: int, *, count_rows: bool = False) -> None:
        """Add one shard's histogram (its rows counted too if ``count_rows``) and null count."""
        if self._parts and _kind(hist) != _kind(self._parts[0]):
            # (s23-rev2: a length_fn giving 1-D lengths for one Ray batch and (n, 2) for
            # another ended in "LengthHistogram.merge takes LengthHistogram objects, got
            # JointHistogram ...; load JSON with LengthHistogram.from_json")
            a, b = _kind(self._parts[0])[1], _kind(hist)[1]
            raise ValueError(
                f"the {self.engine} scan's lengths changed shape between shards: {a} per row in "
                f"one, {b} in another (1: a 1-D array of one length per row; D: an (n, D) "
                "array); return the same shape for every batch, e.g. length_fn=lambda batch: "
                "np.stack([src, tgt], axis=1) for every batch of a joint histogram"
            )
        if count_rows:
            self.num_rows += hist.num_samples
            self.add_nulls(num_nulls)
        self._parts.append(hist)
        if len(self._parts) >= _MERGE_EVERY:
            self._parts = [type(hist).merge(self._parts)]

    def add_counts(self, keys: np.ndarray, counts: np.ndarray, num_nulls: int) -> None:
        """Add one shard's distinct non-null lengths ``keys`` (``(k, D)``, int64) with their
        ``counts``, its rows counted, and its null count (a shard of nulls only adds those)."""
        if counts.size:
            hist: Any = (
                LengthHistogram.from_counts(keys[:, 0], counts)
                if keys.shape[1] == 1 and not self.joint
                else JointHistogram.from_counts(keys, counts)
            )
            self.add_histogram(hist, num_nulls, count_rows=True)
        else:
            self.add_nulls(num_nulls)

    def result(self, what: str) -> ScanResult:
        if self.num_nulls and self.nulls == "raise":
            raise ValueError(
                f"{what} has {self.num_nulls:,} null row(s) out of {self.num_rows:,}, which have "
                "no length; fill or filter them first, or pass nulls='skip' to leave them out "
                "(they are then counted in ScanResult.num_nulls)"
            )
        if not self._parts:
            if self.num_rows:
                raise ValueError(
                    f"{what}: every one of its {self.num_rows:,} rows is null; there is no length "
                    "to bucket"
                )
            raise ValueError(f"{what} has no rows; an empty dataset has no length histogram")
        hist = self._parts[0] if len(self._parts) == 1 else type(self._parts[0]).merge(self._parts)
        return ScanResult(hist, self.num_rows, self.num_nulls, self.engine)


def missing_column(
    footers: Iterable[tuple[str, Sequence[str]]],
    columns: list[str],
    others: Callable[[], Sequence[str]] | None = None,
) -> str | None:
    """The error naming the first file that lacks one of ``columns`` another file holds, or
    ``None``.

    NOTE [ A file without the column ]
    Parquet readers take a dataset's schema from one file (or unify the files'), so the rows of
    another file that lacks the measured column read as null rows. Under ``nulls="raise"`` every
    engine names that file instead of counting anonymous nulls; ``nulls="skip"`` keeps reading
    its rows as nulls and leaves them out (a schema that grew a column is a working case). The
    local scan checks the footers before it reads (it has the files); Ray and Spark check only
    when a scan found nulls (the files are theirs to list; no cost when there are none), and
    name a file only when another file of the dataset holds the column: a column made after the
    read (Spark's ``withColumn`` or ``withColumnRenamed``, Ray's ``rename_columns`` or
    ``map_batches``) or a partition key is in no file, and its nulls are genuine (the count's
    error stands). Where the file without the column is the one the schema comes from (the
    first, by path for Spark), the column was missing from the schema and every engine but
    Ray said it was not found at all (s28-eng): the local scan adds it from the first file
    that holds it (``_held`` in :mod:`bucketloader.engines.arrow`), and the command line
    gives Spark its type read from such a file; the file without it is then named as above.

    Args:
        footers: ``(path, the file's column names)`` in order, read lazily: the walk stops as
            soon as it has seen a file without a column and one with it.
        columns: the measured columns (in the dataset's schema).
        others: ``others() -> the column names of the dataset's other files`` (their union),
            asked only when a file lacks a column no file of ``footers`` holds.

    Example:
        >>> names = {"a.parquet": ["ids"], "b.parquet": ["other"]}
        >>> print(missing_column(names.items(), ["ids"]))
        b.parquet: no column 'ids' (the file has columns ['other']); every file must hold the \
measured column: leave this file out or add the column to it (nulls='skip' reads its rows as nulls \
and leaves them out)
        >>> print(missing_column([("b.parquet", ["other"])], ["ids"]))  # made after the read
        None
    """
    lacking: dict[str, tuple[int, str, list[str]]] = {}  # column -> the first file without it
    held: set[str] = set()

    def named() -> str | None:
        ready = [c for c in columns if c in lacking and c in held]
        if not ready:
            return None
        missing = min(ready, key=lambda c: lacking[c][0])  # the first file; ties: column order
        _, path, names = lacking[missing]
        return (
            f"{path}: no column {missing!r} (the file has columns {names}); every file must "
            "hold the measured column: leave this file out or add the column to it "
            "(nulls='skip' reads its rows as nulls and leaves them out)"
        )

    for i, (path, file_names) in enumerate(footers):
        names = list(file_names)
        for c in columns:
            if c in names:
                held.add(c)
            elif c not in lacking:
                lacking[c] = (i, path, names)
        found = named()
        if found is not None:
            return found
    if lacking and others is not None:
        held.update(c for c in others() if c in lacking)
        return named()
    return None


def describe_columns(columns: list[str] | None) -> str:
    if columns is None:
        return "length_fn"
    return f"column {columns[0]!r}" if len(columns) == 1 else f"columns {columns}"


# --- Arrow ------------------------------------------------------------------------------------


def check_arrow_type(t: Any, name: str, *, other: str = WITH_LENGTH_FN) -> None:
    """Refuse, before any scan, an Arrow type that has no length (floats, nested lists, ...).

    ``other`` is the last fix the error names (:data:`WITHOUT_LENGTH_FN` where the caller takes
    no ``length_fn``). A dictionary-encoded column (a pandas ``category`` written to Parquet)
    is measured as its values' type."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):  # (arrow_lengths decodes it)
        return check_arrow_type(t.value_type, name, other=other)
    if pa.types.is_null(t):
        return  # only nulls (a block whose rows are all null): counted as nulls
    if isinstance(t, pa.ExtensionType):
        ext = t.extension_name
        if "tensor" in ext and getattr(t, "ndim", len(getattr(t, "shape", ()) or ())) >= 1:
            return  # a Ray tensor column (fixed or variable shape): its first dimension
        raise TypeError(f"column {name!r} has the extension type {t} ({ext}); {other}")
    if is_list(t):
        if is_list(t.value_type) or isinstance(t.value_type, pa.ExtensionType):
            raise TypeError(
                f"column {name!r} is a nested list ({t}): which level is the length is "
                f"ambiguous; flatten it, store its length in an int column, or {other}"
            )
        return
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        raise TypeError(
            f"column {name!r} holds {t} numbers; lengths are whole numbers: cast the column to "
            f"int64 (after rounding up) or {other}"
        )
    if pa.types.is_integer(t) or is_text(t) or is_bytes(t):
        return
    raise TypeError(
        f"column {name!r} has type {t}; lengths come from a list column (token ids, audio "
        "arrays; the list length), an integer length column or a string column (characters); "
        f"otherwise {other}"
    )


def arrow_lengths(arr: Any, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Lengths of one Arrow array (or chunked array), computed from offsets, and its validity.

    Returns ``(lengths, valid)``: ``int64`` lengths of every row (0 where null) and a boolean
    validity mask, or ``None`` when no row is null. Integer columns are checked to lie in
    ``[0, 2**62)``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    check_arrow_type(arr.type, name)
    if pa.types.is_dictionary(arr.type):  # (one batch's values: memory stays bounded)
        arr = arr.dictionary_decode()
    t = arr.type
    if pa.types.is_null(t):
        return np.zeros(len(arr), dtype=np.int64), np.zeros(len(arr), dtype=bool)
    if isinstance(t, pa.ExtensionType):
        storage = arr.storage
        if pa.types.is_struct(storage.type):  # variable-shaped tensor: struct<data, shape>
            measured = pc.list_element(storage.field("shape"), 0)
            if storage.null_count:
                measured = pc.if_else(storage.is_valid(), measured, pa.scalar(None, pa.int64()))
        else:  # fixed-shape tensor: every row has the same first dimension
            first = int(t.shape[0])
            measured = pc.if_else(storage.is_valid(), pa.scalar(first), pa.scalar(None, pa.int64()))
    elif is_list(t):
        measured = pc.list_value_length(arr)
    elif pa.types.is_integer(t):
        measured = arr
    else:  # (check_arrow_type let only text and binary through)
        measured = text_lengths(arr)
    valid = None
    if measured.null_count:
        valid = measured.is_valid().to_numpy(zero_copy_only=False)
        measured = measured.fill_null(0)
    out = measured.to_numpy(zero_copy_only=False)
    if out.dtype.kind == "u":
        if out.size and int(out.max()) > MAX_LENGTH:
            _too_big(name, int(out.max()))
        return out.astype(np.int64), valid
    out = out.astype(np.int64, copy=False)
    if out.size:
        lo, hi = int(out.min()), int(out.max())
        if lo < 0:
            raise ValueError(
                f"column {name!r} holds the negative length {lo}; lengths count elements, so "
                "fix or filter those rows"
            )
        if hi > MAX_LENGTH:
            _too_big(name, hi)
    return out, valid


def _too_big(name: str, value: int) -> None:
    raise ValueError(
        f"column {name!r} holds the length {value}, not below 2**62 (the longest bucketloader "
        "supports, so padded sizes stay exact in int64); fix or filter those rows"
    )


def table_lengths(table: Any, columns: list[str]) -> tuple[np.ndarray, int]:
    """Non-null lengths of ``columns`` in an Arrow table or record batch, and the null count.

    One column gives ``(n,)`` lengths; several give ``(n, D)`` (a row is null if any is).
    """
    cols, valid = [], None
    for c in columns:
        lengths, v = arrow_lengths(table.column(c), c)
        cols.append(lengths)
        if v is not None:
            valid = v if valid is None else valid & v
    out = cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
    if valid is None:
        return out, 0
    return out[valid], int(valid.size - np.count_nonzero(valid))


def _kind(hist: Any) -> tuple[type, int]:
    """A shard histogram's class and lengths per row (1 for a ``LengthHistogram``, else D)."""
    return type(hist), 1 if isinstance(hist, LengthHistogram) else int(hist.num_inputs)


class NumbersAsText:
    """The columns of a scan whose every non-null value so far is a number written as text,
    each with a few of its values (NOTE [ Numbers written as text ])."""

    def __init__(self, columns: list[str]) -> None:
        self.found: dict[str, list[str]] = {c: [] for c in columns}

    def add(self, table: Any) -> None:
        """Look at one batch (an Arrow table or record batch holding the columns)."""
        for c in list(self.found):
            seen = numbers_as_text(table.column(c))
            if seen is None:
                del self.found[c]
            elif not self.found[c]:
                self.found[c] = seen

    def check(self, fix: Callable[[str], str], chars: Callable[[str], str]) -> None:
        """Raise for the first column found to hold numbers alone; ``fix(column)`` says how to
        read it as integers with this engine, ``chars(column)`` how to count its characters."""
        for c, examples in self.found.items():
            if examples:
                raise ValueError(numbers_as_text_error(c, examples, fix(c), chars(c)))
