"""BucketSpec: which cell (planned batch shape) each sample belongs to, fitted once per dataset.

A spec is *what shapes the batches*: the lengths, the length filters (NOTE [ Length filters ] in
:mod:`bucketloader.plan.limits`), the boundaries fitted on the lengths kept (per input, per
group, optionally on multiples of ``pad_to_multiple_of``), the cells and their batch sizes (NOTE
[ The batch-size rule ] in :mod:`bucketloader.plan.budget`), and the last-batch policy. *How an
epoch is iterated* (shuffle, seed, ranks, weights, resume) is the sampler's:
:class:`~bucketloader.BucketSampler` takes either lengths and these options, or a ready spec.

NOTE [ A lean build ]
One input with every sample planned (no ``groups``, ``filter``, ``shapes``, length limits,
joint plan or ``oversize="drop"``) is built in O(N) passes with bounded temporaries: the
histogram (chunked ``bincount``), the boundaries and cells from it, the cell of every sample
through a table ``length -> cell`` in the narrowest signed type (``int8`` up to 127 cells), the
samples per cell from the histogram. ``by_cell`` is a stable counting sort (a radix argsort per
chunk of 8/16-bit cell ids, scattered per cell) into ``int32`` indices, equal to a stable
``argsort`` of the cells; the digest hashes the cell ids chunk by chunk. Nothing of N elements
is ``int64``. A 1-D integer numpy array (signed, or unsigned up to 32 bits) is *held as it is*,
as a read-only view, not copied: do not write to it while the sampler lives. Other inputs
(lists, tensors, floats, ``uint64``) are converted to ``int64`` as before. The other plans
take the general path (the same spec, more memory). At 100 M lengths and rank 0 of 8 a
``BucketSampler`` builds and plans its epoch in a fraction of ``np.argsort``'s time
(``benchmarks/results/scale.md``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from bucketloader._types import Cache, LengthsLike, PerInput, Size, Strategy
from bucketloader._validation import (
    MAX_REPLICAS,
    Lengths,
    OptionError,
    Spell,
    as_lengths,
    check_int,
    checks_options,
)
from bucketloader.boundaries import joint_padding, round_up
from bucketloader.histogram import LengthHistogram, input_table, length_counts
from bucketloader.plan.budget import BatchRule, even_batch, exact_sizes, resolve_size, size_values
from bucketloader.plan.cells import Cells, lattice_codes
from bucketloader.plan.limits import LengthLimits
from bucketloader.plan.select import apply_filter, covered, lattice_of, parse_shapes
from bucketloader.plan.shapes import BatchSize, MaxTokens, Shaping, per_input, plan_shapes
from bucketloader.plan.table import ShapeTable
from bucketloader.solve import compute_boundaries
from bucketloader.strategies import resolve_strategy, strategy_defaults
from bucketloader.strategies.joint import (
    Joint,
    OverLimit,
    TooFewCells,
    cover_most,
    resolve_joint,
)

#: Samples left out by ``filter=`` and by ``shapes=`` (NOTEs in :mod:`bucketloader.plan.select`).
LEFT_OUT = ("filter", "no_shape")

#: Samples per chunk of the counting passes (bounded temporaries: NOTE [ A lean build ]).
CHUNK = 1 << 20
#: Cell ids per chunk of the counting sort (``by_cell``).
SORT_CHUNK = 1 << 16
#: Buckets per input when neither ``num_buckets`` nor ``boundaries`` is given.
DEFAULT_NUM_BUCKETS = 8
#: A strategy: a registered name or a callable.
StrategyLike = str | Strategy | None


@dataclass(frozen=True, eq=False)
class BucketSpec:
    """The shape side of a sampler: the planned cells and which cell each sample belongs to.

    Build one with :meth:`build`; :func:`~bucketloader.plan.plan_epoch` turns it into an epoch of
    batches and :meth:`shape_table` lists the shapes it promises.

    Attributes:
        lengths: the declared lengths, ``(N,)`` or ``(N, D)``.
        groups: group id per sample, or ``None``.
        cells: the planned :class:`~bucketloader.plan.Cells`.
        cell_of_sample: ``(N,)`` cell id of every sample; ``-1`` for a sample the length
            filters or the oversize policy left out.
        last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"``.
        limits: the :class:`~bucketloader.plan.limits.LengthLimits` applied.
        filtered: samples left out or changed before planning: ``too_short``, ``too_long``,
            ``oversize`` (left out) and ``truncated`` (planned at ``max_length``).
        rule: the :class:`~bucketloader.plan.budget.BatchRule` that sized the batches.
        size: how a padded shape was counted (``"sum"``, ``"prod"`` or a callable).
        joint: with a joint plan (``strategy="joint"``), per group the solve's ``status``,
            ``objective`` (padding), ``padding_ratio`` (per real element), certified
            ``lower_bound``, ``gap``, ``seconds`` (of the solve, also when read from the
            cache) and ``cached`` (read from ``cache=``: an entry written before, or rank 0's
            under a process group; without ``cache=`` the ranks share rank 0's plan through a
            temporary cache, and ``cached`` is ``False``); under ``max_tokens`` with
            ``max_shapes`` below the cells within it that cover every sample, ``cover``: that
            count (the plan holds the samples ``max_shapes`` cells within it hold, the most:
            NOTE [ Covering the most samples within a size limit ]).

    Example:
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> spec.cell_lengths.ravel().tolist(), spec.cell_batch.tolist(), spec.counts.tolist()
        ([4, 10], [2, 2], [2, 3])
    """

    lengths: np.ndarray
    groups: np.ndarray | None
    cells: Cells
    cell_of_sample: np.ndarray
    last_batch: str
    limits: LengthLimits | None = None
    filtered: Mapping[str, int] | None = None
    rule: BatchRule | None = None
    size: Any = "sum"
    joint: tuple[Mapping[str, Any], ...] | None = None

    # -- views of the cells -------------------------------------------------------------------
    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the bucketed inputs."""
        return self.cells.input_names

    @property
    def group_values(self) -> tuple[int, ...]:
        """The distinct group ids (``(0,)`` without groups)."""
        return self.cells.group_values or (0,)

    @property
    def boundaries(self) -> tuple[tuple[np.ndarray, ...], ...]:
        """``boundaries[g][d]``: boundaries of input ``d`` in group index ``g``."""
        return self.cells.boundaries

    @property
    def user_boundaries(self) -> Any:
        """The boundaries as samplers show them: an array for one input; ``{name: array}`` for
        several; with groups ``{group: that}``."""
        per_group = [
            b[0] if len(b) == 1 else dict(zip(self.input_names, b, strict=True))
            for b in self.boundaries
        ]
        if self.groups is None:
            return per_group[0]
        return dict(zip(self.group_values, per_group, strict=True))

    @property
    def cell_lengths(self) -> np.ndarray:
        """``(K, D)`` padded lengths of every cell."""
        return self.cells.lengths

    @property
    def cell_batch(self) -> np.ndarray:
        """``(K,)`` full batch size of every cell."""
        return self.cells.batch

    @property
    def cell_group(self) -> np.ndarray:
        """``(K,)`` group index of every cell."""
        return self.cells.group

    @functools.cached_property
    def kept(self) -> np.ndarray | None:
        """Indices of the planned samples, or ``None`` when every sample is planned."""
        if self.filtered is None or not any(
            self.filtered.get(k, 0) for k in ("too_short", "too_long", "oversize", *LEFT_OUT)
        ):
            return None
        return np.flatnonzero(self.cell_of_sample >= 0)

    @property
    def num_planned(self) -> int:
        """Samples in the plan (all of them unless a filter left some out)."""
        kept = self.kept
        return int(self.cell_of_sample.size if kept is None else kept.size)

    @functools.cached_property
    def counts(self) -> np.ndarray:
        """Samples per cell."""
        return count_cells(self.cell_of_sample, self.cells.num_cells)

    @functools.cached_property
    def by_cell(self) -> np.ndarray:
        """Planned sample indices sorted by cell, in index order within a cell (unshuffled):
        a counting sort into ``int32`` (``int64`` from ``2**31`` samples)."""
        return sort_by_cell(self.cell_of_sample, self.counts)

    @property
    def truncate(self) -> tuple[int | None, ...] | None:
        """Per-input cut lengths under ``overflow="truncate"`` (``None`` otherwise)."""
        return None if self.limits is None else self.limits.truncate

    def planned_lengths(self) -> np.ndarray:
        """``(N, D)`` int64 lengths as planned: cut to ``max_length`` under
        ``overflow="truncate"``."""
        table = self.lengths if self.lengths.ndim == 2 else self.lengths[:, None]
        table = table.astype(np.int64, copy=False)
        cut = self.truncate
        if cut is None:
            return table
        top = np.iinfo(np.int64).max
        return np.minimum(table, np.array([top if c is None else c for c in cut])[None, :])

    def cut_elements(self) -> tuple[int, int]:
        """``(elements past the cut, elements declared)`` of the planned samples: what
        ``overflow="truncate"`` leaves out of them (``0`` without it), for the samplers' warning
        (:func:`~bucketloader.plan.report.warn_truncated`)."""
        kept = self.cell_of_sample >= 0
        declared = self.lengths.reshape(kept.size, -1)[kept].astype(np.int64)
        return int((declared - self.planned_lengths()[kept]).sum()), int(declared.sum())

    @functools.cached_property
    def digest(self) -> str:
        """Short SHA-256 of everything that shapes an epoch (for strict state loading)."""
        h = hashlib.sha256()
        for i in range(0, self.cell_of_sample.size, CHUNK):  # = hashing it whole as int32
            h.update(self.cell_of_sample[i : i + CHUNK].astype(np.int32).tobytes())
        for arr in (self.cells.lengths, self.cells.batch, self.cells.group):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
        h.update(self.last_batch.encode())
        if self.truncate is not None:
            h.update(repr(self.truncate).encode())
        return h.hexdigest()[:16]

    def cell_steps(self, num_replicas: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Per cell: ``(full global steps, samples left q)`` for ``num_replicas`` ranks.

        A global step is ``num_replicas`` batches of one cell (one per rank); the ``q`` samples
        left make one more step unless ``last_batch="drop"`` (NOTE [ last_batch and replicas ]).
        """
        num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
        per_step = self.cells.batch * num_replicas  # (-1 gave negative steps, nan NaN ones)
        return self.counts // per_step, self.counts % per_step

    def num_steps(self, num_replicas: int = 1) -> np.ndarray:
        """Global steps of every cell per epoch; their sum is every rank's ``len(sampler)``."""
        full, q = self.cell_steps(num_replicas)
        return full + ((q > 0) & (self.last_batch != "drop"))

    def for_replicas(self, num_replicas: int = 1) -> BucketSpec:
        """The spec a sampler over ``num_replicas`` ranks plans with: under a token budget
        (``TokenBudget(balance=True)``, the default) and ``last_batch`` ``"pad"`` or ``"fill"``,
        each cell at the fewest rows that keep its step count (NOTE [ Even batches ] in
        :mod:`bucketloader.plan.budget`); otherwise this spec itself. Same steps, same padded
        lengths, fewer filler rows.

        Example:
            >>> spec = BucketSpec.build([8] * 100, num_buckets=1, max_tokens=256)
            >>> spec.cell_batch.tolist(), spec.for_replicas(1).cell_batch.tolist()
            ([32], [25])
            >>> spec.num_steps().tolist(), spec.for_replicas(1).num_steps().tolist()
            ([4], [4])
        """
        num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
        rule = self.rule
        budget = None if rule is None else rule.budget
        if rule is None or budget is None or not budget.balance:
            return self
        if self.last_batch not in ("pad", "fill"):
            return self
        full = rule.sizes(self.cells.lengths, self.size)  # B of every cell, from the budget
        even = even_batch(self.counts, full, num_replicas, budget.multiple_of)
        if np.array_equal(even, self.cells.batch):
            return self
        even.setflags(write=False)
        out = dataclasses.replace(self, cells=dataclasses.replace(self.cells, batch=even))
        for name in ("kept", "counts", "by_cell"):  # cached views that do not depend on B
            if name in self.__dict__:
                out.__dict__[name] = self.__dict__[name]
        return out

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape ``(B, L_1, ..., L_D)`` of this spec on one rank, sorted (with
        several ranks: ``shape_table(num_replicas).shapes``, which can add the smaller last
        batches of ``last_batch="keep"``). A sampler plans with :meth:`for_replicas`, whose
        cells under a token budget can take fewer rows: its ``shapes`` are that spec's.

        Example:
            >>> BucketSpec.build([3, 4, 9, 10], num_buckets=2, batch_size=2).shapes
            [(2, 4), (2, 10)]
        """
        return list(self.shape_table().shapes)

    def shape_table(self, num_replicas: int = 1) -> ShapeTable:
        """The :class:`ShapeTable` this spec promises when split over ``num_replicas`` ranks.

        Example:
            >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2,
            ...                         last_batch="keep")
            >>> spec.shape_table().shapes
            ((1, 10), (2, 4), (2, 10))
        """
        num_replicas = check_int("num_replicas", num_replicas, minimum=1, maximum=MAX_REPLICAS)
        full = self.cells.shapes
        full_steps, q = self.cell_steps(num_replicas)
        if self.last_batch in ("pad", "fill"):
            shapes = set(full)
        else:
            shapes = {s for s, f in zip(full, full_steps, strict=True) if f > 0}
        if self.last_batch == "keep":
            part = -(-q // num_replicas)
            shapes |= {(int(p), *s[1:]) for p, s in zip(part, full, strict=True) if p > 0}
        return ShapeTable(
            cells=self.cells,
            shapes=tuple(sorted(shapes)),
            last_batch=self.last_batch,
            truncate=self.truncate,
            shortest=self._shortest(),
        )

    def _shortest(self) -> tuple[int, ...] | None:
        """Per input, the shortest planned length, as cut under ``overflow="truncate"`` (NOTE [ A
        batch shorter than every planned sample ] in :mod:`bucketloader.plan.table`); ``None``
        when the plan holds no sample."""
        planned = self.lengths[self.cell_of_sample >= 0]
        if planned.size == 0:
            return None
        least = planned.reshape(len(planned), -1).min(axis=0)
        cut = self.truncate or (None,) * least.size  # (a sample cut to max_length is that long)
        return tuple(
            int(x) if c is None else min(int(x), c) for x, c in zip(least, cut, strict=True)
        )

    @classmethod
    @checks_options
    def build(
        cls,
        lengths: LengthsLike | Mapping[str, LengthsLike],
        *,
        num_buckets: PerInput | None = None,
        strategy: StrategyLike | Sequence[StrategyLike] | Mapping[str, StrategyLike] = None,
        boundaries: Any = None,
        pad_to_multiple_of: PerInput = 1,
        batch_size: BatchSize = None,
        max_tokens: MaxTokens = None,
        size: Size = "sum",
        min_length: PerInput | None = None,
        max_length: PerInput | None = None,
        overflow: str = "error",
        max_shapes: int | None = None,
        groups: ArrayLike | None = None,
        last_batch: str = "pad",
        cache: Cache | bool | None = None,
        shapes: ArrayLike | None = None,
        filter: ArrayLike | Callable[[np.ndarray], ArrayLike] | None = None,
    ) -> BucketSpec:
        """Filter the lengths, fit boundaries (per input, per group), form cells, size batches.

        Args:
            lengths: ``(N,)`` lengths, ``(N, D)`` lengths of D inputs, or a mapping
                name → ``(N,)`` lengths.
            num_buckets: buckets per input (default 8): an int, or one per input (a sequence or
                a mapping name → int).
            strategy: name or callable (default ``"optimal"``), or one per input; or
                ``"joint"`` / :class:`~bucketloader.strategies.joint.Joint` (with
                ``max_shapes``): the cells of all inputs at once, least padding with a
                certified bound (:func:`~bucketloader.strategies.joint.solve_joint`).
            boundaries: precomputed boundaries instead of ``num_buckets``/``strategy``: an array
                (one input), a sequence / mapping name → array (several), or a mapping
                group → those.
            pad_to_multiple_of: every boundary a multiple of this (8 or 64 for tensor cores), or
                one per input. Fitted boundaries are the exact optimum under that constraint
                (:func:`~bucketloader.compute_boundaries`); given ones are rounded up to it.
            batch_size: the same ``B`` for every cell, or per-cell sizes (a sequence in plan
                order, a mapping padded length or shape → ``B``, or a callable on the padded
                lengths tuple, ``(L,)`` for one input: ``lambda shape: 16_000 // shape[0]``); or
            max_tokens: a token budget, an int or a
                :class:`~bucketloader.plan.TokenBudget` (with ``max_batch_size``,
                ``multiple_of`` and the ``oversize`` policy). NOTE [ The batch-size rule ] in
                :mod:`bucketloader.plan.budget`.
            size: how a padded shape counts for ``max_tokens`` and for the ``max_shapes`` merge:
                ``"sum"`` (source + target), ``"prod"`` (height × width) or a callable on the
                padded lengths tuple.
            min_length, max_length: length filters, an int or one per input (NOTE [ Length
                filters ] in :mod:`bucketloader.plan.limits`).
            overflow: samples outside the filters: ``"error"`` (default), ``"drop"`` or
                ``"truncate"`` (planned at ``max_length``; the collator cuts them).
            max_shapes: at most this many cells per group. With ``num_buckets`` (or a per-input
                ``strategy`` / ``boundaries``): merge rare lattice cells into covering ones (see
                :func:`~bucketloader.plan.cells.merge_cells`). Alone with one input: that many
                buckets (``num_buckets=max_shapes``). Alone, with several inputs and
                ``size`` ``"sum"`` / ``"prod"``: the joint plan, which picks every input's
                boundaries itself (``strategy="joint"``; docs/joint-shapes.md).
            groups: ``(N,)`` int group id per sample (e.g. the dataset of a
                :class:`~bucketloader.sampler.GroupedDataset`): boundaries are fitted per group
                and batches never mix groups.
            last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"`` (NOTE [ last_batch and
                replicas ] and, for the repeats of ``"fill"``, NOTE [ What fill repeats ] in
                :mod:`bucketloader.plan.epoch`).
            cache: passed to :func:`~bucketloader.compute_boundaries`: ``None`` (solve every
                time), ``True`` (the default :class:`~bucketloader.BucketCache`) or a cache; a
                slow strategy (``"lp"``) is then solved once per job and dataset.
            shapes: the planned padded lengths themselves instead of fitted boundaries (NeMo's
                2-D bucket list): ``[(L_1, ..., L_D), ...]`` (ints for one input); a sample
                goes to the smallest shape covering it, one no shape covers is left out and
                counted as ``no_shape`` (NOTE [ Explicit shapes ] in
                :mod:`bucketloader.plan.select`).
            filter: a boolean mask ``(N,)`` or a vectorised ``fn(lengths) -> mask``; rejected
                samples are left out and counted as ``filter`` (NOTE [ A predicate filter ]).

        Example:
            >>> spec = BucketSpec.build([0, 3, 4, 9, 10, 10, 500], num_buckets=2, batch_size=2,
            ...                         min_length=1, max_length=100, overflow="drop")
            >>> spec.cell_lengths.ravel().tolist(), dict(spec.filtered)
            ([4, 10], {'too_short': 1, 'too_long': 1, 'truncated': 0, 'oversize': 0})
        """
        size = resolve_size(size)
        declared, table, names = parse_lengths(lengths)
        n = table.shape[0]
        shaping = Shaping.parse(
            names,
            batch_size=batch_size,
            max_tokens=max_tokens,
            last_batch=last_batch,
            overflow=overflow,
            min_length=min_length,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            size=size,
        )
        rule, limits, multiples = shaping.rule, shaping.limits, shaping.multiples
        if max_shapes is not None:
            max_shapes = check_int("max_shapes", max_shapes, minimum=1)
        gids, gvals = parse_groups(groups, n)
        joint = resolve_joint(
            strategy,
            max_shapes=max_shapes,
            num_buckets=num_buckets,
            boundaries=boundaries,
            num_inputs=len(names),
            size=size,
            shapes=shapes,
        )
        if joint is not None:
            strategy = None
        if boundaries is not None and (num_buckets is not None or strategy is not None):
            raise ValueError(
                "pass either boundaries (precomputed) or num_buckets/strategy (fitted), not both"
            )
        default_k = DEFAULT_NUM_BUCKETS
        if (
            num_buckets is None
            and boundaries is None
            and max_shapes is not None
            and len(names) == 1
        ):
            # one input and a shape budget alone: fit that many buckets (fitting the default 8 and
            # merging them down padded more: LibriSpeech at max_shapes=4, 16.3% against 14.7%)
            default_k = max_shapes
        ks_in = per_input("num_buckets", default_k if num_buckets is None else num_buckets, names)
        ks_in = [check_int("num_buckets", k, minimum=1) for k in ks_in]
        strategies = per_input(
            "strategy", "optimal" if strategy is None else strategy, names, scalar=(str,)
        )

        budget = rule.budget
        if (
            len(names) == 1
            and gids is None
            and joint is None
            and shapes is None
            and filter is None
            and not limits.active
            and (budget is None or budget.oversize != "drop")
        ):  # NOTE [ A lean build ]
            given_b = group_boundaries(boundaries, 0, (0,), names)
            lean = _lean_cells(
                table[:, 0],
                shaping,
                given=None if given_b is None else given_b[0],
                num_buckets=ks_in[0],
                strategy=strategies[0],
                max_shapes=max_shapes,
                size=size,
                cache=cache,
            )
            if lean is not None:
                cells, cell_of, counts = lean
                spec = cls(
                    lengths=declared,
                    groups=None,
                    cells=cells,
                    cell_of_sample=cell_of,
                    last_batch=shaping.last_batch,
                    limits=limits,
                    filtered={"too_short": 0, "too_long": 0, "truncated": 0, "oversize": 0},
                    rule=rule,
                    size=size,
                    joint=None,
                )
                spec.__dict__["counts"] = counts  # (a cached_property, known from the histogram)
                return spec

        planned, keep, filtered = limits.apply(table)
        given_shapes = None
        if filter is not None:
            mask = apply_filter(filter, declared, n)
            filtered["filter"] = int((keep & ~mask).sum())
            keep = keep & mask
        if shapes is not None:
            if boundaries is not None or num_buckets is not None or strategy is not None:
                raise ValueError(
                    "pass either shapes (the planned padded lengths) or boundaries / "
                    "num_buckets / strategy, not both"
                )
            if max_shapes is not None:
                raise ValueError("max_shapes merges fitted cells; drop it with explicit shapes")
            given_shapes = parse_shapes(shapes, names, multiples)
            fits = covered(planned, given_shapes)
            filtered["no_shape"] = int((keep & ~fits).sum())
            keep = keep & fits
            lattice = lattice_of(given_shapes)
            boundaries = lattice[0] if len(names) == 1 else lattice
        filtered["oversize"] = 0
        if budget is not None and budget.oversize == "drop":
            own = planned
            if joint is not None:  # a joint cell is a multiple: a sample rounded past the
                # budget fits none, and left in, it kept the cells within it off (NOTE [ Cells
                # within a size limit ]: 107 of 400 dropped for one such sample, s24-rev)
                own = np.stack([round_up(planned[:, d], m) for d, m in enumerate(multiples)], 1)
            alone = size_values(own, size) > budget.max_tokens  # cannot fit even unpadded
            filtered["oversize"] = int((alone & keep).sum())
            keep = keep & ~alone
        if not keep.any():
            raise ValueError(
                f"every one of the {n} samples is left out ({_left_out(filtered)}); relax "
                "min_length / max_length or the token budget"
            )

        def fit() -> tuple[list[tuple[np.ndarray, ...]], list[np.ndarray], list[np.ndarray]]:
            all_b: list[tuple[np.ndarray, ...]] = []
            codes: list[np.ndarray] = []
            joint_cells.clear()
            joint_info.clear()
            uncovered.clear()
            sels: list[np.ndarray] = []
            for gi, gval in enumerate(gvals):
                member = keep if gids is None else keep & (gids == gi)
                sel = np.flatnonzero(member)
                if sel.size == 0:
                    raise ValueError(
                        f"every sample of group {gval} is left out ({_left_out(filtered)}); "
                        "relax the filters or drop that group"
                    )
                sub = planned[sel]
                given = group_boundaries(boundaries, gval, gvals, names)
                if joint is not None:
                    jb, idx, summary, lost = _fit_joint(
                        sub, joint, max_shapes, size, multiples, cache, rule, too_few
                    )
                    if lost is not None:  # (NOTE [ Covering the most samples within a size
                        # limit ]: the samples K cells within max_tokens do not hold)
                        uncovered.append(sel[lost])
                        sel, sub = sel[~lost], sub[~lost]
                    all_b.append(jb)
                    joint_cells.append(idx)
                    summary = _in_real_terms(summary, sub, size, multiples)
                    joint_info.append({"group": gval, **summary})
                    codes.append(lattice_codes(jb, sub))
                    sels.append(sel)
                    continue
                bs = []
                for d in range(len(names)):
                    if given is None:
                        b = compute_boundaries(
                            Lengths(sub[:, d]),  # checked once, by parse_lengths
                            ks_in[d],
                            strategy=strategies[d],
                            cache=cache,
                            pad_to_multiple_of=multiples[d],
                            **budget_options(strategies[d], rule, size, len(names)),
                        )
                    else:
                        group = f" (group {gval})" if len(gvals) > 1 else ""
                        longest = int(sub[:, d].max())
                        b = shaping.given(given[d], d, longest=longest, group=group)
                    bs.append(b)
                all_b.append(tuple(bs))
                codes.append(lattice_codes(bs, sub))
                sels.append(sel)
            return all_b, codes, sels

        joint_cells: list[np.ndarray] = []
        joint_info: list[dict[str, Any]] = []
        too_few: list[int] = []  # (the cells within max_tokens that K fell short of, per group)
        uncovered: list[np.ndarray] = []  # (left out by them, oversize="drop")
        all_b, codes, sels = fit()
        if uncovered:
            keep = keep.copy()
            for out in uncovered:
                keep[out] = False
                filtered["oversize"] += int(out.size)
        while True:
            occupancy = [
                np.bincount(
                    c if given_shapes is None else lattice_codes(bs, given_shapes),
                    minlength=int(np.prod([b.size for b in bs])),
                )
                for c, bs in zip(codes, all_b, strict=True)
            ]
            cells = plan_shapes(
                shaping,
                all_b,
                group_values=None if gids is None else gvals,
                occupancy=occupancy,
                max_shapes=max_shapes,
                size=size,
                joint=joint_cells if joint is not None else None,
            )
            cell_of = np.full(n, -1, dtype=np.int64)
            for gi, (sel, code) in enumerate(zip(sels, codes, strict=True)):
                cell_of[sel] = cells.lookup[gi][code]
            if not (cells.batch < 1).any():
                break
            if rule.oversize != "drop":
                _raise_small_budget(cells, cell_of, planned, size, rule, multiples)
            # padding (a pad multiple, a joint cell) pushed a cell past the budget: leave its
            # samples out too, and plan the rest again on the same boundaries
            out = cell_of >= 0
            out[out] = cells.batch[cell_of[out]] < 1
            filtered["oversize"] += int(out.sum())
            keep = keep & ~out
            if not keep.any():
                fix = ""
                if too_few:  # (the joint plan over every sample: K below the cells within it)
                    fix = (
                        f": a cell pads every input to the longest of its samples there, and "
                        f"{max(too_few)} cells within max_tokens cover them, max_shapes="
                        f"{max_shapes} do not. Pass max_shapes={max(too_few)} or more, or raise "
                        "max_tokens"
                    )
                raise ValueError(
                    f"no bucket fits {rule.describe()}; every sample is left out "
                    f"({_left_out(filtered)}){fix}"
                )
            kept_codes, kept_sels = [], []
            for sel, code in zip(sels, codes, strict=True):
                mask = keep[sel]
                kept_codes.append(code[mask])
                kept_sels.append(sel[mask])
            codes, sels = kept_codes, kept_sels
        cell_of = cell_of.astype(cell_dtype(cells.num_cells))
        cell_of.setflags(write=False)
        return cls(
            lengths=declared,
            groups=None if gids is None else np.asarray(groups),
            cells=cells,
            cell_of_sample=cell_of,
            last_batch=shaping.last_batch,
            limits=limits,
            filtered=filtered,
            rule=rule,
            size=size,
            joint=tuple(joint_info) if joint is not None else None,
        )


def _lean_cells(
    col: np.ndarray,
    shaping: Shaping,
    *,
    given: Any,
    num_buckets: int,
    strategy: Any,
    max_shapes: int | None,
    size: Any,
    cache: Any,
) -> tuple[Cells, np.ndarray, np.ndarray] | None:
    """NOTE [ A lean build ]: one input, every sample planned. The cells from the histogram,
    then the cell of every sample through a table ``length -> cell``, in chunks.

    Returns ``(cells, cell of every sample, samples per cell)``, or ``None`` when a cell's
    batch size is below 1 (the full build then raises or drops, as it always has).
    """
    values, freq = length_counts(col)
    if given is None:
        b = compute_boundaries(
            LengthHistogram(values, freq),
            num_buckets,
            strategy=strategy,
            cache=cache,
            pad_to_multiple_of=shaping.multiples[0],
            **budget_options(strategy, shaping.rule, size, 1),
        )
    else:
        b = shaping.given(given, 0, longest=int(values[-1]))
    code = lattice_codes([b], values[:, None])
    occupancy = np.zeros(b.size, dtype=np.int64)
    np.add.at(occupancy, code, freq)
    cells = plan_shapes(shaping, [(b,)], occupancy=[occupancy], max_shapes=max_shapes, size=size)
    if (cells.batch < 1).any():
        return None
    cell_v = cells.lookup[0][code]
    counts = np.zeros(cells.num_cells, dtype=np.int64)
    np.add.at(counts, cell_v, freq)
    dtype = cell_dtype(cells.num_cells)
    out = np.empty(col.size, dtype=dtype)
    table = None
    if int(values[-1]) <= 4 * col.size + 1024:
        table = np.zeros(int(values[-1]) + 1, dtype=dtype)
        table[values] = cell_v
    for i in range(0, col.size, CHUNK):
        part = col[i : i + CHUNK]
        if table is not None:
            np.take(table, part, out=out[i : i + CHUNK])
        else:
            out[i : i + CHUNK] = cell_v[np.searchsorted(values, part)]
    out.setflags(write=False)
    counts.setflags(write=False)
    return cells, out, counts


def cell_dtype(num_cells: int) -> np.dtype:
    """The narrowest signed integer type for cell ids ``-1 .. num_cells - 1``.

    Example:
        >>> cell_dtype(16), cell_dtype(200)
        (dtype('int8'), dtype('int16'))
    """
    for t in (np.int8, np.int16, np.int32):
        if num_cells <= np.iinfo(t).max:
            return np.dtype(t)
    return np.dtype(np.int64)


def count_cells(cell_of: np.ndarray, num_cells: int) -> np.ndarray:
    """Samples per cell (cell ``-1``, left out, not counted), in chunks (``np.bincount``
    alone would copy every id to ``int64``).

    Example:
        >>> count_cells(np.array([1, -1, 1, 0], dtype=np.int8), 3).tolist()
        [1, 2, 0]
    """
    counts = np.zeros(num_cells + 1, dtype=np.int64)
    for i in range(0, cell_of.size, CHUNK):
        counts += np.bincount(cell_of[i : i + CHUNK].astype(np.int64) + 1, minlength=num_cells + 1)
    return counts[1:]


def sort_by_cell(cell_of: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices of the samples of cells ``0 .. K-1`` (``K = counts.size``) sorted by cell, in
    index order within a cell (``-1`` left out): a stable counting sort, chunk by chunk, into
    ``int32`` (``int64`` from ``2**31`` samples). Equal to a stable ``argsort`` of the cells.

    Example:
        >>> sort_by_cell(np.array([1, -1, 0, 1, 0], dtype=np.int8), np.array([2, 2])).tolist()
        [2, 4, 0, 3]
    """
    k = int(counts.size)
    out = np.empty(int(counts.sum()), dtype=np.int32 if cell_of.size < 1 << 31 else np.int64)
    at = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    key = cell_of.dtype if cell_of.dtype.itemsize <= 2 else np.int16 if k < 1 << 15 else np.int64
    cuts = np.arange(-1, k + 1).astype(key)
    for i in range(0, cell_of.size, SORT_CHUNK):  # (cache-sized chunks: a faster radix sort)
        part = cell_of[i : i + SORT_CHUNK].astype(key, copy=False)
        order = np.argsort(part, kind="stable")  # a radix sort on 8/16-bit keys
        edges = np.searchsorted(np.take(part, order), cuts)  # (cheaper than bincount)
        s, per = int(edges[1]), np.diff(edges[1:])  # (the samples of cell -1 sort first)
        for c in np.flatnonzero(per).tolist():
            m = int(per[c])
            np.add(order[s : s + m], i, out=out[at[c] : at[c] + m], casting="unsafe")
            at[c] += m
            s += m
    out.setflags(write=False)
    return out


