"""File-level helpers of the cache: canonical parameters, keys, reading, eviction."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bucketloader.histogram import LengthHistogram
from bucketloader.solution import Solution

#: Version of the key and entry format; part of every key.
CACHE_FORMAT = 1
ENTRY_TAG = "bucketloader.cache"
#: Larger files are not cache entries (an entry is about 1 KB); never read them whole.
MAX_ENTRY_BYTES = 4 * 2**20
#: Temporary files older than this are leftovers of a crashed writer and are removed on eviction.
STALE_TMP_SECONDS = 3600.0


def default_cache_dir() -> Path:
    """``$BUCKETLOADER_CACHE_DIR``, else the user cache directory + ``bucketloader``.

    Linux: ``$XDG_CACHE_HOME/bucketloader`` (``~/.cache/bucketloader``); macOS:
    ``~/Library/Caches/bucketloader``; Windows: ``%LOCALAPPDATA%\\bucketloader\\Cache``.
    """
    env = os.environ.get("BUCKETLOADER_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":  # pragma: no cover
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "bucketloader" / "Cache"
    if sys.platform == "darwin":  # pragma: no cover
        return Path.home() / "Library" / "Caches" / "bucketloader"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bucketloader"


def key_of(strategy: str, params: dict[str, Any], digest: str) -> str:
    """SHA256 of the canonical JSON of (format, strategy, canonical params, histogram digest)."""
    doc = {"format": f"{ENTRY_TAG}/{CACHE_FORMAT}", "strategy": strategy, "params": params}
    doc["histogram"] = digest
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def check_body(body: Any, key: str, hist: LengthHistogram | None) -> str | None:
    """Why an entry cannot be trusted, or ``None``. The key is recomputed from the entry."""
    if not isinstance(body, dict) or body.get("format") != ENTRY_TAG:
        return "not a bucketloader cache entry"
    if body.get("version") != CACHE_FORMAT:
        return f"entry format {body.get('version')!r}, expected {CACHE_FORMAT}"
    try:
        recomputed = key_of(body["strategy"], body["params"], body["histogram"]["digest"])
        sol = Solution.from_dict(body["solution"])
        same = sol.strategy == body["strategy"] and canonical_params(sol.params) == body["params"]
    except (KeyError, TypeError, ValueError) as exc:
        return f"wrong schema: {exc}"
    if recomputed != key or body.get("key") != key:
        return "its contents do not match its key"
    if not same:
        return "its solution does not match its key"
    if hist is not None and (sol.boundaries[-1] < hist.max or sol.num_samples != hist.num_samples):
        return "its solution does not fit the histogram"
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


def read_entry(path: Path) -> Any:
    """Parse one entry file as JSON (never pickle); ``ValueError`` if it is not one."""
    with open(path, "rb") as f:
        data = f.read(MAX_ENTRY_BYTES + 1)
    if len(data) > MAX_ENTRY_BYTES:
        raise ValueError(f"larger than {MAX_ENTRY_BYTES} bytes")
    if not data:
        raise ValueError("empty file")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    mtime_ns: int


def scan_entries(directory: Path) -> list[Entry]:
    """The ``*.json`` entries of ``directory`` (empty if it is missing or unreadable)."""
    out = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not (e.name.endswith(".json") and len(e.name) == 69):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
                out.append(Entry(Path(e.path), st.st_size, st.st_mtime_ns))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return out


def evict(directory: Path, max_size: int, *, keep: Path) -> list[Path]:
    """Remove the oldest entries (by modification time) until the total is under 0.99 × max_size.

    ``keep`` (the entry just written) is never removed. Call under the directory's lock.
    """
    _remove_stale_tmp(directory)
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


def _remove_stale_tmp(directory: Path) -> None:
    now = time.time()
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.startswith(".tmp-") and e.name.endswith(".part"):
                    try:
                        if now - e.stat().st_mtime > STALE_TMP_SECONDS:
                            os.unlink(e.path)
                    except FileNotFoundError:
                        pass
    except OSError:
        pass
