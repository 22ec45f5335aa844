"""The streams wing's structure (issue 20): one stream package over one engine, one shape planner
for specs and streams, small constructors."""

from __future__ import annotations

import ast
import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest

import bucketloader
from bucketloader import BucketIterable, BucketSpec
from bucketloader.plan import shapes
from bucketloader.stream import PackIterable

ROOT = Path(bucketloader.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_module_of_pack_imports_stream():
    bad = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "pack").rglob("*.py")
        if any(m.startswith("bucketloader.stream") for m in _imported_modules(p))
    ]
    assert not bad


def test_both_streams_run_the_one_engine():
    from bucketloader.stream._buckets import BucketPass
    from bucketloader.stream._engine import Pass
    from bucketloader.stream._rows import RowPass

    assert issubclass(BucketPass, Pass) and issubclass(RowPass, Pass)
    for name in ("state_dict", "resume", "flush", "run", "_snapshot"):
        assert name not in vars(BucketPass) and name not in vars(RowPass), name


def test_the_packing_stream_keeps_its_old_address():
    from bucketloader.pack import PackIterable as old

    assert old is PackIterable


def test_bucket_iterable_takes_at_most_ten_parameters():
    params = inspect.signature(BucketIterable.__init__).parameters
    assert len(params) - 1 <= 10  # self aside
    with pytest.raises(
        TypeError,
        match=r"^BucketIterable got an unexpected option batchsize=2; did you mean batch_size=",
    ):
        BucketIterable([[1]], boundaries=[4], batchsize=2)


def test_one_shape_planner_serves_the_spec_and_both_streams(monkeypatch):
    calls = []
    real_plan, real_rows = shapes.plan_shapes, shapes.row_batch_sizes

    def plan(*args, **kwargs):
        calls.append("plan")
        return real_plan(*args, **kwargs)

    def rows(*args, **kwargs):
        calls.append("rows")
        return real_rows(*args, **kwargs)

    import bucketloader.pack.spec as pack_spec
    import bucketloader.plan.spec as plan_spec
    import bucketloader.stream.iterable as iterable
    import bucketloader.stream.packing as packing

    for module in (plan_spec, iterable):
        monkeypatch.setattr(module, "plan_shapes", plan)
    for module in (pack_spec, packing):
        monkeypatch.setattr(module, "row_batch_sizes", rows)
    spec = BucketSpec.build([3, 4, 9, 10], num_buckets=2, batch_size=2)
    stream = BucketIterable([[1] * 3], boundaries=spec, batch_size=2)
    PackIterable([[1] * 3], row_length=8, batch_size=2)
    bucketloader.PackSampler([3, 5], row_length=8, batch_size=1)
    assert calls == ["plan", "plan", "rows", "rows"]
    np.testing.assert_array_equal(stream.boundaries, spec.boundaries[0][0])


def test_rank_discovery_and_the_device_choice_live_in_one_module():
    hits = {
        needle: sorted(
            str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if needle in p.read_text()
        )
        for needle in ("get_world_size(", '"nccl"', "os.replace(")
    }
    assert hits == {
        "get_world_size(": ["_dist.py"],
        '"nccl"': ["_dist.py"],
        "os.replace(": ["_files.py"],  # every file the library writes goes through write_atomic
    }


def test_the_pre_1_0_aliases_are_gone():
    import bucketloader.stream as stream

    assert not hasattr(stream, "bucketize")
    assert not hasattr(BucketIterable, "stats")


@pytest.mark.parametrize(
    "entry",
    ["analyze", "analyze_costs", "recommend", "sampler", "spec", "compute_boundaries"],
)
def test_each_entry_checks_the_lengths_once_and_counts_them_once(monkeypatch, entry):
    import bucketloader._validation as validation
    from bucketloader.histogram import LengthHistogram

    lengths = np.arange(1, 3001) % 97 + 1
    checks, hists = [], []
    real_check, real_init = validation._check_lengths, LengthHistogram.__init__

    def check(value, name, allowed):
        if np.size(value) == lengths.size:  # the data, not the boundaries
            checks.append(name)
        return real_check(value, name, allowed)

    def init(self, *args, **kwargs):
        hists.append(1)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(validation, "_check_lengths", check)
    monkeypatch.setattr(LengthHistogram, "__init__", init)
    costs = {"compile_seconds_per_shape": 1.0, "seconds_per_step": 0.1, "seconds_per_token": 0.0}
    calls = {
        "analyze": lambda: bucketloader.analyze(lengths, num_buckets=[2, 4], batch_size=8),
        "analyze_costs": lambda: bucketloader.analyze(
            lengths, num_buckets=[2, 4], batch_size=8, costs=costs
        ),
        "recommend": lambda: bucketloader.recommend_num_buckets(
            lengths, num_buckets=[2, 4], max_tokens=512
        ),
        "sampler": lambda: bucketloader.BucketSampler(lengths, num_buckets=4, batch_size=8),
        "spec": lambda: BucketSpec.build(lengths, num_buckets=3, max_tokens=512),
        "compute_boundaries": lambda: bucketloader.compute_boundaries(lengths, 4),
    }
    calls[entry]()
    assert len(checks) == 1, checks
    assert len(hists) == 1


