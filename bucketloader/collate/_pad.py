"""Padding kernels for :class:`bucketloader.collate.PadCollator` (private).

Each variable-length field of a batch is written into one pre-allocated output. Three copy paths
give the same result (the property test in tests/test_collate.py checks them against ``np.pad``):

* ``interleaved``: when the variable dim is the first one (tokens ``(T,)``, frames ``(T, F)``),
  the output is, row after row, ``sample, padding, sample, padding, ...`` in memory, so one
  ``torch.cat(pieces, out=...)`` (or ``np.concatenate``) writes it, the padding pieces being
  cached views of one pad buffer. One C++ call writing each byte once, about 0.1 us per piece;
  best for long rows. Empty pieces are left out: ``torch.cat`` is about 6x slower when empty
  tensors are mixed in (a sample exactly as long as its bucket has no padding piece).
* ``per-sample``: one slice copy per sample (``out[i, :L] = x``, as ``pad_sequence`` does), and
  the pad value written only where padding goes (``pad_sequence`` fills the whole output first);
  best for long samples (audio, images), where memory traffic dominates.
* ``masked``: concatenate the samples once and scatter them with the padding mask
  (``out[mask] = cat(xs)``): one vectorised call instead of one Python call per sample; best for
  many short samples (tokens). Lists of ints skip the per-sample conversion entirely
  (``np.fromiter`` over the chained lists).

Choice: batches of 1-D samples take the interleaved concatenate, unless they have at least
``SCATTER_MIN_ROWS`` rows of at most ``SCATTER_MAX_ELEMENTS`` elements (then the masked scatter);
otherwise padded samples of at most ``MASKED_MAX_ELEMENTS`` elements with one variable dim take
the masked scatter (its cost grows with the elements, the others' with the samples); longer ones
take the interleaved concatenate when the variable dim is the first, else per-sample copies (also
the fallback for CUDA or grad-requiring tensors). The crossover, measured on token batches of
``benchmarks/sampler.py`` (int64, int32, float32), lies between 262 and 517 elements per row.

NOTE [ One dtype per field, no value lost ]
A field's output dtype is the promotion of its samples' dtypes, as ``torch.result_type`` /
``default_collate`` (``torch.cat``) would give it: ``[int64, float32] -> float32``,
``[int8, int64] -> int64``, ``[uint8, int8] -> int16``; a batch of one dtype keeps it. Promotion
must not change a value: an integer sample going to a float dtype that cannot hold it exactly
(``2**24 + 1`` to ``float32``) raises a ``ValueError`` naming the field, the dtypes and the value,
instead of rounding it; dtypes torch cannot promote (``uint64`` with ``int64``) and arrays of
non-numbers (numpy ``object`` or ``str``) raise a ``TypeError`` naming the field. The result
does not depend on the order of the samples or of a set: torch's pairwise promotion is not
associative (``uint64`` with ``int64`` is refused, but ``float32`` absorbs either, so folding
``{uint64, int64, float32}`` succeeded or failed with the set's iteration order, which varies
between processes). A field is promoted only where torch promotes every pair of its dtypes (so
every order of folding agrees, checked over every triple and quadruple of torch's dtypes), and
otherwise refused naming the first refused pair by name. Flat lists of
Python numbers follow ``torch.tensor``: all bools give ``bool``, ints (bools mixed in) ``int64``,
any float the default float dtype (``float32``), an int it cannot hold exactly raising as above.
The pad value must fit the promoted dtype (``-1`` does not fit ``bool``, ``1e5`` not ``float16``).

NOTE [ Where a large batch is written ]
An output of at least ``NUMPY_MIN_BYTES`` (256 KiB) is a numpy array wrapped by
``torch.from_numpy`` (the mask and lengths always were), not ``torch.empty``: torch's CPU
allocator asks for 64-byte aligned memory (``posix_memalign``), and glibc placed successive
batches at a rotating set of addresses (4-10 distinct ones over 300 batches of 8 x 19,620
floats, against 1-2 for numpy's plain ``malloc`` and for ``pad_sequence``), so each batch was
written to memory that had left the CPU caches. On the widest audio and ``(T, 80)`` feature
batches of ``benchmarks/small_costs.py`` that was a fifth of the collator's time. Below that
size ``torch.empty`` is cheaper (``torch.cat`` without ``out=``, then a view: about 0.6 us less
than ``np.empty``, two ``from_numpy`` and ``cat(out=)``). Session 8 moved the threshold from 128
to 256 KiB: 3% on 8 rows of 4,144 floats, where glibc used 5-6 addresses, as many as for
``pad_sequence`` (3-5), all inside a core's L2 cache (512 KiB here). A fresh buffer per batch:
no batch shares memory with another. bfloat16, which numpy lacks, stays with torch.

NOTE [ Why the masked scatter is exact ]
Row-major order over ``(batch, t)`` visits the real positions of row ``i`` as ``t = 0..L_i-1``
(right padding) or ``t = T-L_i..T-1`` (left padding), in sample order, which is exactly the order
of ``cat(xs)``. Only fields with one variable dim take this path (that dim moved to axis 1), so
trailing fixed dims ride along as the rows of the scatter.
"""

