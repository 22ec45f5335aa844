"""The epoch plan: a pure, vectorised function from (spec, seed, epoch, ranks) to batches.

NOTE [ Epoch plan ]
Every rank computes the same *global* plan from ``(seed, epoch)`` and takes its slot, so no
communication is needed:

1. Within-cell shuffle: samples sorted by cell once per spec, then each cell's segment shuffled.
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
  of the same cell (taken in the epoch's shuffled order, so random repeats).
- ``"drop"``: the ``q`` samples are dropped this epoch (a different random set each epoch).
- ``"keep"``: one last step of ``R`` smaller batches of ``ceil(q / R)`` samples (an extra shape per
  cell, listed in :attr:`ShapeTable.shapes`); ``R·ceil(q/R) − q <= R − 1`` samples repeat.

With ``R = 1`` this is the single-process rule: the partial batch is padded, filled, dropped or
kept. Repeats are taken cyclically from the start of the cell's (shuffled) order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bucketloader._validation import check_int
from bucketloader.plan.spec import BucketSpec


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """One rank's batches for one epoch, as flat arrays.

    Attributes:
        indices: sample indices of all batches, concatenated.
        offsets: batch ``i`` is ``indices[offsets[i]:offsets[i + 1]]``.
        cells: cell id of every batch.
        partial: whether each batch is its cell's last-step batch (smaller under ``"keep"``).
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


def plan_epoch(
    spec: BucketSpec,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    num_replicas: int = 1,
    rank: int = 0,
) -> EpochPlan:
    """Rank ``rank``'s batches for ``epoch`` (see NOTE [ Epoch plan ] in this module).

    Pure and deterministic in its arguments; randomness comes only from
    ``numpy.random.SeedSequence([seed, epoch])``.

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> plan = plan_epoch(spec, shuffle=False)
        >>> [plan.batch(i) for i in range(len(plan))]
        [[2, 3], [0, 1], [4]]
    """
    seed = check_int("seed", seed, minimum=0)
    epoch = check_int("epoch", epoch, minimum=0)
    num_replicas = check_int("num_replicas", num_replicas, minimum=1)
    rank = check_int("rank", rank, minimum=0, maximum=num_replicas - 1)
    n_cells = spec.cells.num_cells
    perm_ss, key_ss = np.random.SeedSequence([seed, epoch]).spawn(2)
    counts = spec.counts
    cell_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    order = spec.by_cell
    if shuffle:  # one in-place shuffle per cell segment (cache-friendly; a loop over cells only)
        order, rng = order.copy(), np.random.default_rng(perm_ss)
        for s, n in zip(cell_start.tolist(), counts.tolist(), strict=True):
            rng.shuffle(order[s : s + n])
    full, q = spec.cell_steps(num_replicas)
    steps = spec.num_steps(num_replicas)
    total = int(steps.sum())
    step_cell = np.repeat(np.arange(n_cells), steps)
    step_j = np.arange(total) - np.repeat(np.cumsum(steps) - steps, steps)
    u = np.random.default_rng(key_ss).random(total) if shuffle else 0.5
    key = (step_j + u) / steps[step_cell]
    pick = np.lexsort((step_cell, key))
    sc, sj = step_cell[pick], step_j[pick]
    bsz = spec.cells.batch[sc]
    base = sj * num_replicas * bsz
    start, size = base + rank * bsz, bsz.copy()
    last = sj == full[sc]
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
    offsets = np.concatenate([[0], np.cumsum(size)])
    within = np.arange(offsets[-1]) - np.repeat(offsets[:-1], size)
    pos = (np.repeat(start, size) + within) % np.repeat(counts[sc], size)
    indices = order[pos + np.repeat(cell_start[sc], size)]
    return EpochPlan(indices=indices, offsets=offsets, cells=sc, partial=last)
