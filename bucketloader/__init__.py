"""bucketloader: static-shape length bucketing for PyTorch data loading.

Pads each sample up to one of a few bucket boundaries chosen to minimise padding, and builds
batches whose shapes are exactly a small planned set. The data flow, one subpackage or module per
step: lengths -> :class:`LengthHistogram` -> a strategy (:mod:`bucketloader.strategies`) ->
boundaries (:func:`compute_boundaries`, cached by :class:`BucketCache`) -> a plan
(:class:`BucketSpec`, batch sizes by a :class:`TokenBudget`; :mod:`bucketloader.plan`) ->
batches (:class:`BucketSampler`, :class:`BucketIterable` for streams, :class:`EvalSampler` for
evaluation, :class:`PackSampler` for packed rows) -> tensors of exactly the planned shapes
(:class:`PadCollator`) -> a model compiled once per shape (:func:`precompile`).
Beside them: :mod:`bucketloader.analysis` (:func:`analyze`, :func:`recommend_num_buckets`,
:func:`calibrate`), :mod:`bucketloader.hf` (Hugging Face ``datasets`` and ``Trainer``),
:mod:`bucketloader.static` (sync-free subsampling inside models) and the ``bucketloader`` command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bucketloader._version import __version__

if TYPE_CHECKING:
    from bucketloader.analysis import analyze, recommend_num_buckets
    from bucketloader.analysis.calibration import calibrate
    from bucketloader.cache import BucketCache
    from bucketloader.collate import PadCollator
    from bucketloader.compile import precompile
    from bucketloader.evaluation import EvalSampler
    from bucketloader.histogram import LengthHistogram
    from bucketloader.pack import PackSampler
    from bucketloader.plan import BucketSpec, TokenBudget
    from bucketloader.sampler import BucketSampler
    from bucketloader.solve import compute_boundaries
    from bucketloader.strategies import STRATEGIES, register_strategy
    from bucketloader.stream import BucketIterable

# NOTE [ Lazy public names ]
# The public names are imported on first use (PEP 562), so that ``import bucketloader`` and the
# ``bucketloader`` command's ``--help`` do not pay for importing torch (about 2 s of CPU) before
# anything needs it. ``bucketloader.BucketSampler`` is the very class of
# ``bucketloader.sampler``; the ``TYPE_CHECKING`` block gives type checkers and IDEs the same names.
# A subpackage (``bucketloader.plan``) is imported on first attribute access too, as the eager
# package used to make them all available after ``import bucketloader``.
_HOMES = {
    "STRATEGIES": "strategies",
    "BucketCache": "cache",
    "BucketIterable": "stream",
    "BucketSampler": "sampler",
    "BucketSpec": "plan",
    "EvalSampler": "evaluation",
    "LengthHistogram": "histogram",
    "PackSampler": "pack",
    "PadCollator": "collate",
    "TokenBudget": "plan",
    "analyze": "analysis",
    "calibrate": "analysis",
    "compute_boundaries": "solve",
    "precompile": "compile",
    "recommend_num_buckets": "analysis",
    "register_strategy": "strategies",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
        globals()[name] = value  # the next access is a plain attribute
        return value
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "STRATEGIES",
    "BucketCache",
    "BucketIterable",
    "BucketSampler",
    "BucketSpec",
    "EvalSampler",
    "LengthHistogram",
    "PackSampler",
    "PadCollator",
    "TokenBudget",
    "__version__",
    "analyze",
    "calibrate",
    "compute_boundaries",
    "precompile",
    "recommend_num_buckets",
    "register_strategy",
]
