"""Static, sync-free subsampling for use inside models (and under ``torch.compile``).

Output shapes depend only on the arguments, never on the data: no ``.item()``, ``.tolist()``,
``nonzero``, boolean indexing, ``unique`` or data-dependent Python branch on the hot path, so every
function here traces into one graph with ``torch.compile(fullgraph=True)`` (``dynamic=False`` or
``True``) and never synchronises a CUDA stream.

* :func:`balanced_subsample` / :class:`BalancedSubsampler`: ``num_samples`` rows with a target
  share of positives (detection-style RoI/anchor sampling), padded and flagged when short.
* :func:`masked_select_k`: up to ``k`` random indices where a mask is true; the fixed-shape
  replacement for ``x[mask]``.
* :func:`masked_sum`, :func:`masked_mean`: static replacements for ``x[mask].sum()`` / ``.mean()``.

The selection algorithm is described in ``bucketloader/static/_select.py`` (NOTE [ Selection
algorithm ]).

NOTE [ Randomness and torch.compile ]
The permutation is a pure function of a 64-bit seed, so eager, compiled and CUDA runs with the same
seed return the same samples. Without ``seed`` the seed is drawn on the data's device (from
``generator`` if given), which never syncs. Dynamo cannot trace a ``torch.Generator`` (torch 2.13:
"Failed to convert args/kwargs to proxy"), so inside a compiled region pass ``seed=`` as a 0-d
integer tensor drawn outside (e.g. ``torch.randint(2**62, ())``) for reproducibility, or nothing
for fresh randomness. A Python int seed is a constant to the compiler: each new value recompiles.
Unseeded, ``torch.manual_seed`` makes eager runs and compiled runs reproducible, but inductor draws
the seed from its own generator, so the two differ (s23, torch 2.13; with
``torch._inductor.config.fallback_random = True`` they agree).
Argument errors raised while Dynamo traces with ``fullgraph=True`` reach the caller wrapped in
``torch._dynamo.exc.Unsupported`` ("Observed exception"), our message in its debug context;
:class:`BalancedSubsampler` checks ``num_samples`` and ``positive_fraction`` when it is built,
outside any trace. With ``dynamic=True`` the batch dimensions and the row length ``N`` stay
symbolic: dynamo guards ``N`` into the ranges the algorithm branches on (``N <= 64``: sorted
keys; ``64 < N <= 4096``: 10 Feistel rounds; longer: 6; and ``K > N`` or not), so a new ``N``
in a range reuses the graph (torch 2.13, inductor: one graph for ``N`` = 100, 200 and 1000, equal
to eager bit for bit, compiled in 17 s against 11 s for the first static shape and 4 s for each
further one; this text said a new ``N`` compiled a new graph). Compiling costs 3.8-6.1 s per shape
on 2 CPU cores, one thread (inductor's codegen of the integer rounds), against 1.3-3.0 s for two
``topk`` (benchmarks/results/subsampler.md; this text said 7-10 s against 2.5 s); the first
compile in a process pays inductor's start-up on top (s23: 8.5 s, then 4.5 s for the next shape).
With ``dynamic=False`` each new ``(batch, N)`` compiles a graph; with the default
``dynamic=None`` the second ``N`` compiles the dynamic graph and later ones reuse it (s23, torch
2.13: 2 graphs for ``N`` = 100, 200, 300 and 1000, each output equal to eager). ``K`` and
``positive_fraction`` are constants with ``dynamic=False`` (three fractions and two ``K``: 4
graphs) and symbols with ``dynamic=True`` (the same calls: 1 graph, each equal to eager).
``torch.export.export`` works with static shapes (s23, torch 2.13: the exported program equals
eager bit for bit with a seed tensor) and a dynamic leading (batch) dimension; a dynamic ``N``
does not export: the non-strict export specialises it where the permutation grid is sized
(``_geometry``), the strict one refuses ``math.log2`` of a symbol.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from bucketloader._validation import (
    INT64_MAX,
    INT64_MIN,
    check_bool,
    check_float,
    check_int,
    describe,
)
from bucketloader.static._select import draw_seed, is_compiling, quota_select

__all__ = [
    "BalancedSubsampler",
    "Selection",
    "Subsample",
    "balanced_subsample",
    "masked_mean",
    "masked_select_k",
    "masked_sum",
]


class Subsample(NamedTuple):
    """What :func:`balanced_subsample` returns; padded rows (``valid`` false) hold zeros.

    Example:
        >>> import torch
        >>> values, labels = torch.arange(8.0).reshape(4, 2), torch.tensor([1, 0, 0, 0])
        >>> out = balanced_subsample(values, labels, 6, seed=0)  # a Subsample
        >>> out.values.shape, out.valid.tolist()  # 4 rows for 6 slots: 2 padded, last
        (torch.Size([6, 2]), [True, True, True, True, False, False])
        >>> int(out.labels.sum()), out.values[4:].tolist()  # its 1 positive; padding: zeros
        (1, [[0.0, 0.0], [0.0, 0.0]])
    """

    values: Tensor  #: ``[..., K, F]``
    labels: Tensor  #: ``[..., K]``, same dtype as the input labels
    indices: Tensor  #: ``[..., K]`` int64 positions in ``N``
    valid: Tensor  #: ``[..., K]`` bool, true for real samples (they come first)


class Selection(NamedTuple):
    """What :func:`masked_select_k` returns; padded slots hold index 0 and ``valid`` false.

    Example:
        >>> import torch
        >>> out = masked_select_k(torch.tensor([False, True, False, False]), 2, seed=0)
        >>> out.indices.tolist(), out.valid.tolist()  # one true entry: one padded slot
        ([1, 0], [True, False])
    """

    indices: Tensor  #: ``[..., k]`` int64
    valid: Tensor  #: ``[..., k]`` bool


def balanced_subsample(
    values: Tensor,
    labels: Tensor,
    num_samples: int,
    *,
    positive_fraction: float = 0.5,
    mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    seed: int | Tensor | None = None,
) -> Subsample:
    """Pick ``num_samples`` rows per batch row with a target share of positives, statically.

    With ``K = num_samples``, the target is ``K_pos = floor(K * positive_fraction + 0.5)`` positives
    (round half up) and ``K - K_pos`` negatives. If one class is short, the other fills in; if
    fewer than ``K`` candidates exist at all, all are taken and the rest of the ``K`` slots are
    padding (``valid`` false, zeros). Within each class the chosen set is uniformly random, and
    the output is in uniformly random order with the valid rows first.

    Args:
        values: ``[..., N, F]`` features, any leading batch dimensions.
        labels: ``[..., N]`` binary labels (bool, or 0/1 of any real dtype); nonzero is positive.
            Values are checked in eager mode on CPU only (a check on CUDA would synchronise).
        num_samples: ``K >= 1``, the output length.
        positive_fraction: target share of positives in ``[0, 1]``.
        mask: optional ``[..., N]`` bool; only true entries are candidates (e.g. padding or
            "ignore" anchors set to false).
        generator: eager only; the source of the seed (same device as ``values``).
        seed: int or 0-d integer tensor; the samples are a pure function of it. Under
            ``torch.compile`` pass a tensor (an int recompiles per value); an int or a CPU
            tensor reaches a GPU by a non-blocking copy. Pass at most one of ``generator`` and
            ``seed``.

    Returns:
        :class:`Subsample` ``(values [..., K, F], labels [..., K], indices [..., K],
        valid [..., K])``.

    Example:
        >>> import torch
        >>> from bucketloader import static
        >>> values = torch.randn(2, 100, 4)
        >>> labels = torch.zeros(2, 100, dtype=torch.bool)
        >>> labels[0, :30] = True  # row 0: 30 positives; row 1: none
        >>> out = static.balanced_subsample(values, labels, 16, seed=0)
        >>> out.values.shape, out.labels.sum(-1).tolist(), out.valid.all().item()
        (torch.Size([2, 16, 4]), [8, 0], True)
    """
    _check_pair(values, labels)
    k = _check_count("num_samples", num_samples)
    fraction = _check_fraction(positive_fraction)
    *batch, n = labels.shape
    rows = math.prod(batch)
    _check_padding("num_samples", k, n, rows, values.shape[-1] + 3)
    eligible = _check_mask(mask, labels)
    seed_t = _resolve_seed(seed, generator, values.device)
    flat_labels = labels.reshape(rows, n)
    positive = flat_labels != 0
    negative = ~positive
    if eligible is not None:
        flat_mask = eligible.reshape(rows, n)
        positive, negative = positive & flat_mask, negative & flat_mask
    k_pos = math.floor(k * fraction + 0.5)
    k_neg = k - k_pos
    n_pos = positive.sum(-1, keepdim=True)
    n_neg = negative.sum(-1, keepdim=True)
    quota_pos = torch.minimum(n_pos, k_pos + torch.clamp(k_neg - n_neg, min=0))
    quota_neg = torch.minimum(n_neg, k_neg + torch.clamp(k_pos - n_pos, min=0))
    if n == 0:  # a shape, not data: no candidates at all
        indices = torch.zeros(rows, k, dtype=torch.int64, device=values.device)
        valid = torch.zeros(rows, k, dtype=torch.bool, device=values.device)
    else:
        indices, valid = quota_select(positive, negative, quota_pos, quota_neg, k, seed_t)
    feats = values.shape[-1]
    flat_values = values.reshape(rows, n, feats)
    if n == 0:
        out_values = flat_values.new_zeros(rows, k, feats)
        out_labels = flat_labels.new_zeros(rows, k)
    else:
        gather_index = indices.unsqueeze(-1).expand(rows, k, feats)
        out_values = flat_values.gather(1, gather_index).masked_fill(~valid.unsqueeze(-1), 0)
        out_labels = flat_labels.gather(1, indices).masked_fill(~valid, 0)
    return Subsample(
        out_values.reshape(*batch, k, feats),
        out_labels.reshape(*batch, k),
        indices.reshape(*batch, k),
        valid.reshape(*batch, k),
    )


class BalancedSubsampler(nn.Module):
    """:func:`balanced_subsample` as a module (no parameters, no buffers).

    Example:
        >>> import torch
        >>> from bucketloader.static import BalancedSubsampler
        >>> sampler = BalancedSubsampler(8, positive_fraction=0.25)
        >>> labels = torch.arange(40).remainder(2).bool().view(1, 40)
        >>> out = sampler(torch.randn(1, 40, 3), labels, seed=1)
        >>> out.labels.sum().item(), out.valid.sum().item()
        (2, 8)
    """

    def __init__(self, num_samples: int, *, positive_fraction: float = 0.5) -> None:
        super().__init__()
        self.num_samples = _check_count("num_samples", num_samples)
        self.positive_fraction = _check_fraction(positive_fraction)

    def forward(
        self,
        values: Tensor,
        labels: Tensor,
        *,
        mask: Tensor | None = None,
        generator: torch.Generator | None = None,
        seed: int | Tensor | None = None,
    ) -> Subsample:
        """Subsample ``values`` / ``labels``; see :func:`balanced_subsample`."""
        return balanced_subsample(
            values,
            labels,
            self.num_samples,
            positive_fraction=self.positive_fraction,
            mask=mask,
            generator=generator,
            seed=seed,
        )

    def extra_repr(self) -> str:
        return f"num_samples={self.num_samples}, positive_fraction={self.positive_fraction}"


def masked_select_k(
    mask: Tensor,
    k: int,
    *,
    generator: torch.Generator | None = None,
    seed: int | Tensor | None = None,
) -> Selection:
    """Up to ``k`` uniformly random positions where ``mask`` is true, in random order.

    The fixed-shape replacement for ``torch.nonzero(mask)`` / ``x[mask]``: gather with the indices
    and use ``valid`` wherever the count matters. Unlike ``nonzero``, the positions come in random
    order, and padding slots hold index 0, a real position: for ``nonzero``'s ascending order sort
    with the padding last (below), and write results back with ``scatter_add`` of values zeroed
    at the padding, not ``scatter_``, whose padding writes to index 0 race the real one's.

    Args:
        mask: ``[..., N]`` bool; leading dimensions are independent rows.
        k: ``>= 1``, the output length.
        generator: eager only, the source of the seed. seed: an int or 0-d integer tensor (use
            this under ``torch.compile``); pass at most one of the two.

    Returns:
        :class:`Selection` ``(indices [..., k] int64, valid [..., k] bool)``; valid ones first,
        padding slots hold index 0.

    Example:
        >>> import torch
        >>> from bucketloader.static import masked_select_k
        >>> scores = torch.tensor([[0.9, 0.1, 0.8, 0.7], [0.2, 0.3, 0.1, 0.0]])
        >>> idx, valid = masked_select_k(scores > 0.5, 2, seed=0)
        >>> sorted(idx[0].tolist()) in ([0, 2], [0, 3], [2, 3]), valid.tolist()
        (True, [[True, True], [False, False]])
        >>> mask = torch.tensor([[False, True, True, False, True]])  # e.g. the real tokens
        >>> idx, valid = masked_select_k(mask, 4, seed=0)  # all 3, and one padding slot
        >>> torch.where(valid, idx, 5).sort(-1).values.tolist()  # nonzero's order, N=5 last
        [[1, 2, 4, 5]]
        >>> y = torch.ones(1, 4) * valid  # one result per slot, zero at the padding
        >>> torch.zeros(1, 5).scatter_add(1, idx, y).tolist()  # back in place
        [[0.0, 1.0, 1.0, 0.0, 1.0]]
    """
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.dim() < 1:
        raise TypeError(
            f"mask must be a bool tensor of shape [..., N], got {_got(mask)}{_as_bool(mask)}"
        )
    k = _check_count("k", k)
    *batch, n = mask.shape
    rows = math.prod(batch)
    _check_length(n)
    _check_padding("k", k, n, rows, 2)
    seed_t = _resolve_seed(seed, generator, mask.device)
    if n == 0:
        indices = torch.zeros(rows, k, dtype=torch.int64, device=mask.device)
        valid = torch.zeros(rows, k, dtype=torch.bool, device=mask.device)
    else:
        flat = mask.reshape(rows, n)
        quota = torch.clamp(flat.sum(-1, keepdim=True), max=k)
        indices, valid = quota_select(flat, None, quota, None, k, seed_t)
    return Selection(indices.reshape(*batch, k), valid.reshape(*batch, k))


def masked_sum(
    x: Tensor, mask: Tensor, *, dim: int | tuple[int, ...] | None = None, keepdim: bool = False
) -> Tensor:
    """``x[mask].sum()`` without a data-dependent shape: the sum of ``x`` where ``mask`` is true.

    ``mask`` is a bool tensor broadcastable to ``x``; ``dim=None`` reduces everything.

    Example:
        >>> import torch
        >>> from bucketloader.static import masked_sum
        >>> x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        >>> masked_sum(x, x > 2.5, dim=-1).tolist()
        [3.0, 15.0]
    """
    dim, keepdim = _check_reduction(x, mask, dim, keepdim)
    return _sum_where(x, mask, dim, keepdim)


def masked_mean(
    x: Tensor, mask: Tensor, *, dim: int | tuple[int, ...] | None = None, keepdim: bool = False
) -> Tensor:
    """``x[mask].mean()`` without a data-dependent shape; NaN where nothing is selected.

    Like ``torch.mean`` of an empty selection, an all-false slice gives NaN; use
    ``masked_sum(x, m) / m.sum().clamp(min=1)`` if you want 0 instead.

    Example:
        >>> import torch
        >>> from bucketloader.static import masked_mean
        >>> x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        >>> masked_mean(x, x > 2.5, dim=-1).tolist()
        [3.0, 5.0]
    """
    dim, keepdim = _check_reduction(x, mask, dim, keepdim)
    if not (x.is_floating_point() or x.is_complex()):
        raise TypeError(
            f"x must be a floating-point tensor for masked_mean, got x.dtype={x.dtype}; "
            "cast it first, e.g. x.float()"
        )
    # (on x's device: a 0-d CPU mask, which torch.where takes with x on a GPU, counts on the
    # CPU, and a count with dimensions there failed the division; s23-rev)
    count = mask.expand(x.shape).sum(dim=dim, keepdim=keepdim).to(x.device)
    # NOTE [ Half-precision means ]
    # float16 and bfloat16 sum in float32 and divide there, as torch.mean does: a float16 sum
    # rounded to float16 first overflowed (10^4 values of 100: inf, where x[mask].mean() gives
    # 100) and a bfloat16 one lost the mean's precision (100.5 for a row of 100s). s23.
    wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else None
    return (_sum_where(x, mask, dim, keepdim, wide) / count).to(x.dtype)  # (checked, above)


def _sum_where(x: Tensor, mask: Tensor, dim: Any, keepdim: bool, dtype: Any = None) -> Tensor:
    """:func:`masked_sum` of checked arguments (accumulated in ``dtype``, if given)."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(
        dim=dim, keepdim=keepdim, dtype=dtype
    )


