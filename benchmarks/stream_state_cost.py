"""What the lengths check costs a stream's ``state_dict()`` over a source without a length.

Run from the repository root (about two minutes on a 2-core machine)::

    .venv/bin/python benchmarks/stream_state_cost.py

Writes ``benchmarks/results/stream_state_cost.md``.

A stream over a source that records neither its length nor its files (here a plain re-iterable
of dicts: only ``__iter__``) adds to every exact state a digest of the lengths of the samples it
holds (NOTE [ A stream state over a source without a length ] in
:mod:`bucketloader.stream._engine`). Each row stops a pass half-way and times ``state_dict()``
(the fastest of 200 calls, in turns, garbage collector off) as it is, with the digest left out
(``checks_lengths`` off), and the digest alone (``lengths_digest(*_held_lengths())``). The
replay trace (NOTE [ A replay over a source without a length ]) costs one multiply-add (for a
packed batch also a blake2b hash of its documents per row and their lengths) and one ``int64``
store per batch: timed alone over the calls a real pass made, as s32 computed it
(``array("q")``) and as now (``struct.pack``, the same trace), and set against a pass with it
off, bare and collating its batches; with the default ``open_rows`` too, and over s32-rev's
documents of 1 to 299 tokens, where a packed pass is cheapest per batch.
"""

from __future__ import annotations

import gc
import hashlib
import os
import platform
import sys
import time
from array import array
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.stream import BucketIterable, PackIterable  # noqa: E402
from bucketloader.stream._engine import TRACE_MOD, Pass, lengths_digest  # noqa: E402
from bucketloader.stream._rows import RowPass  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "stream_state_cost.md"
N = 50_000
CALLS = 200


class Plain:
    """Samples behind ``__iter__`` only: no length, no seek, no checkpoint."""

    def __init__(self, rows):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def rows() -> list[dict]:
    raw = np.loadtxt(ROOT / "tests" / "data" / "europarl_v7_en_fr_20k_tokens.txt", dtype=np.int64)
    lens = np.maximum(raw[:, 1], 1)[np.random.default_rng(0).integers(0, raw.shape[0], N)]
    return [{"id": i, "input_ids": [1] * int(n)} for i, n in enumerate(lens.tolist())]


BOUNDS = [11, 16, 21, 27, 34, 44, 61, 113]
CASES = {
    "BucketIterable, shuffle_buffer=64, batch_size=32": lambda s: BucketIterable(
        s, length_fn="input_ids", boundaries=BOUNDS, batch_size=32, shuffle_buffer=64
    ),
    "BucketIterable, shuffle_buffer=1024, batch_size=32": lambda s: BucketIterable(
        s, length_fn="input_ids", boundaries=BOUNDS, batch_size=32, shuffle_buffer=1024
    ),
    "BucketIterable, shuffle_buffer=8192, batch_size=32, last_batch='fill'": lambda s: (
        BucketIterable(
            s,
            length_fn="input_ids",
            boundaries=BOUNDS,
            batch_size=32,
            shuffle_buffer=8192,
            last_batch="fill",
        )
    ),
    "PackIterable, row_length=512, open_rows=8, batch_size=8": lambda s: PackIterable(
        s, length_fn="input_ids", row_length=512, batch_size=8, open_rows=8
    ),
    "PackIterable, row_length=32, open_rows=8, batch_size=8, overflow='split'": lambda s: (
        PackIterable(
            s, length_fn="input_ids", row_length=32, batch_size=8, open_rows=8, overflow="split"
        )
    ),
    "PackIterable, row_length=512, open_rows=256, batch_size=16, last_batch='fill'": lambda s: (
        PackIterable(
            s,
            length_fn="input_ids",
            row_length=512,
            batch_size=16,
            open_rows=256,
            last_batch="fill",
        )
    ),
}


