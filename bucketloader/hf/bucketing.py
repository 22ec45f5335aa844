"""One call from a Hugging Face dataset to a ready sampler + collator (text and audio).

NOTE [ Which columns are padded, and with what ]
The bucketed columns (``column=``) are the sampler's inputs. Every other list column whose per-row
length equals a bucketed column's on every row (``attention_mask``, ``token_type_ids``, token-level
``labels``...) is padded along with it; the test is done on the Arrow list lengths, so it costs
nothing. A list column that matches no bucketed column is an error (it could not be stacked).
Pad values: token-id inputs take the pad token id, any ``label*`` column ``-100`` (ignored by the
losses of ``transformers`` models, also on the masked rows ``last_batch="pad"`` adds), everything
else ``0``. The model-facing collator drops the collator's bookkeeping (``lengths``,
``sample_mask``, the group key) and renames ``label``/``label_ids`` to ``labels``, as
``transformers.DataCollatorWithPadding`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, Dataset

from bucketloader.collate import Field, PadCollator
from bucketloader.collate.fields import RESERVED
from bucketloader.hf.lengths import lengths, resolve_column, table_and_indices
from bucketloader.sampler import BucketSampler, GroupedDataset

__all__ = ["Bucketing", "ModelInputs", "for_audio", "for_text"]

LABEL_PAD = -100


class EpochDataLoader(DataLoader):
    """A ``DataLoader`` whose ``set_epoch`` reaches its batch sampler (``transformers.Trainer``
    calls ``train_dataloader.set_epoch(epoch)`` every epoch)."""

    def set_epoch(self, epoch: int) -> None:
        """Forward ``epoch`` to the batch sampler."""
        self.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]


class ModelInputs:
    """Collate with a ``PadCollator`` and keep what a ``transformers`` model's ``forward`` takes.

    Drops ``lengths``, ``sample_mask`` and the group key, renames ``label``/``label_ids`` to
    ``labels``; with ``keep``, drops every other key not in it. Picklable (DataLoader workers).
    """

    def __init__(self, collator: Any, *, keep: Sequence[str] | None = None) -> None:
        self.collator = collator
        self.keep = None if keep is None else frozenset(keep)

    def __call__(self, samples: list[Any]) -> dict[str, Any]:
        out = self.collator(samples)
        for key in (*RESERVED, getattr(self.collator, "group_key", None)):
            out.pop(key, None)
        for old in ("label", "label_ids"):
            if old in out and "labels" not in out:
                out["labels"] = out.pop(old)
        if self.keep is not None:
            out = {k: v for k, v in out.items() if k in self.keep}
        return out


class Bucketing(NamedTuple):
    """A sampler, its collator and the dataset they index; unpacks as a tuple.

    Attributes:
        sampler: the :class:`~bucketloader.sampler.BucketSampler`.
        collator: a :class:`ModelInputs` around the sampler's ``PadCollator``.
        dataset: the dataset to load from (several datasets: a ``GroupedDataset`` over them).
    """

    sampler: Any
    collator: Any
    dataset: Any

    def dataloader(self, **kwargs: Any) -> DataLoader:
        """``DataLoader(dataset, batch_sampler=sampler, collate_fn=collator, **kwargs)``."""
        return EpochDataLoader(
            self.dataset, batch_sampler=self.sampler, collate_fn=self.collator, **kwargs
        )


class AudioRows(Dataset):
    """Rows of an HF dataset with a decoded-audio struct column moved to a flat float tensor.

    ``{"audio": {"array": [...], "sampling_rate": sr}, ...}`` becomes
    ``{key: tensor(float32), "sampling_rate": sr, ...}`` (torch format, so no Python lists).
    """

    def __init__(self, dataset: Any, column: str, key: str) -> None:
        self.dataset = dataset.with_format("torch")
        self.column, self.key = column, key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = dict(self.dataset[index])
        audio = row.pop(self.column)
        out = {self.key: torch.as_tensor(audio["array"], dtype=torch.float32)}
        if "sampling_rate" in audio:
            out["sampling_rate"] = audio["sampling_rate"]
        return {**out, **row}


def pad_token_id_of(pad_token_id: Any, tokenizer: Any) -> int:
    """The pad id from the argument or a tokenizer-like object's ``pad_token_id``."""
    if pad_token_id is None and tokenizer is not None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if pad_token_id is None:
            raise ValueError(
                f"tokenizer {type(tokenizer).__name__} has pad_token_id=None; set one (e.g. "
                "tokenizer.pad_token = tokenizer.eos_token) or pass pad_token_id="
            )
    if pad_token_id is None:
        raise ValueError("pass pad_token_id=<int> or tokenizer=<an object with .pad_token_id>")
    if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, (int, np.integer)):
        raise TypeError(f"pad_token_id must be an int, got pad_token_id={pad_token_id!r}")
    return int(pad_token_id)


