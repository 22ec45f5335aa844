"""Length bucketing for streams: batches of exactly the planned shapes from any iterable.

Samples flow from the source (a Hugging Face ``IterableDataset``, a torch ``IterableDataset``, a
list, any iterable) through an optional bounded shuffle buffer into one buffer per bucket; a
bucket's buffer leaves as a batch as soon as it holds its planned batch size ``B_i``. Memory stays
at about ``sum(B_i) + shuffle_buffer`` samples. At the end of the stream the partial batches
follow ``last_batch`` exactly as in :class:`~bucketloader.sampler.BucketSampler`. Collate with
``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``.

Split over ranks (``num_replicas > 1``, or ``steps_per_epoch``), every rank makes the same
number of steps with the same shape at each step (NOTE [ A stream split over ranks ] in
:mod:`bucketloader.stream._schedule`).

A stream resumes exactly, in one process or behind DataLoader workers (NOTE [ Resuming a stream
behind DataLoader workers ] in :mod:`bucketloader.stream.resume`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from typing_extensions import Unpack

from bucketloader._dist import (
    ARGUMENTS,
    STREAM_ESTIMATE,
    STREAM_SCHEDULE,
    STREAM_TEMPLATE,
    all_reduce_sum,
    borrow_sample,
    broadcast_lists,
    checkpoint,
    dist_ready,
    failing_together,
    gather_arguments,
    initialised,
    joins_group,
    resolve_ranks,
    world_size,
    would_join,
)
from bucketloader._types import LazyModule, LengthFn, Size
from bucketloader._validation import (
    MissingKeyError,
    check_collator_options,
    check_int,
    check_options,
    keyword_options,
)
from bucketloader.boundaries import BucketLookup, check_boundaries
from bucketloader.plan import BucketSpec, SamplingReport, ShapeTable
from bucketloader.plan.budget import resolve_size, size_values
from bucketloader.plan.cells import lattice_codes
from bucketloader.plan.shapes import SHAPE_OPTIONS, ShapeOptions, Shaping, plan_shapes
from bucketloader.stream._buckets import (
    FILL_VERSION,
    STATE_FORMAT,
    STATS,
    BucketConfig,
    BucketPass,
)
from bucketloader.stream._schedule import SCHEDULE_HEAD, step_shares
from bucketloader.stream.counters import LaneCounters, finished
from bucketloader.stream.estimate import Estimate, solve_head
from bucketloader.stream.resume import (
    ResumableStream,
    check_source,
    check_steps,
    lane_states,
    source_config,
    state_keys,
)
from bucketloader.stream.source import (
    check_length,
    check_length_columns,
    checkpoints_exactly,
    is_seekable,
    make_length_fn,
    open_source,
    truncate,
)

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader import collate
else:  # collate.PadCollator in annotations: NOTE [ Annotations that introspection can evaluate ]
    collate = LazyModule("bucketloader.collate")  # in bucketloader._types


__all__ = ["BucketIterable"]

#: A stream plans every cell of its lattice, so the lattice is capped.
MAX_CELLS = 4096
#: The state of a resume by replay (NOTE [ Resuming a stream behind DataLoader workers ]).
REPLAY_FORMAT = 3


#: The keys of each state format and their types.
_STATE_KEYS = state_keys(
    STATE_FORMAT,
    REPLAY_FORMAT,
    {"shuffle": list, "buckets": list, "draws": dict},
    {"cell_stats": list},
)


class BucketIterable(ResumableStream, state_keys=_STATE_KEYS):
    """An iterable of batches (lists of samples) whose padded shapes are exactly :attr:`shapes`.

    Args:
        source: the samples: an HF ``IterableDataset``, a torch ``IterableDataset`` or any
            iterable. Re-iterable sources give one pass per epoch; a one-shot iterator gives one.
            Split over ranks, it is *this rank's* shard (``split_dataset_by_node``, or
            ``samples[rank::world]``).
        length_fn: ``None`` (``len(sample)``; a dict by its ``"length"`` entry or its only
            sequence field, where ``len`` would count its keys and is refused), a key
            (``len(sample[key])``, audio dicts measure their ``"array"``), a callable
            ``sample -> int``, or a tuple of keys to bucket several inputs jointly (e.g.
            ``("input_ids", "labels")``: a batch's cell is its bucket per input,
            ``B = max_tokens // (L_src + L_tgt)``, or as ``size=`` says).
        boundaries: the boundaries (array, a ``Solution``, a ``BucketSampler`` or
            ``BucketSpec`` — anything with ``.boundaries``; several inputs: a mapping key → array
            or a list in key order), or :func:`estimate` to estimate them from the head of the
            stream. A stream plans every point of the per-input lattice, so a spec whose plan
            picked fewer cells (``max_shapes``, a joint plan) is refused.
        batch_size: the same ``B`` for every bucket, or per-bucket sizes (a sequence in bucket
            order, several inputs: lattice order; a mapping padded length → ``B``; a callable);
            or
        max_tokens: ``B_i = max_tokens // b_i`` padded elements per batch, an int or a
            :class:`~bucketloader.plan.TokenBudget` (``max_batch_size``, ``multiple_of``,
            ``oversize``; NOTE [ The batch-size rule ]).
        size: with several inputs, what ``max_tokens`` counts of a cell: ``"sum"`` of its padded
            lengths (default), ``"prod"`` (images' height x width: pixels) or a callable on the
            padded lengths tuple, as for :meth:`BucketSpec.build
            <bucketloader.plan.BucketSpec.build>`; a ``BucketSpec`` (or sampler) given as
            ``boundaries`` brings its own, which a different ``size=`` contradicts (an error).
        last_batch: the partial batches left at the end of the stream: ``"pad"`` (yielded short;
            the collator pads rows, masked), ``"fill"`` (topped up with repeats: the samples
            the bucket, then the buckets it covers, handed out last, then its own; NOTE
            [ What a stream's fill repeats ]), ``"drop"`` or ``"keep"`` (yielded short:
            smaller batch sizes, listed in :attr:`shapes`). With ``steps_per_epoch``: ``"pad"``
            or ``"fill"``.
        shuffle_buffer: samples held in a bounded shuffle buffer before bucketing (0 = off).
        seed: randomness only from ``SeedSequence([seed, epoch, worker])``.
        overflow: samples outside ``min_length`` / ``max_length`` (and longer than the last
            boundary): ``"error"``, ``"drop"`` (counted), ``"truncate"`` (cut to the limit; dict
            samples cut every entry of the sample's length; too-short samples are dropped) or a
            callable ``(sample, max_length) -> sample`` (a tuple of limits with several inputs).
            NOTE [ Length filters ].
        min_length, max_length: length filters, as for :class:`~bucketloader.BucketSampler`
            (an int or one per input); ``max_length`` defaults to the last boundary.
        pad_to_multiple_of: boundaries on multiples of this (or one per input): estimated
            boundaries are the optimum under the constraint, given ones are rounded up.
        num_replicas, rank: ranks (default: from ``torch.distributed``; ``rank`` is required
            with ``num_replicas > 1`` and no process group). With more than one,
            ``steps_per_epoch`` is required and every rank makes exactly that many steps, with
            the same shape at each step (NOTE [ A stream split over ranks ]).
        steps_per_epoch: fixed steps per epoch on every rank (``len(stream)``); ``None`` (one
            rank only): one pass over the source.
        checkpoint_dir: ``None`` (default): behind DataLoader workers a resume replays each
            worker's pass from the start of the epoch. A path of an existing directory: each
            worker also writes its exact state there every 4 batches (small JSON files in a
            private subdirectory, removed with the stream) and a resume restarts from the
            newest (NOTE [ Worker checkpoints ] in :mod:`bucketloader.stream.resume`).

    Under a ``DataLoader`` with workers each worker buckets its own shard (see NOTE [ Who shards
    the stream across DataLoader workers ] in :mod:`bucketloader.stream.source`).
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly, in one process or behind
    workers (NOTE [ Resuming a stream behind DataLoader workers ]); :meth:`report` counts what
    the pass did, also from the main process.

    Example:
        >>> stream = BucketIterable(
        ...     [[1] * n for n in [3, 7, 2, 8, 4, 1]], boundaries=[4, 8], batch_size=2
        ... )
        >>> stream.shapes
        [(2, 4), (2, 8)]
        >>> [[len(s) for s in batch] for batch in stream]
        [[3, 2], [7, 8], [4, 1]]
    """

    #: The fill version in a state's ``config`` (:meth:`_check_versions`), not an option.
    VERSION_KEYS = ("fill",)

    def __init__(
        self,
        source: Iterable[Any],
        *,
        length_fn: LengthFn = None,
        boundaries: Any = None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        steps_per_epoch: int | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        **options: Unpack[ShapeOptions],
    ) -> None:
        # (up to its last collective: a rank refused before one stops the others there, named;
        # NOTE [ Checkpoints before a collective ] in bucketloader._dist)
        joins = would_join(num_replicas, rank) or _collects(
            num_replicas, boundaries, steps_per_epoch
        )
        with failing_together(joins):
            given = {k: v for k, v in options.items() if k in ("max_shapes", "strategy")}
            if given:  # (was "needs boundaries=", then "did you mean max_tokens=?")
                given_s = ", ".join(f"{k}={v!r}" for k, v in given.items())
                raise TypeError(
                    f"BucketIterable got {given_s}, a sampler's plan: a stream plans every point "
                    "of its lattice (it cannot know which cells its samples will fill), so pass "
                    "boundaries=estimate(num_buckets) (from bucketloader.stream) or a BucketSpec "
                    "with few buckets per input (num_buckets=[k1, k2]: k1 * k2 shapes); for a "
                    "joint plan of max_shapes cells use a BucketSampler on a map-style dataset "
                    "(docs/streams.md)"
                )
            # (was Python's "missing ... argument", also beside num_buckets=)
            if boundaries is None:
                k = options.get("num_buckets")  # type: ignore[typeddict-item]
                raise TypeError(
                    "BucketIterable needs boundaries=: a stream's lengths are not known up front, "
                    f"so pass boundaries=estimate({'num_buckets' if k is None else repr(k)}) (from "
                    "bucketloader.stream: solved on the head of the stream), the boundaries "
                    "themselves, or a BucketSpec built on a sample of the lengths"
                )
            self.source = check_source(source)
            self._length = make_length_fn(length_fn)
            check_length_columns(self.source, length_fn)  # (NOTE [ Numbers written as text ])
            self._measured_by_callable = callable(length_fn)
            multi = isinstance(length_fn, (tuple, list))
            self._keys: tuple[Any, ...] = (
                tuple(length_fn)
                if isinstance(length_fn, (tuple, list))
                else (length_fn if isinstance(length_fn, str) else None,)
            )
            names = tuple(self._keys) if multi else ("length",)
            check_options(
                "BucketIterable", options, [*keyword_options(BucketIterable), *SHAPE_OPTIONS]
            )
            options = _spec_batch_rule(boundaries, options)
            shaping = Shaping.parse(names, allow_callable=True, **options)
            self.last_batch = shaping.last_batch
            self.shuffle_buffer = check_int("shuffle_buffer", shuffle_buffer, minimum=0)
            self.seed = check_int("seed", seed, minimum=0)
            self.limits = shaping.limits
            self.overflow = self.limits.overflow
            if self.overflow == "truncate" and callable(length_fn):
                raise ValueError(
                    "overflow='truncate' cuts samples by their length_fn key or len(); with a "
                    "custom length_fn pass overflow=callable(sample, max_length) -> sample"
                )
            self.num_replicas, self.rank = resolve_ranks(num_replicas, rank)
            self.steps_per_epoch = check_steps(
                steps_per_epoch,
                self.num_replicas,
                self.last_batch,
                per_step="samples per rank / mean batch size (report() shows left_over and "
                "padded_rows to tune it)",
                pad="short batches get masked rows",
            )
            # the head a one-shot source gave the constructor (estimate, schedule, template),
            # replayed first in its one pass; never set for a re-iterable source, read again
            self._prefix: list[Any] | None = None
            self._rest: Iterator[Any] | None = None
            self.solution: Any = None
            bounds = self._resolve(boundaries, shaping, multi)
            ks = [b.size for b in bounds]
            if int(np.prod(ks)) > MAX_CELLS:
                raise ValueError(
                    f"{' x '.join(map(str, ks))} buckets per input make {int(np.prod(ks))} shapes "
                    f"(more than {MAX_CELLS}); use fewer buckets"
                )
            self._maximum = self._limits_within(bounds, names)
            _refuse_merged_cells(boundaries, bounds)
            rule = shaping.rule
            # A stream cannot know which cells its samples will fill: every lattice point is
            # planned. NOTE [ A stream counts max_tokens as its spec does ]: a BucketSpec (or
            # sampler) given as boundaries= carries its size rule; session 21's image stream
            # took a spec planned with size="prod" (pixels) and counted max_tokens as height +
            # width, so every batch held about 20 times the pixels the spec planned.
            planned = getattr(boundaries, "spec", boundaries)
            size = _stream_size(
                options.get("size"),
                planned.size if isinstance(planned, BucketSpec) else None,
                len(names),
            )
            self.cells = plan_shapes(shaping, [bounds], size=size)
            usable = self.cells.batch > 0
            if not usable.all() and (rule.oversize == "error" or not usable.any()):
                c = int(np.argmin(usable))
                sizes = size_values(self.cells.lengths, size)
                need = int(sizes[c])
                raise ValueError(
                    f"max_tokens={rule.budget.max_tokens if rule.budget else None} fits no sample "
                    f"of padded length(s) {self.cells.lengths[c].tolist()}; raise max_tokens to at "
                    f"least {int(sizes.max())}, lower max_length, or pass "
                    f"max_tokens=TokenBudget(..., oversize='single' | 'drop') (at least {need} for "
                    "this bucket)"
                )
            self._lookups = tuple(BucketLookup(b) for b in bounds)
            self.batch_sizes = tuple(int(x) for x in self.cells.batch)
            self.boundaries: Any = dict(zip(names, bounds, strict=True)) if multi else bounds[0]
            self._covers = _covers(self.cells.lengths)
            if joins_group(num_replicas, rank, self.num_replicas):
                # NOTE [ Ranks agree on the plan ]: before the schedule's all_reduce, whose
                # tensor has one entry per cell
                agreed = {
                    "boundaries": [b.tolist() for b in bounds],
                    "batch_sizes": list(self.batch_sizes),
                    "last_batch": self.last_batch,
                    "seed": self.seed,
                    "steps_per_epoch": self.steps_per_epoch,
                    "limits": self.limits.config() if self.limits.active else None,
                }
                checkpoint(ARGUMENTS)
                gather_arguments(type(self).__name__, agreed, self.num_replicas, self.rank)
            self._shares = (
                None if steps_per_epoch is None else self._schedule_shares(boundaries, bounds)
            )
            self._template = None if steps_per_epoch is None else self._borrow_template()
        self._counters = LaneCounters(STATS, self.cells.num_cells)
        self._lane_states = lane_states(checkpoint_dir)
        self.epoch = 0
        self._resume: dict[str, Any] | None = None
        self._engine: BucketPass | None = None

    # -- planning ---------------------------------------------------------------------------
    def _resolve(self, boundaries: Any, shaping: Shaping, multi: bool) -> list[np.ndarray]:
        """Boundaries per input, from arrays, a mapping, a ``Solution`` / sampler or an estimate."""
        names, multiples = shaping.names, list(shaping.multiples)
        if isinstance(boundaries, Estimate):
            return self._estimate(boundaries, names, multi, multiples)
        if hasattr(boundaries, "boundaries") and not isinstance(boundaries, np.ndarray):
            boundaries = boundaries.boundaries
        if isinstance(boundaries, tuple) and boundaries and isinstance(boundaries[0], tuple):
            if len(boundaries) != 1:  # a BucketSpec's per-group boundaries
                raise ValueError(
                    "boundaries come from a plan with several groups; a stream has one set of "
                    "boundaries: pick one group's"
                )
            boundaries = list(boundaries[0]) if multi else boundaries[0][0]
        if not multi:
            if isinstance(boundaries, Mapping):
                raise ValueError(
                    f"boundaries is a mapping (keys {list(boundaries)}) but length_fn measures "
                    "one input; pass length_fn=(key, key, ...) to bucket several inputs"
                )
            given = [boundaries]
        elif isinstance(boundaries, Mapping):
            missing = [n for n in names if n not in boundaries]
            if missing:
                raise MissingKeyError(
                    f"boundaries has no entry for input {missing[0]!r}; give one per key of "
                    f"length_fn {list(names)}, got keys {list(boundaries)}"
                )
            extra = [k for k in boundaries if k not in names]
            if extra:
                raise MissingKeyError(
                    f"boundaries has an entry for {extra[0]!r}, which length_fn does not measure; "
                    f"give one per key of length_fn {list(names)}, got keys {list(boundaries)}"
                )
            given = [boundaries[n] for n in names]
        elif isinstance(boundaries, (str, bytes)) or len(boundaries) != len(names):
            raise ValueError(
                f"boundaries must give one array per input {list(names)} (a list or a mapping), "
                f"got {boundaries!r}"
            )
        else:
            given = list(boundaries)
        return [shaping.given(b, d) for d, b in enumerate(given)]

    def _estimate(
        self, est: Estimate, names: tuple[str, ...], multi: bool, multiples: list[int]
    ) -> list[np.ndarray]:
        """Estimate the boundaries from the head (on rank 0, sent to every rank, when split;
        a rank whose own head fails the estimate first stops every rank, named)."""
        options = dict(est.options)
        for m in set(multiples) - {1}:
            if options.setdefault("pad_to_multiple_of", m) != m or len(set(multiples)) > 1:
                raise ValueError(
                    f"pad_to_multiple_of={multiples} disagrees with the estimate's "
                    f"pad_to_multiple_of={options['pad_to_multiple_of']}; give it once"
                )
        tops = {m for m in self.limits.max_length if m is not None}
        if est.max_length is None and len(tops) == 1 and None not in self.limits.max_length:
            est = dataclasses.replace(est, max_length=tops.pop())
        est = dataclasses.replace(est, options=options)
        if self.num_replicas > 1:  # each rank's own head: the cache's shared lookup expects one
            # key on every rank (a ValueError on every rank, s20), and rank 0's answer is sent
            est = dataclasses.replace(est, cache=_local_cache(est.cache))
        if self.num_replicas > 1 and not dist_ready(self.num_replicas):
            raise ValueError(
                f"boundaries=estimate(...) on {self.num_replicas} ranks needs an initialised "
                "torch.distributed process group (rank 0 estimates, every rank receives its "
                "boundaries); without one, pass the same boundaries to every rank"
            )
        # (this rank's own shard: an error here reaches the others at the checkpoint below,
        # told by the constructor)
        it = iter(self.source)
        head = list(itertools.islice(it, est.sample_size))
        if it is self.source:  # a one-shot iterator: replay the head in the first pass
            self._prefix, self._rest = head, it
        solutions = solve_head(est, head, self._length, len(names))
        self.solution = dict(zip(names, solutions, strict=True)) if multi else solutions[0]
        bounds = [sol.boundaries.tolist() for sol in solutions]
        if self.num_replicas > 1:
            checkpoint(STREAM_ESTIMATE)
            bounds = broadcast_lists(bounds)
        return [check_boundaries(b) for b in bounds]

    def _limits_within(self, bounds: list[np.ndarray], names: tuple[str, ...]) -> tuple[int, ...]:
        """The longest admitted length per input: ``max_length`` or the last boundary."""
        out = []
        for b, n, top in zip(bounds, names, self.limits.max_length, strict=True):
            last = int(b[-1])
            if top is not None and top > last:
                label = "max_length" if len(names) == 1 else f"max_length[{n!r}]"
                raise ValueError(
                    f"{label}={top} is beyond the last boundary {last}, so samples up to "
                    f"{label} would have no bucket; append {top} to the boundaries or lower "
                    f"{label}"
                )
            out.append(last if top is None else top)
        return tuple(out)

    def _schedule_shares(self, given: Any, bounds: list[np.ndarray]) -> np.ndarray:
        """Expected share of steps per cell (NOTE [ A stream split over ranks ])."""
        spec = getattr(given, "spec", given)
        if isinstance(spec, BucketSpec) and spec.groups is None:
            codes = lattice_codes(bounds, spec.cell_lengths)
            counts = np.bincount(codes, weights=spec.counts, minlength=self.cells.num_cells)
            return step_shares(counts, self.cells.batch)
        if self.num_replicas > 1 and not dist_ready(self.num_replicas):
            raise ValueError(
                f"a stream split over {self.num_replicas} ranks measures its bucket schedule on "
                "the head of every rank's shard and sums the counts over ranks, which needs an "
                "initialised torch.distributed process group; without one, pass boundaries= a "
                "BucketSampler or BucketSpec built on a sample of the lengths (its counts set "
                "the schedule)"
            )
        counts = np.zeros(self.cells.num_cells, dtype=np.int64)
        self._count_head(bounds, counts)  # (an error: told at the checkpoint, as above)
        if self.num_replicas > 1:
            checkpoint(STREAM_SCHEDULE)
            counts = all_reduce_sum(counts)
        return step_shares(counts, self.cells.batch)

    def _count_head(self, bounds: list[np.ndarray], counts: np.ndarray) -> None:
        """Count the first :data:`SCHEDULE_HEAD` samples of this rank's shard into ``counts``
        (one per cell), as the stream would bucket them."""
        if self._prefix is not None:
            head = self._prefix[:SCHEDULE_HEAD]
        else:
            it = iter(self.source)
            head = list(itertools.islice(it, SCHEDULE_HEAD))
            if it is self.source:
                self._prefix, self._rest = head, it
        lo = [0 if m is None else m for m in self.limits.min_length]
        for i, sample in enumerate(head):
            got = self._length(sample)
            row = [check_length(x, i) for x in (got if len(bounds) > 1 else (got,))]
            if any(n < m for n, m in zip(row, lo, strict=True)):
                continue
            over = any(n > m for n, m in zip(row, self._maximum, strict=True))
            if over and self.overflow != "truncate":
                continue
            row = [min(n, m) for n, m in zip(row, self._maximum, strict=True)]
            counts[int(lattice_codes(bounds, np.array([row]))[0])] += 1

    def _borrow_template(self) -> Any:
        """The first sample of this rank's shard, else (with a process group) another rank's:
        the structure of a padding row for a lane that reads nothing (NOTE [ A stream split
        over ranks ])."""
        if self._prefix is not None:
            own = self._prefix[0] if self._prefix else None
        else:
            # (this rank's own shard, read first here when a spec set the schedule: an error
            # is told at the checkpoint, as above)
            it = iter(self.source)
            head = list(itertools.islice(it, 1))
            if it is self.source:  # a one-shot iterator: replay the sample in the first pass
                self._prefix, self._rest = head, it
            own = head[0] if head else None
        if dist_ready(self.num_replicas):
            checkpoint(STREAM_TEMPLATE)
            return borrow_sample(own)
        return own

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape a pass produces after collation, sorted (a promise).

        ``(B_c, L_1, ..., L_D)`` per cell (a bucket, or a combination of per-input buckets);
        with ``last_batch="keep"`` the stream's end may leave any smaller batch size, so every
        ``(r, L...)`` with ``1 <= r < B_c`` is listed too (``"pad"`` keeps one shape per cell).
        Cells that ``TokenBudget(oversize="drop")`` leaves out have no shape.
        """
        return list(self.shape_table.shapes)

    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The planned shapes as a :class:`~bucketloader.plan.ShapeTable` (for the collator)."""
        full = [s for s in self.cells.shapes if s[0] > 0]
        if self.last_batch == "keep":
            full += [(r, *s[1:]) for s in full for r in range(1, s[0])]
        return ShapeTable(
            cells=self.cells,
            shapes=tuple(sorted(full)),
            last_batch=self.last_batch,
            # a fill tops a short batch up with shorter samples after its own (NOTE [ What a
            # stream's fill repeats ] in bucketloader.stream.resume): the batch takes its first
            # sample's cell (s23-rev: a one-pass stream's tail, whose batches carry no planned
            # shape, was refused as "samples of one batch fall in different buckets")
            promoted=self.last_batch == "fill",
        )

    def collator(self, **kwargs: Any) -> collate.PadCollator:
        """A :class:`~bucketloader.collate.PadCollator` for these shapes (``kwargs`` as there).

        Use ``DataLoader(stream, batch_size=None, collate_fn=stream.collator(...))``. With
        several inputs, name every variable field: ``fields={"input_ids": "input_ids",
        "attention_mask": "input_ids", "labels": "labels"}``.
        """
        from bucketloader.collate import PadCollator

        check_collator_options(f"{type(self).__name__}.collator()", PadCollator, kwargs)
        return PadCollator(self.shape_table, **kwargs)

    def _truncate(self, sample: Any, lengths: tuple[int, ...]) -> Any:
        limits = list(self._maximum)
        if callable(self.overflow):
            return self.overflow(sample, limits[0] if len(limits) == 1 else tuple(limits))
        for n, lim, key in zip(lengths, limits, self._keys, strict=True):
            if n > lim:
                sample = truncate(sample, n, lim, key)
        return sample

    def _cut_to(self, sample: Any, lengths: tuple[int, ...], limits: list[int]) -> Any:
        """``sample`` cut to ``limits`` (a stand-in for a padding row; its content is masked)."""
        if callable(self.overflow):
            return self.overflow(sample, limits[0] if len(limits) == 1 else tuple(limits))
        if self._measured_by_callable:
            raise ValueError(
                "a stream split over ranks had to make a padding row for a step with no sample "
                "that fits, which needs a sample cut to the bucket; with a callable length_fn "
                "pass overflow=callable(sample, max_length) -> sample"
            )
        for n, lim, key in zip(lengths, limits, self._keys, strict=True):
            if n > lim:
                sample = truncate(sample, n, lim, key)
        return sample

    def _pass_config(self) -> BucketConfig:
        policy = self.overflow
        return BucketConfig(
            source=self.source,
            measure=self._length,
            lookups=self._lookups,
            names=tuple(self.cells.input_names),
            batch_sizes=self.batch_sizes,
            last_batch=self.last_batch,
            shuffle_buffer=self.shuffle_buffer,
            seed=self.seed,
            overflow=policy if policy in ("error", "drop") else self._truncate,
            stateful=checkpoints_exactly(self.source) and self._prefix is None,
            seekable=is_seekable(self.source) and self._prefix is None,
            config=self._config(),
            minimum=tuple(0 if m is None else m for m in self.limits.min_length),
            maximum=self._maximum,
            cell_size=tuple(int(x) for x in self.cells.lengths.sum(axis=1)),
            counters=self._counters,
            schedule=self._shares,
            steps=self.steps_per_epoch or 0,
            rank=self.rank,
            covers=self._covers,
            shapes=self.cells.shapes,
            cut=self._cut_to,
            template=self._template,
            lane_states=self._lane_states,
        )

    # -- iteration --------------------------------------------------------------------------
    def _new_engine(self, worker: tuple[int, int], skip: int) -> BucketPass:
        return BucketPass(self._pass_config(), self.epoch, worker, skip=skip)

    def _open(self, worker: tuple[int, int]) -> Iterator[Any]:
        if self._prefix is not None:  # the samples read to estimate boundaries come first
            it = itertools.chain(self._prefix, self._rest or ())
            self._prefix, self._rest = [], None
            return it
        return open_source(self.source, worker)

    def report(self) -> SamplingReport:
        """What the current (or last) pass did, summed over this rank's DataLoader workers and
        visible from the main process (NOTE [ A stream's counters across DataLoader workers ]):
        samples read, filtered, dropped, repeated, promoted, padding per bucket, batches made
        and, with ``steps_per_epoch``, batches left."""
        lanes = self._counters.lanes(self.epoch)
        names = (
            "too_short",
            "too_long",
            "oversize",
            "truncated",
            "repeated",
            "promoted",
            "left_over",
            "padded_rows",
        )
        total = {k: sum(lane[k] for lane in lanes) for k in (*names, "read", "tail_dropped")}
        done = sum(lane["batches"] for lane in lanes)
        totals = {
            "samples": total["read"],
            **{k: total[k] for k in names[:4]},
            "dropped": total["tail_dropped"],
            **{k: total[k] for k in names[4:]},
            "batches": done,
        }
        zero = sum(lane["zero_length"] for lane in lanes)
        if zero:  # NOTE [ Samples of length 0 ] in bucketloader.plan.limits
            totals["zero_length"] = zero
        per_cell = self._counters.cells(self.epoch)
        cells = tuple(
            {
                "shape": tuple(int(x) for x in shape),
                "batches": int(per_cell[0, c]),
                "rows": int(per_cell[1, c]),
                "real": int(per_cell[2, c]),
                "padded": int(per_cell[3, c]),
            }
            for c, shape in enumerate(self.cells.shapes)
            if shape[0] > 0
        )
        if self.steps_per_epoch is not None:
            left: int | None = self.steps_per_epoch - done
        else:
            left = 0 if finished(lanes) else None
        return SamplingReport(
            epoch=self.epoch,
            totals=totals,
            cells=cells,
            batches_done=done,
            batches_left=left,
            samples_left=None,
            source="stream",
            extra={
                "workers": lanes[0]["lanes"] if lanes else 0,
                "workers_counted": len(lanes),
            },
        )

    # -- state ------------------------------------------------------------------------------
    def _varies_by_epoch(self) -> bool:
        return self.shuffle_buffer > 0 or super()._varies_by_epoch()

    def _config(self) -> dict[str, Any]:
        blists = [lookup.boundaries.tolist() for lookup in self._lookups]
        config = {
            "boundaries": blists[0] if len(blists) == 1 else blists,
            "batch_sizes": list(self.batch_sizes),
            "last_batch": self.last_batch,
            "shuffle_buffer": self.shuffle_buffer,
            "seed": self.seed,
        }
        if self.limits.active:
            config["limits"] = self.limits.config()
        if self.last_batch == "fill":  # NOTE [ What a stream's fill repeats ] in stream.resume
            config["fill"] = FILL_VERSION
        if self.steps_per_epoch is not None:
            config.update(
                num_replicas=self.num_replicas,
                steps_per_epoch=self.steps_per_epoch,
                schedule=[round(float(x), 12) for x in self._shares],  # type: ignore[union-attr]
            )
        return {**config, **source_config(self.source)}  # (NOTE [ A stream state names
        # the files it read ] in stream.arrow)

    def _check_versions(self, state: dict[str, Any]) -> None:
        """Refuse a state whose ``last_batch="fill"`` completed short batches another way
        (:data:`~bucketloader.stream._buckets.FILL_VERSION`)."""
        self._check_fill_version(
            state,
            FILL_VERSION,
            "copies of its own samples (a bucketloader before fill versions were recorded)",
            "the samples the bucket handed out last first",
        )

    def _check_buffers(self, state: dict[str, Any]) -> None:
        read, k = state["read"], self.cells.num_cells
        held = [state["shuffle"], *state["buckets"]] if len(state["buckets"]) == k else None
        fill = state.get("fill", {})  # (last_batch="fill": NOTE [ What a stream's fill
        # repeats ] in stream.resume: a one-pass stream's last batches, and the appearances
        # of the samples repeated)
        last = fill.get("last", []) if isinstance(fill, dict) else None
        seen = fill.get("seen", []) if isinstance(fill, dict) else None
        if not isinstance(last, list) or not isinstance(seen, list):
            held = None
        else:
            pairs = [(x, k, list) for x in last] + [(x, read, int) for x in seen]
            if held is not None and all(
                isinstance(x, list)
                and len(x) == 2
                and isinstance(x[0], int)
                and 0 <= x[0] < top
                and isinstance(x[1], kind)
                for x, top, kind in pairs
            ):
                held += [x[1] for x in last]
            else:
                held = None
        draws = state["draws"]
        if (
            held is None
            or not all(isinstance(b, list) for b in held)
            or not all(isinstance(p, int) and 0 <= p < read for b in held for p in b)
            or not {"start", "used"} <= set(draws)
        ):
            raise ValueError(
                f"state's buffers do not fit this BucketIterable ({k} buckets, {read} samples "
                "read): pass a dict from BucketIterable.state_dict(), unedited"
            )


def _collects(num_replicas: Any, boundaries: Any, steps_per_epoch: Any) -> bool:
    """Whether a stream given ``rank=`` and ``num_replicas=`` both (no check of arguments) makes
    collectives all the same: the group's ranks, with an estimate (rank 0's boundaries are sent)
    or a schedule (the heads' counts are summed, the padding template shared)."""
    if not initialised() or num_replicas is None or world_size() <= 1:
        return False
    steps = isinstance(boundaries, Estimate) or steps_per_epoch is not None
    return bool(num_replicas == world_size()) and steps


def _local_cache(cache: Any) -> Any:
    """``cache``, looked up by this rank alone (a :class:`~bucketloader.cache.BucketCache` with
    ``distributed=False``): what a rank's estimate on its own head uses."""
    from bucketloader.cache import BucketCache

    if cache is True:
        return BucketCache(distributed=False)
    if isinstance(cache, BucketCache) and cache.distributed:
        local = copy.copy(cache)
        local.distributed = False
        return local
    return cache


def _spec_batch_rule(boundaries: Any, options: Any) -> Any:
    """``options`` with the batch rule of a :class:`BucketSpec` (or a sampler's) given as
    ``boundaries=`` when neither ``batch_size`` nor ``max_tokens`` is: the spec was planned with
    it, and a stream asked for it again ("pass exactly one of batch_size or max_tokens", found by
    s22-fill-second). Per-bucket batch sizes stay the caller's to give: a stream plans every
    lattice point, which a spec's own cells need not be.

    Example:
        >>> spec = BucketSpec.build([3, 5, 9], boundaries=[4, 9], max_tokens=36)
        >>> _spec_batch_rule(spec, {})["max_tokens"].max_tokens
        36
    """
    planned = getattr(boundaries, "spec", boundaries)
    rule = planned.rule if isinstance(planned, BucketSpec) else None
    if rule is None or "batch_size" in options or "max_tokens" in options:
        return options
    if rule.batch_size is not None:
        return {**options, "batch_size": rule.batch_size}
    if rule.budget is not None:
        return {**options, "max_tokens": rule.budget}
    return options


def _stream_size(size: Any, planned: Size | None, inputs: int = 2) -> Size:
    """What ``max_tokens`` counts of a stream's cell: ``size=``, else the ``BucketSpec``'s given
    as ``boundaries`` (NOTE [ A stream counts max_tokens as its spec does ]), else ``"sum"``;
    the two given and different are refused (with one input ``"sum"`` and ``"prod"`` agree).

    Example:
        >>> _stream_size(None, "prod"), _stream_size("prod", None), _stream_size(None, None)
        ('prod', 'prod', 'sum')
        >>> _stream_size("prod", "sum", inputs=1)
        'sum'
    """
    if size is None:
        return planned or "sum"
    size = resolve_size(size)
    if planned is not None and size != planned:
        if inputs == 1 and {size, planned} <= {"sum", "prod"}:
            return planned  # (one length: its sum is its product)
        raise ValueError(
            f"size={size!r} contradicts the BucketSpec given as boundaries, planned with "
            f"size={planned!r} (what max_tokens counts of a cell): leave size= out, or build the "
            f"spec with size={size!r}"
        )
    return size


def _refuse_merged_cells(given: Any, bounds: list[np.ndarray]) -> None:
    """A spec (or sampler) whose cells are fewer than its samples' lattice points (a joint plan,
    or ``max_shapes`` merging cells) is refused: a stream plans every lattice point, so it would
    silently make many more shapes than the spec promises (``Cells.build`` without occupancy)."""
    spec = getattr(given, "spec", given)
    if len(bounds) < 2 or not isinstance(spec, BucketSpec) or len(spec.boundaries) != 1:
        return
    bs = spec.boundaries[0]  # the spec's own lattice (the stream may round or cap its copy)
    keep = spec.cell_of_sample >= 0
    tops = np.array([int(b[-1]) for b in bs], dtype=np.int64)
    own = lattice_codes(bs, np.minimum(spec.lengths[keep], tops))  # truncated: at the top
    cells = lattice_codes(bs, spec.cell_lengths)[spec.cell_of_sample[keep]]
    if spec.joint is None and np.array_equal(own, cells):
        return
    how = "a joint plan" if spec.joint is not None else "max_shapes merged cells"
    lattice = " x ".join(str(b.size) for b in bounds)
    raise ValueError(
        f"boundaries is a {type(given).__name__} whose plan has {spec.cells.lengths.shape[0]} "
        f"shapes ({how}), but a stream plans every point of the per-input lattice: "
        f"{lattice} = {int(np.prod([b.size for b in bounds]))} shapes here, with the padding "
        "of their partial batches. Build the spec without max_shapes and with few buckets "
        "per input (num_buckets=[k1, k2]: k1 * k2 shapes), pass boundaries=spec.boundaries[0] "
        "to accept the lattice knowingly, or use a BucketSampler on a map-style dataset"
    )


def _covers(lengths: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Per cell, the other cells it covers (shorter or equal in every input), nearest first."""
    size = lengths.sum(axis=1)
    out = []
    for c in range(lengths.shape[0]):
        inside = np.flatnonzero((lengths <= lengths[c]).all(axis=1))
        inside = inside[inside != c]
        out.append(tuple(int(x) for x in inside[np.argsort(-size[inside], kind="stable")]))
    return tuple(out)
