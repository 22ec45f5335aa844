"""How dynamic is my data? ``analyze()`` lengths, a dataset or a DataLoader before training.

The report answers three questions: how varied the lengths are (N, distinct lengths, quantiles),
how many distinct batch shapes a loader actually produces (by scanning its batches, like the
Gaudi ``data_dynamicity`` tool), and what each bucketing strategy would cost at each shape budget
k (padding ratio and shape count), with a recommended k under a stated rule and a plot.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from bucketloader._types import LazyModule, Strategy
from bucketloader._validation import (
    Lengths,
    MissingKeyError,
    as_lengths,
    check_bool,
    check_int,
    checks_options,
)
from bucketloader.analysis._plot import pct, plot_report
from bucketloader.analysis._scan import (
    dataset_lengths,
    from_pandas,
    is_dataloader,
    is_dataset,
    scan_batches,
)
from bucketloader.analysis.calibration import Calibration
from bucketloader.analysis.recommend import (
    Candidate,
    check_num_buckets,
    check_padding_target,
    check_strategies,
    every_length,
    recommend_num_buckets,
)
from bucketloader.histogram import LengthHistogram
from bucketloader.plan.limits import zero_lengths_field, zero_lengths_note
from bucketloader.strategies import STRATEGIES

if TYPE_CHECKING:
    from torch.utils import data as torch_data
else:  # torch stays unimported (NOTE [ Annotations that introspection can evaluate ] in _types)
    torch_data = LazyModule("torch.utils.data")

#: Strategies compared by default (``"lp"`` reaches the same optimum as ``"optimal"``, slower).
DEFAULT_STRATEGIES = ("optimal", "percentile", "equal_mass", "linear", "geometric", "pad_to_max")
#: Shape budgets compared by default.
DEFAULT_NUM_BUCKETS = (4, 8, 16, 32)


@dataclass(frozen=True, eq=False)
class DynamicityReport:
    """What :func:`analyze` found. ``str(report)`` is the text summary; :meth:`plot` the picture.

    Attributes:
        source: what was analysed (for titles).
        histogram: the length histogram (``None`` for a DataLoader scanned without ``column``).
        rows: one :class:`~bucketloader.analysis.Candidate` per strategy × k (padding ratio,
            shapes; plan totals and predicted time with ``batch_size`` and ``costs``).
        recommended: the row chosen by :attr:`rule` (``None`` without lengths).
        rule: the recommendation rule, in words.
        padding_target: the padding ratio the rule aims under.
        dynamic: dynamic-padding baseline (random batches padded to their longest), if asked.
        batch_shapes: field → Counter of batch shapes, from scanning a DataLoader.
        num_batches: batches scanned.

    Example:
        >>> report = analyze([3, 4, 4, 9, 10, 31] * 10, num_buckets=[1, 2])
        >>> len(report.rows), report.recommended.num_buckets
        (12, 2)
        >>> print(str(report).splitlines()[1])
          samples 60 | distinct lengths 5 | min 3 | median 4 | max 31 | mean 10.2
    """

    source: str
    histogram: LengthHistogram | None
    rows: tuple[Candidate, ...] = ()
    recommended: Candidate | None = None
    rule: str = ""
    padding_target: float = 0.05
    dynamic: dict[str, Any] | None = None
    batch_shapes: dict[str, Counter[tuple[int, ...]]] = field(default_factory=dict)
    num_batches: int = 0

    def row(self, strategy: str, num_buckets: int) -> Candidate:
        """The row of ``strategy`` at ``num_buckets``."""
        for r in self.rows:
            if r.strategy == strategy and r.num_buckets == num_buckets:
                return r
        rows = sorted({(r.strategy, r.num_buckets) for r in self.rows})
        raise MissingKeyError(
            f"no row for strategy={strategy!r}, num_buckets={num_buckets!r}; the report has "
            f"(strategy, num_buckets) rows {rows}"
        )

    def summary(self) -> str:
        """The report as text."""
        return _summary(self)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (what ``bucketloader report --json`` writes). Its
        ``"zero_length"`` is ``{"count": ..., "message": ...}``: the samples of length 0 and the
        warning the text ends with (``None`` for none), or ``None`` without lengths
        (:func:`~bucketloader.plan.limits.zero_lengths_field`).

        Example:
            >>> analyze([0, 3, 4], num_buckets=[1]).to_dict()["zero_length"]["count"]
            1
        """
        h = self.histogram
        return {
            "source": self.source,
            "lengths": None if h is None else _stats(h),
            "rows": [
                {
                    "strategy": r.strategy,
                    "num_buckets": r.num_buckets,
                    "boundaries": list(r.boundaries),
                    "padding_ratio": r.padding_ratio,
                    "num_shapes": r.num_shapes,
                }
                for r in self.rows
            ],
            "recommended": None
            if self.recommended is None
            else {
                "strategy": self.recommended.strategy,
                "num_buckets": self.recommended.num_buckets,
            },
            "rule": self.rule,
            "dynamic": self.dynamic,
            "num_batches": self.num_batches,
            "batch_shapes": {
                name: [{"shape": list(s), "count": c} for s, c in counts.most_common()]
                for name, counts in self.batch_shapes.items()
            },
            "zero_length": None if h is None else zero_lengths_field(h),
        }

    def plot(self, path: str | Path, *, dpi: int = 130) -> Path:
        """Write an image: the length histogram with the recommended boundaries over it, and the
        padding-versus-k frontier of every strategy (and the batch shapes of a scanned loader).
        The format follows the suffix of ``path`` (one of :data:`PLOT_SUFFIXES`; checked before
        any drawing), and its directory must exist (none is created, as ``savefig`` creates
        none). Needs matplotlib. ``dpi`` is at most :data:`MAX_DPI`."""
        dpi = check_int("dpi", dpi, minimum=10, maximum=MAX_DPI)
        return plot_report(self, image_path(path), dpi=dpi)


