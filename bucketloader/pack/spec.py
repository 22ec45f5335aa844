"""PackSpec: which rows an epoch packs and the batch shapes they make, fitted once per dataset.

A pack spec is *what shapes the batches*: the row lengths, rows per batch, the overflow and
last-batch policies, and the packing itself (which sizes share a row; NOTE [ Packing a length
histogram ] in :mod:`bucketloader.pack._bins`). *How an epoch is iterated* (shuffle, seed, ranks,
resume) is the sampler's: :class:`~bucketloader.pack.PackSampler` takes either lengths and these
options, or a ready spec. :class:`PackTable` is the small promise the collator keeps.

NOTE [ Row lengths ]
``row_length=L`` packs every document into rows of ``L`` tokens: one batch shape ``(B, L)``.
``row_length=(L_1, ..., L_k)`` is *bucketed packing*: a document's row length is the smallest
``L_i`` that holds it (the boundary convention of :mod:`bucketloader.boundaries`), each ``L_i``
row starts from such a document and is completed by shorter ones, and batches never mix row
lengths: shapes ``(B_i, L_i)``. Use it for a few long documents among many short ones
(``row_length=(1024, 8192)``) instead of cutting them. Batch sizes are ``batch_size`` rows, or
``max_tokens // L_i``.

NOTE [ One pass over the lengths ]
A plan must not cost more than the best-fit decreasing a user could write, whose whole cost from
1M documents on is one ``np.bincount`` (NOTE [ Planning at the speed of best-fit decreasing ] in
:mod:`bucketloader.pack._bins`). So a numpy integer array is not validated first: it is read
once, in chunks, each chunk checked, counted and copied into the spec's own read-only array of
the narrowest unsigned type that holds the longest row length (``uint16`` up to 65,535) while
it is in cache. The spec never holds the caller's array, so a later edit of it changes nothing;
``lengths`` and ``sizes`` read as ``int64`` (widened when first asked). No table is ever sized
by a length: a negative length, or one above the longest row length, takes the slow path, which
converts the lengths with ``as_lengths`` (the library's error for a negative length) or runs
the overflow policy on an ``int64`` copy (the declared lengths). Other input (lists, tensors,
floats) is checked and converted by ``as_lengths`` first (integer types kept), then read the
same way.

- A contiguous, writable ``int64`` array of ``_SCATTER_FROM`` documents or more (the common
  case: what numpy makes) is counted by ``torch``'s ``scatter_add_`` of ones into an
  ``int32`` table of ``limit + 1`` counts, ``_SCATTER_CHUNK`` documents a call (torch's
  ``GRAIN_SIZE``: no op of the pass runs on torch's intra-op threads). ``scatter_add_``
  checks every index against the table and raises before writing out of it, so the check
  costs no pass of its own, and it counts faster than ``np.bincount`` (0.54 ns a document
  from cache against 0.9; 0.65 into an ``int64`` table). Each chunk's copy follows its count
  (from cache), or, above ``_STREAM_FROM`` bytes of lengths, goes first: numpy's copy
  streams the chunk from memory faster than the count's scalar loop does. When a chunk raises,
  its own min and max tell a bad length (the slow path) from anything else (a torch mode that
  refuses the op), which sends the array to the numpy pass below.
- Any other integer array (other types, byte orders, strides, read-only, small): each chunk of
  ``_CHUNK``'s max first (above the longest row length: the slow path, before ``bincount``
  could size a table by it; a signed array is read as its unsigned type there, so a negative
  length counts as one above the signed type's max, which bounds the check too; an unsigned
  type that cannot exceed the longest row length, ``uint8``, or ``uint16`` when the rows are
  at least 65,535 long, needs no max), its copy and its ``np.bincount`` (of the chunk if it
  is ``int64``, else of the copy).

Measured at 1M GSM8K-like ``int64`` lengths (session 6, side by side): ``np.bincount`` alone
0.94-1.02 ms; the max + copy + ``bincount`` pass of session 5, 1.37-1.69 ms (the max reads the
lengths from memory, which ``bincount`` overlaps with its slower scalar loop); the scatter pass
0.89-1.08 ms (0.97-1.11 into an ``int64`` table; 1.04-1.22 with the copy first). At 10M:
14.1-15.4 ms against 20-21 (``bincount``) and 19.5-21.3 (session 5; the count first: 18.9-24).
In a race with the baseline the copy's 2 MB of writes cost more (their pages out of cache: 1.27
against 1.08 ms when the output's memory is reused). Tried and dropped: ``torch.bincount`` of
the narrow copy (its own min and max are vectorised, but the check of the ``int64`` chunk still
needs the max pass: 1.15 ms); ``np.minimum`` into the narrow copy (saturating, checked by the
count of ``limit + 1``: slower than the max and the copy); ``np.add.at`` (bounds-checked, 1.3
ms); one scatter and one copy of the whole array (no faster); the ones and the table made by
torch (``torch.ones`` of more than ``GRAIN_SIZE`` elements fills on torch's threads: 3x the
caller's CPU time under load; both are numpy's, shared with torch).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from bucketloader._types import LengthsLike
from bucketloader._validation import (
    MAX_LENGTH,
    MAX_REPLICAS,
    as_lengths,
    check_choice,
    check_int,
    checks_options,
)
from bucketloader.pack._bins import (
    MAX_ROW_LENGTHS,
    SEARCH,
    Patterns,
    lower_bound,
    solve,
    solver_version,
)
from bucketloader.pack._bins import SOLVER_VERSION as SOLVER_VERSION  # (pack_rows' version)
from bucketloader.pack._work import even_rows, lift_rows
from bucketloader.plan.shapes import row_batch_sizes

__all__ = ["PACK_LAST_BATCH", "PACK_OVERFLOW", "PackSpec", "PackTable", "pack_rows"]

#: What happens to the rows of a row length's last, partial global step (NOTE [ Packed epochs ] in
#: :mod:`bucketloader.pack.epoch`). ``"keep"`` (a smaller batch) would be a second shape, so
#: packing does not offer it.
PACK_LAST_BATCH = ("drop", "fill", "pad")
#: :meth:`PackSpec.balanced_layout`: slots, row offsets, row kinds, row works, lifted rows.
_Balanced = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: What happens to a document longer than the longest row length (``"split"`` on streams; for
#: map-style data split with :class:`~bucketloader.pack.SplitDataset` first).
PACK_OVERFLOW = ("drop", "error", "truncate")


def _is_int(value: Any) -> bool:
    """An int, a numpy int (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class PackTable:
    """The shapes a packed epoch promises, and what the collator needs to meet them.

    Small and picklable (it goes to every DataLoader worker). Batch ``i``'s shape is
    ``(batch_sizes[i], row_lengths[i])``; a batch's row length is the smallest one that holds its
    longest document; its fixed-size ``cu_seqlens`` has ``max_documents[i] + batch_sizes[i] + 1``
    entries (every document plus one padding run per row; NOTE [ Packed batch layout ] in
    :mod:`bucketloader.pack.collator`).

    Attributes:
        row_lengths: the planned row lengths, increasing.
        batch_sizes: rows per batch, per row length.
        max_documents: the most documents one batch of each row length can hold (from the
            shortest lengths of the dataset, or the stream's bound).
        truncate: cut documents longer than the longest row length (``overflow="truncate"``).
        longest: the longest document (tokens in its row) of each row length, when the plan
            knows it (a sampler's table); ``None`` for streams. Checks an int ``max_seqlen``
            of the collator up front.

    Example:
        >>> table = PackTable(row_lengths=(8, 32), batch_sizes=(4, 1), max_documents=(16, 16))
        >>> table.shapes, table.target(9), table.num_segments(0)
        (((4, 8), (1, 32)), 1, 20)
    """

    row_lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    max_documents: tuple[int, ...]
    truncate: bool = False
    longest: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """Checked once (a table built by hand, as in the docs, reaches the collator): row
        lengths strictly increasing ints >= 1, and one batch size and document bound >= 1 per
        row length. Before, ``row_lengths=(0,)`` or a batch size short were accepted and failed
        at the first batch with a ``zip()`` or index error."""
        rows = self.row_lengths
        if (
            not isinstance(rows, tuple)
            or not rows
            or any(not _is_int(n) or n < 1 for n in rows)
            or any(a >= b for a, b in itertools.pairwise(rows))
        ):
            raise ValueError(
                "PackTable's row_lengths must be a non-empty tuple of strictly increasing ints "
                f">= 1, got row_lengths={rows!r}; build the table with sampler.table"
            )
        for name in ("batch_sizes", "max_documents", "longest"):
            value = getattr(self, name)
            if value is None and name == "longest":
                continue
            if (
                not isinstance(value, tuple)
                or len(value) != len(rows)
                or any(not _is_int(n) for n in value)
                or any(n < (0 if name == "longest" else 1) for n in value)
            ):
                least = "0" if name == "longest" else "1"
                raise ValueError(
                    f"PackTable's {name} must be a tuple of {len(rows)} int(s) >= {least}, one "
                    f"per row length {rows}, got {name}={value!r}; build the table with "
                    "sampler.table"
                )

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """``(B_i, L_i)`` per row length, in row-length order."""
        return tuple(zip(self.batch_sizes, self.row_lengths, strict=True))

    @property
    def limit(self) -> int:
        """The longest row length."""
        return self.row_lengths[-1]

    def target(self, longest: int) -> int:
        """Index of the shape of a batch whose longest document has ``longest`` tokens."""
        if longest > self.limit:
            if self.truncate:
                return len(self.row_lengths) - 1
            raise ValueError(
                f"a document of {longest} tokens is longer than the longest planned row length "
                f"{self.limit}; the samples disagree with the lengths they were planned on (a "
                "sampler's lengths or a stream's length_fn): give each document's true token count"
            )
        for i, n in enumerate(self.row_lengths):
            if longest <= n:
                return i
        raise AssertionError("unreachable")  # pragma: no cover

    def num_segments(self, index: int) -> int:
        """Segments (documents + padding runs) ``cu_seqlens`` holds for shape ``index``."""
        return self.max_documents[index] + self.batch_sizes[index]


@dataclass(frozen=True, eq=False)
class PackSpec:
    """The shape side of a packing sampler: the rows of an epoch and their batch shapes.

    Build one with :meth:`build`; :func:`~bucketloader.pack.plan_pack_epoch` deals documents into
    its rows and rows into batches for one epoch and rank.

    Attributes:
        row_lengths: the planned row lengths (NOTE [ Row lengths ]).
        batch_sizes: rows per batch, per row length.
        overflow: ``"error"``, ``"drop"`` or ``"truncate"``.
        last_batch: ``"pad"``, ``"fill"`` or ``"drop"``.
        patterns: the packing (which sizes share a row, how many such rows).
        search: when the packing searched for tighter rows than best-fit decreasing
            (:meth:`build`'s option).

    Example:
        >>> spec = PackSpec.build([5, 3, 2, 5, 3, 2], row_length=8, batch_size=2)
        >>> spec.num_rows, spec.lower_bound, spec.table().shapes
        (3, 3, ((2, 8),))
    """

    #: The spec's own read-only copies (NOTE [ One pass over the lengths ]): ``_sizes`` in the
    #: narrowest unsigned type that holds the longest row length, ``_lengths`` the same array
    #: unless a document was cut or dropped (then ``int64``).
    _lengths: np.ndarray
    _sizes: np.ndarray
    row_lengths: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    overflow: str
    last_batch: str
    patterns: Patterns
    search: str = "auto"

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """The declared lengths ``(N,)`` (``int64``, read-only)."""
        if self._lengths is self._sizes:
            return self.sizes
        return _widened(self._lengths)

    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """Tokens each document takes in a row ``(N,)`` (``int64``, read-only): its length,
        cut to the longest row length under ``overflow="truncate"``, 0 when dropped by
        ``overflow="drop"``."""
        return _widened(self._sizes)

    @property
    def num_documents(self) -> int:
        """``N``, the documents declared (kept or not)."""
        return int(self._sizes.size)

    # -- the packing ----------------------------------------------------------------------
    @functools.cached_property
    def kept(self) -> np.ndarray:
        """Indices of the documents an epoch packs (all but those dropped by overflow)."""
        return np.flatnonzero(self._sizes)

    @property
    def dropped(self) -> np.ndarray:
        """Indices of the documents ``overflow="drop"`` leaves out."""
        return np.flatnonzero(self._sizes == 0)

    @functools.cached_property
    def tokens(self) -> int:
        """Tokens packed per epoch (after the overflow policy)."""
        return int(self._sizes.sum(dtype=np.int64))

    @property
    def num_rows(self) -> int:
        """Rows per epoch (before the last-batch policy)."""
        return self.patterns.num_rows

    @functools.cached_property
    def rows_per_length(self) -> np.ndarray:
        """Rows of each row length per epoch."""
        p = self.patterns
        return np.bincount(p.kind, weights=p.reps, minlength=len(self.row_lengths)).astype(np.int64)

    @functools.cached_property
    def lower_bound(self) -> int | None:
        """``ceil(tokens / L)`` rows, the bound no packing beats (one row length only)."""
        if len(self.row_lengths) != 1:
            return None
        return -(-self.tokens // self.row_lengths[0])

    @functools.cached_property
    def lower_bound_l2(self) -> int | None:
        """Martello & Toth's bound, which also counts documents too long to share a row."""
        if len(self.row_lengths) != 1:
            return None
        vals, counts = self._histogram
        return lower_bound(vals, counts, self.row_lengths[0])[1]

    @property
    def row_padding(self) -> float:
        """Padding of the rows (pad tokens / real tokens), before rows are grouped into batches."""
        cap = int((self.rows_per_length * np.asarray(self.row_lengths)).sum())
        return (cap - self.tokens) / max(self.tokens, 1)

    @functools.cached_property
    def _histogram(self) -> tuple[np.ndarray, np.ndarray]:
        limit = self.row_lengths[-1]
        return _histogram_of(np.bincount(self._sizes, minlength=limit + 1), limit)

    # -- the row layout of an epoch, before documents are dealt -----------------------------
    @functools.cached_property
    def by_size(self) -> np.ndarray:
        """Kept documents sorted by size, largest first, index order within a size (the pools
        that an epoch shuffles and deals into the rows' slots)."""
        # dropped (size 0) sort last; numpy's stable sort is a radix sort on 16-bit keys
        key = np.subtract(self.row_lengths[-1], self._sizes, dtype=self._sizes.dtype)
        return np.argsort(key, kind="stable")[: self.kept.size]

    @functools.cached_property
    def pool_starts(self) -> np.ndarray:
        """``by_size[pool_starts[u]:pool_starts[u + 1]]`` are the documents of size index ``u``."""
        _, counts = self._histogram
        return np.concatenate([[0], np.cumsum(counts)])

    @functools.cached_property
    def layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slots, row_offsets, row_kind)``: row ``r``'s documents are
        ``by_size[shuffled][slots[row_offsets[r]:row_offsets[r + 1]]]``, positions in the
        shuffled pools; ``row_kind[r]`` is its row-length index. Fixed per spec."""
        p = self.patterns
        per_row = p.per_row
        # Pattern items use their size's pool in pattern order: an item's documents start where
        # the earlier patterns' use of that size ends (an exclusive cumsum per size).
        entry_pattern = np.repeat(np.arange(p.reps.size), np.diff(p.offsets))
        use = p.reps[entry_pattern] * p.mult
        order = np.lexsort((entry_pattern, p.items))
        before = np.cumsum(use[order]) - use[order]
        new_size = np.concatenate([[True], p.items[order][1:] != p.items[order][:-1]])
        before -= np.maximum.accumulate(np.where(new_size, before, 0))
        ptr = np.empty_like(use)
        ptr[order] = before
        ptr += self.pool_starts[p.items]
        slots = np.empty(self.kept.size, dtype=np.int64)
        at = 0
        bounds = zip(p.offsets[:-1].tolist(), p.offsets[1:].tolist(), p.reps.tolist(), strict=True)
        for q, (lo, hi, reps) in enumerate(bounds):
            # row j of the pattern takes documents ptr + j * k + c (c < k) of each size's pool
            k = p.mult[lo:hi]
            kk = np.repeat(k, k)
            first = np.repeat(ptr[lo:hi], k) + np.arange(kk.size) - np.repeat(np.cumsum(k) - k, k)
            t = int(per_row[q])
            block = slots[at : at + reps * t].reshape(reps, t)
            np.add(first[None, :], np.arange(reps)[:, None] * kk[None, :], out=block)
            at += reps * t
        row_docs = np.repeat(per_row, p.reps)
        row_offsets = np.concatenate([[0], np.cumsum(row_docs)])
        return slots, row_offsets, np.repeat(p.kind, p.reps)

    @functools.cached_property
    def row_work(self) -> np.ndarray:
        """Attention work of every row of :attr:`layout`: the sum of its documents' squared
        sizes (fixed per spec: documents dealt into a slot all have the slot's size)."""
        return self._work(self.layout)

    def _work(self, layout: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        slots, row_offsets, _ = layout
        sq = self._sizes[self.by_size[slots]].astype(np.int64) ** 2
        return np.add.reduceat(sq, row_offsets[:-1]) if sq.size else sq

    def balanced_layout(self, num_replicas: int) -> _Balanced:
        """The rows ``balance=True`` deals over ``num_replicas`` ranks: :attr:`layout` with
        documents exchanged between rows of the same row length so that every row's work is
        near the mean, and the heaviest steps' rows lifted to their step's heaviest (NOTE
        [ Work-aware rows ] in :mod:`bucketloader.pack._work`). The same rows (so the same
        padding and steps), each within its length, at most as many documents per row as
        :attr:`max_documents` promises; computed once per spec and rank count.

        Returns:
            ``(slots, row_offsets, row_kind, work, lifted)``: :attr:`layout`'s three arrays,
            every row's work and whether it was lifted (those rows fill full steps).

        Example:
            >>> spec = PackSpec.build([4, 4, 1, 1, 1, 1, 1, 1, 1, 1], row_length=8, batch_size=1)
            >>> spec.row_work.tolist(), spec.balanced_layout(2)[3].tolist()
            ([32, 8], [20, 20])
        """
        cache = self._balanced
        if num_replicas not in cache:
            cache[num_replicas] = self._balance_rows(num_replicas)
        return cache[num_replicas]

    @functools.cached_property
    def _balanced(self) -> dict[int, _Balanced]:
        return {}

    @functools.cached_property
    def _even_rows(self) -> list[list[int]]:
        """Every row's document sizes after :func:`~bucketloader.pack._work.even_rows` (the
        part of :meth:`balanced_layout` that does not depend on the ranks)."""
        slots, row_offsets, row_kind = self.layout
        sizes = self._sizes[self.by_size[slots]].tolist()
        rows = [sizes[a:b] for a, b in itertools.pairwise(row_offsets.tolist())]
        for k, length in enumerate(self.row_lengths):
            mine = np.flatnonzero(row_kind == k).tolist()
            evened = even_rows([rows[i] for i in mine], length, *self._work_limits(k))
            for i, row in zip(mine, evened, strict=True):
                rows[i] = row
        return rows

    def _work_limits(self, k: int) -> tuple[int, int]:
        """``(max_documents, keep_above)`` per row of row length ``k``: the collator's bound,
        and a long row's own document (NOTE [ Row lengths ]) stays."""
        length = self.row_lengths[k]
        return self.max_documents[k] // self.batch_sizes[k], self.row_lengths[
            k - 1
        ] if k else length

    def _balance_rows(self, num_replicas: int) -> _Balanced:
        slots, _, row_kind = self.layout
        rows = list(self._even_rows)
        lifted = np.zeros(len(rows), dtype=bool)
        full, _ = self.steps(num_replicas)
        for k, length in enumerate(self.row_lengths):
            mine = np.flatnonzero(row_kind == k)
            step = num_replicas * self.batch_sizes[k]
            new, up = lift_rows(
                [rows[i] for i in mine.tolist()],
                length,
                *self._work_limits(k),
                step_rows=step,
                per_rank=self.batch_sizes[k],
                full_rows=int(full[k]) * step,
            )
            for i, row in zip(mine.tolist(), new, strict=True):
                rows[i] = row
            lifted[mine[up]] = True
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=slots.size)
        vals, _ = self._histogram  # distinct sizes, largest first: pool u holds size vals[u]
        pool = np.searchsorted(-vals, -flat)
        new_slots = np.empty_like(slots)
        new_slots[np.argsort(pool, kind="stable")] = np.arange(flat.size)  # pools in order
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        layout = (new_slots, offsets, row_kind)
        return new_slots, offsets, row_kind, self._work(layout), lifted

    @functools.cached_property
    def max_documents(self) -> tuple[int, ...]:
        """The most documents a batch of each row length can hold: ``B_i`` times the most any of
        its rows holds (rows are fixed per spec, repeated rows included; a bound for
        ``cu_seqlens``, the same every epoch)."""
        p = self.patterns
        per_row = p.per_row
        out = []
        for i, b in enumerate(self.batch_sizes):
            mine = per_row[p.kind == i]
            out.append(b * max(1, int(mine.max()) if mine.size else 1))
        return tuple(out)

    def steps(self, num_replicas: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Per row length: ``(full global steps, rows left q)`` for ``num_replicas`` ranks."""
        per_step = np.asarray(self.batch_sizes, dtype=np.int64) * num_replicas
        return self.rows_per_length // per_step, self.rows_per_length % per_step

    def num_steps(self, num_replicas: int = 1) -> np.ndarray:
        """Global steps of each row length per epoch; their sum is every rank's ``len``."""
        full, q = self.steps(num_replicas)
        return full + ((q > 0) & (self.last_batch != "drop"))

    def table(self, num_replicas: int = 1) -> PackTable:
        """The :class:`PackTable` this spec promises over ``num_replicas`` ranks (a row length
        that makes no batch, ``last_batch="drop"`` with fewer rows than one step, is left out).
        """
        num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
        steps = self.num_steps(num_replicas)
        keep = [i for i in range(len(self.row_lengths)) if steps[i] > 0]
        return PackTable(
            row_lengths=tuple(self.row_lengths[i] for i in keep),
            batch_sizes=tuple(self.batch_sizes[i] for i in keep),
            max_documents=tuple(self.max_documents[i] for i in keep),
            truncate=self.overflow == "truncate",
            longest=tuple(self.longest[i] for i in keep),
        )

    @functools.cached_property
    def longest(self) -> tuple[int, ...]:
        """The longest document of each row length (its largest kept size in
        ``(L_{i-1}, L_i]``, NOTE [ Row lengths ]; 0 for a row length no document needs)."""
        vals, _ = self._histogram
        out, lo = [], 0
        for n in self.row_lengths:
            mine = vals[(vals > lo) & (vals <= n)]
            out.append(int(mine.max()) if mine.size else 0)
            lo = n
        return tuple(out)

    @functools.cached_property
    def digest(self) -> str:
        """Short SHA-256 of everything that shapes an epoch (for strict state loading)."""
        h = hashlib.sha256()
        for a in range(0, self._sizes.size, _CHUNK):  # (the int64 bytes, a chunk at a time)
            h.update(self._sizes[a : a + _CHUNK].astype(np.int64).tobytes())
        h.update(repr((self.row_lengths, self.batch_sizes, self.last_batch)).encode())
        p = self.patterns
        version = solver_version(
            self.row_lengths,
            p.searched,
            p.budgeted,
            p.tripled,
            p.promised,
            p.capped,
            p.turned,
            p.filled,
            p.coarse,
        )
        h.update(f"solver={version}".encode())
        if self.search != "auto":  # (so the default's digests are those of earlier versions)
            h.update(f"search={self.search}".encode())
        return h.hexdigest()[:16]

    # -- construction -----------------------------------------------------------------------
    @classmethod
    @checks_options
    def build(
        cls,
        lengths: LengthsLike,
        *,
        row_length: int | Sequence[int],
        batch_size: int | None = None,
        max_tokens: int | None = None,
        overflow: str = "error",
        last_batch: str = "pad",
        search: str = "auto",
    ) -> PackSpec:
        """Pack ``lengths`` into rows and size the batches.

        Args:
            lengths: tokens per document ``(N,)`` (each >= 1).
            row_length: tokens per row ``L``, or several increasing row lengths (NOTE [ Row
                lengths ]).
            batch_size: rows per batch, the same for every row length; or
            max_tokens: rows per batch ``max_tokens // L_i``.
            overflow: documents longer than the longest row length: ``"error"`` (default),
                ``"drop"`` (left out of every epoch, see :attr:`dropped`) or ``"truncate"``
                (cut to the longest row length, by the collator).
            last_batch: the rows of a row length's last global step, fewer than
                ``num_replicas * B``: ``"pad"`` (default: the collator adds all-padding rows),
                ``"fill"`` (topped up with repeated rows of that row length; a longer row
                length with fewer rows than one step, with shorter rows drawn at random: NOTE
                [ Filling a small row length ] in :mod:`bucketloader.pack.epoch`) or ``"drop"``.
            search: planning time against tightness (NOTE [ Planning at the speed of best-fit
                decreasing ] in :mod:`bucketloader.pack._bins`). ``"auto"`` (default): best-fit
                decreasing, and a search for tighter rows where BFD pads more than 0.5
                percentage points above the bound (``ceil(tokens / L)`` rows; with several row
                lengths the row tokens that the long documents need, NOTE [ Lower bounds ]),
                and from 100k documents per distinct length: BFD's rows with the most room
                repacked (NOTE [ Repacking the rows with room ]), a Minimum-Bin-Slack search
                over every document only where that falls short, once per dataset; where a
                lower bound proves the 0.5-point promise out of reach, the repack stops at a
                counted cap (BFD's rows or fewer). ``"never"``: best-fit
                decreasing only, in about the time of a careful BFD (up to 1.2% more rows where
                it misses the bound); ``"always"``: the search wherever BFD is more than 0.1% of
                its rows above the bound, on towards the bound (also from the default's
                first rounds: never looser than ``"auto"``, up to 0.1% of the bound).

        Example:
            >>> lengths = [10, 2, 3, 4, 3, 10, 10, 7, 2, 2, 5, 6]  # 64 tokens: 4 rows of 16
            >>> [
            ...     PackSpec.build(lengths, row_length=16, batch_size=2, search=s).num_rows
            ...     for s in ("never", "auto")
            ... ]
            [5, 4]
        """
        if overflow == "split":  # (PackIterable's; a plan of lengths cannot cut documents)
            raise ValueError(
                "overflow must be one of 'drop', 'error', 'truncate', got overflow='split': a "
                "plan of lengths cannot cut its documents into pieces; cut them first with "
                "bucketloader.pack.SplitDataset(dataset, lengths, max_length=row_length) and "
                "plan its lengths (a PackIterable stream takes overflow='split')"
            )
        overflow = check_choice("overflow", overflow, PACK_OVERFLOW)
        search = check_choice("search", search, SEARCH)
        last_batch = check_choice("last_batch", last_batch, PACK_LAST_BATCH)
        rows = _row_lengths(row_length)
        bsz = row_batch_sizes(batch_size, max_tokens, rows)
        limit = rows[-1]
        # NOTE [ One pass over the lengths ]: a numpy integer array is read as it is (the
        # pass checks it), anything else is checked and converted first
        arr = lengths if _plain(lengths) else as_lengths(lengths, narrow=True)
        sparse = arr.size * _SORT_BELOW <= limit  # (few documents for the table of counts)
        counted = _sorted_count(arr, limit) if sparse else _count(arr, limit)
        if counted is None:  # a length is negative or longer than the longest row length
            # (a plain array is checked only now, its error raised; a copy in int64, the
            # declared lengths, keeps the caller's array the caller's)
            declared = as_lengths(lengths).copy() if arr is lengths else arr.astype(np.int64)
            if (declared == 0).any():
                _refuse_empty(declared)
            sizes = _cut(declared, rows, overflow)
            histogram = _histogram_of(np.bincount(sizes, minlength=limit + 1), limit)
            declared.setflags(write=False)
        else:
            counts, sizes = counted
            declared = sizes
            if isinstance(counts, tuple):  # (already the histogram, size 0 included)
                histogram = counts
                if histogram[0].size and histogram[0][-1] == 0:
                    _refuse_empty(sizes)
            else:
                if counts[0]:
                    _refuse_empty(sizes)
                histogram = _histogram_of(counts, limit)
        spec = cls(
            _lengths=declared,
            _sizes=sizes,
            row_lengths=rows,
            batch_sizes=bsz,
            overflow=overflow,
            last_batch=last_batch,
            patterns=solve(*histogram, rows, search),
            search=search,
        )
        spec.__dict__["_histogram"] = histogram  # the cached property's value: no second pass
        return spec

    def __repr__(self) -> str:
        bound = "" if self.lower_bound is None else f" (bound {self.lower_bound})"
        return (
            f"PackSpec({self.kept.size} documents, {self.tokens} tokens -> {self.num_rows} "
            f"rows{bound}, shapes={list(self.table().shapes)}, row_padding={self.row_padding:.2%}, "
            f"last_batch={self.last_batch!r})"
        )


#: :func:`_sorted_count` counts the documents when the table of counts would hold at least
#: this many entries per document.
_SORT_BELOW = 4
#: Documents per chunk of :func:`_count`: each chunk's check, count and copy read it from cache.
_CHUNK = 1 << 16
#: From this many documents a plain ``int64`` array is counted by :func:`_scattered` (below, one
#: ``np.bincount`` per chunk costs less than torch's per-call dispatch).
_SCATTER_FROM = 1 << 14
#: Documents per chunk of :func:`_scattered`: torch's ``GRAIN_SIZE``, so that no op of the pass
#: runs on torch's intra-op threads (their CPU time would be hidden from the caller's thread).
_SCATTER_CHUNK = 1 << 15
#: Above this many bytes of lengths (more than the last-level cache is likely to hold),
#: :func:`_scattered` copies each chunk before it counts it: numpy's copy streams it from
#: memory faster than the count's scalar loop does (measured: 1.3x faster at 10M documents,
#: 1.1-1.2x slower at 1M, where the count first reads the lengths from cache).
_STREAM_FROM = 1 << 24


def _plain(lengths: Any) -> TypeGuard[np.ndarray]:
    """A non-empty 1-D numpy integer array (no subclass, not bool): read as it is."""
    return (
        type(lengths) is np.ndarray
        and lengths.dtype.kind in "iu"
        and lengths.ndim == 1
        and lengths.size > 0
    )


def _narrow(limit: int) -> type[np.unsignedinteger]:
    """The narrowest unsigned type that holds every size up to ``limit`` (at most 2**24)."""
    return np.uint16 if limit < 1 << 16 else np.uint32


def _count(arr: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(documents of each length 0..limit, the lengths as a read-only narrow copy)``, or
    ``None`` when a length is negative or above ``limit`` (NOTE [ One pass over the lengths ]).
    ``arr``: a 1-D integer array."""
    if arr.dtype == np.intp:
        flags = arr.flags  # (torch warns about a read-only array)
        plain = flags.c_contiguous and flags.aligned and flags.writeable
        if arr.size >= _SCATTER_FROM and plain and arr.strides[0] == arr.itemsize:
            try:
                return _scattered(arr, limit)
            except Exception:  # a torch mode that refuses the op (or a chunk torch refused
                pass  # with no bad length in it): the numpy pass below decides
        # counted as it is: np.bincount refuses a negative length
        seen, direct, check, bound = arr, True, True, limit
    else:  # counted from the narrow copy; the check reads a signed type as the unsigned
        # one (a negative length reads as one above the signed type's max), none for an
        # unsigned type that cannot exceed limit
        bits = 8 * arr.dtype.itemsize
        signed = arr.dtype.kind == "i"  # (the unsigned type in the same byte order)
        seen, direct = (arr.view(arr.dtype.str.replace("i", "u")) if signed else arr), False
        check = signed or (1 << bits) - 1 > limit
        # a negative length reads above the signed type's max, so that max bounds the check
        bound = min(limit, (1 << bits - 1) - 1) if signed else limit
    out = np.empty(arr.size, dtype=_narrow(limit))
    counts = np.zeros(limit + 1, dtype=np.intp)
    for a in range(0, arr.size, _CHUNK):
        b = a + _CHUNK
        if check and seen[a:b].max() > bound:
            return None
        out[a:b] = arr[a:b]
        try:
            part = np.bincount(arr[a:b] if direct else out[a:b], minlength=limit + 1)
        except ValueError:  # (a negative length)
            return None
        counts += part
    out.setflags(write=False)
    return counts, out


def _sorted_count(
    arr: np.ndarray, limit: int
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray] | None:
    """:func:`_count` of few documents for the table of ``limit + 1`` counts (at most one per
    ``_SORT_BELOW`` entries: sorting them costs less than the table, e.g. 15 us against 0.9 ms
    for 1,000 documents at 131,072), returning the histogram itself: the distinct sizes, largest
    first, size 0 included, and the documents of each (:func:`_histogram_of`'s form)."""
    if int(arr.min()) < 0 or int(arr.max()) > limit:
        return None
    out = arr.astype(_narrow(limit))
    out.setflags(write=False)
    vals, counts = np.unique(out, return_counts=True)
    return (vals[::-1].astype(np.int64), counts[::-1].astype(np.intp)), out


def _scattered(arr: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_count` of a contiguous, writable ``int64`` array, by ``torch``'s
    ``scatter_add_`` into a table of ``limit + 1`` counts: it checks every index against the
    table, so a negative length or one above ``limit`` raises (``None``) before any table is
    sized by it, and it needs no max pass (NOTE [ One pass over the lengths ]): ``None`` when
    the chunk that raised holds a bad length; any other exception (a torch mode refusing the
    op) sends :func:`_count` to its numpy pass."""
    import torch

    # (int32 counts: a fifth faster; numpy's table and ones: no fill on torch's threads)
    counts = np.zeros(limit + 1, dtype=np.int32 if arr.size < 1 << 31 else np.int64)
    table, ones = torch.from_numpy(counts), _ones(_SCATTER_CHUNK, counts.dtype)
    out = np.empty(arr.size, dtype=_narrow(limit))
    step = _SCATTER_CHUNK
    stream = arr.nbytes > _STREAM_FROM  # (then the copy first: it streams the chunk to cache)
    chunks = torch.from_numpy(arr).split(step)
    for a, chunk in zip(range(0, arr.size, step), chunks, strict=True):
        if stream:
            out[a : a + step] = arr[a : a + step]
        try:
            table.scatter_add_(0, chunk, ones)  # (raises on an index out of the table)
        except RuntimeError:  # a bad length in this chunk: None (no second pass over the
            part = arr[a : a + step]  # chunks before it); else a torch mode refused the op
            if part.min() < 0 or part.max() > limit:
                return None
            raise
        if not stream:
            out[a : a + step] = arr[a : a + step]  # (from cache)
    out.setflags(write=False)
    return counts.astype(np.intp), out


@functools.cache
def _ones(n: int, dtype: np.dtype) -> Any:
    """A ``torch`` tensor of ``n`` ones (read only, by :func:`_scattered`)."""
    import torch

    return torch.from_numpy(np.ones(n, dtype=dtype))


def _histogram_of(counts: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct sizes, largest first, and the documents of each, from ``counts`` (the
    documents of each size ``0..limit``; size 0, a dropped document, left out)."""
    down = counts[:0:-1]  # documents of each size, largest first
    at = down.nonzero()[0]
    return limit - at, down[at]


def _refuse_empty(lengths: np.ndarray) -> None:
    i = int(np.argmax(lengths == 0))
    raise ValueError(
        f"lengths must be >= 1 to pack, got 0 at index {i}; an empty document holds no "
        "tokens: filter empty samples out of the dataset (or count special tokens in the "
        "lengths)"
    )


def _cut(declared: np.ndarray, rows: tuple[int, ...], overflow: str) -> np.ndarray:
    """The sizes when some documents are longer than the longest row length: ``overflow``
    applied (``"error"`` raises), as a read-only narrow array."""
    limit = rows[-1]
    over = declared > limit
    i = int(np.argmax(over))
    if overflow == "error":
        longest = int(declared.max())
        longer = (  # (not past the longest row a plan may have: that is refused; the row
            # lengths given are kept: (200, 300) said row_length=(300, 301), losing the 200)
            f"add a longer row length (row_length={(*rows, longest)}), "
            if longest <= MAX_ROW_LENGTH
            else ""
        )
        count = int(over.sum())
        raise ValueError(
            f"{count} {'documents are' if count > 1 else 'document is'} longer than the longest "
            f"row length {limit} (the first: index {i}, {int(declared[i])} tokens); pass "
            f"overflow='drop' or 'truncate', {longer}or split them first "
            "(bucketloader.pack.SplitDataset)"
        )
    sizes = np.where(over, 0 if overflow == "drop" else limit, declared).astype(_narrow(limit))
    if not sizes.any():
        raise ValueError(
            f"overflow='drop' drops all {sizes.size} documents (all are longer than "
            f"{limit}); raise row_length"
        )
    sizes.setflags(write=False)
    return sizes


def _widened(arr: np.ndarray) -> np.ndarray:
    """``arr`` as a read-only ``int64`` array (a copy unless it is one)."""
    out = arr.astype(np.int64, copy=False)
    out.setflags(write=False)
    return out


def pack_rows(sizes: list[int], row_length: int, max_per_row: int) -> list[list[int]]:
    """Documents of ``sizes`` tokens packed offline into rows of ``row_length`` (the planner's
    solver, as :class:`PackSpec` packs an epoch): the document indices of each row, at most
    ``max_per_row`` per row, a size's documents taken in index order.

    Example:
        >>> pack_rows([5, 3, 2, 6], 8, max_per_row=8)  # 5 + 3 and 6 + 2: two full rows
        [[0, 1], [3, 2]]
    """
    if not sizes:
        return []
    arr = np.asarray(sizes, dtype=np.int64)
    counts = np.bincount(arr)
    vals = np.flatnonzero(counts)[::-1]
    pools: dict[int, list[int]] = {int(v): [] for v in vals}
    for i, n in enumerate(sizes):
        pools[n].append(i)
    pat = solve(vals, counts[vals], (row_length,))
    cap = max(1, max_per_row)
    out: list[list[int]] = []
    for p in range(pat.reps.size):
        lo, hi = int(pat.offsets[p]), int(pat.offsets[p + 1])
        for _ in range(int(pat.reps[p])):
            row = [
                pools[int(pat.sizes[u])].pop(0)
                for u, k in zip(pat.items[lo:hi].tolist(), pat.mult[lo:hi].tolist(), strict=True)
                for _ in range(k)
            ]
            out.extend(row[a : a + cap] for a in range(0, len(row), cap))
    return out


#: Longest packed row (plans and streams): the planner keeps per-length tables of ``row_length + 1``
#: entries (histogram, lower bound), so 2**24 bounds them at 128 MB each; longer rows are
#: refused up front instead of exhausting memory.
MAX_ROW_LENGTH = 2**24


def check_row_length(n: Any) -> int:
    """``row_length`` (one), checked: an int in ``[1, MAX_ROW_LENGTH]``."""
    n = check_int("row_length", n, minimum=1, maximum=MAX_LENGTH)
    if n > MAX_ROW_LENGTH:
        raise ValueError(
            f"row_length={n:,} is above the {MAX_ROW_LENGTH:,} elements a packed row may have "
            "(the planner keeps tables of row_length + 1 entries, and each batch holds "
            "batch_size rows of row_length elements); pack rows of at most that"
        )
    return n


def _row_lengths(row_length: Any) -> tuple[int, ...]:
    if isinstance(row_length, (list, tuple, np.ndarray)):
        rows = tuple(check_row_length(n) for n in row_length)
        if not rows or any(b <= a for a, b in itertools.pairwise(rows)):
            raise ValueError(
                f"row_length must be an int >= 1 or strictly increasing ints, got "
                f"row_length={tuple(row_length)!r}"
            )
        if len(rows) > MAX_ROW_LENGTHS:
            raise ValueError(
                f"row_length has {len(rows):,} row lengths ({rows[0]}, {rows[1]}, ..., "
                f"{rows[-1]}); a plan may have at most {MAX_ROW_LENGTHS:,} (best-fit's codes hold "
                "a row length's index in 13 bits of an int64); pass fewer, e.g. every 8th or "
                "multiples of 64, plus the longest"
            )
        return rows
    return (check_row_length(row_length),)
