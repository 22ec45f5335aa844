"""Resuming a stream: the shape of its state, and the state behind DataLoader workers.

NOTE [ Resuming a stream behind DataLoader workers ]
Both streams (:class:`~bucketloader.BucketIterable`, :class:`~bucketloader.stream.PackIterable`)
resume by the same rule. In one process (``num_workers=0``) the stream's state is exact and cheap:
positions of the buffered samples and a source checkpoint (NOTE [ Exact resume of a buffered stream
] in :mod:`bucketloader.stream._buckets`; NOTE [ Exact resume of the packing stream ] in
:mod:`bucketloader.stream._rows`). Under DataLoader workers the main process never sees the
workers' buffers, so the state it can own is *how many batches each worker had handed out*: a pure
function of the (deterministic) source and the seed, which the shared counters give (NOTE [ A
stream's counters across DataLoader workers ] in :mod:`bucketloader.stream.counters`).
``state_dict(batches_consumed=k)`` turns the ``k`` batches the loop consumed into a count per
worker (the DataLoader hands batches out round-robin over the workers still running); on resume
each worker replays its pass from the start of the epoch and hands out only what comes after its
count. That is exact, costs a re-read of the data consumed so far (no collation, no training), and
needs the same ``num_workers``; over a source without a length the state also records each
worker's trace of the batches it skips, which the replay compares (NOTE [ A replay over a
source without a length ] in :mod:`bucketloader.stream._engine`). A stream split over ranks
resumes this way behind workers too (its per-worker counts follow from ``k`` alone), unless
worker checkpoints (below) are on; in one process it seeks or restarts at the source's
checkpoints where its source can (NOTE [ Seeking a source ] in
:mod:`bucketloader.stream.source`).

NOTE [ Worker checkpoints ]
Replaying a worker's pass from the start of the epoch re-reads everything it consumed. A stream
built with ``checkpoint_dir=PATH`` (off by default: writing costs every worker a JSON dump of its
state, also when ``state_dict`` is never called) lets each worker write its exact state every
:data:`CHECKPOINT_EVERY` batches it makes, when that state is cheap (a one-pass stream over a
source that seeks or checkpoints itself, NOTE [ Seeking a source ] in
:mod:`bucketloader.stream.source`), as a small JSON file in a private directory (mode 0700) the
stream makes inside ``PATH`` when it is built (:class:`LaneStates`; removed with the stream,
though not when the process is killed). Each worker keeps its newest :data:`CHECKPOINTS_KEPT`,
and its first write of an epoch removes the files of earlier epochs. A state larger than
:data:`CHECKPOINT_MAX_BYTES` (a large shuffle buffer) is not written: the worker warns once and
writes none for the rest of its pass. The state is a pure function of (epoch, worker, number of
workers, batches made), so an older pass's file is as good as a new one. ``state_dict`` then
adds, per worker, the newest of its states at or before the batches it must skip; a resumed
worker restores that state (it seeks) and replays only the few batches after it. A worker with
no such file (checkpoints off, a state too large, the loop lagged more than the files kept)
replays from the start as before.

A new DataLoader starts its round-robin at worker 0, while the next batch may be worker ``f``'s
(``f = k mod num_workers`` when every worker is still running). A source this stream splits itself
(a list, a generator factory) is then *rotated*: DataLoader worker ``w`` plays the part of worker
``(w + f) mod num_workers``, its shard, seed and count, so the order is exact again. A source that
shards itself by worker id (HF or torch ``IterableDataset``) cannot be rotated: ``state_dict`` then
asks for a count that is a multiple of ``num_workers`` (checkpoint every ``N`` steps with ``N`` a
multiple of it), rather than resume in a different order.

NOTE [ What a stream's fill repeats ]
A stream's ``last_batch="fill"`` completes a short batch with repeats (a bucket's tail, or its
scheduled batch when the shard has only a few of that bucket left; a packing stream's last
rows), and a lane whose shard is dry repeats what it handed out. A sampler's fill draws its
repeats from the whole bucket (NOTE [ last_batch and replicas ] in
:mod:`bucketloader.plan.epoch`: each at most once more when the bucket fills a step), but a
stream knows only what it holds. Completing a batch with copies of *its own* samples let one
sample make a whole batch: LibriSpeech frames, 8 buckets of 32, 8 ranks each on its
``[rank::8]`` shard, ``steps_per_epoch=117`` (the sampler's count): on two of the ranks one
utterance (675, 677 frames) made a batch of 32 copies of itself, and the next step of that
bucket, finding nothing new, repeated that batch: 64 appearances in the epoch; on one rank, one
pass, a tail batch of 2 real samples made 16 copies of each (s22-fill).

So a :class:`~bucketloader.BucketIterable` (fill version 2, ``FILL_VERSION`` in
:mod:`bucketloader.stream._buckets`) keeps, per bucket, the samples it handed out last: its
last two batches, and after a short batch that batch's samples before the earlier ones not
repeated in it, at most ``2 B``; and how often each sample it repeated has appeared in the pass.
A short batch (or a step that found nothing new) gets each missing slot from the least seen of
those samples, its bucket's and then those of the buckets it covers, nearest first (they fit
its shape; the batch keeps its first sample's bucket), and of the batch's own samples; at equal
counts a sample handed out before goes ahead of the batch's own, so the batch's own are copied
only when every other candidate has been seen as often. Measured (``benchmarks/fill_repeats.py``:
the most appearances of one sample in an epoch, epochs 0-3, a shuffle buffer of 256; 8
simulated ranks / one pass): LibriSpeech 8 x 32 64 -> 2 / 16 -> 2, LibriSpeech
``max_tokens=16000`` 21 -> 3 / 6 -> 2, Common Voice 16 x 64 64 -> 2 / 7 -> 2, GSM8K 8 x 32
64 -> 2 / 5 -> 2. The number of repeats is the same (a batch's shape and count do not change),
and ``report()``'s ``repeated`` still counts each. Where a lane has far fewer samples than steps
(``steps_per_epoch`` well above its shard, or a tiny set) a sample still repeats many times,
less than before (a fuzz over 150 small random cases: the worst lane 40 -> 24).
The one-pass stream keeps these samples only under ``"fill"`` (memory: two batches per bucket
besides the buffers). An exact state names them by position (``"fill"``: a one-pass stream's
kept samples, a split stream's are in ``"scheduled"``, and the appearances of those repeated),
so a resume reproduces the repeats; it reaches back to them through the source's checkpoints
like the buffered samples. A state records the version in its ``config`` (``"fill"``); one
saved by another version (or before it was recorded: version 1's copies) resumes into other
batches, so ``load_state_dict`` refuses it, naming ``set_epoch`` as the way on, except a replay
state from before the epoch's first batch.

A :class:`~bucketloader.stream.PackIterable` (its own fill version 2, ``FILL_VERSION`` in
:mod:`bucketloader.stream._rows`) does the same with rows: it completed its last batch with
copies of its own rows, and a dry lane repeated its last batch at every step left (GSM8K's
first 4,000 pairs in rows of 512, 16 a batch, one pass: a tail of a few rows made 3 copies
of some of them; a lane of 9 rows dry for 17 of 20 steps: 6 documents 72 times each,
s24-packfill). It keeps the rows it handed out last (its last two batches, at most ``2 B``
rows; after a fill, its batch's rows before the earlier ones, least seen first) and how often
each row it repeated has appeared; a short batch, or a dry step, takes each missing row from
the least seen of those and of the batch's own (a row handed out before ahead of the batch's
own at equal counts, and a row just taken after the others of its new count, so a step
repeats a row only when every other has been seen as often). Every row holds at most
``max_documents // B`` documents of at most ``L`` tokens, so the batch keeps its shape and its
``cu_seqlens`` size. Measured (``benchmarks/fill_repeats.py``, GSM8K[:4000], one pass / 8
simulated ranks): the most appearances of a document 3 -> 2 / 2 -> 2, repeats 67 -> 55 /
17 -> 16 an epoch (the rows taken hold other documents than the tail's own); that lane of 9
rows: at most 10. The state names the kept rows and the counts of those repeated (``"fill"``,
in place of a split stream's ``"last"``) and records the version in ``config``; a state of
another version is refused as the bucket stream's is.

The pass says it, once, at its end, when one sample appeared ``FILL_TIMES`` times or more, or
the repeats pass ``FILL_WARNING`` of what it read; a few scattered repeats (what ``"fill"`` is
for) stay silent. Samples are told apart by stream position (a split document's pieces apart);
the count restarts with a pass resumed from an exact state.

NOTE [ A stream's new pass without set_epoch ]
A sampler iterated again after a finished pass moves to the next epoch by itself (NOTE [ A new
pass without set_epoch ] in :mod:`bucketloader.sampler`). A stream cannot: under a DataLoader
with workers the main process's copy never iterates (each pass gets a copy of it, or persistent
workers follow its epoch), so it would not learn of the pass, and its ``state_dict()`` would
name an epoch the workers left. So a stream repeats the epoch, as ``DistributedSampler`` and
``datasets.IterableDataset`` do, and says so: a pass that starts over an epoch whose pass every
worker finished (the shared counters' rows all done), with no ``set_epoch`` since (which clears
them) and no state loaded, warns once until the next ``set_epoch``, from the first worker
to look (each looks as its pass starts: worker 0 alone missed the repeat where another worker's
first batch, which writes its row of the new pass, came before worker 0 started; s27-rev),
where the order depends on the epoch: a shuffle buffer, or a source of the user's with
``set_epoch`` (a ``datasets`` ``IterableDataset`` has one whether shuffled or not, so it is
not counted: an evaluation stream over one is read again on purpose). ``set_epoch(e)`` before
a pass of ``e`` repeats it without a word, as for the samplers.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

import torch.utils.data

from bucketloader._files import NotAFile, write_atomic
from bucketloader._validation import a_kind, check_int, not_a_state, stream_of
from bucketloader.plan.report import FILL_TIMES, FILL_WARNING, LOSS_WARNING, DataLossWarning
from bucketloader.stream._engine import TRACE_MOD, checks_lengths, trace_hex
from bucketloader.stream.counters import MAX_LANES, LaneCounters, RefusedResume, finished
from bucketloader.stream.source import is_stateful, open_source, self_sharding

__all__ = [
    "CHECKPOINTS_KEPT",
    "CHECKPOINT_EVERY",
    "CHECKPOINT_MAX_BYTES",
    "LaneStates",
    "ResumableStream",
    "check_config",
    "check_source",
    "check_state",
    "check_steps",
    "lane_states",
    "replay_state",
    "resume_lane",
    "source_config",
    "split_round_robin",
    "state_keys",
]


#: A worker writes its exact state every this many batches (NOTE [ Worker checkpoints ]).
CHECKPOINT_EVERY = 4
#: The newest this many checkpoints of each worker are kept.
CHECKPOINTS_KEPT = 8
#: A worker's state larger than this (bytes of JSON) is not written: the worker replays instead.
CHECKPOINT_MAX_BYTES = 1 << 18


class LaneStates:
    """The workers' exact states of NOTE [ Worker checkpoints ]: JSON files in a private
    directory (``tempfile.mkdtemp``, mode 0700) made inside ``directory`` when the stream is
    built, removed by the process that built it when the stream is collected. Picklable into
    workers.

    Example:
        >>> import tempfile
        >>> store = LaneStates(tempfile.gettempdir())
        >>> store.write({"epoch": 0, "worker": [1, 2], "batches": 4})
        True
        >>> store.best(epoch=0, lane=1, lanes=2, at_most=6)["batches"]
        4
        >>> store.best(epoch=0, lane=1, lanes=2, at_most=3) is None
        True
    """

    #: A worker writes its state every this many batches.
    every = CHECKPOINT_EVERY
    #: A state larger than this (bytes of JSON) is not written (NOTE [ Worker checkpoints ]).
    max_bytes = CHECKPOINT_MAX_BYTES

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = tempfile.mkdtemp(prefix="bucketloader-lanes-", dir=directory)
        self._epoch = -1  # the newest epoch this copy wrote (older epochs' files are pruned)
        weakref.finalize(self, _remove_owned, self.path, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]  # a worker's copy: it never removes the directory
        self._epoch = -1

    @staticmethod
    def _name(epoch: int, lane: int, lanes: int, batches: int) -> str:
        return f"e{epoch}-n{lanes}-l{lane}-b{batches}.json"

    def write(self, state: dict[str, Any]) -> bool:
        """Keep a worker's exact ``state`` (atomically), dropping its checkpoints beyond the
        newest :data:`CHECKPOINTS_KEPT` and, on its first write of an epoch, the files of
        earlier epochs. ``False``: the state cannot be kept (larger than :attr:`max_bytes`, or
        not JSON), and a later one of this pass will not be either."""
        lane, lanes = state["worker"]
        epoch, batches = int(state["epoch"]), int(state["batches"])
        try:
            text = json.dumps(state)
        except (TypeError, ValueError):  # samples that are not JSON: replay, as without files
            return False
        if len(text) > self.max_bytes:
            warnings.warn(
                f"a DataLoader worker's stream state is {len(text)} bytes of JSON, more than "
                f"the {self.max_bytes} a worker checkpoint may take; this pass writes no "
                "checkpoints and resumes by replay (lower shuffle_buffer / open_rows for "
                "checkpoints)",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        if epoch > self._epoch:
            self._epoch = epoch
            self._prune(epoch)
        name = self._name(epoch, lane, lanes, batches)
        try:  # the cache's all-or-nothing write: a torn checkpoint is never read back
            write_atomic(os.path.join(self.path, name), text.encode())
        except (OSError, NotAFile):  # no room, or the directory is gone: replay on resume
            return True
        old = batches - CHECKPOINTS_KEPT * CHECKPOINT_EVERY
        if old > 0:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.path, self._name(epoch, lane, lanes, old)))
        return True

    def _prune(self, epoch: int) -> None:
        """Remove the checkpoints of epochs before ``epoch`` (a resume only asks for the
        current epoch's)."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for name in names:
            head = name.split("-", 1)[0]
            if name.endswith(".json") and head[1:].isdigit() and int(head[1:]) < epoch:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.path, name))

    def best(self, *, epoch: int, lane: int, lanes: int, at_most: int) -> dict[str, Any] | None:
        """The newest state of worker ``lane`` of ``lanes`` in ``epoch`` after at most
        ``at_most`` batches (``None``: none kept)."""
        prefix = f"e{epoch}-n{lanes}-l{lane}-b"
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return None
        made = [int(n[len(prefix) : -5]) for n in names if n.startswith(prefix)]
        for b in sorted((b for b in made if 0 < b <= at_most), reverse=True):
            try:
                with open(os.path.join(self.path, self._name(epoch, lane, lanes, b))) as f:
                    return json.load(f)  # type: ignore[no-any-return]
            except (FileNotFoundError, ValueError):
                continue  # removed or being replaced meanwhile: an older one
        return None


