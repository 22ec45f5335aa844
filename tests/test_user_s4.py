"""Defects found by a user's trial of the product (session 4), each pinned by a regression test.

Packed causal-LM training with a ``DataCollatorForLanguageModeling``: the collator used to
overwrite the packed rows' labels (-100 on each document's first token, the dataset's masked
prompt) with ``input_ids``; now it labels only the evaluation batches. Without it, an
evaluation set with no labels says that ``evaluate()`` will report no ``eval_loss``.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

from bucketloader import hf  # noqa: E402
from bucketloader.pack import IGNORE_INDEX  # noqa: E402


class _Tokenizer:
    """What DataCollatorForLanguageModeling reads of a tokenizer, without building one."""

    pad_token_id = 0
    mask_token = None
    all_special_ids = (0,)

    def __len__(self):
        return 100


def _trainer(tmp_path, data_collator):
    rng = np.random.default_rng(0)
    ids = [rng.integers(2, 100, n).tolist() for n in (5, 7, 3, 9, 4, 6)]
    labels = [[IGNORE_INDEX] * 2 + x[2:] for x in ids]  # SFT: the prompt masked out
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    config = transformers.LlamaConfig(
        vocab_size=100, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, pad_token_id=0,
    )  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, use_cpu=True, report_to=[], save_strategy="no",
        disable_tqdm=True,
    )  # fmt: skip
    packed = hf.for_packing(ds, pad_token_id=0, row_length=16, batch_size=2, shuffle=False)
    return hf.BucketTrainer(
        model=transformers.LlamaForCausalLM(config), args=args, bucketing=packed,
        data_collator=data_collator, eval_dataset=ds.remove_columns("labels"),
    )  # fmt: skip


def test_language_modeling_collator_keeps_packed_labels(tmp_path):
    plain = next(iter(_trainer(tmp_path, None).get_train_dataloader()))
    lm = transformers.DataCollatorForLanguageModeling(_Tokenizer(), mlm=False)
    trainer = _trainer(tmp_path, lm)
    batch = next(iter(trainer.get_train_dataloader()))
    # document starts and the masked prompts stay -100: no target across documents
    assert torch.equal(batch["labels"], plain["labels"])
    assert (batch["labels"][batch["position_ids"] == 0] == IGNORE_INDEX).all()
    # the evaluation batches (no labels column) get the collator's causal labels
    evaluation = next(iter(trainer.get_eval_dataloader()))
    real = evaluation["attention_mask"].bool()
    assert torch.equal(evaluation["labels"][real], evaluation["input_ids"][real])


def test_masked_lm_collator_on_packed_rows_is_refused(tmp_path):
    lm = transformers.DataCollatorForLanguageModeling(_Tokenizer(), mlm=False)
    lm.mlm = True  # a mask token-less tokenizer refuses mlm=True at construction
    with pytest.raises(ValueError, match=r"mlm=True.*pass mlm=False"):
        _trainer(tmp_path, lm).get_train_dataloader()


def test_unlabelled_eval_after_packed_training_says_no_eval_loss(tmp_path):
    trainer = _trainer(tmp_path, None)
    with pytest.warns(
        UserWarning, match=r"no 'labels' column, so evaluate\(\) reports no eval_loss"
    ):
        trainer.get_eval_dataloader()


def test_trainer_without_any_pad_token_names_where_to_give_one(tmp_path):
    ds = datasets.Dataset.from_dict(
        {"input_ids": [[5] * n for n in (3, 5, 2, 6)], "label": [0, 1] * 2}
    )
    config = transformers.BertConfig(
        vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16, max_position_embeddings=16, pad_token_id=None,
    )  # fmt: skip
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, use_cpu=True, report_to=[], save_strategy="no",
    )  # fmt: skip
    trainer = hf.BucketTrainer(
        model=transformers.BertForSequenceClassification(config), args=args, train_dataset=ds
    )
    where = (
        r"processing_class=NoneType has no pad_token_id and model.config.pad_token_id is None; "
        r"pass bucketing=\{'pad_token_id'"
    )
    with pytest.raises(ValueError, match=where):
        trainer.get_train_dataloader()
