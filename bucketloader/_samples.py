"""What a sample is and how long it is: the rules every part of bucketloader shares.

A sample is one of three kinds, told apart by its type, never by its values:

* ``"dict"``: any ``Mapping``; its fields are its keys.
* ``"bare"``: a torch tensor, a numpy array, or a flat list/tuple of numbers (tokenised text); its
  one field is called ``"inputs"``.
* ``"tuple"``: any other tuple or list; its fields are its positions ``0, 1, ...``.

NOTE [ The length of a sample ]
Where bucketloader measures samples itself (a stream's ``length_fn``, :func:`~bucketloader.analyze`
on a dataset), one rule applies:

1. *What is measured*: ``sample[key]`` when a key is given, ``key(sample)`` for a callable;
   otherwise the sample itself, except that a dict is measured by its ``"length"`` entry if it has
   one (the length itself: text there, ``"120"``, is refused, as ``hf.lengths`` refuses a string
   ``"length"`` column when no column is named), else by its only sequence-valued entry
   (several are ambiguous: name the key), and a tuple by its first element (``(input, target)``
   pairs).
2. *Its length*: an int is the length itself; decoded audio (a mapping with an ``"array"`` entry)
   has its array's length; a tensor or array has the size of its **first** dim (time-major, as
   ``len()`` and ``pad_sequence`` read it: ``(T,)`` waveforms, ``(T, F)`` features); a list,
   tuple or string has its ``len()``. Channel-first data (``(C, T)``) needs a callable key
   (:func:`~bucketloader.analyze` says so: NOTE [ Channel-first items ] in its ``_scan``).

The collator does not measure a fixed dim: it pads the dim whose size follows the plan (see
:mod:`bucketloader.collate.fields`).
"""

from __future__ import annotations

import difflib
import numbers
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

#: The field name of a bare sample.
BARE_KEY = "inputs"
#: The entry a dict sample may carry its length in.
LENGTH_KEY = "length"


def is_number(x: Any) -> bool:
    """A real (or bool) scalar: what a flat list of tokens holds."""
    return isinstance(x, (numbers.Number, np.number, np.bool_)) and not isinstance(x, complex)


def is_flat_list(x: Any) -> bool:
    """A list or tuple whose first element is a number (or an empty list)."""
    return isinstance(x, (list, tuple)) and (len(x) == 0 or is_number(x[0]))


def array_types() -> tuple[type, ...]:
    """``(np.ndarray, torch.Tensor)``, or ``(np.ndarray,)`` while torch is not imported.

    NOTE [ torch stays unimported here ]
    This module is on the ``bucketloader`` command's import path, and importing torch costs about
    2 s of CPU; a value cannot be a tensor before torch is imported, so the type is looked up
    in ``sys.modules`` instead of importing it.
    """
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    return (np.ndarray,) if tensor is None else (np.ndarray, tensor)


def is_sequence(x: Any) -> bool:
    """Can this value be a variable-length field (an array with >= 1 dim, or a flat list)?"""
    if isinstance(x, array_types()):
        return bool(getattr(x, "ndim", 0) >= 1)
    return is_flat_list(x)


def convert_hint(x: Any) -> str:
    """How to turn ``x`` into a paddable array, for an error about it ("" for anything else).

    Objects that export an array (``__array_interface__``, ``__array__``: a PIL image, a pandas
    series) are not arrays, so the collator cannot pad them. Session 21 gave it PIL images:
    the error said to leave the field out of ``fields``, which drops the image itself.

    Example:
        >>> class Image:  # a stand-in for PIL.Image.Image
        ...     __array_interface__ = {}
        >>> convert_hint(Image()).startswith("; convert it to a tensor")
        True
        >>> convert_hint(3)
        ''
    """
    if isinstance(x, array_types()) or not (
        hasattr(x, "__array_interface__") or hasattr(x, "__array__")
    ):
        return ""  # (a 0-d array is an array already: it has no dim to pad)
    return (
        "; convert it to a tensor or numpy array in the dataset: torch.as_tensor(np.asarray(x)) "
        "(a PIL image is (H, W, C): add .permute(2, 0, 1) for (C, H, W), as torchvision's "
        "pil_to_tensor does)"
    )