def lane_states(checkpoint_dir: Any) -> LaneStates | None:
    """The workers' checkpoints a stream built with ``checkpoint_dir`` keeps (``None``: off,
    a resume behind workers replays; NOTE [ Worker checkpoints ]), checked."""
    if checkpoint_dir is None:
        return None
    if not isinstance(checkpoint_dir, (str, os.PathLike)) or not os.path.isdir(checkpoint_dir):
        raise ValueError(
            f"checkpoint_dir must be None (no worker checkpoints) or the path of an existing "
            f"directory to keep DataLoader workers' checkpoints in, got {checkpoint_dir!r}"
        )
    return LaneStates(checkpoint_dir)


def _remove_owned(path: str, owner: int) -> None:
    if os.getpid() == owner:  # never from a forked worker that inherited the stream
        shutil.rmtree(path, ignore_errors=True)


def check_source(source: Any) -> Any:
    """``source``, which a stream reads, if it is iterable (checked when the stream is built, not
    at ``next``)."""
    if isinstance(source, (str, bytes)) or not (
        isinstance(source, Iterable) or hasattr(source, "__getitem__")
    ):
        # (a generator function is not iterable: its calls are; docs speak of "generator
        # factories", objects whose __iter__ makes a new generator each pass)
        hint = (
            "; for a new pass each epoch, pass an object whose __iter__ calls it (class Docs: "
            "def __iter__(self): return make()), or make() itself for one pass"
            if callable(source)
            else ""
        )
        raise TypeError(
            f"source must be an iterable of samples (a list, a generator, an HF or torch "
            f"IterableDataset), got {type(source).__name__} {source!r:.60}{hint}"
        )
    if isinstance(source, Mapping):  # (iterated, a dict gives its keys: one "sample" per key)
        raise TypeError(
            f"source must be an iterable of samples, got a {type(source).__name__} with keys "
            f"{list(source)[:5]!r:.80}, whose iteration gives its keys; pass one split of a "
            "DatasetDict (source['train']), or the samples of a dict of columns as a list of "
            "dicts: [dict(zip(columns, row)) for row in zip(*columns.values())]"
        )
    return source


