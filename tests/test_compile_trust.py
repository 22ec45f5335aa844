"""precompile never trains the model, and CompileCache is as hardened as BucketCache (issue 21).

Discovery must find what a step can change wherever it sits (a bound method's object, a plain
object's attributes, closures at any depth, ``functools.partial``, a module holding its
optimizer), or refuse with the fix; compile records are untrusted input read through the one
bounded reader (``bucketloader._files``).
"""

from __future__ import annotations

import functools
import json
import os
import warnings

import pytest
import torch
import torch._dynamo
from torch import nn

from bucketloader import BucketSampler
from bucketloader.compile import CompileCache, CompileCacheWarning, precompile
from bucketloader.compile._key import digest
from bucketloader.compile.store import ENTRY_TAG, KEY_FORMAT

LENGTHS = [3, 5, 8, 8, 12, 4, 6]


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _sampler():
    return BucketSampler(LENGTHS, num_buckets=2, batch_size=2, seed=0)


def _model_and_opt():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(16, 4), nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    return model, opt


def _train(model, opt):
    compiled = torch.compile(model, backend="eager", dynamic=False)

    def inner(batch):
        compiled(batch["inputs"]).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    return inner


def _state(model, opt):
    params = [p.detach().clone() for p in model.parameters()]
    state = {
        id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for p, s in opt.state.items()
    }
    return params, state


def _same(a, b):
    assert len(a[0]) == len(b[0]) and all(
        torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True)
    )
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert a[1][k].keys() == b[1][k].keys()
        for name in a[1][k]:
            assert torch.equal(torch.as_tensor(a[1][k][name]), torch.as_tensor(b[1][k][name]))


def _run(step):
    return precompile(step, _sampler(), example=[1, 2, 3], cache=False, progress=False)


class Trainer:
    """A plain object (no state_dict) holding the model and the optimizer."""

    def __init__(self) -> None:
        self.model, self.opt = _model_and_opt()
        self.inner = _train(self.model, self.opt)
        self.global_step = 0
        self.losses: list[float] = []

    def step(self, batch):
        self.inner(batch)
        self.global_step += 1
        self.losses.append(1.0)


class Slotted:
    __slots__ = ("model", "opt")

    def __init__(self) -> None:
        self.model, self.opt = _model_and_opt()


def _deep(inner, depth):
    if depth == 0:
        return inner

    fn = _deep(inner, depth - 1)

    def wrapper(batch):
        return fn(batch)

    return wrapper


