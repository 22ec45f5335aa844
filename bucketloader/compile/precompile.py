"""precompile(): compile a training step for every planned batch shape before training.

NOTE [ Why precompile ]
Under ``torch.compile(dynamic=False)`` every batch shape is a graph. Compiled lazily, each one
stalls the step that first meets it (20-150 s per shape with inductor on a 2-core CPU), and with
``N`` ranks and ``S`` shapes the ranks stall one after another: up to ``N * (S - 1) + 1`` stalls,
each rank idling at the next collective while another compiles a shape it has not seen yet. A
bucketloader plan lists its shapes before step 1 (``sampler.shapes``), so they can be compiled
up front, once: split among the ranks, shared through the cache directory (or sent over
``torch.distributed``), loaded by every rank, and kept for the next run.

NOTE [ Sharing across ranks ]
With ``torch.distributed`` initialised and ``CompileCache(distributed=True)`` (the default),
``precompile`` is a collective. Rank 0 assigns every shape the cache has no record of to one rank
(largest shapes first, round robin) and broadcasts the assignment; each rank compiles its share
("compile" phase), the ranks share the new artifacts, then every rank runs every other shape
("load" phase), which finds the artifacts and skips code generation and the C++ compiler. The
artifacts are shared through the cache directory when every rank sees it (one node, or a shared
filesystem: ``share="auto"`` checks with a marker file per rank), else each rank's new files in
the inductor directory (fxgraph, aotautograd, kernels) are sent to all ranks with
``all_gather_object`` and written where missing (``share="collective"`` forces this). After
``precompile`` returns, every rank holds every shape's graph in memory: no compile stall at any
step. Shapes that every rank's cache has a record of are loaded by every rank, compiled by none.
The ranks must plan the same shapes (the split is by index): other plans are one ``ValueError``
on every rank at the assignment, naming the first shape that differs.
A rank that raises (a refused argument, its step on a shape of its share or of the load phase)
says so at the others' next checkpoint (NOTE [ Checkpoints before a collective ] in
:mod:`bucketloader._dist`: one ``all_reduce`` of a code per rank before the assignment, before
the sharing and at the end): every other rank raises a ``RuntimeError`` naming it and its error,
where they waited for it in the sharing's first collective (or, after a load phase that raised,
in training's first) until the process group's timeout (30 minutes by default; a two-rank gloo
check with a 60 s timeout waited 61 s), or failed with gloo's opaque "Connection closed by peer"
once its process exited. A rank whose cache directory is not usable (one warning on that rank)
takes part in no sharing: the ranks learn it at the first checkpoint (one flag per rank), and
then none shares, each compiling every shape itself, with one warning naming that rank (before,
the others waited for it in the sharing's first collective until the timeout). An error inside
the sharing's own collectives (they catch the filesystem's) is not told.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from bucketloader._dist import (
    PRECOMPILE_ASSIGN,
    PRECOMPILE_END,
    PRECOMPILE_SHARE,
    checkpoint,
    collectives,
    tell_failure,
)
from bucketloader._validation import check_bool, check_folder, checks_options
from bucketloader.compile import _dist
from bucketloader.compile._key import (
    batch_signature,
    check_torch,
    compile_options,
    digest,
    key_document,
)
from bucketloader.compile._state import (
    Snapshot,
    check_restorable,
    describe,
    discover,
    reported,
)
from bucketloader.compile.batches import ExampleBatches, check_shapes, to_device
from bucketloader.compile.store import CompileCache, CompileCacheWarning

__all__ = ["PrecompileReport", "ShapeTiming", "precompile"]

_T = TypeVar("_T")

#: ``ShapeTiming.cache`` values.
CACHE_KINDS = ("cold", "warm", "traced", "memory")


@dataclass(frozen=True)
class ShapeTiming:
    """One planned shape's first call during :func:`precompile`.

    Attributes:
        shape: the batch shape.
        seconds: wall time of the step's first call on it (compile or load, plus one step).
        graphs: graphs dynamo compiled during the call.
        cache: ``"cold"`` (inductor generated and compiled code: a cache miss), ``"warm"`` (every
            graph came from the cache directory), ``"traced"`` (graphs compiled by a backend
            without on-disk artifacts, such as ``"eager"`` or ``"aot_eager"``), ``"memory"`` (no
            new graph: this process had compiled the shape already, or a dynamic-shape graph
            runs it: NOTE [ dynamic=None and the planned shapes ]).
        cached: the cache held a record of this shape before the call (a predicted warm start).
        phase: ``"compile"`` (this rank's share) or ``"load"`` (shapes other ranks compiled, or
            recorded ones).
        compiled_by: the rank assigned to compile the shape (``-1``: recorded before this run).

    Example:
        >>> row = ShapeTiming((8, 128), 41.5, 1, "cold", False, "compile", 0)  # one of report.rows
        >>> f"{row.shape}: compiled by rank {row.compiled_by}, {row.cache}, {row.seconds} s"
        '(8, 128): compiled by rank 0, cold, 41.5 s'
    """

    shape: tuple[int, ...]
    seconds: float
    graphs: int
    cache: str
    cached: bool
    phase: str
    compiled_by: int


@dataclass(frozen=True)
class PrecompileReport:
    """What :func:`precompile` did on this rank: a row per shape, and the totals.

    Attributes:
        rows: one :class:`ShapeTiming` per planned shape (and batch structure), in call order.
        key: the compile key (NOTE [ The compile key ] in :mod:`bucketloader.compile.store`);
            ``None`` with ``cache=False``.
        cache_dir: the inductor cache directory used (``None`` with ``cache=False``).
        restored: the objects whose state was snapshotted and restored.
        world_size, rank: the process group (``1, 0`` without one).
        shared_by: how artifacts reached the other ranks (``"filesystem"``, ``"collective"``,
            ``None`` on one rank).
        wall_seconds: the whole call, batches and snapshot included.
        wait_seconds: time spent waiting for the other ranks and exchanging artifacts.
        files_received: artifact files written from other ranks (``"collective"`` only).
        recompile_limit: ``torch._dynamo.config.recompile_limit`` after the call (raised to the
            number of planned shapes plus the graphs compiled before the call, if it was lower:
            NOTE [ The recompile limit over several plans ]).

    Example:
        >>> import torch
        >>> from bucketloader import BucketSampler
        >>> compiled = torch.compile(torch.nn.Embedding(16, 4), backend="eager", dynamic=False)
        >>> sampler = BucketSampler([5, 9, 9], num_buckets=2, batch_size=3)
        >>> report = precompile(lambda b: compiled(b["inputs"]), sampler, example=[1, 2],
        ...                     cache=False, progress=False)
        >>> report.shapes, report.key, report.world_size, report.restored
        ([(3, 5), (3, 9)], None, 1, ('Embedding (module)',))
        >>> [(r.shape, r.phase, r.compiled_by) for r in report.rows]  # ShapeTiming
        [((3, 5), 'compile', 0), ((3, 9), 'compile', 0)]
        >>> print(str(report).splitlines()[1])  # str(): a summary line and a table per shape
        | shape | phase | compiled by | cache | recorded before | graphs | seconds |
    """

    rows: tuple[ShapeTiming, ...]
    key: str | None
    cache_dir: Path | None
    restored: tuple[str, ...]
    world_size: int = 1
    rank: int = 0
    shared_by: str | None = None
    wall_seconds: float = 0.0
    wait_seconds: float = 0.0
    files_received: int = 0
    recompile_limit: int = 0

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """The precompiled shapes, sorted."""
        return sorted({r.shape for r in self.rows})

    def seconds(self, phase: str | None = None) -> float:
        """Total seconds of the rows (of one phase: ``"compile"`` or ``"load"``)."""
        return sum(r.seconds for r in self.rows if phase is None or r.phase == phase)

    def count(self, cache: str) -> int:
        """How many rows have this ``cache`` kind (one of :data:`CACHE_KINDS`)."""
        return sum(r.cache == cache for r in self.rows)

    def table(self) -> str:
        """The per-shape time table, as markdown."""
        lines = [
            "| shape | phase | compiled by | cache | recorded before | graphs | seconds |",
            "|---|---|---:|---|---|---:|---:|",
        ]
        for r in self.rows:
            by = "earlier run" if r.compiled_by < 0 else f"rank {r.compiled_by}"
            lines.append(
                f"| {r.shape} | {r.phase} | {by} | {r.cache} | {'yes' if r.cached else 'no'} | "
                f"{r.graphs} | {r.seconds:.2f} |"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: shapes, cold/warm counts, times."""
        ranks = f" on rank {self.rank} of {self.world_size}" if self.world_size > 1 else ""
        kinds = ", ".join(f"{self.count(k)} {k}" for k in CACHE_KINDS if self.count(k))
        return (
            f"precompiled {len(self.shapes)} shapes{ranks} in {self.wall_seconds:.1f} s ({kinds}; "
            f"compile {self.seconds('compile'):.1f} s, load {self.seconds('load'):.1f} s, "
            f"waiting {self.wait_seconds:.1f} s)"
        )

    def __str__(self) -> str:
        return f"{self.summary()}\n{self.table()}"


