"""Every ```python block of every docs page runs as written.

The blocks of one page run in order in one fresh namespace (a page may build on its earlier
blocks), from the repository root. Nothing is skipped: a page that needs an optional package
imports one from the dev extra.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```\s*$", flags=re.S | re.M)

matplotlib.use("Agg")  # a page that plots writes a file, never opens a window


def python_blocks(path: Path) -> list[str]:
    return FENCE.findall(path.read_text(encoding="utf-8"))


def test_the_docs_have_pages_with_code():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"index.md", "getting-started.md", "trainer.md", "benchmarks.md"} <= names
    assert sum(len(python_blocks(p)) for p in PAGES) >= 15


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_python_block_of_the_page_runs(page, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "cache"))
    namespace: dict = {"__name__": f"__docs_{page.stem}__"}
    for i, block in enumerate(python_blocks(page)):
        code = compile(block, f"{page.relative_to(ROOT)} (python block {i + 1})", "exec")
        exec(code, namespace)


def test_every_old_readme_block_has_a_home_in_the_docs():
    """The README's examples moved to the docs: each block the README had before the site
    (recognised by a line of it) is still a python block of some page."""
    blocks = "\n".join(b for p in PAGES for b in python_blocks(p))
    for line in (
        "sampler = BucketSampler(lengths, num_buckets=8, max_tokens=128_000)",
        'spec = BucketSpec.build({"src": src, "tgt": tgt}, num_buckets=6, max_tokens=8192,',
        "restored = restore_order(torch.cat(outputs), torch.cat(index), num_samples=len(lengths))",
        "sampler = PackSampler(lengths, row_length=1024, batch_size=8)",
        "report = precompile(step, sampler, example=dataset, cache=CompileCache(",
        'assert (report.totals["too_short"], report.totals["too_long"]) == (2, 1)',
    ):
        assert line in blocks, line


def _load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_page_missing_from_the_nav_is_listed_under_more(tmp_path):
    hooks = _load_hooks()
    (tmp_path / "index.md").write_text("# Home\n")
    (tmp_path / "listed.md").write_text("# Listed\n")
    (tmp_path / "new-topic.md").write_text("Intro.\n\n# Padding and the Pareto front\n")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "page.md").write_text("no heading\n")
    nav = [{"Home": "index.md"}, {"Guides": [{"Listed": "listed.md"}]}, {"Benchmarks": []}]
    config = SimpleNamespace(nav=nav, docs_dir=str(tmp_path))
    hooks.on_config(config)
    more = next(item["More"] for item in nav if "More" in item)
    assert more == [{"page": "deep/page.md"}, {"Padding and the Pareto front": "new-topic.md"}]
    results = nav[2]["Benchmarks"][0]["Results files"]
    expected = sorted(p.name for p in (ROOT / "benchmarks" / "results").glob("*.md"))
    assert [next(iter(r)) for r in results] == expected
    hooks.on_config(config)  # idempotent: nothing listed twice
    assert next(item["More"] for item in nav if "More" in item) == more


def test_the_site_nav_lists_every_page_it_names():
    """Every page mkdocs.yml's nav names exists (the strict build checks the rest)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    named = re.findall(r":\s+([\w/.-]+\.md)\s*$", text, flags=re.M)
    assert named and all((DOCS / page).is_file() for page in named), named


def test_the_api_reference_reads_sphinx_habits_as_markdown():
    spec = importlib.util.spec_from_file_location("docs_griffe", DOCS / "_griffe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (
        "Loaded on access::\n\n    code\n"
        "See :class:`~a.b.C`, :meth:`x <a.y>`.\nExample:\n    >>> 1\n"
    )
    assert module.rewrite(text) == (
        "Loaded on access:\n\n    code\nSee `C`, `x`.\nExamples:\n    >>> 1\n"
    )


def test_the_benchmarks_page_copies_its_figures_from_the_results_files():
    """Each decimal figure of a section of docs/benchmarks.md is in a results file that section
    links (a percentage may appear there as a fraction: 7.2% as 0.072): rerun a benchmark and
    this names the figures to update."""
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    results = ROOT / "benchmarks" / "results"
    stale = []
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        names = set(re.findall(r"\(benchmarks/results/(\w+\.md)\)", section))
        assert names, f"section {section.splitlines()[0]!r} links no results file"
        source = "\n".join((results / n).read_text(encoding="utf-8") for n in sorted(names))
        source = source.replace("×", "x")
        for number, percent in re.findall(r"(?<![\w.])(\d[\d,]*\.\d+)(?!\d)(%?)", section):
            fraction = f"{float(number.replace(',', '')) / 100:.3f}" if percent else None
            if number not in source and (fraction is None or fraction not in source):
                stale.append(f"{section.splitlines()[0]}: {number}{percent} not in {sorted(names)}")
    assert not stale, "\n".join(stale)
