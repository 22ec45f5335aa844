"""bucketloader: static-shape length bucketing for PyTorch data loading.

Pads each sample up to one of a few bucket boundaries chosen to minimise padding, and builds
batches whose shapes are exactly a small planned set.
"""

from bucketloader.boundaries import assign_buckets, check_boundaries, padding_cost, padding_ratio
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import Solution, compute_boundaries, solve_boundaries
from bucketloader.strategies import STRATEGIES, StrategyResult, register_strategy

__version__ = "0.1.0"

__all__ = [
    "STRATEGIES",
    "LengthHistogram",
    "Solution",
    "StrategyResult",
    "__version__",
    "assign_buckets",
    "check_boundaries",
    "compute_boundaries",
    "padding_cost",
    "padding_ratio",
    "register_strategy",
    "solve_boundaries",
]
