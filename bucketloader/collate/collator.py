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
of -100 for an integer label (NOTE [ Label fields pad with -100 ]), or of ``pad_value[key]`` when
the mapping names the key, appended under ``last_batch="pad"``; non-tensor results such as lists
of strings keep one entry per real sample).

A sample field named ``attention_mask`` (a tokenizer's) is padded with 0 and returned as is,
instead of the mask the collator would build.

NOTE [ Label fields pad with -100 ]
A field named ``label``, ``labels`` or ``label_ids`` (Hugging Face's names) whose values are
signed integers pads with -100 unless ``pad_value`` is a mapping that names it (or its
:class:`Field` has a ``pad_value``): on a token-list ``labels``' padding positions and on the
filler rows of ``last_batch="pad"``, a class ``label``'s and a token list's alike. -100 is the
``ignore_index`` of ``torch.nn.functional.cross_entropy`` and ``nll_loss`` and the label pad of
Hugging Face's collators (``DataCollatorForSeq2Seq``, the language-model collators) and of this
library's Hugging Face and packing paths, so a model's natural loss, ``cross_entropy(logits,
batch["label"])`` or a Hugging Face model's own, leaves out padding and filler rows. Until
session 20 such fields padded with ``pad_value`` (0 by default): 0 is a real class and a real
token id, and session 19's new-user trial found the filler rows of every bucket's last batch
trained on as class 0 by exactly that loss. A scalar ``pad_value`` (a tokenizer's pad id) is the
inputs' pad, as ``DataCollatorForSeq2Seq`` separates the pad token from ``label_pad_token_id``;
``pad_value={"labels": 0}`` keeps the old padding. Float labels (regression targets) and other
fields keep ``pad_value``: no value is ignored by every loss, so their filler rows are masked by
``sample_mask`` (docs/loops.md, "Losses over filler rows"). The names are exact, not a ``label``
prefix: ``label_lengths`` (CTC's target lengths; ``ctc_loss`` refuses -100) and a
``labels_mask`` (-100 reads True) are integers that -100 breaks. The type is read from the first
sample's value, and the field's pad cached with the keys' specs; an empty list says nothing of
it, so a label field's first non-empty value in the batch decides, and a batch of empty ones
pads with -100 (empty lists collate to int64) without caching (session 20's review: an empty
first list made the pad 0 for good, in whichever worker drew one first).
:class:`~bucketloader.evaluation.EvalCollator` gives an empty rank's fill row the same labels
(NOTE [ Evaluation plan ]).

NOTE [ Cutting samples the plan truncates ]
A plan built with ``overflow="truncate"`` (NOTE [ Length filters ] in
:mod:`bucketloader.plan.limits`) placed every sample longer than ``max_length`` in a bucket *as
if* it were ``max_length`` long; ``shape_table.truncate`` holds those limits. Before checking the
batch against its cell, the collator cuts every variable field that follows such an input to its
first ``max_length`` elements (along that input's dim), in the batch's own copy of the column,
so the dataset's samples are never modified. Plans without ``truncate`` skip this entirely.

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

import math
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from torch.utils.data import default_collate

from bucketloader._samples import BARE_KEY, check_readable, convert_hint, kind_of
from bucketloader._types import SIDES
from bucketloader._validation import MissingKeyError, check_choice, checks_options, describe
from bucketloader.collate import fields as cf
from bucketloader.collate._pad import (
    NUMPY_MIN_BYTES,
    SCATTER_MAX_ELEMENTS,
    SCATTER_MIN_ROWS,
    fill_pad,
    fits,
    int_rows,
    interleaved_pieces,
    numpy_dtype,
    pad_1d,
    pad_field,
    sequence_mask,
    torch_dtype,
)
from bucketloader.collate.fields import GROUP_FIX, Field, bind_fields, check_pad, read_group
from bucketloader.plan import ShapeTable
from bucketloader.plan.table import below_plan

__all__ = ["PadCollator"]


@checks_options
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
    is padded with 0 and returned instead; a padding row attends one padded position, NOTE
    [ Filler rows attend one position ] in :func:`attend_fillers`) and ``sample_mask``
    (``(B,)`` bool, False on the batch-padding rows of ``last_batch="pad"``). Plain tensors and
    dicts: picklable and ``pin_memory`` friendly.

    Args:
        shape_table: the sampler's ``ShapeTable`` (``BucketSampler.shape_table``).
        fields: ``None`` (rules in the module NOTE), a mapping key -> :class:`Field`, input
            name or tuple of input names (one per trailing dim, in order: ``{"image":
            ("height", "width")}`` pads an image ``(C, H, W)`` along dims -2 and -1), or one
            :class:`Field` for bare samples.
        pad_value: pad value for every field, or a mapping key -> pad value (others pad with 0);
            a :class:`Field`'s own ``pad_value`` wins. Integer ``label``, ``labels`` and
            ``label_ids`` fields pad with -100 unless the mapping names them (NOTE [ Label
            fields pad with -100 ]).
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
        try:
            hash(group_key)
        except TypeError:
            raise TypeError(
                f"group_key must be a dict key (a str, int, ...), got group_key={group_key!r}"
            ) from None
        self.group_key = group_key
        self.fields = bind_fields(fields, tuple(shape_table.input_names), group_key)
        self._setup()

    # --- configuration ---------------------------------------------------------------------
    def _setup(self) -> None:
        self._names = tuple(self.shape_table.input_names)
        cut = getattr(self.shape_table, "truncate", None)
        self._cut = (
            None
            if cut is None
            else np.array([np.iinfo(np.int64).max if c is None else c for c in cut], np.int64)
        )
        # bare 1-D samples under the default rules need no field inference: their one dim is
        # the one that varies
        bare = self.fields is None or (
            set(self.fields) == {BARE_KEY}
            and self.fields[BARE_KEY].dims in ((-1,), (0,))
            and self.fields[BARE_KEY].input in (None, self._names)
        )
        self._bare_default = (
            bare and len(self._names) == 1 and self.group_key is None and self._cut is None
        )
        # (T, F, ...) samples: the lean path pads along T where the general one would too
        self._lean_nd = self._bare_default and (
            self.fields is None or self.fields[BARE_KEY].dims == (0,)
        )
        self._pad_rows = self.shape_table.last_batch == "pad"
        self._short_dicts = len(self._names) == 1 and self.group_key is None and self._cut is None
        self._mask_tables: dict[int, np.ndarray] = {}  # NOTE [ The short path of dict samples ]
        self._bare_pad: tuple[Any] | None = None
        self._shapes = frozenset(tuple(int(x) for x in s) for s in self.shape_table.shapes)
        self._rows = frozenset(s[0] for s in self._shapes)  # the planned batch sizes
        self._specs_cache: dict[Any, list[cf.Spec]] = {}
        self._memo: dict[Any, tuple[int, ...]] = {}
        self._pad_cache: dict[Any, Any] = {}
        self._lean_cache: dict[Any, Any] = {}  # NOTE [ The fixed cost of a small batch ]
        self._cells: dict[int, tuple[int, ...]] = {}
        self._shapes_of_cells: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._learned: dict[Any, tuple[tuple[int, ...], bool]] = {}  # NOTE [ Which dim varies ]

    def _pad_for(self, key: Any, own: Any = None, value: Any = None) -> Any:
        """The pad value of field ``key`` (``value``: a sample's): a :class:`Field`'s own, else
        ``pad_value[key]`` where the mapping names it, else -100 for an integer label (NOTE
        [ Label fields pad with -100 ]), else the scalar ``pad_value`` (0 for a mapping, and for
        a sample's ``attention_mask``)."""
        if own is not None:
            return own
        pads = self.pad_value
        if isinstance(pads, Mapping) and key in pads:
            return pads[key]
        if cf.is_int_label(key, value):
            return cf.LABEL_PAD
        return 0 if isinstance(pads, Mapping) or key == cf.MASK_KEY else pads

    def _fill_for(self, key: Any, column: torch.Tensor) -> Any:
        """The value of a fixed-size field ``key`` on filler rows (``column``: its collated
        rows): ``pad_value[key]`` where the mapping names it, else -100 for an integer label
        (NOTE [ Label fields pad with -100 ]), the batch's own group for ``group_key`` (a batch
        never mixes groups; its filler rows said group 0, s34-user), else 0."""
        pads = self.pad_value
        if isinstance(pads, Mapping) and key in pads:
            return pads[key]
        if key == self.group_key and column.numel():
            return column.reshape(-1)[0].item()
        return cf.LABEL_PAD if cf.is_int_label(key, column) else 0

    def _label_fill(self, key: Any, column: torch.Tensor) -> Any:
        """What filler rows hold in field ``key`` (``column``: its collated rows) when it is an
        integer label (NOTE [ Label fields pad with -100 ]), else ``None``: for
        :class:`~bucketloader.evaluation.EvalCollator`, whose empty rank's row is a loaded
        sample the collator counted as real."""
        if not cf.is_int_label(key, column):
            return None
        for specs in self._specs_cache.values():
            for spec in specs:
                if spec.key == key:
                    return spec.pad_value
        return self._fill_for(key, column)

    def variable_fields(self, sample: Any) -> dict[Any, tuple[tuple[int, ...], tuple[int, ...]]]:
        """The fields of ``sample`` this collator pads: key -> (input indices, dims).

        Dims are non-negative; an inferred dim is the one NOTE [ Which dim varies ] gives a
        single sample (the dim learned from earlier batches, else the only or the first dim).
        What :mod:`bucketloader.compile` resizes to build a batch of a planned shape.

        Example:
            >>> from bucketloader import BucketSampler
            >>> collate = BucketSampler([3, 5], num_buckets=1, batch_size=2).collator()
            >>> collate.variable_fields({"x": torch.zeros(3, 80), "label": 1})
            {'x': ((0,), (0,))}
        """
        kind = kind_of(sample)
        specs = self._specs(sample, kind, cf.keys_of(sample, kind))
        out = {}
        for spec in specs:
            value = cf.column([sample], spec.key, kind)[0]
            ndim = 1 if isinstance(value, (list, tuple)) else int(getattr(value, "ndim", 1))
            if spec.dims is not None:
                dims = tuple(d % ndim for d in spec.dims)
            elif ndim == 1:
                dims = (0,)
            else:
                learned = self._learned.get(spec.key)
                dims = learned[0] if learned is not None else (0,)
            out[spec.key] = (spec.inputs, dims)
        return out

    def _specs(self, sample: Any, kind: str, keys: list[Any], samples: Any = None) -> list[cf.Spec]:
        """The field specs of samples like ``sample`` (``samples``: its batch, where a label
        field's type is read from its first non-empty value), cached per kind and keys."""
        cache_key = (kind, tuple(keys))
        specs = self._specs_cache.get(cache_key)
        if specs is not None:
            return specs
        names = self._names
        unread: list[Any] = []  # label fields whose values were all empty lists

        def value_of(key: Any) -> Any:
            """A value of field ``key`` from which its pad is read (NOTE [ Label fields pad
            with -100 ]): an empty list says nothing of a label's type, so a label field's
            first non-empty value in the batch; all empty, a list of ints (what empty lists
            collate to), and the specs are not cached (a later batch reads the type)."""
            value = cf.column([sample], key, kind)[0]
            if kind != "dict" or key not in cf.LABEL_KEYS or not _is_empty_list(value):
                return value
            for other in samples if samples is not None else ():
                value = other.get(key) if isinstance(other, Mapping) else None
                if not _is_empty_list(value):
                    return value
            unread.append(key)
            return [0]

        clash = [k for k in keys if k in cf.RESERVED]
        if clash:
            raise ValueError(
                f"samples have a field named {clash[0]!r}, which the collator writes itself "
                f"(it adds {list(cf.RESERVED)}); rename that field in the dataset"
            )
        if self.fields is None:
            found = cf.infer_fields(sample, kind, names, self.group_key)
            specs = [
                cf.Spec(k, inp, dims, self._pad_for(k, None, value_of(k)))
                for k, (inp, dims) in found.items()
            ]
            if not specs:
                hints = [(k, convert_hint(cf.column([sample], k, kind)[0])) for k in keys]
                hint = next((f"; {k!r} holds no array{h}" for k, h in hints if h), "")
                raise ValueError(
                    f"samples have no field to pad: none of the {kind} sample's fields "
                    f"{[str(k) for k in keys][:8]} is a tensor or array with a dim or a flat list "
                    "of numbers; name the variable-length field with fields={key: input_name}"
                    + hint
                )
        else:
            unknown = [k for k in self.fields if k not in keys]
            if unknown:
                raise MissingKeyError(
                    f"fields names {unknown} but the samples ({kind}) have fields {keys}; "
                    "fix the names in fields={...}"
                )
            specs = [
                cf.Spec(
                    k,
                    tuple(names.index(x) for x in (f.input or names)),
                    (f.dims,) if isinstance(f.dims, int) else f.dims,
                    self._pad_for(k, f.pad_value, value_of(k)),
                )
                for k, f in self.fields.items()
            ]
        if isinstance(self.pad_value, Mapping):
            stray = [k for k in self.pad_value if k not in keys]
            if stray:
                raise MissingKeyError(
                    f"pad_value names {stray} but the samples have fields {keys}; fix the names, "
                    "or, if those fields were removed after the collator was built (as "
                    "Trainer(remove_unused_columns=True) does), build it on the data as loaded "
                    "(bucketloader.hf.BucketTrainer does)"
                )
        if self.group_key is not None and kind != "dict":
            raise TypeError(  # (s28-user: it named no cause and no way on)
                f"group_key={self.group_key!r} needs dict samples, got {kind} samples: the plan "
                "has groups= (boundaries per group), so each batch's group is read from its "
                f"samples; {GROUP_FIX}"
            )
        if not unread:
            self._specs_cache[cache_key] = specs
        return specs

    # --- collation -------------------------------------------------------------------------
    def __call__(self, samples: Any) -> dict[Any, Any]:
        """Collate ``samples`` (a list of samples) into a dict of padded tensors."""
        if type(samples) is list and samples:  # a plain list: no plan
            first = samples[0]
            if type(first) is dict:  # NOTE [ The short path of dict samples ]
                if self._short_dicts and len(samples) in self._rows:
                    lean = self._short_dict(samples, first)
                    if lean is not None:
                        return lean
            elif self._bare_default:
                if (  # NOTE [ The short path ]: full batches only (no all-padding rows)
                    type(first) is torch.Tensor and len(samples) in self._rows
                ):
                    lean = self._short_path(samples, first)
                    if lean is not None:
                        return lean
                lean = self._collate_bare(samples)
                if lean is not None:
                    return lean
        if not isinstance(samples, (list, tuple)):
            raise TypeError(
                f"PadCollator needs a list of samples (what a batch sampler's indices fetch), got "
                f"{type(samples).__name__}; pass [dataset[i] for i in batch]"
            )
        planned_empty = getattr(samples, "planned_shape", None)
        if not samples and planned_empty is not None:
            raise ValueError(
                f"a padding-only step of shape {planned_empty} reached the collator "
                "with no sample to take its fields from: no rank of the stream had a sample; "
                "initialise torch.distributed before building the stream (a rank borrows "
                "another's), or give every rank a non-empty shard"
            )
        if not samples:
            raise ValueError(
                f"PadCollator needs a non-empty list of samples, got an empty "
                f"{type(samples).__name__}"
            )
        if self._bare_default and planned_empty is None and type(samples) is not list:
            lean = self._collate_bare(samples)  # a plain list already tried it above
            if lean is not None:
                return lean
        first = samples[0]
        kind = kind_of(first)
        keys = cf.keys_of(first, kind)
        cf.check_structure(samples, kind, keys)
        specs = self._specs(first, kind, keys, samples)
        try:
            lengths, columns, dims = cf.measure(
                samples,
                kind,
                specs,
                len(self._names),
                self._learned,
                self._guess_dim if len(self._names) == 1 else None,
                self._names,
            )
        except RuntimeError as exc:  # a nested sample has no shape: named
            for spec in specs:
                check_readable(cf.column(samples, spec.key, kind), spec.key, exc)
            raise
        if self._cut is not None:
            lengths = cut_to_plan(lengths, columns, dims, specs, self._cut)
        group = read_group(samples, self.group_key)
        planned = getattr(samples, "planned_shape", None)
        if planned is None:
            shape = check_batch(self.shape_table, lengths, group, self._names, self._memo)
        else:
            shape = check_planned(tuple(planned), lengths, self._names)
        n = len(samples)
        rows = shape[0] if self.shape_table.last_batch == "pad" else n
        out_shape = (rows, *shape[1:])
        if out_shape not in self._shapes:
            self._raise_unplanned(n, out_shape)
        masks = [
            sequence_mask(lengths[:, d], shape[1 + d], rows, self.side)
            for d in range(len(self._names))
        ]
        out: dict[Any, Any] = {}
        for spec in specs:
            one = len(spec.inputs) == 1
            try:
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
            except (RuntimeError, ValueError) as exc:  # a meta, sparse, nested or quantized
                check_readable(columns[spec.key], spec.key, exc)  # sample (else exc stands)
                raise
        for key in keys:
            if key not in out:
                out[key] = self._fixed(cf.column(samples, key, kind), key, rows)
        if rows == n:  # lengths is a fresh (n, D) array: hand it over
            lens = lengths if len(self._names) > 1 else lengths[:, 0]
        else:
            lens = np.zeros((rows, len(self._names)) if len(self._names) > 1 else rows, np.int64)
            lens[:n] = lengths if len(self._names) > 1 else lengths[:, 0]
        out["lengths"] = torch.from_numpy(lens)
        if cf.MASK_KEY not in out:
            tmasks = [torch.from_numpy(m).to(self.mask_dtype) for m in masks]
            out[cf.MASK_KEY] = (
                tmasks[0] if len(tmasks) == 1 else dict(zip(self._names, tmasks, strict=True))
            )
        sample_mask = np.zeros(rows, dtype=np.bool_)
        real = getattr(samples, "num_real", n)
        sample_mask[:real] = True
        out["sample_mask"] = torch.from_numpy(sample_mask)
        if real < n:
            self._mask_rows(out, specs, keys, real, n)
        if real < rows:
            masks_out = out[cf.MASK_KEY]
            for m in masks_out.values() if isinstance(masks_out, dict) else (masks_out,):
                attend_fillers(m, real, self.side)
        return out

    def _mask_rows(
        self, out: dict[Any, Any], specs: list[cf.Spec], keys: list[Any], lo: int, hi: int
    ) -> None:
        """Rows ``lo:hi`` hold stand-in samples (a stream's all-padding step, NOTE [ A stream
        split over ranks ]): make them padding rows, like those ``last_batch="pad"`` adds."""
        padded = {spec.key for spec in specs}
        for spec in specs:
            out[spec.key][lo:hi] = spec.pad_value
        for key in keys:  # fixed-size fields: the fill of last_batch="pad" rows
            value = out.get(key)
            if key not in padded and isinstance(value, torch.Tensor):
                value[lo:hi] = self._fill_for(key, value)
        out["lengths"][lo:hi] = 0
        masks = out[cf.MASK_KEY]
        for m in masks.values() if isinstance(masks, dict) else (masks,):
            m[lo:hi] = 0

    def _collate_bare(self, samples: Any) -> dict[Any, Any] | None:
        """:meth:`__call__` for bare tensors or arrays under the default rules (one input) that
        vary along their first dim (1-D samples, or ``(T, F)`` features whose ``T`` differs
        between the samples), or ``None`` when the batch is anything else (the general path then
        measures it and words any error). tests/test_collate.py checks the two agree.

        NOTE [ The fixed cost of a small batch ]
        ``pad_sequence`` is one C++ call; this path returns four tensors, so at 8-16 rows its
        Python and dispatch overhead, not the copy, decides the race. A batch takes one pass:
        the sizes, types and dtypes read once, each length's own cell memoised (the batch takes
        it when its shortest and longest lengths share it; any other batch is checked in full),
        the pad pieces cached
        views of one pad buffer per (size, dtype, pad value) (which also remembers that the pad
        value fits the dtype), one
        ``torch.cat`` of ``[x_0, pad_0, x_1, ...]`` (no empty piece: ``torch.cat`` slows down
        several times on one), the lengths and both masks from numpy (``Tensor.__len__`` and
        ``torch.ones`` cost more than the numpy equivalents here; the mask is one copy of
        cached rows, NOTE [ The mask rows ]). The all-padding rows of ``last_batch="pad"`` are
        one fill after the concatenate of the real rows (length 0, row 0 of the mask rows), not
        a pad piece each.
        Large batches are written into numpy-allocated memory (NOTE [ Where a large batch is
        written ] in :mod:`bucketloader.collate._pad`). The commonest batch takes a shorter path
        still (NOTE [ The short path ]). Samples of more dims take
        this path too when only their first dim differs: the field inference of the general
        path would pick that dim (NOTE [ Which dim varies ]) at several times this cost.
        """
        n = len(samples)
        first = samples[0]
        kind = type(first)
        if kind is not torch.Tensor and kind is not np.ndarray:
            return None
        rest: tuple[int, ...] = ()  # the fixed trailing dims of (T, F, ...) samples
        try:  # one dtype object for the batch also means one kind (numpy's dtypes are not torch's)
            dtypes = set(map(_DTYPE, samples)) if n > 1 else {first.dtype}
            if (len(dtypes) > 1 or kind is np.ndarray) and len(set(map(type, samples))) > 1:
                return None  # tensors mixed with arrays, masked arrays: the general path
            ndims = set(map(_NDIM, samples))
            if ndims == _ONE_D:
                sizes = list(map(_NUMEL[kind], samples))  # (C calls: no torch.Size per sample)
            else:
                rest, sizes = self._first_dim_varies(samples, ndims)
                if not rest:
                    return None
        except (AttributeError, TypeError):  # a sample that is no array: the general path words it
            return None
        except RuntimeError as exc:  # a nested sample has no shape: named
            check_readable(samples, BARE_KEY, exc)
            raise
        hi, lo = max(sizes), min(sizes)
        cells = self._cells  # length -> its cell's shape, one tuple object per cell
        shape = cells.get(hi)
        if shape is None or cells.get(lo) is not shape or n > shape[0]:
            lengths = np.array(sizes, dtype=np.int64)[:, None]  # the checked path: it words
            shape = check_batch(self.shape_table, lengths, None, self._names, self._memo)
            if self._pad_rows and shape not in self._shapes:
                self._raise_unplanned(n, shape)
            if len(cells) > 1 << 20:
                cells.clear()
            for length in (lo, hi):  # each length's own cell, never the batch's shape
                own = self._memo.get((None, length))
                if own is not None and own in self._shapes:  # NOTE [ The short path ]
                    cells[length] = self._shapes_of_cells.setdefault(own, own)
        size = shape[1]
        if self._pad_rows:
            rows = shape[0]
        else:
            rows = n
            if (n, size) not in self._shapes:
                self._raise_unplanned(n, (n, size))
        entry = None
        if len(dtypes) == 1 and size > 0:
            key = (kind, size, first.dtype) if not rest else (kind, size, first.dtype, rest)
            entry = self._lean_cache.get(key)
            if entry is None and (rest or n < SCATTER_MIN_ROWS or size > SCATTER_MAX_ELEMENTS):
                try:
                    entry = self._lean_entry(first, size, rest, key)
                except RuntimeError as exc:  # a quantized dtype cannot be filled: named
                    check_readable(samples, BARE_KEY, exc)
                    raise
        if entry is None:
            if rest:
                return None  # mixed dtypes of (T, F) samples: the general path
            return self._collate_bare_padded(samples, sizes, rows, size)
        pad, views, ar, np_rows, np_dtype = entry
        pieces = interleaved_pieces(samples, sizes, size, self.side, (pad, views), (lo, hi))
        try:
            if kind is np.ndarray or rows >= np_rows:  # NOTE [ Where a large batch is written ]
                buf = np.empty((rows, size, *rest), np_dtype)
                flat = (buf if n == rows else buf[:n]).reshape(-1, *rest)  # (a view)
                if kind is np.ndarray:
                    np.concatenate(pieces, out=flat)
                else:
                    torch.cat(pieces, out=torch.from_numpy(flat))
                inputs = torch.from_numpy(buf)
            elif rows == n:
                inputs = torch.cat(pieces).view(n, size, *rest)
            else:
                inputs = torch.empty((rows, size, *rest), dtype=pad.dtype)
                torch.cat(pieces, out=inputs[:n].view(-1, *rest))
        except (RuntimeError, TypeError, ValueError):  # e.g. CUDA samples: the general kernels
            return None if rest else self._collate_bare_padded(samples, sizes, rows, size)
        if rows == n:
            lens = np.array(sizes, dtype=np.int64)
            real = _TRUE[:n].copy() if n <= _TRUE.size else np.ones(n, bool)
        else:  # all-padding rows of last_batch="pad": one fill, length 0, not real
            fill_pad(inputs[n:], self._bare_pad_value(first)[0])
            lens = np.zeros(rows, dtype=np.int64)
            lens[:n] = sizes
            real = np.zeros(rows, dtype=np.bool_)
            real[:n] = True
        return self._bare_batch(inputs, lens, ar, size, real)

    def _bare_batch(
        self,
        inputs: torch.Tensor,
        lens: np.ndarray,
        mask_rows: np.ndarray,
        size: int,
        real: np.ndarray,
    ) -> dict[Any, Any]:
        """The short paths' batch: ``inputs``, the lengths, the mask (a take of the table's
        rows, or the windows indexed: row 0, all False, for padding rows), the sample mask."""
        mask = mask_rows.take(lens, axis=0) if size <= _MASK_TABLE_MAX else mask_rows[lens]
        if not real[-1]:  # filler rows (a copy of the table's rows: writable)
            attend_fillers(mask, int(real.sum()), self.side)
        tmask = torch.from_numpy(mask)
        return {
            BARE_KEY: inputs,
            "lengths": torch.from_numpy(lens),
            cf.MASK_KEY: tmask if self.mask_dtype is torch.bool else tmask.to(self.mask_dtype),
            "sample_mask": torch.from_numpy(real),
        }

    def _short_dict(self, samples: list[Any], first: dict) -> dict[Any, Any] | None:
        """The general path for dict samples whose every field is a padded field of flat lists
        (token ids; a tokenizer's ``input_ids``, ``attention_mask``, ``labels``), once a batch
        of these keys went through it, or ``None`` for any other batch.

        NOTE [ The short path of dict samples ]
        A tokenized dataset's samples, ``{"input_ids": [...], ...}``, take the general path,
        whose checks and inference (the structure, the fields, every list's first element, the
        batch's cell) cost more than the padding at 8-32 rows: session 9 measured a numpy
        ``collate_fn`` (zeros, one slice copy per row, the lengths and the mask) at about a third
        of the collator's time on 8 rows. This path takes a full batch of plain dicts with the
        keys of a cached field spec (the general path inferred or checked it for these keys)
        that pads every key, plain lists as values, every field as long as the first in each
        sample (fields that follow one input must be: the general path words it otherwise),
        and a memoised cell (the general path's ``_memo``) shared by the shortest and longest
        list. It pads each field with the general path's own kernels (lists of ints:
        :func:`~bucketloader.collate._pad.int_rows`, else
        :func:`~bucketloader.collate._pad.pad_field`) and builds the outputs in the general
        path's order (a sample field named ``attention_mask`` replaces the built mask), so the
        output is the general path's. A list that is not flat, or of values that are not
        numbers, makes ``pad_field`` raise (it types every element then), and the batch goes on
        to the general path, which words the error.
        """
        specs = self._specs_cache.get(("dict", tuple(first)))
        if specs is None or len(specs) != len(first):
            return None
        for spec in specs:  # the first sample first: a batch of tensors fails here, not after
            # reading the whole batch (s25, GSM8K dicts of 2 tensors: the failed try 1.8-3.5 us
            # a batch of 8-32 rows, of 60-110, now 0.3 us; the list batches' path unchanged)
            if spec.dims not in _LIST_DIMS or type(first.get(spec.key)) is not list:
                return None
        if set(map(type, samples)) != _DICT or set(map(len, samples)) != {len(first)}:
            return None
        columns = []
        try:
            for spec in specs:
                values = list(map(operator.itemgetter(spec.key), samples))
                if set(map(type, values)) != _LIST:
                    return None
                columns.append(values)
        except KeyError:
            return None
        n = len(samples)
        sizes = list(map(len, columns[0]))
        for values in columns[1:]:
            if list(map(len, values)) != sizes:
                return None  # fields of one input disagree: the general path words it
        memo = self._memo
        shape = memo.get((None, max(sizes)))
        if shape is None or memo.get((None, min(sizes))) != shape or n != shape[0]:
            return None
        if shape not in self._shapes:
            return None
        size = shape[1]
        lengths = np.array(sizes, dtype=np.int64)
        table = self._mask_tables.get(size) if size <= _MASK_TABLE_MAX else None
        if table is None:
            mask = sequence_mask(lengths, size, n, self.side)
            if size <= _MASK_TABLE_MAX:  # its rows: the mask of each length (what it gave)
                if len(self._mask_tables) > 64:
                    self._mask_tables.clear()
                lens = np.arange(size + 1)
                self._mask_tables[size] = sequence_mask(lens, size, size + 1, self.side)
        else:
            mask = table.take(lengths, axis=0)
        out: dict[Any, Any] = {}
        for spec, values in zip(specs, columns, strict=True):
            padded = int_rows(values, sizes, size, n, self.side, spec.pad_value)
            if padded is None:
                try:
                    padded = pad_field(
                        values,
                        key=spec.key,
                        lengths=lengths[:, None],
                        dims=(0,),
                        targets=(size,),
                        rows=n,
                        side=self.side,
                        pad_value=spec.pad_value,
                        mask=mask,
                        cache=self._pad_cache,
                    )
                except (TypeError, ValueError):  # not flat lists of numbers: the general path
                    return None
            out[spec.key] = padded
        out["lengths"] = torch.from_numpy(lengths)
        if cf.MASK_KEY not in out:
            tmask = torch.from_numpy(mask)
            out[cf.MASK_KEY] = tmask if self.mask_dtype is torch.bool else tmask.to(self.mask_dtype)
        out["sample_mask"] = torch.from_numpy(
            _TRUE[:n].copy() if n <= _TRUE.size else np.ones(n, bool)
        )
        return out

    def _short_path(self, samples: list[Any], first: torch.Tensor) -> dict[Any, Any] | None:
        """:meth:`_collate_bare` for the commonest batch, or ``None`` for any other (the full
        lean path then takes it, from the start).

        NOTE [ The short path ]
        1-D CPU tensors of one dtype, whose longest and shortest lengths both have a memoised
        cell, as many as the cell's rows (no all-padding rows), none empty: token batches of
        8-32 rows, where ``pad_sequence`` takes 12-16 us at 8 rows and every branch and call of
        the full path shows, and full audio batches, where the full path's steps cost 3-5 us
        more against the same two big writes (the samples and the mask). ``__call__`` tries it
        first, for a planned row count only (a partial batch does not pay for it). Only
        memoised cells that are planned shapes are taken here, so the batch's shape needs no
        other check. The output and the mask are written as the full path writes them:
        NOTE [ Where a large batch is written ], and NOTE [ The mask rows ].

        NOTE [ The short path of (T, F) samples ]
        Features ``(T, F, ...)`` whose ``T`` alone differs take this path too (``_lean_nd``:
        bare samples under the default rules, or ``Field(dims=0)``), with the lean path's
        output. Their lengths are ``numel // (F * ...)`` of the first sample's trailing dims:
        one C call per sample, where reading each shape and comparing its trailing dims cost
        about 7 us at 8 rows (fbank). That length is right for every sample the concatenate
        takes, since ``torch.cat`` refuses any piece whose ndim or trailing dims differ from the
        pad buffer's, before it writes; a batch it refuses goes to the lean path, which measures
        it and words any error. A cached pad buffer of trailing dims ``(F, ...)`` exists only
        once the lean path took such samples, so the field's varying dim was learned as ``T``
        (NOTE [ Which dim varies ]: a learned dim never changes). A batch whose ``T`` is the
        same in every sample goes to the lean path, which leaves it to the general one.
        """
        n = len(samples)
        try:  # numel: the length of a 1-D sample (the concatenate refuses any other sample)
            sizes = list(map(torch.Tensor.numel, samples))
        except TypeError:  # a sample that is no tensor: the general path words it
            return None
        ndim = first.ndim
        if ndim == 1:
            rest: tuple[int, ...] = ()
        elif ndim > 1 and self._lean_nd:  # NOTE [ The short path of (T, F) samples ]
            rest = first.shape[1:]
            per = math.prod(rest)
            if not per:
                return None
            sizes = [m // per for m in sizes]
        else:
            return None  # 0-d: the general path words it
        if not first.is_cpu:  # (full rows of CUDA samples would cat on the device)
            return None
        hi, lo = max(sizes), min(sizes)
        shape = self._cells.get(hi)
        if shape is None or self._cells.get(lo) is not shape or n != shape[0] or not lo:
            return None
        size = shape[1]
        if rest:
            if lo == hi:  # no dim varies: the general path (NOTE [ Which dim varies ])
                return None
            entry = self._lean_cache.get((torch.Tensor, size, first.dtype, rest))
        else:
            entry = self._lean_cache.get((torch.Tensor, size, first.dtype))
        if entry is None or n > _TRUE.size:
            return None
        if list(map(_DTYPE, samples)).count(first.dtype) != n:  # (cat would promote them)
            return None
        try:  # the pad pieces (interleaved_pieces, inlined); None for a full row
            pads = list(map(entry[1].__getitem__, sizes))
        except KeyError:
            return None
        pieces: list[Any] = [None] * (n + n)
        if self.side == "right":
            pieces[0::2], pieces[1::2] = samples, pads
        else:
            pieces[0::2], pieces[1::2] = pads, samples
        if hi == size:  # no empty piece in torch.cat (several times slower)
            pieces = [p for p in pieces if p is not None]
        try:
            if n < entry[3]:  # (pad, views, mask rows, np_rows, np_dtype)
                inputs = torch.cat(pieces).view(n, size, *rest)
            elif first.requires_grad:  # (autograd refuses out=: the full path, tried once)
                return None
            else:  # NOTE [ Where a large batch is written ] (from_numpy, not view: cheaper)
                buf = np.empty((n, size, *rest), entry[4])
                torch.cat(pieces, out=torch.from_numpy(buf.reshape(-1, *rest)))
                inputs = torch.from_numpy(buf)
        except (RuntimeError, TypeError, ValueError):  # a sample of other dims, autograd and
            return None  # out=: the full path takes the batch (and words any error)
        lens = np.array(sizes, dtype=np.int64)
        return self._bare_batch(inputs, lens, entry[2], size, _TRUE[:n].copy())

    def _guess_dim(self, shapes: list[Any]) -> int:
        """The variable dim of a field's samples of one shape (a batch in which no dim varies,
        before any batch showed one varying): NOTE [ Which dim varies ] in
        :mod:`bucketloader.collate.fields`, rule 3."""
        n, sizes = len(shapes), tuple(shapes[0])
        cut = None if self._cut is None else int(self._cut[0])

        def score(d: int) -> tuple[bool, bool, bool]:
            size = sizes[d] if cut is None else min(sizes[d], cut)
            try:
                rows = self.shape_table.target(np.full(n, size, np.int64))[0]
            except ValueError:  # longer than the plan holds (or no cell takes it)
                return (False, False, False)
            return (True, sizes[d] > 1 or max(sizes) == 1, rows == n)

        return max(range(len(sizes)), key=score)  # ties keep the first dim (time-major)

    def _first_dim_varies(self, samples: Any, ndims: set[int]) -> tuple[tuple[int, ...], list[int]]:
        """The trailing dims ``F, ...`` and the lengths ``T`` of ``(T, F, ...)`` samples whose
        ``T`` alone differs, where the general path would pad along ``T`` (NOTE [ Which dim
        varies ]: the one dim that differs, remembered for the field); ``()`` for any other
        batch."""
        if len(ndims) != 1 or not self._lean_nd or min(ndims) < 2:
            return (), []  # 0-d samples too: the general path words them
        shapes = [tuple(s.shape) for s in samples]
        rest = shapes[0][1:]
        sizes = [s[0] for s in shapes]
        if any(s[1:] != rest for s in shapes) or min(sizes) == max(sizes):
            return (), []  # another dim differs, or none: the general path infers or words it
        if self.fields is None:  # what _infer_dim remembers (or refuses) for the field
            learned = self._learned.get(BARE_KEY)
            if learned != ((0,), True):
                if learned is not None and learned[0] != (0,):
                    return (), []
                self._learned[BARE_KEY] = ((0,), True)
        return rest, sizes

    def _bare_pad_value(self, first: Any) -> tuple[Any]:
        """The pad value of bare samples, as a 1-tuple (taken once; checks pad_value's keys)."""
        if self._bare_pad is None:
            (spec,) = self._specs(first, "bare", [BARE_KEY])
            self._bare_pad = (spec.pad_value,)
        return self._bare_pad

    def _lean_entry(
        self, first: Any, size: int, rest: tuple[int, ...], key: tuple
    ) -> tuple[Any, dict, Any, int, Any] | None:
        """The pad buffer ``(size, *rest)``, its cached views, the mask rows (row ``L``: the
        mask of a sample of length ``L``; NOTE [ The mask rows ]), the rows from which numpy
        allocates the output and the output's numpy dtype, of :meth:`_collate_bare`, or
        ``None`` (a dtype torch cannot take, or a pad value it cannot hold: the general path
        raises the message).

        NOTE [ The mask rows ]
        A batch's mask is its lengths' rows of a ``(size + 1, size)`` bool array, copied by one
        numpy call: up to ``_MASK_TABLE_MAX`` a table in memory (4 MiB at most, one ``take``),
        above it the windows of one pattern of ``2 * size`` bools (``sliding_window_view``, no
        memory of its own; ``True * size + False * size``, reversed, for right padding), read by
        an integer index (``take`` would first copy the whole view). Session 9 measured the index
        of the windows at 0.25-0.5x the time of session 8's concatenate of cached windows (8
        rows of 4,144: 1.1 against 4.4 us) and 0.7-0.95x the run-length mask it took from 17 rows
        on; the table's ``take`` stays: the index costs about 1 us more below 32 rows."""
        pad_value = self._bare_pad_value(first)
        kind, dtype = type(first), first.dtype
        tdtype = dtype if kind is torch.Tensor else torch_dtype(dtype)
        if tdtype is None or not fits(pad_value[0], tdtype):
            return None
        if len(self._lean_cache) > 64:
            self._lean_cache.clear()
        pad = torch.empty((size, *rest), dtype=tdtype)
        fill_pad(pad, pad_value[0])
        ar: np.ndarray = np.arange(size)
        if size <= _MASK_TABLE_MAX:  # NOTE [ The mask rows ]
            ar = np.arange(size + 1)[:, None] > (ar if self.side == "right" else size - 1 - ar)
        elif self.side == "right":  # True * size + False * size: row L is window size - L
            ar = sliding_window_view(np.arange(2 * size) < size, size)[::-1]
        else:  # False * size + True * size: row L is window L
            ar = sliding_window_view(np.arange(2 * size) >= size, size)
        # from np_rows rows on, numpy allocates the output (never for bfloat16, which it lacks)
        # (numpy samples keep their own dtype: numpy_dtype knows none for torch's uint16/32/64)
        np_dtype = numpy_dtype(tdtype) or (dtype if kind is np.ndarray else None)
        np_rows = -(-NUMPY_MIN_BYTES // max(pad.nbytes, 1)) if np_dtype is not None else 1 << 62
        pad_buffer = pad.numpy() if kind is np.ndarray else pad
        entry: tuple[Any, dict, Any, int, Any] = (pad_buffer, {}, ar, np_rows, np_dtype)
        self._lean_cache[key] = entry
        return entry

    def _collate_bare_padded(
        self, samples: Any, sizes: list[int], rows: int, size: int
    ) -> dict[Any, Any]:
        """:meth:`_collate_bare` through the general kernels (all-padding rows of
        ``last_batch="pad"``, mixed dtypes, many short rows, CUDA samples)."""
        pad_value = self._bare_pad_value(samples[0])
        n = len(sizes)
        if rows == n:
            lens = np.array(sizes, dtype=np.int64)
            sample_mask = torch.ones(n, dtype=torch.bool)
        else:
            lens = np.zeros(rows, dtype=np.int64)
            lens[:n] = sizes
            sample_mask = torch.zeros(rows, dtype=torch.bool)
            sample_mask[:n] = True
        mask = sequence_mask(lens, size, rows, self.side)  # padding rows have length 0
        try:
            inputs = pad_1d(
                samples, sizes, size, rows, self.side, pad_value[0], BARE_KEY, mask, self._pad_cache
            )
        except RuntimeError as exc:  # (and NotImplementedError) a meta or sparse sample: named
            check_readable(samples, BARE_KEY, exc)
            raise
        attend_fillers(mask, n, self.side)  # after pad_1d, which reads the mask
        tmask = torch.from_numpy(mask)
        return {
            BARE_KEY: inputs,
            "lengths": torch.from_numpy(lens),
            cf.MASK_KEY: tmask if self.mask_dtype is torch.bool else tmask.to(self.mask_dtype),
            "sample_mask": sample_mask,
        }

    def _raise_unplanned(self, n: int, out_shape: tuple[int, ...]) -> None:
        raise ValueError(
            f"batch of {n} samples would have shape {out_shape}, which the sampler did not "
            f"plan (planned: {sorted(self._shapes)[:8]}...); was this collator built from "
            "the sampler that produced the batch?"
        )

    def _fixed(self, values: list[Any], key: Any, rows: int) -> Any:
        try:
            res = default_collate(values)
        except (RuntimeError, TypeError, IndexError, KeyError) as exc:
            check_readable(values, key, exc)
            kinds = [_shape_of(v) for v in values]
            # (torch's own words were internal ones: "'list' object cannot be interpreted as
            # an integer" of a label 0 beside [1, 2], an IndexError of a dict beside a tensor)
            other = next((i for i, k in enumerate(kinds) if k != kinds[0]), None)
            why = (
                f"sample 0 holds {kinds[0]} there and sample {other} {kinds[other]}"
                if other is not None
                else f"every sample holds {kinds[0]} there, which torch does not stack"
            )
            raise ValueError(
                f"field {key!r} is treated as fixed-size but cannot be stacked: {why}; if it "
                "varies in length, list it in fields={...} with the input that buckets that "
                "length; a count no input buckets (detection boxes (n, 4) per image) must be "
                "padded to one fixed size in the dataset (with a mask of the real entries: "
                "static shapes), or taken out of the samples before this collator"
            ) from None
        if isinstance(res, torch.Tensor) and rows > len(values):
            fill = res.new_full((rows - len(values), *res.shape[1:]), self._fill_for(key, res))
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


_NDIM = operator.attrgetter("ndim")
_ONE_D = {1}
_DICT = {dict}


def _is_empty_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not value


def attend_fillers(mask: Any, real: int, side: str) -> None:
    """Mark one position of each filler row (rows ``real:``) of ``mask`` as attended.

    NOTE [ Filler rows attend one position ]: a row with an all-False attention mask makes
    softmax attention (``torch.nn.MultiheadAttention`` with ``key_padding_mask``, SDPA) divide
    0 by 0: NaN outputs, and NaN gradients even when the loss multiplies that row by 0. So a
    filler row (``sample_mask`` False) attends exactly one position, the first of the row's
    content side (0 under right padding, the last under left padding), which holds the pad value:
    outputs stay finite, nothing is copied, and the batch is the same on every run. ``lengths``
    stays 0 and ``sample_mask`` False there; only ``attention_mask`` counts that one position.

    Example:
        >>> m = np.zeros((2, 3), dtype=bool)
        >>> attend_fillers(m, 1, "left")
        >>> m.astype(int).tolist()
        [[0, 0, 0], [0, 0, 1]]
    """
    if real < len(mask) and mask.shape[-1]:
        mask[real:, 0 if side == "right" else -1] = 1


_LIST = {list}
_LIST_DIMS = (None, (0,), (-1,))
#: Elements of a 1-D sample, per type (a C call each; ``len(tensor)`` is a Python method).
_NUMEL: dict[type, Any] = {
    torch.Tensor: torch.Tensor.numel,
    np.ndarray: operator.attrgetter("size"),
}
_TRUE = np.ones(4096, dtype=np.bool_)
#: Row lengths up to which :meth:`PadCollator._collate_bare` keeps a table of mask rows (4 MiB;
#: NOTE [ The mask rows ]).
_MASK_TABLE_MAX = 2047
_DTYPE = operator.attrgetter("dtype")


_HINT = (
    "a sampler batches samples of one bucket (a batch holding shorter, promoted samples "
    "starts with one of its own), so either this batch did not come from the sampler "
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
    the longest sample's common cell, or, when the plan promotes (``table.promoted``), the
    longest's when the first sample shares it (a batch with promoted samples, NOTE [ Promotion
    of leftovers ] in :mod:`bucketloader.plan.promote`); any other batch mixing cells is refused;
    ``memo`` caches ``target`` per (group, length).
    """
    n, d = lengths.shape
    if d == 1:
        col = lengths[:, 0]
        q, p = int(col.argmin()), int(col.argmax())
        shape = _cell(table, lengths, p, group, memo)
        # a short sample alone is refused, not in a batch whose longest one passes (NOTE [ A
        # batch shorter than every planned sample ] in bucketloader.plan.table)
        floor = getattr(table, "shortest", None)
        if floor is not None and below_plan(int(col[q]), floor[0]):
            lengths = np.maximum(lengths, floor[0])
        low = shape if col[q] == col[p] else _cell(table, lengths, q, group, memo)
        if low[1:] != shape[1:] and (
            not getattr(table, "promoted", False) or _cell(table, lengths, 0, group, memo) != shape
        ):
            raise ValueError(
                f"samples of one batch fall in different buckets: the sample at batch position "
                f"{p} has length {int(col[p])} (bucket {shape[1]}) but the sample at "
                f"position {q} has length {int(col[q])} (bucket {low[1]}); {_HINT}"
            )
        if col[p] > shape[1]:  # the cell of the longest sample covers every sample
            _raise_over(lengths, np.asarray(shape[1:]), shape, names)
    else:
        try:
            shape = _target(table, lengths, group)
        except ValueError as exc:
            raise ValueError(f"{exc}{_swap_hint(table, lengths, group, names)}") from None
        _check_cells(shape, lengths, names, "the sampler's target")
    if n > shape[0]:
        p = int(np.argmax(lengths.sum(axis=1)))
        raise ValueError(
            f"batch of {n} samples does not fit its target shape {shape}: the sample at batch "
            f"position {p} has length {_fmt(lengths[p])}, which puts the batch in a cell planned "
            f"for {shape[0]} samples; {_HINT}"
            + (_swap_hint(table, lengths, group, names) if d == 2 else "")
        )
    return shape


def _swap_hint(table: Any, lengths: np.ndarray, group: Any, names: tuple[str, ...]) -> str:
    """For a batch of two inputs no planned cell holds (or whose cell holds fewer rows): the fix
    when it fits with the inputs swapped ("" otherwise).

    NOTE [ Width and height swapped ]
    A field follows its inputs in order along its dims, so lengths given as (width, height)
    (COCO's order, and the order of the sizes file in tests/data) and (C, H, W) images padded
    with ``Field(dims=(-2, -1))`` measure each image's height as its width. Session 21 found
    that silent where the plan's cells come in both orientations (COCO: the batch takes the
    transposed cell, whose shape is planned too), and, for landscape-only data, an error that
    said only to rebuild the sampler. Under ``max_tokens`` the transposed cell can also hold
    fewer rows (COCO / 8, 8 shapes: 17 of 220 batches refused as too many samples, with the
    hint that the samples disagree with the lengths). Where the swapped lengths fit, rows and
    all, the error now names the order.
    """
    if lengths.shape[1] != 2:
        return ""
    try:
        swapped = table.target(lengths[:, ::-1], group=group)
    except ValueError:
        return ""
    if len(lengths) > swapped[0]:
        return ""
    return (
        "; the batch fits the plan with the two inputs swapped: a field follows the inputs in "
        f"order along its dims (Field(dims=(-2, -1)) pads {names[0]!r} along dim -2, the height "
        "of a (C, H, W) image); if that is the mix-up, pass "
        f"Field(input=({names[1]!r}, {names[0]!r}), dims=(-2, -1))"
    )


def check_planned(
    shape: tuple[int, ...], lengths: np.ndarray, names: tuple[str, ...]
) -> tuple[int, ...]:
    """A batch that carries its planned shape (a stream split over ranks may fill a step with
    samples of shorter cells): they must fit it."""
    _check_cells(shape, lengths, names, "the batch's planned")
    n = lengths.shape[0]
    if n > shape[0]:
        raise ValueError(f"batch of {n} samples does not fit its planned shape {shape}")
    return shape


def _check_cells(
    shape: tuple[int, ...], lengths: np.ndarray, names: tuple[str, ...], whose: str
) -> None:
    """Every sample of measured ``lengths`` ``(n, D)`` fits the lengths of ``shape`` (``whose``
    shape it is, for the message)."""
    d = lengths.shape[1]
    if len(shape) != d + 1:
        raise ValueError(
            f"{whose} shape {shape} has {len(shape) - 1} lengths but the collator measured "
            f"{d} inputs {names}"
        )
    cell = np.asarray(shape[1:], dtype=np.int64)
    if (lengths > cell).any():
        _raise_over(lengths, cell, shape, names)


def cut_to_plan(
    lengths: np.ndarray,
    columns: dict[Any, list[Any]],
    dims: dict[Any, tuple[int, ...]],
    specs: list[cf.Spec],
    limits: np.ndarray,
) -> np.ndarray:
    """Cut fields longer than the plan's ``truncate`` limits (NOTE [ Cutting samples the plan
    truncates ]); returns the lengths after the cut. ``columns`` is updated in place."""
    over = lengths > limits[None, :]
    if not over.any():
        return lengths
    for spec in specs:
        for j, inp in enumerate(spec.inputs):
            rows = np.flatnonzero(over[:, inp]).tolist()
            if not rows:
                continue
            lim, dim = int(limits[inp]), dims[spec.key][j]
            vals = list(columns[spec.key])
            for r in rows:
                v = vals[r]
                vals[r] = (
                    v[:lim]
                    if isinstance(v, (list, tuple))
                    else v[(slice(None),) * dim + (slice(0, lim),)]
                )
            columns[spec.key] = vals
    return np.minimum(lengths, limits[None, :])


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


def _shape_of(value: Any) -> str:
    """A fixed-size field's value as an error names it: an array as :func:`describe` does, else
    its type and length or keys (not its values: a long list would fill the message).

    Example:
        >>> _shape_of(torch.zeros(2))
        'a tensor of dtype torch.float32 and shape (2,)'
        >>> _shape_of([1, 2]), _shape_of(0), _shape_of({"a": 1})
        ('a list of 2', 'an int', "a dict with keys ['a']")
    """
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return describe(value)
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))[:8]}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    name = type(value).__name__
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"
