"""PackSampler: a batch sampler of packed rows, a thin stateful wrapper over the pure epoch plan.

Resuming works as for :class:`~bucketloader.BucketSampler` (NOTE [ Resuming and DataLoader
prefetch ] in :mod:`bucketloader.sampler`): the state holds the epoch and the batches handed out;
``load_state_dict`` recomputes the epoch's plan from ``(seed, epoch)`` and skips to the position,
so nothing is replayed; pass ``state_dict(batches_consumed=...)`` when a DataLoader prefetches.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from bucketloader._dist import failing_together, would_join
from bucketloader._types import LazyModule
from bucketloader._validation import ALIASES, check_bool, check_collator_options, check_int
from bucketloader.pack._work import WORK_VERSION
from bucketloader.pack.epoch import (
    PackPlan,
    fill_draws,
    fill_pools,
    plan_pack_epoch,
)
from bucketloader.pack.spec import PackSpec, PackTable
from bucketloader.plan.epoch import own_slots
from bucketloader.plan.report import (
    FILL_TIMES,
    DataLossWarning,
    SamplingReport,
    warn_fill_repeats,
    warn_rank_repeats,
    warn_truncated,
)
from bucketloader.sampler import LOSS_WARNING, EpochSampler, spec_or_build

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.pack import collator as pack_collator
else:  # NOTE [ Annotations that introspection can evaluate ] in bucketloader._types
    pack_collator = LazyModule("bucketloader.pack.collator")

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
    batches* (``row_length``, ``batch_size`` or ``max_tokens``, ``overflow``, ``last_batch``,
    ``search``) are
    :meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` options, passed here as keywords or
    fixed in a ready ``PackSpec``. *How an epoch is iterated* are this class's own arguments.

    Args:
        lengths: tokens per document ``(N,)``, or a :class:`~bucketloader.pack.PackSpec`.
        shuffle: deal documents into rows and order the rows at random each epoch; ``False`` is
            deterministic.
        seed: randomness comes only from ``SeedSequence([seed, epoch])``; same on every rank.
        num_replicas: ranks (default: the ``torch.distributed`` world size, else 1).
        rank: this rank (default: the ``torch.distributed`` rank, else 0; required with
            ``num_replicas > 1`` and no process group).
        balance: pack rows for attention work (sum of squared document lengths) as well as
            tokens, and deal them to ranks so that every step's work and tokens are even
            across ranks (NOTE [ Balancing ranks ] in :mod:`bucketloader.pack.epoch`); same
            shapes, same ``len``, same padding, exact resume. The work-aware rows cost a few
            seconds per 10,000 rows, once per spec and rank count. On one rank it changes
            nothing, and warns so.
        **spec_options: :meth:`PackSpec.build <bucketloader.pack.PackSpec.build>` options:
            ``row_length`` (required), ``batch_size`` or ``max_tokens``, ``overflow``
            (``"error"``, ``"drop"``, ``"truncate"``), ``last_batch`` (``"pad"``,
            ``"fill"``, ``"drop"``) and ``search`` (``"auto"``, ``"never"``: plan in
            best-fit decreasing's time, ``"always"``: the tightest rows).

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
        # (up to its last collective: NOTE [ Checkpoints before a collective ] in _dist)
        with failing_together(would_join(num_replicas, rank)):
            if not isinstance(lengths, PackSpec) and "row_length" not in spec_options:
                meant = [k for k in spec_options if "row_length" in ALIASES.get(k, ((), ""))[0]]
                raise TypeError(
                    "PackSampler needs row_length=<tokens per row> (or a PackSpec); e.g. "
                    "PackSampler(lengths, row_length=2048, batch_size=8)"
                    + "".join(
                        f"; got {k}={spec_options[k]!r}: did you mean "
                        f"row_length={spec_options[k]!r}?"
                        for k in meant[:1]
                    )
                )
            self.spec: PackSpec = spec_or_build(lengths, spec_options, PackSpec)
            # (the epoch its masking collators draw: NOTE [ The epoch a masking collator reads ])
            self._mlm_epoch: Any = None  # (a shared int64 tensor, once one is built)
            super().__init__(shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank)
            self.balance = check_bool("balance", balance) and self.num_replicas > 1
            if balance and not self.balance:
                warnings.warn(
                    "balance=True has no effect on a single rank (num_replicas=1): there are no "
                    "other ranks to wait for, so the plan is unchanged",
                    UserWarning,
                    stacklevel=2,
                )
            self._agree_with_group(num_replicas, rank, self._config())  # NOTE [ Ranks agree ... ]
        self._warn_losses()
        self._warn_fill_repeats()
        self._warn_rank_repeats()
        self._warn_padding_rows()

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

    def collator(self, **kwargs: Any) -> pack_collator.PackCollator:
        """``PackCollator(self.table, **kwargs)``: lays out every batch at its planned shape."""
        from bucketloader.pack.collator import PackCollator, share_epoch

        check_collator_options(f"{type(self).__name__}.collator()", PackCollator, kwargs)
        return share_epoch(self, PackCollator(self.table, **kwargs))

    def _pass_starts(self) -> None:
        """Masking collators draw this pass's epoch (NOTE [ The epoch a masking collator
        reads ] in :mod:`bucketloader.pack.collator`)."""
        if self._mlm_epoch is not None:
            self._mlm_epoch[0] = self.epoch

    # -- the epoch plan (EpochSampler does the rest) ------------------------------------------
    def _make_plan(self, epoch: int) -> PackPlan:
        """This rank's :class:`~bucketloader.pack.PackPlan` of ``epoch`` (see :meth:`plan`)."""
        return plan_pack_epoch(self.spec, **self._coordinates(epoch), balance=self.balance)

    # -- what an epoch does with the data ----------------------------------------------------
    def report(self, epoch: int | None = None) -> SamplingReport:
        """What an epoch does with the documents, exactly, over all ranks (NOTE [ Where the
        report's numbers come from ] in :mod:`bucketloader.plan.report`): documents declared,
        left out by ``overflow="drop"``, truncated, seen, repeated (``last_batch="fill"`` or a
        rank's repeated row), dropped (``last_batch="drop"``), padding rows, and per shape the
        tokens and padded elements.

        Args:
            epoch: the epoch to report (default: the current one, with the current position).

        Example:
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")  # it warns: 2 of 6 documents left out
            ...     s = PackSampler([3, 20, 4, 30, 5, 2], row_length=8, batch_size=2,
            ...                     overflow="drop")
            >>> t = s.report().totals
            >>> t["samples"], t["too_long"], t["seen"], t["dropped"]
            (6, 2, 4, 0)
        """
        current = epoch is None or epoch == self.epoch
        ep = self.epoch if epoch is None else check_int("epoch", epoch, minimum=0)
        spec = self.spec
        plans = [
            plan_pack_epoch(spec, **self._coordinates(ep, r), balance=self.balance)
            for r in range(self.num_replicas)
        ]
        n = spec.num_documents
        everything = np.concatenate([p.indices for p in plans])
        appear = np.bincount(everything, minlength=n)
        seen, planned = int((appear > 0).sum()), int(spec.kept.size)
        kinds = len(spec.row_lengths)
        batch_kind = np.concatenate([p.kinds for p in plans])
        rows_in = np.concatenate([np.diff(p.batch_rows) for p in plans])
        bsz = np.asarray(spec.batch_sizes, dtype=np.int64)
        tokens = np.concatenate(
            [
                np.add.reduceat(spec.sizes[p.indices], p.offsets[:-1]) if len(p) else []
                for p in plans
            ]
        ).astype(np.int64)
        docs = np.concatenate([np.diff(p.offsets) for p in plans])
        batches = np.bincount(batch_kind, minlength=kinds)
        row_len = np.asarray(spec.row_lengths, dtype=np.int64)
        totals = {
            "samples": n,
            "planned": planned,
            "too_long": int(spec.dropped.size) if spec.overflow == "drop" else 0,
            "truncated": int(((spec.sizes > 0) & (spec.sizes < spec.lengths)).sum()),
            "seen": seen,
            "repeated": int(appear.sum()) - seen,
            "dropped": planned - seen,
            "batches": len(plans[self.rank]),
            "padded_rows": int((bsz[batch_kind] - rows_in).sum()),
        }
        cells = tuple(
            {
                "shape": (int(bsz[k]), int(row_len[k])),
                "samples": int(docs[batch_kind == k].sum()),
                "batches": int(batches[k]),
                "rows": int(rows_in[batch_kind == k].sum()),
                "real": int(tokens[batch_kind == k].sum()),
                "padded": int(batches[k] * bsz[k] * row_len[k]),
            }
            for k in range(kinds)
            if batches[k]
        )
        done = self._batches_done() if current else 0  # what the loop received, not prefetched
        return SamplingReport.of_plan(ep, totals, cells, plans[self.rank], done)

    def _warn_losses(self) -> None:
        """NOTE [ Warning about silent losses ] in :mod:`bucketloader.sampler`: documents that
        ``overflow="drop"`` leaves out, and the rows ``last_batch="drop"`` leaves out of every
        epoch (their documents change per epoch; :meth:`report` counts them exactly). A row
        length whose rows are fewer than one step makes no batch under ``last_batch="drop"``:
        the documents no other row holds are then never seen, the same ones every epoch, which
        is warned about whatever their number (:func:`_never_seen`)."""
        spec = self.spec
        n = spec.num_documents
        if len(self) == 0 and spec.num_rows:  # only last_batch="drop" can empty a plan
            raise ValueError(
                f"PackSampler would make no batch per epoch: with last_batch="
                f"{spec.last_batch!r} its {spec.num_rows:,} packed row(s) are fewer than one "
                f"step takes on {self.num_replicas} rank(s), so every document would be left "
                "out; pass last_batch='pad' (the default: the short batch is padded) or a "
                "smaller batch_size / max_tokens"
            )
        reasons = {}
        if spec.overflow == "drop" and spec.dropped.size:
            reasons["overflow='drop' (longer than the longest row)"] = int(spec.dropped.size)
        rows_lost, never = 0, ""
        if spec.last_batch == "drop":
            full, q = spec.steps(self.num_replicas)
            rows_lost = int(q.sum())
            if rows_lost:
                per_row = spec.kept.size / max(spec.num_rows, 1)
                reasons[f"last_batch='drop' ({rows_lost:,} of {spec.num_rows:,} rows)"] = max(
                    1, round(rows_lost * per_row)
                )
            never = _never_seen(spec, full, self.num_replicas)
        lost = sum(reasons.values())
        if lost > LOSS_WARNING * n or never:
            listed = ", ".join(
                f"{'about ' if 'rows' in k else ''}{v:,} by {k}" for k, v in reasons.items()
            )
            hint = "; last_batch='pad' keeps every document" if rows_lost else ""
            about = "about " if rows_lost else ""
            warnings.warn(
                f"this PackSampler leaves out {about}{lost:,} of {n:,} documents "
                f"({lost / n:.1%}) every epoch on {self.num_replicas} rank(s): {listed} "
                f"(report() counts each epoch exactly){never}{hint}",
                DataLossWarning,
                stacklevel=3,
            )
        kept = spec.sizes > 0
        cut = kept & (spec.sizes < spec.lengths)
        if cut.any():  # (overflow="truncate": packed at the longest row length, the rest lost)
            lengths = spec.lengths.astype(np.int64)
            warn_truncated(
                "PackSampler",
                int(cut.sum()),
                n,
                lost=int((lengths - spec.sizes)[cut].sum()),
                total=int(lengths[kept].sum()),
                unit="documents",
                stacklevel=3,
            )

    def _warn_fill_repeats(self) -> None:
        """Under ``last_batch="fill"``, one warning when the repeated rows' documents are a
        large share or concentrated (NOTE [ What fill repeats ] in
        :mod:`bucketloader.plan.epoch`). A small row length (fewer rows than one step) above
        the shortest has its step filled with shorter rows drawn at random (NOTE [ Filling a
        small row length ] in :mod:`bucketloader.pack.epoch`; its own rows repeat only for a
        rank that would get none); the shortest, if small, repeats all its rows, up to
        ``ceil(R * B / rows)`` times an epoch. The count of documents is about (the rows
        repeated change per epoch); :meth:`report` counts each epoch exactly."""
        spec = self.spec
        if spec.last_batch != "fill" or not spec.num_rows:
            return
        full, q = spec.steps(self.num_replicas)
        per_step = np.asarray(spec.batch_sizes, dtype=np.int64) * self.num_replicas
        rows = spec.rows_per_length
        slots, row_offsets, row_kind = spec.layout
        ndoc = np.diff(row_offsets)
        docs = np.bincount(row_kind, weights=ndoc, minlength=rows.size)
        per_row = docs / np.maximum(rows, 1)
        again = np.where(q > 0, per_step - q, 0).astype(np.float64)
        repeated = 0.0
        pools = self._fill_pools
        lone = {}  # small row lengths with fewer rows than ranks: the most of one document
        for k, pool in pools.items():  # its own rows (a rank without one: one document of
            # one), then shorter rows
            n = int(q[k])
            owns = int(own_slots(n, self.num_replicas)[1].sum())
            fill = int(per_step[k]) - owns
            repeated += (owns - n) + fill * float(ndoc[pool].mean())
            again[k] = 0
            if n < self.num_replicas:  # a row repeated by up to ceil(R / n) - 1 ranks, each
                # taking the next of its documents longer than the shorter row length
                mine = np.flatnonzero(row_kind == k)
                longer = spec.sizes[spec.by_size[slots]] > spec.row_lengths[k - 1]
                c = np.concatenate([[0], np.cumsum(longer)])
                fewest = int((c[row_offsets[mine + 1]] - c[row_offsets[mine]]).min())
                turns = -(-self.num_replicas // n) - 1
                lone[k] = 1 + -(-turns // max(fewest, 1))
        # the most appearances of a row, on the layout's order standing in for an epoch's (a
        # row drawn by two small row lengths, or repeated by its own last step, counts each;
        # a row of one of the lone row lengths: its documents, above)
        by_kind = np.argsort(row_kind, kind="stable")
        extra = fill_draws(spec, self.num_replicas, by_kind, row_offsets, row_kind, None)[1]
        extra[np.isin(row_kind, list(lone))] = 0
        most = max(1 + int(extra.max()), *lone.values(), 1)
        repeated = round(repeated + float((again * per_row).sum()))
        small = np.flatnonzero((full == 0) & (q > 0))
        small = small[~np.isin(small, list(pools))]  # (the shortest: its own rows repeat)
        said = ""
        if small.size:
            most = max(most, int((-(-per_step[small] // rows[small])).max()))
            entry_kind = np.repeat(spec.patterns.kind, np.diff(spec.patterns.offsets))
            held = spec.patterns.sizes[spec.patterns.items[np.isin(entry_kind, small)]]
            lo, hi = int(held.min()), int(held.max())
            what = ", ".join(
                f"{int(rows[k]):,} row(s) of {spec.row_lengths[k]:,} tokens (a step takes "
                f"{int(per_step[k]):,})"
                for k in small.tolist()
            )
            said = (
                f"; {what} are fewer than one step takes, so all of them repeat, with their "
                f"{int(docs[small].sum()):,} document(s) of {lo:,}"
                f"{f' to {hi:,}' if hi > lo else ''} tokens, every epoch"
            )
        for k, times in lone.items():  # (NOTE [ Filling a small row length ]: the floor)
            if times < FILL_TIMES:
                continue
            n, shorter = int(q[k]), spec.row_lengths[k - 1]
            said += (
                f"; {n:,} row(s) of {spec.row_lengths[k]:,} tokens are fewer than the "
                f"{self.num_replicas} ranks, and each rank's batch of that step must hold a "
                f"document longer than {shorter:,} tokens (the collator takes a batch's row "
                "length from its longest document), so a rank without a row repeats one of "
                f"theirs, up to {times} times an epoch (last_batch='pad' too); one row "
                f"length, or documents cut to {shorter:,} tokens (overflow='truncate', "
                "SplitDataset), avoids it"
            )
        warn_fill_repeats(
            "PackSampler",
            repeated,
            spec.num_documents,
            most=most,
            small=said,
            num_replicas=self.num_replicas,
            unit="documents",
            about=True,
            stacklevel=3,
        )

    def _warn_rank_repeats(self) -> None:
        """Under ``last_batch="pad"`` over ``R`` ranks, one warning when the rows that give every
        rank without a row of a row length's last step one of its own (``R - q`` rows where
        ``q < R`` are left: NOTE [ Packed epochs ] in :mod:`bucketloader.pack.epoch`) repeat
        more than the share ``"fill"`` warns at, as BucketSampler warns
        (:func:`~bucketloader.plan.report.warn_rank_repeats`): 150 documents over 64 ranks
        repeated 50 rows, 83 documents an epoch (55%), silently (s28-user). The rows are
        exact; their documents about (each row length's mean per row: which rows repeat changes
        per epoch; :meth:`report` counts each epoch exactly). ``"fill"``'s own warning counts
        these repeats too."""
        spec, r = self.spec, self.num_replicas
        if r == 1 or spec.last_batch != "pad" or not spec.num_rows:
            return
        full, q = spec.steps(r)
        extra = np.where(q > 0, np.maximum(r - q, 0), 0)
        _, row_offsets, row_kind = spec.layout
        docs = np.bincount(row_kind, weights=np.diff(row_offsets), minlength=q.size)
        per_row = docs / np.maximum(spec.rows_per_length, 1)
        kinds = int(spec.num_steps(r).astype(bool).sum())
        left = int(q[extra > 0].sum())
        drop = (  # (not where a row length has no full step: "drop" would leave it all out)
            f"; last_batch='drop' leaves the {left:,} row{'s' if left != 1 else ''} of those "
            "last steps out instead (other rows each epoch)"
            if (full[extra > 0] > 0).all()
            else ""
        )
        warn_rank_repeats(
            "PackSampler",
            round(float((extra * per_row).sum())),
            spec.num_documents,
            num_replicas=r,
            parts=f"{kinds:,} row length{'s' if kinds != 1 else ''}",
            fix="Fewer row lengths (or fewer ranks) need fewer repeats" + drop,
            rows=int(extra.sum()),
            stacklevel=3,
        )

    def _warn_padding_rows(self) -> None:
        """One warning when one batch holds more than twice the rows that the whole epoch's
        documents fill (so more than half of the epoch's rows are all padding, on any number of
        ranks): most likely a token count given as ``batch_size`` (a batch of ``B`` rows of
        ``L`` tokens each). A small dataset over many ranks pads too, but is not warned about
        while one batch does not dwarf it (nothing in ``batch_size`` to fix)."""
        spec = self.spec
        if spec.last_batch != "pad":  # ("fill" repeats rows, "drop" leaves them out)
            return
        steps = spec.num_steps(self.num_replicas)
        # (a row length no document needs makes no batch: its batch size is not one of them)
        largest = max((b for b, k in zip(spec.batch_sizes, steps, strict=True) if k), default=0)
        if largest <= 2 * spec.num_rows:
            return
        per_step = np.asarray(spec.batch_sizes, dtype=np.int64) * self.num_replicas
        slots = int((steps * per_step).sum())
        padded = slots - spec.num_rows
        warnings.warn(
            f"{padded:,} of this PackSampler's {slots:,} rows per epoch ({padded / slots:.0%}) "
            f"are all padding, computed for nothing: a batch holds up to {largest:,} rows, more "
            f"than twice the {spec.num_rows:,} {'row' if spec.num_rows == 1 else 'rows'} its "
            "documents fill in the whole epoch "
            f"({self.num_replicas} rank(s)); batch_size counts rows of row_length tokens: "
            "lower it, or pass max_tokens=<tokens per batch> to size batches from a token budget",
            UserWarning,
            stacklevel=3,
        )

    # -- resumption ---------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_replicas": self.num_replicas,
            "balance": self.balance,
            "num_samples": self.spec.num_documents,
            "num_batches": len(self),
            "plan_digest": self._digest,
        }

    @property
    def _digest(self) -> str:
        """The spec's digest; with ``balance=True`` also the version of the work-aware rows
        (NOTE [ Work-aware rows ] in :mod:`bucketloader.pack._work`), part of the plan; and
        ``/fill=2`` where ``last_batch="fill"`` fills a small row length's step with shorter
        rows, ``/fill=3`` where such a row length also has fewer rows than ranks (a rank
        without a row of its own repeats one document of one, not the whole row; NOTE
        [ Filling a small row length ] in :mod:`bucketloader.pack.epoch`)."""
        return self._older_digest + ("" if not self._fills_small else f"/fill={self._fill}")

    @property
    def _older_digest(self) -> str:
        """The digest without the fill version: a state saved before it planned the small row
        lengths' steps of ``"fill"`` with repeats of their own rows."""
        return f"{self.spec.digest}/w{WORK_VERSION}" if self.balance else self.spec.digest

    @property
    def _fills_small(self) -> bool:
        """Whether ``last_batch="fill"`` has a small row length (fewer rows than one step)
        above the shortest, whose step shorter rows fill (NOTE [ Filling a small row
        length ])."""
        spec = self.spec
        if spec.last_batch != "fill":
            return False
        full, q = spec.steps(self.num_replicas)
        return bool(((full == 0) & (q > 0))[1:].any())

    @functools.cached_property
    def _fill(self) -> int:
        """The fill version of the plan where :attr:`_fills_small`: 3 where a row length whose
        step shorter rows fill has fewer rows than ranks (a rank without one repeats one
        document of one that no shorter row length holds; version 2 repeated the whole row),
        else 2 (the plans agree)."""
        q = self.spec.steps(self.num_replicas)[1]
        return 3 if any(q[k] < self.num_replicas for k in self._fill_pools) else 2

    @functools.cached_property
    def _fill_pools(self) -> dict[int, np.ndarray]:
        """The small row lengths whose step shorter rows fill, and those rows (the unbalanced
        layout's; NOTE [ Filling a small row length ] in :mod:`bucketloader.pack.epoch`)."""
        _, row_offsets, row_kind = self.spec.layout
        return fill_pools(self.spec, self.num_replicas, row_offsets, row_kind)

    def _refuse_older(self, state: Any, saved: Any, *, current: bool) -> None:
        """A state from a plan that filled a small row length's step another way (before NOTE
        [ Filling a small row length ], or a rank without a row of its own repeating the whole
        row) is refused: its batches differ."""
        if isinstance(saved, dict) and saved.get("num_replicas") != self.num_replicas:
            saved = None  # (the fill version follows the ranks: NOTE [ An epoch boundary on
            # another number of ranks ] in bucketloader.sampler decides, s29-rev)
        if (
            isinstance(saved, dict)
            and self._fills_small
            and saved.get("plan_digest") == self._older_digest
        ):
            raise ValueError(
                "state was saved by a PackSampler whose last_batch='fill' topped up the step of "
                "a row length with fewer rows than one step with repeats of its own rows (the "
                "longest documents, many times an epoch); this one fills it with shorter rows "
                f"drawn at random (plan_digest '/fill={self._fill}', NOTE [ Filling a small row "
                "length ] in bucketloader.pack.epoch): the same steps and shapes, other rows in "
                "that step, so the state cannot resume its epoch exactly. Start that epoch over "
                f"with sampler.set_epoch({state.get('epoch')!r}), or go on with the next one"
            )
        if (
            isinstance(saved, dict)
            and self._fills_small
            and self._fill == 3
            and saved.get("plan_digest") == f"{self._older_digest}/fill=2"
        ):
            raise ValueError(
                "state was saved by a PackSampler whose last_batch='fill' gave a rank without a "
                "row of its own, in the step of a row length with fewer rows than ranks, a copy "
                "of a whole row (plan_digest '/fill=2'); this one repeats one document of the "
                "row that no shorter row length holds ('/fill=3', NOTE [ Filling a small row "
                "length ] in bucketloader.pack.epoch): the same steps and shapes, "
                "other documents in that step, so the state cannot resume its epoch exactly. "
                f"Start that epoch over with sampler.set_epoch({state.get('epoch')!r}), or go "
                "on with the next one"
            )

    def __repr__(self) -> str:
        return (
            f"PackSampler(shapes={self.shapes}, batches={len(self)}, rows={self.spec.num_rows}, "
            f"row_padding={self.spec.row_padding:.2%}, rank={self.rank}/{self.num_replicas})"
        )


def _never_seen(spec: PackSpec, full: np.ndarray, num_replicas: int) -> str:
    """Under ``last_batch="drop"``, the documents that no epoch sees: a row length with fewer
    rows than one step (``full[k] == 0``) makes no batch, and a document size whose every slot
    is in such rows is never dealt into a row that is trained on (documents are dealt only
    among the slots of their own size, NOTE [ Packed epochs ] in
    :mod:`bucketloader.pack.epoch`). These are the longest documents, the same ones every epoch,
    so this is said whatever their number (``""`` when there are none)."""
    p = spec.patterns
    dead = full[p.kind] == 0  # per pattern
    if not dead.any():
        return ""
    per_entry = np.repeat(dead, np.diff(p.offsets))
    live = np.zeros(p.sizes.size, dtype=bool)
    live[p.items[~per_entry]] = True
    unseen = p.sizes[~live]
    count = int(np.isin(spec.sizes[spec.kept], unseen).sum())
    if not count:
        return ""
    rows = spec.rows_per_length
    what = ", ".join(
        f"{int(rows[k]):,} row(s) of {spec.row_lengths[k]:,} tokens (a step takes "
        f"{spec.batch_sizes[k] * num_replicas:,})"
        for k in np.flatnonzero((full == 0) & (rows > 0)).tolist()
    )
    lo, hi = int(unseen.min()), int(unseen.max())
    return (
        f"; {what} make no batch, so {count:,} document(s) of {lo:,}"
        f"{f' to {hi:,}' if hi > lo else ''} tokens are never seen, the same ones every epoch"
    )
