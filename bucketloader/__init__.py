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

from bucketloader._version import __version__
from bucketloader.analysis import analyze, calibrate, recommend_num_buckets
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
