"""BucketSpec: which cell (planned batch shape) each sample belongs to, fitted once per dataset."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._plan_inputs import (
    check_budget,
    group_boundaries,
    parse_groups,
    parse_lengths,
    per_input,
)
from bucketloader._plan_joint import (
    batch_from_size,
    cover_table,
    encode,
    merge_cells,
    resolve_size,
    size_values,
)
from bucketloader._validation import check_choice, check_int
from bucketloader.boundaries import check_boundaries
from bucketloader.solve import compute_boundaries

LAST_BATCH = ("drop", "fill", "keep", "pad")
_MAX_LATTICE = 1 << 22


@dataclass(frozen=True, eq=False)
class BucketSpec:
    """The shape side of a sampler: per-sample cells, each cell's padded lengths and batch size.

    A *cell* is one planned batch shape ``(B, L_1, ..., L_D)``: a bucket for plain lengths, a
    joint cell of per-input buckets for several inputs, always within one group. Build one with
    :meth:`build`; :func:`~bucketloader.plan.plan_epoch` turns it into an epoch of batches.

    Attributes:
        lengths: the declared lengths, ``(N,)`` or ``(N, D)``.
        input_names: names of the bucketed inputs.
        groups: group id per sample, or ``None``.
        group_values: the distinct group ids (``(0,)`` without groups).
        boundaries: ``boundaries[g][d]``: boundaries of input ``d`` in group ``g``.
        cell_of_sample: ``(N,)`` cell id of every sample.
        cell_lengths: ``(K, D)`` padded lengths of every cell.
        cell_group: ``(K,)`` group index of every cell.
        cell_batch: ``(K,)`` full batch size ``B`` of every cell.
        last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"``.
        lookup: per group, lattice code → cell id (the covering cell for unoccupied codes).
        cover: per group, lattice code → smallest covering cell id (``-1`` if none).

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> spec.cell_lengths.ravel().tolist(), spec.cell_batch.tolist(), spec.counts.tolist()
        ([4, 10], [2, 2], [2, 3])
    """

    lengths: np.ndarray
    input_names: tuple[str, ...]
    groups: np.ndarray | None
    group_values: tuple[int, ...]
    boundaries: tuple[tuple[np.ndarray, ...], ...]
    cell_of_sample: np.ndarray
    cell_lengths: np.ndarray
    cell_group: np.ndarray
    cell_batch: np.ndarray
    last_batch: str
    lookup: tuple[np.ndarray, ...]
    cover: tuple[np.ndarray, ...]

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """Samples per cell."""
        return np.bincount(self.cell_of_sample, minlength=self.cell_lengths.shape[0])

    @functools.cached_property
    def by_cell(self) -> np.ndarray:
        """Sample indices sorted by cell, in index order within a cell (the unshuffled order)."""
        cells = self.cell_of_sample
        if (
            self.cell_lengths.shape[0] <= 1 << 16
        ):  # 16-bit keys: numpy's stable sort is a radix sort
            cells = cells.astype(np.uint16)
        return np.argsort(cells, kind="stable")

    @functools.cached_property
    def digest(self) -> str:
        """Short SHA-256 of everything that shapes an epoch (for strict state loading)."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.cell_of_sample, dtype=np.int32).tobytes())
        for arr in (self.cell_lengths, self.cell_batch, self.cell_group):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
        h.update(self.last_batch.encode())
        return h.hexdigest()[:16]

    @classmethod
    def build(
        cls,
        lengths: Any,
        *,
        num_buckets: Any = None,
        strategy: Any = None,
        boundaries: Any = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        batch_multiple_of: int = 1,
        size: Any = "sum",
        max_shapes: int | None = None,
        groups: Any = None,
        last_batch: str = "pad",
        cache: Any = None,
    ) -> BucketSpec:
        """Fit boundaries (per input, per group), form cells and size their batches.

        Args:
            lengths: ``(N,)`` lengths, ``(N, D)`` lengths of D inputs, or a mapping
                name → ``(N,)`` lengths.
            num_buckets: buckets per input (default 8): an int, or one per input (a sequence or
                a mapping name → int).
            strategy: name or callable (default ``"optimal"``), or one per input.
            boundaries: precomputed boundaries instead of ``num_buckets``/``strategy``: an array
                (one input), a sequence / mapping name → array (several), or a mapping
                group → those.
            batch_size: the same ``B`` for every cell; or
            max_tokens: ``B = max_tokens // size(cell)``, rounded down to ``batch_multiple_of``.
            batch_multiple_of: round variable batch sizes down to a multiple of this.
            size: how ``max_tokens`` counts a padded shape: ``"sum"`` (source + target),
                ``"prod"`` (height × width) or a callable on the padded lengths tuple.
            max_shapes: merge rare joint cells into covering ones until each group has at most
                this many cells (see :func:`~bucketloader._plan_joint.merge_cells`).
            groups: ``(N,)`` int group id per sample (e.g. the dataset of a ``ConcatDataset``):
                boundaries are fitted per group and batches never mix groups.
            last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"`` (see
                :class:`~bucketloader.sampler.BucketSampler`).
            cache: passed to :func:`~bucketloader.solve.compute_boundaries`: ``None`` (solve
                every time), ``True`` (the default :class:`~bucketloader.cache.BucketCache`) or a
                cache; a slow strategy (``"lp"``) is then solved once per job and dataset.
        """
        last_batch = check_choice("last_batch", last_batch, LAST_BATCH)
        size = resolve_size(size)
        declared, table, names = parse_lengths(lengths)
        n = table.shape[0]
        batch_size, max_tokens = check_budget(batch_size, max_tokens)
        batch_multiple_of = check_int("batch_multiple_of", batch_multiple_of, minimum=1)
        if max_shapes is not None:
            max_shapes = check_int("max_shapes", max_shapes, minimum=1)
        gids, gvals = parse_groups(groups, n)
        if boundaries is not None and (num_buckets is not None or strategy is not None):
            raise ValueError(
                "pass either boundaries (precomputed) or num_buckets/strategy (fitted), not both"
            )
        ks_in = per_input("num_buckets", 8 if num_buckets is None else num_buckets, names)
        ks_in = [check_int("num_buckets", k, minimum=1) for k in ks_in]
        strategies = per_input("strategy", strategy or "optimal", names, scalar=(str,))

        all_b: list[tuple[np.ndarray, ...]] = []
        lookups: list[np.ndarray] = []
        covers: list[np.ndarray] = []
        cells: list[np.ndarray] = []
        cgroups: list[np.ndarray] = []
        cell_of = np.empty(n, dtype=np.int64)
        for gi, gval in enumerate(gvals):
            sel = slice(None) if gids is None else np.flatnonzero(gids == gi)
            sub = table[sel]
            given = group_boundaries(boundaries, gval, gvals, names)
            bs = []
            for d, name in enumerate(names):
                label = "boundaries" if len(names) == 1 else f"boundaries[{name!r}]"
                if len(gvals) > 1:
                    label += f" (group {gval})"
                if given is None:
                    b = compute_boundaries(sub[:, d], ks_in[d], strategy=strategies[d], cache=cache)
                else:
                    b = check_boundaries(given[d], max_length=int(sub[:, d].max()), name=label)
                bs.append(b)
            ks = [b.size for b in bs]
            if int(np.prod(ks)) > _MAX_LATTICE:
                raise ValueError(
                    f"{' x '.join(map(str, ks))} joint cells are too many; use fewer num_buckets"
                )
            code = _joint_code(bs, ks, sub)
            lattice_counts = np.bincount(code, minlength=int(np.prod(ks)))
            occ = np.flatnonzero(lattice_counts)
            occ_cells = np.stack(np.unravel_index(occ, ks), axis=1).astype(np.int64)
            lat_size = _lattice_size(bs, ks, size)
            occ_counts = lattice_counts[occ]
            if max_shapes is not None and occ.size > max_shapes:
                final, mapping = merge_cells(occ_cells, occ_counts, lat_size, ks, max_shapes)
            else:
                final, mapping = occ_cells, np.arange(occ.size)
            offset = sum(c.shape[0] for c in cells)
            cover = cover_table(final, lat_size[encode(final, ks)], ks)
            cover = np.where(cover >= 0, cover + offset, -1)
            lookup = cover.copy()
            lookup[occ] = mapping + offset
            cell_of[sel] = lookup[code]
            all_b.append(tuple(bs))
            lookups.append(lookup)
            covers.append(cover)
            cells.append(np.stack([bs[d][final[:, d]] for d in range(len(bs))], axis=1))
            cgroups.append(np.full(final.shape[0], gi, dtype=np.int64))
        cell_lengths = np.concatenate(cells).astype(np.int64)
        csize = size_values(cell_lengths, size)
        cell_batch = batch_from_size(
            csize, batch_size=batch_size, max_tokens=max_tokens, multiple_of=batch_multiple_of
        )
        if (cell_batch < 1).any() and max_tokens is not None:
            _raise_small_budget(
                cell_batch, csize, cell_of, table, names, size, max_tokens, batch_multiple_of
            )
        for arr in (cell_of, cell_lengths, cell_batch):
            arr.setflags(write=False)
        return cls(
            lengths=declared,
            input_names=names,
            groups=None if gids is None else np.asarray(groups),
            group_values=gvals,
            boundaries=tuple(all_b),
            cell_of_sample=cell_of,
            cell_lengths=cell_lengths,
            cell_group=np.concatenate(cgroups),
            cell_batch=cell_batch,
            last_batch=last_batch,
            lookup=tuple(lookups),
            cover=tuple(covers),
        )


