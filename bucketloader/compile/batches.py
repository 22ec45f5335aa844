"""Batches of every planned shape, built through the collator that training uses.

NOTE [ The batch-source protocol ]
:func:`~bucketloader.compile.precompile` compiles a step function once per planned batch shape.
For each shape it needs one batch of exactly that shape whose *structure* is that of a real batch:
the same fields, dtypes, masks, trailing dims and devices, because ``torch.compile`` guards on all
of them, and a batch that differs in any one compiles a graph training never uses. It gets those
batches from a *batch source*, any object with

* ``shapes``: every batch shape ``(B, L_1, ..., L_D)`` training will see (a plan's promise), and
* ``make_batch(shape)``: one batch of that shape, exactly as the training loop receives it from
  its ``DataLoader`` (before the loop moves it to a device), and optionally
* ``make_batches(shape)``: a list of such batches, when one shape comes in several structures
  (per-dataset plans whose datasets have different fields); ``make_batch`` is then unused.

:class:`ExampleBatches` is the batch source for every bucketloader plan with ``.shapes`` and
``.collator()`` (:class:`~bucketloader.BucketSampler`, :class:`~bucketloader.BucketIterable`, a
packing plan): it resizes one real sample per field structure to the shape's padded lengths and
runs ``B`` copies through the very collator training uses, so the guards match the real batches.
A plan whose batches cannot be made that way implements the protocol itself (a ``make_batch``
method, or pass any object with ``shapes`` and ``make_batch`` to ``precompile``).

NOTE [ Resizing a sample to a planned length ]
With a :class:`~bucketloader.PadCollator` (or a wrapper that holds one as ``.collator``, such as
:mod:`bucketloader.hf`'s), the fields that follow a bucketed input and their dims are the
collator's own (``fields=...``, or the rules of NOTE [ Which fields are padded ] in
:mod:`bucketloader.collate.collator`). Other collators (a packing collator) get the library's
length rule (NOTE [ The length of a sample ] in :mod:`bucketloader._samples`): every
sequence-valued field follows the one input along its first dim. A field is resized by repeating
its own values cyclically (``index i -> i mod n``), so token ids stay valid ids and feature values
stay in range; an empty field is filled with zeros. Fixed-size fields are kept as they are.
A collator whose batches of a shape cannot hold a sample of the shape's padded lengths says
what they hold with ``sample_lengths(shape)`` (the lengths one sample is resized to), read from
``collate_fn`` or the collator it wraps (``.collator``): a
:class:`~bucketloader.pack.PackCollator` built with an int ``max_seqlen`` below the row length
refuses a document as long as the row, so its example is resized to ``max_seqlen`` tokens (before,
``precompile`` failed on it, though every planned document fits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from bucketloader._samples import EvalSamples, is_sequence, kind_of
from bucketloader._validation import checks_options
from bucketloader.collate import PadCollator
from bucketloader.collate.fields import keys_of
from bucketloader.plan.table import SHORT_SLACK, below_plan

__all__ = ["BatchSource", "ExampleBatches", "check_shapes", "to_device"]


@runtime_checkable
class BatchSource(Protocol):
    """What :func:`~bucketloader.compile.precompile` needs: the shapes and a batch of each.

    See NOTE [ The batch-source protocol ] in :mod:`bucketloader.compile.batches`.

    Example:
        >>> import torch
        >>> class Zeros:  # a batch source of your own: zero batches of two planned shapes
        ...     shapes = [(4, 16), (2, 32)]
        ...     def make_batch(self, shape):
        ...         return {"inputs": torch.zeros(shape, dtype=torch.long)}
        >>> isinstance(Zeros(), BatchSource), Zeros().make_batch((2, 32))["inputs"].shape
        (True, torch.Size([2, 32]))
    """

    shapes: Sequence[tuple[int, ...]]

    def make_batch(self, shape: tuple[int, ...]) -> Any: ...


@checks_options
class ExampleBatches:
    """One batch of every planned shape, from one real sample, through the training collator.

    For a shape ``(B, L_1, ..., L_D)`` it resizes the example sample's variable fields to
    ``(L_1, ..., L_D)`` (NOTE [ Resizing a sample to a planned length ] in
    :mod:`bucketloader.compile.batches`) and collates ``B`` copies with ``collate_fn``: every
    field, dtype and mask is the collator's, as in training. With per-dataset groups, the sample of
    each group is taken from the dataset and the shape's batch is made for every group that plans
    it whose samples have another structure.

    Args:
        plan: a :class:`~bucketloader.BucketSampler`, :class:`~bucketloader.EvalSampler`,
            :class:`~bucketloader.BucketIterable`, a packing plan: anything with ``.shapes``
            (and ``.collator()`` when ``collate_fn`` is not given).
        example: one real sample (a dict, tuple or bare tensor / array / token list, as the
            dataset returns it); or the dataset itself (a ``torch.utils.data.Dataset``, a Hugging
            Face dataset, an iterable, a list with one sample per planned length, or a list of
            samples of one kind such as ``[tensor]`` or ``[dict, ...]``), from which the first
            sample of each group is taken. A tuple, or a list of fields of different kinds
            (``[ids, label]``), is one sample.
        collate_fn: the collator the training ``DataLoader`` uses (default ``plan.collator()``);
            pass yours when it was built with options (``fields``, ``pad_value``, ``mask_dtype``).
        device: move every tensor of the batch there (as the training loop does before the step);
            ``None`` keeps the collator's CPU tensors.

    Example:
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
        >>> source = ExampleBatches(sampler, {"input_ids": [7, 8, 9], "label": 1})
        >>> source.shapes
        [(2, 8), (2, 12)]
        >>> batch = source.make_batch((2, 12))
        >>> batch["input_ids"].shape, batch["input_ids"][0, :5].tolist(), batch["label"].tolist()
        (torch.Size([2, 12]), [7, 8, 9, 7, 8], [1, 1])
    """

    def __init__(
        self,
        plan: object,
        example: object,
        *,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.shapes = check_shapes(getattr(plan, "shapes", None), what="plan.shapes")
        if collate_fn is None:
            make = getattr(plan, "collator", None)
            if not callable(make):
                raise TypeError(
                    f"plan must have .shapes and .collator() (a BucketSampler, BucketIterable or "
                    f"packing plan), got {type(plan).__name__} without .collator(); pass "
                    "collate_fn=the collator your DataLoader uses"
                )
            collate_fn = make()
        if not callable(collate_fn):
            raise TypeError(f"collate_fn must be callable, got collate_fn={collate_fn!r}")
        self.plan = plan
        self.collate_fn = collate_fn
        self.device = None if device is None else torch.device(device)
        # a wrapper around a PadCollator (hf's ModelInputs) pads as the PadCollator does
        inner = getattr(collate_fn, "collator", None)
        self._pad = collate_fn if isinstance(collate_fn, PadCollator) else inner
        if not isinstance(self._pad, PadCollator):
            self._pad = None
        table = getattr(self._pad, "shape_table", None) or getattr(plan, "shape_table", None)
        self._table = table
        self._group_key = getattr(self._pad or collate_fn, "group_key", None)
        self._examples, taken, size = _examples(plan, example, table)
        _check_unit(plan, table, self._examples, taken, size, self._specs, self._names, self._pad)
        # an EvalSampler's collator reads which rows are real from the samples it is given (the
        # dataloader's EvalSamples): a plain list was refused, and precompile blamed the example
        self._eval = _is_eval(plan, collate_fn)

    # -- the protocol ---------------------------------------------------------------------------
    def make_batch(self, shape: tuple[int, ...]) -> Any:
        """One batch of ``shape``, collated by ``collate_fn`` (and moved to ``device``)."""
        return self.make_batches(shape)[0]

    def make_batches(self, shape: tuple[int, ...]) -> list[Any]:
        """One batch of ``shape`` per distinct sample structure among the groups that plan it."""
        shape = self._check_planned(shape)
        out, seen = [], set()
        for group in self._groups_of(shape):
            sample = self._examples[group if group in self._examples else None]
            signature = _structure(sample, self._group_key)
            if signature in seen:
                continue
            seen.add(signature)
            try:
                samples = self.samples(shape, group=group)  # asks the collator for its fields
                if self._eval:  # every row real, as in a full evaluation batch
                    samples = _eval_samples(samples)
                batch = self.collate_fn(samples)
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(
                    f"the collator could not collate {shape[0]} copies of the example sample "
                    f"resized to {shape[1:]} ({exc}); is example a sample of the dataset this "
                    "plan was built on?"
                ) from exc
            _check_batch_shape(batch, shape, self._names)
            out.append(to_device(batch, self.device))
        return out

    def samples(self, shape: tuple[int, ...], *, group: Any = None) -> list[Any]:
        """The ``B`` samples collated into the batch of ``shape`` (resized example copies)."""
        shape = self._check_planned(shape)
        sample = self._examples.get(group, self._examples.get(None))
        if sample is None:
            sample = next(iter(self._examples.values()))
        resized = _resize_sample(sample, self._specs(sample), self._lengths(shape))
        if self._group_key is not None and group is not None and isinstance(resized, Mapping):
            resized = {**resized, self._group_key: group}
        return [resized] * shape[0]

    # -- helpers --------------------------------------------------------------------------------
    def _lengths(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The lengths the example is resized to for ``shape``: the padded lengths
        ``shape[1:]``, or the collator's own ``sample_lengths(shape)`` where it has one (a
        :class:`~bucketloader.pack.PackCollator` with an int ``max_seqlen`` below the row
        length refuses a document of the whole row: NOTE [ Resizing a sample to a planned
        length ])."""
        for owner in (self.collate_fn, getattr(self.collate_fn, "collator", None)):
            own = getattr(owner, "sample_lengths", None)
            if callable(own):
                return tuple(int(n) for n in own(shape))
        return tuple(shape[1:])

    @property
    def _names(self) -> tuple[str, ...]:
        names = getattr(self._table, "input_names", None)
        return tuple(names) if names is not None else ("length",)

    def _check_planned(self, shape: Any) -> tuple[int, ...]:
        try:
            shape = tuple(int(x) for x in shape)
        except TypeError:
            shape = ()
        if shape not in self.shapes:
            raise ValueError(
                f"shape must be one of the plan's shapes {self.shapes[:8]}, got shape={shape!r}"
            )
        return shape

    def _groups_of(self, shape: tuple[int, ...]) -> list[Any]:
        """The group ids that plan ``shape`` (``[None]`` without groups)."""
        cells = getattr(self._table, "cells", None)
        values = getattr(cells, "group_values", None)
        if cells is None or values is None:
            return [None]
        match = np.flatnonzero(
            (np.asarray(cells.lengths) == np.asarray(shape[1:])[None, :]).all(axis=1)
            & (np.asarray(cells.batch) >= shape[0])
        )
        groups = sorted({values[int(cells.group[c])] for c in match})
        return groups or [values[0]]

    def _specs(self, sample: Any) -> dict[Any, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Variable fields of ``sample``: key -> (input indices, dims)."""
        kind = kind_of(sample)
        names = self._names
        col = self._pad
        if col is not None:  # the collator says which fields it pads, along which dims
            return col.variable_fields(sample)
        if len(names) != 1:
            raise ValueError(
                f"cannot tell which fields of the example follow the plan's inputs {names} for a "
                f"{type(self.collate_fn).__name__}; give precompile a batch source with "
                "make_batch(shape) "
                "(NOTE [ The batch-source protocol ] in bucketloader.compile.batches)"
            )
        keys = keys_of(sample, kind)
        if kind == "bare":
            return {keys[0]: ((0,), (0,))}
        return {k: ((0,), (0,)) for k in keys if k != self._group_key and is_sequence(sample[k])}

    def __repr__(self) -> str:
        return (
            f"ExampleBatches({len(self.shapes)} shapes, collate_fn={type(self.collate_fn).__name__}"
            f", device={self.device})"
        )


def check_shapes(shapes: Any, *, what: str = "shapes") -> list[tuple[int, ...]]:
    """A plan's shapes as a sorted list of distinct int tuples ``(B, L_1, ...)``, each >= 1.

    Example:
        >>> check_shapes([[2, 8], (2, 8), (4, 3)])
        [(2, 8), (4, 3)]
    """
    try:
        out = sorted({tuple(int(x) for x in s) for s in shapes})
        ok = bool(out) and all(len(s) >= 2 and min(s) >= 1 for s in out)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"{what} must be a non-empty list of batch shapes (B, L_1, ...) of ints >= 1, got "
            f"{shapes!r}"
        )
    return out


def to_device(batch: Any, device: torch.device | str | None) -> Any:
    """``batch`` with every tensor (in dicts, lists and tuples) moved to ``device``.

    Example:
        >>> batch = to_device({"x": torch.ones(2), "rows": [torch.zeros(1)], "n": 3}, "cpu")
        >>> batch["x"].device.type, batch["rows"][0].device.type, batch["n"]
        ('cpu', 'cpu', 3)
    """
    if device is None:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return type(batch)({k: to_device(v, device) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def _is_eval(plan: Any, collate_fn: Any) -> bool:
    """Whether the batches' samples carry which rows are real (``rows_in_samples``: an
    :class:`~bucketloader.EvalSampler` and its :class:`~bucketloader.evaluation.EvalCollator`),
    read as an attribute so that this module does not import the evaluation module (which
    imports the sampler, whose package names import this one: a cycle)."""
    return any(getattr(x, "rows_in_samples", False) for x in (plan, collate_fn))


def _eval_samples(samples: list[Any]) -> list[Any]:
    """``samples`` as an evaluation batch's, every row real."""
    return EvalSamples(samples, np.arange(len(samples), dtype=np.int64))


