"""BucketCache: keys, hits, corrupt entries, read-only directories, eviction, concurrency."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port, run_ranks

from bucketloader import compute_boundaries, register_strategy
from bucketloader.boundaries import padding_cost
from bucketloader.cache import BucketCache, CacheWarning, default_cache_dir
from bucketloader.histogram import LengthHistogram
from bucketloader.solve import resolve_params, solve_boundaries
from bucketloader.strategies import STRATEGIES

LENGTHS = [3, 4, 4, 9, 10, 31, 31, 7, 12, 18]
PARAMS = {"cost": "linear", "pad_to_multiple_of": 1, "num_buckets": 3}
#: sha256 of the canonical key document for (LENGTHS, "optimal", PARAMS), format 1. If this
#: changes, every user's cache is silently invalidated: bump CACHE_FORMAT deliberately instead.
GOLDEN_KEY = "e11240957973c5c7cc1f2baca45b00c29d09cb309ac831e7dfc214f23dc89b32"


def hist(lengths=LENGTHS) -> LengthHistogram:
    return LengthHistogram.from_lengths(lengths)


class Counting:
    """A solve_fn that counts its calls."""

    def __init__(self, lengths=LENGTHS, k=3):
        self.calls = 0
        self.lengths, self.k = lengths, k

    def __call__(self):
        self.calls += 1
        return solve_boundaries(self.lengths, self.k)


def test_hit_and_miss(tmp_path):
    cache = BucketCache(tmp_path)
    solve = Counting()
    first = cache.get_or_solve(hist(), "optimal", PARAMS, solve)
    second = cache.get_or_solve(hist(LENGTHS[::-1]), "optimal", PARAMS, solve)
    assert solve.calls == 1 and (cache.hits, cache.misses) == (1, 1) and len(cache) == 1
    assert second.boundaries.tolist() == first.boundaries.tolist()
    assert second.objective == first.objective and second.status == "optimal"
    assert second.params == PARAMS
    body = json.loads(cache.path_for(cache.key(hist(), "optimal", PARAMS)).read_text())
    for field in ("library_version", "created", "strategy", "params"):
        assert field in body
    for field in ("boundaries", "objective", "padding_ratio", "status"):
        assert field in body["solution"]


def test_compute_boundaries_uses_the_cache(tmp_path):
    cache = BucketCache(tmp_path)
    a = compute_boundaries(LENGTHS, 3, cache=cache)
    b = compute_boundaries(np.array(LENGTHS[::-1]), 3, cache=cache)
    assert a.tolist() == b.tolist() == compute_boundaries(LENGTHS, 3).tolist()
    assert (cache.hits, cache.misses) == (1, 1)


def test_cache_true_uses_the_default_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"
    compute_boundaries(LENGTHS, 2, cache=True)
    assert len(BucketCache()) == 1 and BucketCache().directory == tmp_path / "env"


def test_golden_key():
    assert BucketCache.key(hist(), "optimal", PARAMS) == GOLDEN_KEY


def test_golden_key_follows_the_documented_encoding():
    """Re-derive the key from the written spec, without the library's hashing code."""
    values = sorted(set(LENGTHS))
    counts = [LENGTHS.count(v) for v in values]
    h = hashlib.sha256(f"bucketloader.LengthHistogram/1/{len(values)}/".encode())
    h.update(np.array(values, dtype="<i8").tobytes() + np.array(counts, dtype="<i8").tobytes())
    doc = (
        '{"format":"bucketloader.cache/1","histogram":"' + h.hexdigest() + '","params":'
        '{"cost":"linear","num_buckets":3,"pad_to_multiple_of":1},"strategy":"optimal"}'
    )
    assert hashlib.sha256(doc.encode()).hexdigest() == GOLDEN_KEY


def test_key_is_stable_across_orderings_and_containers():
    torch = pytest.importorskip("torch")
    forms = [
        LENGTHS,
        tuple(LENGTHS[::-1]),
        np.array(LENGTHS, dtype=np.int32),
        np.array(sorted(LENGTHS), dtype=np.uint16),
        torch.tensor(LENGTHS),
        np.array(LENGTHS, dtype=np.float64),
    ]
    params = [PARAMS, dict(reversed(list(PARAMS.items()))), {**PARAMS, "num_buckets": np.int64(3)}]
    keys = {BucketCache.key(hist(f), "optimal", p) for f in forms for p in params}
    assert keys == {GOLDEN_KEY}