from __future__ import annotations

import array
import functools
import itertools
import math
import numbers
import operator
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bucketloader._samples import check_readable
from bucketloader._validation import exact_int64

#: Elements per padded sample up to which the masked scatter beats the other paths.
MASKED_MAX_ELEMENTS = 384
#: 1-D samples: the interleaved concatenate beats the masked scatter unless the batch has at
#: least ``SCATTER_MIN_ROWS`` rows of at most ``SCATTER_MAX_ELEMENTS`` (torch 2.13, int64, one
#: thread, CPU time: 16 rows of 160 tokens 6.6 us against 12.6 us, 256 rows of 160 tokens 82 us
#: against 100 us, 256 rows of 16 tokens 76 us against 54 us; ``pad_sequence`` 37, 481, 436 us).
#: The concatenate must not hold an empty piece (it is several times slower with one).
SCATTER_MIN_ROWS = 128
SCATTER_MAX_ELEMENTS = 64
#: Masks of at most this many elements are one broadcast compare against a cached ``arange``.
SMALL_MASK = 1 << 15
#: Outputs of at least this many bytes are allocated by numpy (NOTE [ Where a large batch is
#: written ]).
NUMPY_MIN_BYTES = 1 << 18


def sequence_mask(lengths: np.ndarray, size: int, rows: int, side: str) -> np.ndarray:
    """Bool ``(rows, size)`` mask, True on real elements; rows past ``len(lengths)`` all False.

    One ``np.repeat`` of the run pattern ``True, False, True, False, ...`` (``False, True`` for
    left padding) by the run lengths ``L_0, size - L_0, L_1, ...``: a single pass writing each
    byte once, about twice as fast as a broadcast compare on long rows.

    Example:
        >>> sequence_mask(np.array([2, 0]), 3, 3, "right").astype(int).tolist()
        [[1, 1, 0], [0, 0, 0], [0, 0, 0]]
    """
    n = len(lengths)
    if rows * size <= SMALL_MASK and n == rows:  # small: one compare, no run pattern
        ar = _ARANGES.get(size)
        if ar is None:
            if len(_ARANGES) > 1024:
                _ARANGES.clear()
            ar = _ARANGES[size] = np.arange(size)
        lens = np.asarray(lengths)[:, None]
        return ar < lens if side == "right" else ar >= size - lens
    runs = np.empty((n + 1, 2), dtype=np.int64)  # (real, pad) per row, flattened
    runs[:n, 0 if side == "right" else 1] = lengths
    np.subtract(size, lengths, out=runs[:n, 1 if side == "right" else 0])
    runs[n] = (rows - n) * size, 0
    pattern = _PATTERNS.get((n, side))
    if pattern is None:
        if len(_PATTERNS) > 1024:
            _PATTERNS.clear()
        pattern = np.zeros((n + 1, 2), dtype=np.bool_)
        pattern[:n, 0 if side == "right" else 1] = True
        pattern = _PATTERNS[(n, side)] = pattern.reshape(-1)
    return pattern.repeat(runs.reshape(-1)).reshape(rows, size)


#: Run patterns of :func:`sequence_mask`, per (samples, side); ``arange(size)`` per size.
_PATTERNS: dict[tuple[int, str], np.ndarray] = {}
_ARANGES: dict[int, np.ndarray] = {}


