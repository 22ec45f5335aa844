"""Issue 22's first-day traps, replayed: the old path and the new one, side by side in one run.

* resume behind workers: 3,000 samples (GSM8K question lengths), ``num_workers=2``, state after
  17 batches of epoch 1, restart, finish the epoch: samples seen, duplicates. Old path: a plain
  ``DataLoader`` and ``sampler.state_dict()`` (the README's call); new: ``sampler.dataloader`` and
  torchdata's ``StatefulDataLoader``; ``state_dict(batches_consumed=17)`` as the reference.
* a second pass without ``set_epoch``: batches in the same position equal to the first pass.
* ``TrainingArguments(torch_compile=True)``: graphs compiled for the training shapes used, with
  accelerate's dynamic-shape compile (what ``Trainer`` does; replayed as ``model.compile()``) and
  with BucketTrainer's static compile; then BucketTrainer's recompile limit and ``precompile()``
  (graphs compiled during training and evaluation after it). Tiny BERT from a config,
  ``backend="eager"``: graphs are counted, not code-generated, so the counts do not depend on the
  machine.

Run: ``.venv/bin/python benchmarks/first_day.py`` (writes ``benchmarks/results/first_day.md``;
about a minute on a busy 2-core machine).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import BucketSampler  # noqa: E402

N, STOP, EPOCH = 3000, 17, 1
LENGTHS = np.loadtxt(ROOT / "tests/data/gsm8k_train_qa_tokens.txt", dtype=np.int64)[:N, 0]
OPTIONS = dict(num_buckets=8, batch_size=32, seed=0)


def collate(samples):
    return samples


def _run(make, state_of, load):
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    sampler.set_epoch(EPOCH)
    loader = make(sampler)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step, batch in enumerate(loader):
            seen += list(batch)
            if step + 1 == STOP:
                state = json.loads(json.dumps(state_of(loader, sampler)))
                break
    warned = any("ahead of your loop" in str(w.message) for w in caught)
    fresh = BucketSampler(LENGTHS, **OPTIONS)
    loader2 = make(fresh)
    load(loader2, fresh, state)
    for batch in loader2:
        seen += list(batch)
    return len(set(seen)), len(seen) - len(set(seen)), warned


def resume_rows():
    data = list(range(N))
    plain = lambda s: DataLoader(data, batch_sampler=s, num_workers=2, collate_fn=collate)  # noqa: E731
    ours = lambda s: s.dataloader(data, num_workers=2, collate_fn=collate)  # noqa: E731
    load_sampler = lambda loader, s, state: s.load_state_dict(state)  # noqa: E731
    rows = [
        ("DataLoader(num_workers=2) + sampler.state_dict() (old README path)", plain,
         lambda loader, s: s.state_dict(), load_sampler),
        ("DataLoader(num_workers=2) + state_dict(batches_consumed=17)", plain,
         lambda loader, s: s.state_dict(batches_consumed=STOP), load_sampler),
        ("sampler.dataloader(num_workers=2) + sampler.state_dict()", ours,
         lambda loader, s: s.state_dict(), load_sampler),
    ]  # fmt: skip
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader

        rows.append(
            (
                "torchdata StatefulDataLoader(num_workers=2) + loader.state_dict()",
                lambda s: StatefulDataLoader(
                    data, batch_sampler=s, num_workers=2, collate_fn=collate
                ),
                lambda loader, s: loader.state_dict(),
                lambda loader, s, state: loader.load_state_dict(state),
            )
        )
    except ImportError:
        pass
    out = []
    for name, make, state_of, load in rows:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seen, dup, warned = _run(make, state_of, load)
        out.append((name, seen, dup, warned))
    return out


def second_pass():
    sampler = BucketSampler(LENGTHS, **OPTIONS)
    first, second = list(sampler), list(sampler)
    same = sum(a == b for a, b in zip(first, second, strict=True))
    return same, len(first), sampler.epoch


def compile_rows():
    import datasets
    import transformers

    from bucketloader import hf

    lens = np.maximum(LENGTHS[:64] // 2, 2)
    rng = np.random.default_rng(0)
    ds = datasets.Dataset.from_dict(
        {
            "input_ids": [rng.integers(2, 100, k).tolist() for k in lens],
            "label": (lens > np.median(lens)).astype(int).tolist(),
        }
    )

    def model():
        torch.manual_seed(0)
        cfg = transformers.BertConfig(
            vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=256, pad_token_id=0,
        )  # fmt: skip
        return transformers.BertForSequenceClassification(cfg)

    def args(tmp, **kw):
        base = dict(
            output_dir=tmp, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
            per_device_train_batch_size=8, per_device_eval_batch_size=8,
            dataloader_pin_memory=False, max_steps=8, seed=1,
        )  # fmt: skip
        return transformers.TrainingArguments(**{**base, **kw})

    def graphs():
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    import torch._dynamo.config as config

    out = {}
    bucketing = {"num_buckets": 8, "pad_token_id": 0}
    with tempfile.TemporaryDirectory() as tmp:
        # the Trainer path: accelerate compiles with dynamic=None
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        m = model()
        used = set()
        m.register_forward_pre_hook(
            lambda mod, a, kw: used.add(tuple(kw["input_ids"].shape)), with_kwargs=True
        )
        m.compile(backend="eager")  # what torch.compile(dynamic=None) does
        with config.patch(recompile_limit=8):
            trainer = hf.BucketTrainer(model=m, args=args(tmp), train_dataset=ds,
                                       bucketing=bucketing)  # fmt: skip
            trainer.train()
        out["dynamic"] = (graphs(), len(used))
        # BucketTrainer with torch_compile=True
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        m = model()
        used = set()
        m.register_forward_pre_hook(
            lambda mod, a, kw: used.add(tuple(kw["input_ids"].shape)), with_kwargs=True
        )
        with config.patch(recompile_limit=8):
            trainer = hf.BucketTrainer(
                model=m, args=args(tmp, torch_compile=True, torch_compile_backend="eager"),
                train_dataset=ds, eval_dataset=ds, bucketing=bucketing,
            )  # fmt: skip
            trainer.get_train_dataloader()
            limit = int(config.recompile_limit)
            planned = len(trainer.bucketing.sampler.shapes) + len(
                trainer._eval_cache["eval"][1].sampler.shapes
            )
            t0 = time.perf_counter()
            reports = trainer.precompile()
            seconds = time.perf_counter() - t0
            before = graphs()
            used.clear()
            trainer.train()
            trained = len(used)
            trainer.evaluate()
            after = graphs()
        out["static"] = (before, planned, limit, after - before, seconds, trained)
        out["precompiled"] = sum(len(r.rows) for r in reports)
    return out


def main() -> None:
    t0 = time.perf_counter()
    resume = resume_rows()
    same, total, epoch = second_pass()
    comp = compile_rows()
    lines = [
        "# First-day traps (issue 22): the old path and the new one",
        "",
        f"`python benchmarks/first_day.py` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}; {time.perf_counter() - t0:.0f} s.",
        "",
        f"## Resume behind workers ({N:,} samples, num_workers=2, state after {STOP} batches)",
        "",
        "| path | samples seen after the restart | duplicates | warned |",
        "|---|---:|---:|---|",
    ]
    for name, seen, dup, warned in resume:
        lines.append(f"| {name} | {seen:,} of {N:,} | {dup} | {'yes' if warned else 'no'} |")
    lines += [
        "",
        "## A second pass without set_epoch",
        "",
        f"Batches equal to the first pass at the same position: {same} of {total} "
        f"(the pass ran epoch {epoch}; before issue 22 it repeated epoch 0: {total} of {total}).",
        "",
        "## TrainingArguments(torch_compile=True), tiny BERT, backend='eager', 8 buckets",
        "",
        "| path | graphs | shapes train() used (8 steps) |",
        "|---|---:|---:|",
        f"| dynamic-shape compile (accelerate's, before) | {comp['dynamic'][0]} | "
        f"{comp['dynamic'][1]} |",
        f"| BucketTrainer static compile + precompile() | {comp['static'][0]} "
        f"(one per planned shape: {comp['static'][1]} train + eval) | {comp['static'][5]} |",
        "",
        f"- recompile limit after planning: {comp['static'][2]} (dynamo's default 8; "
        f"{comp['static'][1]} planned train + eval shapes)",
        f"- precompile(): {comp['precompiled']} shapes in {comp['static'][4]:.1f} s; graphs "
        f"compiled during train() + evaluate() after it: {comp['static'][3]}",
        "",
    ]
    out = ROOT / "benchmarks/results/first_day.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