# -- examples -----------------------------------------------------------------------------------
def _is_dataset(example: Any, plan: Any) -> bool:
    if isinstance(example, (Mapping, str, bytes, torch.Tensor, np.ndarray)):
        return False
    if isinstance(example, (list, tuple)):
        lengths = getattr(plan, "lengths", None)
        return isinstance(example, list) and (
            (lengths is not None and len(example) == len(lengths) and len(example) > 1)
            or _list_of_samples(example)
        )
    return (hasattr(example, "__getitem__") and hasattr(example, "__len__")) or hasattr(
        example, "__iter__"
    )


def _list_of_samples(example: list[Any]) -> bool:
    """``[tensor, ...]`` of one kind (same type, dims and dtype), or ``[dict, ...]``: a list of
    samples (a dataset), not one sample made of fields (``[ids, label]`` differ in dims)."""
    if not example:
        return False
    if all(isinstance(x, Mapping) for x in example):
        return True
    arrays = (torch.Tensor, np.ndarray)
    if not all(isinstance(x, arrays) for x in example):
        return False
    kinds = {(type(x), x.ndim, str(x.dtype)) for x in example}
    return len(kinds) == 1 and example[0].ndim >= 1


def _examples(
    plan: Any, example: Any, table: Any
) -> tuple[dict[Any, Any], dict[Any, int], int | None]:
    """group id (or None) -> a real sample of that group; group id -> the sample's index in the
    dataset (where taken from one by index); the dataset's size (``None``: a sample given)."""
    if example is None:
        raise ValueError(
            "example must be a real sample (e.g. example=dataset[0]) or the dataset, got "
            "example=None; precompile builds batches of every planned shape from it"
        )
    if isinstance(example, (list, tuple)) and not example:
        # (s25-user: [] was taken as a sample of no tokens, and every shape compiled on int64
        # zeros: an empty dataset, or a sample that shows no field's dtype)
        raise ValueError(
            f"example={example!r} is empty: an empty dataset, or a sample with no element to "
            "show its dtype; pass a real sample (example=dataset[0]) or a dataset with rows"
        )
    if not _is_dataset(example, plan):
        kind_of(example)  # one clear TypeError for what cannot be a sample
        return {None: example}, {}, None
    size = len(example) if hasattr(example, "__len__") else None
    groups = getattr(plan, "groups", None)
    values = getattr(getattr(table, "cells", None), "group_values", None)
    if groups is not None and values is not None and hasattr(example, "__getitem__"):
        firsts, idx = np.unique(np.asarray(groups), return_index=True)
        out: dict[Any, Any] = {int(g): example[int(i)] for g, i in zip(firsts, idx, strict=True)}
        out[None] = out[int(firsts[0])]
        return out, {int(g): int(i) for g, i in zip(firsts, idx, strict=True)}, size
    if hasattr(example, "__getitem__") and hasattr(example, "__len__"):
        if len(example) == 0:
            raise ValueError("example is an empty dataset; pass a real sample instead")
        return {None: example[0]}, {None: 0}, size
    it = iter(example)  # (once: a DataLoader's iter() starts its workers)
    if it is example:
        # a generator, an open file, an iterator over a dataset: the sample taken here is gone
        # (a BucketIterable over the same iterator then trained on 199 of 200 rows, silently)
        raise TypeError(
            f"example must be a sample or a dataset that can be iterated again, got a one-shot "
            f"iterator ({type(example).__name__}), whose first sample precompile would take "
            "away from training; pass one sample instead, e.g. example=first (kept aside and "
            "chained back: itertools.chain([first], rest)), or the dataset itself"
        )
    first = next(it, None)
    if first is None:
        raise ValueError("example is an empty iterable; pass a real sample instead")
    return {None: first}, {}, None


