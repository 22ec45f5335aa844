"""The strategy registry: name → pure function over a length histogram.

A strategy is any callable ``fn(hist, num_buckets, **options) -> boundaries`` where ``hist`` is a
:class:`~bucketloader.histogram.LengthHistogram`, options are keyword-only, and the result is an
array of at most ``num_buckets`` strictly increasing ints whose last one covers ``hist.max`` (or a
:class:`StrategyResult` carrying the same plus a solver status). No class hierarchy.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import Strategy
from bucketloader._validation import Lengths, MissingKeyError, as_lengths, check_int
from bucketloader.histogram import LengthHistogram


class _Registry(dict[str, Strategy]):
    """A dict whose failed lookup names the registered strategies (a ``MissingKeyError``)."""

    def __missing__(self, name: str) -> Strategy:
        raise MissingKeyError(
            f"no strategy named {name!r}; the registered ones are {sorted(self)} (add one with "
            "bucketloader.register_strategy)"
        )


#: Registered strategies, name → function. Extend with :func:`register_strategy`.
STRATEGIES: dict[str, Strategy] = _Registry()


@dataclass(frozen=True)
class StrategyResult:
    """What a strategy may return instead of a bare array, to report how it was solved.

    Attributes:
        boundaries: the boundaries found.
        status: ``"optimal"`` (proved), ``"heuristic"`` (no claim), ``"time_limit"`` (a solver
            stopped early; see ``gap``) or ``"coarsened"`` (solved exactly on a binned histogram).
        gap: relative optimality gap when known (0.0 for a proved optimum).
        info: free-form solver details (iterations, variables, coarsening width, ...).

    Example:
        >>> from bucketloader import compute_boundaries
        >>> def halves(hist, num_buckets):  # a strategy of your own, saying how it solved
        ...     top = int(hist.values.max())
        ...     return StrategyResult(np.array([top // 2, top]), status="heuristic")
        >>> compute_boundaries([3, 5, 8, 12], 2, strategy=halves).tolist()
        [6, 12]
    """

    boundaries: np.ndarray
    status: str = "heuristic"
    gap: float | None = None
    info: dict[str, Any] | None = None


def strategy_input(hist: Any, num_buckets: Any) -> tuple[LengthHistogram, int]:
    """The two arguments every built-in strategy takes, checked once: ``hist`` as a
    :class:`~bucketloader.histogram.LengthHistogram` (raw lengths, any sequence
    :func:`~bucketloader._validation.as_lengths` accepts, are counted into one) and
    ``num_buckets`` as an int >= 1, or one clear error naming the argument.

    Example:
        >>> hist, k = strategy_input([3, 5, 5], 2)
        >>> hist.values.tolist(), hist.counts.tolist(), k
        ([3, 5], [1, 2], 2)
        >>> strategy_input([3, 5], 0)
        Traceback (most recent call last):
        ...
        ValueError: num_buckets must be an int >= 1, got num_buckets=0
    """
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    if not isinstance(hist, LengthHistogram):
        hist = LengthHistogram.from_lengths(Lengths(as_lengths(hist, name="hist")))
    return hist, num_buckets


def register_strategy(name: str, fn: Strategy | None = None, *, overwrite: bool = False) -> Any:
    """Register ``fn`` under ``name`` (usable as a decorator).

    Example:
        >>> import numpy as np
        >>> @register_strategy("halves", overwrite=True)
        ... def halves(hist, num_buckets):
        ...     return np.unique([hist.quantile(0.5), hist.max])
        >>> "halves" in STRATEGIES
        True
        >>> del STRATEGIES["halves"]
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got name={name!r}")

    def deco(f: Strategy) -> Strategy:
        if not callable(f):
            raise TypeError(f"a strategy must be callable, got {f!r}")
        if name in STRATEGIES and STRATEGIES[name] is not f and not overwrite:
            raise ValueError(
                f"strategy {name!r} is already registered; pass overwrite=True to replace it"
            )
        STRATEGIES[name] = f
        return f

    return deco if fn is None else deco(fn)


def resolve_strategy(
    strategy: str | Strategy, *, also: tuple[str, ...] = ()
) -> tuple[str | None, Strategy]:
    """Return ``(registered name or None, function)`` for a name or a callable.

    ``also``: names the caller handles itself (``"joint"`` for a sampler of several inputs),
    listed in the error beside the registry's.

    Example:
        >>> resolve_strategy("optimal")[0]
        'optimal'
        >>> try:
        ...     resolve_strategy("jiont", also=("joint",))
        ... except ValueError as exc:
        ...     print(str(exc).split("; ")[-1])
        did you mean strategy='joint'?
    """
    if callable(strategy):
        names = [n for n, f in STRATEGIES.items() if f is strategy]
        return (names[0] if names else None), strategy
    if isinstance(strategy, str) and strategy in STRATEGIES:
        return strategy, STRATEGIES[strategy]
    known = sorted({*STRATEGIES, *also})
    listed = ", ".join(repr(n) for n in known)
    close = difflib.get_close_matches(strategy, known, n=1) if isinstance(strategy, str) else []
    hint = f"; did you mean strategy={close[0]!r}?" if close else ""
    raise ValueError(
        f"strategy must be one of {listed} or a callable, got strategy={strategy!r}{hint}"
    )


def strategy_defaults(fn: Strategy) -> tuple[dict[str, Any], bool]:
    """Keyword-only options of ``fn`` with their defaults, and whether it takes ``**kwargs``.

    Example:
        >>> def mine(hist, k, *, alpha=0.5, **kwargs): ...
        >>> strategy_defaults(mine)
        ({'alpha': 0.5}, True)
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}, True
    defaults = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    return defaults, var_kw
