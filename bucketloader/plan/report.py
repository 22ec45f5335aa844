"""SamplingReport: what a sampler or a stream did with the data (Lhotse's ``get_report``).

NOTE [ Where the report's numbers come from ]
A map-style sampler's report is *reconstructed from the plan*: the plan is a pure function of
``(seed, epoch, ranks)``, so every count (samples seen, repeated, dropped, padding per bucket,
remaining batches) is exact and needs no bookkeeping during iteration; the only state is the
sampler's position. A stream cannot know its data before reading it, so its workers count as they
go and write their counters into a small shared-memory table the main process reads (NOTE [ A
stream's counters across DataLoader workers ] in :mod:`bucketloader.stream.counters`). Both give
the same :class:`SamplingReport`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader.plan.budget import size_values
from bucketloader.plan.epoch import plan_epoch
from bucketloader.plan.promote import Promotion
from bucketloader.plan.spec import BucketSpec

#: Warn when a plan (or a stream's pass) leaves out more than this fraction of its samples.
LOSS_WARNING = 0.01


class DataLossWarning(UserWarning):
    """The category of the warnings that a sampler or a stream leaves samples out (more than
    :data:`LOSS_WARNING` of them: a filter, ``overflow="drop"``, ``last_batch="drop"``, ...),
    with their count. Where dropping them was your choice, silence exactly these:

    Example:
        >>> import warnings
        >>> from bucketloader import BucketSampler
        >>> from bucketloader.plan import DataLossWarning
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error")  # (any other warning would raise here)
        ...     warnings.filterwarnings("ignore", category=DataLossWarning)
        ...     s = BucketSampler([3, 4, 5, 9, 30], num_buckets=2, batch_size=2, last_batch="drop")
        >>> issubclass(DataLossWarning, UserWarning)
        True
    """


def warn_truncated(
    owner: str, cut: int, n: int, *, lost: int, total: int, unit: str = "samples", stacklevel: int
) -> None:
    """Warn once, as :class:`DataLossWarning`, when ``overflow="truncate"`` cuts more than
    :data:`LOSS_WARNING` of the ``n`` samples (or documents): the option keeps them, but the
    ``lost`` of their ``total`` elements past the cut are never trained on (NOTE [ Warning about
    silent losses ] in :mod:`bucketloader.sampler`; session 21: GSM8K packed in rows of 200 cut
    38 of 2,000 documents, 964 tokens, silently).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     warn_truncated("BucketSampler", 3, 100, lost=50, total=2_000, stacklevel=2)
        >>> print(w[0].message)  # doctest: +NORMALIZE_WHITESPACE
        this BucketSampler cuts 3 of 100 samples (3.0%) (overflow='truncate'): 50 of the 2,000
        elements declared (2.5%) are past the cut and never seen, every epoch;
        report().totals['truncated'] counts them. A longer max_length keeps them whole (filter
        bucketloader.plan.DataLossWarning where the cut is what you want)
    """
    if cut <= LOSS_WARNING * n:
        return
    share = f" ({lost / total:.1%})" if total else ""
    # (the hint names what works: report() is a SamplingReport, not subscriptable, and
    # DataLossWarning is not importable from bucketloader itself; s21-rev)
    longer = "row_length" if unit == "documents" else "max_length"
    warnings.warn(
        f"this {owner} cuts {cut:,} of {n:,} {unit} ({cut / n:.1%}) (overflow='truncate'): "
        f"{lost:,} of the {total:,} elements declared{share} are past the cut and never seen, "
        f"every epoch; report().totals['truncated'] counts them. A longer {longer} keeps them "
        "whole (filter bucketloader.plan.DataLossWarning where the cut is what you want)",
        DataLossWarning,
        stacklevel=stacklevel + 1,
    )


#: Warn when ``last_batch="fill"`` repeats more than this fraction of an epoch's samples (or
#: documents), or trains any of them :data:`FILL_TIMES` times or more in an epoch (NOTE [ What
#: fill repeats ] in :mod:`bucketloader.plan.epoch`).
FILL_WARNING = 0.05
FILL_TIMES = 3


def warn_fill_repeats(
    owner: str,
    repeated: int,
    n: int,
    *,
    most: int,
    small: str,
    num_replicas: int,
    unit: str = "samples",
    about: bool = False,
    accumulate: int = 1,
    counted: str = "report().totals['repeated'] counts each epoch exactly",
    instead: str | None = None,
    stacklevel: int,
) -> None:
    """Warn once when ``last_batch="fill"`` repeats more than :data:`FILL_WARNING` of the ``n``
    samples (or documents) per epoch, or trains some ``most >= FILL_TIMES`` times an epoch
    (``small``: the shapes with fewer samples than one step, whose samples all repeat, the same
    ones every epoch; ``counted``: where the count is; ``instead``: the way out, where it is not
    ``"pad"``'s and a smaller batch's). Repeating is the option's purpose, so a few random
    repeats (what torch's ``DistributedSampler`` does) are silent; a large or concentrated share
    changes what the model trains on, which is said with the count and the way out (NOTE [ What fill
    repeats ] in :mod:`bucketloader.plan.epoch`).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     warn_fill_repeats("BucketSampler", 3, 1_000, most=4, small="", num_replicas=8,
        ...                       stacklevel=2)
        >>> print(w[0].message)  # doctest: +NORMALIZE_WHITESPACE
        last_batch='fill' makes this BucketSampler repeat 3 samples per epoch on 8 rank(s)
        (0.3% of 1,000), some of them up to 4 times an epoch: the model trains on those more
        often than on the rest; report().totals['repeated'] counts each epoch exactly.
        last_batch='pad' completes the short steps with masked padding rows instead (it repeats
        samples only for a rank that would get none); a smaller batch_size or max_tokens needs
        fewer repeats
    """
    if repeated <= FILL_WARNING * n and most < FILL_TIMES:
        return
    times = f", some of them up to {most:,} times an epoch" if most >= FILL_TIMES else ""
    pad = (
        f"last_batch='pad' completes the short steps with masked padding rows instead (it "
        f"repeats {unit[:-1]}s only for a rank that would get none)"
        if accumulate == 1  # (its accumulation groups repeat samples too: s25-user)
        else f"With accumulate={accumulate}, last_batch='pad' repeats samples too (the groups' "
        "extra steps), and a smaller accumulate needs fewer"
    )
    warnings.warn(
        f"last_batch='fill' makes this {owner} repeat {'about ' if about else ''}{repeated:,} "
        f"{unit} per epoch on {num_replicas} rank(s) ({repeated / max(n, 1):.1%} of {n:,})"
        f"{times}{small}: the model trains on those more often than on the rest; {counted}. "
        + (instead or f"{pad}; a smaller batch_size or max_tokens needs fewer repeats"),
        UserWarning,
        stacklevel=stacklevel + 1,
    )


def warn_rank_repeats(
    owner: str,
    repeated: int,
    n: int,
    *,
    num_replicas: int,
    parts: str,
    fix: str,
    rows: int | None = None,
    stacklevel: int,
) -> None:
    """Warn once when the repeats that give every rank without a sample (or, packed, a row) of
    a last step one of its own (``last_batch="pad"`` or ``"keep"``: NOTE [ last_batch and
    replicas ] in :mod:`bucketloader.plan.epoch`) pass :data:`FILL_WARNING` of the ``n``
    samples per epoch, the share ``"fill"`` warns at (:func:`warn_fill_repeats`). ``parts``
    says which last steps (``"8 buckets"``); ``rows``, for a packing plan, the rows repeated
    (exact), and then ``repeated`` is their documents, about (which rows repeat changes per
    epoch); ``fix`` the closing sentence: what needs fewer repeats. A bucket's one sample
    repeated on 8 ranks is a few rows of a large set, as ``DistributedSampler`` pads: not warned
    about (s28-user: 100 samples in 8 buckets on 16 ranks repeated 28, silently).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     warn_rank_repeats("PackSampler", 120, 40, num_replicas=64, parts="1 row length",
        ...                       fix="Fewer ranks need fewer repeats", rows=48, stacklevel=2)
        >>> print(w[0].message)  # doctest: +NORMALIZE_WHITESPACE
        this PackSampler repeats 48 rows (about 120 documents) per epoch over 64 ranks (300.0%
        of 40): the last step of its 1 row length gives every rank without a row of its own a
        repeat, so the model trains on those more often than on the rest;
        report().totals['repeated'] counts each epoch exactly. Fewer ranks need fewer repeats
    """
    if repeated <= FILL_WARNING * n:
        return
    unit, item = ("document", "row") if rows is not None else ("sample", "sample")
    unit += "s" if repeated != 1 else ""
    what = f"{repeated:,} {unit}"
    if rows is not None:  # (a packing plan: the rows exact, their documents about)
        what = f"{rows:,} row{'s' if rows != 1 else ''} (about {what})"
    each = "its" if parts.startswith("1 ") else "each of its"
    warnings.warn(
        f"this {owner} repeats {what} per epoch over {num_replicas:,} ranks "
        f"({repeated / max(n, 1):.1%} of {n:,}): the last step of {each} {parts} gives every "
        f"rank without a {item} of its own a repeat, so the model trains on those more often "
        "than on the rest; report().totals['repeated'] counts each epoch exactly. "
        f"{fix}",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


#: The option that left samples out of a plan, by its key in a spec's ``filtered`` (the
#: samplers' warnings name it: NOTE [ Warning about silent losses ] in
#: :mod:`bucketloader.sampler`).
LEFT_OUT_BY = {
    "too_short": "min_length",
    "too_long": "max_length",
    "oversize": "oversize",
    "filter": "filter=",
    "no_shape": "shapes=",
}

#: The totals a report may carry, in display order, with what each counts.
TOTALS = {
    "samples": "samples declared (a sampler) or read (a stream)",
    "planned": "samples the plan admits after the filters",
    "too_short": "left out: shorter than min_length",
    "too_long": "left out: longer than max_length (overflow='drop')",
    "oversize": "left out: do not fit max_tokens (oversize='drop')",
    "filter": "left out: rejected by filter=",
    "no_shape": "left out: no shape in shapes= covers them",
    "truncated": "planned at max_length and cut (overflow='truncate')",
    "single": "in batches of one because they exceed max_tokens (oversize='single')",
    "seen": "distinct samples in the epoch's batches",
    "repeated": "extra appearances of samples ('fill', 'pad' over ranks, weights, accumulate)",
    "dropped": "admitted but not in this epoch (last_batch='drop', weights, a stream's tail)",
    "promoted": "samples batched in a longer bucket (a sampler's leftovers, a stream's ranks)",
    "left_over": "stream: samples still buffered when the epoch's steps ran out",
    "batches": "batches of the epoch on this rank",
    "padded_rows": "rows of padding (masked) added to keep planned batch shapes",
    "zero_length": "stream: samples of length 0 kept (NaN in softmax attention: drop them)",
}


@dataclass(frozen=True)
class SamplingReport:
    """Counts and padding of one epoch (see NOTE [ Where the report's numbers come from ]).

    Attributes:
        epoch: the epoch reported.
        totals: counts by name (the keys of :data:`TOTALS` that apply).
        cells: one dict per planned shape: ``shape`` (the full batch shape), ``samples``
            (admitted samples of the cell, a sampler only), ``batches``, ``rows`` (real rows),
            ``real`` (real elements, counted by the plan's ``size``) and ``padded`` (elements of
            the padded batches), over all ranks for a sampler, this rank for a stream.
        batches_done: batches handed out so far in this epoch (this rank).
        batches_left: batches still to come in this epoch (this rank), ``None`` if unknown.
        samples_left: samples in those batches, ``None`` if unknown.
        source: ``"plan"`` (reconstructed) or ``"stream"`` (counted by the stream's workers).
        extra: more keys for :meth:`as_dict`; a joint plan's ``"joint"``: per group its
            padding, certified lower bound, gap and status (``BucketSpec.joint``).

    Example:
        >>> from bucketloader import BucketSampler
        >>> report = BucketSampler([3, 4, 9, 10, 10], num_buckets=2, batch_size=2).report()
        >>> report.totals["seen"], report.batches_left, round(report.padding, 3)
        (5, 3, 0.333)
    """

    epoch: int
    totals: Mapping[str, int]
    cells: tuple[Mapping[str, Any], ...]
    batches_done: int = 0
    batches_left: int | None = None
    samples_left: int | None = None
    source: str = "plan"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of_plan(
        cls,
        epoch: int,
        totals: Mapping[str, int],
        cells: tuple[Mapping[str, Any], ...],
        plan: Any,
        batches_done: int,
        extra: Mapping[str, Any] | None = None,
    ) -> SamplingReport:
        """The report reconstructed from the plan (``source="plan"``), with this rank's position
        in its ``plan`` of the epoch (``offsets`` and ``len()``): ``batches_done`` of its batches
        handed out (at most all of them), the rest and their samples still to come."""
        done = min(batches_done, len(plan))
        return cls(
            epoch=epoch,
            totals=totals,
            cells=cells,
            batches_done=done,
            batches_left=len(plan) - done,
            samples_left=int(plan.offsets[-1] - plan.offsets[done]),
            source="plan",
            extra={} if extra is None else extra,
        )

    @property
    def padding(self) -> float:
        """Padded elements per real element over the epoch's batches (0.0 with none)."""
        real = sum(int(c["real"]) for c in self.cells)
        padded = sum(int(c["padded"]) for c in self.cells)
        return (padded - real) / real if real else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "epoch": self.epoch,
            "source": self.source,
            "totals": dict(self.totals),
            "cells": [
                {k: list(v) if isinstance(v, tuple) else v for k, v in c.items()}
                for c in self.cells
            ],
            "batches_done": self.batches_done,
            "batches_left": self.batches_left,
            "samples_left": self.samples_left,
            "padding": self.padding,
            **dict(self.extra),
        }

    def __str__(self) -> str:
        lines = [f"epoch {self.epoch} ({self.source}): padding {self.padding:.2%}"]
        for key in TOTALS:
            if key in self.totals:
                lines.append(f"  {key:<12} {int(self.totals[key]):>12,}  {TOTALS[key]}")
        left = "?" if self.batches_left is None else f"{self.batches_left:,}"
        lines.append(f"  batches done {self.batches_done:,}, left {left}")
        for j in self.extra.get("joint") or ():
            lines.append(
                f"  joint plan (group {j['group']}): {j['cells']} cells, padding "
                f"{j['objective']:,}{_ratio(j)} >= bound {j['lower_bound']:,} (gap {j['gap']:.2%}, "
                f"{j['status']}, {j['seconds']:.2f} s{', cached' if j.get('cached') else ''})"
            )
        lines.append(f"  {'shape':<24} {'batches':>9} {'rows':>10} {'padding':>9}")
        for c in self.cells:
            real, padded = int(c["real"]), int(c["padded"])
            pad = f"{(padded - real) / real:.2%}" if real else "-"
            shape = "x".join(map(str, c["shape"]))
            lines.append(f"  {shape:<24} {int(c['batches']):>9,} {int(c['rows']):>10,} {pad:>9}")
        return "\n".join(lines)


def _ratio(joint: Mapping[str, Any]) -> str:
    """`` (45.18%)``: a joint plan's padding per real element, beside the epoch's headline
    (which also counts promoted samples and filler rows: docs/joint-shapes.md)."""
    ratio = joint.get("padding_ratio")
    return "" if ratio is None else f" ({ratio:.2%})"


def plan_report(
    spec: BucketSpec,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    num_replicas: int,
    rank: int,
    weights: Any = None,
    longest_first: bool = False,
    batches_done: int = 0,
    accumulate: int = 1,
    promotion: Promotion | None = None,
    fill_shorter: bool = True,
) -> SamplingReport:
    """The exact report of one epoch of ``spec``, from the plans of all ranks."""
    plans = [
        plan_epoch(
            spec,
            seed=seed,
            epoch=epoch,
            shuffle=shuffle,
            num_replicas=num_replicas,
            rank=r,
            weights=weights,
            longest_first=longest_first,
            accumulate=accumulate,
            promotion=promotion,
            fill_shorter=fill_shorter,
        )
        for r in range(num_replicas)
    ]
    n = spec.cell_of_sample.size
    k = spec.cells.num_cells
    everything = np.concatenate([p.indices for p in plans])
    appear = np.bincount(everything, minlength=n)
    planned = spec.num_planned
    seen = int((appear > 0).sum())
    sizes = np.concatenate([np.diff(p.offsets) for p in plans])
    cells = np.concatenate([p.cells for p in plans])
    full = spec.cell_batch[cells]
    alloc = full if spec.last_batch in ("pad", "fill") else sizes
    sample_size = size_values(spec.planned_lengths(), spec.size)
    cell_size = size_values(spec.cell_lengths, spec.size)
    batch_of = np.repeat(cells, sizes)
    real = np.bincount(batch_of, weights=sample_size[everything], minlength=k)
    rows = np.bincount(batch_of, minlength=k)
    batches = np.bincount(cells, minlength=k)
    padded = np.bincount(cells, weights=alloc * cell_size[cells], minlength=k)
    filtered = dict(spec.filtered or {})
    totals = {
        "samples": n,
        "planned": planned,
        **{key: int(filtered.get(key, 0)) for key in ("too_short", "too_long", "oversize")},
        "truncated": int(filtered.get("truncated", 0)),
        **{str(key): int(filtered[key]) for key in ("filter", "no_shape") if key in filtered},
    }
    budget = spec.rule.budget if spec.rule is not None else None
    if budget is not None and budget.oversize == "single":
        over = cell_size > budget.max_tokens
        totals["single"] = int(spec.counts[over].sum())
    totals.update(
        seen=seen,
        repeated=int(appear.sum()) - seen,
        dropped=planned - seen,
        batches=len(plans[rank]),
        padded_rows=int(alloc.sum() - sizes.sum()),
    )
    # (0 where nothing is promoted: batch_size plans, promote=False; a key every report has)
    totals["promoted"] = promotion.num_promoted if promotion is not None else 0
    cell_rows = tuple(
        {
            "shape": tuple(int(x) for x in (spec.cell_batch[c], *spec.cell_lengths[c])),
            "samples": int(spec.counts[c]),
            "batches": int(batches[c]),
            "rows": int(rows[c]),
            "real": int(real[c]),
            "padded": int(padded[c]),
        }
        for c in range(k)
    )
    joint = {"joint": [dict(j) for j in spec.joint]} if spec.joint else {}
    return SamplingReport.of_plan(epoch, totals, cell_rows, plans[rank], batches_done, joint)
