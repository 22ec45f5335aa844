"""One call from a Hugging Face dataset to a ready sampler + collator (text, audio, images).

NOTE [ Which columns are padded, and with what ]
The bucketed columns (``column=``) are the sampler's inputs. Every other list column whose per-row
length equals a bucketed column's on every row (``attention_mask``, ``token_type_ids``, token-level
``labels``...) is padded along with it, along its first dim (the one Arrow's list lengths
measure, so ``(T, 80)`` feature rows pad ``T``); the test is done on the Arrow list lengths, so it
costs nothing. A numeric list column that matches no bucketed column is a *target*
(NOTE [ Target columns ]). Pad values: token-id inputs take the pad token id, any ``label*``
column ``-100`` (ignored by the losses of ``transformers`` models), everything else ``0``; the
side (``"right"``, or ``"left"`` for decoder-only prompts) comes from the tokenizer's
``padding_side`` unless ``side=`` says otherwise. The model-facing collator
(:class:`ModelInputs`) drops the collator's bookkeeping (``lengths``, ``sample_mask``, the group
key) unless asked to keep it, returns one flat ``attention_mask`` (the first bucketed column's),
and renames ``label``/``label_ids`` to ``labels``, as ``transformers.DataCollatorWithPadding``
does.

NOTE [ Images: pixel_mask ]
An image field padded along two inputs (``fields={"pixel_values": ("height", "width")}`` on a
plan of heights and widths) has a 2-D mask, the outer product of its two inputs' masks. The
first input's ``(B, H)`` mask alone is no image model's ``attention_mask`` (``ViTModel`` takes
a per-patch one and raised "size of tensor a (37) must match ... (96)" on it), so when the main
input is one of the image's, :class:`ModelInputs` returns ``pixel_mask`` instead: ``(B, H, W)``
int64, 1 on real pixels and 0 on padding, as ``DetrImageProcessor(do_pad=True)`` returns it
for images padded bottom/right to one size (``side="left"`` pads top/left, and the mask says
so). Measured on tiny DETR and Conditional DETR with a backbone that does not see the padding:
logits 0.146 (0.128) away from the image's alone without the mask, 5.6e-8 (4.5e-8) with it. A
``pixel_mask`` field in the samples (padded with the image) is kept as it is. Filler rows get an
all-zero ``pixel_mask``, unlike a text filler row's copied mask (NOTE [ Filler rows ]): a
DETR-family model's masks are additive with the dtype's minimum, not -inf, so its outputs and
gradients stay finite (checked: forward and backward), and an all-padding row then says that
nothing of it is an image. :func:`for_images` builds such a plan from a ``datasets.Dataset``.
``BucketTrainer`` keeps it only for a
model whose ``forward`` takes ``pixel_mask`` (DETR, Conditional DETR...; not ViT or YOLOS).
Detection targets (``labels`` a dict per image: ``class_labels (n,)``, ``boxes (n, 4)``, as the
processors return them) have a count per image that no input buckets: they are taken out before
the collator and returned as a list, one dict per row, as ``transformers``' detection examples
collate them; a filler row gets its source row's dict with no object (``DETECTION_KEYS`` cut to
0 entries), which DETR's loss still counts as "no object" queries (its head is not one that
ignores -100: ``loss_policy`` warns and names ``last_batch='fill'``), and a blank image (the
pad value: a copy of its source row's image, as text filler rows are, with no object in its
target taught the detector that a real image holds none; s22).

NOTE [ Target columns ]
Decoder or CTC labels (a translation, a transcript) have lengths of their own. Bucketing them
jointly with the input (``column=["input_ids", "labels"]``) multiplies the shapes; instead, by
default, a target column is padded to a length planned per cell: the longest target among the
cell's samples (rounded up to ``pad_to_multiple_of``), read from the Arrow lengths when the
sampler is built. The batch shape is then still one per cell, ``(B, L)`` for the input and
``(B, T_cell)`` for the target, and a target's padded length follows its input's length (they
correlate strongly in translation and speech). ``target_length=<int>`` pads every target to one
fixed length instead (with no target column, labels bucketed as an input or none at all, it does
nothing, and says so once, except for evaluation). Targets are padded on the right (decoders read
them from position 0) with -100 (``label*``), the pad id (``*input_ids``) or 0;
``decoder_attention_mask=True`` adds the target's 1/0 mask as ``decoder_attention_mask``. The
maximum of a bucket follows its outliers:
where targets vary widely for one input length (translation), joint cells merged back to a shape
budget (``column=["input_ids", "labels"], max_shapes=k``) pad less in total for the same number
of shapes (``benchmarks/results/hf_models.md``). A fixed-size list column (``Sequence(...,
length=n)``: an embedding, multi-label targets) that follows no bucketed input is a target of
length ``n`` in every cell, whatever ``target_length`` and ``pad_to_multiple_of`` say: stacked as
``(B, n)``, never padded. (Before, it went through ``default_collate`` as a list of Python lists,
which transposes them: ``n`` tensors of ``B`` values.) Every list type Arrow has counts as a list
column here (plain, large, fixed-size, list views), as in :func:`~bucketloader.hf.lengths`.

NOTE [ Filler rows ]
``last_batch="pad"`` (the default) and evaluation add *filler rows* so that a batch keeps its
planned shape. :class:`ModelInputs` makes them copies of real rows of the same batch (real
inputs: no all-zero attention mask, which gives ``Wav2Vec2ForCTC`` an input length of -1 and an
SDPA row with no key to attend to; an image's ``pixel_mask`` is all zero instead, NOTE
[ Images: pixel_mask ]) and sets every ``label*`` column to -100 on them (and the
``Trainer``'s other ``label_names``, e.g. ``target``: copied, they counted a real row twice in a
loss that ignores -100), so the cross-entropy losses of ``transformers`` heads ignore them.
Question-answering heads take ``start_positions`` / ``end_positions`` instead, clamp them to
``[0, L]`` and ignore ``L`` (the sequence length), where -100 would become a real target 0: on
filler rows they are set to ``L``. ``sample_mask`` (kept with ``sample_mask=True``) is False on
them. Heads whose loss still counts such a row (CTC, regression,
multi-label) need the loss masked by rows: :func:`bucketloader.hf.masked_loss` and
:class:`~bucketloader.hf.BucketTrainer` do it (NOTE [ Filler rows and the loss, per head ] in
:mod:`bucketloader.hf.loss`).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, Dataset

from bucketloader._arrow import is_bytes, is_list, is_text, nesting
from bucketloader._types import SIDES
from bucketloader._validation import (
    MAX_LENGTH,
    OptionError,
    OptionKeyError,
    OptionTypeError,
    check_bool,
    check_choice,
    check_int,
    check_options,
    check_pad_token_id,
    checks_options,
    keyword_options,
)
from bucketloader.boundaries import round_up
from bucketloader.collate import Field, PadCollator
from bucketloader.collate.fields import LABEL_PAD, RESERVED
from bucketloader.evaluation import EvalCollator, EvalSampler, EvalSamples, check_collate_fn
from bucketloader.hf.lengths import lengths, resolve_column, table_and_indices
from bucketloader.loader import ResumableDataLoader, check_loader_options
from bucketloader.plan import BucketSpec
from bucketloader.sampler import BucketSampler, GroupedDataset, sampler_options

__all__ = ["Bucketing", "ModelInputs", "Targets", "for_audio", "for_images", "for_text"]

#: The targets of question-answering heads, ignored at the sequence length (NOTE [ Filler rows ]).
QA_POSITIONS = ("start_positions", "end_positions")
#: Per-token columns a tokenizer returns beside ``input_ids``: never targets (split_columns).
_ALIGNED = ("attention_mask", "token_type_ids", "position_ids", "special_tokens_mask")
#: Batch keys the trainer needs besides the model inputs (see ModelInputs ``bookkeeping``).
BOOKKEEPING = ("sample_mask", "index")
#: Per-object keys of a detection target dict, emptied on filler rows (NOTE [ Images: pixel_mask ]).
DETECTION_KEYS = ("class_labels", "boxes", "area", "iscrowd", "masks")


class EpochDataLoader(ResumableDataLoader):
    """A :class:`~bucketloader.loader.ResumableDataLoader`: ``set_epoch`` reaches its batch
    sampler (``transformers.Trainer`` calls ``train_dataloader.set_epoch(epoch)`` every epoch) and
    ``sampler.state_dict()`` counts the batches the loop received."""


class Targets:
    """Target columns padded to a planned length per cell (NOTE [ Target columns ]).

    Attributes:
        table: the sampler's shape table (finds a batch's cell from its measured lengths).
        lengths: column → ``(K,)`` padded length of the column in every cell.
        pad_value: column → pad value.
        mask_of: the column whose 1/0 mask is the ``decoder_attention_mask``, or ``None``.
    """

    def __init__(
        self,
        table: Any,
        lengths: Mapping[str, np.ndarray],
        pad_value: Mapping[str, Any],
        mask_of: str | None = None,
    ) -> None:
        self.table = table
        self.lengths = {k: np.asarray(v, dtype=np.int64) for k, v in lengths.items()}
        self.pad_value = dict(pad_value)
        self.mask_of = mask_of
        cells = table.cells
        self._cell = {
            (int(g), *map(int, ls)): c
            for c, (g, ls) in enumerate(
                zip(cells.group.tolist(), cells.lengths.tolist(), strict=True)
            )
        }

    @property
    def columns(self) -> list[str]:
        """The target columns."""
        return list(self.lengths)

    def cell(self, measured: np.ndarray, group: Any = None) -> int:
        """The planned cell of a batch whose bucketed inputs have these (real) lengths."""
        shape = self.table.target(measured, group=group)
        gi = self.table.cells.group_index(group)
        return self._cell[(gi, *shape[1:])]

    def pad(self, values: Mapping[str, list[Any]], cell: int, rows: int) -> dict[str, torch.Tensor]:
        """Pad each target column (one value per sample) into ``(rows, T_cell, ...)``."""
        out: dict[str, torch.Tensor] = {}
        for key, vals in values.items():
            t = int(self.lengths[key][cell])
            xs = [torch.as_tensor(v) for v in vals]
            rest = tuple(xs[0].shape[1:])
            dtype = xs[0].dtype if xs[0].numel() or xs[0].dtype != torch.float32 else torch.long
            padded = torch.full((rows, t, *rest), self.pad_value[key], dtype=dtype)
            mask = torch.zeros((rows, t), dtype=torch.long)
            for i, x in enumerate(xs):
                n = int(x.shape[0])
                if n > t:
                    raise ValueError(
                        f"target {key!r} of the sample at batch position {i} has length {n}, "
                        f"longer than the {t} planned for its bucket; the sampler was planned on "
                        "other lengths: rebuild it on the dataset you load from (or raise "
                        "target_length)"
                    )
                padded[i, :n] = x
                mask[i, :n] = 1
            out[key] = padded
            if key == self.mask_of:
                out["decoder_attention_mask"] = mask
        return out

    def __repr__(self) -> str:
        shown = {k: sorted(set(v.tolist())) for k, v in self.lengths.items()}
        return f"Targets({shown})"


@checks_options
class ModelInputs:
    """Collate with a ``PadCollator`` and return what a ``transformers`` model's ``forward`` takes.

    Pads target columns to their planned length (:class:`Targets`), makes filler rows copies of
    real rows with ``label*`` set to -100 (NOTE [ Filler rows ]), returns one flat
    ``attention_mask`` (for images padded along two inputs, a ``(B, H, W)`` ``pixel_mask``
    instead: NOTE [ Images: pixel_mask ]), drops ``lengths``, ``sample_mask``, ``index`` and the
    group key (unless ``bookkeeping``), renames ``label``/``label_ids`` to ``labels``; with
    ``keep``, drops every other key not in it. Picklable (DataLoader workers).

    Args:
        collator: the ``PadCollator`` (an ``EvalCollator`` around one for evaluation).
        keep: the keys to return (a model's ``forward`` parameters), or ``None`` for all.
        targets: the :class:`Targets` of target columns, or ``None``.
        main_input: the bucketed input whose mask is ``attention_mask`` (several inputs).
        decoder_input: the bucketed input whose mask is ``decoder_attention_mask``, if any.
        decoder_attention_mask: return ``decoder_attention_mask`` (targets or ``decoder_input``).
        bookkeeping: keep ``sample_mask`` (and ``index`` for evaluation) in the batch.
        label_keys: more keys that are labels (a ``Trainer``'s ``label_names``, e.g.
            ``["target"]``): -100 on filler rows, as every ``label*`` key.

    Example:
        >>> from bucketloader import BucketSampler
        >>> samples = [{"input_ids": [7] * n, "label": n % 2} for n in (3, 5, 6, 9, 10)]
        >>> sampler = BucketSampler([3, 5, 6, 9, 10], boundaries=[6, 10], batch_size=3,
        ...                         shuffle=False)
        >>> [list(b) for b in sampler]
        [[0, 1, 2], [3, 4]]
        >>> collate = ModelInputs(sampler.collator(pad_value=0))
        >>> batch = collate([samples[3], samples[4]])  # two samples and a filler row
        >>> sorted(batch), tuple(batch["input_ids"].shape), batch["labels"].tolist()
        (['attention_mask', 'input_ids', 'labels'], (3, 10), [1, 0, -100])
    """

    def __init__(
        self,
        collator: Any,
        *,
        keep: Sequence[str] | None = None,
        targets: Targets | None = None,
        main_input: str | None = None,
        decoder_input: str | None = None,
        decoder_attention_mask: bool = False,
        bookkeeping: bool = False,
        label_keys: Sequence[str] = (),
    ) -> None:
        self.collator = collator
        self.keep = None if keep is None else frozenset(keep)
        self.targets = targets
        self.main_input = main_input
        self.decoder_input = decoder_input
        self.decoder_attention_mask = bool(decoder_attention_mask)
        self.bookkeeping = bool(bookkeeping)
        self.label_keys = tuple(k for k in label_keys if k not in QA_POSITIONS)

    def replace(self, **changes: Any) -> ModelInputs:
        """A copy with some options changed."""
        opts = {
            "keep": None if self.keep is None else sorted(self.keep),
            "targets": self.targets,
            "main_input": self.main_input,
            "decoder_input": self.decoder_input,
            "decoder_attention_mask": self.decoder_attention_mask,
            "bookkeeping": self.bookkeeping,
            "label_keys": self.label_keys,
        }
        return ModelInputs(self.collator, **{**opts, **changes})

    @property
    def pad_collator(self) -> PadCollator:
        """The innermost ``PadCollator``."""
        inner = self.collator
        while not isinstance(inner, PadCollator) and hasattr(inner, "collator"):
            inner = inner.collator
        return inner

    @functools.cached_property
    def _images(self) -> _ImageFields:
        """The pad collator's fields padded along two inputs, read once (not per batch)."""
        return _image_fields(self.pad_collator)

    def __call__(self, samples: list[Any]) -> dict[str, Any]:
        n = len(samples)
        group_key = getattr(self.pad_collator, "group_key", None)
        group = samples[0].get(group_key) if group_key is not None else None
        tvals: dict[str, list[Any]] = {}
        if self.targets is not None:
            cols = self.targets.columns
            tvals = {k: [s[k] for s in samples] for k in cols}
            samples = _without(samples, cols)
        per_image: dict[str, list[Any]] = {}
        if samples and isinstance(samples[0], Mapping):
            per_image = {
                k: [s[k] for s in samples]
                for k in ("labels", "label", *self.label_keys)
                if isinstance(samples[0].get(k), Mapping)
            }
        if per_image:  # (detection targets: NOTE [ Images: pixel_mask ])
            samples = _without(samples, per_image)
        out = dict(self.collator(samples))
        real = out.pop("sample_mask")
        index = out.pop("index", None)
        measured = out.pop("lengths")[:n]
        rows = int(real.shape[0])
        if self.targets is not None:
            if isinstance(group, (torch.Tensor, np.generic)):
                group = group.item()
            cell = self.targets.cell(measured.numpy(), group)
            out.update(self.targets.pad(tvals, cell, rows))
            if not self.decoder_attention_mask:
                out.pop("decoder_attention_mask", None)
        mask = out.get("attention_mask")
        pixels = None
        image = self._images.inputs
        if isinstance(mask, Mapping):
            main = self.main_input or next(iter(mask))
            if image is not None:
                if "pixel_mask" not in out:
                    a, b = (mask[name].to(torch.long) for name in image)
                    out["pixel_mask"] = a[:, :, None] * b[:, None, :]
                pixels = out.pop("pixel_mask")
            if image is not None and main in image:
                del out["attention_mask"]  # (no image model's mask: the pixel_mask is)
            else:
                out["attention_mask"] = mask[main]
            if self.decoder_attention_mask and self.decoder_input in mask:
                out["decoder_attention_mask"] = mask[self.decoder_input]
        for key in (*RESERVED, group_key):
            out.pop(key, None)
        for old in ("label", "label_ids"):
            if old in out and "labels" not in out:
                out["labels"] = out.pop(old)
        fillers = not bool(real.all())
        if fillers:
            _fill_rows(out, real, n, rows, self.label_keys, self._images.label_pads)
        if pixels is not None:  # (after _fill_rows, which copies real rows)
            pixels[~real] = 0
            out["pixel_mask"] = pixels
        if per_image and pixels is not None and fillers:
            # a filler row's target has no object: its image is blank too, so the detector is
            # not taught that a real image holds none (NOTE [ Images: pixel_mask ])
            for key, pad in self._images.pads.items():
                if isinstance(out.get(key), torch.Tensor):
                    out[key][~real] = pad
        for key, values in per_image.items():
            out["labels" if key == "label" else key] = _per_image_rows(values, real, n, rows)
        if self.keep is not None:
            out = {k: v for k, v in out.items() if k in self.keep}
        if self.bookkeeping:
            out["sample_mask"] = real
            if index is not None:
                out["index"] = index
        return out

    def __repr__(self) -> str:
        return f"ModelInputs({self.collator!r}, targets={self.targets!r})"


def _fill_rows(
    out: dict[str, Any],
    real: torch.Tensor,
    n: int,
    rows: int,
    label_keys: Sequence[str] = (),
    label_pads: Mapping[str, Any] | None = None,
) -> None:
    """Filler rows: padded rows (``>= n``) copy real data rows; ``label*`` (and ``label_keys``)
    -100 on every filler row (NOTE [ Filler rows ]), or ``label_pads[key]`` (an image's label
    map: its pad, the model's ignore index)."""
    src = torch.arange(rows - n) % n if rows > n else None
    filler = ~real
    mask = out.get("attention_mask")
    width = int(mask.shape[-1]) if isinstance(mask, torch.Tensor) and mask.ndim == 2 else None
    for key, v in out.items():
        if not isinstance(v, torch.Tensor) or v.ndim == 0 or v.shape[0] != rows:
            continue
        if str(key).startswith("label") or key in label_keys:
            v[filler] = (label_pads or {}).get(key, LABEL_PAD)
        elif key in QA_POSITIONS and width is not None:
            v[filler] = width  # the QA heads' ignore_index (NOTE [ Filler rows ])
        elif src is not None:
            v[n:] = v[src]


class _ImageFields(NamedTuple):
    """The fields a collator pads along two inputs (an image, and what is laid out with it;
    NOTE [ Images: pixel_mask ])."""

    inputs: tuple[str, str] | None  # the image's two inputs, in the order of its dims
    label_pads: dict[str, Any]  # label* maps' pads (their filler rows take them, not -100)
    pads: dict[str, Any]  # the other fields' pads (a detection filler row is blanked with them)


def _image_fields(collator: Any) -> _ImageFields:
    """:class:`_ImageFields` of ``collator`` (``inputs`` from ``pixel_values``, else the first
    such field; label keys renamed as :class:`ModelInputs` renames them)."""
    fields = getattr(collator, "fields", None) or {}
    two = {
        k: f
        for k, f in fields.items()
        if isinstance(f.input, tuple) and len(f.input) == 2 and isinstance(f.dims, tuple)
    }
    if not two:
        return _ImageFields(None, {}, {})
    field = two.get("pixel_values", next(iter(two.values())))
    ordered = sorted(zip(field.dims, field.input, strict=True))
    pads = getattr(collator, "pad_value", 0)

    def pad(k: str) -> Any:
        return pads.get(k, 0) if isinstance(pads, Mapping) else pads

    return _ImageFields(
        (ordered[0][1], ordered[1][1]),
        {
            "labels" if k in ("label", "label_ids") else k: pads[k]
            for k in two
            if k.startswith("label") and isinstance(pads, Mapping) and k in pads
        },
        {k: pad(k) for k in two if not k.startswith("label")},
    )


def _without(samples: Any, keys: Any) -> Any:
    """``samples`` (dicts) without ``keys``; an evaluation batch's keep their ``rows``."""
    stripped = [{k: v for k, v in s.items() if k not in keys} for s in samples]
    rows = getattr(samples, "rows", None)
    return stripped if rows is None else EvalSamples(stripped, rows)


def _per_image_rows(values: list[Any], real: torch.Tensor, n: int, rows: int) -> list[Any]:
    """One target dict per row: a real row's own; a filler row its source row's with no object
    (``DETECTION_KEYS`` cut to 0 entries; NOTE [ Images: pixel_mask ])."""
    out = []
    for i in range(rows):
        value = {k: _as_tensor(k, v) for k, v in values[i % n].items()}
        if i < n and bool(real[i]):
            out.append(value)
        else:
            out.append({k: v[:0] if k in DETECTION_KEYS else v for k, v in value.items()})
    return out


def _as_tensor(key: str, value: Any) -> Any:
    """A target's list as a tensor (DETR's loss concatenates them). An image with no object is an
    empty list, which ``datasets``' torch format leaves a list (the loss failed: "expected Tensor
    as element 1 ... but got list") and ``torch.as_tensor`` makes float ``(0,)``: the per-object
    keys get their dtype and trailing shape instead (``boxes`` ``(0, 4)``)."""
    if not isinstance(value, (list, tuple)):
        return value
    if not value and key in DETECTION_KEYS:
        shape = (0, 4) if key == "boxes" else (0,)
        dtype = torch.long if key in ("class_labels", "iscrowd") else torch.float32
        return torch.zeros(shape, dtype=dtype)
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError):  # (strings, ragged lists: the model's business)
        return value


