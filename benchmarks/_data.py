"""The real length files the benchmarks read: ``tests/data`` (provenance: tests/data/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
#: The data sets, in the order the results tables list them.
NAMES = ("librispeech", "commonvoice", "multi30k", "europarl", "gsm8k", "coco", "ecoli")
#: Data set name -> its length file in :data:`DATA` (``<name>_<what>.txt``: one column, or one
#: per input).
FILES = {name: min(p.name for p in DATA.glob(f"{name}_*.txt")) for name in NAMES}
