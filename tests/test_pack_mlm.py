"""Packed masked-LM rows (BERT / RoBERTa pretraining): MLMMasking in the packing collator,
hf.for_packing(mlm_probability=...) and BucketTrainer with a ForMaskedLM head (session 32).

Before, packing made causal-LM rows only and BucketTrainer refused a masked-LM head on them
(s31); an encoder user had to bucket instead."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bucketloader.pack import IGNORE_INDEX, MLMMasking, PackSampler, document_mask

transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")

from bucketloader import hf  # noqa: E402

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIAL = (PAD, UNK, CLS, SEP, MASK)
VOCAB = 64


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    vocab.update({f"w{i}": 5 + i for i in range(VOCAB - 5)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip


def _documents(n, seed=0, low=1, high=30, words=VOCAB):
    """[CLS] w... [SEP] documents: each repeats a 3-token pattern of ids in ``[5, words)``."""
    rng = np.random.default_rng(seed)
    docs = []
    for size in rng.integers(low, high, size=n).tolist():
        pattern = rng.integers(5, words, size=3)
        docs.append([CLS, *(int(pattern[i % 3]) for i in range(size)), SEP])
    return docs


def _masking(**kw):
    return MLMMasking(mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL, **kw)


def _encoder(kind, attn):
    torch.manual_seed(0)
    common = dict(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, attn_implementation=attn,
    )  # fmt: skip
    if kind == "roberta":
        config = transformers.RobertaConfig(max_position_embeddings=36, pad_token_id=1, **common)
        return transformers.RobertaForMaskedLM(config).eval()
    config = transformers.BertConfig(max_position_embeddings=34, pad_token_id=PAD, **common)
    return transformers.BertForMaskedLM(config).eval()


# (BERT under both attention implementations, a bool and a float mask; RoBERTa, whose
# difference is its position start, under one)
@pytest.mark.parametrize(
    ("kind", "attn"), [("bert", "sdpa"), ("bert", "eager"), ("roberta", "sdpa")]
)
def test_packed_masked_lm_rows_equal_each_document_alone(kind, attn):
    """Each document's logits in a packed masked-LM row equal the document (the same masked
    tokens) run alone, and the row's loss is the loss of its documents' masked tokens: the
    per-document losses summed over their masked tokens, divided by their count."""
    start, pad = (2, 1) if kind == "roberta" else (0, PAD)
    docs = _documents(12, seed=4, high=31)  # up to 32 tokens: full rows of 32 too
    assert max(map(len, docs)) == 32
    sampler = PackSampler([len(d) for d in docs], row_length=32, batch_size=3, seed=3)
    collate = sampler.collator(pad_token_id=pad, position_ids_start=start, mlm=_masking())
    model = _encoder(kind, attn)
    dtype = torch.bool if attn == "sdpa" else torch.float32
    ce = torch.nn.functional.cross_entropy
    seen, worst, worst_loss = 0, 0.0, 0.0
    for idx in sampler:
        batch = collate([docs[i] for i in idx])
        mask = document_mask(batch["document_ids"], causal=False, dtype=dtype)
        with torch.no_grad():
            out = model(
                input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                attention_mask=mask, labels=batch["labels"],
            )  # fmt: skip
        total, count = 0.0, 0
        for r, row in enumerate(batch["document_ids"]):
            for d in [d for d in row.unique().tolist() if d >= 0]:
                cols = (row == d).nonzero().flatten()
                with torch.no_grad():
                    alone = model(input_ids=batch["input_ids"][r, cols][None]).logits[0]
                worst = max(worst, float((out.logits[r, cols] - alone).abs().max()))
                labels = batch["labels"][r, cols]
                total += float(ce(alone, labels, reduction="sum", ignore_index=IGNORE_INDEX))
                count += int((labels != IGNORE_INDEX).sum())
                seen += 1
        worst_loss = max(worst_loss, abs(float(out.loss) - total / count))
    assert seen == len(docs)
    assert worst < 2e-6 and worst_loss < 2e-6


def test_masking_statistics_match_data_collator_for_language_modeling():
    """On the same tokens, the fractions picked, made [MASK], randomised and kept are HF's
    (Bernoulli 0.15, then 80/10/10), special tokens and padding are never picked, random ids
    span the vocabulary, and labels are the original ids of the picked tokens only."""
    docs = _documents(4000, seed=2, low=20, high=60)
    docs = [[*d[:5], UNK, *d[5:]] for d in docs]  # an UNK in each: special, never picked
    sampler = PackSampler([len(d) for d in docs], row_length=256, batch_size=8)
    collate = sampler.collator(pad_token_id=PAD, mlm=_masking(seed=5))
    ours = {"picked": 0, "mask": 0, "random": 0, "kept": 0, "tokens": 0}
    randoms: list[torch.Tensor] = []
    for idx in sampler:
        batch = collate([docs[i] for i in idx])
        original = torch.full_like(batch["input_ids"], PAD)
        for r, row in enumerate(batch["document_ids"]):
            for d in [d for d in row.unique().tolist() if d >= 0]:
                original[r, row == d] = torch.tensor(docs[idx[d]])
        real = batch["document_ids"] >= 0
        picked = batch["labels"] != IGNORE_INDEX
        assert torch.equal(batch["labels"][picked], original[picked])
        assert not picked[~real].any()
        assert not torch.isin(original[picked], torch.tensor(SPECIAL)).any()
        assert torch.equal(batch["input_ids"][~picked], original[~picked])  # only picked change
        new = batch["input_ids"][picked]
        ours["tokens"] += int((real & ~torch.isin(original, torch.tensor(SPECIAL))).sum())
        ours["picked"] += int(picked.sum())
        ours["mask"] += int((new == MASK).sum())
        ours["kept"] += int((new == original[picked]).sum())
        randoms.append(new[(new != MASK) & (new != original[picked])])
    ours["random"] = sum(int(x.numel()) for x in randoms)

    class Tok:  # what DataCollatorForLanguageModeling reads of a tokenizer
        mask_token, pad_token_id, all_special_ids = "[MASK]", PAD, SPECIAL

        def __len__(self):
            return VOCAB

        def convert_tokens_to_ids(self, token):
            return MASK

    lm = transformers.DataCollatorForLanguageModeling(Tok(), mlm=True, seed=5)
    lm.create_rng()
    flat = torch.tensor([t for d in docs for t in d])[None]
    special = torch.isin(flat, torch.tensor(SPECIAL))
    new, labels = lm.torch_mask_tokens(flat.clone(), special_tokens_mask=special)
    picked = labels != IGNORE_INDEX
    theirs = {
        "tokens": int((~special).sum()),
        "picked": int(picked.sum()),
        "mask": int((new[picked] == MASK).sum()),
        "kept": int((new[picked] == flat[picked]).sum()),
    }
    theirs["random"] = theirs["picked"] - theirs["mask"] - theirs["kept"]
    assert ours["tokens"] == theirs["tokens"] > 100_000
    # (binomial standard deviations: 0.0011 of the tokens, 0.0034 / 0.0025 of the picked)
    for stats in (ours, theirs):
        assert abs(stats["picked"] / stats["tokens"] - 0.15) < 0.005
        assert abs(stats["mask"] / stats["picked"] - 0.8 - 0.0) < 0.012
        # a random id equal to the original counts as kept, in both: 0.1 * (1 + 1 / 64)
        assert abs(stats["kept"] / stats["picked"] - 0.1 * (1 + 1 / VOCAB)) < 0.01
    random = torch.cat(randoms)
    assert int(random.min()) == 0 and int(random.max()) == VOCAB - 1  # the whole vocabulary


def _by_document(batches, plan):
    """Each document's (masked ids, labels) in ``batches``, by its dataset index (``plan``:
    the sampler's plan of the epoch; a batch's document ``d`` is its ``d``-th sample)."""
    found = {}
    for i, batch in enumerate(batches):
        idx = plan.indices[plan.offsets[i] : plan.offsets[i + 1]].tolist()
        for r, row in enumerate(batch["document_ids"]):
            for d in [d for d in row.unique().tolist() if d >= 0]:
                cols = row == d
                found[idx[d]] = (
                    batch["input_ids"][r, cols].tolist(),
                    batch["labels"][r, cols].tolist(),
                )
    return found


def test_masks_follow_seed_epoch_and_document_only():
    """A document's mask is a function of (seed, epoch, its tokens): the same in an epoch
    whatever its row-mates and batch (another plan seed), with DataLoader workers (persistent
    ones, across epochs) as without, and after a resume; other in the next epoch (dynamic
    masking) and under another seed."""
    docs = _documents(60, seed=4)
    dataset = [torch.tensor(d) for d in docs]
    lens = [len(d) for d in docs]

    def run(plan_seed, epochs=(0, 1), mask_seed=0, **options):
        sampler = PackSampler(lens, row_length=48, batch_size=2, seed=plan_seed)
        collate = sampler.collator(mlm=_masking(seed=mask_seed))
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, **options)
        per_epoch = []
        for epoch in epochs:
            sampler.set_epoch(epoch)
            per_epoch.append(_by_document(list(loader), sampler.plan(epoch)))
        return per_epoch

    e0, e1 = run(plan_seed=0)
    assert len(e0) == len(docs)
    assert run(plan_seed=9) == [e0, e1]  # other row-mates and batches: the same masks
    # the workers (one copy of the collator each, kept across epochs) read the sampler's epoch
    assert run(plan_seed=0, num_workers=2, persistent_workers=True) == [e0, e1]
    assert sum(e0[i] != e1[i] for i in e0) > len(docs) // 2  # the next epoch masks again
    assert sum(run(0, (0,), mask_seed=1)[0][i] != e0[i] for i in e0) > len(docs) // 2

    # a resume mid-epoch 1 gives the rest of epoch 1's batches, masked as before
    sampler = PackSampler(lens, row_length=48, batch_size=2, seed=0)
    loader = sampler.dataloader(dataset, collate_fn=sampler.collator(mlm=_masking()))
    sampler.set_epoch(1)
    full = list(loader)
    sampler.set_epoch(1)
    it = iter(loader)
    next(it), next(it)
    again = PackSampler(lens, row_length=48, batch_size=2, seed=0)
    again.load_state_dict(loader.state_dict())
    rest = list(again.dataloader(dataset, collate_fn=again.collator(mlm=_masking())))
    assert len(rest) == len(full) - 2 > 0
    for a, b in zip(rest, full[2:], strict=True):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])


def test_masks_are_the_draws_the_note_defines():
    """NOTE [ Masked-LM masking of packed rows ]: token ``t`` of a document picks with its
    SplitMix64 uniform ``4 t + 1`` from the document's key, is replaced with the mask token by
    ``4 t + 2``, with a random id by ``4 t + 3`` (the id: output ``4 t + 4`` mod the vocabulary).
    Written here over every token, as the definition reads (apply draws the later numbers for the
    picked tokens only: the same masks); padding between the documents is left alone."""
    from bucketloader.pack import mlm

    rng = np.random.default_rng(7)
    sizes = np.array([0, 5, 40, 1, 33, 17], dtype=np.int64)
    starts = np.cumsum(sizes + 2) - sizes  # (two padding tokens before each document)
    flat = rng.integers(0, VOCAB, size=int(starts[-1] + sizes[-1] + 3)).astype(np.int64)
    masking = _masking(mlm_probability=0.5, mask_replace_prob=0.5, random_replace_prob=0.3)
    ids, labels = masking.apply(flat, starts, sizes, epoch=3)
    want_ids, want_labels = flat.copy(), np.full(flat.shape, IGNORE_INDEX, dtype=np.int64)
    key = mlm._epoch_key(masking.seed, 3)
    drawn = np.zeros(2, dtype=np.int64)  # (mask tokens, random ids)
    for s, n in zip(starts.tolist(), sizes.tolist(), strict=True):
        if not n:
            continue
        doc = flat[s : s + n]
        base = np.repeat(mlm._document_keys(flat, np.array([s]), np.array([n]), key), n)
        t = np.arange(n, dtype=np.uint64)
        picked = (mlm._uniform(base, t, 0) < 0.5) & ~np.isin(doc, SPECIAL)
        masked = picked & (mlm._uniform(base, t, 1) < 0.5)
        randomised = picked & ~masked & (mlm._uniform(base, t, 2) < 0.3 / 0.5)
        drawn += masked.sum(), randomised.sum()
        new = doc.copy()
        new[masked] = MASK
        new[randomised] = (mlm._mix(base, t, 3) % np.uint64(VOCAB)).astype(np.int64)[randomised]
        want_ids[s : s + n] = new
        want_labels[s : s + n][picked] = doc[picked]
    assert drawn.min() > 0  # (both replacements drawn)
    assert np.array_equal(ids, want_ids) and np.array_equal(labels, want_labels)


def test_mlm_masking_refuses_bad_options():
    # (s32-tidyA: 1.5 was refused as outside [0.0, 1.0], a range 0 was refused from too)
    for p, error in ((0, ValueError), (0.0, ValueError), (1.5, ValueError), ("0.15", TypeError)):
        with pytest.raises(error, match=rf"^mlm_probability must be a number in \(0, 1\], got"
                                        rf" mlm_probability={p!r}; 0.15 is BERT's$"):  # fmt: skip
            _masking(mlm_probability=p)
    with pytest.raises(ValueError, match=r"mask_replace_prob \+ random_replace_prob must be at"):
        _masking(mask_replace_prob=0.95, random_replace_prob=0.1)
    with pytest.raises(ValueError, match=r"mask_token_id must be an id of the vocabulary \[0, 64"):
        MLMMasking(mask_token_id=64, vocab_size=64)
    with pytest.raises(TypeError, match=r"special_ids must be a sequence of ints"):
        MLMMasking(mask_token_id=4, vocab_size=64, special_ids=3)
    with pytest.raises(TypeError, match=r"mlm must be None or an MLMMasking"):
        PackSampler([3, 4], row_length=8, batch_size=1).collator(mlm=0.15)
    with pytest.raises(ValueError, match=r"has no mask token \(mask_token_id=None\)"):
        MLMMasking.from_tokenizer(transformers.PreTrainedTokenizerFast(
            tokenizer_object=_tokenizer().backend_tokenizer, pad_token="[PAD]"
        ))  # fmt: skip
    collate = PackSampler([3, 4], row_length=8, batch_size=1).collator(mlm=_masking())
    with pytest.raises(ValueError, match=r"carry their own labels \('labels'\), but a masked-LM"):
        collate([{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}])


def _args(tmp_path, **kw):
    kw = {"save_strategy": "no", **kw}
    return transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True,
        logging_strategy="no", **kw,
    )  # fmt: skip


def _bert(**kw):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=PAD, **kw,
    )  # fmt: skip
    return (transformers.BertLMHeadModel if kw else transformers.BertForMaskedLM)(config)


def test_bucket_trainer_trains_a_masked_lm_head_on_packed_masked_lm_rows(tmp_path):
    """s31 refused BertForMaskedLM on packed rows (causal-LM rows only); with
    for_packing(mlm_probability=0.15) BucketTrainer takes it: the batches are masked-LM rows
    with a bidirectional document mask, and a few steps lower the loss on fixed masked batches.
    A causal-LM head is refused on them, as the masked-LM head still is on causal rows."""
    tok = _tokenizer()
    # (a few words: the first steps learn them, from ln(64) towards ln(8))
    ds = datasets.Dataset.from_dict({"input_ids": _documents(120, seed=6, words=13)})
    packed = hf.for_packing(ds, tokenizer=tok, mlm_probability=0.15, row_length=64, batch_size=4)
    assert packed.collator.attention == "mask" and not packed.collator.causal
    fixed = list(packed.dataloader())[:4]  # epoch 0's first batches, masked once
    mask = fixed[0]["attention_mask"]
    assert mask.dtype == torch.bool and torch.equal(mask, mask.transpose(-1, -2))  # both ways
    assert (fixed[0]["input_ids"] == MASK).any() and (fixed[0]["labels"] != IGNORE_INDEX).any()

    def loss(model):
        model.eval()
        with torch.no_grad():
            return float(np.mean([float(model(**b).loss) for b in fixed]))

    model = _bert()
    before = loss(model)
    trainer = hf.BucketTrainer(
        model=model, args=_args(tmp_path, max_steps=6, learning_rate=2e-2), bucketing=packed
    )
    assert trainer.train().global_step == 6  # (4.15 -> 2.42)
    after = loss(model)
    assert after < before - 1.0, (before, after)

    with pytest.raises(ValueError, match=r"BertLMHeadModel is a causal-LM head, which shifts"):
        hf.BucketTrainer(model=_bert(is_decoder=True), args=_args(tmp_path), bucketing=packed)
    causal = hf.for_packing(ds, tokenizer=tok, attention="mask", row_length=64, batch_size=4)
    with pytest.raises(ValueError, match=r"masked-LM head.*hf.for_packing\(..., tokenizer=tok"):
        hf.BucketTrainer(model=_bert(), args=_args(tmp_path), bucketing=causal)


def test_a_roberta_masked_lm_trains_on_packed_rows_from_its_padding_index(tmp_path):
    """RoBERTa numbers positions from padding_idx + 1: masked-LM rows from 2 are taken, from 0
    refused naming position_ids_start=2 (the check of s31, now reached by a masked-LM head)."""
    tok = _tokenizer()
    ds = datasets.Dataset.from_dict({"input_ids": _documents(40, seed=7)})
    torch.manual_seed(0)
    roberta = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=66, pad_token_id=1,
    ))  # fmt: skip
    options = dict(tokenizer=tok, mlm_probability=0.15, row_length=64, batch_size=2)
    with pytest.raises(ValueError, match=r"numbers positions from 2 .*position_ids_start=2\)$"):
        hf.BucketTrainer(
            model=roberta, args=_args(tmp_path), bucketing=hf.for_packing(ds, **options)
        )
    packed = hf.for_packing(ds, position_ids_start=2, **options)
    trainer = hf.BucketTrainer(model=roberta, args=_args(tmp_path, max_steps=2), bucketing=packed)
    assert trainer.train().global_step == 2


def test_for_packing_refuses_what_masked_lm_rows_cannot_take(tmp_path):
    tok = _tokenizer()
    # (documents of 20 tokens or more: every evaluation batch has a masked token, else its
    # loss is NaN, as in transformers.Trainer)
    ds = datasets.Dataset.from_dict({"input_ids": _documents(20, low=20, high=40)})
    options = dict(mlm_probability=0.15, row_length=64, batch_size=2)
    with pytest.raises(ValueError, match=r"'positions' tells a decoder .* attention='flash'$"):
        hf.for_packing(ds, tokenizer=tok, attention="positions", **options)
    with pytest.raises(ValueError, match=r"mlm_probability=0.15\) masks with the tokenizer's"):
        hf.for_packing(ds, pad_token_id=0, **options)
    labelled = ds.add_column("labels", ds["input_ids"])
    with pytest.raises(ValueError, match=r"has a 'labels' column, which would be lost; drop it"):
        hf.for_packing(labelled, tokenizer=tok, **options)
    packed = hf.for_packing(ds, tokenizer=tok, **options)
    lm = transformers.DataCollatorForLanguageModeling(tok, mlm=False)
    with pytest.raises(ValueError, match=r"packed masked-LM rows .* has mlm=False"):
        trainer = hf.BucketTrainer(
            model=_bert(), args=_args(tmp_path), bucketing=packed, data_collator=lm
        )
        trainer.get_train_dataloader()
    plain = hf.BucketTrainer(model=_bert(), args=_args(tmp_path), bucketing=packed, eval_dataset=ds)
    with pytest.warns(
        UserWarning, match=r"own masked-LM labels, .*Modeling\(tokenizer, mlm=True\)"
    ):
        plain.get_eval_dataloader()
    # mlm=True masks the evaluation batches (bucketed, without labels) and leaves the packed ones
    lm = transformers.DataCollatorForLanguageModeling(tok, mlm=True, seed=0)
    trainer = hf.BucketTrainer(
        model=_bert(), args=_args(tmp_path, max_steps=1), bucketing=packed, data_collator=lm,
        eval_dataset=ds,
    )  # fmt: skip
    train = next(iter(trainer.get_train_dataloader()))
    assert train["attention_mask"].dim() == 4  # the packed batch, as collated
    assert np.isfinite(trainer.evaluate()["eval_loss"])


def _masked_documents(batch):
    """``{original tokens: (masked ids, labels)}`` of every document of a collated batch."""
    found = {}
    for r, row in enumerate(batch["document_ids"]):
        for d in [d for d in row.unique().tolist() if d >= 0]:
            ids, labels = batch["input_ids"][r, row == d], batch["labels"][r, row == d]
            original = torch.where(labels != IGNORE_INDEX, labels, ids)
            found[tuple(original.tolist())] = (ids.tolist(), labels.tolist())
    return found


def test_a_packing_stream_masks_each_document_as_the_sampler_does():
    """PackIterable.collator(mlm=...) writes its pass's epoch where its workers collate: with
    two persistent workers over two epochs, every document is masked as a PackSampler with the
    same MLMMasking masks it in that epoch."""
    from bucketloader.stream import PackIterable

    docs = _documents(50, seed=8, low=6)
    assert len({tuple(d) for d in docs}) == len(docs)
    sampler = PackSampler([len(d) for d in docs], row_length=48, batch_size=2)
    by_sampler = sampler.collator(mlm=_masking(seed=3))
    stream = PackIterable(docs, row_length=48, batch_size=2)
    loader = DataLoader(
        stream, batch_size=None, collate_fn=stream.collator(mlm=_masking(seed=3)),
        num_workers=2, persistent_workers=True,
    )  # fmt: skip
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        stream.set_epoch(epoch)
        want: dict = {}
        for idx in sampler:
            want.update(_masked_documents(by_sampler([docs[i] for i in idx])))
        got: dict = {}
        for batch in loader:
            got.update(_masked_documents(batch))
        assert len(got) == len(docs) and got == want


def _modernbert(attn="sdpa"):
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=PAD, bos_token_id=CLS,
        cls_token_id=CLS, eos_token_id=SEP, sep_token_id=SEP, local_attention=8,
        global_attn_every_n_layers=2, attn_implementation=attn,
    )  # fmt: skip
    return transformers.ModernBertForMaskedLM(config).eval()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_modernbert_sliding_layers_take_a_mask_per_layer_kind(tmp_path, attn):
    """ModernBERT's local layers see config.sliding_window (4) tokens either way; one 4-D
    document mask is used as given by every layer, so in packed rows they saw whole documents
    (logits 3.9e-4 off each document alone) and BucketTrainer took it. It is refused now, naming
    sliding_window=4, which ships one mask per layer kind: then each document equals it alone."""
    tok = _tokenizer()
    ds = datasets.Dataset.from_dict({"input_ids": _documents(12, seed=9, low=6)})
    model = _modernbert(attn)
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    dtype = torch.bool if attn == "sdpa" else torch.float32
    options = dict(tokenizer=tok, mlm_probability=0.15, row_length=32, batch_size=2)
    options.update(mask_dtype=dtype)
    plain = hf.for_packing(ds, **options)
    with pytest.raises(ValueError, match=r"attend 4 tokens either way, .*sliding_window=4\) \("):
        hf.BucketTrainer(model=model, args=_args(tmp_path), bucketing=plain)
    packed = hf.for_packing(ds, sliding_window=4, **options)
    hf.BucketTrainer(model=model, args=_args(tmp_path), bucketing=packed)  # taken
    worst = {"plain": 0.0, "per kind": 0.0}
    for idx in packed.sampler:
        samples = [packed.dataset[i] for i in idx]
        batch = packed.collator(samples)
        document_ids = packed.collator.collator(samples)["document_ids"]
        masks = batch["attention_mask"]
        assert torch.equal(masks["full_attention"], plain.collator(samples)["attention_mask"])
        for name, mask in (("plain", masks["full_attention"]), ("per kind", masks)):
            with torch.no_grad():
                logits = model(**{**batch, "attention_mask": mask}).logits
            for r, row in enumerate(document_ids):
                for d in [d for d in row.unique().tolist() if d >= 0]:
                    cols = row == d
                    with torch.no_grad():
                        alone = model(input_ids=batch["input_ids"][r, cols][None]).logits[0]
                    worst[name] = max(worst[name], float((logits[r, cols] - alone).abs().max()))
    assert worst["per kind"] < 1e-6 < 1e-5 < worst["plain"], worst
    with pytest.raises(ValueError, match=r"BertForMaskedLM has no sliding-window layers .*no s"):
        hf.BucketTrainer(model=_bert(), args=_args(tmp_path), bucketing=packed)
    with pytest.raises(ValueError, match=r"sliding_window=4 shapes the 4-D masks of attention="):
        hf.for_packing(ds, sliding_window=4, attention="flash", **options)


def test_a_resumed_run_trains_on_the_masked_batches_it_would_have(tmp_path):
    """BucketTrainer resumed from a checkpoint mid-epoch 1 trains on exactly the masked inputs
    and labels the uninterrupted run did after it: the checkpoint's epoch reaches the collator
    (built at epoch 0) when the resumed pass starts."""
    tok = _tokenizer()
    ds = datasets.Dataset.from_dict({"input_ids": _documents(24, seed=10, low=5)})

    class Recording(hf.BucketTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            self.seen.append(
                (self.state.global_step, inputs["input_ids"].clone(), inputs["labels"].clone())
            )
            return super().training_step(model, inputs, num_items_in_batch)

    def run(resume=None):
        packed = hf.for_packing(
            ds, tokenizer=tok, mlm_probability=0.3, row_length=64, batch_size=2, seed=4
        )
        args = _args(tmp_path, num_train_epochs=2, save_strategy="steps", save_steps=3)
        trainer = Recording(model=_bert(), args=args, bucketing=packed)
        trainer.seen = []
        trainer.train(resume_from_checkpoint=resume)
        assert packed.collator.collator.epoch == 1  # (the masks drawn last: epoch 1's)
        return trainer.seen, len(packed.sampler)

    whole, per_epoch = run()
    assert len(whole) == 2 * per_epoch and 3 < per_epoch + 1 < 6  # a checkpoint in epoch 1
    step = 3 * ((per_epoch + 2) // 3)  # the first checkpoint of epoch 1
    rest, _ = run(resume=str(tmp_path / f"checkpoint-{step}"))
    after = [b for b in whole if b[0] >= step]
    assert len(rest) == len(after) > 0
    for (_, ids, labels), (_, want_ids, want_labels) in zip(rest, after, strict=True):
        assert torch.equal(ids, want_ids) and torch.equal(labels, want_labels)


def test_an_eager_model_given_a_bool_mask_is_told_to_pass_a_float_one(tmp_path):
    """s32-tidyA: eager attention adds the mask to its scores, so a bool document mask (the
    default mask_dtype) hides nothing; BucketTrainer refused it but told a masked-LM user to
    give up packing ("train it on bucketed rows instead"). It names mask_dtype=torch.float32
    now, with which the model is taken."""
    tok = _tokenizer()
    ds = datasets.Dataset.from_dict({"input_ids": _documents(12, seed=11)})
    options = dict(tokenizer=tok, mlm_probability=0.15, row_length=32, batch_size=2)
    model = _encoder("bert", "eager")
    with pytest.raises(ValueError, match=r"mask_dtype=torch.float32\) \(an additive mask") as err:
        hf.BucketTrainer(model=model, args=_args(tmp_path), bucketing=hf.for_packing(ds, **options))
    assert "bucketed rows instead" not in str(err.value)
    assert "the ones before it and after it (the rows are masked-LM rows)" in str(err.value)
    packed = hf.for_packing(ds, mask_dtype=torch.float32, **options)
    hf.BucketTrainer(model=model, args=_args(tmp_path), bucketing=packed)  # taken