class Bucketing(NamedTuple):
    """A sampler, its collator and the dataset they index; unpacks as a tuple.

    Attributes:
        sampler: the :class:`~bucketloader.sampler.BucketSampler` (an
            :class:`~bucketloader.evaluation.EvalSampler` for evaluation).
        collator: a :class:`ModelInputs` around the sampler's ``PadCollator``.
        dataset: the dataset to load from (several datasets: a ``GroupedDataset`` over them;
            evaluation: wrapped by ``EvalSampler.wrap``).

    Example:
        >>> import datasets
        >>> from bucketloader import hf
        >>> data = datasets.Dataset.from_dict({"input_ids": [[7] * n for n in (3, 5, 6, 9, 10, 4)]})
        >>> bucketing = hf.for_text(data, pad_token_id=0, num_buckets=2, batch_size=2)
        >>> bucketing.sampler.shapes
        [(2, 6), (2, 10)]
        >>> sorted(tuple(b["input_ids"].shape) for b in bucketing.dataloader())
        [(2, 6), (2, 6), (2, 10)]
        >>> sampler, collator, dataset = bucketing  # or as a tuple
    """

    sampler: Any
    collator: Any
    dataset: Any

    def dataloader(self, **kwargs: Any) -> DataLoader:
        """``DataLoader(dataset, batch_sampler=sampler, collate_fn=collator, **kwargs)``; the
        options are checked as ``sampler.dataloader()`` checks them (a ``collate_fn`` of yours
        replaces the collator; ``collate_fn=None`` is torch's ``default_collate``, as it is to
        ``DataLoader``, and refused with an ``EvalSampler``, whose filler rows it would count
        as samples)."""
        if isinstance(self.sampler, EvalSampler):
            check_collate_fn(kwargs)
        options = {"collate_fn": self.collator, **check_loader_options(self.sampler, kwargs)}
        return EpochDataLoader(self.dataset, batch_sampler=self.sampler, **options)


