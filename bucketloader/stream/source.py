"""A stream's source: measuring and truncating samples, opening, sharding and resuming it.

The rules of both streams (:class:`~bucketloader.BucketIterable` and
:class:`~bucketloader.stream.PackIterable`), written once.

NOTE [ Who shards the stream across DataLoader workers ]
A source that knows about workers shards itself: a Hugging Face ``IterableDataset`` splits its
shards among workers, and by torch's contract a ``torch.utils.data.IterableDataset`` reads
``get_worker_info()`` itself. Any other iterable (a list, a generator factory, a map-style
``datasets.Dataset``) is split round-robin by position: worker ``w`` of ``n`` keeps samples
``w, w + n, w + 2n, ...`` (each worker reads and skips the others' samples). Such a source
that splits itself anyway is refused (NOTE [ A plain source that splits itself ]). A torch
``IterableDataset`` that does not split itself is read whole by every worker: the stream cannot
tell (it may be split by a ``worker_init_fn``), and says nothing.

NOTE [ A plain source that splits itself ]
A source that splits itself by ``get_worker_info()`` but is neither a torch ``IterableDataset``
nor an HF one cannot be told from a plain iterable by its type, and the stream's round-robin
split of each worker's share would keep 1 in ``num_workers`` of its samples (s33-left: 200 of
400 behind 2 workers, without a word). Behind workers, the stream (which runs in the worker)
therefore opens such a source and reads its first sample while ``get_worker_info()`` returns a
stand-in of the worker's ``WorkerInfo`` (same values, a subclass) that records reads: torch
keeps it in the module global ``torch.utils.data._utils.worker._worker_info``, which
``get_worker_info()`` returns however the source imported it. A source that read both ``id``
and ``num_workers`` there is refused, naming the fix (subclass ``IterableDataset``). The stream
reads its own worker info before and the stand-in is removed after, so only the source's reads
count. A pass and every resume that reopens the source (a replay from the start of the
epoch, or a restart at one of its own checkpoints: :func:`reopen`) go through the same check;
a source the stream does not split (one process, a self-sharding or seekable source) is not
watched. Not caught: a source that reads the worker info only after its first sample, or
outside ``__iter__`` (a ``worker_init_fn`` that sets its range). A source that reads both
fields for another purpose (a log line) is refused though it does not split itself (rare; it
can read them from its second sample on).

NOTE [ Seeking a source ]
A resume needs the samples a stream still holds (at most its buffers: the shuffle buffer and
the bucket buffers, or the open and closed rows) and the source from where the pass stopped
reading. A source read *by index* (a list, a tuple, a numpy array, a map-style
``datasets.Dataset``, :class:`~bucketloader.stream.arrow.ArrowRows` over Parquet files or an
Arrow table, any object with ``__len__`` and ``__getitem__`` and no ``__iter__`` of its own, such
as a torch map-style ``Dataset``: it iterates by index) gives both
directly: sample ``p`` of worker ``w`` of ``n`` is row ``w + n p``, so the state holds only
positions, the buffered samples are fetched by row and the source reopens at row
``w + n read`` (:func:`fetch`, :func:`open_at`). Resume costs O(buffer), whatever the position
in the epoch. A source with ``state_dict()`` / ``load_state_dict()`` (an HF
``IterableDataset``) is checkpointed every ``K`` samples (``K`` about the buffers' capacity);
the state lists the checkpoints a resume needs (``segments``: the newest one at or before each
sample the state names, and the newest of all), and the resume restarts the source at each of
them, reading only up to the last named sample it holds, then at the newest one up to where the
pass stopped: at most ``K`` samples per checkpoint listed, whatever the position in the epoch.
The pass keeps only those checkpoints (:func:`trim_snapshots`): a sample is named from the
moment it is read until no resume needs it, so a checkpoint dropped is never needed again. An
HF ``IterableDataset`` with a shuffle buffer is not checkpointed (:func:`checkpoints_exactly`:
its ``state_dict()`` leaves the buffer out, so a restart would read other samples); it replays.
Any other iterable (a generator factory, a torch ``IterableDataset``) cannot seek: it replays
the pass from the start of the epoch; so does a subclass of ``list`` (its ``__iter__`` might
not follow its indices). Behind DataLoader workers the same holds per worker, from the
workers' checkpoints (NOTE [ Worker checkpoints ] in :mod:`bucketloader.stream.resume`).
A stream split over ranks (``steps_per_epoch``) resumes the same way: its state also names the
samples its dry steps reuse (each cell's first sample, the stand-in of a padding row, and each
cell's last batch, which ``last_batch="fill"`` repeats; a packing stream's last batch) and the
step it reached; the resume fetches those by index, or takes them back from the source's
checkpoints, and takes the remaining steps (behind DataLoader workers from the workers'
checkpoints when they are on). Over any other source it replays from the start of the epoch.

A class with ``__len__`` and ``__getitem__`` and no ``__iter__`` of its own (a torch map-style
``Dataset``) is read as rows ``0 .. len - 1`` by index, in a pass from the start as in a resume,
exactly as a ``DataLoader`` reads it: never through Python's fallback iteration, which ignores
``len`` and stops at the first ``IndexError`` (so a ``__getitem__`` that wraps or never raises
would never end, and a ``len`` that disagrees with it would make a resume read other rows than
the pass it resumes). A ``__getitem__`` that raises ``IndexError`` below ``len`` is an error
naming the row and the ``len``; rows past ``len`` are not part of the stream.
"""

