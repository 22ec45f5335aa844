"""Keyed permutations evaluated at any position: a bucket's shuffle without shuffling it.

NOTE [ Counter-based shuffle ]  (plan version 2 of :func:`~bucketloader.plan.plan_epoch`)
An epoch shuffles each cell's samples. Version 1 ran numpy's Fisher-Yates over every cell, on
every rank: O(N) random memory swaps per epoch (about as slow as ``np.argsort`` of N lengths,
13 s at 100 M) although a rank of ``R`` takes only ``1/R`` of the samples. Version 2 draws, per
cell and epoch, a keyed bijection ``pi`` of ``[0, n)`` whose value at any position is computed
alone ("counter-based", like Philox or Random123): the cell's shuffled order is
``by_cell[start + pi(p)]``, and a rank evaluates ``pi`` only at the positions of its own slots.

- ``n <= SMALL`` (1,024): ``pi`` is ``Generator(PCG64(key)).permutation(n)``, an exact uniform
  shuffle (cheap at that size, where a Feistel network on a few bits mixes poorly).
- Larger: a Feistel network of ``ROUNDS`` (4) rounds on the grid ``[0, h) x [0, 2**w)``
  (``w = ceil(b / 2)`` for ``2**b >= n``, ``h = ceil(n / 2**w)``: fewer than ``2**w`` ~ sqrt(2n)
  spare slots) whose round functions are *random tables* drawn from the cell's generator
  (``lo += F(hi) mod 2**w``, ``hi += G(lo) mod h``; at most ``2**16`` int64 entries each: a
  Luby-Rackoff network, one gather and one add per round). Values ``>= n`` are walked (the
  network applied again) until they land in ``[0, n)``, which keeps it a bijection of
  ``[0, n)``; about one position in sqrt(n) needs it. (A cell of more than ``2**32`` samples
  uses xor multiply-shift rounds on 64 bits instead, with ``2**b < 2n`` spare slots.)

Keys come from the epoch's ``SeedSequence`` (one child per cell, ``spawn_key + (cell,)``), so the
plan stays a pure function of ``(seed, epoch)``. Cost per rank: O(its samples) integer work, in
chunks; nothing of size N is written per epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Cells up to this size are shuffled exactly (Fisher-Yates on a per-cell generator).
SMALL = 1 << 10
#: Feistel rounds for larger cells.
ROUNDS = 4
#: Cells up to ``2**TABLE_BITS`` samples use tabulated random round functions.
TABLE_BITS = 32
#: Positions read per chunk by ``ShuffledOrder[...]``.
_READ = 1 << 20
#: Positions evaluated per chunk (bounded temporaries).
CHUNK = 1 << 14

_U = np.uint64


class CellShuffle:
    """One cell's keyed permutation of ``[0, n)``, evaluated at any positions.

    Args:
        n: the cell's size.
        ss: the cell's ``numpy.random.SeedSequence``.

    Example:
        >>> pi = CellShuffle(10, np.random.SeedSequence(1))
        >>> sorted(pi(np.arange(10)).tolist()) == list(range(10))
        True
        >>> pi(np.array([3, 7])).tolist() == pi(np.arange(10))[[3, 7]].tolist()
        True
    """

    __slots__ = ("bits", "height", "keys", "lo_bits", "n", "table", "tables")

    def __init__(self, n: int, ss: np.random.SeedSequence) -> None:
        self.n = int(n)
        self.table: np.ndarray | None = None
        self.tables: list[np.ndarray] = []
        self.keys = np.zeros(0, dtype=_U)
        rng = np.random.default_rng(ss)
        self.bits = int(self.n - 1).bit_length()
        self.lo_bits = (self.bits + 1) // 2
        self.height = -(-self.n // (1 << self.lo_bits))  # rows of the grid
        if self.n <= SMALL:
            self.table = rng.permutation(self.n)
        elif self.bits <= TABLE_BITS:  # random round functions on the grid, one table a round
            width = 1 << self.lo_bits
            for r in range(ROUNDS):
                src, dst = (self.height, width) if r % 2 == 0 else (width, self.height)
                self.tables.append(rng.integers(0, dst, size=src, dtype=np.int64))
        else:  # (a cell of more than 2**32 samples) multiply-shift rounds on 64 bits
            self.lo_bits = self.bits // 2
            self.keys = rng.integers(0, 1 << 64, size=2 * ROUNDS, dtype=np.uint64)
            self.keys[1::2] |= _U(1)

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        """``pi(pos)`` (int64) for positions in ``[0, n)``."""
        pos = np.asarray(pos)
        if self.table is not None:
            return self.table[pos]
        out = np.empty(pos.size, dtype=np.int64)
        flat = pos.reshape(-1)
        kind = np.int64 if self.tables else _U
        for i in range(0, flat.size, CHUNK):
            out[i : i + CHUNK] = self._walk(flat[i : i + CHUNK].astype(kind))
        return out.reshape(pos.shape)

    def _walk(self, x: np.ndarray) -> np.ndarray:
        """Cycle-walk: apply the network until every value is below ``n``."""
        network = self._tabulated if self.tables else self._network
        x = network(x)
        out = x >= self.n
        if out.any():
            todo = np.flatnonzero(out)
            y = x[todo]
            while todo.size:
                y = network(y)
                ok = y < self.n
                x[todo[ok]] = y[ok]
                todo, y = todo[~ok], y[~ok]
        return x

    def _tabulated(self, x: np.ndarray) -> np.ndarray:
        """The network on the ``height x 2**lo_bits`` grid: ``lo += F(hi) mod 2**lo_bits``,
        ``hi += G(lo) mod height``, alternately (each round a bijection of the grid)."""
        lo_w, height = self.lo_bits, self.height
        hi, lo = x >> lo_w, x & ((1 << lo_w) - 1)
        for r, table in enumerate(self.tables):
            if r % 2 == 0:
                lo += np.take(table, hi)
                lo &= (1 << lo_w) - 1
            else:
                hi += np.take(table, lo)
                hi -= height
                hi += (hi >> 63) & height  # back into [0, height)
        hi <<= lo_w
        hi |= lo
        return hi

    def _network(self, x: np.ndarray) -> np.ndarray:
        lo_w, hi_w = self.lo_bits, self.bits - self.lo_bits
        hi, lo = x >> _U(lo_w), x & _U((1 << lo_w) - 1)
        for r in range(ROUNDS):
            src, dst, width = (hi, lo, lo_w) if r % 2 == 0 else (lo, hi, hi_w)
            t = src ^ self.keys[2 * r]
            t *= self.keys[2 * r + 1]  # odd: multiply-shift, the product's high bits
            t >>= _U(64 - width)
            dst ^= t
        hi <<= _U(lo_w)
        hi |= lo
        return hi


def cell_shuffles(
    ss: np.random.SeedSequence, counts: np.ndarray, cells: np.ndarray | None = None
) -> dict[int, CellShuffle]:
    """The keyed permutation of every cell in ``cells`` (default: all) with 2 or more samples:
    cell ``c``'s from the child ``SeedSequence(ss.entropy, spawn_key=ss.spawn_key + (c,))``.

    Example:
        >>> pis = cell_shuffles(np.random.SeedSequence(0), np.array([1, 5, 3]))
        >>> sorted(pis), pis[1].n
        ([1, 2], 5)
    """
    which = range(counts.size) if cells is None else cells.tolist()
    out = {}
    for c in which:
        n = int(counts[c])
        if n > 1:
            child = np.random.SeedSequence(ss.entropy, spawn_key=(*ss.spawn_key, int(c)))
            out[int(c)] = CellShuffle(n, child)
    return out


class ShuffledOrder:
    """Cells' samples one after another, each cell in its keyed order, read at any positions.

    Stands for the array ``concatenate([base[start_s + pi_s(off_s + arange(n_s))] for each
    segment s])`` without building it: ``order[pos]`` evaluates only the positions asked for
    (NOTE [ Counter-based shuffle ]), ``order[a:b]`` is the same kind of view of a range, and
    :meth:`concat` joins views. A segment without a permutation (``None``) is in ``base`` order.

    Args:
        base: sample indices sorted by cell (``BucketSpec.by_cell``).
        starts: where each segment's samples start in ``base``.
        sizes: each segment's size.
        shuffles: each segment's :class:`CellShuffle`, or ``None`` (unshuffled).
        offsets: where each segment starts in its permutation's order (default 0).

    Example:
        >>> order = ShuffledOrder(np.array([5, 6, 7, 8]), [2, 0], [2, 2], [None, None])
        >>> order[np.array([0, 1, 2, 3])].tolist(), order.size
        ([7, 8, 5, 6], 4)
        >>> order[1:3][np.arange(2)].tolist()
        [8, 5]
    """

    __slots__ = ("base", "ends", "offsets", "shuffles", "sizes", "starts")

    def __init__(
        self,
        base: np.ndarray,
        starts: Any,
        sizes: Any,
        shuffles: Sequence[CellShuffle | None],
        offsets: Any = None,
    ) -> None:
        self.base = base
        self.starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        self.sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        self.offsets = (
            np.zeros(self.sizes.size, dtype=np.int64)
            if offsets is None
            else np.asarray(offsets, dtype=np.int64).reshape(-1)
        )
        self.ends = np.cumsum(self.sizes)
        self.shuffles = list(shuffles)

    @property
    def size(self) -> int:
        """Samples in the order."""
        return int(self.ends[-1]) if self.ends.size else 0

    @staticmethod
    def concat(parts: Sequence[ShuffledOrder], base: np.ndarray) -> ShuffledOrder:
        """The orders ``parts`` one after another (all over ``base``)."""
        return ShuffledOrder(
            base,
            np.concatenate([[0], *[p.starts for p in parts]])[1:],
            np.concatenate([[0], *[p.sizes for p in parts]])[1:],
            [s for p in parts for s in p.shuffles],
            np.concatenate([[0], *[p.offsets for p in parts]])[1:],
        )

    def segment_at(self, first: np.ndarray) -> np.ndarray:
        """Index of the segment that holds each position of ``first``."""
        return np.searchsorted(self.ends, first, side="right")

    def take(self, s: int, p: np.ndarray) -> np.ndarray:
        """Positions ``p`` (in ``[0, sizes[s])``) of segment ``s``:
        ``base[start + pi(off + p)]``."""
        pi, off = self.shuffles[s], int(self.offsets[s])
        if off:
            p = p + off
        return self.base[self.starts[s] + (p if pi is None else pi(p))]

    def __getitem__(self, pos: Any) -> Any:
        if isinstance(pos, slice):
            return self._range(pos)
        pos = np.asarray(pos, dtype=np.int64)
        out = np.empty(pos.size, dtype=self.base.dtype)
        flat = pos.reshape(-1)
        for i in range(0, flat.size, _READ):  # (bounded temporaries)
            out[i : i + _READ] = self._read(flat[i : i + _READ])
        return out.reshape(pos.shape)

    def _read(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty(pos.size, dtype=self.base.dtype)
        if not pos.size:
            return out
        seg = self.segment_at(pos)
        if self.ends.size <= 1 << 16:  # 16-bit keys: numpy's stable sort is a radix sort
            seg = seg.astype(np.uint16)
        by_seg = np.argsort(seg, kind="stable")
        bounds = np.searchsorted(seg[by_seg], np.arange(self.ends.size + 1))
        for s in np.flatnonzero(np.diff(bounds)).tolist():
            which = by_seg[bounds[s] : bounds[s + 1]]
            out[which] = self.take(s, pos[which] - (self.ends[s] - self.sizes[s]))
        return out

    def _range(self, key: slice) -> ShuffledOrder:
        """``order[a:b]`` (step 1) as a view: the segments it overlaps, cut to the range."""
        a, b, step = key.indices(self.size)
        if step != 1:
            raise ValueError(f"a ShuffledOrder is sliced with step 1, got {key!r}")
        b = max(a, b)
        begin = self.ends - self.sizes
        lo = np.maximum(begin, a)
        hi = np.minimum(self.ends, b)
        keep = np.flatnonzero(hi > lo)
        cut = lo[keep] - begin[keep]
        return ShuffledOrder(
            self.base,
            self.starts[keep],
            (hi - lo)[keep],
            [self.shuffles[s] for s in keep.tolist()],
            self.offsets[keep] + cut,
        )
