"""The engine both streams run: one worker's pass over its source, with a filler that differs.

A pass reads its source sample by sample, keeps some of them buffered (the filler decides where:
per-bucket buffers for :class:`~bucketloader.BucketIterable`, open best-fit rows for
:class:`~bucketloader.stream.PackIterable`), hands batches out through the shared counters, and
can say where it stands and resume from there exactly (NOTE [ Exact resume of a buffered stream ]
in :mod:`bucketloader.stream._buckets`). That skeleton is written once here, the way Grain's
packing takes the packing algorithm as a parameter: a filler subclasses :class:`Pass` and gives
the batches (:meth:`Pass._batches`), the positions it holds (:meth:`Pass._positions`), its part
of the state (:meth:`Pass._filler_state`) and how it takes a replayed sample back
(:meth:`Pass._restore`).
"""

from __future__ import annotations

import bisect
import itertools
import warnings
from collections.abc import Container, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from bucketloader.stream._schedule import lane_steps
from bucketloader.stream.counters import hand_out
from bucketloader.stream.source import (
    checkpoint,
    fetch,
    needed_snapshots,
    open_at,
    reopen,
    replay,
    resume_point,
    trim_snapshots,
)

#: Samples a pass reads, every one left out, before it says so (NOTE [ A pass that keeps
#: nothing ] at :meth:`Pass.left_out`).
ALL_LEFT_OUT = 10_000
#: The counters of samples a pass left out by a filter or an overflow policy.
LEFT_OUT_KEYS = ("too_short", "too_long", "oversize", "overflow_dropped")


