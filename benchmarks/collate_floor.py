"""The memory floor of collating the widest audio bucket: the bytes each side must write, moved
as a few large numpy copies and fills, against the collator and ``pad_sequence`` themselves.

``pad_sequence(batch_first=True)`` writes a ``(B, longest)`` tensor: zeros, then each sample
over its row. ``PadCollator`` writes the planned ``(B, W)`` tensor (each row its sample, then
padding) and a ``(B, W)`` bool mask. Where ``W`` is well above the batch's longest sample (the
widest audio bucket of a ``BucketSampler(batch_size=B)`` plan: 8 buckets over LibriSpeech
train-clean-100 samples / 20, as in ``benchmarks/small_costs.py``), the collator writes more
bytes, and no change inside it can take them away: they are its outputs. This measures that
floor without Python or per-row calls: per side, the same bytes into the same preallocated
buffers in one ``memcpy`` of the samples' data (one contiguous buffer of their total size) and
one or two ``memset``-like fills (numpy ``fill`` / slice assignment), one batch repeated. Beside
it, in the same alternating rounds, the two collators on that batch (fresh output each call).

Times are CPU time of the thread (``time.thread_time``; ``torch.set_num_threads(1)``), each the
median of 3 repeats of the best of 7 alternating rounds (``side_by_side`` of
``benchmarks/small_costs.py``).

Run: ``PYTHONPATH=$PWD python benchmarks/collate_floor.py`` (about a minute). Writes
``benchmarks/results/collate_floor.md``.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from small_costs import planned_batches, side_by_side  # noqa: E402

DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results" / "collate_floor.md"


def widest_batch(lengths: np.ndarray, rows: int) -> tuple[list[int], int, object]:
    """The full batch of the plan's widest planned shape: its lengths, its planned width, and
    the plan's collator."""
    sampler, batches = planned_batches(lengths, rows)
    collate = sampler.collator()
    best = None
    for batch in batches:
        if len(batch) < rows:
            continue
        sizes = [int(lengths[i]) for i in batch]
        width = int(collate([torch.ones(n) for n in sizes])["attention_mask"].shape[1])
        if best is None or width > best[1]:
            best = (sizes, width)
    assert best is not None
    return best[0], best[1], collate


def main() -> None:
    torch.set_num_threads(1)
    started = time.perf_counter()
    audio = np.loadtxt(DATA / "librispeech_train_clean_100_samples.txt", dtype=np.int64) // 20
    lines = [
        "# The memory floor of collating the widest audio bucket (benchmarks/collate_floor.py)",
        "",
        f"Command: `PYTHONPATH=$PWD python benchmarks/collate_floor.py`. "
        f"{platform.machine()}, torch {torch.__version__}, numpy {np.__version__}, a shared "
        "2-core machine. The widest planned shape of `BucketSampler(batch_size=B)` (8 buckets, "
        "LibriSpeech samples / 20, float32), one batch repeated. **Floor**: the bytes each side "
        "writes, into preallocated buffers as one copy of the samples' data and one or two fills "
        "(pad_sequence: zero the `(B, longest)` output, copy the samples; PadCollator: copy the "
        "samples, zero the rest of the planned `(B, W)` output, write the `(B, W)` bool mask). "
        "**Calls**: `torch.nn.utils.rnn.pad_sequence(batch_first=True)` and the plan's "
        "`PadCollator` on the same batch, in the same alternating rounds. Times in us (CPU time "
        "of the thread, the median of 3 repeats of the best of 7 alternating rounds). MB of "
        "output: the padded tensor; the planned tensor plus the mask (pad_sequence also writes "
        "its rows once more over the zeros: the samples' MB).",
        "",
        "| B | planned width W | longest | MB of output: pad_sequence / PadCollator | floor: "
        "pad_sequence us | floor: PadCollator us | floor ratio | pad_sequence us | "
        "PadCollator us | call ratio |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    pad_sequence = torch.nn.utils.rnn.pad_sequence
    for rows in (8, 16, 32):
        sizes, width, collate = widest_batch(audio, rows)
        longest, total = max(sizes), sum(sizes)
        samples = [torch.ones(n, dtype=torch.float32) for n in sizes]
        src = np.ones(total, np.float32)
        padded = np.empty(rows * longest, np.float32)
        planned = np.empty(rows * width, np.float32)
        mask = np.empty(rows * width, bool)

        def floor_pad(padded=padded, src=src, total=total):
            padded.fill(0)
            padded[:total] = src

        def floor_collate(planned=planned, mask=mask, src=src, total=total):
            planned[:total] = src
            planned[total:] = 0
            mask[:total] = True
            mask[total:] = False

        fp, fc, tp, tc = side_by_side(
            floor_pad,
            floor_collate,
            lambda s=samples: pad_sequence(s, batch_first=True),
            lambda s=samples, c=collate: c(s),
            repeats=3,
        )
        mb_pad = rows * longest * 4 / 1e6
        mb_ours = (rows * width * 4 + rows * width) / 1e6
        lines.append(
            f"| {rows} | {width:,} | {longest:,} | {mb_pad:.2f} / {mb_ours:.2f} | "
            f"{fp * 1e6:.1f} | {fc * 1e6:.1f} | {fc / fp:.2f}x | {tp * 1e6:.1f} | "
            f"{tc * 1e6:.1f} | {tc / tp:.2f}x |"
        )
        print(lines[-1], flush=True)
    lines += ["", f"Run time: {time.perf_counter() - started:.0f} s."]
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
