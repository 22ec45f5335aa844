"""Aggregation relaxations of the joint plan: can one certify the hard GSM8K cases within 1 %?

Run from the repository root (about 15 minutes on a loaded 2-core machine)::

    .venv/bin/python benchmarks/joint_relax.py [--plan-limit 30] [--relax-limit 5]

Writes ``benchmarks/results/joint_relax.md``. The LP relaxation stops more than 1 % below the
best plans on three GSM8K cases (``benchmarks/results/joint_lp.md``), so a certificate needs a
*stronger* relaxation. This script measures one family, aggregation: partition the samples into
groups and replace each group by one sample at its smallest lengths (the input-wise minimum of
the group) carrying the group's weight. Any plan of the real histogram serves that sample at
most as dearly as it serves each member (every member's cell covers the minimum), so the
aggregated problem's optimum, minus the weighted sizes the rounding removed, is a valid lower
bound on the padding. It is small enough for the integer program only when the groups are few.

Per case and grouping the script solves the aggregated histogram with
:func:`~bucketloader.strategies.joint.solve_joint` (``--relax-limit`` seconds). Its *plan* is
an upper end of the aggregated optimum: when it is below the target (the best plan / 1.01), no
exact solve of that aggregation can certify 1 %, however long it runs. Groupings: blocks of
``s x s`` lengths, and "exact near the plan": samples within ``delta`` below one of the plan's
per-input coordinates are kept as they are, the others grouped by the plan's strips (and
blocks of ``s``).

With ``--branch-seconds S`` (default 40; 0 skips it) it also measures *branching on counts* for
``--branch-cases``: the plans with exactly ``n`` cells in a region ``R`` (cells at most the
plan's median coordinate in one input) for ``n = 0 .. K`` partition every plan (its cells
lowered to tight candidates, NOTE [ Candidate cells ]), so the least bound over the ``n`` is
valid (checked against the brute-force oracle on tiny histograms, offline). Each child's
bound is the Lagrangian of NOTE [ The Lagrangian bound ] with the shape budget split (the
``n`` largest gains in ``R``, the ``K - n`` largest outside), by the same bundle ascent as the
root, ``S`` seconds each from the root's reaches. Only the three counts nearest the plan's
are run: their least bound is an upper end on what this branching certifies at depth 1.

With ``--row-cases`` (default ``gsm8k:sum:16``; empty skips it) it measures a *row
decomposition* of the Lagrangian: the subproblem keeps, within each row of the grid (cells of
one length of the first input), the rule that a sample gains from one cell only (its cheapest
chosen one in that row: an exact DP over the row's cells, then a knapsack of the shape budget
over the rows); across rows the gains still add up. That is at or above ``L`` at every
reach (valid: a plan's own cell is one of the row's chosen cells) and is evaluated at the
bundle's best reaches after ``--branch-seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bucketloader.strategies.joint._bound as _bound  # noqa: E402
from benchmarks._data import DATA, FILES  # noqa: E402
from benchmarks.joint import _load  # noqa: E402
from bucketloader.strategies.joint import JointHistogram, solve_joint  # noqa: E402
from bucketloader.strategies.joint._grid import MAX_GRID, Grid, coarse_values  # noqa: E402
from bucketloader.strategies.joint._search import total  # noqa: E402

#: (label, block s, delta): delta None = plain ``s x s`` blocks.
GROUPINGS = (
    ("2 x 2 blocks", 2, None),
    ("3 x 3 blocks", 3, None),
    ("exact within 1 of the plan, 4 x 4 blocks", 4, 1),
    ("exact within 2 of the plan, 8 x 8 blocks", 8, 2),
    ("exact within 2 of the plan, its strips", 0, 2),
    ("exact within 4 of the plan, its strips", 0, 4),
)


def _sizes(points: np.ndarray, size: str) -> np.ndarray:
    return points.sum(axis=1) if size == "sum" else points.prod(axis=1)


def groups(points: np.ndarray, cells: np.ndarray, block: int, delta: int | None) -> np.ndarray:
    """A group id per distinct point (``(n, 2)`` lengths) for one grouping of :data:`GROUPINGS`."""
    if delta is None:
        return (points[:, 0] // block) * 100_000 + points[:, 1] // block
    key = np.zeros(points.shape[0], dtype=np.int64)
    near = np.zeros(points.shape[0], dtype=bool)
    for d in range(2):
        coords = np.unique(cells[:, d])
        strip = np.searchsorted(coords, points[:, d])
        fine = points[:, d] // block if block else 0
        key = key * 1_000_000 + strip * 1_000 + fine
        for t in coords:
            near |= (points[:, d] <= t) & (points[:, d] >= t - delta)
    exact = -(points[:, 0] * 100_000 + points[:, 1]) - 1  # negative: never a block key
    return np.where(near, exact, key)


def relax(hist: JointHistogram, k: int, size: str, gid: np.ndarray, limit: float) -> dict:
    """Solve the aggregated histogram of the groups ``gid``; values on the real padding."""
    points, weights = hist.rows.astype(np.int64), hist.counts.astype(np.int64)
    _, inv = np.unique(gid, return_inverse=True)
    low = np.full((int(inv.max()) + 1, 2), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(low, inv, points)
    wg = np.bincount(inv, weights=weights).astype(np.int64)
    agg = JointHistogram.from_lengths(np.repeat(low, wg, axis=0))
    sol = solve_joint(agg, k, size=size, time_limit=limit)
    shift = int((wg * _sizes(low, size)).sum() - (weights * _sizes(points, size)).sum())
    return {
        "groups": int(agg.rows.shape[0]),
        "plan": sol.objective + shift,
        "bound": sol.lower_bound + shift,
    }


def _split_top(g: np.ndarray, inside: np.ndarray, n: int, k: int) -> np.ndarray:
    """The ``n`` largest gains among candidates ``inside`` and the ``k - n`` largest outside."""
    picked = []
    for ids, m in ((np.flatnonzero(inside), n), (np.flatnonzero(~inside), k - n)):
        m = min(m, ids.size)
        if m > 0:
            picked.append(ids[np.argpartition(g[ids], ids.size - m)[-m:]])
    return np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)


@contextlib.contextmanager
def _counted(inside: np.ndarray, n: int):
    """The bound's Lagrangian with exactly ``n`` cells among the candidates ``inside``."""

    def evaluate(grid, reach, k, levels=_bound.LEVELS):
        g = grid.gains_at(reach)  # exact by rows on these grids (no levels)
        top = _split_top(g, inside, n, k)
        return float((grid.weight * reach).sum() - g[top].sum()), g, reach

    def supergradient(grid, g, reach, k):
        top = _split_top(g, inside, n, k)
        hit = grid.covers(top) & (grid.cand_size[top][:, None] < reach[None, :])
        return 1.0 - hit.sum(axis=0)

    with (
        mock.patch.object(_bound, "evaluate", evaluate),
        mock.patch.object(_bound, "_supergradient", supergradient),
    ):
        yield


