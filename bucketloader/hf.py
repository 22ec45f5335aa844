"""Hugging Face ``datasets`` integration: lengths from Arrow, one-call sampler + collator.

Reading lengths by iterating a dataset in Python decodes every row (hours on large corpora). Here
they come from the Arrow columns, vectorised: list lengths from the list offsets, numeric length
columns as they are, string lengths from the string offsets, always in the dataset's *logical*
order (after ``select`` / ``shuffle`` / ``train_test_split``). ``datasets``, ``pyarrow`` and
``transformers`` are imported only inside the functions that need them.

Training with ``transformers`` (``BucketTrainer`` is a ``transformers.Trainer`` subclass, defined
on first access; why its train loader bypasses accelerate: :mod:`bucketloader._hf_trainer`)::

    from bucketloader.hf import BucketTrainer

    trainer = BucketTrainer(
        model=model, args=args, train_dataset=tokenised, processing_class=tokenizer,
        bucketing={"num_buckets": 8, "max_tokens": 16384},  # for_text options
    )
    trainer.train()  # every batch has a shape in trainer.bucketing.sampler.shapes

Without a Trainer: ``sampler, collate, data = for_text(tokenised, tokenizer=tokenizer,
max_tokens=16384)`` then ``DataLoader(data, batch_sampler=sampler, collate_fn=collate)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "LENGTH_COLUMN",
    "BucketTrainer",  # noqa: F822 (lazy: module __getattr__)
    "Bucketing",  # noqa: F822 (lazy: module __getattr__)
    "add_lengths",
    "for_audio",
    "for_text",
    "lengths",
]

#: Column that :func:`add_lengths` writes by default (and :func:`lengths` reads when present).
LENGTH_COLUMN = "length"


def lengths(
    dataset: Any,
    column: str | Sequence[str] | None = None,
    *,
    fn: Callable[[dict[str, Any]], Any] | None = None,
    num_proc: int | None = None,
    batch_size: int = 1000,
) -> Any:
    """Per-sample lengths of a Hugging Face dataset, vectorised from Arrow.

    Args:
        dataset: a ``datasets.Dataset`` (any format, with or without an indices mapping, from
            memory or ``load_from_disk``), a ``DatasetDict`` (returns a dict split → lengths) or a
            ``pyarrow.Table``.
        column: what to measure. A list column (``"input_ids"``, audio samples) gives its list
            lengths; a struct column gives the length of its ``array`` field (or of its only list
            field; ``"audio.array"`` names one explicitly); an integer column is read as
            lengths; a string column gives lengths in characters. A sequence of columns gives an
            ``(N, D)`` array (e.g. source and target token ids). Default: the ``"length"``
            column when present, else required.
        fn: instead of a column, ``fn(batch) -> lengths`` over a batch dict in the dataset's
            format, run through ``Dataset.map(batched=True, num_proc=num_proc)`` (cached by
            ``datasets`` like any map).
        num_proc: processes for ``fn``.
        batch_size: rows per ``fn`` call.

    Returns:
        ``int64`` array of shape ``(N,)`` or ``(N, D)`` in the dataset's logical row order.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4], [5, 6]]})
        >>> lengths(ds, "input_ids").tolist()
        [3, 1, 2]
        >>> lengths(ds.select([2, 0]), "input_ids").tolist()
        [2, 3]
    """
    if isinstance(dataset, dict):  # a DatasetDict (a dict subclass) or a plain dict of splits
        return {
            split: lengths(d, column, fn=fn, num_proc=num_proc, batch_size=batch_size)
            for split, d in dataset.items()
        }
    if fn is not None:
        if column is not None:
            raise ValueError(
                f"pass either column= or fn=, not both (got column={column!r} and fn={fn!r})"
            )
        from bucketloader._hf_arrow import lengths_from_fn

        return lengths_from_fn(dataset, fn, num_proc=num_proc, batch_size=batch_size)
    from bucketloader._hf_arrow import column_lengths, resolve_column, table_and_indices

    table, indices = table_and_indices(dataset)
    if column is None:
        if LENGTH_COLUMN not in table.column_names:
            raise ValueError(
                f"column must name what to measure (e.g. column='input_ids'); the dataset has "
                f"columns {table.column_names} and no {LENGTH_COLUMN!r} column"
            )
        column = LENGTH_COLUMN
    names = [column] if isinstance(column, str) else list(column)
    if not names or not all(isinstance(c, str) for c in names):
        raise TypeError(f"column must be a column name or a list of names, got {column!r}")
    cols = []
    for name in names:
        arr, path = resolve_column(table, name)
        cols.append(column_lengths(arr, path))
    out = cols[0] if isinstance(column, str) else np.stack(cols, axis=1)
    return out if indices is None else out[indices]


def add_lengths(
    dataset: Any,
    column: str | Sequence[str] | None = None,
    *,
    name: str | Sequence[str] | None = None,
    fn: Callable[[dict[str, Any]], Any] | None = None,
    num_proc: int | None = None,
) -> Any:
    """Return ``dataset`` with per-sample length column(s), so later runs skip the scan.

    Save the result (``save_to_disk``) and :func:`lengths` reads it back as a plain integer
    column. Works on a ``Dataset`` or a ``DatasetDict`` (every split). ``name`` defaults to
    ``"length"`` for one measure and to ``"<column>_length"`` for each of several columns.

    Example:
        >>> import datasets
        >>> ds = add_lengths(datasets.Dataset.from_dict({"x": [[1, 2], [3]]}), "x")
        >>> ds["length"][:], lengths(ds).tolist()
        ([2, 1], [2, 1])
    """
    if isinstance(dataset, dict):
        import datasets

        return datasets.DatasetDict(
            {
                split: add_lengths(d, column, name=name, fn=fn, num_proc=num_proc)
                for split, d in dataset.items()
            }
        )
    values = lengths(dataset, column, fn=fn, num_proc=num_proc)
    if name is None:
        multi = values.ndim == 2
        if multi and (column is None or isinstance(column, str)):
            raise ValueError("fn returned several lengths per row: pass name=[...] with one each")
        name = [f"{c}_length" for c in column] if multi else LENGTH_COLUMN  # type: ignore[union-attr]
    names = [name] if isinstance(name, str) else list(name)
    cols = values.reshape(len(values), -1).T
    if len(names) != len(cols):
        raise ValueError(f"name must give {len(cols)} column names, got name={name!r}")
    drop = [n for n in names if n in dataset.column_names]
    if drop:
        dataset = dataset.remove_columns(drop)
    for n, col in zip(names, cols, strict=True):
        dataset = dataset.add_column(n, col.tolist())
    return dataset


def for_text(
    dataset: Any,
    column: str | Sequence[str] = "input_ids",
    *,
    pad_token_id: int | None = None,
    tokenizer: Any = None,
    **options: Any,
) -> Any:
    """A ready :class:`~bucketloader.sampler.BucketSampler` + collator for tokenised text.

    Args:
        dataset: a tokenised ``datasets.Dataset``, or a list of them for per-dataset bucketing
            (boundaries fitted per dataset, batches never mix datasets).
        column: the bucketed token column, or several for per-input bucketing (e.g.
            ``["input_ids", "labels"]`` for seq2seq: each gets its own boundaries).
        pad_token_id: the pad id of the token columns; or
        tokenizer: any object with ``pad_token_id`` (a ``transformers`` tokenizer).
        **options: ``BucketSampler`` options (``num_buckets``, ``strategy``, ``batch_size`` or
            ``max_tokens``, ``last_batch``, ``shuffle``, ``seed``, ``num_replicas``, ``rank``).

    Returns:
        A :class:`Bucketing` ``(sampler, collator, dataset)``; ``.dataloader(**kwargs)`` builds
        the ``DataLoader``. Token-id columns pad with the pad id, ``label*`` columns with -100,
        the rest with 0; ``attention_mask`` is built (or padded if present) as 0/1 ``long``;
        columns of the same row lengths pad along (see :mod:`bucketloader._hf_bucketing`).

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in (3, 9, 4, 8)],
        ...                                  "label": [0, 1, 0, 1]})
        >>> sampler, collate, data = for_text(ds, pad_token_id=0, num_buckets=2, batch_size=2)
        >>> sampler.shapes
        [(2, 4), (2, 9)]
        >>> batch = collate([data[0], data[2]])
        >>> batch["input_ids"].tolist(), batch["attention_mask"].tolist(), batch["labels"].tolist()
        ([[5, 5, 5, 0], [5, 5, 5, 5]], [[1, 1, 1, 0], [1, 1, 1, 1]], [0, 0])
    """
    from bucketloader import _hf_bucketing as hb

    pad = hb.pad_token_id(pad_token_id, tokenizer)
    many = _as_list(dataset)
    inputs = [column] if isinstance(column, str) else list(column)
    follows = hb.follow_fields(many, inputs, lengths)
    pads = hb.pad_values(many[0].column_names, inputs, pad)
    return hb.build(many, inputs, follows, pads, lengths, options=options)


def for_audio(
    dataset: Any,
    column: str = "audio",
    *,
    key: str = "input_values",
    pad_value: float = 0.0,
    **options: Any,
) -> Any:
    """A ready sampler + collator for audio arrays (raw waveforms or feature-extracted values).

    Args:
        dataset: a ``datasets.Dataset`` (or a list of them, bucketed per dataset) with either a
            decoded-audio struct column ``{"array": [...], "sampling_rate": ...}`` or a list
            column of samples (e.g. ``input_values`` from a feature extractor).
        column: that column.
        key: the output key of a struct column's array (the rows are read in torch format).
        pad_value: pad value of the waveform.
        **options: ``BucketSampler`` options; ``max_tokens`` counts audio samples per batch.

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"audio": [
        ...     {"array": [0.5] * n, "sampling_rate": 16000} for n in (3, 9, 4, 8)]})
        >>> sampler, collate, data = for_audio(ds, num_buckets=2, max_tokens=18)
        >>> sampler.shapes
        [(2, 9), (4, 4)]
        >>> collate([data[1], data[3]])["input_values"].shape
        torch.Size([2, 9])
    """
    from bucketloader import _hf_bucketing as hb
    from bucketloader._hf_arrow import resolve_column, table_and_indices

    many = _as_list(dataset)
    table, _ = table_and_indices(many[0])
    _, path = resolve_column(table, column)
    if path == column:  # a plain list column: samples as they are
        follows = hb.follow_fields(many, [column], lengths)
        pads = {**dict.fromkeys(many[0].column_names, 0), column: pad_value}
        return hb.build(
            many,
            [column],
            follows,
            pads,
            lengths,
            view=lambda d: d.with_format("torch"),
            options=options,
        )
    head = path.split(".")[0]
    rest = [c for c in many[0].column_names if c != head]
    pads = {**dict.fromkeys(rest, 0), "sampling_rate": 0, key: pad_value}
    pads = {k: (hb.LABEL_PAD if k.startswith("label") else v) for k, v in pads.items()}
    return hb.build(
        many,
        [key],
        {key: key},
        pads,
        lambda d, _c: lengths(d, path),
        view=lambda d: hb.AudioRows(d, head, key),
        options=options,
    )


def _as_list(dataset: Any) -> list[Any]:
    many = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
    if not many:
        raise ValueError("dataset must be a Dataset or a non-empty list of them, got []")
    return many


def __getattr__(name: str) -> Any:
    if name == "BucketTrainer":  # defined on first use: it subclasses transformers.Trainer
        from bucketloader._hf_trainer import trainer_class

        return trainer_class()
    if name in ("Bucketing", "ModelInputs", "EpochDataLoader"):
        from bucketloader import _hf_bucketing

        return getattr(_hf_bucketing, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
