"""The per-bucket table that ``bucketloader precompute`` prints: samples, padding, planned shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from bucketloader.boundaries import assign_buckets


def bucket_table(
    lengths: np.ndarray, boundaries: Any, batch_size: int | None, max_tokens: int | None
) -> list[dict[str, Any]]:
    """One row per bucket; the shapes are the sampler's own (``BucketSpec`` + ``shape_table``).

    Example:
        >>> rows = bucket_table(np.array([3, 4, 9, 10, 10]), [4, 10], 2, None)
        >>> [(r["range"], r["samples"], r["shape"], r["batches"]) for r in rows]
        [('0..4', 2, [2, 4], 1), ('5..10', 3, [2, 10], 2)]
    """
    b = np.asarray(boundaries, dtype=np.int64)
    bucket = assign_buckets(lengths, b)
    n = np.bincount(bucket, minlength=b.size)
    real = np.bincount(bucket, weights=lengths, minlength=b.size).astype(np.int64)
    batch = np.zeros(b.size, dtype=np.int64)
    shapes: list[list[int] | None] = [None] * b.size
    if batch_size is not None or max_tokens is not None:
        from bucketloader.plan import BucketSpec, shape_table

        too_small = b[b > max_tokens] if max_tokens is not None else b[:0]
        if too_small.size:
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than the bucket length {int(too_small[0])}, "
                f"so that bucket's batch would be empty; raise --max-tokens to at least "
                f"{int(b[-1])}"
            )
        spec = BucketSpec.build(
            lengths, boundaries=b, batch_size=batch_size, max_tokens=max_tokens, last_batch="pad"
        )
        planned = {
            int(c[0]): int(bs) for c, bs in zip(spec.cell_lengths, spec.cell_batch, strict=True)
        }
        table = {tuple(int(x) for x in s) for s in shape_table(spec).shapes}
        for i, edge in enumerate(b):
            if int(edge) in planned:
                batch[i] = planned[int(edge)]
                shape = (int(batch[i]), int(edge))
                if shape not in table:  # pragma: no cover - a plan/table mismatch
                    raise RuntimeError(f"shape {shape} missing from the sampler's shape table")
                shapes[i] = list(shape)
    rows = []
    for i, edge in enumerate(b):
        lo = 0 if i == 0 else int(b[i - 1]) + 1
        pad = int(n[i] * edge - real[i])
        rows.append(
            {
                "bucket": i,
                "range": f"{lo}..{int(edge)}",
                "samples": int(n[i]),
                "padding_ratio": pad / real[i] if real[i] else 0.0,
                "batch_size": int(batch[i]) or None,
                "batches": int(-(-n[i] // batch[i])) if batch[i] else None,
                "shape": shapes[i],
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]], batch_size: int | None, max_tokens: int | None) -> str:
    """The rows as an aligned text table, with how the batch sizes were set."""
    how = (
        f"batch_size={batch_size}"
        if batch_size is not None
        else (f"max_tokens={max_tokens}" if max_tokens is not None else None)
    )
    head = f"{'bucket':>6} {'lengths':>19} {'samples':>9} {'padding':>9}"
    if how:
        head += f" {'batches':>8}  shape (B, L)"
    lines = [head]
    for r in rows:
        line = f"{r['bucket']:>6} {r['range']:>19} {r['samples']:>9,} {r['padding_ratio']:>9.2%}"
        if how:
            shape = "-" if r["shape"] is None else f"({r['shape'][0]}, {r['shape'][1]})"
            line += f" {r['batches'] or 0:>8,}  {shape}"
        lines.append(line)
    if how:
        shapes = {tuple(r["shape"]) for r in rows if r["shape"]}
        lines.append(
            f"planned shapes ({how}, last_batch='pad'): {len(shapes)}; every epoch of a "
            "BucketSampler with these boundaries yields only these"
        )
    else:
        lines.append("pass --batch-size or --max-tokens to see the planned batch shapes")
    return "\n".join(lines)
