"""Lane counters: a stream's per-worker counters, shared with the main process.

NOTE [ A stream's counters across DataLoader workers ]
Under a ``DataLoader`` with ``num_workers > 0`` each worker iterates its own copy of the
``BucketIterable``; the main process's copy never iterates, so counters kept on the object stay
empty there. The stream therefore allocates, when it is built (in the main process, before any
worker starts), one small ``int64`` table in shared memory (``torch.Tensor.share_memory_()``):
one row per worker (a *lane*), with the pass's totals and per-cell batches, rows, real and padded
elements. Forked workers inherit the mapping; spawned ones receive the same shared storage when
the DataLoader pickles the dataset (torch's multiprocessing reductions). A worker writes its own
row only, so the per-sample loop is untouched: its batch count before every batch it hands out,
the other counters every 32 batches and when its pass ends, and in its last columns the trace of
the lengths it made after each of its last batches (NOTE [ A replay over a source without a
length ] in :mod:`bucketloader.stream._engine`). The main process sums the rows of the
current epoch. The numbers are what the workers have *produced*, which runs ahead of what the
training loop has consumed by the DataLoader's prefetch (``num_workers * prefetch_factor``
batches). Beyond :data:`MAX_LANES` workers the extra workers are not counted (the report says
so).

The same rows give the main process each worker's batch count and whether it finished, which
is all a resume needs (NOTE [ Resuming a stream behind DataLoader workers ] in
:mod:`bucketloader.stream.iterable`).

Both streams (:class:`~bucketloader.BucketIterable`, :class:`~bucketloader.stream.PackIterable`)
keep their counters in a :class:`LaneCounters` table with their own field names.

NOTE [ The main process's epoch, for persistent workers ]
A DataLoader with ``persistent_workers=True`` copies the stream into its workers once, at its
first pass, and keeps them: ``set_epoch`` (or ``load_state_dict``) in the main process changed
only the main process's copy, so every later epoch replayed epoch 0's shuffle and worker split,
silently, and ``report()`` / ``state_dict()`` looked for the rows of an epoch no worker ran
(s25-user: a ``BucketIterable`` with ``shuffle_buffer=32`` over 2 persistent workers gave the
same 54 batches in epochs 0 and 1). The table's last row (:data:`MAIN`, after the workers' rows)
therefore holds the main process's epoch and its count of ``load_state_dict`` calls; a worker
takes the epoch from it at the start of each pass, as ``datasets.IterableDataset`` shares its
epoch with persistent workers, and refuses a pass when the main process loaded a state that its
copy never saw (a state cannot travel through the table: a new DataLoader must copy it). A
state that ``set_epoch`` then forgets (another epoch's: a checkpoint taken at an epoch's end,
the loop going on with the next) is no longer pending, so the row then says so (the count as
``-1 - loads``) and the workers follow the epoch until the next load (they refused it: s27). Only a
DataLoader worker's copy from another process than the one that built the stream follows the row
(a stream built inside a worker, or a test simulating workers in one process, keeps its own
epoch, and so does a copy whose epoch was set in the worker itself: a wrapper dataset that
forwards its epoch or a state to the stream in its ``__iter__``, which following the row put in
epoch 0 every time; s25-rev), and every other copy writes it (a DDP rank's, pickled from its
launcher, for its own workers). A copy made by plain ``pickle`` or ``copy.deepcopy`` gets a
table of its own, put in shared memory as it is unpickled: a private one was copied into forked
persistent workers, so they missed the copy's ``set_epoch`` and replayed epoch 0 (s26-defects).
One row of the existing table, not a shared tensor of its
own: each ``share_memory_()`` keeps a file descriptor open for the tensor's life.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

__all__ = ["FLUSH_EVERY", "MAX_LANES", "LaneCounters", "RefusedResume", "finished", "hand_out"]

#: Workers (lanes) per stream with a row in the table.
MAX_LANES = 64
#: The row of the main process's epoch and load count (NOTE [ The main process's epoch, for
#: persistent workers ]), after the lanes' rows.
MAIN = MAX_LANES
#: The column of the :data:`MAIN` row holding :meth:`LaneCounters.claim_repeat`'s claim (after
#: ``publish``'s epoch and load count; the row has at least the lane fields' five columns).
REPEAT = 2
#: A lane writes all its counters to the shared table every this many batches (and at the end).
FLUSH_EVERY = 32
#: Fields every lane row starts with (where the lane stands).
LANE_FIELDS = ("epoch", "lanes", "done", "read", "batches")
#: Per-cell columns, after the named fields: ``PER_CELL[j]`` of cell ``c`` is at
#: ``len(fields) + j * num_cells + c``.
PER_CELL = ("batches", "rows", "real", "padded")
#: A lane's trace of the lengths it handed out (NOTE [ A replay over a source without a
#: length ] in :mod:`bucketloader.stream._engine`) after each of its last this many batches, in
#: the last columns of its row (after the per-cell ones), the slot of batch ``b`` at
#: ``b % TRACE_KEPT``.
TRACE_KEPT = 16
#: The bits of a trace slot: the batch count (low :data:`_COUNT_BITS` bits) above the trace
#: (:data:`TRACE_BITS` bits) and a bit set when the trace is known, in one ``int64``, written and
#: read in one store (never torn between a batch count and another batch's trace).
TRACE_BITS = 40
_COUNT_BITS = 22
_COUNT_AT = TRACE_BITS + 1  # (the count's lowest bit: above the trace and its known bit)


def finished(lanes: Sequence[dict[str, int]]) -> bool:
    """Whether ``lanes`` (:meth:`LaneCounters.lanes` of an epoch) hold every worker's row, each
    at its pass's end: the epoch's pass is over."""
    return bool(lanes) and len(lanes) == lanes[0]["lanes"] and all(x["done"] for x in lanes)


class LaneCounters:
    """The shared table of the module NOTE: one ``int64`` row per DataLoader worker (lane).

    Args:
        stats: the stream's counter names (after :data:`LANE_FIELDS`).
        num_cells: per-cell columns to keep (:data:`PER_CELL` for every cell; 0 for none).

    Picklable into workers with its shared storage.

    Example:
        >>> c = LaneCounters(("rows",))
        >>> c.write(0, {"epoch": 0, "lanes": 1, "done": 1, "read": 5, "batches": 2, "rows": 4})
        >>> c.lanes(0)[0]["rows"]
        4
    """

    def __init__(self, stats: Sequence[str], num_cells: int = 0) -> None:
        self.fields = (*LANE_FIELDS, *stats)
        self.num_cells = int(num_cells)
        width = len(self.fields) + len(PER_CELL) * self.num_cells + TRACE_KEPT
        self.table = torch.zeros((MAX_LANES + 1, width), dtype=torch.int64).share_memory_()
        self._setup()
        self.reset()

    def _setup(self) -> None:
        self._index = {name: i for i, name in enumerate(self.fields)}
        self._view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"fields": self.fields, "num_cells": self.num_cells, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.fields, self.num_cells, self.table = (
            state["fields"],
            state["num_cells"],
            state["table"],
        )
        if not self.table.is_shared():  # a plain pickle / copy.deepcopy made a private table:
            # its DataLoader's forked persistent workers would not see this copy's set_epoch
            # and replayed epoch 0 every epoch, silently (s26-defects; a DataLoader's own
            # pickling, spawn included, shares the storage and keeps the original's table)
            self.table.share_memory_()
        self._setup()

    @property
    def view(self) -> np.ndarray:
        """A numpy view of the shared table (no copy)."""
        if self._view is None:
            self._view = self.table.numpy()
        return self._view

    def write(self, lane: int, totals: dict[str, int], cells: np.ndarray | None = None) -> None:
        """Write one lane's row: ``totals`` by name (missing ones 0) and ``cells``
        (``(4, num_cells)``)."""
        if not 0 <= lane < MAX_LANES:
            return
        row = self.view[lane].copy()  # (its traces kept)
        row[:-TRACE_KEPT] = 0
        for name, value in totals.items():
            row[self._index[name]] = value
        if cells is not None:
            row[len(self.fields) : -TRACE_KEPT] = np.asarray(cells).reshape(-1)
        self.view[lane] = row

    def trace(self, lane: int, batches: int, trace: int | None) -> None:
        """Keep a lane's ``trace`` after its first ``batches`` batches (``None``: unknown)."""
        if 0 <= lane < MAX_LANES:
            known = 0 if trace is None else (1 << TRACE_BITS) | (trace % (1 << TRACE_BITS))
            count = batches % (1 << _COUNT_BITS)
            self.view[lane, batches % TRACE_KEPT - TRACE_KEPT] = (count << _COUNT_AT) | known

    def traced(self, lane: int, batches: int) -> int | None:
        """The trace :meth:`trace` kept of ``lane`` after ``batches`` batches, if it is still
        kept and known."""
        if not 0 <= lane < MAX_LANES:
            return None
        slot = int(self.view[lane, batches % TRACE_KEPT - TRACE_KEPT])
        if slot >> _COUNT_AT != batches % (1 << _COUNT_BITS) or not slot >> TRACE_BITS & 1:
            return None
        return slot & ((1 << TRACE_BITS) - 1)

    def tick(self, lane: int, batches: int) -> None:
        """Write only a lane's batch count (cheap, before every batch)."""
        if 0 <= lane < MAX_LANES:
            self.view[lane, self._index["batches"]] = batches

    def reset(self) -> None:
        """Forget every lane (a new pass starts), and :meth:`claim_repeat`'s claim."""
        self.view[:MAX_LANES] = 0
        self.view[:MAX_LANES, self._index["epoch"]] = -1
        self.view[MAIN, REPEAT] = 0

    def claim_repeat(self, epoch: int) -> bool:
        """Whether the caller is the first copy, of every worker's, to warn that a pass repeats
        the finished ``epoch`` (NOTE [ A stream's new pass without set_epoch ]) since the last
        :meth:`reset` (check then write: two workers in the same instant may both warn)."""
        if int(self.view[MAIN, REPEAT]) == epoch + 1:
            return False
        self.view[MAIN, REPEAT] = epoch + 1
        return True

    def publish(self, epoch: int, loads: int) -> None:
        """The main process's epoch and ``load_state_dict`` count, for its workers (NOTE [ The
        main process's epoch, for persistent workers ])."""
        self.view[MAIN, :2] = (epoch, loads)

    def published(self) -> tuple[int, int]:
        """What :meth:`publish` last wrote: ``(epoch, loads)``."""
        epoch, loads = self.view[MAIN, :2]
        return int(epoch), int(loads)

    def lanes(self, epoch: int) -> list[dict[str, int]]:
        """The rows written for ``epoch``, in lane order, each with its ``lane`` (rows of an
        earlier pass with more workers are left out)."""
        out = []
        for lane, r in enumerate(self.view[:MAX_LANES].copy()):
            row = {name: int(r[i]) for name, i in self._index.items()}
            if row["epoch"] == epoch and lane < row["lanes"]:
                out.append(row | {"lane": lane})
        return out

    def cells(self, epoch: int) -> np.ndarray:
        """Per-cell columns summed over the lanes of ``epoch``, ``(4, num_cells)``."""
        rows = self.view[:MAX_LANES].copy()
        keep = [lane["lane"] for lane in self.lanes(epoch)]
        mine = rows[keep, len(self.fields) : -TRACE_KEPT]
        return mine.sum(axis=0).reshape(len(PER_CELL), self.num_cells)


