"""Start-up cost of the ``bucketloader`` command, and the stream's per-sample cost, against an
older revision, side by side in one run.

1. Start-up: the CPU time (user + system, of the child process) of ``python -m bucketloader
   --help``, ``python -m bucketloader report --help`` and ``python -c "import bucketloader"``,
   each run in a fresh process, alternating between the two trees; the median of ``--rounds``.
2. The stream's per-sample path (``bucketloader/_samples.py`` measures every sample a stream
   reads): a full pass of ``BucketIterable(samples, length_fn=..., boundaries=8 buckets,
   batch_size=32)`` over 50,000 in-memory samples (GSM8K lengths) of five kinds, and the length
   reader alone over the same samples; CPU time per sample (``time.thread_time``), the best of 3
   passes inside a process and the best over ``--rounds`` processes per tree, alternating.
3. The two trees' length readers side by side in one process (both ``_samples.py`` files
   loaded as separate modules), alternating ``5 * --rounds`` times: the least noisy measure.

Run: ``PYTHONPATH=$PWD python benchmarks/startup.py --baseline-rev b570440`` (about two minutes on
2 cores). The baseline tree is ``git archive REV`` unpacked in a temporary directory. Writes
``benchmarks/results/startup.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "startup.md"

COMMANDS = {
    "`python -m bucketloader --help`": ["-m", "bucketloader", "--help"],
    "`python -m bucketloader report --help`": ["-m", "bucketloader", "report", "--help"],
    '`python -c "import bucketloader"`': ["-c", "import bucketloader"],
}

#: The samples of both child scripts (``lens``: their lengths), with the key that measures them.
KINDS = """
kinds = {
    "list of ints": ([[1] * int(k) for k in lens], None),
    "numpy array": ([np.ones(int(k), np.int32) for k in lens], None),
    "torch tensor": ([torch.ones(int(k), dtype=torch.int32) for k in lens], None),
    "dict, list field": ([{"input_ids": [1] * int(k), "label": 0} for k in lens], "input_ids"),
    "dict, tensor field": (
        [{"input_ids": torch.ones(int(k), dtype=torch.int32), "label": 0} for k in lens],
        "input_ids",
    ),
}
"""

#: Run in a child process inside one tree: prints {kind: [pass ns/sample, reader ns/sample]}.
STREAM = (
    r"""
import json, sys, time
import numpy as np
import torch
from bucketloader._samples import length_reader
from bucketloader.solve import compute_boundaries
from bucketloader.stream import BucketIterable

torch.set_num_threads(1)
gsm = np.loadtxt(sys.argv[1], dtype=np.int64).sum(axis=1) + 2
lens = np.random.default_rng(1).choice(gsm, 50_000)
b = compute_boundaries(lens, 8)
"""
    + KINDS
    + r"""
out = {}
for name, (samples, key) in kinds.items():
    def one_pass():
        stream = BucketIterable(samples, length_fn=key, boundaries=b, batch_size=32)
        return sum(len(x) for x in stream)
    reader = length_reader(key, arg="length_fn")
    def read():
        return sum(map(reader, samples))
    best = []
    for fn in (one_pass, read):
        t = float("inf")
        for _ in range(3):
            t0 = time.thread_time()
            fn()
            t = min(t, time.thread_time() - t0)
        best.append(t / len(samples) * 1e9)
    out[name] = best
print(json.dumps(out))
"""
)


#: Run once: both trees' ``_samples.py`` loaded side by side in one process (the module imports
#: only numpy, and torch for the old one), their length readers alternating; prints
#: {kind: [before ns/sample, after ns/sample]}.
READERS = (
    r"""
import importlib.util, json, sys, time
import numpy as np
import torch

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

before, after = load(sys.argv[1], "samples_before"), load(sys.argv[2], "samples_after")
lens = np.random.default_rng(1).integers(5, 400, 50_000)
"""
    + KINDS
    + r"""
