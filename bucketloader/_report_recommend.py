"""How :func:`bucketloader.report.analyze` picks the k (and strategy) it recommends.

Two rules, each returned with its statement in words so the report can print it: a padding target
(the default), or predicted time from measured costs (``analyze(..., costs=...)``), which defers
to :func:`bucketloader.recommend.recommend_num_buckets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bucketloader.histogram import LengthHistogram

if TYPE_CHECKING:
    from bucketloader.report import Row


def recommend_by_target(
    rows: tuple[Row, ...], ks: tuple[int, ...], names: tuple[str, ...], target: float
) -> tuple[Row, str]:
    """The smallest k whose least-padding strategy meets ``target``, and the rule, in words."""
    rule = (
        f"the smallest k in {list(ks)} whose least-padding strategy pads at most "
        f"{target:.1%} (the shape budget is k <= {ks[-1]}); ties go to the earlier strategy"
    )
    for k in ks:
        best = min((r for r in rows if r.num_buckets == k), key=lambda r: r.padding_ratio)
        if best.padding_ratio <= target:
            return best, rule
    return best, rule + f"; no k meets the target, so the largest k={ks[-1]} is recommended"


def recommend_by_costs(
    hist: LengthHistogram,
    rows: tuple[Row, ...],
    ks: tuple[int, ...],
    names: tuple[str, ...],
    batch_size: int | None,
    costs: Any,
) -> tuple[Row, str]:
    """The (strategy, k) with the least predicted compile + compute time (``costs=``)."""
    from bucketloader.recommend import recommend_num_buckets

    if batch_size is None:
        raise ValueError(
            "costs needs the batch size the model trains with: pass batch_size=..., "
            "got batch_size=None"
        )
    kwargs = costs.as_kwargs() if hasattr(costs, "as_kwargs") else costs
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            "costs must be a Calibration (from calibrate(...)) or a mapping of "
            f"recommend_num_buckets cost arguments, got costs={costs!r}"
        )
    rec = recommend_num_buckets(
        hist, batch_size=batch_size, candidates=ks, strategy=names, **dict(kwargs)
    )
    best = next(r for r in rows if (r.strategy, r.num_buckets) == (rec.strategy, rec.num_buckets))
    rule = (
        f"the strategy and k in {list(ks)} with the least predicted time, compiles (one per "
        "planned batch shape) + padded compute (a linear model in padded tokens, "
        f"recommend_num_buckets): {rec.predicted_seconds:.1f} s predicted"
    )
    return best, rule
