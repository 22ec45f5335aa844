"""The ``bucketloader`` command: ``report``, ``precompute`` and ``demo``.

Every bad input (missing file, unknown column, a non-integer or negative length, an empty file,
an unknown strategy, a bad option) prints one ``bucketloader: error: ...`` line and exits with
status 2, without a traceback.

Example:
    >>> main(["report", "--help"])  # doctest: +ELLIPSIS
    usage: bucketloader report ...
    0
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error style of the rest of the command."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise _UsageError(f"{message} (see {self.prog} --help)")


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``bucketloader`` (three subcommands)."""
    p = _Parser(
        prog="bucketloader",
        description="Static-shape length bucketing: see how dynamic your data is, precompute "
        "boundaries, or run the demo.",
    )
    sub = p.add_subparsers(dest="command", metavar="{report,precompute,demo}", parser_class=_Parser)
    inputs = "FILE: .txt, .npy, .csv, .tsv, .jsonl, .parquet or a datasets save_to_disk directory"

    r = sub.add_parser(
        "report",
        help="how dynamic are the lengths; padding per strategy and k",
        usage="bucketloader report FILE [--column C] [-k K ...] [--plot out.png] [options]",
    )
    r.add_argument("file", metavar="FILE", help=inputs)
    r.add_argument("--column", help="column (index for .txt/.npy, name otherwise)")
    r.add_argument("-k", "--num-buckets", type=int, nargs="+", default=[4, 8, 16, 32])
    r.add_argument("--strategies", nargs="+", help="strategies to compare (default: all fast)")
    r.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="batch size of the dynamic-padding baseline (default 32)",
    )
    r.add_argument("--padding-target", type=float, default=0.05, help="default 0.05 (5%%)")
    r.add_argument("--plot", metavar="PNG", help="write the report's plot here")
    r.add_argument("--json", metavar="OUT", help="write the report as JSON here")

    c = sub.add_parser(
        "precompute",
        help="solve boundaries once and store them in the cache",
        usage="bucketloader precompute FILE --strategy S -k K [--max-tokens T | --batch-size B] "
        "[--cache-dir D] [--json out.json] [options]",
    )
    c.add_argument("file", metavar="FILE", help=inputs)
    c.add_argument("--column", help="column (index for .txt/.npy, name otherwise)")
    c.add_argument("--strategy", default="optimal", help="strategy name (default: optimal)")
    c.add_argument("-k", "--num-buckets", type=int, required=True, help="shape budget k")
    size = c.add_mutually_exclusive_group()
    size.add_argument("--max-tokens", type=int, help="padded elements per batch: B = T // b")
    size.add_argument("--batch-size", type=int, help="the same batch size for every bucket")
    c.add_argument("--multiple-of", type=int, default=1, help="boundaries on multiples of this")
    c.add_argument("--cost", default="linear", help="linear (default) or quadratic")
    c.add_argument(
        "--cache-dir",
        help="cache directory (default: $BUCKETLOADER_CACHE_DIR or the user cache directory)",
    )
    c.add_argument("--json", metavar="OUT", help="write boundaries, shapes and the entry here")

    d = sub.add_parser("demo", help="the whole idea on LibriSpeech lengths, in under a minute")
    d.add_argument("-k", "--num-buckets", type=int, default=16)
    d.add_argument("--batch-size", type=int, default=32)
    d.add_argument("--max-batches", type=int, default=20, help="batches materialised per loader")
    d.add_argument("--plot", metavar="PNG", default="bucketloader-demo.png")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        if args.command == "report":
            return _report(args)
        if args.command == "precompute":
            return _precompute(args)
        from bucketloader._demo import run_demo

        return run_demo(
            num_buckets=args.num_buckets,
            batch_size=args.batch_size,
            max_batches=args.max_batches,
            plot=args.plot,
        )
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except _UsageError as exc:
        return _fail(str(exc))
    except (ValueError, TypeError, KeyError, OSError, ImportError) as exc:
        return _fail(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc))


def _fail(message: str) -> int:
    print(f"bucketloader: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _report(args: argparse.Namespace) -> int:
    from bucketloader._io import read_lengths
    from bucketloader.report import analyze

    lengths = read_lengths(args.file, args.column)
    report = analyze(
        lengths,
        num_buckets=args.num_buckets,
        strategies=args.strategies,
        batch_size=args.batch_size,
        padding_target=args.padding_target,
    )
    object.__setattr__(report, "source", Path(args.file).name)
    print(report)
    if args.plot:
        print(f"\nplot written to {report.plot(args.plot)}")
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
        print(f"report written to {args.json}")
    return 0


def _precompute(args: argparse.Namespace) -> int:
    from bucketloader._io import read_lengths
    from bucketloader.cache import BucketCache
    from bucketloader.histogram import LengthHistogram
    from bucketloader.solve import resolve_params, solve_boundaries
    from bucketloader.strategies import resolve_strategy

    name, fn = resolve_strategy(args.strategy)  # unknown names fail before reading the file
    lengths = read_lengths(args.file, args.column)
    hist = LengthHistogram.from_lengths(lengths)
    cache = BucketCache(args.cache_dir)
    params = resolve_params(
        fn, args.num_buckets, {"cost": args.cost, "multiple_of": args.multiple_of}
    )
    key = cache.key(hist, name, params)
    label = f"strategy {name!r}, k={args.num_buckets}, {hist.num_values:,} distinct lengths"
    with _Ticker(f"solving ({label})"):
        sol = solve_boundaries(
            hist,
            args.num_buckets,
            strategy=name,
            cache=cache,
            cost=args.cost,
            multiple_of=args.multiple_of,
        )
    where = cache.path_for(key)
    state = "hit" if cache.hits else f"miss, solved in {sol.solve_seconds:.3f} s"
    stored = where.exists()
    print(f"{Path(args.file).name}: {hist.num_samples:,} lengths, {label}")
    print(f"cache: {state}; key {key[:16]}… {'at ' + str(where) if stored else '(not stored)'}")
    print(f"status: {sol.status}; padding {sol.padding_ratio:.2%} (pad / real elements)")
    print(f"boundaries: {[int(b) for b in sol.boundaries]}")
    from bucketloader._precompute import bucket_table, format_table

    rows = bucket_table(lengths, sol.boundaries, args.batch_size, args.max_tokens)
    print(format_table(rows, args.batch_size, args.max_tokens))
    if args.json:
        out = {
            "file": str(args.file),
            "key": key,
            "cache_entry": str(where) if stored else None,
            "solution": sol.to_dict(),
            "buckets": rows,
            "shapes": sorted({tuple(r["shape"]) for r in rows if r["shape"]}),
        }
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
        print(f"written to {args.json}")
    return 0


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
            print(f"{self.what}: done in {elapsed:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
