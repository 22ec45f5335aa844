"""Issue 21's classes of failure, replayed against a checkout: what each case does, and whether
that is right (a valid result, or one clear ValueError / TypeError; never a hang, a raw
exception, a silent loss or a trained model).

Every case runs in its own process (a hang is a 90 s timeout, ``--timeout``; memory is capped
at 3 GiB, so an unbounded read fails instead of filling the machine) and prints one JSON line:
``ok`` and the outcome. Run it from a checkout's root so that checkout's ``bucketloader`` is
imported::

    mkdir /tmp/before && git archive 7a0e618 | tar -x -C /tmp/before
    (cd /tmp/before && python /path/to/benchmarks/trust.py --out /tmp/before.json)
    python benchmarks/trust.py --out /tmp/after.json --before /tmp/before.json

With ``--before`` it writes ``benchmarks/results/trust.md``: per class, the cases tried and how
many misbehave before and after, then every case's outcome side by side. A case uses only names
both checkouts have; where the old one lacks a method the case needs (``PackSampler.report``,
``EvalSampler.state_dict``), that absence is the outcome.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _short(text: str, n: int = 140) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_short(str(exc))}"


def _clear(exc: BaseException, *words: str) -> bool:
    """One of our errors: ValueError / TypeError whose message names what it should."""
    return isinstance(exc, (ValueError, TypeError)) and all(w in str(exc) for w in words)


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught]


# --- class 1: precompile never trains the model -------------------------------------------------
def _model():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    return model, opt


def _inner(model, opt):
    import torch

    compiled = torch.compile(model, backend="eager", dynamic=False)

    def inner(batch):
        compiled(batch["inputs"]).sum().backward()
        opt.step()
        opt.zero_grad()

    return inner


def _snapshot(model, opt):
    import torch

    params = [p.detach().clone() for p in model.parameters()]
    state = [
        {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for s in opt.state.values()
    ]
    return params, state


def _same(a, b) -> bool:
    import torch

    if len(a[1]) != len(b[1]):
        return False
    params = all(torch.equal(x, y) for x, y in zip(a[0], b[0], strict=True))
    states = all(
        all(torch.equal(torch.as_tensor(s[k]), torch.as_tensor(t[k])) for k in s)
        for s, t in zip(a[1], b[1], strict=True)
    )
    return params and states


def _precompile_keeps(step, model, opt, **kw):
    import torch

    from bucketloader import BucketSampler, precompile

    _inner(model, opt)({"inputs": torch.tensor([[1, 2, 3]])})  # AdamW has state
    before = _snapshot(model, opt)
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    try:
        report = precompile(step, sampler, example=[1, 2, 3], cache=False, progress=False, **kw)
    except Exception as exc:
        same = _same(before, _snapshot(model, opt))
        ok = same and _clear(exc, "restore=")
        return ok, f"{_err(exc)}; weights {'unchanged' if same else 'CHANGED'}"
    same = _same(before, _snapshot(model, opt))
    return (
        same,
        f"restored={report.restored}; weights and AdamW state "
        f"{'bit-identical' if same else 'CHANGED'}",
    )


def pc_trainer():
    class Trainer:
        def __init__(self):
            self.model, self.opt = _model()
            self.inner = _inner(self.model, self.opt)

        def step(self, batch):
            self.inner(batch)

    t = Trainer()
    return _precompile_keeps(t.step, t.model, t.opt)


def pc_deep_closure():
    model, opt = _model()
    fn = _inner(model, opt)
    for _ in range(6):
        fn = (lambda f: lambda b: f(b))(fn)
    return _precompile_keeps(fn, model, opt)


def pc_partial():
    model, opt = _model()
    return _precompile_keeps(functools.partial(lambda f, b: f(b), _inner(model, opt)), model, opt)


def pc_slots():
    class Holder:
        __slots__ = ("fn",)

    model, opt = _model()
    h = Holder()
    h.fn = _inner(model, opt)
    return _precompile_keeps(lambda b: h.fn(b), model, opt)


def pc_method_wrapper():
    model, opt = _model()
    return _precompile_keeps(_inner(model, opt).__call__, model, opt)


def pc_eval():
    model, opt = _model()
    ns = {"f": _inner(model, opt)}
    return _precompile_keeps(lambda b: eval("f", ns)(b), model, opt)


def pc_loose_tensor():
    import torch

    from bucketloader import BucketSampler, precompile

    w = torch.zeros(4, requires_grad=True)

    @torch.compile(backend="eager", dynamic=False)
    def step(batch):
        (batch["inputs"].float().sum() * w).sum().backward()
        with torch.no_grad():
            w.sub_(w.grad)

    sampler = BucketSampler([3, 5, 8], num_buckets=1, batch_size=2)
    try:
        precompile(step, sampler, example=[1, 2], cache=False, progress=False)
    except Exception as exc:
        return _clear(exc, "restore="), _err(exc)
    ok = bool((w == 0).all())
    return ok, f"w after precompile: {w.detach().tolist()}"


def pc_notebook_class():
    ns = {"make": _model, "inner": _inner}
    exec(
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.model, self.opt = make()\n"
        "        self.fn = inner(self.model, self.opt)\n"
        "    def step(self, batch):\n"
        "        self.fn(batch)\n",
        ns,
    )
    t = ns["Trainer"]()
    return _precompile_keeps(t.step, t.model, t.opt)


def pc_counter():
    class Trainer:
        def __init__(self):
            self.model, self.opt = _model()
            self.inner = _inner(self.model, self.opt)
            self.global_step = 0

        def step(self, batch):
            self.inner(batch)
            self.global_step += 1

    t = Trainer()
    ok, text = _precompile_keeps(t.step, t.model, t.opt)
    return ok and t.global_step == 0, f"{text}; global_step={t.global_step}"


# --- class 2: CompileCache as hardened as BucketCache ------------------------------------------
def _record_dir():
    from bucketloader.compile import CompileCache
    from bucketloader.compile._key import digest

    d = Path(tempfile.mkdtemp())
    model = {"m": 1}
    key = digest(model)
    cache = CompileCache(d)
    cache.put(key, model, (2, 8), {"x": 1}, cold_seconds=1.0)
    (path,) = (d / "entries" / key).glob("*.json")
    return cache, key, path


def _record_probe(plant):
    cache, key, path = _record_dir()
    plant(path)
    try:
        (shapes, msgs) = _caught(lambda: cache.compiled_shapes(key))
    except Exception as exc:
        return False, _err(exc)
    return shapes == {} and len(msgs) <= 1, f"{len(shapes)} record(s), {len(msgs)} warning(s)"


def cc_fifo():
    return _record_probe(lambda p: (p.unlink(), os.mkfifo(p)))


def cc_dev_zero():
    return _record_probe(lambda p: (p.unlink(), p.symlink_to("/dev/zero")))


def cc_bomb():
    return _record_probe(lambda p: p.write_bytes(b"[" * 200_000))


def cc_negative_shape():
    from bucketloader.compile import CompileCache
    from bucketloader.compile._key import digest

    d = Path(tempfile.mkdtemp())
    model = {"m": 1}
    key = digest(model)
    body = {"format": "bucketloader.compile", "key": key, "shape": [-4, 8], "batch": {"x": 1},
            "model": model, "cold_seconds": 1.0, "warm_seconds": None, "updated": 1.0}  # fmt: skip
    from bucketloader.compile._key import KEY_FORMAT

    body["version"] = KEY_FORMAT
    name = CompileCache.shape_key(key, (-4, 8), {"x": 1})
    (d / "entries" / key).mkdir(parents=True)
    (d / "entries" / key / f"{name}.json").write_text(json.dumps(body))
    shapes, msgs = _caught(lambda: CompileCache(d).compiled_shapes(key))
    return not shapes, f"compiled_shapes: {list(shapes)}, {len(msgs)} warning(s)"


def _precompile_into(directory):
    from bucketloader import BucketSampler, precompile

    model, opt = _model()
    sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
    step = _inner(model, opt)
    try:
        (report, msgs) = _caught(
            lambda: [
                precompile(step, sampler, example=[1, 2, 3], cache=directory, progress=False)
                for _ in range(3)
            ][-1]
        )
    except Exception as exc:
        return False, _err(exc)
    ours = [m for m in msgs if "cache" in m.lower()]
    return len(ours) == 1 and len(report.shapes) == 2, (
        f"{len(report.shapes)} shapes precompiled, {len(ours)} cache warning(s) over 3 calls"
    )


def cc_dir_is_file():
    d = Path(tempfile.mkdtemp()) / "cache"
    d.write_text("a file")
    return _precompile_into(d)


def cc_entries_is_file():
    d = Path(tempfile.mkdtemp()) / "cache"
    d.mkdir()
    (d / "entries").write_text("a file")
    return _precompile_into(d)


def cc_read_only():
    d = Path(tempfile.mkdtemp()) / "cache"
    d.mkdir()
    (d / "inductor").mkdir()
    for p in (d / "inductor", d):
        os.chmod(p, 0o555)
    if os.geteuid() == 0:  # root writes anywhere: drop to nobody for a real read-only directory
        import torch._inductor.runtime.cache_dir_utils  # noqa: F401 (imports before setuid)

        _precompile_into(False)  # every lazy import happens now
        os.chmod(d.parent, 0o755)
        os.environ["HOME"] = "/tmp"
        os.setuid(65534)
    return _precompile_into(d)


def cc_pickles():
    import ast
    import inspect

    from bucketloader.compile import _dist

    pickling = {
        "broadcast_object_list",
        "all_gather_object",
        "gather_object",
        "scatter_object_list",
    }
    calls = [
        node.func.attr
        for node in ast.walk(ast.parse(inspect.getsource(_dist)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    ]
    n = sum(c in pickling for c in calls)
    return n == 0, f"{n} pickling collective call(s) in bucketloader.compile._dist"


def _kill_loop(write, directory: Path, kills: int = 20) -> tuple[bool, str]:
    import random

    rng = random.Random(0)
    for _ in range(kills):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                write(0)
                os.write(w, b"x")
                i = 1
                while True:
                    write(i)
                    i += 1
            finally:
                os._exit(0)
        os.close(w)
        os.read(r, 1)
        os.close(r)
        time.sleep(rng.uniform(0, 0.004))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    write(0)
    left = [p for p in directory.rglob(".tmp*") if p.is_file()]
    return not left, f"{kills} kills, then one write: {len(left)} temporary file(s) left"


def kill_bucket():
    import numpy as np

    from bucketloader import BucketCache
    from bucketloader.histogram import LengthHistogram
    from bucketloader.solve import solve_boundaries

    d = Path(tempfile.mkdtemp())
    lengths = np.arange(1, 2000)
    cache, sol, hist = (
        BucketCache(d),
        solve_boundaries(lengths, 8),
        LengthHistogram.from_lengths(lengths),
    )
    return _kill_loop(lambda i: cache.put(hist, sol), d)


def kill_compile():
    from bucketloader.compile import CompileCache
    from bucketloader.compile._key import digest

    d = Path(tempfile.mkdtemp())
    model = {"m": [64] * 200}
    key, cache = digest(model), CompileCache(d)
    return _kill_loop(lambda i: cache.put(key, model, (8, 16), {"x": 1}, cold_seconds=1.0), d)


# --- class 3: silent loss -----------------------------------------------------------------------
def loss_pack_overflow():
    from bucketloader import PackSampler

    s, msgs = _caught(
        lambda: PackSampler([3, 20, 4, 30, 5, 25], row_length=8, batch_size=2, overflow="drop")
    )
    kept = sum(len(b) for b in s)
    counted = getattr(s, "report", None)
    dropped = counted().totals.get("too_long") if counted else None
    ok = bool(msgs) and dropped == 3
    return ok, f"{kept} of 6 documents packed, {len(msgs)} warning(s), report too_long={dropped}"


def loss_pack_last_batch():
    from bucketloader import PackSampler

    lengths = [4] * 101
    made, msgs = _caught(
        lambda: [
            PackSampler(
                lengths, row_length=8, batch_size=2, last_batch="drop", num_replicas=2, rank=r
            )
            for r in (0, 1)
        ]
    )
    seen = {i for s in made for b in s for i in b}
    counted = getattr(made[0], "report", None)
    dropped = counted().totals.get("dropped") if counted else None
    ok = bool(msgs) and dropped == 101 - len(seen)
    return (
        ok,
        f"{101 - len(seen)} of 101 never seen, {len(msgs)} warning(s), report dropped={dropped}",
    )


def loss_eval_filter():
    import numpy as np

    from bucketloader import EvalSampler

    lengths = [3, 4, 9, 10, 12, 8, 2]
    s, msgs = _caught(
        lambda: EvalSampler(lengths, num_buckets=2, batch_size=2, max_length=9, overflow="drop")
    )
    index = s.gathered_index()
    try:
        out = s.restore(np.where(index >= 0, index * 10, -1)).tolist()
    except Exception as exc:
        return False, f"{len(msgs)} warning(s); restore: {_err(exc)}"
    ok = bool(msgs) and out == [0, 10, 20, 50, 60]
    return ok, f"{len(msgs)} warning(s); restore -> {out}"


def loss_bucket_ranks():
    from bucketloader import BucketSampler

    made, msgs = _caught(
        lambda: [
            BucketSampler(
                [5] * 5, num_buckets=1, batch_size=2, last_batch="drop", num_replicas=2, rank=r
            )
            for r in (0, 1)
        ]
    )
    seen = {i for s in made for b in s for i in b}
    return bool(msgs), f"{5 - len(seen)} of 5 never seen, {len(msgs)} warning(s)"


# --- class 5: contracts that differ between siblings --------------------------------------------
def _restore(index):
    import numpy as np

    from bucketloader.evaluation import restore_order

    try:
        out = restore_order(np.arange(len(index)) * 10, index)
    except Exception as exc:
        return _clear(exc, "index"), _err(exc)
    return False, f"accepted: {out.tolist()}"


def ro_minus_two():
    return _restore([1, -2, 0])


def ro_floats():
    return _restore([1.0, 0.0])


def ro_bools():
    import numpy as np

    return _restore(np.array([True, False]))


def pack_read_only():
    import numpy as np

    from bucketloader import PackSampler

    a = np.array([5, 3, 2, 5, 3, 2, 8])
    PackSampler(a, row_length=8, batch_size=2)
    return a.flags.writeable, f"caller's array writeable: {a.flags.writeable}"


def grouped_empty():
    from bucketloader.sampler import GroupedDataset

    try:
        GroupedDataset([])
    except Exception as exc:
        return _clear(exc, "datasets"), _err(exc)
    return False, "accepted"


def grouped_key():
    from bucketloader.sampler import GroupedDataset

    data = GroupedDataset([[{"x": 1, "dataset": "wiki"}]])
    try:
        got = data[0]
    except Exception as exc:
        return _clear(exc, "dataset"), _err(exc)
    return got["dataset"] == "wiki", f"sample's own 'dataset' -> {got['dataset']!r}"


def grouped_iterable():
    import torch

    from bucketloader.sampler import GroupedDataset

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield {"x": 1}

    try:
        GroupedDataset([Stream()])
    except Exception as exc:
        return _clear(exc, "datasets"), _err(exc)
    return False, "accepted"


def subsample_huge():
    import torch

    from bucketloader import static

    x, labels = torch.randn(2, 100, 4), torch.zeros(2, 100, dtype=torch.bool)
    try:
        static.balanced_subsample(x, labels, 10**9)
    except Exception as exc:
        return _clear(exc, "num_samples"), _err(exc)
    return False, "accepted"


def pc_example_list():
    import torch

    from bucketloader import BucketSampler, precompile

    seen = []

    @torch.compile(backend="eager", dynamic=False)
    def step(batch):
        seen.append(sorted(map(str, batch)) if isinstance(batch, dict) else type(batch).__name__)
        return batch

    sampler = BucketSampler([3, 5, 8], num_buckets=1, batch_size=2)
    data = [torch.tensor([1, 2, 3]), torch.tensor([4, 5])]
    try:
        precompile(step, sampler, example=data[:1], cache=False, progress=False, restore=[])
    except Exception as exc:
        return False, _err(exc)
    real = sorted(map(str, sampler.collator()(data)))
    ok = all(s == real for s in seen)
    return ok, f"precompiled batches' fields: {seen[0]}, training's: {real}"


def pc_cuda7():
    import torch

    from bucketloader import BucketSampler, precompile

    if torch.cuda.device_count() > 7:  # pragma: no cover
        return True, "a machine with 8 GPUs"
    sampler = BucketSampler([3, 5, 8], num_buckets=1, batch_size=2)
    try:
        precompile(
            lambda b: b, sampler, example=[1, 2], device="cuda:7", cache=False, progress=False
        )
    except Exception as exc:
        return _clear(exc, "device"), _err(exc)
    return False, "accepted"


# --- class 6: peer invariants -------------------------------------------------------------------
def budget_zero_lengths():
    from bucketloader import BucketSampler
    from bucketloader.plan import TokenBudget

    s = BucketSampler(
        [0] * 5 + [3] * 2, num_buckets=2, max_tokens=TokenBudget(9, max_batch_size=5, multiple_of=2)
    )
    return all(b % 2 == 0 for b, _ in s.shapes), f"shapes {s.shapes}"


def _cli_read(name, text):
    from bucketloader.cli.files import read_lengths

    p = Path(tempfile.mkdtemp()) / name
    p.write_text(text)
    try:
        out = read_lengths(p, "n" if name.endswith(".jsonl") else None).tolist()
    except Exception as exc:
        return "refused" in str(exc) or "integer" in str(exc), _err(exc)
    return 9007199254740993 in out, f"read {out}"


def cli_txt():
    return _cli_read("l.txt", "9007199254740993.0\n5\n")


def cli_jsonl():
    return _cli_read("l.jsonl", '{"n": 9007199254740993.0}\n{"n": 5}\n')


def cli_npy():
    import numpy as np

    from bucketloader.cli.files import read_lengths

    p = Path(tempfile.mkdtemp()) / "l.npy"
    np.save(p, np.array([3.0, 2.0**53 + 2]))
    try:
        out = read_lengths(p).tolist()
    except Exception as exc:
        return "integer" in str(exc), _err(exc)
    return False, f"read {out} without a word"


# --- resume ------------------------------------------------------------------------------------
def resume_eval():
    from bucketloader import EvalSampler

    s = EvalSampler(list(range(1, 60)), num_buckets=3, batch_size=4)
    ref = [list(b) for b in s]
    it = iter(s)
    head = [list(next(it)) for _ in range(3)]
    try:
        state = s.state_dict()
        t = EvalSampler(list(range(1, 60)), num_buckets=3, batch_size=4)
        t.load_state_dict(state)
    except Exception as exc:
        return False, _err(exc)
    rest = [list(b) for b in t]
    return head + rest == ref, f"3 + {len(rest)} batches resumed of {len(ref)}"


CASES = {
    "1 precompile never trains": {
        "`trainer.step` of a plain object holding model + AdamW": pc_trainer,
        "model 6 closures deep": pc_deep_closure,
        "`functools.partial` around the step": pc_partial,
        "model reached through a `__slots__` object": pc_slots,
        "`step.__call__` (a method-wrapper)": pc_method_wrapper,
        "step reaching the model through `eval`": pc_eval,
        "a loose `requires_grad` tensor updated in place": pc_loose_tensor,
        "`self.global_step += 1` on the trainer": pc_counter,
        "trainer class defined in a notebook cell (exec'd code)": pc_notebook_class,
    },
    "2 CompileCache hardened": {
        "record path is a FIFO": cc_fifo,
        "record symlinked to `/dev/zero`": cc_dev_zero,
        "record: 200 KB of nested `[`": cc_bomb,
        "self-consistent record with shape `[-4, 8]`": cc_negative_shape,
        "cache directory is a file (3 precompiles)": cc_dir_is_file,
        "`entries/` is a file (3 precompiles)": cc_entries_is_file,
        "read-only cache directory (3 precompiles)": cc_read_only,
        "ranks exchange pickles": cc_pickles,
        "20 kill -9 mid-write, BucketCache: temp files after the next write": kill_bucket,
        "20 kill -9 mid-write, CompileCache: temp files after the next write": kill_compile,
    },
    "3 silent loss": {
        "`PackSampler(overflow='drop')`, half of 6 documents": loss_pack_overflow,
        "`PackSampler(last_batch='drop')` on 2 ranks": loss_pack_last_batch,
        "`EvalSampler(max_length=9, overflow='drop')` + `restore`": loss_eval_filter,
        "`BucketSampler(last_batch='drop')`, N=5 on 2 ranks": loss_bucket_ranks,
    },
    "5 sibling contracts": {
        "`restore_order` index -2": ro_minus_two,
        "`restore_order` float index": ro_floats,
        "`restore_order` bool index": ro_bools,
        "`PackSampler(a)` leaves `a` writable": pack_read_only,
        "`GroupedDataset([])`": grouped_empty,
        "`GroupedDataset` and a sample's own `dataset` key": grouped_key,
        "`GroupedDataset([IterableDataset])`": grouped_iterable,
        "`balanced_subsample(x, labels, 10**9)`": subsample_huge,
        "`precompile(example=[tensor])`": pc_example_list,
        "`precompile(device='cuda:7')` on a CPU build": pc_cuda7,
    },
    "6 peer invariants": {
        "`TokenBudget(9, max_batch_size=5, multiple_of=2)`, empty samples": budget_zero_lengths,
        "CLI `.txt` `9007199254740993.0`": cli_txt,
        "CLI `.jsonl` `9007199254740993.0`": cli_jsonl,
        "CLI `.npy` float64 `2**53 + 2`": cli_npy,
    },
    "resume": {
        "`EvalSampler` state after 3 batches": resume_eval,
    },
}
PROBES = {name: fn for group in CASES.values() for name, fn in group.items()}


def _one(name: str) -> dict:
    limit = 3 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        ok, text = PROBES[name]()
    except BaseException as exc:  # the outcome we report, whatever it is
        ok, text = False, _err(exc)
    return {"ok": bool(ok), "outcome": _short(text)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--out", help="write this checkout's outcomes here (JSON)")
    p.add_argument("--before", help="outcomes of an older checkout: write the before/after table")
    p.add_argument("--table", default=str(HERE / "results" / "trust.md"))
    p.add_argument("--after", help="this checkout's outcomes from an earlier --out: table only")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds before a case hangs")
    a = p.parse_args()
    if a.probe:
        warnings.simplefilter("ignore")
        print(json.dumps(_one(a.probe)))
        return
    if a.after and a.before:
        _table(json.loads(Path(a.before).read_text()), json.loads(Path(a.after).read_text()),
               Path(a.table))  # fmt: skip
        return
    outcomes = {}
    for name in PROBES:
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--probe", name],
                capture_output=True,
                text=True,
                timeout=a.timeout,
                cwd=os.getcwd(),
                env={**os.environ, "PYTHONPATH": os.getcwd()},  # this checkout's bucketloader
                start_new_session=True,
            )
            lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
            outcomes[name] = (
                json.loads(lines[-1])
                if lines
                else {"ok": False, "outcome": "crashed: " + _short(proc.stderr.strip()[-300:])}
            )
        except subprocess.TimeoutExpired:
            outcomes[name] = {"ok": False, "outcome": f"hangs (killed after {a.timeout:.0f} s)"}
        print(f"{name}: {outcomes[name]}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(outcomes, indent=1))
    if a.before:
        _table(json.loads(Path(a.before).read_text()), outcomes, Path(a.table))


def _table(before: dict, after: dict, path: Path) -> None:
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    bad = lambda runs, names: sum(not runs.get(n, {"ok": False})["ok"] for n in names)  # noqa: E731
    rows = [
        "# Issue 21's classes of failure: before (7a0e618) and after",
        "",
        "Command: see the docstring of `benchmarks/trust.py` (each case in its own process, 90 s "
        "timeout, 3 GiB address-space cap). A case misbehaves when it hangs, crashes with a raw "
        "exception, loses samples without a count and a warning, or changes the model; a valid "
        "result or one clear `ValueError` / `TypeError` naming the argument is right. Class 4 "
        "(streams over ranks) is issue 20's. The runs are kept in `results/trust_before.json` and "
        "`results/trust_after.json` (four cases written after the first run were replayed one "
        "by one with `--probe NAME` against both checkouts and merged); `--before B --after A` "
        "rebuilds this table from them.",
        "",
        "| class | cases tried | misbehave before | misbehave after |",
        "|---|---:|---:|---:|",
    ]
    for group, cases in CASES.items():
        rows.append(f"| {group} | {len(cases)} | {bad(before, cases)} | {bad(after, cases)} |")
    rows.append(f"| **all** | {len(PROBES)} | {bad(before, PROBES)} | {bad(after, PROBES)} |")
    rows += ["", "| class | case | before | after |", "|---|---|---|---|"]
    mark = lambda r: ("ok: " if r["ok"] else "**BAD**: ") + cell(r["outcome"])  # noqa: E731
    for group, cases in CASES.items():
        for name in cases:
            old = before.get(name, {"ok": False, "outcome": "-"})
            rows.append(f"| {group.split()[0]} | {name} | {mark(old)} | {mark(after[name])} |")
    path.write_text("\n".join(rows) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