# -- argument checks, run at the Python boundary before any tracing ------------------------------
# Messages are the project's one voice (bucketloader._validation). Data-dependent checks (binary
# labels) run only in eager mode on CPU: under tracing they would be a graph break, and on CUDA a
# host synchronisation.


def _check_count(name: str, value: object) -> int:
    if isinstance(value, Tensor):  # torch.topk takes a 0-d tensor k; a shape here cannot
        raise TypeError(
            f"{name} must be a Python int >= 1, got {name}={value!r}, a tensor: it is the output "
            "length, which must not depend on the data; pass a fixed capacity (an int chosen "
            "outside the model)"
        )
    return check_int(name, value, minimum=1, symbolic=(torch.SymInt,))


def _check_fraction(value: object) -> float:
    return check_float(
        "positive_fraction", value, minimum=0.0, maximum=1.0, symbolic=(torch.SymFloat,)
    )


#: Row length limit: the selection packs a position and its class into one int32
#: (``(j << 2) | class`` in ``_first_in_order``), so positions must stay below 2**29 (each
#: Feistel half stays below 2**15 too). s23: this was 2**30, and a chosen position at or past
#: 2**29 came back negative (``(2**29 << 2) >> 2 == -2**29`` in int32).
MAX_CANDIDATES = 2**29


