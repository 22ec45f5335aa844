"""Packed training with Hugging Face: a tokenised dataset to a packing sampler + model collator.

NOTE [ How transformers models take a packed batch ]
Read from transformers 5.x (``masking_utils.create_causal_mask``, ``_preprocess_mask_arguments``,
``find_packed_sequence_indices``; Llama, Mistral, Qwen and the other models built on them):

* ``position_ids`` alone (no ``attention_mask``): the model finds the documents where the
  positions do not go up by one, and builds the block-diagonal causal mask itself, for
  ``attn_implementation`` ``"sdpa"``, ``"eager"`` and ``"flex_attention"``; the flash-attention
  implementations derive ``cu_seqlens`` from the same positions. This is ``attention="positions"``
  (the default), the smallest batch. **It only holds without a cache**: when ``use_cache`` is
  True (``config.use_cache`` defaults to True) the model creates a ``DynamicCache`` and skips the
  detection, and every token attends to every earlier token of the row, across documents.
  ``Trainer`` sets ``model.config.use_cache = args.use_cache`` (False by default), so training
  through it is safe, except for some models over a language model (LLaVA), whose language
  model reads ``config.text_config.use_cache``
  (``BucketTrainer`` refuses a model it finds trained with a cache, ``TrainingArguments(
  use_cache=True)`` too, unless gradient checkpointing turns the cache off); call the model
  yourself with ``use_cache=False``, or use ``attention="mask"``.
* A 4-D ``attention_mask`` ``(B, 1, L, L)`` is used as given, whatever the cache. Boolean
  (True = attend) for ``"sdpa"``; an additive float mask (0 / dtype min) for ``"eager"``, which
  adds it to the scores. This is ``attention="mask"`` with ``mask_dtype=torch.bool`` or a float
  dtype (:func:`bucketloader.pack.document_mask`); it ships ``B * L * L`` elements per batch.
* Flash attention also takes ``cu_seq_lens_q`` / ``cu_seq_lens_k`` / ``max_length_q`` /
  ``max_length_k`` directly: ``attention="flash"`` adds them from the collator's fixed-size
  ``cu_seqlens`` (padding runs are segments, unused entries repeat the last offset; NOTE
  [ Packed batch layout ] in :mod:`bucketloader.pack.collator`) and its ``max_seqlen``, the
  planned row length by default, so a compiled model sees one value per shape and compiles once
  per shape (NOTE [ Static varlen metadata ] in :mod:`bucketloader.pack.collator`;
  ``max_seqlen="tight"`` opts into the changing value, and recompiles).
* Mamba-2 / causal-conv layers (Bamba, Zamba, GraniteMoeHybrid, ...) take ``seq_idx`` (the
  ``DataCollatorWithFlattening(return_seq_idx=True)`` convention): ``return_seq_idx=True`` adds
  the collator's ``(B, L)`` int32 ``seq_idx``. Those layers read ``attention_mask`` as a 2-D
  ``(B, L)`` padding mask, so ``return_seq_idx`` with ``attention="mask"`` (a 4-D mask) is
  refused: use ``"positions"`` or ``"flash"``.

* RoBERTa-like models (XLM-R, CamemBERT, ESM: a position table with a ``padding_idx``) count
  positions from ``padding_idx + 1``: ``position_ids_start=padding_idx + 1`` (2 for RoBERTa)
  numbers every packed document from there (NOTE [ Positions after a padding index ] in
  :mod:`bucketloader.pack.collator`). Their attention takes no packing from ``position_ids``
  (like BERT's): ``attention="mask"``. :class:`~bucketloader.hf.BucketTrainer` refuses a start
  that is not the model's, naming the one that is.

* Encoders trained as masked LMs (``BertForMaskedLM``, ``RobertaForMaskedLM``,
  ``ModernBertForMaskedLM``): ``mlm_probability=0.15`` masks each packed document as
  ``DataCollatorForLanguageModeling(mlm=True)`` masks a sequence (NOTE [ Masked-LM masking of
  packed rows ] in :mod:`bucketloader.pack.mlm`), and ``attention="mask"`` (its default) ships
  a *bidirectional* document mask (``document_mask(..., causal=False)``): each token attends to
  its whole document and to no other. ``"positions"`` is refused there: encoders read no
  documents from ``position_ids``.

NOTE [ Sliding-window layers in packed rows ]
Models whose layers mix full and sliding-window attention (``config.layer_types`` with
``"sliding_attention"``: ModernBERT's local layers, Gemma 2 / 3) build one mask per kind from a
2-D padding mask, but use a 4-D mask as given by every layer: with ``attention="mask"`` their
sliding layers would see whole documents in a packed row, where a document run alone sees
``config.sliding_window`` tokens (a tiny ModernBERT with ``local_attention=8``: logits 3.9e-4
off its documents alone). They take a dict of masks, one per layer kind, as given:
``sliding_window=config.sliding_window`` ships ``{"full_attention": document mask,
"sliding_attention": document mask within the window}`` (``sliding_window_mask``), and
each document's logits equal it run alone again (3e-8). ``BucketTrainer`` refuses such a model
with a plain 4-D mask where a row is longer than the window reaches, naming the value. A model
all of whose layers slide (Mistral: an int ``sliding_window``, no ``layer_types``) takes no
dict: it is refused a 4-D mask in rows longer than its window (a tiny Mistral's logits 0.19
off), naming ``attention="positions"`` (transformers builds the windowed document mask from
``position_ids``).

Labels are -100 at every document's first token and on padding, so the shifted causal-LM loss
never predicts across a boundary (``tests/test_pack.py`` checks logits and per-token losses of each
document against the document run alone, to 1e-5).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bucketloader._arrow import is_list
from bucketloader._validation import check_bool, check_choice, check_int, checks_options
from bucketloader.hf.bucketing import (
    Bucketing,
    check_entry_options,
    check_token_columns,
    check_token_ids,
    dataset_list,
    pad_token_id_of,
)
from bucketloader.hf.lengths import lengths, table_and_indices
from bucketloader.pack import (
    MLMMasking,
    PackSampler,
    PackSpec,
    document_mask,
    sliding_window_mask,
)

__all__ = ["ATTENTION", "PackedInputs", "for_packing"]

#: How the model is told where documents start (NOTE [ How transformers models take a packed
#: batch ]).
ATTENTION = ("flash", "mask", "positions")


@checks_options
class PackedInputs:
    """Collate with a :class:`~bucketloader.pack.PackCollator` and keep what a ``transformers``
    causal LM takes: ``input_ids``, ``labels``, ``position_ids``, plus the mask or the varlen
    arguments of ``attention`` (NOTE [ How transformers models take a packed batch ]).
    Picklable (DataLoader workers). ``return_seq_idx=True`` also keeps ``seq_idx`` (the
    collator must be built with ``seq_idx=True``).

    Example:
        >>> from bucketloader.pack import PackSampler
        >>> docs = [[5] * n for n in (3, 5, 2, 6)]
        >>> sampler = PackSampler([3, 5, 2, 6], row_length=8, batch_size=2)
        >>> collate = PackedInputs(sampler.collator(pad_token_id=0))
        >>> batch = collate([docs[i] for i in next(iter(sampler))])
        >>> sorted(batch), tuple(batch["input_ids"].shape)
        (['input_ids', 'labels', 'position_ids'], (2, 8))
        >>> sorted(batch["position_ids"].tolist())  # each document's positions start at 0
        [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 0, 1]]
    """

    def __init__(
        self,
        collator: Any,
        *,
        attention: str = "positions",
        mask_dtype: torch.dtype = torch.bool,
        return_seq_idx: bool = False,
        sliding_window: int | None = None,
    ) -> None:
        self.collator = collator
        self.attention = check_choice("attention", attention, ATTENTION)
        if not isinstance(mask_dtype, torch.dtype):
            raise TypeError(f"mask_dtype must be a torch.dtype, got mask_dtype={mask_dtype!r}")
        self.mask_dtype = mask_dtype
        self.return_seq_idx = _check_seq_idx(return_seq_idx, attention)
        _check_mlm_attention(getattr(collator, "mlm", None), attention)
        self.sliding_window = _check_sliding_window_option(sliding_window, attention)
        if self.return_seq_idx and not getattr(collator, "seq_idx", False):
            raise ValueError(
                "return_seq_idx=True needs a collator built with seq_idx=True "
                "(sampler.collator(seq_idx=True))"
            )

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The ``input_ids`` shapes (the sampler's promise)."""
        return self.collator.shapes  # type: ignore[no-any-return]

    @property
    def mlm(self) -> Any:
        """The collator's :class:`~bucketloader.pack.MLMMasking` (masked-LM rows), or ``None``
        (causal-LM rows)."""
        return getattr(self.collator, "mlm", None)

    @property
    def causal(self) -> bool:
        """Whether the rows are causal-LM rows (a causal document mask), not masked-LM rows
        (each token sees its whole document)."""
        return self.mlm is None

    @property
    def position_ids_start(self) -> int:
        """The first position of every packed document (the collator's; 0 where it has none)."""
        start = getattr(self.collator, "position_ids_start", 0)
        return start if isinstance(start, int) else 0

    def document_masks(self, document_ids: torch.Tensor) -> Any:
        """The ``attention_mask`` of ``attention="mask"`` rows: the 4-D document mask (causal or
        not, as the rows are), or with ``sliding_window`` one per layer kind (NOTE [ Sliding-
        window layers in packed rows ]). ``BucketTrainer``'s packing probe uses it too."""
        mask = document_mask(document_ids, causal=self.causal, dtype=self.mask_dtype)
        if self.sliding_window is None:
            return mask
        # (the sliding layers' mask derived from the full one: built once, s33-zero3)
        local = sliding_window_mask(mask, self.sliding_window, causal=self.causal)
        return {"full_attention": mask, "sliding_attention": local}

    def __call__(self, samples: list[Any]) -> dict[str, Any]:
        out = self.collator(samples)
        batch = {k: out[k] for k in ("input_ids", "labels", "position_ids")}
        if self.attention == "mask":
            batch["attention_mask"] = self.document_masks(out["document_ids"])
        elif self.attention == "flash":
            batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = out["cu_seqlens"]
            batch["max_length_q"] = batch["max_length_k"] = out["max_seqlen"]
        if self.return_seq_idx:
            batch["seq_idx"] = out["seq_idx"]
        return batch


