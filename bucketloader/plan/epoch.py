"""The epoch plan: a pure, vectorised function from (spec, seed, epoch, ranks) to batches.

NOTE [ Epoch plan ]
Every rank computes the same *global* plan from ``(seed, epoch)`` and takes its slot, so no
communication is needed:

1. Within-cell shuffle: samples sorted by cell once per spec (``BucketSpec.by_cell``); each cell's
   order is a keyed permutation drawn per epoch and evaluated only at the positions this rank
   takes (NOTE [ Counter-based shuffle ] in :mod:`bucketloader.plan.permute`, plan version 2).
2. Per cell ``c`` (``n_c`` samples, batch size ``B_c``, ``R`` replicas) a *global step* is ``R``
   batches of the cell, one per rank. There are ``n_c // (R·B_c)`` full steps; the ``q`` samples
   left form one last step according to ``last_batch`` (below), or are dropped.
3. Steps are interleaved across cells so that cells drain evenly: step ``j`` of a cell with
   ``S_c`` steps gets the key ``(j + u) / S_c`` (``u`` uniform; ``0.5`` without shuffle) and the
   steps are sorted by key. At any point each cell has used about the same fraction of its steps.
4. Rank ``r`` takes slot ``r`` of each step, so at every step all ranks get a batch of the same
   shape, and every rank gets the same number of batches (``sum_c S_c``), computable without
   building the plan.

NOTE [ last_batch and replicas ]  (``q = n_c mod (R·B_c)`` samples left in a cell)

- ``"pad"``: the ``q`` samples are split as evenly as possible over the ``R`` batches of one last
  step; each keeps the full shape ``(B_c, ...)`` and the collator pads rows with masked padding.
  Nothing is dropped; when ``q < R`` the ranks without a sample repeat one (``R − q`` repeats).
- ``"fill"``: one last step of ``R`` full batches, topped up with ``R·B_c − q`` repeats of samples
  of the same cell (taken in the epoch's shuffled order, so random repeats); a cell whose step
  would repeat all of its samples takes shorter samples instead (NOTE [ Filling a small
  bucket ]).
- ``"drop"``: the ``q`` samples are dropped this epoch (a different random set each epoch).
- ``"keep"``: one last step of ``R`` smaller batches of ``ceil(q / R)`` samples (an extra shape per
  cell, listed in :attr:`ShapeTable.shapes`); ``R·ceil(q/R) − q <= R − 1`` samples repeat.

With ``R = 1`` this is the single-process rule: the partial batch is padded, filled, dropped or
kept. Repeats are taken cyclically from the start of the cell's (shuffled) order (NOTE [ What
fill repeats ]). A sampler with a token budget and ``"pad"`` plans its steps with a promotion
schedule instead (NOTE [ Promotion of leftovers ] in :mod:`bucketloader.plan.promote`): its
batches are dealt evenly, and a cell's spare rows hold samples of the shorter cells it covers.

NOTE [ What fill repeats ]
``"fill"`` repeats ``R·B_c − q`` samples of a cell (rows of a row length, for
:class:`~bucketloader.pack.PackSampler`) so that its last step is full. A cell with at least one
full step has ``n_c >= R·B_c``: its repeats are a random part of it, each at most once more, a
different part each epoch, as torch's ``DistributedSampler(drop_last=False)`` wraps around to the
start of its shuffled list (it repeats fewer than ``R`` samples in all). A cell with *fewer*
samples than one step (``n_c < R·B_c``) repeats ``R·B_c − n_c`` of them; at ``n_c <= R·B_c / 2``
all of them, up to ``ceil(R·B_c / n_c)`` times, every epoch; such a cell is usually the longest
one (the tail of the lengths), so the model trained on its longest samples several times an
epoch. Both samplers now fill such a step with shorter rows or samples drawn at random instead
(NOTE [ Filling a small row length ] in :mod:`bucketloader.pack.epoch`, NOTE [ Filling a small
bucket ] below); only the shortest cell of a group (no shorter sample to take) still repeats its
own. Measured before that (s22-fill, ``benchmarks/fill_repeats.py``, per epoch, all ranks):
BucketSampler on GSM8K, 8 buckets of 32: 111 repeats on 1 rank (each once), 1,487 (19.9%) on
8, the 50 samples of the 336-token bucket up to 6 times, the same ones every epoch;
LibriSpeech: 1,413 on 8, up to 5 times (now: the same counts, none more than twice); under
``max_tokens`` (even batches: NOTE [ Even batches ]) none of these sets repeats a sample more
than once. PackSampler on LibriSpeech
frames at ``(1024, 2048)``, 8 rows, repeated its one row of 2,048 up to 8 times on 1 rank, 64
on 8 (now once on 1 rank, 8 times on 8: one per rank);
torch's ``DistributedSampler`` repeats 5-7 samples over 8 ranks. Both samplers therefore warn
(one ``UserWarning``, :func:`~bucketloader.plan.report.warn_fill_repeats`) when the repeats
pass 5% of the samples or some sample is trained 3 times or more an epoch, with the count, the
small cells and the way out (``"pad"``, or smaller batches); ``report().totals["repeated"]``
counts every epoch exactly. A few random repeats, each once (every configuration measured on 1
rank without a small cell), stay silent.

NOTE [ Filling a small bucket ]
Under ``"fill"`` a cell whose step would repeat every one of its samples (no full step and
``q <= R·B / 2``: usually the longest cell, the tail of the lengths) repeated them cyclically, up
to ``ceil(R·B / q)`` times an epoch, the same longest samples every epoch: GSM8K, 8 buckets of
32 on 8 ranks, the 50 samples of the 336-token bucket up to 6 times; LibriSpeech (wav2vec2
frames) 8x32 up to 5; Common Voice 16x64 up to 9 (s22-fill). Now (BucketSampler's
``plan_digest`` gains ``/fill=2``), as PackSampler does for a small row length:

* the ``q`` samples are split over the ranks as ``"pad"`` splits a last step (``q // R`` or
  ``q // R + 1`` each, first in the batch; a rank that would get none repeats one), so every
  batch starts with a sample only that cell's shape holds, and the collator's target (the first
  sample's cell, when it covers the batch: :meth:`ShapeTable.target
  <bucketloader.plan.ShapeTable.target>`, ``promoted`` set in the sampler's table) is that
  cell's shape on every rank;
* the rest of each batch is samples of the cells it *covers* (the same group, every padded
  length at most its own: for two inputs a sample fits only if it is covered in both), drawn
  at random from ``SeedSequence([seed, epoch])``'s third child (the first two, hence the
  shuffles and the interleave, unchanged), the same draw on every rank, smallest cell first,
  each taking those samples the epoch repeats least so far (not those another cell's wrapped
  last step or an earlier draw repeats, while others are left: :func:`fill_draws`).

A cell with more than half a step repeats a random part of itself once, as any last step does,
and keeps doing so (no padding to pay). Steps, shapes, ``len()`` and the repeats' count
(``R·B − q`` per such cell) are unchanged; ``report()`` counts the filling samples as repeats
and their padding to the longer shape. Accumulation groups, weighted epochs and
``WeightedBucketSampler``'s draws: below (``fill_shorter=False`` repeats the cell's own samples
as before). Measured
(``benchmarks/fill_repeats.py``, 8 ranks, epochs 0-3), the most times one sample is trained in
an epoch: GSM8K 8x32 6 -> 2, LibriSpeech 8x32 5 -> 2, Common Voice 16x64 9 -> 2 (the same
repeat counts: 1,487, 1,413, 3,211); unchanged on 1 rank and under ``max_tokens`` (even
batches leave no such cell). The price is the shorter samples' padding to the longer shape,
``report().padding``: GSM8K 12.9% -> 16.9% (``"pad"``: 43.3%), LibriSpeech 7.1% -> 7.4%
(``"pad"``: 11.9%), Common Voice 5.5% -> 6.7% (``"pad"``: 13.6%).

Accumulation groups (``accumulate=k``, s24-accfill; NOTE [ Accumulation groups ] in
:mod:`bucketloader.plan.accumulate`) round a cell's ``S`` steps up to ``ceil(S / k)·k``, whose
``T = steps·R·B`` slots all wrapped round its ``n`` samples: GSM8K 8x32 on 8 ranks,
``accumulate=4``, the 336-token bucket's 50 samples in 4 steps of 256, up to 21 times an epoch;
LibriSpeech 8x32 ``accumulate=4`` 19; Common Voice 16x64 ``accumulate=2`` 17. The same rule now
covers them (:func:`fill_pools` with ``accumulate``; ``plan_digest`` gains ``/fill=2`` there,
as no accumulating sampler had it): a cell with ``2·n <= T`` splits its samples over its
``steps·R`` batches (batch ``j·R + r`` of step ``j``, ``own_slots``), one first in every batch
(a batch without one repeats one: up to ``ceil(steps·R / n)`` times), and the rest is drawn
from its pool *and then its own samples*, levelled (:func:`_levelled`: the least repeated
first, and a sample not drawn again while others catch up), among equals the samples of the
longest covered cell first, then the next, its own last (:func:`_closest_first`: the least
padding; at random within a cell). Its own samples join because a pool can be smaller than
``T`` (a tiny shorter cell): drawn from the pool alone, the cyclic pass of
:func:`_least_repeated` put 194 appearances on one sample of a 25-sample set where the old wrap
had 144 (random small sets of 20-400 samples, ``accumulate`` 2 and 4: worse than the old wrap
in 18 and 29 of 150 sets; levelled with its own samples, 94 and 102 better, one two-input set
worse by one appearance, 8 against 7; s24-accfill ``vs_main.py``). ``accumulate=1`` keeps the
``/fill=2`` draws exactly. Measured (``benchmarks/fill_repeats.py``, 8 ranks), the most times
one sample is trained an epoch: GSM8K 8x32 ``accumulate=4`` 21 -> 2, LibriSpeech 19 -> 2,
Common Voice 17 -> 2, GSM8K ``max_tokens=8192`` ``accumulate=4`` 5 -> 3 (its shortest bucket's
own groups: 1,627 samples in 3,264 slots); the repeat counts unchanged. The price is padding
(epoch 0, ``report().padding``, before -> after; drawn from the whole pool at random instead of
the closest cells first; ``"pad"``): GSM8K 15.6% -> 28.9% (36.7%; 34.2%), LibriSpeech 8.5% ->
8.8% (9.5%; 12.9%), Common Voice 6.2% -> 7.3% (8.7%; 13.7%), GSM8K ``max_tokens`` 12.7% ->
18.0% (23.5%; 13.7%): up to ``k`` steps of shorter samples at the longest shape. And the
closest cells fill every epoch: samples repeated in each of epochs 0-3, GSM8K 1,064 (the old
wrap), 3,351 (at random from the whole pool: 1,737), of 7,473, each at most twice an epoch.
Under ``"pad"`` the extra steps still repeat the cell's own samples (GSM8K 8x32: up to 17
times).

Weighted epochs (NOTE [ Weighted epochs ], s24-accfill) are passes over each dataset, each a
plain plan of it, so each pass fills its small cells as a plain epoch does (:func:`_fill_runs`:
the pass's order, its draws from ``SeedSequence([seed, pass, MIX, group])``'s third child, so a
pass split over two epochs draws alike in both); ``plan_digest`` gains ``/fill=2`` there too.
``WeightedBucketSampler`` fills its draws' small cells the same way (the draws per cell are the
same every epoch, so are the filled cells; the least repeated are the least repeated draws).
Measured (s24-accfill ``weighted.py``: the data as two datasets, every third sample in the
first; WeightedBucketSampler with weight 2 on every third sample), the most times one sample
is trained an epoch on 8 ranks, before -> after: GSM8K 8x32 weights 2:1 24 -> 6, 1:1 16 -> 5;
LibriSpeech 8x32 8 -> 5, 8 -> 4; Common Voice 16x64 42 -> 6, 28 -> 4; WeightedBucketSampler
GSM8K 25 -> 12, LibriSpeech 19 -> 10, Common Voice 56 -> 14. On 1 rank unchanged (4-5 weighted,
7-9 drawn: an up-weighted dataset's passes, draws with replacement). The padding price
(``report().padding``, epoch 0, 8 ranks; ``weighted_padding.py``), weights 2:1 / drawn, before
-> after (``"pad"``): GSM8K 13.3% -> 24.0% / 13.2% -> 16.9% (51.6% / 43.4%), LibriSpeech 6.9% ->
7.2% / 7.1% -> 7.4% (15.9% / 11.9%), Common Voice 5.3% -> 8.9% / 5.4% -> 6.7% (24.1% / 14.4%).

NOTE [ Weighted epochs ]  (``weights``: one per group, i.e. per dataset of a ``GroupedDataset``)
Each group ``g`` has its *natural* global steps per pass over its data, ``S_g`` (the sum of its
cells' steps above). An epoch keeps the unweighted length, ``T = sum_g S_g`` global steps, and
gives group ``g`` the share ``n_g`` of them proportional to its weight (largest-remainder
rounding, ties to the lower group index, so ``sum_g n_g == T`` exactly). Group ``g``'s batches
come from an endless sequence of passes over its data, pass ``p`` being a natural plan of the
group alone (within-cell shuffle and cell interleave from
``SeedSequence([seed, p, TAG, g])``); epoch ``e`` takes that sequence's steps
``e·n_g .. (e+1)·n_g - 1``. So a down-weighted group (``n_g < S_g``) sees a different part of
its data each epoch and all of it every ``S_g / n_g`` epochs; an up-weighted one repeats whole,
reshuffled passes (``n_g / S_g`` of them per epoch). Every step is still ``R`` batches of one
cell, so ranks stay in step. The groups' steps are interleaved like cells
(``(t + u) / n_g`` keys from ``SeedSequence([seed, epoch, TAG])``). Under ``max_tokens`` every
batch holds about the same number of tokens, so the weights are token shares (an LLM data
mixture); under ``batch_size`` they are sample shares (Lhotse's ``mux``). Resuming recomputes the
epoch from ``(seed, epoch)`` like any other plan: O(steps of the epoch).

NOTE [ Longest batch first ]
With ``longest_first=True`` the epoch's first step is a full batch of its largest cell (largest
padded size, then most rows: the step most likely to run out of memory), moved forward from its
place in the interleave; the order of the other steps is unchanged. As in ``transformers``'
``LengthGroupedSampler``, an out-of-memory shows at step 0 instead of hours in. Every rank moves
the same step, so shapes stay in sync.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bucketloader._validation import MAX_REPLICAS, check_bool, check_int, checks_options
from bucketloader.plan.accumulate import grouped_steps, interleave_groups, longest_group_first
from bucketloader.plan.budget import size_values
from bucketloader.plan.permute import ShuffledOrder, cell_shuffles
from bucketloader.plan.promote import Promotion, deal, interleave_steps, promoted_order
from bucketloader.plan.spec import BucketSpec

#: Version of the epoch plan: 2 shuffles each cell with a keyed permutation evaluated only at a
#: rank's positions (NOTE [ Counter-based shuffle ] in :mod:`bucketloader.plan.permute`); 1 ran
#: numpy's Fisher-Yates over every cell. Samplers put it in their state's ``plan_digest``.
PLAN_VERSION = 2
#: Samples gathered per chunk when an epoch's batches are materialised.
_GATHER = 1 << 20
#: Mixed into the seeds of weighted epochs ("mix"), so they never alias the unweighted plan's.
_MIX = 0x6D6978


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """One rank's batches for one epoch, as flat arrays.

    Attributes:
        indices: sample indices of all batches, concatenated.
        offsets: batch ``i`` is ``indices[offsets[i]:offsets[i + 1]]``.
        cells: cell id of every batch.
        partial: whether each batch is its cell's last-step batch (smaller under ``"keep"``).

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> plan = plan_epoch(spec, shuffle=False)  # an EpochPlan
        >>> plan.indices.tolist(), plan.offsets.tolist(), plan.cells.tolist()
        ([2, 3, 0, 1, 4], [0, 2, 4, 5], [1, 0, 1])
        >>> len(plan), plan.batch(2), plan.partial.tolist()
        (3, [4], [False, False, True])
    """

    indices: np.ndarray
    offsets: np.ndarray
    cells: np.ndarray
    partial: np.ndarray

    def __len__(self) -> int:
        return int(self.cells.size)

    def batch(self, i: int) -> list[int]:
        """Sample indices of batch ``i``."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"batch index {i} is out of range for an epoch of {len(self)} batches")
        i %= len(self)
        return self.indices[self.offsets[i] : self.offsets[i + 1]].tolist()