def _check_length(n: int) -> None:
    if n > MAX_CANDIDATES:
        raise ValueError(
            f"the candidate dimension must hold at most 2**29 entries, got N={n}; "
            "split the rows into a leading batch dimension"
        )


#: Output elements past which a request that is mostly padding (K > N) is refused.
MAX_PADDED_OUTPUT = 2**28


def _check_padding(name: str, k: object, n: object, rows: object, width: object) -> None:
    """K > N only adds padding slots; refuse one so large that the output could not be meant."""
    if not all(isinstance(v, int) for v in (k, n, rows, width)):
        return  # symbolic under torch.compile: the eager call checked it
    elements = rows * k * width  # type: ignore[operator]
    if k > n and elements > MAX_PADDED_OUTPUT:  # type: ignore[operator]
        raise ValueError(
            f"{name}={k} exceeds the N={n} candidates, so all but {n} of the {k} slots per row "
            f"would be padding, and the output would hold {elements:,} elements; pass "
            f"{name} <= N (at most {n}), or the number of slots your model really uses"
        )


def _as_bool(mask: object) -> str:
    """The fix for a mask of another dtype (an attention mask of 0/1 ints, say)."""
    if isinstance(mask, Tensor) and mask.dtype != torch.bool:
        return "; convert it with mask.bool() (or mask != 0)"
    return ""


