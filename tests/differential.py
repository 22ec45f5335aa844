"""A differential harness: what the streams and samplers do, as one digest per seeded case.

Each case is a random configuration drawn from ``numpy.random.default_rng(case)`` over the real
lengths in ``tests/data`` (ranks, simulated DataLoader workers, resume points, shuffling, batch
rules, filters, packing). Running a case records everything a user can observe: the batches
(sample ids, planned shapes, real rows), ``shapes``, ``len``, the state at a resume point and the
batches after resuming from it, the report / counters, and the type and text of any error. The
record is canonical JSON; its SHA-256 is the case's digest.

``tests/data/differential_golden.json`` holds the digests the code had before the streams were
renovated (issue 20), the record of the old code; ``tests/test_differential.py`` recomputes them.
A case whose behaviour changed on purpose is listed in its ``CHANGED`` with the reason, and its
digest today is recorded in ``tests/data/differential_current.json`` (with a digest per record
key, ``key_digests``), so that every case is compared on every run: the others against the
golden, the changed ones against that recording. After a deliberate change to a changed case
(or to the ``CHANGED`` list), re-record with

    python tests/differential.py --record-changed

which rewrites that file and prints, per case, the record keys that differ from the previous
recording (``changed_keys``), the cases gone from the list, and any case the golden check
refuses; review those lines and commit them with the change. ``--dump DIR`` writes the full
records, to diff two trees; ``--write`` regenerates the golden itself (not for a change: the
golden is the old code's record).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch.utils.data

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "differential_golden.json"
#: The re-recorded digests of the cases changed on purpose (``--record-changed``).
CURRENT = DATA / "differential_current.json"
#: Number of stream and sampler cases.
STREAM_CASES = 300
SAMPLER_CASES = 150
_FILES = {
    "gsm8k": ("gsm8k_train_qa_tokens.txt", 1),
    "multi30k": ("multi30k_train_en_de_tokens.txt", 1),
    "europarl": ("europarl_v7_en_fr_20k_tokens.txt", 1),
    "librispeech": ("librispeech_train_clean_100_samples.txt", 1000),
    "ecoli": ("ecoli_k12_proteome_residues.txt", 4),
}
_CACHE: dict[str, np.ndarray] = {}


def _lengths(name: str) -> np.ndarray:
    if name not in _CACHE:
        file, scale = _FILES[name]
        arr = np.loadtxt(DATA / file, dtype=np.int64, ndmin=1)
        if arr.ndim == 2:
            arr = arr[:, 0] if name != "europarl" else arr
        _CACHE[name] = np.maximum(arr // scale, 1)
    return _CACHE[name]


def _draw(rng: np.random.Generator, pairs: bool = False) -> np.ndarray:
    names = ["gsm8k", "multi30k", "europarl", "librispeech", "ecoli"]
    name = "europarl" if pairs else names[int(rng.integers(len(names)))]
    arr = _lengths(name)
    n = int(rng.integers(20, 260))
    start = int(rng.integers(0, max(1, len(arr) - n)))
    out = np.minimum(arr[start : start + n], 600)
    if pairs:
        return np.maximum(out.reshape(len(out), -1)[:, :2], 1)
    return out.reshape(-1) if out.ndim == 1 else out[:, 0]


def _canon(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    if isinstance(x, np.ndarray):
        return _canon(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return round(float(x), 9)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _canon(getattr(x, f.name)) for f in dataclasses.fields(x)}
    return x


def _error(exc: BaseException) -> dict[str, str]:
    return {"error": type(exc).__name__, "message": str(exc)}


@contextlib.contextmanager
def _worker(wid: int, num: int) -> Iterator[None]:
    """Make ``torch.utils.data.get_worker_info()`` say this is DataLoader worker ``wid`` of
    ``num`` (the streams read it when a pass starts)."""
    real = torch.utils.data.get_worker_info
    info = types.SimpleNamespace(id=wid, num_workers=num, seed=0, dataset=None)
    torch.utils.data.get_worker_info = lambda: info  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.utils.data.get_worker_info = real  # type: ignore[assignment]


def _batch(batch: Any, key: str) -> Any:
    ids = [s["id"] if isinstance(s, dict) else s for s in batch]
    lens = [len(s[key]) if isinstance(s, dict) and key in s else None for s in batch]
    out: dict[str, Any] = {"ids": ids, "lens": lens}
    if hasattr(batch, "planned_shape"):
        out["planned"] = list(batch.planned_shape)
        out["real"] = batch.num_real
    return out


def _lanes(make: Callable[[], Any], stream: Any, workers: int, key: str) -> list[Any]:
    """The batches of a pass behind ``workers`` simulated DataLoader workers, in the order a
    DataLoader hands them out (round-robin over the workers still running)."""
    if workers == 1:
        return [_batch(b, key) for b in stream]
    per = []
    for w in range(workers):
        with _worker(w, workers):
            per.append([_batch(b, key) for b in iter(stream)])
    out, k = [], 0
    while any(per):
        for lane in per:
            if lane:
                out.append(lane.pop(0))
        k += 1
    return out


def _observe(stream: Any) -> dict[str, Any]:
    """A PackIterable's counters (``stats``; its ``report()`` is derived from them), else the
    stream's ``report()``."""
    out: dict[str, Any] = {}
    if hasattr(stream, "stats"):
        try:
            out["stats"] = _canon(stream.stats)
        except Exception as exc:
            out["stats"] = _error(exc)
    elif hasattr(stream, "report"):
        try:
            out["report"] = _canon(stream.report())
        except Exception as exc:
            out["report"] = _error(exc)
    return out