@checks_options
def plan_epoch(
    spec: BucketSpec,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    num_replicas: int = 1,
    rank: int = 0,
    weights: Any = None,
    longest_first: bool = False,
    accumulate: int = 1,
    promotion: Promotion | None = None,
    fill_shorter: bool = True,
) -> EpochPlan:
    """Rank ``rank``'s batches for ``epoch`` (see NOTE [ Epoch plan ] in this module).

    Pure and deterministic in its arguments; randomness comes only from
    ``numpy.random.SeedSequence([seed, epoch])`` (and, with ``weights``, per-group passes: NOTE
    [ Weighted epochs ]). ``longest_first`` puts a batch of the largest cell first (NOTE
    [ Longest batch first ]). ``accumulate=k`` plans groups of ``k`` consecutive steps of one
    cell (NOTE [ Accumulation groups ] in :mod:`bucketloader.plan.accumulate`). ``promotion``
    (from :func:`~bucketloader.plan.promote.promote`) batches leftovers in longer cells (NOTE
    [ Promotion of leftovers ] in :mod:`bucketloader.plan.promote`). Under ``last_batch="fill"``
    a cell with at most half a step of samples fills its step with shorter samples (NOTE
    [ Filling a small bucket ]; accumulation groups and weighted epochs too);
    ``fill_shorter=False`` repeats its own samples instead, as before.

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> plan = plan_epoch(spec, shuffle=False)
        >>> [plan.batch(i) for i in range(len(plan))]
        [[2, 3], [0, 1], [4]]
        >>> spec = BucketSpec.build([3, 4, 4, 3, 9, 10], num_buckets=2, batch_size=2)
        >>> [plan_epoch(spec, shuffle=False).batch(i) for i in range(3)]
        [[0, 1], [4, 5], [2, 3]]
        >>> [plan_epoch(spec, shuffle=False, longest_first=True).batch(i) for i in range(3)]
        [[4, 5], [0, 1], [2, 3]]
    """
    if not isinstance(spec, BucketSpec):  # (a list of lengths failed on '.counts')
        raise TypeError(
            f"spec must be a BucketSpec, got {type(spec).__name__}; build one from the lengths: "
            "plan_epoch(BucketSpec.build(lengths, num_buckets=..., batch_size=...))"
        )
    seed = check_int("seed", seed, minimum=0)
    epoch = check_int("epoch", epoch, minimum=0)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
    rank = check_int("rank", rank, minimum=0, maximum=num_replicas - 1)
    check_bool("shuffle", shuffle)
    at = _Place(seed, epoch, shuffle, num_replicas, rank)
    w = resolve_weights(spec, weights)
    accumulate = check_accumulate(accumulate, spec, w)
    if promotion is not None:
        if w is not None or accumulate > 1:
            raise ValueError(
                "a promotion schedule plans plain epochs: it cannot be combined with weights or "
                f"accumulate={accumulate}; plan those without promotion"
            )
        return _promoted(spec, promotion, at, longest_first)
    shorter = check_bool("fill_shorter", fill_shorter)
    if accumulate > 1:
        return _grouped(spec, at, longest_first, accumulate, shorter)
    if w is not None:
        order, sc, sj, seg, run, runs = _weighted(spec, w, seed, epoch, shuffle, num_replicas)
        if longest_first and sc.size:
            sc, sj, move = _longest_first(spec, num_replicas, sc, sj, np.arange(sc.size))
            seg, run = seg[move], run[move]
        plan = _materialize(spec, num_replicas, rank, order, sc, sj, seg)
        pools = fill_pools(spec, num_replicas) if shorter else {}
        if pools:  # NOTE [ Filling a small bucket ], pass by pass
            plan = _fill_runs(spec, plan, at, pools, runs, run)
        return plan
    order, cell_start, key = at.keyed_order(spec)
    sc, sj = _interleave(spec, None, num_replicas, key)
    seg = cell_start[sc]
    if longest_first and sc.size:
        sc, sj, seg = _longest_first(spec, num_replicas, sc, sj, seg)
    plan = _materialize(spec, num_replicas, rank, order, sc, sj, seg)
    pools = fill_pools(spec, num_replicas) if shorter else {}
    if pools:  # NOTE [ Filling a small bucket ]
        plan = _fill_small(spec, plan, sj, at, order, cell_start, pools, 1)
    return plan


