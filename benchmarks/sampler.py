"""Samplers side by side (bucketloader, HF LengthGroupedSampler, Lhotse DynamicBucketingSampler),
plan time at 10 M lengths, and PadCollator throughput against ``pad_sequence``.

Run: ``.venv/bin/python benchmarks/sampler.py`` (about 3 minutes on 2 shared cores;
``--quick`` for a smoke run). Writes ``benchmarks/results/sampler.md``.

1. One epoch of each sampler on LibriSpeech train-clean-100 (28,539 lengths in samples, from
   tests/data) and on synthetic lognormal token lengths: plan time (construction + one full
   epoch of index lists), batches, distinct batch shapes ``(B, L)`` and padding ratio (pad
   elements / real elements, counting bucketloader's all-padding rows). Same budget for all:
   bucketloader ``max_tokens`` (padded elements per batch) = Lhotse ``max_duration`` (real
   duration per batch) x sampling rate; the fixed-size mode uses one ``batch_size`` for all, and
   HF / Lhotse batches are padded to their longest sample (dynamic padding).
2. ``BucketSampler`` on 10 M lengths, shuffled, ``max_tokens``, 8 ranks: construction (boundaries
   by the exact DP + cells), the epoch plan, and a whole rank's epoch.
3. Collation of the same batches: ``PadCollator`` (padded tensor + lengths + masks, to the
   planned shape) vs ``torch.nn.utils.rnn.pad_sequence`` (padded tensor only, to the batch max),
   ``torch.set_num_threads(1)`` as in DataLoader workers; best of 8 interleaved runs (rotating
   order), with a memcpy of the bytes PadCollator writes timed in the same loop.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"  # the real length files (provenance: tests/data/SOURCES.md)
OUT = ROOT / "benchmarks" / "results" / "sampler.md"

from bucketloader.collate import Field  # noqa: E402
from bucketloader.sampler import BucketSampler  # noqa: E402


def import_lhotse():
    """Lhotse is a benchmark-only dependency (``pip install -e ".[bench]"``)."""
    import lhotse

    return lhotse


class Clock:
    """Wall and process-CPU seconds of a block. On a loaded shared machine the process is
    descheduled part of the time, so CPU seconds are the better estimate of an idle machine's
    wall time (single-threaded work); both are reported."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


# --- batch statistics ------------------------------------------------------------------------
def stats(shapes: list[tuple[int, int]], real: int) -> dict:
    arr = np.asarray(shapes, dtype=np.int64)
    padded = int((arr[:, 0] * arr[:, 1]).sum())
    return {
        "batches": len(shapes),
        "shapes": len(set(shapes)),
        "pad": (padded - real) / real,
    }


def run_ours(lengths, **kw):
    with Clock() as sec:
        sampler = BucketSampler(lengths, shuffle=True, seed=0, **kw)
        batches = list(sampler)
    table = sampler.shape_table
    shapes = []
    for idx in batches:
        b, length = table.target(lengths[idx])
        shapes.append((b if sampler.last_batch == "pad" else len(idx), length))
    return sec, stats(shapes, int(lengths.sum())), sampler


def run_hf(lengths, batch_size):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    with Clock() as sec:
        sampler = LengthGroupedSampler(
            batch_size, lengths=lengths.tolist(), generator=torch.Generator().manual_seed(0)
        )
        order = np.fromiter(iter(sampler), dtype=np.int64, count=len(lengths))
    shapes = [
        (len(c), int(lengths[c].max()))
        for c in np.split(order, np.arange(batch_size, len(order), batch_size))
    ]
    return sec, stats(shapes, int(lengths.sum()))


