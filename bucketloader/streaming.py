"""Length bucketing for streams: batches of exactly the planned shapes from any iterable.

Samples flow from the source (a Hugging Face ``IterableDataset``, a torch ``IterableDataset``, a
list, any iterable) through an optional bounded shuffle buffer into one buffer per bucket; a
bucket's buffer leaves as a batch as soon as it holds its planned batch size ``B_i``. Memory stays
at about ``sum(B_i) + shuffle_buffer`` samples. At the end of the stream the partial batches
follow ``last_batch`` exactly as in :class:`~bucketloader.sampler.BucketSampler`. Collate with
``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch.utils.data

from bucketloader._stream_engine import STATE_FORMAT, Engine
from bucketloader._stream_plan import Estimate, estimate, solve_head
from bucketloader._stream_source import (
    OVERFLOW,
    is_stateful,
    make_length_fn,
    open_source,
    truncate,
)
from bucketloader._validation import check_choice, check_int
from bucketloader.boundaries import assign_buckets, check_boundaries
from bucketloader.solve import Solution

__all__ = ["BucketIterable", "Estimate", "bucketize", "estimate"]

LAST_BATCH = ("drop", "fill", "keep", "pad")
_TABLE_LIMIT = 1 << 20


class BucketIterable(torch.utils.data.IterableDataset):
    """An iterable of batches (lists of samples) whose padded shapes are exactly :attr:`shapes`.

    Args:
        source: the samples: an HF ``IterableDataset``, a torch ``IterableDataset`` or any
            iterable. Re-iterable sources give one pass per epoch; a one-shot iterator gives one.
        length_fn: ``None`` (``len(sample)``), a key (``len(sample[key])``, audio dicts measure
            their ``"array"``) or a callable ``sample -> int``.
        boundaries: the boundaries (array, a ``Solution`` or a ``BucketSampler`` — anything with
            ``.boundaries``), or :func:`estimate` to estimate them from the head of the stream.
        batch_size: the same ``B`` for every bucket; or
        max_tokens: ``B_i = max_tokens // b_i`` padded elements per batch.
        last_batch: the partial batches left at the end of the stream: ``"pad"`` (yielded short;
            the collator pads rows, masked), ``"fill"`` (topped up with repeats from the same
            bucket), ``"drop"`` or ``"keep"`` (yielded short, an unplanned smaller batch size).
        shuffle_buffer: samples held in a bounded shuffle buffer before bucketing (0 = off).
        seed: randomness only from ``SeedSequence([seed, epoch, worker])``.
        overflow: samples longer than the last boundary: ``"error"``, ``"drop"`` (counted in
            :attr:`stats`), ``"truncate"`` (cut to the last boundary; dict samples cut every entry
            of the sample's length) or a callable ``(sample, max_length) -> sample``.

    Under a ``DataLoader`` with workers each worker buckets its own shard (see
    :mod:`bucketloader._stream_source`). ``state_dict()`` / ``load_state_dict()`` resume mid-epoch
    exactly (see NOTE [ Exact resume of a buffered stream ] in
    :mod:`bucketloader._stream_engine`).

    Example:
        >>> stream = BucketIterable(
        ...     [[1] * n for n in [3, 7, 2, 8, 4, 1]], boundaries=[4, 8], batch_size=2
        ... )
        >>> stream.shapes
        [(2, 4), (2, 8)]
        >>> [[len(s) for s in batch] for batch in stream]
        [[3, 2], [7, 8], [4, 1]]
    """

    def __init__(
        self,
        source: Any,
        *,
        length_fn: Any = None,
        boundaries: Any,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        last_batch: str = "pad",
        shuffle_buffer: int = 0,
        seed: int = 0,
        overflow: Any = "error",
    ) -> None:
        self.source = source
        self._length = make_length_fn(length_fn)
        self._key = length_fn if isinstance(length_fn, str) else None
        self.last_batch = check_choice("last_batch", last_batch, LAST_BATCH)
        self.shuffle_buffer = check_int("shuffle_buffer", shuffle_buffer, minimum=0)
        self.seed = check_int("seed", seed, minimum=0)
        if callable(overflow):
            self.overflow = overflow
        else:
            self.overflow = check_choice("overflow", overflow, OVERFLOW)
            if overflow == "truncate" and callable(length_fn):
                raise ValueError(
                    "overflow='truncate' cuts samples by their length_fn key or len(); with a "
                    "custom length_fn pass overflow=callable(sample, max_length) -> sample"
                )
        self._prefix: list[Any] | None = None
        self._rest: Iterator[Any] | None = None
        self.solution: Solution | None = None
        if isinstance(boundaries, Estimate):
            boundaries = self._estimate(boundaries)
        elif hasattr(boundaries, "boundaries") and not isinstance(boundaries, np.ndarray):
            boundaries = boundaries.boundaries
        self.boundaries = check_boundaries(boundaries)
        self.batch_sizes = _batch_sizes(self.boundaries, batch_size, max_tokens)
        self._batch_size, self._max_tokens = batch_size, max_tokens
        self._limit = int(self.boundaries[-1])
        self._blist = self.boundaries.tolist()
        self._bucket_table = (
            assign_buckets(np.arange(self._limit + 1), self.boundaries).tolist()
            if self._limit < _TABLE_LIMIT
            else None
        )
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._engine: Engine | None = None

    # -- planning ---------------------------------------------------------------------------
    def _estimate(self, est: Estimate) -> np.ndarray:
        it = iter(self.source)
        head = list(itertools.islice(it, est.samples))
        if it is self.source:  # a one-shot iterator: replay the head in the first pass
            self._prefix, self._rest = head, it
        solution = solve_head(est, head, self._length)
        self.solution = solution
        return solution.boundaries

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every batch shape a pass produces after collation, sorted (a promise).

        ``(B_i, b_i)`` per bucket; with ``last_batch="keep"`` the stream's end may leave any
        smaller batch size, so ``(r, b_i)`` for every ``1 <= r < B_i`` is listed too (use
        ``"pad"`` to keep just one shape per bucket).
        """
        full = [(int(n), int(b)) for n, b in zip(self.batch_sizes, self._blist, strict=True)]
        if self.last_batch == "keep":
            full += [(r, b) for n, b in full for r in range(1, n)]
        return sorted(full)

    @functools.cached_property
    def shape_table(self) -> Any:
        """The planned shapes as a :class:`~bucketloader.plan.ShapeTable` (for the collator)."""
        from bucketloader.plan import BucketSpec, shape_table

        spec = BucketSpec.build(
            self.boundaries,  # one representative per bucket: every bucket is a planned cell
            boundaries=self.boundaries,
            batch_size=self._batch_size,
            max_tokens=self._max_tokens,
            last_batch=self.last_batch,
        )
        return dataclasses.replace(shape_table(spec), shapes=tuple(sorted(self.shapes)))

    def collator(self, **kwargs: Any) -> Any:
        """A :class:`~bucketloader.collate.PadCollator` for these shapes (``kwargs`` as there).

        Use ``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``.
        """
        from bucketloader.collate import PadCollator

        return PadCollator(self.shape_table, **kwargs)

    def _truncate(self, sample: Any, length: int) -> Any:
        if callable(self.overflow):
            return self.overflow(sample, self._limit)
        return truncate(sample, length, self._limit, self._key)

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
        engine = Engine(self, self.epoch, worker)
        self._engine = engine
        if state is not None:
            it = engine.resume(state)
        elif self._prefix is not None:
            it = itertools.chain(self._prefix, self._rest or ())
            self._prefix, self._rest = [], None
        else:
            it = open_source(self.source, worker)
        return engine.run(it)

    @property
    def stats(self) -> dict[str, int]:
        """Counters of the current (or last) pass in this process: samples read, batches,
        ``overflow_dropped``, ``truncated``, ``tail_dropped`` (``"drop"``), ``repeated``
        (``"fill"``)."""
        if self._engine is None:
            return {}
        e = self._engine
        return {**e.stats, "read": e.read, "batches": e.batches}

    # -- state ------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "boundaries": self._blist,
            "batch_sizes": list(self.batch_sizes),
            "last_batch": self.last_batch,
            "shuffle_buffer": self.shuffle_buffer,
            "seed": self.seed,
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the current pass (after the last batch handed out)."""
        if self._resume is not None:
            return self._resume
        if self._engine is None:
            return Engine(self, self.epoch, (0, 1)).state_dict()
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the next ``iter()`` exactly where ``state`` was taken (strict checks)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"state must be a dict from BucketIterable.state_dict() with format "
                f"{STATE_FORMAT}, got format {got!r}"
            )
        mine = self._config()
        for key, value in state["config"].items():
            if mine.get(key) != value:
                raise ValueError(
                    f"state has {key}={value!r}, but this BucketIterable has "
                    f"{key}={mine.get(key)!r}"
                )
        if self._prefix is not None or (iter(self.source) is self.source):
            raise ValueError("cannot resume a one-shot iterator; pass a re-iterable source")
        if state["source"]["state"] is not None and not is_stateful(self.source):
            raise ValueError("state holds a source state_dict but the source cannot load one")
        self._resume = state

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}


def bucketize(source: Any, **options: Any) -> BucketIterable:
    """Bucket a stream: ``BucketIterable(source, **options)``.

    Example:
        >>> stream = bucketize(range(1, 9), length_fn=lambda n: n, boundaries=[4, 8], batch_size=4)
        >>> list(stream)
        [[1, 2, 3, 4], [5, 6, 7, 8]]
    """
    return BucketIterable(source, **options)


def _batch_sizes(boundaries: np.ndarray, batch_size: Any, max_tokens: Any) -> tuple[int, ...]:
    from bucketloader.plan import batch_sizes

    sizes = batch_sizes(boundaries, batch_size=batch_size, max_tokens=max_tokens)
    if (sizes < 1).any():
        i = int(np.argmax(sizes < 1))
        raise ValueError(
            f"max_tokens={max_tokens} fits no sample of bucket {i} (padded length "
            f"{int(boundaries[i])}); raise max_tokens to at least {int(boundaries[-1])}"
        )
    return tuple(int(x) for x in sizes)
