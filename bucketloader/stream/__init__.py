"""Streams: batches of exactly the planned shapes from any iterable (HF ``IterableDataset``,
torch ``IterableDataset``, a generator), through per-bucket buffers, resumable mid-epoch."""

from bucketloader.stream.estimate import Estimate, estimate
from bucketloader.stream.iterable import BucketIterable, bucketize

__all__ = ["BucketIterable", "Estimate", "bucketize", "estimate"]
