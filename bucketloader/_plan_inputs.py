"""Parsing the inputs of :meth:`BucketSpec.build`: lengths, groups and per-input options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bucketloader._validation import as_lengths, check_int


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


def check_budget(batch_size: Any, max_tokens: Any) -> tuple[int | None, int | None]:
    """Exactly one of ``batch_size`` / ``max_tokens``, validated: the one batch-size rule."""
    if (batch_size is None) == (max_tokens is None):
        raise ValueError(
            "pass exactly one of batch_size (same batch size for every bucket) or max_tokens "
            f"(batch size = max_tokens // padded size), got batch_size={batch_size!r} and "
            f"max_tokens={max_tokens!r}"
        )
    if batch_size is not None:
        return check_int("batch_size", batch_size, minimum=1), None
    return None, check_int("max_tokens", max_tokens, minimum=1)
