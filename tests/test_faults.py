"""The fault suite: writers killed with SIGKILL mid-write, many processes on one cache, and exact
resume at random points behind DataLoader workers (issue 21).

* ``kill -9`` during cache writes: a forked child loops writes of both caches' entries; the parent
  kills it at a random short delay after its first write, 50 times per cache. Afterwards no entry
  is torn (every one reads back valid, without a warning) and the next write removes every
  temporary file the killed writers left (NOTE [ Writing a cache file ] in ``bucketloader._files``).
* 8 processes hit the same entry and their own entries of both caches at once: none raises or
  warns, and every entry reads back valid.
* Resume: for BucketSampler, EvalSampler and PackSampler, the state taken after a random number of
  consumed batches (behind 0 and 2 DataLoader workers, whose prefetch runs the sampler ahead)
  resumes into exactly the rest: consumed + resumed == the uninterrupted epoch.

Children are forked (no interpreter start-up per kill), so the suite takes a few seconds.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from bucketloader import BucketCache, BucketSampler, EvalSampler, PackSampler, compute_boundaries
from bucketloader._files import TEMP_PREFIX
from bucketloader.compile import CompileCache
from bucketloader.compile._key import digest
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import solve_boundaries

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork"),
]

KILLS = 50
LENGTHS = np.random.default_rng(0).integers(1, 500, size=2000)
MODEL = {"model": "fault", "width": [64] * 200}  # a record of a few KB: a wider write window
KEY = digest(MODEL)


def _bucket_writer(directory: Path):
    """A loop of BucketCache writes of one solved entry (several processes' worth of puts)."""
    hist = LengthHistogram.from_lengths(LENGTHS)
    cache = BucketCache(directory)
    solution = solve_boundaries(LENGTHS, 8)

    def write(i: int) -> None:
        cache.put(hist, solution)

    return write


def _compile_writer(directory: Path):
    cache = CompileCache(directory)

    def write(i: int) -> None:
        cache.put(KEY, MODEL, (8, 16 + i % 4), {"x": i % 4}, cold_seconds=float(i))

    return write


def _fork_loop(write, ready_w: int) -> int:
    pid = os.fork()
    if pid == 0:  # the child: write forever until killed
        code = 0
        try:
            warnings.simplefilter("error")
            write(0)
            os.write(ready_w, b"x")
            i = 1
            while True:
                write(i)
                i += 1
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    return pid


def _temps(directory: Path) -> list[Path]:
    return [p for p in directory.rglob(f"{TEMP_PREFIX}*") if p.is_file()]


@pytest.mark.parametrize("which", ["bucket", "compile"])
def test_kill_9_mid_write_tears_nothing_and_leftovers_are_cleaned(tmp_path, which):
    make = _bucket_writer if which == "bucket" else _compile_writer
    write = make(tmp_path)  # solved once, here: the children only write
    rng = random.Random(21)
    mid_write = 0
    for _ in range(KILLS):
        r, w = os.pipe()
        pid = _fork_loop(write, w)
        os.close(w)
        assert os.read(r, 1) == b"x", "the writer died before its first write"
        os.close(r)
        time.sleep(rng.uniform(0, 0.004))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        mid_write += bool(_temps(tmp_path))  # killed between creating its temp file and replace
    # no torn entry: everything the writers left at an entry path reads back whole and valid
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if which == "bucket":
            entries = list(tmp_path.glob("*.json"))
            assert len(entries) == 1
            cache = BucketCache(tmp_path)
            b = compute_boundaries(LENGTHS, 8, cache=cache)
            assert cache.hits == 1 and b.tolist() == compute_boundaries(LENGTHS, 8).tolist()
        else:
            records = CompileCache(tmp_path).records(KEY)
            files = list((tmp_path / "entries" / KEY).glob("*.json"))
            assert 1 <= len(records) == len(files) <= 4  # every record file is whole and valid
        write(0)  # the next write removes the killed writers' temporary files
    assert _temps(tmp_path) == [], _temps(tmp_path)
    assert mid_write > 0  # the kills did land inside writes
    print(f"{which}: {KILLS} kills, {mid_write} of them mid-write (a temporary file left)")


def _hammer(directory: Path, me: int, rounds: int) -> None:
    """One of the 8 processes: the shared entries and its own, of both caches."""
    warnings.simplefilter("error")  # any cache warning fails the process
    compile_cache = CompileCache(directory / "compile")
    for i in range(rounds):
        shared = compute_boundaries(LENGTHS[:300], 4, cache=BucketCache(directory / "bucket"))
        own = compute_boundaries(LENGTHS[me::8], 3, cache=BucketCache(directory / "bucket"))
        assert len(shared) == 4 and len(own) == 3
        compile_cache.put(KEY, MODEL, (4, 8), {"shared": True}, cold_seconds=float(i))
        compile_cache.put(KEY, MODEL, (4, 8 + me), {"own": me}, warm_seconds=float(i))
        assert compile_cache.get(KEY, (4, 8), {"shared": True}) is not None
        assert compile_cache.get(KEY, (4, 8 + me), {"own": me}) is not None


def test_eight_processes_on_the_same_and_different_entries(tmp_path):
    pids = []
    for me in range(8):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _hammer(tmp_path, me, rounds=10)
            except BaseException as exc:  # the parent sees the exit code; say why
                print(f"process {me}: {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    assert codes == [0] * 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(BucketCache(tmp_path / "bucket")) == 9  # 1 shared + 8 own entries
        assert len(CompileCache(tmp_path / "compile").records(KEY)) == 9
    assert _temps(tmp_path) == []


# -- resume exactness behind DataLoader workers ---------------------------------------------------
def _producers():
    lengths = LENGTHS[:400]
    return {
        "BucketSampler": lambda: BucketSampler(lengths, num_buckets=4, batch_size=8, seed=3),
        "EvalSampler": lambda: EvalSampler(lengths, num_buckets=4, batch_size=8),
        "PackSampler": lambda: PackSampler(lengths, row_length=512, batch_size=2, seed=3),
    }


def _loader(sampler, workers):
    return DataLoader(
        range(len(sampler.lengths) if hasattr(sampler, "lengths") else 400),
        batch_sampler=sampler,
        collate_fn=list,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        multiprocessing_context="fork" if workers else None,
    )


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", ["BucketSampler", "EvalSampler", "PackSampler"])
def test_resume_at_random_points_behind_workers_is_exact(name, workers):
    make = _producers()[name]
    reference = [list(b) for b in _loader(make(), 0)]
    rng = random.Random(f"{name}{workers}")
    for k in sorted({0, len(reference), *rng.sample(range(1, len(reference)), 2)}):
        live = make()
        consumed = []
        for batch in _loader(live, workers):
            if len(consumed) == k:
                break
            consumed.append(list(batch))
        state = live.state_dict(batches_consumed=k)  # the loop's position, not the prefetcher's
        resumed = make()
        resumed.load_state_dict(state)
        rest = [list(b) for b in _loader(resumed, workers)]
        assert consumed + rest == reference, (name, workers, k)
