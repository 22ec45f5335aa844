"""Planning: which batch shapes exist and which samples fill them, as pure functions.

``BucketSpec.build(lengths, ...)`` filters the lengths, fits boundaries and forms the
:class:`Cells` (planned shapes) with their batch sizes (:class:`TokenBudget` and the batch-size
rule); :func:`plan_epoch` turns a spec into one rank's batches for one epoch (a pure function of
seed, epoch, ranks and weights); :class:`ShapeTable` is the small, picklable promise the collator
keeps; :class:`SamplingReport` says what an epoch did with the data.
"""

from bucketloader.plan.budget import TokenBudget, batch_sizes
from bucketloader.plan.cells import Cells
from bucketloader.plan.epoch import EpochPlan, plan_epoch
from bucketloader.plan.report import DataLossWarning, SamplingReport
from bucketloader.plan.spec import BucketSpec
from bucketloader.plan.table import PlannedBatch, ShapeTable

__all__ = [
    "BucketSpec",
    "Cells",
    "DataLossWarning",
    "EpochPlan",
    "PlannedBatch",
    "SamplingReport",
    "ShapeTable",
    "TokenBudget",
    "batch_sizes",
    "plan_epoch",
]
