"""How many buckets? Pick k (and a strategy) that minimises compile time plus padded compute.

NOTE [ The time model ]
Training with static shapes costs, to a first approximation,

    total = shapes(k) * compile_seconds_per_shape
          + steps * seconds_per_step + padded_tokens * seconds_per_token

where ``shapes(k)`` is the number of distinct batch shapes the plan produces (each is compiled once;
it is the number of non-empty buckets, plus the partial batches with ``last_batch="keep"``, not
``k`` itself), and ``steps`` / ``padded_tokens`` are summed over the planned epochs, batch-padding
rows included. It is a *linear* model of step time in padded tokens: it ignores attention's
quadratic term, kernel efficiency that varies with shape, warm compile caches and the recompile
limit. Measure its inputs on your own model with :func:`calibrate`; ``benchmarks/compile_e2e.py``
checks its choice against measured end-to-end training time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._plan_inputs import check_budget
from bucketloader._recommend_calibrate import Calibration, calibrate
from bucketloader._recommend_plan import LAST_BATCH, epoch_cost
from bucketloader._validation import as_lengths, check_choice, check_float, check_int
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import compute_boundaries
from bucketloader.strategies import resolve_strategy

__all__ = ["Calibration", "Candidate", "Recommendation", "calibrate", "recommend_num_buckets"]

#: k values tried by default.
DEFAULT_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)
_INF = float("inf")


@dataclass(frozen=True)
class Candidate:
    """Predicted cost of one ``(strategy, num_buckets)`` choice over the whole run.

    Attributes:
        strategy: strategy name (or the callable's ``__name__``).
        num_buckets: the k asked for.
        boundaries: the boundaries that strategy gives for k.
        num_shapes: distinct batch shapes (= compilations).
        steps: optimizer steps over the run.
        padded_tokens: padded tokens over the run (batch-padding rows included).
        real_tokens: real tokens over the run.
        compile_seconds: ``num_shapes * compile_seconds_per_shape``.
        compute_seconds: ``steps * seconds_per_step + padded_tokens * seconds_per_token``.
    """

    strategy: str
    num_buckets: int
    boundaries: tuple[int, ...]
    num_shapes: int
    steps: float
    padded_tokens: float
    real_tokens: float
    compile_seconds: float
    compute_seconds: float

    @property
    def total_seconds(self) -> float:
        """Predicted compile plus compute time."""
        return self.compile_seconds + self.compute_seconds

    @property
    def padding_ratio(self) -> float:
        """Pad tokens (batch-padding rows included) per real token."""
        return (
            (self.padded_tokens - self.real_tokens) / self.real_tokens if self.real_tokens else 0.0
        )


@dataclass(frozen=True)
class Recommendation:
    """The cheapest candidate and the whole table it was chosen from.

    Attributes:
        num_buckets: the recommended k.
        strategy: the recommended strategy.
        predicted_seconds: its predicted total time.
        boundaries: its boundaries.
        table: every candidate, in the order tried (strategies, then k ascending).
    """

    num_buckets: int
    strategy: str
    predicted_seconds: float
    boundaries: tuple[int, ...]
    table: tuple[Candidate, ...]

    def to_markdown(self) -> str:
        """The table as markdown, the recommended row marked with ``*``."""
        lines = [
            "| strategy | k | shapes | steps | padding | compile s | compute s | total s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.table:
            mark = " *" if (c.strategy, c.num_buckets) == (self.strategy, self.num_buckets) else ""
            lines.append(
                f"| {c.strategy}{mark} | {c.num_buckets} | {c.num_shapes} | {c.steps:.0f} | "
                f"{c.padding_ratio:.1%} | {c.compile_seconds:.1f} | {c.compute_seconds:.1f} | "
                f"{c.total_seconds:.1f} |"
            )
        return "\n".join(lines)


def recommend_num_buckets(
    lengths: Any,
    *,
    compile_seconds_per_shape: float,
    seconds_per_token: float,
    seconds_per_step: float = 0.0,
    num_epochs: float | None = None,
    num_steps: int | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    candidates: Sequence[int] = DEFAULT_CANDIDATES,
    strategy: Any = "optimal",
    last_batch: str = "pad",
) -> Recommendation:
    """Recommend the k (and strategy) that minimises predicted compile plus compute time.

    The model is linear in padded tokens (see NOTE [ The time model ] in this module); the shapes,
    steps and padded tokens of each candidate are those of the exact bucketed plan
    (``BucketSampler``'s, with the same ``batch_size`` / ``max_tokens`` / ``last_batch``).

    Args:
        lengths: per-sample lengths or a ``LengthHistogram``.
        compile_seconds_per_shape: seconds to compile one new batch shape (from :func:`calibrate`).
        seconds_per_token: seconds of training per padded token.
        seconds_per_step: fixed seconds per step (launch and optimizer overhead), default 0.
        num_epochs: planned epochs (default 1 unless ``num_steps`` is given); may be fractional.
        num_steps: planned steps instead of epochs; each candidate runs this many steps of its
            own average batch.
        batch_size: rows per batch, or
        max_tokens: padded tokens per batch (rows = ``max_tokens // boundary``).
        candidates: the k values to try.
        strategy: a strategy name or callable, or a sequence of them to compare.
        last_batch: ``"pad"`` (default), ``"fill"``, ``"keep"`` or ``"drop"``, as in the sampler.

    Returns:
        A :class:`Recommendation`; ties go to the smaller k.

    With more planned shapes than ``torch._dynamo.config.recompile_limit`` (default 8), raise that
    limit to the shape count before training: past it dynamo runs the model eagerly (with
    ``fullgraph=True`` it raises ``FailOnRecompileLimitHit``), which ``benchmarks/compile_e2e.py``
    hit at k=16.

    Example:
        >>> lengths = [10] * 90 + [100] * 10
        >>> r = recommend_num_buckets(lengths, compile_seconds_per_shape=5.0,
        ...     seconds_per_token=1e-3, num_epochs=100, batch_size=10, candidates=(1, 2, 4))
        >>> r.num_buckets, r.boundaries, round(r.predicted_seconds, 1)
        (2, (10, 100), 200.0)
        >>> [round(c.total_seconds, 1) for c in r.table]
        [1005.0, 200.0, 200.0]
    """
    compile_s = check_float(
        "compile_seconds_per_shape", compile_seconds_per_shape, minimum=0.0, maximum=_INF
    )
    per_token = check_float("seconds_per_token", seconds_per_token, minimum=0.0, maximum=_INF)
    per_step = check_float("seconds_per_step", seconds_per_step, minimum=0.0, maximum=_INF)
    if num_epochs is not None and num_steps is not None:
        raise ValueError(
            f"pass num_epochs or num_steps, not both, got num_epochs={num_epochs!r} and "
            f"num_steps={num_steps!r}"
        )
    if num_steps is not None:
        num_steps = check_int("num_steps", num_steps, minimum=1)
    epochs = (
        1.0
        if num_epochs is None
        else check_float("num_epochs", num_epochs, minimum=1e-9, maximum=_INF)
    )
    batch_size, max_tokens = check_budget(batch_size, max_tokens)
    last_batch = check_choice("last_batch", last_batch, LAST_BATCH)
    ks = _check_candidates(candidates)
    strategies = _check_strategies(strategy)
    if isinstance(lengths, LengthHistogram):
        hist, flat = lengths, np.repeat(lengths.values, lengths.counts)
    else:
        flat = as_lengths(lengths)
        hist = LengthHistogram.from_lengths(flat)

    table = []
    for label, fn in strategies:
        for k in ks:
            b = compute_boundaries(hist, k, strategy=fn)
            ep = epoch_cost(
                flat, b, batch_size=batch_size, max_tokens=max_tokens, last_batch=last_batch
            )
            if ep.steps == 0:
                continue  # "drop" with buckets smaller than a batch: this k trains on nothing
            scale = epochs if num_steps is None else num_steps / ep.steps
            steps, padded = ep.steps * scale, ep.padded_tokens * scale
            table.append(
                Candidate(
                    strategy=label,
                    num_buckets=k,
                    boundaries=tuple(int(x) for x in b),
                    num_shapes=len(ep.shapes),
                    steps=steps,
                    padded_tokens=padded,
                    real_tokens=ep.real_tokens * scale,
                    compile_seconds=len(ep.shapes) * compile_s,
                    compute_seconds=steps * per_step + padded * per_token,
                )
            )
    if not table:
        raise ValueError(
            "no candidate yields a single full batch with last_batch='drop'; use "
            "last_batch='pad' or a smaller batch_size / max_tokens"
        )
    best = min(table, key=lambda c: (c.total_seconds, c.num_buckets))
    return Recommendation(
        num_buckets=best.num_buckets,
        strategy=best.strategy,
        predicted_seconds=best.total_seconds,
        boundaries=best.boundaries,
        table=tuple(table),
    )


def _check_candidates(candidates: Any) -> list[int]:
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence | np.ndarray):
        raise TypeError(
            f"candidates must be a sequence of ints >= 1, got candidates={candidates!r}"
        )
    if len(candidates) == 0:
        raise ValueError("candidates must not be empty, got candidates=()")
    return sorted({check_int("candidates[i]", k, minimum=1) for k in candidates})


def _check_strategies(strategy: Any) -> list[tuple[str, Any]]:
    items = [strategy] if isinstance(strategy, str) or callable(strategy) else strategy
    if not isinstance(items, Sequence) or len(items) == 0:
        raise TypeError(
            "strategy must be a strategy name or callable, or a non-empty sequence of them, "
            f"got strategy={strategy!r}"
        )
    out: list[tuple[str, Any]] = []
    for item in items:
        name, fn = resolve_strategy(item)
        out.append((str(name or getattr(fn, "__name__", repr(fn))), fn))
    return out
