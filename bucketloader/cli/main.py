"""The ``bucketloader`` command: ``report``, ``precompute`` and ``demo``.

Every bad input (missing file, unknown column, a non-integer or negative length, an empty file,
an unknown strategy, a bad option, an output in a directory that does not exist: none is
created, as ``cp`` or matplotlib's ``savefig`` create none) prints one ``bucketloader: error:
...`` line and exits with status 2, without a traceback.

Example:
    >>> main(["report", "--help"])  # doctest: +ELLIPSIS
    usage: bucketloader report ...
    0
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import glob
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bucketloader._version import __version__
from bucketloader.cli.engines import ENGINES, NULLS

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from bucketloader.histogram import JointHistogram, LengthHistogram
    from bucketloader.plan import BucketSpec

# NOTE [ What --help imports ]
# ``bucketloader --help`` and ``bucketloader report --help`` only build the parser: this module
# imports the standard library and the version at the top, and numpy and the library inside
# the subcommands that use them (benchmarks/startup.py measures it).

EXIT_USAGE = 2
#: Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130
#: Standard output closed by its reader (``... | head``): 128 + SIGPIPE, as git and coreutils.
EXIT_PIPE = 141
#: The plot ``demo`` writes when matplotlib is installed and no ``--plot`` is given.
DEMO_PLOT = "bucketloader-demo.png"
#: Above this many samples (a histogram from ``--engine``), ``report`` skips the dynamic-padding
#: baseline, which simulates batches over every sample.
MAX_BASELINE_SAMPLES = 100_000_000


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error style of the rest of the command."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise _UsageError(f"{message} (see {self.prog} --help)")


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bucketloader`` (three subcommands).

    Example:
        >>> args = build_parser().parse_args(["precompute", "lengths.txt", "--num-buckets", "8"])
        >>> args.command, args.file, args.num_buckets, args.strategy
        ('precompute', 'lengths.txt', 8, 'optimal')
    """
    p = _Parser(
        prog="bucketloader",
        description="Static-shape length bucketing: see how dynamic your data is, precompute "
        "boundaries, or run the demo.",
    )
    p.add_argument("--version", action="version", version=f"bucketloader {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{report,precompute,demo}", parser_class=_Parser)
    inputs = (
        "FILE: .txt, .npy, .csv, .tsv, .jsonl, .parquet, a datasets save_to_disk directory, or "
        "Parquet shards (a directory or a quoted glob such as 'data/*.parquet')"
    )
    engine_help = (
        "how Parquet shards are measured: local (bounded memory, the default), ray or spark "
        "(needs bucketloader[ray] / bucketloader[spark]); only the histogram is collected"
    )
    nulls_help = (
        "Parquet rows whose column is null (no length): raise (the default, an error with their "
        "count) or skip (left out, and their count told on stderr)"
    )

    r = sub.add_parser(
        "report",
        help="how dynamic are the lengths; padding per strategy and k",
        usage="bucketloader report FILE [--column C] [-k K ...] [--plot out.png] [options]",
    )
    r.add_argument("file", metavar="FILE", help=inputs)
    r.add_argument("--column", help="column (index for .txt/.npy, name otherwise)")
    r.add_argument("--engine", choices=ENGINES, help=engine_help)
    r.add_argument("--nulls", choices=NULLS, help=nulls_help)
    r.add_argument(
        "-k",
        "--num-buckets",
        type=int,
        nargs="+",
        default=[4, 8, 16, 32],
        help="the shape budgets k to compare (default: 4 8 16 32)",
    )
    r.add_argument(
        "--strategy", nargs="+", help="strategies to compare (default: all the fast ones)"
    )
    r.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="batch size of the dynamic-padding baseline (default 32)",
    )
    r.add_argument(
        "--padding-target",
        type=float,
        default=0.05,
        help="the recommended k is the smallest whose best strategy pads at most this (padding "
        "elements per real element; default 0.05, 5%%)",
    )
    r.add_argument(
        "--plot", metavar="PNG", help="write the report's plot here (in an existing directory)"
    )
    r.add_argument(
        "--json", metavar="OUT", help="write the report as JSON here (in an existing directory)"
    )

    c = sub.add_parser(
        "precompute",
        help="solve boundaries once and store them in the cache",
        usage="bucketloader precompute FILE -k K [--strategy S] [--max-tokens T | --batch-size B] "
        "[--cache-dir D] [--json out.json] [options]\n"
        "       bucketloader precompute FILE --column A,B --max-shapes K [--size sum|prod] "
        "(--max-tokens T | --batch-size B) [options]",
    )
    c.add_argument("file", metavar="FILE", help=inputs)
    c.add_argument(
        "--column",
        help="column (index for .txt/.npy, name otherwise); several, comma-separated, for a "
        "joint plan (--max-shapes)",
    )
    c.add_argument("--engine", choices=ENGINES, help=engine_help)
    c.add_argument("--nulls", choices=NULLS, help=nulls_help)
    c.add_argument("--strategy", default="optimal", help="strategy name (default: optimal)")
    c.add_argument("-k", "--num-buckets", type=int, help="shape budget k")
    c.add_argument(
        "--max-shapes",
        type=int,
        help="with several --column: the K joint cells with the least padding (solve_joint), "
        "the entry BucketSampler(lengths, max_shapes=K, cache=...) reads",
    )
    c.add_argument(
        "--size",
        choices=("sum", "prod"),
        help="a joint cell's size: sum of its lengths (default) or their product",
    )
    size = c.add_mutually_exclusive_group()
    size.add_argument("--max-tokens", type=int, help="padded elements per batch: B = T // b")
    size.add_argument("--batch-size", type=int, help="the same batch size for every bucket")
    c.add_argument(
        "--pad-to-multiple-of", type=int, default=1, help="boundaries on multiples of this"
    )
    c.add_argument("--cost", default="linear", help="linear (default) or quadratic")
    c.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an option of the strategy, as its Python keyword (repeatable), e.g. "
        "--strategy lp --option max_values=5000 --option time_limit=60",
    )
    c.add_argument(
        "--cache-dir",
        help="cache directory (default: $BUCKETLOADER_CACHE_DIR or the user cache directory)",
    )
    c.add_argument(
        "--json",
        metavar="OUT",
        help="write boundaries, shapes and the entry here (in an existing directory)",
    )

    d = sub.add_parser("demo", help="the whole idea on LibriSpeech lengths, in under a minute")
    d.add_argument("-k", "--num-buckets", type=int, default=16, help="shape budget k (default 16)")
    d.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    d.add_argument("--max-batches", type=int, default=20, help="batches materialised per loader")
    d.add_argument(
        "--plot",
        metavar="PNG",
        help=f"write the plot here (in an existing directory; default {DEMO_PLOT}, when "
        "matplotlib is installed)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "lengths.txt").write_text("3\\n5\\n8\\n8\\n12\\n")
        >>> main(["precompute", str(folder / "lengths.txt"), "--num-buckets", "2",
        ...       "--cache-dir", str(folder)])  # doctest: +ELLIPSIS
        lengths.txt: 5 lengths, strategy 'optimal', k=2, 4 distinct lengths
        cache: miss, solved in ...
        boundaries: [8, 12]
        ...
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        for name in ("file", "json", "plot", "cache_dir"):  # '~/...' quoted past the shell:
            value = getattr(args, name, None)  # one path, whichever option names it (an input
            if isinstance(value, str):  # '~/lengths.txt' was not found, and --json
                setattr(args, name, os.path.expanduser(value))  # '~/lengths.txt' replaced it)
        if args.command == "report":
            return _report(args)
        if args.command == "precompute":
            return _precompute(args)
        _check_plot(args.plot)
        if args.plot:
            _need_matplotlib(args.plot)
        from bucketloader._validation import check_int

        for flag, name in (  # (named as typed; run_demo's own errors name its arguments)
            ("-k/--num-buckets", "num_buckets"),
            ("--batch-size", "batch_size"),
            ("--max-batches", "max_batches"),
        ):
            with _flag(flag):
                check_int(name, getattr(args, name), minimum=1)
        from bucketloader.cli.demo import run_demo  # imports the DataLoader machinery

        # the default plot only where matplotlib draws: 'pip install bucketloader' then
        # 'bucketloader demo' ran the whole demo and then failed on the plot (exit 2; s28)
        broken = None if args.plot else _matplotlib_error()
        drawn = args.plot or (DEMO_PLOT if broken is None else None)
        with _as_flags():  # (its batch of the longest utterance: --batch-size named)
            code = run_demo(
                num_buckets=args.num_buckets,
                batch_size=args.batch_size,
                max_batches=args.max_batches,
                plot=drawn,
            )
        if broken is not None and _not_installed(broken):
            print(f"(no plot: pip install 'bucketloader[plot]' to draw {DEMO_PLOT})")
        elif broken is not None:
            print(
                f"(no plot: matplotlib is installed but failed to import ({broken}); repair it "
                f"to draw {DEMO_PLOT})"
            )
        return code
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except _UsageError as exc:
        return _fail(str(exc))
    except BrokenPipeError:  # the reader stopped reading: no error to tell (what was asked,
        return _closed_stdout()  # e.g. a cache entry, is done)
    except ImportError as exc:
        return _fail(_missing_package(exc))
    except (ValueError, TypeError, KeyError, OSError) as exc:
        return _fail(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))
    except Warning as exc:  # -W error / PYTHONWARNINGS=error (the user decides: _recording)
        return _fail(f"{exc} ({type(exc).__name__}, an error under -W / PYTHONWARNINGS)")
    except KeyboardInterrupt:  # Ctrl-C in a long solve printed a 20-line traceback of numpy
        print("\nbucketloader: interrupted", file=sys.stderr)  # (cache and --json writes are
        return EXIT_INTERRUPTED  # all or nothing: a file there is whole, or the one before)


