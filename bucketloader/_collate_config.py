"""Configuration for :class:`bucketloader.collate.PadCollator` (private): Field, argument checks."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader import _collate_fields as cf


@dataclass(frozen=True)
class Field:
    """How one variable-length field is padded.

    Attributes:
        input: the sampler input(s) the field follows: a name from ``shape_table.input_names``,
            a tuple of names (one per dim in ``dims``), or ``None`` for all inputs in order.
        dims: the variable dim(s) of the field, one per input (negative counts from the end).
        pad_value: value of padding elements; ``None`` uses the collator's ``pad_value``.

    Example:
        >>> Field(input=("1", "0"), dims=(-2, -1))  # images (C, H, W), lengths (W, H)
        Field(input=('1', '0'), dims=(-2, -1), pad_value=None)
    """

    input: str | tuple[str, ...] | None = None
    dims: int | tuple[int, ...] = -1
    pad_value: Any = None

    def __post_init__(self) -> None:
        dims = (self.dims,) if isinstance(self.dims, numbers.Integral) else self.dims
        if (
            not isinstance(dims, tuple)
            or not dims
            or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) for d in dims)
        ):
            raise TypeError(f"dims must be an int or a tuple of ints, got dims={self.dims!r}")
        if len(set(dims)) != len(dims):
            raise ValueError(f"dims must be distinct, got dims={self.dims!r}")
        inp = self.input
        if isinstance(inp, str):
            inp = (inp,)
        if inp is not None and (
            not isinstance(inp, tuple) or not all(isinstance(x, str) for x in inp)
        ):
            raise TypeError(
                f"input must be an input name, a tuple of names or None, got input={self.input!r}"
            )
        if inp is not None and len(inp) != len(dims):
            raise ValueError(
                f"input and dims must pair up one to one, got input={self.input!r} and "
                f"dims={self.dims!r}"
            )
        check_pad("pad_value", self.pad_value, allow_none=True)
        object.__setattr__(self, "dims", tuple(int(d) for d in dims))
        object.__setattr__(self, "input", inp)


Field.__module__ = "bucketloader.collate"


def check_pad(name: str, value: Any, *, allow_none: bool = False) -> None:
    """A pad value must be a real number (or bool)."""
    if value is None and allow_none:
        return
    if not isinstance(value, (numbers.Number, np.number, np.bool_)) or isinstance(value, complex):
        raise TypeError(f"{name} must be a number, got {name}={value!r}")


def bind_fields(fields: Any, names: tuple[str, ...], group_key: Any) -> dict[Any, Field] | None:
    """Check a ``fields`` argument against the sampler's input names; key -> Field."""
    if fields is None:
        return None
    if isinstance(fields, Field):
        fields = {cf.BARE_KEY: fields}
    if not isinstance(fields, Mapping) or not fields:
        raise TypeError(
            "fields must be None, a Field, or a non-empty mapping key -> Field or input name, "
            f"got fields={fields!r}"
        )
    bound: dict[Any, Field] = {}
    for key, f in fields.items():
        if isinstance(f, (str, tuple)):
            f = Field(input=f, dims=tuple(range(-len(f), 0)) if isinstance(f, tuple) else -1)
        if not isinstance(f, Field):
            raise TypeError(f"fields[{key!r}] must be a Field or an input name, got {f!r}")
        inp = f.input if f.input is not None else names
        unknown = [x for x in inp if x not in names]
        dims = f.dims if isinstance(f.dims, tuple) else (f.dims,)
        if unknown or len(inp) != len(dims):
            raise ValueError(
                f"fields[{key!r}] follows inputs {inp} with dims {f.dims}, but the sampler's "
                f"inputs are {names}; give one dim per input, using these names"
            )
        if key in cf.RESERVED or key == group_key:
            what = "the group_key" if key == group_key else "an output the collator adds"
            raise ValueError(f"fields[{key!r}] cannot be padded: {key!r} is {what}")
        bound[key] = f
    followed = {x for f in bound.values() for x in (f.input or names)}
    missing = [n for n in names if n not in followed]
    if missing:
        raise ValueError(
            f"no field follows sampler input(s) {missing}, so their lengths cannot be "
            f"measured; add a field for each, e.g. fields={{..., key: {missing[0]!r}}}"
        )
    return bound


def read_group(samples: Sequence[Any], group_key: Any) -> Any:
    """The one group id shared by every sample of a batch (``None`` without ``group_key``)."""
    if group_key is None:
        return None
    values = []
    for pos, s in enumerate(samples):
        if group_key not in s:
            raise KeyError(
                f"sample at batch position {pos} has no group_key {group_key!r}; "
                f"its keys are {list(s.keys())}"
            )
        g = s[group_key]
        values.append(g.item() if hasattr(g, "item") else g)
    for pos, g in enumerate(values):
        if g != values[0]:
            raise ValueError(
                f"batch mixes groups: position 0 has {group_key}={values[0]!r} but "
                f"position {pos} has {g!r}; a planned batch holds one group only"
            )
    return values[0]
