"""Resuming a stream late in an epoch: seeking the source vs replaying it, and the memory bound.

Run from the repository root (about a minute on a 2-core machine)::

    .venv/bin/python benchmarks/stream_resume.py

Writes ``benchmarks/results/stream_resume.md``.

1. **Resume time.** A :class:`~bucketloader.BucketIterable` (Europarl fr token lengths resampled
   to N samples, 8 buckets, ``batch_size=32``, ``shuffle_buffer=256``) is stopped 90% into its
   epoch and resumed from its JSON state in a fresh stream; the figure is the time from
   ``load_state_dict`` to the first batch after the resume, and the rows the resume reads
   before it. Each source is measured twice, side by side: as itself (a source read by index
   seeks, NOTE [ Seeking a source ]; an HF ``IterableDataset`` restarts at its newest
   checkpoint before the oldest buffered sample) and wrapped in a plain re-iterable (only
   ``__iter__``: the stream cannot seek and replays the epoch from its start). An HF source
   restarts at each of its checkpoints that precedes a buffered sample. Every resume is
   checked to give exactly the batches of the uninterrupted pass.
   ``--split-only``: the same for streams split over ranks (``steps_per_epoch``, the schedule
   every rank follows), ``BucketIterable`` and ``PackIterable`` over a list read by index
   against the same rows behind ``__iter__`` only; rewrites only that section of the results.
2. **Memory bound.** The samples a pass holds (shuffle buffer, bucket buffers; open and closed
   rows for :class:`~bucketloader.stream.PackIterable`) and their elements, at their peak over a
   whole pass, against the bound stated in ``docs/streams.md``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import compute_boundaries  # noqa: E402
from bucketloader.stream import BucketIterable, PackIterable, _engine  # noqa: E402
from bucketloader.stream.arrow import ArrowRows  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "stream_resume.md"
N = int(os.environ.get("STREAM_RESUME_N", 200_000))
AT = 0.9


class Replayed:
    """The same samples behind ``__iter__`` only: a source the stream cannot seek."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        return iter(self.source)


def lengths(n: int) -> np.ndarray:
    raw = np.loadtxt(ROOT / "tests" / "data" / "europarl_v7_en_fr_20k_tokens.txt", dtype=np.int64)
    raw = np.maximum(raw[:, 1], 1)
    return raw[np.random.default_rng(0).integers(0, raw.size, n)]


def make(source, bounds):
    return BucketIterable(
        source, length_fn="input_ids", boundaries=bounds, batch_size=32, shuffle_buffer=256
    )


def ids(batch):
    return [s["id"] for s in batch]


def resume_point(source, bounds):
    """The JSON state 90% into the epoch, the batches after it, and the epoch's batch count."""
    whole = [ids(b) for b in make(source, bounds)]
    k = int(AT * len(whole))
    first = make(source, bounds)
    it = iter(first)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    return state, whole[k:], len(whole)


PULLED: list[int] = []
_replay = _engine.replay


def _counted(it, start, stop):
    for x in _replay(it, start, stop):
        PULLED.append(x[0])
        yield x


_engine.replay = _counted


def time_resume(source, bounds, state, rest):
    PULLED.clear()
    t = time.perf_counter()
    again = make(source, bounds)
    again.load_state_dict(state)
    it = iter(again)
    head = ids(next(it))
    seconds = time.perf_counter() - t
    tail = [head] + [ids(b) for b in it]
    assert tail == rest, "the resumed stream differs from the uninterrupted one"
    if state["source"].get("seek"):  # fetched by index: the buffered samples
        reread = len(set(state["shuffle"]).union(*map(set, state["buckets"])))
    else:  # pulled from the restarted source (counted by the replay)
        reread = len(PULLED)
    return seconds, reread


