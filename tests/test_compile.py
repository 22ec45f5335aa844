"""precompile: every planned shape compiled once before training, training then compiles nothing,
the user's state untouched, artifacts keyed and shared across runs and ranks.

Compiles use a counting backend (dynamo traces, the graph runs eagerly) or ``aot_eager``; one small
test uses inductor for the warm start, in two processes (``python test_compile.py inductor ...``).
The two-rank test runs this file as a worker script (``python test_compile.py worker ...``) in
one process per rank with a hard timeout (conftest's ``run_ranks``).
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import random
import re
import sys
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch
import torch._dynamo
from conftest import free_port, run_ranks
from torch import nn
from torch.utils.data import DataLoader

from bucketloader import BucketIterable, BucketSampler, EvalSampler
from bucketloader.analysis import recommend_num_buckets
from bucketloader.collate import Field
from bucketloader.compile import (
    CompileCache,
    CompileCacheWarning,
    ExampleBatches,
    _key,
    precompile,
)
from bucketloader.compile._key import batch_signature
from bucketloader.sampler import GroupedDataset

TIMEOUT_S = 150
VOCAB = 50


def _lengths(n: int = 400) -> np.ndarray:
    from conftest import load_real

    return np.asarray(load_real("multi30k")[:n, 0])


class Counting:
    """A torch.compile backend that counts graphs and runs them as traced."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs += 1
        return gm.forward


