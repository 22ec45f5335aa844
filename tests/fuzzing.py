"""Shared machinery of the fuzz suite (tests/test_fuzz*.py): adversarial inputs, an independent
reference for what a valid input is, and the one-voice check for errors.

The contract (issue 12): for any input, a public function returns a valid result that satisfies
its invariants, or raises ONE ``ValueError``/``TypeError`` whose message names the argument.
Anything else (IndexError, OverflowError, RecursionError, KeyError, a numpy/torch/matplotlib
error, a hang, silent garbage) fails the test with its own traceback.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

#: The fuzz settings: no per-example deadline (the shared machine is noisy), a bounded number of
#: examples per test (the whole suite runs in well under a minute), no shrinking-related noise.
FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
    derandomize=True,  # deterministic in CI (the brief: tests are deterministic)
    database=None,
)

#: Longest length bucketloader accepts (the documented range is ``0 <= L < 2**62``).
LIMIT = 2**62

HUGE_INTS = [2**53 + 1, 2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**70]

#: Message fragments that betray an error from inside numpy / torch / Python rather than ours.
FOREIGN = (
    "unsupported ScalarType",
    "object is not iterable",
    "only integer scalar arrays",
    "index out of bounds",
    "invalid literal for int",
    "can't convert np.ndarray",
    "Can't call numpy()",
    "setting an array element with a sequence",
    "object of type",
    "not supported between instances",
    "unhashable type",
    "takes from",
    "positional argument",
    "list indices must be",
    "has no len()",
    "not implemented for",
    "cannot be interpreted as an integer",
    "int() argument must be",
    "must have same number of dimensions",
    "zero-dimensional tensor",
)


class Outcome:
    """What a call did: ``.value`` (a result) or ``.error`` (an allowed, checked exception)."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error

    @property
    def ok(self) -> bool:
        return self.error is None


def call(fn: Callable[[], Any], names: Sequence[str]) -> Outcome:
    """Run ``fn``; a ``ValueError``/``TypeError`` must name one of ``names`` and read as ours.

    Any other exception propagates (the test fails with it).
    """
    try:
        value = fn()
    except (ValueError, TypeError) as exc:
        check_message(exc, names)
        event(f"{names[0]}...: {type(exc).__name__}")
        return Outcome(error=exc)
    event(f"{names[0]}...: a result")
    return Outcome(value=value)


def check_message(exc: BaseException, names: Sequence[str]) -> None:
    message = str(exc)
    assert message, f"{type(exc).__name__} with an empty message"
    assert any(n in message for n in names), (
        f"{type(exc).__name__} does not name any of the arguments {list(names)}: {message}"
    )
    for fragment in FOREIGN:
        assert fragment not in message, f"an internal error leaked out: {message}"


