"""Real (tiny) transformers models through BucketTrainer: train, evaluate and predict at planned
shapes, in dataset order, under torch.compile(dynamic=False) with one graph per planned shape used,
and filler rows that change no head's loss.

Models are built from configs (no downloads), hidden size 16, one layer; their data carries the
real length distributions of tests/data (GSM8K, Europarl, LibriSpeech), subsampled and scaled.
"""

from __future__ import annotations

import os
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import dataclasses
import json
import re
import shutil
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from conftest import load_real

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

from bucketloader import hf  # noqa: E402
from bucketloader.hf import trainer as trainer_module  # noqa: E402
from bucketloader.plan import TokenBudget  # noqa: E402

BOOKKEEPING = ("sample_mask", "index")


def test_bucket_trainer_trains_with_planned_shapes_only(tmp_path):
    # Text with gsm8k question lengths (whitespace words), tokenised by a real fast tokenizer
    # built offline (word-level vocab of 100, [PAD] = 0): text -> input_ids -> buckets.
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

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
    model = transformers.BertForSequenceClassification(_bert_config())
    seen: list[tuple[int, ...]] = []

    def record(_module, _args, kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        assert kwargs["attention_mask"].shape == kwargs["input_ids"].shape
        assert "lengths" not in kwargs and "sample_mask" not in kwargs

    model.register_forward_pre_hook(record, with_kwargs=True)
    args = _args(tmp_path, max_steps=4, learning_rate=1e-3, seed=3)
    trainer = hf.BucketTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        processing_class=tokenizer,  # the pad id comes from here
        bucketing={"num_buckets": 3, "max_tokens": 640, "last_batch": "pad"},
    )
    # s27: the plan can be read before training (it was None until get_train_dataloader)
    planned = trainer.bucketing
    assert planned is not None and len(planned.sampler.shapes) >= 3
    loader = trainer.get_train_dataloader()
    assert type(loader).__name__ == "EpochDataLoader"  # not re-wrapped by accelerate
    sampler = trainer.bucketing.sampler
    assert sampler is planned.sampler and len(loader) == len(sampler)
    out = trainer.train()
    assert len(seen) == 4
    assert set(seen) <= set(sampler.shapes), (seen, sampler.shapes)
    assert np.isfinite(out.training_loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(b[1] <= 183 for b in sampler.shapes)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_run_resumed_from_a_checkpoint_trains_on_the_batches_it_would_have(tmp_path, accumulate):
    """``train(resume_from_checkpoint=...)``: Trainer sets the sampler's epoch and skips the
    batches already trained (accelerate's ``skip_first_batches``); the resumed run trains on
    exactly the batches, in the order and shapes, that the uninterrupted run did after the
    checkpoint (saved mid-epoch, in epoch 0 and in epoch 1; per micro-batch with accumulation)."""
    lens = load_real("gsm8k")[:90, 0] // 2 + 3  # (ids 5-94: the vocabulary has 100)
    data = datasets.Dataset.from_dict(
        {  # each sample's first token is its id, so a batch's samples can be read back
            "input_ids": [[5 + i] + [7] * (int(n) - 1) for i, n in enumerate(lens)],
            "label": [i % 2 for i in range(len(lens))],
        }
    )

    class Recording(hf.BucketTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            ids = tuple(inputs["input_ids"][:, 0].tolist())
            self.seen.append((self.state.global_step, tuple(inputs["input_ids"].shape), ids))
            return super().training_step(model, inputs, num_items_in_batch)

    def run(resume=None):
        torch.manual_seed(0)
        args = _args(tmp_path, num_train_epochs=2, save_strategy="steps", save_steps=5,
                     logging_steps=100, seed=3, gradient_accumulation_steps=accumulate)  # fmt: skip
        trainer = Recording(
            model=transformers.BertForSequenceClassification(_bert_config()),
            args=args,
            train_dataset=data,
            bucketing={"num_buckets": 3, "max_tokens": 256, "pad_token_id": 0},
        )
        trainer.seen = []
        trainer.train(resume_from_checkpoint=resume)
        return trainer.seen

    whole = run()
    per_epoch = len(whole) // 2 // accumulate  # optimizer steps per epoch
    for step in sorted({5, 5 * (per_epoch // 5 + 1)}):  # in epoch 0, and in epoch 1
        assert step < len(whole) // accumulate
        rest = run(resume=str(tmp_path / f"checkpoint-{step}"))
        assert [b[1:] for b in rest] == [b[1:] for b in whole if b[0] >= step], step


# -- a resume onto another plan (NOTE [ A resume checks the checkpoint's plan ]) -----------------
_RESUME_OPTIONS = {"num_buckets": 3, "max_tokens": 256, "pad_token_id": 0}


def _resume_data(n=90):
    lens = load_real("gsm8k")[:90, 0] // 2 + 3
    return datasets.Dataset.from_dict(  # each sample's first token is its id (5 + index)
        {
            "input_ids": [[5 + i] + [7] * (int(lens[i % 90]) - 1) for i in range(n)],
            "label": [i % 2 for i in range(n)],
        }
    )


class _Recording(hf.BucketTrainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        self.seen.append(
            (self.state.global_step, tuple(inputs["input_ids"].shape),
             tuple(inputs["input_ids"][:, 0].tolist()))
        )  # fmt: skip
        return super().training_step(model, inputs, num_items_in_batch)


def _resume_run(out, resume=None, data=None, bucketing=None, **kw):
    torch.manual_seed(0)
    base = {"num_train_epochs": 1, "save_strategy": "steps", "save_steps": 4,
            "logging_steps": 100, "seed": 3}  # fmt: skip
    trainer = _Recording(
        model=transformers.BertForSequenceClassification(_bert_config()),
        args=_args(out, **{**base, **kw}),
        train_dataset=_resume_data() if data is None else data,
        bucketing=dict(_RESUME_OPTIONS) if bucketing is None else bucketing,
    )
    trainer.seen = []
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        trainer.ran = trainer.seen  # (what it trained before any error)
    return trainer


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """An uninterrupted epoch, checkpointed every 4 steps: (its folder, the batches trained)."""
    out = tmp_path_factory.mktemp("saved_run")
    return out, _resume_run(out).seen


def test_each_checkpoint_holds_the_training_samplers_state_at_that_step(saved_run):
    """``bucketloader_sampler.json`` is the sampler's state at the step: loaded into the sampler,
    it yields exactly the batches the run trained after the checkpoint."""
    out, whole = saved_run
    record = json.loads((out / "checkpoint-4" / trainer_module.SAMPLER_STATE_NAME).read_text())
    assert record["global_step"] == 4 and record["gradient_accumulation_steps"] == 1
    state = record["sampler_state"]
    assert (state["epoch"], state["batches_yielded"]) == (0, 4)
    assert state["config"]["num_samples"] == 90
    trainer = hf.BucketTrainer(
        model=transformers.BertForSequenceClassification(_bert_config()),
        args=_args(out, seed=3),
        train_dataset=_resume_data(),
        bucketing=dict(_RESUME_OPTIONS),
    )
    sampler = trainer.bucketing.sampler
    sampler.load_state_dict(state)
    rest = [sorted(set(b)) for b in sampler]
    assert rest == [sorted({i - 5 for i in ids}) for step, _, ids in whole if step >= 4]


@pytest.mark.parametrize(
    "change, match",
    [
        ({"data": 91}, r"train_dataset has 91 samples, the checkpoint's plan 90"),
        ({"seed": 4}, r"seed=4, the checkpoint's seed=3 \(bucketing's 'seed', else"),
        ({"bucketing": {"num_buckets": 5}}, r"(num_batches|plan_digest)=.*the checkpoint's"),
        ({"bucketing": "2 ranks"}, r"over 2 rank\(s\) \(num_replicas=2.*the checkpoint's over 1"),
        (
            {"gradient_accumulation_steps": 2},
            r"trained 4 batches of epoch 0, but Trainer would "
            r"skip to batch 8 of epoch 0 \(gradient_accumulation_steps=2, the checkpoint's 1",
        ),
    ],
    ids=["dataset", "seed", "options", "ranks", "accumulation"],
)
def test_a_resume_onto_another_plan_is_refused_naming_what_changed(saved_run, change, match):
    """s29-user: 90 -> 91 samples resumed silently (Trainer skipped the first 4 batches of the new
    plan: 4 samples twice, 1 never). Each change is refused before a step, naming it and the
    ways on; with ignore_data_skip=True (skip nothing) the run goes on."""
    out, _ = saved_run
    kw = dict(change)
    data = _resume_data(kw.pop("data", 90))
    options: Any = kw.pop("bucketing", {})
    if options == "2 ranks":  # (one process: a prebuilt plan for 2 ranks)
        options = hf.for_text(data, "input_ids", seed=3, num_replicas=2, rank=0, **_RESUME_OPTIONS)
    else:
        options = {**_RESUME_OPTIONS, **options}
    kw.update(data=data, bucketing=options)
    resume = str(out / "checkpoint-4")
    with pytest.raises(ValueError, match=match) as info:
        _resume_run(out / "again", resume=resume, **kw)
    text = str(info.value)
    assert "ignore_data_skip=True" in text and "checkpoint-4" in text, text
    if "data" in change:  # the user asks to skip nothing: honoured, not refused
        assert "its last 4 batches untrained" in text  # (Trainer keeps max_steps)
        trainer = _resume_run(out / "again", resume=resume, ignore_data_skip=True, **kw)
        plan = list(trainer.bucketing.sampler)  # (epoch 0, from its first batch)
        assert [sorted({i - 5 for i in b[2]}) for b in trainer.seen] == [
            sorted(set(b)) for b in plan[: len(plan) - 4]
        ]


@pytest.mark.parametrize("damage", ["missing", "garbled", "linked"])
def test_a_checkpoint_without_the_sampler_state_resumes_with_a_warning_or_is_refused(
    saved_run, tmp_path, damage
):
    """A checkpoint an older bucketloader wrote (no file) resumes as before, exactly here, with
    one warning that it cannot be checked; a file that is not one BucketTrainer wrote is
    refused, naming it. One whose files are links (a Hub download: huggingface_hub's snapshot
    folder links every file to a blob) is checked as any other (s30-rev: refused, "a symbolic
    link")."""
    out, whole = saved_run
    checkpoint = tmp_path / "checkpoint-4"
    shutil.copytree(out / "checkpoint-4", checkpoint)
    path = checkpoint / trainer_module.SAMPLER_STATE_NAME
    if damage == "linked":
        blobs = tmp_path / "blobs"
        blobs.mkdir()
        for f in list(checkpoint.iterdir()):
            f.rename(blobs / f.name)
            f.symlink_to(os.path.relpath(blobs / f.name, checkpoint))
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*cannot be checked")
            rest = _resume_run(tmp_path / "again", resume=str(checkpoint)).seen
        assert [b[1:] for b in rest] == [b[1:] for b in whole if b[0] >= 4]
        with pytest.raises(ValueError, match=r"train_dataset has 91 samples"):  # (still checked)
            _resume_run(tmp_path / "again", resume=str(checkpoint), data=_resume_data(91))
    elif damage == "missing":
        path.unlink(missing_ok=True)  # (main wrote none: the warning is what fails there)
        with pytest.warns(UserWarning, match="has no bucketloader_sampler.json") as caught:
            rest = _resume_run(tmp_path / "again", resume=str(checkpoint)).seen
        assert sum("cannot be checked" in str(w.message) for w in caught) == 1
        assert [b[1:] for b in rest] == [b[1:] for b in whole if b[0] >= 4]
    else:
        path.write_text('{"sampler_state": 3}')
        with pytest.raises(ValueError, match=r"bucketloader_sampler.json is not one .* delete"):
            _resume_run(tmp_path / "again", resume=str(checkpoint))


def test_a_resume_with_a_sampler_of_your_own_says_it_cannot_be_checked(saved_run, tmp_path):
    """s29: a prebuilt Bucketing whose sampler is the user's own class (not a bucketloader
    sampler) resumed unchecked, without a word; it now warns once that the checkpoint's plan
    cannot be checked, and resumes as Trainer does (here exactly: it plans the same batches)."""
    out, whole = saved_run

    class Mine(torch.utils.data.Sampler):  # (a wrapper of the user's: the same batches)
        def __init__(self, inner):
            self.inner = inner

        def __iter__(self):
            return iter(self.inner)

        def __len__(self):
            return len(self.inner)

        def __getattr__(self, name):  # (shapes, shape_table, set_epoch, ...)
            return getattr(self.inner, name)

    data = _resume_data()
    built = hf.for_text(data, "input_ids", seed=3, **_RESUME_OPTIONS)
    own = hf.Bucketing(Mine(built.sampler), built.collator, built.dataset)
    with pytest.warns(UserWarning, match=r"sampler is a Mine, not a bucketloader sam") as caught:
        rest = _resume_run(tmp_path, str(out / "checkpoint-4"), built.dataset, own).seen
    assert sum("cannot be checked" in str(w.message) for w in caught) == 1
    assert [b[1:] for b in rest] == [b[1:] for b in whole if b[0] >= 4]


def test_a_checkpoint_between_epochs_resumes_over_shards_cut_otherwise(tmp_path):
    """s32-shard / s32-user: a ShardedSampler state saved between epochs loads over the same
    data cut into other shards on as many ranks (sampler.load_state_dict), but BucketTrainer's
    checkpoint check compared its config alone and refused it (plan_digest). It now makes the
    sampler's own check: the resumed run trains epoch 1 of the new cut's plan, exactly; within
    an epoch it is still refused, as by the sampler."""
    from bucketloader import LengthHistogram
    from bucketloader.sharded import ShardedSampler

    data = _resume_data()
    lengths = np.asarray([len(x) for x in data["input_ids"]])
    perm = np.random.default_rng(3).permutation(90)  # (a cut with as many steps as the first)
    fewer = np.random.default_rng(0).permutation(90)  # (a cut with 7 steps an epoch)
    cuts = {
        "a": [np.arange(0, 90, 2), np.arange(1, 90, 2)],
        "b": [perm[:45], perm[45:]],
        "c": [fewer[:45], fewer[45:]],
    }

    def bucketing(cut):  # rank 0 of 2, in one process (the ranks' histograms given)
        shards = cuts[cut]
        hists = [LengthHistogram.from_lengths(lengths[s]) for s in shards]
        opts = {"num_buckets": 3, "max_tokens": 256, "seed": 3}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            sampler = ShardedSampler(
                lengths[shards[0]], shard_histograms=hists, num_replicas=2, rank=0, **opts
            )
        collator = hf.ModelInputs(sampler.collator(pad_value={"input_ids": 0}))
        return hf.Bucketing(sampler, collator, sampler.wrap(data.select(shards[0])))

    a, b = bucketing("a"), bucketing("b")
    assert len(a.sampler) == len(b.sampler) == 8  # (8 steps an epoch: Trainer's arithmetic)
    assert a.sampler._config()["plan_digest"] != b.sampler._config()["plan_digest"]
    out = tmp_path / "a"
    _resume_run(out, data=a.dataset, bucketing=a)  # (checkpoints at steps 4 and 8: its end)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (a sampler of 2 ranks in 1 process)
        rest = _resume_run(
            tmp_path / "b", str(out / "checkpoint-8"), b.dataset, b, num_train_epochs=2
        ).seen
    b.sampler.set_epoch(1)
    plan = [sorted(5 + int(cuts["b"][0][i]) for i in batch) for batch in b.sampler]
    assert [sorted(i for i in ids if i >= 5) for _, _, ids in rest] == plan  # (real rows)
    again = bucketing("b")
    with pytest.raises(ValueError, match=r"plan_digest="):  # (within the epoch: refused)
        _resume_run(tmp_path / "c", str(out / "checkpoint-4"), again.dataset, again)
    # s33-tidyA: a cut that plans fewer steps an epoch passes the sampler's check too, but
    # Trainer counts the epoch from the steps (8 steps: epoch 1, step 1 of 7), so it is refused
    # for its position, as docs/trainer.md now says (it said such a checkpoint resumes)
    c = bucketing("c")
    assert len(c.sampler) == 7
    c.sampler.load_state_dict(
        json.loads((out / "checkpoint-8" / trainer_module.SAMPLER_STATE_NAME).read_text())[
            "sampler_state"
        ]
    )  # (the sampler takes it)
    steps = r"7 optimizer steps per epoch, the checkpoint's 8: it counts"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match=r"trained 0 batches of epoch 1, .*" + steps):
            _resume_run(tmp_path / "d", str(out / "checkpoint-8"), c.dataset, c, num_train_epochs=2)


def test_a_checkpoint_between_epochs_on_other_ranks_is_refused_for_its_steps(saved_run, tmp_path):
    """The sampler loads a state saved between epochs on another number of ranks (NOTE [ An
    epoch boundary on another number of ranks ]), and so does the trainer's check now; Trainer
    counts the epoch from the optimizer steps, which the ranks change, so the resume is still
    refused, for the position, naming the steps per epoch on both rank counts."""
    out, whole = saved_run
    last = len(whole)  # (the checkpoint at the end of epoch 0)
    record = json.loads(
        (out / f"checkpoint-{last}" / trainer_module.SAMPLER_STATE_NAME).read_text()
    )
    assert (record["sampler_state"]["epoch"], record["sampler_state"]["batches_yielded"]) == (1, 0)
    data = _resume_data()
    two = hf.for_text(data, "input_ids", seed=3, num_replicas=2, rank=0, **_RESUME_OPTIONS)
    two.sampler.load_state_dict(record["sampler_state"])  # (the sampler takes it)
    steps = rf"{len(two.sampler)} optimizer steps per epoch over 2 rank\(s\), the checkpoint's "
    with pytest.raises(ValueError, match=steps + rf"{last} over 1: it counts"):
        _resume_run(tmp_path, str(out / f"checkpoint-{last}"), data, two, num_train_epochs=2)


def test_the_loaders_use_the_loader_options_asked_for(tmp_path):
    """s30-rev: TrainingArguments(dataloader_multiprocessing_context="spawn") was not passed to
    the loaders BucketTrainer builds, whose workers were then forked (where forking fails, as
    after CUDA is set up, the user's fix did nothing); dataloader_in_order=False, which they
    cannot honour, was ignored without a word."""
    trainer = hf.BucketTrainer(
        model=transformers.BertForSequenceClassification(_bert_config()),
        args=_args(tmp_path, dataloader_num_workers=1, dataloader_multiprocessing_context="spawn"),
        train_dataset=_resume_data(),
        bucketing=dict(_RESUME_OPTIONS),
    )
    for loader in (trainer.get_train_dataloader(), trainer.get_eval_dataloader(_resume_data(9))):
        assert loader.multiprocessing_context.get_start_method() == "spawn"
    # and dataloader_in_order=False, which its loaders cannot honour, is said to be unused
    # (s30-rev: ignored without a word)
    if "dataloader_in_order" in {
        f.name for f in dataclasses.fields(transformers.TrainingArguments)
    }:
        # (s31-rev: "not used" was untrue of the Trainer's own loader, which an eval dataset
        # that is not a datasets.Dataset goes through)
        said = r"dataloader_in_order=False\) is not used by its bucketed loaders.*own loader"
        with pytest.warns(UserWarning, match=said):
            hf.BucketTrainer(
                model=transformers.BertForSequenceClassification(_bert_config()),
                args=_args(tmp_path, dataloader_in_order=False),
                train_dataset=_resume_data(),
            )


# -- tiny models and their data ------------------------------------------------------------------
def _args(tmp_path, cls=None, **kw):
    base = {
        "output_dir": str(tmp_path),
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "logging_steps": 1,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "dataloader_pin_memory": False,
    }
    return (cls or transformers.TrainingArguments)(**{**base, **kw})


def _bert_config(**kw):
    return transformers.BertConfig(
        vocab_size=100,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=256,
        pad_token_id=0,
        **kw,
    )


def _image_calls(model) -> list[tuple[tuple[int, int], Any]]:
    """Each forward call's image size and interpolate_pos_encoding, as the model is called."""
    seen: list[tuple[tuple[int, int], Any]] = []
    model.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(
            (tuple(kw["pixel_values"].shape[-2:]), kw.get("interpolate_pos_encoding"))
        ),
        with_kwargs=True,
    )
    return seen


def _tiny_vit(*, image_size, num_labels, hidden_size=16, intermediate_size=32):
    """A one-layer ViT classifier built from a config (nothing downloaded)."""
    return transformers.ViTForImageClassification(
        transformers.ViTConfig(
            image_size=image_size,
            patch_size=16,
            hidden_size=hidden_size,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=intermediate_size,
            num_labels=num_labels,
        )
    )


def _w2v_config():
    return transformers.Wav2Vec2Config(
        vocab_size=12,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_feat_extract_layers=2,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        pad_token_id=0,  # the CTC blank
        ctc_loss_reduction="mean",
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        mask_time_prob=0.0,
        layerdrop=0.0,  # a random skip is a data-dependent branch: a graph break
    )


#: The tiny encoder-decoder sizes of the config-built models here (seq2seq, DETR-family).
TINY_ENCODER_DECODER = {
    "d_model": 16,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
}


def _seq2seq_config(cls, **kw):
    return cls(
        vocab_size=60,
        **TINY_ENCODER_DECODER,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        **kw,
    )


def _ids(rng, n, low=3, high=60):
    return rng.integers(low, high, int(n)).tolist()


def bert_sequence(rng):
    lens = load_real("gsm8k")[::100][:48, 0]  # question lengths in tokens
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [_ids(rng, n, 2, 100) for n in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
        }
    )
    model = transformers.BertForSequenceClassification(_bert_config())
    return model, ds, {"num_buckets": 3}, {"eval_strategy": "steps", "eval_steps": 2}


def bert_tokens(rng):
    lens = load_real("gsm8k")[::100][:48, 1]  # answer lengths in tokens, tagged per token
    ids = [_ids(rng, n, 2, 100) for n in lens]
    ds = datasets.Dataset.from_dict(
        {"input_ids": ids, "labels": [[t % 5 for t in row] for row in ids]}
    )
    model = transformers.BertForTokenClassification(_bert_config(num_labels=5))
    return model, ds, {"num_buckets": 2, "max_tokens": 600}, {}


def bart(rng):
    pairs = load_real("europarl")[::300][:48]  # (English, French) tokens per sentence pair
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [_ids(rng, a) for a in pairs[:, 0]],
            "labels": [_ids(rng, b) for b in pairs[:, 1]],
        }
    )
    config = _seq2seq_config(transformers.BartConfig, max_position_embeddings=128)
    model = transformers.BartForConditionalGeneration(config)
    return model, ds, {"num_buckets": 2}, {}


def wav2vec2_ctc(rng):
    lens = load_real("librispeech")[::400][:40] // 320  # 16 kHz samples, scaled down 320x
    frames = lens // 20  # the feature encoder's stride
    ds = datasets.Dataset.from_dict(
        {
            "input_values": [rng.standard_normal(n).astype(np.float32) for n in lens],
            "labels": [rng.integers(1, 12, max(1, f // 3)).tolist() for f in frames],
        }
    )
    model = transformers.Wav2Vec2ForCTC(_w2v_config())
    model.freeze_feature_encoder()  # as fine-tuning does (it also avoids a requires_grad break)
    return model, ds, {"num_buckets": 2, "max_tokens": 6000}, {}


def speech2text(rng):
    lens = load_real("librispeech")[::400][:40] // 1600  # 10 ms frames, scaled down 10x
    ds = datasets.Dataset.from_dict(
        {
            "input_features": [rng.standard_normal((n, 80)).astype(np.float32) for n in lens],
            "labels": [_ids(rng, max(1, n // 8), 3, 50) for n in lens],
        }
    )
    config = _seq2seq_config(
        transformers.Speech2TextConfig,
        conv_channels=16,
        input_feat_per_channel=80,
        input_channels=1,
        max_source_positions=128,
        max_target_positions=64,
    )
    model = transformers.Speech2TextForConditionalGeneration(config)
    return model, ds, {"num_buckets": 2, "max_tokens": 1500}, {}


def bert_qa(rng):
    lens = load_real("gsm8k")[::100][:48, 0]  # question lengths in tokens; a span in each
    start = [int(rng.integers(0, n)) for n in lens]
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [_ids(rng, n, 2, 100) for n in lens],
            "start_positions": start,
            "end_positions": [int(rng.integers(s, n)) for s, n in zip(start, lens, strict=True)],
        }
    )
    return transformers.BertForQuestionAnswering(_bert_config()), ds, {"num_buckets": 3}


MODELS: dict[str, Callable[[Any], Any]] = {
    "bert-sequence": bert_sequence,
    "bert-tokens": bert_tokens,
    "bart": bart,
    "wav2vec2-ctc": wav2vec2_ctc,
    "speech2text": speech2text,
}


def _build(name):
    torch.manual_seed(0)
    model, ds, bucketing, args = MODELS[name](np.random.default_rng(0))
    return model, ds, bucketing, args


class Counting:
    """A ``torch.compile`` backend that records the input shapes of each graph and runs it as is."""

    def __init__(self) -> None:
        self.graphs: list[list[tuple[int, ...]]] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append([tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)])
        return gm.forward


def _signature(inputs) -> tuple:
    return tuple(
        sorted(
            (k, tuple(v.shape))
            for k, v in inputs.items()
            if isinstance(v, torch.Tensor) and k not in BOOKKEEPING
        )
    )


def recording(base):
    class Recording(base):
        """Records every batch signature the Trainer hands to the model, per phase."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.seen: list[tuple[str, tuple]] = []

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.seen.append(("train", _signature(inputs)))
            return super().training_step(model, inputs, num_items_in_batch)

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **kw):
            self.seen.append(("eval", _signature(inputs)))
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **kw)

    return Recording


def _padded(rows, width, pad=-100):
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _check_labels_in_dataset_order(label_ids, ds):
    labels = ds["label"] if "label" in ds.column_names else ds["labels"]
    if not isinstance(labels[0], list):
        assert np.asarray(label_ids).tolist() == list(labels)
        return
    label_ids = np.asarray(label_ids)
    assert label_ids.shape[0] == len(ds)
    np.testing.assert_array_equal(label_ids, _padded(labels, label_ids.shape[1]))


@pytest.mark.parametrize("name", list(MODELS))
def test_train_evaluate_predict_planned_shapes_dataset_order_one_graph_per_shape(name, tmp_path):
    model, ds, bucketing, extra = _build(name)
    main = model.main_input_name
    counter = Counting()
    torch._dynamo.reset()
    model.compile(backend=counter, dynamic=False)  # every new shape would be a new graph
    got: dict[str, Any] = {}

    def metrics(pred):
        got["pred"] = pred
        return {"rows": float(np.asarray(pred.label_ids).shape[0])}

    cls = recording(hf.BucketTrainer)
    with torch._dynamo.config.patch(recompile_limit=64):
        trainer = cls(
            model=model,
            args=_args(tmp_path, max_steps=2, **extra),
            train_dataset=ds,
            eval_dataset=ds,
            bucketing=bucketing,
            compute_metrics=metrics,
        )
        trainer.train()
        result = trainer.evaluate()
        out = trainer.predict(ds)
    # every batch shape is one the plan promised, in each phase
    train_shapes = set(trainer.bucketing.sampler.shapes)
    eval_shapes = {s for _, b in trainer._eval_cache.values() for s in b.sampler.shapes}
    for phase, sig in trainer.seen:
        shape = dict(sig)[main][:2]
        assert shape in (train_shapes if phase == "train" else eval_shapes), (phase, sig)
    # one compiled graph per planned shape used (per mode: training and inference differ),
    # no graph break, no eager fallback
    used = {(phase, sig) for phase, sig in trainer.seen}
    assert len(counter.graphs) == len(used), (counter.graphs, used)
    assert not torch._dynamo.utils.counters["graph_break"]
    assert {s for p, s in used if p == "eval"}  # evaluate + predict reuse the same graphs
    # every sample exactly once, in dataset order, no filler row in the metrics
    assert result["eval_rows"] == len(ds) and out.metrics["test_rows"] == len(ds)
    _check_labels_in_dataset_order(got["pred"].label_ids, ds)
    _check_labels_in_dataset_order(out.label_ids, ds)
    logits = out.predictions[0] if isinstance(out.predictions, tuple) else out.predictions
    assert logits.shape[0] == len(ds) and np.isfinite(result["eval_loss"])
    if name in ("bert-sequence", "bert-tokens", "bart"):  # direct forward of samples alone
        model.eval()
        with torch.no_grad():
            for i in (0, 7, len(ds) - 1):
                row = {k: torch.tensor([v]) for k, v in ds[i].items() if k != "label"}
                want = model.forward(**row).logits[0].numpy()  # .forward: not the compiled call
                np.testing.assert_allclose(logits[i][: len(want)], want, atol=1e-5)


def test_seq2seq_generate_in_dataset_order(tmp_path):
    model, ds, bucketing, _ = _build("bart")
    args = _args(
        tmp_path,
        cls=transformers.Seq2SeqTrainingArguments,
        max_steps=1,
        predict_with_generate=True,
        generation_max_length=6,
    )
    trainer = hf.BucketSeq2SeqTrainer(model=model, args=args, train_dataset=ds, bucketing=bucketing)
    trainer.train()
    out = trainer.predict(ds)
    assert out.predictions.shape[0] == len(ds)
    _check_labels_in_dataset_order(
        out.label_ids[:, :6], ds.map(lambda r: {"labels": r["labels"][:6]})
    )
    # s22-rev: several sequences per sample were refused blaming DETR's loss_dict
    with pytest.raises(ValueError, match=r"2 rows per sample at output 0 .* num_return_seq"):
        trainer.predict(ds, num_beams=2, num_return_sequences=2)
    model.eval()
    for i in (3, 20):
        alone = model.generate(input_ids=torch.tensor([ds[i]["input_ids"]]), max_length=6)[0]
        assert out.predictions[i][: len(alone)].tolist() == alone.tolist()


# -- filler rows add nothing to any head's loss ---------------------------------------------------
def _loss_heads():
    def regression(rng):
        ds, bucketing = bert_sequence(rng)[1:3]
        ds = ds.map(lambda r, i: {"label": float(i % 7) / 7}, with_indices=True)
        return transformers.BertForSequenceClassification(_bert_config(num_labels=1)), ds, bucketing

    def multi_label(rng):
        ds, bucketing = bert_sequence(rng)[1:3]
        ds = ds.map(lambda r, i: {"label": [float(i % 2), float(i % 3 == 0)]}, with_indices=True)
        config = _bert_config(num_labels=2, problem_type="multi_label_classification")
        return transformers.BertForSequenceClassification(config), ds, bucketing

    heads = {name: (lambda rng, f=f: f(rng)[:3]) for name, f in MODELS.items()}
    return {
        **heads,
        "bert-regression": regression,
        "bert-multi-label": multi_label,
        "bert-qa": bert_qa,
    }


LOSS_HEADS = _loss_heads()


@dataclasses.dataclass
class LossCheck:
    max_abs_diff: float
    padded_batches: int
    naive_max_abs_diff: float


def padded_vs_real_rows(trainer, model) -> LossCheck:
    """Loss of every padded eval batch (trainer.compute_loss) against the model's own loss on
    the batch's real rows alone."""
    model.eval()
    worst, naive, count = 0.0, 0.0, 0
    with torch.no_grad():
        for batch in trainer.get_eval_dataloader():
            sm = batch["sample_mask"]
            n = int(sm.sum())
            if n == len(sm) or n == 0:
                continue
            count += 1
            ours = trainer.compute_loss(model, dict(batch))
            inputs = {k: v for k, v in batch.items() if k not in BOOKKEEPING}
            alone = model(**{k: v[:n] for k, v in inputs.items()}).loss
            whole = model(**inputs).loss  # the model's own loss, filler rows included
            worst = max(worst, abs(float(ours - alone)))
            naive = max(naive, abs(float(whole - alone)))
    return LossCheck(worst, count, naive)


@pytest.mark.parametrize("name", list(LOSS_HEADS))
def test_the_loss_of_a_padded_batch_equals_the_loss_of_its_real_rows(name, tmp_path):
    torch.manual_seed(0)
    model, ds, bucketing = LOSS_HEADS[name](np.random.default_rng(0))
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path),
        eval_dataset=ds,
        bucketing=bucketing,
        eval_bucketing={"balance": False},  # keep the batch sizes: more filler rows to check
    )
    check = padded_vs_real_rows(trainer, model)
    assert check.padded_batches >= 1
    assert check.max_abs_diff <= 1e-5, check
    if name in ("wav2vec2-ctc", "bert-regression", "bert-multi-label"):
        assert check.naive_max_abs_diff > 1e-3  # the model's own loss counts the filler rows
    if name == "bert-qa":  # filler rows' positions at the sequence length: the model ignores them
        assert check.naive_max_abs_diff <= 1e-5, check


def test_ctc_gradient_accumulation_is_the_mean_over_real_rows(tmp_path):
    """Regression (issue 13, 3): filler rows with all-zero masks crashed Wav2Vec2ForCTC; now
    they copy real rows, and an optimizer step's loss is the mean over its real rows."""
    torch.manual_seed(0)
    model, ds, bucketing, _ = _build("wav2vec2-ctc")
    b = hf.for_audio(ds, "input_values", num_buckets=2, max_tokens=6000, seed=1)
    batch = next(x for x in b.dataloader() if x["input_values"].shape[0] > 1)
    model(**batch)  # the crash: "Expected input_lengths to have value at least 0"
    # train_dataset=ds beside bucketing=for_audio(ds) (whose dataset is a torch-format view of
    # ds) is the same data, not "another train_dataset" (s20 review: refused)
    hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=ds, bucketing=b)
    args = _args(tmp_path, gradient_accumulation_steps=2)
    # full rows, so the plan has a batch with filler rows (even rows leave none here)
    bucketing = {**bucketing, "max_tokens": TokenBudget(6000, balance=False)}
    trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=bucketing)
    model.train()
    for m in model.modules():  # training mode (the step's normalisation), deterministic
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    every = list(trainer.get_train_dataloader())
    pair = [next(x for x in every if not x["sample_mask"].all()), every[0]]  # filler rows + other
    batches, _ = trainer.get_batch_samples(iter(pair), 2, trainer.args.device)
    total = sum(trainer.compute_loss(model, dict(x)) for x in batches)
    if trainer_module._TRAINER_TAKES_SCALED:
        assert trainer.loss_is_scaled_for_ga is True
    else:  # the loss as the older rule will divide it (no num_items_in_batch here)
        total = total / trainer.args.gradient_accumulation_steps
    rows, want = 0, 0.0
    for x in batches:
        n = int(x["sample_mask"].sum())
        inputs = {k: v[:n] for k, v in x.items() if k not in BOOKKEEPING}
        want += float(model(**inputs).loss.detach()) * n  # HF's "mean": per-row mean over the batch
        rows += n
    assert float(total.detach()) == pytest.approx(want / rows, rel=1e-5)  # float32, other order


