"""Execute every notebook in notebooks/ (one test each); any failing cell fails the test.

The kernel is this interpreter: a throw-away kernelspec named ``python3`` pointing at
``sys.executable`` is installed in a temporary directory put first on ``JUPYTER_PATH``, so the
notebooks run against this checkout's environment whatever ``python`` is on ``PATH``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (bucketloader tests)",
                "language": "python",
            }
        )
    )
    old = os.environ.get("JUPYTER_PATH")
    monkeypatch_module.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(root), old])))
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 2, NOTEBOOKS


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_without_error(path, kernel_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
