"""Joint plans under a token budget: cells within ``max_tokens`` against the unlimited plan.

Run from the repository root (about two minutes on a 2-core machine)::

    .venv/bin/python benchmarks/joint_budget.py [--time-limit 5]

Writes ``benchmarks/results/joint_budget.md``. For every paired file in ``tests/data``
(Multi30k, Europarl, GSM8K: ``size="sum"``, tokens of both inputs; COCO sizes: ``"prod"``,
pixels) the budget is the size of its largest sample (the tightest ``max_tokens`` every sample
fits: a batch of one row there), and for K in {4, 8, 16}:

* **unlimited**: :func:`~bucketloader.strategies.joint.solve_joint` without a limit (the plan
  before NOTE [ Cells within a size limit ]): its largest cell's size, and the samples in its
  cells above the budget (what ``TokenBudget(oversize="drop")`` left out; with ``"error"`` the
  sampler refused the plan);
* **within the budget**: ``solve_joint(..., max_size=budget)`` (what a sampler with that
  ``max_tokens`` plans now): its padding, certified bound (over plans within the budget), gap,
  largest cell and time;
* **cover**: the fewest cells within the budget that cover every sample (below it, no plan).

Padding counts are exact (:func:`~bucketloader.boundaries.joint_padding`).
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

from bucketloader.boundaries import joint_assign  # noqa: E402
from bucketloader.strategies.joint import JointHistogram, solve_joint  # noqa: E402
from bucketloader.strategies.joint._grid import Grid, coarse_values  # noqa: E402

DATA = ROOT / "tests" / "data"  # provenance: tests/data/SOURCES.md
SETS = {
    "multi30k (en/de)": ("multi30k_train_en_de_tokens.txt", "sum"),
    "europarl (en/fr)": ("europarl_v7_en_fr_20k_tokens.txt", "sum"),
    "gsm8k (q/a)": ("gsm8k_train_qa_tokens.txt", "sum"),
    "coco (w/h)": ("coco_val2017_image_width_height.txt", "prod"),
}
OUT = ROOT / "benchmarks" / "results" / "joint_budget.md"


def sizes(rows: np.ndarray, size: str) -> np.ndarray:
    return rows.sum(axis=1) if size == "sum" else rows.prod(axis=1)


def cover_count(table: np.ndarray, size: str, budget: int) -> int:
    hist = JointHistogram.from_lengths(table)
    values = coarse_values(hist.rows, hist.counts, 1 << 18)
    return int(Grid.build(hist.rows, hist.counts, values, size, budget).cover.size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=5.0)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    lines = [
        "# Joint plans under a token budget: cells within max_tokens",
        "",
        f"`python benchmarks/joint_budget.py --time-limit {args.time_limit:g}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}; 1-minute load average at the start: {load:.1f}. Budget: "
        "the size of the set's largest sample (tokens of both inputs; COCO: pixels), the "
        "tightest `max_tokens` every sample fits. *unlimited*: the plan without a limit, its "
        "largest cell and the samples in cells above the budget (left out by "
        "`oversize='drop'`; refused by the default `'error'`). *within*: the plan a sampler "
        "with that `max_tokens` makes now (NOTE [ Cells within a size limit ]): padding in "
        "elements, its certified bound over plans within the budget, the gap, its largest cell. "
        "*cover*: the fewest cells within the budget that cover every sample.",
        "",
        "| data | budget | K | cover | unlimited: largest cell | unlimited: samples above "
        "the budget | within: padding | bound | gap | largest cell | time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (file, size) in SETS.items():
        table = np.loadtxt(DATA / file, dtype=np.int64)
        budget = int(sizes(table, size).max())
        need = cover_count(table, size, budget)
        for k in (4, 8, 16):
            free = solve_joint(table, k, size=size, time_limit=args.time_limit)
            over = sizes(free.cells, size) > budget
            above = int(over[joint_assign(table, free.cells, size)].sum())
            row = (
                f"| {name} | {budget:,} | {k} | {need} | {int(sizes(free.cells, size).max()):,} "
                f"| {above:,} of {len(table):,} |"
            )
            if k < need:
                lines.append(row + " no plan: K below the cover | - | - | - | - |")
                continue
            t0 = time.perf_counter()
            sol = solve_joint(table, k, size=size, time_limit=args.time_limit, max_size=budget)
            took = time.perf_counter() - t0
            top = int(sizes(sol.cells, size).max())
            assert top <= budget and (joint_assign(table, sol.cells, size) >= 0).all()
            lines.append(
                row + f" {sol.objective:,} | {sol.lower_bound:,} | {sol.gap:.2%} | {top:,} | "
                f"{took:.2f} |"
            )
            print(lines[-1], flush=True)
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f}.", ""]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