class AudioRows(Dataset):
    """Rows of an HF dataset with a decoded-audio struct column moved to a flat float tensor.

    ``{"audio": {"array": [...], "sampling_rate": sr}, ...}`` becomes
    ``{key: tensor(float32), "sampling_rate": sr, ...}`` (torch format, so no Python lists).
    """

    def __init__(
        self, dataset: Any, column: str, key: str, field: Sequence[str] = ("array",)
    ) -> None:
        self.dataset = dataset.with_format("torch")
        self.column, self.key = column, key
        self.field = tuple(field)  # the path to the samples inside the struct

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = dict(self.dataset[index])
        audio = row.pop(self.column)
        array = audio
        for part in self.field:
            array = array[part]
        out = {self.key: torch.as_tensor(array, dtype=torch.float32)}
        if "sampling_rate" in audio:
            out["sampling_rate"] = audio["sampling_rate"]
        return {**out, **row}


def check_entry_options(
    entry: Any, options: Mapping[str, Any], sampler: type, spec: Any, *, evaluation: Any = False
) -> None:
    """Refuse an option neither ``entry`` (``for_text``...) nor the sampler it builds takes,
    naming ``entry`` and listing its own options and the sampler's (the ones it passes on), before
    any column is read. Evaluation refuses ``shuffle``, ``seed`` and ``last_batch`` (or torch's
    ``drop_last``) with the reason."""
    if evaluation is True:
        for name in ("shuffle", "seed", "last_batch", "drop_last"):
            if name in options:
                raise TypeError(
                    f"evaluation batches are deterministic (every sample once, in an order that "
                    f"can be restored); drop {name}={options[name]!r}"
                )
        sampler = EvalSampler
    allowed = [*keyword_options(entry), *sampler_options(sampler, spec)]
    check_options(entry.__name__, options, allowed)