def _check_unit(
    plan: Any,
    table: Any,
    examples: dict[Any, Any],
    taken: dict[Any, int],
    size: int | None,
    specs_of: Callable[[Any], dict[Any, tuple[tuple[int, ...], tuple[int, ...]]]],
    names: tuple[str, ...],
    pad: PadCollator | None,
) -> None:
    """NOTE [ An example in another unit than the plan ]
    ``precompile(step, sampler, example=frames)`` for a sampler planned on audio samples (40 to
    160 times longer) was not refused: each shape's batch is the example resized to the planned
    lengths, so every graph compiled, and training's collator refused the first batch (NOTE [ A
    batch shorter than every planned sample ] in :mod:`bucketloader.plan.table`); the reverse
    (samples for a plan on frames) likewise, the collator refusing a sample beyond the last
    boundary. So the example's length per input (the longest of the fields that follow it,
    measured as the batch is resized) is checked against the plan, with the collator's
    tolerance (half, and ``SHORT_SLACK`` elements: durations rounded, BOS / EOS): against the
    plan's own length of that very sample where the example is the dataset the plan's lengths
    list (``plan.lengths``, one per sample), else against the planned range (the shortest
    planned length, the last boundary), an edge skipped where the plan leaves out or cuts
    samples beyond it (``min_length`` / ``max_length`` filters, ``filter=``): a real sample may
    lie there. The fields a :class:`~bucketloader.PadCollator` pads with an input have its
    length (it refuses a batch where they differ); under a collator of your own every
    sequence field is resized, and a transcript is not the input: the longest field is checked
    against the lower edge, the shortest against the upper one."""
    cells = getattr(table, "cells", None)
    if cells is None:
        return
    d = len(names)
    declared = getattr(plan, "lengths", None)
    if isinstance(declared, np.ndarray) and size is not None and len(declared) == size:
        declared = declared.reshape(size, -1)
        declared = declared if declared.shape[1] == d else None
    else:
        declared = None
    short_open, long_open = _left_out(plan)
    floor = getattr(table, "shortest", None)
    cut = getattr(table, "truncate", None)
    for group, sample in examples.items():
        if group is None and len(examples) > 1:
            continue  # (an alias of the first group's sample)
        try:
            specs = specs_of(sample)
        except (TypeError, ValueError):
            return  # (make_batch's own errors name these)
        gi = 0 if cells.group_values is None or group is None else cells.group_index(group)
        for j, (low, high, key) in enumerate(_measure(sample, specs, d)):
            if key is None:
                continue
            bounds = [int(b) for b in cells.boundaries[gi][j]]
            pos = taken.get(group)
            lo: int | None
            hi: int | None
            if declared is not None and pos is not None:
                lo = hi = int(declared[pos, j])
                ref = f"the plan's lengths give that sample {lo}"
            else:
                lo = None if short_open or floor is None else int(floor[j])
                hi = None if long_open or (cut is not None and cut[j] is not None) else bounds[-1]
                shortest = "" if floor is None else f"{int(floor[j])}.."
                ref = f"the plan's lengths run {shortest}{bounds[-1]}"
            short = lo is not None and below_plan(high, lo)
            top = high if pad is not None else low
            if not short and not (hi is not None and top > 2 * hi and top - hi > SHORT_SLACK):
                continue
            name = "" if names == ("length",) else f"input {names[j]!r} "
            which = "the example" if pos is None else f"the example dataset[{pos}]"
            raise ValueError(
                f"{which} has {name}length {high} (field {key!r}), but {ref} (boundaries "
                f"{bounds}): example is in another unit than the plan's lengths (feature "
                "frames where the plan counts audio samples, or the reverse; tokens against "
                "characters), and training's collator would refuse its batches; pass "
                "example= a sample (or the dataset) of the data the plan was built on, or "
                "rebuild the plan on the lengths your dataset yields"
            )


