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
import hashlib
import itertools
import struct
import warnings
from collections.abc import Container, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from bucketloader.stream._schedule import lane_steps
from bucketloader.stream.counters import TRACE_BITS, RefusedResume, hand_out
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


#: The modulus of a pass's trace (a Mersenne prime; NOTE [ A replay over a source without a
#: length ]).
TRACE_MOD = (1 << 61) - 1


def trace_hex(trace: int) -> str:
    """A lane's trace as a replay state records it: its low
    :data:`~bucketloader.stream.counters.TRACE_BITS` bits, in hex.

    Example:
        >>> trace_hex(255)
        '00000000ff'
    """
    return f"{trace % (1 << TRACE_BITS):010x}"


def _start_over(epoch: int) -> str:
    """The way on from a resume of ``epoch`` refused when its pass started: without the state.
    ``set_epoch(epoch)`` alone is none: a loaded state of that epoch stays pending through it
    (a training loop calls it after ``load_state_dict``), and behind DataLoader workers the
    main process's stream still holds it after the workers refused it, so the next pass was
    refused again (s32-rev); another epoch's ``set_epoch`` forgets it.

    Example:
        >>> _start_over(3)[:61]
        'or start over without the state: stream.set_epoch(4) for the '
    """
    return (
        f"or start over without the state: stream.set_epoch({epoch + 1}) for the next epoch, "
        "or, for this epoch whole, the stream built again without load_state_dict (set_epoch("
        f"{epoch}) alone keeps the loaded state of epoch {epoch} pending)"
    )


def checks_lengths(config: dict[str, Any]) -> bool:
    """Whether a stream of configuration ``config`` checks lengths on resume: its exact states
    record the digest of the lengths they hold (NOTE [ A stream state over a source without a
    length ]) and its replay states the workers' traces (NOTE [ A replay over a source without
    a length ]). So over a source whose configuration records neither its length
    (``"samples"``) nor its files (``"source"``; :func:`~bucketloader.stream.resume.source_config`).

    Example:
        >>> checks_lengths({"samples": 3}), checks_lengths({})
        (False, True)
    """
    return not ("samples" in config or "source" in config)


