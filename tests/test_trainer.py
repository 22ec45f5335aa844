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
    # Text with gsm8k question lengths (whitespace words), tokenised by a real fast tokenizer
    # built offline (word-level vocab of 100, [PAD] = 0): text -> input_ids -> buckets.
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from bucketloader import hf

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, 100)}}
    core = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]"
    )
    lens = load_real("gsm8k")[:240, 0]
    rng = np.random.default_rng(0)
    text = [" ".join(f"w{i}" for i in rng.integers(2, 100, n)) for n in lens]
    raw = datasets.Dataset.from_dict(
        {"text": text, "label": (lens > np.median(lens)).astype(int).tolist()}
    )
    ds = raw.map(lambda b: tokenizer(b["text"]), batched=True).shuffle(seed=1)
    assert set(ds.column_names) == {"text", "label", "input_ids", "attention_mask"}
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
        processing_class=tokenizer,  # the pad id comes from here
        bucketing={"num_buckets": 3, "max_tokens": 640, "last_batch": "pad"},
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
