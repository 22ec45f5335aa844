"""BucketTrainer.evaluate / predict on 2 real gloo processes: every sample once, in dataset order,
the same predictions, metrics and loss as one process."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
from conftest import free_port, load_real, run_ranks

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

#: What a rank imports beyond torch and bucketloader: imported once before the ranks fork.
PRELOAD = ("datasets", "transformers.trainer", "transformers.models.bert", "bucketloader.hf")


def _setup():
    from bucketloader import hf

    lens = load_real("gsm8k")[::100][:45, 0]  # 45 samples: 2 ranks cannot split them evenly
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [rng.integers(2, 100, n).tolist() for n in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
        }
    )
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
    model = transformers.BertForSequenceClassification(config)
    seen: dict[str, int] = {}

    def metrics(pred):
        seen["rows"] = len(pred.label_ids)
        return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}

    def trainer(output_dir):
        args = transformers.TrainingArguments(
            output_dir=output_dir,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            per_device_eval_batch_size=4,
        )
        return hf.BucketTrainer(
            model=model,
            args=args,
            eval_dataset=ds,
            bucketing={"num_buckets": 3},
            compute_metrics=metrics,
        )

    return ds, trainer, seen


def _worker(rank, world, port, out):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    ds, make, seen = _setup()
    trainer = make(f"{out}-{rank}")
    assert trainer.args.world_size == world
    metrics = trainer.evaluate()
    pred = trainer.predict(ds)
    sampler = trainer.eval_bucketing.sampler
    result = {
        "metrics": metrics,
        "rows": seen["rows"],
        "predictions": pred.predictions.tolist(),
        "label_ids": pred.label_ids.tolist(),
        "steps": len(sampler),
        "shapes": [list(s) for s in sampler.shapes],
    }
    with open(f"{out}-{rank}.json", "w") as f:
        json.dump(result, f)
    torch.distributed.barrier()
    if hasattr(trainer, "end"):  # (transformers 5.19 and later)
        trainer.end()  # destroys the process group: no gloo thread left running at exit
    else:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_gloo_processes_evaluate_and_predict_like_one(tmp_path):
    out, port = str(tmp_path / "rank"), str(free_port())
    run_ranks(
        lambda r: [__file__, "worker", str(r), "2", port, out], 2, timeout=240, preload=PRELOAD
    )
    ranks = [json.loads(open(f"{out}-{r}.json").read()) for r in range(2)]
    ds, make, seen = _setup()
    one = make(str(tmp_path / "single"))
    metrics = one.evaluate()
    pred = one.predict(ds)
    assert ranks[0]["steps"] == ranks[1]["steps"] < len(one.eval_bucketing.sampler)
    for r in ranks:
        assert r["rows"] == len(ds) == seen["rows"]  # every sample once, no filler row
        assert r["label_ids"] == ds["label"]  # in dataset order
        np.testing.assert_allclose(r["predictions"], pred.predictions, atol=1e-6)
        assert r["metrics"]["eval_accuracy"] == metrics["eval_accuracy"]
        assert r["metrics"]["eval_loss"] == pytest.approx(metrics["eval_loss"], rel=1e-6)
        assert {tuple(s) for s in r["shapes"]} == set(one.eval_bucketing.sampler.shapes)


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
