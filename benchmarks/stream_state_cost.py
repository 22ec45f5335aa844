"""What the lengths check costs a stream's ``state_dict()`` over a source without a length.

Run from the repository root (about half a minute on a 2-core machine)::

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
store per batch, timed alone per batch and set against a whole pass's time.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.stream import BucketIterable, PackIterable  # noqa: E402
from bucketloader.stream._engine import Pass, lengths_digest  # noqa: E402

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
    held = len(set(engine._held_lengths()[0]))

    def without() -> None:
        Pass.checks_lengths = OFF  # type: ignore[assignment,method-assign]
        try:
            stream.state_dict()
        finally:
            Pass.checks_lengths = ORIGINAL  # type: ignore[method-assign]

    with_digest, off, alone = fastest_us(
        [stream.state_dict, without, lambda: lengths_digest(*engine._held_lengths())]
    )
    return [
        name,
        f"{held:,}",
        f"{off:,.0f}",
        f"{with_digest:,.0f}",
        f"{alone:,.0f}",
        f"{with_digest / off - 1:+.0%}",
    ]


def trace_share(make, source) -> list[str]:
    """The per-batch cost of the trace (:meth:`Pass._trace_batch` and the counters' store,
    timed alone: a whole pass is too noisy on a shared machine to show it), and its share of
    the pass (the best of 3)."""
    stream = make(source)
    best, batches, samples = float("inf"), 0, 0
    for _ in range(3):
        t = time.perf_counter()
        batches = samples = 0
        for batch in stream:
            batches += 1
            samples += len(batch)
        best = min(best, time.perf_counter() - t)
    engine, counters = stream._engine, stream._counters
    # a packed batch also folds its documents per row and their lengths: a batch of the
    # pass's mean documents, in 8 rows
    docs = samples // batches
    parts = [docs // 8] * 8 + [30] * docs if isinstance(stream, PackIterable) else []
    n = 100_000
    t = time.perf_counter()
    for b in range(n):
        engine._trace_batch(32, 700, parts)
        counters.trace(0, b, engine.trace)
    per_batch = (time.perf_counter() - t) / n
    return [
        f"{per_batch * 1e9:,.0f}",
        f"{batches:,}",
        f"{best:.3f}",
        f"{per_batch * batches / best:.2%}",
    ]


def main() -> None:
    t0 = time.perf_counter()
    source = Plain(rows())
    table = [state_row(name, make, source) for name, make in CASES.items()]
    names = list(CASES)
    passes = [[name, *trace_share(CASES[name], source)] for name in (names[0], names[3])]
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
        "The replay trace, kept by every pass: its cost per batch (a multiply-add, for a "
        "packed batch also a hash of its documents per row and their lengths, and one store "
        "in the shared counters), timed alone, and its share of a whole pass (the best of 3):",
        "",
        "| stream | trace per batch (ns) | batches | pass (s) | share |",
        "|---|---:|---:|---:|---:|",
        *("| " + " | ".join(r) + " |" for r in passes),
    ]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