def _got(value: object) -> str:
    """:func:`describe` of a bad argument, with the conversion when it is a numpy array (whose
    dtype and shape may be right)."""
    fix = "; convert it with torch.from_numpy(...)" if isinstance(value, np.ndarray) else ""
    return describe(value) + fix


def _check_pair(values: object, labels: object) -> None:
    if not isinstance(values, Tensor) or values.dim() < 2:
        fix = ""
        if isinstance(values, Tensor):  # one value per candidate: a feature dimension of 1
            fix = "; for one value per candidate pass values.unsqueeze(-1)"
        raise TypeError(f"values must be a tensor of shape [..., N, F], got {_got(values)}{fix}")
    if not isinstance(labels, Tensor):
        raise TypeError(f"labels must be a tensor of shape [..., N], got {_got(labels)}")
    if labels.shape != values.shape[:-1]:
        raise ValueError(
            f"labels must have shape values.shape[:-1]={tuple(values.shape[:-1])}, got "
            f"labels.shape={tuple(labels.shape)}; values is [..., N, F] and labels [..., N]"
        )
    if labels.device != values.device:
        raise ValueError(
            f"labels must be on values.device={values.device}, got labels.device={labels.device}"
        )
    if labels.is_complex():
        raise TypeError(f"labels must be bool or real 0/1, got labels.dtype={labels.dtype}")
    _check_length(labels.shape[-1])
    # Data-dependent check: eager and CPU only (under tracing it would be a graph break, on CUDA a
    # synchronisation). Labels are read as `labels != 0` either way.
    if labels.dtype == torch.bool or is_compiling() or labels.device.type != "cpu":
        return
    bad = (labels != 0) & (labels != 1)
    if bad.any():
        example = labels[bad][0].item()
        raise ValueError(
            f"labels must be binary (bool, or 0 and 1), got a label of {example!r}; "
            "map classes to 0/1 first, e.g. labels == positive_class"
        )


