"""End-to-end torch.compile training: dynamic padding, padding to the max, and bucketloader's
static shapes compiled once (cold, from a warm cache, and sharded over two ranks).

Trains a small real model (token transformer on Multi30k lengths, or conv front-end + transformer
on LibriSpeech frame lengths) with ``torch.compile`` on the same samples, each variant in its own
fresh process (as a job would run it), for ``--steps`` steps (default 1,000: ten epochs of 3,200
samples at batch 32):

1. dynamic padding to the batch max, ``torch.compile`` default (automatic dynamic shapes);
2. dynamic padding, ``dynamic=False`` (recompiles until the recompile limit, then eager);
3. padding to the global max (one shape), cold; ``3w``: the same with the cache variant 3 left;
4. bucketloader ``BucketSampler`` + ``PadCollator``, k buckets, ``dynamic=False``, every planned
   shape compiled by ``bucketloader.compile.precompile`` before step 1 into a new cache directory
   (cold); ``4w``: a new process precompiles from that directory (warm: a resume, a sweep);
   ``4s``: two gloo processes share the precompile (each compiles half the shapes, then loads the
   other half from the shared directory), then rank 0 trains;
5. on a GPU only: variant 4 with CUDA graphs (``mode="reduce-overhead"``).

Per variant: compilations (dynamo graphs, recompiles, shapes run eagerly past the recompile
limit), the compile phase (``precompile``'s wall time, or the excess of the steps that compiled),
steady step time, real-token throughput, padding, and the **total wall time (compile + steps) at
100, 1,000 and 10,000 steps** (100 and 1,000 measured step by step; 10,000 = the measured 1,000
plus 9,000 x the median steady step), with the break-even step against padding to the max. Then
``recommend_num_buckets``, fed by ``calibrate`` on the same model (cold and warm costs), is checked
against the measured totals. A throw-away compile first builds inductor's precompiled C++ header,
which lives outside the cache directories, so no variant pays that one-off. Run:

    .venv/bin/python benchmarks/compile_e2e.py            # writes benchmarks/results/compile_e2e.md
    .venv/bin/python benchmarks/compile_e2e.py --backend aot_eager --steps 60 --out /tmp/x.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"  # the real length files (tests/data/SOURCES.md)
VOCAB, FEATS, D_MODEL = 1000, 40, 64
NS = (100, 1_000, 10_000)
NAMES = {
    "1": "1. dynamic pad, compile default",
    "2": "2. dynamic pad, dynamic=False",
    "3": "3. pad to global max, cold",
    "3w": "3w. pad to global max, warm cache",
    "4": "4. bucketloader {s} k={k}, cold",
    "4w": "4w. bucketloader {s} k={k}, warm cache",
    "4s": "4s. bucketloader {s} k={k}, 2-rank sharded",
    "5": "5. bucketloader {s} k={k}, CUDA graphs",
}


class Block(nn.Module):
    def __init__(self, d: int = D_MODEL, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias
        )
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class Model(nn.Module):
    """Token embedding (text) or two convolutions (audio features), 2 blocks, masked CE loss."""

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task = task
        if task == "text":
            self.front: nn.Module = nn.Embedding(VOCAB, D_MODEL)
        else:
            self.front = nn.Sequential(
                nn.Conv1d(FEATS, D_MODEL, 3, padding=1), nn.GELU(),
                nn.Conv1d(D_MODEL, D_MODEL, 3, padding=1), nn.GELU(),
            )  # fmt: skip
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(D_MODEL, VOCAB if task == "text" else 32)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        valid = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        bias = torch.zeros(valid.shape, device=x.device).masked_fill(~valid, -1e4)[:, None, None]
        if self.task == "text":
            h, target = self.front(x), x.roll(-1, dims=1)
        else:
            h = self.front(x.transpose(1, 2)).transpose(1, 2)
            target = (x[..., 0] > 0).long() + 2 * (x[..., 1] > 0).long()
        for block in self.blocks:
            h = block(h, bias)
        loss = F.cross_entropy(self.head(h).flatten(0, 1), target.flatten(), reduction="none")
        return (loss * valid.flatten()).sum() / valid.sum().clamp(min=1)


class Samples(torch.utils.data.Dataset):
    """Sample i: random tokens (text) or random features (audio) of length lengths[i]."""

    def __init__(self, lengths: np.ndarray, task: str, seed: int) -> None:
        self.lengths, self.task, self.seed = lengths, task, seed

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, int(i)]))
        n = int(self.lengths[i])
        if self.task == "text":
            return torch.from_numpy(rng.integers(0, VOCAB, n))
        return torch.from_numpy(rng.standard_normal((n, FEATS), dtype=np.float32))


def pad_collate(samples: list[torch.Tensor], width: int | None) -> dict[str, torch.Tensor]:
    """Dynamic padding to the batch max (``width=None``) or to a fixed width."""
    lengths = torch.tensor([len(s) for s in samples])
    t = int(lengths.max()) if width is None else width
    out = samples[0].new_zeros((len(samples), t, *samples[0].shape[1:]))
    for row, s in enumerate(samples):
        out[row, : len(s)] = s
    return {"inputs": out, "lengths": lengths}


def load_lengths(task: str) -> np.ndarray:
    if task == "text":  # Multi30k English side, whitespace tokens (4..41)
        return np.loadtxt(DATA / "multi30k_train_en_de_tokens.txt", dtype=np.int64)[:, 0]
    samples = np.loadtxt(DATA / "librispeech_train_clean_100_samples.txt", dtype=np.int64)
    return -(-samples // (320 * 4))  # 20 ms wav2vec frames, then 4x downsampled (18..307)


# -- one variant, in its own process ------------------------------------------------------------
def setup(args: argparse.Namespace) -> tuple[np.ndarray, Samples]:
    torch.set_num_threads(args.threads)
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = args.compile_threads
    all_lengths = load_lengths(args.task)
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 1]))
    lengths = all_lengths[rng.permutation(all_lengths.size)[: args.samples]]
    return lengths, Samples(lengths, args.task, args.seed)


def epoch_batches(args, lengths, data, sampler=None, collate=None) -> list[dict]:
    """``args.steps`` batches, epoch after epoch, collated up front (as for every variant)."""
    out: list[dict] = []
    bs, epoch = args.batch_size, 0
    while len(out) < args.steps:
        if sampler is None:
            rng = np.random.default_rng(np.random.SeedSequence([args.seed, 2, epoch]))
            order = rng.permutation(len(data))
            width = int(lengths.max()) if args.variant in ("3", "3w") else None
            for s in range(0, len(order) - bs + 1, bs):
                out.append(pad_collate([data[int(i)] for i in order[s : s + bs]], width))
        else:
            sampler.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=collate)
            out.extend(loader)
        epoch += 1
    return out[: args.steps]


def worker(args: argparse.Namespace) -> None:
    """Run one variant; write its measurements as JSON to ``args.result``."""
    from torch._dynamo.utils import counters

    from bucketloader.collate import Field
    from bucketloader.compile import CompileCache, precompile
    from bucketloader.sampler import BucketSampler

    load0 = os.getloadavg()[0]
    lengths, data = setup(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rank, world = 0, 1
    if args.variant == "4s":
        import torch.distributed as dist

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['PORT']}", rank=rank,
            world_size=world,
        )  # fmt: skip
    sampler = collate = None
    if args.variant.startswith(("4", "5")):
        sampler = BucketSampler(lengths, num_buckets=args.k, strategy=args.strategy,
                                batch_size=args.batch_size, seed=args.seed,
                                num_replicas=1, rank=0)  # fmt: skip
        collate = sampler.collator(fields=None if args.task == "text" else Field(dims=0))
    batches = epoch_batches(args, lengths, data, sampler, collate)

    kwargs: dict = {"fullgraph": True, "backend": args.backend}
    if args.variant != "1":
        kwargs["dynamic"] = False
    if args.variant == "2":
        kwargs["fullgraph"] = False  # past the recompile limit: eager, not an error
    if args.variant == "5":
        kwargs["mode"] = "reduce-overhead"
    if args.variant in ("1", "2", "3", "3w"):  # lazily compiled: inductor's cache in cache_dir
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(args.cache_dir) / "inductor")
    torch.manual_seed(0)
    model = Model(args.task).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, **kwargs)

    def step(batch: dict) -> None:  # what precompile compiles: forward and backward
        if args.variant == "5":  # CUDA graphs: a new iteration may overwrite the last outputs
            torch.compiler.cudagraph_mark_step_begin()
        compiled(batch["inputs"].to(device), batch["lengths"].to(device)).backward()

    report = None
    t0 = time.perf_counter()
    if sampler is not None:
        cache = CompileCache(args.cache_dir)
        report = precompile(step, sampler, example=data, collate_fn=collate,
                            restore=[model, opt], cache=cache, progress=False)  # fmt: skip
    pre_s = time.perf_counter() - t0
    if world > 1:
        dist.barrier()
        done = [None] * world
        dist.all_gather_object(done, _report_json(report, pre_s))
    graphs0 = counters["stats"]["unique_graphs"]
    rows = []
    if rank == 0:
        seen, eager_shapes = set(), set()
        for batch in batches:
            graphs = counters["stats"]["unique_graphs"]
            t1 = time.perf_counter()
            step(batch)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            dt = time.perf_counter() - t1
            shape = tuple(batch["inputs"].shape[:2])
            compiled_now = counters["stats"]["unique_graphs"] > graphs
            if shape not in seen and not compiled_now and seen and kwargs.get("dynamic") is False:
                if sampler is None:  # static graphs, no precompile: a new shape ran eagerly
                    eager_shapes.add(shape)
            seen.add(shape)
            real = int(batch["lengths"].sum())
            rows.append((shape, dt, bool(compiled_now), real))
    out = {
        "variant": args.variant,
        "steps": len(rows),
        "step_s": [r[1] for r in rows],
        "compiled_step": [r[2] for r in rows],
        "shapes": len({r[0] for r in rows}),
        "planned_shapes": len(sampler.shapes) if sampler is not None else None,
        "graphs_precompile": graphs0,
        "graphs_training": counters["stats"]["unique_graphs"] - graphs0,
        "eager_shapes": len(eager_shapes) if rank == 0 else 0,
        "padded": sum(r[0][0] * r[0][1] for r in rows),
        "real": sum(r[3] for r in rows),
        "real_per_step": [r[3] for r in rows],
        # the job's compile phase: the slowest rank's precompile
        "precompile_s": max(x["wall_s"] for x in done) if world > 1 else pre_s,
        "report": _report_json(report, pre_s),
        "ranks": done if world > 1 else None,
        "load": [load0, os.getloadavg()[0]],
    }
    if rank == 0:
        Path(args.result).write_text(json.dumps(out))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def _report_json(report, wall: float) -> dict | None:
    if report is None:
        return None
    return {
        "wall_s": wall,
        "compile_s": report.seconds("compile"),
        "load_s": report.seconds("load"),
        "wait_s": report.wait_seconds,
        "kinds": {k: report.count(k) for k in ("cold", "warm", "traced", "memory")},
        "shared_by": report.shared_by,
        "key": report.key,
        "shapes": [list(s) for s in report.shapes],
        "table": report.table(),
    }


def calibrate_worker(args: argparse.Namespace) -> None:
    """calibrate() on a fresh model (cold and warm costs), written to ``args.result``."""
    from bucketloader.analysis import calibrate

    lengths, _ = setup(args)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Model(args.task).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feats = () if args.task == "text" else (FEATS,)
    make = lambda r, t: (  # noqa: E731
        torch.randint(0, VOCAB, (r, t), device=device) if args.task == "text"
        else torch.randn(r, t, *feats, device=device), torch.full((r,), t, device=device)
    )  # fmt: skip
    bs = args.batch_size
    t0 = time.perf_counter()
    cal = calibrate(
        model,
        example_shapes=[(bs, int(np.median(lengths))), (bs, int(lengths.max()))],
        make_inputs=make,
        repeats=10,
        after_call=lambda loss: (loss.backward(), opt.step(), opt.zero_grad()),
        compile_kwargs={"fullgraph": True, "backend": args.backend},
    )
    out = {**dataclasses.asdict(cal), "seconds": time.perf_counter() - t0}
    Path(args.result).write_text(json.dumps(out))


def portable_worker(args: argparse.Namespace) -> None:
    """One fwd+bwd compile of one shape with inductor in ``args.cache_dir``; counts g++ builds.

    ``--variant``: ``cold`` (then ``torch.compiler.save_cache_artifacts()`` to ``--result``.bin),
    ``artifacts`` (``load_cache_artifacts`` first), ``dir`` (whatever the directory holds)."""
    import torch._inductor.cpp_builder as cpp_builder
    from torch._dynamo.utils import counters

    setup(args)
    builds = [0]
    original = cpp_builder.CppBuilder.build

    def counted(self, *a, **k):
        builds[0] += 1
        return original(self, *a, **k)

    cpp_builder.CppBuilder.build = counted  # type: ignore[method-assign]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir
    blob = Path(args.result).with_suffix(".bin")
    if args.variant == "artifacts":
        torch.compiler.load_cache_artifacts(blob.read_bytes())
    torch.manual_seed(0)
    compiled = torch.compile(Model(args.task), dynamic=False)
    x = torch.randint(0, VOCAB, (args.batch_size, 21))
    t0 = time.perf_counter()
    compiled(x, torch.full((args.batch_size,), 21)).backward()
    out = {
        "seconds": time.perf_counter() - t0,
        "gpp": builds[0],
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "so": len(list(Path(args.cache_dir).rglob("*.so"))),
    }
    if args.variant == "cold":
        data, info = torch.compiler.save_cache_artifacts()
        blob.write_bytes(data)
        out["artifacts"] = {k: len(v) for k, v in info.artifacts.items()}
        out["bytes"] = len(data)
    Path(args.result).write_text(json.dumps(out))


def portable_check(args: argparse.Namespace) -> str:
    """Why portable artifacts alone warm little on a CPU: four processes, one shape each."""
    root = Path(tempfile.mkdtemp(prefix="bl-portable-"))
    result = root / "r.json"

    def one(variant: str, cache: Path) -> dict:
        cmd = [sys.executable, __file__, "--role", "portable", "--variant", variant,
               "--cache-dir", str(cache), "--result", str(result), "--task", "text",
               "--batch-size", str(args.batch_size), "--threads", str(args.threads)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stdout[-3000:] + out.stderr[-3000:])
        return {**json.loads(result.read_text()), "load": os.getloadavg()[0]}

    rows = [("cold, empty directory", one("cold", root / "a"))]
    rows.append(("`load_cache_artifacts` into an empty directory", one("artifacts", root / "b")))
    (root / "c").mkdir()
    for so in (root / "a").rglob("*.so"):  # the compiled kernels the artifacts leave out
        dst = root / "c" / so.relative_to(root / "a")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, dst)
    rows.append(("the same + the cold run's `*.so` files", one("artifacts", root / "c")))
    rows.append(("the cold run's whole directory", one("dir", root / "a")))
    shutil.rmtree(root, ignore_errors=True)
    cold = rows[0][1]
    lines = [
        f"### Portable artifacts against the cache directory (one shape, ({args.batch_size}, "
        "21), forward + backward, inductor; each row a new process)\n",
        f"`save_cache_artifacts()` after the cold compile: {cold['bytes']:,} bytes, "
        f"{cold['artifacts']}; the directory then held {cold['so']} compiled `*.so` files. The "
        "precompiled C++ header (in `$TMPDIR`, outside every cache directory) was already built.\n",
        "| process | first call s | FX-graph cache hits / misses | g++ builds | load |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['seconds']:.2f} | {r['fx_hit']} / {r['fx_miss']} | {r['gpp']} | "
            f"{r['load']:.1f} |"
        )
    return "\n".join(lines) + "\n"


# -- the driver ---------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(
    args,
    role: str,
    *,
    variant: str = "",
    k: int = 0,
    cache_dir: Path,
    ranks: int = 1,
    steps: int | None = None,
) -> dict:
    """Run a worker (or ``ranks`` of them) in fresh processes; return its JSON result."""
    result = Path(tempfile.mkdtemp(prefix="bl-e2e-")) / "result.json"
    cmd = [
        sys.executable, __file__, "--role", role, "--variant", variant, "--k", str(k),
        "--cache-dir", str(cache_dir), "--result", str(result), "--task", args.task,
        "--steps", str(steps or args.steps), "--batch-size", str(args.batch_size), "--samples",
        str(args.samples), "--strategy", args.strategies[0], "--threads", str(args.threads),
        "--seed", str(args.seed), "--backend", args.backend,
        "--compile-threads", str(args.compile_threads),
    ]  # fmt: skip
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "TORCHINDUCTOR_COMPILE_THREADS": str(args.compile_threads),
    }
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            cmd,
            env={**env, "RANK": str(r), "WORLD_SIZE": str(ranks), "PORT": port},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(ranks)
    ]
    t0 = time.perf_counter()
    logs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        if p.returncode != 0:
            raise RuntimeError(f"{role} {variant} k={k} rank {r} failed:\n{log[-4000:]}")
    out = json.loads(result.read_text())
    shutil.rmtree(result.parent, ignore_errors=True)
    out["process_wall_s"] = wall
    return out


def summarise(r: dict) -> dict:
    """Compile time, steady step and the measured cumulative totals of one variant's run."""
    steps = np.asarray(r["step_s"])
    compiled = np.asarray(r["compiled_step"], dtype=bool)
    steady = steps[~compiled] if (~compiled).any() else steps
    med = float(np.median(steady))
    cum = r["precompile_s"] + np.cumsum(steps)
    seq = [float(cum[n - 1]) if n <= steps.size else float("nan") for n in NS]
    return {
        **r,
        "compile_s": r["precompile_s"] + float((steps[compiled] - med).sum()),
        "run_step_ms": 1e3 * med,
        "seq_totals": seq,
        "padding": (r["padded"] - r["real"]) / r["real"],
        "real_per_step_mean": float(np.mean(r["real_per_step"])),
    }


