"""ShardedSampler: static-shape batches when every rank holds only its own shard of the data.

``BucketSampler`` gives every rank every length and plans every rank's epoch: memory and time
grow with the whole data set on every rank. A :class:`ShardedSampler` takes only its rank's
lengths (the rows that rank reads: its Parquet files, WebDataset tars or streaming shards) and
the per-shard length histograms (small: one count per distinct length), merged into the global
histogram. Boundaries come from the global histogram (the exact solve over every sample), or,
when the shards are small and it pads measurably less, from the shards' envelope (NOTE [ Sharded
plan ] 6 in :mod:`bucketloader.plan.sharded`); the schedule (which shape at each step) from a
``ranks x K`` table of per-cell counts, so every rank
takes the same steps with the same shapes and no per-step communication (NOTE [ Sharded plan ]
in :mod:`bucketloader.plan.sharded`).

By default every sample of every shard is in every epoch and each bucket's slots follow the
fullest rank; ``defer=`` lets a fuller rank's excess wait for the next epoch instead, so the slots
follow what the ranks can fill (NOTE [ Sharded plan ] 7); ``exchange=True`` (when every rank can
read every row, named by ``shard_indices=``) lets a fuller rank hand its excess to the ranks with
room, once when the sampler is built (NOTE [ Sharded plan ] 8). ``last_batch="fill"`` (with any
of them) tops the slots a rank's samples leave empty up with repeats of its samples instead of
masked filler rows (NOTE [ Sharded plan ] 9). ``docs/sharded.md`` has the trade.

The histograms come from ``shard_histograms=`` (e.g. from the engines that measured the shards,
or a simulation), or, when left out under ``torch.distributed``, from one ``all_gather`` of each
rank's histogram (and of its configuration digest, so a rank with another seed, options or
data is named on every rank instead of hanging a collective later).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import numbers
import warnings
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from bucketloader._dist import (
    check_agreement,
    default_ranks,
    gather_arguments,
    initialised,
    send_error,
    world_size,
)
from bucketloader._samples import DatasetView, load_samples
from bucketloader._validation import (
    MAX_LENGTH,
    MAX_REPLICAS,
    as_lengths,
    check_bool,
    check_collator_options,
    check_int,
    check_options,
    keyword_options,
)
from bucketloader.boundaries import assign_buckets, check_boundaries, round_up
from bucketloader.histogram import LengthHistogram
from bucketloader.plan.budget import BatchRule
from bucketloader.plan.cells import Cells
from bucketloader.plan.report import warn_fill_repeats
from bucketloader.plan.sharded import (
    ShardEpochPlan,
    ShardSchedule,
    dealt_histogram,
    defer_table,
    envelope_of,
    exchange_cells,
    exchange_moves,
    exchange_table,
    fill_appearances,
    give_rows,
    plan_shard_epoch,
    shard_schedule,
    take_rows,
)
from bucketloader.plan.spec import cell_dtype, count_cells, sort_by_cell
from bucketloader.plan.table import PlannedBatch, ShapeTable
from bucketloader.sampler import LOSS_WARNING, EpochSampler
from bucketloader.solve import compute_boundaries

__all__ = ["LocalExchange", "ShardReport", "ShardedSampler", "merge_histograms"]


def merge_histograms(histograms: Sequence[LengthHistogram]) -> LengthHistogram:
    """The histogram of all the shards' lengths together (exact integer sums).

    Example:
        >>> a, b = LengthHistogram.from_lengths([3, 5]), LengthHistogram.from_lengths([5, 9])
        >>> h = merge_histograms([a, b])
        >>> h.values.tolist(), h.counts.tolist()
        ([3, 5, 9], [1, 2, 1])
    """
    return LengthHistogram.merge(histograms)  # the one exact merge (NOTE [ Exact merge ])


@dataclass(frozen=True)
class ShardReport:
    """What one epoch of a :class:`ShardedSampler` does, on this rank and over all ranks.

    Attributes:
        rank: this rank.
        num_samples: samples in this rank's shard (every one is in every epoch, unless
            ``defer=`` leaves some to the next: ``deferred``).
        steps: steps per epoch (the same on every rank).
        promoted: samples of this rank carried into a longer cell than their own.
        filler_rows: this rank's padding rows (rows of a batch with no sample).
        stand_in_batches: this rank's batches with no sample at all (one padding stand-in).
        padding_ratio: padded elements / real elements over all ranks (rows times padded length
            of every batch, filler rows included).
        promoted_all: promoted samples over all ranks.
        filler_rows_all: filler rows over all ranks.
        deferred: samples of this rank each epoch leaves to the next (``defer=``; NOTE
            [ Sharded plan ] 7); 0 when every sample is in every epoch.
        deferred_all: deferred samples over all ranks.
        moved_out: samples of this rank's shard it hands to other ranks (``exchange=True``;
            NOTE [ Sharded plan ] 8), the same ones every epoch; 0 without exchange.
        moved_in: samples of other ranks' shards this rank plans (``exchange=True``).
        moved_all: samples that change rank, over all ranks.
        repeated: with ``last_batch="fill"`` (NOTE [ Sharded plan ] 9), this rank's repeats:
            extra appearances of its samples in the slots its samples leave empty (the filler
            rows of ``"pad"``); 0 with ``"pad"``.
        repeated_all: repeats over all ranks.

    With deferral, ``padding_ratio`` counts the real elements of the samples an epoch shows,
    less each rank's deferred ones at the mean length of its samples of their bucket (which of
    them wait changes every epoch, so the figure is an estimate; exact when nothing waits).
    With fill it counts the repeats as real elements, as ``BucketSampler``'s report does, each
    at the mean length of its rank's samples of its bucket (the bucket's mean with exchange):
    an estimate too, since which samples repeat changes every epoch.

    It also speaks the report protocol of the other producers
    (:class:`~bucketloader.plan.SamplingReport`): :attr:`padding`, :attr:`totals` (this rank's
    counts under their names there), ``epoch``, ``batches_done`` and ``batches_left`` (this
    rank's position), :meth:`as_dict` and a readable ``str()``.

    Example:
        >>> sampler = ShardedSampler([3, 4, 9, 10, 5, 6], num_buckets=2, batch_size=2,
        ...                          num_replicas=1, rank=0)
        >>> r = sampler.report()  # a ShardReport
        >>> r.num_samples, r.steps, r.promoted, r.filler_rows, round(r.padding_ratio, 3)
        (6, 3, 0, 0, 0.189)
        >>> r.batches_done, r.batches_left, r.totals["padded_rows"], round(r.padding, 3)
        (0, 3, 0, 0.189)
    """

    rank: int
    num_samples: int
    steps: int
    promoted: int
    filler_rows: int
    stand_in_batches: int
    padding_ratio: float
    promoted_all: int
    filler_rows_all: int
    deferred: int = 0
    deferred_all: int = 0
    moved_out: int = 0
    moved_in: int = 0
    moved_all: int = 0
    repeated: int = 0
    repeated_all: int = 0
    epoch: int = 0
    batches_done: int = 0
    batches_left: int | None = None

    @property
    def padding(self) -> float:
        """:attr:`padding_ratio`, under the name every producer's report uses."""
        return self.padding_ratio

    @property
    def totals(self) -> dict[str, int]:
        """This rank's counts under :data:`~bucketloader.plan.report.TOTALS`' names:
        ``samples`` (its shard), ``promoted``, ``repeated``, ``dropped`` (deferred to the next
        epoch), ``batches`` and ``padded_rows`` (filler rows)."""
        return {
            "samples": self.num_samples,
            "promoted": self.promoted,
            "repeated": self.repeated,
            "dropped": self.deferred,
            "batches": self.steps,
            "padded_rows": self.filler_rows,
        }

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: every field, ``padding`` and ``totals``."""
        return {**dataclasses.asdict(self), "padding": self.padding, "totals": self.totals}

    def __str__(self) -> str:
        left = "?" if self.batches_left is None else f"{self.batches_left:,}"
        lines = [
            f"epoch {self.epoch} (sharded plan, rank {self.rank}): padding {self.padding:.2%} "
            "over all ranks",
            f"  {'':<12} {'this rank':>12} {'all ranks':>12}",
        ]
        for name, mine, every in (
            ("promoted", self.promoted, self.promoted_all),
            ("filler rows", self.filler_rows, self.filler_rows_all),
            ("deferred", self.deferred, self.deferred_all),
            ("repeated", self.repeated, self.repeated_all),
        ):
            lines.append(f"  {name:<12} {mine:>12,} {every:>12,}")
        if self.moved_all:
            lines.append(f"  moved out {self.moved_out:,}, in {self.moved_in:,} (all ranks: "
                         f"{self.moved_all:,})")  # fmt: skip
        lines.append(
            f"  samples {self.num_samples:,} in {self.steps:,} steps ({self.stand_in_batches:,} "
            f"stand-in batches); batches done {self.batches_done:,}, left {left}"
        )
        return "\n".join(lines)


class ShardedSampler(EpochSampler):
    """Batches of a rank's own shard, in planned shapes and in step with every other rank.

    Use it as ``sampler.dataloader(shard_dataset, ...)`` (or
    ``DataLoader(sampler.wrap(shard), batch_sampler=sampler, collate_fn=sampler.collator())``):
    indices are positions in this rank's shard, and each batch carries its step's planned shape
    to the collator, so a batch of promoted samples or filler rows keeps the step's shape. With
    ``shard_indices=`` the indices are global row ids instead, and the dataset is the whole data
    set (every rank can read every row; required by ``exchange=True``).

    Args:
        shard_lengths: this rank's per-sample lengths ``(n,)`` (its shard only).
        shard_histograms: every rank's :class:`~bucketloader.LengthHistogram`, in rank order
            (``shard_histograms[rank]`` must describe ``shard_lengths``; ``None`` for an empty
            shard, with ``exchange=True``). Default: gathered once
            from every rank over the initialised ``torch.distributed`` process group (or this
            shard's alone in a single process). Given, with ``rank`` or ``num_replicas`` taken
            from an initialised group, the ranks' arguments are still gathered once and checked;
            with both given (ranks simulated in one process) nothing is gathered, unless
            ``exchange=True`` moves rows by torch's collective (``gather`` left out).
        shuffle: shuffle within cells and the step interleave.
        seed: randomness only from ``SeedSequence([seed, epoch, ...])``; the same on every rank.
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0; required with
            ``num_replicas > 1`` and no process group).
        shard_indices: the global row id of every sample of ``shard_lengths`` ``(n,)``
            (distinct over all ranks): the sampler then yields global row ids, to be read from
            the whole data set. Required by ``exchange=True``.
        gather: with ``exchange=True``, how a rank learns the other ranks' given rows: a
            callable taking this rank's payload (a dict) and returning every rank's, in rank
            order, like ``torch.distributed.all_gather_object``. It is called twice (once
            under ``last_batch="fill"``), both times in the constructor (the given rows, then
            each rank's rows listed twice, so every rank raises alike); planning calls it no
            more. Default: that collective over
            the initialised process group. Ranks simulated in one process pass one shared
            :class:`LocalExchange` (or a function returning what it returns): called once.
        **options: ``num_buckets`` (default 8) and ``strategy`` (default ``"optimal"``), or
            ``boundaries``; ``batch_size`` or ``max_tokens`` (an int or a
            :class:`~bucketloader.plan.TokenBudget`, its ``oversize`` ``"error"`` or
            ``"single"``, since every sample is planned (``"drop"`` is refused once a bucket
            is above ``max_tokens``); it always promotes, so ``promote=False`` is refused);
            ``pad_to_multiple_of``; ``cache`` (as
            :func:`~bucketloader.compute_boundaries`); ``defer`` (default ``0``: every sample
            in every epoch, the slots follow the fullest rank): a share in ``[0, 1)``, the most
            of a rank's samples of a bucket an epoch may leave to the next ones, so the slots
            follow what the ranks can fill and the fuller ranks' excess waits (NOTE
            [ Sharded plan ] 7; ``0.5``: every sample is shown within two epochs);
            ``exchange`` (default ``False``): ``True`` lets the fuller ranks hand their excess
            of each bucket to the ranks with room, the same rows every epoch, so the slots
            follow the average rank and every sample is in every epoch once (NOTE [ Sharded
            plan ] 8; needs ``shard_indices``; not with ``defer``); ``last_batch``
            (default ``"pad"``: the slots a rank's samples leave empty are masked padding
            rows): ``"fill"`` tops them up with repeats of the rank's samples that fit, real
            rows that are trained on and counted as ``repeated`` (NOTE [ Sharded plan ] 9; with
            any rule); ``"drop"`` and ``"keep"`` are refused (they leave the ranks out of step).

    Example:
        >>> shards = [[3, 4, 9, 10], [3, 3, 10, 9], [4, 10, 4, 9]]
        >>> hists = [LengthHistogram.from_lengths(s) for s in shards]
        >>> samplers = [ShardedSampler(shards[r], shard_histograms=hists, num_replicas=3,
        ...                            rank=r, num_buckets=2, batch_size=2) for r in range(3)]
        >>> [len(s) for s in samplers], samplers[0].shapes
        ([2, 2, 2], [(2, 4), (2, 10)])
        >>> [s.plan().cells.tolist() for s in samplers]  # the same shape at each step
        [[1, 0], [1, 0], [1, 0]]
    """

    _digest_follows_ranks = True  # (its plan digest hashes the ranks x K table)

    def __init__(
        self,
        shard_lengths: Any,
        *,
        shard_histograms: Sequence[LengthHistogram | None] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        shard_indices: Any = None,
        gather: Callable[[dict[str, Any]], Sequence[dict[str, Any]]] | None = None,
        **options: Any,
    ) -> None:
        # the ranks gather before any other collective, where this rank's own error goes: the
        # histograms, over the whole group (a rank given another num_replicas than its size
        # joins it too, to send that error), or with shard_histograms given the arguments (a
        # rank built with another exchange= would otherwise never join the exchange's gather);
        # ranks simulated in one process (rank= and num_replicas= both given, with
        # shard_histograms) join none: one process builds them all. With exchange=True and no
        # gather= the rows move by torch's collective, which simulated ranks cannot call: such
        # ranks are real whatever they were given, and join (else a rank refused here left the
        # others in the exchange's gather until the group's timeout). Decided from the
        # arguments as given, before they are checked (s20: a rank given num_replicas= whose
        # seed was refused sent nothing, and the others waited in the gather until the timeout)
        world = world_size() if initialised() else 1
        replicas = world if num_replicas is None else num_replicas
        if shard_histograms is None:
            joins = world > 1 and not (isinstance(replicas, int) and replicas <= 1)
        else:
            real = rank is None or num_replicas is None
            real = real or (bool(options.get("exchange", False)) and gather is None)
            joins = world > 1 and replicas == world and real
        try:
            super().__init__(shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
        except Exception as exc:  # (this rank's seed, shuffle or rank refused: the others wait
            # for it in the first gather, below)
            if joins:
                send_error(exc, world, default_ranks()[1])
            raise
        try:  # (this rank's own input: an error here reaches the other ranks in that gather)
            if shard_histograms is None and self.num_replicas > 1:
                _check_world(self.num_replicas)
            self.options = _check_options(options)
            self.exchange = bool(self.options.get("exchange", False))
            self.last_batch = str(self.options.get("last_batch", "pad"))
            self.fill = self.last_batch == "fill"  # NOTE [ Sharded plan ] 9
            lengths = _shard_array(shard_lengths)
            ids = _shard_ids(shard_indices, lengths.size, self.exchange)
            # rows the dataset must hold, and whether they are global ids (any larger dataset
            # fits)
            self._dataset_rows = (
                (lengths.size, False)
                if ids is None
                else (int(ids.max()) + 1 if ids.size else 0, True)
            )
            own = _histogram(lengths) if lengths.size else None
            hists: Sequence[LengthHistogram | None]
            if shard_histograms is not None:
                hists = _check_histograms(
                    shard_histograms, own, self.num_replicas, self.rank, exchange=self.exchange
                )
        except Exception as exc:
            if joins:
                send_error(exc, world, self.rank)
            raise
        # both gathers are one all_gather_object, so a rank given shard_histograms pairs with
        # one that gathers them: each says which it did, and every rank names the odd one (s23:
        # the gathering rank raised KeyError 'values', the other went on to its next collective)
        if shard_histograms is None:
            arguments = {**self._arguments(), "shard_histograms": "gathered"}
            hists = _gather_histograms(
                own, arguments, self.num_replicas, self.rank, exchange=self.exchange
            )
        elif joins:
            arguments = {**self._arguments(), "shard_histograms": "given"}
            gather_arguments("ShardedSampler", arguments, self.num_replicas, self.rank)
        # NOTE [ Sharded plan ] 6: fitted boundaries over shards that keep their samples try
        # the shards' envelope too
        wants_envelope = self.options.get("boundaries") is None and len(hists) > 1
        wants_envelope = wants_envelope and not self.exchange
        self.histogram, envelope = _merged(hists, envelope=wants_envelope)
        rule = BatchRule.parse(self.options.get("batch_size"), self.options.get("max_tokens"))
        self.even = rule.budget is not None and rule.budget.balance  # NOTE [ Even batches ]
        self._rule = rule
        self.defer = float(self.options.get("defer", 0.0))
        candidates = [(b, self._cells(b)) for b in self._candidate_boundaries(len(hists), envelope)]
        del envelope
        # per rank, what the plans read of its histogram: its samples (and, where deferral or
        # fill count them, mean length) in every cell of every candidate, in one pass over the
        # ranks (NOTE [ Gathered histograms ])
        means = (self.defer > 0 or self.fill) and not self.exchange
        tables = _rank_cells(hists, [(b, c.lookup[0], c.num_cells) for b, c in candidates], means)
        del hists
        plans = [self._layout(b, c, *t) for (b, c), t in zip(candidates, tables, strict=True)]
        # NOTE [ Sharded plan ] 6: the global solve unless the shards' envelope pads less
        best = plans[0]
        if len(plans) > 1 and plans[1].padding < plans[0].padding - _ENVELOPE_GAIN:
            best = plans[1]
        # NOTE [ A sharded state names its global data ]: the global solve's plan and the chosen
        self._global = _global_config(
            self.histogram,
            [self._identity(*candidates[0]), self._identity(best.boundaries, best.cells)],
        )
        self.boundaries, self.cells, self.table = best.boundaries, best.cells, best.table
        self.deferred, self.planned, self.schedule = best.deferred, best.planned, best.schedule
        self._copies, self._moves, self._copied = best.copies, best.moves, best.copied
        self._real = best.real
        if self.even:
            rows = self.schedule.rows.copy()
            rows.setflags(write=False)
            self.cells = dataclasses.replace(self.cells, batch=rows)
        self._warned_epochs: set[int] = set()
        lookup = self.cells.lookup[0]
        cell_of = _cells_of(lengths, self.boundaries, lookup)
        own_counts = count_cells(cell_of, self.cells.num_cells)
        self.num_samples = int(cell_of.size)
        # the rows per cell the plan reads: the rank's own (some waiting, 7) or exchanged (8)
        self._counts = (self.planned if self.exchange else self.table)[self.rank]
        self._by_cell: np.ndarray | None = None
        self._stand_in: int | None = None  # the first row of the rank's shortest cell
        self._cell_of: np.ndarray | None = None
        if ids is None and cell_of.size > _CELLS_ONLY:  # (the same plans; see _CELLS_ONLY)
            self._cell_of, self._own_counts = cell_of, own_counts
        elif not (self.exchange and self.num_replicas > 1):
            by_cell = sort_by_cell(cell_of, own_counts)
            del cell_of
            self._by_cell = by_cell if ids is None else ids[by_cell]
        else:  # NOTE [ Sharded plan ] 8
            by_cell = sort_by_cell(cell_of, own_counts)
            del cell_of
            lent = self._copies[self.rank]
            kept, given = give_rows(
                by_cell,
                self.table[self.rank],
                self._moves,
                rank=self.rank,
                seed=self.seed,
                copies=lent,
            )
            self._kept = ids[kept]  # type: ignore[index]
            mine = self._moves[self._moves[:, 0] == self.rank]
            self._kept_counts = (
                self.table[self.rank]
                + lent
                - np.bincount(
                    mine[:, 1], weights=mine[:, 3], minlength=self.cells.num_cells
                ).astype(np.int64)
            )
            payload = {
                "rank": self.rank,
                "digest": self._config_digest(),
                "plan": self._config()["plan_digest"],
                "rows": ids[given],  # type: ignore[index]
                # a row of this rank's shortest cell: the shortest of all ranks' is every
                # rank's stand-in (shard_schedule(shared_stand_in=True))
                "stand_in": (
                    [int(np.argmax(self.table[self.rank] > 0)), int(ids[by_cell[0]])]  # type: ignore[index]
                    if by_cell.size
                    else [self.cells.num_cells, -1]  # an empty shard (it only receives)
                ),
                # the ids' span: another rank's ids inside a contiguous span are listed twice
                "span": [int(ids.min()), int(ids.max()), int(ids.size)] if ids.size else [0, -1, 0],  # type: ignore[union-attr]
            }
            del by_cell, kept, given
            self._received = (_gather_rows if gather is None else gather)(payload)
            if isinstance(self._received, LocalExchange):  # ranks simulated in one process
                # (the board itself, or a function wrapping it): the board holds every rank's
                # kept rows for the agreed check at the first plan (_rows), once all are built
                if not self.fill:  # (fill repeats rows on purpose: no such check)
                    self._received._hold(self.rank, self._kept)
            else:  # a collective (torch's or a gather= hook): both calls now, in the
                # constructor on every rank, so a rank that later plans alone never waits
                self._rows(_gather_rows if gather is None else gather)
        self._warn_blocked_cells()
        filler = int(self.schedule.filler.sum())
        sizes = self.planned.sum(axis=1)
        unequal = int(sizes.max() - sizes.min()) > 0.1 * float(sizes.mean())
        if unequal and filler > LOSS_WARNING * self.histogram.num_samples:
            share = filler / self.histogram.num_samples
            what = "repeat samples in" if self.fill else "pad"
            warnings.warn(
                f"the shards are unequal (from {int(sizes.min()):,} to {int(sizes.max()):,} "
                f"samples per rank): every rank takes {len(self):,} steps, so the ranks with "
                f"fewer samples {what} {filler:,} filler rows in all ({share:.1%} of the "
                "samples); no sample is lost (ShardedSampler.report() has the counts). "
                "Balance the shards to pad less",
                UserWarning,
                stacklevel=2,
            )
        elif self.fill:  # NOTE [ Sharded plan ] 9: the filler rows are repeats, trained on
            warn_fill_repeats(
                "ShardedSampler",
                self.report().repeated_all,
                self.histogram.num_samples,
                # (from the counts, every rank's; with exchange a lent row's copy is repeated on
                # the rank that received it too, which the counts do not say: not claimed there)
                most=1 if self.exchange else fill_appearances(self.schedule),
                small="",
                num_replicas=self.num_replicas,
                counted="report().repeated_all counts them (the same every epoch)",
                instead="last_batch='pad' leaves those slots as masked padding rows instead "
                "(it repeats nothing); larger shards, exchange=True or fewer num_buckets need "
                "fewer repeats",
                stacklevel=2,
            )

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes (what the collator keeps)."""
        used = np.flatnonzero(self.schedule.steps > 0)
        shapes = tuple(sorted(self.cells.shapes[c] for c in used.tolist()))
        return ShapeTable(cells=self.cells, shapes=shapes, last_batch=self.last_batch)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape ``(B, L)`` an epoch produces, sorted (the same on every rank)."""
        return list(self.shape_table.shapes)

    @functools.cached_property
    def _len(self) -> int:
        return self.schedule.num_steps

    def collator(self, **kwargs: Any) -> Any:
        """``PadCollator(self.shape_table, **kwargs)``."""
        from bucketloader.collate import PadCollator

        check_collator_options("ShardedSampler.collator()", PadCollator, kwargs)
        return PadCollator(self.shape_table, **kwargs)

    def wrap(self, dataset: Any) -> ShardDataset:
        """The shard's dataset as :class:`ShardDataset`: batches keep their planned shape."""
        return dataset if isinstance(dataset, ShardDataset) else ShardDataset(dataset)

    def dataloader(self, dataset: Any, **kwargs: Any) -> DataLoader:
        """``DataLoader(self.wrap(dataset), batch_sampler=self, collate_fn=self.collator())``.

        Args:
            dataset: this rank's shard (indexed by position in ``shard_lengths``), or with
                ``shard_indices`` the whole data set (indexed by global row id).
            **kwargs: other ``DataLoader`` arguments (``num_workers``, ``collate_fn``, ...).
                ``collate_fn`` left out is :meth:`collator`; ``collate_fn=None`` is torch's
                ``default_collate``, as it is to ``DataLoader``.
        """
        from bucketloader.loader import (
            ResumableDataLoader,
            check_dataset_size,
            check_loader_options,
        )

        rows, global_ids = self._dataset_rows
        check_dataset_size(self, dataset, rows, at_least=global_ids)
        kwargs = check_loader_options(self, kwargs)  # (as the other samplers' dataloader())
        if "collate_fn" not in kwargs:  # (yours, even None, is kept; no collator built for it)
            kwargs["collate_fn"] = self.collator()  # ResumableDataLoader below: exact state
        return ResumableDataLoader(
            self.wrap(dataset),  # type: ignore[arg-type]
            batch_sampler=self,
            **kwargs,
        )

    # -- the epoch ----------------------------------------------------------------------------
    def _make_plan(self, epoch: int) -> ShardEpochPlan:
        waiting = int(self.deferred.sum())
        if waiting and self.rank == 0 and epoch not in self._warned_epochs:
            self._warned_epochs.add(epoch)
            share = waiting / self.histogram.num_samples
            warnings.warn(
                f"ShardedSampler(defer={self.defer}): epoch {epoch} leaves {waiting:,} samples "
                f"over all ranks ({share:.1%}) to the next epoch, where they are shown first "
                "(the fuller ranks' excess; ShardedSampler.report() has the counts). Pass "
                "defer=0 to show every sample in every epoch and pad to the fullest rank",
                UserWarning,
                stacklevel=4,
            )
        return plan_shard_epoch(
            self._rows(),
            self._counts,
            self.schedule,
            rank=self.rank,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            deferred=self.deferred[self.rank] if waiting else None,
            stand_in=self._stand_in,
            fill=self.fill,
            consume=self._cell_of is not None,  # (sorted for this plan alone)
        )

    def _rows(self, gather: Callable[[dict[str, Any]], Any] | None = None) -> np.ndarray:
        """The rank's rows sorted by cell (with exchange, NOTE [ Sharded plan ] 8: its kept
        rows and the ones it receives, read from the gathered payloads once, with every rank's
        digests checked; ``gather`` makes the second, agreed check's call, or None for the
        :class:`LocalExchange` board). A shard that keeps only its cells (:data:`_CELLS_ONLY`)
        has its positions sorted anew at every call, into a new, writable array."""
        if self._cell_of is not None:
            rows = sort_by_cell(self._cell_of, self._own_counts)
            rows.setflags(write=True)  # (its own memory: plan_shard_epoch shuffles it in place)
            return rows
        if self._by_cell is None:
            got = self._received
            if len(got) != self.num_replicas:
                raise ValueError(
                    f"gather returned {len(got)} payloads for num_replicas={self.num_replicas}; "
                    "it must return every rank's payload in rank order, like "
                    "torch.distributed.all_gather_object"
                )
            items = [got[r] for r in range(self.num_replicas)]
            mine = self._config_digest(), self._config()["plan_digest"]
            for key, i, what in (
                ("digest", 0, "another seed, shuffle or options"),
                ("plan", 1, "another plan (other shard histograms or boundaries)"),
            ):
                odd = [r for r, it in enumerate(items) if it[key] != mine[i]]
                if odd:
                    raise ValueError(
                        f"exchange=True: rank(s) {odd} built their ShardedSampler with {what} "
                        f"than rank {self.rank}; build it with the same arguments and "
                        "shard_histograms on every rank"
                    )
            moves = self._moves
            want = np.bincount(moves[:, 0], weights=moves[:, 3], minlength=self.num_replicas)
            sizes = [np.asarray(it["rows"]).size for it in items]
            odd = [r for r in range(self.num_replicas) if sizes[r] != want[r]]
            if odd:
                raise ValueError(
                    f"exchange=True: rank(s) {odd} gave {[sizes[r] for r in odd]} rows where "
                    f"the table says {[int(want[r]) for r in odd]}; every rank must run the same "
                    "version of bucketloader with the same arguments"
                )
            given = _check_disjoint(items, fill=self.fill)
            if given is not None:
                twice = self._agreed_twice(given, gather)
                if any(twice):
                    r = next(r for r, found in enumerate(twice) if found)
                    where = f"rank {r}'s own rows and the rows the exchange moves"
                    raise ValueError(_twice_message(np.asarray(twice[r]), where))
            self._stand_in = min(it["stand_in"] for it in items)[1]
            self._by_cell = take_rows(
                self._kept,
                self._kept_counts,
                self._moves,
                [it["rows"] for it in items],
                rank=self.rank,
            )
            del self._kept, self._received
        return self._by_cell

    def _agreed_twice(
        self, given: np.ndarray, gather: Callable[[dict[str, Any]], Any] | None
    ) -> list[list[int]]:
        """Per rank, up to three of its kept rows that some rank hands over (listed twice):
        the same list on every rank, so a duplicate is an error everywhere, never one rank's
        error while the others wait in the job's next collective. Only the rank that kept a
        row can see it, so the ranks share their findings: one more small ``gather`` call (in
        the constructor); a :class:`LocalExchange` (``gather`` None) checks every simulated
        rank's kept rows itself."""
        if gather is None:
            board: LocalExchange = self._received  # type: ignore[assignment]
            return board._twice(given)
        found = given[np.isin(given, self._kept)][:3]
        payload = {"rank": self.rank, "twice": [int(x) for x in found]}
        got = gather(payload)
        answers = [got[r] for r in range(len(got))]
        if len(answers) != self.num_replicas or any(
            not isinstance(a, Mapping) or "twice" not in a for a in answers
        ):
            first = answers[0] if answers else {}
            keys = sorted(first) if isinstance(first, Mapping) else type(first).__name__
            raise ValueError(
                "gather= must be a collective that returns every rank's payload of this very "
                "call, in rank order (it is called twice: the given rows, then each rank's "
                f"check); its second call returned {len(answers)} answer(s) for "
                f"num_replicas={self.num_replicas}, the first with keys {keys} (each needs "
                "'twice'); ranks simulated in one process pass one shared LocalExchange"
            )
        return [list(a["twice"]) for a in answers]

    def _batch(self, plan: Any, i: int) -> list[int]:
        """Batch ``i`` with its step's planned shape and its real-sample count (a
        :class:`~bucketloader.plan.PlannedBatch`; with fill, NOTE [ Sharded plan ] 9, its
        repeats are real rows too)."""
        repeats = 0 if plan.num_repeats is None else int(plan.num_repeats[i])
        return PlannedBatch(
            plan.batch(i).tolist(),
            planned_shape=self.cells.shapes[int(plan.cells[i])],
            num_real=int(plan.num_real[i]) + repeats,
        )

    def report(self) -> ShardReport:
        """Promotions, filler rows and padding of an epoch (the same every epoch: they depend
        on the counts only), and this rank's position in the current one."""
        s = self.schedule
        rows = s.steps * self.cells.batch
        padded = int((rows * self.cells.lengths[:, 0]).sum()) * self.num_replicas
        real = self._real
        promoted = _moved(s, self.planned)
        filler, filler_all = int(s.filler[self.rank].sum()), int(s.filler.sum())
        moves = self._moves[~self._copied]
        lent = self._moves[self._copied]  # fill with exchange (9): copies are repeats
        empty = 0 if self.fill else 1  # with fill (9) the filler rows are repeats
        return ShardReport(
            rank=self.rank,
            num_samples=self.num_samples,
            steps=s.num_steps,
            promoted=int(promoted[self.rank]),
            filler_rows=filler * empty,
            stand_in_batches=int(np.maximum(s.steps - s.placed[self.rank], 0).sum()) * empty,
            padding_ratio=(padded - real) / real if real else 0.0,
            promoted_all=int(promoted.sum()),
            filler_rows_all=filler_all * empty,
            deferred=int(self.deferred[self.rank].sum()),
            deferred_all=int(self.deferred.sum()),
            moved_out=int(moves[moves[:, 0] == self.rank, 3].sum()),
            moved_in=int(moves[moves[:, 2] == self.rank, 3].sum()),
            moved_all=int(moves[:, 3].sum()),
            repeated=filler * (1 - empty) + int(lent[lent[:, 2] == self.rank, 3].sum()),
            repeated_all=filler_all * (1 - empty) + int(lent[:, 3].sum()),
            epoch=self.epoch,
            batches_done=(done := self._batches_done()),
            batches_left=s.num_steps - done,
        )

    def _shown(
        self,
        b: np.ndarray,
        lookup: np.ndarray,
        deferred: np.ndarray,
        means: list[np.ndarray] | None,
        repeats: np.ndarray | None = None,
    ) -> float:
        """Real elements an epoch shows over all ranks: every length, less each rank's
        deferred samples at the mean length of that rank's samples of their cell (``means``,
        :func:`_cell_mean` of every rank; exact when nothing is deferred; which samples wait
        changes every epoch), plus with fill (NOTE [ Sharded plan ] 9) the ``(R, K)``
        ``repeats`` at that mean (with exchange: the cell's mean over all ranks, a rank's rows
        being no longer its own)."""
        shown = float(self.histogram.total)
        k = deferred.shape[1]
        busy = deferred.any(axis=1) | (False if repeats is None else repeats.any(axis=1))
        if not busy.any():
            return shown
        every = _cell_mean(self.histogram, b, lookup, k)  # where a rank has none of a cell
        if self.exchange or means is None:  # a rank's rows are no longer its own: the cell's
            # mean (means is None only then: busy needs deferral or fill)
            means = [every] * deferred.shape[0]
        else:
            means = [np.where(m > 0, m, every) for m in means]
        for r, mean in enumerate(means):
            shown -= float((deferred[r] * mean).sum())
            if repeats is not None:
                shown += float((repeats[r] * mean).sum())
        return shown

    def _warn_blocked_cells(self) -> None:
        """NOTE [ Sharded plan ] 3: a cell some rank has no sample short enough for gets no
        steps on any rank, and every sample of it is promoted: say so, with the ranks."""
        reach = np.cumsum(self.planned, axis=1) > 0
        blocked = np.flatnonzero(~reach.all(axis=0))
        if blocked.size == 0 or self.exchange:  # exchange: a shared stand-in (NOTE 8)
            return
        top = int(blocked[-1])
        ranks = np.flatnonzero(~reach[:, top]).tolist()
        moved = int(self.planned[:, : top + 1].sum())
        warnings.warn(
            f"rank(s) {ranks[:8]}{'...' if len(ranks) > 8 else ''} have no sample of length <= "
            f"{int(self.cells.lengths[top, 0])}: a step has one shape on every rank, so the "
            f"{top + 1} shortest shape(s) get no steps and their {moved:,} samples are padded "
            "to longer shapes (ShardedSampler.report() has the padding); split the data into "
            "shards at random, not by length",
            UserWarning,
            stacklevel=3,
        )

    # -- configuration ------------------------------------------------------------------------
    def _candidate_boundaries(
        self, ranks: int, envelope: LengthHistogram | None
    ) -> list[np.ndarray]:
        """The global solve, and (fitted boundaries, several ranks) the solve over the shards'
        ``envelope`` (NOTE [ Sharded plan ] 6), or with exchange over the dealt shares (8)."""
        first = self._fit_boundaries(self.histogram)
        if self.options.get("boundaries") is not None or ranks < 2:
            return [first]
        if self.exchange:  # NOTE [ Sharded plan ] 8: the ranks' shares, dealt
            other = self._fit_boundaries(dealt_histogram(self.histogram, ranks))
        else:
            if envelope is None:  # (_merged gives it whenever it is read here)
                raise ValueError("internal error: the shards' envelope was not computed")
            other = self._fit_boundaries(envelope)
        return [first] if np.array_equal(other, first) else [first, other]

    def _cells(self, b: np.ndarray) -> Cells:
        """Boundaries ``b``'s cells (shapes from the global histogram's occupancy)."""
        occupancy = np.zeros(b.size, dtype=np.int64)
        np.add.at(occupancy, assign_buckets(self.histogram.values, b), self.histogram.counts)
        rule = self._rule
        cells = Cells.build([(b,)], ("length",), occupancy=[occupancy], rule=rule)
        if (cells.batch < 1).any():
            worst = int(cells.lengths[np.argmax(cells.batch < 1), 0])
            limit = rule.budget.max_tokens if rule.budget else None
            if rule.budget is not None and rule.budget.oversize == "drop":  # (s23: the error
                # below told a user who asked for 'drop' to pass 'single', without saying why)
                raise ValueError(
                    f"ShardedSampler cannot honour TokenBudget(oversize='drop'): the bucket of "
                    f"padded length {worst} is above max_tokens={limit}, and every sample of "
                    "every shard is planned (a step is one shape on every rank; NOTE [ Sharded "
                    f"plan ] 3); pass oversize='single' (batches of one sample), raise "
                    f"max_tokens to at least {worst}, or leave the samples longer than {limit} "
                    "out of the shards and their histograms"
                )
            m = int(self.options.get("pad_to_multiple_of", 1))
            values = self.histogram.values
            longest = int(values[values <= worst].max(initial=0))  # (its longest real length)
            rounded = (  # (s23: lengths within max_tokens, a bucket over it, and no word why)
                f" (its lengths rounded up to a multiple of pad_to_multiple_of={m})"
                if m > 1 and longest <= (limit or 0)
                else ""
            )
            raise ValueError(
                f"max_tokens={limit} is below the padded length {worst} of a bucket{rounded}; "
                f"raise max_tokens to at least {worst}, or pass max_tokens=TokenBudget(..., "
                "oversize='single')"
            )
        return cells

    def _layout(
        self, b: np.ndarray, cells: Cells, table: np.ndarray, means: list[np.ndarray] | None
    ) -> _Layout:
        """Boundaries ``b``'s plan from its cells and ``ranks x K`` table (and, with deferral
        or fill, every rank's mean length per cell: :meth:`_shown`): what the ranks plan (less
        deferred samples, NOTE [ Sharded plan ] 7, or exchanged, 8), its schedule and
        padding."""
        lookup = cells.lookup[0]
        deferred = defer_table(table, self.defer) if self.defer else np.zeros_like(table)
        copies = np.zeros_like(table)
        if self.exchange and self.fill:  # NOTE [ Sharded plan ] 9: every cell dealt alone
            planned, dealt, copies = exchange_cells(table)
            moves = _fill_moves(table, dealt, copies, planned)
        elif self.exchange:  # NOTE [ Sharded plan ] 8
            planned = exchange_table(table)
            step = exchange_moves(table, planned)
            moves = step, np.zeros(len(step), dtype=bool)
        else:
            planned = table - deferred
            moves = np.zeros((0, 4), dtype=np.int64), np.zeros(0, dtype=bool)
        s = self._schedule(planned, cells)
        padded = int((s.steps * s.rows * cells.lengths[:, 0]).sum()) * table.shape[0]
        real = self._shown(b, lookup, deferred, means, s.filler + copies if self.fill else None)
        pad = (padded - real) / real
        return _Layout(b, cells, table, deferred, planned, s, pad, real, copies, *moves)

    def _schedule(self, table: np.ndarray, cells: Cells) -> ShardSchedule:
        budget = self._rule.budget
        return shard_schedule(
            table,
            cells.batch,
            even=self.even,
            multiple_of=budget.multiple_of if budget is not None else 1,
            shared_stand_in=self.exchange,
            per_cell=self.exchange and self.fill,
        )

    def _fit_boundaries(self, hist: LengthHistogram) -> np.ndarray:
        opts = self.options
        m = opts.get("pad_to_multiple_of", 1)
        if opts.get("boundaries") is not None:
            b = check_boundaries(opts["boundaries"])
            if m > 1:
                b = np.unique(round_up(b, m))
            return check_boundaries(b, max_length=self.histogram.max)
        return compute_boundaries(
            hist,
            opts.get("num_buckets", 8),
            strategy=opts.get("strategy", "optimal"),
            cache=opts.get("cache"),
            pad_to_multiple_of=m,
        )

    def _identity(self, b: np.ndarray, cells: Cells) -> str:
        """:func:`_plan_identity` of the plan over boundaries ``b`` and their ``cells``."""
        budget = self._rule.budget
        return _plan_identity(
            b,
            cells.batch,
            even=self.even,
            multiple_of=budget.multiple_of if budget is not None else 1,
            defer=self.defer,
            exchange=self.exchange,
            fill=self.fill,
        )

    def _config_against(self, state: Any) -> dict[str, Any]:
        """:meth:`_config`, with, for a state of s31 (its ``config["global"]`` has
        ``"options"`` and no ``"plans"``), this sampler's options spelled as s31 spelled them
        (:func:`_s31_options`), so that :func:`~bucketloader.sampler._global_change` compares
        them: without it such a state saved between epochs loaded on another number of ranks
        with any other options (s32-tidyB), which s31 refused."""
        config = self._config()
        saved = state.get("config") if isinstance(state, Mapping) else None
        theirs = saved.get("global") if isinstance(saved, Mapping) else None
        if isinstance(theirs, Mapping) and "options" in theirs and "plans" not in theirs:
            config["global"]["options"] = _s31_options(self.options, self._rule)
        return config

    def _config_digest(self) -> str:
        """What every rank must agree on (seed, shuffle, options)."""
        opts = {k: _portable(v) for k, v in sorted(self.options.items()) if k != "cache"}
        blob = json.dumps([self.seed, self.shuffle, self.num_replicas, opts], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def _arguments(self) -> dict[str, str]:
        """The arguments of :meth:`_config_digest`, each spelled portably, so a rank that
        disagrees is told which argument differs and how."""
        out = {"seed": repr(self.seed), "shuffle": repr(self.shuffle)}
        out["num_replicas"] = repr(self.num_replicas)
        out.update((k, _portable(v)) for k, v in sorted(self.options.items()) if k != "cache")
        if self.options.get("boundaries") is None:  # (solved: through a cache shared by the
            # ranks, its lookup is a collective; on some ranks only, the others left it alone)
            cache = self.options.get("cache")
            shared = cache not in (None, False) and getattr(cache, "distributed", True)
            out["cache"] = "shared" if shared else "none"
        return out

    def _config(self) -> dict[str, Any]:
        h = hashlib.sha256(self.table.astype("<i8").tobytes())
        h.update(np.asarray(self.boundaries, dtype="<i8").tobytes())
        h.update(np.asarray(self.cells.batch, dtype="<i8").tobytes())
        if self.deferred.any():  # NOTE [ Sharded plan ] 7: another plan than defer=0's
            h.update(self.deferred.astype("<i8").tobytes())
        if self.exchange:  # NOTE [ Sharded plan ] 8: another plan than without exchange
            h.update(b"exchange" + self.planned.astype("<i8").tobytes())
        if self.fill:  # NOTE [ Sharded plan ] 9: the same steps, other batches than "pad"'s
            h.update(b"fill" + self._copies.astype("<i8").tobytes())
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "num_batches": len(self),
            "plan_digest": h.hexdigest()[:16],
            # (last: on as many ranks as saved the state, the keys above are checked first, as
            # before it was recorded)
            "global": dict(self._global),
        }


@dataclass(frozen=True, eq=False)
class _Layout:
    """One choice of boundaries, planned (:meth:`ShardedSampler._layout`)."""

    boundaries: np.ndarray
    cells: Cells
    table: np.ndarray  # (R, K) the ranks' own samples per cell
    deferred: np.ndarray  # (R, K) what waits for a later epoch (NOTE [ Sharded plan ] 7)
    planned: np.ndarray  # (R, K) what the schedule places (less deferred, or exchanged: 8)
    schedule: ShardSchedule
    padding: float  # padded / real elements over all ranks, less one
    real: float  # real elements an epoch shows
    copies: np.ndarray  # (R, K) copies every rank sends (exchange with fill, 9)
    moves: np.ndarray  # (M, 4) the exchange's moves (8; with fill 9, copies too)
    copied: np.ndarray  # (M,) which moves are copies


class LocalExchange:
    """The exchange's collective for ranks simulated in one process (NOTE [ Sharded plan ] 8).

    ``ShardedSampler(exchange=True)`` hands its given rows to ``gather`` when it is built; under
    ``torch.distributed`` that is an ``all_gather_object``, and every rank reads the others'
    rows at once. With a ``LocalExchange`` (the gather returned it) each sampler reads them when
    it first plans an epoch instead. To simulate ``num_replicas`` ranks in one
    process (a benchmark, a test, a dry run of a job's plan), pass one shared ``LocalExchange``
    as ``gather=`` to every rank's sampler, and build them all before planning an epoch: it
    keeps each rank's payload and hands every rank the list. It also holds each rank's kept row
    ids until the first plan checks that no rank hands over a row another kept (so every
    simulated rank refuses such a row alike).

    Example:
        >>> lengths = [3, 3, 3, 3, 9, 9, 9, 4]
        >>> shards = [[0, 1, 2, 3, 4, 5], [6, 7]]  # rank 0 holds 6, rank 1 holds 2
        >>> hists = [LengthHistogram.from_lengths([lengths[i] for i in s]) for s in shards]
        >>> board = LocalExchange(2)
        >>> samplers = [
        ...     ShardedSampler([lengths[i] for i in s], shard_indices=s, shard_histograms=hists,
        ...                    num_replicas=2, rank=r, boundaries=[4, 9], batch_size=2,
        ...                    exchange=True, gather=board, shuffle=False)
        ...     for r, s in enumerate(shards)
        ... ]
        >>> [list(b) for b in samplers[0]], [list(b) for b in samplers[1]]  # global row ids
        ([[1, 2], [4, 5]], [[7, 0], [3, 6]])
        >>> samplers[0].report().moved_out, samplers[1].report().moved_in
        (2, 2)
    """

    def __init__(self, num_replicas: int) -> None:
        n = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
        self._posted: list[dict[str, Any] | None] = [None] * n
        # every rank's kept rows until checked, then what the check found (_twice)
        self._kept: list[np.ndarray | None] = [None] * n
        self._found: list[list[int] | None] = [None] * n

    def __call__(self, payload: dict[str, Any]) -> LocalExchange:
        """Keep ``payload`` (from rank ``payload["rank"]``); every rank's, once all are built."""
        if not isinstance(payload, Mapping) or "rows" not in payload or "rank" not in payload:
            keys = sorted(payload) if isinstance(payload, Mapping) else type(payload).__name__
            raise ValueError(
                "LocalExchange takes a ShardedSampler's exchange payload (a dict with 'rank' "
                f"and 'rows'), got {keys}; pass the LocalExchange itself as gather= (or a "
                "function that hands it the payload unchanged and returns what it returns)"
            )
        self._posted[self._rank(payload["rank"])] = payload
        return self

    def _rank(self, rank: Any) -> int:
        """``rank`` as an index of this board, or one clear error (a sampler built with another
        ``num_replicas`` than the board's)."""
        n = len(self._posted)
        ok = isinstance(rank, numbers.Integral) and not isinstance(rank, (bool, np.bool_))
        if ok and 0 <= rank < n:
            return int(rank)
        raise (ValueError if ok else TypeError)(
            f"rank must be an int >= 0 and <= {n - 1} for LocalExchange(num_replicas={n}), got "
            f"rank={rank!r}; build the board with the samplers' num_replicas "
            "(LocalExchange(num_replicas)) and each simulated sampler with its own rank in "
            "0..num_replicas-1"
        )

    def __len__(self) -> int:
        return len(self._posted)

    def _hold(self, rank: int, kept: np.ndarray) -> None:
        """Keep rank ``rank``'s kept rows (a reference) until :meth:`_twice` has checked them."""
        self._kept[rank], self._found[rank] = kept, None

    def _twice(self, given: np.ndarray) -> list[list[int]]:
        """Per rank, up to three of its kept rows among ``given`` (every rank's moved rows): the
        answer every simulated rank reads, each rank checked once and its rows then let go."""
        for r, kept in enumerate(self._kept):
            if self._found[r] is None and kept is not None:
                self._found[r] = [int(x) for x in given[np.isin(given, kept)][:3]]
                self._kept[r] = None
        return [found or [] for found in self._found]

    def __getitem__(self, rank: int) -> dict[str, Any]:
        n = len(self._posted)
        if isinstance(rank, numbers.Integral) and not isinstance(rank, (bool, np.bool_)):
            rank = int(rank) + n if -n <= rank < 0 else rank  # a sequence's negative index
        try:
            index = self._rank(rank)
        except ValueError as exc:  # also an IndexError: `for payload in board` stops at the end
            raise _RankOutOfRange(str(exc)) from None
        got = self._posted[index]
        if got is None:
            raise ValueError(
                f"rank {rank}'s ShardedSampler has not been built with this LocalExchange yet: "
                "build every simulated rank's sampler (gather= the same LocalExchange) before "
                "planning an epoch"
            )
        return got


class _RankOutOfRange(IndexError, ValueError):
    """A rank outside a :class:`LocalExchange` (both: iteration stops on ``IndexError``)."""


class ShardDataset(DatasetView):
    """A shard's map-style dataset whose batches carry their planned shape to the collator.

    ``DataLoader`` calls ``__getitems__`` with the sampler's batch; this returns a
    :class:`~bucketloader.plan.PlannedBatch` of the samples, with the step's shape and how many
    are real (the rest are stand-ins the collator turns into padding rows).
    """

    def __getitems__(self, batch: Sequence[int]) -> list[Any]:
        samples = load_samples(self.dataset, list(batch))
        shape = getattr(batch, "planned_shape", None)
        if shape is None:
            return list(samples)
        return PlannedBatch(samples, planned_shape=shape, num_real=batch.num_real)  # type: ignore[attr-defined]


_OPTIONS = (
    "num_buckets",
    "strategy",
    "boundaries",
    "batch_size",
    "max_tokens",
    "pad_to_multiple_of",
    "cache",
    "defer",
    "exchange",
    "last_batch",
)


_CHUNK = 1 << 20
#: Options whose ``None`` means "not given" (:func:`_check_options`).
_UNSET = ("num_buckets", "strategy", "boundaries")
#: The shards' envelope replaces the global solve when it pads at least this share of the real
#: elements less (0.1 percentage points; NOTE [ Sharded plan ] 6).
_ENVELOPE_GAIN = 0.001

#: A shard of more samples than this (positions in the shard, no ``shard_indices``) keeps only
#: each sample's cell between plans (1 byte a sample instead of 4 for its positions sorted by
#: cell); each plan sorts them again (:func:`sort_by_cell`) into the array it then shuffles in
#: place as its own (``plan_shard_epoch(consume=True)``). The plans are the same. At 100 M
#: samples on one rank that is 100 MB held between epochs and 400 MB while a plan is held,
#: where the sorted positions and the plan's copy of them held 800 MB
#: (``benchmarks/results/shard_ranks.md``); the sort costs about a fifth of a plan's time, so
#: smaller shards, where memory is not the limit, keep their sorted positions.
_CELLS_ONLY = 1 << 25


def _portable(value: Any) -> str:
    """An option as every process spells it: callables by module and name (their repr holds a
    memory address that differs per process), numpy scalars as the Python numbers they hold (a
    rank passing ``np.int64(8)`` agrees with one passing ``8``)."""
    if isinstance(value, np.generic):
        value = value.item()
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return repr(value)


def _global_config(hist: LengthHistogram, plans: Sequence[str]) -> dict[str, Any]:
    """NOTE [ A sharded state names its global data ]

    A state saved between epochs loads on any number of ranks (NOTE [ An epoch boundary on
    another number of ranks ] in :mod:`bucketloader.sampler`), but a ShardedSampler's
    ``plan_digest`` hashes the ranks x K table, which other ranks always change, so there it
    cannot be compared: before s31 only the seed and the shuffle were, and a state of other data
    or other options loaded silently on another number of ranks. What does not follow the ranks
    is what every rank knows: the global length histogram (every shard's, merged: the same on
    every rank and for any split of the same samples) and what the options make of it. The
    state's ``config["global"]`` holds the global sample count, the histogram's digest
    (:meth:`LengthHistogram.digest`) and ``plans``: the digests of the plans the options make of
    that histogram (:func:`_plan_identity`: boundaries, batch sizes and what places the samples
    besides the seed and the shuffle): the global solve's (the same for any split) and, where
    the plan chose other boundaries, the chosen one's (the shards' envelope, 6, or the dealt
    shares, 8, which follow the ranks).

    The data is compared always. ``plans`` where ``plan_digest`` cannot decide: on another
    number of ranks, or on as many over other shards (the digest hashes the ranks' table: a
    state between epochs loads there too); a state loads when one of its plans is one of this
    sampler's: the same options over the same data always share the global solve, and
    ``boundaries=`` copied from the saved sampler's plan (``sampler.boundaries``) shares the
    chosen one. Where the digests agree, ``plan_digest`` has compared the plan itself
    (boundaries, batch sizes, the ranks' table, deferral, exchange, fill), so there any
    spelling of the options that makes the same plan loads. s32: s31 digested the options as
    spelled (defaults filled, callables by name), so ``num_buckets=8`` against the same
    boundaries given explicitly was refused even on the same ranks, and a callable strategy
    whose body changed under its name was not seen. A state of s31 (``"options"``, no
    ``"plans"``) has its data checked and, where ``plans`` would be, its options as s31 did
    (:func:`_s31_options`, ``ShardedSampler._config_against``: s32-shard compared them not at
    all, so such a state saved between epochs loaded on other ranks with any other options);
    a state saved before the key (which has no ``"global"``) loads unchecked.

    Example:
        >>> g = _global_config(LengthHistogram.from_lengths([3, 5, 5]), ["a1", "a1", "b2"])
        >>> g["num_samples"], len(g["histogram"]), g["plans"]
        (3, 16, ['a1', 'b2'])
        >>> g == _global_config(LengthHistogram.from_lengths([5, 3, 5]), ["a1", "b2"])
        True
    """
    return {
        "num_samples": hist.num_samples,
        "histogram": hist.digest()[:16],
        "plans": list(dict.fromkeys(plans)),  # (in order, each once)
    }


def _s31_options(options: Mapping[str, Any], rule: BatchRule) -> str:
    """The digest s31 recorded as ``config["global"]["options"]``: the options that shape the
    plan, defaults filled in, each spelled by :func:`_stated`, ``cache`` left out (NOTE [ A
    sharded state names its global data ]); kept only to check a state of s31.

    Example:
        >>> _s31_options({"batch_size": 2}, BatchRule.parse(2, None)) == _s31_options(
        ...     {"batch_size": 2, "num_buckets": 8, "cache": None}, BatchRule.parse(2, None))
        True
    """
    opts = {k: v for k, v in options.items() if k not in ("cache", "batch_size", "max_tokens")}
    if opts.get("boundaries") is None:
        opts.setdefault("num_buckets", 8)
        opts.setdefault("strategy", "optimal")
    if opts.get("pad_to_multiple_of", 1) == 1:
        opts.pop("pad_to_multiple_of", None)
    spelled = {k: _stated(v) for k, v in opts.items()}
    spelled["rule"] = repr(
        [
            _stated(rule.batch_size),
            _stated(rule.per_cell),
            repr(rule.budget) if rule.budget else None,
        ]
    )
    blob = json.dumps(spelled, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _stated(value: Any) -> str:
    """An option as a state of s31 spelled it (:func:`_s31_options`): :func:`_portable`, with a
    sequence as the list of what it holds, so ``np.array([4, 9])``, ``(4, 9)`` and ``[4, 9]``
    agree."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return repr(
            [_stated(x) for x in (value.tolist() if isinstance(value, np.ndarray) else value)]
        )
    return _portable(value)


def _plan_identity(
    boundaries: np.ndarray,
    batch: np.ndarray,
    *,
    even: bool,
    multiple_of: int,
    defer: float,
    exchange: bool,
    fill: bool,
) -> str:
    """What a plan over ``boundaries`` is, whatever the ranks (NOTE [ A sharded state names its
    global data ]): the boundaries, every bucket's full batch size ``batch`` (from the global
    histogram: ``batch_size`` or ``max_tokens`` and its ``oversize``, as resolved), and what
    places the samples in those shapes besides the seed and the shuffle: a balanced budget's
    row choice (``even``, with its ``multiple_of``), ``defer``, ``exchange`` and fill. Options
    that change none of them (``pad_to_multiple_of`` but through the boundaries, ``cache``,
    how ``strategy`` or ``batch_size`` are spelled) change no identity. 16 hex digits.

    Example:
        >>> kw = dict(even=False, multiple_of=8, defer=0.0, exchange=False, fill=False)
        >>> a = _plan_identity(np.array([4, 9]), np.array([8, 4]), **kw)
        >>> a == _plan_identity([4, 9], [8, 4], **kw), a == _plan_identity([4, 9], [8, 4], **kw
        ...                                                                | {"defer": 0.5})
        (True, False)
    """
    blob = json.dumps(
        {
            "boundaries": [int(x) for x in np.asarray(boundaries).tolist()],
            "batch": [int(x) for x in np.asarray(batch).tolist()],
            # (multiple_of rounds a balanced budget's rows only: shard_schedule)
            "even": int(multiple_of) if even else None,
            "defer": float(defer),
            "exchange": bool(exchange),
            "fill": bool(fill),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _moved(schedule: Any, table: np.ndarray) -> np.ndarray:
    """Per rank: samples placed in a longer cell than their own (each counted once)."""
    carried_in = np.concatenate(
        [np.zeros((table.shape[0], 1), dtype=np.int64), schedule.promoted[:, :-1]], axis=1
    )
    cap = (schedule.steps * schedule.rows)[None, :]
    own_placed = np.clip(cap - carried_in, 0, table)
    return (table - own_placed).sum(axis=1)


def _shard_array(shard_lengths: Any) -> np.ndarray:
    """The shard's lengths as a 1-D integer array, validated without a copy when they already
    are one (a rank's shard may be most of its memory); empty is allowed here (the ranks then
    agree on an error)."""
    if hasattr(shard_lengths, "__len__") and len(shard_lengths) == 0:
        return np.zeros(0, np.int64)
    if (
        isinstance(shard_lengths, np.ndarray)
        and shard_lengths.ndim == 1
        and shard_lengths.dtype.kind in "iu"
        and shard_lengths.dtype.itemsize <= 8
    ):
        lo, hi = int(shard_lengths.min()), int(shard_lengths.max())
        if lo >= 0 and hi < MAX_LENGTH:
            return shard_lengths
    try:  # (a ragged list: numpy cannot tell; as_lengths below names it)
        two_d = isinstance(shard_lengths, Mapping) or np.ndim(shard_lengths) == 2
    except ValueError:
        two_d = False
    if two_d:
        got = (
            f"a mapping of {len(shard_lengths)} inputs"
            if isinstance(shard_lengths, Mapping)
            else f"shape {np.shape(shard_lengths)}"
        )
        raise ValueError(
            "shard_lengths must be one length per sample (1-D): ShardedSampler plans one input, "
            f"got {got}; for shapes of "
            "several inputs (joint shapes) use BucketSampler with {name: lengths}, or pass one "
            "length per sample (e.g. the longest input)"
        )
    return as_lengths(shard_lengths, name="shard_lengths")


def _shard_ids(indices: Any, size: int, exchange: bool) -> np.ndarray | None:
    """``shard_indices`` as a 1-D array of non-negative ints of the shard's size (not copied
    when it already is one), or ``None``; required by ``exchange=True``."""
    if indices is None:
        if exchange:
            raise ValueError(
                "exchange=True needs shard_indices=: the global row id of every sample of "
                "shard_lengths, so a rank can read the rows other ranks hand it (the sampler then "
                "yields global row ids, to be read from the whole data set); pass e.g. "
                "shard_indices=np.arange(start, stop) for a contiguous shard, or leave exchange "
                "out when a rank cannot read other ranks' rows"
            )
        return None
    ids = indices if isinstance(indices, np.ndarray) else np.asarray(indices)
    if ids.size == 0 and ids.ndim == 1:  # an empty shard ([] reads as float)
        ids = ids.astype(np.int64)
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size != size:
        raise ValueError(
            f"shard_indices must be a 1-D integer array with one global row id per sample of "
            f"shard_lengths ({size:,}), got dtype {ids.dtype} and shape {ids.shape}"
        )
    if ids.size and int(ids.min()) < 0:
        raise ValueError(
            f"shard_indices must be global row ids (>= 0), got {int(ids.min())}; pass the rows' "
            "positions in the whole data set"
        )
    if ids.size > 1 and not bool((ids[1:] > ids[:-1]).all()):  # not increasing: sort to check
        order = np.sort(ids)
        twice = np.flatnonzero(order[1:] == order[:-1])
        if twice.size:
            raise ValueError(_twice_message(order[twice[:3]], "this rank's shard"))
    return ids


def _twice_message(rows: np.ndarray, where: str) -> str:
    return (
        f"shard_indices must list each global row id once over all ranks, but row(s) "
        f"{rows.tolist()} appear twice in {where} (each would be trained twice per epoch); "
        "pass disjoint shards, e.g. np.arange(start, stop) or np.arange(rank, n, num_replicas) "
        "per rank"
    )


def _check_disjoint(items: list[dict[str, Any]], *, fill: bool) -> np.ndarray | None:
    """The exchange's cheap checks that no row id is listed by two ranks (NOTE [ Sharded plan ]
    8), from what the exchange gathered (the same on every rank, so every rank raises alike): a
    rank whose ids are contiguous owns every id in its span, so another rank's smallest or
    largest id inside it is listed twice; and (without fill, whose copies repeat rows on
    purpose) the moved rows are distinct. Returns the moved rows (``None`` under fill), which
    no rank may also keep (:meth:`ShardedSampler._agreed_twice`). Shards that are not
    contiguous can still share rows no rank moves: those are not seen."""
    spans = np.array([it.get("span", [0, -1, 0]) for it in items], dtype=np.int64).reshape(-1, 3)
    lo, hi, n = spans[:, 0], spans[:, 1], spans[:, 2]
    whole = (n > 0) & (hi - lo + 1 == n)
    for edge in (lo, hi):
        inside = whole[:, None] & (lo[:, None] <= edge) & (edge <= hi[:, None]) & (n > 0)
        np.fill_diagonal(inside, False)
        if inside.any():
            r, s = (int(x) for x in np.argwhere(inside)[0])
            raise ValueError(
                _twice_message(edge[s : s + 1], f"the shards of ranks {r} and {s}")
                + f" (rank {r}'s shard is the rows {int(lo[r])}..{int(hi[r])})"
            )
    if fill:
        return None
    given = np.concatenate([np.asarray(it["rows"], dtype=np.int64) for it in items])
    order = np.sort(given)
    twice = np.flatnonzero(order[1:] == order[:-1])
    if twice.size:
        raise ValueError(_twice_message(order[twice[:3]], "the rows two ranks hand over"))
    return given


def _fill_moves(
    table: np.ndarray, dealt: np.ndarray, copies: np.ndarray, planned: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The exchange's moves under fill (NOTE [ Sharded plan ] 9): the samples moved to deal
    every cell, then the copies, in one table sorted by giver, cell, kind and receiver (a
    giver's payload lists a cell's moved rows before its copies), and which rows are copies."""
    moved = exchange_moves(table, dealt)
    lent = exchange_moves(dealt + copies, planned)
    both = np.concatenate([moved, lent])
    kind = np.concatenate([np.zeros(len(moved), np.int64), np.ones(len(lent), np.int64)])
    order = np.lexsort((both[:, 2], kind, both[:, 1], both[:, 0]))
    return both[order], kind[order].astype(bool)