def sources(n, tmp):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    lens = lengths(n)
    cols = {"id": list(range(n)), "input_ids": [[1] * int(x) for x in lens]}
    rows = [{"id": i, "input_ids": v} for i, v in zip(cols["id"], cols["input_ids"], strict=True)]
    table = pa.table(cols)
    for i, part in enumerate(np.array_split(np.arange(n), 8)):
        pq.write_table(table.slice(int(part[0]), len(part)), Path(tmp) / f"part-{i:02d}.parquet")
    ds = datasets.Dataset.from_dict(cols)
    return lens, {
        "list of dicts": rows,
        "`datasets.Dataset` (Arrow, map-style)": ds,
        "Parquet files (`ArrowRows`, 8 files)": ArrowRows(tmp),
        "HF `IterableDataset` (8 shards)": ds.to_iterable_dataset(num_shards=8),
    }


def resume_table(n):
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        lens, srcs = sources(n, tmp)
        bounds = compute_boundaries(lens, 8)
        for name, src in srcs.items():
            state, rest, total = resume_point(src, bounds)
            own = time_resume(src, bounds, state, rest)
            plain = Replayed(src)
            pstate, prest, _ = resume_point(plain, bounds)
            replay = time_resume(plain, bounds, pstate, prest)
            hf = "IterableDataset" in name
            out.append(
                {
                    "source": name,
                    "how": "checkpoint" if hf else "seek",
                    "batches": total,
                    "read": state["read"],
                    "own_s": own[0],
                    "own_rows": own[1],
                    "replay_s": replay[0],
                    "replay_rows": replay[1],
                }
            )
            print(out[-1], flush=True)
    return out


def peak_bucket(lens, bounds, shuffle, batch):
    stream = BucketIterable(
        [{"id": i, "input_ids": [1] * int(x)} for i, x in enumerate(lens)],
        length_fn="input_ids",
        boundaries=bounds,
        batch_size=batch,
        shuffle_buffer=shuffle,
    )
    peak_n = peak_e = 0
    for _ in stream:
        e = stream._engine
        n = len(e.shuffle) + sum(len(b) for b in e.bpos)
        el = sum(x[3] for x in e.shuffle) + sum(sum(b) for b in e.blen)
        peak_n, peak_e = max(peak_n, n), max(peak_e, el)
    b = np.asarray(bounds)
    bound_n = shuffle + len(b) * (batch - 1)
    bound_e = shuffle * int(b[-1]) + int(((batch - 1) * b).sum())
    return peak_n, bound_n, peak_e, bound_e


def peak_bucket_split(lens, bounds, shuffle, batch):
    """A stream split over ranks (``steps_per_epoch`` = one pass's batches, ``"fill"``): its
    buffers (shuffle and bucket buffers) and its stand-ins (each cell's first sample and last
    batch) at their peak, against the bounds in ``docs/streams.md``."""

    def make(steps):
        return BucketIterable(
            [{"id": i, "input_ids": [1] * int(x)} for i, x in enumerate(lens)],
            length_fn="input_ids",
            boundaries=bounds,
            batch_size=batch,
            shuffle_buffer=shuffle,
            steps_per_epoch=steps,
            last_batch="fill",
        )

    stream = make(sum(1 for _ in make(None)))
    peak_n = peak_e = 0
    for _ in stream:
        e = stream._engine
        held = [x[1] for x in e.shuffle] + [s for b in e.bsam for s in b]
        held += list(e._fits.values()) + [s for v in e._last.values() for s, _ in v]
        peak_n = max(peak_n, len(held))
        peak_e = max(peak_e, sum(len(s["input_ids"]) for s in held))
    b = np.asarray(bounds)
    cap = max(64, 2 * batch * len(b))
    bound_n = shuffle + cap + len(b) + batch * len(b)
    bound_e = (shuffle + cap) * int(b[-1]) + int(((batch + 1) * b).sum())
    return peak_n, bound_n, peak_e, bound_e


def peak_pack(lens, row_length, batch, open_rows):
    docs = [{"id": i, "input_ids": [1] * int(min(x, row_length))} for i, x in enumerate(lens)]
    stream = PackIterable(
        docs, length_fn="input_ids", row_length=row_length, batch_size=batch, open_rows=open_rows
    )
    peak_rows = peak_tokens = 0
    for _ in stream:
        e = stream._engine
        rows = len(e.rows) + len(e.ready)
        tokens = sum(row_length - r[0] for r in e.rows.values()) + sum(
            len(s["input_ids"]) for _, samples in e.ready for s in samples
        )
        peak_rows, peak_tokens = max(peak_rows, rows), max(peak_tokens, tokens)
    bound_rows = open_rows + batch + 1
    return peak_rows, bound_rows, peak_tokens, bound_rows * row_length


