"""Per-dataset bucketing helpers: group ids from a ConcatDataset, and samples that carry them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import ConcatDataset, Dataset

from bucketloader._validation import as_lengths


def concat_groups(
    dataset: Any, lengths_per_dataset: Sequence[Any]
) -> tuple[ConcatDataset, np.ndarray, np.ndarray]:
    """``(concat dataset, concatenated lengths, dataset index per sample)``, checked."""
    concat = dataset if isinstance(dataset, ConcatDataset) else ConcatDataset(list(dataset))
    parts = list(lengths_per_dataset)
    if len(parts) != len(concat.datasets):
        raise ValueError(
            f"lengths_per_dataset must give lengths for each of the {len(concat.datasets)} "
            f"datasets, got {len(parts)}"
        )
    arrays = []
    for i, (ds, lens) in enumerate(zip(concat.datasets, parts, strict=True)):
        arr = as_lengths(lens, name=f"lengths_per_dataset[{i}]", ndim=(1, 2))
        size = len(ds)  # type: ignore[arg-type]
        if arr.shape[0] != size:
            raise ValueError(
                f"lengths_per_dataset[{i}] has {arr.shape[0]} lengths but dataset {i} has "
                f"{size} samples; give one length per sample"
            )
        arrays.append(arr)
    if len({a.shape[1:] for a in arrays}) > 1:
        raise ValueError("every dataset's lengths must have the same shape per sample")
    groups = np.repeat(np.arange(len(arrays)), [a.shape[0] for a in arrays])
    return concat, np.concatenate(arrays), groups


class GroupedDataset(Dataset):
    """Wraps a dataset so every (mapping) sample carries its group id under ``key``.

    This is how :class:`~bucketloader.collate.PadCollator` learns a batch's group with
    per-dataset bucketing: ``sample[key]`` (an int).

    Example:
        >>> ds = GroupedDataset([{"x": 1}, {"x": 2}], [0, 1], key="dataset")
        >>> ds[1]
        {'x': 2, 'dataset': 1}
    """

    def __init__(self, dataset: Any, groups: Any, *, key: str = "dataset") -> None:
        self.dataset = dataset
        self.groups = np.asarray(groups)
        self.key = key
        if len(dataset) != self.groups.size:
            raise ValueError(
                f"groups must hold one id per sample ({len(dataset)}), got {self.groups.size}"
            )

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        if not isinstance(sample, Mapping):
            raise TypeError(
                f"per-dataset bucketing needs dict samples to add {self.key!r} to, got "
                f"{type(sample).__name__} at index {index}; return a dict from your datasets"
            )
        return {**sample, self.key: int(self.groups[index])}