def pad_token_id_of(pad_token_id: Any, tokenizer: Any, owner: str = "for_text") -> int:
    """The pad id from the argument or a tokenizer-like object's ``pad_token_id`` (errors name
    ``owner``, the function the user called). A tokenizer's name or path (``"gpt2"``) is refused
    with the call that loads it: nothing is downloaded here. An object without ``pad_token_id``
    (a processor) is refused only when the pad id must come from it: beside ``pad_token_id=`` it
    gives at most the side (``padding_side``), as before."""
    if isinstance(tokenizer, (str, bytes, os.PathLike)):
        name = os.fspath(tokenizer) if not isinstance(tokenizer, bytes) else tokenizer
        instead = (
            f"or leave tokenizer out (pad_token_id={pad_token_id!r} is given; side= sets the side)"
            if pad_token_id is not None
            else "or pass pad_token_id=<int> instead"
        )
        raise TypeError(
            f"{owner} takes a tokenizer object (anything with pad_token_id, e.g. a transformers "
            f"tokenizer), got the {type(tokenizer).__name__} tokenizer={tokenizer!r}; load it "
            f"first: tokenizer=transformers.AutoTokenizer.from_pretrained({name!r}), {instead}"
        )
    if pad_token_id is None and tokenizer is not None and not hasattr(tokenizer, "pad_token_id"):
        inner = getattr(tokenizer, "tokenizer", None)
        fix = (
            "pass its tokenizer: tokenizer=<it>.tokenizer (a processor holds one), or "
            "pad_token_id=<int>"
            if hasattr(inner, "pad_token_id")
            else "pass a transformers tokenizer, or pad_token_id=<int> (and side=) instead"
        )
        raise TypeError(
            f"{owner} takes a tokenizer object with a pad_token_id attribute (a transformers "
            f"tokenizer), got {type(tokenizer).__name__} {tokenizer!r:.80}; {fix}"
        )
    if pad_token_id is None and tokenizer is not None:
        pad_token_id = getattr(tokenizer, "pad_token_id", None)
        if pad_token_id is None:
            raise ValueError(
                f"{owner} needs a pad token id, but got pad_token_id=None and tokenizer "
                f"{type(tokenizer).__name__} has pad_token_id=None; set one on the tokenizer "
                "(tokenizer.pad_token = tokenizer.eos_token) or pass "
                f"{owner}(..., pad_token_id=<int>)"
            )
    if pad_token_id is None:
        raise ValueError(
            f"{owner} needs a pad token id, but got pad_token_id=None and no tokenizer; pass "
            f"{owner}(..., pad_token_id=<int>) or {owner}(..., tokenizer=<a tokenizer with a "
            "pad token>)"
        )
    pad = check_pad_token_id(pad_token_id)
    if pad < 0:  # (a model's embedding looks every id up, padding too; PackCollator alone
        # takes any int64, for int fields that are not token ids)
        raise ValueError(
            f"{owner} writes pad_token_id into the token ids, which the model's embedding looks "
            f"up, so it must be >= 0, got pad_token_id={pad}; pass the tokenizer's pad id "
            "(tokenizer.pad_token_id, or tokenizer.eos_token_id where it has none); -100 marks "
            "labels, which are padded with -100 already"
        )
    return pad


def check_token_columns(datasets_: Sequence[Any], names: Sequence[str], owner: str) -> None:
    """The bucketed (or packed) columns must exist and hold lists (token ids): a text column would
    plan on lengths in characters and fail at the first batch, and a length column has nothing to
    pad. Refused here, before any length is read, with the fix (tokenize first)."""
    tokenize = (
        "tokenize first, e.g. dataset = dataset.map(lambda batch: tokenizer(batch[{text!r}]), "
        "batched=True), and use the 'input_ids' column it adds"
    )
    for dataset in datasets_:
        table = table_and_indices(dataset)[0]
        for name in names:
            if name not in table.column_names:
                text = next(
                    (c for c in table.column_names if is_text(table.schema.field(c).type)),
                    "text",
                )
                transformed = getattr(dataset, "format", {}).get("type") == "custom"
                why = (  # (set_transform: rows are made as they are read, after the planning)
                    "; the dataset's transform (set_transform / with_transform) makes its rows "
                    "only as they are read, but the lengths are planned from the stored "
                    "columns before any is read: tokenize with dataset.map instead"
                    if transformed
                    else ""
                )
                said = (  # (the fix in the caller's words: BucketTrainer's bucketing={...})
                    f"{owner} pads the token column {name!r}, which the dataset does not have "
                    f"(its columns: {table.column_names}){why}; name the token column with "
                )
                fix = tokenize.format(text=text)
                raise _column_fix(OptionKeyError, said, "...", f", or {fix}")
            kind = table.schema.field(name).type
            said = f"{owner} pads column {name!r} as token ids, but it holds "
            depth, leaf = nesting(kind)
            if depth > 1 and pa.types.is_integer(leaf):  # (s32-rev: hf.lengths' hint, fn=,
                # is no option of for_text's, nor of the trainer's)
                measure = f"lambda batch: [max(map(len, x)) for x in batch[{name!r}]]"
                raise TypeError(
                    f"{said}lists of token lists (one per choice or turn, as a multiple-choice "
                    f"dataset has), and it pads flat token lists only; plan them yourself: "
                    f"lengths = hf.lengths(dataset, fn={measure}) (the longest inner list), "
                    "BucketSampler(lengths, ...) and a collator of yours that pads every inner "
                    "list to the batch's planned length"
                )
            if is_list(kind):
                continue
            if is_text(kind):
                raise TypeError(f"{said}strings (untokenised text); {tokenize.format(text=name)}")
            if pa.types.is_null(kind):  # (datasets types an empty or all-None column so)
                rows = table.num_rows
                raise TypeError(
                    f"{said}no values ({'no rows' if not rows else f'all {rows:,} rows None'}); "
                    "pass a dataset with tokenised rows (did a filter or map leave none?)"
                )
            raise _column_fix(  # (the fix in the caller's words: BucketTrainer's bucketing={...})
                OptionTypeError,
                f"{said}{kind} values, not lists of token ids; name the token column (",
                repr("input_ids"),
                "); lengths alone go to BucketSampler(hf.lengths(dataset, ...)) with a collator "
                "of yours",
            )


def check_token_ids(datasets_: Sequence[Any], names: Sequence[str], owner: str) -> None:
    """Refuse a token-id column of float values (lists of any depth, fixed-size ones too;
    padded as floats, it fails in the model's embedding) or of strings (tokens, not ids).
    ``names``: the columns padded as token ids (``for_text``: the bucketed inputs and
    ``*input_ids``; ``for_packing``: the packed column and ``labels``); a column missing from a
    dataset is skipped. Checked on the schema, once:
    ``PackCollator`` refuses float ids again per batch, ``PadCollator`` pads any dtype."""
    for dataset in datasets_:
        schema = table_and_indices(dataset)[0].schema
        for name in (n for n in names if n in schema.names):
            leaf = _leaf_type(schema.field(name).type)
            if is_text(leaf) or is_bytes(leaf):  # (tokenizer.tokenize's tokens: the first
                # batch failed in the padding kernel, "holds list (not a tensor, ...)")
                raise TypeError(
                    f"{owner} pads column {name!r} as token ids, but it holds lists of "
                    f"{leaf} (tokens, not their ids); map them to ids first, e.g. dataset = "
                    f"dataset.map(lambda row: {{{name!r}: tokenizer.convert_tokens_to_ids("
                    f"row[{name!r}])}}), or tokenize with tokenizer(text)"
                )
            if pa.types.is_floating(leaf) or pa.types.is_decimal(leaf):
                raise TypeError(
                    f"{owner} pads column {name!r} as token ids, but it holds {leaf} values; "
                    f"token ids must be integers: cast the column first, e.g. dataset = "
                    f"dataset.cast_column({name!r}, datasets.Sequence(datasets.Value('int64')))"
                )


def _leaf_type(t: Any) -> Any:
    """The value type inside any depth of Arrow lists (fixed-size ones too: ``Sequence(...,
    length=n)``, and list views)."""
    return _leaf_type(t.value_type) if is_list(t) else t


def side_of(side: Any, tokenizer: Any) -> str:
    """``side``, else the tokenizer's ``padding_side``, else ``"right"``."""
    if side is None:
        side = getattr(tokenizer, "padding_side", None) or "right"
    return check_choice("side", side, SIDES)


class Columns(NamedTuple):
    """Which list columns follow which bucketed input, and which are targets."""

    follows: dict[str, Any]  # column -> bucketed input (an image: both of its inputs)
    targets: list[str]