@checks_options
def precompile(
    step: Callable[[Any], Any],
    plan: object,
    *,
    example: object = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    device: torch.device | str | None = None,
    restore: object = None,
    cache: CompileCache | str | os.PathLike[str] | bool | None = None,
    progress: bool = True,
) -> PrecompileReport:
    """Compile ``step`` for every planned batch shape, before training, without changing state.

    Calls ``step(batch)`` once per shape on a batch of exactly that shape, built through the
    collator training uses (:class:`~bucketloader.compile.ExampleBatches`: one real sample resized
    and collated ``B`` times, so fields, dtypes, masks and devices match real batches and so do
    dynamo's guards). ``step`` is your compiled training step (forward, backward and optimizer
    step; or a compiled model's forward and backward): whatever it compiles on the first call of a
    shape is compiled now, and training then meets no new shape. Everything the step changes
    (parameters, buffers such as BatchNorm statistics, gradients, optimizer state, schedulers,
    random generators) is restored exactly afterwards (NOTE [ Compiling without touching the
    model ] in :mod:`bucketloader.compile._state`). The compiled artifacts go to a
    :class:`CompileCache` (next to the bucket cache by default), so a rerun loads them instead of
    compiling; on several ranks each compiles its share and all load all (NOTE [ Sharing across
    ranks ] in :mod:`bucketloader.compile.precompile`). The recompile limit is raised to the
    number of planned shapes (plus the graphs compiled before, such as another plan's) if it is
    lower (past it, dynamo falls back to eager).

    Args:
        step: the compiled callable training calls on each batch, ``step(batch)``; e.g. a
            ``torch.compile``'d train step, or ``lambda b: compiled_model(**b).loss.backward()``.
            Compile it with ``dynamic=False``: one static graph per planned shape.
        plan: what training iterates: a :class:`~bucketloader.BucketSampler`, an
            :class:`~bucketloader.EvalSampler` (an evaluation step: its batches have every row
            real), a :class:`~bucketloader.BucketIterable`, a packing plan (``.shapes`` and
            ``.collator()``), or any batch source with ``.shapes`` and ``.make_batch(shape)``
            (NOTE [ The batch-source protocol ] in :mod:`bucketloader.compile.batches`).
        example: one real sample, or the dataset (its first sample of each group is used; a
            one-shot iterator is refused: the sample taken would be lost to training); required
            unless ``plan`` is a batch source.
        collate_fn: the collator your ``DataLoader`` uses (default ``plan.collator()``).
        device: where the training loop moves each batch before calling ``step`` (``None``: the
            batch stays as collated).
        restore: modules, optimizers and objects with ``state_dict``/``load_state_dict`` whose
            state ``step`` changes; ``None`` finds everything ``step`` can reach (bound methods'
            objects, attributes, closures at any depth, ``functools.partial``, the globals its
            code names) and refuses with a ``ValueError`` when it cannot prove it found it all
            (NOTE [ Finding what a step can change ] in :mod:`bucketloader.compile._state`).
            The report lists what was restored.
        cache: a :class:`CompileCache`, a directory for one, ``None`` (the default cache), or
            ``False`` (leave inductor's cache configuration alone, record nothing, share nothing).
        progress: show a progress bar (``tqdm``, if installed; rank 0 only).

    Returns:
        A :class:`PrecompileReport`: a row per shape (seconds, graphs, cold / warm / traced /
        memory), the key and directory, the restored objects; ``print(report)`` shows the table.

    Example:
        >>> import torch
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler([3, 5, 8, 8, 12], num_buckets=2, batch_size=2)
        >>> model = torch.nn.Embedding(16, 4)
        >>> compiled = torch.compile(model, backend="eager", dynamic=False)
        >>> def step(batch):  # forward and backward, as in training
        ...     compiled(batch["inputs"]).sum().backward()
        >>> report = precompile(step, sampler, example=[1, 2, 3], cache=False, progress=False)
        >>> report.shapes, [r.graphs for r in report.rows], model.weight.grad is None
        ([(2, 8), (2, 12)], [1, 1], True)
    """
    start = time.perf_counter()
    check_torch("precompile")
    # NOTE [ Checkpoints before a collective ] in bucketloader._dist: while the others have one
    # ahead (not during the sharing's own collectives, nor after the end's), a rank that raises
    # tells them, and they raise naming it, where they waited for it
    gate = _Gate(
        _dist.world()[0] > 1 and cache is not False and getattr(cache, "distributed", True)
    )
    try:
        if not callable(step):
            raise TypeError(
                "step must be callable (your torch.compile'd train step or model), got "
                f"step={step!r}"
            )
        progress = check_bool("progress", progress)
        dev = _check_device(device)
        store = _at_caller(lambda: _check_cache(cache))
        source = _source(plan, example, collate_fn)
        targets = _batches(source)  # as collated; moved to the device one at a time
        found, compiled, unproven = discover(step)
        if restore is None and unproven:
            raise ValueError(
                "precompile cannot prove it found everything step changes ("
                + "; ".join(unproven)
                + "), so running it on synthetic batches could train your model; pass "
                "restore=[model, optimizer, ...] listing every module, optimizer and object "
                "with state_dict() that step changes (NOTE [ Finding what a step can change ] "
                "in bucketloader.compile._state)"
            )
        objects = found if restore is None else check_restorable(restore)
        keyed = list({id(o): o for o in [*objects, *found]}.values())

        sharing = store is not None and store.distributed and _dist.world()[0] > 1
        if store is not None and not _at_caller(store.activate):
            store = None  # unusable directory: one warning, then as cache=False
        document = key_document(step, keyed, to_device(targets[0][1], dev), compiled)
        key = digest(document)
        signatures = [batch_signature(to_device(b, dev)) for _, b in targets]
        records = [
            store.get(key, shape, sig) if store is not None else None
            for (shape, _), sig in zip(targets, signatures, strict=True)
        ]
        # NOTE [ The recompile limit over several plans ]
        limit = raise_recompile_limit(_graphs() + len(targets))
        ended = sharing  # (every rank that checks in here checks in at the end)
        if sharing:  # every rank knows whether one lacks its cache, before any sharing collective
            lacking = checkpoint(PRECOMPILE_ASSIGN, flag=store is None)
            if lacking and store is not None:
                warnings.warn(
                    f"precompile: the compile cache of rank(s) {lacking} is not usable (their "
                    "own warning says why), so no rank shares its compiles: each compiles "
                    "every planned shape itself; give every rank a writable cache directory",
                    CompileCacheWarning,
                    stacklevel=3,
                )
            sharing = not lacking

        size, rank = _dist.world() if store is not None and sharing else (1, 0)
        with collectives():  # (their own failure is the group's: nothing more is sent)
            owners = _assign(targets, records, size)
        mine = [i for i, owner in enumerate(owners) if owner == rank]
        rest = [i for i, owner in enumerate(owners) if owner != rank]
        show = progress and rank == 0

        rows: list[ShapeTiming] = []
        frames0 = _frames()
        snapshot = Snapshot(objects)
        shared_by, wait, received = None, 0.0, 0
        try:
            before = (
                _dist.artifact_files(store.inductor_dir)
                if store is not None and size > 1
                else set()
            )
            run = _Runner(step, dev, store, key, document, signatures, records, owners, snapshot)
            for i in _bar(mine, show, "precompile" if size == 1 else f"compile (rank {rank})"):
                rows.append(run(i, targets[i], "compile"))
            if size > 1 and store is not None:
                t0 = time.perf_counter()
                checkpoint(PRECOMPILE_SHARE)  # NOTE [ Sharing across ranks ]: a rank's step raised
                gate.open = False  # (the sharing's collectives: every rank takes part in each)
                shared = store.share == "filesystem" or (
                    store.share == "auto" and _dist.sees_shared_directory(store.directory)
                )
                if not shared:
                    new = _dist.artifact_files(store.inductor_dir) - before
                    received = _dist.exchange(store.inductor_dir, new)
                _dist.barrier()
                gate.open = ended
                shared_by = "filesystem" if shared else "collective"
                wait = time.perf_counter() - t0
            for i in _bar(rest, show, "load"):
                rows.append(run(i, targets[i], "load"))
        finally:
            snapshot.restore()
        if ended:  # a rank whose load phase raised is named here, not in training's collectives
            gate.open = False
            checkpoint(PRECOMPILE_END)
    except Exception as exc:
        if gate.open:
            tell_failure(exc)
        raise
    if _dynamic_default(compiled) and len({shape for shape, _ in targets}) > 1:
        warnings.warn(
            "precompile: step is compiled with dynamic=None (torch.compile's default), so at "
            "the second planned shape dynamo made the changing dims dynamic and compiled one "
            "dynamic-shape graph, which runs every later shape (their rows show no new graph): "
            f"{sum(r.graphs for r in rows)} graph(s) for {len(targets)} planned shapes. Pass "
            "torch.compile(..., dynamic=False) for one static graph per planned shape (NOTE "
            "[ dynamic=None and the planned shapes ] in bucketloader.compile.precompile)",
            UserWarning,
            stacklevel=3,  # (2 is checks_options' wrapper: the caller's line is 3)
        )
    if _frames() == frames0 and not compiled:
        warnings.warn(
            "precompile ran step on every planned shape but torch.compile saw no frame: step is "
            "not compiled (pass the torch.compile'd function or module training calls)",
            UserWarning,
            stacklevel=3,  # (2 is checks_options' wrapper: the caller's line is 3)
        )
    return PrecompileReport(
        rows=tuple(rows),
        key=key if store is not None else None,
        cache_dir=store.inductor_dir if store is not None else None,
        restored=tuple(describe(o) for o in reported(objects)),
        world_size=size,
        rank=rank,
        shared_by=shared_by,
        wall_seconds=time.perf_counter() - start,
        wait_seconds=wait,
        files_received=received,
        recompile_limit=limit,
    )


