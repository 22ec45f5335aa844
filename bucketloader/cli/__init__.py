"""The ``bucketloader`` command line: ``report``, ``precompute`` and ``demo``."""

from bucketloader.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
