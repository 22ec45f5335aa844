"""Packed causal-LM training through transformers: hf.for_packing + BucketTrainer on a tiny
Llama (no hub), every batch at a planned shape, and the three ways to tell the model where
documents start."""

from __future__ import annotations

import os
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from conftest import load_real

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

from bucketloader import hf  # noqa: E402
from bucketloader.pack import IGNORE_INDEX  # noqa: E402


def _dataset(n=160, seed=0):
    q, a = load_real("gsm8k")[:n].T
    rng = np.random.default_rng(seed)
    ids, labels = [], []
    for nq, na in zip(q.tolist(), a.tolist(), strict=True):
        # prompt + response + BOS/EOS, the prompt masked out of the loss (SFT)
        toks = rng.integers(3, 101, nq + na + 2).tolist()
        ids.append(toks)
        labels.append([IGNORE_INDEX] * (nq + 1) + toks[nq + 1 :])
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": labels, "text": ["x"] * n})


def _model(attn):
    torch.manual_seed(0)
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


@pytest.mark.parametrize(
    ("attention", "attn", "mask_dtype"),
    [("positions", "sdpa", torch.bool), ("mask", "eager", torch.float32)],
)
def test_bucket_trainer_trains_packed_rows(tmp_path, attention, attn, mask_dtype):
    ds = _dataset()
    model = _model(attn)
    bucketing = hf.for_packing(
        ds,
        pad_token_id=0,
        attention=attention,
        mask_dtype=mask_dtype,
        row_length=512,
        batch_size=2,
        seed=1,
    )
    sampler = bucketing.sampler
    seen = []

    def record(_module, _args, kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        assert kwargs["position_ids"].shape == kwargs["input_ids"].shape
        if attention == "mask":
            assert kwargs["attention_mask"].shape == (2, 1, 512, 512)
            assert kwargs["attention_mask"].dtype == torch.float32
        else:
            assert "attention_mask" not in kwargs
        # prompts (47% of these documents' tokens, 39% in one batch of the plan) + starts +
        # padding: without the prompts masked only starts and padding would be ignored
        assert (kwargs["labels"] == IGNORE_INDEX).float().mean() > 0.3

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=5,
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=3,
    )
    trainer = hf.BucketTrainer(model=model, args=args, bucketing=bucketing)
    # (after the trainer's own pass on two tiny packed rows: NOTE [ Models that mix packed
    # documents ])
    model.register_forward_pre_hook(record, with_kwargs=True)
    assert not model.config.use_cache  # Trainer turns the cache off: packing is detected
    loader = trainer.get_train_dataloader()
    assert len(loader) == len(sampler)
    out = trainer.train()
    assert len(seen) == 5 and set(seen) == set(sampler.shapes) == {(2, 512)}
    assert np.isfinite(out.training_loss)


def test_evaluation_after_packed_training_pads_with_the_packings_id(tmp_path):
    # s30: with no tokenizer and no config pad id, evaluate() raised "needs a pad token id ...
    # pass bucketing={'pad_token_id': <int>}", though for_packing(pad_token_id=0) had named it
    ds = _dataset(40)
    model = _model("sdpa")
    model.config.pad_token_id = None
    bucketing = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        per_device_eval_batch_size=4,
    )
    trainer = hf.BucketTrainer(model=model, args=args, eval_dataset=ds, bucketing=bucketing)
    trainer.train()
    metrics = trainer.evaluate()
    assert np.isfinite(metrics["eval_loss"])
    batch = next(iter(trainer.get_eval_dataloader()))
    short = batch["input_ids"][batch["attention_mask"] == 0]
    assert short.numel() and (short == 0).all()  # padded with the packing's pad id
    own = hf.BucketTrainer(  # eval_bucketing= still decides
        model=model,
        args=args,
        eval_dataset=ds,
        bucketing=bucketing,
        eval_bucketing={"pad_token_id": 7},
    )
    batch = next(iter(own.get_eval_dataloader()))
    assert (batch["input_ids"][batch["attention_mask"] == 0] == 7).all()


def test_packed_inputs_modes_and_validation():
    ds = _dataset(12)
    sampler, collate, data = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=1)
    batch = collate([data[i] for i in sampler.plan().batch(0)])
    assert set(batch) == {"input_ids", "labels", "position_ids"}
    # the dataset's labels are used: the prompt stays masked, and every document start too
    starts = batch["position_ids"] == 0
    assert (batch["labels"][starts] == IGNORE_INDEX).all()
    _, flash, _ = hf.for_packing(
        ds, pad_token_id=0, row_length=512, batch_size=1, attention="flash"
    )
    fb = flash([data[i] for i in sampler.plan().batch(0)])
    assert fb["cu_seq_lens_q"].dtype == torch.int32 and fb["cu_seq_lens_q"] is fb["cu_seq_lens_k"]
    assert isinstance(fb["max_length_q"], int)
    with pytest.raises(ValueError, match="attention must be one of 'flash', 'mask', 'positions'"):
        hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=1, attention="dense")
    with pytest.raises(ValueError, match="pad_token_id"):
        hf.for_packing(ds, row_length=512, batch_size=1)


def test_a_labels_column_that_cannot_be_the_labels_is_refused_when_built():
    """s14: a ``labels`` column whose rows differ in length from the tokens (or an int class
    label) was taken, and the first batch failed naming a position in the batch, not the row."""
    ds = _dataset(12)
    short = [row[:-1] if i == 5 else row for i, row in enumerate(ds["labels"])]
    with pytest.raises(ValueError, match=r"in 1 rows the labels .* \(the first: row 5, ") as info:
        hf.for_packing(
            ds.remove_columns("labels").add_column("labels", short),
            pad_token_id=0,
            row_length=512,
            batch_size=1,
        )
    assert "remove_columns('labels')" in str(info.value)
    classes = ds.remove_columns("labels").add_column("labels", list(range(12)))
    with pytest.raises(TypeError, match=r"'labels' column .* holds int64 values, not lists"):
        hf.for_packing(classes, pad_token_id=0, row_length=512, batch_size=1)
    short = [row[:-1] if i in (5, 9) else row for i, row in enumerate(ds["labels"])]
    with pytest.raises(ValueError, match=r"in 2 rows the labels .* \(the first: row 5, "):
        hf.for_packing(ds.remove_columns("labels").add_column("labels", short), pad_token_id=0,
                       row_length=512, batch_size=1)  # fmt: skip
    floats = ds.cast_column("labels", datasets.Sequence(datasets.Value("float32")))
    with pytest.raises(TypeError, match=r"for_packing pads column 'labels' as token ids, but it h"):
        hf.for_packing(floats, pad_token_id=0, row_length=512, batch_size=1)  # (when built)
    assert hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=1).sampler  # aligned


