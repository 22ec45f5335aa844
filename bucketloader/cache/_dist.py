"""Multi-rank coordination of :class:`~bucketloader.cache.BucketCache` over ``torch.distributed``.

NOTE [ Rank 0 solves, the others receive the entry ]
When a process group with more than one rank is initialised, rank 0 looks the key up in its
cache, solves on a miss and writes the entry; then it **broadcasts the entry's JSON** (as a
``uint8`` tensor, length first) to every rank. We chose a broadcast over "barrier, then read the
file" because:

* it works on node-local filesystems (each node's ``/tmp``), where a barrier-then-read would miss
  and every rank would solve again — the very cost the cache exists to avoid;
* every rank ends up with byte-identical boundaries, which static shapes across ranks require;
* it carries JSON bytes, not pickles (``broadcast_object_list`` would pickle).

Non-zero ranks also store the received entry in their own cache directory when it is missing
there (on a shared filesystem rank 0 already wrote it, so they skip). Every rank must call with
the same lengths and options (as a sampler built identically on each rank does): the broadcast
carries rank 0's key, and one more collective (an ``all_gather`` of one flag per rank) tells every
rank which ranks' keys differ, so a mismatch is a ``ValueError`` on *every* rank, rank 0
included (rank 0 going on alone would wait in the job's next collective until it times out). If
rank 0 fails to solve, it sends the error text and every rank raises, instead of hanging. The
lookup starts with a checkpoint (NOTE [ Checkpoints before a collective ] in
:mod:`bucketloader._dist`): a sampler's rank refused before it (its own lengths) stops the others
there, named, and ranks of which only some use the cache are told so, where a broadcast met a
gather.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bucketloader._dist import (
    CACHE_LOOKUP,
    checkpoint,
    collectives,
    comm_device,
    default_ranks,
    told,
    world_size,
)
from bucketloader.solution import JointSolution, Solution, solution_from_dict

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.cache.store import BucketCache


def broadcast_get_or_solve(
    cache: BucketCache,
    hist: Any,
    key: str,
    params: dict[str, Any],
    solve_fn: Callable[[], Solution | JointSolution],
) -> Solution | JointSolution:
    """Rank 0 looks up / solves / writes, then broadcasts the entry JSON to every rank."""
    import torch
    import torch.distributed as dist

    checkpoint(CACHE_LOOKUP)  # NOTE [ Checkpoints before a collective ] in bucketloader._dist
    device = comm_device()
    rank = default_ranks()[1]
    with collectives():  # (an error from here to the agreement is every rank's, or the group's)
        if rank == 0:
            error: BaseException | None = None
            try:
                sol = cache.local_get_or_solve(hist, key, params, solve_fn)
                payload = json.dumps({"key": key, "solution": sol.to_dict()}).encode()
            except Exception as exc:  # sent to the other ranks, then re-raised here
                error = exc
                payload = f"{type(exc).__name__}: {exc}".encode() or b"error"
            size = len(payload) if error is None else -len(payload)
            dist.broadcast(torch.tensor([size], dtype=torch.int64, device=device), src=0)
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
            dist.broadcast(data, src=0)
            if error is not None:
                raise error
            _agree(rank, True, key, device)
            return sol
        header = torch.zeros(1, dtype=torch.int64, device=device)
        dist.broadcast(header, src=0)
        size = int(header.item())
        data = torch.empty(abs(size), dtype=torch.uint8, device=device)
        dist.broadcast(data, src=0)
        text = bytes(data.cpu().numpy().tobytes()).decode("utf-8")
        if size < 0:
            raise RuntimeError(f"rank 0 failed to compute the bucket boundaries: {text}")
        body = json.loads(text)
        _agree(rank, body["key"] == key, body["key"], device)
    sol = dataclasses.replace(solution_from_dict(body["solution"]), params=dict(params))
    cache.hits += 1
    if not cache.path_for(key).exists():  # (a shared directory: rank 0 stored it)
        # an entry stored since the check (another job's, in a node-local directory) is kept:
        # NOTE [ The first stored solution wins ] in cache.store (s30-rev: put replaced it)
        cache._put(hist, sol, replace=False)
    return sol


def _agree(rank: int, same: bool, solved: str, device: Any) -> None:
    """Every rank's "my key is rank 0's" flag, by one ``all_gather``; a ``ValueError`` on every
    rank (naming the ranks that differ) when any flag is down."""
    import torch
    import torch.distributed as dist

    flags = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world_size())]
    dist.all_gather(flags, torch.tensor([int(same)], dtype=torch.int64, device=device))
    same_as_rank0 = torch.cat(flags).cpu().tolist()  # one device-to-host copy, not one per rank
    odd = [r for r, f in enumerate(same_as_rank0) if not f]
    if odd:
        raise told(
            ValueError(
                f"rank(s) {odd} asked the cache for another key than rank 0, which solved "
                f"{solved[:12]}… (this is rank {rank}): the ranks passed different lengths or "
                "options; build the sampler from the same lengths and arguments on every rank"
            )
        )