def test_accumulation_under_the_older_trainers_rule_steps_as_under_the_newer(tmp_path, monkeypatch):
    """Regression: transformers before 5.19 has no ``loss_is_scaled_for_ga`` and every
    BucketTrainer failed there (47 tests, a CUDA machine with 5.17). Its fixed rule is what
    today's Trainer applies when the flag is None; an SGD step with accumulation under it moves
    the weights as under the flag (NOTE [ Losses already scaled for accumulation, on older
    transformers ]), and without the rescaling it does not (the rule divides where the model
    takes no loss kwargs; BERT does, so that is set off as HF advises for custom losses)."""

    def step(older: bool, rescale: bool = True):
        torch.manual_seed(0)
        model, ds, bucketing = LOSS_HEADS["bert-regression"](np.random.default_rng(0))
        with monkeypatch.context() as patch:
            if older:
                patch.setattr(trainer_module, "_TRAINER_TAKES_SCALED", False)
            if not rescale:
                patch.setattr(trainer_module, "_as_older_trainer_scales", lambda t, loss, *_: loss)
            args = _args(
                tmp_path, gradient_accumulation_steps=2, max_steps=1, optim="sgd", learning_rate=0.5
            )
            trainer = hf.BucketTrainer(
                model=model, args=args, train_dataset=ds, bucketing=bucketing
            )
            trainer.model_accepts_loss_kwargs = False  # (the older rule divides: HF's advice
            loss = trainer.train().training_loss  # for a loss of one's own)
        return torch.cat([p.detach().flatten() for p in model.parameters()]), loss

    newer, newer_loss = step(older=False)
    older, older_loss = step(older=True)
    torch.testing.assert_close(older, newer)
    assert older_loss == pytest.approx(newer_loss, rel=1e-5)
    plain, _ = step(older=True, rescale=False)
    assert not torch.allclose(plain, newer)  # (the rule alone scales the step by 1/2)


