"""The planned cells of a stream: per-input boundaries, their lattice, a batch size per cell.

One input: cell ``i`` is bucket ``i`` (``assign_buckets``, through a lookup table when the last
boundary is small). Several inputs (``length_fn=("input_ids", "labels")``): a sample's cell is
its bucket per input, so the cells are the full lattice of per-input buckets, coded in mixed
radix (first input most significant), and the batch size of a cell follows the sum of its padded
lengths (``max_tokens // (L_1 + ... + L_D)``), as :func:`bucketloader.plan.batch_sizes`.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any

import numpy as np

from bucketloader.boundaries import assign_buckets, check_boundaries

_TABLE_LIMIT = 1 << 20
MAX_CELLS = 4096


class Layout:
    """Per-input boundaries, the lattice of cells and each cell's batch size."""

    def __init__(
        self,
        bounds: list[Any],
        names: tuple[str, ...],
        *,
        batch_size: int | None,
        max_tokens: int | None,
    ) -> None:
        from bucketloader.plan import batch_sizes

        self.names = names
        self.bounds = [
            check_boundaries(b, name="boundaries" if len(names) == 1 else f"boundaries[{n!r}]")
            for b, n in zip(bounds, names, strict=True)
        ]
        self.ks = [b.size for b in self.bounds]
        if int(np.prod(self.ks)) > MAX_CELLS:
            raise ValueError(
                f"{' x '.join(map(str, self.ks))} buckets per input make "
                f"{int(np.prod(self.ks))} shapes (more than {MAX_CELLS}); use fewer buckets"
            )
        grids = np.meshgrid(*[np.arange(k) for k in self.ks], indexing="ij")
        idx = np.stack(grids, axis=-1).reshape(-1, len(self.ks))
        self.cells = np.stack([b[idx[:, d]] for d, b in enumerate(self.bounds)], axis=1)
        sizes = batch_sizes(self.cells, batch_size=batch_size, max_tokens=max_tokens)
        if (sizes < 1).any():
            c = int(np.argmax(sizes < 1))
            raise ValueError(
                f"max_tokens={max_tokens} fits no sample of padded length(s) "
                f"{self.cells[c].tolist()}; raise max_tokens to at least "
                f"{int(self.cells.sum(axis=1).max())}"
            )
        self.sizes = tuple(int(x) for x in sizes)
        self.limits = [int(b[-1]) for b in self.bounds]
        self.blists = [b.tolist() for b in self.bounds]
        self._request = (batch_size, max_tokens)
        one = len(names) == 1 and self.limits[0] < _TABLE_LIMIT
        self.table = (
            assign_buckets(np.arange(self.limits[0] + 1), self.bounds[0]).tolist() if one else None
        )

    def cell(self, lengths: tuple[int, ...]) -> int:
        """Cell id of a sample whose lengths are within the limits."""
        code = 0
        for length, blist, k in zip(lengths, self.blists, self.ks, strict=True):
            code = code * k + bisect.bisect_left(blist, length)  # == assign_buckets per input
        return code

    def shapes(self, last_batch: str) -> list[tuple[int, ...]]:
        """Every batch shape, sorted; ``"keep"`` adds every smaller batch size per cell."""
        full = [(n, *map(int, c)) for n, c in zip(self.sizes, self.cells, strict=True)]
        if last_batch == "keep":
            full += [(r, *s[1:]) for s in full for r in range(1, s[0])]
        return sorted(full)

    def shape_table(self, last_batch: str) -> Any:
        """A :class:`~bucketloader.plan.ShapeTable` with exactly these cells and shapes."""
        from bucketloader.plan import BucketSpec, shape_table

        batch_size, max_tokens = self._request
        lengths: Any
        bounds: Any
        if len(self.names) == 1:  # unnamed: the collator pads every sequence field along
            lengths, bounds = self.cells[:, 0], self.bounds[0]
        else:  # named after the keys: PadCollator matches sample keys to inputs by name
            lengths = dict(zip(self.names, self.cells.T, strict=True))
            bounds = dict(zip(self.names, self.bounds, strict=True))
        spec = BucketSpec.build(  # one representative per cell: every cell is planned
            lengths,
            boundaries=bounds,
            batch_size=batch_size,
            max_tokens=max_tokens,
            last_batch=last_batch,
        )
        table = shape_table(spec)
        return dataclasses.replace(table, shapes=tuple(self.shapes(last_batch)))
