"""Snapshot and exact restore of everything a training step mutates (for precompile).

NOTE [ Compiling without touching the model ]
precompile runs the user's real step on synthetic batches, on the real model and optimizer
objects: dynamo guards on those objects (modules, parameters, optimizer state tensors), so graphs
traced on copies would not serve the training loop. Everything the step mutates is therefore
snapshotted before and restored after, *in place*, keeping every tensor's identity:

* modules: every parameter and buffer (values copied back into the same tensors, and put back
  on the module if the step replaced them), ``.grad`` (the same tensor object, or ``None``) and
  every submodule's ``training`` flag. BatchNorm running statistics and ``num_batches_tracked``
  are buffers, so they come back too.
* optimizers: the per-parameter state (the same dicts and tensors; entries the step created are
  removed, so a fresh optimizer is fresh again) and every ``param_groups`` entry (``lr``,
  ``betas``, a tensor ``lr`` in place).
* other stateful objects (LR schedulers, ``GradScaler``): ``load_state_dict(deepcopy(state))``.
* random number generators: torch's CPU and CUDA generators, Python's ``random`` and numpy's
  global generator, so dropout masks and data order after precompile are those without it; and
  the generators the step reaches (a ``torch.Generator``, numpy's ``Generator`` or
  ``RandomState``, a ``random.Random``): the walk skipped them as library objects, so a step
  that drew from its own generator (``static.balanced_subsample(..., generator=g)``, an
  augmentation) left it advanced by one draw per planned shape (s22-compile).

Snapshots of accelerator tensors are kept on the CPU (precompile must not double the GPU memory a
model needs). The restore is bit-exact: ``tests/test_compile.py`` compares every parameter,
buffer and optimizer-state tensor before and after.

NOTE [ Each shape from the same grads ]
A step of forward and backward only (the optimizer steps outside it, as in the docs' examples)
leaves gradients behind, and the next shape's backward would add to them. Under
``torch.compile(mode="reduce-overhead")`` (CUDA graphs) a parameter's ``.grad`` after the first
backward is an output of that backward's graph, and once the next step begins
(``torch.compiler.cudagraph_mark_step_begin()``) the replay of another shape's graph overwrites
it: accumulating into it raises "accessing tensor output of CUDAGraphs that has been overwritten
by a subsequent run" (seen on an H100 with ``benchmarks/compile_e2e.py`` variant 5, session 7).
A training loop that clears the gradients with ``zero_grad()`` (``set_to_none=True``, the
default) between optimizer steps never meets this. So precompile puts the snapshotted gradients
back (``None`` for a fresh model) before every shape: each shape's step starts from the state
training's first step starts from. The forward and backward graphs do not depend on it (a
gradient is accumulated outside them); under compiled autograd, where the accumulation is traced,
precompile now traces the fresh-step state, which training with ``zero_grad()`` then reuses
(s7-rev1 counted the compiles in training after precompile: 3 -> 1 with ``zero_grad()``, 3 -> 4
with ``zero_grad(set_to_none=False)``, unchanged without compiled autograd). Confirmed on an H100
(session 8, torch 2.11): a classifier precompiled under CUDA graphs with 4 shapes, then trained;
with ``reset_grads`` switched off the same script fails with that error at precompile; with one
shape (the reset on) it passes. One shape without the reset was not run, so session 2's H200 log,
which placed the error on the first synthetic batch (that run's script is gone), remains
unexplained. compile_e2e's variant 5 ran.

NOTE [ A compiled optimizer step and a fresh optimizer ]
A compiled ``optimizer.step()`` guards on the identity of its state tensors (dynamo marks them as
static addresses). A fresh optimizer has no state until its first step, so restoring it exactly
(empty) invalidates the optimizer graph that precompile traced: training retraces that one graph
at step 0 (shape-independent, one per optimizer, served by the inductor cache when warm). The
per-shape graphs (forward and backward) are unaffected. Precompiling after the optimizer has
state (a resumed run) retraces nothing.

NOTE [ Finding what a step can change ]
With ``restore=None``, :func:`discover` walks everything the step can reach, at any depth: a bound
method's object, the attributes (``__dict__`` and ``__slots__``) of every user object and module
(a plain ``Trainer`` holding a model and an optimizer), closures and default arguments of every
function (a model six closures deep), the globals its code names (and attributes of user
modules it names), ``functools.partial`` arguments, ``__wrapped__`` functions, the methods of the
classes of the objects it meets, and containers. What it collects is restored: modules,
optimizers, objects with ``state_dict``/``load_state_dict``, loose tensors (a hand-rolled
parameter or an EMA buffer), the attribute bindings of user objects (``self.global_step``) and
the contents of the lists, dicts and sets met on the way. Library objects (``torch``, ``numpy``,
Python's builtin types) are not entered; other objects are, a ``SimpleNamespace`` or a Hugging
Face ``Trainer`` included, but the code of the standard library and of installed packages is not
walked (it changes what it is passed, and ``from_pretrained`` calling ``eval`` must not make a
model unprovable). Where the walk cannot see (a callable implemented in C outside
those libraries, code that calls ``eval`` / ``exec`` / ``globals()``, more than
:data:`_MAX_NODES` objects), it cannot prove that it found everything, and precompile refuses
with the fix (``restore=[model, optimizer, ...]``) instead of risking a silent training step.
"""

