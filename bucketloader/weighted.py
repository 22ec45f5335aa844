"""WeightedBucketSampler: per-sample weights and sampling with replacement, at planned shapes.

NOTE [ Weighted draws inside buckets ]
torch's ``WeightedRandomSampler(weights, num_samples, replacement)`` draws ``num_samples`` indices
with probability proportional to ``weights``. Here every epoch draws ``num_samples`` samples and
batches them in their buckets, so every batch keeps a planned shape. To keep ``len()`` exact and
equal on every rank, the draws are stratified by cell: cell ``c`` gets a fixed number of draws
``n_c`` proportional to its total weight ``W_c`` (largest remainders, so ``sum_c n_c ==
num_samples``; without replacement capped at the cell's samples of positive weight, the excess
going to the other cells by weight), and each epoch draws its ``n_c`` samples inside the cell with
probability proportional to their weights (``numpy.random.Generator.choice`` from
``SeedSequence([seed, epoch, TAG])``), with or without replacement. A sample is then drawn with
probability ``n_c / num_samples * w_i / W_c``, which is ``w_i / W`` up to the rounding of ``n_c``
(exactly, whenever ``num_samples * W_c / W`` is whole). Samples of weight 0 are never drawn.
The draws form the epoch's samples: within-cell shuffle, cell interleave, ranks, ``last_batch``,
``longest_first`` and ``accumulate`` then apply as for :class:`~bucketloader.BucketSampler`
(NOTE [ Epoch plan ] in :mod:`bucketloader.plan.epoch`). Resuming recomputes the epoch's draws
from ``(seed, epoch)``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import warnings
from typing import Any

import numpy as np

from bucketloader._validation import check_bool, check_int
from bucketloader.plan import BucketSpec, EpochPlan, SamplingReport, ShapeTable, plan_epoch
from bucketloader.plan.accumulate import grouped_steps
from bucketloader.plan.epoch import apportion, fill_pools
from bucketloader.plan.report import LOSS_WARNING, plan_report
from bucketloader.sampler import BucketSampler

__all__ = ["WeightedBucketSampler"]

#: Mixed into the seeds of the draws ("draw"), so they never alias a plan's shuffle.
_DRAW = 0x64726177


#: The most draws an epoch takes (its plan holds one index per draw).
MAX_DRAWS = 1 << 40


class WeightedBucketSampler(BucketSampler):
    """``WeightedRandomSampler`` semantics inside buckets: ``num_samples`` weighted draws per
    epoch, batched at planned shapes (NOTE [ Weighted draws inside buckets ]).

    Args:
        lengths: per-sample lengths, as for :class:`~bucketloader.BucketSampler` (or a spec).
        weights: one weight per sample (finite, >= 0, not all 0 among the planned samples): a
            sequence, array or tensor.
        num_samples: draws per epoch (default: the planned samples).
        replacement: draw with replacement (``True``, torch's default); without, a sample is
            drawn at most once per epoch (a warning counts the draws that then go to other
            samples than the weights ask).
        **options: :class:`~bucketloader.BucketSampler`'s options (``shuffle``, ``seed``, ranks,
            ``longest_first``, ``accumulate``) and the spec options (``num_buckets``,
            ``batch_size`` / ``max_tokens``, ``last_batch``, ...); not per-dataset ``weights``.

    Example:
        >>> sampler = WeightedBucketSampler([3, 4, 9, 10, 10, 12], [1, 0, 1, 1, 0, 1],
        ...                                 num_samples=8, num_buckets=2, batch_size=2)
        >>> drawn = [i for batch in sampler for i in batch]
        >>> len(drawn), sorted(set(drawn)) <= [0, 2, 3, 5], sampler.shapes
        (8, True, [(2, 4), (2, 12)])
    """

    _promotes = False  # its epochs batch the draws, not the spec's samples
    _batches_the_spec = False  # (num_samples draws may fill batches the spec's samples cannot)

    def __init__(
        self,
        lengths: Any,
        weights: Any,
        *,
        num_samples: int | None = None,
        replacement: bool = True,
        **options: Any,
    ) -> None:
        if "weights" in options:  # pragma: no cover - the positional argument takes it
            raise TypeError("weights is the per-sample weights here")
        self._weighting = (weights, num_samples, replacement)  # (_own_arguments checks them)
        super().__init__(lengths, **options)
        del self._weighting
        self._warn_capped_draws()

    def _warn_capped_draws(self) -> None:
        """Without replacement a sample is drawn at most once an epoch, so weights that ask more
        of it (``num_samples * w_i / W > 1``) give its excess draws to the other samples: a
        dataset of 600 samples weighted 0.5 against 3,000 got 30% of 2,000 draws, silently
        (s21). Warn when more than ``LOSS_WARNING`` of the draws move so."""
        if self.replacement:
            return
        w = np.where(self.spec.cell_of_sample >= 0, self.sample_weights, 0.0)
        asked = self.num_samples * w / w.sum()
        over = asked > 1.0
        moved = float((asked[over] - 1.0).sum())
        if moved > LOSS_WARNING * self.num_samples:
            warnings.warn(
                f"WeightedBucketSampler(replacement=False): weights ask {int(over.sum()):,} "
                f"samples for more than one of the {self.num_samples:,} draws per epoch (up to "
                f"{float(asked.max()):.2f}), but without replacement each is drawn at most once; "
                f"about {moved:,.0f} draws ({moved / self.num_samples:.0%}) go to the other "
                "samples instead, so those samples' share falls short of their weight; pass "
                "replacement=True to follow the weights, or a lower num_samples",
                UserWarning,
                stacklevel=3,
            )

    def _own_arguments(self) -> dict[str, Any]:
        """The weights, ``num_samples`` and ``replacement``, checked before the ranks' check of
        arguments, which they join: a rank given other weights or another ``num_samples`` drew
        other samples, in another number of steps, silently (s20: 8 steps on one rank, 12 on
        the other), and a rank whose weights were refused stopped alone."""
        weights, num_samples, replacement = self._weighting
        self.replacement = check_bool("replacement", replacement)
        self.sample_weights = _check_sample_weights(weights, self.spec)
        planned = self.spec.num_planned
        self.num_samples = (
            planned
            if num_samples is None  # (each epoch holds its draws: 2**70 was numpy's OverflowError)
            else check_int("num_samples", num_samples, minimum=1, maximum=MAX_DRAWS)
        )
        self.draws = self._draws_per_cell()
        digest = hashlib.sha256(np.ascontiguousarray(self.sample_weights, "<f8").tobytes())
        return {
            "sample_weights": digest.hexdigest()[:16],
            "num_draws": self.num_samples,
            "replacement": self.replacement,
        }

    # -- the fixed draws per cell -------------------------------------------------------------
    def _draws_per_cell(self) -> np.ndarray:
        spec = self.spec
        cells = spec.cell_of_sample
        kept = cells >= 0
        k = spec.cells.num_cells
        w = np.where(kept, self.sample_weights, 0.0)
        total = np.bincount(cells[kept], weights=w[kept], minlength=k)
        cap = np.bincount(cells[kept & (w > 0)], minlength=k)
        if not self.replacement and self.num_samples > int(cap.sum()):
            raise ValueError(
                f"num_samples={self.num_samples} draws without replacement need as many samples "
                f"of positive weight, but the plan has {int(cap.sum())}; lower num_samples or "
                "pass replacement=True"
            )
        n = apportion(self.num_samples, total / total.sum())
        if not self.replacement:  # move the excess over a cell's samples to the others
            while (n > cap).any():
                excess = int((n - cap).clip(min=0).sum())
                n = np.minimum(n, cap)
                room = (cap > n) & (total > 0)
                extra = np.zeros(k, dtype=np.int64)
                extra[room] = apportion(excess, total[room] / total[room].sum())
                n = n + extra
        return n

    def _drawn_spec(self, drawn: np.ndarray) -> BucketSpec:
        """The epoch's draws as the samples of a spec (same cells, ``n_c`` samples each)."""
        spec = self.spec
        return dataclasses.replace(
            spec,
            lengths=spec.lengths[drawn],
            groups=None if spec.groups is None else spec.groups[drawn],
            cell_of_sample=spec.cell_of_sample[drawn],
            filtered=None,
        )

    def draw(self, epoch: int | None = None) -> np.ndarray:
        """The sample indices drawn for ``epoch`` (default: the current one), grouped by cell."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch, _DRAW]))
        spec = self.spec
        order, counts = spec.by_cell, spec.counts
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        parts = []
        for c in np.flatnonzero(self.draws).tolist():
            members = order[start[c] : start[c] + counts[c]]
            w = self.sample_weights[members]
            parts.append(
                rng.choice(members, int(self.draws[c]), replace=self.replacement, p=w / w.sum())
            )
        return np.concatenate(parts).astype(np.int64) if parts else order[:0]

    @functools.cached_property
    def _template(self) -> BucketSpec:
        counts = self.spec.counts
        by_cell = self.spec.by_cell
        start = np.concatenate([[0], np.cumsum(counts)[:-1]])
        first = [by_cell[np.full(int(n), start[c])] for c, n in enumerate(self.draws.tolist())]
        return self._drawn_spec(np.concatenate(first))

    # -- what the sampler promises (the draws' counts, the same every epoch) ------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes of the draws (same cells as the spec)."""
        table = self._template.shape_table(self.num_replicas)
        # the shortest planned length is the data's, not the template's (one sample per cell:
        # a batch of draws all below half of that one's length was refused as other units,
        # lengths [20] + [3] * 50 in one bucket; s24-accfill)
        table = dataclasses.replace(table, shortest=self.spec._shortest())
        if self._fill_pools:  # a filled cell's batch holds shorter draws after its own
            return dataclasses.replace(table, promoted=True)
        return table

    @functools.cached_property
    def _fill_pools(self) -> dict[int, np.ndarray]:
        """The cells whose ``last_batch="fill"`` steps shorter draws fill (NOTE [ Filling a
        small bucket ] in :mod:`bucketloader.plan.epoch`): every epoch draws the same count per
        cell, so the same cells."""
        return fill_pools(self._template, self.num_replicas, self.accumulate)

    @functools.cached_property
    def _len(self) -> int:
        steps = self._template.num_steps(self.num_replicas)
        return int(grouped_steps(steps, self.accumulate).sum())

    def _make_plan(self, epoch: int) -> EpochPlan:
        drawn = self.draw(epoch)
        plan = self._virtual_plan(drawn, epoch, self.rank)
        return dataclasses.replace(plan, indices=drawn[plan.indices])

    def _virtual_plan(self, drawn: np.ndarray, epoch: int, rank: int) -> EpochPlan:
        return plan_epoch(
            self._drawn_spec(drawn),
            **self._coordinates(epoch, rank),
            longest_first=self.longest_first,
            accumulate=self.accumulate,
        )

    def report(self, epoch: int | None = None) -> SamplingReport:
        """:meth:`BucketSampler.report` of the epoch's draws: padding per shape over the draws;
        ``seen`` / ``repeated`` / ``dropped`` count the dataset's samples."""
        current = epoch is None or epoch == self.epoch
        e = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        drawn = self.draw(e)
        report = plan_report(
            self._drawn_spec(drawn),
            **self._coordinates(e),
            longest_first=self.longest_first,
            batches_done=self._batches_done() if current else 0,
            accumulate=self.accumulate,
        )
        everything = np.concatenate(
            [drawn[self._virtual_plan(drawn, e, r).indices] for r in range(self.num_replicas)]
        )
        seen = int(np.unique(everything).size)
        planned = self.spec.num_planned
        totals = dict(report.totals)
        totals.update(
            {k: int(v) for k, v in (self.spec.filtered or {}).items()},
            samples=int(self.spec.cell_of_sample.size),
            planned=planned,
            seen=seen,
            repeated=int(everything.size) - seen,
            dropped=planned - seen,
        )
        return dataclasses.replace(report, totals=totals)

    def _config(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.sample_weights.tobytes()).hexdigest()[:16]
        return {
            **super()._config(),
            "sample_weights": digest,
            "draws": int(self.num_samples),
            "replacement": self.replacement,
        }


