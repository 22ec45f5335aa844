"""ShapeTable: the promised batch shapes, small and picklable (what the collator keeps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._plan_joint import encode


@dataclass(frozen=True, eq=False)
class ShapeTable:
    """Every batch shape an epoch can produce, and which one a batch of samples must take.

    Built by the sampler (:attr:`BucketSampler.shape_table <bucketloader.sampler.BucketSampler>`)
    or :func:`~bucketloader.plan.shape_table`; holds only boundaries and small per-cell tables, so
    it pickles cheaply into DataLoader workers.

    Attributes:
        shapes: every batch shape ``(B, L_1, ..., L_D)`` an epoch can produce, sorted. With
            ``last_batch="keep"`` the smaller partial-batch shapes are listed too.
        input_names: names of the bucketed inputs (``("length",)`` for plain lengths).
        last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"``.
        cell_shapes: full batch shape of every cell (cell id → shape).
        boundaries: ``boundaries[g][d]``, boundaries of input ``d`` in group index ``g``.
        group_values: the distinct group ids, or ``None`` without per-dataset groups.
        lookup: per group, lattice code → cell id.
        cover: per group, lattice code → smallest covering cell id (``-1`` if none).

    Example:
        >>> from bucketloader.plan import BucketSpec, shape_table
        >>> table = shape_table(BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2))
        >>> table.shapes
        ((2, 4), (2, 10))
        >>> table.target([7, 9])
        (2, 10)
    """

    shapes: tuple[tuple[int, ...], ...]
    input_names: tuple[str, ...]
    last_batch: str
    cell_shapes: tuple[tuple[int, ...], ...]
    boundaries: tuple[tuple[np.ndarray, ...], ...]
    group_values: tuple[int, ...] | None
    lookup: tuple[np.ndarray, ...]
    cover: tuple[np.ndarray, ...]

    def target(self, lengths: Any, *, group: Any = None) -> tuple[int, ...]:
        """The planned full batch shape ``(B, L_1, ..., L_D)`` for a batch with these lengths.

        ``B`` is the planned full batch size of the cell even when the batch holds fewer samples
        (the collator pads rows under ``last_batch="pad"``). Samples of one planned batch share a
        cell; a batch mixing cells gets the smallest planned cell covering all its samples.

        Args:
            lengths: actual lengths of the samples, ``(n,)`` for one input or ``(n, D)``.
            group: the batch's group id (required with per-dataset groups).

        Raises:
            ValueError: empty batch, wrong shape, missing/unknown group, or a length no planned
                cell covers (naming the position in the batch and the value).
        """
        d = len(self.input_names)
        arr = np.asarray(lengths)
        if arr.ndim == 1 and d == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[1] != d or arr.shape[0] == 0:
            raise ValueError(
                f"lengths must be a non-empty array of shape (n,) or (n, {d}) for inputs "
                f"{list(self.input_names)}, got shape {arr.shape}"
            )
        gi = self._group_index(group)
        bs = self.boundaries[gi]
        where = "" if self.group_values is None else f" in group {self.group_values[gi]}"
        for j, b in enumerate(bs):
            over = arr[:, j] > b[-1]
            if over.any():
                pos = int(np.argmax(over))
                name = "" if d == 1 else f"input {self.input_names[j]!r} "
                raise ValueError(
                    f"sample at position {pos} of the batch has {name}length "
                    f"{int(arr[pos, j])}, beyond the longest planned length {int(b[-1])}{where}; "
                    "the sampler was planned on other lengths: rebuild it on the lengths your "
                    "dataset actually produces"
                )
        ks = [b.size for b in bs]
        idx = np.stack([np.searchsorted(b, arr[:, j]) for j, b in enumerate(bs)], axis=1)
        cells = self.lookup[gi][encode(idx, ks)]
        cell = int(cells[0])
        if cell < 0 or (cells != cell).any():
            cell = int(self.cover[gi][encode(idx.max(axis=0), ks)])
        if cell < 0:
            raise ValueError(
                f"no planned shape covers the batch's longest lengths "
                f"{dict(zip(self.input_names, arr.max(axis=0).tolist(), strict=True))}{where}; "
                "rebuild the sampler on the lengths your dataset actually produces"
            )
        return self.cell_shapes[cell]

    def _group_index(self, group: Any) -> int:
        if self.group_values is None:
            if group is not None:
                raise ValueError(
                    f"this plan has no per-dataset groups, got group={group!r}; pass group=None"
                )
            return 0
        if group is None:
            raise ValueError(
                "this plan buckets per dataset (groups), so target() needs group=<the batch's "
                "group id>; PadCollator reads it from each sample's group field "
                "(see bucketloader.sampler.GroupedDataset)"
            )
        values = np.unique(np.asarray(group).ravel())
        if values.size != 1 or int(values[0]) not in self.group_values:
            raise ValueError(
                f"group must be one of {list(self.group_values)} (one group per batch), "
                f"got group={group!r}"
            )
        return self.group_values.index(int(values[0]))

    def __repr__(self) -> str:
        return (
            f"ShapeTable({len(self.shapes)} shapes, inputs={list(self.input_names)}, "
            f"last_batch={self.last_batch!r})"
        )