def fastest_us(fns: list) -> list[float]:
    """The fastest of :data:`CALLS` calls of each of ``fns``, in microseconds, called in turns
    with the garbage collector off: on a shared machine a call is often descheduled (the
    median moved 5x between runs), and a full collection of the 50,000 samples in memory lands
    on random calls; the fastest call is what the work itself costs."""
    best = [float("inf")] * len(fns)
    gc.collect()
    gc.disable()
    try:
        for _ in range(CALLS):
            for i, fn in enumerate(fns):
                t = time.perf_counter()
                fn()
                best[i] = min(best[i], time.perf_counter() - t)
    finally:
        gc.enable()
    return [b * 1e6 for b in best]


ORIGINAL = Pass.checks_lengths
OFF = property(lambda self: False)


def state_row(name: str, make, source) -> list[str]:
    stream = make(source)
    for _ in stream:
        if stream._engine.read >= N // 2:
            break
    engine = stream._engine
    version = engine.LENGTHS_VERSION  # (a packing state's: NOTE [ Pieces of one length ])
    held = len(set(engine._held_lengths(version)[0]))

    def without() -> None:
        Pass.checks_lengths = OFF  # type: ignore[assignment,method-assign]
        try:
            stream.state_dict()
        finally:
            Pass.checks_lengths = ORIGINAL  # type: ignore[method-assign]

    with_digest, off, alone = fastest_us(
        [stream.state_dict, without, lambda: lengths_digest(*engine._held_lengths(version))]
    )
    return [
        name,
        f"{held:,}",
        f"{off:,.0f}",
        f"{with_digest:,.0f}",
        f"{alone:,.0f}",
        f"{with_digest / off - 1:+.0%}",
    ]


def _trace_batch_s32(self, rows: int, real: int, parts=()) -> None:
    """``Pass._trace_batch`` as s32 left it (the parts packed by ``array("q")``): the same
    value, for the side-by-side timing."""
    if self.trace is None:
        return
    trace = (self.trace * 1_000_003 + real * 65_537 + rows + 1) % TRACE_MOD
    if parts:
        digest = hashlib.blake2b(array("q", parts).tobytes(), digest_size=7).digest()
        trace = (trace * 1_000_003 + int.from_bytes(digest, "little")) % TRACE_MOD
    self.trace = trace


NOW = Pass._trace_batch
TRACE_CASES = {
    "BucketIterable, shuffle_buffer=64, batch_size=32": CASES[
        "BucketIterable, shuffle_buffer=64, batch_size=32"
    ],
    "PackIterable, row_length=512, open_rows=8, batch_size=8": CASES[
        "PackIterable, row_length=512, open_rows=8, batch_size=8"
    ],
    "PackIterable, row_length=512, batch_size=8 (default open_rows=256)": lambda s: PackIterable(
        s, length_fn="input_ids", row_length=512, batch_size=8
    ),
    "PackIterable, row_length=2048, batch_size=32 (default open_rows=256)": lambda s: PackIterable(
        s, length_fn="input_ids", row_length=2048, batch_size=32
    ),
}
DEFAULT_PACK = "PackIterable, row_length=512, batch_size=8 (default open_rows=256)"
#: s32-rev's source (its b3_trace_share.py): 40,000 documents of 1 to 299 tokens, uniform
UNIFORM_CASE = f"{DEFAULT_PACK}, 40,000 documents of 1-299 tokens (uniform)"
PASSES = 5
REPLAYS = 20


def _pass(stream, collate=None) -> tuple[float, int]:
    """One pass with the trace off (no trace kept, no store in the counters), CPU time with the
    garbage collector off; its time and batches."""
    Pass.checks_lengths = OFF  # type: ignore[assignment,method-assign]
    gc.collect()
    gc.disable()
    try:
        t = time.process_time()
        batches = 0
        for batch in stream:
            batches += 1
            if collate is not None:
                collate(batch)
        return time.process_time() - t, batches
    finally:
        gc.enable()
        Pass.checks_lengths = ORIGINAL  # type: ignore[method-assign]


def _recorded(stream) -> list[tuple]:
    """The trace's calls of one pass, ``(rows, real, parts)`` per batch, as the pass made them."""
    calls: list[tuple] = []

    def record(self, rows, real, parts=()):
        calls.append((rows, real, list(parts)))
        NOW(self, rows, real, parts)

    Pass._trace_batch = record  # type: ignore[method-assign]
    try:
        for _ in stream:
            pass
    finally:
        Pass._trace_batch = NOW  # type: ignore[method-assign]
    return calls