def test_an_empty_dataset_is_named_empty():
    """s14: ``Dataset.from_dict({"input_ids": []})`` (a null column) was 'null values, not lists
    of token ids; name the token column (column='input_ids')', the column it had named."""
    empty = datasets.Dataset.from_dict({"input_ids": []})
    with pytest.raises(ValueError, match=r"but dataset has no rows \(len\(dataset\) == 0\)"):
        hf.for_packing(empty, pad_token_id=0, row_length=8, batch_size=1)


def test_a_model_that_mixes_packed_documents_is_refused(tmp_path):
    """s30: BertLMHeadModel, OPT and BLOOM do not read packed documents from position_ids:
    each attended to the documents before it in its row, and training went on silently;
    RoBERTa-like models embedded every packed position two rows off. NOTE [ Models that mix
    packed documents ]."""
    ds = _dataset(8)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no"
    )
    small = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2}
    bert = transformers.BertLMHeadModel(
        transformers.BertConfig(vocab_size=101, intermediate_size=32, is_decoder=True, **small)
    )
    packed = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=2)
    with pytest.raises(ValueError) as err:
        hf.BucketTrainer(model=bert, args=args, bucketing=packed)
    assert "BertLMHeadModel does not keep the packed documents of bucketing apart with " in str(
        err.value
    )
    assert str(err.value).endswith(
        "pack with hf.for_packing(..., attention='mask'), which BertLMHeadModel keeps apart"
    )
    masked = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=2, attention="mask")
    bert.bert.embeddings.eval()  # (a part the user keeps in eval mode stays there)
    hf.BucketTrainer(model=bert, args=args, bucketing=masked)  # (that one it does)
    assert bert.training and not bert.bert.embeddings.training
    bloom = transformers.BloomForCausalLM(
        transformers.BloomConfig(vocab_size=101, hidden_size=16, n_layer=1, n_head=2)
    )
    with pytest.raises(ValueError, match=r"BloomForCausalLM .* bucketing=hf.for_text\(\.\.\.\)"):
        hf.BucketTrainer(model=bloom, args=args, bucketing=packed)
    roberta = transformers.RobertaForCausalLM(
        transformers.RobertaConfig(
            vocab_size=101, intermediate_size=32, is_decoder=True, pad_token_id=1, **small
        )
    )
    with pytest.raises(ValueError, match=r"numbers positions from 2 .* position_ids_start=2\)$"):
        hf.BucketTrainer(model=roberta, args=args, bucketing=masked)
    assert bert.training and bloom.training  # (the pass left them as it found them)


def test_the_packing_refusal_names_the_model_in_a_peft_wrapper(tmp_path):
    """s31-rev: LoRA over OPT was refused as 'PeftModelForCausalLM does not keep the packed
    documents apart ... which PeftModelForCausalLM keeps apart', as if PEFT were the cause;
    the model in the wrapper (get_base_model, as PEFT's) is named with it."""

    class Wrapper(torch.nn.Module):  # (what PeftModel does: forward to the model it holds)
        def __init__(self, model):
            super().__init__()
            self.base_model = model

        def get_base_model(self):
            return self.base_model

        def forward(self, **kwargs):
            return self.base_model(**kwargs)

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no"
    )
    opt = transformers.OPTForCausalLM(
        transformers.OPTConfig(vocab_size=101, hidden_size=16, ffn_dim=32, num_hidden_layers=1,
                               num_attention_heads=2, word_embed_proj_dim=16)
    )  # fmt: skip
    packed = hf.for_packing(_dataset(8), pad_token_id=0, row_length=512, batch_size=2)
    with pytest.raises(ValueError, match=r"OPTForCausalLM \(in Wrapper\) does not keep") as err:
        hf.BucketTrainer(model=Wrapper(opt), args=args, bucketing=packed)
    assert str(err.value).endswith("which OPTForCausalLM (in Wrapper) keeps apart")


def test_packed_training_with_a_cache_is_refused(tmp_path):
    """s31-rev: with a cache, transformers builds a DynamicCache in the training forward and
    skips finding documents in position_ids, so the documents of a row mix (a document's
    logits 0.26 off against it alone), while the probe called the model with use_cache=False
    and let it through: TrainingArguments(use_cache=True) (Trainer copies it to
    model.config.use_cache), and, with the default arguments, a LLaVA-style model, whose
    language model reads its own text_config.use_cache (True). The probe now calls the model as
    training does. Gradient checkpointing turns the cache off itself (not refused), and a 4-D
    mask is used whatever the cache."""

    def args(**kw):
        return transformers.TrainingArguments(
            output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True,
            save_strategy="no", **kw,
        )  # fmt: skip

    ds = _dataset(8)
    packed = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=2)
    masked = hf.for_packing(ds, pad_token_id=0, row_length=512, batch_size=2, attention="mask")
    with pytest.raises(ValueError, match=r"apart with attention='positions' and a cache: ") as err:
        hf.BucketTrainer(model=_model("sdpa"), args=args(use_cache=True), bucketing=packed)
    assert str(err.value).endswith(
        "with a cache, transformers finds no documents in position_ids; train without a cache "
        "(TrainingArguments(use_cache=False), the default) or pack with hf.for_packing(..., "
        "attention='mask'), which LlamaForCausalLM keeps apart"
    )
    fields = transformers.TrainingArguments.__dataclass_fields__  # (5.x: the old name warns)
    name = next(n for n in ("activation_checkpointing", "gradient_checkpointing") if n in fields)
    checkpointed = args(use_cache=True, **{name: True})
    hf.BucketTrainer(model=_model("sdpa"), args=checkpointed, bucketing=packed)
    hf.BucketTrainer(model=_model("sdpa"), args=args(use_cache=True), bucketing=masked)
    hf.BucketTrainer(model=_model("sdpa"), args=args(), bucketing=packed)  # (no cache)
    model = _model("sdpa")  # (checkpointing turned on on the model itself, read from its
    # modules without transformers' deprecated is_gradient_checkpointing, which warns)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        hf.BucketTrainer(model=model, args=args(use_cache=True), bucketing=packed)

    with pytest.raises(ValueError, match=r"model\.config\.text_config\.use_cache = False\)"):
        hf.BucketTrainer(model=_llava(), args=args(), bucketing=packed)
    model = _llava()
    model.config.text_config.use_cache = False  # (the fix it names)
    hf.BucketTrainer(model=model, args=args(), bucketing=packed)
    # s31-tidyB: both caches on, both are named to turn off (they were listed "A; B", and A
    # alone, the top config's, leaves LLaVA's language model its cache: refused again)
    with pytest.raises(ValueError) as err:
        hf.BucketTrainer(model=_llava(), args=args(use_cache=True), bucketing=packed)
    assert "(TrainingArguments(use_cache=False), the default, and model.config.text_config." in (
        str(err.value)
    )


