"""The joint plan's integer program by Benders decomposition, against the explicit model.

Run from the repository root, niced, one case per process (each up to ``--seconds`` plus the
two solves; all 12 took 40 minutes at load 9-14 on a 2-core machine)::

    for c in 16:sum:8 16:sum:16 ... 6:prod:8; do
        nice -n 10 .venv/bin/python benchmarks/joint_benders.py --cases $c --seconds 540 \\
            --records /tmp/benders.jsonl --out /tmp/partial.md
    done
    .venv/bin/python benchmarks/joint_benders.py --table /tmp/benders.jsonl \\
        [--same-load /tmp/joint_gap_8_sum_8.md,...]

Writes ``benchmarks/results/joint_benders.md``. The explicit integer program (NOTE [ The joint
integer program ] in ``bucketloader/strategies/joint/_ilp.py``: one variable per covering pair)
proved GSM8K rounded to multiples of s = 16 and 8 tokens, but nothing at s = 6, prod
(``benchmarks/results/joint_gap.md``, column *program (s)*). This measures the Benders
decomposition of the same p-median (Duran-Mateluna, Ales and Elloumi, "An efficient Benders
decomposition for the p-median problem", EJOR 2023): the master holds only the cells' binaries
``y_c`` and one continuous ``theta_i`` per point (its cost per sample), minimising
``Σ w_i theta_i`` subject to ``Σ y_c <= K``, every point covered by an open cell, and the cuts

    theta_i >= D - Σ_{c covers i, size(c) < D} (D - size(c)) y_c

for the sizes ``D`` of the cells covering ``i`` (valid: with ``y`` integral the right-hand side
is at most the cheapest open cell's size; tight at that size). For any ``y`` the most violated
``D`` of a point is the first of its sorted covering sizes where the ``y`` of the cells up to it
sums to 1, in closed form (NOTE [ Benders cuts for the joint plan ] in ``_bound.py``).

* **LP loop**: the master's LP relaxation, re-solved (HiGHS, warm) with every point's most
  violated cut until none is: its value is the classic LP's (column *LP*, checked against the
  explicit LP's value in ``joint_gap.md``);
* **MIP**: the master with those cuts as an integer program (HiGHS, no lazy constraints:
  highspy's ``kCallbackMipDefineLazyConstraints`` has no way to hand a constraint back), from the
  best plan known; each integer solution HiGHS finds is checked in a callback and its violated
  cuts are kept; when the optimum's ``Σ w theta`` lies below its plan's true padding, the kept
  cuts join the master and it is solved again. The master is a relaxation, so every value or
  bound HiGHS proves on it bounds the plan's optimum from below; a plan's own padding bounds it
  from above; *proved* when they meet.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
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

OUT = ROOT / "benchmarks" / "results" / "joint_benders.md"
#: The cases of ``joint_gap.md``.
CASES = ",".join(f"{s}:{size}:{k}" for s in (16, 8, 6) for size in ("sum", "prod") for k in (8, 16))


class Benders:
    """The Benders master of the plan over every candidate of ``grid`` (at most ``k`` open)."""

    def __init__(self, grid: Grid, k: int) -> None:
        self.grid, self.k = grid, k
        m, n = grid.cand.shape[0], grid.weight.size
        self.m, self.n = m, n
        cov = grid.covers(np.arange(m))  # (m, n)
        size = grid.cand_size.astype(np.float64)
        # per point, its covering cells by size (CSR over points)
        ci, pi = np.nonzero(cov.T)  # (point, cell) pairs, by point
        pi, ci = ci, pi
        order = np.lexsort((size[ci], pi))
        self.cell = ci[order]
        self.cost = size[self.cell]
        self.ptr = np.searchsorted(pi[order], np.arange(n + 1))
        self.seg = pi[order]
        self.pairs = int(ci.size)
        # coverage rows only for the points no other point dominates (they imply the rest)
        pt = grid.point
        dom = np.zeros(n, dtype=bool)
        for i in range(n):
            ge = (pt >= pt[i]).all(axis=1)
            ge[i] = False
            dom[i] = ge.any() or ((pt == pt[i]).all(axis=1).nonzero()[0][0] != i)
        self.maximal = np.flatnonzero(~dom)
        self.cov = cov

    # -- cuts ---------------------------------------------------------------------------------
    def separate(
        self, y: np.ndarray, theta: np.ndarray, at: np.ndarray | None = None, tol: float = 1e-7
    ) -> list[tuple]:
        """Every point's cut violated at ``(y, theta)``: ``(i, D, cells, coefs)``, ``D`` the most
        violated at ``at`` (``y`` itself by default; elsewhere for the in-out loop)."""
        sep = np.clip(y if at is None else at, 0.0, 1.0)[self.cell]
        cum = np.cumsum(sep)
        start = np.concatenate([[0.0], cum])[self.ptr[:-1]]
        cum -= np.repeat(start, np.diff(self.ptr))
        # first position per point where the cells so far sum to 1 (the last when none does)
        pos = np.where(cum >= 1.0 - 1e-9, np.arange(self.cell.size), self.cell.size)
        del cum, sep
        first = np.minimum.reduceat(pos, self.ptr[:-1])
        del pos
        first = np.where(first >= self.ptr[1:], self.ptr[1:] - 1, first)
        big_d = self.cost[first]
        # f = D - Σ_{pos of i, cost < D} (D - cost) y
        slack = np.maximum(big_d[self.seg] - self.cost, 0.0)
        slack *= np.clip(y, 0.0, 1.0)[self.cell]
        f = big_d - np.add.reduceat(slack, self.ptr[:-1])
        del slack
        cuts = []
        for i in np.flatnonzero(theta < f - tol * np.maximum(1.0, np.abs(f))):
            a, b = self.ptr[i], self.ptr[i + 1]
            c = self.cost[a:b]
            below = c < big_d[i]
            cuts.append((int(i), float(big_d[i]), self.cell[a:b][below], big_d[i] - c[below]))
        return cuts

    def true_cost(self, y: np.ndarray) -> np.ndarray:
        """Each point's cheapest open covering cell's size (``inf`` where none)."""
        open_ = y > 0.5
        c = np.where(open_[self.cell], self.cost, np.inf)
        return np.minimum.reduceat(c, self.ptr[:-1])

    # -- the master in HiGHS ------------------------------------------------------------------
    def build(self):
        import highspy

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        m, n = self.m, self.n
        inf = highspy.kHighsInf
        lo_theta = self.cost[self.ptr[:-1]]  # the cheapest covering size
        h.addVars(m + n, np.zeros(m + n), np.concatenate([np.ones(m), np.full(n, inf)]))
        h.changeColsCost(
            m + n, np.arange(m + n, dtype=np.int32), np.concatenate([np.zeros(m), self.grid.weight])
        )
        h.changeColsBounds(n, np.arange(m, m + n, dtype=np.int32), lo_theta, np.full(n, inf))
        # Σ y <= K
        h.addRow(-inf, float(self.k), m, np.arange(m, dtype=np.int32), np.ones(m))
        # coverage of the maximal points
        rows = [np.flatnonzero(self.cov[:, i]) for i in self.maximal]
        starts = np.concatenate([[0], np.cumsum([r.size for r in rows])[:-1]]).astype(np.int32)
        idx = np.concatenate(rows).astype(np.int32)
        h.addRows(
            len(rows), np.ones(len(rows)), np.full(len(rows), inf), idx.size, starts, idx,
            np.ones(idx.size),
        )  # fmt: skip
        self.h = h
        self.ncuts = 0
        self.have: set[tuple[int, float]] = set()
        return h

    def add(self, cuts: list[tuple]) -> None:
        import highspy

        # a cut already in the master (violated only within HiGHS's tolerances) is not added
        # again: the LP loop would repeat it forever (seen on the real GSM8K)
        cuts = [c for c in cuts if (c[0], c[1]) not in self.have]
        self.have.update((c[0], c[1]) for c in cuts)
        if not cuts:
            return
        starts, idx, val, lo = [], [], [], []
        nnz = 0
        for i, d, cells, coefs in cuts:
            starts.append(nnz)
            idx.append(np.concatenate([cells, [self.m + i]]))
            val.append(np.concatenate([coefs, [1.0]]))
            lo.append(d)
            nnz += cells.size + 1
        self.h.addRows(
            len(cuts), np.array(lo), np.full(len(cuts), highspy.kHighsInf), nnz,
            np.array(starts, dtype=np.int32), np.concatenate(idx).astype(np.int32),
            np.concatenate(val),
        )  # fmt: skip
        self.ncuts += len(cuts)

    def lp_loop(
        self,
        deadline: float,
        log: list | None = None,
        core: np.ndarray | None = None,
        alpha: float = 1.0,
    ) -> dict:
        """The master's LP relaxation with cuts until none is violated (or ``deadline``); with
        ``core`` (a point inside the master's hull, e.g. a plan's ``y``) and ``alpha < 1`` the
        cuts are chosen at ``alpha · y + (1 - alpha) · core`` (Ben-Ameur and Neto's in-out
        separation; the core moves there), at ``y`` itself when those cut nothing."""
        h = self.h
        rounds, value = 0, -math.inf
        while True:
            h.setOptionValue("time_limit", max(1.0, deadline - time.perf_counter()))
            h.run()
            sol = np.array(h.getSolution().col_value)
            value = h.getInfo().objective_function_value
            y, theta = sol[: self.m], sol[self.m :]
            cuts = []
            if core is not None and alpha < 1.0:
                core = alpha * y + (1.0 - alpha) * core
                cuts = self.separate(y, theta, at=core)
            if not cuts:
                cuts = self.separate(y, theta)
            rounds += 1
            if log is not None:
                log.append((rounds, value, len(cuts), time.perf_counter()))
            if not cuts or time.perf_counter() > deadline:
                break
            before = self.ncuts
            self.add(cuts)
            if self.ncuts == before:  # every violated cut is in already: optimal within tolerance
                cuts = []
                break
        self.lp = value if not cuts else None
        self.rc = np.array(h.getSolution().col_dual)[: self.m] if not cuts else None
        return {"lp": value, "rounds": rounds, "lp_done": not cuts, "y_lp": y}

    def mip(
        self, start: np.ndarray, deadline: float, log: list | None = None, fix: bool = True
    ) -> dict:
        """The integer master from the plan ``start`` (cell ids), re-solved with new cuts while
        its optimum underestimates its plan; returns bounds, plan, rounds and nodes."""
        import highspy

        h = self.h
        m, n = self.m, self.n
        h.changeColsIntegrality(
            m, np.arange(m, dtype=np.int32), np.full(m, highspy.HighsVarType.kInteger)
        )
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("output_flag", bool(os.environ.get("BENDERS_LOG")))
        if os.environ.get("BENDERS_PRESOLVE"):
            h.setOptionValue("presolve", os.environ["BENDERS_PRESOLVE"])
        h.setOptionValue("mip_abs_gap", 0.0)
        w = self.grid.weight
        y0 = np.zeros(m)
        y0[start] = 1.0
        best_y, best = y0, float(w @ self.true_cost(y0))
        self.fixed = 0
        if fix and self.rc is not None:
            # reduced-cost fixing against the plan: a cell whose opening lifts the LP's value
            # past the plan (paddings are integers: past ``best - 1``) is in no better plan
            out = np.flatnonzero((self.lp + self.rc > best - 1 + 1e-6) & (y0 < 0.5))
            h.changeColsBounds(
                out.size, out.astype(np.int32), np.zeros(out.size), np.zeros(out.size)
            )
            self.fixed = int(out.size)
        found: list[np.ndarray] = []

        def on_solution(e) -> None:
            found.append(np.array(e.data_out.mip_solution).copy())

        h.cbMipSolution.subscribe(on_solution)
        low, rounds, nodes, proved = -math.inf, 0, 0, False
        while True:
            left = deadline - time.perf_counter()
            if left <= 1.0:
                break
            h.setOptionValue("time_limit", left)
            tc = self.true_cost(best_y)
            h.setSolution(highspy.HighsSolution())  # clear
            sol = highspy.HighsSolution()
            sol.col_value = list(np.concatenate([best_y, tc]))
            sol.value_valid = True
            h.setSolution(sol)
            found.clear()
            h.run()
            rounds += 1
            info = h.getInfo()
            nodes += int(info.mip_node_count)
            status = h.getModelStatus()
            dual = float(info.mip_dual_bound)
            if status == highspy.HighsModelStatus.kOptimal:
                dual = (
                    max(dual, float(info.objective_function_value))
                    if math.isfinite(dual)
                    else float(info.objective_function_value)
                )
            if math.isfinite(dual):
                low = max(low, min(dual, best))
            final = np.array(h.getSolution().col_value)
            cuts: dict[tuple, tuple] = {}
            for x in [*found, final]:
                if x.size < m + n:
                    continue
                yr = (x[:m] > 0.5).astype(np.float64)
                cost = float(w @ self.true_cost(yr))
                if cost < best:
                    best, best_y = cost, yr
                for cut in self.separate(yr, x[m:]):
                    cuts.setdefault((cut[0], cut[1]), cut)
            if log is not None:
                log.append((rounds, low, best, len(cuts), nodes, time.perf_counter(), str(status)))
            if low >= best - 1e-6 * max(1.0, abs(best)):
                proved = True
                break
            if status != highspy.HighsModelStatus.kOptimal:
                break  # time limit
            # the master's optimum underestimates its plan: its cuts (and the others found) join
            before = self.ncuts
            self.add(list(cuts.values()))
            if self.ncuts == before:  # nothing new to add (tolerances): no progress possible
                break
        h.cbMipSolution.unsubscribe(on_solution)
        return {
            "low": low,
            "best": best,
            "plan": np.flatnonzero(best_y > 0.5),
            "mip_rounds": rounds,
            "nodes": nodes,
            "proved": proved,
            "fixed": self.fixed,
        }


def solve(grid: Grid, k: int, start: np.ndarray, seconds: float, log: list | None = None) -> dict:
    t0 = time.perf_counter()
    b = Benders(grid, k)
    b.build()
    out = {"points": b.n, "cands": b.m, "pairs": b.pairs, "build_s": time.perf_counter() - t0}
    out.update(b.lp_loop(t0 + seconds, log))
    out["lp_cuts"] = b.ncuts
    out["lp_s"] = time.perf_counter() - t0
    out.update(b.mip(start, t0 + seconds, log, fix=not os.environ.get("BENDERS_NOFIX")))
    out["cuts"] = b.ncuts
    out["seconds"] = time.perf_counter() - t0
    return out


def plan_cells(grid: Grid, cells: np.ndarray) -> np.ndarray:
    """The candidate ids of a plan's ``cells`` (lengths): each point to its cheapest covering
    cell, each cell lowered to the longest of its points (a candidate; padding never grows)."""
    lengths = np.stack([grid.values[d][grid.point[:, d]] for d in range(grid.point.shape[1])], 1)
    covers = (cells[:, None, :] >= lengths[None, :, :]).all(axis=2)
    size = cells.sum(axis=1) if grid.size == "sum" else cells.prod(axis=1)
    slot = np.where(covers, size[:, None].astype(np.float64), np.inf).argmin(axis=0)
    return grid.tighten(np.arange(len(cells)), slot)


def _grid(hist: JointHistogram, size: str) -> Grid:
    return Grid.build(hist.rows, hist.counts, coarse_values(hist.rows, hist.counts, MAX_GRID), size)


def _explicit(path: Path = ROOT / "benchmarks" / "results" / "joint_gap.md") -> dict:
    """The explicit model's figures per (s, size, K) from a ``joint_gap.py`` table: LP,
    optimum (or bracket), proved, the program's seconds."""
    out = {}
    for line in path.read_text().splitlines():
        cols = [c.strip() for c in line.strip("|").split("|")]
        if len(cols) != 13 or not cols[0].isdigit():
            continue
        opt = cols[6]
        out[(int(cols[0]), cols[3], int(cols[4]))] = {
            "lp": float(cols[5].replace(",", "")),
            "opt": opt,
            "proved": " - " not in opt,
            "seconds": float(cols[12]),
        }
    return out


