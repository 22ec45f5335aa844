"""The joint heuristic: greedy additions, then best swaps with Lloyd steps, over candidate cells.

NOTE [ Greedy, swap, Lloyd ]
Greedy starts from the one cell covering everything and adds, K − 1 times, the candidate that
removes the most padding (every candidate's gain at once, NOTE [ Gains by prefix sums ]). Then,
for each cell in turn, a swap removes it (its samples fall to their next cheapest cell, or to "no
cell" at a large size) and adds the candidate with the largest gain against that: the best
exchange for that cell. An exchange is kept when it lowers the padding; after each one a Lloyd
step lowers every cell to the longest of its samples. It stops when a full round finds nothing or
at the deadline. Each cell's best exchange is one row of the exchange table below, one table
per kept swap (NOTE [ One table per kept swap ]).

NOTE [ Every exchange at once ]
Dropping cell ``f`` and adding candidate ``c`` saves, with ``d1_i`` / ``d2_i`` the sizes of each
point's cheapest and next cheapest cell (``d2`` a large size where no other cell covers it),

    save(f, c) = gain(c) − loss(f) + extra(f, c),
    gain(c)     = Σ_{i covered by c} w_i · max(0, d1_i − size(c)),
    loss(f)     = Σ_{i in f} w_i · (d2_i − d1_i),
    extra(f, c) = Σ_{i in f, covered by c} w_i · (max(0, d2_i − size(c)) − max(0, d1_i − size(c)))

(Whitaker's fast interchange; Resende and Werneck's gain / loss / extra). Within cell ``f``
``d1_i`` is ``f``'s size and ``d2_i`` takes one of at most K values, so every term is a sum over
a few groups of points (one per cell and next cheapest size; 9-30 groups on GSM8K at K = 8-16),
each group's covered weight one prefix sum of the grid (NOTE [ Gains by prefix sums ]): the
whole ``(K, candidates)`` table costs about two or three gain passes, where :func:`improve`
pays one gain pass per cell tried. A group's points only add to the ``gain`` and ``extra``
of candidates smaller than their next cheapest size, so in size order each group's work is a
prefix of the candidates (45-60 % of them on GSM8K at K = 16): with
:meth:`Grid.covers` compared input by input, one table took 6-10 ms of CPU against 20-22 ms
before (GSM8K K = 16, same process, same tables: ``/tmp/s6j/speed.py``), and the swaps from
both starts 0.9-1.3 s against 1.7-2.5 s, to the same plans. An exchange that leaves a sample
without a cell is ``-inf``.
:func:`improve` keeps its order (the plans of the greedy and lattice starts are those of
session 4); :func:`descend` takes the best exchange of the table each step, and the shakes use it.

NOTE [ One table per kept swap ]
:func:`improve` tries each cell's best exchange in turn. Row ``f`` of the :func:`_saves` table
is the gain pass after dropping ``cells[f]`` shifted by ``loss(f)``: every term is an exact sum
of integer-valued floats (below 2^53, about 9 · 10^15), so the order and the first index among
ties are the same; adding
the dropped cell back saves 0 and the other cells are excluded, as in the gain pass. One
table serves every try until a swap is kept, so a round that keeps nothing costs one table
instead of K gain passes. Measured: the same plans from the greedy, lattice and two random
starts on all 24 cases of the benchmark (96 searches; ``/tmp/s6j/eqimp.py``), 12 % less CPU in
all (5.9 s against 6.7 s), up to 30 % on GSM8K prod.

NOTE [ Two descents ]
:func:`improve` keeps each cell's best exchange in turn when it helps (first improvement over
the cells); :func:`descend` keeps the best exchange of all (best improvement). Same
neighbourhood, other order: from the same start they stop in different local optima. So the
search also descends from both starts (greedy and lattice) and keeps a plan that pads less
(before the swaps since session 7: NOTE [ The search under load ]). Measured on the 24 cases
of the benchmark (CPU time, one run, load about 5, ``/tmp/s6j/starts.py``): the descents
found a better local optimum than both swap searches in the three K = 16 prod cases
(Multi30k -1.30 %, Europarl -1.10 %, GSM8K -1.22 %: 9,537,544 against 9,655,561) and in no
other, for 0.03-0.41 s of CPU (GSM8K K = 16: 0.41 s, the two swap searches 0.70 s).

NOTE [ The search under load ]
The first search has four phases: :func:`descend` and :func:`improve` from the lattice start,
then from the greedy start (NOTE [ Two descents ]). They run in that order, under
one deadline (``SEARCH`` of the time limit), each stopped by the clock where it stands; the
plan is the first that pads least in session 6's order (the greedy start's swaps, the lattice
start's, then the descents), so when every phase ends (a quiet machine at 5 s, or
``work_limit``) the plan is session 6's (the same cells on all 24 cases of the benchmark
under ``work_limit=0``). Session 6 ran the swaps first, each to its own share (30 % and 40 %
of the limit), and the descents to 45 %; the lattice start ran only when the first swaps
ended before 30 %. So a machine 1.6 times slower lost the descents, and the 5 s GSM8K prod
K = 16 plan fell from 9.39 M to 9.66 M (the lattice start's swaps). The descents are the
cheaper phases (on GSM8K K = 16, prod: the descents 0.18 / 0.31 s of CPU, the swaps 0.26 /
0.55 s, the starts 0.06 s each), and the lattice start's plans are the best of the four on
GSM8K at K = 8 and 16 in three cases of four (its descent on prod K = 16, 9,537,544; its swaps
on sum K = 16 and prod K = 8). So under this order the prod K = 16 plan is found with 0.43 s
of CPU instead of 1.4 s, and the sum K = 16 plan with 0.87 s instead of 1.5 s (the search
alone, ``/tmp/s7j/curve.py``, against the descents of both starts first):
up to a machine about five times slower at 5 s, or a quiet one at 1 s. With less time than
that (the time left after the greedy start under :data:`_LATTICE_FIRST` times what it took) the
greedy start's descent goes first instead (:data:`_HURRIED`): from the better start, with no
lattice start to build, a cut descent pads less. If the clock cuts every phase before it gets
below a start, that start is the plan (a partial descent from the lattice start can pad more
than both starts).

Measured side by side with session 6's order (both at once, the 24 cases of
``benchmarks/joint.py``; ``/tmp/s7j/ab.sh``, machine load 3-16 from other work). With every
clock of the solve reading CPU seconds (what a quiet machine gives at that limit): at 5 s the
same plans (three runs: the same search plan, then the bound's and the shakes' timing; GSM8K
prod K = 16 9,392,822 / 9,395,278 / 9,385,780-9,396,394 against 9,433,896 / 9,395,389 /
9,395,278-9,396,394); at 2 s GSM8K sum K = 16 149,880 -> 147,905 and prod K = 16 9,655,561 /
9,643,781 -> 9,506,606 (two runs; in one, three others +0.3 to +0.7 % from the shakes' timing
after the same search plan); at 1 s the same two cases -1.3 to -1.6 % and -1.7 to -2.5 % (four
runs), nothing else worse than +0.14 %. Wall clock at 5 s beside one or two spinning processes
(load 3-8, four runs, three with both descents first): GSM8K prod K = 16 9,655,561-9,754,843 ->
9,537,544 in every run, sum K = 16 -1.6 to -2.2 % in three (+0.23 % in one, where the lattice
start's swaps, then last, were cut), otherwise equal but for the shakes' luck after the same
search plan (GSM8K prod K = 8 +0.73 %, Europarl sum K = 16 +0.56 % once each). At 1 s, no
spinner: load 7-8, 10 better (up to -2.5 %) and one worse (+0.31 %); load 4, 3 better (up to
-0.97 %), 4 worse (up to +0.35 %). Without :data:`_HURRIED`, the load 7-8 run had 9 cases worse
(up to +2.6 %): the lattice start first is wrong when the time is that short.

NOTE [ Shakes ]
The swaps stop in a local optimum, and on GSM8K at K = 8-16 several plans a few tenths of a
percent to 1.5 % better sit a few exchanges away. So where the integer program cannot run (too
many survivors) and the gap is still open, the time left goes to an iterated local search:
replace ``r`` random cells of the best plan by random candidates (the covering cell comes back
if a sample lost its cell; under a size limit, the cells of the cover over the lost samples,
NOTE [ Cells within a size limit ]), :func:`descend`, keep the result when it pads less and set
``r`` to 1, else try ``r + 1`` next (up to K / 2, then 1 again: a variable neighbourhood). It
stops at the deadline or after ``4 K`` shakes in a row that found nothing (on easy cases the
plan is optimal or nearly, and the solve should not use its whole time limit for nothing; under
``work_limit`` only the count stops them, NOTE [ Work instead of seconds ]). The random draws
come from a fixed seed, so a solve is repeatable given the same number of shakes (the clock
decides that). Measured (GSM8K, 15 s of shakes from the plan of the greedy and lattice starts,
machine at load 6-8): sum K = 8 / 16 0.29 / 0.30 % less padding, prod K = 8 / 16 0.72 / 1.57 %;
Europarl sum K = 8 / 16 0.13 / 0.46 %, prod K = 16 1.32 %; K = 4 nothing (already optimal or
nearly). In whole 30 s solves, side by side with session 4's code (four runs, load 5-12), the
shakes get the 2-3 s the LP rounds leave: GSM8K sum K = 8 220,702 -> 220,063 in 3 of 4 runs
(the best plan any longer search found; within 0.58 % of the best bound known, 218,799), prod
K = 8 15,220,269 -> 15,110,839 in 2 (else both 15.11 M), prod K = 16 9,655,561 -> 9,346,096 to
9,499,121 in 3; sum K = 16 unchanged (147,561: 2-5 shakes fit). No case padded more.

NOTE [ Work instead of seconds ]
Under a time limit the clock decides how many swaps and shakes run and which plans the bound
hands back (the LP's cells, the integer program's), so two runs or two ranks can plan
different cells from the same arguments (seen in 1 of 2 runs in session 5's trial; the ranks
of one process group share rank 0's plan, NOTE [ One joint plan for every rank ]).
``work_limit=N`` bounds the search by counted work instead: both starts are swapped and descended
to local optima whatever the time, the shakes stop after ``N`` exchange tables (one per
:func:`descend` step), and no plan of the bound replaces the result. Each
step is a function of the histogram alone (the sums are of integer-valued floats, exact below
2^53; the shakes' seed is fixed), so the cells are the same on every machine and load;
``time_limit`` then bounds the bound alone, after the search (its value, the gap and the status
still depend on the machine). The other way, "deterministic whenever the solve ends before
its limit", was not taken: the hard cases (GSM8K K = 8 / 16) never end before it, and the LP's
seeds depend on the clock even when they do. Cost, measured on GSM8K K = 8 / 16 in CPU seconds
(``/tmp/s6j/detcpu.py``): 100 tables take 0.6-1.5 s after the swaps and plan as well as a
default 5 s solve (sum 220,063 / 147,112; prod 15,110,839 / 9,396,394 against 15,106,463-
15,110,646 / 9,395,278-9,396,394); the bound then runs for its own ``time_limit``.

Until ``JOINT_FORMAT`` 6 the counted shakes also kept the patience of NOTE [ Shakes ] (``4 K``
shakes in a row without a better plan). A caller who counts the work has chosen what to
spend, and on the hard cases better plans lie beyond that patience (NOTE [ How good the plans
are ]): on GSM8K prod K = 16 with ``N = 3000`` the patience ended the shakes at
9,362,366 against 9,316,818 when they run every table (``benchmarks/joint_plans.py``,
``benchmarks/results/joint_plans.md``). Since the shakes from one seed are one sequence, the
plan without patience is never worse than with it at the same ``N``; the price is that an easy
case spends all ``N`` tables too (up to about 30 ms each on ``tests/data``; at ``N = 1000``
the 24 cases of ``benchmarks/joint.py`` kept their plans and took 0.9-22 s of CPU against
0.04-8 s with the patience, session 16 offline, load 8), so ``N`` should be sized to the time
one can spend. The time-limited shakes keep their patience.

NOTE [ How good the plans are ]
On the three GSM8K cases no certified bound brings within 1 % (sum K = 16, prod K = 8 and 16:
``benchmarks/results/joint.md``), the LP's value lies 1.1-2.2 % below the plans
(``benchmarks/results/joint_lp.md``), so the optimum could in principle be that much below
them. Session 16 looked for such plans (CPU seconds, machine at load 5-15, offline scripts not
in the repository) and found none more than 0.4 % below the plans of ``benchmarks/joint.py``:

* **Long shakes** (:func:`iterate`'s moves without patience, 150-240 s, 6,700-18,000 tables,
  760-3,300 shakes per run): sum K = 16 147,067 (at 109 s; the 30 s solve 147,079-147,159, the best
  plan any earlier search found 147,067), prod K = 8 15,106,463 (after 7 shakes, nothing in
  the 3,270 after; 15,110,646 from the solver's seed), prod K = 16 9,316,818 (at 68 s; the
  30 s solves 9,332,238-9,349,976; a second seed found the same plan at 61 s). Moving cells to
  random candidates within 6 grid steps instead (prod K = 16, 240 s) stopped at 9,349,233.
* **Fusion** (the integer program over the cells of the 15 best local optima of a long
  search: 45 candidates for prod K = 8, 60 for sum K = 16; points merged by their covering
  cells, Elloumi's sorted formulation, HiGHS): its proved optimum is the best local optimum
  itself (15,106,463 in 41 s, 147,067 in 92 s; prod K = 16, 51 candidates: 9,316,818 in 13 s).
  Over the 40 best (prod K = 16, 121 candidates) HiGHS found nothing usable in 240 s, and its
  bound over those cells, 9,204,142, proves nothing about them.
  Session 16's restricted master (the last LP's 162 support cells plus the plan's, 240 s)
  found 148,363 for sum K = 16; session 10's exact two-cell re-optimisation and LP-support
  program found nothing below 147,067 either.
* **A restricted program by reduced costs** (session 24, offline, prod K = 8): the 150
  candidates with the least forced bound (NOTE [ Fixing candidates by the bound ]) at a 20 s
  bundle's reaches, plus the cells of three seeds' plans after 300 tables each (156
  candidates, 358 thousand pairs): HiGHS's best plan after 135 s padded 15,248,609 (the
  seeds' best: 15,106,463), its bound over those cells 14,857,281; over 402 candidates (905
  thousand pairs) it had no usable plan after 136 s. Prod K = 16, 100 such candidates plus
  the seeds' cells (118, 246 thousand pairs): 9,410,350 after 135 s (the seeds' best
  9,338,167), bound over them 9,189,822. Not a polish step for seconds.
* **Where the optimum is proved** (GSM8K with every length rounded up to a multiple of 6-16
  tokens, ``benchmarks/results/joint_gap.md``, NOTE [ The integrality gap, measured ] in
  :mod:`._bound`): the 5 s solve's plan is the optimum in 9 of the 10 proved cases (0.51 %
  above it in the tenth), the search alone with ``work_limit=300`` at it or 0.01-0.91 %
  above; where HiGHS proved nothing (s = 6, prod) its plans after 540 s pad 0.09-0.40 % less
  than the 5 s solve's.

So the plans are probably near-optimal (no proof: every method here is a search), and what keeps
these cases above 1 % is the bound (NOTE [ Stronger relaxations, measured ] in :mod:`._bound`):
prod K = 16 at 9,316,818 is still 2.4 % above its 30 s bound (9,099,567). What the search can
add is the last 0.2-0.5 % on prod K = 16, for about a minute of counted work
(``work_limit=3000``, NOTE [ Work instead of seconds ]).

Why the 5 s solve misses 9,316,818 on prod K = 16 (session 25, offline, quiet machine, CPU
seconds): the shakes from the first plan (9,537,544 at 1.1 s) pass 9,403,079 at 1.5 s and
9,362,366 at 5.4 s, and reach 9,316,818 only at 14.2 s (seed 0; 3,000 tables are 347 shakes, 26
s). A 5 s solve spends 1.1 s on the first search, 3.4 s on the bound (bundle, LP rounds, a
search from the LP's cells) and 0.5 s (8 shakes) on the shakes; it ended at 9,349,213-9,401,081
in five runs (the benchmark's: 9,416,251), the spread being what the short search from the LP's
cells reaches in its time. The LP rounds add only 0.07-0.11 % to the bundle's bound on the three
open cases in 1.2-2.1 s, but handing that time to the shakes would lower the bound of sum K = 16
and prod K = 8 for no better plan (theirs are within 0.03 % of the best known at 5 s). The other
start of that search, the K largest gains at the bound's reaches, mostly misses a sample (the
cell covering everything gains little; :func:`improve` does not repair a start): then it pads
``inf`` after 4-9 ms and is never kept (one later 5 s run of the four GSM8K cases: it covered
everything only at prod K = 16, 28.68 M against the LP start's 28.46 M). Repaired (the
covering cell in place of the smallest gainer) it planned 9.40-9.52 M (improve) and 9.33-9.44 M
(descend) at prod K = 16, 15.15-16.09 M at prod K = 8 and 148.5-154.2 thousand at sum K = 16
from the LP rounds' reaches,
and 9.39-11.6 M, 15.11-21.0 M and 148.6-156.7 thousand from the bundle's after 0.2-2 s: a
lottery mostly worse than the plan it would replace, so it was left as it is.
"""

