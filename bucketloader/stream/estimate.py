"""Estimating a stream's boundaries from its head (``boundaries=estimate(...)``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader._types import Cache, Strategy
from bucketloader._validation import MAX_LENGTH, check_int, check_options, keyword_options
from bucketloader.solution import Solution
from bucketloader.solve import GENERIC_OPTIONS, check_cache, resolve_params, solve_boundaries
from bucketloader.strategies import resolve_strategy, strategy_defaults
from bucketloader.stream.source import check_length


@dataclass(frozen=True)
class Estimate:
    """Boundaries to estimate from the head of the stream (build it with :func:`estimate`).

    Example:
        >>> estimate(4, sample_size=1000)
        Estimate(num_buckets=4, sample_size=1000, strategy='optimal', max_length=None, \
cache=None, options={})
    """

    num_buckets: int
    sample_size: int = 10_000
    strategy: str | Strategy = "optimal"
    max_length: int | None = None
    cache: Cache | bool | None = None
    options: dict[str, Any] = field(default_factory=dict)


def estimate(
    num_buckets: int,
    *,
    sample_size: int = 10_000,
    strategy: str | Strategy = "optimal",
    max_length: int | None = None,
    cache: Cache | bool | None = None,
    **options: Any,
) -> Estimate:
    """Ask :class:`BucketIterable` to estimate its boundaries from the head of the stream.

    The first ``sample_size`` samples are read once in the constructor (in the main process, so
    every DataLoader worker gets the same boundaries and shapes), measured and solved with
    :func:`~bucketloader.solve.solve_boundaries` (``cache`` and ``**options`` as there; with a
    cache, a rerun on the same head skips the solve). ``max_length`` caps the lengths first and
    makes it the last boundary, so later, longer samples are handled by ``overflow``; without it
    the last boundary is the longest length seen in the head. With several bucketed inputs
    (``length_fn=("input_ids", "labels")``) each input is solved on its own, with these options.
    The options are checked here, before any sample is read.

    Example:
        >>> estimate(8, sample_size=1000).num_buckets
        8
        >>> try:
        ...     estimate(8, samples=1000)
        ... except TypeError as exc:
        ...     print(str(exc).split(";")[:2])
        ['estimate got an unexpected option samples=1000', ' did you mean sample_size=?']
    """
    num_buckets = check_int("num_buckets", num_buckets, minimum=1)
    defaults, var_kw = strategy_defaults(resolve_strategy(strategy)[1])
    if not var_kw:  # (a strategy taking **kwargs checks its own, when it runs)
        allowed = ["num_buckets", *keyword_options(estimate), *GENERIC_OPTIONS, *defaults]
        check_options("estimate", options, allowed)
    resolve_params(strategy, num_buckets, options)  # (the values of cost, pad_to_multiple_of)
    return Estimate(
        num_buckets=num_buckets,
        sample_size=check_int("sample_size", sample_size, minimum=1),
        strategy=strategy,
        max_length=None
        if max_length is None
        else check_int("max_length", max_length, minimum=1, maximum=MAX_LENGTH),
        cache=check_cache(cache),
        options=dict(options),
    )


def solve_head(
    est: Estimate, head: list[Any], length: Callable[[Any], Any], dims: int
) -> list[Solution]:
    """Solve ``est`` on the lengths of the ``head`` samples, one solution per input."""
    if not head:
        raise ValueError("cannot estimate boundaries: the source yielded no samples")
    rows = [length(s) for s in head]
    if dims == 1:
        rows = [(r,) for r in rows]
    lengths = np.array(
        [[check_length(x, i) for x in r] for i, r in enumerate(rows)], dtype=np.int64
    ).reshape(len(rows), dims)
    out = []
    for d in range(dims):
        col = lengths[:, d]
        if est.max_length is not None:
            col = np.append(np.minimum(col, est.max_length), est.max_length)
        out.append(
            solve_boundaries(
                col, est.num_buckets, strategy=est.strategy, cache=est.cache, **est.options
            )
        )
    return out
