"""EvalSampler: every sample exactly once, in planned shapes, split evenly over ranks, order kept.

Evaluation and prediction must see each sample once: no sample dropped (``last_batch="drop"``),
none repeated (``"fill"``, or the repeats a distributed sampler adds so that ranks stay even),
since a repeat is counted twice by a metric. And the outputs must come back in dataset order.
:class:`EvalSampler` plans that with the same shapes machinery as
:class:`~bucketloader.BucketSampler` (a :class:`~bucketloader.plan.BucketSpec`, read only).

NOTE [ Evaluation plan ]
Samples are sorted by cell (planned shape), then by index, and walked cell by cell, smallest cell
first: deterministic, no shuffle, and every shape's batches come together (a compiled graph is
built once, then reused). With ``R`` ranks, a *global step* is ``R`` batches of one cell, one per
rank, so every rank runs the same number of steps and the same planned shape at each step. A cell
with ``n`` samples and batch size ``B`` has ``n // (R·B)`` full steps; the ``q`` samples left make
one last step, spread as evenly as possible over the ranks (``q // R`` or ``q // R + 1`` each).
By default (``balance=True``) each cell's batch size is first lowered to ``ceil(n / (R·steps))``
for its ``steps = ceil(n / (R·B))``: the same number of steps, fewer than ``R·steps`` filler rows
in the cell, and never more rows than ``B`` (a small evaluation set with ``max_tokens`` would
otherwise fill most of a short bucket's large batch with filler).

Rows a batch lacks to reach its ``B`` are *filler rows*: the collator pads them and marks them
(``sample_mask`` False, ``index`` -1); they are never a repeat of a real sample. When ``q < R``,
ranks ``q..R-1`` have no sample at that step (at most ``R - 1`` such batches per cell); their
batch is an empty :class:`EvalBatch` whose :attr:`EvalBatch.fill` names a sample of the cell to
load as filler data, so that the collator can still build the planned shape. That row keeps the
fill sample's data, ``attention_mask`` and ``lengths`` (so that a model runs on it as on any
sample); ``sample_mask`` and ``index`` mark it, and under a
:class:`~bucketloader.PadCollator` its integer label fields hold what every filler row's hold
(-100, NOTE [ Label fields pad with -100 ] in :mod:`bucketloader.collate.collator`), so that
the natural loss does not count the fill sample twice. Only :meth:`EvalSampler.wrap` (or
:meth:`EvalSampler.dataloader`) loads it; a plain dataset gets an empty list, which a collator
rejects loudly instead of counting a repeat.

NOTE [ Putting outputs back in dataset order ]
Each planned row has a dataset index, -1 for filler rows: :meth:`EvalSampler.row_index` for one
rank's batches in order, :meth:`EvalSampler.gathered_index` for outputs gathered across ranks at
every step (``torch.distributed.all_gather`` of each step's batch, concatenated: the layout of
``accelerate.gather``). :func:`restore_order` takes outputs (arrays, tensors, or nested
tuples/lists/dicts of them) whose first dim follows such an index, drops the filler rows and
returns the rows in dataset order, checking that every sample appears exactly once.
:meth:`EvalSampler.restore` and :meth:`EvalSampler.restore_ranks` apply it to the two layouts.
Batches loaded through :meth:`EvalSampler.wrap` also carry their own ``index`` column, so outputs
gathered any other way can be restored with ``restore_order(outputs, gathered_index_column)``.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bucketloader._dist import resolve_ranks
from bucketloader._samples import DatasetView, EvalSamples, load_samples
from bucketloader._validation import check_bool, check_collator_options, check_int
from bucketloader.collate import PadCollator
from bucketloader.plan import BucketSpec, ShapeTable
from bucketloader.plan.budget import even_batch, size_values
from bucketloader.plan.limits import warn_zero_lengths
from bucketloader.plan.report import LEFT_OUT_BY, SamplingReport, warn_truncated
from bucketloader.plan.spec import SpecShapes
from bucketloader.sampler import (
    check_consumed,
    check_not_in_batch_sampler,
    check_state,
    joint_solved_here,
    spec_or_build,
    warn_joint_alone,
)

__all__ = ["EvalBatch", "EvalCollator", "EvalDataset", "EvalSampler", "restore_order"]


class EvalBatch(list):  # type: ignore[type-arg]
    """The sample indices of one evaluation batch (a ``list[int]``) and its planned rows.

    Attributes:
        rows: ``(B,)`` int64, the dataset index of every planned row of the batch, -1 on filler
            rows (the first ``len(self)`` entries are this list).
        fill: for an empty batch (a rank with no sample at this step), the index of a sample of
            the same cell whose data the collator pads as filler; ``None`` otherwise.
        cell: the batch's planned cell: its shape is ``sampler.spec.cells.shapes[cell]``.

    Example:
        >>> sampler = EvalSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2, num_replicas=2,
        ...                       rank=1)
        >>> sampler.shapes, list(sampler)  # rank 1 has no sample at the second step
        ([(1, 12), (2, 8)], [EvalBatch([2, 3], rows=[2, 3]), EvalBatch([], rows=[-1], fill=4)])
        >>> last = list(sampler)[-1]
        >>> sampler.spec.cells.shapes[last.cell], last.fill, last.rows.tolist()  # filler
        ((1, 12), 4, [-1])
    """

    rows: np.ndarray
    fill: int | None
    cell: int

    def __init__(self, indices: Any, rows: np.ndarray, fill: int | None, cell: int) -> None:
        super().__init__(indices)
        self.rows, self.fill, self.cell = rows, fill, cell

    def __repr__(self) -> str:
        extra = f", fill={self.fill}" if self.fill is not None else ""
        return f"EvalBatch({list(self)!r}, rows={self.rows.tolist()!r}{extra})"


class EvalSampler(SpecShapes, Sampler[list[int]]):
    """Evaluation batches: every sample exactly once, in planned shapes, even across ranks.

    Built like :class:`~bucketloader.BucketSampler` (lengths and
    :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` options, or a ready spec), but
    deterministic and without repeats: see NOTE [ Evaluation plan ] in this module. Load through
    :meth:`dataloader` (or ``DataLoader(sampler.wrap(dataset), batch_sampler=sampler,
    collate_fn=sampler.collator())``): each batch then has exactly a shape in :attr:`shapes`,
    ``sample_mask`` False and ``index`` -1 on its filler rows, and ``index`` the dataset index of
    every other row; :meth:`restore` puts gathered outputs back in dataset order.

    Args:
        lengths: per-sample lengths ``(N,)``, ``(N, D)`` or a mapping name → lengths; or a
            :class:`~bucketloader.plan.BucketSpec` (its ``last_batch`` is ignored: filler rows
            are always padded).
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0; required with
            ``num_replicas > 1`` and no process group).
        balance: lower each cell's batch size to split its samples evenly over the same number
            of steps (``B' = ceil(n / (R * steps))``): the fewest filler rows for that step count,
            never more rows than ``B``. ``False`` keeps the spec's batch sizes (e.g. to evaluate
            on exactly the training shapes).
        **spec_options: :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` options
            (``num_buckets``, ``strategy``, ``boundaries``, ``batch_size`` or ``max_tokens``,
            ``groups``, ...), not ``last_batch``. Passing the training sampler's ``boundaries``
            keeps evaluation on the training shapes' lengths.

    Example:
        >>> lengths = [3, 4, 9, 10, 10, 8, 2]
        >>> sampler = EvalSampler(lengths, num_buckets=2, batch_size=4, balance=False)
        >>> sampler.shapes, [(list(b), b.rows.tolist()) for b in sampler]  # -1: a filler row
        ([(4, 4), (4, 10)], [([0, 1, 6], [0, 1, 6, -1]), ([2, 3, 4, 5], [2, 3, 4, 5])])
        >>> EvalSampler(lengths, num_buckets=2, batch_size=4).shapes  # balanced: fewer fillers
        [(3, 4), (4, 10)]
        >>> two = [EvalSampler(lengths, num_buckets=2, batch_size=4, num_replicas=2, rank=r)
        ...        for r in (0, 1)]
        >>> [[list(b) for b in s] for s in two]  # the same steps and shapes on both ranks
        [[[0, 1], [2, 3]], [[6], [4, 5]]]
        >>> two[0].gathered_index().tolist()  # rows of both ranks, step by step
        [0, 1, 6, -1, 2, 3, 4, 5]
        >>> two[0].restore(np.arange(8) * 10).tolist()  # gathered outputs -> dataset order
        [0, 10, 40, 50, 60, 70, 20]
    """

    #: What ``dataloader(drop_last=True)``'s refusal says (:mod:`bucketloader.loader`).
    _drop_last_hint = " (an evaluation keeps every sample: its last batch is padded, never dropped)"
    #: Its batches' samples carry which rows are real (:class:`EvalCollator`).
    rows_in_samples = True

    def __init__(
        self,
        lengths: Any,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        balance: bool = True,
        **spec_options: Any,
    ) -> None:
        for name in ("last_batch", "drop_last"):  # (drop_last: torch's name for last_batch)
            if not isinstance(lengths, BucketSpec) and name in spec_options:
                raise TypeError(
                    f"EvalSampler takes no {name}: it keeps every sample exactly once and "
                    f"pads the rows a batch lacks (masked filler rows); drop {name}="
                    f"{spec_options[name]!r}"
                )
        for name in ("shuffle", "seed"):  # (was "unexpected option", listing last_batch among
            if name in spec_options:  # the options it refuses: s25-user)
                raise TypeError(
                    f"EvalSampler takes no {name}: its batches are deterministic (every sample "
                    "once, the same batches on every run, in an order restore() puts back); "
                    f"drop {name}={spec_options[name]!r}"
                )
        self.spec = spec_or_build(lengths, spec_options, BucketSpec)
        self.num_replicas, self.rank = resolve_ranks(num_replicas, rank)
        if self.spec is not getattr(lengths, "spec", lengths) and joint_solved_here(
            spec_options, self.spec
        ):  # (session 23: an EvalSampler's ranks solved alone without a word)
            warn_joint_alone(self, spec_options.get("cache") not in (None, False), stacklevel=3)
        self.balance = check_bool("balance", balance)
        self._start = self._yielded = 0
        self.epoch = 0
        if self.balance:
            self.spec = _balanced(self.spec, self.num_replicas)
        self._warn_filtered()
        cut = int((self.spec.filtered or {}).get("truncated", 0))
        if cut:  # (kept, but cut to max_length: the metrics never see the rest)
            lost, total = self.spec.cut_elements()
            n = int(self.spec.cell_of_sample.size)
            warn_truncated("EvalSampler", cut, n, lost=lost, total=total, stacklevel=2)
        warn_zero_lengths(self.spec, "EvalSampler", stacklevel=2)

    def _warn_filtered(self) -> None:
        """A filter makes evaluation partial: say so once, with the counts (NOTE [ Warning about
        silent losses ] in :mod:`bucketloader.sampler`); evaluation stays whole over the kept
        samples (:attr:`kept`, :meth:`restore`)."""
        n, kept = int(self.spec.cell_of_sample.size), self.num_samples
        if kept == n:
            return
        filtered = dict(self.spec.filtered or {})
        used = [k for k in LEFT_OUT_BY if filtered.get(k)]  # (a filter= was not named: s9-read)
        listed = ", ".join(
            f"{filtered[k]:,} by {LEFT_OUT_BY[k]} ({k.replace('_', ' ')})" for k in used
        )
        drop = " / ".join(LEFT_OUT_BY[k] for k in used if k != "oversize")
        fixes = [f"drop {drop}"] if drop else []
        if "too_long" in used:
            fixes[0] += " (or use overflow='truncate')"
        if "oversize" in used:  # (dropping oversize= makes them an error: 'single' keeps them)
            fixes.append("pass max_tokens=TokenBudget(..., oversize='single')")
        warnings.warn(
            f"this EvalSampler evaluates {kept:,} of {n:,} samples: {n - kept:,} left out "
            f"({listed}); metrics cover only the kept samples. restore() returns their outputs "
            f"in dataset order (sampler.kept lists their indices); {' and '.join(fixes)} to "
            "evaluate every sample",
            UserWarning,
            stacklevel=3,
        )

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes: every occupied cell's full shape (filler rows are padded)."""
        cells = self.spec.cells
        used = np.flatnonzero(self.spec.counts > 0)
        shapes = tuple(sorted({cells.shapes[int(c)] for c in used}))
        # (truncate: the collator cuts the samples planned at max_length, as training's does;
        # without it, overflow="truncate" planned them and the first batch refused them)
        return ShapeTable(cells=cells, shapes=shapes, last_batch="pad", truncate=self.spec.truncate)

    @property
    def num_samples(self) -> int:
        """Samples evaluated (each exactly once, over all ranks together): all of them, or the
        :attr:`kept` ones when a filter (``max_length`` / ``min_length`` with
        ``overflow="drop"``, ``oversize="drop"``) leaves some out."""
        return self.spec.num_planned

    @property
    def kept(self) -> np.ndarray:
        """Dataset indices of the evaluated samples, in order (``arange(N)`` without a filter):
        :meth:`restore` returns their outputs in this order."""
        kept = self.spec.kept
        return np.arange(self.spec.cell_of_sample.size) if kept is None else kept

    def report(self) -> SamplingReport:
        """What evaluation does with the data, exactly: samples, filtered (left out), seen
        (each once), filler rows, and padding per shape, over all ranks; this rank's batches
        done and left in the current pass (the position :meth:`state_dict` records).

        Example:
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")  # it warns: 1 of 5 samples left out
            ...     s = EvalSampler([3, 4, 9, 10, 30], num_buckets=2, batch_size=2,
            ...                     max_length=12, overflow="drop")
            >>> r = s.report()
            >>> r.totals["samples"], r.totals["too_long"], r.totals["seen"], s.kept.tolist()
            (5, 1, 4, [0, 1, 2, 3])
            >>> _ = next(iter(s))
            >>> s.report().batches_done, s.report().batches_left
            (1, 1)
        """
        spec, plan = self.spec, self._plan
        n, k = int(spec.cell_of_sample.size), spec.cells.num_cells
        cells, width = plan["cell"], spec.cells.batch[plan["cell"]]
        real_rows = plan["size"].sum(axis=1)
        sizes = size_values(spec.planned_lengths(), spec.size)
        cell_size = size_values(spec.cell_lengths, spec.size)
        kept = self.kept
        real = np.bincount(spec.cell_of_sample[kept], weights=sizes[kept], minlength=k)
        batches = np.bincount(cells, minlength=k) * self.num_replicas
        filtered = dict(spec.filtered or {})
        totals = {
            "samples": n,
            "planned": int(kept.size),
            **{key: int(filtered.get(key, 0)) for key in ("too_short", "too_long", "oversize")},
            "truncated": int(filtered.get("truncated", 0)),
            "seen": int(kept.size),
            "repeated": 0,
            "dropped": 0,
            "batches": len(self),
            "padded_rows": int((width * self.num_replicas - real_rows).sum()),
        }
        rows = tuple(
            {
                "shape": tuple(int(x) for x in (spec.cells.batch[c], *spec.cell_lengths[c])),
                "samples": int(spec.counts[c]),
                "batches": int(batches[c]),
                "rows": int(spec.counts[c]),
                "real": int(real[c]),
                "padded": int(batches[c] * spec.cells.batch[c] * cell_size[c]),
            }
            for c in range(k)
            if spec.counts[c]
        )
        done = min(self._yielded, len(self))  # (the position a state_dict records)
        return SamplingReport(
            epoch=self.epoch,
            totals=totals,
            cells=rows,
            batches_done=done,
            batches_left=len(self) - done,
            samples_left=int(plan["size"][done:, self.rank].sum()),
            # the joint plan's padding, bound and gap, as a sampler's report shows them
            extra={"joint": [dict(j) for j in spec.joint]} if spec.joint else {},
        )

    def __len__(self) -> int:
        """Steps per rank (the same on every rank)."""
        return int(self._plan["cell"].size)

    # -- the plan ------------------------------------------------------------------------------
    @functools.cached_property
    def _plan(self) -> dict[str, np.ndarray]:
        """Global plan: per step its cell; per (step, rank) the start in the cell and the size."""
        spec, reps = self.spec, self.num_replicas
        counts, batch = spec.counts, spec.cells.batch
        per_step = batch * reps
        full, q = counts // per_step, counts % per_step
        steps = full + (q > 0)
        cell = np.repeat(np.arange(counts.size), steps)
        j = np.arange(cell.size) - np.repeat(np.cumsum(steps) - steps, steps)
        base = j * per_step[cell]
        r = np.arange(reps)[None, :]
        bsz = batch[cell][:, None]
        start = base[:, None] + r * bsz
        size = np.broadcast_to(bsz, start.shape).copy()
        last = j == full[cell]
        if last.any():
            ql = q[cell[last]][:, None]
            lo, extra = ql // reps, ql % reps
            size[last] = lo + (r < extra)
            start[last] = base[last][:, None] + r * lo + np.minimum(r, extra)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return {
            "cell": cell,
            "start": start + first[cell][:, None],  # position in spec.by_cell
            "size": size,
            "base": base + first[cell],  # first position of the step (filler source)
        }

    def _rows(self, pairs_step: np.ndarray, pairs_rank: np.ndarray) -> np.ndarray:
        """Dataset index of every planned row of the batches (step, rank), in that order."""
        plan, order = self._plan, self.spec.by_cell
        width = self.spec.cells.batch[plan["cell"][pairs_step]]
        size = plan["size"][pairs_step, pairs_rank]
        start = plan["start"][pairs_step, pairs_rank]
        offsets = np.concatenate([[0], np.cumsum(width)])
        within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], width)
        real = within < np.repeat(size, width)
        pos = np.repeat(start, width) + within
        out = np.full(offsets[-1], -1, dtype=np.int64)
        out[real] = order[pos[real]]
        return out

    def row_index(self, rank: int | None = None) -> np.ndarray:
        """Dataset index of every row ``rank``'s batches produce, in order (-1 on filler rows).

        The rows of rank ``rank``'s outputs concatenated over its steps (default: this rank).
        """
        rank = self.rank if rank is None else check_int("rank", rank, minimum=0)
        if rank >= self.num_replicas:
            raise ValueError(f"rank must be < num_replicas={self.num_replicas}, got rank={rank}")
        steps = np.arange(len(self))
        return self._rows(steps, np.full(steps.size, rank))

    def gathered_index(self) -> np.ndarray:
        """Dataset index of every row of outputs gathered across ranks at each step (-1: filler).

        The layout of ``accelerate``'s ``gather`` (or ``torch.distributed.all_gather`` + ``cat``)
        called on each step's batch: step 0 of ranks 0..R-1, then step 1, ...
        """
        steps = np.repeat(np.arange(len(self)), self.num_replicas)
        ranks = np.tile(np.arange(self.num_replicas), len(self))
        return self._rows(steps, ranks)

    def __iter__(self) -> Iterator[list[int]]:
        # (DataLoader(data, sampler=...) was torch's "list indices must be integers or slices,
        # not EvalBatch"; s19-user)
        check_not_in_batch_sampler(type(self).__name__)
        plan, order = self._plan, self.spec.by_cell
        r = self.rank
        cells, batch = plan["cell"], self.spec.cells.batch
        rows = self.row_index()
        offsets = np.concatenate([[0], np.cumsum(batch[cells])])
        start, self._start = self._start, 0
        self._yielded = start
        for s in range(start, cells.size):
            self._yielded = s + 1
            n, start = int(plan["size"][s, r]), int(plan["start"][s, r])
            fill = None if n else int(order[plan["base"][s]])
            yield EvalBatch(
                order[start : start + n].tolist(),
                rows[offsets[s] : offsets[s + 1]],
                fill,
                int(cells[s]),
            )

    def set_epoch(self, epoch: int) -> None:
        """Accepted as on every sampler (the HF ``Trainer``, ``accelerate`` and training loops
        call ``set_epoch`` on each one): evaluation is deterministic, so the batches are the same
        in every epoch and this records :attr:`epoch` and starts the next pass over (a state
        saved now is the start; a pending resume position is kept).

        Example:
            >>> sampler = EvalSampler([3, 4, 9, 10], num_buckets=2, batch_size=2)
            >>> before = [list(b) for b in sampler]
            >>> sampler.set_epoch(5)
            >>> sampler.epoch, [list(b) for b in sampler] == before
            (5, True)
        """
        self.epoch = check_int("epoch", epoch, minimum=0)
        if self._start == 0:  # no resume pending: the next pass starts over, and so does the
            self._yielded = 0  # state (it said the last pass's end or stop: s25-user)

    # -- resumption ----------------------------------------------------------------------------
    def state_dict(self, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Small JSON-serialisable state: the position in the evaluation and its configuration
        (as :meth:`BucketSampler.state_dict <bucketloader.BucketSampler.state_dict>`; pass
        ``batches_consumed`` when a prefetching DataLoader runs ahead of your loop)."""
        pos = self._yielded
        if batches_consumed is not None:
            pos = check_int("batches_consumed", batches_consumed, minimum=0, maximum=len(self))
            pos = check_consumed(self, pos, self._yielded, "in this pass")
        return {
            "version": 1,
            "sampler": type(self).__name__,
            "epoch": 0,
            "batches_yielded": int(pos),
            "config": self._config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values.
        """
        _, pos = check_state(state, self._config(), type(self).__name__, epochs=False)
        self._start = self._yielded = pos

    def _config(self) -> dict[str, Any]:
        return {
            "num_replicas": self.num_replicas,
            "num_samples": self.num_samples,
            "num_batches": len(self),
            "plan_digest": self.spec.digest,
        }

    # -- loading -------------------------------------------------------------------------------
    def wrap(self, dataset: Any) -> EvalDataset:
        """The dataset as :class:`EvalDataset`: batches keep their planned rows (and fillers).
        A dataset of another size than the lengths is refused (as by :meth:`dataloader`)."""
        if isinstance(dataset, EvalDataset):
            return dataset
        from bucketloader.loader import check_dataset_size

        check_dataset_size(self, dataset, int(self.spec.cell_of_sample.size))
        return EvalDataset(dataset)

    def collator(self, **kwargs: Any) -> EvalCollator:
        """``EvalCollator(PadCollator(self.shape_table, **kwargs))``."""
        from bucketloader.collate import PadCollator

        check_collator_options(f"{type(self).__name__}.collator()", PadCollator, kwargs)
        return EvalCollator(PadCollator(self.shape_table, **kwargs))

    def dataloader(self, dataset: Any, **kwargs: Any) -> DataLoader:
        """``DataLoader(self.wrap(dataset), batch_sampler=self, collate_fn=self.collator())``.

        Args:
            dataset: the map-style dataset the lengths describe.
            **kwargs: other ``DataLoader`` arguments (``num_workers``, ``pin_memory``, ...).
                ``collate_fn`` left out: :meth:`collator`, as every ``dataloader()`` of the
                library; your own must accept :class:`EvalSamples` (wrap it in
                :class:`EvalCollator` to get ``sample_mask`` and ``index``). ``collate_fn=None``
                is refused: to ``DataLoader`` (and to the other samplers' ``dataloader()``) it
                means torch's ``default_collate``, here it used to mean :meth:`collator`, and
                torch's would count the filler rows as samples; leave it out, or pass
                ``torch.utils.data.default_collate`` itself.

        Example:
            >>> lengths = [3, 4, 9, 10, 10]
            >>> sampler = EvalSampler(lengths, num_buckets=2, batch_size=2)
            >>> [b["index"].tolist() for b in sampler.dataloader([[1] * n for n in lengths])]
            [[0, 1], [2, 3], [4, -1]]
        """
        from bucketloader.loader import check_dataset_size, check_loader_options

        check_collate_fn(kwargs)
        check_dataset_size(self, dataset, int(self.spec.cell_of_sample.size))
        kwargs = check_loader_options(self, kwargs)
        kwargs.setdefault("collate_fn", self.collator())
        return DataLoader(self.wrap(dataset), batch_sampler=self, **kwargs)

    # -- dataset order -------------------------------------------------------------------------
    def restore(self, outputs: Any) -> Any:
        """Outputs gathered at every step (layout of :meth:`gathered_index`) in dataset order
        (the order of :attr:`kept` when a filter left samples out)."""
        return restore_order(
            outputs, self.positions(self.gathered_index()), num_samples=self.num_samples
        )

    def positions(self, index: Any) -> np.ndarray:
        """Dataset indices (a batch's ``index`` column, gathered) as positions in :attr:`kept`,
        fillers -1: what :func:`restore_order` takes with ``num_samples=self.num_samples``
        (the same array without a filter)."""
        index = _check_index(index)
        if self.spec.kept is None:
            return index
        return np.where(index < 0, -1, np.searchsorted(self.kept, index))

    def restore_ranks(self, outputs: Sequence[Any]) -> Any:
        """Per-rank outputs (``outputs[r]``: rank ``r``'s rows over all its steps, e.g. from
        ``torch.distributed.all_gather_object``) in dataset order, filler rows dropped."""
        if not isinstance(outputs, (list, tuple)) or len(outputs) != self.num_replicas:
            size = len(outputs) if hasattr(outputs, "__len__") else "?"
            raise ValueError(
                f"outputs must be a list of one output per rank ({self.num_replicas}), got "
                f"{type(outputs).__name__} of length {size}"
            )
        rows = [self.row_index(r) for r in range(self.num_replicas)]
        index = self.positions(np.concatenate(rows))
        if all(_per_row(o, r.size) for o, r in zip(outputs, rows, strict=True)):
            merged: Any = [x for o in outputs for x in o]  # (lists of one entry per row)
        else:
            merged = _concat(list(outputs))
        return restore_order(merged, index, num_samples=self.num_samples)

    def __repr__(self) -> str:
        return (
            f"EvalSampler({self.num_samples} samples, {len(self.shapes)} shapes, "
            f"{len(self)} steps, rank {self.rank} of {self.num_replicas})"
        )


def check_collate_fn(options: Mapping[str, Any]) -> None:
    """Refuse ``collate_fn=None`` among the ``DataLoader`` ``options`` of an
    :class:`EvalSampler` (see :meth:`EvalSampler.dataloader`).

    Example:
        >>> check_collate_fn({"num_workers": 2})  # left out: the collator
        >>> check_collate_fn({"collate_fn": None})
        Traceback (most recent call last):
        ...
        TypeError: an EvalSampler's dataloader() got collate_fn=None, which to DataLoader (and \
to the other samplers' dataloader()) means torch's default_collate; it used to mean the \
EvalSampler's collator() here, and torch's default_collate would count the filler rows of a short \
batch as samples. Leave collate_fn out for the collator, or pass \
collate_fn=torch.utils.data.default_collate to ask for torch's
    """
    if "collate_fn" in options and options["collate_fn"] is None:
        raise TypeError(
            "an EvalSampler's dataloader() got collate_fn=None, which to DataLoader (and to the "
            "other samplers' dataloader()) means torch's default_collate; it used to mean the "
            "EvalSampler's collator() here, and torch's default_collate would count the filler "
            "rows of a short batch as samples. Leave collate_fn out for the collator, or pass "
            "collate_fn=torch.utils.data.default_collate to ask for torch's"
        )


class EvalDataset(DatasetView, Dataset):
    """A dataset whose batches, loaded with an :class:`EvalSampler`, keep their planned rows.

    ``__getitems__`` (what ``DataLoader`` calls for a batch) returns :class:`EvalSamples` that
    carry the batch's ``rows``; for an empty batch it loads the :attr:`EvalBatch.fill` sample
    as filler data. Single items and ``len`` pass through.

    Example:
        >>> sampler = EvalSampler([3, 4, 9, 2], num_buckets=1, batch_size=3, balance=False)
        >>> dataset = sampler.wrap(["a", "bb", "ccc", "d"])  # an EvalDataset
        >>> [(list(s), s.rows.tolist()) for s in map(dataset.__getitems__, sampler)]
        [(['a', 'bb', 'ccc'], [0, 1, 2]), (['d'], [3, -1, -1])]
    """

    def __getitems__(self, batch: Sequence[int]) -> list[Any]:
        rows = getattr(batch, "rows", None)
        keys = list(batch)
        if not keys and getattr(batch, "fill", None) is not None:
            keys = [batch.fill]  # type: ignore[attr-defined]
        samples = load_samples(self.dataset, keys)
        return list(samples) if rows is None else EvalSamples(samples, rows)


class EvalCollator:
    """Collate :class:`EvalSamples` and mark their rows: ``sample_mask`` and ``index``.

    Wraps a collator that pads a batch to its planned shape (a
    :class:`~bucketloader.PadCollator` on :attr:`EvalSampler.shape_table`) and returns a dict;
    sets ``sample_mask`` (``(B,)`` bool) True exactly on real rows and adds ``index`` (``(B,)``
    int64, the dataset index of each row, -1 on filler rows). Picklable.

    Example:
        >>> import torch
        >>> lengths = [3, 4, 9, 10, 10, 8, 2]
        >>> sampler = EvalSampler(lengths, num_buckets=2, batch_size=4, balance=False)
        >>> dataset = sampler.wrap([torch.ones(n) for n in lengths])
        >>> collate = sampler.collator()  # an EvalCollator
        >>> out = collate(dataset.__getitems__(next(iter(sampler))))
        >>> tuple(out["inputs"].shape), out["sample_mask"].tolist(), out["index"].tolist()
        ((4, 4), [True, True, True, False], [0, 1, 6, -1])
    """

    #: Its samples carry which rows are real (``rows``): read by
    #: :class:`~bucketloader.compile.ExampleBatches`, which makes such samples for precompile.
    rows_in_samples = True

    def __init__(self, collator: Callable[[Any], Any]) -> None:
        self.collator = collator

    def __call__(self, samples: Any) -> dict[Any, Any]:
        rows = getattr(samples, "rows", None)
        if rows is None:
            raise TypeError(
                "EvalCollator needs the samples of an EvalSampler batch loaded through "
                "EvalSampler.wrap(dataset) (or sampler.dataloader(dataset)): only they carry "
                f"which rows are real; got a plain {type(samples).__name__}"
            )
        out = self.collator(list(samples))
        if not isinstance(out, Mapping):
            raise TypeError(f"the wrapped collator must return a dict, got {type(out).__name__}")
        out = dict(out)
        got = _rows_of(out)
        if got is not None and got != rows.size:
            raise ValueError(
                f"the collator returned {got} rows but the EvalSampler planned {rows.size}; build "
                "it on sampler.shape_table (sampler.collator()) so that filler rows are padded"
            )
        fill = np.flatnonzero(rows[: len(samples)] < 0)  # an empty rank's loaded row
        if fill.size and isinstance(self.collator, PadCollator):
            for key, value in out.items():  # its labels: a filler row's (NOTE [ Evaluation plan ])
                if isinstance(value, torch.Tensor) and value.ndim and value.shape[0] == rows.size:
                    pad = self.collator._label_fill(key, value)
                    if pad is not None:
                        value[fill] = pad
        out["sample_mask"] = torch.from_numpy(rows >= 0)
        out["index"] = torch.from_numpy(np.array(rows, dtype=np.int64))
        return out

    def __repr__(self) -> str:
        return f"EvalCollator({self.collator!r})"


def restore_order(outputs: Any, index: Any, *, num_samples: int | None = None) -> Any:
    """Rows of ``outputs`` in dataset order, filler rows (``index == -1``) dropped.

    Args:
        outputs: a numpy array or torch tensor whose first dim follows ``index``, or a nested
            tuple/list/dict of them (``None`` passes through), or a list with one entry per
            row (decoded strings, ragged token lists).
        index: ``(M,)`` dataset index of every row, -1 on filler rows.
        num_samples: if given, every index ``0..num_samples-1`` must appear exactly once.

    Example:
        >>> restore_order(np.array([[7], [5], [0], [6]]), [2, 0, -1, 1]).ravel().tolist()
        [5, 6, 7]
    """
    idx = _check_index(index)
    real = np.flatnonzero(idx >= 0)
    perm = real[np.argsort(idx[real], kind="stable")]
    got = idx[perm]
    n = got.size if num_samples is None else check_int("num_samples", num_samples, minimum=0)
    if got.size != n or (got != np.arange(n)).any():
        dup = got[1:][got[1:] == got[:-1]]
        missing = np.setdiff1d(np.arange(n), got)
        # an index past num_samples was listed as "repeated: [], missing: []" (s19-user)
        beyond = np.unique(got[got >= n])
        past = f", past {n - 1}: {beyond[:5].tolist()}" if beyond.size else ""
        why = (
            f"is num_samples={n} the dataset's size?"
            if beyond.size and num_samples is not None
            else "were the outputs gathered in the order the index describes?"
        )
        raise ValueError(
            f"index must hold every sample 0..{n - 1} exactly once besides -1 fillers; "
            f"repeated: {dup[:5].tolist()}, missing: {missing[:5].tolist()}{past} ({why})"
        )
    return _take(outputs, perm, idx.size)


def _check_index(index: Any) -> np.ndarray:
    """``index`` as a 1-D int64 array of dataset indices >= 0 and -1 fillers, else one error."""
    raw = index.detach().cpu().numpy() if isinstance(index, torch.Tensor) else index
    try:
        arr = np.asarray(raw)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"index must be a 1-D array of ints, got {type(index).__name__}") from exc
    if arr.ndim != 1:
        raise ValueError(f"index must be 1-D (one entry per row), got shape {arr.shape}")
    if arr.size and (arr.dtype.kind not in "iu"):
        raise TypeError(
            f"index must hold integer dataset indices (-1 on filler rows), got dtype "
            f"{arr.dtype}; pass the batches' 'index' column (int64) as gathered"
        )
    idx = arr.astype(np.int64)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"index values must fit int64, got {int(arr.max())}")
    bad = np.flatnonzero(idx < -1)
    if bad.size:
        raise ValueError(
            f"index entries must be dataset indices >= 0 or -1 (a filler row), got "
            f"{int(idx[bad[0]])} at position {int(bad[0])}"
        )
    return idx