def list_values(values: Sequence[Any], key: Any, total: int) -> tuple[np.ndarray, torch.dtype]:
    """The ``total`` numbers of a field's flat lists, concatenated, and the field's dtype.

    Ints take one exact C pass (``array.fromlist`` rejects floats, strings and ints past int64
    instead of truncating or parsing them, as ``np.fromiter`` would); anything else goes through
    :func:`_typed_list_values`, which types every element (NOTE [ One dtype per field, no value
    lost ]).
    """
    first = next((v[0] for v in values if len(v)), _NO_VALUE)  # (None may be a value)
    if first is _NO_VALUE:
        return np.zeros(0, dtype=np.int64), torch.int64
    if isinstance(first, numbers.Integral) and not isinstance(first, (bool, np.bool_)):
        buf = array.array("q")
        try:
            for v in values:
                if type(v) is list:
                    buf.fromlist(v)
                else:
                    buf.extend(v)
        except (TypeError, OverflowError):
            pass  # a float, a string or an int past int64 somewhere: type every element
        else:
            return np.frombuffer(buf, dtype=np.int64), torch.int64
    return _typed_list_values(values, key, total)


#: No list of the field holds a value (``None`` could be one).
_NO_VALUE = object()


def _typed_list_values(
    values: Sequence[Any], key: Any, total: int
) -> tuple[np.ndarray, torch.dtype]:
    chain = itertools.chain.from_iterable
    kinds = set(map(type, chain(values)))
    bad = [k for k in kinds if not issubclass(k, (numbers.Real, np.bool_))]
    if bad:
        pos = next(p for p, v in enumerate(values) if any(type(x) in bad for x in v))
        raise TypeError(
            f"field {key!r} holds lists with {bad[0].__name__} values (the sample at batch "
            f"position {pos}), but only flat lists of numbers can be padded; use tensors or "
            "numpy arrays for nested data, or leave the field out of fields={...}"
        )
    if all(issubclass(k, (bool, np.bool_)) for k in kinds):
        return np.fromiter(chain(values), dtype=np.bool_, count=total), torch.bool
    if all(issubclass(k, (numbers.Integral, np.bool_)) for k in kinds):
        return exact_int64(
            chain(values),
            lambda big: (
                f"field {key!r} holds the int {_short(big)}, which int64 cannot hold; "
                "store the field as float64 arrays, or fix that value"
            ),
        ), torch.int64
    dtype = torch.get_default_dtype()  # Python floats, as torch.tensor([0.5]) gives them
    exact_up_to = 2 / torch.finfo(dtype).eps  # every int of at most this size is exact
    items = list(chain(values))
    for x in items:
        if (
            isinstance(x, numbers.Integral)
            and not isinstance(x, (bool, np.bool_))
            and abs(int(x)) > exact_up_to
        ):
            if not _int_fits(int(x), dtype):
                raise ValueError(
                    f"field {key!r} mixes ints and floats in its lists; the float dtype they "
                    f"are promoted to ({dtype}, as torch.tensor would give) cannot hold the int "
                    f"{_short(int(x))} exactly; store the field as float64 or int64 arrays instead"
                )
    try:
        flat = np.array(items, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"field {key!r} holds a number too large for a float") from None
    return flat, dtype


def _short(x: int) -> str:
    text = str(x)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


def _int_fits(x: int, dtype: torch.dtype) -> bool:
    """Whether the float ``dtype`` holds the int ``x`` exactly."""
    try:
        y = torch.tensor(float(x), dtype=torch.float64).to(dtype).item()
    except OverflowError:
        return False
    return math.isfinite(y) and int(y) == x


def _alloc(shape: tuple[int, ...], value: Any, dtype: torch.dtype, key: Any, fill: bool):
    """:func:`empty` (filled with ``value`` if ``fill``); ``value`` must fit ``dtype``."""
    if not fits(value, dtype):
        raise ValueError(
            f"pad value {value!r} for field {key!r} does not fit its dtype {dtype}; pass a "
            "pad_value that the dtype can hold (e.g. pad_value={" + repr(key) + ": 0})"
        )
    out = empty(shape, dtype)
    if fill:
        fill_pad(out, value)
    return out


