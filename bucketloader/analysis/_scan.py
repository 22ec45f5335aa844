"""Where the report's lengths and shapes come from: arrays, datasets and DataLoader batches."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from bucketloader._samples import is_number, length_of, measured, measured_code
from bucketloader._validation import as_lengths

if TYPE_CHECKING:
    from torch.utils.data import DataLoader


def is_dataloader(data: object) -> TypeGuard[DataLoader[Any]]:
    if "torch" not in sys.modules:
        return False
    from torch.utils.data import DataLoader

    return isinstance(data, DataLoader)


def is_dataset(data: Any, column: Any = None) -> bool:
    """A map-style dataset (not a plain container of lengths).

    A list or tuple is lengths when its items are numbers, else (or with a ``column`` to
    measure) a dataset of samples, such as ``[torch.randn(n) for n in lengths]``. A list of
    strings that are all digits (``["12", "7"]``, lengths read from a file) is lengths, which
    :func:`~bucketloader._validation.as_lengths` refuses with the conversion, not texts of one or
    two characters.

    Example:
        >>> is_dataset(["a text", "another"]), is_dataset(["12", "7"]), is_dataset([12, 7])
        (True, False, False)
    """
    if isinstance(data, (list, tuple)):
        if (
            column is None
            and data
            and all(isinstance(x, str) and x.strip().isdigit() for x in data)
        ):
            return False
        return bool(data) and (column is not None or not _is_length(data[0]))
    if isinstance(data, (np.ndarray, str, bytes)) or hasattr(data, "detach"):
        return False
    return hasattr(data, "__getitem__") and hasattr(data, "__len__")


def from_pandas(data: Any, column: Any) -> tuple[Any, Any]:
    """A pandas ``Series`` or ``DataFrame`` as ``(data, column)`` that the other paths read.

    pandas indexes by label, not position: ``series[0]`` of a filtered frame
    (``df[df.n > 5]["n"]``) or a frame's ``df[0]`` is a ``KeyError``, so neither is measured
    item by item. A Series becomes its values in order (numbers are lengths, texts and token
    lists are measured); a DataFrame its ``column``, or with a callable ``column`` its rows as
    dicts. Anything else is returned as it is.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"n": [5, 9, 2], "text": ["ab", "abc", "a"]})
        >>> data, column = from_pandas(df[df.n > 3], "text")
        >>> data, column
        (['ab', 'abc'], None)
    """
    kinds = {c.__name__ for c in type(data).__mro__ if c.__module__.split(".")[0] == "pandas"}
    if "DataFrame" in kinds:
        columns = list(data.columns)
        if callable(column):
            return data.to_dict("records"), column
        if column is None or column not in columns:
            got = "no column" if column is None else f"column={column!r}, which it does not have"
            raise ValueError(
                f"data is a pandas DataFrame with columns {columns[:8]}, got {got}; name the "
                f"column to measure, column={columns[0]!r} (lengths, texts or token lists), or "
                "pass that column itself, df[name]"
            )
        data, column = data[column], None
        kinds = {"Series"}
    if "Series" in kinds:
        values = data.to_numpy()
        return (values if values.dtype != object else values.tolist()), column
    return data, column


def _is_length(item: Any) -> bool:
    """A number, or a 0-d array / tensor holding one."""
    return is_number(item) or getattr(item, "shape", None) == ()


def progress_bar(items: Iterable[Any], *, total: int | None, desc: str, show: bool | None) -> Any:
    """``tqdm`` over ``items`` (shown on a terminal by default); the bare iterable without tqdm."""
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with datasets
        return items
    return tqdm(items, total=total, desc=desc, unit="it", leave=False, file=sys.stderr)


def tensor_fields(batch: Any, prefix: str = "") -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(field path, shape)`` of every tensor / array in a (nested) batch.

    Example:
        >>> import numpy as np
        >>> list(tensor_fields({"x": np.zeros((2, 3)), "y": [np.zeros(2), 5]}))
        [('x', (2, 3)), ('y[0]', (2,))]
    """
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        yield (prefix or "batch"), tuple(int(s) for s in batch.shape)
    elif isinstance(batch, Mapping):
        for key, value in batch.items():
            yield from tensor_fields(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(batch, (list, tuple)):
        for i, value in enumerate(batch):
            yield from tensor_fields(value, f"{prefix}[{i}]")


def scan_batches(
    loader: Any, *, max_batches: int | None, show: bool | None
) -> tuple[dict[str, Counter[tuple[int, ...]]], int]:
    """Count the distinct shapes of every tensor field over a DataLoader's batches."""
    try:
        total = len(loader)
    except TypeError:
        total = None
    if max_batches is not None:
        total = max_batches if total is None else min(total, max_batches)
    shapes: dict[str, Counter[tuple[int, ...]]] = {}
    seen = 0
    for batch in progress_bar(loader, total=total, desc="scanning batches", show=show):
        for name, shape in tensor_fields(batch):
            shapes.setdefault(name, Counter())[shape] += 1
        seen += 1
        if max_batches is not None and seen >= max_batches:
            break
    return shapes, seen


def dataset_lengths(
    dataset: Any, column: str | int | Callable[[Any], Any] | None, *, show: bool | None
) -> np.ndarray:
    """Per-item lengths of a map-style dataset (Arrow-vectorised for a ``datasets.Dataset``)."""
    hf = hasattr(dataset, "column_names") and hasattr(dataset, "data")
    if hf and (column is None or isinstance(column, str)):
        from bucketloader.hf import lengths  # a datasets.Dataset: datasets is installed

        return as_lengths(lengths(dataset, column))
    n = len(dataset)
    items = progress_bar(range(n), total=n, desc="measuring items", show=show)
    out: list[int] = []
    shapes: set[tuple[int, ...]] = set()
    what = ""
    for i in items:
        value, what = measured(dataset[i], column, arg="column")
        out.append(length_of(value, what=what))
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 1 and len(shapes) < 8:
            shapes.add(tuple(int(d) for d in shape))
    measured_lengths = as_lengths(out)
    _check_not_channel_first(measured_lengths, shapes, what, column)
    return measured_lengths


def _check_not_channel_first(
    lengths: np.ndarray, shapes: set[tuple[int, ...]], what: str, column: Any
) -> None:
    """NOTE [ Channel-first items ]
    An item is measured by its first dim (NOTE [ The length of a sample ]), which for a
    ``(C, T)`` waveform (``torchaudio.load``) or a ``(C, H, W)`` image is its channel count: every
    item measured 1 or 3, and the report said one shape and no padding while the batches took a
    shape per length (s30-first). Where every item has the same first dim and the dims after it
    differ, that is what happened: an error with the measure to pass instead. The measure named
    is the dim that varies (of up to 8 shapes seen): ``shape[-1]`` for a ``(C, T)`` waveform,
    ``shape[1]`` for a text-line image of one height, channel-last ``(32, W, 3)``, where
    ``shape[-1]`` would have measured its 3 channels (s31-rev); where several vary (an image's
    height and width), the two-input plan."""
    if len(shapes) < 2 or lengths.min() != lengths.max():
        return
    a, b = sorted(shapes)[:2]
    ndim = {len(s) for s in shapes}
    varies = [d for d in range(len(a)) if len({s[d] for s in shapes}) > 1] if len(ndim) == 1 else []
    expr = measured_code(what, "item")
    images = (
        "Images vary in height and width together: plan them with BucketSampler({'height': h, "
        "'width': w}, max_shapes=K, size='prod'), whose report() gives the padding"
    )
    if len(varies) == 1:
        d = varies[0]
        dim = "-1" if d == len(a) - 1 else str(d)
        wave = " (the T of a (C, T) waveform)" if len(a) == 2 else ""
        measure = f"{expr}.shape[{dim}]" if expr else f"x.shape[{dim}]"
        fix = (
            f"measure dim {dim}, the one that varies: column=lambda item: {measure}{wave}"
            if expr
            else f"make column return the length of dim {dim}, the one that varies: {measure}"
        )
    elif varies:
        fix = f"dims {varies} vary. {images}"
    else:  # (items of several ranks)
        fix = f"make column return the length (x.shape[-1] for a (C, T) waveform). {images}"
    name = "the column callable" if callable(column) else f"column={column!r}"
    raise ValueError(
        f"{name} measures each item's first dim ({what}), which is "
        f"{int(lengths[0])} in all {lengths.size:,} items while the dims after it differ "
        f"({a} and {b}): data whose first dim is not its length (channel-first) would be "
        f"reported as one length with no padding; {fix}"
    )
