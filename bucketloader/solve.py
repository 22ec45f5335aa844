"""compute_boundaries: lengths → histogram → strategy → validated boundaries (optionally cached)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader._validation import check_choice, check_int
from bucketloader.boundaries import COSTS, check_boundaries, padding_cost, round_up
from bucketloader.histogram import LengthHistogram
from bucketloader.strategies import StrategyResult, resolve_strategy, strategy_defaults

#: Options every strategy gets, handled here rather than by each strategy.
GENERIC_OPTIONS: dict[str, Any] = {"cost": "linear", "multiple_of": 1}


@dataclass(frozen=True, eq=False)
class Solution:
    """A bucketing solution with how it was found (what the cache stores, as JSON).

    Attributes:
        boundaries: the boundaries (convention in :mod:`bucketloader.boundaries`).
        strategy: registered strategy name (``None`` for an unregistered callable).
        params: every resolved parameter, defaults included (``num_buckets``, ``cost``, ...).
        objective: padding cost under ``params["cost"]`` on the histogram solved.
        padding_ratio: pad elements per real element (linear).
        num_samples: samples in the histogram solved.
        status: ``"optimal"``, ``"heuristic"``, ``"time_limit"`` or ``"coarsened"``.
        gap: relative optimality gap when known.
        info: solver details.
        solve_seconds: wall time of the strategy call.
    """

    boundaries: np.ndarray
    strategy: str | None
    params: dict[str, Any]
    objective: int
    padding_ratio: float
    num_samples: int
    status: str = "heuristic"
    gap: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    solve_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the cache entry body)."""
        return {
            "boundaries": [int(x) for x in self.boundaries],
            "strategy": self.strategy,
            "params": dict(self.params),
            "objective": int(self.objective),
            "padding_ratio": float(self.padding_ratio),
            "num_samples": int(self.num_samples),
            "status": self.status,
            "gap": self.gap,
            "info": dict(self.info),
            "solve_seconds": float(self.solve_seconds),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Solution:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed entry."""
        try:
            return cls(
                boundaries=check_boundaries(data["boundaries"]),
                strategy=data["strategy"],
                params=dict(data["params"]),
                objective=int(data["objective"]),
                padding_ratio=float(data["padding_ratio"]),
                num_samples=int(data["num_samples"]),
                status=str(data["status"]),
                gap=None if data.get("gap") is None else float(data["gap"]),
                info=dict(data.get("info") or {}),
                solve_seconds=float(data.get("solve_seconds", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed solution entry: {exc!r}") from None


def resolve_params(strategy: Any, num_buckets: int, options: dict[str, Any]) -> dict[str, Any]:
    """All parameters that determine a solution, defaults included, in canonical form."""
    name, fn = resolve_strategy(strategy)
    defaults, var_kw = strategy_defaults(fn)
    known = {**GENERIC_OPTIONS, **defaults}
    unknown = sorted(set(options) - set(known))
    if unknown and not var_kw:
        listed = ", ".join(sorted(known))
        raise TypeError(
            f"unknown option {unknown[0]!r} for strategy {name or fn!r}; it accepts: {listed}"
        )
    params = {**known, **options, "num_buckets": num_buckets}
    params["cost"] = check_choice("cost", params["cost"], COSTS)
    params["multiple_of"] = check_int("multiple_of", params["multiple_of"], minimum=1)
    return dict(sorted(params.items()))


def solve_boundaries(
    lengths: Any,
    num_buckets: int,
    *,
    strategy: Any = "optimal",
    cache: Any = None,
    **options: Any,
) -> Solution:
    """Like :func:`compute_boundaries` but returns the full :class:`Solution`.

    Example:
        >>> s = solve_boundaries([1, 2, 9, 10], 2)
        >>> s.boundaries.tolist(), s.objective, s.status
        ([2, 10], 2, 'optimal')
    """
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    hist = (
        lengths if isinstance(lengths, LengthHistogram) else LengthHistogram.from_lengths(lengths)
    )
    name, fn = resolve_strategy(strategy)
    params = resolve_params(fn, num_buckets, options)
    if cache is None or cache is False:
        return _solve(hist, name, fn, params)
    if cache is True:
        from bucketloader.cache import BucketCache

        cache = BucketCache()
    return cache.get_or_solve(hist, name, params, lambda: _solve(hist, name, fn, params))


def compute_boundaries(
    lengths: Any,
    num_buckets: int,
    *,
    strategy: Any = "optimal",
    cache: Any = None,
    **options: Any,
) -> np.ndarray:
    """Boundaries for at most ``num_buckets`` buckets over ``lengths``.

    Args:
        lengths: per-sample lengths (list, numpy array, torch tensor) or a ``LengthHistogram``.
        num_buckets: the shape budget k; more than the number of distinct lengths is fine.
        strategy: a name in :data:`~bucketloader.strategies.STRATEGIES` or a callable
            ``fn(hist, num_buckets, **options)``.
        cache: ``None``/``False`` (no cache), ``True`` (the default ``BucketCache``) or a cache.
        **options: ``cost`` (``"linear"`` or ``"quadratic"``), ``multiple_of`` (every boundary a
            multiple of this; lengths are rounded up to it first, which keeps exact strategies
            exact) and the strategy's own keyword options.

    Buckets that would hold no sample are dropped (they change no sample's padding).

    Example:
        >>> compute_boundaries([3, 4, 4, 9, 10, 31], 3).tolist()
        [4, 10, 31]
        >>> compute_boundaries([3, 4, 4, 9, 10, 31], 3, strategy="linear", multiple_of=8).tolist()
        [16, 32]
    """
    sol = solve_boundaries(lengths, num_buckets, strategy=strategy, cache=cache, **options)
    if sol.status == "time_limit":
        warnings.warn(
            f"strategy {sol.strategy!r} stopped at its time limit (gap {sol.gap}); the boundaries "
            "are feasible but not proved optimal; raise time_limit or use strategy='optimal'",
            RuntimeWarning,
            stacklevel=2,
        )
    return sol.boundaries


def _solve(hist: LengthHistogram, name: str | None, fn: Any, params: dict[str, Any]) -> Solution:
    m = params["multiple_of"]
    solved = LengthHistogram.from_lengths(hist, bin_width=m) if m > 1 else hist
    defaults, var_kw = strategy_defaults(fn)
    kwargs = {k: v for k, v in params.items() if k in defaults or (var_kw and k != "num_buckets")}
    if "multiple_of" not in defaults and not var_kw:
        kwargs.pop("multiple_of", None)
    label = name or getattr(fn, "__name__", repr(fn))
    start = time.perf_counter()
    try:
        raw = fn(solved, params["num_buckets"], **kwargs)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"strategy {label!r} failed on {hist!r}: {exc}") from exc
    seconds = time.perf_counter() - start
    result = raw if isinstance(raw, StrategyResult) else StrategyResult(np.asarray(raw))
    try:
        b = check_boundaries(
            result.boundaries, max_length=solved.max, num_buckets=params["num_buckets"]
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"strategy {label!r} returned boundaries that break the convention "
            f"(strictly increasing ints, at most num_buckets={params['num_buckets']}, "
            f"last >= max length {solved.max}): {exc}"
        ) from None
    b = np.unique(round_up(b, m))
    occupied = np.bincount(np.searchsorted(b, hist.values), weights=hist.counts, minlength=b.size)
    b = b[occupied > 0]
    if result.status == "coarsened":
        b = _tighten(solved, b, m)
    b.setflags(write=False)
    total = hist.total
    return Solution(
        boundaries=b,
        strategy=name,
        params=params,
        objective=padding_cost(hist, b, cost=params["cost"]),
        padding_ratio=padding_cost(hist, b) / total if total else 0.0,
        num_samples=hist.num_samples,
        status=result.status,
        gap=result.gap,
        info=dict(result.info or {}),
        solve_seconds=seconds,
    )


def _tighten(hist: LengthHistogram, b: np.ndarray, multiple_of: int) -> np.ndarray:
    """Lower each boundary to its bucket's longest length (rounded up to ``multiple_of``).

    Used for solutions found on a coarsened histogram, whose boundaries sit on the coarse grid:
    no sample changes bucket (nothing lies between the old and the new boundary) and padding can
    only fall. Other strategies' boundaries are kept as returned (a user may want round sizes).
    """
    last = np.searchsorted(hist.values, b, side="right") - 1
    return np.unique(round_up(hist.values[last], multiple_of))
