"""PackSampler: a batch sampler of packed rows, a thin stateful wrapper over the pure epoch plan.

Resuming works as for :class:`~bucketloader.BucketSampler` (NOTE [ Resuming and DataLoader
prefetch ] in :mod:`bucketloader.sampler`): the state holds the epoch and the batches handed out;
``load_state_dict`` recomputes the epoch's plan from ``(seed, epoch)`` and skips to the position,
so nothing is replayed; pass ``state_dict(batches_consumed=...)`` when a DataLoader prefetches.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from bucketloader._validation import check_bool, check_int
from bucketloader.pack.epoch import PackPlan, plan_pack_epoch
from bucketloader.pack.spec import PackSpec, PackTable

__all__ = ["PackSampler"]

_STATE_VERSION = 1


class PackSampler(Sampler[list[int]]):
    """Batches of whole documents packed into rows, whose shapes are exactly :attr:`shapes`.

    Every document goes, whole, into a row of ``row_length`` tokens shared with other documents
    (near-optimal bin packing, NOTE [ Packing a length histogram ] in
    :mod:`bucketloader.pack._bins`); ``B`` rows make a batch of shape ``(B, L)``. Each batch is
    the list of its documents' indices, row after row; the collator
    (:meth:`collator`, :class:`~bucketloader.pack.PackCollator`) lays them out again and adds
    labels, restarting positions and the document index that keeps attention within documents.
    Use it as ``DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator())``.

    The options split in two, as for :class:`~bucketloader.BucketSampler`. *What shapes the
    batches* (``row_length``, ``batch_size`` or ``max_tokens``, ``overflow``, ``last_batch``) are
    :meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` options, passed here as keywords or
    fixed in a ready ``PackSpec``. *How an epoch is iterated* are this class's own arguments.

    Args:
        lengths: tokens per document ``(N,)``, or a :class:`~bucketloader.pack.PackSpec`.
        shuffle: deal documents into rows and order the rows at random each epoch; ``False`` is
            deterministic.
        seed: randomness comes only from ``SeedSequence([seed, epoch])``; same on every rank.
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0).
        **spec_options: :meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` options:
            ``row_length`` (required), ``batch_size`` or ``max_tokens``, ``overflow``
            (``"error"``, ``"drop"``, ``"truncate"``) and ``last_batch`` (``"pad"``,
            ``"fill"``, ``"drop"``).

    Every rank computes the same global plan and takes its slot of every global step, so all
    ranks get the same number of batches and, at each step, batches of the same shape (NOTE
    [ Packed epochs ] in :mod:`bucketloader.pack.epoch`).

    Example:
        >>> sampler = PackSampler([5, 3, 2, 5, 3, 2, 8], row_length=8, batch_size=2, seed=1)
        >>> sampler.shapes, len(sampler), sampler.spec.num_rows
        ([(2, 8)], 2, 4)
        >>> sorted(i for batch in sampler for i in batch)
        [0, 1, 2, 3, 4, 5, 6]
    """

    def __init__(
        self,
        lengths: Any,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        **spec_options: Any,
    ) -> None:
        if isinstance(lengths, PackSpec):
            if spec_options:
                name = sorted(spec_options)[0]
                raise TypeError(
                    f"{name} cannot be combined with a PackSpec (it already fixes the shapes); "
                    f"pass {name} to PackSpec.build instead"
                )
            self.spec = lengths
        else:
            if "row_length" not in spec_options:
                raise TypeError(
                    "PackSampler needs row_length=<tokens per row> (or a PackSpec); e.g. "
                    "PackSampler(lengths, row_length=2048, batch_size=8)"
                )
            self.spec = PackSpec.build(lengths, **spec_options)
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_int("seed", seed, minimum=0)
        world, me = _dist_defaults()
        self.num_replicas = check_int(
            "num_replicas", world if num_replicas is None else num_replicas, minimum=1
        )
        rank = check_int("rank", me if rank is None else rank)
        if not 0 <= rank < self.num_replicas:
            raise ValueError(
                f"rank must be an int >= 0 and < num_replicas={self.num_replicas}, got "
                f"rank={rank}; give each process its own rank in 0..{self.num_replicas - 1}"
            )
        self.rank = rank
        self.epoch = 0
        self._start = 0
        self._yielded = 0
        self._plan: tuple[int, PackPlan] | None = None

    # -- what the sampler promises ------------------------------------------------------------
    @functools.cached_property
    def table(self) -> PackTable:
        """The promised shapes and document bounds, small and picklable (what the collator
        keeps)."""
        return self.spec.table(self.num_replicas)

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """Every batch shape ``(B, L)`` of ``input_ids`` an epoch can produce, sorted (a
        promise)."""
        return sorted(self.table.shapes)

    @property
    def lengths(self) -> np.ndarray:
        """The declared lengths ``(N,)``."""
        return self.spec.lengths

    def collator(self, **kwargs: Any) -> Any:
        """``PackCollator(self.table, **kwargs)``: lays out every batch at its planned shape."""
        from bucketloader.pack.collator import PackCollator

        return PackCollator(self.table, **kwargs)

    # -- the torch Sampler contract -----------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    @functools.cached_property
    def _len(self) -> int:
        return int(self.spec.num_steps(self.num_replicas).sum())

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s plan next (a pending resume position in that epoch is kept)."""
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch != self.epoch:
            self.epoch, self._start, self._yielded = epoch, 0, 0

    def plan(self, epoch: int | None = None) -> PackPlan:
        """This rank's :class:`~bucketloader.pack.PackPlan` (cached for the current epoch)."""
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1]
        plan = plan_pack_epoch(
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
            "num_samples": int(self.spec.lengths.size),
            "num_batches": len(self),
            "plan_digest": self.spec.digest,
        }

    def state_dict(self, *, batches_consumed: int | None = None) -> dict[str, Any]:
        """Small JSON-serialisable state: epoch, position and the configuration it belongs to.

        Args:
            batches_consumed: batches of the current epoch your loop has consumed, when it lags
                the sampler (DataLoader prefetch); default: the batches ``__iter__`` handed out.
        """
        pos = self._yielded
        if batches_consumed is not None:
            pos = check_int("batches_consumed", batches_consumed, minimum=0, maximum=len(self))
        return {
            "version": _STATE_VERSION,
            "epoch": int(self.epoch),
            "batches_yielded": int(pos),
            "config": self._config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` yields exactly the remaining batches of the saved epoch.

        Raises ``ValueError`` if ``state`` comes from another configuration, naming both values.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from PackSampler.state_dict(), got {state!r}")
        missing = [k for k in ("version", "epoch", "batches_yielded", "config") if k not in state]
        if missing:
            raise ValueError(
                f"state is missing {missing}; pass a dict from PackSampler.state_dict(), got "
                f"keys {sorted(state)}"
            )
        if state["version"] != _STATE_VERSION:
            raise ValueError(
                f"state has version={state['version']!r} but this PackSampler reads "
                f"version={_STATE_VERSION}"
            )
        saved = state["config"]
        if not isinstance(saved, dict):
            raise ValueError(f"state['config'] must be a dict, got {saved!r}")
        for key, value in self._config().items():
            if key not in saved:
                raise ValueError(f"state['config'] has no {key!r}; it was saved by another version")
            if saved[key] != value:
                hint = (
                    " (the lengths, row lengths, batch sizes, policies or solver differ)"
                    if key == "plan_digest"
                    else ""
                )
                raise ValueError(
                    f"state is from a different configuration: {key}={saved[key]!r} in the "
                    f"state but {key}={value!r} in this sampler{hint}; build the sampler exactly "
                    "as when the state was saved"
                )
        epoch, pos = state["epoch"], state["batches_yielded"]
        for name, val in (("epoch", epoch), ("batches_yielded", pos)):
            if not isinstance(val, int) or isinstance(val, bool) or val < 0:
                raise ValueError(f"state[{name!r}] must be an int >= 0, got {val!r}")
        if pos > len(self):
            raise ValueError(
                f"state['batches_yielded']={pos} exceeds the epoch's {len(self)} batches"
            )
        self.epoch, self._start, self._yielded = epoch, pos, pos

    def __repr__(self) -> str:
        return (
            f"PackSampler(shapes={self.shapes}, batches={len(self)}, rows={self.spec.num_rows}, "
            f"padding={self.spec.row_padding:.2%}, rank={self.rank}/{self.num_replicas})"
        )


def _dist_defaults() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