def _llava():
    torch.manual_seed(0)
    text = transformers.LlamaConfig(
        vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    vision = transformers.CLIPVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        image_size=8, patch_size=4,
    )  # fmt: skip
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=119)
    return transformers.LlavaForConditionalGeneration(config)


def test_checkpointing_one_tower_does_not_turn_the_language_models_cache_off(tmp_path):
    """s31-tidyB: the probe took gradient checkpointing on any module of the model as turning the
    cache off, and so called the model without one; a LLaVA with checkpointing on its vision
    tower only (the default arguments: its language model reads text_config.use_cache, True)
    was built, and its training forward mixed the documents (0.13 off against a document alone).
    Transformers turns the cache off in the modules that checkpoint, so the whole model's
    checkpointing counts (every module that can, its repeated layers aside), not one tower's."""
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no"
    )
    packed = hf.for_packing(_dataset(8), pad_token_id=0, row_length=512, batch_size=2)
    model = _llava()
    model.model.vision_tower.gradient_checkpointing_enable()
    with pytest.raises(ValueError, match=r"and a cache: .*text_config\.use_cache = False\)"):
        hf.BucketTrainer(model=model, args=args, bucketing=packed)
    model = _llava()  # (the whole model checkpointed: the language model keeps no cache)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    hf.BucketTrainer(model=model, args=args, bucketing=packed)
    model = _llava()  # (every other layer, as every_n_layers=2 does: still the whole model's)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)(
        every_n_layers=2
    )
    hf.BucketTrainer(model=model, args=args, bucketing=packed)


def test_the_packing_probe_reads_a_custom_models_output(tmp_path):
    """A model of the user's own (a dict out, no get_input_embeddings) is probed too: one that
    runs a cumulative sum over the row mixes the documents; one that keeps each token to itself
    passes."""

    class Model(torch.nn.Module):
        def __init__(self, mix):
            super().__init__()
            self.mix, self.embed, self.out = (
                mix,
                torch.nn.Embedding(101, 8),
                torch.nn.Linear(8, 101),
            )

        def get_input_embeddings(self):
            raise NotImplementedError

        def forward(self, input_ids, labels=None, **_):
            h = self.embed(input_ids)
            logits = self.out(h.cumsum(1) if self.mix else h)
            loss = None
            if labels is not None:
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX
                )
            return {"loss": loss, "logits": logits}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no"
    )
    packed = hf.for_packing(_dataset(8), pad_token_id=0, row_length=512, batch_size=2)
    with pytest.raises(ValueError, match="Model does not keep the packed documents"):
        hf.BucketTrainer(model=Model(mix=True), args=args, bucketing=packed)
    hf.BucketTrainer(model=Model(mix=False), args=args, bucketing=packed)


def _roberta(causal, attn="sdpa", positions=34):
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=positions,
        pad_token_id=1,
        is_decoder=causal,
        attn_implementation=attn,
    )
    cls = transformers.RobertaForCausalLM if causal else transformers.RobertaForMaskedLM
    return cls(config).eval()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_roberta_packed_from_its_padding_index_equals_each_document_alone(causal, attn):
    """s31: RoBERTa-like models number positions from padding_idx + 1 (2); packed rows numbered
    them from 0 with no option, and every logit moved (0.26-0.43 on this tiny model). With
    position_ids_start=2 and a document mask (causal for RobertaForCausalLM, bidirectional for
    RobertaForMaskedLM in a loop of one's own) each document's logits and per-token losses in
    a packed row equal the document run alone, the model numbering its own positions; the
    rows' position_ids and labels are DataCollatorWithFlattening(position_ids_start=2)'s."""
    from bucketloader.pack import PackSampler, document_mask

    rng = np.random.default_rng(0)
    lens = rng.integers(1, 30, size=24)
    lens[:3] = (1, 1, 32)  # one-token documents and a full row (positions up to 33 of 34)
    docs = [torch.from_numpy(rng.integers(3, 60, size=int(n))) for n in lens]
    sampler = PackSampler(lens, row_length=32, batch_size=3)
    collate = sampler.collator(pad_token_id=1, position_ids_start=2)
    flat = transformers.DataCollatorWithFlattening(position_ids_start=2, return_tensors="pt")
    model = _roberta(causal, attn)
    dtype = torch.bool if attn == "sdpa" else torch.float32
    seen, worst, worst_loss = 0, 0.0, 0.0
    for idx in sampler:
        batch = collate([docs[i] for i in idx])
        mask = document_mask(batch["document_ids"], causal=causal, dtype=dtype)
        with torch.no_grad():
            logits = model(
                input_ids=batch["input_ids"],
                position_ids=batch["position_ids"],
                attention_mask=mask,
            ).logits
        for r, row in enumerate(batch["document_ids"]):
            numbers = [d for d in row.unique().tolist() if d >= 0]
            if not numbers:
                continue
            real = row >= 0
            ref = flat([{"input_ids": docs[idx[d]].tolist()} for d in numbers])
            assert batch["position_ids"][r, real].tolist() == ref["position_ids"][0].tolist()
            assert batch["labels"][r, real].tolist() == ref["labels"][0].tolist()
            for d in numbers:
                cols = (row == d).nonzero().flatten()
                alone_ids = batch["input_ids"][r, cols][None]
                with torch.no_grad():
                    alone = model(input_ids=alone_ids).logits[0]
                packed = logits[r, cols]
                worst = max(worst, float((packed - alone).abs().max()))
                if causal and cols.numel() > 1:  # the model's shift: logits[t] -> labels[t + 1]
                    ce = torch.nn.functional.cross_entropy
                    mine = ce(packed[:-1], batch["labels"][r, cols][1:], reduction="none")
                    own = ce(alone[:-1], alone_ids[0, 1:], reduction="none")
                    worst_loss = max(worst_loss, float((mine - own).abs().max()))
                seen += 1
    assert seen == len(docs) and worst < 1e-5 and worst_loss < 1e-5


def _roberta_args(tmp_path, **kw):
    return transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, save_strategy="no", **kw
    )


def _short_dataset(n=40):
    return datasets.Dataset.from_dict({"input_ids": [[5 + i % 7] * (3 + i % 9) for i in range(n)]})


