"""Every ```python block of every docs page runs as written.

The blocks of one page run in order in one fresh namespace (a page may build on its earlier
blocks), from the repository root. Nothing is skipped: a page that needs an optional package
imports one from the dev extra.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
import sys
import types
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
    # A module of its own, importable by name: torch 2.11's dynamo imports a compiled
    # function's module to read its globals (a bare namespace failed there on a CUDA machine).
    module = types.ModuleType(f"__docs_{page.stem}__")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
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


#: A decimal figure of docs/benchmarks.md (a version such as "torch 2.13" is not one).
FIGURE = re.compile(r"(?<![\w.])(?<!torch )(?<!Python )(\d[\d,]*\.\d+)(?!\d)(%?)")
#: A count of docs/benchmarks.md with a thousands separator (2,916 rows; 4,537 MB): in a results
#: file the section links, with or without the separators. (Counts are often the benchmark's own
#: parameters, such as rows of 1,024, so this checks only that it is there, not where.)
COUNT = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+)(?![\d.]|,\d)")
#: Figures of the machine's load ("at load 5.6-7.5"): the start and the end of a run, checked
#: to be in the results file but not beside the statement's other figures.
LOAD = re.compile(r"\bload(?: average)? ([\d.,]+)(?:-([\d.,]+))?")
#: Lines apart within which a statement's figures count as read together (or one section).
BESIDE = 2


def _statements(section: str) -> list[str]:
    """The figures a page puts together: each table row, each sentence of prose."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", section):
        if para.lstrip().startswith("|"):
            out += para.splitlines()
        else:
            out += re.split(r"(?<=[.;:!?])\s+(?=[A-Z(`*\[])", para.replace("\n", " "))
    return out


def _where(lines: list[str], number: str, percent: str) -> set[int]:
    """Lines of ``lines`` that hold ``number`` (a percentage also as a fraction: 7.2% as
    0.072) as a number of its own, or rounded from a longer one (36.8 in 36.84, not in 136.8)."""
    forms = [number] + ([f"{float(number.replace(',', '')) / 100:.3f}"] if percent else [])
    found = re.compile("|".join(rf"(?<![\d.]){re.escape(f)}" for f in forms))
    return {i for i, line in enumerate(lines) if found.search(line)}


def test_the_benchmarks_page_copies_its_figures_from_the_results_files():
    """Each decimal figure of a section of docs/benchmarks.md is in a results file that section
    links, as a number of its own, and beside another figure of its statement (its table row
    or sentence: within BESIDE lines, or in the same section of the results file): rerun a
    benchmark and this names the figures to update. Found anywhere in the file was not enough
    (a wrong 36.9 matched an unrelated table of compile_e2e.md, and 0.96-0.99x two stale runs
    back matched 0.96% and 0.99x elsewhere)."""
    stale = _stale_figures((DOCS / "benchmarks.md").read_text(encoding="utf-8"))
    assert not stale, "\n".join(stale)


def test_the_figure_check_catches_a_figure_found_only_elsewhere_in_the_file():
    """s8-rev5's deliberate slip, 36.9 for 36.8 in the compile sentence, passed: 36.9 is in
    another table of compile_e2e.md. (The check also found the collator's 0.96-0.99x of a run
    two reruns back, whose figures were elsewhere in the packing results.)"""
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert "precompile 36.8 s" in text
    stale = _stale_figures(text.replace("precompile 36.8 s", "precompile 36.9 s"))
    assert [x.split(": ")[1].split()[0] for x in stale] == ["36.9"], stale


def test_the_figure_check_catches_a_count_no_results_file_states():
    """s10's review: BFD's 2,916 rows and ``search="always"``'s 2,873 at GSM8K in rows of 256
    were in no results file (packing.md has 2,870 / 2,872 / 2,881), and the check read only
    decimals. A count there, with or without its separators, passes."""
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert "(GSM8K at 256: 0.39%, 2,881 rows" in text
    assert not _stale_figures(text)
    slipped = text.replace("(GSM8K at 256: 0.39%, 2,881 rows", "(GSM8K at 256: 0.39%, 2,891 rows")
    assert [x.split(": ")[1].split()[0] for x in _stale_figures(slipped)] == ["2,891"]


