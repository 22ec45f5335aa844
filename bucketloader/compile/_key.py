"""The compile-artifact key: what a compiled step's graphs depend on, hashed (see store.py)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import pickletools
import platform
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bucketloader._validation import release

#: The oldest torch precompile and CompileCache were tested on (docs/index.md, "Tested
#: versions"): torch 2.4 has neither inductor's cache-directory helpers
#: (``torch._inductor.runtime.cache_dir_utils``) nor a portable configuration snapshot that
#: ``environment`` can read (``save_config_portable`` fails there with a KeyError).
MIN_TORCH = (2, 8)


def torch_version() -> tuple[int, int]:
    """``(major, minor)`` of the torch in this process (``"2.4.1+cu121"`` -> ``(2, 4)``)."""
    return release(torch.__version__)


def check_torch(feature: str) -> None:
    """One clear error, naming ``feature``, the torch found and the upgrade, where this torch
    is older than :data:`MIN_TORCH` (the rest of the library runs from torch 2.1)."""
    if torch_version() < MIN_TORCH:
        want = ".".join(map(str, MIN_TORCH))
        raise RuntimeError(
            f"{feature} needs torch >= {want} (inductor's cache directory and configuration "
            f"snapshot), but this is torch {torch.__version__}; upgrade it "
            f"(pip install 'torch>={want}'), or compile without it: torch.compile alone works"
        )


#: Part of every key; bump when the key document changes meaning.
KEY_FORMAT = 1
#: dynamo settings that precompile itself changes, or that only log: not part of the key.
_DYNAMO_IGNORED = {
    "recompile_limit",
    "accumulated_recompile_limit",
    "cache_size_limit",
    "accumulated_cache_size_limit",
    "verbose",
    "suppress_errors",
}


def digest(doc: Any) -> str:
    """SHA256 hex of the canonical JSON of ``doc`` (sets sorted, other objects by ``str``)."""
    text = json.dumps(
        doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_canonical
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(json.dumps(x, sort_keys=True, default=_canonical) for x in obj)
    return str(obj)


def environment(devices: set[str]) -> dict[str, Any]:
    """torch, python, platform, the devices' kinds, threads and the compiler configurations."""
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor = {
        k: v
        for k, v in inductor_config.save_config_portable().items()
        if "compile_threads" not in k and "worker" not in k
    }
    dynamo = {
        k: v for k, v in dynamo_config.save_config_portable().items() if k not in _DYNAMO_IGNORED
    }
    return {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "cuda": torch.version.cuda,
        "python": ".".join(map(str, sys.version_info[:2])),
        # kernels' g++ command lines hold the python and torch include paths (a moved venv
        # recompiles every kernel), and -march=native: the compiler and the exact CPU matter
        "paths": [sys.prefix, os.path.dirname(torch.__file__)],
        "compiler": _compiler() if any(torch.device(d).type == "cpu" for d in devices) else None,
        "platform": f"{sys.platform}-{platform.machine()}",
        "devices": sorted(_device(d) for d in devices),
        "threads": torch.get_num_threads(),
        "pickled_as": pickle_home(),  # NOTE [ Where pickle finds torch's memory formats ]
        "inductor_config": digest(inductor),
        "dynamo_config": digest(dynamo),
        "functorch_config": digest(functorch_config.save_config_portable()),
    }


def pickle_home() -> str:
    """The module the C pickler names ``torch.contiguous_format`` by in this process.

    NOTE [ Where pickle finds torch's memory formats ]
    Inductor's FX-graph and AOTAutograd cache keys hash a pickle of every input's metadata,
    which holds its memory format. A ``torch.memory_format`` has no ``__module__``, so the C
    pickler (inductor's) names ``torch.contiguous_format`` by the first module in
    ``sys.modules``, ``__main__`` skipped, through which that name resolves: ``torch._utils``
    in a plain ``python`` run, but ``__mp_main__`` in a ``torch.multiprocessing.spawn`` child
    (the script imported again under that name, before torch; the pure-Python pickler skips
    it, bpo-42406, the C one does not in Python 3.11). So every graph a plain run compiled
    missed inductor's cache in spawned ranks, and back (``benchmarks/results/compile_spawn.md``:
    25-32 s for the first shape, 1.9-4.0 s for the others, against 11-21 s and 0.6-1.0 s warm,
    at load 12-19), while precompile's record of the shape said "recorded before". This name is in
    the compile key (``environment``), so the record misses where inductor's cache misses for
    it, whatever changes the name (a launcher, a module imported before torch). Making inductor's
    keys agree would mean changing how the whole process pickles memory formats (a ``copyreg``
    entry, or ``sys.modules`` reordered): not done here.

    Example:
        >>> pickle_home() in sys.modules  # "torch._utils" in a plain run, "__mp_main__" in a
        ... # torch.multiprocessing.spawn child
        True
    """
    data = pickle.dumps(torch.contiguous_format)
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":  # (protocols 0-3: "module name")
            return str(arg).split(" ")[0]
        if isinstance(arg, str):  # (STACK_GLOBAL: the module, then the name)
            return arg
    return "unknown"