def test_the_trainer_names_the_position_start_a_model_needs(tmp_path):
    """s31: BucketTrainer refused every RoBERTa-like model on packed rows ("train it on bucketed
    rows instead"); now it takes one packed from padding_idx + 1 and names that start (and the
    attention it keeps apart, in the same message) when the rows count from elsewhere. A model
    numbering from 0 (GPT-2) is refused a start of 2. NOTE [ Models that mix packed
    documents ]."""
    ds, args = _short_dataset(), _roberta_args(tmp_path, max_steps=2)

    def trainer(model, **options):
        packed = hf.for_packing(ds, pad_token_id=1, row_length=32, batch_size=2, **options)
        return hf.BucketTrainer(model=model, args=args, bucketing=packed)

    roberta = _roberta(causal=True, positions=40)
    with pytest.raises(ValueError) as err:
        trainer(roberta, attention="mask")
    assert str(err.value).startswith(
        "BucketTrainer: RobertaForCausalLM numbers positions from 2 (roberta.embeddings."
        "position_embeddings: padding_idx=1: from padding_idx + 1, RoBERTa's convention), but "
        "the packed rows of bucketing number each document's from 0 (position_ids_start=0)"
    )
    assert str(err.value).endswith("; pack with hf.for_packing(..., position_ids_start=2)")
    with pytest.raises(ValueError) as err:  # the defaults: both fixes in one message
        trainer(roberta)
    assert "RobertaForCausalLM does not keep the packed documents of bucketing apart with " in (
        str(err.value)
    )
    assert str(err.value).endswith(
        "pack with hf.for_packing(..., position_ids_start=2, attention='mask'), which "
        "RobertaForCausalLM keeps apart"
    )
    with pytest.raises(ValueError, match=r"keeps apart$") as err:  # the start right: one fix
        trainer(roberta, position_ids_start=2)
    assert "position_ids_start" not in str(err.value)
    result = trainer(roberta, attention="mask", position_ids_start=2).train()
    assert np.isfinite(result.training_loss)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=40)
    )
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel numbers positions from 0 \(transf"):
        trainer(gpt2, position_ids_start=2)
    trainer(gpt2)  # (from 0: taken)
    # the start and a cache in one message (s31-tidyB: merged, untested), each fix followed
    cached = _roberta_args(tmp_path, max_steps=1, use_cache=True)
    packing = {"pad_token_id": 1, "row_length": 32, "batch_size": 2}
    with pytest.raises(ValueError) as err:
        packed = hf.for_packing(ds, position_ids_start=2, **packing)
        hf.BucketTrainer(model=gpt2, args=cached, bucketing=packed)
    assert str(err.value).endswith(
        "train without a cache (TrainingArguments(use_cache=False), the default) and pack with "
        "hf.for_packing(..., position_ids_start=0) or pack with hf.for_packing(..., "
        "position_ids_start=0, attention='mask'), which GPT2LMHeadModel keeps apart"
    )
    masked = hf.for_packing(ds, attention="mask", **packing)
    hf.BucketTrainer(model=gpt2, args=cached, bucketing=masked)
    trainer(gpt2)  # (the other fix: no cache, from 0)
    with pytest.raises(ValueError, match="position_ids_start must be an int >= 0, got pos"):
        hf.for_packing(ds, pad_token_id=1, row_length=32, batch_size=2, position_ids_start=-2)


@pytest.mark.parametrize("attention", ["positions", "mask"])
def test_a_masked_lm_head_is_refused_on_packed_rows(tmp_path, attention):
    """s31: BertForMaskedLM with hf.for_packing(attention="mask") was taken (the probe saw its
    second document unchanged under the causal document mask, and the refusal of "positions"
    even suggested "mask"): packed rows label each token with itself for a model that shifts,
    a masked-LM loss does not shift, so it trained to copy its input, causally."""
    bert = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=40,
        )
    )  # fmt: skip
    packed = hf.for_packing(
        _short_dataset(), pad_token_id=0, row_length=32, batch_size=2, attention=attention
    )
    with pytest.raises(ValueError, match=r"BertForMaskedLM is a masked-LM head.*mlm=True\)$"):
        hf.BucketTrainer(model=bert, args=_roberta_args(tmp_path, max_steps=1), bucketing=packed)


def test_padding_positions_past_the_table_are_refused_when_built(tmp_path):
    """s31: a packed row's padding numbers its positions like a document: GPT-2 with 32
    positions, rows of 64, documents of at most 20 tokens was taken, and training failed at its
    last step ("IndexError: index out of range in self", the batch with an all-padding row).
    It is refused when built, naming max_seqlen=32, which cuts the padding runs; with it every
    step trains."""
    ds = datasets.Dataset.from_dict({"input_ids": [[5 + i % 7] * (3 + i % 18) for i in range(41)]})
    args = _roberta_args(tmp_path, num_train_epochs=1)
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    )
    rows = hf.for_packing(ds, pad_token_id=0, row_length=64, batch_size=2)
    assert max(int(b["position_ids"].max()) for b in rows.dataloader()) == 63
    with pytest.raises(ValueError, match=r"position for each of up to 64 tokens, .*=32\), which"):
        hf.BucketTrainer(model=gpt2, args=args, bucketing=rows)
    cut = hf.for_packing(ds, pad_token_id=0, row_length=64, batch_size=2, max_seqlen=32)
    trainer = hf.BucketTrainer(model=gpt2, args=args, bucketing=cut)
    assert trainer.train().global_step == len(cut.sampler) == 4


