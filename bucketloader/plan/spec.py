"""BucketSpec: which cell (planned batch shape) each sample belongs to, fitted once per dataset.

A spec is *what shapes the batches*: the lengths, the boundaries fitted on them (per input, per
group), the cells and their batch sizes, and the last-batch policy. *How an epoch is iterated*
(shuffle, seed, ranks, resume) is the sampler's: :class:`~bucketloader.BucketSampler` takes either
lengths and these options, or a ready spec.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._types import LAST_BATCH, Cache, Size, Strategy
from bucketloader._validation import as_lengths, check_choice, check_int
from bucketloader.boundaries import check_boundaries, round_up
from bucketloader.plan.cells import Cells, check_budget, lattice_codes, resolve_size, size_values
from bucketloader.plan.table import ShapeTable
from bucketloader.solve import compute_boundaries

#: Buckets per input when neither ``num_buckets`` nor ``boundaries`` is given.
DEFAULT_NUM_BUCKETS = 8


@dataclass(frozen=True, eq=False)
class BucketSpec:
    """The shape side of a sampler: the planned cells and which cell each sample belongs to.

    Build one with :meth:`build`; :func:`~bucketloader.plan.plan_epoch` turns it into an epoch of
    batches and :meth:`shape_table` lists the shapes it promises.

    Attributes:
        lengths: the declared lengths, ``(N,)`` or ``(N, D)``.
        groups: group id per sample, or ``None``.
        cells: the planned :class:`~bucketloader.plan.Cells`.
        cell_of_sample: ``(N,)`` cell id of every sample.
        last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"``.

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> spec.cell_lengths.ravel().tolist(), spec.cell_batch.tolist(), spec.counts.tolist()
        ([4, 10], [2, 2], [2, 3])
    """

    lengths: np.ndarray
    groups: np.ndarray | None
    cells: Cells
    cell_of_sample: np.ndarray
    last_batch: str

    # -- views of the cells -------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the bucketed inputs."""
        return self.cells.input_names

    @property
    def group_values(self) -> tuple[int, ...]:
        """The distinct group ids (``(0,)`` without groups)."""
        return self.cells.group_values or (0,)

    @property
    def boundaries(self) -> tuple[tuple[np.ndarray, ...], ...]:
        """``boundaries[g][d]``: boundaries of input ``d`` in group index ``g``."""
        return self.cells.boundaries

    @property
    def cell_lengths(self) -> np.ndarray:
        """``(K, D)`` padded lengths of every cell."""
        return self.cells.lengths

    @property
    def cell_batch(self) -> np.ndarray:
        """``(K,)`` full batch size of every cell."""
        return self.cells.batch

    @property
    def cell_group(self) -> np.ndarray:
        """``(K,)`` group index of every cell."""
        return self.cells.group

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """Samples per cell."""
        return np.bincount(self.cell_of_sample, minlength=self.cells.num_cells)

    @functools.cached_property
    def by_cell(self) -> np.ndarray:
        """Sample indices sorted by cell, in index order within a cell (the unshuffled order)."""
        cells = self.cell_of_sample
        if self.cells.num_cells <= 1 << 16:  # 16-bit keys: numpy's stable sort is a radix sort
            cells = cells.astype(np.uint16)
        return np.argsort(cells, kind="stable")

    @functools.cached_property
    def digest(self) -> str:
        """Short SHA-256 of everything that shapes an epoch (for strict state loading)."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.cell_of_sample, dtype=np.int32).tobytes())
        for arr in (self.cells.lengths, self.cells.batch, self.cells.group):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
        h.update(self.last_batch.encode())
        return h.hexdigest()[:16]

    def cell_steps(self, num_replicas: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Per cell: ``(full global steps, samples left q)`` for ``num_replicas`` ranks.

        A global step is ``num_replicas`` batches of one cell (one per rank); the ``q`` samples
        left make one more step unless ``last_batch="drop"`` (NOTE [ last_batch and replicas ]).
        """
        per_step = self.cells.batch * num_replicas
        return self.counts // per_step, self.counts % per_step

    def num_steps(self, num_replicas: int = 1) -> np.ndarray:
        """Global steps of every cell per epoch; their sum is every rank's ``len(sampler)``."""
        full, q = self.cell_steps(num_replicas)
        return full + ((q > 0) & (self.last_batch != "drop"))

    def shape_table(self, num_replicas: int = 1) -> ShapeTable:
        """The :class:`ShapeTable` this spec promises when split over ``num_replicas`` ranks.

        Example:
            >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2,
            ...                         last_batch="keep")
            >>> spec.shape_table().shapes
            ((1, 10), (2, 4), (2, 10))
        """
        num_replicas = check_int("num_replicas", num_replicas, minimum=1)
        full = self.cells.shapes
        full_steps, q = self.cell_steps(num_replicas)
        if self.last_batch in ("pad", "fill"):
            shapes = set(full)
        else:
            shapes = {s for s, f in zip(full, full_steps, strict=True) if f > 0}
        if self.last_batch == "keep":
            part = -(-q // num_replicas)
            shapes |= {(int(p), *s[1:]) for p, s in zip(part, full, strict=True) if p > 0}
        return ShapeTable(
            cells=self.cells, shapes=tuple(sorted(shapes)), last_batch=self.last_batch
        )

    @classmethod
    def build(
        cls,
        lengths: Any,
        *,
        num_buckets: int | Any = None,
        strategy: str | Strategy | Any = None,
        boundaries: Any = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        batch_multiple_of: int = 1,
        pad_to_multiple_of: int = 1,
        size: Size = "sum",
        max_shapes: int | None = None,
        groups: Any = None,
        last_batch: str = "pad",
        cache: Cache | bool | None = None,
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
            pad_to_multiple_of: every boundary a multiple of this (8 or 64 for tensor cores):
                passed to :func:`~bucketloader.compute_boundaries` (the optimum under that
                constraint), given ``boundaries`` are rounded up to it.
            size: how ``max_tokens`` counts a padded shape: ``"sum"`` (source + target),
                ``"prod"`` (height × width) or a callable on the padded lengths tuple.
            max_shapes: merge rare joint cells into covering ones until each group has at most
                this many (see :func:`~bucketloader.plan.cells.merge_cells`).
            groups: ``(N,)`` int group id per sample (e.g. the dataset of a
                :class:`~bucketloader.sampler.GroupedDataset`): boundaries are fitted per group
                and batches never mix groups.
            last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"`` (NOTE [ last_batch and
                replicas ] in :mod:`bucketloader.plan.epoch`).
            cache: passed to :func:`~bucketloader.compute_boundaries`: ``None`` (solve every
                time), ``True`` (the default :class:`~bucketloader.BucketCache`) or a cache; a
                slow strategy (``"lp"``) is then solved once per job and dataset.
        """
        last_batch = check_choice("last_batch", last_batch, LAST_BATCH)
        size = resolve_size(size)
        declared, table, names = parse_lengths(lengths)
        n = table.shape[0]
        batch_size, max_tokens = check_budget(batch_size, max_tokens)
        batch_multiple_of = check_int("batch_multiple_of", batch_multiple_of, minimum=1)
        multiple = check_int("pad_to_multiple_of", pad_to_multiple_of, minimum=1)
        if max_shapes is not None:
            max_shapes = check_int("max_shapes", max_shapes, minimum=1)
        gids, gvals = parse_groups(groups, n)
        if boundaries is not None and (num_buckets is not None or strategy is not None):
            raise ValueError(
                "pass either boundaries (precomputed) or num_buckets/strategy (fitted), not both"
            )
        ks_in = per_input(
            "num_buckets", DEFAULT_NUM_BUCKETS if num_buckets is None else num_buckets, names
        )
        ks_in = [check_int("num_buckets", k, minimum=1) for k in ks_in]
        strategies = per_input("strategy", strategy or "optimal", names, scalar=(str,))

        sels = [
            slice(None) if gids is None else np.flatnonzero(gids == gi) for gi in range(len(gvals))
        ]
        all_b: list[tuple[np.ndarray, ...]] = []
        codes: list[np.ndarray] = []
        for gval, sel in zip(gvals, sels, strict=True):
            sub = table[sel]
            given = group_boundaries(boundaries, gval, gvals, names)
            bs = []
            for d, name in enumerate(names):
                label = "boundaries" if len(names) == 1 else f"boundaries[{name!r}]"
                if len(gvals) > 1:
                    label += f" (group {gval})"
                if given is None:
                    b = compute_boundaries(
                        sub[:, d],
                        ks_in[d],
                        strategy=strategies[d],
                        cache=cache,
                        pad_to_multiple_of=multiple,
                    )
                else:
                    b = check_boundaries(given[d], max_length=int(sub[:, d].max()), name=label)
                    if multiple > 1:
                        b = np.unique(round_up(b, multiple))
                bs.append(b)
            all_b.append(tuple(bs))
            codes.append(lattice_codes(bs, sub))
        occupancy = [
            np.bincount(c, minlength=int(np.prod([b.size for b in bs])))
            for c, bs in zip(codes, all_b, strict=True)
        ]
        cells = Cells.build(
            all_b,
            names,
            group_values=None if gids is None else gvals,
            occupancy=occupancy,
            max_shapes=max_shapes,
            size=size,
            batch_size=batch_size,
            max_tokens=max_tokens,
            batch_multiple_of=batch_multiple_of,
        )
        cell_of = np.empty(n, dtype=np.int64)
        for gi, (sel, code) in enumerate(zip(sels, codes, strict=True)):
            cell_of[sel] = cells.lookup[gi][code]
        if (cells.batch < 1).any() and max_tokens is not None:
            _raise_small_budget(cells, cell_of, table, size, max_tokens, batch_multiple_of)
        cell_of.setflags(write=False)
        return cls(
            lengths=declared,
            groups=None if gids is None else np.asarray(groups),
            cells=cells,
            cell_of_sample=cell_of,
            last_batch=last_batch,
        )


def parse_lengths(lengths: Any) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(declared lengths, (N, D) table, input names)."""
    if isinstance(lengths, Mapping):
        if not lengths:
            raise ValueError("lengths must not be an empty mapping; give name → lengths")
        names = tuple(str(k) for k in lengths)
        cols = [as_lengths(v, name=f"lengths[{k!r}]") for k, v in lengths.items()]
        sizes = {c.size for c in cols}
        if len(sizes) > 1:
            listed = ", ".join(f"{k!r}: {c.size}" for k, c in zip(names, cols, strict=True))
            raise ValueError(f"every input in lengths needs one length per sample, got {listed}")
        table = np.stack(cols, axis=1)
        table.setflags(write=False)
        return table, table, names
    arr = as_lengths(lengths, ndim=(1, 2))
    if np.shares_memory(arr, np.asarray(lengths)):  # keep our own, read-only copy
        arr = arr.copy()
    arr.setflags(write=False)
    if arr.ndim == 1:
        return arr, arr[:, None], ("length",)
    if arr.shape[1] == 0:
        raise ValueError(f"lengths of shape {arr.shape} has no inputs; give (N, D) with D >= 1")
    return arr, arr, tuple(str(d) for d in range(arr.shape[1]))


