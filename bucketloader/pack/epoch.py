"""The packed epoch: a pure, vectorised function from (spec, seed, epoch, ranks) to batches of rows.

NOTE [ Packed epochs ]
The spec fixes the rows' *sizes* (which sizes share a row, how many such rows); an epoch decides
which documents fill them and in which order the rows come:

1. Deal: the documents of each size are shuffled (``SeedSequence([seed, epoch])``) and dealt
   into that size's slots of the rows. Documents of one size are interchangeable for the packing,
   so every epoch has exactly the spec's padding, while a document's row-mates are drawn afresh:
   rows do not repeat the same neighbours from epoch to epoch.
2. Rows of each row length are shuffled, and grouped into *global steps* of ``num_replicas``
   batches of ``B`` rows, one per rank. Steps are interleaved across row lengths exactly like the
   bucket sampler's cells (NOTE [ Epoch plan ] in :mod:`bucketloader.plan.epoch`): step ``j`` of
   a row length with ``S`` steps gets the key ``(j + u) / S`` and steps are sorted by key.
3. Rank ``r`` takes slot ``r`` of every step: every rank gets ``sum(S)`` batches, and at every
   step all ranks get a batch of the same shape, with no communication.

The ``q < num_replicas * B`` rows of a row length's last step follow ``last_batch``: ``"pad"``
splits them as evenly as possible over the ranks and the collator completes each batch with
all-padding rows (a rank that would get no row repeats one of the step, so no batch is empty:
``num_replicas - q`` repeats when ``q < num_replicas``); ``"fill"`` tops the step up with
``num_replicas * B - q`` repeated rows of that row length, from the start of its shuffled rows
(no padding rows; documents repeat; a longer row length with fewer rows than one step takes
shorter rows instead: NOTE [ Filling a small row length ]);
``"drop"`` leaves the ``q`` rows out (a different random set each epoch).

NOTE [ Filling a small row length ]
A row length with fewer rows than one step (``n < num_replicas * B``; the longest row length,
whose rows hold the documents no shorter row can) has one step and nothing of its own to fill
it with. ``"fill"`` repeated its ``n`` rows cyclically, so the same longest documents were
trained up to ``ceil(num_replicas * B / n)`` times an epoch (GSM8K's first 4,000 pairs at
``(256, 512)``, ``batch_size=16``: the 16 documents of the 6 rows of 512 up to 22 times an
epoch on 8 ranks; LibriSpeech frames at ``(1024, 2048)``, ``batch_size=8``: the row of 2,048
64 times; s21-pack, s22-fill). Since ``fill=2`` (the ``/fill=2`` in PackSampler's
``plan_digest``; ``/fill=3`` where the row length has fewer rows than ranks, below):

* the ``n`` rows are split over the ranks as ``"pad"`` splits a last step (``n // R`` or
  ``n // R + 1`` each; a rank that would get none repeats one document of one that no shorter
  row length holds, so every batch holds such a document, and the collator, which takes a
  batch's row length from its longest document, lays it out at that row length on every rank);
* the rest of each batch is *shorter* rows of the epoch, drawn at random
  (``SeedSequence([seed, epoch])``'s fifth child, the same draw on every rank) from the rows
  of the shorter row lengths that hold at most as many documents as a row of this length
  (so ``cu_seqlens`` keeps its planned size), those the epoch repeats least so far first
  (:func:`fill_draws`: not those their own row length's last step repeats, nor those another
  small row length drew, while others are left); those rows appear twice in the epoch, their
  documents a random set each epoch, padded to the longer row length. (Until s22-rev the rows
  a last step repeats were left out of the draw and two small row lengths drew alike: on 6
  ranks, rows of ``(16, 32, 64)`` with one row of 32 and one of 64, both drew the same 4 of 26
  rows of 16, their documents up to 14 times an epoch with ``shuffle=False``; now 4.)

The shapes, steps and ``len`` are unchanged; where no shorter row qualifies (the shortest row
length is the small one) the own rows repeat as before. Measured (``benchmarks/fill_repeats.py``,
8 ranks), the most times a document is trained in an epoch: GSM8K's first 4,000 22 -> 2; GSM8K
at ``(128, 256, 512)``, ``max_tokens=16384``, 20 -> 2; at ``(256, 512)`` 10 -> 2; Europarl at
``(64, 128, 256)`` 5 -> 2; LibriSpeech 64 -> 8 (one row of 2,048 for 8 ranks, as under
``"pad"``: the floor said below). The price is padding, as the shorter rows are padded to the
longer row length: ``report().padding`` 0.4% -> 4.1% (GSM8K at ``(256, 512)``; ``"pad"``:
11.0%), 8.7% -> 19.1% (``(128, 256, 512)``; ``"pad"``: 42.0%), 0.4% -> 7.6% (the first 4,000;
``"pad"``: 16.6%); on one rank 0.4% -> 1.1% at most.

With fewer rows than ranks (``n < R``) the documents only that row length holds are as few as
its rows (one a row where a row length is at most twice the next shorter one), and every rank's
batch needs one, so they repeat up to ``ceil(R / n)`` times an epoch whatever fills the rest:
LibriSpeech frames at ``(1024, 2048)``, ``batch_size=8``, on 8 ranks have one row of 2,048,
whose 1,226-frame utterance is the only one longer than 1,024, trained 8 times an epoch (under
``"pad"`` too; ``PackSampler`` warns, naming the way out: one row length, here 2,048, repeats
at most twice and pads 0.5% against 30%; or documents cut to the shorter row length). Until
``fill=3`` (s24-packfill) such a rank repeated the whole row, its row-mates too (the 822-frame
utterance 8 times as well): now one document of the row, padded to the row length, one that
only this row length holds, the longest first and the next ranks repeating that row the
others in turn (:func:`_lone_document`; where a row holds several, as rows of 32 beside rows
of 8 can, they share the repeats: a row of three 10-token documents on 4 ranks, 4 -> 2 each).
LibriSpeech: 88 -> 81 repeats an epoch; the most, 8, is the floor. A row length with at least
as many rows as ranks plans as under ``fill=2`` (and its ``plan_digest`` says so).

NOTE [ Balancing ranks ]
Attention costs each row about the sum of its documents' squared lengths (its *work*), and a
synchronous step waits for its slowest rank, so ranks whose rows hold long documents make the
others wait at every step. With ``balance=True`` (more than one rank), without touching the
shapes, the steps or the padding:

* the rows are :meth:`PackSpec.balanced_layout <bucketloader.pack.PackSpec.balanced_layout>`:
  the spec's rows with documents exchanged between rows of the same row length so every row's
  work is near the mean, and the rows of the heaviest steps lifted towards their step's
  heaviest row (NOTE [ Work-aware rows ] in :mod:`bucketloader.pack._work`; once per spec and
  rank count). With one row per rank and step, dealing alone cannot do better than the rows'
  own spread; with these rows it need not;
* the lifted rows always fill full steps (the ``q`` rows of the last, partial step are drawn
  from the others), so the heaviest steps stay together whatever the shuffle;
* the rows that fill the full global steps are sorted by work (after the shuffle, so ties stay
  random) and cut into consecutive groups of ``num_replicas * B`` rows: each global step holds
  rows of similar work (and, rows being nearly full, similar tokens);
* within a step the rows are dealt to ranks in snake order of work (rank ``0, 1, ..., R-1,
  R-1, ..., 0, ...``), ``B`` rows each, which evens out what is left of the differences;
* the groups are put in a random order (``SeedSequence([seed, epoch])``), so light and heavy
  steps are spread over the epoch. The rows of the last, partial step are a random set and
  follow ``last_batch`` as before; under ``"pad"`` they are dealt heaviest first to the rank
  with the least work that still takes a row (ranks take ``q // R`` or ``q // R + 1`` of them,
  as without balancing).

Every rank still computes the same global plan alone. Measured on the text length files
(``benchmarks/pack_balance.py``), max / mean work per step over 8 and 64 ranks, one or four rows
per rank, drops from 1.2-2.6 to at most about 1.04 (``benchmarks/results/pack_balance.md``). On
one rank there is nothing to balance: the plan is unchanged
(:class:`~bucketloader.pack.PackSampler` says so with a warning).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from bucketloader._validation import MAX_REPLICAS, check_bool, check_int, checks_options
from bucketloader.pack.spec import PackSpec
from bucketloader.plan.epoch import own_slots

__all__ = ["PackPlan", "plan_pack_epoch"]


@dataclass(frozen=True, eq=False)
class PackPlan:
    """One rank's packed batches for one epoch, as flat arrays.

    Attributes:
        indices: document indices of all batches, row after row, concatenated.
        offsets: batch ``i`` is ``indices[offsets[i]:offsets[i + 1]]``.
        row_offsets: row ``j`` (over the whole epoch) is ``indices[row_offsets[j]:...[j + 1]]``.
        batch_rows: batch ``i`` holds rows ``batch_rows[i]:batch_rows[i + 1]``.
        kinds: row-length index of every batch.

    Example:
        >>> spec = PackSpec.build([5, 3, 2, 5, 3, 2], row_length=8, batch_size=2)
        >>> plan = plan_pack_epoch(spec, shuffle=False)  # a PackPlan
        >>> plan.indices.tolist(), plan.offsets.tolist(), plan.row_offsets.tolist()
        ([0, 1, 3, 4, 2, 5], [0, 4, 6], [0, 2, 4, 6])
        >>> len(plan), plan.batch(0), plan.rows(0)
        (2, [0, 1, 3, 4], [[0, 1], [3, 4]])
    """

    indices: np.ndarray
    offsets: np.ndarray
    row_offsets: np.ndarray
    batch_rows: np.ndarray
    kinds: np.ndarray

    def __len__(self) -> int:
        return int(self.kinds.size)

    def batch(self, i: int) -> list[int]:
        """Document indices of batch ``i``, row after row."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch index {i} is out of range for an epoch of {len(self)} batches")
        i %= len(self)
        return self.indices[self.offsets[i] : self.offsets[i + 1]].tolist()

    def rows(self, i: int) -> list[list[int]]:
        """The rows of batch ``i`` (lists of document indices)."""
        i %= len(self)
        lo, hi = int(self.batch_rows[i]), int(self.batch_rows[i + 1])
        ro = self.row_offsets
        return [self.indices[ro[j] : ro[j + 1]].tolist() for j in range(lo, hi)]