def follow_fields(datasets_: Sequence[Any], inputs: Sequence[str], measure: Any) -> dict[str, str]:
    """Map every list column to the bucketed input it follows (see the module NOTE)."""
    table, _ = table_and_indices(datasets_[0])
    follows = {name: name for name in inputs}
    candidates = [
        c
        for c in table.column_names
        if c not in follows
        and (
            pa.types.is_list(table.schema.field(c).type)
            or pa.types.is_large_list(table.schema.field(c).type)
        )
    ]
    for c in candidates:
        match = None
        for name in inputs:
            if all(np.array_equal(measure(d, c), measure(d, name)) for d in datasets_):
                match = name
                break
        if match is None:
            raise ValueError(
                f"list column {c!r} has row lengths that match none of the bucketed columns "
                f"{list(inputs)}, so it cannot be padded with them; drop it "
                f"(dataset.remove_columns({c!r})) or bucket it too (column=[..., {c!r}])"
            )
        follows[c] = match
    return follows


def pad_values(keys: Sequence[str], inputs: Sequence[str], pad_id: Any) -> dict[str, Any]:
    """Pad value per key: ``label*`` → -100, token-id inputs → ``pad_id``, the rest 0."""
    out: dict[str, Any] = {}
    for k in keys:
        if k.startswith("label"):
            out[k] = LABEL_PAD
        elif k in inputs or k.endswith("input_ids"):
            out[k] = pad_id
        else:
            out[k] = 0
    return out


def build(
    datasets_: list[Any],
    inputs: list[str],
    follows: Mapping[str, str],
    pads: Mapping[str, Any],
    lengths_of: Any,
    *,
    view: Any = None,
    options: dict[str, Any],
) -> Bucketing:
    """Sampler (one input per bucketed column; groups for several datasets) + collator."""
    views = [view(d) if view is not None else d for d in datasets_]
    per = [np.stack([lengths_of(d, c) for c in inputs], axis=1) for d in datasets_]
    if len(datasets_) == 1:
        lens = per[0][:, 0] if len(inputs) == 1 else per[0]
        sampler = BucketSampler(
            {inputs[0]: lens} if len(inputs) == 1 else dict(zip(inputs, lens.T, strict=True)),
            **options,
        )
        dataset, group_key = views[0], None
    else:
        dataset = GroupedDataset(views)
        group_key = dataset.key
        lens = np.concatenate(per)
        sampler = BucketSampler(
            {inputs[0]: lens[:, 0]} if len(inputs) == 1 else dict(zip(inputs, lens.T, strict=True)),
            groups=dataset.groups,
            **options,
        )
    names = tuple(sampler.shape_table.input_names)
    by_name = dict(zip(inputs, names, strict=True))
    fields = {k: Field(input=by_name[v]) for k, v in follows.items()}
    collator = PadCollator(
        sampler.shape_table,
        fields=fields,
        pad_value=dict(pads),
        group_key=group_key,
        mask_dtype=torch.long,
    )
    return Bucketing(sampler, ModelInputs(collator), dataset)