class SpecShapes:
    """What a sampler planned by a :class:`BucketSpec` (its ``spec``) promises through its
    ``shape_table``: the batch shapes and the boundaries (shared by
    :class:`~bucketloader.BucketSampler` and :class:`~bucketloader.EvalSampler`).

    Example:
        >>> from bucketloader import BucketSampler
        >>> sampler = BucketSampler([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> sampler.shapes, sampler.boundaries.tolist()
        ([(2, 4), (2, 10)], [4, 10])
    """

    spec: BucketSpec

    @property
    def shape_table(self) -> ShapeTable:  # pragma: no cover - each sampler builds its own
        raise NotImplementedError

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Every batch shape ``(B, L_1, ..., L_D)`` the sampler produces, sorted (a promise)."""
        return list(self.shape_table.shapes)

    @property
    def boundaries(self) -> Any:
        """An array for one input; ``{name: array}`` for several; with groups ``{group: that}``."""
        return self.spec.user_boundaries


def budget_options(strategy: Any, rule: BatchRule, size: Any, inputs: int) -> dict[str, Any]:
    """The plan's token budget for a strategy that plans batches itself (one that takes a
    ``max_tokens`` option, e.g. ``"batched"``: NOTE [ Batched boundaries ]); one input only."""
    budget = rule.budget
    if budget is None or inputs != 1 or callable(size):
        return {}
    defaults, _ = strategy_defaults(resolve_strategy(strategy)[1])
    if "max_tokens" not in defaults:
        return {}
    opts: dict[str, Any] = {"max_tokens": budget.max_tokens}
    for name in ("max_batch_size", "multiple_of"):
        if name in defaults:
            opts[name] = getattr(budget, name)
    return opts


def _in_real_terms(
    summary: dict[str, Any], sub: np.ndarray, size: Any, multiples: Sequence[int]
) -> dict[str, Any]:
    """A joint plan's ``summary`` over the samples ``sub`` it planned, in the real lengths'
    terms where ``multiples`` rounded them up.

    NOTE [ A joint plan's padding on multiples ]: with ``pad_to_multiple_of`` the plan is
    solved on the lengths rounded up, so its objective and bound counted the padding above
    them: a multiple of 8 seemed to cut padding (300 random pairs, K = 4: 33.3% against 42.7%
    without, where the batches padded 51.5%; s27). The rounding's own padding is the same for
    every plan on those multiples, so adding it to both keeps the bound certified (for such
    plans) and the gap's numerator; the ratio is then over the real elements, as the report's.
    """
    if all(m == 1 for m in multiples):
        return summary
    rounded = np.stack([round_up(sub[:, d], m) for d, m in enumerate(multiples)], axis=1)
    real = sum(exact_sizes(sub, size))
    extra = sum(exact_sizes(rounded, size)) - real
    objective = summary["objective"] + extra
    lower = summary["lower_bound"] + extra
    return {
        **summary,
        "objective": objective,
        "lower_bound": lower,
        "padding_ratio": objective / real if real else 0.0,
        "gap": (objective - lower) / objective if objective else 0.0,
        "rounding": extra,
    }


def _fit_joint(
    sub: np.ndarray,
    joint: Joint,
    max_shapes: int | None,
    size: Any,
    multiples: Sequence[int],
    cache: Any,
    rule: BatchRule,
    too_few: list[int] | None = None,
) -> tuple[tuple[np.ndarray, ...], np.ndarray, dict[str, Any], np.ndarray | None]:
    """One group's joint plan: per-input boundaries, the cells as index tuples, a summary, and
    the samples of ``sub`` left out (``oversize="drop"`` where ``max_shapes`` is below the
    cells within max_tokens that cover every sample, whose count ``too_few`` gets; else
    ``None``)."""
    table = np.stack([round_up(sub[:, d], m) for d, m in enumerate(multiples)], axis=1)
    if cache is True:
        from bucketloader.cache import BucketCache

        cache = BucketCache()
    hits = getattr(cache, "hits", None)  # (whether this plan was read: report() and the ranks)
    # NOTE [ Cells within a size limit ]: under max_tokens, cells within it where the cell of
    # every input's longest would not fit (and every sample does: samples that do not are
    # left out before with "drop"; the limit is then no part of the key, and the plans of
    # budgets above it are unchanged). With "single", the samples above it take one cell of
    # their own (each input's longest of them: batches of one) and the rest K - 1 within it;
    # planned over every sample, their cell took others too (GSM8K[:2000], max_tokens=290, K =
    # 4: one sample of 299 put 125 in batches of one in a cell of 158 + 205; s24-rev). A K
    # below the cells within it that cover every sample keeps the samples K cells hold, the
    # most (NOTE [ Covering the most samples within a size limit ])
    budget = rule.budget
    cap = None
    alone: np.ndarray | None = None
    k = int(max_shapes or 1)
    if budget is not None and isinstance(size, str):
        big = size_values(table, size) > budget.max_tokens
        rest = table[~big]
        if rest.size and exact_sizes(rest.max(axis=0, keepdims=True), size)[0] > budget.max_tokens:
            if not big.any():
                cap = budget.max_tokens
            elif k > 1:  # (oversize="single": "drop" left them out, "error" names them later)
                alone = big
        elif rest.size and big.any() and k > 1 and budget.oversize == "single":
            # the rest within one cell within the budget: still their own cell for the samples
            # above it, K - 1 for the rest; planned over every sample (no limit), their cell
            # took samples within the budget too, each alone (5,000 pairs up to 900 + 900 and 5
            # of 5,000 + x, max_tokens=4096, K = 2: 221 in batches of one, now the 5; s25-rev)
            alone = big
    if alone is not None and budget is not None:
        fewest = budget.oversize == "single"  # ("error" names the samples above it later)
        planned = _fit_alone(table, alone, joint, k, size, cache, budget.max_tokens, fewest)
        if planned is not None:
            return (*_joint_summary(*planned, cache, hits), None)
    try:
        sol = joint.solve(table, k, size=size, cache=cache, max_size=cap)
    except TooFewCells as exc:
        if budget is not None and budget.oversize == "error":
            need, exact = exc.need, exc.exact

            def few(o: Spell) -> str:  # (more than two inputs, or a coarsened grid: a cover's)
                takes, leaves = (
                    (f"takes at least {need} cells within {o('max_tokens')}", "leaves")
                    if exact
                    else (
                        f"took {need} cells within {o('max_tokens')} in the cover found (not "
                        "proved the fewest)",
                        "found",
                    )
                )
                return (
                    f"{o('max_tokens', cap)} {leaves} no plan of {o('max_shapes', k)} cells: a "
                    "cell pads every input to the longest of its samples there, and covering "
                    f"every sample {takes}. Pass {o('max_shapes', need)} or more, or raise "
                    f"{o('max_tokens')}"
                )

            raise OptionError(few) from None
        if too_few is not None:
            too_few.append(exc.need)
        # NOTE [ Covering the most samples within a size limit ]: "drop" keeps the samples K
        # cells within the budget hold, chosen to hold the most; "single" batches alone those
        # K - 1 such cells do not hold (a K-th cell above the budget holds them)
        held = None
        if budget is not None and cap is not None:
            held = _fit_fewest(table, joint, k, size, cache, cap, budget)
        if held is not None:
            sol, cells, lost = held
            return (*_joint_summary(sol, cells, exc.need, cache, hits), lost)
        # as before the limit (K = 1 with "single", or a fallback): the plan over every
        # sample, the samples of its cells above the budget dropped or batched alone
        sol = joint.solve(table, k, size=size, cache=cache)
    except OverLimit:
        # a coarsened grid rounds a sample past the budget: the plan over every sample, as
        # before the limit (a cell above the budget is then the error that names it, or its
        # samples dropped or batched alone)
        sol = joint.solve(table, k, size=size, cache=cache)
    return (*_joint_summary(sol, sol.cells, 0, cache, hits), None)


def _fit_fewest(
    table: np.ndarray,
    joint: Joint,
    k: int,
    size: str,
    cache: Any,
    cap: float,
    budget: Any,
) -> tuple[Any, np.ndarray, np.ndarray | None] | None:
    """:func:`_fit_joint` where K cells within ``cap`` cannot hold every sample: the solution,
    the cells, and with "drop" the samples left out (the plan is over the rest; "single":
    :func:`_fit_alone`, nothing left out); ``None`` where neither applies (K = 1 with
    "single", or a grid that rounds a sample past ``cap``)."""
    if budget.oversize == "single":
        if k == 1:
            return None
        none = np.zeros(table.shape[0], dtype=bool)
        planned = _fit_alone(table, none, joint, k, size, cache, cap, True)
        return None if planned is None else (*planned[:2], None)
    try:
        lost = ~cover_most(table, k, size=size, max_size=cap)
        sol = joint.solve(table[~lost], k, size=size, cache=cache, max_size=cap)
    except (TooFewCells, OverLimit):
        return None
    return sol, sol.cells, lost


def _fit_alone(
    table: np.ndarray,
    alone: np.ndarray,
    joint: Joint,
    k: int,
    size: str,
    cache: Any,
    cap: float,
    fewest: bool,
) -> tuple[Any, np.ndarray, int] | None:
    """With oversize="single", the samples ``alone`` (above the budget ``cap``) in one cell of
    their own and the rest in ``k - 1`` cells within it; where those cannot hold the rest, the
    samples the ``k - 1`` cells holding the most leave out go alone too, with ``fewest``
    (NOTE [ Covering the most samples within a size limit ]). Returns the solution with its
    summary over every sample, the cells and the cells within ``cap`` that cover every sample
    (0 where ``k - 1`` do), or ``None`` (a coarsened grid rounds a sample past ``cap``: the
    plan over every sample)."""
    need = 0
    try:
        try:
            sol = joint.solve(table[~alone], k - 1, size=size, cache=cache, max_size=cap)
        except TooFewCells as exc:
            if not fewest:
                raise
            need = exc.need
            alone = alone.copy()
            alone[~alone] = ~cover_most(table[~alone], k - 1, size=size, max_size=cap)
            sol = joint.solve(table[~alone], k - 1, size=size, cache=cache, max_size=cap)
    except (TooFewCells, OverLimit):
        return None
    own = table[alone].max(axis=0, keepdims=True)
    # the summary over every sample: the K - 1 cells' padding and bound plus what the samples
    # above the budget pad in their own cell (the bound is then that of plans that give them
    # one, as "single" does)
    extra = joint_padding(table[alone], np.ones(int(alone.sum()), np.int64), own, size)
    objective, lower = sol.objective + extra, sol.lower_bound + extra
    real = sum(exact_sizes(table, size))
    sol = dataclasses.replace(
        sol,
        objective=objective,
        lower_bound=lower,
        gap=(objective - lower) / objective if objective else 0.0,
        padding_ratio=objective / real if real else 0.0,
    )
    return sol, np.concatenate([sol.cells, own]), need


def _joint_summary(
    sol: Any, cells: np.ndarray, need: int, cache: Any, hits: Any
) -> tuple[tuple[np.ndarray, ...], np.ndarray, dict[str, Any]]:
    """:func:`_fit_joint`'s answer: the ``cells`` (``sol``'s, and one for samples above the
    budget with oversize="single"), the rest from the solution ``sol`` (``need``: the cells
    within max_tokens that cover every sample, where ``max_shapes`` fell short of them, else
    0)."""
    bs = tuple(np.unique(cells[:, d]) for d in range(cells.shape[1]))
    idx = np.stack([np.searchsorted(b, cells[:, d]) for d, b in enumerate(bs)], axis=1)
    summary = {
        "status": sol.status,
        "objective": sol.objective,
        "padding_ratio": sol.padding_ratio,
        "lower_bound": sol.lower_bound,
        "gap": sol.gap,
        "seconds": sol.solve_seconds,
        "cells": len(cells),
        "cached": isinstance(hits, int) and cache.hits > hits,
    }
    if need:  # (K below it: the plan holds the samples K cells within the budget hold most)
        summary["cover"] = need
    return bs, idx, summary


def _left_out(filtered: Mapping[str, int]) -> str:
    parts = [f"{v} {k.replace('_', ' ')}" for k, v in filtered.items() if v and k != "truncated"]
    return ", ".join(parts) or "none"


def parse_lengths(
    lengths: LengthsLike | Mapping[str, LengthsLike],
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(declared lengths, (N, D) table, input names)."""
    if isinstance(lengths, Mapping):
        names = tuple(str(k) for k in lengths)
        table = input_table(lengths)
        table.setflags(write=False)
        return table, table, names
    held = isinstance(lengths, np.ndarray) and lengths.ndim == 1  # NOTE [ A lean build ]
    arr = as_lengths(lengths, ndim=(1, 2), narrow=held)
    if isinstance(lengths, np.ndarray) and np.shares_memory(arr, lengths):
        arr = arr.view() if held else arr.copy()  # held as it is, or our own copy
    arr.setflags(write=False)
    if arr.ndim == 1:
        return arr, arr[:, None], ("length",)
    if arr.shape[1] == 0:
        raise ValueError(f"lengths of shape {arr.shape} has no inputs; give (N, D) with D >= 1")
    if arr.shape[1] > MAX_INPUTS:
        raise ValueError(
            f"lengths of shape {arr.shape} reads as {arr.shape[1]} inputs per sample (batches of "
            f"{arr.shape[1] + 1} dimensions), more than {MAX_INPUTS}: lengths are one int per "
            "sample, or one per input (source and target, say). If these rows are the samples "
            "themselves (token ids padded to one length), pass their lengths instead: "
            "[len(x) for x in rows], attention_mask.sum(1), or "
            "bucketloader.hf.lengths(dataset, 'input_ids')"
        )
    return arr, arr, tuple(str(d) for d in range(arr.shape[1]))


