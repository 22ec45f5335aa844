"""A packing stream's counters, shared by its DataLoader workers with the main process.

NOTE [ A packing stream's counters across DataLoader workers ]
The rule of :mod:`bucketloader.stream` (NOTE [ A stream's counters across DataLoader workers ]
there), for the fields of :class:`~bucketloader.pack.PackIterable`: under a ``DataLoader`` with
workers each worker iterates its own copy of the stream, so the stream allocates, when it is
built (in the main process, before any worker starts), one small ``int64`` table in shared
memory (``torch.Tensor.share_memory_()``), one row per worker (a *lane*). Forked workers inherit
the mapping; spawned ones receive the same storage when the DataLoader pickles the stream. A lane
writes its own row only: its batch count before every batch it hands out (what a resume needs,
exact), the other counters every :data:`FLUSH_EVERY` batches and when its pass ends. The main
process sums the rows of the current epoch. Beyond :data:`MAX_LANES` workers the extra ones are
not counted (a resume then refuses, naming the limit).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: Workers (lanes) per stream with a row in the table.
MAX_LANES = 64
#: A lane writes all its counters every this many batches (and at the end of its pass).
FLUSH_EVERY = 32
#: The counters of a pass, as :attr:`PackIterable.stats <bucketloader.pack.PackIterable.stats>`
#: names them.
STATS = (
    "rows",
    "tokens",
    "overflow_dropped",
    "truncated",
    "split",
    "tail_dropped",
    "padded_rows",
    "repeated_rows",
    "left_over",
    "skipped",
)
#: A lane's row: where it stands, then :data:`STATS`.
FIELDS = ("epoch", "lanes", "done", "read", "batches", *STATS)
_INDEX = {name: i for i, name in enumerate(FIELDS)}


class Counters:
    """The shared table (see the module NOTE); picklable into workers with its storage."""

    def __init__(self) -> None:
        self.table = torch.zeros((MAX_LANES, len(FIELDS)), dtype=torch.int64).share_memory_()
        self.table[:, _INDEX["epoch"]] = -1
        self._view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"table": self.table}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.table = state["table"]
        self._view = None

    @property
    def view(self) -> np.ndarray:
        """A numpy view of the shared table (no copy)."""
        if self._view is None:
            self._view = self.table.numpy()
        return self._view

    def write(self, lane: int, values: dict[str, int]) -> None:
        """Write one lane's row (every field of :data:`FIELDS`)."""
        if 0 <= lane < MAX_LANES:
            self.view[lane] = [int(values[name]) for name in FIELDS]

    def tick(self, lane: int, batches: int) -> None:
        """Write only a lane's batch count (cheap, before every batch)."""
        if 0 <= lane < MAX_LANES:
            self.view[lane, _INDEX["batches"]] = batches

    def lanes(self, epoch: int) -> list[dict[str, int]]:
        """The rows written for ``epoch``, in lane order, each with its ``lane`` (rows of an
        earlier pass with more workers are left out)."""
        rows = self.view.copy()
        out = []
        for lane, r in enumerate(rows):
            row = {name: int(r[i]) for name, i in _INDEX.items()}
            if row["epoch"] == epoch and lane < row["lanes"]:
                out.append(row | {"lane": lane})
        return out
