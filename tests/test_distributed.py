"""A real multi-process run: torch.distributed (gloo), BucketSampler defaults from the process
group, a DistributedDataParallel model trained for one epoch. Per step every rank's batch has the
same shape, every rank gets the same number of batches, and together they cover the data.

The worker is this file run as a script (``python test_distributed.py worker ...``), started with
``subprocess`` and a hard timeout so a hang can never block CI.
"""

from __future__ import annotations

import gc
import json
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, run_ranks

TIMEOUT_S = 300  # generous: a loaded 2-core machine starts 2-3 Python+torch processes slowly


def _run_world(
    tmp_path: Path, lengths: np.ndarray, world: int, policies: str, script: str = "worker"
) -> list[dict]:
    np.save(tmp_path / "lengths.npy", lengths)
    port = free_port()
    run_ranks(
        lambda r: [__file__, script, str(r), str(world), str(port), str(tmp_path), policies],
        world,
        timeout=TIMEOUT_S,
        preload={"stream_worker": ("datasets",), "agree_worker": ("bucketloader.stream",)}.get(
            script, ()
        ),  # (modules its ranks import: HF shards, the streams)
    )
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
def test_ddp_epoch_static_shapes_on_every_rank(tmp_path):
    from conftest import load_real

    lengths = np.asarray(load_real("ecoli")[:901])
    runs = _run_world(tmp_path, lengths, 2, "pad,keep")  # one process group, two epochs
    for last_batch in ("pad", "keep"):
        check_ranks_agree([r[last_batch] for r in runs], lengths)


def check_ranks_agree(results: list[dict], lengths: np.ndarray) -> None:
    counts = {len(r["shapes"]) for r in results}
    assert len(counts) == 1 and counts.pop() == results[0]["len"] > 0
    for step in range(results[0]["len"]):
        assert len({tuple(r["shapes"][step]) for r in results}) == 1, f"step {step} differs"
    promised = {tuple(s) for s in results[0]["promised"]}
    assert {tuple(s) for r in results for s in r["shapes"]} <= promised
    covered = {i for r in results for i in r["indices"]}
    assert covered == set(range(lengths.size)), "the ranks together cover the data"
    # DDP kept replicas in sync: identical parameters after the epoch.
    assert len({r["param_sum"] for r in results}) == 1
    assert all(r["gathered_equal"] for r in results)


def _worker(rank: int, world: int, port: int, out_dir: str, policies: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=240),
    )
    lengths = np.load(Path(out_dir) / "lengths.npy")
    results = {p: _train_epoch(rank, world, lengths, p) for p in policies.split(",")}
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(results))
    gc.collect()  # the epochs' DDP models, before the group goes (see _stream_worker's end)
    dist.barrier()
    dist.destroy_process_group()