def test_the_older_rule_is_undone_for_either_scaling():
    """NOTE [ Losses already scaled for accumulation, on older transformers ], case by case:
    the older rule divides by the accumulation steps unless the model takes loss kwargs and
    the step counted its items, or a compute_loss_func is set; a scaled loss is multiplied back
    where it divides, a per-batch mean divided where it does not (by this accumulation's own
    steps when the trainer says them: the epoch's last may be shorter)."""
    from types import SimpleNamespace

    args = SimpleNamespace(gradient_accumulation_steps=4)

    def trainer(kwargs, func=None, current=None):
        return SimpleNamespace(
            model_accepts_loss_kwargs=kwargs,
            compute_loss_func=func,
            current_gradient_accumulation_steps=current,
            args=args,
        )

    def undo(t, scaled, items):
        return float(trainer_module._as_older_trainer_scales(t, torch.tensor(12.0), scaled, items))

    # the rule divides: no loss kwargs, or no count of items
    assert undo(trainer(False), True, 7) == undo(trainer(True), True, None) == 48.0
    assert undo(trainer(False), False, 7) == 12.0
    # it does not: loss kwargs and a count, or a compute_loss_func
    assert undo(trainer(True), False, 7) == undo(trainer(False, func=len), False, 7) == 3.0
    assert undo(trainer(True), True, 7) == 12.0
    assert undo(trainer(False, current=2), True, 7) == 24.0


