"""MLMMasking: masked-LM targets for packed rows (BERT / RoBERTa / ModernBERT pretraining).

NOTE [ Masked-LM masking of packed rows ]
Hugging Face's ``DataCollatorForLanguageModeling(mlm=True)`` picks each token for the loss with
probability ``mlm_probability`` (a Bernoulli draw per token, so 15% in expectation, not an exact
count), never a special token (``tokenizer.all_special_ids``: CLS, SEP, PAD, MASK, UNK...);
of the picked tokens, ``mask_replace_prob`` (0.8) become the mask token, ``random_replace_prob``
(0.1) a random id in ``[0, len(tokenizer))`` and the rest stay; ``labels`` are the original ids
of the picked tokens and -100 everywhere else. :class:`MLMMasking` draws the same distribution,
with the same options and defaults, inside :class:`~bucketloader.pack.PackCollator`: only the
tokens of documents are candidates (never a row's padding, whatever its id), and the labels no
longer carry the causal rule (-100 at each document's first token): every document token can be
a target, as in a document collated alone. With a document mask that lets each token attend to
its own document only, both ways (:func:`~bucketloader.pack.document_mask` with
``causal=False``), a packed row is then exactly its documents run one by one.

Where the randomness comes from. HF's collator draws from one generator per process (its
``seed`` plus the DataLoader worker's id), so a document's mask depends on the batches drawn
before it, on the worker that collates it and on the number of workers, and a resumed run
draws other masks than the run it resumes. Here each document's draws are a function of
``(seed, epoch, the document's tokens)`` only: ``SeedSequence([seed, epoch, tag])`` keys a
``blake2b`` hash of the document's int64 tokens (one 64-bit key per document), and the ``k``-th
uniform of its token ``t`` is SplitMix64's output number ``4 t + k + 1`` from that key
(vectorised in numpy, no Python loop over tokens). So the same document is masked the same way
in the same epoch whatever its row, its row-mates, its batch, rank, worker or resume, and
another way the next epoch (RoBERTa's dynamic masking). Two documents with the same tokens get
the same mask in an epoch (a corpus with exact duplicates trains them as the same example).

The epoch comes from the sampler: ``PackSampler.collator(mlm=...)`` shares one int64 in shared
memory with the collators it builds and writes its epoch there when a pass starts (before the
pass's first batch is sent to a worker), so DataLoader workers, persistent ones included, read
the epoch of the batch they collate (NOTE [ The epoch a masking collator reads ] in
:mod:`bucketloader.pack.collator`).
"""

from __future__ import annotations

import functools
import hashlib
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from bucketloader._validation import check_float, check_int

