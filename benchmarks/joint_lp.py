"""Where the LP relaxation of the joint plan stops: its value, bracketed, on the hard cases.

Run from the repository root (about 12 minutes per case on a 2-core machine)::

    .venv/bin/python benchmarks/joint_lp.py [--seconds 600] [--cases gsm8k:sum:16,gsm8k:prod:8]

Writes ``benchmarks/results/joint_lp.md``. Every bound :func:`~bucketloader.strategies.joint.
solve_joint` reports comes from the LP relaxation of the facility-location model (the
Lagrangian's maximum is the LP's value, NOTE [ The Lagrangian bound ]), or from the integer
program when it fits. Per case this script takes the plan of a ``--plan-limit`` solve, then runs
the bound's own code far past any time limit: the bundle ascent, then the LP rounds by column
generation (NOTE [ The LP bound by columns ]) for ``--seconds``. That brackets the LP's value:

* **below**: the best Lagrangian bound found (valid for every plan);
* **above**: the lowest restricted LP's value (the full LP with fewer pairs: at or above the
  LP's value).

If the plan pads more than 1 % above the upper end, no bound of the LP's kind can certify 1 %
for that plan, however long it runs: only a stronger relaxation (branching, cuts) can. The
candidates that survive fixing by the final bound (NOTE [ Fixing candidates by the bound ]) and
their covering pairs say how large the integer program over them would be.
"""

from __future__ import annotations

import argparse
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
from bucketloader.strategies.joint._bound import lagrangian, lp_bound, survivors  # noqa: E402
from bucketloader.strategies.joint._grid import MAX_GRID, Grid, coarse_values  # noqa: E402
from bucketloader.strategies.joint._ilp import num_pairs  # noqa: E402
from bucketloader.strategies.joint._search import total  # noqa: E402

#: The paired files (``benchmarks/joint.py``'s).
PAIRED = ("multi30k", "europarl", "gsm8k", "coco")


def bracket(name: str, size: str, k: int, plan_limit: float, seconds: float) -> dict:
    """The plan of a ``plan_limit`` solve and the LP's value bracketed after ``seconds``."""
    hist = JointHistogram.from_lengths(np.loadtxt(DATA / FILES[name], dtype=np.int64))
    sol = solve_joint(hist, k, size=size, time_limit=plan_limit)
    grid = Grid.build(hist.rows, hist.counts, coarse_values(hist.rows, hist.counts, MAX_GRID), size)
    const = float((grid.weight * grid.point_size).sum())
    idx = np.stack([np.searchsorted(grid.values[d], sol.cells[:, d]) for d in range(2)], axis=1)
    cells = grid.cand_of_flat[np.ravel_multi_index(tuple(idx.T), grid.shape)]
    if (cells < 0).any():
        raise RuntimeError("the plan's cells are not candidate cells")
    _, reach = grid.assign(cells)
    upper = total(grid, reach)
    began = time.perf_counter()
    bound = lagrangian(grid, k, reach, upper, began + seconds, 0.0)
    bound, _ = lp_bound(grid, k, cells, bound, upper, began + seconds, 0.0)
    spent = time.perf_counter() - began
    rounds = bound.log or []
    above = min((r[4] for r in rounds if len(r) > 4), default=upper)  # (a round cut short: none)
    kept = survivors(bound, k, upper, cells)
    return {
        "case": f"{name} {size} K={k}",
        "plan": sol.objective,
        "plan_bound": sol.lower_bound,
        "below": bound.value - const,
        "above": above - const,
        "rounds": len(rounds),
        "seconds": spent,
        "survivors": int(kept.size),
        "candidates": int(grid.cand.shape[0]),
        "pairs": num_pairs(grid, kept),
        "all_pairs": num_pairs(grid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="LP rounds per case")
    parser.add_argument("--plan-limit", type=float, default=30.0, help="the plan's solve")
    parser.add_argument("--cases", default="gsm8k:sum:16,gsm8k:prod:8,gsm8k:prod:16")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "joint_lp.md"))
    args = parser.parse_args()
    cases = []
    for text in args.cases.split(","):
        name, size, k = text.strip().split(":")
        if name not in PAIRED or size not in ("sum", "prod"):
            parser.error(f"--cases: {text!r} is not data:size:K with data in {', '.join(PAIRED)}")
        cases.append((name, size, int(k)))
    start_load = _load()
    rows = [bracket(name, size, k, args.plan_limit, args.seconds) for name, size, k in cases]
    lines = [
        "# Joint plans: where the LP relaxation stops",
        "",
        f"`python benchmarks/joint_lp.py --seconds {args.seconds:g} --plan-limit "
        f"{args.plan_limit:g} --cases {args.cases}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}; 1-minute load average {start_load} at the start, "
        f"{_load()} at the end. Padding in elements. *plan*: a {args.plan_limit:g} s solve's "
        "padding and its certified bound. *LP value*: bracketed after the bundle ascent and "
        f"{args.seconds:g} s of LP rounds, between the best Lagrangian bound (valid for every "
        "plan) and the lowest restricted LP's value (the LP with fewer pairs: at or above the LP). "
        "*least gap*: (plan - upper end) / upper end, the smallest gap any bound of the LP's "
        "kind can certify for this plan. *survivors*: candidates that the final bound does not "
        "fix out (NOTE [ Fixing candidates by the bound ]), with their covering pairs: the size "
        "of the integer program over them.",
        "",
        "| case | plan | its bound | LP value (below - above) | least gap | LP rounds | "
        "seconds | survivors | pairs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        least = (r["plan"] - r["above"]) / r["above"]
        lines.append(
            f"| {r['case']} | {r['plan']:,} | {r['plan_bound']:,} | {r['below']:,.0f} - "
            f"{r['above']:,.0f} | {least:.2%} | {r['rounds']} | {r['seconds']:.0f} | "
            f"{r['survivors']:,} of {r['candidates']:,} | {r['pairs']:,} of {r['all_pairs']:,} |"
        )
        print(lines[-1], flush=True)
    lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
