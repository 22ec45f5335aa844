"""Arrow types as bucketloader measures them, shared by the engines and the datasets helpers.

pyarrow is an optional package: it is imported inside the functions, never when this module is.
The Parquet files a path names are listed here too, once, for the engines and the streams.

NOTE [ Numbers written as text ]
A string column is measured in characters: the text's length. A column of lengths stored as text
(a CSV read with every column a string, ``df.astype(str)`` before ``to_parquet``, a JSON field
quoted) is a string column too, so ``"120"`` was measured as 3, on every engine, with no error
(s32-user: a Parquet column of "3", "120", "5" gave the histogram {1: 2, 3: 1}). Real text is
never numbers alone, so a scan whose every non-null value of a string column is a number written
as text (:data:`NUMBER_TEXT`: digits, a sign, a decimal part, spaces around) is refused, naming
the column, a few of its values and how to read them as integers. One value that is not a
number anywhere in the scan (a word, an empty string) settles it as text. The values of a batch
are matched only while its strings are short (at most :data:`NUMBER_TEXT_LONGEST` characters):
the local scan stops looking once a batch settles it, each Ray block looks at its own (a bit per
column, ANDed on the driver), Spark runs one more job (``limit(1)`` of a value that is not a
number) only when the column's longest text is that short. ``bucketloader.hf.lengths`` refuses
such a column too (it reads the whole column: ``dataset.cast_column`` to an integer ``Value`` is
the fix).

The paths that measure a row at a time make the same decision, over the same whole column,
before they measure any row (s33): a block or a batch sees itself alone, and real text can fill
one with digits (a column of postcodes sorted by value), so no row, block or batch is refused by
its own values. The column's type is read from the schema (no row read), and only a text column
is looked at (:func:`numbers_throughout`, or Spark's job), until a value that is not a number
settles it: for real text, in the first batch. ``ray_bucket_ids`` and ``spark_bucket_ids`` look
when called (lazy otherwise), and a stream (``BucketIterable``, ``PackIterable``) when built,
where its ``length_fn`` is a key and its source is Arrow-backed (``ArrowRows``, a
``datasets.Dataset``): each reads only that column. A stream over any other source sees one
sample at a time, and is not checked. Where no key is named, a dict sample is measured by its
``"length"`` entry, the length itself: text there is refused by its type, sample by sample
(NOTE [ The length of a sample ] in :mod:`bucketloader._samples`), as ``hf.lengths`` refuses
a string ``"length"`` column when no column is named.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from typing import Any

#: The last resort a type error names where the engine takes ``length_fn=`` (Ray), and where it
#: does not (a Parquet scan, the command line, which rewrites the first into the second).
WITH_LENGTH_FN = "pass length_fn="
WITHOUT_LENGTH_FN = "write each row's length to an integer column and measure that"

#: A number written as text (NOTE [ Numbers written as text ]), in the syntax Arrow's RE2 and
#: Java's regular expressions share.
NUMBER_TEXT = r"^\s*[-+]?[0-9]+(\.[0-9]+)?\s*$"
#: Longer text is not looked at: no length below 2**62 takes more than 19 digits.
NUMBER_TEXT_LONGEST = 32


def nested_field(name: str, structs: Sequence[str], fix: str) -> str:
    """The end of a missing-column error where ``name`` is a path into a struct column
    (``'meta.n'``, where ``structs``, the struct columns, hold ``'meta'``): columns are matched
    by name, not by path, so the error says so and gives the engine's ``fix``; ``""`` for any
    other name.

    Example:
        >>> nested_field("meta.n", ["meta", "ids"], "FIX")
        "; 'meta.n' is a field of the struct column 'meta', and a column is named, not a path: FIX"
        >>> nested_field("n", ["meta"], "FIX")
        ''
    """
    head = name.split(".", 1)[0]
    if "." not in name or head not in structs:
        return ""
    return (
        f"; {name!r} is a field of the struct column {head!r}, and a column is named, not a "
        f"path: {fix}"
    )


def is_list(t: Any) -> bool:
    """Does the Arrow type ``t`` hold lists (plain, large, fixed-size or a list view), whose
    length is the number of their values?

    Example:
        >>> import pyarrow as pa
        >>> is_list(pa.large_list(pa.int32())), is_list(pa.string())
        (True, False)
    """
    return _is_any(
        t, "is_list", "is_large_list", "is_fixed_size_list", "is_list_view", "is_large_list_view"
    )


def nesting(t: Any) -> tuple[int, Any]:
    """``(depth, leaf type)`` of an Arrow type: how many list levels (fixed-size lists and list
    views too) wrap which values.

    Example:
        >>> import pyarrow as pa
        >>> nesting(pa.list_(pa.list_(pa.float32())))
        (2, DataType(float))
    """
    depth = 0
    while is_list(t):
        t, depth = t.value_type, depth + 1
    return depth, t


def is_text(t: Any) -> bool:
    """Does the Arrow type ``t`` hold strings (plain, large or a string view): text, where a
    column of token ids or samples was expected?

    Example:
        >>> import pyarrow as pa
        >>> is_text(pa.large_string()), is_text(pa.list_(pa.int64()))
        (True, False)
    """
    return _is_any(t, "is_string", "is_large_string", "is_string_view")


def is_bytes(t: Any) -> bool:
    """Does the Arrow type ``t`` hold binary values (plain, large or a binary view)?

    Example:
        >>> import pyarrow as pa
        >>> is_bytes(pa.large_binary()), is_bytes(pa.string())
        (True, False)
    """
    return _is_any(t, "is_binary", "is_large_binary", "is_binary_view")


def _is_any(t: Any, *tests: str) -> bool:
    """Whether any of ``pyarrow.types``' ``tests`` (by name) holds for ``t``; a test this
    pyarrow lacks (the views came in pyarrow 16) does not."""
    import pyarrow as pa

    return any(bool(getattr(pa.types, name, lambda _: False)(t)) for name in tests)


def text_lengths(arr: Any) -> Any:
    """The characters of each string (:func:`is_text`), or the bytes of each binary value
    (:func:`is_bytes`), of an Arrow array or chunked array, nulls kept: the one measure of text
    columns. A view is read as a large string or binary first (pyarrow's ``utf8_length`` and
    ``binary_length`` have no kernel for views, up to pyarrow 26 at least).

    Example:
        >>> import pyarrow as pa
        >>> text_lengths(pa.array(["ab", "été", None])).to_pylist()
        [2, 3, None]
        >>> text_lengths(pa.array([b"ab", b"\\xc3\\xa9"], pa.large_binary())).to_pylist()
        [2, 2]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if is_text(t):
        plain = _is_any(t, "is_string", "is_large_string")
        return pc.utf8_length(arr if plain else arr.cast(pa.large_string()))
    if is_bytes(t):
        plain = _is_any(t, "is_binary", "is_large_binary")
        return pc.binary_length(arr if plain else arr.cast(pa.large_binary()))
    raise TypeError(f"text_lengths measures string or binary arrays, got type {t}")


