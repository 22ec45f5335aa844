"""Length filters: ``min_length`` / ``max_length`` per input and what happens to the outliers.

NOTE [ Length filters ]
``min_length`` and ``max_length`` (an int for every input, or one per input; ``None`` = no
limit) bound the lengths a plan admits; ``overflow`` says what happens to a sample outside them,
the same words for a dataset (:meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>`) and a
stream (:class:`~bucketloader.stream.BucketIterable`):

* ``"error"`` (default): one ``ValueError`` naming how many samples are outside, the first one's
  index (or stream position) and length, and the options that fix it.
* ``"drop"``: the sample is left out of the plan (a dataset) or skipped (a stream); counted.
* ``"truncate"``: a sample longer than ``max_length`` is *planned at* ``max_length`` and cut to
  its first ``max_length`` elements: a stream cuts it as it reads it, a dataset's collator cuts it
  when it pads the batch (``PadCollator`` reads the limits from the plan's ``ShapeTable``), so
  the cut happens once, on the sample that is actually loaded. A sample *shorter* than
  ``min_length`` cannot be cut longer, so under ``"truncate"`` it is dropped (counted).

Boundaries are fitted on the planned lengths of the samples kept, so a handful of outliers no
longer costs a bucket (LibriSpeech at k = 16: see ``benchmarks/results/filters.md``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import OVERFLOW
from bucketloader._validation import check_choice, check_int


@dataclass(frozen=True)
class LengthLimits:
    """Validated per-input length limits and the outlier policy (NOTE [ Length filters ]).

    Attributes:
        names: the bucketed inputs.
        min_length: per input, the shortest admitted length (``None``: no limit).
        max_length: per input, the longest admitted length (``None``: no limit).
        overflow: ``"error"``, ``"drop"``, ``"truncate"`` (or, for a stream only, a callable
            ``(sample, max_length) -> sample``).

    Example:
        >>> lim = LengthLimits.parse(1, 10, "truncate", ("length",))
        >>> planned, keep, counts = lim.apply(np.array([[0], [4], [12]]))
        >>> planned.ravel().tolist(), keep.tolist(), counts
        ([0, 4, 10], [False, True, True], {'too_short': 1, 'too_long': 0, 'truncated': 1})
    """

    names: tuple[str, ...]
    min_length: tuple[int | None, ...]
    max_length: tuple[int | None, ...]
    overflow: Any = "error"

    @classmethod
    def parse(
        cls,
        min_length: Any,
        max_length: Any,
        overflow: Any,
        names: tuple[str, ...],
        *,
        allow_callable: bool = False,
    ) -> LengthLimits:
        """Validate the three options against the input names."""
        if not (allow_callable and callable(overflow)):
            overflow = check_choice("overflow", overflow, OVERFLOW)
        lo = _per_input("min_length", min_length, names, minimum=0)
        hi = _per_input("max_length", max_length, names, minimum=1)
        for name, a, b in zip(names, lo, hi, strict=True):
            if a is not None and b is not None and a > b:
                label = "" if len(names) == 1 else f" for input {name!r}"
                raise ValueError(
                    f"min_length must be <= max_length{label}, got min_length={a} and "
                    f"max_length={b}"
                )
        return cls(names=names, min_length=lo, max_length=hi, overflow=overflow)

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return any(x is not None for x in (*self.min_length, *self.max_length))

    @property
    def truncate(self) -> tuple[int | None, ...] | None:
        """Per-input cut lengths when the policy truncates (``None`` otherwise)."""
        if self.overflow == "truncate" and any(x is not None for x in self.max_length):
            return self.max_length
        return None

    def apply(self, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
        """Filter a dataset's ``(N, D)`` lengths.

        Returns ``(planned lengths, kept mask, counts)``; counts are ``too_short``,
        ``too_long`` (samples left out) and ``truncated`` (samples planned at ``max_length``).
        Raises the ``"error"`` policy's message.
        """
        n = table.shape[0]
        short = np.zeros(n, dtype=bool)
        long_ = np.zeros(n, dtype=bool)
        for d in range(len(self.names)):
            if self.min_length[d] is not None:
                bad = table[:, d] < self.min_length[d]
                if self.overflow == "error" and bad.any():
                    self._raise(table, d, bad, "min_length")
                short |= bad
            if self.max_length[d] is not None:
                bad = table[:, d] > self.max_length[d]
                if self.overflow == "error" and bad.any():
                    self._raise(table, d, bad, "max_length")
                long_ |= bad
        planned = table
        truncated = 0
        if self.overflow == "truncate":
            cut = long_ & ~short
            truncated = int(cut.sum())
            if truncated:
                limits = np.array(
                    [np.iinfo(np.int64).max if m is None else m for m in self.max_length],
                    dtype=np.int64,
                )
                planned = np.minimum(table, limits[None, :])
            keep = ~short
            too_long = 0
        else:
            keep = ~(short | long_)
            too_long = int((long_ & ~short).sum())
        counts = {"too_short": int(short.sum()), "too_long": too_long, "truncated": truncated}
        return planned, keep, counts

    def _raise(self, table: np.ndarray, d: int, bad: np.ndarray, which: str) -> None:
        first = int(np.argmax(bad))
        limit = (self.min_length if which == "min_length" else self.max_length)[d]
        one = len(self.names) == 1
        what = "" if one else f"input {self.names[d]!r} "
        label = which if one else f"{which}[{self.names[d]!r}]"
        side = "shorter" if which == "min_length" else "longer"
        fix = (
            "pass overflow='drop' to leave them out, or lower min_length"
            if which == "min_length"
            else "pass overflow='drop' to leave them out or overflow='truncate' to cut them to "
            "max_length, or raise max_length"
        )
        raise ValueError(
            f"{int(bad.sum())} samples have {what}length {side} than {label}={limit} (the "
            f"first: index {first}, length {int(table[first, d])}); {fix}"
        )

    def config(self) -> dict[str, Any]:
        """JSON-serialisable form (for state checks)."""
        pol = self.overflow if isinstance(self.overflow, str) else "callable"
        return {
            "min_length": list(self.min_length),
            "max_length": list(self.max_length),
            "overflow": pol,
        }


def _per_input(
    name: str, value: Any, names: tuple[str, ...], *, minimum: int
) -> tuple[int | None, ...]:
    if value is None:
        return (None,) * len(names)
    if isinstance(value, Mapping):
        unknown = [k for k in value if str(k) not in names]
        if unknown:
            raise ValueError(
                f"{name} names input {unknown[0]!r}, but the inputs are {list(names)}; give "
                f"{name} per input name (inputs left out have no limit)"
            )
        got = {str(k): v for k, v in value.items()}
        vals = [got.get(n) for n in names]
    elif isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise ValueError(
                f"{name} must give one value per input ({len(names)}: {list(names)}), got "
                f"{len(value)} values: {value!r}"
            )
        vals = list(value)
    else:
        vals = [value] * len(names)
    out: list[int | None] = []
    for n, v in zip(names, vals, strict=True):
        label = name if len(names) == 1 else f"{name}[{n!r}]"
        out.append(None if v is None else check_int(label, v, minimum=minimum))
    return tuple(out)


def zero_length_note(count: int, total: int) -> str | None:
    """What to say about ``count`` samples of length 0 (in any input) among ``total``, or
    ``None`` for none.

    NOTE [ Samples of length 0 ]: such a row is real (``sample_mask`` True) with an all-False
    ``attention_mask`` row: softmax attention over no key divides 0 by 0, NaN outputs and NaN
    gradients, whatever the loss does with the row (filler rows attend one position instead,
    NOTE [ Filler rows attend one position ] in :mod:`bucketloader.collate.collator`). The
    samplers warn once at planning time; :func:`~bucketloader.analyze`'s report and
    ``bucketloader report`` / ``precompute`` print the same words (:func:`zero_lengths_note`). A
    stream (:class:`~bucketloader.BucketIterable`) sees lengths only as it reads them: it warns
    with the same words when a pass keeps its first such sample (one text, so Python's warning
    filter shows it once per process; a DataLoader worker is a process), and counts them all in
    ``report().totals["zero_length"]`` (and its state); a :class:`~bucketloader.stream.PackIterable`
    refuses an empty document.

    Example:
        >>> zero_length_note(2, 3)[:38]
        '2 of 3 samples of length 0: each is a '
        >>> zero_length_note(0, 3) is None
        True
    """
    if not count:
        return None
    return f"{count:,} of {total:,} samples of length 0: {ZERO_LENGTH_HARM}"


def zero_lengths_note(lengths: Any) -> str | None:
    """:func:`zero_length_note` for ``lengths`` (lengths, an ``(N, D)`` table, a
    :class:`~bucketloader.LengthHistogram` or a :class:`~bucketloader.JointHistogram`): a sample
    counts when any of its lengths is 0. What :func:`~bucketloader.analyze`'s report and the
    command line's ``report`` and ``precompute`` say (one helper: the same words).

    Example:
        >>> from bucketloader import LengthHistogram
        >>> zero_lengths_note(LengthHistogram.from_lengths([0, 0, 5]))[:28]
        '2 of 3 samples of length 0: '
        >>> zero_lengths_note([[3, 0], [4, 4]])[:27], zero_lengths_note([1, 2]) is None
        ('1 of 2 samples of length 0:', True)
    """
    return zero_length_note(*_zero_count(lengths))


def zero_lengths_field(lengths: Any) -> dict[str, Any]:
    """The ``"zero_length"`` field of the JSON that :meth:`DynamicityReport.to_dict
    <bucketloader.analysis.report.DynamicityReport.to_dict>` and ``bucketloader report`` /
    ``precompute --json`` write (the text versions print :func:`zero_lengths_note` as a
    ``warning:`` line; s32: a script reading the JSON did not learn of such samples):
    ``{"count": <samples of length 0>, "message": <that warning, or None for none>}``.

    Example:
        >>> zero_lengths_field([0, 0, 5])["count"], zero_lengths_field([1, 2])
        (2, {'count': 0, 'message': None})
    """
    count, total = _zero_count(lengths)
    return {"count": count, "message": zero_length_note(count, total)}


def _zero_count(lengths: Any) -> tuple[int, int]:
    """``(samples of length 0, samples)`` of ``lengths`` as :func:`zero_lengths_note` reads
    them (a sample counts when any of its lengths is 0)."""
    from bucketloader.histogram import JointHistogram, LengthHistogram

    if isinstance(lengths, LengthHistogram):
        return int(lengths.counts[lengths.values == 0].sum()), lengths.num_samples
    if isinstance(lengths, JointHistogram):
        return int(lengths.counts[(lengths.rows == 0).any(axis=1)].sum()), lengths.num_samples
    table = np.asarray(lengths).reshape(len(lengths), -1)
    return int((table == 0).any(axis=1).sum()), len(table)


#: What a sample of length 0 does and the fix (NOTE [ Samples of length 0 ]), after its count.
ZERO_LENGTH_HARM = (
    "each is a real row with an all-False attention_mask, which gives NaN in softmax attention "
    "(MultiheadAttention, SDPA) and NaN gradients; drop them (min_length=1 with "
    "overflow='drop', or filter the dataset), or count special tokens (BOS/EOS) in the lengths"
)


def warn_zero_lengths(spec: Any, owner: str, stacklevel: int = 3) -> None:
    """Warn once (one warning, :func:`zero_length_note`'s words) when ``spec`` (a
    :class:`~bucketloader.plan.spec.BucketSpec`) keeps samples of length 0, naming the cells of
    width 0 they got of their own, if any."""
    table = np.asarray(spec.lengths).reshape(len(spec.lengths), -1)
    zero = (table == 0).any(axis=1) & (spec.cell_of_sample >= 0)  # (the filters' kept ones)
    note = zero_length_note(int(zero.sum()), len(table))
    if note is None:
        return
    empty = np.flatnonzero((spec.cell_lengths == 0).any(axis=1) & (spec.counts > 0))
    if empty.size:
        first = tuple(int(x) for x in spec.cell_lengths[empty[0]])
        note += (
            f"; they got {empty.size} cell(s) of width 0 of their own ({first} first, "
            f"{int(spec.counts[empty].sum())} samples), and most models cannot take an empty batch"
        )
    warnings.warn(f"this {owner} plans {note}", UserWarning, stacklevel=stacklevel + 1)