kinds["dict, int length field"] = ([{"length": int(k), "x": 0} for k in lens], "length")
out = {}
for name, (samples, key) in kinds.items():
    readers = [m.length_reader(key, arg="length_fn") for m in (before, after)]
    assert [sum(map(r, samples)) for r in readers][0] == sum(map(readers[1], samples))
    best = [float("inf")] * 2
    for _ in range(int(sys.argv[3])):
        for i, r in enumerate(readers):
            t0 = time.thread_time()
            sum(map(r, samples))
            best[i] = min(best[i], time.thread_time() - t0)
    out[name] = [t / len(samples) * 1e9 for t in best]
print(json.dumps(out))
"""
)


def child_cpu(tree: Path, args: list[str]) -> float:
    """CPU seconds (user + system) of one ``python ARGS`` run from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdout=subprocess.DEVNULL,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stream_costs(tree: Path) -> dict[str, list[float]]:
    out = subprocess.run(
        [sys.executable, "-c", STREAM, str(ROOT / "tests" / "data" / "gsm8k_train_qa_tokens.txt")],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline_rev], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        trees = {"before": old, "after": ROOT}
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        lines = [
            "# Start-up and the stream's per-sample cost",
            "",
            f"before = `{args.baseline_rev}`, after = the working tree at `{head}`; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared. "
            f"Command: `PYTHONPATH=$PWD python benchmarks/startup.py --baseline-rev "
            f"{args.baseline_rev}`.",
            "",
            f"## 1. Start-up (CPU s of the process, median of {args.rounds} alternating runs)",
            "",
            "| command | before | after | after / before |",
            "|---|---:|---:|---:|",
        ]
        for label, cmd in COMMANDS.items():
            times: dict[str, list[float]] = {k: [] for k in trees}
            for _ in range(args.rounds):
                for k, tree in trees.items():
                    times[k].append(child_cpu(tree, cmd))
            b, a = (float(np.median(times[k])) for k in trees)
            lines.append(f"| {label} | {b:.2f} | {a:.2f} | {a / b:.2f}x |")
            print(label, f"{b:.2f} -> {a:.2f}", flush=True)
        costs: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
        for _ in range(args.rounds):
            for k, tree in trees.items():
                for kind, v in stream_costs(tree).items():
                    old_v = costs[k].get(kind, [float("inf")] * 2)
                    costs[k][kind] = [min(x, y) for x, y in zip(old_v, v, strict=True)]
        sides = subprocess.run(
            [
                sys.executable,
                "-c",
                READERS,
                str(old / "bucketloader" / "_samples.py"),
                str(ROOT / "bucketloader" / "_samples.py"),
                str(5 * args.rounds),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        readers = json.loads(sides.stdout)
        lines += [
            "",
            "## 2. The stream's per-sample path (CPU ns per sample, best of "
            f"{args.rounds} processes x 3 passes)",
            "",
            "50,000 in-memory samples (GSM8K lengths); `BucketIterable(samples, length_fn=None "
            "or 'input_ids', boundaries=8 buckets, batch_size=32)`, a full pass; and the length "
            "reader alone (`_samples.length_reader`).",
            "",
            "| samples | pass before | pass after | after / before | reader before | "
            "reader after | after / before |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind in costs["after"]:
            (pb, rb), (pa, ra) = costs["before"][kind], costs["after"][kind]
            lines.append(
                f"| {kind} | {pb:,.0f} | {pa:,.0f} | {pa / pb:.2f}x | {rb:,.0f} | {ra:,.0f} | "
                f"{ra / rb:.2f}x |"
            )
            print(kind, f"pass {pa / pb:.2f}x reader {ra / rb:.2f}x", flush=True)
        lines += [
            "",
            "## 3. The length readers alone, side by side in one process",
            "",
            "Both trees' `bucketloader/_samples.py` loaded in one process, their readers over the "
            f"same 50,000 samples (lengths 5..399) alternating, the best of {5 * args.rounds} "
            "rounds each (CPU ns per sample); the least noisy of the three measures.",
            "",
            "| samples | before | after | after / before |",
            "|---|---:|---:|---:|",
        ]
        for kind, (b, a) in readers.items():
            lines.append(f"| {kind} | {b:,.0f} | {a:,.0f} | {a / b:.2f}x |")
            print("reader side by side", kind, f"{a / b:.2f}x", flush=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