class Net(nn.Module):
    """Embedding, BatchNorm (running stats), dropout (RNG), masked mean, classifier."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, width)
        self.bn = nn.BatchNorm1d(width)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(width, 3)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.emb(ids).transpose(1, 2)).transpose(1, 2)
        h = self.drop(h) * mask[..., None]
        return self.out(h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1))


def _dataset(lengths: np.ndarray) -> list[dict]:
    return [
        {"input_ids": torch.arange(int(n)) % VOCAB, "label": i % 3} for i, n in enumerate(lengths)
    ]


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    # precompile points TORCHINDUCTOR_CACHE_DIR at its cache for the process: undo it after
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    # precompile raises dynamo's recompile limits for the process (NOTE [ The recompile limit
    # over several plans ]): put them back, so that no later test file starts above the default
    import torch._dynamo.config as config

    limits = {n: getattr(config, n) for n in ("recompile_limit", "accumulated_recompile_limit")}
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    for name, value in limits.items():
        setattr(config, name, value)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


# -- the promise: every shape once, then nothing ------------------------------------------------
def test_every_planned_shape_compiles_once_and_training_compiles_nothing(tmp_path):
    lengths = _lengths()
    data = _dataset(lengths)
    sampler = BucketSampler(lengths, num_buckets=6, batch_size=16, seed=0)
    model, backend = Net(), Counting()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    compiled = torch.compile(model, backend=backend, dynamic=False)

    def step(batch):  # forward + backward compiled per shape; the optimizer runs eagerly
        loss = nn.functional.cross_entropy(
            compiled(batch["input_ids"], batch["attention_mask"]), batch["label"]
        )
        loss.backward()

    report = precompile(
        step, sampler, example=data, restore=[model, opt], cache=tmp_path, progress=False
    )
    assert report.shapes == sampler.shapes and len(sampler.shapes) == 6
    assert [r.graphs for r in report.rows] == [1] * 6, report
    assert backend.graphs == 6 and {r.cache for r in report.rows} == {"traced"}
    assert report.restored == ("Net (module)", "AdamW (optimizer)")
    assert "| (16, " in str(report) and report.recompile_limit >= 8

    loader = DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collator())
    before, seen = _graphs(), set()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for batch in loader:
            seen.add(tuple(batch["input_ids"].shape))
            step(batch)
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert seen == set(sampler.shapes)  # training met every planned shape ...
    assert _graphs() == before and backend.graphs == 6  # ... and compiled none of them


def test_more_shapes_than_the_default_recompile_limit(tmp_path):
    lengths = _lengths()
    sampler = BucketSampler(lengths, num_buckets=12, batch_size=8, seed=0)
    assert len(sampler.shapes) > 8  # past dynamo's default limit, which would fall back to eager
    backend = Counting()
    step = torch.compile(lambda b: (b["inputs"] * 2).sum(), backend=backend, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=8):
        report = precompile(step, sampler, example=[1, 2, 3], cache=False, progress=False)
        assert backend.graphs == len(sampler.shapes)
        assert torch._dynamo.config.recompile_limit >= len(sampler.shapes)
    assert report.key is None and report.cache_dir is None


def test_a_second_plan_on_the_same_model_stays_under_the_recompile_limit():
    """s22-compile: precompiling evaluation after training raised the limit to the evaluation's
    own count, so the model's frame, holding the training graphs too, ran the evaluation shapes
    past the limit eagerly (graphs [1, 1, 1, 0, 0] here), in precompile and ever after."""
    lengths = _lengths(200)
    train = BucketSampler(lengths, num_buckets=5, batch_size=16, seed=0)
    evaluation = EvalSampler(lengths, num_buckets=5, batch_size=8)
    backend = Counting()
    compiled = torch.compile(lambda ids: ids * 2, backend=backend, dynamic=False)
    data = _dataset(lengths)
    with torch._dynamo.config.patch(recompile_limit=8):
        precompile(lambda b: compiled(b["input_ids"]), train, example=data, cache=False,
                   progress=False)  # fmt: skip
        report = precompile(lambda b: compiled(b["input_ids"] + 1), evaluation, example=data,
                            cache=False, progress=False)  # fmt: skip
        assert [r.graphs for r in report.rows] == [1] * 5 and backend.graphs == 10
        assert report.recompile_limit >= 12


# -- the user's state ---------------------------------------------------------------------------
def _full_state(model, opt, sched):
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        copy.deepcopy(opt.state_dict()),
        copy.deepcopy(sched.state_dict()),
        [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        [m.training for m in model.modules()],
    )


def _assert_same_state(a, b):
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert torch.equal(a[0][k], b[0][k]), k  # parameters and buffers (BatchNorm stats)
    sa, sb = a[1]["state"], b[1]["state"]
    assert sa.keys() == sb.keys()
    for p in sa:
        assert sa[p].keys() == sb[p].keys()
        for k in sa[p]:
            assert torch.equal(torch.as_tensor(sa[p][k]), torch.as_tensor(sb[p][k])), (p, k)
    assert a[1]["param_groups"] == b[1]["param_groups"]
    assert a[2] == b[2]
    for ga, gb in zip(a[3], b[3], strict=True):
        assert (ga is None and gb is None) or torch.equal(ga, gb)
    assert a[4] == b[4]


@pytest.mark.parametrize("resumed", [False, True])
def test_precompile_leaves_model_optimizer_and_rngs_bit_identical(tmp_path, resumed):
    lengths = _lengths(300)
    data = _dataset(lengths)
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=16, seed=0)
    torch.manual_seed(0)
    model, backend = Net(), Counting()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000)

    @torch.compile(backend=backend, dynamic=False)
    def train_step(batch):  # the whole step compiled: forward, backward, optimizer
        loss = nn.functional.cross_entropy(
            model(batch["input_ids"], batch["attention_mask"]), batch["label"]
        )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    def step(batch):  # the loop's step: the compiled part, then the scheduler, eagerly
        train_step(batch)
        sched.step()

    loader = DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collator())
    if resumed:  # a resumed run: optimizer state and gradients exist before precompile
        step(next(iter(loader)))
        for p in model.parameters():
            p.grad = torch.randn_like(p)
    before = _full_state(model, opt, sched)
    grads = [p.grad for p in model.parameters()]
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)  # noqa: NPY002 (the global generators precompile must put back)
    expected = (torch.rand(3), random.random(), np.random.rand())  # noqa: NPY002
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)  # noqa: NPY002

    report = precompile(step, sampler, example=data[0], cache=tmp_path, progress=False)
    assert torch.equal(torch.rand(3), expected[0])  # dropout drew numbers; they are put back
    assert (random.random(), np.random.rand()) == expected[1:]  # noqa: NPY002
    assert set(report.restored) == {"Net (module)", "AdamW (optimizer)", "StepLR (state_dict)"}
    _assert_same_state(before, _full_state(model, opt, sched))
    assert all(p.grad is g for p, g in zip(model.parameters(), grads, strict=True))
    assert model.training

    for p in model.parameters():
        p.grad = None
    graphs = backend.graphs
    for batch in loader:
        step(batch)
    # NOTE [ A compiled optimizer step and a fresh optimizer ]: a fresh optimizer's graph is
    # traced again once (its state did not exist); per-shape graphs never are
    assert backend.graphs - graphs == (0 if resumed else 1)


def _generators() -> dict:
    return {
        "torch": torch.Generator().manual_seed(0),
        "numpy": np.random.default_rng(0),
        "legacy": np.random.RandomState(0),
        "python": random.Random(0),
    }


def _draw(gens: dict) -> list:
    return [
        torch.rand(2, generator=gens["torch"]).tolist(),
        gens["numpy"].random(),
        gens["legacy"].rand(),
        gens["python"].random(),
    ]


def test_the_generators_a_step_draws_from_are_put_back():
    """s22-compile: the walk skipped a step's own generators as library objects, so precompile
    left each one advanced by a draw per planned shape (a static subsampler's generator=, an
    augmentation's numpy Generator)."""
    sampler = BucketSampler([3, 5, 8, 8, 12, 20], num_buckets=3, batch_size=2)
    model = nn.Embedding(VOCAB, 4)
    compiled = torch.compile(model, backend="eager", dynamic=False)
    gens, twins = _generators(), _generators()

    def step(batch):
        scale = sum(_draw(gens)[1:])
        noise = torch.rand(batch["inputs"].shape, generator=gens["torch"]) * scale
        (compiled(batch["inputs"]) * noise[..., None]).sum().backward()

    report = precompile(step, sampler, example=[1, 2, 3], cache=False, progress=False)
    kinds = {"Generator (random state)", "RandomState (random state)", "Random (random state)"}
    assert kinds <= set(report.restored), report.restored
    assert _draw(gens) == _draw(twins)
    restore = [model, *gens.values()]  # restore= takes generators too
    precompile(step, sampler, example=[1, 2, 3], restore=restore, cache=False, progress=False)
    assert _draw(gens) == _draw(twins)


def test_precompile_on_eval_mode_and_a_failing_step_restores_too():
    lengths = _lengths(200)
    sampler = BucketSampler(lengths, num_buckets=3, batch_size=8, seed=0)
    model = Net().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def step(batch):
        model.train()  # the step changes modes and values, then fails on the last shape
        model(batch["input_ids"], batch["attention_mask"])
        if batch["input_ids"].shape == tuple(sampler.shapes[-1]):
            raise RuntimeError("boom")

    compiled = torch.compile(step, backend=Counting(), dynamic=False)
    with pytest.raises(RuntimeError, match="boom") as info:
        precompile(compiled, sampler, example=_dataset(lengths)[0], cache=False, progress=False)
    assert any("synthetic batch of shape" in n for n in getattr(info.value, "__notes__", []))
    assert not model.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("cached", [True, False])
def test_a_compiler_failure_at_precompile_points_at_the_inductor_cache(tmp_path, cached):
    # s30 "Left": every .so of an inductor cache replaced by junk made g++ fail ("'at::vec' has
    # not been declared") under a torn precompiled header, and the note said only "step failed
    # on its synthetic batch", which pointed away from the cache. A C++ compile error (as
    # inductor raises it) now names the cache directory to start afresh from; others do not.
    from torch._inductor.exc import CppCompileError, InductorError

    lengths = _lengths(60)
    sampler = BucketSampler(lengths, num_buckets=2, batch_size=8, seed=0)
    failure = {"error": None}

    def step(batch):
        if failure["error"] is not None:
            raise failure["error"]
        return batch["input_ids"].sum()

    cache = CompileCache(tmp_path / "cache") if cached else False
    gcc = CppCompileError(["g++", "x.cpp"], "error: 'at::vec' has not been declared")
    for error, hinted in ((InductorError(gcc, None), True), (RuntimeError("boom"), False)):
        failure["error"] = error
        with pytest.raises(type(error)) as info:
            precompile(step, sampler, example=_dataset(lengths)[0], cache=cache, progress=False)
        (note,) = [n for n in info.value.__notes__ if "synthetic batch of shape" in n]
        assert ("the C++ compiler failed, which a damaged inductor cache" in note) == hinted
        if hinted and cached:  # (the headers are torch's, outside any cache directory)
            assert "run it again with a fresh CompileCache directory, after removing /" in note
            assert note.endswith("precompiled_headers (torch's precompiled headers, outside any "
                                 "cache directory))")  # fmt: skip
        if hinted and not cached:
            assert "CompileCache" not in note and "run it again after removing /" in note


def test_each_shape_starts_from_the_snapshotted_grads():
    # NOTE [ Each shape from the same grads ]: a forward+backward step must not accumulate into
    # the previous shape's gradients (under CUDA graphs those are overwritten graph outputs)
    lengths = _lengths(200)
    sampler = BucketSampler(lengths, num_buckets=3, batch_size=8, seed=0)
    model = Net()
    seen = []

    def step(batch):
        seen.append([p.grad is None for p in model.parameters()])
        out = model(batch["input_ids"], batch["attention_mask"])
        torch.nn.functional.cross_entropy(out, batch["label"]).backward()

    compiled = torch.compile(step, backend=Counting(), dynamic=False)
    kw = {"example": _dataset(lengths)[0], "cache": False, "progress": False, "restore": [model]}
    precompile(compiled, sampler, **kw)  # (restore named: the records are not restored)
    assert len(seen) == len(sampler.shapes) == 3
    assert all(all(entry) for entry in seen)  # every shape: no gradient left by the one before
    assert all(p.grad is None for p in model.parameters())
    # a model with gradients (mid-accumulation): every shape sees those values, restored after
    model.out.weight.grad = torch.full_like(model.out.weight, 0.5)
    grad = model.out.weight.grad
    firsts = []

    def step2(batch):
        firsts.append(float(model.out.weight.grad.sum()))
        out = model(batch["input_ids"], batch["attention_mask"])
        torch.nn.functional.cross_entropy(out, batch["label"]).backward()

    torch._dynamo.reset()
    compiled = torch.compile(step2, backend=Counting(), dynamic=False)
    precompile(compiled, sampler, **kw)
    assert firsts == [0.5 * grad.numel()] * 3
    assert model.out.weight.grad is grad and bool((grad == 0.5).all())


# -- batches built like real ones ---------------------------------------------------------------
def _signatures(loader) -> dict:
    out = {}
    for batch in loader:
        out.setdefault(tuple(batch["attention_mask"].shape), batch_signature(batch))
    return out


def test_example_batches_have_the_structure_of_real_batches():
    lengths = _lengths(300)
    data = [
        {
            "input_ids": np.arange(int(n), dtype=np.int32),
            "feats": torch.randn(int(n), 5),
            "speaker": torch.tensor([i % 7, 1]),
            "text": f"utterance {i}",
        }
        for i, n in enumerate(lengths)
    ]
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=8, last_batch="keep", seed=0)
    collate = sampler.collator(
        fields={"input_ids": Field(), "feats": Field(dims=0)}, mask_dtype=torch.long
    )
    real = _signatures(DataLoader(data, batch_sampler=sampler, collate_fn=collate))
    source = ExampleBatches(sampler, data, collate_fn=collate)
    assert sorted(real) == source.shapes  # "keep" lists partial shapes too: all are made
    for shape in source.shapes:
        assert batch_signature(source.make_batch(shape)) == real[shape], shape


