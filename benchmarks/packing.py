"""Packing vs the alternatives: padding, shapes and documents cut on every text length file;
plan time at 10 M lengths against a naive best-fit; collation against PadCollator.

Run: ``.venv/bin/python benchmarks/packing.py`` (about 5 minutes on 2 shared cores, most of it
the naive planner; ``--quick`` for a smoke run). Writes ``benchmarks/results/packing.md``.

1. Padding at ``L`` in {256, 1024, 4096} tokens per row, 16,384 tokens per batch
   (``B = 16384 / L`` rows), one shuffled epoch, on each text column of tests/data (a document
   is tokens + 2 special tokens; prompt + response + 2 for pairs). Documents longer than ``L``
   are dropped for every method (torchtune raises on them by default; only GSM8K at 256 has
   any). Padding ratio = pad tokens / real tokens.
   - bound: ``ceil(tokens / L)`` rows (L1), and Martello & Toth's L2 (documents over ``L / 2``
     cannot share a row);
   - ours: ``PackSampler`` rows, and its epoch at the planned shape, where the last batch's
     all-padding rows (``last_batch="pad"``) count as padding;
   - best-fit decreasing (the issue's reference), sequential greedy (torchtune's
     ``PackedDataset`` rule: next row when the next document does not fit), concat-and-chunk
     (Megatron: no padding, documents cut at row ends), HF ``DataCollatorWithFlattening``
     (no padding, one row of every batch's total length: distinct shapes per epoch, batch size
     = 16384 / mean document length), ``BucketSampler`` at k = 8 and 16 (``max_tokens=16384``).
2. Long documents (E. coli proteins, + 2): drop, ``SplitDataset`` pieces, bucketed packing.
3. Streams: ``PackIterable`` (online best fit) at 64 and 256 open rows vs sequential greedy.
4. Plan time for 10 M lengths (GSM8K prompt + response + 2, resampled; lognormal up to 4096):
   ``PackSpec.build`` (histogram + solver), the row layout, and one rank's epoch of 8 ranks,
   against a naive per-document best-fit decreasing in Python (capacity buckets).
5. Collation, one epoch of the same documents (GSM8K q + a + 2, L = 1024, 16 rows): every
   ``PackSampler`` batch through ``PackCollator`` vs every ``BucketSampler`` batch (8 buckets,
   the same ``max_tokens``) through ``PadCollator``; ``torch.set_num_threads(1)`` as in
   DataLoader workers; best of 15 alternating rounds, each batch's output dropped before the
   next, as in a training loop.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"  # the real length files (provenance: tests/data/SOURCES.md)
OUT = ROOT / "benchmarks" / "results" / "packing.md"

from bucketloader.pack import PackSampler, PackSpec, SplitDataset  # noqa: E402
from bucketloader.pack._bins import lower_bound  # noqa: E402
from bucketloader.sampler import BucketSampler  # noqa: E402
from bucketloader.stream import PackIterable  # noqa: E402

TOKENS_PER_BATCH = 16384
ROWS = (256, 1024, 4096)


def load(name: str) -> np.ndarray:
    return np.loadtxt(DATA / name, dtype=np.int64)


def text_columns() -> dict[str, np.ndarray]:
    m = load("multi30k_train_en_de_tokens.txt")
    e = load("europarl_v7_en_fr_20k_tokens.txt")
    g = load("gsm8k_train_qa_tokens.txt")
    return {
        "Multi30k en": m[:, 0] + 2,
        "Multi30k de": m[:, 1] + 2,
        "Multi30k en+de pair": m.sum(1) + 2,
        "Europarl en": e[:, 0] + 2,
        "Europarl fr": e[:, 1] + 2,
        "Europarl en+fr pair": e.sum(1) + 2,
        "GSM8K prompt+response": g.sum(1) + 2,
    }


# --- the methods we compare with -----------------------------------------------------------
def naive_bfd(lengths: np.ndarray, width: int) -> tuple[int, int]:
    """Best-fit decreasing, one document at a time in Python: bins grouped by free room (lists
    indexed 0..L), a document takes a bin of the smallest free room that holds it. Returns
    (rows, free tokens)."""
    by_free: list[list[int]] = [[] for _ in range(width + 1)]
    rows = 0
    for s in sorted(lengths.tolist(), reverse=True):
        c = s
        while c <= width and not by_free[c]:
            c += 1
        if c > width:
            b, rows, c = rows, rows + 1, width
        else:
            b = by_free[c].pop()
        by_free[c - s].append(b)
    return rows, sum(c * len(b) for c, b in enumerate(by_free))


def greedy(order: np.ndarray, width: int) -> tuple[int, int]:
    """torchtune's sequential rule (next-fit in the given order): (rows, free tokens)."""
    rows, fill, free = 0, 0, 0
    for s in order.tolist():
        if fill + s > width:
            rows, free, fill = rows + 1, free + width - fill, 0
        fill += s
    return rows + 1, free + width - fill