def kind_of(sample: Any) -> str:
    """``"dict"``, ``"bare"`` or ``"tuple"`` (see the module docstring).

    Example:
        >>> kind_of([1, 2, 3]), kind_of({"x": [1]}), kind_of(([1, 2], 0))
        ('bare', 'dict', 'tuple')
    """
    if isinstance(sample, Mapping):
        return "dict"
    if isinstance(sample, array_types()) or is_flat_list(sample):
        return "bare"
    if isinstance(sample, (list, tuple)):
        return "tuple"
    raise TypeError(
        f"samples must be tensors, numpy arrays, lists of numbers, tuples or dicts, "
        f"got {type(sample).__name__}{convert_hint(sample)}"
    )


def length_of(value: Any, *, what: str = "the value") -> int:
    """The length of one measured value (step 2 of NOTE [ The length of a sample ]).

    Example:
        >>> length_of([5, 6, 7]), length_of(np.zeros((4, 80))), length_of(9)
        (3, 4, 9)
        >>> length_of({"array": np.zeros(16000), "sampling_rate": 16000})
        16000
    """
    if isinstance(value, Mapping) and "array" in value:  # decoded audio
        value = value["array"]
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        if value < 0:
            raise ValueError(
                f"{what} is a negative length, {int(value)}; lengths count elements: fix or "
                "filter that sample"
            )
        return int(value)
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(value, (list, tuple, str, bytes)):
        return len(value)
    if shape is not None:  # a 0-d array or tensor holding the length
        return length_of(value.item(), what=what)
    if value is None:  # a null in a table (a Hugging Face dataset's missing value)
        field = what[len("sample") :] if what.startswith("sample[") else "[<the field>]"
        raise TypeError(
            f"{what} is None (a null: a missing value in the data set), which has no length; "
            f"filter those samples out first, e.g. dataset.filter(lambda s: s{field} is not "
            "None), or pass a length_fn that gives them a length"
        )
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        # (s34: a float length column, read by its key, said only "got float", no way on)
        said = "NaN, a missing length" if value != value else repr(value)
        read = what if what.startswith("sample[") else "sample[...]"
        raise TypeError(
            f"{what} has no length: got the float {said}; a length is an int count: filter "
            "out the samples without one (NaN), and read the rest as ints with a callable, "
            f"e.g. lambda sample: math.ceil({read})"
        )
    raise TypeError(
        f"{what} has no length: got {type(value).__name__}; lengths are taken from sequences "
        "(lists, arrays, tensors, strings), decoded audio dicts or int values"
    )


def sample_length(sample: Any, key: Any = None, *, arg: str = "key") -> int:
    """The length of one sample under NOTE [ The length of a sample ].

    Args:
        sample: the sample.
        key: ``None``, a key or position of the sample, or a callable ``sample -> value``.
        arg: the caller's name for ``key``, used in error messages (``length_fn``, ``column``).

    Example:
        >>> sample_length({"input_ids": [1, 2, 3], "label": 0})
        3
        >>> sample_length({"input_ids": [1, 2], "labels": [3]}, "labels", arg="length_fn")
        1
    """
    value, what = measured(sample, key, arg=arg)
    return length_of(value, what=what)