def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor for a batch: numpy allocates it from
    ``NUMPY_MIN_BYTES`` on (NOTE [ Where a large batch is written ]), torch below.

    Example:
        >>> empty((2, 3), torch.int64).shape
        torch.Size([2, 3])
    """
    np_dtype = numpy_dtype(dtype)
    if np_dtype is not None and math.prod(shape) * np_dtype.itemsize >= NUMPY_MIN_BYTES:
        return torch.from_numpy(np.empty(shape, np_dtype))
    return torch.empty(shape, dtype=dtype)


@functools.lru_cache(maxsize=64)
def numpy_dtype(dtype: torch.dtype) -> np.dtype | None:
    """The numpy dtype of a torch dtype (``None``: numpy has none, e.g. ``bfloat16``)."""
    if dtype not in _NUMPY_DTYPES:
        return None
    return torch.empty(0, dtype=dtype).numpy().dtype


@functools.lru_cache(maxsize=256)
def fits(value: Any, dtype: torch.dtype) -> bool:
    """Whether ``dtype`` holds ``value`` exactly (floats: finite values within range; an
    infinite or NaN pad value is taken as meant)."""
    if dtype == torch.bool:
        return value in (0, 1)
    if dtype.is_complex:
        return True
    if not dtype.is_floating_point and isinstance(value, int | np.integer):
        info = torch.iinfo(dtype)  # (exact past 2**53: no float in between)
        return info.min <= int(value) <= info.max
    f = float(value)
    if dtype.is_floating_point:
        return not math.isfinite(f) or abs(f) <= torch.finfo(dtype).max
    if not math.isfinite(f):
        return False
    info = torch.iinfo(dtype)
    return f == int(value) and info.min <= int(value) <= info.max


def field_dtype(values: Sequence[Any], key: Any) -> tuple[Sequence[Any], torch.dtype, bool]:
    """``(values, dtype, is_numpy)`` of a field's tensors / arrays: the one dtype of the batch,
    or every sample converted to the promoted dtype (NOTE [ One dtype per field, no value lost ]).
    """
    first = values[0]
    is_np = isinstance(first, np.ndarray)
    if any(issubclass(t, np.ma.MaskedArray) for t in set(map(type, values))):
        _refuse_masked(values, key)
    dtypes = set(map(_DTYPE, values)) if len(values) > 1 else {first.dtype}
    if len(dtypes) == 1:
        if not is_np:
            return values, first.dtype, False
        dtype = torch_dtype(first.dtype)
        if dtype is not None:
            return values, dtype, True
    return _promote(values, dtypes, key, is_np)


_DTYPE = operator.attrgetter("dtype")


def _refuse_masked(values: Sequence[Any], key: Any) -> None:
    """A numpy masked array with masked elements cannot be padded: its mask would be lost (the
    values under it written as real ones)."""
    for pos, v in enumerate(values):
        if isinstance(v, np.ma.MaskedArray) and np.ma.is_masked(v):
            raise TypeError(
                f"field {key!r} holds a numpy masked array with masked elements (the sample at "
                f"batch position {pos}); padding it would drop the mask and write the values "
                "under it as real ones; pass x.filled(value) to give them a value, or "
                "x.compressed() to leave them out"
            )


@functools.lru_cache(maxsize=64)
def torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype of a numpy dtype (``None``: none, or not in native byte order)."""
    if dtype.kind not in "biufc" or not dtype.isnative:
        return None
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        return None