def _check_seq_idx(return_seq_idx: Any, attention: str) -> bool:
    return_seq_idx = check_bool("return_seq_idx", return_seq_idx)
    if return_seq_idx and attention == "mask":
        raise ValueError(
            "return_seq_idx=True is for Mamba-2 / causal-conv layers, which read attention_mask "
            "as a 2-D (B, L) padding mask, but attention='mask' ships a 4-D (B, 1, L, L) mask; "
            "use attention='positions' or attention='flash' with return_seq_idx=True"
        )
    return return_seq_idx


def _check_mlm_attention(mlm: Any, attention: str) -> None:
    """Masked-LM rows need the documents kept apart by a mask or varlen arguments: encoders
    (BERT, RoBERTa, ModernBERT) find no documents in ``position_ids``."""
    if mlm is not None and attention == "positions":
        raise ValueError(
            "attention='positions' tells a decoder where documents start, but an encoder "
            "(BERT, RoBERTa, ModernBERT) reads no documents from position_ids and would attend "
            "across them; masked-LM rows take attention='mask' (a bidirectional document mask, "
            "the default with mlm_probability) or attention='flash'"
        )


def _check_sliding_window_option(sliding_window: Any, attention: str) -> int | None:
    """The ``sliding_window=`` option itself: ``None``, or an int >= 1 with ``attention="mask"``
    (whether it is the model's window is ``BucketTrainer``'s check, which sees the model)."""
    if sliding_window is None:
        return None
    window = check_int("sliding_window", sliding_window, minimum=1)
    if attention != "mask":
        raise ValueError(
            f"sliding_window={window} shapes the 4-D masks of attention='mask' (NOTE [ Sliding-"
            f"window layers in packed rows ]), but attention={attention!r}: with 'positions' or "
            "'flash' the model applies its own window; drop sliding_window, or use "
            "attention='mask'"
        )
    return window


