"""Shared literals and the extension-point protocols, each defined once.

Every option that takes one of a fixed set of words validates against the tuple here (through
:func:`bucketloader._validation.check_choice`), so the words and their error messages cannot drift
between the sampler, the stream, the collator and the analysis tools.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, runtime_checkable

from numpy.typing import ArrayLike

if TYPE_CHECKING:  # pragma: no cover
    from bucketloader.histogram import LengthHistogram
    from bucketloader.solution import JointSolution, Solution

#: Per-sample lengths as the public entry points take them: a list, a numpy array or a torch
#: tensor (anything :func:`numpy.asarray` reads), checked by
#: :func:`bucketloader._validation.as_lengths`.
LengthsLike: TypeAlias = ArrayLike
#: One value for every bucketed input, or one per input (a sequence in input order, or a
#: mapping input name -> value).
PerInput: TypeAlias = int | Sequence[int] | Mapping[str, int]
#: How a stream measures a sample: ``None`` (``len(sample)``), a key, several keys (one per
#: bucketed input) or a callable ``sample -> length`` (or a tuple of lengths).
LengthFn: TypeAlias = str | Sequence[str] | Callable[[Any], Any] | None

#: What happens to a bucket's partial last batch (see NOTE [ last_batch and replicas ] in
#: :mod:`bucketloader.plan.epoch`).
LAST_BATCH = ("drop", "fill", "keep", "pad")

#: Which side padding goes on.
SIDES = ("left", "right")

#: What happens to a sample longer than the last boundary.
OVERFLOW = ("drop", "error", "truncate")

#: What happens to a bucket whose padded size exceeds ``max_tokens`` (a ``TokenBudget`` option).
OVERSIZE = ("drop", "error", "single")

#: How ``max_tokens`` counts a padded shape of several inputs.
SIZES = ("prod", "sum")
Size = Literal["prod", "sum"] | Callable[[tuple[int, ...]], int]

#: Padding objectives: pad elements, or ``b**2 - L**2`` (attention-like compute).
COSTS = ("linear", "quadratic")


class Strategy(Protocol):
    """A bucketing strategy: a pure function of a length histogram.

    ``fn(hist, num_buckets, **options)`` returns at most ``num_buckets`` strictly increasing
    boundaries whose last one covers ``hist.max`` (an array, or a
    :class:`~bucketloader.strategies.StrategyResult` that also reports how it was solved).
    """

    def __call__(self, hist: LengthHistogram, num_buckets: int, /, **options: Any) -> Any: ...


@runtime_checkable
class Cache(Protocol):
    """What :func:`~bucketloader.solve.compute_boundaries` needs of a solution cache.

    :class:`~bucketloader.cache.BucketCache` is the implementation; any object with this method
    works (an in-memory dict cache in tests, a remote store).
    """

    def get_or_solve(
        self,
        hist: LengthHistogram,
        strategy: str | None,
        params: dict[str, Any],
        solve: Callable[[], Solution | JointSolution],
    ) -> Solution | JointSolution: ...


class LazyModule:
    """A module imported on its first attribute access: the run-time stand-in for an optional or
    heavy module that annotations name (``pads.Dataset``, ``torch_data.DataLoader``).

    NOTE [ Annotations that introspection can evaluate ]
    Annotations are strings (``from __future__ import annotations``); ``typing.get_type_hints``
    (documentation tools, typeguard, jsonargparse, HF's argument parsers) evaluates them in the
    module's globals, so a name imported only under ``TYPE_CHECKING`` raised ``NameError``. An
    annotation names an optional or heavy package through a module bound to a ``LazyModule``
    at run time (``if TYPE_CHECKING: import pyarrow as pa`` / ``else: pa = LazyModule("pyarrow")``):
    importing bucketloader still imports nothing of it, and evaluating the annotation imports it
    then and gives the real class, or ``Any`` where the optional package is not installed. A
    name with a leading underscore is not looked up (``AttributeError``, nothing imported): such
    names are tools' probes of every module attribute, pytest's ``_mock_name`` when it collects
    a module (which imported Ray Data, pandas and pyspark into every test process) and
    IPython's ``_repr_html_``, never a name the annotations use.

    Example:
        >>> LazyModule("collections").OrderedDict.__name__
        'OrderedDict'
        >>> LazyModule("no_such_package_here").Table
        typing.Any
        >>> hasattr(LazyModule("collections"), "_mock_name")
        False
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # (probes, not the module's API: NOTE above)
            raise AttributeError(attr)
        try:
            module = importlib.import_module(self._name)
        except ImportError:
            return Any  # the optional package is not installed
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"
