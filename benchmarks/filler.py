"""Filler rows and padding of three max_tokens plans, on every tests/data set at k = 8 and 16,
on 1 and 8 ranks: full batches (``TokenBudget(balance=False)``), even batches
(``TokenBudget(promote=False)``, NOTE [ Even batches ]) and the default, even batches with
leftovers promoted (NOTE [ Promotion of leftovers ]).

``max_tokens`` = 64 x the longest sample (its padded size; COCO counts width x height), paired
sets with ``max_shapes=k``. Filler = masked rows x their padded size, per real element (repeats
that keep 8 ranks in step are not filler). Padding = (padded - real) / real elements over the
epoch's batches, filler included. All figures are the samplers' own ``report()`` over every
rank (exact), seed 0.

The rule was chosen by measuring it against the other way to promote: *bottom-up*, shortest cell
first, a cell whose last global step would be partial sends those samples whole into the
smallest cell covering it (fairseq's way: one length's leftovers join the next length's
batches), and plans full batches of ``B`` rows for the rest (the column "padding: bottom-up",
from the plan's arithmetic: slots x padded size over real elements).

Run: ``PYTHONPATH=$PWD python benchmarks/filler.py`` (under a minute); writes
``benchmarks/results/filler.md``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bucketloader import BucketSampler  # noqa: E402
from bucketloader.plan import BucketSpec, TokenBudget  # noqa: E402
from bucketloader.plan.budget import even_batch, size_values  # noqa: E402
from tests.conftest import REAL_DATASETS, load_real  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "filler.md"


def measure(sampler: BucketSampler) -> dict[str, float]:
    """Filler share, padding share, steps, shapes and promoted samples of one epoch."""
    rep = sampler.report()
    size = size_values(sampler.spec.cell_lengths, sampler.spec.size)
    real = sum(int(c["real"]) for c in rep.cells)
    padded = sum(int(c["padded"]) for c in rep.cells)
    filler = sum(
        (int(c["shape"][0]) * int(c["batches"]) - int(c["rows"])) * int(s)
        for c, s in zip(rep.cells, size.tolist(), strict=True)
    )
    return {
        "filler": filler / real,
        "padding": (padded - real) / real,
        "steps": len(sampler),
        "shapes": len(sampler.shapes),
        "promoted": int(rep.totals.get("promoted", 0)),
        "seen": int(rep.totals["seen"]),
    }


def bottom_up(spec: BucketSpec, reps: int) -> tuple[float, int]:
    """(padding, steps) of the bottom-up rule (the module docstring), from its arithmetic."""
    rule = spec.rule
    assert rule is not None and rule.budget is not None
    full = rule.sizes(spec.cell_lengths, spec.size)
    size = size_values(spec.cell_lengths, spec.size)
    cells = spec.cell_lengths
    order = np.lexsort((*cells.T[::-1], size)).tolist()  # smallest first
    carry = np.zeros(size.size, dtype=np.int64)
    padded = steps = 0
    for i, c in enumerate(order):
        a, b = int(spec.counts[c] + carry[c]), max(int(full[c]), 1)
        if a == 0:
            continue
        covers = [
            d
            for d in order[i + 1 :]
            if spec.cell_group[d] == spec.cell_group[c] and (cells[d] >= cells[c]).all()
        ]
        f, rem = divmod(a, reps * b)
        if f and rem and covers:
            carry[covers[0]] += rem  # the smallest cell covering c takes the partial step
            padded += f * reps * b * int(size[c])
            steps += f
            continue
        m = -(-a // (reps * b))
        rows = int(even_batch([a], [b], reps, rule.budget.multiple_of)[0])
        padded += m * reps * rows * int(size[c])
        steps += m
    real = int(size_values(spec.planned_lengths(), spec.size).sum())
    return (padded - real) / real, steps


def main() -> None:
    lines = [
        "# Filler rows and padding: full, even and promoted batches (benchmarks/filler.py)",
        "",
        " ".join(__doc__.split("\n\n")[0:2]).replace("\n", " "),
        "",
        "| set | k | ranks | filler: full | even | promoted | padding: even | promoted | "
        "bottom-up | steps (even / promoted / bottom-up) | shapes (even / promoted) | "
        "promoted samples |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = 0.0
    for name in sorted(REAL_DATASETS):
        x = load_real(name)
        size = "prod" if name == "coco" else "sum"
        budget = int(64 * size_values(x.reshape(len(x), -1), size).max())
        for k in (8, 16):
            opts = {"num_buckets": k, "size": size, "max_shapes": k if x.ndim == 2 else None}
            for reps in (1, 8):
                plans = {}
                for label, tokens in (
                    ("full", TokenBudget(budget, balance=False)),
                    ("even", TokenBudget(budget, promote=False)),
                    ("promoted", budget),
                ):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        s = BucketSampler(x, max_tokens=tokens, num_replicas=reps, rank=0, **opts)
                    plans[label] = measure(s)
                f, e, p = plans["full"], plans["even"], plans["promoted"]
                spec = BucketSpec.build(x, max_tokens=budget, **opts)
                up_padding, up_steps = bottom_up(spec, reps)
                assert e["steps"] == f["steps"] and p["steps"] <= e["steps"]
                assert p["seen"] == e["seen"] == len(x)
                worst = max(worst, p["filler"])
                lines.append(
                    f"| {name} | {k} | {reps} | {f['filler']:.2%} | {e['filler']:.2%} | "
                    f"{p['filler']:.2%} | {e['padding']:.2%} | {p['padding']:.2%} | "
                    f"{up_padding:.2%} | {e['steps']} / {p['steps']} / {up_steps} | "
                    f"{e['shapes']} / {p['shapes']} | "
                    f"{p['promoted']} |"
                )
    lines += ["", f"Largest filler share with promotion: {worst:.2%}."]
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