def measured(sample: Any, key: Any = None, *, arg: str = "key") -> tuple[Any, str]:
    """What :func:`sample_length` measures in ``sample`` (step 1 of NOTE [ The length of a
    sample ]), and its name for messages: ``"sample['audio']"``, ``"the sample"``, ...

    Example:
        >>> measured({"audio": [0.1, 0.2], "label": 3})
        ([0.1, 0.2], "sample['audio']")
    """
    if callable(key):
        if key is len:
            _check_len_measures(sample, arg)
        return key(sample), f"{arg}(sample)"
    if key is not None:
        if not isinstance(sample, Mapping) and kind_of(sample) != "tuple":
            raise ValueError(
                f"{arg}={key!r} names a field, but the samples are {type(sample).__name__}s, "
                f"which have none; pass {arg}=None to measure the sample itself"
            )
        try:
            value = sample[key]
        except (KeyError, IndexError, TypeError):
            have = list(sample)[:8] if isinstance(sample, Mapping) else type(sample).__name__
            close = did_you_mean(arg, key, sample) if isinstance(sample, Mapping) else ""
            raise ValueError(
                f"{arg}={key!r} is not in the samples (a sample has {have}); pass one of its "
                f"keys{close}"
            ) from None
        return value, f"sample[{key!r}]"
    if isinstance(sample, Mapping):
        if LENGTH_KEY in sample:
            value = sample[LENGTH_KEY]
            if isinstance(value, (str, bytes)):  # NOTE [ Numbers written as text ] in _arrow
                raise TypeError(
                    f"a sample's {LENGTH_KEY!r} entry, read as its length when no {arg} is "
                    f"given, holds text ({value!r:.40}), not a number; pass {arg}=<the key to "
                    f"measure> (e.g. {arg}='input_ids'), or, for lengths stored as text, "
                    f"{arg}=lambda sample: int(sample[{LENGTH_KEY!r}])"
                )
            return value, f"sample[{LENGTH_KEY!r}]"
        sized = [k for k, v in sample.items() if _sized(v)]
        nulls = [k for k, v in sample.items() if v is None]
        if not sized and nulls:  # a null row of the one sequence field, not a missing option
            raise ValueError(
                f"a sample has None (a null: a missing value in the data set) in {nulls[:8]}, "
                f"so nothing to measure; filter those samples out first, e.g. "
                f"dataset.filter(lambda s: s[{nulls[0]!r}] is not None)"
            )
        if len(sized) != 1:
            found = (
                "none of them sequence-valued, so none gives a length"
                if not sized
                else f"of which {sized[:8]} are sequence-valued: which one is the length is "
                "ambiguous"
            )
            raise ValueError(
                f"samples are dicts with keys {list(sample)[:8]}, {found}; "
                f"pass {arg}=<key> (e.g. {arg}='input_ids') or a callable sample -> length"
            )
        return sample[sized[0]], f"sample[{sized[0]!r}]"
    if _fields_tuple(sample):
        return sample[0], "the first element of the sample"
    return sample, "the sample"


def measured_code(what: str, item: str) -> str:
    """:func:`measured`'s name for what it measured, as code over ``item``, for messages that
    name a measure to pass; ``""`` for a callable's (``"key(sample)"``), which has none.

    Example:
        >>> measured_code("the first element of the sample", "dataset[i]")
        'dataset[i][0]'
        >>> measured_code("sample['audio']", "item")
        "item['audio']"
    """
    if what == "the sample":
        return item
    if what == "the first element of the sample":
        return f"{item}[0]"
    return item + what[len("sample") :] if what.startswith("sample[") else ""


def _check_len_measures(sample: Any, arg: str) -> None:
    """NOTE [ len of a dict sample ]
    ``len()`` of a dict counts its keys, and of a tuple of fields such as ``(input_ids, label)``
    its items, so every sample had the same length (1 or 2) and a stream put them all in its
    first bucket; the collator then refused the batch as not from its sampler (s19-user,
    s19-review). ``length_fn=len`` on such a sample is one error with the fix; on a list, a tuple of
    token ids or an array it is the length."""
    if isinstance(sample, Mapping):
        raise TypeError(
            f"{arg}=len measures a dict sample by its number of keys ({len(sample)}), not "
            f"by its length; pass {arg}=<the key to measure> (a sample has keys "
            f"{list(sample)[:8]}), or leave {arg} out: a dict is then measured by its "
            f"{LENGTH_KEY!r} entry or its only sequence-valued field"
        )
    if _fields_tuple(sample):
        raise TypeError(
            f"{arg}=len measures a tuple sample such as (input_ids, label) by its number of "
            f"items ({len(sample)}), not by its length; pass {arg}=0 (the position of the "
            f"sequence), or leave {arg} out: such a tuple is then measured by its first item"
        )