def test_row_losses_count_the_ranks_and_a_step_of_no_real_row(tmp_path, monkeypatch):
    """NOTE [ Filler rows and the loss, per head ]: in training a per-row head's loss is the
    real rows' sum over the step's real rows (every rank's, with
    average_tokens_across_devices), times the ranks, as DDP averages their gradients; a step of
    no real row anywhere is 0, not 0 / 0."""
    model, ds, bucketing = LOSS_HEADS["bert-regression"](np.random.default_rng(0))
    args = _args(tmp_path, average_tokens_across_devices=True, seed=7)
    trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=bucketing)
    batch = dict(next(iter(trainer.get_train_dataloader())))
    assert trainer.bucketing.sampler.seed == 7  # (the Trainer's seed orders the epochs)
    assert trainer.bucketing.sampler.last_batch == "pad"
    # s19-user: dataloader_drop_last=True was ignored (every bucket's last batch padded)
    args = _args(tmp_path, dataloader_drop_last=True)
    dropping = hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=bucketing)
    dropping.get_train_dataloader()
    assert dropping.bucketing.sampler.last_batch == "drop"
    model.train()

    def loss(rows, ranks):
        trainer._step_rows = torch.tensor(rows)
        with monkeypatch.context() as mp:
            mp.setattr(type(trainer.args), "world_size", property(lambda self: ranks))
            torch.manual_seed(0)  # (the same dropout)
            return float(trainer.compute_loss(model, dict(batch)).detach())

    assert loss(10, 2) == pytest.approx(2 * loss(10, 1)) and loss(10, 1) > 0
    assert loss(10, 1) == pytest.approx(loss(5, 1) / 2)
    batch["sample_mask"] = torch.zeros_like(batch["sample_mask"])
    assert loss(0, 1) == 0.0


def test_a_transformers_older_than_tested_is_refused_by_name_with_the_upgrade():
    trainer_module._check_transformers("BucketTrainer", "5.17.0")
    trainer_module._check_transformers("BucketTrainer", "5.25.0.dev0")
    with pytest.raises(
        ImportError,
        match=r"BucketTrainer needs transformers>=5\.17, found "
        r"transformers==4\.57\.1; upgrade it \(pip install -U",
    ):
        trainer_module._check_transformers("BucketTrainer", "4.57.1")


def test_fixed_size_float_columns_are_audio_like_other_float_lists():
    """s12-polish left it: the trainer's audio test walked plain and large lists only, so
    fixed-length clips (Sequence(float32, length=n)) went to for_text and were refused as float
    token ids, while the same clips as a plain list went to for_audio."""
    value = datasets.Value("float32")
    ds = datasets.Dataset.from_dict(
        {"clip": [[0.5] * 4] * 2, "frames": [[[0.5] * 3] * 2] * 2, "ids": [[1] * 4] * 2},
        features=datasets.Features(
            {
                "clip": datasets.Sequence(value, length=4),
                "frames": datasets.Sequence(datasets.Sequence(value, length=3), length=2),
                "ids": datasets.Sequence(datasets.Value("int64"), length=4),
            }
        ),
    )
    assert trainer_module._is_audio(ds, "clip")
    assert trainer_module._is_audio(ds, "frames")
    assert not trainer_module._is_audio(ds, "ids")
    plain = datasets.Dataset.from_dict({"clip": [[0.5] * 4] * 2})
    assert trainer_module._is_audio(plain, "clip")


def test_seq2seq_joint_bucketing_gives_flat_masks(tmp_path):
    """Regression (issue 13, 2): for_text(ds, ["input_ids", "labels"]) returned attention_mask
    as a dict, which BartForConditionalGeneration(**batch) rejected."""
    model, ds, _, _ = _build("bart")
    b = hf.for_text(ds, ["input_ids", "labels"], pad_token_id=1, num_buckets=2, batch_size=8)
    batch = next(iter(b.dataloader()))
    assert batch["attention_mask"].shape == batch["input_ids"].shape
    assert model(**batch).loss.isfinite()
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=1),
        train_dataset=ds,
        bucketing={"column": ["input_ids", "labels"], "num_buckets": 2},
    )
    trainer.train()
    shapes = trainer.bucketing.sampler.shapes
    assert all(len(s) == 3 for s in shapes)  # (B, source, target): jointly bucketed, as asked


def test_eval_bucketing_options_and_batch_size_defaults(tmp_path):
    model, ds, _, _ = _build("bert-sequence")
    args = _args(tmp_path, per_device_eval_batch_size=5)
    trainer = hf.BucketTrainer(
        model=model, args=args, eval_dataset=ds, bucketing={"num_buckets": 2, "batch_size": 8}
    )
    trainer.get_eval_dataloader()
    assert {s[0] for s in trainer.eval_bucketing.sampler.shapes} <= set(range(1, 6))  # eval's B
    budget = hf.BucketTrainer(
        model=model,
        args=args,
        eval_dataset=ds,
        bucketing={"num_buckets": 2, "batch_size": 8},
        eval_bucketing={"max_tokens": 300, "balance": False},
    )
    budget.get_eval_dataloader()
    assert all(b * n <= 300 and b == 300 // n for b, n in budget.eval_bucketing.sampler.shapes)
    # a training budget gives way to evaluation's own batch size (not both at once)
    rows = hf.BucketTrainer(
        model=model,
        args=args,
        eval_dataset=ds,
        bucketing={"num_buckets": 2, "max_tokens": 300},
        eval_bucketing={"batch_size": 3},
    )
    rows.get_eval_dataloader()
    assert {s[0] for s in rows.eval_bucketing.sampler.shapes} <= {1, 2, 3}
    # training-only options stay out of evaluation (longest_first made evaluate() raise)
    first = hf.BucketTrainer(
        model=model, args=args, eval_dataset=ds, bucketing={"num_buckets": 2, "longest_first": True}
    )
    assert first.get_eval_dataloader().batch_sampler.num_samples == len(ds)
    # another dataset passed under the same key is bucketed anew, not served from the cache
    half = ds.select(range(len(ds) // 2))
    trainer.get_eval_dataloader(half)
    assert trainer.eval_bucketing.sampler.num_samples == len(half) < len(ds)


# -- the user's data_collator (NOTE [ The user's data_collator ]) ------------------------------
def _lm_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {**{t: i for i, t in enumerate(specials)}, **{f"w{i}": i for i in range(5, 100)}}
    core = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def _lm_dataset(tokenizer, n=90):
    lens = load_real("gsm8k")[:n, 0] // 2 + 1
    rng = np.random.default_rng(0)
    text = ["[CLS] " + " ".join(f"w{i}" for i in rng.integers(5, 100, k)) for k in lens]
    return datasets.Dataset.from_dict({"text": text}).map(
        lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"]
    )


@pytest.mark.parametrize("mlm", [True, False])
def test_language_modeling_collator_labels_planned_batches(mlm, tmp_path):
    tokenizer = _lm_tokenizer()
    ds = _lm_dataset(tokenizer)
    if mlm:
        model = transformers.BertForMaskedLM(_bert_config())
    else:
        model = transformers.BertLMHeadModel(_bert_config(is_decoder=True))
    lm = transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm=mlm, mlm_probability=0.5, seed=0
    )
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=3, learning_rate=1e-3, seed=0),
        train_dataset=ds,
        data_collator=lm,
        processing_class=tokenizer,
        bucketing={"num_buckets": 3, "batch_size": 8, "last_batch": "pad"},
    )
    loader = trainer.get_train_dataloader()
    shapes, collate = set(loader.batch_sampler.shapes), loader.collate_fn
    masked = filler = 0
    for indices in loader.batch_sampler:
        samples = [ds[int(i)] for i in indices]
        batch, plain = collate(samples), collate.collate(samples)  # with and without the LM step
        ids, labels = batch["input_ids"], batch["labels"]
        assert tuple(ids.shape) in shapes and labels.shape == ids.shape
        real_token = batch["attention_mask"].bool()
        rows = batch["sample_mask"]
        assert (labels[~real_token] == -100).all()  # never a padding position
        assert (labels[~rows] == -100).all()  # never a filler row
        filler += int((~rows).sum())
        if mlm:
            target = labels != -100
            masked += int(target.sum())
            # a target is the original token, never a special one ([CLS], [PAD], ...)
            assert torch.equal(labels[target], plain["input_ids"][target])
            assert not torch.isin(labels[target], torch.tensor(tokenizer.all_special_ids)).any()
            assert torch.equal(ids[~target], plain["input_ids"][~target])  # the rest untouched
            assert (ids[target] == tokenizer.mask_token_id).float().mean() > 0.5  # mostly [MASK]
        else:
            want = torch.where(real_token & rows[:, None], ids, torch.full_like(ids, -100))
            assert torch.equal(labels, want) and torch.equal(ids, plain["input_ids"])
    assert filler > 0  # the plan has partial batches, so filler rows were checked
    if mlm:
        assert masked > 0
        # the collator's seed= decides the masking, not the global RNG (as in its torch_call)
        samples = [ds[int(i)] for i in next(iter(loader.batch_sampler))]

        def masking(global_seed):
            torch.manual_seed(global_seed)
            fresh = transformers.DataCollatorForLanguageModeling(
                tokenizer, mlm_probability=0.5, seed=7
            )
            return type(collate)(collate.collate, fresh)(samples)["labels"]

        assert torch.equal(masking(0), masking(1))
    out = trainer.train()
    assert np.isfinite(out.training_loss)