def split_columns(
    datasets_: Sequence[Any],
    inputs: Mapping[str, list[np.ndarray]],
    skip: Sequence[str] = (),
    aligned: Sequence[str] = _ALIGNED,
) -> Columns:
    """Every list column follows the bucketed input of equal row lengths, or is a target
    (NOTE [ Which columns are padded, and with what ], NOTE [ Target columns ]); an
    ``aligned`` column (a tokenizer's per-token outputs) must follow one."""
    table, _ = table_and_indices(datasets_[0])
    follows = {name: name for name in inputs if name in table.column_names}
    targets: list[str] = []
    for c in table.column_names:
        if c in follows or c in skip:
            continue
        t = table.schema.field(c).type
        if c.startswith("label") and (is_text(t) or is_bytes(t)):  # (a list of strings reached
            # the model: "'list' object has no attribute 'dtype'" inside its loss)
            raise TypeError(
                f"column {c!r} holds {t} values, but label columns go to the model as class ids "
                f"(-100 on filler rows); encode them first: dataset = dataset.class_encode_column"
                f"({c!r}) (or map them to ints), or drop the column"
            )
        if not is_list(t):  # (fixed-size lists and list views too: NOTE [ Target columns ])
            if not pa.types.is_struct(t):
                _check_no_nulls(datasets_, c)
            continue
        own = [lengths(d, c) for d in datasets_]
        match = next(
            (
                name
                for name, per in inputs.items()
                if all(np.array_equal(a, b) for a, b in zip(own, per, strict=True))
            ),
            None,
        )
        if match is not None:
            follows[c] = match
            continue
        if c in aligned:  # (was padded as a target: a short mask hid real tokens, silently)
            name, per = next(iter(inputs.items()))
            k, i = next(
                (k, int(np.flatnonzero(a != b)[0]))
                for k, (a, b) in enumerate(zip(own, per, strict=True))
                if not np.array_equal(a, b)
            )
            where = f"row {i}" if len(own) == 1 else f"row {i} of dataset {k}"
            built = ": the mask is built from the lengths" if c == "attention_mask" else ""
            raise ValueError(
                f"column {c!r} pads along with the tokens, so each row must be as long as its "
                f"{name!r}, but {where} has {int(own[k][i])} values for {int(per[k][i])} tokens; "
                f"re-tokenize (tokenizer(text) returns both), or drop it (dataset."
                f"remove_columns({c!r})){built}"
            )
        leaf = t.value_type
        also = f"[..., {c!r}]"  # (bucket it too: the column option, in the caller's words)
        if is_list(leaf):
            said = (
                f"list column {c!r} holds nested lists and its row lengths match none of the "
                f"bucketed columns {list(inputs)}; a target column must be a flat list of "
                f"numbers: drop it (dataset.remove_columns({c!r})), flatten it, or bucket it too"
            )
            raise _column_fix(OptionError, f"{said} (", also, ")")
        if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)):
            said = (
                f"list column {c!r} holds {leaf} values and its row lengths match none of the "
                f"bucketed columns {list(inputs)}, so it cannot be padded; drop it "
                f"(dataset.remove_columns({c!r})) or bucket it too"
            )
            raise _column_fix(OptionError, f"{said} (", also, ")")
        targets.append(c)
    return Columns(follows, targets)


def _check_no_nulls(datasets_: Sequence[Any], column: str) -> None:
    """A column with ``None`` rows (a class label, a score, a string) cannot be batched: it failed
    at the batch that drew one, mid-epoch or mid-evaluation, with "field 'label' is treated as
    fixed-size but cannot be stacked (... NoneType)". Refused when planned, with the row."""
    for k, dataset in enumerate(datasets_):
        table, indices = table_and_indices(dataset)
        arr = table.column(column)
        if not (pa.types.is_null(arr.type) or arr.null_count):
            continue
        nulls = arr.is_null().to_numpy(zero_copy_only=False)
        nulls = nulls if indices is None else nulls[indices]
        if not nulls.any():
            continue
        where = "" if len(datasets_) == 1 else f" of dataset {k}"
        if nulls.all():  # (datasets types a column of only None as null)
            raise ValueError(
                f"column {column!r}{where} holds no values (all {nulls.size:,} rows None: an "
                f"unlabelled split?), which cannot be batched; drop it: dataset = "
                f"dataset.remove_columns({column!r})"
            )
        raise ValueError(
            f"column {column!r}{where} is None in {int(nulls.sum()):,} of its {nulls.size:,} "
            f"rows (the first: row {int(nulls.argmax())}), which cannot be batched; fill "
            f"them, or leave those rows out: dataset = dataset.filter(lambda row: "
            f"row[{column!r}] is not None)"
        )


def pad_values(keys: Sequence[str], inputs: Sequence[str], pad_id: Any) -> dict[str, Any]:
    """Pad value per key: ``label*`` → -100, token-id inputs → ``pad_id``,
    ``special_tokens_mask`` → 1 (a tokenizer's own padding marks pad tokens special), the rest 0."""
    out: dict[str, Any] = {}
    for k in keys:
        if k.startswith("label"):
            out[k] = LABEL_PAD
        elif k == "special_tokens_mask":
            out[k] = 1
        elif k in inputs or k.endswith("input_ids"):
            out[k] = pad_id
        else:
            out[k] = 0
    return out


def describe_inputs(plan: Plan) -> str:
    """The bucketed inputs and the columns that follow them, for a message."""
    follow = sorted(c for c in plan.columns.follows if c not in plan.inputs)
    out = f"{plan.inputs} are bucketed"
    return out + (f" and {follow} follow them" if follow else "")


class Plan(NamedTuple):
    """What :func:`build` needs besides the datasets."""

    inputs: list[str]  # bucketed inputs (sampler input names)
    per: list[np.ndarray]  # per dataset: (N_d, D) lengths of the inputs
    columns: Columns
    pads: dict[str, Any]
    side: str
    multiple: int | None
    target_length: int | None
    decoder_attention_mask: bool
    evaluation: bool
    bookkeeping: bool


def build(datasets_: list[Any], plan: Plan, *, view: Any = None, options: dict[str, Any]) -> Any:
    """Sampler (one input per bucketed column; groups for several datasets) + collator."""
    views = [view(d) if view is not None else d for d in datasets_]
    opts = dict(options)
    check_bool("evaluation", plan.evaluation)  # ("no" or 1 was read as True)
    check_bool("sample_mask", plan.bookkeeping)
    check_bool("decoder_attention_mask", plan.decoder_attention_mask)
    if plan.target_length is not None:  # checked with or without target columns
        check_int("target_length", plan.target_length, minimum=1, maximum=MAX_LENGTH)
    if plan.multiple is not None:
        opts["pad_to_multiple_of"] = check_int("pad_to_multiple_of", plan.multiple, minimum=1)
    lens = np.concatenate(plan.per)
    spec_lengths = (
        {plan.inputs[0]: lens[:, 0]}
        if len(plan.inputs) == 1
        else dict(zip(plan.inputs, lens.T, strict=True))
    )
    group_key = None
    if len(datasets_) == 1:
        dataset = views[0]
    else:
        dataset = GroupedDataset(views)
        group_key = dataset.key
        opts["groups"] = dataset.groups
    sampler: EvalSampler | BucketSampler
    sampler = (EvalSampler if plan.evaluation else BucketSampler)(spec_lengths, **opts)
    table = sampler.shape_table
    fields = {  # (a tuple: an image's (height, width), the last two dims)
        k: Field(input=v, dims=(-2, -1)) if isinstance(v, tuple) else Field(input=v, dims=0)
        for k, v in plan.columns.follows.items()
    }
    pads = {k: v for k, v in plan.pads.items() if k not in plan.columns.targets}
    collator: Any = PadCollator(
        table,
        fields=fields,
        pad_value=pads,
        side=plan.side,
        group_key=group_key,
        mask_dtype=torch.long,
    )
    if isinstance(sampler, EvalSampler):
        collator = EvalCollator(collator)
        dataset = sampler.wrap(dataset)
    targets = None
    if plan.columns.targets:
        targets = plan_targets(datasets_, plan, sampler.spec, table)
    elif plan.target_length is not None and not plan.evaluation:  # (BucketTrainer passes the
        # user's target_length on to predict, whose datasets often have no labels: quiet there)
        warnings.warn(
            f"target_length={plan.target_length} pads the target columns (list columns that "
            "follow no bucketed input, NOTE [ Target columns ]), and these datasets have none: "
            f"{describe_inputs(plan)}, so it does nothing. Drop it, or bucket only the input "
            "(column='input_ids') to pad the other list columns as targets",
            UserWarning,
            stacklevel=3,
        )
    decoder_input = next((c for c in plan.inputs[1:] if c in ("labels", "decoder_input_ids")), None)
    if plan.decoder_attention_mask and targets is None and decoder_input is None:
        if not plan.evaluation:  # (quiet on predict, as target_length above)
            warnings.warn(
                "decoder_attention_mask=True returns the mask of the target columns or of a "
                "bucketed 'labels'/'decoder_input_ids', and these datasets have neither: "
                f"{describe_inputs(plan)}, so no batch has one. Drop it, or keep 'labels' "
                "as a target or bucketed input",
                UserWarning,
                stacklevel=3,
            )
    model_inputs = ModelInputs(
        collator,
        targets=targets,
        main_input=plan.inputs[0],
        decoder_input=decoder_input,
        decoder_attention_mask=plan.decoder_attention_mask,
        bookkeeping=plan.bookkeeping or plan.evaluation,
    )
    return Bucketing(sampler, model_inputs, dataset)


def plan_targets(datasets_: list[Any], plan: Plan, spec: Any, table: Any) -> Targets:
    """Per-cell padded length of every target column (NOTE [ Target columns ])."""
    multiple = plan.multiple or 1
    out: dict[str, np.ndarray] = {}
    for col in plan.columns.targets:
        own = np.concatenate([lengths(d, col) for d in datasets_])
        size = _fixed_size(datasets_, col)
        if size is not None:  # (one length on every row: stacked, never padded)
            out[col] = np.full(spec.cells.num_cells, size, dtype=np.int64)
            continue
        if plan.target_length is not None:
            fixed = check_int("target_length", plan.target_length, minimum=1)
            if own.max() > fixed:
                i = int(own.argmax())
                raise ValueError(
                    f"target_length={fixed} but row {i} of target column {col!r} has length "
                    f"{int(own[i])}; raise target_length, truncate the targets, or leave "
                    "target_length=None to pad each bucket to its longest target"
                )
            per_cell = np.full(spec.cells.num_cells, fixed, dtype=np.int64)
        else:
            per_cell = np.zeros(spec.cells.num_cells, dtype=np.int64)
            np.maximum.at(per_cell, spec.cell_of_sample, own)
        out[col] = np.maximum(round_up(per_cell, multiple), 1)
    mask_of = next((c for c in ("decoder_input_ids", "labels") if c in out), None)
    pads = {c: plan.pads.get(c, 0) for c in out}
    return Targets(table, out, pads, mask_of=mask_of)