from __future__ import annotations

import time
from typing import cast

import numpy as np

from bucketloader.strategies.joint._grid import Grid

#: Bound the (groups, grid) temporary of :func:`exchanges` to this many float64 values.
_CHUNK = 1 << 22
#: A step of :func:`descend` starts only when this many times the last step's cost fits.
_MARGIN = 1.5
#: The order :func:`first_plan` runs its phases in (0 the greedy start, 1 the lattice start;
#: NOTE [ The search under load ]) ...
_PHASES = (("descend", 1), ("improve", 1), ("descend", 0), ("improve", 0))
#: ... or this one, when the time left after the greedy start is less than
#: :data:`_LATTICE_FIRST` times what the greedy start took ...
_HURRIED = (("descend", 0), ("descend", 1), ("improve", 0), ("improve", 1))
#: (the lattice start and its descent cost 3-6 greedy starts on GSM8K at K = 8 and 16, the
#: greedy start's descent about 3)
_LATTICE_FIRST = 6
#: ... and the order its plans are compared in (the first that pads least is kept: session 6's
#: plans when every phase ends, NOTE [ Two descents ]).
_CHOICE = (("improve", 0), ("improve", 1), ("descend", 0), ("descend", 1))


def total(grid: Grid, size: np.ndarray) -> float:
    """Weighted sum of the sizes each point is padded to (``inf`` if any is uncovered)."""
    return float((grid.weight * size).sum())


