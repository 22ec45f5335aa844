"""BucketTrainer: ``transformers.Trainer`` with train, eval and predict at planned shapes.

This module imports ``transformers`` (``pip install 'bucketloader[hf]'``); ``bucketloader.hf``
loads it on first access to ``BucketTrainer`` / ``BucketSeq2SeqTrainer``.

NOTE [ Why the DataLoaders are not passed through accelerate ]
``Trainer.get_train_dataloader`` (and the eval and test ones) build a ``DataLoader`` and hand it
to ``accelerator.prepare``. On several processes accelerate wraps a batch sampler in
``BatchSamplerShard`` and re-shards it (and ``split_batches`` / ``dispatch_batches`` re-batch),
which would break a sampler that is already rank-aware and drop or reshape planned batches
(``Trainer`` neutralises this only for its own ``BatchRebalanceSampler``). So the overrides
return a plain ``DataLoader`` with ``batch_sampler=`` a rank-aware sampler that takes its rank from
the arguments: a :class:`~bucketloader.BucketSampler` for training, an
:class:`~bucketloader.evaluation.EvalSampler` for evaluation and prediction. ``Trainer`` still
moves each batch to the device (``_prepare_inputs``), counts steps with the sampler's exact
``len`` and calls ``set_epoch`` on the train loader every epoch (forwarded to the sampler), and
on resume skips batches with ``accelerate.skip_first_batches``, which keeps the batch sampler's
batches as they are (NOTE [ A resume checks the checkpoint's plan ]).

NOTE [ A resume checks the checkpoint's plan ]
``Trainer`` resumes by skipping the first ``(global_step % steps_per_epoch) * gradient_accumulation
_steps`` batches of epoch ``global_step // steps_per_epoch`` of the loader it builds now: exact
only when that loader plans the batches the checkpoint's run trained. A dataset of 91 samples
for the checkpoint's 90 (or another seed, bucketing option, number of ranks or accumulation)
skipped the first batches of another plan, silently: samples trained twice and others never
(s29-user: 4 repeated, 1 never seen). So every checkpoint folder BucketTrainer writes holds
``bucketloader_sampler.json``: the training sampler's ``state_dict()`` at that step (the epoch
and batches ``Trainer`` will skip, the sampler's config) with the step count and accumulation it
was counted with. At ``resume_from_checkpoint`` the sampler's own check (every check its
``load_state_dict`` makes, rules across ranks included: NOTE [ An epoch boundary on another
number of ranks ] in :mod:`bucketloader.sampler`; s33: it compared the config alone and refused
a state the sampler loads) compares it with the new run's sampler, and the position with the one
``Trainer`` is about to skip to; either differing is one ``ValueError`` naming what changed and
the ways on. ``ignore_data_skip=True`` (the user asked to skip nothing) is honoured unchecked; a
checkpoint without the file (an older bucketloader, or ``Trainer``'s) resumes as before with one
warning that it cannot be checked, as does a prebuilt ``Bucketing`` whose sampler is a class of
the user's own, not an ``EpochSampler`` (no state to write or compare; it was silent, s29).
Only rank 0 (``args.should_save``) writes the file; the sampler's state holds no rank, and every
rank checks it.

NOTE [ Evaluation and prediction in dataset order ]
The eval and test loaders run an ``EvalSampler``: every sample exactly once, every rank the same
number of steps at the same planned shape, filler rows marked (``sample_mask`` False, ``index``
-1; their labels are -100 and their inputs copies of real rows). ``prediction_step`` pops
``index`` and ``sample_mask`` before the model sees the batch and gathers ``index`` across ranks
at every step, in the order ``evaluation_loop`` gathers the logits and labels; since the loader
is not accelerate's, ``gather_for_metrics`` would have nothing to truncate, so the plain
``gather`` is used (as ``Seq2SeqTrainer`` does) and the filler rows are dropped by index instead.
``compute_metrics`` receives predictions and ``label_ids`` already in dataset order without filler
rows (per batch, filler rows dropped, with ``batch_eval_metrics``, and ``compute_result`` True
at the planned last batch: ``Trainer`` reads it from accelerate's loader, which this is not), and
``evaluate`` / ``predict`` return them in dataset order (with ``eval_do_concat_batches=False``: a
list with one entry per sample; a list of dicts, one per row, such as detection labels, is
taken row by row, and needs that option: concatenation merges different batches' rows).
Every output must have a row per sample: a per-batch value (DETR's ``loss_dict``) is refused
at its batch, naming ``keys_to_ignore_at_inference``. ``eval_loss`` is the mean of the
batches' losses over their real rows, weighted by real rows (``Trainer`` weighs every batch by
``eval_batch_size``, filler rows included).

NOTE [ torch.compile and the planned shapes ]
``TrainingArguments(torch_compile=True)`` normally has accelerate wrap the model in
``torch.compile(dynamic=None)``: dynamo sees a second batch size, marks the dims dynamic and
compiles one symbolic graph, so the static shapes the plan promised are lost. BucketTrainer
compiles the model in place instead (``model.compile(backend=..., mode=..., dynamic=False)``,
accelerate's compile turned off): one static graph per planned shape, and the graphs live on the
model object that training, evaluation and :meth:`BucketTrainer.precompile` all call. Dynamo keeps
at most ``recompile_limit`` graphs per frame (8 by default) and then runs the frame eagerly, so
with a compiled model (``torch_compile=True`` or the user's own ``model.compile``) BucketTrainer
raises the limit to the shapes it planned, training's plus evaluation's (planned as soon as the
training plan is, when ``eval_dataset`` is a ``datasets.Dataset``), and says so once in an info
line. :meth:`BucketTrainer.precompile` (or ``bucketing={"precompile": True}``, run at the start of
``train()``) compiles every one of those shapes before step 1 on real batches of each, built from
the plans' own batches through the loaders' collators, with a training step and a prediction step
exactly as ``Trainer`` runs them (``get_batch_samples``'s ``num_items_in_batch``, the
``sample_mask`` and ``index`` bookkeeping), so training and evaluation then compile nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeGuard

import datasets
import numpy as np
import pyarrow as pa
import torch
import transformers
from transformers.trainer_utils import EvalLoopOutput, EvalPrediction

from bucketloader._arrow import nesting
from bucketloader._files import NotAFile, read_json, write_atomic
from bucketloader._samples import load_samples
from bucketloader._validation import (
    MissingKeyError,
    OptionError,
    keyword,
    keyword_options,
    release,
)
from bucketloader._version import __version__
from bucketloader.evaluation import EvalSampler, restore_order
from bucketloader.hf.bucketing import (
    LABEL_PAD,
    Bucketing,
    ModelInputs,
    check_entry_options,
    dataset_list,
    for_audio,
    for_images,
    for_text,
)
from bucketloader.hf.lengths import lengths, resolve_column, table_and_indices
from bucketloader.hf.loss import (
    ROW_POLICIES,
    loss_policy,
    row_losses,
    settle_problem_type,
    zero_loss,
)
from bucketloader.plan import BucketSpec, TokenBudget
from bucketloader.sampler import BucketSampler, EpochSampler, config_changes

__all__ = ["BucketSeq2SeqTrainer", "BucketTrainer"]

_log = logging.getLogger(__name__)

#: The file each checkpoint folder gets: the training sampler's state at that step (NOTE [ A
#: resume checks the checkpoint's plan ]).
SAMPLER_STATE_NAME = "bucketloader_sampler.json"
_CHECKPOINT_FORMAT = 1

#: Options that only shape training epochs (not used for evaluation batches).
#: (``longest_first`` and ``weights`` were missing: evaluate() refused them from ``bucketing``.)
_TRAIN_ONLY = ("shuffle", "seed", "last_batch", "accumulate", "longest_first", "weights")


class _BucketMixin:
    """What BucketTrainer and BucketSeq2SeqTrainer share (see the module NOTEs)."""

    args: Any
    model: Any
    accelerator: Any
    processing_class: Any
    label_names: list[str]
    compute_metrics: Any
    compute_loss_func: Any
    label_smoother: Any
    loss_is_scaled_for_ga: bool | None
    train_dataset: Any
    eval_dataset: Any
    _train_batch_size: int

    def __init__(
        self,
        *args: Any,
        bucketing: Bucketing | dict[str, Any] | None = None,
        eval_bucketing: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        _check_transformers(type(self).__name__)
        if bucketing is not None and not isinstance(bucketing, (Bucketing, dict)):
            raise TypeError(
                "bucketing must be a Bucketing (bucketloader.hf.for_text(...)) or a dict of "
                f"for_text / for_audio / for_images options, got {type(bucketing).__name__}"
            )
        if eval_bucketing is not None and not isinstance(eval_bucketing, dict):
            raise TypeError(
                "eval_bucketing must be a dict of for_text / for_audio options for evaluation "
                f"and prediction batches, got {type(eval_bucketing).__name__}"
            )
        _check_bucketing_options(bucketing, eval_bucketing)
        if isinstance(bucketing, Bucketing) and isinstance(bucketing.sampler, EvalSampler):
            raise ValueError(  # (it trained on one fixed order, every epoch, without a word)
                f"{type(self).__name__} trains on bucketing=Bucketing(...), but it holds an "
                "EvalSampler (built with evaluation=True: every sample once, in one fixed order, "
                "every epoch, never shuffled); build the training plan without evaluation=True. "
                "Evaluation and prediction batches are planned by the trainer itself "
                "(eval_bucketing={...} for options of their own)"
            )
        given = args[3] if len(args) > 3 else kwargs.get("train_dataset")
        if (
            isinstance(bucketing, Bucketing)
            and given is not None
            and not _same_rows(given, bucketing.dataset)
        ):
            raise ValueError(  # (the loader trained on bucketing.dataset, train_dataset ignored)
                f"{type(self).__name__} trains on the dataset of bucketing=Bucketing(...) "
                f"({_rows_of(bucketing.dataset)}), but got another train_dataset "
                f"({_rows_of(given)}); leave train_dataset out (or pass bucketing.dataset), or "
                "build the bucketing on the dataset you mean: hf.for_text(train_dataset, ...)"
            )
        if isinstance(bucketing, Bucketing) and kwargs.get("train_dataset") is None:
            kwargs["train_dataset"] = bucketing.dataset
        train = args[3] if len(args) > 3 else kwargs.get("train_dataset")
        if not isinstance(bucketing, Bucketing) and _is_stream(train):
            raise TypeError(
                f"{type(self).__name__} plans each epoch from the length of every training "
                f"sample, which a stream does not have up front, but got train_dataset="
                f"{type(train).__name__}; pass a map-style datasets.Dataset (load_dataset(..., "
                "streaming=False), or datasets.Dataset.from_generator(lambda: iter(stream)) "
                "for a stream that fits on disk), or bucketing=Bucketing(sampler, collator, "
                "dataset) over one. A stream that must stay one: use transformers.Trainer's "
                "own loader, or a loop over a bucketloader.stream.BucketIterable (docs: "
                "streams.md)"
            )
        # (the type named with its fix when built; an empty dataset only when training, as
        # Trainer: a trainer built only to evaluate may be given an empty train_dataset)
        empty = isinstance(train, datasets.Dataset) and len(train) == 0
        if not isinstance(bucketing, Bucketing) and train is not None and not empty:
            dataset_list(train, type(self).__name__, "train_dataset")
        user_collator = args[2] if len(args) > 2 else kwargs.get("data_collator")
        self._lm = _language_modeling(user_collator, type(self).__name__)
        super().__init__(*args, **kwargs)
        for argument, options in (("bucketing", bucketing), ("eval_bucketing", eval_bucketing)):
            _check_ranks(argument, options, self.args)
        self._bucketing_options = dict(bucketing) if isinstance(bucketing, dict) else {}
        # The replaced collator's pad multiple (DataCollatorWithPadding(tokenizer,
        # pad_to_multiple_of=8), ...) was dropped with it: shapes of 21 and 59 tokens. It is the
        # default of each build's pad_to_multiple_of, except where that build's options list
        # shapes or boundaries (the user's choice: not rounded up; s20: eval_bucketing=
        # {"shapes": [30, 99]} planned 32 and 104).
        multiple = getattr(user_collator, "pad_to_multiple_of", None)
        self._collator_multiple = None if isinstance(bucketing, Bucketing) else multiple
        self._precompile_on_train = bool(self._bucketing_options.pop("precompile", False))
        self._compile_noted = False
        self._interpolate_noted = False  # (NOTE [ Images at other sizes than the model's ])
        self._precompiled = False
        self._compile_in_place()
        self._note_overrides()
        self._eval_options = dict(eval_bucketing or {})
        self._bucketing: Bucketing | None = bucketing if isinstance(bucketing, Bucketing) else None
        # the pad id of a ready hf.for_packing(..., pad_token_id=...): evaluation's bucket plan
        # pads with it where no tokenizer or config names one (NOTE [ Evaluation after packed
        # training ])
        inner = getattr(getattr(bucketing, "collator", None), "collator", None)
        self._packing_pad: int | None = getattr(inner, "pad_token_id", None)
        if self._bucketing is not None:
            self._check_against_model(self._bucketing, self._bucketing.dataset, "bucketing")
        self._built_rows: int | None = None  # the _train_batch_size of the bucketing built
        if self._bucketing is not None and self.args.auto_find_batch_size:
            warnings.warn(
                f"{type(self).__name__}: auto_find_batch_size=True cannot shrink the batches of "
                "a prebuilt bucketing=Bucketing(...) after an out-of-memory error (it would "
                "retry the same batches down to 'No executable batch size found'); pass "
                "bucketing as a dict of options, which is planned anew at each batch size",
                UserWarning,
                stacklevel=2,
            )
        #: The bucketing of the latest evaluation or prediction (its ``sampler.shapes``).
        self.eval_bucketing: Bucketing | None = None
        self._eval_cache: dict[str, tuple[Any, Bucketing]] = {}
        self._eval_record: _EvalRecord | None = None
        self._eval_mask: torch.Tensor | None = None
        self._step_rows: torch.Tensor | None = None
        self._scaled_default = getattr(self, "loss_is_scaled_for_ga", None)
        self._custom_loss_warned = False
        self._steps_per_epoch: int | None = None  # Trainer's, of the run in progress

    # -- building the batches -----------------------------------------------------------------
    def model_inputs(self) -> list[str]:
        """Names the model's ``forward`` takes, plus the label names (what batches may keep)."""
        names = list(inspect.signature(self._forward_model().forward).parameters)
        return names + [n for n in ("label", "label_ids", *self.label_names) if n not in names]

    def _forward_model(self) -> Any:
        """The model whose ``forward`` a batch's keywords reach: the one inside a PEFT wrapper,
        else :attr:`model`."""
        model: Any = self.model
        base = getattr(model, "get_base_model", None)  # a PEFT wrapper
        return base() if callable(base) else model

    def _build_bucketing(self, dataset: Any, *, evaluation: bool) -> Bucketing:
        opts = dict(self._bucketing_options)
        if evaluation:  # the training options, less its epochs' and batch size, then eval's
            own_budget = bool(self._eval_options.keys() & {"batch_size", "max_tokens"})
            drop = (*_TRAIN_ONLY, "batch_size", *(("max_tokens",) if own_budget else ()))
            opts = {k: v for k, v in opts.items() if k not in drop}
            opts.update(self._eval_options)
        if self._collator_multiple is not None and not {"shapes", "boundaries"} & opts.keys():
            opts.setdefault("pad_to_multiple_of", self._collator_multiple)
        given = opts.pop("column", None)
        column = given or getattr(self.model, "main_input_name", "input_ids")
        columns = [column] if isinstance(column, str) else list(column)
        heads = [c.split(".")[0] if isinstance(c, str) else c for c in columns]  # ("audio.array")
        names = getattr(dataset, "column_names", None)
        if given is None and names is not None and column not in names:
            _refuse_missing_main_input(dataset, column, type(self).__name__)
        if (
            isinstance(dataset, datasets.Dataset)
            and self.args.remove_unused_columns
            and all(h in dataset.column_names for h in heads)  # (else the error that follows
            # listed the columns left after the removal, and the text column was among them)
        ):
            keep = {*self.model_inputs(), *heads}
            unused = [c for c in dataset.column_names if c not in keep]
            dataset = dataset.remove_columns(unused) if unused else dataset
        if not evaluation:
            self._built_rows = self._train_batch_size
            if self.args.auto_find_batch_size:  # (else the two differ only when args changed
                # after the trainer was built, as hyperparameter_search sets them: the batch_size
                # given in bucketing= was scaled down by their ratio)
                ratio = self._train_batch_size / self.args.train_batch_size
                _shrink_to_found_batch_size(opts, ratio)
        if "max_tokens" not in opts:
            opts.setdefault(
                "batch_size", self.args.eval_batch_size if evaluation else self._train_batch_size
            )
        if not evaluation:
            strategy = self._sampling_strategy()  # (NOTE [ The Trainer's sampling strategy ])
            if strategy == "sequential":
                opts.setdefault("shuffle", False)
            elif strategy == "group_by_length":
                opts.setdefault("longest_first", True)
            data_seed = self.args.data_seed  # (Trainer's data order follows it when set)
            opts.setdefault("seed", self.args.seed if data_seed is None else data_seed)
            if self.args.dataloader_drop_last:  # (evaluation keeps every sample, in order)
                opts.setdefault("last_batch", "drop")
        opts.setdefault("num_replicas", self.args.world_size)
        opts.setdefault("rank", self.args.process_index)
        names = getattr(dataset, "column_names", None)  # (a labelless set: no decoder mask
        # to give, and asking for one warns in hf, for an option the user never set)
        labelled = names is None or any(
            n in names for n in ("labels", "decoder_input_ids", *self.label_names)
        )
        opts.setdefault(
            "decoder_attention_mask", labelled and "decoder_attention_mask" in self.model_inputs()
        )
        opts["evaluation"] = evaluation
        opts["sample_mask"] = True  # compute_loss masks the loss of the per-row heads by it
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        config_pad = getattr(getattr(self.model, "config", None), "pad_token_id", None)
        if _is_image(dataset, columns[0]):  # (before audio: float lists too)
            opts.pop("decoder_attention_mask", None)
            config = getattr(self.model, "config", None)
            for name in ("semantic_loss_ignore_index", "loss_ignore_index"):  # (SegFormer...,
                # UperNet: 255; their loss raised "Target -100 is out of bounds" on -100)
                ignore = getattr(config, name, None)
                if isinstance(ignore, int) and not isinstance(ignore, bool):
                    opts.setdefault("label_pad_value", ignore)
                    break
            return for_images(dataset, columns[0], **opts)
        if _is_audio(dataset, columns[0]):
            extractor = getattr(self.processing_class, "feature_extractor", self.processing_class)
            padding = getattr(extractor, "padding_value", None)
            if padding is not None:
                opts.setdefault("pad_value", padding)
            pad_id = getattr(tokenizer, "pad_token_id", None)
            if opts.get("pad_token_id") is None and (pad_id if pad_id is not None else config_pad):
                opts["pad_token_id"] = pad_id if pad_id is not None else config_pad
            return for_audio(dataset, columns[0], **opts)
        if opts.get("pad_token_id") is None and opts.get("tokenizer") is None:
            if getattr(tokenizer, "pad_token_id", None) is not None:
                opts["tokenizer"] = tokenizer
            elif config_pad is not None:
                opts["pad_token_id"] = config_pad
            elif evaluation and self._packing_pad is not None:
                # NOTE [ Evaluation after packed training ]
                # bucketing=hf.for_packing(ds, pad_token_id=0, ...) names the pad id; evaluation
                # plans buckets of its own, which asked for it again: with no tokenizer and no
                # config pad id, evaluate() (and precompile()) raised "needs a pad token id ...
                # pass bucketing={'pad_token_id': <int>}", an option the ready packing object
                # cannot take. It pads with the packing's id instead (eval_bucketing= still wins).
                opts["pad_token_id"] = self._packing_pad
            else:
                raise ValueError(
                    f"{type(self).__name__} needs a pad token id to pad {column!r}, but "
                    f"processing_class={type(self.processing_class).__name__} has no "
                    "pad_token_id and model.config.pad_token_id is None; pass "
                    "bucketing={'pad_token_id': <int>}, a processing_class with a pad token "
                    "(tokenizer.pad_token = tokenizer.eos_token) or set model.config.pad_token_id"
                )
        return for_text(dataset, column, **opts)

    def _loader(self, b: Bucketing) -> Any:
        collate = b.collator
        if isinstance(collate, ModelInputs):
            keep = self.model_inputs() if self.args.remove_unused_columns else None
            collate = collate.replace(
                keep=keep, bookkeeping=True, label_keys=tuple(self.label_names)
            )
        if self._lm is not None and not _packed(collate, self._lm, type(self).__name__):
            collate = LanguageModelingLabels(collate, self._lm)
        workers = self.args.dataloader_num_workers
        # (s30-rev: dataloader_multiprocessing_context was not passed on: a "spawn" asked for,
        # e.g. where forking after CUDA is set up fails, ran the workers forked)
        context = getattr(self.args, "dataloader_multiprocessing_context", None)
        return Bucketing(b.sampler, collate, b.dataset).dataloader(
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers if workers else False,
            prefetch_factor=self.args.dataloader_prefetch_factor if workers else None,
            multiprocessing_context=context if workers else None,
        )

    @property
    def bucketing(self) -> Bucketing | None:
        """The training sampler (its ``shapes`` are every batch shape training sees), collator
        and dataset: planned on first use (this, or training), ``None`` without a non-empty
        ``train_dataset`` (s27: it was ``None`` until the first ``get_train_dataloader()``)."""
        if self._bucketing is None and _has_rows(self.train_dataset):
            self._bucketing = self._train_bucketing()
        return self._bucketing

    @bucketing.setter
    def bucketing(self, value: Bucketing | None) -> None:
        self._bucketing = value

    def _train_bucketing(self) -> Bucketing:
        """The training plan, built anew (when none is, or the batch size changed)."""
        if self._bucketing is not None and self._built_rows not in (None, self._train_batch_size):
            self._bucketing = None  # auto_find_batch_size lowered the batch size: plan anew
        if self._bucketing is None:
            if self.train_dataset is None:
                raise ValueError("Trainer: training requires a train_dataset.")
            self._check_rows(self.train_dataset, "train_dataset")
            with _naming("train_dataset", "bucketing"):
                built = self._build_bucketing(self.train_dataset, evaluation=False)
            self._check_against_model(built, self.train_dataset, "train_dataset")
            self._bucketing = built
        return self._bucketing

    def get_train_dataloader(self) -> Any:
        """A plain ``DataLoader`` over the bucket sampler (NOTE [ Why the DataLoaders ... ])."""
        bucketing = self._train_bucketing()
        self._plan_compiled_shapes()
        return self._loader(bucketing)

    def get_eval_dataloader(self, eval_dataset: str | Any = None) -> Any:
        """A plain ``DataLoader`` over an ``EvalSampler`` (every sample once, dataset order)."""
        if eval_dataset is None and self.eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an eval_dataset.")
        key = eval_dataset if isinstance(eval_dataset, str) else "eval"
        if isinstance(eval_dataset, str):
            dataset = self.eval_dataset[eval_dataset]
        else:
            dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        parent = super().get_eval_dataloader  # type: ignore[misc]
        return self._eval_loader(dataset, key, lambda: parent(eval_dataset))

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        """A plain ``DataLoader`` over an ``EvalSampler`` for ``predict``."""
        parent = super().get_test_dataloader  # type: ignore[misc]
        return self._eval_loader(test_dataset, "test", lambda: parent(test_dataset))

    def _eval_loader(self, dataset: Any, key: str, fallback: Callable[[], Any]) -> Any:
        splits = (datasets.Dataset, datasets.IterableDataset)
        if (
            isinstance(dataset, Mapping)
            and dataset
            and all(isinstance(d, splits) for d in dataset.values())
        ):
            # (a DatasetDict: the warning below told to convert it with from_list, and the
            # Trainer's loader then failed inside datasets: "Invalid key: 0. Please first select
            # a split")
            argument = "test_dataset" if key == "test" else "eval_dataset"
            raise TypeError(
                f"{type(self).__name__} evaluates one dataset at a time, but {argument} is a "
                f"{type(dataset).__name__} of splits {list(dataset)}; pick one, e.g. "
                f"{argument}[{next(iter(dataset))!r}] (evaluate() takes such a dict as "
                "eval_dataset, and reports each split)"
            )
        if not isinstance(dataset, datasets.Dataset):
            convert = (
                "datasets.Dataset.from_generator(lambda: iter(stream))"
                if _is_stream(dataset)
                else "datasets.Dataset.from_list"
            )
            warnings.warn(
                f"{type(self).__name__} buckets evaluation of a datasets.Dataset only; "
                f"{type(dataset).__name__} goes through the Trainer's own loader, with its "
                f"shapes (convert it with {convert} to bucket it)",
                RuntimeWarning,
                stacklevel=3,
            )
            return fallback()
        b = self._eval_bucketing_of(dataset, key)
        self.eval_bucketing = b
        self._plan_compiled_shapes()
        return self._loader(b)

    def _eval_bucketing_of(self, dataset: Any, key: str) -> Bucketing:
        cached = self._eval_cache.get(key)
        if cached is not None and cached[0] is dataset:
            return cached[1]
        names = {"eval": "eval_dataset", "test": "test_dataset"}
        argument = names.get(key, f"eval_dataset[{key!r}]")
        self._check_rows(dataset, argument)
        try:
            with _naming(argument, "eval_bucketing"):
                b = self._build_bucketing(dataset, evaluation=True)
        except ValueError as exc:
            budget = self._bucketing_options.get("max_tokens")
            if budget is None or "max_tokens" in self._eval_options or "max_tokens" not in str(exc):
                raise
            raise ValueError(  # (it said "raise max_tokens": the user raised training's)
                f"{exc} (max_tokens={budget!r} is training's, from bucketing=, which "
                "evaluation follows unless given its own: eval_bucketing={'max_tokens': ...})"
            ) from None
        self._check_against_model(b, dataset, argument)
        self._eval_cache[key] = (dataset, b)
        self._note_unlabelled_eval(dataset, key)
        self._note_eval_batch(b)
        return b

    def _check_rows(self, dataset: Any, argument: str) -> None:
        """An empty dataset, named by the argument it came in (for_text would say only that
        ``lengths['input_ids']`` is empty; Trainer's own loaders fail or report no loss)."""
        if isinstance(dataset, datasets.Dataset) and len(dataset) == 0:
            raise ValueError(
                f"{type(self).__name__} got {argument} with no rows (len({argument}) == 0), so "
                "there is no batch to plan; pass a dataset with rows (did a filter, select or "
                "map leave none?)"
            )

    def _check_against_model(self, b: Bucketing, dataset: Any, argument: str) -> None:
        """What the model cannot take from a plan, refused when it is built (not at a batch)."""
        self._check_packing(b, argument)  # (first: a wrong position start moves the limits)
        self._check_positions(b, dataset, argument)
        self._check_token_labels(b, dataset, argument)

    def _check_packing(self, b: Bucketing, argument: str) -> None:
        """Refuse packed rows the model does not keep apart (NOTE [ Models that mix packed
        documents ])."""
        from bucketloader.hf.packing import PackedInputs

        collate = b.collator
        if not isinstance(collate, PackedInputs):
            return
        name = type(self.model).__name__
        owner = type(self).__name__
        # (in a PEFT wrapper, the model in it, which is what keeps the documents apart or not,
        # named too; s31-rev)
        core = self._forward_model()
        if not isinstance(core, torch.nn.Module):
            core = self.model
        if core is not self.model:
            name = f"{type(core).__name__} (in {name})"
        head = type(core).__name__
        if head.endswith("ForMaskedLM") and collate.causal:
            raise ValueError(
                f"{owner}: {name} is a masked-LM head, whose loss scores each token against its "
                f"own label (no shift), but the packed rows of {argument} are causal-LM rows "
                "labelled with their own tokens (for a model that shifts them), so it would "
                "learn to copy its input; pack masked-LM rows: hf.for_packing(..., tokenizer="
                "tokenizer, mlm_probability=0.15), or bucket it: bucketing=hf.for_text(...) (or "
                "train_dataset=...) with data_collator=DataCollatorForLanguageModeling("
                "tokenizer, mlm=True)"
            )
        if not collate.causal and head.endswith(_CAUSAL_HEADS):
            raise ValueError(
                f"{owner}: {name} is a causal-LM head, which shifts its labels to predict the "
                f"next token, but the packed rows of {argument} are masked-LM rows (mlm_"
                "probability): masked inputs, labels on the masked tokens themselves, and a "
                "bidirectional mask that shows each token its whole document; pack causal-LM "
                "rows: hf.for_packing(...) without mlm_probability"
            )
        _check_sliding_layers_take_mask(core, collate, f"{owner}: {name}", argument)
        start, table = _position_start(self.model)
        given = collate.position_ids_start
        moved = start is not None and given != start
        if moved:
            why = f"{table}: from padding_idx + 1, RoBERTa's convention" if start else table
            wrong = (
                f"{owner}: {name} numbers positions from {start} ({why}), but the packed rows "
                f"of {argument} number each document's from {given} (position_ids_start="
                f"{given}), so every token would be embedded at a position the model never "
                "learned for it"
            )
        at = start if start is not None else given  # (the probe runs at the right start)
        # called as training calls it (no use_cache: each config says), but without a cache
        # where gradient checkpointing turns it off in training (NOTE [ Models that mix packed
        # documents ])
        trained = False if self._checkpointing() else None
        # (a small copy of its architecture where no rank can read its weights: NOTE [ The
        # probe of a model no rank can read ])
        probed, on_copy = _probed_model(self.model, f"{owner}: {name}", argument)

        def leaks(attention: str, use_cache: bool | None = trained) -> float | None:
            # every rank probes, and all take the largest leak (NOTE [ The probe on every rank ])
            return _agreed_leak(
                lambda: _packing_leak(probed, attention, collate, at, use_cache=use_cache),
                owner,
            )

        leak = leaks(collate.attention)
        if leak is None and on_copy:  # (the copy's own pass failed: not checked, said)
            # (s33-tidyA: said "measured on a small copy ...: <why>, whose pass failed", of a
            # check that measured nothing, the failure tied to the model's partitions)
            failed = f"{_unreadable(self.model)}, and the pass of a small copy of it failed"
            _warn_unchecked(f"{owner}: {name}", argument, failed)
        if not leak:  # (kept apart, or no pass could be made on any rank)
            if moved:
                raise ValueError(
                    f"{wrong}; pack with hf.for_packing(..., position_ids_start={start})"
                )
            return
        # (not "positions" for masked-LM rows, which for_packing refuses it for)
        others = [
            a
            for a in ("mask", "positions")
            if a != collate.attention and (collate.causal or a == "mask")
        ]
        keeps = [a for a in others if leaks(a) == 0.0]
        # (a bool mask where the model adds a float one to its scores, eager attention: True
        # adds 1, so every token sees every other; an additive mask of its dtype keeps them apart)
        additive = _float_mask_keeps_apart(self.model, probed, collate, at, trained, owner)
        cached = trained is None and leaks(collate.attention, False) == 0.0  # (the cache mixes)
        mixes = (
            f"{name} does not keep the packed documents of {argument} apart with attention="
            f"{collate.attention!r}{' and a cache' if cached else ''}: a document's logits "
            f"changed by {leak:.3g}{f' ({on_copy})' if on_copy else ''} when only the "
            "document before it in the row changed, so "
            "each document would attend to the ones before it"
            + ("" if collate.causal else " and after it (the rows are masked-LM rows)")
            + ("; with a cache, transformers finds no documents in position_ids" if cached else "")
        )
        restart = f"position_ids_start={start}" if moved else ""
        fixes = []
        if cached:
            fixes.append(
                f"train without a cache ({self._cache_fix()})"
                + (f" and pack with hf.for_packing(..., {restart})" if moved else "")
            )
        if keeps:
            fixes.append(
                f"pack with hf.for_packing(..., {restart + ', ' if moved else ''}attention="
                f"{keeps[0]!r}), which {name} keeps apart"
            )
        if additive is not None:
            fixes.append(
                f"pack with hf.for_packing(..., {restart + ', ' if moved else ''}mask_dtype="
                f"{additive}) (an additive mask, 0 where a token attends: {name}'s attention "
                "adds the mask to its scores, so a bool mask's True adds 1 and hides nothing)"
            )
        fix = (
            " or ".join(fixes)
            if fixes
            else "train it on bucketed rows instead (train_dataset=..., or "
            "bucketing=hf.for_text(...))"
        )
        if moved:
            raise ValueError(f"{wrong}; and {mixes}; {fix}")
        raise ValueError(f"{owner}: {mixes}; {fix}")

    def _check_padding_positions(self, collate: Any, limit: int, table: str, argument: str) -> None:
        """A padding run of a packed row numbers its positions as a document does (NOTE
        [ Packed batch layout ] in :mod:`bucketloader.pack.collator`): up to the row length, or
        an int ``max_seqlen``, which cuts the runs. Past the table's ``limit`` the batch that
        holds such a run (the rows that complete the last batch) failed inside the model, steps
        into training ("IndexError: index out of range in self")."""
        width = max(shape[-1] for shape in collate.shapes)
        m = getattr(collate.collator, "max_seqlen", None)
        run = min(width, m) if isinstance(m, int) else width
        if run <= limit:
            return
        raise ValueError(
            f"{type(self).__name__}: {type(self.model).__name__} embeds at most {limit} "
            f"positions ({table}), but the packed rows of {argument} are {width} tokens long, "
            "and a row's padding (after its documents, or a whole row completing the last "
            f"batch) takes a position for each of up to {run} tokens, as a document does, which "
            "would fail inside the model at the batch that holds it; pass hf.for_packing(..., "
            f"max_seqlen={limit}), which cuts the padding into runs whose positions restart, or "
            f"pack rows of at most row_length={limit} tokens"
        )

    def _checkpointing(self) -> bool:
        """Whether training runs with gradient checkpointing, which turns the model's cache off
        (transformers: ``use_cache=True`` is incompatible with it)."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        # (transformers 5 names it activation_checkpointing; the old name is its alias until v6)
        if any(
            getattr(self.args, n, False)
            for n in ("activation_checkpointing", "gradient_checkpointing")
        ):
            return True
        # (the modules' own flags, which transformers reads: its is_gradient_checkpointing
        # property is deprecated and warns; PEFT's wrappers hold the modules too). Each module
        # turns off its own cache, so every one that can checkpoint must (s31-tidyB: one was
        # enough, and a LLaVA checkpointing its vision tower only kept its language model's
        # cache and mixed the documents); the repeated layers aside, which every_n_layers skips
        flags = [
            m.gradient_checkpointing
            for m in self.model.modules()
            if isinstance(getattr(m, "gradient_checkpointing", None), bool)
            and not isinstance(m, GradientCheckpointingLayer)
        ]
        return bool(flags) and all(flags)

    def _cache_fix(self) -> str:
        """Where the model's cache is on, as the fix to say. ``Trainer`` sets
        ``model.config.use_cache`` from ``TrainingArguments(use_cache=...)`` (False by default);
        some models over a language model (LLaVA; not Gemma 3's, checked) read
        their ``text_config``'s, which stays True (s31-rev: LLaVA trained across documents with
        the default arguments)."""
        config = getattr(self.model, "config", None)
        on = [
            f"model.config.{name}.use_cache = False"
            for name in sorted(vars(config) if config is not None else {})
            if name.endswith("_config") and getattr(getattr(config, name), "use_cache", None)
        ]
        if getattr(config, "use_cache", None):
            on.insert(0, "TrainingArguments(use_cache=False), the default")
        if not on:
            return "use_cache=False"
        # (every one named is to be turned off: "A; B" read as a choice, and LLaVA's top config
        # alone leaves its language model the cache; s31-tidyB)
        return on[0] if len(on) == 1 else ", ".join(on[:-1]) + ", and " + on[-1]

    def _check_token_labels(self, b: Bucketing, dataset: Any, argument: str) -> None:
        """A token-classification head takes one label per token, so its labels must follow the
        input; one row of another length made them a target (NOTE [ Target columns ]), padded
        on its own: shapes that happened to agree trained silently (misaligned under left
        padding), others failed inside the loss ("Expected input batch_size (424) to match
        target batch_size (208)")."""
        collate = b.collator
        targets = getattr(collate, "targets", None)
        main = getattr(collate, "main_input", None)
        if (
            not type(self.model).__name__.endswith("ForTokenClassification")
            or targets is None
            or not isinstance(main, str)
            or not isinstance(dataset, datasets.Dataset)
        ):
            return
        for column in targets.columns:
            if not (column.startswith("label") or column in self.label_names):
                continue
            own, tokens = lengths(dataset, column), lengths(dataset, main)
            bad = np.flatnonzero(own != tokens)
            if not bad.size:
                continue
            i = int(bad[0])
            raise ValueError(
                f"{type(self).__name__}: {type(self.model).__name__} takes one label per token, "
                f"but {argument}'s {column!r} differ in length from its {main!r} in {bad.size:,} "
                f"of {own.size:,} rows (the first: row {i}, {int(own[i])} labels for "
                f"{int(tokens[i])} tokens); "
                "align the labels with the tokens (tokenizer(words, is_split_into_words=True)"
                ".word_ids(), -100 on special tokens), or leave those rows out"
            )

    def _check_positions(self, b: Bucketing, dataset: Any, argument: str) -> None:
        """Refuse a text plan longer than the model's learned position table (BERT's
        ``max_position_embeddings``, GPT-2's ``n_positions``): it failed at the first such batch,
        inside the model ("The expanded size of the tensor (119) must match the existing size
        (64)"), or at evaluation, after training; a packed document too (GPT-2: "index out of
        range in self"), whose positions restart at 0. Models without one (rotary, relative)
        pass."""
        from bucketloader.hf.packing import PackedInputs

        collate = b.collator
        main = getattr(collate, "main_input", None) or ""
        packed = isinstance(collate, PackedInputs)
        if not packed and (
            not isinstance(collate, ModelInputs)
            or not main
            or not isinstance(dataset, datasets.Dataset)  # (a prebuilt one's audio rows...)
            or _is_image(dataset, main)
            or _is_audio(dataset, main)
        ):
            return
        limit, table = _position_limit(self.model)
        if limit is None:
            return
        if packed:  # (positions restart in each document of a packed row)
            sizes = b.sampler.spec.sizes
            if sizes.size and int(sizes.max()) > limit:
                i = int(sizes.argmax())
                raise ValueError(
                    f"{type(self).__name__}: {type(self.model).__name__} embeds at most {limit} "
                    f"positions ({table}), but {argument} packs documents of up to "
                    f"{int(sizes[i])} tokens (document {i}), whose positions reach "
                    f"{int(sizes[i]) - 1}, which would fail inside the model; cut or split the "
                    f"documents to {limit} tokens in the dataset (dataset.map), or pack rows of "
                    "at most that many tokens with overflow='truncate' (or 'drop')"
                )
            self._check_padding_positions(collate, limit, table, argument)
            return
        names = b.sampler.shape_table.input_names
        planned = {c: np.array([s[d + 1] for s in b.sampler.shapes]) for d, c in enumerate(names)}
        config = getattr(self.model, "config", None)
        if collate.targets is not None and getattr(config, "is_encoder_decoder", False):
            decoder = ("labels", "decoder_input_ids")  # (a decoder's positions: BART's own table)
            planned.update({c: v for c, v in collate.targets.lengths.items() if c in decoder})
        column, lens = max(planned.items(), key=lambda kv: int(kv[1].max()))
        longest = int(lens.max())
        if longest <= limit:
            return
        step = int(np.gcd.reduce(lens)) if len(set(lens.tolist())) > 1 else 1
        fit = limit - limit % step if step <= limit else limit  # (pad_to_multiple_of's, if any)
        rows = lengths(dataset, column)
        i = int(rows.argmax())
        if column not in names:  # a target: padded per cell, never cut by the sampler
            fix = (
                f"truncate the targets when tokenizing (tokenizer(text_target=..., "
                f"truncation=True, max_length={fit})), or leave the long rows out: dataset = "
                f"dataset.filter(lambda row: len(row[{column!r}]) <= {fit})"
            )
        else:
            cut = f"'max_length': {fit}, 'overflow': 'truncate'"
            option = {
                "train_dataset": f"bucketing={{{cut}}}",
                "bucketing": f"hf.for_text(..., max_length={fit}, overflow='truncate')",
            }.get(argument, f"eval_bucketing={{{cut}}}")
            fix = (
                f"truncate when tokenizing (tokenizer(..., truncation=True, max_length={fit})), "
                f"or have the sampler cut or leave out the long rows: {option} (or 'drop')"
            )
        raise ValueError(
            f"{type(self).__name__}: {type(self.model).__name__} embeds at most {limit} "
            f"positions ({table}), but {argument} plans {column!r} batches {longest} long (its "
            f"longest row, {i}, has {int(rows[i])}), which would fail inside the model; {fix}"
        )

    # -- compiling the planned shapes (NOTE [ torch.compile and the planned shapes ]) -----------
    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        """``Trainer``'s, with accelerate's ``torch.compile`` turned off: BucketTrainer compiles
        the model in place with ``dynamic=False`` (:meth:`_compile_in_place`)."""
        args = super()._build_accelerator_args(**kwargs)  # type: ignore[misc]
        if self.args.torch_compile and "dynamo_plugin" in args:
            from accelerate.utils import TorchDynamoPlugin

            args["dynamo_plugin"] = TorchDynamoPlugin(backend="no")
        return args

    def _compile_in_place(self) -> None:
        if not self.args.torch_compile or _is_compiled(self.model):
            return
        self.model.compile(
            backend=self.args.torch_compile_backend or "inductor",
            mode=self.args.torch_compile_mode,
            dynamic=False,
        )
        _log.info(
            "%s: torch_compile=True compiles one static graph per planned batch shape "
            "(model.compile(backend=%r, dynamic=False)), not accelerate's dynamic-shape compile",
            type(self).__name__,
            self.args.torch_compile_backend,
        )

    def _eval_datasets(self) -> dict[str, Any]:
        """The eval datasets BucketTrainer buckets, by the key ``get_eval_dataloader`` uses."""
        ev = self.eval_dataset
        if isinstance(ev, datasets.Dataset):
            return {"eval": ev}
        if isinstance(ev, Mapping):
            return {k: v for k, v in ev.items() if isinstance(v, datasets.Dataset)}
        return {}

    def _plan_compiled_shapes(self) -> None:
        """With a compiled model: plan the eval shapes now, and raise dynamo's recompile limit to
        every planned shape (train + eval), saying so once."""
        if not _is_compiled(self.model):
            return
        for key, dataset in self._eval_datasets().items():
            self._eval_bucketing_of(dataset, key)
        train = len(self._bucketing.sampler.shapes) if self._bucketing is not None else 0
        evals = sum(len(b.sampler.shapes) for _, b in self._eval_cache.values())
        import torch._dynamo.config as config

        from bucketloader.compile.precompile import raise_recompile_limit

        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        before = int(getattr(config, name))
        limit = raise_recompile_limit(train + evals)
        if limit > before and not self._compile_noted:
            self._compile_noted = True
            _log.info(
                "%s: raised torch._dynamo.config.%s from %d to %d for the %d train + %d eval "
                "planned shapes (past it, dynamo would run them eagerly)",
                type(self).__name__,
                name,
                before,
                limit,
                train,
                evals,
            )

    def precompile(self, *, cache: Any = False, progress: bool = False) -> list[Any]:
        """Compile the compiled model for every planned train and eval shape, before step 1.

        Needs a compiled model: ``TrainingArguments(torch_compile=True)`` (compiled with
        ``dynamic=False``, NOTE [ torch.compile and the planned shapes ]) or your own
        ``model.compile(dynamic=False)``. Runs one training step (forward and backward, as
        ``Trainer.training_step`` does, with ``get_batch_samples``' ``num_items_in_batch``) on a
        real batch of every training shape and one ``prediction_step`` on a real batch of every
        eval shape, through the loaders' own collators; the model (parameters, gradients,
        buffers) and the random generators are restored afterwards
        (:func:`~bucketloader.compile.precompile`). Training and ``evaluate()`` then compile no
        new graph. ``bucketing={"precompile": True}`` runs it at the start of ``train()``.

        Args:
            cache: passed to :func:`~bucketloader.compile.precompile` (``False``: leave
                inductor's cache alone; ``None``: the default :class:`CompileCache`).
            progress: show a progress bar.

        Returns:
            The :class:`~bucketloader.compile.PrecompileReport` of training, then one per eval
            dataset.
        """
        from bucketloader.compile import precompile

        if not _is_compiled(self.model):
            raise ValueError(
                f"{type(self).__name__}.precompile() needs a compiled model: pass "
                "TrainingArguments(torch_compile=True) (compiled with dynamic=False, one graph "
                "per planned shape), or call model.compile(dynamic=False) before building the "
                "trainer"
            )
        train_loader = self.get_train_dataloader()
        model = self.model
        device = self.args.device
        reports = []

        def train_step(batch: Any) -> None:
            _, num_items = self.get_batch_samples(iter([batch]), 1, device)
            self.training_step(model, batch, num_items)  # type: ignore[attr-defined]

        was_training = model.training
        try:
            model.train()
            reports.append(
                precompile(
                    train_step,
                    _PlannedBatches(train_loader),
                    restore=[model],
                    cache=cache,
                    progress=progress,
                )
            )
            model.eval()
            for key, dataset in self._eval_datasets().items():
                loader = self._loader(self._eval_bucketing_of(dataset, key))

                def eval_step(batch: Any) -> None:
                    self.prediction_step(model, dict(batch), prediction_loss_only=False)

                reports.append(
                    precompile(
                        eval_step,
                        _PlannedBatches(loader),
                        restore=[model],
                        cache=cache,
                        progress=progress,
                    )
                )
        finally:
            model.train(was_training)
        self._precompiled = True
        return reports

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; with ``bucketing={"precompile": True}``, :meth:`precompile` first."""
        if self._precompile_on_train and not self._precompiled:
            self.precompile()
        return super().train(*args, **kwargs)  # type: ignore[misc]

    # -- checkpoints (NOTE [ A resume checks the checkpoint's plan ]) ------------------------------
    def _init_training_state(
        self,
        max_steps: int,
        num_update_steps_per_epoch: int,
        num_train_epochs: int,
        resume_from_checkpoint: str | None,
        trial: Any,
    ) -> tuple[int, int]:
        """``Trainer``'s, then, when resuming, checks the checkpoint's plan against this run's."""
        epoch, skip = super()._init_training_state(  # type: ignore[misc]
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        self._steps_per_epoch = int(num_update_steps_per_epoch)
        from transformers.trainer import TRAINER_STATE_NAME

        if resume_from_checkpoint is not None and os.path.isfile(
            os.path.join(resume_from_checkpoint, TRAINER_STATE_NAME)  # (else Trainer skips
            # nothing and starts at step 0)
        ):
            self._check_checkpoint_plan(str(resume_from_checkpoint), epoch, skip)
        return epoch, skip

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """``Trainer``'s, with the training sampler's state in ``bucketloader_sampler.json``
        (written first, so that ``trainer_state.json``, written last, marks a whole folder)."""
        sampler = self._bucketing.sampler if self._bucketing is not None else None
        steps = self._steps_per_epoch
        if self.args.should_save and isinstance(sampler, EpochSampler) and steps:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = os.path.join(
                self._get_output_dir(trial=trial),  # type: ignore[attr-defined]
                f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}",  # type: ignore[attr-defined]
            )
            os.makedirs(folder, exist_ok=True)
            record = _checkpoint_record(
                sampler,
                self.state.global_step,  # type: ignore[attr-defined]
                steps,
                self.args.gradient_accumulation_steps,
            )
            text = json.dumps(record, indent=1, sort_keys=True) + "\n"
            write_atomic(os.path.join(folder, SAMPLER_STATE_NAME), text.encode())
        super()._save_checkpoint(model, trial)  # type: ignore[misc]

    def _check_checkpoint_plan(self, checkpoint: str, epoch: int, skip: int) -> None:
        """Refuse a resume whose skip would land elsewhere than the checkpoint's run stopped:
        another plan (the sampler's config) or another position (accumulation); warn once for
        a checkpoint without the file. ``ignore_data_skip=True`` skips nothing: not checked."""
        sampler = self._bucketing.sampler if self._bucketing is not None else None
        if self.args.ignore_data_skip or sampler is None:
            return
        owner = type(self).__name__
        path = os.path.join(checkpoint, SAMPLER_STATE_NAME)
        where = f"batch {skip} of epoch {epoch}" if skip else f"the start of epoch {epoch}"
        if not isinstance(sampler, EpochSampler):  # (s29: a prebuilt Bucketing of the user's
            # own sampler class resumed unchecked, without a word)
            warnings.warn(
                f"{owner}: bucketing's sampler is a {type(sampler).__name__}, not a "
                "bucketloader sampler, so its plan has no state to save or check: whether this "
                f"run plans the batches the run of checkpoint {checkpoint!r} trained cannot be "
                f"checked; it resumes at {where} of this run's plan, as Trainer does, which is "
                "exact only if your sampler plans the same batches again (same train_dataset, "
                "options and TrainingArguments). A BucketSampler, PackSampler or ShardedSampler "
                f"(or a subclass) has its {SAMPLER_STATE_NAME} written and checked",
                UserWarning,
                stacklevel=5,
            )
            return
        try:
            # through a link, as Trainer reads its own files: a checkpoint downloaded from the
            # Hub (huggingface_hub's snapshot folders link every file to a blob) was refused as
            # "not one BucketTrainer wrote (unreadable: a symbolic link)" (s30-rev)
            record = read_json(os.path.realpath(path), max_bytes=1 << 20)
        except FileNotFoundError:
            warnings.warn(
                f"{owner}: checkpoint {checkpoint!r} has no {SAMPLER_STATE_NAME} (saved by an "
                "older bucketloader, or by transformers.Trainer), so whether this run plans the "
                f"batches that run trained cannot be checked; it resumes at {where} of this "
                "run's plan, as Trainer does, which is exact only with the same train_dataset, "
                "bucketing options and TrainingArguments (seed, batch size, "
                "gradient_accumulation_steps, number of processes)",
                UserWarning,
                stacklevel=5,
            )
            return
        except (OSError, ValueError, NotAFile) as exc:
            record = f"unreadable: {exc}"
        state = record.get("sampler_state") if isinstance(record, dict) else None
        accumulation = record.get("gradient_accumulation_steps") if state is not None else None
        if not isinstance(state, dict) or not isinstance(accumulation, int):
            raise ValueError(
                f"{owner} cannot check checkpoint {checkpoint!r}: its {SAMPLER_STATE_NAME} is not "
                f"one {owner} wrote ({record if isinstance(record, str) else 'other contents'}); "
                f"restore the file, or delete it to resume at {where} unchecked (with a "
                "warning), as Trainer does"
            )
        ways = _ways_on(state, epoch, skip)
        try:
            # (the sampler's own check, ranks' rules included: NOTE [ An epoch boundary on
            # another number of ranks ]; s32 compared _config() alone and refused states the
            # sampler loads, such as one between epochs over shards cut otherwise)
            sampler._checked_state(state)
        except (TypeError, ValueError) as exc:
            changes = config_changes(state.get("config") or {}, sampler._config())
            what = _what_changed(changes) if changes else f"its sampler refuses the state: {exc}"
            why = (
                f"Trainer would skip the first {skip} batches of this run's epoch {epoch} as the "
                "ones already trained, but this run plans other batches, so samples would be "
                "trained twice and others never"
                if skip
                else f"Trainer would train this run's epoch {epoch} from its first batch, but "
                "of another plan than the one the checkpoint's run trained on, so this run "
                "would not continue that one"
            )
            raise ValueError(
                f"{owner} cannot resume from checkpoint {checkpoint!r} exactly: {what}. {why}. "
                f"{ways}"
            ) from exc
        if (state["epoch"], state["batches_yielded"]) != (epoch, skip):
            # (a state between epochs on other ranks passes the sampler's check, and lands
            # here: Trainer counts the epoch from the steps, which the ranks change)
            theirs, mine = state["config"].get("num_replicas"), sampler.num_replicas
            ranks = ("", "") if theirs == mine else (f" over {mine} rank(s)", f" over {theirs}")
            counted = (
                f"gradient_accumulation_steps={self.args.gradient_accumulation_steps}, the "
                f"checkpoint's {accumulation}"
                if accumulation != self.args.gradient_accumulation_steps
                else f"{self._steps_per_epoch} optimizer steps per epoch{ranks[0]}, the "
                f"checkpoint's {record.get('steps_per_epoch')}{ranks[1]}"
            )
            raise ValueError(
                f"{owner} cannot resume from checkpoint {checkpoint!r} exactly: its run had "
                f"trained {state['batches_yielded']} batches of epoch {state['epoch']}, but "
                f"Trainer would skip to {where} ({counted}: it counts the batches to skip from "
                f"the optimizer steps), so samples would be trained twice or never. {ways}"
            )

    # -- saying what is overridden (issue 22, trap 6) ---------------------------------------------
    def _sampling_strategy(self) -> str | None:
        """``args.train_sampling_strategy`` (``group_by_length=True`` before transformers 5)."""
        if getattr(self.args, "group_by_length", False):
            return "group_by_length"
        return getattr(self.args, "train_sampling_strategy", None)

    def _note_overrides(self) -> None:
        if getattr(self.args, "dataloader_in_order", True) is False:
            # (s30-rev: ignored without a word; dataloader() refuses in_order=False for the
            # same reasons, but TrainingArguments are shared with other trainers)
            warnings.warn(  # (s31-rev: "not used" held for its own loaders only)
                f"{type(self).__name__}: TrainingArguments(dataloader_in_order=False) is not "
                "used by its bucketed loaders: they hand the batches to the loop in the plan's "
                "order, which Trainer's resume (it skips the first batches of the plan) and "
                "evaluation in dataset order rely on (an eval or test dataset that is not a "
                "datasets.Dataset goes through the Trainer's own loader, which does use it); "
                "leave dataloader_in_order at True to silence this",
                UserWarning,
                stacklevel=4,
            )
        strategy = self._sampling_strategy()
        if strategy == "group_by_length":
            _log.info(
                "%s: train_sampling_strategy='group_by_length': the bucket sampler groups "
                "samples by length at planned shapes, and starts each epoch with a batch of the "
                "largest shape (longest_first=True), as LengthGroupedSampler does",
                type(self).__name__,
            )
        elif strategy == "batch_rebalance":
            _log.info(
                "%s: train_sampling_strategy='batch_rebalance' is not used: the bucket sampler "
                "plans the batches (balance=True spreads each bucket evenly over its steps)",
                type(self).__name__,
            )

    def _note_unlabelled_eval(self, dataset: Any, key: str) -> None:
        """Packed training makes its own labels; evaluation batches (``for_text``) have none
        unless the dataset or a ``DataCollatorForLanguageModeling`` gives them, and then
        ``evaluate()`` reports no ``eval_loss``: say so once per evaluation set."""
        from bucketloader.hf.packing import PackedInputs

        train = self._bucketing.collator if self._bucketing is not None else None
        if key == "test" or self._lm is not None or not isinstance(train, PackedInputs):
            return
        if "labels" in dataset.column_names:
            return
        kind, mlm = ("causal", "False") if train.causal else ("masked-LM", "True")
        warnings.warn(
            f"{type(self).__name__}: training packs rows with their own {kind} labels, but the "
            f"evaluation set {key!r} has no 'labels' column, so evaluate() reports no eval_loss; "
            f"pass data_collator=DataCollatorForLanguageModeling(tokenizer, mlm={mlm}), which "
            "labels the evaluation batches and leaves the packed labels as they are",
            UserWarning,
            stacklevel=4,
        )

    def _note_eval_batch(self, b: Bucketing) -> None:
        wanted = self.args.eval_batch_size
        rows = max((int(s[0]) for s in b.sampler.shapes), default=wanted)
        if "max_tokens" in self._eval_options or "max_tokens" in self._bucketing_options:
            return
        if rows < wanted:
            _log.info(
                "%s: evaluation batches hold at most %d rows, fewer than "
                "per_device_eval_batch_size=%d: balance=True splits each bucket evenly over "
                "its steps (fewer filler rows); eval_bucketing={'balance': False} keeps %d",
                type(self).__name__,
                rows,
                wanted,
                wanted,
            )

    # -- the loss ------------------------------------------------------------------------------
    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        """As ``Trainer``'s, and counts the real rows of the optimizer step for the per-row
        losses (NOTE [ Filler rows and the loss, per head ] in :mod:`bucketloader.hf.loss`)."""
        batches, num_items = super().get_batch_samples(  # type: ignore[misc]
            epoch_iterator, num_batches, device
        )
        batches = [_NoTargets(b) if self._no_targets(b) else b for b in batches]
        self._step_rows = None
        if batches and isinstance(batches[0], Mapping) and "sample_mask" in batches[0]:
            if loss_policy(self.model, batches[0].get("labels")) in ROW_POLICIES:
                for b in batches:
                    self._warn_custom_loss_fillers(b["sample_mask"])
                rows = sum(b["sample_mask"].sum() for b in batches).reshape(1).to(device)
                if self.args.average_tokens_across_devices and self.args.world_size > 1:
                    rows = self.accelerator.gather(rows).sum()
                self._step_rows = rows.reshape(())
        return batches, num_items

    def _warn_custom_loss_fillers(self, mask: Any) -> None:
        """A ``compute_loss_func`` gets whole planned batches: on a per-row head (regression,
        multi-label, CTC) a filler row's label -100 is a target value (an MSE to -100: a loss
        of 385 for 0.5, silently). Said once, with the count, from a CPU batch (no sync)."""
        if self._custom_loss_warned or self.compute_loss_func is None:
            return
        if not isinstance(mask, torch.Tensor) or mask.device.type != "cpu":
            return
        fillers = int((~mask.bool()).sum())
        if not fillers:
            return
        self._custom_loss_warned = True
        warnings.warn(
            f"{type(self).__name__}: compute_loss_func gets whole planned batches, filler rows "
            f"included ({fillers} of this batch's {mask.numel()} rows, their labels -100), and "
            f"{type(self.model).__name__}'s loss does not ignore -100 by itself (per row: "
            "regression, multi-label, CTC); mask them in your loss (keep = labels != -100 "
            "per row), or drop compute_loss_func (BucketTrainer then averages the real rows), "
            "or train without filler rows: bucketing={'last_batch': 'fill'}",
            UserWarning,
            stacklevel=2,
        )

    def _track_num_input_tokens(self, inputs: Any) -> Any:
        """As ``Trainer``'s; ``include_num_input_tokens_seen="non_padding"`` counts the real
        rows' tokens only (filler rows copy real rows, masks included: 820 tokens counted for
        700 on 21 samples in 3 buckets of 4 rows)."""
        rows = inputs.get("sample_mask") if isinstance(inputs, Mapping) else None
        mask = inputs.get("attention_mask") if isinstance(inputs, Mapping) else None
        if (
            self.args.include_num_input_tokens_seen == "non_padding"
            and isinstance(rows, torch.Tensor)
            and isinstance(mask, torch.Tensor)
            and mask.ndim == 2
        ):
            real = rows.to(mask.device, mask.dtype)[:, None]
            inputs = {**inputs, "attention_mask": mask * real}
        return super()._track_num_input_tokens(inputs)  # type: ignore[misc]

    def _no_targets(self, batch: Any) -> bool:
        """Whether a training batch has nothing to learn from: no real row (``sample_mask``
        all False), or integer ``labels`` with no target that the model's loss counts (as
        ``Trainer`` counts ``num_items_in_batch``). Read on the CPU batch, before it moves to
        the device: no synchronisation (NOTE [ A step with no real row ])."""
        if not isinstance(batch, Mapping):
            return False
        mask = batch.get("sample_mask")
        if isinstance(mask, torch.Tensor) and not bool(mask.any()):
            return True
        labels = batch.get("shift_labels", batch.get("labels"))
        if not isinstance(labels, torch.Tensor) or labels.is_floating_point():
            return False
        if "shift_labels" not in batch and getattr(self, "_loss_shifts_labels", False):
            labels = labels[..., 1:]
        return not bool((labels != LABEL_PAD).any())

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """The loss of the batch's real rows (NOTE [ Filler rows and the loss, per head ]).

        Heads whose own loss ignores the filler rows' -100 labels use ``Trainer``'s
        ``compute_loss``; CTC, regression and multi-label heads are run without ``labels`` and
        their loss is computed per row and reduced over real rows.
        """
        empty = isinstance(inputs, _NoTargets) and model.training
        inputs = dict(inputs)
        mask = inputs.pop("sample_mask", None)
        inputs.pop("index", None)
        self._complete_inputs(inputs)
        if mask is None:
            mask = self._eval_mask
        labels = inputs.get("labels")
        settle_problem_type(model, labels)
        policy = loss_policy(model, labels) if labels is not None else "ignore_index"
        if (
            policy not in ROW_POLICIES
            or mask is None
            or self.compute_loss_func is not None
            or self.label_smoother is not None
        ):
            self.loss_is_scaled_for_ga = self._scaled_default
            if not model.training:
                # This rank's batch mean: evaluation_loop weighs batches by their real rows. (A
                # count gathered over ranks would make each rank's loss a share of a global sum.)
                num_items_in_batch = None
            loss, outputs = super().compute_loss(  # type: ignore[misc]
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
            if empty:  # the model's loss is 0 / 0 here (NOTE [ A step with no real row ])
                loss = zero_loss(outputs)
            return (loss, outputs) if return_outputs else loss
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        per_row, reduction = row_losses(model, outputs, labels, inputs, policy)
        mask = mask.to(per_row.device)
        total = torch.where(mask, per_row, torch.zeros_like(per_row)).sum()
        if reduction == "sum":
            loss = total
        elif model.training and self._step_rows is not None:
            loss = total / self._step_rows.to(total.device).clamp(min=1)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                loss = loss * self.args.world_size  # DDP averages the ranks' gradients
        else:
            loss = total / mask.sum().clamp(min=1)
        # "sum", and "mean" over the step's rows, are already normalised for accumulation; a
        # mean over this batch alone is divided by the accumulation steps, as Trainer does.
        scaled = reduction == "sum" or self._step_rows is not None
        self.loss_is_scaled_for_ga = scaled
        if model.training and not _TRAINER_TAKES_SCALED:  # (None: the older rule's reading)
            self.loss_is_scaled_for_ga = None
            loss = _as_older_trainer_scales(self, loss, scaled, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    # -- evaluation and prediction in dataset order ------------------------------------------
    def prediction_step(
        self,
        model: Any,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
        **gen_kwargs: Any,
    ) -> Any:
        """As ``Trainer``'s, with ``index`` and ``sample_mask`` taken out of the batch first
        (NOTE [ Evaluation and prediction in dataset order ])."""
        self._prepare_prediction(model, inputs, prediction_loss_only)
        self._complete_inputs(inputs)
        index = inputs.pop("index", None)
        mask = inputs.pop("sample_mask", None)
        self._eval_mask = mask
        if loss_policy(model, inputs.get("labels")) in ROW_POLICIES:
            self._warn_custom_loss_fillers(mask)
        try:
            loss, logits, labels = super().prediction_step(  # type: ignore[misc]
                model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs
            )
        finally:
            self._eval_mask = None
        if self._eval_record is not None and index is not None:
            _check_per_row(logits, int(index.shape[0]), type(model).__name__)
            self._eval_record.add(self, index, mask, loss)
        return loss, logits, labels

    def _complete_inputs(self, inputs: dict[str, Any]) -> None:
        """NOTE [ Images at other sizes than the model's ]
        A ViT (DeiT, BEiT, Swin, CLIP's vision tower, SigLIP's classifier, ...) has position
        embeddings for ``config.image_size`` (``config.vision_config.image_size`` for a model
        over a vision tower) and refuses any other size unless its ``forward`` is given
        ``interpolate_pos_encoding=True`` ("Input image size (32*64) doesn't match model
        (32*32)" at the first batch of another size; s28-hf), and a plan of images of several
        sizes has batches of other sizes by design. So a batch whose ``pixel_values`` are not
        ``image_size`` gets ``interpolate_pos_encoding=True`` where the model's ``forward`` takes
        it and the batch does not set it (its embeddings are interpolated to the batch's patch
        grid: what the option is for); a batch at ``image_size`` is left as it was (no change
        for models trained at one size), and a model that takes no such option (DETR, YOLOS,
        ResNet: any size) is not touched. Said once in an info line. The check reads the
        tensor's shape only (no device sync). A classifier whose ``forward`` takes the option
        only through ``**kwargs``, passed on to its tower (CLIP's, MetaCLIP 2's:
        :meth:`_takes_interpolation`), takes it too (s31: not given it, it failed at the first
        batch of another size)."""
        if "interpolate_pos_encoding" in inputs:
            return
        pixels = inputs.get("pixel_values")
        if not isinstance(pixels, torch.Tensor) or pixels.dim() != 4:
            return
        config = getattr(self.model, "config", None)
        size = getattr(config, "image_size", None)
        if size is None:  # (a classifier over a vision tower keeps it in its vision_config:
            # SiglipForImageClassification, which takes the option, was never given it; s30-rev)
            size = getattr(getattr(config, "vision_config", None), "image_size", None)
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size, size)
        if not isinstance(size, (tuple, list)) or tuple(pixels.shape[-2:]) == tuple(size):
            return
        if not self._takes_interpolation():
            return
        inputs["interpolate_pos_encoding"] = True
        if not self._interpolate_noted:
            self._interpolate_noted = True
            _log.info(
                "%s: passing interpolate_pos_encoding=True to %s for batches of images other "
                "than its image_size %s (here %s): its position embeddings are interpolated to "
                "the batch's size",
                type(self).__name__,
                type(self.model).__name__,
                "x".join(map(str, size)),
                "x".join(map(str, pixels.shape[-2:])),
            )

    def _takes_interpolation(self) -> bool:
        """Whether the model's ``forward`` takes ``interpolate_pos_encoding``: by name, or
        through ``**kwargs`` where one of its own submodules' ``forward`` names it, the tower the
        keywords go on to (``CLIPForImageClassification.forward(pixel_values, labels,
        **kwargs)`` calls ``self.vision_model(pixel_values, **kwargs)``). A scan of 5.x's
        image classifiers: those with ``**kwargs`` pass them to their backbone, but Perceiver's
        conv / Fourier ones, which take and drop them (the option changes nothing there); those
        whose backbone names no such option (ConvNeXt, DINOv2, ResNet) are left alone."""
        model = self._forward_model()
        params = inspect.signature(model.forward).parameters
        if "interpolate_pos_encoding" in params:
            return True
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return False
        return any(
            "interpolate_pos_encoding" in inspect.signature(child.forward).parameters
            for child in model.children()
        )

    def _prepare_prediction(
        self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool
    ) -> None:
        """Complete a batch in place before :meth:`prediction_step` runs it (nothing here)."""

    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """``Trainer.evaluation_loop`` with outputs in dataset order and filler rows dropped."""
        sampler = getattr(dataloader, "batch_sampler", None)
        if not isinstance(sampler, EvalSampler):
            return super().evaluation_loop(  # type: ignore[misc]
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
        record = _EvalRecord(
            sampler.num_samples,
            concat=self.args.eval_do_concat_batches,
            positions=sampler.positions,
            steps=len(sampler),
        )
        user_metrics = self.compute_metrics
        if user_metrics is not None:
            self.compute_metrics = record.metrics_hook(user_metrics, self.args.batch_eval_metrics)
        self._eval_record = record
        self.gather_function = self.accelerator.gather  # see the module NOTE
        try:
            out = super().evaluation_loop(  # type: ignore[misc]
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
        finally:
            self.compute_metrics = user_metrics
            self._eval_record = None
        metrics = dict(out.metrics)
        if record.losses:
            metrics[f"{metric_key_prefix}_loss"] = record.loss()
        return EvalLoopOutput(
            predictions=record.restore(out.predictions),
            label_ids=record.restore(out.label_ids),
            metrics=metrics,
            num_samples=sampler.num_samples,
        )


# NOTE [ Losses already scaled for accumulation, on older transformers ]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``Trainer.training_step`` divides the loss by the accumulation steps unless told the loss is
# already normalised for them. transformers 5.19 added the switch compute_loss sets above,
# ``loss_is_scaled_for_ga``; before it (4.57 through 5.18, the device machine's image has one)
# the rule was fixed: divide unless the model takes loss kwargs and the step counted its items,
# or a ``compute_loss_func`` is set. Reading the missing attribute failed every BucketTrainer
# there (47 tests on a CUDA machine with transformers 5.17). On those versions the row losses
# are brought to what that rule will do to them: a loss already scaled is multiplied by the
# steps the rule divides by, a per-batch mean the rule leaves alone is divided, so the gradient
# and the logged loss equal the newer versions' (test_trainer: accumulation on either rule).

#: Whether this transformers' ``training_step`` reads ``loss_is_scaled_for_ga`` (5.19 and later).
_TRAINER_TAKES_SCALED = hasattr(transformers.Trainer, "loss_is_scaled_for_ga")

#: The oldest transformers the trainers are tested with (5.17 and the newest, by the suite);
#: 4.57 failed 9 of the trainer tests (other arguments and hooks), the versions between untested.
MIN_TRANSFORMERS = (5, 17)


@contextlib.contextmanager
def _naming(argument: str, option: str) -> Iterator[None]:
    """An error of planning a dataset (for_text's, for_audio's, for_images' or the trainer's
    own checks of its columns) starts with the argument it came in, as the checks after the
    plan do: a trainer given ``train_dataset``, ``eval_dataset`` (or a dict of them) and
    ``test_dataset`` said "the dataset does not have 'input_ids'" without saying which
    (s28-hf). An :class:`~bucketloader._validation.OptionError` says its ``column`` fix as the
    trainer's ``option`` (``bucketing`` or ``eval_bucketing``) takes it (:func:`_spell_option`);
    until s31 a table of for_text's texts was rewritten here, which missed the other hints and
    doubled a parenthesis. The type and the traceback are kept; a text that already starts with
    the argument is left as it is."""
    try:
        yield
    except (ValueError, TypeError, KeyError) as exc:
        plain_key = isinstance(exc, KeyError) and not isinstance(exc, MissingKeyError)
        kind: type[Exception] = type(exc)
        if isinstance(exc, OptionError):  # (said in the trainer's words, then plain)
            text = exc.say(lambda name, *value: _spell_option(option, name, *value))
            kind = exc.plain()
        else:
            text = str(exc.args[0] if exc.args else "") if plain_key else str(exc)  # (unquoted)
        if text.startswith(f"{argument}: "):
            raise
        try:
            named = kind(f"{argument}: {text}")
        except Exception:  # (an exception type that takes other arguments: left as it is)
            raise exc from None
        raise named.with_traceback(exc.__traceback__) from None


def _spell_option(option: str, name: str, *value: Any) -> str:
    """An option as the trainer takes it, in ``option`` (``bucketing={'column': 'input_ids'}``;
    a Python keyword for the rest: ``bucketing={'max_tokens': 64}`` reads as ``max_tokens=64``,
    which the budget errors say and test_trainer matches). The column is the one whose keyword
    misled: for_text's ``column=`` is no argument of the trainer, whose default is the model's
    ``main_input_name``."""
    if name != "column":
        return keyword(name, *value)
    return f"{option}={{'column': {value[0] if value else '...'}}}"


# NOTE [ The Trainer's sampling strategy ]
# ``TrainingArguments(train_sampling_strategy=...)`` picks Trainer's training sampler. The bucket
# sampler replaces it and takes its meaning where it has one: ``"sequential"`` (no shuffling) is
# ``shuffle=False``, which was ignored (every epoch shuffled); ``"group_by_length"``
# (``LengthGroupedSampler``: batches of similar lengths, the longest first, so an out-of-memory
# error comes at step 1) is ``longest_first=True``, docs/coming-from.md's mapping, which only
# an info line mentioned. ``"batch_rebalance"`` has no counterpart (an info line says so).
# ``bucketing=`` options override both.
# NOTE [ auto_find_batch_size ]
# ``TrainingArguments(auto_find_batch_size=True)`` reruns the training loop after an out-of-memory
# error with ``_train_batch_size`` halved, and each run calls ``get_train_dataloader``. The
# bucketing is built once and kept, so every retry ran the same batches (16 rows, 16 rows, ...)
# until accelerate gave up: "No executable batch size found, reached zero". It is now planned
# anew when ``_train_batch_size`` changed: the default ``batch_size`` is the new one, and a
# ``batch_size`` or ``max_tokens`` given in ``bucketing`` is scaled by the same ratio (a token
# budget halved as the batch size is). A prebuilt ``Bucketing`` cannot be re-planned: a warning
# says so when the trainer is built.
def _checkpoint_record(
    sampler: EpochSampler, global_step: int, steps_per_epoch: int, accumulation: int
) -> dict[str, Any]:
    """What ``bucketloader_sampler.json`` holds: the sampler's state at the position
    ``Trainer`` resumes a checkpoint of ``global_step`` at (epoch ``global_step //
    steps_per_epoch``, after its first ``(global_step % steps_per_epoch) * accumulation``
    batches), and the counts it was computed from. ``sampler.load_state_dict`` takes the state:
    a loop of one's own can resume from it too."""
    epoch, steps = divmod(int(global_step), int(steps_per_epoch))
    state = sampler.state_dict(batches_consumed=0)  # (its config; the position is Trainer's)
    state.update(epoch=epoch, batches_yielded=steps * int(accumulation))
    return {
        "format": _CHECKPOINT_FORMAT,
        "bucketloader": __version__,
        "global_step": int(global_step),
        "steps_per_epoch": int(steps_per_epoch),
        "gradient_accumulation_steps": int(accumulation),
        "sampler_state": state,
    }


#: How the trainer's user sets a sampler config entry, where it is not a plain option.
_CONFIG_SOURCES = {
    "seed": " (bucketing's 'seed', else TrainingArguments' data_seed, else its seed)",
    "shuffle": " (TrainingArguments' train_sampling_strategy, or bucketing's 'shuffle')",
    "longest_first": " (train_sampling_strategy='group_by_length', or bucketing's option)",
    "last_batch": " (TrainingArguments' dataloader_drop_last, or bucketing's option)",
}


def _what_changed(changes: list[tuple[Any, ...]]) -> str:
    """The first of :func:`~bucketloader.sampler.config_changes`, in the trainer's words, and
    the other options that differ (the entries that follow from the plan left out)."""
    key, saved, now, hint = changes[0]
    if key == "num_samples":
        what = f"train_dataset has {now:,} samples, the checkpoint's plan {saved:,}"
    elif key == "num_replicas":
        what = (
            f"this run's training sampler splits each step over {now} rank(s) "
            f"(num_replicas={now}: the number of processes), the checkpoint's over {saved}"
        )
    else:
        what = (
            f"this run's training sampler has {key}={now!r}, the checkpoint's {key}={saved!r}"
            f"{_CONFIG_SOURCES.get(key, hint)}"
        )
    derived = ("num_batches", "plan_digest")  # (what follows from any change above)
    also = [c[0] for c in changes[1:] if c[0] not in derived]
    return what + (f" (also: {', '.join(also)})" if also else "")


def _ways_on(state: dict[str, Any], epoch: int, skip: int) -> str:
    """The ways on from a checkpoint this run cannot resume exactly (its sampler ``state``;
    ``epoch`` and ``skip``: where ``Trainer`` would resume). ``ignore_data_skip=True`` restarts
    the epoch but keeps ``max_steps``: the last ``skip`` batches of the last epoch go untrained
    (checked: 90 -> 91 samples, resumed at step 4 of 13, trained 9 steps), said with it."""
    saved_epoch, done = state.get("epoch"), state.get("batches_yielded")
    if saved_epoch == epoch and done == 0:
        then = "the checkpoint's run had not started that epoch: nothing is trained twice"
    elif saved_epoch == epoch:
        then = (
            f"the samples the checkpoint's run trained in its first {done} batches are trained "
            "again"
        )
    else:
        then = f"the checkpoint's run stopped after {done} batches of its epoch {saved_epoch}"
    if skip:  # (Trainer still stops at max_steps, counted from the checkpoint's global_step)
        then += f"; the run still stops at its max_steps, its last {skip} batches untrained"
    return (
        "To resume exactly, train as the checkpoint's run did (the same train_dataset, "
        "bucketing options and TrainingArguments: seed, batch size, gradient_accumulation_steps, "
        "number of processes); or pass TrainingArguments(ignore_data_skip=True) to load the "
        f"model, optimizer and schedule and train epoch {epoch} of this run's plan from its "
        f"first batch ({then}); or start a new run without resume_from_checkpoint"
    )


def _shrink_to_found_batch_size(opts: dict[str, Any], ratio: float) -> None:
    """Scale an explicit ``batch_size`` or ``max_tokens`` of ``bucketing`` by ``ratio``, the
    batch size ``auto_find_batch_size`` settled on over ``per_device_train_batch_size``
    (NOTE [ auto_find_batch_size ]); 1 leaves them as given."""
    if ratio >= 1:
        return
    size = opts.get("batch_size")
    if isinstance(size, int) and not isinstance(size, bool):
        opts["batch_size"] = max(1, int(size * ratio))
    elif isinstance(size, (list, tuple)) and all(isinstance(b, int) for b in size):
        opts["batch_size"] = [max(1, int(b * ratio)) for b in size]
    budget = opts.get("max_tokens")
    if isinstance(budget, TokenBudget):
        opts["max_tokens"] = dataclasses.replace(
            budget, max_tokens=max(1, int(budget.max_tokens * ratio))
        )
    elif isinstance(budget, int) and not isinstance(budget, bool):
        opts["max_tokens"] = max(1, int(budget * ratio))


def _check_bucketing_options(bucketing: Any, eval_bucketing: Any) -> None:
    """The keys of ``bucketing`` / ``eval_bucketing`` dicts, checked as ``for_text`` checks them
    (``for_audio``'s own and ``column`` pass; ``precompile`` for training), when the trainer is
    built: not at the first loader, after the model and ``TrainingArguments`` are set up."""
    own = {"column", *keyword_options(for_audio), *keyword_options(for_images)} - set(
        keyword_options(for_text)
    )
    for options, evaluation in ((bucketing, False), (eval_bucketing, True)):
        if isinstance(options, dict):
            rest = {k: v for k, v in options.items() if k not in own and k != "precompile"}
            check_entry_options(for_text, rest, BucketSampler, BucketSpec, evaluation=evaluation)


def _check_ranks(argument: str, options: Any, args: Any) -> None:
    """``num_replicas`` / ``rank`` in a ``bucketing`` dict must be the run's own (``args``, which
    are their defaults): on one process, ``num_replicas=2`` trained on half of the data without a
    word, and ``predict`` failed after the whole loop ("index must hold every sample ...")."""
    if not isinstance(options, dict):
        return
    run = {"num_replicas": args.world_size, "rank": args.process_index}
    for key, value in run.items():
        if key in options and options[key] != value:
            raise ValueError(
                f"{argument} has {key}={options[key]!r}, but the run's is {value} "
                f"(TrainingArguments: world_size={args.world_size}, process_index="
                f"{args.process_index}), so each sampler would plan another run's share of the "
                f"samples (and leave the rest out); drop {key} from {argument}: BucketTrainer "
                "takes both from TrainingArguments (start N processes with torchrun "
                "--nproc_per_node=N)"
            )


def _check_transformers(name: str, version: str = transformers.__version__) -> None:
    """Refuse a transformers older than :data:`MIN_TRANSFORMERS`, by name, with the fix."""
    if release(version) < MIN_TRANSFORMERS:
        need = ".".join(map(str, MIN_TRANSFORMERS))
        raise ImportError(
            f"bucketloader.hf.{name} needs transformers>={need}, found transformers=={version}; "
            f"upgrade it (pip install -U 'transformers>={need}', which the bucketloader[hf] "
            "extra asks for). for_text, for_audio and for_packing work without the trainer."
        )


def _as_older_trainer_scales(
    trainer: Any, loss: torch.Tensor, scaled: bool, num_items_in_batch: Any
) -> torch.Tensor:
    """``loss`` so that an older ``training_step``'s fixed rule (NOTE [ Losses already scaled
    for accumulation, on older transformers ]) treats it as ``loss_is_scaled_for_ga=scaled``."""
    divides = (
        not getattr(trainer, "model_accepts_loss_kwargs", False) or num_items_in_batch is None
    ) and trainer.compute_loss_func is None
    steps = getattr(trainer, "current_gradient_accumulation_steps", None)
    steps = steps or trainer.args.gradient_accumulation_steps
    if scaled and divides:
        return loss * steps
    if not scaled and not divides:
        return loss / steps
    return loss


# NOTE [ A step with no real row ]
# A training batch can hold no real row: a ``ShardedSampler`` step that gives a rank only a
# stand-in (``last_batch="pad"``), a stream's step on a rank whose shard ran dry, or a Bucketing
# whose sampler does the same; and a batch of real rows can hold no target (every label -100).
# A loss that averages over the batch's targets is then 0 / 0: the ``transformers`` heads'
# cross-entropy (a mean over the labels that are not -100, or their sum divided by
# ``num_items_in_batch``, which is 0 on that rank with ``average_tokens_across_devices=False``,
# and on every rank when every rank's step is empty), a label smoother, or a
# ``compute_loss_func`` that divides by its count. The NaN lands in the logged loss; the heads'
# cross-entropy happens to write no gradient for ignored labels (measured: zero gradients under
# the NaN), but a loss that multiplies a masked sum by ``1 / count`` sends NaN into every
# gradient, which DDP's all-reduce spreads to every rank. :meth:`get_batch_samples` marks such
# a batch (from its CPU tensors: no device synchronisation), and :meth:`compute_loss` runs the
# model on it as on any batch (the same compiled graph) and returns
# :func:`~bucketloader.hf.loss.zero_loss` of its outputs instead of the model's loss: 0, with a
# zero gradient for every parameter the forward used, so DDP's reducer still sees each of them
# (a loss with no graph would leave them without a gradient, which DDP refuses). The per-row
# heads (CTC, regression, multi-label) divide by ``max(rows, 1)`` and need no mark.
class _NoTargets(dict):  # type: ignore[type-arg]
    """A training batch with no real row or target (NOTE [ A step with no real row ]); a
    ``dict`` subclass, so the mark survives ``Trainer._prepare_inputs``."""


def _same_rows(given: Any, built: Any) -> bool:
    """Whether ``given`` (a ``train_dataset``) holds the rows of ``built`` (a ``Bucketing``'s
    dataset): the same object, or a view of the same Arrow table and indices (``for_audio``'s
    ``dataset.with_format("torch")`` or ``AudioRows``: ``train_dataset=ds`` beside
    ``bucketing=hf.for_audio(ds, ...)`` was refused as another dataset)."""
    if given is built:
        return True
    built = getattr(built, "dataset", built)  # (AudioRows wraps the formatted dataset)
    try:
        (a, ia), (b, ib) = table_and_indices(given), table_and_indices(built)
    except TypeError:  # (not an Arrow-backed dataset: only the same object is the same rows)
        return False
    if a is not b:
        return False
    return (ia is None and ib is None) or (
        ia is not None and ib is not None and np.array_equal(ia, ib)
    )


def _rows_of(dataset: Any) -> str:
    """``"N rows"`` of a dataset, or its type where it has no length."""
    try:
        return f"{len(dataset):,} rows"
    except TypeError:
        return type(dataset).__name__


def _has_rows(dataset: Any) -> bool:
    """Whether ``dataset`` is a training set with rows (not ``None``, not empty)."""
    try:
        return dataset is not None and len(dataset) > 0
    except TypeError:
        return True  # (no length: training's own check names it)


def _is_stream(dataset: Any) -> bool:
    """Whether ``dataset`` is iterable only (``datasets.IterableDataset``, a torch
    ``IterableDataset``): no lengths to plan an epoch from."""
    return isinstance(dataset, (datasets.IterableDataset, torch.utils.data.IterableDataset))


def _is_compiled(model: Any) -> bool:
    """Whether calling ``model`` runs ``torch.compile`` (``model.compile()`` in place, or an
    ``OptimizedModule`` wrapper)."""
    if getattr(model, "_compiled_call_impl", None) is not None:
        return True
    return type(model).__name__ == "OptimizedModule"


class _PlannedBatches:
    """A batch source for :func:`~bucketloader.compile.precompile` (NOTE [ The batch-source
    protocol ]): for every shape of a loader's plan, the first real batch of that shape, loaded
    and collated exactly as the loader does."""

    def __init__(self, loader: Any) -> None:
        sampler = loader.batch_sampler
        self.shapes = list(sampler.shapes)
        self._loader = loader
        self._first: dict[tuple[int, ...], Any] = {}
        for shape, indices in _plan_batches(sampler):
            self._first.setdefault(tuple(int(x) for x in shape), indices)
            if len(self._first) == len(self.shapes):
                break

    def make_batch(self, shape: tuple[int, ...]) -> Any:
        indices = self._first[tuple(shape)]
        return self._loader.collate_fn(load_samples(self._loader.dataset, indices))


def _plan_batches(sampler: Any) -> Any:
    """``(shape, indices as loaded)`` of every batch of the current epoch. A packing plan
    (``hf.for_packing``'s :class:`~bucketloader.pack.PackSampler`) has no bucket cells: its
    batches name their row length (``plan.kinds``), an index into ``sampler.table.shapes``
    (before, ``precompile()`` asked it for a bucket table and raised AttributeError)."""
    if isinstance(sampler, EvalSampler):
        table = sampler.shape_table.cells.shapes
        for batch in sampler:
            yield table[int(batch.cell)], batch  # type: ignore[attr-defined]
        return
    plan = sampler.plan()
    pack_table = getattr(sampler, "table", None)
    if pack_table is not None and hasattr(plan, "kinds"):  # a packing plan
        for i in range(len(plan)):
            yield pack_table.shapes[int(plan.kinds[i])], plan.batch(i)
        return
    table = sampler.shape_table.cells.shapes
    full = sampler.shape_table.cells.batch
    for i in range(len(plan)):
        cell = int(plan.cells[i])
        rows = int(plan.offsets[i + 1] - plan.offsets[i])
        keep = sampler.last_batch == "keep" and bool(plan.partial[i]) and rows < full[cell]
        shape = (rows, *table[cell][1:]) if keep else table[cell]
        yield shape, plan.batch(i)


class _EvalRecord:
    """Per step: the gathered ``index`` of the rows, and (loss x real rows, real rows)."""

    def __init__(
        self,
        num_samples: int,
        *,
        concat: bool,
        positions: Callable[[Any], np.ndarray],
        steps: int,
    ) -> None:
        self.num_samples = num_samples
        self.concat = concat
        self.steps = steps  # the loader's batches: the last one completes batch_eval_metrics
        self.positions = positions  # dataset index -> position among the evaluated samples
        self.index: list[np.ndarray] = []
        self.losses: list[torch.Tensor] = []

    def add(self, trainer: Any, index: torch.Tensor, mask: Any, loss: Any) -> None:
        device = trainer.args.device
        gathered = trainer.accelerator.gather(index.to(device)).cpu().numpy()
        self.index.append(self.positions(gathered))
        if loss is not None and mask is not None:
            n = mask.to(device).sum().to(torch.float32)
            value = loss.detach().to(device, torch.float32).reshape(())
            weighted = torch.where(n > 0, value * n, torch.zeros_like(value))
            pair = torch.stack([weighted, n]).reshape(1, 2)
            self.losses.append(trainer.accelerator.gather(pair).cpu())

    def loss(self) -> float:
        both = torch.cat(self.losses).double().sum(0)
        return float(both[0] / both[1].clamp(min=1))

    def restore(self, outputs: Any) -> Any:
        """Gathered outputs in dataset order, filler rows dropped."""
        if outputs is None or not self.index:
            return outputs
        if self.concat:
            if _per_row(outputs) or (
                isinstance(outputs, (list, tuple)) and any(map(_per_row, outputs))
            ):
                raise ValueError(
                    "evaluation outputs hold a list of dicts, one per image (detection labels), "
                    "which Trainer's eval_do_concat_batches=True concatenates position by "
                    "position across batches (row i of one batch with row i of the next); pass "
                    "TrainingArguments(eval_do_concat_batches=False), as transformers' object "
                    "detection example does: outputs then come one entry per sample, in "
                    "dataset order"
                )
            return restore_order(outputs, np.concatenate(self.index), num_samples=self.num_samples)
        per_sample: list[Any] = [None] * self.num_samples
        for batch, index in zip(outputs, self.index, strict=True):
            for row in np.flatnonzero(index >= 0).tolist():
                per_sample[int(index[row])] = _row(batch, row)
        return per_sample

    def metrics_hook(self, user: Callable[..., Any], batch_mode: bool) -> Callable[..., Any]:
        def compute_metrics(pred: EvalPrediction, **kwargs: Any) -> Any:
            if batch_mode:
                keep = np.flatnonzero(self.index[-1] >= 0)
                fix: Callable[[Any], Any] = lambda x: _rows(x, keep)  # noqa: E731
                # Trainer reads the last step from accelerate's loader (gradient_state.
                # end_of_dataloader), never set by this plain one: compute_result was always
                # False and evaluate() returned none of the user's metrics.
                kwargs["compute_result"] = len(self.index) >= self.steps
            else:
                fix = self.restore
            return user(
                EvalPrediction(
                    predictions=fix(pred.predictions),
                    label_ids=fix(pred.label_ids),
                    inputs=fix(pred.inputs),
                    losses=pred.losses,
                ),
                **kwargs,
            )

        return compute_metrics


def _check_per_row(logits: Any, rows: int, model: str) -> None:
    """Every output of an evaluation batch must have a row per sample, to be put in dataset
    order; a value per batch (DETR's ``loss_dict`` of 0-d losses, which ``prediction_step``
    keeps beside the logits) is refused here, naming it and the fix (it failed at the end of
    the loop: "every output must have one row per index entry (7), got ndarray of shape (3,)",
    or an ``IndexError`` with ``eval_do_concat_batches=False``)."""
    outputs = logits if isinstance(logits, (list, tuple)) else [logits]
    for i, value in enumerate(outputs):
        leaves = value.items() if isinstance(value, Mapping) else [(None, value)]
        for key, leaf in leaves:
            if isinstance(leaf, torch.Tensor) and (leaf.ndim == 0 or leaf.shape[0] != rows):
                what = f"output {i}" + (f" (a dict; its {key!r})" if key is not None else "")
                per = leaf.shape[0] // rows if leaf.ndim and rows else 0
                if per > 1 and leaf.shape[0] == per * rows:  # (not DETR's loss_dict: sequences)
                    raise ValueError(
                        f"{model}'s evaluation outputs hold {per} rows per sample at {what} "
                        f"(shape {tuple(leaf.shape)} for {rows} rows), as generate makes them "
                        f"with num_return_sequences={per}; putting predictions in dataset order "
                        "needs one per sample: predict with num_return_sequences=1 (the "
                        "default), or call model.generate on the bucketed batches yourself"
                    )
                raise ValueError(
                    f"{model}'s evaluation outputs hold a value of shape {tuple(leaf.shape)} at "
                    f"{what}, not one row per sample ({rows} rows), so they cannot be put in "
                    "dataset order; leave that output out of the predictions by its key in "
                    "the model's output: model.config.keys_to_ignore_at_inference = "
                    "['loss_dict'] (DETR's losses), or trainer.predict(..., ignore_keys=[...])"
                )


def _per_row(tree: Any) -> bool:
    """A list of dicts, one per row (detection labels: NOTE [ Images: pixel_mask ] in
    :mod:`bucketloader.hf.bucketing`), not a list of outputs that each have rows."""
    return isinstance(tree, list) and bool(tree) and all(isinstance(x, Mapping) for x in tree)


def _rows(tree: Any, keep: np.ndarray) -> Any:
    if tree is None:
        return None
    if _per_row(tree):
        return [tree[i] for i in keep.tolist()]
    if isinstance(tree, Mapping):
        return type(tree)({k: _rows(v, keep) for k, v in tree.items()})  # type: ignore[call-arg]
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rows(v, keep) for v in tree)
    if isinstance(tree, torch.Tensor):
        return tree.index_select(0, torch.as_tensor(keep, device=tree.device))
    return np.asarray(tree)[keep]


def _row(tree: Any, row: int) -> Any:
    if _per_row(tree):
        return tree[row]
    if isinstance(tree, Mapping):
        return type(tree)({k: _row(v, row) for k, v in tree.items()})  # type: ignore[call-arg]
    if isinstance(tree, (list, tuple)):
        return type(tree)(_row(v, row) for v in tree)
    return tree[row]


# NOTE [ The user's data_collator ]
# ``Trainer`` collates with ``data_collator``; BucketTrainer collates every batch at a planned
# shape instead, so a collator whose job is padding (``DataCollatorWithPadding``,
# ``DataCollatorForSeq2Seq``, ``DataCollatorForTokenClassification``, ``DefaultDataCollator``,
# ``default_data_collator``) is replaced by it, silently, keeping its ``pad_to_multiple_of`` as the
# default of ``bucketing``'s. A ``DataCollatorForLanguageModeling``
# does more than pad: it makes the labels. Its work is kept: after the batch is laid out at its
# planned shape, ``mlm=True`` masks tokens with the collator's own ``torch_mask_tokens`` (never
# padding, special tokens or filler rows) and ``mlm=False`` copies ``input_ids`` to ``labels``
# with -100 on padding, read from ``attention_mask`` (the collator masks every token equal to
# the pad id, so with pad = EOS it also unlabels each real EOS; here the EOS is learned).
# Filler rows get labels -100 either way, so the loss of a padded batch is the loss of its real
# rows. Whole-word masking needs the tokens' offsets and is refused, as is any other collator
# (it would be dropped without a word).
# Packed rows (``bucketing=hf.for_packing(...)``) already carry causal labels: -100 on each
# document's first token (no target across a document boundary) and the dataset's own
# ``labels`` (a masked prompt). ``mlm=False`` leaves those training batches as they are and
# labels the evaluation batches only (which ``for_text`` builds, without labels): copying
# ``input_ids`` over the packed labels would train each document's first token on the
# previous document and unmask the prompts. ``mlm=True`` on packed causal rows is refused.
# Packed masked-LM rows (``for_packing(mlm_probability=...)``) are masked already: ``mlm=True``
# masks the evaluation batches only, and ``mlm=False`` (causal labels) is refused there.
_PADDING_COLLATORS = (
    "DataCollatorWithPadding",
    "DataCollatorForSeq2Seq",
    "DataCollatorForTokenClassification",
    "DefaultDataCollator",
    "default_data_collator",
)


def _language_modeling(collator: Any, owner: str) -> Any:
    """The user's ``DataCollatorForLanguageModeling`` to apply after collation, or ``None``
    (NOTE [ The user's data_collator ])."""
    if collator is None:
        return None
    name = getattr(collator, "__name__", None) or type(collator).__name__
    if isinstance(collator, transformers.DataCollatorForLanguageModeling):
        if getattr(collator, "whole_word_mask", False) or name == "DataCollatorForWholeWordMask":
            raise ValueError(
                f"{owner} cannot apply whole-word masking ({name}): it needs each token's word "
                "offsets, which the planned batches do not carry; use "
                "DataCollatorForLanguageModeling(tokenizer, mlm=True) (token-level masking) or "
                "mask the words in the dataset (set_transform)"
            )
        return collator
    if name in _PADDING_COLLATORS or type(collator).__name__ in _PADDING_COLLATORS:
        return None
    if isinstance(collator, transformers.DataCollatorWithFlattening):
        extra = "".join(
            f", {option}"
            for flag, option in (
                (getattr(collator, "return_flash_attn_kwargs", False), "attention='flash'"),
                (getattr(collator, "return_seq_idx", False), "return_seq_idx=True"),
            )
            if flag
        )
        raise ValueError(
            f"{owner} packs with bucketing=hf.for_packing(...), not with data_collator="
            f"{name}: pass bucketing=hf.for_packing(train_dataset, tokenizer=tokenizer, "
            f"row_length=<tokens per row>, batch_size=<rows>{extra}) and no data_collator; its "
            "rows carry the same labels (-100 at each document's first token) and restarting "
            "position_ids, at one planned shape (batch_size, row_length)"
        )
    raise ValueError(
        f"{owner} collates every batch at a planned shape, so data_collator={name} would not "
        "be used; pass no data_collator (or a padding collator, which it replaces), move "
        "per-sample work into the dataset (datasets.Dataset.set_transform, keeping the token "
        "column's lengths: they are planned from the stored column), or pass "
        "bucketing=Bucketing(sampler, your_collator, dataset), with no data_collator, and a "
        "collator that pads to the sampler's shapes"
    )


def _packed(collate: Any, lm: Any, owner: str) -> bool:
    """Whether ``collate`` makes packed causal-LM rows, whose labels a
    ``DataCollatorForLanguageModeling(mlm=False)`` must not overwrite (NOTE [ The user's
    data_collator ]); ``mlm=True`` on them is refused."""
    from bucketloader.hf.packing import PackedInputs

    if not isinstance(collate, PackedInputs):
        return False
    if not collate.causal:
        if not lm.mlm:
            raise ValueError(
                f"{owner} trains packed masked-LM rows (hf.for_packing(..., mlm_probability=...)),"
                " but data_collator=DataCollatorForLanguageModeling has mlm=False (causal "
                "labels), which would label the evaluation batches for another task; pass "
                "mlm=True (it then masks the evaluation batches), or no data_collator"
            )
        return True
    if lm.mlm:
        raise ValueError(
            f"{owner} trains packed causal-LM rows (bucketing=hf.for_packing(...)), which make "
            "their own causal labels, but data_collator=DataCollatorForLanguageModeling has "
            "mlm=True (masked-LM targets); pass mlm=False (it then labels the evaluation "
            "batches) or bucket a masked-LM model with for_text instead of packing"
        )
    return True


class LanguageModelingLabels:
    """A batch collator followed by a ``DataCollatorForLanguageModeling``'s labels: masked tokens
    (``mlm=True``) or ``input_ids`` (``mlm=False``), -100 on padding and on filler rows (NOTE
    [ The user's data_collator ]). Picklable (DataLoader workers)."""

    def __init__(self, collate: Callable[[list[Any]], dict[str, Any]], lm: Any) -> None:
        self.collate = collate
        self.lm = lm

    def __call__(self, samples: list[Any]) -> dict[str, Any]:
        out = self.collate(samples)
        ids = out.get("input_ids")
        if not isinstance(ids, torch.Tensor):
            raise ValueError(
                "DataCollatorForLanguageModeling needs an 'input_ids' batch, got keys "
                f"{sorted(out)}; bucket the token column (bucketing={{'column': 'input_ids'}})"
            )
        mask = out.get("attention_mask")
        tokenizer = self.lm.tokenizer
        if isinstance(mask, torch.Tensor) and mask.shape == ids.shape:
            padding = ~mask.bool()
        else:
            padding = ids == tokenizer.pad_token_id
        rows = out.get("sample_mask")
        if isinstance(rows, torch.Tensor):  # filler rows: no target, no masking
            padding = padding | ~rows.bool()[:, None]
        if self.lm.mlm:
            if getattr(self.lm, "seed", None) is not None and self.lm.generator is None:
                self.lm.create_rng()  # as its own torch_call: seed (+ worker id), per process
            special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=ids.dtype)
            keep_out = padding | torch.isin(ids, special)
            ids, labels = self.lm.torch_mask_tokens(ids.clone(), special_tokens_mask=keep_out)
            out["input_ids"] = ids
        else:
            labels = ids.clone()
            labels[padding] = LABEL_PAD
        out["labels"] = labels
        return out


def _refuse_missing_main_input(dataset: Any, column: str, owner: str) -> None:
    """The model's main input (the default ``column``) is missing, and a decoded-audio struct
    column is there: name it (for_text's error said "tokenize first" of a speech dataset, and
    listed its columns without the audio, which ``remove_unused_columns`` had removed); an
    image model's ``pixel_values``: say how to store them."""
    schema = table_and_indices(dataset)[0].schema
    audio = [
        f.name
        for f in schema
        if pa.types.is_struct(f.type)
        and f.type.get_field_index("array") >= 0
        and nesting(f.type.field("array").type)[0] > 0
    ]
    if not audio:
        if column == "pixel_values":  # (an image model: for_text's "tokenize first" too)
            raise MissingKeyError(
                f"{owner} buckets the model's main input 'pixel_values' (model.main_input_name), "
                f"which the dataset does not have (its columns: {schema.names}); store the "
                "image processor's output first: dataset = dataset.map(lambda batch: "
                "processor(batch['image'], do_pad=False), batched=True), channels-first "
                "(C, H, W) pixel_values of each image's own size"
            )
        return
    raise MissingKeyError(
        f"{owner} buckets the model's main input {column!r} (model.main_input_name), which the "
        f"dataset does not have, but its column {audio[0]!r} holds decoded audio; name it: "
        f"bucketing={{'column': {audio[0]!r}}} (its arrays reach the model as 'input_values', "
        "raw waveforms), or store the feature extractor's output first: dataset = dataset.map("
        f"lambda row: extractor(row[{audio[0]!r}]['array'], sampling_rate=16000), "
        f"remove_columns=[{audio[0]!r}])"
    )


#: Names of learned absolute position tables in ``transformers`` models (BERT, RoBERTa, GPT-2,
#: BART, OPT...); rotary and relative positions (Llama, T5) have none.
_POSITION_TABLES = ("position_embeddings", "wpe", "embed_positions")


def _position_tables(model: Any) -> Iterator[tuple[str, torch.nn.Embedding]]:
    """``model``'s learned position tables (BERT's ``position_embeddings``, GPT-2's ``wpe``,
    BART's ``embed_positions``), by name. Only a model whose config has
    ``max_position_embeddings`` (GPT-2's ``n_positions`` reads as it) is looked at: a composite
    one's (an audio tower beside a rotary LLM) bounds no text."""
    config = getattr(model, "config", None)  # (wrappers, PEFT's too, forward it)
    if not isinstance(getattr(config, "max_position_embeddings", None), int):
        return
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and name.rsplit(".", 1)[-1] in _POSITION_TABLES:
            yield name, module


def _position_start(model: Any) -> tuple[int | None, str]:
    """The first position ``model``'s learned position table gives a sequence, and the table
    named: ``padding_idx + 1`` where it reserves rows up to a ``padding_idx`` (RoBERTa, XLM-R,
    ESM: NOTE [ Positions after a padding index ] in :mod:`bucketloader.pack.collator`), else 0
    (BERT, GPT-2; OPT and BART add their ``offset`` themselves); ``(None, "")`` without a learned
    table (rotary, relative), where packing from any start keeps the documents' distances."""
    tables = list(_position_tables(model))
    for name, module in tables:
        if module.padding_idx is not None:
            return module.padding_idx + 1, f"{name}: padding_idx={module.padding_idx}"
    if tables:
        name, module = tables[0]
        return 0, f"{name}: {module.num_embeddings} rows"
    return None, ""


# NOTE [ Models that mix packed documents ]
# Packed rows tell the model where documents start by their position_ids, a 4-D mask or varlen
# arguments (NOTE [ How transformers models take a packed batch ] in bucketloader.hf.packing).
# Models that read none of them attend across documents, silently: with attention='positions'
# BertLMHeadModel, OPT and BLOOM did (transformers 5.x; a document's logits off by 7e-4-3e-2
# against it alone), and a flash-attention batch for a model not built with flash attention
# would. So BucketTrainer runs the model once on two tiny packed rows (two documents each, the
# first documents different, the second the same): where documents are kept apart the second
# document's logits are the same in both rows (masked scores weigh exactly 0, and both rows
# take the same kernels), where they are not they differ. A few tokens in eval mode without
# gradients: milliseconds (forward hooks the user put on the model see that pass too). Every rank
# of a distributed run probes, and all take the same decision (NOTE [ The probe on every rank ]).
# Where no rank can read the parameters (the meta device, DeepSpeed ZeRO-3's partitions) it runs on
# a small copy of the architecture (NOTE [ The probe of a model no rank can read ]); it is skipped
# where the pass fails (a flash-attention batch on a CPU: training says why). A compiled model runs
# it uncompiled (torch.compiler.set_stance("force_eager"), torch >= 2.6; skipped on older torch), so
# the plan's graphs stay the only ones (not on a lazy-tensor device, XLA or HPU, where the stance
# does not apply: there the pass is traced and compiled as a small graph of its own, once per
# variant probed, when the trainer is built; read from the code, not run); its rows number positions
# from the collator's position_ids_start, as the packed rows do. The logits read are the row's last
# three: a model that puts tokens of its own first (PEFT's prompt tuning and p-tuning, which also
# ignore position_ids, and mix) returns more rows than the row's tokens. The model is called as
# training calls it, without use_cache (each config says; none under gradient checkpointing of the
# whole model, not of one tower: each module turns off its own cache): with a cache transformers
# finds no documents in position_ids, so TrainingArguments(use_cache=True) mixes, and so does a
# model over a language model whose text_config.use_cache stays True (Trainer sets only
# model.config.use_cache).
# Two things no probe of two packed rows can see are checked from the model's class and tables:
# * Where the packed positions start. A learned position table counts from 0 (BERT, GPT-2; OPT
#   and BART add their offset themselves) or, with a padding_idx, from padding_idx + 1
#   (RoBERTa, XLM-R, CamemBERT, ESM): the rows' position_ids_start must be that, or every token
#   is embedded at a position the model never learned for it, with no error (NOTE [ Positions
#   after a padding index ] in bucketloader.pack.collator). Both probe rows share their
#   positions, so the probe cannot tell. The trainer refuses a start that is not the model's
#   and names the one that is, rather than setting it: the Bucketing is the user's, built before
#   the model was known, and its .dataloader() in a loop of their own (or another trainer) must
#   give the batches this trainer trains on; the attention= refusal above works the same way,
#   and so does DataCollatorWithFlattening, whose position_ids_start the user sets. One keyword,
#   named with its value, is the whole fix.
# * A masked-LM head (ForMaskedLM) on causal-LM rows (labelled with their own tokens for a model
#   that shifts them): a masked-LM loss does not shift, so it would learn to copy its input, and
#   a causal document mask (which the probe accepts, the second document being unchanged) would
#   also hide each document's later tokens from its earlier ones. Masked-LM rows
#   (for_packing(mlm_probability=...): masked inputs, labels on the masked tokens, a
#   bidirectional document mask, which the probe then passes) are what it takes; a causal-LM
#   head on them is refused the other way round.


def _sliding_window_of(model: Any) -> tuple[int | None, bool]:
    """``(config.sliding_window, whether every layer slides)`` of a model with sliding-window
    layers (its config's or its ``text_config``'s): some of them where ``config.layer_types``
    has ``"sliding_attention"`` (Gemma 2 / 3, ModernBERT), all where an int ``sliding_window``
    comes with no ``layer_types`` (Mistral, Mixtral, Phi-3, Starcoder2); ``(None, False)``
    for a model without."""
    config = getattr(model, "config", None)
    for c in (config, getattr(config, "text_config", None)):
        kinds = getattr(c, "layer_types", None)
        window = getattr(c, "sliding_window", None)
        if c is None or not isinstance(window, int) or isinstance(window, bool):
            continue
        if kinds is None:
            return window, True
        if isinstance(kinds, (list, tuple)) and "sliding_attention" in kinds:
            return window, False
    return None, False


def _check_sliding_layers_take_mask(model: Any, collate: Any, who: str, argument: str) -> None:
    """A model with sliding-window layers takes packed rows with ``attention="mask"`` only with
    one mask per layer kind (NOTE [ Sliding-window layers in packed rows ] in
    :mod:`bucketloader.hf.packing`), where its window is shorter than a row's documents; a
    model all of whose layers slide (no ``layer_types``) takes no dict of masks, so there
    ``attention="mask"`` is refused in rows longer than its window."""
    if collate.attention != "mask":
        return
    window, every = _sliding_window_of(model)
    given = getattr(collate, "sliding_window", None)
    width = max(shape[-1] for shape in collate.shapes)
    # (whether a row holds two tokens further apart than the window reaches: i - j < window
    # back for causal rows, |i - j| <= window either way for masked-LM ones)
    beyond = window is not None and (width > window if collate.causal else width - 1 > window)
    if every:
        fix = (
            "pack with hf.for_packing(..., attention='positions') (transformers then finds the "
            f"documents in position_ids and applies the window), or rows of at most {window} "
            "tokens"
        )
        if given is not None:
            raise ValueError(
                f"{who} has config.sliding_window={window} on every layer (no config.layer_types)"
                f" and takes no dict of masks, but the packed rows of {argument} are masked per "
                f"layer kind (sliding_window={given}); drop sliding_window and {fix}"
            )
        if beyond:
            raise ValueError(
                f"{who} has config.sliding_window={window} on every layer (no config.layer_types),"
                f" but attention='mask' gives its layers the 4-D document mask of the packed rows"
                f" of {argument} as given, so in rows of {width} tokens they would see whole "
                f"documents, not the window the model sees on each document alone; {fix}"
            )
        return
    if given is not None and window != given:
        has = (
            f"config.sliding_window={window}"
            if window is not None
            else "no sliding-window layers (config.layer_types), and would not take a dict of masks"
        )
        fix = f"sliding_window={window}" if window is not None else "no sliding_window"
        raise ValueError(
            f"{who} has {has}, but the packed rows of {argument} are masked for sliding_window="
            f"{given}; pack with hf.for_packing(..., {fix})"
        )
    if beyond and given is None:
        reach = "back" if collate.causal else "either way"
        raise ValueError(
            f"{who} has sliding-window layers (config.layer_types) that attend {window} tokens "
            f"{reach}, but attention='mask' gives every layer the one 4-D document mask of the "
            f"packed rows of {argument}, so in rows of {width} tokens those layers would see "
            "whole documents, not the window the model sees on each document alone; pack with "
            f"hf.for_packing(..., sliding_window={window}) (a mask per layer kind)"
        )


def _float_mask_keeps_apart(
    model: Any, probed: Any, collate: Any, start: int, use_cache: Any, owner: str
) -> Any:
    """The model's float dtype where ``collate`` ships a bool ``attention="mask"`` mask that
    mixes the documents and the same mask in that dtype (additive) keeps them apart (eager
    attention) on ``probed`` (the model, or its stand-in), else ``None``; the ranks' answer
    (NOTE [ The probe on every rank ])."""
    import copy

    if collate.attention != "mask" or collate.mask_dtype != torch.bool:
        return None
    dtypes = [p.dtype for p in model.parameters() if p.dtype.is_floating_point]
    if not dtypes:
        return None
    additive = copy.copy(collate)
    additive.mask_dtype = dtypes[0]
    # (s34-probe: each rank's own pass: a rank on the meta device beside rank 0's weights (FSDP's
    # cpu_ram_efficient_loading) made none, so rank 0's refusal offered mask_dtype and its not)
    leak = _agreed_leak(
        lambda: _packing_leak(probed, "mask", additive, start, use_cache=use_cache), owner
    )
    return dtypes[0] if leak == 0.0 else None


#: Heads that shift their labels to predict the next token (refused on masked-LM rows).
_CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel")


# NOTE [ The probe on every rank ]
# In a distributed run every rank builds the trainer, and each must make the same decision: one
# that refused while the others trained would leave them waiting in training's first collective
# (for NCCL's whole timeout). Each rank may see the model differently when the trainer is built:
# under FSDP with cpu_ram_efficient_loading, from_pretrained leaves ranks > 0 on the meta device
# (their weights come from rank 0 when training wraps the model), so only rank 0 can probe; a
# model built without a seed has other weights on each rank. So every rank runs each probe on
# the same two rows, and the ranks take the largest leak (all_reduce MAX; -1 where a rank made
# no pass): all refuse with the same numbers, or all go on. The model is not wrapped yet when
# the trainer is built (Trainer wraps it for FSDP, DeepSpeed or DDP in train()), so the pass
# is each rank's own, where the model is (Trainer does not move it to the accelerator under FSDP
# or DeepSpeed: on the CPU unless the user moved it); a model the user sharded already makes it
# collectively, every rank the same calls in the same order (the ranks agree on each answer,
# so on which probe comes next). A rank whose probe raises (the model's own failures are caught
# inside: "no pass") joins the reduction before it re-raises, and the others stop with an error
# naming it, rather than waiting for it.
# DeepSpeed ZeRO-3 partitions parameters as the model is built (from_pretrained or from_config
# under zero.Init: each rank holds a slice, the module an empty tensor with a ds_id): no rank can
# make the pass with them, and every rank probes the same small copy instead (NOTE [ The probe of
# a model no rank can read ]); ZeRO-1 and -2 leave the model whole, and it runs (both checked with
# DeepSpeed 0.19.8 on 2 CPU processes, s32-fsdp and s33-zero3). The reduction is the default
# group's, on bucketloader._dist's device (the current CUDA device under NCCL, else the CPU).


def _probed_model(model: Any, who: str, argument: str) -> tuple[Any, str]:
    """The model the packing probe runs on, and "" where it is ``model``: a stand-in of its
    architecture, and a note saying so, where no rank can read its parameters (NOTE [ The probe
    of a model no rank can read ]); ``model`` with a warning where no stand-in is made (its
    probes then make no pass)."""
    from bucketloader._dist import all_reduce_max, default_ranks

    why = _unreadable(model)
    if default_ranks()[0] > 1:  # (every rank the same: a stand-in only where none can read it)
        (read,) = all_reduce_max([0.0 if why else 1.0])
        if read:
            return model, ""
    if not why:
        return model, ""
    stand, failed = _stand_in(model)
    if stand is None:
        _warn_unchecked(who, argument, f"{why} and no small copy of it was made: {failed}")
        return model, ""
    return stand, f"measured on a small copy of its architecture with random weights: {why}"


def _warn_unchecked(who: str, argument: str, why: str) -> None:
    """The warning of a packing the probe could not check (NOTE [ The probe of a model no rank
    can read ])."""
    warnings.warn(
        f"{who}: whether it keeps the packed documents of {argument} apart was not checked "
        f"(no forward pass could be made: {why}), so a model that attends across documents "
        "would train on them silently; check it once where its weights can be read (the same "
        "model and packing on one process, without DeepSpeed ZeRO-3), or bucket it instead "
        "(bucketing=hf.for_text(...))",
        stacklevel=_user_stacklevel(),
    )


#: The packages whose frames a warning of the packing probe passes over to name the user's
#: line: this one, and the Trainer and accelerate code that calls into it.
_CALLERS = ("bucketloader", "transformers", "accelerate")


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points the warning its caller warns at the user's line: the first
    frame outside :data:`_CALLERS`' files, however deep the call (s34-probe: ``stacklevel=4``
    named trainer.py's own lines, one or another by the path that warned)."""
    import sys

    files = [getattr(sys.modules.get(name), "__file__", None) for name in _CALLERS]
    roots = tuple(os.path.dirname(f) + os.sep for f in files if isinstance(f, str))
    frame: Any = sys._getframe(2)  # (the caller's caller: stacklevel=2 of the caller)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(roots):
        frame, level = frame.f_back, level + 1
    return level


def _agreed_leak(probe: Callable[[], float | None], owner: str) -> float | None:
    """``probe()``'s answer that every rank agrees on: the largest leak any rank measured,
    ``None`` where none could make a pass (NOTE [ The probe on every rank ]). In one process,
    ``probe()`` itself."""
    from bucketloader._dist import all_reduce_max, default_ranks

    world, rank = default_ranks()
    if world == 1:
        return probe()
    failed: Exception | None = None
    try:
        leak = probe()
    except Exception as exc:  # (joins the reduction first: the others are waiting in it)
        failed, leak = exc, None
    # [the largest leak (-1: no pass made), 1 + the highest rank whose probe raised]
    largest, broke = all_reduce_max([-1.0 if leak is None else leak, rank + 1.0 if failed else 0.0])
    if failed is not None:
        raise failed
    if broke:
        raise RuntimeError(  # (the other ranks would wait for it in training's first step)
            f"{owner}: the packing check (one forward pass over two packed rows, on every rank, "
            f"when the trainer is built) raised on rank {int(broke) - 1}, so rank {rank} stops "
            "too rather than train without it; that rank's log says why"
        )
    return None if largest < 0 else largest


def _unreadable(model: Any) -> str:
    """Why no forward pass can be made with ``model``'s own parameters ("" where one can):
    DeepSpeed ZeRO-3's partitions (each rank holds a slice, the module an empty tensor with a
    ``ds_id``), the meta device, or no parameters at all."""
    params = list(model.parameters())
    if not params:
        return "it has no parameters"
    if any(hasattr(p, "ds_id") for p in params):
        return "its parameters are partitioned across the ranks (DeepSpeed ZeRO-3)"
    if any(p.device.type == "meta" for p in params):
        return "its parameters are on the meta device"
    return ""


# NOTE [ The probe of a model no rank can read ]
# Under DeepSpeed ZeRO-3 (from_pretrained or from_config under zero.Init) no rank holds the weights
# whole when the trainer is built, and a model built on the meta device has none: no pass can be
# made with them. Whether packed documents mix is a property of the architecture and the attention
# path (the attention implementation, the cache, the mask code transformers runs for each layer
# kind), not of the weights: the probe compares the same model's logits on two rows, so any weights
# show a leak (s32's tests found each mixing model with random weights). There the probe runs on a
# stand-in: the same class built from a copy of the config on the CPU, in float32, from seed 0 (the
# user's RNG untouched), with every layer kept (so each layer kind, sliding window, no-rope layer,
# MoE or Mamba block stays where the config puts it) and each head's width kept (rotary sections,
# partial rotary, query scaling read it), but two attention heads (one key/value head where the
# config shares them, two where it does not), a hidden size of two heads and a feed-forward of twice
# that (a mixture of experts keeps its experts, which share those units: s33-tidyA), and a small
# vocabulary above every id the forward pass reads (the padding row, an image token; generation's
# ids dropped). A sub-config with no heads of its own (DBRX's ffn_config and attn_config) follows
# the hidden size and key/value heads of the config it is in, where it repeats them (s34-probe).
# The copy is counted on the meta device first, where it allocates nothing, and one over
# _STAND_IN_LIMIT (5e8 parameters, 2 GB in float32 on every rank's CPU) is not built: sizes the
# copy does not know how to narrow stay whole (of the default configs of the mixtures of experts
# transformers 5.24 ships, DeepSeek-V3.2's indexer heads, Qwen3-Next's linear attention, ERNIE
# 4.5-VL's lists of experts; one copy would have held 7.6e11 parameters), and that is said. A
# TinyLlama-1.1B-shaped config builds and probes in 0.6 s, a 72B-shaped one in 2.7 s, where the
# 1.1B model's own pass takes 3.6 s (one core, float32, a loaded machine; counting on meta is
# 0.1-0.7 s of each build) (benchmarks/probe_stand_in.py). Its verdict equals the full model's on
# each architecture the tests probe, mixing or not (tests/test_pack_hf.py). Its leak's size is the
# stand-in's, and the refusal says so. Where no stand-in is made (a wrapper such as PEFT's, code of
# the model's own through trust_remote_code, a config the copy cannot be built from, a copy over
# the limit) or its pass fails, the trainer warns that the packing was not checked, naming why
# (at the user's line: the first frame outside bucketloader, transformers and accelerate); it
# trains. In a distributed run the ranks agree first (all_reduce MAX): a stand-in only where no
# rank can read the model (FSDP's ranks > 0 on meta beside rank 0's weights keep rank 0's probe).


#: Config fields sized by the hidden width (a feed-forward's), set to twice the stand-in's, or,
#: in a mixture of experts, to that shared among the experts.
_FEED_FORWARD = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "ffn_dim",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "n_inner",
    "ffn_hidden_size",
)


#: Config fields that count a mixture of experts' experts (Qwen and OLMoE, Mixtral and GPT-OSS,
#: DeepSeek, DBRX's ffn_config).
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


#: Config fields that count key/value heads (DBRX keeps its in attn_config.kv_n_heads).
_KEY_VALUE_HEADS = ("num_key_value_heads", "kv_n_heads")


#: The most parameters a stand-in may hold (NOTE [ The probe of a model no rank can read ]):
#: 5e8, 2 GB in float32, built on every rank's CPU. The copies of the dense 1.1B-72B shapes
#: hold 3.4e6-47.5e6, of Qwen3-235B-A22B 9.6e7 (benchmarks/results/probe_stand_in.md), of
#: DeepSeek-V3 1.2e8; a config whose sizes the copy does not know stays larger.
_STAND_IN_LIMIT = 500_000_000


#: Token ids only generation reads (a probe's forward pass without labels reads none).
_GENERATION_IDS = (
    "bos_token_id",
    "eos_token_id",
    "sep_token_id",
    "cls_token_id",
    "unk_token_id",
    "mask_token_id",
    "decoder_start_token_id",
)


def _shrink(config: Any, outer: tuple[int, int, int | None, int | None] | None = None) -> None:
    """Narrow ``config`` (a copy) in place for a probe stand-in (NOTE [ The probe of a model no
    rank can read ]): two heads of the same width, fewer feed-forward units and vocabulary
    entries; its sub-configs (``text_config``, ``vision_config`` ...) alike. A sub-config with
    no heads of its own (DBRX's ``ffn_config`` and ``attn_config``) reads the sizes of the one
    it is in: ``outer``, that one's (hidden size, the copy's, key/value heads, the copy's),
    which its own ``hidden_size`` and key/value heads follow where they equal them."""
    from transformers import PretrainedConfig

    heads = getattr(config, "num_attention_heads", None)  # (attribute_map: GPT-2's n_head)
    hidden = getattr(config, "hidden_size", None)
    mine: tuple[int, int, int | None, int | None] | None = None
    if _is_int(heads) and _is_int(hidden) and heads > 2:
        width = getattr(config, "head_dim", None)
        width = width if _is_int(width) and width > 0 else hidden // heads
        kv = getattr(config, "num_key_value_heads", None)
        config.num_attention_heads = 2
        small_kv = (1 if kv < heads else 2) if _is_int(kv) else None
        if small_kv is not None:
            config.num_key_value_heads = small_kv
        if getattr(config, "word_embed_proj_dim", None) == hidden:  # (OPT)
            config.word_embed_proj_dim = 2 * width
        mine = (hidden, 2 * width, kv if _is_int(kv) else None, small_kv)
        hidden = config.hidden_size = 2 * width
    elif outer is not None and not _is_int(heads):
        # (s34-probe: DBRX's ffn_config kept hidden_size=6144 beside a copy of d_model 256, and
        # its experts their 16 x 10752 units: a DBRX-132B-shaped copy held 126.9e9 parameters,
        # 473 GiB in float32, allocated on every rank's CPU)
        if hidden == outer[0]:
            hidden = config.hidden_size = outer[1]
        for name in _KEY_VALUE_HEADS:
            if outer[3] is not None and getattr(config, name, None) == outer[2]:
                setattr(config, name, outer[3])
    for name in list(vars(config)):
        sub = getattr(config, name, None)
        if name.endswith("_config") and isinstance(sub, PretrainedConfig):
            _shrink(sub, mine)
    if _is_int(hidden):
        # (each of E experts with a feed-forward of its own: the units of one, shared among
        # them, at least 8 each. s33-tidyA: at 2 * hidden each, a Qwen3-235B-A22B-shaped copy,
        # 128 experts in 94 layers, held 4.75e9 parameters, 17.7 GiB in float32 on each rank's
        # CPU; now 0.10e9. Routing is each token's own: the experts' width mixes nothing)
        counts = [getattr(config, name, None) for name in _EXPERTS]
        experts = max([1, *(n for n in counts if _is_int(n))])
        units = 2 * hidden if experts == 1 else max(8, 2 * hidden // experts)
        for name in _FEED_FORWARD:
            if _is_int(getattr(config, name, None)):
                setattr(config, name, units)
    vocab = getattr(config, "vocab_size", None)
    if _is_int(vocab) and vocab > 512:
        # (ids a forward pass reads, the padding row and a multimodal model's image or audio
        # token, stay in the vocabulary; generation's, often its last entries, are dropped)
        kept = [
            v
            for k, v in vars(config).items()
            if k.endswith(("_id", "_index")) and k not in _GENERATION_IDS and _is_int(v)
        ]
        config.vocab_size = small = max([512, *(i + 1 for i in kept if i < vocab)])
        for name in _GENERATION_IDS:
            value = getattr(config, name, None)
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(_is_int(v) and v >= small for v in values):
                setattr(config, name, None)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _stand_in(model: Any) -> tuple[Any, str]:
    """A small copy of ``model``'s architecture with random weights to probe where its own
    parameters cannot be read (NOTE [ The probe of a model no rank can read ]), and ""; or
    ``None`` and why none is made."""
    import copy

    from transformers import PretrainedConfig, PreTrainedModel

    kind = type(model)
    config = getattr(model, "config", None)
    if not isinstance(model, PreTrainedModel) or not isinstance(config, PretrainedConfig):
        return None, f"{kind.__name__} is not a transformers model built from its config"
    if not kind.__module__.startswith("transformers."):
        return None, (
            f"{kind.__name__} is code of its own ({kind.__module__}), whose config no copy "
            "is known to keep the attention of"
        )
    try:
        small = copy.deepcopy(config)
        _shrink(small)
        # counted on the meta device first, where it allocates nothing (s34-probe: sizes the
        # copy does not know stay as large as the model's, and were allocated and filled on
        # every rank's CPU: 7.6e11 parameters for one default config transformers ships)
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            size = sum(p.numel() for p in kind(copy.deepcopy(small)).parameters())
        if size > _STAND_IN_LIMIT:
            return None, (
                f"a small copy of its config would still hold {size:,} parameters "
                f"({size * 4 / 2**30:,.1f} GiB in float32 on every rank's CPU), more than the "
                f"{_STAND_IN_LIMIT:,} a copy may hold: sizes of its config the copy does not "
                "know how to narrow"
            )
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            torch.manual_seed(0)
            stand = kind(small)
        stand.float()
    except Exception as exc:  # (a config whose sizes the copy does not keep consistent)
        return None, f"a small copy of its config did not build ({type(exc).__name__}: {exc})"
    unread = _unreadable(stand)  # (built under a context that still partitions or defers them)
    if unread:
        return None, f"a small copy of it could not be made on the CPU ({unread})"
    return stand, ""


def _packing_leak(
    model: Any, attention: str, collate: Any, start: int, *, use_cache: bool | None = False
) -> float | None:
    """How far the second document's logits moved when the first changed, on two packed rows
    made as ``attention`` says, positions from ``start``, the model called with ``use_cache``
    (``None``: not passed, as training calls it): ``0.0`` where the model keeps the documents
    apart, ``None`` where the probe cannot run (NOTE [ Models that mix packed documents ])."""

    if _unreadable(model):
        return None
    params = list(model.parameters())
    stance = getattr(torch.compiler, "set_stance", None)  # (torch >= 2.6)
    if stance is None and _is_compiled(model):
        return None  # (the probe's shape would compile a graph the plan does not have)
    try:  # (a model of the user's own may not say: NotImplementedError)
        vocab = getattr(model.get_input_embeddings(), "num_embeddings", None)
    except Exception:
        vocab = None
    # two ids mid-vocabulary (0 and 1 where the vocabulary's size is not known: in every one)
    a, b = (vocab // 2, vocab // 2 + 1) if isinstance(vocab, int) and vocab > 2 else (0, 1)
    docs = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    batch: dict[str, Any] = {
        "input_ids": torch.tensor([[a, a, a, a, b, a], [b, b, b, a, b, a]]),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1, 2]] * 2) + start,
    }
    if attention == "mask":  # (as the collator makes it: bidirectional, per layer kind ...)
        batch["attention_mask"] = collate.document_masks(docs)
    elif attention == "flash":
        cu = torch.tensor([0, 3, 6, 9, 12], dtype=torch.int32)
        batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = cu
        batch["max_length_q"] = batch["max_length_k"] = 3
    if collate.return_seq_idx:
        batch["seq_idx"] = torch.tensor([[0, 0, 0, 1, 1, 1], [2, 2, 2, 3, 3, 3]], dtype=torch.int32)
    device = params[0].device
    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    modes = [(m, m.training) for m in model.modules()]  # (a tower the user froze in eval too)
    try:
        model.eval()
        eager = stance("force_eager") if stance is not None else contextlib.nullcontext()
        with torch.no_grad(), eager:  # (a compiled model runs it uncompiled: no new graph)
            cache = {} if use_cache is None else {"use_cache": use_cache}
            out = model(**batch, **cache)
        logits = _logits_of(out)
        # the row's last three tokens (s31-rev: read at [:, 3:], PEFT's prompt tuning, whose
        # virtual tokens' logits come first, gave 5 rows, was not probed, and mixed unseen).
        # More rows than tokens only as (B, rows, V): a (B, num_labels) classifier's or a
        # (B, V, L) layout's would compare outputs that are no token's (not probed)
        n = logits.shape[1] if logits.dim() >= 2 else 0
        extra = n > 6 and logits.dim() >= 3 and logits.shape[2] != 6
        second = logits[:, -3:].float() if n == 6 or extra else None
    except Exception:  # (the pass a batch of this kind cannot make: training will say why)
        return None
    finally:
        for module, mode in modes:
            module.training = mode
    if second is None or second.shape[:2] != (2, 3):  # (not one row of logits per token)
        return None
    moved = float((second[0] - second[1]).abs().max())
    scale = float(second.abs().max())
    return moved if moved > 1e-5 * (1.0 + scale) else 0.0