def run_lhotse(lengths, rate, **kw):
    lhotse = import_lhotse()
    from lhotse.dataset import DynamicBucketingSampler
    from lhotse.testing.dummies import dummy_recording

    t = time.perf_counter()
    cuts = lhotse.CutSet.from_cuts(
        lhotse.MonoCut(
            id=f"c{i}",
            start=0.0,
            duration=d / rate,
            channel=0,
            recording=dummy_recording(i, duration=d / rate, sampling_rate=int(rate)),
        )
        for i, d in enumerate(lengths.tolist())
    )
    build = time.perf_counter() - t
    with Clock() as sec, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "eagerly read CutSet": fine for a benchmark
        batches = list(DynamicBucketingSampler(cuts, shuffle=True, seed=0, **kw))
    shapes = [(len(b), max(round(c.duration * rate) for c in b)) for b in batches]
    return sec, stats(shapes, int(lengths.sum())), build


def compare(name, lengths, rate, max_tokens, batch_size, lhotse_n, lines):
    """Rows of the side-by-side table for one length set."""
    lines += [
        f"\n### {name}: {len(lengths):,} lengths (min {lengths.min():,}, median "
        f"{int(np.median(lengths)):,}, max {lengths.max():,})\n",
        f"Token budget: max_tokens = {max_tokens:,} (Lhotse max_duration = "
        f"{max_tokens / rate:g}); fixed size: batch_size = {batch_size}.\n",
        "| sampler | mode | plan time, wall (s) | plan time, CPU (s) | batches | distinct shapes "
        "| padding ratio |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]

    def row(label, mode, sec, st, note=""):
        lines.append(
            f"| {label}{note} | {mode} | {sec.wall:.2f} | {sec.cpu:.2f} | {st['batches']:,} | "
            f"{st['shapes']:,} | {st['pad']:.3f} |"
        )

    sec, st, sampler = run_ours(lengths, max_tokens=max_tokens)
    row("bucketloader `BucketSampler` (8 buckets, optimal)", "max_tokens", sec, st)
    sub = lengths[:lhotse_n]
    note = "" if lhotse_n >= len(lengths) else f" (first {lhotse_n:,} lengths)"
    if lhotse_n < len(lengths):
        sec, st, _ = run_ours(sub, max_tokens=max_tokens)
        row("bucketloader `BucketSampler`", "max_tokens", sec, st, note)
    sec, st, build = run_lhotse(sub, rate, max_duration=max_tokens / rate)
    row("Lhotse `DynamicBucketingSampler` (10 buckets)", "max_duration", sec, st, note)
    sec, st, _ = run_ours(lengths, batch_size=batch_size)
    row("bucketloader `BucketSampler` (8 buckets, optimal)", "batch_size", sec, st)
    sec, st = run_hf(lengths, batch_size)
    row("HF `LengthGroupedSampler`", "batch_size", sec, st)
    sec, st, _ = run_lhotse(sub, rate, max_cuts=batch_size, max_duration=None)
    row("Lhotse `DynamicBucketingSampler` (10 buckets)", "max_cuts", sec, st, note)
    lines.append(f"\nLhotse CutSet construction (not in plan time): {build:.1f} s.")
    return sampler


# --- 10 M plan time --------------------------------------------------------------------------
def plan_10m(n, lines):
    lengths = lognormal(n, seed=1)
    with Clock() as build:
        sampler = BucketSampler(lengths, max_tokens=65536, num_replicas=8, rank=0, shuffle=True)
    with Clock() as plan:
        it = iter(sampler)
        first = next(it)
    with Clock() as rest:
        count = 1 + sum(1 for _ in it)
    # Resume half way into rank 0's epoch: a new sampler (as after a restart), the state loaded,
    # then its first batch (the epoch's plan recomputed from (seed, epoch), then the skip).
    sampler.set_epoch(0)
    it = iter(sampler)
    for _ in range(count // 2):
        next(it)
    state = sampler.state_dict()
    with Clock() as resume:
        again = BucketSampler(lengths, max_tokens=65536, num_replicas=8, rank=0, shuffle=True)
        again.load_state_dict(state)
        resumed = next(iter(again))
    assert resumed == next(it), "the resumed sampler's first batch is not the next batch"
    lines += [
        f"\n## Plan time, {n:,} lengths (lognormal tokens), shuffled, max_tokens=65,536, "
        "8 ranks (rank 0)\n",
        "| step | wall (s) | CPU (s) |",
        "|---|---:|---:|",
        f"| `BucketSampler(...)`: boundaries (exact DP, 8 buckets) + cells + batch sizes | "
        f"{build.wall:.2f} | {build.cpu:.2f} |",
        f"| epoch plan (first batch of `iter(sampler)`) | {plan.wall:.2f} | {plan.cpu:.2f} |",
        f"| **plan time (construction + epoch plan), target < 2 s** | "
        f"**{build.wall + plan.wall:.2f}** | **{build.cpu + plan.cpu:.2f}** |",
        f"| rest of rank 0's epoch ({count:,} batches of index lists) | {rest.wall:.2f} | "
        f"{rest.cpu:.2f} |",
        f"| resume half way into the epoch: a new `BucketSampler(...)`, `load_state_dict`, its "
        f"first batch | {resume.wall:.2f} | {resume.cpu:.2f} |",
        f"\nShapes: {len(sampler.shapes)}; first batch {len(first)} samples.",
    ]


# --- collation throughput --------------------------------------------------------------------
def pad_sequence_with_masks(batch, pad_kwargs):
    """What a minimal hand-written collate_fn returns: padded tensor, lengths, mask."""
    xs = [torch.as_tensor(x) for x in batch] if isinstance(batch[0], list) else batch
    padded = torch.nn.utils.rnn.pad_sequence(xs, **pad_kwargs)
    lengths = torch.tensor([x.shape[0] for x in xs])
    mask = torch.arange(padded.shape[1])[None, :] < lengths[:, None]
    return padded, lengths, mask


def output_bytes(out) -> int:
    """Bytes of every tensor PadCollator returns (padded fields, lengths, masks)."""
    total = 0
    for value in out.values():
        values = value.values() if isinstance(value, dict) else [value]
        total += sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))
    return total


