"""BucketSampler: a static-shape batch sampler, a thin stateful wrapper over the pure epoch plan.

NOTE [ Resuming and DataLoader prefetch ]
``state_dict()`` records the epoch and how many batches ``__iter__`` has handed out in it.
A ``DataLoader`` pulls batches from its batch sampler ahead of the training loop (up to
``num_workers * prefetch_factor`` batches, or one with ``num_workers=0``), so at checkpoint time the
sampler is ahead of what the model has consumed. Pass the count your loop consumed,
``sampler.state_dict(batches_consumed=step_in_epoch)``, to resume exactly after the last trained
batch. Resuming recomputes the epoch plan from ``(seed, epoch)`` and skips: O(plan), no data
replay. The state holds no rank, so a checkpoint saved by rank 0 restores every rank.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from bucketloader._sampler_groups import GroupedDataset, concat_groups
from bucketloader._sampler_state import check_state, make_state
from bucketloader._validation import check_int
from bucketloader.plan import BucketSpec, EpochPlan, ShapeTable, plan_epoch, shape_table

__all__ = ["BucketSampler", "GroupedDataset"]

_SPEC_OPTIONS = ("num_buckets", "strategy", "batch_size", "max_tokens", "last_batch", "cache")


class BucketSampler(Sampler[list[int]]):
    """Batches of sample indices whose padded shapes are exactly :attr:`shapes`.

    Each sample belongs to a bucket (boundaries from
    :func:`~bucketloader.solve.compute_boundaries`), bucket ``i`` has one batch shape
    ``(B_i, b_i)`` with ``B_i = batch_size`` or ``max_tokens // b_i``, batches are shuffled within
    buckets and interleaved so buckets drain evenly. Use it as
    ``DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator())``.

    Args:
        lengths: per-sample lengths ``(N,)``, several inputs ``(N, D)`` or a mapping
            name → lengths; or a :class:`~bucketloader.plan.BucketSpec` for everything beyond the
            common options (precomputed boundaries, per-input strategies, ``max_shapes``,
            ``groups``, ``size``, ``batch_multiple_of``), in which case the shape options and
            ``cache`` must be left unset.
        num_buckets: buckets per input (default 8).
        strategy: boundary strategy name or callable (default ``"optimal"``).
        batch_size: fixed batch size; or
        max_tokens: padded elements per batch, ``B_i = max_tokens // b_i``.
        last_batch: the last, partial batch of each bucket: ``"pad"`` (default; the collator pads
            rows, masked), ``"fill"`` (topped up with random repeats from the bucket), ``"drop"``
            or ``"keep"`` (smaller batch, an extra shape). Across ranks see the module
            :mod:`bucketloader.plan`, NOTE [ last_batch and replicas ].
        shuffle: shuffle within buckets and the bucket interleave; ``False`` is deterministic.
        seed: randomness comes only from ``SeedSequence([seed, epoch])``; same on every rank.
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0).
        cache: a :class:`~bucketloader.cache.BucketCache`, ``True`` for the default one, or
            ``None``: boundaries are then solved once and reused across runs and ranks (with
            ``torch.distributed`` initialised, rank 0 solves and the others receive its answer).

    Every rank computes the same global plan and takes its slot of every global step: all ranks
    get the same number of batches and, at each step, batches of the same shape. To make that
    hold, each bucket ends with one last step of ``num_replicas`` batches holding what is left
    (``q`` samples, fewer than ``num_replicas * B_i``): ``"pad"`` drops nothing and repeats a
    sample only on ranks that would otherwise get none (``num_replicas - q`` repeats when
    ``q < num_replicas``); ``"fill"`` repeats ``num_replicas * B_i - q`` samples of the bucket;
    ``"keep"`` repeats at most ``num_replicas - 1``; ``"drop"`` drops the ``q`` samples (a
    different random set each epoch). With one replica only ``"fill"`` repeats and only
    ``"drop"`` drops.

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
        num_buckets: Any = None,
        strategy: Any = None,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        last_batch: str | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        cache: Any = None,
    ) -> None:
        given = {
            "num_buckets": num_buckets,
            "strategy": strategy,
            "batch_size": batch_size,
            "max_tokens": max_tokens,
            "last_batch": last_batch,
            "cache": cache,
        }
        if isinstance(lengths, BucketSpec):
            extra = [k for k in _SPEC_OPTIONS if given[k] is not None]
            if extra:
                raise ValueError(
                    f"{extra[0]} cannot be combined with a BucketSpec (it already fixes the "
                    f"shapes); pass {extra[0]} to BucketSpec.build instead"
                )
            self.spec = lengths
        else:
            given["last_batch"] = last_batch or "pad"
            self.spec = BucketSpec.build(lengths, **given)
        if not isinstance(shuffle, (bool, np.bool_)):
            raise TypeError(f"shuffle must be a bool, got shuffle={shuffle!r}")
        self.shuffle = bool(shuffle)
        self.seed = check_int("seed", seed, minimum=0)
        world, me = _dist_defaults()
        self.num_replicas = check_int(
            "num_replicas", world if num_replicas is None else num_replicas, minimum=1
        )
        rank = me if rank is None else rank
        rank = check_int("rank", rank)
        if not 0 <= rank < self.num_replicas:
            raise ValueError(
                f"rank must be an int >= 0 and < num_replicas={self.num_replicas}, got "
                f"rank={rank}; give each process its own rank in 0..{self.num_replicas - 1}"
            )
        self.rank = rank
        self.epoch = 0
        self._start = 0
        self._yielded = 0
        self._plan: tuple[int, EpochPlan] | None = None
        self.dataset: GroupedDataset | None = None
        self.group_key: str | None = None

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def shape_table(self) -> ShapeTable:
        """The promised shapes, small and picklable (what the collator keeps)."""
        return shape_table(self.spec, self.num_replicas)

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape ``(B, L_1, ..., L_D)`` an epoch can produce, sorted (a promise)."""
        return list(self.shape_table.shapes)

    @property
    def boundaries(self) -> Any:
        """An array for one input; ``{name: array}`` for several; with groups ``{group: that}``."""
        per_group = [
            b[0] if len(b) == 1 else dict(zip(self.spec.input_names, b, strict=True))
            for b in self.spec.boundaries
        ]
        if self.spec.groups is None:
            return per_group[0]
        return dict(zip(self.spec.group_values, per_group, strict=True))

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
        """``PadCollator.from_sampler(self, **kwargs)``: pads every batch to its planned shape."""
        from bucketloader.collate import PadCollator

        if self.group_key is not None:
            kwargs.setdefault("group_key", self.group_key)
        return PadCollator.from_sampler(self, **kwargs)

    # -- the torch Sampler contract -----------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    @functools.cached_property
    def _len(self) -> int:
        from bucketloader.plan import _num_steps

        return int(_num_steps(self.spec, self.num_replicas).sum())

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s plan next (a pending resume position in that epoch is kept)."""
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch != self.epoch:
            self.epoch, self._start, self._yielded = epoch, 0, 0

    def plan(self, epoch: int | None = None) -> EpochPlan:
        """This rank's :class:`~bucketloader.plan.EpochPlan` (cached for the current epoch)."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1]
        plan = plan_epoch(
            self.spec,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            num_replicas=self.num_replicas,
            rank=self.rank,
        )
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

    # -- resumption ---------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "last_batch": self.last_batch,
            "num_samples": int(self.spec.cell_of_sample.size),
            "num_batches": len(self),
            "plan_digest": self.spec.digest,
        }

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
        return make_state(self.epoch, pos, self._config())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches of the saved epoch.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values.
        """
        epoch, pos = check_state(state, self._config())
        self.epoch, self._start, self._yielded = epoch, pos, pos

    # -- per-dataset groups -------------------------------------------------------------------
    @classmethod
    def from_concat_dataset(
        cls,
        dataset: Any,
        lengths_per_dataset: Sequence[Any],
        *,
        group_key: str = "dataset",
        **options: Any,
    ) -> BucketSampler:
        """A sampler bucketing each dataset of a ``ConcatDataset`` separately.

        Boundaries are fitted per dataset and batches never mix datasets. The returned sampler's
        ``.dataset`` wraps ``dataset`` so that every (dict) sample carries its dataset index under
        ``group_key``, which the collator reads (``sampler.collator()`` passes ``group_key``).

        Args:
            dataset: a ``torch.utils.data.ConcatDataset`` (or a list of datasets).
            lengths_per_dataset: the lengths of each dataset, in order.
            group_key: the field added to each sample.
            **options: :meth:`BucketSpec.build` options (``num_buckets``, ``max_tokens``, ...) and
                the sampler's ``shuffle``, ``seed``, ``num_replicas``, ``rank``.

        Example:
            >>> from torch.utils.data import ConcatDataset
            >>> a = [{"x": [1] * n} for n in (2, 3, 9)]
            >>> b = [{"x": [1] * n} for n in (4, 4)]
            >>> s = BucketSampler.from_concat_dataset(ConcatDataset([a, b]), [[2, 3, 9], [4, 4]],
            ...                                       num_buckets=2, batch_size=2, shuffle=False)
            >>> list(s), s.dataset[3]
            ([[0, 1], [2], [3, 4]], {'x': [1, 1, 1, 1], 'dataset': 1})
        """
        concat, lengths, groups = concat_groups(dataset, lengths_per_dataset)
        sampler_keys = ("shuffle", "seed", "num_replicas", "rank")
        sampler_opts = {k: options.pop(k) for k in sampler_keys if k in options}
        spec = BucketSpec.build(lengths, groups=groups, **options)
        sampler = cls(spec, **sampler_opts)
        sampler.dataset = GroupedDataset(concat, groups, key=group_key)
        sampler.group_key = group_key
        return sampler


def _dist_defaults() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
