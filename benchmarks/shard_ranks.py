"""Peak RSS and time per rank of a :class:`~bucketloader.sharded.ShardedSampler` in a real job:
one process per rank, a ``gloo`` process group, ``shard_histograms`` left out (the sampler
gathers them), as ``docs/sharded.md`` tells a job to build it.

Each rank draws its own contiguous shard of N LibriSpeech lengths (resampled with replacement,
int32, a seed per rank: no rank ever holds another's lengths), then, measured: builds the
sampler (``num_buckets=16``, ``max_tokens=3_200_000``), plans epoch 0 and walks every batch of
it (``plan.batch(i)``), takes a state after a third of the epoch's batches through the sampler's
own iterator, builds a second sampler as a restarted job would, loads the state and checks that
its remaining batches equal the first plan's (exact resume on the same ranks). Every rank then
checks that the ranks took the same number of steps with the same shape at every step.

Peak RSS: ``VmHWM`` of the rank's process, reset after torch is imported and the shard drawn
(``rss before``: what the process held then, interpreter + numpy + torch + its shard). Each run
of N ranks is one ``timeout``-bounded launch of N processes.

Run: ``nice -n 10 .venv/bin/python benchmarks/shard_ranks.py --points N:RANKS ...`` (the
default: 1e7 and 1e8 samples at 1, 8 and 64 ranks, about 12 minutes on 2 shared cores, most of
it 64 processes importing torch and joining the group; run them a few at a time). Keeps every
point measured in ``benchmarks/results/shard_ranks.json`` and writes the table of all of them to
``benchmarks/results/shard_ranks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._data import resample  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "shard_ranks.md"
RAW = OUT.with_suffix(".json")  # every point measured so far, by (N, ranks): the table's rows
HEAD = 5_000  # batches iterated as lists before the state is taken, and compared after it
POINTS = ((10_000_000, 1), (10_000_000, 8), (10_000_000, 64), (100_000_000, 1),
          (100_000_000, 8), (100_000_000, 64))  # fmt: skip


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def worker(rank: int, world: int, n: int, port: int) -> dict:
    import torch.distributed as dist

    from bucketloader.sharded import ShardedSampler

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=300),
    )
    lo, hi = n * rank // world, n * (rank + 1) // world
    shard = resample(hi - lo, seed=1000 + rank)
    dist.barrier()
    _reset_peak()
    before = _status("VmHWM")
    options = {"num_buckets": 16, "max_tokens": 3_200_000, "seed": 0}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = ShardedSampler(shard, **options)
    build = time.perf_counter() - t0
    built = _status("VmRSS")
    t1 = time.perf_counter()
    plan = s.plan()
    for i in range(len(plan)):
        plan.batch(i)
    walk = time.perf_counter() - t1
    steps, cells = len(s), plan.cells.copy()
    peak_walk = _status("VmHWM")
    # exact resume on as many ranks: a third of the epoch (at most HEAD batches) through the
    # sampler's own iterator, then the next HEAD batches of the resumed sampler compared
    cut = min(len(plan) // 3, HEAD)
    it = iter(s)
    for _ in range(cut):
        next(it)
    state = json.loads(json.dumps(s.state_dict()))
    _reset_peak()
    pre_resume = _status("VmRSS")
    t2 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = ShardedSampler(shard, **options)
    again.load_state_dict(state)
    exact, left = True, 0
    for b in again:  # (compared as they come: the rest of the epoch is never held at once)
        exact = exact and np.array_equal(np.asarray(b), plan.batch(cut + left))
        left += 1
        if left == HEAD:
            break
    exact = exact and left == min(HEAD, len(plan) - cut)
    exact = exact and again.state_dict()["batches_yielded"] == cut + left
    resume = time.perf_counter() - t2
    peak_resume = _status("VmHWM")
    got: list = [None] * world
    dist.all_gather_object(got, [steps, cells.tobytes().hex()[:64], len(cells)])
    same = all(g == got[0] for g in got)
    dist.barrier()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "held": int(hi - lo),
        "rss_before": before,
        "rss_built": built,
        "peak_walk": peak_walk,
        "peak_resume": peak_resume,
        "pre_resume": pre_resume,
        "build_s": build,
        "walk_s": walk,
        "resume_s": resume,
        "steps": steps,
        "exact_resume": bool(exact),
        "same_steps_and_shapes": bool(same),
        "state_bytes": len(json.dumps(state)),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(n: int, world: int, limit: int = 470) -> dict:
    """One job of ``world`` processes under ``timeout``; every rank's JSON line."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                "timeout",
                str(limit),
                sys.executable,
                __file__,
                "--rank",
                *map(str, (r, world, n, port)),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outs = [p.communicate() for p in procs]
    codes = [
        (r, p.returncode, e[-2000:]) for r, (p, (_, e)) in enumerate(zip(procs, outs, strict=True))
    ]
    bad = [c for c in codes if c[1]]
    if bad:
        raise RuntimeError(f"{n:,} samples on {world} ranks: {bad[:2]}")
    ranks = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    return {"n": n, "world": world, "wall_s": time.perf_counter() - start, "ranks": ranks}


