"""The one bounded reader and atomic writer of cache files (BucketCache and CompileCache).

NOTE [ Reading a cache file ]
A cache directory is shared (runs, users, ranks on one filesystem), so whatever sits at an entry
path is untrusted input. :func:`read_bytes` opens it without blocking (``O_NONBLOCK``: a FIFO
would hang a plain ``open``) and without following a symbolic link (``O_NOFOLLOW``: a link to
``/dev/zero`` would read without end), accepts only a regular file, and reads at most
``max_bytes`` (bounded even if the file grows while it is read). :func:`read_json` parses it
with :func:`json.loads` only (never pickle), and turns a nesting bomb (``[[[[...``), invalid
UTF-8 or an integer past Python's digit limit into one ``ValueError``. Something that is not a
regular file raises :class:`NotAFile`: the caller leaves it alone (never read, replaced or
deleted) and works uncached.

NOTE [ Writing a cache file ]
:func:`write_atomic` writes a temporary file in the entry's own directory, opened with
``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode ``0o666`` (the umask decides, so a shared cache stays
readable; ``tempfile.mkstemp`` would make every entry ``0o600``), flushes and fsyncs it, then
``os.replace``-s it over the entry: a reader sees a whole entry or none, and concurrent writers of
the same entry each replace it whole. The temporary file's name carries its writer
(``.tmp-<host>-<pid>-<random>.part``, the host naming the hostname, the kernel's boot id and the
PID namespace: machines cloned with one hostname are told apart), so the
next write in the directory (and a cache object's first lookup there, a hit included: both
caches) removes the leftovers of writers that died (``kill -9``) on this host at once, and
anyone's after :data:`STALE_TMP_SECONDS`; a live writer's file is never touched, nor any file
not named exactly so (a user's ``.tmp-notes.part`` stays). (The age is
the file's mtime against this machine's clock; on a shared filesystem the server may set the
mtime, so a client clock more than that ahead of it would take a file being written for stale:
that writer's rename then fails and its cache warns and works uncached, no entry is damaged.)
An entry path that holds something other than a regular file raises :class:`NotAFile` before
anything is written.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "entry.json"
    >>> write_atomic(path, b'{"a": [1, 2]}')
    >>> read_json(path, max_bytes=1024)
    {'a': [1, 2]}
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "STALE_TMP_SECONDS",
    "NotAFile",
    "clean_temps",
    "file_kind",
    "folder_blocker",
    "is_regular_or_missing",
    "os_reason",
    "read_bytes",
    "read_json",
    "write_atomic",
]

#: Temporary files older than this are leftovers whoever wrote them (another host's included).
STALE_TMP_SECONDS = 3600.0
TEMP_PREFIX, TEMP_SUFFIX = ".tmp-", ".part"
#: The exact name :func:`create_temp` gives (host, PID, random): only such files are ever
#: removed, so a file of the user's that merely starts ``.tmp-`` and ends ``.part`` is kept.
_TEMP_NAME = re.compile(
    re.escape(TEMP_PREFIX) + r"([0-9a-f]{8})-([0-9]+)-[0-9a-f]{16}" + re.escape(TEMP_SUFFIX)
)
#: Attempts at a fresh temporary-file name before giving up (collisions are astronomically rare).
_TEMP_ATTEMPTS = 16

#: Reading: never block, never follow a symbolic link at the path.
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
#: Writing a temporary file: a new file only (a planted link or FIFO is refused).
_WRITE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


class NotAFile(Exception):
    """The path holds something we did not write (a FIFO, a directory, a symbolic link, a
    device): it is never read, replaced or deleted."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes`` (NOTE [ Reading a cache
    file ]).

    Raises:
        FileNotFoundError / NotADirectoryError: nothing there (a miss).
        NotAFile: something other than a regular file (symbolic links are not followed).
        ValueError: empty, or larger than ``max_bytes``.
        OSError: it cannot be read (``PermissionError`` included).
    """
    if not hasattr(os, "O_NOFOLLOW") and os.path.islink(path):  # pragma: no cover - Windows
        raise NotAFile("a symbolic link")
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        raise
    except OSError as exc:  # ELOOP: a symbolic link (O_NOFOLLOW); ENXIO: a socket; ...
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            raise exc from None
        if not stat.S_ISREG(mode):
            raise NotAFile(file_kind(mode)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(file_kind(st.st_mode))
        if st.st_size > max_bytes:
            raise ValueError(f"larger than {max_bytes} bytes")
        chunks, size = [], 0
        while size <= max_bytes:  # bounded even if the file grows while we read
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    if not data:
        raise ValueError("empty file")
    return data


def parse_json(data: bytes) -> Any:
    """``json.loads`` of untrusted bytes; every way it can fail is one ``ValueError``."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise ValueError(f"not valid JSON: {exc}") from None


