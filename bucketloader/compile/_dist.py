"""Ranks sharing compile work: who compiles what, and how the artifacts reach every rank.

Everything crosses ranks as JSON bytes in ``uint8`` tensors (bytes base64-encoded), never as
pickles: ``broadcast_object_list`` / ``all_gather_object`` would unpickle what another process
sent.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from bucketloader._dist import comm_device, default_ranks
from bucketloader._files import NotAFile, read_bytes, write_atomic

#: The largest artifact file sent to other ranks (a compiled kernel library is tens of MB).
MAX_ARTIFACT_BYTES = 1 << 30

#: Subtrees of the inductor cache directory that a warm start reads (NOTE [ What a warm start
#: needs ] in store.py); compiled kernels (``*.so``) are taken from anywhere.
ARTIFACT_DIRS = ("fxgraph", "aotautograd", "dynamo", "triton")


def world() -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group, ``(1, 0)`` without one."""
    return default_ranks()


def _encode(obj: Any) -> Any:
    """JSON-ready: ``bytes`` as ``{"b64": ...}``, tuples as lists."""
    if isinstance(obj, bytes):
        return {"b64": base64.b64encode(obj).decode("ascii")}
    if isinstance(obj, (list, tuple)):
        return [_encode(x) for x in obj]
    return obj


def _decode(obj: Any) -> Any:
    if isinstance(obj, dict) and set(obj) == {"b64"}:
        return base64.b64decode(obj["b64"])
    if isinstance(obj, list):
        return [_decode(x) for x in obj]
    return obj


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` (JSON values and bytes) on every rank, sent as JSON bytes, never pickled
    (as :mod:`bucketloader.cache._dist` sends cache entries)."""
    import torch
    import torch.distributed as dist

    device = comm_device()
    payload = json.dumps(_encode(obj)).encode() if dist.get_rank() == 0 else b""
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if dist.get_rank() == 0:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=0)
    return _decode(json.loads(bytes(data.cpu().numpy().tobytes())))


def all_gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (JSON values and bytes), in rank order, sent as JSON bytes."""
    import torch
    import torch.distributed as dist

    device, world = comm_device(), default_ranks()[0]
    payload = json.dumps(_encode(obj)).encode()
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(payload)], dtype=torch.int64, device=device))
    longest = max(int(t.item()) for t in sizes)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    if payload:
        mine[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    out = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(out, mine)
    return [
        _decode(json.loads(bytes(t[: int(n.item())].cpu().numpy().tobytes())))
        for t, n in zip(out, sizes, strict=True)
    ]


def barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def sees_shared_directory(directory: Path) -> bool:
    """Does every rank see the same ``directory``? Each rank writes a marker file, then each checks
    that it sees all of them; the answer is the same on every rank (a collective)."""
    size, rank = world()
    token = broadcast(secrets.token_hex(8) if rank == 0 else None)
    folder = directory / ".ranks" / token
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / str(rank)).write_bytes(b"")
        ok = True
    except OSError:
        ok = False
    barrier()
    if ok:
        try:
            ok = len(os.listdir(folder)) == size
        except OSError:
            ok = False
    answer = all(all_gather(ok))
    barrier()
    if rank == 0:
        shutil.rmtree(folder, ignore_errors=True)
    return answer


def artifact_files(root: Path) -> set[str]:
    """Relative paths of the artifact files under ``root`` (no locks or temporary files)."""
    out: set[str] = set()
    if not root.is_dir():
        return out
    for dirpath, _, files in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        top = rel_dir.split(os.sep)[0]
        for name in files:
            if name.endswith((".lock", ".tmp", ".part")) or name.startswith(".tmp"):
                continue
            if top in ARTIFACT_DIRS or name.endswith(".so"):
                out.add(os.path.normpath(os.path.join(rel_dir, name)))
    return out


def pack(root: Path, names: set[str]) -> list[tuple[str, bytes]]:
    """The bytes of ``names`` (relative to ``root``), files that vanished left out."""
    out = []
    for name in sorted(names):
        try:  # bounded, regular files only: a FIFO or link planted in the cache is skipped
            out.append((name, read_bytes(root / name, max_bytes=MAX_ARTIFACT_BYTES)))
        except (OSError, ValueError, NotAFile):
            continue
    return out


def unpack(root: Path, files: list[tuple[str, bytes]]) -> int:
    """Write the files missing under ``root`` atomically; entries are content-addressed, so an
    existing file is the same file. Returns how many were written."""
    written = 0
    base = root.resolve()
    for name, data in files:
        if not isinstance(name, str) or not isinstance(data, bytes):
            continue
        dst = (root / name).resolve()
        if base not in dst.parents:  # never outside the cache directory
            continue
        if os.path.lexists(dst):
            continue
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(dst, data, mode=0o755 if name.endswith(".so") else None)
        except (NotAFile, OSError):  # the rank compiles that piece itself instead
            continue
        written += 1
    return written


def exchange(root: Path, names: set[str]) -> int:
    """Send this rank's new artifact files to every rank and write the others'; a collective."""
    gathered = all_gather(pack(root, names))
    return sum(unpack(root, files) for files in gathered)
