"""A pytest plugin that records each test's CPU time, for comparing the suite's cost on a busy
machine (wall times there measure the neighbours as much as the tests).

Per test: wall seconds, CPU seconds of the pytest process, and CPU seconds of its process tree
(reaped children, and every live descendant's own and reaped children's time, read from /proc:
gloo ranks, notebook kernels, Ray and Spark processes, compile workers). Linux only.

Usage::

    BUCKETLOADER_TEST_CPU=/tmp/cpu.tsv PYTHONPATH=$PWD:$PWD/tests \\
        python -m pytest -p cputime tests/test_distributed.py
    python tests/cputime.py /tmp/cpu.tsv        # per file: tests, wall, cpu, children
    python tests/cputime.py --costs /tmp/cpu.tsv > tests/file_costs.txt   # (conftest's order)

Under ``pytest -n`` each worker writes its own file, ``/tmp/cpu.tsv.gw0``, ``.gw1``, ...
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict

import pytest

_ROWS: list[tuple[str, float, float, float]] = []


def _tree_seconds() -> float:
    """CPU seconds of every live descendant of this process (with their reaped children)."""
    me, procs = os.getpid(), {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            rest = stat[stat.rindex(")") + 2 :].split()
            procs[int(d)] = (int(rest[1]), sum(int(x) for x in rest[11:15]))
    kids: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in procs.items():
        kids[ppid].append(pid)
    total, stack = 0, list(kids[me])
    while stack:
        pid = stack.pop()
        total += procs[pid][1]
        stack.extend(kids[pid])
    return total / os.sysconf("SC_CLK_TCK")


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime + _tree_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    wall, (own, tree) = time.perf_counter(), _cpu()
    yield
    own2, tree2 = _cpu()
    _ROWS.append((item.nodeid, time.perf_counter() - wall, own2 - own, tree2 - tree))


def pytest_sessionfinish(session):
    out = os.environ.get("BUCKETLOADER_TEST_CPU")
    if out and os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n: one file per worker
        out = f"{out}.{os.environ['PYTEST_XDIST_WORKER']}"
    if out and _ROWS:
        with open(out, "w") as f:
            f.writelines(f"{n}\t{w:.3f}\t{c:.3f}\t{k:.3f}\n" for n, w, c, k in _ROWS)


def summary(paths: list[str]) -> str:
    """Per file, most expensive first: tests, wall, cpu (pytest), children (its processes)."""
    per: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for path in paths:
        with open(path) as f:
            for line in f:
                nodeid, *values = line.rstrip("\n").split("\t")
                row = per[nodeid.split("::")[0]]
                row[0] += 1
                for i, v in enumerate(values, 1):
                    row[i] += float(v)
    lines = [f"{'file':45s} {'tests':>5s} {'wall':>8s} {'cpu':>8s} {'children':>8s}"]
    total = [0.0] * 4
    for name, row in sorted(per.items(), key=lambda kv: -(kv[1][2] + kv[1][3])):
        lines.append(f"{name:45s} {row[0]:5.0f} {row[1]:8.1f} {row[2]:8.1f} {row[3]:8.1f}")
        total = [a + b for a, b in zip(total, row, strict=True)]
    lines.append(f"{'TOTAL':45s} {total[0]:5.0f} {total[1]:8.1f} {total[2]:8.1f} {total[3]:8.1f}")
    return "\n".join(lines)


#: The head of tests/file_costs.txt (conftest's FILE_COSTS).
COSTS_HEADER = """\
# Wall seconds each test file took in one `make test` run (tests/conftest.py: NOTE [ The order
# of the test files ]): under `--dist loadfile` the workers take the files most expensive first.
# Only the order counts. Measured again with:
#   BUCKETLOADER_TEST_CPU=/tmp/cpu.tsv PYTEST_ADDOPTS="-p cputime" PYTHONPATH=$PWD/tests make test
#   python tests/cputime.py --costs /tmp/cpu.tsv.gw* > tests/file_costs.txt
"""


def costs(paths: list[str]) -> str:
    """tests/file_costs.txt from the rows of a run: each test file's wall seconds (its tests,
    with their set-up and teardown), most expensive first."""
    per: dict[str, float] = defaultdict(float)
    for path in paths:
        with open(path) as f:
            for line in f:
                nodeid, wall, *_ = line.split("\t")
                name = nodeid.split("::")[0]
                if name.startswith("tests/test_"):
                    per[name] += float(wall)
    rows = sorted(per.items(), key=lambda kv: (-round(kv[1], 1), kv[0]))
    return COSTS_HEADER + "".join(f"{seconds:.1f}\t{name}\n" for name, seconds in rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--costs"]:
        sys.stdout.write(costs(sys.argv[2:]))
    else:
        print(summary(sys.argv[1:]))