def _promote(
    values: Sequence[Any], dtypes: set[Any], key: Any, is_np: bool
) -> tuple[list[torch.Tensor], torch.dtype, bool]:
    names = sorted({str(d) for d in dtypes})
    tensors = []
    for pos, v in enumerate(values):
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "biufc":
                raise TypeError(
                    f"field {key!r} holds a numpy array of dtype {v.dtype} (the sample at batch "
                    f"position {pos}), but only numbers can be padded into a tensor; convert it "
                    "(e.g. with .astype(np.int64)) or leave the field out of fields={...}"
                )
            native = v.dtype.newbyteorder("=")
            if torch_dtype(native) is None:
                raise TypeError(
                    f"field {key!r} holds a numpy array of dtype {v.dtype} (the sample at batch "
                    f"position {pos}), which torch has no dtype for; convert it with .astype(...)"
                )
            v = torch.from_numpy(np.ascontiguousarray(v, dtype=native))
        tensors.append(v)
    try:
        target = _promoted({t.dtype for t in tensors})
    except (RuntimeError, TypeError) as exc:
        check_readable(values, key, exc)  # a quantized sample: named
        raise TypeError(
            f"field {key!r} mixes samples of dtypes {names}, which torch cannot promote to one "
            f"dtype ({exc}); cast the samples to one dtype in the dataset"
        ) from None
    out = []
    for pos, t in enumerate(tensors):
        if t.dtype != target:
            converted = t.to(target)
            if not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
                back = (converted.real if converted.is_complex() else converted).to(t.dtype)
                lost = back != t.detach()
                if lost.any():
                    value = t.detach()[lost].reshape(-1)[0].item()
                    raise ValueError(
                        f"field {key!r} mixes samples of dtypes {names}; promoting them to "
                        f"{target} (as torch.result_type does) would change the value {value} "
                        f"of the sample at batch position {pos}; cast the field to one dtype "
                        "that holds every value (e.g. float64 or int64) in the dataset"
                    )
            t = converted
        out.append(t)
    return out, target, False


def _promoted(dtypes: set[torch.dtype]) -> torch.dtype:
    """The one dtype of ``dtypes`` whatever their order, or torch's error for the first pair
    (by name) it refuses (NOTE [ One dtype per field, no value lost ]).

    Example:
        >>> _promoted({torch.int8, torch.uint8, torch.float16})
        torch.float16
    """
    ordered = sorted(dtypes, key=str)
    for a, b in itertools.combinations(ordered, 2):
        torch.promote_types(a, b)  # raises for a pair torch refuses
    return functools.reduce(torch.promote_types, ordered)


def fill_pad(out: torch.Tensor, value: Any) -> None:
    """Fill in numpy where it can: one thread, no OpenMP start-up for small batches (torch for
    a batch of samples that require grad, which ``Tensor.numpy`` refuses)."""
    if out.dtype in _NUMPY_DTYPES and not out.requires_grad:
        out.numpy().fill(value)
    else:  # (a numpy scalar as a Python one: torch refuses an np.uint64 past int64)
        out.fill_(value.item() if isinstance(value, np.generic) else value)


#: dtypes that torch tensors share with numpy (``Tensor.numpy()`` works).
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


def pad_field(
    values: Sequence[Any],
    *,
    key: Any,
    lengths: np.ndarray,
    dims: tuple[int, ...],
    targets: tuple[int, ...],
    rows: int,
    side: str,
    pad_value: Any,
    mask: np.ndarray | None = None,
    cache: dict[Any, Any] | None = None,
) -> torch.Tensor:
    """Pad ``values`` (one per sample) into one ``(rows, ...)`` tensor.

    Args:
        values: torch tensors, numpy arrays or flat lists of numbers, one kind for the batch.
        key: the field's name (for error messages).
        lengths: ``(n, k)`` sizes of each sample along ``dims``.
        dims: the variable dims, non-negative, for samples of the batch's ndim.
        targets: padded size of each variable dim.
        rows: output batch size (``>= n``; extra rows are all padding).
        side: ``"right"`` or ``"left"``.
        pad_value: value of every padding element.
        mask: the ``(rows, targets[0])`` mask of a one-variable-dim field, if already built.
        cache: the collator's cache of pad buffers (enables the interleaved path).
    """
    first = values[0]
    n = len(values)
    if isinstance(first, (list, tuple)):
        ints = int_rows(values, lengths[:, 0].tolist(), targets[0], rows, side, pad_value)
        if ints is not None:
            return ints
        flat_values, dtype = list_values(values, key, int(lengths.sum()))
        out = _alloc((rows, targets[0]), pad_value, dtype, key, fill=True)
        if flat_values.size:
            if mask is None:
                mask = sequence_mask(lengths[:, 0], targets[0], rows, side)
            out.numpy()[mask] = flat_values
        return out
    values, dtype, is_np = field_dtype(values, key)
    first = values[0]
    shape = list(first.shape)
    for d, t in zip(dims, targets, strict=True):
        shape[d] = t
    per_sample = math.prod(shape)
    if dims == (0,) and per_sample > MASKED_MAX_ELEMENTS and cache is not None:
        out = _alloc((rows, *shape), pad_value, dtype, key, fill=False)
        if _interleave(out, values, lengths[:, 0].tolist(), side, pad_value, cache):
            return out
    if len(dims) == 1 and n > 1 and per_sample <= MASKED_MAX_ELEMENTS:
        out = _alloc((rows, *shape), pad_value, dtype, key, fill=True)
        if mask is None:
            mask = sequence_mask(lengths[:, 0], targets[0], rows, side)
        d = dims[0]
        if is_np:
            parts = values if d == 0 else [np.moveaxis(v, d, 0) for v in values]
            flat_np = np.concatenate(parts, axis=0)
        else:
            flat = torch.cat([v if d == 0 else v.movedim(d, 0) for v in values], dim=0)
            if not (dtype in _NUMPY_DTYPES and flat.dtype == dtype) or flat.requires_grad:
                view = out if d == 0 else out.movedim(1 + d, 1)
                view[torch.from_numpy(mask)] = flat.to(dtype)
                return out
            flat_np = flat.detach().numpy()
        target = out.numpy()
        (target if d == 0 else np.moveaxis(target, 1 + d, 1))[mask] = flat_np
        return out
    out = _alloc((rows, *shape), pad_value, dtype, key, fill=False)
    _copy_per_sample(out, values, lengths, dims, targets, side, pad_value, is_np)
    return out


