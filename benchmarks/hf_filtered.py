"""``hf.lengths`` over a filtered ``datasets.Dataset`` of 1 M rows: the cost of judging the rows
it holds (NOTE [ The rows a dataset holds ] in ``bucketloader/_arrow.py``).

Run: ``.venv/bin/python benchmarks/hf_filtered.py [--rows 1000000]`` (about a minute on 2
cores). Writes ``benchmarks/results/hf_filtered.md``.

A ``datasets.Dataset`` of ``--rows`` rows is saved and reloaded with ``load_from_disk``
(memory-mapped, as users hold it): ``text``, sentences of 4 characters a token for lengths
resampled from the real Europarl, GSM8K and Multi30k distributions in tests/data; ``title``,
short text (4 to 36 characters, under the 128 bytes past which a held row is text without a
value read); ``n``, the same lengths written as text ("120"); ``length``, the lengths as int64;
``input_ids``, token lists of those lengths. Each column is measured by
``bucketloader.hf.lengths`` on the whole dataset and on ``select`` views of every other row and
of one row in 100 (an indices mapping over the whole table, as ``filter`` leaves it; ``filter``
itself would run a Python function per row). The numbers check is also timed alone, side by
side in one run: over the table, as ``hf.lengths`` judged a filtered dataset before s34
(``numbers_throughout`` of the physical column's chunks), and over the rows held, as it does
now (``held_numbers``). Best of 3 runs each, wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.hf_lengths import real_lengths  # noqa: E402 (Europarl, GSM8K, Multi30k, resampled)

OUT = ROOT / "benchmarks" / "results" / "hf_filtered.md"
WORDS = "the cat sat on a mat and then ran off to see what the dog had found out there "


def build(lengths: np.ndarray, where: Path):
    import datasets
    import pyarrow as pa

    text = _prefixes(lengths * 4)
    title = _prefixes(lengths % 9 * 4 + 4)  # (4 to 36 characters: short text)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(np.arange(offsets[-1], dtype=np.int32) % 30000)
    )
    table = pa.table(
        {
            "text": text,
            "title": title,
            "n": pa.array(lengths.astype(str)),
            "length": pa.array(lengths),
            "input_ids": ids,
        }
    )
    datasets.Dataset(table).save_to_disk(str(where))
    return datasets.load_from_disk(str(where))


def _prefixes(chars: np.ndarray):
    """A large_string array whose row ``i`` is the first ``chars[i]`` characters of the same
    words, built from its bytes in blocks (no Python string per row)."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(chars)]).astype(np.int64)
    data = np.frombuffer((WORDS * (int(chars.max()) // len(WORDS) + 2)).encode(), dtype=np.uint8)
    flat = np.empty(int(offsets[-1]), dtype=np.uint8)
    for i0 in range(0, chars.size, 65_536):
        block = chars[i0 : i0 + 65_536]
        pos = np.arange(int(block.sum())) - np.repeat(
            offsets[i0 : i0 + block.size] - offsets[i0], block
        )
        flat[offsets[i0] : offsets[i0] + pos.size] = data[pos]
    return pa.LargeStringArray.from_buffers(chars.size, pa.py_buffer(offsets), pa.py_buffer(flat))


def best(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            out = fn()
        except ValueError as exc:  # (the numbers column is refused: time the refusal)
            out = exc
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    from bucketloader import hf
    from bucketloader._arrow import held_numbers, numbers_throughout
    from bucketloader.hf.lengths import table_and_indices

    lens = real_lengths(args.rows)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ds = build(lens, Path(tmp) / "ds")
        built = time.perf_counter() - t0
        chunks = table_and_indices(ds)[0].column("n").num_chunks
        views = {
            "whole": ds,
            "every other row": ds.select(range(0, len(ds), 2)),
            "1 row in 100": ds.select(range(0, len(ds), 100)),
        }
        rows = []
        for column in ("text", "title", "n", "length", "input_ids"):
            for view, d in views.items():
                t, out = best(lambda d=d, column=column: hf.lengths(d, column))
                if column == "n":
                    assert isinstance(out, ValueError), out  # refused, filtered or not
                    result = "refused"
                else:
                    _, mapping = table_and_indices(d)
                    want = lens if mapping is None else lens[mapping]
                    want = (
                        want * 4
                        if column == "text"
                        else want % 9 * 4 + 4
                        if column == "title"
                        else want
                    )
                    assert np.array_equal(out, want), column
                    result = f"{len(out):,} lengths"
                rows.append((column, view, result, t))
        checks = []
        for column in ("text", "title", "n"):
            for view, d in list(views.items())[1:]:
                table, mapping = table_and_indices(d)
                arr = table.column(column)
                t_old, old = best(lambda arr=arr: numbers_throughout(arr.chunks))
                t_new, new = best(lambda arr=arr, m=mapping: held_numbers(arr, m))
                assert (old is None) == (new is None), (column, view)
                checks.append((column, view, t_old, t_new))
    lines += [
        "# hf.lengths over a filtered datasets.Dataset",
        "",
        f"Command: `python benchmarks/hf_filtered.py --rows {args.rows}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end; dataset "
        f"built and saved in {built:.1f} s, read back as {chunks:,} chunks a column.",
        "",
        "Views: `select` of every other row and of one row in 100 (an indices mapping over the "
        "whole table, as `filter` leaves it). `n` holds the lengths written as text, so it is "
        "refused on every view: the time is the time to refuse it.",
        "",
        "## `hf.lengths`, best of 3",
        "",
        "| column | view | result | seconds |",
        "|---|---|---|---:|",
    ]
    lines += [f"| {c} | {v} | {r} | {t:.3f} |" for c, v, r, t in rows]
    lines += [
        "",
        "## The numbers check alone: over the table (before) and over the rows held (now)",
        "",
        "| column | view | over the table, s | over the rows held, s |",
        "|---|---|---:|---:|",
    ]
    lines += [f"| {c} | {v} | {a:.3f} | {b:.3f} |" for c, v, a, b in checks]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