class Pass:
    """Counters, source snapshots, state and resume of one worker's pass; :meth:`run` is the
    generator of batches. ``cfg`` is the filler's frozen configuration (with ``source``,
    ``config``, ``counters``); ``worker`` is ``(lane, lanes)``; ``skip`` batches are made but
    not handed out (a resume by replay); ``saved_config`` is the ``config`` of the state the
    pass resumes from (``None``: a pass from the start)."""

    #: The format of this filler's exact state.
    STATE_FORMAT: ClassVar[int]
    #: The steps one rank's shard fills, named in the warning that ``steps_per_epoch`` is too
    #: high (``stream.resume._warn_dry``).
    STEPS_HINT: ClassVar[str] = "the samples per rank / the mean batch size"
    #: What ``last_batch="fill"`` repeats and how, named in the warning that it repeated many
    #: (``stream.resume._warn_fill``): the unit, then how.
    FILL_HOW: ClassVar[tuple[str, str]] = (
        "samples",
        "a bucket's short batch is completed with the samples it (or a shorter bucket) handed "
        "out last, and with copies of its own where there are too few",
    )

    def __init__(
        self,
        cfg: Any,
        epoch: int,
        worker: tuple[int, int],
        *,
        skip: int,
        stats: Sequence[str],
        every: int,
    ) -> None:
        self.o = cfg
        self.epoch = epoch
        self.worker = worker
        self.skip = skip
        self.saved_config: dict[str, Any] | None = None
        #: the replay state this pass resumes from (``None``: none, or an exact state)
        self.saved_replay: dict[str, Any] | None = None
        self.read = 0
        self.batches = 0
        #: steps of ``steps_per_epoch`` that found the shard dry (no new sample: padding rows or
        #: repeats; once one has, every later one does), for the "ran out of samples" note; not in
        #: the state or the report
        self.dry = 0
        #: NOTE [ What a stream's fill repeats ]: the most appearances of one sample (a
        #: document, for packing) that ``last_batch="fill"`` made in this pass, and the
        #: appearances so far of each sample it repeated (by stream position); not in the state
        #: or the report (a pass resumed from an exact state counts from there)
        self.fill_most = 1
        self._copies: dict[Any, int] = {}
        self.phase = "stream"
        self.stats = dict.fromkeys(stats, 0)
        self.snaps: list[tuple[int, Any]] = [(0, None)]
        self.every = every  # a source checkpoint every this many samples

    def _note_batch(self, entries: Sequence[Any], old: Container[Any]) -> None:
        """Count a batch that ``last_batch="fill"`` completed, entry by entry (stream
        positions, a key once per appearance in the batch); the keys in ``old`` were handed
        out before this batch, the others appear here for the first time."""
        copies = self._copies
        times: dict[Any, int] = {}
        for key in entries:
            times[key] = times.get(key, 0) + 1
        for key, t in times.items():
            total = t + (copies.get(key, 1) if key in old else 0)
            if total > 1:
                copies[key] = total
                self.fill_most = max(self.fill_most, total)

    def fill_repeats(self) -> tuple[int, int]:
        """``(extra appearances, most appearances of one)`` of the samples that
        ``last_batch="fill"`` repeated in this pass (NOTE [ What a stream's fill repeats ])."""
        return sum(self._copies.values()) - len(self._copies), self.fill_most

    def lane_steps(self) -> int:
        """This lane's share of ``steps_per_epoch`` (0 without it)."""
        lane, lanes = self.worker
        return len(lane_steps(self.o.steps, lane, lanes))

    def left_out(self) -> None:
        """A sample was left out (a filter, an overflow policy); called after it is counted.

        NOTE [ A pass that keeps nothing ]
        A pass reads until a sample fits a batch. Where the filters leave out every sample
        (``max_length`` below every document's length with ``overflow="drop"``, boundaries
        planned on other data), it read its whole source before its first batch, with nothing
        said until the pass's end, and an endless source (a generator, a streaming dataset
        repeated) hung with no word at all, also with ``steps_per_epoch`` (s25-user: a
        ``BucketIterable`` of 100-token samples, ``boundaries=[10]``, ``overflow="drop"``,
        ``steps_per_epoch=5``). So when the :data:`ALL_LEFT_OUT`-th sample read is left out
        and so was every one before it, the pass warns once, with the counts by reason: it
        goes on reading (a data set sorted by length can start with many samples a filter
        leaves out), and the user sees why no batch comes."""
        if self.read != ALL_LEFT_OUT:
            return
        stats = self.stats
        counts = {k: stats[k] for k in LEFT_OUT_KEYS if stats.get(k)}
        if sum(counts.values()) < self.read:
            return
        owner = "PackIterable" if "overflow_dropped" in stats else "BucketIterable"
        said = ", ".join(f"{n:,} {k}" for k, n in counts.items())
        warnings.warn(
            f"this {owner} has read the first {self.read:,} samples of epoch {self.epoch} and "
            f"left out every one ({said}): it reads on until a sample fits, so no batch comes "
            "until then, and never from a source of such samples only; check min_length / "
            "max_length, the boundaries (or row_length) and max_tokens against the data's "
            "lengths, or the overflow policy",
            UserWarning,
            stacklevel=2,
        )

    # -- what a filler gives ----------------------------------------------------------------
    def _batches(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        """The batches of this lane's pass over ``it``."""
        raise NotImplementedError

    def _positions(self) -> list[int]:
        """The stream positions of every sample this pass holds."""
        raise NotImplementedError

    def _stand_ins(self) -> list[int]:
        """The stream positions of the samples a dry step reuses besides the buffered ones
        (a pass over ``steps_per_epoch``: stand-ins and last batches); named by the state too."""
        return []

    def _filler_state(self) -> dict[str, Any]:
        """The filler's part of the state (JSON-serialisable)."""
        raise NotImplementedError

    def _wanted(self, state: dict[str, Any]) -> set[int]:
        """The positions ``state`` holds (read back on resume)."""
        raise NotImplementedError

    def _take_back_from(self, it: Iterator[Any], start: int, end: int, wanted: Any) -> None:
        """Replay positions ``start .. end - 1`` of ``it``, taking back the ``wanted`` ones."""
        for pos, sample in replay(it, start, end):
            if pos in wanted:
                self._take_back(pos, sample)

    def _take_back(self, pos: int, sample: Any) -> None:
        """Keep replayed sample ``pos`` (one of :meth:`_wanted`) for :meth:`_restore`."""
        raise NotImplementedError

    def _restore(self, state: dict[str, Any]) -> None:
        """Rebuild the filler's buffers from ``state`` and the samples taken back."""
        raise NotImplementedError

    def _cells(self) -> np.ndarray | None:
        """Per-cell counters written with the totals (``None``: none)."""
        return None

    def _lane_fields(self) -> dict[str, int]:
        """More fields of this lane's row in the shared table (the filler's; none here)."""
        return {}

    # -- the pass ---------------------------------------------------------------------------
    def run(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        """The batches of this lane's pass, handed out through the shared counters."""
        batches = self._batches(it)
        store = getattr(self.o, "lane_states", None)
        if store is not None and self.worker[1] > 1 and (self.o.seekable or self.o.stateful):
            batches = self._checkpointed(batches, store)
        return hand_out(self, self.o.counters, batches)

    def _checkpointed(self, batches: Iterator[list[Any]], store: Any) -> Iterator[list[Any]]:
        """``batches``, writing this worker's exact state every ``store.every`` batches (NOTE
        [ Worker checkpoints ] in :mod:`bucketloader.stream.resume`)."""
        writing = True
        for batch in batches:
            if writing and self.batches % store.every == 0:
                writing = store.write(self.state_dict())  # False: too large, not again
            yield batch

    def flush(self, done: bool = False) -> None:
        """Write this lane's counters to the shared table (NOTE [ A stream's counters across
        DataLoader workers ] in :mod:`bucketloader.stream.counters`)."""
        counters = self.o.counters
        if counters is None:
            return
        totals = {
            **self.stats,
            **self._lane_fields(),
            "read": self.read,
            "batches": self.batches,
            "epoch": self.epoch,
            "lanes": self.worker[1],
            "done": int(done),
        }
        counters.write(self.worker[0], totals, self._cells())

    # -- state ------------------------------------------------------------------------------
    def _held(self) -> list[int]:
        """The stream positions of every sample the state names (read back on resume)."""
        return self._positions() + self._stand_ins()

    def _snapshot(self) -> None:
        """Checkpoint the source at ``read`` (the sample just read, ``read - 1``, is not placed
        yet: it counts as held), keeping only the checkpoints a resume needs."""
        self.snaps.append((self.read, checkpoint(self.o.source)))
        trim_snapshots(self.snaps, [*self._held(), self.read - 1])

    def state_dict(self) -> dict[str, Any]:
        """The exact state of this pass (NOTE [ Exact resume of a buffered stream ])."""
        if self.o.seekable:  # NOTE [ Seeking a source ]: positions only, the source seeks
            source: dict[str, Any] = {"position": self.read, "state": None, "seek": True}
        else:
            held = self._held()  # built once per state (a loop may take one every step)
            pos, src = resume_point(self.snaps, min(held, default=self.read))
            source = {"position": pos, "state": src}
            if self.o.stateful and len(self.snaps) > 1:
                source["segments"] = self._segments(held)
        return {
            "format": self.STATE_FORMAT,
            "config": self.o.config,
            "epoch": self.epoch,
            "worker": list(self.worker),
            "phase": self.phase,
            "read": self.read,
            "batches": self.batches,
            **self._filler_state(),
            "source": source,
            "stats": dict(self.stats),
        }

    def _segments(self, held: list[int]) -> list[list[Any]]:
        """The checkpoints a resume restarts the source at (NOTE [ Seeking a source ]): the
        newest one at or before each ``held`` sample (:meth:`_held`), and the newest one of all
        (the live iterator), as ``[position, source state]``."""
        return [list(s) for s in needed_snapshots(self.snaps, held)]

    def _replay_segments(self, segments: list[Any], wanted: set[int], read: int) -> Iterator[Any]:
        """Take the ``wanted`` samples back segment by segment (each from its checkpoint to its
        last wanted sample); return the iterator restarted at the last one, read to ``read``."""
        order = sorted(wanted)
        for (start, src_state), (end, _) in itertools.pairwise(segments):
            lo, hi = bisect.bisect_left(order, start), bisect.bisect_left(order, end)
            if lo == hi:
                continue
            it = reopen(self.o.source, self.worker, src_state)
            self._take_back_from(it, int(start), order[hi - 1] + 1, wanted)
        start, src_state = segments[-1]
        it = reopen(self.o.source, self.worker, src_state)
        self._take_back_from(it, int(start), read, wanted)
        return it

    def resume(self, state: dict[str, Any]) -> Iterator[Any]:
        """Rebuild the buffers from ``state`` (NOTE [ Seeking a source ]: a seekable source
        fetches the buffered samples and reopens where the pass stopped, any other replays
        from its checkpoint); return the live iterator."""
        start, src_state = int(state["source"]["position"]), state["source"]["state"]
        read = int(state["read"])
        wanted = self._wanted(state)
        if self.o.seekable:
            order = sorted(wanted)
            for pos, sample in zip(order, fetch(self.o.source, self.worker, order), strict=True):
                self._take_back(pos, sample)
            it = open_at(self.o.source, self.worker, read)
            start = read
        elif state["source"].get("segments") and self.o.stateful:
            segments = state["source"]["segments"]
            it = self._replay_segments(segments, wanted, read)
            self._finish_resume(state)
            self.snaps = [(int(p), s) for p, s in segments]  # each covers buffered samples
            return it
        else:
            if state["source"].get("seek") or not self.o.stateful:  # replay from the start
                start, src_state = 0, None
            it = reopen(self.o.source, self.worker, src_state)
            self._take_back_from(it, start, read, wanted)
        self._finish_resume(state)
        self.snaps = [(start, src_state)]
        return it

    def _finish_resume(self, state: dict[str, Any]) -> None:
        self.stats = {**self.stats, **state["stats"]}
        self.read = int(state["read"])
        self.batches = int(state["batches"])
        self.phase = state["phase"]
        self._restore(state)