def _measure(
    sample: Any, specs: Mapping[Any, tuple[tuple[int, ...], tuple[int, ...]]], d: int
) -> list[tuple[int, int, Any]]:
    """Per input: (shortest, longest) size of the fields of ``sample`` that follow it along
    their dims, and the key of the longest (``(0, 0, None)`` where no field follows it)."""
    kind = kind_of(sample)
    keys = set(keys_of(sample, kind))
    out: list[tuple[int, int, Any]] = [(0, 0, None)] * d
    for key, (inputs, dims) in specs.items():
        if kind != "bare" and key not in keys:
            continue
        value = sample if kind == "bare" else sample[key]
        for inp, dim in zip(inputs, dims, strict=False):
            if isinstance(value, (list, tuple)):
                n = len(value)
            elif isinstance(value, (torch.Tensor, np.ndarray)) and -value.ndim <= dim < value.ndim:
                n = int(value.shape[dim])
            else:
                continue
            low, high, top = out[inp]
            if top is None:
                out[inp] = (n, n, key)
            else:
                out[inp] = (min(low, n), max(high, n), key if n > high else top)
    return out


def _left_out(plan: Any) -> tuple[bool, bool]:
    """Whether the plan leaves out (or cuts) samples below / above its planned range: a real
    sample of the dataset can lie there (NOTE [ Length filters ] in
    :mod:`bucketloader.plan.limits`). A sampler counts them (``spec.filtered``); a stream says
    what it would do (its ``limits``, ``filter``)."""
    filtered = getattr(getattr(plan, "spec", None), "filtered", None)
    if isinstance(filtered, Mapping):
        counts = {k: int(v) for k, v in filtered.items()}
        short = any(v for k, v in counts.items() if k not in ("too_long", "truncated", "oversize"))
        return short, any(v for k, v in counts.items() if k != "too_short")
    limits = getattr(plan, "limits", None)
    custom = getattr(plan, "filter", None) is not None
    if limits is None or getattr(limits, "overflow", "error") == "error":
        return custom, custom
    low = any(x is not None for x in getattr(limits, "min_length", ()))
    high = any(x is not None for x in getattr(limits, "max_length", ()))
    return low or custom, high or custom


