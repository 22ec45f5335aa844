"""Streams: batches of exactly the planned shapes from any iterable (HF ``IterableDataset``,
torch ``IterableDataset``, a generator), through per-bucket buffers, resumable mid-epoch (also
behind DataLoader workers), and split over DDP ranks with the same number of steps and the same
shape at every step (``steps_per_epoch``)."""

from bucketloader.stream.estimate import Estimate, estimate
from bucketloader.stream.iterable import BucketIterable, bucketize

__all__ = ["BucketIterable", "Estimate", "bucketize", "estimate"]