def _fixed_size(datasets_: Sequence[Any], column: str) -> int | None:
    """The list size of a column that is a fixed-size list (``Sequence(..., length=n)``) of one
    size in every dataset, else ``None``."""
    types = [table_and_indices(d)[0].schema.field(column).type for d in datasets_]
    sizes = {t.list_size for t in types if pa.types.is_fixed_size_list(t)}
    return sizes.pop() if len(sizes) == 1 and all(map(pa.types.is_fixed_size_list, types)) else None


def for_text(
    dataset: Any,
    column: str | Sequence[str] = "input_ids",
    *,
    pad_token_id: int | None = None,
    tokenizer: Any = None,
    side: str | None = None,
    pad_to_multiple_of: int | None = None,
    target_length: int | None = None,
    decoder_attention_mask: bool = False,
    evaluation: bool = False,
    sample_mask: bool = False,
    **options: Any,
) -> Any:
    """A ready :class:`~bucketloader.sampler.BucketSampler` + collator for tokenised text.

    Args:
        dataset: a tokenised ``datasets.Dataset``, or a list of them for per-dataset bucketing
            (boundaries fitted per dataset, batches never mix datasets).
        column: the bucketed token column, or several for per-input bucketing (e.g.
            ``["input_ids", "labels"]`` to bucket seq2seq targets jointly: each gets its own
            boundaries, and the shapes multiply; by default targets are padded per bucket, see
            NOTE [ Target columns ]).
        pad_token_id: the pad id of the token columns (>= 0: the embedding looks it up); or
        tokenizer: any object with ``pad_token_id`` (a ``transformers`` tokenizer); its
            ``padding_side`` is the default ``side``.
        side: ``"right"`` or ``"left"`` (decoder-only prompts); default the tokenizer's.
        pad_to_multiple_of: every planned length a multiple of this (8 or 64 for tensor cores):
            the bucket boundaries (the optimum under that constraint) and the target lengths.
        target_length: the padded length of target columns, ``None`` for the longest target of
            each bucket (NOTE [ Target columns ]).
        decoder_attention_mask: also return the targets' mask as ``decoder_attention_mask``.
        evaluation: an :class:`~bucketloader.evaluation.EvalSampler` instead: every sample
            exactly once, deterministic, even across ranks; batches keep ``sample_mask`` and
            ``index`` (pop them before ``model(**batch)``; ``restore_order`` puts outputs back in
            dataset order).
        sample_mask: keep ``sample_mask`` (False on filler rows) in training batches too, for
            :func:`~bucketloader.hf.masked_loss`.
        **options: the sampler's options (``num_buckets``, ``strategy``, ``batch_size`` or
            ``max_tokens``, ``last_batch``, ``shuffle``, ``seed``, ``num_replicas``, ``rank``;
            no ``last_batch``, ``shuffle`` or ``seed`` for evaluation).

    Returns:
        A :class:`Bucketing` ``(sampler, collator, dataset)``; ``.dataloader(**kwargs)`` builds
        the ``DataLoader``. Token-id columns pad with the pad id, ``label*`` columns with -100,
        the rest with 0; ``attention_mask`` is built (or padded if present) as 0/1 ``long``;
        columns of the same row lengths pad along (see the module NOTEs).

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
        >>> left = for_text(ds, pad_token_id=0, side="left", num_buckets=2, batch_size=2)
        >>> left.collator([data[0], data[2]])["input_ids"].tolist()
        [[0, 5, 5, 5], [5, 5, 5, 5]]
    """
    check_entry_options(for_text, options, BucketSampler, BucketSpec, evaluation=evaluation)
    pad = pad_token_id_of(pad_token_id, tokenizer)
    many = dataset_list(dataset, "for_text")
    _same_columns(many, "for_text")
    inputs = _check_columns(column)
    check_token_columns(many, inputs, "for_text")
    per_input = {name: [lengths(d, name) for d in many] for name in inputs}
    columns = split_columns(many, per_input)
    pads = pad_values(many[0].column_names, inputs, pad)
    check_token_ids(many, [c for c in pads if c in inputs or c.endswith("input_ids")], "for_text")
    plan = Plan(
        inputs=inputs,
        per=[np.stack([per_input[c][i] for c in inputs], axis=1) for i in range(len(many))],
        columns=columns,
        pads=pads,
        side=side_of(side, tokenizer),
        multiple=pad_to_multiple_of,
        target_length=target_length,
        decoder_attention_mask=decoder_attention_mask,
        evaluation=evaluation,
        bookkeeping=sample_mask,
    )
    return build(many, plan, options=options)


def for_audio(
    dataset: Any,
    column: str = "audio",
    *,
    key: str = "input_values",
    pad_value: float = 0.0,
    pad_token_id: int | None = None,
    side: str = "right",
    pad_to_multiple_of: int | None = None,
    target_length: int | None = None,
    decoder_attention_mask: bool = False,
    evaluation: bool = False,
    sample_mask: bool = False,
    **options: Any,
) -> Any:
    """A ready sampler + collator for audio: raw waveforms or feature frames, with transcripts.

    Args:
        dataset: a ``datasets.Dataset`` (or a list of them, bucketed per dataset) with either a
            decoded-audio struct column ``{"array": [...], "sampling_rate": ...}`` or a list
            column of samples (``input_values`` of a feature extractor, or ``(T, F)``
            ``input_features`` frames: their first dim ``T`` is bucketed).
        column: that column.
        key: the output key of a struct column's array (the rows are read in torch format).
        pad_value: pad value of the audio (a feature extractor's ``padding_value``).
        pad_token_id: pad id (>= 0) of ``*input_ids`` columns, if any (``labels`` pad with -100).
        side: ``"right"`` or ``"left"``.
        pad_to_multiple_of, target_length, decoder_attention_mask, evaluation, sample_mask: as
            :func:`for_text`; a transcript column (``labels``) is a target (NOTE [ Target
            columns ]): padded per bucket, never bucketed jointly unless ``column`` lists it.
        **options: ``BucketSampler`` options; ``max_tokens`` counts audio samples (or frames)
            per batch.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"audio": [
        ...     {"array": [0.5] * n, "sampling_rate": 16000} for n in (3, 9, 4, 8)],
        ...     "labels": [[1] * t for t in (1, 4, 2, 3)]})
        >>> sampler, collate, data = for_audio(ds, num_buckets=2, max_tokens=18)
        >>> sampler.shapes  # two samples per bucket: even batches of 2 rows (18 // 4 = 4 at most)
        [(2, 4), (2, 9)]
        >>> batch = collate([data[1], data[3]])
        >>> batch["input_values"].shape, batch["labels"].tolist()
        (torch.Size([2, 9]), [[1, 1, 1, 1], [1, 1, 1, -100]])
    """
    check_entry_options(for_audio, options, BucketSampler, BucketSpec, evaluation=evaluation)
    many = dataset_list(dataset, "for_audio")
    _same_columns(many, "for_audio")
    table, _ = table_and_indices(many[0])
    path = _audio_column(table, column)
    pad = 0 if pad_token_id is None else pad_token_id_of(pad_token_id, None, "for_audio")
    if path in table.column_names:  # a plain list column: samples as they are ("audio.array",
        # a struct's field named by its path, is not one: its rows are read through the struct)
        if key != "input_values" and key != column:  # (was ignored: the batches kept `column`)
            raise ValueError(
                f"for_audio's key= names the output of a struct (decoded audio) column's array, "
                f"but column {column!r} is a list column, whose batches keep its name, so "
                f"key={key!r} would be ignored; rename the column first "
                f"(dataset.rename_column({column!r}, {key!r})) and drop key="
            )
        per_input = {column: [lengths(d, column) for d in many]}
        pads = {**pad_values(many[0].column_names, [], pad), column: pad_value}
        head, view = None, (lambda d: d.with_format("torch"))
        name = column
    else:
        head = path.split(".")[0]
        per_input = {key: [lengths(d, path) for d in many]}
        rest = [c for c in many[0].column_names if c != head]
        stored = table.schema.field(head).type
        rate = {"sampling_rate": 0} if stored.get_field_index("sampling_rate") >= 0 else {}
        pads = {**pad_values(rest, [], pad), **rate, key: pad_value}
        view = lambda d: AudioRows(d, head, key, path.split(".")[1:])  # noqa: E731
        name = key
    plan = Plan(
        inputs=[name],
        per=[per_input[name][i][:, None] for i in range(len(many))],
        columns=split_columns(many, per_input, skip=[head] if head else [], aligned=()),
        pads=pads,
        side=check_choice("side", side, SIDES),
        multiple=pad_to_multiple_of,
        target_length=target_length,
        decoder_attention_mask=decoder_attention_mask,
        evaluation=evaluation,
        bookkeeping=sample_mask,
    )
    if head is not None:
        plan.columns.follows[key] = key
    return build(many, plan, view=view, options=options)


