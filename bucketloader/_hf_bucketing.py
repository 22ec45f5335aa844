"""One call from Hugging Face datasets to a ready sampler + collator (text and audio).

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
import torch
from torch.utils.data import DataLoader, Dataset

from bucketloader._collate_fields import RESERVED

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


def pad_token_id(pad_token_id: Any, tokenizer: Any) -> int:
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
    import pyarrow as pa

    from bucketloader._hf_arrow import table_and_indices

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
    from bucketloader.collate import Field, PadCollator
    from bucketloader.sampler import BucketSampler

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
        sampler = BucketSampler.from_concat_dataset(
            torch.utils.data.ConcatDataset(views),
            [p[:, 0] if len(inputs) == 1 else p for p in per],
            **options,
        )
        dataset, group_key = sampler.dataset, sampler.group_key
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
