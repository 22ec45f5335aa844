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
  global generator, so dropout masks and data order after precompile are those without it.

Snapshots of accelerator tensors are kept on the CPU (precompile must not double the GPU memory a
model needs). The restore is bit-exact: ``tests/test_compile.py`` compares every parameter,
buffer and optimizer-state tensor before and after.

NOTE [ A compiled optimizer step and a fresh optimizer ]
A compiled ``optimizer.step()`` guards on the identity of its state tensors (dynamo marks them as
static addresses). A fresh optimizer has no state until its first step, so restoring it exactly
(empty) invalidates the optimizer graph that precompile traced: training retraces that one graph
at step 0 (shape-independent, one per optimizer, served by the inductor cache when warm). The
per-shape graphs (forward and backward) are unaffected. Precompiling after the optimizer has
state (a resumed run) retraces nothing.
"""

from __future__ import annotations

import copy
import random
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

#: How deep discovery follows functions and objects from the step.
_MAX_DEPTH = 4


def discover(step: Callable[..., Any]) -> tuple[list[Any], list[Any]]:
    """What the step reaches: ``(objects, compiled)``.

    ``objects``: the modules, optimizers and stateful objects (schedulers, scalers) that the step
    reaches through its bound ``self``, its closure, its default arguments, the globals its code
    names (and those of the functions it references), compiled wrappers' originals,
    ``functools.partial`` arguments and the attributes of a callable object. ``compiled``: the
    ``torch.compile`` wrappers met on the way (compiled modules and functions).
    """
    found: dict[int, Any] = {}
    compiled: dict[int, Any] = {}
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > _MAX_DEPTH:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            orig = getattr(obj, "_orig_mod", None)  # torch.compile(module)
            module = orig if isinstance(orig, torch.nn.Module) else obj
            if module is not obj:
                compiled.setdefault(id(obj), obj)
            found.setdefault(id(module), module)
            return
        if isinstance(obj, torch.optim.Optimizer) or _is_stateful(obj):
            found.setdefault(id(obj), obj)
            return
        if isinstance(obj, types.ModuleType) or isinstance(obj, type):
            return
        if isinstance(obj, (list, tuple)) and len(obj) <= 64:
            for item in obj:
                visit(item, depth + 1)
            return
        if isinstance(obj, dict) and len(obj) <= 64:
            for item in obj.values():
                visit(item, depth + 1)
            return
        orig = getattr(obj, "_torchdynamo_orig_callable", None)
        if orig is not None and orig is not obj:  # torch.compile(function)
            compiled.setdefault(id(obj), obj)
            visit(orig, depth)
        if isinstance(obj, types.MethodType):
            visit(obj.__self__, depth + 1)
            visit(obj.__func__, depth)
            return
        func = getattr(obj, "func", None)  # functools.partial
        if callable(func) and hasattr(obj, "args") and hasattr(obj, "keywords"):
            visit(func, depth)
            for item in (*obj.args, *obj.keywords.values()):
                visit(item, depth + 1)
            return
        if isinstance(obj, types.FunctionType):
            if _library(obj):
                return
            for cell in obj.__closure__ or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
            for item in (*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()):
                visit(item, depth + 1)
            for name in _names(obj.__code__):
                if name in obj.__globals__:
                    visit(obj.__globals__[name], depth + 1)
            return
        if callable(obj) and hasattr(obj, "__dict__") and not _library(type(obj)):
            for item in vars(obj).values():
                visit(item, depth + 1)

    visit(step, 0)
    return list(found.values()), list(compiled.values())


def _library(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in {"torch", "numpy", "builtins", "functools"}


def _is_stateful(obj: Any) -> bool:
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def describe(obj: Any) -> str:
    """A short name for the report: ``Model (module)``, ``AdamW (optimizer)``."""
    kind = (
        "module"
        if isinstance(obj, torch.nn.Module)
        else "optimizer"
        if isinstance(obj, torch.optim.Optimizer)
        else "state_dict"
    )
    return f"{type(obj).__name__} ({kind})"


def check_restorable(objects: Any) -> list[Any]:
    """``restore=`` as a list of modules, optimizers and objects with state_dict/load_state_dict."""
    items = [objects] if not isinstance(objects, (list, tuple)) else list(objects)
    out = []
    for pos, obj in enumerate(items):
        if isinstance(obj, torch.nn.Module):
            orig = getattr(obj, "_orig_mod", None)
            out.append(orig if isinstance(orig, torch.nn.Module) else obj)
        elif isinstance(obj, torch.optim.Optimizer) or _is_stateful(obj):
            out.append(obj)
        else:
            raise TypeError(
                f"restore must list modules, optimizers and objects with state_dict() and "
                f"load_state_dict(), got {type(obj).__name__} at position {pos}"
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
        seen: set[int] = set()
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                self._module(obj, seen)
            elif isinstance(obj, torch.optim.Optimizer):
                self._optim.append((obj, *self._optimizer(obj)))
            else:
                self._stateful.append((obj, copy.deepcopy(obj.state_dict())))
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

    def restore(self) -> None:
        """Put every snapshotted value back, in the same objects."""
        for owner, name, t, saved in self._tensors:
            if owner._parameters.get(name) is not t and owner._buffers.get(name) is not t:
                setattr(owner, name, t)
            _put(t, saved)
        for t, g, saved_grad in self._grads:
            if g is None or saved_grad is None:
                t.grad = None
            else:
                _put(g, saved_grad)
                if t.grad is not g:
                    t.grad = g
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
        _set_rng_state(self._rng)


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