def state_keys(
    state_format: int,
    replay_format: int,
    filler: Mapping[str, type],
    after: Mapping[str, type] | None = None,
) -> dict[int, dict[str, type]]:
    """The keys of a stream's two state formats and their types: the engine's, with the
    ``filler``'s keys before ``source`` and ``stats`` (and ``after`` them)."""
    engine = {"config": dict, "epoch": int, "worker": list, "phase": str, "read": int}
    return {
        state_format: {
            **engine,
            "batches": int,
            **filler,
            "source": dict,
            "stats": dict,
            **(after or {}),
        },
        replay_format: {"config": dict, "epoch": int, "workers": int, "skip": list, "first": int},
    }


#: The share of a pass's ``steps_per_epoch`` steps that may find the shard dry (nothing left to
#: batch) before the end-of-pass note says that ``steps_per_epoch`` is too high: past it, the
#: steps were counted far off (the whole dataset's samples or batches, not one rank's); a smaller
#: overshoot (a sampler's step count, whose last batches per bucket a stream fills by promotion)
#: shows in ``report()`` as padded rows.
DRY_WARNING = 0.25

#: A pass's counters of samples it read but left out, and why (both streams' names; each reads
#: after "<n> samples" as a sentence).
_LEFT_OUT = {
    "too_short": "shorter than min_length",
    "too_long": "dropped by overflow='drop'",
    "overflow_dropped": "dropped by overflow='drop'",
    "oversize": "dropped by TokenBudget(oversize='drop')",
    "left_over": "left over when steps_per_epoch ran out",
    "tail_dropped": "dropped by last_batch='drop'",
}


def _warn_at_end(
    batches: Iterator[Any], engine: Any, owner: str, epoch: int, empty: bool, *, cuts: bool = True
) -> Iterator[Any]:
    """The pass's batches, then one warning with the counts when it left out more than
    :data:`~bucketloader.plan.report.LOSS_WARNING` of the samples it read, as the samplers warn
    (every one is counted in ``report()``), and, with ``empty``, when it read no sample at all
    (an empty or exhausted source: an epoch of no step); at its first step that finds the shard
    dry, :func:`_warn_dry`."""
    checked = False
    engine.live = True  # (a pass in flight: set_epoch of its epoch keeps its position)
    try:
        for batch in batches:
            if engine.dry and not checked:  # (the shard's end: every later step is dry too)
                checked = True
                _warn_dry(engine, owner, epoch)
            yield batch
    finally:  # (its end, or its iterator closed: a loop left with break in CPython)
        engine.live = False
    stats = engine.stats
    counts = [(int(stats.get(k) or 0), why) for k, why in _LEFT_OUT.items()]
    parts = [f"{n:,} {'sample' if n == 1 else 'samples'} {why}" for n, why in counts if n]
    left_out = sum(n for n, _ in counts)  # each engine counts its own
    said = [f"leaves out {', '.join(parts)}"] if left_out > LOSS_WARNING * engine.read else []
    cut = int(stats.get("truncated") or 0)  # (kept, but cut to max_length: the rest is lost)
    # (``cuts``: overflow="truncate" itself; a callable overflow also counts as "truncated",
    # but what it does is the user's, a resized image loses nothing: not said as a cut, s21-rev)
    if cuts and cut > LOSS_WARNING * engine.read:
        said.append(
            f"cuts {cut:,} {'sample' if cut == 1 else 'samples'} (overflow='truncate': what is "
            "past the cut is never seen)"
        )
    if said:
        warnings.warn(
            f"this {owner} {' and '.join(said)}; its pass read {engine.read:,} samples "
            f"in epoch {epoch} (report() counts them by kind)",
            DataLossWarning,
            stacklevel=2,
        )
    _warn_fill(engine, owner, epoch)
    if empty and engine.read == 0:
        warnings.warn(
            f"{owner} read no sample from its source in epoch {epoch}, so it yielded no batch; "
            "check that the source is not empty (a one-shot iterator gives one pass only: pass "
            "a re-iterable source for several epochs)",
            UserWarning,
            stacklevel=2,
        )


def _warn_fill(engine: Any, owner: str, epoch: int) -> None:
    """One warning when ``last_batch="fill"`` repeated one sample ``FILL_TIMES`` times or
    more in the pass, or more than ``FILL_WARNING`` of what it read (NOTE [ What a stream's
    fill repeats ]). ``stacklevel`` as :func:`_warn_at_end`'s own warnings (it runs there)."""
    extra, most = engine.fill_repeats()
    if most < FILL_TIMES and extra <= FILL_WARNING * engine.read:
        return
    unit, how = engine.FILL_HOW
    warnings.warn(
        f"last_batch='fill' made this {owner} hand out {extra:,} repeats of {unit} in epoch "
        f"{epoch} ({extra / max(engine.read, 1):.1%} of the {engine.read:,} it read), one "
        f"{unit[:-1]} {most:,} times in all: {how} (and so is every step of a dry shard), so "
        "the model trains "
        "on those more often than on the rest; report() counts the repeats, and "
        "last_batch='pad' completes a short batch with masked padding rows instead",
        UserWarning,
        stacklevel=3,
    )


def _warn_dry(engine: Any, owner: str, epoch: int) -> None:
    """At the first step of a pass that found its shard dry (every later step finds it dry too),
    one warning when more than :data:`DRY_WARNING` of the pass's steps will: said now, not at
    the pass's end, which a ``steps_per_epoch`` of ``10**9`` would reach only after that many
    padding-only steps. Its ``stacklevel`` is :func:`_warn_at_end`'s (it runs in that frame)."""
    total = engine.lane_steps()
    dry = engine.dry + total - engine.batches  # (this step, those before it, those to come)
    if dry > DRY_WARNING * total and engine.read:
        warnings.warn(
            f"this {owner} ran out of samples in epoch {epoch}: after it read "
            f"{engine.read:,}, {dry:,} of its {total:,} steps find no new sample (from step "
            f"{engine.batches - engine.dry + 1:,} on: padding rows, or repeats with "
            "last_batch='fill'), so steps_per_epoch is too high for this source (this rank's "
            f"shard, this worker's share); lower it to about {engine.STEPS_HINT} (report() "
            "counts the padded rows)",
            UserWarning,
            stacklevel=3,
        )


def check_steps(
    steps_per_epoch: int | None, num_replicas: int, last_batch: str, *, per_step: str, pad: str
) -> int | None:
    """``steps_per_epoch``, checked: required with several ranks (the message says it is about
    ``per_step``), and only with a ``last_batch`` that keeps the shape (``pad`` says what
    ``"pad"`` does)."""
    if steps_per_epoch is not None:
        steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, minimum=1)
    elif num_replicas > 1:
        raise ValueError(
            f"a stream split over num_replicas={num_replicas} ranks needs "
            "steps_per_epoch: every rank must make the same number of steps, and no rank "
            f"can know how many the other ranks' shards fill; pass about {per_step}"
        )
    if steps_per_epoch is not None and last_batch not in ("pad", "fill"):
        raise ValueError(
            f"with steps_per_epoch every step keeps its planned shape, so last_batch must be "
            f"'pad' ({pad}) or 'fill' (repeats), got last_batch={last_batch!r}"
        )
    return steps_per_epoch