def test_both_streams_give_the_same_report():
    docs = [{"input_ids": [1] * n} for n in [5, 3, 2, 6, 2, 4, 7]]
    streams = [
        BucketIterable(docs, length_fn="input_ids", boundaries=[4, 8], batch_size=2),
        PackIterable(docs, length_fn="input_ids", row_length=8, batch_size=2),
    ]
    for stream in streams:
        batches = list(stream)
        report = stream.report()
        assert report.source == "stream" and report.batches_done == len(batches)
        assert report.totals["samples"] == len(docs)
        assert sum(c["real"] for c in report.cells) == sum(len(d["input_ids"]) for d in docs)
        assert report.padding >= 0 and {tuple(c["shape"]) for c in report.cells} <= set(
            stream.shapes
        )


def test_every_producer_speaks_the_one_protocol():
    """DESIGN: every producer speaks one protocol (shapes, collator(), report(), state_dict() /
    load_state_dict(), set_epoch()). s27: ShardedSampler's report had no padding, totals,
    position, as_dict() or str(); EvalSampler's said epoch 0 and every batch left; PackIterable's
    said batches_left=None after its pass."""
    import json

    from bucketloader import BucketSampler, PackSampler
    from bucketloader.evaluation import EvalSampler
    from bucketloader.sharded import ShardedSampler

    lengths = [5, 3, 2, 6, 2, 4, 7, 1, 8, 3, 5, 6]
    docs = [{"input_ids": [1] * n} for n in lengths]
    make = {
        "BucketSampler": lambda: BucketSampler(lengths, num_buckets=2, batch_size=2),
        "EvalSampler": lambda: EvalSampler(lengths, num_buckets=2, batch_size=2),
        "PackSampler": lambda: PackSampler(lengths, row_length=8, batch_size=2),
        "ShardedSampler": lambda: ShardedSampler(
            lengths, num_buckets=2, batch_size=2, num_replicas=1, rank=0
        ),
        "BucketIterable": lambda: BucketIterable(
            docs, length_fn="input_ids", boundaries=[4, 8], batch_size=2
        ),
        "PackIterable": lambda: PackIterable(
            docs, length_fn="input_ids", row_length=8, batch_size=2
        ),
    }
    states = {}
    for name, producer in ((name, new()) for name, new in make.items()):
        assert producer.shapes and callable(producer.collator())
        producer.set_epoch(1)
        it = iter(producer)
        next(it)
        report = producer.report()
        assert (report.epoch, report.batches_done) == (1, 1), name
        rest = sum(1 for _ in it)
        report = producer.report()
        assert (report.batches_done, report.batches_left) == (rest + 1, 0), name
        assert report.padding >= 0 and report.totals["batches"] == rest + 1, name
        assert json.loads(json.dumps(report.as_dict()))["batches_done"] == rest + 1, name
        assert str(report).startswith("epoch 1 ("), name
        states[name] = json.loads(json.dumps(producer.state_dict()))
        make[name]().load_state_dict(states[name])  # its own kind loads
    for saved, other in itertools.permutations(make, 2):  # another kind: named
        with pytest.raises(ValueError, match=rf"^state is (an? {saved}|a stream)'s"):
            make[other]().load_state_dict(states[saved])


def _public_callables():
    """Every public function, class and public method reachable through a package's
    ``__all__`` (the library's documented surface)."""
    import importlib
    import inspect
    import pkgutil

    seen = set()
    for info in [None, *pkgutil.walk_packages(bucketloader.__path__, "bucketloader.")]:
        name = "bucketloader" if info is None else info.name
        if info is not None and (not info.ispkg or any(p.startswith("_") for p in name.split("."))):
            continue
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):
            obj = getattr(module, public)
            if inspect.isclass(obj):
                if "__init__" in vars(obj):
                    yield f"{public}", obj.__init__
                for attr, member in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(member, (classmethod, staticmethod)):
                        member = member.__func__
                    if inspect.isfunction(member) and id(member) not in seen:
                        seen.add(id(member))
                        yield f"{public}.{attr}", member
            elif inspect.isfunction(obj) and id(obj) not in seen:
                seen.add(id(obj))
                yield public, obj


def test_at_most_15_percent_of_public_parameters_are_annotated_any():
    import inspect

    total, loose = 0, []
    for name, fn in _public_callables():
        for p in inspect.signature(fn).parameters.values():
            if p.name in ("self", "cls"):
                continue
            total += 1
            note = p.annotation if isinstance(p.annotation, str) else repr(p.annotation)
            if p.annotation is inspect.Parameter.empty or note == "Any" or "| Any" in note:
                loose.append(f"{name}({p.name})")
    assert total > 300  # the whole documented surface was walked
    assert len(loose) / total <= 0.15, (len(loose), total, loose)
