"""Streams: batches of exactly the planned shapes from any iterable (HF ``IterableDataset``,
torch ``IterableDataset``, a generator), through per-bucket buffers, resumable mid-epoch (also
behind DataLoader workers), and split over DDP ranks with the same number of steps and the same
shape at every step (``steps_per_epoch``).

Modules: ``iterable`` (:class:`BucketIterable`, :func:`bucketize`), ``estimate`` (boundaries from
a stream's head), and the parts both streams share (this one and
:class:`~bucketloader.pack.PackIterable`): ``source`` (who shards the source, how samples are
measured, cut and resumed), ``counters`` (per-worker counters in shared memory) and ``resume``
(the state's checks and the resume behind DataLoader workers). ``_engine`` and ``_schedule`` are
this stream's machinery."""

from bucketloader.stream.estimate import Estimate, estimate
from bucketloader.stream.iterable import BucketIterable, bucketize

__all__ = ["BucketIterable", "Estimate", "bucketize", "estimate"]