#: The finest resolution :meth:`DynamicityReport.plot` draws at: its figure is up to ~20 x 5
#: inches, so 1200 dpi is already ~24,000 x 5,900 pixels (a ~0.5 GB canvas); 20,000 dpi asked
#: for a ~150 GB canvas, and 10**6 failed inside matplotlib without naming dpi.
MAX_DPI = 1200


#: Image suffixes :meth:`DynamicityReport.plot` (and ``bucketloader report --plot``) writes.
PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp", ".eps", ".ps", ".tif", ".tiff")


def image_path(path: Any, name: str = "path") -> Path:
    """``path`` as a ``Path`` to an image file, or one clear error (matplotlib wrote ``out`` to
    ``out.png`` and ``/tmp`` to ``/tmp.png`` while returning the path it was given). ``name``
    is the argument the message names: a command's option (``"--plot"``) reads as one. The
    directory must exist: it is not created (a typo made a directory tree), as matplotlib's
    ``savefig``, ``open`` or ``numpy.save`` do not create one.

    Example:
        >>> image_path("~/r.svg").name
        'r.svg'
        >>> image_path("r.txt", "--plot")
        Traceback (most recent call last):
        ...
        ValueError: --plot must name an image file ending in one of .png, .svg, .pdf, .jpg, \
.jpeg, .webp, .eps, .ps, .tif, .tiff, got --plot r.txt; e.g. --plot report.png
    """
    option = name.startswith("-")  # (a command's --plot reads `--plot x`, a keyword `path='x'`)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got {name}={path!r}")
    out = Path(path).expanduser()
    if out.suffix.lower() not in PLOT_SUFFIXES or out.is_dir():
        got = f"{name} {os.fspath(path)}" if option else f"{name}={os.fspath(path)!r}"
        raise ValueError(
            f"{name} must name an image file ending in one of {', '.join(PLOT_SUFFIXES)}, got "
            f"{got}{' (a directory)' if out.is_dir() else ''}; e.g. "
            f"{name}{' report.png' if option else '=' + repr('report.png')}"
        )
    check_parent(name, path)
    return out


