"""LengthHistogram: the sufficient statistic every bucketing strategy works on."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from bucketloader._types import LengthsLike
from bucketloader._validation import MAX_LENGTH, as_lengths, check_int

#: Bump when the canonical encoding of a histogram changes (it keys the solution cache).
HISTOGRAM_FORMAT = 1


class LengthHistogram:
    """Sorted distinct lengths and how many samples have each.

    Padding cost depends on lengths only through this histogram, so every strategy takes one; the
    order of the samples does not matter. Build it with :meth:`from_lengths`.

    Attributes:
        values: strictly increasing ``int64`` distinct lengths.
        counts: ``int64`` number of samples at each value (all >= 1).

    Example:
        >>> h = LengthHistogram.from_lengths([5, 3, 5, 9])
        >>> h.values.tolist(), h.counts.tolist()
        ([3, 5, 9], [1, 2, 1])
        >>> LengthHistogram.from_lengths([5, 3, 5, 9], bin_width=4).values.tolist()
        [4, 8, 12]
    """

    __slots__ = ("_counts", "_values")

    def __init__(self, values: ArrayLike, counts: ArrayLike) -> None:
        values = np.array(as_lengths(values, name="values"))  # our own copies: read-only below
        counts = np.array(as_lengths(counts, name="counts"))
        if values.shape != counts.shape:
            raise ValueError(
                "LengthHistogram needs 1-D values and counts of the same non-zero size, got "
                f"values of shape {values.shape} and counts of shape {counts.shape}"
            )
        if (np.diff(values) <= 0).any() or (counts <= 0).any():
            raise ValueError(
                "LengthHistogram values must be strictly increasing non-negative ints with "
                "positive counts; build one with LengthHistogram.from_lengths(lengths)"
            )
        if int(counts.max()) * counts.size > MAX_LENGTH and _exact_sum(counts) > MAX_LENGTH:
            raise ValueError(
                f"LengthHistogram counts must sum to less than 2**62 samples, got "
                f"{_exact_sum(counts)}"
            )
        values.setflags(write=False)
        counts.setflags(write=False)
        self._values, self._counts = values, counts

    @property
    def values(self) -> np.ndarray:
        """Strictly increasing ``int64`` distinct lengths (read-only)."""
        return self._values

    @property
    def counts(self) -> np.ndarray:
        """``int64`` number of samples at each value, all >= 1 (read-only)."""
        return self._counts

    def __reduce__(self) -> tuple[Any, ...]:
        return (LengthHistogram, (self._values, self._counts))

    @classmethod
    def from_lengths(
        cls,
        lengths: LengthsLike | LengthHistogram,
        *,
        bin_width: int = 1,
        sample_size: int | None = None,
        seed: int = 0,
    ) -> LengthHistogram:
        """Build the histogram of per-sample lengths.

        Args:
            lengths: list, numpy array or torch tensor of integer lengths in ``[0, 2**62)``
                (:func:`~bucketloader._validation.as_lengths`), or an existing
                ``LengthHistogram`` (returned re-binned / re-sampled as asked).
            bin_width: round every length **up** to a multiple of this before counting, so
                boundaries found on the histogram still cover every sample and there are far fewer
                distinct values (e.g. 160 for 10 ms frames of 16 kHz audio).
            sample_size: if given, use a deterministic random subset of at most this many
                lengths (drawn with ``seed``): an estimate for very large datasets.
            seed: seed of that subset.
        """
        bin_width = check_int("bin_width", bin_width, minimum=1)
        if sample_size is not None:
            sample_size = check_int("sample_size", sample_size, minimum=1)
        seed = check_int("seed", seed, minimum=0)
        if isinstance(lengths, LengthHistogram):
            values, counts = lengths.values, lengths.counts
            if sample_size is not None and sample_size < counts.sum():
                flat = np.repeat(values, counts)
                rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A11]))
                flat = rng.choice(flat, size=sample_size, replace=False)
                values, counts = np.unique(flat, return_counts=True)
        else:
            arr = as_lengths(lengths)
            if sample_size is not None and sample_size < arr.size:
                rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A11]))
                arr = arr[rng.choice(arr.size, size=sample_size, replace=False)]
            values, counts = _count(arr)
        if bin_width > 1 and int(values[-1]) > 0:  # (zero lengths stay zero at any width)
            if -(-int(values[-1]) // bin_width) * bin_width > MAX_LENGTH:
                raise ValueError(
                    f"bin_width={bin_width} rounds the longest length {int(values[-1])} up past "
                    "2**62 - 1, the longest length bucketloader supports; use a smaller bin_width"
                )
            binned = -(-values // bin_width) * bin_width
            values, start = np.unique(binned, return_index=True)
            counts = np.add.reduceat(counts, start)
        return cls(values=values, counts=counts)

    @property
    def num_samples(self) -> int:
        """Total number of samples (below 2**62, checked at construction)."""
        return int(self.counts.sum())

    @property
    def num_values(self) -> int:
        """Number of distinct lengths (U)."""
        return int(self.values.size)

    @property
    def max(self) -> int:
        """Longest length."""
        return int(self.values[-1])

    @property
    def min(self) -> int:
        """Shortest length."""
        return int(self.values[0])

    @property
    def total(self) -> int:
        """Sum of all lengths (the real, non-pad elements), exact whatever its size."""
        if self.max * self.num_samples <= MAX_LENGTH:  # int64 is exact
            return int(np.dot(self.values, self.counts))
        return sum(v * c for v, c in zip(self.values.tolist(), self.counts.tolist(), strict=True))

    def quantile(self, q: float | np.ndarray) -> np.ndarray:
        """Lower quantile(s) of the lengths, as ``np.percentile(..., method="lower")`` at 100·q."""
        cum = np.cumsum(self.counts)
        pos = np.floor(np.asarray(q, dtype=np.float64) * (cum[-1] - 1)).astype(np.int64)
        return self.values[np.searchsorted(cum, pos, side="right")]

    def digest(self) -> str:
        """SHA256 of the canonical encoding (format, then little-endian int64 values and counts).

        The same multiset of lengths gives the same digest in any order or container.
        """
        h = hashlib.sha256()
        h.update(f"bucketloader.LengthHistogram/{HISTOGRAM_FORMAT}/{self.values.size}/".encode())
        h.update(self.values.astype("<i8").tobytes())
        h.update(self.counts.astype("<i8").tobytes())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LengthHistogram):
            return NotImplemented
        return np.array_equal(self.values, other.values) and np.array_equal(
            self.counts, other.counts
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"LengthHistogram(num_samples={self.num_samples}, num_values={self.num_values}, "
            f"min={self.min}, max={self.max})"
        )


def _exact_sum(counts: np.ndarray) -> int:
    return sum(counts.tolist())


def _count(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and counts: ``bincount`` when the range is small, else a sort."""
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo <= 4 * arr.size + 1024:
        counts = np.bincount((arr - lo).ravel(), minlength=hi - lo + 1)
        values = np.flatnonzero(counts)
        return values + lo, counts[values]
    return np.unique(arr, return_counts=True)
