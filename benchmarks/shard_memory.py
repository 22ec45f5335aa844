"""Peak memory and time of a :class:`~bucketloader.ShardedSampler`'s construction on rank 0 of
8 and 64 ranks, when the ranks' histograms are gathered under ``torch.distributed`` (NOTE
[ Gathered histograms ] in ``bucketloader/sharded.py``).

Each simulated rank holds 1 M lengths like audio measured in samples (lognormal around 150 k,
clipped to 600 k: about 335 k distinct lengths per shard, as session 23 measured). No process
group is started: ``all_gather_object`` is replaced by a function that hands every rank's real
payload (captured from that rank's own call) to rank 0, which is then built as it is in a job,
with ``shard_histograms`` left out. The payloads are made before the measurement, so the peak
(``tracemalloc``, from the start of the constructor to its end) leaves out what
``all_gather_object`` delivers and counts what the sampler parses (about the gathered bytes
again), decodes and builds from it. Time is the constructor's wall time (the median of
``REPEATS`` builds; on a shared 2-core host the figures are relative). Held: what the
constructor leaves allocated (``tracemalloc``'s current size at its end, the sampler alive).
Configurations: the default (the global solve and the envelope's, NOTE [ Sharded plan ] 6),
``defer=0.5`` (per-rank cell means, 7) and ``exchange=True`` (8; measured up to the gather of
the rows it moves, which the histograms do not enter; no held figure).

Run: ``PYTHONPATH=$PWD python benchmarks/shard_memory.py`` (about 4 minutes; ``--ranks 8`` for
one world size); writes ``benchmarks/results/shard_memory.md``. ``--before FILE`` adds the
gathered bytes, peak and time of a results file it wrote on an earlier commit (session 24: main
at b29b431, written to a scratch file with ``--out``, then this commit with ``--before`` that
file).
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch.distributed as dist  # noqa: E402

import bucketloader.sharded as sh  # noqa: E402
from bucketloader import LengthHistogram  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "shard_memory.md"
PER_RANK = 1_000_000
LONGEST = 600_000
REPEATS = 3
OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "defer=0.5": {"defer": 0.5},
    "exchange=True": {"exchange": True},
}


def shard(rank: int) -> np.ndarray:
    """Rank ``rank``'s lengths: audio clips in samples (16 kHz, about 9 s typical)."""
    g = np.random.default_rng(rank + 1)
    lengths = g.lognormal(np.log(LONGEST / 4), 0.6, PER_RANK)
    return np.clip(lengths, 1, LONGEST).astype(np.int64)


class _Captured(Exception):
    pass


def payloads(world: int) -> tuple[list[Any], np.ndarray, LengthHistogram]:
    """Every rank's gathered payload (pickled, as ``all_gather_object`` ships it), rank 0's
    lengths and histogram."""
    out: list[Any] = []

    def capture(gathered: list[Any], obj: Any) -> None:
        out.append(pickle.dumps(obj))
        raise _Captured

    dist.all_gather_object = capture  # type: ignore[assignment]
    mine = np.zeros(0, dtype=np.int64)
    own = None
    for r in range(world):
        lengths = shard(r)
        h = LengthHistogram.from_lengths(lengths)
        if r == 0:
            mine, own = lengths, h
        try:
            sh._gather_histograms(h, {"seed": "0"}, world, r, exchange=False)
        except _Captured:
            pass
    assert own is not None
    return out, mine, own


def _stop(payload: Any) -> Any:
    raise _Captured


def build(world: int, mine: np.ndarray, delivered: list[Any], opts: dict[str, Any]) -> Any:
    """Rank 0's sampler, its histograms gathered from ``delivered`` (rank 0's own: the payload
    its call makes)."""

    def give(gathered: list[Any], obj: Any) -> None:
        for i, p in enumerate(delivered):
            gathered[i] = p if i else obj

    if delivered:
        dist.all_gather_object = give  # type: ignore[assignment]
    extra: dict[str, Any] = dict(opts)
    if opts.get("exchange"):
        extra["shard_indices"] = np.arange(mine.size, dtype=np.int64)
        extra["gather"] = _stop  # (the rows' gather: measured up to it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sh.ShardedSampler(
            mine,
            num_replicas=world,
            rank=0,
            seed=0,
            num_buckets=16,
            max_tokens=8 * LONGEST,
            **extra,
        )


