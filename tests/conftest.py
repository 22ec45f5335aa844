"""Shared test fixtures: real per-sample length distributions, shipped in tests/data/.

The files are copies of the project's shared length data (provenance in tests/data/SOURCES.md),
so a clone anywhere runs every test: a missing file is an error, never a skip.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DATA_DIR = Path(__file__).parent / "data"

#: file name → (kind, columns)
REAL_DATASETS = {
    "librispeech": "librispeech_train_clean_100_samples.txt",
    "commonvoice": "commonvoice_id_clip_ms.txt",
    "multi30k": "multi30k_train_en_de_tokens.txt",
    "europarl": "europarl_v7_en_fr_20k_tokens.txt",
    "gsm8k": "gsm8k_train_qa_tokens.txt",
    "coco": "coco_val2017_image_width_height.txt",
    "ecoli": "ecoli_k12_proteome_residues.txt",
}


@functools.cache
def load_real(name: str) -> np.ndarray:
    """Lengths of a real dataset: shape (N,) or (N, 2) for paired files."""
    path = DATA_DIR / REAL_DATASETS[name]
    arr = np.loadtxt(path, dtype=np.int64, ndmin=1)
    arr.setflags(write=False)
    return arr


def real_columns():
    """(dataset name, column index or None, lengths) for every column of every real file."""
    out = []
    for name in REAL_DATASETS:
        arr = load_real(name)
        if arr.ndim == 1:
            out.append((name, None, arr))
        else:
            out.extend((name, c, arr[:, c]) for c in range(arr.shape[1]))
    return out


@pytest.fixture
def librispeech() -> np.ndarray:
    return load_real("librispeech")


# -- several processes (gloo ranks) ----------------------------------------------------------------
def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel picks a port from for ``bind(0)`` and ``connect()`` (Linux's
    ``ip_local_port_range``; its default elsewhere)."""
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return lo, hi


def free_port() -> int:
    """A free TCP port on the loopback interface (for a process group's rendezvous), from the
    16384 ports just below the kernel's ephemeral range (:func:`ephemeral_ports`).

    It stays free until rank 0's store listens on it, a fork and an import later (0.1-1 s): a
    port of the ephemeral range (``bind(0)``'s, as before) could meanwhile go to any ``bind(0)``
    on the machine, such as a gloo rank's listener of a test running beside it; rank 0 then
    fails with EADDRINUSE and the other ranks connect to that listener and wait for the store's
    answer in ``TCPStore::ping``, past the group's timeout (seen: still there after 70 s with a
    40 s timeout), until the forker kills them (150-300 s). The kernel never picks a port below
    the range by itself; the draw is the system's, not ``random``'s (a test may seed that)."""
    import random

    lo, hi = ephemeral_ports()
    # (a range reaching down to 1024 leaves the ports above it)
    first, last = (max(1024, lo - 16384), lo - 1) if lo > 2048 else (hi + 1, 65535)
    draw = random.SystemRandom()
    for _ in range(100):
        port = draw.randint(first, last)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # taken (a service, or another test's store)
                continue
            return port
    raise RuntimeError(f"no free port among 100 drawn from {first}..{last}")


def run_snippet(code: str, *, warm: tuple[str, ...] | None = None) -> None:
    """Run ``code`` in a fresh interpreter (one thread); it must print ``ok`` and exit 0.

    ``warm``: run it instead in a process forked from :func:`run_ranks`' warm interpreter, which
    has imported torch and the core of bucketloader (see ``_FORKER``) and the modules named
    here, for a snippet that needs only *its own* modules imported fresh: it must check that
    they were (a snippet that patches torch before importing a module, then asserts what the
    module took, fails on a module imported before it). About 4-8 CPU-s less than a fresh
    interpreter."""
    forker = None if warm is None else _RankForker.get()
    if forker is None:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="snippet") as tmp:
        script = os.path.join(tmp, "snippet.py")
        with open(script, "w") as f:
            f.write(code)
        (status,), (log,), _ = forker.run([[script]], 300, warm)
    assert status == 0 and "ok" in log.splitlines(), log[-2000:]


