"""The package's shape: an acyclic import graph, private names kept private, a small sorted public
API, and the core importable without the optional extras."""

from __future__ import annotations

import ast
import functools
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import bucketloader

ROOT = Path(bucketloader.__file__).parent
#: Top-level private modules that are shared infrastructure by design (DESIGN.md).
SHARED = {
    "bucketloader._arrow",
    "bucketloader._files",
    "bucketloader._validation",
    "bucketloader._types",
    "bucketloader._samples",
    "bucketloader._dist",
    "bucketloader._version",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


@functools.cache
def _imports(name: str, path: Path) -> tuple[tuple[str, str | None, int], ...]:
    """(imported module, imported name or None, line) for every project import, lazy ones too;
    ``if TYPE_CHECKING:`` blocks are left out (they never run). Parsed once per run (three
    tests walk every module's imports; the files do not change during a run)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            return
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*pkg, base] if base else pkg)
            for alias in node.names:
                out.append((base, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((alias.name, None, node.lineno) for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return tuple(
        (m, n, line) for m, n, line in out if m == "bucketloader" or m.startswith("bucketloader.")
    )


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for module, item, _ in _imports(name, path):
            target = f"{module}.{item}" if item and f"{module}.{item}" in MODULES else module
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def _concept(module: str) -> str:
    """The concept a module belongs to: its top-level subpackage or module under bucketloader."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_the_import_graph_is_acyclic():
    graph = _edges()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_module_imports_a_private_name_of_another_concept():
    bad = []
    for name, path in MODULES.items():
        for module, item, line in _imports(name, path):
            target = f"{module}.{item}" if item and f"{module}.{item}" in MODULES else module
            private_module = any(p.startswith("_") for p in target.split(".")[1:])
            private_name = item is not None and item.startswith("_") and target == module
            if not (private_module or private_name) or target in SHARED:
                continue
            if _concept(target) != _concept(name):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}.{item or ''}")
    assert not bad, "\n".join(bad)


def test_the_core_never_imports_the_layers_above_it():
    graph = _edges()
    above = {
        "bucketloader.analysis",
        "bucketloader.cli",
        "bucketloader.engines",
        "bucketloader.hf",
    }
    # bucketloader.__main__ is ``python -m bucketloader``: the command's entry point, on top
    core = [
        m
        for m in MODULES
        if _concept(m) not in above and m not in ("bucketloader", "bucketloader.__main__")
    ]
    bad = [f"{m} -> {t}" for m in core for t in graph[m] if _concept(t) in above]
    assert not bad, bad


