"""A stream's counters, shared by its DataLoader workers with the main process.

NOTE [ A stream's counters across DataLoader workers ]
Under a ``DataLoader`` with ``num_workers > 0`` each worker iterates its own copy of the
``BucketIterable``; the main process's copy never iterates, so counters kept on the object stay
empty there. The stream therefore allocates, when it is built (in the main process, before any
worker starts), one small ``int64`` table in shared memory (``torch.Tensor.share_memory_()``):
one row per worker (a *lane*), with the pass's totals and per-cell batches, rows, real and padded
elements. Forked workers inherit the mapping; spawned ones receive the same shared storage when
the DataLoader pickles the dataset (torch's multiprocessing reductions). A worker writes its own
row only, so the per-sample loop is untouched: its batch count before every batch it hands out,
the other counters every 32 batches and when its pass ends. The main process sums the rows of the
current epoch. The numbers are what the workers have *produced*, which runs ahead of what the
training loop has consumed by the DataLoader's prefetch (``num_workers * prefetch_factor``
batches). Beyond :data:`MAX_LANES` workers the extra workers are not counted (the report says
so).

The same rows give the main process each worker's batch count and whether it finished, which
is all a resume needs (NOTE [ Resuming a stream behind DataLoader workers ] in
:mod:`bucketloader.stream.iterable`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: Workers (lanes) per stream with a row in the table.
MAX_LANES = 64

#: The per-lane totals, in row order.
FIELDS = (
    "epoch",
    "lanes",
    "done",
    "read",
    "batches",
    "too_short",
    "too_long",
    "oversize",
    "truncated",
    "tail_dropped",
    "repeated",
    "promoted",
    "padded_rows",
    "left_over",
    "skipped",
)
#: Per-cell columns, after the totals: ``PER_CELL[j]`` of cell ``c`` is at
#: ``len(FIELDS) + j * num_cells + c``.
PER_CELL = ("batches", "rows", "real", "padded")
_INDEX = {name: i for i, name in enumerate(FIELDS)}


class Counters:
    """The shared table (see the module NOTE); picklable into workers with its storage."""

    def __init__(self, num_cells: int) -> None:
        self.num_cells = int(num_cells)
        width = len(FIELDS) + len(PER_CELL) * self.num_cells
        self.table = torch.zeros((MAX_LANES, width), dtype=torch.int64).share_memory_()
        self.table[:, _INDEX["epoch"]] = -1
        self._view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"num_cells": self.num_cells, "table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.num_cells = state["num_cells"]
        self.table = state["table"]
        self._view = None

    @property
    def view(self) -> np.ndarray:
        """A numpy view of the shared table (no copy)."""
        if self._view is None:
            self._view = self.table.numpy()
        return self._view

    def write(self, lane: int, totals: dict[str, int], cells: np.ndarray) -> None:
        """Write one lane's row: ``totals`` by name and ``cells`` (``(4, K)``)."""
        if not 0 <= lane < MAX_LANES:
            return
        row = np.zeros(self.view.shape[1], dtype=np.int64)
        for name, value in totals.items():
            row[_INDEX[name]] = value
        row[len(FIELDS) :] = cells.reshape(-1)
        self.view[lane] = row

    def tick(self, lane: int, batches: int) -> None:
        """Write only a lane's batch count (cheap, after every batch)."""
        if 0 <= lane < MAX_LANES:
            self.view[lane, _INDEX["batches"]] = batches

    def reset(self) -> None:
        """Forget every lane (a new pass starts)."""
        self.view[:] = 0
        self.view[:, _INDEX["epoch"]] = -1

    def lanes(self, epoch: int) -> list[dict[str, int]]:
        """The rows written for ``epoch``, in lane order (missing lanes are left out)."""
        rows = self.view.copy()
        return [
            {name: int(r[i]) for name, i in _INDEX.items()} | {"lane": lane}
            for lane, r in enumerate(rows)
            if int(r[_INDEX["epoch"]]) == epoch
        ]

    def cells(self, epoch: int) -> np.ndarray:
        """Per-cell columns summed over the lanes of ``epoch``, ``(4, K)``."""
        rows = self.view.copy()
        mine = rows[rows[:, _INDEX["epoch"]] == epoch, len(FIELDS) :]
        return mine.sum(axis=0).reshape(len(PER_CELL), self.num_cells)