class _Lane:
    trace = 0


def _replay_us(fold, calls: list[tuple], counters) -> tuple[float, int]:
    """A pass's trace alone: ``fold`` (s32's or now's ``_trace_batch``) over its recorded calls
    (a packed batch's parts list built as the pass builds it), and the counters' store after
    each, as the pass does them; microseconds per batch (the fastest of :data:`REPLAYS`), and
    the final trace."""
    best = float("inf")
    lane = _Lane()
    for _ in range(REPLAYS):
        lane.trace = 0
        gc.disable()
        t = time.process_time()
        for b, (rows, real, parts) in enumerate(calls):
            fold(lane, rows, real, parts[:rows] + parts[rows:] if parts else ())  # (the list
            counters.trace(0, b, lane.trace)  # a packed pass builds: rows' counts + lengths)
        best = min(best, time.process_time() - t)
        gc.enable()
    return best / len(calls) * 1e6, lane.trace


def trace_share(make, source) -> list[str]:
    """The trace's cost per batch, s32's and now's, replayed over the calls a pass made (timed
    alone: the difference of two whole passes is within their noise on a shared machine), and
    its share of the pass: bare (the stream alone) and collating each batch with the stream's
    own collator (as a training loop does); the passes with the trace off, the fastest of
    :data:`PASSES` (CPU time)."""
    stream = make(source)
    calls = _recorded(stream)
    s32, trace_s32 = _replay_us(_trace_batch_s32, calls, stream._counters)
    now, trace_now = _replay_us(NOW, calls, stream._counters)
    assert trace_s32 == trace_now, (trace_s32, trace_now)  # the same trace, two ways
    bare = min(_pass(stream)[0] for _ in range(PASSES)) / len(calls) * 1e6
    collate = stream.collator()
    collated = min(_pass(stream, collate)[0] for _ in range(3)) / len(calls) * 1e6
    docs = sum(len(p) for _, _, p in calls) / len(calls)
    return [
        f"{len(calls):,}",
        f"{docs:,.0f}",
        f"{bare:,.1f}",
        f"{collated:,.0f}",
        f"{s32:.1f} ({s32 / bare:.1%})",
        f"{now:.1f} ({now / bare:.1%})",
        f"{now / collated:.1%}",
    ]


SPLIT_CASES = {
    "PackIterable, row_length=32, open_rows=8, batch_size=8, overflow='split'": CASES[
        "PackIterable, row_length=32, open_rows=8, batch_size=8, overflow='split'"
    ],
    "PackIterable, row_length=32, batch_size=8 (default open_rows=256), overflow='split'": (
        lambda s: PackIterable(
            s, length_fn="input_ids", row_length=32, batch_size=8, overflow="split"
        )
    ),
}


def whole_share(make, source) -> list[str]:
    """NOTE [ Pieces of one length ] (s34): the whole length a packing pass keeps of each
    document its overflow policy cuts (``RowPass._keep_whole``: a dict store, and now and then
    the letting go of those no longer held), timed call by call inside real passes (CPU time,
    garbage collector off), less the timer's own cost (the same passes timing a call that does
    nothing; the fastest of :data:`PASSES` each), per batch, and set against a bare pass."""
    keep = RowPass._keep_whole

    def nothing(self, pos, length, read):
        return None

    def timed_passes(fn) -> tuple[float, int, int]:
        spent = [0.0]

        def timed(self, pos, length, read):
            t = time.process_time()
            fn(self, pos, length, read)
            spent[0] += time.process_time() - t

        best, batches, cuts = float("inf"), 0, 0
        RowPass._keep_whole = timed  # type: ignore[method-assign]
        try:
            for _ in range(PASSES):
                spent[0] = 0.0
                stream = make(source)
                gc.collect()
                gc.disable()
                batches = sum(1 for _ in stream)
                gc.enable()
                cuts = stream.stats["split"] + stream.stats["truncated"]
                best = min(best, spent[0])
        finally:
            RowPass._keep_whole = keep  # type: ignore[method-assign]
        return best, batches, cuts

    kept, batches, cuts = timed_passes(keep)
    timer, _, _ = timed_passes(nothing)
    bare = min(_pass(make(source))[0] for _ in range(PASSES)) / batches * 1e6
    per, clock = kept / batches * 1e6, timer / batches * 1e6
    return [
        f"{batches:,}",
        f"{cuts / batches:.1f}",
        f"{bare:,.1f}",
        f"{per:.2f}",
        f"{clock:.2f}",
        f"{per - clock:.2f} ({(per - clock) / bare:.1%})",
    ]