def test_the_trainer_page_copies_the_stand_in_cost_from_its_results_file():
    """s33-tidyA: docs/trainer.md said the packing probe's small copy of a model runs on the CPU
    in "milliseconds"; its benchmark (benchmarks/results/probe_stand_in.md) measured 0.16 s to
    build a 1.1B-shaped copy and about 2 s for a 72B-shaped one. The page's timings cite it, and
    are checked against it as benchmarks.md's figures are."""
    text = (DOCS / "trainer.md").read_text(encoding="utf-8")
    cited = [p for p in re.split(r"\n\s*\n", text) if "results/probe_stand_in.md" in p]
    assert len(cited) == 1, "docs/trainer.md gives the stand-in's cost without its results file"
    assert "millisecond" not in cited[0]
    timings = [s for s in _statements(cited[0]) if re.search(r"\d s\b", s)]
    assert timings and FIGURE.search(" ".join(timings))
    section = "## stand-in (benchmarks/results/probe_stand_in.md)\n" + " ".join(timings)
    assert not _stale_figures(section)
    assert _stale_figures(section.replace("0.139 s", "1.39 s"))  # (the check can fail)


def _stale_figures(text: str) -> list[str]:
    """The figures of ``text`` (docs/benchmarks.md) that its results files do not back."""
    results = ROOT / "benchmarks" / "results"
    stale = []
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0]
        names = set(re.findall(r"\(benchmarks/results/(\w+\.md)\)", section))
        assert names, f"section {title!r} links no results file"
        source = "\n".join((results / n).read_text(encoding="utf-8") for n in sorted(names))
        lines = source.replace("×", "x").splitlines()
        part = list(itertools.accumulate(line.startswith("#") for line in lines))
        for statement in _statements(section):
            loads = {x for m in LOAD.finditer(statement) for x in m.groups() if x}
            for count in COUNT.findall(statement):
                forms = "|".join(re.escape(f) for f in (count, count.replace(",", "")))
                if not re.search(rf"(?<![\d.,])(?:{forms})(?![\d]|,\d)", source):
                    stale.append(f"{title}: {count} not in {sorted(names)}")
            found = {f: _where(lines, *f) for f in FIGURE.findall(statement)}
            for (number, percent), at in found.items():
                others = [j for f, js in found.items() if f != (number, percent) for j in js]
                beside = any(abs(i - j) <= BESIDE or part[i] == part[j] for i in at for j in others)
                if not at:
                    stale.append(f"{title}: {number}{percent} not in {sorted(names)}")
                elif others and not beside and number not in loads:
                    stale.append(
                        f"{title}: {number}{percent} is in {sorted(names)} only apart from the "
                        f"other figures of {statement[:60]!r}..."
                    )
    return stale


#: A path on the machine the project was developed on (notes and scripts outside the repository):
#: a clone elsewhere has none of it. (Spelled in pieces, so this file does not cite one.)
MACHINE_PATH = re.compile(rb"(?<![\w.~-])/" + b"work" + rb"/")
#: A script or results file of the repository that a page cites (not a placeholder such as
#: ``benchmarks/<name>.py`` or a glob such as ``benchmarks/results/*.png``).
CITED = re.compile(r"\bbenchmarks/(?:results/[\w][\w.-]*\.\w+|\w[\w/]*\.py)\b")


