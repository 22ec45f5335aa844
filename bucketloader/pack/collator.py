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
(:class:`~bucketloader.stream.PackIterable`) yield their rows in the same way.

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

import array
import bisect
import functools
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
        """Lay ``samples`` (one batch, row after row) out at its planned shape.

        A batch that carries its ``planned_shape`` (a :class:`~bucketloader.plan.PlannedBatch`
        from a stream split over ranks) is laid out at that shape; an empty one is a
        padding-only step: ``B`` all-padding rows (NOTE [ A packing stream split over ranks ] in
        :mod:`bucketloader.stream._rows`).
        """
        planned = getattr(samples, "planned_shape", None)
        if not isinstance(samples, (list, tuple)) or not (samples or planned is not None):
            raise ValueError(
                f"PackCollator needs a non-empty list of samples, got {type(samples).__name__} "
                f"of length {len(samples) if hasattr(samples, '__len__') else '?'}"
            )
        table = self.table
        if planned is not None:
            planned = tuple(planned)
            if planned not in table.shapes:
                raise ValueError(
                    f"the batch's planned_shape {planned} is not one of this collator's shapes "
                    f"{sorted(table.shapes)}; build the collator with stream.collator()"
                )
            shape = table.shapes.index(planned)
            if not samples:
                rows, width = planned
                return self._layout([], None, [], [], rows, width, shape)
        ids, labels = self._tokens(samples)
        first = ids[0]
        if isinstance(first, torch.Tensor) and first.ndim == 1:  # Tensor.__len__ is slow
            lens = list(map(torch.Tensor.numel, ids))
        elif isinstance(first, (torch.Tensor, np.ndarray)) and first.ndim != 1:
            lens = [int(np.prod(x.shape)) for x in ids]
        else:
            lens = list(map(len, ids))
        if labels is not None:
            bad = [i for i, lab in enumerate(labels) if len(lab) != lens[i]]
            if bad:
                i = bad[0]
                raise ValueError(
                    f"sample {i} of the batch has {lens[i]} tokens but {len(labels[i])} labels "
                    f"({self.labels_key!r}); labels must align with the tokens"
                )
        longest = max(lens)
        if planned is None:
            shape = table.target(longest)
        elif longest > table.row_lengths[shape] and not table.truncate:
            raise ValueError(
                f"a document of {longest} tokens is longer than the batch's planned row length "
                f"{table.row_lengths[shape]}; the stream's samples disagree with their length_fn"
            )
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
        spans = _next_fit(lens, width)
        if len(spans) > rows:
            raise ValueError(
                f"the batch's {n} documents ({sum(lens)} tokens) need {len(spans)} rows of "
                f"{width} in the order given, more than the planned {rows}; the dataset's "
                "samples disagree with the lengths the sampler was planned on (or the batch "
                "did not come from this collator's sampler)"
            )
        return self._layout(ids, labels, lens, spans, rows, width, shape)

    def _layout(
        self,
        ids: list[Any],
        labels: list[Any] | None,
        lens: list[int],
        spans: list[tuple[int, int, int]],
        rows: int,
        width: int,
        shape: int,
    ) -> dict[str, Any]:
        """Segments in order: each document, and the padding run that ends a row which is not
        full (every all-padding row is one run)."""
        size = rows * width
        spans = spans + [(0, 0, 0)] * (rows - len(spans))
        segs: list[int] = []  # a document's length, or -run for padding
        for i, j, fill in spans:
            segs += lens[i:j]
            if fill < width:
                segs.append(fill - width)
        seg = np.asarray(segs, dtype=np.int64)
        is_doc = seg > 0
        seg_tokens = np.abs(seg)
        starts = np.cumsum(seg_tokens) - seg_tokens
        out_ids = _tokens(ids, spans, width, self.pad_token_id).reshape(rows, width)
        doc_starts = starts[is_doc]
        if labels is None:
            out_lab = out_ids.copy()
            flat_lab = out_lab.reshape(-1)
            for r, (_, _, fill) in enumerate(spans):
                if fill < width:
                    out_lab[r, fill:] = IGNORE_INDEX
        else:
            out_lab = _tokens(labels, spans, width, IGNORE_INDEX).reshape(rows, width)
            flat_lab = out_lab.reshape(-1)
        flat_lab[doc_starts] = IGNORE_INDEX
        positions = np.repeat(starts, seg_tokens)
        np.subtract(_arange(size), positions, out=positions)
        doc_of_seg = np.full(seg.size, -1, dtype=np.int32)
        doc_of_seg[is_doc] = np.arange(doc_starts.size, dtype=np.int32)
        cu = np.full(self.table.num_segments(shape) + 1, size, dtype=np.int32)
        cu[: seg.size] = starts
        return {
            "input_ids": torch.from_numpy(out_ids),
            "labels": torch.from_numpy(out_lab),
            "position_ids": torch.from_numpy(positions.reshape(rows, width)),
            "document_ids": torch.from_numpy(
                np.repeat(doc_of_seg, seg_tokens).reshape(rows, width)
            ),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(seg_tokens.max()),
        }

    def __repr__(self) -> str:
        return (
            f"PackCollator(shapes={self.shapes}, key={self.key!r}, labels_key="
            f"{self.labels_key!r}, pad_token_id={self.pad_token_id})"
        )


