"""The configuration LP lower bound for packing a length histogram, against the bounds the packer
computes and the rows it plans.

The configuration LP (Gilmore & Gomory 1961): a column is a row's contents ``a`` (documents per
distinct size, ``sum a_i s_i <= L``), and ``min sum_p x_p`` subject to ``sum_p a_ip x_p >= n_i``
(the ``n_i`` documents of size ``s_i``), ``x >= 0``. Its value is a lower bound on the rows of
every packing, at least as strong as any bound from a dual feasible function (the thirds of
``thirds_bound`` among them), and ``ceil`` of it is one too. Solved by column generation: the
restricted master LP by ``scipy.optimize.linprog(method="highs")``, its duals ``y`` from
``res.ineqlin.marginals``, and the pricing problem ``max y . a`` over the columns as an integer
knapsack over the distinct sizes, ``a_i <= min(n_i, L // s_i)`` (binary splitting of the counts,
a dynamic programme over the row's tokens); a column whose reduced cost ``1 - y . a`` is below
``-1e-9`` joins the master, and none left means the master's value is the LP's. Each pricing
round also adds, for every size that the best column leaves out, the best column that holds it
(from a second dynamic programme over the sizes in the other order), so far fewer rounds are
needed; the value it stops at is the same.

Per length set: the LP value, its ceiling, ``lower_bound``'s L2 (Martello & Toth) and
``thirds_bound`` from ``bucketloader.pack._bins``, best-fit decreasing's rows
(``PackSpec.build(search="never")``), the default plan's (``search="auto"``) and
``search="always"``'s; the check ``thirds_bound <= ceil(LP)`` (an assertion where column
generation finished: a dual feasible function cannot beat the LP). The
length sets are those of ``benchmarks/small_costs.py`` section 2 up to 10k documents: the
uniform sets (seeded by N) and the real ones (GSM8K question + answer + 2 resampled and
code-like lognormal lengths, drawn from the same generator in the same order; GSM8K's first
2,000 pairs and E. coli's first 2,000 proteins + 2).

Run: ``PYTHONPATH=$PWD python benchmarks/pack_bound.py --budget 180`` (``--budget``: seconds of
column generation a set, wall time; a set that does not finish within it is reported as a
bracket, the best Farley bound found to the master's value; about half an hour on a busy 2-core
machine; ``--quick``: only the sets of 1,000 documents and the 2k files, printed, not written).
Writes ``benchmarks/results/pack_bound.md``.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy
from scipy import sparse
from scipy.optimize import linprog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.pack import PackSpec  # noqa: E402
from bucketloader.pack._bins import lower_bound, thirds_bound  # noqa: E402

DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results" / "pack_bound.md"
#: A column joins the master when its reduced cost is below this.
TOL = 1e-9


def _pieces(sizes: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary splitting of a bounded knapsack: size index and multiplicity of each 0/1 piece
    (1, 2, 4, ..., rest), so every count up to the bound is a sum of distinct pieces."""
    item, mult = [], []
    for i, b in enumerate(bounds.tolist()):
        k = 1
        while b > 0:
            m = min(k, b)
            item.append(i)
            mult.append(m)
            b -= m
            k *= 2
    return np.array(item, dtype=np.int64), np.array(mult, dtype=np.int64)


#: Rows of a knapsack table kept: every BLOCK-th (the others are recomputed a block at a time).
BLOCK = 64


def _step(row: np.ndarray, out: np.ndarray, w: int, v: float) -> np.ndarray | None:
    """One 0/1 piece of weight ``w`` and value ``v`` added to a knapsack row (the best value
    within each capacity), written to ``out``; where taking it is better (``None``: nowhere)."""
    out[:] = row
    if v <= 0 or w >= row.size:
        return None
    cand = row[: row.size - w] + v
    better = cand > row[w:]
    np.copyto(out[w:], cand, where=better)
    return better