from __future__ import annotations

import bisect
import copy
import itertools
import numbers
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from bucketloader._samples import length_reader, stream_len
from bucketloader._validation import MAX_LENGTH
from bucketloader.stream.counters import RefusedResume, RefusedSource


def make_length_fn(length_fn: Any) -> Callable[[Any], Any]:
    """``sample -> length`` under NOTE [ The length of a sample ] (:mod:`bucketloader._samples`):
    ``None``, a key or a callable; a tuple of keys gives a tuple of lengths (several inputs)."""
    if length_fn is None or isinstance(length_fn, str) or callable(length_fn):
        if callable(length_fn):
            if (
                length_fn is len
            ):  # (not of a dict or a tuple of fields: NOTE [ len of a dict sample ])
                return stream_len
            return length_fn  # a callable returns the length itself (checked per sample)
        return length_reader(length_fn, arg="length_fn")
    if (
        isinstance(length_fn, (tuple, list))
        and length_fn
        and all(isinstance(k, str) for k in length_fn)
    ):
        return _JointLengths(tuple(length_reader(k, arg="length_fn") for k in length_fn))
    raise TypeError(
        f"length_fn must be None, a key of the samples, a tuple of keys (one per bucketed "
        f"input) or a callable sample -> int, "
        f"got length_fn={length_fn!r}"
    )


def check_length_columns(source: Any, length_fn: Any) -> None:
    """Refuse a ``length_fn`` key that names a string column of numbers in an Arrow-backed source
    (:class:`~bucketloader.stream.arrow.ArrowRows`, a ``datasets.Dataset``): each ``"120"``
    would be measured in characters, 3 (NOTE [ Numbers written as text ] in
    :mod:`bucketloader._arrow`: the rule of ``parquet_histogram`` and ``hf.lengths``, over the
    whole column, so a text column that holds one word is measured as text; a
    ``datasets.Dataset``'s column over the rows it holds, NOTE [ The rows a dataset holds ]).
    A column's type comes from the schema, so a column of another type reads nothing; any other
    source, or a callable ``length_fn``, is not looked at (a stream sees one sample at a time).
    With ``length_fn=None`` a dict is measured by its ``"length"`` entry, which holds the
    length itself: text there is refused sample by sample, by its type (NOTE [ The length of a
    sample ] in :mod:`bucketloader._samples`).

    Example:
        >>> import pyarrow as pa
        >>> from bucketloader.stream.arrow import ArrowRows
        >>> try:  # doctest: +ELLIPSIS
        ...     check_length_columns(ArrowRows(pa.table({"n": ["3", "120"]})), "n")
        ... except ValueError as exc:
        ...     print(*str(exc).split("? ")[-1].split("; "), sep="\\n")
        Read them as integers: pass length_fn=lambda sample: int(sample['n'])
        or, where the digits are the text, count its characters: length_fn=lambda sample: ...
    """
    if isinstance(length_fn, str):
        keys = [length_fn]
    elif isinstance(length_fn, (tuple, list)):
        keys = [k for k in length_fn if isinstance(k, str)]
    else:
        return
    for key in keys:
        examples, cast = _numbers_in(source, key)
        if examples:
            from bucketloader._arrow import numbers_as_text_error

            read = f"int(sample[{key!r}])"
            fix = (
                f"pass a callable length_fn that reads {read} in place of {key!r}"
                if isinstance(length_fn, (tuple, list))
                else f"pass length_fn=lambda sample: {read}"
            )
            chars = (
                f"a callable length_fn that reads len(sample[{key!r}])"
                if isinstance(length_fn, (tuple, list))
                else f"length_fn=lambda sample: len(sample[{key!r}])"
            )
            raise ValueError(numbers_as_text_error(key, examples, cast + fix, chars))