def _merged(
    hists: Sequence[LengthHistogram | None], *, envelope: bool
) -> tuple[LengthHistogram, LengthHistogram | None]:
    """The global histogram and, with ``envelope``, the shards' envelope (NOTE [ Sharded plan ]
    6). Histograms the caller holds (``shard_histograms`` given) are merged at once; gathered
    ones (:class:`_Packed`) are read one rank at a time (NOTE [ Gathered histograms ]): in one
    pass into dense counters over the span of lengths their payloads name, where that span is
    small next to a shard's distinct lengths, else a pass into the running merge and one for
    the envelope. Exact integer sums either way (NOTE [ Exact merge ])."""
    if not isinstance(hists, _Packed):
        shards = [h for h in hists if h is not None]
        merged = merge_histograms(shards)  # (envelope_histogram would merge them again)
        return merged, envelope_of(shards, merged.values) if envelope else None
    spans = [s for s in hists.spans if s is not None]
    if not spans:  # (_gather_histograms refuses ranks that are all empty)
        raise ValueError(_empty_message(list(range(len(hists)))))
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    if hi - lo <= 2 * max(s[2] for s in spans) + 1024:
        return _dense_merge(hists, lo, hi, envelope=envelope)
    each = (h for h in hists if h is not None)
    merged = next(each)
    for h in each:
        merged = LengthHistogram.merge(merged, h)
    each = (h for h in hists if h is not None)
    return merged, envelope_of(each, merged.values) if envelope else None


