"""The row filler: one worker's pass of :class:`~bucketloader.stream.PackIterable`, online best
fit into open rows, over the engine of :mod:`bucketloader.stream._engine`.

NOTE [ Online best-fit over a bounded buffer ]
At most ``open_rows`` rows are open. A document goes into the open row with the least room that
still holds it (best fit: the open rows are kept sorted by free room); if none does, it opens a
row. A row that is full (or holds ``max_documents // B`` documents) closes; when more than
``open_rows`` rows are open, the fullest one closes. Closed rows queue up and leave ``B`` at a
time as a batch, in the order they closed. At the end of the stream the documents still in open
rows are packed again, offline (the planner's solver,
:func:`~bucketloader.pack.spec.pack_rows`), so the tail is as tight as the sampler's; the last
partial batch is yielded short (``"pad"``: the collator adds all-padding rows) or dropped
(``"drop"``). Memory stays at ``open_rows + B`` rows of documents.

NOTE [ Exact resume of the packing stream ]
As for the bucket filler (NOTE [ Exact resume of a buffered stream ] in
:mod:`bucketloader.stream._buckets`), the state
names documents by their *position* in this worker's stream (``[position, piece]``, the piece
of a document cut by ``overflow="split"``), never by content: ``read``, the open rows (with
their ids, which order ties), the queue of closed rows, and a source checkpoint at a position at
or before the oldest buffered document. Resuming restores the source there (``load_state_dict``;
a source without state restarts the epoch at 0; a source read by index fetches the buffered
positions instead, NOTE [ Seeking a source ]), re-reads up to ``read`` keeping the buffered
positions, rebuilds the rows and carries on: the remaining batches are exactly those of the
uninterrupted run. The source follows the stream's rules, from the same code (NOTE [ Who shards
the stream across DataLoader workers ] in :mod:`bucketloader.stream.source`). A state taken once
the tail is packed also holds the tail's record (``"tail"``, NOTE [ A state across solver
versions ]): the resumed pass does not pack it again, and writes the record on, so a replay state
taken after it records the tail as the uninterrupted run's does.

NOTE [ A packing stream split over ranks ]
Under DDP every rank must make the same number of steps (or the last collective hangs), with a
batch of the same shape at each step, and no rank can see the others' shards. The bucketing
stream's rule (NOTE [ A stream split over ranks ] in :mod:`bucketloader.stream._schedule`)
needs a schedule of shapes; a packing stream has one shape, so its rule is a count alone, which
every rank evaluates without any communication, at construction or per step:

* **Steps.** With ``steps_per_epoch=T`` every rank makes exactly ``T`` steps per epoch, each a
  :class:`~bucketloader.plan.PlannedBatch` of the one planned shape ``(B, L)``. ``T`` is required
  with more than one rank (``num_replicas``, by default the process group's size): no rank can
  know how many batches the other shards fill.
* **DataLoader workers are lanes.** Worker ``w`` of ``W`` makes the steps ``w, w + W, ...``,
  which the DataLoader hands out round-robin, so a rank makes ``T`` steps whatever its
  ``num_workers``; each worker packs its share of the rank's shard (NOTE [ Who shards the
  stream across DataLoader workers ] in :mod:`bucketloader.stream.source`).
* **Filling a step.** A lane packs exactly as the one-pass stream does (NOTE [ Online best-fit
  over a bounded buffer ]) until ``B`` rows have closed, and hands them out: its steps are the
  one-pass batches of its shard, in order. When the shard ends, the documents of the open rows
  are packed again offline and the last, short batch is completed with all-padding rows
  (``last_batch="pad"``; counted in ``padded_rows``) or with repeats (``"fill"``;
  ``repeated_rows``): the least seen of the rows the lane handed out last and of its own (NOTE
  [ What a stream's fill repeats ] in :mod:`bucketloader.stream.resume`).
* **A shard that runs dry** still takes its remaining steps. Under ``"pad"`` each is a
  padding-only batch: an empty ``PlannedBatch`` (``num_real=0``), which
  :class:`~bucketloader.pack.PackCollator` lays out as ``B`` all-padding rows (``input_ids``
  ``pad_token_id``, ``labels`` -100, ``document_ids`` -1, ``position_ids`` ``0..L-1``, one
  padding run per row in ``cu_seqlens``; ``padded_rows`` counts them). No token has a target,
  so the rank adds nothing to the gradients *if the loss is normalised by the target tokens of
  the whole step across ranks* (``Trainer``'s ``num_items_in_batch`` with
  ``average_tokens_across_devices``), not by the batch's own count, which is 0 (a per-batch
  mean is 0/0 = NaN). Under ``"fill"`` each such step takes instead the least seen of the rows
  the lane handed out last (documents repeat, spread over its last two batches' rows; every
  target is real). Packing needs no stand-in sample for a padding row, so even a
  lane whose shard is empty takes its steps, as padding only.
* **The end.** After its last step a lane stops. The documents still in its open rows and in
  closed rows not yet handed out are not used this epoch (``left_over`` counts them, a piece of
  a split document as one), nor is the unread rest of its shard: an open row is not full, and
  closing it early would only add padding. Choose ``T`` near ``tokens per rank / (B * L)`` (the
  bound on rows over ``B``; online best fit stays within a few percent of it): ``padded_rows``
  says ``T`` is too large, ``left_over`` (and ``read`` short of the shard) too small.

Under ``"pad"`` every document of a rank's shard is in at most one batch of the epoch, so
disjoint shards give every document at most once over the ranks. A split stream's exact state
also names its last batch (under ``"fill"``: the rows a fill repeats) and the step it reached;
it resumes by seeking or from the source's
checkpoints where the source allows (NOTE [ Seeking a source ] in
:mod:`bucketloader.stream.source`), else by replay (NOTE [ Resuming a packing stream behind
DataLoader workers ] in :mod:`bucketloader.stream.packing`): each lane's count of batches
follows from the batches consumed alone.

NOTE [ A state across solver versions ]
The tail (the documents of the open rows when a shard ends) is packed by the planner's solver,
whose plans change with its ``SOLVER_VERSION``; a state records the
version in its ``config`` (``"solver"``; a state saved before it was recorded has none). Only
one resume depends on it: a replay (or a worker checkpoint before the tail) whose count of
batches to skip ends *inside* the tail. The skipped tail batches are then re-packed by this
version, and may hold other documents than those the saved run handed out: documents would be
trained on twice or never. So when a lane packs its tail it writes to its row of the shared
table (:data:`TAIL_FIELDS`) the batches it made before the tail, the tail's batches and a digest
of the tail's rows (each a list of ``[position, piece]``); a replay state records them per
worker (``"tails"``, for the workers that had packed their tail). The resumed pass packs its
tail again and refuses (a ``ValueError`` naming both versions and the count) only when it
must skip part of that tail and its rows differ from the recorded ones: a version bump that
leaves this tail's plan unchanged resumes exactly, and a solver change that forgot the bump is
caught too. A state without the record (saved before it existed) keeps the version rule: a
mid-tail skip under another version is refused. Neither can be decided in ``load_state_dict``:
the tail's documents are known only once the pass has re-read its shard (the state holds
counts, not documents), so the refusal comes when the pass reaches its tail. Every other
resume under another version is exact: an exact state holds the tail's rows themselves, a
replay that stops before the tail re-packs it before any of it was handed out (the epoch's
rest differs from the saved run's only in how the tail is packed), and one that skips the
whole tail hands out none of it either time (the same documents).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._samples import length_reader, stream_len
from bucketloader.pack.spec import SOLVER_VERSION, pack_rows
from bucketloader.pack.split import cut
from bucketloader.plan import PlannedBatch
from bucketloader.stream._engine import TRACE_MOD, Pass
from bucketloader.stream.counters import RefusedResume
from bucketloader.stream.source import check_length

STATE_FORMAT = 1
#: How ``last_batch="fill"`` completes a short batch (and a dry lane's step), recorded in a fill
#: stream's state ``config`` (``"fill"``; absent: 1, copies of the batch's own rows, and a dry
#: lane's last batch again; 2: the least seen of the rows handed out last and of the batch's
#: own, NOTE [ What a stream's fill repeats ] in :mod:`bucketloader.stream.resume`). A state of
#: another version is refused.
FILL_VERSION = 2

#: A lane writes all its counters every this many batches (and at the end of its pass).
#: The counters of a pass, as :attr:`PackIterable.stats <bucketloader.stream.PackIterable.stats>`
#: names them.
STATS = (
    "rows",
    "tokens",
    "overflow_dropped",
    "truncated",
    "split",
    "tail_dropped",
    "padded_rows",
    "repeated_rows",
    "left_over",
    "skipped",
)
#: A lane's tail, in its row of the shared table (NOTE [ A state across solver versions ]):
#: the batches it made before its tail, the tail's batches, a digest of the tail's rows.
TAIL_FIELDS = ("tail_start", "tail_batches", "tail_digest")


def make_length_fn(length_fn: Any) -> Callable[[Any], int]:
    """``sample -> tokens`` (NOTE [ The length of a sample ] in :mod:`bucketloader._samples`)."""
    if length_fn is None or isinstance(length_fn, str):
        return length_reader(length_fn, arg="length_fn")
    if callable(length_fn):
        if length_fn is len:  # (not of a dict or a tuple of fields: NOTE [ len of a dict sample ])
            return stream_len
        return length_fn  # type: ignore[no-any-return]
    raise TypeError(
        f"length_fn must be None, a key of the samples or a callable sample -> int, got "
        f"length_fn={length_fn!r}"
    )


@dataclass(frozen=True)
class PackConfig:
    """What a pass needs from its :class:`~bucketloader.stream.PackIterable`.

    ``steps`` is ``steps_per_epoch`` (0: one pass over the source; NOTE [ A packing stream split
    over ranks ]), ``rank`` names the rank in messages, ``counters`` is the shared
    :class:`~bucketloader.stream.counters.LaneCounters` table (or ``None``).
    """

    source: Any
    measure: Callable[[Any], int]
    row_length: int
    batch_size: int
    max_per_row: int
    open_rows: int
    stale_tokens: int
    overflow: str
    last_batch: str
    stateful: bool
    config: dict[str, Any]
    seekable: bool = False
    steps: int = 0
    rank: int = 0
    counters: Any = None
    lane_states: Any = None


#: Types of a sample that is a number, not a document (a stream of lengths given as documents).
_NUMBERS = frozenset(
    (int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
)


def _newest_item(row: tuple[list[tuple[int, int]], list[Any]]) -> tuple[int, int]:
    """A closed row's newest document piece, ``(position, piece)``: its last (placed in order)."""
    return row[0][-1]