#: What installs each optional package a command may import (``pip install`` this): its extra,
#: or for SciPy, a core dependency since s28, the package itself.
_EXTRAS = {
    "datasets": "bucketloader[hf]",
    "matplotlib": "bucketloader[plot]",
    "pyarrow": "bucketloader[arrow]",
    "pyspark": "bucketloader[spark]",
    "ray": "bucketloader[ray]",
    "scipy": "scipy>=1.11",
    "tqdm": "bucketloader[arrow]",
    "transformers": "bucketloader[hf]",
}


def _missing_package(exc: ImportError) -> str:
    """An ``ImportError``'s message, naming what to install where it is a bare "No module named
    'pyarrow'" of an optional package that is not installed (a shard glob on a core install said
    only that). An installed package that fails to import (a missing shared library, a name an
    old version lacks, a build without a submodule) keeps its own message: installing the extra
    would change nothing."""
    root = (exc.name or "").split(".")[0]
    if root not in _EXTRAS or "pip install" in str(exc) or _installed(root):
        return str(exc)
    return f"this needs {root!r} ({exc}); install it with pip install '{_EXTRAS[root]}'"


def _installed(package: str) -> bool:
    """Whether the top-level ``package`` is installed (found, whether or not it imports)."""
    import importlib.util

    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # (a module in sys.modules without a spec)
        return True


def _closed_stdout() -> int:
    """:data:`EXIT_PIPE`, quietly: standard output now writes to ``os.devnull``, so the flush at
    exit does not fail again (Python's advice for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # (no file descriptor behind sys.stdout)
        pass
    return EXIT_PIPE


def _read_lengths(args: argparse.Namespace, column: str | None = None) -> Any:
    """``read_lengths`` of ``column`` (default: ``--column``) with its notes (a text column
    measured in characters) printed as ``bucketloader: note: ...`` lines on stderr."""
    with _recording() as notes:
        from bucketloader.cli.files import read_lengths

        lengths = read_lengths(args.file, args.column if column is None else column)
    for note in notes:
        print(f"bucketloader: note: {note.message}", file=sys.stderr)
    return lengths


def _strategy_options(given: Sequence[str]) -> dict[str, Any]:
    """``--option NAME=VALUE`` arguments as the strategy's keywords: each value a Python literal
    where it is one (``5000``, ``60.0``, ``True``, ``None``), else the string; the names are
    checked against the strategy's own with its other options (``resolve_params``).

    Example:
        >>> _strategy_options(["max_values=5000", "solver=HiGHS", "warm_start=False"])
        {'max_values': 5000, 'solver': 'HiGHS', 'warm_start': False}
    """
    import ast

    options: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for text in given:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ValueError(
                f"--option must be NAME=VALUE with the strategy's keyword as NAME, got "
                f"{text!r}; e.g. --option max_values=5000"
            )
        if name in ("cost", "pad_to_multiple_of", "num_buckets"):
            flag = "-k" if name == "num_buckets" else "--" + name.replace("_", "-")
            raise ValueError(f"--option {name}=... has its own flag: pass {flag} instead")
        if name in options:
            raise ValueError(f"--option {name} is given twice ({texts[name]!r} and {text!r})")
        texts[name] = text
        try:
            options[name] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            options[name] = value.strip()
    return options


@contextlib.contextmanager
def _flag(flag: str) -> Iterator[None]:
    """A check of the value of ``flag``: its error names the flag too (``-k/--num-buckets:
    num_buckets must be an int >= 1, got num_buckets=0``), as the user typed the flag."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{flag}: {exc}") from None