# NOTE [ Which files a directory of Parquet shards holds ]
# A directory is read as the Parquet files under it, recursively (hive partitions such as
# ``year=2024/part-0.parquet`` included), by these rules:
# * a file or directory whose name starts with ``_`` or ``.`` is skipped, at any depth below the
#   directory given: ``pyarrow.dataset`` and Spark skip the same (``_SUCCESS``, ``_metadata``,
#   ``_temporary/``, ``.crc`` files, ``.cache/`` of a Hub download);
# * of the rest, the names ending in ``.parquet`` (any case) are read, as ``datasets`` keeps a
#   directory's files of one extension: a ``README.md`` beside the shards (every Hub dataset has
#   one), a ``notes.txt`` or an empty file is not data (``pyarrow.dataset`` and Spark fail on it),
#   and a Hub cache repo's ``blobs/<sha>`` are its ``snapshots/*/*.parquet`` again (read twice,
#   every row would count twice); ``bucketloader`` tells which files it skipped;
# * a Hugging Face Hub cache repo (a directory holding ``snapshots/`` beside ``blobs/`` or
#   ``refs/``, as ``datasets--org--name``) is read as one snapshot: its ``blobs/`` and ``refs/``
#   are never read (each blob is a snapshot's file again; refs name revisions), and of several
#   revisions in ``snapshots/`` only the one ``refs/main`` names is read (the others are told as
#   skipped: each holds a copy of the shards, and reading them all counted every row once per
#   revision). Where ``refs/main``'s snapshot holds no ``*.parquet`` name (``datasets`` read the
#   repo from its Parquet export: ``main`` holds the card alone, ``refs/refs/convert/parquet``
#   names the shards' revision), the one revision with such names that another ref names is
#   read. Several revisions and no ref settling which is an error naming the revisions and the
#   fix (pass the snapshot's folder);
# * where no name ends in ``.parquet``, the shards are named otherwise (Hive writes ``000000_0``,
#   Impala ``*.parq``; ``pyarrow.dataset``, Spark and ``parquet_histogram`` before this rule read
#   them): then every regular file that begins with the Parquet magic bytes is read (4 bytes of
#   each; a FIFO or a device is never opened) and the others are skipped and told.
# A glob or a file names its files explicitly: each must be Parquet (it begins with the magic
# bytes ``PAR1``, or ``PARE`` when the footer is encrypted), else one error names the file. A glob
# or a directory that yields no file is an error, never an empty histogram.

