"""Sharded epoch plans: every rank plans only its own shard, in step with every other rank.

NOTE [ Sharded plan ]
A rank holds its shard's lengths (the rows it reads) and every rank's shard histogram (merged:
the global histogram). Nothing else crosses ranks.

1. *Boundaries* come from the global histogram (the exact solve of the whole data set), so they
   are the same on every rank and equal to the boundaries of one process holding every length
   (unless the shards' envelope pads measurably less, 6).
2. *The table*: ``n[r, c]``, the samples of rank ``r`` in cell ``c`` (a ``ranks x K`` table of
   ints, each rank's shard histogram bucketed). Every rank derives the same *schedule* from it
   (:func:`shard_schedule`): ``S_c`` global steps of cell ``c``, each one batch of ``B_c`` rows
   per rank. So every rank takes ``sum_c S_c`` steps and, at each step, a batch of the same
   shape, with no per-step communication.
3. *Ranks differ*, so a cell's rows cannot match every rank's ``n[r, c]``. A rank may place a
   sample in its own cell or any longer one (which covers it: a longer padded length, never a lost
   sample), so the plan gives every cell ``c`` a capacity ``T_c`` (slots per rank: steps times
   rows) and each rank places its samples shortest cell first, *promoting* what does not fit into
   the next longer cell; slots left empty are *filler rows* (padding, ``sample_mask`` False).
   Every rank's samples fit exactly when, for every ``c``, the slots in cells ``>= c`` hold the
   most samples any rank has in cells ``>= c`` (``need_c``). The padding of the epoch is
   ``ranks x sum_c T_c·b_c`` minus the real lengths, and the ``b_c`` increase, so the least
   padding takes the capacities from the longest cell down: ``T_c = need_c - sum_{c' > c} T_c'``
   (the fewest slots at each length, settled where they are dearest first). ``T_c`` is then
   ``S_c`` steps of ``B_c`` rows (rounded up to whole batches), or, with even batches (NOTE
   [ Even batches ] in :mod:`bucketloader.plan.budget`), ``S_c = ceil(T_c / B_c)`` steps of
   ``ceil(T_c / S_c)`` rows. The rounding to whole batches keeps the padding within one batch
   of the largest shape per rank of the least any choice of steps can give (tested against
   every choice on small tables). A cell some rank has no sample short enough for (no sample at or
   below it) gets no steps, so no rank ever needs a batch it cannot fill with a stand-in.
4. *Within a rank*, a cell's samples are shuffled (``SeedSequence([seed, epoch, TAG, rank])``),
   promoted samples go first (a sample is promoted at most as far as it must), and the placed
   samples are dealt over the cell's ``S_c`` batches as evenly as possible. A batch with no
   sample (a rank with fewer samples than steps) holds one *stand-in*: a sample of the rank's
   shortest cell (short enough for any cell with steps, by 3), loaded only so the collator has
   data to pad; it is a padding row (``sample_mask`` False), never trained on.
5. *Steps* are interleaved like the unsharded plan's (NOTE [ Epoch plan ] in
   :mod:`bucketloader.plan.epoch`): keys ``(j + u) / S_c`` from ``SeedSequence([seed, epoch])``,
   the same on every rank.

6. *Boundaries for shards.* With capacities as in 3 (up to rounding), every rank pads to
   ``sum_c need_c (b_c - b_{c-1})`` elements, ``need_c`` the most samples any rank has longer
   than ``b_{c-1}``: the padding cost of the shards' *envelope* (:func:`envelope_histogram`:
   at each length, the most samples any rank has at or above it). The global solve minimises
   the merged histogram's padding instead, which is the same thing only when the ranks'
   histograms are alike (large shards). So the sampler also solves the envelope with the same
   strategy, plans both and keeps the global boundaries unless the envelope's plan pads at
   least 0.1 percentage points less over all ranks (small shards, many ranks). With large
   shards the two agree and the boundaries stay identical to the global solve. No schedule that
   keeps every rank's samples on that rank and one shape per step on every rank pads less than
   the envelope's optimum (the bound ``benchmarks/scale.py`` reports next to the global plan):
   with ~70 samples per rank and 16 buckets the fullest rank in a bucket holds two to three times
   the mean, and those slots are padded on every rank.

7. *Deferral* (``ShardedSampler(defer=f)``, off by default). Padding to the fullest rank (3, 6)
   is what keeps every sample in every epoch; the other rule sizes each cell for what the ranks
   can fill and lets a rank *defer* its excess to the next epoch (:func:`defer_table`, counts
   only, so every rank derives every rank's deferral). From the longest cell down, the slots at
   and above cell ``c`` (level ``L_c``) are the most for which the ranks with fewer samples there
   leave at most ``_DEFER_SLACK`` (0.2%) of the level's slots empty; a rank with more samples at
   or above ``c`` than ``L_c`` defers the difference, from cell ``c`` first, never more than
   ``floor(f · n[r, c])`` of its samples of a cell per epoch (the level rises where that bound
   binds). The schedule (2, 3) is then planned for the samples that stay. *Which* samples wait
   is a rotation: the cell's samples in a fixed order (``SeedSequence([seed, TAG, rank, c])``),
   epoch ``e`` showing the ``s = n - d`` of them from position ``e·s`` on (cyclically), so the
   ``d`` an epoch defers open the next epoch's window and are placed in the cell's first batches.
   Every sample is shown at least once in any ``ceil(n / s)`` consecutive epochs (two for
   ``f <= 1/2``), and the rotation is a function of ``(seed, epoch, rank, shard)`` alone: a resume
   recomputes it in O(shard). The deferral is the same every epoch (it depends on the counts);
   the report counts it and rank 0 warns once per epoch with the count.

8. *Exchange* (``ShardedSampler(exchange=True)``, off by default) is for shards of one data set
   that every rank can read (one Hugging Face dataset or Parquet files on shared storage; the
   shard is only the rows a rank is assigned, named by their global row ids). Ranks hand samples
   to each other so that every rank holds its share of every level: from the longest cell down,
   ``T_c`` the samples of all ranks at or above cell ``c``, a rank may hold at most
   ``ceil(T_c / R)`` of them (:func:`exchange_table`; no fewer slots can hold ``T_c`` samples
   over ``R`` ranks, so ``need_c`` in 3 is the least it can be at every level at once). A rank
   keeps as many of its own samples of a cell as that bound lets it (so the fewest move) and
   *gives* the rest; the ranks with room *receive* them, first those that can take them without
   having to give their own shorter samples later, then the rest by room (ties by rank). Which
   giver hands how many to which receiver is the cumulative merge of the givers and the
   receivers in rank order (:func:`exchange_moves`). All of it is a function of the ``ranks x
   K`` table, so every rank derives every rank's gives and takes; the receivers learn *which*
   rows from one collective when the sampler is built (every rank's given global row ids, a
   fixed draw from its cell by ``SeedSequence([seed, TAG, rank, c])``; a second, of a few
   bytes, shares each rank's check that no rank moves a row it kept, so a row listed twice is
   an error on every rank). The moved set is the
   same every epoch (the counts are), so there is no per-epoch or per-step communication and a
   resume recomputes the plan from the seed, the epoch and the rank's rows; every sample is in
   every epoch exactly once, on one rank. The schedule (2, 3, 4, 5) is then planned for the
   exchanged table over the rank's kept and received rows, in global row ids. Moves are few
   where shards are large (the ranks' counts differ by about the square root of a cell's count)
   and a large share of tiny shards.

9. *Fill* (``ShardedSampler(last_batch="fill")``; ``"pad"``, the default, leaves the filler
   rows of 3 as masked padding). The schedule is the same; every slot a rank's samples leave
   empty in a cell's batches holds a *repeat* of a sample the rank places in that cell this
   epoch (so it fits the batch's shape), a real row that is trained on (``sample_mask`` True),
   as ``BucketSampler(last_batch="fill")`` tops a cell's last step up with repeats of the
   cell. A batch's repeats are the cell's placed samples that follow its own, cyclically (the
   epoch's shuffled order, so a function of ``(seed, epoch, rank)`` and the rank's rows): the
   batches before the last repeat the next batches' samples, the last batch the first ones,
   and a batch repeats its own samples only when the rank places fewer samples in the cell
   than a batch has rows (until session 15 the repeats ran from the cell's last sample back,
   and the short batches, the last ones, repeated their own: 5 samples in batches of 3 gave
   ``[3, 4, 4]``). A cell where the rank places nothing repeats the
   samples of the last shorter cell where it places some (they fit too), else the stand-in of
   4 (then a real row). Every sample is still in the epoch (once, plus its repeats); the
   report counts the repeats (``repeated``) and, as ``BucketSampler``'s report does, counts
   their elements as real ones in the padding. ``"drop"`` and ``"keep"`` are refused: a rank
   that drops or shrinks a batch another rank fills leaves the ranks out of step.

Every sample of every shard is in every epoch exactly once (placed in its cell or promoted, on
its own rank or, with exchange (8), on the rank that received it; with fill, 9, plus its
repeats) unless deferral (7) is on; filler rows (or repeats), promotions, deferrals and moves
are counted in the report. A rank's memory is O(its shard): its lengths, the cell of each,
one permutation per epoch and the ``ranks x K`` table (with exchange, plus the moved rows'
global ids).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from bucketloader.histogram import LengthHistogram

#: Mixed into the seeds of a rank's within-cell shuffles ("shrd").
_SHARD = 0x73687264
#: Mixed into the seeds of the fixed rotation order of a rank's cell under deferral ("dfer").
_DEFER = 0x64666572
#: Mixed into the seeds of the fixed draw of the rows a rank gives under exchange ("exch").
_EXCHANGE = 0x65786368
#: Deferral (NOTE [ Sharded plan ] 7): the share of a level's slots the ranks with fewer samples
#: may leave empty (0.2%).
_DEFER_SLACK = 0.002


def envelope_histogram(histograms: Sequence[LengthHistogram]) -> LengthHistogram:
    """The shards' envelope (NOTE [ Sharded plan ] 6): at every length ``v``, the histogram
    has as many samples at or above ``v`` as the rank with the most there.

    Its padding cost for boundaries ``b`` is what a sharded plan pads per rank with them (up to
    rounding), so solving it gives the boundaries for the sharded plan.

    Example:
        >>> a = LengthHistogram.from_lengths([2, 2, 2, 9])
        >>> e = envelope_histogram([a, LengthHistogram.from_lengths([5, 9, 9])])
        >>> e.values.tolist(), e.counts.tolist()
        ([2, 5, 9], [1, 1, 2])
    """
    # every length any rank has: the merge's values (one dense counter where the ranks' values
    # span few lengths; np.unique of the concatenation held every rank's values twice: 91 MB
    # peak for 32 ranks of 169 k distinct lengths, 24 MB this way)
    return envelope_of(histograms, LengthHistogram.merge(histograms).values)


def envelope_of(histograms: Iterable[LengthHistogram], values: np.ndarray) -> LengthHistogram:
    """:func:`envelope_histogram` given ``values``, every length of the histograms (the
    merge's values), reading the histograms once, in order (one at a time from a generator:
    the sharded sampler's gathered ones, NOTE [ Gathered histograms ] in
    :mod:`bucketloader.sharded`)."""
    most = np.zeros(values.size, dtype=np.int64)
    for h in histograms:
        at = np.zeros(values.size, dtype=np.int64)
        at[np.searchsorted(values, h.values)] = h.counts
        np.maximum(most, np.cumsum(at[::-1])[::-1], out=most)
    counts = most - np.append(most[1:], 0)
    keep = counts > 0
    return LengthHistogram(values[keep], counts[keep])


def dealt_histogram(histogram: LengthHistogram, ranks: int) -> LengthHistogram:
    """The fullest rank's share when the samples are dealt over ``ranks`` longest first (NOTE
    [ Sharded plan ] 8): at every length ``v``, ``ceil(N_v / ranks)`` samples at or above it,
    ``N_v`` the global count there.

    Its padding cost for boundaries ``b`` is what the exchanged plan pads per rank with them (up
    to rounding), as the envelope's is for shards that keep their samples (6).

    Example:
        >>> h = dealt_histogram(LengthHistogram.from_lengths([2, 2, 2, 5, 9, 9, 9]), 3)
        >>> h.values.tolist(), h.counts.tolist()
        ([2, 5, 9], [1, 1, 1])
    """
    above = np.cumsum(histogram.counts[::-1])[::-1]
    share = -(-above // ranks)
    counts = share - np.append(share[1:], 0)
    keep = counts > 0
    return LengthHistogram(histogram.values[keep], counts[keep])


def defer_table(table: np.ndarray, limit: float, *, slack: float = _DEFER_SLACK) -> np.ndarray:
    """Samples every rank defers from every cell per epoch (NOTE [ Sharded plan ] 7).

    Args:
        table: ``(R, K)`` samples of rank ``r`` in cell ``c``; cells ordered by padded length.
        limit: the most of a rank's samples of a cell deferred per epoch, in ``[0, 1)``.
        slack: the share of a level's slots the ranks with fewer samples may leave empty.

    Example:
        >>> defer_table(np.array([[4, 9], [4, 5], [4, 5]]), 0.5).tolist()
        [[0, 4], [0, 0], [0, 0]]
        >>> defer_table(np.array([[4, 9], [4, 5], [4, 5]]), 0.25).tolist()
        [[1, 2], [0, 0], [0, 0]]
    """
    table = np.asarray(table, dtype=np.int64)
    k = table.shape[1]
    left = np.floor(limit * table).astype(np.int64)  # what each rank may still defer per cell
    deferred = np.zeros_like(table)
    for c in range(k - 1, -1, -1):
        have = (table[:, c:] - deferred[:, c:]).sum(axis=1)  # at or above c, after deferrals
        lowest = int((have - left[:, c:].sum(axis=1)).max())  # the level the bound allows
        level = max(_level(have, slack), lowest)
        excess = np.maximum(have - level, 0)
        for cc in range(c, k):  # from cell c first, then the longer cells' allowance
            take = np.minimum(excess, left[:, cc])
            deferred[:, cc] += take
            left[:, cc] -= take
            excess -= take
    return deferred


def _level(have: np.ndarray, slack: float) -> int:
    """The most slots per rank for which the ranks below leave at most ``slack`` of the slots
    taken empty: the largest ``v`` with ``sum(v - min(have, v)) <= slack * sum(min(have, v))``
    (the left side grows faster than the right, so the ``v`` that pass are an interval)."""
    lo, hi = int(have.min()), int(have.max())
    while lo < hi:
        mid = (lo + hi + 1) // 2
        held = np.minimum(have, mid)
        if (mid - held).sum() <= slack * held.sum():
            lo = mid
        else:
            hi = mid - 1
    return lo


def exchange_table(table: np.ndarray) -> np.ndarray:
    """Samples every rank plans in every cell once the ranks exchange (NOTE [ Sharded plan ] 8).

    From the longest cell down, a rank holds at most ``ceil(T_c / R)`` of the ``T_c`` samples at
    or above cell ``c``: it keeps what fits of its own and the rest goes to the ranks with room.

    Args:
        table: ``(R, K)`` samples of rank ``r`` in cell ``c``; cells ordered by padded length.

    Example:
        >>> exchange_table(np.array([[6, 1], [0, 5], [3, 0]])).tolist()
        [[3, 2], [3, 2], [3, 2]]
    """
    table = np.asarray(table, dtype=np.int64)
    ranks, k = table.shape
    above = np.cumsum(table.sum(axis=0)[::-1])[::-1]  # T_c
    cap = -(-above // ranks)
    out = np.zeros_like(table)
    held = np.zeros(ranks, dtype=np.int64)  # what each rank holds above cell c
    for c in range(k - 1, -1, -1):
        n = table[:, c]
        keep = np.minimum(n, cap[c] - held)
        room = cap[c] - held - keep
        # the room a rank keeps at every shorter level if it takes nothing more here
        below = np.cumsum(table[:, :c][:, ::-1], axis=1)  # own samples of cells c-1 .. c' added
        later = cap[:c][::-1][None, :] - below if c else np.zeros((ranks, 0), dtype=np.int64)
        slack = np.minimum(room, later.min(axis=1) - held - keep if c else room)
        out[:, c] = keep + _deal(int((n - keep).sum()), room, np.maximum(slack, 0))
        held += out[:, c]
    return out


def exchange_cells(table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples every rank plans in every cell once the ranks exchange under fill (NOTE
    [ Sharded plan ] 9), and the copies each rank sends.

    Every cell is dealt on its own: a rank keeps at most ``cap = ceil(n_c / R)`` of its
    ``n_c`` samples of cell ``c`` and the rest go to the ranks with room, in rank order; the
    ranks still below ``cap`` then receive *copies* (repeats) of rows of the ranks that keep
    ``cap`` of their own, dealt round-robin, so every rank plans ``cap`` rows of every cell.

    Returns:
        ``(planned, dealt, copies)``, each ``(R, K)``: the rows every rank plans (``cap`` in
        every column), its own and moved samples among them, and the copies it sends.

    Example:
        >>> planned, dealt, copies = exchange_cells(np.array([[1, 4], [0, 0], [0, 1]]))
        >>> planned.tolist(), dealt.tolist(), copies.tolist()
        ([[1, 2], [1, 2], [1, 2]], [[1, 2], [0, 2], [0, 1]], [[2, 1], [0, 0], [0, 0]])
    """
    table = np.asarray(table, dtype=np.int64)
    ranks = table.shape[0]
    cap = -(-table.sum(axis=0) // ranks)
    keep = np.minimum(table, cap[None, :])
    dealt = keep.copy()
    copies = np.zeros_like(table)
    for c in range(table.shape[1]):
        room = cap[c] - keep[:, c]
        dealt[:, c] += _deal(int((table[:, c] - keep[:, c]).sum()), room, np.zeros_like(room))
        full = np.flatnonzero(keep[:, c] == cap[c])  # own rows at cap: the senders
        short = int((cap[c] - dealt[:, c]).sum())
        if short and full.size:
            each, extra = divmod(short, full.size)
            copies[full, c] = each
            copies[full[:extra], c] += 1
    return np.broadcast_to(cap, table.shape).copy(), dealt, copies


def _deal(count: int, room: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``count`` samples over the ranks' ``room``: up to each rank's ``slack`` first (the
    largest slack first, ties by rank), then the rest by room in rank order."""
    got = np.zeros_like(room)
    for pass_cap in (slack, room):
        order = np.argsort(-pass_cap, kind="stable") if pass_cap is slack else range(room.size)
        for r in order:
            if count == 0:
                return got
            take = min(count, int(pass_cap[r] - got[r]))
            if take > 0:
                got[r] += take
                count -= take
    return got


def exchange_moves(table: np.ndarray, planned: np.ndarray) -> np.ndarray:
    """Who hands how many samples of which cell to whom (NOTE [ Sharded plan ] 8).

    Args:
        table: ``(R, K)`` the ranks' own samples per cell.
        planned: ``(R, K)`` what they plan after the exchange (:func:`exchange_table`).

    Returns:
        ``(M, 4)`` rows ``(giver, cell, receiver, count)``, sorted (a giver's payload lists its
        given rows in this order): in each cell, the givers' excess and the receivers' room in
        rank order, merged.

    Example:
        >>> t = np.array([[6, 1], [0, 5], [3, 0]])
        >>> exchange_moves(t, exchange_table(t)).tolist()  # rank 1 gives 3 of cell 1, rank 0 ...
        [[0, 0, 1, 3], [1, 1, 0, 1], [1, 1, 2, 2]]
    """
    diff = np.asarray(table, dtype=np.int64) - np.asarray(planned, dtype=np.int64)
    rows: list[np.ndarray] = []
    for c in range(diff.shape[1]):
        give = np.maximum(diff[:, c], 0)
        take = np.maximum(-diff[:, c], 0)
        if not give.any():
            continue
        gc, tc = np.cumsum(give), np.cumsum(take)
        cuts = np.union1d(gc, tc)  # the merged boundaries of both in one line of samples
        cuts = cuts[cuts > 0]
        lo = np.concatenate([[0], cuts[:-1]])
        giver = np.searchsorted(gc, cuts, side="left")
        taker = np.searchsorted(tc, cuts, side="left")
        rows.append(np.stack([giver, np.full_like(giver, c), taker, cuts - lo], axis=1))
    if not rows:
        return np.zeros((0, 4), dtype=np.int64)
    out = np.concatenate(rows).astype(np.int64)
    return out[np.lexsort(out.T[::-1])]  # by giver, then cell, then receiver


def give_rows(
    by_cell: np.ndarray,
    counts: np.ndarray,
    moves: np.ndarray,
    *,
    rank: int,
    seed: int,
    copies: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The rows rank ``rank`` keeps and the rows it gives (NOTE [ Sharded plan ] 8).

    Args:
        by_cell: the rank's sample indices sorted by cell.
        counts: ``(K,)`` the rank's samples per cell.
        moves: every rank's moves (:func:`exchange_moves`).
        rank, seed: as the sampler's.
        copies: ``(K,)`` of the rows the moves give per cell, how many are copies the rank
            keeps too (fill, NOTE [ Sharded plan ] 9: :func:`exchange_cells`): drawn after the
            given rows, cyclically from the kept ones.

    Returns:
        ``(kept, given)``: ``by_cell`` without the given rows (still sorted by cell), and the
        given rows in the order of the rank's moves (a fixed draw from each cell, by the seed).

    Example:
        >>> m = np.array([[0, 1, 1, 2]])  # rank 0 gives 2 samples of cell 1 to rank 1
        >>> kept, given = give_rows(np.array([4, 0, 1, 2, 3]), np.array([1, 4]), m, rank=0,
        ...                         seed=0)
        >>> kept.size, given.size, sorted(kept[1:].tolist() + given.tolist())
        (3, 2, [0, 1, 2, 3])
    """
    mine = moves[moves[:, 0] == rank]
    give = np.zeros(counts.size, dtype=np.int64)
    np.add.at(give, mine[:, 1], mine[:, 3])
    start = np.concatenate([[0], np.cumsum(counts)])
    keep = np.ones(by_cell.size, dtype=bool)
    given = []
    lent = np.zeros_like(give) if copies is None else np.asarray(copies, dtype=np.int64)
    for c in np.flatnonzero(give).tolist():
        rng = np.random.default_rng(np.random.SeedSequence([seed, _EXCHANGE, rank, c]))
        moved = int(give[c] - lent[c])
        pick = start[c] + np.sort(rng.choice(int(counts[c]), moved, replace=False))
        keep[pick] = False
        given.append(by_cell[pick])
        if lent[c]:  # copies of kept rows, cyclically in a fixed order
            stay = np.flatnonzero(keep[start[c] : start[c + 1]]) + start[c]
            stay = stay[rng.permutation(stay.size)]
            given.append(by_cell[stay[np.arange(int(lent[c])) % stay.size]])
    if not given:
        return by_cell, by_cell[:0]
    return by_cell[keep], np.concatenate(given)


def take_rows(
    kept: np.ndarray,
    counts: np.ndarray,
    moves: np.ndarray,
    payloads: Sequence[np.ndarray],
    *,
    rank: int,
) -> np.ndarray:
    """Rank ``rank``'s rows sorted by cell after the exchange (NOTE [ Sharded plan ] 8): in
    every cell its kept rows, then the rows it receives, giver by giver.

    Args:
        kept: the rank's kept rows sorted by cell (:func:`give_rows`, in the index space the
            sampler yields: global row ids).
        counts: ``(K,)`` the rank's kept rows per cell.
        moves: every rank's moves (:func:`exchange_moves`).
        payloads: every rank's given rows in rank order (what the collective delivers), each
            in the order of its moves.
        rank: this rank.

    Example:
        >>> m = np.array([[0, 1, 1, 2]])  # rank 0 gives 2 samples of cell 1 to rank 1
        >>> take_rows(np.array([7, 8]), np.array([1, 1]), m, [np.array([20, 21]), None],
        ...           rank=1).tolist()
        [7, 8, 20, 21]
    """
    ends = np.cumsum(moves[:, 3])
    first = np.searchsorted(moves[:, 0], moves[:, 0])  # each giver's first move
    offset = ends - moves[:, 3] - np.concatenate([[0], ends])[first]
    parts = []
    start = np.concatenate([[0], np.cumsum(counts)])
    for c in range(counts.size):
        parts.append(kept[start[c] : start[c + 1]])
        for i in np.flatnonzero((moves[:, 1] == c) & (moves[:, 2] == rank)).tolist():
            g, n, at = int(moves[i, 0]), int(moves[i, 3]), int(offset[i])
            parts.append(np.asarray(payloads[g])[at : at + n])
    return np.concatenate(parts) if parts else kept


@dataclass(frozen=True, eq=False)
class ShardSchedule:
    """Steps per cell and what every rank places in each cell (NOTE [ Sharded plan ]).

    Attributes:
        steps: ``(K,)`` global steps of every cell.
        rows: ``(K,)`` rows of every cell's batches (its planned batch size).
        placed: ``(R, K)`` samples rank ``r`` places in cell ``c`` (its own and promoted ones).
        promoted: ``(R, K)`` samples rank ``r`` carries from cell ``c`` into the next cell.
        filler: ``(R, K)`` filler rows of rank ``r`` in cell ``c`` (``steps·rows - placed``).
    """

    steps: np.ndarray
    rows: np.ndarray
    placed: np.ndarray
    promoted: np.ndarray
    filler: np.ndarray

    @property
    def num_steps(self) -> int:
        """Steps of an epoch, on every rank."""
        return int(self.steps.sum())


def shard_schedule(
    table: np.ndarray,
    batch: np.ndarray,
    *,
    even: bool = False,
    multiple_of: int = 1,
    shared_stand_in: bool = False,
    per_cell: bool = False,
) -> ShardSchedule:
    """The schedule every rank derives alone from the ``(ranks, K)`` table of per-cell counts.

    Args:
        table: ``(R, K)`` samples of rank ``r`` in cell ``c``; cells ordered by padded length.
        batch: ``(K,)`` full batch size of every cell (the most rows a batch may have).
        even: choose each cell's rows too (NOTE [ Even batches ] in
            :mod:`bucketloader.plan.budget`): the fewest rows that hold the samples placed in
            the cell's steps, rounded up to ``multiple_of`` when ``B_c`` is a multiple of it.
            ``False``: every batch has ``B_c`` rows.
        multiple_of: the token budget's ``multiple_of``.
        shared_stand_in: every rank can hold one row of the shortest cell as a stand-in (with
            exchange, NOTE [ Sharded plan ] 8: every rank reads every row), so every cell may
            get steps; ``False``: a cell some rank has no sample at or below gets none (3).
        per_cell: every cell's slots per rank hold the most samples any rank has there, so no
            sample is promoted (with exchange and fill, NOTE [ Sharded plan ] 9: the cells are
            dealt evenly and the rest of a cell's slots hold repeats of it); needs
            ``shared_stand_in`` (a rank may have no sample of a cell with steps).

    Example:
        >>> s = shard_schedule(np.array([[5, 2], [3, 4]]), np.array([2, 2]))
        >>> s.steps.tolist(), s.placed.tolist(), s.promoted.tolist(), s.filler.tolist()
        ([2, 2], [[4, 3], [3, 4]], [[1, 0], [0, 0]], [[0, 1], [1, 0]])
        >>> e = shard_schedule(np.array([[5, 2], [3, 4]]), np.array([4, 6]), even=True)
        >>> e.steps.tolist(), e.rows.tolist(), e.promoted.tolist(), e.filler.tolist()
        ([1, 1], [3, 4], [[2, 0], [0, 0]], [[0, 0], [0, 0]])
    """
    table = np.asarray(table, dtype=np.int64)
    batch = np.asarray(batch, dtype=np.int64)
    ranks, k = table.shape
    # need[c]: slots every rank needs in cells >= c (the most samples any rank has there)
    need = np.cumsum(table[:, ::-1], axis=1)[:, ::-1].max(axis=0)
    most = table.max(axis=0)  # per_cell: a cell's slots per rank hold its fullest rank's
    reach = np.cumsum(table, axis=1) > 0  # rank r has a sample at or below cell c
    # the first cell every rank can fill (with a shared stand-in: the first with a sample)
    first = int(np.argmax(reach.any(axis=0) if shared_stand_in else reach.all(axis=0)))
    need[first] = need[: first + 1].max()
    steps = np.zeros(k, dtype=np.int64)
    rows = batch.copy()
    above = 0  # slots per rank in the cells above c
    for c in range(k - 1, first - 1, -1):
        want = int(most[c]) if per_cell else max(int(need[c]) - above, 0)
        b = int(batch[c])
        s = -(-want // b)
        r = b if (s == 0 or not even) else -(-want // s)
        if even and multiple_of > 1 and b % multiple_of == 0:
            r = min(-(-r // multiple_of) * multiple_of, b)
        steps[c], rows[c] = s, r
        above += s * r
    placed = np.zeros((ranks, k), dtype=np.int64)
    promoted = np.zeros((ranks, k), dtype=np.int64)
    carry = np.zeros(ranks, dtype=np.int64)
    for c in range(k):  # each rank places what fits, shortest cells first, and promotes the rest
        a = table[:, c] + carry
        placed[:, c] = np.minimum(a, steps[c] * rows[c])
        carry = a - placed[:, c]
        promoted[:, c] = carry
    filler = steps[None, :] * rows[None, :] - placed
    return ShardSchedule(steps=steps, rows=rows, placed=placed, promoted=promoted, filler=filler)


@dataclass(frozen=True, eq=False)
class ShardEpochPlan:
    """One rank's batches of one epoch (shard-local sample indices), in O(shard) memory.

    Attributes:
        placed: the rank's samples in batch order of each cell (cells in order), every sample
            the epoch shows once (every sample of the shard unless some are deferred).
        starts: where each step's batch starts in ``placed``.
        num_real: samples of each step's batch (0: the batch holds one stand-in, a padding row).
        cells: cell of every step's batch (its planned shape).
        stand_in: the sample an empty batch holds (a sample of the rank's shortest cell, or
            with exchange a row of the shortest cell every rank shares).
        repeats: with ``last_batch="fill"`` (NOTE [ Sharded plan ] 9), the repeated samples
            that top up the batches, batch by batch (``None`` without fill).
        repeat_starts: where each step's repeats start in ``repeats``.
        num_repeats: repeats of each step's batch (its rows less ``num_real``).
    """

    placed: np.ndarray
    starts: np.ndarray
    num_real: np.ndarray
    cells: np.ndarray
    stand_in: int
    repeats: np.ndarray | None = None
    repeat_starts: np.ndarray | None = None
    num_repeats: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.cells.size)

    def batch(self, i: int) -> np.ndarray:
        """Sample indices of step ``i``'s batch: its samples, then (``last_batch="fill"``, 9)
        its repeats; one stand-in when it has neither."""
        n = int(self.num_real[i])
        e = 0 if self.num_repeats is None else int(self.num_repeats[i])
        s = int(self.starts[i])
        if e:
            r = int(self.repeat_starts[i])  # type: ignore[index]
            return np.concatenate([self.placed[s : s + n], self.repeats[r : r + e]])  # type: ignore[index]
        if n == 0:
            return np.array([self.stand_in], dtype=self.placed.dtype)
        return self.placed[s : s + n]


def plan_shard_epoch(
    by_cell: np.ndarray,
    counts: np.ndarray,
    schedule: ShardSchedule,
    *,
    rank: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    deferred: np.ndarray | None = None,
    stand_in: int | None = None,
    fill: bool = False,
    consume: bool = False,
) -> ShardEpochPlan:
    """Rank ``rank``'s batches of ``epoch`` (NOTE [ Sharded plan ]).

    Args:
        by_cell: the rank's sample indices sorted by cell (unshuffled).
        counts: ``(K,)`` the rank's samples per cell (its row of the table).
        schedule: from :func:`shard_schedule`, the same on every rank (planned for
            ``counts - deferred``).
        rank, seed, epoch, shuffle: as the sampler's.
        deferred: ``(K,)`` the rank's samples per cell that wait for a later epoch (its row of
            :func:`defer_table`; NOTE [ Sharded plan ] 7), or ``None``.
        stand_in: the row an empty batch holds (default: the first of the rank's shortest
            cell; with exchange, NOTE [ Sharded plan ] 8, one row every rank shares).
        fill: top every batch up to its cell's rows with repeats of the rank's samples placed
            in the cell (NOTE [ Sharded plan ] 9) instead of leaving filler rows.
        consume: ``by_cell`` is this call's own (sorted for it): shuffled in place and kept
            as the plan's samples, instead of copied (when none are deferred).

    Example:
        >>> s = shard_schedule(np.array([[3, 1], [1, 2]]), np.array([2, 2]))
        >>> p = plan_shard_epoch(np.array([0, 1, 2, 3]), np.array([3, 1]), s, rank=0, seed=0,
        ...                      epoch=0, shuffle=False)
        >>> [p.batch(i).tolist() for i in range(len(p))], p.cells.tolist()
        ([[0, 1], [2, 3]], [0, 1])
        >>> f = plan_shard_epoch(np.array([3, 4, 5]), np.array([1, 2]), s, rank=1, seed=0,
        ...                      epoch=0, shuffle=False, fill=True)  # rank 1: 1 filler row
        >>> [f.batch(i).tolist() for i in range(len(f))], f.num_repeats.tolist()
        ([[3, 3], [4, 5]], [1, 0])
    """
    k = counts.size
    start = np.concatenate([[0], np.cumsum(counts)])
    rng = np.random.default_rng(np.random.SeedSequence([seed, epoch, _SHARD, rank]))
    stand_in = -1 if stand_in is None else stand_in
    takes = schedule.placed[rank]
    if deferred is None or not deferred.any():
        # every sample is shown: the pools below place the cells' samples in cell order (a
        # cell's carried samples are the previous pool's tail), so the placed samples are
        # by_cell with each cell shuffled, in place (no per-cell copies; with consume, not even
        # one of by_cell: a shard of 100 M samples is 400 MB an epoch)
        placed = by_cell if consume else by_cell.copy()
        for c in range(k):
            own = placed[start[c] : start[c + 1]]
            if shuffle:
                rng.shuffle(own)
            if stand_in < 0 and own.size:
                stand_in = int(own[0])
        placed = placed[: int(takes.sum())]
    else:
        placed, first_shown = _placed_with_deferral(
            by_cell, start, takes, deferred, rng, seed=seed, epoch=epoch, rank=rank,
            shuffle=shuffle,
        )  # fmt: skip
        stand_in = first_shown if stand_in < 0 else stand_in
    sizes = []
    at = 0
    extra: list[list[np.ndarray]] = []  # fill (9): per cell, each batch's repeats
    source = by_cell[:0]  # the samples the last cell with any placed, its repeats' source
    for c in range(k):
        take, s = int(takes[c]), int(schedule.steps[c])
        at += take
        per = np.full(s, take // s if s else 0, dtype=np.int64)
        per[: take % s if s else 0] += 1
        sizes.append(per)
        if fill:
            if take:
                source = placed[at - take : at]
            want = int(schedule.rows[c]) - per
            extra.append(_repeats(source, want, stand_in, per if take else None))
    # the steps' order: cell c's j-th of n_c batches at (j + u) / n_c, u one uniform per step
    # (0.5 unshuffled), ties by cell; built in place, one step-sized array at a time beside
    # the order (6.7 M steps of 100 M samples: 54 MB each)
    steps = schedule.steps
    total = int(steps.sum())
    step_cell = np.repeat(np.arange(k), steps)
    key = np.arange(total, dtype=np.float64)
    key -= np.repeat(np.cumsum(steps) - steps, steps)  # step_j, exact in float64 (< 2**53)
    key_ss = np.random.SeedSequence([seed, epoch]).spawn(2)[1]
    key += np.random.default_rng(key_ss).random(total) if shuffle else 0.5
    key /= np.maximum(steps, 1)[step_cell]
    pick = np.lexsort((step_cell, key))
    del key
    per_batch = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    first = np.cumsum(per_batch)
    first -= per_batch  # (where each batch starts in placed)
    fills: dict[str, np.ndarray] = {}
    if fill:
        rows = [r for part in extra for r in part]
        counts_e = np.array([r.size for r in rows], dtype=np.int64)
        starts_e = np.concatenate([[0], np.cumsum(counts_e)[:-1]]).astype(np.int64)
        fills = {
            "repeats": np.concatenate(rows) if rows else by_cell[:0],
            "repeat_starts": starts_e[pick],
            "num_repeats": counts_e[pick],
        }
    starts = first[pick]
    del first
    num_real = per_batch[pick]
    del per_batch
    return ShardEpochPlan(
        placed=placed,
        starts=starts,
        num_real=num_real,
        cells=step_cell[pick],
        stand_in=stand_in,
        **fills,
    )


def _placed_with_deferral(
    by_cell: np.ndarray,
    start: np.ndarray,
    takes: np.ndarray,
    deferred: np.ndarray,
    rng: np.random.Generator,
    *,
    seed: int,
    epoch: int,
    rank: int,
    shuffle: bool,
) -> tuple[np.ndarray, int]:
    """:func:`plan_shard_epoch`'s placed samples when some wait (NOTE [ Sharded plan ] 7): each
    cell's window of its samples (:func:`_rotation`), the previous epoch's deferred ones first,
    each part shuffled, placed cell after cell with what a cell cannot place carried into the
    next; and the stand-in (the first sample shown)."""
    placed = np.empty(int(takes.sum()), dtype=by_cell.dtype)
    carried = by_cell[:0]
    at = 0
    stand_in = -1
    for c in range(start.size - 1):
        own = by_cell[start[c] : start[c + 1]]
        d = int(deferred[c])
        if d:
            own = _rotation(own, d, seed=seed, epoch=epoch, rank=rank, cell=c, shuffle=shuffle)
            if shuffle:  # the previous epoch's deferred samples first, each part shuffled
                late = min(d, own.size) if epoch else 0
                rng.shuffle(own[:late])
                rng.shuffle(own[late:])
        elif shuffle:
            own = own.copy()
            rng.shuffle(own)
        if stand_in < 0 and own.size:
            stand_in = int(own[0])
        pool = np.concatenate([carried, own]) if carried.size else own
        take = int(takes[c])
        placed[at : at + take] = pool[:take]
        at += take
        carried = pool[take:]
    return placed, stand_in


def fill_appearances(schedule: ShardSchedule) -> int:
    """The most times one sample is in an epoch under fill (NOTE [ Sharded plan ] 9): once, plus
    the batches whose repeats take it, over every rank, from the schedule alone (no rank's
    rows: what a rank places in a cell, and which slots repeat which position of the cell's
    placed samples, :func:`_repeats`, depend on the counts only; which sample sits at a
    position changes per epoch, the most does not). ``O(steps log steps)`` per rank with filler
    rows (a rank without any repeats nothing and is skipped). Exact
    without exchange; with it only a lower bound: a row lent to another rank (a copy) is
    repeated there too (30 random exchanged plans: equal in 15, 1 to 4 below the batches' most
    in 15), so :class:`~bucketloader.sharded.ShardedSampler` does not use it there.

    Example:
        >>> s = shard_schedule(np.array([[3, 1], [1, 2]]), np.array([2, 2]))
        >>> fill_appearances(s)  # rank 1's one sample of cell 0 fills its batch of 2: twice
        2
    """
    steps = schedule.steps.astype(np.int64)
    rows = schedule.rows.astype(np.int64)
    k, total = steps.size, int(steps.sum())
    cell = np.repeat(np.arange(k), steps)
    first = np.repeat(np.cumsum(steps) - steps, steps)
    j = np.arange(total) - first  # each step's batch index within its cell
    most = 1
    for take, filler in zip(schedule.placed.astype(np.int64), schedule.filler, strict=True):
        if not filler.any():  # (no slot of this rank's repeats anything: each sample once)
            continue
        t, n = take[cell], steps[cell]
        per = t // n + (j < t % n)  # each batch's own samples (plan_shard_epoch)
        want = rows[cell] - per  # its repeats
        off = np.cumsum(take) - take  # cell c's placed samples: positions off[c] + [0, take[c])
        ends = np.cumsum(per) - np.repeat(off, steps)
        own = t > 0  # its repeats follow its own samples, cyclically, in the cell
        cells, start, count = cell[own], ends[own] % t[own], want[own]
        empty = np.flatnonzero((take == 0) & (steps > 0))  # a cell without a placed sample
        if empty.size:  # repeats the last cell's that has some, from its last sample back
            held = np.maximum.accumulate(np.where(take > 0, np.arange(k), -1))[empty]
            asked = np.bincount(cell, weights=want, minlength=k).astype(np.int64)[empty]
            most = max(most, 1 + int(asked[held < 0].sum()))  # (the stand-in)
            src, asked = held[held >= 0], asked[held >= 0]
            cells = np.concatenate([cells, src])
            start = np.concatenate([start, (take[src] - asked % take[src]) % take[src]])
            count = np.concatenate([count, asked])
        if not cells.size:
            continue
        size = take[cells]
        whole, rest = count // size, count % size  # full turns, and a partial arc
        pos = [off[cells], off[cells] + size]
        delta = [whole, -whole]
        a = start
        wraps = a + rest > size
        cut = np.where(wraps, size, a + rest)
        pos += [off[cells] + a, off[cells] + cut]
        delta += [np.ones_like(a), -np.ones_like(a)]
        pos += [off[cells][wraps], (off[cells] + a + rest - size)[wraps]]
        delta += [np.ones(int(wraps.sum()), np.int64), -np.ones(int(wraps.sum()), np.int64)]
        p, d = np.concatenate(pos), np.concatenate(delta)
        order = np.lexsort((d, p))  # (an arc ends before the next begins at one position)
        most = max(most, 1 + int(np.cumsum(d[order]).max(initial=0)))
    return most


def _repeats(
    source: np.ndarray, want: np.ndarray, stand_in: int, per: np.ndarray | None
) -> list[np.ndarray]:
    """Each batch's repeats (NOTE [ Sharded plan ] 9): ``want[j]`` for batch ``j``. Where the
    rank places samples in the cell (``per``: each batch's, in ``source`` batch after batch),
    the samples that follow batch ``j``'s own, cyclically, so a batch repeats its own only when
    the cell has fewer samples than rows; else ``source`` (the last cell's that placed any)
    from its last sample back, cyclically, or the stand-in when the rank has none yet."""
    if per is not None:
        ends = np.cumsum(per)
        return [source[(ends[j] + np.arange(want[j])) % source.size] for j in range(want.size)]
    if not source.size:
        source = np.array([stand_in], dtype=source.dtype)
    at = np.concatenate([[0], np.cumsum(want)]).astype(np.int64)
    order = source[::-1][np.arange(int(at[-1])) % source.size]
    return [order[at[j] : at[j + 1]] for j in range(want.size)]


def _rotation(
    own: np.ndarray, d: int, *, seed: int, epoch: int, rank: int, cell: int, shuffle: bool
) -> np.ndarray:
    """The ``n - d`` samples of a cell epoch ``epoch`` shows (NOTE [ Sharded plan ] 7): a
    window of a fixed order of the cell (index order unshuffled) from position
    ``epoch * (n - d)`` on, cyclically; its first ``d`` are what the previous epoch deferred."""
    n = own.size
    order = own
    if shuffle:
        order = own.copy()
        ss = np.random.SeedSequence([seed, _DEFER, rank, cell])
        np.random.default_rng(ss).shuffle(order)
    shown = n - d
    first = (epoch * shown) % n
    return np.roll(order, -first)[:shown]  # np.roll makes a new array: by_cell stays apart