def test_an_eval_sampler_precompiles_and_evaluation_compiles_nothing():
    """s22-compile: an EvalSampler's collator reads which rows are real from the samples the
    dataloader gives it; precompile gave it a plain list, so every EvalSampler was refused (with
    "is example a sample of the dataset this plan was built on?")."""
    lengths = _lengths(120)
    data = _dataset(lengths)
    sampler = EvalSampler(lengths, num_buckets=3, batch_size=16)
    model, backend = Net(), Counting()
    compiled = torch.compile(model.eval(), backend=backend, dynamic=False)

    def step(batch):
        with torch.no_grad():
            return compiled(batch["input_ids"], batch["attention_mask"])

    report = precompile(step, sampler, example=data, restore=[model], cache=False, progress=False)
    assert report.shapes == sampler.shapes and backend.graphs == len(sampler.shapes) == 3
    real = _signatures(sampler.dataloader(data))
    for shape in report.shapes:  # the same fields (sample_mask, index), dtypes and sizes
        assert batch_signature(ExampleBatches(sampler, data).make_batch(shape)) == real[shape]
    for batch in sampler.dataloader(data):
        step(batch)
    assert backend.graphs == 3


def test_example_batches_for_two_inputs_groups_and_streams():
    rng = np.random.default_rng(0)
    src = _lengths(300)
    tgt = np.maximum(src + rng.integers(-3, 4, src.size), 1)
    pairs = [{"src": [1] * int(s), "tgt": [2] * int(t)} for s, t in zip(src, tgt, strict=True)]
    sampler = BucketSampler({"src": src, "tgt": tgt}, num_buckets=3, max_tokens=256, seed=0)

    class ModelInputs:  # a wrapper around the PadCollator, as bucketloader.hf's
        def __init__(self, collator):
            self.collator = collator

        def __call__(self, samples):
            return {k: v for k, v in self.collator(samples).items() if k != "lengths"}

    for collate in (None, ModelInputs(sampler.collator())):
        source = ExampleBatches(sampler, pairs[5], collate_fn=collate)
        for shape in source.shapes:
            batch = source.make_batch(shape)
            assert tuple(batch["src"].shape) == (shape[0], shape[1])
            assert tuple(batch["tgt"].shape) == (shape[0], shape[2])
            assert ("lengths" in batch) == (collate is None)

    # per-dataset groups whose samples differ in structure: one batch per structure
    a = [{"x": torch.ones(int(n))} for n in src[:150]]
    b = [{"x": torch.ones(int(n)), "extra": 1.5} for n in src[150:]]
    data = GroupedDataset([a, b])
    grouped = BucketSampler(src, groups=data.groups, num_buckets=2, batch_size=4, seed=0)
    gsource = ExampleBatches(grouped, data)
    shared = [s for s in gsource.shapes if len(gsource.make_batches(s)) == 2]
    made = {tuple(sorted(m)) for s in gsource.shapes for m in gsource.make_batches(s)}
    assert {
        ("attention_mask", "dataset", "lengths", "sample_mask", "x"),
        ("attention_mask", "dataset", "extra", "lengths", "sample_mask", "x"),
    } == made
    assert all(len(gsource.make_batches(s)) in (1, 2) for s in gsource.shapes)
    assert shared or len(made) == 2

    stream = BucketIterable(
        iter([[1] * int(n) for n in src]), boundaries=sampler.boundaries["src"], batch_size=4
    )
    stream_source = ExampleBatches(stream, [3, 4, 5], device="cpu")
    assert [tuple(stream_source.make_batch(s)["inputs"].shape) for s in stream.shapes] == [
        tuple(s) for s in stream.shapes
    ]

    class Reiterable:  # (a DataLoader: each iter() starts its workers)
        calls = 0

        def __iter__(self):
            Reiterable.calls += 1
            return iter([[1, 2, 3]])

    ExampleBatches(stream, Reiterable())  # s22-rev: the one-shot check called iter() twice
    assert Reiterable.calls == 1


