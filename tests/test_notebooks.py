"""Execute every notebook in notebooks/ (one test each); any failing cell fails the test.

The kernel is this interpreter: a throw-away kernelspec named ``python3`` pointing at
``sys.executable`` is installed in a temporary directory put first on ``JUPYTER_PATH``, so the
notebooks run against this checkout's environment whatever ``python`` is on ``PATH``.

Under test, in a notebook that compiles, one cell (:data:`PREAMBLE`) runs before its own
cells: it makes ``torch.compile`` default to ``backend="aot_eager"`` (Dynamo's full-graph capture
and AOTAutograd's functionalized graph, without inductor's C++ code generation); a call that names
its backend keeps it. Every cell of the notebook still runs and must succeed (full-graph captures,
its own asserts); the C++ kernels inductor generates for the same function are checked by a
real-inductor test (``tests/test_static.py::test_compiled_static_shapes_match_eager`` compiles
``static.balanced_subsample`` with ``fullgraph=True, dynamic=False``, as notebook 04 does). The
notebooks as stored, and as a reader runs them, use inductor: ``python tests/test_notebooks.py``
re-executes them without the preamble and saves their outputs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))

#: The cell the tests run first in every notebook's kernel (see the module docstring).
PREAMBLE = """\
# tests/test_notebooks.py: torch.compile defaults to backend="aot_eager" under test
import torch as _torch

def _aot_eager_by_default(compile_):
    def compile(*args, **kwargs):
        kwargs.setdefault("backend", "aot_eager")
        return compile_(*args, **kwargs)
    return compile

_torch.compile = _aot_eager_by_default(_torch.compile)
del _aot_eager_by_default, _torch
"""


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("jupyter")
    _install_kernelspec(root)
    old = os.environ.get("JUPYTER_PATH")
    monkeypatch_module.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(root), old])))
    return root


def _install_kernelspec(root: Path) -> None:
    """A kernelspec ``python3`` under ``root`` whose kernel is this interpreter."""
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
    pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    if any("compile(" in cell.source for cell in nb.cells if cell.cell_type == "code"):
        nb.cells.insert(0, nbformat.v4.new_code_cell(PREAMBLE))
    _execute(nb, path)  # raises CellExecutionError naming the cell on any error
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")


def _execute(nb, path: Path) -> None:
    import nbclient

    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()


if __name__ == "__main__":  # re-execute the notebooks as a reader runs them, and save them
    import tempfile

    import nbformat

    root = Path(tempfile.mkdtemp(prefix="jupyter"))
    _install_kernelspec(root)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        filter(None, [str(root), os.environ.get("JUPYTER_PATH")])
    )
    for path in [Path(a).resolve() for a in sys.argv[1:]] or NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        _execute(nb, path)
        nbformat.write(nb, path)
        print("executed and saved", path.name)