def test_the_packing_probe_reads_a_model_that_prepends_tokens(tmp_path):
    """s31-rev: PEFT's prompt tuning and p-tuning put virtual tokens before the row (their
    logits come first) and ignore position_ids, so the documents mix; the probe read the logits
    at [:, 3:], found 5 rows where it wanted 3, and let the model through. Here a model of the
    user's own that prepends two tokens (as PEFT does) and mixes is refused (bucketing is the
    fix: its 4-D mask cannot take the virtual tokens either); one that keeps each token to
    itself passes."""

    class Prompted(torch.nn.Module):
        def __init__(self, mix):
            super().__init__()
            self.mix, self.embed = mix, torch.nn.Embedding(101, 8)
            self.out = torch.nn.Linear(8, 101)
            self.prompt = torch.nn.Parameter(torch.randn(2, 8))

        def forward(self, input_ids, labels=None, attention_mask=None, **_):
            if attention_mask is not None and attention_mask.dim() == 4:
                raise RuntimeError("a 4-D mask has no rows for the virtual tokens")
            h = self.embed(input_ids)
            h = torch.cat([self.prompt.expand(len(h), -1, -1), h], dim=1)
            logits = self.out(h.cumsum(1) if self.mix else h)
            loss = None
            if labels is not None:
                loss = torch.nn.functional.cross_entropy(
                    logits[:, 2:].flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX
                )
            return {"loss": loss, "logits": logits}

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True, save_strategy="no"
    )
    packed = hf.for_packing(_dataset(8), pad_token_id=0, row_length=512, batch_size=2)
    with pytest.raises(ValueError, match="Prompted does not keep the packed documents") as err:
        hf.BucketTrainer(model=Prompted(mix=True), args=args, bucketing=packed)
    assert "train it on bucketed rows instead" in str(err.value)
    hf.BucketTrainer(model=Prompted(mix=False), args=args, bucketing=packed)

    class Whole(torch.nn.Module):  # outputs that are no token's: not compared, not refused
        def __init__(self, layout):
            super().__init__()
            self.layout, self.embed = layout, torch.nn.Embedding(101, 8)
            self.out = torch.nn.Linear(8, 101)

        def forward(self, input_ids, labels=None, **_):
            h = self.embed(input_ids).cumsum(1)  # (each output reads the whole row)
            if self.layout == "classes":  # (B, num_labels): a sequence classifier's
                return {"logits": self.out(h[:, -1])}
            return {"logits": self.out(h).transpose(1, 2)}  # (B, V, L), for cross_entropy

    for layout in ("classes", "transposed"):
        hf.BucketTrainer(model=Whole(layout), args=args, bucketing=packed)


def test_under_deepspeed_or_fsdp_the_packing_probe_runs(tmp_path):
    """s32: the probe was skipped under DeepSpeed and FSDP (a RoBERTa packed from 2 with the
    default attention, or a model trained with a cache, mixed documents there, silently). The
    model is not wrapped yet when the trainer is built, so it runs there as anywhere (NOTE
    [ The probe on every rank ]); parameters no rank holds whole (ZeRO-3's partitions) are probed
    through a small copy of the architecture (s33-zero3: they skipped it)."""

    class Sharded(hf.BucketTrainer):  # (Trainer's own __init__ sets the flag: on after it)
        is_deepspeed_enabled = property(
            lambda self: self.__dict__.get("_on", False), lambda self, value: None
        )

        def _check_against_model(self, *args):
            self.__dict__["_on"] = True
            return super()._check_against_model(*args)

    ds = _short_dataset()
    args = _roberta_args(tmp_path, max_steps=1, use_cache=True)
    start = hf.for_packing(ds, pad_token_id=1, row_length=32, batch_size=2)
    with pytest.raises(ValueError, match="does not keep the packed documents") as err:
        Sharded(model=_roberta(causal=True, positions=40), args=args, bucketing=start)
    assert "position_ids_start=2, attention='mask'), which RobertaForCausalLM" in str(err.value)
    packed = hf.for_packing(ds, pad_token_id=0, row_length=32, batch_size=2)
    with pytest.raises(ValueError, match="and a cache"):
        Sharded(model=_model("sdpa"), args=args, bucketing=packed)
    partitioned = _model("sdpa")
    for i, p in enumerate(partitioned.parameters()):  # (as deepspeed.zero.Init leaves them)
        p.ds_id = i
    # (s33-zero3: no rank holds it whole, so a small copy of its architecture is probed: it was
    # taken here, and trained across documents)
    with pytest.raises(ValueError, match=r"and a cache: .* \(measured on a small copy of its "
                       r"architecture with random weights: its parameters are partitioned "
                       r"across the ranks \(DeepSpeed ZeRO-3\)\)"):  # fmt: skip
        Sharded(model=partitioned, args=args, bucketing=packed)
    roberta = _roberta(causal=True, positions=40)
    for p in roberta.parameters():
        p.ds_id = 0
    with pytest.raises(ValueError, match="does not keep the packed documents") as err:
        Sharded(model=roberta, args=args, bucketing=start)
    assert "(measured on a small copy" in str(err.value)
    assert "position_ids_start=2, attention='mask'), which RobertaForCausalLM" in str(err.value)


def _meta(make):
    with torch.device("meta"):
        return make()


class _InPlace(transformers.TrainingArguments):
    """Arguments under which Trainer leaves the model where it is (as under DeepSpeed or FSDP):
    a meta model is not moved (which fails) when the trainer is built."""

    @property
    def place_model_on_device(self):
        return False


def _in_place_args(tmp_path, **kw):
    return _InPlace(output_dir=str(tmp_path), report_to=[], use_cpu=True, save_strategy="no", **kw)


def test_a_model_no_rank_can_read_is_probed_through_a_small_copy(tmp_path):
    """s33-zero3: parameters on the meta device (and DeepSpeed ZeRO-3's partitions) skipped the
    packing probe, so a Llama trained with a cache, or BERT with attention="positions", trained
    across documents there, silently. A small copy of the architecture (same class and config,
    two heads, random weights: NOTE [ The probe of a model no rank can read ]) is probed
    instead: the same refusals, saying where the number comes from; models that keep the
    documents apart are taken; a model no copy can be made of is taken with a warning that the
    packing was not checked."""
    ds = _short_dataset()
    args = _in_place_args(tmp_path, max_steps=1, use_cache=True)
    packed = hf.for_packing(ds, pad_token_id=0, row_length=32, batch_size=2)
    llama = _meta(lambda: _model("sdpa"))
    assert all(p.device.type == "meta" for p in llama.parameters())
    with pytest.raises(ValueError, match=r"and a cache: a document's logits changed by [\d.e-]+ "
                       r"\(measured on a small copy of its architecture with random weights: "
                       r"its parameters are on the meta device\) when"):  # fmt: skip
        hf.BucketTrainer(model=llama, args=args, bucketing=packed)
    bert = _meta(
        lambda: transformers.BertLMHeadModel(
            transformers.BertConfig(
                vocab_size=64,
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                max_position_embeddings=64,
                is_decoder=True,
            ),
        )
    )
    with pytest.raises(ValueError, match=r"BertLMHeadModel does not keep .* attention='mask'\)"):
        hf.BucketTrainer(model=bert, args=_in_place_args(tmp_path), bucketing=packed)
    with warnings.catch_warnings():  # (kept apart: taken, with no warning)
        warnings.simplefilter("error")
        hf.BucketTrainer(model=llama, args=_in_place_args(tmp_path), bucketing=packed)
        masked = hf.for_packing(ds, pad_token_id=0, row_length=32, batch_size=2, attention="mask")
        hf.BucketTrainer(model=bert, args=_in_place_args(tmp_path), bucketing=masked)

    class Mine(torch.nn.Module):  # (no config to copy: not checked, and said)
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(64, 8)

        def forward(self, input_ids, **kwargs):
            return self.embed(input_ids)

    with pytest.warns(UserWarning, match=r"BucketTrainer: Mine: whether it keeps the packed "
                      r"documents of bucketing apart was not checked \(no forward pass could"
                      r" be made: its parameters are on the meta device and no small copy of it "
                      r"was made: Mine is not a transformers model"):  # fmt: skip
        hf.BucketTrainer(model=_meta(Mine), args=_in_place_args(tmp_path), bucketing=packed)


