"""Attention masks for packed rows, from the per-token document index.

A packed row holds several documents; attention must stay within each (block-diagonal), and
within a decoder, be causal. ``document_ids`` (from :class:`~bucketloader.pack.PackCollator`:
``-1`` on padding) is all a mask needs; every helper builds it on the tensor's device, inside the
model, so the collator never ships an ``L x L`` mask:

* :func:`document_mask`: a dense ``(B, 1, L, L)`` mask for ``scaled_dot_product_attention``
  (boolean, True = attend) or, with a float ``dtype``, the additive 0 / min mask of eager
  attention (what Hugging Face ``attn_implementation="eager"`` expects as a 4-D mask).
* :func:`sliding_window_mask`: a sliding-window layer's mask, derived from the document mask.
* :func:`document_mask_mod` / :func:`document_block_mask`: the same rule as a
  ``flex_attention`` ``mask_mod`` and its ``BlockMask``, which skips the blocks no document spans.
* Varlen flash-attention kernels take the collator's ``cu_seqlens`` instead.

Padding (``-1``) attends to the padding before it in its row, so every query has at least one
key (no NaN rows); its outputs carry no loss (labels are -100 there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from bucketloader._validation import check_int

__all__ = ["document_block_mask", "document_mask", "document_mask_mod", "sliding_window_mask"]


def _check(document_ids: Any) -> torch.Tensor:
    if not isinstance(document_ids, torch.Tensor) or document_ids.ndim != 2:
        got = (
            f"a tensor of shape {tuple(document_ids.shape)}"
            if isinstance(document_ids, torch.Tensor)
            else type(document_ids).__name__
        )
        raise ValueError(
            f"document_ids must be a (B, L) integer tensor (PackCollator's 'document_ids'), "
            f"got {got}"
        )
    if document_ids.dtype.is_floating_point or document_ids.dtype == torch.bool:
        raise TypeError(f"document_ids must hold integers, got dtype {document_ids.dtype}")
    return document_ids


def document_mask(
    document_ids: torch.Tensor,
    *,
    causal: bool = True,
    dtype: torch.dtype = torch.bool,
    window: int | None = None,
) -> torch.Tensor:
    """The ``(B, 1, L, L)`` attention mask of packed rows: same document (and causal).

    Args:
        document_ids: ``(B, L)`` document index per token (PackCollator's ``document_ids``).
        causal: also mask future tokens (decoders); ``False`` for encoders.
        dtype: ``torch.bool`` (True = attend: ``scaled_dot_product_attention``'s
            ``attn_mask``), or a float dtype for an additive mask (0 where attended, the
            dtype's minimum elsewhere: Hugging Face eager attention).
        window: the mask of a sliding-window layer of ``config.sliding_window``, as
            transformers builds it: key ``j`` within ``0 <= i - j < window`` of query ``i``
            (causal: Gemma, Mistral), or ``|i - j| <= window`` with ``causal=False``
            (ModernBERT, whose ``sliding_window`` is half its ``local_attention``). A 4-D mask
            is used as given by every layer, so a model with such layers takes one per kind:
            NOTE [ Sliding-window layers in packed rows ] in :mod:`bucketloader.hf.packing`.

    Example:
        >>> ids = torch.tensor([[0, 0, 1, -1]])
        >>> document_mask(ids)[0, 0].int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
        >>> document_mask(torch.tensor([[0, 0, 0]]), causal=False, window=1)[0, 0].int().tolist()
        [[1, 1, 0], [1, 1, 1], [0, 1, 1]]
    """
    ids = _check(document_ids)
    if window is not None:
        window = check_int("window", window, minimum=1)
    if dtype != torch.bool and not dtype.is_floating_point:
        raise TypeError(f"dtype must be torch.bool or a float dtype, got dtype={dtype}")
    mask = ids[:, :, None] == ids[:, None, :]
    if window is not None:
        mask &= _band(ids.shape[1], window, causal=causal, device=ids.device)
    elif causal:  # 0 <= i - j (the band as a diagonal of a bool (n, n): no int64 distances)
        mask &= torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device).tril()
    mask = mask[:, None]
    if dtype == torch.bool:
        return mask
    zero = torch.zeros((), dtype=dtype, device=ids.device)
    return torch.where(mask, zero, torch.finfo(dtype).min)


def sliding_window_mask(mask: torch.Tensor, window: int, *, causal: bool = True) -> torch.Tensor:
    """A sliding-window layer's mask derived from the :func:`document_mask` of the same rows
    (without ``window``; boolean or additive): equal to ``document_mask(..., window=window)``,
    with one pass over ``mask`` instead of rebuilding it from the document ids (a model with
    both layer kinds takes both masks each batch: NOTE [ Sliding-window layers in packed
    rows ] in :mod:`bucketloader.hf.packing`).

    Args:
        mask: ``(..., L, L)`` from :func:`document_mask`, ``causal`` as given here.
        window: ``config.sliding_window``: key ``j`` within ``0 <= i - j < window`` of query
            ``i`` (causal), or ``|i - j| <= window`` (``causal=False``).
        causal: as the mask was built.

    Example:
        >>> full = document_mask(torch.tensor([[0, 0, 0, 1]]))
        >>> sliding_window_mask(full, 2)[0, 0].int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]]
    """
    window = check_int("window", window, minimum=1)
    if not isinstance(mask, torch.Tensor) or mask.ndim < 2 or mask.shape[-1] != mask.shape[-2]:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a (..., L, L) tensor (document_mask's), got {got}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        # (s33-tidyA: an int mask failed in torch.finfo, naming neither mask nor the fix)
        raise TypeError(
            f"mask must be bool (True = attend) or an additive float mask, as document_mask "
            f"makes them, got mask.dtype={mask.dtype}; pass mask.bool() for a 0/1 mask"
        )
    band = _band(mask.shape[-1], window, causal=causal, device=mask.device)
    if mask.dtype == torch.bool:
        return mask & band
    return mask.masked_fill(~band, torch.finfo(mask.dtype).min)


def _band(n: int, window: int, *, causal: bool, device: Any) -> torch.Tensor:
    """The ``(n, n)`` bool band of a sliding window (the one rule of :func:`document_mask` and
    :func:`sliding_window_mask`), as diagonals: no int64 ``(n, n)`` of distances; flex's
    :func:`document_mask_mod` writes the same rule per (query, key) index."""
    seen = torch.ones(n, n, dtype=torch.bool, device=device)
    if causal:  # 0 <= i - j < window
        return seen.tril().triu(1 - window)
    return seen.triu(-window).tril(window)  # |i - j| <= window


def document_mask_mod(
    document_ids: torch.Tensor, *, causal: bool = True, window: int | None = None
) -> Callable[..., Any]:
    """A ``flex_attention`` ``mask_mod(b, h, q_idx, kv_idx)``: same document (and causal).

    ``window`` is :func:`document_mask`'s: key ``j`` within ``0 <= i - j < window`` of query
    ``i`` (causal), or ``|i - j| <= window`` (``causal=False``), for sliding-window layers.

    Example:
        >>> ids = torch.tensor([[0, 0, 1, -1]])
        >>> mod = document_mask_mod(ids)
        >>> bool(mod(0, 0, torch.tensor(1), torch.tensor(0))), bool(mod(0, 0, 2, 1))
        (True, False)
        >>> bool(document_mask_mod(torch.tensor([[0, 0, 0]]), window=1)(0, 0, 1, 0))
        False
    """
    ids = _check(document_ids)
    w = 0 if window is None else check_int("window", window, minimum=1)

    if window is None and causal:

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return (ids[b, q_idx] == ids[b, kv_idx]) & (q_idx >= kv_idx)

    elif window is None:

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return ids[b, q_idx] == ids[b, kv_idx]

    elif causal:  # 0 <= i - j < window

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            near = (q_idx >= kv_idx) & (q_idx - kv_idx < w)
            return (ids[b, q_idx] == ids[b, kv_idx]) & near

    else:  # |i - j| <= window

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            near = (q_idx - kv_idx <= w) & (kv_idx - q_idx <= w)
            return (ids[b, q_idx] == ids[b, kv_idx]) & near

    return mask_mod


def document_block_mask(
    document_ids: torch.Tensor,
    *,
    causal: bool = True,
    block_size: int = 128,
    window: int | None = None,
) -> Any:
    """The ``flex_attention`` ``BlockMask`` of :func:`document_mask_mod` (on the ids' device).

    A model's sliding-window layers need ``window=config.sliding_window`` (as
    :func:`document_mask`'s): a ``BlockMask`` is used as given, so without it they attend to
    whole documents (a tiny Mistral with ``sliding_window=4``: logits 0.19 off each document
    alone, silently, s33).

    ``torch.nn.attention.flex_attention.create_block_mask`` over ``(B, heads=None, L, L)``; blocks
    no document spans are skipped by ``flex_attention``. On CPU the first call traces the
    ``mask_mod`` (about a second); ``flex_attention`` itself runs unfused outside
    ``torch.compile``.

    Example:
        >>> ids = torch.tensor([[0, 0, 1, -1]])
        >>> document_block_mask(ids, block_size=2).to_dense()[0, 0].tolist()
        [[1, 0], [0, 1]]
    """
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as exc:  # torch < 2.5: the rest of packing works there
        raise ImportError(
            "document_block_mask needs torch.nn.attention.flex_attention (torch >= 2.5), but "
            f"this is torch {torch.__version__}; upgrade it (pip install 'torch>=2.5') or use "
            "document_mask / the dense attention mask instead"
        ) from exc
    ids = _check(document_ids)
    b, n = ids.shape
    return create_block_mask(
        document_mask_mod(ids, causal=causal, window=window),
        b,
        None,
        n,
        n,
        device=str(ids.device),
        BLOCK_SIZE=block_size,
    )
