"""Check a batch's measured lengths against the sampler's plan (private to PadCollator).

NOTE [ Catching lengths that disagree with the sampler's ]
The collator sees samples, not dataset indices, so it cannot compare a sample with the length
the sampler was given for it. What it can check is the batch: the sampler only batches samples
of one planned cell, so (1) the batch's target cell must hold all its samples (no more than B of
them, none longer than the cell), and (2) for one bucketed input, the shortest sample must map
to the same cell as the longest. A sample whose actual length lands it in another bucket than
the one it was declared in breaks (1) or (2), and the error names its batch position and both
lengths (the sample's, and the cell's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_HINT = (
    "the sampler batches samples of one bucket, so the dataset's samples disagree with the "
    "lengths given to the sampler (check that __getitem__ returns what the lengths describe)"
)


def _target(table: Any, lengths: np.ndarray, group: Any) -> tuple[int, ...]:
    arr = lengths[:, 0] if lengths.shape[1] == 1 else lengths
    try:
        shape = table.target(arr, group=group)
    except ValueError as exc:
        hint = "; PadCollator reads the group from group_key=..." if "group" in str(exc) else ""
        raise ValueError(
            f"{exc} (lengths measured by PadCollator from the samples{hint})"
        ) from None
    return tuple(int(x) for x in shape)


def check_batch(
    table: Any,
    lengths: np.ndarray,
    group: Any,
    names: tuple[str, ...],
    memo: dict[Any, tuple[int, ...]],
) -> tuple[int, ...]:
    """The planned ``(B, L_1, ..., L_D)`` for a batch with measured ``lengths`` ``(n, D)``.

    For one input, cells are intervals of lengths, so the batch's target is the shortest and
    the longest sample's common cell; ``memo`` caches ``target`` per (group, length).
    """
    n, d = lengths.shape
    if d == 1:
        col = lengths[:, 0]
        q, p = int(col.argmin()), int(col.argmax())
        shape = _cell(table, lengths, p, group, memo)
        low = shape if col[q] == col[p] else _cell(table, lengths, q, group, memo)
        if low[1:] != shape[1:]:
            raise ValueError(
                f"samples of one batch fall in different buckets: the sample at batch position "
                f"{p} has length {int(col[p])} (bucket {shape[1]}) but the sample at "
                f"position {q} has length {int(col[q])} (bucket {low[1]}); {_HINT}"
            )
        if col[p] > shape[1]:  # the cell of the longest sample covers every sample
            _raise_over(lengths, np.asarray(shape[1:]), shape, names)
    else:
        shape = _target(table, lengths, group)
        if len(shape) != d + 1:
            raise ValueError(
                f"the sampler's target shape {shape} has {len(shape) - 1} lengths but the "
                f"collator measured {d} inputs {names}"
            )
        cell = np.asarray(shape[1:], dtype=np.int64)
        if (lengths > cell).any():
            _raise_over(lengths, cell, shape, names)
    if n > shape[0]:
        p = int(np.argmax(lengths.sum(axis=1)))
        raise ValueError(
            f"batch of {n} samples does not fit its target shape {shape}: the sample at batch "
            f"position {p} has length {_fmt(lengths[p])}, which puts the batch in a cell planned "
            f"for {shape[0]} samples; {_HINT}"
        )
    return shape


def _raise_over(lengths: np.ndarray, cell: np.ndarray, shape: tuple, names: tuple) -> None:
    p, j = (int(x) for x in np.argwhere(lengths > cell[None, :])[0])
    raise ValueError(
        f"sample at batch position {p} has {names[j]} length {int(lengths[p, j])}, longer "
        f"than its planned cell's {int(cell[j])} (target shape {shape})"
    )


def _cell(
    table: Any, lengths: np.ndarray, pos: int, group: Any, memo: dict[Any, tuple[int, ...]]
) -> tuple[int, ...]:
    key = (group, int(lengths[pos, 0]))
    shape = memo.get(key)
    if shape is None:
        try:
            shape = _target(table, lengths[pos : pos + 1], group)
        except ValueError:
            _target(table, lengths, group)  # the whole batch: the error names its position
            raise
        if len(memo) > 1 << 20:
            memo.clear()
        memo[key] = shape
    return shape


def _fmt(row: np.ndarray) -> str:
    return str(int(row[0])) if row.size == 1 else str(tuple(int(x) for x in row))