def _dense_merge(
    hists: Sequence[LengthHistogram | None], lo: int, hi: int, *, envelope: bool
) -> tuple[LengthHistogram, LengthHistogram | None]:
    """:func:`_merged` in one pass over the ranks, every length in ``lo..hi``: the merged
    counts and (``envelope``) the most samples any rank has at or above each length, each one
    ``int64`` counter per length of the span. A length no rank has adds no envelope count,
    so the envelope is :func:`envelope_histogram`'s (which counts over the merged lengths)."""
    total = np.zeros(hi - lo + 1, dtype=np.int64)
    most = np.zeros_like(total) if envelope else None
    mine = np.zeros_like(total) if envelope else None
    for h in hists:
        if h is None:
            continue
        at = h.values - lo
        total[at] += h.counts  # (a rank's values are distinct: exact)
        if most is not None and mine is not None:
            mine[:] = 0
            mine[at] = h.counts
            above = mine[::-1]  # (the rank's samples at or above every length, in place)
            np.cumsum(above, out=above)
            np.maximum(most, mine, out=most)
    del mine
    values = np.flatnonzero(total)
    counts = total[values]
    del total
    values += lo
    merged = LengthHistogram(values, counts)
    del values, counts
    if most is None:
        return merged, None
    most[:-1] -= most[1:]  # (the envelope's count at each length)
    keep = np.flatnonzero(most)
    return merged, LengthHistogram(keep + lo, most[keep])


