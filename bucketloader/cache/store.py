"""BucketCache: a directory of bucketing solutions keyed by SHA256, stored as JSON.

NOTE [ Cache key ]
The key is the SHA256 of a canonical JSON document holding everything that determines the
answer: the entry format version (:data:`CACHE_FORMAT`), the strategy's registered name, **every**
resolved parameter (defaults included, so changing a default changes the key) and the digest of
the canonical length histogram (sorted distinct lengths and counts as little-endian ``int64``, see
:meth:`~bucketloader.histogram.LengthHistogram.digest`). The same multiset of lengths in any
order, list or array gives the same key, in every process and on every platform. An unregistered
callable has no stable name, so it is refused. Bump :data:`CACHE_FORMAT` when a strategy's answer
for the same inputs changes.

NOTE [ Never pickle ]
Entries are JSON, read with :func:`json.loads` only, and re-validated on every read: the key is
recomputed from the entry's own fields and must match its file name, and the solution must be a
valid answer to the parameters in the key (:func:`~bucketloader.cache._io.check_solution`), so a
truncated, corrupt, edited, foreign or planted file is ignored with one :class:`CacheWarning`,
recomputed and replaced. Only regular files of at most 4 MiB are read, without blocking and
without following symbolic links; anything else at an entry path (a FIFO, a directory, a link,
a device) is the user's, never read, replaced or deleted: that solution is computed uncached.
Writes go to a temporary file in the same directory (mode ``0o666`` less the umask, so a shared
cache stays readable), then ``os.replace`` (atomic on POSIX and Windows; a fresh solve links the
file in instead, which never replaces an entry another process stored meanwhile: NOTE [ The
first stored solution wins ]), so a reader sees a whole entry or none; a writer killed
mid-write leaves a temporary file that the next write removes, and so does each cache
object's first lookup, a hit included (NOTE [ Writing a cache
file ] in :mod:`bucketloader._files`, the one reader and writer both caches use: only the files of
writers that no longer run, or of anyone's after an hour; a live writer's file is never touched;
a debug log on the ``bucketloader.cache.store`` logger counts them). Between the check that an
entry path holds a regular file (or nothing) and the replace, another process could put
something else there; the replace then swaps that directory entry only (a link's target is never
touched), the same window pip's cache has.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bucketloader._dist import world_size
from bucketloader._files import NotAFile, clean_temps, folder_blocker, os_reason, write_atomic
from bucketloader._validation import check_bool, check_folder, check_int, checks_options
from bucketloader._version import __version__
from bucketloader.cache._dist import broadcast_get_or_solve
from bucketloader.cache._io import (
    CACHE_FORMAT,
    ENTRY_TAG,
    canonical_params,
    check_body,
    default_cache_dir,
    evict,
    json_default,
    key_of,
    read_entry,
    scan_entries,
)
from bucketloader.cache._lock import FileLock
from bucketloader.histogram import LengthHistogram
from bucketloader.solution import JointSolution, Solution, solution_from_dict

#: Default size limit of a cache directory (bytes). An entry is about 1 KB.
DEFAULT_MAX_SIZE = 64 * 2**20

_log = logging.getLogger(__name__)


class CacheWarning(UserWarning):
    """A cache entry or directory could not be used; the solution was computed instead."""


@checks_options
class BucketCache:
    """A directory cache of bucketing solutions, shared by runs, processes and ranks.

    Pass it to :func:`~bucketloader.compute_boundaries` (``cache=BucketCache(...)``, or
    ``cache=True`` for the default directory). When ``torch.distributed`` is initialised, rank 0
    solves (or reads) and broadcasts the entry to the other ranks, so a slow solve runs once per
    job and every rank gets the same boundaries even without a shared filesystem.

    Args:
        directory: where entries live (``~`` expanded); ``None`` means :func:`default_cache_dir`.
            Created on the first write. If it cannot be read or written, solving works uncached
            with one warning (given here already when a file stands at or above the path).
        max_size: size limit in bytes (``None``: unlimited). When a write pushes the directory
            over it, the oldest entries are removed first until it is under 0.99 × the limit
            (the Gaudi recipe-cache policy), one process at a time under a lock file.
        distributed: coordinate through ``torch.distributed`` when it is initialised with more
            than one rank (see :mod:`bucketloader.cache._dist`). The lookup is then a collective:
            every rank must make the same call. Pass ``False`` where only one rank computes
            boundaries (a rank-0-only precompute), or that rank waits for the others.

    Attributes:
        hits, misses: lookups answered from / not found in the cache by this object.

    Example:
        >>> import tempfile
        >>> from bucketloader import compute_boundaries
        >>> cache = BucketCache(tempfile.mkdtemp())
        >>> compute_boundaries([3, 4, 4, 9, 10, 31], 3, cache=cache).tolist()
        [4, 10, 31]
        >>> compute_boundaries([31, 10, 9, 4, 4, 3], 3, cache=cache).tolist()  # a hit
        [4, 10, 31]
        >>> cache.hits, cache.misses, len(cache)
        (1, 1, 1)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        max_size: int | None = DEFAULT_MAX_SIZE,
        distributed: bool = True,
    ) -> None:
        self.directory = (
            check_folder("directory", directory) if directory is not None else default_cache_dir()
        )
        self.max_size = None if max_size is None else check_int("max_size", max_size, minimum=1)
        self.distributed = check_bool("distributed", distributed)
        self.hits = 0
        self.misses = 0
        self._swept = False  # the dead writers' temporary files, removed at the first lookup
        blocker = folder_blocker(self.directory)
        if blocker is not None:  # say so where the cache is made, not at the first solve
            self._warn_unusable(blocker)

    def __repr__(self) -> str:
        return f"BucketCache({str(self.directory)!r}, max_size={self.max_size})"

    # -- keys and paths ---------------------------------------------------------------------------
    @staticmethod
    def key(hist: Any, strategy: str | None, params: dict[str, Any]) -> str:
        """SHA256 hex key of (format, strategy name, all parameters, histogram digest).

        Example:
            >>> h = LengthHistogram.from_lengths([1, 2, 2])
            >>> k = BucketCache.key(h, "optimal", {"num_buckets": 2, "cost": "linear"})
            >>> len(k), k == BucketCache.key(h, "optimal", {"cost": "linear", "num_buckets": 2})
            (64, True)
        """
        if not isinstance(hist, LengthHistogram) and not _is_joint(hist):
            raise TypeError(
                f"hist must be a LengthHistogram or a JointHistogram, got {type(hist).__name__}"
            )
        if strategy is None:
            raise ValueError(
                "cannot cache the solution of an unregistered strategy callable (it has no stable "
                "name to key on); register it with bucketloader.register_strategy('name', fn) "
                "and pass the name, or disable the cache with cache=None"
            )
        if not isinstance(strategy, str) or not strategy:
            raise TypeError(f"strategy must be a registered name, got strategy={strategy!r}")
        return key_of(strategy, canonical_params(params), hist.digest())

    def path_for(self, key: str) -> Path:
        """The entry file of ``key``."""
        if not (isinstance(key, str) and len(key) == 64 and set(key) <= set("0123456789abcdef")):
            raise ValueError(f"key must be a 64-character lowercase SHA256 hex digest, got {key!r}")
        return self.directory / f"{key}.json"

    # -- lookups ----------------------------------------------------------------------------------
    def get(self, key: str) -> Solution | JointSolution | None:
        """The cached solution of ``key``, or ``None`` (missing or unusable, with one warning)."""
        sol, problem = self._read(key)
        if problem:
            self._warn(problem, once=("entry", problem))
        return sol

    def put(self, hist: Any, solution: Solution | JointSolution) -> str | None:
        """Store ``solution`` (solved on ``hist``) atomically; return the key (None if unwritable).

        Evicts the oldest entries if the write takes the directory over ``max_size``.
        """
        return self._put(hist, solution, replace=True)[0]

    def _put(
        self, hist: Any, solution: Solution | JointSolution, *, replace: bool
    ) -> tuple[str | None, bool]:
        """:meth:`put`, and whether an entry stored meanwhile was kept (``replace=False``:
        NOTE [ The first stored solution wins ])."""
        key = self.key(hist, solution.strategy, solution.params)
        body = {
            "format": ENTRY_TAG,
            "version": CACHE_FORMAT,
            "key": key,
            "strategy": solution.strategy,
            "params": canonical_params(solution.params),
            "histogram": {
                "digest": hist.digest(),
                "num_samples": hist.num_samples,
                "num_values": hist.num_values,
                "min": hist.min,
                "max": hist.max,
            },
            "library_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "created_unix": time.time(),
            "solution": solution.to_dict(),
        }
        data = json.dumps(body, indent=1, sort_keys=True, default=json_default).encode() + b"\n"
        path = self.path_for(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._warn_unusable(exc)
            return None, False
        try:
            write_atomic(path, data, replace=replace)
        except NotAFile as exc:
            self._warn_foreign(path, str(exc))
            return None, False
        except FileExistsError:
            return key, True
        except OSError as exc:
            if isinstance(exc, PermissionError) or not os.access(self.directory, os.W_OK):
                self._warn_unusable(exc)
            else:  # the directory took the temporary file but not the entry
                self._warn(
                    f"could not store cache entry {path} ({os_reason(exc)}); solutions are "
                    "computed without caching",
                    once=("store", str(path)),
                )
            return None, False
        try:
            if self.max_size is not None:
                self._evict(keep=path)
        except OSError as exc:  # eviction is best effort: the entry is stored
            self._warn(
                f"could not evict old entries from cache directory {self.directory} "
                f"({os_reason(exc)}); it may grow past max_size={self.max_size}",
                once=("evict", _dir_id(self.directory)),
            )
        return key, False

    def get_or_solve(
        self,
        hist: Any,
        strategy: str | None,
        params: dict[str, Any],
        solve_fn: Callable[[], Solution | JointSolution],
    ) -> Solution | JointSolution:
        """The cached solution for (hist, strategy, params), else ``solve_fn()`` stored.

        Under an initialised multi-rank ``torch.distributed`` group, rank 0 does this and
        broadcasts the entry; every rank must call it with the same arguments.
        """
        key = self.key(hist, strategy, params)
        if self.distributed and world_size() > 1:
            return broadcast_get_or_solve(self, hist, key, params, solve_fn)
        return self.local_get_or_solve(hist, key, params, solve_fn)

    def local_get_or_solve(
        self,
        hist: Any,
        key: str,
        params: dict[str, Any],
        solve_fn: Callable[[], Solution | JointSolution],
    ) -> Solution | JointSolution:
        """:meth:`get_or_solve` in this process only (no collective), by its precomputed key."""
        sol, problem = self._read(key, hist=hist)
        if sol is not None:
            self.hits += 1
            return dataclasses.replace(sol, params=dict(params))
        if problem:
            self._warn(f"{problem}; recomputing and replacing it", once=("entry", problem))
        self.misses += 1
        sol = solve_fn()
        # NOTE [ The first stored solution wins ]
        # Two processes that miss the same key at once (two jobs, ranks without a process group,
        # a precompute beside a job) both solve. A time-limited solve (a joint plan) can give
        # each another answer, and the last writer used to replace the first: the cache then
        # held a plan that the first job had not trained with, and its checkpoints were refused
        # at the restart that was to read its plan back (s29-user: two processes, Joint with
        # time_limit=0.3, two plan digests, one entry). So an entry stored while this process
        # solved is kept, and this process takes its solution: every process that misses at
        # once ends with the plan stored first. An unusable entry found before (``problem``)
        # is replaced, as before.
        _, kept = self._put(hist, sol, replace=problem is not None)
        if kept:
            theirs, _ = self._read(key, hist=hist)
            if theirs is not None:
                return dataclasses.replace(theirs, params=dict(params))
        return sol

    # -- maintenance ------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of entries in the directory."""
        return len(scan_entries(self.directory))

    def size(self) -> int:
        """Total bytes of the entries in the directory."""
        return sum(e.size for e in scan_entries(self.directory))

    def clear(self) -> int:
        """Remove every entry; return how many were removed."""
        removed = 0
        for entry in scan_entries(self.directory):
            try:
                entry.path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    # -- internals --------------------------------------------------------------------------------
    def _read(
        self, key: str, *, hist: Any = None
    ) -> tuple[Solution | JointSolution | None, str | None]:
        path = self.path_for(key)
        if not self._swept:
            self._sweep()
        try:
            body = read_entry(path)
        except (FileNotFoundError, NotADirectoryError):  # a miss; a write will say if unusable
            return None, None
        except NotAFile as exc:  # a miss; put leaves it alone too
            self._warn_foreign(path, str(exc))
            return None, None
        except PermissionError as exc:
            if not _exists(path):  # the directory refuses: unusable
                self._warn_unusable(exc)
                return None, None
            # the entry alone: said as the directory's ("not usable ... computed without
            # caching") while the entry was then solved and stored, readable to this user
            return None, (
                f"ignoring unreadable cache entry {path} ({os_reason(exc)}; another user's, "
                "written under a private umask such as 077?). A cache shared by several users "
                "needs entries all of them can read: write them under umask 022 or 002"
            )
        except (OSError, ValueError) as exc:
            return None, f"ignoring unusable cache entry {path} ({exc})"
        # an entry is untrusted input: whatever it holds, it is a miss, never an exception
        try:
            problem = check_body(body, key, hist)
            sol = None if problem else solution_from_dict(body["solution"])
        except Exception as exc:  # e.g. OverflowError on an objective of 1e999
            problem = f"invalid contents: {type(exc).__name__}: {exc}"
        if problem:
            return None, f"ignoring unusable cache entry {path} ({problem})"
        return sol, None

    def _sweep(self) -> None:
        """Remove the temporary files that killed writers left (a write does it too, but a
        cache that only hits never writes); once per object, best effort."""
        self._swept = True
        removed = clean_temps(self.directory)
        if removed:
            _log.debug(
                "removed %d temporary file(s) of writers that no longer run from cache "
                "directory %s",
                removed,
                self.directory,
            )

    def _evict(self, *, keep: Path) -> None:
        if self.max_size is None:
            return
        if sum(e.size for e in scan_entries(self.directory)) <= self.max_size:
            return
        with FileLock(self.directory / ".lock"):
            evict(self.directory, self.max_size, keep=keep)

    def _warn_unusable(self, exc: OSError) -> None:
        self._warn(
            f"cache directory {self.directory} is not usable ({os_reason(exc)}); solutions are "
            "computed without caching. Point BUCKETLOADER_CACHE_DIR or BucketCache(directory) "
            "at a writable directory",
            once=("directory", _dir_id(self.directory)),
        )

    def _warn_foreign(self, path: Path, what: str) -> None:
        self._warn(
            f"cache entry path {path} is {what}, which bucketloader did not write; it is left "
            "alone (never read, replaced or deleted) and this solution is computed without "
            "caching. Remove it to let the cache store the entry",
            once=("foreign", str(path)),
        )

    def _warn(self, message: str, *, once: tuple[str, str]) -> None:
        """Warn once per process per (what, where): NOTE [ One warning per problem ]."""
        with _WARNED_LOCK:
            if once in _WARNED:
                return
            _WARNED.add(once)
        warnings.warn(message, CacheWarning, stacklevel=4)


# NOTE [ One warning per problem ]
# A cache problem is reported once per process, whichever BucketCache object meets it: a
# sampler built per epoch, or per rank thread, creates many objects over the same directory, and
# a per-object memory (or the warnings module's, defeated by varying text such as a temporary
# file's random name) would repeat it. Problems are keyed by what they are and where: the
# directory (unusable, eviction), the entry path (foreign file, store failure) or the message
# naming the entry (unusable contents).
_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _is_joint(hist: Any) -> bool:
    """A joint histogram (:class:`~bucketloader.strategies.joint.JointHistogram`), by shape:
    the cache does not import the strategies."""
    return (
        hasattr(hist, "rows")
        and hasattr(hist, "counts")
        and callable(getattr(hist, "digest", None))
    )


def _exists(path: Path) -> bool:
    """Whether something is at ``path`` (a search of its directory, no read of it)."""
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


def _dir_id(directory: Path) -> str:
    return os.path.abspath(directory)