def _levels(size: np.ndarray, big: float) -> tuple[np.ndarray, np.ndarray]:
    value, level = np.unique(np.where(np.isfinite(size), size, big), return_inverse=True)
    return level.ravel(), value


def greedy(grid: Grid, k: int) -> np.ndarray:
    """K cells by greedy addition from the covering cell, or the cover within a size limit
    (candidate ids; NOTE [ Cells within a size limit ])."""
    cells = [int(c) for c in grid.cover]
    _, size = grid.assign(np.array(cells))
    while len(cells) < k:
        gain = grid.gains(*_levels(size, 0.0))
        gain[cells] = -1.0
        best = int(np.argmax(gain))
        if gain[best] <= 0:
            break
        cells.append(best)
        _, size = grid.assign(np.array(cells))
    return np.array(sorted(cells), dtype=np.int64)


def lattice_drop(
    grid: Grid, k: int, per_input: int = 8, deadline: float = np.inf
) -> np.ndarray | None:
    """K cells by greedy removal from the occupied cells of a per-input lattice (the optimal 1-D
    boundaries of each input, ``per_input`` buckets), each lowered to its samples' maximum."""
    from bucketloader.histogram import LengthHistogram
    from bucketloader.strategies.optimal import optimal

    idx = []
    for d in range(grid.point.shape[1]):
        hist = LengthHistogram(
            np.arange(grid.shape[d]),
            np.bincount(grid.point[:, d], weights=grid.weight, minlength=grid.shape[d])
            .round()
            .astype(np.int64)
            .clip(min=1),
        )
        b = np.asarray(optimal(hist, per_input).boundaries)
        idx.append(np.searchsorted(b, grid.point[:, d]))
    _, group = np.unique(np.stack(idx, axis=1), axis=0, return_inverse=True)
    group = group.ravel()
    cells = np.unique(
        [
            int(
                grid.cand_of_flat[
                    np.ravel_multi_index(tuple(grid.point[group == j].max(0)), grid.shape)
                ]
            )
            for j in range(int(group.max()) + 1)
        ]
    )
    if (cells < 0).any():  # (a lattice cell above a size limit is no candidate: the cover
        cells = np.union1d(cells[cells >= 0], grid.cover)  # stands in, as drop_to keeps it)
    return drop_to(grid, cells, k, deadline)