def _rank_cells(
    hists: Sequence[LengthHistogram | None],
    candidates: list[tuple[np.ndarray, np.ndarray, int]],
    means: bool,
) -> list[tuple[np.ndarray, list[np.ndarray] | None]]:
    """For every candidate ``(boundaries, lookup, K)``, the ``ranks x K`` table (every rank's
    samples per cell) and, with ``means``, every rank's :func:`_cell_mean`: all the plans read
    of the ranks' histograms, in one pass that holds one rank's at a time (NOTE [ Gathered
    histograms ])."""
    tables: list[list[np.ndarray]] = [[] for _ in candidates]
    avgs: list[list[np.ndarray]] = [[] for _ in candidates]
    for h in hists:
        for i, (b, lookup, k) in enumerate(candidates):
            out = np.zeros(k, dtype=np.int64)
            tables[i].append(out)
            if h is None:  # an empty shard under exchange (it only receives)
                continue
            cell = lookup[assign_buckets(h.values, b)]
            np.add.at(out, cell, h.counts)
            if means:
                avgs[i].append(_mean_of(h, cell, k))
    return [(np.stack(t), a if means else None) for t, a in zip(tables, avgs, strict=True)]


def _cell_mean(hist: LengthHistogram, b: np.ndarray, lookup: np.ndarray, k: int) -> np.ndarray:
    """``(K,)`` mean length of ``hist``'s samples in every cell (0 where it has none)."""
    return _mean_of(hist, lookup[assign_buckets(hist.values, b)], k)