def for_text(
    dataset: Any,
    column: str | Sequence[str] = "input_ids",
    *,
    pad_token_id: int | None = None,
    tokenizer: Any = None,
    **options: Any,
) -> Any:
    """A ready :class:`~bucketloader.sampler.BucketSampler` + collator for tokenised text.

    Args:
        dataset: a tokenised ``datasets.Dataset``, or a list of them for per-dataset bucketing
            (boundaries fitted per dataset, batches never mix datasets).
        column: the bucketed token column, or several for per-input bucketing (e.g.
            ``["input_ids", "labels"]`` for seq2seq: each gets its own boundaries).
        pad_token_id: the pad id of the token columns; or
        tokenizer: any object with ``pad_token_id`` (a ``transformers`` tokenizer).
        **options: ``BucketSampler`` options (``num_buckets``, ``strategy``, ``batch_size`` or
            ``max_tokens``, ``pad_to_multiple_of`` (boundaries on multiples of 8 or 64 for
            tensor cores: the optimum under that constraint), ``last_batch``, ``shuffle``,
            ``seed``, ``num_replicas``, ``rank``).

    Returns:
        A :class:`Bucketing` ``(sampler, collator, dataset)``; ``.dataloader(**kwargs)`` builds
        the ``DataLoader``. Token-id columns pad with the pad id, ``label*`` columns with -100,
        the rest with 0; ``attention_mask`` is built (or padded if present) as 0/1 ``long``;
        columns of the same row lengths pad along (see the module NOTE).

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in (3, 9, 4, 8)],
        ...                                  "label": [0, 1, 0, 1]})
        >>> sampler, collate, data = for_text(ds, pad_token_id=0, num_buckets=2, batch_size=2)
        >>> sampler.shapes
        [(2, 4), (2, 9)]
        >>> batch = collate([data[0], data[2]])
        >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["labels"].tolist()
        ([[5, 5, 5, 0], [5, 5, 5, 5]], [[1, 1, 1, 0], [1, 1, 1, 1]], [0, 0])
    """
    pad = pad_token_id_of(pad_token_id, tokenizer)
    many = _as_list(dataset)
    inputs = [column] if isinstance(column, str) else list(column)
    follows = follow_fields(many, inputs, lengths)
    pads = pad_values(many[0].column_names, inputs, pad)
    return build(many, inputs, follows, pads, lengths, options=options)


def for_audio(
    dataset: Any,
    column: str = "audio",
    *,
    key: str = "input_values",
    pad_value: float = 0.0,
    **options: Any,
) -> Any:
    """A ready sampler + collator for audio arrays (raw waveforms or feature-extracted values).

    Args:
        dataset: a ``datasets.Dataset`` (or a list of them, bucketed per dataset) with either a
            decoded-audio struct column ``{"array": [...], "sampling_rate": ...}`` or a list
            column of samples (e.g. ``input_values`` from a feature extractor).
        column: that column.
        key: the output key of a struct column's array (the rows are read in torch format).
        pad_value: pad value of the waveform.
        **options: ``BucketSampler`` options (``pad_to_multiple_of`` included); ``max_tokens``
            counts audio samples per batch.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"audio": [
        ...     {"array": [0.5] * n, "sampling_rate": 16000} for n in (3, 9, 4, 8)]})
        >>> sampler, collate, data = for_audio(ds, num_buckets=2, max_tokens=18)
        >>> sampler.shapes
        [(2, 9), (4, 4)]
        >>> collate([data[1], data[3]])["input_values"].shape
        torch.Size([2, 9])
    """
    many = _as_list(dataset)
    table, _ = table_and_indices(many[0])
    _, path = resolve_column(table, column)
    if path == column:  # a plain list column: samples as they are
        follows = follow_fields(many, [column], lengths)
        pads = {**dict.fromkeys(many[0].column_names, 0), column: pad_value}
        return build(
            many,
            [column],
            follows,
            pads,
            lengths,
            view=lambda d: d.with_format("torch"),
            options=options,
        )
    head = path.split(".")[0]
    rest = [c for c in many[0].column_names if c != head]
    pads = {**dict.fromkeys(rest, 0), "sampling_rate": 0, key: pad_value}
    pads = {k: (LABEL_PAD if k.startswith("label") else v) for k, v in pads.items()}
    return build(
        many,
        [key],
        {key: key},
        pads,
        lambda d, _c: lengths(d, path),
        view=lambda d: AudioRows(d, head, key),
        options=options,
    )


def _as_list(dataset: Any) -> list[Any]:
    many = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
    if not many:
        raise ValueError("dataset must be a Dataset or a non-empty list of them, got []")
    return many
