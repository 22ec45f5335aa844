"""Filler rows of even batches (NOTE [ Even batches ]) against full batches, on every tests/data
set at k = 8 and 16, on 1 and 8 ranks.

``max_tokens`` = 64 x the longest sample (its padded size; COCO counts width x height), paired
sets with ``max_shapes=k``. Filler = masked rows x their padded size, per real element (repeats
that keep 8 ranks in step are not filler). Steps and shape counts are the same in both plans.

Run: ``PYTHONPATH=$PWD python benchmarks/filler.py`` (seconds); writes
``benchmarks/results/filler.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.plan import BucketSpec, TokenBudget  # noqa: E402
from bucketloader.plan.budget import size_values  # noqa: E402
from tests.conftest import REAL_DATASETS, load_real  # noqa: E402
from tests.test_even_batches import _filler_share  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "filler.md"


def main() -> None:
    lines = [
        "# Filler rows: even batches vs full batches (benchmarks/filler.py)",
        "",
        __doc__.split("\n\n")[1].replace("\n", " "),
        "",
        "| set | k | full, 1 rank | even, 1 rank | full, 8 ranks | even, 8 ranks | steps (1 / 8 "
        "ranks) | shapes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(REAL_DATASETS):
        x = load_real(name)
        size = "prod" if name == "coco" else "sum"
        budget = int(64 * size_values(x.reshape(len(x), -1), size).max())
        for k in (8, 16):
            opts = {"num_buckets": k, "size": size, "max_shapes": k if x.ndim == 2 else None}
            full = BucketSpec.build(x, max_tokens=TokenBudget(budget, balance=False), **opts)
            even = BucketSpec.build(x, max_tokens=budget, **opts)
            cells = []
            for reps in (1, 8):
                e = even.for_replicas(reps)
                assert (e.num_steps(reps) == full.num_steps(reps)).all()
                cells.append((_filler_share(full, reps), _filler_share(e, reps)))
            steps = f"{int(full.num_steps(1).sum())} / {int(full.num_steps(8).sum())}"
            lines.append(
                f"| {name} | {k} | {cells[0][0]:.2%} | {cells[0][1]:.2%} | {cells[1][0]:.2%} | "
                f"{cells[1][1]:.2%} | {steps} | {len(full.shape_table().shapes)} |"
            )
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
