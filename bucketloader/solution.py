"""Solution: a set of boundaries with how it was found (what the cache stores, as JSON).

It is the record shared by :mod:`bucketloader.solve` (which produces it) and
:mod:`bucketloader.cache` (which stores it), so neither of those imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader.boundaries import check_boundaries


@dataclass(frozen=True, eq=False)
class Solution:
    """A bucketing solution with how it was found (what the cache stores, as JSON).

    Attributes:
        boundaries: the boundaries (convention in :mod:`bucketloader.boundaries`).
        strategy: registered strategy name (``None`` for an unregistered callable).
        params: every resolved parameter, defaults included (``num_buckets``, ``cost``, ...).
        objective: padding cost under ``params["cost"]`` on the histogram solved.
        padding_ratio: pad elements per real element (linear).
        num_samples: samples in the histogram solved.
        status: ``"optimal"``, ``"heuristic"``, ``"time_limit"`` or ``"coarsened"``.
        gap: relative optimality gap when known.
        info: solver details.
        solve_seconds: wall time of the strategy call.
    """

    boundaries: np.ndarray
    strategy: str | None
    params: dict[str, Any]
    objective: int
    padding_ratio: float
    num_samples: int
    status: str = "heuristic"
    gap: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    solve_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the cache entry body)."""
        return {
            "boundaries": [int(x) for x in self.boundaries],
            "strategy": self.strategy,
            "params": dict(self.params),
            "objective": int(self.objective),
            "padding_ratio": float(self.padding_ratio),
            "num_samples": int(self.num_samples),
            "status": self.status,
            "gap": self.gap,
            "info": dict(self.info),
            "solve_seconds": float(self.solve_seconds),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Solution:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed entry."""
        try:
            return cls(
                boundaries=check_boundaries(data["boundaries"]),
                strategy=data["strategy"],
                params=dict(data["params"]),
                objective=int(data["objective"]),
                padding_ratio=float(data["padding_ratio"]),
                num_samples=int(data["num_samples"]),
                status=str(data["status"]),
                gap=None if data.get("gap") is None else float(data["gap"]),
                info=dict(data.get("info") or {}),
                solve_seconds=float(data.get("solve_seconds", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed solution entry: {exc!r}") from None