def read_json(path: str | os.PathLike[str], *, max_bytes: int) -> Any:
    """:func:`read_bytes` parsed as JSON (never pickle); raises as it does, and ``ValueError``
    for contents that are not one JSON document."""
    return parse_json(read_bytes(path, max_bytes=max_bytes))


def is_regular_or_missing(path: str | os.PathLike[str]) -> tuple[bool, str]:
    """``(True, "")`` if ``path`` is a regular file or does not exist (we may replace it), else
    ``(False, what it is)``; symbolic links are not followed."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return True, ""
    return (True, "") if stat.S_ISREG(mode) else (False, file_kind(mode))


def folder_blocker(directory: Path) -> OSError | None:
    """Why ``directory`` can never be a folder, or ``None``: it is, or lies under, something
    that exists and is not a folder (a file). A link to nothing or an unreadable parent is left
    to the writer, whose error says why."""
    try:
        probe = next((p for p in (directory, *directory.parents) if p.exists()), None)
        if probe is None or probe.is_dir():
            return None
        what = "a file" if probe.is_file() else "not a folder"
    except OSError:
        return None
    where = "it is" if probe == directory else f"{str(probe)!r} is"
    return NotADirectoryError(errno.ENOTDIR, f"{where} {what}", str(directory))


def os_reason(exc: OSError) -> str:
    """An OS error for a message, without its file name (which may be a random temporary name;
    the message names the path itself).

    Example:
        >>> os_reason(folder_blocker(Path(__file__)))
        'it is a file'
    """
    return exc.strerror or str(exc) or type(exc).__name__


#: The kernel's random id of this boot (Linux): two machines never share it, containers on one
#: kernel do (their PID namespaces tell them apart).
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _boot_id() -> str:
    """This kernel's boot id, or ``""`` where there is none to read (not Linux)."""
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read(64).strip()
    except (OSError, ValueError):
        return ""


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """This machine, boot and PID namespace: the PIDs a writer's name can be checked against.
    The hostname alone is not enough: cloned machines share one (``localhost``), and the
    initial PID namespace has the same inode on every Linux kernel, so a file of a live
    writer on another such machine would look like this machine's dead writer's; the boot id
    tells them apart."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    me = f"{socket.gethostname()}/{_boot_id()}/{namespace}"
    return hashlib.sha256(me.encode()).hexdigest()[:8]


def _alive(pid: int) -> bool:
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) terminates there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


def clean_temps(directory: str | os.PathLike[str], *, max_age: float = STALE_TMP_SECONDS) -> int:
    """Remove the temporary files of dead writers in ``directory`` (NOTE [ Writing a cache
    file ]): those of a process of this host that no longer runs, and anyone's older than
    ``max_age`` seconds; only files named exactly as :func:`create_temp` names them. Best
    effort; returns how many were removed."""
    now, host, removed = time.time(), _host(), 0
    try:
        with os.scandir(directory) as it:
            entries = [(e, m) for e in it if (m := _TEMP_NAME.fullmatch(e.name)) is not None]
    except OSError:
        return 0
    for e, name in entries:
        try:
            st = e.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue  # never ours
            writer, pid = name.group(1), int(name.group(2))
            dead = writer == host and pid != os.getpid() and not _alive(pid)
            if dead or now - st.st_mtime > max_age:
                os.unlink(e.path)
                removed += 1
        except OSError:
            continue
    return removed


def create_temp(directory: Path) -> tuple[int, Path]:
    """A new temporary file in ``directory`` named after this writer (:data:`_TEMP_NAME`),
    opened for writing."""
    stem = f"{TEMP_PREFIX}{_host()}-{os.getpid()}-"
    for _ in range(_TEMP_ATTEMPTS):
        tmp = directory / f"{stem}{secrets.token_hex(8)}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, _WRITE_FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {directory}")


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int | None = None,
    clean: bool = True,
    replace: bool = True,
) -> None:
    """Write ``data`` to ``path`` all or nothing (NOTE [ Writing a cache file ]).

    Args:
        path: the entry; its directory must exist.
        data: the whole contents.
        mode: permissions to set on the file (``None``: ``0o666`` less the umask).
        clean: first remove dead writers' temporary files from the directory.
        replace: replace an entry already at ``path``; ``False``: keep it and raise
            ``FileExistsError`` (the whole file is linked in, which never replaces; on a
            filesystem without hard links, an entry that appears between the check and the
            rename is still replaced).

    Raises:
        NotAFile: ``path`` holds something other than a regular file (left alone).
        FileExistsError: ``replace=False`` and ``path`` holds an entry (left alone).
        OSError: the directory cannot take the file (nothing is left behind).
    """
    path = Path(path)
    ok, what = is_regular_or_missing(path)
    if not ok:
        raise NotAFile(what)
    if clean:
        clean_temps(path.parent)
    fd, tmp = create_temp(path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)  # atomic, and never over an existing entry
        except FileExistsError:
            raise
        except OSError:  # no hard links here: replace, unless an entry is there now
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, "an entry is stored", str(path)) from None
            os.replace(tmp, path)
            return
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.unlink(missing_ok=True)  # (linked: the entry keeps the file)


def write_output(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a user's output file (a report's ``--json``, a plot) all or nothing where it can
    be (:func:`write_atomic`; a link: its target is replaced), keeping what the file was to its
    user (NOTE [ Replacing a user's output ]).

    Raises:
        NotAFile: ``path`` is a directory (left alone).
        OSError: the file cannot be written (a regular file there is left as it was).
    """
    try:
        st = os.stat(path)  # (links followed: their target is the file written)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise NotAFile(file_kind(st.st_mode))
    if st is not None and (not stat.S_ISREG(st.st_mode) or _a_stream(path)):
        with open(path, "wb") as f:
            f.write(data)
        return
    target = Path(path).resolve()
    try:
        write_atomic(
            target, data, mode=None if st is None else stat.S_IMODE(st.st_mode), clean=False
        )
    except PermissionError:
        if st is None or not os.access(target, os.W_OK):
            raise
        with open(target, "wb") as f:  # (a file it may write in a folder it may not)
            f.write(data)


def _a_stream(path: str | os.PathLike[str]) -> bool:
    """``path`` names a process's open file, not a file (``/dev/stdout``, ``/dev/fd/3``,
    ``/proc/self/fd/1``): replacing its target (``> out.txt``) would leave the output in a file
    the process no longer writes to."""
    return os.path.abspath(path).startswith(("/dev/", "/proc/"))


# NOTE [ Replacing a user's output ]
# ``write_text`` / ``savefig`` wrote into the file the user named; replacing it whole (so that a
# full disk leaves the previous one as it was, session 21) must not refuse or change what that
# write did (s21-rev): ``--json /dev/stdout`` (or /dev/null, or a shell's ``>(jq ...)``) printed
# the JSON and is now streamed into the device or pipe as before (there was nothing to keep
# whole; resolved, /dev/stdout named a missing 'pipe:[...]' and the command failed, and under
# ``> out.txt`` the file was replaced, the text printed after it lost); a file
# kept private (0600) stays so (a new temporary file took 0666 less the umask: 0644, readable
# by every user); and a file the user may write in a folder where they may not create one (no
# temporary file there) is written in place, as before, instead of refused.