# -- the runner ---------------------------------------------------------------------------------
class _Runner:
    """Times one shape's first call and classifies it from dynamo's and inductor's counters."""

    def __init__(
        self,
        step: Callable[[Any], Any],
        device: torch.device | None,
        store: CompileCache | None,
        key: str,
        document: dict[str, Any],
        signatures: list[Any],
        records: list[Any],
        owners: list[int],
        snapshot: Snapshot,
    ) -> None:
        self.step, self.device, self.store, self.snapshot = step, device, store, snapshot
        self.key, self.document, self.signatures = key, document, signatures
        self.records, self.owners = records, owners
        cuda = (device is not None and device.type == "cuda") or (
            torch.cuda.is_available() and torch.cuda.is_initialized()
        )
        self.sync: Callable[[], None] = torch.cuda.synchronize if cuda else (lambda: None)

    def __call__(self, i: int, target: tuple[tuple[int, ...], Any], phase: str) -> ShapeTiming:
        from torch._dynamo.utils import counters

        shape, batch = target
        batch = to_device(batch, self.device)
        graphs0, cache0 = counters["stats"]["unique_graphs"], _cache_counters()
        self.snapshot.reset_grads()  # NOTE [ Each shape from the same grads ] in _state.py
        t0 = time.perf_counter()
        try:
            self.step(batch)
            self.sync()
        except Exception as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(
                    f"(precompile: step failed on its synthetic batch of shape {shape}, built "
                    f"through the plan's collator{_compiler_hint(exc, self.store)})"
                )
            raise
        seconds = time.perf_counter() - t0
        graphs = counters["stats"]["unique_graphs"] - graphs0
        hits, misses = (a - b for a, b in zip(_cache_counters(), cache0, strict=True))
        if graphs == 0:
            kind = "memory"
        elif misses:
            kind = "cold"
        elif hits:
            kind = "warm"
        else:
            kind = "traced"
        if self.store is not None and kind != "memory":
            cold = seconds if kind in ("cold", "traced") else None
            warm = seconds if kind == "warm" else None
            self.store.put(
                self.key, self.document, shape, self.signatures[i], cold_seconds=cold,
                warm_seconds=warm,
            )  # fmt: skip
        return ShapeTiming(
            shape=shape,
            seconds=seconds,
            graphs=graphs,
            cache=kind,
            cached=self.records[i] is not None,
            phase=phase,
            compiled_by=self.owners[i],
        )


