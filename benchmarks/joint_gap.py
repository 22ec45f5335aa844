"""The joint plan's LP relaxation against the integer optimum, where the optimum can be proved.

Run from the repository root (about 35 minutes on a loaded 2-core machine at the defaults;
run it niced, alone)::

    .venv/bin/python benchmarks/joint_gap.py [--scales 16,8,6] [--ilp-seconds 600]
        [--out /tmp/joint_gap.md]

Writes ``benchmarks/results/joint_gap.md``. Three GSM8K cases stay above 1 % of their certified
bound (``benchmarks/results/joint.md``), and the LP relaxation itself lies 1.1-2.2 % below the
best plans known (``benchmarks/results/joint_lp.md``). Either the plans are that far from the
optimum, or the LP has an integrality gap of that size. The real histogram (3,736 distinct
points, 29.6 million covering pairs) is far too large to solve exactly, so this measures the
same data made coarser: every length rounded *up* to a multiple of ``s`` (``ceil(l / s)``, in
units of ``s`` tokens), which keeps the shape of the joint distribution with fewer distinct
points. Per scale, cost and K:

* **LP**: the LP relaxation of NOTE [ The joint integer program ] over every candidate and
  covering pair (HiGHS, explicit: no column generation);
* **optimum**: the integer program over the covering pairs that the LP's duals do not fix out
  against the best plan of the two solves below (NOTE [ Certifying a target by fixing pairs ]
  in ``bucketloader/strategies/joint/_cert.py``: the Lagrangian at the LP's duals is the LP's
  value, and a plan below the best one uses only the pairs left), in HiGHS, for at most
  ``--ilp-seconds`` in all; when HiGHS finds a better plan before its proof, the pairs are
  fixed again against that one. *proved* when HiGHS closes it (or no point has a pair left),
  else HiGHS's bound and the best plan found bracket it;
* **search**: ``solve_joint(exact=False, work_limit=300)`` (the search alone, counted work:
  the same plan on every machine); **5 s solve**: ``solve_joint(time_limit=5)`` (the default,
  with its own LP rounds and integer program), its plan and its certified bound.

*int. gap* = (optimum - LP) / LP: what no bound of the LP's kind can close (the lower end of it
when the optimum is not proved: HiGHS's bound in place of the optimum).
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
from bucketloader.strategies.joint._bound import Bound, evaluate, lp_model  # noqa: E402
from bucketloader.strategies.joint._cert import fix_pairs  # noqa: E402
from bucketloader.strategies.joint._grid import MAX_GRID, Grid, coarse_values  # noqa: E402
from bucketloader.strategies.joint._ilp import _highs, _Model, num_pairs  # noqa: E402
from bucketloader.strategies.joint._lp import solve_lp  # noqa: E402
from bucketloader.strategies.joint._search import total  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "joint_gap.md"


def explicit_lp(grid: Grid, k: int, limit: float) -> tuple[float, np.ndarray]:
    """The LP relaxation over every covering pair: its value (on ``Σ w_i · size``) and the
    reaches of its duals (per point, at least the point's size)."""
    full = grid.covers(np.arange(grid.cand.shape[0]))
    _, first, inv = np.unique(
        np.packbits(full, axis=0).T, axis=0, return_index=True, return_inverse=True
    )
    inv = inv.ravel()
    weight = np.bincount(inv, weights=grid.weight)
    ci, ki = np.nonzero(full[:, first])
    nr, ncls = full.shape[0], first.size
    cost, rows, cols, vals, sense, rhs = lp_model(
        ci, ki, nr, ncls, weight[ki] * grid.cand_size[ci], k
    )
    solved = solve_lp(cost, rows, cols, vals, sense, rhs, limit)
    if solved is None:
        raise RuntimeError(f"the explicit LP did not solve in {limit} s")
    x, duals = solved
    reach = np.maximum((duals[:ncls] / weight)[inv], grid.point_size)
    return float(cost @ x), reach


def _case(hist: JointHistogram, size: str, k: int, ilp_seconds: float) -> dict:
    grid = Grid.build(hist.rows, hist.counts, coarse_values(hist.rows, hist.counts, MAX_GRID), size)
    const = float((grid.weight * grid.point_size).sum())
    out: dict = {"points": grid.weight.size, "cands": grid.cand.shape[0], "pairs": num_pairs(grid)}
    search = solve_joint(hist, k, size=size, exact=False, work_limit=300, time_limit=1)
    t0 = time.perf_counter()
    default = solve_joint(hist, k, size=size, time_limit=5)
    out.update(search=search.objective, plan5=default.objective, bound5=default.lower_bound)
    out["seconds5"] = time.perf_counter() - t0
    lp, reach = explicit_lp(grid, k, 600)
    out["lp"] = lp - const
    value, gains, reach = evaluate(grid, reach, k)
    out["lagrangian"] = value - const  # at the LP's duals: the LP's value, up to rounding
    bound = Bound(value, reach, gains, 0)
    best = min((search, default), key=lambda s: s.objective)
    upper = float(best.objective) + const
    t0 = time.perf_counter()
    deadline = t0 + ilp_seconds
    out["proved"], low, out["rounds"] = False, -math.inf, 0
    while True:
        # every plan below the best one uses only the pairs the LP's duals leave
        ids, keep = fix_pairs(grid, [bound], k, upper - 0.5)
        out["rounds"] += 1
        if out["rounds"] == 1:
            out.update(left=ids.size, left_pairs=int(keep.sum()))
        if not keep.any(axis=0).all():  # a point no plan below the best can serve
            out["proved"] = True
            break
        _, first, inv = np.unique(
            np.packbits(keep, axis=0).T, axis=0, return_index=True, return_inverse=True
        )
        weight = np.bincount(inv.ravel(), weights=grid.weight)
        ci, pi = np.nonzero(keep[:, first])
        model = _Model(ids.size, first.size, ci, pi, weight[pi] * grid.cand_size[ids][ci], k)
        details: dict = {}
        picked = _highs(model, deadline, details)
        found = math.inf
        if picked is not None and picked.size:
            found = total(grid, grid.assign(ids[picked])[1])  # (cheapest cells: at most its value)
        if details.get("proved"):
            out["proved"] = True
            upper = min(upper, found)
            break
        low = max(low, details.get("bound", -math.inf))  # valid for the plans below ``upper``
        if found < upper and deadline - time.perf_counter() > 0.2 * ilp_seconds:
            upper = found  # fix again against the better plan
            continue
        upper = min(upper, found)
        break
    out["ilp_seconds"] = time.perf_counter() - t0
    out["opt"] = round(upper - const)
    lowest = math.ceil(lp - const - 1e-6)  # the LP's value, if HiGHS's bound is not above it
    if math.isfinite(low):
        lowest = max(lowest, min(out["opt"], math.ceil(low - const - 1e-6)))
    out["opt_low"] = out["opt"] if out["proved"] else lowest
    return out


def _rel(value: int, best: int) -> str:
    return f"{value:,} ({(value - best) / best:+.2%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="16,8,6", help="comma-separated rounding steps s")
    parser.add_argument("--ks", default="8,16")
    parser.add_argument("--sizes", default="sum,prod")
    parser.add_argument("--ilp-seconds", type=float, default=600.0)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    table = np.loadtxt(DATA / FILES["gsm8k"], dtype=np.int64)
    lines = [
        "# Joint plans: the LP relaxation against the proved optimum (GSM8K, coarsened)",
        "",
        f"`python benchmarks/joint_gap.py --scales {args.scales} --ilp-seconds "
        f"{args.ilp_seconds:g}` on {platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; 1-minute load average "
        f"{_load()} at the start. GSM8K's (question, answer) lengths rounded up to multiples "
        "of *s* tokens; padding in units of *s* tokens (per input for `sum`, their product for "
        "`prod`). *LP*: the LP relaxation over every covering pair. *optimum*: the integer "
        "program (HiGHS) over the cells and pairs the LP's duals leave against the best plan "
        "of the two solves (*left*: the first round's; fixed again when HiGHS finds a better "
        "plan), proved, or bracketed between HiGHS's bound and the best plan found when its "
        "seconds ran out; the plans' percentages are against that best plan. "
        "*int. gap*: (optimum - LP) / LP, the part of the gap no LP-type bound closes (its "
        "lower end when not proved). "
        "*search*: `solve_joint(exact=False, work_limit=300)`; *5 s solve*: "
        "`solve_joint(time_limit=5)`, its plan and certified bound.",
        "",
        "| s | points | candidates (pairs) | size | K | LP | optimum | int. gap | search | "
        "5 s solve (bound) | its gap | left (pairs) | program (s) |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in (int(x) for x in args.scales.split(",")):
        hist = JointHistogram.from_lengths(-(-table // s))
        for size in args.sizes.split(","):
            for k in (int(x) for x in args.ks.split(",")):
                r = _case(hist, size, k, args.ilp_seconds)
                opt = f"{r['opt']:,}" if r["proved"] else f"{r['opt_low']:,} - {r['opt']:,}"
                igap = (r["opt_low"] - r["lp"]) / r["lp"]
                gap5 = (r["plan5"] - r["bound5"]) / r["bound5"]
                lines.append(
                    f"| {s} | {r['points']:,} | {r['cands']:,} ({r['pairs']:,}) | {size} | {k} "
                    f"| {r['lp']:,.1f} | {opt} | {'' if r['proved'] else '>= '}{igap:.2%} "
                    f"| {_rel(r['search'], r['opt'])} | {_rel(r['plan5'], r['opt'])} "
                    f"({r['bound5']:,}) | {gap5:.2%} "
                    f"| {r['left']:,} ({r['left_pairs']:,}) | {r['ilp_seconds']:.0f} |"
                )
                print(lines[-1], f"[lagrangian at duals {r['lagrangian']:.1f}]", flush=True)
    lines += ["", f"1-minute load average at the end: {_load()}.", ""]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