def _next_fit(lens: list[int], width: int) -> list[tuple[int, int, int]]:
    """Next-fit rows ``(first document, end, tokens)``: one binary search per row."""
    cum = list(itertools.accumulate(lens, initial=0))
    spans = []
    i, n = 0, len(lens)
    while i < n:
        j = bisect.bisect_right(cum, cum[i] + width) - 1
        if j == i:  # a document longer than the row (never planned): a row of its own
            j = i + 1
        spans.append((i, j, cum[j] - cum[i]))
        i = j
    return spans


@functools.lru_cache(maxsize=16)
def _arange(size: int) -> np.ndarray:
    out = np.arange(size, dtype=np.int64)
    out.setflags(write=False)
    return out


def _tokens(values: list[Any], spans: list[tuple[int, int, int]], width: int, pad: int) -> Any:
    """The flat ``(rows * width,)`` int64 layout: each row's documents, then ``pad``; written by
    one concatenate (tensors, arrays) or one conversion (lists)."""
    first = values[0] if values else None  # none: a padding-only batch
    if isinstance(first, torch.Tensor):
        buf = _pad_buffer(pad, width)
        pieces: list[Any] = []
        for i, j, fill in spans:
            pieces += values[i:j]
            if fill < width:
                pieces.append(buf[: width - fill])
        if first.dtype != torch.int64 or first.ndim != 1:
            pieces = [p.reshape(-1).to(torch.int64) for p in pieces]
        return torch.cat(pieces).numpy()
    if isinstance(first, np.ndarray):
        nbuf = _pad_buffer(pad, width).numpy()
        pieces = []
        for i, j, fill in spans:
            pieces += values[i:j] if first.ndim == 1 else [v.reshape(-1) for v in values[i:j]]
            if fill < width:
                pieces.append(nbuf[: width - fill])
        return np.concatenate(pieces, casting="same_kind", dtype=np.int64)
    if type(first) is list:  # array.fromlist converts a list of ints faster than fromiter
        pad_bytes = _pad_bytes(pad, width)
        flat = array.array("q")
        try:
            for i, j, fill in spans:
                for v in values[i:j]:
                    flat.fromlist(v)
                if fill < width:
                    flat.frombytes(pad_bytes[: 8 * (width - fill)])
        except TypeError:
            pass  # not all lists of ints: the general path below
        else:
            return np.frombuffer(flat, dtype=np.int64)
    rep = itertools.repeat
    chunks: list[Any] = []
    for i, j, fill in spans:
        chunks += values[i:j]
        if fill < width:
            chunks.append(rep(pad, width - fill))
    try:
        return np.fromiter(
            itertools.chain.from_iterable(chunks), dtype=np.int64, count=len(spans) * width
        )
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"token sequences must be flat lists of ints, arrays or tensors ({exc})"
        ) from None


@functools.lru_cache(maxsize=32)
def _pad_bytes(pad: int, width: int) -> bytes:
    return np.full(width, pad, dtype=np.int64).tobytes()


@functools.lru_cache(maxsize=32)
def _pad_buffer(pad: int, width: int) -> torch.Tensor:
    return torch.full((width,), pad, dtype=torch.int64)