#: The options the commands take as flags, as an error names them (:func:`_as_flags`).
_FLAGS = {
    "batch_size": "--batch-size",
    "max_tokens": "--max-tokens",
    "max_shapes": "--max-shapes",
    "pad_to_multiple_of": "--pad-to-multiple-of",
}


def _spell_flag(name: str, *value: Any) -> str | None:
    """An option as the command line takes it (``--max-tokens 4096``), or ``None`` where it has
    no flag for it (``TokenBudget``'s options, ``max_length``, ``overflow``)."""
    flag = _FLAGS.get(name)
    return flag if flag is None or not value else f"{flag} {value[0]}"


@contextlib.contextmanager
def _as_flags() -> Iterator[None]:
    """A check of the batch rule that needs the data (a batch of ``--batch-size`` rows of the
    longest bucket, known after the read; a joint plan's budget) speaks in the flags as typed,
    as :func:`_flag` names a flag: ``--batch-size 100000000000000000000 plans batches of shape
    ...; lower --batch-size`` (s28-user: it said ``batch_size=...; lower batch_size``). The
    error says itself with the flags (an :class:`~bucketloader._validation.OptionError`), and
    leaves out a fix the command line has no flag for (``TokenBudget(..., oversize=...)``,
    ``max_length=``); until s30 a table of patterns rewrote the texts it knew, and a joint
    plan's other budget errors still named Python options."""
    from bucketloader._validation import OptionError

    try:
        yield
    except OptionError as exc:
        raise ValueError(exc.say(_spell_flag)) from None


def _check_option_values(
    name: str | None, fn: Any, given: Sequence[str], options: dict[str, Any]
) -> None:
    """The values of ``--option`` checked before the lengths are read: the strategy runs once
    on three lengths with them (milliseconds: every built-in strategy checks its options
    first), and an error that names one of them is the user's (``--option time_limit=-1``
    was found only after an engine's scan of the data). Any other error of that run (a
    custom strategy that needs more lengths) is left to the real solve."""
    from bucketloader.solve import solve_boundaries

    if not options:
        return
    try:
        with warnings.catch_warnings():  # (of three lengths: "lp: 3 distinct lengths exceed
            warnings.simplefilter("ignore")  # max_values=2" said nothing of the data; s23-rev)
            solve_boundaries([1, 2, 3], 2, strategy=fn, **options)
    except (ValueError, TypeError) as exc:
        text = str(exc.__cause__ or exc)
        bad = [g for g, key in zip(given, options, strict=True) if f"{key}=" in text]
        if bad:
            raise type(exc)(f"--option {bad[0]}: {text} (strategy {name or fn!r})") from None


@contextlib.contextmanager
def _recording() -> Iterator[list[warnings.WarningMessage]]:
    """The warnings raised inside, recorded to be printed as one ``bucketloader:`` line each:
    every one of them, unless the user chose which with ``-W`` or ``PYTHONWARNINGS`` (then
    those filters decide, so ``PYTHONWARNINGS=ignore`` prints none)."""
    with warnings.catch_warnings(record=True) as caught:
        if not sys.warnoptions:
            warnings.simplefilter("always")
        yield caught


def _read(args: argparse.Namespace) -> np.ndarray | LengthHistogram:
    """Lengths from a file, or the exact histogram of Parquet shards on ``--engine``."""
    from bucketloader.histogram import LengthHistogram

    if not _shards(args):
        return _read_lengths(args)
    hist = _engine_read(args, args.column)
    if not isinstance(hist, LengthHistogram):  # pragma: no cover - one column gives 1-D
        raise TypeError("report and precompute -k measure one column")
    return hist


def _shards(args: argparse.Namespace) -> bool:
    """Whether the input is Parquet shards (read on ``--engine``); ``--engine`` and ``--nulls``
    on any other file are errors."""
    from bucketloader.cli.engines import is_parquet_set

    if is_parquet_set(args.file):
        _check_shards(args.file)
        return True
    shards = "Parquet shards (a directory of .parquet files, a quoted glob or a .parquet file)"
    if args.engine is not None:
        raise ValueError(f"--engine {args.engine} reads {shards}, got {args.file}")
    if args.nulls is not None:  # (it was accepted and ignored: a null was still refused)
        raise ValueError(
            f"--nulls {args.nulls} applies to {shards}, got {args.file}; leave out --nulls "
            "(and fill or drop that file's rows without a length)"
        )
    return False


def _engine_read(
    args: argparse.Namespace, column: str | list[str] | None
) -> LengthHistogram | JointHistogram:
    """The exact histogram of ``column`` (several: their joint one) over the Parquet shards, on
    ``--engine`` with ``--nulls``; rows left out as null are told on stderr."""
    from bucketloader.cli.engines import engine_histogram

    for name in [column] if not isinstance(column, list) else column:
        _note_parquet_text(args.file, name)
    engine, nulls = args.engine or "local", args.nulls or "raise"
    hist, num_nulls = engine_histogram(args.file, column, engine, nulls)
    if num_nulls:  # (--nulls skip: rows left out are told, never lost silently)
        total = hist.num_samples + num_nulls
        print(
            f"bucketloader: note: --nulls skip left out {num_nulls:,} null row(s) of "
            f"{total:,} ({num_nulls / total:.2%}); the histogram counts the other "
            f"{hist.num_samples:,}",
            file=sys.stderr,
        )
    return hist


def _check_shards(path: str) -> None:
    """A glob of lengths files (``'*.txt'``) and a directory with no Parquet file are refused
    with the fix (the files Parquet shards means: NOTE [ Which files a directory of Parquet
    shards holds ] in :mod:`bucketloader._arrow`)."""
    from bucketloader._arrow import scan_parquet
    from bucketloader.cli.files import SUFFIXES

    if glob.has_magic(path):
        found = sorted(f for f in glob.glob(path, recursive=True) if Path(f).is_file())
        text = [
            f
            for f in found
            if Path(f).suffix.lower() in SUFFIXES and Path(f).suffix.lower() != ".parquet"
        ]
        if text and len(text) == len(found):
            names = ", ".join(text[:3]) + (", ..." if len(text) > 3 else "")
            raise ValueError(
                f"the glob {path} matches {len(text)} lengths file{'s' if len(text) > 1 else ''} "
                f"({names}), but a glob or a directory names Parquet shards; pass one lengths "
                f"file at a time (bucketloader report {text[0]}), or join them into one first"
            )
    elif Path(path).is_dir():
        try:
            scan_parquet(path)
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{exc}; nor is it a directory saved by datasets.Dataset.save_to_disk (it has no "
                "state.json)"
            ) from None


