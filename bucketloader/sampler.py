"""BucketSampler: a static-shape batch sampler, a thin stateful wrapper over the pure epoch plan.

NOTE [ Resuming and DataLoader prefetch ]
``state_dict()`` records the epoch and how many batches ``__iter__`` has handed out in it.
A ``DataLoader`` pulls batches from its batch sampler ahead of the training loop (up to
``num_workers * prefetch_factor`` batches, or one with ``num_workers=0``), so at checkpoint time the
sampler is ahead of what the model has consumed. Pass the count your loop consumed,
``sampler.state_dict(batches_consumed=step_in_epoch)``, to resume exactly after the last trained
batch. Resuming recomputes the epoch plan from ``(seed, epoch)`` and skips to the position: O(plan)
(0.40 CPU s to the first batch for 10 M lengths: ``benchmarks/results/sampler.md``), with no data
replayed. The state holds no rank, so a checkpoint saved by rank 0 restores every rank.

NOTE [ Exact resume behind DataLoader workers ]
The default path is exact: ``sampler.dataloader(dataset, num_workers=..., collate_fn=...)``
returns a :class:`~bucketloader.loader.ResumableDataLoader` that counts the batches it hands to
the loop and tells the sampler (:meth:`EpochSampler._loader_pass` / :meth:`_loader_handed`), so
``sampler.state_dict()`` (and ``loader.state_dict()``) records what the loop received, however far
the workers prefetched. torchdata's ``StatefulDataLoader`` is exact too: it snapshots
``state_dict()`` as it hands each batch index to a worker. A plain ``DataLoader`` with workers is
the one that runs ahead: the sampler notices that its batches are pulled by torch's
multi-process iterator, and ``state_dict()`` taken mid-epoch without ``batches_consumed`` then
warns once, naming the fixes.

NOTE [ A new pass without set_epoch ]
Iterating a sampler again after a *finished* pass, with no ``set_epoch`` (or
``load_state_dict``) in between, advances the epoch by one, as torchdata's samplers and Lhotse's
``DynamicBucketingSampler`` do: a second ``for batch in loader`` gets a new shuffle instead of
repeating the first one silently. The first advance logs one info line. ``set_epoch(e)`` always
wins (calling it every epoch, as ``DistributedSampler`` users do, behaves as before, and
``set_epoch(e)`` before a pass repeats epoch ``e`` on purpose). Every rank makes the same passes,
so ranks stay on the same epoch. A pass left early (``break``) is not finished: the next pass
restarts the same epoch.

NOTE [ Ranks agree on the plan ]
Every rank plans the whole epoch from its own arguments and takes its slot of every step, so the
ranks stay in step only if they plan the same epoch: the same lengths, options and ``seed``. A
rank given another seed (``seed=base + rank``, a common habit for augmentation seeds) or other
lengths (measured on its own shard) plans other steps: other shapes at step ``i`` (a recompile,
or a hang in a collective that expects one shape), other step counts (a hang at the epoch's
end), and samples lost and repeated across ranks, silently; a stream's ranks follow one
schedule drawn from the seed, boundaries and batch sizes, and miss it the same way. So a
sampler (or a stream: ``BucketIterable``, ``PackIterable``) that takes its ranks from the
initialised process group (``num_replicas`` or ``rank`` left out) gathers its arguments once,
in the constructor (one ``all_gather_object`` of a few hundred bytes of JSON,
as ``ShardedSampler`` does), and a rank that differs is an error on every rank, naming it and the
argument. A rank refused before that gather (its own lengths, seed, options) tells the others
at its checkpoint, or at the shared cache's, whichever they reached first (NOTE [ Checkpoints
before a collective ] in :mod:`bucketloader._dist`), and they raise naming it and its error. Build
the sampler on every rank, then: iteration, ``plan()`` and ``state_dict()`` call no collective.
Ranks simulated in one process (``num_replicas=`` and ``rank=`` both given) join none (their
cache lookup, when a shared ``BucketCache`` solves their spec, is still a collective, and a rank
refused before it does not tell the others).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
from torch.utils.data import ConcatDataset, IterableDataset, Sampler
from typing_extensions import Unpack

from bucketloader._dist import (
    ARGUMENTS,
    checkpoint,
    failing_together,
    gather_arguments,
    joins_group,
    resolve_ranks,
    world_size,
    would_join,
)
from bucketloader._types import LazyModule
from bucketloader._validation import (
    a_kind,
    check_bool,
    check_collator_options,
    check_int,
    check_options,
    keyword_options,
    not_a_state,
    stream_of,
)
from bucketloader.plan import BucketSpec, EpochPlan, SamplingReport, ShapeTable, plan_epoch
from bucketloader.plan.accumulate import grouped_steps
from bucketloader.plan.epoch import (
    PLAN_VERSION,
    check_accumulate,
    check_weights,
    fill_extra,
    fill_pools,
    resolve_weights,
)
from bucketloader.plan.limits import warn_zero_lengths
from bucketloader.plan.promote import Promotion, promoted_spec, promotes
from bucketloader.plan.report import (
    FILL_TIMES,
    FILL_WARNING,
    LEFT_OUT_BY,
    LOSS_WARNING,
    DataLossWarning,
    plan_report,
    warn_fill_repeats,
    warn_rank_repeats,
    warn_truncated,
)
from bucketloader.plan.shapes import SpecOptions
from bucketloader.plan.spec import SpecShapes

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader import collate
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    collate = LazyModule("bucketloader.collate")

__all__ = ["BucketSampler", "EpochSampler", "GroupedDataset", "sampler_options", "spec_or_build"]

_log = logging.getLogger(__name__)


def spec_or_build(lengths: Any, spec_options: Mapping[str, Any], spec_type: Any) -> Any:
    """``lengths`` itself when it is a ready ``spec_type`` (then no shape option may be given),
    else ``spec_type.build(lengths, **spec_options)``: the split between what shapes the
    batches (the spec) and how an epoch is iterated (the sampler). An unknown option names the
    sampler being built and the closest valid option (:func:`_check_spec_options`)."""
    _check_spec_options(spec_options, spec_type, inspect.currentframe())
    if isinstance(lengths, spec_type):
        if spec_options:
            name = sorted(spec_options)[0]
            kind = spec_type.__name__
            raise TypeError(
                f"{name} cannot be combined with a {kind} (it already fixes the shapes); "
                f"pass {name} to {kind}.build instead"
            )
        return lengths
    return spec_type.build(lengths, **spec_options)


class EpochSampler(Sampler[list[int]]):
    """The stateful half every planned batch sampler shares.

    A subclass plans an epoch with a pure function of ``(spec, seed, epoch, ranks)``
    (:meth:`_make_plan`, returning an object with ``indices``, ``offsets`` and ``len()``) and
    says what its state must match (:meth:`_config`, including ``num_batches``); this class keeps
    the ranks, the epoch and the position, hands out the batches and saves / restores a small,
    strict JSON state (NOTE [ Resuming and DataLoader prefetch ]). :class:`BucketSampler` and
    :class:`~bucketloader.pack.PackSampler` are the two.
    """

    #: Whether ``plan_digest`` hashes the ranks' own shards (``ShardedSampler``), so that it
    #: differs on other ranks whatever the data: NOTE [ An epoch boundary on another number of
    #: ranks ].
    _digest_follows_ranks = False

    def __init__(
        self, *, shuffle: bool, seed: int, num_replicas: int | None, rank: int | None
    ) -> None:
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_int("seed", seed, minimum=0)
        self.num_replicas, self.rank = resolve_ranks(num_replicas, rank)
        self.epoch = 0
        self._start = 0
        self._yielded = 0
        self._plan: tuple[int, Any] | None = None
        self._passes = _Passes()

    def _make_plan(self, epoch: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _agree_with_group(self, num_replicas: Any, rank: Any, arguments: dict[str, Any]) -> None:
        """NOTE [ Ranks agree on the plan ]: under the process group the ranks came from (the
        constructor's ``num_replicas`` / ``rank`` arguments, as given), one gather of
        ``arguments`` checked on every rank."""
        if joins_group(num_replicas, rank, self.num_replicas):
            checkpoint(ARGUMENTS)  # NOTE [ Checkpoints before a collective ] in bucketloader._dist
            gather_arguments(type(self).__name__, arguments, self.num_replicas, self.rank)

    def _coordinates(self, epoch: int, rank: int | None = None) -> dict[str, Any]:
        """Where a plan sits: the ``seed``, ``epoch``, ``shuffle`` and ranks keywords every
        planning function takes after the spec (this rank's plan unless ``rank`` is given)."""
        return {
            "seed": self.seed,
            "epoch": epoch,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "rank": self.rank if rank is None else rank,
        }

    def _config(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _digest_on(self, num_replicas: int) -> str | None:
        """The plan digest this sampler's data and options make on ``num_replicas`` ranks, less
        its fill version, where that digest follows the ranks (``None``: it does not, or is not
        known): NOTE [ An epoch boundary on another number of ranks ]."""
        return None

    def _digest_on_saved_ranks(self, saved: Any) -> str | None:
        """:meth:`_digest_on` the ranks a state's ``saved`` configuration names, where it names
        another number of ranks (``None`` where it does not, or that digest is not known)."""
        theirs = saved.get("num_replicas") if isinstance(saved, dict) else None
        if not isinstance(theirs, int) or isinstance(theirs, bool):
            return None
        return self._digest_on(theirs) if 1 <= theirs != self.num_replicas else None

    @staticmethod
    def _current_on_saved_ranks(saved: Any, mine: str | None) -> bool:
        """Whether a state's ``saved`` configuration is from other ranks and its plan digest
        (less its fill version) is ``mine``, the one this sampler's data and options make on
        them (:meth:`_digest_on_saved_ranks`)."""
        digest = saved.get("plan_digest") if isinstance(saved, dict) else None
        return (
            mine is not None
            and isinstance(digest, str)
            and re.sub(r"/fill=\d+", "", digest) == mine
        )

    def __len__(self) -> int:
        return self._len

    @functools.cached_property
    def _len(self) -> int:
        return int(self.spec.num_steps(self.num_replicas).sum())  # type: ignore[attr-defined]

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s plan next (a pending resume position in that epoch is kept)."""
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch != self.epoch:
            self.epoch, self._start, self._yielded = epoch, 0, 0
            self._passes.handed = None
        elif self._start == 0:
            # the same epoch again, no resume pending: its next pass starts over, so a state
            # saved before it must too (s25-user: after a finished pass the state still said
            # the epoch was done, and a resume from it skipped the whole repeated epoch)
            self._yielded = 0
            self._passes.handed = None
        self._passes.finished = False  # an explicit epoch: no auto-advance before its pass

    def plan(self, epoch: int | None = None) -> Any:
        """This rank's plan of ``epoch`` (default: the current one; cached)."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1]
        self._plan = None  # (another epoch's plan is not held while this one is made)
        plan = self._make_plan(epoch)
        self._plan = (epoch, plan)
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        check_not_in_batch_sampler(type(self).__name__)
        self._advance_if_finished()
        if self._passes.by_loader:  # a ResumableDataLoader counts this pass
            self._passes.by_loader = False
        else:  # iterated directly: the position is what __iter__ hands out
            self._passes.handed = None
        start, self._start = self._start, 0
        self._passes.prefetched = _pulled_by_workers()
        plan = self.plan()
        self._yielded = start
        self._pass_starts()
        for i in range(start, len(plan)):
            self._yielded = i + 1
            yield self._batch(plan, i)
        self._passes.finished = True

    def _pass_starts(self) -> None:
        """A pass of ``self.epoch`` is about to hand out its first batch (a subclass's hook)."""

    def _batch(self, plan: Any, i: int) -> list[int]:
        """Batch ``i`` of ``plan`` as handed out (a subclass may add what the collator needs)."""
        return plan.indices[plan.offsets[i] : plan.offsets[i + 1]].tolist()  # type: ignore[no-any-return]

    # -- passes and the batches a loader handed out (NOTEs at the top of this module) ----------
    def _advance_if_finished(self) -> None:
        """NOTE [ A new pass without set_epoch ]: a finished pass moves to the next epoch."""
        passes = self._passes
        if not passes.finished:
            return
        passes.finished = False
        self.epoch, self._start, self._yielded = self.epoch + 1, 0, 0
        passes.handed = None
        if not passes.advanced:
            passes.advanced = True
            _log.info(
                "%s: a new pass without set_epoch() runs epoch %d (a new shuffle); call "
                "set_epoch(epoch) before each pass to choose the epoch yourself",
                type(self).__name__,
                self.epoch,
            )

    def _loader_pass(self) -> None:
        """A :class:`~bucketloader.loader.ResumableDataLoader` starts a pass over this sampler:
        from now on the position is what it hands to the loop."""
        self._advance_if_finished()
        self._passes.begin = self._start
        self._passes.handed = 0
        self._passes.by_loader = True

    def _loader_handed(self, count: int) -> None:
        """The loader has handed ``count`` batches of this pass to the loop."""
        self._passes.handed = count

    def _batches_done(self) -> int:
        """Batches of the current epoch the loop has had: a loader's count when one counts,
        else what ``__iter__`` handed out (or the pending resume position)."""
        passes = self._passes
        if passes.handed is not None:
            return min(passes.begin + passes.handed, len(self))
        return max(self._yielded, self._start)

    def _position(self, batches_consumed: int | None) -> int:
        """The resume position ``state_dict`` records (and the warning when it may run ahead)."""
        if batches_consumed is not None:
            consumed = check_int("batches_consumed", batches_consumed, minimum=0, maximum=len(self))
            return check_consumed(self, consumed, self._batches_done(), f"in epoch {self.epoch}")
        passes = self._passes
        if passes.handed is not None:
            return min(passes.begin + passes.handed, len(self))
        ahead = passes.prefetched and 0 < self._yielded < len(self) and not passes.finished
        if ahead and not passes.warned:
            passes.warned = True
            warnings.warn(
                f"{type(self).__name__}.state_dict() is taken while a DataLoader with workers "
                f"has fetched {self._yielded} batches of epoch {self.epoch}, ahead of your loop: "
                "resuming from it skips the batches still in flight. Build the loader with "
                "sampler.dataloader(dataset, num_workers=..., collate_fn=...) (exact "
                "state_dict), use torchdata's StatefulDataLoader, or pass "
                "state_dict(batches_consumed=<batches your loop consumed this epoch>)",
                UserWarning,
                stacklevel=3,
            )
        return self._yielded

    def dataloader(self, dataset: Any, **kwargs: Any) -> Any:
        """``DataLoader(dataset, batch_sampler=self, **kwargs)`` that resumes exactly.

        A :class:`~bucketloader.loader.ResumableDataLoader`: it counts the batches it hands to
        your loop, so :meth:`state_dict` records exactly what the loop received, even with
        ``num_workers > 0`` (NOTE [ Exact resume behind DataLoader workers ]); its
        ``set_epoch`` reaches this sampler. ``collate_fn`` left out is :meth:`collator` (when the
        sampler has one); ``collate_fn=None`` is torch's ``default_collate``, as it is to
        ``DataLoader`` (the same in every ``dataloader()`` of the library; ``EvalSampler``
        refuses it).

        Args:
            dataset: the map-style dataset the sampler's indices point into.
            **kwargs: ``DataLoader`` options (``num_workers``, ``collate_fn``, ``pin_memory``,
                ...; not ``batch_size``, ``shuffle``, ``sampler`` or ``drop_last``, which the
                sampler decides).

        Example:
            >>> sampler = BucketSampler([3, 4, 9, 10, 10], num_buckets=2, batch_size=2, seed=1)
            >>> loader = sampler.dataloader(list(range(5)), collate_fn=list)
            >>> first = next(iter(loader))
            >>> sampler.state_dict()["batches_yielded"]
            1
        """
        from bucketloader.loader import (
            ResumableDataLoader,
            check_dataset_size,
            check_loader_options,
        )

        if not callable(getattr(dataset, "__getitem__", None)):
            raise TypeError(
                f"dataset must be a map-style dataset (with __getitem__) that the lengths "
                f"describe, got {type(dataset).__name__}"
            )
        planned = self._config().get("num_samples")
        if planned is not None:
            check_dataset_size(self, dataset, int(planned))
        kwargs = check_loader_options(self, kwargs)
        if "collate_fn" not in kwargs and callable(getattr(self, "collator", None)):
            kwargs["collate_fn"] = self.collator()  # type: ignore[attr-defined]
        return ResumableDataLoader(dataset, batch_sampler=self, **kwargs)

    def state_dict(self, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Small JSON-serialisable state: epoch, position, the configuration it belongs to and
        the sampler's name (``"sampler"``: another kind of sampler refuses it by name).

        Args:
            batches_consumed: batches of the current epoch your loop has consumed, when it lags
                the sampler (DataLoader prefetch, see NOTE [ Resuming and DataLoader prefetch ]);
                default: the batches a :meth:`dataloader` handed to the loop, else the batches
                ``__iter__`` handed out (NOTE [ Exact resume behind DataLoader workers ]).
        """
        pos = self._position(batches_consumed)
        return {
            "version": _STATE_VERSION,
            "sampler": type(self).__name__,
            "epoch": int(self.epoch),
            "batches_yielded": int(pos),
            "config": dict(self._config()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches of the saved epoch.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values
        (or from an older plan of the same options, naming the way on).
        """
        epoch, pos = self._checked_state(state)
        self.epoch, self._start, self._yielded = epoch, pos, pos
        self._passes = _Passes(advanced=self._passes.advanced)

    def _checked_state(self, state: Any) -> tuple[int, int]:
        """Every check :meth:`load_state_dict` makes of ``state``, changing nothing: the
        ``(epoch, batches_yielded)`` it would resume at, or its error. ``BucketTrainer`` checks
        a checkpoint's state with it, so the two accept the same states (s32: the trainer
        compared ``_config()`` alone, without the ranks' rules below, and refused states the
        sampler loads: NOTE [ An epoch boundary on another number of ranks ])."""
        saved = state.get("config") if isinstance(state, dict) else None
        theirs = self._digest_on_saved_ranks(saved)  # (once per resume: K buckets' arrays)
        current = self._current_on_saved_ranks(saved, theirs)
        self._refuse_older(state, saved, current=current)
        config = self._config_against(state)
        if current:  # (the saved ranks' plan of this data and these options: only ranks differ)
            config = {**config, "plan_digest": saved["plan_digest"]}  # type: ignore[index]
        # (data or options differ beside the ranks: their error, not the ranks')
        return _check_state(
            state,
            config,
            type(self).__name__,
            ranked=self._digest_follows_ranks,
            other_plan=not current and theirs is not None,
        )

    def _refuse_older(self, state: Any, saved: Any, *, current: bool) -> None:
        """Refuse a ``state`` saved by an older plan of this sampler's options, naming the way
        on (a subclass's; ``saved``: its config where a dict; ``current``: it is this data and
        these options' plan on other ranks, :meth:`_current_on_saved_ranks`). None here."""

    def _config_against(self, state: Any) -> dict[str, Any]:
        """This sampler's :meth:`_config`, as ``state`` is compared with it (a subclass adds
        what only an older state's format needs: ``ShardedSampler``)."""
        return self._config()


def _check_spec_options(options: Mapping[str, Any], spec_type: Any, frame: Any) -> None:
    """A typo (``num_bucket=``) raises naming the public entry point (the sampler whose
    ``__init__`` called :func:`spec_or_build`) and the closest option, instead of
    ``BucketSpec.build() got an unexpected keyword argument``."""
    caller = frame.f_back if frame is not None else None
    owner_obj = caller.f_locals.get("self") if caller is not None else None
    del frame, caller
    if owner_obj is not None and not isinstance(owner_obj, spec_type):
        owner, allowed = type(owner_obj).__name__, sampler_options(type(owner_obj), spec_type)
    else:
        owner, allowed = f"{spec_type.__name__}.build", keyword_options(spec_type.build)
    check_options(owner, options, allowed)


def sampler_options(sampler_type: type, spec_type: Any) -> list[str]:
    """Every keyword option of a sampler built on ``spec_type`` (its ``__init__``'s, its bases',
    and the spec's ``build``): what its unknown-option error lists, and what an entry point that
    passes options on to it (``hf.for_text``) accepts.

    Example:
        >>> "num_buckets" in sampler_options(BucketSampler, BucketSpec)
        True
    """
    inits = [vars(c)["__init__"] for c in sampler_type.__mro__ if "__init__" in vars(c)]
    return keyword_options(spec_type.build, *inits)


def joint_solved_here(spec_options: Mapping[str, Any], spec: Any) -> bool:
    """Whether this process solved a joint plan whose cells can differ from another rank's: not
    under a ``work_limit`` (the same cells on every rank), and not read from ``cache=`` (the
    entry every rank reads; at a miss every rank solves at once, session 23)."""
    counted = getattr(spec_options.get("strategy"), "work_limit", None) is not None
    return not counted and any(not j.get("cached") for j in spec.joint or ())


def warn_joint_alone(owner: Any, missed: bool, *, stacklevel: int) -> None:
    """Warn when several ranks each solve a joint plan on their own (NOTE [ One joint plan for
    every rank ] in :mod:`bucketloader.strategies.joint`): a time-limited solve depends on the
    machine's load, so two ranks can plan different shapes from the same arguments (``owner``:
    a sampler with ``spec``, ``num_replicas`` and ``rank``; ``missed``: ``cache=`` was given
    and had no entry)."""
    if owner.spec.joint is None or owner.num_replicas == 1 or world_size() > 1:
        return  # (under a process group rank 0 solves for every rank, whatever num_replicas)
    warnings.warn(
        f"this {type(owner).__name__} (rank {owner.rank} of num_replicas={owner.num_replicas}) "
        "solved its joint plan on its own, with no torch.distributed process group: the solve "
        "is time-limited, so another rank can plan other shapes from the same arguments. "
        "Build the sampler after init_process_group (rank 0 then solves for every rank), "
        "or solve once and give every rank the same BucketSpec (or the same cache= entry"
        + (
            ", written before the ranks start: the cache= given had none, so every rank "
            "solved it at once"
            if missed
            else ""
        )
        + "), or pass strategy=Joint(work_limit=100): every rank then plans the same cells",
        UserWarning,
        stacklevel=stacklevel,
    )


class _Passes:
    """Where this sampler's passes stand (NOTEs [ Exact resume behind DataLoader workers ] and
    [ A new pass without set_epoch ])."""

    def __init__(self, *, advanced: bool = False) -> None:
        self.finished = False  # the current epoch's pass ran to its end
        self.advanced = advanced  # an epoch was advanced automatically once (logged)
        self.prefetched = False  # torch's multi-process DataLoader iterator pulls the batches
        self.warned = False  # the in-flight warning was shown
        self.begin = 0  # the position the loader's pass started from
        self.handed: int | None = None  # batches a ResumableDataLoader handed out in this pass
        self.by_loader = False  # the next __iter__ is a ResumableDataLoader's pass


def check_consumed(owner: Any, consumed: int, handed: int, where: str) -> int:
    """``state_dict(batches_consumed=...)``: at most the ``handed`` batches of the epoch the
    sampler handed out (with a pending resume, its position). More would resume past batches no
    loop received, which are then never seen that epoch: a global step, a sample count or a count
    taken after ``set_epoch(next epoch)`` passed by mistake was accepted silently (s28-user)."""
    if consumed > handed:
        raise ValueError(
            f"batches_consumed={consumed} is more than the {handed} batches this "
            f"{type(owner).__name__} has handed out {where}; pass the batches your loop consumed "
            "in the current epoch (not a global step or a sample count), before set_epoch() "
            "moves to the next one"
        )
    return consumed


def _called_from(fn: Any, depth: int = 5) -> bool:
    """Whether ``fn``'s code is among the ``depth`` frames above the caller. Code objects only:
    reading a live frame's locals would keep a DataLoader iterator alive (its workers then stall
    for their join timeout when it is finally collected)."""
    code = getattr(fn, "__code__", None)
    frame = inspect.currentframe()
    try:
        for _ in range(depth):
            if frame is None:
                return False
            if frame.f_code is code:
                return True
            frame = frame.f_back
        return False
    finally:
        del frame


def _pulled_by_workers() -> bool:
    """Whether ``__iter__``'s body runs for torch's multi-process DataLoader iterator, which
    fetches batches ahead of the loop (``_try_put_index`` -> ``_next_index`` -> here)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    return _called_from(_MultiProcessingDataLoaderIter._try_put_index)


def check_not_in_batch_sampler(owner: str) -> None:
    """``DataLoader(dataset, sampler=sampler)`` wraps a batch sampler in torch's
    ``BatchSampler``, which then hands the dataset lists of indices ("list indices must be
    integers"): say which argument to use instead."""
    from torch.utils.data import BatchSampler

    if _called_from(BatchSampler.__iter__, depth=4):
        raise TypeError(
            f"{owner} yields whole batches of indices, but it is iterated by a BatchSampler "
            "(DataLoader(dataset, sampler=...)); pass it as "
            "DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator()), or use "
            "sampler.dataloader(dataset)"
        )


class BucketSampler(SpecShapes, EpochSampler):
    """Batches of sample indices whose padded shapes are exactly :attr:`shapes`.

    Each sample belongs to a bucket (boundaries from :func:`~bucketloader.compute_boundaries`),
    bucket ``i`` has one batch shape ``(B_i, b_i)`` with ``B_i = batch_size`` or
    ``max_tokens // b_i``, batches are shuffled within buckets and interleaved so buckets drain
    evenly. Use it as
    ``DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator())``.

    The options split in two. *What shapes the batches* (``num_buckets``, ``strategy``,
    ``boundaries``, ``batch_size`` or ``max_tokens``, ``last_batch``, ``groups``, ``cache``, ...)
    are :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` options, passed here as
    keywords or fixed in a ready ``BucketSpec``. *How an epoch is iterated* are this class's own
    arguments below.

    Args:
        lengths: per-sample lengths ``(N,)``, several inputs ``(N, D)`` or a mapping
            name → lengths; or a :class:`~bucketloader.plan.BucketSpec`.
        shuffle: shuffle within buckets and the bucket interleave; ``False`` is deterministic.
        seed: randomness comes only from ``SeedSequence([seed, epoch])``; same on every rank.
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0; required with
            ``num_replicas > 1`` and no process group).
        weights: sampling weights per dataset, with ``groups`` (a sequence in group-id order or a
            mapping group id → weight): each epoch keeps its length and gives each dataset a
            share of the batches proportional to its weight, cycling through a small dataset's
            data and a large one's in turn (NOTE [ Weighted epochs ] in
            :mod:`bucketloader.plan.epoch`).
        longest_first: start every epoch with a batch of the largest planned shape, so an
            out-of-memory shows at step 0 (NOTE [ Longest batch first ]).
        accumulate: gradient-accumulation groups (fairseq's ``update_freq``): ``k``
            consecutive batches of one shape on every rank, so an accumulation step never mixes
            shapes; each bucket's batches are rounded up to whole groups with repeats of its own
            samples (NOTE [ Accumulation groups ] in :mod:`bucketloader.plan.accumulate`), or
            under ``last_batch="fill"`` of shorter ones where its groups take at least twice its
            samples (NOTE [ Filling a small bucket ]).
        **spec_options: :meth:`BucketSpec.build <bucketloader.plan.BucketSpec.build>` options
            (not allowed with a ready spec). The common ones: ``num_buckets`` (default 8),
            ``strategy`` (default ``"optimal"``), ``batch_size`` (or per-bucket sizes) or
            ``max_tokens`` (or a :class:`~bucketloader.plan.TokenBudget` with
            ``max_batch_size``), ``min_length`` / ``max_length`` / ``overflow``,
            ``pad_to_multiple_of``, ``last_batch`` (``"pad"`` by default: the collator pads the
            last batch's rows, masked; ``"fill"``, ``"drop"``, ``"keep"``) and ``cache``.

    Every rank computes the same global plan and takes its slot of every global step: all ranks
    get the same number of batches and, at each step, batches of the same shape. To make that
    hold, each bucket ends with one last step of ``num_replicas`` batches holding what is left
    (``q`` samples, fewer than ``num_replicas * B_i``): ``"pad"`` drops nothing and repeats a
    sample only on ranks that would otherwise get none (``num_replicas - q`` repeats when
    ``q < num_replicas``); ``"fill"`` repeats ``num_replicas * B_i - q`` samples of the bucket
    (a bucket with at most half a step of samples keeps each of its own once and takes shorter
    samples drawn at random, padded to its shape: NOTE [ Filling a small bucket ]; a warning
    says when the repeats pass 5% or train a sample 3 times an epoch, NOTE [ What fill
    repeats ]); ``"keep"`` repeats at most ``num_replicas - 1``; ``"drop"``
    drops the ``q`` samples (a different random set each epoch). With one replica only
    ``"fill"`` repeats and only ``"drop"`` drops (NOTE [ last_batch and replicas ] in
    :mod:`bucketloader.plan.epoch`).

    Example:
        >>> sampler = BucketSampler([3, 4, 9, 10, 10], num_buckets=2, batch_size=2, seed=1)
        >>> sampler.shapes, len(sampler)
        ([(2, 4), (2, 10)], 3)
        >>> sorted(i for batch in sampler for i in batch)
        [0, 1, 2, 3, 4]
    """

    #: Whether this sampler's epochs promote leftovers (a subclass that plans other samples than
    #: the spec's, such as weighted draws, keeps even batches).
    _promotes = True

    def __init__(
        self,
        lengths: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        weights: Any = None,
        longest_first: bool = False,
        accumulate: int = 1,
        **spec_options: Unpack[SpecOptions],
    ) -> None:
        # (up to its last collective, the check of arguments: a rank refused before it stops the
        # others there, named; NOTE [ Checkpoints before a collective ] in bucketloader._dist)
        with failing_together(would_join(num_replicas, rank)):
            given: BucketSpec = spec_or_build(lengths, spec_options, BucketSpec)
            super().__init__(shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
            # max_tokens: each bucket's batches hold its samples evenly (NOTE [ Even batches ])
            self.spec: BucketSpec = given.for_replicas(self.num_replicas)
            self._given = given
            self.weights = resolve_weights(self.spec, weights)
            if self.weights is not None:
                check_weights(self.spec, self.weights, self.num_replicas)  # at construction
            self.longest_first = check_bool("longest_first", longest_first)
            self.accumulate = check_accumulate(accumulate, self.spec, self.weights)
            # leftovers fill longer cells' spare rows (NOTE [ Promotion of leftovers ])
            self.promotion: Promotion | None = None
            spec, promotion = self._promoted(self.spec, self.num_replicas)
            if promotion is not None:
                self._even, self.spec, self.promotion = self.spec, spec, promotion
            own = self._own_arguments()  # (before the digest: a subclass's plan needs them)
            self._agree_with_group(
                num_replicas,
                rank,
                {
                    "seed": self.seed,
                    "shuffle": self.shuffle,
                    "weights": self.weights if self.weights is None else self.weights.tolist(),
                    "longest_first": self.longest_first,
                    "accumulate": self.accumulate,
                    "last_batch": self.last_batch,
                    "num_samples": int(self.spec.cell_of_sample.size),
                    "plan_digest": self._plan_digest(),
                    **own,
                },
            )
        self._warn_losses()
        self._warn_fill_repeats()
        self._warn_group_repeats()
        self._warn_rank_repeats()
        self._warn_empty_shapes()
        self._warn_filler_rows()
        if given is not lengths and joint_solved_here(spec_options, self.spec):
            warn_joint_alone(self, spec_options.get("cache") not in (None, False), stacklevel=3)

    def _own_arguments(self) -> dict[str, Any]:
        """A subclass's own arguments, checked (and set) before the ranks' check of arguments,
        and what of them every rank must share (:meth:`_agree_with_group`): a rank refused on
        them stops the others there, and a rank given others is named."""
        return {}

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes, small and picklable (what the collator keeps)."""
        table = self.spec.shape_table(self.num_replicas)
        if self._fill_pools:  # a filled cell's batch holds shorter samples after its own
            return dataclasses.replace(table, promoted=True)
        if self.promotion is None:
            return table
        steps = self.promotion.steps  # a cell promoted away has no steps and no shape
        shapes = {s for s, m in zip(self.spec.cells.shapes, steps.tolist(), strict=True) if m}
        return dataclasses.replace(table, shapes=tuple(sorted(shapes)), promoted=True)

    @functools.cached_property
    def _fill_pools(self) -> dict[int, np.ndarray]:
        """The cells whose ``last_batch="fill"`` steps shorter samples fill, and the cells they
        draw from (NOTE [ Filling a small bucket ] in :mod:`bucketloader.plan.epoch`: plain
        epochs, accumulation groups, weighted epochs' passes; a subclass whose epochs batch
        other samples, its own)."""
        if not self._batches_the_spec:
            return {}
        return fill_pools(self.spec, self.num_replicas, self.accumulate)

    @property
    def lengths(self) -> np.ndarray:
        """The declared lengths, ``(N,)`` or ``(N, D)``."""
        return self.spec.lengths

    @property
    def groups(self) -> np.ndarray | None:
        """Group id per sample, or ``None``."""
        return self.spec.groups

    @property
    def last_batch(self) -> str:
        """The last-batch policy."""
        return self.spec.last_batch

    def collator(self, **kwargs: Any) -> collate.PadCollator:
        """``PadCollator(self.shape_table, **kwargs)``: pads every batch to its planned shape."""
        from bucketloader.collate import PadCollator

        check_collator_options(f"{type(self).__name__}.collator()", PadCollator, kwargs)
        return PadCollator(self.shape_table, **kwargs)

    # -- the epoch plan (EpochSampler does the rest) ------------------------------------------
    def _make_plan(self, epoch: int) -> EpochPlan:
        """This rank's :class:`~bucketloader.plan.EpochPlan` of ``epoch`` (see :meth:`plan`)."""
        return plan_epoch(
            self.spec,
            **self._coordinates(epoch),
            weights=self.weights,
            longest_first=self.longest_first,
            accumulate=self.accumulate,
            promotion=self.promotion,
        )

    @functools.cached_property
    def _len(self) -> int:
        if self.promotion is not None:
            return self.promotion.num_steps
        steps = self.spec.num_steps(self.num_replicas)
        return int(grouped_steps(steps, self.accumulate).sum())

    def report(self, epoch: int | None = None) -> SamplingReport:
        """What an epoch does with the data, exactly (NOTE [ Where the report's numbers come
        from ] in :mod:`bucketloader.plan.report`): samples seen, filtered, dropped, repeated,
        padding per bucket over all ranks, and this rank's remaining batches and samples.

        Args:
            epoch: the epoch to report (default: the current one, with the current position).
        """
        current = epoch is None or epoch == self.epoch
        ep = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        return plan_report(
            self.spec,
            **self._coordinates(ep),
            weights=self.weights,
            longest_first=self.longest_first,
            batches_done=self._batches_done() if current else 0,
            accumulate=self.accumulate,
            promotion=self.promotion,
        )

    #: Whether an epoch batches the spec's samples (an empty plan is then refused at
    #: construction); ``WeightedBucketSampler``'s epochs batch its draws instead.
    _batches_the_spec = True

    def _warn_losses(self) -> None:
        """NOTE [ Warning about silent losses ]: warn once, with the count per reason (the option
        that caused it), when the filters, the oversize policy or ``last_batch="drop"`` leave
        out more than ``LOSS_WARNING`` of the samples; an epoch with no batch at all is an
        error. PackSampler and EvalSampler warn the same way."""
        spec = self.spec
        n = int(spec.cell_of_sample.size)
        # only last_batch="drop" can empty a plan (the filters raise); a subclass whose epochs
        # batch something else (WeightedBucketSampler's draws) is not set up yet here
        if self._batches_the_spec and not spec.num_steps(self.num_replicas).any():
            per_step = spec.cells.batch * self.num_replicas
            fullest = int(np.argmax(spec.counts))
            raise ValueError(
                f"{type(self).__name__} would make no batch per epoch: with "
                f"last_batch={spec.last_batch!r} every bucket holds fewer samples than one "
                f"step takes (the fullest holds {int(spec.counts[fullest]):,}, a step takes "
                f"{int(per_step[fullest]):,} rows on {self.num_replicas} rank(s)), so all "
                f"{n:,} samples would be left out; pass last_batch='pad' (the default: the "
                "short batch is padded) or 'keep', a smaller batch_size / max_tokens, or fewer "
                "num_buckets"
            )
        reasons = {
            f"{LEFT_OUT_BY[k]} ({k.replace('_', ' ')})": v
            for k, v in (spec.filtered or {}).items()
            if v and k in LEFT_OUT_BY
        }
        never = ""
        # a dataset given weight 0 makes no batch: its samples are never seen (s21: counted by
        # report() as dropped, not said; a filter that leaves them out is)
        unseen = np.zeros(spec.cells.num_cells, dtype=bool)
        if self.weights is not None and not self.weights.all():
            unseen = self.weights[spec.cell_group] == 0
            kept = spec.cell_of_sample[spec.cell_of_sample >= 0]
            zero = [spec.group_values[g] for g in np.flatnonzero(self.weights == 0).tolist()]
            reasons[f"weights=0 (group(s) {zero})"] = int(unseen[kept].sum())
        if spec.last_batch == "drop":
            full, q = spec.cell_steps(self.num_replicas)
            q = np.where(unseen, 0, q)  # (counted above)
            if int(q.sum()):
                reasons["last_batch='drop'"] = int(q.sum())
            # a bucket with fewer samples than one step makes no batch (no promotion under
            # "drop"): its samples are never seen, the same ones every epoch, said whatever
            # their number (s21-pack: 5 of 1,005 samples, silently)
            dead = np.flatnonzero((full == 0) & (q > 0) & self._batches_the_spec)
            if dead.size:
                per_step = spec.cells.batch * self.num_replicas
                never = (
                    f"; {_small_buckets(spec, dead, q, per_step)}, so their "
                    f"{int(q[dead].sum()):,} samples are never seen, the same ones every epoch"
                )
        lost = sum(reasons.values())
        if lost > LOSS_WARNING * n or never:
            listed = ", ".join(f"{v:,} by {k}" for k, v in reasons.items())
            hint = (
                "; last_batch='pad' keeps every sample at the planned shapes"
                if "last_batch='drop'" in reasons
                else ""
            )
            need = max((int(j.get("cover", 0)) for j in spec.joint or ()), default=0)
            if need and spec.filtered and spec.filtered.get("oversize"):
                # (NOTE [ Covering the most samples within a size limit ]: the fewest lost)
                hint += (
                    "; the joint plan's max_shapes cells within max_tokens hold the most "
                    f"samples they can, and {need} cells would hold them all: pass "
                    f"max_shapes={need} or more, or raise max_tokens"
                )
            if list(reasons) == [f"{LEFT_OUT_BY['no_shape']} (no shape)"]:
                # (session 21: a fixed list of image resolutions, SDXL-style, that misses some)
                rows = spec.lengths.reshape(len(spec.cell_of_sample), -1)  # (one input: (N,))
                out = rows[spec.cell_of_sample < 0].max(axis=0).tolist()
                top = out[0] if len(out) == 1 else tuple(out)
                hint += (
                    f"; the samples left out reach {top} (inputs "
                    f"{list(spec.cells.input_names)}): add a shape at least that large to keep "
                    "them all"
                )
            warnings.warn(
                f"this BucketSampler leaves out {lost:,} of {n:,} samples ({lost / n:.1%}) "
                f"every epoch on {self.num_replicas} rank(s): {listed}{never}{hint}",
                DataLossWarning,
                stacklevel=3,
            )
        cut = int((spec.filtered or {}).get("truncated", 0))
        if cut:  # (kept, but cut to max_length: the elements past it are lost)
            lost, total = spec.cut_elements()
            warn_truncated(type(self).__name__, cut, n, lost=lost, total=total, stacklevel=3)

    def _warn_fill_repeats(self) -> None:
        """Under ``last_batch="fill"``, one warning when the repeats are a large share of the
        samples or concentrated (NOTE [ What fill repeats ] in :mod:`bucketloader.plan.epoch`):
        a bucket with at most half a step of samples repeated all of them, the same ones every
        epoch, up to ``ceil(R * B / n)`` times (LibriSpeech, 8 buckets of 32 over 8 ranks:
        samples up to 5 times an epoch, silently; s22-fill). Such a bucket's step is now filled
        with shorter samples drawn at random (NOTE [ Filling a small bucket ]; with
        ``accumulate``, a bucket whose groups take at least twice its samples); the shortest
        bucket of a group, if small, still repeats its own. The count and the most
        appearances are exact, the most from this epoch's draws: the same in every epoch for
        one input (each bucket's pool holds the shorter ones' pools), while a joint plan's
        overlapping pools can make it differ between epochs."""
        spec = self.spec
        if spec.last_batch != "fill" or self.weights is not None or not self._batches_the_spec:
            return  # (weighted epochs cycle through passes: report() counts them)
        r = self.num_replicas
        full, q = spec.cell_steps(r)
        per_step = spec.cell_batch * r
        counts = spec.counts
        # appearances per bucket: its steps (rounded up to whole accumulation groups, whose
        # extra steps wrap round its samples too: s23-rev, the count said 1 of 5 repeats for 3
        # samples in batches of 4 with accumulate=2) of R * B; a filled bucket's step holds as
        # many appearances as before (R * B - q repeats), its own samples each once or more
        slots = grouped_steps(full + (q > 0), self.accumulate) * per_step
        repeated = int(np.where(counts > 0, slots - counts, 0).sum())
        pools = self._fill_pools
        filled = np.isin(np.arange(counts.size), list(pools))
        small = np.flatnonzero((full == 0) & (q > 0) & ~filled)
        wraps = (counts > 0) & ~filled  # (each sample ceil(slots / n) times at most)
        most = int((-(-slots[wraps] // counts[wraps])).max(initial=1))
        if pools:  # own samples for batches without one, and the draws (this epoch's)
            batches = slots // spec.cell_batch  # (R per step)
            most = max(most, *(-(-int(batches[c]) // int(counts[c])) for c in pools))
            k = self.accumulate
            extra = fill_extra(spec, pools, **self._coordinates(self.epoch), accumulate=k)
            most = max(most, 1 + int(extra.max(initial=0)))
        said = ""
        if small.size:
            said = (
                f"; {_small_buckets(spec, small, q, per_step)}, so all their "
                f"{int(q[small].sum()):,} samples repeat, the same ones every epoch"
            )
        warn_fill_repeats(
            type(self).__name__,
            repeated,
            int(counts.sum()),
            most=most,
            small=said,
            num_replicas=r,
            accumulate=self.accumulate,
            stacklevel=3,
        )

    def _warn_group_repeats(self) -> None:
        """Under ``last_batch="pad"`` with ``accumulate=k``, one warning when the repeats that
        round each bucket's steps up to whole groups (NOTE [ Accumulation groups ] in
        :mod:`bucketloader.plan.accumulate`) pass the thresholds ``"fill"`` warns at. They were
        silent: 500 samples in 4 buckets of 8 with ``accumulate=16`` repeated 248 (50%), and
        ``max_tokens=2048`` on 2 ranks 1,050 (210%, one sample 6 times an epoch), while
        ``"fill"``, which repeats on purpose, said so (s25-user). The count is exact for the
        groups (a rank without a sample of a bucket's last step adds at most ``R - 1`` more, as
        ``report()`` counts)."""
        spec, k = self.spec, self.accumulate
        if spec.last_batch != "pad" or k == 1 or self.weights is not None:
            return
        if not self._batches_the_spec:
            return
        r = self.num_replicas
        full, q = spec.cell_steps(r)
        steps = full + (q > 0)
        extra = (grouped_steps(steps, k) - steps) * spec.cell_batch * r
        counts = spec.counts
        real = counts > 0
        repeated, n = int(extra[real].sum()), int(counts.sum())
        most = 1 + int((-(-extra[real] // counts[real])).max(initial=0))
        if repeated <= FILL_WARNING * n and most < FILL_TIMES:
            return
        times = f", some of them up to {most:,} times an epoch" if most >= FILL_TIMES else ""
        warnings.warn(
            f"accumulate={k} rounds each bucket's steps up to whole groups of {k} with repeats "
            f"of its own samples: this {type(self).__name__} repeats {repeated:,} samples per "
            f"epoch on {r} rank(s) ({repeated / max(n, 1):.1%} of {n:,}){times}: the model "
            "trains on those more often than on the rest; report().totals['repeated'] counts "
            "each epoch exactly. A smaller accumulate, fewer buckets or smaller batches need "
            "fewer repeats; last_batch='fill' tops up a bucket whose groups take at least twice "
            "its samples with shorter samples instead",
            UserWarning,
            stacklevel=3,
        )

    def _warn_rank_repeats(self) -> None:
        """Under ``last_batch="pad"`` or ``"keep"`` over ``R`` ranks, one warning when the repeats
        that give every rank a sample of a bucket's last step (NOTE [ last_batch and replicas ]
        in :mod:`bucketloader.plan.epoch`: up to ``R - 1`` per bucket) pass the share
        ``"fill"`` warns at. They were silent: 100 samples in 8 buckets on 16 ranks repeated 28
        (28%), on 1,000 ranks 7,900 (each sample about 80 times an epoch), while ``"fill"`` and
        ``accumulate`` said so (s28-user). The count is exact, as ``report()`` counts it (with
        promotion, a cell's ``R * steps`` batches beyond its own samples each repeat one: NOTE
        [ Promotion of leftovers ] in :mod:`bucketloader.plan.promote`). A bucket's one sample
        repeated on 8 ranks is a few rows of a large set, as ``DistributedSampler`` pads: not
        warned about."""
        spec, r = self.spec, self.num_replicas
        if r == 1 or spec.last_batch not in ("pad", "keep") or self.accumulate != 1:
            return  # (accumulate: _warn_group_repeats; weighted epochs: report() counts them)
        if self.weights is not None or not self._batches_the_spec:
            return
        if self.promotion is not None:
            p = self.promotion
            repeated = int(np.where(p.steps > 0, np.maximum(r * p.steps - p.stay, 0), 0).sum())
        else:
            _, q = spec.cell_steps(r)
            if spec.last_batch == "pad":
                repeated = int(np.where(q > 0, np.maximum(r - q, 0), 0).sum())
            else:  # ("keep": one last step of ceil(q / R) rows per rank)
                repeated = int((r * -(-q // r) - q).sum())
        buckets = int(spec.num_steps(r).astype(bool).sum())
        warn_rank_repeats(
            type(self).__name__,
            repeated,
            int(spec.counts.sum()),
            num_replicas=r,
            parts=f"{buckets:,} bucket{'s' if buckets != 1 else ''}",
            fix="Fewer num_buckets (or fewer ranks) need fewer repeats",
            stacklevel=3,
        )

    def _warn_empty_shapes(self) -> None:
        """Warn once about samples of length 0 the plan keeps (NOTE [ Samples of length 0 ] in
        :mod:`bucketloader.plan.limits`), and when they got a cell of width 0 of their own: a
        ``(B, 0)`` batch breaks most models (attention over no keys)."""
        warn_zero_lengths(self.spec, type(self).__name__, stacklevel=3)

    def _warn_filler_rows(self) -> None:
        """One warning when one batch holds more rows than the whole epoch has samples and more
        than half of the epoch's rows are filler: most likely a token count given as
        ``batch_size`` (``batch_size=16384`` over 1,000 samples planned batches of 16,384 rows,
        each about 250 samples and the rest filler, silently). PackSampler warns the same way
        about its all-padding rows. A small dataset over many ranks whose batches each fit in
        the epoch is not warned about (nothing in ``batch_size`` to fix)."""
        spec = self.spec
        if spec.last_batch != "pad" or spec.num_planned == 0:  # ("keep" and "drop": no filler)
            return
        if spec.rule is None or spec.rule.batch_size is None:  # (max_tokens: nothing to swap)
            return
        largest = int(spec.cell_batch.max())
        if largest <= spec.num_planned:
            return
        slots = int((spec.num_steps(self.num_replicas) * spec.cell_batch).sum()) * self.num_replicas
        filler = slots - spec.num_planned
        if 2 * filler <= slots:
            return
        warnings.warn(
            f"{filler:,} of this {type(self).__name__}'s {slots:,} rows per epoch "
            f"({filler / slots:.0%}) are filler rows, computed for nothing: a batch holds up to "
            f"{largest:,} rows, more than the {spec.num_planned:,} "
            f"sample{'' if spec.num_planned == 1 else 's'} of the whole epoch "
            f"({self.num_replicas} rank(s)); batch_size counts samples per batch: lower it, or "
            "pass max_tokens=<tokens per batch> to size batches from a token budget",
            UserWarning,
            stacklevel=3,
        )

    # -- resumption ---------------------------------------------------------------------------
    def _refuse_older(self, state: Any, saved: Any, *, current: bool) -> None:
        """A state saved before even batches (NOTE [ Even batches ]) is refused with the option
        that resumes it exactly, one saved before NOTE [ Filling a small bucket ] (its small
        buckets' steps held other samples) with the epoch to start over; a joint plan solved
        again into other cells names the cache that keeps it."""
        # (a state of this data and options on other ranks is not an older version's, whose
        # digests the checks below look for: on 1 rank, or where the saved ranks promoted
        # nothing, this version's digest is the given or the even spec's, s32-user)
        older = not current
        if (
            older
            and isinstance(saved, dict)
            and self.promotion is not None
            and saved.get("plan_digest")
            in (self._plan_digest(spec=self._even), self._plan_digest(1, spec=self._even))
        ):
            self._refuse_older_budget(
                "kept every sample in its own bucket (even batches without promotion, or "
                "TokenBudget(promote=False))",
                "batches leftovers in longer buckets' spare rows (other steps and batch shapes)",
                promote=False,
            )
        if (
            older
            and isinstance(saved, dict)
            and self.spec is not self._given
            and saved.get("plan_digest") == self._plan_digest(spec=self._given)
        ):
            self._refuse_older_budget(
                "filled every batch to max_tokens // size rows (bucketloader 0.2, or "
                "TokenBudget(balance=False))",
                "spreads each bucket's samples evenly over the same steps (fewer filler rows, "
                "other batch shapes)",
                balance=False,
            )
        if (
            isinstance(saved, dict)
            and self.shuffle
            and saved.get("shuffle") is True
            and saved.get("plan_digest") == self._plan_digest(plan_version=1, fill=False)
        ):
            raise ValueError(
                "state was saved by a sampler that shuffled each bucket with numpy's Fisher-Yates "
                "(plan version 1, bucketloader <= 0.2); this one draws a keyed permutation per "
                f"bucket (plan version {PLAN_VERSION}, NOTE [ Counter-based shuffle ] in "
                "bucketloader.plan.permute): the same steps and shapes, other samples in each "
                "batch, so the state cannot resume its epoch exactly. Start that epoch over with "
                f"sampler.set_epoch({state.get('epoch')!r}), or go on with the next one"
            )
        if (
            isinstance(saved, dict)
            and self._fill_pools
            and saved.get("num_replicas") == self.num_replicas  # (else the fill version
            # follows the ranks: NOTE [ An epoch boundary on another number of ranks ], s29-rev)
            and saved.get("plan_digest") == self._plan_digest(fill=False)
        ):
            k = self.accumulate
            small = (
                "the step of a bucket with at most half a step of samples"
                if k == 1
                else f"the accumulation groups (accumulate={k}) of a bucket whose steps take at "
                "least twice its samples"
            )
            raise ValueError(
                f"state was saved by a BucketSampler whose last_batch='fill' topped up {small} "
                "with repeats of its own samples (the longest samples, several times an epoch); "
                "this one fills them with shorter samples drawn at random (plan_digest "
                "'/fill=2', NOTE [ Filling a small bucket ] in bucketloader.plan.epoch): the same "
                "steps and shapes, other samples in those steps, so the state cannot resume its "
                "epoch exactly. Start that epoch over with "
                f"sampler.set_epoch({state.get('epoch')!r}), or go on with the next one"
            )
        if isinstance(saved, dict) and self.spec.joint:
            self._refuse_other_joint_plan(state, saved)

    def _refuse_other_joint_plan(self, state: dict[str, Any], saved: dict[str, Any]) -> None:
        """A joint plan is solved under a wall-clock ``time_limit``, so a restart that solves
        again (no cache) can plan other cells than the run that saved the state, with the very
        same arguments; the generic "build the sampler exactly as" cannot fix that, so name
        what does: a cache, from which every restart reads the saved run's plan."""
        config = self._config()
        same = all(saved.get(k) == v for k, v in config.items() if k not in _PLAN_KEYS)
        if not same or saved.get("plan_digest") == config["plan_digest"]:
            return
        status = ", ".join(sorted({str(j.get("status")) for j in self.spec.joint or ()}))
        epoch = state.get("epoch")
        nxt = epoch + 1 if isinstance(epoch, int) else "epoch + 1"
        raise ValueError(
            f"state is from another plan: plan_digest={saved.get('plan_digest')!r} in the "
            f"state but {config['plan_digest']!r} in this sampler, whose other options match. "
            "Unless the lengths differ, the joint plan differs: it is solved under a wall-clock "
            f"time_limit (status here: {status}), so solving it again can pick other cells from "
            "the same arguments. Build the sampler with "
            "cache=True (or a BucketCache on storage every restart sees) so that restarts read "
            "the saved run's plan (a new run can also pass strategy=Joint(work_limit=100): the "
            "same cells from every solve). This state cannot resume its epoch under the new "
            f"plan: go on with sampler.set_epoch({nxt}) instead of load_state_dict"
        )

    def _refuse_older_budget(self, saved_by: str, this: str, **older: Any) -> NoReturn:
        """Refuse a state planned by an older token-budget rule (``saved_by``, where this sampler
        ``this``), naming the ``max_tokens`` (this budget with the ``older`` fields) that
        resumes it exactly."""
        budget = self.spec.rule.budget if self.spec.rule is not None else None
        fix = dataclasses.replace(budget, **older) if budget is not None else None
        raise ValueError(
            f"state was saved by a sampler that {saved_by}; this sampler {this}. Build it with "
            f"max_tokens={fix!r} to resume this state exactly"
        )

    def _config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "weights": None if self.weights is None else [float(w) for w in self.weights],
            "longest_first": self.longest_first,
            "last_batch": self.last_batch,
            "num_samples": int(self.spec.cell_of_sample.size),
            "num_batches": len(self),
            "plan_digest": self._plan_digest(),
        }

    def _promoted(self, even: BucketSpec, replicas: int) -> tuple[BucketSpec, Promotion | None]:
        """The spec planned on ``replicas`` ranks from their even spec (``even``:
        ``given.for_replicas(replicas)``) and its promotion, ``None`` where none applies or
        nothing is promoted (the even plan is then the same plan)."""
        given = self._given
        if self._promotes and promotes(given) and self.weights is None and self.accumulate == 1:
            spec, promotion = promoted_spec(given, replicas)
            if promotion.num_promoted:
                return spec, promotion
        return even, None

    def _digest_on(self, num_replicas: int) -> str | None:
        """NOTE [ An epoch boundary on another number of ranks ]: under ``max_tokens`` the spec
        follows the ranks (each bucket's batches split evenly over them, NOTE [ Even batches ],
        and the leftovers promoted), so its digest does too, and a state saved between epochs on
        other ranks was refused for it (s32-user: ``BucketSampler(..., max_tokens=...)`` saved
        after ``set_epoch`` on 4 ranks, refused on 2). The saved ranks' digest is recomputed from
        the spec this sampler was given (a few arrays of ``K`` buckets, no sample)."""
        try:
            even = self._given.for_replicas(num_replicas)
            spec, promotion = self._promoted(even, num_replicas)
        except ValueError:  # (options the saved ranks could not plan: compared as they are)
            return None
        return self._plan_digest(spec=spec, promoted=promotion is not None, fill=False)

    def _plan_digest(
        self,
        plan_version: int = PLAN_VERSION,
        spec: Any = None,
        *,
        fill: bool = True,
        promoted: bool | None = None,
    ) -> str:
        """The digest of ``spec`` (default: the planned one), the accumulation, the promotion,
        with ``shuffle`` the version of the within-bucket shuffle (NOTE [ Counter-based
        shuffle ]; version 1 had no suffix) and ``/fill=2`` where ``last_batch="fill"`` fills a
        small bucket's step with shorter samples (NOTE [ Filling a small bucket ];
        ``fill=False``: the digest a state saved before that carries; ``promoted``: whether
        ``spec`` is a promoted one, default: only the planned one is)."""
        if promoted is None:
            promoted = spec is None and self.promotion is not None  # (another spec: not promoted)
        digest = (self.spec if spec is None else spec).digest
        if self.accumulate != 1:
            digest += f"/accumulate={self.accumulate}"
        if promoted:
            digest += "/promote"
        if self.shuffle and plan_version > 1:
            digest += f"/shuffle={plan_version}"
        if fill and spec is None and self._fill_pools:
            digest += "/fill=2"
        return digest


class GroupedDataset(ConcatDataset):
    """Several datasets as one, each (dict) sample carrying its dataset's index under ``key``.

    For per-dataset bucketing: boundaries are fitted per dataset and batches never mix datasets.
    Pass :attr:`groups` to the sampler and the collator reads each batch's dataset from ``key``
    (its default ``group_key`` is ``"dataset"`` whenever the plan has groups).

    Args:
        datasets: the map-style datasets, in order (their samples must be dicts).
        key: the field added to every sample.

    Attributes:
        groups: ``(N,)`` dataset index of every sample, in concatenated order.

    Example:
        >>> a = [{"x": [1] * n} for n in (2, 3, 9)]
        >>> b = [{"x": [1] * n} for n in (4, 4)]
        >>> data = GroupedDataset([a, b])
        >>> sampler = BucketSampler([2, 3, 9, 4, 4], groups=data.groups, num_buckets=2,
        ...                         batch_size=2, shuffle=False)
        >>> list(sampler), data[3]
        ([[0, 1], [2], [3, 4]], {'x': [1, 1, 1, 1], 'dataset': 1})
    """

    def __init__(self, datasets: Sequence[Any], *, key: str = "dataset") -> None:
        if isinstance(datasets, (str, bytes, Mapping)) or not isinstance(datasets, Sequence):
            raise TypeError(
                f"datasets must be a list of map-style datasets, got {type(datasets).__name__}"
            )
        if not isinstance(key, str) or not key:
            raise TypeError(f"key must be a non-empty str, got key={key!r}")
        datasets = list(datasets)
        if not datasets:
            raise ValueError(
                "datasets must hold at least one dataset, got an empty list; pass "
                "GroupedDataset([dataset_a, dataset_b, ...])"
            )
        for i, d in enumerate(datasets):
            if isinstance(d, (Mapping, str, bytes)):  # (has __len__ and __getitem__ too)
                raise TypeError(
                    f"datasets must be a list of map-style datasets, got a {type(d).__name__} at "
                    f"position {i}, which reads as a sample, not a dataset: pass the datasets "
                    "themselves, GroupedDataset([dataset_a, dataset_b]), not one dataset's "
                    "samples"
                )
            if isinstance(d, IterableDataset) or not (
                hasattr(d, "__len__") and hasattr(d, "__getitem__")
            ):
                raise TypeError(
                    f"datasets must be map-style datasets (with __len__ and __getitem__), got "
                    f"{type(d).__name__} at position {i}; per-dataset bucketing needs every "
                    "sample's length up front (for a stream, see BucketIterable)"
                )
        super().__init__(datasets)
        self.key = key
        sizes = [len(d) for d in self.datasets]  # type: ignore[arg-type]
        self.groups = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        self.groups.setflags(write=False)

    def __getitem__(self, index: int) -> Any:
        sample = super().__getitem__(index)
        if not isinstance(sample, Mapping):
            raise TypeError(
                f"per-dataset bucketing needs dict samples to add {self.key!r} to, got "
                f"{type(sample).__name__} at index {index}; return a dict from your datasets"
            )
        group = int(self.groups[index])
        if self.key in sample and sample[self.key] != group:
            raise ValueError(
                f"the sample at index {index} already has a field {self.key!r} "
                f"(={sample[self.key]!r}), which GroupedDataset would overwrite with its dataset "
                f"index {group}; pass GroupedDataset(datasets, key=...) with a field name your "
                "samples do not use (and the collator's group_key= the same)"
            )
        return {**sample, self.key: group}


_STATE_VERSION = 1


def _small_buckets(spec: Any, cells: np.ndarray, q: np.ndarray, per_step: np.ndarray) -> str:
    """The warnings' words for the buckets ``cells`` that hold fewer samples (``q``) than one
    global step takes (``per_step``): their count and up to four padded lengths.

    Example:
        >>> spec = BucketSpec.build([3, 5, 9], boundaries=[4, 9], batch_size=2)
        >>> _small_buckets(spec, np.array([0]), np.array([1, 2]), np.array([2, 2]))
        "1 bucket(s) hold fewer samples than one step takes, padded lengths (4,) (1 of a step's 2)"
    """
    shapes = ", ".join(
        f"{tuple(int(x) for x in spec.cells.lengths[c])} ({int(q[c]):,} of a step's "
        f"{int(per_step[c]):,})"
        for c in cells[:4]
    )
    more = ", ..." if len(cells) > 4 else ""
    return (
        f"{len(cells)} bucket(s) hold fewer samples than one step takes, padded lengths "
        f"{shapes}{more}"
    )


#: The samplers whose states name them (``state["sampler"]``); a state of one is refused by
#: another with both names (a user's subclass, named otherwise, is not checked by name).
SAMPLER_KINDS = (
    "BucketSampler",
    "EvalSampler",
    "PackSampler",
    "ShardedSampler",
    "WeightedBucketSampler",
)


def _go_on(state: dict[str, Any], how: str, *, again: bool = False) -> str:
    """The way on from a state this sampler cannot resume exactly (another configuration or
    number of ranks): the next epoch, unless the state was saved before its epoch's first
    batch, whose epoch then runs whole (s29-user: such a state, saved at an epoch boundary
    after ``set_epoch(e)``, was told ``set_epoch(e + 1)``, which skips all of epoch ``e``)."""
    epoch, done = state["epoch"], state.get("batches_yielded")
    total = state["config"].get("num_batches")
    if isinstance(done, int) and not isinstance(done, bool) and done == 0:
        return (
            f"go on {how} instead of load_state_dict: sampler.set_epoch({epoch}) (the state "
            f"was saved before the first batch of epoch {epoch}, which then runs whole)"
        )
    if isinstance(done, int) and isinstance(total, int) and not isinstance(done, bool):
        if done >= total > 0:
            return (
                f"go on {how} with the next epoch instead of load_state_dict: "
                f"sampler.set_epoch({epoch + 1}) (the state was saved after the last batch of "
                f"epoch {epoch})"
            )
    return (
        f"go on {how} from the next epoch instead of load_state_dict: "
        f"sampler.set_epoch({epoch + 1}) (the rest of epoch {epoch} is then not seen"
        + (f"; set_epoch({epoch}) runs the whole epoch again)" if again else ")")
    )


def _check_state(
    state: Any,
    config: dict[str, Any],
    owner: str,
    *,
    epochs: bool = True,
    ranked: bool = False,
    other_plan: bool = False,
) -> tuple[int, int]:
    """Validate ``state`` against this sampler's ``config``; return ``(epoch, batches_yielded)``.

    Every mismatch names the key, the saved value and the current one. ``epochs=False``: the
    sampler's batches are the same in every epoch (an evaluation), so a state from another
    number of ranks says to evaluate again rather than to go on with the next epoch.
    ``ranked``: the plan digest itself follows the ranks (a ``ShardedSampler``'s hashes the
    ranks' shards), so a state saved between epochs on other ranks is not checked against it.
    ``other_plan``: the state is from other ranks and its plan digest is not the one this
    sampler's data and options make on them (:meth:`EpochSampler._digest_on`), so the plan's
    error is raised rather than the ranks'.
    """
    if not isinstance(state, dict):
        raise not_a_state(state, owner)
    state = _plain_ints(state)
    missing = [k for k in ("version", "epoch", "batches_yielded", "config") if k not in state]
    if missing and "format" in state:  # (the streams' states have one, the samplers' none)
        stream = stream_of(state) or "BucketIterable / PackIterable"
        raise ValueError(
            f"state is a stream's ({stream}.state_dict(): it has 'format' and no "
            f"'batches_yielded'), not {a_kind(owner)}'s; load it into the stream that saved "
            f"it, and pass {owner}.load_state_dict a dict from {owner}.state_dict()"
        )
    if missing:
        raise ValueError(
            f"state is missing {missing}; pass a dict from {owner}.state_dict(), "
            f"got keys {sorted(state)}"
        )
    if state["version"] != _STATE_VERSION:
        raise ValueError(
            f"state has version={state['version']!r} but this {owner} reads "
            f"version={_STATE_VERSION}"
        )
    saved = state["config"]
    if not isinstance(saved, dict):
        raise ValueError(f"state['config'] must be a dict, got {saved!r}")
    drawn = [k for k in _DRAW_KEYS if k in saved and k not in config]
    if drawn:  # (s21: loaded with a warning only, and resumed other samples: 136 of 2,000 twice)
        raise ValueError(
            "state was saved by a WeightedBucketSampler (its config has "
            f"{', '.join(f'{k}={saved[k]!r}' for k in drawn)}), whose epochs batch weighted "
            f"draws, not this {owner}'s samples; resume it with a WeightedBucketSampler built as "
            f"when it was saved, or pass a state from {owner}.state_dict()"
        )
    kind = state.get("sampler")  # (a state saved before it was recorded has none)
    if kind in SAMPLER_KINDS and owner in SAMPLER_KINDS and kind != owner:
        raise ValueError(  # (s27: a BucketSampler's state in a ShardedSampler said num_batches
            # differed, in an EvalSampler that plan_digest did)
            f"state is {a_kind(kind)}'s (state['sampler']), not {a_kind(owner)}'s; load it into "
            f"the {kind} that saved it, and pass {owner}.load_state_dict a dict from "
            f"{owner}.state_dict()"
        )
    plans = _plans_compared(saved, config, ranked=ranked)
    if plans:  # (where plan_digest decides, after the keys below instead, as before s31)
        _check_global(state, saved, config, owner, plans=True)
    if epochs:
        boundary = _boundary_on_other_ranks(state, saved, config, ranked=ranked)
        if boundary is not None:
            _warn_unknown_keys(state, config, owner)
            return boundary
    for key, value in config.items():
        if key in _LATER_KEYS:  # (_check_global, below)
            continue
        if key not in saved:
            raise ValueError(
                f"state['config'] has no {key!r} (its keys: {sorted(saved)}): the state was saved "
                f"by another kind of sampler or another version of bucketloader; pass a state "
                f"from {owner}.state_dict()"
            )
        epoch = state.get("epoch")
        if key == "num_replicas" and (other_plan or _differs_beyond_ranks(saved, config)):
            continue  # (s32-user: "resume on 4 ranks" was said of a state of other options)
        if saved[key] != value and key == "num_replicas" and isinstance(epoch, int):
            same_plan = _same_but_ranks(saved, config, ranked=ranked)
            between = "; one saved between epochs would load on any number" if same_plan else ""
            how = (
                f"An epoch's plan splits every step over the ranks, so a state resumes its epoch "
                "only on as many ranks as saved it (the state holds no rank: any rank's state "
                f"fits every rank{between}). Resume "
                f"on {saved[key]!r} rank(s) to finish epoch {epoch} "
                f"exactly, or {_go_on(state, f'on {value!r} rank(s)', again=True)}"
                if epochs
                else "The evaluation's plan splits every step over the ranks, so a state resumes "
                f"it only on as many ranks as saved it. Resume on {saved[key]!r} rank(s), or "
                f"evaluate again from the start on {value!r} rank(s) (no load_state_dict)"
            )
            raise ValueError(
                f"state is from a different configuration: num_replicas={saved[key]!r} in the "
                f"state but num_replicas={value!r} in this sampler. {how}"
            )
        if saved[key] != value:
            hint = _CONFIG_HINTS.get(key, "")
            if ranked and key in _PLAN_KEYS:  # (the ranks' shards decide them too)
                hint = f"{hint[:-1]}, or the data is cut into other shards)"
            # (s21: a job whose dataset grew, or whose batch_size changed, was only told to build
            # the sampler as before; it cannot, and the way on is the next epoch)
            on = (
                _go_on(state, "with the changed sampler")
                if epochs and isinstance(epoch, int) and not isinstance(epoch, bool)
                else "start again with the changed sampler (no load_state_dict)"
            )
            raise ValueError(
                f"state is from a different configuration: {key}={saved[key]!r} in the state "
                f"but {key}={value!r} in this sampler{hint}; build the sampler exactly as when "
                f"the state was saved to resume it exactly, or {on}"
            )
    if not plans:
        _check_global(state, saved, config, owner, plans=False)
    epoch, pos = state["epoch"], state["batches_yielded"]
    for name, val in (("epoch", epoch), ("batches_yielded", pos)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ValueError(f"state[{name!r}] must be an int >= 0, got {val!r}")
    if pos > config["num_batches"]:
        raise ValueError(
            f"state['batches_yielded']={pos} exceeds the epoch's {config['num_batches']} batches"
        )
    _warn_unknown_keys(state, config, owner)
    return epoch, pos


def _differs_beyond_ranks(saved: Mapping[str, Any], config: Mapping[str, Any]) -> bool:
    """Whether an option or the data differ too, beside the ranks: a key other than what the
    ranks alone decide (:func:`_rank_free`) and the plan digest that the state has with another
    value. Its own error then names it: the ranks' error said to resume on the saved ranks,
    which would refuse the state for that key next."""
    one_rank = 1 in (saved.get("num_replicas"), config.get("num_replicas"))
    theirs, mine = (_rank_free(c, one_rank=one_rank, ranked=True) for c in (saved, config))
    return any(k in theirs and theirs[k] != v for k, v in mine.items())


def _plain_ints(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with a numpy integer ``epoch`` or ``batches_yielded`` as an int (a copy; the
    caller's dict is left alone): a state rebuilt from arrays or a checkpoint format that keeps
    numpy scalars held ``np.int64(3)``, refused as "must be an int" (s29-user). The value is
    the same integer; a bool or a float is still refused."""
    plain = {
        key: int(state[key])
        for key in ("epoch", "batches_yielded")
        if isinstance(state.get(key), np.integer)
    }
    return {**state, **plain} if plain else state


#: The configuration keys that change with the number of ranks alone (a rank's batches).
_RANK_KEYS = frozenset({"num_replicas", "num_batches"})


def _boundary_on_other_ranks(
    state: dict[str, Any], saved: dict[str, Any], config: dict[str, Any], *, ranked: bool = False
) -> tuple[int, int] | None:
    """NOTE [ An epoch boundary on another number of ranks ]

    A state resumes its epoch only on as many ranks as saved it: the epoch's plan splits every
    step over the ranks, and the position counts this split's steps. A state saved at an epoch
    boundary has no position to carry, though: before the epoch's first batch (``set_epoch(e)``
    then ``state_dict()``, the usual checkpoint at an epoch's start) the whole epoch is still to
    run, and after its last batch none of it is. Such a state was refused on another number of
    ranks (s29-user), so an elastic job (``torchrun --nnodes=1:4``) that restarted on fewer
    nodes from a checkpoint taken between epochs could not load it, and its way on was to
    bypass ``load_state_dict``. It now loads when every other key of the configuration agrees
    (seed, options, samples and the plan's digest, less what the ranks alone decide:
    :func:`_same_but_ranks`; the same epochs, split over other ranks):
    the epoch from its start, or the epoch as finished (its next pass moves to the next epoch,
    as on the ranks that saved it). A state within an epoch is refused as before. Returns
    ``(epoch, position)`` for this sampler, or ``None`` where the rule does not apply.

    A ``ShardedSampler`` (``ranked``) plans each rank's own shard, and its plan digest hashes
    the ranks' table of samples per bucket, which other ranks always change (their shards are
    other files): there it is not compared (s30-scale: its state saved between epochs on 8 ranks
    was refused on 4 and on 1, though the docs resume it "as with BucketSampler"). What is,
    besides the seed and the shuffle, is its ``config["global"]``, the global data and the
    plans its options make of it, on any number of ranks (:func:`_check_global`; s31: a state
    of other data loaded there silently). Its digest changes as much on as many ranks over the
    same data cut into other shards (files reassigned at a restart): such a state between
    epochs loads there too, on the same check, where it records its plans (s32: it was refused
    by ``plan_digest`` on 4 ranks, and loaded on 3); one without them (saved before s32) is
    still refused there, as before."""
    if saved.get("num_replicas") == config.get("num_replicas"):
        if not ranked or saved.get("plan_digest") == config.get("plan_digest"):
            return None
        recorded = saved.get("global")
        if not isinstance(recorded, dict) or "plans" not in recorded:
            return None
    if not _same_but_ranks(saved, config, ranked=ranked):
        return None
    epoch, pos, total = state["epoch"], state["batches_yielded"], saved.get("num_batches")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (epoch, pos, total)):
        return None
    if epoch < 0 or not 0 <= pos <= total:
        return None
    if pos == 0:
        return epoch, 0
    if pos == total:
        return epoch, int(config["num_batches"])
    return None


def _same_but_ranks(
    saved: Mapping[str, Any], config: Mapping[str, Any], *, ranked: bool = False
) -> bool:
    """Whether a state's ``saved`` configuration and this sampler's ``config`` differ only by
    what the number of ranks alone decides: :data:`_RANK_KEYS`; the plan digest's fill version
    (``/fill=N``: whether a small bucket or row length fills its step with shorter samples, and
    how, depends on the batches per step, so on the ranks); and, where one of the two runs on a
    single rank, ``PackSampler``'s ``balance`` (it resolves to ``False`` there) with the
    balanced plan's work version in the digest (``/wN``). s29-rev: a ``last_batch="fill"``
    sampler's state saved between epochs on 1 rank was refused on 2 (its digest gained
    ``/fill=2``), and a ``balance=True`` one's on 3 ranks refused on 1."""
    one_rank = 1 in (saved.get("num_replicas"), config.get("num_replicas"))
    theirs, mine = (_rank_free(c, one_rank=one_rank, ranked=ranked) for c in (saved, config))
    return all(theirs.get(k, k) == v for k, v in mine.items())


def _rank_free(c: Mapping[str, Any], *, one_rank: bool, ranked: bool) -> dict[str, Any]:
    """A configuration less what the number of ranks alone decides (:func:`_same_but_ranks`);
    ``ranked``: less the plan digest too."""
    out = {k: v for k, v in c.items() if k not in _RANK_KEYS and k not in _LATER_KEYS}
    if ranked:  # (the digest hashes the ranks' shards: _boundary_on_other_ranks)
        out.pop("plan_digest", None)
    if isinstance(out.get("plan_digest"), str):
        out["plan_digest"] = re.sub(r"/fill=\d+", "", out["plan_digest"])
    if one_rank and "balance" in out:
        del out["balance"]
        if isinstance(out.get("plan_digest"), str):
            out["plan_digest"] = re.sub(r"/w\d+", "", out["plan_digest"])
    return out


_STATE_KEYS = frozenset({"version", "sampler", "epoch", "batches_yielded", "config"})
#: Config entries a state saved before they were recorded lacks: such a state loads as it did,
#: unchecked on them (:func:`_check_global`).
_LATER_KEYS = frozenset({"global"})


def _check_global(
    state: dict[str, Any],
    saved: Mapping[str, Any],
    config: Mapping[str, Any],
    owner: str,
    *,
    plans: bool,
) -> None:
    """Refuse a state whose ``config["global"]`` (a ``ShardedSampler``'s global data and the
    plans its options make of it: NOTE [ A sharded state names its global data ] in
    :mod:`bucketloader.sharded`) differs from this sampler's (:func:`_global_change`), naming
    what differs and the way on. A state without it (saved before s31) is not checked."""
    theirs = saved.get("global")
    if theirs is None:
        return
    if not isinstance(theirs, dict):
        raise ValueError(
            f"state['config']['global'] must be a dict, got {theirs!r}; pass a dict from "
            f"{owner}.state_dict()"
        )
    change = _global_change(theirs, config.get("global"), plans=plans)
    if change is None:
        return
    mine = config["global"]
    n_saved, n_now = theirs.get("num_samples"), mine["num_samples"]
    counted = isinstance(n_saved, int) and not isinstance(n_saved, bool)
    if change == "num_samples":
        what = (
            "other data: its global length histogram (every rank's shard together) holds "
            + (f"{n_saved:,} samples" if counted else f"num_samples={n_saved!r}")
            + f", this {owner}'s {n_now:,}"
        )
        build = "over the data the state was saved with (every rank's shard)"
    elif change == "histogram":
        what = (
            f"other data: its global length histogram (every rank's shard together) "
            f"holds {n_now:,} samples, as this {owner}'s does, but of other lengths"
        )
        build = "over the data the state was saved with (every rank's shard)"
    elif change == "options":  # (a state of s31: its options as spelled, _global_change)
        what = (
            "other options (a state of bucketloader before s32, which recorded the options "
            "as spelled, not the plan they make)"
        )
        build = (
            "with the options the state was saved with, spelled as then (num_buckets / "
            "strategy / boundaries, batch_size / max_tokens, defer, exchange, last_batch)"
        )
    else:
        what = (
            "other options: the plan they make of the same data (its boundaries, the batch "
            "sizes of batch_size / max_tokens, defer, exchange or last_batch) is not one this "
            "sampler makes"
        )
        build = (
            "with the options the state was saved with (or with boundaries= the boundaries "
            "its sampler planned with)"
        )
    pos, total = state.get("batches_yielded"), saved.get("num_batches")
    ranks = (
        "on any number of ranks (it was saved between epochs)"
        if pos == 0 or (pos == total and isinstance(pos, int))
        else f"on {saved.get('num_replicas')!r} rank(s), as saved (it was saved within its epoch)"
    )
    raise ValueError(
        f"state is from {what} (state['config']['global']); build the {owner} {build}, "
        f"{ranks}, to resume it, or {_go_on(state, 'with the changed sampler')}"
    )


def _global_change(theirs: Any, mine: Any, *, plans: bool) -> str | None:
    """Which entry of a saved ``config["global"]`` (``theirs``) refuses it against this
    sampler's (``mine``): ``"num_samples"`` or ``"histogram"`` (other data, always), ``"plans"``
    (with ``plans``, where ``plan_digest`` cannot decide, :func:`_plans_compared`: the saved
    and the current plans share none; ``"options"`` for a state of s31, below; NOTE [ A
    sharded state names its global data ] in :mod:`bucketloader.sharded`), or ``None``.
    Elsewhere ``plan_digest`` compares the plan itself. A state without the entry (saved
    before s31) is not checked on it; one of s31, with its ``"options"`` (the options as
    spelled) and no ``"plans"``, has them compared with this sampler's spelled alike where
    ``mine`` holds them (``ShardedSampler._config_against``).

    Example:
        >>> mine = {"num_samples": 9, "histogram": "ab", "plans": ["p1", "p2"]}
        >>> _global_change(mine | {"plans": ["p2"]}, mine, plans=True) is None
        True
        >>> _global_change(mine | {"plans": ["p3"]}, mine, plans=True)
        'plans'
        >>> _global_change(mine | {"plans": ["p3"]}, mine, plans=False) is None
        True
        >>> _global_change({"num_samples": 9, "histogram": "cd", "options": "x"}, mine, plans=True)
        'histogram'
    """
    if not isinstance(theirs, Mapping) or not isinstance(mine, Mapping) or theirs == mine:
        return None
    for key in ("num_samples", "histogram"):
        if theirs.get(key) != mine.get(key):
            return key
    saved = theirs.get("plans")
    if plans and saved is None and "options" in theirs and "options" in mine:
        # (s31's spelled options, compared as s31 did: ShardedSampler._config_against)
        return None if theirs["options"] == mine["options"] else "options"
    if not plans or saved is None:
        return None
    if isinstance(saved, list) and set(map(str, saved)) & set(mine.get("plans", ())):
        return None
    return "plans"


def _plans_compared(
    saved: Mapping[str, Any], config: Mapping[str, Any], *, ranked: bool = True
) -> bool:
    """Whether ``plan_digest`` cannot decide whether a state's plan is this sampler's, so
    ``config["global"]["plans"]`` does (:func:`_global_change`): on another number of ranks,
    and for a ``ShardedSampler`` (``ranked``: its digest hashes the ranks' shards) whose digest
    differs, since the same data cut into other shards changes it too."""
    if saved.get("num_replicas") != config.get("num_replicas"):
        return True
    return ranked and saved.get("plan_digest") != config.get("plan_digest")


#: What a config entry's mismatch usually means (num_batches: the argument the user changed).
_CONFIG_HINTS = {
    "plan_digest": " (the lengths, boundaries, row lengths, batch sizes or policies differ)",
    "num_batches": " (batch_size, max_tokens, num_buckets, the lengths or the policies differ)",
    "num_samples": " (the dataset has another number of samples)",
    "global": " (every rank's shard together, or the plan the options make of it, differ)",
}


def config_changes(saved: Mapping[str, Any], config: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What a state's saved ``config`` holds with another value than ``config`` (a sampler's
    ``_config()``): ``(key, saved value, this value, what it usually means)`` per entry, in
    ``config``'s order, so the first is the one :func:`check_state` names. For a caller that
    phrases a refusal of its own (``BucketTrainer`` at ``resume_from_checkpoint``).

    Example:
        >>> config_changes({"seed": 0, "num_samples": 90}, {"seed": 0, "num_samples": 91})
        [('num_samples', 90, 91, ' (the dataset has another number of samples)')]
    """
    plans = _plans_compared(saved, config)  # (only a ShardedSampler's config has "global")
    return [
        (key, saved[key], value, _CONFIG_HINTS.get(key, ""))
        for key, value in config.items()
        if key in saved
        and saved[key] != value
        # (a ShardedSampler's: what refuses it, not how it is written)
        and (key != "global" or _global_change(saved[key], value, plans=plans))
    ]


#: Config entries only a WeightedBucketSampler writes: a sampler without them cannot resume its
#: epochs (they batch the draws, in other batches), though every key they share may match.
_DRAW_KEYS = ("sample_weights", "draws", "replacement")
#: Config entries that follow from the plan itself (a re-solved joint plan changes them).
_PLAN_KEYS = frozenset({"plan_digest", "num_batches"})


def _warn_unknown_keys(state: dict[str, Any], config: dict[str, Any], owner: str) -> None:
    """Keys this sampler neither writes nor reads are kept out of the resume but named once:
    refusing them would break callers that store their own keys beside ours (torch's
    ``Module.load_state_dict`` names unexpected keys; torchdata's and Lhotse's samplers ignore
    them silently), and ignoring them silently hides a state from another tool or a typo."""
    extra = sorted(map(str, set(state) - _STATE_KEYS))
    extra += sorted(f"config[{k!r}]" for k in map(str, set(state["config"]) - set(config)))
    if extra:
        warnings.warn(
            f"{owner}.load_state_dict ignores keys it does not know: {', '.join(extra)} (a state "
            f"from {owner}.state_dict() has {sorted(_STATE_KEYS)}); they are not used to resume",
            UserWarning,
            stacklevel=4,
        )


#: State validation every planned producer shares (EvalSampler's too).
check_state = _check_state