def _mean_of(hist: LengthHistogram, cell: np.ndarray, k: int) -> np.ndarray:
    """:func:`_cell_mean`, given the cell of every value of ``hist``."""
    n = np.bincount(cell, weights=hist.counts, minlength=k)
    total = np.bincount(cell, weights=hist.counts * hist.values.astype(np.float64), minlength=k)
    return np.divide(total, n, out=np.zeros(k), where=n > 0)


def _histogram(lengths: np.ndarray) -> LengthHistogram:
    """The shard's histogram, counted in chunks (no full-size temporary)."""
    lo, hi = int(lengths.min()), int(lengths.max())
    if hi - lo > 4 * lengths.size + 1024:
        return LengthHistogram.from_lengths(lengths)
    counts = np.zeros(hi - lo + 1, dtype=np.int64)
    for i in range(0, lengths.size, _CHUNK):
        counts += np.bincount(lengths[i : i + _CHUNK] - lo, minlength=counts.size)
    values = np.flatnonzero(counts)
    return LengthHistogram(values + lo, counts[values])


def _cells_of(lengths: np.ndarray, boundaries: np.ndarray, lookup: np.ndarray) -> np.ndarray:
    """Cell of every sample, in the narrowest signed type (:func:`sort_by_cell`'s ids),
    computed in chunks."""
    dtype = cell_dtype(int(lookup.max()) + 1)
    out = np.empty(lengths.size, dtype=dtype)
    for i in range(0, lengths.size, _CHUNK):
        out[i : i + _CHUNK] = lookup[assign_buckets(lengths[i : i + _CHUNK], boundaries)]
    return out


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    check_options("ShardedSampler", options, [*_OPTIONS, *keyword_options(ShardedSampler.__init__)])
    # None is "not given", as BucketSampler reads it (s23: boundaries= with num_buckets=None,
    # as a config that fills every key writes it, was refused as both), and one spelling keeps
    # the ranks' arguments alike
    options = {k: v for k, v in options.items() if v is not None or k not in _UNSET}
    if options.get("boundaries") is not None and (
        "num_buckets" in options or "strategy" in options
    ):
        raise ValueError(
            "pass either boundaries (precomputed) or num_buckets/strategy (fitted), not both"
        )
    if "num_buckets" in options:
        check_int("num_buckets", options["num_buckets"], minimum=1)
    if "pad_to_multiple_of" in options:
        check_int("pad_to_multiple_of", options["pad_to_multiple_of"], minimum=1)
    options = dict(options)  # a copy: the rules below respell their option
    if "defer" in options:
        d = options["defer"]
        real = isinstance(d, numbers.Real) and not isinstance(d, (bool, np.bool_))
        if not real or not 0 <= d < 1:
            raise ValueError(
                f"defer must be a number in [0, 1) (the most of a rank's samples of a bucket "
                f"an epoch may leave to the next), got defer={d!r}; pass defer=0.5 to show "
                "every sample within two epochs, or defer=0 to show every sample every epoch"
            )
        # one spelling per rule, so ranks that write 0, 0.0 or nothing agree (config digest)
        del options["defer"]
        if d:
            options["defer"] = float(d)
    if "exchange" in options:
        on = check_bool("exchange", options["exchange"])
        del options["exchange"]
        if on:
            options["exchange"] = True
    if "last_batch" in options:
        last = options["last_batch"]
        if last in ("drop", "keep"):
            raise ValueError(
                f"ShardedSampler cannot honour last_batch={last!r}: a step is one batch on every "
                "rank, and a rank that drops or shrinks a batch another rank fills leaves the "
                "ranks out of step (NOTE [ Sharded plan ] 9); pass last_batch='pad' (the "
                "default: empty slots are masked padding rows) or last_batch='fill' (they hold "
                "repeats of the rank's samples, trained on)"
            )
        if not isinstance(last, str) or last not in ("pad", "fill"):
            raise ValueError(
                f"last_batch must be 'pad' (the default: empty slots are masked padding rows) "
                f"or 'fill' (they hold repeats of the rank's samples), got last_batch={last!r}"
            )
        # one spelling per rule, so ranks that write "pad" or nothing agree (config digest)
        del options["last_batch"]
        if last == "fill":
            options["last_batch"] = "fill"
    if options.get("exchange") and options.get("defer"):
        raise ValueError(
            f"pass either defer={options['defer']!r} or exchange=True, not both: the exchange "
            "already gives every rank its share of every bucket (within one sample), so no "
            "rank has an excess to defer; exchange=True when every rank can read every row, "
            "defer= when a rank reads only its own"
        )
    rule = BatchRule.parse(options.get("batch_size"), options.get("max_tokens"))
    if rule.budget is not None and not rule.budget.promote:
        raise ValueError(
            f"ShardedSampler got max_tokens={rule.budget!r}, but it always promotes: a rank "
            "places what does not fit its cell in a longer one (NOTE [ Sharded plan ] 3), so "
            "promote=False cannot be honoured; drop promote=False, or use BucketSampler for "
            "batches that never promote"
        )
    return options


