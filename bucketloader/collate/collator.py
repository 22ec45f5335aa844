"""PadCollator: pad each batch to exactly the shape its sampler planned.

NOTE [ Which fields are padded ]
The rules are explicit so that a batch's structure never depends on its values:

* ``fields=None`` (default), samples are
  - bare (a tensor, numpy array or flat list of numbers): the sample is the one field, padded
    along the dim that varies (one bucketed input only; for 2-D buckets say
    ``fields=Field(dims=...)``);
  - tuples: position ``k`` follows the sampler's ``k``-th input along the dim that varies, for
    the first ``D`` positions; later positions are fixed-size;
  - dicts: keys named after a sampler input follow that input; if none is, and the sampler has
    one input, *every* sequence-valued entry (tensor/array with a dim, or flat list) follows it.
* ``fields={...}`` lists exactly the variable fields; every other field is fixed-size.

"The dim that varies" of a field following one input is inferred from the samples: the only dim
of a 1-D field, else the one dim whose size differs between samples (time ``T`` of ``(T, F)``
features and of ``(C, T)`` audio alike); see NOTE [ Which dim varies ] in
:mod:`bucketloader.collate.fields` for batches in which no dim differs.

Fields that follow the same input must have the same length in each sample (that is the sample's
length for the input), which is how a fixed-size vector mistaken for a variable field is caught.
Fixed-size fields go through ``torch.utils.data.default_collate`` (tensor results get rows of 0,
or of ``pad_value[key]`` when the mapping names the key, appended under ``last_batch="pad"``;
non-tensor results such as lists of strings keep one entry per real sample).

A sample field named ``attention_mask`` (a tokenizer's) is padded with 0 and returned as is,
instead of the mask the collator would build.

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

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from bucketloader._samples import kind_of
from bucketloader._types import SIDES
from bucketloader._validation import check_choice
from bucketloader.collate import fields as cf
from bucketloader.collate._pad import pad_field, sequence_mask
from bucketloader.collate.fields import Field, bind_fields, check_pad, read_group
from bucketloader.plan import ShapeTable

__all__ = ["PadCollator"]


class PadCollator:
    """Collate a batch into tensors of exactly one of the sampler's planned shapes.

    Build it with ``sampler.collator()`` (``PadCollator(sampler.shape_table)``) so the two cannot
    disagree.
    Each call measures the samples' actual lengths, asks ``shape_table.target`` for the planned
    ``(B, L_1, ..., L_D)``, checks the samples fit it, and pads every variable field to it in one
    pre-allocated tensor (see the module NOTE for which fields are variable).

    Returns a dict: the padded and collated fields (dict samples keep their keys, tuple samples
    use positions ``0, 1, ...``, bare samples use ``"inputs"``), plus ``lengths`` (``(B,)``, or
    ``(B, D)`` int64 for several inputs; 0 on padding rows), ``attention_mask`` (``(B, L)``, True
    on real elements; a dict input name -> mask for several inputs; a sample field of that name
    is padded with 0 and returned instead) and ``sample_mask`` (``(B,)`` bool, False on the
    batch-padding rows of ``last_batch="pad"``). Plain tensors and dicts: picklable and
    ``pin_memory`` friendly.

    Args:
        shape_table: the sampler's ``ShapeTable`` (``BucketSampler.shape_table``).
        fields: ``None`` (rules in the module NOTE), a mapping key -> :class:`Field` or input
            name, or one :class:`Field` for bare samples.
        pad_value: pad value for every field, or a mapping key -> pad value (others pad with 0);
            a :class:`Field`'s own ``pad_value`` wins.
        side: ``"right"`` or ``"left"`` (decoder-only prompts).
        group_key: dict key holding each sample's group when the plan buckets per group
            (default ``"dataset"``, the key :class:`~bucketloader.sampler.GroupedDataset` adds).
        mask_dtype: dtype of ``attention_mask`` (``torch.long`` for 1/0 masks).

    Example:
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler([3, 5, 8, 8], num_buckets=2, batch_size=2)
        >>> collate = sampler.collator(pad_value=-1)
        >>> out = collate([torch.arange(3), torch.arange(5)])
        >>> out["inputs"].tolist(), out["lengths"].tolist()
        ([[0, 1, 2, -1, -1], [0, 1, 2, 3, 4]], [3, 5])
    """

    def __init__(
        self,
        shape_table: ShapeTable,
        *,
        fields: Mapping[Any, Field | str | tuple[str, ...]] | Field | None = None,
        pad_value: Any = 0,
        side: str = "right",
        group_key: Any = None,
        mask_dtype: torch.dtype = torch.bool,
    ) -> None:
        if not isinstance(shape_table, ShapeTable):
            raise TypeError(
                f"shape_table must be a ShapeTable (sampler.shape_table), got "
                f"{type(shape_table).__name__}; build the collator with sampler.collator()"
            )
        self.shape_table = shape_table
        if group_key is None and shape_table.group_values is not None:
            group_key = "dataset"  # GroupedDataset's key
        self.side = check_choice("side", side, SIDES)
        if not isinstance(mask_dtype, torch.dtype):
            raise TypeError(f"mask_dtype must be a torch.dtype, got mask_dtype={mask_dtype!r}")
        self.mask_dtype = mask_dtype
        if isinstance(pad_value, Mapping):
            for k, v in pad_value.items():
                check_pad(f"pad_value[{k!r}]", v)
        else:
            check_pad("pad_value", pad_value)
        self.pad_value = pad_value
        self.group_key = group_key
        self.fields = bind_fields(fields, tuple(shape_table.input_names), group_key)
        self._setup()

    # --- configuration ---------------------------------------------------------------------
    def _setup(self) -> None:
        self._names = tuple(self.shape_table.input_names)
        self._shapes = frozenset(tuple(int(x) for x in s) for s in self.shape_table.shapes)
        self._specs_cache: dict[Any, list[cf.Spec]] = {}
        self._memo: dict[Any, tuple[int, ...]] = {}
        self._pad_cache: dict[Any, Any] = {}
        self._learned: dict[Any, tuple[tuple[int, ...], bool]] = {}  # NOTE [ Which dim varies ]

    def _pad_for(self, key: Any, own: Any = None) -> Any:
        if own is not None:
            return own
        if isinstance(self.pad_value, Mapping):
            return self.pad_value.get(key, 0)
        return 0 if key == cf.MASK_KEY else self.pad_value

    def _specs(self, sample: Any, kind: str, keys: list[Any]) -> list[cf.Spec]:
        cache_key = (kind, tuple(keys))
        specs = self._specs_cache.get(cache_key)
        if specs is not None:
            return specs
        names = self._names
        clash = [k for k in keys if k in cf.RESERVED]
        if clash:
            raise ValueError(
                f"samples have a field named {clash[0]!r}, which the collator writes itself "
                f"(it adds {list(cf.RESERVED)}); rename that field in the dataset"
            )
        if self.fields is None:
            found = cf.infer_fields(sample, kind, names, self.group_key)
            specs = [cf.Spec(k, inp, dims, self._pad_for(k)) for k, (inp, dims) in found.items()]
        else:
            unknown = [k for k in self.fields if k not in keys]
            if unknown:
                raise KeyError(
                    f"fields names {unknown} but the samples ({kind}) have fields {keys}; "
                    "fix the names in fields={...}"
                )
            specs = [
                cf.Spec(
                    k,
                    tuple(names.index(x) for x in (f.input or names)),
                    (f.dims,) if isinstance(f.dims, int) else f.dims,
                    self._pad_for(k, f.pad_value),
                )
                for k, f in self.fields.items()
            ]
        if isinstance(self.pad_value, Mapping):
            stray = [k for k in self.pad_value if k not in keys]
            if stray:
                raise KeyError(
                    f"pad_value names {stray} but the samples have fields {keys}; fix the names, "
                    "or, if those fields were removed after the collator was built (as "
                    "Trainer(remove_unused_columns=True) does), build it on the data as loaded "
                    "(bucketloader.hf.BucketTrainer does)"
                )
        if self.group_key is not None and kind != "dict":
            raise TypeError(f"group_key={self.group_key!r} needs dict samples, got {kind} samples")
        self._specs_cache[cache_key] = specs
        return specs

    # --- collation -------------------------------------------------------------------------
    def __call__(self, samples: Any) -> dict[Any, Any]:
        """Collate ``samples`` (a list of samples) into a dict of padded tensors."""
        if not isinstance(samples, (list, tuple)) or not samples:
            raise ValueError(
                f"PadCollator needs a non-empty list of samples, got {type(samples).__name__} "
                f"of length {len(samples) if hasattr(samples, '__len__') else '?'}"
            )
        kind = kind_of(samples[0])
        keys = cf.keys_of(samples[0], kind)
        cf.check_structure(samples, kind, keys)
        specs = self._specs(samples[0], kind, keys)
        lengths, columns, dims = cf.measure(samples, kind, specs, len(self._names), self._learned)
        group = read_group(samples, self.group_key)
        shape = check_batch(self.shape_table, lengths, group, self._names, self._memo)
        n = len(samples)
        rows = shape[0] if self.shape_table.last_batch == "pad" else n
        out_shape = (rows, *shape[1:])
        if out_shape not in self._shapes:
            raise ValueError(
                f"batch of {n} samples would have shape {out_shape}, which the sampler did not "
                f"plan (planned: {sorted(self._shapes)[:8]}...); was this collator built from "
                "the sampler that produced the batch?"
            )
        masks = [
            sequence_mask(lengths[:, d], shape[1 + d], rows, self.side)
            for d in range(len(self._names))
        ]
        out: dict[Any, Any] = {}
        for spec in specs:
            one = len(spec.inputs) == 1
            out[spec.key] = pad_field(
                columns[spec.key],
                key=spec.key,
                lengths=lengths[:, spec.inputs[0] : spec.inputs[0] + 1]
                if one
                else lengths[:, list(spec.inputs)],
                dims=dims[spec.key],
                targets=tuple(shape[1 + i] for i in spec.inputs),
                rows=rows,
                side=self.side,
                pad_value=spec.pad_value,
                mask=masks[spec.inputs[0]] if one else None,
                cache=self._pad_cache,
            )
        for key in keys:
            if key not in out:
                out[key] = self._fixed(cf.column(samples, key, kind), key, rows)
        lens = np.zeros((rows, len(self._names)) if len(self._names) > 1 else rows, np.int64)
        lens[:n] = lengths if len(self._names) > 1 else lengths[:, 0]
        out["lengths"] = torch.from_numpy(lens)
        if cf.MASK_KEY not in out:
            tmasks = [torch.from_numpy(m).to(self.mask_dtype) for m in masks]
            out[cf.MASK_KEY] = (
                tmasks[0] if len(tmasks) == 1 else dict(zip(self._names, tmasks, strict=True))
            )
        sample_mask = np.zeros(rows, dtype=np.bool_)
        sample_mask[:n] = True
        out["sample_mask"] = torch.from_numpy(sample_mask)
        return out

    def _fixed(self, values: list[Any], key: Any, rows: int) -> Any:
        try:
            res = default_collate(values)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"field {key!r} is treated as fixed-size but cannot be stacked ({exc}); if it "
                "varies in length, list it in fields={...}"
            ) from None
        if isinstance(res, torch.Tensor) and rows > len(values):
            pad = self.pad_value.get(key, 0) if isinstance(self.pad_value, Mapping) else 0
            fill = res.new_full((rows - len(values), *res.shape[1:]), pad)
            res = torch.cat([res, fill])
        return res

    # --- misc ------------------------------------------------------------------------------
    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape this collator can return (the sampler's promise)."""
        return sorted(self._shapes)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "shape_table": self.shape_table,
            "fields": self.fields,
            "pad_value": self.pad_value,
            "side": self.side,
            "group_key": self.group_key,
            "mask_dtype": self.mask_dtype,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        table = state.pop("shape_table")
        self.__init__(table, **state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"PadCollator(inputs={self._names}, shapes={len(self._shapes)}, "
            f"last_batch={self.shape_table.last_batch!r}, side={self.side!r}, "
            f"fields={self.fields!r}, pad_value={self.pad_value!r})"
        )


_HINT = (
    "a sampler batches samples of one bucket, so either this batch did not come from the sampler "
    "this collator was built from (e.g. a Trainer's own eval or test loader: use "
    "bucketloader.hf.BucketTrainer, or a DataLoader with batch_sampler=the sampler), or the "
    "dataset's samples disagree with the lengths given to the sampler (check that __getitem__ "
    "returns what the lengths describe)"
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