def run_ranks(
    argv: Callable[[int], list[str]], world: int, *, timeout: float, preload: tuple[str, ...] = ()
) -> list[str]:
    """Run ``python *argv(rank)`` for every rank at once (gloo on loopback), wait for all, kill
    any left after ``timeout`` seconds (forked ranks: or :data:`FAILED_RANK_GRACE_S` after one
    failed), and fail with the end of the log of the rank that failed first; return every
    rank's log (stdout and stderr).

    The ranks are real processes, each forked from a warm interpreter that has imported torch
    and bucketloader once per test session (:class:`_RankForker`), instead of a fresh
    ``python`` that imports them again (about 2.5 s of CPU per rank); ``BUCKETLOADER_TESTS_FORK=0``
    starts fresh interpreters instead. ``preload``: more modules the ranks import (``datasets``,
    ``transformers.trainer``: 1-3 s of CPU each), imported once by the warm interpreter before
    it forks them (and kept for later calls)."""
    argvs = [[str(a) for a in argv(r)] for r in range(world)]
    forker = _RankForker.get()
    if forker is not None:
        codes, logs, exited = forker.run(argvs, timeout, preload)
    else:
        codes, logs, exited = _run_fresh(argvs, timeout)
    failed = [r for r in exited if codes[r] != 0]
    if failed:
        r, then = failed[0], ", ".join(f"rank {k} exit {codes[k]}" for k in failed[1:])
        raise AssertionError(
            f"rank {r} failed (exit {codes[r]}){f' first (then {then})' if then else ''}:\n"
            f"{logs[r][-3000:]}"
            # (a rank killed, -9, ends its log with its threads' Python stacks: where it hung)
            + "".join(f"\n-- rank {k} (exit {codes[k]}):\n{logs[k][-1500:]}" for k in failed[1:])
        )
    return logs


#: How long the other ranks may go on once one failed (its error reaches theirs at once through
#: gloo's closed connections) before the forker kills them: a rank that failed before the
#: rendezvous left the others waiting in it for the group's whole timeout (64.7 s of a 60 s
#: timeout; the tests give 120-300 s), and the failure shown was theirs (the store's timeout),
#: not its own.
FAILED_RANK_GRACE_S = 10.0


