"""Balanced ranks for packed rows: per-step attention work and tokens across simulated ranks.

Run: ``.venv/bin/python benchmarks/pack_balance.py`` (about a minute on 2 shared cores). Writes
``benchmarks/results/pack_balance.md``.

For every text column of tests/data (a document is tokens + 2 special tokens; prompt + response
+ 2 for the paired files, as in ``benchmarks/packing.py``) and LibriSpeech's utterances in 20 ms
frames (rows of 2,048: one or two utterances a row), ``PackSampler`` plans 3 epochs
(seeds 0, 1, 2 at epoch 0) at 8 and 64 simulated ranks, ``balance=False`` (before) and
``balance=True`` (after), all else equal. A rank's *work* at a step is the sum of its batch's
squared document lengths (attention FLOPs up to a constant), its *tokens* the sum of lengths.
A synchronous step lasts as long as its slowest rank, so the figure that matters is

    slowdown = sum over steps of max over ranks / sum over steps of mean over ranks

(1.0 = every rank does the same work at every step). ``full`` counts the full global steps
only; ``all`` adds each epoch's last, partial step (``last_batch="pad"``: ranks get ``q // R``
or ``q // R + 1`` real rows, an imbalance no dealing removes), which weighs more the fewer steps
an epoch has (a 29k-document file at 64 ranks makes 7 to 50 steps). ``worst`` is the largest
per-step max / mean over full steps. Shapes and ``len()`` are checked equal before and after.

``balance=True`` deals rows of similar work to the same step and also packs for work (NOTE
[ Work-aware rows ] in ``bucketloader/pack/_work.py``): documents change rows so that every
row's work is near the mean, on the same rows. The table checks that the rows (count, padding,
the most documents in a row against the collator's bound) are the spec's, and times the
work-aware step (``PackSpec.balanced_layout``, once per spec and rank count).
"""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data"
OUT = ROOT / "benchmarks" / "results" / "pack_balance.md"

from bucketloader.pack import PackSampler, PackSpec  # noqa: E402

CONFIGS = ((512, 1), (256, 4))  # (row length L, rows per rank per step B)
RANKS = (8, 64)
SEEDS = (0, 1, 2)


def columns() -> dict[str, np.ndarray]:
    def load(name: str) -> np.ndarray:
        return np.loadtxt(DATA / name, dtype=np.int64)

    m = load("multi30k_train_en_de_tokens.txt")
    e = load("europarl_v7_en_fr_20k_tokens.txt")
    g = load("gsm8k_train_qa_tokens.txt")
    return {
        "multi30k_en": m[:, 0] + 2,
        "multi30k_pair": m.sum(1) + 2,
        "europarl_en": e[:, 0] + 2,
        "europarl_pair": e.sum(1) + 2,
        "gsm8k_qa": g.sum(1) + 2,
        # audio frames (16 kHz samples / 320: 20 ms frames), rows of one or two utterances:
        # the exchanges' candidate grid over every token count took minutes here (s22)
        "librispeech_frames": load("librispeech_train_clean_100_samples.txt") // 320,
    }


#: Columns planned at other (row length, B) than CONFIGS: LibriSpeech's utterances run to
#: 1,226 frames, so rows of 2,048 (one or two utterances each).
OWN_CONFIGS = {"librispeech_frames": ((2048, 1),)}


def per_step(spec: PackSpec, ranks: int, balance: bool, seed: int) -> tuple[np.ndarray, ...]:
    """(work, tokens, is_full) per step x rank, from every rank's own plan."""
    sq = spec.sizes.astype(np.int64) ** 2
    work, tokens = [], []
    samplers = [
        PackSampler(spec, num_replicas=ranks, rank=r, seed=seed, balance=balance)
        for r in range(ranks)
    ]
    lens = {len(s) for s in samplers}
    assert len(lens) == 1
    for s in samplers:
        plan = s.plan(0)
        idx = plan.indices
        bounds = plan.offsets
        work.append(np.add.reduceat(sq[idx], bounds[:-1]))
        tokens.append(np.add.reduceat(spec.sizes[idx], bounds[:-1]))
    _, q = spec.steps(ranks)
    steps = len(samplers[0])
    kinds = samplers[0].plan(0).kinds
    # a row length's last step (the partial one) is the last step of that kind in the plan
    is_full = np.ones(steps, dtype=bool)
    for k in range(len(spec.row_lengths)):
        mine = np.flatnonzero(kinds == k)
        if q[k] and mine.size:
            is_full[mine[-1]] = False
    return np.array(work).T, np.array(tokens).T, is_full