#: The most inputs a sample's lengths may name (``(N, D)`` lengths, ``D <= MAX_INPUTS``): a
#: batch has ``D + 1`` dimensions, and a table wider than this is the samples themselves (token
#: rows padded to one length, ``tokenizer(..., padding="max_length")``) read as lengths, whose
#: plan was a single shape of one dimension per token, silently (s16-user).
MAX_INPUTS = 8


def parse_groups(groups: Any, n: int) -> tuple[np.ndarray | None, tuple[int, ...]]:
    if groups is None:
        return None, (0,)
    try:
        arr = as_lengths(groups, name="groups")
    except (TypeError, ValueError) as exc:  # (the lengths' hints: "count their tokens", ...)
        found = str(exc).split(";")[0].replace("integer lengths", "integer group ids")
        raise type(exc)(
            f"{found}; a group id is an int >= 0 per sample (GroupedDataset(...).groups; for "
            "names, np.unique(names, return_inverse=True)[1])"
        ) from None
    if arr.size != n:
        raise ValueError(
            f"groups must hold one group id per sample ({n} samples), got {arr.size} group ids"
        )
    values, inverse = np.unique(arr, return_inverse=True)
    return inverse.astype(np.int64), tuple(int(v) for v in values)


def group_boundaries(
    boundaries: Any, gval: int, gvals: tuple[int, ...], names: tuple[str, ...]
) -> list[Any] | None:
    if boundaries is None:
        return None
    if isinstance(boundaries, Mapping) and set(boundaries) == set(gvals):
        boundaries = boundaries[gval]
    if len(names) == 1 and not isinstance(boundaries, Mapping):
        return [boundaries]
    return per_input("boundaries", boundaries, names, scalar=(np.ndarray,))


