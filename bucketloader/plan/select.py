"""Which samples a plan admits beyond the length filters: a predicate, and explicit shapes.

NOTE [ A predicate filter ]
``filter=`` (Lhotse's ``sampler.filter``) is a boolean mask ``(N,)`` or a vectorised callable
``fn(lengths) -> mask`` over the declared lengths (``(N,)``, or ``(N, D)`` for several inputs).
It runs once per dataset, when the spec is built, after the length filters; the samples it rejects
are left out of every epoch and counted as ``filter`` in ``spec.filtered`` and in ``report()``.
A per-index predicate is a mask: ``filter=np.array([keep(i) for i in range(len(dataset))])``.

NOTE [ Explicit shapes ]
``shapes=`` gives the planned padded lengths themselves, NeMo's 2-D bucket list: a list of
``(L_1, ..., L_D)`` tuples (plain ints for one input), kept exactly as given (rounded up to
``pad_to_multiple_of``), instead of boundaries fitted by a strategy. A sample goes to the smallest
given shape (by the plan's ``size``: the sum of the lengths by default, or the product) that covers
it on every input; a sample no shape covers is left out and counted as ``no_shape`` (strict: it
is never truncated or promoted into an oversized batch). Batch sizes follow the usual rule
(``batch_size``, or ``max_tokens``: ``B = max_tokens // size(shape)``, so no padded batch exceeds
the token limit). Internally each input's boundaries are the distinct given lengths and the given
shapes are the occupied cells of that lattice (NOTE [ Joint cells ] in
:mod:`bucketloader.plan.cells`); a lattice point that is not a given shape sends its samples to the
smallest given shape covering it, which is the rule above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bucketloader.boundaries import round_up

__all__ = ["apply_filter", "covered", "parse_shapes"]


def apply_filter(filter_: Any, declared: np.ndarray, n: int) -> np.ndarray:
    """The boolean ``(N,)`` mask of ``filter=`` (NOTE [ A predicate filter ]).

    Example:
        >>> apply_filter(lambda x: x > 3, np.array([2, 5, 9]), 3).tolist()
        [False, True, True]
    """
    mask = filter_(declared) if callable(filter_) else filter_
    if isinstance(mask, (bool, np.bool_)) or not hasattr(mask, "__len__"):
        raise TypeError(
            "filter must be a boolean mask with one entry per sample or a vectorised callable "
            f"fn(lengths) -> mask, got {type(mask).__name__}; wrap a per-sample predicate as "
            "filter=np.array([keep(i) for i in range(n)])"
        )
    arr = np.asarray(mask.cpu() if hasattr(mask, "cpu") else mask)
    if arr.dtype != np.bool_ or arr.shape != (n,):
        raise ValueError(
            f"filter must give a boolean mask of shape ({n},) (one entry per sample), got dtype "
            f"{arr.dtype} and shape {arr.shape}"
        )
    return arr


def parse_shapes(shapes: Any, names: tuple[str, ...], multiples: Sequence[int]) -> np.ndarray:
    """``(K, D)`` int64 padded lengths of the given shapes, unique, rounded up to the multiples.

    Example:
        >>> parse_shapes([(10, 12), (20, 30)], ("src", "tgt"), [1, 8]).tolist()
        [[10, 16], [20, 32]]
        >>> parse_shapes([64, 128], ("length",), [1]).tolist()
        [[64], [128]]
    """
    if isinstance(shapes, (str, bytes, Mapping)) or not isinstance(shapes, (Sequence, np.ndarray)):
        raise TypeError(
            "shapes must be a list of padded lengths, one tuple (L_1, ..., L_D) per shape (an int "
            f"per shape for one input), got shapes={shapes!r}"
        )
    d = len(names)
    rows = []
    for s in shapes:
        row = [s] if np.ndim(s) == 0 else list(np.asarray(s).ravel())
        if len(row) != d or not all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1 for x in row
        ):
            batch = (  # NeMo's (batch, length) habit (s19-user)
                "; a shape here is padded lengths only: the batch size comes from batch_size= "
                "or max_tokens="
                if len(row) == d + 1
                else ""
            )
            raise ValueError(
                f"shapes must give {d} padded length(s) >= 1 per shape (inputs {list(names)}), "
                f"got {s!r}{batch}"
            )
        rows.append([int(x) for x in row])
    if not rows:
        raise ValueError("shapes must list at least one shape, got []")
    arr = np.array(rows, dtype=np.int64)
    for j, m in enumerate(multiples):
        if m > 1:
            arr[:, j] = round_up(arr[:, j], m)
    return np.unique(arr, axis=0)


def covered(table: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """Whether some shape covers each row of ``table`` (``(N, D)``) on every input.

    Example:
        >>> covered(np.array([[5, 9], [12, 3], [30, 1]]), np.array([[10, 10], [20, 5]])).tolist()
        [True, True, False]
    """
    out = np.zeros(table.shape[0], dtype=bool)
    step = max(1, 4_000_000 // max(1, shapes.size))
    for lo in range(0, table.shape[0], step):
        part = np.asarray(table[lo : lo + step, None, :] <= shapes[None, :, :])
        out[lo : lo + step] = np.any(np.all(part, axis=2), axis=1)
    return out


def lattice_of(shapes: np.ndarray) -> list[np.ndarray]:
    """Per input, the distinct given lengths (the boundaries of the shapes' lattice)."""
    return [np.unique(shapes[:, j]) for j in range(shapes.shape[1])]