class Lane(Protocol):
    """What :func:`hand_out` needs of a stream's per-worker engine."""

    skip: int
    batches: int
    read: int
    stats: dict[str, int]
    worker: tuple[int, int]
    traced: bool
    trace: int | None

    def flush(self, done: bool = False) -> None: ...


T = TypeVar("T")


def hand_out(lane: Lane, counters: LaneCounters | None, batches: Iterator[T]) -> Iterator[T]:
    """Yield ``batches``, minus the lane's first ``skip`` (a resume by replay). The lane's batch
    count reaches the shared table before each batch is handed out (a resume needs it exact);
    the other counters every :data:`FLUSH_EVERY` batches and at the end."""
    index = lane.worker[0]
    traced = lane.traced
    lane.flush()
    try:
        for batch in batches:
            if traced and counters is not None:  # (also of the batches a replay skips: a
                counters.trace(index, lane.batches, lane.trace)  # state taken soon after
                # names them; NOTE [ A replay over a source without a length ])
            if lane.skip:
                lane.skip -= 1
                lane.stats["skipped"] += 1
                continue
            if lane.batches % FLUSH_EVERY == 0:
                lane.flush()
            elif counters is not None:
                counters.tick(index, lane.batches)
            yield batch
    except Exception as exc:  # NOTE [ A pass that raised is over ]
        lane.flush()
        _say_the_pass_ends(exc, lane)
        raise
    lane.flush(done=True)


