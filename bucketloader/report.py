"""How dynamic is my data? ``analyze()`` lengths, a dataset or a DataLoader before training.

The report answers three questions: how varied the lengths are (N, distinct lengths, quantiles),
how many distinct batch shapes a loader actually produces (by scanning its batches, like the
Gaudi ``data_dynamicity`` tool), and what each bucketing strategy would cost at each shape budget
k (padding ratio and shape count), with a recommended k under a stated rule and a plot.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bucketloader._report_recommend import recommend_by_costs, recommend_by_target
from bucketloader._scan import (
    dataset_lengths,
    is_dataloader,
    is_dataset,
    scan_batches,
)
from bucketloader._validation import as_lengths, check_float, check_int
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import solve_boundaries
from bucketloader.strategies import STRATEGIES, resolve_strategy

#: Strategies compared by default (``"lp"`` reaches the same optimum as ``"optimal"``, slower).
DEFAULT_STRATEGIES = ("optimal", "percentile", "equal_mass", "linear", "geometric", "pad_to_max")
DEFAULT_K = (4, 8, 16, 32)


@dataclass(frozen=True)
class Row:
    """One strategy at one shape budget: what it pads and how many shapes it makes."""

    strategy: str
    num_buckets: int
    boundaries: tuple[int, ...]
    padding_ratio: float

    @property
    def num_shapes(self) -> int:
        """Buckets actually used: one batch shape each with a fixed batch size and drop_last."""
        return len(self.boundaries)


@dataclass(frozen=True, eq=False)
class DynamicityReport:
    """What :func:`analyze` found. ``str(report)`` is the text summary; :meth:`plot` the picture.

    Attributes:
        source: what was analysed (for titles).
        histogram: the length histogram (``None`` for a DataLoader scanned without ``column``).
        rows: padding ratio and shape count per strategy × k.
        recommended: the row chosen by :attr:`rule` (``None`` without lengths).
        rule: the recommendation rule, in words.
        padding_target: the padding ratio the rule aims under.
        dynamic: dynamic-padding baseline (random batches padded to their longest), if asked.
        batch_shapes: field → Counter of batch shapes, from scanning a DataLoader.
        num_batches: batches scanned.
    """

    source: str
    histogram: LengthHistogram | None
    rows: tuple[Row, ...] = ()
    recommended: Row | None = None
    rule: str = ""
    padding_target: float = 0.05
    dynamic: dict[str, Any] | None = None
    batch_shapes: dict[str, Counter[tuple[int, ...]]] = field(default_factory=dict)
    num_batches: int = 0

    def row(self, strategy: str, num_buckets: int) -> Row:
        """The row of ``strategy`` at ``num_buckets``."""
        for r in self.rows:
            if r.strategy == strategy and r.num_buckets == num_buckets:
                return r
        raise KeyError(f"no row for strategy={strategy!r}, num_buckets={num_buckets}")

    def summary(self) -> str:
        """The report as text."""
        from bucketloader._report_text import summary

        return summary(self)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form."""
        h = self.histogram
        return {
            "source": self.source,
            "lengths": None if h is None else _stats(h),
            "rows": [
                {
                    "strategy": r.strategy,
                    "num_buckets": r.num_buckets,
                    "boundaries": list(r.boundaries),
                    "padding_ratio": r.padding_ratio,
                    "num_shapes": r.num_shapes,
                }
                for r in self.rows
            ],
            "recommended": None
            if self.recommended is None
            else {
                "strategy": self.recommended.strategy,
                "num_buckets": self.recommended.num_buckets,
            },
            "rule": self.rule,
            "dynamic": self.dynamic,
            "num_batches": self.num_batches,
            "batch_shapes": {
                name: [{"shape": list(s), "count": c} for s, c in counts.most_common()]
                for name, counts in self.batch_shapes.items()
            },
        }

    def plot(self, path: str | Path, *, dpi: int = 130) -> Path:
        """Write a PNG: the length histogram with the recommended boundaries over it, and the
        padding-versus-k frontier of every strategy (and the batch shapes of a scanned loader).
        Needs matplotlib."""
        from bucketloader._plot import plot_report

        return plot_report(self, Path(path), dpi=check_int("dpi", dpi, minimum=10))


