"""Work-aware rows (private): documents exchanged between rows so every row's attention work
is near the mean, for :class:`~bucketloader.pack.PackSpec`'s ``balanced_layout``.

NOTE [ Work-aware rows ]
A row's attention work is the sum of its documents' squared lengths. The packing (NOTE
[ Packing a length histogram ] in :mod:`bucketloader.pack._bins`) only counts tokens, so a full
row of long documents does several times the work of a full row of short ones. Dealing rows to
ranks (NOTE [ Balancing ranks ] in :mod:`bucketloader.pack.epoch`) evens out steps of many rows
per rank, but with one row per rank a step lasts as long as its heaviest row: the rows
themselves must be even.

:func:`even_rows` starts from the packing and moves documents between two rows at a time,
the row furthest from the mean work (the *driver*) and one of the rows furthest on the other
side (its *partner*, the lightest or the heaviest few): a set ``x`` of the heavier row's
documents changes places with a set ``y`` of the lighter one's, both rows staying within the
row length. Two exact-sum knapsacks per row over token counts (the least and the most squared
length a subset of exactly ``t`` tokens can have; a size's ``c`` documents as binary chunks
``1, 2, 4, ...``, as in ``_bins._fill``) give, for every pair ``(t, t')`` of removed and added
tokens that keeps both rows within the row length, four exchanges; the one whose moved work
``d = work(x) - work(y)`` is closest to half the gap wins, provided ``0 < d < gap`` (the
pair's heavier work drops and its lighter work rises). Every accepted move lowers the sum of
the squared row works, so the loop ends; it stops when every row is within 1% of the mean, when
no driver finds a partner, or after ``8 x rows`` moves. A driver tries the 4 rows furthest on
the other side; a heavy outlier (a quarter above the mean: alone it slows a step) tries 64, at
most 64 times. A row's knapsacks are cached (the lightest rows meet many drivers).

A document longer than about the square root of the mean work cannot be evened out (its row is
heavier than the mean whatever it holds). :func:`lift_rows` (once per rank count, on the evened
rows) takes the steps those rows will fill, the heaviest ``num_replicas * B`` rows and so on,
and moves work into each step's other rows from the rest (the heaviest first) until they near
the step's heaviest row; then it evens the rest again. The lift is kept only when it lowers the
slowdown of the full steps cut from the rows sorted by work and dealt as the epoch deals them;
the epoch fills full steps with the lifted rows (never the partial last step), so they stay
together whatever the shuffle.

What stays: the number of rows (so the padding, the steps and ``len``), every row within its
length, every document exactly once (documents only change rows), at most ``max_documents``
documents per row (the collator's ``cu_seqlens`` bound), and documents longer than
``keep_above`` never move (in a bucketed row of length ``L_i`` the document longer than
``L_{i-1}`` that decides the row's shape stays). Pure: the same rows give the same result
(ties go to the lower row index). Measured on the text length files
(``benchmarks/results/pack_balance.md``): europarl's rows at ``L = 512`` go from 0.15-3.95x the
mean work (1st-99th percentile 0.31-2.49x) to 0.74-1.42x (median 1.00), and with the epoch's
dealing max / mean work per step is at most 1.036 at 64 ranks with one row per rank; a few
seconds per 10,000 rows on a shared 2-core machine.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter

import numpy as np

#: Bumped whenever :func:`even_rows` could return other rows for the same input (a sampler
#: with ``balance=True`` puts it in its state, so a resume across such a change fails loudly).
WORK_VERSION = 1
#: Stop once every row's work is within this fraction of the mean.
_TOLERANCE = 0.01
#: Partners a driver tries before it is set aside.
_PARTNERS = 4
#: ... times as many for a row a quarter or more above the mean, at most this many times.
_OUTLIER_PARTNERS = 16
_OUTLIER_SEARCHES = 64
#: At most this many moves per row.
_MOVES_PER_ROW = 8
_INF = 1 << 62


def even_rows(
    rows: list[list[int]], row_length: int, max_documents: int, keep_above: int
) -> list[list[int]]:
    """Rows of the same documents whose works (sums of squared sizes) are near the mean
    (NOTE [ Work-aware rows ]).

    Args:
        rows: each row's document sizes, every row within ``row_length``.
        row_length: tokens per row.
        max_documents: the most documents a row may hold (no row above it stays so).
        keep_above: documents longer than this stay in their row.

    Example:
        >>> rows = [[4, 4], [1, 1, 1, 1, 1, 1, 1, 1]]  # works 32 and 8
        >>> even_rows(rows, 8, max_documents=8, keep_above=8)
        [[4, 1, 1, 1, 1], [4, 1, 1, 1, 1]]
    """
    rows = [list(r) for r in rows]
    work = [sum(s * s for s in r) for r in rows]
    _flatten(rows, work, list(range(len(rows))), row_length, max_documents, keep_above)
    return rows


def lift_rows(
    rows: list[list[int]],
    row_length: int,
    max_documents: int,
    keep_above: int,
    step_rows: int,
    full_rows: int,
    per_rank: int = 1,
) -> tuple[list[list[int]], list[int]]:
    """Evened rows (:func:`even_rows`) with the heaviest steps' rows lifted towards their
    step's heaviest row (NOTE [ Work-aware rows ]), if that lowers the slowdown.

    Args:
        rows, row_length, max_documents, keep_above: as for :func:`even_rows`.
        step_rows: rows per global step (``num_replicas * B``).
        full_rows: rows of the full global steps (the lifted rows are among them).
        per_rank: rows per rank and step (``B``; ``step_rows`` is a multiple of it).

    Returns:
        ``(rows, lifted)``: the new rows (same order) and the indices of the lifted rows.

    Example:
        >>> rows = [[7, 1], [2, 2, 2, 2], [4, 2, 2], [4, 2, 2]]  # works 50, 16, 24, 24
        >>> lift_rows(rows, 8, max_documents=8, keep_above=8, step_rows=2, full_rows=4)
        ([[7, 1], [2, 2, 2, 2], [4, 4], [2, 2, 2, 2]], [0, 2])
    """
    rows = [list(r) for r in rows]
    work = [sum(s * s for s in r) for r in rows]
    if step_rows < 1 or not rows:
        return rows, []
    mean = sum(work) / len(rows)
    order = sorted(range(len(rows)), key=lambda i: (-work[i], i))
    heavy = sum(w > (1 + _TOLERANCE) * mean for w in work)
    steps = min(-(-heavy // step_rows), full_rows // step_rows)
    if steps == 0:
        return rows, []
    top, rest = order[: steps * step_rows], order[steps * step_rows :]
    before = [list(r) for r in rows], list(work)
    givers = [(-work[i], i) for i in rest]
    heapq.heapify(givers)
    for k in range(steps):
        group = top[k * step_rows : (k + 1) * step_rows]
        target = work[group[0]]
        for r in group[1:]:
            tried = []
            for _ in range(2 * _PARTNERS):
                need = target - work[r]
                if need <= _TOLERANCE * mean:
                    break
                g = _pop(givers, work)
                if g is None:
                    break
                pair = _exchange(
                    rows[g], rows[r], row_length, max_documents, keep_above, need, need + 1
                )
                if pair is None:
                    tried.append(g)
                    continue
                rows[g], rows[r] = pair
                work[g], work[r] = (sum(s * s for s in rows[i]) for i in (g, r))
                heapq.heappush(givers, (-work[g], g))
            for g in tried:
                heapq.heappush(givers, (-work[g], g))
    _flatten(rows, work, rest, row_length, max_documents, keep_above)
    lifted_order = top + sorted(rest, key=lambda i: (-work[i], i))
    if _slowdown(work, lifted_order, step_rows, full_rows, per_rank) >= _slowdown(
        before[1], order, step_rows, full_rows, per_rank
    ):
        return before[0], []  # the lift did not pay (rows that resist exchanges)
    return rows, sorted(top)


def _slowdown(
    work: list[int], order: list[int], step_rows: int, full_rows: int, per_rank: int
) -> float:
    """Sum over steps of the slowest rank's work over sum of the mean rank's, for the full
    steps cut from ``order`` (the epoch's sorting of rows by work, before its random leftovers)
    and ``per_rank`` rows dealt to each rank in snake order (NOTE [ Balancing ranks ] in
    :mod:`bucketloader.pack.epoch`)."""
    w = np.asarray([work[i] for i in order[:full_rows]], dtype=np.float64)
    w = np.sort(w.reshape(-1, step_rows), axis=1)
    ranks = step_rows // per_rank
    p = np.arange(step_rows)
    rnd, i = p // ranks, p % ranks
    owner = np.where(rnd % 2 == 0, i, ranks - 1 - i)
    # each rank's load per step: the summed work of the columns it owns (a stable sort keeps
    # each rank's columns in order, so the sums add the same numbers in the same order)
    load = w[:, np.argsort(owner, kind="stable")].reshape(w.shape[0], ranks, per_rank).sum(2)
    return float(load.max(1).sum() / max(load.mean(1).sum(), 1e-300))


def _pop(heap: list[tuple[int, int]], work: list[int]) -> int | None:
    """Pop the heaviest live row of a max-heap of ``(-work, row)`` (stale entries dropped)."""
    while heap:
        w, i = heapq.heappop(heap)
        if -w == work[i]:
            return i
    return None


def _flatten(
    rows: list[list[int]],
    work: list[int],
    among: list[int],
    row_length: int,
    max_documents: int,
    keep_above: int,
) -> None:
    """Exchange documents between the rows ``among`` (in place, ``work`` kept up to date)
    until their works are near their mean (NOTE [ Work-aware rows ])."""
    n = len(among)
    if n < 2:
        return
    mean = sum(work[i] for i in among) / n
    tol = _TOLERANCE * mean
    heavy = [(-work[i], i) for i in among]
    light = [(work[i], i) for i in among]
    heapq.heapify(heavy)
    heapq.heapify(light)
    set_aside: set[int] = set()

    def top(heap: list[tuple[int, int]], sign: int) -> int | None:
        """The live row at the top of ``heap`` (stale and set-aside entries dropped)."""
        while heap:
            w, i = heap[0]
            if sign * w == work[i] and i not in set_aside:
                return i
            heapq.heappop(heap)
        return None

    def partners(heap: list[tuple[int, int]], sign: int, driver: int, count: int) -> list[int]:
        """The first ``count`` live rows of ``heap`` other than ``driver`` (left in it)."""
        out: list[int] = []
        popped = []
        while heap and len(out) < count:
            entry = heapq.heappop(heap)
            w, i = entry
            if sign * w != work[i]:
                continue
            popped.append(entry)
            if i != driver and i not in out:
                out.append(i)
        for entry in popped:
            heapq.heappush(heap, entry)
        return out

    searches = _OUTLIER_SEARCHES
    for _ in range(_MOVES_PER_ROW * n):
        h, lo = top(heavy, -1), top(light, 1)
        if h is None or lo is None:
            break
        up, down = work[h] - mean, mean - work[lo]
        if max(up, down) <= tol:
            break
        driver = h if up >= down else lo
        # a heavy outlier (a quarter above the mean) tries many partners: it alone can slow a
        # step; a budget of such searches bounds the time on rows that resist exchanges
        count = _PARTNERS
        if driver == h and up > mean / 4 and searches > 0:
            count, searches = _PARTNERS * _OUTLIER_PARTNERS, searches - 1
        moved = False
        others = partners(light, 1, h, count) if driver == h else partners(heavy, -1, lo, count)
        for other in others:
            a, b = (driver, other) if driver == h else (other, driver)
            gap = work[a] - work[b]
            if gap <= 0:
                continue
            pair = _exchange(rows[a], rows[b], row_length, max_documents, keep_above, gap / 2, gap)
            if pair is None:
                continue
            rows[a], rows[b] = pair
            for i in (a, b):
                work[i] = sum(s * s for s in rows[i])
                set_aside.discard(i)
                heapq.heappush(heavy, (-work[i], i))
                heapq.heappush(light, (work[i], i))
            moved = True
            break
        if not moved:
            set_aside.add(driver)


def _exchange(
    giver: list[int],
    taker: list[int],
    row_length: int,
    max_documents: int,
    keep_above: int,
    aim: float,
    limit: int,
) -> tuple[list[int], list[int]] | None:
    """The exchange that moves work ``0 < d < limit`` from ``giver`` to ``taker``, ``d`` as
    close to ``aim`` as the rows allow (NOTE [ Work-aware rows ]); ``None`` if there is none.
    Returns the two new rows."""
    heavy, light = giver, taker
    free_h, free_l = row_length - sum(heavy), row_length - sum(light)
    mh = [s for s in heavy if s <= keep_above]
    ml = [s for s in light if s <= keep_above]
    top_x = min(sum(mh), sum(ml) + free_l)  # tokens x can take out of the giving row
    top_y = min(top_x + free_h, sum(ml))
    if limit <= 1 or top_x <= 0:
        return None
    ch, h_min, h_min_take, h_max, h_max_take = _subsets(tuple(mh))
    cl, l_min, l_min_take, l_max, l_max_take = _subsets(tuple(ml))
    t, t2, t2c, ok = _candidates(h_min, l_min, top_x, top_y, free_l, free_h)
    x_work = np.stack([h_min[t], -h_max[t]])  # (2, t's, t''s): least and most work out
    y_work = np.stack([l_min[t2c], -l_max[t2c]])
    d = x_work[:, None] - y_work[None, :]  # (2, 2, t's, t''s)
    good = ok & (d > 0) & (d < limit)
    if not good.any():
        return None
    score = np.where(good, np.abs(d - aim), np.inf)
    xi, yi, ti, si = np.unravel_index(int(np.argmin(score)), score.shape)
    tx, ty = int(t[ti, 0]), int(t2[ti, si])
    x = _pick(ch, (h_min_take, h_max_take)[xi], tx)
    y = _pick(cl, (l_min_take, l_max_take)[yi], ty)
    if len(heavy) - len(x) + len(y) > max_documents or len(light) - len(y) + len(x) > max_documents:
        return None
    new_h, new_l = Counter(heavy), Counter(light)
    new_h.subtract(x)
    new_h.update(y)
    new_l.subtract(y)
    new_l.update(x)
    return sorted(new_h.elements(), reverse=True), sorted(new_l.elements(), reverse=True)


def _candidates(
    h_min: np.ndarray, l_min: np.ndarray, top_x: int, top_y: int, free_l: int, free_h: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_exchange`'s candidates ``(t, t', t' clipped, ok)``: ``t`` tokens out of the
    heavier row (a column), ``t'`` into it, ``t' - t`` in ``[-free_l, free_h]`` keeping both
    rows within the row length, each count reached by some subset of its row (``h_min``,
    ``l_min`` below ``_INF``).

    Only the reached counts are rows of the grid: rows of few long documents reach a handful,
    and a grid over every count (``top_x`` x ``free_l + free_h + 1`` cells, about L x 2L) made
    ``PackSampler(balance=True)`` run for minutes on LibriSpeech's rows of one or two
    utterances (s22). For each ``t`` the ``t'`` increase, either as ``t + shift`` over the
    window or as the reached ``t'`` (whichever axis is shorter): the same candidates in the same
    order as the full grid, so the same exchange wins (the plans are the same; WORK_VERSION
    stands).

    Example:
        >>> least = np.array([0, _INF, _INF, 9, _INF, 25, _INF, _INF, 34])  # sizes 3, 5
        >>> t, t2, _, ok = _candidates(least, least, 8, 8, 4, 4)  # (3 x 4 cells, not 8 x 9)
        >>> t.ravel().tolist(), t2[0].tolist(), ok.astype(int).tolist()
        ([3, 5, 8], [0, 3, 5, 8], [[1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
    """
    reach_x = np.flatnonzero(h_min[1 : top_x + 1] < _INF) + 1
    reach_y = np.flatnonzero(l_min[: top_y + 1] < _INF)
    t = reach_x[:, None]
    if reach_y.size < free_l + free_h + 1:
        t2 = np.broadcast_to(reach_y[None, :], (reach_x.size, reach_y.size))
        return t, t2, t2, (t2 - t >= -free_l) & (t2 - t <= free_h)
    t2 = t + np.arange(-free_l, free_h + 1)[None, :]
    t2c = np.clip(t2, 0, top_y)
    return t, t2, t2c, (t2 >= 0) & (t2 <= top_y) & (l_min[t2c] < _INF)


@functools.lru_cache(maxsize=1024)
def _subsets(
    sizes: tuple[int, ...],
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(chunks, least, least_take, most, most_take)`` over a row's movable sizes: the
    knapsacks of :func:`_knapsack` up to all its tokens (cached: the lightest rows meet many
    drivers)."""
    chunks = _chunks(list(sizes))
    top = sum(sizes)
    return (chunks, *_knapsack(chunks, top, 1), *_knapsack(chunks, top, -1))


def _chunks(sizes: list[int]) -> list[tuple[int, int]]:
    """``(size, k)`` binary chunks: any count ``0..c`` of a size is a sum of its chunks."""
    out = []
    for s, c in sorted(Counter(sizes).items(), reverse=True):
        p = 1
        while c > 0:
            k = min(p, c)
            out.append((s, k))
            c -= k
            p *= 2
    return out


def _knapsack(chunks: list[tuple[int, int]], top: int, sign: int) -> tuple[np.ndarray, np.ndarray]:
    """``best[t]``: the least (``sign=1``) or minus the most (``sign=-1``) squared length of a
    subset of exactly ``t <= top`` tokens (``_INF`` if none); ``take[i, t]``: chunk ``i`` is in
    the best subset of ``t`` tokens over chunks ``0..i``."""
    best = np.full(top + 1, _INF, dtype=np.int64)
    best[0] = 0
    take = np.zeros((len(chunks), top + 1), dtype=bool)
    for i, (s, k) in enumerate(chunks):
        width = s * k
        if width > top:
            continue
        prev = best[: top + 1 - width]
        cand = prev + sign * s * s * k
        better = (prev < _INF) & (cand < best[width:])
        take[i, width:] = better
        best[width:] = np.where(better, cand, best[width:])
    return best, take


def _pick(chunks: list[tuple[int, int]], take: np.ndarray, tokens: int) -> list[int]:
    """The sizes of the subset of ``tokens`` tokens that ``take`` recorded."""
    out: list[int] = []
    for i in range(len(chunks) - 1, -1, -1):
        if tokens == 0:
            break
        if take[i, tokens]:
            s, k = chunks[i]
            out += [s] * k
            tokens -= s * k
    return out