def _compiler_hint(exc: BaseException, store: CompileCache | None) -> str:
    """Where the C++ compiler (or loading what it built) failed under ``exc``: a hint that the
    cause may be inductor's cached files, not the batch (``""`` elsewhere). A damaged cached
    precompiled header or ``.so`` (a compile torn by a full disk, a killed process or a
    concurrent one) makes g++ fail with errors such as "'at::vec' has not been declared", which
    the note's "synthetic batch" alone pointed away from."""
    names = {"CppCompileError", "CUDACompileError"}
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    compiler = loading = False
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        compiler |= any(t.__name__ in names for t in type(e).__mro__)
        loading |= isinstance(e, (ImportError, OSError)) and ".so" in str(e)
        todo += [e.__cause__, e.__context__, getattr(e, "inner_exception", None)]
    if not (compiler or loading):
        return ""
    default = "torch's inductor cache directory"
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        default = default_cache_dir()
    except Exception:  # (a torch without it)
        pass
    where = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default
    remove = [] if store is not None else [where]  # (a fresh CompileCache replaces where)
    if compiler:  # precompiled headers live under torch's default directory, whatever the cache
        codecache = sys.modules.get("torch._inductor.codecache")
        headers = getattr(codecache, "_HEADER_DIR", os.path.join(default, "precompiled_headers"))
        if not any(str(headers).startswith(os.path.join(d, "")) for d in remove):
            remove.append(f"{headers} (torch's precompiled headers, outside any cache directory)")
    fresh = ["with a fresh CompileCache directory"] if store is not None else []
    fresh += [f"after removing {' and '.join(remove)}"] if remove else []
    return (
        f"; the {'C++ compiler' if compiler else 'loading of a compiled library'} failed, which "
        "a damaged inductor cache also causes (files torn by an interrupted or concurrent "
        f"compile): run it again {', '.join(fresh)}"
    )