def _fields_tuple(sample: Any) -> bool:
    """A tuple of fields whose first is the sequence, such as ``(input_ids, label)``: measured
    by that first item, never by ``len()`` (its number of items)."""
    return (
        isinstance(sample, tuple)
        and bool(sample)
        and _sized(sample[0])
        and not is_flat_list(sample)
    )


def stream_len(sample: Any) -> int:
    """A stream's ``length_fn=len``: ``len(sample)``, but a dict sample, or a tuple of fields, is
    refused with the fix (NOTE [ len of a dict sample ]). A plain function, so that it pickles.

    Example:
        >>> stream_len([5, 6, 7])
        3
    """
    _check_len_measures(sample, "length_fn")
    return len(sample)


def length_reader(key: Any, *, arg: str = "key") -> Callable[[Any], int]:
    """``sample -> int`` under the same rule, for per-sample loops (a stream reads millions).

    The common cases (a list or array sample; a key whose value is a list or array) take a
    shortcut with the same result; everything else goes through :func:`sample_length`. The
    reader pickles (DataLoader workers started with ``spawn`` receive it).
    """
    return _LengthReader(key, arg)


class _LengthReader:
    """The reader :func:`length_reader` returns (a class, so that it pickles)."""

    __slots__ = ("arg", "arrays", "key")

    def __init__(self, key: Any, arg: str) -> None:
        self.key, self.arg = key, arg
        # The shortcut's array types; a tensor met before torch was imported here takes the
        # general path (same result), which refreshes them (NOTE [ torch stays unimported here ]).
        self.arrays = array_types()

    def __call__(self, sample: Any) -> int:
        key = self.key
        if key is None:
            if type(sample) is list:  # a list is measured by its len() under the rule
                return len(sample)
            if type(sample) in self.arrays and sample.ndim:
                return int(sample.shape[0])
            return self._general(sample, None)
        if type(sample) is not dict or not isinstance(key, (str, int)):
            return self._general(sample, key)  # the rare and the wrong cases
        try:
            value = sample[key]
        except KeyError:
            return self._general(sample, key)  # raises the clear error
        if type(value) is list:
            return len(value)
        if type(value) is int and value >= 0:  # a length column (``hf.add_lengths``)
            return value
        if type(value) in self.arrays and value.ndim:
            return int(value.shape[0])
        return length_of(value, what=f"sample[{key!r}]")

    def _general(self, sample: Any, key: Any) -> int:
        self.arrays = array_types()
        return sample_length(sample, key, arg=self.arg)

    def __getstate__(self) -> tuple[Any, str]:
        return self.key, self.arg

    def __setstate__(self, state: tuple[Any, str]) -> None:
        self.key, self.arg = state
        self.arrays = array_types()


