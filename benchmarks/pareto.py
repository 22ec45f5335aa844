"""Padding against distinct batch shapes per epoch, at an equal token budget, against the peers.

For every length file in ``tests/data`` (paired files as one sequence per sample: source + target
tokens, or COCO's width x height pixels), one epoch of each method at the same budget ``T`` of
padded elements per batch (``T = 32 x`` the longest sample, so the longest batch holds 32 rows):

* bucketloader ``BucketSampler(max_tokens=T)`` with ``strategy="optimal"`` (the default: least
  boundary padding) and ``strategy="batched"`` (boundaries and even batch rows chosen together,
  NOTE [ Batched boundaries ]) for k in 1..64 (the fronts, plotted), the k that
  ``recommend_num_buckets`` picks (its padding-target rule, k in 4..64), and for each peer
  point with S shapes, k = S (the plan the dominance test needs: at most S shapes);
* Lhotse ``DynamicBucketingSampler(max_duration=T, num_buckets=8 / 16 / 30)`` (the installed
  package, lengths as durations; its ``TimeConstraint`` counts ``num_cuts * longest``, the padded
  size, so the budgets match);
* HF ``group_by_length`` (``transformers``' ``LengthGroupedSampler``) at the fixed batch size
  that fits the budget, ``T // longest``;
* fairseq ``batch_by_size``: fairseq is not installable here, so it is reimplemented from
  ``fairseq/data/data_utils_fast.pyx`` (``batch_by_size_fast``): indices sorted by size
  (``ordered_indices``), a batch grows while ``(len(batch) + 1) * max_len <= max_tokens``; when
  full, the first ``max(mult * (len // mult), len % mult)`` samples make a batch and the rest
  start the next (``required_batch_size_multiple`` = 8, fairseq-train's default);
* pad-to-max: one static shape, ``T // longest`` rows padded to the longest sample.

A peer's batch is padded to its longest sample (dynamic padding), so its shape is
``(rows, longest in the batch)``; bucketloader's shapes are its promised ``sampler.shapes``.
Padding = (padded elements - real elements) / real elements, filler rows included.
A peer point ``(S shapes, P padding)`` is *dominated* when some bucketloader plan has at most S
shapes and pads at most P.

Run: ``PYTHONPATH=$PWD python benchmarks/pareto.py`` (about a minute on 2 cores); writes
``benchmarks/results/pareto.md`` and ``benchmarks/results/pareto_<set>.png``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader import BucketSampler  # noqa: E402
from bucketloader.analysis import recommend_num_buckets  # noqa: E402

DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results"
KS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
RECOMMEND_KS = (4, 6, 8, 12, 16, 24, 32, 48, 64)
STRATEGIES = ("optimal", "batched")
ROWS_AT_LONGEST = 32


def load(path: Path) -> tuple[np.ndarray, str]:
    """One length per sample: a paired file's two columns summed (width x height for COCO)."""
    arr = np.loadtxt(path, dtype=np.int64, ndmin=1)
    if arr.ndim == 1:
        return arr, "length"
    if "coco" in path.name:
        return arr[:, 0] * arr[:, 1], "width x height"
    return arr.sum(axis=1), "source + target"


def batch_stats(lengths: np.ndarray, batches: list[list[int]]) -> tuple[int, float]:
    """(distinct shapes, padding) of batches padded to their longest sample."""
    shapes = set()
    padded = 0
    for b in batches:
        top = int(lengths[b].max())
        shapes.add((len(b), top))
        padded += len(b) * top
    real = int(sum(int(lengths[b].sum()) for b in batches))
    return len(shapes), (padded - real) / real


def bucketloader_point(
    lengths: np.ndarray, k: int, budget: int, strategy: str = "optimal"
) -> tuple[int, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = BucketSampler(lengths, num_buckets=k, max_tokens=budget, strategy=strategy, seed=0)
    report = s.report()
    real = sum(c["real"] for c in report.cells)
    padded = sum(c["padded"] for c in report.cells)
    return len(s.shapes), (padded - real) / real


def lhotse_batches(lengths: np.ndarray, num_buckets: int, budget: int) -> list[list[int]]:
    from lhotse import CutSet, MonoCut
    from lhotse.dataset.sampling import DynamicBucketingSampler

    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0.0, duration=float(n), channel=0) for i, n in enumerate(lengths)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "an eagerly read CutSet": irrelevant to the batches
        sampler = DynamicBucketingSampler(
            cuts, max_duration=float(budget), num_buckets=num_buckets, shuffle=True, seed=0
        )
        return [[int(c.id) for c in batch] for batch in sampler]


