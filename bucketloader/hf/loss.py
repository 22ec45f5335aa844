"""The loss of a padded batch that equals the loss of its real rows: one policy per model head.

NOTE [ Filler rows and the loss, per head ]
Filler rows (NOTE [ Filler rows ] in :mod:`bucketloader.hf.bucketing`) are copies of real rows
with every ``label*`` column -100 and ``sample_mask`` False. Whether the model's own loss then
ignores them depends on the head:

==========================================  ============================  ========================
head (class name ends with)                 loss over the batch           policy
==========================================  ============================  ========================
``ForSequenceClassification`` (single       cross-entropy, ``ignore_index  ``"ignore_index"``: the
label), ``ForTokenClassification``,         =-100``: mean over the labels  model's own loss, exact
``ForMaskedLM``, ``ForCausalLM``,           that are not -100 (or their    (a filler row has no
``ForConditionalGeneration`` (seq2seq,      sum / ``num_items_in_batch``,  label to count); also
speech-to-text), ``ForSpeechSeq2Seq``,      which counts the same labels)  with gradient
``ForMultipleChoice``,                                                     accumulation
``ForAudioClassification``
``ForCTC``                                  CTC: an empty target still     ``"ctc"``: per-row CTC
                                            costs ``-log P(all blanks)``,  from the logits, summed
                                            so a filler row adds to it     or averaged (``config.
                                                                           ctc_loss_reduction``)
                                                                           over real rows only
``ForQuestionAnswering``                    cross-entropy over start and   ``"ignore_index"``:
                                            end positions, ignoring the    filler rows' positions
                                            sequence length ``L``          are ``L``; exact
``ForSequenceClassification`` with          MSE / BCE over every row       ``"regression"`` /
``num_labels=1`` or float multi-hot                                        ``"multi_label"``: per
labels (``problem_type``)                                                  row, mean over real
                                                                           rows
==========================================  ============================  ========================

Any other head is treated as ``"ignore_index"`` (what every ``transformers`` loss that takes
``labels`` does with -100), with a warning, since that is not checked. The per-row policies
need no change to the model: it runs without ``labels`` (which also keeps data-dependent code
such as ``masked_select`` out of a compiled graph) and the loss is computed here from its logits.

Reductions. Evaluating one batch, a ``"mean"`` policy averages over the batch's real rows and
``"sum"`` (CTC with ``ctc_loss_reduction="sum"``) sums them: the loss of the real rows alone.
Training with gradient accumulation, :class:`~bucketloader.hf.BucketTrainer` divides the sum of
the real rows' losses by the real rows of the whole optimizer step (all micro-batches, and all
ranks when ``average_tokens_across_devices``), so a step's gradient is the mean over its real
samples however they fall into batches; ``"sum"`` keeps the sum, as ``transformers`` does.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["loss_policy", "masked_loss", "row_losses", "settle_problem_type", "zero_loss"]

#: Heads whose own loss ignores labels of -100 (class-name suffixes).
IGNORE_INDEX_HEADS = (
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForMaskedLM",
    "ForCausalLM",
    "LMHeadModel",
    "ForConditionalGeneration",
    "ForSpeechSeq2Seq",
    "ForMultipleChoice",
    "ForAudioClassification",
    "ForImageClassification",
    "ForPreTraining",
    "ForQuestionAnswering",
)
#: Policies whose loss is computed per row here (not by the model).
ROW_POLICIES = ("ctc", "regression", "multi_label")
_WARNED: set[str] = set()


def _core(model: Any) -> Any:
    """The model under DDP / compile / PEFT wrappers."""
    seen = 0
    while seen < 8:
        seen += 1
        for attr in ("module", "_orig_mod"):
            inner = getattr(model, attr, None)
            if isinstance(inner, torch.nn.Module):
                model = inner
                break
        else:
            base = getattr(model, "get_base_model", None)
            return base() if callable(base) else model
    return model


def loss_policy(model: Any, labels: Any = None) -> str:
    """The filler-row policy of ``model``'s head (NOTE [ Filler rows and the loss, per head ]).

    Args:
        model: a ``transformers`` model (wrappers are looked through).
        labels: a batch's labels; their dtype tells single- from multi-label classification when
            ``config.problem_type`` is unset (as ``transformers`` decides it).

    Example:
        >>> import torch
        >>> class BertForSequenceClassification(torch.nn.Module):
        ...     config = type("C", (), {"num_labels": 1, "problem_type": None})()
        >>> loss_policy(BertForSequenceClassification())
        'regression'
    """
    core = _core(model)
    name = type(core).__name__
    config = getattr(core, "config", None)
    if name.endswith("ForCTC"):
        return "ctc"
    problem = getattr(config, "problem_type", None)
    if problem is None and name.endswith(("ForSequenceClassification", "ForImageClassification")):
        num_labels = getattr(config, "num_labels", 2)
        if num_labels == 1:
            problem = "regression"
        elif isinstance(labels, torch.Tensor) and labels.is_floating_point():
            problem = "multi_label_classification"
    if problem == "regression":
        return "regression"
    if problem == "multi_label_classification":
        return "multi_label"
    if not name.endswith(IGNORE_INDEX_HEADS) and name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(
            f"{name}: bucketloader assumes its loss ignores labels of -100 (the filler rows' "
            "labels); this is checked for the heads in bucketloader.hf.loss.IGNORE_INDEX_HEADS. "
            "If it does not, train with last_batch='fill' (no filler rows) or override "
            "compute_loss",
            RuntimeWarning,
            stacklevel=2,
        )
    return "ignore_index"


def settle_problem_type(model: Any, labels: Any) -> None:
    """Set ``config.problem_type`` of a classification head before its first forward.

    ``transformers`` classification heads set it on their first call with labels, from
    ``num_labels`` and the labels' dtype. Under ``torch.compile`` that mutation invalidates the
    first compiled graph (a guard reads ``config.problem_type``), so one planned shape would be
    compiled twice. Setting it first, by the same rule, keeps one graph per shape.
    """
    core = _core(model)
    config = getattr(core, "config", None)
    name = type(core).__name__
    if (
        config is None
        or getattr(config, "problem_type", "") is not None
        or not isinstance(labels, torch.Tensor)
        or not name.endswith(("ForSequenceClassification", "ForImageClassification"))
    ):
        return
    num_labels = getattr(config, "num_labels", 2)
    if num_labels == 1:
        config.problem_type = "regression"
    elif labels.dtype in (torch.long, torch.int):
        config.problem_type = "single_label_classification"
    else:
        config.problem_type = "multi_label_classification"


def row_losses(
    model: Any, outputs: Any, labels: torch.Tensor, inputs: Mapping[str, Any], policy: str
) -> tuple[torch.Tensor, str]:
    """``(per-row loss (B,), "mean" | "sum")`` of a per-row policy, as the model's head defines
    its loss (NOTE [ Filler rows and the loss, per head ])."""
    core = _core(model)
    config = core.config
    logits = outputs["logits"] if isinstance(outputs, Mapping) else outputs[0]
    if policy == "ctc":
        mask = inputs.get("attention_mask")
        if mask is None:
            main = inputs[getattr(core, "main_input_name", "input_values")]
            raw = torch.full((logits.shape[0],), main.shape[-1], device=logits.device)
        else:
            raw = mask.sum(-1)
        # No public API gives the frame count of the feature encoder's output: this is the
        # function Wav2Vec2ForCTC.forward (and HuBERT, WavLM, ...) itself calls for its loss.
        frames = core._get_feat_extract_output_lengths(raw).to(torch.long)
        real = labels >= 0
        target_lengths = real.sum(-1)
        log_probs = torch.nn.functional.log_softmax(logits, dim=-1, dtype=torch.float32)
        per_row = torch.nn.functional.ctc_loss(
            log_probs.transpose(0, 1),
            torch.where(real, labels, 0),  # padded (B, S) targets: only the first lengths count
            frames,
            target_lengths,
            blank=config.pad_token_id,
            reduction="none",
            zero_infinity=config.ctc_zero_infinity,
        )
        if config.ctc_loss_reduction == "mean":
            return per_row / target_lengths.clamp(min=1), "mean"
        return per_row, "sum"
    if policy == "regression":
        pred = logits.squeeze(-1) if config.num_labels == 1 else logits
        target = labels.to(pred.dtype).reshape(pred.shape)
        err = (pred.float() - target.float()) ** 2
        return (err if err.ndim == 1 else err.mean(-1)), "mean"
    if policy == "multi_label":
        bce = torch.nn.functional.binary_cross_entropy_with_logits(
            logits.float(), labels.float(), reduction="none"
        )
        return bce.mean(-1), "mean"
    raise ValueError(f"policy must be one of {ROW_POLICIES}, got policy={policy!r}")


def masked_loss(model: Any, batch: Mapping[str, Any]) -> tuple[torch.Tensor, Any]:
    """``(loss over the real rows, outputs)`` of one batch carrying ``sample_mask``.

    For loops of your own: build the batches with ``for_text(..., sample_mask=True)`` (or
    ``evaluation=True``); ``sample_mask`` and ``index`` are popped before the model sees the
    batch. A ``"mean"`` policy averages over the real rows, ``"sum"`` sums them. A batch with
    no real row (``sample_mask`` all False: a sharded or streamed step that gives this rank only
    a stand-in) has loss 0 with a zero gradient (:func:`zero_loss`), not the 0 / 0 = NaN of a
    mean over no row, which DDP's all-reduce would spread to every rank. That holds for a
    ``sample_mask`` on the CPU (as collated); one already moved to the device is decided without
    a sync by ``torch.where``, whose gradient is still NaN for a model whose own loss divides by
    its count (the transformers heads do not).

    Args:
        model: the ``transformers`` model.
        batch: the collated batch (``labels`` and ``sample_mask`` included).

    Example:
        >>> import torch
        >>> class TinyForSequenceClassification(torch.nn.Module):  # a regression head
        ...     config = type("Config", (), {"num_labels": 1, "problem_type": "regression"})()
        ...     def forward(self, inputs, labels=None):
        ...         return {"logits": inputs.sum(-1, keepdim=True)}
        >>> batch = {"inputs": torch.tensor([[1.0, 2.0], [5.0, 5.0]]),
        ...          "labels": torch.tensor([1.0, 0.0]),
        ...          "sample_mask": torch.tensor([True, False])}  # row 2: a filler row
        >>> loss, outputs = masked_loss(TinyForSequenceClassification(), batch)
        >>> loss  # (3 - 1) ** 2, the real row's alone (the filler row's would be 100)
        tensor(4.)
        >>> batch["sample_mask"] = torch.tensor([False, False])  # a step with no real row
        >>> masked_loss(TinyForSequenceClassification(), batch)[0]
        tensor(0.)
    """
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"batch must be the collated batch (a dict of tensors with 'sample_mask'), got "
            f"{type(batch).__name__}; call masked_loss(model, batch)"
        )
    inputs = dict(batch)
    mask = inputs.pop("sample_mask", None)
    inputs.pop("index", None)
    if mask is None:
        raise ValueError(
            "the batch has no sample_mask; build it with for_text/for_audio(..., "
            "sample_mask=True) (or evaluation=True)"
        )
    labels = inputs.get("labels")
    targets = [k for k in inputs if "label" in str(k) or str(k).endswith("_positions")]
    if labels is None and not targets:
        raise ValueError(  # (the model then returns no loss: it was KeyError: 'loss')
            f"masked_loss needs the batch's labels, from which the model computes its loss, but "
            f"the batch has keys {sorted(inputs)}; give the dataset a 'label' / 'labels' column "
            "(for_text renames 'label' to 'labels'), or run model(**batch) for outputs alone"
        )
    policy = loss_policy(model, labels)
    if policy not in ROW_POLICIES or labels is None:
        outputs = model(**inputs)
        loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs[0]
        # No real row: the model's mean over no label is 0 / 0 (NaN). A mask on the CPU (as
        # collated) decides in Python, with no device sync; a mask already on the device goes
        # through torch.where (no sync either), whose NaN branch still gets a NaN gradient where
        # the model's own loss divides by its count (the transformers heads do not).
        if mask.device.type == "cpu":
            return (loss if bool(mask.any()) else zero_loss(outputs)), outputs
        real = mask.to(loss.device).any()
        return torch.where(real, loss, zero_loss(outputs).to(loss.device, loss.dtype)), outputs
    labels = inputs.pop("labels")
    outputs = model(**inputs)
    per_row, reduction = row_losses(model, outputs, labels, inputs, policy)
    mask = mask.to(per_row.device)
    total = torch.where(mask, per_row, 0.0).sum()
    if reduction == "sum":
        return total, outputs
    return total / mask.sum().clamp(min=1), outputs


def zero_loss(outputs: Any) -> torch.Tensor:
    """A loss of exactly 0 whose gradient reaches every parameter that produced ``outputs``
    (each output tensor's first element times 0; the ``loss`` entry, or a tuple's first element
    when it is a 0-d loss, left out: it may be NaN).

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(2, 3)
        >>> outputs = {"loss": torch.tensor(float("nan")), "logits": layer(torch.ones(1, 2))}
        >>> loss = zero_loss(outputs)
        >>> loss.backward()
        >>> float(loss.detach()), float(layer.weight.grad.abs().sum())
        (0.0, 0.0)
    """
    found: list[torch.Tensor] = []

    def visit(tree: Any, skip_first: bool = False) -> None:
        if isinstance(tree, torch.Tensor):
            if tree.requires_grad and tree.numel():
                found.append(tree.reshape(-1)[0] * 0)
        elif isinstance(tree, Mapping):
            for key, value in tree.items():
                if key != "loss":
                    visit(value)
        elif isinstance(tree, (list, tuple)):
            for value in tree[1:] if skip_first else tree:
                visit(value)

    # a tuple starts with the loss only when the model got labels (a 0-d tensor); else logits
    first_is_loss = (
        isinstance(outputs, tuple)
        and bool(outputs)
        and isinstance(outputs[0], torch.Tensor)
        and outputs[0].dim() == 0
    )
    visit(outputs, skip_first=first_is_loss)
    if not found:
        return torch.zeros(())
    device = found[0].device  # (outputs of a model split over devices: summed on the first)
    return torch.stack([x.float().to(device) for x in found]).sum()
