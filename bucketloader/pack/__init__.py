"""Packing: whole documents share fixed-length rows, at a few planned shapes, near zero padding.

:class:`PackSampler` packs documents into rows of ``row_length`` tokens (near-optimal bin packing
over the length histogram, fitted once by :class:`PackSpec`, dealt afresh each epoch by
:func:`plan_pack_epoch`) and yields batches of ``B`` rows; :class:`PackCollator` lays a batch out
as ``input_ids``, ``labels`` (-100 at every document start), ``position_ids`` restarting per
document, ``document_ids`` and fixed-size ``cu_seqlens``; :mod:`bucketloader.pack.masks` turns
``document_ids`` into SDPA / eager masks and flex-attention block masks.
:class:`PackIterable` does the same for streams (online best-fit over a bounded buffer; split over
DDP ranks, ``steps_per_epoch`` equal steps of the one shape on every rank),
:class:`SplitDataset` cuts documents longer than a row into pieces first.
"""

from bucketloader.pack.collator import IGNORE_INDEX, PackCollator
from bucketloader.pack.epoch import PackPlan, plan_pack_epoch
from bucketloader.pack.masks import document_block_mask, document_mask, document_mask_mod
from bucketloader.pack.sampler import PackSampler
from bucketloader.pack.spec import PackSpec, PackTable
from bucketloader.pack.split import SplitDataset
from bucketloader.pack.stream import PackIterable

__all__ = [
    "IGNORE_INDEX",
    "PackCollator",
    "PackIterable",
    "PackPlan",
    "PackSampler",
    "PackSpec",
    "PackTable",
    "SplitDataset",
    "document_block_mask",
    "document_mask",
    "document_mask_mod",
    "plan_pack_epoch",
]