def _note_parquet_text(path: str, column: str | None) -> None:
    """The characters note for a text column of Parquet shards (read from the first file's
    schema; the engines measure a string column in characters). Without ``--column`` the
    column is the file's only one (the engine refuses several)."""
    import pyarrow.parquet as pq

    from bucketloader.cli.files import characters_note
    from bucketloader.engines.arrow import parquet_files

    try:
        schema = pq.read_schema(parquet_files(path)[0])
    except (OSError, ValueError):
        return  # the engine names the problem with the files
    if column is None:
        if len(schema.names) != 1:
            return  # (the engine asks for --column)
        column = schema.names[0]
    note = characters_note(schema, str(column), Path(path).name)
    if note is not None:
        print(f"bucketloader: note: {note}", file=sys.stderr)


def _fail(message: str) -> int:
    print(f"bucketloader: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _report(args: argparse.Namespace) -> int:
    from bucketloader._validation import check_float, check_int
    from bucketloader.analysis import analyze
    from bucketloader.analysis.recommend import check_num_buckets, check_strategies
    from bucketloader.histogram import LengthHistogram

    # every option is checked before the lengths are read (an engine's scan of a large
    # dataset can take minutes; analyze() checks them again, after the scan)
    if len(_columns(args.column)) > 1:
        raise _UsageError(
            f"report measures one column, got --column {args.column}; report each column, or "
            f"plan them jointly: bucketloader precompute FILE --column {args.column} "
            "--max-shapes K"
        )
    with _flag("-k/--num-buckets"):
        check_num_buckets(args.num_buckets)
    with _flag("--strategy"):
        if args.strategy is not None:
            check_strategies(args.strategy)
    with _flag("--batch-size"):
        check_int("batch_size", args.batch_size, minimum=1)
    with _flag("--padding-target"):  # (its warning above 1 comes from analyze, once)
        check_float("padding_target", args.padding_target, minimum=0.0, maximum=1e9)
    _check_output("--json", args.json, args.file)
    _check_plot(args.plot)
    if args.plot:  # before any work (the plot is drawn before the text is printed)
        _need_matplotlib(args.plot)
    if args.json and args.plot and _same_file(args.json, args.plot):
        raise ValueError(  # (the report replaced the plot it had just written)
            f"--json {args.json} and --plot {args.plot} name the same file; name two files, "
            "e.g. --json report.json --plot report.png"
        )
    lengths = _read(args)
    batch_size = args.batch_size
    if isinstance(lengths, LengthHistogram) and lengths.num_samples > MAX_BASELINE_SAMPLES:
        # the dynamic-padding baseline simulates random batches over every sample (N int64s)
        print(
            f"bucketloader: note: {lengths.num_samples:,} samples: the dynamic-padding baseline "
            f"is skipped above {MAX_BASELINE_SAMPLES:,} (it would hold every length in memory)",
            file=sys.stderr,
        )
        batch_size = None
    with warnings.catch_warnings(record=True) as caught:  # (the target's, said as the flag)
        warnings.filterwarnings("always", "padding_target=", UserWarning)
        report = analyze(
            lengths,
            num_buckets=args.num_buckets,
            strategy=args.strategy,
            batch_size=batch_size,
            padding_target=args.padding_target,
        )
    for w in caught:
        if str(w.message).startswith("padding_target="):
            text = str(w.message).replace("padding_target=", "--padding-target ")
            print(f"bucketloader: warning: {text}", file=sys.stderr)
        else:  # (the others as they were: shown by the user's filters)
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    report = dataclasses.replace(report, source=Path(args.file).name)
    # the files first: NOTE [ Outputs before the printout ]
    plotted = _plot(report, args.plot) if args.plot else None
    if args.json:
        _write_json("--json", args.json, report.to_dict())
    print(report)  # (with its note on samples of length 0: NOTE [ Samples of length 0 ])
    if plotted is not None:
        print(f"\nplot written to {plotted}")
    if args.json:
        print(f"report written to {args.json}")
    return 0


# NOTE [ Outputs before the printout ]
# ``--json`` and ``--plot`` are written before the text is printed: standard output closed by
# its reader (``bucketloader precompute ... --json out.json | head -4``) ends the command at the
# first print past what the reader took (BrokenPipeError, :data:`EXIT_PIPE`), and under
# ``PYTHONUNBUFFERED=1`` (common in containers and job scripts) that print came before the file
# was written: the command exited 141 with no out.json.


def _precompute(args: argparse.Namespace) -> int:
    from bucketloader._files import folder_blocker, os_reason
    from bucketloader._types import COSTS
    from bucketloader._validation import check_choice, check_folder, check_int
    from bucketloader.cache import BucketCache, CacheWarning, default_cache_dir
    from bucketloader.histogram import LengthHistogram
    from bucketloader.plan.budget import BatchRule
    from bucketloader.plan.limits import zero_lengths_field, zero_lengths_note
    from bucketloader.solve import resolve_params, solve_boundaries
    from bucketloader.strategies import resolve_strategy

    # every option is checked before any work: a bad one never costs a solve or a cache write
    columns = _columns(args.column)
    if args.max_shapes is not None or len(columns) > 1 or args.strategy == "joint":
        return _precompute_joint(args, columns)
    if args.num_buckets is None:
        raise _UsageError(
            "precompute needs -k/--num-buckets K (the shape budget), or several --column names "
            "with --max-shapes K for a joint plan"
        )
    if args.size is not None:
        raise _UsageError(f"--size {args.size} sizes a joint plan's cells: it needs --max-shapes")
    with _flag("--strategy"):
        name, fn = resolve_strategy(args.strategy)
    with _flag("-k/--num-buckets"):
        check_int("num_buckets", args.num_buckets, minimum=1)
    # each flag named as typed (s25-user: "pad_to_multiple_of must be ..." named no flag)
    with _flag("--pad-to-multiple-of"):
        check_int("pad_to_multiple_of", args.pad_to_multiple_of, minimum=1)
    with _flag("--cost"):
        check_choice("cost", args.cost, COSTS)
    if args.batch_size is not None:
        with _flag("--batch-size"):
            check_int("batch_size", args.batch_size, minimum=1)
    if args.max_tokens is not None:
        with _flag("--max-tokens"):
            check_int("max_tokens", args.max_tokens, minimum=1)
    if args.batch_size is not None or args.max_tokens is not None:
        with _flag("--max-tokens" if args.max_tokens is not None else "--batch-size"):
            BatchRule.parse(args.batch_size, args.max_tokens)  # (its bounds: the flag named)
    options = _strategy_options(args.option)
    params = resolve_params(
        fn,
        args.num_buckets,
        {"cost": args.cost, "pad_to_multiple_of": args.pad_to_multiple_of, **options},
    )
    _check_option_values(name, fn, args.option, options)
    _check_output("--json", args.json, args.file)
    given = args.cache_dir
    directory = default_cache_dir() if given is None else check_folder("--cache-dir", given)
    blocker = folder_blocker(directory)
    if blocker is not None:  # precompute's one job is the entry: say so before reading, solving
        return _fail(  # (before BucketCache, whose warning would say the same once more)
            f"the cache directory {directory} is not usable ({os_reason(blocker)}); "
            "point --cache-dir or BUCKETLOADER_CACHE_DIR at a writable directory"
        )
    cache = BucketCache(directory)
    lengths = _read(args)
    hist = LengthHistogram.from_lengths(lengths)
    m = params["pad_to_multiple_of"]
    longest = -(-hist.max // m) * m  # the last boundary of every built-in strategy
    if args.max_tokens is not None and args.max_tokens < longest:
        raise ValueError(
            f"--max-tokens {args.max_tokens} is smaller than the bucket length {longest} of the "
            f"longest sample, so that bucket's batch would be empty; raise --max-tokens to at "
            f"least {longest}"
        )
    key = cache.key(hist, name, params)
    many = "s" if hist.num_values != 1 else ""
    label = f"strategy {name!r}, k={args.num_buckets}, {hist.num_values:,} distinct length{many}"
    with _Ticker(f"solving ({label})"), _recording() as caught:
        sol = solve_boundaries(
            hist,
            args.num_buckets,
            strategy=fn,
            cache=cache,
            cost=args.cost,
            pad_to_multiple_of=args.pad_to_multiple_of,
            **options,
        )
    for w in caught:  # (a CacheWarning says why an entry was not stored: one line each)
        print(f"bucketloader: warning: {w.message}", file=sys.stderr)
    where = cache.path_for(key)
    state = "hit" if cache.hits else f"miss, solved in {sol.solve_seconds:.3f} s"
    # the entry itself, read back as a later run reads it: a directory or a symbolic link at
    # its path is the user's, never replaced, so nothing was stored (exists() said it was)
    stored = cache.get(key) is not None
    with _as_flags():
        rows = bucket_table(lengths, sol.boundaries, args.batch_size, args.max_tokens)
    if args.json:  # the file first: NOTE [ Outputs before the printout ]
        out = {
            "file": str(args.file),
            "key": key,
            "cache_entry": str(where) if stored else None,
            "solution": sol.to_dict(),
            "buckets": rows,
            "shapes": sorted({tuple(r["shape"]) for r in rows if r["shape"]}),
            "zero_length": zero_lengths_field(hist),  # (the warning printed below)
        }
        _write_json("--json", args.json, out)
    print(f"{Path(args.file).name}: {hist.num_samples:,} lengths, {label}")
    print(f"cache: {state}; key {key[:16]}… {'at ' + str(where) if stored else '(not stored)'}")
    print(f"status: {sol.status}; padding {sol.padding_ratio:.2%} (pad / real elements)")
    print(f"boundaries: {[int(b) for b in sol.boundaries]}")
    print(format_table(rows, args.batch_size, args.max_tokens))
    note = zero_lengths_note(hist)  # (s28-user: a (B, 0) shape was planned without a word)
    if note is not None:  # as report says it: NOTE [ Samples of length 0 ]
        print(f"\nwarning: {note}")
    if args.json:
        print(f"written to {args.json}")
    if not stored:  # precompute's one job: the entry a later run finds
        why = (
            "the warning above says why"
            if any(issubclass(w.category, CacheWarning) for w in caught)
            else f"at its entry {where}; the warning that says why was filtered out by -W or "
            "PYTHONWARNINGS"
        )
        return _fail(
            f"the boundaries were solved but not stored in the cache directory {cache.directory} "
            f"({why}); fix that, or point --cache-dir or BUCKETLOADER_CACHE_DIR at a writable "
            "directory"
        )
    return 0


def _any_zero(table: dict[str, np.ndarray]) -> np.ndarray:
    """Per sample of ``table`` (its columns' lengths), 0 where any of them is 0, else 1: what
    ``zero_lengths_field`` counts, one byte a sample (no ``(N, D)`` copy of 100 M rows)."""
    import numpy as np

    columns = iter(table.values())
    zero = np.asarray(next(columns)) == 0
    for column in columns:
        zero |= np.asarray(column) == 0
    return (~zero).view(np.uint8)


def _columns(column: str | None) -> list[str]:
    """``--column``'s names: ``"src,tgt"`` names two (a joint plan's inputs)."""
    if column is None or "," not in column:
        return [] if column is None else [column]
    names = [c.strip() for c in column.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise _UsageError(
            f"--column {column!r} must name distinct columns separated by commas, e.g. "
            "--column src,tgt"
        )
    return names


def _precompute_joint(args: argparse.Namespace, columns: list[str]) -> int:
    """``precompute --column A,B --max-shapes K``: the joint plan of several lengths per sample,
    solved and stored by building the one-rank ``BucketSampler`` those options make, so
    ``BucketSampler(lengths, max_shapes=K, ...)`` with the same options reads every entry it
    solves (under ``max_tokens`` there can be several: NOTE [ Cells within a size limit ]).
    Parquet shards are measured on ``--engine`` (NOTE [ A joint plan of Parquet shards ])."""
    from bucketloader._files import folder_blocker, os_reason
    from bucketloader._validation import check_folder, check_int
    from bucketloader.cache import BucketCache, CacheWarning, default_cache_dir
    from bucketloader.plan.limits import zero_lengths_field
    from bucketloader.strategies.joint import Joint

    if args.max_shapes is None:
        raise _UsageError(
            f"--column {args.column} names {len(columns)} columns: a joint plan of them needs "
            "--max-shapes K (the number of cells); one column takes -k"
            if len(columns) > 1
            else "--strategy joint plans several columns at once: --column A,B --max-shapes K"
        )
    with _flag("--max-shapes"):
        k = check_int("max_shapes", args.max_shapes, minimum=1)
    if len(columns) < 2:
        raise _UsageError(
            f"--max-shapes {k} plans several lengths per sample at once: name their columns, "
            "--column src,tgt (one column: -k K)"
        )
    refused = [
        flag
        for flag, given in (
            (f"-k {args.num_buckets}", args.num_buckets is not None),
            (f"--strategy {args.strategy}", args.strategy not in ("optimal", "joint")),
            (f"--cost {args.cost}", args.cost != "linear"),
        )
        if given
    ]
    if refused:
        raise _UsageError(
            f"{refused[0]} does not apply to a joint plan (--max-shapes): its K cells are "
            "solved together (--size sizes them; --option passes solve_joint's time_limit, "
            "tolerance, ...); leave it out"
        )
    with _flag("--pad-to-multiple-of"):
        check_int("pad_to_multiple_of", args.pad_to_multiple_of, minimum=1)
    if args.max_tokens is not None:
        with _flag("--max-tokens"):
            check_int("max_tokens", args.max_tokens, minimum=1)
    options = _strategy_options(args.option)
    with _flag("--option"):
        strategy: Any = Joint(**options)  # (the sampler takes it as its strategy)
    size: Any = args.size or "sum"
    budget = {"max_tokens": args.max_tokens} if args.max_tokens is not None else {}
    if args.batch_size is not None:
        with _flag("--batch-size"):
            budget["batch_size"] = check_int("batch_size", args.batch_size, minimum=1)
    if not budget:  # (the sampler said so after the read, in its own words: batch_size=None)
        raise _UsageError(
            "a joint plan is stored by building the BucketSampler that reads it, which sizes "
            "its batches: pass --max-tokens T or --batch-size B, as the sampler will have"
        )
    _check_output("--json", args.json, args.file)
    given = args.cache_dir
    directory = default_cache_dir() if given is None else check_folder("--cache-dir", given)
    blocker = folder_blocker(directory)
    if blocker is not None:
        return _fail(
            f"the cache directory {directory} is not usable ({os_reason(blocker)}); "
            "point --cache-dir or BUCKETLOADER_CACHE_DIR at a writable directory"
        )
    if _shards(args):  # the engine's histogram of the rows, as the sampler's lengths
        table = _joint_rows(_engine_read(args, columns), columns)
    else:
        table = {name: _read_lengths(args, name) for name in columns}
    counts = {name: int(v.size) for name, v in table.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(
            f"{args.file}: the columns hold different numbers of lengths, {counts}; every row "
            "needs a length in each column"
        )

    from bucketloader.sampler import BucketSampler  # (torch: the one-rank sampler itself)

    def build(cache: BucketCache) -> BucketSampler:  # what the user's sampler will build
        return BucketSampler(
            table,
            max_shapes=k,
            size=size,
            strategy=strategy,
            pad_to_multiple_of=args.pad_to_multiple_of,
            cache=cache,
            num_replicas=1,
            rank=0,
            **budget,
        )

    label = f"joint, K={k}, size={size!r}, columns {columns}"
    with _Ticker(f"solving ({label})"), _recording() as caught, _as_flags():
        try:
            sampler = build(BucketCache(directory))
        except ImportError as exc:  # (without SciPy: its fix, as the command line spells it)
            if _JOINT_EXACT_FIX not in str(exc):
                raise
            fix = "pass --option exact=False ("
            raise ImportError(str(exc).replace(_JOINT_EXACT_FIX, fix)) from None
        again = build(BucketCache(directory)).spec  # read back, as a later run reads it
    spec = sampler.spec
    for message in dict.fromkeys(str(w.message) for w in caught):  # (each once: two builds)
        print(f"bucketloader: warning: {message}", file=sys.stderr)
    joint = [dict(j) for j in spec.joint or ()]
    shapes = [tuple(int(x) for x in s) for s in sampler.shapes]
    stored = bool(again.joint) and all(j["cached"] for j in again.joint or ())
    if args.json:  # the file first: NOTE [ Outputs before the printout ]
        out = {
            "file": str(args.file),
            "columns": columns,
            "max_shapes": k,
            "size": size,
            "cache_dir": str(directory) if stored else None,
            "joint": joint,
            "shapes": [list(s) for s in shapes],  # (one rank's sampler: its even rows)
            "zero_length": zero_lengths_field(_any_zero(table)),
        }
        _write_json("--json", args.json, out)
    n = next(iter(counts.values()))
    state = "hit" if all(j["cached"] for j in joint) else "miss"
    print(f"{Path(args.file).name}: {n:,} samples, {label}")
    print(f"cache: {state}; {'stored in ' + str(directory) if stored else '(not stored)'}")
    for j in joint:
        print(
            f"status: {j['status']}; {j['cells']} cells, padding {j['objective']:,} "
            f"({j['padding_ratio']:.2%}) >= certified bound {j['lower_bound']:,} (gap "
            f"{j['gap']:.2%}), {j['seconds']:.2f} s"
        )
    print(f"shapes of a one-rank BucketSampler ({len(shapes)}): {shapes}")
    if args.json:
        print(f"written to {args.json}")
    if not stored:
        why = (
            "the warning above says why"
            if any(issubclass(w.category, CacheWarning) for w in caught)
            else "the warning that says why was filtered out by -W or PYTHONWARNINGS"
        )
        return _fail(
            f"the joint plan was solved but not stored in the cache directory {directory} "
            f"({why}); fix that, or point --cache-dir or BUCKETLOADER_CACHE_DIR at a writable "
            "directory"
        )
    return 0


#: The exact joint solver's fix without SciPy, as a sampler's user passes it (its ImportError in
#: bucketloader.strategies.joint); the command line passes it as --option exact=False.
_JOINT_EXACT_FIX = "pass exact=False (strategy=Joint(exact=False) to a sampler: "


def _joint_rows(hist: LengthHistogram | JointHistogram, columns: list[str]) -> dict[str, Any]:
    """Per-sample lengths, column by column, with the joint histogram ``hist`` of Parquet
    shards: each distinct row repeated its count (in their order, which no plan depends on).

    NOTE [ A joint plan of Parquet shards ]
    The joint precompute stores what the user's ``BucketSampler(lengths, max_shapes=K, ...)``
    reads by building that sampler, which plans from every sample's lengths (under
    ``max_tokens`` it may solve several plans, each keyed by the histogram it solves: NOTE
    [ Cells within a size limit ]). An engine brings back only the distinct rows and their
    counts; repeated, they are the same multiset, so the same plans and entries. They take
    ``8 * D`` bytes a sample here, as in the training job's sampler: above
    :data:`MAX_BASELINE_SAMPLES` samples that is refused, naming the Python alternative.

    Example:
        >>> from bucketloader.histogram import JointHistogram
        >>> rows = _joint_rows(JointHistogram.from_lengths([[3, 4], [5, 6], [3, 4]]), ["a", "b"])
        >>> {k: v.tolist() for k, v in rows.items()}
        {'a': [3, 3, 5], 'b': [4, 4, 6]}
    """
    import numpy as np

    from bucketloader.histogram import JointHistogram

    if not isinstance(hist, JointHistogram):  # pragma: no cover - several columns give 2-D
        raise TypeError("a joint plan measures several columns")
    if hist.num_samples > MAX_BASELINE_SAMPLES:
        raise ValueError(
            f"--column {','.join(columns)}: the shards hold {hist.num_samples:,} samples; a "
            f"joint plan is built as the BucketSampler that reads it builds it, from every "
            f"sample's lengths in memory, done here up to {MAX_BASELINE_SAMPLES:,}. Plan it in "
            "Python where the sampler runs: BucketSampler(lengths, max_shapes=K, cache=True)"
        )
    return {name: np.repeat(hist.rows[:, i], hist.counts) for i, name in enumerate(columns)}


def _check_output(option: str, path: str | None, source: str | None = None) -> None:
    """An output path must not be an existing directory, nor a file the input reads (checked
    before any work: ``--json lengths.txt`` replaced the lengths with the report, and ``--json``
    naming a shard of a glob or folder of Parquet files replaced that shard)."""
    if path is not None and Path(path).expanduser().is_dir():
        raise ValueError(f"{option} must name a file, got the directory {path}")
    if path is not None:
        from bucketloader.analysis.report import check_parent

        check_parent(option, path)  # (not created: a typo made a directory tree)
    if path is None or source is None or not Path(path).is_file():
        return  # (a new file replaces nothing)
    if glob.has_magic(source) or Path(source).is_dir():
        if any(_same_file(path, f) for f in _input_files(source)):
            raise ValueError(
                f"{option} {path} is one of the files the input {source} reads, which the "
                f"report would replace; name a file outside it, e.g. {option} report.json"
            )
    elif _same_file(path, source):
        raise ValueError(
            f"{option} {path} is the input file, which the report would replace; name another "
            f"file, e.g. {option} {Path(source).stem}-report.json"
        )


def _input_files(source: str) -> list[str]:
    """The files a glob or folder input reads (Parquet shards, a saved dataset's files)."""
    from bucketloader.engines.arrow import parquet_files

    try:
        return parquet_files(source)
    except OSError:  # nothing matches: the read says so
        return []
    except ValueError:  # a file that is not Parquet (the read says so): not to be replaced either
        return sorted(glob.glob(source, recursive=True)) if glob.has_magic(source) else []


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (links included), or would once written."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same path
        return Path(a).resolve() == Path(b).resolve()


def _write_json(option: str, path: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` all or nothing: a full disk or a killed command leaves
    the file that was there as it was (``write_text`` truncated it first: a rerun on a full disk
    left the previous ``plan.json`` empty, and the error, ``[Errno 28] No space left on device``,
    named no file). A link is followed: its target is the file replaced."""
    from bucketloader._files import NotAFile, os_reason, write_output

    data = (json.dumps(obj, indent=1) + "\n").encode()
    try:  # (~ expanded, as check_parent and --plot expand it: '~/r.json' failed to be written)
        write_output(Path(path).expanduser(), data)  # (NOTE [ Replacing a user's output ])
    except NotAFile as exc:
        raise ValueError(f"{option} {path} is {exc}; name a regular file") from None
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise OSError(
            f"{option} {path}: could not write it ({os_reason(exc)}); any file there is left as "
            f"it was: {'free some space, or ' if full else ''}name a file where you can write"
        ) from None


def _plot(report: Any, path: str) -> Path:
    """``report.plot(path)``, its OS error naming ``--plot`` (the path, the reason and the fix
    are in the error's own text)."""
    try:
        return Path(report.plot(path))
    except OSError as exc:
        raise OSError(f"--plot: {exc.strerror or exc}") from None


def _matplotlib_error() -> Exception | None:
    """``None`` where a plot can be drawn, else why not: matplotlib and its pyplot imported as
    ``report.plot()`` imports them (an installed matplotlib whose pyplot failed, e.g. on a
    missing shared library, ran the whole demo, then failed on its default plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot
    except Exception as exc:  # (a broken install may raise more than ImportError)
        return exc
    return None


def _not_installed(exc: Exception) -> bool:
    """Whether :func:`_matplotlib_error`'s ``exc`` means matplotlib is not installed (the fix:
    the ``plot`` extra), not an installed one that fails to import (the extra changes nothing)."""
    return isinstance(exc, ImportError) and not _installed("matplotlib")


def _need_matplotlib(path: str) -> None:
    """``--plot`` given where no plot can be drawn: one error before any work."""
    exc = _matplotlib_error()
    if exc is None:
        return
    if _not_installed(exc):
        raise ImportError(
            f"--plot {path} needs matplotlib: pip install 'bucketloader[plot]', or leave out --plot"
        )
    raise ImportError(
        f"--plot {path} needs matplotlib, which is installed but failed to import ({exc}): "
        "repair its install, or leave out --plot"
    )


def _check_plot(path: str | None) -> None:
    """``--plot`` must name an image file matplotlib can write (checked before any work)."""
    from bucketloader.analysis.report import image_path

    _check_output("--plot", path)
    if path:
        image_path(path, "--plot")  # (the rule report.plot() applies)


class _Ticker:
    """Shows elapsed time on stderr while a solve runs longer than a second."""

    def __init__(self, what: str, *, after: float = 2.0) -> None:
        self.what, self.after = what, after
        self._done = threading.Event()
        self._shown = False

    def _run(self) -> None:
        start = time.perf_counter()
        tty = sys.stderr.isatty()
        wait = self.after
        while not self._done.wait(wait):
            elapsed = time.perf_counter() - start
            end = "\r" if tty else "\n"
            print(f"{self.what}... {elapsed:.0f} s", end=end, file=sys.stderr, flush=True)
            self._shown = True
            wait = 1.0 if tty else 10.0

    def __enter__(self) -> _Ticker:
        self._start = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()
        if self._shown:
            elapsed = time.perf_counter() - self._start
            how = "done" if exc[0] is None else "stopped"  # (Ctrl-C said "done" too)
            print(f"{self.what}: {how} in {elapsed:.1f} s", file=sys.stderr)


def bucket_table(
    lengths: np.ndarray | LengthHistogram,
    boundaries: Any,
    batch_size: int | None,
    max_tokens: int | None,
) -> list[dict[str, Any]]:
    """One row per bucket; the shapes are the sampler's own (``BucketSpec`` + ``shape_table``).

    ``lengths`` may be a ``LengthHistogram`` (what ``--engine`` collects): counts and real
    elements per bucket are exact integer sums over it, and the shapes depend only on which
    buckets are occupied, which its distinct values tell.

    Example:
        >>> import numpy as np
        >>> rows = bucket_table(np.array([3, 4, 9, 10, 10]), [4, 10], 2, None)
        >>> [(r["range"], r["samples"], r["shape"], r["batches"]) for r in rows]
        [('0..4', 2, [2, 4], 1), ('5..10', 3, [2, 10], 2)]
    """
    import numpy as np

    from bucketloader.boundaries import assign_buckets
    from bucketloader.histogram import LengthHistogram
    from bucketloader.plan import BucketSpec

    b = np.asarray(boundaries, dtype=np.int64)
    hist = (
        lengths if isinstance(lengths, LengthHistogram) else LengthHistogram.from_lengths(lengths)
    )
    lengths = hist.values  # one sample per distinct length occupies the same buckets
    bucket = assign_buckets(lengths, b)
    n = np.zeros(b.size, dtype=np.int64)
    np.add.at(n, bucket, hist.counts)
    real_sums = [0] * b.size  # exact Python ints: sum of length x count per bucket
    for i, v, c in zip(bucket.tolist(), lengths.tolist(), hist.counts.tolist(), strict=True):
        real_sums[i] += v * c
    real = real_sums
    batch = np.zeros(b.size, dtype=np.int64)
    shapes: list[list[int] | None] = [None] * b.size
    steps: dict[int, int] = {}  # bucket edge -> planned batches (a plan with a batch rule only)
    if batch_size is not None or max_tokens is not None:
        too_small = b[b > max_tokens] if max_tokens is not None else b[:0]
        if too_small.size:
            raise ValueError(
                f"--max-tokens {max_tokens} is smaller than the bucket length {int(too_small[0])}, "
                f"so that bucket's batch would be empty; raise --max-tokens to at least "
                f"{int(b[-1])}"
            )
        spec = BucketSpec.build(
            lengths, boundaries=b, batch_size=batch_size, max_tokens=max_tokens, last_batch="pad"
        )
        planned = {
            int(c[0]): int(bs) for c, bs in zip(spec.cell_lengths, spec.cell_batch, strict=True)
        }
        table = {tuple(int(x) for x in s) for s in spec.shape_table().shapes}
        if max_tokens is not None:  # a one-rank sampler's even or promoted rows
            steps = _promoted_rows(b, n, spec, planned, table)
        for i, edge in enumerate(b):
            if int(edge) in planned and steps.get(int(edge), 1):  # (promoted away: no shape)
                batch[i] = planned[int(edge)]
                shape = (int(batch[i]), int(edge))
                if shape not in table:  # pragma: no cover - a plan/table mismatch
                    raise RuntimeError(f"shape {shape} missing from the sampler's shape table")
                shapes[i] = list(shape)
    rows = []
    for i, edge in enumerate(b):
        lo = 0 if i == 0 else int(b[i - 1]) + 1
        pad = int(n[i]) * int(edge) - real[i]
        rows.append(
            {
                "bucket": i,
                "range": f"{lo}..{int(edge)}",
                "samples": int(n[i]),
                "padding_ratio": pad / real[i] if real[i] else 0.0,
                "batch_size": int(batch[i]) or None,
                "batches": steps.get(int(edge), int(-(-n[i] // batch[i])) if batch[i] else None),
                "shape": shapes[i],
            }
        )
    return rows


def _promoted_rows(
    b: np.ndarray,
    n: np.ndarray,
    spec: BucketSpec,
    planned: dict[int, int],
    table: set[tuple[int, ...]],
) -> dict[int, int]:
    """A one-rank sampler's rows and steps from the true counts: even rows (NOTE [ Even
    batches ]), or leftovers promoted (NOTE [ Promotion of leftovers ]), whose rows
    ``promote_counts`` gives in both cases. ``planned`` and ``table`` are updated in place; the
    steps per occupied bucket are returned (none when nothing is promoted: the even plan)."""
    import numpy as np

    from bucketloader.plan.promote import promote_counts

    edges = [e for e in b.tolist() if e in planned]
    counts = np.array([int(n[i]) for i, e in enumerate(b.tolist()) if e in planned])
    if not edges:
        return {}
    p = promote_counts(counts, spec.cell_batch, np.array(edges)[:, None], np.array(edges))
    for j, edge in enumerate(edges):
        table.discard((planned[edge], edge))
        planned[edge] = int(p.rows[j])
        if p.steps[j]:
            table.add((planned[edge], edge))
    return {edge: int(p.steps[j]) for j, edge in enumerate(edges)} if p.num_promoted else {}


def format_table(rows: list[dict[str, Any]], batch_size: int | None, max_tokens: int | None) -> str:
    """The rows as an aligned text table, with how the batch sizes were set."""
    how = (
        f"batch_size={batch_size}"
        if batch_size is not None
        else (f"max_tokens={max_tokens}" if max_tokens is not None else None)
    )
    head = f"{'bucket':>6} {'lengths':>19} {'samples':>9} {'padding':>9}"
    if how:
        head += f" {'batches':>8}  shape (B, L)"
    lines = [head]
    for r in rows:
        line = f"{r['bucket']:>6} {r['range']:>19} {r['samples']:>9,} {r['padding_ratio']:>9.2%}"
        if how:
            shape = "-" if r["shape"] is None else f"({r['shape'][0]}, {r['shape'][1]})"
            line += f" {r['batches'] or 0:>8,}  {shape}"
        lines.append(line)
    if how:
        shapes = {tuple(r["shape"]) for r in rows if r["shape"]}
        lines.append(
            f"planned shapes ({how}, last_batch='pad'): {len(shapes)}; every epoch of a "
            "one-process BucketSampler with these boundaries yields only these (over several "
            "ranks batches are evened out per rank: the sampler's .shapes lists that plan)"
        )
    else:
        lines.append("pass --batch-size or --max-tokens to see the planned batch shapes")
    return "\n".join(lines)
