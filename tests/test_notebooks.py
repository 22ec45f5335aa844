"""Execute every notebook in notebooks/ (one test each); any failing cell fails the test.

The kernel is this interpreter: a throw-away kernelspec named ``python3`` pointing at
``sys.executable`` is installed in a temporary directory put first on ``JUPYTER_PATH``, so the
notebooks run against this checkout's environment whatever ``python`` is on ``PATH``.

Under test each kernel is forked from a warm interpreter (:data:`ZYGOTE`, one per test module)
that has imported ipykernel, torch and dynamo once, instead of a fresh ``python`` that imports
them again (about 4 CPU-s a kernel, 8 with dynamo). It never runs a cell itself, so every
notebook starts from a clean kernel: its own imports still bind its names (a missing ``import``
still fails), and nothing another notebook ran is left. The kernelspec's command is a small
launcher (:data:`LAUNCHER`) that hands the connection file, its working directory, environment
and standard streams to the warm interpreter, forwards the signals jupyter_client sends it to
the kernel, and exits with the kernel's exit code; the warm interpreter kills a kernel whose
launcher is gone. ``BUCKETLOADER_TESTS_FORK=0`` starts fresh kernels instead.

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
import subprocess
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


#: What the warm interpreter imports before it forks kernels: what every kernel imports first
#: (ipykernel), what all but one notebook import (torch), and what the compiling ones import.
PRELOAD = ("ipykernel.kernelapp", "torch", "torch._dynamo")

#: The warm interpreter: ``python -c ZYGOTE <socket> <module>...`` imports the modules, prints
#: ``ready`` and serves the launchers on a Unix socket: for each request (the launcher's
#: standard streams as file descriptors, then one JSON line: argv, cwd, env) it forks a kernel,
#: answers with its pid, and later with its exit code. EOF on stdin ends it (and its kernels).
ZYGOTE = r"""
import json, os, random, select, signal, socket, sys, traceback
path = sys.argv[1]
for name in sys.argv[2:]:
    __import__(name)
if sys.path and sys.path[0] == "":  # as ipykernel_launcher: the kernel puts it back
    del sys.path[0]
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen()
print("ready", flush=True)
kernels = {}  # launcher connection -> kernel pid
orphans = set()  # kernels whose launcher is gone (killed), still to reap


def kernel(conn, fds, request):
    code = 1
    try:
        server.close()
        for other in kernels:
            other.close()
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        random.seed()  # a fresh interpreter's unseeded generators differ in every kernel
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        sys.argv = [sys.argv[0], *request["argv"]]
        from ipykernel import kernelapp

        # (its default was read from the warm interpreter's environment, which has none)
        kernelapp.launch_new_instance(parent_handle=int(os.environ.get("JPY_PARENT_PID") or 0))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()  # as the interpreter's exit would (IPython's history)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(conn):
    data, fds, _, _ = socket.recv_fds(conn, 1, 3)
    with conn.makefile("rb") as f:
        request = json.loads(f.readline())
    pid = os.fork()
    if pid == 0:
        kernel(conn, fds, request)
    for fd in fds:
        os.close(fd)
    kernels[conn] = pid
    conn.sendall(b"%d\n" % pid)


while True:
    while True:  # reap: tell each exited kernel's launcher its exit code
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not pid:
            break
        orphans.discard(pid)
        for conn, kid in list(kernels.items()):
            if kid == pid:
                try:
                    conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
                except OSError:
                    pass
                conn.close()
                del kernels[conn]
    ready, _, _ = select.select([server, sys.stdin, *kernels], [], [], 0.05)
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
        break
    if server in ready:
        serve(server.accept()[0])
    for conn in ready:
        if conn in kernels and not conn.recv(1):  # the launcher is gone: so is its kernel
            os.kill(kernels[conn], signal.SIGKILL)
            orphans.add(kernels.pop(conn))
            conn.close()
for pid in [*kernels.values(), *orphans]:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
os.unlink(path)
"""

#: The kernelspec's command: ``python -S launch.py <socket> -f <connection file>`` asks the warm
#: interpreter for a kernel, forwards signals to it and exits with its exit code.
LAUNCHER = r"""
import json, os, signal, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(sys.argv[1])
socket.send_fds(conn, [b"k"], [0, 1, 2])
request = {"argv": sys.argv[2:], "cwd": os.getcwd(), "env": dict(os.environ)}
conn.sendall(json.dumps(request).encode() + b"\n")
answers = conn.makefile("rb")
pid = int(answers.readline())
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, lambda signum, frame: os.kill(pid, signum))
line = answers.readline()  # the kernel's exit code (none: the warm interpreter is gone)
code = int(line) if line.strip() else 1
if code < 0:  # killed by a signal: so is this process
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("jupyter")
    zygote = _start_zygote(root)
    _install_kernelspec(root, None if zygote is None else root / "zygote.sock")
    old = os.environ.get("JUPYTER_PATH")
    monkeypatch_module.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(root), old])))
    yield root
    if zygote is not None:
        zygote.stdin.close()  # type: ignore[union-attr]
        try:
            zygote.wait(timeout=30)
        except subprocess.TimeoutExpired:
            zygote.kill()
            zygote.wait()


def _start_zygote(root: Path) -> subprocess.Popen | None:
    """The warm interpreter the kernels fork from (``None``: fresh kernels)."""
    if os.environ.get("BUCKETLOADER_TESTS_FORK", "1") == "0" or not hasattr(os, "fork"):
        return None
    proc = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, str(root / "zygote.sock"), *PRELOAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if proc.stdout.readline().strip() != b"ready":  # type: ignore[union-attr]
        proc.kill()
        proc.wait()
        return None
    return proc


def _install_kernelspec(root: Path, zygote: Path | None = None) -> None:
    """A kernelspec ``python3`` under ``root`` whose kernel is this interpreter (forked from the
    warm interpreter listening on ``zygote``, if given)."""
    spec = root / "kernels" / "python3"
    spec.mkdir(parents=True)
    if zygote is None:
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    else:
        (spec / "launch.py").write_text(LAUNCHER)
        argv = [sys.executable, "-S", str(spec / "launch.py"), str(zygote)]
        argv += ["-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": argv,
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