def parse_groups(groups: Any, n: int) -> tuple[np.ndarray | None, tuple[int, ...]]:
    if groups is None:
        return None, (0,)
    arr = as_lengths(groups, name="groups")
    if arr.size != n:
        raise ValueError(
            f"groups must hold one group id per sample ({n} samples), got {arr.size} group ids"
        )
    values, inverse = np.unique(arr, return_inverse=True)
    return inverse.astype(np.int64), tuple(int(v) for v in values)


def per_input(name: str, value: Any, names: tuple[str, ...], scalar: tuple = ()) -> list[Any]:
    if isinstance(value, Mapping):
        if set(map(str, value)) != set(names):
            raise ValueError(
                f"{name} must give one value per input {list(names)}, got keys {list(value)}"
            )
        lookup = {str(k): v for k, v in value.items()}
        return [lookup[n] for n in names]
    if isinstance(value, (list, tuple)) and not isinstance(value, scalar):
        if len(value) != len(names):
            raise ValueError(
                f"{name} must give one value per input ({len(names)}: {list(names)}), "
                f"got {len(value)} values: {value!r}"
            )
        return list(value)
    return [value] * len(names)


def group_boundaries(
    boundaries: Any, gval: int, gvals: tuple[int, ...], names: tuple[str, ...]
) -> list[Any] | None:
    if boundaries is None:
        return None
    if isinstance(boundaries, Mapping) and set(boundaries) == set(gvals):
        boundaries = boundaries[gval]
    if len(names) == 1 and not isinstance(boundaries, Mapping):
        return [boundaries]
    return per_input("boundaries", boundaries, names, scalar=(np.ndarray,))


def _raise_small_budget(
    cells: Cells,
    cell_of: np.ndarray,
    table: np.ndarray,
    size: Size,
    max_tokens: int,
    multiple: int,
) -> None:
    csize = size_values(cells.lengths, size)
    worst = int(np.argmax(np.where(cells.batch < 1, csize, -1)))
    members = np.flatnonzero(cell_of == worst)
    longest = int(members[np.argmax(size_values(table[members], size))])
    value = table[longest].tolist()
    names = cells.input_names
    shown = value[0] if len(names) == 1 else dict(zip(names, value, strict=True))
    need = int(csize[worst]) * multiple
    raise ValueError(
        f"max_tokens={max_tokens} is below the padded size {int(csize[worst])} of the largest "
        f"bucket (times batch_multiple_of={multiple}); its longest sample is index {longest} "
        f"with length {shown}. Raise max_tokens to at least {need}, or drop or truncate the "
        "longest samples"
    )
