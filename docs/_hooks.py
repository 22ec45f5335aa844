"""MkDocs hooks for the bucketloader site (listed under ``hooks:`` in mkdocs.yml; not a page).

1. Every ``docs/**/*.md`` page that ``nav:`` does not list is appended to the nav under "More",
   titled by its first ``# `` heading, so a new page builds and shows up without a nav edit (and
   ``mkdocs build --strict`` never fails on it). Placing it in a section is a one-line nav edit.
2. Every ``benchmarks/results/*.md`` file becomes a page ``benchmarks/results/<name>.md`` of the
   site (its plots, ``benchmarks/results/*.png``, come along), generated at build time from the
   file itself (never copied by hand, so the figures on the site are the ones the benchmark
   scripts wrote), listed under "Benchmarks > Results files" in the nav by file name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RESULTS_URI = "benchmarks/results"
SKIP = {"_hooks.py"}


def _listed(nav: Any) -> set[str]:
    """Every page path a nav (a list of strings or {title: path-or-list} dicts) lists."""
    out: set[str] = set()
    items = nav if isinstance(nav, list) else [nav]
    for item in items:
        if isinstance(item, str):
            out.add(item)
        elif isinstance(item, dict):
            for value in item.values():
                out |= _listed(value)
    return out


def _title(path: Path) -> str:
    match = re.search(r"^# +(.+?)\s*$", path.read_text(encoding="utf-8"), flags=re.M)
    return match.group(1).strip() if match else path.stem.replace("-", " ").replace("_", " ")


def _section(nav: list[Any], title: str) -> list[Any] | None:
    for item in nav:
        if isinstance(item, dict) and title in item and isinstance(item[title], list):
            return item[title]
    return None


def on_config(config: Any) -> Any:
    nav = config.nav
    if nav is None:  # no nav: mkdocs lists every page itself
        return config
    docs = Path(config.docs_dir)
    listed = _listed(nav)
    benchmarks = _section(nav, "Benchmarks")
    if benchmarks is not None:
        results = _section(benchmarks, "Results files")
        if results is None:
            results = []
            benchmarks.append({"Results files": results})
        for path in sorted(RESULTS.glob("*.md")):
            uri = f"{RESULTS_URI}/{path.name}"
            if uri not in listed:
                results.append({path.name: uri})
    extra = [
        {_title(path): path.relative_to(docs).as_posix()}
        for path in sorted(docs.rglob("*.md"))
        if path.relative_to(docs).as_posix() not in listed
    ]
    if extra:
        more = _section(nav, "More")
        if more is None:
            more = []
            nav.append({"More": more})
        more.extend(extra)
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File  # here: on_config is testable without mkdocs

    for path in sorted(RESULTS.iterdir()):  # the pages and what they show (plots)
        uri = f"{RESULTS_URI}/{path.name}"
        if path.is_file() and not path.name.startswith(".") and not files.get_file_from_path(uri):
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