def check_parent(name: str, path: str | os.PathLike[str]) -> None:
    """An output file's directory must exist (it is not created: NOTE in :func:`image_path`);
    the error names the option or argument, the directory and the fix.

    Example:
        >>> try:
        ...     check_parent("--json", "/no/such/dir/report.json")
        ... except FileNotFoundError as exc:
        ...     print(str(exc).replace(": the", ":\\nthe").replace("; ", ";\\n"))
        --json /no/such/dir/report.json:
        the directory /no/such/dir does not exist (nothing creates it);
        create it first (mkdir -p /no/such/dir) or name a file in an existing directory
    """
    parent = Path(path).expanduser().parent
    if parent.is_dir():
        return
    option = name.startswith("-")
    got = f"{name} {os.fspath(path)}" if option else f"{name}={os.fspath(path)!r}"
    # a file where a directory of the path goes: no mkdir makes that directory (s34-user:
    # `--plot notes/r.png` beside a file `notes` was told "the directory notes is not a
    # directory; create it first (mkdir -p notes)", which fails with "File exists")
    blocker = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise NotADirectoryError(
            f"{got}: {blocker} is a file, not a directory, so nothing can be written under it; "
            "name a file in an existing directory"
        )
    fix = f"mkdir -p {parent}" if option else f"os.makedirs({str(parent)!r})"
    raise FileNotFoundError(
        f"{got}: the directory {parent} does not exist (nothing creates it); create it first "
        f"({fix}) or name a file in an existing directory"
    )


@checks_options
def analyze(
    data: ArrayLike | LengthHistogram | torch_data.Dataset[Any] | torch_data.DataLoader[Any],
    *,
    column: str | int | Callable[[Any], Any] | None = None,
    num_buckets: int | Iterable[int] = DEFAULT_NUM_BUCKETS,
    strategy: str | Strategy | Sequence[str | Strategy] | None = None,
    batch_size: int | None = None,
    padding_target: float = 0.05,
    max_batches: int | None = None,
    progress: bool | None = None,
    costs: Calibration | Mapping[str, float] | None = None,
) -> DynamicityReport:
    """Analyse how dynamic ``data`` is and what bucketing would cost.

    Args:
        data: per-sample lengths (list, array, tensor, pandas Series, ``LengthHistogram``), a
            map-style dataset (each item measured: ``len(item[column])``, or its first
            dimension), a pandas DataFrame with ``column=`` (read by position, not label) or a
            ``DataLoader`` (its batches are scanned and the distinct shapes of every tensor field
            counted; the lengths are its ``BucketSampler``'s, or its dataset's items measured
            when ``column`` is given).
        column: the field to measure in dataset items (a key, or a function item → length).
        num_buckets: the shape budgets k to compare.
        strategy: the strategies to compare, names or callables (default
            :data:`DEFAULT_STRATEGIES`).
        batch_size: if given, also simulate dynamic padding (random batches of this size padded
            to their longest sample) as the baseline bucketing is compared against.
        padding_target: the rule recommends the smallest k whose best strategy pads at most this
            (padding elements per real element); if none does, the largest k.
        max_batches: scan at most this many DataLoader batches.
        progress: show progress bars (default: when stderr is a terminal).
        costs: measured costs of your model, a :class:`~bucketloader.analysis.Calibration` from
            ``calibrate(...)`` or a mapping (``compile_seconds_per_shape``,
            ``seconds_per_token``, optionally ``seconds_per_step``, and the run length the
            compiles amortise over, ``num_epochs`` or ``num_steps``; default one epoch). With
            costs (and ``batch_size``) the recommendation minimises predicted compile +
            padded-compute time instead of following ``padding_target``
            (:func:`~bucketloader.recommend_num_buckets` has the same rules and more options).

    Example:
        >>> r = analyze([3, 4, 4, 9, 10, 31] * 10, num_buckets=[1, 2, 4], padding_target=0.1)
        >>> r.recommended.strategy, r.recommended.num_buckets, round(r.recommended.padding_ratio, 3)
        ('optimal', 4, 0.016)
        >>> r.row("pad_to_max", 4).num_shapes
        1
    """
    num_buckets = check_num_buckets(num_buckets)  # before any (slow) scan of the data
    if strategy is None:
        strategy = [s for s in DEFAULT_STRATEGIES if s in STRATEGIES]
    check_strategies(strategy)
    padding_target = check_padding_target(padding_target, stacklevel=4)  # (checks_options)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
    if max_batches is not None:
        max_batches = check_int("max_batches", max_batches, minimum=1)
    if progress is not None:  # (checked on every path: lengths never show a bar)
        progress = check_bool("progress", progress)
    if costs is not None and batch_size is None:
        raise ValueError(
            "costs needs the batch size the model trains with: pass batch_size=..., "
            "got batch_size=None"
        )
    shapes: dict[str, Counter[tuple[int, ...]]] = {}
    num_batches = 0
    lengths: np.ndarray | None = None
    hist: LengthHistogram | None = None
    if isinstance(data, Mapping):
        raise TypeError(
            f"data must be lengths, a LengthHistogram, a map-style dataset or a DataLoader, got "
            f"a {type(data).__name__} with keys {list(data)[:5]}; pass one of its values (e.g. "
            "one split of a DatasetDict, or one input's lengths: the lengths of several inputs, "
            "an image's height and width, are planned together by BucketSampler({...}, "
            "max_shapes=K), whose report() gives each K's padding)"
        )
    data, column = from_pandas(data, column)  # (labels, not positions: df[0] is a KeyError)
    if _is_iterable_dataset(data):  # (no len, no index: only its batches can be scanned)
        # a stream yields whole batches: batch_size=... was refused by the stream (s25-user)
        loader = (
            "DataLoader(data, batch_size=None, collate_fn=data.collator())"
            if callable(getattr(data, "collator", None))
            else "DataLoader(data, batch_size=...)"
        )
        raise TypeError(
            f"data is an iterable dataset ({type(data).__name__}), which has no length and no "
            f"index to measure items by; pass a DataLoader over it (analyze({loader}) counts "
            "the shapes of its batches) or its per-sample lengths"
        )
    if isinstance(data, LengthHistogram):
        hist, source = data, "histogram"
    elif is_dataloader(data):
        source = f"DataLoader over {type(data.dataset).__name__}"
        shapes, num_batches = scan_batches(data, max_batches=max_batches, show=progress)
        declared = getattr(data.batch_sampler, "lengths", None)  # a BucketSampler's own
        if column is not None:
            lengths = dataset_lengths(data.dataset, column, show=progress)
        elif isinstance(declared, np.ndarray) and declared.ndim == 1:
            lengths = declared
    elif is_dataset(data, column):
        source = type(data).__name__
        lengths = dataset_lengths(data, column, show=progress)
    else:
        source = "lengths"
        lengths = as_lengths(data)
    if lengths is not None:
        hist = LengthHistogram.from_lengths(Lengths(lengths))  # checked once, counted once
    if hist is None:
        return DynamicityReport(source, None, batch_shapes=shapes, num_batches=num_batches)
    run: dict[str, Any] = {}
    if costs is not None:  # the run length rides along with the costs (compiles amortise over it)
        if isinstance(costs, Mapping):
            costs = dict(costs)
            run = {k: costs.pop(k) for k in ("num_epochs", "num_steps") if k in costs}
        run["batch_size"] = batch_size
    with warnings.catch_warnings():  # (said once, above, at the caller's line)
        warnings.filterwarnings("ignore", "padding_target=", UserWarning)
        rec = recommend_num_buckets(
            hist,
            num_buckets=num_buckets,
            strategy=strategy,
            costs=costs,
            padding_target=padding_target,
            **run,
        )
    dynamic = None if batch_size is None else _dynamic_padding(hist, batch_size)
    return DynamicityReport(
        source,
        hist,
        rec.table,
        rec.best,
        rec.rule,
        padding_target,
        dynamic,
        shapes,
        num_batches,
    )


