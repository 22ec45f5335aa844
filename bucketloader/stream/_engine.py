"""One worker's pass over the stream: shuffle buffer → per-bucket buffers → batches; resumable.

NOTE [ Exact resume of a buffered stream ]
Samples wait in the shuffle buffer and the bucket buffers, so the source's position says nothing
about them on its own. The state records, instead of samples, their *positions* in this worker's
stream: ``read`` (samples read so far), the positions in each buffer slot, the random generator
(block start state + draws used) and a source checkpoint at a position ``p <= `` the oldest
buffered sample. Resuming restores the source at ``p`` (``load_state_dict``; a source without
state restarts the epoch, ``p = 0``), re-reads samples ``p .. read - 1`` keeping only the buffered
positions (the rest were already yielded), puts them back in their slots, restores the generator
and carries on: the remaining batches are exactly those of the uninterrupted run. Checkpoints are
taken every ``K`` samples (``K`` ~ buffer capacity) and pruned to the newest one at or before the
oldest buffered sample, so replay costs about one buffer residency and memory stays bounded. The
state holds ints only (JSON-serialisable), plus the source's own state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader.boundaries import BucketLookup
from bucketloader.stream._source import check_length, forget_resume, is_hf, open_source

STATE_FORMAT = 1
_BLOCK = 1024


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
class PassConfig:
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
        config: the stream's configuration, stored in every state (checked on load).
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
    config: dict[str, Any]

    @property
    def limits(self) -> list[int]:
        """The last boundary of each input."""
        return [lookup.limit for lookup in self.lookups]

    def cell(self, lengths: tuple[int, ...]) -> int:
        """Cell id (lattice code, first input most significant) of lengths within the limits."""
        code = 0
        for length, lookup in zip(lengths, self.lookups, strict=True):
            code = code * lookup.boundaries.size + lookup(length)
        return code


class Engine:
    """Buffers and counters of one pass; :meth:`run` is the generator of batches."""

    def __init__(self, cfg: PassConfig, epoch: int, worker: tuple[int, int]) -> None:
        self.o = owner = cfg
        self.epoch = epoch
        self.worker = worker
        self.read = 0
        self.batches = 0
        self.phase = "stream"
        self.shuffle: list[tuple[int, Any, int]] = []
        self.bpos: list[list[int]] = [[] for _ in owner.batch_sizes]  # positions per cell
        self.bsam: list[list[Any]] = [[] for _ in owner.batch_sizes]  # samples per cell
        self.draws = Draws(np.random.SeedSequence([owner.seed, epoch, worker[0], 0x5742]))
        self.stats = dict.fromkeys(
            ("read", "batches", "overflow_dropped", "truncated", "tail_dropped", "repeated"), 0
        )
        self.snaps: list[tuple[int, Any]] = [(0, None)]
        self.every = max(64, sum(owner.batch_sizes) + owner.shuffle_buffer)
        self.sizes = owner.batch_sizes
        self.stateful = owner.stateful
        one = owner.lookups[0] if len(owner.lookups) == 1 else None
        self._table = None if one is None else one.table  # the hot path indexes it directly
        self._limit = -1 if one is None else one.limit

    # -- per sample -----------------------------------------------------------------------
    def prepare(self, pos: int, sample: Any) -> tuple[Any, int] | None:
        """(sample, cell) after the overflow policy, or ``None`` when dropped."""
        table = self._table
        if table is None:
            return self._prepare_general(pos, sample)
        length = self.o.measure(sample)
        if type(length) is not int or length < 0:
            length = check_length(length, pos)
        if length > self._limit:
            return self._prepare_general(pos, sample)
        return sample, table[length]

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

    def _prepare_general(self, pos: int, sample: Any) -> tuple[Any, int] | None:
        o = self.o
        limits = o.limits
        lengths = self._measure(pos, sample)
        over = [d for d, (n, lim) in enumerate(zip(lengths, limits, strict=True)) if n > lim]
        if over:
            d = over[0]
            what = "" if len(o.names) == 1 else f"input {o.names[d]!r} "
            policy = o.overflow
            if policy == "error":
                raise ValueError(
                    f"sample {pos} of this worker's stream has {what}length {lengths[d]} > the "
                    f"last boundary {limits[d]}; pass overflow='drop' or 'truncate', or "
                    "boundaries whose last value covers it"
                )
            if policy == "drop":
                self.stats["overflow_dropped"] += 1
                return None
            sample = policy(sample, lengths)
            self.stats["truncated"] += 1
            lengths = self._measure(pos, sample)
            if any(n > lim for n, lim in zip(lengths, limits, strict=True)):
                raise ValueError(
                    f"the overflow policy left sample {pos} at lengths {list(lengths)}, beyond "
                    f"the last boundaries {limits}"
                )
        return sample, o.cell(lengths)

    def _add(self, pos: int, sample: Any, bucket: int) -> list[Any] | None:
        buf = self.bsam[bucket]
        buf.append(sample)
        self.bpos[bucket].append(pos)
        if len(buf) < self.sizes[bucket]:
            return None
        self.bsam[bucket], self.bpos[bucket] = [], []
        self.batches += 1
        return buf

    # -- the pass ---------------------------------------------------------------------------
    def run(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        size = self.o.shuffle_buffer
        shuf = self.shuffle
        if self.phase == "stream":
            prepare, add, stateful, every = self.prepare, self._add, self.stateful, self.every
            draws = self.draws
            for sample in it:
                pos = self.read
                self.read = pos + 1
                if stateful and self.read % every == 0:
                    self._snapshot()
                got = prepare(pos, sample)
                if got is None:
                    continue
                if size:
                    entry = (pos, got[0], got[1])
                    if len(shuf) < size:
                        shuf.append(entry)
                        continue
                    if draws.used == _BLOCK:
                        draws.refill()
                    j = int(draws.block[draws.used] * size)  # Draws.index, inlined
                    draws.used += 1
                    entry, shuf[j] = shuf[j], entry
                    batch = add(*entry)
                else:
                    batch = add(pos, got[0], got[1])
                if batch is not None:
                    yield batch
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

    def _tail(self) -> Iterator[list[Any]]:
        """The partial batches left at the end, by ``last_batch`` (the sampler's meanings)."""
        policy, sizes = self.o.last_batch, self.sizes
        for i, batch in enumerate(self.bsam):
            if not batch:
                continue
            self.bsam[i], self.bpos[i] = [], []
            if policy == "drop":
                self.stats["tail_dropped"] += len(batch)
                continue
            if policy == "fill":
                n, extra = len(batch), sizes[i] - len(batch)
                batch += [batch[k % n] for k in range(extra)]
                self.stats["repeated"] += extra
            self.batches += 1
            yield batch

    # -- state ------------------------------------------------------------------------------
    def _positions(self) -> tuple[list[int], list[list[int]]]:
        return [e[0] for e in self.shuffle], [list(b) for b in self.bpos]

    def _oldest(self) -> int:
        shuf, bucks = self._positions()
        return min([*shuf, *(p for b in bucks for p in b)], default=self.read)

    def _snapshot(self) -> None:
        source = self.o.source
        st = source.state_dict()
        self.snaps.append((self.read, st if is_hf(source) else copy.deepcopy(st)))
        oldest = self._oldest()
        keep = max(i for i, (p, _) in enumerate(self.snaps) if p <= oldest)
        del self.snaps[:keep]

    def state_dict(self) -> dict[str, Any]:
        oldest = self._oldest()
        pos, src = max((s for s in self.snaps if s[0] <= oldest), key=lambda s: s[0])
        shuf, bucks = self._positions()
        self.stats.update(read=self.read, batches=self.batches)
        return {
            "format": STATE_FORMAT,
            "config": self.o.config,
            "epoch": self.epoch,
            "worker": list(self.worker),
            "phase": self.phase,
            "read": self.read,
            "batches": self.batches,
            "shuffle": shuf,
            "buckets": bucks,
            "draws": self.draws.state(),
            "source": {"position": pos, "state": src},
            "stats": dict(self.stats),
        }

    def resume(self, state: dict[str, Any]) -> Iterator[Any]:
        """Rebuild buffers from ``state`` by replaying the source; return the live iterator."""
        src = state["source"]
        start, src_state = int(src["position"]), src["state"]
        source = self.o.source
        if src_state is not None:
            source.load_state_dict(src_state)
            it = _forget_after_first(iter(source), source)
        else:
            it = open_source(source, self.worker)
        wanted = set(state["shuffle"]).union(*map(set, state["buckets"]))
        got: dict[int, tuple[Any, int]] = {}
        for pos in range(start, int(state["read"])):
            try:
                sample = next(it)
            except StopIteration:
                raise ValueError(
                    f"cannot resume: the source ended at sample {pos} while replaying to "
                    f"{state['read']}; resume needs a deterministic, re-iterable source"
                ) from None
            if pos in wanted:
                prepared = self.prepare(pos, sample)
                if prepared is None:
                    raise ValueError(f"cannot resume: sample {pos} is now dropped by overflow")
                got[pos] = prepared
        self.read = int(state["read"])
        self.batches = int(state["batches"])
        self.phase = state["phase"]
        self.shuffle[:] = [(p, *got[p]) for p in state["shuffle"]]
        self.bpos = [[int(p) for p in b] for b in state["buckets"]]
        self.bsam = [[got[p][0] for p in b] for b in self.bpos]
        self.draws.restore(state["draws"])
        self.stats = {**self.stats, **state["stats"]}
        self.snaps = [(start, src_state)]
        return it


def _forget_after_first(it: Iterator[Any], source: Any) -> Iterator[Any]:
    """Yield from ``it``; once it has started (state applied), make the source forget the state."""
    started = False
    for x in it:
        if not started:
            forget_resume(source)
            started = True
        yield x
    if not started:
        forget_resume(source)