def _train_epoch(rank: int, world: int, lengths: np.ndarray, last_batch: str) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    from bucketloader.sampler import BucketSampler

    sampler = BucketSampler(lengths, num_buckets=4, max_tokens=6000, last_batch=last_batch, seed=7)
    assert (sampler.num_replicas, sampler.rank) == (world, rank)
    table = sampler.shape_table

    def collate(idx):
        shape = table.target(lengths[idx])
        rows = shape[0] if last_batch == "pad" else len(idx)
        x = torch.zeros(rows, shape[1])
        mask = torch.zeros(rows, shape[1], dtype=torch.bool)
        for r, i in enumerate(idx):
            x[r, : lengths[i]] = torch.linspace(0, 1, int(lengths[i]))
            mask[r, : lengths[i]] = True
        return torch.tensor(idx), x, mask

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc, self.head = torch.nn.Linear(1, 8), torch.nn.Linear(8, 1)

        def forward(self, x, mask):
            h = torch.tanh(self.enc(x.unsqueeze(-1))) * mask.unsqueeze(-1)
            pooled = h.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
            return self.head(pooled).squeeze(-1)

    torch.manual_seed(0)
    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(list(range(lengths.size)), batch_sampler=sampler, collate_fn=collate)
    sampler.set_epoch(1)
    shapes, indices, gathered_equal = [], [], True
    for idx, x, mask in loader:
        shape = torch.tensor(x.shape)
        everyone = [torch.zeros_like(shape) for _ in range(world)]
        dist.all_gather(everyone, shape)
        gathered_equal &= all(torch.equal(s, shape) for s in everyone)
        loss = ((model(x, mask) - 0.5) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        shapes.append(list(x.shape))
        indices.extend(idx.tolist())
    return {
        "len": len(sampler),
        "shapes": shapes,
        "indices": indices,
        "promised": [list(s) for s in sampler.shapes],
        "param_sum": round(float(sum(p.sum() for p in model.parameters())), 6),
        "gathered_equal": bool(gathered_equal),
    }


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
@pytest.mark.parametrize("world", [2, 3])
def test_ddp_stream_equal_steps_same_shapes_and_exact_resume(tmp_path, world):
    """Per-rank HF shards (split_dataset_by_node), 2 DataLoader workers per rank, boundaries
    estimated on rank 0 and broadcast, the bucket schedule agreed once; then DDP trains on it:
    every rank makes steps_per_epoch steps with the same shape at every step, and a state taken
    mid-epoch resumes to exactly the remaining batches (while DDP keeps syncing: no hang)."""
    from conftest import load_real

    lengths = np.asarray(load_real("europarl")[: 1200 * world, 1])
    runs = _run_world(tmp_path, lengths, world, "stream", script="stream_worker")
    steps = runs[0]["steps"]
    assert all(r["shapes_seen"] == steps for r in runs)
    for t in range(steps):
        assert len({tuple(r["shapes"][t]) for r in runs}) == 1, f"step {t} differs"
    assert all(r["gathered_equal"] and r["resumed_equal"] for r in runs)
    assert len({json.dumps(r["boundaries"]) for r in runs}) == 1, "rank 0's estimate everywhere"
    assert len({r["param_sum"] for r in runs}) == 1
    promised = {tuple(s) for s in runs[0]["promised"]}
    assert {tuple(s) for r in runs for s in r["shapes"]} <= promised
    ids = [i for r in runs for i in r["ids"]]
    assert len(ids) > 0.9 * lengths.size and len(set(ids)) == len(ids), "disjoint shards, few left"
    assert all(r["report_batches"] == steps for r in runs), "the report seen from the main process"
    # the sampler's new iteration options under real DDP: weights and longest batch first
    for r in runs:
        assert r["sampler_len"] == runs[0]["sampler_len"]
        assert r["sampler_first"] == runs[0]["sampler_first"] and r["sampler_longest"]


def _stream_worker(rank: int, world: int, port: int, out_dir: str, _: str) -> None:
    import datasets
    import torch
    import torch.distributed as dist
    from datasets.distributed import split_dataset_by_node
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    from bucketloader import BucketSampler
    from bucketloader.stream import BucketIterable, estimate

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=240),
    )
    lengths = np.load(Path(out_dir) / "lengths.npy")
    table = datasets.Dataset.from_dict(
        {"id": list(range(lengths.size)), "input_ids": [[3] * int(n) for n in lengths]}
    )
    steps = 12

    def make():
        shard = split_dataset_by_node(
            table.to_iterable_dataset(num_shards=4 * world), rank=rank, world_size=world
        )
        return BucketIterable(
            shard,
            length_fn="input_ids",
            boundaries=estimate(4, sample_size=300),
            max_tokens=2048,
            steps_per_epoch=steps,
            shuffle_buffer=32,
            seed=11,
            min_length=1,
            overflow="drop",
        )

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.EmbeddingBag(8, 4, mode="mean"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(stream, limit=None):
        loader = DataLoader(stream, batch_size=None, num_workers=2, collate_fn=stream.collator())
        shapes, ids, equal = [], [], True
        for i, batch in enumerate(loader):
            x = batch["input_ids"]
            shape = torch.tensor(x.shape)
            everyone = [torch.zeros_like(shape) for _ in range(world)]
            dist.all_gather(everyone, shape)
            equal &= all(torch.equal(s, shape) for s in everyone)
            w = batch["attention_mask"].float() * batch["sample_mask"][:, None].float()
            loss = model(x, per_sample_weights=None).sum() * w.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            shapes.append(list(x.shape))
            ids.append(batch["id"][batch["sample_mask"]].tolist())
            if limit is not None and i + 1 == limit:
                break
        return shapes, ids, equal

    stream = make()
    shapes, ids, equal = train(stream)
    report = stream.report()
    first = make()
    head_shapes, head_ids, eq1 = train(first, limit=6)
    state = json.loads(json.dumps(first.state_dict(batches_consumed=6)))
    again = make()
    again.load_state_dict(state)
    rest_shapes, rest_ids, eq2 = train(again)
    sampler = BucketSampler(
        lengths,
        groups=np.arange(lengths.size) % 3,
        num_buckets=3,
        max_tokens=4096,
        weights=[1, 2, 3],
        longest_first=True,
        seed=5,
    )
    out = {
        "steps": steps,
        "shapes_seen": len(shapes),
        "shapes": shapes,
        "promised": [list(s) for s in stream.shapes],
        "ids": [i for b in ids for i in b],
        "gathered_equal": bool(equal and eq1 and eq2),
        "resumed_equal": head_ids + rest_ids == ids and head_shapes + rest_shapes == shapes,
        "boundaries": stream.boundaries.tolist(),
        "param_sum": round(float(sum(p.sum() for p in model.parameters())), 6),
        "report_batches": report.totals["batches"],
        "sampler_len": len(sampler),
        "sampler_first": sampler.plan().cells[:5].tolist(),
        "sampler_longest": int(sampler.spec.cell_lengths[sampler.plan().cells[0], 0])
        == int(sampler.spec.cell_lengths[sampler.plan().cells, 0].max()),  # the epoch's largest
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(out))
    # DDP's reducer released while the group is still registered: were it the group's last
    # holder, its dealloc would destroy the group holding the GIL, joining gloo's thread,
    # which may need the GIL to free a finished work's tensors (a rank hung so once;
    # pytorch/pytorch#56297)
    model = opt = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.timeout(2 * TIMEOUT_S)
def test_ranks_built_with_another_seed_or_other_lengths_are_named_on_every_rank(tmp_path):
    """NOTE [ Ranks agree on the plan ]: a rank given seed=rank (or lengths of its own) planned
    another epoch, silently: other shapes at a step, samples lost and repeated over the ranks;
    a stream given another seed or row_length, other shapes at a step. Now the constructor's
    one gather names the rank and the argument on every rank; ranks simulated in one process
    (num_replicas= and rank= given) join no collective."""
    runs = _run_world(tmp_path, np.arange(1, 201), 2, "", script="agree_worker")
    for r in runs:
        assert "rank 1 has seed=1 (rank 0: 0)" in r["seed"], r
        assert "rank 1 has num_samples=150 (rank 0: 200), plan_digest=" in r["lengths"], r
        assert "PackSampler" in r["pack"] and "rank 1 has seed=1 (rank 0: 0)" in r["pack"], r
        assert "BucketIterable" in r["stream"] and "rank 1 has seed=1" in r["stream"], r
        assert "rank 1 has max_documents=1024 (rank 0: 512), row_length=512" in r["pack_stream"]
        assert r["simulated"] == "ok" and r["same"] == runs[0]["same"], r
    # NOTE [ Checkpoints before a collective ]: rank 0 waited for rank 1 until the timeout
    refused = "ValueError: lengths must be non-negative, got -1 at index 5"
    for name, step in ("refused", "check of arguments"), ("refused_cache", "bucket cache's"):
        assert runs[1][name].startswith(refused), runs[1][name]
        assert runs[0][name].startswith(f"RuntimeError: rank(s) [1] raised before the {step}")
        assert f"rank 1 raised {refused}" in runs[0][name], runs[0][name]
    assert runs[1]["pack_refused"] == "ValueError: seed must be an int >= 0, got seed=-1"
    assert "rank 1 raised ValueError: seed must be" in runs[0]["pack_refused"]
    for r in runs:  # (silently 8 steps on rank 0, 12 on rank 1)
        assert "rank 1 has num_draws=150 (rank 0: 100); num_draws is" in r["draws"], r["draws"]
    refused = "ValueError: weights must be finite numbers >= 0, got -1.0 at index 0"
    assert runs[1]["weights"] == refused and f"rank 1 raised {refused}" in runs[0]["weights"]
    for r in runs:  # (a broadcast paired with a gather: the timeout)
        assert "rank(s) [1] at the check of arguments every rank makes; rank(s) [0] at the " \
            "bucket cache's shared lookup" in r["one_cache"], r["one_cache"]  # fmt: skip


def _agree_worker(rank: int, world: int, port: int, out_dir: str, _: str) -> None:
    import warnings

    import torch.distributed as dist

    from bucketloader import BucketSampler, PackSampler
    from bucketloader.cache import BucketCache
    from bucketloader.stream import BucketIterable, PackIterable
    from bucketloader.weighted import WeightedBucketSampler

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=timedelta(seconds=120),
    )  # fmt: skip
    lengths = np.load(Path(out_dir) / "lengths.npy")
    stream = [[1] * int(n) for n in lengths[rank::2]]  # each rank its own shard
    out = {}
    cases = {
        "seed": lambda: BucketSampler(lengths, num_buckets=4, batch_size=8, seed=rank),
        "lengths": lambda: BucketSampler(lengths[: 200 - 50 * rank], num_buckets=4, batch_size=8),
        "pack": lambda: PackSampler(lengths, row_length=256, batch_size=2, seed=rank),
        "stream": lambda: BucketIterable(
            stream, boundaries=[50, 100, 200], max_tokens=800, steps_per_epoch=4, seed=rank
        ),
        "pack_stream": lambda: PackIterable(
            stream, row_length=256 * (rank + 1), batch_size=2, steps_per_epoch=4
        ),
        # rank 1 refused before the check of arguments (its lengths, its seed), with a cache
        # whose shared lookup is rank 0's first collective, or a cache on rank 0 only
        "refused": lambda: BucketSampler(bad, num_buckets=4, batch_size=8),
        "refused_cache": lambda: BucketSampler(bad, num_buckets=4, batch_size=8, cache=cache),
        "pack_refused": lambda: PackSampler(lengths, row_length=256, batch_size=2, seed=-rank),
        "one_cache": lambda: BucketSampler(
            lengths, num_buckets=4, batch_size=8, cache=cache if rank == 0 else None
        ),
        # a weighted sampler's own arguments: rank 1's num_samples, then its weights refused
        "draws": lambda: WeightedBucketSampler(
            lengths, np.ones(200), num_samples=100 + 50 * rank, batch_size=8
        ),
        "weights": lambda: WeightedBucketSampler(lengths, np.ones(200) - 2 * rank, batch_size=8),
    }
    bad = lengths if rank == 0 else np.where(np.arange(lengths.size) == 5, -1, lengths)
    cache = BucketCache(Path(out_dir) / f"cache{rank}")
    for name, build in cases.items():
        try:
            build()
            out[name] = "built"
        except (ValueError, RuntimeError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        dist.monitored_barrier(timeout=timedelta(seconds=60))  # no rank went on alone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        simulated = [
            BucketSampler(lengths, num_replicas=2, rank=r, seed=r, batch_size=8) for r in (0, 1)
        ]
    out["simulated"] = "ok" if len(simulated) == 2 else "?"
    same = BucketSampler(lengths, num_buckets=4, batch_size=8, seed=3)
    out["same"] = [len(b) for b in same]
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "stream_worker":
    _stream_worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "agree_worker":
    _agree_worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])