def check_state(
    state: Any, *, owner: str, keys: Mapping[int, Mapping[str, type]], replay_format: int
) -> None:
    """The shape of ``owner``'s ``state``, checked when it is loaded (not when the pass starts):
    ``keys`` maps each state format to its keys and their types; ``replay_format`` is the format
    of a resume by replay."""
    if not isinstance(state, dict):
        raise not_a_state(state, owner)
    saved = stream_of(state)  # (the two streams' formats overlap: name the other one)
    if saved is not None and saved != owner and owner in ("BucketIterable", "PackIterable"):
        raise ValueError(
            f"state is a {saved}'s (its config has "
            f"{'row_length' if saved == 'PackIterable' else 'boundaries'}), not a {owner}'s; "
            f"load it into a {saved}, and pass {owner}.load_state_dict a dict from "
            f"{owner}.state_dict()"
        )
    fmt = state.get("format")
    if fmt is None and "batches_yielded" in state:  # (the samplers' states have no format)
        kind = state.get("sampler")  # (its name, in a state saved since s27)
        named = kind if isinstance(kind, str) and kind.isidentifier() else None
        raise ValueError(
            f"state is {a_kind(named) if named else 'a sampler'}'s "
            f"({named or 'BucketSampler / PackSampler'}.state_dict(): it has "
            f"'batches_yielded' and no 'format'), not a {owner}'s; load it into the sampler "
            f"that saved it, and pass {owner}.load_state_dict a dict from {owner}.state_dict()"
        )
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt not in keys:
        formats = " or ".join(str(f) for f in sorted(keys))
        raise ValueError(
            f"state must be a dict from {owner}.state_dict() with format {formats}, got "
            f"format {fmt!r}"
        )
    for key, kind in keys[fmt].items():
        if key not in state:
            raise ValueError(
                f"state is missing {key!r}; pass a dict from {owner}.state_dict(), got "
                f"keys {sorted(state)}"
            )
        value = state[key]
        negative = isinstance(value, int) and value < 0
        if not isinstance(value, kind) or isinstance(value, bool) or negative:
            what = "an int >= 0" if kind is int else f"a {kind.__name__}"
            raise ValueError(f"state[{key!r}] must be {what}, got {value!r}")
    if fmt == replay_format:
        skip = state["skip"]
        bad = [x for x in skip if not isinstance(x, int) or isinstance(x, bool) or x < 0]
        if bad or (skip and len(skip) != state["workers"]):
            raise ValueError(
                f"state['skip'] must hold one int >= 0 per worker ({state['workers']}), got "
                f"{skip!r}"
            )
        if state["first"] >= max(state["workers"], 1):
            raise ValueError(
                f"state['first'] must be a worker index < {max(state['workers'], 1)}, got "
                f"{state['first']!r}"
            )
        traces = state.get("lengths")  # NOTE [ A replay over a source without a length ]
        if traces is not None and not (
            isinstance(traces, list)
            and len(traces) == state["workers"]
            and all(t is None or _hex(t, 10) for t in traces)
        ):
            raise ValueError(
                f"state['lengths'] must hold None or a trace (10 hex digits) per worker "
                f"({state['workers']}), got {traces!r:.120}; pass a dict from "
                f"{owner}.state_dict(), unedited"
            )
    else:
        src = state["source"]
        if not {"position", "state"} <= set(src) or not isinstance(src["position"], int):
            raise ValueError(f"state['source'] must hold 'position' and 'state', got {src!r}")
        _check_exact(state, owner)
        digest = state.get("lengths")  # NOTE [ A stream state over a source without a length ]
        if digest is not None and not _hex(digest, 16):
            raise ValueError(
                f"state['lengths'] must be the digest (16 hex digits) of the lengths of the "
                f"samples it holds, got {digest!r:.120}; pass a dict from {owner}.state_dict(), "
                "unedited"
            )
        version = state.get("lengths_version")  # NOTE [ Pieces of one length ] in stream._rows
        if version is not None and (isinstance(version, bool) or version not in (1, 2)):
            raise ValueError(
                f"state['lengths_version'] must be 1 or 2 (the rule of its length digest), got "
                f"{version!r:.120}; pass a dict from {owner}.state_dict(), unedited"
            )
        anchor = state.get("anchor")  # NOTE [ A stream state that holds no sample ]
        if anchor is not None and not (
            isinstance(anchor, list)
            and len(anchor) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in anchor)
            and 0 <= anchor[0] < state["read"]
            and anchor[1] >= 0
        ):
            raise ValueError(
                f"state['anchor'] must be [position, piece] of a sample it read (position < "
                f"state['read']={state['read']}), got {anchor!r:.120}; pass a dict from "
                f"{owner}.state_dict(), unedited"
            )
        trace = state.get("trace")  # NOTE [ A replay over a source without a length ]
        if trace is not None and not (
            isinstance(trace, int) and not isinstance(trace, bool) and 0 <= trace < TRACE_MOD
        ):
            raise ValueError(
                f"state['trace'] must be its pass's trace (an int >= 0 and < 2**61 - 1), got "
                f"{trace!r:.120}; pass a dict from {owner}.state_dict(), unedited"
            )


def _hex(value: Any, digits: int) -> bool:
    """Whether ``value`` is a string of ``digits`` lowercase hex digits."""
    return (
        isinstance(value, str)
        and len(value) == digits
        and all(c in "0123456789abcdef" for c in value)
    )


#: The phases of a pass an exact state can be taken in.
PHASES = ("stream", "flush", "tail", "done")


def _check_exact(state: dict[str, Any], owner: str) -> None:
    """The values of an exact state that a pass trusts when it resumes (an edited or forged
    state is refused here, not by an ``IndexError`` in the middle of the resume)."""
    w = state["worker"]
    ints = len(w) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in w)
    if not ints or not 0 <= w[0] < w[1]:
        raise ValueError(f"state['worker'] must be [worker id, workers], got {w!r}")
    if state["phase"] not in PHASES:
        raise ValueError(f"state['phase'] must be one of {list(PHASES)}, got {state['phase']!r}")
    position = state["source"]["position"]
    if not 0 <= position <= state["read"]:
        raise ValueError(
            f"state['source']['position']={position!r} must be >= 0 and <= state['read']="
            f"{state['read']}; pass a dict from {owner}.state_dict(), unedited"
        )


def source_config(source: Any) -> dict[str, Any]:
    """The configuration key that records what ``source`` reads: ``{"source": ...}`` for a
    source with ``fingerprint()``, such as :class:`~bucketloader.stream.arrow.ArrowRows` over
    Parquet files (NOTE [ A stream state names the files it read ] in
    :mod:`bucketloader.stream.arrow`); else ``{"samples": len(source)}`` for a source with a
    length (NOTE [ A stream state names its source's size ]); else nothing.

    Example:
        >>> source_config([{"x": [1]}] * 3)
        {'samples': 3}
    """
    fingerprint = getattr(source, "fingerprint", None)
    record = fingerprint() if callable(fingerprint) else None
    if record is not None:
        return {"source": record}
    size = _size_of(source)
    return {} if size is None else {"samples": size}


def _size_of(source: Any) -> int | None:
    """``len(source)`` where ``source`` has a length (a list, a ``datasets.Dataset``, a map-style
    torch ``Dataset`` with ``__len__``); ``None`` for an iterable without one (a generator, a
    ``datasets.IterableDataset``), or whose ``len`` fails."""
    if not callable(getattr(type(source), "__len__", None)):
        return None
    try:
        size = len(source)
    except Exception:  # (an IterableDataset wrapper whose __len__ raises TypeError: no length)
        return None
    return size if isinstance(size, int) and size >= 0 else None