class Memcpy:
    """``np.copyto`` of ``size`` bytes into a preallocated destination, from a source of at most
    1 MiB copied over and over: this machine's memcpy bandwidth for the bytes a batch's
    collation writes, with the source in cache like the samples here (views of one buffer), so
    both sides pay the same memory traffic (the writes). Timed in the same loop."""

    CHUNK = 1 << 20

    def __init__(self):
        self._buffers = {}

    def __call__(self, size):
        pair = self._buffers.get(size)
        if pair is None:
            src = np.ones(min(size, self.CHUNK), np.uint8)
            pair = self._buffers[size] = (src, np.empty(size, np.uint8))
        src, dst = pair
        for start in range(0, size, src.size):
            part = dst[start : start + src.size]
            np.copyto(part, src[: part.size])


def collate_bench(name, batches, collate, pad_kwargs, lines, reps=8):
    """Per batch, the best of ``reps`` thread-CPU times of each method, summed over batches.

    ``memcpy`` copies the bytes PadCollator writes for the batch (its output tensors), so
    ``memcpy / ours`` is PadCollator's throughput as a fraction of memcpy bandwidth."""

    def ref(b):
        xs = [torch.as_tensor(x) for x in b] if isinstance(b[0], list) else b
        return torch.nn.utils.rnn.pad_sequence(xs, **pad_kwargs)

    memcpy = Memcpy()
    total = dict.fromkeys(("ref", "ref+", "ours", "memcpy"), 0.0)
    per_shape: dict = {}
    nbytes_total = 0
    for b in batches:
        nbytes = output_bytes(collate(b))
        nbytes_total += nbytes
        methods = {
            "ref": lambda b=b: ref(b),
            "ref+": lambda b=b: pad_sequence_with_masks(b, pad_kwargs),
            "ours": lambda b=b: collate(b),
            "memcpy": lambda n=nbytes: memcpy(n),
        }
        best = dict.fromkeys(methods, float("inf"))
        order = list(methods)
        for rep in range(reps):  # interleaved, so a burst of load hits all of them alike; the
            for k in order[rep % 4 :] + order[: rep % 4]:  # order rotates: no method always
                t = time.thread_time()  # runs right after another one's cache traffic
                methods[k]()
                best[k] = min(best[k], time.thread_time() - t)
        for k in methods:
            total[k] += best[k]
        shape = tuple(collate(b)["inputs"].shape[:2])
        row = per_shape.setdefault(shape, [0, 0.0, 0.0, 0.0, 0.0, 0])
        row[0] += 1
        for i, k in enumerate(("ref", "ref+", "ours", "memcpy"), start=1):
            row[i] += best[k]
        row[5] += nbytes
    samples = sum(len(b) for b in batches)
    r, r2, o, m = (total[k] for k in ("ref", "ref+", "ours", "memcpy"))
    lines.append(
        f"| {name} | {len(batches)} | {samples / len(batches):.0f} | {samples / r:,.0f} | "
        f"{samples / r2:,.0f} | {samples / o:,.0f} | **{r / o:.2f}x** | {r2 / o:.2f}x | "
        f"{nbytes_total / len(batches) / 1024:,.0f} KiB | {nbytes_total / o / 1e9:.1f} GB/s | "
        f"{nbytes_total / m / 1e9:.1f} GB/s | {m / o:.0%} |"
    )
    return per_shape


