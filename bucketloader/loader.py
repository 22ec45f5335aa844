"""ResumableDataLoader: a ``DataLoader`` over a planned batch sampler whose state is exact.

NOTE [ Counting what the loop received ]
A ``DataLoader`` with workers pulls batch indices from its batch sampler ahead of the loop (up to
``num_workers * prefetch_factor`` batches), so the sampler's own count runs ahead of training and
a state saved from it skips the batches in flight on resume. This loader wraps each pass's
iterator and, every time it hands a batch to the loop, tells the sampler how many it has handed
out in this pass; the sampler's ``state_dict()`` then records that count (NOTE [ Exact resume
behind DataLoader workers ] in :mod:`bucketloader.sampler`). Counting happens in the main process,
after the batch came back from its worker, so it is exact for any ``num_workers``,
``prefetch_factor`` or ``persistent_workers``. A batch sampler without the counting hooks (any
other ``Sampler[list[int]]``) is loaded as by a plain ``DataLoader``.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from bucketloader._validation import check_bool, check_int, check_options

__all__ = ["ResumableDataLoader", "check_dataset_size", "check_loader_options"]

#: The options ``DataLoader`` takes besides the dataset (what ``dataloader()`` passes on).
_LOADER_OPTIONS = tuple(
    n for n in inspect.signature(DataLoader.__init__).parameters if n not in ("self", "dataset")
)
#: ``DataLoader`` options a batch sampler decides (torch refuses them beside ``batch_sampler``).
_SAMPLER_OWNED = ("batch_size", "shuffle", "sampler", "drop_last", "batch_sampler")


def _is_default(name: str, value: Any) -> bool:
    """Whether a sampler-owned option holds torch's default, which changes nothing and torch
    takes beside ``batch_sampler`` (``shuffle=False`` in loader options shared with other
    loaders)."""
    if name == "batch_size":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == 1
    if name in ("shuffle", "drop_last"):
        return value is None or (isinstance(value, (bool, np.bool_)) and not value)
    return name == "sampler" and value is None


def check_dataset_size(sampler: Any, dataset: Any, planned: int, *, at_least: bool = False) -> None:
    """Refuse a dataset whose size disagrees with the ``planned`` lengths, either way: one too
    short fails deep in a worker, one too long trains silently on its first ``planned`` samples
    (s10-user). ``at_least``: the dataset only has to hold ``planned`` rows (indices are global
    row ids). A dataset without ``__len__`` is not checked.

    Example:
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler([3, 4, 9], num_buckets=2, batch_size=2)
        >>> check_dataset_size(sampler, ["a", "b", "c"], 3)  # one sample per length: quiet
        >>> try:
        ...     check_dataset_size(sampler, ["a", "b", "c", "d"], 3)
        ... except ValueError as exc:
        ...     print(str(exc)[:74])
        dataset has 4 samples but this BucketSampler was planned on lengths for 3;
    """
    if not hasattr(dataset, "__len__"):
        return
    size = len(dataset)
    if size == planned or (at_least and size > planned):
        return
    name = type(sampler).__name__
    need = f"at least {planned:,}" if at_least else f"{planned:,}"
    keys = list(dataset.keys()) if isinstance(dataset, Mapping) else []
    if keys and all(isinstance(k, str) for k in keys):  # (s34-user: "has 1 samples")
        raise ValueError(
            f"dataset is a {type(dataset).__name__} of the splits {keys}, not a dataset of "
            f"samples (this {name} was planned on lengths for {need}); pass the split the "
            f"lengths were read from, e.g. dataset[{keys[0]!r}]"
        )
    raise ValueError(
        f"dataset has {size:,} samples but this {name} was planned on lengths for {need}; "
        "give the sampler one length for every sample of the dataset, in the same order"
        + (
            f", or pass torch.utils.data.Subset(dataset, range({planned})) if you meant to "
            f"train on the first {planned:,} samples only"
            if size > planned and not at_least
            else ""
        )
    )


#: The DataLoader options that take a callable, and what it does (for the error).
_CALLABLES = {
    "collate_fn": "a list of samples -> a batch; leave it out to use sampler.collator()",
    "worker_init_fn": "worker id -> None",
}


def _drop_last_hint(sampler: Any) -> str:
    """What ``drop_last=True`` asks, in the sampler's own terms (s21-pack: the refusal did not
    name ``last_batch``); a sampler without that option says its own (``EvalSampler``)."""
    return str(getattr(sampler, "_drop_last_hint", " (drop_last=True is its last_batch='drop')"))


def check_loader_options(sampler: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The ``DataLoader`` options of ``sampler.dataloader(dataset, **options)``, checked in the
    library's voice (torch's own errors name ``batch_sampler``, which the user never passed, or
    compare ``None < 0``); ``num_workers`` comes back as an int. The options the sampler decides
    are refused unless they hold torch's defaults, which change nothing (``shuffle=False``).

    Example:
        >>> check_loader_options(object(), {"num_workers": 2, "shuffle": False})
        {'num_workers': 2, 'shuffle': False}
        >>> check_loader_options(object(), {"num_workers": -1})
        Traceback (most recent call last):
        ...
        ValueError: num_workers must be an int >= 0, got num_workers=-1
    """
    for name in (k for k in _SAMPLER_OWNED if k in options):
        if not _is_default(name, options[name]):
            kind = type(sampler).__name__
            raise TypeError(
                f"dataloader() got {name}={options[name]!r}, which the {kind} decides (its "
                f"batches are the loader's); set the batch size and order when you make the "
                f"{kind}{_drop_last_hint(sampler) if name == 'drop_last' else ''}, and pass only "
                "other DataLoader options here (num_workers=, pin_memory=, ...)"
            )
    check_options("dataloader()", options, _LOADER_OPTIONS)  # (torch: no closest name)
    if "in_order" in options:
        _check_in_order("dataloader()", options["in_order"])
    out = dict(options)
    if "num_workers" in out:
        out["num_workers"] = check_int("num_workers", out["num_workers"], minimum=0)
    # torch checks these late or not at all: prefetch_factor=0 was an AssertionError at the
    # first batch, generator=3 a random_() signature dump, pin_memory="no" pinned memory and
    # worker_init_fn=3 failed in every worker
    for name, what in _CALLABLES.items():
        value = out.get(name)
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be a callable ({what}) or None, got {name}={value!r}")
    for name in ("pin_memory", "persistent_workers"):
        if name in out:
            out[name] = check_bool(name, out[name])
    if out.get("prefetch_factor") is not None:
        out["prefetch_factor"] = check_int("prefetch_factor", out["prefetch_factor"], minimum=1)
    gen = out.get("generator")
    if gen is not None and not isinstance(gen, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got generator={gen!r}; the "
            "sampler's order comes from its seed="
        )
    return out