def test_tell_failure_sends_the_text_of_an_error_whose_message_raises(monkeypatch):
    """A failed rank sends FAILED, then its error's text: an error whose ``str()`` raised between
    the two left the other ranks in the gather of texts until the group's timeout (s20 review)."""
    from bucketloader import _dist

    sent: list = []
    monkeypatch.setattr(_dist, "default_ranks", lambda: (2, 1))
    monkeypatch.setattr(_dist, "_codes", lambda code: sent.append(code) or [0, code])
    monkeypatch.setattr(_dist, "_error_texts", lambda text, world, rank: sent.append(text))

    class Unreadable(ValueError):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    _dist.tell_failure(Unreadable())
    assert sent == [_dist.FAILED, "Unreadable (its message could not be read)"]


@pytest.mark.parametrize("given", [4, 1])
def test_num_replicas_other_than_the_groups_size_needs_rank(monkeypatch, given):
    """s28-user: under a group of 2, ``BucketSampler(..., num_replicas=4)`` took the group's
    rank (0 or 1) as a rank of 4: ranks 2 and 3 never ran and half the data was left out every
    epoch, silently (with fewer replicas than processes, the ranks past them were refused naming
    no process group). Now every rank says rank= is needed; with rank= it plans as asked."""
    from bucketloader import _dist
    from bucketloader.sampler import BucketSampler

    monkeypatch.setattr(_dist, "initialised", lambda: True)
    monkeypatch.setattr(_dist, "default_ranks", lambda: (2, 1))
    lengths = np.arange(1, 101)
    with pytest.raises(
        ValueError,
        match=rf"^num_replicas={given} differs from the process group's world size 2, so rank= "
        rf"is required: the group's rank 1 is a rank of 2 processes, not of {given} replicas",
    ):
        BucketSampler(lengths, num_buckets=2, batch_size=4, num_replicas=given)
    sampler = BucketSampler(lengths, num_buckets=2, batch_size=4, num_replicas=given, rank=0)
    assert (sampler.num_replicas, sampler.rank) == (given, 0)
