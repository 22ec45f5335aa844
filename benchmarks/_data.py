"""The real length files the benchmarks read: ``tests/data`` (provenance: tests/data/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
#: The data sets, in the order the results tables list them.
NAMES = ("librispeech", "commonvoice", "multi30k", "europarl", "gsm8k", "coco", "ecoli")
#: Data set name -> its length file in :data:`DATA` (``<name>_<what>.txt``: one column, or one
#: per input).
FILES = {name: min(p.name for p in DATA.glob(f"{name}_*.txt")) for name in NAMES}


def resample(n: int, seed: int, name: str = "librispeech") -> np.ndarray:
    """``n`` lengths resampled from ``name``'s real ones, int32, drawn in chunks (no full-size
    temporary): the large-N data of ``scale.py`` and ``shard_ranks.py``."""
    base = np.loadtxt(DATA / FILES[name], dtype=np.int32)
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=np.int32)
    step = 1 << 22
    for i in range(0, n, step):
        out[i : i + step] = base[rng.integers(0, base.size, min(step, n - i))]
    return out
