"""ShapeTable: the promised batch shapes, small and picklable (what the collator keeps)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from bucketloader.plan.cells import Cells

#: Tokens a length may count that its sample does not hold (BOS / EOS and a few special tokens)
#: before a batch below half the shortest planned length is refused (NOTE [ A batch shorter
#: than every planned sample ]).
SHORT_SLACK = 4


def below_plan(longest: int, shortest: int) -> bool:
    """Whether a batch whose longest sample has ``longest`` elements is too short for a plan
    whose shortest sample has ``shortest`` (NOTE [ A batch shorter than every planned sample ]).

    Example:
        >>> below_plan(1_000, 160_000), below_plan(1, 3), below_plan(60, 100)
        (True, False, False)
    """
    return 2 * longest < shortest and shortest - longest > SHORT_SLACK


@dataclass(frozen=True, eq=False)
class ShapeTable:
    """Every batch shape an epoch can produce, and which one a batch of samples must take.

    Built by :meth:`BucketSpec.shape_table <bucketloader.plan.BucketSpec.shape_table>` (a
    sampler's :attr:`~bucketloader.BucketSampler.shape_table`) or by a stream; it holds only the
    plan's :class:`~bucketloader.plan.Cells`, so it pickles cheaply into DataLoader workers.

    Attributes:
        cells: the planned cells (boundaries, padded lengths and batch size of every cell).
        shapes: every batch shape ``(B, L_1, ..., L_D)`` an epoch can produce, sorted. With
            ``last_batch="keep"`` the smaller partial-batch shapes are listed too.
        last_batch: ``"pad"``, ``"fill"``, ``"drop"`` or ``"keep"``.
        truncate: per input, the length a longer sample is cut to before padding
            (``overflow="truncate"``, NOTE [ Length filters ] in :mod:`bucketloader.plan.limits`);
            ``None`` when the plan cuts nothing. The collator applies it.
        promoted: whether the plan batches leftovers in longer cells (NOTE [ Promotion of
            leftovers ] in :mod:`bucketloader.plan.promote`): only then may a batch mix cells
            when its first sample's cell covers the rest; the collator refuses such a batch
            of any other plan.
        shortest: per input, the shortest length the plan holds (a sampler's; ``None`` for a
            stream, which has not seen its lengths). A batch whose every sample is shorter is
            refused by :meth:`target` (NOTE [ A batch shorter than every planned sample ]).

    Example:
        >>> from bucketloader.plan import BucketSpec
        >>> spec = BucketSpec.build([3, 4, 9, 10, 10], num_buckets=2, batch_size=2)
        >>> table = spec.shape_table()
        >>> table.shapes
        ((2, 4), (2, 10))
        >>> table.target([7, 9])
        (2, 10)
    """

    cells: Cells
    shapes: tuple[tuple[int, ...], ...]
    last_batch: str
    truncate: tuple[int | None, ...] | None = None
    promoted: bool = False
    shortest: tuple[int, ...] | None = None

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the bucketed inputs (``("length",)`` for plain lengths)."""
        return self.cells.input_names

    @property
    def group_values(self) -> tuple[int, ...] | None:
        """The distinct group ids, or ``None`` without per-dataset groups."""
        return self.cells.group_values

    def target(self, lengths: ArrayLike, *, group: Any = None) -> tuple[int, ...]:
        """The planned full batch shape ``(B, L_1, ..., L_D)`` for a batch with these lengths.

        NOTE [ A batch shorter than every planned sample ]
        A sample longer than the last boundary is caught by the boundary itself, but the first
        cell has no lower edge: a dataset whose samples are all shorter than the lengths the
        sampler was given maps every batch into the first cell, a planned shape, which every
        other check accepts. Session 20 gave a sampler LibriSpeech's lengths in audio samples
        and a dataset of ``(T, 80)`` frames (160 times shorter): every batch came out
        ``(10, 174560, 80)``, 558 MB of which about 1% was data, silently. A sampler's table
        therefore keeps the shortest planned length per input, and a batch whose *longest*
        sample is below half of it, and more than ``SHORT_SLACK`` = 4 elements below it, is
        refused. No batch of the plan can be below it at all; the half leaves room for lengths
        declared a little off (durations rounded, a 0.9x speed perturbation), and the slack for
        BOS / EOS counted in the lengths but not in the sample (a shortest length of 3 for a
        1-token sample: half alone refused it), which the other checks accept where they keep
        the sample in its cell, while units that differ by 4 (characters and tokens) or 160
        (audio samples and 10 ms frames) are caught.

        ``B`` is the planned full batch size of the cell even when the batch holds fewer samples
        (the collator pads rows under ``last_batch="pad"``). Samples of one planned batch share a
        cell, or its first sample's cell covers them all (a sampler's batch that holds promoted
        samples: NOTE [ Promotion of leftovers ] in :mod:`bucketloader.plan.promote`) and the
        batch takes that cell; any other batch mixing cells gets the smallest planned cell
        covering all its samples.

        Args:
            lengths: actual lengths of the samples, ``(n,)`` for one input or ``(n, D)``.
            group: the batch's group id (required with per-dataset groups).

        Raises:
            ValueError: empty batch, wrong shape, missing/unknown group, or a length no planned
                cell covers (naming the position in the batch and the value).
        """
        cells = self.cells
        d = len(cells.input_names)
        arr = np.asarray(lengths)
        if arr.ndim == 1 and d == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[1] != d or arr.shape[0] == 0:
            raise ValueError(
                f"lengths must be a non-empty array of shape (n,) or (n, {d}) for inputs "
                f"{list(cells.input_names)}, got shape {arr.shape}"
            )
        gi = cells.group_index(group)
        bs = cells.boundaries[gi]
        where = "" if cells.group_values is None else f" in group {cells.group_values[gi]}"
        for j, b in enumerate(bs):
            over = arr[:, j] > b[-1]
            if over.any():
                pos = int(np.argmax(over))
                name = "" if d == 1 else f"input {cells.input_names[j]!r} "
                raise ValueError(
                    f"sample at position {pos} of the batch has {name}length "
                    f"{int(arr[pos, j])}, beyond the longest planned length {int(b[-1])}{where}; "
                    "the sampler was planned on other lengths: rebuild it on the lengths your "
                    "dataset actually produces"
                )
        shortest = getattr(self, "shortest", None)  # (None in a table pickled before it)
        if shortest is not None:  # NOTE [ A batch shorter than every planned sample ]
            for j, low in enumerate(shortest):
                if below_plan(int(arr[:, j].max()), low):
                    name = "" if d == 1 else f"input {cells.input_names[j]!r} "
                    raise ValueError(
                        f"every sample of the batch has {name}length below half of {low}, the "
                        f"shortest length the sampler was planned on (the longest here is "
                        f"{int(arr[:, j].max())}); the sampler was planned on other lengths "
                        "(audio samples where the dataset yields feature frames?): rebuild it "
                        "on the lengths your dataset actually produces"
                    )
        ids = cells.cell_of(arr, gi)
        cell = int(ids[0])
        if cell < 0 or ((ids != cell).any() and (arr > cells.lengths[cell]).any()):
            cell = cells.covering(arr, gi)
        if cell < 0:
            raise ValueError(
                f"no planned shape covers the batch's longest lengths "
                f"{dict(zip(cells.input_names, arr.max(axis=0).tolist(), strict=True))}{where}; "
                "rebuild the sampler on the lengths your dataset actually produces"
            )
        return cells.shapes[cell]

    def __repr__(self) -> str:
        return (
            f"ShapeTable({len(self.shapes)} shapes, inputs={list(self.input_names)}, "
            f"last_batch={self.last_batch!r})"
        )


class PlannedBatch(list):  # type: ignore[type-arg]
    """A list of samples that carries the full planned shape ``(B, L_1, ..., L_D)`` of its step.

    A stream split over ranks may fill a step's batch with shorter samples than its cell's
    (NOTE [ A stream split over ranks ] in :mod:`bucketloader.stream._schedule`), so the
    samples alone no longer say which shape every rank planned for the step;
    :class:`~bucketloader.PadCollator` pads to ``planned_shape`` when a batch carries one. It is
    a plain ``list`` otherwise (and pickles with its shape into and out of DataLoader workers).

    Attributes:
        planned_shape: the step's full batch shape.
        num_real: the first ``num_real`` samples are real; the rest are stand-ins for a step a
            rank has no data for, which the collator turns into padding rows (``sample_mask``
            False).

    Example:
        >>> batch = PlannedBatch([[1, 2], [3]], planned_shape=(4, 8))
        >>> batch, batch.planned_shape, batch.num_real
        ([[1, 2], [3]], (4, 8), 2)
    """

    def __init__(
        self,
        samples: Iterable[Any] = (),
        *,
        planned_shape: tuple[int, ...],
        num_real: int | None = None,
    ) -> None:
        super().__init__(samples)
        self.planned_shape = tuple(int(x) for x in planned_shape)
        self.num_real = len(self) if num_real is None else int(num_real)