# transformers' own note when a whole-word-masking collator is built (built here on purpose)
@pytest.mark.filterwarnings("ignore:Random token replacement is not supported with whole word")
def test_bucket_trainer_refuses_collators_it_would_drop(tmp_path):
    tokenizer = _lm_tokenizer()
    ds = _lm_dataset(tokenizer, n=16)
    model = transformers.BertForMaskedLM(_bert_config())
    common = {"model": model, "args": _args(tmp_path), "train_dataset": ds}
    with pytest.raises(ValueError, match="data_collator=<lambda>"):
        hf.BucketTrainer(**common, data_collator=lambda samples: samples)
    flat = transformers.DataCollatorWithFlattening(return_seq_idx=True)
    with pytest.raises(ValueError, match=r"packs with bucketing=hf.for_packing.*return_seq_idx"):
        hf.BucketTrainer(**common, data_collator=flat)  # (was the generic "would not be used")
    wwm = transformers.DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True)
    with pytest.raises(ValueError, match="whole-word masking"):
        hf.BucketTrainer(**common, data_collator=wwm)
    # a padding collator is replaced by the planned collation, silently (also positionally)
    padding = transformers.DataCollatorWithPadding(tokenizer)
    hf.BucketTrainer(**common, data_collator=padding)
    hf.BucketTrainer(model, _args(tmp_path), transformers.default_data_collator, ds)
    # ... keeping its pad multiple, for training and evaluation (it was dropped with it)
    eight = transformers.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)
    trainer = hf.BucketTrainer(**common, data_collator=eight, bucketing={"num_buckets": 3})
    trainer.get_train_dataloader()
    trainer.get_eval_dataloader(ds)
    shapes = trainer.bucketing.sampler.shapes + trainer.eval_bucketing.sampler.shapes
    assert all(length % 8 == 0 for _, length in shapes)
    listed = hf.BucketTrainer(**common, data_collator=eight, bucketing={"shapes": [30, 99]})
    assert [n for _, n in listed.get_train_dataloader().batch_sampler.shapes] == [30, 99]
    # ... nor those listed in eval_bucketing= (s20: planned 32 and 104)
    listed = hf.BucketTrainer(**common, data_collator=eight, eval_bucketing={"shapes": [30, 99]})
    assert sorted(n for _, n in listed.get_eval_dataloader(ds).batch_sampler.shapes) == [30, 99]


def test_question_answering_train_evaluate_predict_in_dataset_order(tmp_path):
    torch.manual_seed(0)
    model, ds, bucketing = bert_qa(np.random.default_rng(0))
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, max_steps=2),
        train_dataset=ds,
        eval_dataset=ds,
        bucketing=bucketing,
    )
    assert trainer.label_names == ["start_positions", "end_positions"]
    for batch in trainer.get_train_dataloader():
        filler = ~batch["sample_mask"]
        width = batch["input_ids"].shape[1]
        for key in ("start_positions", "end_positions"):
            assert (batch[key][filler] == width).all()  # ignored by the QA loss
    trainer.train()
    out = trainer.predict(ds)
    starts, ends = out.label_ids
    assert starts.tolist() == ds["start_positions"] and ends.tolist() == ds["end_positions"]
    start_logits = out.predictions[0]
    model.eval()
    with torch.no_grad():
        for i in (0, 9, len(ds) - 1):
            ids = torch.tensor([ds[i]["input_ids"]])
            want = model(input_ids=ids).start_logits[0].numpy()
            np.testing.assert_allclose(start_logits[i][: len(want)], want, atol=1e-5)


# -- a step with no real row (NOTE [ A step with no real row ]) ----------------------------------
def _gpt2_causal(rng):
    lens = load_real("gsm8k")[::100][:24, 0]
    ids = [_ids(rng, n, 2, 100) for n in lens]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": ids})
    config = transformers.GPT2Config(
        vocab_size=100, n_embd=16, n_layer=1, n_head=2, n_positions=256, pad_token_id=0
    )
    config.bos_token_id = config.eos_token_id = 1
    return transformers.GPT2LMHeadModel(config), ds


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("head", ["bert-sequence", "gpt2-causal"])
def test_a_step_with_no_real_row_has_loss_zero_and_zero_gradients(head, average, tmp_path):
    """A rank's step of stand-ins only (labels -100, sample_mask False) is 0 / 0 in the model's
    own loss; BucketTrainer makes it 0 with a zero gradient for every parameter (DDP's reducer
    sees each one), with average_tokens_across_devices True and False."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if head == "gpt2-causal":  # takes num_items_in_batch (a sum / count), shifts its labels
        model, ds = _gpt2_causal(rng)
    else:  # a mean over the labels that are not -100
        model, ds = bert_sequence(rng)[:2]
    args = _args(tmp_path, average_tokens_across_devices=average)
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing={"num_buckets": 2}
    )
    batch = dict(next(iter(trainer.get_train_dataloader())))
    batch["sample_mask"] = torch.zeros_like(batch["sample_mask"])  # every row a stand-in
    label = "labels" if "labels" in batch else "label"
    batch[label] = torch.full_like(batch[label], -100)
    inputs = {k: v for k, v in batch.items() if k not in BOOKKEEPING}
    assert model(**inputs).loss.isnan()  # the hazard: the model's own loss
    batches, num_items = trainer.get_batch_samples(iter([batch]), 1, trainer.args.device)
    model.train()
    model.zero_grad()
    loss = trainer.training_step(model, batches[0], num_items)
    assert float(loss) == 0.0
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and not g.any() for g in grads)
    # a batch with a real row is left alone
    batch["sample_mask"][0] = True
    batch[label][0] = 1
    real, _ = trainer.get_batch_samples(iter([batch]), 1, trainer.args.device)
    assert type(real[0]) is dict and float(trainer.compute_loss(model, dict(real[0])).detach()) > 0


def test_masked_loss_of_a_batch_with_no_real_row_is_zero():
    torch.manual_seed(0)
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    b = hf.for_text(ds, "input_ids", pad_token_id=0, num_buckets=2, batch_size=4, sample_mask=True)
    batch = dict(next(iter(b.dataloader())))
    batch["sample_mask"] = torch.zeros_like(batch["sample_mask"])
    batch["labels"] = torch.full_like(batch["labels"], -100)
    loss, _ = hf.masked_loss(model, batch)
    loss.backward()
    assert float(loss.detach()) == 0.0
    with pytest.raises(TypeError, match=r"batch must be the collated batch .* got Tensor"):
        hf.masked_loss(model, batch["input_ids"])  # (was dict()'s "update sequence element")
    unlabelled = {k: v for k, v in batch.items() if k != "labels"}
    with pytest.raises(ValueError, match=r"masked_loss needs the batch's labels, .* keys \["):
        hf.masked_loss(model, unlabelled)  # (was KeyError: 'loss')
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_an_iterable_train_dataset_is_refused_naming_train_dataset(tmp_path):
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    stream = ds.to_iterable_dataset()
    match = r"got train_dataset=IterableDataset; pass a map-style datasets.Dataset"
    with pytest.raises(TypeError, match=match):
        hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=stream)
    again = datasets.Dataset.from_generator(lambda: iter(stream))  # the fix the error names
    trainer = hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=again)
    assert len(trainer.get_train_dataloader()) > 0
    # an empty dataset is named by its argument (it was "lengths['input_ids'] must not be empty"),
    # when training: as Trainer, a trainer built to evaluate only may hold an empty one
    empty = ds.select([])
    trainer = hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=empty)
    assert trainer.predict(ds.select(range(3))).predictions.shape[0] == 3
    assert trainer.bucketing is None  # (no plan to read, and no error for reading it)
    with pytest.raises(ValueError, match=r"got train_dataset with no rows \(len\(train_dataset"):
        trainer.train()
    with pytest.raises(ValueError, match=r"got test_dataset with no rows"):
        trainer.predict(empty)
    # other datasets are named too, with their fix (a torch Dataset got the stream's advice)
    rows = torch.utils.data.Subset(ds, range(4))
    with pytest.raises(TypeError, match=r"so train_dataset must be .*Dataset.from_list\(\[train"):
        hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=rows)
    # a prebuilt bucketing trains on its own dataset: another train_dataset was ignored
    built = hf.for_text(ds, pad_token_id=0, batch_size=4)
    with pytest.raises(ValueError, match=r"dataset of bucketing=Bucketing\(...\) \(48 rows\), but"):
        hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=again, bucketing=built)
    hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=ds, bucketing=built)


def test_bucketing_options_are_checked_when_the_trainer_is_built(tmp_path):
    """bucketing={"num_bucket": 2} (or eval_bucketing={"shuffle": True}) was accepted by the
    constructor and refused only at the first loader, when train() or evaluate() began."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    args = _args(tmp_path)
    for kw, match in [
        ({"bucketing": {"num_bucket": 2}}, r"option num_bucket=2; did you mean num_buckets=\?"),
        ({"eval_bucketing": {"shuffle": True}}, r"batches are deterministic .* drop shuffle=True"),
        ({"eval_bucketing": {"max_token": 64}}, r"option max_token=64; did you mean max_tokens=\?"),
    ]:
        with pytest.raises(TypeError, match=match):
            hf.BucketTrainer(model=model, args=args, train_dataset=ds, **kw)
    # the trainer's own keys and for_audio's pass (checked again by the entry that runs)
    ok = {"precompile": False, "column": "input_ids", "num_buckets": 2, "pad_value": 0.0}
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing=ok, eval_bucketing={"max_tokens": 512}
    )
    assert trainer._bucketing_options["num_buckets"] == 2
    # s28-hf: num_replicas=2 on one process trained on half of the data, without a word, and
    # predict() failed after its loop ("index must hold every sample ... missing: [6, 7, 8]")
    for kw, match in [
        ({"bucketing": {"num_replicas": 2}}, r"^bucketing has num_replicas=2, but the run.s is 1"),
        ({"eval_bucketing": {"rank": 1}}, r"^eval_bucketing has rank=1, but the run.s is 0"),
    ]:
        with pytest.raises(ValueError, match=match + r" .*drop"):
            hf.BucketTrainer(model=model, args=args, train_dataset=ds, **kw)
    # s28-hf: an evaluation plan as the training one trained on one fixed order, every epoch
    plan = hf.for_text(ds, pad_token_id=0, batch_size=8, evaluation=True)
    with pytest.raises(ValueError, match=r"holds an EvalSampler .* without evaluation=True"):
        hf.BucketTrainer(model=model, args=args, bucketing=plan)
    ok = {"num_replicas": 1, "rank": 0}  # (the run's own: the defaults, given)
    hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=ok, eval_bucketing=ok)


