"""A real multi-process run: torch.distributed (gloo), BucketSampler defaults from the process
group, a DistributedDataParallel model trained for one epoch. Per step every rank's batch has the
same shape, every rank gets the same number of batches, and together they cover the data.

The worker is this file run as a script (``python test_distributed.py worker ...``), started with
``subprocess`` and a hard timeout so a hang can never block CI.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

TIMEOUT_S = 150


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_world(tmp_path: Path, lengths: np.ndarray, world: int, policies: str) -> list[dict]:
    np.save(tmp_path / "lengths.npy", lengths)
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "worker",
                str(r),
                str(world),
                str(port),
                str(tmp_path),
                policies,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, log) in enumerate(zip(procs, logs, strict=False)):
        assert p.returncode == 0, f"rank {r} failed:\n{log[-3000:]}"
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
        timeout=timedelta(seconds=60),
    )
    lengths = np.load(Path(out_dir) / "lengths.npy")
    results = {p: _train_epoch(rank, world, lengths, p) for p in policies.split(",")}
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(results))
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


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "worker":
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