def _raise_small_budget(
    cells: Cells,
    cell_of: np.ndarray,
    table: np.ndarray,
    size: Size,
    rule: BatchRule,
    multiples: Sequence[int],
) -> None:
    budget = rule.budget
    max_tokens = budget.max_tokens if budget is not None else 0
    csize = size_values(cells.lengths, size)
    worst = int(np.argmax(np.where(cells.batch < 1, csize, -1)))
    need = exact_sizes(cells.lengths[worst : worst + 1], size)[0]
    members = np.flatnonzero(cell_of == worst)
    longest = int(members[np.argmax(size_values(table[members], size))])
    value = table[longest].tolist()
    names = cells.input_names
    shown = value[0] if len(names) == 1 else dict(zip(names, value, strict=True))
    own = exact_sizes(table[longest : longest + 1], size)[0]
    padded = [int(round_up(x, m)) for x, m in zip(value, multiples, strict=True)]
    rounded = exact_sizes(np.array([padded]), size)[0]
    if len(names) > 1 and rounded <= max_tokens:
        # every sample fits, their cell does not: it pads each input to the longest of its
        # samples there (GSM8K[:2000], max_tokens=299, its longest pair; 4 joint cells: (158, 205))
        cell = tuple(int(x) for x in cells.lengths[worst])

        def tight(o: Spell) -> str:  # (the command line plans no lattice, and has no TokenBudget)
            lattice = f", or {o('num_buckets')}= per input" if o("num_buckets") else ""
            alone = (
                f", or give those samples batches of one: {o('max_tokens')}=TokenBudget(..., "
                f"{o('oversize', repr('single'))}) ('drop' would leave them out)"
                if o("oversize")
                else ""
            )
            return (
                f"{o('max_tokens', max_tokens)} is below the padded size {need} of the cell "
                f"{cell}, though each of its samples fits (the largest, index {longest} with "
                f"length {shown}, has size {own}): a cell pads every input to the longest of "
                f"its samples there. Raise {o('max_tokens')} to at least {need}, or plan more, "
                f"tighter cells (more {o('max_shapes')}{lattice}: the lattice's cells are not "
                f"chosen by {o('max_tokens')}){alone}"
            )

        raise OptionError(tight)
    if rounded > own:  # (it fits, but not rounded up: no cell within the budget holds it)
        shown = f"{shown}, of size {own}, {rounded} rounded up to pad_to_multiple_of"

    def small(o: Spell) -> str:  # (the command line filters nothing, and has no TokenBudget)
        fixes = [f"Raise {o('max_tokens')} to at least {need}"]
        if o("overflow"):
            fixes.append(
                f"filter the longest samples ({o('max_length', '...')}, "
                f"{o('overflow', repr('drop'))} or 'truncate')"
            )
        if o("oversize"):
            fixes.append(
                f"choose a policy for them: {o('max_tokens')}=TokenBudget(..., "
                f"{o('oversize', repr('single'))} | 'drop')"
            )
        told = fixes[0] if len(fixes) == 1 else ", ".join(fixes[:-1]) + ", or " + fixes[-1]
        return (
            f"{o('max_tokens', max_tokens)} is below the padded size {need} of the largest "
            f"bucket; its longest sample is index {longest} with length {shown}. {told}"
        )

    raise OptionError(small)
