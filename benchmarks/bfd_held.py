"""Where ``best_fit``'s per-document loop stops paying: documents longer than half the row.

``_fit_by_document`` (NOTE [ Few documents a size ] in ``bucketloader/pack/_bins.py``) keeps
the open rows' keys in one sorted list; each document longer than ``L / 2`` holds a row of its
own open, and the rooms that smaller documents leave sort far below the rooms they came from,
so each insert moves much of the list. Per case: CPU time of the per-document loop and of the
bulk loop ``best_fit`` runs otherwise (the keyed open groups: one document a size), best of 5
rounds in turn, and the loop ``best_fit`` picks (``_HELD_OPEN``).

Cases: ``N`` documents of distinct sizes uniform in ``(0, L]`` (about half longer than
``L / 2``) or in ``(L / 8, L / 2]`` (none), in rows of ``L`` = 2**20 + 3 and 2**24.

Run: ``PYTHONPATH=$PWD python benchmarks/bfd_held.py`` (about a minute). Writes
``benchmarks/results/bfd_held.md``.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.pack import _bins  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "bfd_held.md"
SHAPES = {"(0, L]": (0, 1), "(L/8, L/2]": (8, 2)}


def histogram(rng: np.random.Generator, n: int, length: int, shape: str):
    """``n`` distinct sizes (largest first), one document each."""
    low, high = SHAPES[shape]
    first = length // low + 1 if low else 1
    sizes = rng.choice(np.arange(first, length // high + 1), n, replace=False)
    return np.sort(sizes)[::-1].astype(np.int64), np.ones(n, dtype=np.int64)


def race(sizes, counts, length: int, rounds: int = 5) -> list[float]:
    """Best CPU time of the per-document and the keyed loop, in turn."""
    best = [float("inf")] * 2
    for _ in range(rounds):
        for i, loop in enumerate((_bins._fit_by_document, _bins._fit_by_key)):
            start = time.thread_time()
            loop(sizes, counts, (length,))
            best[i] = min(best[i], time.thread_time() - start)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    lines = [
        "# best_fit's per-document loop and documents longer than half the row "
        "(benchmarks/bfd_held.py)",
        "",
        f"`PYTHONPATH=$PWD python benchmarks/bfd_held.py` on {platform.machine()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, {time.strftime('%Y-%m-%d')}; "
        "a shared 2-core machine (load average {load} at the end): CPU time of the thread, best "
        "of 5 rounds, each round both loops in turn; both make the same plan "
        f"(tests/test_pack_bfd.py). *picks*: per document where at most `_HELD_OPEN` = "
        f"{_bins._HELD_OPEN:,} documents are longer than L/2 (and the other rules hold).",
        "",
        "| sizes | L | documents | longer than L/2 | per document ms | keyed ms | "
        "per document / keyed | picks |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for length in (2**20 + 3, 2**24):
        for shape in SHAPES:
            for n in (1_000, 2_000, 3_000, 4_000, 6_000, 8_000, 16_000, 65_536):
                sizes, counts = histogram(rng, n, length, shape)
                held = _bins._held_open(sizes, counts, length)
                doc, key = race(sizes, counts, length)
                pick = "per document" if held <= _bins._HELD_OPEN else "keyed"
                lines.append(
                    f"| {shape} | {length:,} | {n:,} | {held:,} | {doc * 1e3:.1f} | "
                    f"{key * 1e3:.1f} | {doc / key:.2f}x | {pick} |"
                )
                print(lines[-1], flush=True)
    lines[2] = lines[2].replace("{load}", f"{os.getloadavg()[0]:.1f}")
    OUT.write_text("\n".join([*lines, ""]), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