def int_rows(
    values: Sequence[Any], sizes: list[int], size: int, rows: int, side: str, pad_value: Any
) -> torch.Tensor | None:
    """Flat lists of ints (``sizes`` their lengths) padded into a new ``(rows, size)`` int64
    tensor, or ``None`` for any other lists (a first number that is no int, or a bool; a float,
    a string or an int past int64 further on) or a pad value int64 cannot hold: the caller then
    takes :func:`list_values`, which types every element and words any error.

    NOTE [ Int lists written straight into the batch ]
    The output, a numpy array, is filled with the pad value, then each list is written into its
    row by one C call, ``struct.Struct(f"={k}q").pack_into(out, offset, *row)`` (one cached
    ``Struct`` per length ``k``). ``struct`` takes exactly what ``array.array("q").fromlist``
    takes (ints, and objects with ``__index__`` such as numpy ints, exactly; floats, strings
    and ints past int64 refused), so the result is :func:`list_values`'s, without its
    intermediate array and copy. Measured (session 10, GSM8K token rows, 8-128 rows): about
    half the time of numpy's own conversion (``out[i, :k] = row``, which discovers the list's
    dtype first and casts floats and bools silently), 0.65-0.75x ``fromlist``. The output is
    numpy's at every size, not :func:`empty`'s torch tensor below ``NUMPY_MIN_BYTES``: writing
    through ``Tensor.numpy()`` makes a torch storage non-resizable for good, so the two give the
    same tensor, and ``np.empty`` + ``torch.from_numpy`` cost 2.5-5 us less than ``torch.empty``
    + ``Tensor.numpy()`` on 8 x 67 int64 (a fifth of an 8-row batch's time).

    Example:
        >>> int_rows([[1, 2], [3]], [2, 1], 3, 2, "right", -1).tolist()
        [[1, 2, -1], [3, -1, -1]]
        >>> int_rows([[1.5]], [1], 2, 1, "right", 0) is None
        True
    """
    first = values[0][0] if sizes[0] else next((v[0] for v in values if len(v)), None)
    if type(first) is not int and (
        not isinstance(first, numbers.Integral) or isinstance(first, (bool, np.bool_))
    ):
        return None
    if type(pad_value) is not int and not fits(pad_value, torch.int64):
        return None
    dst = np.empty((rows, size), np.int64)  # numpy's at any size (the NOTE above)
    try:
        dst.fill(pad_value)
    except OverflowError:  # an int int64 cannot hold
        return None
    buf = dst.data  # (a memoryview)
    pack = _PACK_INTO
    step = 8 * size
    try:
        if side == "right":
            for i, (v, k) in enumerate(zip(values, sizes, strict=True)):
                pack[k](buf, i * step, *v)
        else:
            for i, (v, k) in enumerate(zip(values, sizes, strict=True)):
                pack[k](buf, i * step + 8 * (size - k), *v)
    except (struct.error, TypeError, OverflowError):
        return None
    return torch.from_numpy(dst)


