"""Compile once: precompile a training step over the planned shapes, share the artifacts.

:func:`precompile` compiles your compiled step for every shape a plan promises, before step 1,
from batches the plan's own collator builds (:class:`ExampleBatches`, or any batch source with
``.shapes`` and ``.make_batch(shape)``), restoring the model's and optimizer's state exactly. On
several ranks each compiles its share and all load all. :class:`CompileCache` keeps the compiled
artifacts next to the bucket cache, keyed by model code, shapes, torch version and device, so a
rerun (a resume, a sweep) loads instead of compiling; its records tell
:func:`~bucketloader.analysis.recommend_num_buckets` which shapes are already paid for.
"""

from bucketloader.compile.batches import BatchSource, ExampleBatches
from bucketloader.compile.precompile import PrecompileReport, ShapeTiming, precompile
from bucketloader.compile.store import CompileCache, CompileCacheWarning, ShapeRecord

__all__ = [
    "BatchSource",
    "CompileCache",
    "CompileCacheWarning",
    "ExampleBatches",
    "PrecompileReport",
    "ShapeRecord",
    "ShapeTiming",
    "precompile",
]
