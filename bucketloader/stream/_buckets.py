"""The bucket filler: one worker's pass of :class:`~bucketloader.BucketIterable`, shuffle buffer
→ per-bucket buffers → batches, over the engine of :mod:`bucketloader.stream._engine`.

NOTE [ Exact resume of a buffered stream ]
Samples wait in the shuffle buffer and the bucket buffers, so the source's position says nothing
about them on its own. The state records, instead of samples, their *positions* in this worker's
stream: ``read`` (samples read so far), the positions in each buffer slot, the random generator
(block start state + draws used) and a source checkpoint at a position ``p <= `` the oldest
buffered sample. Resuming restores the source at ``p`` (``load_state_dict``; a source without
state restarts the epoch, ``p = 0``), re-reads samples ``p .. read - 1`` keeping only the buffered
positions (the rest were already yielded), puts them back in their slots, restores the generator
and carries on (a source read by index skips the re-read: it fetches the buffered positions and
reopens at ``read``, NOTE [ Seeking a source ] in :mod:`bucketloader.stream.source`): the
remaining batches are exactly those of the uninterrupted run. Checkpoints are taken every ``K``
samples (``K`` ~ buffer capacity) and pruned to the newest one at or before the
oldest buffered sample; the state lists those that precede a buffered sample, and a resume reads
from each only to its last buffered sample (at most ``K`` samples per checkpoint). The state
holds ints only (JSON-serialisable), plus the source's own states.
"""

from __future__ import annotations

import heapq
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader.boundaries import BucketLookup
from bucketloader.plan.limits import ZERO_LENGTH_HARM
from bucketloader.plan.table import PlannedBatch
from bucketloader.stream._engine import Pass
from bucketloader.stream._schedule import lane_cells
from bucketloader.stream.counters import RefusedResume
from bucketloader.stream.source import check_length

STATE_FORMAT = 2
#: How ``last_batch="fill"`` completes a short batch, recorded in a fill stream's state
#: ``config`` (``"fill"``; absent: 1, copies of the batch's own samples; 2: the samples the
#: bucket handed out last first, NOTE [ What a stream's fill repeats ] in
#: :mod:`bucketloader.stream.resume`). A state of another version is refused.
FILL_VERSION = 2
_BLOCK = 1024
#: The counters of a pass (NOTE [ Where the report's numbers come from ]).
STATS = (
    "too_short",
    "too_long",
    "oversize",
    "truncated",
    "tail_dropped",
    "repeated",
    "promoted",
    "padded_rows",
    "left_over",
    "skipped",
    "zero_length",
)