def rows_check(spec: PackSpec, ranks: int) -> tuple[float, float, int, int, float]:
    """(padding before, after, most documents in a row before, after, seconds to even)."""
    fresh = dataclasses.replace(spec)  # no cached rows: time the whole work-aware step
    fresh.layout  # noqa: B018 (the packing's layout, not part of the step)
    t0 = time.perf_counter()
    fresh.balanced_layout(ranks)
    seconds = time.perf_counter() - t0
    slots, offsets, kind, _, _ = spec.balanced_layout(ranks)
    cap = np.asarray(spec.row_lengths, dtype=np.int64)
    out = []
    for sl, off, k in (spec.layout, (slots, offsets, kind)):
        assert off.size - 1 == spec.num_rows and sorted(spec.by_size[sl]) == list(spec.kept)
        fills = np.add.reduceat(spec.sizes[spec.by_size[sl]], off[:-1])
        assert (fills <= cap[k]).all()
        out.append(((cap[k] - fills).sum() / fills.sum(), int(np.diff(off).max())))
    assert out[1][1] <= max(spec.max_documents) // min(spec.batch_sizes)
    return out[0][0], out[1][0], out[0][1], out[1][1], seconds


def slowdown(x: np.ndarray) -> float:
    return float(x.max(1).sum() / x.mean(1).sum())


def main() -> None:
    t0 = time.perf_counter()
    lines = [
        "# Balanced ranks for packed rows",
        "",
        "Generated by `benchmarks/pack_balance.py` (see its docstring for the method) on "
        f"{platform.machine()} / {platform.system()}, numpy {np.__version__}.",
        "",
        "slowdown = sum over steps of the slowest rank / sum over steps of the mean rank "
        "(1.00 = perfectly even). Work = sum of squared document lengths per rank and step; "
        "`full` = full global steps, `all` = with each epoch's last partial step; `worst` = "
        "the worst full step's max / mean. 3 epochs (seeds 0-2).",
        "",
        "| column | L | B | ranks | steps/epoch | work full: before -> after | "
        "work all: before -> after | worst full step: before -> after | "
        "tokens all: before -> after | row padding: before -> after | "
        "most documents in a row: before -> after | work-aware rows |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[tuple[int, bool], list[float]] = {}
    for name, lengths in columns().items():
        for row_length, b in OWN_CONFIGS.get(name, CONFIGS):
            spec = PackSpec.build(lengths, row_length=row_length, batch_size=b, overflow="drop")
            for ranks in RANKS:
                res = {}
                for balance in (False, True):
                    parts = [per_step(spec, ranks, balance, seed) for seed in SEEDS]
                    work = np.concatenate([p[0] for p in parts])
                    tok = np.concatenate([p[1] for p in parts])
                    full = np.concatenate([p[2] for p in parts])
                    worst = float((work[full].max(1) / work[full].mean(1)).max())
                    res[balance] = (
                        slowdown(work[full]),
                        slowdown(work),
                        worst,
                        slowdown(tok),
                        len(parts[0][2]),
                    )
                    summary.setdefault((ranks, balance), []).append(slowdown(work[full]))
                (wf0, wa0, w0, t0_, steps), (wf1, wa1, w1, t1_, _) = res[False], res[True]
                pad0, pad1, most0, most1, secs = rows_check(spec, ranks)
                lines.append(
                    f"| {name} | {row_length} | {b} | {ranks} | {steps} | {wf0:.3f} -> "
                    f"**{wf1:.3f}** | {wa0:.3f} -> {wa1:.3f} | {w0:.2f} -> {w1:.2f} | "
                    f"{t0_:.3f} -> {t1_:.3f} | {pad0:.3%} -> {pad1:.3%} | {most0} -> {most1} | "
                    f"{secs:.1f} s |"
                )
                print(lines[-1], flush=True)
    lines += ["", "Worst `work full` slowdown over all columns and configurations:", ""]
    for ranks in RANKS:
        before, after = max(summary[(ranks, False)]), max(summary[(ranks, True)])
        lines.append(f"- {ranks} ranks: before {before:.3f}, after **{after:.3f}**")
    lines += [
        "",
        "Goal: <= 1.05 after, at 8 and 64 ranks. Dealing alone (rows sorted by work, cut "
        "into steps, snake-dealt to ranks) reached it at 8 ranks but not at 64 ranks with one "
        "row per rank (1.049-1.171): a step then lasts as long as its heaviest row, so the "
        "rows themselves must be even. The work-aware step exchanges documents between rows "
        "of the same length (a set of one row's documents for a set of the other's, both rows "
        "staying within L) until rows are near the mean work, then lifts the rows of the "
        "heaviest steps towards their step's heaviest row (a row holding one document longer "
        "than the square root of the mean work cannot come down). The rows stay the spec's: "
        "the same count, so the same padding (the `row padding` column) and steps, every "
        "document once, at most the documents per row the collator's `cu_seqlens` bound "
        "allows. The `all` column also counts each epoch's last, partial step, where ranks "
        "hold different numbers of real rows (`last_batch='pad'`); it weighs more the fewer "
        "steps an epoch has (at 64 ranks an epoch is 7-25 steps here). Tokens per rank were "
        "already even (rows are nearly full) and stay so. The `work-aware rows` column is the "
        "time of that step on this shared 2-core machine (once per spec and rank count; the "
        "part that does not depend on the ranks is shared).",
        "",
        f"Run time: {time.perf_counter() - t0:.0f} s.",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