def for_images(
    dataset: Any,
    column: str = "pixel_values",
    *,
    pad_value: float = 0.0,
    side: str = "right",
    pad_to_multiple_of: int | None = None,
    evaluation: bool = False,
    sample_mask: bool = False,
    label_pad_value: int = LABEL_PAD,
    **options: Any,
) -> Any:
    """A ready sampler + collator for images of different sizes: heights and widths bucketed.

    The sampler plans cells ``(B, H, W)`` on two inputs, ``"height"`` and ``"width"``, read from
    the Arrow offsets of the ``(C, H, W)`` image column (nothing is decoded), with ``size="prod"``
    unless given (padding counted in pixels, ``max_tokens`` pixels per batch). Batches hold the
    image padded bottom/right (``side="left"``: top/left) and ``pixel_mask`` ``(B, H, W)``
    int64, as ``DetrImageProcessor(do_pad=True)`` returns them (NOTE [ Images: pixel_mask ]);
    detection ``labels`` (a dict per image) come as a list, one dict per row; an ``(H, W)``
    list column of the image's size (segmentation labels, a stored ``pixel_mask``) is padded
    with it (a ``label*`` map with ``label_pad_value``, on filler rows too).

    Args:
        dataset: a ``datasets.Dataset`` (or a list of them, bucketed per dataset) whose
            ``column`` holds channels-first images as nested lists (an image processor's
            ``pixel_values`` stored with ``dataset.map``, ``do_pad=False``).
        column: that column.
        pad_value: pad value of the image (image processors pad with 0).
        side: ``"right"`` (bottom/right, as image processors) or ``"left"`` (top/left).
        pad_to_multiple_of, evaluation, sample_mask: as :func:`for_text` (a multiple of 32 for a
            ResNet backbone's stride, the patch size for a ViT).
        label_pad_value: the pad (and filler-row value) of an ``(H, W)`` ``label*`` map, the
            model's ignore index: -100 by default, 255 for SegFormer, BEiT, DPT, MobileViT and
            UperNet (``config.semantic_loss_ignore_index``; their loss raised "Target -100 is
            out of bounds" on -100). ``BucketTrainer`` passes the model's own.
        **options: ``BucketSampler`` options: ``max_shapes`` (cells for the whole dataset),
            ``batch_size`` or ``max_tokens`` (pixels per batch), ``size``, ...

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"pixel_values": [
        ...     [[[0.5] * w] * h] * 3 for h, w in ((4, 6), (6, 4), (5, 5), (6, 6))],
        ...     "label": [0, 1, 0, 1]})
        >>> sampler, collate, data = for_images(ds, max_shapes=2, batch_size=2)
        >>> sampler.shapes
        [(2, 4, 6), (2, 6, 6)]
        >>> batch = collate([data[1], data[2]])  # 6 x 4 and 5 x 5 in the 6 x 6 cell
        >>> batch["pixel_values"].shape, batch["pixel_mask"].sum((1, 2)).tolist()
        (torch.Size([2, 3, 6, 6]), [24, 25])
        >>> batch = collate([data[3]])  # a filler row: all-zero pixel_mask, label -100
        >>> batch["pixel_mask"].sum((1, 2)).tolist(), batch["labels"].tolist()
        ([36, 0], [1, -100])
    """
    check_entry_options(for_images, options, BucketSampler, BucketSpec, evaluation=evaluation)
    check_int("label_pad_value", label_pad_value)
    many = dataset_list(dataset, "for_images")
    sizes = [_image_sizes(d, column) for d in many]
    _same_columns(many, "for_images")
    per_input = {name: [hw[:, k + 1] for hw in sizes] for k, name in enumerate(IMAGE_INPUTS)}
    follows: dict[str, Any] = {column: IMAGE_INPUTS}
    table = table_and_indices(many[0])[0]
    for c in table.column_names:
        t = table.schema.field(c).type
        if c != column and not is_list(t) and not pa.types.is_struct(t):
            _check_no_nulls(many, c)
        if c == column or not is_list(t):
            continue
        if is_list(t.value_type) and all(
            np.array_equal(_list_sizes(d, c)[:, :2], hw[:, 1:])
            for d, hw in zip(many, sizes, strict=True)
        ):
            follows[c] = IMAGE_INPUTS  # ((H, W) per image: a segmentation map, a pixel_mask)
            continue
        own = [lengths(d, c) for d in many]
        if any(len(set(x.tolist())) > 1 for x in own):  # (else stacked as it is)
            raise ValueError(
                f"for_images pads {column!r} along its height and width, but list column {c!r} "
                "has neither one length on every row nor the image's (height, width); drop it "
                f"(dataset.remove_columns({c!r})), or pad it to one length in dataset.map"
            )
    options = {"size": "prod", **options}
    # (a struct column, detection labels, is taken out before the collator: ModelInputs)
    flat = [c for c in table.column_names if not pa.types.is_struct(table.schema.field(c).type)]
    plan = Plan(
        inputs=list(IMAGE_INPUTS),
        per=[np.stack([per_input[c][i] for c in IMAGE_INPUTS], axis=1) for i in range(len(many))],
        columns=Columns(follows, []),
        pads={
            **pad_values(flat, [], 0),
            **{k: label_pad_value for k in follows if k != column and k.startswith("label")},
            column: pad_value,
        },
        side=check_choice("side", side, SIDES),
        multiple=pad_to_multiple_of,
        target_length=None,
        decoder_attention_mask=False,
        evaluation=evaluation,
        bookkeeping=sample_mask,
    )
    return build(many, plan, view=lambda d: d.with_format("torch"), options=options)


#: The sampler inputs of :func:`for_images`, in the order of an image's last two dims.
IMAGE_INPUTS = ("height", "width")


def _same_columns(many: list[Any], owner: str) -> None:
    """Datasets bucketed together have the same columns: the columns are read from the first
    (a column only in another failed at that dataset's first batch, mid-epoch, or with
    pyarrow's KeyError when the plan was built; s22-rev for images, the same for text and
    audio)."""
    first = table_and_indices(many[0])[0].column_names
    for i, d in enumerate(many[1:], 1):
        cols = table_and_indices(d)[0].column_names
        if set(cols) != set(first):
            extra, missing = sorted(set(cols) - set(first)), sorted(set(first) - set(cols))
            raise ValueError(
                f"{owner} pads the datasets' columns alike, but dataset {i}'s differ from "
                f"dataset 0's (only in {i}: {extra}; only in 0: {missing}); give them the same "
                "columns (dataset.remove_columns([...]))"
            )