from __future__ import annotations

import builtins
import copy
import functools
import random
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from bucketloader.compile._key import code_names

#: Objects the walk may visit before it gives up proving that it found everything.
_MAX_NODES = 500_000
#: Values that hold no state a step could change in place.
_ATOMIC = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis))
#: Libraries whose objects hold no user training state (they are not entered).
_LIBRARIES = frozenset({"torch", "numpy", "builtins", "functools", "typing", "collections",
                        "abc", "enum", "re", "math", "random", "os", "posixpath", "ntpath",
                        "pathlib", "logging", "warnings", "itertools", "operator", "inspect",
                        "_operator", "_functools", "_collections", "_abc", "weakref", "copy",
                        "json", "time", "sys", "types", "dataclasses", "contextlib", "tqdm",
                        "pybind11_builtins"})  # fmt: skip
#: Names whose use makes a function's reach dynamic (what it touches is not in its code).
_DYNAMIC = frozenset({"eval", "exec", "globals", "locals", "vars", "__import__", "import_module"})
#: nn.Module internals the snapshot covers itself (parameters, buffers, submodules).
_MODULE_OWN = frozenset({"_parameters", "_buffers", "_modules"})


class Discovery:
    """What :func:`discover` found: ``objects`` to restore, ``compiled`` wrappers, ``unproven``
    (why the walk cannot prove it saw everything; empty when it can)."""

    def __init__(self) -> None:
        self.objects: dict[int, Any] = {}
        self.compiled: dict[int, Any] = {}
        self.unproven: list[str] = []


def discover(step: Callable[..., Any]) -> tuple[list[Any], list[Any], list[str]]:
    """What the step reaches: ``(objects, compiled, unproven)`` (NOTE [ Finding what a step can
    change ]).

    ``objects``: modules, optimizers, stateful objects, loose tensors, user objects (their
    attribute bindings) and containers (their contents), to snapshot and restore. ``compiled``:
    the ``torch.compile`` wrappers met on the way. ``unproven``: reasons the walk cannot prove it
    found everything the step can change (empty when it can).
    """
    found = Discovery()
    seen: set[int] = set()
    stack: list[Any] = [step]
    nodes = 0

    def unproven(reason: str) -> None:
        if reason not in found.unproven and len(found.unproven) < 8:
            found.unproven.append(reason)

    while stack:
        obj = stack.pop()
        if isinstance(obj, _ATOMIC) or id(obj) in seen:
            continue
        seen.add(id(obj))
        nodes += 1
        if nodes > _MAX_NODES:
            unproven(f"the step reaches more than {_MAX_NODES:,} objects")
            break
        stack.extend(_children(obj, found, unproven))
    return list(found.objects.values()), list(found.compiled.values()), found.unproven


