"""Promotion of leftovers: a cell's spare slots take samples of the shorter cells it covers.

NOTE [ Promotion of leftovers ]
Even batches (NOTE [ Even batches ] in :mod:`bucketloader.plan.budget`) leave each cell fewer
than ``R·m`` filler rows (``R`` ranks, ``m`` steps): little on one rank, but over 8 ranks a small
set's many one-step cells add up (E. coli k=16: 2.15% of the real elements). A sampler with a
token budget and ``last_batch="pad"`` fills those rows with *promoted* samples instead: samples of
a shorter cell that the longer cell covers (every padded length at least theirs; for one input,
any longer bucket of the same group), padded to the longer cell's shape, as fairseq's
``batch_by_size`` puts one length's leftovers in the next length's batches.

The schedule (:func:`promote`) depends only on the per-cell counts, the full batch sizes ``B`` and
``R``, so it is the same on every rank and in every epoch. Cells are settled from the largest
padded size down, the order in which a covering cell always comes before the cells it covers:

1. Cell ``c`` has ``n`` samples and the covering cells settled before it have ``F`` free slots.
   As many of its samples as fit move up (``u = min(F, n)``), unless the cell then keeps too few
   to give each of its batches one of its own (below): then fewer move, or none.
2. The ``w = n - u`` samples that stay plan the cell as even batches do:
   ``m = ceil(w / (R·B))`` steps of ``ceil(w / (R·m))`` rows (``multiple_of`` respected); a cell
   with ``w = 0`` has no steps and its shape is not in ``shapes``.
3. Its ``R·m·rows - w`` spare slots become free for the cells settled after it (the ones it
   covers), filled largest padded size first, so what stays empty is the cheapest filler.

Every batch holds at least one sample of its own cell, first (the plan deals the cell's own
samples first and its promoted ones after): :meth:`ShapeTable.target
<bucketloader.plan.ShapeTable.target>` takes a batch whose first sample's cell covers every
sample at that cell, so a plain ``DataLoader`` with the sampler's collator pads every batch to
its step's shape on every rank. A cell that cannot give each batch one of its own (fewer samples
than batches: under 8 ranks a cell of 5, or single-row batches) takes no promoted sample and,
as before, a rank without a sample repeats one.

Against even batches the same samples fill no more slots in any cell (``w <= n``), so the padded
elements never grow; steps never grow either (``m`` is computed on ``w <= n``) and may shrink. A
promoted sample costs its own padding to the longer shape, a filler row it replaces cost the whole
row. Which samples move is random per epoch (the tail of the cell's shuffled order), so no sample
is always padded further. ``report()`` counts them as ``promoted``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader.plan.budget import even_batch, size_values
from bucketloader.plan.permute import ShuffledOrder
from bucketloader.plan.spec import BucketSpec


@dataclass(frozen=True, eq=False)
class Promotion:
    """The promotion schedule of a spec over ``R`` ranks (NOTE [ Promotion of leftovers ]).

    Attributes:
        steps: ``(K,)`` global steps of every cell.
        rows: ``(K,)`` rows of every cell's batches.
        stay: ``(K,)`` samples of every cell batched in their own cell (the rest move up).
        moves: ``(P, 3)`` rows ``(from cell, to cell, samples)``, in the order the plan deals
            them (by source cell, then destination).
    """

    steps: np.ndarray
    rows: np.ndarray
    stay: np.ndarray
    moves: np.ndarray

    @property
    def num_promoted(self) -> int:
        """Samples batched in a longer cell in every epoch (over all ranks)."""
        return int(self.moves[:, 2].sum()) if self.moves.size else 0

    @property
    def num_steps(self) -> int:
        """Global steps of an epoch (every rank's number of batches)."""
        return int(self.steps.sum())


def promotes(spec: BucketSpec) -> bool:
    """Whether a sampler over ``spec`` promotes leftovers: a token budget with ``balance`` and
    ``promote`` on (the defaults) and ``last_batch="pad"``."""
    budget = None if spec.rule is None else spec.rule.budget
    return budget is not None and budget.balance and budget.promote and spec.last_batch == "pad"


def promote(spec: BucketSpec, num_replicas: int = 1) -> Promotion:
    """The schedule of NOTE [ Promotion of leftovers ] for ``spec`` over ``num_replicas`` ranks.

    Args:
        spec: a spec with a token budget (its full batch sizes are recomputed from the budget).
        num_replicas: ranks ``R``.

    Example:
        >>> spec = BucketSpec.build([2] * 9 + [4] * 7, boundaries=[2, 4], max_tokens=16)
        >>> p = promote(spec, num_replicas=2)
        >>> p.steps.tolist(), p.rows.tolist(), p.stay.tolist(), p.moves.tolist()
        ([1, 1], [4, 4], [8, 7], [[0, 1, 1]])
    """
    rule = spec.rule
    budget = None if rule is None else rule.budget
    if rule is None or budget is None:
        raise ValueError("promotion needs a token budget (max_tokens=...)")
    return promote_counts(
        spec.counts,
        rule.sizes(spec.cell_lengths, spec.size),
        spec.cell_lengths,
        size_values(spec.cell_lengths, spec.size),
        groups=spec.cell_group,
        num_replicas=num_replicas,
        multiple_of=budget.multiple_of,
    )


def promote_counts(
    counts: np.ndarray,
    full: np.ndarray,
    lengths: np.ndarray,
    size: np.ndarray,
    *,
    groups: np.ndarray | None = None,
    num_replicas: int = 1,
    multiple_of: int = 1,
) -> Promotion:
    """:func:`promote` from the per-cell arrays alone (a histogram's counts suffice).

    Args:
        counts: ``(K,)`` samples per cell.
        full: ``(K,)`` full batch size ``B`` of every cell.
        lengths: ``(K, D)`` padded lengths of every cell.
        size: ``(K,)`` padded size of every cell (the budget's ``size`` rule).
        groups: ``(K,)`` group of every cell (cells of different groups never mix).
        num_replicas: ranks ``R``.
        multiple_of: the budget's ``multiple_of``.

    Example:
        >>> p = promote_counts(np.array([9, 7]), np.array([8, 4]), np.array([[2], [4]]),
        ...                    np.array([2, 4]), num_replicas=2)
        >>> p.steps.tolist(), p.rows.tolist(), p.moves.tolist()
        ([1, 1], [4, 4], [[0, 1, 1]])
    """
    counts = np.asarray(counts, dtype=np.int64)
    full = np.asarray(full, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(counts.size, -1)
    size = np.asarray(size, dtype=np.int64)
    group = np.zeros(counts.size, dtype=np.int64) if groups is None else np.asarray(groups)
    k = counts.size
    order = np.lexsort((*lengths.T[::-1], size))[::-1]  # largest first: covers come first
    r = num_replicas
    steps = np.zeros(k, dtype=np.int64)
    rows = full.copy()
    stay = counts.copy()
    free = np.zeros(k, dtype=np.int64)
    moves: list[tuple[int, int, int]] = []
    settled: list[int] = []
    for c in order.tolist():
        n, b = int(counts[c]), max(int(full[c]), 1)
        covers = [
            d
            for d in settled
            if free[d] > 0 and group[d] == group[c] and bool((lengths[d] >= lengths[c]).all())
        ]
        room = int(free[covers].sum()) if covers else 0
        w = n - min(room, n)
        while 0 < w < n and w < r * -(-w // (r * b)):  # too few to anchor its batches
            w += 1
        up = n - w
        for d in covers:  # fill the dearest spare slots first (they are in size order)
            take = min(up, int(free[d]))
            if take:
                moves.append((c, d, take))
                free[d] -= take
                up -= take
        stay[c] = w
        if w:
            m = -(-w // (r * b))
            rows[c] = int(even_batch([w], [b], r, multiple_of)[0])
            steps[c] = m
            if w >= r * m:  # each batch has one of its own first: it may take promoted ones
                free[c] = r * m * rows[c] - w
        settled.append(c)
    moves.sort()
    arr = np.array(moves, dtype=np.int64).reshape(-1, 3)
    for a in (steps, rows, stay, arr):
        a.setflags(write=False)
    return Promotion(steps=steps, rows=rows, stay=stay, moves=arr)


def promoted_spec(spec: BucketSpec, num_replicas: int) -> tuple[BucketSpec, Promotion]:
    """``spec`` with every cell at its promoted rows, and the :class:`Promotion`."""
    p = promote(spec, num_replicas)
    if np.array_equal(p.rows, spec.cells.batch):
        return spec, p
    out = dataclasses.replace(spec, cells=dataclasses.replace(spec.cells, batch=p.rows))
    for name in ("kept", "counts", "by_cell"):  # cached views that do not depend on B
        if name in spec.__dict__:
            out.__dict__[name] = spec.__dict__[name]
    return out, p


def promoted_order(
    order: Any, cell_start: np.ndarray, counts: np.ndarray, p: Promotion
) -> tuple[Any, np.ndarray]:
    """Samples regrouped by the cell that batches them: each cell's own samples that stay (the
    head of its shuffled segment), then the samples promoted into it (by source cell).
    Returns ``(order, start)``; cell ``c`` holds ``order[start[c] : start[c + 1]]``."""
    k = counts.size
    parts: list[list[Any]] = [[order[cell_start[c] : cell_start[c] + p.stay[c]]] for c in range(k)]
    taken = p.stay.astype(np.int64).copy()
    for src, dst, n in p.moves.tolist():
        a = int(cell_start[src] + taken[src])
        parts[dst].append(order[a : a + n])
        taken[src] += n
    held = np.array([sum(x.size for x in ps) for ps in parts], dtype=np.int64)
    flat = [x for ps in parts for x in ps]
    if isinstance(order, ShuffledOrder):  # (a lazy order: NOTE [ Counter-based shuffle ])
        out: Any = ShuffledOrder.concat(flat, order.base)
    else:
        out = np.concatenate(flat) if flat else order[:0]
    return out, np.concatenate([[0], np.cumsum(held)])


def interleave_steps(
    steps: np.ndarray, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """Steps ``(cell, j)`` interleaved so cells drain evenly (NOTE [ Epoch plan ] 3)."""
    total = int(steps.sum())
    step_cell = np.repeat(np.arange(steps.size), steps)
    step_j = np.arange(total) - np.repeat(np.cumsum(steps) - steps, steps)
    u = rng.random(total) if rng is not None else 0.5
    pick = np.lexsort((step_cell, (step_j + u) / np.maximum(steps[step_cell], 1)))
    return step_cell[pick], step_j[pick]


#: Samples dealt per chunk (bounded temporaries; the result is the only array of the epoch).
_DEAL = 1 << 20


def deal(
    p: Promotion,
    start: np.ndarray,
    order: Any,
    num_replicas: int,
    rank: int,
    sc: np.ndarray,
    sj: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s batches of the steps ``(sc, sj)``: ``(indices, offsets)``.

    Cell ``c``'s ``M = R·m`` batches share its ``w`` own samples evenly, the extra ones to the
    first batches, then its ``P`` promoted samples, the extra ones to the last batches, so no
    batch exceeds the cell's rows and every batch starts with a sample of its own cell. A batch
    without an own sample (a cell with fewer samples than batches, which takes no promoted
    ones) repeats one, as ``last_batch="pad"`` does.
    """
    r = num_replicas
    held = np.diff(start)
    w = p.stay[sc]
    pm = held[sc] - w
    mm = r * p.steps[sc]
    b = sj * r + rank
    nb = w // mm + (b < w % mm)
    ns = b * (w // mm) + np.minimum(b, w % mm)
    repeat = nb == 0
    ns = np.where(repeat, b % np.maximum(w, 1), ns)
    nb = np.maximum(nb, 1)
    cut = mm - pm % mm
    pb = pm // mm + (b >= cut)
    ps = b * (pm // mm) + np.maximum(b - cut, 0)
    size = nb + pb
    offsets = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)
    dtype = order.base.dtype if isinstance(order, ShuffledOrder) else np.asarray(order).dtype
    out = np.empty(int(offsets[-1]), dtype=dtype)
    own_at, promoted_at = start[sc] + ns, start[sc] + w + ps - nb
    i = 0
    while i < size.size:  # batches in chunks of about _DEAL samples (bounded temporaries)
        j = int(np.searchsorted(offsets, offsets[i] + _DEAL, side="right")) - 1
        j = min(max(j, i + 1), size.size)
        sz, a = size[i:j], int(offsets[i])
        within = np.arange(int(offsets[j]) - a) - np.repeat(offsets[i:j] - a, sz)
        own = within < np.repeat(nb[i:j], sz)
        pos = np.where(own, np.repeat(own_at[i:j], sz), np.repeat(promoted_at[i:j], sz))
        out[a : int(offsets[j])] = order[pos + within]
        i = j
    return out, offsets