#: The first 4 bytes of a Parquet file (``PARE``: an encrypted footer).
PARQUET_MAGIC = (b"PAR1", b"PARE")
#: How many skipped files a note names before it counts the rest.
NAMED_SKIPS = 5


def parquet_files(source: str | os.PathLike[str]) -> list[str]:
    """The Parquet files a path names: itself, a directory's (recursively), or a glob's matches
    (NOTE [ Which files a directory of Parquet shards holds ]), sorted.

    Example:
        >>> parquet_files("/no/such/dir/*.parquet")
        Traceback (most recent call last):
        ...
        FileNotFoundError: no file matches the glob /no/such/dir/*.parquet: /no/such/dir does ...
    """
    return scan_parquet(source)[0]


def scan_parquet(source: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """:func:`parquet_files` and, for a directory, the other files it skipped (their paths,
    sorted), for a note; names starting with ``_`` or ``.`` are skipped without one, as
    ``pyarrow.dataset`` and Spark skip them.

    Example:
        >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq
        >>> d = tempfile.mkdtemp()
        >>> pq.write_table(pa.table({"ids": [[1]]}), f"{d}/a.parquet")
        >>> _ = open(f"{d}/README.md", "w").write("# my data")
        >>> files, skipped = scan_parquet(d)
        >>> [os.path.basename(f) for f in files], [os.path.basename(f) for f in skipped]
        (['a.parquet'], ['README.md'])
    """
    import glob

    text = os.fspath(source)
    if glob.has_magic(text):
        matched = glob.glob(text, recursive=True)
        files = sorted(f for f in matched if os.path.isfile(f))
        left = _unread_directories(matched, files)
        if left:
            # a glob names files: a directory it matches is not read, and where none of its
            # files matched too ('data/lang=*/', 'data/*' beside partition folders) its rows were
            # left out unsaid, or the error said that no file matched
            shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
            base = _glob_base(text)
            fix = (
                f"name the files ({os.path.join(text.rstrip('/' + os.sep), '*.parquet')})"
                if not files
                else f"name them all ({os.path.join(base, '**', '*.parquet')})"
            )
            raise FileNotFoundError(
                f"the glob {text} matches {len(left)} director{'y' if len(left) == 1 else 'ies'} "
                f"({shown}){' and no file' if not files else ''}; a glob names files and a "
                f"directory it matches is not read, so its rows would be left out: {fix}, or "
                f"pass the directory that holds them ({base})"
            )
        if not files:
            raise FileNotFoundError(f"no file matches the glob {text}{_glob_miss(text)}")
        for f in files:
            check_parquet(f, text)
        return files, []
    if os.path.isdir(text):
        files, skipped, hidden = _walk(text)
        if not files:
            saved = saved_dataset(text)
            raise FileNotFoundError(
                f"{text}: the directory holds no Parquet file{_others(skipped, hidden)}; "
                + (
                    saved
                    if saved
                    else "a directory is read as the Parquet files under it (*.parquet, or where "
                    "there is none, the files that begin with the Parquet magic bytes PAR1), "
                    "skipping names that start with _ or .: pass the shards' files or a glob "
                    "that names them"
                )
            )
        return files, skipped
    if os.path.isfile(text):
        check_parquet(text)
        return [text], []
    raise FileNotFoundError(f"{text}: no such file, directory or glob")


def _unread_directories(matched: list[str], files: list[str]) -> list[str]:
    """The directories of a glob's matches that hold none of its matched files but Parquet
    files of their own, by a directory's rule (their rows would not be read; ``data/**``
    matches every folder and its files too: none). An empty folder, one of logs, or a name a
    directory's read skips (``_temporary``, as Spark leaves it) loses no row: not counted
    (s19-review: ``data/**`` beside an empty folder, ``out/*`` beside ``logs/``, were refused)."""
    covered: set[str] = set()
    for f in files:
        d = os.path.dirname(os.path.abspath(f))
        while d not in covered:
            covered.add(d)
            d, up = os.path.dirname(d), d
            if d == up:
                break
    return sorted(
        d
        for d in matched
        if os.path.isdir(d)
        and os.path.abspath(d) not in covered
        and not os.path.basename(os.path.normpath(d)).startswith(("_", "."))
        and _walk(d)[0]
    )


def _glob_miss(pattern: str) -> str:
    """What the directory a glob that matched nothing holds, and the way on (s34-user2: the
    error gave none; a suffix typo and a missing directory want different fixes).

    Example:
        >>> _glob_miss("/no/such/dir/*.parquet")
        ': /no/such/dir does not exist; check the path'
    """
    base = _glob_base(pattern)
    if not os.path.isdir(base):
        return f": {base} does not exist; check the path"
    names = sorted(e.name for e in os.scandir(base) if e.is_file() and e.name[:1] not in "._")
    shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    held = f"holds {len(names)} file{'s' if len(names) != 1 else ''}" if names else "holds no file"
    return (
        f": {base} {held}, none matching{f' ({shown})' if names else ''}; check the pattern "
        f"against those names, or pass the directory itself ({base}) to read every Parquet "
        "file under it"
    )


def _glob_base(pattern: str) -> str:
    """The directory a glob starts from: its components before the first with a wildcard."""
    import glob

    parts = pattern.replace(os.sep, "/").split("/")
    fixed = list(itertools.takewhile(lambda p: not glob.has_magic(p), parts))
    return "/".join(fixed) or "."


def skipped_note(source: str | os.PathLike[str], files: list[str], skipped: list[str]) -> str:
    """The note saying which files of the directory ``source`` were not read as Parquet.

    Example:
        >>> skipped_note("d", ["d/a.parquet"], ["d/README.md"])
        'd: read 1 Parquet file; skipped 1 other file (README.md)'
    """
    root = os.fspath(source)
    names = [
        os.path.relpath(f, root) + ("/" if f.endswith(os.sep) else "")  # (a folder: a revision)
        for f in skipped[:NAMED_SKIPS]
    ]
    more = f", and {len(skipped) - NAMED_SKIPS:,} more" if len(skipped) > NAMED_SKIPS else ""
    many = "s" if len(files) != 1 else ""
    folders = any(f.endswith(os.sep) for f in skipped)
    other = (
        ("entries" if folders else "files") if len(skipped) != 1 else "entry" if folders else "file"
    )
    return (
        f"{root}: read {len(files):,} Parquet file{many}; skipped {len(skipped):,} other "
        f"{other} ({', '.join(names)}{more})"
    )


def check_parquet(path: str, glob: str | None = None) -> None:
    """Refuse a file that is not Parquet (by its first 4 bytes) with one clear error naming it
    (and the ``glob`` that matched it) and the fix.

    Example:
        >>> import tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "lengths.txt")
        >>> _ = open(p, "w").write("12\\n7\\n")
        >>> try:
        ...     check_parquet(p, "data/*")
        ... except ValueError as exc:
        ...     print(str(exc).split("; ")[1])
        a glob names Parquet files only: narrow it to them, e.g. 'data/*.parquet'
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise OSError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if head in PARQUET_MAGIC:
        return
    what = path if glob is None else f"the glob {glob} matched {path}, which"
    saved = saved_dataset(os.path.dirname(path) or ".")
    if saved:
        fix = saved
    elif glob is not None:
        fix = "a glob names Parquet files only: narrow it to them, e.g. 'data/*.parquet'"
        from glob import has_magic

        top = os.path.dirname(glob)
        if top and not has_magic(top) and os.path.isdir(top):  # (out/* over a Spark output)
            fix += f", or pass the directory {top} itself, which skips files that are not Parquet"
    elif path.lower().endswith(".parquet"):
        fix = "it is truncated or not Parquet at all: write it again, or move it away"
    else:
        fix = "pass Parquet files (a directory of shards, or a glob such as 'data/*.parquet')"
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".txt", ".npy", ".csv", ".tsv", ".jsonl"):
        fix += f"; a {suffix} file of lengths is read on its own, not as a Parquet shard"
    raise ValueError(
        f"{what} is not a Parquet file (it begins with {head!r}, not with the Parquet magic "
        f"bytes PAR1); {fix}"
    )


def saved_dataset(directory: str) -> str:
    """How to read ``directory`` where ``datasets`` wrote it with ``save_to_disk`` (Arrow files
    beside its ``state.json``, or a ``DatasetDict``'s ``dataset_dict.json`` over its splits),
    else ``""``. (s32-user: such a directory was told to pass "the shards' files or a glob", and
    its ``.arrow`` files, passed so, to "pass the directory itself": a loop, neither of them
    Parquet.)

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> saved_dataset(d)
        ''
        >>> _ = open(os.path.join(d, "state.json"), "w").write("{}")
        >>> saved_dataset(d).startswith("it was written by datasets' save_to_disk")
        True
    """
    import json

    if os.path.isfile(os.path.join(directory, "state.json")):
        load = f"datasets.load_from_disk({directory!r})"
    elif os.path.isfile(os.path.join(directory, "dataset_dict.json")):
        try:
            with open(os.path.join(directory, "dataset_dict.json")) as fh:
                splits = [str(s) for s in json.load(fh)["splits"]]
        except (OSError, ValueError, KeyError, TypeError):
            splits = []
        first = splits[0] if splits else "train"
        load = f"datasets.load_from_disk({directory!r})[{first!r}]" + (
            f" (its splits: {', '.join(splits)})" if splits else ""
        )
    else:
        return ""
    return (
        "it was written by datasets' save_to_disk (Arrow files, not Parquet): load it, "
        f"{load}, and pass that Dataset instead (parquet_histogram, bucketloader.hf.lengths and "
        "the streams read it)"
    )


def _walk(root: str) -> tuple[list[str], list[str], list[str]]:
    """Every Parquet file under ``root`` (the ``*.parquet`` ones; where there is none, the files
    that begin with the magic bytes), every other file, and every entry whose name starts with
    ``_`` or ``.`` (a directory once, with a trailing separator, its files unread) (NOTE [ Which
    files a directory of Parquet shards holds ])."""
    files: list[str] = []
    others: list[str] = []
    hidden: list[str] = []
    for top, dirs, names in os.walk(root):
        hidden += [os.path.join(top, d) + os.sep for d in dirs if d.startswith(("_", "."))]
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        if "snapshots" in dirs and _is_hub_repo(top):  # (each blob is a snapshot's file
            for store in ("blobs", "refs"):  # again; refs name revisions)
                if store in dirs:
                    dirs.remove(store)
                    hidden.append(os.path.join(top, store) + os.sep)
        if len(dirs) > 1 and os.path.basename(top) == "snapshots":
            repo = os.path.dirname(top)
            if _is_hub_repo(repo):  # one revision of a Hub cache repo
                keep = _main_revision(repo, dirs)
                others += [os.path.join(top, d) + os.sep for d in dirs if d != keep]
                dirs[:] = [keep]
        for name in names:
            path = os.path.join(top, name)
            if name.startswith(("_", ".")):
                hidden.append(path)
            elif name.lower().endswith(".parquet"):
                files.append(path)
            else:
                others.append(path)
    if not files:  # shards named otherwise (Hive's 000000_0, Impala's *.parq)
        sniffed = {f: _begins_as_parquet(f) for f in others}
        files = [f for f, ok in sniffed.items() if ok]
        others = [f for f, ok in sniffed.items() if not ok]
    return sorted(files), sorted(others), sorted(hidden)


def _is_hub_repo(path: str) -> bool:
    """Whether ``path`` is a Hugging Face Hub cache repo (``snapshots/`` beside ``blobs/`` or
    ``refs/``)."""
    join = os.path.join
    isdir = os.path.isdir
    return isdir(join(path, "snapshots")) and (
        isdir(join(path, "blobs")) or isdir(join(path, "refs"))
    )


def _main_revision(repo: str, revisions: list[str]) -> str:
    """The revision of the Hub cache ``repo`` to read, one of ``revisions`` (its snapshots): the
    one ``refs/main`` names where its snapshot holds a ``*.parquet`` file; else the one revision
    with such a file that a ref names (``datasets`` reads some repos from their Parquet export,
    ``refs/refs/convert/parquet``, beside a ``main`` snapshot of the card alone); else
    ``refs/main``'s; else one clear error naming them (NOTE [ Which files a directory of
    Parquet shards holds ])."""
    refs: dict[str, str] = {}
    for top, _, names in os.walk(os.path.join(repo, "refs")):
        for name in names:
            path = os.path.join(top, name)
            try:
                with open(path, encoding="utf-8") as fh:
                    refs[os.path.relpath(path, os.path.join(repo, "refs"))] = fh.read().strip()
            except (OSError, UnicodeDecodeError):
                continue
    main = refs.get("main")
    named = sorted({r for r in refs.values() if r in revisions})
    sharded = [r for r in named if _holds_parquet(os.path.join(repo, "snapshots", r))]
    if main in sharded or (main in revisions and not sharded):
        return main  # type: ignore[return-value]
    if len(sharded) == 1:
        return sharded[0]
    said = "has no refs/main" if main is None else f"its refs/main names {main!r}, not one of them"
    if len(sharded) > 1:
        said = f"refs name {len(sharded)} of them that hold Parquet files, not main's"
    first = os.path.join(repo, "snapshots", revisions[0])
    raise ValueError(
        f"{repo} is a Hugging Face Hub cache holding {len(revisions)} snapshot revisions "
        f"({_names(revisions)}), each a copy of the shards, and {said}: pass the snapshot to "
        f"read, e.g. {first}"
    )


def _holds_parquet(folder: str) -> bool:
    """Whether a name under ``folder`` ends in ``.parquet`` (a snapshot's shards)."""
    return any(n.lower().endswith(".parquet") for _, _, names in os.walk(folder) for n in names)


def _begins_as_parquet(path: str) -> bool:
    """Whether the regular file at ``path`` begins with the Parquet magic bytes (unreadable, or
    not a regular file, such as a FIFO whose open would block: no)."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(4) in PARQUET_MAGIC
    except OSError:
        return False


def _others(others: list[str], hidden: list[str]) -> str:
    """What a directory of shards with no Parquet file holds instead, for its error."""
    if not others and not hidden:
        return " (it is empty)"
    out = ""
    if others:
        out += f"; it holds {len(others):,} other file{'s' if len(others) != 1 else ''}: "
        out += _names(others)
    if hidden:
        out += (
            f"; {len(hidden):,} entr{'ies' if len(hidden) != 1 else 'y'} whose names start with "
            f"_ or . (skipped, as pyarrow and Spark skip them): {_names(hidden)}"
        )
    return out


def _names(paths: list[str]) -> str:
    shown = ", ".join(os.path.basename(f.rstrip(os.sep)) for f in paths[:NAMED_SKIPS])
    return shown + (", ..." if len(paths) > NAMED_SKIPS else "")


def numbers_as_text(arr: Any) -> list[str] | None:
    """A few values of a text array (or chunked array) whose every non-null value is a number
    written as text (NOTE [ Numbers written as text ]); ``[]`` where it has no such value to
    judge (no non-null value, or an array of type null); ``None`` otherwise (a value that is
    not a number, or a column that is not text).

    Example:
        >>> import pyarrow as pa
        >>> numbers_as_text(pa.array(["3", " 120", None])), numbers_as_text(pa.array(["3", "a"]))
        (['3', ' 120'], None)
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_null(t):
        return []
    if pa.types.is_dictionary(t):
        if not is_text(t.value_type):
            return None
        arr = arr.dictionary_decode() if isinstance(arr, pa.Array) else pc.cast(arr, t.value_type)
    elif not is_text(t):
        return None
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())  # (a string view: no kernels for it, not even filter)
    longest = pc.max(pc.utf8_length(arr)).as_py()  # (nulls skipped; before any copy of text)
    if longest is None:
        return []
    if longest > NUMBER_TEXT_LONGEST:
        return None
    values = arr.drop_null()
    if not pc.all(pc.match_substring_regex(values, NUMBER_TEXT)).as_py():
        return None
    return [str(v) for v in values.slice(0, 3).to_pylist()]