def _children(obj: Any, found: Discovery, unproven: Callable[[str], None]) -> list[Any]:
    """Record ``obj`` if it holds state; return what the walk visits next."""
    out: list[Any] = []
    if isinstance(obj, torch.nn.Module):
        orig = getattr(obj, "_orig_mod", None)  # torch.compile(module)
        if isinstance(orig, torch.nn.Module) and orig is not obj:
            found.compiled.setdefault(id(obj), obj)
            return [orig]
        found.objects.setdefault(id(obj), obj)
        for sub in obj.modules():
            if not _library(type(sub)):
                out.extend(v for k, v in vars(sub).items() if k not in _MODULE_OWN)
                out.extend(_methods(type(sub)))
            else:  # hooks are user code even on torch's modules
                out.extend(v for k, v in vars(sub).items() if k.endswith("hooks"))
        return out
    if isinstance(obj, torch.Tensor) or is_generator(obj):
        found.objects.setdefault(id(obj), obj)
        return out
    if isinstance(obj, torch.optim.Optimizer) or _is_stateful(obj):
        found.objects.setdefault(id(obj), obj)
        if not _core(type(obj)):
            out.extend(_attributes(obj))
            out.extend(_methods(type(obj)))
        return out
    if isinstance(obj, type):
        return out
    if isinstance(obj, types.ModuleType):
        return out  # entered only through the names a function's code reads (below)
    if isinstance(obj, (list, set, dict)) and type(obj) in (list, set, dict):
        found.objects.setdefault(id(obj), obj)
    if isinstance(obj, dict) or (hasattr(obj, "items") and type(obj).__module__ == "collections"):
        return [*obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__module__ == "collections":
        try:
            return list(obj)
        except TypeError:
            return out
    orig = getattr(obj, "_torchdynamo_orig_callable", None)
    if orig is not None and orig is not obj:  # torch.compile(function)
        found.compiled.setdefault(id(obj), obj)
        out.append(orig)
    if isinstance(obj, types.MethodType):
        return [*out, obj.__self__, obj.__func__]
    if isinstance(obj, types.MethodWrapperType):  # fn.__call__, obj.__getitem__, ...
        return [*out, obj.__self__]
    if isinstance(obj, (classmethod, staticmethod)):
        return [*out, obj.__func__]
    if isinstance(obj, property):
        return [*out, obj.fget, obj.fset, obj.fdel]
    func = getattr(obj, "func", None)  # functools.partial
    if callable(func) and hasattr(obj, "args") and hasattr(obj, "keywords"):
        return [*out, func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, types.FunctionType):
        if _library(obj) or _installed(obj) or _ours(obj):
            return out  # library code: it changes what it is passed, which the walk sees
        out.extend(_function(obj, unproven))
        return out
    if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(obj, "__self__", None)  # e.g. a list's append: the list
        if type(owner) in (list, dict, set) or not (owner is None or _library(obj)):
            out.append(owner)
        return out  # a C function reaches only what it is passed
    if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.CodeType, types.FrameType)):
        return out
    if _core(type(obj)):
        return out  # torch's, numpy's, Python's builtin and our own objects hold no user state
    if not hasattr(obj, "__dict__") and not _slots(type(obj)):  # implemented in C
        if callable(obj) and not _stdlib(type(obj)):
            unproven(f"the step reaches {type(obj).__qualname__} objects, which it cannot enter")
        return out
    # a user object: its attributes, and the methods of its class
    found.objects.setdefault(id(obj), obj)
    return [*out, *_attributes(obj), *_methods(type(obj))]


