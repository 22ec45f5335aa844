"""A certified lower bound on the joint plan's padding: Lagrangian relaxation, bundle ascent.

NOTE [ The Lagrangian bound ]
The plan is a facility-location problem: open at most K candidate cells ``y_c``, send every
point ``i`` (weight ``w_i``) to one open cell covering it, pay ``w_i · size(c)``. Relaxing
"every point is sent exactly once" with a multiplier ``λ_i = w_i (r_i − size_i)`` (``r_i``, the
point's *reach*) leaves

    L(r) = Σ_i λ_i − Σ_{the K largest} g_c(r),
    g_c(r) = Σ_{i covered by c} w_i · max(0, r_i − size(c))

(plus the constant ``Σ w_i size_i``), a lower bound on the optimal padding for **every** ``r``;
its maximum over ``r`` equals the LP relaxation's value. ``L`` is concave and piecewise linear
in ``λ = w · r``, with the supergradient ``1 −`` (how many of the K largest gainers serve point
``i`` below its reach). Every evaluation is exact at the reaches themselves (NOTE [ Gains by
rows ] in :mod:`._grid`: about 10-20 ms on GSM8K, where rounding the reaches down to 96-2,048
levels took 0.3-0.8 s; grids without rows: NOTE [ Bounds without rows ]), so ``L`` is maximised
by a *proximal bundle* method (Kiwiel; Lemaréchal): the cuts of the last :data:`BUNDLE`
evaluations model ``L``; each step goes to the model's maximum minus ``‖d‖² / 2t`` (a quadratic
program over the simplex of the cuts' weights, solved by accelerated projected gradient), in the
metric that scales ``λ_i`` by the square root of its point's size (:data:`SCALE_POWER`: the
multipliers of long points are larger and need larger steps); the centre moves only when ``L``
gains at least :data:`SERIOUS` of what the model promised (a *serious* step, ``t`` grows after a
good one), else the cut just joins the model (a *null* step, ``t`` shrinks after five). Unused
cuts fold into one aggregate cut. It starts at the sizes of the heuristic plan's cells, with
``t`` :data:`STEP_SCALE` times Polyak's step towards the plan's padding, and stops at the
target, when the model sees no ascent (then ``L`` is at the LP's value) or on a stall (the last
:data:`STALL` steps closed under :data:`STALL_SHARE` of the gap: the LP rounds do better there,
NOTE [ The LP bound by columns ]). Every ``L`` evaluated is a valid bound; ``lower_bound`` is
the best one seen. The candidates are the tight grid points (NOTE [ Candidate cells ]), which
keep every optimum, so the bound holds for all plans, not only those on candidates. Measured on
GSM8K (K = 8, sum, from the same 30 s plan): the bundle alone reached a 1.45 % gap in 30 s at
load 8 (507 steps), where Polyak's subgradient steps reached 7.4 %, the volume algorithm 6.8 %
and deflected (Camerini-Fratta-Maffioli) steps 4.9-5.4 % in 20-60 s; the shipped subgradient +
LP rounds 2.32 % at 30 s (session 4, quiet machine). At K = 16: 2.7 % against 7.89 %. Its path
is chaotic: a rounding change in the cuts' products moves the gap at 800 steps between 1.25 and
1.33 %, more than most of the parameters tried (80 or 150 cuts, 50-400 QP steps, ``STEP_SCALE``
1-10) moved it. The metric did matter (same 3 s plan, gap after 200 / 400 steps, unscaled
against square-root scaled): K = 8 sum 1.83 / 1.54 % against 1.06 / 0.74 %, K = 8 prod 7.20 /
6.10 % against 3.73 % / -, K = 16 sum 4.44 / 4.25 % against 3.70 / 3.63 %; scaling by the size
itself (power 1) was as good at K = 16 sum, worse at K = 8 prod (4.42 % at 200), power 0.75
slightly worse at K = 16 prod (7.46 against 7.24 %).

NOTE [ Bounds without rows ]
Where gains are not exact by rows (three or more inputs, or two with more (row, point) pairs
than :data:`._grid._GAIN_CHUNK`), exact gains at a reach per point cost a pass of sorted
blocks: 6-22 s per evaluation on a two-input histogram of 78,000 distinct pairs on a 500 x 500
grid. There every evaluation rounds the reaches *down* to at most :data:`LEVELS` values
(:data:`MID_LEVELS`, :data:`LP_LEVELS` in the LP rounds), which is just another ``r``: the bound
stays valid (any cut taken there is at the rounded point, so a model stays exact). Each
evaluation is timed, and its seconds per operation of :meth:`.Grid.gains_cost` predict the next
one's: none starts that would not end before the deadline, and with little time left the
reaches round to fewer levels (down to :data:`FEWEST`). With about 0.5 s per evaluation (the
histogram above, 96 levels) the bundle's first few steps are worse than Polyak's subgradient
steps (``lagrangian`` runs those there, session 4's ascent, for session 4's share of the time,
``SUBGRADIENT_SHARE``): measured side by side with session 4's code on that histogram (sum,
K = 8, load 1-3), a 1 s solve ended at 1.09-1.18 s with a 24.9-28.3 % gap (session 4's code:
1.13-1.20 s, 21.7-24.9 %), a 5 s solve at 4.73-4.96 s with 11.48-11.68 % (session 4's code:
4.65-5.05 s, 11.53-11.68 %); the bundle there had reached 28-33 % at 1 s and 15.6-31.8 % at
5 s, returning after up to 9 s before these guards. Three inputs (3,000 samples, 5 s, main
with its shakes merged): 12.8 / 20.9 % at sum K = 4 / 8 and 27.0 / 42.8 % at prod, against
session 4's code's 16.5 / 28.1 and 27.0 / 47.0 %.

NOTE [ The LP bound by columns ]
Bundle steps approach the LP's value slowly in the end. Where time allows, the LP relaxation is
solved (HiGHS, :mod:`._lp`) on a growing set of (point, candidate) *pairs*: with all ~30 million
covering pairs of GSM8K no round fits in seconds, so a candidate enters with only the points it
covers whose reach exceeds its size (the pairs with a negative reduced cost there; Avella,
Sassano and Vasil'ev's core pairs for the p-median), and the heuristic's cells with every point
they cover (so the restricted LP is feasible). Points with the same pairs are one row. The duals
of the "send every point once" rows are reaches (per unit of weight) for **all** points, so
``L(r)`` over **all** candidates is again a valid bound, whatever the restricted LP lacks.
The restricted LP is degenerate: it stays at the plan's value for many rounds, and its duals
alone give poor bounds and price the wrong pairs. So each round first evaluates and prices at
reaches between the best bound's and the LP's (``SMOOTH`` of the way to the best: Wentges'
dual smoothing), adding the K largest gains there with their positive pairs; only when those
bring nothing new does it price at the LP's own duals: every candidate, in the LP or not, whose
gain exceeds the dual of the shape budget gets its missing positive pairs. When none does, the
duals are optimal for the full LP and the bound is the LP's value. Each round whose LP took
over ``LINE_COST`` times the first point's evaluation also tries a second point on the line
from the best bound's reaches to the LP's: twice as far after a gain, half as far after none,
keeping the better. Measured on GSM8K, K=8, bound (on the padding plus its constant) after the
same number of rounds with it on every round: 937,521 against 935,477 at round 20 for sum,
33.46 M against 33.21 M at round 25 for prod. In the early rounds the LP is quick and the
evaluation is most of the round: with it on every round, a 5 s solve of GSM8K K=4 (prod) fitted
11-12 rounds where it fitted 22 without (one noisy A/B), hence ``LINE_COST``. Back to back
at 30 s (two pairs each, quiet machine): GSM8K K=16 (prod) 10.93 % gap against 13.07 and
13.96 % without; K=8 (sum) 2.56-2.60 % against 2.48 %. Measured (GSM8K,
K=8, sum, 20 s, loaded machine): whole candidates with all their pairs reached a 16.8 % gap;
core pairs with smoothing 2.7-8 %. On GSM8K the restricted LP's own value
never left the plan's in any round (logged at K=8, sum, 30 s). That is degeneracy, not an
LP-optimal plan (session 4, K=8, sum): cutting planes on the LP's dual restricted to the
complementary-slackness box of that plan (every reach between the sizes of a point's cheapest
and second-cheapest plan cell) stay at or below 209,336 on the padding, while the bound itself
reached 218,799 at 600 s, where the LP's cells also seeded a plan padding 220,416 (the 30 s
plan: 220,702, so within 0.87 % of that bound all along). So there the gap is the dual
side. The bundle (NOTE [ The Lagrangian bound ]) runs first for half the time left after the
search (``BUNDLE_SHARE``), then between the LP rounds, each time as long as the round's LP
took, and it learns every point the rounds evaluate (their cut joins its model; the centre
moves there when it is better). So where the LP is quick (small histograms, K = 4) the rounds
take most of the time and close the gap or prove the LP's value, and where each round takes
seconds (GSM8K, K = 8 and 16) the bundle does most of the ascent. Measured at 5 s, load 10:
GSM8K K = 4 0.31 % (sum) and 1.23 % (prod) with the interleaving, 3.72 % and 2.32 % with the
bundle first for 90 % of the time; Multi30k K = 16 (sum) proved optimal with it, 0.32 % without.

NOTE [ LP rounds on time ]
HiGHS reads its clock between steps, and some steps of a large model are long: measured on
GSM8K models (sum, K = 16, 200 or 500 candidates drawn at random with the covering cell;
session 10, load 7-9), 430 thousand covering pairs (199 thousand once rows merge) returned
after 8.9 s (``milp``; 30.6 s without presolve) and 4.7 s (``linprog``, its LP) at a 2 s
limit, and 1.1 million pairs 103 s late at 10 s. The integer
program is guarded by its size (NOTE [ The joint integer program ] in :mod:`._ilp`), and the
LP rounds start while their deadline is ahead, so one round that starts with little time left
can run past it, taking time from the phases after it (or the solve's limit). So a round starts
only when the last round's seconds, scaled by its pairs (the rounds grow), fit the time left;
the first round (the smallest) always starts. A round HiGHS stops at its limit gives no duals
and ended the rounds anyway, so the guard only hands its time to the search and the shakes.
At 5 s on GSM8K (sum K = 16, prod K = 8 and 16; load 7, one run each, before and after):
HiGHS stopped 2 of 8 rounds at their limit before, 0 of 7 after; the same plans, every solve
within 0.03 s of its limit both ways. ``solve_joint`` itself kept its limit before too (60 s:
+0.01 / +0.02 s on prod / sum K = 16; 120 s, sum K = 16: +0.06 s), the rounds being small
(up to 16 thousand pairs); the overruns above are direct calls on larger models.

NOTE [ Where the LP relaxation stops ]
Every bound here is at most the LP relaxation's value (the Lagrangian's maximum), unless the
integer program runs. Each LP round logs its restricted LP's value (``log[i][4]``): the full LP
with fewer pairs, so at or above the LP's value; the best ``L`` and the lowest restricted value
bracket the LP (``benchmarks/joint_lp.py``). Run far past any time limit (the bundle, then
600-900 s of LP rounds, the last ones 60-100 s each, load 2-8; the tightest ends of two runs)
on GSM8K:

=============  ===========  ===========================  =======  ==================
case           best plan    LP value (below - above)     least    survivors (pairs)
=============  ===========  ===========================  =======  ==================
sum, K = 16    147,067      145,159 - 145,539            1.05 %   11,311 (28.3 M)
prod, K = 8    15,106,463   14,805,745 - 14,813,932      1.97 %   10,516 (27.6 M)
prod, K = 16   9,319,759    9,101,929 - 9,132,006        2.06 %   12,706 (29.6 M)
=============  ===========  ===========================  =======  ==================

(*least*: the best plan's gap to the upper end, the smallest any bound of the LP's kind can
give it; *survivors*: of 13,276 candidates and 29.6 M covering pairs, what fixing by the final
bound leaves against the plan the run started from, NOTE [ Fixing candidates by the bound ]:
far too many for the integer program: HiGHS proved the optimum of 150 GSM8K rows, 99 thousand
pairs, in 75 s, and had no useful bound on 400 rows, 649 thousand pairs, after 360 s.) So these
three cases cannot be certified within 1 % by this relaxation, however long it runs. What is
missing is the LP's integrality gap, which is real on this model: on 7 points with K = 2 the
LP opens 4 cells at 1/2 (96 against the optimum 98), the p-median's half-integral pattern; on
Multi30k (prod, K = 16) the LP's value is 915,758 where the optimum, proved by the integer
program, is 919,388.

NOTE [ The integrality gap, measured ]
Is the optimum of the three open GSM8K cases near the LP (our plans 1-3.5 % off) or near our
plans (an integrality gap)? Measured where the optimum can be proved (session 24,
``benchmarks/joint_gap.py``, ``benchmarks/results/joint_gap.md``): GSM8K with every length
rounded up to a multiple of s = 16, 8 or 6 tokens (87-374 distinct points, up to 124 thousand
covering pairs), the explicit LP, then HiGHS on the pairs its duals leave against the best
plan (NOTE [ Certifying a target by fixing pairs ] in :mod:`._cert`), up to 600 s. In the 10
cases HiGHS proved (s = 16 and 8, and s = 6 at sum) the LP lies below the optimum by
0.25-0.61 % at sum K = 8, 0.80-1.50 % at sum K = 16, 2.14-2.66 % at prod K = 8 and
1.47-1.64 % at prod K = 16: the same order and size as from the LP to the best plans known
on the real histogram (0.62 % at sum K = 8 from ``benchmarks/results/joint.md``'s bound;
1.11, 2.00 and 2.19 % in the table above). And in 9 of those 10 the 5 s solve's plan *was*
the optimum (s = 6, sum K = 16: 0.51 % above it) with the LP's value as its bound: its whole
reported gap (up to 2.15 %) was the integrality gap. At s = 6, prod, HiGHS proved nothing in
540 s (70-78 thousand pairs left); its best plans there pad 0.40 % (K = 8) and 0.09 %
(K = 16) less than the 5 s solve's (0.21 / 1.42 % less than the search alone with
``work_limit=300``), and the LP lies 0.32-2.94 % (K = 8) and 0.39-2.15 % (K = 16) below the
optimum. So the open cases' gaps are mostly the LP's (the plans may hold a few tenths of a
percent at prod), and only integer reasoning (branching, cuts) certifies them: HiGHS's
branch-and-cut needed 8-301 s on the proved models of s = 8 and 6 (6.9-36 thousand pairs
left), where the real histogram has 29.6 million pairs (7.6 million left after fixing,
``benchmarks/results/joint_cert.md``). No bound of that kind in seconds is known here (the
attempts below, NOTE [ Stronger relaxations, measured ] and
NOTE [ Benders cuts for the joint plan ]).

Tried offline, not shipped: a Lagrangian branch-and-bound on top of the bundle (nodes fix cells
open or closed; ``L`` at a node subtracts the forced cells' gains and the largest allowed
others; reduced-cost fixing at every node, best bound first, branching on the cell that the
bundle's aggregate opens most fractionally, each node warm-started from its parent's reaches).
On GSM8K (prod, K = 8) from the 15,106,463 plan, 150 s at load 3-6: 103 nodes moved the global
bound from the root's 14,749,238 to 14,763,212 (+0.09 %; 1 % needs +1.3 %). The root's two
children, 187 bundle steps each: opening the most fractional cell +0.10 %, closing it
+0.18 %; closing its 3 x 3 (5 x 5) neighbourhood of cells +0.55 (0.66) %, but "one of them
open" only +0.03 %: near-equal cells stand in for each other, and every node needs tens to
hundreds of 10-20 ms evaluations.

What does cut the LP: *odd-cycle inequalities*. For cells ``a, b, c`` and points ``p, q, s``,
``p`` covered by ``a`` and ``b``, ``q`` by ``b`` and ``c``, ``s`` by ``c`` and ``a``:
``x_pa + x_pb + x_qb + x_qc + x_sc + x_sa <= y_a + y_b + y_c + 1`` (each point sends one unit
to an open cell: with t of the three cells open, at most min(3, 2t) <= t + 1 of the points
go to them). As cutting
planes on the explicit LP (offline; separated among the cells the LP opens, the point of each
edge the one with the most flow to its two cells; up to 200 most violated per round): on 40
random instances of 5-8 points with an LP gap (1.08 % on average) they closed 88 % of it on
average, all of it in 32; on Multi30k (prod, K = 16: 576 candidates, 130 thousand pairs) 31 %
of the 0.40 % in 40 rounds (505 s); but on 150 rows of GSM8K (prod, K = 8: 1,332 candidates,
99 thousand pairs, LP 172,851 against the optimum 174,843, a 1.14 % gap) only 3.4 % before
none was violated. Triangles are not GSM8K's pattern: that sample's LP opens 26 cells at
multiples of 1/8 (one at 1, one at 3/4, three at 1/2) and splits most points over several
cells (of 145 points: 1 over one cell, 3 over two, 55 over three, 64 over four, 20 over five,
2 over six). Longer odd cycles, other families, or branching on top of the cuts would be
needed, and relax-and-cut (each cut's
multiplier joining the bundle's, its six pairs corrected in the gains, its cells given the
multiplier as a bonus) would carry them into the time limit. Not known to close 1 % there.
Three other relaxations above the LP were measured next: NOTE [ Stronger relaxations, measured ].
The other side, plans below ours, was searched too and none is more than 0.4 % below them
(NOTE [ How good the plans are ] in :mod:`._search`): the gap is the bound's.

NOTE [ Stronger relaxations, measured ]
Three relaxations of the joint plan that are valid and can exceed the LP's value were measured
on the three GSM8K cases (``benchmarks/joint_relax.py``, ``benchmarks/results/joint_relax.md``;
session 7, load 11; validity checked offline against the brute-force oracle on tiny
histograms: 150, 60 and 200 hypothesis examples). None of them gets near the target, the plan
/ 1.01 (about 145.6 thousand, 14.96 M and 9.22-9.27 M):

* **Aggregation.** Replace each group of samples by one sample at the group's input-wise
  minimum carrying its weight: a plan serves it at most as dearly as each member, so the
  aggregated optimum bounds the real one from below, and a small aggregate would fit the
  integer program. But the plans found *for the aggregate* (5 s solves, so the aggregated
  optimum is at or below them) are already 2.7-6.3 % below the target with 2 x 2 blocks of
  lengths (1,740 groups of 3,736), 8.5-16 % with 3 x 3 blocks, and still 3.9 % (sum K = 16),
  34 % (prod K = 8) and 9.1 % (prod K = 16) below it keeping every sample within 4 tokens below
  one of the plan's coordinates exact (2,049-3,339 groups). The plans pad about 20 tokens per
  sample (sum K = 16), so 1 % is 0.2 tokens a sample: a relaxation that lets a cell stop at a
  group's minimum gives away more than that wherever a group is wider than one length.
* **Branching on counts** (the SOS-like branching of NOTE [ Where the LP relaxation stops ]
  on regions instead of cells). The plans with exactly ``n`` cells among those at most ``t`` in
  one input, ``n = 0 .. K``, partition every plan; each child's ``L`` takes the ``n`` largest
  gains inside and the ``K − n`` largest outside. On prod K = 8 (40 s of bundle each, ``t``
  the plan's median coordinate, counts 3, 4 and 5 around the plan's 4): over the root's
  14,780,380 the children rise +0.42 / +0.02 / +1.20 % (input 1) and +0.17 / +0.21 / +1.25 %
  (input 2); the bound is the least child over every ``n``, so the least of the three run
  (+0.02 % and +0.17 %) is an upper end on what it gives, where 1 % needs +1.2 %. Sum K = 16
  (counts 7, 8, 9 around the plan's 8, root 145,024; `benchmarks/joint_relax.py --branch-cases
  gsm8k:sum:16`, a run not in the written results file): +0.07 / +0.00 / +0.37 % and
  +0.14 / +0.00 / +0.22 %, where 1 % needs +0.40 %.
  The child with the plan's own count stays near the root: the LP spreads its cells *within*
  the plan's structure (NOTE [ Where the LP relaxation stops ]), so the tree would have to go
  on splitting the plan-like child.
* **Row decomposition.** In the Lagrangian subproblem a sample may gain from only one cell per
  row of the grid (its cheapest chosen one there: an exact DP over the row's cells, then a
  knapsack of K over the rows), still adding up across rows: at or above ``L`` at every
  reach. At the bundle's best reaches (sum K = 16): 145,021 against ``L`` = 145,021 (and
  +2 on 144,783 in an earlier run). Each row's subproblem has intervals as neighbourhoods, whose
  LP should be integral (an interval matrix), and then the decomposition's maximum is the
  LP's value: splitting into one-input problems gains nothing, as measured.

A relaxation with no integrality gap at all, measured (session 25, offline scripts not in the
repository): Beltran, Tadonki and Vial's *semi-Lagrangian* relaxation (Comput. Optim. Appl. 35,
2006). Keep "every point is sent at most once" in the subproblem and relax only "at least once":

    φ(r) = Σ_i w_i r_i − max_{|S| ≤ K} Σ_i w_i · max(0, r_i − min_{c ∈ S covers i} size(c))

is at most the optimum for every ``r`` (a plan's cost is ``Σ w_i r_i`` minus its own term),
never below ``L(r)`` (``L`` lets a point gain from every cell), nondecreasing in each ``r_i``
(its supergradient is ``w_i`` for a point the maximiser leaves unserved, else 0), and equal to
the optimum once ``r`` is large enough; checked against brute force on 300 tiny histograms
(1,500 random ``r``). The catch is the maximum: a K-cell coverage problem as hard as the plan,
over the pairs with ``size(c) < r_i``. Ascent from the LP's duals, raising each unserved
point's ``r_i`` to the third next cell size above it, each maximum by HiGHS (GSM8K rounded
up to multiples of s tokens, NOTE [ The integrality gap, measured ]): at s = 16 all four cases
reach the proved optimum (8,061 / 3,188 / 41,196 / 18,082) within 22 s (4-20 programs;
HiGHS proves them directly in 0-2 s); at s = 8, sum K = 8 reaches 21,764 (the optimum) in 17 s
(direct: 8 s), prod K = 8 closes 96 % of the LP's gap in 771 s (201,337 against the optimum
201,499; 17 programs of 8-83 s; direct: 87 s), prod K = 16 94 % in 449 s (110,205 against
110,309; direct: 75 s). So it closes the integrality gap, but only through integer programs
slower than the plan's own, and on the real GSM8K (prod K = 16) the reaches of a 30 s bound
(9,100,259) leave 2.39 million pairs with ``size(c) < r_i`` (of 29.6 million), where 14
thousand took HiGHS 8-83 s. Not usable in seconds.

Relaxing only the shape budget (a price λ per open cell: uncapacitated facility location, bound
max_λ UFL(λ) − λK) gives the lower convex envelope of OPT(k) at K, if UFL(λ) is solved exactly.
Measured (session 25) on GSM8K rounded to s = 16, k = 4-20 (OPT(k) proved by the integer program
for k = 6-20; at k = 5 the plan equals the LP): OPT(k) lies on that envelope at every k = 6-19
for both costs, so the envelope is OPT(K) itself there (the LP lies 0-2.66 % below it). But then
the UFL's optimum at the right λ is the K-cell optimum, so an exact UFL is as hard as the plan;
its LP (whose best λ gives the LP's value) has the same absolute gap at that λ, and no exact
algorithm for UFL over 2-D dominance (a DP over the staircase of maximal cells would need the
whole staircase as its state: each dearer open cell sticks out of the region the cheaper ones
cover) is known here. Not pursued.

Generic cuts, for scale (an offline script, not in the repository): HiGHS's root node
(``node_limit=1``) on 150 random GSM8K rows (prod K = 8, 1,703 candidates, 117 thousand
pairs, seed 0) lifted the LP's 411,183 to 414,464 against its best plan 418,913, 42 % of
that gap, but took 270 s (load 8-13) for 4 % of the rows, and no explicit model of all 30
million pairs fits. So a certificate for these three
cases needs a full branch-and-cut on a compact model, far beyond the time limit: none of the
above is used by :func:`lagrangian` or :func:`lp_bound`.

Fixing pairs against the target, then the integer program (session 9, offline:
NOTE [ Certifying a target by fixing pairs ] in :mod:`._cert`, ``benchmarks/joint_cert.py``,
``benchmarks/results/joint_cert.md``; valid against the oracle, ``tests/test_joint_cert.py``).
Certifying 1 % needs only "no plan below the target", so every covering pair whose forced
Lagrangian bound reaches the target leaves the model, and the program over the rest decides. On
GSM8K sum K = 16 (load 6.3 falling to 2.8, a 60 s plan padding 147,112, target 145,656; 900 s
of bundle and LP rounds, LP value 145,302 - 145,474) the best point leaves 5,274 of 13,276
candidates and 7.6 million of 29.6 million pairs; the 24 best points together fix nothing more
(they are near one another). The table of what it leaves just above the bound: 403 cells and
182 thousand pairs at bound + 25, 1,352 and 1.07 million at + 100, 2,955 and 3.2 million at
+ 200; the target is 354 above. The heavy ties at the Lagrangian's optimum (NOTE [ Where the LP
relaxation stops ]: near-equal cells) keep thousands of cells within a few hundred of the K-th
gain, so no bound of the LP's kind fixes enough. And HiGHS does not bound what is left: on the
model fixed against 145,450 by an earlier 900 s bound (145,371; 1,065 cells, 748 thousand
pairs, 2,382 rows) it had not finished its root LP after 540 s (load 5; Europarl prod K = 16,
928 thousand pairs: none after 85 s). So the certificate closed 0 % of the way from the bound
to the target: to leave a program of the size HiGHS proved before (NOTE [ Where the LP
relaxation stops ]: 99 thousand pairs in 75 s) it would need a bound within less than 25 of the
target, far above the LP's own upper end (145,474, 182 below it). Prod K = 8 (600 s, load 3-8,
not in the results file): 8,749 cells, 22.1 million pairs left.

NOTE [ Benders cuts for the joint plan ]
The integer program without its pairs (session 32, offline: ``benchmarks/joint_benders.py``,
``benchmarks/results/joint_benders.md``), after Duran-Mateluna, Ales and Elloumi (EJOR 2023, the
p-median): binaries ``y_c`` and one ``theta_i`` per point, minimise ``Σ w_i theta_i`` with
``Σ y <= K``, the maximal points covered, and the cuts
``theta_i >= D − Σ_{c covers i, size(c) < D} (D − size(c)) y_c`` for the covering sizes ``D`` of
``i`` (tight at an integral ``y``; for any ``y`` the most violated ``D`` is where the point's
``y``, sorted by size, first sums to 1). HiGHS (highspy 1.16) has no lazy constraints (its
``kCallbackMipDefineLazyConstraints`` takes nothing back), so: a cut loop on the LP,
reduced-cost fixing against the start plan, then the integer master with those cuts, solved
again with the cuts of its own solutions while its optimum underestimates its plan. On the
instances of NOTE [ The integrality gap, measured ] (load 7-14, 2 cores, 540 s per case):

* the LP loop reaches the explicit LP's value exactly in all 12 cases, in 10-17 rounds and
  0.2-37 s (395-3,445 cuts);
* the master then proved all 10 optima the explicit model proved, the same values, all
  in one integer solve (the LP loop's cuts sufficed) but prod K = 16 at s = 8 (two);
* in 0.3-11 s at s = 16 (explicit 0-2 s at load 4), 51 / 119 / 188 / 421 s at s = 8, load 8.7-10
  (sum K = 8 / 16, prod K = 8 / 16; explicit 8 / 75 / 87 / 75 s at load 4, and rerun at load
  11-20: 108 s, not proved in 433 s, not proved in 432 s from Benders' own start, 405 s), and
  98 / 222 s at s = 6, sum (explicit 29 / 301 s at load 4);
* but not the s = 6 prod cases: after 540 s (load 13-14), 371,616 - 379,435 at K = 8 and
  212,086 - 219,040 at K = 16 (explicit: 370,490 - 380,134 and 212,328 - 216,030; Benders
  started there from a worse plan, 219,105 against 216,218); an earlier K = 8 run from the 5 s
  plan (load 9) reached 372,743 - 379,324, the best plan known there (0.21 % below the explicit
  model's). Both models close the integrality gap by branching (the master: up to 933 nodes);
  the master's LP is the same LP, no stronger.

Checked against the brute-force oracle of ``tests/test_joint.py`` on 150 random tiny
histograms (an offline script): every proved value equal, every LP value below. So on these
sizes it is as exact as the explicit model and about as fast, perhaps up to twice as fast at
s = 8 (the loads differ): no order of magnitude. On the real GSM8K (sum K = 16: 3,736 points,
13,276 candidates, 29.6 million pairs; an offline script) the master is not compact: building
the per-point sorted sizes took 55 s, the cuts at a plan hold 1.19 million nonzeros (a point's
cut names every cell cheaper than its cell: 320 on average), each LP round added 1.2-3.7
thousand such cuts and took 12-121 s, and after 5 rounds (378 s) the LP stood at 143,228 (from
96,418), below the bundle's 5 s bound (144,823 in ``benchmarks/results/joint.md``), where it
stalled (the cuts found violated were already in the master: presumably violated within
HiGHS's tolerances; its status was not logged). Not used by :func:`lagrangian` or
:func:`lp_bound`, and not proposed for the solve.

NOTE [ Other solvers, measured ]
Two other solver families on the same integer program (session 33, offline:
``benchmarks/joint_external.py``, ``benchmarks/results/joint_external.md``; neither is a
dependency): SCIP 10 (PySCIPOpt, one thread, defaults) and OR-Tools CP-SAT 9.15 (2 workers;
its ``max_lp`` worker, since at 2 workers the default portfolio's LP lacks the clauses and
its bound stayed near 0), on the coarsened GSM8K of NOTE [ The integrality gap, measured ],
with the 5 s plan as start, the whole model or the one the explicit LP fixes against the
5 s plan. On a machine at load 6-17 (each process got 6-25 % of a core: CPU seconds are in
the table): both prove s = 16 prod K = 8 (41,196, as HiGHS, above every bound we certify) in
10-46 s, HiGHS 0-2 s; neither proves s = 8 prod K = 8 (HiGHS: 87 s at load 4) in 150-300 s,
nor either s = 6 prod case in 540 s. CP-SAT's bound stays at the LP's value (its clause
learning adds nothing measurable); SCIP's root LP (SoPlex) did not finish on the whole models
(46-124 thousand pairs) nor on the fixed s = 6 ones, and on the fixed s = 8 model its root
cuts lifted the LP by 0.15 % where the optimum is 2.1 % above it. Neither found a plan below
the 5 s plan it started from. The real
histograms (29.6 million pairs) were not run: both took 6-8 KB per covering pair at s = 6
(775-934 MB for 124 thousand), about 200 GB for the real model. So no solver family measured
here certifies the three cases, and none is proposed for the solve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bucketloader.strategies.joint._grid import Grid
from bucketloader.strategies.joint._lp import solve_lp

#: Cuts the proximal bundle keeps (NOTE [ The Lagrangian bound ]).
BUNDLE = 80
#: Its first step: this many times Polyak's towards the heuristic's padding.
STEP_SCALE = 3.0
#: A step moves the centre when the bound gained at least this share of the model's promise.
SERIOUS = 0.1
#: The bundle stops when its last ``STALL`` iterations closed less than ``STALL_SHARE`` of the
#: gap left.
STALL = 30
STALL_SHARE = 0.03
#: The bundle's metric: ``λ_i`` scaled by (point size / mean size) to this power.
SCALE_POWER = 0.5
#: Iterations of the bundle's quadratic program over the simplex.
QP_STEPS = 100
#: Where gains are not exact by rows (NOTE [ Bounds without rows ]): the reaches of a bundle
#: step are rounded down to at most this many values ...
LEVELS = 96
#: ... or fewer, to fit the time left, but not fewer than this.
FEWEST = 16
#: ... those of the smoothed reaches to this many ...
MID_LEVELS = 1024
#: ... and the LP's duals, which take one value per merged row, to this many (rounding them
#: further would hide the candidates the LP needs next).
LP_LEVELS = 2048
#: How far the smoothed reaches sit from the LP's duals towards the best bound's reaches.
SMOOTH = 0.8
#: A second point on the smoothing line only where the round's LP took this many times longer
#: than the first point's evaluation (early rounds, whose LP is quick, skip it).
LINE_COST = 1.0


@dataclass
class Bound:
    """The best bound found, on ``Σ w_i · size(cell_i)`` (the padding plus a constant)."""

    value: float
    reach: np.ndarray
    gains: np.ndarray
    iterations: int
    log: list | None = None
    bundle: _Bundle | None = None  # the ascent that found it, to resume (:func:`lp_bound`)
    pace: _Pace | None = None  # the evaluations' timing so far


def _snap(reach: np.ndarray, weight: np.ndarray, levels: int) -> np.ndarray:
    """``reach`` rounded down to at most ``levels`` values (weighted quantiles)."""
    distinct = np.unique(reach)
    if distinct.size <= levels:
        return reach
    order = np.argsort(reach)
    cum = np.cumsum(weight[order])
    qs = np.searchsorted(cum, np.linspace(0, cum[-1], levels + 1)[:-1], side="right")
    value = np.unique(reach[order[np.minimum(qs, order.size - 1)]])
    value[0] = min(value[0], distinct[0])
    return value[np.searchsorted(value, reach, side="right") - 1]


def evaluate(
    grid: Grid, reach: np.ndarray, k: int, levels: int = LEVELS
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(L(r'), g(r'), r')``, every gain exact at ``r'`` (:meth:`Grid.gains_at`): ``r'`` is
    ``reach`` itself where gains are exact by rows, else ``reach`` rounded down to at most
    ``levels`` values (NOTE [ Bounds without rows ])."""
    if not grid.by_rows:
        reach = _snap(reach, grid.weight, levels)
    g = grid.gains_at(reach)
    top = np.partition(g, g.size - k)[-k:] if g.size > k else g
    return float((grid.weight * reach).sum() - top.sum()), g, reach


