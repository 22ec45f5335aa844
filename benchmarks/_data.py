"""The real length files the benchmarks read: ``tests/data`` (provenance: tests/data/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
#: Data set name -> its length file in :data:`DATA` (one column, or one per input).
FILES = {
    "librispeech": "librispeech_train_clean_100_samples.txt",
    "commonvoice": "commonvoice_id_clip_ms.txt",
    "multi30k": "multi30k_train_en_de_tokens.txt",
    "europarl": "europarl_v7_en_fr_20k_tokens.txt",
    "gsm8k": "gsm8k_train_qa_tokens.txt",
    "coco": "coco_val2017_image_width_height.txt",
    "ecoli": "ecoli_k12_proteome_residues.txt",
}