def _function(fn: types.FunctionType, unproven: Callable[[str], None]) -> list[Any]:
    out: list[Any] = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    out.extend((*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()))
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None:
        out.append(wrapped)
    names = code_names(fn.__code__)
    if names & _DYNAMIC:
        unproven(
            f"{fn.__qualname__} calls {sorted(names & _DYNAMIC)[0]}(), so what it touches is "
            "not in its code"
        )
    g = fn.__globals__
    for name in names:
        if name in g:
            value = g[name]
        elif name in sys.modules and not hasattr(builtins, name):
            value = sys.modules[name]  # imported inside the function
        else:
            continue
        if isinstance(value, types.ModuleType):
            if not _library(value):  # mod.model: the attributes of a user module it names
                out.extend(getattr(value, n) for n in names if hasattr(value, n))
        else:
            out.append(value)
    return out


def _attributes(obj: Any) -> list[Any]:
    out = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    for name in _slots(type(obj)):
        if hasattr(obj, name):
            out.append(getattr(obj, name))
    return out


def _slots(cls: type) -> list[str]:
    out: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        out.extend([slots] if isinstance(slots, str) else slots)
    return [s for s in out if s not in ("__dict__", "__weakref__")]


def _methods(cls: type) -> list[Any]:
    """The functions of the user classes in ``cls``'s MRO (their code names globals too);
    installed packages' classes (a Hugging Face model's ``from_pretrained``) are library code."""
    out: list[Any] = []
    for klass in cls.__mro__:
        if _library(klass) or _installed(klass):
            continue
        for value in vars(klass).values():
            if isinstance(value, (types.FunctionType, classmethod, staticmethod, property)):
                out.append(value)
    return out


@functools.lru_cache(maxsize=4096)
def _installed_module(name: str) -> bool:
    if name.split(".")[0] in getattr(sys, "stdlib_module_names", ()):
        return True  # Python's own (argparse, threading, ...)
    path = getattr(sys.modules.get(name), "__file__", None) or ""
    return any(part in path for part in ("site-packages", "dist-packages"))


def _installed(obj: Any) -> bool:
    """Code of the standard library or an installed package (not the user's own):
    its functions and methods are not walked, its objects' attributes are."""
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and _installed_module(module)


#: Objects of these packages are not entered (a SimpleNamespace or a Namespace holding the model
#: is: only the libraries that never hold user state are left out).
_CORE = frozenset({"torch", "numpy", "pybind11_builtins", "bucketloader"})


def _ours(fn: types.FunctionType) -> bool:
    """bucketloader's own code (a doctest's functions carry our module name but not our file)."""
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] == "bucketloader" and not fn.__code__.co_filename.startswith("<")


def _core(cls: type) -> bool:
    module = getattr(cls, "__module__", None) or ""
    if module == "builtins":
        return getattr(builtins, cls.__name__, None) is cls
    return module.split(".")[0] in _CORE


def _stdlib(cls: type) -> bool:
    module = (getattr(cls, "__module__", None) or "").split(".")[0]
    return module.lstrip("_") in getattr(sys, "stdlib_module_names", ()) or module in (
        getattr(sys, "stdlib_module_names", ())
    )


def _library(obj: Any) -> bool:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    if (
        module == "builtins"
        and isinstance(obj, type)
        and getattr(builtins, obj.__name__, None) is not obj
    ):
        return False  # a class defined by exec'd code (a notebook cell, a docs runner)
    return (module or "").split(".")[0] in _LIBRARIES


#: Random number generators a step may own and draw from (their state is restored).
_GENERATORS = (torch.Generator, np.random.Generator, np.random.RandomState, random.Random)


def is_generator(obj: Any) -> bool:
    """A random number generator whose state :class:`Snapshot` keeps."""
    return isinstance(obj, _GENERATORS)


def _generator_state(g: Any) -> Any:
    if isinstance(g, torch.Generator):
        return g.get_state()  # (a copy)
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state  # (a fresh dict)
    if isinstance(g, np.random.RandomState):
        return g.get_state()
    return g.getstate()


def _set_generator_state(g: Any, state: Any) -> None:
    if isinstance(g, torch.Generator):
        g.set_state(state)
    elif isinstance(g, np.random.Generator):
        g.bit_generator.state = state
    elif isinstance(g, np.random.RandomState):
        g.set_state(state)
    else:
        g.setstate(state)


def _is_stateful(obj: Any) -> bool:
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