def _check_mask(mask: object, labels: Tensor) -> Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be None or a bool tensor like labels, got {_got(mask)}{_as_bool(mask)}"
        )
    if mask.shape != labels.shape or mask.device != labels.device:
        raise ValueError(
            f"mask must have labels.shape={tuple(labels.shape)} on {labels.device}, got "
            f"mask.shape={tuple(mask.shape)} on {mask.device}"
        )
    return mask


def _check_reduction(
    x: object, mask: object, dim: Any, keepdim: object
) -> tuple[int | tuple[int, ...] | None, bool]:
    """Check a masked reduction's arguments; return ``dim`` and ``keepdim`` as torch takes them."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a tensor, got {_got(x)}")
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor broadcastable to x, got {_got(mask)}{_as_bool(mask)}"
        )
    # (torch.where's own error names neither argument; a 0-d mask is left to torch, which may
    # take a CPU scalar with device tensors)
    if mask.device != x.device and mask.dim() > 0:
        raise ValueError(
            f"mask must be on x.device={x.device}, got mask.device={mask.device}; move it first, "
            "e.g. mask.to(x.device)"
        )
    try:  # (the same shape, the common case, needs no broadcast)
        shape = x.shape if mask.shape == x.shape else torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError:
        shape = None
    if shape != x.shape:
        raise ValueError(
            f"mask must be broadcastable to x.shape={tuple(x.shape)}, got "
            f"mask.shape={tuple(mask.shape)}"
        )
    return _check_dims(dim, x.dim()), check_bool("keepdim", keepdim)


def _check_dims(dim: Any, ndim: int) -> Any:
    """``dim`` is ``None``, an int or a sequence of distinct ints, each a dimension of ``x``
    (numpy ints and 0-d integer tensors count, as torch takes them)."""
    high = max(ndim, 1)  # a 0-d tensor reduces over dim 0 or -1, as in torch
    if dim is None or (type(dim) is int and -high <= dim < high):
        return dim  # (the common case, at no cost per call)
    many = isinstance(dim, (tuple, list))
    dims = [_as_dim(d) for d in (dim if many else [dim])]
    ints = [d for d in dims if d is not None]
    if len(ints) == len(dims):
        if all(-high <= d < high for d in ints) and len({d % high for d in ints}) == len(ints):
            return tuple(ints) if many else ints[0]
    elif is_compiling():
        # numpy ints and tensors trace as arrays here, which int() would break the graph on:
        # torch checks them itself, as before these checks
        return dim
    raise (ValueError if len(ints) == len(dims) else TypeError)(
        f"dim must be None, an int or a tuple of distinct ints in [{-high}, {high - 1}] (x has "
        f"{ndim} dimensions), got dim={dim!r}; e.g. dim=-1 reduces the last dimension"
    )


def _as_dim(d: object) -> int | None:
    """``d`` as a dimension index (an int, numpy int or 0-d integer tensor), else ``None``."""
    if isinstance(d, (bool, np.bool_)):
        return None
    if isinstance(d, numbers.Integral):
        return int(d)
    if isinstance(d, Tensor) and d.dim() == 0 and not (d.is_floating_point() or d.is_complex()):
        if d.dtype != torch.bool and not is_compiling():
            return int(d)  # eager only: int() on a traced tensor breaks the graph
    return None


def _resolve_seed(
    seed: int | Tensor | None, generator: torch.Generator | None, device: torch.device
) -> Tensor:
    """The 0-d int64 seed tensor on ``device``: from ``seed``, ``generator`` or fresh."""
    if seed is not None and generator is not None:
        raise ValueError("pass either seed or generator, not both, got both")
    if seed is not None:
        if isinstance(seed, Tensor):
            if seed.numel() != 1 or seed.is_floating_point() or seed.dtype == torch.bool:
                raise TypeError(
                    f"seed must be an int or a 0-d integer tensor, got {describe(seed)}"
                )
            # non_blocking: a blocking host-to-device copy synchronises the stream; but not to
            # the CPU: a non-blocking device-to-host copy may be read before it lands (s23)
            return seed.reshape(()).to(
                device=device, dtype=torch.int64, non_blocking=torch.device(device).type != "cpu"
            )
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int or a 0-d integer tensor, got seed={seed!r}")
        if not INT64_MIN <= seed <= INT64_MAX:
            raise ValueError(
                f"seed must be an int in [-2**63, 2**63 - 1] (a 64-bit seed), got seed={seed!r}; "
                "reduce it first, e.g. seed % 2**63"
            )
        return torch.tensor(int(seed), dtype=torch.int64).to(device, non_blocking=True)
    if generator is not None:
        if is_compiling():
            raise ValueError(
                "generator is not supported under torch.compile (Dynamo cannot trace a "
                "torch.Generator); pass seed=<int or 0-d int tensor drawn outside> instead"
            )
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {describe(generator)}")
        if generator.device.type != torch.device(device).type:
            raise ValueError(
                f"generator must be on the data's device {device}, got generator.device="
                f"{generator.device}; create it with torch.Generator({str(device)!r})"
            )
    return draw_seed(generator, device)