def _structure(sample: Any, group_key: Any) -> Any:
    """What makes two samples collate into differently structured batches."""
    kind = kind_of(sample)
    if kind == "bare":
        return (kind, _leaf(sample))
    keys = [k for k in keys_of(sample, kind) if k != group_key]
    return (kind, tuple((repr(k), _leaf(sample[k])) for k in keys))


def _leaf(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.ndim)
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.ndim)
    return type(value).__name__


# -- resizing -----------------------------------------------------------------------------------
def _resize_sample(
    sample: Any, specs: Mapping[Any, tuple[tuple[int, ...], tuple[int, ...]]], lengths: tuple
) -> Any:
    kind = kind_of(sample)
    if kind == "bare":
        ((inputs, dims),) = specs.values()
        return _resize(sample, dims, [lengths[i] for i in inputs])
    keys = set(keys_of(sample, kind))  # a field the sample lacks is the collator's to report
    new = {
        k: _resize(sample[k], dims, [lengths[i] for i in inputs])
        for k, (inputs, dims) in specs.items()
        if k in keys
    }
    if kind == "dict":
        return {k: new.get(k, v) for k, v in sample.items()}
    seq = [new.get(i, v) for i, v in enumerate(sample)]
    if not isinstance(sample, tuple):
        return seq
    return type(sample)(*seq) if hasattr(sample, "_fields") else type(sample)(seq)  # namedtuple


