"""Which of ``best_fit``'s three loops is faster where: the documents one at a time, the sorted
rooms or the keyed open groups.

``bucketloader.pack._bins.best_fit`` (best-fit decreasing over a length histogram) has three
loops that make the same plan (NOTE [ Two solvers, the tighter plan ], NOTE [ Few documents a
size ]): ``_fit_by_document`` places one document at a time over a sorted list of the open rows'
keys (``bisect``; each insert moves ``O(n)`` of it) and groups the rows into patterns in numpy
afterwards; ``_fit_by_room`` keeps the open rooms of groups of rows in a sorted list, one step per
group and size; ``_fit_by_key`` keeps the open groups as integer keys in a stack and a heap
(``O(log n)`` a step, big-integer keys) and places runs of sizes that hold one document each by a
per-document loop. Per case: CPU time of each loop (best of 7 rounds in turn, in an order that
changes every round, of about 10 ms of calls each), the ratios to the per-document loop, and the
loop ``best_fit`` picks (``_BY_DOCUMENT``, ``_DOCS_PER_SIZES``, ``_HELD_OPEN``, ``_MANY``,
``_SINGLE``).

Cases: ``N`` distinct document sizes in rows of ``L``, a share of them (``singletons``) holding
one document each and the others 2-5; uniform in (L/16, L/2] or lognormal up to L.

Run: ``PYTHONPATH=$PWD python benchmarks/bfd_paths.py`` (a few minutes; ``--quick``: three
cases, printed, not written). Writes ``benchmarks/results/bfd_paths.md``.
"""

from __future__ import annotations

import argparse
import os
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


#: The loops raced, by name: the plan is the same (tests/test_pack_bfd.py).
LOOPS = {
    "per document": _bins._fit_by_document,
    "sorted rooms": _bins._fit_by_room,
    "keyed": _bins._fit_by_key,
}


def race(sizes, counts, length: int, rounds: int = 7) -> list[float]:
    """Best CPU time per call of each of :data:`LOOPS`, in rounds of one turn each."""
    loops = list(LOOPS.values())
    best = [float("inf")] * len(loops)
    for r in range(rounds):
        for i in range(len(loops)):
            i = (i + r) % len(loops)  # (who goes first changes every round)
            calls, start = 0, time.thread_time()
            while True:
                loops[i](sizes, counts, (length,))
                calls += 1
                if time.thread_time() - start > 0.01:
                    break
            best[i] = min(best[i], (time.thread_time() - start) / calls)
    return best


def picks(sizes, counts, length: int) -> str:
    """The loop ``best_fit`` runs on this histogram."""
    loop = _bins._best_fit_loop(sizes, counts, length)
    return {_bins._fit_by_document: "per document", _bins._fit_by_room: "sorted rooms"}.get(
        loop, "keyed"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three cases, printed only")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = [
        (n, length, share, shape)
        for length in (2**14, 2**20 + 3, 2**24)
        for n in (375, 1_000, 3_000, 8_000)
        for share in (1.0, 0.99, 0.95, 0.9, 0.8, 0.5, 0.25, 0.0)
        for shape in ("uniform", "lognormal")
    ]
    if args.quick:
        cases = [(375, 2**14, 1.0, "uniform"), (1_000, 2**20 + 3, 0.9, "lognormal"),
                 (3_000, 2**24, 0.5, "uniform")]  # fmt: skip
    rows = []
    names = list(LOOPS)
    for n, length, share, shape in cases:
        sizes, counts = histogram(rng, n, length, share, shape)
        times = race(sizes, counts, length)
        single = float(np.mean(counts == 1))
        per = float(counts.sum()) / len(sizes)
        pick = picks(sizes, counts, length)
        rows.append((shape, length, len(sizes), single, per, times, pick))
        print(f"{shape} L={length} sizes={len(sizes)} single={single:.2f} per size={per:.2f} "
              f"rooms/doc={times[1] / times[0]:.2f}x keyed/doc={times[2] / times[0]:.2f}x "
              f"picks={pick}", flush=True)  # fmt: skip
    if args.quick:
        return
    # the picked loop's time over the fastest loop's, per case
    over = [r[5][names.index(r[6])] / min(r[5]) for r in rows]
    lines = [
        "# best_fit's three loops: per document, sorted rooms or keyed open groups "
        "(benchmarks/bfd_paths.py)",
        "",
        f"`PYTHONPATH=$PWD python benchmarks/bfd_paths.py` on {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, "
        f"{time.strftime('%Y-%m-%d')}; a shared 2-core machine (load average "
        f"{os.getloadavg()[0]:.1f} at the end): CPU time of the thread, best of 7 rounds of "
        "about 10 ms of calls, each round every loop in turn. All three make the same plan "
        "(tests/test_pack_bfd.py). *rooms / doc* and *keyed / doc* above 1: the per-document "
        "loop is faster; *picks*: the loop `best_fit` runs (per document where the documents "
        f"are at most `_BY_DOCUMENT` = {_bins._BY_DOCUMENT:,} and at most "
        f"{_bins._DOCS_PER_SIZES[1] / _bins._DOCS_PER_SIZES[0]:g} per distinct size, at most "
        f"`_HELD_OPEN` = {_bins._HELD_OPEN:,} of them longer than L/2, else "
        f"sorted rooms below `_MANY` = {_bins._MANY:,} sizes unless all but one in `_SINGLE` = "
        f"{_bins._SINGLE} hold one document, else keyed).",
        "",
        "| lengths | L | sizes | one document | documents per size | per document ms | "
        "sorted rooms ms | keyed ms | rooms / doc | keyed / doc | picks |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for shape, length, n, single, per, (doc, room, key), pick in rows:
        lines.append(
            f"| {shape} | {length:,} | {n:,} | {single:.0%} | {per:.2f} | {doc * 1e3:.3f} | "
            f"{room * 1e3:.3f} | {key * 1e3:.3f} | {room / doc:.2f}x | {key / doc:.2f}x | "
            f"{pick} |"
        )
    lines += [
        "",
        f"The loop `best_fit` picks takes at most **{max(over):.2f}x** the fastest loop's time "
        f"(median {np.median(over):.2f}x) over these {len(rows)} cases.",
        "",
    ]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