def _check_histograms(
    hists: Any, own: LengthHistogram | None, num_replicas: int, rank: int, *, exchange: bool
) -> list[LengthHistogram | None]:
    """``shard_histograms`` checked; under exchange an empty shard's entry is ``None`` (a
    ``LengthHistogram`` cannot be empty), and it receives rows (NOTE [ Sharded plan ] 8)."""
    if isinstance(hists, LengthHistogram) or not isinstance(hists, Sequence):
        raise TypeError(
            "shard_histograms must be a list of LengthHistogram, one per rank in rank order, "
            f"got {type(hists).__name__}"
        )
    hists = list(hists)
    if len(hists) != num_replicas:
        fix = "pass one histogram per rank, in rank order"
        if not initialised():  # (s23: a simulated rank without num_replicas= had no fix)
            fix += (
                f", with num_replicas= the number of ranks and rank= this rank's (no process "
                f"group is initialised to give them): num_replicas={len(hists)} for these "
                f"{len(hists)}"
            )
        raise ValueError(
            f"shard_histograms must hold one histogram per rank (num_replicas={num_replicas}), "
            f"got {len(hists)}; {fix}"
        )
    for r, h in enumerate(hists):
        if h is None and not exchange:  # (an empty shard: what it needs, not a type error)
            raise ValueError(_empty_message([r]))
        if not isinstance(h, LengthHistogram) and not (exchange and h is None):
            empty = " (or None for an empty shard, with exchange=True)" if exchange else ""
            fix = (  # (what a worker sends: docs/engines.md)
                "; read a worker's text with LengthHistogram.from_json(text)"
                if isinstance(h, (str, bytes))
                else "; build one with LengthHistogram.from_lengths(shard) (or an engine's "
                "scan: parquet_histogram, ray_histogram, spark_histogram)"
                if isinstance(h, (np.ndarray, list, tuple))
                else "; an engine's scan returns a ScanResult: pass its .histogram "
                "(shard_histograms=[result.histogram for result in results])"
                if isinstance(getattr(h, "histogram", None), LengthHistogram)
                else ""
            )
            raise TypeError(
                f"shard_histograms[{r}] must be a LengthHistogram{empty}, got "
                f"{type(h).__name__}{fix}"
            )
    if all(h is None for h in hists):
        raise ValueError(_empty_message(list(range(num_replicas))))
    if own is None and not exchange:
        raise ValueError(_empty_message([rank]))
    if hists[rank] != own:
        raise ValueError(
            f"shard_histograms[{rank}] ({hists[rank]!r}) does not describe rank {rank}'s "
            f"shard_lengths ({own!r}); pass every rank's histogram of its own shard, in rank "
            "order"
        )
    return hists


