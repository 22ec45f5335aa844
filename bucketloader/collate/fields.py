"""Which fields of a sample are padded, along which dims, and how long they are.

:class:`Field` configures one variable-length field; without configuration the collator infers
the fields from the samples (:func:`infer_fields`, rules in NOTE [ Which fields are padded ] of
:mod:`bucketloader.collate.collator`). Sample kinds (dict, bare, tuple) are those of
:mod:`bucketloader._samples`.

NOTE [ Which dim varies ]
A field that follows one bucketed input and leaves ``dims`` unset (``Field()``, a field given by
an input name, or any field the collator infers) has its variable dim inferred from the samples,
so that waveforms ``(T,)``, token lists, features ``(T, F)`` and channel-first audio ``(C, T)``
need no configuration:

1. a flat list or a 1-D array varies along its only dim;
2. otherwise, the one dim whose size differs between the samples of the batch is the variable
   one, and the collator remembers it for the field;
3. a batch in which no dim differs (one sample, or equal lengths) uses the dim remembered from an
   earlier batch, else the collator's guess (``guess``, one bucketed input): the first dim whose
   size the plan can hold (no longer than the last boundary, not under half the shortest
   planned length), which is not a size-1 axis beside a longer one, and with which the batch is
   a full one of its cell, in that order of preference; else the first dim (time-major, as
   NOTE [ The length of a sample ] measures).
   Session 20 found torchaudio's ``(1, T)`` mono waveforms in a one-sample first batch (the
   long buckets of a ``max_tokens`` plan hold one row) padded along the channel dim: a
   ``(2, 9016, 9404)`` batch from a 9,404-sample utterance, with ``lengths`` 2, silently, until a
   later batch raised. A later batch that shows another dim varying is still an error naming the
   fix, because that earlier batch was padded along the wrong dim: channel-first samples whose
   first batches may hold one sample each should say ``Field(dims=-1)``;
4. several dims differing is an error that names the fix (``Field(dims=...)``, or a second
   bucketed input for 2-D buckets such as images).

Fields that follow several inputs always give their ``dims`` (which dim follows which input is
not something sizes can tell).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from bucketloader._samples import BARE_KEY, convert_hint, is_flat_list, is_sequence, kind_of
from bucketloader._validation import MissingKeyError

#: The pad value of integer label fields (NOTE [ Label fields pad with -100 ] in
#: :mod:`bucketloader.collate.collator`): torch's ``ignore_index`` (``cross_entropy``,
#: ``nll_loss``), and Hugging Face's label pad.
LABEL_PAD = -100
#: The keys of label fields: Hugging Face's names (``default_data_collator`` reads ``label`` and
#: ``label_ids``, models take ``labels``). Exact names, not a ``label`` prefix: ``label_lengths``
#: (CTC's target lengths: ``ctc_loss`` refuses a length of -100) and ``labels_mask`` (-100 is
#: True as a mask) are integers that -100 breaks.
LABEL_KEYS = frozenset({"label", "labels", "label_ids"})


def is_int_label(key: Any, value: Any) -> bool:
    """Whether ``value`` (a sample's field ``key``, or a collated column) is an integer label:
    a key in :data:`LABEL_KEYS` (``label``, ``labels``, ``label_ids``, as Hugging Face names
    them) and signed integer values (a Python ``int``, or a list, array or tensor of them; bool
    and unsigned dtypes, which cannot hold -100, and floats are not).

    Example:
        >>> is_int_label("labels", [3, 1]), is_int_label("label", 2.5), is_int_label("ids", [3])
        (True, False, False)
        >>> is_int_label("label_lengths", 3)  # a label's length, not a label
        False
    """
    if not (isinstance(key, str) and key in LABEL_KEYS):
        return False
    while isinstance(value, (list, tuple)):  # (a list's first number: nested lists too)
        value = value[0] if value else None
    if type(value) is int or isinstance(value, np.signedinteger):
        return True
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype):
        return bool(np.issubdtype(dtype, np.signedinteger))
    return (
        dtype is not None
        and getattr(dtype, "is_signed", False)
        and not getattr(dtype, "is_floating_point", True)
        and not getattr(dtype, "is_complex", True)
    )


#: Output keys the collator adds; a sample field may not use them (``attention_mask`` excepted).
RESERVED = ("lengths", "sample_mask")
MASK_KEY = "attention_mask"


@dataclass(frozen=True)
class Field:
    """How one variable-length field is padded.

    Attributes:
        input: the sampler input(s) the field follows: a name from ``shape_table.input_names``,
            a tuple of names (one per dim in ``dims``), or ``None`` for all inputs in order.
        dims: the variable dim(s) of the field, one per input (negative counts from the end);
            ``None`` (default) infers the one variable dim of a field that follows one input
            (NOTE [ Which dim varies ]).
        pad_value: value of padding elements; ``None`` uses the collator's ``pad_value`` (-100
            for an integer label field, NOTE [ Label fields pad with -100 ]).

    Example:
        >>> Field(input=("1", "0"), dims=(-2, -1))  # images (C, H, W), lengths (W, H)
        Field(input=('1', '0'), dims=(-2, -1), pad_value=None)
        >>> Field(dims=-2)  # features (T, F) whose time dim T follows the lengths
        Field(input=None, dims=(-2,), pad_value=None)
    """

    input: str | tuple[str, ...] | None = None
    dims: int | tuple[int, ...] | None = None
    pad_value: Any = None

    def __post_init__(self) -> None:
        if self.dims is None:
            named = (self.input,) if isinstance(self.input, str) else self.input
            if named is not None and (
                not isinstance(named, tuple) or not all(isinstance(x, str) for x in named)
            ):
                raise TypeError(
                    "input must be an input name, a tuple of names or None, got "
                    f"input={self.input!r}"
                )
            if named is not None and len(named) != 1:
                raise ValueError(
                    f"a field that follows several inputs {named} must say which dim follows "
                    f"which: Field(input={named!r}, dims={tuple(range(-len(named), 0))!r})"
                )
            check_pad("pad_value", self.pad_value, allow_none=True)
            object.__setattr__(self, "input", named)
            return
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


def check_pad(name: str, value: Any, *, allow_none: bool = False) -> None:
    """A pad value must be a real number (or bool)."""
    if value is None and allow_none:
        return
    if not isinstance(value, (numbers.Number, np.number, np.bool_)) or isinstance(value, complex):
        raise TypeError(f"{name} must be a number, got {name}={value!r}")
    if not isinstance(value, (int, float, np.number, np.bool_)):  # torch's fill_ refuses them
        raise TypeError(
            f"{name} must be an int, float or bool (Python or numpy), got {name}={value!r}; "
            f"pass float({name}) or int({name})"
        )
    if isinstance(value, int) and not -(1 << 63) <= value < 1 << 64:  # no tensor dtype holds it
        raise ValueError(  # (int64 or uint64; which one fits the batch's dtype is checked there)
            f"{name} must fit in int64 or uint64 (-2**63 to 2**64 - 1), got {name}={value!r}; "
            f"pass a smaller int, or float({name}) for floating-point samples"
        )


def bind_fields(fields: Any, names: tuple[str, ...], group_key: Any) -> dict[Any, Field] | None:
    """Check a ``fields`` argument against the sampler's input names; key -> Field."""
    if fields is None:
        return None
    if isinstance(fields, Field):
        fields = {BARE_KEY: fields}
    if not isinstance(fields, Mapping) or not fields:
        raise TypeError(
            "fields must be None, a Field, or a non-empty mapping key -> Field or input name, "
            f"got fields={fields!r}"
        )
    bound: dict[Any, Field] = {}
    for key, f in fields.items():
        if isinstance(f, (str, tuple)):
            f = Field(input=f, dims=tuple(range(-len(f), 0)) if isinstance(f, tuple) else None)
        if not isinstance(f, Field):
            raise TypeError(f"fields[{key!r}] must be a Field or an input name, got {f!r}")
        inp = f.input if f.input is not None else names
        unknown = [x for x in inp if x not in names]
        if f.dims is None and not unknown and len(inp) != 1:
            raise ValueError(
                f"fields[{key!r}] follows the sampler's {len(inp)} inputs {inp} but gives no "
                f"dims; say which dim follows which, e.g. Field(dims={tuple(range(-len(inp), 0))})"
            )
        dims = f.dims if isinstance(f.dims, tuple) else (f.dims,)
        if unknown or (f.dims is not None and len(inp) != len(dims)):
            raise ValueError(
                f"fields[{key!r}] follows inputs {inp} with dims {f.dims}, but the sampler's "
                f"inputs are {names}; give one dim per input, using these names"
            )
        if key in RESERVED or key == group_key:
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