@pytest.mark.parametrize("where", ["bound_method", "deep_closure", "partial", "slots", "module"])
def test_precompile_never_trains_whatever_holds_the_model(where):
    """Weights and AdamW state bit-identical after precompile (the optimizer stepped once before,
    so its state exists and must come back exactly), wherever the step keeps them."""
    if where == "bound_method":
        trainer = Trainer()
        model, opt, step = trainer.model, trainer.opt, trainer.step
    elif where == "slots":
        holder = Slotted()
        model, opt = holder.model, holder.opt
        train = _train(model, opt)

        def step(batch, holder=holder):
            train(batch)
    elif where == "module":  # a module that keeps its own optimizer (Lightning style)
        model, opt = _model_and_opt()

        class Owner(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net, self.optim = model, opt
                self.train_step = _train(model, opt)

        owner = Owner()
        step = owner.train_step.__call__
    else:
        model, opt = _model_and_opt()
        inner = _train(model, opt)
        step = (
            _deep(inner, 6)
            if where == "deep_closure"
            else functools.partial(lambda fn, batch: fn(batch), inner)
        )
    batch = {"inputs": torch.tensor([[1, 2, 3]])}
    _train(model, opt)(batch)  # a resumed run: AdamW has state
    before = _state(model, opt)
    if where == "bound_method":
        trainer.global_step, trainer.losses = 7, [0.5]
    report = _run(step)
    _same(before, _state(model, opt))
    assert "AdamW (optimizer)" in report.restored
    if where == "bound_method":
        assert trainer.global_step == 7 and trainer.losses == [0.5]  # attributes put back
        assert "Trainer (attributes)" in report.restored


def test_a_loose_tensor_parameter_is_restored():
    w = torch.zeros(4, requires_grad=True)

    @torch.compile(backend="eager", dynamic=False)
    def step(batch):
        loss = (batch["inputs"].float().sum() * w).sum()
        loss.backward()
        with torch.no_grad():
            w.sub_(w.grad)

    report = _run(step)
    assert torch.equal(w, torch.zeros(4)) and w.grad is None
    assert "tensor (4,) (values)" in report.restored


def test_refuses_with_the_fix_when_it_cannot_see():
    model, opt = _model_and_opt()
    train = _train(model, opt)
    namespace = {"train": train}

    def step(batch):
        eval("train", namespace)(batch)  # what it touches is not in its code

    before = _state(model, opt)
    with pytest.raises(ValueError, match=r"restore=\[model, optimizer") as info:
        _run(step)
    assert "eval" in str(info.value)
    _same(before, _state(model, opt))  # refused before any step ran
    report = precompile(
        step, _sampler(), example=[1, 2, 3], restore=[model, opt], cache=False, progress=False
    )
    _same(before, _state(model, opt))
    assert report.restored == ("Sequential (module)", "AdamW (optimizer)")


def test_example_list_of_tensors_is_the_dataset_and_devices_are_checked():
    seen = []

    @torch.compile(backend="eager", dynamic=False)
    def step(batch):
        seen.append(sorted(batch))
        return batch["inputs"].sum()

    sampler = _sampler()
    data = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    precompile(step, sampler, example=data[:1], cache=False, progress=False, restore=[])
    real = sampler.collator()([data[0], data[1]])
    assert seen and all(s == sorted(real) for s in seen)  # 'inputs', as training's (not field 0)
    for bad in ("cuda:7", "mps"):
        if bad == "cuda:7" and torch.cuda.device_count() > 7:  # pragma: no cover
            continue
        if bad == "mps" and torch.backends.mps.is_available():  # pragma: no cover
            continue
        with pytest.raises(ValueError, match=f"device={bad!r}"):
            precompile(step, sampler, example=[1, 2], device=bad, cache=False, progress=False)
    with pytest.raises(ValueError, match=r"example=\[\] is empty: an empty dataset"):
        precompile(step, sampler, example=[], cache=False, progress=False, restore=[])


# -- the compile cache --------------------------------------------------------------------------
def _plant_record(tmp_path, shape, *, name_from=None):
    """A self-consistent record (its fields hash to its name) for an arbitrary shape."""
    model = {"anything": 1}
    key = digest(model)
    body = {
        "format": ENTRY_TAG,
        "version": KEY_FORMAT,
        "key": key,
        "shape": shape,
        "batch": {"x": 1},
        "model": model,
        "cold_seconds": 1.0,
        "warm_seconds": None,
        "updated": 1.0,
    }
    shape_key = CompileCache.shape_key(key, tuple(name_from or shape), {"x": 1})
    folder = tmp_path / "entries" / key
    folder.mkdir(parents=True)
    (folder / f"{shape_key}.json").write_text(json.dumps(body))
    return key, folder / f"{shape_key}.json"


def test_a_record_with_an_impossible_shape_is_ignored(tmp_path):
    cache = CompileCache(tmp_path)
    key, _ = _plant_record(tmp_path, [-4, 8])
    with pytest.warns(CompileCacheWarning, match="shape must be"):
        assert cache.compiled_shapes(key) == {}
    key2, _ = _plant_record(tmp_path / "ok", [4, 8])
    assert list(CompileCache(tmp_path / "ok").compiled_shapes(key2)) == [(4, 8)]


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "bomb", "directory"])
def test_hostile_record_paths_never_hang_or_crash(tmp_path, kind):
    cache = CompileCache(tmp_path)
    key, path = _plant_record(tmp_path, [4, 8])
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "bomb":
        path.write_bytes(b"[" * 200_000)
    else:
        path.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.compiled_shapes(key) == {}
        cache.put(key, {"anything": 1}, (4, 8), {"x": 1}, cold_seconds=1.0)  # left alone
    assert len(caught) == 1 and issubclass(caught[0].category, CompileCacheWarning)
    assert os.path.lexists(path) and (kind == "bomb" or not path.is_file() or kind == "dev_zero")


