"""BucketTrainer under TrainingArguments(torch_compile=True): one static graph per planned shape, a
recompile limit that covers train + eval, precompile() and the info lines (issue 22, traps 3-6).

Tiny BERT built from a config (no download), backend="eager": graphs are counted, not generated.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import logging

import numpy as np
import pytest
import torch
from conftest import load_real

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

from bucketloader import hf  # noqa: E402

LOGGER = "bucketloader.hf.trainer"


def _data(n=64, seed=0):
    lens = np.maximum(load_real("gsm8k")[:n, 0] // 2, 2)
    rng = np.random.default_rng(seed)
    return datasets.Dataset.from_dict(
        {
            "input_ids": [rng.integers(2, 100, k).tolist() for k in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
        }
    )


def _model():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    return transformers.BertForSequenceClassification(config)


def _args(tmp_path, **kw):
    base = {
        "output_dir": str(tmp_path),
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "dataloader_pin_memory": False,
        "torch_compile": True,
        "torch_compile_backend": "eager",
    }
    return transformers.TrainingArguments(**{**base, **kw})


def _graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


class Shapes:
    """Records the input_ids shape of every forward (the compiled call's inputs)."""

    def __init__(self, model):
        self.seen: list[tuple[bool, tuple[int, ...]]] = []
        model.register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        self.seen.append((module.training, tuple(kwargs["input_ids"].shape)))


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo.config as config

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with config.patch(recompile_limit=8):
        yield
    torch._dynamo.reset()


def test_torch_compile_true_makes_one_static_graph_per_planned_shape(tmp_path, fresh_dynamo):
    model = _model()
    shapes = Shapes(model)
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=6, seed=1),
        train_dataset=_data(),
        bucketing={"num_buckets": 3, "pad_token_id": 0},
    )
    assert model._compiled_call_impl is not None  # compiled in place, not by accelerate
    trainer.train()
    used = {s for training, s in shapes.seen if training}
    # at least three shapes: a dynamic compile makes one static graph, then one dynamic graph
    # at the second shape, so two graphs for two shapes would not show it
    assert len(used) >= 3
    assert used <= set(trainer.bucketing.sampler.shapes)
    assert _graphs() == len(used)  # one static graph per shape: no dynamic (symbolic) graph
    assert not torch._dynamo.utils.counters["graph_break"]


def test_recompile_limit_covers_train_and_eval_shapes_said_once(tmp_path, fresh_dynamo, caplog):
    import torch._dynamo.config as config

    trainer = hf.BucketTrainer(
        model=_model(),
        args=_args(tmp_path, max_steps=1),
        train_dataset=_data(),
        eval_dataset=_data(40, seed=1),
        bucketing={"num_buckets": 8, "pad_token_id": 0},
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trainer.get_train_dataloader()
        trainer.get_eval_dataloader()
        trainer.get_train_dataloader()
    train = len(trainer.bucketing.sampler.shapes)
    evals = len(trainer._eval_cache["eval"][1].sampler.shapes)  # planned with training's
    assert train + evals > 8
    assert config.recompile_limit >= train + evals
    lines = [r.getMessage() for r in caplog.records if "recompile_limit" in r.getMessage()]
    assert len(lines) == 1 and f"{train} train + {evals} eval" in lines[0]


def test_precompile_then_no_new_graph_in_training_or_evaluation(tmp_path, fresh_dynamo):
    model = _model()
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    shapes = Shapes(model)
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=4, seed=2),
        train_dataset=_data(),
        eval_dataset=_data(40, seed=1),
        bucketing={"num_buckets": 3, "pad_token_id": 0},
    )
    reports = trainer.precompile()
    planned = len(trainer.bucketing.sampler.shapes) + len(
        trainer._eval_cache["eval"][1].sampler.shapes
    )
    assert sum(len(r.rows) for r in reports) == planned
    assert _graphs() == planned  # one graph per planned shape, training and inference
    for k, v in model.state_dict().items():  # precompile changed nothing
        torch.testing.assert_close(v, before[k])
    assert all(p.grad is None for p in model.parameters())
    compiled = _graphs()
    shapes.seen.clear()
    trainer.train()
    trainer.evaluate()
    assert shapes.seen and _graphs() == compiled  # 0 graphs during training and evaluation