class _Place(NamedTuple):
    """Where an epoch's plan sits (:func:`plan_epoch`'s keywords after the spec, checked)."""

    seed: int
    epoch: int
    shuffle: bool
    num_replicas: int
    rank: int

    def keyed_order(
        self, spec: BucketSpec
    ) -> tuple[ShuffledOrder, np.ndarray, np.random.SeedSequence | None]:
        """The epoch's within-cell order of ``spec`` (with each cell's start) and the key of
        its step interleave (``None`` without shuffle), as every unweighted plan draws them
        from ``SeedSequence([seed, epoch])``."""
        perm_ss, key_ss = np.random.SeedSequence([self.seed, self.epoch]).spawn(2)
        order, cell_start = _cell_order(spec, None, perm_ss if self.shuffle else None)
        return order, cell_start, key_ss if self.shuffle else None


#: The most steps an accumulation group holds (every cell's steps are rounded up to a group).
MAX_ACCUMULATE = 1 << 16


def check_accumulate(accumulate: Any, spec: BucketSpec, weights: Any) -> int:
    """The validated ``accumulate`` (NOTE [ Accumulation groups ] in
    :mod:`bucketloader.plan.accumulate`)."""
    k = check_int("accumulate", accumulate, minimum=1, maximum=MAX_ACCUMULATE)
    if k > 1 and weights is not None:
        raise ValueError(
            f"accumulate={k} cannot be combined with per-dataset weights yet; drop weights or "
            "use accumulate=1"
        )
    if k > 1 and spec.last_batch == "keep":
        raise ValueError(
            f"accumulate={k} needs full groups of one shape; last_batch='keep' makes a smaller "
            "shape per bucket: use last_batch='pad' (the default), 'fill' or 'drop'"
        )
    return k


def _grouped(
    spec: BucketSpec, at: _Place, longest_first: bool, k: int, fill_shorter: bool
) -> EpochPlan:
    """An epoch in accumulation groups of ``k`` steps (NOTE [ Accumulation groups ]); under
    ``"fill"`` a cell whose groups would repeat all of its samples fills them with shorter
    samples (NOTE [ Filling a small bucket ], ``fill_shorter``)."""
    order, cell_start, key = at.keyed_order(spec)
    steps = grouped_steps(spec.num_steps(at.num_replicas), k)
    sc, sj = interleave_groups(steps, k, None if key is None else np.random.default_rng(key))
    seg = cell_start[sc]
    if longest_first and sc.size:
        best = _largest_cell(spec, sc, spec.cell_batch)
        sc, sj, seg = longest_group_first(best, k, sc, sj, seg)
    plan = _materialize(spec, at.num_replicas, at.rank, order, sc, sj, seg)
    pools = fill_pools(spec, at.num_replicas, k) if fill_shorter else {}
    if pools:
        plan = _fill_small(spec, plan, sj, at, order, cell_start, pools, k)
    return plan