def _sized(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "array" in value
    return is_sequence(value) or isinstance(value, str)


def load_samples(dataset: Any, keys: Any) -> Sequence[Any]:
    """The samples of a map-style dataset at ``keys``, fetched as ``DataLoader`` fetches a batch:
    with one ``dataset.__getitems__(keys)`` call when the dataset has it, else item by item.

    Example:
        >>> load_samples(["a", "b", "c"], [2, 0])
        ['c', 'a']
    """
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(keys) if getitems is not None else [dataset[i] for i in keys]


class DatasetView:
    """A map-style dataset seen through: ``len`` and single items pass through, and a batch
    (``__getitems__``) is loaded with :func:`load_samples`; the datasets that mark their batches
    (the evaluation rows, a sharded step's planned shape) override ``__getitems__``.

    Example:
        >>> view = DatasetView(["a", "b", "c"])
        >>> len(view), view[1], view.__getitems__([2, 0])
        (3, 'b', ['c', 'a'])
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, batch: Sequence[int]) -> list[Any]:
        return list(load_samples(self.dataset, list(batch)))


def check_readable(values: Sequence[Any], key: Any, exc: BaseException) -> None:
    """After torch failed to read the field ``key`` of a batch (``exc``; ``values`` its
    per-sample values), name the sample a collator cannot read: a tensor on the meta device
    (a shape, no data), a nested tensor (several samples in one), a quantized tensor (integers
    with a scale) or one of a layout other than dense (``torch.sparse_coo``, ``sparse_csr``,
    ...). Returns when there is none (``exc`` then stands). Asked only on that error path, so
    a batch that collates pays nothing.

    Example:
        >>> import torch
        >>> check_readable([torch.ones(2), torch.ones(3).to_sparse()], "inputs", RuntimeError())
        Traceback (most recent call last):
        ...
        TypeError: the sample at batch position 1 (field 'inputs') has layout=torch.sparse_coo; \
the collators read dense tensors: call .to_dense() on it (in the dataset's __getitem__ or a \
transform)
    """
    import torch

    for i, v in enumerate(values):
        if not isinstance(v, torch.Tensor):
            continue
        where = f"the sample at batch position {i} (field {key!r})"
        if v.is_nested:
            raise TypeError(
                f"{where} is a nested tensor (is_nested=True), several tensors in one; the "
                "collators read one tensor per sample: unbind() the nested tensor into samples "
                "(one dataset item each)"
            ) from exc
        if v.is_quantized:
            raise TypeError(
                f"{where} is a quantized tensor (is_quantized=True, dtype={v.dtype}); the "
                "collators pad plain numbers: call .dequantize() on it (in the dataset's "
                "__getitem__ or a transform), and quantize the batch after collation if needed"
            ) from exc
        if v.is_meta:
            raise ValueError(
                f"{where} is a tensor on device=meta, which has a shape but no data: "
                "materialise the tensor (build it on a real device, e.g. outside a "
                "torch.device('meta') context) before collating"
            ) from exc
        if v.layout != torch.strided:
            raise TypeError(
                f"{where} has layout={v.layout}; the collators read dense tensors: call "
                ".to_dense() on it (in the dataset's __getitem__ or a transform)"
            ) from exc


class EvalSamples(list):  # type: ignore[type-arg]
    """The samples of an evaluation batch (a plain list) with the batch's planned ``rows``
    (:class:`~bucketloader.evaluation.EvalBatch`; the dataset index of each row, -1 on filler
    rows), which :class:`~bucketloader.evaluation.EvalCollator` reads. Here, below the samplers,
    so that :mod:`bucketloader.compile` makes such batches without importing the evaluation
    module (a cycle)."""

    rows: np.ndarray

    def __init__(self, samples: Any, rows: np.ndarray) -> None:
        super().__init__(samples)
        self.rows = rows


def did_you_mean(arg: str, name: Any, names: Iterable[Any]) -> str:
    """The end of a missing-name error: ``"; did you mean column='input_ids'?"`` where ``names``
    holds one close to ``name`` (``difflib``, as unknown options are matched), else ``""``.

    Example:
        >>> did_you_mean("column", "input_id", ["input_ids", "labels"])
        "; did you mean column='input_ids'?"
        >>> did_you_mean("column", "text", ["input_ids"])
        ''
    """
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(n) for n in names], n=1, cutoff=0.6)
    return f"; did you mean {arg}={close[0]!r}?" if close else ""