def steady_steps(r: dict) -> np.ndarray:
    steps = np.asarray(r["step_s"])
    compiled = np.asarray(r["compiled_step"], dtype=bool)
    return steps[~compiled][5:]  # the first steps after a (warm) compile run cold caches


def finish(r: dict, ref: dict) -> dict:
    """Totals at NS from the compile phase and the interleaved (referee) median step."""
    step = ref["median_s"]
    return {
        **r,
        "step_ms": 1e3 * step,
        "step_range_ms": (1e3 * min(ref["rounds"]), 1e3 * max(ref["rounds"])),
        "tok_s": r["real_per_step_mean"] / step,
        "totals": [r["compile_s"] + n * step for n in NS],
        "med_s": step,
    }


def break_even(v: dict, base: dict) -> str:
    """The first step from which ``v``'s total is at most ``base``'s: compile + n x step."""
    gap = v["compile_s"] - base["compile_s"]
    gain = base["med_s"] - v["med_s"]
    if gap <= 0 and gain >= 0:
        return "1"
    if gain <= 0:
        return "never (slower steps)"
    return f"{int(np.ceil(gap / gain)):,}"


def table(results: list[dict]) -> str:
    base = next((r for r in results if r["variant"] == "3"), None)
    head = (
        "| variant | shapes | graphs (precompile + training) | compile s | step ms "
        "(round medians) | steady real tok/s | padding | "
        + " | ".join(f"total s at {n:,}" for n in NS)
        + " | break-even vs 3 |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(NS) + "---:|"]
    for r in results:
        lo, hi = r["step_range_ms"]
        be = "-" if base is None or r is base else break_even(r, base)
        runs = r.get("compile_runs") or [r["compile_s"]]
        comp = f"{r['compile_s']:.1f}" + (
            f" ({', '.join(f'{c:.0f}' for c in runs)})" if len(runs) > 1 else ""
        )
        lines.append(
            f"| {r['name']} | {r['shapes']} | {r['graphs_precompile']} + {r['graphs_training']} | "
            f"{comp} | {r['step_ms']:.1f} ({lo:.1f}-{hi:.1f}) | {r['tok_s']:,.0f} | "
            f"{r['padding']:.1%} | " + " | ".join(f"{t:,.0f}" for t in r["totals"]) + f" | {be} |"
        )
    return "\n".join(lines) + "\n"


def sequence_table(results: list[dict]) -> str:
    """What each variant's own run measured, in the order run (load drifts between rows)."""
    ns = [n for n in NS if n <= results[0]["steps"]]
    lines = [
        "| variant | load at start | eager shapes | step ms in its run |"
        + "".join(f" measured total s at {n:,} |" for n in ns),
        "|---|---:|---:|---:|" + "---:|" * len(ns),
    ]
    for r in results:
        for run in r.get("runs") or [r]:
            lines.append(
                f"| {r['name']} | {run['load'][0]:.1f} | {run['eager_shapes']} | "
                f"{run['run_step_ms']:.1f} |"
                + "".join(f" {t:,.0f} |" for t in run["seq_totals"][: len(ns)])
            )
    return "\n".join(lines) + "\n"


def recommender_check(results: list[dict], cal: dict | None, lengths: np.ndarray, args) -> str:
    """recommend_num_buckets with calibrate()'s costs against the measured totals at 1,000 steps,
    cold (nothing compiled) and warm (every candidate's shapes already in the cache)."""
    from bucketloader.analysis import recommend_num_buckets
    from bucketloader.analysis.recommend import epoch_cost

    if cal is None:
        return ""
    n = NS[1]
    costs = {
        k: cal[k]
        for k in (
            "compile_seconds_per_shape",
            "seconds_per_token",
            "seconds_per_step",
            "warm_compile_seconds_per_shape",
        )
    }
    options = {"batch_size": args.batch_size, "num_steps": n, "strategy": args.strategies[0]}
    ks = sorted({1, *args.ks})
    cold = recommend_num_buckets(lengths, num_buckets=ks, costs=costs, **options)
    shapes = set()  # a sweep that ran every candidate before: all their shapes are warm
    for c in cold.table:
        b = np.asarray(c.boundaries)
        shapes |= set(epoch_cost(lengths, b, batch_size=args.batch_size).shapes)
    warm = recommend_num_buckets(
        lengths, num_buckets=ks, costs=costs, compiled_shapes=shapes, **options
    )
    out = [
        "### Recommender check\n",
        f"calibrate() on this model ({cal['seconds']:.0f} s): "
        f"{cal['compile_seconds_per_shape']:.1f} s per shape cold, "
        f"{cal['warm_compile_seconds_per_shape']:.2f} s warm, "
        f"{cal['seconds_per_token'] * 1e6:.2f} us per padded token, "
        f"{cal['seconds_per_step'] * 1e3:.1f} ms per step. recommend_num_buckets over k in "
        f"{ks} for {n:,} steps (k=1 is padding to the max), against the measured totals "
        "(criterion: its pick within 10 % of the best measured):\n",
        "| cache | k | shapes (warm) | predicted s | measured s (compile + steps) | variant |",
        "|---|---:|---:|---:|---:|---|",
    ]
    verdicts = []
    for label, suffix, rec in (("cold", "", cold), ("warm", "w", warm)):
        measured = {1: next((r for r in results if r["variant"] == "3" + suffix), None)}
        for k in args.ks:
            measured[k] = next(
                (r for r in results if r["variant"] == "4" + suffix and r["k"] == k), None
            )
        if any(v is None for v in measured.values()):
            continue
        best = min(r["totals"][1] for r in measured.values())
        got = measured[rec.num_buckets]["totals"][1]
        verdict = "PASS" if got <= 1.10 * best else "FAIL"
        verdicts.append(f"{label}: picks k={rec.num_buckets}, {verdict} ({got / best - 1:+.1%})")
        for c in rec.table:
            m = measured[c.num_buckets]
            mark = " *" if c.num_buckets == rec.num_buckets else ""
            out.append(
                f"| {label} | {c.num_buckets}{mark} | {c.num_shapes} ({c.warm_shapes}) | "
                f"{c.total_seconds:,.1f} | {m['totals'][1]:,.1f} | {m['name']} |"
            )
    return "\n".join(out) + "\n\n" + "; ".join(verdicts) + ".\n"


def driver(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="bl-compile-e2e-"))
    print(f"working in {root}", flush=True)
    lengths, _ = setup(args)
    results: list[dict] = []

    def run(variant: str, k: int = 0, cache: str = "", ranks: int = 1) -> dict:
        cache_dir = root / (cache or f"{variant}-{k}")
        t0 = time.perf_counter()
        r = spawn(args, "worker", variant=variant, k=k, cache_dir=cache_dir, ranks=ranks)
        r = summarise(r)
        r["k"] = k
        r["name"] = NAMES[variant].format(s=args.strategies[0], k=k)
        print(f"{r['name']}: compile {r['compile_s']:.1f} s, step {r['run_step_ms']:.1f} ms in "
              f"its run, load {r['load']} ({time.perf_counter() - t0:.0f} s)",
              flush=True)  # fmt: skip
        return r

    def merge(runs: list[dict]) -> dict:
        out = dict(runs[0])
        out["compile_runs"] = [r["compile_s"] for r in runs]
        out["compile_s"] = float(np.mean(out["compile_runs"]))
        out["runs"] = runs
        return out

    # the precompiled C++ header lives in $TMPDIR, outside every cache dir: build it once first
    spawn(args, "worker", variant="3", k=0, cache_dir=root / "pch-warmup", steps=2)
    shutil.rmtree(root / "pch-warmup", ignore_errors=True)
    cal = None
    if not args.skip_calibration:
        cal = spawn(args, "calibrate", cache_dir=root / "calibrate")
        print(f"calibration: {cal}", flush=True)
    sets: dict[str, tuple[str, int, str]] = {}  # shape set -> (warm variant, k, its cache)
    for v in ("1", "2", "3"):
        if v in args.variants:
            results.append(run(v))
            sets[v] = ("3w" if v == "3" else v, 0, f"{v}-0")
    if "3w" in args.variants and "3" in args.variants:
        results.append(run("3w", cache="3-0"))
    for k in args.ks:
        cold = "4" in args.variants
        sharded = "4s" in args.variants
        if cold and sharded:  # A B B A: the load's drift cancels out of the comparison
            a1 = run("4", k, cache=f"4-{k}")
            b1 = run("4s", k, cache=f"4s-{k}", ranks=2)
            b2 = run("4s", k, cache=f"4s-{k}-b", ranks=2)
            a2 = run("4", k, cache=f"4-{k}-b")
            results += [merge([a1, a2]), merge([b1, b2])]
        elif cold or sharded:
            results.append(run("4" if cold else "4s", k, cache=f"4-{k}", ranks=2 if sharded else 1))
        if cold or sharded:
            sets[f"k{k}"] = ("4w", k, f"4-{k}")
        if "4w" in args.variants and (cold or sharded):
            results.append(run("4w", k, cache=f"4-{k}"))
        if "5" in args.variants and torch.cuda.is_available():
            results.append(run("5", k))
            # CUDA graphs run the same kernels as variant 4 but launch them differently: its
            # step time is its own set (warm from its own cache), not variant 4's
            sets[f"g{k}"] = ("5", k, f"5-{k}")
    refs = referee(args, root, sets)
    for r in results:
        key = r["variant"][0]
        if r["variant"].startswith("4"):
            key = f"k{r['k']}"
        elif r["variant"] == "5":
            key = f"g{r['k']}"
        r.update(finish(r, refs[key]))
    shutil.rmtree(root, ignore_errors=True)
    write(results, cal, lengths, args, started, load_start, refs)