#: How samples carry their group, for the errors of a plan with ``groups=`` whose samples do not.
GROUP_FIX = (
    "wrap the datasets in GroupedDataset([a, b]) and pass its .groups (it adds 'dataset' to "
    "every dict sample), or give every sample (a dict, e.g. {'inputs': x}) its group id "
    "under a key and pass collator(group_key=<that key>)"
)


def read_group(samples: Sequence[Any], group_key: Any) -> Any:
    """The one group id shared by every sample of a batch (``None`` without ``group_key``)."""
    if group_key is None:
        return None
    values = []
    for pos, s in enumerate(samples):
        if group_key not in s:
            raise MissingKeyError(
                f"sample at batch position {pos} has no group_key {group_key!r}; "
                f"its keys are {list(s.keys())}: the plan has groups= (boundaries per group), so "
                f"each batch's group is read from its samples; {GROUP_FIX}"
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


class Spec(NamedTuple):
    """A resolved variable-length field: which inputs it follows along which dims."""

    key: Any
    inputs: tuple[int, ...]  # indices into shape_table.input_names
    dims: tuple[int, ...] | None  # as configured (may be negative); None: inferred
    pad_value: Any


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
) -> dict[Any, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """Default variable fields (key -> (inputs, dims)) when ``fields=None``; see PadCollator.

    ``dims`` is ``None`` for fields that follow one input: their variable dim is inferred from
    the samples (NOTE [ Which dim varies ]).
    """
    d = len(input_names)
    every = tuple(range(d))
    if kind == "bare":
        if d != 1:
            raise ValueError(
                f"samples are bare arrays but the sampler buckets {d} inputs {input_names}; say "
                f"which dim follows which input, e.g. fields=Field(dims={tuple(range(-d, 0))})"
            )
        return {BARE_KEY: (every, None)}
    if kind == "tuple":
        if len(sample) < d:
            raise ValueError(
                f"samples are tuples of {len(sample)} elements but the sampler buckets {d} inputs "
                f"{input_names}; by default position k follows input k, so pass fields={{...}}"
            )
        return {k: ((k,), None) for k in range(d)}
    # A key named after an input that holds a number is that input's length column (a plain
    # sampler's input is called "length", the column ``hf.lengths`` reads): it passes through,
    # and the padded field is found as if no key matched.
    named: dict[Any, tuple[tuple[int, ...], tuple[int, ...] | None]] = {
        k: ((input_names.index(k),), None)
        for k in sample
        if k in input_names and not isinstance(sample[k], numbers.Number)
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
        # an image (C, H, W) follows several inputs in one field (session 21: the text example
        # alone sent a vision user to two fields)
        wide = [k for k, v in sample.items() if k != group_key and getattr(v, "ndim", 0) >= d]
        one = (
            f", or for one field that follows every input along its last {d} dims (an image "
            f"(C, H, W) with inputs named in that order) fields={{{wide[0]!r}: {input_names!r}}}"
            if wide
            else ""
        )
        raise ValueError(
            f"the sampler buckets {d} inputs {input_names} but no sample key is named after one; "
            "say which key follows which input, e.g. fields={'input_ids': "
            f"{input_names[0]!r}, 'labels': {input_names[1]!r}}}{one}"
        )
    return {k: ((0,), None) for k, v in sample.items() if k != group_key and is_sequence(v)}


def measure(
    samples: Sequence[Any],
    kind: str,
    specs: list[Spec],
    num_inputs: int,
    learned: dict[Any, tuple[tuple[int, ...], bool]] | None = None,
    guess: Callable[[list[Any]], int] | None = None,
    names: tuple[str, ...] = (),
) -> tuple[np.ndarray, dict[Any, list[Any]], dict[Any, tuple[int, ...]]]:
    """Per-sample sizes of each input (n, D), each field's values and its non-negative dims.

    Fields that follow the same input must agree on its size in every sample. ``learned`` is the
    collator's memory of inferred dims (key -> (dims, seen varying)), and ``guess`` its choice
    for a batch in which no dim varies, NOTE [ Which dim varies ]; ``names`` (the sampler's
    input names) go into the fixes errors suggest.
    """
    if len(specs) == 1 and len(specs[0].inputs) == num_inputs == 1:
        spec = specs[0]
        vals = column(samples, spec.key, kind)
        sizes, dims = _sizes(vals, spec, learned, guess)
        return sizes, {spec.key: vals}, {spec.key: dims}
    n = len(samples)
    lengths = np.full((n, num_inputs), -1, dtype=np.int64)
    owner: dict[int, Any] = {}
    columns: dict[Any, list[Any]] = {}
    ndims: dict[Any, tuple[int, ...]] = {}
    for spec in specs:
        vals = column(samples, spec.key, kind)
        columns[spec.key] = vals
        sizes, dims = _sizes(vals, spec, learned, guess, names)
        ndims[spec.key] = dims
        for j, inp in enumerate(spec.inputs):
            if inp not in owner:
                owner[inp] = spec.key
                lengths[:, inp] = sizes[:, j]
                continue
            bad = np.flatnonzero(lengths[:, inp] != sizes[:, j])
            if bad.size:
                p = int(bad[0])
                target = next(
                    (k for k in (spec.key, owner[inp]) if str(k).startswith("label")), None
                )
                hint = (
                    f"; a target of its own length such as {target!r} (a transcript, a "
                    "translation) cannot follow the input: bucket it as an input of its own "
                    "(lengths={'...': ..., " + repr(target) + ": ...}), let "
                    "bucketloader.hf.for_text / for_audio pad it to a planned length per bucket, "
                    "or take it out of the samples before this collator (a CTC loss takes the "
                    "targets concatenated: docs/audio.md, 'Plain PyTorch')"
                    if target is not None
                    else ""
                )
                raise ValueError(
                    f"fields {owner[inp]!r} and {spec.key!r} both follow input {inp} but the "
                    f"sample at batch position {p} has lengths {int(lengths[p, inp])} and "
                    f"{int(sizes[p, j])}; if one of them has a fixed size, list only the variable "
                    "fields with fields={...}" + hint
                )
    return lengths, columns, ndims


def _sizes(
    vals: list[Any],
    spec: Spec,
    learned: dict[Any, tuple[tuple[int, ...], bool]] | None = None,
    guess: Callable[[list[Any]], int] | None = None,
    names: tuple[str, ...] = (),
) -> tuple[np.ndarray, tuple[int, ...]]:
    first = vals[0]
    if not is_sequence(first):
        what = f"{type(first).__name__} (not a tensor, array or flat list of numbers)"
        if getattr(first, "ndim", None) == 0:  # (was "holds Tensor (not a tensor, ...)")
            what = f"a 0-d {type(first).__name__}: a scalar, with no dim to pad"
        raise TypeError(
            f"field {spec.key!r} is padded but holds {what}"
            + (convert_hint(first) or "; leave it out of fields")
        )
    if isinstance(first, (list, tuple)):
        if spec.dims not in (None, (-1,), (0,)):
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
    t0 = type(first)
    shapes = [v.shape for v in vals] if len(set(map(type, vals))) == 1 else None
    if shapes is None or set(map(len, shapes)) != {ndim}:
        p = next(p for p, v in enumerate(vals) if type(v) is not t0 or len(v.shape) != ndim)
        other = vals[p]
        fix = (
            "; convert the field to one type in the dataset (torch.as_tensor)"
            if type(other) is not t0
            else "; every sample's field needs the same number of dims, e.g. give a grayscale "
            "(H, W) image the channel dim of the (C, H, W) ones: x[None], or x.expand(3, -1, -1) "
            "beside RGB images"
            if abs(len(other.shape) - ndim) == 1
            else ""
        )
        raise TypeError(
            f"field {spec.key!r} of the sample at batch position {p} is "
            f"{_describe(other)} but at position 0 it is {_describe(first)}{fix}"
        )
    if spec.dims is None:
        dims = _infer_dim(spec.key, shapes, learned, guess, names)
    else:
        dims = tuple(d + ndim if d < 0 else d for d in spec.dims)
        if any(d < 0 or d >= ndim for d in dims):
            raise ValueError(
                f"field {spec.key!r} has {ndim} dims (shape {tuple(first.shape)}) but "
                f"dims={spec.dims}"
            )
    fixed = [d for d in range(ndim) if d not in dims]
    if fixed:
        ref = [first.shape[d] for d in fixed]
        for p, s in enumerate(shapes):
            if [s[d] for d in fixed] != ref:
                varying = _varying(shapes)
                fixed_diff = [d for d in fixed if d in varying]
                fix = (
                    f"; the size that differs is dim {varying[0]} ({varying[0] - ndim} from the "
                    f"end): pass fields={{{spec.key!r}: Field(dims={varying[0] - ndim})}}, or "
                    "leave dims unset to infer it"
                    if len(varying) == 1 and len(dims) == 1
                    # session 21: channels-last images (H, W, C), dims (-2, -1), had no fix
                    else f"; the sizes that differ are dims {tuple(varying)} "
                    f"({tuple(d - ndim for d in varying)} from the end), channels-last "
                    "(H, W, C) images for example: give the field "
                    f"dims={tuple(d - ndim for d in varying)}, or permute the samples to (C, H, W)"
                    if len(varying) == len(dims) > 1
                    and ndim - 1 not in varying
                    and first.shape[-1] <= 4  # (1, 3 or 4 channels last)
                    # session 21: images of 1 and 3 channels
                    else f"; dim {fixed_diff[0]} is not padded but its size differs (images of "
                    "1 and 3 channels for example): make it the same in every sample, e.g. "
                    "x.expand(3, -1, -1) for a grayscale (1, H, W) image, or PIL's "
                    "image.convert('RGB')"
                    if fixed_diff
                    else ""
                )
                raise ValueError(
                    f"field {spec.key!r} of the sample at batch position {p} has shape "
                    f"{tuple(s)} but position 0 has {tuple(first.shape)}; only dims "
                    f"{spec.dims} may vary between samples{fix}"
                )
    if len(dims) == 1:
        d = dims[0]
        return np.array([s[d] for s in shapes], dtype=np.int64)[:, None], dims
    return np.array([[s[d] for d in dims] for s in shapes], dtype=np.int64), dims


def _varying(shapes: list[Any]) -> list[int]:
    """The dims whose size differs between the shapes."""
    first = shapes[0]
    return [d for d in range(len(first)) if any(s[d] != first[d] for s in shapes)]


def _infer_dim(
    key: Any,
    shapes: list[Any],
    learned: dict[Any, tuple[tuple[int, ...], bool]] | None,
    guess: Callable[[list[Any]], int] | None = None,
    names: tuple[str, ...] = (),
) -> tuple[int, ...]:
    """The variable dim of a field following one input (NOTE [ Which dim varies ]); ``names``:
    the sampler's inputs, for the fix of a field that varies along several dims."""
    ndim = len(shapes[0])
    if ndim == 1:
        return (0,)
    varying = _varying(shapes)
    memory = {} if learned is None else learned
    before = memory.get(key)
    if len(varying) == 1:
        dims = (varying[0],)
        if before is not None and before[0] != dims:
            was = "in an earlier batch" if before[1] else "by default (no dim varied in it)"
            raise ValueError(
                f"field {key!r} varies along dim {dims[0]} in this batch (shapes "
                f"{tuple(shapes[0])}, ...) but was padded along dim {before[0][0]} {was}; say "
                f"which dim follows the lengths: fields={{{key!r}: Field(dims={dims[0] - ndim})}}"
            )
        memory[key] = (dims, True)
        return dims
    if not varying:
        if before is not None:
            return before[0]
        dims = (0,) if guess is None else (guess(shapes),)
        memory[key] = (dims, False)
        return dims
    p = next(p for p, s in enumerate(shapes) if s[varying[0]] != shapes[0][varying[0]])
    ends = tuple(d - ndim for d in varying)
    one = f"fields={{{key!r}: Field(dims={varying[0] - ndim})}}"
    fix = (  # session 21: (image, label) tuples under a (height, width) sampler
        "let it follow the sampler's inputs along those dims, one input per dim in order: "
        f"fields={{{key!r}: Field(input={tuple(names[: len(varying)])!r}, dims={ends})}}, or "
        f"say which one dim follows its input, e.g. {one}"
        if len(names) >= len(varying)
        else f"say which dim follows the lengths, e.g. {one}, or bucket one input per varying "
        f"dim (lengths of shape (N, {len(varying)})) with Field(dims={ends})"
    )
    raise ValueError(
        f"field {key!r} varies along dims {tuple(varying)} (shape {tuple(shapes[p])} at batch "
        f"position {p}, {tuple(shapes[0])} at position 0) but follows one bucketed input; {fix}"
    )


def _describe(v: Any) -> str:
    shape = getattr(v, "shape", None)
    if shape is None:
        return f"a {type(v).__name__}"
    return f"a {type(v).__name__} of shape {tuple(shape)}"
