"""Entry-level helpers of the cache: canonical parameters, keys, validation, eviction.

Reading and writing files is :mod:`bucketloader._files` (shared with the compile cache)."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bucketloader._files import (
    STALE_TMP_SECONDS,
    NotAFile,
    clean_temps,
    read_json,
)
from bucketloader.boundaries import assign_buckets, padding_cost
from bucketloader.histogram import LengthHistogram
from bucketloader.solution import JointSolution, Solution, solution_from_dict

#: Version of the key and entry format; part of every key.
CACHE_FORMAT = 1
ENTRY_TAG = "bucketloader.cache"
#: Larger files are not cache entries (an entry is about 1 KB); never read them whole.
MAX_ENTRY_BYTES = 4 * 2**20


def default_cache_dir() -> Path:
    """``$BUCKETLOADER_CACHE_DIR``, else the user cache directory + ``bucketloader``.

    Linux: ``$XDG_CACHE_HOME/bucketloader`` (``~/.cache/bucketloader``; a relative
    ``XDG_CACHE_HOME`` is ignored, as the XDG Base Directory spec requires); macOS:
    ``~/Library/Caches/bucketloader``; Windows: ``%LOCALAPPDATA%\\bucketloader\\Cache``.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"BUCKETLOADER_CACHE_DIR": "/tmp/my-plans"}):
        ...     print(default_cache_dir().as_posix())
        /tmp/my-plans
    """
    env = os.environ.get("BUCKETLOADER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":  # pragma: no cover
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "bucketloader" / "Cache"
    if sys.platform == "darwin":  # pragma: no cover
        return Path.home() / "Library" / "Caches" / "bucketloader"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(xdg):  # the XDG spec: a relative path is invalid and must be ignored
        xdg = str(Path.home() / ".cache")
    return Path(xdg) / "bucketloader"


def key_of(strategy: str, params: dict[str, Any], digest: str) -> str:
    """SHA256 of the canonical JSON of (format, strategy, canonical params, histogram digest)."""
    doc = {"format": f"{ENTRY_TAG}/{CACHE_FORMAT}", "strategy": strategy, "params": params}
    doc["histogram"] = digest
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def check_body(body: Any, key: str, hist: Any) -> str | None:
    """Why an entry cannot be trusted, or ``None``. The key is recomputed from the entry."""
    if not isinstance(body, dict) or body.get("format") != ENTRY_TAG:
        return "not a bucketloader cache entry"
    if body.get("version") != CACHE_FORMAT:
        return f"entry format {body.get('version')!r}, expected {CACHE_FORMAT}"
    try:
        recomputed = key_of(body["strategy"], body["params"], body["histogram"]["digest"])
        sol = solution_from_dict(body["solution"])
        same = sol.strategy == body["strategy"] and canonical_params(sol.params) == body["params"]
    except (KeyError, TypeError, ValueError) as exc:
        return f"wrong schema: {exc}"
    if recomputed != key or body.get("key") != key:
        return "its contents do not match its key"
    if not same:
        return "its solution does not match its key"
    if isinstance(sol, JointSolution):
        return sol.problem(body["params"], hist)
    if hist is not None and not isinstance(hist, LengthHistogram):
        return "its solution does not fit the histogram"
    return check_solution(sol, body["params"], hist)


#: Statuses a solution may have (see :class:`~bucketloader.solution.Solution`).
STATUSES = ("coarsened", "heuristic", "optimal", "time_limit")


def check_solution(
    sol: Solution, params: dict[str, Any], hist: LengthHistogram | None
) -> str | None:
    """Why a loaded solution cannot be the answer for ``params`` (and ``hist``), or ``None``.

    The key proves which question an entry answers, not that its answer is right: an entry
    edited by hand (or by a buggy writer) is checked against the parameters in its key (at most
    ``num_buckets`` strictly increasing boundaries on multiples of ``pad_to_multiple_of``, the
    convention itself checked by :meth:`Solution.from_dict`), and against the histogram when
    given: the last boundary covers the longest length, no bucket is empty (solutions never
    keep one), and the stored objective and padding ratio are those of the boundaries, which is
    one O(U log k) pass.
    """
    b = sol.boundaries
    k = params.get("num_buckets")
    m = params.get("pad_to_multiple_of", 1)
    if not isinstance(k, int) or b.size > k:
        return f"its solution has {b.size} boundaries for num_buckets={k}"
    if isinstance(m, int) and m > 1 and (b % m).any():
        return f"its boundaries are not multiples of pad_to_multiple_of={m}"
    if sol.status not in STATUSES:
        return f"its solution has an unknown status {sol.status!r}"
    for name in ("gap", "padding_ratio", "solve_seconds"):
        value = getattr(sol, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"its solution has {name}={value!r}"
    if hist is None:
        return None
    if b[-1] < hist.max or sol.num_samples != hist.num_samples:
        return "its solution does not fit the histogram"
    occupied = np.bincount(assign_buckets(hist.values, b), minlength=b.size)
    if not occupied.all():
        return "its solution has an empty bucket"
    if sol.objective != padding_cost(hist, b, cost=params.get("cost", "linear")):
        return "its objective is not the padding of its boundaries"
    total = hist.total
    ratio = padding_cost(hist, b) / total if total else 0.0
    if not math.isclose(sol.padding_ratio, ratio, rel_tol=1e-9, abs_tol=1e-12):
        return "its padding ratio is not that of its boundaries"
    return None


def json_default(value: Any) -> Any:
    """``json.dumps`` fallback for solver details: numpy values as Python, anything else as str."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def canonical_params(params: Any) -> dict[str, Any]:
    """JSON-stable form of a parameter dict: sorted str keys, Python ints/floats, lists.

    Raises a clear ``TypeError`` for a value that cannot key a cache (a callable, an object).

    Example:
        >>> import numpy as np
        >>> canonical_params({"b": (1, 2), "a": np.int64(3)})
        {'a': 3, 'b': [1, 2]}
    """
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, got {type(params).__name__}")
    return {str(k): _canonical(str(k), params[k]) for k in sorted(params, key=str)}


