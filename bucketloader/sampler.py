"""BucketSampler: a static-shape batch sampler, a thin stateful wrapper over the pure epoch plan.

NOTE [ Resuming and DataLoader prefetch ]
``state_dict()`` records the epoch and how many batches ``__iter__`` has handed out in it.
A ``DataLoader`` pulls batches from its batch sampler ahead of the training loop (up to
``num_workers * prefetch_factor`` batches, or one with ``num_workers=0``), so at checkpoint time the
sampler is ahead of what the model has consumed. Pass the count your loop consumed,
``sampler.state_dict(batches_consumed=step_in_epoch)``, to resume exactly after the last trained
batch. Resuming recomputes the epoch plan from ``(seed, epoch)`` and skips to the position: O(plan)
(about 0.2 s for a million samples), with no data replayed. The state holds no rank, so a
checkpoint saved by rank 0 restores every rank.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import ConcatDataset, Sampler

from bucketloader._ranks import resolve_ranks
from bucketloader._validation import check_bool, check_int
from bucketloader.plan import BucketSpec, EpochPlan, SamplingReport, ShapeTable, plan_epoch
from bucketloader.plan.epoch import check_weights, resolve_weights
from bucketloader.plan.report import plan_report

__all__ = ["BucketSampler", "EpochSampler", "GroupedDataset", "spec_or_build"]

#: Warn when a plan leaves out more than this fraction of the samples every epoch.
LOSS_WARNING = 0.01


def spec_or_build(lengths: Any, spec_options: dict[str, Any], spec_type: Any) -> Any:
    """``lengths`` itself when it is a ready ``spec_type`` (then no shape option may be given),
    else ``spec_type.build(lengths, **spec_options)``: the split between what shapes the
    batches (the spec) and how an epoch is iterated (the sampler)."""
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

    def _make_plan(self, epoch: int) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _config(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

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

    def plan(self, epoch: int | None = None) -> Any:
        """This rank's plan of ``epoch`` (default: the current one; cached)."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1]
        plan = self._make_plan(epoch)
        self._plan = (epoch, plan)
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        start, self._start = self._start, 0
        plan = self.plan()
        indices, offsets = plan.indices, plan.offsets
        self._yielded = start
        for i in range(start, len(plan)):
            self._yielded = i + 1
            yield indices[offsets[i] : offsets[i + 1]].tolist()

    def state_dict(self, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Small JSON-serialisable state: epoch, position and the configuration it belongs to.

        Args:
            batches_consumed: batches of the current epoch your loop has consumed, when it lags
                the sampler (DataLoader prefetch, see NOTE [ Resuming and DataLoader prefetch ]);
                default: the batches ``__iter__`` handed out.
        """
        pos = self._yielded
        if batches_consumed is not None:
            pos = check_int("batches_consumed", batches_consumed, minimum=0, maximum=len(self))
        return {
            "version": _STATE_VERSION,
            "epoch": int(self.epoch),
            "batches_yielded": int(pos),
            "config": dict(self._config()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches of the saved epoch.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values.
        """
        epoch, pos = _check_state(state, self._config(), type(self).__name__)
        self.epoch, self._start, self._yielded = epoch, pos, pos


class BucketSampler(EpochSampler):
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
        rank: this rank (default: the ``torch.distributed`` rank, else 0).
        weights: sampling weights per dataset, with ``groups`` (a sequence in group-id order or a
            mapping group id → weight): each epoch keeps its length and gives each dataset a
            share of the batches proportional to its weight, cycling through a small dataset's
            data and a large one's in turn (NOTE [ Weighted epochs ] in
            :mod:`bucketloader.plan.epoch`).
        longest_first: start every epoch with a batch of the largest planned shape, so an
            out-of-memory shows at step 0 (NOTE [ Longest batch first ]).
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
    ``q < num_replicas``); ``"fill"`` repeats ``num_replicas * B_i - q`` samples of the bucket;
    ``"keep"`` repeats at most ``num_replicas - 1``; ``"drop"`` drops the ``q`` samples (a
    different random set each epoch). With one replica only ``"fill"`` repeats and only
    ``"drop"`` drops (NOTE [ last_batch and replicas ] in :mod:`bucketloader.plan.epoch`).

    Example:
        >>> sampler = BucketSampler([3, 4, 9, 10, 10], num_buckets=2, batch_size=2, seed=1)
        >>> sampler.shapes, len(sampler)
        ([(2, 4), (2, 10)], 3)
        >>> sorted(i for batch in sampler for i in batch)
        [0, 1, 2, 3, 4]
    """

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
        **spec_options: Any,
    ) -> None:
        given: BucketSpec = spec_or_build(lengths, spec_options, BucketSpec)
        super().__init__(shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
        # max_tokens: each bucket's batches hold its samples evenly (NOTE [ Even batches ])
        self.spec: BucketSpec = given.for_replicas(self.num_replicas)
        self._given = given
        self.weights = resolve_weights(self.spec, weights)
        if self.weights is not None:
            check_weights(self.spec, self.weights, self.num_replicas)  # at construction
        self.longest_first = check_bool("longest_first", longest_first)
        self._warn_losses()

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes, small and picklable (what the collator keeps)."""
        return self.spec.shape_table(self.num_replicas)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape ``(B, L_1, ..., L_D)`` an epoch can produce, sorted (a promise)."""
        return list(self.shape_table.shapes)

    @property
    def boundaries(self) -> Any:
        """An array for one input; ``{name: array}`` for several; with groups ``{group: that}``."""
        return self.spec.user_boundaries

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

    def collator(self, **kwargs: Any) -> Any:
        """``PadCollator(self.shape_table, **kwargs)``: pads every batch to its planned shape."""
        from bucketloader.collate import PadCollator

        return PadCollator(self.shape_table, **kwargs)

    # -- the epoch plan (EpochSampler does the rest) ------------------------------------------
    def _make_plan(self, epoch: int) -> EpochPlan:
        """This rank's :class:`~bucketloader.plan.EpochPlan` of ``epoch`` (see :meth:`plan`)."""
        return plan_epoch(
            self.spec,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            num_replicas=self.num_replicas,
            rank=self.rank,
            weights=self.weights,
            longest_first=self.longest_first,
        )

    def report(self, epoch: int | None = None) -> SamplingReport:
        """What an epoch does with the data, exactly (NOTE [ Where the report's numbers come
        from ] in :mod:`bucketloader.plan.report`): samples seen, filtered, dropped, repeated,
        padding per bucket over all ranks, and this rank's remaining batches and samples.

        Args:
            epoch: the epoch to report (default: the current one, with the current position).
        """
        current = epoch is None or epoch == self.epoch
        return plan_report(
            self.spec,
            seed=self.seed,
            epoch=self.epoch if epoch is None else check_int("epoch", epoch, minimum=0),
            shuffle=self.shuffle,
            num_replicas=self.num_replicas,
            rank=self.rank,
            weights=self.weights,
            longest_first=self.longest_first,
            batches_done=max(self._yielded, self._start) if current else 0,
        )

    def _warn_losses(self) -> None:
        """NOTE [ Warning about silent losses ]."""
        spec = self.spec
        n = int(spec.cell_of_sample.size)
        words = {"too_short": "min_length", "too_long": "max_length", "oversize": "oversize"}
        reasons = {
            f"{words[k]} ({k.replace('_', ' ')})": v
            for k, v in (spec.filtered or {}).items()
            if v and k in words
        }
        if spec.last_batch == "drop":
            _, q = spec.cell_steps(self.num_replicas)
            if int(q.sum()):
                reasons["last_batch='drop'"] = int(q.sum())
        lost = sum(reasons.values())
        if lost > LOSS_WARNING * n:
            listed = ", ".join(f"{v:,} by {k}" for k, v in reasons.items())
            hint = (
                "; last_batch='pad' keeps every sample at the planned shapes"
                if "last_batch='drop'" in reasons
                else ""
            )
            warnings.warn(
                f"this BucketSampler leaves out {lost:,} of {n:,} samples ({lost / n:.1%}) "
                f"every epoch on {self.num_replicas} rank(s): {listed}{hint}",
                UserWarning,
                stacklevel=3,
            )

    # -- resumption ---------------------------------------------------------------------------
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches of the saved epoch.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values;
        a state saved before even batches (NOTE [ Even batches ]) is refused with the option that
        resumes it exactly.
        """
        saved = state.get("config") if isinstance(state, dict) else None
        if (
            isinstance(saved, dict)
            and self.spec is not self._given
            and saved.get("plan_digest") == self._given.digest
        ):
            budget = self.spec.rule.budget if self.spec.rule is not None else None
            fix = dataclasses.replace(budget, balance=False) if budget is not None else None
            raise ValueError(
                "state was saved by a sampler that filled every batch to max_tokens // size rows "
                "(bucketloader 0.2, or TokenBudget(balance=False)); this sampler spreads each "
                "bucket's samples evenly over the same steps (fewer filler rows, other batch "
                f"shapes). Build it with max_tokens={fix!r} to resume this state exactly"
            )
        super().load_state_dict(state)

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
            "plan_digest": self.spec.digest,
        }


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
        super().__init__(list(datasets))
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
        return {**sample, self.key: int(self.groups[index])}


_STATE_VERSION = 1


def _check_state(state: Any, config: dict[str, Any], owner: str) -> tuple[int, int]:
    """Validate ``state`` against this sampler's ``config``; return ``(epoch, batches_yielded)``.

    Every mismatch names the key, the saved value and the current one.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from {owner}.state_dict(), got {state!r}")
    missing = [k for k in ("version", "epoch", "batches_yielded", "config") if k not in state]
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
    for key, value in config.items():
        if key not in saved:
            raise ValueError(f"state['config'] has no {key!r}; it was saved by another version")
        if saved[key] != value:
            hint = (
                " (the lengths, boundaries, row lengths, batch sizes or policies differ)"
                if key == "plan_digest"
                else ""
            )
            raise ValueError(
                f"state is from a different configuration: {key}={saved[key]!r} in the state "
                f"but {key}={value!r} in this sampler{hint}; build the sampler exactly as when "
                "the state was saved"
            )
    epoch, pos = state["epoch"], state["batches_yielded"]
    for name, val in (("epoch", epoch), ("batches_yielded", pos)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ValueError(f"state[{name!r}] must be an int >= 0, got {val!r}")
    if pos > config["num_batches"]:
        raise ValueError(
            f"state['batches_yielded']={pos} exceeds the epoch's {config['num_batches']} batches"
        )
    return epoch, pos
