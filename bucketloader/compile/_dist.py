"""Ranks sharing compile work: who compiles what, and how the artifacts reach every rank."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from bucketloader._dist import default_ranks
from bucketloader.compile.store import write_atomic

#: Subtrees of the inductor cache directory that a warm start reads (NOTE [ What a warm start
#: needs ] in store.py); compiled kernels (``*.so``) are taken from anywhere.
ARTIFACT_DIRS = ("fxgraph", "aotautograd", "dynamo", "triton")


def world() -> tuple[int, int]:
    """``(world_size, rank)`` of the default process group, ``(1, 0)`` without one."""
    return default_ranks()


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather(obj: Any) -> list[Any]:
    import torch.distributed as dist

    out: list[Any] = [None] * default_ranks()[0]
    dist.all_gather_object(out, obj)
    return out


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
        try:
            out.append((name, (root / name).read_bytes()))
        except OSError:
            continue
    return out


def unpack(root: Path, files: list[tuple[str, bytes]]) -> int:
    """Write the files missing under ``root`` atomically; entries are content-addressed, so an
    existing file is the same file. Returns how many were written."""
    written = 0
    base = root.resolve()
    for name, data in files:
        dst = (root / name).resolve()
        if base not in dst.parents:  # never outside the cache directory
            continue
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dst, data)
        if name.endswith(".so"):
            dst.chmod(0o755)
        written += 1
    return written


def exchange(root: Path, names: set[str]) -> int:
    """Send this rank's new artifact files to every rank and write the others'; a collective."""
    gathered = all_gather(pack(root, names))
    return sum(unpack(root, files) for files in gathered)
