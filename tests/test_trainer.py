"""A real transformers.Trainer run on BucketSampler + PadCollator: every batch shape planned."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import pytest
import torch
from conftest import load_real

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")


def test_bucket_trainer_trains_with_planned_shapes_only(tmp_path):
    from bucketloader import hf

    # gsm8k question lengths (whitespace tokens) as token-id rows; ids in [1, 100), pad 0.
    lens = load_real("gsm8k")[:240, 0]
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [rng.integers(1, 100, n).tolist() for n in lens],
            "token_type_ids": [[0] * int(n) for n in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
            "text": [f"question {i}" for i in range(len(lens))],  # removed: not a model input
        }
    ).shuffle(seed=1)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    seen: list[tuple[int, ...]] = []

    def record(_module, _args, kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        assert kwargs["attention_mask"].shape == kwargs["input_ids"].shape
        assert "lengths" not in kwargs and "sample_mask" not in kwargs

    model.register_forward_pre_hook(record, with_kwargs=True)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=3,
    )
    trainer = hf.BucketTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        bucketing={"num_buckets": 3, "max_tokens": 640, "pad_token_id": 0, "last_batch": "pad"},
    )
    loader = trainer.get_train_dataloader()
    assert type(loader).__name__ == "EpochDataLoader"  # not re-wrapped by accelerate
    sampler = trainer.bucketing.sampler
    assert len(loader) == len(sampler)
    out = trainer.train()
    assert len(seen) == 4
    assert set(seen) <= set(sampler.shapes), (seen, sampler.shapes)
    assert np.isfinite(out.training_loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(b[1] <= 183 for b in sampler.shapes)
