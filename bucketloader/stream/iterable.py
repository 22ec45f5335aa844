"""Length bucketing for streams: batches of exactly the planned shapes from any iterable.

Samples flow from the source (a Hugging Face ``IterableDataset``, a torch ``IterableDataset``, a
list, any iterable) through an optional bounded shuffle buffer into one buffer per bucket; a
bucket's buffer leaves as a batch as soon as it holds its planned batch size ``B_i``. Memory stays
at about ``sum(B_i) + shuffle_buffer`` samples. At the end of the stream the partial batches
follow ``last_batch`` exactly as in :class:`~bucketloader.sampler.BucketSampler`. Collate with
``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch.utils.data

from bucketloader._types import LAST_BATCH, OVERFLOW
from bucketloader._validation import check_choice, check_int
from bucketloader.boundaries import BucketLookup, check_boundaries
from bucketloader.plan import Cells, ShapeTable
from bucketloader.plan.budget import BatchRule
from bucketloader.stream._engine import STATE_FORMAT, Engine, PassConfig
from bucketloader.stream._source import is_stateful, make_length_fn, open_source, truncate
from bucketloader.stream.estimate import Estimate, solve_head

__all__ = ["BucketIterable", "bucketize"]

#: A stream plans every cell of its lattice, so the lattice is capped.
MAX_CELLS = 4096


class BucketIterable(torch.utils.data.IterableDataset):
    """An iterable of batches (lists of samples) whose padded shapes are exactly :attr:`shapes`.

    Args:
        source: the samples: an HF ``IterableDataset``, a torch ``IterableDataset`` or any
            iterable. Re-iterable sources give one pass per epoch; a one-shot iterator gives one.
        length_fn: ``None`` (``len(sample)``), a key (``len(sample[key])``, audio dicts measure
            their ``"array"``), a callable ``sample -> int``, or a tuple of keys to bucket
            several inputs jointly (e.g. ``("input_ids", "labels")``: a batch's cell is its
            bucket per input, ``B = max_tokens // (L_src + L_tgt)``).
        boundaries: the boundaries (array, a ``Solution`` or a ``BucketSampler`` — anything with
            ``.boundaries``; several inputs: a mapping key → array or a list in key order), or
            :func:`estimate` to estimate them from the head of the stream.
        batch_size: the same ``B`` for every bucket; or
        max_tokens: ``B_i = max_tokens // b_i`` padded elements per batch.
        last_batch: the partial batches left at the end of the stream: ``"pad"`` (yielded short;
            the collator pads rows, masked), ``"fill"`` (topped up with repeats from the same
            bucket), ``"drop"`` or ``"keep"`` (yielded short: smaller batch sizes, listed in
            :attr:`shapes`).
        shuffle_buffer: samples held in a bounded shuffle buffer before bucketing (0 = off).
        seed: randomness only from ``SeedSequence([seed, epoch, worker])``.
        overflow: samples longer than the last boundary: ``"error"``, ``"drop"`` (counted in
            :attr:`stats`), ``"truncate"`` (cut to the last boundary; dict samples cut every entry
            of the sample's length) or a callable ``(sample, max_length) -> sample`` (a tuple of
            last boundaries with several inputs).

    Under a ``DataLoader`` with workers each worker buckets its own shard (see NOTE [ Who shards
    the stream across DataLoader workers ] in :mod:`bucketloader.stream._source`).
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly (see NOTE [ Exact resume of
    a buffered stream ] in :mod:`bucketloader.stream._engine`).

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
        multi = isinstance(length_fn, (tuple, list))
        self._keys: tuple[Any, ...] = (
            tuple(length_fn) if multi else (length_fn if isinstance(length_fn, str) else None,)
        )
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
        self.solution: Any = None
        names = tuple(self._keys) if multi else ("length",)
        bounds = [
            check_boundaries(b, name="boundaries" if not multi else f"boundaries[{n!r}]")
            for b, n in zip(self._resolve(boundaries, names, multi), names, strict=True)
        ]
        ks = [b.size for b in bounds]
        if int(np.prod(ks)) > MAX_CELLS:
            raise ValueError(
                f"{' x '.join(map(str, ks))} buckets per input make {int(np.prod(ks))} shapes "
                f"(more than {MAX_CELLS}); use fewer buckets"
            )
        rule = BatchRule.parse(batch_size, max_tokens)
        # A stream cannot know which cells its samples will fill: every lattice point is planned.
        self.cells = Cells.build([bounds], names, rule=rule)
        if (self.cells.batch < 1).any():
            c = int(np.argmax(self.cells.batch < 1))
            raise ValueError(
                f"max_tokens={max_tokens} fits no sample of padded length(s) "
                f"{self.cells.lengths[c].tolist()}; raise max_tokens to at least "
                f"{int(self.cells.lengths.sum(axis=1).max())}"
            )
        self._lookups = tuple(BucketLookup(b) for b in bounds)
        self.batch_sizes = tuple(int(x) for x in self.cells.batch)
        self.boundaries: Any = dict(zip(names, bounds, strict=True)) if multi else bounds[0]
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._engine: Engine | None = None

    # -- planning ---------------------------------------------------------------------------
    def _resolve(self, boundaries: Any, names: tuple[str, ...], multi: bool) -> list[Any]:
        """Boundaries per input, from arrays, a mapping, a ``Solution`` / sampler or an estimate."""
        if isinstance(boundaries, Estimate):
            it = iter(self.source)
            head = list(itertools.islice(it, boundaries.sample_size))
            if it is self.source:  # a one-shot iterator: replay the head in the first pass
                self._prefix, self._rest = head, it
            solutions = solve_head(boundaries, head, self._length, len(names))
            self.solution = dict(zip(names, solutions, strict=True)) if multi else solutions[0]
            return [sol.boundaries for sol in solutions]
        if hasattr(boundaries, "boundaries") and not isinstance(boundaries, np.ndarray):
            boundaries = boundaries.boundaries
        if not multi:
            if isinstance(boundaries, Mapping):
                raise ValueError(
                    f"boundaries is a mapping (keys {list(boundaries)}) but length_fn measures "
                    "one input; pass length_fn=(key, key, ...) to bucket several inputs"
                )
            return [boundaries]
        if isinstance(boundaries, Mapping):
            missing = [n for n in names if n not in boundaries]
            if missing:
                raise KeyError(
                    f"boundaries has no entry for input {missing[0]!r}; give one per key of "
                    f"length_fn {list(names)}, got keys {list(boundaries)}"
                )
            return [boundaries[n] for n in names]
        if isinstance(boundaries, (str, bytes)) or len(boundaries) != len(names):
            raise ValueError(
                f"boundaries must give one array per input {list(names)} (a list or a mapping), "
                f"got {boundaries!r}"
            )
        return list(boundaries)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape a pass produces after collation, sorted (a promise).

        ``(B_c, L_1, ..., L_D)`` per cell (a bucket, or a combination of per-input buckets);
        with ``last_batch="keep"`` the stream's end may leave any smaller batch size, so every
        ``(r, L...)`` with ``1 <= r < B_c`` is listed too (``"pad"`` keeps one shape per cell).
        """
        return list(self.shape_table.shapes)

    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The planned shapes as a :class:`~bucketloader.plan.ShapeTable` (for the collator)."""
        full = list(self.cells.shapes)
        if self.last_batch == "keep":
            full += [(r, *s[1:]) for s in full for r in range(1, s[0])]
        return ShapeTable(cells=self.cells, shapes=tuple(sorted(full)), last_batch=self.last_batch)

    def collator(self, **kwargs: Any) -> Any:
        """A :class:`~bucketloader.collate.PadCollator` for these shapes (``kwargs`` as there).

        Use ``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``. With
        several inputs, name every variable field: ``fields={"input_ids": "input_ids",
        "attention_mask": "input_ids", "labels": "labels"}``.
        """
        from bucketloader.collate import PadCollator

        return PadCollator(self.shape_table, **kwargs)

    def _truncate(self, sample: Any, lengths: tuple[int, ...]) -> Any:
        limits = [lookup.limit for lookup in self._lookups]
        if callable(self.overflow):
            return self.overflow(sample, limits[0] if len(limits) == 1 else tuple(limits))
        for n, lim, key in zip(lengths, limits, self._keys, strict=True):
            if n > lim:
                sample = truncate(sample, n, lim, key)
        return sample

    def _pass_config(self) -> PassConfig:
        policy = self.overflow
        return PassConfig(
            source=self.source,
            measure=self._length,
            lookups=self._lookups,
            names=tuple(self.cells.input_names),
            batch_sizes=self.batch_sizes,
            last_batch=self.last_batch,
            shuffle_buffer=self.shuffle_buffer,
            seed=self.seed,
            overflow=policy if policy in ("error", "drop") else self._truncate,
            stateful=is_stateful(self.source) and self._prefix is None,
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
        blists = [lookup.boundaries.tolist() for lookup in self._lookups]
        return {
            "boundaries": blists[0] if len(blists) == 1 else blists,
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
            return Engine(self._pass_config(), self.epoch, (0, 1)).state_dict()
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
