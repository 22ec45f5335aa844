"""Lengths of 1 M token-list rows via Arrow vs Python; streaming bucketing throughput.

Run: ``.venv/bin/python benchmarks/hf_lengths.py [--rows 1000000]`` (a few minutes on 2 cores).
Writes ``benchmarks/results/hf_lengths.md``.

1. A ``datasets.Dataset`` of ``--rows`` token-id rows (lengths resampled from the real Europarl,
   GSM8K and Multi30k distributions in tests/data), saved and reloaded with
   ``load_from_disk`` (memory-mapped, as users hold it). Compared, same process, same data:
   ``bucketloader.hf.lengths`` (Arrow list offsets) on the dataset and on a shuffled view; the
   usual Python scan ``Dataset.map(batched=True)`` computing ``len(ids)``; and the per-row scan
   ``[len(r["input_ids"]) for r in ds]`` timed on a slice and scaled.
2. Streaming: the same samples through plain fixed-size batching and through ``BucketIterable``
   (with and without a shuffle buffer), from a Python list and from an HF ``IterableDataset``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"  # the real length files (provenance: tests/data/SOURCES.md)
OUT = ROOT / "benchmarks" / "results" / "hf_lengths.md"


def real_lengths(n: int, seed: int = 0) -> np.ndarray:
    pools = [
        np.loadtxt(DATA / f, dtype=np.int64, ndmin=2).ravel()
        for f in (
            "europarl_v7_en_fr_20k_tokens.txt",
            "gsm8k_train_qa_tokens.txt",
            "multi30k_train_en_de_tokens.txt",
        )
    ]
    pool = np.concatenate(pools)
    return np.random.default_rng(seed).choice(pool[pool > 0], size=n)


def build_dataset(lengths: np.ndarray, where: Path):
    import datasets
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(np.arange(offsets[-1], dtype=np.int32) % 30000)
    ids = pa.ListArray.from_arrays(pa.array(offsets), values)
    table = pa.table({"input_ids": ids, "label": pa.array(np.arange(lengths.size) % 2)})
    datasets.Dataset(table).save_to_disk(str(where))
    return datasets.load_from_disk(str(where))


def best(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def bench_lengths(rows: int) -> list[str]:
    from bucketloader import hf

    lens = real_lengths(rows)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ds = build_dataset(lens, Path(tmp) / "ds")
        build_s = time.perf_counter() - t0
        shuffled = ds.shuffle(seed=0)
        t_arrow, got = best(lambda: hf.lengths(ds, "input_ids"))
        assert np.array_equal(got, lens)
        t_arrow_shuf, got_s = best(lambda: hf.lengths(shuffled, "input_ids"))
        t_map, mapped = best(
            lambda: ds.map(
                lambda b: {"length": [len(x) for x in b["input_ids"]]},
                batched=True,
                remove_columns=ds.column_names,
                load_from_cache_file=False,
                keep_in_memory=True,
            ),
            repeat=1,
        )
        assert np.array_equal(np.asarray(mapped["length"]), lens)
        part = min(rows, 50_000)
        sub = ds.select(range(part))
        t_row, row_lens = best(lambda: [len(r["input_ids"]) for r in sub], repeat=1)
        assert np.array_equal(np.asarray(row_lens), lens[:part])
        t_row_full = t_row * rows / part
        chk = shuffled.select(range(1000))
        assert np.array_equal(got_s[:1000], [len(r["input_ids"]) for r in chk])
    total_tokens = int(lens.sum())
    return [
        f"Dataset: {rows:,} rows, {total_tokens:,} tokens (lengths resampled from Europarl, "
        f"GSM8K, Multi30k; mean {lens.mean():.1f}, max {lens.max()}), built + saved + "
        f"`load_from_disk` in {build_s:.1f} s.",
        "",
        "| method | seconds | rows/s | vs Arrow |",
        "|---|---:|---:|---:|",
        f"| `hf.lengths` (Arrow offsets), best of 3 | {t_arrow:.3f} | {rows / t_arrow:,.0f} "
        "| 1.0× |",
        f"| `hf.lengths` on `.shuffle()` view (indices mapping) | {t_arrow_shuf:.3f} | "
        f"{rows / t_arrow_shuf:,.0f} | {t_arrow_shuf / t_arrow:.1f}× |",
        f"| `Dataset.map(batched=True)` with `len(ids)` | {t_map:.2f} | {rows / t_map:,.0f} | "
        f"**{t_map / t_arrow:,.0f}×** slower |",
        f"| per-row `[len(r['input_ids']) for r in ds]` (timed on {part:,} rows, scaled) | "
        f"{t_row_full:.1f} | {rows / t_row_full:,.0f} | **{t_row_full / t_arrow:,.0f}×** slower |",
    ]


def bench_stream(n: int) -> list[str]:
    import datasets
    import torch

    from bucketloader.solve import compute_boundaries
    from bucketloader.stream import BucketIterable

    lens = real_lengths(n, seed=1)
    samples = [{"input_ids": np.ones(k, np.int32), "label": i % 2} for i, k in enumerate(lens)]
    b = compute_boundaries(lens, 8)
    hf_src = datasets.Dataset.from_dict(
        {"input_ids": [[1] * int(k) for k in lens[: n // 4]], "label": [0] * (n // 4)}
    ).to_iterable_dataset(num_shards=4)

    def chunks(src, size=32):
        it = iter(src)
        return sum(1 for _ in iter(lambda: list(itertools.islice(it, size)), []))

    class _Iter(torch.utils.data.IterableDataset):
        """A list as a torch IterableDataset (what a plain DataLoader batches)."""

        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

    def loader(src, size=32):
        ds = src if isinstance(src, torch.utils.data.IterableDataset) else _Iter(src)
        dl = torch.utils.data.DataLoader(ds, batch_size=size, collate_fn=list)
        return sum(1 for _ in dl)

    def bucketed(src, shuffle=0):
        s = BucketIterable(
            src, length_fn="input_ids", boundaries=b, batch_size=32, shuffle_buffer=shuffle
        )
        return sum(1 for _ in s)

    rows = []
    for name, src, count in (("Python list", samples, n), ("HF IterableDataset", hf_src, n // 4)):
        t_chunks, _ = best(lambda src=src: chunks(src))
        t_plain, _ = best(lambda src=src: loader(src))
        t_b, _ = best(lambda src=src: bucketed(src))
        t_bs, _ = best(lambda src=src: bucketed(src, 1000))
        for label, t in (
            ("`islice` chunks of 32 (no per-sample work)", t_chunks),
            ("plain `DataLoader(batch_size=32)` (reference)", t_plain),
            ("`bucketize`, 8 buckets, B=32", t_b),
            ("`bucketize` + `shuffle_buffer=1000`", t_bs),
        ):
            rows.append(
                f"| {name} ({count:,} samples) | {label} | {count / t:,.0f} | {t / t_plain:.2f}× |"
            )
    return [
        "| source | batching | samples/s | time vs plain DataLoader |",
        "|---|---|---:|---:|",
        *rows,
    ]


def machine() -> str:
    import datasets
    import pyarrow
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    return (
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(load average {load[0]:.1f} at start: a shared machine), torch {torch.__version__}, "
        f"numpy {np.__version__}, datasets {datasets.__version__}, pyarrow {pyarrow.__version__}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--stream", type=int, default=200_000)
    args = p.parse_args()
    import datasets

    datasets.disable_progress_bars()
    info = machine()
    t = time.perf_counter()
    lengths_md = bench_lengths(args.rows)
    stream_md = bench_stream(args.stream)
    text = "\n".join(
        [
            "# HF lengths and streaming throughput",
            "",
            f"Command: `.venv/bin/python benchmarks/hf_lengths.py --rows {args.rows} "
            f"--stream {args.stream}` ({time.perf_counter() - t:.0f} s).",
            "",
            f"Machine: {info}.",
            "",
            "## Per-sample lengths of a memory-mapped dataset",
            "",
            *lengths_md,
            "",
            "## Streaming: samples/s through batching (single process, no collation)",
            "",
            *stream_md,
            "",
        ]
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