class PackedRows:
    """A packing plan's own batch source (the protocol): rows of documents, position ids."""

    shapes: ClassVar = [(2, 16), (4, 32)]

    def make_batch(self, shape):
        rows, width = shape
        return {
            "input_ids": torch.zeros(rows, width, dtype=torch.long),
            "position_ids": torch.arange(width).repeat(rows, 1),
        }


def test_a_batch_source_plugs_in_without_a_collator():
    backend = Counting()
    step = torch.compile(
        lambda b: (b["input_ids"] + b["position_ids"]).sum(), backend=backend, dynamic=False
    )
    report = precompile(step, PackedRows(), cache=False, progress=False)
    assert report.shapes == PackedRows.shapes and backend.graphs == 2


@pytest.mark.parametrize("max_seqlen", [None, 20])
def test_a_packing_plan_precompiles_through_its_collator(max_seqlen):
    # PackSampler(row_length=(16, 32)) whose longest document is 20 tokens: max_seqlen=20 is a
    # valid bound for every planned document, but precompile resized its example to the whole
    # row (32) and the collator refused it ("longer than max_seqlen=20")
    from bucketloader.pack import PackSampler
    from bucketloader.stream import PackIterable

    lengths = [3, 5, 9, 12, 4, 7, 20, 18, 2, 11]
    docs = [list(range(1, n + 1)) for n in lengths]
    sampler = PackSampler(lengths, row_length=(16, 32), batch_size=2)
    stream = PackIterable(docs, row_length=32, batch_size=2)
    for plan, example in ((sampler, docs), (stream, docs[0])):  # (a stream: one sample)
        collate = plan.collator(max_seqlen=max_seqlen)
        backend = Counting()
        step = torch.compile(
            lambda b: (b["input_ids"] + b["position_ids"]).sum() + b["cu_seqlens"].sum(),
            backend=backend,
            dynamic=False,
        )
        report = precompile(
            step, plan, example=example, collate_fn=collate, cache=False, progress=False
        )
        assert report.shapes == plan.shapes and backend.graphs == len(plan.shapes)
        for shape in plan.shapes:  # the example batch has the structure of a real one
            batch = ExampleBatches(plan, example, collate_fn=collate).make_batch(shape)
            assert tuple(batch["input_ids"].shape) == shape
            assert batch["max_seqlen"] == (max_seqlen or shape[1])
            assert batch["cu_seqlens"].numel() == collate.num_segments(plan.shapes.index(shape)) + 1
        if isinstance(plan, PackSampler):  # and training then compiles nothing new
            for idx in plan:
                step(collate([docs[i] for i in idx]))
            assert backend.graphs == len(plan.shapes)


def test_precompiles_synthetic_packed_batches_number_positions_from_the_collators_start():
    # s31: PackCollator(position_ids_start=2) (RoBERTa-like models): the example batches that
    # precompile runs are laid out by the collator, so their positions count from 2 as the
    # training batches' do (the synthetic all-one-document rows included)
    from bucketloader.pack import PackSampler
    from bucketloader.stream import PackIterable

    lengths = [3, 5, 9, 12, 4, 7, 20, 18, 2, 11]
    docs = [list(range(1, n + 1)) for n in lengths]
    sampler = PackSampler(lengths, row_length=(16, 32), batch_size=2)
    stream = PackIterable(docs, row_length=32, batch_size=2)
    for plan, example in ((sampler, docs), (stream, docs[0])):
        collate = plan.collator(pad_token_id=1, position_ids_start=2)
        for shape in plan.shapes:
            batch = ExampleBatches(plan, example, collate_fn=collate).make_batch(shape)
            assert batch["position_ids"].tolist()[0] == list(range(2, shape[1] + 2))
        backend = Counting()
        step = torch.compile(
            lambda b: (b["input_ids"] + b["position_ids"]).sum(), backend=backend, dynamic=False
        )
        report = precompile(
            step, plan, example=example, collate_fn=collate, cache=False, progress=False
        )
        assert report.shapes == plan.shapes and backend.graphs == len(plan.shapes)


def test_a_packed_batch_with_a_4d_document_mask_precompiles():
    # s30: a collator returning the (B, 1, L, L) document mask as attention_mask (what
    # hf.for_packing(attention="mask") ships) was refused: precompile read the batch's shape
    # from attention_mask and said the collator and the plan disagree
    from bucketloader.pack import PackSampler, document_mask

    lengths = [3, 5, 9, 12, 4, 7, 2, 11]
    docs = [list(range(1, n + 1)) for n in lengths]
    plan = PackSampler(lengths, row_length=16, batch_size=2)

    def masked(inner):
        def collate(samples):
            out = inner(samples)
            mask = document_mask(out["document_ids"])
            return {"input_ids": out["input_ids"], "attention_mask": mask}

        return collate

    collate = masked(plan.collator())

    backend = Counting()
    step = torch.compile(
        lambda b: (b["input_ids"] * b["attention_mask"].sum((1, 2))).sum(),
        backend=backend,
        dynamic=False,
    )
    report = precompile(step, plan, example=docs, collate_fn=collate, cache=False, progress=False)
    assert report.shapes == plan.shapes == [(2, 16)] and backend.graphs == 1
    wider = masked(PackSampler(lengths, row_length=32, batch_size=2).collator())  # still checked
    with pytest.raises(ValueError, match=r"made a batch of shape \(2, 32\) .* planned shape"):
        precompile(step, plan, example=docs, collate_fn=wider, cache=False, progress=False)


# -- keys: hits and misses across runs ----------------------------------------------------------
def _keyed_run(cache, sampler, width, data):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Net(width)
    compiled = torch.compile(model, backend="eager", dynamic=False)

    def step(batch):
        compiled(batch["input_ids"], batch["attention_mask"]).sum().backward()

    return precompile(step, sampler, example=data[0], restore=[model], cache=cache, progress=False)