def _numbers_in(source: Any, key: str) -> tuple[list[str] | None, str]:
    """:meth:`ArrowRows.numbers_as_text <bucketloader.stream.arrow.ArrowRows.numbers_as_text>`
    of ``key``, or its like over a ``datasets.Dataset``'s table (with the cast that fixes it
    there), ``None`` for any other source."""
    check = getattr(source, "numbers_as_text", None)
    if callable(check):  # ArrowRows
        return check(key), ""
    table: Any = getattr(getattr(source, "data", None), "table", None)  # a datasets.Dataset's
    if type(table).__module__.split(".")[0] != "pyarrow" or key not in table.column_names:
        return None, ""
    from bucketloader._arrow import held_numbers, indices_of, is_text_like

    if not is_text_like(table.schema.field(key).type):
        return None, ""
    cast = f"dataset.cast_column({key!r}, datasets.Value('int64')), or "
    # the rows the dataset holds, not its table's (NOTE [ The rows a dataset holds ])
    return held_numbers(table.column(key), indices_of(source)), cast


class _JointLengths:
    """``sample -> tuple of lengths``, one per bucketed input (a class, so that it pickles)."""

    def __init__(self, parts: tuple[Callable[[Any], int], ...]) -> None:
        self.parts = parts

    def __call__(self, sample: Any) -> tuple[int, ...]:
        return tuple(f(sample) for f in self.parts)


def check_length(value: Any, position: int) -> int:
    """A sample's length as an int >= 0, or an error naming the sample's position. An integer
    scalar of numpy or torch counts too (``lambda s: s["mask"].sum()`` gives a 0-d tensor).

    Example:
        >>> import torch
        >>> check_length(3, 0), check_length(torch.tensor(4), 1), check_length(np.int32(5), 2)
        (3, 4, 5)
    """
    if type(value) is int and 0 <= value <= MAX_LENGTH:  # the per-sample common case, first
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if 0 <= int(value) <= MAX_LENGTH:
            return int(value)
    elif getattr(value, "ndim", 1) == 0 and "int" in str(getattr(value, "dtype", "bool")):
        if 0 <= int(value) <= MAX_LENGTH:
            return int(value)  # a 0-d integer array or tensor (not a bool one)
    raise ValueError(
        f"length_fn returned {value!r} for sample {position} of this worker's stream; it must "
        "return an int >= 0 and < 2**62 (or a 0-d integer array or tensor)"
    )


def truncate(sample: Any, length: int, limit: int, key: str | None) -> Any:
    """Cut a sample to ``limit`` elements (``overflow="truncate"``).

    A dict sample has every sequence-valued entry of the sample's length cut (so ``input_ids``,
    ``attention_mask`` and ``labels`` stay aligned); any other sample is sliced ``[:limit]``.
    """
    if isinstance(sample, Mapping):
        out = dict(sample)
        for k, v in sample.items():
            if isinstance(v, Mapping) and "array" in v and k == key:
                out[k] = {**v, "array": v["array"][:limit]}
            elif (
                not isinstance(v, (str, bytes)) and hasattr(v, "__getitem__") and _len(v) == length
            ):
                out[k] = v[:limit]
        return out
    return sample[:limit]