def referee(args, root: Path, sets: dict) -> dict:
    """Steady step time of every shape set, measured in rounds that interleave the sets (each a
    new process from its warm cache), so the machine's load drift hits every set alike."""
    times: dict[str, list[np.ndarray]] = {name: [] for name in sets}
    for rnd in range(args.rounds):
        for name, (variant, k, cache) in sets.items():
            r = spawn(args, "worker", variant=variant, k=k, cache_dir=root / cache,
                      steps=args.round_steps)  # fmt: skip
            times[name].append(steady_steps(r))
        print(f"referee round {rnd + 1}/{args.rounds}: "
              + ", ".join(f"{n} {1e3 * np.median(t[-1]):.1f} ms" for n, t in times.items()),
              flush=True)  # fmt: skip
    return {
        name: {
            "median_s": float(np.median(np.concatenate(t))),
            "rounds": [float(np.median(x)) for x in t],
        }
        for name, t in times.items()
    }


def per_shape_tables(results: list[dict]) -> str:
    """precompile's own per-shape table for the largest k: cold, warm, and each sharded rank."""
    bucketed = [r for r in results if r["variant"] in ("4", "4w", "4s") and r["report"]]
    if not bucketed:
        return ""
    k = max(r["k"] for r in bucketed)
    out = [f"### Per-shape precompile times, k={k} (`print(report)`)\n"]
    for r in bucketed:
        if r["k"] != k:
            continue
        reports = r["ranks"] or [r["report"]]
        for i, rep in enumerate(reports):
            who = f", rank {i}" if r["ranks"] else ""
            out.append(f"{r['name']}{who}: {rep['wall_s']:.1f} s\n\n{rep['table']}\n")
    return "\n".join(out) + "\n"


