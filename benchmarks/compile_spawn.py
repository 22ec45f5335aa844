"""A compile cache written by a plain ``python`` run, read by ``torch.multiprocessing.spawn``
ranks (and back): what inductor's cache does, and what ``precompile``'s report says.

Four processes in a row share one new ``CompileCache`` directory, each precompiling the same
step (a tiny embedding + linear model, forward and backward, inductor, ``dynamic=False``) for
the same 3 planned shapes (Multi30k token lengths, batch 16):

1. a plain ``python`` process (cold: nothing in the directory);
2. a ``torch.multiprocessing.spawn`` child (one rank, no process group);
3. a plain process again;
4. a spawned child again.

Per run: each shape's ``precompile`` row (seconds, cold / warm, "recorded before"), inductor's
FX-graph and AOTAutograd cache hits and misses, and the module the C pickler names
``torch.contiguous_format`` by (NOTE [ Where pickle finds torch's memory formats ] in
``bucketloader.compile._key``). A row that says "recorded before: yes" and "cold" is a report
that promised a warm start and compiled. Run with the code to measure first on ``PYTHONPATH``:

    PYTHONPATH=. .venv/bin/python benchmarks/compile_spawn.py --label "this branch" --append
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "compile_spawn.md"
RUNS = (("plain", "1. plain python"), ("spawn", "2. spawned child"), ("plain", "3. plain python"),
        ("spawn", "4. spawned child"))  # fmt: skip


def _precompile(rank: int, cache: str, out: str) -> None:
    """One process's precompile of the 3 planned shapes into ``cache``; its rows to ``out``."""
    import torch._inductor.config as inductor

    from bucketloader import BucketSampler
    from bucketloader.compile import CompileCache, precompile

    inductor.compile_threads = 1
    torch.set_num_threads(1)  # (the same in every run: the thread count is in the key)
    torch.manual_seed(0)
    lengths = np.loadtxt(ROOT / "tests/data/multi30k_train_en_de_tokens.txt", dtype=np.int64)
    lengths = lengths[:500, 0]
    dataset = [torch.randint(0, 100, (int(n),)) for n in lengths]
    sampler = BucketSampler(lengths, num_buckets=3, batch_size=16)
    model = torch.nn.Sequential(torch.nn.Embedding(100, 32), torch.nn.Linear(32, 100))
    compiled = torch.compile(model, dynamic=False)

    def step(batch: dict) -> None:
        logits = compiled(batch["inputs"]).flatten(0, 1)
        loss = torch.nn.functional.cross_entropy(
            logits, batch["inputs"].flatten(), reduction="none"
        )
        real = batch["attention_mask"] & batch["sample_mask"][:, None]
        (loss * real.flatten()).sum().backward()

    t0 = time.perf_counter()
    report = precompile(step, sampler, example=dataset, cache=CompileCache(cache), progress=False)
    wall = time.perf_counter() - t0
    counters = torch._dynamo.utils.counters
    keep = ("fxgraph_cache_hit", "fxgraph_cache_miss", "autograd_cache_hit", "autograd_cache_miss")
    found = {**counters["inductor"], **counters["aot_autograd"]}
    Path(out).write_text(
        json.dumps(
            {
                "rows": [[list(r.shape), r.cache, r.cached, r.seconds] for r in report.rows],
                "wall": wall,
                "counters": {k: int(found.get(k, 0)) for k in keep},
                "pickled_as": _pickled_as(),
                "main": sys.modules["__main__"].__name__,
            }
        )
    )


def _pickled_as() -> str:
    """The module the C pickler names ``torch.contiguous_format`` by here (measured by the
    script itself, so that it runs on code from before ``bucketloader.compile._key`` had it)."""
    import pickle
    import pickletools

    strings = [a for _, a, _ in pickletools.genops(pickle.dumps(torch.contiguous_format))]
    return next(str(a) for a in strings if isinstance(a, str))


def _one(mode: str, cache: str, out: str) -> None:
    if mode == "plain":
        _precompile(0, cache, out)
    else:
        torch.multiprocessing.spawn(_precompile, args=(cache, out), nprocs=1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="", help="what code ran (a branch, a commit)")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--append", action="store_true", help="add a section to --out")
    p.add_argument("--role", default="driver", choices=("driver", "plain", "spawn"))
    p.add_argument("--cache", default="")
    p.add_argument("--result", default="")
    args = p.parse_args(argv)
    if args.role != "driver":
        _one(args.role, args.cache, args.result)
        return

    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    start, load0 = time.perf_counter(), os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="compile_spawn_") as tmp:
        for i, (mode, name) in enumerate(RUNS):
            out = Path(tmp) / f"run{i}.json"
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            cmd = [sys.executable, __file__, "--role", mode, "--cache", tmp + "/cache"]
            subprocess.run([*cmd, "--result", str(out)], env=env, check=True, timeout=900)
            run = json.loads(out.read_text())
            results.append({**run, "name": name, "load": load, "process": time.perf_counter() - t0})
            print(name, json.dumps(run), flush=True)
    lines = [
        f"## {args.label or 'run'}",  # (the label names the code: no path of this machine)
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared), torch {torch.__version__}"
        f", python {platform.python_version()}, torch threads 1, inductor compile threads 1. Load "
        f"average (1 min) {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. Whole "
        f"run {time.perf_counter() - start:.0f} s.",
        "",
        f"Command: `PYTHONPATH=<code> python benchmarks/compile_spawn.py --label "
        f'"{args.label}"{" --append" if args.append else ""}`',
        "",
        "| run | `__main__` is | pickled as | load | shape | cache | recorded before | seconds | "
        "inductor hits / misses (FX graph, AOTAutograd) |",
        "|---|---|---|---:|---|---|---|---:|---|",
    ]
    for r in results:
        c = r["counters"]
        cache = (
            f"{c['fxgraph_cache_hit']} / {c['fxgraph_cache_miss']}, "
            f"{c['autograd_cache_hit']} / {c['autograd_cache_miss']}"
        )
        for j, (shape, kind, cached, seconds) in enumerate(r["rows"]):
            head = (
                f"{r['name']} | {r['main']} | {r['pickled_as']} | {r['load']:.1f}"
                if j == 0
                else " | | |"
            )
            lines.append(
                f"| {head} | {tuple(shape)} | {kind} | {'yes' if cached else 'no'} | "
                f"{seconds:.2f} | {cache if j == 0 else ''} |"
            )
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    if args.append and out.exists():
        out.write_text(out.read_text().rstrip("\n") + "\n\n" + text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("# compile_spawn results\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
