"""Shared test fixtures: real per-sample length distributions, shipped in tests/data/.

The files are copies of the project's shared length data (provenance in tests/data/SOURCES.md),
so a clone anywhere runs every test: a missing file is an error, never a skip.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

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
def free_port() -> int:
    """A free TCP port on the loopback interface (for a process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(argv: Callable[[int], list[str]], world: int, *, timeout: float) -> None:
    """Run ``python *argv(rank)`` for every rank at once (one thread each, gloo on loopback),
    wait for all, kill any left after ``timeout`` seconds, and fail with the end of the log of
    the first rank that failed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    procs = [
        subprocess.Popen(
            [sys.executable, *argv(r)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
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
    for r, (p, log) in enumerate(zip(procs, logs, strict=False)):
        assert p.returncode == 0, f"rank {r} failed:\n{log[-3000:]}"


@pytest.fixture(autouse=True)
def _fresh_dynamo_counters():
    """Each test starts with torch._dynamo's global counters empty: a graph break counted by an
    earlier test (test_compile's steps) must not fail a later test that asserts none
    (test_trainer), which it did whenever both ran in one process, as ``make test`` runs them."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None:
        utils.counters.clear()


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
        >>> quick_examples(400), quick_examples(25), quick_examples(5)
        (100, 10, 5)
    """
    return count if FULL else min(count, max(QUICK_MIN, round(count * QUICK_SHARE)))


def pytest_collection_modifyitems(config, items):
    """Scale each property test's ``max_examples`` by :func:`quick_examples` (its settings are
    read when the test runs, from the wrapper hypothesis puts on the function)."""
    from hypothesis import settings

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