def _is_iterable_dataset(data: Any) -> bool:
    """A ``torch.utils.data.IterableDataset`` or a Hugging Face ``datasets.IterableDataset``
    (checked by name: neither package is imported here)."""
    return any(
        c.__name__ == "IterableDataset" and c.__module__.split(".")[0] in ("torch", "datasets")
        for c in type(data).__mro__
    )


def _dynamic_padding(hist: LengthHistogram, batch_size: int) -> dict[str, Any]:
    """Random batches (seeded) padded to their own longest sample: padding and shape count.

    The batches are drawn from the histogram's samples, not from ``lengths`` in their order, so
    the same lengths in any order (a ``.txt``, its Parquet shards, an engine's histogram) get
    the same baseline: drawn from the input's order, one file's lengths gave 108.9 % and its
    Parquet shards' histogram 105.3 % (session 15). One array of the samples is all it holds:
    shuffled in place (a permutation took a second one), the padding counted from sums (the
    padded batch minus its lengths took a third).
    """
    # (a histogram given, or lengths: NOTE [ A histogram stays a histogram ])
    why = f"batch_size={batch_size} (the dynamic-padding baseline simulates random batches)"
    perm = every_length(hist, why, "pass batch_size=None to skip the baseline")
    np.random.default_rng(np.random.SeedSequence([0, 0])).shuffle(perm)
    n_full = perm.size // batch_size
    shapes: set[tuple[int, int]] = set()
    pad = 0
    if n_full:
        full = perm[: n_full * batch_size].reshape(n_full, batch_size)
        longest = full.max(axis=1)
        pad += int(longest.sum()) * batch_size - int(full.sum())
        shapes.update((batch_size, int(m)) for m in np.unique(longest))
    rest = perm[n_full * batch_size :]
    if rest.size:
        pad += int((rest.max() - rest).sum())
        shapes.add((int(rest.size), int(rest.max())))
    total = hist.total
    return {
        "batch_size": batch_size,
        "padding_ratio": pad / total if total else 0.0,
        "num_shapes": len(shapes),
        "num_batches": int(n_full + (rest.size > 0)),
    }


