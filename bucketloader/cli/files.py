"""Reading per-sample lengths from files, for the command line and the report.

Formats (by suffix): ``.txt`` (one length per line, or columns separated by tabs or spaces, as
``np.savetxt`` writes them, no header row; ``#`` starts a comment, as in ``np.loadtxt``, so
``np.savetxt``'s ``header=`` is skipped; ``column`` is a 0-based index), ``.npy`` (1-D, or 2-D
with a column index; never unpickled),
``.csv`` / ``.tsv`` (a header row; ``column`` is a name; a file written by ``np.savetxt`` with
``header=`` reads its names from the header's last line, after the ``# ``, and skips the ``# ``
lines of a ``footer=``), ``.jsonl`` (one object per line),
``.parquet``, and a directory written by ``datasets.Dataset.save_to_disk``. In the last four a
column may hold lengths (ints) or lists, whose lengths are taken. Every problem raises
:class:`LengthFileError` with the file, the line when there is one, and the fix.
"""

from __future__ import annotations

import csv
import decimal
import json
import re
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from bucketloader._arrow import is_text
from bucketloader._validation import MAX_LENGTH, as_lengths

#: The demo's default data, shipped in ``bucketloader/data``.
DEFAULT_DATA = "librispeech_train_clean_100_samples.txt"
SUFFIXES = (".txt", ".npy", ".csv", ".tsv", ".jsonl", ".parquet")


class LengthFileError(ValueError):
    """A lengths file that cannot be read as non-negative integer lengths."""


def default_lengths() -> np.ndarray:
    """LibriSpeech train-clean-100 utterance lengths in samples at 16 kHz (28,539; package data).

    Example:
        >>> x = default_lengths()
        >>> x.shape, int(x.min()), int(x.max())
        ((28539,), 22560, 392400)
    """
    text = resources.files("bucketloader").joinpath("data", DEFAULT_DATA).read_text()
    return _parse_text(text.splitlines(), DEFAULT_DATA, None, None)


