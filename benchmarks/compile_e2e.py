"""End-to-end torch.compile training: dynamic padding versus bucketloader's static shapes.

Trains a small real model (token transformer on Multi30k lengths, or conv front-end + transformer
on LibriSpeech frame lengths) with ``torch.compile`` on the same samples, for

1. dynamic padding to the batch max, ``torch.compile`` default (automatic dynamic shapes);
2. dynamic padding, ``dynamic=False`` (recompiles until the recompile limit, then eager);
3. padding to the global max (one shape);
4. bucketloader ``BucketSampler`` + ``PadCollator``, k buckets, each strategy, ``dynamic=False``;
5. on a GPU only: variant 4 with CUDA graphs (``mode="reduce-overhead"``).

and reports per variant: compilations (dynamo ``unique_graphs``, frames, recompiles, shapes run
eagerly after the recompile limit), compile time, steady-state step time (median, p10-p90),
real-token throughput, padding and total wall time, then checks ``recommend_num_buckets`` (fed by
``calibrate`` on the same model) against the measured totals. Compile caches are disabled so
every compile is cold. Run:

    .venv/bin/python benchmarks/compile_e2e.py            # writes benchmarks/results/compile_e2e.md
    .venv/bin/python benchmarks/compile_e2e.py --task audio --steps 100 --ks 4 8
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

from bucketloader.analysis import calibrate, recommend_num_buckets
from bucketloader.collate import Field
from bucketloader.sampler import BucketSampler

DATA = Path(__file__).parents[1] / "tests" / "data"  # the real length files (tests/data/SOURCES.md)
VOCAB, FEATS, D_MODEL = 1000, 40, 64
BACKEND = ["inductor"]


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


def run_variant(name, model_fn, batches, *, device, compile_kwargs, num_shapes=0) -> dict:
    """Train on ``batches`` from a fresh copy of the model; time every step.

    ``num_shapes``: the planned shape count; the recompile limit (default 8) is raised to it, as
    a bucketloader user with k > 8 must do (``torch._dynamo.config.recompile_limit``).
    """
    limit = max(torch._dynamo.config.recompile_limit, num_shapes)
    with torch._dynamo.config.patch(recompile_limit=limit):
        return _run_variant(name, model_fn, batches, device=device, compile_kwargs=compile_kwargs)


def _run_variant(name, model_fn, batches, *, device, compile_kwargs) -> dict:
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = model_fn().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kwargs = {"fullgraph": True, "backend": BACKEND[0], **compile_kwargs}
    compiled = torch.compile(model, **kwargs)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seen, eager_shapes, rows = set(), set(), []
    start_all = time.perf_counter()
    it = iter(batches)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        if batch is None:
            break
        x, lengths = batch["inputs"].to(device), batch["lengths"].to(device)
        graphs = counters["stats"]["unique_graphs"]
        t1 = time.perf_counter()
        loss = compiled(x, lengths)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t2 = time.perf_counter()
        shape = tuple(x.shape[:2])
        compiled_now = counters["stats"]["unique_graphs"] > graphs
        if (
            shape not in seen
            and not compiled_now
            and seen
            and compile_kwargs.get("dynamic") is False
        ):
            eager_shapes.add(shape)  # static graphs only: a new shape without a new graph ran eager
        seen.add(shape)
        rows.append((shape, t2 - t1, t2 - t0, compiled_now, int(lengths.sum())))
    wall = time.perf_counter() - start_all
    steady = [r[1] for r in rows if not r[3]]
    med = statistics.median(steady) if steady else float("nan")
    compile_steps = [r for r in rows if r[3]]
    steady_tokens = sum(r[4] for r in rows if not r[3])
    padded = sum(r[0][0] * r[0][1] for r in rows)
    real = sum(r[4] for r in rows)
    q = np.percentile(steady, [10, 90]) if steady else [float("nan")] * 2
    return {
        "variant": name,
        "steps": len(rows),
        "shapes": len(seen),
        "graphs": counters["stats"]["unique_graphs"],
        "frames": counters["frames"]["total"],
        "recompiles": max(counters["stats"]["unique_graphs"] - 1, 0),  # one frame (fullgraph)
        "eager_shapes": len(eager_shapes),
        "compile_s": sum(r[1] for r in compile_steps) - len(compile_steps) * med,
        "step_ms": 1e3 * med,
        "step_p10_p90": (1e3 * q[0], 1e3 * q[1]),
        "steady_tok_s": steady_tokens / sum(steady) if steady else float("nan"),
        "e2e_tok_s": real / wall,
        "padding": (padded - real) / real,
        "wall_s": wall,
    }


def calibrate_model(model_fn, args, lengths, device):
    """calibrate() on a fresh model: median and longest length at the batch size."""
    model = model_fn().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    feats = () if args.task == "text" else (FEATS,)
    make = lambda r, t: (  # noqa: E731
        torch.randint(0, VOCAB, (r, t), device=device) if args.task == "text"
        else torch.randn(r, t, *feats, device=device), torch.full((r,), t, device=device)
    )  # fmt: skip
    bs = args.batch_size
    return calibrate(
        model,
        example_shapes=[(bs, int(np.median(lengths))), (bs, int(lengths.max()))],
        make_inputs=make,
        repeats=10,
        after_call=lambda loss: (loss.backward(), opt.step(), opt.zero_grad()),
        compile_kwargs={"fullgraph": True, "backend": args.backend},
    )


def measured_totals(results: list[dict], strategies: list[str]) -> dict:
    """(strategy, k) -> measured total seconds; pad-to-max (variant 3) is k=1 of every strategy."""
    out = {}
    for r in results:
        if r["variant"].startswith("3."):
            out.update({(s, 1): r for s in strategies})
        if r["variant"].startswith("4."):
            out[(r["variant"].split()[2], int(r["variant"].split("k=")[1]))] = r
    return out


def projections(results: list[dict]) -> str:
    """Compile time + N x steady step time: where the measured costs lead over longer runs."""
    ns = (1_000, 10_000, 100_000)
    lines = [
        "### Projected totals (not measured: measured compile s + N x median step)\n",
        "| variant | " + " | ".join(f"N={n:,} steps" for n in ns) + " |",
        "|---|" + "---:|" * len(ns),
    ]
    for r in results:
        proj = [(r["compile_s"] + n * r["step_ms"] / 1e3) / 60 for n in ns]
        lines.append(f"| {r['variant']} | " + " | ".join(f"{m:,.1f} min" for m in proj) + " |")
    return "\n".join(lines) + "\n\n"


def recommender_check(results, cal, cal_s, lengths, args) -> str:
    """recommend_num_buckets fed by calibrate(), against the measured totals (10 % criterion)."""
    measured = measured_totals(results, args.strategies)
    if cal is None or not measured:
        return ""
    rec = recommend_num_buckets(
        lengths, batch_size=args.batch_size, num_epochs=1, strategy=args.strategies,
        num_buckets=sorted({1, *args.ks}), costs=cal,
    )  # fmt: skip
    rec = _restrict(rec, measured)
    best = min(r["wall_s"] for r in measured.values())
    got = measured[(rec.strategy, rec.num_buckets)]["wall_s"]
    verdict = "PASS" if got <= 1.10 * best else "FAIL"
    rows = "\n".join(
        f"| {c.strategy} | {c.num_buckets} | {c.num_shapes} | {c.total_seconds:.1f} | "
        f"{measured[(c.strategy, c.num_buckets)]['wall_s']:.1f} |"
        for c in rec.table
    )
    return (
        f"### Recommender check\n\ncalibrate() on this model ({cal_s:.0f} s): "
        f"{cal.compile_seconds_per_shape:.1f} s compile per shape, "
        f"{cal.seconds_per_token * 1e6:.2f} us per padded token, "
        f"{cal.seconds_per_step * 1e3:.1f} ms per step. Over the measured candidates "
        f"recommend_num_buckets picks **{rec.strategy} k={rec.num_buckets}** (predicted "
        f"{rec.predicted_seconds:.1f} s); its measured total is {got:.1f} s against the best "
        f"measured {best:.1f} s (k=1 is variant 3): **{verdict}** (criterion: within 10 %; "
        f"{got / best - 1:+.1%}).\n\n"
        "| strategy | k | shapes | predicted s | measured s |\n|---|---:|---:|---:|---:|\n"
        f"{rows}\n"
    )


def _restrict(rec, measured):
    """The recommendation among the candidates that were actually measured."""
    table = tuple(c for c in rec.table if (c.strategy, c.num_buckets) in measured)
    best = min(table, key=lambda c: (c.total_seconds, c.num_buckets))
    return dataclasses.replace(
        rec,
        num_buckets=best.num_buckets,
        strategy=best.strategy,
        boundaries=best.boundaries,
        predicted_seconds=best.total_seconds,
        table=table,
    )


def markdown(results: list[dict], args, header: str, tail: str) -> str:
    base = next((r for r in results if r["variant"].startswith("1.")), results[0])
    lines = [
        header,
        "| variant | steps | shapes | graphs | recompiles | eager shapes | compile s | "
        "step ms (p10-p90) | steady real tok/s | padding | total s | total vs first row |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lo, hi = r["step_p10_p90"]
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['shapes']} | {r['graphs']} | "
            f"{r['recompiles']} | {r['eager_shapes']} | {r['compile_s']:.1f} | "
            f"{r['step_ms']:.1f} ({lo:.1f}-{hi:.1f}) | {r['steady_tok_s']:,.0f} | "
            f"{r['padding']:.1%} | {r['wall_s']:.1f} | {r['wall_s'] / base['wall_s']:.2f}x |"
        )
    return "\n".join(lines) + "\n\n" + tail


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=("text", "audio"), default="text")
    p.add_argument("--steps", type=int, default=150, help="steps of the dynamic variants")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--ks", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--strategies", nargs="+", default=["optimal", "percentile"])
    p.add_argument("--variants", nargs="+", default=["1", "2", "3", "4", "5"])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="inductor", help="'eager' only to smoke-test the script")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_e2e.md"))
    p.add_argument("--append", action="store_true", help="add a section to --out, not replace it")
    p.add_argument("--skip-calibration", action="store_true", help="no recommender check")
    args = p.parse_args(argv)
    BACKEND[0] = args.backend
    torch.set_num_threads(args.threads)
    torch._inductor.config.force_disable_caches = True  # every compile is cold, as on a new job
    torch._inductor.config.compile_threads = 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    all_lengths = load_lengths(args.task)
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 1]))
    n = args.steps * args.batch_size
    lengths = all_lengths[rng.permutation(all_lengths.size)[:n]]
    data, bs = Samples(lengths, args.task, args.seed), args.batch_size
    dyn = [[data[i] for i in range(s, s + bs)] for s in range(0, n, bs)]
    model_fn = lambda: Model(args.task)  # noqa: E731
    results, started = [], time.perf_counter()

    def log(r: dict) -> None:
        results.append(r)
        Path("/tmp/compile_e2e.partial.md").write_text(markdown(results, args, "", ""))
        print(f"{r['variant']}: total {r['wall_s']:.1f} s, compile {r['compile_s']:.1f} s, "
              f"graphs {r['graphs']}, step {r['step_ms']:.1f} ms", flush=True)  # fmt: skip

    cal, cal_s = None, 0.0
    if not args.skip_calibration:  # the recommender's inputs, measured on this model first
        t0 = time.perf_counter()
        cal = calibrate_model(model_fn, args, lengths, device)
        cal_s = time.perf_counter() - t0
        print(f"calibration: {cal} ({cal_s:.0f} s)", flush=True)

    common = {"device": device, "compile_kwargs": {"dynamic": False}}
    if "1" in args.variants:
        batches = [pad_collate(b, None) for b in dyn]
        log(run_variant("1. dynamic pad, compile default", model_fn, batches, device=device,
                        compile_kwargs={}))  # fmt: skip
    if "2" in args.variants:
        batches = [pad_collate(b, None) for b in dyn]
        no_fullgraph = {"dynamic": False, "fullgraph": False}  # past the limit: eager, not an error
        log(run_variant("2. dynamic pad, dynamic=False", model_fn, batches, device=device,
                        compile_kwargs=no_fullgraph))  # fmt: skip
    if "3" in args.variants:
        batches = [pad_collate(b, int(lengths.max())) for b in dyn]
        log(run_variant("3. pad to global max", model_fn, batches, **common))
    loaders = {}
    for strategy in args.strategies:
        for k in args.ks:
            sampler = BucketSampler(lengths, num_buckets=k, strategy=strategy, batch_size=bs,
                                    seed=args.seed)  # fmt: skip
            fields = None if args.task == "text" else Field(dims=0)
            loader = torch.utils.data.DataLoader(
                data, batch_sampler=sampler, collate_fn=sampler.collator(fields=fields)
            )
            # collated up front, as for variants 1-3
            loaders[(strategy, k)] = (list(loader), len(sampler.shapes))
    if "4" in args.variants:
        for (strategy, k), (loader, shapes) in loaders.items():
            log(run_variant(f"4. bucketloader {strategy} k={k}", model_fn, loader, **common,
                            num_shapes=shapes))  # fmt: skip
    if "5" in args.variants and device.type == "cuda":
        strategy, k = args.strategies[0], args.ks[len(args.ks) // 2]
        loader, shapes = loaders[(strategy, k)]
        log(run_variant(f"5. bucketloader {strategy} k={k}, CUDA graphs", model_fn, loader,
                        device=device, num_shapes=shapes,
                        compile_kwargs={"dynamic": False, "mode": "reduce-overhead"}))  # fmt: skip

    info = (
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared), device {device}, "
        f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}, "
        f"torch threads {args.threads}. Task {args.task}: {n} samples (lengths "
        f"{lengths.min()}..{lengths.max()}), batch {bs}, d_model {D_MODEL}, 2 layers; backend "
        f"{args.backend}, compile caches disabled (cold compiles). "
        f"Whole run {time.perf_counter() - started:.0f} s.\n\n"
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n\n"
    )
    tail = projections(results) + recommender_check(results, cal, cal_s, lengths, args)
    title = f"## {args.task}, backend {args.backend}, k in {args.ks}, {', '.join(args.strategies)}"
    text = markdown(results, args, f"{title}\n\n{info}", tail)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    before = out.read_text() if args.append and out.exists() else "# compile_e2e results\n"
    out.write_text(before.rstrip("\n") + "\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
