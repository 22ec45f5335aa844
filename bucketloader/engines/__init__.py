"""Exact length histograms on the engines users already run, and bucket ids back onto them.

Engines are leaves (the core never imports them): each computes a histogram per shard where the
data lives and merges the shards exactly (NOTE [ Exact merge ] in :mod:`bucketloader.histogram`),
or adds a bucket-id column given boundaries. Their packages are optional extras, imported only
when a function is called, with an ``ImportError`` naming the extra:

- :func:`parquet_histogram` (``pip install 'bucketloader[arrow]'``): Parquet files, a directory
  or glob of them, or any ``pyarrow.dataset``, on one machine in bounded memory.
- :func:`ray_histogram`, :func:`ray_bucket_ids` (``pip install 'bucketloader[ray]'``): a
  ``ray.data.Dataset``, one histogram per block (``map_batches``), merged on the driver.
- :func:`spark_histogram`, :func:`spark_bucket_ids` (``pip install 'bucketloader[spark]'``): a
  ``pyspark.sql.DataFrame``, Spark doing the reduce (``groupBy(length).count()``).

Every scan returns a :class:`ScanResult` (the histogram, rows scanned, null rows counted).
Any other engine plugs in through :meth:`~bucketloader.LengthHistogram.merge` and the JSON form
(``docs/engines.md``).
"""

from bucketloader.engines._common import ScanResult
from bucketloader.engines.arrow import parquet_histogram
from bucketloader.engines.ray import ray_bucket_ids, ray_histogram
from bucketloader.engines.spark import spark_bucket_ids, spark_histogram

__all__ = [
    "ScanResult",
    "parquet_histogram",
    "ray_bucket_ids",
    "ray_histogram",
    "spark_bucket_ids",
    "spark_histogram",
]