# --- an independent reference: is this a valid list of lengths, and which? --------------------
def reference_lengths(value: Any, *, ndim: tuple[int, ...] = (1,)) -> list[Any] | None:
    """The lengths ``value`` holds as (nested) Python ints, or ``None`` if it is not valid input:
    a non-empty list/tuple/array/tensor of the right dims holding whole numbers in
    ``[0, 2**62)`` (no bools, no NaN, no strings). Written without bucketloader's code."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            return None
        value = value.detach().to(torch.float64 if value.is_floating_point() else value.dtype)
        value = value.tolist()
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            if value.dtype.kind != "O":
                return None
        value = value.tolist()
    elif isinstance(value, range):
        value = list(value)
    if not isinstance(value, (list, tuple)):
        return None
    depth = _depth(value)
    if depth not in ndim or not _rectangular(value):
        return None
    flat = _flatten(value)
    if not flat:
        return None
    out = []
    for x in flat:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
            return None
        if isinstance(x, numbers.Integral):
            v = int(x)
        else:
            f = float(x)
            if not math.isfinite(f) or f != math.floor(f):
                return None
            v = int(f)
        if not 0 <= v < LIMIT:
            return None
        out.append(v)
    return _reshape(out, value) if depth == 2 else out


def _depth(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return 1 + (_depth(value[0]) if value else 0)
    return 0


def _rectangular(value: Any) -> bool:
    if not isinstance(value, (list, tuple)):
        return True
    kinds = {isinstance(v, (list, tuple)) for v in value}
    if len(kinds) > 1:
        return False
    if kinds == {True}:
        if len({len(v) for v in value}) != 1:
            return False
        return all(_rectangular(v) for v in value)
    return True


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [y for v in value for y in _flatten(v)]
    return [value]


def _reshape(flat: list[int], like: Any) -> list[list[int]]:
    width = len(like[0])
    return [flat[i * width : (i + 1) * width] for i in range(len(like))]


# --- adversarial values ------------------------------------------------------------------------
ODD_SCALARS = st.sampled_from(
    [
        -1,
        -(2**63),
        *HUGE_INTS,
        0.5,
        2.0,
        float("nan"),
        float("inf"),
        -0.0,
        True,
        False,
        None,
        "3",
        "",
        b"4",
        [1],
        (),
        {},
        1 + 2j,
        np.int64(3),
        np.float32(2.5),
        np.uint64(2**64 - 1),
        np.bool_(True),
    ]
)


def as_container(values: list[int], kind: str) -> Any:
    """The same valid lengths in another container (list, tuple, numpy, torch, ...)."""
    if kind == "list":
        return list(values)
    if kind == "tuple":
        return tuple(values)
    if kind == "int64":
        return np.array(values, dtype=np.int64)
    if kind == "uint16":
        return np.array(values, dtype=np.uint16)
    if kind == "float64":
        return np.array(values, dtype=np.float64)
    if kind == "tensor":
        return torch.tensor(values)
    if kind == "bf16":  # bf16 holds every int up to 256 exactly
        return torch.tensor([min(v, 256) for v in values], dtype=torch.bfloat16)
    if kind == "grad":
        return torch.tensor(values, dtype=torch.float32, requires_grad=True)
    if kind == "float16":
        return torch.tensor(values, dtype=torch.float16)
    raise AssertionError(kind)


CONTAINERS = ["list", "tuple", "int64", "uint16", "float64", "tensor", "bf16", "grad", "float16"]


@st.composite
def lengths_inputs(draw: Any, *, max_size: int = 40, max_length: int = 300) -> Any:
    """Mostly valid lengths in any container; sometimes one poisoned element, sometimes a wholly
    adversarial value (empty, a scalar, a string, 2-D, ...)."""
    # (sampled_from draws uniformly; st.integers would favour its bounds)
    choice = draw(st.sampled_from(["valid"] * 6 + ["poisoned"] * 2 + ["odd"] * 2))
    values = draw(st.lists(st.integers(0, max_length), min_size=1, max_size=max_size))
    if choice == "valid":
        return as_container(values, draw(st.sampled_from(CONTAINERS)))
    if choice == "poisoned":  # one bad element in a list
        bad = draw(st.one_of(ODD_SCALARS, st.sampled_from(HUGE_INTS)))
        values = list(values)
        values[draw(st.integers(0, len(values) - 1))] = bad
        return values if draw(st.booleans()) else tuple(values)
    return draw(
        st.sampled_from(
            [
                [],
                (),
                np.array([], dtype=np.int64),
                torch.tensor([]),
                5,
                "abc",
                None,
                {"a": 1},
                [[1, 2], [3]],
                [[[1]]],
                np.array([[1, 2], [3, 4]]),
                np.zeros((2, 0), dtype=np.int64),
                torch.tensor(3),
                torch.tensor([1 + 1j]),
                torch.tensor([True, False]),
                np.array(["1", "2"]),
                np.array([1, None], dtype=object),
                np.array([2**64 - 1], dtype=np.uint64),
                np.array([1.5, 2.0]),
                np.array([3, 4], dtype=">i8"),
                [np.nan],
                [2**70, 1],
                [5, 7, 2**53 + 1],
                [2**62 - 1, 0, 1],
                range(1, 5),
                iter([1, 2]),
            ]
        )
    )


def odd_ints() -> st.SearchStrategy[Any]:
    """Values for an int option: small valid ones, and everything that is not."""
    return st.one_of(st.integers(-2, 12), ODD_SCALARS)


def mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any], one_in: int = 8) -> Any:
    """``valid`` values, and one time in ``one_in`` an ``odd`` one: several options drawn this
    way still give a valid call often enough for the invariants to be exercised."""
    # (sampled_from draws uniformly; st.integers favours its bounds)
    flags = st.sampled_from([True] + [False] * (one_in - 1))
    return flags.flatmap(lambda is_odd: odd if is_odd else valid)


# --- what can sit at a cache file's path (both caches read through bucketloader._files) -------
#: Every kind of thing a shared cache directory can hold at an entry or record path.
FILE_KINDS = ["regular", "fifo", "dev_zero", "dangling", "to_valid", "directory", "socket",
              "unreadable", "empty", "bomb", "huge"]  # fmt: skip


def plant(path: Any, kind: str, valid: bytes = b"{}") -> None:
    """Put a ``kind`` (one of :data:`FILE_KINDS`) at ``path`` (replacing a regular file there);
    ``to_valid`` is a symbolic link to a copy of ``valid`` elsewhere (never followed either)."""
    import os
    import socket
    from pathlib import Path

    path = Path(path)
    if path.is_file() and not path.is_symlink():
        path.unlink()
    if kind == "regular":
        path.write_bytes(valid)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to(path.parent / "missing-target")
    elif kind == "to_valid":
        target = path.parent / ".elsewhere"
        target.write_bytes(valid)
        path.symlink_to(target)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind(str(path))
        except OSError:  # a path too long for a socket: a FIFO is as foreign
            os.mkfifo(path)
        finally:
            s.close()
    elif kind == "unreadable":
        path.write_bytes(valid)
        path.chmod(0)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "bomb":
        path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate(64 * 2**20)  # sparse: 64 MiB of zeros
    else:
        raise AssertionError(kind)