def _logits_of(out: Any) -> Any:
    """A model output's logits: a ``ModelOutput``'s or a dict's ``logits``, a tensor itself,
    or a tuple's first tensor after a loss-less call (``None`` where none is found)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):  # (ModelOutput is one too)
        return out.get("logits")
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return getattr(out, "logits", None)


def _position_limit(model: Any) -> tuple[int | None, str]:
    """The longest sequence ``model``'s position tables embed, and the shortest table's name;
    ``(None, "")`` without one. A table's first ids may be reserved: RoBERTa's positions start
    after its ``padding_idx`` (514 rows, 512 tokens), BART's after an ``offset`` of 2 (the
    tables of :func:`_position_tables`)."""
    best: tuple[int | None, str] = (None, "")
    for name, module in _position_tables(model):
        pad = module.padding_idx
        offset = getattr(module, "offset", 0)
        reserved = (offset if isinstance(offset, int) else 0) + (0 if pad is None else pad + 1)
        limit = module.num_embeddings - reserved
        if best[0] is None or limit < best[0]:
            best = (limit, f"{name}: {module.num_embeddings} rows")
    return best


def _is_image(dataset: Any, column: str) -> bool:
    """Images: a column of ``(C, H, W)`` number lists (an image processor's ``pixel_values``)."""
    try:
        t = table_and_indices(dataset)[0].schema.field(column).type
    except (TypeError, KeyError):
        return False
    depth, leaf = nesting(t)
    return depth == 3 and bool(pa.types.is_floating(leaf) or pa.types.is_integer(leaf))


def _is_audio(dataset: Any, column: str) -> bool:
    """Audio: a struct (decoded audio) column or a list column of floats (values, frames)."""
    try:
        table, _ = table_and_indices(dataset)
        arr, path = resolve_column(table, column)
    except (TypeError, KeyError):
        return False
    if path != column:
        return True
    return bool(pa.types.is_floating(nesting(arr.type)[1]))


class BucketTrainer(_BucketMixin, transformers.Trainer):
    """A ``transformers.Trainer`` whose train, eval and predict batches have planned shapes.

    Training runs a :class:`~bucketloader.BucketSampler`; ``evaluate`` and ``predict`` run an
    :class:`~bucketloader.evaluation.EvalSampler`: every sample exactly once, predictions and
    ``label_ids`` in dataset order, filler rows never in the metrics (NOTE [ Evaluation and
    prediction in dataset order ]). Filler rows copy real rows with labels -100, and the loss of a
    padded batch equals the loss of its real rows for every supported head (NOTE [ Filler rows
    and the loss, per head ] in :mod:`bucketloader.hf.loss`). Text columns go through
    :func:`~bucketloader.hf.for_text`, audio (a decoded-audio struct, or float lists such as
    ``input_values`` or ``(T, 80)`` ``input_features``) through
    :func:`~bucketloader.hf.for_audio`, images (``(C, H, W)`` ``pixel_values``) through
    :func:`~bucketloader.hf.for_images` (``pixel_mask`` for a model that takes it); targets
    (``labels`` of other lengths) are padded per bucket; ``decoder_attention_mask`` is added
    when the model takes one; the tokenizer's ``padding_side`` decides the side. A padding
    ``data_collator`` is replaced by the planned collation; a ``DataCollatorForLanguageModeling``'s
    masking (or causal labels) is applied to each planned batch; any other collator is refused
    (NOTE [ The user's data_collator ]).

    Args:
        *args: as ``transformers.Trainer``.
        bucketing: a prebuilt :class:`~bucketloader.hf.Bucketing` for training (from
            :func:`~bucketloader.hf.for_text` / ``for_audio`` / ``for_images``), or a dict of
            their options (``column``, ``num_buckets``, ``max_tokens``, ``last_batch``,
            ``pad_token_id``, ``pad_to_multiple_of``, ``target_length``, ...) applied to each
            dataset after the unused columns are removed. Defaults: ``column`` = the model's
            ``main_input_name``, ``batch_size`` = ``per_device_train_batch_size`` (unless
            ``max_tokens``), ``seed`` = ``args.data_seed`` (else ``args.seed``),
            ``last_batch="drop"`` with ``args.dataloader_drop_last`` (training only), rank and
            world size from ``args``, pad id and side from ``processing_class`` (else the model
            config's ``pad_token_id``).
        eval_bucketing: options that differ for evaluation and prediction (e.g. a larger
            ``max_tokens``, or ``balance=False``); the training options apply otherwise, except
            ``shuffle``, ``seed``, ``last_batch``, ``longest_first``, ``weights``,
            ``accumulate`` and ``batch_size`` (which defaults to ``per_device_eval_batch_size``).
        **kwargs: as ``transformers.Trainer``.

    ``trainer.bucketing`` holds the training sampler (its ``shapes`` are every batch shape
    training sees) and collator, planned on first use (reading it plans training's epochs
    before ``train()``); after ``evaluate`` or ``predict``, ``trainer.eval_bucketing`` holds
    theirs.

    Each checkpoint folder holds the training sampler's state (``bucketloader_sampler.json``),
    and ``train(resume_from_checkpoint=...)`` refuses a run that plans other batches than the
    checkpoint's (another dataset, seed, option, number of processes or accumulation), naming
    what changed, instead of skipping the wrong batches (NOTE [ A resume checks the
    checkpoint's plan ]).

    ``TrainingArguments(torch_compile=True)`` compiles one static graph per planned shape, the
    recompile limit is raised to the planned train + eval shapes, and :meth:`precompile` (or
    ``bucketing={"precompile": True}``) compiles them all before step 1 (NOTE [ torch.compile
    and the planned shapes ]).

    Example:
        >>> import datasets, tempfile, transformers
        >>> lengths = range(3, 43)
        >>> data = datasets.Dataset.from_dict(
        ...     {"input_ids": [[5] * n for n in lengths], "label": [n % 2 for n in lengths]})
        >>> model = transformers.BertForSequenceClassification(transformers.BertConfig(
        ...     vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...     intermediate_size=16, pad_token_id=0))
        >>> args = transformers.TrainingArguments(tempfile.mkdtemp(), max_steps=2, use_cpu=True,
        ...     report_to=[], save_strategy="no", disable_tqdm=True, logging_strategy="no")
        >>> trainer = BucketTrainer(model=model, args=args, train_dataset=data,
        ...     bucketing={"num_buckets": 4, "batch_size": 8, "pad_token_id": 0})
        >>> trainer.bucketing.sampler.shapes  # every batch shape training will see
        [(8, 12), (8, 22), (8, 32), (8, 42)]
        >>> out = trainer.train()  # doctest: +ELLIPSIS
        {'train_runtime': ...}
        >>> out.global_step
        2
    """


class BucketSeq2SeqTrainer(_BucketMixin, transformers.Seq2SeqTrainer):
    """:class:`BucketTrainer` for ``Seq2SeqTrainer`` (``predict_with_generate``).

    Generation itself grows the output token by token (its shapes are ``generate``'s); the
    encoder inputs are at planned shapes and the generated tokens come back in dataset order,
    padded to the generation ``max_length`` as ``Seq2SeqTrainer`` pads them.

    Example:
        >>> import datasets, tempfile, transformers
        >>> pairs = [(3 + i % 9, 2 + i % 5) for i in range(24)]
        >>> data = datasets.Dataset.from_dict({"input_ids": [[5] * s for s, _ in pairs],
        ...                                    "labels": [[6] * t for _, t in pairs]})
        >>> model = transformers.BartForConditionalGeneration(transformers.BartConfig(
        ...     vocab_size=16, d_model=8, encoder_layers=1, decoder_layers=1,
        ...     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
        ...     decoder_ffn_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        ...     decoder_start_token_id=2, max_position_embeddings=32))
        >>> args = transformers.Seq2SeqTrainingArguments(tempfile.mkdtemp(), max_steps=1,
        ...     use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
        ...     predict_with_generate=True, generation_max_length=8)
        >>> trainer = BucketSeq2SeqTrainer(model=model, args=args, train_dataset=data,
        ...     bucketing={"column": ["input_ids", "labels"], "max_shapes": 3, "batch_size": 4,
        ...                "pad_token_id": 0})
        >>> trainer.bucketing.sampler.shapes  # joint (batch, input, target) cells
        [(4, 6, 4), (4, 8, 6), (4, 11, 5)]
        >>> out = trainer.train()  # doctest: +ELLIPSIS
        {'train_runtime': ...}
        >>> trainer.predict(data.select(range(5))).predictions.shape[0]  # dataset order
        5
    """

    def _prepare_prediction(
        self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool
    ) -> None:
        """With ``predict_with_generate``, adds ``decoder_input_ids`` from the labels (as
        ``DataCollatorForSeq2Seq`` does), so that ``Seq2SeqTrainer`` leaves them and
        ``decoder_attention_mask`` out of ``generate``."""
        generating = self.args.predict_with_generate and not prediction_loss_only
        core = getattr(model, "module", model)
        prepare = getattr(core, "prepare_decoder_input_ids_from_labels", None)
        if generating and "labels" in inputs and "decoder_input_ids" not in inputs and prepare:
            inputs["decoder_input_ids"] = prepare(labels=inputs["labels"])