def _cache_counters() -> tuple[int, int]:
    """(hits, misses + bypasses) of inductor's FX-graph cache and AOTAutograd's cache so far."""
    from torch._dynamo.utils import counters

    ind, aot = counters["inductor"], counters["aot_autograd"]
    hits = ind["fxgraph_cache_hit"] + aot["autograd_cache_hit"]
    misses = (
        ind["fxgraph_cache_miss"]
        + ind["fxgraph_cache_bypass"]
        + aot["autograd_cache_miss"]
        + aot["autograd_cache_bypass"]
    )
    return hits, misses


def _dynamic_default(compiled: list[Any]) -> bool:
    """NOTE [ dynamic=None and the planned shapes ]
    ``torch.compile``'s default, ``dynamic=None``, compiles the first shape static and, at the
    first guard failure on a size (the second planned shape), recompiles with that dim dynamic
    (``automatic_dynamic_shapes``): one symbolic graph then runs every later shape. precompile
    reported that quietly, its rows "memory" (no new graph) as if the shapes had been compiled
    before; on 4 planned shapes: 2 graphs, the second dynamic, against 4 static ones with
    ``dynamic=False``. Static shapes are what a bucketloader plan is for (CUDA graphs record
    one per shape; inductor specialises kernels to sizes), so precompile says so. Read from
    the ``torch.compile`` wrappers the step reaches (the compile key's options)."""
    import torch._dynamo.config as config

    if not getattr(config, "automatic_dynamic_shapes", True):
        return False
    return any(o.get("dynamic") == "None" for o in compile_options(compiled))