def _empty_message(ranks: list[int]) -> str:
    return (
        f"the shard of rank(s) {ranks} is empty: every rank needs at least one sample to take "
        "its planned steps; give every rank a non-empty shard (e.g. re-split the files so each "
        "rank has rows), or pass exchange=True with shard_indices= (an empty rank then receives "
        "rows from the others) when every rank can read every row"
    )


def _gather_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's exchange payload (NOTE [ Sharded plan ] 8), by one ``all_gather_object``
    over the initialised process group."""
    rank = int(payload["rank"])
    if not initialised():
        raise ValueError(
            f"exchange=True on rank {rank} needs the other ranks' given rows: run under an "
            "initialised torch.distributed process group, or pass gather= (one shared "
            "bucketloader.sharded.LocalExchange for ranks simulated in one process)"
        )
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, payload)
    return gathered


def _check_world(num_replicas: int) -> None:
    """The process group :func:`_gather_histograms` gathers over, for ``num_replicas > 1``
    ranks and no ``shard_histograms``: initialised, and of that many ranks."""
    if not initialised():
        raise ValueError(
            f"shard_histograms is required with num_replicas={num_replicas} and no initialised "
            "torch.distributed process group; pass every rank's LengthHistogram"
        )
    world = world_size()
    if world != num_replicas:
        raise ValueError(
            f"num_replicas={num_replicas} differs from the process group's world size "
            f"{world}; leave num_replicas out or pass shard_histograms"
        )


def _gather_histograms(
    own: LengthHistogram | None,
    arguments: dict[str, str],
    num_replicas: int,
    rank: int,
    *,
    exchange: bool,
) -> Sequence[LengthHistogram | None]:
    """Every rank's shard histogram, by one ``all_gather`` (JSON), with the configuration
    digests checked on every rank (so a mismatch is an error everywhere, never a hang).

    NOTE [ Gathered histograms ]
    Every rank receives every rank's histogram, so what one costs is paid ``ranks`` times on
    every rank. Lengths with many distinct values (audio in samples: ~335 k distinct per
    1 M-clip shard) made the JSON lists of ints the largest thing a rank held: the payloads
    came to 29 MB over 8 ranks and parsing them to Python ints raised the peak RSS by 173 MB
    (375 MB at 16 ranks, growing with ranks x distinct lengths, not with the rank's shard).
    Since session 23 the values and counts travel as bytes, zlib'd and base64'd inside the JSON
    (:func:`_pack`); since session 24 each array in the narrowest of 1, 2, 4 or 8 bytes per
    entry (the values as gaps from the shortest length, which the payload's ``span`` names with
    the longest and the number of distinct lengths): 2.6 MB gathered at 8 ranks (4.2 MB as
    ``int64``), 20.7 MB at 64.

    Decoded, a rank's histogram is 16 bytes per distinct length (5.4 MB here). Until session 24
    the constructor decoded every rank's at once and held them all for the merge, the envelope,
    the ``ranks x K`` tables and the per-rank cell means: 88 MB peak at 8 ranks, 393 MB at 64,
    growing with ranks x distinct lengths. Now they stay packed (:class:`_Packed`, the base64
    undone), decoded one rank at a time in two passes (three if wide): the merge and envelope in
    one (dense counters over the span the payloads name, before any is decoded; where that
    span is wide next to a shard's distinct lengths, a running merge, then an envelope pass),
    then every candidate's table and, with deferral or fill, mean lengths (all a plan reads of
    a rank's histogram: ``K`` counts and means per rank per candidate). Peak 50 MB at 8 ranks,
    70 MB at 64 (the 20 MB more is the payloads, parsed); two decodes of the narrow bytes cost
    less than the one of ``int64`` did: 1.4 s to build at 64 ranks, 2.8 s before (a shared
    host; with ``defer=0.5`` built side by side, 3.6 s before and 2.4 s now). After the
    constructor a rank keeps the merged histogram and the table (13 MB held at 8 and at 64,
    before and after). Measured in session 24: ``benchmarks/shard_memory.py`` (rank 0,
    ``all_gather_object`` replaced by the ranks' real payloads).
    """
    import torch.distributed as dist

    if num_replicas == 1:
        if own is None:
            raise ValueError(_empty_message([rank]))
        return [own]
    _check_world(num_replicas)
    payload = json.dumps(
        {
            "rank": rank,
            "arguments": arguments,
            # (the gaps from the shortest length: small, so mostly 1 or 2 bytes each)
            "values": "" if own is None else _pack(np.diff(own.values, prepend=own.min)),
            "counts": "" if own is None else _pack(own.counts),
            # shortest and longest length and distinct lengths: the span every rank's
            # histogram is counted over before any is decoded (_merged)
            "span": None if own is None else [own.min, own.max, int(own.values.size)],
        }
    )
    gathered: list[Any] = [None] * num_replicas
    dist.all_gather_object(gathered, payload)
    items = []
    for i in range(num_replicas):  # (each payload parsed, then let go: one copy of each)
        items.append(json.loads(gathered[i]))
        gathered[i] = None
    check_agreement("ShardedSampler", items, num_replicas)
    empty = [it["rank"] for it in items if not it["values"]]
    if empty and (not exchange or len(empty) == num_replicas):
        raise ValueError(_empty_message(empty))
    odd = [
        it["rank"]
        for it in items
        if it["values"] and ("span" not in it or it["values"][:1] not in _WIDTHS)
    ]
    if odd:  # (the same payloads on every rank: every rank raises this)
        raise ValueError(
            f"rank(s) {odd} sent their shard histogram in another format than rank {rank}'s "
            "(an older bucketloader); every rank must run the same version of bucketloader"
        )
    spans = [it["span"] if it["values"] else None for it in items]
    packed = [
        (_split(it.pop("values")), _split(it.pop("counts"))) if it["values"] else None
        for it in items
    ]
    return _Packed(packed, spans)


class _Packed(Sequence["LengthHistogram | None"]):
    """Every rank's gathered histogram, kept packed (:func:`_split`'s width and zlib'd bytes of
    each array, NOTE [ Gathered histograms ]) and decoded when read: a pass over the ranks
    holds one rank's arrays at a time, never every rank's. ``spans``: each rank's shortest and
    longest length and number of distinct lengths (``None`` for an empty shard), checked
    against its arrays when read."""

    def __init__(
        self,
        packed: list[tuple[tuple[str, bytes], tuple[str, bytes]] | None],
        spans: list[list[int] | None],
    ) -> None:
        self._packed = packed
        self.spans = spans

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, i: int) -> LengthHistogram | None:  # type: ignore[override]
        item = self._packed[i]
        if item is None:
            return None
        span = self.spans[i]
        gaps, counts = (_inflate(x) for x in item)
        if span is None or gaps.size != span[2]:
            raise ValueError(
                f"rank {i}'s gathered histogram has {gaps.size} distinct lengths, but its payload "
                f"says {span}; every rank must run the same version of bucketloader"
            )
        h = LengthHistogram(np.cumsum(gaps) + span[0], counts)
        if h.max != span[1]:  # (the dense counters of _merged trust the span)
            raise ValueError(
                f"rank {i}'s gathered histogram ends at length {h.max}, but its payload says "
                f"{span[1]}; every rank must run the same version of bucketloader"
            )
        return h


#: NOTE [ Gathered histograms ]: the first character of a packed array names the type of its
#: bytes, the narrowest that holds every entry.
_WIDTHS = {"1": "u1", "2": "<u2", "4": "<u4", "8": "<i8"}


def _pack(a: np.ndarray) -> str:
    """NOTE [ Gathered histograms ]: an ``int64`` array as JSON-safe text: one character for
    the bytes per entry (1, 2 or 4 unsigned where every entry fits, else 8 signed), then the
    little-endian bytes, zlib'd and base64'd."""
    a = np.asarray(a, dtype=np.int64)
    width = "8"
    if a.size and int(a.min()) >= 0:
        top = int(a.max())
        width = "1" if top < 2**8 else "2" if top < 2**16 else "4" if top < 2**32 else "8"
    raw = np.ascontiguousarray(a, dtype=_WIDTHS[width]).tobytes()
    return width + base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def _unpack(text: str) -> np.ndarray:
    """The array :func:`_pack` wrote."""
    return _inflate(_split(text))


def _split(text: str) -> tuple[str, bytes]:
    """:func:`_pack`'s text as its width and its zlib'd bytes (the base64 undone: what
    :class:`_Packed` holds, three quarters of the text)."""
    return text[:1], base64.b64decode(text[1:])


def _inflate(packed: tuple[str, bytes]) -> np.ndarray:
    """The array :func:`_pack` wrote, from :func:`_split`'s parts."""
    width, raw = packed
    # (read-only, no copy where the bytes are already int64: the callers copy what they keep)
    return np.frombuffer(zlib.decompress(raw), dtype=_WIDTHS[width]).astype(np.int64, copy=False)