def describe(obj: Any) -> str:
    """A short name for the report: ``Model (module)``, ``AdamW (optimizer)``."""
    if isinstance(obj, torch.nn.Module):
        kind = "module"
    elif isinstance(obj, torch.optim.Optimizer):
        kind = "optimizer"
    elif is_generator(obj):
        kind = "random state"
    elif isinstance(obj, torch.Tensor):
        return f"tensor {tuple(obj.shape)} (values)"
    elif _is_stateful(obj):
        kind = "state_dict"
    elif type(obj) in (list, dict, set):
        kind = "contents"
    else:
        kind = "attributes"
    return f"{type(obj).__name__} ({kind})"


def reported(objects: list[Any]) -> list[Any]:
    """The objects a report lists: containers (restored too) are left out as noise."""
    return [o for o in objects if type(o) not in (list, dict, set)]


def check_restorable(objects: Any) -> list[Any]:
    """``restore=`` as a list of modules, optimizers and objects with state_dict/load_state_dict."""
    listed = isinstance(objects, (list, tuple))
    items = list(objects) if listed else [objects]
    out = []
    for pos, obj in enumerate(items):
        if isinstance(obj, torch.nn.Module):
            orig = getattr(obj, "_orig_mod", None)
            out.append(orig if isinstance(orig, torch.nn.Module) else obj)
        elif isinstance(obj, torch.optim.Optimizer) or _is_stateful(obj) or is_generator(obj):
            out.append(obj)
        else:
            raise TypeError(
                f"restore must list modules, optimizers, random generators and objects with "
                f"state_dict() and load_state_dict() (one, or a list of them), got "
                f"{type(obj).__name__}" + (f" at position {pos}" if listed else "")
            )
    return out


def _keep(t: torch.Tensor) -> torch.Tensor:
    """A detached copy, on the CPU for accelerator tensors."""
    t = t.detach()
    return t.to("cpu", copy=True) if t.device.type not in ("cpu", "meta") else t.clone()


def _put(dst: torch.Tensor, src: torch.Tensor) -> None:
    with torch.no_grad():
        dst.copy_(src)