def _joint_code(bs: list[np.ndarray], ks: list[int], table: np.ndarray) -> np.ndarray:
    """Mixed-radix cell code of every sample, equal to ``encode`` of its per-input buckets."""
    code: np.ndarray | None = None
    for d, b in enumerate(bs):
        i = _bucket_of(b, table[:, d])
        code = i if code is None else code * ks[d] + i
    return code  # type: ignore[return-value]


def _bucket_of(b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``np.searchsorted(b, x)`` (the boundary convention); a table lookup when x spans little."""
    hi = int(x.max())
    if hi <= 4 * x.size + 1024:  # x >= 0 is validated upstream
        return np.searchsorted(b, np.arange(hi + 1))[x]
    return np.searchsorted(b, x)


def _lattice_size(bs: list[np.ndarray], ks: list[int], size: Any) -> np.ndarray:
    idx = np.unravel_index(np.arange(int(np.prod(ks))), ks)
    padded = np.stack([b[i] for b, i in zip(bs, idx, strict=True)], axis=1)
    return size_values(padded, size)


def _raise_small_budget(
    cell_batch: np.ndarray,
    csize: np.ndarray,
    cell_of: np.ndarray,
    table: np.ndarray,
    names: tuple[str, ...],
    size: Any,
    max_tokens: int,
    multiple: int,
) -> None:
    worst = int(np.argmax(np.where(cell_batch < 1, csize, -1)))
    members = np.flatnonzero(cell_of == worst)
    longest = int(members[np.argmax(size_values(table[members], size))])
    value = table[longest].tolist()
    shown = value[0] if len(names) == 1 else dict(zip(names, value, strict=True))
    need = int(csize[worst]) * multiple
    raise ValueError(
        f"max_tokens={max_tokens} is below the padded size {int(csize[worst])} of the largest "
        f"bucket (times batch_multiple_of={multiple}); its longest sample is index {longest} "
        f"with length {shown}. Raise max_tokens to at least {need}, or drop or truncate the "
        "longest samples"
    )