def analyze(
    data: Any,
    *,
    column: Any = None,
    num_buckets: Any = DEFAULT_K,
    strategies: Any = None,
    batch_size: int | None = None,
    padding_target: float = 0.05,
    max_batches: int | None = None,
    progress: bool | None = None,
    costs: Any = None,
) -> DynamicityReport:
    """Analyse how dynamic ``data`` is and what bucketing would cost.

    Args:
        data: per-sample lengths (list, array, tensor, ``LengthHistogram``), a map-style dataset
            (each item measured: ``len(item[column])``, or its first dimension) or a
            ``DataLoader`` (its batches are scanned and the distinct shapes of every tensor field
            counted; the lengths are its ``BucketSampler``'s, or its dataset's items measured
            when ``column`` is given).
        column: the field to measure in dataset items (a key, or a function item → length).
        num_buckets: the shape budgets k to compare.
        strategies: names to compare (default :data:`DEFAULT_STRATEGIES`).
        batch_size: if given, also simulate dynamic padding (random batches of this size padded
            to their longest sample) as the baseline bucketing is compared against.
        padding_target: the rule recommends the smallest k whose best strategy pads at most this
            (padding elements per real element); if none does, the largest k.
        max_batches: scan at most this many DataLoader batches.
        progress: show progress bars (default: when stderr is a terminal).
        costs: measured costs of your model, a :class:`~bucketloader.recommend.Calibration` from
            ``calibrate(...)`` or a mapping of
            :func:`~bucketloader.recommend.recommend_num_buckets` cost arguments
            (``compile_seconds_per_shape``, ``seconds_per_token``, optionally
            ``seconds_per_step`` and ``num_epochs`` / ``num_steps``). With costs (and
            ``batch_size``) the recommendation minimises predicted compile + padded-compute time
            instead of following ``padding_target``.

    Example:
        >>> r = analyze([3, 4, 4, 9, 10, 31] * 10, num_buckets=[1, 2, 4], padding_target=0.1)
        >>> r.recommended.strategy, r.recommended.num_buckets, round(r.recommended.padding_ratio, 3)
        ('optimal', 4, 0.016)
        >>> r.row("pad_to_max", 4).num_shapes
        1
    """
    ks = _check_ks(num_buckets)
    names = _check_strategies(strategies)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
    padding_target = check_float("padding_target", padding_target, minimum=0.0, maximum=1e9)
    if max_batches is not None:
        max_batches = check_int("max_batches", max_batches, minimum=1)
    shapes: dict[str, Counter[tuple[int, ...]]] = {}
    num_batches = 0
    lengths: np.ndarray | None = None
    hist: LengthHistogram | None = None
    if isinstance(data, LengthHistogram):
        hist, source = data, "histogram"
    elif is_dataloader(data):
        source = f"DataLoader over {type(data.dataset).__name__}"
        shapes, num_batches = scan_batches(data, max_batches=max_batches, show=progress)
        declared = getattr(data.batch_sampler, "lengths", None)  # a BucketSampler's own
        if column is not None:
            lengths = dataset_lengths(data.dataset, column, show=progress)
        elif isinstance(declared, np.ndarray) and declared.ndim == 1:
            lengths = declared
    elif is_dataset(data):
        source = type(data).__name__
        lengths = dataset_lengths(data, column, show=progress)
    else:
        source = "lengths"
        lengths = as_lengths(data)
    if lengths is not None:
        hist = LengthHistogram.from_lengths(lengths)
    if hist is None:
        return DynamicityReport(source, None, batch_shapes=shapes, num_batches=num_batches)
    rows = tuple(_row(hist, s, k) for s in names for k in ks)
    if costs is None:
        best, rule = recommend_by_target(rows, ks, names, padding_target)
    else:
        best, rule = recommend_by_costs(hist, rows, ks, names, batch_size, costs)
    dynamic = None if batch_size is None else _dynamic_padding(hist, lengths, batch_size)
    return DynamicityReport(
        source, hist, rows, best, rule, padding_target, dynamic, shapes, num_batches
    )


def _check_ks(num_buckets: Any) -> tuple[int, ...]:
    values = [num_buckets] if isinstance(num_buckets, int) else list(num_buckets)
    if not values:
        raise ValueError("num_buckets must list at least one k, got an empty list")
    return tuple(sorted({check_int("num_buckets", k, minimum=1) for k in values}))


def _check_strategies(strategies: Any) -> tuple[str, ...]:
    if strategies is None:
        return tuple(s for s in DEFAULT_STRATEGIES if s in STRATEGIES)
    names = [strategies] if isinstance(strategies, str) else list(strategies)
    out = []
    for s in names:
        name, _ = resolve_strategy(s)
        if name is None:
            raise ValueError(f"strategies must be registered names, got the callable {s!r}")
        out.append(name)
    if not out:
        raise ValueError("strategies must list at least one strategy, got an empty list")
    return tuple(dict.fromkeys(out))


def _row(hist: LengthHistogram, strategy: str, k: int) -> Row:
    sol = solve_boundaries(hist, k, strategy=strategy)
    return Row(strategy, k, tuple(int(b) for b in sol.boundaries), float(sol.padding_ratio))


def _dynamic_padding(
    hist: LengthHistogram, lengths: np.ndarray | None, batch_size: int
) -> dict[str, Any]:
    """Random batches (seeded) padded to their own longest sample: padding and shape count."""
    flat = lengths if lengths is not None else np.repeat(hist.values, hist.counts)
    rng = np.random.default_rng(np.random.SeedSequence([0, 0]))
    perm = flat[rng.permutation(flat.size)]
    n_full = perm.size // batch_size
    shapes: set[tuple[int, int]] = set()
    pad = 0
    if n_full:
        full = perm[: n_full * batch_size].reshape(n_full, batch_size)
        longest = full.max(axis=1)
        pad += int((longest[:, None] - full).sum())
        shapes.update((batch_size, int(m)) for m in np.unique(longest))
    rest = perm[n_full * batch_size :]
    if rest.size:
        pad += int((rest.max() - rest).sum())
        shapes.add((int(rest.size), int(rest.max())))
    total = hist.total
    return {
        "batch_size": batch_size,
        "padding_ratio": pad / total if total else 0.0,
        "num_shapes": len(shapes),
        "num_batches": int(n_full + (rest.size > 0)),
    }


def _stats(h: LengthHistogram) -> dict[str, Any]:
    return {
        "num_samples": h.num_samples,
        "num_distinct": h.num_values,
        "min": h.min,
        "median": int(h.quantile(0.5)),
        "max": h.max,
        "mean": h.total / h.num_samples,
    }
