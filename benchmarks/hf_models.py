"""Real (tiny) transformers models through BucketTrainer: shapes, graphs, padding, loss equality.

Run: ``.venv/bin/python benchmarks/hf_models.py [--train 256 --eval 128]`` (a few minutes on 2
cores). Writes ``benchmarks/results/hf_models.md``.

For each model (configs from scratch, hidden 16-32, one or two layers; data with the real length
distributions of tests/data: GSM8K, Europarl, LibriSpeech):

1. ``BucketTrainer`` (``BucketSeq2SeqTrainer`` for the seq2seq models) trains one epoch, evaluates
   and predicts, with the model compiled by ``torch.compile(dynamic=False)`` on a counting backend
   (each graph recorded, then run as traced; no inductor). Reported: the planned shapes of the
   training and evaluation samplers, the distinct batch shapes seen in each phase, the graphs
   compiled, and the padding (padded elements of the main input per real element).
2. The same data through ``transformers.Trainer`` with dynamic padding (each batch padded to its
   longest sample, as ``DataCollatorWithPadding`` / ``DataCollatorForSeq2Seq`` do; labels -100),
   not compiled: the distinct shapes each phase would compile, and the padding.
3. Loss equality: for every evaluation batch with filler rows (``balance=False``: the most),
   the loss ``BucketTrainer.compute_loss`` gives against the model's own loss on the batch's real
   rows alone (max abs difference), and the model's own loss on the whole padded batch (what a plain
   loop would get: filler rows included).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"  # the real length files (provenance: tests/data/SOURCES.md)
OUT = ROOT / "benchmarks" / "results" / "hf_models.md"
BOOKKEEPING = ("sample_mask", "index")


def real(name: str) -> np.ndarray:
    files = {
        "gsm8k": "gsm8k_train_qa_tokens.txt",
        "europarl": "europarl_v7_en_fr_20k_tokens.txt",
        "librispeech": "librispeech_train_clean_100_samples.txt",
    }
    return np.loadtxt(DATA / files[name], dtype=np.int64, ndmin=1)


def pick(arr: np.ndarray, n: int, seed: int) -> np.ndarray:
    return arr[np.random.default_rng(seed).choice(len(arr), size=n, replace=False)]


# -- models and data --------------------------------------------------------------------------
def bert_config(**kw: Any) -> Any:
    import transformers

    return transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
        **kw,
    )


def seq2seq_config(cls: Any, **kw: Any) -> Any:
    return cls(
        vocab_size=60,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        **kw,
    )


def models(n_train: int, n_eval: int) -> dict[str, Any]:
    """name -> (factory () -> (model, train_ds, eval_ds), bucketing, seq2seq, data note)."""
    import datasets
    import transformers

    total = n_train + n_eval

    def split(cols: dict[str, list[Any]]) -> tuple[Any, Any]:
        ds = datasets.Dataset.from_dict(cols)
        return ds.select(range(n_train)), ds.select(range(n_train, total))

    def ids(rng: Any, n: int, low: int = 3, high: int = 60) -> list[int]:
        return rng.integers(low, high, int(n)).tolist()

    def bert_sequence() -> Any:
        rng = np.random.default_rng(0)
        lens = pick(real("gsm8k")[:, 0], total, 1)
        cols = {
            "input_ids": [ids(rng, n, 2, 100) for n in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
        }
        model = transformers.BertForSequenceClassification(bert_config())
        return (model, *split(cols))

    def bert_tokens() -> Any:
        rng = np.random.default_rng(0)
        lens = pick(real("gsm8k")[:, 1], total, 2)
        rows = [ids(rng, n, 2, 100) for n in lens]
        cols = {"input_ids": rows, "labels": [[t % 5 for t in r] for r in rows]}
        model = transformers.BertForTokenClassification(bert_config(num_labels=5))
        return (model, *split(cols))

    def bart() -> Any:
        rng = np.random.default_rng(0)
        pairs = pick(real("europarl"), total, 3)
        pairs = np.clip(pairs, 1, 120)
        cols = {
            "input_ids": [ids(rng, a) for a in pairs[:, 0]],
            "labels": [ids(rng, b) for b in pairs[:, 1]],
        }
        config = seq2seq_config(transformers.BartConfig, max_position_embeddings=256)
        return (transformers.BartForConditionalGeneration(config), *split(cols))

    def wav2vec2() -> Any:
        rng = np.random.default_rng(0)
        lens = pick(real("librispeech"), total, 4) // 80  # 200 Hz "audio": 16 kHz / 80
        cols = {
            "input_values": [rng.standard_normal(n).astype(np.float32) for n in lens],
            "labels": [rng.integers(1, 12, max(1, n // 80)).tolist() for n in lens],
        }
        config = transformers.Wav2Vec2Config(
            vocab_size=12,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            conv_dim=(32, 32),
            conv_stride=(5, 4),
            conv_kernel=(10, 8),
            num_feat_extract_layers=2,
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2,
            pad_token_id=0,
            ctc_loss_reduction="mean",
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            mask_time_prob=0.0,
            layerdrop=0.0,
        )
        model = transformers.Wav2Vec2ForCTC(config)
        model.freeze_feature_encoder()
        return (model, *split(cols))

    def speech2text() -> Any:
        rng = np.random.default_rng(0)
        frames = pick(real("librispeech"), total, 5) // 1600  # 10 Hz frames of 80 filterbanks
        cols = {
            "input_features": [rng.standard_normal((n, 80)).astype(np.float32) for n in frames],
            "labels": [ids(rng, max(1, n // 8), 3, 50) for n in frames],
        }
        config = seq2seq_config(
            transformers.Speech2TextConfig,
            conv_channels=32,
            input_feat_per_channel=80,
            input_channels=1,
            max_source_positions=256,
            max_target_positions=128,
        )
        return (transformers.Speech2TextForConditionalGeneration(config), *split(cols))

    def lm_tokenizer() -> Any:
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        vocab = {**{t: i for i, t in enumerate(specials)}, **{f"w{i}": i for i in range(5, 100)}}
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
            pad_token="[PAD]",
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )

    def bert_mlm() -> Any:
        rng = np.random.default_rng(0)
        lens = pick(real("gsm8k")[:, 1], total, 6)
        cols = {"input_ids": [[2, *ids(rng, n - 1, 5, 100)] for n in np.maximum(lens, 2)]}
        return (transformers.BertForMaskedLM(bert_config()), *split(cols))

    def mlm_collator() -> Any:
        return transformers.DataCollatorForLanguageModeling(lm_tokenizer(), seed=0)

    def bert_qa() -> Any:
        rng = np.random.default_rng(0)
        lens = pick(real("gsm8k")[:, 0], total, 7)
        start = [int(rng.integers(0, n)) for n in lens]
        cols = {
            "input_ids": [ids(rng, n, 2, 100) for n in lens],
            "start_positions": start,
            "end_positions": [int(rng.integers(a, n)) for a, n in zip(start, lens, strict=True)],
        }
        return (transformers.BertForQuestionAnswering(bert_config()), *split(cols))

    return {
        "BertForMaskedLM": (
            bert_mlm,
            {"num_buckets": 4},
            False,
            "GSM8K answer tokens, DataCollatorForLanguageModeling masking",
            {"collator": mlm_collator},
        ),
        "BertForQuestionAnswering": (
            bert_qa,
            {"num_buckets": 4},
            False,
            "GSM8K question tokens, start/end positions",
            {},
        ),
        "BertForSequenceClassification": (
            bert_sequence,
            {"num_buckets": 4},
            False,
            "GSM8K question tokens",
        ),
        "BertForTokenClassification": (
            bert_tokens,
            {"num_buckets": 4, "max_tokens": 2048},
            False,
            "GSM8K answer tokens",
        ),
        "BartForConditionalGeneration": (
            bart,
            {"num_buckets": 4},
            True,
            "Europarl en→fr token pairs (targets padded per bucket)",
        ),
        "Wav2Vec2ForCTC": (
            wav2vec2,
            {"num_buckets": 4, "max_tokens": 24000},
            False,
            "LibriSpeech durations, waveforms at 200 Hz",
        ),
        "Speech2TextForConditionalGeneration": (
            speech2text,
            {"num_buckets": 4, "max_tokens": 4000},
            True,
            "LibriSpeech durations, (T, 80) frames at 10 Hz",
        ),
    }


# -- measurement ---------------------------------------------------------------------------------
class Counting:
    """A torch.compile backend: records each graph, runs it as traced (no inductor)."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs += 1
        return gm.forward