class _Pace:
    """Times the evaluations: seconds per operation of :meth:`Grid.gains_cost`, from the last
    one, predict whether the next fits before a deadline (NOTE [ Bounds without rows ])."""

    def __init__(self, grid: Grid) -> None:
        self.grid, self.rate = grid, 0.0

    def cost(self, reach: np.ndarray, levels: int) -> float:
        """The predicted seconds of :func:`evaluate` at ``reach`` (``levels`` as there)."""
        n = 1 if self.grid.by_rows else min(int(np.unique(reach).size), levels)
        return self.rate * self.grid.gains_cost(n)

    def fit(self, reach: np.ndarray, levels: int, deadline: float) -> int:
        """The most levels (at most ``levels``) whose evaluation at ``reach`` is predicted to end
        before ``deadline``; 0 when not even :data:`FEWEST` fit."""
        left = deadline - time.perf_counter()
        if self.cost(reach, levels) <= left:
            return levels
        if self.grid.by_rows:
            return 0
        lo, hi = FEWEST, levels  # the cost grows with the levels: bisect
        if self.rate * self.grid.gains_cost(lo) > left:
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.rate * self.grid.gains_cost(mid) <= left else (lo, mid)
        return lo

    def evaluate(
        self, reach: np.ndarray, k: int, levels: int = LEVELS
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """:func:`evaluate`, timed."""
        began = time.perf_counter()
        out = evaluate(self.grid, reach, k, levels)
        n = 1 if self.grid.by_rows else int(np.unique(out[2]).size)
        self.rate = (time.perf_counter() - began) / self.grid.gains_cost(n)
        return out


def _kth(g: np.ndarray, k: int) -> float:
    """The K-th largest gain (0 when there are fewer than K candidates)."""
    return float(np.partition(g, g.size - k)[g.size - k]) if g.size >= k else 0.0


def _supergradient(grid: Grid, g: np.ndarray, reach: np.ndarray, k: int) -> np.ndarray:
    top = np.argpartition(g, g.size - k)[-k:] if g.size > k else np.arange(g.size)
    hit = (grid.covers(top) & (grid.cand_size[top][:, None] < reach[None, :])).sum(axis=0)
    return 1.0 - hit


def _simplex_qp(gram: np.ndarray, err: np.ndarray, t: float, steps: int = QP_STEPS) -> np.ndarray:
    """``argmin_α α·err + t/2 · αᵀ gram α`` over the simplex (accelerated projected gradient)."""
    m = err.size
    alpha = np.full(m, 1.0 / m)
    lip = t * float(np.abs(gram).sum(axis=1).max()) + 1e-12  # >= the largest eigenvalue
    y, tk = alpha.copy(), 1.0
    for _ in range(steps):
        z = _to_simplex(y - (err + t * (gram @ y)) / lip)
        tn = (1.0 + np.sqrt(1.0 + 4.0 * tk * tk)) / 2.0
        y, alpha, tk = z + (tk - 1.0) / tn * (z - alpha), z, tn
    return alpha


def _to_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto ``{α >= 0, Σ α = 1}``."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u)
    rho = int(np.nonzero(u * np.arange(1, v.size + 1) > css - 1.0)[0][-1])
    return np.maximum(v - (css[rho] - 1.0) / (rho + 1), 0.0)


class _Bundle:
    """The proximal bundle ascent on ``L`` in ``λ`` (NOTE [ The Lagrangian bound ]), resumable:
    :meth:`run` until a deadline, :meth:`offer` a point evaluated elsewhere (the LP's)."""

    def __init__(self, grid: Grid, k: int, start: np.ndarray, upper: float) -> None:
        self.grid, self.k, self.upper = grid, k, upper
        self.floor = grid.weight * grid.point_size
        size = grid.point_size
        # the ascent runs in mu = lam / scale (a diagonal metric)
        self.scale = (np.maximum(size, 1.0) / max(float(size.mean()), 1.0)) ** SCALE_POWER
        self.floor = self.floor / self.scale
        self.pace = _Pace(grid)
        centre = np.maximum(start.astype(np.float64), size) * grid.weight / self.scale
        self.value, g, sub, self.centre = self._eval(centre)
        self.best = Bound(self.value, self._reach(self.centre), g, 1)
        self.cuts, self.errs = [sub], [0.0]
        self.gram = np.array([[float(sub @ sub)]])
        self.t = STEP_SCALE * max(upper - self.value, 1.0) / max(float(sub @ sub), 1.0)
        self.it, self.nulls = 1, 0
        self.cost = 0.0  # of the last step (NOTE [ Joint time limit and fallbacks ])
        self.history = [self.value]
        self.done = False  # converged: no ascent left at the centre

    def run(self, deadline: float, target: float) -> Bound:
        """Iterate until the bound is within ``target`` (relative, on the padding) of ``upper``,
        the model predicts no ascent, progress stalls, or the last step's cost no longer fits
        before ``deadline``; returns the best :class:`Bound` so far."""
        const = float((self.grid.weight * self.grid.point_size).sum())
        h, began_at = self.history, len(self.history)
        while not self.done:
            gap = self.upper - self.best.value
            if gap <= max(target * max(self.upper - const, 0.0), 0.5):
                break
            if len(h) - began_at > STALL and self.best.value - h[-STALL] < STALL_SHARE * gap:
                break  # slow progress: the LP rounds take over (until the next call)
            began = time.perf_counter()
            if began + self.cost > deadline:  # NOTE [ Joint time limit and fallbacks ]
                break
            err = np.array(self.errs)
            alpha = _simplex_qp(self.gram, err, self.t)
            agg = alpha @ np.array(self.cuts)
            predicted = float(alpha @ err) + self.t * float(agg @ agg)
            if predicted <= 1e-9 * max(1.0, abs(self.value)):
                self.done = True  # the model sees no ascent left: the centre is optimal
                break
            trial = np.maximum(self.centre + self.t * agg, self.floor)
            if time.perf_counter() + self.pace.cost(self._reach(trial), LEVELS) > deadline:
                break
            # (rounded down where gains are not exact by rows: the cut is taken there)
            value, g, sub, trial = self._eval(trial)
            self.it += 1
            if value - self.value >= SERIOUS * predicted:  # a serious step
                if value - self.value >= 0.5 * predicted and self.nulls == 0:
                    self.t *= 1.5
                self._move(trial, value, err)
            else:  # a null step: only the model learns
                self.nulls += 1
                if self.nulls % 5 == 0:
                    self.t *= 0.7
            self._add(trial, value, g, sub, alpha)
            self.history.append(self.best.value)
            self.cost = time.perf_counter() - began
        self.best.iterations = self.it
        return self.best

    def offer(self, reach: np.ndarray, value: float, g: np.ndarray) -> None:
        """A point evaluated elsewhere (``L = value``, gains ``g`` at ``reach``): its cut joins
        the model, and the centre moves there when it is better."""
        lam = reach * self.grid.weight / self.scale
        sub = _supergradient(self.grid, g, reach, self.k) * self.scale
        if value > self.value:
            self._move(lam, value, np.array(self.errs))
            self.done = False
        self._add(lam, value, g, sub, None)

    def _eval(self, mu: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        value, g, reach = self.pace.evaluate(self._reach(mu), self.k)
        sub = _supergradient(self.grid, g, reach, self.k)
        return value, g, sub * self.scale, reach * self.grid.weight / self.scale

    def _reach(self, mu: np.ndarray) -> np.ndarray:
        return mu * self.scale / self.grid.weight

    def _move(self, lam: np.ndarray, value: float, err: np.ndarray) -> None:
        shift = np.array([float(c @ (lam - self.centre)) for c in self.cuts])
        self.errs = list(np.maximum(err + (self.value - value) + shift, 0.0))
        self.centre, self.value, self.nulls = lam, value, 0

    def _add(
        self,
        lam: np.ndarray,
        value: float,
        g: np.ndarray,
        sub: np.ndarray,
        alpha: np.ndarray | None,
    ) -> None:
        if value > self.best.value:
            self.best = Bound(value, self._reach(lam), g, self.it)
        new_err = max(0.0, value - float(sub @ (lam - self.centre)) - self.value)
        if len(self.cuts) >= BUNDLE:  # keep the cuts in use, the aggregate of the others
            if alpha is None or alpha.size != len(self.cuts):
                alpha = _simplex_qp(self.gram, np.array(self.errs), self.t)
            used = np.argsort(alpha)[::-1][: BUNDLE - 2]
            used = used[alpha[used] > 0]
            rest = float(alpha.sum() - alpha[used].sum())
            cuts = [self.cuts[j] for j in used.tolist()]
            errs = [self.errs[j] for j in used.tolist()]
            gram = self.gram[np.ix_(used, used)]
            if rest > 1e-9:  # the aggregate's products come from the old ones
                others = np.setdiff1d(np.arange(len(self.cuts)), used)
                wts = alpha[others] / rest
                cuts.append(wts @ np.array([self.cuts[j] for j in others.tolist()]))
                errs.append(float(wts @ np.array([self.errs[j] for j in others.tolist()])))
                cross = wts @ self.gram[np.ix_(others, used)]
                corner = np.array([[float(wts @ self.gram[np.ix_(others, others)] @ wts)]])
                gram = np.block([[gram, cross[:, None]], [cross[None, :], corner]])
            self.cuts, self.errs, self.gram = cuts, errs, gram
        row = np.array([float(c @ sub) for c in self.cuts])
        self.cuts.append(sub)
        self.errs.append(new_err)
        corner = np.array([[float(sub @ sub)]])
        self.gram = np.block([[self.gram, row[:, None]], [row[None, :], corner]])


def lagrangian(
    grid: Grid,
    k: int,
    start: np.ndarray,
    upper: float,
    deadline: float,
    target: float,
    restart: bool = False,
) -> Bound:
    """The proximal bundle ascent on ``L`` (NOTE [ The Lagrangian bound ]) from reaches ``start``
    (the heuristic's cell size per point) until the bound is within ``target`` (relative, on
    the padding) of ``upper``, it stalls, or ``deadline``. The returned bound keeps the bundle
    (:func:`lp_bound` resumes it between its LP rounds). With ``restart`` (no LP rounds after
    it: ``exact=False``) a stall restarts the ascent's stall window instead of ending it.

    ``upper`` and the returned value are on ``Σ w_i · size(cell_i)``.
    """
    if not grid.by_rows:  # NOTE [ Bounds without rows ]
        return _subgradient_ascent(grid, k, start, upper, deadline, target)
    bundle = _Bundle(grid, k, start, upper)
    best = bundle.run(deadline, target)
    while restart:  # each run after a stall makes at least STALL steps, or none: then stop
        steps = bundle.it
        best = bundle.run(deadline, target)
        if bundle.it == steps:
            break
    best.bundle, best.pace = bundle, bundle.pace
    return best


def _subgradient_ascent(
    grid: Grid, k: int, start: np.ndarray, upper: float, deadline: float, target: float
) -> Bound:
    """Polyak's subgradient steps (session 4's ascent), for grids without exact gains by rows
    (NOTE [ Bounds without rows ]); arguments as :func:`lagrangian`'s."""
    const = float((grid.weight * grid.point_size).sum())
    pace = _Pace(grid)
    lb, g, snapped = pace.evaluate(np.maximum(start.astype(np.float64), grid.point_size), k)
    best = Bound(lb, snapped, g, 1, pace=pace)
    theta, stall, it = 1.0, 0, 1
    while upper - best.value > max(target * max(upper - const, 0.0), 0.5):
        if stall >= 4:
            theta, stall = theta / 2, 0
            if theta < 1e-3:
                break
            lb, g, snapped = best.value, best.gains, best.reach
        sub = _supergradient(grid, g, snapped, k)
        norm = float((grid.weight * sub * sub).sum())
        if norm == 0:
            break  # a zero supergradient: the reaches are optimal
        reach = np.maximum(snapped + theta * (upper - lb) / norm * sub, grid.point_size)
        levels = pace.fit(reach, LEVELS, deadline)
        if not levels:
            break
        lb, g, snapped = pace.evaluate(reach, k, levels)
        it += 1
        gained = lb > best.value + 1e-6 * max(1.0, abs(upper - const))
        stall = 0 if gained else stall + 1
        if lb > best.value:
            best = Bound(lb, snapped, g, it, pace=pace)
    best.iterations = it
    return best


def lp_bound(
    grid: Grid,
    k: int,
    cells: np.ndarray,
    best: Bound,
    upper: float,
    deadline: float,
    target: float,
    batch: int = 64,
) -> tuple[Bound, np.ndarray | None]:
    """The LP relaxation's bound by generating pairs (NOTE [ The LP bound by columns ]).

    Returns the best :class:`Bound` (``best`` if nothing beat it) and the K candidates with the
    largest ``y`` in the last restricted LP (a seed for the search), or ``None``.
    """
    const = float((grid.weight * grid.point_size).sum())
    pairs: dict[int, np.ndarray] = {}  # candidate -> the points it may serve in the LP
    for c, mine in zip(np.asarray(cells).tolist(), grid.covers(cells), strict=True):
        pairs[c] = mine
    top = np.argsort(best.gains)[-4 * k :]
    _add_pairs(grid, pairs, np.union1d(top, cells), best.reach)
    seed: np.ndarray | None = None
    bundle = best.bundle
    log = best.log = []
    # the last bound evaluation's cost (NOTE [ Joint time limit and fallbacks ]), first predicted
    spent = 0.0
    pace = best.pace if best.pace is not None else _Pace(grid)
    while time.perf_counter() < deadline:
        rset = np.array(sorted(pairs), dtype=np.int64)
        have = np.stack([pairs[c] for c in rset.tolist()])
        # points that may go to the same candidates are one row (cost depends on the cell only)
        _, first, inv = np.unique(
            np.packbits(have, axis=0).T, axis=0, return_index=True, return_inverse=True
        )
        inv = inv.ravel()
        weight = np.bincount(inv, weights=grid.weight)
        ci, ki = np.nonzero(have[:, first])
        nr, npair, ncls = rset.size, ci.size, first.size
        left = deadline - time.perf_counter()
        if left <= 0.05:
            break
        if log and log[-1][3] * npair / max(log[-1][2], 1) > left:
            break  # this round would not end in time (NOTE [ LP rounds on time ])
        cost, rows, cols, vals, sense, rhs = lp_model(
            ci, ki, nr, ncls, weight[ki] * grid.cand_size[rset][ci], k
        )
        t0 = time.perf_counter()
        solved = solve_lp(cost, rows, cols, vals, sense, rhs, left)
        log.append([int(nr), int(ncls), int(npair), round(time.perf_counter() - t0, 3)])
        if solved is None:
            break
        xs, duals = solved
        # the restricted LP's value: the full LP with fewer pairs, so at or above the LP's value
        log[-1].append(float(cost @ xs))
        lam, mu = duals[:ncls], -float(duals[-1])
        yv = xs[:nr]
        seed = rset[np.argsort(yv)[-k:]]
        reach = np.maximum((lam / weight)[inv], grid.point_size)
        # price first at reaches between the best bound's and the LP's (smoothing)
        mid = (1 - SMOOTH) * reach + SMOOTH * best.reach
        levels = pace.fit(mid, MID_LEVELS, deadline)  # (fewer where the time is short)
        if not levels:
            break
        began = time.perf_counter()
        lb2, g2, snapped2 = pace.evaluate(mid, k, levels)
        spent = time.perf_counter() - began
        if log[-1][3] > LINE_COST * spent and pace.fit(mid, levels, deadline) == levels:
            # one more point on the same line: twice as far towards the LP's reaches after a
            # gain, half as far after none (NOTE [ The LP bound by columns ])
            step = (1 - SMOOTH) * (2.0 if lb2 > best.value else 0.5)
            mid = step * reach + (1 - step) * best.reach
            lb3, g3, snapped3 = pace.evaluate(mid, k, levels)
            if lb3 > lb2:
                lb2, g2, snapped2 = lb3, g3, snapped3
            spent = time.perf_counter() - began
        if lb2 > best.value:
            best = Bound(lb2, snapped2.copy(), g2, best.iterations + 1, log)
        if bundle is not None:
            # the bundle learns the point and ascends as long as this round's LP took
            bundle.offer(snapped2, lb2, g2)
            found = bundle.run(min(deadline - spent, time.perf_counter() + log[-1][3]), target)
            if found.value > best.value:
                best = Bound(found.value, found.reach, found.gains, found.iterations, log)
        if upper - best.value <= max(target * max(upper - const, 0.0), 0.5):
            break
        kth2 = _kth(g2, k)
        out2 = np.flatnonzero(g2 >= kth2)
        if _add_pairs(grid, pairs, out2[np.argsort(g2[out2])[::-1]], snapped2, batch):
            continue
        levels = pace.fit(reach, LP_LEVELS, deadline)
        if not levels:
            break
        # nothing new there: price at the LP's own reaches
        lb, g, snapped = pace.evaluate(reach, k, levels)
        if bundle is not None:
            bundle.offer(snapped, lb, g)
        if lb > best.value:
            best = Bound(lb, snapped.copy(), g, best.iterations + 1, log)
        if upper - best.value <= max(target * max(upper - const, 0.0), 0.5):
            break
        out = np.flatnonzero(g > mu * (1 + 1e-9) + 1e-6)
        if _add_pairs(grid, pairs, out[np.argsort(g[out])[::-1]], reach, batch) == 0:
            break  # the restricted LP's duals price out every pair: the LP bound
    return best, seed


def lp_model(
    ci: np.ndarray, ki: np.ndarray, nr: int, ncls: int, pair_cost: np.ndarray, k: int
) -> tuple[np.ndarray, ...]:
    """The LP relaxation's arrays for :func:`~bucketloader.strategies.joint._lp.solve_lp`:
    ``(cost, rows, cols, vals, sense, rhs)`` over ``nr`` candidates and the covering pairs
    ``(ci[j], ki[j])`` (candidate, point class; ``ncls`` classes) with their costs. Columns: y
    (``nr``), then x (one per pair); rows: send (``ncls``), open (one per pair), max_shapes (1).

    Example:
        >>> cost, *_, rhs = lp_model(np.array([0, 1]), np.array([0, 0]), 2, 1, np.ones(2), 1)
        >>> cost.tolist(), rhs.tolist()
        ([0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0])
    """
    npair = ci.size
    pair = np.arange(npair)
    rows = np.concatenate([ki, ncls + pair, ncls + pair, np.full(nr, ncls + npair)])
    cols = np.concatenate([nr + pair, nr + pair, ci, np.arange(nr)])
    vals = np.concatenate([np.ones(npair), np.ones(npair), -np.ones(npair), np.ones(nr)])
    sense = np.array(["E"] * ncls + ["L"] * (npair + 1))
    rhs = np.concatenate([np.ones(ncls), np.zeros(npair), [float(k)]])
    cost = np.concatenate([np.zeros(nr), pair_cost])
    return cost, rows, cols, vals, sense, rhs


def _add_pairs(
    grid: Grid,
    pairs: dict[int, np.ndarray],
    cand: np.ndarray,
    reach: np.ndarray,
    most: int | None = None,
) -> int:
    """Give the candidates ``cand``, in order, the points they cover whose reach exceeds their
    size (the pairs with a negative reduced cost at those reaches), until ``most`` candidates
    got new pairs; returns how many did."""
    cand = np.asarray(cand, dtype=np.int64)
    most = cand.size if most is None else most
    done = 0
    for lo in range(0, cand.size, 256):
        part = cand[lo : lo + 256]
        gain = grid.covers(part) & (reach[None, :] > grid.cand_size[part][:, None])
        for c, mine in zip(part.tolist(), gain, strict=True):
            old = pairs.get(c)
            new = mine if old is None else mine & ~old
            if new.any():
                pairs[c] = mine if old is None else old | mine
                done += 1
                if done >= most:
                    return done
    return done


def survivors(bound: Bound, k: int, upper: float, cells: np.ndarray) -> np.ndarray:
    """NOTE [ Fixing candidates by the bound ]: the candidates that can be in a plan padding
    less than ``upper`` (on ``Σ w_i · size``), plus ``cells``.

    Forcing candidate ``c`` open in the Lagrangian at the bound's reaches gives
    ``L − g_c + g_(K)`` (``g_(K)``: the K-th largest gain) when ``c`` is not among the K largest,
    a lower bound for every plan using ``c``. Paddings are integers, so a plan better than
    ``upper`` has ``Σ w_i · size <= upper − 1``: candidates whose forced bound exceeds that are
    in no better plan and leave the integer program.
    """
    g = bound.gains
    kth = _kth(g, k)
    forced = np.where(g >= kth, bound.value, bound.value - g + kth)
    slack = 1e-9 * max(1.0, abs(upper)) + 1e-6
    keep = np.flatnonzero(forced <= upper - 1 + slack)
    return np.union1d(keep, np.asarray(cells, dtype=np.int64))