def test_the_compile_key_hits_unchanged_runs_and_misses_changes(tmp_path):
    lengths = _lengths(300)
    data = _dataset(lengths)
    cache = CompileCache(tmp_path)
    sampler = BucketSampler(lengths, num_buckets=3, batch_size=16, seed=0)
    first = _keyed_run(cache, sampler, 8, data)
    assert not any(r.cached for r in first.rows)
    assert set(cache.compiled_shapes(first.key)) == set(sampler.shapes)
    again = _keyed_run(cache, sampler, 8, data)  # a rerun: same key, every shape recorded
    assert again.key == first.key and all(r.cached for r in again.rows)
    assert {r.phase for r in again.rows} == {"load"} and {r.compiled_by for r in again.rows} == {-1}
    wider = _keyed_run(cache, sampler, 16, data)  # another model: another key, all miss
    assert wider.key != first.key and not any(r.cached for r in wider.rows)
    other = BucketSampler(lengths, num_buckets=4, batch_size=16, seed=0)  # new shapes miss alone
    mixed = _keyed_run(cache, other, 8, data)
    assert mixed.key == first.key
    for r in mixed.rows:
        assert r.cached == (r.shape in sampler.shapes), r
    rec = cache.compiled_shapes(first.key)[sampler.shapes[0]]
    assert rec.cold_seconds is not None and rec.cold_seconds > 0

    # a corrupted record is ignored with one warning and recompiled
    path = next((tmp_path / "entries" / first.key).glob("*.json"))
    path.write_text(path.read_text().replace('"shape": [', '"shape": [1, '))
    with pytest.warns(CompileCacheWarning, match="unreadable compile record"):
        assert len(cache.records(first.key)) == len(set(sampler.shapes) | set(other.shapes)) - 1


def test_key_follows_code_dtype_and_threads(tmp_path):
    from bucketloader.compile._key import code_digest, key_document

    def f(b):
        return b * 2

    def g(b):
        return b * 3

    batch = {"x": torch.zeros(2, 3)}
    doc = key_document(f, [], batch)
    eager, aot = (torch.compile(f, backend=b, dynamic=False) for b in ("eager", "aot_eager"))
    assert key_document(f, [], batch, [eager]) != key_document(f, [], batch, [aot]) != doc
    assert doc == key_document(f, [], {"x": torch.ones(4, 5)})  # sizes are per shape, not key
    assert doc != key_document(f, [], {"x": torch.zeros(2, 3, dtype=torch.float64)})
    assert code_digest(f) != code_digest(g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key_document(f, [], batch) != doc
    finally:
        torch.set_num_threads(threads)


_SPAWNED_KEY = """
import sys
import torch
from bucketloader.compile._key import pickle_home

def write(rank, out):
    with open(out, "w") as f:
        f.write(pickle_home())

if __name__ == "__main__":
    write(0, sys.argv[1])
    torch.multiprocessing.spawn(write, args=(sys.argv[2],), nprocs=1)
"""


def test_a_spawned_rank_keys_apart_from_a_plain_run(tmp_path):
    # s33-user: inductor's keys pickle torch.contiguous_format, named by __mp_main__ in a
    # torch.multiprocessing.spawn child and by torch._utils in a plain run, so a plain run's
    # graphs missed in spawned ranks, while the record said "recorded before" (NOTE [ Where
    # pickle finds torch's memory formats ] in bucketloader.compile._key)
    import subprocess

    script = tmp_path / "spawned_key.py"
    script.write_text(_SPAWNED_KEY)
    plain, spawned = tmp_path / "plain.json", tmp_path / "spawned.json"
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [sys.executable, str(script), str(plain), str(spawned)], env=env, check=True, timeout=120
    )
    assert (plain.read_text(), spawned.read_text()) == ("torch._utils", "__mp_main__")
    assert _key.environment({"cpu"})["pickled_as"] == _key.pickle_home()  # in every key


# -- inductor: a warm start loads instead of compiling ------------------------------------------
@pytest.mark.timeout(420)  # a real g++ build: minutes on a loaded 2-core machine
def test_inductor_warm_start_from_the_cache_directory(tmp_path):
    runs = []
    for out in (tmp_path / "cold.json", tmp_path / "warm.json"):
        # two processes, one cache directory: a rerun after a preemption. Each a process of its
        # own (forked from conftest's warm interpreter, which has imported torch and inductor
        # but never compiled: nothing but the directory carries over)
        run_ranks(
            lambda r, out=out: [__file__, "inductor", str(tmp_path), str(out)],
            1,
            timeout=200,
            preload=("torch._dynamo", "torch._inductor.compile_fx"),
        )
        runs.append(json.loads(out.read_text()))
    assert [(c, cached) for c, cached, _ in runs[0]] == [("cold", False)]
    assert [(c, cached) for c, cached, _ in runs[1]] == [("warm", True)]
    assert any(p.suffix == ".so" for p in (tmp_path / "inductor").rglob("*.so"))


def _inductor_run(cache: Path, out: Path) -> None:
    """One process's precompile of one shape with inductor into ``cache`` (a real g++ build)."""
    import torch._inductor.config as inductor

    # as the environment TORCHINDUCTOR_COMPILE_THREADS=1 would (set here: a forked rank's
    # inductor configuration was read from its parent's environment)
    inductor.compile_threads = 1
    inductor.cpp.vec_isa_ok = True  # skip inductor's CPU probe (six g++ builds): test time
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    torch.set_num_threads(1)
    sampler = BucketSampler([3, 9, 9, 14], num_buckets=1, batch_size=2)  # one shape: one build
    step = torch.compile(lambda b: (b["inputs"] * b["attention_mask"]).sum(), dynamic=False)
    r = precompile(step, sampler, example=[1, 2, 3], cache=cache, progress=False)
    out.write_text(json.dumps([[r.cache, r.cached, r.seconds] for r in r.rows]))


