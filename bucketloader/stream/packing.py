"""Packing for streams: batches of packed rows at one planned shape, from any iterable.

Documents flow from the source (a Hugging Face ``IterableDataset``, a torch ``IterableDataset``, a
list, any iterable) into at most ``open_rows`` open rows by online best fit (NOTE [ Online
best-fit over a bounded buffer ] in :mod:`bucketloader.stream._rows`); closed rows leave ``B`` at a
time as a batch, a list of documents row after row, which
:class:`~bucketloader.pack.PackCollator` lays out exactly as for the map-style
:class:`~bucketloader.pack.PackSampler`. Collate with
``DataLoader(stream, batch_size=None, collate_fn=stream.collator())``.

Split over ranks (``num_replicas > 1``, or ``steps_per_epoch``), every rank makes exactly
``steps_per_epoch`` steps of the one shape, with no communication (NOTE [ A packing stream split
over ranks ] in :mod:`bucketloader.stream._rows`).

NOTE [ Resuming a packing stream behind DataLoader workers ]
The bucketing stream's rule (NOTE [ Resuming a stream behind DataLoader workers ] in
:mod:`bucketloader.stream.iterable`), for packing. In one process (``num_workers=0``) a one-pass
stream's state is exact and cheap: positions of the buffered documents and a source checkpoint
(NOTE [ Exact resume of the packing stream ]). Behind workers the main process never sees the
workers' rows; what it can own is *how many batches each worker had handed out*, which the
shared counters give (NOTE [ A stream's counters across DataLoader workers ] in
:mod:`bucketloader.stream.counters`). ``state_dict(batches_consumed=k)`` turns the ``k`` batches
the loop consumed into a count per worker (the DataLoader hands batches out round-robin over the
workers still running; with ``steps_per_epoch`` worker ``w`` made ``len(range(w, k, W))`` of
them); on resume each worker replays its pass from the start of the epoch and hands out only
what comes after its count: exact, at the cost of re-reading and re-packing the documents
consumed so far (no collation, no training), and it needs the same ``num_workers``. A stream
with ``steps_per_epoch`` resumes this way behind workers too, unless worker checkpoints are on
(in one process it seeks or uses the source's checkpoints where it can: NOTE [ Seeking a
source ] in :mod:`bucketloader.stream.source`). A new DataLoader starts its round-robin at
worker 0 while the next batch may be worker ``f``'s: a source this stream splits itself (a list,
a generator factory) is then *rotated* (DataLoader worker ``w`` plays worker ``(w + f) mod W``);
a source that shards itself by worker id (HF or torch ``IterableDataset``) cannot be, so
``state_dict`` asks for a ``k`` that is a multiple of ``num_workers``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from bucketloader._dist import (
    ARGUMENTS,
    checkpoint,
    failing_together,
    gather_arguments,
    joins_group,
    resolve_ranks,
    would_join,
)
from bucketloader._types import LazyModule
from bucketloader._validation import check_choice, check_collator_options, check_int, checks_options
from bucketloader.pack.spec import PACK_LAST_BATCH, PackTable, check_row_length
from bucketloader.plan import SamplingReport
from bucketloader.plan.shapes import row_batch_sizes
from bucketloader.stream._rows import (
    FILL_VERSION,
    SOLVER_VERSION,
    STATE_FORMAT,
    STATS,
    TAIL_FIELDS,
    PackConfig,
    RowPass,
    make_length_fn,
)
from bucketloader.stream.counters import LaneCounters, finished
from bucketloader.stream.resume import (
    ResumableStream,
    check_source,
    check_steps,
    lane_states,
    source_config,
    state_keys,
)
from bucketloader.stream.source import check_length_columns, checkpoints_exactly, is_seekable

__all__ = ["STREAM_OVERFLOW", "PackIterable"]

#: What happens to a document longer than ``row_length`` in a stream: the map-style policies, and
#: ``"split"`` (pieces of ``row_length`` tokens, each packed as a document of its own).
STREAM_OVERFLOW = ("drop", "error", "split", "truncate")
#: A row stays open while at most this many buffers' worth of tokens (``open_rows * L``) arrive.
STALE_BUFFERS = 2
#: The state of a resume by replay (NOTE [ Resuming a packing stream behind DataLoader workers ]).
REPLAY_FORMAT = 2


#: The keys of each state format and their types.
_STATE_KEYS = state_keys(
    STATE_FORMAT,
    REPLAY_FORMAT,
    {"next_id": int, "tokens_read": int, "open": list, "ready": list},
)

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.pack import collator as pack_collator
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    pack_collator = LazyModule("bucketloader.pack.collator")


@checks_options
class PackIterable(ResumableStream, state_keys=_STATE_KEYS):
    """An iterable of packed batches (lists of documents, row after row) of one planned shape.

    Args:
        source: the documents: an HF ``IterableDataset``, a torch ``IterableDataset`` or any
            iterable. Re-iterable sources give one pass per epoch (``set_epoch`` is passed on to
            a source that has it, e.g. ``IterableDataset.shuffle``). Split over ranks, it is
            *this rank's* shard (``split_dataset_by_node``, or ``documents[rank::world]``).
        length_fn: ``None`` (``len(sample)``; a dict's only sequence field, where ``len`` would
            count its keys and is refused), a key
            (``len(sample[key])``) or a callable ``sample -> tokens``.
        row_length: tokens per row ``L``.
        batch_size: rows per batch ``B``; or
        max_tokens: ``B = max_tokens // L``.
        open_rows: rows open at a time (the bounded buffer): more packs tighter, holds more
            documents (NOTE [ Online best-fit over a bounded buffer ]).
        overflow: documents longer than ``L``: ``"error"``, ``"drop"``, ``"truncate"`` or
            ``"split"`` (pieces of ``L`` tokens; dict samples have every field of the
            document's length cut alike), counted in :attr:`stats`.
        last_batch: the last, short batch: ``"pad"`` (the collator adds all-padding rows),
            ``"fill"`` (topped up with repeats: the least seen of the rows handed out last,
            then its own; NOTE [ What a stream's fill repeats ]) or ``"drop"``. With
            ``steps_per_epoch``: ``"pad"`` or ``"fill"``.
        max_documents: at most this many documents per batch (``cu_seqlens`` has
            ``max_documents + B + 1`` entries), between ``B`` and ``B * L`` (the default: any
            document >= 1 token).
        num_replicas, rank: ranks (default: from ``torch.distributed``; ``rank`` is required
            with ``num_replicas > 1`` and no process group). With more than one,
            ``steps_per_epoch`` is required and every rank makes exactly that many steps of the
            one shape (NOTE [ A packing stream split over ranks ] in
            :mod:`bucketloader.stream._rows`).
        steps_per_epoch: fixed steps per epoch on every rank (``len(stream)``), each a
            :class:`~bucketloader.plan.PlannedBatch`, padding-only once the shard runs dry;
            ``None`` (one rank only): one pass over the source.
        checkpoint_dir: ``None`` (default): behind DataLoader workers a resume replays each
            worker's pass from the start of the epoch. A path of an existing directory: each
            worker also writes its exact state there every 4 batches (small JSON files in a
            private subdirectory, removed with the stream) and a resume restarts from the
            newest (NOTE [ Worker checkpoints ] in :mod:`bucketloader.stream.resume`).

    Under a ``DataLoader`` with workers each worker packs its own shard (the stream's rule:
    an HF ``IterableDataset`` splits its shards, a torch ``IterableDataset`` must shard itself
    by ``torch.utils.data.get_worker_info()`` or every worker reads all of it, other iterables
    are split round-robin).
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly, in one process or behind
    workers (NOTE [ Resuming a packing stream behind DataLoader workers ]); :attr:`stats` counts
    what the pass did, also from the main process.

    Example:
        >>> stream = PackIterable([[1] * n for n in [5, 3, 2, 6, 2, 4]], row_length=8,
        ...                       batch_size=2)
        >>> stream.shapes
        [(2, 8)]
        >>> [[len(doc) for doc in batch] for batch in stream]
        [[5, 3, 2, 6], [4, 2]]
        >>> ranked = PackIterable([[1] * n for n in [5, 3, 2, 6]], row_length=8, batch_size=1,
        ...                       num_replicas=2, rank=0, steps_per_epoch=3)
        >>> # (its third step finds no document: an empty batch, and a warning at the end)
        >>> [[len(doc) for doc in batch] for batch in ranked], len(ranked)
        ([[5, 3], [2, 6], []], 3)
    """

    #: NOTE [ A state across solver versions ] in stream._rows; the fill version in a state's
    #: ``config`` (:meth:`_check_versions`), not an option.
    VERSION_KEYS = ("solver", "fill")

    def __init__(
        self,
        source: Iterable[Any],
        *,
        length_fn: str | Callable[[Any], int] | None = None,
        row_length: int,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        open_rows: int = 256,
        overflow: str = "error",
        last_batch: str = "pad",
        max_documents: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        steps_per_epoch: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        # (up to its one collective: a rank refused before it stops the others there, named)
        with failing_together(would_join(num_replicas, rank)):
            self.source = check_source(source)
            self.length_fn = length_fn
            self._measure = make_length_fn(length_fn)
            check_length_columns(self.source, length_fn)  # (NOTE [ Numbers written as text ])
            self.row_length = check_row_length(row_length)
            # the sampler's batch-size rule
            (self.batch_size,) = row_batch_sizes(batch_size, max_tokens, (self.row_length,))
            self.open_rows = check_int("open_rows", open_rows, minimum=1)
            self.overflow = check_choice("overflow", overflow, STREAM_OVERFLOW)
            self.last_batch = check_choice("last_batch", last_batch, PACK_LAST_BATCH)
            default = self.batch_size * self.row_length
            self.max_documents = check_int(
                "max_documents",
                default if max_documents is None else max_documents,
                minimum=self.batch_size,
            )
            if self.max_documents > default:  # a larger bound only lengthens every cu_seqlens
                raise ValueError(
                    f"max_documents must be <= batch_size * row_length = {default} (one document "
                    f"per token at most), got max_documents={self.max_documents}"
                )
            self.num_replicas, self.rank = resolve_ranks(num_replicas, rank)
            self.steps_per_epoch = check_steps(
                steps_per_epoch,
                self.num_replicas,
                self.last_batch,
                per_step="tokens per rank / (batch_size * row_length) = tokens per rank / "
                f"{default} (stats shows left_over and padded_rows to tune it)",
                pad="short batches get all-padding rows",
            )
            self._counters = LaneCounters((*STATS, *TAIL_FIELDS))
            self._lane_states = lane_states(checkpoint_dir)
            self.epoch = 0
            self._resume: dict[str, Any] | None = None
            self._engine: RowPass | None = None
            if joins_group(
                num_replicas, rank, self.num_replicas
            ):  # NOTE [ Ranks agree on the plan ]
                shard = source_config(self.source)  # (each rank reads its own files)
                agreed = {k: v for k, v in self._config().items() if k not in shard}
                checkpoint(ARGUMENTS)  # NOTE [ Checkpoints before a collective ] in _dist
                gather_arguments(type(self).__name__, agreed, self.num_replicas, self.rank)

    @functools.cached_property
    def table(self) -> PackTable:
        """The promised shape and document bound (what the collator keeps)."""
        return PackTable(
            row_lengths=(self.row_length,),
            batch_sizes=(self.batch_size,),
            max_documents=(self.max_documents,),
            truncate=self.overflow == "truncate",
        )

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The one ``input_ids`` shape ``(B, L)`` every collated batch has (a promise)."""
        return list(self.table.shapes)

    def collator(self, **kwargs: Any) -> pack_collator.PackCollator:
        """``PackCollator(self.table, **kwargs)``; use
        ``DataLoader(stream, batch_size=None, collate_fn=stream.collator())``."""
        from bucketloader.pack.collator import PackCollator, share_epoch

        check_collator_options(f"{type(self).__name__}.collator()", PackCollator, kwargs)
        return share_epoch(self, PackCollator(self.table, **kwargs))

    #: The epoch its masking collators draw (a shared int64 tensor once one is built), written
    #: when a pass starts, in the process that iterates (a DataLoader worker collates there).
    _mlm_epoch: Any = None

    def _pass_config(self) -> PackConfig:
        return PackConfig(
            source=self.source,
            measure=self._measure,
            row_length=self.row_length,
            batch_size=self.batch_size,
            max_per_row=self.max_documents // self.batch_size,
            open_rows=self.open_rows,
            stale_tokens=STALE_BUFFERS * self.open_rows * self.row_length,
            overflow=self.overflow,
            last_batch=self.last_batch,
            stateful=checkpoints_exactly(self.source),
            seekable=is_seekable(self.source),
            config=self._config(),
            steps=self.steps_per_epoch or 0,
            rank=self.rank,
            counters=self._counters,
            lane_states=self._lane_states,
        )

    # -- iteration --------------------------------------------------------------------------
    def _new_engine(self, worker: tuple[int, int], skip: int) -> RowPass:
        if self._mlm_epoch is not None:  # (the pass's epoch is settled: resumed or followed)
            self._mlm_epoch[0] = self.epoch
        return RowPass(self._pass_config(), self.epoch, worker, skip=skip)

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the current (or last) pass, over this rank's DataLoader workers and
        visible from the main process: ``read``, ``batches``, ``rows`` and ``tokens`` (real
        rows and tokens handed out), ``overflow_dropped``, ``truncated``, ``split``,
        ``tail_dropped``, ``padded_rows`` (all-padding rows of short and padding-only batches),
        ``repeated_rows`` (``"fill"``), ``left_over`` (documents still buffered when the steps
        ran out) and ``skipped`` (batches replayed by a resume)."""
        engine = self._engine
        if engine is not None and engine.worker == (0, 1) and engine.epoch == self.epoch:
            return {**engine.stats, "read": engine.read, "batches": engine.batches}
        lanes = self._counters.lanes(self.epoch)
        if not lanes:
            return {}
        return {name: sum(lane[name] for lane in lanes) for name in ("read", "batches", *STATS)}

    def report(self) -> SamplingReport:
        """What the current (or last) pass did, in the report every producer gives (as
        :meth:`BucketIterable.report <bucketloader.BucketIterable.report>`): documents read
        (``samples``), left out (``too_long``, ``overflow="drop"``), cut (``truncated``), not
        yielded (``dropped``: the tail under ``last_batch="drop"``; ``left_over``), padding rows,
        batches done and, with ``steps_per_epoch``, left; the one shape's rows, real tokens and
        padded tokens. :attr:`stats` keeps the packing counters (``split``, ``repeated_rows``).
        Without ``steps_per_epoch`` batches left are unknown (``None``) until the pass ends (0).

        Example:
            >>> stream = PackIterable([[1] * n for n in [5, 3, 2, 6, 2, 4]], row_length=8,
            ...                       batch_size=2)
            >>> _ = list(stream)
            >>> r = stream.report()
            >>> r.totals["samples"], r.batches_done, r.batches_left, r.cells[0]["real"]
            (6, 2, 0, 22)
        """
        st = self.stats
        done = int(st.get("batches", 0))
        totals = {
            "samples": int(st.get("read", 0)),
            "too_long": int(st.get("overflow_dropped", 0)),
            "truncated": int(st.get("truncated", 0)),
            "dropped": int(st.get("tail_dropped", 0)),
            "left_over": int(st.get("left_over", 0)),
            "batches": done,
            "padded_rows": int(st.get("padded_rows", 0)),
        }
        cell = {
            "shape": (self.batch_size, self.row_length),
            "batches": done,
            "rows": int(st.get("rows", 0)),
            "real": int(st.get("tokens", 0)),
            "padded": done * self.batch_size * self.row_length,
        }
        if self.steps_per_epoch is not None:
            left: int | None = self.steps_per_epoch - done
        else:  # known once every worker's pass has ended, as BucketIterable.report
            left = 0 if finished(self._counters.lanes(self.epoch)) else None
        return SamplingReport(
            epoch=self.epoch,
            totals=totals,
            cells=(cell,),
            batches_done=done,
            batches_left=left,
            samples_left=None,
            source="stream",
            extra={k: int(st.get(k, 0)) for k in ("split", "repeated_rows", "skipped")},
        )

    # -- state ------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "row_length": self.row_length,
            "batch_size": self.batch_size,
            "open_rows": self.open_rows,
            "overflow": self.overflow,
            "last_batch": self.last_batch,
            "max_documents": self.max_documents,
            "solver": SOLVER_VERSION,  # NOTE [ A state across solver versions ] in _rows
        }
        if self.last_batch == "fill":  # NOTE [ What a stream's fill repeats ] in stream.resume
            config["fill"] = FILL_VERSION
        if self.steps_per_epoch is not None:
            config.update(num_replicas=self.num_replicas, steps_per_epoch=self.steps_per_epoch)
        return {**config, **source_config(self.source)}  # (NOTE [ A stream state names
        # the files it read ] in stream.arrow)

    def _replay_state(self, batches_consumed: int | None) -> dict[str, Any]:
        """The replay state, with each worker's tail where it packed one: ``[batches before
        it, its batches, a digest of its rows]`` (NOTE [ A state across solver versions ] in
        :mod:`bucketloader.stream._rows`)."""
        state = super()._replay_state(batches_consumed)
        tails: list[list[int] | None] = [None] * state["workers"]
        for lane in self._counters.lanes(self.epoch):
            if lane["tail_batches"] and lane["lane"] < len(tails):
                tails[lane["lane"]] = [lane[k] for k in TAIL_FIELDS]
        if any(t is not None for t in tails):
            state["tails"] = tails
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the next ``iter()`` exactly where ``state`` was taken (strict checks)."""
        tails = state.get("tails") if isinstance(state, dict) else None
        if tails is not None:
            workers = state.get("workers")
            if not (isinstance(tails, list) and len(tails) == workers and all(map(_tail, tails))):
                raise ValueError(
                    f"state['tails'] must hold None or [start, batches, digest] per worker "
                    f"({workers}), got {tails!r}; pass a dict from PackIterable.state_dict(), "
                    "unedited"
                )
        super().load_state_dict(state)

    def _check_versions(self, state: dict[str, Any]) -> None:
        """Refuse a state whose ``last_batch="fill"`` completed short batches another way
        (:data:`~bucketloader.stream._rows.FILL_VERSION`)."""
        self._check_fill_version(
            state,
            FILL_VERSION,
            "copies of its own rows, and a dry step with its last batch again (a bucketloader "
            "before PackIterable recorded its fill version)",
            "the least seen of the rows it handed out last",
        )

    def _check_buffers(self, state: dict[str, Any]) -> None:
        read = state["read"]

        def docs(items: Any) -> bool:  # [[position, part], ...], positions already read
            return isinstance(items, list) and all(
                isinstance(x, list)
                and len(x) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
                and 0 <= x[0] < read
                for x in items
            )

        rows_ok = all(
            isinstance(r, list) and len(r) == 3 and isinstance(r[0], int) and docs(r[2])
            for r in state["open"]
        )
        fill = state.get("fill", {})  # (last_batch="fill": the rows handed out last and the
        # appearances of those repeated; NOTE [ What a stream's fill repeats ] in stream.resume)
        fill_ok = (
            isinstance(fill, dict)
            and isinstance(fill.get("last", []), list)
            and all(docs(r) and r for r in fill.get("last", []))
            and isinstance(fill.get("seen", []), list)
            and all(
                isinstance(x, list)
                and len(x) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
                and 0 <= x[0] < read
                and x[2] >= 1
                for x in fill.get("seen", [])
            )
        )
        if not fill_ok:
            raise ValueError(
                f"state's fill record (the rows handed out last, and the appearances of those "
                f"repeated) does not fit this PackIterable ({read} samples read): pass a dict "
                "from PackIterable.state_dict(), unedited"
            )
        if not rows_ok or not all(docs(r) for r in state["ready"]):
            raise ValueError(
                f"state's open and ready rows do not fit this PackIterable ({read} samples "
                "read): pass a dict from PackIterable.state_dict(), unedited"
            )
        if not _tail(state.get("tail")):
            raise ValueError(
                f"state['tail'] must be [start, batches, digest], got {state['tail']!r}; pass "
                "a dict from PackIterable.state_dict(), unedited"
            )


def _tail(t: Any) -> bool:
    """Whether ``t`` is ``None`` or a worker's tail record ``[start, batches, digest]`` (NOTE
    [ A state across solver versions ] in :mod:`bucketloader.stream._rows`)."""
    return t is None or (
        isinstance(t, list)
        and len(t) == len(TAIL_FIELDS)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in t)
    )