def _mb(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def write(results: list[dict], seconds: float) -> None:
    lines = [
        "# ShardedSampler per rank in a real job (one process per rank, gloo)",
        "",
        f"Written by `benchmarks/shard_ranks.py` (see its docstring; its runs took {seconds:.0f} s "
        "in all) on "
        f"{platform.machine()}, {os.cpu_count()} shared cores, Python "
        f"{platform.python_version()}. N LibriSpeech lengths (int32) split into contiguous "
        "shards, one process per rank, histograms gathered by the sampler over a gloo group; "
        "`num_buckets=16`, `max_tokens=3,200,000`. Peak RSS is each process's `VmHWM`, reset "
        "after torch was imported and the shard drawn; *before* is what the process held then "
        "(interpreter, numpy, torch, its shard). Build: the constructor (with its gather); "
        "walk: plan epoch 0 and every `plan.batch(i)`; resume: a second sampler built, a state "
        f"taken a third into the epoch (at most {HEAD:,} batches in) loaded, and its next "
        f"{HEAD:,} batches compared with the first plan's. Max over ranks (the mean in "
        "brackets). Peak resume: the process's peak while the second sampler is built and "
        "iterated, the first one and its plan still held (*held before resume*). Each row is "
        "the latest run of its point (the JSON keeps every point); its times depend on the "
        "shared host's load during that run, its memory does not.",
        "",
        "| N | ranks | held per rank | RSS before (MB) | peak build+walk (MB) | peak - before "
        "(MB) | held before resume (MB) | peak resume (MB) | build s | walk s | resume s | steps "
        "| same steps, shapes | exact resume | state bytes |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for res in results:
        rk = res["ranks"]

        def mx(key: str, rk: list = rk) -> float:
            return max(r[key] for r in rk)

        def mean(key: str, rk: list = rk) -> float:
            return sum(r[key] for r in rk) / len(rk)

        delta = max(r["peak_walk"] - r["rss_before"] for r in rk)
        lines.append(
            f"| {res['n']:,} | {res['world']} | {mx('held'):,} | {_mb(mx('rss_before'))} | "
            f"{_mb(mx('peak_walk'))} ({_mb(mean('peak_walk'))}) | {_mb(delta)} | "
            f"{_mb(mx('pre_resume'))} | {_mb(mx('peak_resume'))} | {mx('build_s'):.2f} | "
            f"{mx('walk_s'):.2f} | "
            f"{mx('resume_s'):.2f} | {rk[0]['steps']:,} | "
            f"{all(r['same_steps_and_shapes'] for r in rk)} | "
            f"{all(r['exact_resume'] for r in rk)} | {mx('state_bytes')} |"
        )
    OUT.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", nargs=4, type=int)
    ap.add_argument("--points", nargs="*", default=None, help="N:ranks ...")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--raw", default=None, help="also write every rank's figures (JSON) here")
    args = ap.parse_args()
    if args.rank:
        print(json.dumps(worker(*args.rank)))
        return
    points = POINTS
    if args.points:
        points = tuple(tuple(int(x) for x in p.split(":")) for p in args.points)  # type: ignore
    results = []
    for n, world in points:
        results.append(run(n, world))
        r = results[-1]
        print(n, world, f"{r['wall_s']:.0f}s",
              _mb(max(x["peak_walk"] for x in r["ranks"])),
              _mb(max(x["peak_walk"] - x["rss_before"] for x in r["ranks"])),
              all(x["exact_resume"] for x in r["ranks"]), flush=True)  # fmt: skip
    if args.raw:
        Path(args.raw).write_text(json.dumps(results))
    if not args.no_write:  # (the points of earlier runs kept, these replacing theirs)
        rows = {(r["n"], r["world"]): r for r in (json.loads(RAW.read_text()) if RAW.exists()
                                                   else [])}  # fmt: skip
        rows.update({(r["n"], r["world"]): r for r in results})
        every = [rows[k] for k in sorted(rows)]
        RAW.write_text(json.dumps(every, indent=0) + "\n")
        write(every, sum(r["wall_s"] for r in every))


if __name__ == "__main__":
    main()