class _Table:
    """A 0/1 knapsack over the pieces in one order: row ``k`` is the best value of the first
    ``k`` pieces within each capacity ``0..L``; kept every :data:`BLOCK` rows (a full table of
    8,000 pieces at L = 16,384 is 1 GB), with the take bits of every row for the backtrack."""

    def __init__(self, weights: np.ndarray, values: np.ndarray, length: int):
        self.weights, self.values = weights.tolist(), values.tolist()
        self.kept = []
        taken = np.zeros((weights.size, (length + 8) // 8), dtype=np.uint8)
        row, out = np.zeros(length + 1), np.zeros(length + 1)
        full = np.zeros(length + 1, dtype=bool)
        for k, (w, v) in enumerate(zip(self.weights, self.values, strict=True)):
            if k % BLOCK == 0:
                self.kept.append(row.copy())
            better = _step(row, out, w, v)
            row, out = out, row
            if better is not None:
                full[:w] = False
                full[w:] = better
                taken[k] = np.packbits(full)
        # the take bits by capacity (one capacity's bits over the pieces contiguous), a block
        # of pieces at a time (unpacked whole they would take a byte a bit)
        self.by_cap = np.zeros((length + 1, (weights.size + 7) // 8), dtype=np.uint8)
        for lo in range(0, weights.size, 1024):
            bits = np.unpackbits(taken[lo : lo + 1024], axis=1)[:, : length + 1]
            self.by_cap[:, lo // 8 : lo // 8 + (bits.shape[0] + 7) // 8] = np.packbits(
                bits.T, axis=1
            )

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo..hi`` (inclusive), recomputed from the kept row at or below ``lo``."""
        start = lo - lo % BLOCK
        out = np.empty((hi + 1 - start, self.kept[0].size))
        out[0] = self.kept[start // BLOCK]
        for k in range(start, hi):
            _step(out[k - start], out[k + 1 - start], self.weights[k], self.values[k])
        return out[lo - start :]

    def back(self, upto: int, cap: int) -> list[int]:
        """The pieces among the first ``upto`` that row ``upto``'s value at ``cap`` takes."""
        out = []
        while upto > 0 and cap > 0:
            hit = np.flatnonzero(np.unpackbits(self.by_cap[cap], count=upto))
            if not hit.size:
                break
            upto = int(hit[-1])
            out.append(upto)
            cap -= self.weights[upto]
        return out


def _price(
    sizes: np.ndarray, bounds: np.ndarray, duals: np.ndarray, length: int
) -> list[tuple[float, np.ndarray]]:
    """Columns of high value ``duals . a``: the best column (exact), then for each piece the
    best column that holds it (the pieces before it from the table in order, those after from
    the table in reverse order), best first, each column once."""
    item, mult = _pieces(sizes, bounds)
    weights = sizes[item] * mult
    values = duals[item] * mult
    n = weights.size
    fwd = _Table(weights, values, length)
    rev = _Table(weights[::-1], values[::-1], length)

    def column(pieces: list[int]) -> np.ndarray:
        a = np.zeros(sizes.size, dtype=np.int64)
        np.add.at(a, item[pieces], mult[pieces])
        return a

    later = np.r_[False, item[1:] == item[:-1]]  # (True: not the first piece of its size)
    best = column(fwd.back(n, length))
    found = {tuple(best.tolist()): float(duals @ best)}
    for lo in range(0, n, BLOCK):
        hi = min(lo + BLOCK, n) - 1
        before = fwd.rows(lo, hi)  # before[k - lo]: the pieces before k
        after = rev.rows(n - 1 - hi, n - 1 - lo)  # after[hi - k]: the pieces after k
        for k in range(lo, hi + 1):
            w = int(weights[k])
            if later[k] or w > length or values[k] <= 0 or best[item[k]]:
                continue
            room = length - w
            total = before[k - lo][: room + 1] + after[hi - k][room::-1]
            c = int(np.argmax(total))
            if total[c] + values[k] <= 1 + TOL:
                continue
            tail = [n - 1 - j for j in rev.back(n - 1 - k, room - c)]
            a = column([*fwd.back(k, c), k, *tail])
            found.setdefault(tuple(a.tolist()), float(duals @ a))
    return sorted(((v, np.array(a)) for a, v in found.items()), key=lambda t: -t[0])


def _plan_columns(sizes: np.ndarray, counts: np.ndarray, length: int) -> list[np.ndarray]:
    """The start: the row contents of best-fit decreasing's plan and of ``search="always"``'s
    (each distinct one once; a start near the optimum saves rounds, not the value)."""
    index = {int(s): i for i, s in enumerate(sizes.tolist())}
    cols = {}
    for search in ("never", "always"):
        lengths = np.repeat(sizes, counts)
        p = PackSpec.build(lengths, row_length=length, batch_size=1, search=search).patterns
        for lo, hi in zip(p.offsets[:-1].tolist(), p.offsets[1:].tolist(), strict=True):
            a = np.zeros(sizes.size, dtype=np.int64)
            for it, m in zip(p.items[lo:hi].tolist(), p.mult[lo:hi].tolist(), strict=True):
                a[index[int(p.sizes[it])]] += m
            cols.setdefault(tuple(a.tolist()), a)
    return list(cols.values())


def _master(cols: list[np.ndarray], counts: np.ndarray) -> tuple[float, np.ndarray]:
    """The restricted master LP over ``cols``: its value and its duals (one per size, >= 0)."""
    nz = [np.flatnonzero(a) for a in cols]
    a = sparse.csc_matrix(
        (
            np.concatenate([-c[i] for c, i in zip(cols, nz, strict=True)]).astype(float),
            np.concatenate(nz),
            np.cumsum([0] + [i.size for i in nz]),
        ),
        shape=(counts.size, len(cols)),
    )
    res = linprog(
        np.ones(len(cols)), A_ub=a, b_ub=-counts.astype(float), bounds=(0, None), method="highs"
    )
    if res.status != 0:
        raise RuntimeError(f"the master LP failed: {res.message}")
    return float(res.fun), np.maximum(-res.ineqlin.marginals, 0.0)  # (>= rows: marginals <= 0)


#: Wentges smoothing: the pricing duals are this much the best (stability centre) duals so far
#: and the rest the master's.
SMOOTH = 0.7


def _best_value(sizes: np.ndarray, bounds: np.ndarray, pi: np.ndarray, length: int) -> float:
    """The most any column is worth at duals ``pi`` (the knapsack's value, no column)."""
    item, mult = _pieces(sizes, bounds)
    row, out = np.zeros(length + 1), np.zeros(length + 1)
    for w, v in zip((sizes[item] * mult).tolist(), (pi[item] * mult).tolist(), strict=True):
        _step(row, out, w, v)
        row, out = out, row
    return float(row[-1])


def _thirds_duals(sizes: np.ndarray, counts: np.ndarray, length: int) -> np.ndarray:
    """The thirds' dual feasible function (NOTE [ Lower bounds ] in ``_bins.py``) at its best
    ``beta`` over its breakpoints, as duals: ``min(1/2, (1 - beta) / 3 + beta * s / L)``."""
    s = sizes / length
    mid = s[(s > 1 / 3) & (s < 1 / 2)]
    betas = np.concatenate([[1.0], 1 / (6 * mid - 2)])
    f = np.minimum(0.5, (1 - betas[:, None]) / 3 + betas[:, None] * s[None, :])
    return f[int(np.argmax(f @ counts))]


@dataclass
class LPResult:
    """The configuration LP's value, bracketed: ``lower`` the best Farley bound found (``upper``
    where column generation finished), ``upper`` the last master's value."""

    lower: float
    upper: float
    rounds: int
    columns: int
    done: bool


def configuration_lp(
    sizes: np.ndarray, counts: np.ndarray, length: int, budget_s: float, most: int = 1000
) -> LPResult:
    """The configuration LP's value by column generation, within ``budget_s`` seconds.

    Each round prices at duals smoothed towards the best so far (Wentges): ``pi = SMOOTH *
    centre + (1 - SMOOTH) * master's``, where the centre is the duals of the highest Farley bound
    ``counts . pi / max(pi . a)`` (a lower bound on the LP: ``pi / max(pi . a)`` is dual
    feasible; the first centre is the better of ``s_i / L``, whose bound is ``tokens / L``, and
    the thirds' dual feasible function of ``thirds_bound``). Columns join the
    master where their reduced cost at the master's duals is below ``-TOL`` (``most`` a round
    at most, the best by value). Where none does (a mis-price), the centre moves to the pricing
    duals and the round prices again, closer to the master's. It stops when a round that
    prices at the master's duals themselves finds no column with reduced cost below ``-TOL``
    (the master's value is the LP's), or when the budget is spent (then the LP is only
    bracketed: between the best Farley bound and the master's value)."""
    started = time.perf_counter()
    bounds = np.minimum(counts, length // sizes)
    cols = _plan_columns(sizes, counts, length)
    seen = {tuple(a.tolist()) for a in cols}
    # the first centre: the better of s_i / L (its bound: tokens / L) and the thirds' function,
    # each as a Farley bound (its value over the most a column is worth at it)
    centre, best_bound = sizes / length, 0.0
    for pi in (sizes / length, _thirds_duals(sizes, counts, length)):
        bound = float(counts @ pi) / _best_value(sizes, bounds, pi, length)
        if bound > best_bound:
            centre, best_bound = pi, bound
    rounds = 0
    value, duals = _master(cols, counts)
    alpha = SMOOTH
    while time.perf_counter() - started < budget_s:
        rounds += 1
        pi = duals if alpha == 0 else alpha * centre + (1 - alpha) * duals
        found = _price(sizes, bounds, pi, length)
        bound = float(counts @ pi) / max(found[0][0], 1e-12)
        if bound > best_bound:
            centre, best_bound = pi, bound
        new = []
        for _, c in found:
            if float(duals @ c) > 1 + TOL and tuple(c.tolist()) not in seen:
                new.append(c)
                if len(new) == most:
                    break
        if not new:
            if alpha == 0:  # (priced at the master's duals: none left)
                return LPResult(value, value, rounds, len(cols), True)
            centre = pi  # a mis-price: closer to the master's duals
            alpha = 0.0 if alpha < 0.1 else alpha / 2
            continue
        alpha = SMOOTH
        for c in new:
            seen.add(tuple(c.tolist()))
            cols.append(c)
        value, duals = _master(cols, counts)
    return LPResult(best_bound, value, rounds, len(cols), False)


def length_sets(quick: bool) -> list[tuple[str, np.ndarray, int]]:
    """``small_costs.py`` section 2's sets of at most 10k documents, drawn the same way."""
    rng = np.random.default_rng(0)
    gsm = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64).sum(axis=1) + 2
    ecoli = np.loadtxt(DATA / "ecoli_k12_proteome_residues.txt", dtype=np.int64) + 2
    ns = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)  # (small_costs.py's full run)
    small = (1_000,) if quick else (1_000, 10_000)
    sets = []
    for n in ns:  # (every draw, so that the GSM8K resamples below match small_costs.py's)
        code = np.minimum(rng.lognormal(5.5, 1.3, n).astype(np.int64) + 1, 2048)
        if n in small:
            sets.append((f"code-like lognormal, N={n:,}", code, 2048))
    for n in ns:
        docs = rng.choice(gsm, n)
        if n in small:
            sets.append((f"GSM8K q+a+2 resampled, N={n:,}", docs, 1024))
    sets.append(("GSM8K first 2,000 (L=512)", gsm[:2000], 512))
    sets.append(("E. coli first 2,000 (L=2400)", ecoli[:2000], 2400))
    for low, top in ((4, 2), (5, 2), (8, 2)):
        for length in (1024, 16384):
            for n in small:
                docs = np.random.default_rng(n).integers(length // low + 1, length // top + 1, n)
                sets.append((f"uniform in (L/{low}, L/{top}], N={n:,}", docs, length))
    sets.append(
        (
            "uniform in (L/4, 2L/3], N=1,000",
            np.random.default_rng(1000).integers(257, 683, 1000),
            1024,
        )
    )
    return sets


def _ceil(x: float) -> int:
    """``ceil`` of an LP value to HiGHS's tolerance (352.0000001 is 352)."""
    return math.ceil(x - 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 documents only; no file")
    parser.add_argument(
        "--budget", type=float, default=300.0, help="seconds of column generation per set"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    lines = [
        "# The configuration LP lower bound against the packer's bounds (benchmarks/pack_bound.py)",
        "",
        f"Command: `PYTHONPATH=$PWD python benchmarks/pack_bound.py --budget {args.budget:g}`. "
        f"{platform.machine()}, numpy {np.__version__}, scipy {scipy.__version__} (HiGHS), "
        f"Python {platform.python_version()}. The length sets of `benchmarks/small_costs.py` "
        "section 2 up to 10k documents (the same draws). **LP**: the configuration LP "
        "(Gilmore-Gomory), a lower bound on the rows of every plan, by column generation until "
        "no column has reduced cost below -1e-9; where that did not finish within the budget "
        f"({args.budget:g} s a set), the LP is bracketed: at least the best Farley bound found, "
        "at most the last restricted master's value (`open`). **L1** = `ceil(tokens / L)`; "
        "**L2** and **thirds** the bounds of `bucketloader.pack._bins` (`lower_bound`, "
        "`thirds_bound`, NOTE [ Lower bounds ]; `thirds_bound` returns 0 where its best weight "
        "is 1, which gives no more than L1); **BFD** the rows of best-fit decreasing "
        '(`search="never"`), **default** the default plan\'s (`search="auto"`), **always** '
        "`search=\"always\"`'s. `rounds` / `columns`: pricing rounds and the master's columns "
        "at the end (it starts from the row contents of the BFD and `always` plans); `s`: the "
        "column generation's wall time (a shared 2-core machine).",
        "",
        "| lengths | L | distinct sizes | LP | ceil(LP) | L1 | L2 | thirds | thirds <= ceil(LP) "
        "| BFD rows | default rows | always rows | rounds | columns | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    opened = 0
    for label, lengths, length in length_sets(args.quick):
        sizes, counts = np.unique(lengths, return_counts=True)
        t = time.perf_counter()
        lp = configuration_lp(sizes, counts, length, args.budget)
        took = time.perf_counter() - t
        low = _ceil(lp.lower)
        l1, l2 = lower_bound(sizes, counts, length)
        thirds = thirds_bound(sizes, counts, length)
        # dual feasible functions never beat the LP: a failure where it finished is a bug
        assert thirds <= low or not lp.done, (label, length, thirds, lp)
        assert l2 <= low or not lp.done, (label, length, l2, lp)
        plans = {
            s: PackSpec.build(lengths, row_length=length, batch_size=1, search=s).num_rows
            for s in ("never", "auto", "always")
        }
        assert low <= plans["always"] <= plans["never"], (label, length, lp, plans)
        assert low <= plans["auto"] <= plans["never"], (label, length, lp, plans)
        if lp.done:
            value, ceiled = f"{lp.lower:,.2f}", f"{low:,}"
        else:
            opened += 1
            value = f"{lp.lower:,.2f} to {lp.upper:,.2f} (open)"
            ceiled = f"{low:,} to {_ceil(lp.upper):,}"
        # (open: the lower end is itself at least the thirds' value, so no check there)
        check = "yes" if lp.done else "open"
        lines.append(
            f"| {label} | {length:,} | {sizes.size:,} | {value} | {ceiled} | {l1:,} | {l2:,} | "
            f"{thirds:,} | {check} | {plans['never']:,} | {plans['auto']:,} | "
            f"{plans['always']:,} | {lp.rounds} | {lp.columns:,} | {took:.0f} |"
        )
        print(lines[-1], flush=True)
    lines += [
        "",
        "Checked on every set where column generation finished (asserted): `thirds_bound <= "
        "ceil(LP)` and `L2 <= ceil(LP)` (no dual feasible function beats the LP). On every set "
        "(asserted, with the lower end of an open bracket): `ceil(LP) <= default rows <= BFD "
        "rows` and `ceil(LP) <= always rows`. An open bracket's lower end is the best Farley "
        "bound found, which starts from the thirds' function and from `s / L` (so it is at "
        "least their values: there the `thirds` check proves nothing and reads `open`); its "
        "upper end is the restricted master's value, which only column generation lowers. "
        f"Sets left open: {opened}.",
        "",
        f"Run time: {time.perf_counter() - started:.0f} s.",
    ]
    if args.quick:
        print("\n".join(lines))
    else:
        OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