#: What every rank gets in its environment (one thread each, gloo on the loopback interface).
RANK_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _run_fresh(argvs: list[list[str]], timeout: float) -> tuple[list[int], list[str], list[int]]:
    env = {**os.environ, **RANK_ENV}
    procs = [
        subprocess.Popen(
            [sys.executable, *a],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for a in argvs
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], logs, list(range(len(procs)))


#: The warm interpreter: imports what the rank scripts import, then, for each request (one JSON
#: line on stdin: the ranks' argv, their log files, a timeout, a grace), forks one child per rank,
#: which runs its script as ``__main__`` with its output in its log, waits for them (killing any
#: left at the timeout, or ``grace`` seconds after one failed, after a SIGUSR1 that has
#: faulthandler write their Python stacks to their logs) and answers with their exit codes and
#: the order they exited in. It never runs a test itself, so every rank starts from the same
#: clean state. EOF on stdin ends it.
_FORKER = r"""
import faulthandler, json, os, runpy, signal, sys, time, traceback
sys.path.insert(0, sys.argv[1])
import numpy, torch, torch.distributed, torch.nn.parallel, torch.utils.data  # noqa
import bucketloader, bucketloader.stream, bucketloader.sharded, bucketloader.compile  # noqa
import pytest, hypothesis, conftest  # noqa  (the test modules import them)
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    for name in job["preload"]:
        try:
            __import__(name)
        except Exception:  # the ranks import it again and report the error in their logs
            pass
    pids = []
    for argv, log in zip(job["argvs"], job["logs"]):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                faulthandler.register(signal.SIGUSR1, all_threads=True)  # (stacks, to the log)
                sys.argv = list(argv)
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    codes = {}
    deadline = time.monotonic() + job["timeout"]
    while len(codes) < len(pids):
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
                    if codes[pid] != 0:
                        deadline = min(deadline, time.monotonic() + job["grace"])
        if len(codes) < len(pids):
            if time.monotonic() > deadline:
                left = [pid for pid in pids if pid not in codes]
                for pid in left:  # where each one waits, into its log, before it goes
                    os.kill(pid, signal.SIGUSR1)
                time.sleep(0.5)
                for pid in left:
                    os.kill(pid, signal.SIGKILL)
                    codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            time.sleep(0.02)
    print(json.dumps([[codes[p] for p in pids], [pids.index(p) for p in codes]]), flush=True)
os._exit(0)  # (EOF: every rank was waited for; no teardown of torch's modules to wait for)
"""


class _RankForker:
    """The session's warm interpreter for :func:`run_ranks` (started on first use)."""

    _instance: _RankForker | None = None
    _failed = False

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FORKER, str(Path(__file__).parent)],
            env={**os.environ, **RANK_ENV},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.proc.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise RuntimeError("the rank forker did not start")

    @classmethod
    def get(cls) -> _RankForker | None:
        if os.environ.get("BUCKETLOADER_TESTS_FORK", "1") == "0" or cls._failed:
            return None
        if cls._instance is None or cls._instance.proc.poll() is not None:
            try:
                cls._instance = cls()
            except (OSError, RuntimeError):
                cls._failed = True
                return None
        return cls._instance

    def run(
        self, argvs: list[list[str]], timeout: float, preload: tuple[str, ...] = ()
    ) -> tuple[list[int], list[str], list[int]]:
        """Every rank's exit code and log, and the ranks in the order they exited."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ranks") as tmp:
            logs = [os.path.join(tmp, f"rank{r}.log") for r in range(len(argvs))]
            job = {"argvs": argvs, "logs": logs, "timeout": timeout, "preload": list(preload)}
            job["grace"] = FAILED_RANK_GRACE_S
            self.proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            answer = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not answer:
                raise AssertionError("the rank forker died while running the ranks")
            texts = []
            for log in logs:
                with open(log, errors="replace") as f:
                    texts.append(f.read())
        codes, exited = json.loads(answer)
        return codes, texts, exited

    @classmethod
    def close(cls) -> None:
        if cls._instance is not None and cls._instance.proc.poll() is None:
            cls._instance.proc.stdin.close()  # type: ignore[union-attr]
            try:
                cls._instance.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                cls._instance.proc.kill()
        cls._instance = None


def pytest_unconfigure(config):
    _RankForker.close()


def _skip_the_teardown_of_modules(worker: int) -> None:
    """An xdist worker's last exit handler, after its results reached the controller: the
    handlers registered after it (at import or use: Ray's shutdown, multiprocessing's,
    inductor's pool, weakref finalizers) have run; it flushes the logs and the standard
    streams, then leaves without the interpreter's teardown of its modules, which took 2-4 s a
    worker with torch, transformers, Ray and pyspark loaded, at the end of the run, where the
    controller waits for both (``make test``'s wall). Never in the controller, whose exit status
    is the run's, nor in a process a test forked from the worker (``worker`` is the worker's
    pid): such a child inherits the handler, and its exit status is its own."""
    if os.getpid() != worker:
        return
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pytest_configure(config):
    """Under ``pytest -n N`` (``make test``), each worker's torch gets its share of the cores
    (at least one thread), so N workers do not each start a thread per core. Set before any
    test imports torch, and inherited by the processes a test starts (gloo ranks set their own).
    A worker skips the teardown of its modules at exit (:func:`_skip_the_teardown_of_modules`).
    Under ``--dist loadfile``, xdist hands the files out in the order the workers collected
    them (:func:`order_by_file_cost`)."""
    if hasattr(config, "workerinput"):  # (an xdist worker; not the environment variable,
        # which a pytest started from a test inherits: its exit status would be 0)
        import atexit

        atexit.register(_skip_the_teardown_of_modules, os.getpid())
    if getattr(config.option, "dist", "no") == "loadfile":  # (the controller's; a worker's is
        # "no") the files go out in the workers' collection order, by cost (NOTE [ The order of
        # the test files ]), not re-sorted by their number of tests
        config.option.loadscopereorder = False
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        threads = str(max(1, (os.cpu_count() or 1) // workers))
        os.environ.setdefault("OMP_NUM_THREADS", threads)
        os.environ.setdefault("MKL_NUM_THREADS", threads)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(autouse=True)
def _fresh_dynamo_counters():
    """Each test starts with torch._dynamo's global counters empty: a graph break counted by an
    earlier test (test_compile's steps) must not fail a later test that asserts none
    (test_trainer), which it did whenever both ran in one process, as ``make test`` runs them."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None:
        utils.counters.clear()


_LOADER_ITERS: Any = None  # (a WeakSet of the worker iterators started, once torch is loaded)
#: The DataLoader iterators with worker processes: torch's, and torchdata's StatefulDataLoader's
#: (its own class, not a subclass of torch's), each once its module is loaded.
_WORKER_ITERATORS = (
    ("torch.utils.data.dataloader", "_MultiProcessingDataLoaderIter"),
    ("torchdata.stateful_dataloader.stateful_dataloader", "_StatefulMultiProcessingDataLoaderIter"),
)


def _track_worker_iterators() -> None:
    """Record every iterator of :data:`_WORKER_ITERATORS` started from now on in
    :data:`_LOADER_ITERS`."""
    global _LOADER_ITERS
    if _LOADER_ITERS is None and "torch.utils.data.dataloader" in sys.modules:
        import weakref

        _LOADER_ITERS = weakref.WeakSet()
    for module, name in _WORKER_ITERATORS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is None or "_tracked" in vars(cls):
            continue
        start, started = cls.__init__, _LOADER_ITERS

        @functools.wraps(start)
        def init(self, *args, _start=start, _started=started, **kwargs):
            _started.add(self)
            _start(self, *args, **kwargs)

        cls.__init__, cls._tracked = init, True


def _shut_down_worker_iterators() -> None:
    if _LOADER_ITERS:
        for it in list(_LOADER_ITERS):
            it._shutdown_workers()
        _LOADER_ITERS.clear()


@pytest.fixture(autouse=True)
def _worker_iterators_shut_down():
    """Each DataLoader iterator with worker processes that a test started is shut down as soon
    as the test function returns (:func:`pytest_pyfunc_call`), and any a fixture started, when
    the test ends. One a worker's error ended is held in a reference cycle (the re-raised
    exception's traceback holds the frame that holds it; ``pytest.raises(...) as err`` in the
    test's frame is another), so the garbage collector finalised it later, where its queues'
    pipes may be closed before it: its workers then never received their stop message, and
    torch waited 5 s for each before killing it (10 s, measured; shut down here, 0.07 s).
    Shutting down at the test's end (s33) was not soon enough: a collection between the test's
    return and its teardown paid those 10 s (s34: after 8 tests of test_stream_source_changed,
    10.5-11.3 s each; one of them cost 10.6 s in a quiet `make test`). Shutting down an iterator
    twice is a no-op in torch."""
    _track_worker_iterators()
    yield
    _shut_down_worker_iterators()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """The test function's worker iterators are shut down as it returns or raises, before its
    fixtures' teardown (:func:`_worker_iterators_shut_down`)."""
    try:
        return (yield)
    finally:
        _shut_down_worker_iterators()


# -- how thorough a run is -------------------------------------------------------------------------
#: ``BUCKETLOADER_TESTS=full`` (``make test-full``): every property test runs the example count
#: written next to it. Otherwise (``make test``, CI) each runs :data:`QUICK_SHARE` of it (at least
#: :data:`QUICK_MIN`), which keeps every test and every property while the suite stays fast;
#: hypothesis's database still replays any failure found before.
FULL = os.environ.get("BUCKETLOADER_TESTS", "").lower() == "full"
QUICK_SHARE = 0.25
QUICK_MIN = 10


def quick_examples(count: int) -> int:
    """The example count a property test runs in a quick run, for ``count`` in a full run.

    Example:
        >>> counts = quick_examples(400), quick_examples(25), quick_examples(5)
        >>> counts == ((400, 25, 5) if FULL else (100, 10, 5))  # (make test-full: FULL)
        True
    """
    return count if FULL else min(count, max(QUICK_MIN, round(count * QUICK_SHARE)))


# -- the order of the test files -------------------------------------------------------------------
# NOTE [ The order of the test files ]: `make test` runs `pytest -n 2 --dist loadfile`: xdist hands
# a worker one whole file at a time, the next one from its queue when the file the worker runs has
# two tests left. xdist ordered that queue by each file's number of tests, which put files of few
# but long tests (test_notebooks: 6 tests, about 50 s; test_pack_hf_ranks: 1 test) at its end: one
# worker ran them while the other, its queue empty, waited (30-40 s of one idle core in a 389 s
# run, s34). Now each worker orders its collection by the cost of each file, as FILE_COSTS lists
# it, most expensive first (a file's own tests keep their order), and the controller keeps that
# order (pytest_configure turns xdist's reordering off): the longest files start first and the
# last to start are short ones, so the workers end close together.

#: Seconds each test file took in one ``make test`` run (only their order counts), written by
#: ``python tests/cputime.py --costs`` (how: its header); test_conftest checks that it names
#: every test file and no other.
FILE_COSTS = Path(__file__).parent / "file_costs.txt"


def file_costs(path: Path = FILE_COSTS) -> dict[str, float]:
    """``{test file: seconds}`` from ``path`` (lines ``seconds<TAB>file``; ``#`` comments)."""
    costs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            seconds, name = line.split("\t")
            costs[name] = float(seconds)
    return costs


def order_by_file_cost(items: list[Any], costs: dict[str, float]) -> list[Any]:
    """``items`` with the files that cost most first (NOTE [ The order of the test files ]); a
    file's own items keep their order, and a file ``costs`` does not name (the package's doctest
    modules) costs 0: those come last, in the order they were collected."""
    return sorted(items, key=lambda item: -costs.get(item.nodeid.split("::")[0], 0.0))


def pytest_collection_modifyitems(config, items):
    """Scale each property test's ``max_examples`` by :func:`quick_examples` (its settings are
    read when the test runs, from the wrapper hypothesis puts on the function). In an xdist
    worker, order the items by :func:`order_by_file_cost`: the controller hands the files out in
    that order (one process alone runs them as collected)."""
    from hypothesis import settings

    if hasattr(config, "workerinput"):
        items[:] = order_by_file_cost(items, file_costs())

    seen = set()
    for item in items:
        fn = getattr(item, "obj", None)
        current = getattr(fn, "_hypothesis_internal_use_settings", None)
        if current is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        fn._hypothesis_internal_use_settings = settings(
            current, max_examples=quick_examples(current.max_examples)
        )


def pytest_collection_finish(session):
    """In an xdist worker, move every object alive after collection (the test modules, torch,
    transformers, Ray, pyspark: about 550 thousand tracked objects) out of the garbage
    collector's reach, ``gc.freeze()``: each full collection traversed them all, 4.1-4.7 s at
    load 15, and the suite's allocations trigger many (s34-suite measured 378 s of gw0's run at
    load 17-32 in full collections, 16 % of it). Objects made by the tests are collected as
    before; the frozen ones stay alive, as imported modules do anyway. One process alone
    (``pytest`` without ``-n``, where a test may count on collecting what a module made) is
    left as it is."""
    if hasattr(session.config, "workerinput"):
        gc.collect()
        gc.freeze()


def run_skipped_examples(functions, globs):
    """Run the ``Example`` of each of ``functions`` whose lines are ``# doctest: +SKIP`` in the
    package's doctests (they need a Ray or Spark runtime that a test has started): every
    docstring example runs somewhere."""
    import doctest

    for fn in functions:
        doc = fn.__doc__.replace("# doctest: +SKIP", "")
        test = doctest.DocTestParser().get_doctest(doc, dict(globs), fn.__qualname__, None, 0)
        assert test.examples, f"{fn.__qualname__} has no example"
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        out: list[str] = []
        runner.run(test, out=out.append)
        assert runner.failures == 0, "".join(out)


def damaged_shard(folder: Path) -> Path:
    """A Parquet file in ``folder`` whose footer reads but whose data pages are damaged (the
    engines' "failed reading" errors must name it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shard = folder / "a.parquet"
    pq.write_table(pa.table({"n": list(range(1000))}), shard, compression="snappy")
    data = bytearray(shard.read_bytes())
    data[40:2000] = b"\xab" * 1960  # the pages, not the footer
    shard.write_bytes(bytes(data))
    return shard


def check_joint_precompute_of_shards(tmp_path: Path, capsys: Any, *engine: str) -> str:
    """s28: `precompute SHARDS --column src,tgt --max-shapes 3` (on ``engine``: ``--engine
    ray`` ...) stores the joint plan that ``BucketSampler(pairs, max_shapes=3, batch_size=16,
    cache=...)`` reads (no solve there); the engine brings back only the histogram of the pairs
    (NOTE [ A joint plan of Parquet shards ]). A null pair is one null row (``--nulls skip``:
    told on stderr, left out). Returns stderr of the last run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader import BucketCache, BucketSampler
    from bucketloader.cli.main import main

    pairs = np.random.default_rng(3).integers(1, 9, size=(300, 2))
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, part in enumerate(np.array_split(pairs, 3)):
        pq.write_table(pa.table({"src": part[:, 0], "tgt": part[:, 1]}), shards / f"{i}.parquet")
    cache, out = tmp_path / "cache", tmp_path / "plan.json"
    argv = ["precompute", str(shards), "--column", "src,tgt", "--max-shapes", "3"]
    argv += ["--batch-size", "16", "--cache-dir", str(cache), *engine]
    assert main([*argv, "--json", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "shards: 300 samples, joint, K=3" in printed and "cache: miss; stored" in printed
    reader = BucketCache(cache)
    sampler = BucketSampler(pairs, max_shapes=3, batch_size=16, cache=reader)
    assert (reader.hits, reader.misses) == (1, 0)  # the sampler solved nothing
    assert [tuple(s) for s in json.loads(out.read_text())["shapes"]] == sampler.shapes
    # a null target: one null row, refused with its count, or left out and told
    tail = pa.table({"src": pa.array([4, 5]), "tgt": pa.array([None, 6], pa.int64())})
    pq.write_table(tail, shards / "3.parquet")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "has 1 null row(s) out of 302" in err and "pass --nulls skip" in err, err
    assert main([*argv, "--nulls", "skip"]) == 0
    err = capsys.readouterr().err
    assert "--nulls skip left out 1 null row(s) of 302" in err, err
    return err
