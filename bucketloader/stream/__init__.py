"""Streams: batches of exactly the planned shapes from any iterable (HF ``IterableDataset``,
torch ``IterableDataset``, a generator), resumable mid-epoch (also behind DataLoader workers), and
split over DDP ranks with the same number of steps and the same shape at every step
(``steps_per_epoch``).

Both streams run one engine (``_engine``: a worker's pass, its counters, snapshots, state and
exact resume) with one of two fillers: per-bucket buffers (``_buckets``, behind
:class:`BucketIterable` in ``iterable``) and online best-fit rows (``_rows``, behind
:class:`PackIterable` in ``packing``). Around them: ``estimate`` (boundaries from a stream's
head), ``source`` (who shards the source, how samples are measured, cut and resumed),
``counters`` (per-worker counters in shared memory), ``resume`` (the state's checks and the
resume behind DataLoader workers) and ``_schedule`` (the step schedule over ranks)."""

from bucketloader.stream.estimate import Estimate, estimate
from bucketloader.stream.iterable import BucketIterable
from bucketloader.stream.packing import PackIterable

__all__ = ["BucketIterable", "Estimate", "PackIterable", "estimate"]
