"""The batch-size rule: how many rows each planned cell's batches hold.

NOTE [ The batch-size rule ]
Every cell (a planned padded shape ``(L_1, ..., L_D)``) gets one full batch size ``B``, from
exactly one of:

* ``batch_size=<int>``: the same ``B`` for every cell;
* ``batch_size=<per-cell sizes>``: sizes someone measured to fit (Lhotse's
  ``FixedBucketBatchSizeConstraint``, tf.data's ``bucket_batch_sizes``, NeMo's 2-D lists): a
  sequence with one ``B`` per cell in plan order (one per boundary for one input), a mapping
  padded length (or padded shape tuple) -> ``B``, or a callable ``padded shape tuple -> B``
  (a tuple for one input too, ``(L,)``, as ``size``'s callable gets: ``lambda shape: 16_000 //
  shape[0]``; only the mapping also takes a plain padded length as the key);
* ``max_tokens=<int>`` or ``max_tokens=TokenBudget(...)``: a token budget,
  ``B = min(max_batch_size, max_tokens // size)``, where ``size`` is the cell's padded size
  (``"sum"`` of the padded lengths, ``"prod"`` for height x width, or a callable). Then, as
  fairseq's ``required_batch_size_multiple``, ``B`` is rounded down to a multiple of
  ``multiple_of`` unless it is already below it (a batch "less than N or a multiple of N").

Edge rules, each chosen so a user can predict it:

* *Empty cells* (padded size 0: samples of length 0) cost no tokens, so the budget cannot size
  them. They take ``max_batch_size`` when one is set, else the largest ``B`` of the other cells
  (they batch like the shortest non-empty bucket); only in a plan whose every cell is empty does
  an empty row count as one token (``B = max_tokens``). ``min_length=1`` (a length filter)
  removes empty samples instead.
* *Oversize cells* (``size > max_tokens``, so ``max_tokens // size == 0``) follow
  ``TokenBudget.oversize``: ``"error"`` (the default) names the longest sample and the budget it
  needs; ``"single"`` makes batches of one sample (such a batch exceeds the budget; Lhotse instead
  closes the batch waiting in the bucket with it, so its over-budget batch may hold others);
  ``"drop"`` leaves out the samples that do not fit the budget on their own (counted in the
  plan's report).
* *Impossible budgets*: a batch of more than :data:`MAX_BATCH_ELEMENTS` padded elements
  (``B`` times the larger of the cell's total padded length and its size) is refused when the
  plan is built, naming the cell and the fix, rather than failing in the collator with a
  terabyte allocation. Sizes are computed exactly (Python ints where int64 could wrap).

NOTE [ Even batches ]
The rule above gives each cell its *largest* batch ``B``. A cell with ``n`` samples over ``R``
ranks needs ``m = ceil(n / (R·B))`` global steps; filled at ``B`` rows, its last step holds only
what is left and the collator pads the rest with filler rows: up to ``R·B - 1`` of them, most of
the padding of a small data set at a large budget (Code Alpaca, k=16: 22.5 of 29.2 points). Under
``max_tokens`` (``TokenBudget(balance=True)``, the default) a sampler plans the cell at
``B' = ceil(n / (R·m))`` rows instead, rounded up to a multiple of ``multiple_of`` when ``B`` is
one (never above ``B``): ``B' <= B`` keeps every batch within the budget, ``n <= R·m·B'`` keeps
the same ``m`` steps (``ceil(n / (R·B')) = m`` exactly), one shape per cell as before, and fewer
than ``R·m·multiple_of`` filler rows (n=100, B=32: 4 batches of 25 rows, 0 filler instead of 28).
It applies to ``last_batch="pad"`` and ``"fill"`` (fewer filler rows, or fewer repeats);
``"drop"`` and ``"keep"`` keep full batches of ``B`` rows, as their names promise. ``B'`` depends
only on the per-cell counts and ``R``, which shuffling does not change, so the shapes are fixed
before the first epoch and equal in every epoch. A ``batch_size`` plan keeps the batch size the
user asked for, and a stream (which cannot know ``n``) keeps ``B``. Under ``last_batch="pad"``
a sampler then fills those few spare rows with samples of shorter cells (NOTE [ Promotion of
leftovers ] in :mod:`bucketloader.plan.promote`; ``TokenBudget(promote=False)`` does not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import OVERSIZE, SIZES, Size
from bucketloader._validation import (
    INT64_MAX,
    OptionError,
    Spell,
    check_bool,
    check_choice,
    check_int,
    checks_options,
)
from bucketloader.boundaries import fits_int64, row_sizes

#: A planned batch may hold at most this many padded elements: 2**40, a tebi-element, which
#: is more than any single accelerator holds even at one byte per element.
MAX_BATCH_ELEMENTS = 1 << 40


@checks_options
@dataclass(frozen=True)
class TokenBudget:
    """A token budget with its modifiers (pass it as ``max_tokens=``; NOTE [ The batch-size rule ]).

    ``max_tokens=16384`` is short for ``max_tokens=TokenBudget(16384)``.

    Attributes:
        max_tokens: padded elements per batch (``size`` of the cell times ``B``).
        max_batch_size: at most this many rows per batch (Lhotse ``max_cuts``, fairseq
            ``max_sentences``): ``B = min(max_batch_size, max_tokens // size)``.
        multiple_of: round ``B`` down to a multiple of this unless it is smaller (fairseq's
            "less than N or a multiple of N"), e.g. 8 for tensor cores.
        oversize: cells whose padded size exceeds ``max_tokens``: ``"error"``, ``"single"``
            (batches of one sample) or ``"drop"`` (leave those samples out).
        balance: a sampler spreads each cell's samples evenly over the batches it needs, so a
            cell's last batch has at most a few filler rows (NOTE [ Even batches ]); ``False``
            keeps ``B`` rows in every batch (as bucketloader 0.2 planned).
        promote: with ``balance`` and ``last_batch="pad"``, a sampler fills a cell's spare rows
            with samples of the shorter cells it covers (NOTE [ Promotion of leftovers ] in
            :mod:`bucketloader.plan.promote`); ``False`` keeps every sample in its own cell (even
            batches without promotion, as planned before it).

    Example:
        >>> batch_sizes([100, 250, 1000], max_tokens=TokenBudget(4000, max_batch_size=32)).tolist()
        [32, 16, 4]
        >>> batch_sizes([10, 90, 900], max_tokens=TokenBudget(1000, multiple_of=8)).tolist()
        [96, 8, 1]
        >>> batch_sizes([10, 5000], max_tokens=TokenBudget(1000, oversize="single")).tolist()
        [100, 1]
    """

    max_tokens: int
    max_batch_size: int | None = None
    multiple_of: int = 1
    oversize: str = "error"
    balance: bool = True
    promote: bool = True

    def __repr__(self) -> str:  # the switches only when not the default: reprs stay as in 0.2
        extra = ("" if self.balance else ", balance=False") + (
            "" if self.promote else ", promote=False"
        )
        return (
            f"TokenBudget(max_tokens={self.max_tokens!r}, max_batch_size={self.max_batch_size!r}, "
            f"multiple_of={self.multiple_of!r}, oversize={self.oversize!r}{extra})"
        )

    def __post_init__(self) -> None:
        check_int("max_tokens", self.max_tokens, minimum=1, maximum=INT64_MAX)
        check_bool("balance", self.balance)
        check_bool("promote", self.promote)
        if self.max_batch_size is not None:  # (rows: a batch holds at most 2**40 elements)
            check_int("max_batch_size", self.max_batch_size, minimum=1, maximum=MAX_BATCH_ELEMENTS)
        check_int("multiple_of", self.multiple_of, minimum=1, maximum=MAX_BATCH_ELEMENTS)
        check_choice("oversize", self.oversize, OVERSIZE)
        for name in ("max_tokens", "max_batch_size", "multiple_of"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, int(value))


@dataclass(frozen=True)
class BatchRule:
    """A validated batch-size rule (build it with :meth:`parse`).

    Attributes:
        batch_size: the same ``B`` for every cell, or ``None``.
        per_cell: per-cell sizes (a tuple, a mapping or a callable), or ``None``.
        budget: the :class:`TokenBudget`, or ``None``.
    """

    batch_size: int | None = None
    per_cell: Any = None
    budget: TokenBudget | None = None

    @classmethod
    def parse(cls, batch_size: Any, max_tokens: Any, *, row_length: int | None = None) -> BatchRule:
        """Exactly one of ``batch_size`` (an int or per-cell sizes) and ``max_tokens`` (an int or
        a :class:`TokenBudget`), validated; ``row_length``: a packing plan's (longest) row
        length, which the error for neither or both then speaks of (rows of packed documents,
        not padded buckets)."""
        if (batch_size is None) == (max_tokens is None):
            cap = (  # both, as fairseq's --max-tokens with --max-sentences (s19-user)
                "; for a token budget with at most batch_size rows per batch, pass "
                f"max_tokens=TokenBudget({max_tokens!r}, max_batch_size={batch_size!r})"
                if isinstance(batch_size, int) and isinstance(max_tokens, int)
                else ""
            )
            if row_length is None:
                what = "the same number of rows in every batch", "padded size"
            else:  # (PackSampler was told of padded sizes and buckets; s28-user)
                what = "rows of row_length tokens per batch", "row length"
                if batch_size is None:
                    cap = (
                        f"; e.g. batch_size=8 (8 rows of {row_length:,} tokens a batch) or "
                        f"max_tokens={8 * row_length} ({8 * row_length:,} tokens a batch)"
                    )
            raise ValueError(
                f"pass exactly one of batch_size ({what[0]}) or max_tokens (rows = max_tokens // "
                f"{what[1]}), got batch_size={batch_size!r} and max_tokens={max_tokens!r}{cap}"
            )
        if max_tokens is not None:
            if isinstance(max_tokens, TokenBudget):
                return cls(budget=max_tokens)
            return cls(budget=TokenBudget(check_int("max_tokens", max_tokens, minimum=1)))
        if isinstance(batch_size, TokenBudget):
            raise TypeError(
                f"batch_size={batch_size!r} is a token budget: pass it as max_tokens= (batch_size "
                "is a number of samples)"
            )
        if isinstance(batch_size, Mapping) or callable(batch_size):
            if isinstance(batch_size, Mapping) and not batch_size:
                raise ValueError("batch_size must not be an empty mapping; give padded length -> B")
            return cls(per_cell=batch_size if callable(batch_size) else dict(batch_size))
        if isinstance(batch_size, (list, tuple, np.ndarray)):
            sizes = tuple(
                check_int(f"batch_size[{i}]", b, minimum=1) for i, b in enumerate(batch_size)
            )
            if not sizes:
                raise ValueError("batch_size must not be an empty sequence; give one B per bucket")
            return cls(per_cell=sizes)
        return cls(batch_size=check_int("batch_size", batch_size, minimum=1))

    @property
    def oversize(self) -> str:
        """The oversize policy (``"error"`` without a token budget: nothing can be oversize)."""
        return self.budget.oversize if self.budget is not None else "error"

    def describe(self) -> str:
        """The rule as the user wrote it (for messages)."""
        if self.budget is not None:
            b = self.budget
            default = (None, 1, "error", True, True)
            if (b.max_batch_size, b.multiple_of, b.oversize, b.balance, b.promote) == default:
                return f"max_tokens={b.max_tokens}"
            return f"max_tokens={b!r}"
        if self.batch_size is not None:
            return f"batch_size={self.batch_size}"
        return f"batch_size={self.per_cell!r}"

    def sizes(self, lengths: np.ndarray, size: Size = "sum") -> np.ndarray:
        """Full batch size ``B`` of every cell (``lengths``: ``(K, D)`` padded lengths).

        Oversize cells get 0 under ``oversize="error"`` / ``"drop"`` (the caller names or drops
        them) and 1 under ``"single"``. Raises for an impossible budget (NOTE [ The batch-size
        rule ]).
        """
        lengths = np.asarray(lengths, dtype=np.int64).reshape(len(lengths), -1)
        k = lengths.shape[0]
        exact = exact_sizes(lengths, size)
        if self.batch_size is not None:
            out = [self.batch_size] * k
        elif self.per_cell is not None:
            out = self._per_cell(lengths)
        else:
            out = self._from_budget(exact)
        check_elements(out, lengths, exact, self)
        return np.asarray(out, dtype=np.int64)

    def _per_cell(self, lengths: np.ndarray) -> list[int]:
        rows = [tuple(int(x) for x in r) for r in lengths]
        given = self.per_cell
        if callable(given):
            return [
                check_int(f"batch_size{r}", call_rule("batch_size", given, r), minimum=1)
                for r in rows
            ]
        if isinstance(given, tuple):
            if len(given) != len(rows):
                shown = [r[0] if len(r) == 1 else r for r in rows]
                raise ValueError(
                    f"batch_size gives {len(given)} batch sizes but the plan has {len(rows)} "
                    f"buckets (padded lengths {shown}); give one batch size per bucket, a mapping "
                    "padded length -> batch size, or a callable"
                )
            return list(given)
        out = []
        for r in rows:
            key = r[0] if len(r) == 1 and r[0] in given else r
            if key not in given:
                raise ValueError(
                    f"batch_size has no entry for the bucket of padded length "
                    f"{r[0] if len(r) == 1 else r}; its keys are {sorted(given)[:8]}; give one "
                    "batch size per planned bucket"
                )
            out.append(check_int(f"batch_size[{key!r}]", given[key], minimum=1))
        return out

    def _from_budget(self, exact: list[int]) -> list[int]:
        b = self.budget
        if b is None:  # pragma: no cover - parse() guarantees one of the three
            raise TypeError("a BatchRule needs batch_size, per-cell sizes or a budget")
        out: list[int] = []
        for s in exact:
            if s == 0:
                out.append(-1)  # empty cell: sized below
                continue
            n = b.max_tokens // s
            if n == 0:
                out.append(1 if b.oversize == "single" else 0)
                continue
            if b.max_batch_size is not None:
                n = min(n, b.max_batch_size)
            if n >= b.multiple_of:
                n -= n % b.multiple_of
            out.append(n)
        if -1 in out:
            others = [n for n in out if n > 0]
            if b.max_batch_size is not None:
                fill = b.max_batch_size
            elif others:
                fill = max(others)
            else:  # every cell is empty: an empty row counts as one token
                fill = b.max_tokens
            if fill >= b.multiple_of:  # the same rounding as every other cell (fairseq's)
                fill -= fill % b.multiple_of
            out = [fill if n == -1 else n for n in out]
        return out


def batch_sizes(
    boundaries: Any,
    *,
    batch_size: int | Sequence[int] | Mapping[Any, int] | Callable[..., int] | None = None,
    max_tokens: int | TokenBudget | None = None,
    size: Size = "sum",
) -> np.ndarray:
    """Full batch size ``B_i`` of each bucket (or joint cell): NOTE [ The batch-size rule ].

    Args:
        boundaries: padded lengths per bucket, ``(K,)``, or per joint cell, ``(K, D)``.
        batch_size: the same ``B`` for every bucket, or per-bucket sizes (a sequence, a mapping
            padded length or shape -> ``B``, or a callable on the padded lengths tuple, ``(L,)``
            for one input); or
        max_tokens: ``B_i = max_tokens // size(b_i)`` (an int or a :class:`TokenBudget`).
        size: ``"sum"``, ``"prod"`` or a callable on the padded lengths tuple.

    Oversize buckets get 0 unless ``TokenBudget(oversize="single")``.

    Example:
        >>> batch_sizes([100, 250, 1000], max_tokens=4000).tolist()
        [40, 16, 4]
        >>> batch_sizes([100, 250, 1000], batch_size=[64, 16, 2]).tolist()
        [64, 16, 2]
        >>> batch_sizes([[32, 48], [64, 64]], max_tokens=8192, size="prod").tolist()
        [5, 2]
    """
    rule = BatchRule.parse(batch_size, max_tokens)
    cells = np.asarray(boundaries, dtype=np.int64)
    cells = cells[:, None] if cells.ndim == 1 else cells
    return rule.sizes(cells, resolve_size(size))


def even_batch(counts: Any, batch: Any, num_replicas: int = 1, multiple_of: int = 1) -> np.ndarray:
    """Per cell, the fewest rows that keep its step count: NOTE [ Even batches ].

    Args:
        counts: samples per cell.
        batch: the largest batch size ``B`` per cell (>= 1).
        num_replicas: ranks ``R``; a global step is ``R`` batches of one cell.
        multiple_of: ``B'`` is rounded up to a multiple of this when ``B`` is one.

    Returns:
        ``B' = ceil(n / (R·m))`` for ``m = ceil(n / (R·B))`` (``B`` for an empty cell).

    Example:
        >>> even_batch([100, 7, 0], [32, 32, 32]).tolist()
        [25, 7, 32]
        >>> even_batch([100, 7], [32, 32], num_replicas=2, multiple_of=8).tolist()
        [32, 8]
    """
    n = np.asarray(counts, dtype=np.int64)
    b = np.asarray(batch, dtype=np.int64)
    per = b * num_replicas
    steps = np.maximum(-(-n // per), 1)
    even = -(-n // (steps * num_replicas))
    if multiple_of > 1:
        up = -(-even // multiple_of) * multiple_of
        even = np.where(b % multiple_of == 0, np.minimum(up, b), even)
    return np.where(n > 0, np.minimum(even, b), b).astype(np.int64)


def exact_sizes(padded: np.ndarray, size: Any) -> list[int]:
    """Size of each padded shape row as exact Python ints (no int64 wrap-around)."""
    if size in ("sum", "prod"):
        return row_sizes(padded, size)
    return size_values(padded, size).tolist()


def call_rule(name: str, fn: Any, row: tuple[int, ...]) -> Any:
    """``fn(row)`` for a user's ``name`` callable; its own failure re-raised naming the padded
    lengths it was called on (the einops way: the user's inputs in the message)."""
    try:
        return fn(row)
    except Exception as exc:
        one = (  # (s30-first: `lambda b: 640 // b` for one input; a mapping takes int keys)
            f" (a tuple for one input too: its padded length is shape[0], {name}=lambda shape: "
            "... shape[0])"
            if len(row) == 1
            else ""
        )
        raise ValueError(
            f"the {name} callable raised {type(exc).__name__}: {exc} for padded lengths {row}; "
            f"fix {name}, which must map every planned padded-lengths tuple to an int{one}"
        ) from exc


def size_values(padded: np.ndarray, size: Any) -> np.ndarray:
    """Size of each padded shape row of ``padded`` (``(M, D)``): ``"sum"``, ``"prod"`` or a
    callable taking one padded-lengths tuple of ints and returning an int.

    Sizes that int64 cannot hold saturate at ``2**63 - 1`` (they exceed any ``max_tokens``);
    :func:`exact_sizes` gives the exact values.
    """
    padded = np.asarray(padded, dtype=np.int64)
    if size in ("sum", "prod"):
        if fits_int64(padded, size):
            return padded.sum(axis=1) if size == "sum" else padded.prod(axis=1)
        return np.array([min(s, INT64_MAX) for s in row_sizes(padded, size)], dtype=np.int64)
    out = np.empty(padded.shape[0], dtype=np.int64)
    for i, row in enumerate(padded.tolist()):
        value = call_rule("size", size, tuple(row))
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"size callable must return a non-negative int, got {value!r} for padded "
                f"lengths {tuple(row)}"
            )
        out[i] = min(int(value), INT64_MAX)
    return out


def check_elements(batch: Sequence[int], lengths: np.ndarray, exact: list[int], rule: Any) -> None:
    """Refuse a plan whose batches cannot exist (NOTE [ The batch-size rule ]), in the caller's
    words (:class:`~bucketloader._validation.OptionError`: the command line's flags)."""
    over = [
        ((int(b), *row), int(b) * max(1, sum(row), s))
        for b, s, row in zip(batch, exact, ([int(x) for x in r] for r in lengths), strict=True)
    ]
    big = next(((shape, n) for shape, n in over if n > MAX_BATCH_ELEMENTS), None)
    if big is None:
        return
    (shape, elements), (name, value) = big, rule.describe().split("=", 1)

    def say(o: Spell) -> str:
        fix = f"lower {o(name)}"
        if name == "max_tokens" and o("max_batch_size"):  # (the command line: no such flag)
            fix += (
                f", or cap the rows with {o('max_tokens')}=TokenBudget(..., "
                f"{o('max_batch_size', '...')})"
            )
        return (
            f"{o(name, value)} plans batches of shape {shape}, {elements} padded elements, more "
            f"than the {MAX_BATCH_ELEMENTS} (2**40) any device can hold; {fix}"
        )

    raise OptionError(say)


def resolve_size(size: Any) -> Size:
    """Check the ``size`` rule: ``"sum"``, ``"prod"`` or a callable."""
    if callable(size) or size in SIZES:
        return size  # type: ignore[no-any-return]
    raise ValueError(
        "size must be one of 'prod', 'sum' or a callable on the padded lengths tuple, "
        f"got size={size!r}"
    )
