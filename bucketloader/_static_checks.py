"""Argument checks for :mod:`bucketloader.static`, run at the Python boundary before any tracing.

Messages follow the project's one voice (see ``_validation.py``): ``<name> must be <rule>, got
<name>=<value>`` plus the fix. Data-dependent checks (binary labels) run only in eager mode on CPU:
under tracing they would be a graph break, and on CUDA a host synchronisation.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from bucketloader._static_select import draw_seed

#: Row length limit: positions are int32 and each Feistel half must stay below 2**15.
MAX_CANDIDATES = 2**30


def describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"


def check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{name} must be an int >= 1, got {name}={value!r}")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {name}={value!r}")
    return value  # type: ignore[return-value]  # a SymInt under dynamic=True


def check_fraction(value: object) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and 0.0 <= value <= 1.0:  # type: ignore[operator]  # NaN and inf fail the range
        return value  # type: ignore[return-value]
    raise (ValueError if ok else TypeError)(
        f"positive_fraction must be a number in [0.0, 1.0], got positive_fraction={value!r}"
    )


def check_length(n: int) -> None:
    if n > MAX_CANDIDATES:
        raise ValueError(
            f"the candidate dimension must hold at most 2**30 entries, got N={n}; "
            "split the rows into a leading batch dimension"
        )


def check_pair(values: object, labels: object) -> None:
    if not isinstance(values, Tensor) or values.dim() < 2:
        raise TypeError(f"values must be a tensor of shape [..., N, F], got {describe(values)}")
    if not isinstance(labels, Tensor):
        raise TypeError(f"labels must be a tensor of shape [..., N], got {describe(labels)}")
    if labels.shape != values.shape[:-1]:
        raise ValueError(
            f"labels must have shape values.shape[:-1]={tuple(values.shape[:-1])}, got "
            f"labels.shape={tuple(labels.shape)}; values is [..., N, F] and labels [..., N]"
        )
    if labels.device != values.device:
        raise ValueError(
            f"labels must be on values.device={values.device}, got labels.device={labels.device}"
        )
    if labels.is_complex():
        raise TypeError(f"labels must be bool or real 0/1, got labels.dtype={labels.dtype}")
    check_length(labels.shape[-1])
    # Data-dependent check: eager and CPU only (under tracing it would be a graph break, on CUDA a
    # synchronisation). Labels are read as `labels != 0` either way.
    if labels.dtype == torch.bool or torch.compiler.is_compiling() or labels.device.type != "cpu":
        return
    bad = (labels != 0) & (labels != 1)
    if bad.any():
        example = labels[bad][0].item()
        raise ValueError(
            f"labels must be binary (bool, or 0 and 1), got a label of {example!r}; "
            "map classes to 0/1 first, e.g. labels == positive_class"
        )


def check_mask(mask: object, labels: Tensor) -> Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be None or a bool tensor like labels, got {describe(mask)}")
    if mask.shape != labels.shape or mask.device != labels.device:
        raise ValueError(
            f"mask must have labels.shape={tuple(labels.shape)} on {labels.device}, got "
            f"mask.shape={tuple(mask.shape)} on {mask.device}"
        )
    return mask


def check_reduction(x: object, mask: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a tensor, got {describe(x)}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor broadcastable to x, got {describe(mask)}")
    try:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError:
        shape = None
    if shape != x.shape:
        raise ValueError(
            f"mask must be broadcastable to x.shape={tuple(x.shape)}, got "
            f"mask.shape={tuple(mask.shape)}"
        )


def resolve_seed(
    seed: int | Tensor | None, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """The 0-d int64 seed tensor on ``device``: from ``seed``, ``generator`` or fresh."""
    if seed is not None and generator is not None:
        raise ValueError("pass either seed or generator, not both, got both")
    if seed is not None:
        if isinstance(seed, Tensor):
            if seed.numel() != 1 or seed.is_floating_point() or seed.dtype == torch.bool:
                raise TypeError(
                    f"seed must be an int or a 0-d integer tensor, got {describe(seed)}"
                )
            # non_blocking: a blocking host-to-device copy synchronises the stream
            return seed.reshape(()).to(device=device, dtype=torch.int64, non_blocking=True)
        if isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63:
            raise TypeError(f"seed must be an int or a 0-d integer tensor, got seed={seed!r}")
        return torch.tensor(seed, dtype=torch.int64).to(device, non_blocking=True)
    if generator is not None:
        if torch.compiler.is_compiling():
            raise ValueError(
                "generator is not supported under torch.compile (Dynamo cannot trace a "
                "torch.Generator); pass seed=<int or 0-d int tensor drawn outside> instead"
            )
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {describe(generator)}")
        if generator.device.type != torch.device(device).type:
            raise ValueError(
                f"generator must be on the data's device {device}, got "
                f"generator.device={generator.device}; create it with torch.Generator({device!r})"
            )
    return draw_seed(generator, device)