# -- two ranks ----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
def test_two_ranks_split_the_shapes_share_and_load_all(tmp_path):
    from conftest import load_real

    np.save(tmp_path / "lengths.npy", np.asarray(load_real("multi30k")[:400, 0]))
    port = free_port()
    run_ranks(
        lambda r: [__file__, "worker", str(r), "2", str(port), str(tmp_path)],
        2,
        timeout=TIMEOUT_S,
        preload=("torch._dynamo",),  # (each rank compiles)
    )
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    shapes = {tuple(s) for s in runs[0]["shapes"]}
    for mode in ("filesystem", "collective"):
        rows = [run[mode]["rows"] for run in runs]
        mine = [{tuple(s) for s, phase, _, _ in rr if phase == "compile"} for rr in rows]
        assert mine[0] and mine[1] and not mine[0] & mine[1] and mine[0] | mine[1] == shapes
        for r, rr in enumerate(rows):  # every rank ran every shape: its share, then the rest
            assert {tuple(s) for s, *_ in rr} == shapes
            assert all(by == r for _, phase, by, _ in rr if phase == "compile")
            assert all(by == 1 - r for _, phase, by, _ in rr if phase == "load")
        assert [run[mode]["shared_by"] for run in runs] == [mode] * 2
        assert [run[mode]["new_graphs_in_training"] for run in runs] == [0, 0]
    # collective: every rank holds every shape's artifact, written by the rank that compiled it
    for run in runs:
        rows = run["collective"]["rows"]
        owner = {"x".join(map(str, s)): by for s, phase, by, _ in rows}
        assert run["collective"]["written_by"] == {k: str(v) for k, v in owner.items()}
        assert run["collective"]["received"] == sum(phase == "load" for _, phase, _, _ in rows)
    named = "RuntimeError: rank(s) [1] raised before precompile's sharing of the shapes"
    assert runs[0]["failing"].startswith(named), runs[0]["failing"]
    assert "rank 1 raised ValueError: no shape [" in runs[0]["failing"], runs[0]["failing"]
    assert runs[1]["failing"].startswith("ValueError: no shape ["), runs[1]["failing"]
    # s20: rank 1 refused before the assignment (its own argument), or raising in the load
    # phase (rank 0 went on to training's first collective and waited there)
    named = "RuntimeError: rank(s) [1] raised before precompile's assignment of shapes"
    assert runs[0]["refused"].startswith(named), runs[0]["refused"]
    assert "rank 1 raised TypeError: progress must be" in runs[0]["refused"], runs[0]["refused"]
    assert runs[1]["refused"].startswith("TypeError: progress must be"), runs[1]["refused"]
    named = "RuntimeError: rank(s) [1] raised before the end of precompile"
    assert runs[0]["loading"].startswith(named), runs[0]["loading"]
    assert "rank 1 raised ValueError: no shape [" in runs[0]["loading"], runs[0]["loading"]
    assert runs[1]["loading"].startswith("ValueError: no shape ["), runs[1]["loading"]
    # rank 1 without a usable cache: each rank compiles every shape alone, none waits
    shapes = len(runs[0]["shapes"])
    assert [r["unusable"][:2] for r in runs] == [[1, shapes], [1, shapes]], runs
    assert any("compile cache of rank(s) [1] is not usable" in w for w in runs[0]["unusable"][2])
    assert not any("rank(s) [1]" in w for w in runs[1]["unusable"][2])  # (its own says why)
    # ranks that planned other shapes: each rank compiled its own shape of the index it was
    # given and said it loaded the other rank's (rank 1's 4th shape failed in zip())
    for run in runs:
        assert run["other_shapes"].startswith(
            "precompile splits the planned shapes among the 2 ranks, but rank(s) [1] planned "
            "other shapes than rank 0: rank 1 planned 4 shapes, rank 0 3"
        ), run["other_shapes"]