def test_a_plan_longer_than_the_models_positions_is_refused_with_the_cut(tmp_path):
    """A sample longer than BERT's max_position_embeddings failed at its first batch, inside the
    model ("The expanded size of the tensor (119) must match the existing size (64)"), and an
    evaluation set's only after training (s28-hf)."""
    torch.manual_seed(0)
    _, ds = bert_sequence(np.random.default_rng(0))[:2]
    longest = max(len(x) for x in ds["input_ids"])
    config = _bert_config()
    config.max_position_embeddings = 36
    model = transformers.BertForSequenceClassification(config)
    assert longest > 36
    args = _args(tmp_path, max_steps=1)
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing={"pad_to_multiple_of": 8}
    )
    planned = -(-longest // 8) * 8
    match = rf"at most 36 positions .* train_dataset plans 'input_ids' batches {planned} long "
    with pytest.raises(ValueError, match=match + r".*'max_length': 32, 'overflow': 'truncate'"):
        trainer.train()
    cut = {"pad_to_multiple_of": 8, "max_length": 32, "overflow": "truncate"}
    with pytest.warns(Warning, match="truncate"):
        trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=cut)
        trainer.train()
    assert max(s[1] for s in trainer.bucketing.sampler.shapes) == 32
    short = ds.filter(lambda row: len(row["input_ids"]) <= 32)
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=short, eval_dataset={"long": ds}
    )
    with pytest.raises(ValueError, match=r"eval_dataset\['long'\] plans .*eval_bucketing="):
        trainer.evaluate(eval_dataset="long")
    # a prebuilt Bucketing too, and a packed document (GPT-2: "index out of range in self")
    with pytest.raises(ValueError, match=r"bucketing plans .* hf.for_text\(\.\.\., max_length=36"):
        hf.BucketTrainer(
            model=model, args=args, bucketing=hf.for_text(ds, pad_token_id=0, batch_size=4)
        )
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=100, n_embd=16, n_layer=1, n_head=2, n_positions=36)
    )
    docs = ds.remove_columns("label")
    packed = hf.for_packing(docs, pad_token_id=0, row_length=longest, batch_size=2)
    with pytest.raises(ValueError, match=rf"packs documents of up to {longest} tokens"):
        hf.BucketTrainer(model=gpt2, args=args, bucketing=packed)
    with pytest.warns(Warning, match="cut|truncat"):  # (the documents over 36 tokens, cut)
        packed = hf.for_packing(
            docs, pad_token_id=0, row_length=36, batch_size=2, overflow="truncate"
        )
    assert hf.BucketTrainer(model=gpt2, args=args, bucketing=packed).train().global_step == 1
    # a decoder's targets (padded per cell, not cut by the sampler: truncated when tokenized)
    pairs = datasets.Dataset.from_dict(
        {"input_ids": [[5] * 10] * 4, "labels": [[6] * n for n in (5, 10, 20, 40)]}
    )
    bart = transformers.BartForConditionalGeneration(
        _seq2seq_config(transformers.BartConfig, max_position_embeddings=32)
    )
    trainer = hf.BucketTrainer(model=bart, args=args, train_dataset=pairs)
    with pytest.raises(ValueError, match=r"'labels' batches 40 .*text_target=.*max_length=32"):
        trainer.get_train_dataloader()
    # the rows a table reserves; models without a table (relative, rotary) are not checked
    config = transformers.RobertaConfig(**{**_bert_config().to_dict(), "pad_token_id": 1})
    config.max_position_embeddings = 34
    roberta = transformers.RobertaModel(config)
    assert trainer_module._position_limit(roberta)[0] == 32
    bart = transformers.BartModel(
        _seq2seq_config(transformers.BartConfig, max_position_embeddings=40)
    )
    assert trainer_module._position_limit(bart)[0] == 40
    t5 = transformers.T5Model(
        transformers.T5Config(vocab_size=60, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2)
    )
    assert trainer_module._position_limit(t5) == (None, "")
    composite = torch.nn.Module()  # (an audio or image tower's table bounds no text)
    composite.tower, composite.config = (
        transformers.BertModel(_bert_config()),
        types.SimpleNamespace(),
    )
    assert trainer_module._position_limit(composite) == (None, "")


def test_removing_unused_columns_hides_neither_the_text_nor_the_audio_column(tmp_path):
    """s28-hf: remove_unused_columns removed what the model does not take before the bucketed
    column was looked up, so a missing one's error listed the columns left ('label') and told
    to tokenize 'text', not the dataset's 'sentence'; a decoded-audio column was "tokenize
    first" for a wav2vec2 (its main input 'input_values'), and column='audio.array' removed
    'audio' itself."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    raw = ds.remove_columns("input_ids").add_column("sentence", ["w2 w3"] * len(ds))
    trainer = hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=raw)
    with pytest.raises(KeyError, match=r"columns: \['label', 'sentence'\].*batch\['sentence'\]"):
        trainer.get_train_dataloader()
    rng = np.random.default_rng(0)
    lens = rng.integers(400, 1200, 8)
    audio = [{"array": rng.standard_normal(n).tolist(), "sampling_rate": 16000} for n in lens]
    speech = datasets.Dataset.from_dict(
        {"audio": audio, "labels": [[1, 2, 3]] * 8, "text": ["a b c"] * 8}
    )
    torch.manual_seed(0)
    ctc = transformers.Wav2Vec2ForCTC(_w2v_config())
    args = _args(tmp_path, max_steps=1, per_device_train_batch_size=4)
    trainer = hf.BucketTrainer(model=ctc, args=args, train_dataset=speech)
    with pytest.raises(
        KeyError, match=r"main input 'input_values' .* bucketing=\{'column': 'audio'\}"
    ):
        trainer.train()
    for column in ("audio", "audio.array"):
        bucketing = {"column": column, "num_buckets": 2}
        trainer = hf.BucketTrainer(model=ctc, args=args, train_dataset=speech, bucketing=bucketing)
        assert trainer.train().global_step == 1
    vit = _tiny_vit(image_size=32, num_labels=2, hidden_size=8, intermediate_size=16)
    images = datasets.Dataset.from_dict({"image": ["a.png", "b.png"], "label": [0, 1]})
    trainer = hf.BucketTrainer(model=vit, args=args, train_dataset=images)
    with pytest.raises(KeyError, match=r"main input 'pixel_values' .*'image', 'label'\]\); store"):
        trainer.train()


def test_predicting_a_dataset_dict_names_a_split(tmp_path):
    """s28-hf: predict(DatasetDict) warned to convert it with Dataset.from_list, then failed
    inside datasets ("Invalid key: 0. Please first select a split")."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    splits = datasets.DatasetDict({"validation": ds.select(range(4)), "test": ds.select([5])})
    trainer = hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=ds)
    with pytest.raises(TypeError, match=r"test_dataset is a DatasetDict .* test_dataset\['val"):
        trainer.predict(splits)
    with pytest.warns(RuntimeWarning, match=r"from_generator"):  # (a stream: not from_list)
        same = datasets.Dataset.from_dict({"input_ids": [[5] * 7] * 4, "label": [0, 1, 0, 1]})
        out = trainer.predict(same.to_iterable_dataset())  # (one length: Trainer's collator)
    assert out.predictions.shape[0] == 4


def test_token_labels_of_another_length_than_the_tokens_are_refused_by_row(tmp_path):
    """s28-hf: one row's labels a token short made 'labels' a target, padded on its own: the
    run trained without a word (its shapes happened to agree); labels per word, not per token,
    failed inside the loss ("Expected input batch_size (424) to match target batch_size")."""
    model, ds = bert_tokens(np.random.default_rng(0))[:2]
    labels = list(ds["labels"])
    labels[7] = labels[7][:-1]
    short = ds.remove_columns("labels").add_column("labels", labels)
    args = _args(tmp_path, max_steps=1)
    n = len(ds[7]["input_ids"])
    match = rf"^BucketTrainer: .* 1 of {len(ds)} rows \(the first: row 7, {n - 1} labels for {n} "
    with pytest.raises(ValueError, match=match):
        hf.BucketTrainer(model=model, args=args, train_dataset=short).train()
    trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds)
    with pytest.raises(ValueError, match=r"test_dataset's 'labels' differ .*row 7"):
        trainer.predict(short)


def test_a_custom_loss_on_a_per_row_head_is_told_of_the_filler_rows(tmp_path):
    """s28-hf: compute_loss_func got whole planned batches, and a regression head's filler rows
    carry the target -100: an MSE of 385 for 0.5, silently. Said once, with the count."""
    _, ds = bert_sequence(np.random.default_rng(0))[:2]
    ds = ds.remove_columns("label").add_column("labels", [0.5] * len(ds))
    torch.manual_seed(0)
    config = _bert_config(num_labels=1)

    def mse(outputs, labels, num_items_in_batch=None):
        return torch.nn.functional.mse_loss(outputs.logits.squeeze(-1), labels)

    for options, warns in [({}, True), ({"last_batch": "fill"}, False)]:
        model = transformers.BertForSequenceClassification(config)
        trainer = hf.BucketTrainer(
            model=model,
            args=_args(tmp_path, num_train_epochs=1),
            train_dataset=ds,
            compute_loss_func=mse,
            bucketing={"num_buckets": 3, **options},
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train()
        said = [
            w for w in caught if "compute_loss_func gets whole planned batches" in str(w.message)
        ]
        assert len(said) == warns  # (once)
        if warns:
            assert re.search(
                r"filler rows included \(\d+ of this batch's 8 rows", str(said[0].message)
            )
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path), compute_loss_func=mse, bucketing={"num_buckets": 1}
    )  # (11 samples in batches of 6 and 5 + a filler row)
    with pytest.warns(UserWarning, match=r"\(1 of this batch's 6 rows, their labels -100\)"):
        trainer.predict(ds.select(range(11)))


