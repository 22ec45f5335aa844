"""Sample structure for :class:`bucketloader.collate.PadCollator` (private).

A sample is one of three kinds, told apart by its type (never by its values):

* ``"dict"``: any ``Mapping``; fields are its keys.
* ``"bare"``: a torch tensor, a numpy array, or a flat list/tuple of numbers (tokenised text);
  its one field is called ``"inputs"``.
* ``"tuple"``: any other tuple or list; fields are its positions ``0, 1, ...``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

BARE_KEY = "inputs"
#: Output keys the collator adds; a sample field may not use them (``attention_mask`` excepted).
RESERVED = ("lengths", "sample_mask")
MASK_KEY = "attention_mask"


class Spec(NamedTuple):
    """A resolved variable-length field: which inputs it follows along which dims."""

    key: Any
    inputs: tuple[int, ...]  # indices into shape_table.input_names
    dims: tuple[int, ...]  # as configured (may be negative)
    pad_value: Any


def _is_number(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.number, np.bool_)) and not isinstance(x, complex)


def is_flat_list(x: Any) -> bool:
    """A list or tuple whose first element is a number (or an empty list)."""
    return isinstance(x, (list, tuple)) and (len(x) == 0 or _is_number(x[0]))


def is_sequence(x: Any) -> bool:
    """Can this value be a variable-length field (an array with >= 1 dim, or a flat list)?"""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.ndim >= 1
    return is_flat_list(x)


def kind_of(sample: Any) -> str:
    if isinstance(sample, Mapping):
        return "dict"
    if isinstance(sample, (torch.Tensor, np.ndarray)) or is_flat_list(sample):
        return "bare"
    if isinstance(sample, (list, tuple)):
        return "tuple"
    raise TypeError(
        f"PadCollator samples must be tensors, numpy arrays, lists of numbers, tuples or dicts, "
        f"got {type(sample).__name__}"
    )


def keys_of(sample: Any, kind: str) -> list[Any]:
    if kind == "dict":
        return list(sample.keys())
    if kind == "tuple":
        return list(range(len(sample)))
    return [BARE_KEY]


def column(samples: Sequence[Any], key: Any, kind: str) -> list[Any]:
    """The values of one field across the batch."""
    if kind == "bare":
        return list(samples)
    return [s[key] for s in samples]


def check_structure(samples: Sequence[Any], kind: str, keys: list[Any]) -> None:
    """Every sample must have the first sample's kind and fields."""
    same_type = len(set(map(type, samples))) == 1
    if same_type and kind == "bare":
        return
    for pos, s in enumerate(samples):
        k = kind if same_type else kind_of(s)
        if k != kind:
            raise TypeError(
                f"sample at batch position {pos} is a {k} sample but the sample at position 0 is a "
                f"{kind} sample; every sample of a batch must have the same structure"
            )
        if kind == "dict" and list(s.keys()) != keys and set(s.keys()) != set(keys):
            raise ValueError(
                f"sample at batch position {pos} has keys {sorted(map(str, s.keys()))} but the "
                f"sample at position 0 has {sorted(map(str, keys))}; every sample of a batch must "
                "have the same fields"
            )
        if kind == "tuple" and len(s) != len(keys):
            raise ValueError(
                f"sample at batch position {pos} has {len(s)} elements but the sample at position "
                f"0 has {len(keys)}; every sample of a batch must have the same structure"
            )


