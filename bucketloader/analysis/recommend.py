"""How many buckets? :func:`recommend_num_buckets` picks k and a strategy by one of two rules.

* **Padding target** (no costs): the smallest k whose least-padding strategy pads at most
  ``padding_target`` (pad elements per real element); if none does, the largest k.
* **Predicted time** (``costs=``, measured by :func:`~bucketloader.analysis.calibrate`): the
  ``(strategy, k)`` with the least predicted compile + padded-compute time over the run.

:func:`~bucketloader.analyze` reports with the same candidates and the same rule.

NOTE [ The time model ]
Training with static shapes costs, to a first approximation,

    total = cold_shapes(k) * compile_seconds_per_shape
          + warm_shapes(k) * warm_compile_seconds_per_shape
          + steps * seconds_per_step + padded_tokens * seconds_per_token

where ``shapes(k)`` is the number of distinct batch shapes the plan produces (each is compiled once;
it is the number of non-empty buckets, plus the partial batches with ``last_batch="keep"``, not
``k`` itself); the shapes already compiled for this model (``compiled_shapes``, from a
:class:`~bucketloader.compile.CompileCache` after a ``precompile``) are *warm*: loading one from the
cache costs ``warm_compile_seconds_per_shape`` (about 1 s against 20-150 s cold with inductor on a
2-core CPU), the others are *cold*. ``steps`` / ``padded_tokens`` are summed over the planned
epochs, batch-padding rows included. It is a *linear* model of step time in padded tokens: it
ignores attention's quadratic term, kernel efficiency that varies with shape, the one-off costs of
a process (the precompiled C++ header, the CPU probe) and the recompile limit. Measure its
inputs on your own model with :func:`calibrate`; ``benchmarks/compile_e2e.py``
checks its choice against measured end-to-end training time.

NOTE [ Epoch cost from the plan ]
The totals come from the sampler's own :class:`~bucketloader.plan.BucketSpec` and its
:meth:`~bucketloader.plan.BucketSpec.shape_table` (one rank), so the recommender counts exactly the
shapes a ``BucketSampler`` with the same options promises. Bucket ``i`` (padded length ``b[i]``)
holds ``n_i`` samples cut into batches of ``B_i`` rows (under ``max_tokens``, the even rows of
NOTE [ Even batches ] in :mod:`bucketloader.plan.budget`, as the sampler plans them): with
``last_batch="pad"`` or ``"fill"`` the last, partial batch keeps the full ``(B_i, b[i])`` shape,
so the bucket costs ``ceil(n_i / B_i) * B_i * b[i]`` padded tokens; ``"drop"`` drops it;
``"keep"`` keeps it at ``(n_i mod B_i, b[i])``, an extra shape. Shuffling moves samples between
the batches of a bucket but changes none of these totals, so they hold for every epoch and seed.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import LengthsLike, Strategy
from bucketloader._validation import (
    MAX_LENGTH,
    Lengths,
    as_lengths,
    check_float,
    check_int,
    check_options,
)
from bucketloader.analysis.calibration import Calibration
from bucketloader.histogram import LengthHistogram
from bucketloader.plan import BucketSpec
from bucketloader.plan.promote import promoted_spec, promotes
from bucketloader.plan.shapes import SpecOptions
from bucketloader.solve import solve_boundaries
from bucketloader.strategies import resolve_strategy

__all__ = ["Candidate", "Recommendation", "recommend_num_buckets"]

#: k values tried by default.
DEFAULT_NUM_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
_INF = float("inf")
_COSTS = (
    "compile_seconds_per_shape",
    "seconds_per_token",
    "seconds_per_step",
    "warm_compile_seconds_per_shape",
)


@dataclass(frozen=True)
class Candidate:
    """One ``(strategy, num_buckets)`` choice: its padding and, with a batch budget, its plan.

    Attributes:
        strategy: strategy name (or the callable's ``__name__``).
        num_buckets: the k asked for.
        boundaries: the boundaries that strategy gives for k.
        padding_ratio: pad elements per real element with every sample padded to its bucket
            (:func:`~bucketloader.boundaries.padding_ratio`; the same meaning everywhere).
        num_shapes: distinct batch shapes (= compilations): the plan's shapes with a batch
            budget, else the number of buckets used.
        steps: optimizer steps over the run (``None`` without a batch budget).
        padded_tokens: padded tokens over the run, filler rows of partial batches included.
        real_tokens: real tokens over the run.
        compile_seconds: ``compile_seconds_per_shape`` per shape to compile and
            ``warm_compile_seconds_per_shape`` per shape already compiled (``None`` without costs).
        compute_seconds: ``steps * seconds_per_step + padded_tokens * seconds_per_token``.
        warm_shapes: how many of the shapes are already compiled (``compiled_shapes``).

    Example:
        >>> c = recommend_num_buckets([10] * 90 + [100] * 10, num_buckets=(1, 2)).table[0]
        >>> c.strategy, c.num_buckets, c.boundaries, round(c.padding_ratio, 3), c.num_shapes
        ('optimal', 1, (100,), 4.263, 1)
    """

    strategy: str
    num_buckets: int
    boundaries: tuple[int, ...]
    padding_ratio: float
    num_shapes: int
    steps: float | None = None
    padded_tokens: float | None = None
    real_tokens: float | None = None
    compile_seconds: float | None = None
    compute_seconds: float | None = None
    warm_shapes: int = 0

    @property
    def total_seconds(self) -> float | None:
        """Predicted compile plus compute time (``None`` without costs)."""
        if self.compile_seconds is None or self.compute_seconds is None:
            return None
        return self.compile_seconds + self.compute_seconds

    @property
    def batch_padding_ratio(self) -> float | None:
        """Like :attr:`padding_ratio`, but over the planned batches: the filler rows of partial
        batches (and the repeats of ``"fill"``) count as padding too."""
        if self.padded_tokens is None or not self.real_tokens:
            return None
        return (self.padded_tokens - self.real_tokens) / self.real_tokens


@dataclass(frozen=True)
class Recommendation:
    """The chosen candidate, the rule that chose it and the whole table it was chosen from.

    Attributes:
        num_buckets: the recommended k.
        strategy: the recommended strategy.
        boundaries: its boundaries.
        rule: the rule, in words.
        predicted_seconds: its predicted total time (``None`` under the padding rule).
        table: every candidate, in the order tried (strategies, then k ascending).

    Example:
        >>> r = recommend_num_buckets([10] * 90 + [100] * 10, num_buckets=(1, 2, 4))
        >>> r.num_buckets, r.boundaries, r.best.padding_ratio, r.predicted_seconds
        (2, (10, 100), 0.0, None)
        >>> print(r.to_markdown().splitlines()[3])  # the recommended row is starred
        | optimal * | 2 | 2 | 0.0% |
    """

    num_buckets: int
    strategy: str
    boundaries: tuple[int, ...]
    rule: str
    predicted_seconds: float | None
    table: tuple[Candidate, ...]

    @property
    def best(self) -> Candidate:
        """The recommended row of :attr:`table`."""
        return next(
            c
            for c in self.table
            if (c.strategy, c.num_buckets) == (self.strategy, self.num_buckets)
        )

    def to_markdown(self) -> str:
        """The table as markdown, the recommended row marked with ``*``."""
        timed = self.predicted_seconds is not None
        head = "| strategy | k | shapes | padding |"
        rule = "|---|---:|---:|---:|"
        if timed:
            head += " steps | batch padding | compile s | compute s | total s |"
            rule += "---:|---:|---:|---:|---:|"
        lines = [head, rule]
        for c in self.table:
            mark = " *" if (c.strategy, c.num_buckets) == (self.strategy, self.num_buckets) else ""
            shapes = f"{c.num_shapes}" + (f" ({c.warm_shapes} warm)" if c.warm_shapes else "")
            line = f"| {c.strategy}{mark} | {c.num_buckets} | {shapes} | {c.padding_ratio:.1%} |"
            if timed:
                line += (
                    f" {c.steps:.0f} | {c.batch_padding_ratio or 0:.1%} | "
                    f"{c.compile_seconds:.1f} | {c.compute_seconds:.1f} | {c.total_seconds:.1f} |"
                )
            lines.append(line)
        return "\n".join(lines)


def check_padding_target(value: Any, stacklevel: int = 3) -> float:
    """``padding_target`` as a float >= 0 (pad elements per real element), with a warning
    above 1: a target of more padding than data is most often a percentage given as a number
    (``5`` for 5 %, which reads as 500 %).

    Example:
        >>> check_padding_target(0.05)
        0.05
    """
    target = check_float("padding_target", value, minimum=0.0, maximum=1e9)
    if target > 1:
        warnings.warn(
            f"padding_target={target:g} is {target:.0%} padding (pad elements per real "
            f"element); for {target:g}% pass padding_target={target / 100:g}",
            UserWarning,
            stacklevel=stacklevel,  # (the caller's caller: the user's line)
        )
    return target


def recommend_num_buckets(
    lengths: LengthsLike | LengthHistogram,
    *,
    num_buckets: int | Sequence[int] = DEFAULT_NUM_BUCKETS,
    strategy: str | Strategy | Sequence[str | Strategy] = "optimal",
    costs: Calibration | Mapping[str, float] | None = None,
    padding_target: float = 0.05,
    num_epochs: float | None = None,
    num_steps: int | None = None,
    compiled_shapes: Iterable[Sequence[int]] | None = None,
    **spec_options: Any,
) -> Recommendation:
    """Recommend the k (and strategy) to bucket ``lengths`` with.

    Without ``costs`` the rule is the padding target: the smallest k whose least-padding
    strategy pads at most ``padding_target`` (ties go to the earlier strategy). With ``costs``
    it is predicted time: the least compile plus padded-compute time over the run, under the
    linear model of NOTE [ The time model ]; the shapes, steps and padded tokens of each
    candidate are those of the exact plan a ``BucketSampler`` with the same ``spec_options``
    would make.

    Args:
        lengths: per-sample lengths or a ``LengthHistogram``.
        num_buckets: the k values to compare.
        strategy: a strategy name or callable, or a sequence of them to compare.
        costs: ``None``, a :class:`~bucketloader.analysis.Calibration` (from ``calibrate``) or a
            mapping with ``compile_seconds_per_shape`` and ``seconds_per_token`` (and optionally
            ``seconds_per_step`` and ``warm_compile_seconds_per_shape``): seconds to compile one
            batch shape cold, per padded token, per step, and to load one compiled shape from a
            warm cache (default 0).
        padding_target: the padding rule's target (pad elements per real element).
        num_epochs: planned epochs (default 1 unless ``num_steps`` is given); may be fractional.
        num_steps: planned steps instead of epochs; each candidate runs this many steps of its
            own average batch.
        compiled_shapes: batch shapes already compiled for this model, which cost
            ``warm_compile_seconds_per_shape`` instead of a cold compile: e.g.
            ``CompileCache().compiled_shapes(report.key)`` after a
            :func:`~bucketloader.compile.precompile` (a resumed run, the next run of a sweep), or
            ``report.shapes``.
        **spec_options: the sampler's :meth:`BucketSpec.build
            <bucketloader.plan.BucketSpec.build>` options that size the batches: ``batch_size``
            or ``max_tokens`` (an int or a ``TokenBudget``; required with ``costs``) and
            ``last_batch``.

    Returns:
        A :class:`Recommendation`; under the time rule ties go to the smaller k.

    With more planned shapes than ``torch._dynamo.config.recompile_limit`` (default 8), raise that
    limit to the shape count before training: past it dynamo runs the model eagerly (with
    ``fullgraph=True`` it raises ``FailOnRecompileLimitHit``), which ``benchmarks/compile_e2e.py``
    hit at k=16. :func:`~bucketloader.compile.precompile` raises it for you, and compiles every
    planned shape before step 1.

    Example:
        >>> lengths = [10] * 90 + [100] * 10
        >>> costs = {"compile_seconds_per_shape": 5.0, "seconds_per_token": 1e-3}
        >>> r = recommend_num_buckets(lengths, costs=costs, num_epochs=100, batch_size=10,
        ...                           num_buckets=(1, 2, 4))
        >>> r.num_buckets, r.boundaries, round(r.predicted_seconds, 1)
        (2, (10, 100), 200.0)
        >>> [round(c.total_seconds, 1) for c in r.table]
        [1005.0, 200.0, 200.0]
        >>> recommend_num_buckets(lengths, num_buckets=(1, 2), padding_target=0.1).num_buckets
        2
    """
    check_options(
        "recommend_num_buckets",
        spec_options,
        [
            n
            for n in SpecOptions.__annotations__
            if n not in ("num_buckets", "strategy", "boundaries")
        ],
    )
    ks = check_num_buckets(num_buckets)
    strategies = check_strategies(strategy)
    padding_target = check_padding_target(padding_target)
    cost = _check_costs(costs)
    warm = _check_compiled(compiled_shapes)
    budget = (
        spec_options.get("batch_size") is not None or spec_options.get("max_tokens") is not None
    )
    if cost is not None and not budget:
        raise ValueError(
            "costs need the batch size the model trains with: pass batch_size=... or "
            "max_tokens=..., got neither"
        )
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
    # every sample's length only where a plan's batches need it (a batch rule): a histogram
    # from an engine may count billions of samples (NOTE [ A histogram stays a histogram ])
    flat: Lengths | None
    if isinstance(lengths, LengthHistogram):  # checked once: the histogram's values
        hist = lengths
        why = "batch_size / max_tokens (each candidate's batches are planned sample by sample)"
        fix = "leave out batch_size and max_tokens" + (
            "" if cost is None else ", and costs (predicted over those batches)"
        )
        flat = Lengths(every_length(hist, why, fix)) if budget else None
    else:
        flat = Lengths(as_lengths(lengths))
        hist = LengthHistogram.from_lengths(flat)
        flat = flat if budget else None

    table = []
    for label, fn in strategies:
        for k in ks:
            sol = solve_boundaries(hist, k, strategy=fn)
            b = sol.boundaries
            row = Candidate(
                strategy=label,
                num_buckets=k,
                boundaries=tuple(int(x) for x in b),
                padding_ratio=float(sol.padding_ratio),
                num_shapes=int(b.size),
            )
            if flat is not None:  # (a batch rule: budget)
                ep = epoch_cost(flat, b, **spec_options)
                if ep.steps == 0:
                    continue  # "drop" with buckets smaller than a batch: this k trains on nothing
                scale = epochs if num_steps is None else num_steps / ep.steps
                steps, padded = ep.steps * scale, ep.padded_tokens * scale
                row = dataclasses.replace(
                    row,
                    num_shapes=len(ep.shapes),
                    steps=steps,
                    padded_tokens=padded,
                    real_tokens=ep.real_tokens * scale,
                )
                if cost is not None:
                    n_warm = sum(tuple(s) in warm for s in ep.shapes)
                    row = dataclasses.replace(
                        row,
                        compile_seconds=(len(ep.shapes) - n_warm)
                        * cost["compile_seconds_per_shape"]
                        + n_warm * cost["warm_compile_seconds_per_shape"],
                        compute_seconds=steps * cost["seconds_per_step"]
                        + padded * cost["seconds_per_token"],
                        warm_shapes=n_warm,
                    )
            table.append(row)
    if not table:
        raise ValueError(
            "no candidate yields a single full batch with last_batch='drop'; use "
            "last_batch='pad' or a smaller batch_size / max_tokens"
        )
    if cost is not None:
        best = min(table, key=lambda c: (c.total_seconds, c.num_buckets))
        rule = (
            f"the strategy and k in {list(ks)} with the least predicted time, compiles (one per "
            "planned batch shape"
            + ("; shapes already compiled at the warm cost" if warm else "")
            + ") + padded compute (a linear model in padded tokens): "
            f"{best.total_seconds:.1f} s predicted"
        )
    else:
        best, rule = _by_target(table, ks, padding_target)
    return Recommendation(
        num_buckets=best.num_buckets,
        strategy=best.strategy,
        boundaries=best.boundaries,
        rule=rule,
        predicted_seconds=best.total_seconds,
        table=tuple(table),
    )


def _by_target(table: list[Candidate], ks: tuple[int, ...], target: float) -> tuple[Candidate, str]:
    """The smallest k whose least-padding strategy meets ``target``, and the rule, in words."""
    rule = (
        f"the smallest k in {list(ks)} whose least-padding strategy pads at most "
        f"{target:.1%} (the shape budget is k <= {ks[-1]}); ties go to the earlier strategy"
    )
    best = table[0]
    for k in ks:
        rows = [c for c in table if c.num_buckets == k]
        if not rows:
            continue
        best = min(rows, key=lambda c: c.padding_ratio)
        if best.padding_ratio <= target:
            return best, rule
    return (
        best,
        rule + f"; no k meets the target, so the largest k={best.num_buckets} is recommended",
    )


def check_num_buckets(num_buckets: Any) -> tuple[int, ...]:
    """The k values to compare: an int or a non-empty sequence of ints >= 1, sorted, unique."""
    if isinstance(num_buckets, (str, bytes)) or not (
        isinstance(num_buckets, (int, np.integer, Sequence, np.ndarray))
    ):
        raise TypeError(
            "num_buckets must be an int >= 1 or a sequence of them, got "
            f"num_buckets={num_buckets!r}"
        )
    values = [num_buckets] if isinstance(num_buckets, (int, np.integer)) else list(num_buckets)
    if not values:
        raise ValueError("num_buckets must list at least one k, got an empty sequence")
    ks = sorted({check_int("num_buckets", k, minimum=1) for k in values})
    if ks[-1] > MAX_LENGTH:  # more buckets than lengths there can be: no budget (and not int64)
        check_int("num_buckets", ks[-1], minimum=1, maximum=MAX_LENGTH)
    return tuple(ks)


def check_strategies(strategy: Any) -> list[tuple[str, Strategy]]:
    """``(label, function)`` of every strategy to compare: a name, a callable, or a sequence."""
    items = [strategy] if isinstance(strategy, str) or callable(strategy) else strategy
    if not isinstance(items, Sequence) or len(items) == 0:
        raise TypeError(
            "strategy must be a strategy name or callable, or a non-empty sequence of them, "
            f"got strategy={strategy!r}"
        )
    out: dict[str, Any] = {}
    for item in items:
        name, fn = resolve_strategy(item)
        out.setdefault(str(name or getattr(fn, "__name__", repr(fn))), fn)
    return list(out.items())


def _check_compiled(shapes: Any) -> set[tuple[int, ...]]:
    """``compiled_shapes`` as a set of int tuples (a mapping's keys are its shapes)."""
    if shapes is None:
        return set()
    try:
        if isinstance(shapes, (str, bytes)):
            raise TypeError
        out = {tuple(int(x) for x in s) for s in shapes}
    except (TypeError, ValueError):
        raise TypeError(
            "compiled_shapes must be None or an iterable of batch shapes (B, L, ...), e.g. "
            f"CompileCache().compiled_shapes(key) or report.shapes, got compiled_shapes={shapes!r}"
        ) from None
    return out


def _check_costs(costs: Any) -> dict[str, float] | None:
    if costs is None:
        return None
    kwargs = costs.as_kwargs() if hasattr(costs, "as_kwargs") else costs
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            "costs must be a Calibration (from calibrate(...)) or a mapping with "
            f"compile_seconds_per_shape and seconds_per_token, got costs={costs!r}"
        )
    unknown = sorted(set(kwargs) - set(_COSTS))
    if unknown:
        raise TypeError(f"costs has unknown key {unknown[0]!r}; it takes {list(_COSTS)}")
    missing = [k for k in _COSTS[:2] if k not in kwargs]
    if missing:
        raise ValueError(f"costs needs {missing[0]!r} (seconds), got keys {sorted(kwargs)}")
    return {
        k: check_float(f"costs[{k!r}]", kwargs.get(k, 0.0), minimum=0.0, maximum=_INF)
        for k in _COSTS
    }


@dataclass(frozen=True)
class EpochCost:
    """Totals of one epoch under one set of boundaries.

    Attributes:
        shapes: every distinct batch shape ``(rows, padded_length)`` (the sampler's ``.shapes``).
        steps: batches per epoch (``len(sampler)``).
        padded_tokens: ``sum(rows * padded_length)`` over the epoch's batches (batch-padding rows
            included).
        real_tokens: real tokens the epoch trains on (``"drop"``: the expected value; ``"fill"``:
            counting only the first copy of a sample, the repeats count as padding).
    """

    shapes: tuple[tuple[int, ...], ...]
    steps: int
    padded_tokens: int
    real_tokens: int


def every_length(hist: LengthHistogram, why: str, fix: str) -> np.ndarray:
    """``hist`` as one length per sample (sorted), or one clear error when that array cannot be
    allocated: ``why`` says what needs it, ``fix`` how to do without it.

    NOTE [ A histogram stays a histogram ]
    An engine's histogram (Ray, Spark, a Parquet scan) counts every sample of a data set in
    kilobytes, however many samples there are; the strategies and the padding rule need nothing
    more. Only what simulates or plans batches sample by sample (the dynamic-padding baseline,
    a batch rule's epoch plan) expands it, so only those ask for this array, and a histogram of
    more samples than memory holds names the option that asked instead of failing in numpy.

    Example:
        >>> every_length(LengthHistogram.from_lengths([4, 2, 4]), "x", "y").tolist()
        [2, 4, 4]
    """
    try:
        return np.repeat(hist.values, hist.counts)
    except MemoryError:
        raise ValueError(
            f"{why} needs every sample's length, and the histogram counts "
            f"{hist.num_samples:,} samples ({hist.num_samples * 8 / 2**30:,.1f} GiB as int64), "
            f"more than this machine can allocate; {fix} (the padding of every strategy and k "
            "needs only the histogram)"
        ) from None


def epoch_cost(
    lengths: np.ndarray | Lengths, boundaries: np.ndarray, **spec_options: Any
) -> EpochCost:
    """Exact per-epoch totals of the sampler's plan on one rank, leftovers promoted as the
    sampler promotes them (see NOTE [ Epoch cost from the plan ]).

    ``spec_options`` are :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` options
    (``batch_size`` or ``max_tokens``, ``last_batch``, ...), as the sampler would get them.

    Example:
        >>> c = epoch_cost(np.array([3, 4, 4, 9, 10]), np.array([4, 10]), batch_size=2)
        >>> c.shapes, c.steps, c.padded_tokens, c.real_tokens
        (((2, 4), (2, 10)), 3, 36, 30)
    """
    built = BucketSpec.build(lengths, boundaries=boundaries, **spec_options)
    if promotes(built):  # NOTE [ Promotion of leftovers ]: the sampler's default plan
        promoted, p = promoted_spec(built, 1)
        if p.num_promoted:
            width = np.prod(promoted.cell_lengths, axis=1).astype(np.int64)
            cells = promoted.cells.shapes
            return EpochCost(
                shapes=tuple(sorted(s for s, m in zip(cells, p.steps, strict=True) if m)),
                steps=p.num_steps,
                padded_tokens=int((p.steps * p.rows * width).sum()),
                real_tokens=int(promoted.planned_lengths()[promoted.cell_of_sample >= 0].sum()),
            )
    spec = built.for_replicas(1)
    last_batch = spec.last_batch
    table = spec.shape_table()
    rows = spec.cell_batch.astype(np.int64)
    width = np.prod(spec.cell_lengths, axis=1).astype(np.int64)
    n = spec.counts.astype(np.int64)
    planned = spec.cell_of_sample >= 0  # length filters may leave samples out (cell -1)
    real = np.bincount(
        spec.cell_of_sample[planned],
        weights=spec.planned_lengths()[planned].sum(axis=1),
        minlength=n.size,
    )
    full, rest = spec.cell_steps()
    if last_batch in ("pad", "fill"):
        steps = full + (rest > 0)
        padded = steps * rows * width
        used_real = real
    elif last_batch == "keep":
        steps = full + (rest > 0)
        padded = n * width
        used_real = real
    else:  # "drop": a random subset of each bucket is dropped; count its expected real tokens
        steps = full
        padded = full * rows * width
        used_real = np.divide(real * (full * rows), n, out=np.zeros(n.size), where=n > 0)
    return EpochCost(
        shapes=tuple(table.shapes),
        steps=int(steps.sum()),
        padded_tokens=int(padded.sum()),
        real_tokens=round(float(np.sum(used_real))),
    )
