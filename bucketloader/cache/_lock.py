"""An inter-process file lock (POSIX ``flock``, Windows ``msvcrt.locking``).

NOTE [ Why a lock file ]
Cache entries are written atomically (temporary file, then ``os.replace``), so readers and
writers never need a lock. Only eviction does: two processes pruning the same directory at once
would both count the same bytes and delete twice as much as needed. The lock file lives in the
cache directory and is never deleted (deleting a lock file that another process has open breaks
mutual exclusion).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt


class FileLock:
    """Exclusive lock on ``path``, held for the duration of a ``with`` block.

    Args:
        path: the lock file (created if missing).
        timeout: seconds to wait before raising ``TimeoutError``.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> with FileLock(os.path.join(d, ".lock")):
        ...     pass
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file in a shared directory: flock needs
            fd = os.open(self.path, os.O_RDONLY)  # no write access
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:  # pragma: no cover - Windows
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                self._fd = fd
                return
            except OSError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise TimeoutError(
                        f"could not lock {self.path} within {self.timeout} s; another process "
                        "holds it (delete the file if no bucketloader process is running)"
                    ) from None
                time.sleep(0.005)

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            else:  # pragma: no cover - Windows
                msvcrt.locking(self._fd, msvcrt.LK_UNLCK, 1)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