def _check_size(state: dict[str, Any], mine: Any, owner: str, *, unsized: bool = False) -> None:
    """NOTE [ A stream state names its source's size ]

    A stream over a source read by index (a list, a ``datasets.Dataset``) resumes by position:
    the state says how far each worker read. With a sample added or removed before that point
    (s29-user: one row inserted at the front of 600), every position names the next or the
    previous sample: 17 samples repeated and 17 never seen that epoch, silently, where the
    samplers refuse the same change (their ``num_samples``). So the state records the source's
    length, where it has one, and a resume over a source of another length is refused, naming
    both lengths and the way on. A state saved before the length was recorded is taken as
    before; a source without a length (a generator, a ``datasets.IterableDataset``) records
    none, and its state records the lengths of the samples it holds instead (NOTE [ A stream
    state over a source without a length ] in :mod:`bucketloader.stream._engine`). A change that
    keeps the length (a sample edited in place) is not caught. Split over ranks, each rank
    passes its own shard, so the length is its shard's: a rank given another rank's state (a
    checkpoint written by rank 0 only) is refused where the shards' lengths differ, and told to
    load its own state.

    Such a state loaded over a source without a length (``unsized``: one whose configuration
    records neither its length nor its files) is refused (s32): its state records no digest of
    the lengths it holds and no replay traces (only a source without a length keeps them), so
    nothing could be compared, and a source inserted into resumed silently (one sample at the
    front: 26 samples trained twice and 26 never); behind DataLoader workers, a
    ``datasets.Dataset``'s state resumed over the same rows as ``.to_iterable_dataset()``,
    which splits itself between the workers by shard, trained 35 twice and 35 never with no
    change at all. The way on: the source the state was saved over, or a new epoch (a state
    saved before its epoch's first batch skips nothing, and is taken). The
    reverse (a state saved over a source without a length, loaded over one with a length) is
    checked: an exact state by its digest, a replay by its traces, which the resumed pass then
    keeps (NOTE [ A replay over a source without a length ] in
    :mod:`bucketloader.stream._engine`)."""
    theirs = state["config"].get("samples")
    if theirs is None:
        return
    if not isinstance(theirs, int) or isinstance(theirs, bool) or theirs < 0:
        raise ValueError(
            f"state['config']['samples'] must be the source's length (an int >= 0), got "
            f"{theirs!r:.120}; pass the state the stream saved"
        )
    if mine is None and unsized and not _before_first_batch(state):  # (that one: a new pass)
        raise ValueError(
            f"state was saved over a source of {theirs:,} samples, but this {owner}'s source "
            "has no length (a generator, a datasets.IterableDataset): the state records only "
            "that length, which cannot be compared here, so the resume could not tell whether "
            "this source gives the same samples at the state's positions (samples inserted or "
            "removed since would be trained twice or never, silently), and behind DataLoader "
            "workers a source that splits itself between them (a datasets.IterableDataset) "
            "puts other samples at each worker's positions even unchanged. Resume over the "
            "source the state was saved over (a datasets.Dataset, not its "
            f".to_iterable_dataset()){_way_on(state, 'over this source')}"
        )
    if mine is None or mine == theirs:  # (a source that records its files: nothing to compare)
        return
    ranks = state["config"].get("num_replicas")
    # (s29-rev: over ranks, each passing its own shard, rank 1 loading rank 0's state, the
    # usual slip of a checkpoint written by rank 0 only, was told only that the source changed)
    own = (
        f" (a stream split over {ranks} ranks: each rank loads the state it saved itself, "
        "over its own shard)"
        if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks > 1
        else ""
    )
    raise ValueError(
        f"state was saved over a source of {theirs:,} samples, but this {owner}'s source has "
        f"{mine:,}: "
        f"the state's positions would name other samples (some repeated, some never seen). "
        f"Resume over the source the state was saved over{own}{_way_on(state, 'over this source')}"
    )


def _size_in(config: dict[str, Any]) -> int | None:
    """The number of samples a stream's ``config`` records of its source: its length, or the
    rows of the files it reads (a list's state loaded over ``ArrowRows`` of Parquet files was
    compared with nothing: one row inserted at the front trained 26 samples twice and 26 never;
    s32). ``None``: none recorded.

    Example:
        >>> _size_in({"samples": 3}), _size_in({"source": {"rows": 5}}), _size_in({})
        (3, 5, None)
    """
    size = config.get("samples")
    source = config.get("source")
    if size is None and isinstance(source, dict) and isinstance(source.get("rows"), int):
        size = source["rows"]
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def _way_on(state: dict[str, Any], how: str = "with these options") -> str:
    """How to go on without the state (``how``: with what changed, the options or the source;
    s32-tidyB: a refused source was told to go on "with these options"): the next epoch, or
    this one whole when the state was saved before its first batch (s29-user: the next epoch
    skipped it)."""
    epoch = state.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        return ""
    if _before_first_batch(state):
        return (
            f"; to go on {how} instead, skip load_state_dict and run epoch "
            f"{epoch} whole: stream.set_epoch({epoch}) (the state was saved before its "
            "first batch)"
        )
    return (
        f"; to go on {how} instead, skip load_state_dict and start the next "
        f"epoch: stream.set_epoch({epoch + 1})"
    )


def _check_source(theirs: Any, mine: Any, owner: str) -> None:
    """Refuse a state saved over other files than this stream's source reads (NOTE [ A stream
    state names the files it read ] in :mod:`bucketloader.stream.arrow`)."""
    if theirs is None and mine is None:
        return
    if theirs is None:  # saved before the files were recorded: the same files, or refused
        if not mine.get("nested"):
            return
        raise ValueError(
            f"state was saved before {owner} recorded which files its source read, and this "
            f"source now reads {mine['files']:,} Parquet files ({mine['rows']:,} rows), "
            f"{mine['nested']:,} of them in subfolders (a directory is read recursively; it "
            "read only its top-level *.parquet files then): to resume, build the source over "
            "the top level only, ArrowRows(sorted(glob.glob('<directory>/*.parquet')))"
        )
    kinds = {"files": int, "rows": int, "digest": str}
    if not isinstance(theirs, dict) or not all(
        isinstance(theirs.get(k), t) and not isinstance(theirs.get(k), bool)
        for k, t in kinds.items()
    ):
        raise ValueError(
            "state['config']['source'] must record the files read as {'files': int, 'rows': "
            f"int, 'digest': str, ...}}, got {theirs!r:.120}; pass the state the stream saved"
        )
    saved = f"{theirs['files']:,} Parquet files ({theirs['rows']:,} rows)"
    if mine is None:
        raise ValueError(
            f"state was saved over {saved}, but this {owner}'s source records no files; build "
            "it over ArrowRows of the same files"
        )
    if theirs.get("digest") != mine.get("digest"):
        raise ValueError(
            f"state was saved over {saved}, but this {owner}'s source reads "
            f"{mine['files']:,} Parquet files ({mine['rows']:,} rows) (file digest "
            f"{mine['digest']}, the state's {theirs.get('digest')}): its rows are other "
            "samples. Resume over the files the state was saved over; to go on over these "
            "files instead, skip the resume and start the next epoch (set_epoch(state['epoch'] "
            "+ 1))"
        )


def _before_first_batch(state: dict[str, Any]) -> bool:
    """Whether ``state`` was saved before its epoch's first batch (a replay state that skips
    nothing, or an exact state of a pass that made none): its whole epoch is still to run."""

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value == 0

    if "batches" in state:
        return count(state["batches"])
    skip = state.get("skip")
    return isinstance(skip, list) and all(count(k) for k in skip) and count(state.get("first"))


def check_config(
    state: dict[str, Any], mine: dict[str, Any], *, owner: str, versions: tuple[str, ...] = ()
) -> None:
    """A state is loaded only into a stream built as the one that saved it. ``versions`` are
    keys that record the library's algorithms, not options: they are left to the stream
    (absent from a state saved before they were recorded). ``"source"`` records the files the
    source reads (:func:`source_config`), checked on its own."""
    _check_source(state["config"].get("source"), mine.get("source"), owner)
    _check_size(state, _size_in(mine), owner, unsized=checks_lengths(mine))
    versions = (*versions, "source", "samples")
    theirs = {k: v for k, v in state["config"].items() if k not in versions}
    mine = {k: v for k, v in mine.items() if k not in versions}
    if set(theirs) != set(mine):
        raise ValueError(
            f"state has configuration keys {sorted(state['config'])} but this {owner} has "
            f"{sorted(mine)}; build the stream as when it was saved"
        )
    for key, value in theirs.items():
        if mine.get(key) != value:
            hint = {
                "boundaries": " (boundaries=estimate(...) solves on the head of the source: it "
                "must read the same samples first)",
                "num_replicas": " (a rank's state holds the positions in its own shard, and the "
                "ranks' shards and schedule change with their number)",
            }.get(key, "")
            # (s21: a job restarted on 2 ranks from a state saved on 4 was told only to build
            # the stream as before, which it cannot; the way on is the next epoch)
            on = _way_on(state)
            raise ValueError(
                f"state has {key}={value!r}, but this {owner} has {key}={mine.get(key)!r}; "
                f"build the stream with the options of the one that saved the state{hint} to "
                f"resume it exactly{on}"
            )


