"""Shape planning, written once: the options that shape batches, and the function that turns them
and boundaries into planned shapes.

The options that decide a batch's shape (the batch-size rule, the length filters, boundaries on
multiples, the last-batch policy) are declared once, as :class:`ShapeOptions`, and validated
once per public entry point into a :class:`Shaping`. :func:`plan_shapes` then turns a shaping
and boundaries into the planned :class:`~bucketloader.plan.Cells` (given boundaries rounded to
their multiples and checked, every lattice cell or only the occupied ones, batch sizes by the
rule). :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>`,
:class:`~bucketloader.BucketIterable` and, for rows, :class:`~bucketloader.pack.PackSpec` and
:class:`~bucketloader.stream.PackIterable` (:func:`row_batch_sizes`) all plan through here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypedDict

import numpy as np

from bucketloader._types import LAST_BATCH, PerInput, Size
from bucketloader._validation import check_choice, check_int, check_options
from bucketloader.boundaries import check_boundaries, round_up
from bucketloader.plan.budget import MAX_BATCH_ELEMENTS, BatchRule, TokenBudget, resolve_size
from bucketloader.plan.cells import Cells
from bucketloader.plan.limits import LengthLimits

__all__ = [
    "BatchSize",
    "MaxTokens",
    "ShapeOptions",
    "Shaping",
    "SpecOptions",
    "per_input",
    "plan_shapes",
    "row_batch_sizes",
]

#: The batch-size rule's ``batch_size``: one ``B``, per-cell sizes (a sequence in plan order, a
#: mapping padded length or shape -> ``B``) or a callable on the padded lengths tuple (``(L,)``
#: for one input).
BatchSize: TypeAlias = int | Sequence[int] | Mapping[Any, int] | Callable[..., int] | None
#: The batch-size rule's ``max_tokens``: an int or a :class:`~bucketloader.plan.TokenBudget`.
MaxTokens: TypeAlias = int | TokenBudget | None


class ShapeOptions(TypedDict, total=False):
    """The options that shape batches, as ``BucketSampler``, ``BucketSpec.build`` and
    ``BucketIterable`` take them (NOTE [ The batch-size rule ] in
    :mod:`bucketloader.plan.budget`, NOTE [ Length filters ] in :mod:`bucketloader.plan.limits`).
    """

    batch_size: BatchSize
    max_tokens: MaxTokens
    last_batch: str
    overflow: str | Callable[..., Any]
    min_length: PerInput | None
    max_length: PerInput | None
    pad_to_multiple_of: PerInput
    size: Size


class SpecOptions(ShapeOptions, total=False):
    """Everything :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` takes besides
    the lengths: the shape options and how the boundaries are fitted (``BucketSampler`` and
    ``recommend_num_buckets`` pass them on as they are)."""

    num_buckets: PerInput | None
    strategy: Any
    boundaries: Any
    max_shapes: int | None
    groups: Any
    cache: Any
    shapes: Any
    filter: Any


#: The names of :class:`ShapeOptions` (for messages about an unknown option).
SHAPE_OPTIONS = tuple(ShapeOptions.__annotations__)


@dataclass(frozen=True)
class Shaping:
    """:class:`ShapeOptions`, validated once against the bucketed inputs.

    Attributes:
        names: the bucketed inputs.
        rule: the :class:`~bucketloader.plan.budget.BatchRule`.
        limits: the :class:`~bucketloader.plan.limits.LengthLimits` (with the overflow policy).
        multiples: per input, boundaries are multiples of this.
        last_batch: the last-batch policy.
        size: what ``max_tokens`` counts of a cell with several inputs (``"sum"``, ``"prod"``
            or a callable on the padded lengths tuple).

    Example:
        >>> s = Shaping.parse(("length",), batch_size=4, pad_to_multiple_of=8)
        >>> s.multiples, s.last_batch, s.rule.describe()
        ((8,), 'pad', 'batch_size=4')
    """

    names: tuple[str, ...]
    rule: BatchRule
    limits: LengthLimits
    multiples: tuple[int, ...]
    last_batch: str
    size: Size = "sum"

    @classmethod
    def parse(
        cls,
        names: tuple[str, ...],
        *,
        allow_callable: bool = False,
        **options: Any,
    ) -> Shaping:
        """Validate ``options`` (the keys of :class:`ShapeOptions`) for ``names``;
        ``allow_callable``: a callable ``overflow`` (streams cut samples themselves)."""
        check_options("Shaping.parse", options, SHAPE_OPTIONS)
        last_batch = check_choice("last_batch", options.get("last_batch", "pad"), LAST_BATCH)
        rule = BatchRule.parse(options.get("batch_size"), options.get("max_tokens"))
        limits = LengthLimits.parse(
            options.get("min_length"),
            options.get("max_length"),
            options.get("overflow", "error"),
            names,
            allow_callable=allow_callable,
        )
        multiples = tuple(
            check_int("pad_to_multiple_of", m, minimum=1)
            for m in per_input("pad_to_multiple_of", options.get("pad_to_multiple_of", 1), names)
        )
        size = resolve_size(options.get("size", "sum"))
        return cls(
            names=names,
            rule=rule,
            limits=limits,
            multiples=multiples,
            last_batch=last_batch,
            size=size,
        )

    def label(self, d: int, group: str = "") -> str:
        """How messages name input ``d``'s boundaries."""
        label = "boundaries" if len(self.names) == 1 else f"boundaries[{self.names[d]!r}]"
        return label + group

    def given(
        self, boundaries: Any, d: int, *, longest: int | None = None, group: str = ""
    ) -> np.ndarray:
        """Input ``d``'s given boundaries, checked, rounded up to its multiple, covering
        ``longest`` (when given)."""
        label = self.label(d, group)
        b = check_boundaries(boundaries, name=label)
        if self.multiples[d] > 1:
            b = np.unique(round_up(b, self.multiples[d]))
        return check_boundaries(b, max_length=longest, name=label)


def plan_shapes(
    shaping: Shaping,
    boundaries: Sequence[Sequence[np.ndarray]],
    *,
    size: Size = "sum",
    group_values: tuple[int, ...] | None = None,
    occupancy: Sequence[np.ndarray] | None = None,
    max_shapes: int | None = None,
    joint: Sequence[np.ndarray] | None = None,
) -> Cells:
    """The planned shapes: cells of ``boundaries[g][d]`` (per group, per input) with their
    batch sizes by ``shaping``'s rule.

    A spec passes the occupancy of each lattice code (only occupied cells are planned, rare
    ones merged down to ``max_shapes``, or the cells of a joint solve, ``joint``); a stream
    cannot know which cells its samples will fill and passes none (every lattice point is
    planned).

    Example:
        >>> s = Shaping.parse(("length",), max_tokens=64)
        >>> cells = plan_shapes(s, [(np.array([8, 16, 32]),)])
        >>> cells.shapes
        ((8, 8), (4, 16), (2, 32))
    """
    return Cells.build(
        boundaries,
        shaping.names,
        group_values=group_values,
        occupancy=occupancy,
        max_shapes=max_shapes,
        size=size,
        rule=shaping.rule,
        joint=joint,
    )


def row_batch_sizes(
    batch_size: Any, max_tokens: Any, row_lengths: Sequence[int]
) -> tuple[int, ...]:
    """Rows per batch for each row length of a packing plan, by the sampler's batch-size rule:
    ``batch_size`` (one int, the same for every row length) or ``max_tokens``.

    Example:
        >>> row_batch_sizes(None, 4096, (512, 1024))
        (8, 4)
        >>> row_batch_sizes([8], None, (512,))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        TypeError: batch_size must be an int >= 1 (rows per batch, ...), got batch_size=[8]; ...
    """
    if isinstance(batch_size, (list, tuple, np.ndarray, Mapping)) or (
        callable(batch_size) and not isinstance(batch_size, TokenBudget)
    ):  # per-bucket sizes are a BucketSampler's; rows take one B (it read [8] as 8)
        raise TypeError(
            "batch_size must be an int >= 1 (rows per batch, the same for every row length), "
            f"got batch_size={batch_size!r}; for fewer rows at longer row lengths pass "
            "max_tokens= instead (B = max_tokens // row length)"
        )
    rows = tuple(row_lengths)
    rule = BatchRule.parse(batch_size, max_tokens, row_length=rows[-1])
    if rule.batch_size is not None and rule.batch_size * rows[-1] <= MAX_BATCH_ELEMENTS:
        return (rule.batch_size,) * len(rows)  # one B: nothing to size, no batch too large
    bsz = tuple(int(b) for b in rule.sizes(np.asarray(rows, dtype=np.int64)[:, None]))
    if min(bsz) < 1:
        raise ValueError(
            f"{rule.describe()} holds no row of {rows[-1]} tokens; raise max_tokens to at "
            f"least {rows[-1]} or use batch_size="
        )
    return bsz


def per_input(name: str, value: Any, names: tuple[str, ...], scalar: tuple = ()) -> list[Any]:
    """``value`` for each input: one for all, a sequence in input order, or a mapping
    name -> value (``scalar``: sequence types that count as one value).

    Example:
        >>> per_input("min_length", {"b": 2, "a": 1}, ("a", "b"))
        [1, 2]
    """
    if isinstance(value, Mapping):
        if set(map(str, value)) != set(names):
            raise ValueError(
                f"{name} must give one value per input {list(names)}, got keys {list(value)}"
            )
        lookup = {str(k): v for k, v in value.items()}
        return [lookup[n] for n in names]
    if isinstance(value, (list, tuple)) and not isinstance(value, scalar):
        if len(value) != len(names):
            raise ValueError(
                f"{name} must give one value per input ({len(names)}: {list(names)}), "
                f"got {len(value)} values: {value!r}"
            )
        return list(value)
    return [value] * len(names)