def test_a_copy_whose_pass_fails_is_said_not_checked_for_that(tmp_path, monkeypatch):
    """s33-tidyA: where the small copy of a model no rank can read was made but its pass
    failed, the warning said the packing was not checked, "(no forward pass could be made:
    measured on a small copy of its architecture with random weights: its parameters are on
    the meta device, whose pass failed)": a measurement that was not made, and the failure
    tied to the meta device. It names the reason the model was not probed and the copy's
    failed pass."""
    from bucketloader.hf import trainer as trainer_module

    made = trainer_module._stand_in

    def failing(model):  # (a copy whose forward pass raises, as one on a CPU may)
        stand, why = made(model)

        def forward(*args, **kwargs):
            raise RuntimeError("no kernel for this device")

        stand.forward = forward
        return stand, why

    monkeypatch.setattr(trainer_module, "_stand_in", failing)
    packed = hf.for_packing(_short_dataset(), pad_token_id=0, row_length=32, batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.BucketTrainer(
            model=_meta(lambda: _model("sdpa")), args=_in_place_args(tmp_path), bucketing=packed
        )
    said = [str(w.message) for w in caught if "was not checked" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert (
        "(no forward pass could be made: its parameters are on the meta device, and the pass "
        "of a small copy of it failed)" in said[0]
    ), said[0]
    assert "measured on" not in said[0]


def test_the_not_checked_warning_names_the_users_line(tmp_path, monkeypatch):
    """s34-probe: the warning that the packing was not checked took stacklevel=4 from two call
    depths, so it named trainer.py's own lines (_check_against_model's where no copy was made,
    __init__'s where the copy's pass failed), never the user's BucketTrainer(...) call. It names
    the first frame outside bucketloader, transformers and accelerate: here, this file's line."""
    import inspect

    from bucketloader.hf import trainer as trainer_module

    packed = hf.for_packing(_short_dataset(), pad_token_id=0, row_length=32, batch_size=2)

    class Mine(torch.nn.Module):  # (no copy is made of it: warned from _probed_model)
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(64, 8)

        def forward(self, input_ids, **kwargs):
            return self.embed(input_ids)

    def warned(make):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = inspect.currentframe().f_lineno + 1
            hf.BucketTrainer(model=make(), args=_in_place_args(tmp_path), bucketing=packed)
        said = [w for w in caught if "was not checked" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
        return (said[0].filename, said[0].lineno), (__file__, line)

    where, user = warned(lambda: _meta(Mine))
    assert where == user
    made = trainer_module._stand_in

    def failing(model):  # (a copy whose pass fails: warned from _check_packing)
        stand, why = made(model)
        stand.forward = lambda *args, **kwargs: 1 / 0
        return stand, why

    monkeypatch.setattr(trainer_module, "_stand_in", failing)
    where, user = warned(lambda: _meta(lambda: _model("sdpa")))
    assert where == user


_GQA = dict(
    vocab_size=1000, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=128, max_position_embeddings=128, pad_token_id=0,
)  # fmt: skip
_MHA = {k: v for k, v in _GQA.items() if k != "num_key_value_heads"}
_SLIDE = dict(sliding_window=2, layer_types=["sliding_attention", "full_attention"])
_ROBERTA = dict(_MHA, pad_token_id=1)
#: name: (model class, config class, config, the rows' options: masked-LM, window, start); one
#: of each kind the probe meets: causal GQA, a window on every layer, a window per layer type,
#: a start of 2, bidirectional, bidirectional with local layers, experts (s33-zero3 compared 22
#: architectures by hand, sdpa and eager: Gemma 3, Qwen2, GPT-2, OPT, decoder BERT ... agreed too,
#: s33-tidyA Mixtral; the suite keeps these seven for its time)
_ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(_GQA), {}),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(_GQA, sliding_window=2), {}),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(_GQA, head_dim=16, **_SLIDE),
               {"window": 2}),
    "roberta": ("RobertaForCausalLM", "RobertaConfig", dict(_ROBERTA, is_decoder=True),
                {"start": 2}),
    "bert-mlm": ("BertForMaskedLM", "BertConfig", dict(_MHA), {"mlm": True}),
    "modernbert-mlm": ("ModernBertForMaskedLM", "ModernBertConfig", dict(_MHA,
                       num_hidden_layers=3, local_attention=4, global_attn_every_n_layers=3),
                       {"mlm": True, "window": 2}),
    # (mixtures of experts, whose copy's experts share one feed-forward's units: s33-tidyA)
    "qwen3-moe": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig", dict(_GQA, num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32), {}),
    # (experts and key/value heads in sub-configs, ffn_config and attn_config: s34-probe.
    # clip_qkv and rope_theta as DBRX's config.json sets them: transformers 5.24's DbrxAttention
    # fails without them)
    "dbrx": ("DbrxForCausalLM", "DbrxConfig", dict(d_model=64, n_heads=4, vocab_size=1000,
             max_seq_len=128, pad_token_id=0, attn_config=dict(kv_n_heads=2, clip_qkv=8,
             rope_theta=10000), ffn_config=dict(ffn_hidden_size=64, moe_num_experts=4,
             moe_top_k=2)), {}),
}  # fmt: skip


def test_the_small_copy_of_a_mixture_of_experts_stays_small():
    """s33-tidyA: the stand-in kept every expert with a feed-forward of twice its hidden size,
    so a Qwen3-235B-A22B-shaped copy (128 experts in each of 94 layers) held 4.75e9 parameters,
    17.7 GiB in float32, built on every rank's CPU when the trainer is built. Its experts now
    share one feed-forward's units (at least 8 each), as a dense copy's would be; counted here
    on the meta device, 4 of its layers, beside the same copy without experts."""
    from bucketloader.hf.trainer import _shrink

    shape = dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=4,
        num_attention_heads=64, num_key_value_heads=4, head_dim=128,
    )  # fmt: skip
    moe = transformers.Qwen3MoeConfig(
        **shape, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536
    )
    sizes = []
    for config, model_class in ((moe, "Qwen3MoeForCausalLM"), (shape, "Qwen3ForCausalLM")):
        if isinstance(config, dict):
            config = transformers.Qwen3Config(**config)
        _shrink(config)
        with torch.device("meta"):
            model = getattr(transformers, model_class)(config)
        sizes.append(sum(p.numel() for p in model.parameters()))
    assert moe.num_experts == 128 and moe.moe_intermediate_size == 8
    assert sizes[0] < 2 * sizes[1], sizes  # (4.3e6 against 2.6e6; before: 202.5e6)