def _frames() -> int:
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


# -- arguments ----------------------------------------------------------------------------------
def _check_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device must be a torch.device or a device name such as 'cuda:0', got "
            f"device={device!r}"
        ) from None
    if dev.type in ("cpu", "meta"):
        return dev
    backend = getattr(torch, dev.type, None)
    available = getattr(backend, "is_available", None)
    if callable(available) and not available():
        raise ValueError(
            f"device={device!r} is not available in this process (torch {torch.__version__} "
            f"sees no {dev.type} device); pass the device the training loop moves batches to, "
            "e.g. device='cpu', or None to keep batches as collated"
        )
    count = getattr(backend, "device_count", None)
    if dev.index is not None and callable(count) and dev.index >= count():
        raise ValueError(
            f"device={device!r} does not exist: this process sees {count()} {dev.type} "
            f"device(s), indices 0..{count() - 1}; pass one of them"
        )
    return dev


def _at_caller(fn: Callable[[], _T]) -> _T:
    """``fn()``, with the :class:`CompileCacheWarning` it gives (an unusable directory, a
    replaced ``TORCHINDUCTOR_CACHE_DIR``) issued at the line that called :func:`precompile`, not
    inside it; other warnings as they were."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    for w in caught:
        if issubclass(w.category, CompileCacheWarning):
            # (1 _at_caller, 2 precompile, 3 checks_options' wrapper, 4 the caller)
            warnings.warn(w.message, w.category, stacklevel=4)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return out


def _check_cache(cache: Any) -> CompileCache | None:
    if cache is None or cache is True:
        return CompileCache()
    if cache is False:
        return None
    if isinstance(cache, CompileCache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return CompileCache(check_folder("cache", cache))  # (errors name cache=, not directory=)
    raise TypeError(
        f"cache must be a CompileCache, a directory, None (the default cache) or False, got "
        f"cache={cache!r}"
    )


def _source(plan: Any, example: Any, collate_fn: Any) -> Any:
    own = callable(getattr(plan, "make_batch", None)) or callable(
        getattr(plan, "make_batches", None)
    )
    if own and example is None and collate_fn is None:
        check_shapes(getattr(plan, "shapes", None), what="plan.shapes")
        return plan
    if getattr(plan, "shapes", None) is None:
        fix = ""
        if isinstance(plan, torch.utils.data.DataLoader):  # what training iterates, one level up
            if hasattr(plan.batch_sampler, "shapes"):
                fix = "plan=loader.batch_sampler, example=loader.dataset"
            elif hasattr(plan.dataset, "shapes"):  # a stream
                fix = "plan=loader.dataset, example=<one sample>"
            fix = f"; pass {fix}, collate_fn=loader.collate_fn" if fix else ""
        raise TypeError(
            f"plan must be a BucketSampler, EvalSampler, BucketIterable, packing plan or batch "
            f"source (with .shapes), got {type(plan).__name__}{fix}"
        )
    return ExampleBatches(plan, example, collate_fn=collate_fn)


def _batches(source: Any) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, batch) for every planned shape and batch structure."""
    out: list[tuple[tuple[int, ...], Any]] = []
    for shape in check_shapes(source.shapes, what="plan.shapes"):
        many = getattr(source, "make_batches", None)
        batches = many(shape) if callable(many) else [source.make_batch(shape)]
        if not batches:
            raise ValueError(f"the batch source made no batch for shape {shape}")
        out.extend((shape, b) for b in batches)
    return out


