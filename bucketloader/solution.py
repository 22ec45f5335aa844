"""Solution: a set of boundaries with how it was found (what the cache stores, as JSON).

It is the record shared by :mod:`bucketloader.solve` (which produces it) and
:mod:`bucketloader.cache` (which stores it), so neither of those imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bucketloader.boundaries import check_boundaries, joint_padding, row_sizes


@dataclass(frozen=True, eq=False, kw_only=True)
class _HowFound:
    """How a solution was found: the fields every solution kind stores besides its plan
    (keyword-only; each kind's docstring describes them; :func:`_common_dict` writes them)."""

    strategy: str | None
    params: dict[str, Any]
    objective: int
    padding_ratio: float
    num_samples: int
    status: str = "heuristic"
    gap: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    solve_seconds: float = 0.0


@dataclass(frozen=True, eq=False)
class Solution(_HowFound):
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the cache entry body)."""
        return {"boundaries": [int(x) for x in self.boundaries], **_common_dict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Solution:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed entry."""
        try:
            return cls(boundaries=check_boundaries(data["boundaries"]), **_common_fields(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed solution entry: {exc!r}") from None


@dataclass(frozen=True, eq=False)
class JointSolution(_HowFound):
    """A joint plan of several inputs: the cells, the padding, a certified bound (cache entry).

    Made by :func:`~bucketloader.strategies.joint.solve_joint`; stored by the cache like a
    :class:`Solution` (``to_dict`` carries ``"kind": "joint"``).

    Attributes:
        cells: ``(K, D)`` padded lengths of the planned cells, sorted by rows.
        strategy: ``"joint"``.
        params: every resolved parameter (``max_shapes``, ``size``, ``time_limit``, ...).
        objective: padding of the plan (elements counted by ``size``), an exact int.
        lower_bound: no plan with at most ``max_shapes`` cells pads less (certified).
        padding_ratio: padding per real element (counted by ``size``).
        num_samples: samples in the histogram solved.
        status: ``"optimal"`` (objective equals the bound), ``"heuristic"`` (the search
            converged, the bound did not meet it), ``"time_limit"`` or ``"coarsened"``.
        gap: ``(objective - lower_bound) / objective`` (0.0 when both are 0).
        info: solver details.
        solve_seconds: wall time of the solve.

    Example:
        >>> from bucketloader.strategies.joint import solve_joint
        >>> sol = solve_joint([[3, 5], [4, 9], [10, 2], [9, 8]], 2)  # a JointSolution
        >>> sol.cells.tolist(), sol.objective, sol.lower_bound, sol.status
        ([[4, 9], [10, 8]], 12, 12, 'optimal')
    """

    cells: np.ndarray
    lower_bound: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (the cache entry body)."""
        return {
            "kind": "joint",
            "cells": [[int(x) for x in row] for row in self.cells],
            "lower_bound": int(self.lower_bound),
            **_common_dict(self),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JointSolution:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a malformed entry."""
        try:
            if data.get("kind") != "joint":
                raise ValueError("not a joint solution")
            cells = np.array(data["cells"], dtype=np.int64)
            if cells.ndim != 2 or cells.shape[0] < 1 or cells.shape[1] < 1 or (cells < 0).any():
                raise ValueError(f"cells must be a non-empty (K, D) table, got {cells.shape}")
            cells.setflags(write=False)
            return cls(cells=cells, lower_bound=int(data["lower_bound"]), **_common_fields(data))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"malformed solution entry: {exc!r}") from None

    def problem(self, params: dict[str, Any], hist: Any) -> str | None:
        """Why this can not be the answer for ``params`` on ``hist`` (a joint histogram with
        ``rows`` and ``counts``), or ``None``: at most ``max_shapes`` cells, every row covered,
        the objective that of the cells, the bound not above it."""
        k = params.get("max_shapes")
        if not isinstance(k, int) or self.cells.shape[0] > k:
            return f"its solution has {self.cells.shape[0]} cells for max_shapes={k}"
        if self.lower_bound > self.objective or self.lower_bound < 0:
            return "its lower bound is above its objective"
        # the gap and the status are what the spec and report() show: they must follow from
        # the objective and the bound (a hand-edited entry said gap 0.0 with an open gap)
        gap = (self.objective - self.lower_bound) / self.objective if self.objective else 0.0
        if self.gap is None or abs(self.gap - gap) > 1e-9:
            return f"its gap {self.gap!r} is not (objective - lower_bound) / objective"
        if self.status == "optimal" and self.lower_bound != self.objective:
            return "it is called optimal with its lower bound below its objective"
        cap = params.get("max_size")
        if cap is not None:  # NOTE [ Cells within a size limit ]
            per = row_sizes(self.cells, params.get("size", "sum"))
            if max(per) > cap:
                return f"a cell of its solution has size {max(per)}, above max_size={cap:g}"
        if hist is None:
            return None
        rows = np.asarray(hist.rows)
        if rows.shape[1] != self.cells.shape[1] or self.num_samples != hist.num_samples:
            return "its solution does not fit the histogram"
        try:
            objective = joint_padding(rows, hist.counts, self.cells, params.get("size", "sum"))
        except ValueError:
            return "its cells do not cover every sample"
        if objective != self.objective:
            return "its objective is not the padding of its cells"
        return None


def solution_from_dict(data: Any) -> Solution | JointSolution:
    """A :class:`Solution` or, for ``"kind": "joint"``, a :class:`JointSolution`."""
    if isinstance(data, dict) and data.get("kind") == "joint":
        return JointSolution.from_dict(data)
    return Solution.from_dict(data)


def _common_dict(sol: _HowFound) -> dict[str, Any]:
    """The fields every solution kind stores (its cache entry body, less the plan itself)."""
    return {
        "strategy": sol.strategy,
        "params": dict(sol.params),
        "objective": int(sol.objective),
        "padding_ratio": float(sol.padding_ratio),
        "num_samples": int(sol.num_samples),
        "status": sol.status,
        "gap": sol.gap,
        "info": dict(sol.info),
        "solve_seconds": float(sol.solve_seconds),
    }


def _common_fields(data: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`_common_dict` (raises KeyError / TypeError / ValueError)."""
    return {
        "strategy": data["strategy"],
        "params": dict(data["params"]),
        "objective": int(data["objective"]),
        "padding_ratio": float(data["padding_ratio"]),
        "num_samples": int(data["num_samples"]),
        "status": str(data["status"]),
        "gap": None if data.get("gap") is None else float(data["gap"]),
        "info": dict(data.get("info") or {}),
        "solve_seconds": float(data.get("solve_seconds", 0.0)),
    }