@pytest.mark.parametrize("kind", ["file", "entries_file"])
def test_an_unusable_cache_directory_degrades_with_one_warning(tmp_path, kind):
    target = tmp_path / "cache"
    if kind == "file":
        target.write_text("not a directory")
    else:
        target.mkdir()
        (target / "entries").write_text("not a directory")
    model, opt = _model_and_opt()
    step = _train(model, opt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            report = precompile(step, _sampler(), example=[1, 2, 3], cache=target, progress=False)
    ours = [w for w in caught if issubclass(w.category, CompileCacheWarning)]
    assert len(ours) == 1 and "not usable" in str(ours[0].message), [str(w.message) for w in ours]
    assert report.key is None and report.shapes == _sampler().shapes
    if kind == "file":  # told when the cache is made, naming why (s8-polish)
        assert "not usable (it is a file)" in str(ours[0].message)


def test_a_cache_under_a_file_is_told_at_the_line_that_makes_it(tmp_path):
    """The construction-time warning pointed into compile/store.py, not the user's line (s8-rev1;
    BucketCache's points at the caller)."""
    (tmp_path / "f").write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CompileCache(tmp_path / "f" / "sub")
    assert [(w.category, w.filename) for w in caught] == [(CompileCacheWarning, __file__)]


def test_a_class_defined_by_exec_is_entered_too():
    """A notebook cell or a docs runner execs code: its classes' module reads 'builtins'."""
    namespace = {"make": _model_and_opt, "train": _train}
    exec(
        "class Holder:\n"
        "    def __init__(self):\n"
        "        self.model, self.opt = make()\n"
        "        self.fn = train(self.model, self.opt)\n"
        "    def step(self, batch):\n"
        "        self.fn(batch)\n",
        namespace,
    )
    holder = namespace["Holder"]()
    _train(holder.model, holder.opt)({"inputs": torch.tensor([[1, 2, 3]])})
    before = _state(holder.model, holder.opt)
    _run(holder.step)
    _same(before, _state(holder.model, holder.opt))


def test_installed_libraries_code_is_not_walked_but_their_objects_are():
    """A Hugging Face model's classes call eval() in from_pretrained: library code the step never
    reaches must not make precompile refuse; the Trainer-like object holding it is still entered."""
    transformers = pytest.importorskip("transformers")
    from bucketloader.compile._state import discover

    config = transformers.BertConfig(
        vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(config)
    opt = torch.optim.AdamW(model.parameters())

    class Loop:
        def __init__(self):
            self.model, self.opt = model, opt

        def step(self, batch):
            self.model(**batch).loss.backward()
            self.opt.step()

    objects, _, unproven = discover(Loop().step)
    assert unproven == []
    assert any(o is model for o in objects) and any(o is opt for o in objects)


def test_a_namespace_holding_model_and_optimizer_is_entered():
    import argparse
    import types

    for holder in (types.SimpleNamespace(), argparse.Namespace()):
        holder.model, holder.opt = _model_and_opt()
        holder.train = _train(holder.model, holder.opt)
        holder.train({"inputs": torch.tensor([[1, 2, 3]])})
        before = _state(holder.model, holder.opt)

        def step(batch, holder=holder):
            holder.train(batch)

        _run(step)
        _same(before, _state(holder.model, holder.opt))
