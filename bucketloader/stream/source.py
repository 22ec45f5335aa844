"""A stream's source: measuring and truncating samples, opening, sharding and resuming it.

The rules of both streams (:class:`~bucketloader.BucketIterable` and
:class:`~bucketloader.stream.PackIterable`), written once.

NOTE [ Who shards the stream across DataLoader workers ]
A source that knows about workers shards itself: a Hugging Face ``IterableDataset`` splits its
shards among workers, and by torch's contract a ``torch.utils.data.IterableDataset`` reads
``get_worker_info()`` itself. Any other iterable (a list, a generator factory, a map-style
``datasets.Dataset``) is split round-robin by position: worker ``w`` of ``n`` keeps samples
``w, w + n, w + 2n, ...`` (each worker reads and skips the others' samples).
"""

from __future__ import annotations

import copy
import itertools
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bucketloader._samples import length_reader


def make_length_fn(length_fn: Any) -> Callable[[Any], Any]:
    """``sample -> length`` under NOTE [ The length of a sample ] (:mod:`bucketloader._samples`):
    ``None``, a key or a callable; a tuple of keys gives a tuple of lengths (several inputs)."""
    if length_fn is None or isinstance(length_fn, str) or callable(length_fn):
        if callable(length_fn):
            return length_fn  # a callable returns the length itself (checked per sample)
        return length_reader(length_fn, arg="length_fn")
    if (
        isinstance(length_fn, (tuple, list))
        and length_fn
        and all(isinstance(k, str) for k in length_fn)
    ):
        return _JointLengths(tuple(length_reader(k, arg="length_fn") for k in length_fn))
    raise TypeError(
        f"length_fn must be None, a key of the samples, a tuple of keys (one per bucketed "
        f"input) or a callable sample -> int, "
        f"got length_fn={length_fn!r}"
    )


class _JointLengths:
    """``sample -> tuple of lengths``, one per bucketed input (a class, so that it pickles)."""

    def __init__(self, parts: tuple[Callable[[Any], int], ...]) -> None:
        self.parts = parts

    def __call__(self, sample: Any) -> tuple[int, ...]:
        return tuple(f(sample) for f in self.parts)


def check_length(value: Any, position: int) -> int:
    """A sample's length as an int >= 0, or an error naming the sample's position."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
        return int(value)
    raise ValueError(
        f"length_fn returned {value!r} for sample {position} of this worker's stream; it must "
        "return an int >= 0"
    )


def truncate(sample: Any, length: int, limit: int, key: str | None) -> Any:
    """Cut a sample to ``limit`` elements (``overflow="truncate"``).

    A dict sample has every sequence-valued entry of the sample's length cut (so ``input_ids``,
    ``attention_mask`` and ``labels`` stay aligned); any other sample is sliced ``[:limit]``.
    """
    if isinstance(sample, Mapping):
        out = dict(sample)
        for k, v in sample.items():
            if isinstance(v, Mapping) and "array" in v and k == key:
                out[k] = {**v, "array": v["array"][:limit]}
            elif (
                not isinstance(v, (str, bytes)) and hasattr(v, "__getitem__") and _len(v) == length
            ):
                out[k] = v[:limit]
        return out
    return sample[:limit]


def _len(v: Any) -> int | None:
    try:
        return len(v)
    except TypeError:
        return None


def self_sharding(source: Any) -> bool:
    """Whether ``source`` splits itself among DataLoader workers (see the module NOTE)."""
    try:
        from torch.utils.data import IterableDataset
    except ImportError:  # pragma: no cover
        return False
    return isinstance(source, IterableDataset) or is_hf(source)


def is_stateful(source: Any) -> bool:
    """Whether ``source`` resumes from ``state_dict()`` / ``load_state_dict()`` (HF's contract)."""
    return callable(getattr(source, "state_dict", None)) and callable(
        getattr(source, "load_state_dict", None)
    )


def is_hf(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.IterableDataset``."""
    t = type(source)
    return t.__module__.startswith("datasets.") and t.__name__ == "IterableDataset"


def open_source(source: Any, worker: tuple[int, int]) -> Iterator[Any]:
    """A fresh iterator over this worker's share of ``source``."""
    it = iter(source)
    wid, num = worker
    if num > 1 and not self_sharding(source):
        it = itertools.islice(it, wid, None, num)
    return it


def checkpoint(source: Any) -> Any:
    """A copy of a stateful ``source``'s ``state_dict()`` that later reads cannot change (an HF
    source returns a fresh copy of its own)."""
    state = source.state_dict()
    return state if is_hf(source) else copy.deepcopy(state)


def trim_snapshots(snaps: list[tuple[int, Any]], oldest: int) -> None:
    """Keep the newest snapshot at or before ``oldest`` (the oldest buffered position) and the
    later ones: a resume restarts the source there."""
    keep = max(i for i, (p, _) in enumerate(snaps) if p <= oldest)
    del snaps[:keep]


def resume_point(snaps: list[tuple[int, Any]], oldest: int) -> tuple[int, Any]:
    """The newest snapshot ``(position, source state)`` at or before ``oldest``: where a resume
    restarts the source."""
    return max((s for s in snaps if s[0] <= oldest), key=lambda s: s[0])


def reopen(source: Any, worker: tuple[int, int], state: Any) -> Iterator[Any]:
    """The worker's iterator over ``source`` restarted at a checkpoint ``state`` (``None``: from
    the start of the epoch)."""
    if state is None:
        return open_source(source, worker)
    source.load_state_dict(state)
    return forget_after_first(iter(source), source)


def replay(it: Iterator[Any], start: int, stop: int) -> Iterator[tuple[int, Any]]:
    """``(position, sample)`` for the positions ``start .. stop - 1`` of a resumed pass; a source
    that ends early cannot be resumed."""
    for pos in range(start, stop):
        try:
            yield pos, next(it)
        except StopIteration:
            raise ValueError(
                f"cannot resume: the source ended at sample {pos} while replaying to {stop}; "
                "resume needs a deterministic, re-iterable source"
            ) from None


def forget_after_first(it: Iterator[Any], source: Any) -> Iterator[Any]:
    """Yield from ``it`` (a resumed ``source``); once it has started, make an HF source forget
    the loaded state: ``datasets.IterableDataset.load_state_dict`` keeps it for every later
    iteration of the same epoch, and we only want it for the one we resumed."""
    started = False
    for x in it:
        if not started:
            _forget_resume(source)
            started = True
        yield x
    if not started:
        _forget_resume(source)


def _forget_resume(source: Any) -> None:
    if is_hf(source):
        source.load_state_dict(None)
