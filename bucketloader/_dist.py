"""The job's ranks and the few collectives the library makes, in one place.

Rank discovery: every sampler and stream takes ``num_replicas`` / ``rank``; when they are left
out, an initialised default process group supplies them (as
``torch.utils.data.DistributedSampler`` does), else the job is one process; ``num_replicas > 1``
without ``rank`` and without a process group is an error (every process would plan rank 0). The
collectives (summing per-cell counts, sending rank 0's lists of ints) run on the device the
backend needs, chosen here once (:func:`comm_device`: the current CUDA device under NCCL, else
the CPU).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from bucketloader._validation import MAX_REPLICAS, check_int

if TYPE_CHECKING:  # pragma: no cover
    import torch


def initialised() -> bool:
    """Whether a default process group exists (without importing torch: if torch was never
    imported, no group can exist)."""
    if "torch" not in sys.modules:
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def default_ranks() -> tuple[int, int]:
    """``(world size, rank)`` of the default process group, or ``(1, 0)``."""
    if not initialised():
        return 1, 0
    import torch.distributed as dist

    return int(dist.get_world_size()), int(dist.get_rank())


def world_size() -> int:
    """World size of the default process group; 1 when none is initialised."""
    return default_ranks()[0]


def dist_ready(num_replicas: int) -> bool:
    """Whether a process group of ``num_replicas`` ranks is initialised."""
    return initialised() and default_ranks()[0] == num_replicas


def resolve_ranks(num_replicas: Any, rank: Any) -> tuple[int, int]:
    """``(num_replicas, rank)`` from the arguments, else from ``torch.distributed``, checked.

    Example:
        >>> resolve_ranks(4, 3)
        (4, 3)
        >>> resolve_ranks(None, None)  # no process group: one process
        (1, 0)
        >>> resolve_ranks(4, None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: rank is required with num_replicas=4 when no torch.distributed process group...

    Under a process group, ``num_replicas`` other than its world size needs ``rank=`` too.
    """
    world, me = default_ranks()
    replicas = check_int(
        "num_replicas",
        world if num_replicas is None else num_replicas,
        minimum=1,
        maximum=MAX_REPLICAS,
    )
    if rank is None and replicas > 1 and not initialised():
        # Rank 0 by default would give every process rank 0's batches: the same data
        # num_replicas times, silently (torch's DistributedSampler raises here too).
        raise ValueError(
            f"rank is required with num_replicas={replicas} when no torch.distributed process "
            f"group is initialised (each process would otherwise plan rank 0's batches); pass "
            f"rank= (each process its own, 0..{replicas - 1}), or call "
            "torch.distributed.init_process_group() before making the sampler"
        )
    if rank is None and replicas != world and initialised():
        # the group's rank is a rank of `world` processes, not of `replicas`: with more
        # replicas the ranks past the world never run and their samples are left out, silently
        # (4 replicas over 2 processes: half the data); with fewer (tensor parallelism) the
        # group's ranks past them were refused, naming no process group (s28-user)
        raise ValueError(
            f"num_replicas={replicas} differs from the process group's world size {world}, so "
            f"rank= is required: the group's rank {me} is a rank of {world} processes, not of "
            f"{replicas} replicas; pass rank= too (each "
            f"replica its own, 0..{replicas - 1}: the data-parallel rank under tensor or "
            "pipeline parallelism), or leave num_replicas out to use the whole group"
        )
    rank = check_int("rank", me if rank is None else rank)
    if not 0 <= rank < replicas:
        raise ValueError(
            f"rank must be an int >= 0 and < num_replicas={replicas}, got rank={rank}; give "
            f"each process its own rank in 0..{replicas - 1}"
        )
    return replicas, rank


def joins_group(num_replicas: Any, rank: Any, replicas: int) -> bool:
    """Whether a sampler built with the arguments ``num_replicas`` / ``rank`` (resolved to
    ``replicas`` ranks) took its ranks from the initialised process group, and so must agree
    with the group's other ranks (:func:`gather_arguments`). Ranks simulated in one process
    (``num_replicas=`` and ``rank=`` both given) join no collective: one process builds them
    all."""
    return (num_replicas is None or rank is None) and replicas > 1 and dist_ready(replicas)


def gather_arguments(owner: str, arguments: dict[str, Any], num_replicas: int, rank: int) -> None:
    """Every rank's ``arguments`` (each spelled as itself if a string, else its ``repr``), by
    one ``all_gather_object`` of JSON, checked on every rank: a rank built with other arguments
    is an error on *every* rank, naming it and the argument, instead of a silent other plan
    (other shapes at a step, other samples) or a hang in the job's next collective."""
    import torch.distributed as dist

    spelled = {k: v if isinstance(v, str) else repr(v) for k, v in arguments.items()}
    gathered: list[Any] = [None] * num_replicas
    with collectives():
        dist.all_gather_object(gathered, json.dumps({"rank": rank, "arguments": spelled}))
    check_agreement(owner, [json.loads(p) for p in gathered], num_replicas)


#: What a differing argument means, added to :func:`check_agreement`'s error.
_AGREEMENT_HINTS = {
    "seed": "seed is the plan's seed and must be the same on every rank (seed per-rank "
    "randomness, such as augmentation, elsewhere)",
    "num_draws": "num_draws is WeightedBucketSampler's num_samples= (the draws of an epoch)",
    "sample_weights": "the per-sample weights differ (a digest of each rank's): pass every rank "
    "the same weights, of the whole data set",
    "shard_histograms": "ShardedSampler's shard_histograms= was given on some ranks only: pass "
    "every rank's histograms on every rank, or leave it out on every rank (they are then "
    "gathered)",
    "plan_digest": "the plans differ: pass every rank the same lengths (of the whole data set, "
    "in the same order) and the same options (a rank that holds only its own shard's lengths "
    "needs bucketloader.sharded.ShardedSampler)",
}


def check_agreement(owner: str, items: list[dict[str, Any]], num_replicas: int) -> None:
    """``items`` (each rank's ``rank`` and ``arguments``) sorted by rank, or one error naming
    the ranks whose arguments differ from rank 0's, and how, or the ranks that sent an
    ``error`` instead (:func:`send_error`).

    Example:
        >>> items = [{"rank": r, "arguments": {"seed": str(r)}} for r in (1, 0)]
        >>> check_agreement("BucketSampler", items, 2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: rank(s) [1] built their BucketSampler with ... seed=1 (rank 0: 0); ...
    """
    failed = [it for it in items if "error" in it]
    if failed:
        failed.sort(key=lambda it: it["rank"])
        raise told(
            RuntimeError(
                f"rank(s) {[it['rank'] for it in failed]} could not build their {owner}: rank "
                f"{failed[0]['rank']} raised {failed[0]['error']}; every rank stops here rather "
                "than wait for it in the next collective (fix that rank's input)"
            )
        )
    ranks = [it["rank"] for it in items]
    if sorted(ranks) != list(range(num_replicas)):
        raise told(
            ValueError(f"ranks {ranks} do not number 0..{num_replicas - 1}; pass rank= once each")
        )
    items.sort(key=lambda it: it["rank"])
    first = items[0]["arguments"]
    odd = [it for it in items if it["arguments"] != first]
    if odd:
        theirs = odd[0]["arguments"]
        keys = [k for k in sorted(set(first) | set(theirs)) if first.get(k) != theirs.get(k)]
        diff = [
            f"{k}={theirs.get(k, '(not given)')} (rank 0: {first.get(k, '(not given)')})"
            for k in keys
        ]
        hints = "".join(f"; {_AGREEMENT_HINTS[k]}" for k in keys if k in _AGREEMENT_HINTS)
        raise told(
            ValueError(
                f"rank(s) {[it['rank'] for it in odd]} built their {owner} with other "
                f"arguments than rank 0: rank {odd[0]['rank']} has {', '.join(diff)}{hints}; "
                "build it with the same arguments on every rank"
            )
        )


def send_error(error: BaseException, num_replicas: int, rank: int) -> None:
    """What a rank that failed before the group's gather of arguments (:func:`gather_arguments`,
    or a gather whose items :func:`check_agreement` reads) sends in that gather instead: its
    error's type and text, so :func:`check_agreement` raises on every other rank, naming it,
    where they would have waited for it in the gather (until the backend's timeout, or an
    opaque "connection closed" once its process exited). The caller then raises its own
    error."""
    import torch.distributed as dist

    text = f"{type(error).__name__}: {error}"
    gathered: list[Any] = [None] * num_replicas
    dist.all_gather_object(gathered, json.dumps({"rank": rank, "error": text}))


# -- checkpoints: a rank that fails before a collective stops every rank, named --------------------
#: NOTE [ Checkpoints before a collective ]
#: A rank that raises before a collective its peers enter leaves them waiting in it until the
#: group's timeout (30 minutes by default), or failing with gloo's opaque "Connection closed by
#: peer" once its process exits. Where the collectives a constructor makes depend on its path
#: (a ``BucketSampler`` whose spec is solved through a shared ``BucketCache`` makes the cache's
#: broadcast before its check of arguments; one built without a cache makes only the check), a
#: failed rank cannot send its error *in* the collective the others wait in: it does not know
#: which one that is, and a gather paired with a broadcast is undefined. So every such step
#: starts with a checkpoint of one fixed shape, :func:`checkpoint` (one ``all_reduce`` of an
#: ``int64`` per rank: the step's code, or :data:`FAILED`), and a failed rank sends that same
#: message (:func:`tell_failure`), which meets the others at their next checkpoint, whichever it
#: is; then, on that path only, one gather of the failed ranks' error texts. Every rank raises
#: there: the failed ones their own error, the others a ``RuntimeError`` naming the ranks and the
#: first one's error. Ranks at different steps (built with different arguments, such as a cache on
#: one rank only) raise a ``ValueError`` naming the steps, where they would have paired a
#: broadcast with a gather. An error every rank raises alike after a collective (a checkpoint's,
#: :func:`check_agreement`'s, the cache's) is marked as told (:func:`told`), so no rank sends it
#: again. A failed rank tells only while its peers still have a checkpoint ahead: up to its last
#: collective (after it, a rank's own error waits for nobody). Two gloo ranks, rank 1's lengths
#: refused, a 15 s timeout (s20): rank 0 raised after 15.2 s (gloo's timeout), now 0.1 s. The
#: cost, on the healthy path: one ``all_reduce`` of ``world`` int64s per step. (``ShardedSampler``
#: keeps its own way: its first collective is a gather that carries a failed rank's error,
#: :func:`send_error`, and what follows it is computed from what every rank gathered.)
FAILED = -1

#: The steps that start with a checkpoint: code → what the messages call it.
STEPS = {
    1: "the check of arguments every rank makes",
    2: "the bucket cache's shared lookup of the boundaries",
    3: "precompile's assignment of shapes to ranks",
    4: "precompile's sharing of the shapes each rank compiled",
    5: "the end of precompile (every rank ran every shape)",
    6: "the stream's boundaries, estimated on rank 0's head and sent to every rank",
    7: "the stream's schedule, counted on the head of every rank's shard",
    8: "the stream's padding template, the first sample of a shard",
}
ARGUMENTS, CACHE_LOOKUP, PRECOMPILE_ASSIGN, PRECOMPILE_SHARE, PRECOMPILE_END = 1, 2, 3, 4, 5
STREAM_ESTIMATE, STREAM_SCHEDULE, STREAM_TEMPLATE = 6, 7, 8


def told(error: BaseException) -> BaseException:
    """``error``, marked as known to every rank (raised alike after a collective), so that
    :func:`tell_failure` does not send it again; returns it, for ``raise told(...)``."""
    with contextlib.suppress(AttributeError, TypeError):  # (an exception without a __dict__)
        error.__dict__["_bucketloader_told"] = True
    return error


@contextlib.contextmanager
def collectives() -> Iterator[None]:
    """Around collectives: an error raised in them is told (:func:`told`): every rank raises it
    alike, or the group itself failed (a timeout, a closed connection), and a rank then sends
    nothing more (another collective would wait for the group's timeout once again)."""
    try:
        yield
    except Exception as exc:
        told(exc)
        raise


def is_told(error: BaseException) -> bool:
    """Whether ``error`` is known to every rank already (:func:`told`)."""
    return bool(getattr(error, "__dict__", {}).get("_bucketloader_told", False))


def checkpoint(step: int, *, flag: bool = False) -> list[int]:
    """NOTE [ Checkpoints before a collective ]: every rank of the default process group (of
    more than one rank) says it is at ``step`` (one of :data:`STEPS`), with one ``flag`` of its
    own; returns the ranks whose flag is set. Raises on every rank when a rank failed before it
    (:func:`tell_failure`; a ``RuntimeError`` naming it and its error) or is at another step (a
    ``ValueError`` naming the steps)."""
    world, rank = default_ranks()
    if world == 1:
        return [0] if flag else []
    codes = _codes(2 * step + int(flag))
    failed = [r for r, c in enumerate(codes) if c == FAILED]
    if failed:
        texts = _error_texts(None, world, rank)
        raise told(
            RuntimeError(
                f"rank(s) {failed} raised before {STEPS[step]} (this is rank {rank}): rank "
                f"{failed[0]} raised {texts[failed[0]]}; every rank stops here rather than "
                "wait for it in the collective (fix that rank's input)"
            )
        )
    steps = [c // 2 for c in codes]
    if len(set(steps)) > 1:
        at = "; ".join(
            f"rank(s) {[r for r, s in enumerate(steps) if s == k]} at {STEPS.get(k, k)}"
            for k in sorted(set(steps))
        )
        raise told(
            ValueError(
                f"the ranks reached different collectives (this is rank {rank}): {at}; they were "
                "built with different arguments (a cache= on some ranks only, other lengths or "
                "options): build it with the same arguments on every rank"
            )
        )
    return [r for r, c in enumerate(codes) if c % 2]


def tell_failure(error: BaseException) -> None:
    """What a rank that raised ``error`` before a collective its peers enter sends instead
    (NOTE [ Checkpoints before a collective ]): :data:`FAILED` at their next
    :func:`checkpoint`, then its error's text; marks ``error`` as told. The caller then raises
    it. Nothing is sent for an error already told, or without a process group."""
    world, rank = default_ranks()
    if is_told(error) or world == 1:
        return
    told(error)
    try:  # (the text first: an error whose str() raises after FAILED was sent left the others
        # in the gather of texts until the group's timeout)
        text = f"{type(error).__name__}: {error}"
    except Exception:
        text = f"{type(error).__name__} (its message could not be read)"
    try:
        _codes(FAILED)
        _error_texts(text, world, rank)
    except Exception:  # the group itself failed (a peer gone, a timeout): this rank's own
        pass  # error, raised next, says more than the group's


@contextlib.contextmanager
def failing_together(joins: bool) -> Iterator[None]:
    """Around the part of a constructor up to its last collective: an error raised in it is
    told to the other ranks (:func:`tell_failure`) when ``joins`` (this rank takes part in the
    constructor's collectives), then raised."""
    try:
        yield
    except Exception as exc:
        if joins:
            tell_failure(exc)
        raise


def would_join(num_replicas: Any, rank: Any) -> bool:
    """Whether a sampler built with these arguments joins the default process group's
    collectives (:func:`joins_group`), decided before they are checked (a rank whose arguments
    are refused tells the others, :func:`tell_failure`, only if it would have joined)."""
    if not initialised() or (num_replicas is not None and rank is not None):
        return False
    world = world_size()
    return world > 1 and (num_replicas is None or bool(num_replicas == world))


def _codes(code: int) -> list[int]:
    """Every rank's ``code``, by one ``all_reduce`` of one ``int64`` per rank."""
    import torch
    import torch.distributed as dist

    world, rank = default_ranks()
    t = torch.zeros(world, dtype=torch.int64, device=comm_device())
    t[rank] = code
    with collectives():
        dist.all_reduce(t)
    return [int(c) for c in t.cpu().tolist()]


def _error_texts(text: str | None, world: int, rank: int) -> list[str | None]:
    """Every rank's error text (``None`` for a rank that did not fail), by one
    ``all_gather_object`` of JSON."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * world
    with collectives():
        dist.all_gather_object(gathered, json.dumps({"rank": rank, "error": text}))
    out: list[str | None] = [None] * world
    for item in map(json.loads, gathered):
        out[int(item["rank"])] = item["error"]
    return out


def borrow_sample(own: Any) -> Any:
    """A sample every rank can stand in with: ``own``, or, on a rank without one, the first
    sample of the lowest rank that has one (``None`` when no rank has any). Every rank of the
    default process group must call it (NOTE [ A stream split over ranks ] in
    :mod:`bucketloader.stream._schedule`), after a :func:`checkpoint` (a rank that could not
    read its first sample tells the others there); samples travel as pickles
    (``broadcast_object_list``) only when some rank has none."""
    import torch
    import torch.distributed as dist

    world, rank = default_ranks()
    flag = torch.tensor([0 if own is None else 1], dtype=torch.int64, device=comm_device())
    flags = [torch.zeros_like(flag) for _ in range(world)]
    with collectives():
        dist.all_gather(flags, flag)
        has = [int(f.item()) for f in flags]
        if all(has) or not any(has):
            return own
        donor = has.index(1)
        box = [own if rank == donor else None]
        dist.broadcast_object_list(box, src=donor)
    return own if own is not None else box[0]


def comm_device() -> torch.device:
    """Where the default process group's tensors must live: the current CUDA device under NCCL,
    else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":  # pragma: no cover - needs GPUs
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(counts: np.ndarray) -> np.ndarray:
    """``counts`` summed over the ranks of the default process group (one ``all_reduce``;
    every rank must call it, after a :func:`checkpoint`)."""
    import torch
    import torch.distributed as dist

    t = torch.as_tensor(np.asarray(counts, np.int64), device=comm_device())
    with collectives():
        dist.all_reduce(t)
    return t.cpu().numpy()  # type: ignore[no-any-return]


def all_reduce_max(values: list[float]) -> list[float]:
    """``values``, each the largest over the ranks of the default process group (one
    ``all_reduce`` of float32; every rank must call it with as many values)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float32, device=comm_device())
    with collectives():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.cpu().tolist()]


def broadcast_lists(values: list[list[int]]) -> list[list[int]]:
    """Rank 0's lists of ints, on every rank (boundaries estimated on rank 0's head)."""
    import torch
    import torch.distributed as dist

    device = comm_device()
    sizes = torch.tensor([len(v) for v in values], dtype=torch.int64, device=device)
    dist.broadcast(sizes, src=0)
    flat = torch.tensor([x for v in values for x in v], dtype=torch.int64, device=device)
    if default_ranks()[1] != 0:
        flat = torch.zeros(int(sizes.sum()), dtype=torch.int64, device=device)
    dist.broadcast(flat, src=0)
    out, at = [], 0
    for n in sizes.cpu().tolist():
        out.append(flat[at : at + n].cpu().tolist())
        at += n
    return out