def _graphs() -> int:
    """NOTE [ The recompile limit over several plans ]
    Dynamo's recompile limit counts the graphs of one frame, whatever step traced them. A model
    compiled once and precompiled for training (6 shapes) and then for evaluation (6 more, under
    ``no_grad``) holds 12 graphs in its forward's frame, but each call raised the limit to its
    own count (8): the evaluation call compiled 2 of its shapes and ran the other 4 eagerly,
    reported as rows of no new graph, and evaluation ran them eagerly ever after. So the limit
    also covers the graphs dynamo compiled before the call (``unique_graphs``, over every frame:
    more than one frame needs is harmless, a limit is not a size)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def raise_recompile_limit(n: int) -> int:
    """Let dynamo keep one graph per planned shape (and a few one-time graphs) per frame:
    ``torch._dynamo.config.recompile_limit`` becomes at least ``n + 2``; returns it (also used
    by :class:`~bucketloader.hf.BucketTrainer`)."""
    import torch._dynamo.config as config

    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    limit = max(int(getattr(config, name)), n + 2)
    setattr(config, name, limit)
    acc = "accumulated_" + name
    if hasattr(config, acc):
        setattr(config, acc, max(int(getattr(config, acc)), 4 * limit))
    return limit


class _Gate:
    """Whether a rank that raises now tells the others (NOTE [ Checkpoints before a collective ]
    in :mod:`bucketloader._dist`): while they have a checkpoint ahead."""

    def __init__(self, open: bool) -> None:
        self.open = bool(open)


def _assign(targets: list[tuple[tuple[int, ...], Any]], records: list[Any], size: int) -> list[int]:
    """The rank that compiles each target (-1: recorded before, every rank loads it); largest
    shapes first, round robin. A target counts as recorded only if every rank has its record
    (ranks on other nodes may have other directories); rank 0 decides, so every rank agrees."""
    if size == 1:
        return [0 if r is None else -1 for r in records]
    shapes = [list(shape) for shape, _ in targets]
    gathered = _dist.all_gather([shapes, [r is not None for r in records]])
    _check_same_shapes([g[0] for g in gathered])
    have = [all(col) for col in zip(*(g[1] for g in gathered), strict=True)]
    order = sorted(
        (i for i, recorded in enumerate(have) if not recorded),
        key=lambda i: (-math.prod(targets[i][0]), targets[i][0], i),
    )
    owners = [-1] * len(targets)
    for n, i in enumerate(order):
        owners[i] = n % size
    return list(_dist.broadcast(owners))


def _check_same_shapes(planned: list[list[list[int]]]) -> None:
    """Every rank planned the same shapes (the same on each rank: the gathered lists), else one
    error. Shapes are split among the ranks by index, so with other plans a rank compiled its own
    shape where the others counted on another one, and reported it loaded ("compiled by rank 1")
    when it had compiled it itself; a rank with more shapes failed in ``zip()``."""
    differ = [r for r, shapes in enumerate(planned) if shapes != planned[0]]
    if not differ:
        return
    r = differ[0]
    first = next(
        (i for i, (a, b) in enumerate(zip(planned[0], planned[r], strict=False)) if a != b),
        min(len(planned[0]), len(planned[r])),
    )

    def at(shapes: list[list[int]]) -> str:
        return str(tuple(shapes[first])) if first < len(shapes) else "none"

    raise ValueError(
        f"precompile splits the planned shapes among the {len(planned)} ranks, but rank(s) "
        f"{differ} planned other shapes than rank 0: rank {r} planned {len(planned[r])} "
        f"shapes, rank 0 {len(planned[0])}, the first that differs is {at(planned[r])} on rank "
        f"{r} and {at(planned[0])} on rank 0; build every rank's plan from the whole data set's "
        "lengths with the same options (a rank with its own shard's lengths only: "
        "bucketloader.sharded.ShardedSampler), or pass cache=CompileCache(distributed=False) to "
        "have each rank compile its own shapes alone"
    )


def _bar(items: list[int], show: bool, desc: str) -> Iterable[int]:
    if not show or not items:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, unit="shape", leave=False)