def collation(librispeech, quick, lines):
    torch.set_num_threads(1)
    lines += [
        "\n## Collation throughput: `PadCollator` vs `pad_sequence` on the same batches\n",
        "One thread (as in DataLoader workers); per batch the best of 8 interleaved runs of "
        "each method (in rotating order), in thread CPU time (immune to the descheduling on "
        "this shared machine), "
        "summed over the batches. `pad_sequence` pads to each batch's max and "
        "returns the padded tensor only; `PadCollator` pads to the planned shape and also "
        "returns `lengths`, `attention_mask` and `sample_mask`, and checks every length against "
        "the plan; it writes the planned length (the bucket boundary), at least the batch max that "
        "`pad_sequence` writes. Samples are views of one buffer (no allocation per sample).\n",
        "`memcpy` is `np.copyto` of as many bytes as PadCollator writes for the same batch (its "
        "padded tensor, `lengths`, `attention_mask` and `sample_mask`) into a preallocated "
        "buffer, from a source of at most 1 MiB reused (in cache, as the samples here are: both "
        "sides pay the writes), timed in the same loop: *of memcpy* is PadCollator's throughput "
        "as a fraction of this machine's memcpy bandwidth for those bytes (PadCollator also "
        "allocates its outputs, builds the masks and checks the plan). Long rows (audio, tens "
        "of MB per batch) are bound by those writes, so PadCollator runs at memcpy speed there "
        "(values around or above 100%: one thread's copy speed over tens of MB differs by copy "
        "routine, `torch.cat` here, `np.copyto` there); token batches of half a MB are bound by "
        "per-sample work instead, which is why the fraction falls as B grows.\n",
        "| workload | batches | samples/batch | pad_sequence samples/s | pad_sequence + lengths "
        "+ mask samples/s | PadCollator samples/s | vs pad_sequence | vs + lengths + mask "
        "| written/batch | PadCollator | memcpy | of memcpy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    k = 6 if quick else 30
    wave = BucketSampler(librispeech, max_tokens=16000 * 440, seed=0)
    base = torch.randn(int(librispeech.max()))
    batches = [[base[: librispeech[i]] for i in idx] for idx in list(wave)[:k]]
    collate_bench(
        "LibriSpeech waveform, float32 (T,)", batches, wave.collator(), {"batch_first": True}, lines
    )
    frames = librispeech // 160
    fb = BucketSampler(frames, max_tokens=44000, seed=0)
    base = torch.randn(int(frames.max()), 80)
    batches = [[base[: frames[i]] for i in idx] for idx in list(fb)[:k]]
    collate_bench(
        "LibriSpeech fbank, float32 (T, 80), dims=0",
        batches,
        fb.collator(fields=Field(dims=0)),
        {"batch_first": True},
        lines,
    )
    tokens = lognormal(50_000, seed=2)
    tk = BucketSampler(tokens, max_tokens=65536, seed=0)
    base = torch.arange(int(tokens.max()))
    idxs = list(tk)[: 3 * k]
    batches = [[base[: tokens[i]] for i in idx] for idx in idxs]
    per_shape = collate_bench(
        "lognormal tokens, int64 tensors", batches, tk.collator(), {"batch_first": True}, lines
    )
    lists = [[list(range(tokens[i])) for i in idx] for idx in idxs]
    collate_bench(
        "lognormal tokens, Python lists (pad_sequence: + torch.tensor each)",
        lists,
        tk.collator(),
        {"batch_first": True},
        lines,
    )
    lines += [
        "\nToken tensors by planned shape (microseconds per batch, thread CPU; *written* is the "
        "bytes of PadCollator's output, *of memcpy* its throughput over memcpy's for them):\n",
        "| planned shape (B, L) | batches | pad_sequence | pad_sequence + lengths + mask "
        "| PadCollator | vs pad_sequence | written/batch | memcpy | of memcpy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, (count, r, r2, o, m, nbytes) in sorted(per_shape.items()):
        lines.append(
            f"| {shape} | {count} | {r / count * 1e6:.0f} | {r2 / count * 1e6:.0f} | "
            f"{o / count * 1e6:.0f} | **{r / o:.2f}x** | {nbytes / count / 1024:,.0f} KiB | "
            f"{m / count * 1e6:.0f} | {m / o:.0%} |"
        )


# --- main ------------------------------------------------------------------------------------
def lognormal(n, seed):
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(256), 0.7, n)), 8, 4096).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--lhotse-n", type=int, default=200_000, help="Lhotse subset (synthetic)")
    args = ap.parse_args()
    t_start = time.perf_counter()
    import transformers

    lhotse = import_lhotse()

    librispeech = np.loadtxt(DATA / "librispeech_train_clean_100_samples.txt", dtype=np.int64)
    synth_n, big_n = (100_000, 1_000_000) if args.quick else (1_000_000, 10_000_000)
    lhotse_n = min(args.lhotse_n, synth_n // 5 if args.quick else args.lhotse_n)
    lines = [
        "# Samplers side by side, 10 M plan time, collation throughput\n",
        "Command: `.venv/bin/python benchmarks/sampler.py"
        + (" --quick" if args.quick else "")
        + "` ({elapsed}).\n",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at start: a shared "
        f"machine), torch {torch.__version__}, numpy {np.__version__}, "
        f"lhotse {lhotse.__version__}, transformers {transformers.__version__}.\n",
        "## One epoch, side by side",
        "Reference figures from the issue (LibriSpeech, fixed by earlier runs): Lhotse "
        "DynamicBucketingSampler 246 distinct shapes in 906 batches, HF LengthGroupedSampler 696 "
        "in 892.",
    ]
    compare(
        "LibriSpeech train-clean-100 (samples @ 16 kHz)",
        librispeech,
        16000.0,
        16000 * 440,
        32,
        len(librispeech),
        lines,
    )
    compare(
        "Synthetic lognormal tokens (median 256, sigma 0.7, clipped 8..4096)",
        lognormal(synth_n, seed=0),
        100.0,
        65536,
        64,
        lhotse_n,
        lines,
    )
    plan_10m(big_n, lines)
    collation(librispeech, args.quick, lines)
    elapsed = time.perf_counter() - t_start
    text = "\n".join(lines).replace("{elapsed}", f"{elapsed:.0f} s") + "\n"
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