def _repository_files(root: Path = ROOT) -> list[Path]:
    """The files of the repository at ``root``: ``git ls-files`` where ``root`` is the top of
    a git checkout, else (an unpacked archive, no git, or a copy inside another checkout) every
    file under it but what a checkout ignores: builds, caches, virtual environments (a folder
    with a ``pyvenv.cfg``, under any name; their scripts name the interpreter's absolute path)."""
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            check=True,
            text=True,
        ).stdout.strip()
        if Path(top).resolve() == root.resolve():
            out = subprocess.run(
                ["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True
            ).stdout
            return [root / name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        pass
    skip = {".git", ".tox", ".nox", ".hypothesis", "site", "build", "dist", "htmlcov"}
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(
            d
            for d in dirs
            if not (d in skip or d.endswith(("_cache", "__pycache__", ".egg-info")))
            and not (Path(folder) / d / "pyvenv.cfg").is_file()
        )
        files += [Path(folder) / n for n in sorted(names) if n != ".git"]  # (a worktree's)
    return files


def _machine_paths(files: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line: text`` (relative to ``root``) of every line of ``files`` that cites a path
    of the machine."""
    found = []
    for path in files:
        if not path.is_file():  # (deleted in the work tree, not yet in the index)
            continue
        for i, line in enumerate(path.read_bytes().splitlines(), 1):
            if MACHINE_PATH.search(line):
                text = line.decode("utf-8", "replace").strip()[:120]
                found.append(f"{path.relative_to(root)}:{i}: {text}")
    return found


def test_no_file_of_the_repository_cites_a_path_of_the_development_machine():
    """Notes and scripts cited by an absolute path (a development machine's notes directory)
    are missing from every other clone: a figure must come from a script in ``benchmarks/``
    that writes ``benchmarks/results/``, a test's history from the repository itself."""
    files = _repository_files()
    assert ROOT / "tests" / "test_docs.py" in files and len(files) > 50
    found = _machine_paths(files)
    assert not found, "\n".join(found)


def test_the_path_check_catches_a_cited_note(tmp_path):
    note = tmp_path / "page.md"
    note.write_text("Measured by `/" + "work/notes/s9-x.py`; the rest /home/u/work/x.py\n")
    (tmp_path / "ok.md").write_text("A work/notes folder of the repository, /workspace/x.\n")
    found = _machine_paths([note, tmp_path / "ok.md"], tmp_path)
    assert len(found) == 1 and "s9-x.py" in found[0], found


def _cited(text: str) -> set[str]:
    return set(CITED.findall(text))


@pytest.mark.parametrize(
    "page",
    [ROOT / "README.md", *PAGES],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_benchmark_a_page_cites_exists(page):
    """A page that cites ``benchmarks/x.py`` or ``benchmarks/results/x.md`` points a reader to
    a file of the repository."""
    missing = sorted(
        c for c in _cited(page.read_text(encoding="utf-8")) if not (ROOT / c).is_file()
    )
    assert not missing, missing


def test_the_citation_check_reads_scripts_and_results_files():
    text = (
        "`python benchmarks/small_costs.py --only packing` writes "
        "[it](benchmarks/results/small_costs.md), and `benchmarks/<name>.py` writes "
        "`benchmarks/results/<name>.md`, plots `benchmarks/results/*.png`; benchmarks/gone.py."
    )
    assert _cited(text) == {
        "benchmarks/small_costs.py",
        "benchmarks/results/small_costs.md",
        "benchmarks/gone.py",
    }


def test_the_file_list_outside_a_checkout_leaves_out_environments_and_builds(tmp_path):
    """An unpacked archive (no git) in a folder under the same path as the development
    machine's: its virtual environment's scripts start with ``#!/<that path>/venv/bin/python``,
    which are not files of the repository."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("A page.\n")
    for env in ("venv", "env-3.11"):
        (tmp_path / env / "bin").mkdir(parents=True)
        (tmp_path / env / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (tmp_path / env / "bin" / "pip").write_text("#!/" + "work/x/venv/bin/python\n")
    (tmp_path / "pkg.egg-info").mkdir()
    (tmp_path / "pkg.egg-info" / "SOURCES.txt").write_text("docs/page.md\n")
    files = _repository_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["docs/page.md"]


def test_the_file_list_of_an_untracked_copy_inside_another_checkout_is_its_files(tmp_path):
    """A copy unpacked inside some other git checkout, untracked there: ``git ls-files`` lists
    nothing of it (the check would pass on nothing, or fail its count); the walk lists it."""
    try:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git")
    root = tmp_path / "unpacked"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "page.md").write_text("A page.\n")
    assert _repository_files(root) == [root / "docs" / "page.md"]


def test_the_streams_page_quotes_the_lengths_digest_cost_of_its_results_file():
    """docs/streams.md's cost of the lengths digest (per held count) is the "digest alone" of
    benchmarks/results/stream_state_cost.md: s33's rerun made them 45 and 709 us, and the page
    still said 34 and 697 (s33-tidyB). The benchmarks page's figure check does not read it."""
    text = " ".join((DOCS / "streams.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"\((\d+) us for ([\d,]+) held samples, ([\d,]+) us for ([\d,]+),", text)
    assert quoted, "the cost sentence of docs/streams.md moved: update this test"
    results = (ROOT / "benchmarks" / "results" / "stream_state_cost.md").read_text("utf-8")
    alone = {  # held -> the digest alone (us), from the first table's rows
        m[1]: m[2]
        for m in re.finditer(
            r"^\| [^|]+ \| ([\d,]+) \| [\d,]+ \| [\d,]+ \| ([\d,]+) \|", results, re.M
        )
    }
    us1, held1, us2, held2 = quoted.groups()
    assert (alone.get(held1), alone.get(held2)) == (us1, us2), alone