def drop_to(grid: Grid, cells: np.ndarray, k: int, deadline: float = np.inf) -> np.ndarray | None:
    """Remove cells, each time the one whose samples lose least, until at most ``k`` remain (the
    cell covering everything, or the cover within a size limit, is added first and kept, so
    every sample stays covered); ``None`` once ``time.perf_counter()`` passes ``deadline``
    (with three inputs the removals can cost hundreds of greedy starts: s7-rev3)."""
    cells = np.asarray(cells, dtype=np.int64)
    if cells.size <= k:
        return cells
    cells = np.union1d(cells, grid.cover)
    kept = np.isin(cells, grid.cover)
    cost = np.where(grid.covers(cells), grid.cand_size[cells][:, None], np.inf)
    while cells.size > k:  # the cover stays: every other removal is then feasible
        if time.perf_counter() > deadline:
            return None
        two = np.partition(cost, 1, axis=0)  # each point's cheapest and next cheapest cell
        slot = cost.argmin(axis=0)
        extra = np.bincount(slot, weights=grid.weight * (two[1] - two[0]), minlength=cells.size)
        extra[kept] = np.inf
        drop = int(np.argmin(extra))
        cells, cost = np.delete(cells, drop), np.delete(cost, drop, axis=0)
        kept = np.delete(kept, drop)
    return cells