def resolve_weights(spec: BucketSpec, weights: Any) -> np.ndarray | None:
    """Validated sampling weights, one per group in ``spec.group_values`` order (or ``None``).

    ``weights`` is a sequence, array or tensor (one per group, in group-id order) or a mapping
    group id → weight; weights are finite, >= 0, and not all 0.

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10], groups=[0, 0, 1, 1], batch_size=1)
        >>> resolve_weights(spec, {1: 3, 0: 1}).tolist()
        [0.25, 0.75]
    """
    if weights is None:
        return None
    gvals = spec.group_values
    if spec.groups is None:
        raise ValueError(
            "weights are per dataset: pass groups=... (e.g. GroupedDataset(...).groups) with "
            f"one weight per group, got weights={weights!r} and no groups"
        )
    if hasattr(weights, "detach"):  # a tensor, as WeightedBucketSampler's weights may be (s21)
        weights = weights.detach().cpu().tolist()
    # group ids below the largest with no sample: an empty dataset of a GroupedDataset, whose
    # weight (one per dataset, the natural list) was refused as "one too many" (s21)
    empty = sorted(set(range(max(gvals, default=-1) + 1)) - set(gvals))
    if isinstance(weights, Mapping):
        unknown = [k for k in weights if k not in gvals]
        missing = [g for g in gvals if g not in weights]
        if unknown or missing:
            raise ValueError(
                f"weights must give one weight per group {list(gvals)}, got keys {list(weights)}"
                + _no_samples(empty, unknown)
            )
        vals = [weights[g] for g in gvals]
    elif isinstance(weights, (list, tuple, np.ndarray)):
        vals = list(weights)
        if len(vals) != len(gvals):
            raise ValueError(
                f"weights must give one weight per group ({len(gvals)}: {list(gvals)}), got "
                f"{len(vals)} weights: {weights!r}"
                + _no_samples(empty, range(len(vals)) if len(vals) > len(gvals) else [])
            )
    else:
        raise TypeError(
            f"weights must be a sequence (one per group) or a mapping group -> weight, got "
            f"{type(weights).__name__}"
        )
    out = []
    for g, v in zip(gvals, vals, strict=True):
        ok = isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
        if not ok or not math.isfinite(float(v)) or v < 0:
            raise ValueError(f"weights must be finite numbers >= 0, got {v!r} for group {g}")
        out.append(float(v))
    total = sum(out)
    if total <= 0:
        raise ValueError(f"weights must not all be 0, got weights={weights!r}")
    return np.array([v / total for v in out])


def _no_samples(empty: list[int], asked: Any) -> str:
    """Why weights named groups the plan has none of: they have no samples."""
    named = [g for g in asked if g in empty]
    if not named:
        return ""
    return (
        f"; group(s) {named} have no samples (an empty dataset?) and take no share: give the "
        "weights of the groups that have samples, in group-id order, or a mapping "
        "{group: weight} of those"
    )