def hf_batches(lengths: np.ndarray, batch_size: int) -> list[list[int]]:
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    g = torch.Generator().manual_seed(0)
    order = list(LengthGroupedSampler(batch_size, lengths=lengths.tolist(), generator=g))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def fairseq_batches(lengths: np.ndarray, max_tokens: int, bsz_mult: int = 8) -> list[list[int]]:
    """fairseq ``batch_by_size_fast`` (data_utils_fast.pyx) over size-sorted indices."""
    indices = np.argsort(lengths, kind="stable").tolist()
    batches, batch, lens = [], [], []
    top = 0
    for idx in indices:
        n = int(lengths[idx])
        lens.append(n)
        top = max(top, n)
        if batch and (len(batch) + 1) * top > max_tokens:
            mod = max(bsz_mult * (len(batch) // bsz_mult), len(batch) % bsz_mult)
            batches.append(batch[:mod])
            batch, lens = batch[mod:], lens[mod:]
            top = max(lens)
        batch.append(idx)
    if batch:
        batches.append(batch)
    return batches


def pad_to_max(lengths: np.ndarray, batch_size: int) -> tuple[int, float]:
    """One static shape ``(T // longest, longest)``; the last batch's missing rows are filler."""
    batches = -(-lengths.size // batch_size)
    padded = batches * batch_size * int(lengths.max())
    return 1, (padded - int(lengths.sum())) / int(lengths.sum())


def plot(name: str, front: list, recommended: tuple, peers: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for strategy, color in (("optimal", "C0"), ("batched", "C9")):
        pts = [(s, p * 100) for st, _, s, p in front if st == strategy]
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, "o-", color=color, ms=4, label=f"bucketloader {strategy!r}, k=1..64")
    ax.plot(recommended[1], recommended[2] * 100, "*", ms=14, color="C0", label="recommended k")
    marks = iter("sD^vP<>")
    for label, (s, p) in peers.items():
        ax.plot(s, p * 100, next(marks, "x"), ms=8, label=label)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.1)  # 0.1% .. 600%: log above 0.1%, linear below
    ax.set_xlabel("distinct batch shapes per epoch (log)")
    ax.set_ylabel("padding, % of real elements (symlog)")
    ax.set_title(f"{name}, equal token budget")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Padding vs distinct shapes, at an equal token budget (benchmarks/pareto.py)",
        "",
        "One epoch, one rank, seed 0; budget `T` = 32 x the longest sample (padded elements per",
        "batch) for every method; padding = (padded - real) / real elements, filler rows",
        "included. Paired files as one sequence per sample (source + target; COCO: width x",
        "height pixels). Lhotse is the installed `lhotse` package; fairseq `batch_by_size` is",
        "reimplemented from `data_utils_fast.pyx` (`batch_by_size_fast`, required batch size",
        "multiple 8); HF is `transformers`' `LengthGroupedSampler` at `T // longest` rows.",
        "bucketloader runs with `strategy='optimal'` (the default) and `'batched'` (boundaries and",
        "even batch rows chosen together). `dominated` means some bucketloader plan (k = 1..64,",
        "or k = the peer's shape count) has at most the peer's shapes and pads at most as much.",
        "",
    ]
    summary = [
        "| set | samples | every peer point dominated? | not dominated |",
        "|---|---:|---|---|",
    ]
    started = time.perf_counter()
    for path in sorted(DATA.glob("*.txt")):
        name = path.stem
        lengths, unit = load(path)
        budget = ROWS_AT_LONGEST * int(lengths.max())
        rows = budget // int(lengths.max())
        front = [
            (st, k, *bucketloader_point(lengths, k, budget, st)) for st in STRATEGIES for k in KS
        ]
        rec = recommend_num_buckets(lengths, num_buckets=RECOMMEND_KS, max_tokens=budget)
        recommended = (rec.num_buckets, *bucketloader_point(lengths, rec.num_buckets, budget))
        peers: dict[str, tuple[int, float]] = {}
        for nb in (8, 16, 30):
            peers[f"Lhotse dynamic, {nb} buckets"] = batch_stats(
                lengths, lhotse_batches(lengths, nb, budget)
            )
        peers["HF group_by_length"] = batch_stats(lengths, hf_batches(lengths, rows))
        peers["fairseq batch_by_size"] = batch_stats(lengths, fairseq_batches(lengths, budget))
        peers["pad to max"] = pad_to_max(lengths, rows)
        plot(name, front, recommended, peers, OUT / f"pareto_{name}.png")
        lines += [
            f"## {name} ({lengths.size} samples, {unit}, T = {budget})",
            "",
            f"![padding vs shapes](pareto_{name}.png)",
            "",
            "| method | shapes | padding | dominated by |",
            "|---|---:|---:|---|",
        ]
        for st, k, s, p in front:
            lines.append(f"| bucketloader {st} k={k} | {s} | {p:.2%} | |")
        lines.append(
            f"| bucketloader recommended (k={recommended[0]}) | {recommended[1]} | "
            f"{recommended[2]:.2%} | |"
        )
        missed = []
        at_k = {(st, k): (s, p) for st, k, s, p in front}
        for label, (s, p) in peers.items():
            for st in STRATEGIES:  # bucketloader with k = the peer's shape count
                if (st, s) not in at_k:
                    at_k[st, s] = bucketloader_point(lengths, s, budget, st)
            plans = [(fp, fs, st, k) for (st, k), (fs, fp) in at_k.items()]
            best = sorted(x for x in plans if x[1] <= s and x[0] <= p)
            by = "**none**"
            if best:
                fp, fs, st, k = best[0]
                by = f"{st} k={k} ({fs} shapes, {fp:.2%})"
            if not best:
                missed.append(f"{label} ({s} shapes, {p:.2%})")
            lines.append(f"| {label} | {s} | {p:.2%} | {by} |")
        lines.append("")
        verdict = "yes" if not missed else "no"
        summary.append(f"| {name} | {lengths.size} | {verdict} | {'; '.join(missed) or '-'} |")
        print(name, verdict, missed, f"{time.perf_counter() - started:.0f}s", flush=True)
    lines[12:12] = ["## Summary", "", *summary, ""]
    lines.append(f"Run time: {time.perf_counter() - started:.0f} s.")
    (OUT / "pareto.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