def _isort_order(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, then Classes, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


_PUBLIC = (
    "analysis",
    "cache",
    "collate",
    "compile",
    "engines",
    "hf",
    "pack",
    "plan",
    "static",
    "stream",
)


def test_public_api_is_small_sorted_and_importable():
    names = bucketloader.__all__
    assert names == sorted(names, key=_isort_order)
    assert 10 <= len([n for n in names if not n.startswith("__")]) <= 16
    for name in names:
        assert getattr(bucketloader, name) is not None
    modules = _PUBLIC
    for module in (*modules, "strategies"):
        sub = __import__(f"bucketloader.{module}", fromlist=["__all__"])
        assert sub.__all__ == sorted(sub.__all__, key=_isort_order), module
        for name in sub.__all__:
            assert hasattr(sub, name), (module, name)


#: Public callables whose annotations ``typing.get_type_hints`` cannot evaluate: only torch's own
#: ``DataLoader`` class annotations (``Iterable`` imported under TYPE_CHECKING in torch), which
#: ``ResumableDataLoader`` inherits; its own methods are checked.
_HINTS_LEFT = {"ResumableDataLoader"}


def test_public_annotations_evaluate(monkeypatch):
    """``typing.get_type_hints`` raised NameError on ``parquet_histogram`` (``ParquetSource``),
    the Spark and Ray engines, ``hf.lengths``, ``analyze`` and ``BucketSampler`` (NOTE
    [ Annotations that introspection can evaluate ] in bucketloader._types)."""
    import typing

    members = []
    for sub in [bucketloader, *(importlib.import_module(f"bucketloader.{m}") for m in _PUBLIC)]:
        for name in sub.__all__:
            obj = getattr(sub, name)
            members.append((f"{sub.__name__}.{name}", name, obj))
            if isinstance(obj, type):
                members += [
                    (f"{sub.__name__}.{name}.{k}", f"{name}.{k}", v)
                    for k, v in vars(obj).items()
                    if callable(v) and (k == "__init__" or not k.startswith("_"))
                ]
    for name in ("ray", "ray.data", "pyspark", "pyspark.sql", "datasets"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: Any, and no import
    failed, seen = [], 0
    for where, label, member in members:
        if not callable(member) or label in _HINTS_LEFT:
            continue
        seen += 1
        try:
            typing.get_type_hints(member)
        except NameError as exc:
            failed.append(f"{where}: {exc}")
    assert seen > 100 and not failed, failed
    from bucketloader.engines import parquet_histogram

    assert typing.get_type_hints(parquet_histogram)["source"] is not None


def test_collecting_the_engines_imports_no_engine():
    """pytest probes every module attribute for ``_mock_name`` when it collects a module (here
    the doctests of the engines): the annotations' lazy modules imported Ray Data, pandas and
    pyspark into every test process at collection (about 1 s of CPU). A fresh process, since
    this one may have imported them for other tests."""
    code = (
        "import sys, pytest\n"
        "pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', "
        "'bucketloader/engines/ray.py', 'bucketloader/engines/spark.py'])\n"
        "heavy = ('ray', 'ray.data', 'pyspark', 'pandas')\n"
        "print('IMPORTED', sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT.parent, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "IMPORTED []" in out, out


def test_public_classes_live_in_public_modules():
    from bucketloader import collate, compile, hf, pack, plan, sampler, sharded, stream

    for obj in (
        bucketloader.BucketSampler,
        bucketloader.PadCollator,
        collate.Field,
        plan.ShapeTable,
        plan.Cells,
        sampler.GroupedDataset,
        bucketloader.EvalSampler,
        stream.BucketIterable,
        hf.BucketTrainer,
        pack.PackSampler,
        pack.PackCollator,
        stream.PackIterable,
        pack.PackSpec,
        pack.SplitDataset,
        compile.CompileCache,
        compile.ExampleBatches,
        compile.PrecompileReport,
        sharded.ShardedSampler,
    ):
        module = obj.__module__
        assert not any(p.startswith("_") for p in module.split(".")), (obj, module)
        assert getattr(sys.modules[module], obj.__name__) is obj


_NO_EXTRAS = r"""
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {"datasets", "transformers", "matplotlib", "pyarrow", "scipy"}:
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None

sys.meta_path.insert(0, Blocker())
import torch
from torch.utils.data import DataLoader
import bucketloader
from bucketloader import BucketSampler, BucketIterable, analyze, compute_boundaries

lengths = [3, 5, 8, 8, 13, 21, 2, 9]
sampler = BucketSampler(lengths, num_buckets=2, batch_size=2)
data = [torch.ones(n) for n in lengths]
for batch in DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collator()):
    assert tuple(batch["inputs"].shape) in sampler.shapes
stream = BucketIterable([[1] * n for n in lengths], boundaries=sampler.boundaries, batch_size=2)
assert sum(len(b) for b in stream) == len(lengths)
from bucketloader.pack import PackSampler, document_mask
from bucketloader.stream import PackIterable
packer = PackSampler(lengths, row_length=24, batch_size=2)
ids = [torch.ones(n, dtype=torch.long) for n in lengths]  # token ids are integers
for batch in DataLoader(ids, batch_sampler=packer, collate_fn=packer.collator()):
    assert tuple(batch["input_ids"].shape) in packer.shapes
    assert document_mask(batch["document_ids"]).shape == (2, 1, 24, 24)
docs = [[1] * n for n in lengths]
assert sum(len(b) for b in PackIterable(docs, row_length=24, batch_size=2)) == len(lengths)
assert analyze(lengths, num_buckets=[1, 2]).recommended is not None
compute_boundaries(lengths, 2, strategy="lp")
for module, extra in (("bucketloader.hf", "hf"),):
    try:
        __import__(module)
    except ImportError as exc:
        assert f"pip install 'bucketloader[{extra}]'" in str(exc), exc
    else:
        raise AssertionError(f"{module} imported without its extra")
try:
    analyze(lengths, num_buckets=[2]).plot("/tmp/never-written.png")
except ImportError as exc:
    assert "pip install 'bucketloader[plot]'" in str(exc), exc
else:
    raise AssertionError("plot() worked without matplotlib")
print("ok")
"""


def test_the_core_works_without_the_optional_extras():
    out = subprocess.run(
        [sys.executable, "-c", _NO_EXTRAS], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")


def test_version_everywhere(capsys):
    from importlib.metadata import version

    from bucketloader.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bucketloader {bucketloader.__version__}"
    out = subprocess.run(
        [sys.executable, "-m", "bucketloader.cli", "--version"], capture_output=True, text=True
    )
    assert out.stdout.strip() == f"bucketloader {bucketloader.__version__}"
    assert version("bucketloader") == bucketloader.__version__  # pyproject reads _version.py


def test_no_public_function_shadows_its_own_module():
    """``import bucketloader.analysis.calibrate as m`` gave the function ``calibrate`` (the
    package's attribute shadowed the submodule of the same name); the module is
    ``analysis.calibration`` now. No other subpackage may bind a name that is also a submodule
    (the ones left are listed, each a function named as its module)."""
    import inspect
    import pkgutil

    import bucketloader.analysis.calibration as m

    assert inspect.ismodule(m) and m.calibrate is bucketloader.calibrate
    shadowed = set()
    for info in pkgutil.walk_packages(bucketloader.__path__, "bucketloader."):
        if not info.ispkg:
            continue
        pkg = importlib.import_module(info.name)
        for sub in pkgutil.iter_modules(pkg.__path__):
            bound = getattr(pkg, sub.name, None)
            if bound is not None and not inspect.ismodule(bound):
                shadowed.add(f"{info.name}.{sub.name}")
    assert shadowed <= _SHADOWED_LEFT, shadowed - _SHADOWED_LEFT


#: Submodules a function of the same name shadows (``import pkg.mod as m`` gives the function),
#: left by s5-polish: renaming each module changes import paths that docs and users name.
_SHADOWED_LEFT = {
    "bucketloader.cli.main",  # the console script's entry point, bucketloader.cli:main
    "bucketloader.compile.precompile",
    "bucketloader.hf.lengths",
    "bucketloader.stream.estimate",
}