@functools.cache
def _compiler() -> str:
    """A digest of the C++ compiler's version text (what inductor builds CPU kernels with)."""
    try:
        from torch._inductor import cpp_builder

        return digest(cpp_builder.get_compiler_version_info(cpp_builder.get_cpp_compiler()))
    except Exception:  # no compiler found: inductor will say so when it needs one
        return "unknown"


@functools.cache
def _cpu() -> str:
    """The CPU model and a digest of its feature flags (Linux), else the processor name."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(line.split(":", 1) for line in text.splitlines()[:64] if ":" in line)
    model = " ".join(fields.get("model name\t", fields.get("model name", "")).split())
    flags = fields.get("flags\t", fields.get("flags", ""))
    return f"{model}|{digest(sorted(flags.split()))[:16]}"


def _device(name: str) -> str:
    dev = torch.device(name)
    if dev.type == "cpu":
        return f"cpu:{torch.backends.cpu.get_cpu_capability()}:{_cpu()}"
    if dev.type == "cuda" and torch.cuda.is_available():
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        cap = ".".join(map(str, torch.cuda.get_device_capability(idx)))
        return f"cuda:{torch.cuda.get_device_name(idx)}:sm{cap}"
    return dev.type


def code_digest(fn: Any, *, depth: int = 0, seen: set[int] | None = None) -> str:
    """SHA256 of a function's code, line numbers and file names left out, and of the user
    functions it references (closure and globals), a few levels deep."""
    seen = set() if seen is None else seen
    fn = getattr(fn, "_torchdynamo_orig_callable", fn)
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return ""
    seen.add(id(fn))
    parts: list[Any] = [_code_doc(code)]
    if depth < 3 and isinstance(fn, types.FunctionType):
        refs = [c.cell_contents for c in fn.__closure__ or () if _filled(c)]
        refs += [fn.__globals__[n] for n in sorted(code_names(code)) if n in fn.__globals__]
        for ref in refs:
            if isinstance(ref, types.FunctionType) and not _library(ref):
                parts.append(code_digest(ref, depth=depth + 1, seen=seen))
    return digest(parts)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names a code object and the functions nested in it use."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= code_names(const)
    return out


def _code_doc(code: types.CodeType) -> list[Any]:
    consts = [_code_doc(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, list(code.co_names), list(code.co_varnames)]


def _library(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in {"torch", "numpy", "builtins", "functools"}


def class_digest(cls: type) -> str:
    """SHA256 of every function defined by a class and its user base classes."""
    parts: list[Any] = []
    for klass in cls.__mro__:
        if klass is object or _library(klass):
            parts.append(klass.__qualname__)
            continue
        for name, value in sorted(vars(klass).items()):
            fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            if isinstance(fn, property):
                fn = fn.fget
            if isinstance(fn, types.FunctionType):
                parts.append([name, code_digest(fn)])
    return digest(parts)


def module_doc(module: torch.nn.Module) -> dict[str, Any]:
    """A module's architecture: classes' code, repr, parameter and buffer specs, modes."""
    classes = sorted({f"{type(m).__module__}.{type(m).__qualname__}" for m in module.modules()})
    code = {
        f"{type(m).__module__}.{type(m).__qualname__}": class_digest(type(m))
        for m in module.modules()
    }
    return {
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "code": digest([code[c] for c in classes]),
        "repr": digest(repr(module)),
        "parameters": [
            [n, list(p.shape), str(p.dtype), str(p.device), p.requires_grad]
            for n, p in module.named_parameters()
        ],
        "buffers": [[n, list(b.shape), str(b.dtype)] for n, b in module.named_buffers()],
        "training": [m.training for m in module.modules()],
    }


def optimizer_doc(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """An optimizer's class and hyper-parameters (tensor values by dtype and shape)."""
    groups = []
    for g in opt.param_groups:
        groups.append({k: _plain(v) for k, v in sorted(g.items()) if k != "params"})
    return {"class": f"{type(opt).__module__}.{type(opt).__qualname__}", "groups": groups}


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return ["tensor", str(v.dtype), list(v.shape)]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return type(v).__name__