def replay_state(
    counters: LaneCounters,
    *,
    epoch: int,
    batches_consumed: int | None,
    scheduled: bool,
    source: Any,
    config: dict[str, Any],
    fmt: int,
    store: LaneStates | None = None,
) -> dict[str, Any]:
    """The state of a resume by replay after ``batches_consumed`` batches of ``epoch`` (default:
    every batch the workers made), from the workers' rows in ``counters`` (module NOTE).
    ``scheduled``: worker ``w`` of ``W`` makes the steps ``w, w + W, ...`` (a stream with
    ``steps_per_epoch``); otherwise each worker makes its pass and stops."""
    lanes = counters.lanes(epoch)
    workers = lanes[0]["lanes"] if lanes else 0
    if workers > MAX_LANES:
        raise ValueError(
            f"only {MAX_LANES} of the {workers} DataLoader workers are counted, so the state "
            f"cannot say where each stopped; resume needs num_workers <= {MAX_LANES}"
        )
    rows = {lane["lane"]: lane for lane in lanes}  # a worker yet to make a batch has no row
    produced = [rows[w]["batches"] if w in rows else 0 for w in range(workers)]
    total = sum(produced)
    k = total if batches_consumed is None else batches_consumed
    k = check_int("batches_consumed", k, minimum=0, maximum=total)
    first = 0
    if not lanes:
        skip: list[int] = []
    elif scheduled:
        skip = [len(range(w, k, workers)) for w in range(workers)]
        first = k % workers
    else:
        totals = [produced[w] if w in rows and rows[w]["done"] else None for w in range(workers)]
        skip, first = split_round_robin(k, totals)
        if first and self_sharding(source) and first == _first_running(skip, totals):
            first = 0  # (NOTE [ A source that shards itself, once a worker finished ])
    if first and self_sharding(source):
        if scheduled:
            counts = f"{k - first} or {k - first + workers}"
        else:
            below, above = unrotated_counts(k, totals)
            counts = f"{below}" if above is None else f"{below} or {above}"
        raise ValueError(
            f"cannot resume exactly after {k} batches with {workers} DataLoader workers: "
            f"a new DataLoader starts at worker 0 (the first still running), the next batch is "
            f"worker {first}'s, and {type(source).__name__} shards itself by worker id; save "
            "the state after a multiple of num_workers batches while every worker runs, else "
            "after a count whose next batch is the first running worker's (the nearest here: "
            f"{counts})"
        )
    out = {
        "format": fmt,
        "config": config,
        "epoch": epoch,
        "workers": workers,
        "skip": skip,
        "first": first,
    }
    if skip and checks_lengths(config):
        # NOTE [ A replay over a source without a length ] in bucketloader.stream._engine
        traces = [_trace_at(counters, w, skip[w], produced[w]) for w in range(workers)]
        if any(t is not None for t in traces):
            out["lengths"] = traces
    if store is not None and skip:  # NOTE [ Worker checkpoints ]
        lane_states = [
            store.best(epoch=epoch, lane=w, lanes=workers, at_most=skip[w]) for w in range(workers)
        ]
        if any(x is not None for x in lane_states):
            out["lanes"] = lane_states
    return out


def _trace_at(counters: LaneCounters, lane: int, batches: int, produced: int) -> str | None:
    """Worker ``lane``'s trace after its first ``batches`` batches, as a replay state records
    it, where its row still keeps it (``None``: none to skip, or not kept)."""
    if not 0 < batches <= produced:
        return None
    trace = counters.traced(lane, batches)
    return None if trace is None else trace_hex(trace)


def resume_lane(
    state: dict[str, Any], worker: tuple[int, int], *, replay_format: int
) -> tuple[tuple[int, int], int]:
    """The lane a DataLoader ``worker`` (id, count) plays when its pass resumes from ``state``,
    and how many of its batches it skips: a replay rotates the lanes (module NOTE); an exact
    in-process state belongs to the worker that saved it."""
    if state["format"] == replay_format:
        if state["workers"] and state["workers"] != worker[1]:
            here = (
                "runs in a single process (num_workers 0 or 1)"
                if worker[1] == 1
                else f"has {worker[1]}"
            )
            raise RefusedResume(  # (s32-tidyB: a ValueError, torch's reference cycle behind
                # workers: NOTE [ A refused resume behind DataLoader workers ])
                message=f"state was saved with {state['workers']} DataLoader workers, this "
                f"loader {here}; resume with the same num_workers"
            )
        lane = ((worker[0] + state["first"]) % worker[1], worker[1])
        return lane, int(state["skip"][lane[0]]) if state["skip"] else 0
    if list(state["worker"]) != list(worker):

        def where(w: Any) -> str:
            i, n = (int(x) for x in w)
            return "a single process (num_workers 0 or 1)" if n == 1 else f"worker {i} of {n}"

        raise RefusedResume(
            message=f"state was saved in {where(state['worker'])}, this pass runs in "
            f"{where(worker)}; resume with the same num_workers as when the state was taken"
        )
    return worker, 0


def _first_running(got: list[int], totals: list[int | None]) -> int:
    """The first worker still running once each made ``got`` batches (``totals``: as
    :func:`split_round_robin`'s; 0 where none is)."""
    for w, top in enumerate(totals):
        if top is None or got[w] < top:
            return w
    return 0


def unrotated_counts(consumed: int, totals: list[int | None]) -> tuple[int, int | None]:
    """NOTE [ A source that shards itself, once a worker finished ]
    A source that splits itself among DataLoader workers (a torch ``IterableDataset``) resumes
    by replay only where the lanes need no rotation: a new DataLoader asks worker 0 first, and
    each worker reads its own share. ``state_dict(batches_consumed=k)`` refused a ``k`` whose
    next batch was another worker's, advising "a multiple of num_workers batches (e.g. 42 or
    44)"; once a worker finished, the DataLoader's round robin skips it, so that advice was
    wrong, and at ``k = 42`` itself (s33-left). Finished workers play no part in a resume: a
    worker whose lane made all its batches replays them and stops, and the DataLoader goes on
    to the next. So a state needs no rotation where the next batch is the first running
    worker's, and records none there (``"first"`` 0); else the refusal names the nearest
    counts that need none: this function, for the round robin of :func:`split_round_robin`
    (a worker still running taken to go on).

    Returns the most batches at or below ``consumed`` and the fewest above it (``None``: none
    before every worker finished) after which the next batch is the first running worker's.

    Example:
        >>> unrotated_counts(5, [None, None])
        (4, 6)
        >>> unrotated_counts(7, [None, 2, None])  # worker 1 made its 2: then 0 and 2 alternate
        (6, 8)
        >>> unrotated_counts(3, [None, 2])  # worker 1 made its 2 in 4: then worker 0 alone
        (2, 4)
    """
    got = [0] * len(totals)
    below, n = 0, 0
    while True:
        moved = False
        for w, top in enumerate(totals):
            if top is not None and got[w] >= top:
                continue
            if w == _first_running(got, totals):  # (batch n is worker w's)
                if n > consumed:
                    return below, n
                below = n
            got[w] += 1
            n += 1
            moved = True
        if not moved:  # every worker finished after n batches
            return (n, None) if n <= consumed else (below, n)


def split_round_robin(consumed: int, totals: list[int | None]) -> tuple[list[int], int]:
    """How many of the first ``consumed`` batches of a DataLoader came from each worker, and
    which worker's batch comes next.

    The DataLoader hands batches out round-robin over the workers still running; a worker
    stops after ``totals[w]`` batches (``None``: it had not finished).

    Example:
        >>> split_round_robin(4, [3, 1])
        ([3, 1], 0)
        >>> split_round_robin(4, [None, None, None])
        ([2, 1, 1], 1)
    """
    got = [0] * len(totals)
    n = 0
    last = len(totals) - 1
    while n < consumed:
        moved = False
        for w, top in enumerate(totals):
            if n == consumed:
                break
            if top is not None and got[w] >= top:
                continue
            got[w] += 1
            n += 1
            moved = True
            last = w
        if not moved:
            raise ValueError(
                f"batches_consumed={consumed} is more than the workers made ({sum(got)})"
            )
    for step in range(1, len(totals) + 1):  # the next worker still running, after the last
        w = (last + step) % len(totals)
        top = totals[w]
        if top is None or got[w] < top:
            return got, w
    return got, 0


def _check_not_batched_again(owner: str) -> None:
    """NOTE [ A stream under a DataLoader's batch_size ]
    A stream yields whole batches, so a DataLoader takes it with ``batch_size=None``. Left at
    torch's default ``batch_size=1`` the loader hands its ``collate_fn`` a list of one batch,
    which the stream's collator read as one sample: a stream of tensors came out as fields
    ``0, 1, ...`` of one padded row and no ``inputs``, silently, and dict or token-list samples
    failed with errors about the fields ("field 0 is padded but holds dict", "token ids must
    be integers ... holds [1, 1, ...]") (s19-user). torch's iterable fetcher calls ``iter()``
    on the stream from its ``__init__``, whose ``auto_collation`` says whether it batches; the
    check reads that one local and its ``collate_fn`` (code objects compared, no frame kept),
    and refuses only where the batches would reach this library's collators or torch's
    ``default_collate``: a ``collate_fn`` of the user's own may group batches on purpose."""
    import sys

    from torch.utils.data import default_collate

    try:
        from torch.utils.data._utils.fetch import _IterableDatasetFetcher
    except ImportError:  # pragma: no cover - a torch that moved it: no check
        return
    try:
        frame = sys._getframe(2)  # (1: the stream's __iter__; 2: whoever called iter() on it)
    except ValueError:  # pragma: no cover - no Python frame above __iter__
        return
    try:
        if frame.f_code is not _IterableDatasetFetcher.__init__.__code__:
            return
        batched, collate = frame.f_locals.get("auto_collation"), frame.f_locals.get("collate_fn")
    finally:
        del frame
    ours = type(collate).__module__.startswith("bucketloader.") or collate is default_collate
    if batched and ours:
        raise TypeError(
            f"{owner} yields whole batches, but the DataLoader batches them again (its "
            "batch_size is not None; torch's default is 1), so the collator would get a list "
            "of batches; pass DataLoader(stream, batch_size=None, collate_fn=stream.collator())"
        )


