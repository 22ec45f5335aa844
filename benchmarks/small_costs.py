"""Small costs against the strongest baselines, side by side in one run.

1. Collation: ``PadCollator`` (the planned shape, plus ``attention_mask``, ``lengths`` and
   ``sample_mask``) against ``torch.nn.utils.rnn.pad_sequence(batch_first=True)`` (the padded
   tensor only, to the batch's longest sample), on the same batches: every planned shape of a
   ``BucketSampler(batch_size=B)`` plan (8 buckets) for B in 8..512 rows, five kinds of
   samples: int64 token tensors, Python lists of token ids and tokenized dicts of three lists
   (``input_ids``, ``attention_mask``, ``labels`` padded with -100: every field padded by both
   sides) (GSM8K question + answer + 2 tokens; ``pad_sequence`` gets ``torch.tensor(list)`` per
   list, as a collate_fn must),
   float32 audio (LibriSpeech samples / 20) and float32 ``(T, 80)`` fbank features (T = the
   samples / 160: 10 ms frames; 8-64 rows). ``torch.set_num_threads(1)`` as in DataLoader
   workers; per shape, the best of 7 alternating rounds of calls, each about 30 ms of one
   side's own calls (``time.thread_time``: CPU time, so the other processes of a shared machine
   do not count). The issue's comparison
   repeats one batch per shape; beside it, in rounds of their own, both collate a different
   batch of the shape at every call (``rotating_batches``: distinct batches from the plan's
   epochs, fresh samples, cycled; ``rotating_side_by_side``), as a DataLoader epoch does, so
   neither reuses cached samples.
2. Packing plans: ``PackSpec.build`` (what ``PackSampler`` plans with: histogram + solver)
   against careful best-fit decreasings written for this benchmark (documents largest
   first; two in bulk per distinct size: the rooms with a free row as bits of one Python integer,
   so the tightest row that fits is one shift and one lowest-bit): ``bfd_packing`` outputs the
   packing in the plan's form (each pattern's sizes, documents per size and rows; histogram by
   ``np.bincount``), ``bfd_rows`` only the row count (histogram by ``np.unique``), and
   issue 26's own baseline ``bfd_documents`` (per-document BFD with a free-space
   bitset over row capacities, every document's row), from N = 1k to 10M documents:
   long-tailed code-like lengths (lognormal, sigma 1.3, up to 2048 = L), GSM8K question +
   answer + 2 resampled (L = 1024), and the 2k-document files (the first 2,000 GSM8K pairs at
   L = 512, the first 2,000 E. coli proteins + 2 at L = 2,400), and documents uniform in
   (L/4, L/2] (where every BFD row keeps room) at L = 1,024, 16,384 and 131,072 from 1k to
   100k documents, in (L/5, L/2] and (L/8, L/2] at L = 1,024 and 16,384 with 1k and 10k, and
   1k in (L/4, 2L/3] at L = 1,024, with ``search="auto"`` (the default) and ``search="never"``.
   Rows against the L2 lower bound; the median of ``--repeats`` bests of 5 alternating rounds
   (CPU time).
2b. Long rows: the same ``PackSpec.build`` (``"auto"`` and ``"never"``) against a per-document
   best-fit decreasing over a sorted list of rooms (``bfd_sorted``: ``bisect``, no bitset, so
   its cost does not grow with the row length as ``bfd_documents``' does: about 0.85 s for 375
   documents in rows of 2**24) at L = 2**20 + 3 and 2**24, documents uniform in (L/8, L/2] and
   (L/5, L/2] and long-tailed (lognormal, up to L), 375 to 10,000 of them, and 375 in (L/8,
   L/2] with a seed where the default repacks BFD's rows (NOTE [ Repacking long rows in units ]
   in ``bucketloader/pack/_bins.py``), and 100k and 1M documents of distinct sizes in (L/8, L/2]
   and (0, L] at L = 2**24 (one call each).
3. Streams: ``BucketIterable`` (8 buckets, ``batch_size=B``) against a plain
   ``DataLoader(batch_size=B)`` over the same in-memory list, B in 8, 32, 128.

Run: ``PYTHONPATH=$PWD python benchmarks/small_costs.py [--quick] [--repeats 3]`` (about ten
minutes on 2 cores; ``--quick`` stops at 1M documents and 128 rows; ``--only packing`` prints one
section, and with ``--write`` replaces it in the results file (``--only long-rows --write``:
section 2b alone, a few minutes); ``--only collation --kinds audio
--rows 8,16`` narrows that section for a check, which writes nothing: refused without --only
collation or with --write). Writes
``benchmarks/results/small_costs.md``.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import itertools
import platform
import sys
import time
from bisect import bisect_left, insort
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import BucketSampler  # noqa: E402
from bucketloader.pack import PackSpec  # noqa: E402
from bucketloader.pack._bins import lower_bound, solver_version  # noqa: E402

DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results" / "small_costs.md"
ROWS = (8, 16, 32, 64, 128, 256, 512)


#: CPU time of this thread: on a shared machine wall time also counts the time other processes
#: hold the cores (every timed call here runs on one thread: torch.set_num_threads(1)).
clock = time.thread_time


def best_of(fn, rounds: int = 7, calls: int = 1) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = clock()
        for _ in range(calls):
            fn()
        best = min(best, (clock() - t) / calls)
    return best


def timed(fn) -> tuple[float, object]:
    """One call of ``fn``: its CPU time and its result."""
    t = clock()
    out = fn()
    return clock() - t, out


def calls_for(fns, budget_s: float) -> list[int]:
    """Calls per round of each of ``fns`` (already called once): about ``budget_s`` of its own
    calls, by the time of one call, at least one and at most 2,000.

    Each side gets its own count, so every round lasts about ``budget_s`` whichever side runs it:
    until session 14 every side made the first side's count (the collator's), so a baseline 15x
    slower (``pad_sequence`` on lists of ints) ran rounds 15x longer, most of this section's
    run time, for the same best-of-rounds statistic."""
    counts = []
    for f in fns:
        t = clock()
        f()
        counts.append(max(1, min(2000, int(budget_s / max(clock() - t, 1e-7)))))
    return counts


def side_by_side(*fns, budget_s: float = 0.03, repeats: int = 1, rounds: int = 7) -> list[float]:
    """Per-call time of each of ``fns``: the best of ``rounds`` alternating rounds (each about
    ``budget_s`` of that fn's calls, at least one call: :func:`calls_for`), and with
    ``repeats`` > 1 the median of that over ``repeats`` such measurements (each fn's own
    median, so ratios of the results compare medians)."""
    for f in fns:
        f()
    calls = calls_for(fns, budget_s)
    runs = []
    for _ in range(repeats):
        best = [float("inf")] * len(fns)
        for _ in range(rounds):
            for i, f in enumerate(fns):
                best[i] = min(best[i], best_of(f, 1, calls[i]))
        runs.append(best)
    return [float(np.median(col)) for col in zip(*runs, strict=True)]


#: Pad value of each field of the tokenized dict samples (labels: CrossEntropyLoss's ignore_index).
PADS = {"input_ids": 0, "attention_mask": 0, "labels": -100}


def pad_sequences(samples: list) -> torch.Tensor | dict[str, torch.Tensor]:
    """``pad_sequence(batch_first=True)``: of the tensors, or of each field of dict samples of token
    lists, after a ``torch.tensor`` per list (as a collate_fn must)."""
    if isinstance(samples[0], dict):
        return {
            k: pad_sequence(
                [torch.tensor(x[k]) for x in samples], batch_first=True, padding_value=PADS[k]
            )
            for k in samples[0]
        }
    return pad_sequence(samples, batch_first=True)


def with_masks(padded: torch.Tensor | dict, sizes: list[int]) -> tuple | dict:
    """What a collate_fn adds to ``pad_sequence`` for the same outputs: lengths and the mask (dict
    samples with a field ``attention_mask``: the lengths only, that field is the mask)."""
    lengths = torch.tensor(sizes)
    if isinstance(padded, dict):
        out = dict(padded, lengths=lengths)
        if "attention_mask" not in out:
            first = next(iter(padded.values()))
            out["attention_mask"] = torch.arange(first.shape[1]) < lengths[:, None]
        return out
    mask = torch.arange(padded.shape[1]) < lengths[:, None]
    return padded, lengths, mask


def numpy_rows(samples: list, sizes: list[int]) -> tuple | dict:
    """The other hand-written collate_fn for the same outputs as :func:`with_masks`: numpy zeros
    (or the field's pad value) of the batch's longest sample, one slice copy per row (a numpy
    slice copy costs less than a torch one: on 8 short rows this beats ``pad_sequence``; numpy
    converts each list of ints in the copy), the lengths and the mask (dict samples: per field,
    and the lengths; the mask unless a field is one)."""
    first = samples[0]
    width = max(sizes)
    lengths = np.array(sizes)
    if isinstance(first, dict):  # token lists
        out = {}
        for key in first:
            pad = PADS[key]
            rows = np.zeros((len(samples), width), np.int64)
            if pad:
                rows.fill(pad)
            for i, (x, n) in enumerate(zip(samples, sizes, strict=True)):
                rows[i, :n] = x[key]
            out[key] = torch.from_numpy(rows)
        out["lengths"] = torch.from_numpy(lengths)
        if "attention_mask" not in out:
            out["attention_mask"] = torch.from_numpy(np.arange(width) < lengths[:, None])
        return out
    padded = np.zeros((len(samples), width, *first.shape[1:]), first.numpy().dtype)
    for i, (x, n) in enumerate(zip(samples, sizes, strict=True)):
        padded[i, :n] = x.numpy()
    mask = np.arange(width) < lengths[:, None]
    return torch.from_numpy(padded), torch.from_numpy(lengths), torch.from_numpy(mask)


def tokenized(n: int) -> dict[str, list[int]]:
    """A tokenizer's sample of ``n`` tokens, as ``datasets`` gives it (lists of ints): ids, a
    mask of ones, and the labels (here the ids; a prompt's would be -100)."""
    ids = list(range(n))
    return {"input_ids": ids, "attention_mask": [1] * n, "labels": list(ids)}


def pad_to(x: torch.Tensor | dict, width: int, rows: int) -> torch.Tensor | dict:
    """``x`` (``pad_sequence``'s output, or a dict of them) padded to ``(rows, width)``
    (``F.pad``)."""
    if isinstance(x, dict):
        return {k: pad_to(v, width, rows) for k, v in x.items()}
    return torch.nn.functional.pad(x, (0, width - x.shape[1], 0, rows - x.shape[0]))


def planned_batches(lengths: np.ndarray, rows: int) -> tuple[BucketSampler, list[list[int]]]:
    """One batch of every planned shape (the first full batch of each bucket)."""
    s = BucketSampler(lengths, num_buckets=8, batch_size=rows, seed=0)
    cell = s.spec.cell_of_sample
    seen: dict[int, list[int]] = {}
    for batch in s:
        c = int(cell[batch[0]])
        if c not in seen and len(batch) == rows:
            seen[c] = batch
    for batch in s:  # buckets smaller than one batch: their only (padded) batch
        seen.setdefault(int(cell[batch[0]]), batch)
    return s, [seen[c] for c in sorted(seen)]


#: Rotating batches: per planned shape, at least this many bytes of distinct samples (
#: 32 times a core's 512 KiB L2 cache here, half the shared L3), at least ROTATE_MIN batches,
#: at most ROTATE_MAX.
ROTATE_BYTES = 16 << 20
ROTATE_MIN, ROTATE_MAX = 4, 64


def rotating_batches(
    sampler: BucketSampler, batches: list[list[int]], bytes_of, epochs: int = 64
) -> dict[int, list[list[int]]]:
    """Per planned cell of the full ``batches`` (one each), distinct batches of that cell and
    size from the sampler's epochs, as a DataLoader's epochs give them (that batch first): enough
    that their samples (``bytes_of(batch)``) fill ``ROTATE_BYTES``, at least ``ROTATE_MIN``,
    at most ``ROTATE_MAX`` (fewer only where the epochs hold fewer such batches)."""
    cell = sampler.spec.cell_of_sample
    found = {int(cell[b[0]]): [b] for b in batches}
    want = {
        int(cell[b[0]]): min(ROTATE_MAX, max(ROTATE_MIN, -(-ROTATE_BYTES // max(bytes_of(b), 1))))
        for b in batches
    }
    rows = {c: len(found[c][0]) for c in found}
    seen = {tuple(b) for b in batches}
    todo = {c for c in found if len(found[c]) < want[c]}
    for epoch in range(1, epochs):
        if not todo:
            break
        sampler.set_epoch(epoch)
        for b in sampler:
            c = int(cell[b[0]])
            if c in todo and len(b) == rows[c] and tuple(b) not in seen:
                seen.add(tuple(b))
                found[c].append(b)
                if len(found[c]) == want[c]:
                    todo.discard(c)
    sampler.set_epoch(0)
    return found


def rotating_side_by_side(
    ours, theirs, passes: int, repeats: int, budget_s: float = 0.03, rounds: int = 7
) -> tuple[float, float]:
    """:func:`side_by_side` for two collators that cycle over the same pool of batches.

    Both first make ``passes`` untimed calls (a pass over the pool), and they run in rounds of
    their own, in an order flipped at every round. The side that runs first after a pause
    finds the pool gone cold and warms it for the other: measured in session 8 (audio, 8 rows),
    the first ~200 calls of the first side after the repeated-batch rounds ran 1.3-2.3x
    slower, and which side paid moved the ratio by 0.1-0.2 (the collator always went first
    in session 7's benchmark, ``pad_sequence`` in its side-by-side script)."""
    fns = (ours, theirs)
    for _ in range(passes):
        ours()
        theirs()
    calls = calls_for(fns, budget_s)
    runs = []
    for _ in range(repeats):
        best = [float("inf")] * 2
        for r in range(rounds):
            for i in (0, 1) if r % 2 == 0 else (1, 0):
                best[i] = min(best[i], best_of(fns[i], 1, calls[i]))
        runs.append(best)
    mine, yours = np.median(np.array(runs), axis=0)
    return float(mine), float(yours)


def collation(
    quick: bool, repeats: int, only_kinds: str | None = None, only_rows: str | None = None
) -> list[str]:
    torch.set_num_threads(1)
    gsm = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64).sum(axis=1) + 2
    audio = np.loadtxt(DATA / "librispeech_train_clean_100_samples.txt", dtype=np.int64) // 20
    frames = audio // 8  # LibriSpeech samples / 160: 10 ms frames at 16 kHz
    kinds = {  # name: (lengths, make a sample of length n, largest rows measured, bytes/length)
        "int64 tokens (tensors)": (gsm, lambda n: torch.arange(n, dtype=torch.int64), 512, 8),
        "token lists (dict samples)": (gsm, lambda n: {"input_ids": list(range(n))}, 512, 36),
        "tokenized dicts (3 list fields)": (gsm, tokenized, 512, 108),
        "float32 audio (tensors)": (audio, lambda n: torch.ones(n, dtype=torch.float32), 512, 4),
        "float32 fbank [T, 80] (tensors)": (frames, lambda n: torch.ones(n, 80), 64, 320),
    }
    lines = [
        "## 1. PadCollator vs `pad_sequence`",
        "",
        "Fbank features are `(T, 80)` float32 tensors (`T` = LibriSpeech samples / 160: 10 ms "
        "frames at 16 kHz), measured up to 64 rows (a batch of 64 x 2,452 x 80 floats is 50 MB). "
        "Tokenized dicts are a tokenizer's samples as `datasets` gives them: three lists of ints "
        "(`input_ids`, `attention_mask` of ones, `labels`), padded with 0, 0 and -100 by every "
        "side (`pad_sequence` per field after a `torch.tensor` per list, `numpy_rows` per field, "
        "and the lengths; their mask is the padded `attention_mask` field). "
        "Per planned shape, time per batch of each, and the ratio PadCollator / pad_sequence "
        "(below 1: PadCollator is faster although it writes the planned shape, the mask, the "
        "lengths and the sample mask). `worst` is the largest ratio over the plan's shapes, "
        "with that shape's planned width. `worst vs the best hand-written collate_fn` compares "
        "with the faster, per shape, of two collate_fns that return the same outputs (padded "
        "to the batch's longest sample, not to the planned width): `pad_sequence` plus "
        "`torch.tensor(lengths)` and an `arange < lengths` mask, and numpy zeros with one "
        "slice copy per row plus the lengths and the mask in numpy (`numpy_rows`); the next "
        "column counts the shapes where `numpy_rows` beat bare `pad_sequence`. These columns are "
        "over the shapes whose batch is full; a bucket smaller than one batch has only a partial "
        "batch, whose planned shape PadCollator must write in full (the filler rows) while "
        "`pad_sequence` writes the real rows only: those are listed apart, with their real / "
        "planned rows, the ratio to bare `pad_sequence` and, in parentheses, to `pad_sequence` "
        "padded to the planned shape (`F.pad`), what a static-shape loop needs (under "
        "`max_tokens` even batches plan such a bucket at its own size). Times are CPU time of "
        "the one thread (`time.thread_time`), so other processes on the machine do not count; "
        f"each time is the median over {repeats} repeats of the best of 7 alternating rounds "
        "(each about 30 ms of that side's own calls, at least one).",
        "",
        "The issue's comparison repeats one batch per shape: every call collates the same "
        "samples, so whatever of them, and of the last output, is still in the CPU caches is "
        "reused, which favours the side whose samples and output together fit a core's L2 "
        "cache. The two `rotating` columns time the same two collators on a different batch of "
        "the same planned shape at every call (distinct batches of that shape from the plan's "
        f"epochs, fresh samples, cycled: at least {ROTATE_BYTES >> 20} MiB of samples and "
        f"{ROTATE_MIN} batches per shape where the epochs hold them, at most {ROTATE_MAX}), as "
        "a DataLoader epoch gives them, so neither side finds the previous call's samples in "
        "cache. They run in rounds of their own, after one untimed pass of each over the pool, "
        "in an order flipped at every round: the side that runs first after a pause finds the "
        "pool, which both read, gone cold and warms it for the other (measured: its first ~200 "
        "calls 1.3-2.3x slower, 0.1-0.2 on the ratio; until session 8 the collator always ran "
        "first).",
        "",
        "| samples | rows B | shapes | PadCollator us (median shape) | pad_sequence us "
        "(median shape) | ratio median | ratio worst (its width) | worst vs the best "
        "hand-written collate_fn + lengths + mask | shapes where numpy rows beat pad_sequence "
        "| rotating: ratio median | rotating: ratio worst (its width) | partial batches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    worst_all = worst_rot = worst_same = 0.0
    for kind, (lengths, make, most, unit) in kinds.items():
        if only_kinds is not None and not any(w in kind for w in only_kinds.split(",")):
            continue
        for rows in ROWS:
            if (quick and rows > 128) or rows > most:
                continue
            if only_rows is not None and str(rows) not in only_rows.split(","):
                continue
            sampler, batches = planned_batches(lengths, rows)
            collate = sampler.collator(pad_value=PADS if "tokenized" in kind else 0)
            pools = rotating_batches(  # (one pass over the epochs for every cell)
                sampler,
                [b for b in batches if len(b) == rows],
                lambda b, lengths=lengths, unit=unit: int(lengths[b].sum()) * unit,
            )
            results = []
            for batch in batches:
                samples = [make(int(lengths[i])) for i in batch]
                sizes = [int(lengths[i]) for i in batch]

                def base(samples=samples, base_of=pad_sequences):
                    return base_of(samples)

                if len(batch) < rows:  # the planned shape: pad_sequence, then padded to it
                    width = int(collate(samples)["attention_mask"].shape[1])

                    def planned(b=base, w=width, r=rows):
                        return pad_to(b(), w, r)

                    ours, theirs, full = side_by_side(
                        lambda s=samples, c=collate: c(s), base, planned, repeats=repeats
                    )
                    by_rows = float("nan")
                    rot = float("nan")  # (not rotated: one such batch per epoch)
                else:  # and rotating: the next batch of the shape at every call
                    cell = int(sampler.spec.cell_of_sample[batch[0]])
                    pool = [[make(int(lengths[i])) for i in b] for b in pools.pop(cell)]
                    for s in pool:  # every length's cell memoised, as in a long epoch
                        collate(s)
                    ours, theirs, full, by_rows = side_by_side(
                        lambda s=samples, c=collate: c(s),
                        base,
                        lambda b=base, z=sizes: with_masks(b(), z),
                        lambda s=samples, z=sizes: numpy_rows(s, z),
                        repeats=repeats,
                    )
                    full = min(full, by_rows)  # the stronger hand-written collate_fn
                    mine, yours = itertools.cycle(pool), itertools.cycle(pool)
                    ours_rot, theirs_rot = rotating_side_by_side(
                        lambda c=collate, it=mine: c(next(it)),
                        lambda b=pad_sequences, it=yours: b(next(it)),
                        passes=len(pool),
                        repeats=repeats,
                    )
                    del pool, mine, yours
                    rot = ours_rot / theirs_rot
                width = int(collate(samples)["attention_mask"].shape[1])
                results.append(
                    (ours / theirs, ours, theirs, ours / full, len(batch), rot, width, by_rows)
                )
            whole = sorted(r for r in results if r[4] == rows)
            part = [r for r in results if r[4] < rows]
            med = whole[len(whole) // 2]
            worst = whole[-1]
            worst_all = max(worst_all, worst[0])
            worst_full = max(r[3] for r in whole)
            worst_same = max(worst_same, worst_full)
            rots = sorted((r[5], r[6]) for r in whole)
            beaten = sum(r[7] < r[2] for r in whole)  # shapes where numpy rows beat pad_sequence
            worst_rot = max(worst_rot, rots[-1][0])
            partial = (
                "; ".join(f"{r[4]}/{rows} rows: {r[0]:.2f}x ({r[3]:.2f}x)" for r in part) or "-"
            )
            lines.append(
                f"| {kind} | {rows} | {len(whole)} | {med[1] * 1e6:.1f} | {med[2] * 1e6:.1f} | "
                f"{med[0]:.2f}x | {worst[0]:.2f}x ({worst[6]:,}) | {worst_full:.2f}x | {beaten} | "
                f"{rots[len(rots) // 2][0]:.2f}x | {rots[-1][0]:.2f}x ({rots[-1][1]:,}) | "
                f"{partial} |"
            )
            print(
                kind,
                rows,
                f"median {med[0]:.2f}x worst {worst[0]:.2f}x (width {worst[6]}); rotating median "
                f"{rots[len(rots) // 2][0]:.2f}x worst {rots[-1][0]:.2f}x (width {rots[-1][1]})",
                flush=True,
            )
    lines += [
        "",
        f"Largest ratio over every kind, size and full-batch shape: **{worst_all:.2f}x** "
        f"(one batch repeated); **{worst_rot:.2f}x** with rotating batches; "
        f"{worst_same:.2f}x against the best hand-written collate_fn for the same outputs.",
        "",
    ]
    return lines


def bfd_rows(lengths: np.ndarray, row_length: int) -> int:
    """The baseline: best-fit decreasing, in bulk per distinct size (rows only)."""
    sizes, counts = np.unique(lengths, return_counts=True)
    free: dict[int, int] = {}  # room -> rows with that room
    bits = 0
    rows = 0
    for s, c in zip(sizes[::-1].tolist(), counts[::-1].tolist(), strict=True):
        while c:
            above = bits >> s
            if not above:
                q = row_length // s
                full, rest = divmod(c, q)
                rows += full + (rest > 0)
                for room, n in ((row_length - q * s, full), (row_length - rest * s, rest > 0)):
                    if n:
                        free[room] = free.get(room, 0) + n
                        bits |= 1 << room
                break
            room = s + (above & -above).bit_length() - 1
            q = room // s
            k = min(free[room], c // q)
            moved = {room - q * s: k} if k else {}
            c -= k * q
            left = free[room] - k
            if 0 < c < q and left:
                moved[room - c * s] = moved.get(room - c * s, 0) + 1
                left -= 1
                c = 0
            if left:
                free[room] = left
            else:
                del free[room]
                bits &= ~(1 << room)
            for r, n in moved.items():
                free[r] = free.get(r, 0) + n
                bits |= 1 << r
    return rows


def bfd_packing(lengths: np.ndarray, row_length: int) -> tuple[np.ndarray, ...]:
    """The baseline that packs: best-fit decreasing in bulk as :func:`bfd_rows`, keeping each
    row's contents, and returning them in the form of ``PackSpec.build``'s plan (its
    ``patterns``): ``(reps, offsets, items, mult)``, pattern ``p`` = ``reps[p]`` rows holding
    ``mult[j]`` documents of ``items[j]`` tokens for ``j`` in ``offsets[p]:offsets[p + 1]``.

    Written as a careful user would: the histogram by ``np.bincount`` (no sort; the lengths
    are at most ``row_length``), the rows with the same contents and room as one group
    ``[contents, rows]`` (contents a flat tuple ``(size, mult, size, mult, ...)``), the groups
    per room in a dict and the rooms with a group as bits of one Python integer, one group per
    step (all its rows take ``room // s`` documents of size ``s`` at once), and the contents
    flattened into arrays once at the end.
    """
    counts = np.bincount(lengths)
    sizes = np.flatnonzero(counts)[::-1]
    groups: dict[int, list[list]] = {}  # room -> groups [contents, rows] with that room
    done: list[list] = []  # groups whose rows are full
    bits = 0
    for s, c in zip(sizes.tolist(), counts[sizes].tolist(), strict=True):
        while c:
            above = bits >> s
            if above:  # the tightest open rows that hold s
                room = s + (above & -above).bit_length() - 1
                stack = groups[room]
                group = stack[-1]
                contents, n = group
                q = room // s
                k = c // q
                if k > n:
                    k = n
                elif not k:  # fewer than q documents left: one more row takes them
                    q, k = c, 1
                group[1] = n = n - k
                if not n:
                    stack.pop()
                    if not stack:
                        del groups[room]
                        bits ^= 1 << room
            else:  # new rows
                contents, room = (), row_length
                q = room // s
                k = c // q
                if not k:
                    q, k = c, 1
            c -= k * q
            new = [(*contents, s, q), k]
            left = room - q * s
            if left:
                bits = _open(groups, bits, left, new)
            else:
                done.append(new)
    live = done + [g for stack in groups.values() for g in stack]
    flat = [x for contents, _ in live for x in contents]
    pairs = np.array(flat, dtype=np.int64).reshape(-1, 2)
    offsets = np.zeros(len(live) + 1, dtype=np.int64)
    np.cumsum([len(contents) // 2 for contents, _ in live], out=offsets[1:])
    reps = np.array([n for _, n in live], dtype=np.int64)
    return reps, offsets, pairs[:, 0], pairs[:, 1]


def _open(stacks: dict, bits: int, room: int, item: object) -> int:
    """Push ``item`` on the stack of open rows with ``room`` left; the room bits after it."""
    stack = stacks.get(room)
    if stack is None:
        stacks[room] = [item]
        return bits | 1 << room
    stack.append(item)
    return bits


def bfd_documents(lengths: np.ndarray, row_length: int) -> tuple[np.ndarray, int]:
    """Issue 26's own baseline: per-document best-fit decreasing with a free-space bitset over
    row capacities. The documents largest first (a stable ``np.argsort``), each into the open
    row with the least room that holds it, else a new row; the open rows in a dict of stacks
    per room, and the rooms with an open row as the bits of one Python integer, so the
    tightest room that holds ``s`` is ``s`` plus the lowest set bit of ``bits >> s``. Returns
    the row of every document and the row count (a per-document assignment, which the bulk
    baselines above do not make)."""
    order = np.argsort(-lengths, kind="stable")
    row_of = np.empty(lengths.size, dtype=np.int64)
    by_room: dict[int, list[int]] = {}  # room -> open rows with that room
    bits = 0
    rows = 0
    placed = []
    for s in lengths[order].tolist():
        above = bits >> s
        if above:  # the tightest open row that holds s
            room = s + (above & -above).bit_length() - 1
            stack = by_room[room]
            row = stack.pop()
            if not stack:
                del by_room[room]
                bits ^= 1 << room
        else:  # a new row
            row, room = rows, row_length
            rows += 1
        placed.append(row)
        left = room - s
        if left:
            bits = _open(by_room, bits, left, row)
    row_of[order] = placed
    return row_of, rows


def plan_builds(lengths: np.ndarray, row_length: int) -> dict:
    """``PackSpec.build`` of ``lengths`` with ``search="auto"`` and ``"never"``, as calls."""
    return {
        s: functools.partial(PackSpec.build, lengths, row_length=row_length, batch_size=8, search=s)
        for s in ("auto", "never")
    }


def bfd_sorted(lengths: np.ndarray, row_length: int) -> int:
    """Per-document best-fit decreasing over a sorted list of the open rows' rooms (``bisect``
    for the tightest room that holds each document, largest first): its cost grows with the
    documents and the open rows, not with the row length. Returns the row count."""
    rooms: list[int] = []
    rows = 0
    for s in sorted(lengths.tolist(), reverse=True):
        i = bisect_left(rooms, s)
        if i < len(rooms):
            left = rooms.pop(i) - s
        else:
            rows += 1
            left = row_length - s
        if left:
            insort(rooms, left)
    return rows


def bfd_sorted_documents(lengths: np.ndarray, row_length: int) -> tuple[np.ndarray, int]:
    """:func:`bfd_sorted` returning what a packing needs, as :func:`bfd_documents` does: every
    document's row. Each open row's key is its room and its row id in one integer (``room <<
    shift | row``), so ``bisect`` finds the tightest room that holds ``s`` and its row at once
    (of equal rooms, the row opened first); the documents largest first by a stable
    ``np.argsort``."""
    order = np.argsort(-lengths, kind="stable")
    shift = max(int(lengths.size).bit_length(), 1)
    mask = (1 << shift) - 1
    keys: list[int] = []
    placed: list[int] = []
    put = placed.append
    rows = 0
    for s in lengths[order].tolist():
        i = bisect_left(keys, s << shift)
        if i < len(keys):
            key = keys.pop(i)
            row, left = key & mask, (key >> shift) - s
        else:
            row, left = rows, row_length - s
            rows += 1
        put(row)
        if left:
            insort(keys, left << shift | row)
    row_of = np.empty(lengths.size, dtype=np.int64)
    row_of[order] = placed
    return row_of, rows


def long_rows(repeats: int) -> list[str]:
    """Section 2b: the plan against a per-document BFD whose cost does not grow with L."""
    torch.set_num_threads(1)
    cases = []
    for length in (2**20 + 3, 2**24):
        for n in (375, 1_000, 2_000, 10_000):
            rng = np.random.default_rng(n)
            for low in (8, 5):
                docs = rng.integers(length // low + 1, length // 2 + 1, n)
                cases.append((f"uniform in (L/{low}, L/2], N={n:,}", docs, length))
            tail = rng.lognormal(np.log(length) - 2.5, 1.3, n).astype(np.int64) + 1
            cases.append((f"lognormal up to L, N={n:,}", np.minimum(tail, length), length))
        docs = np.random.default_rng(4).integers(length // 8 + 1, length // 2 + 1, 375)
        cases.append(("uniform in (L/8, L/2], N=375, seed 4", docs, length))
    # every document its own size (issue 26: best-fit decreasing at 1M documents), one race
    # of one call each (BFD sorted's insort into ~300k rooms: seconds a call)
    length = 2**24
    for n in (100_000, 1_000_000):
        rng = np.random.default_rng(n)
        for label, low, high in (("(L/8, L/2]", length // 8, length // 2), ("(0, L]", 0, length)):
            docs = rng.choice(high - low, n, replace=False) + low + 1
            cases.append((f"distinct sizes in {label}, N={n:,}", docs, length))
    lines = [
        "## 2b. Long rows: PackSampler's plan vs a per-document best-fit decreasing",
        "",
        '`PackSpec.build` with the default `search="auto"` and with `search="never"` '
        "(BFD in bulk) against **BFD sorted** (`bfd_sorted`: per-document best-fit decreasing "
        "over a sorted list of the open rows' rooms, `bisect` for the tightest that holds each "
        "document, largest first; no bitset, so its cost does not grow with the row length, "
        "where section 2's per-document baseline shifts a bitset of L bits per document: about "
        "0.85 s for 375 documents at L = 2**24; it returns the row count only, so it does less "
        "work than any packing) and **BFD sorted, per document** (`bfd_sorted_documents`: the "
        "same loop returning every document's row, as section 2's per-document baseline does, "
        "each open row's key its room and its row id in one integer). Rows longer than 16,384 "
        "tokens are repacked in units of L // 1024 tokens (NOTE [ Repacking long rows in "
        "units ]; `version` is the solver version of the default's plan, 12 where that "
        "search ran). Times: the median "
        f"over {repeats} repeats of the best of 5 alternating rounds of the four, each round "
        "about 10 ms of calls (at least one; CPU time); the ratios are time / a baseline's "
        "from the same race. `never`'s rows are both baselines' (asserted). The last four "
        "cases: every document its own size (drawn without replacement), 100k and 1M "
        "documents, one call each, no race (BFD sorted inserts into a list of up to some 300k "
        "rooms: seconds a call).",
        "",
        "| lengths | L | bound L2 | rows auto | rows never = BFD | version | auto ms | never ms | "
        "BFD sorted ms | BFD sorted, per document ms | auto / BFD sorted | never / BFD sorted | "
        "auto / per document | never / per document |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = {(side, base, n): 0.0 for side in ("auto", "never") for base in (0, 1) for n in (0, 1)}
    for label, lengths, row_length in cases:
        builds = plan_builds(lengths, row_length)
        base = functools.partial(bfd_sorted, lengths, row_length)
        each = functools.partial(bfd_sorted_documents, lengths, row_length)
        if lengths.size > 10_000:  # (one call each: BFD sorted takes seconds)
            (auto_t, auto), (never_t, never), (base_t, rows), (each_t, (_, each_rows)) = (
                timed(f) for f in (builds["auto"], builds["never"], base, each)
            )
        else:
            auto_t, never_t, base_t, each_t = side_by_side(
                builds["auto"],
                builds["never"],
                base,
                each,
                budget_s=0.01,
                repeats=repeats,
                rounds=5,
            )
            auto, never, rows, (_, each_rows) = builds["auto"](), builds["never"](), base(), each()
        assert never.num_rows == rows == each_rows and auto.num_rows <= rows, (label, row_length)
        flags = list(inspect.signature(solver_version).parameters)[1:]  # (searched, ...)
        version = solver_version(auto.row_lengths, **{f: getattr(auto.patterns, f) for f in flags})
        sizes, counts = np.unique(lengths, return_counts=True)
        bound = lower_bound(sizes, counts, row_length)[1]
        for side, t in (("auto", auto_t), ("never", never_t)):
            for b, bt in enumerate((base_t, each_t)):
                for key in {(side, b, 0), (side, b, int(lengths.size >= 1_000))}:
                    worst[key] = max(worst[key], t / bt)
        lines.append(
            f"| {label} | {row_length:,} | {bound:,} | {auto.num_rows:,} | {rows:,} | "
            f"{version} | {auto_t * 1e3:.3g} | {never_t * 1e3:.3g} | {base_t * 1e3:.3g} | "
            f"{each_t * 1e3:.3g} | {auto_t / base_t:.2f}x | {never_t / base_t:.2f}x | "
            f"{auto_t / each_t:.2f}x | {never_t / each_t:.2f}x |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        "Largest time ratio, every case (from 1,000 documents, issue 26's range, in brackets): "
        f'`search="never"` / BFD sorted **{worst["never", 0, 0]:.2f}x** '
        f"({worst['never', 0, 1]:.2f}x), / BFD sorted per document **{worst['never', 1, 0]:.2f}x** "
        f'({worst["never", 1, 1]:.2f}x); `search="auto"` / BFD sorted '
        f"**{worst['auto', 0, 0]:.2f}x** ({worst['auto', 0, 1]:.2f}x), / per document "
        f"**{worst['auto', 1, 0]:.2f}x** ({worst['auto', 1, 1]:.2f}x); rows: `never` = BFD's, "
        "`auto` <= BFD's everywhere (asserted).",
        "",
    ]
    return lines


def packing(quick: bool, repeats: int) -> list[str]:
    torch.set_num_threads(1)  # (thread_time would not see work on torch's intra-op threads)
    rng = np.random.default_rng(0)
    gsm = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64).sum(axis=1) + 2
    ecoli = np.loadtxt(DATA / "ecoli_k12_proteome_residues.txt", dtype=np.int64) + 2
    ns = (1_000, 10_000, 100_000, 1_000_000) + (() if quick else (10_000_000,))
    cases = []
    for n in ns:
        code = np.minimum(rng.lognormal(5.5, 1.3, n).astype(np.int64) + 1, 2048)
        cases.append((f"code-like lognormal, N={n:,}", code, 2048))
    for n in ns:
        cases.append((f"GSM8K q+a+2 resampled, N={n:,}", rng.choice(gsm, n), 1024))
    cases.append(("GSM8K first 2,000 (L=512)", gsm[:2000], 512))
    cases.append(("E. coli first 2,000 (L=2400)", ecoli[:2000], 2400))
    # where every BFD row keeps room (s7-rev2): no plan can keep the 0.5-point promise there
    hard = set()
    for length in (1024, 16384, 131072):
        for n in (1_000, 10_000, 100_000):
            label = f"uniform in (L/4, L/2], N={n:,}"
            hard.add((label, length))
            docs = np.random.default_rng(n).integers(length // 4 + 1, length // 2 + 1, n)
            cases.append((label, docs, length))
    # issue 26's slow regimes for the default's repack (s8-pack2, s9-pack): shorter documents,
    # where a row holds up to four or seven, and long documents fewer than the short ones
    for low, top in ((5, 2), (8, 2)):
        for length in (1024, 16384):
            for n in (1_000, 10_000):
                label = f"uniform in (L/{low}, L/{top}], N={n:,}"
                hard.add((label, length))
                docs = np.random.default_rng(n).integers(length // low + 1, length // top + 1, n)
                cases.append((label, docs, length))
    label = "uniform in (L/4, 2L/3], N=1,000"
    hard.add((label, 1024))
    cases.append((label, np.random.default_rng(1000).integers(257, 683, 1000), 1024))
    lines = [
        "## 2. PackSampler's plan vs a careful best-fit decreasing",
        "",
        "`PackSpec.build` (validation, histogram and solver: what `PackSampler` plans with) vs "
        "two baselines on the same lengths: **BFD packing** (`bfd_packing`: best-fit decreasing "
        "in bulk that outputs the packing in the plan's form, each pattern's sizes, documents "
        "per size and rows, with the histogram by `np.bincount`) and **BFD count** (`bfd_rows`: "
        "the same loop returning the row count only, histogram by `np.unique`; no packing, so "
        "it does less work than any plan); and issue 26's own baseline, "
        "**BFD per document** (`bfd_documents`: per-document best-fit decreasing with a "
        "free-space bitset over row capacities, the documents largest first by `np.argsort`, "
        "returning every document's row; seconds a call at 10M documents, its column below). "
        '`PackSpec.build` runs with the default `search="auto"` '
        "(where BFD pads more than 0.5 points above the bound, the search repacks BFD's rows "
        "with the most room: towards the L2 bound, or towards that 0.5-point promise where the "
        "bound would take more than one of BFD's patterns per 40 documents; where every "
        "document is in (L/4, L/2], rows of at most three documents instead, BFD's rows only "
        "counted; where the thirds bound rises above ceil(tokens / L), as in (L/5, L/2], the "
        "same rows of three, BFD's plan replaced by a floor on its rows; where that floor "
        "proves BFD misses the promise and no bound rises above ceil(tokens / L), as in (L/8, "
        "L/2], rows the documents fill exactly, the others by BFD and its repack, kept where "
        "they keep the promise; where a lower bound "
        "proves the promise out of reach otherwise, the repack stops at a counted cap, about "
        "0.2 ms plus 0.3 of a per-document BFD's estimated cost) "
        'and with `search="never"` (best-fit decreasing alone); rows against the L2 lower bound. '
        f"Times: per method the median over {repeats} repeats of the best of 5 rounds, "
        "each round about 10 ms of calls (at least one; CPU time), in races of two: `never` "
        "against BFD packing, `never` against BFD count (apart: in one race of three, the "
        "function right after BFD count, whose `np.unique` pushes the lengths out of cache, "
        "paid for that every round), `auto` against BFD packing (the search's time sets its "
        "rounds' calls); BFD per document races `never` and `auto` (best of 3 rounds, of "
        "10 ms of calls up to 10k documents, one call above). "
        "The ratios are time / a baseline's time from the same race. `never`'s patterns are "
        "the same as BFD packing's (asserted, as multisets of rows), and its rows the same as "
        "BFD per document's (asserted, with every row within L).",
        "",
        "| lengths | L | bound L2 | rows auto | rows never = BFD | auto ms | never ms | "
        "BFD packing ms | BFD count ms | BFD per document ms | never / BFD packing | "
        "never / BFD count | never / BFD per document | auto / BFD packing | "
        "auto / BFD per document |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = {"auto": 0.0, "never": 0.0, "count": 0.0, "doc": 0.0, "auto_doc": 0.0}
    for label, lengths, row_length in cases:
        builds = plan_builds(lengths, row_length)
        pack = functools.partial(bfd_packing, lengths, row_length)
        count = functools.partial(bfd_rows, lengths, row_length)
        # Races of two, each baseline against `never` apart (in a race of three the function
        # right after `bfd_rows`, whose np.unique pushes the lengths out of cache, paid for
        # it every round), and a race for the search (its time sets its rounds' calls).
        never_t, pack_t = side_by_side(
            builds["never"], pack, budget_s=0.01, repeats=repeats, rounds=5
        )
        never_c, count_t = side_by_side(
            builds["never"], count, budget_s=0.01, repeats=repeats, rounds=5
        )
        auto_t, pack_auto_t = side_by_side(
            builds["auto"], pack, budget_s=0.01, repeats=repeats, rounds=5
        )
        auto, never = builds["auto"](), builds["never"]()
        doc_cell = ratio_cell = auto_doc_cell = "-"
        # issue 26's per-document BFD (10M: 9-13 s a call here, one call a round)
        row_of, doc_rows = bfd_documents(lengths, row_length)
        fill = np.bincount(row_of, weights=lengths, minlength=doc_rows)
        assert doc_rows == never.num_rows and fill.max() <= row_length, label
        never_d, auto_d, doc_t = side_by_side(
            builds["never"],
            builds["auto"],
            functools.partial(bfd_documents, lengths, row_length),
            budget_s=0.01 if lengths.size <= 10_000 else 0.0,  # (one call: 40 ms-13 s)
            rounds=3,
        )
        doc_cell, ratio_cell = f"{doc_t * 1e3:.3g}", f"{never_d / doc_t:.3g}x"
        auto_doc_cell = f"{auto_d / doc_t:.3g}x"
        worst["doc"] = max(worst["doc"], never_d / doc_t)
        worst["auto_doc"] = max(worst["auto_doc"], auto_d / doc_t)
        sizes, counts = np.unique(lengths, return_counts=True)
        bound = lower_bound(sizes, counts, row_length)[1]
        theirs = bfd_rows(lengths, row_length)
        packed = bfd_packing(lengths, row_length)
        assert _rows_of(*packed) == _plan_rows(never.patterns), label
        rows = never.num_rows
        assert rows == theirs == int(packed[0].sum()) and auto.num_rows <= rows, (label, rows)
        promise = int(lengths.sum()) // 200  # the default's: within 0.5 points of ceil(tokens/L)
        if (label, row_length) not in hard:
            assert (auto.num_rows - auto.lower_bound) * row_length <= promise, label
        worst["auto"] = max(worst["auto"], auto_t / pack_auto_t)
        worst["never"] = max(worst["never"], never_t / pack_t)
        worst["count"] = max(worst["count"], never_c / count_t)
        lines.append(
            f"| {label} | {row_length} | {bound:,} | {auto.num_rows:,} | {rows:,} | "
            f"{auto_t * 1e3:.3g} | {never_t * 1e3:.3g} | {pack_t * 1e3:.3g} | "
            f"{count_t * 1e3:.3g} | {doc_cell} | {never_t / pack_t:.2f}x | "
            f"{never_c / count_t:.2f}x | {ratio_cell} | {auto_t / pack_auto_t:.2f}x | "
            f"{auto_doc_cell} |"
        )
        print(
            label,
            auto.num_rows,
            rows,
            bound,
            f"never/pack {never_t / pack_t:.2f}x never/count {never_c / count_t:.2f}x "
            f"never/per-document {ratio_cell} auto/pack {auto_t / pack_auto_t:.2f}x "
            f"auto/per-document {auto_doc_cell}",
            flush=True,
        )
    lines += [
        "",
        f'Largest time ratio: `search="never"` / BFD packing **{worst["never"]:.2f}x**, '
        f'`search="never"` / BFD count **{worst["count"]:.2f}x**, `search="never"` / BFD per '
        f'document **{worst["doc"]:.3g}x**, `search="auto"` / BFD packing '
        f'**{worst["auto"]:.2f}x**, `search="auto"` / BFD per document '
        f"**{worst['auto_doc']:.3g}x**; rows: `never` = BFD's everywhere, `auto` <= BFD's "
        "everywhere and within 0.5 points of padding of `ceil(tokens / L)` rows on every "
        "set but the uniform ones (asserted; in (L/4, L/2] and (L/5, L/2] no plan comes that "
        "close: rows of three documents at most, NOTE [ At most three documents a row ] and "
        "NOTE [ Rows of three where the thirds rise ]; in (L/8, L/2] full rows of any "
        "count, NOTE [ Full rows of any count ], kept only within the promise).",
        "",
    ]
    return lines


def _rows_of(reps, offsets, items, mult) -> dict[tuple, int]:
    """Rows per distinct row contents ``((size, documents), ...)`` of a packing."""
    out: dict[tuple, int] = {}
    items, mult = items.tolist(), mult.tolist()
    for p, (lo, hi) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
        key = tuple(sorted(zip(items[lo:hi], mult[lo:hi], strict=True)))
        out[key] = out.get(key, 0) + int(reps[p])
    return out


def _plan_rows(p) -> dict[tuple, int]:
    """:func:`_rows_of` of a plan's patterns (whose items index the distinct sizes)."""
    return _rows_of(p.reps, p.offsets, p.sizes[p.items], p.mult)


def streaming(quick: bool) -> list[str]:
    """``BucketIterable`` against a plain ``DataLoader(batch_size=B)`` over one in-memory list."""
    from bucketloader.solve import compute_boundaries
    from bucketloader.stream import BucketIterable

    gsm = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64).sum(axis=1) + 2
    n = 50_000 if quick else 200_000
    lens = np.random.default_rng(1).choice(gsm, n)
    samples = [{"input_ids": np.ones(k, np.int32), "label": i % 2} for i, k in enumerate(lens)]
    b = compute_boundaries(lens, 8)

    class _Iter(torch.utils.data.IterableDataset):
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)

    lines = [
        "## 3. A stream's batching vs a plain DataLoader",
        "",
        f"{n:,} dict samples in a Python list (GSM8K lengths), single process, no collation "
        "(`collate_fn=list`): `BucketIterable(..., boundaries=8 buckets, batch_size=B)` vs "
        "`DataLoader(IterableDataset, batch_size=B)`; best of 3 alternating rounds.",
        "",
        "| B | DataLoader samples/s | BucketIterable samples/s | BucketIterable time / "
        "DataLoader time |",
        "|---:|---:|---:|---:|",
    ]
    for rows in (8, 32, 128):

        def plain(rows=rows):
            dl = torch.utils.data.DataLoader(_Iter(samples), batch_size=rows, collate_fn=list)
            return sum(1 for _ in dl)

        def ours(rows=rows):
            return sum(
                1
                for _ in BucketIterable(
                    samples, length_fn="input_ids", boundaries=b, batch_size=rows
                )
            )

        tp, to = side_by_side(plain, ours, budget_s=0.0)
        lines.append(f"| {rows} | {n / tp:,.0f} | {n / to:,.0f} | {to / tp:.2f}x |")
        print("stream", rows, f"{to / tp:.2f}x", flush=True)
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats behind each median")
    parser.add_argument(
        "--only",
        choices=("collation", "packing", "long-rows", "streams"),
        help="run one section (a check)",
    )
    parser.add_argument(
        "--write", action="store_true", help="with --only: replace that section in the results"
    )
    parser.add_argument("--kinds", help="collation: kinds whose name holds one of these words")
    parser.add_argument("--rows", help="collation: these batch sizes only (comma-separated)")
    args = parser.parse_args()
    if (args.kinds or args.rows) and (args.only != "collation" or args.write):
        parser.error(  # (a run without --only writes the whole results file)
            f"--kinds {args.kinds} / --rows {args.rows} narrow the collation section for a "
            "check, which writes nothing: add --only collation and leave out --write (the "
            "written run is the full one)"
        )
    started = time.perf_counter()
    sections = {
        "collation": lambda: collation(args.quick, args.repeats, args.kinds, args.rows),
        "packing": lambda: packing(args.quick, args.repeats),
        "long-rows": lambda: long_rows(args.repeats),
        "streams": lambda: streaming(args.quick),
    }
    if args.only:
        lines = sections[args.only]()
        print("\n".join(lines))
        if args.write:  # that section of the results file, replaced
            text = OUT.read_text()
            if lines[0] not in text:  # (a new section: before the first that sorts after it)
                later = [h for h in text.split("\n") if h.startswith("## ") and h > lines[0]]
                at = text.index(later[0]) if later else len(text)
                text = text[:at] + lines[0] + "\n\n" + text[at:]
            start = text.index(lines[0])
            end = text.find("\n## ", start + 1)
            stamp = f"(This section rerun alone: {time.perf_counter() - started:.0f} s.)"
            rest = text[end + 1 :] if end >= 0 else ""
            OUT.write_text(text[:start] + "\n".join([*lines, stamp, ""]) + "\n" + rest)
        return
    body = [line for run in sections.values() for line in run()]
    head = [
        "# Small costs against the strongest baselines (benchmarks/small_costs.py)",
        "",
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, numpy "
        f"{np.__version__}, Python {platform.python_version()}; a shared 2-core machine, "
        "so absolute times are noisy: the ratios come from alternating rounds.",
        "",
    ]
    tail = [f"Run time: {time.perf_counter() - started:.0f} s{' (--quick)' if args.quick else ''}."]
    OUT.write_text("\n".join(head + body + tail) + "\n")


if __name__ == "__main__":
    main()
