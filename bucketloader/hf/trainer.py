"""BucketTrainer: ``transformers.Trainer`` training on a BucketSampler + PadCollator.

This module imports ``transformers`` (``pip install 'bucketloader[hf]'``); ``bucketloader.hf``
loads it on first access to ``BucketTrainer``.

NOTE [ Why the train DataLoader is not passed through accelerate ]
``Trainer.get_train_dataloader`` builds a ``DataLoader`` and hands it to ``accelerator.prepare``.
On several processes accelerate wraps a batch sampler in ``BatchSamplerShard`` and re-shards it
(and ``split_batches`` / ``dispatch_batches`` re-batch), which would break a sampler that is
already rank-aware and drop or reshape planned batches (``Trainer`` neutralises this only for its
own ``BatchRebalanceSampler``). So the override returns a plain ``DataLoader`` with
``batch_sampler=`` a :class:`~bucketloader.BucketSampler` that takes its rank from the
arguments; ``Trainer`` still moves each batch to the device (``_prepare_inputs``), counts steps
with the sampler's exact ``len`` and calls ``set_epoch`` on the loader every epoch (forwarded to
the sampler), and on resume skips batches with ``accelerate.skip_first_batches``, which keeps the
batch sampler's batches as they are.
"""

from __future__ import annotations

import inspect
from typing import Any

import datasets
import transformers

from bucketloader.hf.bucketing import Bucketing, ModelInputs, for_text

__all__ = ["BucketTrainer"]


class BucketTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` whose training batches have exactly the planned shapes.

    Args:
        *args: as ``transformers.Trainer``.
        bucketing: a prebuilt :class:`~bucketloader.hf.Bucketing` (from
            :func:`bucketloader.hf.for_text` / ``for_audio``), or a dict of
            :func:`~bucketloader.hf.for_text` options (``column``, ``num_buckets``,
            ``max_tokens``, ``last_batch``, ``pad_token_id``, ...) applied to ``train_dataset``
            after the unused columns are removed. Defaults: ``batch_size`` =
            ``per_device_train_batch_size`` (unless ``max_tokens``), ``seed`` = ``args.seed``,
            rank and world size from ``args``, pad id from ``processing_class``.
        **kwargs: as ``transformers.Trainer``.

    After the first ``get_train_dataloader()``, ``trainer.bucketing`` holds the sampler (its
    ``shapes`` are every batch shape training sees) and the collator.
    """

    def __init__(
        self, *args: Any, bucketing: Bucketing | dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if bucketing is not None and not isinstance(bucketing, (Bucketing, dict)):
            raise TypeError(
                "bucketing must be a Bucketing (bucketloader.hf.for_text(...)) or a dict of "
                f"for_text options, got {type(bucketing).__name__}"
            )
        if isinstance(bucketing, Bucketing) and kwargs.get("train_dataset") is None:
            kwargs["train_dataset"] = bucketing.dataset
        super().__init__(*args, **kwargs)
        self._bucketing_options = dict(bucketing) if isinstance(bucketing, dict) else {}
        self.bucketing: Bucketing | None = bucketing if isinstance(bucketing, Bucketing) else None

    def model_inputs(self) -> list[str]:
        """Names the model's ``forward`` takes, plus the label names (what batches may keep)."""
        model: Any = self.model
        base = getattr(model, "get_base_model", None)  # a PEFT wrapper
        forward = (base() if callable(base) else model).forward
        names = list(inspect.signature(forward).parameters)
        return names + [n for n in ("label", "label_ids", *self.label_names) if n not in names]

    def _build_bucketing(self) -> Bucketing:
        dataset = self.train_dataset
        if dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        if isinstance(dataset, datasets.Dataset) and self.args.remove_unused_columns:
            keep = set(self.model_inputs())
            unused = [c for c in dataset.column_names if c not in keep]
            dataset = dataset.remove_columns(unused) if unused else dataset
        opts = dict(self._bucketing_options)
        if "max_tokens" not in opts:
            opts.setdefault("batch_size", self._train_batch_size)
        opts.setdefault("seed", self.args.seed)
        opts.setdefault("num_replicas", self.args.world_size)
        opts.setdefault("rank", self.args.process_index)
        if opts.get("pad_token_id") is None and opts.get("tokenizer") is None:
            opts["tokenizer"] = getattr(self.processing_class, "tokenizer", self.processing_class)
        return for_text(dataset, **opts)

    def get_train_dataloader(self) -> Any:
        """A plain ``DataLoader`` over the bucket sampler (see the module NOTE)."""
        if self.bucketing is None:
            self.bucketing = self._build_bucketing()
        b = self.bucketing
        collate = b.collator
        if self.args.remove_unused_columns and isinstance(collate, ModelInputs):
            collate = ModelInputs(collate.collator, keep=self.model_inputs())
        workers = self.args.dataloader_num_workers
        return Bucketing(b.sampler, collate, b.dataset).dataloader(
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers if workers else False,
            prefetch_factor=self.args.dataloader_prefetch_factor if workers else None,
        )