def measure(world: int) -> list[dict[str, Any]]:
    sh.initialised = lambda: True  # type: ignore[assignment]
    sh.world_size = lambda: world  # type: ignore[assignment]
    raw, mine, own = payloads(world)
    gathered_mb = sum(len(p) for p in raw) / 1e6
    rows = []
    for name, opts in OPTIONS.items():
        # the other ranks' payloads, unpickled before the measurement (rank 0's own is the
        # one its call makes, with its arguments)
        delivered = [pickle.loads(p) for p in raw]
        # the other ranks were built with the same arguments as rank 0: theirs agree
        probe: list[Any] = []

        def grab(gathered: list[Any], obj: Any, probe: list[Any] = probe) -> None:
            probe.append(obj)
            raise _Captured

        dist.all_gather_object = grab  # type: ignore[assignment]
        try:
            build(world, mine, [], opts)
        except _Captured:
            pass
        args = json.loads(probe[0])["arguments"]
        for i in range(1, world):
            item = json.loads(delivered[i])
            item["arguments"] = args
            delivered[i] = json.dumps(item)
        times, peaks, held = [], [], []
        for _ in range(REPEATS):
            tracemalloc.start()
            t = time.perf_counter()
            try:
                s = build(world, mine, delivered, opts)
            except _Captured:  # (exchange: its rows' gather)
                s = None
            times.append(time.perf_counter() - t)
            now, peak = tracemalloc.get_traced_memory()
            peaks.append(peak / 1e6)
            held.append(now / 1e6)
            tracemalloc.stop()
            del s
        rows.append(
            {
                "ranks": world,
                "options": name,
                "distinct": int(own.values.size),
                "gathered_mb": gathered_mb,
                "peak_mb": max(peaks),
                "held_mb": max(held) if opts.get("exchange") is None else None,
                "seconds": statistics.median(times),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[8, 64])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--before",
        type=Path,
        help="a results file this script wrote on an earlier commit: its peak and time are "
        "shown beside these",
    )
    args = parser.parse_args()
    before = _read(args.before) if args.before else {}
    rows = [row for world in args.ranks for row in measure(world)]
    lines = [
        "# ShardedSampler construction with gathered histograms: peak memory and time",
        "",
        "Written by `benchmarks/shard_memory.py` (see its docstring). Rank 0 of the ranks, "
        f"each with {PER_RANK:,} lengths of audio in samples (distinct per shard: "
        f"{rows[0]['distinct']:,}); `num_buckets=16`, `max_tokens={8 * LONGEST:,}`. Gathered: "
        "every rank's pickled payload, what `all_gather_object` delivers (not in the peak). "
        "Peak: `tracemalloc`, the constructor alone. Time: the constructor's median of "
        f"{REPEATS} (shared host: relative).",
        "",
    ]
    if before:
        lines += [
            "Before: the same script run on an earlier commit, on the same host in the same "
            f"session (its `--out` file, {args.before.name}, a scratch file not kept: the "
            "columns below hold what it measured).",
            "",
        ]
    head = "| ranks | options | gathered MB | peak MB | held MB | construction s |"
    rule = "|---|---|---|---|---|---|"
    if before:
        head += " gathered MB before | peak MB before | construction s before |"
        rule += "---|---|---|"
    lines += [head, rule]
    for r in rows:
        held = "-" if r["held_mb"] is None else f"{r['held_mb']:.1f}"
        line = (
            f"| {r['ranks']} | {r['options']} | {r['gathered_mb']:.1f} | {r['peak_mb']:.1f} | "
            f"{held} | {r['seconds']:.2f} |"
        )
        if before:
            old = before.get((str(r["ranks"]), r["options"]))
            line += " " + " | ".join(old or ("-", "-", "-")) + " |"
        lines.append(line)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def _read(path: Path) -> dict[tuple[str, str], tuple[str, str, str]]:
    """Gathered bytes, peak and time by (ranks, options) from a results file this script
    wrote (its first six columns)."""
    out = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and cells[0].isdigit():
            out[(cells[0], cells[1])] = (cells[2], cells[3], cells[5])
    return out


if __name__ == "__main__":
    main()
