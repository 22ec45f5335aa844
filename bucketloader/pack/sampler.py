"""PackSampler: a batch sampler of packed rows, a thin stateful wrapper over the pure epoch plan.

Resuming works as for :class:`~bucketloader.BucketSampler` (NOTE [ Resuming and DataLoader
prefetch ] in :mod:`bucketloader.sampler`): the state holds the epoch and the batches handed out;
``load_state_dict`` recomputes the epoch's plan from ``(seed, epoch)`` and skips to the position,
so nothing is replayed; pass ``state_dict(batches_consumed=...)`` when a DataLoader prefetches.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

from bucketloader._validation import check_bool
from bucketloader.pack.epoch import PackPlan, plan_pack_epoch
from bucketloader.pack.spec import PackSpec, PackTable
from bucketloader.sampler import EpochSampler, spec_or_build

__all__ = ["PackSampler"]


class PackSampler(EpochSampler):
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
        balance: deal rows to ranks so that every step's attention work (sum of squared
            document lengths) and tokens are even across ranks (NOTE [ Balancing ranks ] in
            :mod:`bucketloader.pack.epoch`); same shapes, same ``len``, exact resume. On one
            rank it changes nothing, and warns so.
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
        balance: bool = False,
        **spec_options: Any,
    ) -> None:
        if not isinstance(lengths, PackSpec) and "row_length" not in spec_options:
            raise TypeError(
                "PackSampler needs row_length=<tokens per row> (or a PackSpec); e.g. "
                "PackSampler(lengths, row_length=2048, batch_size=8)"
            )
        self.spec: PackSpec = spec_or_build(lengths, spec_options, PackSpec)
        super().__init__(shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
        self.balance = check_bool("balance", balance) and self.num_replicas > 1
        if balance and not self.balance:
            warnings.warn(
                "balance=True has no effect on a single rank (num_replicas=1): there are no "
                "other ranks to wait for, so the plan is unchanged",
                UserWarning,
                stacklevel=2,
            )

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

    # -- the epoch plan (EpochSampler does the rest) ------------------------------------------
    def _make_plan(self, epoch: int) -> PackPlan:
        """This rank's :class:`~bucketloader.pack.PackPlan` of ``epoch`` (see :meth:`plan`)."""
        return plan_pack_epoch(
            self.spec,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            num_replicas=self.num_replicas,
            rank=self.rank,
            balance=self.balance,
        )

    # -- resumption ---------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "balance": self.balance,
            "num_samples": int(self.spec.lengths.size),
            "num_batches": len(self),
            "plan_digest": self.spec.digest,
        }

    def __repr__(self) -> str:
        return (
            f"PackSampler(shapes={self.shapes}, batches={len(self)}, rows={self.spec.num_rows}, "
            f"padding={self.spec.row_padding:.2%}, rank={self.rank}/{self.num_replicas})"
        )