def _resize(value: Any, dims: tuple[int, ...], sizes: list[int]) -> Any:
    """``value`` with dim ``dims[j]`` resized to ``sizes[j]`` by repeating its own values."""
    if isinstance(value, (list, tuple)):  # a flat list of numbers: one dim
        n = len(value)
        out = [value[i % n] for i in range(sizes[0])] if n else [0] * sizes[0]
        return type(value)(out) if isinstance(value, tuple) else out
    is_torch = isinstance(value, torch.Tensor)
    if not is_torch and not isinstance(value, np.ndarray):
        raise TypeError(
            f"a variable-length field must be a tensor, an array or a flat list of numbers, got "
            f"{type(value).__name__}"
        )
    for d, size in zip(dims, sizes, strict=True):
        d = d + value.ndim if d < 0 else d
        n = value.shape[d]
        if n == size:
            continue
        if n == 0:
            shape = list(value.shape)
            shape[d] = size
            value = value.new_zeros(shape) if is_torch else np.zeros(shape, value.dtype)
            continue
        if is_torch:
            idx = torch.arange(size, device=value.device) % n
            value = value.index_select(d, idx)
        else:
            value = np.take(value, np.arange(size) % n, axis=d)
    return value


def _check_batch_shape(batch: Any, shape: tuple[int, ...], names: tuple[str, ...]) -> None:
    """The collated batch must have the planned shape (read from its masks, where it has them).
    A 4-D attention mask ``(B, 1, L, L)`` (``hf.for_packing(attention="mask")``'s document
    mask) is not the batch's shape: ``input_ids`` is read there (before, precompile refused
    every such batch as disagreeing with the plan)."""
    if not isinstance(batch, Mapping):
        return
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.ndim != len(shape):
        mask = batch.get("input_ids")
    got: Any = None
    if isinstance(mask, torch.Tensor) and len(names) == 1:
        got = tuple(mask.shape)
        want: Any = shape
    elif isinstance(mask, Mapping):
        got = {k: tuple(v.shape) for k, v in mask.items() if isinstance(v, torch.Tensor)}
        want = {n: (shape[0], shape[1 + j]) for j, n in enumerate(names)}
    if got is not None and got != want:
        raise ValueError(
            f"the collator made a batch of shape {got} from samples resized to the planned shape "
            f"{shape}; the collator and the plan disagree (build the collator with "
            "plan.collator(...)), or give precompile a batch source with make_batch(shape)"
        )
