"""The bin-packing solver behind :class:`~bucketloader.pack.PackSpec` (private).

NOTE [ Packing a length histogram ]
Packing ``N`` documents into rows of ``L`` tokens is bin packing; only the *sizes* matter, so the
solver works on the histogram (``U`` distinct sizes with counts) and returns *patterns*: a
pattern is a multiset of sizes that fits one row, used ``reps`` times. Which document fills which
slot of which row is decided later, per epoch (documents of one size are interchangeable), so
the solve runs once per dataset and never sees ``N``.

The rule is Minimum Bin Slack (Gupta & Ho 1999) with pattern repetition:

1. Take the largest remaining size ``s``; its row length is the smallest planned ``L_i >= s``.
2. Among the remaining documents, choose the multiset that fills the ``L_i - s`` tokens left as
   closely as possible (a bounded subset-sum over the histogram: each size's count is split into
   binary chunks ``1, 2, 4, ...``, reachable sums are one Python integer used as a bitset, so a
   chunk costs one shift-or on ``L`` bits; the search stops as soon as the row is exactly full).
   Among equal fills, larger documents are preferred (chunks are tried largest first and the
   backtrack keeps the earliest chunk that reaches a sum).
3. Use that pattern as many times as the counts allow. While it stays feasible the same search
   would return it again (the feasible multisets only shrink, and it was the best), so repeating
   it is exactly what pattern-at-a-time MBS does, at the cost of one search per *pattern*.

Sizes come out largest first, so large documents get first pick of the small ones that complete
their rows, and the small ones fill each other's rows at the end. Run alone on the real length
files in tests/data, MBS reaches the lower bound ``ceil(tokens / L)`` rows in 20 of 21 cases,
where best-fit decreasing leaves 0.06-1.6% padding; but on files that small it costs tens of
times a BFD, so the default plan runs it over every document only where repacking BFD's
rows with room falls short (NOTE [ Repacking the rows with room ]).

NOTE [ Two solvers, the tighter plan ]
MBS searches a subset sum per *pattern*, so its cost grows with the distinct patterns: on a small
file (2k documents, nearly every row its own pattern) or a long-tailed one it is slower than
best-fit decreasing, and on long-tailed lengths it can leave more rows (the largest documents,
placed first with the closest fill, strand mid-sized ones). Best-fit decreasing runs first, in bulk
over the histogram: the rows with the same contents and the same room form one group. Where there
are fewer than ``_MANY`` sizes, more than one in ``_SINGLE`` of them held by several documents
(:func:`_fit_by_room`), the rooms with a group are kept sorted (those the smallest size fits: the
others are never chosen), so "the tightest row that holds ``s``" is one ``bisect`` away, at most
once per size: its index stays right across the size's steps and on to the next size (a room that
empties is deleted at that index, a new room below ``s`` is inserted before it, one of ``s`` or more
after it), so a smaller size needs a ``bisect`` only where some room lies between it and the size
before. The groups of a room are a stack: its top by room (a list of ``L + 1`` slots, or a dict
where that would be more than ``_ROOM_SLOTS`` slots a size), each group below the top found from the
one above it. Session 24 made it so (before: every room kept, a list per room in a dict, a
``bisect`` per size): 0.71-0.91x that loop's time on 1k-1M documents (code-like, GSM8K-like, uniform
lengths; 0.55x on 10,000 in (L/4, L/2] in rows of 16,384), the same plans. Elsewhere
(:func:`_fit_by_key`) that list grows with the open rows and each insert moves ``O(n)`` of it (1M
documents of about 900k distinct sizes in rows of 2**24 took 10.7 s in session 12), so the open
groups are keys (the room, then the latest group first, :class:`_Open`): those whose room holds the
size in hand on a stack, the tightest on top (a room moved up is below all on it, and a step's new
room below the one it came from), the others in a heap, the largest room first, moved up as the
sizes fall: a step costs ``O(log n)``, but its keys are big integers, and its per-document loop for
sizes of one document breaks at every repeated size (below 4k sizes, 1.5-2.0x the sorted rooms' time
where most but not nearly all sizes hold one document, 1.2-1.5x where nearly all do, and 1.3-1.8x at
6k-8k sizes, in session 24's run: ``benchmarks/bfd_paths.py``, which also shows which loop
``best_fit`` picks where; 1.1-1.5x at 16k-50k sizes, 0.8-1.2x at 120k and 0.5-1.0x at 400k, in
rows of 2**20 + 3 and 2**24, so the sorted rooms run below ``_MANY`` = 65,536 sizes). Both make
the same plan. The bits of one Python integer, as in
the benchmark's baselines, cost three big-integer operations per step, 10-20% of the loop. A row
chosen for size ``s`` stays the tightest until its room drops below ``s``, so it takes ``room // s``
documents at once, and all the rows of a group take them together (exactly per-document BFD, in one
step per group and size). When its rows meet the L2 lower bound (NOTE [ Lower bounds ]) nothing can
do better, and within 0.1% of it an MBS search (up to a second at 1M long-tailed documents) could
save at most that 0.1%: the search is skipped; it is also skipped on too few documents per distinct
size (NOTE [ Planning at the speed of best-fit decreasing ]). Otherwise BFD's rows with room are
repacked first (NOTE [ Repacking the rows with room ]), and only where that is not within 0.1% of
the bound (or, by default, within the promise) MBS runs over every document too; the plan with the
fewest row tokens is kept (BFD on a tie, then the repacked rows), so the plan is never looser than
best-fit decreasing. With several row lengths the same tests run on row tokens, against
:func:`capacity_bound`.

NOTE [ Repacking the rows with room ]
Where best-fit decreasing misses the bound, most of its rows are full and what it loses is the
room of the others (GSM8K-like lengths, 1k documents in rows of 1024: 62 of 97 rows full, the
rest 1-35 tokens short, and one row of 38 tokens). :func:`repack` keeps the full rows and packs
the documents of some of the others again by Minimum Bin Slack (NOTE [ Packing a length
histogram ]) with quick fills, so the search's cost is set by the rows it repacks, not by the
data set:

- Which rows: those with the most room first, as many as hold the room to free to reach the L2
  bound (C2), e.g. 3 of them for one row of 1024 at 1k documents. Where that takes more than
  one of BFD's patterns per ``_DOCS_PER_PATTERN`` = 40 documents (GSM8K's first 2,000 at 512:
  85 of 244, all the rows with room, for a bound 47 tokens from their room), the default aims
  at its promise instead (0.5 points of padding above ``ceil(tokens / L)``), with half the room
  it leaves to spare. A repack that falls short of 0.1% of the bound (or of the promise) is
  done again with twice the room, up to every row with room; MBS over every document only
  follows where even that falls short.
- Quick fills: the largest document left opens a row (as MBS); while room is left, a document
  of exactly that size, else a pair that fills it exactly (the sizes ``j`` with ``j`` and
  ``room - j`` both left are the set bits of ``have & (mirror >> (L - room))``, ``have`` and
  ``mirror`` holding bit ``s`` and bit ``L - s`` of every size left: two big-integer
  operations), else as many of the largest size as leave a room the smallest fits. When that
  fails, the documents go back and the closest fill is the bounded subset sum of MBS
  (:func:`_closest`, the same fill as :func:`_fill`, in pure Python over a dict of counts). A
  pattern repeats while the documents last, as in MBS.
- A budget (``"auto"`` only): the search counts its big-integer word operations (a quick
  fill's step: one per 64-bit word of the longest row; a closest fill: its chunks x the words
  of its room) and, once they pass ``_REPACK_WORK`` = 16 per document per word of the row (plus
  one), stops at the next pattern and keeps the tightest plan done by then (BFD's before any):
  counted, not timed, so every rank plans the same; MBS over every document follows only where
  its estimate (BFD's rows x distinct sizes x words) fits in the work left. In rows longer
  than 16,384 tokens the words are those of rows in units (NOTE [ Repacking long rows in
  units ]), so neither the budget nor the search grows with the row length. Where every BFD
  row keeps room (2,000 documents uniform in (L/4, L/2], now packed as NOTE [ At most three
  documents a row ] says, not by this search) the search had cost 20-90x a
  best-fit decreasing for a few rows: 31-41 ms in rows of 1024 (814 rows, BFD 842), 0.56 s in rows
  of 16,384 (828, BFD 841), about 6 s in rows of 131,072 (841, nothing gained); with the budget
  17 ms (814: the repack's first plans fit, MBS over everything, which lost, is skipped), 50 ms
  (841: the repack that reached 828 is cut) and 0.33 s (841), CPU time at load 1.3-1.9. The
  tests' and benchmarks' searches spend at most 10.7 of the 16 (their plans are unchanged). A
  plan the budget stopped (or whose MBS it skipped) is marked ``budgeted``: solver version 6
  (:func:`solver_version`), so a state saved by an earlier version fails loudly there.
- The cap (``"auto"``, one row length, only where :func:`thirds_bound` proves the promise out
  of reach: more rows than ``ceil(tokens / L)`` plus 0.5 points of the tokens). There no plan
  can keep the promise, so the search is only after rows below BFD's, and the budget above,
  which grows with the row's words, let it cost many times a per-document BFD (10,000
  documents uniform in (L/5, L/2]: 2.8x in rows of 1,024, 30x in rows of 16,384). The repack
  also counts its steps (a row opened, a quick fill's step, a closest fill's chunk: about
  1 us of Python each, ``_OP_WORDS`` = 250 word operations at about 4 ns, on top of their
  words) and stops at the next pattern, or within a closest fill, once words + steps pass
  ``_REPACK_FLOOR`` = 50,000 (about 0.2 ms) plus 0.3 (``_REPACK_TENTHS``) of a per-document
  BFD's estimated cost (``_DOC_WORDS`` = 100 plus a quarter of the row's words per
  document); a round whose distinct sizes alone (one step each at least) would pass it does
  not start (s8-pack2's cap, calibrated there). BFD's plan, or the tightest round done by
  then, is kept (never looser than BFD), MBS over every document is skipped, and the plan is
  marked ``capped``: solver version 9. Counted, not timed: every rank plans the same. Where
  the bound does not prove it the search runs as before, whatever it costs: s8-pack2 capped
  every single-length search, and in 28 of 100 random GSM8K samples the capped plan missed a
  promise the full search kept (s8-rev4). The cap costs rows where it cuts a search that was
  saving them: 10,000 documents in (L/5, L/2] in rows of 1,024 get BFD's 3,750 rows where
  the full repack found 3,645 (the bound: 3,531; since version 10 they take 3,537 rows of
  three, NOTE [ Rows of three where the thirds rise ], where the cap stops the repack of those
  rows instead). It cut none of s8-rev4's 100 random GSM8K
  samples nor the tests/data files at 256-4,096 (their plans are unchanged), and 5 of 200
  random uniform cases, each where BFD's rows meet the bound (13 of another 300, s9-rev2: some
  where the full repack had found up to 3.2% fewer rows, all out of the promise's reach). Where
  documents of at most half a row average a third of it or less (GSM8K-like lengths; (L/8,
  L/2]) the bound is 0:
  no weighting of this kind rises above ``ceil(tokens / L)`` there (on (L/8, L/2] the
  configuration LP is ``tokens / L`` itself), and the search runs on, many times a
  per-document BFD's time at 1k-10k documents, unless full rows of any count keep the promise
  first (NOTE [ Full rows of any count ]).
- ``"always"`` aims at the L2 bound, so where the default's first round aims at its promise
  instead (the bound's would repack too many patterns) its rounds differ and it could end
  looser than the default (600 GSM8K pairs at 256, seed 35: ``"never"`` 235 rows, ``"auto"``
  233, ``"always"`` 235; s8-rev4). It also repacks the default's rounds (no budget, on towards
  the bound) and keeps that plan where it has strictly fewer row tokens than everything else
  it found (233 there): marked ``promised``, solver version 8; its other plans keep their
  versions. So ``"always"`` is never looser than ``"auto"``, up to the 0.1% of the L2 bound
  where it stops (where ``"auto"`` may go on to MBS over every document).

On the benchmark's GSM8K-like lengths (benchmarks/small_costs.py) it reaches the L2 bound from
1k to 10k documents, within 0.1% of it from 100k to 10M (9,653 rows for a bound of 9,652 at
100k, where the whole MBS reached it), and the promise on the 2k file (385 rows, bound 384,
BFD 388), in a fraction of a per-document BFD's time (NOTE [ Planning at the speed of best-fit
decreasing ]). On 150 other cases where the search runs (tests/data lengths resampled at 300 to
50k documents, uniform and triplet-like sizes, one to three row lengths) it ends tighter than
the earlier BFD-then-MBS plan in 35, looser in 42 (by 1 to 84 rows, 0.44% of GSM8K's rows at
50k documents and L = 256: within 0.1% of the bound or the promise, where the earlier plan was
nearer the bound) and equal in 73; the promise holds in 92 of them (earlier: 84).

NOTE [ Repacking long rows in units ]
The repack's state is a bitset over row capacities: a quick fill's pair is two big-integer
operations on ``L`` bits, a closest fill one shift-or of ``L`` bits per chunk, and its budget
(16 word operations per document per 64-bit word of the row) grows with ``L`` too. At ``L =
2**24`` one chunk shifts 2 MB: 375 documents uniform in (L/8, L/2] took 22 s to plan (and
``"always"`` minutes) where a per-document BFD over a sorted list of rooms takes 0.3 ms, and
1,988 in rows of 2**20 + 3 took 6.5 s; the budget that should stop it had grown with the row.
So where the longest row has more than ``_EXACT_ROWS`` = 16,384 tokens, the repack works in
units of ``L // 1024`` tokens (``L`` the longest row), as :func:`filled_rows` does: each
repacked document's size rounded up to whole units, each row length rounded down (``L_i //
unit`` units), so a row in units holds at most ``L_i`` tokens whatever the documents in it;
rows of 1,024 to 2,047 units, so the bitsets, the budget (in the words of those rows) and the
cap cost what they cost in rows of 1,024 to 2,047 tokens. The rows in units become rows of
documents as in :func:`filled_rows` (the slots of each unit, in order, take that unit's
documents, in order). A row holding a document longer than the longest row in units (within a
unit of ``L``) is not repacked. MBS over every document does not follow (its bitsets are as
long as the row: in ``"auto"`` its estimate had ruled it out but for a few hundred documents,
and ``"always"`` ran it for minutes).

Rounding costs at most a unit (0.1% of a row) per repacked document; on 9 random cases at
``L`` = 2**20 + 3 and 2**24 (135 to 2,172 documents) the plan has as many rows as version 11's
or 1-2 fewer (the search is no longer cut by its budget), in 3-39 ms where version 11 took
0.14-136 s, about the time the same cases take scaled down to rows of 1,024 (1.0-2.0x it).
Plans the search made or kept there have solver version 12 (``coarse``), BFD's own plan too
unless version 11 could not have run MBS over every document (its estimate past
``_MBS_WORK``), since MBS's plan had BFD's version: a state saved by version 11 fails loudly
rather than resume another plan. Rows of at most 16,384 tokens are searched token by token as
before (the gate, benchmarks/pack_gate.py: the same plans and versions on its 753 cases).

NOTE [ At most three documents a row ]
Where every document is longer than a quarter of the (one) row length, a row holds three at
most, and one longer than half a row (long) one other at most. Where the short ones (at most
L / 2) are the more, best-fit decreasing leaves room in nearly every row: 2,000 documents
uniform in (L/4, L/2] take 842 rows of 1,024 where the tokens fill 758. Repacking those rows
(NOTE [ Repacking the rows with room ]) cost 5-100x a per-document BFD for a few rows. Here a
plan (:func:`three_rows`, numpy over the documents sorted by size) is:

- Each long document, from the most room, takes the longest short one left that fits (one
  running maximum: the most such pairs, and the longest short ones in them).
- Of the short ones left, ``t`` rows of three; the others two a row (any two fit), an odd one
  alone: ``ceil((n - t) / 2)`` rows. The ``3t`` smallest make the triples (in any plan with
  ``t`` triples, a triple's document can be swapped for a smaller one outside the triples).
  The ``t`` largest of them anchor a row each; the ``2t`` others pair up and the pairs, least
  tokens first, go to the anchors, largest first; a triple fits when its pair fits the
  anchor's room. Four pairings are tried: the turned one (below) first, then in turn smallest
  with largest (pairs of about equal tokens), the smaller half with the larger in order,
  neighbours (the fewest tokens for the largest anchors). ``t`` is found by bisection, between
  the triples BFD's rows imply and the most whose tokens fit ``t`` rows (each try a few slices
  and one sort of ``t`` sums).
- The turned pairing (version 10): the ``i``-th of the smaller half of the partners with the
  ``(i + t // 2) mod t``-th of the larger half. The anchors' rooms spread over half the range
  of the partners (uniform documents: anchors in (0.38 L, 0.47 L], partners in (0.2 L, 0.38
  L]); smallest with largest gives pair sums of about one value, which fits half the rooms, in
  order gives sums spread over the whole range, and turned by half they spread over half of
  it, as the rooms do. Where it fits a ``t`` the others do not, ``t`` (and the plan) grows;
  where the others fit too, theirs is taken, so version 7's plans stay as they were (the flag
  ``turned`` is set only where a ``t`` that only the turned pairing fits was met: the plan
  differs then, having more triples; from then on the bisection tries the turned pairing
  alone). Rows depend on ``t`` only.
- Never looser than best-fit decreasing: :func:`bfd_rows_three` counts BFD's rows exactly, on
  the histogram and without a plan (a row of one short document is the only room of half a
  row or more, one open at most, so the state is that row and the rooms of the rows that take
  one more document: a long one's, or two short ones'), and the search starts from one triple
  more than those rows allow. Where BFD's rows are within the promise or 0.1% of the bound,
  BFD's plan is kept, as before; where the fill finds no fewer rows, the search of the other
  lengths runs (NOTE [ Two solvers, the tighter plan ]); ``"always"`` keeps the tighter of the
  two.
- Where the long documents are at least as many as the short ones, nearly every short one
  shares a long one's row, which BFD does too (on (L/4, L] it is within 0.1% of the bound): the
  count would only add time, and the search of the other lengths decides, as before.

3-partition (are there ``N / 3`` such triples?) is strongly NP-hard, so this is a heuristic:
on 3,000 random cases in (L/4, L/2] (2 to 400 documents, one to all sizes of the range, rows of
8 to 4,096) version 7's pairings packed tighter than the repack that came before it in 747,
looser in 22 (by 1-4 rows, 16 of them with five distinct sizes), never looser than BFD. On
2,000 documents of (L/4, L/2] (seed 0) the turned pairing finds 792 rows of 1,024 and 790 of
16,384 or 131,072, 2 above the thirds bound (NOTE [ Lower bounds ]: 790 and 788), where
version 7's pairings found 807 and 806, the repack before them 814 in 15-18 ms (about 21x a
per-document BFD; BFD 842) and, cut by its budget, BFD's 841 in 44 ms and 0.28 s; on 2,000 of
(L/4, 2L/3], 943 rows (BFD 947; version 7's plan, unchanged; the repack: 942 in 8.4 ms at
1,024, 946 in 64 ms at 16,384) in 0.33-0.85x a per-document BFD's time. On 1,000 and 10,000
documents of (L/4, L/2] (benchmarks/small_costs.py): 391 and 3,919 rows of 1,024 (thirds
bound 390 and 3,912; version 7: 400 and 4,010; BFD 417 and 4,182). Its plans get solver
version 7, or 10 where the turned pairing changed them (:func:`solver_version`). Up to
``_THREE_DOCS`` documents (its arrays are per document: 0.1 s at 1M); above that the search of
the other lengths runs.

NOTE [ Rows of three where the thirds rise ]
The thirds bound (NOTE [ Lower bounds ]) is a dual solution of the configuration LP: each
document's ``f(s) = min(1/2, (1 - beta) / 3 + beta * s / L)`` is its price, and a row costs
at least the sum of its prices, 1 for the rows an LP optimum uses. Where it rises above
``ceil(tokens / L)`` (``beta > 1``), a row of ``j`` documents below the cap prices at ``j (1 -
beta) / 3 + beta * tokens / L``: 1 for three documents exactly filling the row, less for four
or more whatever their tokens. So where that bound is tight (uniform documents in (L/5, L/2]:
it equals the LP, NOTE [ Lower bounds ]), the rows that waste nothing are pairs of the longest
documents (each priced 1/2) and full rows of three, the shape :func:`three_rows` builds, even
though a row could hold four documents of at most L/4. So the default runs it there too: one
row length, fewer long documents than short ones, at most ``_THREE_DOCS`` documents, some of
at most L/4 (else NOTE [ At most three documents a row ]) and the thirds bound above
``ceil(tokens / L)`` (0 at once where the documents average a third of a row or less, as
GSM8K's do). BFD's rows are not counted exactly there (a row may hold four), but where no
document is longer than L / 2 a floor on them is (:func:`bfd_floor`: BFD pairs the documents
longer than L / 3 in order, and the others fill the rooms of those pairs that hold the
shortest document, or new rows), and the rows of three are asked for fewer rows than that,
so BFD's plan is not made (1,000 documents in (L/5, L/2]: floor 368, BFD 376, rows of three
353). Where they miss it (or a document is longer than L / 2), BFD's plan is made, kept where
it is within the promise or 0.1% of the bound, and the rows of three are asked for fewer rows
than it has. So they are never BFD's own plan (asked for at most the floor, they could tie it
and take version 10 for version 3's plan: 5,709 rows of 128 for 11,418 documents of 50 and
1,375 of 27). They are the plan where they come within 0.5 points of padding (the promise's
slack) of the thirds bound: no search can gain more there, and a repack of their rows under
the cap (about 0.2 ms plus 0.3 of a per-document BFD) found no row fewer in 17 random cases of
(L/7 to L/5, L/2 to 5L/8], 100 to 10,000 documents, rows of 256 to 16,384. Further from it
(a few sizes of many documents each, where the 3t smallest documents make poor triples) the
search of BFD's rows runs as in version 9 and the tighter plan is kept, as ``"always"`` does:
without it, 56,361 documents of 4 sizes took 21,579 rows of 255 where that search found
20,716 (the bound 19,771). Rows of three kept get solver version 10 (the flag ``turned``).

On 1,000 documents uniform in (L/5, L/2] (benchmarks/small_costs.py) that is 353 rows of
1,024 or 16,384 (the LP: 351.8, so 352 at best; BFD 376), where version 9's search of BFD's
rows ended at 364 in 15-34x a per-document BFD's time; on 10,000, 3,537 rows (bound 3,531),
where version 9's cap kept BFD's 3,750. Where the bound is ``ceil(tokens / L)`` or below
(documents in (L/8, L/2]: the LP is ``tokens / L`` there, full rows of any number of documents
are priced 1) the rows of three do not fit the LP's shape: full rows of any count do (NOTE
[ Full rows of any count ]), else the search of BFD's rows runs as before. The gate
(benchmarks/pack_gate.py, benchmarks/results/pack_gate.md) compares this
solver with the one before on every tests/data file, GSM8K resamples and random cases: rows,
promise, time and versions.

NOTE [ Full rows of any count ]
Where no document is longer than half a row, some are a quarter of it or less and the thirds
bound does not rise above ``ceil(tokens / L)`` (it cannot where the documents average a third
of a row or less; documents uniform in (L/8, L/2]: the configuration LP is ``tokens / L`` there,
so a row of any number of documents that fills it exactly wastes nothing), rows of three do not
fit the LP's shape. Best-fit decreasing pairs the documents longer
than L / 3 and leaves rooms no document fits (1,000 documents in (L/8, L/2]: 80 of its 322 rows
of 1,024 are two long documents and 89-127 tokens of room, 8,000 of its 9,198 tokens of
padding), and the search of its rows (NOTE [ Repacking the rows with room ]) cost 7-14x a
per-document BFD at 1k documents and, at 10k in rows of 16,384, 0.65 s to be cut by its work
budget and keep BFD's 3,225 rows. Where :func:`bfd_floor` proves that BFD misses the promise
(the default would search), :func:`filled_rows` (numpy over the histogram) plans instead:

- In units of ``L // 1024`` tokens (at least 1; sizes rounded up, so a row of at most ``L //
  unit`` units holds at most ``L`` tokens): rows of 1,024 to 2,047 units whatever the row
  length, so the costs below do not grow with it.
- Rounds of rows that the documents fill exactly: of the documents left, decreasing, the ``k =
  m / w`` largest anchor a row each (``w`` = 3, then 4), the ``k`` smallest (and for four the
  ``k`` above them) join them, turned by another shift each round (``_FILL_TURN`` places times
  the round, as the turned pairing of NOTE [ At most three documents a row ]), and the last
  document must be the row's exact remainder, one of the others: as many rows for a remainder
  as there are documents of it (a rank among the equal remainders against a count). Three
  rounds: 177 rows of 1,024 exactly full for 1,000 documents in (L/8, L/2], 1,755 for 10,000.
- The others (about 45% of them there): best-fit decreasing, then its rows with room repacked
  (the search of NOTE [ Repacking the rows with room ], in units, with its counted budget)
  towards the rows the promise leaves them; not where BFD's rows of them leave more than 1% of
  the rows above that (``_FILL_GAP``: the repack would rarely close it).
- The rows in units become rows of documents: the slots of each unit, in order, take that
  unit's documents, in order.

The plan is kept only where it keeps the promise and has fewer rows than the floor, so fewer
than BFD's and no plan the solver made before (BFD's plan is not made); elsewhere the search of
BFD's rows runs as in version 10 (its plans and digests unchanged) and ``"always"`` keeps the
tighter of the two. On the benchmark's documents in (L/8, L/2]: 314 rows of 1,024 or 16,384 at
1k documents (version 10: 315 and 314; bound 314 and 313; BFD 322 and 321), 3,149 at 10k in both
(version 10: 3,192 and BFD's 3,225; promise 3,156 and 3,151). Plans of full rows have solver
version 11 (the flag ``filled``).

NOTE [ Planning at the speed of best-fit decreasing ]
A plan should not cost more than the best-fit decreasing a user could write (issue 26:
benchmarks/small_costs.py races a careful bulk BFD that outputs the packing in this module's form,
and one that counts rows only, from 1k to 10M documents). The bulk BFD here is that BFD with the
group contents kept: one group per step of its loop (a remainder of fewer than ``room // s``
documents is the next step's, which finds the same row), no call per step, the documents longer than
``L / 2`` opening their rows at once. A group is its parent and one packed code (a row's first code
carries its row length; in :func:`_fit_by_room` its row length plus one, so that it also marks where
its pattern starts and the walk records no offsets), the live groups' codes read once at the end by
walking their parents (with keys, NOTE [ Two solvers, the tighter plan ], in numpy a level at a time
past ``_WALK`` groups; until session 22 the sorted rooms' loop copied its parent's tuple of codes at
each step instead: 1.01-1.17x the time of this, same plans), and runs of sizes of one document each
(where nearly every document has its own length, as in long rows) are placed by a per-document loop
that records only the key it took (:func:`_single_steps`). ``PackSpec.build`` reads the lengths once
(NOTE [ One pass over the lengths ] in :mod:`bucketloader.pack.spec`). The MBS search over every
document costs about 0.05-0.1 ms per pattern in Python, 5.6-7.5x a per-document BFD on 1k-2k
documents (session 6); repacking only BFD's rows with the most room (NOTE
[ Repacking the rows with room ]) saves the same 0.5-1.2% of the rows on GSM8K-like lengths in
0.697-0.926x a per-document BFD's time on 1k-2k documents, 0.216x at 10k and under 0.05x from 100k
on (benchmarks/results/small_costs.md, session 18; the runs of sessions 7-17 measured 0.73-1.15x on
1k-2k documents), so the default searches where BFD misses its promise; the caller can still choose
(``search``, a :meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` option):

- ``"auto"`` (default): the search runs when BFD's padding is more than 0.5 percentage points
  above the ``ceil(tokens / L)`` bound's (the packing promise of issue 25, e.g. GSM8K at
  L = 256: 1.6 points; with several row lengths the same on row tokens against
  :func:`capacity_bound`'s C1, e.g. GSM8K at ``(256, 512)``: 1.6 points), or when the lengths
  hold at least ``_DOCS_PER_SIZE`` documents per distinct size (it then costs less than half
  of what the histogram saves over sorting); it stops within 0.1% of the L2 bound or, below
  ``_DOCS_PER_SIZE``, within the promise.
- ``"never"``: the plan is exactly best-fit decreasing, and no bound is computed (about the
  packing baseline's time or less; around 100k-1M documents of few distinct lengths, where
  the plan's own copy of the lengths is what it writes beyond the baseline's ``bincount``,
  within a few percent either side of it: benchmarks/results/small_costs.md).
- ``"always"``: the search runs wherever BFD is not within 0.1% of the L2 bound (C2), MBS over
  every document too unless the repacked rows are.

NOTE [ Few documents a size ]
The bulk loops cost one step per group and size (about 1.2 us of bookkeeping each in session
15's profile), which pays where a size holds many documents. Where most sizes hold one (a
fine-tuning set of 1k-3k documents; long rows, where nearly every document has its own
length) a step places one document, and a per-document loop needs less: best-fit decreasing
over a sorted list of the open rows' keys, ``room << b | (2**b - 1 - j)``, ``j`` the document
that left the row that room, ``b`` the bits of the count of documents (as few as they need, so
that more keys are one 30-bit digit of a Python integer: session 24, side by side against 17
bits, 0.86-0.89x the loop's time in rows of 2**20 + 3 at 375-1k documents, 0.93x in rows of
16,384 at 375-3k, the same at 2**24, where a key takes two digits either way)
(:func:`_fit_by_document`): ``bisect_left`` finds the tightest room that
holds ``s``, and of the rows of that room the one whose room was left last, which is the group
the bulk loops take (the latest of a room's groups: a group's rows get their room within its
own step, after every older group's); where the new key sorts where the old one was it replaces
it in place, else one ``del`` and one ``insort`` within the list's head; a document that no
room holds opens a row without a ``bisect``. The loop records each document's row and each
row's last document; numpy then orders the rows by
their last documents, which is the order of the bulk loops' groups (each group's rows get
their last documents within its step), reads a size's documents in a row as one item and
groups identical rows into one pattern (only rows whose every size holds several documents can
repeat: a dict over those alone). So the plan is the bulk loops' array for array, and digests
and saved states stand (tests/test_pack_bfd.py: every loop against the step-by-step reference
plan, and array for array on random histograms; no solver version change).

``best_fit`` takes it for at most ``_BY_DOCUMENT`` = 65,536 documents (each ``insort`` moves
``O(n)`` of the list: at 1M distinct sizes in rows of 2**24 a sorted list of rooms takes 19.3 s,
the keyed loop 1.7 s) where there are at most 1.5 documents per distinct size
(``_DOCS_PER_SIZES``) and at most ``_HELD_OPEN`` = 2,048 documents longer than half the
shortest row length (:func:`_held_open`). Each of those holds a row open, so the list is at
least that long, and the rooms that smaller documents leave sort far below the rooms they came
from, so each insert moves much of it (benchmarks/bfd_held.py, results/bfd_held.md: distinct
sizes uniform in ``(0, L]``, rows of 2**24, the per-document loop takes 0.72x the keyed loop's
time at 2,000 documents, 992 of them longer than L/2; 1.04x at 4,000, 1,997 longer; 1.37x at
8,000 and 3.8x at 65,536; in ``(L/8, L/2]``, none longer, 0.61-0.87x up to 65,536).
benchmarks/bfd_paths.py races the three loops (results/bfd_paths.md,
session 17, load about 5): at one document a size the per-document loop takes 0.40-0.82x the
faster bulk loop's time (375 to 8,000 sizes, rows of 16,384 to 2**24); at up to 1.55
documents a size 0.52-0.94x from 1,000 sizes on, 0.54-1.54x at 375 (its numpy pass is a fixed
cost); at 2.1-2.4 documents a size 0.93-1.49x, and more above, where a bulk step places several
documents. Rerun in session 24 (load about 4), after the sorted rooms' loop got faster (NOTE
[ Two solvers, the tighter plan ]): 0.65-0.79x at one document a size, 0.65-1.16x up to 1.55
from 1,000 sizes on and 0.73-1.18x at 375, 1.18-1.45x at 2.1-2.4; the loop ``best_fit`` picks
took at most 1.78x the fastest loop's time (median 1.00x; more than 1.1x in 25 of 192 cases,
most of them keyed at 6k-8k sizes, where the sorted rooms are now faster). With ``_MANY`` raised
from 4,096 to 65,536 (the rest as in session 17) and the per-document keys narrowed, rerun (load
about 3): 0.60-0.78x at one document a size, 0.60-1.05x up to 1.55 from 1,000 sizes on and
0.66-1.15x at 375, 1.09-1.38x at 2.1-2.4; the loop ``best_fit`` picks takes at most 1.15x the
fastest loop's time (median 1.00x; was 1.78x; above 1.1x in 4 cases, all at 1.46-1.54 documents
a size, where the per-document and sorted rooms' loops cross: at 375 sizes the rooms take
0.87-0.91x the per-document loop's time, at 1,000 sizes 1.11-1.12x: a threshold by the number of
sizes would gain at most that, and the crossing moves with the load).
Against benchmarks/small_costs.py's per-document BFD over a sorted list of rooms
(``bfd_sorted``, which counts rows and records none) ``PackSpec.build(search="never")`` now
takes 2.5-3.7x its time at 375 documents, 1.1-2.1x at 2,000 and 1.0-1.3x at 10,000 in rows of
2**20 + 3 and 2**24 (results/small_costs.md section 2b, load 7-8; before, 3.6-4.5x, 2.3-2.8x and
1.2-1.9x): the loop does about the work of that BFD's, and at a few hundred documents, where that
BFD takes 0.14-0.27 ms, a plan's fixed costs (validation, the histogram, the numpy pass that
makes the patterns) keep it above. Session 24's rerun (load about 2, keys of as few bits as the
documents need): 1.56-2.41x at 375, 0.91-1.15x at 2,000, 0.66-0.89x at 10,000; against the same
BFD returning every document's row (``bfd_sorted_documents``) at most 1.18x from 1,000
documents (lognormal lengths at 1,000 in rows of 2**24; 1.07x in rows of 2**20 + 3, 1.22x
before the narrower keys). There :func:`_fit_by_document` takes 0.32 ms against the
baseline's 0.28-0.29 (side by side), of which :func:`_document_patterns` is about 70 us
(:func:`_same_rows` about half, for 25 rows of one document of ``L`` tokens), so the loop
itself is below the baseline's; with the build's own costs outside it (~35 us) that is the
remaining 1.18x: not trimmed.

NOTE [ Lower bounds ]
``ceil(tokens / L)`` rows (L1) always holds. Documents longer than ``L / 2`` cannot share a row,
which the Martello & Toth (1990) bound L2 adds: for ``0 <= a <= L / 2``, with
``J1 = {s > L - a}``, ``J2 = {L/2 < s <= L - a}`` and ``J3 = {a <= s <= L/2}``, every row holds at
most one document of ``J1 u J2``, and the ``J3`` tokens that do not fit into the ``J2`` rows need
new rows: ``|J1| + |J2| + max(0, ceil((sum J3 - (|J2| L - sum J2)) / L))``. L2 >= L1.

Several row lengths ``L_1 < ... < L_k``: a plan costs its row tokens ``C = sum_j n_j L_j``
(``n_j`` rows of ``L_j``). The documents longer than ``L_{i-1}`` (``T_i`` tokens) fit only
rows of ``L_i`` or more, so those rows hold at least ``T_i`` tokens (``C_i = sum_{j >= i}
n_j L_j >= T_i``) and number at least ``K_i``, the L2 bound of those documents in rows of
``L_k`` (no row holds more). The least ``C_1`` under these constraints, with ``n_j`` real
except the longest rows' whole count, is a lower bound on every plan's row tokens; going down
from ``L_k``, each level takes the fewest rows its constraints need (putting a row's worth of
tokens into a shorter row length instead never costs more, and it counts more rows), so the
bound is computed level by level (:func:`capacity_bound`; tested against brute-forced optima).
Without the counts it is the analogue of L1; with one row length it is ``L1 * L`` and
``L2 * L``.

The thirds (:func:`thirds_bound`, one row length): for ``beta >= 1``, ``f(s) = min(1/2,
(1 - beta) / 3 + beta * s / L)`` is a dual feasible function: a row of one or two documents
has ``f`` at most 1/2 each, and a row of ``j >= 3`` documents at most ``j (1 - beta) / 3 +
beta * (its tokens / L) <= 1`` (``1 - beta <= 0``). So every plan has at least ``sum f(s)``
rows, over the documents; ``beta`` is taken where that sum peaks (it is concave: past the
cap of the longest ``t`` at which the documents shorter than ``t`` are on average at most
``L / 3``). Where the documents average more than ``L / 3`` but few fill a row two by two, it
is well above L1: 10,000 documents uniform in (L/5, L/2] (seed 10,000) need at least 3,531
rows of 1,024 where L1 = L2 = 3,510, as many as the configuration LP (Gilmore-Gomory, solved
by column generation: 3,530.10; benchmarks/pack_bound.py, benchmarks/results/pack_bound.md), the
strongest bound any such function gives. With 1,000 of them (seed 1,000) both give 352 (LP
351.80, L1 351); on (L/8, L/2] the LP is L1 (313.02 at 1,000 documents).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import math
import operator
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

#: Bumped whenever the solver could return other patterns for the same input (it is part of a
#: spec's digest, so a resume across such a change fails loudly). 3: the search only from
#: ``_DOCS_PER_SIZE`` documents per distinct size. 4: with several row lengths the search is
#: decided against :func:`capacity_bound`. 5: the search starts by repacking best-fit
#: decreasing's rows with room (NOTE [ Repacking the rows with room ]). 6: ``"auto"``'s search
#: stops at its work budget. A plan that no search touched keeps the version it had (see
#: :func:`solver_version`). 7: where every document is longer than a quarter of the one row
#: length, the rows of at most three documents (NOTE [ At most three documents a row ]). 8:
#: ``"always"`` also repacks the default's promise-sized round and keeps the tighter plan (NOTE
#: [ Repacking the rows with room ]). 9: ``"auto"``'s repack stops at its cap where a bound
#: proves the promise out of reach (NOTE [ Repacking the rows with room ], the cap). 10: the
#: rows of three with the turned pairing, and where the thirds bound rises above ``ceil(tokens /
#: L)`` with documents of L/4 or less (NOTE [ Rows of three where the thirds rise ]). 11: full
#: rows of any count where BFD's floor misses the promise (NOTE [ Full rows of any count ]). 12:
#: rows longer than ``_EXACT_ROWS`` repacked in units (NOTE [ Repacking long rows in units ]).
SOLVER_VERSION = 12


def solver_version(
    row_lengths: tuple[int, ...],
    searched: bool = False,
    budgeted: bool = False,
    tripled: bool = False,
    promised: bool = False,
    capped: bool = False,
    turned: bool = False,
    filled: bool = False,
    coarse: bool = False,
) -> int:
    """The :data:`SOLVER_VERSION` whose plans a spec with these row lengths gets: version 4
    changed only plans with several row lengths, version 5 only the plans that repacking
    best-fit decreasing's rows made (``searched``: where the search keeps BFD's plan or MBS's,
    those are the plans of 3 and 4), version 6 only those where the work budget stopped a
    search (``budgeted``) and version 7 only the rows of at most three documents
    (``tripled``), and version 8 only the ``"always"`` plans its promise-sized round made
    tighter (``promised``) and version 9 only those where the repack's cap stopped it
    (``capped``), and version 10 only the rows of three it changed or added (``turned``), and
    version 11 only the full rows of any count (``filled``), and version 12 only the plans of
    rows longer than ``_EXACT_ROWS`` that the search touched (``coarse``), so the others keep 3,
    4, 5, 6, 7, 8, 9, 10 or 11 (and their digests, so the states saved before still load). Each
    flag's version
    is written out, not :data:`SOLVER_VERSION`: a later bump leaves
    the plans it did not change on theirs.

    Example:
        >>> solver_version((1024,), capped=True), solver_version((1 << 20,), coarse=True)
        (9, 12)
    """
    if coarse:
        return 12
    if filled:
        return 11
    if turned:
        return 10
    if capped:
        return 9
    if promised:
        return 8
    if tripled:
        return 7
    if budgeted:
        return 6
    if searched:
        return 5
    return 4 if len(row_lengths) > 1 else 3


#: When the Minimum-Bin-Slack search runs (NOTE [ Planning at the speed of best-fit decreasing ]).
SEARCH = ("always", "auto", "never")
#: The Minimum-Bin-Slack search runs only when the lengths hold at least this many documents
#: per distinct size (NOTE [ Planning at the speed of best-fit decreasing ]).
_DOCS_PER_SIZE = 100_000
#: Below that, the search still runs when best-fit decreasing pads more than 1/_TOLERANCE of
#: the tokens (0.5 percentage points) above the ``ceil(tokens / L)`` bound's padding.
_TOLERANCE = 200
#: MBS runs only when best-fit decreasing leaves more than 1/_CLOSE_ENOUGH of its rows above
#: the L2 bound (NOTE [ Two solvers, the tighter plan ]).
_CLOSE_ENOUGH = 1000
#: The default's search repacks towards the L2 bound when that takes at most one of BFD's
#: patterns per this many documents, else towards its promise (NOTE [ Repacking the rows with
#: room ]).
_DOCS_PER_PATTERN = 40
#: ``"auto"`` runs the whole-data Minimum Bin Slack after a repack that fell short only while
#: its work (BFD's rows x distinct sizes x 64-bit words of the longest row, in big-integer word
#: operations: about 1.4 ns each here; never where the rows are repacked in units, NOTE
#: [ Repacking long rows in units ]) stays under this: 2,000 documents of 32k-64k tokens in
#: rows of 131,072 cost it 4.7 s (3.3e9), for nothing (s7-rev2); the tests' and benchmarks'
#: searches stay under 3e6. ``"always"`` runs it whatever it costs.
_MBS_WORK = 10**8
#: ``"auto"``'s search (the repack, then MBS over every document) stops once its big-integer
#: word operations pass this many per document per 64-bit word of the longest row (plus one),
#: keeping the tightest plan done by then (NOTE [ Repacking the rows with room ]): counted, not
#: timed, so every rank plans the same. The tests' and benchmarks' repacks spend at most 10.7
#: (2,000 documents in (256, 512] in rows of 1024), the benchmark's at most 0.14.
_REPACK_WORK = 16
#: Rows of at most three documents (NOTE [ At most three documents a row ]) up to this many
#: documents (their arrays are per document); beyond it the search of BFD's rows.
_THREE_DOCS = 1 << 22
#: A step of the repack (a quick fill's, a row opened, a chunk of a closest fill) costs about
#: this many big-integer word operations (about 4 ns each, with the allocations) more than its
#: words: its Python overhead, about 1 us (NOTE [ Repacking the rows with room ], the cap).
_OP_WORDS = 250
#: A per-document best-fit decreasing costs about this many word operations per document (and
#: a quarter of the row's 64-bit words): about 0.45 us at L = 1,024, 2.2 us at 131,072.
_DOC_WORDS = 100
#: Where :func:`thirds_bound` proves the default's promise out of reach, its repack stops once
#: its steps (each its words plus :data:`_OP_WORDS`) pass this many tenths of that estimate of
#: a per-document BFD (NOTE [ Repacking the rows with room ], the cap) ...
_REPACK_TENTHS = 3
#: ... plus this (about 200 steps, 0.2 ms).
_REPACK_FLOOR = 50_000
#: :func:`filled_rows` works in units of ``L // _FILL_UNITS`` tokens (at least 1): rows of
#: 1,024 to 2,047 units, whatever the row length (NOTE [ Full rows of any count ]).
_FILL_UNITS = 1024
#: Rows up to this many tokens are repacked token by token; longer ones in units of
#: ``L // _FILL_UNITS`` tokens, L the longest row (NOTE [ Repacking long rows in units ]).
_EXACT_ROWS = 16384
#: Its rounds of exactly full rows of three and of four documents, ...
_FILL_ROUNDS = 3
#: ... each turning the partners by this many more places (times the partner's rank).
_FILL_TURN = 7919
#: ... and its rows with room are repacked only where BFD's rows of the others leave it less than
#: 1/_FILL_GAP of its rows above the most it may have.
_FILL_GAP = 100


@dataclass(frozen=True, eq=False)
class Patterns:
    """The solution: pattern ``p`` is used ``reps[p]`` times in rows of ``row_lengths[kind[p]]``.

    Attributes:
        sizes: the distinct sizes, largest first ``(U,)``.
        kind: row-length index of each pattern ``(P,)``.
        reps: rows using each pattern ``(P,)``.
        offsets: pattern ``p``'s items are ``items[offsets[p]:offsets[p + 1]]`` ``(P + 1,)``.
        items: size index (into ``sizes``) of each item entry, largest size first in a pattern.
        mult: how many documents of that size the pattern holds.
        searched: whether the plan is :func:`repack`'s, which :func:`solver_version` tells
            (BFD's or MBS's plan after a search is the plan earlier versions made).
        budgeted: whether the search's work budget stopped it (the repack, or MBS over every
            document), which :func:`solver_version` tells too (earlier versions searched on).
        tripled: whether the plan is :func:`three_rows`'s (NOTE [ At most three documents a
            row ]), which :func:`solver_version` tells too.
        promised: whether the plan is an ``"always"`` repack of the default's promise-sized
            round, tighter than its own (NOTE [ Repacking the rows with room ]), which
            :func:`solver_version` tells too.
        capped: whether the repack's cap stopped it where the promise is out of reach (NOTE
            [ Repacking the rows with room ], the cap), which :func:`solver_version` tells too.
        turned: whether the plan is one of the rows of three that version 10 added (NOTE
            [ Rows of three where the thirds rise ]), which :func:`solver_version` tells too.
        filled: whether the plan is :func:`filled_rows`' (NOTE [ Full rows of any count ]),
            which :func:`solver_version` tells too.
        coarse: whether the search of rows longer than ``_EXACT_ROWS`` made or kept it (NOTE
            [ Repacking long rows in units ]), which :func:`solver_version` tells too.
    """

    sizes: np.ndarray
    kind: np.ndarray
    reps: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    mult: np.ndarray
    searched: bool = False
    budgeted: bool = False
    tripled: bool = False
    promised: bool = False
    capped: bool = False
    turned: bool = False
    filled: bool = False
    coarse: bool = False

    @functools.cached_property
    def fill(self) -> np.ndarray:
        """Tokens used by each pattern ``(P,)``."""
        if not self.items.size:
            return self.items
        return np.add.reduceat(self.sizes[self.items] * self.mult, self.offsets[:-1])

    @property
    def per_row(self) -> np.ndarray:
        """Documents per row of each pattern ``(P,)``."""
        return np.add.reduceat(self.mult, self.offsets[:-1]) if self.mult.size else self.reps * 0

    @property
    def num_rows(self) -> int:
        return int(self.reps.sum())


def solve(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...], search: str = "auto"
) -> Patterns:
    """Pack a histogram into rows: the tightest of best-fit decreasing, its rows with room
    repacked, and Minimum Bin Slack (NOTE [ Two solvers, the tighter plan ]); ``search`` says
    when the searches run (one of :data:`SEARCH`, NOTE [ Planning at the speed of best-fit
    decreasing ]).

    Example:
        >>> p = solve(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, sorted(p.fill.tolist())
        (3, [4, 8])
    """
    if search == "never":
        return best_fit(sizes, counts, row_lengths)
    goal = _Goal(sizes, counts, row_lengths, search)
    three = fit = None
    length = row_lengths[0]
    # NOTE [ At most three documents a row ]: fewer long documents than short ones
    if (
        len(row_lengths) == 1
        and goal.docs <= _THREE_DOCS
        and (
            (4 * int(sizes[-1]) > length or goal.thirds > goal.c1)
            and 2 * int(counts[sizes > length // 2].sum()) < goal.docs
        )
    ):
        if 4 * int(sizes[-1]) > length:  # (BFD's rows counted, no plan made)
            rows = bfd_rows_three(sizes.tolist(), counts.tolist(), length)
            if not goal.enough(rows * length):
                three = three_rows(sizes, counts, length, rows)
                if three is not None and search == "auto":
                    return three
        else:
            # (the thirds: pairs of long documents and full rows of three, NOTE [ Rows of
            # three where the thirds rise ]); below BFD's floor: no BFD plan needed (fewer
            # rows than BFD's, so never BFD's own plan, version 3's)
            floor = bfd_floor(sizes, counts, length)
            if floor is not None:
                three = three_rows(sizes, counts, length, floor)
            if three is None:
                fit = best_fit(sizes, counts, row_lengths)
                if goal.enough(fit.num_rows * length):
                    return fit  # (as _searched: no search)
                three = three_rows(sizes, counts, length, fit.num_rows)
            if three is not None:
                three = dataclasses.replace(three, turned=True)
                # (near the thirds bound no search can gain much; else the search of BFD's
                # rows runs as in version 9 and the tighter plan is kept)
                if search == "auto" and three.num_rows * length - goal.thirds <= goal.slack:
                    return three
    filled = None
    # NOTE [ Full rows of any count ]: where BFD surely misses the promise (its floor) and no
    # bound rises above ceil(tokens / L), rows the documents fill exactly
    if (
        len(row_lengths) == 1
        and (goal.few or not goal.auto)
        and goal.docs <= _THREE_DOCS
        and 4 * int(sizes[-1]) <= length
        and 2 * int(sizes[0]) <= length
        and goal.thirds <= goal.c1
    ):
        floor = bfd_floor(sizes, counts, length)
        if floor is not None and floor * length > goal.promised:
            most = min(floor - 1, goal.promised // length)
            filled = filled_rows(sizes, counts, length, most)
            if filled is not None and goal.auto:
                return filled
    rival: list[Patterns] = []
    plan = _searched(sizes, counts, row_lengths, search, rival, goal, fit)
    if three is not None and three.num_rows < plan.num_rows:
        plan = three  # ("always": the tighter)
    if filled is not None and filled.num_rows < plan.num_rows:
        plan = filled  # ("always": the tighter)
    if rival and _padded(rival[0], row_lengths) < _padded(plan, row_lengths):
        # ("always": the default's rounds did better; only these plans change: version 8)
        return dataclasses.replace(rival[0], promised=True)
    return plan


class _Goal:
    """The bounds a plan is measured against (NOTE [ Lower bounds ]), once per solve: the
    tokens, C1 (and the promise: ``slack``, 0.5 points of padding, above it) and, when first
    needed, C2 (row tokens).

    Example:
        >>> g = _Goal(np.array([6, 5, 2]), np.array([3, 1, 2]), (10,), "auto")
        >>> g.c1, g.enough(50), g.enough(40), g.c2
        (30, False, True, 40)
    """

    def __init__(
        self, sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...], search: str
    ) -> None:
        self.sizes, self.counts, self.row_lengths = sizes, counts, row_lengths
        self.docs = int(np.asarray(counts).sum())
        # NOTE on planning speed: "always" searches whatever the documents per distinct size
        self.few = search == "auto" and self.docs < _DOCS_PER_SIZE * len(sizes)
        self.auto = search == "auto"
        self.tokens = int(np.dot(np.asarray(sizes, np.int64), np.asarray(counts, np.int64)))
        self._c2: int | None = None
        if len(row_lengths) == 1:  # (L1 needs no pass)
            self.c1 = -(-self.tokens // row_lengths[0]) * row_lengths[0]
        else:
            self.c1, self._c2 = capacity_bound(sizes, counts, row_lengths)
        # the default's promise: 0.5 points of padding above C1 (whole rows of one length)
        self.slack = self.tokens // _TOLERANCE
        self.promised = self.c1 + self.slack
        if len(row_lengths) == 1:
            self.promised -= self.promised % row_lengths[0]

    @functools.cached_property
    def thirds(self) -> int:
        """:func:`thirds_bound` in row tokens (one row length); 0 at once where the documents
        average a third of the row or less (its slope, a sum of ``3 s - L`` over some of
        them, each left out above 0, is then at most 0)."""
        length = self.row_lengths[0]
        if 3 * self.tokens <= length * self.docs:
            return 0
        return thirds_bound(self.sizes, self.counts, length) * length

    @property
    def c2(self) -> int:
        if self._c2 is None:  # (C2 = C1 where no document is longer than L / 2)
            length = self.row_lengths[0]
            half = 2 * int(self.sizes.max()) <= length
            self._c2 = self.c1 if half else lower_bound(self.sizes, self.counts, length)[1] * length
        return self._c2

    def enough(self, padded: int) -> bool:
        """Whether a plan of ``padded`` row tokens needs no search (for the default: within
        0.5 points of padding of C1, where the documents per distinct size are few), or it
        can stop (within 0.1% of C2)."""
        if self.few and padded - self.c1 <= self.slack:
            return True
        return padded - self.c2 <= padded // _CLOSE_ENOUGH


def _searched(
    sizes: np.ndarray,
    counts: np.ndarray,
    row_lengths: tuple[int, ...],
    search: str,
    rival: list[Patterns] | None = None,
    goal: _Goal | None = None,
    fit: Patterns | None = None,
) -> Patterns:
    """:func:`solve` but for the rows of at most three documents, from best-fit decreasing's
    plan ``fit`` (made if ``None``; ``goal`` too); with ``"always"``, the repack of the
    default's first rounds is appended to ``rival`` (a list) where it runs."""
    if fit is None:
        fit = best_fit(sizes, counts, row_lengths)
    if search == "never":
        return fit
    if goal is None:
        goal = _Goal(sizes, counts, row_lengths, search)
    padded = _padded(fit, row_lengths)
    if goal.enough(padded):
        return fit  # within the promise or 0.1% of the bound: not worth the search's time
    docs, few, c2, promised = goal.docs, goal.few, goal.c2, goal.promised
    enough = goal.enough
    # NOTE [ Repacking the rows with room ]: towards the L2 bound where that repacks few enough
    # patterns for the documents, else (the default's promise) towards 0.5 points of padding
    aims = [c2, promised] if few else [c2]
    words = -(-max(row_lengths) // 64)
    # NOTE [ Repacking long rows in units ]: the search's state and budget in units of L // 1024
    unit = max(row_lengths) // _FILL_UNITS if max(row_lengths) > _EXACT_ROWS else 1
    mbs_words, words = words, -(-(max(row_lengths) // unit) // 64)
    # (counted, not timed: the same plan on every rank; "always" searches whatever it costs)
    work = None
    if goal.auto:  # [spent, budget] in words, [steps, cap] (the cap: see below), cut
        work = [0, _REPACK_WORK * docs * (words + 1), 0, 1 << 62, 0]
        if few and len(row_lengths) == 1 and goal.thirds > promised:
            # NOTE [ Repacking the rows with room ], the cap: the promise is out of reach
            work[3] = _REPACK_FLOOR + docs * (_DOC_WORDS + words // 4) * _REPACK_TENTHS // 10
    most = docs // _DOCS_PER_PATTERN
    best = repack(fit, row_lengths, aims, enough, most, work, unit)
    least = _padded(best, row_lengths)
    if least >= padded:
        best, least = fit, padded  # (as earlier versions: their digests)
    estimate = fit.num_rows * len(sizes) * mbs_words
    if unit > 1:
        # (version 12's, even BFD's own plan where earlier versions could have run MBS over
        # every document, whose plan had BFD's version: a state saved there fails loudly)
        if best is not fit or not goal.auto or estimate <= _MBS_WORK:
            best = dataclasses.replace(best, coarse=True)
        if rival is not None and not goal.auto and docs < _DOCS_PER_SIZE * len(sizes):
            rival.append(repack(fit, row_lengths, [c2, promised], enough, most, None, unit))
            rival[-1] = dataclasses.replace(rival[-1], coarse=True)
        return best  # (no MBS over every document: its state grows with the row length)
    if work is not None and work[4]:
        return dataclasses.replace(best, capped=True)  # (the cap cut the repack: version 9)
    if rival is not None and not goal.auto and docs < _DOCS_PER_SIZE * len(sizes):
        # NOTE [ Repacking the rows with room ]: also the rounds the default starts from (its
        # promise-sized round where the bound's takes too many patterns): solve keeps it where
        # it is tighter than everything else
        rival.append(repack(fit, row_lengths, [c2, promised], enough, most))
    if work is not None and work[0] > work[1]:
        best = dataclasses.replace(best, budgeted=True)  # (the repack was cut: version 6)
    if enough(least):
        return best
    if goal.auto and estimate > _MBS_WORK:
        return best  # (the search's cost grows with the row length: not worth it by default)
    if work is not None and estimate > work[1] - work[0]:
        # (MBS over every document would cost more than the work left: version 6)
        return dataclasses.replace(best, budgeted=True)
    slack = min_bin_slack(sizes, counts, row_lengths)
    if _padded(slack, row_lengths) < least:
        return slack  # (the plan of earlier versions, digested as theirs)
    return best


def _padded(p: Patterns, row_lengths: tuple[int, ...]) -> int:
    """Row tokens of a solution (rows x their row length)."""
    if len(row_lengths) == 1:
        return int(p.reps.sum()) * row_lengths[0]
    return int((p.reps * np.asarray(row_lengths, dtype=np.int64)[p.kind]).sum())


def best_fit(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """Best-fit decreasing over the histogram, in bulk (NOTE [ Two solvers, the tighter plan ]).

    Exactly the rows of per-document BFD (each document, largest first, into the open row with
    the least room that holds it, else a new row of the smallest row length that holds it), up
    to ties between rows of equal room.

    Example:
        >>> p = best_fit(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, sorted(p.fill.tolist())
        (3, [4, 8])
    """
    return _best_fit_loop(sizes, counts, row_lengths[0])(sizes, counts, row_lengths)


def _best_fit_loop(
    sizes: np.ndarray, counts: np.ndarray, shortest: int
) -> Callable[[np.ndarray, np.ndarray, tuple[int, ...]], Patterns]:
    """Which of the three equal loops :func:`best_fit` runs on this histogram (rows of
    ``shortest`` tokens at least): per document where the documents are few per size and few
    hold a row open (NOTE [ Few documents a size ]), else by rooms where few sizes hold one
    document, else by keys. (benchmarks/bfd_paths.py names the pick from it.)

    Example:
        >>> _best_fit_loop(np.array([5, 3, 2]), np.array([1, 1, 1]), 8).__name__
        '_fit_by_document'
    """
    docs = int(np.asarray(counts).sum())
    if (
        0 < docs <= _BY_DOCUMENT
        and _DOCS_PER_SIZES[0] * docs <= _DOCS_PER_SIZES[1] * len(sizes)
        and _held_open(sizes, counts, shortest) <= _HELD_OPEN
    ):
        return _fit_by_document
    if len(sizes) < _MANY and _SINGLE * int(np.count_nonzero(np.asarray(counts) != 1)) > len(sizes):
        return _fit_by_room
    return _fit_by_key


def _held_open(sizes: np.ndarray, counts: np.ndarray, length: int) -> int:
    """The documents longer than half of ``length`` (the shortest row length): no two of them
    share a row of that length, so most keep a row, and its key in :func:`_fit_by_document`'s
    sorted list, to the end (NOTE [ Few documents a size ]).

    Example:
        >>> _held_open(np.array([7, 5, 4, 2]), np.array([1, 2, 1, 3]), 8)
        3
    """
    longer = int(np.count_nonzero(np.asarray(sizes) > length // 2))  # (sizes fall)
    return int(np.asarray(counts)[:longer].sum())


def _fit_by_key(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """:func:`best_fit` where many sizes hold one document each, or there are many sizes: the
    open groups as keys (:class:`_Open`), runs of sizes of one document placed document by
    document (:func:`_single_steps`)."""
    vals, cnt, lens, gid = _lists(sizes, counts, row_lengths)
    state = _Open(vals[-1] if vals else 1, cnt[:gid])
    state.parent.extend(itertools.repeat(-1, gid))
    state.code.extend(range(1, gid << _MULT | 1, 1 << _MULT))
    state.below += [
        -((lens[0] - s) << _ROOM | (_LAST - g) << 1 | (cnt[g] > 1))
        for g, s in enumerate(vals[:gid])
        if lens[0] - s >= state.least
    ]
    state.below.append(1)  # (a sentinel: never at most a negated key, so never empty)
    heapq.heapify(state.below)
    # runs of at least _RUN sizes of one document each (that a row of lens[0] holds): placed
    # by the per-document loop, the others group by group
    one = np.zeros(len(vals) + 2, dtype=np.int8)
    one[gid + 1 : -1] = (np.asarray(counts)[gid:] == 1) & (np.asarray(sizes)[gid:] <= lens[0])
    edges = (one[1:] != one[:-1]).nonzero()[0].reshape(-1, 2)
    start = gid
    for lo, hi in edges[edges[:, 1] - edges[:, 0] >= _RUN].tolist():
        gid = _grouped_steps(state, vals, cnt, lens, start, lo, gid)
        gid = _single_steps(state, vals, lens[0], lo, hi, gid)
        start = hi
    _grouped_steps(state, vals, cnt, lens, start, len(vals), gid)
    return _patterns(sizes, state)


def _lists(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]
) -> tuple[list[int], list[int], list[int], int]:
    """:func:`best_fit`'s sizes, counts and row lengths as lists, and how many sizes open a
    group of their own at once (the first group ids): documents longer than ``L / 2`` share no
    row (each room left, ``L - s``, is below every such ``s``), so with one row length each
    such size is one root group, made as the loop would make it.

    Example:
        >>> _lists(np.array([7, 5, 4, 2]), np.array([1, 2, 1, 3]), (8,))
        ([7, 5, 4, 2], [1, 2, 1, 3], [8], 2)
    """
    vals = np.asarray(sizes, dtype=np.int64).tolist()
    lens = [int(x) for x in row_lengths]
    half = -(lens[0] // 2)
    roots = 0 if len(lens) > 1 else bisect_left(vals, half, key=operator.neg)
    return vals, np.asarray(counts, dtype=np.int64).tolist(), lens, roots


def _fit_by_room(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """:func:`best_fit` where few sizes hold one document each: the rooms with a group kept
    sorted (at most one ``bisect`` per size, its index right across the size's steps and on
    to the next size) and the groups of a room in a stack, each group its parent and one
    code."""
    vals, cnt, lens, gid = _lists(sizes, counts, row_lengths)
    # a group: rows with the same contents and room; its contents are its parent group's
    # (parent[g], -1 for new rows) plus one code (code[g]: size index and mult, and in a row's
    # first code the row length index plus one, so that it marks where a pattern starts:
    # :func:`_group_patterns`); open_rooms = the rooms with a group, sorted (at: the first
    # that holds s, kept right from size to size). The loop is inlined on purpose, appends
    # bound once: it is the whole cost of a plan (NOTE [ Planning at the speed of best-fit
    # decreasing ]); each step splits k rows off one group (or opens k rows).
    parent = [-1] * gid
    code = list(range(_FIRST | 1, _FIRST | gid << _MULT | 1, 1 << _MULT))
    rows = cnt[:gid]
    add_parent, add_code, add_rows = parent.append, code.append, rows.append
    least = vals[-1]  # (a room below the smallest size holds no document: not kept)
    # by_room[room]: the top group of the room's stack (None: none, also once emptied); a
    # group pushed on another is linked to it (under); a list of L + 1 slots where that is at
    # most _ROOM_SLOTS slots a size (its subscripts cost less than a dict's), else a dict
    listed = lens[-1] <= _ROOM_SLOTS * len(vals)
    by_room: Any = [None] * (lens[-1] + 1) if listed else {}
    room_of = by_room.__getitem__ if listed else by_room.get
    open_rooms = [lens[0] - s for s in vals[:gid] if lens[0] - s >= least]  # (increasing)
    for g, room in enumerate(open_rooms, gid - len(open_rooms)):
        by_room[room] = g
    under: dict[int, int] = {}
    under_of = under.get
    n_open = at = len(open_rooms)  # (the rooms from at on hold the last size, no others)
    codes = range(gid << _MULT, len(cnt) << _MULT, 1 << _MULT)  # (a size's index, as a code)
    for here, s, c in zip(codes, vals[gid:], cnt[gid:], strict=True):
        if at and open_rooms[at - 1] >= s:  # (else at is right: no room between the sizes)
            at = bisect_left(open_rooms, s, 0, at - 1)
        # one document: the loop's one step below with m = k = 1, unrolled because at small N
        # most sizes hold one document and the general step's arithmetic was most of their
        # time (profiled in session 15; the plans are the loop's)
        if c == 1:
            if at < n_open:
                room = open_rooms[at]
                g = by_room[room]
                n = rows[g]
                rows[g] = n - 1
                if n == 1:  # (the group's last row: closed)
                    t = under_of(g)
                    by_room[room] = t
                    if t is None:
                        del open_rooms[at]
                        n_open -= 1
                add_parent(g)
                add_code(here | 1)
            else:
                kind = 0 if s <= lens[0] else next(j for j, x in enumerate(lens) if x >= s)
                room = lens[kind]
                add_parent(-1)
                add_code((kind + 1) << _KIND | here | 1)
            left = room - s
            if left >= least:
                t = room_of(left)
                by_room[left] = gid
                if t is None:
                    insort(open_rooms, left)
                    n_open += 1
                    if left < s:
                        at += 1
                else:
                    under[gid] = t
            gid += 1
            add_rows(1)
            continue
        while c:  # one group per step: m documents of size s in each of k rows
            if at < n_open:  # the tightest open row that holds s: rows of group g
                room = open_rooms[at]
                g = by_room[room]
                n = rows[g]
                m = room // s  # the row stays the tightest until its room drops below s
                k = c // m
                if k > n:
                    k = n
                elif not k:  # fewer than m documents left: one more row takes them
                    m, k = c, 1
                n -= k
                rows[g] = n
                if not n:
                    t = under_of(g)
                    by_room[room] = t
                    if t is None:
                        del open_rooms[at]
                        n_open -= 1
                add_parent(g)
                add_code(here | m)
            elif s > lens[0]:  # new rows of the smallest row length that holds s
                kind = next(j for j, x in enumerate(lens) if x >= s)
                room = lens[kind]
                m = room // s
                k = c // m
                if not k:
                    m, k = c, 1
                add_parent(-1)
                add_code((kind + 1) << _KIND | here | m)
            else:  # no open row holds s: new rows of the shortest row length
                room = lens[0]
                m = room // s
                k = c // m
                if not k:
                    m, k = c, 1
                add_parent(-1)
                add_code(_FIRST | here | m)
            c -= k * m
            left = room - m * s  # (below s: the next step looks again)
            if left >= least:  # (nor is a room no document fits: not kept)
                t = room_of(left)
                by_room[left] = gid
                if t is None:
                    insort(open_rooms, left)
                    n_open += 1
                    if left < s:
                        at += 1  # (inserted before the rooms that hold s)
                else:
                    under[gid] = t
            gid += 1
            add_rows(k)
    return _group_patterns(sizes, rows, parent, code)


def _fit_by_document(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]
) -> Patterns:
    """:func:`best_fit` one document at a time (NOTE [ Few documents a size ]): the open rows'
    keys ``room << b | (2**b - 1 - j)`` (``j``: the document that left the row that room; ``b``
    the bits of the count of documents) in a sorted list, so the tightest room that holds
    ``s``, and of its rows the one whose room was left last (the group :func:`_fit_by_room`
    takes), is one ``bisect`` away.

    Example:
        >>> p = _fit_by_document(np.array([5, 3, 2]), np.array([1, 1, 2]), (8,))
        >>> p.reps.tolist(), p.items.tolist(), p.mult.tolist()
        ([1, 1], [0, 1, 2], [1, 1, 2])
    """
    lens = [int(x) for x in row_lengths]
    cnt = np.asarray(counts, dtype=np.int64)
    docs = int(cnt.sum())
    index = np.repeat(np.arange(cnt.size, dtype=np.int64), cnt)  # each document's size index
    each = np.asarray(sizes, dtype=np.int64)[index]
    # a key's low bits: as few as the documents need (their count's bits, at most 17), so that
    # more keys fit in one 30-bit digit of a Python integer (rows of up to 2**20 at 1k
    # documents, 16,384 at 65k): multi-digit keys cost more in every add, mask and compare
    # (NOTE [ Few documents a size ])
    bits = docs.bit_length()
    tmask = (1 << bits) - 1
    least, high, first = int(sizes[-1]) << bits, -1 << bits, lens[0] << bits
    # with one row length, the documents longer than half of it open a row each, in order (a
    # room one leaves holds no other): their rows and keys made in bulk, as the loop would
    roots = 0 if len(lens) > 1 else int(np.count_nonzero(each > lens[0] // 2))  # (sizes fall)
    rooms = (lens[0] - each[:roots]) << bits | np.arange(tmask, tmask - roots, -1)
    keys = [-1, *np.sort(rooms[rooms >= least]).tolist()]  # (-1: a sentinel below every key,
    # so keys[-1] and keys[at - 1] always exist)
    placed = list(range(roots))  # each document's row (rows numbered as opened)
    kinds = [0] * roots  # each row's row length index
    put = placed.append
    # (each row's last document, which orders the patterns, is found from ``placed`` in
    # numpy afterwards: a store per document here was 8% of the loop, measured in session 21)
    shifted = (each[roots:] << bits).tolist()
    for tail, s in zip(range(tmask - roots, tmask - docs, -1), shifted, strict=True):
        if keys[-1] >= s:  # the tightest room that holds s, of its rows the last left
            at = bisect_left(keys, s)
            key = keys[at]
            put(placed[tmask - (key & tmask)])
            left = (key - s) & high
            if left < least:  # (a room no document fits: not kept)
                del keys[at]
            else:
                new = left | tail
                if keys[at - 1] > new:
                    del keys[at]
                    insort(keys, new, 1, at)
                else:  # (the new key sorts where the old one was)
                    keys[at] = new
        else:  # a new row of the shortest row length that holds s
            kind = 0 if s <= first else next(k for k, x in enumerate(lens) if x << bits >= s)
            put(len(kinds))
            kinds.append(kind)
            left = (lens[kind] << bits) - s
            if left >= least:
                insort(keys, left | tail)
    return _document_patterns(sizes, cnt, index, placed, kinds)


def _document_patterns(
    sizes: np.ndarray,
    counts: np.ndarray,
    index: np.ndarray,
    placed: list[int],
    kinds: list[int],
) -> Patterns:
    """:func:`_fit_by_document`'s rows as :func:`best_fit`'s patterns: rows in the order of
    their last documents (the order of :func:`_fit_by_room`'s groups), a size's documents in a
    row as one item, identical rows as one pattern."""
    row = np.fromiter(placed, np.int64, len(placed))
    n = len(kinds)
    order = np.argsort(row, kind="stable")  # documents row by row (rows as opened)
    width = np.bincount(row, minlength=n)
    ends = np.cumsum(width)
    by = np.argsort(order[ends - 1])  # rows by their last documents (distinct)
    starts = (ends - width)[by]
    width = width[by]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(width, out=offsets[1:])
    # documents row by row in that order: each row's run of ``order``, moved
    item = index[order[np.repeat(starts - offsets[:-1], width) + np.arange(row.size)]]
    kind = np.fromiter(kinds, np.int64, n)[by]
    reps = np.ones(n, dtype=np.int64)
    if int(counts.max()) == 1:  # (every item one document, every row its own)
        mult = np.ones(item.size, dtype=np.int64)
        return Patterns(np.asarray(sizes, dtype=np.int64), kind, reps, offsets, item, mult)
    run = np.ones(item.size, dtype=bool)  # (a document that starts an item)
    np.not_equal(item[1:], item[:-1], out=run[1:])
    run[offsets[:-1]] = True
    at = np.flatnonzero(run)
    mult = np.empty(at.size, dtype=np.int64)
    np.subtract(at[1:], at[:-1], out=mult[:-1])
    mult[-1] = item.size - at[-1]
    offsets = np.searchsorted(at, offsets)
    reps, offsets, items, mult, kind = _same_rows(counts, reps, offsets, item[at], mult, kind)
    return Patterns(np.asarray(sizes, dtype=np.int64), kind, reps, offsets, items, mult)


def _same_rows(
    counts: np.ndarray,
    reps: np.ndarray,
    offsets: np.ndarray,
    items: np.ndarray,
    mult: np.ndarray,
    kind: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Rows with the same contents and row length as one pattern (at the first), the others
    left out: only rows of sizes held by several documents each can repeat."""
    single = np.add.reduceat((counts[items] == 1).astype(np.int64), offsets[:-1]) > 0
    can = np.flatnonzero(~single)
    if not can.size:
        return reps, offsets, items, mult, kind
    # the candidate rows' contents alone as lists (at small N most rows hold a size of one
    # document: listing every row was a third of this function, measured in session 21)
    lo, wide = offsets[can], offsets[can + 1] - offsets[can]
    ends = np.cumsum(wide)
    at = np.repeat(lo - ends + wide, wide) + np.arange(ends[-1])  # (their items' positions)
    it, mu = items[at].tolist(), mult[at].tolist()
    first: dict[tuple[int, ...], int] = {}
    keep = np.ones(reps.size, dtype=bool)
    a = 0
    for r, b, kd in zip(can.tolist(), ends.tolist(), kind[can].tolist(), strict=True):
        key = (kd, *it[a:b], *mu[a:b])
        a = b
        p = first.setdefault(key, r)
        if p != r:
            reps[p] += 1
            keep[r] = False
    if keep.all():
        return reps, offsets, items, mult, kind
    width = np.diff(offsets)[keep]
    inner = np.repeat(keep, np.diff(offsets))
    out = np.zeros(width.size + 1, dtype=np.int64)
    np.cumsum(width, out=out[1:])
    return reps[keep], out, items[inner], mult[inner], kind[keep]


def _group_patterns(
    sizes: np.ndarray, rows: list[int], parent: list[int], code: list[int]
) -> Patterns:
    """The live groups of :func:`_fit_by_room` (those with rows) as patterns, in group order:
    each group's codes from its own up to its row's first, the last group first, turned round
    (:func:`_walked`, with no offsets: a row's first code, ``_FIRST`` or more, starts each)."""
    # (walked in Python at any count: a row here holds few groups, and numpy's walk a level at
    # a time was 1.02-1.07x slower even at 1.5k-3.7k live groups, measured in session 22)
    flat: list[int] = []
    put = flat.append
    for g in itertools.compress(range(len(rows) - 1, -1, -1), reversed(rows)):
        while g >= 0:
            put(code[g])
            g = parent[g]
    flat.reverse()
    packed = np.fromiter(flat, np.int64, len(flat))
    starts = (packed >= _FIRST).nonzero()[0]
    kind = packed[starts] >> _KIND
    kind -= 1
    return Patterns(
        sizes=np.asarray(sizes, dtype=np.int64),
        kind=kind,
        reps=np.fromiter(filter(None, rows), np.int64, starts.size),
        offsets=np.append(starts, packed.size),
        items=(packed >> _MULT) & ((1 << (_KIND - _MULT)) - 1),
        mult=packed & ((1 << _MULT) - 1),
    )


def _decoded(
    sizes: np.ndarray, reps: np.ndarray, offsets: np.ndarray, packed: np.ndarray
) -> Patterns:
    """The patterns of :func:`best_fit`'s codes ``packed`` (each pattern's row's first code
    first, pattern ``p``'s at ``offsets[p]:offsets[p + 1]``), used ``reps`` times each."""
    return Patterns(
        sizes=np.asarray(sizes, dtype=np.int64),
        kind=packed[offsets[:-1]] >> _KIND,
        reps=reps,
        offsets=offsets,
        items=(packed >> _MULT) & ((1 << (_KIND - _MULT)) - 1),
        mult=packed & ((1 << _MULT) - 1),
    )


class _Open:
    """:func:`best_fit`'s state (NOTE [ Planning at the speed of best-fit decreasing ]).

    A group: rows with the same contents and room, made by one step (id: its step's index);
    ``parent[g]`` the group its rows were split off (-1: new rows), ``code[g]`` what the step
    added (:data:`_MULT`: size index and mult, and in a row's first code its row length index),
    ``rows[g]`` its rows. A group with room is open, as its key ``room << _ROOM | (_LAST - g)
    << 1 | multi`` (``multi``: made with more than one row): the least key, the tightest room
    and of its groups the latest. Keys with a room that holds the size in hand are in
    ``above``, a stack with the least on top (each moved there from ``below`` is below all in
    it, each made below the room it came from), the others in ``below``, a heap of negated
    keys (the largest room first; and a sentinel, 1), moved up as the sizes fall. Rooms below
    ``least`` (the smallest size) are never chosen: not kept. :func:`_single_steps` lists as
    ``parent`` the negated key it took (:func:`_patterns` reads its group's id), and a group
    of one row whose row it took keeps its ``rows``.

    Example:
        >>> s = _Open(3, [2]); (s.least, s.rows, s.above, s.below)
        (3, [2], [], [])
    """

    def __init__(self, least: int, rows: list[int]) -> None:
        self.least = least
        self.rows = rows
        self.parent = array("q")  # (int64: 8 bytes an entry, a list's entry with its int ~44)
        self.code = array("q")
        self.above: list[int] = []
        self.below: list[int] = []


def _grouped_steps(
    state: _Open, vals: list[int], cnt: list[int], lens: list[int], lo: int, hi: int, gid: int
) -> int:
    """:func:`best_fit`'s steps for sizes ``lo`` to ``hi``, one group per step: ``m``
    documents of size ``s`` in each of ``k`` rows; returns the next group id."""
    rows, parent, code, above, below, least = (
        state.rows,
        state.parent,
        state.code,
        state.above,
        state.below,
        state.least,
    )
    add_rows, add_parent, add_code = rows.append, parent.append, code.append
    push, pop, stack = heapq.heappush, heapq.heappop, above.append
    for i in range(lo, hi):
        s, c = vals[i], cnt[i]
        here = i << _MULT
        held = -(s << _ROOM)  # (the negated keys of rooms that hold s: at most this)
        while below[0] <= held:
            stack(pop(below))
        while c:
            if above:  # the tightest open row that holds s: rows of group g
                key = -above[-1]
                room = key >> _ROOM
                g = _LAST - (key >> 1 & _LAST)
                m = room // s  # the row stays the tightest until its room drops below s
                k = c // m
                if not k:  # fewer than m documents left: one more row takes them
                    m, k = c, 1
                else:  # (at most the group's rows)
                    k = min(k, rows[g])
                rows[g] -= k
                if not rows[g]:
                    above.pop()
                add_parent(g)
                add_code(here | m)
            else:  # no open row holds s: new rows of the smallest row length that holds it
                kind = 0 if s <= lens[0] else next(j for j, x in enumerate(lens) if x >= s)
                room = lens[kind]
                m = room // s
                k = c // m or 1
                if k * m > c:  # (fewer than m documents: one row takes them)
                    m = c
                add_parent(-1)
                add_code(kind << _KIND | here | m)
            c -= k * m
            left = room - m * s  # (below the room it came from)
            if left >= least:  # (else never chosen again: not a room)
                push(below, -(left << _ROOM | (_LAST - gid) << 1 | (k > 1)))
            gid += 1
            add_rows(k)
    return gid


def _single_steps(state: _Open, vals: list[int], length: int, lo: int, hi: int, gid: int) -> int:
    """:func:`best_fit`'s steps for sizes ``lo`` to ``hi``, one document each (none longer
    than ``length``, the shortest row length): the steps of :func:`_grouped_steps`, a group
    of one row each, with only the keys taken recorded in the loop; returns the next group
    id."""
    rows, above, below = state.rows, state.above, state.below
    put = state.parent.append
    push, pop, stack, unstack = heapq.heappush, heapq.heappop, above.append, above.pop
    new = length << _ROOM
    least, high = state.least << _ROOM, -1 << _ROOM  # (a key's room bits: key & high)
    # (each size's negated key shift, and each step's negated key tail: a new group of one row)
    held = map(operator.neg, map(operator.lshift, vals[lo:hi], itertools.repeat(_ROOM)))
    tails = range(-((_LAST - gid) << 1), -((_LAST - gid - (hi - lo)) << 1), 2)
    for nsb, tail in zip(held, tails, strict=True):
        if below[0] <= nsb:  # the tightest of the rooms that now hold s (negated: the last)
            nkey = pop(below)
            while below[0] <= nsb:
                stack(nkey)
                nkey = pop(below)
        elif above:
            nkey = unstack()
        else:  # a new row
            put(-1)
            left = (new + nsb) & high
            if left >= least:
                push(below, tail - left)
            continue
        if nkey & 1:  # (a group of several rows: one of them)
            g = _LAST - (-nkey >> 1 & _LAST)
            rows[g] -= 1
            if rows[g]:
                stack(nkey)
        put(nkey)
        left = (nsb - nkey) & high
        if left >= least:
            push(below, tail - left)
    state.code.extend(range(lo << _MULT | 1, hi << _MULT | 1, 1 << _MULT))
    rows += [1] * (hi - lo)
    return gid + hi - lo


#: :func:`best_fit`'s codes: ``size index << _MULT | mult`` (a mult is at most the longest row
#: length, 2**24; a size index below that), and a row's first code adds ``kind << _KIND``.
_MULT = 25
_KIND = 2 * _MULT
#: :func:`_fit_by_room`'s row's first code: ``(kind + 1) << _KIND | ...`` (so at least this).
_FIRST = 1 << _KIND
#: The most row lengths a plan may have: a code is an int64, so ``kind + 1`` has 63 - ``_KIND``
#: = 13 bits (8,192 row lengths raised ``OverflowError`` in :func:`_fit_by_room` until session
#: 24; ``PackSpec.build`` now refuses them up front).
MAX_ROW_LENGTHS = (1 << (63 - _KIND)) - 1
#: :func:`best_fit`'s keys of open groups: ``room << _ROOM | (_LAST - group id) << 1 | multi``
#: (a room is at most 2**24: a key fits in 63 bits).
_ROOM = 38
_LAST = (1 << (_ROOM - 1)) - 1
#: :func:`best_fit` places runs of at least this many sizes of one document each by
#: :func:`_single_steps`.
_RUN = 8
#: :func:`best_fit` keeps the rooms sorted (:func:`_fit_by_room`) below ``_MANY`` sizes unless
#: all but one in ``_SINGLE`` of them hold one document each; else it keys the open groups
#: (:func:`_fit_by_key`). Measured by ``benchmarks/bfd_paths.py`` (results/bfd_paths.md) in
#: session 17: with fewer than 4k sizes the keyed path was 1.1-1.5x the sorted rooms' time where
#: 80-97% of the sizes hold one document (its per-document loop breaks at every repeated size),
#: and about as fast or faster (0.5-1.0x) where nearly all do. Since session 24's faster rooms
#: loop it is 1.5-2.0x and 1.2-1.5x, and 1.3-1.8x at 6k-8k sizes, so ``_MANY`` went from 4,096
#: to 65,536: in rows of 2**24 with 0-90% of the sizes holding one document (the others 2-5;
#: bfd_paths' histograms, side by side, session 24) keyed / rooms was 1.34-1.53x at 16k sizes,
#: 1.07-1.31x at 50k (also in rows of 2**20 + 3), 0.79-1.21x at 120k and 0.48-0.96x at 400k,
#: where the rooms' ``O(n)`` inserts take over. ``_SINGLE`` is session 17's: it only decides
#: where nearly every size holds one document yet the per-document loop is not taken (more than
#: ``_HELD_OPEN`` documents longer than L/2), where keyed / rooms was 1.3-1.6x in rows of 16,384
#: and 0.8-1.1x in rows of 2**24 (3k-30k sizes), which bfd_paths does not measure.
_MANY = 1 << 16
_SINGLE = 100
#: :func:`_fit_by_room` keeps its stacks' tops by room in a list of ``L + 1`` slots (``L`` the
#: longest row length) where ``L`` is at most this many times the distinct sizes, else in a
#: dict: the list saves about 5% of the loop (1,000 documents in (L/8, L/2], L = 1,024: 267 us
#: against 280, session 24) and costs 0.45 ns a slot to make (``[None] * 16385``: 6.3 us), so
#: at most 7 ns a size, where the loop spends 0.5-1.4 us a size.
_ROOM_SLOTS = 16
#: :func:`best_fit` places the documents one at a time (:func:`_fit_by_document`) where they
#: are at most ``_BY_DOCUMENT`` and at most ``_DOCS_PER_SIZES[1] / _DOCS_PER_SIZES[0]`` (1.5)
#: per distinct size (NOTE [ Few documents a size ]).
_BY_DOCUMENT = 1 << 16
_DOCS_PER_SIZES = (2, 3)
#: ... and where at most this many documents are longer than half the shortest row length
#: (:func:`_held_open`; NOTE [ Few documents a size ]).
_HELD_OPEN = 2048


def _patterns(sizes: np.ndarray, state: _Open) -> Patterns:
    """The live groups of :func:`best_fit` (those with rows) as patterns, in group order."""
    parent = np.frombuffer(state.parent, dtype=np.int64).copy()
    # (:func:`_single_steps` lists the negated key taken: its group's id; a group of one
    # row, the flag clear, has none left)
    taken = parent < -1
    keys = -parent[taken]
    parent[taken] = _LAST - (keys >> 1 & _LAST)
    reps = np.array(state.rows, dtype=np.int64)
    reps[parent[taken][keys & 1 == 0]] = 0
    live = np.flatnonzero(reps)
    n = live.size
    if n > _WALK:
        packed, offsets = _chains(live, parent, np.frombuffer(state.code, dtype=np.int64))
    else:
        packed, offsets = _walked(live.tolist(), parent.tolist(), state.code)
    return _decoded(sizes, reps[live], offsets, packed)


#: :func:`_patterns` reads the codes of up to this many live groups by a walk in Python, of
#: more a level at a time in numpy.
_WALK = 1024


def _walked(
    live: list[int], parent: list[int], code: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The codes of the groups ``live`` (each its row's first code first) and their offsets,
    by walking each group's parents in Python."""
    # each live group's codes from its own up to its row's first, the last group first: the
    # codes turned round are the plan's
    flat: list[int] = []
    put = flat.append
    ends = [0]
    end = ends.append
    for g in reversed(live):
        while g >= 0:
            put(code[g])
            g = parent[g]
        end(len(flat))
    flat.reverse()
    total = len(flat)
    offsets = total - np.fromiter(reversed(ends), np.int64, len(ends))
    return np.fromiter(flat, np.int64, total), offsets


def _chains(
    live: np.ndarray, parent: np.ndarray, code: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_walked` in numpy, a level of parents at a time (as many as the most codes of a
    row, at most about ``sqrt(2 L)``)."""
    n = live.size
    at, up = np.arange(n), live
    groups, codes = [], []
    while up.size:
        groups.append(at)
        codes.append(code[up])
        up = parent[up]
        kept = up >= 0
        if not kept.all():
            at, up = at[kept], up[kept]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.concatenate(groups), minlength=n), out=offsets[1:])
    packed = np.empty(int(offsets[-1]), dtype=np.int64)
    top = offsets[1:] - 1  # (a group's own code last: its row's first code first)
    for level, (at, c) in enumerate(zip(groups, codes, strict=True)):
        packed[top[at] - level] = c
    return packed, offsets


def repack(
    fit: Patterns,
    row_lengths: tuple[int, ...],
    aims: list[int] | None = None,
    enough: Callable[[int], bool] | None = None,
    most: int | None = None,
    work: list[int] | None = None,
    unit: int = 1,
) -> Patterns:
    """Some of ``fit``'s rows with room left packed again by Minimum Bin Slack with quick fills,
    the other rows kept (NOTE [ Repacking the rows with room ]); ``fit`` when every row is full.

    The rows with the most room are repacked, as many as hold the room to free to reach the
    first of ``aims`` (row tokens, decreasing) whose rows come from at most ``most`` patterns
    (else the last aim; without aims, every row with room), and twice that room while
    ``enough(row tokens)`` is false. ``work`` (``[spent, budget]``, big-integer word
    operations) stops it once spent passes the budget: the tightest plan done by then
    (``fit`` before any). ``unit`` > 1: the repacked rows in units of that many tokens, each
    document's rounded up (NOTE [ Repacking long rows in units ]).

    Example:
        >>> fit = best_fit(np.array([3, 2]), np.array([2, 4]), (7,))  # 3 3 | 2 2 2 | 2
        >>> p = repack(fit, (7,))  # twice 3 2 2
        >>> fit.num_rows, p.num_rows, p.fill.tolist(), p.reps.tolist()
        (3, 2, [7], [2])
    """
    lens = np.asarray(row_lengths, dtype=np.int64)
    room = lens[fit.kind] - fit.fill
    order = (-room).argsort(kind="stable")[: int(np.count_nonzero(room))]
    widths = fit.offsets[1:] - fit.offsets[:-1]
    if unit > 1:  # (a pattern holding a document longer than the longest row in units stays)
        over = -(-fit.sizes[fit.items] // unit) > int(lens[-1]) // unit
        over = np.add.reduceat(over, fit.offsets[:-1]) > 0 if over.size else over
        order = order[~over[order]]
    if not order.size:
        return fit
    have = (room * fit.reps)[order].cumsum()  # the room of the first patterns' rows
    padded = _padded(fit, row_lengths)
    aims = aims or [padded - int(have[-1])]
    for i, aim in enumerate(aims):
        want = padded - aim  # the room to free
        if i:  # (the last resort: with half the room it leaves to spare, to succeed at once)
            want += (int(have[-1]) - want) // 2
        k = min(int(have.searchsorted(want)) + 1, order.size)
        if most is None or k <= most:
            break
    best, least = fit, padded
    while True:
        try:
            out = _repacked(fit, lens, widths, order[:k], work, unit)
        except _OutOfWork:
            return best  # (counted, not timed: the same plan on every rank)
        rows = _padded(out, row_lengths)
        if enough is not None and enough(rows):
            return out
        if rows < least:
            best, least = out, rows
        if k == order.size or enough is None:
            return best  # (every row with room repacked: the tightest round, not the last)
        last = k
        while k == last:  # (twice the room until it takes more rows: the same rows, same plan)
            want = max(2 * want, 1)  # (an aim above BFD's rows, want <= 0, doubled forever)
            k = min(int(have.searchsorted(want)) + 1, order.size)


def _repacked(
    fit: Patterns,
    lens: np.ndarray,
    widths: np.ndarray,
    chosen: np.ndarray,
    work: list[int] | None = None,
    unit: int = 1,
) -> Patterns:
    """``fit`` with the rows of the patterns ``chosen`` packed again (:func:`repack`), in
    units of ``unit`` tokens where it is above 1."""
    keep = np.ones(fit.reps.size, dtype=bool)
    keep[chosen] = False
    kept = keep.repeat(widths)
    moved = ~kept
    pool = np.bincount(
        fit.items[moved], (fit.mult * fit.reps.repeat(widths))[moved], minlength=fit.sizes.size
    )
    at = pool.nonzero()[0]
    if unit > 1:
        return _repacked_units(fit, lens, widths, keep, pool, at, work, unit)
    if work is not None and at.size * _OP_WORDS > work[3] - work[0] - _OP_WORDS * work[2]:
        work[4] = 1  # (a step at least per size to place: past the cap before it starts)
        raise _OutOfWork
    vals = fit.sizes[at].tolist()
    counts = pool[at].astype(np.int64).tolist()
    kinds, reps, items, mults, ends = _quick_slack(vals, counts, lens.tolist(), work)
    index = dict(zip(vals, at.tolist(), strict=True))  # a size's index in fit.sizes
    width = widths[keep]
    offsets = np.zeros(width.size + len(ends) + 1, dtype=np.int64)
    width.cumsum(out=offsets[1 : width.size + 1])
    offsets[width.size + 1 :] = offsets[width.size] + np.asarray(ends, dtype=np.int64)
    return Patterns(
        sizes=fit.sizes,
        kind=np.concatenate([fit.kind[keep], np.asarray(kinds, dtype=np.int64)]),
        reps=np.concatenate([fit.reps[keep], np.asarray(reps, dtype=np.int64)]),
        offsets=offsets,
        items=np.concatenate(
            [fit.items[kept], np.fromiter(map(index.__getitem__, items), np.int64, len(items))]
        ),
        mult=np.concatenate([fit.mult[kept], np.asarray(mults, dtype=np.int64)]),
        searched=True,
    )


def _repacked_units(
    fit: Patterns,
    lens: np.ndarray,
    widths: np.ndarray,
    keep: np.ndarray,
    pool: np.ndarray,
    at: np.ndarray,
    work: list[int] | None,
    unit: int,
) -> Patterns:
    """:func:`_repacked` in units of ``unit`` tokens (NOTE [ Repacking long rows in units ]):
    the documents ``pool`` (per size index; ``at`` those with some) packed by
    :func:`_quick_slack` in units, sizes rounded up, rows of ``L // unit`` units; the slots of
    each unit, in order, take that unit's documents, in order."""
    units = -(-fit.sizes[at] // unit)  # (decreasing, as the sizes)
    cnt = pool[at].astype(np.int64)
    ucnt = np.bincount(units, weights=cnt).astype(np.int64)
    uvals = np.flatnonzero(ucnt)
    if work is not None and uvals.size * _OP_WORDS > work[3] - work[0] - _OP_WORDS * work[2]:
        work[4] = 1  # (a step at least per size to place: past the cap before it starts)
        raise _OutOfWork
    kinds, reps, items, mults, ends = _quick_slack(
        uvals.tolist(), ucnt[uvals].tolist(), (lens // unit).tolist(), work
    )
    # one line of unit values per new row (0: an empty slot), then documents into the slots
    starts = np.asarray([0, *ends[:-1]], dtype=np.int64)
    per = np.add.reduceat(np.asarray(mults, dtype=np.int64), starts)
    line = np.zeros((len(reps), int(per.max())), dtype=np.int64)
    item = np.repeat(np.asarray(items, dtype=np.int64), mults)
    owner = np.repeat(np.repeat(np.arange(len(reps)), np.diff([*starts, len(items)])), mults)
    line[owner, np.arange(item.size) - np.repeat(np.cumsum(per) - per, per)] = item
    rows = np.repeat(line, reps, axis=0)
    flat = rows.ravel()
    slots = np.flatnonzero(flat)
    slots = slots[np.argsort(flat[slots], kind="stable")]
    ids = np.repeat(at[::-1], cnt[::-1])  # (size indices, by unit increasing)
    out = np.full(flat.size, fit.sizes.size, dtype=np.int64)  # (an empty slot)
    out[slots] = ids
    made = _grouped(
        fit.sizes,
        np.sort(out.reshape(rows.shape), axis=1),
        np.repeat(np.asarray(kinds, dtype=np.int64), reps),
    )
    width = widths[keep]
    kept = np.repeat(keep, widths)
    return Patterns(
        sizes=fit.sizes,
        kind=np.concatenate([fit.kind[keep], made.kind]),
        reps=np.concatenate([fit.reps[keep], made.reps]),
        offsets=np.concatenate([[0], np.cumsum(width), int(width.sum()) + made.offsets[1:]]),
        items=np.concatenate([fit.items[kept], made.items]),
        mult=np.concatenate([fit.mult[kept], made.mult]),
        searched=True,
    )


class _OutOfWork(Exception):
    """A repack's work passed its budget (NOTE [ Repacking the rows with room ])."""


def _quick_slack(
    vals: list[int], counts: list[int], lens: list[int], work: list[int] | None = None
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """Minimum Bin Slack with quick fills (NOTE [ Repacking the rows with room ]) over the
    histogram ``vals`` (distinct sizes) and ``counts`` (documents of each, >= 1), in rows of
    ``lens`` (increasing). Returns ``(kinds, reps, items, mults, ends)``: pattern ``p`` is
    ``reps[p]`` rows of ``lens[kinds[p]]`` holding ``mults[j]`` documents of size
    ``items[j]`` for ``j`` in ``ends[p - 1]:ends[p]`` (``ends[-1]`` = 0), largest first.
    ``work``: ``[spent, budget]`` in big-integer word operations, counted as they are spent;
    raises :class:`_OutOfWork` when a pattern starts with ``spent > budget``."""
    top = lens[-1]
    words = (top >> 6) + 1  # (a big-integer operation on `have` or `mirror`)
    left = dict(zip(vals, counts, strict=True))  # documents left per size (sizes with some)
    sizes = sorted(left)  # (increasing)
    # bit s of `have` and bit top - s of `mirror` are set while size s has documents left:
    # the sizes whose partner r - s has some too are the bits of have & (mirror >> (top - r))
    bits = np.zeros(top + 1, dtype=np.uint8)
    bits[sizes] = 1
    have = int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")
    mirror = int.from_bytes(np.packbits(bits[::-1], bitorder="little").tobytes(), "little")
    kinds: list[int] = []
    reps: list[int] = []
    items: list[int] = []
    mults: list[int] = []
    ends: list[int] = []
    steps = 0  # quick-fill steps and rows opened, not yet counted in work[0]
    # (inline, not a function per step: the hot loop)
    while sizes:
        if work is not None:
            work[0] += steps * words
            work[2] += steps
            steps = 0
            if work[0] > work[1]:
                raise _OutOfWork
            if work[0] + _OP_WORDS * work[2] > work[3]:
                work[4] = 1  # (the cap: NOTE [ Repacking the rows with room ])
                raise _OutOfWork
        steps += 1
        big = sizes[-1]  # the largest document left opens the row
        kind = bisect_left(lens, big)
        cap = lens[kind] - big
        row = {big: 1}
        n = left[big] - 1
        if n:
            left[big] = n
        else:
            del left[big]
            sizes.pop()
            have ^= 1 << big
            mirror ^= 1 << top - big
        room = cap
        while room and sizes:  # the quick fill: exactly one or two documents, else as
            if room in left:  # many of the largest as leave a room the smallest one fits
                pick, k = room, 1
            else:
                least = sizes[0]
                pick = 0
                if 2 * least <= room <= 2 * sizes[-1]:
                    pairs = have & (mirror >> top - room)
                    if pairs:
                        j = (pairs & -pairs).bit_length() - 1
                        if 2 * j != room or left[j] > 1:
                            pick, k = j, 1
                if not pick:
                    i = bisect_right(sizes, room - least) - 1
                    if i < 0:
                        break
                    pick = sizes[i]
                    k = min(left[pick], (room - least) // pick)
            # (a pair's first document: the next step finds its partner)
            steps += 1
            row[pick] = row.get(pick, 0) + k
            room -= k * pick
            n = left[pick] - k
            if n:
                left[pick] = n
                continue
            del left[pick], sizes[bisect_left(sizes, pick)]
            have ^= 1 << pick
            mirror ^= 1 << top - pick
        if room:  # no quick fill: back into the pool, and the closest fill (as MBS)
            for s, k in row.items():
                k -= s == big
                if k:
                    n = left.get(s, 0)
                    if not n:
                        insort(sizes, s)
                        have |= 1 << s
                        mirror |= 1 << top - s
                    left[s] = n + k
            row = {big: 1}
            for s, k in _closest(left, sizes, cap, work):
                row[s] = row.get(s, 0) + k
            # the row's documents but the anchor are still to take, once more than `more`
            k = row[big]  # (min over the row's sizes, from the anchor's: exact for any count)
            more = (left.get(big, 0) - k + 1) // k
            for s, k in row.items():
                n = (left.get(s, 0) - (k - (s == big))) // k
                if n < more:
                    more = n
            use = [(s, more * k + k - (s == big)) for s, k in row.items()]
        else:  # the same rows again, while the documents last
            more = left.get(big, 0) // row[big]  # (as above, from the anchor's)
            for s, k in row.items():
                n = left.get(s, 0) // k
                if n < more:
                    more = n
            use = [(s, more * k) for s, k in row.items()] if more else []
        for s, k in use:
            if k:
                n = left[s] - k
                if n:
                    left[s] = n
                else:
                    del left[s], sizes[bisect_left(sizes, s)]
                    have ^= 1 << s
                    mirror ^= 1 << top - s
        kinds.append(kind)
        reps.append(more + 1)
        if len(row) == 1:
            items.append(big)
            mults.append(row[big])
        else:
            for s in sorted(row, reverse=True):
                items.append(s)
                mults.append(row[s])
        ends.append(len(items))
    if work is not None:
        work[0] += steps * words
        work[2] += steps
    return kinds, reps, items, mults, ends


def _closest(
    left: dict[int, int], sizes: list[int], cap: int, work: list[int] | None = None
) -> list[tuple[int, int]]:
    """The closest fill ``<= cap`` from ``left`` documents per size (``sizes``: those sizes,
    increasing), as :func:`_fill` finds it: ``[(size, documents), ...]``; ``work[0]`` counts
    its big-integer word operations (one shift-or of ``cap`` bits per chunk)."""
    mask = (1 << cap + 1) - 1
    done = mask >> 1  # (reach > done: the sum cap is reached)
    reach = 1
    snaps: list[int] = []
    chunks: list[tuple[int, int]] = []
    snap, chunk = snaps.append, chunks.append
    words = (cap >> 6) + 1
    # (the cap, within one fill: past `most` chunks at a size's start; none without work)
    most = (
        1 << 62
        if work is None
        else (work[3] - work[0] - _OP_WORDS * work[2]) // (words + _OP_WORDS)
    )
    n = 0  # (the chunks so far)
    for i in range(bisect_right(sizes, cap) - 1, -1, -1):
        if n > most and work is not None:
            work[0] += n * words
            work[2] += n
            work[4] = 1
            raise _OutOfWork
        s = sizes[i]
        m = left[s]
        if m == 1 or s + s > cap:  # (one chunk of one document: most sizes)
            snap(reach)
            chunk((s, 1))
            n += 1
            reach = (reach | reach << s) & mask
            if reach > done:
                break
            continue
        if m > cap // s:
            m = cap // s
        k = 1
        while m:  # binary chunks 1, 2, 4, ... (the last one the remainder)
            if k > m:
                k = m
            snap(reach)
            chunk((s, k))
            n += 1
            reach = (reach | reach << s * k) & mask
            if reach > done:
                break
            m -= k
            k <<= 1
        if reach > done:
            break
    if work is not None:
        work[0] += n * words
        work[2] += n
    # back from the last chunk: a chunk is taken where the sum left was not reached before it
    c = reach.bit_length() - 1
    out = []
    j = n
    while c:
        j -= 1
        if not snaps[j] >> c & 1:
            s, k = chunks[j]
            out.append((s, k))
            c -= s * k
    return out


def bfd_floor(sizes: np.ndarray, counts: np.ndarray, length: int) -> int | None:
    """A lower bound on best-fit decreasing's rows where no document is longer than
    ``length / 2`` (``None`` where one is), from its plan's first part, without making it
    (NOTE [ Rows of three where the thirds rise ]): ``sizes`` distinct, decreasing.

    The documents longer than ``L / 3`` come first, largest first, and pair up in that order
    (the second joins the first's row, the only one with room for it; the third opens a row,
    as the pair's room is below ``L / 3``, and so on); the others fill those rows' rooms, the
    ones that hold the shortest document at least, or new rows of ``L`` tokens at most.

    Example:
        >>> bfd_floor(np.array([5, 4, 3]), np.array([2, 1, 3]), 12)  # BFD: 5 5 | 4 3 3 | 3
        3
    """
    if 2 * int(sizes[0]) > length:
        return None
    n = int((-sizes).searchsorted(-(length // 3), side="left"))  # (longer than L / 3)
    big = sizes[:n].repeat(counts[:n])
    m = big.size
    rooms = np.concatenate(
        (length - big[0 : m - 1 : 2] - big[1:m:2], length - big[m - 1 :][: m % 2])
    )
    live = int(rooms[rooms >= sizes[-1]].sum())
    rest = int(np.dot(sizes[n:].astype(np.int64), counts[n:].astype(np.int64)))
    return (m + 1) // 2 + max(0, -(-(rest - live) // length))


def bfd_rows_three(vals: list[int], counts: list[int], length: int) -> int:
    """The rows of best-fit decreasing (per document, as :func:`best_fit`) where every size is
    in ``(length / 4, length]``, counted only (NOTE [ At most three documents a row ]): ``vals``
    decreasing, ``counts`` (>= 1) the documents of each.

    Example:
        >>> bfd_rows_three([5, 4, 3], [1, 2, 2], 12)  # 5 4 3 | 4 3
        2
        >>> bfd_rows_three([11, 5], [1, 3], 16)  # 11 5 | 5 5
        2
    """
    # the rooms of the rows that take one more document at most (of one long document, or of
    # two), increasing, each once; the rows of one document of at most L / 2 have the only
    # rooms of L / 2 or more, and one is open at most (the next such document joins it)
    rooms: list[int] = []
    rows_of: dict[int, int] = {}  # room -> rows with that room
    single = 0  # the document of the one row holding a single short document (0: none)
    rows = 0
    long = bisect_left(vals, -(length // 2), key=operator.neg)  # (longer than L / 2)
    for s, c in zip(vals[:long], counts[:long], strict=True):
        rows += c  # a row each (two share none)
        if 4 * (length - s) > length:  # (a room no document fits is none)
            rows_of[length - s] = c
            rooms.append(length - s)  # (increasing: the sizes decrease)
    for s, c in zip(vals[long:], counts[long:], strict=True):
        while c:
            j = bisect_left(rooms, s)
            if j < len(rooms):  # the tightest rows of two that hold s: a third document each
                room = rooms[j]
                n = rows_of[room]
                if c < n:
                    rows_of[room] = n - c
                    break
                c -= n
                del rows_of[room], rooms[j]
                continue
            if single:  # the single's row (its room, above L / 2, is the only one that holds s)
                room, single = length - single - s, 0
                c -= 1
                k = 1
            elif 3 * s <= length:  # new rows: s s, and a third s in the room that leaves
                q, rest = divmod(c, 3)
                rows += q + (rest > 0)
                single = s if rest == 1 else 0
                room, k, c = length - 2 * s, int(rest == 2), 0
            else:  # new rows: s s (the room left holds no s)
                q, rest = divmod(c, 2)
                rows += q + rest
                single = s if rest else 0
                room, k, c = length - 2 * s, q, 0
            if k:  # (a pair's room is at least every earlier pair's, not a long one's)
                had = rows_of.get(room)
                if had is None:
                    rows_of[room] = k
                    if not rooms or room > rooms[-1]:
                        rooms.append(room)
                    else:
                        insort(rooms, room)
                else:
                    rows_of[room] = had + k
    return rows


def three_rows(sizes: np.ndarray, counts: np.ndarray, length: int, below: int) -> Patterns | None:
    """Rows of at most three documents where every size is in ``(length / 4, length]`` (NOTE
    [ At most three documents a row ]) with fewer than ``below`` rows, or ``None`` when the fill
    finds none: ``sizes`` distinct, decreasing, ``counts`` the documents of each.

    Example:
        >>> p = three_rows(np.array([5, 4, 3]), np.array([1, 2, 2]), 12, 3)
        >>> p.num_rows, sorted(p.fill.tolist())
        (2, [9, 10])
        >>> three_rows(np.array([11, 5]), np.array([1, 5]), 16, 4).num_rows  # 11 5 | 5 5 5 | 5
        3
    """
    ids = np.arange(sizes.size - 1, -1, -1).repeat(counts[::-1])  # (size indices, by size)
    docs = sizes[ids]  # increasing
    n = int(docs.searchsorted(length // 2, side="right"))  # (at most L / 2)
    # a long document's row takes one short document at most: the long ones in turn, from the
    # most room, each take the longest short one left that fits (the most of them that can
    # be matched, and the longest, leaving the shortest for the rows of three)
    longs, every, k = ids[n:], ids, 0
    shared = longs  # (none)
    if longs.size:
        rooms = length - docs[n:]  # (decreasing)
        first = n - docs[:n].searchsorted(rooms, side="right")  # (the longest that fits,
        at = np.arange(rooms.size)  # from the longest short one down)
        took = np.maximum.accumulate(first - at) + at
        k = int(took.searchsorted(n))  # (the long ones that get one)
        shared = n - 1 - took[:k]
        short = np.ones(n, dtype=bool)
        short[shared] = False
        below -= longs.size
        ids, docs = ids[:n][short], docs[:n][short]
        n = ids.size
    # t triples take the 3t smallest documents (any triple's documents can be swapped for
    # smaller ones): the t largest of those anchor a row each, the 2t others pair up (smallest
    # with largest, else neighbours), and the pairs go, least tokens first, to the anchors,
    # largest first
    ends = docs.cumsum()[2::3] - length * np.arange(1, n // 3 + 1)
    fits = (ends <= 0).nonzero()[0]  # (3t documents of more than t rows' tokens: no t rows)
    hi = int(fits[-1]) + 1 if fits.size else 0
    lo = n - 2 * below + 2  # rows = ceil((n - t) / 2): fewer than `below` from lo triples on

    turned = False  # (a t that only the turned pairing fits: a plan version 7 did not make)

    def pairing(t: int) -> int:
        """How the 2t partners pair up so that each pair fits its anchor's room: 1 smallest
        with largest (pairs of about equal tokens, least first), 2 the smaller half with the
        larger in order (sums increasing), 3 neighbours (the fewest tokens for the largest
        anchors), 4 the smaller half with the larger turned by half its length (pair sums
        spread over half the partners' range, as the rooms are: it fits where the others do
        not); 0 none of these. 1-3 first, as in version 7 (its plans, digests and saved states
        stay), until a t that only 4 fits is met (``turned``); 4 alone from then on."""
        nonlocal turned
        rooms = length - docs[3 * t - 1 : 2 * t - 1 : -1]

        def four() -> bool:  # (the i-th smaller with the (i + h) mod t-th larger: 2 slices)
            h = t // 2
            sums = np.empty(t, dtype=docs.dtype)
            np.add(docs[: t - h], docs[t + h : 2 * t], out=sums[: t - h])
            np.add(docs[t - h : t], docs[t : t + h], out=sums[t - h :])
            sums.sort()
            return bool((sums <= rooms).all())

        if turned:  # (a plan of its own already: the others' fits no longer matter)
            return 4 if four() else 0
        sums = docs[:t] + docs[2 * t - 1 : t - 1 : -1]
        sums.sort()
        if (sums <= rooms).all():
            return 1
        if (docs[:t] + docs[t : 2 * t] <= rooms).all():
            return 2
        if (docs[: 2 * t : 2] + docs[1 : 2 * t : 2] <= rooms).all():
            return 3
        if not turned and four():
            turned = True
            return 4
        return 0

    if lo > hi:
        return None
    lo = max(lo, 0)
    how = pairing(lo)
    if not how:
        return None
    while lo < hi:  # (the largest t whose fill fits, if fitting is monotone in t)
        mid = (lo + hi + 1) // 2
        fit = pairing(mid)
        if fit:
            lo, how = mid, fit
        else:
            hi = mid - 1
    t = lo
    small = np.arange(t)
    if how == 4:
        large = t + (small + t // 2) % t
        order = (docs[small] + docs[large]).argsort(kind="stable")
        small, large = small[order], large[order]
    elif how == 1:
        large = 2 * t - 1 - small
        order = (docs[:t] + docs[2 * t - 1 : t - 1 : -1]).argsort(kind="stable")
        small, large = small[order], large[order]
    elif how == 2:
        large = small + t
    else:
        small *= 2
        large = small + 1
    rest = ids[3 * t :]  # the others, two a row (each at most length / 2), the last alone
    odd = rest.size % 2
    m = (rest.size - odd) // 2
    none = sizes.size  # (an empty slot: after every size index)
    rows = np.full((t + m + odd + longs.size, 3), none, dtype=np.int64)
    rows[:t, 0] = ids[3 * t - 1 : 2 * t - 1 : -1]  # anchors, largest first
    rows[:t, 1] = ids[large]
    rows[:t, 2] = ids[small]
    rows[t : t + m, 0] = rest[1 : 2 * m : 2]
    rows[t : t + m, 1] = rest[0 : 2 * m : 2]
    if odd:
        rows[t + m, 0] = rest[-1]
    rows[t + m + odd :, 0] = longs
    rows[t + m + odd : t + m + odd + k, 1] = every[shared]
    return _grouped(sizes, rows, turned=turned)


def filled_rows(sizes: np.ndarray, counts: np.ndarray, length: int, most: int) -> Patterns | None:
    """Rows that the documents fill exactly, where they can, and the rest by best-fit
    decreasing with its rows with room repacked (NOTE [ Full rows of any count ]): at most
    ``most`` rows, or ``None``. ``sizes`` distinct, decreasing, each at most ``length / 2``;
    ``counts`` the documents of each.

    Example:
        >>> p = filled_rows(np.array([6, 5, 4, 3, 2]), np.array([2, 2, 2, 2, 2]), 20, 3)
        >>> p.num_rows, sorted(p.fill.tolist())
        (2, [20, 20])
    """
    unit = max(1, length // _FILL_UNITS)  # (documents in units, rounded up: rows stay valid)
    top = length // unit
    units = -(-np.asarray(sizes, dtype=np.int64) // unit)
    cnt = np.bincount(units, weights=counts, minlength=top + 1).astype(np.int64)
    values = np.arange(top, -1, -1)  # (the pools are decreasing)
    found: list[np.ndarray] = []
    for turn in range(_FILL_ROUNDS):
        for width in (3, 4):
            pool = values.repeat(cnt[::-1])
            m = pool.size
            k = m // width
            if not k:
                continue
            # the k largest anchor a row each, the k smallest (and the k above them) join
            # them, turned by another shift every round, and the last document, from the
            # others, must fill the row exactly: as many rows for a length as documents of it
            parts = [pool[:k]]
            for i in range(1, width - 1):
                low = pool[m - i * k : m - (i - 1) * k]
                at = turn * _FILL_TURN * i % k
                parts.append(np.concatenate((low[k - at :], low[: k - at])) if at else low)
            need = top - parts[0]  # (at most top: the units are positive)
            for q in parts[1:]:
                need -= q
            np.maximum(need, 0, out=need)
            have = np.bincount(pool[k : m - (width - 2) * k], minlength=top + 1)
            order = need.argsort(kind="stable")
            ordered = need[order]
            rank = np.arange(k) - ordered.searchsorted(ordered, side="left")
            take = order[rank < have[ordered]]
            take = take[need[take] > 0]
            if not take.size:
                continue
            cols = [q[take] for q in parts]
            cols.append(need[take])
            flat = np.concatenate(cols)  # (the rows' columns, one after the other)
            found.append(flat.reshape(width, take.size).T)
            cnt -= np.bincount(flat, minlength=top + 1)
    made = sum(r.shape[0] for r in found)
    left = cnt.nonzero()[0][::-1]
    if left.size:  # the others: best-fit decreasing, its rows with room repacked (counted)
        docs = int(cnt.sum())
        fit = best_fit(left, cnt[left], (top,))
        aim = (most - made) * top
        if (made + fit.num_rows - most) * _FILL_GAP > most:
            return None  # (too far from it for the repack: the search of BFD's rows decides)
        if fit.num_rows * top > aim:
            words = (top >> 6) + 1
            work = [0, _REPACK_WORK * docs * (words + 1), 0, 1 << 62, 0]
            fit = repack(fit, (top,), [aim], lambda x: x <= aim, docs // _DOCS_PER_PATTERN, work)
        if made + fit.num_rows > most:
            return None
        widths = fit.offsets[1:] - fit.offsets[:-1]
        per_row = np.add.reduceat(fit.mult, fit.offsets[:-1])
        item = fit.items.repeat(fit.mult)  # (each document of each pattern)
        pattern = np.arange(fit.reps.size).repeat(widths).repeat(fit.mult)
        place = np.arange(item.size) - (per_row.cumsum() - per_row).repeat(per_row)
        rest = np.zeros((fit.reps.size, int(per_row.max())), dtype=np.int64)
        rest[pattern, place] = left[item]
        found.append(rest.repeat(fit.reps, axis=0))
    elif made > most:
        return None
    # the rows in units, back to documents: the slots of each unit take that unit's documents
    grid = np.zeros((sum(r.shape[0] for r in found), max(r.shape[1] for r in found)), np.int64)
    at = 0
    for r in found:  # (each round's rows, and the others', padded with empty slots)
        grid[at : at + r.shape[0], : r.shape[1]] = r
        at += r.shape[0]
    flat = grid.ravel()
    slots = flat.nonzero()[0]
    slots = slots[flat[slots].argsort(kind="stable")]
    ids = np.arange(sizes.size - 1, -1, -1).repeat(counts[::-1])  # (by unit, increasing)
    out = np.full(flat.size, sizes.size, dtype=np.int64)  # (sizes.size: an empty slot)
    out[slots] = ids
    rows = out.reshape(grid.shape)
    rows.sort(axis=1)
    return _grouped(sizes, rows, tripled=False, filled=True)


def _grouped(
    sizes: np.ndarray,
    rows: np.ndarray,
    kinds: np.ndarray | None = None,
    *,
    tripled: bool = True,
    filled: bool = False,
    turned: bool = False,
) -> Patterns:
    """Patterns of rows ``(R, w)`` of size indices, each row's increasing (largest size
    first), ``sizes.size`` in an empty slot, of row length ``kinds`` (``(R,)``, 0 if
    ``None``): equal rows one pattern, with the flags given (:class:`Patterns`)."""
    order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(rows.shape[0])
    if kinds is not None:  # (with one row length, the order is the rows')
        order = order[kinds[order].argsort(kind="stable")]
    rows = rows[order]
    n = rows.shape[0]
    new = np.ones(n + 1, dtype=bool)  # (and a last start past the rows: the bounds)
    new[1:n] = (rows[1:] != rows[:-1]).any(axis=1)
    if kinds is not None:
        kinds = kinds[order]
        new[1:n] |= kinds[1:] != kinds[:-1]
    bounds = new.nonzero()[0]
    starts = bounds[:-1]
    reps = bounds[1:] - starts
    rows = rows[starts]
    kinds = np.zeros(starts.size, dtype=np.int64) if kinds is None else kinds[starts]
    flat = rows.ravel()
    where = np.arange(rows.shape[0]).repeat(rows.shape[1])
    keep = flat < sizes.size
    flat, where = flat[keep], where[keep]
    first = np.ones(flat.size + 1, dtype=bool)  # (and past the last item: the bounds)
    first[1 : flat.size] = (flat[1:] != flat[:-1]) | (where[1:] != where[:-1])
    ends = first.nonzero()[0]
    at = ends[:-1]
    offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.bincount(where[at], minlength=rows.shape[0]).cumsum(out=offsets[1:])
    return Patterns(
        sizes=np.asarray(sizes, dtype=np.int64),
        kind=kinds.astype(np.int64),
        reps=reps.astype(np.int64),
        offsets=offsets,
        items=flat[at],
        mult=(ends[1:] - at).astype(np.int64),
        tripled=tripled,
        turned=turned,
        filled=filled,
    )


def min_bin_slack(sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]) -> Patterns:
    """Minimum Bin Slack with pattern repetition (NOTE [ Packing a length histogram ]).

    Args:
        sizes: distinct sizes, strictly decreasing, each ``1 <= s <= max(row_lengths)``.
        counts: documents of each size (``>= 1``).
        row_lengths: the planned row lengths, strictly increasing.

    Example:
        >>> p = min_bin_slack(np.array([5, 3, 2]), np.array([2, 2, 2]), (8,))
        >>> p.num_rows, p.fill.tolist(), p.reps.tolist()
        (3, [8, 4], [2, 1])
    """
    vals = np.asarray(sizes, dtype=np.int64)
    left = np.asarray(counts, dtype=np.int64).copy()
    lens = [int(x) for x in row_lengths]
    vlist = vals.tolist()
    kinds: list[int] = []
    reps: list[int] = []
    offsets = [0]
    items: list[int] = []
    mults: list[int] = []
    top = 0  # index of the largest remaining size
    n_sizes = vals.size
    while True:
        while top < n_sizes and left[top] == 0:
            top += 1
        if top == n_sizes:
            break
        smax = vlist[top]
        kind = bisect_left(lens, smax)
        cap = lens[kind] - smax
        pattern = {top: 1}
        if cap > 0:
            _, chosen = _fill(vals, left, top, cap)
            for i, k in chosen:
                pattern[i] = pattern.get(i, 0) + k
        # (a few items: plain Python, no small numpy arrays)
        ordered = sorted(pattern.items())
        r = min(int(left[i]) // k for i, k in ordered)
        for i, k in ordered:
            left[i] -= r * k
            items.append(i)
            mults.append(k)
        kinds.append(kind)
        reps.append(r)
        offsets.append(len(items))
    return Patterns(
        sizes=vals,
        kind=np.asarray(kinds, dtype=np.int64),
        reps=np.asarray(reps, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        items=np.asarray(items, dtype=np.int64),
        mult=np.asarray(mults, dtype=np.int64),
    )


def _fill(
    vals: np.ndarray, left: np.ndarray, top: int, cap: int
) -> tuple[int, list[tuple[int, int]]]:
    """The closest fill ``<= cap`` from the remaining documents (one ``top`` is already used).

    Returns ``(tokens filled, [(size index, count), ...])``.
    """
    avail = left.copy()
    avail[top] -= 1
    cand = ((vals <= cap) & (avail > 0)).nonzero()[0]
    if cand.size == 0:
        return 0, []
    m = np.minimum(avail[cand], cap // vals[cand])
    # binary chunks 1, 2, 4, ... (the last one the remainder): any count 0..m is a sum of chunks;
    # one row of chunks per candidate, read row after row: largest size first, then by chunk
    p = 1 << np.arange(int(m.max()).bit_length())
    take = np.minimum(p, m[:, None] - (p - 1))
    row, col = (take > 0).nonzero()
    chunk_id, chunk_k = cand[row], take[row, col]
    weights = (vals[chunk_id] * chunk_k).tolist()
    full = (1 << (cap + 1)) - 1
    reach = 1
    snaps = []
    for w in weights:
        snaps.append(reach)
        reach = (reach | (reach << w)) & full
        if reach >> cap:
            break
    best = reach.bit_length() - 1
    chosen = []
    c = best
    ids_l, ks_l = chunk_id.tolist(), chunk_k.tolist()
    for j in range(len(snaps) - 1, -1, -1):
        if c == 0:
            break
        if not (snaps[j] >> c) & 1:
            chosen.append((ids_l[j], ks_l[j]))
            c -= weights[j]
    return best, chosen


def lower_bound(sizes: np.ndarray, counts: np.ndarray, row_length: int) -> tuple[int, int]:
    """``(L1, L2)`` lower bounds on the rows of one row length (NOTE [ Lower bounds ]).

    Example:
        >>> lower_bound(np.array([6, 5, 2]), np.array([3, 1, 2]), 10)
        (3, 4)
    """
    n = int(row_length)
    s, c = _exact(sizes, counts, n)
    total = int((s * c).sum())
    l1 = -(-total // n)
    # counts and tokens of the sizes below x from prefix sums over the sorted sizes (exact
    # integers; no table of n + 1 entries: about 2 s per call at the 2**24 cap)
    if s.size > 1 and s[0] > s[-1]:  # (solve passes them longest first)
        s, c = s[::-1], c[::-1]
    order = None if s.size < 2 or bool((s[1:] >= s[:-1]).all()) else s.argsort(kind="stable")
    v, w = (s, c) if order is None else (s[order], c[order])
    ccum, tcum = np.zeros(v.size + 1, v.dtype), np.zeros(v.size + 1, v.dtype)
    w.cumsum(out=ccum[1:])
    (v * w).cumsum(out=tcum[1:])
    half = n // 2
    i_all, i_half = v.searchsorted([n + 1, half + 1])
    big = ccum[i_all] - ccum[i_half]
    # J1 u J2 = {s > n/2}; J2 = {n/2 < s <= n - a}; J3 = {a <= s <= n/2}. Between two sizes
    # <= n/2, J3 is fixed and J2 only shrinks as a grows, so the bound is largest at a = one of
    # these sizes (above the largest, J3 is empty and adds nothing)
    a = v[:i_half]
    i_a = v.searchsorted(a)  # (ascending needles: a cheap search)
    i_j2 = v.searchsorted((n + 1 - a)[::-1])[::-1]
    # J3's tokens past the room J2's rows leave (n each, less their own tokens): the tokens
    # of J3 u J2 less n per J2 row
    over = tcum[i_j2] - tcum[i_a] - (ccum[i_j2] - ccum[i_half]) * n
    l2 = int(big + max(0, -(-int(over.max()) // n) if a.size else 0))
    return l1, max(l1, l2)


def _exact(sizes: np.ndarray, counts: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``sizes`` and ``counts`` as int64 arrays, or as arrays of Python ints where a sum of
    tokens (or of ``top`` per document) could pass int64: exact either way."""
    s = np.asarray(sizes, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    if s.size and int(c.max()) * s.size * max(top, int(s.max())) >= 1 << 62:
        return s.astype(object), c.astype(object)
    return s, c


def thirds_bound(sizes: np.ndarray, counts: np.ndarray, row_length: int) -> int:
    """A lower bound on the rows of one row length from a dual feasible function (NOTE
    [ Lower bounds ], the thirds): ``ceil(max over beta >= 1 of sum min(1/2, (1 - beta) / 3 +
    beta * s / L))`` over the documents ``s``, exact in integers.

    Example:
        >>> thirds_bound(np.array([9, 6]), np.array([2, 4]), 20)  # (L1 = 2; 9 9 | 6 6 | 6 6)
        3
    """
    s = np.asarray(sizes, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    n = int(row_length)
    if s.size > 1 and s[0] > s[-1]:  # (solve passes them longest first)
        s, c = s[::-1], c[::-1]
    # d f / d beta = s / L - 1/3 for a document below its cap: the sum over the documents
    # below their caps falls as beta grows (a document of s in (L/3, L/2] reaches 1/2 at
    # beta = L / (6 s - 2 L), the longer first; from L / 2 on at beta <= 1): the largest is at
    # the cap of the longest t at which that sum, of the documents shorter than t, is <= 0
    # (|3 s - L| <= 2 L and |6 L q f(s)| <= 6 L^2 a document: past int64 only with that many
    # documents of that many tokens, then in Python ints, exact)
    w, m = (s.astype(object), c.astype(object)) if int(c.sum()) * 6 * n * n >= 1 << 62 else (s, c)
    slope = (m * (3 * w - n)).cumsum()  # (x 3L: of the documents up to each size)
    i_third, i_half = s.searchsorted([n // 3 + 1, (n + 1) // 2])  # (s > L/3; s >= L/2)
    if i_half == 0 or slope[i_half - 1] <= 0:
        return 0  # (largest at beta = 1: f(s) <= s / L, no more than ceil(tokens / L))
    below = np.concatenate([[0], slope])[i_third:i_half]  # (of the documents shorter than t)
    at = int(np.flatnonzero(below <= 0)[-1]) + i_third if (below <= 0).any() else i_third
    p, q = n, 6 * int(s[at]) - 2 * n  # beta = p / q = L / (6 t - 2 L) >= 1 (t = s[at] > L/3)
    g = np.minimum(3 * n * q, 2 * (q - p) * n + 6 * p * w)  # (6 L q f(s))
    total = int((g * m).sum())
    return -(-total // (6 * n * q))


def capacity_bound(
    sizes: np.ndarray, counts: np.ndarray, row_lengths: tuple[int, ...]
) -> tuple[int, int]:
    """``(C1, C2)``: lower bounds on the row tokens (rows times their row length) of any packing
    into ``row_lengths``, from the tokens alone and with the rows long documents need (NOTE
    [ Lower bounds ], several row lengths). With one row length ``L``: ``(L1 * L, L2 * L)``.

    Example:
        >>> capacity_bound(np.array([6, 5, 2]), np.array([3, 1, 2]), (10,))
        (30, 40)
        >>> capacity_bound(np.array([9, 3]), np.array([2, 2]), (4, 10))  # 9s: a 10-row each
        (24, 24)
    """
    top = int(row_lengths[-1])
    s, c = _exact(sizes, counts, top)
    out = []
    for need_rows in (False, True):
        rows = cap = Fraction(0)
        for i in range(len(row_lengths) - 1, -1, -1):  # from the longest rows down
            length = int(row_lengths[i])
            mine = s > (row_lengths[i - 1] if i else 0)  # the documents that need >= L_i
            tokens = int(np.dot(s[mine], c[mine]))
            least = lower_bound(s[mine], c[mine], top)[1] if need_rows and mine.any() else 0
            more = max(Fraction(0), least - rows, (tokens - cap) / length)
            if i == len(row_lengths) - 1:  # the longest rows: a whole number of them
                more = Fraction(math.ceil(more))
            rows += more
            cap += more * length
        out.append(math.ceil(cap))
    return out[0], out[1]