def compile_options(compiled: list[Any]) -> list[Any]:
    """torch.compile options (backend, mode, dynamic, fullgraph) of compiled wrappers."""
    out = []
    for obj in compiled:
        ctx = getattr(obj, "dynamo_ctx", None)
        if ctx is None:
            for cell in getattr(obj, "__closure__", None) or ():
                if _filled(cell) and type(cell.cell_contents).__name__ == "OptimizeContext":
                    ctx = cell.cell_contents
        if ctx is None:
            continue
        out.append(
            {
                "backend": _backend_name(getattr(ctx, "callback", None)),
                "dynamic": repr(getattr(ctx, "_dynamic", None)),
                "fullgraph": bool(getattr(ctx, "fullgraph", False)),
            }
        )
    return out


def _backend_name(callback: Any) -> Any:
    """The compiler name (and inductor mode / options) behind a dynamo callback."""
    obj, seen = callback, set()
    while obj is not None and id(obj) not in seen:
        seen.add(id(obj))
        name = getattr(obj, "compiler_name", None) or getattr(obj, "_compiler_name", None)
        config = getattr(obj, "config", None)
        if isinstance(name, str):
            if isinstance(config, Mapping):
                return [name, _plain(sorted(config.items()))]
            return name
        obj = getattr(obj, "_torchdynamo_orig_backend", None) or getattr(obj, "compiler_fn", None)
    fn = getattr(callback, "__name__", None)
    return fn or "unknown"


def batch_signature(batch: Any, *, sizes: bool = True) -> Any:
    """The structure of a batch: containers, keys, and per tensor its dtype, device and shape
    (``sizes=False``: its number of dims only)."""
    if isinstance(batch, torch.Tensor):
        shape: Any = list(batch.shape) if sizes else batch.ndim
        return ["tensor", str(batch.dtype), str(batch.device), shape, batch.requires_grad]
    if isinstance(batch, np.ndarray):
        return ["ndarray", str(batch.dtype), list(batch.shape) if sizes else batch.ndim]
    if isinstance(batch, Mapping):
        return ["dict", [[repr(k), batch_signature(v, sizes=sizes)] for k, v in batch.items()]]
    if isinstance(batch, (list, tuple)):
        if batch and all(isinstance(x, str) for x in batch):
            return ["strings", len(batch) if sizes else None]
        return [type(batch).__name__, [batch_signature(x, sizes=sizes) for x in batch]]
    if isinstance(batch, (bool, int, float, str)) or batch is None:
        return type(batch).__name__
    return type(batch).__qualname__


def devices_of(batch: Any, objects: list[Any]) -> set[str]:
    """Device types of the batch's tensors and the modules' parameters."""
    out: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            out.add(str(x.device))
        elif isinstance(x, Mapping):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(batch)
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            out.update(str(p.device) for p in obj.parameters())
    return out or {"cpu"}


def key_document(
    step: Callable[..., Any], objects: list[Any], batch: Any, compiled: Sequence[Any] = ()
) -> dict[str, Any]:
    """Everything the model key hashes (NOTE [ The compile key ] in store.py)."""
    return {
        "format": f"bucketloader.compile/{KEY_FORMAT}",
        "environment": environment(devices_of(batch, objects)),
        "compile": compile_options(list(compiled)),
        "step": code_digest(step) or type(step).__qualname__,
        "modules": [module_doc(o) for o in objects if isinstance(o, torch.nn.Module)],
        "optimizers": [optimizer_doc(o) for o in objects if isinstance(o, torch.optim.Optimizer)],
        "batch": batch_signature(batch, sizes=False),
    }