def _case(table: np.ndarray, s: int, size: str, k: int, seconds: float) -> dict:
    hist = JointHistogram.from_lengths(-(-table // s))
    grid = _grid(hist, size)
    const = float((grid.weight * grid.point_size).sum())
    # the best plan of the two solves, as in joint_gap.py
    search = solve_joint(hist, k, size=size, exact=False, work_limit=300, time_limit=1)
    default = solve_joint(hist, k, size=size, time_limit=5)
    best = min((search, default), key=lambda x: x.objective)
    start = plan_cells(grid, best.cells)
    log: list = []
    r = solve(grid, k, start, seconds, log)
    for row in log:
        print(row, flush=True)
    return {
        "s": s, "size": size, "k": k, "points": r["points"], "cands": r["cands"],
        "pairs": r["pairs"], "start": int(best.objective), "lp": r["lp"] - const,
        "lp_rounds": r["rounds"], "lp_cuts": r["lp_cuts"], "lp_s": r["lp_s"],
        "fixed": r["fixed"], "low": math.ceil(r["low"] - const - 1e-6),
        "best": round(r["best"] - const), "proved": r["proved"], "mip_rounds": r["mip_rounds"],
        "nodes": r["nodes"], "cuts": r["cuts"], "seconds": r["seconds"], "load": _load(),
    }  # fmt: skip


def _loads(paths: list[str]) -> str:
    """The load averages ``joint_gap.py`` wrote at the start and the end of its tables."""
    found = []
    for path in paths:
        text = Path(path).read_text()
        found += re.findall(r"load average ([0-9.]+) at the start", text)
        found += re.findall(r"at the end: ([0-9.]+)\.", text)
    return ", ".join(found) if found else "not known"


def _table(records: list[dict], same_load: list[str]) -> list[str]:
    explicit = _explicit()
    again: dict = {}
    for path in same_load:
        again.update(_explicit(Path(path)))
    lines = [
        "| s | points | candidates (pairs) | size | K | start | LP (rounds, cuts, s) | fixed "
        "| Benders | MIP rounds | nodes | cuts | Benders (s, load) | explicit | explicit (s) "
        "| explicit, rerun |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        e = explicit.get((r["s"], r["size"], r["k"]), {})
        a = again.get((r["s"], r["size"], r["k"]))
        same = f"{a['opt']} ({a['seconds']:.0f} s)" if a else "-"
        ours = f"{r['best']:,}" if r["proved"] else f"{r['low']:,} - {r['best']:,}"
        lines.append(
            f"| {r['s']} | {r['points']:,} | {r['cands']:,} ({r['pairs']:,}) | {r['size']} "
            f"| {r['k']} | {r['start']:,} | {r['lp']:,.1f} ({r['lp_rounds']}, {r['lp_cuts']:,}, "
            f"{r['lp_s']:.1f}) | {r['fixed']:,} | {ours} | {r['mip_rounds']} | {r['nodes']:,} "
            f"| {r['cuts']:,} | {r['seconds']:.0f} ({r['load']}) | {e.get('opt', '-')} "
            f"| {e.get('seconds', math.nan):.0f} | {same} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=CASES, help="s:size:K,... (GSM8K rounded to s)")
    parser.add_argument("--seconds", type=float, default=540.0, help="per case, in all")
    parser.add_argument("--records", default="", help="append each case's record (JSON lines)")
    parser.add_argument("--table", default="", help="only write the table from these records")
    parser.add_argument(
        "--same-load",
        default="",
        help="comma-separated joint_gap.py tables run at the Benders run's load",
    )
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    if args.table:
        records = [json.loads(x) for x in Path(args.table).read_text().splitlines() if x]
    else:
        table = np.loadtxt(DATA / FILES["gsm8k"], dtype=np.int64)
        records = []
        for case in args.cases.split(","):
            s, size, k = case.split(":")
            r = _case(table, int(s), size, int(k), args.seconds)
            print(json.dumps(r), flush=True)
            records.append(r)
            if args.records:
                with open(args.records, "a") as f:
                    f.write(json.dumps(r) + "\n")
    loads = ", ".join(sorted({r["load"] for r in records}))
    same = [p for p in args.same_load.split(",") if p]
    lines = [
        "# Joint plans: the integer program by Benders decomposition (GSM8K, coarsened)",
        "",
        f"`python benchmarks/joint_benders.py --cases C --seconds {args.seconds:g} --records R` "
        "for each case C, one process each, then `--table R --same-load ...` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; 1-minute load average at "
        f"the cases' ends: {loads}. The instances of `joint_gap.md` (GSM8K's lengths rounded up "
        "to multiples of *s* tokens; padding in units of *s* tokens). *start*: the best plan of "
        "`solve_joint(exact=False, work_limit=300)` and `solve_joint(time_limit=5)` (the plan "
        "`joint_gap.md` fixed against). *LP*: the master's LP relaxation after its cut loop "
        "(rounds, cuts, seconds from the start, building included): equal to the explicit LP of "
        "`joint_gap.md`. *fixed*: cells closed by their LP reduced cost against *start*. "
        "*Benders*: the proved optimum, or HiGHS's bound on the master and the best plan found "
        "when the seconds ran out. *MIP rounds*: integer masters solved (another only when an "
        "optimum's theta underestimated its plan). *explicit*: the integer program over the "
        "pairs the LP's duals leave, from `joint_gap.md` (HiGHS, 600 s budget, another day and "
        "load: compare orders of magnitude), and its seconds. *explicit, rerun*: the same, rerun "
        "by `joint_gap.py --ilp-seconds 480`, one case per process, beside the s = 6 cases "
        f"(`--same-load`: its tables; 1-minute load averages at their starts and ends: "
        f"{_loads(same)}): its optimum or bracket and the program's seconds.",
        "",
        *_table(records, same),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
