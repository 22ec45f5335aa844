"""How good the plans of the open joint cases get with counted work: the shakes, and their patience.

Run from the repository root (about 3.5 minutes of CPU at the defaults, 5.5 with ``--seeds 0``)::

    .venv/bin/python benchmarks/joint_plans.py [--tables 3000] [--seeds 0,1]
        [--cases gsm8k:sum:16,gsm8k:prod:8,gsm8k:prod:16] [--out /tmp/joint_plans.md]

Writes ``benchmarks/results/joint_plans.md``. On the three GSM8K cases that no certified bound
closes to 1 % (``benchmarks/results/joint.md``), the question is the other side: is there a plan
much better than ours? Per case, from the first plan (both starts' descents and swaps, NOTE
[ The search under load ] in ``bucketloader/strategies/joint/_search.py``), the shakes
(:func:`~bucketloader.strategies.joint._search.iterate`, NOTE [ Shakes ]) run for at most
``--tables`` exchange tables:

* **patience 4**: stopped after 4 K shakes in a row without a better plan, as ``work_limit``
  did before ``JOINT_FORMAT`` 6 (and as the time-limited shakes still do);
* **solve_joint(work_limit=N)**: the solver itself, whose shakes now stop at the count alone
  (NOTE [ Work instead of seconds ]); its padding must equal the same shakes run by hand
  without patience (checked);
* **other seeds**: the same shakes without patience from other seeds (``--seeds``), for the
  spread between runs.

CPU seconds are process time (the machine is shared: wall time says little), the search alone
for the shakes and the whole solve (a 1 s bound included) for ``solve_joint``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._data import DATA, FILES  # noqa: E402
from benchmarks.joint import _load  # noqa: E402
from bucketloader.strategies.joint import JointHistogram, solve_joint  # noqa: E402
from bucketloader.strategies.joint._grid import MAX_GRID, Grid, coarse_values  # noqa: E402
from bucketloader.strategies.joint._search import first_plan, iterate, total  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "joint_plans.md"


def _pad(grid: Grid, const: float, cells: np.ndarray) -> int:
    return round(total(grid, grid.assign(cells)[1]) - const)


def _case(name: str, size: str, k: int, tables: int, seeds: list[int]) -> list[str]:
    hist = JointHistogram.from_lengths(np.loadtxt(DATA / FILES[name], dtype=np.int64))
    grid = Grid.build(hist.rows, hist.counts, coarse_values(hist.rows, hist.counts, MAX_GRID), size)
    const = float((grid.weight * grid.point_size).sum())
    t = time.process_time()
    cells, _, _ = first_plan(grid, k, math.inf)
    first, first_cpu = _pad(grid, const, cells), time.process_time() - t
    t = time.process_time()
    kept, kept_shakes = iterate(grid, k, cells, math.inf, steps=tables)
    kept_cpu = time.process_time() - t
    t = time.process_time()
    sol = solve_joint(hist, k, size=size, work_limit=tables, time_limit=1.0)
    solve_cpu = time.process_time() - t
    found = [(0, int(sol.objective), int(sol.info["shakes"]), solve_cpu)]
    for seed in seeds:
        t = time.process_time()
        best, shakes = iterate(grid, k, cells, math.inf, seed=seed, patience=math.inf, steps=tables)
        found.append((seed, _pad(grid, const, best), shakes, time.process_time() - t))
    if 0 in seeds:  # the solver's shakes are these (seed 0, no patience)
        same = "yes" if found[0][1] == next(f[1] for f in found[1:] if f[0] == 0) else "NO"
    else:
        same = "not run"
    others = "; ".join(f"seed {s}: {v:,} ({n} shakes, {c:.0f} s)" for s, v, n, c in found[1:])
    return [
        f"| {name} {size} K={k} | {first:,} ({first_cpu:.1f} s) "
        f"| {_pad(grid, const, kept):,} ({kept_shakes} shakes, {kept_cpu:.1f} s) "
        f"| {found[0][1]:,} ({found[0][2]} shakes, {found[0][3]:.1f} s) | {same} "
        f"| {others or '-'} |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=3000, help="exchange tables per search")
    parser.add_argument("--seeds", default="", help="other seeds, run without patience: 0,1,2")
    parser.add_argument("--cases", default="gsm8k:sum:16,gsm8k:prod:8,gsm8k:prod:16")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.tables < 1:
        parser.error(f"--tables must be an int >= 1, got --tables={args.tables}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
        cases = [(n, s, int(k)) for n, s, k in (c.split(":") for c in args.cases.split(","))]
    except ValueError as exc:
        parser.error(f"--seeds is comma-separated ints, --cases name:size:K,...; got {exc}")
    extra = "".join(
        f" {flag} {value}"
        for flag, value, default in (
            ("--seeds", args.seeds, ""),
            ("--cases", args.cases, "gsm8k:sum:16,gsm8k:prod:8,gsm8k:prod:16"),
        )
        if value != default
    )
    lines = [
        "# Joint plans of the open cases under counted work: the shakes and their patience",
        "",
        f"`python benchmarks/joint_plans.py --tables {args.tables}{extra}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; 1-minute load average "
        f"{_load()} at the start. Padding in elements; CPU seconds (process time) in brackets. "
        "*first plan*: both starts' descents and swaps. *patience 4*: the shakes from it "
        f"for at most {args.tables} exchange tables, stopped after 4 K shakes in a row without "
        "a better plan (`work_limit` before JOINT_FORMAT 6). *solve_joint*: "
        f"`solve_joint(..., work_limit={args.tables}, time_limit=1)`, whose shakes stop at "
        "the count alone (the whole solve's CPU). *same*: whether that equals the shakes by "
        "hand, seed 0, no patience. Certified bounds: `benchmarks/results/joint.md`.",
        "",
        "| case | first plan | patience 4 | solve_joint | same | without patience, by seed |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, size, k in cases:
        lines += _case(name, size, k, args.tables, seeds)
        print(lines[-1], flush=True)
    lines += ["", f"1-minute load average at the end: {_load()}.", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
