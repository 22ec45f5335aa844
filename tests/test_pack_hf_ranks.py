"""BucketTrainer's packing probe on 2 real gloo processes under FSDP2: every rank probes and all
take the same decision (NOTE [ The probe on every rank ] in bucketloader.hf.trainer).

accelerate turns FSDP on only for accelerator devices (``AcceleratorState`` sets it in its
multi-GPU branch; on a CPU the run is plain DDP, ``is_fsdp_enabled`` False), so the ranks turn
it on themselves after ``Trainer`` made its accelerator, and training then wraps the model with
torch's ``fully_shard`` over gloo, as on GPUs."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
from conftest import free_port, run_ranks

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

#: What a rank imports beyond torch and bucketloader: imported once before the ranks fork.
PRELOAD = (
    "datasets",
    "transformers.trainer",
    "transformers.models.llama",
    "transformers.models.bert",
    "bucketloader.hf",
)


def _fsdp_trainer():
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    from bucketloader import hf

    class FSDPTrainer(hf.BucketTrainer):
        """FSDP2 on a CPU: what accelerate sets up for it on GPUs, set here by hand."""

        def create_accelerator_and_postprocess(self):
            super().create_accelerator_and_postprocess()
            state = self.accelerator.state
            state.distributed_type = DistributedType.FSDP
            state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
            self.is_fsdp_enabled = True

    return FSDPTrainer


def _on_meta(model):
    """The model as ``from_pretrained`` leaves ranks > 0 under FSDP's cpu_ram_efficient_loading:
    parameters on the meta device (rank 0's come to them when training wraps the model), the
    non-persistent buffers real."""
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = torch.nn.Parameter(p.to("meta"), p.requires_grad)
    return model


def _llama(seed=0, attn="sdpa"):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        attn_implementation=attn,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(config)


def _bert(seed):
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=101,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        is_decoder=True,
    )
    return transformers.BertLMHeadModel(config)


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
    from bucketloader import hf
    from bucketloader.hf import trainer as module

    probe, reduce = module._packing_leak, module._agreed_leak
    seen: list[float | None] = []  # what this rank's own probes measured
    agreed: list[float | None] = []  # what the ranks agreed on
    broken = {"on": False}

    def recorded_probe(*args, **kwargs):
        if broken["on"] and rank == 1:
            raise RuntimeError("the probe broke on rank 1, on purpose")
        seen.append(probe(*args, **kwargs))
        return seen[-1]

    def recorded_agreement(*args):
        agreed.append(reduce(*args))
        return agreed[-1]

    module._packing_leak = recorded_probe
    module._agreed_leak = recorded_agreement
    trainer_class = _fsdp_trainer()
    ds = datasets.Dataset.from_dict({"input_ids": [[5 + i % 7] * (3 + i % 9) for i in range(64)]})
    packed = hf.for_packing(ds, pad_token_id=0, row_length=32, batch_size=2)

    def args(layer, meta=False, **kw):
        return transformers.TrainingArguments(
            output_dir=f"{out}-{rank}",
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            max_steps=2,
            fsdp=True,
            fsdp_config={
                "version": 2,
                "transformer_layer_cls_to_wrap": [layer],
                "cpu_ram_efficient_loading": meta,
            },
            **kw,
        )

    result = {}

    def attempt(name, make):
        seen.clear()
        agreed.clear()
        try:
            trainer = make()
        except (ValueError, RuntimeError) as exc:
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
            return None
        result[name] = {"built": True}
        return trainer

    def meta_rank(model):
        return _on_meta(model) if rank > 0 else model

    # a cache mixes the documents; rank 1 holds the model on meta and cannot probe it
    attempt(
        "cache, rank 1 on meta",
        lambda: trainer_class(
            model=meta_rank(_llama()),
            args=args("LlamaDecoderLayer", meta=True, use_cache=True),
            bucketing=packed,
        ),
    )
    result["cache, rank 1 on meta"].update(seen=list(seen), agreed=list(agreed))
    # BertLMHeadModel reads no documents from position_ids; other weights on each rank
    attempt(
        "mixing, other weights",
        lambda: trainer_class(model=_bert(rank), args=args("BertLayer"), bucketing=packed),
    )
    result["mixing, other weights"].update(seen=list(seen), agreed=list(agreed))
    # eager attention adds a bool mask to its scores (True adds 1: nothing hidden), a float one
    # of its dtype keeps the documents apart; rank 1 holds the model on meta (s34-probe)
    masked = hf.for_packing(ds, pad_token_id=0, row_length=32, batch_size=2, attention="mask")
    attempt(
        "bool mask, rank 1 on meta",
        lambda: trainer_class(
            model=meta_rank(_llama(attn="eager")),
            args=args("LlamaDecoderLayer", meta=True),
            bucketing=masked,
        ),
    )
    broken["on"] = True
    attempt(
        "probe raises on rank 1",
        lambda: trainer_class(model=_llama(), args=args("LlamaDecoderLayer"), bucketing=packed),
    )
    broken["on"] = False
    trainer = attempt(
        "kept apart, rank 1 on meta",
        lambda: trainer_class(
            model=meta_rank(_llama()),
            args=args("LlamaDecoderLayer", meta=True),
            bucketing=packed,
        ),
    )
    result["kept apart, rank 1 on meta"].update(seen=list(seen), agreed=list(agreed))
    if trainer is not None:
        loss = trainer.train().training_loss
        weight = next(trainer.model.parameters())
        result["kept apart, rank 1 on meta"].update(
            loss=loss,
            wrapped=type(trainer.model).__name__,
            sharded=type(weight).__name__,
            finite=bool(torch.isfinite(weight.full_tensor()).all()),
        )
    with open(f"{out}-{rank}.json", "w") as f:
        json.dump(result, f)
    torch.distributed.barrier()
    if hasattr(trainer, "end"):  # (transformers 5.19 and later)
        trainer.end()  # destroys the process group: no gloo thread left running at exit
    else:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_under_fsdp_every_rank_probes_and_all_take_one_decision(tmp_path):
    """s32: under DeepSpeed and FSDP the probe was skipped (CLOSING31: "running it there could
    make ranks disagree"), so a packing that mixed documents trained silently there. Now every
    rank probes and the ranks take the largest leak: a rank that holds the model on the meta
    device (FSDP's cpu_ram_efficient_loading) refuses with rank 0, with rank 0's numbers; ranks
    whose weights differ refuse with one message; so do a rank on meta and rank 0 where only
    an additive mask keeps the documents apart (s34-probe: only rank 0 offered it); a probe
    that raises on one rank stops the other too, at once; a model that keeps the documents
    apart trains under FSDP2."""
    out, port = str(tmp_path / "rank"), str(free_port())
    run_ranks(
        lambda r: [__file__, "worker", str(r), "2", port, out], 2, timeout=240, preload=PRELOAD
    )
    zero, one = (json.loads(open(f"{out}-{r}.json").read()) for r in range(2))

    cache = [zero["cache, rank 1 on meta"], one["cache, rank 1 on meta"]]
    assert cache[0]["error"] == cache[1]["error"]
    assert (
        "LlamaForCausalLM does not keep the packed documents of bucketing apart"
        in (cache[0]["error"])
    )
    assert "and a cache" in cache[0]["error"]
    assert set(cache[1]["seen"]) == {None}  # (rank 1 made no pass of its own)
    assert cache[0]["agreed"] == cache[1]["agreed"] and cache[0]["agreed"][0] > 0

    mixing = [zero["mixing, other weights"], one["mixing, other weights"]]
    assert mixing[0]["error"] == mixing[1]["error"]
    assert "BertLMHeadModel does not keep the packed documents" in mixing[0]["error"]
    assert mixing[0]["seen"][0] != mixing[1]["seen"][0]  # (each rank measured its own)
    assert mixing[0]["agreed"] == mixing[1]["agreed"]
    assert mixing[0]["agreed"][0] == max(mixing[0]["seen"][0], mixing[1]["seen"][0])

    # (s34-probe: the additive mask's probe was each rank's own, so rank 0's refusal offered
    # mask_dtype=torch.float32 and rank 1's, which could make no pass, did not)
    masked = [zero["bool mask, rank 1 on meta"], one["bool mask, rank 1 on meta"]]
    assert masked[0]["error"] == masked[1]["error"]
    assert "with attention='mask'" in masked[0]["error"]
    assert "mask_dtype=torch.float32)" in masked[0]["error"]

    assert one["probe raises on rank 1"]["error"] == (
        "RuntimeError: the probe broke on rank 1, on purpose"
    )
    assert zero["probe raises on rank 1"]["error"].startswith(
        "RuntimeError: FSDPTrainer: the packing check (one forward pass over two packed rows, "
        "on every rank, when the trainer is built) raised on rank 1, so rank 0 stops too"
    )

    trained = [zero["kept apart, rank 1 on meta"], one["kept apart, rank 1 on meta"]]
    assert trained[0]["seen"] == [0.0] and trained[1]["seen"] == [None]
    assert trained[0]["agreed"] == trained[1]["agreed"] == [0.0]
    for r in trained:
        assert r["built"] and np.isfinite(r["loss"]) and r["finite"]
        assert r["wrapped"] == "FSDPLlamaForCausalLM" and r["sharded"] == "DTensor"


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
