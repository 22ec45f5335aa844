"""PackCollator: lay a batch of documents out in rows, at exactly one of the planned shapes.

NOTE [ How the collator finds the rows ]
A batch sampler can only hand the DataLoader a list of indices, and the collator only sees the
samples, so the row layout travels in the *order*: the sampler lists each row's documents
contiguously, row after row. The collator re-runs *next-fit* on the documents' lengths in that
order (a new row starts when the next document does not fit the current one). Next-fit is
optimal for splitting a fixed sequence into rows: it never needs more rows than any split that
keeps the order, and the sampler's own rows are such a split, so next-fit needs at most the
planned ``B`` rows and every batch keeps its planned shape. (It may cut a few rows at other
points than the planner did; the padding of the batch is the same, ``B * L`` minus its tokens.)
The row length is the smallest planned one that holds the longest document (every row of a
longer row length starts from a document only it can hold, NOTE [ Row lengths ] in
:mod:`bucketloader.pack.spec`). A batch that does not fit its shape is an error naming the
numbers: the dataset's samples disagree with the lengths the sampler was given. Streams
(:class:`~bucketloader.pack.PackIterable`) yield their rows in the same way.

NOTE [ Packed batch layout ]
For a batch of shape ``(B, L)`` holding documents ``0..n-1`` (in the order given):

* ``input_ids`` ``(B, L)`` int64: rows filled from the left, ``pad_token_id`` after the last
  document of a row, and on the all-padding rows that complete a last batch.
* ``labels`` ``(B, L)`` int64: the token ids (or the samples' own ``labels``, e.g. a prompt masked
  with -100), with -100 on padding and on **each document's first token**. Labels are unshifted
  (the Hugging Face convention: the model predicts ``labels[t]`` from positions ``< t``), so the
  -100 at a document's start is exactly the target that the previous document's last token would
  otherwise predict: no token learns across a boundary.
* ``position_ids`` ``(B, L)`` int64: ``0, 1, ...`` restarting at every document; each padding run
  counts as a segment of its own (``0, 1, ...`` again), which is what Hugging Face models need
  to detect packing from ``position_ids`` alone.
* ``document_ids`` ``(B, L)`` int32: the document (its position ``0..n-1`` in the batch) each
  token belongs to, ``-1`` on padding. Same index, same document: the block-diagonal masks of
  :mod:`bucketloader.pack.masks` are built from it. Padding attends only to the padding before it
  in its row, so no attention row is empty.
* ``cu_seqlens`` ``(S + 1,)`` int32 with ``S = max_documents + B`` fixed per shape
  (:meth:`PackTable.num_segments <bucketloader.pack.PackTable.num_segments>`): cumulative
  offsets, over the flattened ``B * L`` tokens, of every segment (each document and each padding
  run), so the whole ``(B * L, heads, dim)`` tensor is the varlen kernels' input with no
  gather. Entries after the last segment repeat ``B * L``: empty sequences, which varlen
  flash-attention kernels accept (they compute nothing for them). ``max_seqlen`` (int) is the
  longest segment; ``L`` is a valid static bound if a changing int would recompile.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bucketloader._validation import check_int
from bucketloader.pack.spec import PackTable

__all__ = ["IGNORE_INDEX", "PackCollator"]

#: The label of tokens that take no loss (``torch.nn.CrossEntropyLoss``'s default ignore_index).
IGNORE_INDEX = -100


class PackCollator:
    """Collate a packed batch (documents, row after row) into fixed-shape tensors.

    Build it with ``sampler.collator()`` (``PackCollator(sampler.table)``) so the two cannot
    disagree. Returns ``input_ids``, ``labels``, ``position_ids``, ``document_ids``,
    ``cu_seqlens`` and ``max_seqlen`` (NOTE [ Packed batch layout ]); the rows are found again
    from the documents' lengths (NOTE [ How the collator finds the rows ]).

    Args:
        table: the sampler's :class:`~bucketloader.pack.PackTable` (``sampler.table``).
        key: the token field of dict samples (bare samples, a list / array / tensor of ids, are
            the tokens themselves).
        labels_key: the field of dict samples holding their own labels (same length as the
            tokens), used when present; otherwise the labels are the token ids.
        pad_token_id: the id written on padding.

    Example:
        >>> table = PackTable(row_lengths=(6,), batch_sizes=(2,), max_documents=(4,))
        >>> out = PackCollator(table)([[5, 6, 7], [8, 9], [4, 4, 4, 4]])
        >>> out["input_ids"].tolist()
        [[5, 6, 7, 8, 9, 0], [4, 4, 4, 4, 0, 0]]
        >>> out["labels"].tolist()
        [[-100, 6, 7, -100, 9, -100], [-100, 4, 4, 4, -100, -100]]
        >>> out["position_ids"].tolist(), out["document_ids"].tolist()
        ([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]], [[0, 0, 0, 1, 1, -1], [2, 2, 2, 2, -1, -1]])
        >>> out["cu_seqlens"].tolist(), out["max_seqlen"]
        ([0, 3, 5, 6, 10, 12, 12], 4)
    """

    def __init__(
        self,
        table: PackTable,
        *,
        key: Any = "input_ids",
        labels_key: Any = "labels",
        pad_token_id: int = 0,
    ) -> None:
        if not isinstance(table, PackTable):
            raise TypeError(
                f"table must be a PackTable (sampler.table), got {type(table).__name__}; build "
                "the collator with sampler.collator()"
            )
        self.table = table
        self.key = key
        self.labels_key = labels_key
        self.pad_token_id = check_int("pad_token_id", pad_token_id)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every ``input_ids`` shape this collator can return (the sampler's promise)."""
        return sorted(self.table.shapes)

    # --- reading the samples ---------------------------------------------------------------
    def _tokens(self, samples: Any) -> tuple[list[Any], list[Any] | None]:
        first = samples[0]
        if isinstance(first, Mapping):
            try:
                ids = [s[self.key] for s in samples]
            except KeyError:
                raise KeyError(
                    f"samples are dicts without the token field key={self.key!r} (a sample has "
                    f"{list(first)[:8]}); pass PackCollator(key=...)"
                ) from None
            if self.labels_key is not None and self.labels_key in first:
                return ids, [s[self.labels_key] for s in samples]
            return ids, None
        if isinstance(first, (list, tuple, np.ndarray, torch.Tensor)):
            return list(samples), None
        raise TypeError(
            f"samples must be dicts with a {self.key!r} field or token sequences (lists, arrays, "
            f"tensors), got {type(first).__name__}"
        )

    # --- collation -------------------------------------------------------------------------
    def __call__(self, samples: Any) -> dict[str, Any]:
        """Lay ``samples`` (one batch, row after row) out at its planned shape."""
        if not isinstance(samples, (list, tuple)) or not samples:
            raise ValueError(
                f"PackCollator needs a non-empty list of samples, got {type(samples).__name__} "
                f"of length {len(samples) if hasattr(samples, '__len__') else '?'}"
            )
        ids, labels = self._tokens(samples)
        lens = [len(x) for x in ids]
        if labels is not None:
            bad = [i for i, lab in enumerate(labels) if len(lab) != lens[i]]
            if bad:
                i = bad[0]
                raise ValueError(
                    f"sample {i} of the batch has {lens[i]} tokens but {len(labels[i])} labels "
                    f"({self.labels_key!r}); labels must align with the tokens"
                )
        table = self.table
        longest = max(lens)
        shape = table.target(longest)
        rows, width = table.batch_sizes[shape], table.row_lengths[shape]
        if longest > width:  # overflow="truncate": cut to the longest row length
            ids = [x[:width] for x in ids]
            labels = None if labels is None else [x[:width] for x in labels]
            lens = [min(n, width) for n in lens]
        n = len(lens)
        if n > table.max_documents[shape]:
            raise ValueError(
                f"batch of {n} documents exceeds the {table.max_documents[shape]} a batch of "
                f"shape {(rows, width)} can hold for the lengths the sampler was planned on; "
                "the dataset's samples disagree with the sampler's lengths"
            )
        row_of, offset = _next_fit(lens, width)
        if row_of[-1] >= rows:
            raise ValueError(
                f"the batch's {n} documents ({sum(lens)} tokens) need {row_of[-1] + 1} rows of "
                f"{width} in the order given, more than the planned {rows}; the dataset's "
                "samples disagree with the lengths the sampler was planned on (or the batch "
                "did not come from this collator's sampler)"
            )
        return self._layout(ids, labels, lens, row_of, offset, rows, width, shape)

    def _layout(
        self,
        ids: list[Any],
        labels: list[Any] | None,
        lens: list[int],
        row_of: list[int],
        offset: list[int],
        rows: int,
        width: int,
        shape: int,
    ) -> dict[str, Any]:
        size = rows * width
        n = len(lens)
        lens_a = np.asarray(lens, dtype=np.int64)
        row_a = np.asarray(row_of, dtype=np.int64)
        starts = row_a * width + np.asarray(offset, dtype=np.int64)  # flat start of each doc
        fill = np.bincount(row_a, weights=lens_a, minlength=rows).astype(np.int64)
        real = np.arange(width)[None, :] < fill[:, None]
        out_ids = np.full((rows, width), self.pad_token_id, dtype=np.int64)
        out_ids[real] = _flat(ids, int(lens_a.sum()))
        out_lab = np.full((rows, width), IGNORE_INDEX, dtype=np.int64)
        out_lab[real] = out_ids[real] if labels is None else _flat(labels, int(lens_a.sum()))
        out_lab.reshape(-1)[starts] = IGNORE_INDEX
        doc = np.full((rows, width), -1, dtype=np.int32)
        doc[real] = np.repeat(np.arange(n, dtype=np.int32), lens_a)
        # segments: every document, and the padding run after each row's documents
        is_start = np.zeros(size, dtype=np.bool_)
        is_start[starts] = True
        is_start[::width] = True  # an all-padding row is one padding run
        pad_rows = np.flatnonzero(fill < width)
        is_start[pad_rows * width + fill[pad_rows]] = True
        flat_pos = np.arange(size, dtype=np.int64)
        seg = np.flatnonzero(is_start)
        positions = flat_pos - np.repeat(seg, np.diff(np.append(seg, size)))
        cu = np.full(self.table.num_segments(shape) + 1, size, dtype=np.int32)
        cu[: seg.size] = seg
        return {
            "input_ids": torch.from_numpy(out_ids),
            "labels": torch.from_numpy(out_lab),
            "position_ids": torch.from_numpy(positions.reshape(rows, width)),
            "document_ids": torch.from_numpy(doc),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(np.diff(np.append(seg, size)).max()),
        }

    def __repr__(self) -> str:
        return (
            f"PackCollator(shapes={self.shapes}, key={self.key!r}, labels_key="
            f"{self.labels_key!r}, pad_token_id={self.pad_token_id})"
        )


def _next_fit(lens: list[int], width: int) -> tuple[list[int], list[int]]:
    """Row and offset of each document, a new row whenever the next one does not fit."""
    row_of, offset = [], []
    row = fill = 0
    for n in lens:
        if fill + n > width:
            row, fill = row + 1, 0
        row_of.append(row)
        offset.append(fill)
        fill += n
    return row_of, offset


def _flat(values: list[Any], total: int) -> np.ndarray:
    """All token sequences of a batch as one int64 array (lists, arrays or tensors)."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([v.reshape(-1) for v in values]).to(torch.int64).numpy()
    if isinstance(first, np.ndarray):
        return np.concatenate(values).astype(np.int64, copy=False)
    try:
        return np.fromiter(itertools.chain.from_iterable(values), dtype=np.int64, count=total)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"token sequences must be flat lists of ints, arrays or tensors ({exc})"
        ) from None