class Snapshot:
    """The restorable state of ``objects`` and of the random generators, taken at construction.

    :meth:`restore` puts it back bit-exactly, in place (NOTE [ Compiling without touching the
    model ] in :mod:`bucketloader.compile._state`).
    """

    def __init__(self, objects: list[Any]) -> None:
        self.objects = objects
        self._tensors: list[tuple[Any, str, torch.Tensor, torch.Tensor]] = []
        self._grads: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = []
        self._training: list[tuple[torch.nn.Module, bool]] = []
        self._optim: list[tuple[Any, Any, Any]] = []
        self._stateful: list[tuple[Any, Any]] = []
        self._loose: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._attrs: list[tuple[Any, dict[str, Any], dict[str, Any]]] = []
        self._contents: list[tuple[Any, Any]] = []
        self._generators: list[tuple[Any, Any]] = []
        seen: set[int] = set()
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                self._module(obj, seen)
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                continue
            if isinstance(obj, torch.Tensor):
                if id(obj) not in seen:  # a loose tensor (not a module's parameter or buffer)
                    seen.add(id(obj))
                    self._loose.append((obj, _keep(obj)))
                    if obj.requires_grad:
                        g = obj.grad
                        self._grads.append((obj, g, None if g is None else _keep(g)))
            elif is_generator(obj):
                self._generators.append((obj, _generator_state(obj)))
            elif isinstance(obj, torch.optim.Optimizer):
                self._optim.append((obj, *self._optimizer(obj)))
            elif _is_stateful(obj):
                self._stateful.append((obj, copy.deepcopy(obj.state_dict())))
                if not isinstance(obj, type) and hasattr(obj, "__dict__"):
                    self._attrs.append((obj, vars(obj), dict(vars(obj))))
            elif type(obj) is list:
                self._contents.append((obj, list(obj)))
            elif type(obj) is dict:
                self._contents.append((obj, dict(obj)))
            elif type(obj) is set:
                self._contents.append((obj, set(obj)))
            elif hasattr(obj, "__dict__") or _slots(type(obj)):
                d = vars(obj) if hasattr(obj, "__dict__") else {}
                slots = {n: getattr(obj, n) for n in _slots(type(obj)) if hasattr(obj, n)}
                self._attrs.append((obj, d, {**dict(d), **{f"\0{n}": v for n, v in slots.items()}}))
        self._rng = _rng_state()

    def _module(self, module: torch.nn.Module, seen: set[int]) -> None:
        for owner in module.modules():
            self._training.append((owner, owner.training))
            for name, t in [*owner._parameters.items(), *owner._buffers.items()]:
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                self._tensors.append((owner, name, t, _keep(t)))
                if isinstance(t, torch.nn.Parameter) or t.requires_grad:
                    g = t.grad
                    self._grads.append((t, g, None if g is None else _keep(g)))

    @staticmethod
    def _optimizer(opt: torch.optim.Optimizer) -> tuple[Any, Any]:
        state = {}
        for p, entry in opt.state.items():
            kept = {
                k: (v, _keep(v)) if isinstance(v, torch.Tensor) else (None, copy.deepcopy(v))
                for k, v in entry.items()
            }
            state[p] = (entry, kept)
        groups = [
            (
                group,
                {
                    k: (v, _keep(v)) if isinstance(v, torch.Tensor) else (None, copy.deepcopy(v))
                    for k, v in group.items()
                    if k != "params"
                },
            )
            for group in opt.param_groups
        ]
        return state, groups

    def reset_grads(self) -> None:
        """Put the ``.grad`` of every snapshotted tensor back (NOTE [ Each shape from the same
        grads ]).

        Precompile calls this before each planned shape's step, so no step accumulates into the
        gradients the previous shape's backward left (under CUDA graphs those are the graph's
        outputs, which the next replay overwrites).
        """
        for t, g, saved_grad in self._grads:
            if g is None or saved_grad is None:
                t.grad = None
            else:
                _put(g, saved_grad)
                if t.grad is not g:
                    t.grad = g

    def restore(self) -> None:
        """Put every snapshotted value back, in the same objects."""
        for obj, d, saved in self._attrs:  # bindings first: a replaced model is put back
            for k in [k for k in d if k not in saved]:
                del d[k]
            for k, v in saved.items():
                if k.startswith("\0"):
                    object.__setattr__(obj, k[1:], v)
                elif d.get(k, _MISSING) is not v:
                    d[k] = v
        for box, saved in self._contents:
            if type(box) is list:
                box[:] = saved
            else:
                box.clear()
                box.update(saved)
        for t, saved_t in self._loose:
            _put(t, saved_t)
        for owner, name, t, saved_t in self._tensors:
            if owner._parameters.get(name) is not t and owner._buffers.get(name) is not t:
                setattr(owner, name, t)
            _put(t, saved_t)
        self.reset_grads()
        for module, training in self._training:
            module.training = training
        for opt, state, groups in self._optim:
            for p in [p for p in opt.state if p not in state]:
                del opt.state[p]
            for p, (entry, kept) in state.items():
                for k in [k for k in entry if k not in kept]:
                    del entry[k]
                for k, (ref, saved) in kept.items():
                    entry[k] = _restored(ref, saved)
                opt.state[p] = entry
            for group, kept in groups:
                for k in [k for k in group if k != "params" and k not in kept]:
                    del group[k]
                for k, (ref, saved) in kept.items():
                    group[k] = _restored(ref, saved)
        for obj, saved in self._stateful:
            obj.load_state_dict(copy.deepcopy(saved))
        for g, saved in self._generators:
            _set_generator_state(g, saved)
        _set_rng_state(self._rng)


_MISSING = object()


def _restored(ref: torch.Tensor | None, saved: Any) -> Any:
    if ref is None:
        return copy.deepcopy(saved)
    _put(ref, saved)
    return ref


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 (the global one is what user code draws from)
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