class _Packers(dict):
    """``struct.Struct(f"={k}q").pack_into`` per row length ``k``, made on first use."""

    def __missing__(self, k: int) -> Any:
        if len(self) > 4096:
            self.clear()
        pack = self[k] = struct.Struct(f"={k}q").pack_into
        return pack


_PACK_INTO = _Packers()


def pad_1d(
    values: Sequence[Any],
    sizes: list[int],
    size: int,
    rows: int,
    side: str,
    pad_value: Any,
    key: Any,
    mask: np.ndarray,
    cache: dict[Any, Any],
) -> torch.Tensor:
    """:func:`pad_field` for 1-D tensors or arrays (``sizes`` their lengths, ``mask`` the
    ``(rows, size)`` mask): the same result and kernels, less bookkeeping per call."""
    values, dtype, is_np = field_dtype(values, key)
    if not fits(pad_value, dtype):
        _alloc((0,), pad_value, dtype, key, fill=False)  # raises the message
    n = len(values)
    if size > SCATTER_MAX_ELEMENTS or n < SCATTER_MIN_ROWS:  # the interleaved concatenate
        entry = cache.get((is_np, size, dtype, pad_value))
        if entry is None:
            entry = _pad_buffer(cache, (is_np, size, dtype, pad_value), (size,))
        pieces = interleaved_pieces(values, sizes, size, side, entry)
        if n + 1 < rows:  # several all-padding rows: one fill, not one piece per row
            out = torch.empty((rows, size), dtype=dtype)
            try:
                if is_np:
                    np.concatenate(pieces, out=out.numpy()[:n].reshape(-1))
                else:
                    torch.cat(pieces, out=out[:n].view(-1))
            except (RuntimeError, TypeError, ValueError):
                pass  # grad-requiring or CUDA samples: the concatenate without out= below
            else:
                fill_pad(out[n:], pad_value)
                return out
        if n < rows:  # all-padding rows: whole pad buffers
            pieces += [entry[0]] * (rows - n)
        try:  # without out=: about 10% less per piece, and differentiable like pad_sequence
            flat = torch.from_numpy(np.concatenate(pieces)) if is_np else torch.cat(pieces)
        except (RuntimeError, TypeError, ValueError):
            pass  # e.g. CUDA samples (the pad buffer is on the CPU): per-sample copies below
        else:
            return flat.view(rows, size)
    elif n > 1:
        out = torch.empty((rows, size), dtype=dtype)
        fill_pad(out, pad_value)
        if is_np:
            out.numpy()[mask] = np.concatenate(values)
            return out
        flat = torch.cat(list(values))
        if dtype in _NUMPY_DTYPES and not flat.requires_grad:  # (torch keeps the graph)
            out.numpy()[mask] = flat.numpy()
        else:
            out[torch.from_numpy(mask)] = flat
        return out
    out = torch.empty((rows, size), dtype=dtype)
    lengths = np.array(sizes, dtype=np.int64)[:, None]
    _copy_per_sample(out, values, lengths, (0,), (size,), side, pad_value, is_np)
    return out


def interleaved_pieces(
    values: Sequence[Any],
    sizes: list[int],
    size: int,
    side: str,
    entry: tuple[Any, dict],
    bounds: tuple[int, int] | None = None,
) -> list[Any]:
    """``[x_0, pad_0, x_1, pad_1, ...]`` (pads first for left padding), without empty pieces:
    ``torch.cat`` takes a path about 6x slower when empty tensors are mixed in. ``bounds``:
    ``(min(sizes), max(sizes))`` when the caller has them (no scan of ``sizes``)."""
    buf, views = entry
    try:
        pads = list(map(views.__getitem__, sizes))
    except KeyError:
        for length in sizes:
            if length not in views:
                views[length] = buf[: size - length] if length < size else None
        pads = list(map(views.__getitem__, sizes))
    pieces: list[Any] = [None] * (2 * len(sizes))
    if side == "right":
        pieces[0::2], pieces[1::2] = values, pads
    else:
        pieces[0::2], pieces[1::2] = pads, values
    lo, hi = bounds if bounds is not None else (0 if 0 in sizes else 1, size * (size in sizes))
    if lo == 0:  # empty samples and full rows (no pad piece) are left out
        real = [k > 0 for k in sizes]
        pad = [k < size for k in sizes]
        keep: list[bool] = [False] * len(pieces)
        keep[0::2], keep[1::2] = (real, pad) if side == "right" else (pad, real)
        pieces = [p for p, k in zip(pieces, keep, strict=True) if k]
    elif hi == size:  # full rows: their pad piece is None
        pieces = [p for p in pieces if p is not None]
    return pieces