def main() -> None:
    t0 = time.perf_counter()
    source = Plain(rows())
    table = [state_row(name, make, source) for name, make in CASES.items()]
    passes = [[name, *trace_share(make, source)] for name, make in TRACE_CASES.items()]
    uniform = np.random.default_rng(0).integers(1, 300, 40_000).tolist()
    docs = Plain([{"input_ids": [1] * n} for n in uniform])
    passes.append([UNIFORM_CASE, *trace_share(TRACE_CASES[DEFAULT_PACK], docs)])
    wholes = [[name, *whole_share(make, source)] for name, make in SPLIT_CASES.items()]
    load = os.getloadavg()[0]
    lines = [
        "# The lengths check: its cost per state_dict() over a source without a length",
        "",
        f"Command: `.venv/bin/python benchmarks/stream_state_cost.py` "
        f"({time.perf_counter() - t0:.0f} s). Machine: {platform.platform()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs (load average {load:.1f}: a shared "
        "machine).",
        "",
        f"{N:,} Europarl fr samples (token lengths resampled) behind `__iter__` only, a pass "
        f"stopped half-way; the fastest of {CALLS} calls each, in turns (garbage collector "
        "off: on a shared machine the median moves with the load). Held: the samples the "
        "state names (shuffle buffer, bucket buffers or rows, the samples a fill reuses).",
        "",
        "| stream | held | state_dict() without the digest (us) | with it (us) "
        "| the digest alone (us) | cost |",
        "|---|---:|---:|---:|---:|---:|",
        *("| " + " | ".join(r) + " |" for r in table),
        "",
        "The replay trace, kept by every pass over such a source: a multiply-add per batch (a "
        "packed batch also hashes its documents per row and their lengths, blake2b), and one "
        "store in the shared counters. Each stream makes a pass recording the trace's calls "
        "(rows, tokens and parts of each batch); the trace alone is then timed over those calls "
        f"(and the store after each), as s32 computed it (`array('q')`) and as now "
        f"(`struct.pack`: the same bytes, the same trace, asserted), the fastest of {REPLAYS} "
        "each in CPU time (garbage collector off): the difference of two whole passes is within "
        "their noise on a shared machine. Its share is of a pass with the trace off, the "
        f"fastest of {PASSES}: bare (the stream alone, no collation) and collating each batch "
        "with the stream's own collator (the fastest of 3; `stream.collator()`, as a training "
        "loop does). Parts: a packed batch's rows and documents, hashed.",
        "",
        "| stream | batches | parts a batch | bare pass (us a batch) "
        "| with collation (us a batch) | trace as s32 (us a batch, share of the bare pass) "
        "| trace now (us a batch, share) | trace now, share of the collated pass |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *("| " + " | ".join(r) + " |" for r in passes),
        "",
        "The whole lengths a packing pass keeps of the documents its overflow policy cuts (NOTE "
        "[ Pieces of one length ], s34: a split or truncated document's pieces are digested by "
        "its whole length): one dict store per cut document, and now and then letting go of "
        "those no longer held, timed call by call inside a pass (CPU time, the fastest of "
        f"{PASSES} passes), less the timer's own cost (the same passes timing a call that does "
        "nothing), per batch, against a bare pass (the fastest of 5; a pass over documents none "
        "of which is cut, or over a source with a length, does none of it).",
        "",
        "| stream | batches | cut documents a batch | bare pass (us a batch) "
        "| timed (us a batch) | the timer alone (us a batch) "
        "| whole lengths kept, less the timer (us a batch, share of the bare pass) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *("| " + " | ".join(r) + " |" for r in wholes),
    ]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
