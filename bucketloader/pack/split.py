"""SplitDataset: documents longer than a row cut into row-sized pieces, for map-style packing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from bucketloader._types import LengthsLike
from bucketloader._validation import as_lengths, check_int, checks_options

__all__ = ["SplitDataset", "cut"]


@checks_options
class SplitDataset(Dataset):
    """A map-style view in which every document longer than ``max_length`` is several samples.

    The ``"split"`` overflow policy for :class:`~bucketloader.pack.PackSampler`: a batch sampler
    can only name dataset indices, so the pieces get indices of their own here. Piece ``k`` of a
    document holds its tokens ``k * max_length`` up to ``(k + 1) * max_length``; each piece is
    packed as a document of its own (positions restart, attention stays within it, as Megatron's
    concat-and-chunk would cut it but without sharing a row segment with another document), so
    its first token takes no loss, as every document's first token: one label fewer per cut.

    Args:
        dataset: the map-style dataset (samples: token sequences, or dicts whose fields of the
            document's length are all cut alike: ``input_ids``, ``labels``, ...).
        lengths: tokens per document ``(N,)`` (what the sampler would have been given).
        max_length: the longest piece (the longest row length).

    Attributes:
        lengths: tokens per piece ``(M,)``: pass these to the sampler.
        document: the document each piece comes from ``(M,)``.
        start: the first token of each piece within its document ``(M,)``.

    Example:
        >>> data = [[1] * 3, [2] * 10]
        >>> split = SplitDataset(data, [3, 10], max_length=4)
        >>> split.lengths.tolist(), split.document.tolist(), split[3]
        ([3, 4, 4, 2], [0, 1, 1, 1], [2, 2])
    """

    def __init__(self, dataset: Any, lengths: LengthsLike, *, max_length: int) -> None:
        self.dataset = dataset
        doc_len = as_lengths(lengths)
        self.max_length = check_int("max_length", max_length, minimum=1)
        if hasattr(dataset, "__len__") and len(dataset) != doc_len.size:
            raise ValueError(
                f"lengths has {doc_len.size} entries but the dataset has {len(dataset)} samples"
            )
        pieces = np.maximum(1, -(-doc_len // self.max_length))
        self.document = np.repeat(np.arange(doc_len.size), pieces)
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        self.start = (np.arange(self.document.size) - first) * self.max_length
        self.lengths = np.minimum(doc_len[self.document] - self.start, self.max_length)
        self._doc_len = doc_len
        for arr in (self.document, self.start, self.lengths):
            arr.setflags(write=False)

    def __len__(self) -> int:
        return int(self.document.size)

    def __getitem__(self, index: int) -> Any:
        i = int(self.document[index])
        sample = self.dataset[i]
        n = int(self._doc_len[i])
        if n <= self.max_length:
            return sample
        _check_cuttable(sample, n, i)
        a = int(self.start[index])
        return cut(sample, n, a, a + int(self.lengths[index]))


def _size(value: Any) -> int | None:
    """``len(value)`` of a sequence field (not a string), else ``None``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__getitem__"):
        return None
    try:
        return len(value)
    except TypeError:
        return None


def _check_cuttable(sample: Any, length: int, i: int) -> None:
    """A document is cut by its given length: where no field of the sample has it, the pieces
    lost tokens (a bare sample longer than given) or repeated none of a dict's fields, silently
    (s19-user). One error naming the document and the lengths instead."""
    if isinstance(sample, Mapping):
        sizes = {k: _size(v) for k, v in sample.items()}
        if length in sizes.values():
            return
        found = f"no field of {length} tokens (its fields: {sizes})"
    else:  # (a bare sample is sliced whatever it is: bytes of a byte-level model too)
        try:
            size: int | None = len(sample)
        except TypeError:
            size = None
        if size == length:
            return
        found = f"{size} tokens" if size is not None else f"no length (a {type(sample).__name__})"
    raise ValueError(
        f"document {i} of the dataset has {found}, but lengths[{i}] is {length}; SplitDataset "
        "cuts every document by its given length, so pass each document's true token count"
    )


def cut(sample: Any, length: int, start: int, stop: int) -> Any:
    """``sample[start:stop]``; a dict has every sequence entry of the sample's length cut (so
    ``input_ids``, ``attention_mask`` and ``labels`` stay aligned).

    Example:
        >>> sample = {"input_ids": [1, 2, 3, 4], "attention_mask": [1, 1, 1, 1], "label": 7,
        ...           "text": "abcd"}  # (a string is not cut, even of the sample's length)
        >>> cut(sample, 4, 1, 3)
        {'input_ids': [2, 3], 'attention_mask': [1, 1], 'label': 7, 'text': 'abcd'}
    """
    if isinstance(sample, Mapping):
        out = dict(sample)
        for k, v in sample.items():
            if isinstance(v, (str, bytes)) or not hasattr(v, "__getitem__"):
                continue
            try:
                n = len(v)
            except TypeError:
                continue
            if n == length:
                out[k] = v[start:stop]
        return out
    return sample[start:stop]