def read_lengths(path: str | Path, column: str | int | None = None) -> np.ndarray:
    """Per-sample lengths in ``path`` as a 1-D ``int64`` array.

    Args:
        path: a file (format by suffix, see the module) or a ``save_to_disk`` directory.
        column: which column: a 0-based index for ``.txt`` / ``.npy``, a name otherwise. Needed
            whenever the file has more than one column.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "lengths.txt")
        >>> _ = open(p, "w").write("5\\t7\\n3\\t4\\n")
        >>> read_lengths(p, "1").tolist()
        [7, 4]
        >>> np.savetxt(p, [[5, 7], [3, 4]], fmt="%d")  # space-separated
        >>> read_lengths(p, 1).tolist()
        [7, 4]
    """
    p = Path(path)
    if not p.exists():
        raise LengthFileError(f"{p}: no such file or directory")
    if p.is_dir():
        return _read_saved_dataset(p, column)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise LengthFileError(
            f"{p}: unknown file type {suffix or '(none)'!r}; use one of {', '.join(SUFFIXES)} "
            "or a directory saved by datasets.Dataset.save_to_disk"
        )
    if suffix == ".npy":
        return _read_npy(p, column)
    if suffix == ".parquet":
        return _read_arrow(p, column)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a BOM (Excel's "CSV UTF-8") is not data
    except UnicodeDecodeError as exc:
        raise LengthFileError(f"{p}: not a UTF-8 text file ({exc.reason})") from None
    lines = text.splitlines()
    if suffix == ".txt":  # tabs or spaces; "#" starts a comment (np.savetxt's header=, as
        single = _one_per_line(lines) if str(column) in ("None", "0") and "#" not in text else None
        if single is not None:
            return single
        lines = [line.split("#", 1)[0] for line in lines]  # np.loadtxt reads them)
        return _parse_text(lines, str(p), column, None)
    if suffix == ".jsonl":
        return _read_jsonl(lines, str(p), column)
    return _read_csv(lines, str(p), column, "\t" if suffix == ".tsv" else ",")


#: A number as a header cell: np.savetxt(path, lengths) with its default fmt="%.18e" writes
#: 5.120000000000000000e+02, whose first length was read as the column's name (s19-review).
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _int_token(token: str, where: str) -> int:
    tok = token.strip()
    if not tok:  # (a missing value in a table, a null: "got ''" said neither; s28)
        raise LengthFileError(
            f"{where}: an empty field where a length belongs (a missing value); fill in that "
            "row's length or remove the row"
        )
    try:
        value = int(tok)
    except ValueError:
        try:  # exactly, as written: float() would round 9007199254740993.0 to ...992
            d = decimal.Decimal(tok)
        except decimal.InvalidOperation:
            raise LengthFileError(
                f"{where}: expected a non-negative integer, got {_short(tok)}"
            ) from None
        if d.is_nan():
            raise LengthFileError(f"{where}: expected a whole number, got {_short(tok)}") from None
        if d.is_infinite() or d.adjusted() > 19:
            raise LengthFileError(f"{where}: lengths must be < 2**62, got {_short(tok)}") from None
        if d != d.to_integral_value():
            raise LengthFileError(f"{where}: expected a whole number, got {_short(tok)}") from None
        value = int(d)
    if value < 0:
        raise LengthFileError(f"{where}: lengths must be non-negative, got {value}")
    if value > MAX_LENGTH:
        raise LengthFileError(
            f"{where}: lengths must be < 2**62 (the longest bucketloader supports), got {value}"
        )
    return value


def _short(token: str) -> str:
    return repr(token) if len(token) <= 40 else repr(token[:40]) + "..."


def _column_index(
    column: str | int | None, ncols: int, where: str, kind: str = "whitespace-separated columns"
) -> int:
    if column is None:
        if ncols == 1:
            return 0
        raise LengthFileError(  # (session 21: COCO's width and height, in a vision user's hands)
            f"{where} has {ncols} {kind}; choose one with --column 0..{ncols - 1} (the report "
            "covers one length per sample; lengths that are padded together, such as an image's "
            "width and height, are planned jointly in Python: BucketSampler({'height': ..., "
            "'width': ...}, max_shapes=K, size='prod'), docs/joint-shapes.md)"
        )
    try:
        idx = int(column)
    except (TypeError, ValueError):
        raise LengthFileError(
            f"{where}: column must be an index 0..{ncols - 1} for this file (it has no header), "
            f"got {column!r}"
        ) from None
    if not 0 <= idx < ncols:
        raise LengthFileError(
            f"{where}: column {idx} does not exist; the file has {ncols} column(s) (0..{ncols - 1})"
        )
    return idx


def _one_per_line(lines: list[str]) -> np.ndarray | None:
    """The lengths of a file of one integer per line and nothing else, parsed whole; ``None``
    for anything else (a blank line, several fields, a bad value), which :func:`_parse_text`
    reads or names by its line.

    NOTE [ One length per line ]: the common file (``np.savetxt(path, lengths, fmt="%d")``),
    split into a list of fields per line, held ~400 bytes per length: 788 MB peak and 2.1 s
    for 2,000,000 lengths (a 16 MB file); parsed as its lines, 0.4 s and about 200 MB.
    """
    try:
        out = np.array(lines, dtype=np.int64)  # (int() of each line: "5 6" and "" fail)
    except (ValueError, OverflowError, TypeError):
        return None
    if out.ndim != 1 or not out.size or out.min() < 0 or out.max() > MAX_LENGTH:
        return None
    return out


def _parse_text(
    lines: list[str], name: str, column: str | int | None, sep: str | None
) -> np.ndarray:
    rows = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise LengthFileError(f"{name}: the file holds no lengths (it is empty)")
    ncols = len(rows[0][1].split(sep))
    idx = _column_index(column, ncols, name)
    try:  # fast path: every field a plain integer
        table = np.array([line.split(sep) for _, line in rows], dtype=np.int64)
        col = table[:, idx] if table.ndim == 2 and table.shape[1] == ncols else None
        if col is not None and (col >= 0).all() and (col <= MAX_LENGTH).all():
            return np.ascontiguousarray(col)
    except (ValueError, OverflowError):
        pass
    out = np.empty(len(rows), dtype=np.int64)
    for i, (n, line) in enumerate(rows):
        fields = line.split(sep)
        if len(fields) != ncols:
            raise LengthFileError(
                f"{name} line {n}: expected {ncols} whitespace-separated field(s), got "
                f"{len(fields)}"
            )
        for j, tok in enumerate(fields):
            try:
                value = _int_token(tok, f"{name} line {n}")
            except LengthFileError as exc:
                if i or any(c.isdigit() for c in tok):
                    raise
                raise LengthFileError(  # a header row, most likely (s19-user)
                    f"{exc}; a .txt file has no header row: start that line with '#', or "
                    "name the file .csv / .tsv"
                ) from None
            if j == idx:
                out[i] = value
    return out


def _measure(value: Any, where: str, column: str) -> int:
    if isinstance(value, list):
        return len(value)
    if value is None:  # (s28: "must hold lengths (ints) or lists, got None")
        raise LengthFileError(
            f"{where}: column {column!r} is null (a missing value, no length); fill in that "
            "row's length or remove the row"
        )
    if isinstance(value, bool) or not isinstance(value, (int, float, decimal.Decimal)):
        raise LengthFileError(
            f"{where}: column {column!r} must hold lengths (ints) or lists, got {value!r:.60}"
        )
    return _int_token(str(value), where)


def _savetxt_comment(line: str) -> bool:
    """A line ``np.savetxt`` writes for ``header=`` / ``footer=`` (its ``comments="# "``)."""
    text = line.strip()
    return text == "#" or text.startswith("# ")


def _read_csv(lines: list[str], name: str, column: str | int | None, sep: str) -> np.ndarray:
    names = 0  # the header row's index
    if lines and lines[0].strip().startswith("# "):
        # np.savetxt(header=...) wrote each header line after "# " (comments=), the names
        # last; its footer= is more such lines at the end. All are blanked but the names, so
        # every line keeps its number and a quote in one spans no other
        block = 1
        while block < len(lines) and _savetxt_comment(lines[block]):
            block += 1
        names = max(i for i in range(block) if lines[i].strip() != "#")
        lines = [
            lines[i].lstrip()[2:] if i == names else "" if _savetxt_comment(x) else x
            for i, x in enumerate(lines)
        ]
    reader = csv.reader(lines, delimiter=sep)
    for _ in range(names):
        next(reader)
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise LengthFileError(f"{name}: the file holds no lengths (it is empty)")
    header = [h.strip() for h in header]
    # np.savetxt(path, lengths, fmt="%d") writes no header: its first length was read as the
    # column's name and left out, silently (s19-user). pandas names an array's columns 0, 1, ...
    # (DataFrame(a).to_csv(index=False) writes "0,1"): such a header is kept.
    numbered = header == [str(i) for i in range(len(header))]
    numbers = all(_NUMBER.fullmatch(h) for h in header)  # (np.savetxt's default fmt is %.18e)
    if numbers and not numbered and str(column) not in header:
        raise LengthFileError(
            f"{name}: the first row {header} holds numbers, not column names; a {sep!r}-"
            f"separated file starts with a header row: add one (e.g. 'length'), or name the "
            f"file .txt, which is read without one"
        )
    if column is None:
        if len(header) != 1:
            raise LengthFileError(f"{name} has columns {header}; choose one with --column NAME")
        column = header[0]
    if str(column) not in header:
        raise LengthFileError(f"{name}: unknown column {column!r}; the file has columns {header}")
    idx = header.index(str(column))
    out = []
    for row in reader:
        if not row or not any(x.strip() for x in row):
            continue
        where = f"{name} line {reader.line_num}"
        if len(row) <= idx:
            raise LengthFileError(f"{where}: missing column {column!r}")
        out.append(_int_token(row[idx], where))
    if not out:
        raise LengthFileError(f"{name}: the file has a header but no lengths")
    return np.asarray(out, dtype=np.int64)


def _read_jsonl(lines: list[str], name: str, column: str | int | None) -> np.ndarray:
    """The lengths in ``column`` of each object; without ``column``, the first object's key
    when it has only one, as a one-column ``.csv`` or Parquet file is read."""
    out = []
    inferred = ""  # (said where a later object lacks the key taken from the first one)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name} line {n}"
        try:
            obj = json.loads(line, parse_float=decimal.Decimal)  # exact, as written
        except json.JSONDecodeError as exc:
            raise LengthFileError(f"{where}: not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # digits past Python's limit, deep nesting
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise LengthFileError(f"{where}: not a usable JSON object ({reason})") from None
        if not isinstance(obj, dict):
            raise LengthFileError(f"{where}: expected a JSON object per line, got {obj!r:.60}")
        if column is None:
            if len(obj) != 1:  # (the line, not "line 1": blank lines may come first)
                raise LengthFileError(
                    f"{where} has keys {sorted(obj)}; choose the length column with --column NAME"
                )
            column = next(iter(obj))
            inferred = f" (the only key of line {n}, read as the column: choose one with --column)"
        if str(column) not in obj:
            raise LengthFileError(
                f"{where}: unknown column {column!r}; this line has keys {sorted(obj)}{inferred}"
            )
        out.append(_measure(obj[str(column)], where, str(column)))
    if not out:
        raise LengthFileError(f"{name}: the file holds no lengths (it is empty)")
    return np.asarray(out, dtype=np.int64)


def _read_npy(p: Path, column: str | int | None) -> np.ndarray:
    try:
        arr = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise LengthFileError(f"{p}: not a readable .npy array of numbers ({exc})") from None
    if arr.ndim == 2:
        kind = f"columns (a 2-D array of shape {arr.shape})"
        arr = arr[:, _column_index(column, arr.shape[1], str(p), kind)]
    elif arr.ndim != 1 or (column is not None and str(column) != "0"):
        raise LengthFileError(
            f"{p}: expected a 1-D array (or 2-D with --column), got shape {arr.shape}"
        )
    return _checked(arr, str(p))


def _checked(arr: np.ndarray, name: str) -> np.ndarray:
    if arr.dtype.kind in "US" and arr.size:  # (s28: the fix was Python on the file's name,
        # "strs.npy = [int(x) for x in strs.npy]")
        raise LengthFileError(
            f"{name}: holds strings (numpy dtype {arr.dtype}), e.g. {arr.flat[0].item()!r}, not "
            "integer lengths; save the lengths as integers, np.save(path, "
            "np.asarray(lengths, dtype=np.int64))"
        )
    if arr.dtype.kind == "f" and arr.size:
        exact = 2 ** (np.finfo(arr.dtype).nmant + 1)  # past it, neighbouring ints share a float
        finite = arr[np.isfinite(arr)]
        if finite.size and np.abs(finite).max() > exact:
            big = finite[np.argmax(np.abs(finite))].item()
            raise LengthFileError(
                f"{name}: holds {arr.dtype} lengths up to {big!r}, past 2**"
                f"{np.finfo(arr.dtype).nmant + 1}, where {arr.dtype} cannot represent every "
                "integer (the value may have been rounded); store the lengths as integers"
            )
    try:
        return as_lengths(arr, name=name)
    except (TypeError, ValueError) as exc:
        raise LengthFileError(str(exc)) from None


def _need_hf() -> None:
    """A Parquet file or a saved dataset is read by :mod:`bucketloader.hf` (``datasets``, which
    brings pyarrow): imported first, its error names the extra (a core install said "No module
    named 'pyarrow'")."""
    import bucketloader.hf  # noqa: F401


def _read_arrow(p: Path, column: str | int | None) -> np.ndarray:
    _need_hf()
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError types
        raise LengthFileError(f"{p}: not a readable parquet file ({exc})") from None
    return _from_table(table, str(p), column)


def _read_saved_dataset(p: Path, column: str | int | None) -> np.ndarray:
    _need_hf()
    import datasets

    try:
        ds = datasets.load_from_disk(str(p))
    except Exception as exc:  # datasets raises FileNotFoundError / its own errors
        raise LengthFileError(
            f"{p}: a directory must be saved by datasets.Dataset.save_to_disk ({exc})"
        ) from None
    if isinstance(ds, dict):
        raise LengthFileError(
            f"{p} holds a DatasetDict with splits {sorted(ds)}; pass one split's directory, "
            f"e.g. {p / sorted(ds)[0]}"
        )
    return _from_table(ds, str(p), column)


def _from_table(table: Any, name: str, column: str | int | None) -> np.ndarray:
    from bucketloader.hf import lengths  # parquet / save_to_disk need the optional datasets

    names = list(getattr(table, "column_names", []))
    if column is None:
        if len(names) != 1:
            raise LengthFileError(f"{name} has columns {names}; choose one with --column NAME")
        column = names[0]
    _note_characters(table, str(column), name)
    try:
        out = lengths(table, str(column))
    except KeyError as exc:
        raise LengthFileError(f"{name}: unknown column {column!r} ({exc.args[0]})") from None
    except (TypeError, ValueError) as exc:  # (s28: the command has no fn=, hf.lengths' fix)
        text = str(exc).replace(" or pass fn= to measure them", ", then save it again")
        raise LengthFileError(f"{name}: {text}") from None
    if out.size == 0:
        raise LengthFileError(f"{name}: the file holds no lengths (it is empty)")
    return _checked(out, f"{name} column {column!r}")


def _note_characters(table: Any, column: str, name: str) -> None:
    """A string column's lengths are characters: say so (a UserWarning the CLI prints as a note),
    since bucketing usually wants tokens."""
    # (a pyarrow Table has .schema; a datasets.Dataset from save_to_disk has its table's, on
    # .data: read only from .schema, a saved dataset's text column had no note)
    schema = getattr(table, "schema", None) or getattr(getattr(table, "data", None), "schema", None)
    note = characters_note(schema, column, name)
    if note is not None:
        warnings.warn(note, UserWarning, stacklevel=3)


def characters_note(schema: Any, column: str, name: str) -> str | None:
    """The note for a text column of an Arrow ``schema`` (its lengths are characters), or
    ``None`` for any other column.

    Example:
        >>> import pyarrow as pa
        >>> characters_note(pa.schema([("ids", pa.list_(pa.int64()))]), "ids", "t.parquet") is None
        True
    """
    if schema is None or schema.get_field_index(column) < 0:
        return None
    import pyarrow as pa  # (a schema is given: pyarrow is there)

    t = schema.field(column).type
    t = t.value_type if pa.types.is_dictionary(t) else t
    if not is_text(t):  # (string views too; a dictionary of strings, a pandas category, too)
        return None
    return (
        f"{name} column {column!r} holds text: its lengths are measured in characters, not "
        "tokens; to bucket tokens, tokenize first and pass the token column (e.g. "
        "--column input_ids) or a column of token counts"
    )