class RefusedResume(ValueError):
    """A resume refused before the pass handed out a batch (the source changed since the state
    was saved, the state was edited, or it was saved with another number of DataLoader
    workers; every such refusal, s32): the pass never started, so
    :func:`_say_the_pass_ends` says nothing of it.

    NOTE [ A refused resume behind DataLoader workers ]
    Raised in a worker, it reaches the main process through torch, which re-raises it there
    (``ExceptionWrapper.reraise``). torch binds the new exception to a local of that frame before
    raising it, so the exception holds its traceback, which holds the frame, which holds the
    exception: a reference cycle, which also keeps the DataLoader's iterator (a local of the
    frames between) after the user's ``except`` block. Only the garbage collector frees it, at
    some later collection, and in its own order: the iterator's queues may be finalised first,
    its workers then never get the stop message, and torch waits 5 s for each before killing it
    (2 workers: ``gc.collect()`` took 10.4 s; s31); a DataLoader started before that collection
    forks the cycle into its workers, whose own collection prints "Exception ignored in ...
    _MultiProcessingDataLoaderIter.__del__ ... can only test a child process". A type with a
    ``message`` attribute is raised by torch as ``exc_type(message=msg)`` in one expression,
    bound to no local: no cycle, so the iterator goes (its workers stopped at once) when the
    user's ``except`` block ends (the collection after it: 10.4 s -> 0.4 s, and no such print
    from the next DataLoader's workers; s32). Any other error from a worker (a bad sample, the
    user's own) keeps torch's cycle: docs/streams.md gives the user's fix,
    ``traceback.clear_frames(err.__traceback__)`` in the ``except`` block.

    Example:
        >>> err = RefusedResume(message="cannot resume")
        >>> err.message, str(err), bool(RefusedResume.message)
        ('cannot resume', 'cannot resume', True)
    """

    def __init__(self, *args: object, message: str | None = None) -> None:
        super().__init__(*(args if message is None else (message, *args)))

    @property
    def message(self) -> str:
        """The message (torch re-raises a type with this attribute without a reference cycle:
        NOTE [ A refused resume behind DataLoader workers ])."""
        return str(self.args[0]) if self.args else ""