@checks_options
def plan_pack_epoch(
    spec: PackSpec,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    num_replicas: int = 1,
    rank: int = 0,
    balance: bool = False,
) -> PackPlan:
    """Rank ``rank``'s packed batches for ``epoch`` (NOTE [ Packed epochs ] in this module).

    Pure and deterministic in its arguments; randomness only from
    ``numpy.random.SeedSequence([seed, epoch])``. ``balance=True`` deals rows to ranks so that
    every step's attention work is even across ranks (NOTE [ Balancing ranks ]; no effect on one
    rank).

    Example:
        >>> spec = PackSpec.build([5, 3, 2, 5, 3, 2], row_length=8, batch_size=2)
        >>> plan = plan_pack_epoch(spec, shuffle=False)
        >>> [plan.rows(i) for i in range(len(plan))]
        [[[0, 1], [3, 4]], [[2, 5]]]
    """
    seed = check_int("seed", seed, minimum=0)
    epoch = check_int("epoch", epoch, minimum=0)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
    rank = check_int("rank", rank, minimum=0, maximum=num_replicas - 1)
    balance = check_bool("balance", balance)
    # (children by index: a fifth leaves the first four, and so every other draw, unchanged)
    deal_ss, row_ss, key_ss, balance_ss, fill_ss = np.random.SeedSequence([seed, epoch]).spawn(5)
    balance = balance and num_replicas > 1
    if balance:
        slots, row_offsets, row_kind, work, lifted = spec.balanced_layout(num_replicas)
    else:
        slots, row_offsets, row_kind = spec.layout
    pools = spec.by_size
    if shuffle:  # one in-place shuffle per size pool
        pools, rng = pools.copy(), np.random.default_rng(deal_ss)
        starts = spec.pool_starts.tolist()
        for lo, hi in itertools.pairwise(starts):
            if hi - lo > 1:
                rng.shuffle(pools[lo:hi])
    # rows of every row length, shuffled, concatenated by row length
    n_kinds = len(spec.row_lengths)
    by_kind = np.argsort(row_kind, kind="stable")
    counts = spec.rows_per_length
    kind_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if shuffle:
        rng = np.random.default_rng(row_ss)
        for s, n in zip(kind_start.tolist(), counts.tolist(), strict=True):
            rng.shuffle(by_kind[s : s + n])
    bsz_k = np.asarray(spec.batch_sizes, dtype=np.int64)
    full, q = spec.steps(num_replicas)
    if balance:
        rows_full = full * bsz_k * num_replicas
        order_ss = balance_ss if shuffle else None
        for s, n in zip(kind_start.tolist(), counts.tolist(), strict=True):
            mine = by_kind[s : s + n]  # lifted rows first: the last q rows are never lifted
            by_kind[s : s + n] = np.concatenate([mine[lifted[mine]], mine[~lifted[mine]]])
        _balance(by_kind, kind_start, rows_full, work, spec.batch_sizes, num_replicas, order_ss)
        if spec.last_batch == "pad":
            _balance_last(by_kind, kind_start + rows_full, q, work, num_replicas)
    steps = spec.num_steps(num_replicas)
    total = int(steps.sum())
    step_kind = np.repeat(np.arange(n_kinds), steps)
    step_j = np.arange(total) - np.repeat(np.cumsum(steps) - steps, steps)
    u = np.random.default_rng(key_ss).random(total) if shuffle else 0.5
    key = (step_j + u) / np.maximum(steps[step_kind], 1)
    pick = np.lexsort((step_kind, key))
    sk, sj = step_kind[pick], step_j[pick]
    bsz = bsz_k[sk]
    base = sj * num_replicas * bsz
    start, size = base + rank * bsz, bsz.copy()
    last = sj == full[sk]
    if spec.last_batch == "pad" and last.any():
        ql = q[sk[last]]
        lo, extra = ql // num_replicas, ql % num_replicas
        s_size = lo + (rank < extra)
        s_start = base[last] + rank * lo + np.minimum(rank, extra)
        s_start = np.where(s_size == 0, base[last] + rank, s_start)  # repeat a row: never empty
        start[last], size[last] = s_start, np.maximum(s_size, 1)
    batch_rows = np.concatenate([[0], np.cumsum(size)])
    within = np.arange(batch_rows[-1]) - np.repeat(batch_rows[:-1], size)
    pos = (np.repeat(start, size) + within) % np.repeat(counts[sk], size)  # repeats wrap around
    rows = by_kind[pos + np.repeat(kind_start[sk], size)]
    lone: list[tuple[int, int, int]] = []  # (row, row length, turn): one document of the row
    if spec.last_batch == "fill":  # NOTE [ Filling a small row length ]
        ss = fill_ss if shuffle else None
        where = (by_kind, kind_start, row_offsets, row_kind)
        for k, own, fill in _small_fills(spec, num_replicas, *where, ss, rank):
            i = int(np.flatnonzero(sk == k)[0])  # (its one step)
            rows[batch_rows[i] : batch_rows[i + 1]] = np.concatenate([own, fill])
            n = int(q[k])
            if rank >= n:  # no row of its own: a repeat of row rank % n, its (rank // n)-th
                lone.append((int(batch_rows[i]), k, rank // n - 1))
    # documents of those rows, in order
    lo_doc = row_offsets[rows]
    ndoc = row_offsets[rows + 1] - lo_doc
    for j, k, turn in lone:  # one document no shorter row length holds, each in turn
        lo_doc[j] += _lone_document(spec, slots[lo_doc[j] : lo_doc[j] + ndoc[j]], k, turn)
        ndoc[j] = 1
    my_row_offsets = np.concatenate([[0], np.cumsum(ndoc)])
    flat = np.repeat(lo_doc - my_row_offsets[:-1], ndoc) + np.arange(my_row_offsets[-1])
    indices = pools[slots[flat]]
    return PackPlan(
        indices=indices,
        offsets=my_row_offsets[batch_rows],
        row_offsets=my_row_offsets,
        batch_rows=batch_rows,
        kinds=sk,
    )


def _lone_document(spec: PackSpec, row_slots: np.ndarray, k: int, turn: int) -> int:
    """The position in a row of row length ``k`` of the document that a rank without a row of
    its own repeats at its ``turn`` (0 for the first such rank repeating the row): the row's
    documents longer than the next shorter row length (those only ``k`` holds, so the collator
    lays the batch out at ``k``), longest first, in turn (NOTE [ Filling a small row
    length ])."""
    sizes = spec.sizes[spec.by_size[row_slots]]
    order = np.argsort(-sizes, kind="stable")
    longer = order[sizes[order] > spec.row_lengths[k - 1]]
    return int(longer[turn % longer.size]) if longer.size else int(order[0])


def fill_pools(
    spec: PackSpec, num_replicas: int, row_offsets: np.ndarray, row_kind: np.ndarray
) -> dict[int, np.ndarray]:
    """Under ``last_batch="fill"``, per small row length (fewer rows than one step on
    ``num_replicas`` ranks) that has shorter rows to fill its step with: those rows, in layout
    order (NOTE [ Filling a small row length ]). Empty under another policy."""
    if spec.last_batch != "fill":
        return {}
    full, q = spec.steps(num_replicas)
    ndoc = np.diff(row_offsets)
    out = {}
    for k in np.flatnonzero((full == 0) & (q > 0)).tolist():
        cap = spec.max_documents[k] // spec.batch_sizes[k]  # (the most a row of k holds)
        pool = np.flatnonzero((row_kind < k) & (ndoc <= cap))
        if pool.size:  # (else the shortest row length: its own rows repeat, as before)
            out[k] = pool
    return out


def fill_draws(
    spec: PackSpec,
    num_replicas: int,
    by_kind: np.ndarray,
    row_offsets: np.ndarray,
    row_kind: np.ndarray,
    ss: np.random.SeedSequence | None,
) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The filling rows of every small row length's step, over all ranks in rank order, and
    each row's appearances in the epoch beyond its first (NOTE [ Filling a small row length ]):
    each step takes the shorter rows the epoch repeats least so far (a random order among
    equals; ``ss=None``: layout order), so the rows a longer row length's last step repeats, or
    that another small row length drew, are drawn only when no other is left."""
    pools = fill_pools(spec, num_replicas, row_offsets, row_kind)
    extra = np.zeros(row_kind.size, dtype=np.int64)
    q = spec.steps(num_replicas)[1]
    per_step = np.asarray(spec.batch_sizes, dtype=np.int64) * num_replicas
    start = np.concatenate([[0], np.cumsum(spec.rows_per_length)[:-1]])
    for j in np.flatnonzero(q > 0).tolist():  # the repeats of the row lengths' own last steps
        mine = by_kind[start[j] : start[j] + spec.rows_per_length[j]]
        n = int(q[j])
        if j in pools:  # its own rows, split over the ranks (one repeated for a rank without)
            first, owns = own_slots(n, num_replicas)
            taken = [(f + np.arange(c)) % n for f, c in zip(first, owns, strict=True)]
            np.add.at(extra, mine[np.concatenate(taken)], 1)
            extra[mine] -= 1
        else:  # the last step wraps round to the start of the row length's rows (all of
            # them, several times, where they are fewer than a step)
            np.add.at(extra, mine[np.arange(int(per_step[j]) - n) % mine.size], 1)
    rng = None if ss is None or not pools else np.random.default_rng(ss)
    draws = {}
    for k, pool in pools.items():  # (increasing k; one draw per small row length, every rank)
        if rng is not None:
            pool = rng.permutation(pool)
        pool = pool[np.argsort(extra[pool], kind="stable")]  # the least repeated first
        owned = int(own_slots(int(q[k]), num_replicas)[1].sum())
        take = pool[np.arange(int(per_step[k]) - owned) % pool.size]
        np.add.at(extra, take, 1)
        draws[k] = take
    return draws, extra


def _small_fills(
    spec: PackSpec,
    num_replicas: int,
    by_kind: np.ndarray,
    kind_start: np.ndarray,
    row_offsets: np.ndarray,
    row_kind: np.ndarray,
    ss: np.random.SeedSequence | None,
    rank: int,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Rank ``rank``'s batch of every small row length that :func:`fill_pools` fills:
    ``(row length index, its own rows, the filling rows)``, from :func:`fill_draws`."""
    draws, _ = fill_draws(spec, num_replicas, by_kind, row_offsets, row_kind, ss)
    _, q = spec.steps(num_replicas)
    out = []
    for k, take in draws.items():
        b, n = spec.batch_sizes[k], int(q[k])
        first, owns = own_slots(n, num_replicas)
        own = by_kind[kind_start[k] + (first[rank] + np.arange(owns[rank])) % n]
        before = int((b - owns[:rank]).sum())  # (fill slots of the ranks before this one)
        out.append((k, own, take[before : before + b - owns[rank]]))
    return out


def _balance(
    by_kind: np.ndarray,
    kind_start: np.ndarray,
    full_rows: np.ndarray,
    work: np.ndarray,
    batch_sizes: tuple[int, ...],
    num_replicas: int,
    ss: np.random.SeedSequence | None,
) -> None:
    """Reorder, in place, the rows of each row length's full global steps (NOTE [ Balancing
    ranks ]); ``ss=None`` (no shuffle) keeps the steps in order of work."""
    rng = None if ss is None else np.random.default_rng(ss)
    for k, (start, n) in enumerate(zip(kind_start.tolist(), full_rows.tolist(), strict=True)):
        if n == 0:
            continue
        per_step = num_replicas * batch_sizes[k]
        rows = by_kind[start : start + n]
        ranked = rows[np.argsort(work[rows], kind="stable")].reshape(-1, per_step)
        # snake: the p-th lightest row of a step goes to rank p % R (even rounds) or
        # R - 1 - p % R (odd rounds); rank r's rows are then slots r * B ... (r + 1) * B - 1
        p = np.arange(per_step)
        rnd, i = p // num_replicas, p % num_replicas
        owner = np.where(rnd % 2 == 0, i, num_replicas - 1 - i)
        slot = owner * batch_sizes[k] + rnd
        dealt = np.empty_like(ranked)
        dealt[:, slot] = ranked
        if rng is not None:
            dealt = dealt[rng.permutation(dealt.shape[0])]
        by_kind[start : start + n] = dealt.reshape(-1)


def _balance_last(
    by_kind: np.ndarray,
    last_start: np.ndarray,
    q: np.ndarray,
    work: np.ndarray,
    num_replicas: int,
) -> None:
    """Reorder, in place, the ``q`` rows of each row length's last step under ``"pad"``: rank
    ``r`` takes the next ``q // R + (r < q % R)`` rows; deal them heaviest first to the rank
    with the least work among those with room (NOTE [ Balancing ranks ])."""
    for start, n in zip(last_start.tolist(), q.tolist(), strict=True):
        if n <= num_replicas:  # at most one row per rank: nothing to even out
            continue
        rows = by_kind[start : start + n]
        lo, extra = divmod(n, num_replicas)
        room = [lo + (r < extra) for r in range(num_replicas)]
        load = [0] * num_replicas
        mine: list[list[int]] = [[] for _ in range(num_replicas)]
        for row in rows[np.argsort(-work[rows], kind="stable")].tolist():
            r = min((r for r in range(num_replicas) if room[r]), key=load.__getitem__)
            mine[r].append(row)
            room[r] -= 1
            load[r] += int(work[row])
        by_kind[start : start + n] = [row for rank_rows in mine for row in rank_rows]