def is_text_like(t: Any) -> bool:
    """Does the Arrow type ``t`` hold text (:func:`is_text`), plainly or dictionary-encoded: a
    column :func:`numbers_as_text` judges, known from a schema before any row is read?

    Example:
        >>> import pyarrow as pa
        >>> is_text_like(pa.dictionary(pa.int8(), pa.string())), is_text_like(pa.int64())
        (True, False)
    """
    import pyarrow as pa

    return is_text(t) or (pa.types.is_dictionary(t) and is_text(t.value_type))


def numbers_throughout(arrays: Iterable[Any]) -> list[str] | None:
    """A few values of a column read as ``arrays`` (its batches, blocks or chunks, in turn)
    where every non-null value of every one is a number written as text; ``None`` once a batch
    settles it as text (the rest is never read: for real text, the first), and where no batch
    holds a value to judge. The whole-column decision of NOTE [ Numbers written as text ], for
    the paths that read the column just to make it (streams over Arrow, Ray's bucket ids).

    Example:
        >>> import pyarrow as pa
        >>> numbers_throughout([pa.array(["3", None]), pa.array(["120"])])
        ['3']
        >>> numbers_throughout([pa.array(["3"]), pa.array(["120 tokens"])]) is None
        True
    """
    examples: list[str] = []
    for arr in arrays:
        found = numbers_as_text(arr)
        if found is None:
            return None
        examples = examples or found
    return examples or None