def memory_table():
    lens = lengths(50_000)
    bounds = compute_boundaries(lens, 8)
    rows = []
    for shuffle, batch in ((0, 32), (256, 32), (1024, 8)):
        pn, bn, pe, be = peak_bucket(lens, bounds, shuffle, batch)
        opts = f"K=8, shuffle_buffer={shuffle}, batch_size={batch}"
        rows.append(("BucketIterable", opts, pn, bn, pe, be))
    for shuffle, batch in ((0, 32), (256, 32), (1024, 8)):
        pn, bn, pe, be = peak_bucket_split(lens, bounds, shuffle, batch)
        opts = f"K=8, shuffle_buffer={shuffle}, batch_size={batch}, steps_per_epoch"
        rows.append(("BucketIterable", opts, pn, bn, pe, be))
    for open_rows, batch in ((8, 4), (64, 8)):
        pr, br, pt, bt = peak_pack(lens, 512, batch, open_rows)
        opts = f"row_length=512, open_rows={open_rows}, batch_size={batch}"
        rows.append(("PackIterable", opts, pr, br, pt, bt))
    return rows, [int(x) for x in bounds]


def write(table, mem, bounds, seconds):
    load = os.getloadavg()[0]
    lines = [
        "# Resuming a stream late in the epoch: seek vs replay",
        "",
        f"Command: `.venv/bin/python benchmarks/stream_resume.py` ({seconds:.0f} s). Machine: "
        f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(load average {load:.1f}: a shared machine).",
        "",
        f"`BucketIterable`, {N:,} Europarl fr samples (token lengths resampled), 8 buckets, "
        "`batch_size=32`, `shuffle_buffer=256`, stopped 90% into the epoch and resumed from its "
        "JSON state in a fresh stream. Time: `load_state_dict` to the first batch after the "
        "resume. Rows re-read: samples the resume reads before carrying on (a seek fetches only "
        "the buffered samples by index; a checkpoint restarts the source at each checkpoint "
        "that precedes a buffered sample and reads to its last buffered sample, and at the "
        "newest checkpoint to the stop; a replay re-reads the epoch up to the stop). Every "
        "resume gives exactly the batches of the uninterrupted pass (checked).",
        "",
        "| source | resume | batches in the epoch | stopped after reading | resume (s) "
        "| rows re-read | replay (s) | rows re-read | replay / resume |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        lines.append(
            f"| {r['source']} | {r['how']} | {r['batches']:,} | {r['read']:,} | "
            f"{r['own_s']:.3f} | {r['own_rows']:,} | {r['replay_s']:.2f} | "
            f"{r['replay_rows']:,} | {r['replay_s'] / r['own_s']:.0f}x |"
        )
    lines += [
        "",
        "## Memory per rank",
        "",
        "The samples a pass holds at its peak over a whole pass (50,000 samples), against the "
        "bound in `docs/streams.md`: `BucketIterable` holds at most `shuffle_buffer + sum_c "
        "(B_c - 1)` samples (K cells, the shuffle buffer and one partial batch per cell) and "
        "`shuffle_buffer * L_K + sum_c (B_c - 1) * L_c` elements; `PackIterable` holds at most "
        "`open_rows + batch_size + 1` rows of `row_length` tokens. Split over ranks "
        '(`steps_per_epoch`, here one pass\'s batches, `last_batch="fill"`), a '
        "`BucketIterable` holds its buffers, at most `shuffle_buffer + max(64, 2 * sum_c B_c)` "
        "samples (more only while a step waits for a sample that fits it), and its stand-ins, "
        "each cell's first sample and last batch (`K + sum_c B_c`); in elements "
        "`(shuffle_buffer + max(64, 2 * sum_c B_c)) * L_K + sum_c (B_c + 1) * L_c`. Boundaries "
        f"{bounds}.",
        "",
        "| stream | options | peak samples (rows) held | bound | peak elements held | bound |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, opts, pn, bn, pe, be in mem:
        lines.append(f"| {name} | {opts} | {pn:,} | {bn:,} | {pe:,} | {be:,} |")
    OUT.write_text("\n".join(lines) + "\n")


class CountedRows:
    """A list read by index (``__len__``, ``__getitem__``: the stream seeks), counting rows."""

    def __init__(self, rows):
        self.rows, self.reads = rows, 0

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if i >= len(self.rows):
            raise IndexError(i)
        self.reads += 1
        return self.rows[i]


class CountedIter:
    """The same rows behind ``__iter__`` only (the stream replays), counting rows."""

    def __init__(self, rows):
        self.rows, self.reads = rows, 0

    def __iter__(self):
        for row in self.rows:
            self.reads += 1
            yield row


def _split_stream(kind, source, bounds, steps, **ranks):
    if kind == "BucketIterable":
        return BucketIterable(
            source,
            length_fn="input_ids",
            boundaries=bounds,
            batch_size=32,
            shuffle_buffer=256,
            steps_per_epoch=steps,
            **ranks,
        )
    return PackIterable(
        source,
        length_fn="input_ids",
        row_length=512,
        batch_size=8,
        steps_per_epoch=steps,
        **ranks,
    )


class HFCount:
    """Rows every HF ``IterableDataset`` iterator yielded (its ``__iter__`` counted)."""

    reads = 0

    @classmethod
    def install(cls):
        import datasets

        plain = datasets.IterableDataset.__iter__
        if getattr(plain, "counted", False):
            return

        def counted(self):
            for row in plain(self):
                cls.reads += 1
                yield row

        counted.counted = True
        datasets.IterableDataset.__iter__ = counted


def _hf_sources(rows, lens, bounds):
    """Rank 0 of 2 of an HF ``IterableDataset`` (8 shards, ``split_dataset_by_node``), as
    itself (the stream checkpoints it) and behind ``__iter__`` only (the stream replays), both
    counting rows; the ranks' options (a ``BucketSpec`` gives the schedule's counts)."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    from bucketloader import BucketSpec

    HFCount.install()
    cols = {"id": [r["id"] for r in rows], "input_ids": [r["input_ids"] for r in rows]}
    ds = datasets.Dataset.from_dict(cols).to_iterable_dataset(num_shards=8)
    shard = split_dataset_by_node(ds, rank=0, world_size=2)
    spec = BucketSpec.build(lens, boundaries=bounds, batch_size=32)
    return shard, {"num_replicas": 2, "rank": 0}, spec


def _resume_split(kind, src, bounds, steps, ranks, whole, k, counter):
    """Stop ``src``'s stream after ``k`` steps; time a fresh stream's resume to its first
    batch, and count the rows it read meanwhile (``counter()``)."""
    first = _split_stream(kind, src, bounds, steps, **ranks)
    it = iter(first)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    del it
    t = time.perf_counter()
    again = _split_stream(kind, src, bounds, steps, **ranks)
    again.load_state_dict(state)
    before = counter()  # (a list's schedule head, read when the stream is built, not counted)
    it = iter(again)
    head = ids(next(it))
    seconds = time.perf_counter() - t
    reads = counter() - before
    assert [head] + [ids(b) for b in it] == whole[k:], f"{kind}: the resume differs"
    return seconds, reads, state["format"]


def split_table(n):
    """Streams split over ranks (``steps_per_epoch``) stopped 90% in: seek or checkpoint vs
    replay."""
    lens = lengths(n)
    rows = [{"id": i, "input_ids": [1] * int(x)} for i, x in enumerate(lens)]
    bounds = compute_boundaries(lens, 8)
    hf, hf_ranks, spec = _hf_sources(rows, lens, bounds)
    out = []
    for source in ("list", "hf"):
        for kind in ("BucketIterable", "PackIterable"):
            if source == "list":
                src, ranks, bnd = rows, {}, bounds
                own, plain = CountedRows(rows), CountedIter(rows)
                counters = (lambda o=own: o.reads, lambda p=plain: p.reads)
            else:
                src, ranks, bnd = hf, hf_ranks, spec
                own, plain = hf, Replayed(hf)
                counters = (lambda: HFCount.reads, lambda: HFCount.reads)
            steps = sum(1 for _ in _split_stream(kind, src, bnd, None))  # one pass's batches
            whole = [ids(b) for b in _split_stream(kind, src, bnd, steps, **ranks)]
            k = int(AT * len(whole))
            got = {
                how: _resume_split(kind, s, bnd, steps, ranks, whole, k, c)
                for how, s, c in (("own", own, counters[0]), ("replay", plain, counters[1]))
            }
            out.append({"stream": kind, "source": source, "steps": steps, "stop": k, **got})
            print(out[-1], flush=True)
    return out


SPLIT_HEAD = "## Streams split over ranks (`steps_per_epoch`)"


def write_split(split, seconds, command="--split-only"):
    """Rewrite only the split-over-ranks section of the results (``--split-only``)."""
    lines = [
        SPLIT_HEAD,
        "",
        f"`.venv/bin/python benchmarks/stream_resume.py {command}`".replace(" `", "`")
        + f" ({seconds:.0f} s{'' if command else ' in all'}). The "
        f"same {N:,} samples, a stream with `steps_per_epoch` (every rank follows the same "
        "schedule of shapes; the epoch as long as one pass over the rank's rows), stopped 90% "
        "into the epoch and resumed from its JSON state in a fresh stream. Sources: *a list* of "
        "dicts, one rank, read by index (it seeks: its exact state holds positions of the "
        "buffers, the stand-ins, the last batches and the step reached); *HF "
        f"`IterableDataset`*, 8 shards, rank 0 of 2 (`split_dataset_by_node`, {N // 2:,} rows; "
        "the schedule's counts from a `BucketSpec`): the stream checkpoints its "
        "`state_dict()` every `K` samples (`K` = `max(64, sum(B) + shuffle_buffer)` = 512 "
        "for `BucketIterable`, `max(64, 4 * open_rows)` = 1,024 for `PackIterable`) and the "
        "exact state lists those that precede a sample it names; the resume restarts the "
        "source at each. *Replay*: the same rows behind `__iter__` only, so the state is the "
        "replay state and the resume re-reads the epoch from its start. Time: building the "
        "resumed stream, `load_state_dict`, to the first batch; rows read: those the source "
        "yielded meanwhile. Every resume gives exactly the batches of the uninterrupted pass "
        "(checked). `BucketIterable`: 8 buckets, `batch_size=32`, `shuffle_buffer=256`; "
        "`PackIterable`: `row_length=512`, `batch_size=8`, `open_rows=256`.",
        "",
        "| stream | source | resume | steps | stopped after | resume (s) | rows read "
        "| replay (s) | rows read | replay / resume |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = {
        "list": ("list of dicts", "seek"),
        "hf": ("HF `IterableDataset`, rank 0 of 2", "checkpoint"),
    }
    for r in split:
        (ss, sr, _), (rs, rr, _) = r["own"], r["replay"]
        name, how = names[r["source"]]
        lines.append(
            f"| {r['stream']} | {name} | {how} | {r['steps']:,} | {r['stop']:,} | {ss:.3f} | "
            f"{sr:,} | {rs:.2f} | {rr:,} | {rs / ss:.0f}x |"
        )
    text = OUT.read_text()
    if SPLIT_HEAD in text:
        head, rest = text.split(SPLIT_HEAD, 1)
        tail = rest[rest.index("\n## ") + 1 :] if "\n## " in rest else ""
        text = head + "\n".join(lines) + "\n\n" + tail
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    OUT.write_text(text)


def main() -> None:
    start = time.perf_counter()
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if "--split-only" in sys.argv:
        write_split(split_table(N), time.perf_counter() - start)
        print(OUT.read_text())
        return
    table = resume_table(N)
    mem, bounds = memory_table()
    split = split_table(N)
    write(table, mem, bounds, time.perf_counter() - start)
    write_split(split, time.perf_counter() - start, command="")
    print(OUT.read_text())


if __name__ == "__main__":
    main()
