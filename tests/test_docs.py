"""Every ```python block of every docs page runs as written.

The blocks of one page run in order in one fresh namespace (a page may build on its earlier
blocks), from the repository root. Nothing is skipped: a page that needs an optional package
imports one from the dev extra.
"""

from __future__ import annotations

import re
from pathlib import Path

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