def indices_of(dataset: Any) -> Any:
    """A ``datasets.Dataset``'s indices mapping as ``int64`` numpy (its row ``i`` is physical row
    ``indices[i]``: NOTE [ The rows a dataset holds ]), ``None`` where it has none."""
    import numpy as np

    mapping = getattr(dataset, "_indices", None)
    if mapping is None:
        return None
    mapping = getattr(mapping, "table", mapping)
    return mapping.column(0).to_numpy().astype(np.int64, copy=False)


#: Rows of an indices mapping judged at a time (NOTE [ The rows a dataset holds ]): their values
#: are taken only where each is 4 x :data:`NUMBER_TEXT_LONGEST` bytes or less.
HELD_BATCH = 65_536


def held_numbers(arr: Any, indices: Any = None) -> list[str] | None:
    """:func:`numbers_throughout` over the rows of the column ``arr`` (an Arrow array or
    chunked array) that a dataset holds: ``indices``, its indices mapping (row ``i`` is
    physical row ``indices[i]``), or every row where ``None``.

    NOTE [ The rows a dataset holds ]
    A ``datasets.Dataset`` after ``filter``, ``select``, ``shuffle`` or ``train_test_split``
    keeps its whole Arrow table and adds an indices mapping: its rows are the mapping's, not the
    table's. Judged on the table, a column of lengths written as text whose filter dropped the
    one row of real text (``dataset.filter(lambda r: r['n'].isdigit())``) was measured in
    characters, "120" as 3, silently; a table of numbers was refused for a split that holds none
    of them; and a negative or NaN length that a filter dropped (the fix such an error names)
    was refused all the same (s34). ``hf.lengths`` and the streams over a ``datasets.Dataset``
    judge and measure the rows held instead, without copying the table, a batch of rows at a
    time (1,024, doubling up to :data:`HELD_BATCH`), in the mapping's order: a batch holding a
    row longer than any number (its bytes, from the string offsets alone, above 4 x
    :data:`NUMBER_TEXT_LONGEST`) settles the column as text, no value read; else its rows (128
    bytes at most each) are taken and judged, until a batch settles it (for real text, the
    first). Cost: ``benchmarks/hf_filtered.py``.

    Example:
        >>> import pyarrow as pa
        >>> column = pa.chunked_array([["120", "3"], ["a word", "45"]])
        >>> held_numbers(column) is None, held_numbers(column, [3, 0])
        (True, ['120', '45'])
        >>> held_numbers(pa.chunked_array([["a word " * 20, "120", "3"]]).slice(1), [1, 0])
        ['120', '3']
    """
    import numpy as np
    import pyarrow as pa

    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    if indices is None:
        return numbers_throughout(chunks)
    rows = np.asarray(indices, dtype=np.int64)
    sizes = None
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        import pyarrow.compute as pc

        sizes = pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    starts = np.cumsum([0, *(len(c) for c in chunks)])
    examples: list[str] = []
    at, size = 0, 1024  # (growing to HELD_BATCH: real text settles in the first, small)
    while at < rows.size:
        part, at, size = rows[at : at + size], at + size, min(2 * size, HELD_BATCH)
        if sizes is not None and int(sizes[part].max()) > 4 * NUMBER_TEXT_LONGEST:
            return None  # (a held row longer than any number: text, no value read)
        found = numbers_as_text(_take(chunks, starts, part))
        if found is None:
            return None
        examples = examples or found
    return examples or None


