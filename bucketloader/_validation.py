"""The one voice for argument errors.

Every user-facing check in bucketloader goes through these helpers so that messages read alike:
``num_buckets must be an int >= 1, got num_buckets=0``. Never ``assert`` for user input.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    symbolic: tuple[type, ...] = (),
) -> int:
    """Return ``value`` as an ``int`` or raise one clear error (``True`` is not an int here).

    ``symbolic`` lists extra integer-like types accepted and returned as they are (``torch.SymInt``
    under ``torch.compile(dynamic=True)``, which ``int()`` would specialise).

    Example:
        >>> check_int("num_buckets", 8, minimum=1)
        8
        >>> check_int("num_buckets", 0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: num_buckets must be an int >= 1, got num_buckets=0
    """
    sym = bool(symbolic) and isinstance(value, symbolic)
    ok = sym or (isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)))
    if ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value if sym else int(value)
    bounds = []
    if minimum is not None:
        bounds.append(f">= {minimum}")
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    rule = f"an int {' and '.join(bounds)}" if bounds else "an int"
    kind = TypeError if not ok else ValueError
    raise kind(f"{name} must be {rule}, got {name}={value!r}")


def check_float(
    name: str, value: Any, *, minimum: float, maximum: float, symbolic: tuple[type, ...] = ()
) -> float:
    """Return ``value`` as a finite float in ``[minimum, maximum]`` or raise one clear error.

    ``symbolic`` types (``torch.SymFloat``) are accepted and returned as they are.
    """
    sym = bool(symbolic) and isinstance(value, symbolic)
    ok = sym or (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)))
    # ``value - value == 0`` is False for inf and NaN, and traces under torch.compile (math.isfinite
    # does not on a symbolic float)
    if ok and minimum <= value <= maximum and value - value == 0:
        return value if sym else float(value)
    raise (ValueError if ok else TypeError)(
        f"{name} must be a number in [{minimum}, {maximum}], got {name}={value!r}"
    )


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (numpy's included); ``1`` or ``"yes"`` are not."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {name}={value!r}")


def describe(value: Any) -> str:
    """A short description of a value for error messages (tensors by dtype and shape)."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        kind = "tensor" if hasattr(value, "device") else "array"
        return f"a {kind} of dtype {dtype} and shape {tuple(shape)}"
    return f"{type(value).__name__} {value!r}"


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; the error lists them all."""
    options = sorted(choices)
    if isinstance(value, str) and value in options:
        return value
    listed = ", ".join(repr(c) for c in options)
    raise ValueError(f"{name} must be one of {listed}, got {name}={value!r}")


def as_lengths(
    lengths: Any, *, name: str = "lengths", ndim: int | tuple[int, ...] = 1
) -> np.ndarray:
    """Convert per-sample lengths to a non-empty ``int64`` array, or raise one clear error.

    Accepts lists, tuples, numpy arrays and torch tensors of non-negative integers (integral floats
    such as ``3.0`` are accepted). Rejects booleans, NaN, fractional values, negatives, empty input
    and the wrong number of dimensions, naming the index of the first bad element.
    """
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if hasattr(lengths, "detach") and hasattr(
        lengths, "cpu"
    ):  # a torch tensor, without importing torch
        lengths = lengths.detach().cpu().numpy()
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__len__"):
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints, "
            f"got {type(lengths).__name__}"
        )
    if isinstance(lengths, (list, tuple)):  # numpy would silently turn True into 1
        where = _first_bool(lengths)
        if where is not None:
            item = lengths
            for i in where:
                item = item[i]
            raise TypeError(
                f"{name} must hold integer lengths, got {item!r} at index {_fmt(where)}; "
                "convert booleans with int()"
            )
    try:
        arr = np.asarray(lengths)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"{name} must be a rectangular array of non-negative ints ({exc})"
        ) from None
    if arr.ndim not in allowed:
        want = " or ".join(f"{d}-D" for d in allowed)
        hint = ", or (N, D)" if 2 in allowed else ""
        raise ValueError(
            f"{name} must be {want} (one length per sample{hint}), "
            f"got an array of shape {arr.shape}"
        )
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got {name} of shape {arr.shape}")
    if arr.dtype == np.bool_:
        raise TypeError(
            f"{name} must hold integer lengths, got booleans; convert with .astype(int)"
        )
    if arr.dtype.kind == "O":
        for flat_index, item in enumerate(arr.ravel()):
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Real):
                idx = np.unravel_index(flat_index, arr.shape)
                raise TypeError(
                    f"{name} must hold integer lengths, got {item!r} at index {_fmt(idx)}"
                )
        arr = arr.astype(np.float64)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integer lengths, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            idx = np.unravel_index(int(np.argmax(bad)), arr.shape)
            raise ValueError(
                f"{name} must be whole numbers, got {arr[idx].item()!r} at index {_fmt(idx)}; "
                "round lengths up with np.ceil before bucketing"
            )
    if arr.dtype.kind == "u" and arr.dtype.itemsize >= 8 and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has a value too large for int64: {arr.max()}")
    out = arr.astype(np.int64, copy=False)
    if (out < 0).any():
        idx = np.unravel_index(int(np.argmax(out < 0)), out.shape)
        raise ValueError(
            f"{name} must be non-negative, got {int(out[idx])} at index {_fmt(idx)}; "
            "lengths count elements, so drop or fix that sample"
        )
    return out


def _first_bool(seq: Any) -> tuple[int, ...] | None:
    """Index path of the first bool in nested lists/tuples, or None."""
    if not {bool, np.bool_, list, tuple} & set(map(type, seq)):  # fast path, C speed
        return None
    for i, item in enumerate(seq):
        if isinstance(item, (bool, np.bool_)):
            return (i,)
        if isinstance(item, (list, tuple)):
            inner = _first_bool(item)
            if inner is not None:
                return (i, *inner)
    return None


def _fmt(idx: tuple[Any, ...]) -> str:
    return str(int(idx[0])) if len(idx) == 1 else str(tuple(int(i) for i in idx))