__all__ = ["MLMMasking"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
#: The last word of the masks' ``SeedSequence`` (b"mlm"): other draws of the same seed and epoch
#: (a sampler's shuffle) use other words.
_DOMAIN = 0x6D6C6D
_LABEL_PAD = -100  # (collator.IGNORE_INDEX; not imported: the collator imports this module)


@dataclass(frozen=True)
class MLMMasking:
    """What and how to mask for masked-LM training on packed rows: HF's
    ``DataCollatorForLanguageModeling(mlm=True)`` options, drawn per document from
    ``(seed, epoch, tokens)`` (NOTE [ Masked-LM masking of packed rows ]).

    Pass it to the packing collator (``sampler.collator(mlm=...)``), or give
    ``hf.for_packing`` an ``mlm_probability`` and a tokenizer.

    Args:
        mask_token_id: the id a picked token becomes ``mask_replace_prob`` of the time.
        vocab_size: random replacements are drawn in ``[0, vocab_size)`` (``len(tokenizer)``).
        special_ids: ids never picked (``tokenizer.all_special_ids``); padding never is either.
        mlm_probability: the chance that a token is picked for the loss.
        mask_replace_prob: the chance that a picked token becomes ``mask_token_id``.
        random_replace_prob: the chance that it becomes a random id (the rest stay as they are).
        seed: the seed of every epoch's masks.

    Example:
        >>> masking = MLMMasking(mask_token_id=4, vocab_size=50, special_ids=(0, 1, 2))
        >>> ids = np.array([1, 10, 11, 12, 13, 14, 15, 16, 17, 2], dtype=np.int64)
        >>> new, labels = masking.apply(ids, np.array([0]), np.array([10]), epoch=0)
        >>> bool(((labels == -100) | (labels == ids)).all()), labels[[0, 9]].tolist()
        (True, [-100, -100])
    """

    mask_token_id: int
    vocab_size: int
    special_ids: tuple[int, ...] = ()
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        vocab = check_int("vocab_size", self.vocab_size, minimum=1)
        mask = check_int("mask_token_id", self.mask_token_id, minimum=0)
        if mask >= vocab:
            raise ValueError(
                f"mask_token_id must be an id of the vocabulary [0, {vocab}), got "
                f"mask_token_id={mask}; pass tokenizer.mask_token_id and len(tokenizer)"
            )
        specials = self.special_ids
        if isinstance(specials, (str, bytes)) or not hasattr(specials, "__iter__"):
            raise TypeError(
                f"special_ids must be a sequence of ints (tokenizer.all_special_ids), got "
                f"special_ids={specials!r}"
            )
        specials = tuple(sorted({check_int("special_ids", s) for s in specials}))
        try:  # (one range in every refusal: 0 is refused too, 0.15 is BERT's)
            p = check_float("mlm_probability", self.mlm_probability, minimum=0.0, maximum=1.0)
            if p == 0.0:
                raise ValueError("no token would be a target")
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"mlm_probability must be a number in (0, 1], got mlm_probability="
                f"{self.mlm_probability!r}; 0.15 is BERT's"
            ) from None
        m = check_float("mask_replace_prob", self.mask_replace_prob, minimum=0.0, maximum=1.0)
        r = check_float("random_replace_prob", self.random_replace_prob, minimum=0.0, maximum=1.0)
        if m + r > 1.0:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob must be at most 1, got "
                f"mask_replace_prob={m} and random_replace_prob={r}"
            )
        seed = check_int("seed", self.seed, minimum=0)
        for name, value in (
            ("vocab_size", vocab),
            ("mask_token_id", mask),
            ("special_ids", specials),
            ("mlm_probability", p),
            ("mask_replace_prob", m),
            ("random_replace_prob", r),
            ("seed", seed),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        *,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        seed: int = 0,
    ) -> MLMMasking:
        """The masking HF's ``DataCollatorForLanguageModeling(tokenizer, mlm=True)`` does:
        ``tokenizer.mask_token_id``, ``len(tokenizer)`` and ``tokenizer.all_special_ids``."""
        mask = getattr(tokenizer, "mask_token_id", None)
        if not isinstance(mask, numbers.Integral):
            raise ValueError(
                f"the tokenizer ({type(tokenizer).__name__}) has no mask token (mask_token_id="
                f"{mask!r}), which masked-LM training replaces picked tokens with; add one "
                "(tokenizer.add_special_tokens({'mask_token': '[MASK]'}) and resize the model's "
                "embeddings) or pass MLMMasking(mask_token_id=..., vocab_size=...)"
            )
        return cls(
            mask_token_id=int(mask),
            vocab_size=len(tokenizer),
            special_ids=tuple(getattr(tokenizer, "all_special_ids", ()) or ()),
            mlm_probability=mlm_probability,
            mask_replace_prob=mask_replace_prob,
            random_replace_prob=random_replace_prob,
            seed=seed,
        )

    def apply(
        self, flat_ids: np.ndarray, starts: np.ndarray, sizes: np.ndarray, *, epoch: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mask the documents ``flat_ids[starts[i] : starts[i] + sizes[i]]`` of a flat int64
        layout; every other token (padding) is left as it is, label -100. Returns the new ids
        and the labels (new arrays)."""
        ids = np.array(flat_ids, dtype=np.int64, copy=True)
        labels = np.full(ids.shape, _LABEL_PAD, dtype=np.int64)
        starts = np.asarray(starts, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        keep = sizes > 0
        starts, sizes = starts[keep], sizes[keep]
        if not sizes.size:
            return ids, labels
        doc_keys = _document_keys(ids, starts, sizes, _epoch_key(self.seed, epoch))
        offsets = np.cumsum(sizes) - sizes
        where = np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))  # flat index
        token = (np.arange(int(sizes.sum())) - np.repeat(offsets, sizes)).astype(np.uint64)
        base = np.repeat(doc_keys, sizes)
        orig = ids[where]
        picked = _uniform(base, token, 0) < self.mlm_probability
        if self.special_ids:
            picked &= ~np.isin(orig, np.asarray(self.special_ids, dtype=np.int64))
        # (the later draws for the picked tokens only, ~15%: the same numbers; one flatnonzero,
        # as boolean indexing with a scattered mask is several times slower per array)
        at = np.flatnonzero(picked)
        where, base, token = where[at], base[at], token[at]
        labels[where] = orig[at]
        replaced = _uniform(base, token, 1) < self.mask_replace_prob
        rest = 1.0 - self.mask_replace_prob
        if self.random_replace_prob > 0.0 and rest > 0.0:
            scaled = self.random_replace_prob / rest
            randomised = ~replaced & (_uniform(base, token, 2) < scaled)
            draws = _mix(base[randomised], token[randomised], 3) % np.uint64(self.vocab_size)
            ids[where[randomised]] = draws.astype(np.int64)
        ids[where[replaced]] = self.mask_token_id
        return ids, labels


@functools.lru_cache(maxsize=64)
def _epoch_key(seed: int, epoch: int) -> bytes:
    """The 32-byte ``blake2b`` key of an epoch's masks: ``SeedSequence([seed, epoch, tag])``,
    the tag keeping them apart from a sampler's shuffles of the same ``(seed, epoch)``."""
    state = np.random.SeedSequence([seed, epoch, _DOMAIN]).generate_state(8, dtype=np.uint32)
    return state.astype("<u4").tobytes()


def _document_keys(ids: np.ndarray, starts: np.ndarray, sizes: np.ndarray, key: bytes) -> Any:
    """Each document's 64-bit key: the ``blake2b`` hash of its int64 tokens, keyed by the
    epoch's key (one C call a document)."""
    digests = [
        hashlib.blake2b(ids[s : s + n].tobytes(), digest_size=8, key=key).digest()
        for s, n in zip(starts.tolist(), sizes.tolist(), strict=True)
    ]
    return np.frombuffer(b"".join(digests), dtype="<u8").astype(np.uint64)


def _mix(base: np.ndarray, token: np.ndarray, k: int) -> np.ndarray:
    """SplitMix64's output number ``4 * token + k + 1`` from the state ``base`` (uint64,
    wrapping)."""
    with np.errstate(over="ignore"):
        z = base + (token * np.uint64(4) + np.uint64(k + 1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))  # type: ignore[no-any-return]


def _uniform(base: np.ndarray, token: np.ndarray, k: int) -> np.ndarray:
    """Uniform floats in ``[0, 1)`` from the top 53 bits of :func:`_mix`."""
    return (_mix(base, token, k) >> np.uint64(11)).astype(np.float64) * (2.0**-53)