def _take(chunks: Sequence[Any], starts: Any, rows: Any) -> Any:
    """The values of ``rows`` (in physical order) of the column whose ``chunks`` begin at rows
    ``starts``, each taken from its own chunk: pyarrow's ``take`` of a chunked array took 16 ms
    for 1,024 rows of a 1,000-chunk column (a ``load_from_disk`` dataset's), these 1-2 ms."""
    import numpy as np
    import pyarrow as pa

    rows = np.sort(rows)
    which = np.searchsorted(starts, rows, side="right") - 1
    groups = np.split(np.arange(rows.size), np.flatnonzero(np.diff(which)) + 1)
    return pa.chunked_array(
        [chunks[which[g[0]]].take(pa.array(rows[g] - starts[which[g[0]]])) for g in groups],
        type=chunks[0].type,
    )


def numbers_as_text_error(column: str, examples: list[str], fix: str, chars: str) -> str:
    """The one error for a string column of numbers (NOTE [ Numbers written as text ]): ``fix``
    reads them as integers; ``chars`` measures the text in characters after all (a column of
    digits that is the text, measured by a length the check does not look at).

    Example:
        >>> print(numbers_as_text_error("n", ["3", "120"], "FIX", "CHARS"))  # doctest: +ELLIPSIS
        column 'n' is a string column ... ('3', '120', ...), ... (1, 3, ...), ...: FIX; ... CHARS
    """
    shown = ", ".join(repr(v) for v in examples)
    measured = ", ".join(str(len(v)) for v in examples)
    return (
        f"column {column!r} is a string column whose every value is a number ({shown}, ...), "
        f"and text is measured in characters ({measured}, ...), not read as a number: lengths "
        f"stored as text? Read them as integers: {fix}; or, where the digits are the text, "
        f"count its characters: {chars}"
    )
