"""Packing: whole documents share fixed-length rows, at a few planned shapes, near zero padding.

:class:`PackSampler` packs documents into rows of ``row_length`` tokens (near-optimal bin packing
over the length histogram, fitted once by :class:`PackSpec`, dealt afresh each epoch by
:func:`plan_pack_epoch`) and yields batches of ``B`` rows; :class:`PackCollator` lays a batch out
as ``input_ids``, ``labels`` (-100 at every document start), ``position_ids`` restarting per
document, ``document_ids`` and fixed-size ``cu_seqlens`` (or, with :class:`MLMMasking`, masked-LM
``input_ids`` and ``labels``, masked per document); :mod:`bucketloader.pack.masks` turns
``document_ids`` into SDPA / eager masks and flex-attention block masks;
:class:`SplitDataset` cuts documents longer than a row into pieces first. The packing stream,
:class:`~bucketloader.stream.PackIterable`, lives with the other stream in
:mod:`bucketloader.stream` (``bucketloader.pack.PackIterable`` still resolves to it).
"""

from bucketloader.pack.collator import IGNORE_INDEX, PackCollator
from bucketloader.pack.epoch import PackPlan, plan_pack_epoch
from bucketloader.pack.masks import (
    document_block_mask,
    document_mask,
    document_mask_mod,
    sliding_window_mask,
)
from bucketloader.pack.mlm import MLMMasking
from bucketloader.pack.sampler import PackSampler
from bucketloader.pack.spec import PackSpec, PackTable
from bucketloader.pack.split import SplitDataset

__all__ = [
    "IGNORE_INDEX",
    "MLMMasking",
    "PackCollator",
    "PackPlan",
    "PackSampler",
    "PackSpec",
    "PackTable",
    "SplitDataset",
    "document_block_mask",
    "document_mask",
    "document_mask_mod",
    "plan_pack_epoch",
    "sliding_window_mask",
]


def __getattr__(name: str) -> object:
    """``bucketloader.pack.PackIterable``: the packing stream, which moved to
    :mod:`bucketloader.stream` (no module of ``pack`` imports ``stream``; this old name imports
    it on first use, as the package no longer imports every subpackage: NOTE [ Lazy public
    names ] in :mod:`bucketloader`)."""
    if name == "PackIterable":
        import importlib

        return importlib.import_module("bucketloader.stream").PackIterable  # type: ignore[no-any-return]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
