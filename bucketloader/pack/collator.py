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
  to detect packing from ``position_ids`` alone. With ``position_ids_start=s`` every segment
  counts ``s, s + 1, ...`` instead (NOTE [ Positions after a padding index ]).
* ``document_ids`` ``(B, L)`` int32: the document (its position ``0..n-1`` in the batch) each
  token belongs to, ``-1`` on padding. Same index, same document: the block-diagonal masks of
  :mod:`bucketloader.pack.masks` are built from it. Padding attends only to the padding before it
  in its row, so no attention row is empty.
* ``cu_seqlens`` ``(S + 1,)`` int32 with ``S = max_documents + B`` fixed per shape
  (:meth:`PackTable.num_segments <bucketloader.pack.PackTable.num_segments>`): cumulative
  offsets, over the flattened ``B * L`` tokens, of every segment (each document and each padding
  run), so the whole ``(B * L, heads, dim)`` tensor is the varlen kernels' input with no
  gather. Entries after the last segment repeat ``B * L``: empty sequences, which varlen
  flash-attention kernels accept (they compute nothing for them). An empty document is an empty
  segment of its own (it keeps its number in ``document_ids`` and ``seq_idx``).
* ``max_seqlen`` (int): a bound on every segment's length, **fixed per planned shape** (NOTE
  [ Static varlen metadata ]).
* ``seq_idx`` ``(B, L)`` int32, with ``seq_idx=True``: the segment (of ``cu_seqlens``) each
  token belongs to, the convention of Hugging Face's ``DataCollatorWithFlattening(
  return_seq_idx=True)`` and of the Mamba-2 / ``causal_conv1d`` kernels. Documents and padding
  runs are numbered in order over the flattened batch, so ``seq_idx`` is non-decreasing along
  every row (and over ``B * L``) and a padding run never shares a number with a document: a
  causal conv or state-space scan that restarts where ``seq_idx`` changes never joins a document
  with the padding after it or with the next document. (``document_ids`` numbers documents only,
  ``-1`` on padding: same documents, other numbers.)

NOTE [ Static varlen metadata ]
A varlen attention kernel (flash-attention's ``flash_attn_varlen_func``, PyTorch's
``torch.nn.attention.varlen.varlen_attn``) takes ``cu_seqlens`` as a tensor and ``max_seqlen``
as a Python int. Under ``torch.compile(dynamic=False)`` an int argument is a constant of the
graph: an int that changes every batch compiles a new graph every batch (and hits the recompile
limit after 8). So every field has a shape *and* a value fixed per planned shape:
``cu_seqlens`` has ``S + 1`` entries and ``max_seqlen`` is, by default, the row length ``L`` (no
segment is longer than its row). Any bound is correct for these kernels (it only sizes their
launch grid; segments shorter than it cost nothing), so the compiled step sees one graph per
planned shape. Options (``max_seqlen=``):

* ``None`` (default): ``L``, the planned bound.
* an int ``m``: ``m`` for every shape; documents longer than ``m`` are refused (at construction
  when the plan knows its longest documents, else when a batch holds one), and padding runs
  are cut into pieces of at most ``m`` tokens, so ``cu_seqlens`` holds
  ``max_documents + B * ceil(L / m)`` segments (still fixed per shape).
* ``"tight"``: each batch's longest segment, the value a kernel would compute itself; it changes
  from batch to batch, so a compiled step recompiles (the collator warns once).

NOTE [ Positions after a padding index ]
RoBERTa and the models built like it (XLM-R, CamemBERT, ESM, MPNet with absolute positions)
reserve the first rows of their position table: the positions a model computes itself count
from ``padding_idx + 1`` (usually 2), and row ``padding_idx`` is the padding's. Given packed
``position_ids`` that count from 0, such a model embeds every token one or two positions early,
at rows it never learned for real tokens: no error, just worse results. ``position_ids_start=s``
counts every segment (documents and padding runs) from ``s``, as Hugging Face's
``DataCollatorWithFlattening(position_ids_start=s)`` does; a segment still starts wherever the
positions do not go up by one (its first position ``s`` follows at most ``s + n - 1``), so the
packing that models detect from ``position_ids`` is unchanged. The model's table must then hold
``s + L`` positions for a segment of ``L`` tokens (RoBERTa's 514 rows: 512 tokens from 2).
:class:`~bucketloader.hf.BucketTrainer` checks the value against the model's table (NOTE
[ Models that mix packed documents ] in :mod:`bucketloader.hf.trainer`).