def _check_sample_weights(weights: Any, spec: BucketSpec) -> np.ndarray:
    n = int(spec.cell_of_sample.size)
    if hasattr(weights, "detach"):
        weights = weights.detach().cpu().numpy()
    try:
        arr = np.array(weights, dtype=np.float64)  # (a copy: the caller's array stays writable)
    except (TypeError, ValueError):
        arr = None
    at = _first_string(weights)
    if at is not None:  # (strings such as "1" were read as numbers)
        raise TypeError(
            f"weights must be numbers, got strings (e.g. {at[1]!r} at index {at[0]}); convert "
            "them first, e.g. weights = [float(w) for w in weights]"
        )
    if arr is None:
        raise TypeError(
            "weights must be one number per sample (a sequence, array or tensor), got "
            f"{type(weights).__name__}"
        )
    if arr.shape != (n,):
        per_group = spec.groups is not None and arr.shape == (len(spec.group_values),)
        raise ValueError(
            f"weights must give one weight per sample ({n} samples), got shape {arr.shape}"
            + (
                # (s21: a mixture's per-dataset weights, the natural first try with groups=)
                f", one per group {list(spec.group_values)}: for a share of each epoch per "
                "dataset pass them to BucketSampler(lengths, groups=..., weights=...), or give "
                "each sample its dataset's weight over the dataset's size here"
                if per_group
                else ""
            )
        )
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"weights must be finite numbers >= 0, got {arr[i].item()!r} at index {i}")
    kept = spec.cell_of_sample >= 0
    with np.errstate(over="ignore"):
        total = arr[kept].sum()
    if not math.isfinite(total):  # finite weights whose sum is not (1e308 each): the same
        arr = arr / arr.max()  # draws on a scale that sums (they read as all 0)
        total = arr[kept].sum()
    if total <= 0:
        raise ValueError(
            "weights must not all be 0 among the planned samples (those the filters keep)"
        )
    arr.setflags(write=False)
    return arr


def _first_string(weights: Any) -> tuple[int, Any] | None:
    """The index and value of the first string among ``weights`` (``None``: none), which
    ``float()`` would read as a number; numbers of any kind (numpy, ``Fraction``, ``Decimal``,
    a pandas column of ``object`` dtype) pass."""
    try:
        kind = np.asarray(weights).dtype.kind
    except (TypeError, ValueError):
        return None  # (ragged: refused as not one number per sample)
    if kind in "biufc":
        return None  # (the usual case: no per-item scan)
    items = np.asarray(weights, dtype=object).ravel()
    return next(((i, x) for i, x in enumerate(items) if isinstance(x, (str, bytes))), None)