def _check_labels(dataset: Any, column: str, tokens: np.ndarray) -> None:
    """A ``labels`` column is each document's labels (the collator's ``labels_key``): a list per
    row, as long as its tokens. Checked once on Arrow, not at the first batch (whose error
    names a position in the batch, not the row)."""
    table = table_and_indices(dataset)[0]
    if column == "labels" or "labels" not in table.column_names:
        return
    drop = (
        "or drop the column (dataset = dataset.remove_columns('labels')) to learn every token "
        f"of {column!r}"
    )
    kind = table.schema.field("labels").type
    if not is_list(kind):
        raise TypeError(
            f"for_packing uses the dataset's 'labels' column as each document's token labels, "
            f"but it holds {kind} values, not lists; {drop}"
        )
    labels = lengths(dataset, "labels")
    bad = np.flatnonzero(labels != tokens)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"for_packing uses the dataset's 'labels' column as each document's token labels, "
            f"but in {bad.size:,} rows the labels and the {column!r} tokens differ in number "
            f"(the first: row {i}, {int(tokens[i])} tokens and {int(labels[i])} labels); align "
            f"them (-100 where a token is not learned), {drop}"
        )


def for_packing(
    dataset: Any,
    column: str = "input_ids",
    *,
    pad_token_id: int | None = None,
    tokenizer: Any = None,
    attention: str | None = None,
    mask_dtype: torch.dtype = torch.bool,
    max_seqlen: int | str | None = None,
    return_seq_idx: bool = False,
    position_ids_start: int = 0,
    mlm_probability: float | None = None,
    sliding_window: int | None = None,
    **options: Any,
) -> Bucketing:
    """A packing sampler + model collator for a tokenised causal-LM (or masked-LM) dataset.

    Args:
        dataset: a tokenised ``datasets.Dataset`` (a ``labels`` column, e.g. a prompt masked
            with -100, is used as the labels: lists as long as the tokens, row by row, or an
            error names the first row that is not; other columns are ignored).
        column: the token column.
        pad_token_id: the id written on padding (>= 0: the embedding looks it up); or
        tokenizer: any object with ``pad_token_id``.
        attention: ``"positions"`` (the default), ``"mask"`` (the default with
            ``mlm_probability``: bidirectional then) or ``"flash"`` (NOTE [ How transformers
            models take a packed batch ]).
        mask_dtype: the 4-D mask's dtype with ``attention="mask"``: ``torch.bool`` for
            ``attn_implementation="sdpa"``, the model's float dtype for ``"eager"``.
        max_seqlen: the collator's ``max_seqlen`` (:class:`~bucketloader.pack.PackCollator`).
        return_seq_idx: also return ``seq_idx`` (Mamba-2 / causal-conv layers).
        position_ids_start: the first position of every document: 0, or the model's
            ``padding_idx + 1`` for RoBERTa-like models (2 for RoBERTa, XLM-R, CamemBERT).
        mlm_probability: masked-LM rows instead of causal-LM ones (a ``*ForMaskedLM`` model):
            each document's tokens picked with this chance (0.15 for BERT), the tokenizer's
            mask token / a random id / kept 80/10/10, never its special tokens or padding,
            drawn from ``(seed, epoch, document)`` (:class:`~bucketloader.pack.MLMMasking`;
            ``tokenizer`` required, the sampler's ``seed``). A ``labels`` column is refused.
            Other masking options: ``Bucketing(sampler, PackedInputs(sampler.collator(mlm=
            MLMMasking(...)), attention="mask"), dataset)``.
        sliding_window: with ``attention="mask"``, the model's ``config.sliding_window`` where
            some layers are sliding-window ones (ModernBERT, Gemma 2 / 3): the mask becomes a
            dict of one mask per layer kind (NOTE [ Sliding-window layers in packed rows ]).
        **options: :class:`~bucketloader.pack.PackSampler` options: ``row_length`` (required),
            ``batch_size`` or ``max_tokens``, ``overflow``, ``last_batch``, ``shuffle``,
            ``seed``, ``num_replicas``, ``rank``.

    Returns:
        A :class:`~bucketloader.hf.Bucketing` ``(sampler, collator, dataset)``: pass it to
        ``BucketTrainer(bucketing=...)``, or build a loader with ``.dataloader()``.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in (3, 5, 2, 6)]})
        >>> sampler, collate, data = for_packing(ds, pad_token_id=0, row_length=8, batch_size=2)
        >>> sampler.shapes
        [(2, 8)]
        >>> batch = collate([data[1], data[0], data[3], data[2]])
        >>> batch["position_ids"].tolist()
        [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 0, 1]]
    """
    check_entry_options(for_packing, options, PackSampler, PackSpec)
    pad = pad_token_id_of(pad_token_id, tokenizer, "for_packing")
    mlm = None
    if mlm_probability is not None:
        if tokenizer is None:
            raise ValueError(
                f"for_packing(mlm_probability={mlm_probability!r}) masks with the tokenizer's "
                "mask token, vocabulary size and special tokens; pass tokenizer=tokenizer (or "
                "build the collator yourself: sampler.collator(mlm=MLMMasking(...)))"
            )
        seed = options.get("seed", 0)
        mlm = MLMMasking.from_tokenizer(tokenizer, mlm_probability=mlm_probability, seed=seed)
    if attention is None:
        attention = "positions" if mlm is None else "mask"
    check_choice("attention", attention, ATTENTION)  # before the lengths are read
    _check_seq_idx(return_seq_idx, attention)
    _check_mlm_attention(mlm, attention)
    _check_sliding_window_option(sliding_window, attention)
    check_int("position_ids_start", position_ids_start, minimum=0)
    dataset_list(dataset, "for_packing")  # (a pyarrow.Table has no rows by index)
    check_token_columns([dataset], [column], "for_packing")
    check_token_ids([dataset], [column, "labels"], "for_packing")
    tokens = lengths(dataset, column)
    if mlm is not None:
        names = table_and_indices(dataset)[0].column_names
        if "labels" in names and column != "labels":
            raise ValueError(
                f"for_packing(mlm_probability={mlm_probability!r}) makes the labels (the "
                "masked tokens), but the dataset has a 'labels' column, which would be lost; "
                "drop it (dataset = dataset.remove_columns('labels')), or pack causal-LM rows "
                "without mlm_probability"
            )
    _check_labels(dataset, column, tokens)
    sampler = PackSampler(tokens, **options)
    collator = sampler.collator(
        key=column,
        pad_token_id=pad,
        max_seqlen=max_seqlen,
        seq_idx=return_seq_idx,
        position_ids_start=position_ids_start,
        mlm=mlm,
    )
    collate = PackedInputs(
        collator,
        attention=attention,
        mask_dtype=mask_dtype,
        return_seq_idx=return_seq_idx,
        sliding_window=sliding_window,
    )
    return Bucketing(sampler, collate, dataset)
