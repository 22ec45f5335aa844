"""bucketloader: static-shape length bucketing for PyTorch data loading.

Pads each sample up to one of a few bucket boundaries chosen to minimise padding, and builds
batches whose shapes are exactly a small planned set. Submodules not imported here:
:mod:`bucketloader.hf` (Hugging Face ``datasets``, imported lazily) and
:mod:`bucketloader.static` (sync-free subsampling inside models).
"""

import importlib
from typing import TYPE_CHECKING, Any

from bucketloader.boundaries import assign_buckets, check_boundaries, padding_cost, padding_ratio
from bucketloader.cache import BucketCache
from bucketloader.histogram import LengthHistogram
from bucketloader.plan import BucketSpec, ShapeTable
from bucketloader.recommend import (
    Calibration,
    Candidate,
    Recommendation,
    calibrate,
    recommend_num_buckets,
)
from bucketloader.report import DynamicityReport, analyze
from bucketloader.solve import Solution, compute_boundaries, solve_boundaries
from bucketloader.strategies import STRATEGIES, StrategyResult, register_strategy

if TYPE_CHECKING:
    from bucketloader.collate import Field, PadCollator
    from bucketloader.sampler import BucketSampler
    from bucketloader.streaming import BucketIterable, bucketize, estimate

__version__ = "0.1.0"

# NOTE [ Lazy torch ]: the torch-backed names load on first use, so `import bucketloader` (and the
# `bucketloader report` / `precompute` command line) does not pay for importing torch.
_LAZY = {
    "BucketIterable": "bucketloader.streaming",
    "BucketSampler": "bucketloader.sampler",
    "Field": "bucketloader.collate",
    "PadCollator": "bucketloader.collate",
    "bucketize": "bucketloader.streaming",
    "estimate": "bucketloader.streaming",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bucketloader' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "STRATEGIES",
    "BucketCache",
    "BucketIterable",
    "BucketSampler",
    "BucketSpec",
    "Calibration",
    "Candidate",
    "DynamicityReport",
    "Field",
    "LengthHistogram",
    "PadCollator",
    "Recommendation",
    "ShapeTable",
    "Solution",
    "StrategyResult",
    "__version__",
    "analyze",
    "assign_buckets",
    "bucketize",
    "calibrate",
    "check_boundaries",
    "compute_boundaries",
    "estimate",
    "padding_cost",
    "padding_ratio",
    "recommend_num_buckets",
    "register_strategy",
    "solve_boundaries",
]
