"""Joint plans of histograms too large for the exact grid: this checkout against an older one.

Run from the repository root, niced and alone (about 3 minutes on a 2-core machine)::

    git worktree add /tmp/before <older commit>
    .venv/bin/python benchmarks/joint_large.py --before /tmp/before [--time-limit 5]
        [--cases translation,uniform] [--note "what the checkouts differ in"]

Writes ``benchmarks/results/joint_large.md``. A joint histogram whose grid of distinct lengths
has more than ``MAX_GRID`` points (very many distinct lengths, or three inputs) is pre-binned
(``status="coarsened"``, NOTE [ A coarsened grid's values ] in
``bucketloader/strategies/joint/_grid.py``). Each case is solved by ``solve_joint(lengths, K,
size=..., time_limit=...)`` of both checkouts, each in a fresh interpreter whose ``PYTHONPATH``
is that checkout, one right after the other (the same load). The cases:

* **translation**: 1,000,000 lognormal source lengths (``lognormal(4, 0.7)``), each target the
  source times ``lognormal(0, 0.3)`` (a language pair's length ratio);
* **translation 20k**: 20,000 pairs made the same way from ``lognormal(4.5, 0.8)`` (about
  700 distinct lengths per input: a grid just past the limit);
* **uniform**: 1,000,000 pairs uniform in 1..1999 (every pair about equally likely: the
  hardest case for a grid);
* **speech**: LibriSpeech train-clean-100's real utterance lengths (``tests/data``, 28,539
  utterances) as 20 ms frames, with a transcript of ``frames * lognormal(log 1.1, 0.25)``
  letters each (about 15 letters a second: a synthetic pairing of real durations);
* **triples**: 1,000,000 lognormal source lengths, a target as in translation and a third,
  independent input uniform in 1..299.

*padding*: the plan's padding (elements, counted by ``size``), exact on the real lengths;
*bound*: its certified lower bound; *gap* = (padding - bound) / padding; *time*: the wall time
of the call (its histogram included), with SciPy's solvers imported before it (a cold import,
once per process, which ``time_limit`` does not cover: NOTE [ Joint time limit and fallbacks ]);
*import*: how long that import took in the fresh interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "joint_large.md"

#: (name, size, K)
CASES = [
    ("translation", "sum", 16),
    ("translation", "prod", 16),
    ("translation 20k", "sum", 16),
    ("translation 20k", "prod", 16),
    ("uniform", "sum", 16),
    ("speech", "sum", 16),
    ("triples", "sum", 16),
    ("triples", "prod", 16),
]

#: What one fresh interpreter runs: the case's lengths, one solve, its figures as JSON.
SOLVE = """
import json, sys, time
import numpy as np
from bucketloader.strategies.joint import solve_joint
name, size, k, limit, data = sys.argv[1:6]
t = time.perf_counter()
import scipy.optimize  # (once per process, not covered by time_limit: timed on its own)
imported = time.perf_counter() - t
k, limit = int(k), float(limit)
rng = np.random.default_rng(0)
n = 1_000_000
if name == "translation" or name == "triples":
    src = rng.lognormal(4, 0.7, n).astype(np.int64) + 1
    tgt = (src * rng.lognormal(0, 0.3, n)).astype(np.int64) + 1
    cols = [src, tgt] + ([rng.integers(1, 300, n)] if name == "triples" else [])
    lengths = np.stack(cols, axis=1)
elif name == "translation 20k":
    src = rng.lognormal(4.5, 0.8, 20_000).astype(np.int64) + 1
    tgt = (src * rng.lognormal(0, 0.35, src.size)).astype(np.int64) + 1
    lengths = np.stack([src, tgt], axis=1)
elif name == "uniform":
    lengths = rng.integers(1, 2000, (n, 2))
else:
    frames = -(-np.loadtxt(data, dtype=np.int64) // 320)
    letters = np.ceil(frames * rng.lognormal(np.log(1.1), 0.25, frames.size)).astype(np.int64)
    lengths = np.stack([frames, letters], axis=1)
t = time.perf_counter()
sol = solve_joint(lengths, k, size=size, time_limit=limit)
print(json.dumps({
    "seconds": time.perf_counter() - t, "padding": int(sol.objective),
    "bound": int(sol.lower_bound), "status": sol.status, "rows": int(sol.info["rows"]),
    "grid": int(sol.info["grid"]), "import": imported,
}))
"""


def solve(path: Path, name: str, size: str, k: int, limit: float) -> dict:
    data = ROOT / "tests" / "data" / "librispeech_train_clean_100_samples.txt"
    env = {**os.environ, "PYTHONPATH": str(path)}
    args = [sys.executable, "-c", SOLVE, name, size, str(k), str(limit), str(data)]
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True, cwd=path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of an older commit")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--note", default="", help="what differs between the checkouts (into the results' header)"
    )
    parser.add_argument(
        "--cases", default="", help="comma-separated case names to run (default: every case)"
    )
    args = parser.parse_args()
    picked = {c.strip() for c in args.cases.split(",") if c.strip()}
    load = os.getloadavg()[0]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=args.before, capture_output=True, text=True
    ).stdout.strip()
    rows = []
    for name, size, k in CASES:
        if picked and name not in picked:
            continue
        before = solve(args.before, name, size, k, args.time_limit)
        after = solve(ROOT, name, size, k, args.time_limit)
        rows.append((name, size, k, before, after))
        print(name, size, k, before, after, flush=True)
    lines = [
        "# Joint plans of histograms too large for the exact grid",
        "",
        f"`python benchmarks/joint_large.py --before <{head}> --time-limit {args.time_limit:g}` "
        f"on {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, {date.today()}; 1-minute load average {load:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end. *before*: commit {head}; *now*: this "
        f"checkout{' (' + args.note + ')' if args.note else ''}. Padding in elements counted by "
        "`size`, exact; *gap* = "
        "(padding - bound) / padding; *time*: the whole call (the histogram included), SciPy "
        "imported before it (*import*: that import, once per process, which the limit does not "
        "cover). One run each, one after the other. The cases: see the script's docstring.",
        "",
        "| case | size | K | distinct rows | padding before | padding now | now / before "
        "| gap before | gap now | time before (s) | time now (s) | import before / now (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, size, k, b, a in rows:
        gb = (b["padding"] - b["bound"]) / b["padding"]
        ga = (a["padding"] - a["bound"]) / a["padding"]
        lines.append(
            f"| {name} | {size} | {k} | {a['rows']:,} | {b['padding']:,} | {a['padding']:,} | "
            f"{a['padding'] / b['padding']:.3f} | {gb:.1%} | {ga:.1%} | {b['seconds']:.2f} | "
            f"{a['seconds']:.2f} | {b['import']:.1f} / {a['import']:.1f} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
