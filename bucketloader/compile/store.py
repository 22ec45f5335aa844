"""CompileCache: where compiled graphs live between runs and ranks, and what was compiled.

NOTE [ What a warm start needs ]
``torch.compile`` with inductor keeps its work in ``TORCHINDUCTOR_CACHE_DIR``: AOTAutograd entries
(``aotautograd/``), FX-graph entries (``fxgraph/``: the generated Python wrapper and the C++ or
Triton kernel *source*), and the compiled kernels themselves (``*.so`` next to their sources, and
``triton/`` on GPUs). A process that finds all three for a graph skips tracing through AOTAutograd,
code generation and the C++ compiler: a shape that cost 20-150 s cold loads in about 0.4-1.5 s on
this project's 2-core CPU. ``torch.compiler.save_cache_artifacts()`` (the "mega-cache") carries
only the first two: loaded into an empty directory, every C++ kernel is compiled again by g++
(about 15 s of a 17 s "warm" start here), which is why portable artifacts alone save little on a
CPU. A fourth, per-machine piece lives outside the cache directory: the precompiled C++ header
(``$TMPDIR/torchinductor_$USER/precompiled_headers``, about 150 MB), rebuilt in about 4 s by the
first process on a machine that lacks it. :class:`CompileCache` therefore shares the *directory*
(fxgraph, aotautograd, kernels), never the mega-cache alone.

NOTE [ Cache layout ]
``<directory>`` defaults to ``default_cache_dir() / "compile"`` (next to the bucket cache:
``$BUCKETLOADER_CACHE_DIR/compile`` or ``~/.cache/bucketloader/compile``)::

    <directory>/inductor/                       TORCHINDUCTOR_CACHE_DIR while precompile runs
                                                and after (inductor's own entries and kernels)
    <directory>/entries/<key>/<shape_key>.json  one record per compiled shape (JSON, never pickled)

Inductor's own keys (over the traced graph, the inputs' metadata, the configuration, torch
and compiler versions) decide whether a kernel is reused, so a stale record can only mispredict
"warm", never load a wrong kernel. The records say which shapes of which step were compiled and
what they cost, cold and warm: the numbers :func:`~bucketloader.analysis.recommend_num_buckets`
needs (``compiled_shapes=``) and what :class:`~bucketloader.compile.PrecompileReport` compares.

NOTE [ The compile key ]
``key`` is the SHA256 of a canonical JSON document of everything a step's compiled graphs depend
on that is known before compiling:

* the environment: torch version and git hash, CUDA version, Python version, platform, the
  devices (CPU capability such as ``AVX512``; GPU name and compute capability), torch's thread
  count (inductor's CPU kernels are specialised to it), the module the C pickler names
  ``torch.contiguous_format`` by (a ``torch.multiprocessing.spawn`` child's ``__mp_main__``:
  NOTE [ Where pickle finds torch's memory formats ] in :mod:`bucketloader.compile._key`), and
  digests of the inductor, dynamo (recompile limits left out) and functorch configurations;
* the ``torch.compile`` options found on the step and its modules (backend and its mode or
  options, ``dynamic``, ``fullgraph``);
* the code: the step function's bytecode, constants and names (not line numbers or file names:
  moving code does not miss), the user functions it references, and every module class's methods;
* the model: each module's repr, parameter and buffer names, shapes, dtypes, devices,
  ``requires_grad`` and ``training`` flags; each optimizer's class and hyper-parameters;
* the batch structure: containers, keys, tensor dtypes, devices and number of dims.

Each shape's record adds ``shape_key``: the SHA256 of ``key``, the planned shape and the full batch
signature (every tensor's size). A changed model, step, dtype, device, torch or configuration
changes ``key``, so every shape misses; a new shape misses alone; an unchanged rerun hits every
shape. What the key cannot see (code reached only through attributes of plain objects, values a
graph specialises on) inductor's own keys still catch: such a shape is reported ``cached`` but
compiles ``cold``, and the report shows both.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bucketloader._files import (
    NotAFile,
    clean_temps,
    folder_blocker,
    os_reason,
    read_json,
    write_atomic,
)
from bucketloader._validation import check_bool, check_choice, check_folder, checks_options
from bucketloader._version import __version__
from bucketloader.cache import default_cache_dir
from bucketloader.compile._key import KEY_FORMAT, check_torch, digest

__all__ = ["CompileCache", "CompileCacheWarning", "ShapeRecord"]

ENTRY_TAG = "bucketloader.compile"
#: How ranks share compiled artifacts (NOTE [ Sharing across ranks ] in precompile.py).
SHARE = ("auto", "collective", "filesystem")
#: Records larger than this are not records; never read them whole.
_MAX_RECORD_BYTES = 1 << 20
#: Inductor directories a CompileCache pointed TORCHINDUCTOR_CACHE_DIR at in this process.
_ACTIVATED: set[str] = set()


class CompileCacheWarning(UserWarning):
    """A compile record could not be read or written, or the inductor directory was redirected."""


@dataclass(frozen=True)
class ShapeRecord:
    """What is known of one compiled shape of one step.

    Attributes:
        shape: the planned batch shape.
        shape_key: SHA256 of (key, shape, full batch signature): the record's file name.
        cold_seconds: the last cold compile of this shape (``None`` if never seen cold).
        warm_seconds: the last load of this shape from the cache (``None`` if never seen warm).
        updated: Unix time of the last update.

    Example:
        >>> rec = ShapeRecord((8, 128), "9f86d0" + "0" * 58, 41.5, 0.8, 1764374400.0)
        >>> f"{rec.shape}: {rec.cold_seconds} s cold, {rec.warm_seconds} s from the cache"
        '(8, 128): 41.5 s cold, 0.8 s from the cache'

        A cache's records, after :func:`~bucketloader.compile.precompile` with ``cache=``:
        ``cache.compiled_shapes(report.key)`` (shape -> record).
    """

    shape: tuple[int, ...]
    shape_key: str
    cold_seconds: float | None
    warm_seconds: float | None
    updated: float


@checks_options
class CompileCache:
    """Compiled graphs shared by runs (warm starts) and ranks, plus a record per compiled shape.

    Pass it to :func:`~bucketloader.compile.precompile` (``cache=``); the default is one in
    ``default_cache_dir() / "compile"``. While precompile runs and after it, inductor writes to and
    reads from :attr:`inductor_dir` (``TORCHINDUCTOR_CACHE_DIR`` is set to it for the process, so
    that the graphs training compiles later land there too). See NOTE [ Cache layout ],
    NOTE [ The compile key ] and NOTE [ What a warm start needs ] in
    :mod:`bucketloader.compile.store`.

    Args:
        directory: the cache directory (``None``: ``default_cache_dir() / "compile"``). Put it on
            a filesystem every node sees to share artifacts without sending them.
        distributed: with ``torch.distributed`` initialised and more than one rank, split the
            shapes among the ranks, share the artifacts, and have every rank load every shape.
            ``precompile`` is then a collective: every rank must call it.
        share: how the ranks share artifacts: ``"auto"`` (check whether every rank sees the
            directory: if so through the filesystem, else sent over ``torch.distributed``),
            ``"filesystem"`` (trust that the directory is shared) or ``"collective"`` (always send).

    Example:
        >>> import tempfile
        >>> cache = CompileCache(tempfile.mkdtemp())
        >>> cache.inductor_dir.name, cache.records("0" * 64)
        ('inductor', {})
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        distributed: bool = True,
        share: str = "auto",
    ) -> None:
        self.directory = (
            check_folder("directory", directory)
            if directory is not None
            else default_cache_dir() / "compile"
        )
        self.distributed = check_bool("distributed", distributed)
        self.share = check_choice("share", share, SHARE)
        self._swept: set[str] = set()  # keys whose folder's dead writers' files are removed
        blocker = folder_blocker(self.directory)
        if blocker is not None:  # say so where the cache is made, not at the first precompile
            self._unusable(blocker, stacklevel=4)  # (at the line making the cache)

    def __repr__(self) -> str:
        return (
            f"CompileCache({str(self.directory)!r}, distributed={self.distributed}, "
            f"share={self.share!r})"
        )

    @property
    def inductor_dir(self) -> Path:
        """``TORCHINDUCTOR_CACHE_DIR`` while this cache is active."""
        return self.directory / "inductor"

    def activate(self) -> bool:
        """Point inductor's cache at :attr:`inductor_dir` for this process.

        A ``TORCHINDUCTOR_CACHE_DIR`` you set to another directory is replaced, with one
        :class:`CompileCacheWarning` (pass ``cache=CompileCache(...)`` on that filesystem instead,
        or ``cache=False`` to leave inductor's configuration alone). Returns ``False`` (with one
        warning, leaving inductor alone) when the directory is not :meth:`usable`.
        """
        check_torch("CompileCache")
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir as torch_default

        if not self.usable():
            return False
        target = str(self.inductor_dir.resolve())
        current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        ours = (target, os.path.abspath(torch_default()), *_ACTIVATED)
        if current and os.path.abspath(current) not in ours:
            self._warn(
                f"TORCHINDUCTOR_CACHE_DIR={current} is replaced by {target} for this process, "
                "so that precompiled graphs are found again; pass cache=CompileCache(directory) "
                "to keep them elsewhere, or cache=False to leave inductor's cache alone",
                once=("redirect", f"{current}->{target}"),
            )
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = target
        _ACTIVATED.add(target)
        return True

    # -- records --------------------------------------------------------------------------------
    @staticmethod
    def shape_key(key: str, shape: tuple[int, ...], signature: Any) -> str:
        """SHA256 of (key, shape, full batch signature)."""
        return digest({"key": key, "shape": list(shape), "batch": signature})

    def _path(self, key: str, shape_key: str) -> Path:
        return self.directory / "entries" / key / f"{shape_key}.json"

    def records(self, key: str) -> dict[str, ShapeRecord]:
        """Every shape compiled under ``key``: shape_key -> :class:`ShapeRecord`."""
        folder = self.directory / "entries" / key
        out: dict[str, ShapeRecord] = {}
        try:
            names = sorted(p.name for p in folder.iterdir() if p.suffix == ".json")
        except OSError:
            return out
        for name in names:
            rec = self._read(key, name[:-5])
            if rec is not None:
                out[rec.shape_key] = rec
        return out

    def compiled_shapes(self, key: str) -> dict[tuple[int, ...], ShapeRecord]:
        """shape -> record of every shape compiled under ``key`` (the warm ones of a rerun); what
        ``recommend_num_buckets(compiled_shapes=...)`` takes."""
        return {rec.shape: rec for rec in self.records(key).values()}

    def get(self, key: str, shape: tuple[int, ...], signature: Any) -> ShapeRecord | None:
        """The record of this shape and batch signature under ``key``, or ``None``."""
        return self._read(key, self.shape_key(key, shape, signature))

    def _sweep(self, key: str) -> None:
        """Remove the temporary files that killed writers left in ``key``'s folder, at this
        object's first lookup of ``key`` (a write does it too, but a run that only hits never
        writes; NOTE [ Writing a cache file ] in :mod:`bucketloader._files`)."""
        self._swept.add(key)
        folder = self.directory / "entries" / key
        removed = clean_temps(folder)
        if removed:
            _log.debug(
                "removed %d temporary file(s) of writers that no longer run from %s",
                removed,
                folder,
            )

    def _read(self, key: str, shape_key: str) -> ShapeRecord | None:
        path = self._path(key, shape_key)
        if key not in self._swept:
            self._sweep(key)
        try:
            body = read_json(path, max_bytes=_MAX_RECORD_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except NotAFile as exc:
            fate = "left alone (never read, replaced or deleted)"
            self._warn(_foreign(path, exc, fate), once=("foreign", str(path)))
            return None
        except (OSError, ValueError) as exc:
            self._warn(f"ignored the unreadable compile record {path} ({exc})", once=None)
            return None
        try:  # a record is untrusted input: whatever it holds, it is a miss, never an exception
            return _record(body, key, shape_key)
        except Exception as exc:
            self._warn(f"ignored the unreadable compile record {path} (invalid: {exc})", once=None)
            return None

    def put(
        self,
        key: str,
        document: dict[str, Any],
        shape: tuple[int, ...],
        signature: Any,
        *,
        cold_seconds: float | None = None,
        warm_seconds: float | None = None,
    ) -> ShapeRecord | None:
        """Record a compiled (``cold_seconds``) or loaded (``warm_seconds``) shape, atomically;
        earlier values are kept where none is given. Returns the record (``None`` if unwritable).
        """
        shape_key = self.shape_key(key, shape, signature)
        old = self._read(key, shape_key)
        now = time.time()
        body = {
            "format": ENTRY_TAG,
            "version": KEY_FORMAT,
            "key": key,
            "shape": list(shape),
            "batch": signature,
            "model": document,
            "cold_seconds": cold_seconds if cold_seconds is not None else old and old.cold_seconds,
            "warm_seconds": warm_seconds if warm_seconds is not None else old and old.warm_seconds,
            "library_version": __version__,
            "updated": now,
        }
        path = self._path(key, shape_key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps(body, indent=1, sort_keys=True).encode() + b"\n")
        except NotAFile as exc:
            self._warn(_foreign(path, exc, "left alone"), once=("foreign", str(path)))
            return None
        except OSError as exc:
            self._unusable(exc)
            return None
        return ShapeRecord(
            shape=tuple(shape),
            shape_key=shape_key,
            cold_seconds=body["cold_seconds"],
            warm_seconds=body["warm_seconds"],
            updated=now,
        )

    def usable(self) -> bool:
        """Can this cache hold records and inductor's artifacts? Creates the directories; if
        they cannot be created or written, warns once (NOTE [ One warning per problem ] in
        :mod:`bucketloader.cache.store`) and returns ``False``: precompile then runs uncached,
        as with ``cache=False``."""
        try:
            for folder in (self.directory, self.inductor_dir, self.directory / "entries"):
                folder.mkdir(parents=True, exist_ok=True)
                if not os.access(folder, os.W_OK | os.X_OK):
                    raise PermissionError(errno.EACCES, "not writable", str(folder))
        except OSError as exc:
            self._unusable(exc)
            return False
        return True

    def _unusable(self, exc: OSError, *, stacklevel: int = 3) -> None:
        self._warn(
            f"compile cache directory {self.directory} is not usable "
            f"({os_reason(exc)}); precompile compiles without recording or "
            "sharing, as with cache=False. Point CompileCache(directory) or "
            "BUCKETLOADER_CACHE_DIR at a writable directory",
            once=("directory", os.path.abspath(self.directory)),
            stacklevel=stacklevel,
        )

    def _warn(self, message: str, *, once: tuple[str, str] | None, stacklevel: int = 3) -> None:
        """Warn once per process per (what, where), or per message with ``once=None``."""
        mark = once if once is not None else ("message", message)
        if mark in _WARNED:
            return
        _WARNED.add(mark)
        warnings.warn(message, CompileCacheWarning, stacklevel=stacklevel)


_log = logging.getLogger(__name__)
#: Problems already reported in this process (one warning per problem, whichever object meets it).
_WARNED: set[tuple[str, str]] = set()
#: The most dimensions a batch shape has (batch, lengths and fixed trailing dims).
_MAX_DIMS = 32


def _foreign(path: Path, exc: NotAFile, fate: str) -> str:
    """The warning for a record path that bucketloader did not write (``fate``: what is done)."""
    return (
        f"compile record path {path} is {exc}, which bucketloader did not write; it is {fate} "
        "and that shape is not recorded"
    )


def _record(body: Any, key: str, shape_key: str) -> ShapeRecord:
    """The validated :class:`ShapeRecord` of a record's JSON body (``ValueError`` otherwise)."""
    if not isinstance(body, dict):
        raise ValueError(f"a record is a JSON object, got {type(body).__name__}")
    if body.get("format") != ENTRY_TAG or body.get("version") != KEY_FORMAT:
        raise ValueError("not a record of this format version")
    shape = body.get("shape")
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= _MAX_DIMS
        or not all(type(x) is int and 0 <= x < 2**62 for x in shape)
        or shape[0] < 1
    ):
        raise ValueError(f"shape must be a list of ints >= 0 (batch >= 1), got {shape!r}")
    ok = (
        body.get("key") == key == digest(body.get("model"))
        and CompileCache.shape_key(key, tuple(shape), body.get("batch")) == shape_key
    )
    if not ok:
        raise ValueError("its fields do not hash to its name")
    updated = body.get("updated")
    if not isinstance(updated, (int, float)) or isinstance(updated, bool):
        raise ValueError(f"updated must be a finite number, got {updated!r}")
    if not math.isfinite(updated):
        raise ValueError(f"updated must be a finite number, got {updated!r}")
    return ShapeRecord(
        shape=tuple(shape),
        shape_key=shape_key,
        cold_seconds=_seconds(body.get("cold_seconds")),
        warm_seconds=_seconds(body.get("warm_seconds")),
        updated=float(updated),
    )


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value < math.inf:
        raise ValueError(f"seconds must be a finite number >= 0, got {value!r}")
    return float(value)