def test_the_small_copy_narrows_the_sizes_a_sub_config_holds():
    """s34-probe: DBRX keeps its experts' sizes in a sub-config (ffn_config: ffn_hidden_size,
    moe_num_experts, and a hidden_size that mirrors d_model) and its key/value heads in another
    (attn_config.kv_n_heads). The stand-in narrowed d_model only, so a DBRX-132B-shaped copy held
    126.9e9 parameters (473 GiB in float32), allocated on every rank's CPU when the trainer was
    built, and its sub-configs disagreed with its d_model. Counted here on the meta device, 4 of
    its 40 layers."""
    import copy

    from bucketloader.hf.trainer import _shrink

    config = transformers.DbrxConfig(
        d_model=6144, n_heads=48, n_layers=4, max_seq_len=32768, vocab_size=100352,
        attn_config={"kv_n_heads": 8, "clip_qkv": 8, "rope_theta": 500000},
        ffn_config={"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
    )  # fmt: skip
    small = copy.deepcopy(config)
    _shrink(small)
    assert (small.d_model, small.n_heads, small.num_key_value_heads) == (256, 2, 1)
    assert small.ffn_config.hidden_size == small.d_model  # (the experts read d_model's states)
    assert small.attn_config.kv_n_heads == small.num_key_value_heads
    assert small.ffn_config.moe_num_experts == 16  # (every expert kept, narrower)
    assert small.ffn_config.ffn_hidden_size == 2 * 256 // 16
    with torch.device("meta"):
        count = sum(p.numel() for p in transformers.DbrxForCausalLM(small).parameters())
    assert count < 5e6, count  # (2.6e6; before: 12.7e9)
    assert config.ffn_config.ffn_hidden_size == 10752  # (the model's own config untouched)


def test_a_copy_too_large_to_build_is_not_made_and_said(tmp_path, monkeypatch):
    """s34-probe: a config whose sizes the stand-in does not know how to narrow (a field of its
    own name, in the config or a sub-config) kept them whole, and the copy was allocated and
    filled on every rank's CPU whatever its size (one default config transformers 5.24 ships,
    inkling_mm_model, gives a copy of 7.6e11 parameters). The copy is now counted on the meta
    device first, and one over the limit is not built: the packing is said not checked,
    naming its size. (The limit is lowered here so that a tiny Llama's copy is over it.)"""
    from bucketloader.hf import trainer as trainer_module

    model = _meta(lambda: _model("sdpa"))
    monkeypatch.setattr(trainer_module, "_STAND_IN_LIMIT", 1_000, raising=False)
    devices = []
    init = transformers.LlamaForCausalLM.__init__

    def recorded(self, *args, **kwargs):  # (where each copy is built)
        devices.append(torch.empty(0).device.type)
        init(self, *args, **kwargs)

    monkeypatch.setattr(transformers.LlamaForCausalLM, "__init__", recorded)
    packed = hf.for_packing(_short_dataset(), pad_token_id=0, row_length=32, batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.BucketTrainer(model=model, args=_in_place_args(tmp_path), bucketing=packed)
    said = [str(w.message) for w in caught if "was not checked" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert (
        "its parameters are on the meta device and no small copy of it was made: a small copy "
        "of its config would still hold 7,920 parameters (0.0 GiB in float32 on every rank's "
        "CPU), more than the 1,000 a copy may hold" in said[0]
    ), said[0]
    assert devices == ["meta"]  # (counted, never allocated)
    monkeypatch.setattr(trainer_module, "_STAND_IN_LIMIT", 7_920)  # (at the limit: made)
    devices.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hf.BucketTrainer(model=model, args=_in_place_args(tmp_path), bucketing=packed)
    assert devices == ["meta", "cpu"]


@pytest.mark.parametrize("arch", sorted(_ARCHITECTURES))
def test_the_small_copy_gives_the_full_models_verdict(arch):
    """s33-zero3: the stand-in a model no rank can read is probed through (NOTE [ The probe of
    a model no rank can read ]) must find what the probe of the model itself finds: mixing or
    not, for every packing (positions, bool and additive masks, a mask per layer kind) and
    cache setting the trainer probes, on each architecture the tests probe (full models of 4
    heads, GQA or not, sliding-window layers or not)."""
    from bucketloader.hf.packing import PackedInputs
    from bucketloader.hf.trainer import _packing_leak, _stand_in
    from bucketloader.pack import MLMMasking, PackSampler

    model_class, config_class, config, rows = _ARCHITECTURES[arch]
    config = getattr(transformers, config_class)(
        **{"num_hidden_layers": 2, **config}, attn_implementation="eager"
    )  # (sdpa and 11 more architectures were compared by hand: s33-zero3)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    stand, why = _stand_in(model)
    assert stand is not None, why
    assert type(stand) is type(model)
    assert stand.config.num_attention_heads == 2 < model.config.num_attention_heads
    sampler = PackSampler([3, 3, 3, 3], row_length=6, batch_size=2)
    masking = MLMMasking(mask_token_id=4, vocab_size=100, special_ids=(0, 1, 2, 3, 4))
    mlm = masking if rows.get("mlm") else None
    variants = [dict(attention="mask"), dict(attention="mask", mask_dtype=torch.float32)]
    if mlm is None:
        variants.append(dict(attention="positions"))
    if rows.get("window"):
        variants += [dict(v, sliding_window=rows["window"]) for v in variants[:2]]
    verdicts = {}
    for options in variants:
        collate = PackedInputs(sampler.collator(pad_token_id=0, mlm=mlm), **options)
        # (a cache mixes only where documents are found in position_ids)
        for cache in [None, True, False] if options["attention"] == "positions" else [None]:
            full, small = (
                _packing_leak(m, collate.attention, collate, rows.get("start", 0), use_cache=cache)
                for m in (model, stand)
            )
            verdicts[repr(options), cache] = (full and full > 0, small and small > 0)
            assert full is not None and small is not None
    disagree = {k: v for k, v in verdicts.items() if v[0] != v[1]}
    assert not disagree, disagree
    # (eager attention adds a bool mask to its scores, so its True hides nothing: each case
    # has a packing that mixes and one that does not)
    assert any(v[0] for v in verdicts.values()) and not all(v[0] for v in verdicts.values())


def test_sliding_window_layers_take_a_mask_per_layer_kind(tmp_path):
    """s32: Gemma 2's sliding layers use a 4-D mask as given, so with attention="mask" they saw
    whole documents in a packed row (logits 0.13 off each document alone), and BucketTrainer
    took it. It is refused now, naming sliding_window=4; with it the collator ships one mask
    per layer kind, and each document's logits equal it alone. NOTE [ Sliding-window layers in
    packed rows ] in bucketloader.hf.packing."""
    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, max_position_embeddings=64,
        sliding_window=4, pad_token_id=0, attn_implementation="eager",
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    model = transformers.Gemma2ForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(5, 64, n).tolist() for n in
                                                   rng.integers(1, 16, 12)]})  # fmt: skip
    options = dict(pad_token_id=0, row_length=32, batch_size=2, attention="mask")
    options.update(mask_dtype=torch.float32)
    plain = hf.for_packing(ds, **options)
    with pytest.raises(ValueError, match=r"attend 4 tokens back, .*sliding_window=4\) \(a mask"):
        hf.BucketTrainer(model=model, args=_roberta_args(tmp_path), bucketing=plain)
    packed = hf.for_packing(ds, sliding_window=4, **options)
    hf.BucketTrainer(model=model, args=_roberta_args(tmp_path), bucketing=packed)  # taken
    worst = {"plain": 0.0, "per kind": 0.0}
    for idx in packed.sampler:
        samples = [packed.dataset[i] for i in idx]
        batch = packed.collator(samples)
        document_ids = packed.collator.collator(samples)["document_ids"]
        masks = batch["attention_mask"]
        for name, mask in (("plain", masks["full_attention"]), ("per kind", masks)):
            with torch.no_grad():
                logits = model(input_ids=batch["input_ids"], attention_mask=mask).logits
            for r, row in enumerate(document_ids):
                for d in [d for d in row.unique().tolist() if d >= 0]:
                    cols = row == d
                    with torch.no_grad():
                        alone = model(input_ids=batch["input_ids"][r, cols][None]).logits[0]
                    worst[name] = max(worst[name], float((logits[r, cols] - alone).abs().max()))
    assert worst["per kind"] < 1e-6 and worst["plain"] > 1e-2, worst


