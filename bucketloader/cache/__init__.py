"""The solution cache: bucketing solutions keyed by SHA256, stored as JSON, shared across runs,
processes and ranks (see NOTE [ Cache key ] in :mod:`bucketloader.cache.store`)."""

from bucketloader.cache._io import default_cache_dir
from bucketloader.cache.store import BucketCache, CacheWarning

__all__ = ["BucketCache", "CacheWarning", "default_cache_dir"]