def signature(inputs: dict[str, Any]) -> tuple:
    return tuple(
        sorted(
            (k, tuple(v.shape))
            for k, v in inputs.items()
            if isinstance(v, torch.Tensor) and k not in BOOKKEEPING
        )
    )


def recording(base: Any, main: str) -> Any:
    class Recording(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.phase = "train"
            self.seen: list[tuple[str, tuple, tuple]] = []
            self.padded: dict[str, int] = {}

        def _note(self, inputs: dict[str, Any]) -> None:
            x = inputs[main]
            self.seen.append((self.phase, signature(inputs), tuple(x.shape[:2])))
            self.padded[self.phase] = self.padded.get(self.phase, 0) + x.shape[0] * x.shape[1]
            y = inputs.get("labels")
            if isinstance(y, torch.Tensor) and y.ndim == 2:
                key = f"{self.phase}-labels"
                self.padded[key] = self.padded.get(key, 0) + y.numel()

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            self._note(inputs)
            return super().training_step(model, inputs, num_items_in_batch)

        def prediction_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            self._note(inputs)
            return super().prediction_step(model, inputs, *args, **kwargs)

    return Recording


def dynamic_collator(main: str, pad_id: Any, float_input: bool) -> Any:
    """Pad each batch to its longest sample (inputs with ``pad_id``, labels with -100)."""

    def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        xs = [torch.as_tensor(s[main]) for s in samples]
        longest = max(x.shape[0] for x in xs)
        x = torch.full((len(xs), longest, *xs[0].shape[1:]), pad_id, dtype=xs[0].dtype)
        mask = torch.zeros(len(xs), longest, dtype=torch.long)
        for i, v in enumerate(xs):
            x[i, : len(v)], mask[i, : len(v)] = v, 1
        out[main], out["attention_mask"] = x, mask
        if "start_positions" in samples[0]:  # question answering: two scalar targets
            for key in ("start_positions", "end_positions"):
                out[key] = torch.as_tensor([s[key] for s in samples])
            return out
        labels = [s["labels" if "labels" in s else "label"] for s in samples]
        if isinstance(labels[0], list):
            width = max(len(v) for v in labels)
            y = torch.full((len(labels), width), -100, dtype=torch.long)
            for i, v in enumerate(labels):
                y[i, : len(v)] = torch.as_tensor(v)
            out["labels"] = y
        else:
            out["labels"] = torch.as_tensor(labels)
        return out

    return collate


def targets(trainer: Any, train: Any, main: str, bucketing: dict[str, Any]) -> Any:
    """Target (label) lengths: the per-bucket rule against bucketing them jointly."""
    from bucketloader import BucketSampler

    plan = trainer.bucketing.collator.targets
    if plan is None:  # no labels of their own lengths (classification, token tagging)
        return None
    lab = np.array([len(y) for y in train["labels"]])
    inp = np.array([len(x) for x in train[main]])
    spec = trainer.bucketing.sampler.spec
    per_cell = plan.lengths["labels"][spec.cell_of_sample]
    rule_in = spec.cells.lengths[spec.cell_of_sample][:, 0]
    opts = {k: v for k, v in bucketing.items() if k in ("num_buckets", "max_tokens")}
    if "max_tokens" not in opts:
        opts["batch_size"] = 8
    out = {
        "rule": (
            len(trainer.bucketing.sampler.shapes),
            float(rule_in.sum() / inp.sum() - 1),
            float(per_cell.sum() / lab.sum() - 1),
        ),
        "train_padded": trainer.padded.get("train-labels", 0) / lab.sum() - 1,
    }
    for key, extra in (("joint", {}), ("merged", {"max_shapes": out["rule"][0]})):
        joint = BucketSampler({main: inp, "labels": lab}, **opts, **extra)
        cells = joint.spec.cells.lengths[joint.spec.cell_of_sample]
        out[key] = (
            len(joint.shapes),
            float(cells[:, 0].sum() / inp.sum() - 1),
            float(cells[:, 1].sum() / lab.sum() - 1),
        )
    return out


def in_dataset_order(label_ids: Any, evaluation: Any, main: str) -> bool:
    """Whether ``predict``'s ``label_ids`` come back in dataset order: class labels and label
    sequences compared directly, QA positions per column, MLM targets (random masks) against
    the dataset's tokens at the masked positions."""
    cols = evaluation.column_names
    if "start_positions" in cols:
        starts, ends = label_ids
        return bool(
            np.array_equal(starts, evaluation["start_positions"])
            and np.array_equal(ends, evaluation["end_positions"])
        )
    if "labels" not in cols and "label" not in cols:  # MLM: the targets are the masked tokens
        tokens = evaluation[main]
        masked = 0
        for row, want in zip(np.asarray(label_ids), tokens, strict=True):
            where = np.flatnonzero(row != -100)
            masked += len(where)
            if not np.array_equal(row[where], np.asarray(want)[where]):
                return False
        return masked > 0
    labels = evaluation["labels" if "labels" in cols else "label"]
    if isinstance(labels[0], list):
        return bool(np.array_equal(np.asarray(label_ids)[:, 0], [r[0] for r in labels]))
    return bool(np.array_equal(label_ids, labels))


def run(name: str, spec: Any, args_dir: str) -> dict[str, Any]:
    import transformers

    from bucketloader import hf

    factory, bucketing, seq2seq, note = spec[:4]
    extra = spec[4] if len(spec) > 4 else {}
    make_collator = extra.get("collator")
    torch.manual_seed(0)
    model, train, evaluation = factory()
    main = model.main_input_name
    real_train = int(sum(len(x) for x in train[main]))
    real_eval = int(sum(len(x) for x in evaluation[main]))
    args_cls = transformers.Seq2SeqTrainingArguments if seq2seq else transformers.TrainingArguments
    common = {
        "report_to": [],
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 8,
        "num_train_epochs": 1,
        "dataloader_pin_memory": False,
    }
    # 1. ours, compiled
    counter = Counting()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model.compile(backend=counter, dynamic=False)
    base = hf.BucketSeq2SeqTrainer if seq2seq else hf.BucketTrainer
    start = time.perf_counter()
    with torch._dynamo.config.patch(recompile_limit=256):
        trainer = recording(base, main)(
            model=model,
            args=args_cls(output_dir=args_dir, **common),
            train_dataset=train,
            eval_dataset=evaluation,
            bucketing=bucketing,
            data_collator=make_collator() if make_collator else None,
        )
        trainer.train()
        trainer.phase = "eval"
        metrics = trainer.evaluate()
        trainer.phase = "predict"
        pred = trainer.predict(evaluation)
    seconds = time.perf_counter() - start
    ordered = in_dataset_order(pred.label_ids, evaluation, main)
    logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
    used = {(p == "train", sig) for p, sig, _ in trainer.seen}
    ours = {
        "planned_train": len(trainer.bucketing.sampler.shapes),
        "planned_eval": len(trainer.eval_bucketing.sampler.shapes),
        "seen": {
            p: len({s for q, _, s in trainer.seen if q == p}) for p in ("train", "eval", "predict")
        },
        "in_plan": all(
            s
            in (
                trainer.bucketing.sampler.shapes
                if p == "train"
                else trainer.eval_bucketing.sampler.shapes
            )
            for p, _, s in trainer.seen
        ),
        "graphs": counter.graphs,
        "signatures": len(used),
        "breaks": sum(torch._dynamo.utils.counters["graph_break"].values()),
        "padding": {
            "train": trainer.padded["train"] / real_train - 1,
            "eval": trainer.padded["eval"] / real_eval - 1,
            "predict": trainer.padded["predict"] / real_eval - 1,
        },
        "rows": len(logits),
        "ordered": ordered,
        "eval_loss": metrics["eval_loss"],
        "seconds": seconds,
    }
    # 3. loss equality on padded eval batches (eager: the compiled wrapper is left aside)
    worst, naive, batches = 0.0, 0.0, 0
    checker = base(  # unbalanced evaluation batches: the most filler rows
        model=model,
        args=args_cls(output_dir=args_dir, **common),
        eval_dataset=evaluation,
        bucketing=bucketing,
        eval_bucketing={"balance": False},
        data_collator=make_collator() if make_collator else None,
    )
    with torch.compiler.set_stance("force_eager"), torch.no_grad():
        model.eval()
        for batch in checker.get_eval_dataloader():
            sm = batch["sample_mask"]
            n = int(sm.sum())
            if n in (0, len(sm)):
                continue
            batches += 1
            loss = checker.compute_loss(model, dict(batch))
            inputs = {k: v for k, v in batch.items() if k not in BOOKKEEPING}
            alone = model(**{k: v[:n] for k, v in inputs.items()}).loss
            whole = model(**inputs).loss
            worst = max(worst, abs(float(loss - alone)))
            naive = max(naive, abs(float(whole - alone)))
    ours["loss"] = {"batches": batches, "max_abs_diff": worst, "naive_max_abs_diff": naive}
    ours["targets"] = targets(trainer, train, main, bucketing)
    # 2. transformers.Trainer with dynamic padding, eager
    torch.manual_seed(0)
    model2 = factory()[0]
    pad = 0.0 if main != "input_ids" else model2.config.pad_token_id
    baseline = recording(transformers.Trainer, main)(
        model=model2,
        args=args_cls(output_dir=args_dir, remove_unused_columns=False, **common),
        train_dataset=train,
        eval_dataset=evaluation,
        data_collator=make_collator()  # HF's own: pads each batch to its longest, then masks
        if make_collator
        else dynamic_collator(main, pad, main != "input_ids"),
    )
    baseline.train()
    baseline.phase = "eval"
    baseline.evaluate()
    baseline.phase = "predict"
    baseline.predict(evaluation)
    used2 = {(p == "train", sig) for p, sig, _ in baseline.seen}
    lists = "labels" in train.column_names and isinstance(train[0]["labels"], list)
    lab_total = sum(len(y) for y in train["labels"]) if lists else 0
    dyn = {
        "label_padding": baseline.padded.get("train-labels", 0) / lab_total - 1
        if lab_total
        else None,
        "seen": {
            p: len({s for q, _, s in baseline.seen if q == p}) for p in ("train", "eval", "predict")
        },
        "signatures": len(used2),
        "padding": {
            "train": baseline.padded["train"] / real_train - 1,
            "eval": baseline.padded["eval"] / real_eval - 1,
            "predict": baseline.padded["predict"] / real_eval - 1,
        },
    }
    return {"name": name, "note": note, "ours": ours, "dynamic": dyn}


def exact(ours: dict[str, Any]) -> bool:
    """One graph per (mode, signature) seen, and every shape seen planned."""
    return bool(ours["graphs"] == ours["signatures"] and ours["in_plan"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=256)
    parser.add_argument("--eval", type=int, default=128)
    opts = parser.parse_args()
    import tempfile

    import datasets
    import transformers

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in models(opts.train, opts.eval).items():
            print(f"{name} ...", flush=True)
            results.append(run(name, spec, tmp))
    total = time.perf_counter() - start
    load_end = os.getloadavg()[0]
    lines = [
        "# Real models through BucketTrainer: shapes, graphs, padding, loss equality",
        "",
        f"Command: `.venv/bin/python benchmarks/hf_models.py --train {opts.train} --eval "
        f"{opts.eval}` ({total:.0f} s).",
        "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (load average {load_start:.1f} at start, {load_end:.1f} at the "
        f"end: a shared machine), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, datasets {datasets.__version__}; 1 thread.",
        "",
        f"Each model: config from scratch (hidden 32, 2 layers), {opts.train} training and "
        f"{opts.eval} evaluation samples whose lengths are drawn from the real distributions "
        "in tests/data, batch size 8 (or `max_tokens`), one epoch, then `evaluate()` and "
        "`predict()` on the evaluation set. bucketloader: `BucketTrainer` "
        "(`BucketSeq2SeqTrainer` for the seq2seq models), the model compiled with "
        "`torch.compile(dynamic=False)` on a counting backend. Reference: "
        "`transformers.Trainer` with dynamic padding (each batch padded to its longest sample, as "
        "`DataCollatorWithPadding` / `DataCollatorForSeq2Seq` do; for the masked LM, "
        "`DataCollatorForLanguageModeling` itself, which BucketTrainer also takes and applies to "
        "each planned batch), eager: its shapes are what it would compile. Padding = padded "
        "elements of the main input per real element.",
        "",
        "## Shapes and graphs",
        "",
        "| model (data) | planned train / eval | seen train / eval / predict | graphs compiled "
        "(graph breaks) | dynamic padding: shapes train / eval / predict, would compile |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        o, d = r["ours"], r["dynamic"]
        lines.append(
            f"| {r['name']} ({r['note']}) | {o['planned_train']} / {o['planned_eval']} | "
            f"{o['seen']['train']} / {o['seen']['eval']} / {o['seen']['predict']} | "
            f"**{o['graphs']}** ({o['breaks']}) | {d['seen']['train']} / {d['seen']['eval']} / "
            f"{d['seen']['predict']}, {d['signatures']} |"
        )
    lines += [
        "",
        "Graphs compiled equal the distinct (mode, batch signature) pairs seen in every run "
        "(training and inference are separate graphs; `predict` reuses `evaluate`'s), and every "
        "shape seen is one the samplers listed before the first batch: "
        + ", ".join(f"{r['name']}: {'yes' if exact(r['ours']) else 'NO'}" for r in results)
        + ".",
        "",
        "## Padding",
        "",
        "| model | bucketloader train / eval / predict | dynamic padding train / eval / predict |",
        "|---|---:|---:|",
    ]
    for r in results:
        o, d = r["ours"]["padding"], r["dynamic"]["padding"]
        lines.append(
            f"| {r['name']} | {o['train']:.1%} / {o['eval']:.1%} / {o['predict']:.1%} | "
            f"{d['train']:.1%} / {d['eval']:.1%} / {d['predict']:.1%} |"
        )
    lines += [
        "",
        "bucketloader's padding includes the filler rows that keep each planned shape (copies "
        "of real rows, masked) and, for evaluation, the batches of ranks without a sample.",
    ]
    lines += [
        "",
        "## Targets: padded per bucket, not bucketed jointly",
        "",
        "Decoder and CTC labels have lengths of their own. By default bucketloader pads them to "
        "the longest target of each input bucket (NOTE [ Target columns ] in "
        "bucketloader/hf/bucketing.py): one shape per bucket, the input's token budget unchanged. "
        "Bucketing them as a second input (`column=[main, 'labels']`, the same `num_buckets` per "
        "input) gives joint cells, and `max_shapes=` merges those back to a shape budget. "
        "Columns: planned shapes, then the input's and the target's padding at the boundaries "
        "over the training set (filler rows aside):",
        "",
        "| model | default: per-bucket targets | joint cells | joint, `max_shapes` = the same "
        "count | training batches' target padding: bucketloader / dynamic padding |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        t = r["ours"]["targets"]
        if t is None:
            continue
        cols = [
            f"{n} shapes, {a:.1%} / {b:.1%}" for n, a, b in (t["rule"], t["joint"], t["merged"])
        ]
        lines.append(
            f"| {r['name']} | {' | '.join(cols)} | {t['train_padded']:.1%} / "
            f"{r['dynamic']['label_padding']:.1%} |"
        )
    lines += [
        "",
        "Where targets vary widely for one input length (translation), the per-bucket maximum "
        "pads targets most; joint cells merged to the same shape count trade input padding for "
        "target padding (`bucketing={'column': [main, 'labels'], 'max_shapes': k}`).",
    ]
    lines += [
        "",
        "## Loss of padded batches against their real rows",
        "",
        "| model | padded eval batches | max abs diff, `BucketTrainer.compute_loss` vs real rows "
        "alone | max abs diff, the model's own loss on the padded batch vs real rows alone |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        loss = r["ours"]["loss"]
        lines.append(
            f"| {r['name']} | {loss['batches']} | {loss['max_abs_diff']:.2e} | "
            f"{loss['naive_max_abs_diff']:.2e} |"
        )
    lines += [
        "",
        "Filler rows are copies of real rows with labels -100: the cross-entropy heads ignore "
        "them by themselves (the model's own loss is already exact); CTC does not (an empty "
        "target still costs -log P(all blanks)), so `BucketTrainer` computes the CTC loss per row "
        "and averages it over real rows (NOTE [ Filler rows and the loss, per head ] in "
        "bucketloader/hf/loss.py). Question answering ignores start/end positions at the "
        "sequence length, which filler rows get (-100 would be clamped to position 0). The real "
        "rows alone are the padded batch's first rows (the "
        "same per-row computation), so any difference would be float32 rounding.",
        "",
        "## Evaluation in dataset order",
        "",
        "| model | rows returned by predict | label_ids in dataset order | eval_loss | run (s) |",
        "|---|---:|---|---:|---:|",
    ]
    for r in results:
        o = r["ours"]
        lines.append(
            f"| {r['name']} | {o['rows']} of {opts.eval} | {'yes' if o['ordered'] else 'NO'} | "
            f"{o['eval_loss']:.4f} | {o['seconds']:.1f} |"
        )
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