def _pad_buffer(cache: dict[Any, Any], key: tuple, shape: tuple[int, ...]) -> tuple[Any, dict]:
    """A cached buffer of ``shape`` filled with the pad value, and its cached prefix views."""
    if len(cache) > 64:
        cache.clear()
    is_np, _, dtype, pad_value = key
    pad = torch.empty(shape, dtype=dtype)
    fill_pad(pad, pad_value)
    entry: tuple[Any, dict] = (pad.numpy() if is_np else pad, {})
    cache[key] = entry
    return entry


def _copy_per_sample(
    out: torch.Tensor,
    values: Sequence[Any],
    lengths: np.ndarray,
    dims: tuple[int, ...],
    targets: tuple[int, ...],
    side: str,
    pad_value: Any,
    is_np: bool,
) -> None:
    """Copy each sample into its slot and write the pad value only on the padding.

    Runs on numpy views when it can (a numpy slice copy costs a third of a torch one).
    """
    dst: Any = out
    if out.dtype in _NUMPY_DTYPES:
        try:
            values = values if is_np else [v.numpy() for v in values]
            dst = out.numpy()
        except (TypeError, RuntimeError):  # CUDA or grad-requiring samples: copy in torch
            pass
    if dst is out and is_np:
        values = [torch.from_numpy(np.asarray(v)) for v in values]
    if out.ndim == 2:  # the common case, one dim: two slice writes per sample
        t = targets[0]
        for i, (v, s) in enumerate(zip(values, lengths[:, 0].tolist(), strict=True)):
            if side == "right":
                dst[i, :s] = v
                dst[i, s:] = pad_value
            else:
                dst[i, t - s :] = v
                dst[i, : t - s] = pad_value
        if len(values) < out.shape[0]:
            fill_pad(out[len(values) :], pad_value)
        return
    ndim = out.ndim - 1
    for i, (v, sizes) in enumerate(zip(values, lengths.tolist(), strict=True)):
        real: list[Any] = [slice(None)] * ndim
        pads = []
        for d, t, s in zip(dims, targets, sizes, strict=True):
            keep = slice(0, s) if side == "right" else slice(t - s, t)
            if s < t:
                pad = slice(s, t) if side == "right" else slice(0, t - s)
                pads.append((i, *real[:d], pad, *real[d + 1 :]))
            real[d] = keep
        dst[(i, *real)] = v
        for index in pads:
            dst[index] = pad_value
    if len(values) < out.shape[0]:
        fill_pad(out[len(values) :], pad_value)


def _interleave(
    out: torch.Tensor,
    values: Sequence[Any],
    sizes: list[int],
    side: str,
    pad_value: Any,
    cache: dict[Any, Any],
) -> bool:
    """Write ``[x_0, pad_0, x_1, pad_1, ...]`` into ``out`` with one concatenate; False if the
    samples cannot take this path (CUDA or grad-requiring tensors, mixed kinds)."""
    t, rest = out.shape[1], tuple(out.shape[2:])
    is_np = isinstance(values[0], np.ndarray)
    if not is_np and out.dtype not in _NUMPY_DTYPES and out.dtype != torch.bfloat16:
        return False
    key = (is_np, (t, *rest), out.dtype, pad_value)
    entry = cache.get(key)
    if entry is None:
        entry = _pad_buffer(cache, key, (t, *rest))
    pieces = interleaved_pieces(values, sizes, t, side, entry)
    n = len(values)
    rows = out.shape[0]
    try:
        if is_np:
            dst = out.numpy()
            np.concatenate(pieces, axis=0, out=(dst if n == rows else dst[:n]).reshape(-1, *rest))
        else:
            torch.cat(pieces, dim=0, out=(out if n == rows else out[:n]).view(-1, *rest))
    except (RuntimeError, TypeError, ValueError):
        return False
    if n < rows:
        fill_pad(out[n:], pad_value)
    return True
