"""Exact length histograms of a Ray Data ``Dataset``, and bucket ids added to its rows.

The histogram is computed where the blocks live: ``map_batches`` turns every block into its own
small histogram (distinct lengths and counts, plus its null count), and the driver merges those
exactly (NOTE [ Exact merge ] in :mod:`bucketloader.histogram`). No row is shuffled: a group-by
would move every row's length through an all-to-all exchange, while here each block ships at
most one row per distinct length. Needs ``pip install 'bucketloader[ray]'``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import ArrayLike

from bucketloader._arrow import is_text_like, nested_field, numbers_throughout
from bucketloader._samples import did_you_mean
from bucketloader._types import LazyModule
from bucketloader._validation import (
    MissingKeyError,
    as_lengths,
    batch_lengths,
    check_choice,
)
from bucketloader.boundaries import check_boundaries
from bucketloader.engines._common import (
    Accumulator,
    ScanResult,
    arrow_lengths,
    check_arrow_type,
    check_columns,
    check_nulls,
    describe_columns,
    missing_column,
    numbers_as_text,
    numbers_as_text_error,
    require,
    table_lengths,
)
from bucketloader.histogram import JointHistogram, LengthHistogram

if TYPE_CHECKING:
    import pyarrow as pa
    from ray import data as ray_data
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    ray_data = LazyModule("ray.data")

__all__ = ["ray_bucket_ids", "ray_histogram"]

#: Value of the first length column on the one row of a block's output that carries its nulls.
_NULL_ROW = -1
#: A block's output column of bits, bit i set where every value of the i-th measured column in
#: the block is a number written as text, or none is non-null (NOTE [ Numbers written as text ]
#: in :mod:`bucketloader._arrow`): the same on each of the block's rows, ANDed.
_NUMBERS = "numbers_as_text"
_NOT_KEYS = ("count", _NUMBERS)


def ray_histogram(
    ds: ray_data.Dataset,
    column: str | list[str] | None = None,
    *,
    length_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
    nulls: str = "raise",
) -> ScanResult:
    """Exact histogram of a column of a ``ray.data.Dataset``, one partial per block, merged.

    Args:
        ds: the dataset (lazy; it is executed once, reading only the measured columns).
        column: a list / tensor column (its length; a Ray tensor column's first dimension), a
            string column (characters), an integer length column, or several of these for a
            :class:`~bucketloader.histogram.JointHistogram`.
        length_fn: instead of ``column``, ``length_fn(batch) -> lengths`` over a numpy batch
            (a dict of arrays, one block at a time): ``(n,)`` lengths, or ``(n, D)``.
        nulls: ``"raise"`` (default) or ``"skip"`` (NOTE [ Nulls ] in
            :mod:`bucketloader.engines._common`).

    Returns:
        a :class:`~bucketloader.engines.ScanResult`.

    Example (needs a Ray runtime, started on first use; run by ``tests/test_engines_ray.py``)::

        >>> import ray  # doctest: +SKIP
        >>> ds = ray.data.from_items([{"ids": [1, 2, 3]}, {"ids": [4]}])  # doctest: +SKIP
        >>> ray_histogram(ds, "ids").histogram.values.tolist()  # doctest: +SKIP
        [1, 3]
    """
    ray = require("ray", "ray")
    require("ray.data", "ray")
    if not ray.is_initialized():  # (before ds.schema() in _check_args, which may start Ray:
        # rare here, as making the dataset started Ray already, hanging there on a dead
        # RAY_ADDRESS; s23-rev2: from_items still waiting after 25 s, docs/engines.md)
        check_ray_address("ray_histogram")
    columns, fn, nulls = _check_args(ray, ds, column, length_fn, nulls)
    what = f"the Ray dataset ({describe_columns(columns)})"
    if columns is not None:
        ds = ds.select_columns(columns)
        mapped = ds.map_batches(
            _BlockHistogram(columns, None), batch_format="pyarrow", batch_size=None
        )
    else:
        mapped = ds.map_batches(_BlockHistogram(None, fn), batch_format="numpy", batch_size=None)
    acc = Accumulator(columns, nulls, "ray")
    numbers = (1 << len(columns)) - 1 if columns is not None else 0

    def scan() -> None:
        # each block's table as it finishes, merged every few dozen (Accumulator), so the
        # driver's memory does not grow with the blocks: ray.get(mapped.to_arrow_refs()) held
        # every block's table at once (in the driver and the object store): driver RSS +135,
        # +202 and +375 MB for 200, 400 and 800 blocks of 20 k distinct lengths (4, 8, 16 M
        # rows); streamed +92, +105 and +109 MB, in the same time (s23, ray.init(num_cpus=1))
        nonlocal numbers
        for t in mapped.iter_batches(batch_size=None, batch_format="pyarrow"):
            t = cast("pa.Table", t)  # (batch_format="pyarrow": a table, not a dict)
            if t.num_rows == 0:
                continue
            keys = np.stack(
                [t.column(n).to_numpy() for n in t.column_names if n not in _NOT_KEYS], axis=1
            ).astype(np.int64)
            if _NUMBERS in t.column_names:
                numbers &= int(np.bitwise_and.reduce(t.column(_NUMBERS).to_numpy()))
            counts = t.column("count").to_numpy().astype(np.int64)
            null = keys[:, 0] == _NULL_ROW
            num_nulls = int(counts[null].sum())
            # Ray may bundle several blocks' outputs into one table: from_counts
            acc.add_counts(keys[~null], counts[~null], num_nulls)

    _run(ray, scan)
    if acc.num_nulls and nulls == "raise" and columns is not None:
        found = _file_without_column(ds, columns)  # NOTE [ A file without the column ]
        if found is not None:
            raise ValueError(found)
    result = acc.result(what)
    # NOTE [ Numbers written as text ] in bucketloader._arrow (a column of nulls alone is none)
    shown = {c: _numbers_shown(ds, c) for i, c in enumerate(columns or []) if numbers >> i & 1}
    numeric = [c for c, examples in shown.items() if examples]
    if numeric:
        fix, chars = _fixes(columns or [], numeric, ds.schema())
        raise ValueError(numbers_as_text_error(numeric[0], shown[numeric[0]], fix, chars))
    return result


def _fixes(columns: list[str], found: list[str], schema: Any = None) -> tuple[str, str]:
    """How to read the Ray columns ``found`` of numbers written as text as integers, and how to
    count their characters, where ``columns`` (typed by ``schema``) are measured: one column's
    ``length_fn``, or for several one ``length_fn`` stacking every column's lengths, so that the
    call stays joint (s34: it named the first column alone, and a call following it lost the
    others)."""
    if len(columns) == 1:
        c = columns[0]
        return (
            f"length_fn=lambda batch: batch[{c!r}].astype('int64') in place of column={c!r} "
            "(or cast the column with ds.map_batches)",
            f"length_fn=lambda batch: [len(s) for s in batch[{c!r}]]",
        )
    import pyarrow as pa

    def each(c: str, text: str) -> str:
        if c in found:
            return text.format(repr(c))
        t = _arrow_type(schema, c)
        if t is not None and pa.types.is_integer(t):
            return f"batch[{c!r}]"
        return f"[len(x) for x in batch[{c!r}]]"  # (lists, tensors, text: their lengths)

    def stacked(text: str) -> str:
        parts = ", ".join(each(c, text) for c in columns)
        return f"length_fn=lambda batch: np.stack([{parts}], axis=1)"

    return (
        f"{stacked('batch[{}].astype(' + repr('int64') + ')')} in place of column={columns!r} "
        "(or cast the columns with ds.map_batches)",
        stacked("[len(s) for s in batch[{}]]"),
    )


def _numbers_shown(ds: Any, column: str) -> list[str]:
    """A few values of a column the scan found to hold numbers written as text, from its first
    block with a non-null value (one more read, on the error path only); ``[]`` where there is
    none (every block held nulls only)."""
    for block in ds.select_columns([column]).iter_batches(batch_size=None, batch_format="pyarrow"):
        found = numbers_as_text(cast("pa.Table", block).column(column))
        if found != []:
            return found or []
    return []


def ray_bucket_ids(
    ds: ray_data.Dataset,
    boundaries: ArrayLike,
    column: str | None = None,
    *,
    length_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
    name: str = "bucket",
    nulls: str = "raise",
) -> ray_data.Dataset:
    """``ds`` with an ``int64`` column ``name``: each row's bucket under ``boundaries``.

    Bucket ``i`` holds lengths ``b[i-1] < L <= b[i]``
    (:func:`~bucketloader.boundaries.assign_buckets`), so a Ray Train ingest can route or
    group rows by shape. A length above the last boundary fails the job with the length
    named; with ``nulls="skip"`` a null row gets a null bucket.

    Lazy like any ``map_batches`` (nothing runs when called) where Ray knows the schema
    without running the dataset (``read_parquet``, ``from_items``, ``from_arrow``, ...) and it
    types the column as something other than text. Otherwise the call runs part of it:

    * a schema Ray knows only by running the dataset (after a ``map_batches``, until something
      fetched it) is fetched as ``ds.schema()`` fetches it: the pipeline runs until its first
      block comes out (``limit(1)``; Ray may run a few more blocks ahead), and again for every
      block when the ids are consumed;
    * a string column (measured in characters), or one the schema does not type (a pandas
      block's ``object`` column, ``ray.data.from_pandas``), is read alone, as Arrow, until a
      block settles it: one block for real text or a column of another type, the whole column
      for numbers written as text, which are refused as :func:`ray_histogram` refuses them
      (NOTE [ Numbers written as text ] in :mod:`bucketloader._arrow`).

    Example (needs a Ray runtime; run by ``tests/test_engines_ray.py``)::

        >>> import ray  # doctest: +SKIP
        >>> ds = ray.data.from_items([{"ids": [1, 2]}])  # doctest: +SKIP
        >>> ray_bucket_ids(ds, [1, 4], "ids").take_all()  # doctest: +SKIP
        [{'ids': [1, 2], 'bucket': 1}]
    """
    ray = require("ray", "ray")
    require("ray.data", "ray")
    if column is not None and not isinstance(column, str):
        raise TypeError(
            f"column must be one column name, got column={column!r}; for several inputs add "
            "one bucket column per input (call once per column with its own name=)"
        )
    columns, fn, nulls = _check_args(ray, ds, column, length_fn, nulls)
    b = check_boundaries(boundaries)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty column name, got name={name!r}")
    existing = _schema_names(ds)
    if existing is not None and name in existing:
        raise ValueError(
            f"the dataset already has a column {name!r}; choose another name= for the bucket ids"
        )
    if columns is not None and _may_be_text(ds, columns[0]):
        # NOTE [ Numbers written as text ] in bucketloader._arrow: ray_histogram's decision, over
        # the whole column, before a block gets its ids (a block sees itself alone, and a text
        # block can be all digits); the column alone is read, until a block settles it
        c = columns[0]

        def blocks() -> Iterator[Any]:
            for t in ds.select_columns([c]).iter_batches(batch_size=None, batch_format="pyarrow"):
                yield cast("pa.Table", t).column(c)

        examples = _run(ray, lambda: numbers_throughout(blocks()))
        if examples:
            raise ValueError(numbers_as_text_error(c, examples, *_fixes([c], [c])))
    return ds.map_batches(
        _AddBuckets(columns, fn, b, name, nulls), batch_format="pyarrow", zero_copy_batch=True
    )


def _check_args(
    ray: Any, ds: Any, column: Any, length_fn: Any, nulls: Any
) -> tuple[list[str] | None, Any, str]:
    nulls = check_nulls(nulls)
    if not isinstance(ds, ray.data.Dataset):
        if isinstance(ds, ray.data.DataIterator):
            raise TypeError(
                "ds is a ray.data.DataIterator, which can be consumed only once (and may "
                "already be); pass the ray.data.Dataset it came from"
            )
        raise TypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}")
    if (column is None) == (length_fn is None):
        raise ValueError(
            "pass exactly one of column= (what to measure) or length_fn= (batch -> lengths), "
            f"got column={column!r} and length_fn={length_fn!r}"
        )
    if length_fn is not None:
        if not callable(length_fn):
            raise TypeError(f"length_fn must be callable as length_fn(batch), got {length_fn!r}")
        return None, length_fn, nulls
    columns = check_columns(column)
    schema = ds.schema()
    if schema is None:
        raise ValueError("the Ray dataset has no rows (no schema); an empty dataset has no lengths")
    names = list(schema.names)
    for c in columns:  # type: ignore[union-attr]
        if c not in names:
            fix = (
                "pass length_fn= reading it from each batch's struct column, or add it as a "
                "column of its own with ds.map_batches"
            )
            raise MissingKeyError(
                f"column {c!r} not found; the Ray dataset has columns {names}"
                + did_you_mean("column", c, names)
                + nested_field(c, _structs(schema), fix)
            )
    import pyarrow as pa

    for c in columns:  # type: ignore[union-attr]
        t = _arrow_type(schema, c)
        pandas = not isinstance(getattr(schema, "base_schema", None), pa.Schema)
        if t is not None and pandas and pa.types.is_floating(t):  # (s34's sweep)
            raise TypeError(
                f"column {c!r} holds {t} numbers; lengths are whole numbers (in pandas blocks, "
                "a column of ints with a missing value is stored as floats, NaN for None): fill "
                "or drop the rows without one, then cast the column to int64 (ds.map_batches), "
                "or pass length_fn="
            )
        if t is not None:  # (a pandas block's float column too: Ray types it float64)
            check_arrow_type(t, c)
    return columns, None, nulls


def _arrow_type(schema: Any, column: str) -> Any:
    """The Arrow type a Ray schema gives ``column``: its Arrow schema's, or for blocks that
    are not Arrow (pandas: ``ray.data.from_pandas``, a ``map_batches`` returning DataFrames)
    the type Ray converts the dtype to; ``None`` where there is none (an ``object`` column:
    strings, lists or anything else, known only from its values)."""
    import pyarrow as pa

    base = getattr(schema, "base_schema", None)
    if isinstance(base, pa.Schema):
        return base.field(column).type
    try:
        t = dict(zip(schema.names, schema.types, strict=True)).get(column)
    except Exception:  # (a dtype Ray cannot convert: as for object)
        return None
    return t if isinstance(t, pa.DataType) else None


#: The footers :func:`_file_without_column` reads at once, and at most (on the error path only:
#: a dataset of more files keeps the null count's error when these do not settle it).
_FOOTER_GROUP, _FOOTERS_CHECKED = 16, 1024


def _file_without_column(ds: Any, columns: list[str]) -> str | None:
    """A Parquet file ``ds`` reads that lacks one of ``columns`` another of its files holds (its
    rows read as nulls; NOTE [ A file without the column ] in
    :mod:`bucketloader.engines._common`), named; ``None`` when there is none, no file holds the
    column (made after the read) or the files are unknown. Asked only once a scan found nulls;
    the footers are read 16 at a time, up to the first file without the column (and one with
    it), at most 1,024.

    The files: ``ds.input_files()``, else the paths of the plan's file listing (Ray's
    ``ListFiles``: Ray 2.60 has no public API for them, ``input_files()`` is ``[]`` for
    ``read_parquet`` even once executed), each folder listed by pyarrow's dataset discovery
    (recursive, skipping names that start with ``_`` or ``.``, e.g. ``_SUCCESS``, ``_temporary/``;
    reading no file). Best effort: a dataset that is not read from Parquet files, or another
    Ray's plan, keeps the null count's error."""
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    try:  # (filesystem or None: from the URI, path, file extensions) of every listing
        listings = [(None, p, ["parquet"]) for p in ds.input_files()]
        ops = [] if listings else [ds._logical_plan.dag]
        while ops:
            op = ops.pop()
            listed = getattr(op, "paths", None)
            if isinstance(listed, list) and all(isinstance(p, str) for p in listed):
                ext = getattr(op, "file_extensions", None) or ["parquet"]
                listings += [(getattr(op, "filesystem", None), p, ext) for p in listed]
            ops.extend(op.input_dependencies)
        files: list[tuple[Any, str]] = []
        for filesystem, name, extensions in listings:
            if len(files) >= _FOOTERS_CHECKED:
                break  # (the later listings need no listing of their own)
            fs, path = (
                (filesystem, name) if filesystem is not None else pafs.FileSystem.from_uri(name)
            )
            if fs.get_file_info(path).type != pafs.FileType.Directory:
                files.append((fs, path))
                continue
            # pyarrow's dataset discovery (recursive; names starting with "_" or "." skipped,
            # e.g. _SUCCESS, _temporary/; an empty schema given, so no file is read)
            inside = pads.dataset(path, format="parquet", filesystem=fs, schema=pa.schema([]))
            suffixes = tuple(f".{e.lstrip('.')}" for e in extensions)
            files += [(fs, p) for p in sorted(inside.files) if p.endswith(suffixes)]
        files = files[:_FOOTERS_CHECKED]
        with ThreadPoolExecutor(max_workers=_FOOTER_GROUP) as pool:

            def footers() -> Iterator[tuple[str, list[str]]]:  # a group at a time, on demand
                for i in range(0, len(files), _FOOTER_GROUP):
                    group = files[i : i + _FOOTER_GROUP]
                    names = pool.map(lambda f: pq.read_schema(f[1], filesystem=f[0]).names, group)
                    yield from zip((path for _, path in group), names, strict=True)

            return missing_column(footers(), columns)
    except Exception:  # a diagnosis on the error path: never hide the null count's error
        return None


def _may_be_text(ds: Any, column: str) -> bool:
    """Whether ``column`` may hold text by the Ray dataset's schema (no row read): typed as text
    (:func:`~bucketloader._arrow.is_text_like`), or not typed at all (a pandas block's
    ``object`` column, :func:`_arrow_type`), which its first block read as Arrow tells."""
    t = _arrow_type(ds.schema(), column)
    return t is None or is_text_like(t)


def _schema_names(ds: Any) -> list[str] | None:
    schema = ds.schema()
    return None if schema is None else list(schema.names)


def check_ray_address(who: str) -> None:
    """``who`` (``ray_histogram``, ``--engine ray``) is about to start Ray, which joins the
    cluster ``RAY_ADDRESS`` names. Where nothing answers at its ``host:port``, ``ray.init``
    retried the connection 20 times, each waiting out a timeout, silent (still waiting when
    stopped after 590 s; Ray 2.60), so one TCP connect (5 s) says it at once. Other forms
    (``auto``, ``local``) are Ray's to read, and fail fast."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    found = re.fullmatch(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d+)/?", address)
    if found is None:
        return
    host, port = found.group(1), int(found.group(2))
    if not 0 < port < 65536:  # (s23-rev2: getaddrinfo took 99999 as 99999 % 65536, so the
        # check tried port 34463 and named 99999)
        raise ValueError(
            f"{who} joins the Ray cluster RAY_ADDRESS={address} names, but {port} is not a "
            "TCP port (1 to 65535); fix RAY_ADDRESS (the head's port, 6379 by default), or "
            "unset it to start a local cluster"
        )
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise ValueError(
            f"{who} joins the Ray cluster RAY_ADDRESS={address} names, but nothing "
            f"answers at {host}:{port} ({exc.strerror or type(exc).__name__}); start it there "
            "(ray start --head), fix RAY_ADDRESS, or unset it to start a local cluster"
        ) from None


def _run(ray: Any, job: Callable[[], Any]) -> Any:
    """Run a Ray job; a bad-input error raised in a block comes back as that one error.

    Ray wraps a task's exception (``RayTaskError(UserCodeException)``) with the worker's
    traceback; the message of our own ``ValueError`` / ``TypeError`` (one line) is its last
    ``ValueError: ...`` line, re-raised here without the noise.

    A block Ray cannot turn into Arrow (a pandas block's column of nested lists or mixed Python
    objects: ``ArrowConversionError``, in a task or on the driver) is one error with the way on,
    not Ray's traceback (s34's sweep: ``from_pandas`` of nested lists).
    """
    try:
        return job()
    except (ray.exceptions.RayError, ray.data.exceptions.UserCodeException) as exc:
        found = _ERROR_LINE.findall(str(exc))
        if found:
            kind, message = found[-1]
            raise (ValueError if kind == "ValueError" else TypeError)(message) from exc
        if _not_arrow(exc):
            raise TypeError(_not_arrow(exc)) from None
        raise
    except Exception as exc:
        if _not_arrow(exc):
            raise TypeError(_not_arrow(exc)) from None
        raise


def _not_arrow(exc: BaseException) -> str:
    """The error for Ray's ``ArrowConversionError`` (``exc`` or its cause), else ``""``."""
    names = {c.__name__ for c in type(exc).__mro__} | {type(exc.__cause__).__name__}
    if "ArrowConversionError" not in names and "ArrowConversionError" not in repr(exc)[:300]:
        return ""
    said = next(
        (
            line.strip()
            for line in str(exc).splitlines()
            if "Error converting data to Arrow" in line
        ),
        "Error converting data to Arrow",
    )
    return (
        f"Ray could not read a block of the dataset as Arrow to measure it ({said:.160}): a "
        "pandas column of nested lists or of mixed Python objects has no Arrow type; pass "
        "length_fn= instead of column= (it reads numpy batches), e.g. length_fn=lambda batch: "
        "[len(x) for x in batch['ids']], or store the column as lists of numbers"
    )


_ERROR_LINE = re.compile(r"^(ValueError|TypeError|MissingKeyError): (.+)$", re.MULTILINE)


def _lengths_from_fn(fn: Callable[[dict[str, np.ndarray]], Any], batch: dict[str, Any]) -> Any:
    n = len(next(iter(batch.values()))) if batch else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    out = as_lengths(fn(batch), name="length_fn(batch)", ndim=(1, 2))
    example = "length_fn=lambda batch: [len(x) for x in batch['tokens']]"
    return batch_lengths(out, n, name="length_fn(batch)", example=example)


def _structs(schema: Any) -> list[str]:
    """The struct columns of a Ray schema (whose types are Arrow types where it has them)."""
    import pyarrow as pa

    return [
        n
        for n, t in zip(schema.names, schema.types, strict=True)
        if isinstance(t, pa.DataType) and pa.types.is_struct(t)
    ]


class _BlockHistogram:
    """One block → its histogram as a small table (``l0..l{D-1}``, ``count``), nulls as -1."""

    def __init__(self, columns: list[str] | None, fn: Any) -> None:
        self.columns, self.fn = columns, fn

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if self.columns is not None:
            lengths, num_nulls = table_lengths(batch, self.columns)
        else:
            lengths, num_nulls = _lengths_from_fn(self.fn, batch), 0
        width = 1 if lengths.ndim == 1 else lengths.shape[1]
        if lengths.shape[0]:
            hist = (
                LengthHistogram.from_lengths(lengths)
                if lengths.ndim == 1
                else JointHistogram.from_lengths(lengths)
            )
            keys = hist.values[:, None] if lengths.ndim == 1 else hist.rows  # type: ignore[union-attr]
            counts = hist.counts
        else:
            keys, counts = np.zeros((0, width), dtype=np.int64), np.zeros(0, dtype=np.int64)
        if num_nulls:
            null_row = np.full((1, width), _NULL_ROW, dtype=np.int64)
            keys = np.concatenate([keys, null_row])
            counts = np.concatenate([counts, [num_nulls]])
        cols = {f"l{i}": pa.array(keys[:, i], pa.int64()) for i in range(width)}
        cols["count"] = pa.array(counts, pa.int64())
        if self.columns is not None:  # NOTE [ Numbers written as text ] in bucketloader._arrow
            bits = sum(
                1 << i
                for i, c in enumerate(self.columns)
                if numbers_as_text(batch.column(c)) is not None
            )
            cols[_NUMBERS] = pa.array(np.full(len(counts), bits), pa.int64())
        return pa.table(cols)


class _AddBuckets:
    """One batch → the same batch plus its bucket-id column."""

    def __init__(
        self, columns: list[str] | None, fn: Any, boundaries: np.ndarray, name: str, nulls: str
    ) -> None:
        self.columns, self.fn, self.b, self.name = columns, fn, boundaries, name
        self.nulls = check_choice("nulls", nulls, ("raise", "skip"))

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if self.columns is not None:
            lengths, valid = arrow_lengths(batch.column(self.columns[0]), self.columns[0])
        else:  # fn sees numpy; the batch itself stays Arrow, so no other column changes type
            from ray.data.block import BlockAccessor

            numpy_batch = BlockAccessor.for_block(batch).to_batch_format("numpy")
            lengths, valid = _lengths_from_fn(self.fn, numpy_batch), None
            if lengths.ndim != 1:
                raise ValueError("length_fn(batch) must return one length per row here")
        if valid is not None and self.nulls == "raise":
            raise ValueError(
                f"the measured column has {int((~valid).sum())} null row(s) in a block; "
                "fill or filter them first, or pass nulls='skip' (their bucket is then null); "
                "a Parquet file without the column reads as null rows (ray_histogram names it)"
            )
        ok = lengths if valid is None else lengths[valid]
        if ok.size and int(ok.max()) > int(self.b[-1]):
            raise ValueError(
                f"length {int(ok.max())} exceeds the last boundary {int(self.b[-1])}; recompute "
                "the boundaries on this dataset's histogram or add a larger last boundary"
            )
        ids = np.searchsorted(self.b, lengths, side="left").astype(np.int64)
        mask = None if valid is None else ~valid
        return batch.append_column(self.name, pa.array(ids, pa.int64(), mask=mask))
