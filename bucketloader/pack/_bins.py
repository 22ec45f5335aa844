"""The bin-packing solver behind :class:`~bucketloader.pack.PackSpec` (private).

NOTE [ Packing a length histogram ]
Packing ``N`` documents into rows of ``L`` tokens is bin packing; only the *sizes* matter, so the
solver works on the histogram (``U`` distinct sizes with counts) and returns *patterns*: a
pattern is a multiset of sizes that fits one row, used ``reps`` times. Which document fills which
slot of which row is decided later, per epoch (documents of one size are interchangeable), so
the solve runs once per dataset and never sees ``N``.

The rule is Minimum Bin Slack (Gupta & Ho 1999) with pattern repetition:

1. Take the largest remaining size ``s``; its row length is the smallest planned ``L_i >= s``.
2. Among the remaining documents, choose the multiset that fills the ``L_i - s`` tokens left as
   closely as possible (a bounded subset-sum over the histogram: each size's count is split into
   binary chunks ``1, 2, 4, ...``, reachable sums are one Python integer used as a bitset, so a
   chunk costs one shift-or on ``L`` bits; the search stops as soon as the row is exactly full).
   Among equal fills, larger documents are preferred (chunks are tried largest first and the
   backtrack keeps the earliest chunk that reaches a sum).
3. Use that pattern as many times as the counts allow. While it stays feasible the same search
   would return it again (the feasible multisets only shrink, and it was the best), so repeating
   it is exactly what pattern-at-a-time MBS does, at the cost of one search per *pattern*.

Sizes come out largest first, so large documents get first pick of the small ones that complete
their rows, and the small ones fill each other's rows at the end. Run alone on the real length
files in tests/data, MBS reaches the lower bound ``ceil(tokens / L)`` rows in 20 of 21 cases,
where best-fit decreasing leaves 0.06-1.6% padding; but on files that small it costs tens of
times a BFD, so the default plan runs it only on large data (NOTE [ Planning at the speed of
best-fit decreasing ]).

NOTE [ Two solvers, the tighter plan ]
MBS searches a subset sum per *pattern*, so its cost grows with the distinct patterns: on a
small file (2k documents, nearly every row its own pattern) or a long-tailed one it is slower
than best-fit decreasing, and on long-tailed lengths it can leave more rows (the largest
documents, placed first with the closest fill, strand mid-sized ones). Best-fit decreasing runs
first, in bulk over the histogram: the rows with the same contents and the same room form one
group, the rooms with a group are kept sorted, so "the tightest row that holds ``s``" is one
``bisect`` away, once per size: its index stays right across the size's steps (a room that
empties is deleted at that index, and a new room, below ``s``, is inserted before it). The bits
of one Python integer, as in the benchmark's baselines, cost three big-integer operations per
step, 10-20% of the loop. A row chosen for size ``s`` stays the tightest
until its room drops below ``s``, so it takes ``room // s`` documents at once, and all the rows
of a group take them together (exactly per-document BFD, in one step per group and size). When
its rows meet the L2 lower bound (NOTE [ Lower bounds ]) nothing can do better, and within
0.1% of it an MBS search (up to a second at 1M long-tailed documents) could save at most that
0.1%: MBS is skipped; it is also skipped on too few documents per distinct size (NOTE
[ Planning at the speed of best-fit decreasing ]). Otherwise MBS runs too and the plan with
fewer row tokens is kept (BFD on a tie), so the plan is never looser than best-fit decreasing.
With several row lengths the same tests run on row tokens, against :func:`capacity_bound`.

NOTE [ Planning at the speed of best-fit decreasing ]
A plan should not cost more than the best-fit decreasing a user could write (issue 26:
benchmarks/small_costs.py races a careful bulk BFD that outputs the packing in this module's
form, and one that counts rows only, from 1k to 10M documents). The
bulk BFD here is that BFD with the group contents kept: one group per step of its loop (a
remainder of fewer than ``room // s`` documents is the next step's, which finds the same row),
no call per step, a group's contents one tuple of packed codes (its parent's plus one: no tree
to walk afterwards; a row's first code carries its row length), the documents longer than
``L / 2`` open their rows at once, and the live groups' tuples are read into the plan's arrays
in one pass. ``PackSpec.build`` reads the lengths once (NOTE [ One pass over the lengths ] in
:mod:`bucketloader.pack.spec`). The MBS search costs about 0.05-0.1 ms per pattern in Python,
tens of times BFD on a few thousand documents; it saves 0.5-1.2% of the rows where BFD misses
the bound (GSM8K-like lengths). Speed and tightness cannot both be had there, so the caller
chooses (``search``, a
:meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` option):

- ``"auto"`` (default): the search runs when BFD's padding is more than 0.5 percentage points
  above the ``ceil(tokens / L)`` bound's (the packing promise of issue 25, e.g. GSM8K at
  L = 256: 1.6 points; with several row lengths the same on row tokens against
  :func:`capacity_bound`'s C1, e.g. GSM8K at ``(256, 512)``: 1.6 points), or when the lengths
  hold at least ``_DOCS_PER_SIZE`` documents per distinct size (it then costs less than half
  of what the histogram saves over sorting).
- ``"never"``: the plan is exactly best-fit decreasing, and no bound is computed (about the
  packing baseline's time or less; around 100k-1M documents of few distinct lengths, where
  the plan's own copy of the lengths is what it writes beyond the baseline's ``bincount``,
  within a few percent either side of it: benchmarks/results/small_costs.md).
- ``"always"``: the search runs wherever BFD is not within 0.1% of the L2 bound (C2).

NOTE [ Lower bounds ]
``ceil(tokens / L)`` rows (L1) always holds. Documents longer than ``L / 2`` cannot share a row,
which the Martello & Toth (1990) bound L2 adds: for ``0 <= a <= L / 2``, with
``J1 = {s > L - a}``, ``J2 = {L/2 < s <= L - a}`` and ``J3 = {a <= s <= L/2}``, every row holds at
most one document of ``J1 u J2``, and the ``J3`` tokens that do not fit into the ``J2`` rows need
new rows: ``|J1| + |J2| + max(0, ceil((sum J3 - (|J2| L - sum J2)) / L))``. L2 >= L1.

Several row lengths ``L_1 < ... < L_k``: a plan costs its row tokens ``C = sum_j n_j L_j``
(``n_j`` rows of ``L_j``). The documents longer than ``L_{i-1}`` (``T_i`` tokens) fit only
rows of ``L_i`` or more, so those rows hold at least ``T_i`` tokens (``C_i = sum_{j >= i}
n_j L_j >= T_i``) and number at least ``K_i``, the L2 bound of those documents in rows of
``L_k`` (no row holds more). The least ``C_1`` under these constraints, with ``n_j`` real
except the longest rows' whole count, is a lower bound on every plan's row tokens; going down
from ``L_k``, each level takes the fewest rows its constraints need (putting a row's worth of
tokens into a shorter row length instead never costs more, and it counts more rows), so the
bound is computed level by level (:func:`capacity_bound`; tested against brute-forced optima).
Without the counts it is the analogue of L1; with one row length it is ``L1 * L`` and
``L2 * L``.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from bisect import bisect_left, insort
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

#: Bumped whenever the solver could return other patterns for the same input (it is part of a
#: spec's digest, so a resume across such a change fails loudly). 3: the search only from
#: ``_DOCS_PER_SIZE`` documents per distinct size. 4: with several row lengths the search is
#: decided against :func:`capacity_bound` (one row length: the plans of 3, see
#: :func:`solver_version`).
SOLVER_VERSION = 4


def solver_version(row_lengths: tuple[int, ...]) -> int:
    """The :data:`SOLVER_VERSION` whose plans a spec with these row lengths gets: version 4
    changed only plans with several row lengths, so one row length keeps 3 (and its digests,
    so the states saved before still load)."""
    return SOLVER_VERSION if len(row_lengths) > 1 else 3


#: When the Minimum-Bin-Slack search runs (NOTE [ Planning at the speed of best-fit decreasing ]).
SEARCH = ("always", "auto", "never")
#: The Minimum-Bin-Slack search runs only when the lengths hold at least this many documents
#: per distinct size (NOTE [ Planning at the speed of best-fit decreasing ]).
_DOCS_PER_SIZE = 100_000
#: Below that, the search still runs when best-fit decreasing pads more than 1/_TOLERANCE of
#: the tokens (0.5 percentage points) above the ``ceil(tokens / L)`` bound's padding.
_TOLERANCE = 200
#: MBS runs only when best-fit decreasing leaves more than 1/_CLOSE_ENOUGH of its rows above
#: the L2 bound (NOTE [ Two solvers, the tighter plan ]).
_CLOSE_ENOUGH = 1000


@dataclass(frozen=True, eq=False)
class Patterns:
    """The solution: pattern ``p`` is used ``reps[p]`` times in rows of ``row_lengths[kind[p]]``.

    Attributes:
        sizes: the distinct sizes, largest first ``(U,)``.
        kind: row-length index of each pattern ``(P,)``.
        reps: rows using each pattern ``(P,)``.
        offsets: pattern ``p``'s items are ``items[offsets[p]:offsets[p + 1]]`` ``(P + 1,)``.
        items: size index (into ``sizes``) of each item entry, largest size first in a pattern.
        mult: how many documents of that size the pattern holds.
    """

    sizes: np.ndarray
    kind: np.ndarray
    reps: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    mult: np.ndarray

    @functools.cached_property
    def fill(self) -> np.ndarray:
        """Tokens used by each pattern ``(P,)``."""
        if not self.items.size:
            return self.items
        return np.add.reduceat(self.sizes[self.items] * self.mult, self.offsets[:-1])

    @property
    def per_row(self) -> np.ndarray:
        """Documents per row of each pattern ``(P,)``."""
        return np.add.reduceat(self.mult, self.offsets[:-1]) if self.mult.size else self.reps * 0

    @property
    def num_rows(self) -> int:
        return int(self.reps.sum())


def solve(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...], search: str = "auto"
) -> Patterns:
    """Pack a histogram into rows: the tighter of best-fit decreasing and Minimum Bin Slack
    (NOTE [ Two solvers, the tighter plan ]); ``search`` says when the search runs (one of
    :data:`SEARCH`, NOTE [ Planning at the speed of best-fit decreasing ]).

    Example:
        >>> p = solve(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, sorted(p.fill.tolist())
        (3, [4, 8])
    """
    fit = best_fit(sizes, counts, row_lengths)
    if search == "never":
        return fit
    # NOTE on planning speed: "always" searches whatever the documents per distinct size
    few = search == "auto" and int(np.sum(counts)) < _DOCS_PER_SIZE * len(sizes)
    if len(row_lengths) == 1:
        row = row_lengths[0]
        l1, l2 = lower_bound(sizes, counts, row)
        if fit.num_rows - l2 <= fit.num_rows // _CLOSE_ENOUGH:
            return fit  # at the bound (or within 0.1% of it): not worth an MBS search
        tokens = int(np.dot(np.asarray(sizes, dtype=np.int64), np.asarray(counts, dtype=np.int64)))
        if few and (fit.num_rows - l1) * row <= tokens // _TOLERANCE:
            return fit  # padding within 0.5 points of the bound's: not worth the search's time
    else:  # the same two tests on row tokens (NOTE [ Lower bounds ], several row lengths)
        c1, c2 = capacity_bound(sizes, counts, row_lengths)
        padded = _padded(fit, row_lengths)
        if padded - c2 <= padded // _CLOSE_ENOUGH:
            return fit
        tokens = int(np.dot(np.asarray(sizes, dtype=np.int64), np.asarray(counts, dtype=np.int64)))
        if few and padded - c1 <= tokens // _TOLERANCE:
            return fit
    slack = min_bin_slack(sizes, counts, row_lengths)
    return slack if _padded(slack, row_lengths) < _padded(fit, row_lengths) else fit


def _padded(p: Patterns, row_lengths: tuple[int, ...]) -> int:
    """Row tokens of a solution (rows x their row length)."""
    return int((p.reps * np.asarray(row_lengths, dtype=np.int64)[p.kind]).sum())


def best_fit(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """Best-fit decreasing over the histogram, in bulk (NOTE [ Two solvers, the tighter plan ]).

    Exactly the rows of per-document BFD (each document, largest first, into the open row with
    the least room that holds it, else a new row of the smallest row length that holds it), up
    to ties between rows of equal room.

    Example:
        >>> p = best_fit(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, sorted(p.fill.tolist())
        (3, [4, 8])
    """
    vals = np.asarray(sizes, dtype=np.int64).tolist()
    lens = [int(x) for x in row_lengths]
    # a group: rows with the same contents and room; its contents, a tuple of codes
    # (_code: size index and mult, and in the first code the row length index), are its parent
    # group's plus one; by_room[room] = live group ids; open_rooms = their rooms, sorted. The
    # loop is inlined on purpose, appends bound once: it is the whole cost of a plan (NOTE
    # [ Planning at the speed of best-fit decreasing ]); each step splits k rows off one group
    # (or opens k rows).
    cnt = np.asarray(counts, dtype=np.int64).tolist()
    # Documents longer than L / 2 share no row (each room left, L - s, is below every such s):
    # with one row length, one root group per such size, made at once as the loop would.
    half = -(lens[0] // 2)
    gid = 0 if len(lens) > 1 else bisect_left(vals, half, key=operator.neg)  # next id
    contents: list[tuple[int, ...]] = [(g << _MULT | 1,) for g in range(gid)]
    rows = cnt[:gid]
    add_contents, add_rows = contents.append, rows.append
    by_room: dict[int, list[int]] = {lens[0] - s: [g] for g, s in enumerate(vals[:gid])}
    room_of = by_room.get
    open_rooms = sorted(by_room)  # the rooms some group has, increasing
    n_open = len(open_rooms)
    for i in range(gid, len(cnt)):
        s, c = vals[i], cnt[i]
        here = i << _MULT
        at = bisect_left(open_rooms, s)
        while c:  # one group per step: m documents of size s in each of k rows
            if at < n_open:  # the tightest open row that holds s: rows of group g
                room = open_rooms[at]
                stack = by_room[room]
                g = stack[-1]
                n = rows[g]
                m = room // s  # the row stays the tightest until its room drops below s
                k = c // m
                if k > n:
                    k = n
                elif not k:  # fewer than m documents left: one more row takes them
                    m, k = c, 1
                n -= k
                rows[g] = n
                if not n:
                    stack.pop()
                    if not stack:
                        del by_room[room]
                        del open_rooms[at]
                        n_open -= 1
                add_contents(contents[g] + (here | m,))
            elif s > lens[0]:  # new rows of the smallest row length that holds s
                kind = next(j for j, x in enumerate(lens) if x >= s)
                room = lens[kind]
                m = room // s
                k = c // m
                if not k:
                    m, k = c, 1
                add_contents((kind << _KIND | here | m,))
            else:  # no open row holds s: new rows of the shortest row length
                room = lens[0]
                m = room // s
                k = c // m
                if not k:
                    m, k = c, 1
                add_contents((here | m,))
            c -= k * m
            left = room - m * s  # (below s: the next step looks again)
            if left:  # (a full row is never chosen again: not a room)
                other = room_of(left)
                if other is None:
                    by_room[left] = [gid]
                    insort(open_rooms, left)
                    n_open += 1
                    at += 1  # (left < s: inserted before the rooms that hold s)
                else:
                    other.append(gid)
            gid += 1
            add_rows(k)
    return _patterns(sizes, contents, rows)


#: :func:`best_fit`'s codes: ``size index << _MULT | mult`` (a mult is at most the longest row
#: length, 2**24; a size index below that), and a row's first code adds ``kind << _KIND``.
_MULT = 25
_KIND = 2 * _MULT


def _patterns(sizes: np.ndarray, contents: list[tuple[int, ...]], rows: list[int]) -> Patterns:
    """The live groups of :func:`best_fit` (those with rows) as patterns, in group order."""
    chains = list(itertools.compress(contents, rows))
    n = len(chains)
    reps = np.fromiter(filter(None, rows), np.int64, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, chains), np.int64, n), out=offsets[1:])
    packed = np.fromiter(itertools.chain.from_iterable(chains), np.int64, int(offsets[-1]))
    kind = packed[offsets[:-1]] >> _KIND
    items = (packed >> _MULT) & ((1 << (_KIND - _MULT)) - 1)
    mults = packed & ((1 << _MULT) - 1)
    return Patterns(
        sizes=np.asarray(sizes, dtype=np.int64),
        kind=kind,
        reps=reps,
        offsets=offsets,
        items=items,
        mult=mults,
    )


def min_bin_slack(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """Minimum Bin Slack with pattern repetition (NOTE [ Packing a length histogram ]).

    Args:
        sizes: distinct sizes, strictly decreasing, each ``1 <= s <= max(row_lengths)``.
        counts: documents of each size (``>= 1``).
        row_lengths: the planned row lengths, strictly increasing.

    Example:
        >>> p = min_bin_slack(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, p.fill.tolist(), p.reps.tolist()
        (3, [8, 4], [2, 1])
    """
    vals = np.asarray(sizes, dtype=np.int64)
    left = np.asarray(counts, dtype=np.int64).copy()
    lens = [int(x) for x in row_lengths]
    vlist = vals.tolist()
    kinds: list[int] = []
    reps: list[int] = []
    offsets = [0]
    items: list[int] = []
    mults: list[int] = []
    top = 0  # index of the largest remaining size
    n_sizes = vals.size
    while True:
        while top < n_sizes and left[top] == 0:
            top += 1
        if top == n_sizes:
            break
        smax = vlist[top]
        kind = bisect_left(lens, smax)
        cap = lens[kind] - smax
        pattern = {top: 1}
        if cap > 0:
            _, chosen = _fill(vals, left, top, cap)
            for i, k in chosen:
                pattern[i] = pattern.get(i, 0) + k
        # (a few items: plain Python, no small numpy arrays)
        ordered = sorted(pattern.items())
        r = min(int(left[i]) // k for i, k in ordered)
        for i, k in ordered:
            left[i] -= r * k
            items.append(i)
            mults.append(k)
        kinds.append(kind)
        reps.append(r)
        offsets.append(len(items))
    return Patterns(
        sizes=vals,
        kind=np.asarray(kinds, dtype=np.int64),
        reps=np.asarray(reps, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        items=np.asarray(items, dtype=np.int64),
        mult=np.asarray(mults, dtype=np.int64),
    )


def _fill(
    vals: np.ndarray, left: np.ndarray, top: int, cap: int
) -> tuple[int, list[tuple[int, int]]]:
    """The closest fill ``<= cap`` from the remaining documents (one ``top`` is already used).

    Returns ``(tokens filled, [(size index, count), ...])``.
    """
    avail = left.copy()
    avail[top] -= 1
    cand = ((vals <= cap) & (avail > 0)).nonzero()[0]
    if cand.size == 0:
        return 0, []
    m = np.minimum(avail[cand], cap // vals[cand])
    # binary chunks 1, 2, 4, ... (the last one the remainder): any count 0..m is a sum of chunks;
    # one row of chunks per candidate, read row after row: largest size first, then by chunk
    p = 1 << np.arange(int(m.max()).bit_length())
    take = np.minimum(p, m[:, None] - (p - 1))
    row, col = (take > 0).nonzero()
    chunk_id, chunk_k = cand[row], take[row, col]
    weights = (vals[chunk_id] * chunk_k).tolist()
    full = (1 << (cap + 1)) - 1
    reach = 1
    snaps = []
    for w in weights:
        snaps.append(reach)
        reach = (reach | (reach << w)) & full
        if reach >> cap:
            break
    best = reach.bit_length() - 1
    chosen = []
    c = best
    ids_l, ks_l = chunk_id.tolist(), chunk_k.tolist()
    for j in range(len(snaps) - 1, -1, -1):
        if c == 0:
            break
        if not (snaps[j] >> c) & 1:
            chosen.append((ids_l[j], ks_l[j]))
            c -= weights[j]
    return best, chosen


def lower_bound(sizes: np.ndarray, counts: np.ndarray, row_length: int) -> tuple[int, int]:
    """``(L1, L2)`` lower bounds on the rows of one row length (NOTE [ Lower bounds ]).

    Example:
        >>> lower_bound(np.array([6, 5, 2]), np.array([3, 1, 2]), 10)
        (3, 4)
    """
    s = np.asarray(sizes, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    n = int(row_length)
    if s.size and int(c.max()) * s.size * max(n, int(s.max())) >= 1 << 62:
        s, c = s.astype(object), c.astype(object)  # (sums past int64: Python ints, exact)
    total = int((s * c).sum())
    l1 = -(-total // n)
    # counts and tokens of the sizes below x from prefix sums over the sorted sizes (exact
    # integers; no table of n + 1 entries: about 2 s per call at the 2**24 cap)
    if s.size > 1 and s[0] > s[-1]:  # (solve passes them longest first)
        s, c = s[::-1], c[::-1]
    order = None if s.size < 2 or bool((s[1:] >= s[:-1]).all()) else np.argsort(s, kind="stable")
    v, w = (s, c) if order is None else (s[order], c[order])
    ccum, tcum = np.zeros(v.size + 1, v.dtype), np.zeros(v.size + 1, v.dtype)
    np.cumsum(w, out=ccum[1:])
    np.cumsum(v * w, out=tcum[1:])
    half = n // 2
    i_all, i_half = np.searchsorted(v, [n + 1, half + 1])
    big = ccum[i_all] - ccum[i_half]
    # J1 u J2 = {s > n/2}; J2 = {n/2 < s <= n - a}; J3 = {a <= s <= n/2}. Between two sizes
    # <= n/2, J3 is fixed and J2 only shrinks as a grows, so the bound is largest at a = one of
    # these sizes (above the largest, J3 is empty and adds nothing)
    a = v[:i_half]
    i_a = np.searchsorted(v, a)  # (ascending needles: a cheap search)
    i_j2 = np.searchsorted(v, (n + 1 - a)[::-1])[::-1]
    # J3's tokens past the room J2's rows leave (n each, less their own tokens): the tokens
    # of J3 u J2 less n per J2 row
    over = tcum[i_j2] - tcum[i_a] - (ccum[i_j2] - ccum[i_half]) * n
    l2 = int(big + max(0, -(-int(over.max()) // n) if a.size else 0))
    return l1, max(l1, l2)


def capacity_bound(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]
) -> tuple[int, int]:
    """``(C1, C2)``: lower bounds on the row tokens (rows times their row length) of any packing
    into ``row_lengths``, from the tokens alone and with the rows long documents need (NOTE
    [ Lower bounds ], several row lengths). With one row length ``L``: ``(L1 * L, L2 * L)``.

    Example:
        >>> capacity_bound(np.array([6, 5, 2]), np.array([3, 1, 2]), (10,))
        (30, 40)
        >>> capacity_bound(np.array([9, 3]), np.array([2, 2]), (4, 10))  # 9s: a 10-row each
        (24, 24)
    """
    s = np.asarray(sizes, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    top = int(row_lengths[-1])
    if s.size and int(c.max()) * s.size * max(top, int(s.max())) >= 1 << 62:
        s, c = s.astype(object), c.astype(object)  # (token sums past int64: exact ints)
    out = []
    for need_rows in (False, True):
        rows = cap = Fraction(0)
        for i in range(len(row_lengths) - 1, -1, -1):  # from the longest rows down
            length = int(row_lengths[i])
            mine = s > (row_lengths[i - 1] if i else 0)  # the documents that need >= L_i
            tokens = int(np.dot(s[mine], c[mine]))
            least = lower_bound(s[mine], c[mine], top)[1] if need_rows and mine.any() else 0
            more = max(Fraction(0), least - rows, (tokens - cap) / length)
            if i == len(row_lengths) - 1:  # the longest rows: a whole number of them
                more = Fraction(math.ceil(more))
            rows += more
            cap += more * length
        out.append(math.ceil(cap))
    return out[0], out[1]