def lengths_digest(keys: list[int], lengths: list[int]) -> str:
    """The digest an exact state records of the lengths of the samples it holds (NOTE
    [ A stream state over a source without a length ]): 16 hex digits, the sum modulo
    ``2**64`` of a 64-bit mix (SplitMix64's) of each key mixed with its length (a key is a
    stream position), so the order of the pairs does not count and no sort is needed. The key is
    mixed whole before the length joins it: every bit of both counts (a key shifted into the
    high half of one word kept only its low 32 bits, so two pieces 2**16 positions apart in a
    packed stream could swap lengths unseen).

    Example:
        >>> lengths_digest([3, 1], [7, 5]) == lengths_digest([1, 3], [5, 7])
        True
        >>> lengths_digest([1, 3], [5, 7]) == lengths_digest([1, 3], [7, 5])
        False
        >>> lengths_digest([1, 1 + 2**32], [5, 7]) == lengths_digest([1, 1 + 2**32], [7, 5])
        False
    """
    x = _mix64(np.asarray(keys, dtype=np.uint64))
    x ^= np.asarray(lengths, dtype=np.uint64)
    return f"{int(_mix64(x).sum(dtype=np.uint64)):016x}"


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise, in place (wraps modulo ``2**64``: arrays do not
    warn)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class Pass:
    """Counters, source snapshots, state and resume of one worker's pass; :meth:`run` is the
    generator of batches. ``cfg`` is the filler's frozen configuration (with ``source``,
    ``config``, ``counters``); ``worker`` is ``(lane, lanes)``; ``skip`` batches are made but
    not handed out (a resume by replay); ``saved_config`` is the ``config`` of the state the
    pass resumes from (``None``: a pass from the start)."""

    #: The format of this filler's exact state.
    STATE_FORMAT: ClassVar[int]
    #: The version of the length digest this filler's states record (``"lengths_version"``;
    #: absent: 1). NOTE [ Pieces of one length ] in :mod:`bucketloader.stream._rows`: a packing
    #: state's digest counts a cut document's whole length (2).
    LENGTHS_VERSION: ClassVar[int] = 1
    #: The stream whose pass this is, and what its state holds (for messages).
    OWNER: ClassVar[str]
    HELD: ClassVar[str]
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
        #: NOTE [ A replay over a source without a length ]: whether this pass keeps a trace
        #: (over a source without a length), and the trace: a rolling digest of the lengths
        #: handed out, batch by batch, from the epoch's start (``None``: none kept, or
        #: unknown in a pass resumed from an exact state)
        self.traced = self.checks_lengths
        self.trace: int | None = 0 if self.traced else None
        #: NOTE [ A stream state that holds no sample ]: the newest sample (piece) the filler
        #: handed out, as ``(position, piece, length)`` (``None``: none yet)
        self.anchor: tuple[int, int, int] | None = None

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

    def _trace_batch(self, rows: int, real: int, parts: Sequence[int] = ()) -> None:
        """Fold a batch of ``rows`` real samples (rows) of ``real`` elements (tokens), and
        ``parts`` (a packed batch's documents per row and their lengths), into :attr:`trace`
        (NOTE [ A replay over a source without a length ])."""
        if self.trace is None:
            return
        trace = (self.trace * 1_000_003 + real * 65_537 + rows + 1) % TRACE_MOD
        if parts:  # one hash in C (a Python loop over 200 documents took 36 us a batch, this 8)
            # of the parts as native int64s: struct.pack makes the bytes array("q", parts) made
            # (so every trace keeps its value) in 3 us for 200 parts, where the array took 5.5
            packed = struct.pack(f"{len(parts)}q", *parts)
            digest = hashlib.blake2b(packed, digest_size=7).digest()
            trace = (trace * 1_000_003 + int.from_bytes(digest, "little")) % TRACE_MOD
        self.trace = trace

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

    def _taken_length(self, pos: int, piece: int, version: int) -> int:
        """The length of sample ``pos`` (its ``piece``) as a resume took it back, measured as
        the pass measured it when it handed it out (:attr:`anchor`), by the rule of digest
        ``version`` (:attr:`LENGTHS_VERSION`)."""
        raise NotImplementedError

    def _held_lengths(self, version: int = 1) -> tuple[list[int], list[int]]:
        """The keys (stream positions; a packing stream's pieces, ``position * 2**16 +
        piece``) and lengths of the samples the state names, as the buffers hold them now
        (NOTE [ A stream state over a source without a length ]), by the rule of digest
        ``version`` (:attr:`LENGTHS_VERSION`)."""
        raise NotImplementedError

    def _verify(self, state: dict[str, Any]) -> None:
        """The filler's own checks of a resume, after :meth:`_restore` and the lengths check
        (none here)."""

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
        saved = (self.saved_replay or {}).get("lengths")
        if saved and saved[self.worker[0]] is not None and self.trace is not None:
            target = int(self.saved_replay["skip"][self.worker[0]])  # type: ignore[index]
            batches = self._check_replay(batches, target, saved[self.worker[0]])
        store = getattr(self.o, "lane_states", None)
        if store is not None and self.worker[1] > 1 and (self.o.seekable or self.o.stateful):
            batches = self._checkpointed(batches, store)
        return hand_out(self, self.o.counters, batches)

    def _check_replay(
        self, batches: Iterator[list[Any]], target: int, saved: str
    ) -> Iterator[list[Any]]:
        """NOTE [ A replay over a source without a length ]
        Behind DataLoader workers a stream resumes by replay by default (NOTE [ Resuming a stream
        behind DataLoader workers ] in :mod:`bucketloader.stream.resume`): each worker reads its
        pass again from the epoch's start and skips the batches it had handed out. Over a source
        without a length (a ``datasets.IterableDataset``, the usual case) a source changed since was
        not noticed: the replay skipped the first batches of the new data, whatever they held. So
        each pass keeps a *trace*: a rolling digest, batch by batch, of the number of real samples
        (rows) and elements (tokens) of each batch it makes (:meth:`_trace_batch`: one multiply-add
        per batch, nothing per sample; only over such a source, whose state records it). A packed
        batch also folds a hash (blake2b) of its documents per row and their lengths:
        best fit fills its rows, so nearly every batch of ``PackIterable`` has ``batch_size`` rows
        of ``row_length`` tokens, and a trace of those alone missed a document inserted at the
        front (s31-user2: default ``open_rows``, rows of 64, every batch 128 tokens); and a
        document ``overflow="split"`` cuts folds its whole length when read (``_trace_split`` in
        :mod:`bucketloader.stream._rows`: its whole pieces read alike, s32-rev). The worker
        writes it to its row of the shared counters after every batch, a few microseconds
        (``benchmarks/stream_state_cost.py``), keeping the newest
        :data:`~bucketloader.stream.counters.TRACE_KEPT` (each slot with its batch count in the same
        ``int64``), and a replay state over a source that records neither its length nor its files
        records, per worker, the trace after the batches it skips (``"lengths"``; ``None`` where the
        loop lagged that worker by more than ``TRACE_KEPT`` batches, or where the worker resumed
        from an exact state saved before s32, whose pass knows no trace; an exact state records
        its pass's trace, ``"trace"``, which the resumed pass goes on from: s31-stream left a
        worker resumed from its checkpoint unchecked by every later replay state). The resumed
        worker compares its own trace
        once it made those batches again, and refuses another (or a pass that ends before them)
        before it hands out a batch: the error reaches the training loop through the DataLoader. It
        catches what changes the batches' sizes up to the resume point (a sample inserted, removed,
        or of another length; a source that reads differently each time); not a change that keeps
        every batch's count and total length, nor one after the resume point."""
        for batch in batches:
            if self.batches == target and self.trace is not None:
                mine = trace_hex(self.trace)
                if mine != saved:
                    raise self._changed_replay(target, f"replay trace {mine}, the state's {saved}")
            yield batch
        if self.batches < target:
            raise self._changed_replay(target, f"its pass now ends after {self.batches:,}")

    def _changed_replay(self, target: int, what: str) -> RefusedResume:
        """The error of a replay whose first ``target`` batches differ from the saved run's
        (``what``: its trace and the state's, or where its pass now ends)."""
        lane, lanes = self.worker
        who = f"the pass of worker {lane} of {lanes}" if lanes > 1 else "its pass"
        return self._refused(
            self.epoch,
            f"replaying epoch {self.epoch}, {who} made {target:,} batches of other sizes than "
            f"the saved run ({what})",
        )

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
        return self._held_and_anchor()[0]

    def _held_and_anchor(self) -> tuple[list[int], tuple[int, int, int] | None]:
        """:meth:`_held`, with the anchor the state names where the newest sample handed out is
        newer than every one it holds (NOTE [ A stream state that holds no sample ]; its
        position is then held too)."""
        held = self._positions() + self._stand_ins()
        anchor = self._anchor_named(held)
        return (held, None) if anchor is None else ([*held, anchor[0]], anchor)

    def _anchor_named(self, held: list[int]) -> tuple[int, int, int] | None:
        """NOTE [ A stream state that holds no sample ]
        The length digest of a state (NOTE [ A stream state over a source without a length ] at
        :meth:`_check_lengths`) covers the samples it holds. A state can hold none: one bucket
        and no shuffle buffer, saved right after a batch; a ``PackIterable`` whose rows all
        closed (``max_documents``). Its digest was of nothing (all zeros), so nothing was
        compared, and with one sample inserted at the front of the source the resume trained a
        sample twice, silently (s32-rev: sample 39 of a 4-row batch; document 19 packed). So such
        a state names instead the newest sample the pass handed out (:attr:`anchor`: the last
        of its last batch; a packing pass's newest document by position since its start or
        resume, as rows close out of read order, s33-tidyB; ``"anchor"``, ``[position, piece]``)
        and digests
        its length: the resume reads it back with the rest (it is one of the positions the state
        holds, so a source's checkpoints cover it too) and compares. It catches what the digest
        of a held sample catches (a change before it), no more.

        A state that holds samples, all older than the newest one handed out, had the same gap
        (s34-split): rows close out of read order and buckets fill at their own pace, so a
        sample inserted after the newest held one and before the newest handed out moved no
        held sample, and the resume read the newest handed out again and trained it twice (a
        ``PackIterable`` over documents of 10, then 64 tokens, after 4 batches: it held
        document 0 and had handed out document 4; a ``BucketIterable`` of two buckets after a
        batch of one). So a state names the anchor whenever it is newer than every sample the
        state holds, and digests it with them. A pass resumed from a state that named none
        goes on without one, which is right: what it had handed out is older than a sample the
        state held, which is held still or handed out since. Where a held sample is at least
        as new, no anchor (the digest is as before), and a state saved without one (before
        s33; one that holds no sample has an all-zero digest and resumes unchecked) resumes as
        it did. Only over a source without a length: one with a length is checked at
        ``load_state_dict``.

        Returns the anchor a state holding the ``held`` positions names; ``None``: one of them
        is at least as new, its source has a length, or nothing was handed out yet."""
        if self.anchor is None or not self.checks_lengths:
            return None
        if held and max(held) >= self.anchor[0]:
            return None
        return self.anchor

    def _lengths_digest(self, anchor: tuple[int, int, int] | None, version: int) -> str:
        """The digest (by the rule of ``version``) of the lengths of what the state names: the
        samples it holds, and its ``anchor`` (NOTE [ A stream state that holds no sample ])."""
        keys, lengths = self._held_lengths(version)
        if anchor is not None:
            pos, piece, length = anchor
            keys, lengths = [*keys, pos * 65_536 + piece], [*lengths, length]
        return lengths_digest(keys, lengths)

    def _snapshot(self) -> None:
        """Checkpoint the source at ``read`` (the sample just read, ``read - 1``, is not placed
        yet: it counts as held), keeping only the checkpoints a resume needs."""
        self.snaps.append((self.read, checkpoint(self.o.source)))
        held = [*self._held(), self.read - 1]
        if self.anchor is not None and self.checks_lengths:  # a later state may name it (NOTE
            # [ A stream state that holds no sample ]) once a tail's drop empties its buffers,
            # after the snapshots before it were trimmed (s33-tidyB: state_dict() failed there)
            held.append(self.anchor[0])
        trim_snapshots(self.snaps, held)

    def state_dict(self) -> dict[str, Any]:
        """The exact state of this pass (NOTE [ Exact resume of a buffered stream ])."""
        held: list[int] = []  # built once per state (a loop may take one every step), and
        anchor = None  # not for a source that seeks and has a length (no digest, no segments)
        if not self.o.seekable or self.checks_lengths:
            held, anchor = self._held_and_anchor()
        if self.o.seekable:  # NOTE [ Seeking a source ]: positions only, the source seeks
            source: dict[str, Any] = {"position": self.read, "state": None, "seek": True}
        else:
            pos, src = resume_point(self.snaps, min(held, default=self.read))
            source = {"position": pos, "state": src}
            if self.o.stateful and len(self.snaps) > 1:
                source["segments"] = self._segments(held)
        out = {
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
        if self.checks_lengths:  # NOTE [ A stream state over a source without a length ]
            out["lengths"] = self._lengths_digest(anchor, self.LENGTHS_VERSION)
            if self.LENGTHS_VERSION > 1:  # (NOTE [ Pieces of one length ] in stream._rows)
                out["lengths_version"] = self.LENGTHS_VERSION
            if anchor is not None:  # NOTE [ A stream state that holds no sample ]
                out["anchor"] = [anchor[0], anchor[1]]
            if self.trace is not None:  # NOTE [ A replay over a source without a length ]
                out["trace"] = self.trace
        return out

    @property
    def checks_lengths(self) -> bool:
        """Whether this pass's states record the lengths of the samples they hold
        (:func:`checks_lengths`)."""
        return checks_lengths(self.o.config)

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
        if state.get("anchor") is not None:  # NOTE [ A stream state that holds no sample ]
            wanted.add(int(state["anchor"][0]))
        # (the batches before the state are not made again: the trace goes on from the state's,
        # unknown where it records none)
        saved = state.get("trace")
        self.trace = int(saved) if self.traced and saved is not None else None
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
        anchor = state.get("anchor")  # (read back with the held samples: before _restore)
        version = int(state.get("lengths_version", 1))  # (the rule the state's digest took)
        checked = None
        if anchor is not None:  # (measured by this version's rule for the states to come)
            pos, piece = int(anchor[0]), int(anchor[1])
            self.anchor = (pos, piece, self._taken_length(pos, piece, self.LENGTHS_VERSION))
            checked = (pos, piece, self._taken_length(pos, piece, version))
        self._restore(state)
        self._check_lengths(state, checked, version)
        self._verify(state)

    def _check_lengths(
        self, state: dict[str, Any], anchor: tuple[int, int, int] | None, version: int
    ) -> None:
        """NOTE [ A stream state over a source without a length ]
        A state names the samples it holds (shuffle buffer, bucket buffers or open rows, the
        samples a fill or a dry step reuses) by their positions in the worker's stream, and a
        resume reads them back at those positions. Over a source with a length, a sample added
        or removed changes the length, which the state records and a resume refuses (NOTE
        [ A stream state names its source's size ] in :mod:`bucketloader.stream.resume`); over
        a source without one (a generator, a ``datasets.IterableDataset``) nothing was compared,
        and with one sample inserted at the front (600 samples, ``shuffle_buffer=64``, a state
        after 20 batches) 27 samples were trained twice and 26 never that epoch, silently
        (s30-left). So a state over a source that records neither its length nor its files also
        records ``"lengths"``: a digest (:func:`lengths_digest`) of the lengths of the samples
        it holds, as the pass measured them (after the overflow policy; a packing stream's
        pieces: in an open row their size there, in a closed one by ``length_fn``), and a
        resume, once it took them back,
        compares the digest of what it read there and refuses another (a source that ends
        before a position it holds is refused as before, by the replay). Cost: one pass over
        the held samples' lengths per ``state_dict()``, which already lists their positions:
        28 us for 184 held samples, 661 us for 8,858, against 17 us and 505 us for the rest of
        the state (``benchmarks/stream_state_cost.py``, a loaded 2-core machine).

        What it catches: a change before the held samples that moves them (inserted, removed,
        reordered), or one of them replaced by a sample of another length. What it does not:
        a change that keeps every held sample's length (a sample edited in place, data of one
        length), or one after the newest sample the state holds or names (NOTE [ A stream state
        that holds no sample ]: the rest of the epoch reads the new data, as any pass would). A
        source that reads differently each time (a random crop or augmentation that changes
        lengths) is refused too: its held samples come back at other lengths, which would not
        fit the buckets or rows the state put them in. A state saved
        before the digest was recorded resumes unchecked, as before. ``anchor`` is the state's
        (NOTE [ A stream state that holds no sample ]) as read back, measured by the rule of
        digest ``version``, the state's."""
        saved = state.get("lengths")
        if saved is None:
            return
        mine = self._lengths_digest(anchor, version)
        if mine == saved:
            return
        keys = self._held_lengths()[0]
        held = f"the {len(set(keys)):,} samples its state holds ({self.HELD})"
        if anchor is None:
            what = (
                f"{held}, read back at their positions, have other lengths than when it was saved"
            )
        elif not keys:
            what = (
                f"its state holds no sample, and the newest sample it handed out (position "
                f"{anchor[0]:,}), read back there, has another length than when it was saved"
            )
        else:
            what = (
                f"{held} and the newest sample it handed out (position {anchor[0]:,}), read back "
                "at their positions, have other lengths than when it was saved"
            )
        raise self._changed_source(state, f"{what} (length digest {mine}, the state's {saved})")

    def _changed_source(self, state: dict[str, Any], what: str) -> RefusedResume:
        """The error of a resume over a source that changed since ``state`` was saved (NOTE
        [ A stream state over a source without a length ]); ``what`` says what changed."""
        return self._refused(int(state["epoch"]), what)

    def _refused(self, epoch: int, what: str) -> RefusedResume:
        """NOTE [ A stream's refused resume ]
        The one text of both refusals of a changed source, a resume's length digest (NOTE [ A
        stream state over a source without a length ]) and a replay's trace (NOTE [ A replay
        over a source without a length ]): ``what`` names the check, the two digests and what
        differs; then the causes, the harm and the two ways on, in the same words for both
        (they were two near-copies; s31-tidyA). A state saved over a source without a length
        and resumed over one with a length (checked since s32) is told that too: a source of
        another kind, such as a ``datasets.Dataset`` against its ``.to_iterable_dataset()``,
        which splits itself between DataLoader workers, gives other samples at the same
        positions even unchanged. A replay that rotated the lanes (``state["first"] != 0``: the
        next batch was another worker's than 0's) is told of a source that splits itself by
        ``get_worker_info()`` without being a torch ``IterableDataset`` (so the stream cannot
        tell, NOTE [ Who shards the stream across DataLoader workers ] in
        :mod:`bucketloader.stream.source`): each worker then reads its own share where the
        resume wants another's, which the same source cannot mend; the text names the two ways
        that do (s32-rev's L3; since s33 only such a source that reads the worker info after
        its first sample gets here: NOTE [ A plain source that splits itself ] in
        :mod:`bucketloader.stream.source`). Other refusals do not say it. Over a source
        without a length, the text ends with how a source with one would have caught the change
        sooner."""
        saved = self.saved_config or {}
        other_kind = checks_lengths(saved) and not self.checks_lengths
        causes = (
            "samples inserted, removed or reordered since, or a source that reads differently "
            "each time (a random crop or augmentation that changes lengths)"
        )
        if other_kind:
            causes += (
                ", or a source of another kind than the one it was saved over (saved over a "
                "source without a length, such as a datasets.IterableDataset, which splits "
                "itself between DataLoader workers by shard, and resumed over one with a "
                "length, such as a datasets.Dataset, read by position)"
            )
        rotated = int((self.saved_replay or {}).get("first") or 0)
        if rotated:  # (NOTE [ Worker checkpoints ] in stream.resume: the lanes were rotated)
            workers = self.worker[1]
            causes += (
                ", or a source that splits itself among DataLoader workers by "
                "torch.utils.data.get_worker_info() without being a torch IterableDataset: "
                f"this resume starts at worker {rotated}'s batch, so each DataLoader worker "
                "plays another's part, and such a source gives it its own share instead"
            )
            way = (
                f"For such a source, save the state after a multiple of num_workers={workers} "
                "batches, before any worker finished, or make it a "
                "torch.utils.data.IterableDataset (recognised: its state_dict then needs no such "
                "count once a worker finished, and else names the counts that resume). Else "
                "resume"
            )
        else:
            way = "Resume"
        text = (
            f"cannot resume this {self.OWNER} exactly: {what}. The source gives other samples "
            f"than when the state was saved: {causes}, so the resumed epoch would train some "
            f"samples twice and others never. {way} over the same source in the same order "
            "(seed any random transform by epoch and sample, so a sample reads the same each "
            f"time); {_start_over(epoch)}"
        )
        if self.checks_lengths:
            text += (
                ". A source with a length (a list, a datasets.Dataset, ArrowRows) has such a "
                "change caught at load_state_dict"
            )
        return RefusedResume(message=text)