NOTE [ The epoch a masking collator reads ]
With ``mlm=`` the masks are a function of ``(seed, epoch, document)`` (NOTE [ Masked-LM masking
of packed rows ] in :mod:`bucketloader.pack.mlm`), and the collator runs where the DataLoader
collates: in its workers, which hold a copy of it pickled when the loader's iterator started
(persistent workers: when the first one did). An epoch kept as a plain int would be that copy's
forever. So the epoch is a one-element int64 tensor in shared memory, which fork and spawn
workers both map rather than copy, and the sampler that built the collator
(``PackSampler.collator(mlm=...)``) shares its own with it and writes its epoch there when a
pass starts, after any auto-advance or resume has fixed the epoch and before it hands out the
pass's first batch: every batch of that pass reaches a worker after the write. A packing stream
(``PackIterable.collator(mlm=...)``) writes it when its pass starts, in the process that
iterates it, where the DataLoader also collates its batches. A collator built directly follows
``collator.set_epoch(epoch)``. (A plain ``pickle`` copy, outside a DataLoader,
holds a copy of the value.)
"""

from __future__ import annotations

import array
import bisect
import functools
import itertools
import numbers
import operator
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bucketloader._samples import check_readable
from bucketloader._validation import (
    INT64_MAX,
    MissingKeyError,
    check_bool,
    check_int,
    check_pad_token_id,
    checks_options,
    exact_int64,
)
from bucketloader.pack.mlm import MLMMasking
from bucketloader.pack.spec import PackTable

__all__ = ["IGNORE_INDEX", "PackCollator"]

#: The label of tokens that take no loss (``torch.nn.CrossEntropyLoss``'s default ignore_index).
IGNORE_INDEX = -100

_DTYPE = operator.attrgetter("dtype")
#: ``torch.uint64`` (torch >= 2.3); ``None`` before, where no tensor can hold it
_UINT64 = getattr(torch, "uint64", None)


@checks_options
class PackCollator:
    """Collate a packed batch (documents, row after row) into fixed-shape tensors.

    Build it with ``sampler.collator()`` (``PackCollator(sampler.table)``) so the two cannot
    disagree. Returns ``input_ids``, ``labels``, ``position_ids``, ``document_ids``,
    ``cu_seqlens``, ``max_seqlen`` (and ``seq_idx`` when asked; NOTE [ Packed batch layout ]);
    the rows are found again from the documents' lengths (NOTE [ How the collator finds the
    rows ]). Every field has a shape and a value fixed per planned shape, so a compiled step
    compiles once per shape (NOTE [ Static varlen metadata ]).

    Token ids and labels follow :class:`~bucketloader.PadCollator`'s rule that no value is lost,
    with one output dtype, ``int64``: integer (and bool) tensors, arrays and lists are converted
    exactly; float or complex ids, and ints ``int64`` cannot hold, are refused with the sample's
    batch position rather than truncated or rounded. A batch holds dicts or bare token sequences
    (lists, tuples, arrays or tensors; every element of an n-d one is a token), not both; dict
    samples carry their labels all or none.

    Args:
        table: the sampler's :class:`~bucketloader.pack.PackTable` (``sampler.table``).
        key: the token field of dict samples (bare samples, a list / array / tensor of ids, are
            the tokens themselves).
        labels_key: the field of dict samples holding their own labels (same length as the
            tokens), used when present; otherwise the labels are the token ids.
        pad_token_id: the id written on padding (an int64).
        max_seqlen: ``None`` (the row length of each shape), an int bound for every shape, or
            ``"tight"`` (each batch's longest segment: recompiles; NOTE [ Static varlen
            metadata ]).
        seq_idx: also return ``seq_idx`` ``(B, L)`` int32 (Mamba-2 / causal-conv kernels).
        position_ids_start: the first position of every document (and padding run): 0, or
            ``padding_idx + 1`` for RoBERTa-like models (NOTE [ Positions after a padding
            index ]).
        mlm: an :class:`~bucketloader.pack.MLMMasking` for masked-LM rows: ``input_ids``
            masked per document and ``labels`` the original ids of the picked tokens, -100
            elsewhere (NOTE [ Masked-LM masking of packed rows ] in :mod:`bucketloader.pack.mlm`);
            give the model a bidirectional document mask (``document_mask(..., causal=False)``).

    Example:
        >>> table = PackTable(row_lengths=(6,), batch_sizes=(2,), max_documents=(4,))
        >>> out = PackCollator(table, seq_idx=True)([[5, 6, 7], [8, 9], [4, 4, 4, 4]])
        >>> out["input_ids"].tolist()
        [[5, 6, 7, 8, 9, 0], [4, 4, 4, 4, 0, 0]]
        >>> out["labels"].tolist()
        [[-100, 6, 7, -100, 9, -100], [-100, 4, 4, 4, -100, -100]]
        >>> out["position_ids"].tolist(), out["document_ids"].tolist()
        ([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]], [[0, 0, 0, 1, 1, -1], [2, 2, 2, 2, -1, -1]])
        >>> out["cu_seqlens"].tolist(), out["max_seqlen"]
        ([0, 3, 5, 6, 10, 12, 12], 6)
        >>> out["seq_idx"].tolist()
        [[0, 0, 0, 1, 1, 2], [3, 3, 3, 3, 4, 4]]
        >>> roberta = PackCollator(table, pad_token_id=1, position_ids_start=2)
        >>> roberta([[5, 6, 7], [8, 9], [4, 4, 4, 4]])["position_ids"].tolist()
        [[2, 3, 4, 2, 3, 2], [2, 3, 4, 5, 2, 3]]
    """

    def __init__(
        self,
        table: PackTable,
        *,
        key: Any = "input_ids",
        labels_key: Any = "labels",
        pad_token_id: int = 0,
        max_seqlen: int | str | None = None,
        seq_idx: bool = False,
        position_ids_start: int = 0,
        mlm: MLMMasking | None = None,
    ) -> None:
        if not isinstance(table, PackTable):
            raise TypeError(
                f"table must be a PackTable (sampler.table), got {type(table).__name__}; build "
                "the collator with sampler.collator()"
            )
        self.table = table
        self.key = key
        self.labels_key = labels_key
        self.pad_token_id = check_pad_token_id(pad_token_id)
        self.max_seqlen = _check_max_seqlen(max_seqlen, table)
        self.seq_idx = check_bool("seq_idx", seq_idx)
        self.position_ids_start = check_int("position_ids_start", position_ids_start, minimum=0)
        if mlm is not None and not isinstance(mlm, MLMMasking):
            raise TypeError(
                f"mlm must be None or an MLMMasking (MLMMasking.from_tokenizer(tokenizer)), got "
                f"mlm={mlm!r}"
            )
        self.mlm = mlm
        # (NOTE [ The epoch a masking collator reads ]: shared with the sampler that built it)
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_() if mlm else None

    @property
    def epoch(self) -> int:
        """The epoch whose masks the collator draws (``mlm=``; 0 without it)."""
        return 0 if self._epoch is None else int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Draw epoch ``epoch``'s masks next (``mlm=``; a sampler's collator follows the
        sampler's epoch by itself: NOTE [ The epoch a masking collator reads ])."""
        epoch = check_int("epoch", epoch, minimum=0)
        if self._epoch is not None:
            self._epoch[0] = epoch

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every ``input_ids`` shape this collator can return (the sampler's promise)."""
        return sorted(self.table.shapes)

    def num_segments(self, shape: int) -> int:
        """Entries of ``cu_seqlens`` minus one for shape index ``shape`` (fixed per shape):
        every document, plus each row's padding cut into pieces of at most ``max_seqlen``."""
        rows, width = self.table.batch_sizes[shape], self.table.row_lengths[shape]
        m = self.max_seqlen
        pieces = 1 if not isinstance(m, int) or m >= width else -(-width // m)
        return self.table.max_documents[shape] + rows * pieces

    def sample_lengths(self, shape: tuple[int, ...]) -> tuple[int]:
        """The longest document a batch of ``shape`` ``(B, L)`` lays out: ``L``, or an int
        ``max_seqlen`` below it. What :func:`~bucketloader.compile.precompile` resizes its
        example to (NOTE [ Resizing a sample to a planned length ] in
        :mod:`bucketloader.compile.batches`).

        Example:
            >>> table = PackTable(row_lengths=(8,), batch_sizes=(2,), max_documents=(4,))
            >>> bounded = PackCollator(table, max_seqlen=5)  # documents of at most 5 tokens
            >>> PackCollator(table).sample_lengths((2, 8)), bounded.sample_lengths((2, 8))
            ((8,), (5,))
        """
        width = int(shape[-1])
        m = self.max_seqlen
        return (min(width, m) if isinstance(m, int) else width,)

    # --- reading the samples ---------------------------------------------------------------
    def _tokens(self, samples: Any) -> tuple[_Typed, _Typed | None]:
        """The token sequences (and the samples' own labels, when they carry them), every one
        a list, tuple, array or tensor: anything else is one error naming its batch position.
        Each comes with the set of its values' types, worked out once per batch (_Typed)."""
        first = samples[0]
        kinds = set(map(type, samples))
        if isinstance(first, Mapping):
            if not all(issubclass(k, Mapping) for k in kinds):
                pos, other = next(
                    (i, s) for i, s in enumerate(samples) if not isinstance(s, Mapping)
                )
                raise TypeError(
                    f"samples mix dicts and {type(other).__name__}s (the sample at batch position "
                    f"{pos}); a batch holds dicts with a {self.key!r} field or token sequences, "
                    "not both"
                )
            ids = _field(samples, self.key, "key")
            labels: _Typed | None = None
            if self.labels_key is not None:
                have = [self.labels_key in s for s in samples]
                if all(have):
                    labels = _field(samples, self.labels_key, "labels_key")
                elif any(have):
                    raise ValueError(
                        f"the sample at batch position {have.index(not have[0])} "
                        f"{'lacks' if have[0] else 'has'} the labels field {self.labels_key!r} "
                        f"that the sample at position 0 {'has' if have[0] else 'lacks'}; give "
                        "every sample of a batch its labels, or none (labels_key=None ignores them)"
                    )
            return ids, labels
        _check_sequences(samples, kinds, "samples", None)
        return (list(samples), kinds), None

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
                return self._layout(([], set()), None, [], [], rows, width, shape)
        typed_ids, typed_labels = self._tokens(samples)
        if typed_labels is not None and self.mlm is not None:
            raise ValueError(
                f"the samples carry their own labels ({self.labels_key!r}), but a masked-LM "
                "collator (mlm=...) makes the labels itself (the masked tokens); drop that field, "
                "or pass labels_key=None to ignore it"
            )
        try:
            ids, lens, id_kinds = _flat(*typed_ids)
            flat_labels = None if typed_labels is None else _flat(*typed_labels)
        except RuntimeError as exc:  # a nested sample cannot be flattened: named
            check_readable(typed_ids[0], self.key, exc)
            check_readable(typed_labels[0] if typed_labels else [], self.labels_key, exc)
            raise
        labels, label_kinds = None, None
        if flat_labels is not None:
            labels, counts, label_kinds = flat_labels
            bad = [i for i, n in enumerate(counts) if n != lens[i]]
            if bad:
                i = bad[0]
                raise ValueError(
                    f"sample {i} of the batch has {lens[i]} tokens but {counts[i]} labels "
                    f"({self.labels_key!r}); labels must align with the tokens"
                )
        longest = max(lens)
        if planned is None:
            try:
                shape = table.target(longest)
            except ValueError as exc:
                if not _dims_hint(typed_ids[0]):
                    raise
                raise ValueError(f"{exc}{_dims_hint(typed_ids[0])}") from None
        elif longest > table.row_lengths[shape] and not table.truncate:
            raise ValueError(
                f"a document of {longest} tokens is longer than the batch's planned row length "
                f"{table.row_lengths[shape]}; the stream's samples disagree with their length_fn"
                + _dims_hint(typed_ids[0])
            )
        rows, width = table.batch_sizes[shape], table.row_lengths[shape]
        if longest > width:  # overflow="truncate": cut to the longest row length
            ids = [x[:width] for x in ids]
            id_kinds = set(map(type, ids))  # (a slice may change a subclass's type)
            if labels is not None:
                labels = [x[:width] for x in labels]
                label_kinds = set(map(type, labels))
            lens = [min(n, width) for n in lens]
            longest = width
        m = self.max_seqlen
        if isinstance(m, int) and longest > m:
            raise ValueError(
                f"a document of {longest} tokens (batch position {lens.index(longest)}) is longer "
                f"than max_seqlen={m}; pass max_seqlen >= {longest}, or max_seqlen=None (the row "
                f"length); {_cut_hint(m)}"
            )
        n = len(lens)
        if n > table.max_documents[shape]:
            raise ValueError(
                f"batch of {n} documents exceeds the {table.max_documents[shape]} a batch of "
                f"shape {(rows, width)} can hold for the lengths it was planned on; the "
                "samples disagree with those lengths (a sampler's lengths or a stream's length_fn)"
                + _dims_hint(typed_ids[0])
            )
        spans = _next_fit(lens, width)
        if len(spans) > rows:
            raise ValueError(
                f"the batch's {n} documents ({sum(lens)} tokens) need {len(spans)} rows of "
                f"{width} in the order given, more than the planned {rows}; the dataset's "
                "samples disagree with the lengths they were planned on (a sampler's lengths or "
                "a stream's length_fn, or the batch did not come from this collator's sampler "
                "or stream)" + _dims_hint(typed_ids[0])
            )
        typed_labels = None if labels is None else (labels, label_kinds or set())
        try:
            return self._layout((ids, id_kinds), typed_labels, lens, spans, rows, width, shape)
        except RuntimeError as exc:  # (and NotImplementedError) a meta or sparse sample: named
            check_readable(ids, self.key, exc)
            check_readable(labels or [], self.labels_key, exc)
            raise

    def _layout(
        self,
        ids: _Typed,
        labels: _Typed | None,
        lens: list[int],
        spans: list[tuple[int, int, int]],
        rows: int,
        width: int,
        shape: int,
    ) -> dict[str, Any]:
        """Segments in order: each document (empty ones included), and the padding run that
        ends a row which is not full (every all-padding row is one run), cut into pieces of at
        most an int ``max_seqlen``."""
        size = rows * width
        spans = spans + [(0, 0, 0)] * (rows - len(spans))
        m = self.max_seqlen
        piece = m if isinstance(m, int) and m < width else width
        segs: list[int] = []  # a document's length (>= 0), or ~run (< 0) for padding
        for i, j, fill in spans:
            segs += lens[i:j]
            run = width - fill
            while run > 0:
                segs.append(~min(run, piece))
                run -= piece
        seg = np.asarray(segs, dtype=np.int64)
        is_doc = seg >= 0
        seg_tokens = np.where(is_doc, seg, ~seg)
        starts = np.cumsum(seg_tokens) - seg_tokens
        out_ids = _tokens(*ids, spans, width, self.pad_token_id, self.key).reshape(rows, width)
        doc_starts = starts[is_doc & (seg > 0)]  # an empty document has no first token
        if labels is None:
            out_lab = out_ids.copy()
            flat_lab = out_lab.reshape(-1)
            for r, (_, _, fill) in enumerate(spans):
                if fill < width:
                    out_lab[r, fill:] = IGNORE_INDEX
        else:
            out_lab = _tokens(*labels, spans, width, IGNORE_INDEX, self.labels_key)
            out_lab = out_lab.reshape(rows, width)
            flat_lab = out_lab.reshape(-1)
        flat_lab[doc_starts] = IGNORE_INDEX
        if self.mlm is not None:  # (NOTE [ Masked-LM masking of packed rows ] in pack.mlm)
            flat_ids, flat_lab = self.mlm.apply(
                out_ids.reshape(-1), starts[is_doc], seg[is_doc], epoch=self.epoch
            )
            out_ids, out_lab = flat_ids.reshape(rows, width), flat_lab.reshape(rows, width)
        positions = np.repeat(starts, seg_tokens)
        np.subtract(_arange(size), positions, out=positions)
        if self.position_ids_start:
            positions += self.position_ids_start
        doc_of_seg = np.full(seg.size, -1, dtype=np.int32)
        doc_of_seg[is_doc] = np.arange(int(is_doc.sum()), dtype=np.int32)
        cu = np.full(self.num_segments(shape) + 1, size, dtype=np.int32)
        cu[: seg.size] = starts
        out = {
            "input_ids": torch.from_numpy(out_ids),
            "labels": torch.from_numpy(out_lab),
            "position_ids": torch.from_numpy(positions.reshape(rows, width)),
            "document_ids": torch.from_numpy(
                np.repeat(doc_of_seg, seg_tokens).reshape(rows, width)
            ),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(seg_tokens.max()) if m == "tight" else (m or width),
        }
        if self.seq_idx:
            seq = np.repeat(np.arange(seg.size, dtype=np.int32), seg_tokens)
            out["seq_idx"] = torch.from_numpy(seq.reshape(rows, width))
        return out

    def __repr__(self) -> str:
        return (
            f"PackCollator(shapes={self.shapes}, key={self.key!r}, labels_key="
            f"{self.labels_key!r}, pad_token_id={self.pad_token_id}, max_seqlen="
            f"{self.max_seqlen!r}, seq_idx={self.seq_idx}, position_ids_start="
            f"{self.position_ids_start}{f', mlm={self.mlm!r}' if self.mlm else ''})"
        )


def share_epoch(owner: Any, collator: PackCollator) -> PackCollator:
    """``collator``, given the epoch its ``owner`` shares with every masking collator it builds
    (a ``PackSampler`` or ``PackIterable``: NOTE [ The epoch a masking collator reads ]); the
    first one built supplies the shared tensor, set to the owner's epoch."""
    if collator._epoch is not None:
        if owner._mlm_epoch is None:
            owner._mlm_epoch = collator._epoch
            owner._mlm_epoch[0] = owner.epoch
        collator._epoch = owner._mlm_epoch
    return collator


def _cut_hint(m: int) -> str:
    """The way on when ``max_seqlen`` is a bound the model needs: a raised ``max_seqlen`` would
    then fail there (a learned position table of ``m`` rows: ``BucketTrainer`` names
    ``max_seqlen=m`` for it, s31-user2)."""
    return (
        f"or, where the model needs that bound (a position table of {m}), cut or split the "
        f"documents to {m} tokens before packing (dataset.map; bucketloader.pack.SplitDataset "
        "for a map-style dataset)"
    )


def _check_max_seqlen(value: Any, table: PackTable) -> int | str | None:
    """``None``, ``"tight"`` (with its warning) or an int >= 1 that holds the plan's documents."""
    if value is None:
        return None
    if isinstance(value, str):
        if value != "tight":
            raise ValueError(
                f"max_seqlen must be None (the row length), an int >= 1 or 'tight', got "
                f"max_seqlen={value!r}"
            )
        warnings.warn(
            "max_seqlen='tight' gives each batch's longest segment, an int that changes from "
            "batch to batch: a compiled step that passes it to a varlen kernel recompiles for "
            "every new value (torch.compile(dynamic=False)); the default max_seqlen=None (the "
            "row length) is a valid bound that compiles once per shape",
            UserWarning,
            stacklevel=3,
        )
        return value
    m = check_int("max_seqlen", value, minimum=1)
    for (_, width), longest in zip(table.shapes, table.longest or (), strict=False):
        if longest > m:
            raise ValueError(
                f"max_seqlen={m} is smaller than the longest document the plan puts in rows of "
                f"{width} tokens ({longest} tokens); pass max_seqlen >= {longest}, or "
                f"max_seqlen=None (the row length); {_cut_hint(m)}"
            )
    return m


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


#: What a token sequence may be (a dict sample's token and labels fields too).
_SEQUENCES = (list, tuple, np.ndarray, torch.Tensor)
#: A batch's token sequences and the set of their types, worked out once per batch.
_Typed = tuple[list[Any], set[type]]


def _check_sequences(values: Any, kinds: set[type], what: str, field: Any) -> None:
    """Every value a list, tuple, array or tensor, or a TypeError naming the first that is not."""
    if all(issubclass(k, _SEQUENCES) for k in kinds):
        return
    pos, bad = next((i, v) for i, v in enumerate(values) if not isinstance(v, _SEQUENCES))
    where = "the sample" if field is None else f"field {field!r} of the sample"
    raise TypeError(
        f"{what} must be dicts with a token field or token sequences (lists, tuples, arrays, "
        f"tensors), but {where} at batch position {pos} is {type(bad).__name__}"
    )


def _dims_hint(values: list[Any]) -> str:
    """The likely cause of a batch that disagrees with its plan when a token sequence has
    several dims (``""`` if none has): it is packed as all its elements, where ``len()`` (what
    a stream's ``length_fn`` and ``[len(x) for x in dataset]`` measure) reads its first dim."""
    pos, bad = next(
        ((i, v) for i, v in enumerate(values) if getattr(v, "ndim", 1) > 1), (None, None)
    )
    if bad is None:
        return ""
    shape = tuple(bad.shape)
    return (
        f"; the sample at batch position {pos} is a {type(bad).__name__} of shape {shape}, "
        f"packed as its {int(np.prod(shape))} tokens where len() reads {shape[0]} (a "
        "tokenizer's return_tensors='pt' adds a batch dim): give the dataset 1-D token ids "
        "(x[0] or x.squeeze(0))"
    )


def _field(samples: Any, field: Any, option: str) -> _Typed:
    """``samples[i][field]`` for every sample, each a token sequence, or one error naming the
    sample's batch position and the collator's ``option``; with the set of their types."""
    try:
        values = [s[field] for s in samples]
    except KeyError:
        pos, sample = next((i, s) for i, s in enumerate(samples) if field not in s)
        raise MissingKeyError(
            f"the sample at batch position {pos} has no field {option}={field!r} (it has "
            f"{list(sample)[:8]}); pass PackCollator({option}=...)"
        ) from None
    kinds = set(map(type, values))
    _check_sequences(values, kinds, "samples", field)
    return values, kinds


def _flat(values: list[Any], kinds: set[type]) -> tuple[list[Any], list[int], set[type]]:
    """Token sequences as 1-D (arrays and tensors of any dims flattened: every element is a
    token), their lengths, and the set of their types (``kinds``, the values' types)."""
    if kinds == {torch.Tensor}:
        if any(v.ndim != 1 for v in values):
            values = [v.reshape(-1) for v in values]  # a Tensor's reshape is a Tensor
        return values, list(map(torch.Tensor.numel, values)), kinds  # Tensor.__len__ is slow
    if kinds == {list}:
        return values, list(map(len, values)), kinds
    flat = [
        v.reshape(-1) if isinstance(v, (torch.Tensor, np.ndarray)) and v.ndim != 1 else v
        for v in values
    ]
    if any(a is not b for a, b in zip(flat, values, strict=True)):
        kinds = set(map(type, flat))  # (a subclass's reshape may be its base class)
    return flat, [v.numel() if isinstance(v, torch.Tensor) else len(v) for v in flat], kinds


@functools.lru_cache(maxsize=16)
def _arange(size: int) -> np.ndarray:
    out = np.arange(size, dtype=np.int64)
    out.setflags(write=False)
    return out


def _tokens(
    values: list[Any],
    kinds: set[type],
    spans: list[tuple[int, int, int]],
    width: int,
    pad: int,
    key: Any,
) -> Any:
    """The flat ``(rows * width,)`` int64 layout: each row's documents, then ``pad``; written by
    one concatenate (tensors, arrays) or one conversion (lists). Every value is checked to be an
    exact integer (:func:`_as_int64`); a batch mixing tensors, arrays and lists is converted
    sample by sample."""
    first = values[0] if values else None  # none: a padding-only batch
    if kinds == {torch.Tensor}:
        dtypes = set(map(_DTYPE, values))
        if dtypes != {torch.int64} or first is None or first.ndim != 1:
            values = [_as_int64(v, p, key) for p, v in enumerate(values)]
        else:
            buf = _pad_buffer(pad, width)
            pieces: list[Any] = []
            for i, j, fill in spans:
                pieces += values[i:j]
                if fill < width:
                    pieces.append(buf[: width - fill])
            return torch.cat(pieces).numpy()
    elif kinds == {np.ndarray}:
        if set(map(_DTYPE, values)) != {np.dtype(np.int64)}:
            values = [_as_int64(v, p, key) for p, v in enumerate(values)]
    elif kinds == {list}:
        # array.fromlist converts a list of ints faster than fromiter, and refuses floats and
        # ints past int64
        pad_bytes = _pad_bytes(pad, width)
        flat = array.array("q")
        try:
            for i, j, fill in spans:
                for v in values[i:j]:
                    flat.fromlist(v)
                if fill < width:
                    flat.frombytes(pad_bytes[: 8 * (width - fill)])
        except (TypeError, OverflowError):
            values = [_as_int64(v, p, key) for p, v in enumerate(values)]
        else:
            return np.frombuffer(flat, dtype=np.int64)
    elif values:
        values = [_as_int64(v, p, key) for p, v in enumerate(values)]
    nbuf = _pad_buffer(pad, width).numpy()
    arrays: list[Any] = []
    for i, j, fill in spans:
        arrays += [v.reshape(-1) for v in values[i:j]]
        if fill < width:
            arrays.append(nbuf[: width - fill])
    return np.concatenate(arrays, dtype=np.int64)


def _as_int64(value: Any, pos: int, key: Any) -> np.ndarray:
    """``value`` (a tensor, array or sequence of ids) as an int64 array, every value exact, or
    one clear error naming the field and the sample's batch position."""
    where = f"field {key!r} of the sample at batch position {pos}"
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype.is_floating_point or value.dtype.is_complex:
            raise TypeError(
                f"token ids must be integers, but {where} is a tensor of dtype {value.dtype}; "
                "cast it in the dataset (.long()): ids are never rounded"
            )
        if value.dtype == _UINT64:  # torch has no max() for uint64: check in numpy
            return _as_int64(value.numpy(), pos, key)
        return value.reshape(-1).to(torch.int64).numpy()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biu":
            raise TypeError(
                f"token ids must be integers, but {where} is an array of dtype {value.dtype}; "
                "cast it in the dataset (.astype(np.int64)): ids are never rounded"
            )
        if value.dtype.kind == "u" and value.size and int(value.max()) > INT64_MAX:
            raise ValueError(f"{where} holds an id int64 cannot hold ({int(value.max())})")
        return value.reshape(-1).astype(np.int64)
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"token sequences must be flat lists of ints, arrays or tensors, but {where} is "
            f"{type(value).__name__}"
        )
    pos_bad = next(
        (i for i, x in enumerate(value) if not isinstance(x, (numbers.Integral, np.bool_))), None
    )
    if pos_bad is not None:  # (an index: the offending value itself may be None)
        bad = value[pos_bad]
        raise TypeError(
            f"token ids must be integers, but {where} holds {bad!r} ({type(bad).__name__}); ids "
            "are never rounded: convert them to ints in the dataset"
        )
    return exact_int64(value, lambda big: f"{where} holds the id {big}, which int64 cannot hold")


@functools.lru_cache(maxsize=32)
def _pad_bytes(pad: int, width: int) -> bytes:
    return np.full(width, pad, dtype=np.int64).tobytes()


@functools.lru_cache(maxsize=32)
def _pad_buffer(pad: int, width: int) -> torch.Tensor:
    return torch.full((width,), pad, dtype=torch.int64)