def test_an_evaluation_past_trainings_token_budget_names_eval_bucketing(tmp_path):
    """s28-hf: evaluation follows bucketing's max_tokens; a test row longer than it said "Raise
    max_tokens", and the user raised training's budget. The error names both now."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    short = ds.filter(lambda row: len(row["input_ids"]) <= 40)
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path), train_dataset=short, bucketing={"max_tokens": 64}
    )
    with pytest.raises(ValueError, match=r"^test_dataset: max_tokens=64 is below .*eval_bucketing"):
        trainer.predict(ds)
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path),
        train_dataset=short,
        bucketing={"max_tokens": 64},
        eval_bucketing={"max_tokens": 1024},
    )
    assert trainer.predict(ds).predictions.shape[0] == len(ds)


def test_a_plan_error_names_the_dataset_it_came_in(tmp_path):
    """s28-hf: for_text's own errors (a column the set lacks, a None label) named the set's
    columns but not which of train_dataset, eval_dataset (or which of a dict of them) and
    test_dataset it was; each now starts with the argument, as the checks after the plan do."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    raw = ds.remove_columns("input_ids").add_column("sentence", ["w2 w3"] * len(ds))
    unlabelled = ds.remove_columns("label").add_column("label", [None, *[1] * (len(ds) - 1)])
    evals = {"dev": ds, "other": raw}
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path), train_dataset=ds, eval_dataset=evals
    )
    missing = r": for_text pads the token column 'input_ids', which the dataset does not have"
    with pytest.raises(KeyError, match=r"^eval_dataset\['other'\]" + missing) as err:
        trainer.get_eval_dataloader("other")
    # (and for_text's column=... as the trainer takes it)
    assert "name the token column with eval_bucketing={'column': ...}, or" in str(err.value)
    assert trainer.get_eval_dataloader("dev") is not None
    with pytest.raises(KeyError, match=r"^test_dataset" + missing):
        trainer.predict(raw)
    with pytest.raises(ValueError, match=r"^test_dataset: column 'label' is None in 1 of its 48"):
        trainer.predict(unlabelled)
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path), train_dataset=raw, eval_dataset=ds
    )
    with pytest.raises(KeyError, match=r"^train_dataset" + missing) as err:
        trainer.get_train_dataloader()
    said = str(err.value)
    assert "with bucketing={'column': ...}, or" in said and "column=" not in said
    trainer = hf.BucketTrainer(model=model, args=_args(tmp_path), train_dataset=ds)
    with pytest.raises(ValueError, match=r"^eval_dataset: column 'label' is None in 1 of its"):
        trainer.evaluate(unlabelled)


def test_a_plan_error_says_its_column_fix_as_the_trainer_takes_it(tmp_path):
    """s31: for_text's (and its siblings') column fixes are OptionErrors the trainer re-says as
    bucketing={'column': ...}; a table of two texts rewrote them before, which left the other
    hints as column=... and said "name the token column ((bucketing=...)" with two parentheses."""
    model, ds = bert_sequence(np.random.default_rng(0))[:2]
    args = _args(tmp_path, remove_unused_columns=False)

    def said(dataset, **bucketing):
        trainer = hf.BucketTrainer(model=model, args=args, train_dataset=dataset, **bucketing)
        with pytest.raises((TypeError, ValueError)) as err:
            trainer.get_train_dataloader()
        assert "column=" not in str(err.value)
        return type(err.value), str(err.value)

    ints = ds.remove_columns("input_ids").add_column("input_ids", list(range(len(ds))))
    kind, text = said(ints)
    assert (
        kind is TypeError and "name the token column (bucketing={'column': 'input_ids'});" in text
    )
    kind, text = said(ds, bucketing={"column": ["input_ids", "input_ids"]})
    assert kind is ValueError
    assert "got bucketing={'column': ['input_ids', 'input_ids']}; list each" in text
    nested = ds.add_column("extra", [[[1]] * 3] * len(ds))
    assert said(nested)[1].endswith("bucket it too (bucketing={'column': [..., 'extra']})")
    trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds, eval_dataset=nested)
    with pytest.raises(ValueError, match=r"^eval_dataset: .*\(eval_bucketing=\{'column': \[\.\.\."):
        trainer.get_eval_dataloader()


def test_a_causal_batch_whose_only_target_the_shift_drops_has_no_target():
    """NOTE [ A step with no real row ]: a causal LM's loss shifts the labels (transformers sets
    ``_loss_shifts_labels``), so a label at position 0 alone is no target: the batch is marked
    (its loss would be 0 / 0); without the shift, or with ``shift_labels`` given, it counts."""
    from types import SimpleNamespace

    mark = trainer_module.BucketTrainer._no_targets
    first_only = {"labels": torch.tensor([[7, -100, -100], [-100, -100, -100]])}
    assert mark(SimpleNamespace(_loss_shifts_labels=True), first_only)
    assert not mark(SimpleNamespace(_loss_shifts_labels=False), first_only)
    shifted = {**first_only, "shift_labels": torch.tensor([[7, -100, -100]])}
    assert not mark(SimpleNamespace(_loss_shifts_labels=True), shifted)


def test_the_evaluation_loss_weighs_each_batch_by_its_real_rows():
    """The evaluation loss is the mean over real samples: a batch mean of 2.0 over 2 real rows
    and one of 5.0 over 1 give (4 + 5) / 3 = 3.0, not the mean of the batches (3.5) nor their
    sum over the batch count (4.5)."""
    record = trainer_module._EvalRecord(3, concat=True, positions=lambda index: index, steps=2)
    record.losses = [torch.tensor([[2.0 * 2, 2.0]]), torch.tensor([[5.0 * 1, 1.0]])]
    assert record.loss() == 3.0


def test_unconcatenated_evaluation_outputs_come_back_per_sample_in_dataset_order():
    """``eval_do_concat_batches=False``: each batch's rows go back to their samples by index,
    dataset row 0 included, filler rows (-1) dropped."""
    record = trainer_module._EvalRecord(3, concat=False, positions=lambda index: index, steps=2)
    record.index = [np.array([2, 0]), np.array([1, -1])]
    outputs = [torch.tensor([20.0, 0.0]), torch.tensor([10.0, 99.0])]
    assert [float(x) for x in record.restore(outputs)] == [0.0, 10.0, 20.0]


def test_batch_eval_metrics_get_compute_result_at_the_last_batch(tmp_path):
    """``batch_eval_metrics=True``: ``Trainer`` sets ``compute_result`` from accelerate's loader
    (``gradient_state.end_of_dataloader``), which the plain DataLoader never sets, so
    ``evaluate()`` returned none of the user's metrics; True at the last planned batch now, and
    the per-batch rows add up to every sample once (filler rows dropped)."""
    model, ds, _, _ = _build("bert-sequence")
    calls: list[tuple[int, bool]] = []

    def metrics(pred, compute_result=False):
        calls.append((len(pred.label_ids), compute_result))
        return {"rows": sum(n for n, _ in calls)} if compute_result else {}

    args = _args(tmp_path, batch_eval_metrics=True, per_device_eval_batch_size=7)
    trainer = hf.BucketTrainer(
        model=model, args=args, compute_metrics=metrics, bucketing={"num_buckets": 2}
    )
    out = trainer.evaluate(ds)
    assert out["eval_rows"] == len(ds)
    assert [done for _, done in calls] == [False] * (len(calls) - 1) + [True]


def test_filler_rows_carry_no_target_under_other_label_names(tmp_path):
    """``label_names=["target"]``: the filler rows copied the real row's ``target``, so a loss that
    ignores -100 counted that row twice; it is -100 on filler rows now, as ``label*`` keys are."""
    model, ds, _, _ = _build("bert-sequence")
    ds = ds.rename_column("label", "target")
    args = _args(tmp_path, label_names=["target"], per_device_train_batch_size=5)
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing={"num_buckets": 3}
    )
    batches = list(trainer.get_train_dataloader())
    filler = torch.cat([b["target"][~b["sample_mask"]] for b in batches])
    real = torch.cat([b["target"][b["sample_mask"]] for b in batches])
    assert filler.numel() and (filler == -100).all() and (real >= 0).all()


@pytest.mark.parametrize("budget", [False, True])
def test_auto_find_batch_size_plans_smaller_batches_after_out_of_memory(
    budget, tmp_path, monkeypatch
):
    """NOTE [ auto_find_batch_size ]: the bucketing was built once, so each retry after an
    out-of-memory error ran the same batches, down to "No executable batch size found"; it is
    planned anew at the lowered batch size (a token budget scaled with it)."""
    import accelerate.utils.memory

    monkeypatch.setattr(accelerate.utils.memory, "clear_device_cache", lambda **kw: None)  # (gc)
    model, ds, _, _ = _build("bert-sequence")

    def out_of_memory_above_4_rows(module, args, kwargs):
        if kwargs["input_ids"].shape[0] > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. (simulated)")

    model.register_forward_pre_hook(out_of_memory_above_4_rows, with_kwargs=True)
    longest = max(map(len, ds["input_ids"]))
    bucketing = {"num_buckets": 2, **({"max_tokens": 5 * longest} if budget else {})}
    args = _args(tmp_path, auto_find_batch_size=True, per_device_train_batch_size=5)
    trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds, bucketing=bucketing)
    trainer.train()  # a whole epoch: every planned batch has at most 4 rows
    assert trainer._train_batch_size < 5
    assert max(rows for rows, _ in trainer.bucketing.sampler.shapes) <= 4


def test_non_padding_tokens_seen_are_the_real_rows_tokens(tmp_path):
    """``include_num_input_tokens_seen="non_padding"`` summed ``attention_mask``, whose filler
    rows (copies of real rows) counted their tokens again."""
    model, ds, _, _ = _build("bert-sequence")
    ds = ds.select(range(21))
    args = _args(
        tmp_path, include_num_input_tokens_seen="non_padding", num_train_epochs=1, logging_steps=99
    )
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing={"num_buckets": 3, "batch_size": 5}
    )
    trainer.train()  # one epoch: every sample once
    assert trainer.state.num_input_tokens_seen == sum(map(len, ds["input_ids"]))


def test_the_training_order_follows_data_seed_as_trainers_does(tmp_path):
    """``TrainingArguments(data_seed=)`` fixes Trainer's data order whatever ``seed`` is; the
    bucket sampler took ``seed`` alone, so a new model seed also reshuffled the data."""
    model, ds, _, _ = _build("bert-sequence")
    orders = []
    for seed in (1, 2):
        args = _args(tmp_path, seed=seed, data_seed=7)
        trainer = hf.BucketTrainer(model=model, args=args, train_dataset=ds)
        orders.append([list(b) for b in trainer.get_train_dataloader().batch_sampler])
    assert orders[0] == orders[1] and trainer.bucketing.sampler.seed == 7
    # a batch_size given in bucketing= is scaled only by auto_find_batch_size's lowering, not
    # by arguments changed after the trainer was built (hyperparameter_search's setattr)
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path), train_dataset=ds, bucketing={"batch_size": 4}
    )
    trainer.args.per_device_train_batch_size = 16
    assert {rows for rows, _ in trainer.get_train_dataloader().batch_sampler.shapes} == {4}