class RefusedSource(RefusedResume):
    """A source refused as the pass opens it, before it handed out a batch (one that splits
    itself among DataLoader workers without being a torch ``IterableDataset``: NOTE [ A plain
    source that splits itself ] in :mod:`bucketloader.stream.source`). As a refused resume, the
    pass never started, so :func:`_say_the_pass_ends` says nothing of it (its "a bad sample: fix
    or filter it" does not apply), and torch re-raises it without the reference cycle.

    Example:
        >>> str(RefusedSource(message="the source splits itself"))
        'the source splits itself'
    """


def _say_the_pass_ends(exc: Exception, lane: Lane) -> None:
    """NOTE [ A pass that raised is over ]
    A pass is a generator: once the source, ``length_fn`` or a sample raised in it, it is
    finished, and the next ``next()`` is its end (behind DataLoader workers, the end of that
    worker's share). A loop that catches the error to skip one bad sample and calls ``next()``
    again then ends the epoch early with no word (s29-user: 80 of 599 samples, one worker;
    340 of 599 behind two). The counters are written (``report()`` counts what the pass read;
    it said ``samples: 0`` after 10 batches) and the error carries a note saying so, which
    torch's worker traceback prints too (Python >= 3.11: ``add_note``)."""
    add_note = getattr(exc, "add_note", None)
    if add_note is None or isinstance(exc, RefusedResume):  # (3.10: no notes)
        return
    worker, workers = lane.worker
    share = f" of DataLoader worker {worker} of {workers}" if workers > 1 else ""
    add_note(
        f"bucketloader: this stream's pass{share} ends here, after {lane.read:,} samples read "
        f"and {lane.batches:,} batches: a stream cannot go on after an error in its pass, so "
        "catching this error and calling next() again ends the epoch early, without the rest "
        f"of the source{' for this worker' if workers > 1 else ''}. A bad sample: fix or filter "
        "it in the source (or in length_fn)"
    )
