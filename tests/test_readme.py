"""The README's example runs as written, and its two commands exist."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_example_runs_and_keeps_its_shape_promise(capsys):
    blocks = _python_blocks()
    assert blocks, "README.md has no ```python example"
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    sampler = namespace["sampler"]
    assert len(sampler.shapes) == 8
    assert "(8, " in capsys.readouterr().out


def test_every_readme_snippet_runs():
    blocks = _python_blocks()
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md, python block {i}", "exec"), {"__name__": "__readme__"})


def test_readme_names_the_two_setup_commands():
    text = README.read_text()
    assert "make demo" in text and "make test" in text
    makefile = (README.parent / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, flags=re.M)
    assert re.search(r"^test:", makefile, flags=re.M)
    assert "make test" in (README.parent / ".ci" / "run").read_text()