def _tiny_detr(cls_name):
    """A DETR-family detector from a config only (nothing downloaded); its ResNet backbone is
    swapped for a 32 x 32 stride-32 patchify convolution, whose features of an image's cells do
    not see the padding (a ResNet's receptive field does, with or without a mask)."""
    torch.manual_seed(0)
    config = getattr(transformers, f"{cls_name}Config")(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 8, 8, 16], depths=[1, 1, 1, 1], layer_type="basic"
        ),
        **TINY_ENCODER_DECODER,
        num_queries=5,
        num_labels=3,
    )
    model = getattr(transformers, f"{cls_name}ForObjectDetection")(config).eval()

    class Patchify(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 32, stride=32)

        def forward(self, x):
            return [self.conv(x)]

    model.model.backbone.model = Patchify()
    return model


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (loss_policy: DETR's loss, last_batch)
def test_detr_family_gets_the_pixel_mask_its_processor_makes(tmp_path):
    """s22: BucketTrainer planned (C, H, W) pixel_values on their channel count (as audio) and
    its first batch failed; a 2-D plan through ModelInputs gave no pixel_mask, so DETR attended
    the padding (max |logits - the image's alone| 0.146 here), and ViT was given the height
    input's (B, H) mask as attention_mask, which raised. NOTE [ Images: pixel_mask ]."""
    from bucketloader.hf.trainer import _is_audio, _is_image

    sizes = [(64, 96), (96, 64), (64, 32), (32, 96), (32, 32), (96, 96)]
    g = torch.Generator().manual_seed(0)
    images = [torch.randn(3, h, w, generator=g) for h, w in sizes]
    ds = datasets.Dataset.from_dict(
        {
            "pixel_values": [x.tolist() for x in images],
            "labels": [
                {"class_labels": [i % 3], "boxes": [[0.5, 0.5, 0.2, 0.2]]} for i in range(6)
            ],
        }
    )
    assert _is_image(ds, "pixel_values") and _is_audio(ds, "pixel_values")  # (image first)
    processor = transformers.DetrImageProcessor(
        do_resize=False, do_rescale=False, do_normalize=False, do_pad=True
    )
    for name in ("Detr", "ConditionalDetr"):
        model = _tiny_detr(name)
        trainer = hf.BucketTrainer(
            model=model,
            args=_args(tmp_path, per_device_train_batch_size=3, max_steps=1),
            train_dataset=ds,
            bucketing={"max_shapes": 2, "seed": 0},
        )
        loader = trainer.get_train_dataloader()
        assert all(len(s) == 3 for s in trainer.bucketing.sampler.shapes)
        sampler, padded = trainer.bucketing.sampler, 0
        for idx, batch in zip(sampler, loader, strict=True):
            assert set(batch) == {"pixel_values", "pixel_mask", "labels", "sample_mask"}
            pv, pm = batch["pixel_values"], batch["pixel_mask"]
            n, (rows, _, h, w) = len(idx), pv.shape
            ref = processor(
                [images[i].numpy() for i in idx],
                pad_size={"height": h, "width": w},
                input_data_format="channels_first",
                return_tensors="pt",
            )
            assert torch.equal(ref["pixel_mask"], pm[:n]) and torch.equal(
                ref["pixel_values"], pv[:n]
            )
            assert not pm[n:].any() and len(batch["labels"]) == rows
            with torch.no_grad():
                masked = model(pixel_values=pv, pixel_mask=pm)
                unmasked = model(pixel_values=pv)
                for r, i in enumerate(idx):
                    alone = model(pixel_values=images[i][None])
                    for key in ("logits", "pred_boxes"):
                        got = getattr(masked, key)[r]
                        torch.testing.assert_close(got, getattr(alone, key)[0], atol=1e-5, rtol=0)
                    if sizes[i] != (h, w):  # padded: without the mask, another output
                        assert (unmasked.logits[r] - alone.logits[0]).abs().max() > 1e-3
                        padded += 1
        assert padded >= 3
        model.train()
        assert torch.isfinite(model(**{k: v for k, v in batch.items() if k != "sample_mask"}).loss)
    # prediction in dataset order: DETR's per-batch loss_dict and the per-image label dicts
    # failed at the end of the loop (IndexError, or "one row per index entry")
    with pytest.raises(ValueError, match=r"keys_to_ignore_at_inference = \['loss_dict'\]"):
        trainer.predict(ds)
    model.config.keys_to_ignore_at_inference = ["loss_dict"]
    with pytest.raises(ValueError, match=r"pass TrainingArguments\(eval_do_concat_batches=False"):
        trainer.predict(ds)
    trainer.args.eval_do_concat_batches = False
    out = trainer.predict(ds)
    assert [len(t["class_labels"]) for t in out.label_ids] == [1] * 6
    assert [int(t["class_labels"][0]) for t in out.label_ids] == [i % 3 for i in range(6)]
    assert len(out.predictions) == 6 and out.predictions[0][0].shape == (
        5,
        3,
    )  # (Conditional DETR: no "no object" class)
    # a model whose forward takes no pixel_mask gets none (nor the (B, H) mask it raised on)
    vit = _tiny_vit(image_size=64, num_labels=3)
    trainer = hf.BucketTrainer(
        model=vit,
        args=_args(tmp_path, per_device_train_batch_size=3),
        train_dataset=ds.remove_columns("labels").add_column("labels", [0, 1, 2] * 2),
        bucketing={"max_shapes": 2, "seed": 0},
    )
    batch = next(iter(trainer.get_train_dataloader()))
    assert set(batch) == {"pixel_values", "labels", "sample_mask"}
    out = vit(pixel_values=batch["pixel_values"], interpolate_pos_encoding=True)
    assert out.logits.shape == (3, 3)


def test_a_vit_gets_interpolated_positions_for_images_of_other_sizes(tmp_path):
    """s28-hf: a ViT on a plan of several image sizes failed at its first batch of another size
    than config.image_size ("Input image size (32*64) doesn't match model (32*32)") in
    training, evaluation and prediction: BucketTrainer did not pass interpolate_pos_encoding.
    It does now for exactly those batches (NOTE [ Images at other sizes than the model's ]);
    a batch at image_size, and a model that takes no such option, are left as they were."""
    sizes = [(32, 48), (48, 32), (32, 32), (48, 48), (32, 64), (64, 64), (32, 32), (32, 32)]
    g = torch.Generator().manual_seed(0)
    ds = datasets.Dataset.from_dict(
        {
            "pixel_values": [torch.randn(3, h, w, generator=g).tolist() for h, w in sizes],
            "labels": [0, 1, 2, 0, 1, 2, 0, 1],
        }
    )
    vit = _tiny_vit(image_size=32, num_labels=3)
    seen = _image_calls(vit)
    args = _args(tmp_path, max_steps=4, per_device_train_batch_size=2, eval_strategy="no")
    trainer = hf.BucketTrainer(
        model=vit, args=args, train_dataset=ds, bucketing={"max_shapes": 4, "seed": 0}
    )
    assert (32, 32) in {s[1:] for s in trainer.bucketing.sampler.shapes}
    assert trainer.train().global_step == 4
    out = trainer.predict(ds)
    assert out.predictions.shape == (8, 3) and np.isfinite(out.predictions).all()
    assert {size for size, _ in seen} > {(32, 32)}  # (other sizes were run, and 32 x 32)
    assert all((flag is True) == (size != (32, 32)) for size, flag in seen), seen
    # its logits are the model's own with the option (the image's row of its padded batch)
    batch = trainer.get_test_dataloader(ds)
    first = next(iter(batch))
    vit.eval()
    with torch.no_grad():
        direct = vit(pixel_values=first["pixel_values"], interpolate_pos_encoding=True).logits
    rows = first["index"][first["sample_mask"]]
    real = direct[first["sample_mask"]].numpy()
    np.testing.assert_allclose(out.predictions[rows.numpy()], real, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", ["Siglip", "CLIP"])
def test_a_classifier_over_a_vision_tower_gets_interpolated_positions_too(tmp_path, family):
    """s30-rev: SiglipForImageClassification takes interpolate_pos_encoding but keeps its
    image_size in config.vision_config, so the trainer, reading config.image_size only, never
    passed it: its first batch of another size failed inside the model ("The size of tensor a
    (9) must match the size of tensor b (4)"). s31: CLIPForImageClassification takes it only
    through **kwargs (passed on to its vision tower), which the trainer's check of the forward's
    names missed: "Input image size (32*48) doesn't match model (32*32)"."""
    sizes = [(32, 48), (48, 32), (32, 32), (48, 48), (32, 64), (64, 64), (32, 32), (32, 32)]
    g = torch.Generator().manual_seed(0)
    ds = datasets.Dataset.from_dict(
        {
            "pixel_values": [torch.randn(3, h, w, generator=g).tolist() for h, w in sizes],
            "labels": [0, 1, 2, 0, 1, 2, 0, 1],
        }
    )
    tiny = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 32}  # fmt: skip
    config = getattr(transformers, f"{family}Config")(
        vision_config={"image_size": 32, "patch_size": 16, **tiny},
        text_config={"vocab_size": 100, **tiny},
    )
    config.num_labels = 3
    model = getattr(transformers, f"{family}ForImageClassification")(config)
    seen = _image_calls(model)
    args = _args(tmp_path, max_steps=4, per_device_train_batch_size=2, eval_strategy="no")
    trainer = hf.BucketTrainer(
        model=model, args=args, train_dataset=ds, bucketing={"max_shapes": 4, "seed": 0}
    )
    assert trainer.train().global_step == 4
    out = trainer.predict(ds)
    assert out.predictions.shape == (8, 3) and np.isfinite(out.predictions).all()
    assert {size for size, _ in seen} > {(32, 32)}
    assert all((flag is True) == (size != (32, 32)) for size, flag in seen), seen


def test_segmentation_maps_pad_with_the_models_ignore_index(tmp_path):
    """s22-rev: for_images padded an (H, W) label map, and filled its filler rows, with -100:
    SegFormer's loss (ignore index 255, as BEiT, DPT, MobileViT, UperNet) raised "Target -100 is
    out of bounds" at the first batch. BucketTrainer passes the model's ignore index."""
    sizes = [(32, 64), (64, 32), (64, 64)]
    ds = datasets.Dataset.from_dict(
        {
            "pixel_values": [np.ones((3, h, w)).tolist() for h, w in sizes],
            "labels": [np.ones((h, w), np.int64).tolist() for h, w in sizes],
        }
    )
    model = transformers.SegformerForSemanticSegmentation(
        transformers.SegformerConfig(
            num_labels=3,
            hidden_sizes=[8, 8, 8, 8],
            depths=[1, 1, 1, 1],
            num_attention_heads=[1, 1, 1, 1],
            decoder_hidden_size=8,
        )
    )
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, per_device_train_batch_size=4),
        train_dataset=ds,
        bucketing={"max_shapes": 1, "seed": 0},
    )
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"]
    assert labels.shape == (4, 64, 64) and not batch["sample_mask"][3]
    assert sorted(labels.unique().tolist()) == [1, 255]  # (padding and the filler row)
    assert torch.equal(labels[:3] == 1, batch["pixel_values"][:3, 0] == 1)
    assert bool((labels[3] == 255).all())


def test_a_labelless_training_set_gets_no_decoder_mask_it_did_not_ask_for(tmp_path):
    """BucketTrainer asks for decoder_attention_mask where the model takes one; on a set with
    no labels there is none to give, and asking warned (s26b) for an option the user never set:
    the trainer asks only where the set has labels."""
    model, ds, bucketing, _ = bart(np.random.default_rng(0))
    trainer = hf.BucketTrainer(
        model=model,
        args=_args(tmp_path, remove_unused_columns=False),
        train_dataset=ds.remove_columns("labels"),
        bucketing=bucketing,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        trainer.get_train_dataloader()
