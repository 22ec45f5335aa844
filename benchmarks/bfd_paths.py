"""Which of ``best_fit``'s two loops is faster where: the sorted rooms or the keyed open groups.

``bucketloader.pack._bins.best_fit`` (bulk best-fit decreasing over a length histogram) has two
loops that make the same plan (NOTE [ Two solvers, the tighter plan ]): ``_fit_by_room`` keeps
the open rooms in a sorted list (``bisect`` and ``insort``: each insert moves ``O(n)`` of it),
``_fit_by_key`` keeps the open groups as integer keys in a stack and a heap (``O(log n)`` a step,
big-integer keys) and places runs of sizes that hold one document each by a per-document loop.
Per case: CPU time of each loop (best of 7 alternating rounds of about 10 ms of calls each), the
ratio keyed / sorted rooms, and the loop ``best_fit`` picks (``_MANY``, ``_SINGLE``).

Cases: ``N`` distinct document sizes in rows of ``L``, a share of them (``singletons``) holding
one document each and the others 2-5; uniform in (L/16, L/2] or lognormal up to L.

Run: ``PYTHONPATH=$PWD python benchmarks/bfd_paths.py`` (about a minute; ``--quick``: three
cases, printed, not written). Writes ``benchmarks/results/bfd_paths.md``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.pack import _bins  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "bfd_paths.md"


def histogram(rng: np.random.Generator, n: int, length: int, singletons: float, shape: str):
    """``n`` distinct sizes (largest first) and their counts: ``singletons`` of them 1."""
    if shape == "uniform":
        every = np.arange(length // 16 + 1, length // 2 + 1)
        sizes = rng.choice(every, min(n, len(every)), replace=False)
    else:
        drawn = rng.lognormal(np.log(length / 20), 1.2, 4 * n).astype(np.int64)
        sizes = np.unique(np.clip(drawn, 1, length))
        sizes = rng.choice(sizes, min(n, len(sizes)), replace=False)
    sizes = np.sort(sizes)[::-1].astype(np.int64)
    counts = np.ones(len(sizes), dtype=np.int64)
    several = rng.random(len(sizes)) >= singletons
    counts[several] = rng.integers(2, 6, int(several.sum()))
    return sizes, counts


def race(sizes, counts, length: int, rounds: int = 7) -> tuple[float, float]:
    """Best CPU time per call of the keyed loop and of the sorted rooms', in alternating rounds."""
    loops = (_bins._fit_by_key, _bins._fit_by_room)
    best = [float("inf"), float("inf")]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            calls, start = 0, time.thread_time()
            while True:
                loops[i](sizes, counts, (length,))
                calls += 1
                if time.thread_time() - start > 0.01:
                    break
            best[i] = min(best[i], (time.thread_time() - start) / calls)
    return best[0], best[1]


def picks(sizes, counts) -> str:
    """The loop ``best_fit`` runs on this histogram."""
    several = int(np.count_nonzero(counts != 1))
    room = len(sizes) < _bins._MANY and _bins._SINGLE * several > len(sizes)
    return "sorted rooms" if room else "keyed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three cases, printed only")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = [
        (n, length, share, shape)
        for length in (2**14, 2**20 + 3, 2**24)
        for n in (375, 1_000, 3_000, 8_000)
        for share in (1.0, 0.99, 0.95, 0.9, 0.8, 0.5)
        for shape in ("uniform", "lognormal")
    ]
    if args.quick:
        cases = [(375, 2**14, 1.0, "uniform"), (1_000, 2**20 + 3, 0.9, "lognormal"),
                 (3_000, 2**24, 0.5, "uniform")]  # fmt: skip
    rows = []
    for n, length, share, shape in cases:
        sizes, counts = histogram(rng, n, length, share, shape)
        key, room = race(sizes, counts, length)
        single = float(np.mean(counts == 1))
        rows.append((shape, length, len(sizes), single, key, room, picks(sizes, counts)))
        print(f"{shape} L={length} sizes={len(sizes)} single={single:.2f} "
              f"keyed/rooms={key / room:.2f}x picks={rows[-1][-1]}", flush=True)  # fmt: skip
    if args.quick:
        return
    # the picked loop's time over the faster loop's, per case
    over = [(r[4] if r[6] == "keyed" else r[5]) / min(r[4], r[5]) for r in rows]
    lines = [
        "# best_fit's two loops: sorted rooms or keyed open groups (benchmarks/bfd_paths.py)",
        "",
        f"`PYTHONPATH=$PWD python benchmarks/bfd_paths.py` on {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, "
        f"{time.strftime('%Y-%m-%d')}; a shared 2-core machine: CPU time of the thread, best of "
        "7 alternating rounds of about 10 ms of calls. Both loops make the same plan (tests/"
        "test_pack_bfd.py). *keyed / rooms* below 1: the keyed loop is faster; *picks*: the loop "
        f"`best_fit` runs (sorted rooms below `_MANY` = {_bins._MANY} sizes unless all but one "
        f"in `_SINGLE` = {_bins._SINGLE} hold one document).",
        "",
        "| lengths | L | sizes | one document | keyed ms | sorted rooms ms | keyed / rooms "
        "| picks |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for shape, length, n, single, key, room, pick in rows:
        lines.append(
            f"| {shape} | {length:,} | {n:,} | {single:.0%} | {key * 1e3:.3f} | "
            f"{room * 1e3:.3f} | {key / room:.2f}x | {pick} |"
        )
    lines += [
        "",
        f"The loop `best_fit` picks takes at most **{max(over):.2f}x** the faster loop's time "
        f"(median {np.median(over):.2f}x) over these {len(rows)} cases.",
        "",
    ]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