def _starts_sizes(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """Where each list of an Arrow list array starts in ``arr.values``, and its length."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        starts = (arr.offset + np.arange(len(arr), dtype=np.int64)) * size
        return starts, np.full(len(arr), size, dtype=np.int64)
    offsets = arr.offsets.to_numpy().astype(np.int64, copy=False)
    if hasattr(arr, "sizes"):  # (a list view: offsets and sizes of their own)
        return offsets, arr.sizes.to_numpy().astype(np.int64, copy=False)
    return offsets[:-1], np.diff(offsets)


def _list_sizes(dataset: Any, column: str) -> np.ndarray:
    """``(N, 3)`` sizes of the first three nesting levels of a list column, per row in the
    dataset's logical order, from the Arrow offsets (a row's first list at each level: an image's
    ``(C, H, W)``; a 2-D column's ``(H, W)`` and 0). Only ``O(N)`` offsets are read."""
    table, indices = table_and_indices(dataset)
    parts = []
    for chunk in table.column(column).chunks:
        cols = []
        level, first = chunk, None
        for _ in range(3):
            if not is_list(level.type):
                cols.append(np.zeros(len(chunk), dtype=np.int64))
                continue
            starts, sizes = _starts_sizes(level)
            at = np.arange(len(chunk)) if first is None else first
            if not len(sizes):  # (no list at this level: every row empty above it)
                starts = sizes = np.zeros(1, dtype=np.int64)
            cols.append(np.where(at >= 0, sizes[np.maximum(at, 0)], 0))
            first = np.where((at >= 0) & (cols[-1] > 0), starts[np.maximum(at, 0)], -1)
            level = level.values
        parts.append(np.stack(cols, axis=1))
    out = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
    return out if indices is None else out[indices]


def _image_sizes(dataset: Any, column: str) -> np.ndarray:
    """``(N, 3)`` ``(C, H, W)`` of every image of ``column``; a column that holds no
    channels-first images of one channel count is refused with the fix."""
    table = table_and_indices(dataset)[0]
    if column not in table.column_names:
        said = (
            f"for_images pads the image column {column!r}, which the dataset does not have (its "
            f"columns: {table.column_names}); name it with "
        )
        store = (
            ", or store the image processor's output first: dataset = dataset.map(lambda b: "
            "processor(b['image'], do_pad=False), batched=True)"
        )
        raise _column_fix(OptionKeyError, said, "...", store)
    depth, t = nesting(table.schema.field(column).type)
    if depth != 3 or not (pa.types.is_floating(t) or pa.types.is_integer(t)):
        found = f"{depth}-level lists of {t}" if depth else f"{t} values (undecoded images?)"
        gray = (  # (s25-user: it named only transpose(2, 0, 1), which a 2-D image cannot take)
            "; a grayscale (H, W) image needs its channel dim: np.asarray(image)[None]"
            if depth == 2
            else ""
        )
        raise TypeError(
            f"for_images pads column {column!r} as (C, H, W) images, but it holds {found}; "
            "store channels-first pixel values first: dataset = dataset.map(lambda b: "
            "processor(b['image'], do_pad=False), batched=True) (an image processor's "
            f"pixel_values), or np.asarray(image).transpose(2, 0, 1){gray}"
        )
    sizes = _list_sizes(dataset, column)
    channels, first = np.unique(sizes[:, 0], return_index=True)
    last = np.unique(sizes[:, 2])
    if len(last) == 1 and 0 < last[0] <= 4 and (len(channels) > 1 or channels[0] > 4):
        # (dim 0 varies or is no channel count, the last is one: the collator's channels-last
        # error, said before the plan: planned on (W, C), a batch of one height padded silently)
        raise ValueError(
            f"for_images reads {column!r} as (C, H, W), but its images look channels-last (H, W, "
            f"C), C={int(last[0])}: dim 0 is {int(sizes[0, 0])} at row 0; permute them to (C, "
            "H, W) in dataset.map (np.asarray(image).transpose(2, 0, 1)), as image processors "
            "return pixel_values"
        )
    if len(channels) > 1:
        rows = sorted(first.tolist())[:2]  # (the first two rows of different channel counts)
        c0, c1 = sizes[rows, 0].tolist()
        raise ValueError(
            f"for_images reads {column!r} as (C, H, W), but dim 0 is not padded and its size "
            f"differs: {c0} at row {rows[0]}, {c1} at row {rows[1]}; make the channel count the "
            "same: image.convert('RGB') before the processor (or x.expand(3, -1, -1))"
        )
    return sizes


def _audio_column(table: Any, column: str) -> str:
    """The path of the audio column resolved (a struct's ``array`` field), which must hold lists
    of samples or frames: file paths would be planned on their characters and fail at the first
    batch, and a ``datasets.Audio`` column is stored undecoded (bytes and path) until a row is
    read. Refused with the decode step that gives a list column."""
    head = column.split(".")[0] if isinstance(column, str) else None  # (else: resolve_column's)
    stored = table.schema.field(head).type if head in table.column_names else None
    if (
        stored is not None
        and pa.types.is_struct(stored)
        and {stored.field(i).name for i in range(stored.num_fields)} == {"bytes", "path"}
    ):
        path, found, cast = head, "undecoded datasets.Audio (bytes and path)", ""
    else:
        kind, path = resolve_column(table, column)
        if is_list(kind.type):
            return path
        if is_text(kind.type):
            found = "strings (file paths?), not decoded audio"
        else:
            found = f"{kind.type} values, not lists of audio samples"
        cast = f".cast_column({head!r}, datasets.Audio(sampling_rate=16000))"
    said = (
        f"for_audio pads column {path!r} as audio, but it holds {found}; decode it into a list "
        f"column first, e.g. dataset = dataset{cast}.map(lambda row: {{'input_values': "
        f"row[{head!r}]['array']}}, remove_columns=[{head!r}]), then pass "
    )
    also = " (a feature extractor's input_values or frames do as well)"
    raise _column_fix(OptionTypeError, said, repr("input_values"), also)


def _column_fix(kind: type[OptionError], before: str, value: str, after: str = "") -> OptionError:
    """An error of ``kind`` whose fix sets the ``column`` option to ``value`` (a repr), said in
    the caller's words: ``column='input_ids'`` to a Python caller, ``bucketing={'column':
    'input_ids'}`` in BucketTrainer's (:class:`~bucketloader._validation.OptionError`)."""
    return kind(lambda o: f"{before}{o('column', value)}{after}")


def _check_columns(column: Any) -> list[str]:
    """The bucketed column name(s) as a non-empty list of str, or one clear error."""
    names = [column] if isinstance(column, str) else column
    if (
        not isinstance(names, (list, tuple))
        or not names
        or not all(isinstance(c, str) and c for c in names)
    ):
        raise OptionTypeError(
            lambda o: (
                "column must be a column name or a non-empty list of names, got "
                f"{o('column', repr(column))}; pass e.g. {o('column', repr('input_ids'))}"
            )
        )
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:  # (bucketed jointly with itself: the shapes multiplied for nothing)
        raise OptionError(
            lambda o: (
                f"column names {twice} more than once, got {o('column', repr(column))}; "
                "list each bucketed column once"
            )
        )
    return list(names)


def _has_table(dataset: Any) -> bool:
    """A ``datasets.Dataset`` (or any object over a ``pyarrow.Table`` the way it is)."""
    data = getattr(dataset, "data", None)
    return isinstance(getattr(data, "table", data), pa.Table)


def dataset_list(dataset: Any, owner: str, argument: str = "dataset") -> list[Any]:
    """The dataset(s) as a non-empty list; a ``pyarrow.Table`` is refused (``hf.lengths`` reads
    one, but a loader reads rows by index, which a table does not have: its first batch failed
    inside pyarrow with ``IndexError``). ``argument``: the name the errors give it."""
    many = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
    if not many:
        raise ValueError(f"{argument} must be a Dataset or a non-empty list of them, got []")
    table = next((d for d in many if isinstance(d, pa.Table)), None)
    if table is not None:
        views = [f.name for f in table.schema if "list_view" in str(f.type)]  # (large, nested)
        cast = f", after casting the list-view columns {views} to lists" if views else ""
        raise TypeError(
            f"{owner} reads rows by index, so {argument} must be a datasets.Dataset, got a "
            f"pyarrow.Table; wrap it: datasets.Dataset(table){cast}"
        )
    for d in many:  # (hf.lengths' own check lists a pyarrow.Table, which this refuses)
        if _has_table(d):
            if getattr(d, "format", {}).get("type") == "arrow":  # (datasets' __getitems__
                # then reads a table by a name it lacks: "Index must either be string or integer")
                raise TypeError(
                    f"{owner} reads rows as samples, but the dataset's format is 'arrow' (each "
                    "row a pyarrow.Table, which a DataLoader cannot fetch); pass "
                    "dataset.with_format(None) (or 'torch' / 'numpy')"
                )
            continue
        got = type(d).__name__
        if isinstance(dataset, (list, tuple)):  # the caller's list holds rows, not datasets
            got = f"a {type(dataset).__name__} of {got}"
            fix = (
                "wrap the rows: datasets.Dataset.from_list(rows) (dicts) or "
                "datasets.Dataset.from_dict({'input_ids': rows}) (token lists)"
            )
        elif isinstance(d, Mapping) and d and all(map(_has_table, d.values())):
            fix = f"pick a split, e.g. {argument}[{next(iter(d))!r}]"
        elif isinstance(d, Mapping):
            fix = f"a dict of columns: datasets.Dataset.from_dict({argument})"
        elif hasattr(d, "__getitem__") and hasattr(d, "__len__"):  # (a torch map-style Dataset
            # got the stream's advice)
            fix = (
                f"copy its rows into one: datasets.Dataset.from_list([{argument}[i] for i in "
                f"range(len({argument}))]), or bucket it yourself: BucketSampler(lengths) and a "
                "collator of yours (docs: loops.md)"
            )
        else:
            fix = (
                "for a stream (an IterableDataset) use bucketloader.stream.PackIterable to "
                "pack or BucketIterable to bucket"
            )
        raise TypeError(
            f"{owner} reads rows by index, so {argument} must be a datasets.Dataset, got {got}; "
            f"{fix}"
        )
    for i, d in enumerate(many):  # (else: "lengths['input_ids'] must not be empty", unnamed)
        if len(d) == 0:
            name = f"{argument}[{i}]" if isinstance(dataset, (list, tuple)) else argument
            raise ValueError(
                f"{owner} plans batches from the rows' lengths, but {name} has no rows "
                f"(len({name}) == 0); pass a dataset with rows (did a filter, select or map "
                "leave none?)"
            )
    return [_shown_columns(d) for d in many]


def _shown_columns(dataset: Any) -> Any:
    """``dataset`` without the columns its format hides (``set_format("torch", columns=[...])``):
    the columns are read from the Arrow table, the rows from the format, so a hidden
    ``attention_mask`` failed at the first batch ("fields names ['attention_mask'] but the
    samples (dict) have fields ['label', 'input_ids']; fix the names in fields={...}")."""
    fmt = getattr(dataset, "format", None) or {}
    shown = fmt.get("columns")
    if shown is None or fmt.get("output_all_columns"):
        return dataset
    hidden = [c for c in dataset.column_names if c not in shown]
    return dataset.remove_columns(hidden) if hidden else dataset