def check_weights(
    spec: BucketSpec, weights: np.ndarray, num_replicas: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(natural steps per group, groups that make steps)``, or a clear error when the weight
    falls only on groups that make no step (e.g. a dataset smaller than one batch under
    ``last_batch="drop"``): the epoch would be empty while ``len()`` promises steps."""
    steps = spec.num_steps(num_replicas)
    ngroups = len(spec.group_values)
    per_group = np.bincount(spec.cell_group, weights=steps, minlength=ngroups).astype(np.int64)
    live = per_group > 0
    if per_group.sum() and not (weights[live] > 0).any():
        heavy = [spec.group_values[g] for g in np.flatnonzero(weights > 0).tolist()]
        raise ValueError(
            f"weights put every batch on group(s) {heavy}, which make no batch on "
            f"{num_replicas} rank(s) under last_batch={spec.last_batch!r} (fewer samples than a "
            "full batch); give weight to a group that makes batches, or use last_batch='pad'"
        )
    return per_group, live


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Integers proportional to ``weights`` summing exactly to ``total`` (largest remainders;
    ties go to the lower index).

    Example:
        >>> apportion(10, np.array([0.5, 0.25, 0.25])).tolist()
        [5, 3, 2]
    """
    quota = total * np.asarray(weights, dtype=np.float64)
    base = np.floor(quota).astype(np.int64)
    left = int(total - base.sum())
    if left > 0:
        order = np.lexsort((np.arange(base.size), -(quota - base)))
        base[order[:left]] += 1
    return base


def _cell_order(
    spec: BucketSpec, cells: np.ndarray | None, perm_ss: np.random.SeedSequence | None
) -> tuple[ShuffledOrder, np.ndarray]:
    """Samples of ``cells`` (all by default) sorted by cell and shuffled within each cell (a
    keyed permutation per cell, evaluated lazily: NOTE [ Counter-based shuffle ]);
    ``cell_start[c]`` is where cell ``c``'s samples start (only meaningful for ``cells``)."""
    counts = spec.counts
    base_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    which = np.arange(counts.size) if cells is None else np.asarray(cells, dtype=np.int64)
    cell_start = np.zeros(counts.size, dtype=np.int64)
    cell_start[which] = np.concatenate([[0], np.cumsum(counts[which])[:-1]])
    pis = {} if perm_ss is None else cell_shuffles(perm_ss, counts, which)
    order = ShuffledOrder(
        spec.by_cell, base_start[which], counts[which], [pis.get(c) for c in which.tolist()]
    )
    return order, cell_start


def _interleave(
    spec: BucketSpec,
    cells: np.ndarray | None,
    num_replicas: int,
    key_ss: np.random.SeedSequence | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Steps ``(cell, j)`` of ``cells`` (all by default), interleaved so cells drain evenly."""
    steps = spec.num_steps(num_replicas)
    if cells is not None:
        only = np.zeros_like(steps)
        only[cells] = steps[cells]
        steps = only
    return interleave_steps(steps, None if key_ss is None else np.random.default_rng(key_ss))


class _Pass(NamedTuple):
    """One pass over a group's data in a weighted epoch (NOTE [ Weighted epochs ])."""

    order: ShuffledOrder
    cell_start: np.ndarray
    group: int
    number: int


def _weighted(
    spec: BucketSpec, w: np.ndarray, seed: int, epoch: int, shuffle: bool, num_replicas: int
) -> tuple[ShuffledOrder, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[_Pass]]:
    """(order, step cells, step j, segment start per step, pass per step, the passes) of a
    weighted epoch."""
    per_group, live = check_weights(spec, w, num_replicas)
    ngroups = len(spec.group_values)
    total = int(per_group.sum())
    share = np.zeros(ngroups, dtype=np.int64)
    if live.any():
        share[live] = apportion(total, w[live] / w[live].sum())
    orders: list[ShuffledOrder] = []
    offset = 0
    parts_c, parts_j, parts_seg, parts_g, parts_t = [], [], [], [], []
    passes: list[_Pass] = []
    for g in range(ngroups):
        n_g, s_g = int(share[g]), int(per_group[g])
        if n_g == 0:
            continue
        cells = np.flatnonzero(spec.cell_group == g)
        lo, hi = epoch * n_g, (epoch + 1) * n_g  # this epoch's steps of the group's sequence
        t0 = 0
        for p in range(lo // s_g, (hi - 1) // s_g + 1):
            perm_ss, key_ss = np.random.SeedSequence([seed, p, _MIX, g]).spawn(2)
            order, start = _cell_order(spec, cells, perm_ss if shuffle else None)
            sc, sj = _interleave(spec, cells, num_replicas, key_ss if shuffle else None)
            a, b = max(lo - p * s_g, 0), min(hi - p * s_g, s_g)
            sc, sj = sc[a:b], sj[a:b]
            parts_c.append(sc)
            parts_j.append(sj)
            parts_seg.append(start[sc] + offset)
            parts_g.append(np.full(sc.size, g))
            parts_t.append(np.arange(t0, t0 + sc.size))
            t0 += sc.size
            passes.append(_Pass(order, start, g, p))
            orders.append(order)
            offset += order.size
    if not parts_c:
        empty = np.zeros(0, dtype=np.int64)
        return ShuffledOrder(spec.by_cell, [], [], []), empty, empty, empty, empty, []
    sc, sj, seg = np.concatenate(parts_c), np.concatenate(parts_j), np.concatenate(parts_seg)
    run = np.repeat(np.arange(len(passes)), [c.size for c in parts_c])
    grp, t = np.concatenate(parts_g), np.concatenate(parts_t)
    key_ss = np.random.SeedSequence([seed, epoch, _MIX])
    u = np.random.default_rng(key_ss).random(sc.size) if shuffle else 0.5
    pick = np.lexsort((grp, (t + u) / share[grp]))
    order = ShuffledOrder.concat(orders, spec.by_cell)
    return order, sc[pick], sj[pick], seg[pick], run[pick], passes


def _largest_cell(spec: BucketSpec, sc: np.ndarray, rows: np.ndarray) -> int:
    """The cell of the largest batch among the steps ``sc`` (by padded size, then rows: NOTE
    [ Longest batch first ])."""
    size = size_values(spec.cell_lengths, spec.size)
    present = np.unique(sc)
    return int(present[np.lexsort((rows[present], size[present]))[-1]])


def _longest_first(
    spec: BucketSpec, num_replicas: int, sc: np.ndarray, sj: np.ndarray, seg: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move a full step of the largest cell to the front (NOTE [ Longest batch first ])."""
    best = _largest_cell(spec, sc, spec.cell_batch)
    full, _ = spec.cell_steps(num_replicas)
    hits = np.flatnonzero(sc == best)
    fulls = hits[sj[hits] < full[best]]
    i = int(fulls[0] if fulls.size else hits[0])
    if i == 0:
        return sc, sj, seg
    move = np.r_[i, 0:i, i + 1 : sc.size]
    return sc[move], sj[move], seg[move]


def _materialize(
    spec: BucketSpec,
    num_replicas: int,
    rank: int,
    order: ShuffledOrder,
    sc: np.ndarray,
    sj: np.ndarray,
    seg: np.ndarray,
) -> EpochPlan:
    """Rank ``rank``'s batch indices for the steps ``(sc, sj)``; cell ``c``'s samples of a step
    sit at ``order[seg : seg + counts[c]]``."""
    counts = spec.counts
    full, q = spec.cell_steps(num_replicas)
    bsz = spec.cells.batch[sc]
    base = sj * num_replicas * bsz
    start, size = base + rank * bsz, bsz.copy()
    last = (sj == full[sc]) & (q[sc] > 0)  # (an accumulation group's extra steps are full)
    if spec.last_batch in ("keep", "pad") and last.any():
        ql = q[sc[last]]
        if spec.last_batch == "keep":
            k = -(-ql // num_replicas)
            s_start, s_size = base[last] + rank * k, k
        else:
            lo, extra = ql // num_replicas, ql % num_replicas
            s_size = lo + (rank < extra)
            s_start = base[last] + rank * lo + np.minimum(rank, extra)
            s_start = np.where(s_size == 0, base[last] + rank, s_start)
            s_size = np.maximum(s_size, 1)
        start[last], size[last] = s_start, s_size
    offsets = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    indices = _gather(order, offsets, start, counts[sc], seg)
    return EpochPlan(indices=indices, offsets=offsets, cells=sc, partial=last)


def _gather(
    order: ShuffledOrder,
    offsets: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    seg: np.ndarray,
) -> np.ndarray:
    """The samples of batches ``i`` (``offsets[i + 1] - offsets[i]`` of them): positions
    ``start[i], start[i] + 1, ...`` (cyclically, mod ``count[i]``) of the cell segment that
    starts at ``seg[i]`` in ``order``. Batches are taken in chunks of about ``_GATHER``
    samples and, within a chunk, segment by segment (each segment's permutation evaluated once
    per chunk), so no temporary grows with the epoch: only the result, one index per sample
    in ``order``'s index type."""
    size = np.diff(offsets)
    out = np.empty(int(offsets[-1]), dtype=order.base.dtype)
    sid = order.segment_at(seg)
    first = 0
    while first < size.size:
        last = int(np.searchsorted(offsets, offsets[first] + _GATHER, side="right")) - 1
        last = min(max(last, first + 1), size.size)
        by_seg = first + np.argsort(sid[first:last], kind="stable")
        cut = np.flatnonzero(np.diff(sid[by_seg])) + 1
        for group in np.split(by_seg, cut):  # (one segment: one cell, one count)
            sz = size[group]
            before = np.cumsum(sz) - sz
            step = np.arange(int(sz.sum()))
            slot = np.repeat(offsets[group] - before, sz) + step
            pos = np.repeat(start[group] - before, sz) + step
            n = int(count[group[0]])
            if int(pos.max()) >= n:  # repeats wrap around the cell
                pos %= n
            out[slot] = order.take(int(sid[group[0]]), pos)
        first = last
    return out


def fill_pools(spec: BucketSpec, num_replicas: int, accumulate: int = 1) -> dict[int, np.ndarray]:
    """Under ``last_batch="fill"``, per cell whose steps shorter samples fill (NOTE [ Filling a
    small bucket ]): the cells it covers (same group, every padded length at most its own) that
    hold samples. A cell of ``n`` samples whose steps (rounded up to whole accumulation groups
    of ``accumulate``) take ``T`` samples qualifies when they would repeat every one of its
    samples (``T - n >= n``; without accumulation: no full step, at most half of one) and its
    batches have room left after its own share (``max(n, batches) < T``; not single-row
    batches). Empty under another policy.

    Example:
        >>> spec = BucketSpec.build([5] * 40 + [30] * 3, boundaries=[5, 30], batch_size=8,
        ...                         last_batch="fill")
        >>> {c: cells.tolist() for c, cells in fill_pools(spec, 2).items()}
        {1: [0]}
    """
    if spec.last_batch != "fill":
        return {}
    counts, (steps, slots) = spec.counts, fill_slots(spec, num_replicas, accumulate)
    batches = steps * num_replicas
    small = (counts > 0) & (2 * counts <= slots) & (np.maximum(counts, batches) < slots)
    lengths, group, counts = spec.cell_lengths, spec.cell_group, spec.counts
    out = {}
    for c in np.flatnonzero(small).tolist():
        covered = (lengths <= lengths[c]).all(axis=1) & (group == group[c]) & (counts > 0)
        covered[c] = False
        if covered.any():  # (else the shortest cell of its group: its own samples repeat)
            out[c] = np.flatnonzero(covered)
    return out


def fill_slots(
    spec: BucketSpec, num_replicas: int, accumulate: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell under ``"fill"``: ``(steps, slots)``, its global steps (rounded up to whole
    accumulation groups: NOTE [ Accumulation groups ]) and the samples they take (``steps·R·B``,
    every batch full).

    Example:
        >>> spec = BucketSpec.build([5] * 40 + [30] * 3, boundaries=[5, 30], batch_size=8,
        ...                         last_batch="fill")
        >>> [a.tolist() for a in fill_slots(spec, 2, accumulate=2)]
        [[4, 2], [64, 32]]
    """
    steps = grouped_steps(spec.num_steps(num_replicas), accumulate)
    return steps, steps * spec.cell_batch * num_replicas


def own_slots(q: int, num_replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """``(first, count)`` per rank: a filled cell's ``q`` samples split over the ranks as
    ``"pad"`` splits a last step (a rank that would get none takes position ``rank % q``), so
    every rank's batch starts with a sample of the cell (NOTE [ Filling a small bucket ]). Under
    accumulation, ``num_replicas`` counts the cell's batches over its steps (``steps·R``, batch
    ``j·R + rank`` of step ``j``).

    Example:
        >>> [a.tolist() for a in own_slots(5, 2)], [a.tolist() for a in own_slots(2, 3)]
        ([[0, 3], [3, 2]], [[0, 1, 2], [1, 1, 1]])
    """
    lo, extra = divmod(q, num_replicas)
    r = np.arange(num_replicas)
    take = lo + (r < extra)
    return np.where(take > 0, r * lo + np.minimum(r, extra), r), np.maximum(take, 1)


def fill_draws(
    spec: BucketSpec,
    num_replicas: int,
    order: ShuffledOrder,
    cell_start: np.ndarray,
    pools: dict[int, np.ndarray],
    ss: np.random.SeedSequence | None,
    accumulate: int = 1,
) -> tuple[dict[int, np.ndarray], np.ndarray, np.ndarray]:
    """The filling samples of every cell of ``pools`` (over all ranks and, under
    ``accumulate``, its steps, in batch order: step by step, rank by rank) and the extra
    appearances in the epoch of the samples of the cells they draw from: ``(draws, ids,
    extra)`` (NOTE [ Filling a small bucket ]). Cells draw smallest first; each takes the samples
    its pool repeats least so far (a cell's wrapped last step or extra steps, a filled cell's own
    sample for a batch without one, an earlier draw), in a random order among equals
    (``ss=None``: in ``by_cell`` order), the same on every rank."""
    steps, slots = fill_slots(spec, num_replicas, accumulate)
    counts, by_cell, cell_of = spec.counts, spec.by_cell, spec.cell_of_sample
    base = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    drawn_from = np.zeros(counts.size, dtype=bool)
    for cells in pools.values():
        drawn_from[cells] = True
    drawn_from[list(pools)] = True  # (under accumulate a filled cell's own samples fill too)
    parts = []  # one entry per extra appearance, of samples some pool or filled cell holds
    for c in np.flatnonzero(drawn_from & (slots > counts)).tolist():
        n, s = int(counts[c]), int(cell_start[c])
        if c in pools:  # its own samples split over its batches: repeats for those without one
            first, own = own_slots(n, int(steps[c]) * num_replicas)
            pos = _ranges(first, own) % n
            parts.append(order[s + pos[n:]] if pos.size > n else by_cell[:0])
        else:  # the last step (and extra steps) wrap round to the start of its shuffled order
            parts.append(order[s + np.arange(int(slots[c]) - n) % n])
    # the extra appearances so far, counted per sample, and per cell how many of its samples
    # have one: a cell's draw among the samples not repeated yet costs about its need, by
    # rejection, and only a pool mostly repeated already is read whole (s23-rev: each cell ran
    # np.unique over every earlier repeat, drew need + repeated positions without replacement
    # and read a small pool through a search per sample; 1M samples, 256 buckets x 16 on 256
    # ranks, 85 cells filled: 4.5 s a plan, now 0.2 s, 25 ms without the fill; 100k samples in
    # 255 buckets x 8 on 128 ranks, all filled: 2.5 s, now 0.13 s; 7 ms without; one host)
    times = _Repeats(np.concatenate([by_cell[:0], *parts]), cell_of, counts)
    rng = None if ss is None or not pools else np.random.default_rng(ss)
    size = size_values(spec.cell_lengths, spec.size)
    draws = {}
    for c in sorted(pools, key=lambda c: (int(size[c]), c)):  # the smallest cell first
        cells = pools[c]
        owned = own_slots(int(counts[c]), int(steps[c]) * num_replicas)[1].sum()
        need = int(slots[c]) - int(owned)
        ends = np.cumsum(counts[cells])
        total = int(ends[-1])
        fresh = total - int(times.in_cell[cells].sum())  # (samples of the pool not repeated yet)

        def sample(pos: np.ndarray, cells: np.ndarray = cells, ends: np.ndarray = ends) -> Any:
            at = np.searchsorted(ends, pos, side="right")  # pool position -> its cell
            return by_cell[base[cells[at]] + pos - (ends - counts[cells])[at]]

        if accumulate > 1:  # the longest covered first, then its own (less padding)
            take = _closest_first(rng, need, c, cells, fresh, size, spec, base, times)
        elif 4 * fresh >= total and 2 * need <= fresh:  # draw among those, by rejection
            take = _draw_fresh(rng, need, total, fresh, sample, times)
        else:  # most of the pool repeats, or the need takes much of the rest: all of it,
            # the least repeated first, cyclically
            ids = by_cell[_ranges(base[cells], counts[cells])]
            take = _least_repeated(rng, need, ids, times(ids))
        draws[c] = take
        times.add(take)
    return (draws, *times.merged())


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, lengths)])``, without a loop.

    Example:
        >>> _ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist()
        [5, 6, 9, 10, 11]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    skip = np.cumsum(lengths) - lengths  # (where each range begins in the output)
    return np.repeat(np.asarray(starts, dtype=np.int64) - skip, lengths) + np.arange(
        int(lengths.sum())
    )


class _Repeats:
    """The extra appearances of samples in an epoch so far (:func:`fill_draws`): a count per
    sample (``int32``, zeroed lazily by the allocator: only the pages of repeated samples are
    written), the repeated ones listed, ``in_cell``: per cell, how many of its samples have
    one, and ``levels``: per cell, how many of its samples have 0, 1, ... extra appearances (the
    last column: :data:`_LEVELS` - 1 or more), so a draw under accumulation reads only the cells
    it can take from (:func:`_closest_first`). A lookup is a gather, so a mostly repeated pool
    costs a pass over its ids, not a search per id (s23-rev)."""

    def __init__(self, ids: np.ndarray, cell_of: np.ndarray, counts: np.ndarray) -> None:
        self.cell_of, self.num_cells = cell_of, counts.size
        self.times = np.zeros(cell_of.size, dtype=np.int32)
        self.in_cell = np.zeros(counts.size, dtype=np.int64)
        self.levels = np.zeros((counts.size, _LEVELS), dtype=np.int64)
        self.levels[:, 0] = counts
        self.parts: list[np.ndarray] = []
        self.add(ids)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """Extra appearances of ``ids`` so far."""
        return self.times[ids]

    def add(self, ids: np.ndarray) -> None:
        unique, mult = np.unique(ids, return_counts=True)
        old = self.times[unique]
        new = unique[old == 0]
        self.in_cell += np.bincount(self.cell_of[new], minlength=self.num_cells)
        cells, top = self.cell_of[unique], _LEVELS - 1
        np.add.at(self.levels, (cells, np.minimum(old, top)), -1)
        np.add.at(self.levels, (cells, np.minimum(old + mult, top)), 1)
        self.times[unique] = old + mult
        self.parts.append(new)

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, extra)``: every sample with an extra appearance, sorted, and their number."""
        ids = np.sort(np.concatenate([np.zeros(0, dtype=np.int64), *self.parts]))
        return ids, self.times[ids].astype(np.int64)


#: :class:`_Repeats` counts the samples of each cell at 0 to ``_LEVELS - 2`` extra appearances
#: apart; a draw that reaches past them reads its whole pool (:func:`_closest_first`).
_LEVELS = 8


def _draw_fresh(
    rng: np.random.Generator | None,
    need: int,
    total: int,
    fresh: int,
    sample: Any,
    times: Any,
) -> np.ndarray:
    """``need`` distinct samples of a pool of ``total`` (``sample``: pool positions -> ids)
    that have no extra appearance yet (``times(ids) == 0``; ``fresh`` of them, at least a quarter
    of the pool and twice ``need``), uniformly at random: positions drawn with replacement,
    the repeated ones and second draws rejected, about ``need * total / fresh`` draws
    (``rng=None``: the first ones in pool order)."""
    chosen = np.zeros(0, dtype=np.int64)
    start = 0
    while chosen.size < need:
        m = (need - chosen.size) * total // fresh + 16
        if rng is None:
            pos = np.arange(start, min(start + m, total))
            start += m
        else:
            pos = rng.integers(0, total, size=m + m // 4)
        pos = np.concatenate([chosen, pos[times(sample(pos)) == 0]])
        first = np.sort(np.unique(pos, return_index=True)[1])  # (first draws, in draw order)
        chosen = pos[first]
    return sample(chosen[:need])  # type: ignore[no-any-return]


def _least_repeated(
    rng: np.random.Generator | None, need: int, ids: np.ndarray, times: np.ndarray
) -> np.ndarray:
    """``need`` of ``ids`` (with ``times`` extra appearances each so far), the least repeated
    first, at random among equals (``rng=None``: in ``ids`` order); all of them, cyclically,
    when ``need`` passes their number."""
    n = ids.size
    if need < n:  # every one below the cut, then a random part of those at it
        cut = np.partition(times, need - 1)[need - 1]
        below, at = np.flatnonzero(times < cut), np.flatnonzero(times == cut)
        if rng is not None:
            below = rng.permutation(below)
            at = rng.choice(at, size=need - below.size, replace=False)
        ranked = np.concatenate([below[np.argsort(times[below], kind="stable")], at])
        return ids[ranked[:need]]  # type: ignore[no-any-return]
    perm = rng.permutation(n) if rng is not None else np.arange(n)
    ranked = perm[np.argsort(times[perm], kind="stable")]
    return ids[ranked[np.arange(need) % n]]  # type: ignore[no-any-return]


def _closest_first(
    rng: np.random.Generator | None,
    need: int,
    c: int,
    cells: np.ndarray,
    fresh: int,
    size: np.ndarray,
    spec: BucketSpec,
    base: np.ndarray,
    times: Any,
) -> np.ndarray:
    """Under accumulation, ``need`` samples to fill cell ``c``'s batches from its pool
    ``cells`` (``fresh`` of their samples not repeated yet) and then its own: the least
    repeated first (:func:`_levelled`), and among equals those of the longest covered cell
    first, the least padding to ``c``'s shape (GSM8K 8x32 on 8 ranks, ``accumulate=4``: 36.7%
    padding drawn from the whole pool at random, 28.9% so; s24-accfill), at random within a
    cell. When the pool's unrepeated samples cover the need only the closest cells are read."""
    counts, by_cell = spec.counts, spec.by_cell
    by_gap = cells[np.lexsort((cells, size[c] - size[cells]))]  # (the closest cell first)
    if fresh >= need:  # level 0: the unrepeated samples of the closest cells
        parts, left = [], need
        for cc in by_gap.tolist():
            ids = by_cell[base[cc] : base[cc] + counts[cc]]
            ids = ids[times(ids) == 0]
            if rng is not None and ids.size > left:
                ids = rng.choice(ids, left, replace=False)
            parts.append(ids[:left])
            left -= parts[-1].size
            if not left:
                break
        take = np.concatenate(parts)
        return rng.permutation(take) if rng is not None else take  # type: ignore[no-any-return]
    order = np.concatenate([by_gap, [c]])  # (then its own samples)
    read = _cells_drawn(need, times.levels[order])
    sub = order if read is None else order[read]
    ids = by_cell[_ranges(base[sub], counts[sub])]
    small = np.uint16 if order.size <= 1 << 16 else np.int64  # (a radix sort in _levelled)
    at = np.arange(order.size, dtype=small)
    rank = np.repeat(at if read is None else at[read], counts[sub])
    return _levelled(rng, need, ids, times(ids), rank)


def _cells_drawn(need: int, levels: np.ndarray) -> np.ndarray | None:
    """Which of a pool's cells (``levels``: per cell, in rank order, its samples at each count
    of extra appearances, :class:`_Repeats`) :func:`_levelled` can draw ``need`` from: every cell
    with a sample below the level ``L`` the draws raise all to, and the first cells (the lower
    rank) until they hold more samples at or below ``L`` than the draws past it; ``None`` (every
    cell) when ``L`` is not below the last counted level. Those cells hold every sample
    :func:`_levelled` would raise to ``L`` and the lowest-ranked ones at it, so it draws from
    them as from the whole pool (the same draws without shuffle; with it, the same counts and
    other random picks), reading about ``need`` samples where the pool is mostly repeated: one
    rank's plan of 1M samples in 255 buckets x 16 on 256 ranks, ``accumulate=2``, all filled,
    5.7 s reading the whole pool per cell, 0.20 s so; 100k in 255 x 8 on 128 ranks 0.40 ->
    0.09 s (CPU time, one host, s24-accfill's perf script)."""
    tot = levels.sum(axis=0)
    if tot[-1] or not tot.any():
        return None
    low = int(np.flatnonzero(tot)[0])
    below = np.cumsum(tot[low:])  # (samples at or below each level from the lowest)
    fill = np.concatenate([[0], np.cumsum(below)])  # (draws that raise all to each level)
    j = int(np.searchsorted(fill, need, side="right")) - 1
    level = low + j
    if j >= below.size or level >= levels.shape[1] - 1:
        return None
    rest = need - int(fill[j])
    under = levels[:, :level].sum(axis=1) > 0  # (every one of those is drawn)
    upto = np.cumsum(levels[:, : level + 1].sum(axis=1))
    first = int(np.searchsorted(upto, rest + 1, side="left"))  # (more than the rest)
    under[: first + 1] = True
    return np.flatnonzero(under)


def _levelled(
    rng: np.random.Generator | None,
    need: int,
    ids: np.ndarray,
    times: np.ndarray,
    rank: np.ndarray,
) -> np.ndarray:
    """``need`` draws of ``ids`` (with ``times`` extra appearances each so far) that raise the
    least repeated first, one appearance at a time: every one below a level ``L`` up to it, then
    the rest among those at ``L``, the lower ``rank`` first (a filled cell's closest covered
    cell first, its own samples last), at random among equals (``rng=None``: in ``ids``
    order). Returned round by round
    (lowest count first, in a random order within a round), so a sample's draws lie about
    ``len(ids)`` apart. Unlike :func:`_least_repeated`'s cyclic pass, a sample repeated more
    than the others is not drawn again while they catch up. ``O(len(ids))`` per round.

    Example:
        >>> ids, rank = np.array([10, 11, 12]), np.array([0, 0, 1])
        >>> _levelled(None, 5, ids, np.array([3, 0, 0]), rank).tolist()
        [11, 12, 11, 12, 11]
    """
    low = int(times.min())
    below = np.cumsum(np.bincount(times - low))  # (samples below each level above the lowest)
    fill = np.concatenate([[0], np.cumsum(below)])  # (draws that raise all to each level)
    j = int(np.searchsorted(fill, need, side="right")) - 1
    if j == below.size:  # (above every count: each round takes them all)
        j += (need - int(fill[-1])) // ids.size
    level = low + j  # the highest level every sample below reaches
    at = np.flatnonzero(times <= level)  # (the only ones drawn: at most need + those at it)
    t = times[at].astype(np.int64)
    reps = level - t
    rest = need - int(reps.sum())  # (fewer than the samples at the level)
    if rest:
        perm = rng.permutation(at.size) if rng is not None else np.arange(at.size)
        reps[perm[np.argsort(rank[at][perm], kind="stable")][:rest]] += 1
    rounds = []
    for r in range(low, level + (rest > 0)):
        now = np.flatnonzero((t <= r) & (t + reps > r))
        if rng is not None:
            now = rng.permutation(now)
        rounds.append(at[now])
    return ids[np.concatenate(rounds)]  # type: ignore[no-any-return]


def fill_extra(
    spec: BucketSpec,
    pools: dict[int, np.ndarray],
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    num_replicas: int,
    rank: int = 0,
    accumulate: int = 1,
) -> np.ndarray:
    """The extra appearances in ``epoch`` (over all ranks) of each sample that appears more than
    once among the cells the ``pools`` draw from (:func:`fill_draws`; ``rank`` is unused: every
    rank draws alike)."""
    at = _Place(seed, epoch, shuffle, num_replicas, rank)
    order, cell_start, _ = at.keyed_order(spec)
    return _epoch_draws(spec, at, order, cell_start, pools, accumulate)[2]


def _fill_key(at: _Place) -> np.random.SeedSequence | None:
    """The key of the epoch's fill draws: ``SeedSequence([seed, epoch])``'s third child (the
    first two shuffle the cells and key the interleave, unchanged); ``None`` without shuffle."""
    return np.random.SeedSequence([at.seed, at.epoch]).spawn(3)[2] if at.shuffle else None


#: The last epoch's fill draws: ``(key, spec, draws)`` (:func:`_epoch_draws`).
_LAST_DRAWS: tuple[Any, Any, Any] | None = None
#: The last weighted plan's fill draws per ``(pass, group)``: ``(key, spec, draws)``
#: (:func:`_fill_runs`).
_PASS_DRAWS: tuple[Any, Any, Any] | None = None


def _epoch_draws(
    spec: BucketSpec,
    at: _Place,
    order: ShuffledOrder,
    cell_start: np.ndarray,
    pools: dict[int, np.ndarray],
    accumulate: int,
) -> tuple[dict[int, np.ndarray], np.ndarray, np.ndarray]:
    """:func:`fill_draws` of the epoch at ``at``, the same on every rank, so kept for the next
    call (read-only): ``report()`` plans every rank (s23-rev: 1M samples, 64 buckets x 32 on 64
    ranks, 5 filled: the draws 64 times, report() 0.29 s -> 1.6 s) and a sampler's warning
    and first plan both need epoch 0's. One entry, its spec held weakly."""
    global _LAST_DRAWS
    key = (
        at.seed,
        at.epoch,
        at.shuffle,
        at.num_replicas,
        accumulate,
        [(c, v.tolist()) for c, v in pools.items()],
    )
    last = _LAST_DRAWS  # (one read: another thread may replace it)
    if last is not None and last[0] == key and last[1]() is spec:
        return last[2]  # type: ignore[no-any-return]
    ss = _fill_key(at)
    draws = fill_draws(spec, at.num_replicas, order, cell_start, pools, ss, accumulate)
    for a in (*draws[0].values(), draws[1], draws[2]):
        a.flags.writeable = False
    _LAST_DRAWS = (key, weakref.ref(spec), draws)
    return draws


def _fill_small(
    spec: BucketSpec,
    plan: EpochPlan,
    sj: np.ndarray,
    at: _Place,
    order: ShuffledOrder,
    cell_start: np.ndarray,
    pools: dict[int, np.ndarray],
    accumulate: int,
) -> EpochPlan:
    """``plan`` (whose batch ``i`` is step ``sj[i]`` of its cell) with each pooled cell's
    batches on this rank made of its own samples, split over its batches (its steps' ``R``
    each), then their share of the filling samples (NOTE [ Filling a small bucket ]). Batches
    keep their size (``B``), so the offsets are unchanged."""
    draws, _, _ = _epoch_draws(spec, at, order, cell_start, pools, accumulate)
    steps, _ = fill_slots(spec, at.num_replicas, accumulate)
    indices = plan.indices.copy()
    for c, take in draws.items():
        i = np.flatnonzero(plan.cells == c)  # (its steps on this rank)
        b, n = int(spec.cell_batch[c]), int(spec.counts[c])
        first, own = own_slots(n, int(steps[c]) * at.num_replicas)
        k = sj[i] * at.num_replicas + at.rank  # (which of the cell's batches: step, then rank)
        before = k * b - (np.cumsum(own) - own)[k]  # (filling slots of the batches before)
        lo, mine = plan.offsets[i], own[k]
        at_own = order[int(cell_start[c]) + _ranges(first[k], mine) % n]
        indices[_ranges(lo, mine)] = at_own
        indices[_ranges(lo + mine, b - mine)] = take[_ranges(before, b - mine)]
    return dataclasses.replace(plan, indices=indices)


def _fill_runs(
    spec: BucketSpec,
    plan: EpochPlan,
    at: _Place,
    pools: dict[int, np.ndarray],
    passes: list[_Pass],
    run: np.ndarray,
) -> EpochPlan:
    """A weighted epoch's ``plan`` (batch ``i`` from ``passes[run[i]]``) with each pooled cell's
    batch filled as :func:`_fill_small` fills a plain epoch's, from its pass's draws: a pass
    is a plain plan of its group (NOTE [ Weighted epochs ]), drawn from
    ``SeedSequence([seed, pass, MIX, group])``'s third child (the first two shuffle and key
    it), so a pass split over two epochs draws alike in both."""
    global _PASS_DRAWS
    indices, r = plan.indices.copy(), at.rank
    pooled = np.isin(plan.cells, list(pools))
    q = spec.cell_steps(at.num_replicas)[1]
    # a pass's draws are the same on every rank (its order is keyed by seed, pass and group),
    # so the last plan's are kept, as _epoch_draws keeps a plain epoch's: report() plans every
    # rank (200k samples, 2 groups of 32 buckets x 16, weights 2:1, 64 ranks: all ranks' plans
    # 0.79 s, 0.29 s without the fill; s24-fr1)
    key = (at.seed, at.shuffle, at.num_replicas, [(c, v.tolist()) for c, v in pools.items()])
    last = _PASS_DRAWS  # (one read: another thread may replace it)
    held = last[2] if last is not None and last[0] == key and last[1]() is spec else {}
    kept: dict[tuple[int, int], dict[int, np.ndarray]] = {}
    for u in np.unique(run[pooled]).tolist():
        order, cell_start, g, p = passes[u]
        draws = held.get((p, g))
        if draws is None:
            mine = {c: v for c, v in pools.items() if spec.cell_group[c] == g}
            ss = np.random.SeedSequence([at.seed, p, _MIX, g]).spawn(3)[2] if at.shuffle else None
            draws = fill_draws(spec, at.num_replicas, order, cell_start, mine, ss)[0]
            for a in draws.values():
                a.flags.writeable = False
        kept[(p, g)] = draws
        for i in np.flatnonzero(pooled & (run == u)).tolist():
            c = int(plan.cells[i])
            b, n = int(spec.cell_batch[c]), int(q[c])
            first, own = own_slots(n, at.num_replicas)
            ids = order[int(cell_start[c]) + (first[r] + np.arange(own[r])) % n]
            before = int((b - own[:r]).sum())
            lo = int(plan.offsets[i])
            indices[lo : lo + b] = np.concatenate([ids, draws[c][before : before + b - own[r]]])
    _PASS_DRAWS = (key, weakref.ref(spec), kept)
    return dataclasses.replace(plan, indices=indices)


def _promoted(spec: BucketSpec, p: Promotion, at: _Place, longest_first: bool) -> EpochPlan:
    """An epoch with leftovers promoted (NOTE [ Promotion of leftovers ] in
    :mod:`bucketloader.plan.promote`); the shuffles and step keys are the plain plan's."""
    order, cell_start, key = at.keyed_order(spec)
    order, start = promoted_order(order, cell_start, spec.counts, p)
    sc, sj = interleave_steps(p.steps, None if key is None else np.random.default_rng(key))
    if longest_first and sc.size:
        best = _largest_cell(spec, sc, p.rows)
        i = int(np.argmax(sc == best))
        move = np.r_[i, 0:i, i + 1 : sc.size]
        sc, sj = sc[move], sj[move]
    indices, offsets = deal(p, start, order, at.num_replicas, at.rank, sc, sj)
    partial = np.zeros(sc.size, dtype=bool)
    return EpochPlan(indices=indices, offsets=offsets, cells=sc, partial=partial)