def _stats(h: LengthHistogram) -> dict[str, Any]:
    return {
        "num_samples": h.num_samples,
        "num_distinct": h.num_values,
        "min": h.min,
        "median": int(h.quantile(0.5)),
        "max": h.max,
        "mean": h.total / h.num_samples,
    }


def _summary(r: DynamicityReport) -> str:
    out = [f"bucketloader dynamicity report: {r.source}"]
    h = r.histogram
    if h is not None:
        out.append(
            f"  samples {h.num_samples:,} | distinct lengths {h.num_values:,} | min {h.min:,} | "
            f"median {int(h.quantile(0.5)):,} | max {h.max:,} | mean {h.total / h.num_samples:,.1f}"
        )
        out.append(
            f"  unbucketed: {_count(h.num_values, 'distinct length')}, so up to "
            f"{_count(h.num_values, 'distinct shape')} (each recompiles under torch.compile / XLA)"
        )
    if r.dynamic is not None:
        d = r.dynamic
        out.append(
            f"  dynamic padding (random batches of {d['batch_size']}, each padded to its longest): "
            f"{pct(d['padding_ratio'])} padding, {_count(d['num_shapes'], 'distinct batch shape')}"
        )
    if r.rows:
        ks = sorted({row.num_buckets for row in r.rows})
        names = list(dict.fromkeys(row.strategy for row in r.rows))
        out.append("")
        out.append("  padding ratio (shapes used) by strategy and shape budget k")
        width = max(len(n) for n in names) + 2
        out.append("  " + "strategy".ljust(width) + "".join(f"k={k}".rjust(16) for k in ks))
        for name in names:
            cells = []
            for k in ks:
                row = r.row(name, k)
                mark = "*" if row is r.recommended else " "
                cells.append(f"{pct(row.padding_ratio)} ({row.num_shapes}){mark}".rjust(16))
            out.append("  " + name.ljust(width) + "".join(cells))
        best = r.recommended
        if best is not None:
            out.append("")
            out.append(
                f"  recommended (*): strategy={best.strategy!r}, k={best.num_buckets}: "
                f"{pct(best.padding_ratio)} padding, {_count(best.num_shapes, 'shape')}"
            )
            out.append(f"    boundaries: {list(best.boundaries)}")
            out.append(f"    rule: {r.rule}")
    if r.num_batches:
        out.append("")
        out.append(f"  DataLoader: {r.num_batches:,} batches scanned")
        for name, counts in r.batch_shapes.items():
            common = ", ".join(f"{tuple(s)} x{c}" for s, c in counts.most_common(3))
            more = f", ... ({len(counts) - 3} more)" if len(counts) > 3 else ""
            out.append(f"    {name}: {_count(len(counts), 'distinct shape')}; {common}{more}")
        if h is None:  # (s30-first: a plain loader's report stopped here, saying nothing more)
            out.append(
                "  no per-sample lengths, so no strategy is compared: pass column= to measure "
                "the DataLoader's dataset (column='input_ids', or column=len for items that are "
                "sequences)"
            )
    note = None if h is None else zero_lengths_note(h)
    if note is not None:  # (the boundaries above may start at 0: NOTE [ Samples of length 0 ])
        out += ["", f"warning: {note}"]  # (as the samplers warn, and precompute says it)
    return "\n".join(out)


def _count(n: int, noun: str) -> str:
    """``"1 shape"``, ``"2 shapes"``: a count with its noun in the right number."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
