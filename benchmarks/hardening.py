"""Issue 12's bad inputs, replayed: what each one does to a given checkout of bucketloader.

Every probe runs in its own process (a hang is a 20 s timeout, not a stuck run) and prints one
line: the outcome (a value, or the exception's type and message, shortened). Run it from a
checkout's root so that checkout's ``bucketloader`` is imported, e.g. against an older commit::

    git worktree add /tmp/old 53d729d
    (cd /tmp/old && python /path/to/benchmarks/hardening.py --out /tmp/before.json)
    python benchmarks/hardening.py --out /tmp/after.json --before /tmp/before.json

With ``--before``, the table compares the two runs; it is written to
``benchmarks/results/hardening.md``. The probes use only names both layouts have (the root
package, ``bucketloader.boundaries``, ``bucketloader.hf``, ``bucketloader.cli``) and fall back to
the old module names where the restructure moved them (``streaming`` -> ``stream``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
EUROPARL = HERE.parent / "tests" / "data" / "europarl_v7_en_fr_20k_tokens.txt"


def _short(text: str, n: int = 150) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_short(str(exc))}"


def _bucketize():
    """The stream's entry point across versions (``bucketize`` was removed in favour of
    ``BucketIterable``, which takes the same arguments)."""
    try:
        from bucketloader.stream import BucketIterable
    except ImportError:
        from bucketloader.streaming import bucketize as BucketIterable
    return BucketIterable


def _solve_into(directory: str, lengths, k: int = 3) -> Path:
    from bucketloader import BucketCache, compute_boundaries

    compute_boundaries(lengths, k, cache=BucketCache(directory))
    (entry,) = [p for p in Path(directory).rglob("*.json")]
    return entry


def _collate(samples):
    from bucketloader import BucketSampler, PadCollator

    sampler = BucketSampler([len(x) for x in samples], num_buckets=1, batch_size=len(samples))
    return PadCollator(sampler.shape_table)(samples)


def _cached_call(directory: str, lengths, k: int = 3) -> str:
    from bucketloader import BucketCache, compute_boundaries

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = compute_boundaries(lengths, k, cache=BucketCache(directory))
    return f"{b.tolist()}, {len(caught)} warning(s)"


# --- the probes -------------------------------------------------------------------------------
def collate_floats():
    t = _collate([[0, 0.5, 0.7], [0.2, 0.3, 0.9]])["inputs"]
    return f"{t.dtype} {[[round(v, 3) for v in row] for row in t.tolist()]}"


def collate_int_float():
    import torch

    t = _collate([torch.arange(3), torch.tensor([1.7, 2.9, 3.5])])["inputs"]
    return f"{t.dtype} {[round(v, 3) for v in t[1].tolist()]}"


def collate_int8_int64():
    import torch

    t = _collate([torch.zeros(3, dtype=torch.int8), torch.tensor([300, 400, 500])])["inputs"]
    return f"{t.dtype} {t[1].tolist()}"


def collate_object_array():
    import numpy as np

    t = _collate([np.array(["a", "b"], dtype=object), np.array(["c", "d"], dtype=object)])
    return f"{t['inputs']}"


def zero_lengths():
    import numpy as np

    from bucketloader import BucketSampler

    lengths = np.loadtxt(EUROPARL, dtype=np.int64)[:, 0].copy()
    lengths[::7] = 0
    s = BucketSampler(lengths, num_buckets=8, max_tokens=16384, strategy="percentile")
    return f"shortest buckets' shapes {sorted(s.shapes, key=lambda x: x[1])[:2]}"


def overflow_joint():
    from bucketloader import BucketSampler

    s = BucketSampler({"a": [2**62] * 4, "b": [2**62] * 4}, num_buckets=1, max_tokens=10)
    return f"shapes {s.shapes}"


def float_rounding_linear():
    from bucketloader import compute_boundaries

    return str(compute_boundaries([5, 7, 2**53 + 1], 4, strategy="linear").tolist())


def float_rounding_geometric():
    from bucketloader import compute_boundaries

    return str(compute_boundaries([5, 7, 2**53 + 1], 4, strategy="geometric").tolist())


def length_2_63():
    from bucketloader import compute_boundaries

    return str(compute_boundaries([2**63, 1], 2).tolist())


def batch_size_huge():
    from bucketloader import BucketSampler

    s = BucketSampler([3, 4, 5], num_buckets=1, batch_size=2**62)
    return f"accepted, shapes {s.shapes}"


def max_tokens_huge():
    from bucketloader import BucketSampler

    s = BucketSampler([3, 4, 5], num_buckets=1, max_tokens=2**63 - 1)
    return f"accepted, shapes {s.shapes}"


def cache_nested():
    d = tempfile.mkdtemp()
    entry = _solve_into(d, [3, 4, 4, 9, 10, 31])
    entry.write_text("[" * 100_000 + "]" * 100_000)
    return _cached_call(d, [3, 4, 4, 9, 10, 31])


def cache_fifo():
    d = tempfile.mkdtemp()
    entry = _solve_into(d, [3, 4, 4, 9, 10, 31])
    entry.unlink()
    os.mkfifo(entry)
    out = _cached_call(d, [3, 4, 4, 9, 10, 31])
    return f"{out}; the FIFO is {'still there' if entry.is_fifo() else 'gone'}"


def cache_31_boundaries():
    d = tempfile.mkdtemp()
    entry = _solve_into(d, [3, 4, 4, 9, 10, 31])
    data = json.loads(entry.read_text())

    def widen(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "boundaries":
                    node[key] = list(range(1, 32))
                else:
                    widen(value)

    widen(data)
    entry.write_text(json.dumps(data))
    return _cached_call(d, [3, 4, 4, 9, 10, 31])


def cache_unwritable():
    from bucketloader import BucketCache, compute_boundaries

    d = tempfile.mkdtemp()
    os.chmod(d, 0o555)
    if os.geteuid() == 0:  # root writes anywhere: drop to nobody for a real read-only directory
        os.setuid(65534)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for i in range(50):
            compute_boundaries([3, 4, 4, 9, 10, 31 + i], 3, cache=BucketCache(d))
    return f"{len(caught)} warning(s) over 50 calls"


def cache_mode():
    os.umask(0o022)
    d = tempfile.mkdtemp()
    entry = _solve_into(d, [3, 4, 4, 9, 10, 31])
    return f"mode {oct(entry.stat().st_mode & 0o777)}"


def xdg_relative():
    os.environ.pop("BUCKETLOADER_CACHE_DIR", None)
    os.environ["XDG_CACHE_HOME"] = "relative/cache"
    from bucketloader import BucketCache

    return f"directory {BucketCache().directory}"


def last_batch_empty():
    from bucketloader import BucketSampler

    s = BucketSampler([3, 4, 5, 6, 7], num_buckets=1, batch_size=2, last_batch="")
    return f"accepted, {len(s)} batches"


def last_batch_zero():
    from bucketloader import BucketSampler

    s = BucketSampler([3, 4, 5, 6, 7], num_buckets=1, batch_size=2, last_batch=0)
    return f"accepted, {len(s)} batches"


def requires_grad():
    import torch

    from bucketloader import BucketSampler

    s = BucketSampler(torch.tensor([3.0, 4.0], requires_grad=True), num_buckets=1, batch_size=2)
    return f"shapes {s.shapes}"


def bfloat16():
    import torch

    from bucketloader import compute_boundaries

    return str(compute_boundaries(torch.tensor([3, 4, 9], dtype=torch.bfloat16), 2).tolist())


def assign_empty():
    from bucketloader.boundaries import assign_buckets

    return str(assign_buckets([3, 4], []))


def ratio_empty():
    from bucketloader.boundaries import padding_ratio

    return str(padding_ratio([3, 4], []))


def bucketize_int():
    bucketize = _bucketize()
    try:
        it = bucketize(5, boundaries=[4, 8], batch_size=2)
    except (TypeError, ValueError) as exc:
        return f"at the call: {_err(exc)}"
    try:
        next(iter(it))
    except Exception as exc:
        return f"only at next(): {_err(exc)}"
    return "no error"


def load_state_garbage():
    bucketize = _bucketize()
    it = bucketize([[1, 2], [3]], boundaries=[4, 8], batch_size=2)
    state = dict(it.state_dict())
    state.pop("epoch", None)  # a state with its format but a key missing
    state["garbage"] = 1
    try:
        it.load_state_dict(state)
    except (TypeError, ValueError) as exc:
        return f"at the call: {_err(exc)}"
    try:
        list(it)
    except Exception as exc:
        return f"accepted, later {_err(exc)}"
    return "accepted, ignored"


def hf_lengths_int():
    import datasets

    from bucketloader import hf

    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]]})
    return str(hf.lengths(ds, 123))


def _cli(args: list[str]) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bucketloader.cli import main; sys.exit(main())",
            *args,
        ],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    err = proc.stderr.strip().splitlines()
    return f"exit {proc.returncode}, {len(err)} stderr line(s): {_short(err[-1] if err else '')}"


def cli_2_70():
    d = tempfile.mkdtemp()
    f = Path(d, "l.txt")
    f.write_text(f"3\n4\n{2**70}\n")
    return _cli(["report", str(f)])


def cli_plot_one_length():
    d = tempfile.mkdtemp()
    f = Path(d, "l.txt")
    f.write_text("512\n" * 100)
    png = Path(d, "p.png")
    out = _cli(["report", str(f), "--plot", str(png)])
    return f"{out}; PNG {'written' if png.exists() else 'missing'}"


def cli_batch_size_zero():
    d = tempfile.mkdtemp()
    f = Path(d, "l.txt")
    f.write_text("3\n4\n9\n10\n")
    cache = Path(d, "cache")
    out = _cli(["precompute", str(f), "-k", "2", "--batch-size", "0", "--cache-dir", str(cache)])
    entries = len(list(cache.rglob("*.json"))) if cache.exists() else 0
    return f"{out}; {entries} cache entr{'y' if entries == 1 else 'ies'} written"


def silent_drop_ranks():
    import numpy as np

    from bucketloader import BucketSampler

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 400, size=3001)
    seen = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rank in range(2):
            s = BucketSampler(
                lengths,
                num_buckets=8,
                strategy="percentile",
                batch_size=64,
                last_batch="drop",
                num_replicas=2,
                rank=rank,
            )
            seen += sum(len(b) for b in s)
    return f"{3001 - seen} of 3001 never seen, {len(caught)} warning(s)"


def silent_empty_epoch():
    from bucketloader import BucketSampler

    n, caught_n = 0, 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rank in range(2):
            s = BucketSampler(
                [3, 4, 5, 6, 7],
                num_buckets=1,
                batch_size=2,
                last_batch="drop",
                num_replicas=2,
                rank=rank,
            )
            n += len(list(s))
        caught_n = len(caught)
    return f"{n} batches over 2 ranks, {caught_n} warning(s)"


PROBES = {
    "PadCollator, float lists `[[0, .5, .7], [.2, .3, .9]]`": collate_floats,
    "PadCollator, `[arange(3), tensor([1.7, 2.9, 3.5])]` (row 1)": collate_int_float,
    "PadCollator, `[zeros(3, int8), tensor([300, 400, 500])]` (row 1)": collate_int8_int64,
    "PadCollator, numpy object arrays": collate_object_array,
    "zero lengths (Europarl, every 7th empty), `max_tokens=16384`": zero_lengths,
    "joint lengths `2**62` x 2, `max_tokens=10`": overflow_joint,
    "`compute_boundaries([5, 7, 2**53 + 1], 4, strategy='linear')`": float_rounding_linear,
    "the same, `strategy='geometric'`": float_rounding_geometric,
    "a length of `2**63`": length_2_63,
    "`batch_size=2**62`": batch_size_huge,
    "`max_tokens=2**63 - 1`": max_tokens_huge,
    "cache entry: 200 KB of nested `[[[...]]]`": cache_nested,
    "cache entry path is a FIFO": cache_fifo,
    "cache entry edited to 31 boundaries for k=3": cache_31_boundaries,
    "read-only cache directory, 50 calls": cache_unwritable,
    "new entry's mode under umask 022": cache_mode,
    "relative `XDG_CACHE_HOME`": xdg_relative,
    "`last_batch=''`": last_batch_empty,
    "`last_batch=0`": last_batch_zero,
    "lengths tensor with `requires_grad=True`": requires_grad,
    "bfloat16 lengths to `compute_boundaries`": bfloat16,
    "`assign_buckets([3, 4], [])`": assign_empty,
    "`padding_ratio([3, 4], [])`": ratio_empty,
    "`bucketize(5, ...)`": bucketize_int,
    "`BucketIterable.load_state_dict` of a state missing `epoch`": load_state_garbage,
    "`hf.lengths(ds, 123)`": hf_lengths_int,
    "CLI `report` on a file holding `2**70`": cli_2_70,
    "CLI `report --plot` on one distinct length": cli_plot_one_length,
    "CLI `precompute --batch-size 0`": cli_batch_size_zero,
    "`percentile` + `last_batch='drop'`, 2 ranks, 3,001 samples, B=64": silent_drop_ranks,
    "N=5, `batch_size=2`, 2 ranks, `last_batch='drop'`": silent_empty_epoch,
}


def _one(name: str) -> str:
    fn = PROBES[name]
    try:
        return fn()
    except BaseException as exc:  # the outcome we report, whatever it is
        return _err(exc)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--out", help="write this checkout's outcomes here (JSON)")
    p.add_argument("--before", help="outcomes of an older checkout: write the before/after table")
    p.add_argument("--table", default=str(HERE / "results" / "hardening.md"))
    a = p.parse_args()
    if a.probe:
        warnings.simplefilter("ignore")
        print(_one(a.probe))
        return
    outcomes = {}
    for name in PROBES:
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--probe", name],
                capture_output=True,
                text=True,
                timeout=20,
                cwd=os.getcwd(),
                env={**os.environ, "PYTHONPATH": os.getcwd()},  # this checkout's bucketloader
            )
            lines = proc.stdout.strip().splitlines()
            outcomes[name] = lines[-1] if lines else _short(proc.stderr.strip()[-300:])
        except subprocess.TimeoutExpired:
            outcomes[name] = "hangs (killed after 20 s)"
        print(f"{name}: {outcomes[name]}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(outcomes, indent=1))
    if a.before:
        before = json.loads(Path(a.before).read_text())
        rows = [
            "# Issue 12's bad inputs: before (53d729d) and after",
            "",
            "Command: see the docstring of `benchmarks/hardening.py` (each probe in its own "
            "process, 20 s timeout). Outcomes are printed as they came, shortened.",
            "",
            "| input | before | after |",
            "|---|---|---|",
        ]
        for name in PROBES:
            cell = lambda s: s.replace("|", "\\|")  # noqa: E731
            rows.append(f"| {name} | {cell(before.get(name, '-'))} | {cell(outcomes[name])} |")
        Path(a.table).write_text("\n".join(rows) + "\n")
        print(f"wrote {a.table}")


if __name__ == "__main__":
    main()