def _per_row(tree: Any, rows: int) -> bool:
    """Whether ``tree`` is a list of one entry per row (generated text, ragged token lists), not
    a list of outputs that each have ``rows`` rows: ``restore`` took such a list for outputs and
    said "got str of shape None", and ``restore_ranks`` failed inside numpy ("zero-dimensional
    arrays cannot be concatenated"; s25-user)."""
    if not isinstance(tree, list) or len(tree) != rows:
        return False
    return not all(_rows_first(v, rows) for v in tree)


def _rows_first(tree: Any, rows: int) -> bool:
    """Whether ``tree`` is an output of ``rows`` rows: an array with ``rows`` first, ``None``,
    or a dict / tuple / list of such. (A list of outputs as long as the rows, ``[logits,
    None]`` on 2 rows, was taken for per-row values and its entries swapped: s25-rev.)"""
    if tree is None:
        return True
    if isinstance(tree, Mapping):
        return all(_rows_first(v, rows) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return bool(tree) and all(_rows_first(v, rows) for v in tree)
    return tuple(getattr(tree, "shape", ()))[:1] == (rows,)


def _take(tree: Any, perm: np.ndarray, rows: int) -> Any:
    if tree is None:
        return None
    if isinstance(tree, Mapping):
        return type(tree)({k: _take(v, perm, rows) for k, v in tree.items()})  # type: ignore[call-arg]
    if _per_row(tree, rows):
        return [tree[i] for i in perm.tolist()]
    if isinstance(tree, (list, tuple)):
        return type(tree)(_take(v, perm, rows) for v in tree)
    shape = getattr(tree, "shape", None)
    if shape is None or len(shape) == 0 or shape[0] != rows:
        raise ValueError(
            f"every output must have one row per index entry ({rows}), got "
            f"{type(tree).__name__} of shape {tuple(shape) if shape is not None else None} (a "
            f"list of per-row values, such as decoded strings, needs {rows} entries)"
        )
    if isinstance(tree, torch.Tensor):
        return tree.index_select(0, torch.as_tensor(perm, device=tree.device))
    return np.asarray(tree)[perm]


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if isinstance(first, Mapping):
        return type(first)({k: _concat([p[k] for p in parts]) for k in first})  # type: ignore[call-arg]
    if isinstance(first, (list, tuple)):
        return type(first)(_concat(list(x)) for x in zip(*parts, strict=True))
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    return np.concatenate([np.asarray(p) for p in parts])


def _rows_of(out: Mapping[Any, Any]) -> int | None:
    mask = out.get("sample_mask")
    if isinstance(mask, torch.Tensor):
        return int(mask.shape[0])
    for v in out.values():
        if isinstance(v, torch.Tensor) and v.ndim >= 1:
            return int(v.shape[0])
    return None


def _balanced(spec: BucketSpec, reps: int) -> BucketSpec:
    """The spec with each cell's batch size lowered to split its samples evenly over the same
    number of steps (NOTE [ Evaluation plan ]); its cells and shapes stay a plan made before the
    first batch."""
    batch = spec.cells.batch
    even = even_batch(spec.counts, batch, reps)  # NOTE [ Even batches ]
    if (even == batch).all():
        return spec
    even.setflags(write=False)
    cells = dataclasses.replace(spec.cells, batch=even)
    return dataclasses.replace(spec, cells=cells)