def _worker(rank: int, world: int, port: int, tmp: Path) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=60),
    )
    lengths = np.load(tmp / "lengths.npy")
    data = _dataset(lengths)
    sampler = BucketSampler(lengths, num_buckets=5, batch_size=8, seed=0)
    out: dict = {"shapes": [list(s) for s in sampler.shapes]}
    for mode in ("filesystem", "collective"):
        torch._dynamo.reset()
        model, backend = Net(), Counting()
        compiled = torch.compile(model, backend=backend, dynamic=False)
        # in the collective mode the ranks play two nodes: each has its own directory
        directory = tmp / (mode if mode == "filesystem" else f"{mode}{rank}")
        cache = CompileCache(directory, share="auto" if mode == "filesystem" else "collective")
        fake = cache.inductor_dir / "fxgraph"

        def step(batch, compiled=compiled, fake=fake, mode=mode):
            compiled(batch["input_ids"], batch["attention_mask"]).sum().backward()
            if mode == "collective":  # a stand-in for what inductor writes on a cold compile
                entry = fake / "x".join(map(str, batch["input_ids"].shape))
                if not entry.exists():
                    entry.parent.mkdir(parents=True, exist_ok=True)
                    entry.write_text(str(dist.get_rank()))

        report = precompile(
            step, sampler, example=data, restore=[model], cache=cache, progress=False
        )
        written = {p.name: p.read_text() for p in fake.glob("*")} if fake.is_dir() else {}
        graphs = backend.graphs
        for batch in DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collator()):
            step(batch)
        out[mode] = {
            "rows": [[list(r.shape), r.phase, r.compiled_by, r.graphs] for r in report.rows],
            "shared_by": report.shared_by,
            "received": report.files_received,
            "new_graphs_in_training": backend.graphs - graphs,
            "written_by": written,
        }

    # a step that raises on rank 1's share: rank 1 raises its own error, rank 0 one naming rank 1
    # (it waited in the sharing's first collective, until the group's timeout)
    def failing(batch):
        if dist.get_rank() == 1:
            raise ValueError(f"no shape {list(batch['input_ids'].shape)} on rank 1")

    try:
        precompile(
            failing, sampler, example=data, restore=[], cache=tmp / "failing", progress=False
        )
        out["failing"] = "no error"
    except (ValueError, RuntimeError) as exc:
        out["failing"] = f"{type(exc).__name__}: {exc}"
    dist.monitored_barrier(timeout=timedelta(seconds=20))  # a rank left behind waits here
    theirs = {r.shape for r in report.rows if r.phase == "load"}  # (the other rank's share)

    def loading(batch):
        if dist.get_rank() == 1 and tuple(batch["input_ids"].shape) in theirs:
            raise ValueError(f"no shape {list(batch['input_ids'].shape)} on rank 1")

    for name, fn, progress in (
        ("refused", lambda b: None, [False, "no"][rank]),
        ("loading", loading, False),
    ):
        try:
            precompile(fn, sampler, example=data, restore=[], cache=tmp / name, progress=progress)
            out[name] = "no error"
        except (ValueError, TypeError, RuntimeError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        dist.monitored_barrier(timeout=timedelta(seconds=20))
    # s19: rank 1's cache directory is unusable (a file stands in its way): it joined no
    # sharing, rank 0 waited for it in the sharing's first collective; now neither shares
    (tmp / "blocked").write_text("a file")
    where = tmp / ("blocked" if rank == 1 else "usable") / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        alone = precompile(
            lambda batch: None, sampler, example=data, restore=[], cache=where, progress=False
        )
    out["unusable"] = [alone.world_size, len(alone.rows), [str(w.message)[:60] for w in caught]]
    dist.monitored_barrier(timeout=timedelta(seconds=20))
    # s22: each rank planned alone (num_replicas=1), so their shapes differ
    own = BucketSampler(lengths, num_buckets=3 + rank, batch_size=8, num_replicas=1, rank=0)
    try:
        precompile(lambda b: None, own, example=data, restore=[], cache=tmp / "own", progress=False)
        out["other_shapes"] = "no error"
    except ValueError as exc:
        out["other_shapes"] = str(exc)
    dist.monitored_barrier(timeout=timedelta(seconds=20))
    (tmp / f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


# -- warm costs in the recommender --------------------------------------------------------------
def test_recommender_charges_warm_costs_for_compiled_shapes():
    lengths = _lengths(2000)
    costs = {
        "compile_seconds_per_shape": 60.0,
        "warm_compile_seconds_per_shape": 1.0,
        "seconds_per_token": 2e-5,
        "seconds_per_step": 0.01,
    }
    kw = {"batch_size": 32, "num_steps": 3000, "num_buckets": (1, 4, 8)}
    cold = recommend_num_buckets(lengths, costs=costs, **kw)
    assert cold.num_buckets == 1  # 60 s per shape: padding to the max wins a short run
    k8 = next(c for c in cold.table if c.num_buckets == 8)
    from bucketloader.analysis.recommend import epoch_cost

    k8_shapes = epoch_cost(lengths, np.asarray(k8.boundaries), batch_size=32).shapes
    warm = recommend_num_buckets(lengths, costs=costs, compiled_shapes=k8_shapes, **kw)
    row = next(c for c in warm.table if c.num_buckets == 8)
    assert row.compile_seconds == pytest.approx(len(k8_shapes) * 1.0)
    assert row.warm_shapes == len(k8_shapes)
    assert warm.num_buckets == 8  # the shapes a previous run compiled cost their warm load
    with pytest.raises(TypeError, match="compiled_shapes must be"):
        recommend_num_buckets(lengths, costs=costs, compiled_shapes=5, **kw)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda s: precompile(3, s, example=[1]), TypeError, "step must be callable"),
        (lambda s: precompile(print, object(), example=[1]), TypeError, "plan must be"),
        (  # s22: the loader training iterates is refused naming what to pass instead
            lambda s: precompile(print, s.dataloader([[1] * n for n in (3, 5, 8, 8, 12)])),
            TypeError,
            "got ResumableDataLoader; pass plan=loader.batch_sampler, example=loader.dataset, "
            "collate_fn=loader.collate_fn",
        ),
        (lambda s: precompile(print, s), ValueError, "example must be a real sample"),
        (
            lambda s: precompile(print, s, example=[1], restore=[3]),
            TypeError,
            "restore must .* got int at position 0$",
        ),
        (  # one object, not in a list: no position named (s33-user)
            lambda s: precompile(print, s, example=[1], restore=3),
            TypeError,
            r"restore must .*\(one, or a list of them\), got int$",
        ),
        (lambda s: precompile(print, s, example=[1], cache=3), TypeError, "cache must be"),
        (lambda s: precompile(print, s, example=[1], progress=1), TypeError, "progress must"),
        (lambda s: precompile(print, s, example=[1], device="nope"), ValueError, "device must"),
        (lambda s: precompile(print, s, example=[1], collate_fn=3), TypeError, "collate_fn must"),
        (lambda s: precompile(print, s, example=object()), TypeError, "samples must be"),
        (  # s22: a one-shot iterator lost its first sample to precompile (a stream's source)
            lambda s: precompile(print, s, example=iter([[1, 2], [3]])),
            TypeError,
            r"got a one-shot iterator \(list_iterator\), whose first sample precompile would",
        ),
        (lambda s: ExampleBatches(s, [1]).make_batch((3, 3)), ValueError, "one of the plan's"),
        (
            lambda s: ExampleBatches(
                s, {"x": [1]}, collate_fn=s.collator(fields={"y": Field()})
            ).make_batch((2, 8)),
            ValueError,
            "the collator could not collate 2 copies of the example",
        ),
        (lambda s: CompileCache(3), TypeError, "directory must be a path"),
        (lambda s: CompileCache(""), ValueError, "got directory=''; an empty path means the"),
        (lambda s: precompile(print, s, example=[1], cache=""), ValueError, "got cache=''"),
        (lambda s: CompileCache(share="nfs"), ValueError, "share must be one of"),
        (lambda s: CompileCache(distributed="yes"), TypeError, "distributed must be a bool"),
    ],
)
def test_bad_input_is_answered_in_one_voice(call, error, match):
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    with pytest.raises(error, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call(sampler)


def test_an_example_in_another_unit_than_the_plan_is_refused():
    # s33-user: a dataset of 10 ms frames given to precompile for a sampler planned on audio
    # samples compiled every shape, and training's collator refused the first batch
    # (NOTE [ An example in another unit than the plan ] in bucketloader.compile.batches)
    samples = np.random.default_rng(0).integers(1_600, 3_600, size=40)
    frames = samples // 40
    on_samples = BucketSampler(samples, num_buckets=3, batch_size=4)
    on_frames = BucketSampler(frames, num_buckets=3, batch_size=4)
    bounds = str([int(b) for b in on_samples.shape_table.cells.boundaries[0][0]])
    as_frames = [{"audio": torch.zeros(int(n)), "labels": [1] * 20} for n in frames]
    as_samples = [{"audio": torch.zeros(int(n)), "labels": [1] * 20} for n in samples]
    with pytest.raises(ValueError) as info:  # the dataset: that sample's own planned length
        precompile(print, on_samples, example=as_frames, cache=False)
    assert str(info.value).startswith(
        f"the example dataset[0] has length {frames[0]} (field 'audio'), but the plan's lengths "
        f"give that sample {samples[0]} (boundaries {bounds}): example is in another unit"
    ), info.value
    assert "rebuild the plan on the lengths your dataset yields" in str(info.value)
    with pytest.raises(
        ValueError,
        match=rf"^the example has length {frames[3]} \(field "
        rf"'audio'\), but the plan's lengths run {samples.min()}\.\.",
    ):
        precompile(print, on_samples, example=as_frames[3], cache=False)  # one sample: the range
    with pytest.raises(
        ValueError,
        match=rf"dataset\[0\] has length {samples[0]} .* that "
        rf"sample {frames[0]} ",
    ):  # the reverse
        precompile(print, on_frames, example=as_samples, cache=False)
    # a custom collator: the transcript is resized too, but is not the input (s33-user's a2)
    with pytest.raises(ValueError, match="example is in another unit"):
        ExampleBatches(on_samples, as_frames, collate_fn=lambda b: on_samples.collator()(b))
    with pytest.raises(ValueError, match="example is in another unit"):
        alone = {"audio": as_samples[5]["audio"]}  # (no transcript: every field is the input)
        ExampleBatches(on_frames, alone, collate_fn=lambda b: on_frames.collator()(b))
    # the same unit passes, and a sample the plan leaves out (over max_length) is no evidence
    ExampleBatches(on_samples, as_samples)
    ExampleBatches(on_frames, as_frames[7])
    with warnings.catch_warnings():  # (the DataLossWarning of the samples left out)
        warnings.simplefilter("ignore")
        cut = BucketSampler(samples, num_buckets=3, batch_size=4, max_length=2_000, overflow="drop")
    longest = {"audio": torch.zeros(int(samples.max()) * 3)}  # (3x: beyond any tolerance)
    ExampleBatches(cut, longest)
    with pytest.raises(ValueError, match="example is in another unit"):
        ExampleBatches(on_samples, longest)


def test_a_batch_source_with_bad_shapes_is_refused():
    class Bad:
        shapes: ClassVar = [(0, 4)]

        def make_batch(self, shape):
            return {}

    with pytest.raises(ValueError, match=r"plan.shapes must be a non-empty list"):
        precompile(print, Bad(), cache=False)


def test_a_user_set_inductor_directory_is_replaced_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    step = torch.compile(lambda b: b["inputs"].sum(), backend=Counting(), dynamic=False)
    cache = CompileCache(tmp_path / "bl")
    with pytest.warns(CompileCacheWarning, match="TORCHINDUCTOR_CACHE_DIR=.*mine is replaced"):
        report = precompile(step, sampler, example=[1, 2], cache=cache, progress=False)
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache.inductor_dir.resolve())
    assert report.cache_dir == cache.inductor_dir
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pointing it at the same cache again is silent
        precompile(step, sampler, example=[1, 2], cache=cache, progress=False)