def test_the_masks_per_layer_kind_build_the_document_mask_once(monkeypatch):
    """s33-zero3: PackedInputs(sliding_window=).document_masks built the document mask twice
    (once per layer kind, ~40 ms of a 8 x 2048 batch: benchmarks/mlm_masking.py); it builds it
    once and derives the sliding layers' mask, the same masks as two document_mask calls on
    random rows, causal or masked-LM, bool or additive."""
    from bucketloader.hf import packing
    from bucketloader.pack import document_mask

    rng = np.random.default_rng(1)
    ds = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7]] * 4})
    built = []

    def counted(*args, **kwargs):
        built.append(kwargs.get("window"))
        return document_mask(*args, **kwargs)

    monkeypatch.setattr(packing, "document_mask", counted)
    for dtype in (torch.bool, torch.float32):
        packed = hf.for_packing(
            ds, pad_token_id=0, row_length=8, batch_size=2, attention="mask",
            sliding_window=3, mask_dtype=dtype,
        )  # fmt: skip
        collate = packed.collator
        for causal in (True, False):
            collate.collator.mlm = None if causal else object()  # (causal reads it)
            assert collate.causal is causal
            for _ in range(10):
                ids = torch.as_tensor(np.sort(rng.integers(-1, 4, (2, int(rng.integers(2, 30))))))
                built.clear()
                masks = collate.document_masks(ids)
                assert built == [None]  # (one document mask, no windowed rebuild)
                want = document_mask(ids, causal=causal, dtype=dtype)
                local = document_mask(ids, causal=causal, dtype=dtype, window=3)
                assert torch.equal(masks["full_attention"], want)
                assert torch.equal(masks["sliding_attention"], local)


def test_a_model_whose_every_layer_slides_is_refused_a_plain_document_mask(tmp_path):
    """s32-tidyA: Mistral (an int config.sliding_window, no layer_types: every layer slides)
    used the 4-D document mask of attention="mask" as given, so its layers saw whole documents
    (a tiny MistralForCausalLM's logits 0.19 off each document alone), and BucketTrainer took
    it; sliding_window= was refused saying the model has no sliding-window layers. Both are
    refused now naming attention='positions', which keeps each document as it is alone (< 1e-6);
    rows no longer than the window are taken."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        sliding_window=4, pad_token_id=0, attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.MistralForCausalLM(config).eval()
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(5, 64, n).tolist() for n in
                                                   rng.integers(1, 16, 8)]})  # fmt: skip
    args = _roberta_args(tmp_path)
    options = dict(pad_token_id=0, batch_size=2)
    plain = hf.for_packing(ds, attention="mask", row_length=32, **options)
    with pytest.raises(ValueError, match=r"sliding_window=4 on every layer .* rows of 32 tokens"):
        hf.BucketTrainer(model=model, args=args, bucketing=plain)
    per_kind = hf.for_packing(ds, attention="mask", sliding_window=4, row_length=32, **options)
    with pytest.raises(ValueError, match=r"takes no dict of masks, .*attention='positions'\)"):
        hf.BucketTrainer(model=model, args=args, bucketing=per_kind)
    # (rows within the window: the plain mask is what the model sees alone, taken)
    small = datasets.Dataset.from_dict({"input_ids": [[5, 6], [7], [8, 9, 10]]})
    narrow = hf.for_packing(small, attention="mask", row_length=4, **options)
    hf.BucketTrainer(model=model, args=args, bucketing=narrow)
    positions = hf.for_packing(ds, attention="positions", row_length=32, **options)
    hf.BucketTrainer(model=model, args=args, bucketing=positions)  # taken
    worst = 0.0
    for idx in positions.sampler:
        samples = [positions.dataset[i] for i in idx]
        batch = positions.collator(samples)
        document_ids = positions.collator.collator(samples)["document_ids"]
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        for r, row in enumerate(document_ids):
            for d in [d for d in row.unique().tolist() if d >= 0]:
                cols = row == d
                with torch.no_grad():
                    alone = model(input_ids=batch["input_ids"][r, cols][None]).logits[0]
                worst = max(worst, float((logits[r, cols] - alone).abs().max()))
    assert worst < 1e-6, worst