# -- stream cases ------------------------------------------------------------------------------
def _samples(lengths: np.ndarray, key: str) -> list[dict[str, Any]]:
    if lengths.ndim == 2:
        return [
            {"id": i, "input_ids": [1] * int(a), "labels": [2] * int(b)}
            for i, (a, b) in enumerate(lengths.tolist())
        ]
    return [{"id": i, key: [1] * int(n)} for i, n in enumerate(lengths.tolist())]


def stream_case(case: int) -> dict[str, Any]:
    """Build and run stream case ``case``; return its record."""
    from bucketloader import BucketSampler
    from bucketloader.plan import TokenBudget
    from bucketloader.stream import BucketIterable, estimate

    try:
        from bucketloader.stream import PackIterable
    except ImportError:
        from bucketloader.pack import PackIterable

    rng = np.random.default_rng([20, case])
    pack = rng.random() < 0.3
    pairs = not pack and rng.random() < 0.12
    lengths = _draw(rng, pairs)
    key = "input_ids"
    samples = _samples(lengths, key)
    world = int(rng.choice([1, 1, 2, 3]))
    workers = int(rng.choice([1, 1, 2]))
    seed = int(rng.integers(0, 5))
    rec: dict[str, Any] = {"case": case, "pack": pack, "world": world, "workers": workers}
    opts: dict[str, Any] = {}
    if pack:
        top = int(lengths.max())
        row = int(rng.choice([top, max(8, top // 2), top + 37, 64]))
        opts["row_length"] = row
        if rng.random() < 0.5:
            opts["batch_size"] = int(rng.integers(1, 5))
        else:
            opts["max_tokens"] = int(row * rng.integers(1, 5) + rng.integers(0, row))
        opts["open_rows"] = int(rng.choice([1, 4, 16, 256]))
        opts["overflow"] = str(rng.choice(["error", "drop", "truncate", "split"]))
        opts["last_batch"] = str(rng.choice(["pad", "fill", "drop"]))
        if world > 1 and rng.random() < 0.85:
            opts["last_batch"] = str(rng.choice(["pad", "fill"]))
        if rng.random() < 0.2:
            opts["max_documents"] = int(opts.get("batch_size", 1) * rng.integers(1, 6))
        opts["length_fn"] = key
    else:
        flat = lengths
        k = int(rng.integers(1, 6))
        choice = rng.random()
        if world > 1 or choice < 0.3:
            src: Any = BucketSampler(
                flat if flat.ndim == 1 else {"input_ids": flat[:, 0], "labels": flat[:, 1]},
                num_buckets=k,
                batch_size=4,
            )
            opts["boundaries"] = src
        elif choice < 0.45 and world == 1:
            opts["boundaries"] = estimate(k, sample_size=int(rng.integers(10, 80)))
        else:
            cols = [flat] if flat.ndim == 1 else [flat[:, 0], flat[:, 1]]
            bs = [sorted({int(x) for x in np.quantile(c, np.linspace(0.3, 1.0, k))}) for c in cols]
            if rng.random() < 0.25:
                bs = [b[:-1] or b for b in bs]  # the longest may not fit
            opts["boundaries"] = bs[0] if flat.ndim == 1 else {"input_ids": bs[0], "labels": bs[1]}
        r = rng.random()
        if r < 0.4:
            opts["batch_size"] = int(rng.integers(1, 9))
        elif r < 0.75:
            opts["max_tokens"] = int(rng.integers(200, 3000))
        else:
            opts["max_tokens"] = TokenBudget(
                int(rng.integers(200, 3000)),
                max_batch_size=int(rng.integers(2, 12)),
                multiple_of=int(rng.choice([1, 2, 4])),
                oversize=str(rng.choice(["error", "single", "drop"])),
            )
        opts["last_batch"] = str(rng.choice(["pad", "fill", "drop", "keep"]))
        if world > 1 and rng.random() < 0.85:
            opts["last_batch"] = str(rng.choice(["pad", "fill"]))
        opts["shuffle_buffer"] = int(rng.choice([0, 0, 5, 17]))
        opts["seed"] = seed
        opts["overflow"] = str(rng.choice(["error", "drop", "truncate", "drop", "truncate"]))
        if rng.random() < 0.2:
            opts["min_length"] = int(np.quantile(flat, 0.1))
        if rng.random() < 0.2:
            opts["max_length"] = int(np.quantile(flat, 0.9))
        if rng.random() < 0.2:
            opts["pad_to_multiple_of"] = int(rng.choice([2, 8]))
        opts["length_fn"] = ("input_ids", "labels") if pairs else key
    if world > 1 or (rng.random() < 0.15):
        opts["num_replicas"] = world
        opts["rank"] = int(rng.integers(world))
        per_rank = len(samples) / world / max(1, opts.get("batch_size", 4))
        steps = max(1, int(per_rank * rng.uniform(0.4, 1.5)))
        opts["steps_per_epoch"] = steps
        shard = samples[opts["rank"] :: world]
        if rng.random() < 0.08:
            shard = []
    else:
        shard = samples
    rec["opts"] = {
        k: (repr(v) if not isinstance(v, (int, str, list, tuple, type(None))) else _canon(v))
        for k, v in opts.items()
        if k != "boundaries"
    }
    if "boundaries" in opts:
        b = opts["boundaries"]
        rec["opts"]["boundaries"] = _canon(b) if isinstance(b, (list, dict)) else type(b).__name__
    cls = PackIterable if pack else BucketIterable

    def make() -> Any:
        return cls(shard, **opts)

    try:
        stream = make()
    except Exception as exc:
        rec["construct"] = _error(exc)
        return rec
    rec["shapes"] = _canon(stream.shapes)
    rec["boundaries"] = _canon(getattr(stream, "boundaries", None))
    rec["batch_sizes"] = _canon(getattr(stream, "batch_sizes", getattr(stream, "batch_size", None)))
    try:
        rec["len"] = len(stream)
    except TypeError as exc:
        rec["len"] = _error(exc)
    stream.set_epoch(int(rng.integers(0, 3)))
    try:
        full = _lanes(make, stream, workers, key)
        rec["batches"] = full
        rec["after"] = _observe(stream)
    except Exception as exc:
        rec["run"] = _error(exc)
        return rec
    # a resume point: the state after k batches, then the rest from a fresh stream
    k = int(rng.integers(0, len(full) + 1))
    try:
        if workers == 1:
            again = make()
            again.set_epoch(stream.epoch)
            it = iter(again)
            for _ in range(k):
                next(it)
            state = again.state_dict()
        else:
            state = stream.state_dict(batches_consumed=k)
        state = json.loads(json.dumps(state))
        # the solver version a packing stream's state records (NOTE [ A state across solver
        # versions ]), the record of the tails a worker packed (the digests a replay compares,
        # session 10), an exact state's own "tail" (session 11) and a bucket stream's fill
        # version and record of what its fill tops up from ("fill", s23-streamfill, NOTE
        # [ What a stream's fill repeats ]) postdate the golden states: they go to their own
        # record key, which golden_digest leaves out and the re-recorded digests of the changed
        # cases compare; so does the source's length (s29: NOTE [ A stream state names its
        # source's size ]), and the digest of the lengths a state over a source without a
        # length holds or replays (s31-stream: NOTE [ A stream state over a source without a
        # length ]; the cases' sources are lists, which record their length instead)
        later = {k: state[k] for k in ("tails", "tail", "fill", "lengths") if k in state}
        for name in ("solver", "fill", "samples"):
            if name in state["config"]:
                later[name if name == "solver" else f"config/{name}"] = state["config"][name]
        kept = {k: v for k, v in state.items() if k not in later}
        rec["state"] = _canon({**kept, "config": _without_versions(state["config"])})
        if later:
            rec["state_versions"] = _canon(later)
        resumed = make()
        resumed.load_state_dict(state)
        rec["resumed"] = _lanes(make, resumed, workers, key)
        rec["resumed_obs"] = _observe(resumed)
    except Exception as exc:
        rec["resume"] = _error(exc)
    return rec


def _without_versions(config: dict[str, Any]) -> dict[str, Any]:
    """A state's ``config`` without the keys that record library versions, not options."""
    return {k: v for k, v in config.items() if k not in ("solver", "fill", "samples")}


# -- sampler cases -----------------------------------------------------------------------------
def sampler_case(case: int) -> dict[str, Any]:
    """Build and run sampler case ``case``; return its record."""
    from bucketloader import BucketSampler, PackSampler
    from bucketloader.plan import TokenBudget

    rng = np.random.default_rng([21, case])
    pack = rng.random() < 0.2
    lengths = _draw(rng)
    world = int(rng.choice([1, 1, 2, 3]))
    rank = int(rng.integers(world))
    opts: dict[str, Any] = {
        "shuffle": bool(rng.random() < 0.7),
        "seed": int(rng.integers(0, 5)),
        "num_replicas": world,
        "rank": rank,
    }
    if pack:
        opts["row_length"] = int(rng.choice([int(lengths.max()), 128, 512]))
        opts["batch_size"] = int(rng.integers(1, 5))
        opts["overflow"] = str(rng.choice(["error", "drop", "truncate"]))
        opts["last_batch"] = str(rng.choice(["pad", "drop"]))
        cls: Any = PackSampler
    else:
        if rng.random() < 0.8:
            opts["num_buckets"] = int(rng.integers(1, 9))
            opts["strategy"] = str(
                rng.choice(["optimal", "percentile", "equal_mass", "linear", "geometric"])
            )
        else:
            opts["boundaries"] = sorted({int(x) for x in np.quantile(lengths, [0.5, 0.8, 1.0])})
        r = rng.random()
        if r < 0.4:
            opts["batch_size"] = int(rng.integers(1, 9))
        elif r < 0.75:
            opts["max_tokens"] = int(rng.integers(600, 4000))
        else:
            opts["max_tokens"] = TokenBudget(
                int(rng.integers(600, 4000)),
                max_batch_size=int(rng.integers(2, 12)),
                multiple_of=int(rng.choice([1, 2, 4])),
            )
        opts["last_batch"] = str(rng.choice(["pad", "fill", "drop", "keep"]))
        if rng.random() < 0.2:
            opts["pad_to_multiple_of"] = int(rng.choice([2, 8]))
        if rng.random() < 0.15:
            opts["max_length"] = int(np.quantile(lengths, 0.9))
            opts["overflow"] = str(rng.choice(["error", "drop", "truncate"]))
        cls = BucketSampler
    rec: dict[str, Any] = {
        "case": case,
        "cls": cls.__name__,
        "opts": {k: repr(v) if isinstance(v, TokenBudget) else v for k, v in opts.items()},
    }
    import warnings

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler = cls(lengths, **opts)
        rec["warnings"] = [str(w.message) for w in caught]
    except Exception as exc:
        rec["construct"] = _error(exc)
        return rec
    rec["shapes"] = _canon(sampler.shapes)
    rec["len"] = len(sampler)
    rec["boundaries"] = _canon(getattr(sampler, "boundaries", None))
    sampler.set_epoch(int(rng.integers(0, 3)))
    batches = list(sampler)
    rec["batches"] = _canon(batches)
    k = int(rng.integers(0, len(batches) + 1))
    it = iter(sampler)
    for _ in range(k):
        next(it)
    state = sampler.state_dict()
    # (the sampler's name, in its states since s27, is the case's class: left out of the record)
    rec["state"] = _canon({k: v for k, v in state.items() if k != "sampler"})
    if hasattr(sampler, "report"):
        rec["report"] = _canon(sampler.report())
    again = cls(lengths, **opts)
    again.load_state_dict(json.loads(json.dumps(state)))
    rec["resumed"] = _canon(list(again))
    return rec


def digest(rec: Any) -> str:
    """The SHA-256 (16 hex digits) of ``rec``'s canonical JSON."""
    text = json.dumps(_canon(rec), sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: Record keys the golden digests predate (see ``stream_case``): left out of ``golden_digest``.
LATER_KEYS = ("state_versions",)


def golden_digest(rec: dict[str, Any]) -> str:
    """The digest comparable with ``GOLDEN``: ``rec`` without the keys in ``LATER_KEYS``."""
    return digest({k: v for k, v in rec.items() if k not in LATER_KEYS})


def key_digests(rec: dict[str, Any]) -> dict[str, str]:
    """A digest (8 hex digits) per record key and per key of a dict it holds (``"state/config"``,
    ``"after/report"``; the inputs under ``"opts"`` are not split), so that two recordings of a
    case name the keys in which they differ."""
    out: dict[str, str] = {}
    for key, value in _canon(rec).items():
        out[key] = digest(value)[:8]
        if isinstance(value, dict) and key != "opts":
            out.update({f"{key}/{k}": digest(v)[:8] for k, v in value.items()})
    return out


def recording(rec: dict[str, Any]) -> dict[str, Any]:
    """What ``CURRENT`` keeps of a case: its full digest and its ``key_digests``."""
    return {"digest": digest(rec), "keys": key_digests(rec)}


def changed_keys(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Where two ``key_digests`` differ, as deep as they go: ``path`` (changed, none of its
    own keys named), ``+path`` (new) or ``-path`` (gone; the keys under a new or gone key are
    not repeated)."""
    differ = {p for p in set(old) | set(new) if old.get(p) != new.get(p)}
    out: list[str] = []
    for path in sorted(differ):
        parent = path.rpartition("/")[0]
        if path not in old or path not in new:
            if not (parent in differ and (parent not in old or parent not in new)):
                out.append(("+" if path not in old else "-") + path)
        elif not any(q.startswith(path + "/") for q in differ):
            out.append(path)
    return out


def run_all() -> dict[str, dict[str, Any]]:
    import warnings

    out: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in range(STREAM_CASES):
            out[f"stream-{c}"] = stream_case(c)
        for c in range(SAMPLER_CASES):
            out[f"sampler-{c}"] = sampler_case(c)
    return out


def record_changed(records: dict[str, dict[str, Any]], changed: dict[str, str]) -> list[str]:
    """Write ``CURRENT``: the recording of each case in ``changed`` (case -> reason); return one
    line per case whose recording is new or differs from the previous one (naming the keys that
    changed, ``changed_keys``), per case gone from it, and per case the golden check refuses."""
    before = json.loads(CURRENT.read_text()) if CURRENT.exists() else {}
    golden = json.loads(GOLDEN.read_text())
    now = {name: recording(records[name]) for name in sorted(changed, key=case_order)}
    lines = []
    for name, rec in now.items():
        if name not in before:
            lines.append(
                f"{name}: new ({', '.join(sorted(k for k in rec['keys'] if '/' not in k))})"
            )
        elif before[name]["digest"] != rec["digest"]:
            lines.append(f"{name}: {', '.join(changed_keys(before[name]['keys'], rec['keys']))}")
        if golden_digest(records[name]) == golden.get(name):
            lines.append(f"{name}: listed as changed but identical to the golden (remove it)")
    lines += [f"{name}: gone (no longer listed as changed)" for name in before if name not in now]
    lines += [
        f"{name}: differs from the golden but is not listed as changed"
        for name, rec in records.items()
        if name not in changed and golden_digest(rec) != golden.get(name)
    ]
    rows = (
        f"{json.dumps(n)}: {json.dumps(r, sort_keys=True, separators=(',', ':'))}"
        for n, r in now.items()
    )
    CURRENT.write_text("{\n" + ",\n".join(rows) + "\n}\n")  # one line per case
    return lines


def case_order(name: str) -> tuple[str, int]:
    kind, _, number = name.partition("-")
    return kind, int(number)


def main(argv: list[str]) -> int:
    records = run_all()
    if "--dump" in argv:
        where = Path(argv[argv.index("--dump") + 1])
        where.mkdir(parents=True, exist_ok=True)
        for name, rec in records.items():
            (where / f"{name}.json").write_text(
                json.dumps(_canon(rec), sort_keys=True, indent=1, default=repr)
            )
    if "--write" in argv:
        digests = {name: golden_digest(rec) for name, rec in records.items()}
        GOLDEN.write_text(json.dumps(digests, indent=0, sort_keys=True) + "\n")
    if "--record-changed" in argv:
        from test_differential import CHANGED

        lines = record_changed(records, CHANGED)
        print("\n".join(lines))
        print(f"{CURRENT.name}: {len(CHANGED)} changed cases recorded, {len(lines)} lines above")
    errors = sum(1 for r in records.values() if {"construct", "run", "resume"} & set(r))
    print(f"{len(records)} cases, {errors} end in an error (recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