def _len(v: Any) -> int | None:
    try:
        return len(v)
    except TypeError:
        return None


def self_sharding(source: Any) -> bool:
    """Whether ``source`` splits itself among DataLoader workers (see the module NOTE)."""
    try:
        from torch.utils.data import IterableDataset
    except ImportError:  # pragma: no cover
        return False
    return isinstance(source, IterableDataset) or is_hf(source)


def is_stateful(source: Any) -> bool:
    """Whether ``source`` resumes from ``state_dict()`` / ``load_state_dict()`` (HF's contract)."""
    return callable(getattr(source, "state_dict", None)) and callable(
        getattr(source, "load_state_dict", None)
    )


def checkpoints_exactly(source: Any) -> bool:
    """Whether a resume may restart ``source`` at its own ``state_dict()`` (NOTE [ Seeking a
    source ]): it is stateful, and not an HF ``IterableDataset`` with a shuffle buffer
    (``.shuffle(buffer_size=...)``), whose state leaves the buffer out, so that a restart reads
    other samples than the pass it resumes (such a source replays the epoch instead).

    Example:
        >>> checkpoints_exactly([1, 2]), checkpoints_exactly(iter([1, 2]))
        (False, False)
    """
    return is_stateful(source) and not (is_hf(source) and _hf_shuffle_buffer(source))


def _hf_shuffle_buffer(source: Any) -> bool:
    """Whether the chain of an HF ``IterableDataset``'s example iterables holds a shuffle
    buffer (its private ``_ex_iterable``, walked through ``ex_iterable`` / ``ex_iterables``)."""
    todo = [getattr(source, "_ex_iterable", None)]
    while todo:
        node = todo.pop()
        if node is None:
            continue
        if type(node).__name__ == "BufferShuffledExamplesIterable":
            return True
        todo.append(getattr(node, "ex_iterable", None))
        todo.extend(getattr(node, "ex_iterables", None) or ())
    return False