def test_precompile_of_packed_rows_then_no_new_graph_in_training(tmp_path, fresh_dynamo):
    # hf.for_packing's PackSampler has no bucket table: precompile() raised AttributeError
    # ('PackSampler' object has no attribute 'shape_table') before the first shape
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config)
    rng = np.random.default_rng(0)
    lens = [*rng.integers(2, 16, 30).tolist(), 20, 24]  # two documents only rows of 32 hold
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(2, 100, k).tolist() for k in lens]})
    bucketing = hf.for_packing(ds, pad_token_id=0, row_length=(16, 32), batch_size=2)
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=8, per_device_train_batch_size=2),
        train_dataset=ds,
        bucketing=bucketing,
    )
    (report,) = trainer.precompile()
    assert report.shapes == bucketing.sampler.shapes == [(2, 16), (2, 32)]
    compiled = _graphs()
    assert compiled == 2
    trainer.train()
    assert _graphs() == compiled  # 0 graphs during training


def test_precompile_of_roberta_rows_packed_from_its_padding_index(tmp_path, fresh_dynamo):
    # s31: RobertaForCausalLM was refused on packed rows; packed from padding_idx + 1 with the
    # document mask it precompiles each planned row length through the same collator (whose
    # example rows count positions from 2), and training compiles nothing new
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=34,
        pad_token_id=1,
        is_decoder=True,
    )
    rng = np.random.default_rng(0)
    lens = [*rng.integers(2, 16, 30).tolist(), 20, 24]
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(3, 100, k).tolist() for k in lens]})
    bucketing = hf.for_packing(
        ds, pad_token_id=1, row_length=(16, 32), batch_size=2, attention="mask",
        position_ids_start=2,
    )  # fmt: skip
    trainer = hf.BucketTrainer(
        model=transformers.RobertaForCausalLM(config),
        args=_args(tmp_path, max_steps=8, per_device_train_batch_size=2),
        bucketing=bucketing,
    )
    (report,) = trainer.precompile()
    assert report.shapes == [(2, 16), (2, 32)] and _graphs() == 2
    trainer.train()
    assert _graphs() == 2


def test_precompile_needs_a_compiled_model(tmp_path):
    trainer = hf.BucketTrainer(
        model=_model(),
        args=_args(tmp_path, torch_compile=False, torch_compile_backend=None, max_steps=1),
        train_dataset=_data(),
        bucketing={"num_buckets": 2, "pad_token_id": 0},
    )
    with pytest.raises(ValueError, match=r"torch_compile=True"):
        trainer.precompile()


def test_silent_overrides_get_one_info_line_each(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trainer = hf.BucketTrainer(
            model=_model(),
            args=_args(
                tmp_path,
                torch_compile=False,
                torch_compile_backend=None,
                train_sampling_strategy="group_by_length",
                per_device_eval_batch_size=16,
                max_steps=1,
            ),
            train_dataset=_data(),
            eval_dataset=_data(40, seed=1),
            bucketing={"num_buckets": 4, "pad_token_id": 0},
        )
        trainer.get_eval_dataloader()
        trainer.get_eval_dataloader()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("group_by_length" in m for m in messages) == 1
    assert sum("per_device_eval_batch_size=16" in m for m in messages) == 1
    assert max(s[0] for s in trainer.eval_bucketing.sampler.shapes) < 16
    # NOTE [ The Trainer's sampling strategy ]: group_by_length starts with the largest batch,
    # sequential does not shuffle (both were ignored)
    assert trainer.get_train_dataloader().batch_sampler.longest_first
    sequential = hf.BucketTrainer(
        model=_model(),
        args=_args(tmp_path, train_sampling_strategy="sequential", max_steps=1),
        train_dataset=_data(),
        bucketing={"num_buckets": 4, "pad_token_id": 0},
    )
    assert not sequential.get_train_dataloader().batch_sampler.shuffle


def test_accumulation_groups_through_the_trainer(tmp_path):
    model = _model()
    shapes = Shapes(model)
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(
            tmp_path,
            torch_compile=False,
            torch_compile_backend=None,
            gradient_accumulation_steps=2,
            max_steps=3,
        ),
        train_dataset=_data(),
        bucketing={"num_buckets": 3, "pad_token_id": 0, "accumulate": 2},
    )
    trainer.train()
    seen = [s for training, s in shapes.seen if training]
    assert len(seen) == 6 and len(trainer.get_train_dataloader()) % 2 == 0
    assert all(seen[i] == seen[i + 1] for i in range(0, 6, 2))  # no step mixes shapes
