"""Hugging Face integration: lengths from Arrow, one-call sampler + collator, and a Trainer.

Needs ``datasets`` (``pip install 'bucketloader[hf]'``); ``BucketTrainer`` also needs
``transformers`` and is loaded on first access::

    from bucketloader.hf import BucketTrainer

    trainer = BucketTrainer(
        model=model, args=args, train_dataset=tokenised, processing_class=tokenizer,
        bucketing={"num_buckets": 8, "max_tokens": 16384},  # for_text options
    )
    trainer.train()  # every batch has a shape in trainer.bucketing.sampler.shapes
    trainer.predict(test)  # every sample once, predictions in dataset order

Images of different sizes (``pixel_values`` and ``pixel_mask``, DETR-family detectors):
``for_images`` (``(B, H, W)`` cells; docs: images.md). Seq2seq with
``predict_with_generate``: ``BucketSeq2SeqTrainer``. Custom loops:
``for_text(..., sample_mask=True)`` and :func:`masked_loss` (the loss of the real rows), or
``for_text(..., evaluation=True)`` and :func:`bucketloader.evaluation.restore_order`.

Without a Trainer: ``sampler, collate, data = for_text(tokenised, tokenizer=tokenizer,
max_tokens=16384)`` then ``DataLoader(data, batch_sampler=sampler, collate_fn=collate)``.
Packed causal-LM training: ``bucketing=for_packing(tokenised, tokenizer=tokenizer,
row_length=2048, batch_size=8)`` (:mod:`bucketloader.hf.packing`).
"""

from typing import Any

try:
    import datasets  # noqa: F401
    import pyarrow  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        f"bucketloader.hf needs the Hugging Face 'datasets' package ({exc}); install it with "
        "pip install 'bucketloader[hf]'"
    ) from None

from bucketloader.hf.bucketing import Bucketing, ModelInputs, for_audio, for_images, for_text
from bucketloader.hf.lengths import LENGTH_COLUMN, add_lengths, lengths
from bucketloader.hf.loss import loss_policy, masked_loss
from bucketloader.hf.packing import PackedInputs, for_packing

__all__ = [
    "LENGTH_COLUMN",
    "BucketSeq2SeqTrainer",
    "BucketTrainer",
    "Bucketing",
    "ModelInputs",
    "PackedInputs",
    "add_lengths",
    "for_audio",
    "for_images",
    "for_packing",
    "for_text",
    "lengths",
    "loss_policy",
    "masked_loss",
]


def __getattr__(name: str) -> Any:
    if name in ("BucketTrainer", "BucketSeq2SeqTrainer"):  # transformers: slow, optional
        try:
            from bucketloader.hf import trainer
        except ImportError as exc:
            raise ImportError(
                f"{name} needs 'transformers' ({exc}); install it with "
                "pip install 'bucketloader[hf]'"
            ) from None
        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