def test_key_is_stable_across_processes():
    code = (
        "from bucketloader.cache import BucketCache;"
        "from bucketloader.histogram import LengthHistogram as H;"
        f"print(BucketCache.key(H.from_lengths({LENGTHS!r}), 'optimal', {PARAMS!r}))"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert out.stdout.strip() == GOLDEN_KEY, out.stderr


@pytest.mark.parametrize(
    "change",
    [
        {"num_buckets": 4},
        {"cost": "quadratic"},
        {"pad_to_multiple_of": 8},
        {"extra_option": None},
        {"num_buckets": 3.0},  # a float is not the same option as an int
    ],
)
def test_key_changes_with_any_parameter(change):
    assert BucketCache.key(hist(), "optimal", {**PARAMS, **change}) != GOLDEN_KEY


def test_key_changes_with_strategy_and_lengths():
    assert BucketCache.key(hist(), "percentile", PARAMS) != GOLDEN_KEY
    assert BucketCache.key(hist([*LENGTHS, 5]), "optimal", PARAMS) != GOLDEN_KEY
    assert BucketCache.key(hist([*LENGTHS, 4]), "optimal", PARAMS) != GOLDEN_KEY  # a count
    assert BucketCache.key(hist([x + 1 for x in LENGTHS]), "optimal", PARAMS) != GOLDEN_KEY


def test_key_changes_when_a_default_changes(tmp_path):
    def v1(h, num_buckets, *, width=8):
        return np.unique(-(-h.values // width) * width)

    def v2(h, num_buckets, *, width=16):
        return np.unique(-(-h.values // width) * width)

    try:
        register_strategy("_test_width", v1)
        key1 = BucketCache.key(hist(), "_test_width", resolve_params("_test_width", 8, {}))
        register_strategy("_test_width", v2, overwrite=True)
        key2 = BucketCache.key(hist(), "_test_width", resolve_params("_test_width", 8, {}))
        cache = BucketCache(tmp_path)
        register_strategy("_test_width", v1, overwrite=True)
        a = compute_boundaries(LENGTHS, 8, strategy="_test_width", cache=cache)
        register_strategy("_test_width", v2, overwrite=True)
        b = compute_boundaries(LENGTHS, 8, strategy="_test_width", cache=cache)
    finally:
        STRATEGIES.pop("_test_width", None)
    assert key1 != key2
    assert a.tolist() == [8, 16, 24, 32] and b.tolist() == [16, 32]  # no stale answer served
    assert cache.misses == 2


def test_unregistered_callable_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"register_strategy.*cache=None"):
        compute_boundaries(LENGTHS, 2, strategy=lambda h, k: [h.max], cache=BucketCache(tmp_path))


def test_unkeyable_option_is_refused():
    with pytest.raises(TypeError, match=r"cannot key the cache on option fn=.*cache=None"):
        BucketCache.key(hist(), "optimal", {**PARAMS, "fn": object()})
    with pytest.raises(TypeError, match="nan"):
        BucketCache.key(hist(), "optimal", {**PARAMS, "x": float("nan")})


def _valid_entry(tmp_path) -> tuple[BucketCache, Path, bytes]:
    cache = BucketCache(tmp_path)
    cache.get_or_solve(hist(), "optimal", PARAMS, Counting())
    path = cache.path_for(GOLDEN_KEY)
    return cache, path, path.read_bytes()


def _other_key_entry(tmp_path) -> bytes:
    other = BucketCache(tmp_path / "other")
    other.get_or_solve(hist(), "optimal", {**PARAMS, "num_buckets": 2}, Counting(k=2))
    return next((tmp_path / "other").glob("*.json")).read_bytes()


def _wrong_schema(valid: bytes) -> bytes:
    body = json.loads(valid)
    del body["solution"]["boundaries"]
    return json.dumps(body).encode()


def _tampered_params(valid: bytes) -> bytes:
    body = json.loads(valid)
    body["params"]["num_buckets"] = 2  # the key no longer matches the contents
    return json.dumps(body).encode()


def _not_covering(valid: bytes) -> bytes:
    body = json.loads(valid)
    body["solution"]["boundaries"] = [4, 10]  # last boundary below the longest length
    return json.dumps(body).encode()


def _nested(valid: bytes) -> bytes:
    return b"[" * 100_000 + b"]" * 100_000  # 200 KB: used to raise RecursionError


def _solution_in_a_list(valid: bytes) -> bytes:
    body = json.loads(valid)
    body["solution"] = [body["solution"]]
    return json.dumps(body).encode()


def _empty_bucket_costed(valid: bytes) -> bytes:
    """An empty bucket whose objective and padding ratio are its boundaries' (only the empty
    bucket is wrong)."""
    body = json.loads(valid)
    b = np.array([4, 5, 31])
    total = int(np.sum(LENGTHS))
    body["solution"].update(
        boundaries=b.tolist(),
        objective=int(padding_cost(hist(), b)),
        padding_ratio=padding_cost(hist(), b) / total,
    )
    return json.dumps(body).encode()


def _keyed(valid: bytes) -> bytes:
    body = json.loads(valid)
    body["key"] = "0" * 64  # the contents still hash to the path's key; the recorded one not
    return json.dumps(body).encode()


def _edited(**changes):
    def edit(valid: bytes, tmp) -> bytes:
        body = json.loads(valid)
        body["solution"].update(changes)
        return json.dumps(body).encode()

    return edit


BAD_ENTRIES = {
    "truncated": lambda valid, tmp: valid[: len(valid) // 2],
    "empty": lambda valid, tmp: b"",
    "garbage": lambda valid, tmp: os.urandom(300),
    "json list": lambda valid, tmp: b"[1, 2, 3]",
    "foreign json": lambda valid, tmp: b'{"hello": "world"}',
    "wrong version": lambda valid, tmp: valid.replace(b'"version": 1', b'"version": 99'),
    "wrong schema": lambda valid, tmp: _wrong_schema(valid),
    "tampered params": lambda valid, tmp: _tampered_params(valid),
    "another key's entry": lambda valid, tmp: _other_key_entry(tmp),
    "boundaries not covering": lambda valid, tmp: _not_covering(valid),
    "200 KB of nesting": lambda valid, tmp: _nested(valid),
    "31 boundaries for num_buckets=3": _edited(boundaries=list(range(1, 32))),
    "an empty bucket": _edited(boundaries=[4, 5, 31]),
    "an empty bucket, its costs consistent": lambda valid, tmp: _empty_bucket_costed(valid),
    "key field edited": lambda valid, tmp: _keyed(valid),
    "num_samples edited": _edited(num_samples=11),
    "objective edited": _edited(objective=0),
    "padding ratio edited": _edited(padding_ratio=0.0),
    "objective 1e999": lambda valid, tmp: valid.replace(
        b'"objective": ', b'"objective": 1e999, "o": '
    ),
    "gap NaN": _edited(gap=float("nan")),
    "unknown status": _edited(status="proved by hand"),
    "boundaries as strings": _edited(boundaries=["4", "10", "31"]),
    "boundaries 2**70": _edited(boundaries=[4, 10, 2**70]),
    "solution is a list": lambda valid, tmp: _solution_in_a_list(valid),
}


@pytest.mark.parametrize("kind", sorted(BAD_ENTRIES))
def test_bad_entry_is_ignored_recomputed_and_replaced(tmp_path, kind):
    _, path, valid = _valid_entry(tmp_path)
    path.write_bytes(BAD_ENTRIES[kind](valid, tmp_path))
    cache, solve = BucketCache(tmp_path), Counting()
    with pytest.warns(CacheWarning, match="ignoring unusable cache entry") as record:
        sol = cache.get_or_solve(hist(), "optimal", PARAMS, solve)
    assert len(record) == 1 and solve.calls == 1
    assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cache.get_or_solve(hist(), "optimal", PARAMS, solve)  # replaced: a clean hit
    assert solve.calls == 1 and again.boundaries.tolist() == sol.boundaries.tolist()


def test_an_entry_of_the_quadratic_cost_is_a_clean_hit(tmp_path):
    """An entry's objective is checked in its own cost: a quadratic one is a hit, not taken
    for an edited entry (recomputed and rewritten on every call)."""
    cache = BucketCache(tmp_path)
    first = solve_boundaries(LENGTHS, 3, cost="quadratic", cache=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = solve_boundaries(LENGTHS, 3, cost="quadratic", cache=cache)
    assert (cache.hits, cache.misses) == (1, 1)
    assert (
        again.objective
        == first.objective
        == padding_cost(hist(), first.boundaries, cost="quadratic")
    )


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    """NOTE [ Writing a cache file ]: a write that fails at the rename leaves nothing behind
    (the temporary file removed), and the cache warns and works uncached."""
    import bucketloader._files as files

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    cache = BucketCache(tmp_path)
    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.warns(CacheWarning, match="could not store cache entry"):
        assert cache.put(hist(), solve_boundaries(LENGTHS, 3)) is None
    assert sorted(os.listdir(tmp_path)) == []


class _Exploit:
    """Unpickling this creates a marker file: proof that a pickle was loaded."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_pickle_is_never_loaded(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Exploit(str(marker)))
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    cache = BucketCache(cache_dir)
    cache.path_for(GOLDEN_KEY).write_bytes(payload)
    (cache_dir / f"{GOLDEN_KEY}.pkl").write_bytes(payload)
    (cache_dir / f"{GOLDEN_KEY}.npy").write_bytes(payload)
    with pytest.warns(CacheWarning, match="not valid JSON"):
        sol = cache.get_or_solve(hist(), "optimal", PARAMS, Counting())
    assert not marker.exists()
    assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()
    pickle.loads(payload).close()  # sanity: the payload is live
    assert marker.exists()


def _assert_uncached_with_one_warning(cache: BucketCache) -> None:
    solve = Counting()
    with pytest.warns(CacheWarning, match="not usable") as record:
        for _ in range(3):
            sol = cache.get_or_solve(hist(), "optimal", PARAMS, solve)
    assert len(record) == 1 and solve.calls == 3
    assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()


def test_directory_under_a_file_works_uncached(tmp_path):
    """A file at (or above) the directory was told only at the first solve; it is now told where
    the cache is made, naming the file, and the solves stay quiet (s8-polish). An empty path
    (the current directory) is an error, and ``~`` is expanded."""
    (tmp_path / "file").write_text("x")
    for directory, blocker in [
        (tmp_path / "file" / "cache", "'.*file' is"),
        (tmp_path / "file", "it is"),
    ]:
        with pytest.warns(CacheWarning, match=rf"not usable \({blocker} a file\)") as record:
            cache = BucketCache(directory)
        assert len(record) == 1 and record[0].filename == __file__
        solve = Counting()
        with warnings.catch_warnings(record=True) as later:
            warnings.simplefilter("always")
            for _ in range(3):
                sol = cache.get_or_solve(hist(), "optimal", PARAMS, solve)
        assert not later and solve.calls == 3
        assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()
    assert (tmp_path / "file").read_text() == "x"
    with pytest.raises(ValueError, match="got directory=''; an empty path means the current"):
        BucketCache("")
    assert BucketCache("~/bl").directory == Path.home() / "bl"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores chmod")
def test_read_only_directory_works_uncached(tmp_path):
    tmp_path.chmod(0o555)
    try:
        _assert_uncached_with_one_warning(BucketCache(tmp_path))
    finally:
        tmp_path.chmod(0o755)


def _refuse_creating_files_in(directory: Path, monkeypatch) -> None:
    """Root ignores chmod: simulate EACCES where the cache creates its temporary file, with the
    file's random name in the error, as a read-only directory gives."""
    real_open = os.open

    def guarded(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and Path(path).parent == directory and ".tmp-" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)


def test_unwritable_directory_simulated(tmp_path, monkeypatch):
    _refuse_creating_files_in(tmp_path, monkeypatch)
    _assert_uncached_with_one_warning(BucketCache(tmp_path))


def test_read_only_directory_warns_once_per_directory_per_process(tmp_path, monkeypatch):
    """50 calls, each with a new BucketCache and new lengths: one warning (it was 70, the random
    temporary-file name in the message defeating the warnings module's de-duplication)."""
    _refuse_creating_files_in(tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        for i in range(50):
            compute_boundaries([*LENGTHS, 40 + i], 3, cache=BucketCache(tmp_path))
    messages = [str(w.message) for w in record if issubclass(w.category, CacheWarning)]
    assert len(messages) == 1, messages
    assert "Permission denied" in messages[0] and ".tmp-" not in messages[0]
    other = tmp_path / "other"
    other.mkdir()
    _refuse_creating_files_in(other, monkeypatch)
    with pytest.warns(CacheWarning, match="not usable"):  # another directory: its own warning
        compute_boundaries(LENGTHS, 3, cache=BucketCache(other))


def test_an_entry_this_user_cannot_read_is_named_not_the_directory(tmp_path, monkeypatch):
    """Another user's entry written under umask 077 (0600) was told as "cache directory ... is
    not usable ...; solutions are computed without caching", and then this user's solution was
    stored in that directory: the entry is the problem, named with the fix."""
    import bucketloader.cache.store as store

    cache = BucketCache(tmp_path)
    compute_boundaries(LENGTHS, 3, cache=cache)
    (entry,) = tmp_path.glob("*.json")

    def refused(path):  # (root reads a 0600 file: the refusal is simulated)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(store, "read_entry", refused)
    cache = BucketCache(tmp_path)
    with pytest.warns(CacheWarning) as record:
        compute_boundaries(LENGTHS, 3, cache=cache)
    (message,) = [str(w.message) for w in record]
    assert f"ignoring unreadable cache entry {entry} (Permission denied;" in message
    assert "umask 022 or 002" in message and "not usable" not in message
    assert (cache.hits, cache.misses) == (0, 1)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_entries_honour_the_umask(tmp_path, umask):
    """mkstemp made every entry 0600, unreadable on a shared cache directory."""
    old = os.umask(umask)
    try:
        cache = BucketCache(tmp_path / "shared")
        compute_boundaries(LENGTHS, 3, cache=cache)
    finally:
        os.umask(old)
    (entry,) = (tmp_path / "shared").glob("*.json")
    assert entry.stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "shared").stat().st_mode & 0o777 == 0o777 & ~umask


def test_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    monkeypatch.delenv("BUCKETLOADER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert default_cache_dir() == Path.home() / ".cache" / "bucketloader"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "bucketloader"


def _foreign(kind: str, path: Path, outside: Path) -> None:
    """Put something at an entry path that bucketloader did not write."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "user-file").write_text("mine")
    elif kind == "symlink to a user file":
        outside.write_text("user data")
        path.symlink_to(outside)
    elif kind == "symlink to a valid entry":
        outside.write_bytes(_valid_entry(outside.parent / "elsewhere")[2])
        path.symlink_to(outside)
    elif kind == "dangling symlink":
        path.symlink_to(outside)
    elif kind == "socket":
        import socket

        cwd = os.getcwd()
        os.chdir(path.parent)  # AF_UNIX paths are limited to about 100 bytes
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(path.name)
            sock.close()
        finally:
            os.chdir(cwd)


def _fingerprint(path: Path) -> tuple:
    st = os.lstat(path)
    target = os.readlink(path) if os.path.islink(path) else None
    inside = sorted(os.listdir(path)) if path.is_dir() and not path.is_symlink() else None
    return st.st_mode, st.st_ino, target, inside


FOREIGN = [
    "fifo",
    "directory",
    "symlink to a user file",
    "symlink to a valid entry",
    "dangling symlink",
    "socket",
]


@pytest.mark.timeout(30)  # a FIFO used to hang open() forever
@pytest.mark.parametrize("kind", FOREIGN)
def test_foreign_file_at_an_entry_path_is_never_read_replaced_or_deleted(tmp_path, kind):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    path = cache_dir / f"{GOLDEN_KEY}.json"
    outside = tmp_path / "outside.json"
    _foreign(kind, path, outside)
    before = _fingerprint(path)
    outside_before = outside.read_bytes() if outside.exists() else None
    solve = Counting()
    with pytest.warns(CacheWarning, match="bucketloader did not write") as record:
        for _ in range(3):  # every call solves, one warning in all
            sol = BucketCache(cache_dir).get_or_solve(hist(), "optimal", PARAMS, solve)
    assert len(record) == 1 and solve.calls == 3
    assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()
    assert _fingerprint(path) == before
    assert (outside.read_bytes() if outside.exists() else None) == outside_before
    cache = BucketCache(cache_dir, max_size=1)
    cache.put(hist([1, 2]), solve_boundaries([1, 2], 1))  # an eviction pass runs
    assert cache.clear() == 1  # only the entry it wrote
    assert _fingerprint(path) == before


def test_oversized_entry_is_not_read_whole(tmp_path):
    _, path, valid = _valid_entry(tmp_path)
    path.write_bytes(valid[:-2] + b" " * (5 * 2**20) + b"}\n")  # valid JSON, 5 MiB
    with pytest.warns(CacheWarning, match="larger than 4194304 bytes"):
        sol = BucketCache(tmp_path).get_or_solve(hist(), "optimal", PARAMS, Counting())
    assert sol.boundaries.tolist() == compute_boundaries(LENGTHS, 3).tolist()


def test_eviction_removes_oldest_first_and_stays_under_the_limit(tmp_path):
    cache = BucketCache(tmp_path, max_size=None)
    keys = []
    for i, k in enumerate(range(1, 9)):
        sol = solve_boundaries(LENGTHS, k)
        keys.append(cache.put(hist(), sol))
        os.utime(cache.path_for(keys[-1]), ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    sizes = [cache.path_for(k).stat().st_size for k in keys]
    limit = sum(sizes[4:]) + sizes[0] // 2  # room for the newest four and a half
    limited = BucketCache(tmp_path, max_size=limit)
    new_key = limited.put(hist(), solve_boundaries(LENGTHS, 9))
    left = {p.stem for p in tmp_path.glob("*.json")}
    assert limited.size() <= 0.99 * limit
    assert new_key in left
    oldest_first = [k for k in keys if k not in left]
    assert oldest_first == keys[: len(oldest_first)] and len(oldest_first) >= 1
    assert keys[-1] in left
    assert not (tmp_path / ".lock").read_bytes()  # a lock file, nothing else


def test_eviction_never_exceeds_limit_over_many_writes(tmp_path):
    limit = 6000
    cache = BucketCache(tmp_path, max_size=limit)
    for k in range(1, 40):
        cache.put(hist(), solve_boundaries(LENGTHS, k, strategy="linear"))
        assert cache.size() <= limit
    assert 1 <= len(cache) < 39


def test_clear_and_validation(tmp_path):
    cache = BucketCache(tmp_path)
    compute_boundaries(LENGTHS, 2, cache=cache)
    assert len(cache) == 1 and cache.clear() == 1 and len(cache) == 0
    with pytest.raises(ValueError, match="max_size must be an int >= 1, got max_size=0"):
        BucketCache(tmp_path, max_size=0)
    with pytest.raises(TypeError, match="directory must be a path"):
        BucketCache(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key must be a 64-character"):
        cache.path_for("../../etc/passwd")


def _hammer(directory: str, worker: int, rounds: int, queue) -> None:
    warnings.simplefilter("error")  # any CacheWarning (a corrupt read) fails the worker
    expected = compute_boundaries(LENGTHS, 3).tolist()
    try:
        for i in range(rounds):
            cache = BucketCache(directory, max_size=4000)
            sol = cache.get_or_solve(hist(), "optimal", PARAMS, Counting())
            if sol.boundaries.tolist() != expected:
                raise AssertionError(f"wrong boundaries {sol.boundaries.tolist()}")
            if (i + worker) % 2 == 0:  # rewrite the same key while others read it
                cache.put(hist(), sol)
            if i % 10 == worker % 10:  # other keys too, so eviction runs concurrently
                cache.put(hist(), solve_boundaries(LENGTHS, 1 + (i + worker) % 6))
        queue.put((worker, "ok"))
    except BaseException as exc:
        queue.put((worker, f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("links", ["hard links", "no hard links"])
def test_the_first_solution_stored_wins_over_a_later_solve_of_the_same_key(
    tmp_path, monkeypatch, links
):
    """s29-user: two processes missing one key at once both solved, and the last writer
    replaced the first's entry; a time-limited (joint) solve gives each another plan, so the
    cache held a plan the first job had not trained with and its checkpoints were refused at
    the restart meant to read its plan back. An entry stored while this process solved is now
    kept, and this process takes its solution. On a filesystem without hard links (FAT, some
    network and FUSE mounts: os.link raises) the entry is checked for, then renamed in."""
    import dataclasses

    if links == "no hard links":

        def no_link(src, dst, *args, **kwargs):
            raise PermissionError(1, "Operation not permitted", str(dst))

        monkeypatch.setattr(os, "link", no_link)

    ours = solve_boundaries(LENGTHS, 3)
    b = np.array([4, 10, 31])  # another valid answer to the same question (not the optimum)
    theirs = dataclasses.replace(
        ours,
        boundaries=b,
        objective=int(padding_cost(hist(), b)),
        padding_ratio=padding_cost(hist(), b) / int(np.sum(LENGTHS)),
    )
    assert theirs.boundaries.tolist() != ours.boundaries.tolist()

    def solve_while_another_process_stores():
        BucketCache(tmp_path).put(hist(), theirs)  # the other process finished first
        return ours

    cache = BucketCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = cache.get_or_solve(hist(), "optimal", PARAMS, solve_while_another_process_stores)
    assert got.boundaries.tolist() == [4, 10, 31]  # theirs, as every later reader gets
    assert BucketCache(tmp_path).get(GOLDEN_KEY).boundaries.tolist() == [4, 10, 31]
    assert (cache.hits, cache.misses) == (0, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{GOLDEN_KEY}.json"]  # no temp left
    # an unusable entry found at the lookup is still replaced by the solve
    cache.path_for(GOLDEN_KEY).write_bytes(b"{")
    with pytest.warns(CacheWarning, match="recomputing and replacing it"):
        got = BucketCache(tmp_path).get_or_solve(hist(), "optimal", PARAMS, Counting())
    assert got.boundaries.tolist() == ours.boundaries.tolist()
    assert BucketCache(tmp_path).get(GOLDEN_KEY).boundaries.tolist() == ours.boundaries.tolist()


def test_eight_processes_hammering_one_key(tmp_path):
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(str(tmp_path), w, 50, queue)) for w in range(8)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert results == {w: "ok" for w in range(8)}
    assert all(p.exitcode == 0 for p in procs)
    assert not list(tmp_path.glob(".tmp-*"))  # no temporary file left behind
    assert BucketCache(tmp_path).get(GOLDEN_KEY) is not None


_DIST_WORKER = r"""
import json, sys, warnings
import torch.distributed as dist
from bucketloader import compute_boundaries
from bucketloader.solve import solve_boundaries
from bucketloader.cache import BucketCache
from bucketloader.histogram import LengthHistogram

rank, world, port, shared, local = int(sys.argv[1]), 2, sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
warnings.simplefilter("error")
lengths = [3, 4, 4, 9, 10, 31, 31, 7, 12, 18]
out = {}
calls = []

def solve(k):
    def fn():
        calls.append(k)
        return solve_boundaries(lengths, k)
    return fn

h = LengthHistogram.from_lengths(lengths)
params = {"cost": "linear", "pad_to_multiple_of": 1, "num_buckets": 3}
cache = BucketCache(shared)  # a shared directory
out["shared"] = cache.get_or_solve(h, "optimal", params, solve(3)).boundaries.tolist()
out["shared_again"] = cache.get_or_solve(h, "optimal", params, solve(3)).boundaries.tolist()
node_local = BucketCache(local)  # a different directory per rank: a non-shared filesystem
p2 = {**params, "num_buckets": 2}
out["local"] = node_local.get_or_solve(h, "optimal", p2, solve(2)).boundaries.tolist()
out["local_entries"] = len(node_local)
out["via_compute_boundaries"] = compute_boundaries(lengths, 4, cache=cache).tolist()
out["calls"] = calls
out["hits_misses"] = [cache.hits, cache.misses]

def boom():
    raise ValueError("solver exploded")

try:
    cache.get_or_solve(h, "percentile", params, boom)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
# s30-rev: another job stores the same key in rank 1's node-local directory after rank 1
# looked for it (exists() said no): rank 1 keeps that entry (NOTE [ The first stored solution
# wins ]), as rank 0 would; it replaced it with this job's plan
import dataclasses, pathlib
import numpy as np
from bucketloader.boundaries import padding_cost
late = BucketCache(local + "-late")
p5 = {**params, "num_buckets": 5}
if rank == 1:
    ours = solve_boundaries(lengths, 5)
    b = np.array([4, 7, 10, 18, 31])
    theirs = dataclasses.replace(ours, boundaries=b, objective=int(padding_cost(h, b)),
                                 padding_ratio=padding_cost(h, b) / int(np.sum(lengths)))
    assert theirs.boundaries.tolist() != ours.boundaries.tolist()
    BucketCache(local + "-late").put(h, theirs)  # (stored by the other job...)

    class Unseen(type(pathlib.Path())):
        def exists(self, *args, **kwargs):  # (...just after rank 1 looked)
            return False

    path_for = late.path_for
    late.path_for = lambda key: Unseen(path_for(key))
late.get_or_solve(h, "optimal", p5, lambda: solve_boundaries(lengths, 5))
if rank == 1:
    kept = BucketCache(local + "-late").get(late.key(h, "optimal", p5))
    out["late_kept"] = kept.boundaries.tolist()
mine = lengths if rank == 0 else lengths + [50]
try:
    compute_boundaries(mine, 3, cache=cache)
    out["mismatch"] = "no error"
except ValueError as exc:
    out["mismatch"] = str(exc)
dist.destroy_process_group()
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_distributed_rank0_solves_and_broadcasts(tmp_path):
    pytest.importorskip("torch.distributed")
    script = tmp_path / "worker.py"
    script.write_text(_DIST_WORKER)
    port, shared = str(free_port()), str(tmp_path / "shared")
    logs = run_ranks(
        lambda r: [str(script), str(r), port, shared, str(tmp_path / f"local{r}")], 2, timeout=120
    )
    results = []
    for log in logs:
        line = next(x for x in log.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    r0, r1 = results
    expected3 = compute_boundaries(LENGTHS, 3).tolist()
    assert r0["shared"] == r1["shared"] == r0["shared_again"] == r1["shared_again"] == expected3
    assert r0["local"] == r1["local"] == compute_boundaries(LENGTHS, 2).tolist()
    assert r0["via_compute_boundaries"] == r1["via_compute_boundaries"]
    assert r0["calls"] == [3, 2] and r1["calls"] == []  # only rank 0 ever solved
    assert r0["local_entries"] == r1["local_entries"] == 1  # rank 1 stored its own copy
    assert r0["error"] == "ValueError: solver exploded"
    assert r1["error"].startswith("RuntimeError: rank 0 failed")
    assert "solver exploded" in r1["error"]
    # a mismatch is an error on every rank, rank 0 included (alone it would hang later)
    assert "rank(s) [1]" in r0["mismatch"] and "different lengths or options" in r0["mismatch"]
    assert "rank(s) [1]" in r1["mismatch"] and "different lengths or options" in r1["mismatch"]
    assert len(BucketCache(shared)) == 2  # k=3 and k=4; the mismatch call was a hit on rank 0
    assert r1["late_kept"] == [4, 7, 10, 18, 31]  # the other job's entry, stored first, kept


def _writer_stopped_before_rename(directory: Path, write=None) -> tuple[int, Path]:
    """A real writer process (forked) that writes an entry's temporary file and stops just before
    the rename (it waits there until killed): what ``kill -9`` between write and rename leaves.
    ``write()``: the write (default: a BucketCache entry in ``directory``)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a BucketCache write whose rename never comes
        try:
            import bucketloader._files as files

            def stop(src, dst):
                os.write(w, os.fsencode(str(src)) + b"\n")
                while True:
                    time.sleep(60)

            files.os.replace = stop  # this process only
            if write is None:
                BucketCache(directory).put(hist([5, 6, 7]), solve_boundaries([5, 6, 7], 2))
            else:
                write()
        finally:
            os._exit(3)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        part = Path(os.fsdecode(f.readline().strip()))
    assert part.is_file() and part.name.endswith(".part"), part
    return pid, part


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_orphaned_temporary_files_are_removed_on_a_hit_but_never_a_live_writers(tmp_path, caplog):
    cache = BucketCache(tmp_path)
    cache.get_or_solve(hist(), "optimal", PARAMS, Counting())  # the entry: later lookups hit
    live, writing = _writer_stopped_before_rename(tmp_path)  # still writing (alive)
    dead, orphan = _writer_stopped_before_rename(tmp_path)
    _kill(dead)  # killed between the write and the rename: its .part is an orphan
    try:
        solve = Counting()
        with caplog.at_level(logging.DEBUG, logger="bucketloader.cache.store"):
            reopened = BucketCache(tmp_path)
            reopened.get_or_solve(hist(), "optimal", PARAMS, solve)
        assert (reopened.hits, solve.calls) == (1, 0)  # a hit: no write that would clean
        assert not orphan.exists()  # the dead writer's leftover is gone
        assert writing.is_file()  # the live writer's file is never touched
        assert "removed 1 temporary file" in caplog.text and str(tmp_path) in caplog.text
    finally:
        _kill(live)
    again = BucketCache(tmp_path)  # opened once more: the writer that just died is cleaned too
    assert again.get(again.key(hist(), "optimal", PARAMS)) is not None
    assert not writing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        cache.path_for(cache.key(hist(), "optimal", PARAMS)).name
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_compile_cache_hits_remove_orphaned_records_but_never_a_live_writers(tmp_path, caplog):
    """The same for CompileCache's records (``entries/<key>/``): a run whose every shape hits
    never wrote, so a killed writer's temporary file stayed."""
    from bucketloader.compile import CompileCache
    from bucketloader.compile._key import digest

    model = {"model": "m"}
    key = digest(model)
    CompileCache(tmp_path).put(key, model, (4, 8), {"x": 1}, cold_seconds=2.0)

    def record(i):
        return lambda: CompileCache(tmp_path).put(
            key, model, (4, 8 + i), {"x": i}, cold_seconds=1.0
        )

    live, writing = _writer_stopped_before_rename(tmp_path, record(1))
    dead, orphan = _writer_stopped_before_rename(tmp_path, record(2))
    _kill(dead)
    try:
        assert writing.parent == orphan.parent == tmp_path / "entries" / key
        with caplog.at_level(logging.DEBUG, logger="bucketloader.compile.store"):
            assert CompileCache(tmp_path).get(key, (4, 8), {"x": 1}).cold_seconds == 2.0  # a hit
        assert not orphan.exists() and writing.is_file()
        assert "removed 1 temporary file" in caplog.text
    finally:
        _kill(live)
    assert len(CompileCache(tmp_path).records(key)) == 1 and not writing.exists()


def test_a_live_writer_on_another_machine_with_this_hostname_is_never_taken_for_dead(
    tmp_path, monkeypatch
):
    """rev1: a writer's name carried only the hostname and the PID namespace's inode, and the
    initial namespace has the same inode on every Linux kernel: on a shared filesystem, a
    machine cloned with this one's hostname writing as a PID that is dead here had its file,
    still being written, removed by this machine's first lookup (its rename then failed). The
    kernel's boot id tells the machines apart."""
    import socket

    import bucketloader._files as files

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    elsewhere = int(done.stdout)  # a PID that no longer runs here
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")  # cloned machines
    real = files._boot_id() if hasattr(files, "_boot_id") else ""
    monkeypatch.setattr(files, "_boot_id", lambda: "another-" + real, raising=False)
    monkeypatch.setattr(files.os, "getpid", lambda: elsewhere)
    files._host.cache_clear()
    fd, writing = files.create_temp(tmp_path)  # the other machine's writer, mid-write
    os.close(fd)
    monkeypatch.undo()
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")  # this machine
    files._host.cache_clear()
    try:
        if not real and not os.path.exists("/proc/self/ns/pid"):
            pytest.skip("no boot id or PID namespace to tell machines apart")
        assert BucketCache(tmp_path).get("0" * 64) is None  # a lookup: its sweep
        assert writing.is_file()  # another machine's live writer: never touched
    finally:
        files._host.cache_clear()


def test_the_hour_old_sweep_removes_only_files_named_as_our_writer_names_them(tmp_path):
    """s10 left alone: the one-hour rule removed any ``.tmp-*.part`` file in the cache
    directory, so a user's file that happened to match was deleted by a lookup. Only the exact
    name a writer gives (``.tmp-<host>-<pid>-<random>.part``) is ever removed."""
    import bucketloader._files as files

    fd, ours = files.create_temp(tmp_path)  # (this writer: alive, removed only for its age)
    os.close(fd)
    foreign = tmp_path / f".tmp-0123abcd-{2**22 + 7}-{'5f' * 8}.part"  # another host's
    theirs = [
        ".tmp-notes.part",
        ".tmp-a-1-b.part",
        f".tmp-0123abcd-12-{'5f' * 7}.part",
        f".tmp-0123ABCD-12-{'5f' * 8}.part",
        f".tmp-0123abcd-12-{'5f' * 8}.part.bak",
    ]
    for p in (foreign, *(tmp_path / n for n in theirs)):
        p.write_text("x")
    old = time.time() - 2 * files.STALE_TMP_SECONDS
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    assert BucketCache(tmp_path).get("0" * 64) is None  # a lookup: its sweep
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)
    assert not ours.exists() and not foreign.exists()
