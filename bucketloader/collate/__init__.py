"""Collation: pad every batch to exactly the shape its sampler planned.

:class:`PadCollator` is built from a plan's :class:`~bucketloader.plan.ShapeTable` (usually
``sampler.collator()``); :class:`Field` configures a variable-length field when the defaults
(:mod:`bucketloader.collate.fields`) do not fit.
"""

from bucketloader.collate.collator import PadCollator
from bucketloader.collate.fields import Field

__all__ = ["Field", "PadCollator"]