def is_hf(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.IterableDataset``."""
    t = type(source)
    return t.__module__.startswith("datasets.") and t.__name__ == "IterableDataset"


def is_hf_table(source: Any) -> bool:
    """Whether ``source`` is a map-style Hugging Face ``datasets.Dataset`` (Arrow-backed)."""
    t = type(source)
    return t.__module__.startswith("datasets.") and t.__name__ == "Dataset"


def is_seekable(source: Any) -> bool:
    """Whether ``source`` is read by index, so a resume can seek (NOTE [ Seeking a source ]).

    Example:
        >>> is_seekable([3, 1, 2]), is_seekable(iter([3, 1, 2])), is_seekable("abc")
        (True, False, False)
    """
    if isinstance(source, (str, bytes, Mapping, Iterator)) or self_sharding(source):
        return False
    kind = type(source)
    if kind in (list, tuple, range) or isinstance(source, np.ndarray) or is_hf_table(source):
        return True
    if callable(getattr(source, "iter_from", None)) and callable(
        getattr(source, "take_rows", None)
    ):
        return True  # ArrowRows: iterates and fetches the same rows
    # read by index, rows 0 .. len - 1, in every pass; a class with its own __iter__ might
    # iterate in another order
    return by_index(source)


def by_index(source: Any) -> bool:
    """Whether ``source`` has ``__len__`` and ``__getitem__`` and no ``__iter__`` of its own (a
    torch map-style ``Dataset``), so the streams read its rows ``0 .. len - 1`` by index (NOTE
    [ Seeking a source ]).

    Example:
        >>> class Squares:
        ...     def __len__(self): return 3
        ...     def __getitem__(self, i): return i * i
        >>> by_index(Squares()), list(open_source(Squares(), (0, 1)))
        (True, [0, 1, 4])
    """
    kind = type(source)
    own_iter = getattr(kind, "__iter__", None)
    return (
        hasattr(kind, "__len__")
        and hasattr(kind, "__getitem__")
        and (own_iter is None or own_iter is Sequence.__iter__)
        and not isinstance(source, (str, bytes, Mapping, Iterator))
    )


def _rows(source: Any, rows: Iterable[int], size: int) -> Iterator[Any]:
    """``source[r]`` for each row, an ``IndexError`` below ``len`` named as the source's fault."""
    for r in rows:
        try:
            yield source[r]
        except IndexError as exc:
            raise ValueError(
                f"the source's __getitem__ raised IndexError at row {r}, but len(source)={size}: "
                f"a source read by index ({type(source).__name__} has __len__ and __getitem__ "
                "and no __iter__) must serve every row below its len; fix its __len__, or give "
                "it an __iter__ (it is then read as a plain iterable, and a resume replays)"
            ) from exc


def open_at(source: Any, worker: tuple[int, int], start: int) -> Iterator[Any]:
    """This worker's samples of a seekable ``source`` from its position ``start`` on, without
    reading the rows before it (NOTE [ Seeking a source ]).

    Example:
        >>> list(open_at([10, 11, 12, 13, 14, 15], (1, 2), 1))
        [13, 15]
    """
    wid, num = worker
    first, size = wid + num * start, len(source)
    if first >= size:
        return iter(())
    if is_hf_table(source):  # an Arrow slice, read in batches
        tail = source.select(range(first, size)) if first else source
        return itertools.islice(iter(tail), 0, None, num)
    if callable(getattr(source, "iter_from", None)):  # ArrowRows: record batches
        return source.iter_from(first, num)  # type: ignore[no-any-return]
    if by_index(source):
        return _rows(source, range(first, size, num), size)
    return map(source.__getitem__, range(first, size, num))


def fetch(source: Any, worker: tuple[int, int], positions: Sequence[int]) -> list[Any]:
    """The samples of this worker at ``positions`` of a seekable ``source``, in that order.

    Example:
        >>> fetch([10, 11, 12, 13, 14, 15], (1, 2), [2, 0])
        [15, 11]
    """
    wid, num = worker
    rows = [wid + num * int(p) for p in positions]
    if not rows:
        return []
    if is_hf_table(source):
        return list(source.select(rows))
    if callable(getattr(source, "take_rows", None)):  # ArrowRows: one read per row group
        return source.take_rows(rows)  # type: ignore[no-any-return]
    if by_index(source):
        return list(_rows(source, rows, len(source)))
    return [source[r] for r in rows]


def open_source(source: Any, worker: tuple[int, int]) -> Iterator[Any]:
    """A fresh iterator over this worker's share of ``source`` (a source :func:`by_index`: its
    rows ``0 .. len - 1``)."""
    if by_index(source):
        return open_at(source, worker, 0)
    wid, num = worker
    if num > 1 and not self_sharding(source):
        return _split_by_position(source, lambda: iter(source), wid, num)
    return iter(source)


def _split_by_position(
    source: Any, open_it: Callable[[], Iterator[Any]], first_kept: int, num: int
) -> Iterator[Any]:
    """Every ``num``-th sample of ``open_it()`` (over a plain iterable ``source``) from sample
    ``first_kept`` on, refusing a source that splits itself (NOTE [ A plain source that splits
    itself ])."""
    watch = _WorkerInfoWatch()
    with watch:
        it = open_it()
        first = next(it, _END)
    if watch.splits():
        name = type(source).__name__
        raise RefusedSource(
            message=f"the source ({name}) read torch.utils.data.get_worker_info().id and "
            f".num_workers to give its first sample behind {num} DataLoader workers, so it "
            "splits itself among them; it is no torch.utils.data.IterableDataset, so the "
            f"stream splits each worker's share again by position and would keep 1 in {num} of "
            f"its samples, losing the rest. Make {name} a subclass of "
            "torch.utils.data.IterableDataset (the stream then leaves the splitting to it), or "
            "have it yield every sample and let the stream split them"
        )
    if first is _END:
        return
    yield from itertools.islice(itertools.chain((first,), it), first_kept, None, num)


_END = object()


class _WorkerInfoWatch:
    """While open, ``torch.utils.data.get_worker_info()`` returns a stand-in of the worker's
    ``WorkerInfo`` (same values, a subclass) that records reads of ``id`` and ``num_workers``
    made by the thread that opened it (NOTE [ A plain source that splits itself ]). Outside a
    DataLoader worker, or where the stand-in cannot be built (another torch's ``WorkerInfo``), it
    watches nothing.

    Watches opened by two threads of a worker may close out of order: one closes by putting back
    what it replaced only while its own stand-in is installed, skipping stand-ins of watches
    already closed, so the worker's ``WorkerInfo`` is back once all have closed (fin1: another
    thread's reads counted as the source's, and a stand-in stayed installed)."""

    _FIELDS = ("id", "num_workers")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._saved: Any = None
        self._module: Any = None
        self._stand_in: Any = None
        self._thread = threading.get_ident()

    def splits(self) -> bool:
        """Whether both ``id`` and ``num_workers`` were read while open."""
        return self.seen >= set(self._FIELDS)

    def __enter__(self) -> _WorkerInfoWatch:
        try:
            from torch.utils.data._utils import worker as module
        except ImportError:  # pragma: no cover
            return self
        with _WATCH_LOCK:
            info = getattr(module, "_worker_info", None)
            if info is None:
                return self
            stand_in = _recording(info, self)
            if stand_in is not None:
                self._module, self._saved, self._stand_in = module, info, stand_in
                module._worker_info = stand_in
        return self

    def __exit__(self, *exc: object) -> None:
        if self._module is None:
            return
        with _WATCH_LOCK:
            module, self._module = self._module, None
            if module._worker_info is self._stand_in:
                saved = self._saved
                while (watch := _watch_of(saved)) is not None and watch._module is None:
                    saved = watch._saved  # (a watch that closed while ours was installed)
                module._worker_info = saved


_WATCH_LOCK = threading.Lock()


def _watch_of(info: Any) -> _WorkerInfoWatch | None:
    """The watch whose stand-in ``info`` is (``None`` for any other ``WorkerInfo``)."""
    watch = type(info).__dict__.get("_bucketloader_watch")
    return watch if isinstance(watch, _WorkerInfoWatch) else None


def _recording(info: Any, watch: _WorkerInfoWatch) -> Any:
    """A copy of ``info`` whose reads of ``id`` / ``num_workers`` by ``watch``'s thread add their
    names to ``watch.seen`` (``None`` where torch's ``WorkerInfo`` cannot be copied so)."""
    import dataclasses

    base = type(info)
    plain = getattr(base, "_bucketloader_plain", base)  # (torch's, under nested watches)
    seen, thread = watch.seen, watch._thread

    class Recording(base):  # type: ignore[misc, valid-type]
        _bucketloader_watch = watch
        _bucketloader_plain = plain

        def __getattribute__(self, name: str) -> Any:
            if name in _WorkerInfoWatch._FIELDS and threading.get_ident() == thread:
                seen.add(name)
            return super().__getattribute__(name)

        def __reduce__(self) -> Any:  # (a copy a source kept pickles as torch's: fin1)
            return (_plain_worker_info, (plain, fields))

        def __repr__(self) -> str:  # (a source that logs its whole worker info, as print or
            # an f-string do, reads every field: not a split, fin1)
            return repr(_plain_worker_info(plain, fields))

    Recording.__name__ = Recording.__qualname__ = plain.__name__
    fields: dict[str, Any] = {}
    try:
        if dataclasses.is_dataclass(info):
            fields = {  # (not through an outer watch's stand-in: the stream's reads)
                f.name: object.__getattribute__(info, f.name)
                for f in dataclasses.fields(info)
                if f.init
            }
        else:  # an older torch: WorkerInfo(**kwargs), frozen after __init__
            fields = {k: v for k, v in vars(info).items() if not k.startswith("_")}
        return Recording(**fields)
    except Exception:  # (an unknown WorkerInfo: watch nothing rather than break the stream)
        return None


def _plain_worker_info(base: type, fields: dict[str, Any]) -> Any:
    """``base(**fields)``: a watch's stand-in unpickled as the ``WorkerInfo`` it copies."""
    return base(**fields)


def checkpoint(source: Any) -> Any:
    """A copy of a stateful ``source``'s ``state_dict()`` that later reads cannot change (an HF
    source returns a fresh copy of its own)."""
    state = source.state_dict()
    return state if is_hf(source) else copy.deepcopy(state)


def trim_snapshots(snaps: list[tuple[int, Any]], held: Iterable[int]) -> None:
    """Keep, of the snapshots ``(position, source state)`` in position order, the newest one at
    or before each ``held`` position (a sample the state names) and the newest of all: a resume
    restarts the source at those (NOTE [ Seeking a source ]). A sample is named from the moment
    it is read until it is no longer needed, so a snapshot dropped here is never needed again.

    Example:
        >>> snaps = [(0, None), (64, "a"), (128, "b"), (192, "c")]
        >>> trim_snapshots(snaps, [3, 150])
        >>> [p for p, _ in snaps]
        [0, 128, 192]
    """
    snaps[:] = needed_snapshots(snaps, held)


def needed_snapshots(snaps: list[tuple[int, Any]], held: Iterable[int]) -> list[tuple[int, Any]]:
    """The snapshots :func:`trim_snapshots` keeps, in position order: the newest one at or before
    each ``held`` position, and the newest of all."""
    starts = [p for p, _ in snaps]
    keep = {bisect.bisect_right(starts, p) - 1 for p in held}
    keep.add(len(snaps) - 1)
    return [snaps[i] for i in sorted(keep) if i >= 0]


def resume_point(snaps: list[tuple[int, Any]], oldest: int) -> tuple[int, Any]:
    """The newest snapshot ``(position, source state)`` at or before ``oldest``: where a resume
    restarts the source."""
    return max((s for s in snaps if s[0] <= oldest), key=lambda s: s[0])


def reopen(source: Any, worker: tuple[int, int], state: Any) -> Iterator[Any]:
    """The worker's iterator over ``source`` restarted at a checkpoint ``state`` (``None``: from
    the start of the epoch).

    A checkpoint is taken right after the worker read a sample of its share (never before the
    first), so over a source the stream splits round-robin (:func:`open_source`) the source
    goes on from the sample after that one: the worker's next is ``num - 1`` further, and every
    ``num``-th after it. (s33: the split was left out here, so a worker resumed from its
    checkpoint read every sample, and its unchanged resume was refused or, with equal lengths,
    took the other workers' samples.)

    Example:
        >>> class Counter:  # checkpoints itself: the samples it has handed out
        ...     def __init__(self): self.pos, self.start = 0, 0
        ...     def state_dict(self): return {"pos": self.pos}
        ...     def load_state_dict(self, state): self.start = state["pos"]
        ...     def __iter__(self):
        ...         for i in range(self.start, 10):
        ...             self.pos = i + 1
        ...             yield i
        >>> src = Counter(); it = open_source(src, (1, 3)); [next(it), next(it)]
        [1, 4]
        >>> list(reopen(Counter(), (1, 3), src.state_dict()))
        [7]
    """
    if state is None:
        return open_source(source, worker)
    source.load_state_dict(state)
    num = worker[1]
    if num > 1 and not self_sharding(source):
        return _split_by_position(
            source, lambda: forget_after_first(iter(source), source), num - 1, num
        )
    return forget_after_first(iter(source), source)


def replay(it: Iterator[Any], start: int, stop: int) -> Iterator[tuple[int, Any]]:
    """``(position, sample)`` for the positions ``start .. stop - 1`` of a resumed pass; a source
    that ends early cannot be resumed."""
    for pos in range(start, stop):
        try:
            yield pos, next(it)
        except StopIteration:
            raise RefusedResume(
                message=f"cannot resume: the source ended at sample {pos} while replaying to "
                f"{stop}; resume needs a deterministic, re-iterable source"
            ) from None


def forget_after_first(it: Iterator[Any], source: Any) -> Iterator[Any]:
    """Yield from ``it`` (a resumed ``source``); once it has started, make an HF source forget
    the loaded state: ``datasets.IterableDataset.load_state_dict`` keeps it for every later
    iteration of the same epoch, and we only want it for the one we resumed."""
    started = False
    for x in it:
        if not started:
            _forget_resume(source)
            started = True
        yield x
    if not started:
        _forget_resume(source)


def _forget_resume(source: Any) -> None:
    if is_hf(source):
        source.load_state_dict(None)