def _raising(error: Exception) -> Iterator[Any]:
    """A pass that raises ``error`` at its first batch."""
    raise error
    yield  # (a generator)


class ResumableStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """What both streams (:class:`~bucketloader.BucketIterable`,
    :class:`~bucketloader.stream.PackIterable`) share: the epoch, the length with
    ``steps_per_epoch``, a pass per ``iter()`` run by a per-worker engine, and the resume of
    that pass from a state (module NOTE). A subclass sets ``source``, ``epoch``,
    ``steps_per_epoch``, ``_resume = None`` and ``_engine = None`` in ``__init__``, the class
    attributes below, ``_counters``, ``_config()`` and ``_new_engine()``."""

    #: Formats of an exact (in-process) state and of a resume by replay; each format's keys.
    STATE_FORMAT: ClassVar[int]
    REPLAY_FORMAT: ClassVar[int]
    STATE_KEYS: ClassVar[Mapping[int, Mapping[str, type]]]
    #: Keys of :meth:`_config` that record an algorithm's version, not an option: a state
    #: saved by another version (or before the key existed) loads, and the pass decides
    #: whether its resume can still be exact (:func:`check_config`).
    VERSION_KEYS: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(
        cls, *, state_keys: Mapping[int, Mapping[str, type]] | None = None, **kwargs: Any
    ) -> None:
        """``class Stream(ResumableStream, state_keys=state_keys(...))``: the formats (exact
        state first, replay second) and their keys, from :func:`state_keys`."""
        super().__init_subclass__(**kwargs)
        if state_keys is not None:
            cls.STATE_KEYS = state_keys
            cls.STATE_FORMAT, cls.REPLAY_FORMAT = list(state_keys)

    source: Any
    steps_per_epoch: int | None
    _resume: dict[str, Any] | None
    _engine: Any
    _counters: LaneCounters
    #: ``load_state_dict`` calls on this copy (NOTE [ The main process's epoch, for persistent
    #: workers ] in :mod:`bucketloader.stream.counters`).
    _loads: int = 0
    #: Whether ``set_epoch`` forgot the state of the last ``load_state_dict`` (another epoch's):
    #: no state is then pending, so a worker copy that never saw the loads may follow the epoch.
    _forgotten: bool = False

    @property
    def epoch(self) -> int:
        """The epoch of the next pass (:meth:`set_epoch`)."""
        return self._epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._epoch = epoch
        if "_owner" not in self.__dict__:  # the first set, in __init__: the building process
            self._owner = os.getpid()
        self._epoch_set_in = os.getpid()  # (a worker that sets it keeps it: _follow_main)
        if self._publishes():  # (a process's own stream, or a copy outside a DataLoader
            self._publish()  # worker, e.g. a DDP rank's from its launcher: its workers read it)

    def _publishes(self) -> bool:
        """Whether this copy writes the epoch its workers follow (not a worker's own copy)."""
        return getattr(self, "_counters", None) is not None and (
            self._owner == os.getpid() or torch.utils.data.get_worker_info() is None
        )

    def _publish(self) -> None:
        """Write the epoch and the load count (``-1 - loads`` once ``set_epoch`` forgot the last
        load's state) for the workers (NOTE [ The main process's epoch, for persistent
        workers ])."""
        loads = -1 - self._loads if self._forgotten else self._loads
        self._counters.publish(self._epoch, loads)

    def _config(self) -> dict[str, Any]:
        """The options a state is only valid for."""
        raise NotImplementedError

    def _new_engine(self, worker: tuple[int, int], skip: int) -> Any:
        """The engine of one worker's pass (``run(iterator)``, ``resume(state)``)."""
        raise NotImplementedError

    def _open(self, worker: tuple[int, int]) -> Iterator[Any]:
        """The worker's iterator over the source, for a pass from the start."""
        return open_source(self.source, worker)

    def _one_shot(self) -> bool:
        """Whether the source can be read only once (and so cannot be resumed)."""
        return iter(self.source) is self.source

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` for the next pass (and pass it on to a source with ``set_epoch``).

        A pending resume (``load_state_dict``) of another epoch is forgotten."""
        self.epoch = check_int("epoch", epoch, minimum=0)
        if self._resume is not None and self._resume["epoch"] != self.epoch:
            self._resume = None
            if self._publishes():  # no state is pending now: workers copied before the load
                self._forgotten = True  # need none, and may follow this epoch (s27: they
                self._publish()  # refused it, e.g. after a state saved at an epoch's end)
        engine = self._engine
        if engine is not None and engine.epoch == self.epoch and getattr(engine, "live", False):
            return  # a pass of this epoch in flight (set_epoch called again inside the loop):
            # it goes on, and so does its position (s26b: state_dict() read the epoch's start
            # for the rest of the pass, and a resume from it repeated the batches handed out)
        if self._resume is None:  # the next pass starts the epoch: forget an earlier pass's
            # position (s25-user: after a pass of this same epoch, state_dict() still gave its
            # end or its stop, and a resume skipped the repeated epoch)
            self._engine = None
            self._counters.reset()

    def __len__(self) -> int:
        if self.steps_per_epoch is None:
            raise TypeError(
                f"a {type(self).__name__} without steps_per_epoch makes as many batches as its "
                "source fills, which is unknown before the pass; pass steps_per_epoch for a "
                "length"
            )
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        _check_not_batched_again(type(self).__name__)
        info = torch.utils.data.get_worker_info()
        worker = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None and self._owner != os.getpid():  # a worker's copy, perhaps a
            refused = self._follow_main()  # persistent one made passes ago
            if refused is not None:  # (raised at the first batch: torch re-raises that in the
                return _raising(refused)  # main process, but an iter() that raises in a
                # persistent worker kills it: "DataLoader worker exited unexpectedly")
        state, self._resume = self._resume, None
        if state is None:  # (every worker: one that reached its first batch before worker 0's
            # iter() wrote its row of this pass, not done, which hid the finished pass from
            # worker 0, and no pass warned; s27-rev)
            self._warn_if_repeated()
        skip = 0
        replay = state if state is not None and state["format"] == self.REPLAY_FORMAT else None
        if state is not None:
            self._epoch = int(state["epoch"])  # (load_state_dict's: no set_epoch of this process)
            worker, skip = resume_lane(state, worker, replay_format=self.REPLAY_FORMAT)
            if state["format"] == self.REPLAY_FORMAT and state.get("lanes"):
                mine = state["lanes"][worker[0]]  # NOTE [ Worker checkpoints ]
                if mine is not None:
                    state, skip = mine, skip - int(mine["batches"])
        if callable(getattr(self.source, "set_epoch", None)):
            self.source.set_epoch(self.epoch)
        engine = self._new_engine(worker, skip)
        engine.saved_config = None if state is None else state["config"]
        engine.saved_replay = replay
        if state is not None and state is replay and replay.get("lengths") and not engine.traced:
            # a replay state saved over a source without a length, replayed over one with a
            # length: its traces are still compared (NOTE [ A stream state names its source's
            # size ]; this pass keeps its own trace only for them)
            engine.traced, engine.trace = True, 0
        self._engine = engine
        if state is not None and state["format"] == self.STATE_FORMAT:
            it = engine.resume(state)
        else:
            it = self._open(worker)
        empty = state is None and worker == (0, 1) and self.steps_per_epoch is None
        cuts = getattr(self, "overflow", None) == "truncate"  # (not a callable policy)
        return _warn_at_end(
            engine.run(it), engine, type(self).__name__, self.epoch, empty, cuts=cuts
        )

    #: Whether this copy looked and found a pass repeating a finished epoch (it looks once).
    _warned_repeat: bool = False

    def _varies_by_epoch(self) -> bool:
        """Whether another epoch gives another order (a shuffle of this stream's own, or a
        source with ``set_epoch`` of the user's; not a ``datasets.IterableDataset``, which has
        one whether shuffled or not, and an evaluation stream over one is read again on
        purpose)."""
        if not callable(getattr(self.source, "set_epoch", None)):
            return False
        return not type(self.source).__module__.startswith("datasets.")

    def _warn_if_repeated(self) -> None:
        """NOTE [ A stream's new pass without set_epoch ]: one warning when a pass starts over
        an epoch whose pass every worker finished, with no ``set_epoch`` since."""
        if self._warned_repeat or not self._varies_by_epoch():
            return
        if not finished(self._counters.lanes(self.epoch)):
            return
        self._warned_repeat = True
        if not self._counters.claim_repeat(self.epoch):
            return  # (another worker's copy, or an earlier pass's, said it)
        warnings.warn(
            f"this {type(self).__name__} starts another pass of epoch {self.epoch}, which a "
            "pass already finished, with no set_epoch() since: it repeats that epoch's order "
            "(shuffle, source and worker split). Call set_epoch(epoch) before each pass for a "
            "new order (set_epoch of the same epoch repeats it on purpose, without this warning)",
            UserWarning,
            stacklevel=3,
        )

    def _replay_state(self, batches_consumed: int | None) -> dict[str, Any]:
        """The state of a resume by replay after ``batches_consumed`` batches (module NOTE)."""
        return replay_state(
            self._counters,
            epoch=self.epoch,
            batches_consumed=batches_consumed,
            scheduled=self.steps_per_epoch is not None,
            source=self.source,
            config=self._config(),
            fmt=self.REPLAY_FORMAT,
            store=getattr(self, "_lane_states", None),
        )

    def state_dict(self, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """JSON-serialisable position of the current pass.

        Args:
            batches_consumed: batches of this epoch the training loop consumed, when it lags
                the stream (DataLoader prefetch); default: every batch handed out so far
                (NOTE [ Resuming a stream behind DataLoader workers ] in
                :mod:`bucketloader.stream.iterable`, and its packing twin in
                :mod:`bucketloader.stream.packing`).
        """
        if self._resume is not None and batches_consumed is None:
            return self._resume
        engine = self._engine
        if engine is not None and engine.epoch != self.epoch:
            engine = None  # a pass of another epoch (set_epoch since): its state is not current
        # an exact state once a batch was handed out in this process; before the first batch,
        # the replay state, which also resumes behind DataLoader workers
        exact = engine is not None and engine.worker == (0, 1) and engine.skip == 0
        # a stream split over ranks: exact where its source seeks or checkpoints, else a replay
        if (
            exact
            and engine.batches
            and (self.steps_per_epoch is None or engine.o.seekable or engine.o.stateful)
        ):
            if batches_consumed in (None, engine.batches):
                return engine.state_dict()
        if batches_consumed is None and engine is None:
            self._warn_if_ahead()
        return self._replay_state(batches_consumed)

    #: The epoch whose state ran ahead of the loop and was warned about (once per epoch).
    _warned_ahead: int | None = None

    def _warn_if_ahead(self) -> None:
        """One warning per epoch when ``state_dict()`` without ``batches_consumed`` counts what
        DataLoader workers made while they still run: that runs ahead of the loop by the
        batches in flight, and a resume from it would skip them (the samplers warn alike)."""
        lanes = self._counters.lanes(self.epoch)
        if not lanes or self._warned_ahead == self.epoch:
            return
        if finished(lanes):
            return  # every worker's pass ended: the count is the whole epoch
        self._warned_ahead = self.epoch
        made = sum(lane["batches"] for lane in lanes)
        warnings.warn(
            f"{type(self).__name__}.state_dict() is taken while {lanes[0]['lanes']} DataLoader "
            f"workers have made {made} batches of epoch {self.epoch}, ahead of your loop by the "
            "batches in flight (prefetch): resuming from it would skip them. Pass "
            "state_dict(batches_consumed=<batches your loop consumed this epoch>)",
            UserWarning,
            stacklevel=3,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the next ``iter()`` exactly where ``state`` was taken (strict checks)."""
        owner = type(self).__name__
        check_state(state, owner=owner, keys=self.STATE_KEYS, replay_format=self.REPLAY_FORMAT)
        if self._one_shot():  # (first: no state resumes over it; s32, before the refusal of
            # a state saved over a source with a length, which a one-shot iterator lacks)
            raise ValueError(
                "cannot resume a one-shot iterator (it cannot be read again from the start); "
                "pass a re-iterable source: a list, a Dataset, or an object whose __iter__ "
                "returns a fresh iterator"
            )
        check_config(state, self._config(), owner=owner, versions=self.VERSION_KEYS)
        self._check_versions(state)
        if state["format"] == self.STATE_FORMAT:
            if state["source"]["state"] is not None and not is_stateful(self.source):
                raise ValueError("state holds a source state_dict but the source cannot load one")
            self._check_buffers(state)
            steps = self.steps_per_epoch
            if steps is not None and state["batches"] > steps:  # (else: an epoch of no step)
                raise ValueError(
                    f"state['batches']={state['batches']} is more than the epoch's "
                    f"steps_per_epoch={steps}; pass a dict from {owner}.state_dict(), unedited"
                )
        if self._owner == os.getpid() or torch.utils.data.get_worker_info() is None:
            self._loads += 1  # (a worker's own load, a wrapper's in its __iter__, is its own)
            self._forgotten = False
        self.epoch = int(state["epoch"])
        self._resume = state

    def _follow_main(self) -> RuntimeError | None:
        """In a DataLoader worker: take the main process's epoch; the error that refuses a
        pass after a ``load_state_dict`` this copy never saw (NOTE [ The main process's epoch,
        for persistent workers ] in :mod:`bucketloader.stream.counters`)."""
        epoch, loads = self._counters.published()
        if loads < 0:  # the main process forgot its last load's state (set_epoch of another
            loads = self._loads = -1 - loads  # epoch): nothing to see, so follow its epoch
        if loads != self._loads:
            return RuntimeError(
                f"load_state_dict was called on this {type(self).__name__} after the "
                "DataLoader's persistent workers took their copy of it, so they cannot see the "
                f"state and would start epoch {epoch} over; build a new DataLoader after "
                "load_state_dict (or pass persistent_workers=False)"
            )
        if self.__dict__.get("_epoch_set_in") != os.getpid():  # set_epoch called in this worker
            # (a wrapper dataset that forwards its epoch in its __iter__, as datasets'
            # IterableDataset does) is kept: following the main process's epoch, which such a
            # wrapper never sets there, repeated epoch 0 in every epoch (s25-rev)
            self._epoch = epoch
        return None

    def _check_versions(self, state: dict[str, Any]) -> None:
        """Refuse a ``state`` whose :attr:`VERSION_KEYS` say its resume cannot be exact here,
        where :meth:`load_state_dict` can tell (none here: the pass decides)."""

    def _check_fill_version(self, state: dict[str, Any], version: int, old: str, new: str) -> None:
        """Refuse a state whose ``last_batch="fill"`` completed short batches another way than
        fill ``version`` (its ``config["fill"]``; ``old``: how a state without one filled,
        ``new``: how this stream fills; NOTE [ What a stream's fill repeats ]): the rest of its
        epoch would be other batches than the saved run's. A replay state from before the
        epoch's first batch starts the pass over, which any version does alike."""
        saved = state["config"].get("fill")
        if self.last_batch != "fill" or saved == version:  # type: ignore[attr-defined]
            return
        if state["format"] == self.REPLAY_FORMAT and not any(state["skip"]):
            return
        epoch = state["epoch"]
        how = old if saved is None else f"fill version {saved!r}"
        raise ValueError(
            f"state was saved by a {type(self).__name__} whose last_batch='fill' completed a "
            f"short batch with {how}; this one completes it with {new} (fill version "
            f"{version}), so the rest of epoch {epoch} would not be the batches the saved run "
            "made. Start that epoch over: skip load_state_dict and call "
            f"stream.set_epoch({epoch}) (or set_epoch({epoch + 1}) for the next one)"
        )

    def _check_buffers(self, state: dict[str, Any]) -> None:
        """Refuse an exact ``state`` whose buffers do not fit this stream (an edited state),
        before :meth:`load_state_dict` takes it: the stream is left as it was."""

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}