def _check_in_order(owner: str, in_order: Any) -> None:
    """Refuse ``in_order`` other than ``True``: torch >= 2.6 then hands batches to the loop as
    workers finish them, and the state counts the first n batches of the plan as the ones
    trained, so a resume skipped a slow batch and repeated another, silently (s29-user; an
    EvalSampler's outputs, in step order, would be restored to the wrong samples). torch reads
    the option by truth value (``if not self._in_order``), so ``None`` and ``0`` are out of
    order too (s30-rev: ``None`` was let through, and a slow batch 2 of 10 reached the loop
    eighth)."""
    if in_order is not True:
        raise ValueError(
            f"{owner} got in_order={in_order!r}: this loader hands its batches to the loop in "
            "the sampler's order, which its state_dict() (the first n batches of the epoch) and "
            "the ranks' shape at each step rely on; out of order, a resume skips some batches "
            "and repeats others. Leave in_order out (True)"
        )


def _counts_passes(sampler: Any) -> bool:
    """Whether ``sampler`` takes a :class:`ResumableDataLoader`'s count of the batches it
    handed out (a bucketloader sampler; another batch sampler is left as torch runs it)."""
    return all(callable(getattr(sampler, n, None)) for n in ("_loader_pass", "_loader_handed"))


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` whose batch sampler's ``state_dict()`` counts the batches the loop got.

    Build it with ``sampler.dataloader(dataset, **kwargs)`` (a
    :class:`~bucketloader.BucketSampler` or :class:`~bucketloader.PackSampler`), or directly
    with ``batch_sampler=``. ``set_epoch`` reaches the batch sampler (``transformers.Trainer``
    calls it every epoch), and ``state_dict()`` / ``load_state_dict()`` are the sampler's, so
    the loader can be checkpointed like torchdata's ``StatefulDataLoader``.

    Example:
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler(list(range(1, 41)), num_buckets=2, batch_size=4, seed=0)
        >>> loader = sampler.dataloader(list(range(40)), collate_fn=list)
        >>> for step, batch in enumerate(loader):
        ...     if step == 2:
        ...         break
        >>> state = loader.state_dict()
        >>> state["batches_yielded"]
        3
        >>> again = BucketSampler(list(range(1, 41)), num_buckets=2, batch_size=4, seed=0)
        >>> again.load_state_dict(state)
        >>> len(list(again))
        7
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if _counts_passes(self.batch_sampler):  # (built directly, past dataloader()'s check)
            _check_in_order("ResumableDataLoader", getattr(self, "in_order", True))

    def __iter__(self) -> Any:  # an iterator (torch's, or counting around it)
        sampler = self.batch_sampler
        begin = getattr(sampler, "_loader_pass", None)
        handed = getattr(sampler, "_loader_handed", None)
        if begin is None or handed is None:
            return super().__iter__()
        begin()
        return _Counted(super().__iter__(), handed)

    def set_epoch(self, epoch: int) -> None:
        """Forward ``epoch`` to the batch sampler (an evaluation sampler has no epochs)."""
        set_epoch = getattr(self.batch_sampler, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The batch sampler's exact state (NOTE [ Counting what the loop received ])."""
        return self._stateful("state_dict")()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass yields exactly the batches the saved loop had not received."""
        self._stateful("load_state_dict")(state)

    def _stateful(self, name: str) -> Any:
        method = getattr(self.batch_sampler, name, None)
        if method is None:
            raise TypeError(
                f"{type(self.batch_sampler).__name__} has no {name}(); ResumableDataLoader "
                "checkpoints a BucketSampler or PackSampler"
            )
        return method


class _Counted:
    """One pass's iterator, counting the batches handed to the loop."""

    def __init__(self, inner: Any, handed: Any) -> None:
        self._inner, self._handed, self._count = inner, handed, 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._inner)
        except StopIteration:
            raise
        except Exception:
            self._count = self._received()
            self._handed(self._count)
            raise
        self._count += 1
        self._handed(self._count)
        return batch

    def _received(self) -> int:
        """The batches of this pass the loader has used up after ``next`` raised.

        NOTE [ A batch that raised is used up ]
        A ``__getitem__`` or collate_fn that raises for one batch (a corrupt sample) raises in
        the loop, and torch's iterator has moved past that batch: a loop that catches the error
        and goes on gets the next batch. The batch counts as handed out, or a state saved
        later resumes one batch early and trains the batch before it twice (s29-user).
        torch's multi-process iterator counts what it has received, an error included
        (``_rcvd_idx``), and not a batch it is still waiting for (a worker that died, a
        ``timeout``); the single-process iterator drew the batch from the sampler before the
        fetch that raised.
        """
        received = getattr(self._inner, "_rcvd_idx", None)
        if isinstance(received, int) and not isinstance(received, bool):
            return max(self._count, received)
        if getattr(self._inner, "_num_workers", None) == 0:
            return self._count + 1
        return self._count

    def __len__(self) -> int:
        return len(self._inner)
