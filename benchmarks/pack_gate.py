"""The packing gate: this checkout's solver against another revision's (``main`` by default) on
the same histograms: rows, the packing promise, plan time, and the solver version.

Run: ``.venv/bin/python benchmarks/pack_gate.py`` (about 10 minutes on 2 shared cores;
``--random 100`` for a smoke run). Writes ``benchmarks/results/pack_gate.md``.

The base solver is ``bucketloader/pack/_bins.py`` at ``--base`` (``git show``, imported from a
temporary directory: it needs numpy only). Both get the same histogram (sizes longest first)
and the default ``search="auto"``; the cases:

- every length file in ``tests/data`` (text files: each document's columns summed + 2, at
  ``L`` = 256 to 4,096 and at ``(256, 1024)``; audio and images at 2, 4 and 8 times the median
  length), documents longer than the longest row dropped;
- GSM8K (prompt + response + 2) resampled at 300 to 20,000 documents, ``L`` = 256 to 2,048;
- ``STRESS`` cases of issue 26's stress sets: 300 to 20,000 documents uniform in ``(L / a, L /
  b]`` (``a`` in 3..8, ``b`` 1.5 or 2), ``L`` = 1,024 to 16,384;
- ``--random`` random cases: ``N`` log-uniform in 1..20,000, one to three row lengths (the
  longest ``L`` from 64 to 16,384, the others ``L / 2`` and ``L / 4``), documents uniform in
  ``(L / a, L / b]`` (``a`` in 2..16, ``b`` in 1..3), lognormal, or a few distinct sizes.

Per case: the rows (row tokens with several row lengths) of each, whether each keeps the
promise (within 0.5 points of padding of ``ceil(tokens / L)``, C1 with several lengths),
the plan time (CPU, best of 4 alternating calls), and whether this checkout's plan is valid
(every document placed exactly once, every row within its length). The solver version:
where the two plans are the same rows, the versions must be the same (a saved state still
loads); where they differ, they must differ (a saved state fails loudly).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
OUT = ROOT / "benchmarks" / "results" / "pack_gate.md"

from _data import DATA  # noqa: E402

from bucketloader.pack import _bins as new  # noqa: E402

#: Alternating calls per case and solver (the best counts).
ROUNDS = 4
#: Cases of documents uniform in (L/a, L/b], a in 3..8, b in 1.5..2, 300 to 20,000 of them.
STRESS = 60
AUDIO = ("librispeech", "commonvoice", "coco")  # (not tokens: row lengths from the median)


def base_solver(ref: str):
    """The module ``bucketloader/pack/_bins.py`` at git revision ``ref``."""
    text = subprocess.run(
        ["git", "show", f"{ref}:bucketloader/pack/_bins.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    where = Path(tempfile.mkdtemp(prefix="pack_gate_")) / "base_bins.py"
    where.write_text(text)
    spec = importlib.util.spec_from_file_location("base_bins", where)
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_bins"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def cases(random_cases: int) -> list[tuple[str, str, np.ndarray, tuple[int, ...]]]:
    """``(group, label, lengths, row_lengths)``."""
    out = []
    for path in sorted(DATA.glob("*.txt")):
        x = np.loadtxt(path, dtype=np.int64)
        x = x if x.ndim == 1 else x.sum(axis=1)
        name = path.stem
        if name.startswith(AUDIO):
            x = x // 160 if name.startswith("librispeech") else x  # (10 ms frames)
            x = x // 10 if name.startswith("commonvoice") else x  # (centiseconds)
            x = x // 1024 if name.startswith("coco") else x  # (16 x 64 pixel patches)
            x = np.maximum(x, 1)
            med = int(np.median(x))
            for k in (2, 4, 8):
                out.append(("tests/data", f"{name} L={k * med}", x, (k * med,)))
        else:
            x = x + 2
            for rows in ((256,), (512,), (1024,), (2048,), (4096,), (256, 1024)):
                out.append(("tests/data", f"{name} L={rows}", x, rows))
    gsm = np.loadtxt(DATA / "gsm8k_train_qa_tokens.txt", dtype=np.int64).sum(axis=1) + 2
    rng = np.random.default_rng(26)
    for n in (300, 1_000, 2_000, 5_000, 20_000):
        for length in (256, 512, 1024, 2048):
            for rep in range(3):
                out.append(("GSM8K", f"n={n} L={length} #{rep}", rng.choice(gsm, n), (length,)))
    rng = np.random.default_rng(10)
    for i in range(STRESS):  # (the uniform regimes of issue 26's stress sets)
        n = int(rng.choice([300, 1_000, 3_000, 10_000, 20_000]))
        length = int(rng.choice([1024, 4096, 16384]))
        a, b = (int(rng.choice([3, 4, 5, 6, 8])), float(rng.choice([2, 1.5])))
        x = rng.integers(length // a + 1, int(length / b) + 1, n)
        out.append(("stress", f"#{i} uniform (L/{a}, L/{b:g}] n={n} L={length}", x, (length,)))
    rng = np.random.default_rng(500)
    for i in range(random_cases):
        n = int(np.exp(rng.uniform(0, np.log(20_000))))
        length = int(rng.choice([64, 256, 1024, 4096, 16384]))
        k = int(rng.integers(1, 4))
        rows = tuple(length >> j for j in range(k - 1, -1, -1))
        kind = rng.choice(["uniform", "uniform", "lognormal", "few"])
        if kind == "uniform":
            a = int(rng.choice([2, 3, 4, 5, 6, 8, 16]))
            b = float(rng.choice([1, 1.5, 2, 3]))
            b = min(b, a / 1.5)
            lo, hi = length // a + 1, max(length // a + 1, int(length / b))
            x = rng.integers(lo, hi + 1, n)
            label = f"#{i} uniform (L/{a}, L/{b:g}] n={n} L={rows}"
        elif kind == "lognormal":
            mu, sigma = rng.uniform(np.log(length) - 4, np.log(length) - 0.5), rng.uniform(0.3, 1.5)
            x = np.clip(rng.lognormal(mu, sigma, n).astype(np.int64), 1, length)
            label = f"#{i} lognormal n={n} L={rows}"
        else:
            vals = rng.integers(1, length + 1, int(rng.integers(1, 6)))
            x = rng.choice(vals, n)
            label = f"#{i} {vals.size} sizes n={n} L={rows}"
        out.append((f"random {kind}", label, x, rows))
    return out


def row_multiset(p) -> dict:
    """Rows per distinct row ``(kind, ((size, documents), ...))`` of a plan."""
    out: dict = {}
    items, mult, sizes = p.items.tolist(), p.mult.tolist(), p.sizes.tolist()
    ends = p.offsets.tolist()
    for j in range(p.reps.size):
        row = sorted((sizes[items[i]], mult[i]) for i in range(ends[j], ends[j + 1]))
        key = (int(p.kind[j]), tuple(row))
        out[key] = out.get(key, 0) + int(p.reps[j])
    return out


def valid(p, sizes: np.ndarray, counts: np.ndarray, rows: tuple[int, ...]) -> bool:
    """Every document placed exactly once, every row within its row length."""
    lens = np.asarray(rows, dtype=np.int64)
    per = np.repeat(np.arange(p.reps.size), np.diff(p.offsets))
    placed = np.bincount(p.items, p.mult * p.reps[per], minlength=sizes.size)
    return bool((placed == counts).all() and (p.fill <= lens[p.kind]).all())


def version(module, p, rows: tuple[int, ...]) -> int:
    """The solver version ``module`` gives its plan ``p`` (the flags its version knows)."""
    names = list(inspect.signature(module.solver_version).parameters)[1:]
    return module.solver_version(rows, **{f: getattr(p, f) for f in names})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--random", type=int, default=600, help="random cases (>= 500 to gate)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    base = base_solver(args.base)
    results = []
    started = time.time()
    for group, label, x, rows in cases(args.random):
        x = x[x <= rows[-1]]
        if not x.size:
            continue
        sizes, counts = np.unique(x, return_counts=True)
        sizes, counts = sizes[::-1].copy(), counts[::-1].copy()
        t_base = t_new = float("inf")
        for i in range(ROUNDS):  # (alternating, each first in turn: the machine is shared)
            for side in (0, 1) if i % 2 else (1, 0):
                a = time.thread_time()
                if side:
                    mine = new.solve(sizes, counts, rows)
                    t_new = min(t_new, time.thread_time() - a)
                else:
                    old = base.solve(sizes, counts, rows)
                    t_base = min(t_base, time.thread_time() - a)
        tokens = int(np.dot(sizes, counts))
        c1 = new.capacity_bound(sizes, counts, rows)[0]
        padded_old, padded_new = new._padded(old, rows), new._padded(mine, rows)
        same = row_multiset(old) == row_multiset(mine)
        v_old, v_new = version(base, old, rows), version(new, mine, rows)
        thirds = new.thirds_bound(sizes, counts, rows[0]) * rows[0] if len(rows) == 1 else 0
        results.append(
            {
                "group": group,
                "label": label,
                "docs": int(counts.sum()),
                "old": padded_old // rows[0] if len(rows) == 1 else padded_old,
                "new": padded_new // rows[0] if len(rows) == 1 else padded_new,
                "more": padded_new > padded_old,
                "fewer": padded_new < padded_old,
                "old_kept": padded_old - c1 <= tokens // 200,
                "new_kept": padded_new - c1 <= tokens // 200,
                # (the promise is out of reach where the thirds bound is above it)
                "out_of_reach": thirds - c1 > tokens // 200,
                "t_old": t_base,
                "t_new": t_new,
                "valid": valid(mine, sizes, counts, rows),
                "same": same,
                "version_ok": (v_old == v_new) == same,
                "v_old": v_old,
                "v_new": v_new,
            }
        )
        r = results[-1]
        print(
            f"{group:18s} {label:50s} rows {r['old']} -> {r['new']} "
            f"time {t_base * 1e3:.2f} -> {t_new * 1e3:.2f} ms v{v_old}->v{v_new}",
            flush=True,
        )
    write(results, args, time.time() - started)


def write(results: list[dict], args, wall: float) -> None:
    groups = sorted({r["group"] for r in results}, key=lambda g: (g.startswith(("random", "s")), g))
    lines = [
        "# Packing gate (benchmarks/pack_gate.py)",
        "",
        f"This checkout's solver against `{args.base}`'s (`bucketloader/pack/_bins.py` at "
        f'`{args.base}`), both with the default `search="auto"` on the same histograms; '
        f"{platform.machine()}, numpy {np.__version__}, Python {platform.python_version()}, "
        f"{len(results)} cases in {wall:.0f} s. Rows: fewer / more than the base (row tokens "
        "with several row lengths). Promise: within 0.5 points of padding of "
        "`ceil(tokens / L)` (C1 with several row lengths); `out of reach` counts the cases "
        "where the thirds bound proves no plan keeps it. Time: CPU time, best of "
        f"{ROUNDS} alternating calls; the ratio is this checkout's / the base's (median, 90th "
        "percentile, largest). Versions: where the plans are the same rows the solver "
        "versions must be equal, where they differ they must differ (`version errors`). "
        "`invalid`: plans that lose or repeat a document or overfill a row.",
        "",
        f"Command: `python benchmarks/pack_gate.py --base {args.base} --random {args.random}`",
        "",
        "| cases | n | fewer rows | more rows | same plan | promise broken: base | "
        "promise broken: this | of them out of reach | time ratio median | p90 | max | "
        "version errors | invalid |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in [*groups, "all"]:
        rs = [r for r in results if g == "all" or r["group"] == g]
        ratio = np.array([r["t_new"] / max(r["t_old"], 1e-9) for r in rs])
        broken_new = [r for r in rs if not r["new_kept"]]
        lines.append(
            f"| {'**all**' if g == 'all' else g} | {len(rs)} | {sum(r['fewer'] for r in rs)} | "
            f"{sum(r['more'] for r in rs)} | {sum(r['same'] for r in rs)} | "
            f"{sum(not r['old_kept'] for r in rs)} | {len(broken_new)} | "
            f"{sum(r['out_of_reach'] for r in broken_new)} | {np.median(ratio):.2f}x | "
            f"{np.percentile(ratio, 90):.2f}x | {ratio.max():.2f}x | "
            f"{sum(not r['version_ok'] for r in rs)} | {sum(not r['valid'] for r in rs)} |"
        )
    more = [r for r in results if r["more"]]
    lines += ["", f"Cases with more rows than the base: {len(more)}."]
    for r in more:
        lines.append(
            f"- {r['group']}, {r['label']}: {r['old']} -> {r['new']} rows "
            f"(promise: base {'kept' if r['old_kept'] else 'broken'}, this "
            f"{'kept' if r['new_kept'] else 'broken'}; out of reach: {r['out_of_reach']})"
        )
    kept_lost = [r for r in results if r["old_kept"] and not r["new_kept"]]
    lines += ["", f"Cases where the base keeps the promise and this does not: {len(kept_lost)}."]
    for r in kept_lost:
        lines.append(f"- {r['group']}, {r['label']}: {r['old']} -> {r['new']} rows")
    fewer = sorted(
        (r for r in results if r["fewer"]), key=lambda r: (r["new"] - r["old"]) / max(r["old"], 1)
    )
    lines += ["", "Largest gains in rows (up to 12):"]
    for r in fewer[:12]:
        lines.append(
            f"- {r['group']}, {r['label']}: {r['old']} -> {r['new']} rows, "
            f"{r['t_old'] * 1e3:.3g} -> {r['t_new'] * 1e3:.3g} ms"
        )
    slow = sorted(results, key=lambda r: -r["t_new"] / max(r["t_old"], 1e-9))
    lines += ["", "Largest time ratios (up to 12):"]
    for r in slow[:12]:
        lines.append(
            f"- {r['group']}, {r['label']}: {r['t_old'] * 1e3:.3g} -> {r['t_new'] * 1e3:.3g} ms "
            f"({r['t_new'] / max(r['t_old'], 1e-9):.2f}x), rows {r['old']} -> {r['new']}"
        )
    bad = [r for r in results if not r["version_ok"] or not r["valid"]]
    lines += ["", f"Version errors or invalid plans: {len(bad)}."]
    for r in bad:
        lines.append(
            f"- {r['group']}, {r['label']}: same plan {r['same']}, versions {r['v_old']} -> "
            f"{r['v_new']}, valid {r['valid']}"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