def exchanges(grid: Grid, cells: np.ndarray, big: float) -> np.ndarray:
    """``(k, C)``: how much padding dropping ``cells[f]`` and adding candidate ``c`` saves, for
    every pair at once (NOTE [ Every exchange at once ]); ``-inf`` where ``c`` is already a cell
    or the exchange leaves a sample uncovered."""
    out, bad = _saves(grid, cells, big)
    out[bad] = -np.inf
    out[:, np.asarray(cells, dtype=np.int64)] = -np.inf
    return out


def _saves(grid: Grid, cells: np.ndarray, big: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`exchanges` before any ``-inf``: every saving, ``big`` standing for "no cell"
    (exact: sums of integer-valued floats), and where the exchange leaves a sample uncovered."""
    cells = np.asarray(cells, dtype=np.int64)
    k, n = cells.size, grid.weight.size
    cost = np.where(grid.covers(cells), grid.cand_size[cells][:, None], big)
    slot = cost.argmin(axis=0)
    first = cost[slot, np.arange(n)]
    second = np.partition(cost, 1, axis=0)[1] if k > 1 else np.full(n, big)
    loss = np.bincount(slot, weights=grid.weight * (second - first), minlength=k)
    # one group per (cell, next cheapest size): each group's covered weight is a prefix sum
    value, level = np.unique(second, return_inverse=True)
    key, group = np.unique(slot * value.size + level.ravel(), return_inverse=True)
    group = group.ravel()
    owner, then = key // value.size, value[key % value.size]
    g, c = int(np.prod(grid.shape)), grid.cand_size.size
    # in size order a group's points gain only on the candidates below ``then``: a prefix
    size, where = grid.sorted_size, grid.cand_flat[grid.by_size]
    reach = np.searchsorted(size, then, side="left")
    cover = np.zeros((k, c))  # weight of each cell's points that candidate c covers
    extra = np.zeros((k, c))  # ... times what c saves them once their cell is gone
    bad = np.zeros((k, c), dtype=bool)
    step = max(1, _CHUNK // max(g, 1))
    for lo in range(0, key.size, step):
        hi = min(key.size, lo + step)
        mine = (group >= lo) & (group < hi)
        w = np.bincount(
            (group[mine] - lo) * g + grid.point_flat[mine],
            weights=grid.weight[mine],
            minlength=(hi - lo) * g,
        ).reshape((hi - lo, *grid.shape))
        for ax in range(1, w.ndim):
            np.cumsum(w, axis=ax, out=w)
        flat = w.reshape(hi - lo, g)
        for j in range(lo, hi):
            m, f = int(reach[j]), int(owner[j])
            covered = flat[j - lo, where[:m]]
            cover[f, :m] += covered
            extra[f, :m] += covered * (then[j] - size[:m])
            if then[j] >= big:  # samples only cells[f] covers (every candidate is below big)
                bad[f, :m] |= covered < flat[j - lo, -1] - 0.5
    now = np.maximum(grid.cand_size[cells][:, None] - size[None, :], 0.0)
    now *= cover
    extra -= now
    extra += now.sum(axis=0) - loss[:, None]
    out, uncovered = np.empty_like(extra), np.empty_like(bad)
    out[:, grid.by_size] = extra  # back to candidate order
    uncovered[:, grid.by_size] = bad
    return out, uncovered


def _start(grid: Grid, cells: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """At most ``k`` cells after a Lloyd step: ``(cells, sizes, total, big)``, ``big`` the size
    that stands for "no cell"."""
    cells = cast(np.ndarray, drop_to(grid, cells, k))  # (no deadline: never None)
    slot, size = grid.assign(cells)
    cells = grid.tighten(cells, slot)
    _, size = grid.assign(cells)
    return cells, size, total(grid, size), float(grid.cand_size.max()) * 4.0 + 1.0


def _exchange(
    grid: Grid, rest: np.ndarray, add: int
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``rest`` plus candidate ``add`` after a Lloyd step: ``(cells, sizes, total)``, or
    ``None`` if a sample has no cell."""
    trial = np.unique(np.append(rest, add))
    tslot, tsize = grid.assign(trial)
    if not np.isfinite(tsize).all():
        return None
    trial = grid.tighten(trial, tslot)
    _, tsize = grid.assign(trial)
    return trial, tsize, total(grid, tsize)


def improve(grid: Grid, cells: np.ndarray, k: int, deadline: float) -> tuple[np.ndarray, bool]:
    """Swaps and Lloyd steps from ``cells`` until no swap helps or ``deadline`` (perf_counter).

    Each cell in turn gets its best exchange (NOTE [ Greedy, swap, Lloyd ]), read from one
    :func:`_saves` table that serves every try until a swap is kept (NOTE [ One table per kept
    swap ]). Returns ``(cells, converged)``; ``converged`` is False when the deadline stopped it.
    ``cells`` must cover every sample (a start that leaves one uncovered is not repaired here).
    """
    cells, _, best, big = _start(grid, cells, k)
    changed, cost, table, table_cost = True, 0.0, None, 0.0
    while changed:
        changed = False
        for j in range(len(cells)):
            t0 = time.perf_counter()
            # the last swap's cost must still fit (and a new table's, when one is due)
            if t0 + cost + (table_cost if table is None else 0.0) > deadline:
                return cells, False
            if j >= len(cells):
                break
            if table is None:
                table, _ = _saves(grid, cells, big)
                table_cost = time.perf_counter() - t0
            row = table[j].copy()
            row[cells] = -np.inf
            row[cells[j]] = 0.0  # adding the cell back saves nothing
            tried = _exchange(grid, np.delete(cells, j), int(np.argmax(row)))
            if tried is None:
                continue
            trial, _, value = tried
            if value < best * (1 - 1e-12) - 1e-9:
                cells, best, changed, table = trial, value, True, None
            cost = time.perf_counter() - t0
    return cells, True


def descend(
    grid: Grid,
    cells: np.ndarray,
    k: int,
    deadline: float,
    cost: float = 0.0,
    steps: float = np.inf,
) -> tuple[np.ndarray, float, int, bool]:
    """Best exchanges with Lloyd steps from ``cells`` until none helps, ``deadline`` or ``steps``
    tables: each step takes the exchange of :func:`exchanges` that saves most (for the cell
    whose best exchange saves most first, Lloyd step included, the next one if that does not
    help). Faster than :func:`improve` from a nearby plan, with the same neighbourhood.
    ``cost`` is the expected cost of one step (a step starts only when it still fits); returns
    the cells, the last step's cost, the tables counted and whether no exchange helps (False:
    the deadline or ``steps`` stopped it)."""
    cells, _, best, big = _start(grid, cells, k)
    used = 0
    while used < steps and time.perf_counter() + _MARGIN * cost <= deadline:
        t0 = time.perf_counter()
        table = exchanges(grid, cells, big)
        used += 1
        add = table.argmax(axis=1)
        saves = table[np.arange(cells.size), add]
        for f in np.argsort(-saves, kind="stable"):
            if not np.isfinite(saves[f]):
                return cells, cost, used, True
            tried = _exchange(grid, np.delete(cells, f), int(add[f]))
            if tried is not None and tried[2] < best * (1 - 1e-12) - 1e-9:
                cells, _, best = tried
                break
        else:
            return cells, time.perf_counter() - t0, used, True
        cost = time.perf_counter() - t0
    return cells, cost, used, False


def first_plan(grid: Grid, k: int, deadline: float) -> tuple[np.ndarray, bool, bool]:
    """The search's plan from the greedy and lattice starts until ``deadline`` (NOTE [ The
    search under load ]): :func:`descend`, then :func:`improve`, from the lattice start, then
    from the greedy start (the greedy start's descent first when time is short). Returns
    ``(cells, local, converged)``: ``local`` when the plan is a local optimum (its phase ended
    in one), ``converged`` when every phase ended in one (none was cut or skipped)."""
    began = time.perf_counter()
    starts: list[np.ndarray | None] = [greedy(grid, k)]
    took = time.perf_counter() - began
    # too little time for the lattice start's descent: the greedy start's goes first
    order = _PHASES if deadline - time.perf_counter() >= _LATTICE_FIRST * took else _HURRIED
    found: dict[tuple[str, int], tuple[np.ndarray, bool]] = {}
    cost = 0.0  # the last table step's cost: the next phase starts a step only when it fits
    for phase in order:
        how, which = phase
        if time.perf_counter() + _MARGIN * cost > deadline:
            break
        if which == len(starts):
            now = time.perf_counter()
            starts.append(lattice_drop(grid, k, deadline=now + 0.5 * (deadline - now)))
        start = starts[which]
        if start is None:  # the lattice start was not built in its share of the time left
            continue
        if how == "descend":
            cells, cost, _, done = descend(grid, start, k, deadline, cost)
        else:
            cells, done = improve(grid, start, k, deadline)
        found[phase] = cells, done
    # the first plan that pads least, in session 6's order (ties); a start itself only when it
    # pads less than every plan found (the clock cut the phases early)
    plans = [found[phase] for phase in _CHOICE if phase in found]
    best, value, local = cast(np.ndarray, starts[0]), np.inf, False
    for cells, done in [*plans, *((start, False) for start in starts if start is not None)]:
        _, size = grid.assign(cells)
        if total(grid, size) < value * (1 - 1e-12) - 1e-9:
            best, value, local = cells, total(grid, size), done
    converged = len(found) == len(_PHASES) and all(done for _, done in found.values())
    return best, local, converged


def iterate(
    grid: Grid,
    k: int,
    cells: np.ndarray,
    deadline: float,
    seed: int = 0,
    patience: float = 4,
    steps: float = np.inf,
) -> tuple[np.ndarray, int]:
    """Iterated local search from the local optimum ``cells`` until ``deadline`` or ``steps``
    exchange tables (NOTE [ Work instead of seconds ]): replace ``r`` random cells by random
    candidates, :func:`descend`, keep the result when it pads less (``r`` back to 1) or try one
    more cell next time (NOTE [ Shakes ]); ``patience`` (shakes per cell) without a better plan
    also stops it (``math.inf``: never). Returns the best cells and the number of shakes."""
    rng = np.random.default_rng(seed)
    cover = grid.covers(grid.cover)
    best = np.asarray(cells, dtype=np.int64)
    _, size = grid.assign(best)
    big = float(grid.cand_size.max()) * 4.0 + 1.0
    began = time.perf_counter()
    exchanges(grid, best, big)  # one step's cost, before the first shake is started
    value, r, shakes, cost, last = total(grid, size), 1, 0, time.perf_counter() - began, 0
    used = 0
    while (
        used < steps
        and time.perf_counter() + _MARGIN * cost < deadline
        and shakes - last < patience * k
    ):
        shakes += 1
        trial = best.copy()
        which = rng.choice(trial.size, size=min(r, trial.size), replace=False)
        trial[which] = rng.integers(0, grid.cand.shape[0], size=which.size)
        lost = ~np.isfinite(grid.assign(trial)[1])
        if lost.any():  # every sample stays covered: the cover's cells over the lost samples
            back = grid.cover[cover[:, lost].any(axis=1)]
            trial[which[: back.size]] = back[: which.size]
            trial = np.concatenate([trial, back[which.size :]])  # (drop_to keeps k of them)
        trial, cost, spent, _ = descend(grid, np.unique(trial), k, deadline, cost, steps - used)
        used += spent
        _, size = grid.assign(trial)
        if np.isfinite(size).all() and total(grid, size) < value * (1 - 1e-12) - 1e-9:
            best, value, r, last = trial, total(grid, size), 1, shakes
        else:
            r = r + 1 if r < max(1, k // 2) else 1
    return best, shakes
