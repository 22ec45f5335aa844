"""The test suite's own machinery (tests/conftest.py): what it promises the runs that use it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ephemeral_ports, file_costs, free_port

# (at collection, as the other test modules do: conftest tracks the iterators of a DataLoader
# module loaded before the test starts)
from torch.utils.data import DataLoader, IterableDataset

#: A test file for a nested pytest: one failure; at exit, an exit handler registered by a test
#: and an object torn down with its module each leave a file.
_NESTED = """
import atexit, os
from pathlib import Path

OUT = Path(os.environ["NESTED_OUT"])


class _Teardown:  # (what __del__ needs, kept: the module's globals may be gone by then)
    def __init__(self):
        self.path, self.open = str(OUT / "module_teardown"), open

    def __del__(self):
        with self.open(self.path, "w") as f:
            f.write("ran")


KEPT = _Teardown()


def test_fails():
    atexit.register(lambda: (OUT / "exit_handler").write_text("ran"))
    assert False, "planted"


def test_a_forked_child_keeps_its_exit_status():
    pid = os.fork()
    if pid == 0:  # the child's exit handlers run as at an interpreter's exit, then its status
        try:
            atexit._run_exitfuncs()
        finally:
            os._exit(3)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
"""


def _nested(tmp_path: Path, *args: str, env: dict[str, str]) -> Callable[[], tuple[int, set[str]]]:
    """Start a pytest of :data:`_NESTED` (with this conftest); returns a function that waits
    for it and returns its exit status and the files it left (several run at once)."""
    tmp_path.mkdir()
    (tmp_path / "test_nested.py").write_text(_NESTED)
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), *args, str(tmp_path / "test_nested.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, **env, "NESTED_OUT": str(out),
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])},
    )  # fmt: skip

    def result() -> tuple[int, set[str]]:
        try:
            stdout, stderr = run.communicate(timeout=120)
        finally:
            run.kill()
            run.wait()
        assert "1 failed" in stdout, stdout[-2000:] + stderr[-2000:]
        return run.returncode, {p.name for p in out.iterdir()}

    return result


def test_a_worker_skips_its_teardown_and_a_nested_pytest_keeps_its_exit_status(tmp_path):
    # (the two pytests run at once)
    worker = _nested(tmp_path / "worker", "-n", "1", env={})
    nested = _nested(tmp_path / "nested", env={"PYTEST_XDIST_WORKER": "gw0"})
    # an xdist worker: the exit handlers run (the test's), the modules' teardown does not, and
    # the failure still fails the run
    status, left = worker()
    assert status == 1 and left == {"exit_handler"}, (status, left)
    # a pytest started from a worker's test inherits PYTEST_XDIST_WORKER but is no worker: its
    # teardown runs, its exit status stays its own (was 0 here: the worker's early exit)
    status, left = nested()
    assert status == 1 and left == {"exit_handler", "module_teardown"}, (status, left)


def test_a_rendezvous_port_is_free_and_one_the_kernel_never_hands_out_itself():
    # (a bind(0) port, as before: any bind(0) on the machine could take it before rank 0's
    # store listens on it, and the other ranks then wait on that listener past every timeout)
    lo, hi = ephemeral_ports()
    ports = [free_port() for _ in range(20)]
    assert all(1024 <= p < lo or hi < p for p in ports) and len(set(ports)) > 1, (ports, lo, hi)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_the_file_cost_list_names_every_test_file_and_no_other():
    # (NOTE [ The order of the test files ]: a file it does not name would go out last, after
    # the package's doctest modules, and a long one would leave the other worker idle meanwhile)
    here = Path(__file__).parent
    listed, present = set(file_costs()), {f"tests/{p.name}" for p in here.glob("test_*.py")}
    how = "measure them again: the head of tests/file_costs.txt says how"
    assert not present - listed, f"tests/file_costs.txt lacks {sorted(present - listed)}: {how}"
    assert not listed - present, f"tests/file_costs.txt names {sorted(listed - present)}: gone"
    assert all(seconds > 0 for seconds in file_costs().values())


#: Two test files of a nested pytest, named as two of the suite's files: each test writes its name
#: to the list of what ran, in order.
_ORDERED = """
import os

def _ran(name):
    import gc

    with open(os.environ["NESTED_OUT"], "a") as f:
        f.write(name + "\\n")
    with open(os.environ["NESTED_OUT"] + ".frozen", "a") as f:
        f.write(f"{{gc.get_freeze_count()}}\\n")

{tests}
"""


def test_under_dist_loadfile_the_files_go_out_most_expensive_first(tmp_path):
    # (s34: xdist put the files with the fewest tests last, whatever their cost: test_notebooks
    # with 6 tests and about 50 s ran alone while the other worker, done, waited)
    costs = file_costs()
    cheap, dear = "test_resume.py", "test_trainer.py"
    assert costs[f"tests/{dear}"] > costs[f"tests/{cheap}"]  # (else this proves nothing)
    (tmp_path / "tests").mkdir()
    for name, count in ((cheap, 3), (dear, 1)):  # (alphabetical and by count: test_resume first)
        tests = "\n".join(f"def test_{i}():\n    _ran('{name}::{i}')\n" for i in range(count))
        (tmp_path / "tests" / name).write_text(_ORDERED.format(tests=tests))
    out = tmp_path / "ran.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), "-n", "1", "--dist", "loadfile", str(tmp_path / "tests")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "NESTED_OUT": str(out),
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = out.read_text().split()
    assert ran == [f"{dear}::0", *(f"{cheap}::{i}" for i in range(3))], ran
    # (s34: and the worker froze what collection left, pytest_collection_finish: full garbage
    # collections no longer traverse it)
    frozen = [int(n) for n in Path(f"{out}.frozen").read_text().split()]
    assert len(frozen) == 4 and min(frozen) > 1000, frozen


@pytest.fixture
def _workers_at_teardown():
    """The worker processes the test records, checked at its teardown, before the autouse
    ``_worker_iterators_shut_down``'s (its fixtures are torn down first): where a collection
    there would finalise their iterator, queues first."""
    workers: list = []
    yield workers
    alive = [w.pid for w in workers if w.is_alive()]
    assert workers and not alive, f"workers {alive} not stopped when the test function returned"


def test_a_loader_a_test_leaves_in_a_reference_cycle_stops_its_workers_as_the_test_returns(
    _workers_at_teardown,
):
    # (s34: 8 tests of test_stream_source_changed left one there, by `pytest.raises(...) as
    # err`; a collection before their teardown took 10.5-11.3 s, torch's 5 s per worker)
    import multiprocessing

    class Refused(IterableDataset):
        def __iter__(self):
            raise ValueError("refused in the worker")

    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="refused in the worker") as err:
        list(DataLoader(Refused(), num_workers=2))
    _workers_at_teardown.extend(set(multiprocessing.active_children()) - before)
    assert len(_workers_at_teardown) == 2 and "refused" in str(err.value)