def concat_chunk(order: np.ndarray, width: int) -> tuple[int, int, int]:
    """Megatron-style: concatenate, cut every L tokens. (rows, pad tokens, documents cut)."""
    ends = np.cumsum(order)
    starts = ends - order
    rows = -(-int(ends[-1]) // width)
    cut = int(((starts // width) != ((ends - 1) // width)).sum())
    return rows, rows * width - int(ends[-1]), cut


def hf_flatten_shapes(order: np.ndarray, batch: int) -> tuple[int, int]:
    """DataCollatorWithFlattening: each batch of ``batch`` documents is one row of their total
    length. (batches, distinct shapes)."""
    n = order.size // batch * batch + (order.size % batch > 0) * batch
    padded = np.zeros(n, dtype=np.int64)
    padded[: order.size] = order
    totals = padded.reshape(-1, batch).sum(1)
    return totals.size, int(np.unique(totals).size)


def check_flattening_rule(lengths: np.ndarray) -> str:
    """Run the real collator on one batch to confirm the (1, total) shape it is counted by."""
    from transformers import DataCollatorWithFlattening

    feats = [{"input_ids": [1] * int(n)} for n in lengths[:8]]
    shape = tuple(DataCollatorWithFlattening()(feats)["input_ids"].shape)
    assert shape == (1, int(lengths[:8].sum())), shape
    return f"(checked: transformers' DataCollatorWithFlattening returns {shape} for 8 documents)"


def bucketing(lengths: np.ndarray, k: int) -> tuple[float, int]:
    sampler = BucketSampler(lengths, num_buckets=k, max_tokens=TOKENS_PER_BATCH, seed=0)
    plan = sampler.plan()
    padded = sum(int(np.prod(sampler.spec.cells.shapes[c])) for c in plan.cells.tolist())
    return (padded - int(lengths.sum())) / int(lengths.sum()), len(sampler.shapes)


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


# --- 1. padding on the real text files ---------------------------------------------------------
def padding_table(lines: list[str]) -> None:
    rng = np.random.default_rng(0)
    lines += [
        "## 1. Padding, shapes and cut documents on every text length file\n",
        f"{TOKENS_PER_BATCH:,} tokens per batch: B = "
        + ", ".join(f"{TOKENS_PER_BATCH // n} rows at L = {n}" for n in ROWS)
        + ". "
        "Padding = pad tokens / real tokens. *ours (rows)* is the packing itself; *ours (shape)* "
        "is the epoch at the planned shape, counting the all-padding rows that complete the "
        'last batch (`last_batch="pad"`; with so few rows at L = 4096 this is most of it). '
        "Bucketing pads every sample to its bucket boundary at the same token budget (all "
        "shapes it plans; padding includes its masked last-batch rows).\n",
        "| data (documents, tokens) | L | bound L1 rows (pad) | L2 rows | **ours** rows "
        "| **ours (rows)** | **ours (shape)** | ours shapes | best-fit decr. "
        "| seq. greedy (torchtune) | concat-and-chunk pad / docs cut "
        "| HF flattening shapes / epoch | bucketing k=8 (shapes) | k=16 (shapes) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = 0.0
    for name, full in text_columns().items():
        for width in ROWS:
            x = full[full <= width]
            tokens = int(x.sum())
            vals, counts = np.unique(x, return_counts=True)
            l1, l2 = lower_bound(vals[::-1], counts[::-1], width)
            sampler = PackSampler(x, row_length=width, max_tokens=TOKENS_PER_BATCH, seed=0)
            spec = sampler.spec
            rows_pad = (spec.num_rows * width - tokens) / tokens
            shape_pad = (len(sampler) * spec.batch_sizes[0] * width - tokens) / tokens
            bound_pad = (l1 * width - tokens) / tokens
            if bound_pad < 0.01:
                worst = max(worst, rows_pad - bound_pad)
            order = rng.permutation(x)
            _, bfd_free = naive_bfd(x, width)
            _, g_free = greedy(order, width)
            _, c_pad, c_cut = concat_chunk(order, width)
            hf_batch = max(1, round(TOKENS_PER_BATCH / x.mean()))
            hf_batches, hf_shapes = hf_flatten_shapes(order, hf_batch)
            b8, s8 = bucketing(x, 8)
            b16, s16 = bucketing(x, 16)
            dropped = full.size - x.size
            label = (
                f"{name} ({x.size:,}{f', {dropped} > L dropped' if dropped else ''}, {tokens:,})"
            )
            lines.append(
                f"| {label} | {width} | {l1:,} ({pct(bound_pad)}) | {l2:,} | {spec.num_rows:,} | "
                f"**{pct(rows_pad)}** | {pct(shape_pad)} | {len(sampler.shapes)} | "
                f"{pct(bfd_free / tokens)} | {pct(g_free / tokens)} | "
                f"{pct(c_pad / tokens)} / {c_cut:,} | {hf_shapes} / {hf_batches} | "
                f"{pct(b8)} ({s8}) | {pct(b16)} ({s16}) |"
            )
    lines += [
        "",
        f"Goal (the issue): ours within 0.5 percentage points of the bound wherever the bound is "
        f"below 1%. Largest gap over those cells: **{100 * worst:.3f} points** "
        "(at the rows; the planned shape adds the last batch's filler rows, which no packing "
        'avoids: `last_batch="fill"` repeats rows instead, `"drop"` leaves them out). '
        "HF flattening batch size: 16384 / mean document length "
        + check_flattening_rule(text_columns()["Europarl en"])
        + ".",
        "",
    ]


# --- 2. long documents ---------------------------------------------------------------------------
def long_documents(lines: list[str]) -> None:
    x = load("ecoli_k12_proteome_residues.txt") + 2
    tokens = int(x.sum())
    lines += [
        "## 2. Documents longer than a row: E. coli proteins (4,391, + 2 tokens, max 2,360)\n",
        "| policy | rows x L | documents packed | real tokens packed | padding (rows) | shapes |",
        "|---|---|---:|---:|---:|---|",
    ]
    drop = PackSpec.build(x, row_length=512, max_tokens=TOKENS_PER_BATCH, overflow="drop")
    trunc = PackSpec.build(x, row_length=512, max_tokens=TOKENS_PER_BATCH, overflow="truncate")
    split = SplitDataset(list(range(x.size)), x, max_length=512)
    pieces = PackSpec.build(split.lengths, row_length=512, max_tokens=TOKENS_PER_BATCH)
    both = PackSpec.build(x, row_length=(512, 2560), max_tokens=TOKENS_PER_BATCH)
    for label, spec, docs in (
        ('`overflow="drop"`, L = 512', drop, f"{drop.kept.size:,}"),
        ('`overflow="truncate"`, L = 512', trunc, f"{trunc.kept.size:,} (cut)"),
        (
            "`SplitDataset(max_length=512)`, L = 512",
            pieces,
            f"{x.size:,} as {split.lengths.size:,} pieces",
        ),
        ("bucketed packing, `row_length=(512, 2560)`", both, f"{both.kept.size:,}"),
    ):
        rows = " + ".join(
            f"{int(r):,} x {n}" for r, n in zip(spec.rows_per_length, spec.row_lengths, strict=True)
        )
        lines.append(
            f"| {label} | {rows} | {docs} | {spec.tokens:,} of {tokens:,} | "
            f"{pct(spec.row_padding)} | {list(spec.table().shapes)} |"
        )
    lines.append("")


# --- 3. streams ----------------------------------------------------------------------------------
def streams(lines: list[str]) -> None:
    rng = np.random.default_rng(0)
    lines += [
        "## 3. Streams: online best fit (`PackIterable`), L = 1024, 16 rows per batch\n",
        "Documents in a shuffled order, one pass; padding over the rows yielded (the last, short "
        "batch's filler rows excluded). Offline (`PackSampler`) for reference.\n",
        "| data | seq. greedy | `open_rows=64` | `open_rows=256` | offline |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, x in text_columns().items():
        order = rng.permutation(x)
        tokens = int(x.sum())
        cells = []
        for rows in (64, 256):
            stream = PackIterable(
                [[1] * int(n) for n in order], row_length=1024, batch_size=16, open_rows=rows
            )
            for _ in stream:
                pass
            st = stream.stats
            cells.append(pct((st["rows"] * 1024 - st["tokens"]) / st["tokens"]))
        _, g_free = greedy(order, 1024)
        offline = PackSpec.build(x, row_length=1024, batch_size=16).row_padding
        lines.append(f"| {name} | {pct(g_free / tokens)} | {' | '.join(cells)} | {pct(offline)} |")
    lines.append("")


# --- attention cost ---------------------------------------------------------------------------
def attention_cost(lines: list[str]) -> None:
    """Quadratic (attention) and linear (everything else) work per epoch, relative to the
    documents alone: sum n^2 and sum n."""
    lines += [
        "## 3b. What the model computes: attention and linear work per epoch\n",
        "Relative to the documents alone (attention: sum of n^2 over documents; linear layers: "
        "sum of n). *Packed, dense mask*: SDPA / eager with the `(B, 1, L, L)` document mask "
        "computes every row's L x L scores; *packed, varlen*: flash-attention varlen with "
        "`cu_seqlens` (or flex-attention's BlockMask, which skips most masked blocks) computes "
        "each document's n x n plus the padding runs; *bucketing*: each sample padded to its "
        "bucket, B x b^2 per batch. 16,384 tokens per batch, one epoch, filler rows included.\n",
        "| data | L | packed, dense mask | packed, varlen | bucketing k=8 | linear: packed "
        "| linear: bucketing k=8 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    cols = text_columns()
    for name in ("Multi30k en", "Europarl en+fr pair", "GSM8K prompt+response"):
        x = cols[name]
        for width in (1024, 4096):
            x = x[x <= width]
            ideal_q = float((x.astype(np.float64) ** 2).sum())
            ideal_l = float(x.sum())
            sampler = PackSampler(x, row_length=width, max_tokens=TOKENS_PER_BATCH, seed=0)
            plan, spec = sampler.plan(), sampler.spec
            rows = len(plan) * spec.batch_sizes[0]
            dense = rows * float(width) ** 2
            fills = np.add.reduceat(spec.sizes[plan.indices], plan.row_offsets[:-1])
            varlen = ideal_q + float(((width - fills).astype(np.float64) ** 2).sum())
            varlen += (rows - fills.size) * float(width) ** 2  # all-padding rows
            bucket = BucketSampler(x, num_buckets=8, max_tokens=TOKENS_PER_BATCH, seed=0)
            shapes = [bucket.spec.cells.shapes[c] for c in bucket.plan().cells.tolist()]
            b_q = sum(b * float(n) ** 2 for b, n in shapes)
            b_l = sum(b * float(n) for b, n in shapes)
            lines.append(
                f"| {name} | {width} | {dense / ideal_q:.1f}x | {varlen / ideal_q:.2f}x "
                f"| {b_q / ideal_q:.2f}x | {rows * width / ideal_l:.3f}x | {b_l / ideal_l:.3f}x |"
            )
    lines.append("")


# --- 4. plan time at 10 M -------------------------------------------------------------------
def plan_time(n: int, naive_n: int, lines: list[str]) -> None:
    rng = np.random.default_rng(0)
    g = load("gsm8k_train_qa_tokens.txt").sum(1) + 2
    workloads = {
        "GSM8K prompt+response, resampled": rng.choice(g, n),
        "lognormal (median 245, sigma 0.9, 1..4096)": np.clip(
            rng.lognormal(5.5, 0.9, n).astype(np.int64) + 1, 1, 4096
        ),
    }
    lines += [
        f"## 4. Plan time, {n:,} lengths, 8 ranks (rank 0), `max_tokens=65536`\n",
        "`build`: histogram + solver (`PackSpec.build`); `layout`: the rows' slots, once per "
        "spec; `epoch`: one rank's epoch (`plan_pack_epoch`: deal, shuffle rows, steps), what a "
        "resume recomputes. Naive: best-fit decreasing one document at a time in Python, "
        f"capacity buckets (`naive_bfd` in this file), on {naive_n:,} of the lengths.\n",
        "| lengths | L | distinct | build (s) | layout (s) | epoch (s) | **total (s)** | rows "
        "| padding (rows) | bound L1 | naive BFD (s) | naive rows | naive padding |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, x in workloads.items():
        for width in (1024, 4096):
            xs = np.minimum(x, width)
            t0 = time.perf_counter()
            spec = PackSpec.build(xs, row_length=width, max_tokens=65536)
            t1 = time.perf_counter()
            _ = spec.layout
            t2 = time.perf_counter()
            PackSampler(spec, num_replicas=8, rank=0).plan()
            t3 = time.perf_counter()
            sub = xs[:naive_n]
            t4 = time.perf_counter()
            nrows, nfree = naive_bfd(sub, width)
            t5 = time.perf_counter()
            lines.append(
                f"| {name} | {width} | {np.unique(xs).size:,} | {t1 - t0:.2f} | {t2 - t1:.2f} "
                f"| {t3 - t2:.2f} | **{t3 - t0:.2f}** | {spec.num_rows:,} "
                f"| {pct(spec.row_padding)} | {spec.lower_bound:,} | {t5 - t4:.1f} | {nrows:,} "
                f"| {pct(nfree / int(sub.sum()))} |"
            )
            print(lines[-1], flush=True)
    lines.append("")


# --- 5. collation ----------------------------------------------------------------------------
def collation(lines: list[str], reps: int) -> None:
    torch.set_num_threads(1)
    g = load("gsm8k_train_qa_tokens.txt").sum(1) + 2
    rng = np.random.default_rng(0)
    toks = [rng.integers(3, 32000, int(n)) for n in g]
    kinds = {
        "lists of ints (HF datasets rows)": [t.tolist() for t in toks],
        "int64 tensors": [torch.from_numpy(t) for t in toks],
        "int64 numpy arrays": toks,
    }
    pack = PackSampler(g, row_length=1024, max_tokens=TOKENS_PER_BATCH, seed=0)
    bucket = BucketSampler(g, num_buckets=8, max_tokens=TOKENS_PER_BATCH, seed=0)
    pack_batches, pad_batches = list(pack), list(bucket)
    tokens = int(g.sum())
    lines += [
        "## 5. Collation: one epoch of the same documents\n",
        f"GSM8K prompt+response (+2), {g.size:,} documents, {tokens:,} tokens, random ids. "
        f"`PackCollator`: {len(pack_batches)} batches of {pack.shapes[0]} (input_ids, labels, "
        f"position_ids, document_ids, cu_seqlens). `PadCollator`: {len(pad_batches)} batches at "
        f"{len(bucket.shapes)} bucket shapes (padded input, lengths, attention_mask, "
        f"sample_mask). Best of {reps} alternating rounds, 1 thread; outputs are dropped as a "
        "training loop would.\n",
        "| samples | PadCollator epoch (ms) | PackCollator epoch (ms) | speed-up "
        "| Pack real tokens/s |",
        "|---|---:|---:|---:|---:|",
    ]
    pad_collate, pack_collate = bucket.collator(), pack.collator()
    for label, data in kinds.items():
        a = [[data[i] for i in b] for b in pad_batches]
        b = [[data[i] for i in bb] for bb in pack_batches]
        best_pad = best_pack = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            for batch in a:
                pad_collate(batch)
            best_pad = min(best_pad, time.perf_counter() - t)
            t = time.perf_counter()
            for batch in b:
                pack_collate(batch)
            best_pack = min(best_pack, time.perf_counter() - t)
        lines.append(
            f"| {label} | {1e3 * best_pad:.1f} | {1e3 * best_pack:.1f} | "
            f"**{best_pad / best_pack:.2f}x** | {tokens / best_pack / 1e6:.1f} M |"
        )
    lines.append("")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    t_start = time.perf_counter()
    import transformers

    n, naive_n = (1_000_000, 100_000) if args.quick else (10_000_000, 1_000_000)
    lines = [
        "# Packing: padding against the bound and the alternatives, plan time, collation\n",
        "Command: `.venv/bin/python benchmarks/packing.py"
        + (" --quick" if args.quick else "")
        + "` ({elapsed}).\n",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at start: a shared "
        f"machine), torch {torch.__version__}, numpy {np.__version__}, "
        f"transformers {transformers.__version__}.\n",
    ]
    padding_table(lines)
    long_documents(lines)
    streams(lines)
    attention_cost(lines)
    plan_time(n, naive_n, lines)
    collation(lines, reps=3 if args.quick else 15)
    lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
    elapsed = time.perf_counter() - t_start
    text = "\n".join(lines).replace("{elapsed}", f"{elapsed:.0f} s") + "\n"
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