def _kinds(r: dict) -> str:
    return ", ".join(f"{n} {k}" for k, n in r["report"]["kinds"].items() if n)


def write(results, cal, lengths, args, started, load_start, refs) -> None:
    sharded = []
    for r in results:
        if r["variant"] != "4s":
            continue
        cold = next((c for c in results if c["variant"] == "4" and c["k"] == r["k"]), None)
        ranks = r["ranks"] or []
        per = ", ".join(
            f"rank {i}: compile {x['compile_s']:.1f} s + wait {x['wait_s']:.1f} s + load "
            f"{x['load_s']:.1f} s" for i, x in enumerate(ranks)
        )  # fmt: skip
        runs = r.get("runs") or [r]
        walls = ", ".join(f"{x['precompile_s']:.1f}" for x in runs)
        line = f"- k={r['k']}: 2 ranks {r['compile_s']:.1f} s (mean of {walls}; first run: {per})"
        if cold is not None:
            cwalls = ", ".join(f"{x['precompile_s']:.1f}" for x in cold.get("runs") or [cold])
            line += (
                f" against one process compiling all {len(cold['report']['shapes'])} shapes "
                f"{cold['compile_s']:.1f} s (mean of {cwalls}): "
                f"**{cold['compile_s'] / r['compile_s']:.2f}x** as fast"
            )
        sharded.append(line)
    warm_lines = []
    for r in results:
        if r["variant"] == "4w":
            cold = next((c for c in results if c["variant"] == "4" and c["k"] == r["k"]), None)
            if cold is not None:
                ratio = cold["compile_s"] / r["precompile_s"]
                warm_lines.append(
                    f"- k={r['k']}: warm precompile {r['precompile_s']:.1f} s "
                    f"({_kinds(r)}) against cold {cold['compile_s']:.1f} s ({_kinds(cold)}): "
                    f"**{ratio:.0f}x** less"
                )
    loads = [x for r in results for run in r.get("runs") or [r] for x in run["load"]]
    info = (
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared), device "
        f"{'cuda' if torch.cuda.is_available() else 'cpu'}, torch {torch.__version__}, numpy "
        f"{np.__version__}, python {sys.version.split()[0]}, torch threads {args.threads}, "
        f"inductor compile threads {args.compile_threads}. Load average (1 min) "
        f"{load_start[0]:.1f} at the start, "
        f"{min(loads):.1f}-{max(loads):.1f} at the variants' starts and ends, "
        f"{os.getloadavg()[0]:.1f} at the end. Task {args.task}: {args.samples} samples (lengths "
        f"{lengths.min()}..{lengths.max()}), batch {args.batch_size}, {args.steps} steps per "
        f"variant, d_model {D_MODEL}, 2 layers; backend {args.backend}. Whole run "
        f"{time.perf_counter() - started:.0f} s.\n\n"
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n"
    )
    text = (
        f"## {args.task}, backend {args.backend}, {args.steps} steps, k in {args.ks}, "
        f"{args.strategies[0]}\n\n{info}\n{table(results)}\n"
        "Total s at N = compile s + N x step ms. Compile s: `precompile`'s wall time (variants "
        "4*; the mean of two runs, in parentheses, where run twice in the order cold, sharded, "
        "sharded, cold), or the excess over the steady step of the steps that compiled "
        "(variants 1-3: compiled lazily). Step ms: the median steady step of the variant's "
        f"shape set over {args.rounds} rounds that interleave the shape sets ({args.round_steps} "
        "steps each, every set in a new process from its warm cache); in parentheses the lowest "
        "and highest round median. Variants with the same shapes (cold, warm, sharded) share "
        "their step time: the same kernels run. Break-even: the first step from which the total "
        "is at most variant 3's. Graphs: dynamo graphs compiled in `precompile` + during "
        f"the {args.steps:,} training steps.\n\n"
        "### Each variant's own run, in the order run\n\n"
        "Measured step by step in each variant's process; the load moved the step time by up to "
        "2x between these runs, hence the interleaved rounds above.\n\n"
        + sequence_table(results)
        + "\n"
        + ("### Two ranks sharing the compile (gloo, one node, shared cache directory)\n\n"
           + "\n".join(sharded) + "\n\n" if sharded else "")
        + ("### Warm starts (a new process, the cold run's cache directory)\n\n"
           + "\n".join(warm_lines) + "\n\n" if warm_lines else "")
        + per_shape_tables(results)
        + recommender_check(results, cal, lengths, args)
    )  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    before = out.read_text() if args.append and out.exists() else "# compile_e2e results\n"
    out.write_text(before.rstrip("\n") + "\n\n" + text)
    print(text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=("text", "audio"), default="text")
    p.add_argument("--steps", type=int, default=1_000, help="training steps of every variant")
    p.add_argument("--samples", type=int, default=3_200, help="samples per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--ks", type=int, nargs="+", default=[4, 8])
    p.add_argument("--strategies", nargs="+", default=["optimal"])
    p.add_argument("--variants", nargs="+", default=["1", "3", "3w", "4", "4w", "4s", "5"])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument(
        "--compile-threads", type=int, default=1, help="inductor compile workers (more on a GPU)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="inductor", help="'aot_eager' to smoke-test the script")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_e2e.md"))
    p.add_argument("--append", action="store_true", help="add a section to --out, not replace it")
    p.add_argument("--skip-calibration", action="store_true", help="no recommender check")
    p.add_argument("--rounds", type=int, default=5, help="interleaved step-time rounds")
    p.add_argument("--round-steps", type=int, default=200, help="steps per set and round")
    p.add_argument("--portable", action="store_true",
                   help="only the portable-artifacts check: four processes, one shape")  # fmt: skip
    p.add_argument(
        "--role", default="driver", choices=("driver", "worker", "calibrate", "portable")
    )
    p.add_argument("--variant", default="", help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--strategy", default="optimal", help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "worker":
        worker(args)
    elif args.role == "calibrate":
        calibrate_worker(args)
    elif args.role == "portable":
        portable_worker(args)
    elif args.portable:
        text = portable_check(args)
        out = Path(args.out)
        before = out.read_text() if args.append and out.exists() else "# compile_e2e results\n"
        command = f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n"
        out.write_text(before.rstrip("\n") + "\n\n" + text + "\n" + command)
        print(text)
    else:
        driver(args)


if __name__ == "__main__":
    main()