class Draws:
    """Uniform draws in blocks (fast), with a small exact state: block start + draws used."""

    def __init__(self, seed_seq: np.random.SeedSequence) -> None:
        self.rng = np.random.default_rng(seed_seq)
        self.refill()

    def refill(self) -> None:
        """Draw the next block, remembering the generator state it starts from."""
        self.start = self.rng.bit_generator.state
        self.block = self.rng.random(_BLOCK).tolist()
        self.used = 0

    def index(self, n: int) -> int:
        """A uniform index in ``[0, n)``."""
        if self.used == _BLOCK:
            self.refill()
        u = self.block[self.used]
        self.used += 1
        return int(u * n)

    def state(self) -> dict[str, Any]:
        return {"start": self.start, "used": self.used}

    def restore(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["start"]
        self.refill()
        self.used = int(state["used"])


@dataclass(frozen=True)
class BucketConfig:
    """Everything a pass needs from its :class:`~bucketloader.stream.BucketIterable`.

    Attributes:
        source: the samples.
        measure: ``sample -> length`` (one input) or ``sample -> tuple of lengths``.
        lookups: per input, the bucket of a length (the stream's cell is the lattice code).
        names: the bucketed inputs' names (for messages).
        batch_sizes: ``B`` per cell.
        last_batch: the end-of-stream policy.
        shuffle_buffer: samples in the shuffle buffer (0: off).
        seed: the stream's seed.
        overflow: ``"error"``, ``"drop"`` or a ``(sample, lengths) -> sample`` cut.
        stateful: whether to checkpoint the source (``state_dict``/``load_state_dict``).
        seekable: whether a resume reads the source by index (NOTE [ Seeking a source ] in
            :mod:`bucketloader.stream.source`).
        config: the stream's configuration, stored in every state (checked on load).
        minimum: per input, the shortest admitted length (0: no limit).
        maximum: per input, the longest admitted length (``max_length`` or the last boundary).
        cell_size: per cell, its padded size (the sum of its padded lengths).
        counters: the shared :class:`~bucketloader.stream.counters.LaneCounters`, or ``None``.
        schedule: per-cell step shares of a stream split over ranks (NOTE [ A stream split
            over ranks ]), or ``None`` for one pass over the source.
        steps: ``steps_per_epoch`` with a schedule.
        rank: this rank (for messages).
        covers: per cell, the cells it covers (shorter in every input), nearest first.
        shapes: per cell, its full planned batch shape (carried by scheduled batches).
        cut: ``(sample, lengths, limits) -> sample`` cutting a sample to ``limits`` (stand-ins).
        lane_states: the workers' checkpoints (:class:`~bucketloader.stream.resume.LaneStates`),
            or ``None``.
        template: a sample of this rank's shard, or borrowed from another rank when this one
            is empty (NOTE [ A stream split over ranks ]): the structure of a padding row for a
            lane that reads no sample at all; ``None``: none anywhere.
    """

    source: Any
    measure: Callable[[Any], Any]
    lookups: tuple[BucketLookup, ...]
    names: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    last_batch: str
    shuffle_buffer: int
    seed: int
    overflow: Any
    stateful: bool
    seekable: bool
    config: dict[str, Any]
    minimum: tuple[int, ...] = ()
    maximum: tuple[int, ...] = ()
    cell_size: tuple[int, ...] = ()
    counters: Any = None
    schedule: Any = None
    steps: int = 0
    rank: int = 0
    covers: tuple[tuple[int, ...], ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()
    cut: Any = None
    template: Any = None
    lane_states: Any = None

    @property
    def limits(self) -> list[int]:
        """The longest admitted length of each input."""
        return list(self.maximum) or [lookup.limit for lookup in self.lookups]

    def cell(self, lengths: tuple[int, ...]) -> int:
        """Cell id (lattice code, first input most significant) of lengths within the limits."""
        code = 0
        for length, lookup in zip(lengths, self.lookups, strict=True):
            code = code * lookup.boundaries.size + lookup(length)
        return code


class BucketPass(Pass):
    """Shuffle and bucket buffers of one pass; :meth:`run` is the generator of batches."""

    STATE_FORMAT = STATE_FORMAT
    OWNER = "BucketIterable"
    HELD = "its shuffle buffer, bucket buffers and the samples a fill or a dry step reuses"

    def __init__(
        self, cfg: BucketConfig, epoch: int, worker: tuple[int, int], *, skip: int = 0
    ) -> None:
        every = max(64, sum(cfg.batch_sizes) + cfg.shuffle_buffer)
        super().__init__(cfg, epoch, worker, skip=skip, stats=STATS, every=every)
        owner = cfg
        self.shuffle: list[tuple[int, Any, int, int]] = []  # (position, sample, cell, size)
        self.bpos: list[list[int]] = [[] for _ in owner.batch_sizes]  # positions per cell
        self.bsam: list[list[Any]] = [[] for _ in owner.batch_sizes]  # samples per cell
        self.draws = Draws(np.random.SeedSequence([owner.seed, epoch, worker[0], 0x5742]))
        k = len(owner.batch_sizes)
        self.cell_stats = [[0] * k for _ in range(4)]  # per cell: batches, rows, real, padded
        self.blen: list[list[int]] = [[] for _ in range(k)]  # sizes of the buffered samples
        self.sizes = owner.batch_sizes
        self.stateful = owner.stateful
        one = len(owner.lookups) == 1 and owner.schedule is None
        lookup = owner.lookups[0] if one else None
        self._table = None if lookup is None else lookup.table  # the hot path indexes it directly
        # (length 0 takes the general path, which counts it: NOTE [ Samples of length 0 ])
        self._lo = max(owner.minimum[0] if owner.minimum else 0, 1)
        self._hi = owner.limits[0]
        self._oversize = any(b == 0 for b in owner.batch_sizes)
        # a lane's last batch per cell, and with last_batch="fill" also a one-pass stream's
        # (NOTE [ What a stream's fill repeats ] in bucketloader.stream.resume): (sample, size)
        self._last: dict[int, list[tuple[Any, int]]] = {}
        self._fills = owner.last_batch == "fill"
        # a one-pass stream's last two batches per cell, newest first, not yet in _last
        self._pending: dict[int, list[tuple[list[Any], list[int]]]] = {}
        # appearances in this pass of the samples a fill repeated (by position; others: 1)
        self._seen: dict[int, int] = {}
        self._keep_last = self._fills and owner.schedule is None  # (scheduled: always kept)
        self._template: Any = None  # the first sample of the pass (stand-in rows)
        self._fits: dict[int, Any] = {}  # the first sample of each cell (stand-in rows)
        # their stream positions (the exact state of a scheduled pass over a seekable source)
        self._last_pos: dict[int, list[int]] = {}
        self._fit_pos: dict[int, int] = {}
        self._fit_size: dict[int, int] = {}  # (and their sizes: NOTE [ A stream state over a
        # source without a length ] in bucketloader.stream._engine)
        self._exhausted = False
        self.buffered = 0
        self._got: dict[int, tuple[Any, int, int]] = {}  # samples taken back by a resume

    # -- per sample -----------------------------------------------------------------------
    def prepare(self, pos: int, sample: Any) -> tuple[Any, int, int] | None:
        """``(sample, cell, size)`` after the length filters and the overflow policy, or
        ``None`` when the sample is left out (counted)."""
        table = self._table
        if table is None:
            return self._prepare_general(pos, sample)
        length = self.o.measure(sample)
        if type(length) is not int or length < 0:
            length = check_length(length, pos)
        if length > self._hi or length < self._lo:
            return self._prepare_general(pos, sample)
        cell = table[length]
        if self._oversize and self.sizes[cell] == 0:
            self.stats["oversize"] += 1
            return None
        return sample, cell, length

    def _measure(self, pos: int, sample: Any) -> tuple[int, ...]:
        o = self.o
        got = o.measure(sample)
        got = (got,) if len(o.lookups) == 1 else got
        if not isinstance(got, (tuple, list)) or len(got) != len(o.lookups):
            raise ValueError(
                f"length_fn must return {len(o.lookups)} lengths per sample (one per input "
                f"{list(o.names)}), got {got!r} for sample {pos}"
            )
        return tuple(check_length(x, pos) for x in got)

    def _prepare_general(self, pos: int, sample: Any) -> tuple[Any, int, int] | None:
        o = self.o
        limits = o.limits
        lengths = self._measure(pos, sample)
        policy = o.overflow
        short = [
            d for d, (n, lo) in enumerate(zip(lengths, o.minimum or (), strict=False)) if n < lo
        ]
        if short:
            d = short[0]
            if policy == "error":
                what = "" if len(o.names) == 1 else f"input {o.names[d]!r} "
                raise ValueError(
                    f"sample {pos} of this worker's stream has {what}length {lengths[d]} < "
                    f"min_length={o.minimum[d]}; pass overflow='drop' to skip such samples, or "
                    "lower min_length"
                )
            self.stats["too_short"] += 1
            return None
        over = [d for d, (n, lim) in enumerate(zip(lengths, limits, strict=True)) if n > lim]
        if over:
            d = over[0]
            what = "" if len(o.names) == 1 else f"input {o.names[d]!r} "
            if policy == "error":
                last = o.lookups[d].limit
                bound = (
                    f"the last boundary {last}" if limits[d] == last else f"max_length={limits[d]}"
                )
                raise ValueError(
                    f"sample {pos} of this worker's stream has {what}length {lengths[d]} > "
                    f"{bound}; pass overflow='drop' or 'truncate', or boundaries whose last "
                    "value covers it"
                )
            if policy == "drop":
                self.stats["too_long"] += 1
                return None
            sample = policy(sample, lengths)
            self.stats["truncated"] += 1
            lengths = self._measure(pos, sample)
            if any(n > lim for n, lim in zip(lengths, limits, strict=True)):
                raise ValueError(
                    f"the overflow policy left sample {pos} at lengths {list(lengths)}, beyond "
                    f"the limits {limits}"
                )
        cell = o.cell(lengths)
        if self._oversize and self.sizes[cell] == 0:
            self.stats["oversize"] += 1
            return None
        if 0 in lengths:  # kept: NOTE [ Samples of length 0 ] in bucketloader.plan.limits
            self.stats["zero_length"] += 1
            if self.stats["zero_length"] == 1:
                warnings.warn(
                    "this BucketIterable keeps samples of length 0 (report().totals"
                    f"['zero_length'] counts them): {ZERO_LENGTH_HARM}",
                    UserWarning,
                    stacklevel=2,
                )
        return sample, cell, sum(lengths)

    def _add(self, pos: int, sample: Any, bucket: int, size: int) -> list[Any] | None:
        buf = self.bsam[bucket]
        buf.append(sample)
        self.bpos[bucket].append(pos)
        self.blen[bucket].append(size)
        if len(buf) < self.sizes[bucket]:
            return None
        return self._emit(bucket)

    def _emit(self, bucket: int) -> list[Any]:
        """Hand out the full buffer of ``bucket`` as a batch (the caller checked it is full)."""
        buf = self.bsam[bucket]
        self._count(bucket, len(buf), sum(self.blen[bucket]), self.sizes[bucket])
        # (its newest sample: NOTE [ A stream state that holds no sample ] in stream._engine)
        self.anchor = (self.bpos[bucket][-1], 0, self.blen[bucket][-1])
        if self._keep_last:  # what the tail's fill tops up from (a copy: buf is the user's);
            # the samples are paired with their sizes only when the tail needs them (_settle)
            pending = self._pending.get(bucket, [])
            self._pending[bucket] = [(list(buf), self.blen[bucket]), *pending[:1]]
            kept = self._last_pos.get(bucket, [])[: len(buf)]
            self._last_pos[bucket] = self.bpos[bucket] + kept
        self.bsam[bucket], self.bpos[bucket], self.blen[bucket] = [], [], []
        self.batches += 1
        return buf

    def _count(self, cell: int, rows: int, real: int, alloc: int) -> None:
        """Count a batch of ``rows`` samples of ``real`` elements, allocated as ``alloc`` rows."""
        cs = self.cell_stats
        cs[0][cell] += 1
        cs[1][cell] += rows
        cs[2][cell] += real
        cs[3][cell] += alloc * self.o.cell_size[cell]
        if alloc != rows:
            self.stats["padded_rows"] += alloc - rows
        self._trace_batch(rows, real)

    def _cells(self) -> np.ndarray:
        return np.asarray(self.cell_stats, dtype=np.int64)

    # -- the pass ---------------------------------------------------------------------------
    def _batches(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        """The batches of this lane's pass (one pass, or the scheduled steps)."""
        if self.o.schedule is not None:
            return self._run_scheduled(it)
        return self._run(it)

    def _run(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        size = self.o.shuffle_buffer
        shuf = self.shuffle
        if self.phase == "stream":
            prepare, stateful, every = self.prepare, self.stateful, self.every
            draws = self.draws
            # _add inlined (a stream reads millions of samples)
            bsam, bpos, blen, sizes, emit = self.bsam, self.bpos, self.blen, self.sizes, self._emit
            for sample in it:
                pos = self.read
                self.read = pos + 1
                if stateful and self.read % every == 0:
                    self._snapshot()
                got = prepare(pos, sample)
                if got is None:
                    self.left_out()
                    continue
                if size:  # through the shuffle buffer: add the sample it swaps out
                    entry = (pos, *got)
                    if len(shuf) < size:
                        shuf.append(entry)
                        continue
                    if draws.used == _BLOCK:
                        draws.refill()
                    j = int(draws.block[draws.used] * size)  # Draws.index, inlined
                    draws.used += 1
                    entry, shuf[j] = shuf[j], entry
                    pos, sample, cell, n = entry
                else:
                    sample, cell, n = got
                buf = bsam[cell]
                buf.append(sample)
                bpos[cell].append(pos)
                blen[cell].append(n)
                if len(buf) >= sizes[cell]:
                    yield emit(cell)
            self.phase = "flush"
        while shuf:
            j = self.draws.index(len(shuf))
            entry = shuf[j]
            shuf[j] = shuf[-1]
            shuf.pop()
            batch = self._add(*entry)
            if batch is not None:
                yield batch
        self.phase = "tail"
        yield from self._tail()
        self.phase = "done"

    # -- a stream split over ranks (NOTE [ A stream split over ranks ]) -----------------------
    def _run_scheduled(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        o = self.o
        lane, lanes = self.worker
        cells = lane_cells(o.schedule, o.steps, o.seed, self.epoch, lane, lanes, self.batches)
        self._src = it  # from the start, or where an exact state stopped (self.batches steps)
        cap = max(64, 2 * sum(o.batch_sizes))
        for c in cells:
            batch, real = self._fill(c, cap)
            self.batches += 1
            yield PlannedBatch(batch, planned_shape=o.shapes[c], num_real=real)
        self.stats["left_over"] = self.buffered + len(self.shuffle)

    def _pull(self) -> None:
        """Read the shard until one sample lands in a cell buffer, or mark it exhausted."""
        size, shuf = self.o.shuffle_buffer, self.shuffle
        for sample in self._src:
            pos = self.read
            self.read = pos + 1
            if self.stateful and self.read % self.every == 0:
                self._snapshot()
            got = self.prepare(pos, sample)
            if got is None:
                self.left_out()
                continue
            entry = (pos, *got)
            if size:
                if len(shuf) < size:
                    shuf.append(entry)
                    continue
                j = self.draws.index(size)
                entry, shuf[j] = shuf[j], entry
            self._put(*entry)
            return
        while shuf:  # the shard ended: its shuffle buffer goes to the cell buffers
            j = self.draws.index(len(shuf))
            entry = shuf[j]
            shuf[j] = shuf[-1]
            shuf.pop()
            self._put(*entry)
        self._exhausted = True

    def _put(self, pos: int, sample: Any, cell: int, size: int) -> None:
        if cell not in self._fits:  # the first sample of each cell: a stand-in that fits
            self._fits[cell] = sample
            self._fit_pos[cell] = pos
            self._fit_size[cell] = size
            if self._template is None:
                self._template = sample
        self.bsam[cell].append(sample)
        self.bpos[cell].append(pos)
        self.blen[cell].append(size)
        self.buffered += 1

    def _take(self, cell: int, m: int, batch: list[Any], lens: list[int], at: list[int]) -> int:
        """Move up to ``m`` of ``cell``'s oldest buffered samples into ``batch`` (their
        positions into ``at``)."""
        got = self.bsam[cell][:m]
        if got:
            batch += got
            lens += self.blen[cell][: len(got)]
            at += self.bpos[cell][: len(got)]
            del self.bsam[cell][: len(got)], self.bpos[cell][: len(got)]
            del self.blen[cell][: len(got)]
            self.buffered -= len(got)
        return len(got)

    def _gather(
        self, cell: int, need: int, batch: list[Any], lens: list[int], at: list[int]
    ) -> None:
        """Fill ``batch`` from ``cell``, then from the cells it covers, nearest first."""
        self._take(cell, need, batch, lens, at)
        for other in self.o.covers[cell]:
            if len(batch) >= need:
                break
            self.stats["promoted"] += self._take(other, need - len(batch), batch, lens, at)

    def _fill(self, cell: int, cap: int) -> tuple[list[Any], int]:
        """One scheduled batch of ``cell`` and its number of real samples (the planned
        fallback of NOTE [ A stream split over ranks ])."""
        need = self.sizes[cell]
        while len(self.bsam[cell]) < need and self.buffered < cap and not self._exhausted:
            self._pull()
        batch: list[Any] = []
        lens: list[int] = []
        at: list[int] = []
        self._gather(cell, need, batch, lens, at)
        while not batch and not self._exhausted:  # nothing fits yet: read past the capacity
            self._pull()
            self._gather(cell, need, batch, lens, at)
        self.dry += not batch and not self.buffered and not self.shuffle  # (nothing left at all)
        fill = self._fills
        if fill:  # a short batch, or none (the shard is dry): topped up with repeats
            self._top_up(cell, need, batch, lens, at)
        elif batch:
            self._last[cell] = list(zip(batch, lens, strict=True))
            self._last_pos[cell] = at
        real = len(batch)
        if not batch:  # nothing real fits: stand-ins the collator turns into padding rows
            stand_in = self._stand_in(cell)
            batch = [] if stand_in is None else [stand_in] * (need if fill else 1)
            lens = [0] * len(batch)
        self._count(cell, real, sum(lens[:real]), need)
        return batch, real

    def _keep(self, cell: int, batch: list[tuple[Any, int]], at: list[int]) -> None:
        """Keep a full batch of new samples as the first of ``cell``'s last samples, before
        the earlier ones (at most ``2 B`` in all: its last two batches, the state names them)."""
        cap = 2 * len(batch)
        self._last[cell] = batch + self._last.get(cell, [])[: cap - len(batch)]
        self._last_pos[cell] = list(at) + self._last_pos.get(cell, [])[: cap - len(batch)]

    def _pool(self, cell: int, want: int, skip: list[int]) -> list[tuple[int, int, Any, int]]:
        """The samples handed out before that a fill may repeat in a batch of ``cell``, as
        ``(appearances, position, sample, size)``, least seen first: the cell's last ones, then
        those of the cells it covers (nearest first; they fit its shape), each position once and
        none of ``skip``; the search stops once ``want`` of them were seen only once (NOTE
        [ What a stream's fill repeats ] in :mod:`bucketloader.stream.resume`)."""
        seen, counts = set(skip), self._seen
        out: list[tuple[int, int, int, Any, int]] = []
        ones = 0
        for other in (cell, *self.o.covers[cell]):
            got = self._last.get(other)
            if not got:
                continue
            for (x, n), p in zip(got, self._last_pos[other], strict=True):
                if p in seen:
                    continue
                seen.add(p)
                t = counts.get(p, 1)
                out.append((t, len(out), p, x, n))
                ones += t == 1
                if ones == want:
                    break
            if ones == want:
                break
        out.sort(key=lambda e: e[:2])
        return [(t, p, x, n) for t, _, p, x, n in out]

    def _top_up(
        self, cell: int, need: int, batch: list[Any], lens: list[int], at: list[int]
    ) -> None:
        """``last_batch="fill"``: complete ``batch`` (the samples of ``cell`` read for it, in
        place; none when the shard is dry) to ``need`` samples, each slot with the least seen
        of the samples handed out before (:meth:`_pool`) and the batch's own, a sample handed
        out before ahead of the batch's own at equal counts; count the repeats and keep the
        cell's last samples (this batch's first), least seen first. Nothing to repeat at all
        leaves ``batch`` empty."""
        fresh = len(batch)
        if fresh == need:  # a full batch of new samples (every step but the last few)
            self._keep(cell, list(zip(batch, lens, strict=True)), at)
            return
        pool = self._pool(cell, need - fresh, at)
        heap = [(t, 0, i, p, x, n) for i, (t, p, x, n) in enumerate(pool)]
        heap += [(1, 1, i, at[i], batch[i], lens[i]) for i in range(fresh)]
        if not heap:
            return
        heapq.heapify(heap)
        counts = self._seen
        for _ in range(need - fresh):
            t, kind, i, p, x, n = heapq.heappop(heap)
            batch.append(x)
            lens.append(n)
            at.append(p)
            counts[p] = t + 1
            heapq.heappush(heap, (t + 1, kind, i, p, x, n))
        self.stats["repeated"] += need - fresh
        self._note_batch(at, {p for _, p, _, _ in pool})
        # the cell's last: this batch's samples, then its earlier ones, least seen first
        # (bounded: the state names them)
        mine = {p for p in at}
        old = [
            (x, p)
            for x, p in zip(self._last.get(cell, []), self._last_pos.get(cell, []), strict=True)
            if p not in mine
        ]
        here: dict[int, tuple[Any, int]] = {}
        for x, n, p in zip(batch, lens, at, strict=True):
            here.setdefault(p, (x, n))
        entries = sorted(
            [*((e, p) for p, e in here.items()), *old], key=lambda ep: counts.get(ep[1], 1)
        )[: 2 * need]
        self._last[cell] = [e for e, _ in entries]
        self._last_pos[cell] = [p for _, p in entries]

    def _stand_in(self, cell: int) -> Any:
        """A sample that fits ``cell`` (one seen in it or in a cell it covers, else the first
        sample, or the stream's template, cut to it), only to give a padding row its structure;
        ``None`` when no sample exists at all (the step is then an empty, padding-only batch)."""
        o = self.o
        for other in (cell, *o.covers[cell]):
            if other in self._fits:
                return self._fits[other]
        ks = [lookup.boundaries.size for lookup in o.lookups]
        idx = np.unravel_index(cell, ks)
        shape = [int(lookup.boundaries[i]) for lookup, i in zip(o.lookups, idx, strict=True)]
        sample = o.template if self._template is None else self._template
        if sample is None:
            return None
        lengths = self._measure(-1, sample)
        if all(n <= lim for n, lim in zip(lengths, shape, strict=True)):
            return sample
        return o.cut(sample, lengths, shape)

    def _settle(self) -> None:
        """Pair the batches :meth:`_emit` kept with their sizes into ``_last`` (as
        ``_last_pos``: newest first, at most two batches)."""
        for c, raws in self._pending.items():
            pairs = [pair for x, n in raws for pair in zip(x, n, strict=True)]
            self._last[c] = (pairs + self._last.get(c, []))[: len(self._last_pos[c])]
        self._pending = {}

    def _tail(self) -> Iterator[list[Any]]:
        """The partial batches left at the end, by ``last_batch`` (the sampler's meanings)."""
        policy, sizes = self.o.last_batch, self.sizes
        self._settle()
        for i, batch in enumerate(self.bsam):
            if not batch:
                continue
            lens, positions = self.blen[i], self.bpos[i]
            real = sum(lens)
            self.bsam[i], self.bpos[i], self.blen[i] = [], [], []
            if policy == "drop":
                self.stats["tail_dropped"] += len(batch)
                continue
            rows = len(batch)
            self.anchor = (positions[-1], 0, lens[-1])  # (before a fill adds repeats)
            if policy == "fill":  # (lens, positions: this cell's old lists, no longer shared)
                self._top_up(i, sizes[i], batch, lens, positions)
                real = sum(lens)
            self._count(i, len(batch), real, sizes[i] if policy != "keep" else rows)
            self.batches += 1
            yield batch

    # -- state (the engine's skeleton asks) ---------------------------------------------------
    def _positions(self) -> list[int]:
        return [e[0] for e in self.shuffle] + [p for b in self.bpos for p in b]

    def _stand_ins(self) -> list[int]:
        last = [p for ps in self._last_pos.values() for p in ps]
        if self.o.schedule is None:
            return last  # (kept with last_batch="fill" only)
        return [*self._fit_pos.values(), *last]

    def _filler_state(self) -> dict[str, Any]:
        out = {
            "shuffle": [e[0] for e in self.shuffle],
            "buckets": [list(b) for b in self.bpos],
            "draws": self.draws.state(),
            "cell_stats": [list(row) for row in self.cell_stats],
        }
        if self.o.schedule is not None:  # NOTE [ A stream split over ranks ]: its stand-ins
            out["scheduled"] = {
                "fits": [[c, p] for c, p in self._fit_pos.items()],  # the first is the template
                "last": [[c, list(ps)] for c, ps in self._last_pos.items()],
                "exhausted": self._exhausted,
            }
        if self._fills:  # NOTE [ What a stream's fill repeats ] in stream.resume
            kept = {p for ps in self._last_pos.values() for p in ps}
            seen = [[p, t] for p, t in self._seen.items() if p in kept]  # (the rest: unused)
            fill: dict[str, Any] = {"seen": seen}
            if self._keep_last:  # a one-pass stream's last batches (the tail tops up from them)
                fill["last"] = [[c, list(ps)] for c, ps in self._last_pos.items()]
            out["fill"] = fill
        return out

    def _held_lengths(self, version: int = 1) -> tuple[list[int], list[int]]:
        keys = [e[0] for e in self.shuffle]  # (one rule: a sample is never cut into pieces)
        lengths = [e[3] for e in self.shuffle]
        for ps, ns in zip(self.bpos, self.blen, strict=True):
            keys += ps
            lengths += ns
        for c, ps in self._last_pos.items():  # (newest first: the batches _settle pairs)
            sizes = [n for _, ns in self._pending.get(c, ()) for n in ns]
            sizes += [n for _, n in self._last.get(c, ())]
            keys += ps[: len(sizes)]
            lengths += sizes[: len(ps)]
        keys += self._fit_pos.values()
        lengths += (self._fit_size[c] for c in self._fit_pos)
        return keys, lengths

    def _wanted(self, state: dict[str, Any]) -> set[int]:
        wanted = set(state["shuffle"]).union(*map(set, state["buckets"]))
        scheduled = state.get("scheduled")
        if scheduled:
            wanted |= {int(p) for _, p in scheduled["fits"]}
            wanted |= {int(p) for _, ps in scheduled["last"] for p in ps}
        wanted |= {int(p) for _, ps in state.get("fill", {}).get("last", ()) for p in ps}
        return wanted

    def _take_back(self, pos: int, sample: Any) -> None:
        prepared = self.prepare(pos, sample)
        if prepared is None:
            raise RefusedResume(message=f"cannot resume: sample {pos} is now dropped by overflow")
        self._got[pos] = prepared

    def _taken_length(self, pos: int, piece: int, version: int) -> int:
        return int(self._got[pos][2])

    def _restore(self, state: dict[str, Any]) -> None:
        got, self._got = self._got, {}
        self.shuffle[:] = [(p, *got[p]) for p in state["shuffle"]]
        self.bpos = [[int(p) for p in b] for b in state["buckets"]]
        self.bsam = [[got[p][0] for p in b] for b in self.bpos]
        self.blen = [[got[p][2] for p in b] for b in self.bpos]
        self.draws.restore(state["draws"])
        self.cell_stats = [[int(x) for x in row] for row in state["cell_stats"]]
        self.buffered = sum(len(b) for b in self.bpos)
        scheduled = state.get("scheduled")
        if scheduled:
            self._exhausted = bool(scheduled["exhausted"])
            self._fit_pos = {int(c): int(p) for c, p in scheduled["fits"]}
            self._fits = {c: got[p][0] for c, p in self._fit_pos.items()}
            self._fit_size = {c: got[p][2] for c, p in self._fit_pos.items()}
            self._template = next(iter(self._fits.values()), None)
            self._last_pos = {int(c): [int(p) for p in ps] for c, ps in scheduled["last"]}
        fill = state.get("fill", {})
        if "last" in fill:
            self._last_pos = {int(c): [int(p) for p in ps] for c, ps in fill["last"]}
        self._seen = {int(p): int(t) for p, t in fill.get("seen", ())}
        self._last = {c: [(got[p][0], got[p][2]) for p in ps] for c, ps in self._last_pos.items()}