def infer_fields(
    sample: Any, kind: str, input_names: tuple[str, ...], group_key: Any
) -> dict[Any, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Default variable fields (key -> (inputs, dims)) when ``fields=None``; see PadCollator."""
    d = len(input_names)
    every = tuple(range(d))
    if kind == "bare":
        if d != 1:
            raise ValueError(
                f"samples are bare arrays but the sampler buckets {d} inputs {input_names}; say "
                f"which dim follows which input, e.g. fields=Field(dims={tuple(range(-d, 0))})"
            )
        return {BARE_KEY: (every, (-1,))}
    if kind == "tuple":
        if len(sample) < d:
            raise ValueError(
                f"samples are tuples of {len(sample)} elements but the sampler buckets {d} inputs "
                f"{input_names}; by default position k follows input k, so pass fields={{...}}"
            )
        return {k: ((k,), (-1,)) for k in range(d)}
    named: dict[Any, tuple[tuple[int, ...], tuple[int, ...]]] = {
        k: ((input_names.index(k),), (-1,)) for k in sample if k in input_names
    }
    if named:
        missing = [n for n in input_names if n not in named]
        if missing:
            raise ValueError(
                f"sample keys match sampler inputs {sorted(map(str, named))} but not {missing}; "
                "name a field for every input with fields={key: input_name, ...}"
            )
        return named
    if d != 1:
        raise ValueError(
            f"the sampler buckets {d} inputs {input_names} but no sample key is named after one; "
            "say which key follows which input, e.g. fields={'input_ids': "
            f"{input_names[0]!r}, 'labels': {input_names[1]!r}}}"
        )
    return {k: ((0,), (-1,)) for k, v in sample.items() if k != group_key and is_sequence(v)}


def measure(
    samples: Sequence[Any], kind: str, specs: list[Spec], num_inputs: int
) -> tuple[np.ndarray, dict[Any, list[Any]], dict[Any, tuple[int, ...]]]:
    """Per-sample sizes of each input (n, D), each field's values and its non-negative dims.

    Fields that follow the same input must agree on its size in every sample.
    """
    if len(specs) == 1 and len(specs[0].inputs) == num_inputs == 1:
        spec = specs[0]
        vals = column(samples, spec.key, kind)
        sizes, dims = _sizes(vals, spec)
        return sizes, {spec.key: vals}, {spec.key: dims}
    n = len(samples)
    lengths = np.full((n, num_inputs), -1, dtype=np.int64)
    owner: dict[int, Any] = {}
    columns: dict[Any, list[Any]] = {}
    ndims: dict[Any, tuple[int, ...]] = {}
    for spec in specs:
        vals = column(samples, spec.key, kind)
        columns[spec.key] = vals
        sizes, dims = _sizes(vals, spec)
        ndims[spec.key] = dims
        for j, inp in enumerate(spec.inputs):
            if inp not in owner:
                owner[inp] = spec.key
                lengths[:, inp] = sizes[:, j]
                continue
            bad = np.flatnonzero(lengths[:, inp] != sizes[:, j])
            if bad.size:
                p = int(bad[0])
                raise ValueError(
                    f"fields {owner[inp]!r} and {spec.key!r} both follow input {inp} but the "
                    f"sample at batch position {p} has lengths {int(lengths[p, inp])} and "
                    f"{int(sizes[p, j])}; if one of them has a fixed size, list only the variable "
                    "fields with fields={...}"
                )
    return lengths, columns, ndims


def _sizes(vals: list[Any], spec: Spec) -> tuple[np.ndarray, tuple[int, ...]]:
    first = vals[0]
    if not is_sequence(first):
        raise TypeError(
            f"field {spec.key!r} is padded but holds {type(first).__name__} "
            "(not a tensor, array or flat list of numbers); leave it out of fields"
        )
    if isinstance(first, (list, tuple)):
        if spec.dims not in ((-1,), (0,)):
            raise ValueError(
                f"field {spec.key!r} holds flat lists, which have one dim, but dims={spec.dims}; "
                "use dims=-1, or store the field as an array"
            )
        for p, v in enumerate(vals):
            if not is_flat_list(v):
                raise TypeError(
                    f"field {spec.key!r} of the sample at batch position {p} is a "
                    f"{type(v).__name__} but at position 0 it is a flat list of numbers"
                )
        return np.fromiter(map(len, vals), np.int64, len(vals))[:, None], (0,)
    ndim = first.ndim
    dims = tuple(d + ndim if d < 0 else d for d in spec.dims)
    if any(d < 0 or d >= ndim for d in dims):
        raise ValueError(
            f"field {spec.key!r} has {ndim} dims (shape {tuple(first.shape)}) but dims={spec.dims}"
        )
    t0 = type(first)
    shapes = [v.shape for v in vals] if len(set(map(type, vals))) == 1 else None
    if shapes is None or set(map(len, shapes)) != {ndim}:
        p = next(p for p, v in enumerate(vals) if type(v) is not t0 or len(v.shape) != ndim)
        raise TypeError(
            f"field {spec.key!r} of the sample at batch position {p} is "
            f"{_describe(vals[p])} but at position 0 it is {_describe(first)}"
        )
    fixed = [d for d in range(ndim) if d not in dims]
    if fixed:
        ref = [first.shape[d] for d in fixed]
        for p, s in enumerate(shapes):
            if [s[d] for d in fixed] != ref:
                raise ValueError(
                    f"field {spec.key!r} of the sample at batch position {p} has shape "
                    f"{tuple(s)} but position 0 has {tuple(first.shape)}; only dims "
                    f"{spec.dims} may vary between samples"
                )
    if len(dims) == 1:
        d = dims[0]
        return np.array([s[d] for s in shapes], dtype=np.int64)[:, None], dims
    return np.array([[s[d] for d in dims] for s in shapes], dtype=np.int64), dims


def _describe(v: Any) -> str:
    shape = getattr(v, "shape", None)
    if shape is None:
        return f"a {type(v).__name__}"
    return f"a {type(v).__name__} of shape {tuple(shape)}"