class RowPass(Pass):
    """Open rows and closed rows of one pass; :meth:`run` is the generator of batches."""

    STATE_FORMAT = STATE_FORMAT
    LENGTHS_VERSION = 2  # NOTE [ Pieces of one length ]
    OWNER = "PackIterable"
    HELD = "the documents of its open and closed rows and of the rows a fill reuses"
    STEPS_HINT = "the tokens per rank / (batch_size * row_length)"
    FILL_HOW = (
        "documents",
        "a short batch is completed with the least seen of the rows handed out last and of its own",
    )

    def __init__(
        self, cfg: PackConfig, epoch: int, worker: tuple[int, int], *, skip: int = 0
    ) -> None:
        every = max(64, cfg.open_rows * 4)
        super().__init__(cfg, epoch, worker, skip=skip, stats=STATS, every=every)
        self.next_id = 0
        self.tokens_read = 0
        # open rows, oldest first: id -> [free, [(pos, piece), ...], [sample, ...], opened at
        # (tokens_read when opened), [size in the row, ...]]; caps: sorted (free, id)
        self.rows: dict[int, list[Any]] = {}
        self.caps: list[tuple[int, int]] = []
        self.ready: list[tuple[list[tuple[int, int]], list[Any]]] = []
        self._got: dict[tuple[int, int], tuple[Any, int]] = {}  # taken back by a resume
        self._src: Iterator[Any] = iter(())
        self._last: list[tuple[list[tuple[int, int]], list[Any]]] = []  # (a split stream's)
        # last_batch="fill" (NOTE [ What a stream's fill repeats ] in stream.resume): the rows
        # handed out last (at most 2 B: the last two batches; after a fill, least seen first),
        # and the appearances in this pass of the rows a fill repeated (by their first
        # document's [position, piece]; others: 1)
        self._fills = cfg.last_batch == "fill"
        self._kept: list[tuple[list[tuple[int, int]], list[Any]]] = []
        self._seen: dict[tuple[int, int], int] = {}
        self.tail: tuple[int, int, int] | None = None  # (start, batches, digest) once packed
        # NOTE [ Pieces of one length ]: the whole length of each document the overflow policy
        # cut, by position (let go once it is no longer held, when there are _whole_cap)
        self._whole: dict[int, int] = {}
        self._whole_cap = 256

    # -- per document -----------------------------------------------------------------------
    def pieces(self, pos: int, sample: Any, *, read: bool = True) -> list[tuple[int, Any, int]]:
        """``[(piece, sample, tokens)]`` after the overflow policy (empty when dropped);
        ``read``: the pass reads it (not a resume taking it back)."""
        o = self.o
        n = check_length(o.measure(sample), pos)
        if type(sample) in _NUMBERS:
            raise TypeError(
                f"sample {pos} of this worker's stream is the number {int(sample)}, not a "
                "document: a packing stream packs documents (lists or arrays of tokens, or dicts "
                "of them); "
                "to plan from lengths alone use PackSampler(lengths, ...), else give the stream "
                "the documents themselves"
            )
        if n == 0:
            raise ValueError(
                f"sample {pos} of this worker's stream has 0 tokens; an empty document cannot be "
                "packed: filter empty samples out of the source"
            )
        limit = o.row_length
        if n <= limit:
            return [(0, sample, n)]
        if o.overflow == "error":
            raise ValueError(
                f"sample {pos} of this worker's stream has {n} tokens > row_length={limit}; pass "
                "overflow='drop', 'truncate' or 'split', or a longer row_length"
            )
        if o.overflow == "drop":
            self.stats["overflow_dropped"] += 1
            self.left_out()
            return []
        if self.traced:  # (over a source without a length: NOTE [ Pieces of one length ])
            self._keep_whole(pos, n, read)
        if o.overflow == "truncate":
            self.stats["truncated"] += 1
            return [(0, cut(sample, n, 0, limit), limit)]
        self.stats["split"] += 1
        return [
            (j, cut(sample, n, a, min(a + limit, n)), min(a + limit, n) - a)
            for j, a in enumerate(range(0, n, limit))
        ]

    def _keep_whole(self, pos: int, length: int, read: bool) -> None:
        """NOTE [ Pieces of one length ]
        ``overflow="split"`` cuts a document into pieces of ``row_length`` tokens (the last one
        shorter) and ``"truncate"`` keeps its first ``row_length``: such pieces have one length
        whatever document they came from. A state's length digest (NOTE [ A stream state over a
        source without a length ] in :mod:`bucketloader.stream._engine`) took each held piece's
        size, and its anchor's (NOTE [ A stream state that holds no sample ]), so it could not
        tell which document a piece came from: over documents of 16, 32 and 48 tokens split
        into rows of 16, one document inserted at the front of the source resumed silently from
        26 of 58 states (s33-left's sweep), pieces trained twice or never. So a packing state's
        digest takes, for each piece of a cut document, the document's whole ``length`` (as
        measured before the policy), as the replay trace folds a split document's whole length
        since s32 (:meth:`_trace_split`); an anchor that is such a piece too. The state says so
        (``"lengths_version": 2``, :attr:`LENGTHS_VERSION`); one saved before (none) is checked
        by the pieces' sizes, as it was. A pass over a source without a length (whose states
        digest) keeps the whole length of each cut document (``_whole``, by position: those no
        longer held are let go when a ``read`` one finds ``_whole_cap`` kept; a resume keeps
        those it takes back): one dict store per cut document, and one lookup per held piece at
        ``state_dict()`` while any is kept. Left: documents of one whole length (a piece of one
        in place of a piece of the other reads alike), as any digest of lengths leaves."""
        whole = self._whole
        if read and len(whole) >= self._whole_cap:
            held = set(self._positions())
            held.update(self._stand_ins())
            whole = self._whole = {p: n for p, n in whole.items() if p in held}
            self._whole_cap = max(256, 2 * len(whole))
        whole[pos] = length

    def _trace_split(self, length: int) -> None:
        """Fold the whole ``length`` of a document ``overflow="split"`` cut into the trace when it
        is read (NOTE [ A replay over a source without a length ]): its pieces of ``row_length``
        tokens fill rows that read alike whatever document they came from, so a batch of whole
        pieces told nothing, and a document inserted before them went unseen (s32-rev: 32 tokens
        trained twice, 32 never). Folded as read, not as batched: a resume's taking back of the
        pieces it holds calls :meth:`pieces`, not this, so the trace it goes on from is kept."""
        if self.trace is not None:
            self.trace = (self.trace * 1_000_003 + length * 131 + 7) % TRACE_MOD

    def _place(self, item: tuple[int, int], sample: Any, size: int) -> None:
        o = self.o
        caps = self.caps
        i = bisect.bisect_left(caps, (size, -1))
        if i < len(caps):
            free, rid = caps.pop(i)
            row = self.rows[rid]
        else:
            rid = self.next_id
            self.next_id += 1
            free, row = o.row_length, [o.row_length, [], [], self.tokens_read, []]
            self.rows[rid] = row
        self.tokens_read += size
        free -= size
        row[0] = free
        row[1].append(item)
        row[2].append(sample)
        row[4].append(size)
        if free == 0 or len(row[1]) >= o.max_per_row:
            self._close(rid)
        else:
            bisect.insort(caps, (free, rid))
            if len(self.rows) > o.open_rows:
                self._close(caps.pop(0)[1])
        oldest = next(iter(self.rows), None)  # a row open for a whole buffer of tokens closes
        if oldest is not None and self.tokens_read - self.rows[oldest][3] > o.stale_tokens:
            caps.remove((self.rows[oldest][0], oldest))
            self._close(oldest)

    def _close(self, rid: int) -> None:
        row = self.rows.pop(rid)
        self.ready.append((row[1], row[2]))

    def _batch(self) -> list[Any]:
        """The next batch: up to ``B`` closed rows; a short one (the end of the shard) is
        completed by ``last_batch``: all-padding rows (``"pad"``, by the collator) or repeats
        (``"fill"``: :meth:`_top_up`)."""
        bsz = self.o.batch_size
        take, self.ready = self.ready[:bsz], self.ready[bsz:]
        self.batches += 1
        self.stats["rows"] += len(take)
        out = [s for _, samples in take for s in samples]
        sizes = [self.o.measure(s) for s in out]
        tokens = sum(sizes)
        self.stats["tokens"] += tokens
        if self.trace is not None:  # full rows all read alike: the documents tell them apart
            self._trace_batch(len(take), tokens, [len(samples) for _, samples in take] + sizes)
        if take and self.traced:  # NOTE [ A stream state that holds no sample ] in
            # stream._engine (over a source without a length, as the trace): the newest document
            # handed out, by position. Rows close out of read order (a stale row after the row
            # of the document just read): the last batch's last document was the anchor, and a
            # document inserted after it resumed silently, trained twice (s33-tidyB). A row's
            # last document is its newest.
            r = max(range(len(take)), key=lambda i: _newest_item(take[i]))
            item = take[r][0][-1]
            if self.anchor is None or item > self.anchor[:2]:  # (its size, measured above; a
                # cut document's whole length: NOTE [ Pieces of one length ])
                end = sum(len(samples) for _, samples in take[: r + 1])
                self.anchor = (*item, self._whole.get(item[0], sizes[end - 1]))
        if self._fills:
            take = self._top_up(take)
            return [s for _, samples in take for s in samples]
        if len(take) < bsz:
            self.stats["padded_rows"] += bsz - len(take)
        self._last = take
        return out

    def _top_up(
        self, take: list[tuple[list[tuple[int, int]], list[Any]]]
    ) -> list[tuple[list[tuple[int, int]], list[Any]]]:
        """``last_batch="fill"``: ``take`` (the batch's new rows; none on a dry step) completed
        to ``B`` rows, each slot with the least seen of the rows handed out last (the kept
        ones) and the batch's own, a row handed out before ahead of the batch's own at equal
        counts (NOTE [ What a stream's fill repeats ] in :mod:`bucketloader.stream.resume`);
        count the repeats and keep the rows handed out last. Nothing to repeat at all (a lane
        that never had a row) leaves it empty."""
        bsz, kept, seen = self.o.batch_size, self._kept, self._seen
        need = bsz - len(take)
        if not need:  # a full batch of new rows: the first of the kept ones (two batches)
            self._kept = take + kept[:bsz]
            return take
        heap = [(seen.get(r[0][0], 1), 0, i, r) for i, r in enumerate(kept)]
        heap += [(1, 1, i, r) for i, r in enumerate(take)]
        if not heap:
            return take
        heapq.heapify(heap)
        picks = []
        after = len(heap)  # a row taken goes after the others of its count (round robin)
        for _ in range(need):
            t, kind, _, row = heapq.heappop(heap)
            picks.append(row)
            seen[row[0][0]] = t + 1
            heapq.heappush(heap, (t + 1, kind, after, row))
            after += 1
        self.stats["repeated_rows"] += need
        out = take + picks
        self._note_batch(
            [x for items, _ in out for x in items], {x for items, _ in kept for x in items}
        )
        # kept: this batch's rows, then the earlier ones, least seen first (at most 2 B; the
        # state names them)
        here = {row[0][0]: row for row in out}
        rows = [*here.values(), *(r for r in kept if r[0][0] not in here)]
        self._kept = sorted(rows, key=lambda r: seen.get(r[0][0], 1))[: 2 * bsz]
        held = {r[0][0] for r in self._kept}
        self._seen = {k: t for k, t in seen.items() if k in held}  # (the rest: never again)
        return out

    # -- the pass ---------------------------------------------------------------------------
    def _batches(self, it: Iterator[Any]) -> Iterator[list[Any]]:
        """The batches of this lane's pass (one pass, or its scheduled steps)."""
        self._src = it
        return self._steps() if self.o.steps else self._pass()

    def _fill(self) -> None:
        """Read the source until ``B`` rows are closed; at its end, pack the documents of the
        open rows again offline (phase ``"tail"``)."""
        if self.phase != "stream":
            return
        bsz = self.o.batch_size
        if len(self.ready) >= bsz:
            return
        stateful, every, place, pieces = self.o.stateful, self.every, self._place, self.pieces
        for sample in self._src:
            pos = self.read
            self.read = pos + 1
            if stateful and self.read % every == 0:
                self._snapshot()
            got = pieces(pos, sample)
            if len(got) > 1:  # a split document: its whole length joins the trace
                self._trace_split(sum(size for _, _, size in got))
            for piece, part, size in got:
                place((pos, piece), part, size)
            if len(self.ready) >= bsz:
                return
        self._repack()
        self.phase = "tail"

    def _pass(self) -> Iterator[list[Any]]:
        """One pass over the source (NOTE [ Online best-fit over a bounded buffer ])."""
        bsz = self.o.batch_size
        while True:
            self._fill()
            if len(self.ready) < bsz:
                break
            yield self._batch()
        if self.ready:
            if self.o.last_batch == "drop":
                self.stats["tail_dropped"] += sum(len(r[0]) for r in self.ready)
                self.ready = []
            else:
                yield self._batch()
        self.phase = "done"

    def _steps(self) -> Iterator[list[Any]]:
        """This lane's share of ``steps_per_epoch`` (NOTE [ A packing stream split over
        ranks ]): every step a batch of the planned shape, padding-only once the shard is dry."""
        o = self.o
        lane, lanes = self.worker
        shape = (o.batch_size, o.row_length)
        for _ in range(lane, o.steps, lanes)[self.batches :]:  # after an exact state: the rest
            self._fill()
            if self.ready:
                batch = self._batch()
            elif self._fills and self._kept:  # dry: the least seen of the rows handed out last
                batch = [s for _, samples in self._top_up([]) for s in samples]
                self.batches += 1
                self.dry += 1
            else:  # dry: a padding-only step (the collator writes B all-padding rows)
                batch = []
                self.stats["padded_rows"] += o.batch_size
                self.batches += 1
                self.dry += 1
            yield PlannedBatch(batch, planned_shape=shape, num_real=len(batch))
        self.stats["left_over"] = len(self._positions())

    def _repack(self) -> None:
        """Pack the documents of the open rows again, offline (tighter than closing them), by
        the sizes they took in their rows (a cut document's length_fn need not measure the cut
        part: a length column, special tokens)."""
        docs = [
            (item, sample, size)
            for rid in sorted(self.rows)
            for item, sample, size in zip(*self.rows[rid][1:3], self.rows[rid][4], strict=True)
        ]
        self.rows, self.caps = {}, []
        if not docs:
            return
        for row in pack_rows([d[2] for d in docs], self.o.row_length, self.o.max_per_row):
            self.ready.append(([docs[i][0] for i in row], [docs[i][1] for i in row]))
        rows = json.dumps([[list(x) for x in items] for items, _ in self.ready]).encode()
        digest = int(hashlib.sha256(rows).hexdigest()[:15], 16)  # 60 bits: an int64 field
        self.tail = (self.batches, self._tail_batches(), digest)
        self.flush()  # a state taken from here on records the tail (before its first batch)
        if self.skip and self.saved_config is not None:
            self._check_tail()

    def _tail_batches(self) -> int:
        """How many of the batches this lane still makes come from its tail."""
        bsz, o = self.o.batch_size, self.o
        rows = len(self.ready)
        tail = rows // bsz if o.last_batch == "drop" and not o.steps else -(-rows // bsz)
        if o.steps:  # only the lane's steps left hand the tail out
            tail = min(tail, len(range(self.worker[0], o.steps, self.worker[1])) - self.batches)
        return max(tail, 0)

    def _lane_fields(self) -> dict[str, int]:
        if self.tail is None:
            return {}
        return dict(zip(TAIL_FIELDS, self.tail, strict=True))

    def _saved_tail(self) -> list[int] | None:
        """This lane's tail as the resumed state recorded it (``None``: not recorded)."""
        tails = (self.saved_replay or {}).get("tails")
        return tails[self.worker[0]] if tails else None

    def _check_tail(self) -> None:
        """A resume that skips part of a tail packed into other rows than the saved run's is
        refused (NOTE [ A state across solver versions ])."""
        saved = self.saved_config.get("solver") if self.saved_config else None
        tail = self.tail[1] if self.tail is not None else 0
        if not 0 < self.skip < tail:
            return
        recorded = self._saved_tail()
        fix = (
            "Resume with the bucketloader that saved the state, or start the next epoch "
            "instead (set_epoch(epoch + 1), no load_state_dict)"
        )
        if recorded is not None:
            if list(recorded) == list(self.tail or ()):
                return  # the same rows: the resume is exact, whichever version packed them
            why = (
                "this one packs that tail into other rows than the saved run handed out, so "
                "documents would be trained on twice or never"
            )
            if saved == SOLVER_VERSION:  # then the cause is not the version
                why += (
                    " (the same version: the source gave other documents, or the solver "
                    "changed without a new version)"
                )
                fix = (
                    "Resume over a source that gives the same documents in the same order as "
                    "when the state was saved, or start the next epoch instead "
                    "(set_epoch(epoch + 1), no load_state_dict)"
                )
        elif saved == SOLVER_VERSION:
            return
        else:
            why = (
                "this version may pack it into other rows than the saved run handed out "
                "(documents trained on twice or never)"
            )
        was = (
            f"solver version {saved}"
            if saved is not None
            else "a bucketloader that did not record its solver version"
        )
        raise RefusedResume(
            message=f"cannot resume this PackIterable exactly: its state was saved by {was}, and "
            f"this one packs with solver version {SOLVER_VERSION}; the resumed pass of worker "
            f"{self.worker[0]} must skip {self.skip} of the {tail} batches it packs from the "
            f"tail of its shard (the documents still in open rows at its end); {why}. {fix}"
        )

    # -- state (the engine's skeleton asks) ---------------------------------------------------
    def _positions(self) -> list[int]:
        return [p for rid in self.rows for p, _ in self.rows[rid][1]] + [
            p for items, _ in self.ready for p, _ in items
        ]

    def _stand_ins(self) -> list[int]:
        if self._fills:  # the rows a fill repeats (a one-pass stream's tail tops up from them)
            return [p for items, _ in self._kept for p, _ in items]
        if not self.o.steps:  # a one-pass stream repeats nothing once dry
            return []
        return [p for items, _ in self._last for p, _ in items]

    def _filler_state(self) -> dict[str, Any]:
        out = {
            "next_id": self.next_id,
            "tokens_read": self.tokens_read,
            "open": [[rid, row[3], [list(x) for x in row[1]]] for rid, row in self.rows.items()],
            "ready": [[list(x) for x in items] for items, _ in self.ready],
        }
        if self._fills:  # NOTE [ What a stream's fill repeats ] in stream.resume
            kept = [[list(x) for x in items] for items, _ in self._kept]
            keys = {items[0] for items, _ in self._kept}
            seen = [[*k, t] for k, t in self._seen.items() if k in keys]  # (the rest: unused)
            out["fill"] = {"last": kept, "seen": seen}
        elif self.o.steps:  # the last batch (a fill version 1 state repeated it once dry)
            out["last"] = [[list(x) for x in items] for items, _ in self._last]
        if self.tail is not None:  # packed: a pass resumed from here records it too
            out["tail"] = list(self.tail)
        return out

    def _held_lengths(self, version: int = 1) -> tuple[list[int], list[int]]:
        keys: list[int] = []
        lengths: list[int] = []
        for row in self.rows.values():
            keys += [p * 65_536 + j for p, j in row[1]]
            lengths += row[4]
        # (a closed row keeps its documents, not their sizes: length_fn measures those, alike
        # when the state is taken and when a resume rebuilt the rows)
        measure = self.o.measure
        # (the kept rows as the state names them: _filler_state)
        named = self._kept if self._fills else self._last if self.o.steps else []
        for rows in (self.ready, named):
            for items, samples in rows:
                keys += [p * 65_536 + j for p, j in items]
                lengths += [measure(d) for d in samples]
        whole = self._whole
        if version > 1 and whole:  # a cut document's pieces: its whole length (NOTE [ Pieces of
            # one length ]; a key's high bits are its position)
            lengths = [whole.get(k >> 16, n) for k, n in zip(keys, lengths, strict=True)]
        return keys, lengths

    def _wanted(self, state: dict[str, Any]) -> set[int]:
        wanted = {int(p) for _, _, items in state["open"] for p, _ in items}
        wanted |= {int(p) for items in state.get("last", ()) for p, _ in items}
        wanted |= {int(p) for items in state.get("fill", {}).get("last", ()) for p, _ in items}
        return wanted | {int(p) for items in state["ready"] for p, _ in items}

    def _take_back(self, pos: int, sample: Any) -> None:
        for piece, part, size in self.pieces(pos, sample, read=False):
            self._got[(pos, piece)] = (part, size)

    def _sample_of(self, x: list[int]) -> tuple[Any, int]:
        """The document piece ``x`` (``[position, piece]``) a resume took back, and its size."""
        key = (int(x[0]), int(x[1]))
        if key not in self._got:
            raise RefusedResume(
                message=f"cannot resume: document {list(key)} is no longer produced"
            )
        return self._got[key]

    def _taken_length(self, pos: int, piece: int, version: int) -> int:
        part = self._sample_of([pos, piece])[0]
        if version > 1 and pos in self._whole:  # NOTE [ Pieces of one length ]
            return self._whole[pos]
        return int(self.o.measure(part))  # (as _batch measures)

    def _verify(self, state: dict[str, Any]) -> None:
        sample_of = self._sample_of
        # Every token placed in a row is handed out or still held: a state whose rows (or their
        # documents) were deleted would lose those documents silently, so it is refused. The
        # handed-out tokens (stats) are measured by length_fn, the placed ones by their size in
        # the row: the two agree until a document is cut (overflow="split" / "truncate" with a
        # length_fn that does not measure the cut field: a length column, special tokens), so
        # the check runs only while no document was cut. (After the lengths check, whose
        # message names a changed source: NOTE [ A stream state over a source without a
        # length ] in bucketloader.stream._engine.)
        held = sum(sample_of(x)[1] for items in state["ready"] for x in items) + sum(
            sample_of(x)[1] for _, _, items in state["open"] for x in items
        )
        self._got = {}
        cut = self.stats.get("truncated", 0) or self.stats.get("split", 0)
        if state["phase"] != "done" and not cut and self.tokens_read != self.stats["tokens"] + held:
            # (s29-user: a document inserted into a list source before the resume shifts the
            # positions the state names, and the source's documents then fail this count too;
            # the message blamed an edited state only)
            raise RefusedResume(
                message=f"state's rows hold {held} tokens and its batches handed out "
                f"{self.stats['tokens']}, but it placed tokens_read={self.tokens_read} in rows: "
                "rows or documents were removed from (or added to) the state, or the source "
                "holds other documents at the positions the state names (documents inserted or "
                "removed since it was saved), which would lose documents. Resume over the "
                "source the state was saved over, with a dict from PackIterable.state_dict(), "
                "unedited; to go on over this source instead, skip load_state_dict and start "
                f"the next epoch: stream.set_epoch({int(state['epoch']) + 1})"
            )

    def _restore(self, state: dict[str, Any]) -> None:
        sample_of = self._sample_of  # (the pieces taken back: _verify then drops them)
        self.next_id = int(state["next_id"])
        self.tokens_read = int(state["tokens_read"])
        self.rows, self.caps = {}, []
        for rid, opened, items in state["open"]:  # oldest first, as saved
            docs = [sample_of(x) for x in items]
            free = self.o.row_length - sum(d[1] for d in docs)
            self.rows[int(rid)] = [
                free,
                [tuple(x) for x in items],
                [d[0] for d in docs],
                opened,
                [d[1] for d in docs],
            ]
            bisect.insort(self.caps, (free, int(rid)))
        self.ready = [
            ([(int(x[0]), int(x[1])) for x in items], [sample_of(x)[0] for x in items])
            for items in state["ready"]
        ]
        self._last = [
            ([(int(x[0]), int(x[1])) for x in items], [sample_of(x)[0] for x in items])
            for items in state.get("last", ())
        ]
        fill = state.get("fill", {})
        self._kept = [
            ([(int(x[0]), int(x[1])) for x in items], [sample_of(x)[0] for x in items])
            for items in fill.get("last", ())
        ]
        self._seen = {(int(p), int(j)): int(t) for p, j, t in fill.get("seen", ())}
        tail = state.get("tail")  # (a state saved before it was recorded: none)
        self.tail = None if tail is None else (int(tail[0]), int(tail[1]), int(tail[2]))