def _at_plan(hist: JointHistogram, size: str, cells: np.ndarray) -> tuple:
    """The grid, the samples' ``Σ w_i · size``, the plan's reaches and its ``Σ w_i · size``."""
    grid = Grid.build(hist.rows, hist.counts, coarse_values(hist.rows, hist.counts, MAX_GRID), size)
    const = float((grid.weight * grid.point_size).sum())
    idx = np.stack([np.searchsorted(grid.values[d], cells[:, d]) for d in range(2)], axis=1)
    _, reach = grid.assign(grid.cand_of_flat[np.ravel_multi_index(tuple(idx.T), grid.shape)])
    upper = total(grid, reach)
    return grid, const, reach, upper


def branch(hist: JointHistogram, k: int, size: str, cells: np.ndarray, seconds: float) -> list:
    """The root bound and the count children's (module docstring), on the real padding."""
    grid, const, reach, upper = _at_plan(hist, size, cells)
    if not grid.by_rows:
        raise RuntimeError("branching is measured only where gains are exact by rows")
    target = 1.0 - 1.0 / 1.01  # stop once a bound certifies 1 %
    root = _bound.lagrangian(grid, k, reach, upper, time.perf_counter() + seconds, target, True)
    out = [("root", "", root.value - const)]
    for d in range(2):
        cut = int(np.sort(cells[:, d])[(k - 1) // 2])
        inside = grid.values[d][grid.cand[:, d]] <= cut
        count = int((cells[:, d] <= cut).sum())
        for n in range(max(count - 1, 0), min(count + 1, k) + 1):
            with _counted(inside, n):
                child = _bound.lagrangian(
                    grid, k, root.reach, upper, time.perf_counter() + seconds, target, True
                )
            region = f"input {d + 1} <= {cut} (the plan: {count})"
            out.append((region, n, child.value - const))
            print(out[-1], flush=True)
    return out


def row_value(grid: Grid, reach: np.ndarray, k: int) -> float:
    """The row decomposition's bound at ``reach`` (module docstring; ``Σ w_i · size`` scale)."""
    xs, ys = grid.values
    iscand = np.zeros(grid.shape, dtype=bool)
    iscand[tuple(grid.cand.T)] = True
    best_row = np.zeros((xs.size, k + 1))
    for x in range(xs.size):
        cols = np.flatnonzero(iscand[x])
        if cols.size == 0:
            continue
        mine = grid.point[:, 0] <= x
        size = xs[x] + ys[cols] if grid.size == "sum" else xs[x] * ys[cols]
        gain = grid.weight[mine, None] * np.maximum(reach[mine, None] - size[None, :], 0.0)
        by_y = np.zeros((ys.size, cols.size))
        np.add.at(by_y, grid.point[mine, 1], gain)
        # upto[t, j]: gain at cell j of the samples at y index <= cols[t]
        upto = np.cumsum(by_y, axis=0)[cols]
        own = np.diag(upto).copy()  # cell j the cheapest chosen: every sample up to it
        later = np.triu(np.ones((cols.size, cols.size), dtype=bool), 1)
        value, top = own.copy(), [0.0, float(own.max())]
        for _ in range(2, k + 1):  # value[j]: the best m cells, j the largest
            value = np.where(later, value[:, None] - upto, -np.inf).max(axis=0) + own
            top.append(max(top[-1], float(value.max())))
        best_row[x] = top
    total_gain = np.full(k + 1, -np.inf)
    total_gain[0] = 0.0
    for x in range(xs.size):  # knapsack of the shape budget over the rows
        new = total_gain.copy()
        for m in range(1, k + 1):
            new[m:] = np.maximum(new[m:], total_gain[: k + 1 - m] + best_row[x, m])
        total_gain = new
    return float((grid.weight * reach).sum() - total_gain.max())


def rows_bound(hist: JointHistogram, k: int, size: str, cells: np.ndarray, seconds: float) -> tuple:
    """``L`` and the row decomposition at the bundle's best reaches, on the real padding."""
    grid, const, reach, upper = _at_plan(hist, size, cells)
    best = _bound.lagrangian(grid, k, reach, upper, time.perf_counter() + seconds, 0.0, True)
    began = time.perf_counter()
    value = row_value(grid, best.reach, k)
    return best.value - const, value - const, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-limit", type=float, default=30.0, help="the real plan's solve")
    parser.add_argument("--relax-limit", type=float, default=5.0, help="each aggregated solve")
    parser.add_argument("--cases", default="gsm8k:sum:16,gsm8k:prod:8,gsm8k:prod:16")
    parser.add_argument("--branch-seconds", type=float, default=40.0, help="per bound; 0: skip")
    parser.add_argument("--branch-cases", default="gsm8k:prod:8")
    parser.add_argument("--row-cases", default="gsm8k:sum:16")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "joint_relax.md"))
    args = parser.parse_args()
    start_load = _load()
    body, plans = [], {}

    def plan_of(text: str, option: str) -> tuple:
        name, size, k = text.strip().split(":")
        if name not in FILES or size not in ("sum", "prod"):
            parser.error(f"{option}: {text!r} is not data:size:K with a data set of tests/data")
        if (name, size, k) not in plans:
            hist = JointHistogram.from_lengths(np.loadtxt(DATA / FILES[name], dtype=np.int64))
            sol = solve_joint(hist, int(k), size=size, time_limit=args.plan_limit)
            plans[name, size, k] = (name, size, k, hist, sol)
        return plans[name, size, k]

    for text in args.cases.split(","):
        name, size, k, hist, sol = plan_of(text, "--cases")
        target = sol.objective / 1.01
        for label, block, delta in GROUPINGS:
            gid = groups(hist.rows.astype(np.int64), sol.cells, block, delta)
            r = relax(hist, int(k), size, gid, args.relax_limit)
            body.append(
                f"| {name} {size} K={k} | {sol.objective:,} | {target:,.0f} | {label} | "
                f"{r['groups']:,} of {hist.rows.shape[0]:,} | {r['plan']:,} | "
                f"{(target - r['plan']) / target:.1%} | {r['bound']:,} |"
            )
            print(body[-1], flush=True)
    lines = [
        "# Joint plans: aggregation relaxations against the 1 % target",
        "",
        f"`python benchmarks/joint_relax.py --plan-limit {args.plan_limit:g} --relax-limit "
        f"{args.relax_limit:g} --cases {args.cases}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}; 1-minute load average {start_load} at the start, "
        f"{_load()} at the end. Padding in elements. *plan*: a {args.plan_limit:g} s solve of "
        "the real histogram; *target*: plan / 1.01, what a bound must reach to certify 1 %. "
        "*groups*: distinct samples of the aggregated histogram (of the real one's). "
        "*relaxed plan*: a plan of the aggregated problem, on the real padding: the aggregated "
        "optimum is at or below it, so the best bound this aggregation can give is at or below "
        "it too; *short of target* by how much. *its bound*: the aggregated solve's own "
        "certified bound (valid for the real histogram).",
        "",
        "| case | plan | target | grouping | groups | relaxed plan | short of target | its bound |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
        *body,
        "",
    ]
    if args.branch_seconds > 0:
        lines += [
            "## Branching on counts",
            "",
            f"`--branch-seconds {args.branch_seconds:g} --branch-cases {args.branch_cases}`: "
            f"the Lagrangian bound (bundle ascent, {args.branch_seconds:g} s from the plan's "
            "reaches) at the root, and in the children that fix the number of cells in a "
            f"region ({args.branch_seconds:g} s each from the root's reaches). Every plan is in "
            "one child per region, so the least child bound over all counts is a valid bound; "
            "the least over the three counts run here is an upper end on it.",
            "",
            "| case | plan | target | region | cells in it | bound | vs root |",
            "|---|---:|---:|---|---:|---:|---:|",
        ]
        for text in args.branch_cases.split(","):
            name, size, k, hist, sol = plan_of(text, "--branch-cases")
            rows = branch(hist, int(k), size, np.asarray(sol.cells), args.branch_seconds)
            root = rows[0][2]
            for region, n, value in rows:
                lines.append(
                    f"| {name} {size} K={k} | {sol.objective:,} | {sol.objective / 1.01:,.0f} | "
                    f"{region} | {n} | {value:,.0f} | {(value - root) / root:+.2%} |"
                )
            lines.append("")
    if args.row_cases:
        lines += [
            "## Row decomposition",
            "",
            f"`--row-cases {args.row_cases}`: the bound ``L`` after a {args.branch_seconds:g} s "
            "bundle ascent, and the row decomposition's bound at the same reaches (at or "
            "above ``L`` at every reach).",
            "",
            "| case | plan | L | row decomposition | its evaluation (s) |",
            "|---|---:|---:|---:|---:|",
        ]
        for text in args.row_cases.split(","):
            name, size, k, hist, sol = plan_of(text, "--row-cases")
            low, rows, took = rows_bound(
                hist, int(k), size, np.asarray(sol.cells), args.branch_seconds
            )
            lines.append(
                f"| {name} {size} K={k} | {sol.objective:,} | {low:,.0f} | {rows:,.0f} | "
                f"{took:.1f} |"
            )
            print(lines[-1], flush=True)
        lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
