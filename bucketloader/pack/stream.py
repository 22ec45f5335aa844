"""Packing for streams: batches of packed rows at one planned shape, from any iterable.

Documents flow from the source (a Hugging Face ``IterableDataset``, a torch ``IterableDataset``, a
list, any iterable) into at most ``open_rows`` open rows by online best fit (NOTE [ Online
best-fit over a bounded buffer ] in :mod:`bucketloader.pack._stream`); closed rows leave ``B`` at a
time as a batch, a list of documents row after row, which
:class:`~bucketloader.pack.PackCollator` lays out exactly as for the map-style
:class:`~bucketloader.pack.PackSampler`. Collate with
``DataLoader(stream, batch_size=None, collate_fn=stream.collator())``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch.utils.data

from bucketloader._validation import check_choice, check_int
from bucketloader.pack._stream import (
    STATE_FORMAT,
    Engine,
    PassConfig,
    is_stateful,
    make_length_fn,
    open_source,
)
from bucketloader.pack.spec import PACK_LAST_BATCH, PackTable
from bucketloader.plan.budget import BatchRule

__all__ = ["STREAM_OVERFLOW", "PackIterable"]

#: What happens to a document longer than ``row_length`` in a stream: the map-style policies, and
#: ``"split"`` (pieces of ``row_length`` tokens, each packed as a document of its own).
STREAM_OVERFLOW = ("drop", "error", "split", "truncate")
#: A row stays open while at most this many buffers' worth of tokens (``open_rows * L``) arrive.
STALE_BUFFERS = 2


class PackIterable(torch.utils.data.IterableDataset):
    """An iterable of packed batches (lists of documents, row after row) of one planned shape.

    Args:
        source: the documents: an HF ``IterableDataset``, a torch ``IterableDataset`` or any
            iterable. Re-iterable sources give one pass per epoch (``set_epoch`` is passed on to
            a source that has it, e.g. ``IterableDataset.shuffle``).
        length_fn: ``None`` (``len(sample)``; a dict's only sequence field), a key
            (``len(sample[key])``) or a callable ``sample -> tokens``.
        row_length: tokens per row ``L``.
        batch_size: rows per batch ``B``; or
        max_tokens: ``B = max_tokens // L``.
        open_rows: rows open at a time (the bounded buffer): more packs tighter, holds more
            documents (NOTE [ Online best-fit over a bounded buffer ]).
        overflow: documents longer than ``L``: ``"error"``, ``"drop"``, ``"truncate"`` or
            ``"split"`` (pieces of ``L`` tokens; dict samples have every field of the
            document's length cut alike), counted in :attr:`stats`.
        last_batch: the last, partial batch: ``"pad"`` (the collator adds all-padding rows) or
            ``"drop"``.
        max_documents: at most this many documents per batch (``cu_seqlens`` has
            ``max_documents + B + 1`` entries); default ``B * L`` (any document >= 1 token).

    Under a ``DataLoader`` with workers each worker packs its own shard (the stream's rule:
    torch and HF iterable datasets shard themselves, other iterables are split round-robin).
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly (NOTE [ Exact resume of the
    packing stream ] in :mod:`bucketloader.pack._stream`).

    Example:
        >>> stream = PackIterable([[1] * n for n in [5, 3, 2, 6, 2, 4]], row_length=8,
        ...                       batch_size=2)
        >>> stream.shapes
        [(2, 8)]
        >>> [[len(doc) for doc in batch] for batch in stream]
        [[5, 3, 2, 6], [4, 2]]
    """

    def __init__(
        self,
        source: Any,
        *,
        length_fn: Any = None,
        row_length: int,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        open_rows: int = 256,
        overflow: str = "error",
        last_batch: str = "pad",
        max_documents: int | None = None,
    ) -> None:
        self.source = source
        self.length_fn = length_fn
        self._measure = make_length_fn(length_fn)
        self.row_length = check_int("row_length", row_length, minimum=1)
        rule = BatchRule.parse(batch_size, max_tokens)  # the sampler's batch-size rule
        self.batch_size = int(rule.sizes(np.array([[self.row_length]]))[0])
        if self.batch_size < 1:
            raise ValueError(
                f"{rule.describe()} holds no row of {self.row_length} tokens; raise max_tokens "
                f"to at least {self.row_length} or use batch_size="
            )
        self.open_rows = check_int("open_rows", open_rows, minimum=1)
        self.overflow = check_choice("overflow", overflow, STREAM_OVERFLOW)
        self.last_batch = check_choice(
            "last_batch", last_batch, [x for x in PACK_LAST_BATCH if x != "fill"]
        )
        default = self.batch_size * self.row_length
        self.max_documents = check_int(
            "max_documents",
            default if max_documents is None else max_documents,
            minimum=self.batch_size,
        )
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._engine: Engine | None = None

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

    def collator(self, **kwargs: Any) -> Any:
        """``PackCollator(self.table, **kwargs)``; use
        ``DataLoader(stream, batch_size=None, collate_fn=stream.collator())``."""
        from bucketloader.pack.collator import PackCollator

        return PackCollator(self.table, **kwargs)

    def _pass_config(self) -> PassConfig:
        return PassConfig(
            source=self.source,
            measure=self._measure,
            row_length=self.row_length,
            batch_size=self.batch_size,
            max_per_row=self.max_documents // self.batch_size,
            open_rows=self.open_rows,
            stale_tokens=STALE_BUFFERS * self.open_rows * self.row_length,
            overflow=self.overflow,
            last_batch=self.last_batch,
            stateful=is_stateful(self.source),
            config=self._config(),
        )

    # -- iteration --------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass (and pass it on to a source with ``set_epoch``)."""
        self.epoch = check_int("epoch", epoch, minimum=0)

    def __iter__(self) -> Iterator[list[Any]]:
        info = torch.utils.data.get_worker_info()
        worker = (info.id, info.num_workers) if info is not None else (0, 1)
        state, self._resume = self._resume, None
        if state is not None:
            self.epoch = int(state["epoch"])
            if list(state["worker"]) != list(worker):
                raise ValueError(
                    f"state was saved by worker {state['worker']}, this is worker {list(worker)}"
                )
        if callable(getattr(self.source, "set_epoch", None)):
            self.source.set_epoch(self.epoch)
        engine = Engine(self._pass_config(), self.epoch, worker)
        self._engine = engine
        it = engine.resume(state) if state is not None else open_source(self.source, worker)
        return engine.run(it)

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the current (or last) pass in this process: ``read``, ``batches``,
        ``rows``, ``tokens`` (real tokens yielded), ``overflow_dropped``, ``truncated``,
        ``split``, ``tail_dropped``."""
        if self._engine is None:
            return {}
        e = self._engine
        return {**e.stats, "read": e.read, "batches": e.batches}

    # -- state ------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "row_length": self.row_length,
            "batch_size": self.batch_size,
            "open_rows": self.open_rows,
            "overflow": self.overflow,
            "last_batch": self.last_batch,
            "max_documents": self.max_documents,
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the current pass (after the last batch handed out)."""
        if self._resume is not None:
            return self._resume
        if self._engine is None:
            return Engine(self._pass_config(), self.epoch, (0, 1)).state_dict()
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the next ``iter()`` exactly where ``state`` was taken (strict checks)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"state must be a dict from PackIterable.state_dict() with format "
                f"{STATE_FORMAT}, got format {got!r}"
            )
        mine = self._config()
        for key, value in state["config"].items():
            if mine.get(key) != value:
                raise ValueError(
                    f"state has {key}={value!r}, but this PackIterable has {key}={mine.get(key)!r}"
                )
        if iter(self.source) is self.source:
            raise ValueError("cannot resume a one-shot iterator; pass a re-iterable source")
        if state["source"]["state"] is not None and not is_stateful(self.source):
            raise ValueError("state holds a source state_dict but the source cannot load one")
        self._resume = state

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}
