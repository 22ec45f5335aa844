"""Joint plans under a token budget with ``max_shapes`` below the cover: samples lost, before and
after NOTE [ Covering the most samples within a size limit ].

Run from the repository root (about two minutes on a 2-core machine)::

    .venv/bin/python benchmarks/joint_dropfew.py [--time-limit 1]

Writes ``benchmarks/results/joint_dropfew.md``. For the paired token files in ``tests/data``
(Multi30k, Europarl, GSM8K; ``size="sum"``) at budgets from the size of the largest sample
down to the 99th percentile of the sizes, and every K in {1, 2, 4, 8} below the *cover* (the
fewest cells within the budget that hold every sample within it):

* **above**: samples whose own size exceeds the budget (``"drop"`` leaves them out first,
  ``"single"`` batches them alone: the same before and after);
* **drop, before**: what ``TokenBudget(oversize="drop")`` also left out before: the plan over
  the samples within the budget without the limit (``solve_joint`` without ``max_size``),
  whose cells above the budget lost their samples;
* **drop, after**: what ``BucketSpec.build`` leaves out now, past *above*: the samples the K
  cells within the budget holding the most leave out (exact with two inputs, so also the
  fewest any plan of K cells within the budget loses);
* **single, before / after**: the samples ``oversize="single"`` batches alone (in batches of
  one, above the budget), *above* included: before, those of the unlimited plan's cells above
  the budget; now the built plan's (K - 1 cells within it hold the most);
* **padding**: the padding ratio of the plan ``"drop"`` makes now, over the samples it keeps.

A second table is the price of the fewest lost, on GSM8K at its 99th percentile and K = 8:
keeping only the samples ``j <= K`` cells within the budget hold (the most, by
:func:`~bucketloader.strategies.joint.cover_most`) loses more of them but leaves ``K - j``
cells free for the rest, and the plan of K cells then pads less (``j = K``: what a sampler
plans now).

A third table is data past :data:`~bucketloader.strategies.joint.MAX_GRID` grid points
(20,000 seeded lognormal pairs of about 720 distinct lengths per input, as long paired
sequences have), whose grid is coarsened onto quantiles: *before*, a sample within the budget
rounded past it, and the sampler planned without the limit (what *drop, before* counts);
*after*, the grid also holds the lengths NOTE [ Cells within a size limit ] adds; *fewest*:
the fewest any K cells within the budget lose, by :func:`cover_most` on the exact grid
(``MAX_GRID`` raised for it).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.boundaries import joint_assign  # noqa: E402
from bucketloader.plan import BucketSpec, TokenBudget  # noqa: E402
from bucketloader.strategies import joint  # noqa: E402
from bucketloader.strategies.joint import (  # noqa: E402
    Joint,
    JointHistogram,
    cover_most,
    solve_joint,
)
from bucketloader.strategies.joint._grid import Grid, coarse_values, sizes_of  # noqa: E402

DATA = ROOT / "tests" / "data"  # provenance: tests/data/SOURCES.md
SETS = {
    "multi30k (en/de)": "multi30k_train_en_de_tokens.txt",
    "europarl (en/fr)": "europarl_v7_en_fr_20k_tokens.txt",
    "gsm8k (q/a)": "gsm8k_train_qa_tokens.txt",
}
#: Budgets: these percentiles of the samples' sizes (100: the largest sample).
PERCENTILES = (100, 99.9, 99)
KS = (1, 2, 4, 8)
OUT = ROOT / "benchmarks" / "results" / "joint_dropfew.md"


def cover_count(table: np.ndarray, budget: int) -> int:
    hist = JointHistogram.from_lengths(table)
    values = coarse_values(hist.rows, hist.counts, 1 << 18)
    return int(Grid.build(hist.rows, hist.counts, values, "sum", budget).cover.size)


def over_budget(
    table: np.ndarray, k: int, budget: int, time_limit: float, size: str = "sum"
) -> int:
    """Samples of ``table`` in the cells above ``budget`` of the plan without the limit (what
    both policies did before)."""
    free = solve_joint(table, k, size=size, time_limit=time_limit)
    over = sizes_of(free.cells, size) > budget
    return int(over[joint_assign(table, free.cells, size)].sum())


def built(
    table: np.ndarray, k: int, budget: int, how: str, time_limit: float, size: str = "sum"
) -> BucketSpec:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BucketSpec.build(
            table,
            max_tokens=TokenBudget(budget, oversize=how),
            size=size,
            max_shapes=k,
            strategy=Joint(time_limit=time_limit),
        )


def large_grid(time_limit: float) -> list[str]:
    """The third table: pairs past ``MAX_GRID`` grid points (see the module's docstring)."""
    rng = np.random.default_rng(0)
    table = np.round(rng.lognormal(5, 0.6, size=(20_000, 2))).astype(np.int64) + 1
    distinct = [int(np.unique(table[:, d]).size) for d in (0, 1)]
    lines = [
        "",
        f"Past {joint.MAX_GRID:,} grid points: 20,000 lognormal pairs (seed 0; {distinct[0]} "
        f"and {distinct[1]} distinct lengths), budget at the 99th percentile of the size, "
        "'drop'. Lost: past *above*; *before*: the plan without the limit (as a sample "
        "rounded past the budget made it), *after*: now, *fewest*: the fewest any K cells "
        "within the budget lose (exact grid).",
        "",
        "| size | budget | K | grid values (before -> after) | above | before | after | fewest "
        "| padding | time (s) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size in ("sum", "prod"):
        sizes = sizes_of(table, size)
        budget = int(np.percentile(sizes, 99))
        within = table[sizes <= budget]
        hist = JointHistogram.from_lengths(within)
        old = coarse_values(hist.rows, hist.counts, joint.MAX_GRID, coarse=joint.COARSE_GRID)
        new = coarse_values(
            hist.rows, hist.counts, joint.MAX_GRID, size, budget, coarse=joint.COARSE_GRID
        )
        shown = " x ".join(str(v.size) for v in old) + " -> " + " x ".join(str(v.size) for v in new)
        for k in (2, 8):
            start = time.perf_counter()
            drop = built(table, k, budget, "drop", time_limit, size)
            took = time.perf_counter() - start
            above = len(table) - len(within)
            saved, joint.MAX_GRID = joint.MAX_GRID, 1 << 20  # (the exact grid)
            try:
                fewest = int((~cover_most(within, k, size=size, max_size=budget)).sum())
            finally:
                joint.MAX_GRID = saved
            lines.append(
                f"| {size} | {budget:,} | {k} | {shown} | {above:,} | "
                f"{over_budget(within, k, budget, time_limit, size):,} | "
                f"{drop.filtered['oversize'] - above:,} | {fewest:,} | "
                f"{drop.joint[0]['padding_ratio']:.2%} | {took:.1f} |"
            )
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--time-limit", type=float, default=1.0)
    args = ap.parse_args()
    tl = args.time_limit
    load = os.getloadavg()[0]
    lines = [
        "# Joint plans with max_shapes below the cover: samples lost",
        "",
        f"`python benchmarks/joint_dropfew.py --time-limit {tl:g}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}; 1-minute load "
        f"average at the start: {load:.1f}. Budget: a percentile of the samples' sizes (tokens "
        "of both inputs; 100: the largest sample). *cover*: the fewest cells within the budget "
        "that hold every sample within it. *above*: samples above the budget themselves (lost "
        "to 'drop', alone under 'single', before and after). *drop*: the samples "
        "`TokenBudget(oversize='drop')` also leaves out, before (the plan without the limit, "
        "its cells above the budget) and after (the K cells within it holding the most: NOTE "
        "[ Covering the most samples within a size limit ]; the fewest possible, exactly). "
        "*single*: the samples `oversize='single'` batches alone, *above* included. "
        "*padding*: the 'drop' plan's now, over the samples it keeps.",
        "",
        "| data | budget (percentile) | K | cover | above | drop: before | drop: after | "
        "single: before | single: after | padding |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, file in SETS.items():
        table = np.loadtxt(DATA / file, dtype=np.int64)
        size = table.sum(axis=1)
        for pct in PERCENTILES:
            budget = int(np.percentile(size, pct))
            within = table[size <= budget]
            above = len(table) - len(within)
            need = cover_count(within, budget)
            for k in KS:
                if k >= need:
                    continue
                drop = built(table, k, budget, "drop", tl)
                single = built(table, k, budget, "single", tl)
                cs = single.cells.lengths.sum(axis=1)
                alone = int((cs[single.cell_of_sample] > budget).sum())
                lines.append(
                    f"| {name} | {budget} ({pct:g}) | {k} | {need} | {above:,} | "
                    f"{over_budget(within, k, budget, tl):,} | "
                    f"{drop.filtered['oversize'] - above:,} | "
                    f"{over_budget(table, k, budget, tl):,} | {alone:,} | "
                    f"{drop.joint[0]['padding_ratio']:.2%} |"
                )
                print(lines[-1], flush=True)
    table = np.loadtxt(DATA / SETS["gsm8k (q/a)"], dtype=np.int64)
    budget, k = int(np.percentile(table.sum(axis=1), 99)), 8
    within = table[table.sum(axis=1) <= budget]
    lines += [
        "",
        f"The price of the fewest lost: GSM8K at budget {budget} (its 99th percentile), K = {k}, "
        "'drop', keeping only the samples j cells within the budget hold (the most), the plan "
        f"of {k} cells over them (j = {k}: the plan above). Lost: past *above*.",
        "",
        "| j | lost | padding | gap |",
        "|---:|---:|---:|---:|",
    ]
    for j in range(1, k + 1):
        kept = cover_most(within, j, max_size=budget)
        sol = solve_joint(within[kept], k, max_size=budget, time_limit=tl)
        lines.append(f"| {j} | {int((~kept).sum()):,} | {sol.padding_ratio:.2%} | {sol.gap:.2%} |")
        print(lines[-1], flush=True)
    lines += large_grid(tl)
    lines += [
        "",
        f"Of {len(np.loadtxt(DATA / SETS['multi30k (en/de)']))} Multi30k, "
        f"{len(np.loadtxt(DATA / SETS['europarl (en/fr)']))} Europarl and "
        f"{len(np.loadtxt(DATA / SETS['gsm8k (q/a)']))} GSM8K pairs. 1-minute load average "
        f"at the end: {os.getloadavg()[0]:.1f}.",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