def test_an_uncompiled_step_is_reported():
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    with pytest.warns(UserWarning, match="step is not compiled") as caught:
        line = inspect.currentframe().f_lineno + 1
        report = precompile(lambda b: b, sampler, example=[1, 2], cache=False, progress=False)
    assert {r.cache for r in report.rows} == {"memory"}
    # the warning points at the caller's line, through checks_options' wrapper
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


@pytest.mark.parametrize("dynamic", [None, False])
def test_a_step_compiled_with_dynamic_none_is_told(dynamic):
    """s22-compile: under torch.compile's default dynamic=None the second planned shape compiled
    a dynamic-shape graph that ran the rest, and precompile said nothing (rows "memory")."""
    sampler = BucketSampler([3, 5, 8, 8, 12, 20], num_buckets=3, batch_size=2)
    model, backend = nn.Embedding(VOCAB, 4), Counting()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        report = precompile(
            lambda b: compiled(b["inputs"]).sum().backward(),
            sampler, example=[1, 2, 3], restore=[model], cache=False, progress=False,
        )  # fmt: skip
    told = [w for w in caught if "dynamic=None" in str(w.message)]
    if dynamic is None:
        assert [r.graphs for r in report.rows] == [1, 1, 0]  # (the second graph is dynamic)
        assert [(w.filename, w.lineno) for w in told] == [(__file__, line)]
        assert "2 graph(s) for 3 planned shapes" in str(told[0].message)
    else:
        assert [r.graphs for r in report.rows] == [1, 1, 1] and not told


def test_an_unusable_cache_directory_is_named_at_the_callers_line(tmp_path):
    """precompile(..., cache=<a file>) warned from inside precompile.py (the CompileCache it
    builds), not at the line that called it."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    step = torch.compile(lambda b: b["inputs"].sum(), backend="eager", dynamic=False)
    with pytest.warns(CompileCacheWarning, match="is not usable .it is a file.") as caught:
        line = inspect.currentframe().f_lineno + 1
        report = precompile(step, sampler, example=[1, 2], cache=blocker, progress=False)
    assert report.key is None  # compiled as with cache=False
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_precompile_refuses_an_unknown_option_in_one_voice():
    """s12-polish left it: precompile(..., collate=f) was Python's bare "got an unexpected
    keyword argument" (every other public entry names the option meant)."""
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    step = torch.compile(lambda b: b["inputs"].sum(), backend="eager", dynamic=False)
    for bad, hint in [
        ({"collate": list}, "did you mean collate_fn=?"),
        ({"restore_state": []}, "did you mean restore=?"),
        ({"dynamic": False}, "its options: cache, collate_fn, device, example, plan, progress"),
    ]:
        with pytest.raises(TypeError, match=r"^precompile got an unexpected option ") as info:
            precompile(step, sampler, example=[1, 2], cache=False, progress=False, **bad)
        assert hint in str(info.value)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    sys.path.insert(0, str(Path(__file__).parent))
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
elif __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "inductor":
    _inductor_run(Path(sys.argv[2]), Path(sys.argv[3]))


@pytest.mark.parametrize(
    ("version", "parsed"),
    [("2.4.1+cu121", (2, 4)), ("2.13.0+cpu", (2, 13)), ("2.10.0a0+git1234", (2, 10))],
)
def test_precompile_and_the_cache_name_the_torch_they_need(version, parsed, tmp_path, monkeypatch):
    """torch 2.4 crashed deep inside inductor (no cache_dir_utils, a KeyError in its config
    snapshot); below the tested floor both entry points say so first, naming the upgrade."""
    monkeypatch.setattr(torch, "__version__", version)
    assert _key.torch_version() == parsed
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    want = ".".join(map(str, _key.MIN_TORCH))
    if parsed >= _key.MIN_TORCH:
        _key.check_torch("precompile")  # (no error)
        return
    message = (
        rf"{{}} needs torch >= {re.escape(want)} .*but this is torch {re.escape(version)}; "
        rf"upgrade it \(pip install 'torch>={re.escape(want)}'\)"
    )
    with pytest.raises(RuntimeError, match=message.format("precompile")):
        precompile(print, sampler, example=[1], cache=False)
    with pytest.raises(RuntimeError, match=message.format("CompileCache")):
        CompileCache(tmp_path).activate()