def _canonical(name: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(float(value)):
        return float(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_canonical(name, v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _canonical(name, value[k]) for k in sorted(value)}
    raise TypeError(
        f"cannot key the cache on option {name}={value!r} ({type(value).__name__}); cached "
        "options must be None, bools, numbers, strings, or lists/dicts of them. Pass such a "
        "value, or disable the cache with cache=None"
    )


#: Something at an entry path that bucketloader did not write (a FIFO, a directory, a symbolic
#: link, a device): never read, replaced or deleted (the one reader: :mod:`bucketloader._files`).
NotAnEntry = NotAFile


def read_entry(path: Path) -> Any:
    """Parse one entry file as JSON (never pickle), through :func:`bucketloader._files.read_json`.

    Reads only a regular file, at most :data:`MAX_ENTRY_BYTES`, without blocking and without
    following a symbolic link. Raises ``FileNotFoundError`` for a miss, :class:`NotAnEntry` for
    something that is not a file we could have written, ``ValueError`` for a file whose contents
    are not a JSON document, and ``OSError`` when the file cannot be read.
    """
    return read_json(path, max_bytes=MAX_ENTRY_BYTES)


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    mtime_ns: int


_HEX = frozenset("0123456789abcdef")


def is_entry_name(name: str) -> bool:
    """``<64 lowercase hex>.json``: the only names the cache writes (and ever deletes)."""
    return len(name) == 69 and name.endswith(".json") and set(name[:64]) <= _HEX


def scan_entries(directory: Path) -> list[Entry]:
    """The entry files of ``directory``: regular files named ``<sha256>.json`` (symbolic links,
    directories and other names are not ours). Empty if the directory is missing or unreadable."""
    out = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not is_entry_name(e.name):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
                if stat.S_ISREG(st.st_mode):  # never count (or evict) what is not ours
                    out.append(Entry(Path(e.path), st.st_size, st.st_mtime_ns))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return out


def evict(directory: Path, max_size: int, *, keep: Path) -> list[Path]:
    """Remove the oldest entries (by modification time) until the total is under 0.99 × max_size.

    ``keep`` (the entry just written) is never removed. Call under the directory's lock.
    """
    clean_temps(directory, max_age=STALE_TMP_SECONDS)
    entries = sorted(scan_entries(directory), key=lambda e: (e.mtime_ns, e.path.name))
    total = sum(e.size for e in entries)
    if total <= max_size:
        return []
    target = 0.99 * max_size
    removed = []
    for e in entries:
        if total < target:
            break
        if e.path == keep:
            continue
        try:
            e.path.unlink()
        except FileNotFoundError:
            pass
        total -= e.size
        removed.append(e.path)
    return removed
