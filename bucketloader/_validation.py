"""The one voice for argument errors.

Every user-facing check in bucketloader goes through these helpers so that messages read alike:
``num_buckets must be an int >= 1, got num_buckets=0``. Never ``assert`` for user input.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping, Set
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

#: The most ranks a sampler, spec or stream plans for (a step's rows over ranks stay in int64).
MAX_REPLICAS = 1 << 20
#: The int64 range: a pad id, a seed or a token budget past it fails in numpy or torch.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class MissingKeyError(KeyError, ValueError):
    """An argument names a key, column or field that does not exist.

    A ``ValueError`` like every argument error (one voice), and a ``KeyError`` for code that
    catches failed lookups; its message prints as written (not quoted like a ``KeyError``'s).

    Example:
        >>> str(MissingKeyError("column 'x' not found; the dataset has columns ['y']"))
        "column 'x' not found; the dataset has columns ['y']"
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


#: How an error names an option: ``spell(name)`` its name, ``spell(name, value)`` the option set
#: to ``value``; ``None`` where the caller has no such option (the clause is then left out).
Spell = Callable[..., "str | None"]


def keyword(name: str, *value: Any) -> str:
    """An option as a Python caller passes it (:class:`OptionError`'s own spelling).

    Example:
        >>> keyword("max_tokens"), keyword("max_tokens", 4096)
        ('max_tokens', 'max_tokens=4096')
    """
    return name if not value else f"{name}={value[0]}"


class OptionError(ValueError):
    """A ``ValueError`` whose text names options, said in the caller's words: ``say(spell)``
    builds the text with ``spell`` (:data:`Spell`), and ``str()`` is the Python keywords' text
    (:func:`keyword`). A front end that takes the options under other names re-says it with
    its own ``spell`` (the command line: ``--max-tokens 4096`` for ``max_tokens=4096``), and a
    fix it has no option for is left out, where a pattern over the text (s29-left's table in
    the CLI) matched only the texts it knew. Pickled, it is the plain error of its text
    (:meth:`plain`: a ``ValueError``; a ``TypeError`` or :class:`MissingKeyError` for its two
    subclasses); made from a text (a wrapper's ``type(exc)(...)``), it says that text in every
    spelling.

    Example:
        >>> err = OptionError(lambda o: f"{o('max_tokens', 8)} is small; raise {o('max_tokens')}")
        >>> str(err)
        'max_tokens=8 is small; raise max_tokens'
        >>> err.say(lambda name, *v: "--max-tokens" + "".join(f" {x}" for x in v))
        '--max-tokens 8 is small; raise --max-tokens'
    """

    def __init__(self, say: Callable[[Spell], str] | str) -> None:
        # (a text: a wrapper's ``type(exc)(f"{prefix}: {exc}")``, said as it is)
        self.say = say if callable(say) else lambda spell, text=str(say): text
        super().__init__(self.say(keyword))

    @classmethod
    def plain(cls) -> type[Exception]:
        """The plain error it also is (``ValueError``, ``TypeError``, :class:`MissingKeyError`):
        what it is once said in one caller's words, pickled or re-raised."""
        return next(
            b for b in cls.__bases__ if issubclass(b, Exception) and not issubclass(b, OptionError)
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.plain(), (str(self),))


class OptionTypeError(OptionError, TypeError):
    """An :class:`OptionError` for a value of the wrong kind (a ``TypeError`` too; a column of
    strings where token ids go), so a front end re-says its fix in its own words."""


class OptionKeyError(OptionError, MissingKeyError):
    """An :class:`OptionError` for a key, column or field that does not exist (a
    :class:`MissingKeyError` too), so a front end re-says its fix in its own words.

    Example:
        >>> err = OptionKeyError(lambda o: f"no column 'x'; name one with {o('column', '...')}")
        >>> str(err), isinstance(err, KeyError)
        ("no column 'x'; name one with column=...", True)
    """


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    symbolic: tuple[type, ...] = (),
) -> int:
    """Return ``value`` as an ``int`` or raise one clear error (``True`` is not an int here).

    ``symbolic`` lists extra integer-like types accepted and returned as they are (``torch.SymInt``
    under ``torch.compile(dynamic=True)``, which ``int()`` would specialise).

    Example:
        >>> check_int("num_buckets", 8, minimum=1)
        8
        >>> check_int("num_buckets", 0, minimum=1)
        Traceback (most recent call last):
        ...
        ValueError: num_buckets must be an int >= 1, got num_buckets=0
    """
    sym = bool(symbolic) and isinstance(value, symbolic)
    ok = sym or (isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)))
    if ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value if sym else int(value)
    bounds = []
    if minimum is not None:
        bounds.append(f">= {minimum}")
    if maximum is not None:
        bounds.append(f"<= {maximum}")
    rule = f"an int {' and '.join(bounds)}" if bounds else "an int"
    kind = TypeError if not ok else ValueError
    raise kind(f"{name} must be {rule}, got {name}={value!r}")


def check_pad_token_id(value: Any) -> int:
    """A pad token id: an int that int64 holds (the one check of ``PackCollator``, ``for_text``
    and ``for_packing``; past int64 the first batch's tensor would refuse it).

    Example:
        >>> check_pad_token_id(0)
        0
        >>> check_pad_token_id(2**63)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: pad_token_id must be an int that int64 can hold (...), got pad_token_id=9223...
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if ok and INT64_MIN <= value <= INT64_MAX:
        return int(value)
    raise (ValueError if ok else TypeError)(
        f"pad_token_id must be an int that int64 can hold (-2**63 to 2**63 - 1), got "
        f"pad_token_id={value!r}; pass the tokenizer's pad id (tokenizer.pad_token_id)"
    )


def exact_int64(values: Iterable[Any], describe: Callable[[int], str]) -> np.ndarray:
    """Integers (Python or numpy ints, bools) as an int64 array, every value exact, or a
    ``ValueError`` with ``describe(x)`` for the first ``x`` that int64 cannot hold (the one rule of
    ``PadCollator`` and ``PackCollator`` for ids and int lists: never wrapped, never rounded).

    Example:
        >>> exact_int64([1, True, np.int8(-3)], str).tolist()
        [1, 1, -3]
        >>> exact_int64([2**63], lambda x: f"{x} is too big")
        Traceback (most recent call last):
        ...
        ValueError: 9223372036854775808 is too big
    """
    ints = [int(x) for x in values]
    big = next((x for x in ints if not INT64_MIN <= x <= INT64_MAX), None)
    if big is not None:
        raise ValueError(describe(big))
    return np.array(ints, dtype=np.int64)


def check_float(
    name: str, value: Any, *, minimum: float, maximum: float, symbolic: tuple[type, ...] = ()
) -> float:
    """Return ``value`` as a finite float in ``[minimum, maximum]`` or raise one clear error.

    ``symbolic`` types (``torch.SymFloat``) are accepted and returned as they are.
    """
    sym = bool(symbolic) and isinstance(value, symbolic)
    ok = sym or (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)))
    # ``value - value == 0`` is False for inf and NaN, and traces under torch.compile (math.isfinite
    # does not on a symbolic float)
    if ok and minimum <= value <= maximum and value - value == 0:
        return value if sym else float(value)
    raise (ValueError if ok else TypeError)(
        f"{name} must be a number in [{minimum}, {maximum}], got {name}={value!r}"
    )


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (numpy's included); ``1`` or ``"yes"`` are not."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {name}={value!r}")


def check_folder(name: str, value: Any) -> Path:
    """Return ``value`` as a ``Path`` with ``~`` expanded; the empty path (which would mean the
    current directory) is refused.

    Example:
        >>> check_folder("directory", "~/cache") == Path.home() / "cache"
        True
        >>> try:
        ...     check_folder("directory", "")
        ... except ValueError as exc:
        ...     print(str(exc).split(";")[0])
        directory must be a folder, got directory=''
    """
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {name}={value!r}")
    if not os.fspath(value):
        raise ValueError(
            f"{name} must be a folder, got {name}={value!r}; an empty path means the current "
            f"directory: pass the folder to keep the files in, e.g. {name}='cache'"
        )
    return Path(os.fspath(value)).expanduser()


def a_kind(name: str) -> str:
    """A class name with its article, for messages.

    Example:
        >>> a_kind("BucketSampler"), a_kind("EvalSampler")
        ('a BucketSampler', 'an EvalSampler')
    """
    return f"{'an' if name[:1] in ('A', 'E', 'I', 'O', 'U') else 'a'} {name}"


def stream_of(state: Any) -> str | None:
    """Which stream saved ``state``, read from its config (the two streams' state formats
    overlap): ``"PackIterable"`` (a ``row_length``), ``"BucketIterable"`` (``boundaries``), else
    ``None``.

    Example:
        >>> stream_of({"config": {"row_length": 8}}), stream_of({"config": {}})
        ('PackIterable', None)
    """
    config = state.get("config") if isinstance(state, dict) else None
    if not isinstance(config, dict):
        return None
    if "row_length" in config:
        return "PackIterable"
    return "BucketIterable" if "boundaries" in config else None


def not_a_state(state: Any, owner: str) -> TypeError:
    """The error for a ``state`` that is not a dict, in one voice for every producer: a path or
    the JSON text of a saved state (s29-user: ``load_state_dict("state.json")`` was told only
    that a dict was wanted) is told to load it first.

    Example:
        >>> print(not_a_state("state.json", "BucketSampler"))  # doctest: +NORMALIZE_WHITESPACE
        state must be a dict from BucketSampler.state_dict(), got the str 'state.json'; a saved
        state is loaded first: with open(path) as f: sampler.load_state_dict(json.load(f))
        (json.loads(text) for the text)
    """
    shown = repr(os.fspath(state) if isinstance(state, os.PathLike) else state)
    if len(shown) > 80 and not isinstance(state, os.PathLike):  # (a path is shown whole)
        shown = shown[:77] + "..."
    text = f"state must be a dict from {owner}.state_dict(), got the {type(state).__name__} {shown}"
    if isinstance(state, (str, bytes, os.PathLike)):
        who = "stream" if owner.endswith("Iterable") else "sampler"
        text += (
            f"; a saved state is loaded first: with open(path) as f: {who}.load_state_dict("
            "json.load(f)) (json.loads(text) for the text)"
        )
    return TypeError(text)


def describe(value: Any) -> str:
    """A short description of a value for error messages (arrays by kind, dtype and shape).

    Example:
        >>> describe(np.zeros((2, 3), dtype=np.float32))
        'a numpy array of dtype float32 and shape (2, 3)'
    """
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        # (by type, not by a .device attribute: numpy 2 arrays have one too)
        if isinstance(value, np.ndarray):
            kind = "numpy array"
        elif type(value).__module__.split(".")[0] == "torch":
            kind = "tensor"
        else:
            kind = "array"
        return f"a {kind} of dtype {dtype} and shape {tuple(shape)}"
    return f"{type(value).__name__} {value!r}"


#: What other libraries call an option bucketloader spells its own way (torch, transformers,
#: fairseq, Lhotse, tf.data, scikit-learn): an unknown option found here suggests the first of
#: its targets that the entry point takes, with the note. Every target is a real option of a
#: public entry point (tests/test_validation.py checks it).
ALIASES: dict[str, tuple[tuple[str, ...], str]] = {
    "padding_side": (("side",), "transformers' padding_side"),
    "padding_value": (("pad_value", "pad_token_id"), "transformers' padding_value"),
    "pad_id": (("pad_token_id", "pad_value"), "the id written on padding"),
    "drop_last": (("last_batch",), "torch's drop_last=True is last_batch='drop'"),
    "max_sentences": (
        ("batch_size",),
        "fairseq's max_sentences alone; beside max_tokens it is "
        "max_tokens=TokenBudget(n, max_batch_size=m)",
    ),
    "max_cuts": (
        ("batch_size",),
        "Lhotse's max_cuts alone; beside a token budget it is "
        "max_tokens=TokenBudget(n, max_batch_size=m)",
    ),
    "per_device_train_batch_size": (("batch_size",), "rows per batch"),
    "bs": (("batch_size",), "rows per batch"),
    "tokens_per_batch": (("max_tokens",), "a token budget per batch"),
    "max_tokens_per_batch": (("max_tokens",), "a token budget per batch"),
    "max_batch_tokens": (("max_tokens",), "a token budget per batch"),
    "batch_tokens": (("max_tokens",), "a token budget per batch"),
    "token_budget": (("max_tokens",), "a token budget per batch"),
    "max_duration": (("max_tokens",), "Lhotse's max_duration, in your length unit"),
    "num_bins": (("num_buckets",), "the number of buckets"),
    "n_bins": (("num_buckets",), "scikit-learn's n_bins"),
    "bucket_boundaries": (("boundaries",), "tf.data's bucket_boundaries"),
    "world_size": (("num_replicas",), "torch's world_size"),
    "random_seed": (("seed",), "the shuffling seed"),
    "random_state": (("seed",), "scikit-learn's random_state"),
    "max_seq_len": (("row_length", "max_length"), "the longest row or sample"),
    "max_seq_length": (("row_length", "max_length"), "the longest row or sample"),
    "seq_len": (("row_length", "max_length"), "the longest row or sample"),
    "seq_length": (("row_length", "max_length"), "the longest row or sample"),
    "context_length": (("row_length", "max_length"), "the longest row or sample"),
    "block_size": (("row_length",), "the packed row length"),
    "max_length": (("row_length",), "the packed row length"),
    "row_length": (("max_length",), "the longest piece or sample; PackSampler packs rows"),
    # the joint plan's solver options, given to a sampler (session 23: listed its options only)
    **{
        name: (("strategy",), f"the joint plan's: strategy=Joint({name}=...) with max_shapes=K")
        for name in ("time_limit", "work_limit", "solver", "tolerance")
    },
}
#: Aliases suggested only where the entry point also takes this option: the joint solver's
#: options go to ``strategy=Joint(...)`` of a sampler (``max_shapes``), not to a 1-D
#: ``strategy`` such as ``stream.estimate``'s.
ALIAS_NEEDS: dict[str, str] = {
    name: "max_shapes" for name in ("time_limit", "work_limit", "solver", "tolerance")
}


def keyword_options(*functions: Callable[..., Any]) -> list[str]:
    """The keyword-only parameter names of ``functions`` (what an entry point's unknown-option
    error lists).

    Example:
        >>> def f(x, *, a=1, b=2, **rest): ...
        >>> keyword_options(f)
        ['a', 'b']
    """
    import inspect

    out: list[str] = []
    for fn in functions:
        params = inspect.signature(fn).parameters.values()
        out += [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    return out


def check_collator_options(owner: str, collator: Any, options: Mapping[str, Any]) -> None:
    """One clear ``TypeError`` (with the closest option) for a keyword the class ``collator``
    does not take, instead of Python's message about ``__init__``: what every producer's
    ``collator(**kwargs)`` checks.

    Example:
        >>> class C:
        ...     def __init__(self, table, *, side="right"): ...
        >>> try:
        ...     check_collator_options("S.collator()", C, {"padding_side": "left"})
        ... except TypeError as exc:
        ...     print(str(exc).split("; ")[1])
        did you mean side=? (transformers' padding_side)
    """
    check_options(owner, options, keyword_options(collator.__init__))


def check_options(owner: str, options: Any, allowed: Iterable[str]) -> None:
    """Raise one clear ``TypeError`` for an option ``owner`` does not take, with the option
    meant: another library's name for it (:data:`ALIASES`) or the closest valid name
    (``difflib``), and the list of valid ones. The one place unknown options are refused.

    Example:
        >>> try:
        ...     check_options("BucketSampler", {"num_bucket": 8}, ["num_buckets", "batch_size"])
        ... except TypeError as exc:
        ...     print(str(exc).split(";")[:2])
        ['BucketSampler got an unexpected option num_bucket=8', ' did you mean num_buckets=?']
        >>> try:
        ...     check_options("PadCollator", {"padding_side": "left"}, ["side", "pad_value"])
        ... except TypeError as exc:
        ...     print(str(exc).split("; ")[1])
        did you mean side=? (transformers' padding_side)
    """
    names = sorted(set(allowed))
    for name in options:
        if name in names:
            continue
        targets, note = ALIASES.get(name, ((), ""))
        needs = ALIAS_NEEDS.get(name)
        if needs is not None and needs not in names:
            targets = ()
        alias = next((t for t in targets if t in names), None)
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if alias is not None:
            hint = f"; did you mean {alias}=? ({note})"
        else:
            hint = f"; did you mean {close[0]}=?" if close else ""
        raise TypeError(
            f"{owner} got an unexpected option {name}={options[name]!r}{hint}; "
            f"its options: {', '.join(names)}"
        )


_F = TypeVar("_F", bound=Callable[..., Any])


def checks_options(obj: _F) -> _F:
    """Decorate a public class (or function) so that a keyword its ``__init__`` (or it) does not
    take is refused by :func:`check_options` (the closest option, another library's name for
    it, the list of names it takes by keyword), not by Python's bare ``unexpected keyword
    argument``. The options stay declared once, in the signature; a call with known keywords
    costs one set comparison.

    A class gets the check in ``__new__``, so ``__init__`` runs as before, with no frame between
    it and its caller (the ``stacklevel`` of its warnings still points at the user's line); a
    subclass with its own ``__init__`` is left to Python. A function is wrapped, which adds one
    frame: a warning it addresses to its caller takes ``stacklevel=3``, not 2 (as
    :func:`~bucketloader.compile.precompile`'s does; test that it points at the caller's line).

    Example:
        >>> @checks_options
        ... class C:
        ...     def __init__(self, table=None, *, side="right"): ...
        >>> try:
        ...     C(padding_side="left")
        ... except TypeError as exc:
        ...     print(str(exc))
        C got an unexpected option padding_side='left'; did you mean side=? (transformers' \
padding_side); its options: side, table
    """
    import functools
    import inspect

    fn = obj.__init__ if isinstance(obj, type) else obj  # type: ignore[misc]
    params = inspect.signature(fn).parameters.values()
    name = obj.__qualname__
    if any(p.kind is p.VAR_KEYWORD for p in params):
        raise TypeError(f"checks_options: {name} takes **kwargs, so it checks them itself")
    by_name = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named = frozenset(p.name for p in params if p.kind in by_name) - {"self", "cls"}
    options = sorted(named)

    def check(kwargs: dict[str, Any]) -> None:
        if not kwargs.keys() <= named:
            check_options(name, {k: v for k, v in kwargs.items() if k not in named}, options)

    if not isinstance(obj, type):

        @functools.wraps(obj)
        def checked(*args: Any, **kwargs: Any) -> Any:
            check(kwargs)
            return obj(*args, **kwargs)

        return checked  # type: ignore[return-value]

    if obj.__new__ is not object.__new__:
        raise TypeError(f"checks_options: {name} has its own __new__")
    init = obj.__init__  # type: ignore[misc]

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls.__init__ is init:  # type: ignore[misc]  # (a subclass's own __init__: Python's)
            check(kwargs)
        return object.__new__(cls)

    __new__.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]  # (help())
    obj.__new__ = staticmethod(__new__)  # type: ignore[assignment]
    return obj


def release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a package's version string, local and pre-release parts ignored.

    Example:
        >>> release("2.4.1+cu121"), release("2.10.0a0+git1234"), release("5.25.0.dev0")
        ((2, 4), (2, 10), (5, 25))
    """
    major, minor = [*re.findall(r"\d+", version), "0", "0"][:2]
    return int(major), int(minor)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; the error lists them all."""
    options = sorted(choices)
    if isinstance(value, str) and value in options:
        return value
    listed = ", ".join(repr(c) for c in options)
    raise ValueError(f"{name} must be one of {listed}, got {name}={value!r}")


#: Largest length bucketloader accepts (``2**62 - 1``): sums and differences of two lengths, and
#: a boundary minus a length, stay exact in ``int64``. Enforced once, in :func:`as_lengths`.
MAX_LENGTH = 2**62 - 1
_LIMIT_TEXT = "2**62"


def as_lengths(
    lengths: Any,
    *,
    name: str = "lengths",
    ndim: int | tuple[int, ...] = 1,
    narrow: bool = False,
) -> np.ndarray:
    """Convert per-sample lengths to a non-empty ``int64`` array, or raise one clear error.

    Accepts lists, tuples, numpy arrays and torch tensors (any dtype that holds whole numbers:
    ``bfloat16`` and tensors that require grad or live on a GPU included) of non-negative
    integers below ``2**62`` (:data:`MAX_LENGTH`; integral floats such as ``3.0`` are accepted).
    Rejects booleans, NaN, fractional values, negatives, values of ``2**62`` or more (never
    wrapped or rounded), empty input and the wrong number of dimensions, naming the index of the
    first bad element. With ``narrow=True`` an integer array keeps its own type when that type
    widens to int64 exactly (signed, or unsigned up to 32 bits): a numpy array is not copied.

    Example:
        >>> as_lengths([3, 0, 5.0]).tolist()
        [3, 0, 5]
        >>> as_lengths([7, 2**63])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: lengths must be < 2**62, got 9223372036854775808 at index 1; ...
    """
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if isinstance(lengths, Lengths) and lengths.array.ndim in allowed:
        return lengths.array  # checked once, at the public entry point
    arr = _check_lengths(lengths, name, allowed)
    if narrow and (arr.dtype.kind == "i" or (arr.dtype.kind == "u" and arr.dtype.itemsize <= 4)):
        return arr  # (its own integer type, which widens to int64 exactly)
    return arr.astype(np.int64, copy=False)


def batch_lengths(value: Any, rows: int, *, name: str, example: str) -> np.ndarray:
    """``value``, what a batched length function returned for a batch of ``rows`` rows, as an
    array of one length per row (or one row of D lengths per row), or one clear error naming
    ``name`` and a fix (``example``). Only the shape is checked here (a shorter answer was kept
    silently, and a map dropped the batch's other rows); the values are :func:`as_lengths`'s.

    Example:
        >>> batch_lengths([3, 5], 2, name="fn(batch)", example="fn=f").tolist()
        [3, 5]
        >>> batch_lengths([8], 2, name="fn(batch)", example="fn=f")
        Traceback (most recent call last):
        ...
        ValueError: fn(batch) must return one length per row of the batch (or one row of D \
lengths per row): numbers, 2 of them for this batch, got an array of shape (1,), dtype int64; \
e.g. fn=f
    """
    try:
        out = np.asarray(value)
    except ValueError:  # ragged: numpy refuses it
        out = np.asarray(None)
    numbers = value is not None and out.dtype.kind in "iubf"
    if numbers and out.ndim in (1, 2) and len(out) == rows:
        return out
    got = f"an array of shape {out.shape}, dtype {out.dtype}" if out.ndim else repr(value)
    raise (ValueError if numbers else TypeError)(
        f"{name} must return one length per row of the batch (or one row of D lengths per "
        f"row): numbers, {rows} of them for this batch, got {got[:200]}; e.g. {example}"
    )


class Lengths:
    """Lengths :func:`as_lengths` already checked at a public entry point, passed down so that
    inner calls (the histogram, a spec, a solve) take them as they are: convert once.

    Holds a read-only view (the caller's array keeps its flags).

    Example:
        >>> checked = Lengths(as_lengths([3, 5]))
        >>> as_lengths(checked) is checked.array
        True
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        view = array.view()
        view.setflags(write=False)
        self.array = view

    def __len__(self) -> int:
        return len(self.array)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)


def _is_histogram(value: Any) -> bool:
    """A :class:`~bucketloader.histogram.LengthHistogram` or ``JointHistogram`` (which import
    this module): counts per distinct length, with a sample count and a digest."""
    return all(hasattr(value, a) for a in ("counts", "num_samples", "digest")) and not hasattr(
        value, "__len__"
    )


class SplitLengths(dict):
    """The lengths of a ``DatasetDict``'s splits, split name → lengths, as
    :func:`bucketloader.hf.lengths` returns them: a dict, told apart from one holding a length
    array per input (source and target), which the samplers plan together. Planned as inputs,
    two splits of one size made a lattice of train and test rows side by side, silently
    (s34-user); :func:`refuse_split_lengths` refuses them there.

    Example:
        >>> got = SplitLengths(train=[3, 5], test=[4, 6])
        >>> got["train"], isinstance(got, dict)
        ([3, 5], True)
    """


def refuse_split_lengths(lengths: Any, name: str) -> None:
    """Raise where ``lengths`` are a :class:`SplitLengths`, naming the splits and the fix."""
    if isinstance(lengths, SplitLengths):
        splits = ", ".join(repr(str(k)) for k in list(lengths)[:4])
        first = str(next(iter(lengths), "train"))
        raise TypeError(
            f"{name} holds one array per split of a DatasetDict ({splits}), as "
            "bucketloader.hf.lengths(dataset_dict, ...) returns them, not one per input: plan "
            f"one split, {name}[{first!r}] (and give dataset[{first!r}] to the loader); for "
            f"two inputs of one split name both columns, hf.lengths(dataset[{first!r}], "
            "['source_ids', 'target_ids'])"
        )


def _per_input(lengths: Mapping[Any, Any]) -> bool:
    """Whether a mapping holds one length array per input (str keys, sized non-text values)."""
    values = list(lengths.values())
    return bool(values) and all(
        isinstance(k, str) and hasattr(v, "__len__") and not isinstance(v, (str, bytes))
        for k, v in zip(lengths, values, strict=True)
    )


def _file_reader(path: Any) -> str:
    """How to read the lengths in the file ``path`` into an array, by its suffix (or a
    directory ``datasets`` saved), for an error that got the path where lengths were asked
    (np.loadtxt reads no .jsonl, .csv header or Parquet: s31-user2; nor a directory).

    Example:
        >>> _file_reader("train.jsonl")
        "e.g. np.array([json.loads(line)['length'] for line in open(path)]) for a .jsonl file"
    """
    if os.path.isdir(path):  # (np.loadtxt's hint failed there: IsADirectoryError)
        how = "bucketloader.hf.lengths(datasets.load_from_disk(path), 'input_ids')"
        return f"e.g. {how} for a directory saved by datasets.Dataset.save_to_disk"
    suffix = os.path.splitext(str(path).lower())[1]
    if suffix == ".jsonl":
        how = "np.array([json.loads(line)['length'] for line in open(path)])"
    elif suffix in (".csv", ".tsv"):
        sep = ", sep='\\t'" if suffix == ".tsv" else ""
        how = f"pandas.read_csv(path{sep})['length'].to_numpy()"
    elif suffix == ".parquet":
        how = "pyarrow.parquet.read_table(path, columns=['length'])['length'].to_numpy()"
    elif suffix == ".npy":
        how = "np.load(path)"
    else:
        return "e.g. np.loadtxt(path, dtype=np.int64) for one length per line"
    return f"e.g. {how} for a {suffix} file"


def _check_lengths(lengths: Any, name: str, allowed: tuple[int, ...]) -> np.ndarray:
    """:func:`as_lengths` of anything but already checked :class:`Lengths`."""
    if _is_tensor(lengths):
        lengths = _tensor_to_numpy(lengths, name)
    text = (str, bytes, bytearray, memoryview)  # (bytes would read as numbers 0..255)
    if isinstance(lengths, (str, os.PathLike)):  # a file of lengths, most likely
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints, got "
            f"{type(lengths).__name__} {os.fspath(lengths)!r:.80}; to bucket the lengths in a "
            f"file, read them first ({_file_reader(os.fspath(lengths))}; the command line's "
            "`bucketloader report FILE` reads .txt, .csv, .tsv, .jsonl, .npy, .parquet and "
            "saved datasets)"
        )
    if _is_histogram(lengths):  # (an engine's answer, where the samples' lengths were asked)
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints (sample "
            f"i's length at position i), got a {type(lengths).__name__} of "
            f"{lengths.num_samples:,} samples, which counts lengths but has no sample order; to "
            "plan from a histogram, solve on it (compute_boundaries(hist, k) for a "
            "LengthHistogram, solve_joint(hist, K).cells for a JointHistogram: exact for the "
            "whole data set) and pass the result as boundaries= / shapes= with the samples' "
            "lengths, or give ShardedSampler each rank's own lengths and shard_histograms="
        )
    if _is_histogram(getattr(lengths, "histogram", None)):  # (s34-user2: an engine's
        # ScanResult, as compute_boundaries(parquet_histogram(...), k), was named, no fix)
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints, got "
            f"{type(lengths).__name__}, an engine's scan (its .histogram, .num_rows, "
            ".num_nulls); pass its .histogram where a histogram is taken "
            "(compute_boundaries(result.histogram, k), solve_joint(result.histogram, K), "
            "LengthHistogram.merge, ShardedSampler(shard_histograms=...)); a sampler takes "
            "the samples' own lengths"
        )
    if isinstance(lengths, text) or not hasattr(lengths, "__len__"):
        fix = ""  # (s19-user: a generator or a stream was named, with no way forward)
        if not isinstance(lengths, text) and hasattr(lengths, "__next__"):
            fix = (
                f"; an iterator has no length up front: materialise it first, "
                f"list({name}) or np.fromiter({name}, dtype=np.int64)"
            )
        elif not isinstance(lengths, text) and hasattr(lengths, "__iter__"):
            fix = (
                "; an iterable without len() (a stream, e.g. an IterableDataset) cannot be "
                "planned up front: measure its samples into a list, or bucket the stream "
                "itself with bucketloader.BucketIterable (PackIterable to pack)"
            )
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints, "
            f"got {type(lengths).__name__}{fix}"
        )
    if _is_torch_dataset(lengths):
        expr, note = _item_length(lengths)
        # (s30-first: torch's samplers take the dataset, so BucketSampler(dataset, ...) is the
        # first thing tried; numpy then read every sample through __getitem__, a TensorDataset's
        # (x,) tuples were taken as lengths, and one whose __getitem__ never raised IndexError
        # was read until the process ran out of memory)
        raise TypeError(
            f"{name} must be one length per sample (a list, numpy array or torch tensor of "
            f"ints), got the dataset itself ({type(lengths).__name__}, a torch Dataset); unlike "
            "torch's samplers, which take the dataset, the plan is made from the lengths before "
            f"any sample is read: measure them once (lengths = [{expr} for i in "
            f"range(len(dataset))]{note}, or a length the data already stores) and give the "
            "dataset to sampler.dataloader(dataset)"
        )
    if _is_hf_dataset(lengths):  # (was read whole, row by row, before the error: 5 s a 100k)
        raise TypeError(
            f"{name} must be one length per sample (a list, numpy array or torch tensor of "
            f"ints), got the dataset itself (a Hugging Face datasets.{type(lengths).__name__} "
            f"with columns {list(lengths.column_names)[:8]}); read the lengths from Arrow first, "
            "bucketloader.hf.lengths(dataset, 'input_ids') (no row is decoded), and give the "
            "dataset to sampler.dataloader(dataset), or let hf.for_text(dataset, ...) do both"
        )
    refuse_split_lengths(lengths, name)
    if isinstance(lengths, (Set, Mapping)):  # (numpy reads either as one object: shape ())
        fix = (
            "a set has no order: pass a list in sample order"
            if isinstance(lengths, Set)
            # (session 21: an image's {"height": ..., "width": ...}, as BucketSampler takes it)
            else f"it holds a length array per input {list(lengths)[:4]}, which the samplers "
            "plan together (an image's height and width: BucketSampler({...}, max_shapes=K), "
            "whose report() gives each K's padding); here pass one input's lengths"
            if _per_input(lengths)
            else f"pass a list in sample order (list({name}.values()) if its keys are the "
            "sample indices in order)"
        )
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints (the "
            f"i-th is sample i's length), got a {type(lengths).__name__}; {fix}"
        )
    if isinstance(lengths, np.ma.MaskedArray) and np.ma.getmask(lengths) is not np.ma.nomask:
        raise TypeError(
            f"{name} is a numpy masked array, whose mask would be ignored (its masked entries "
            f"counted as lengths); pass {name}.compressed() to leave the masked samples out, or "
            f"{name}.filled(value) to give them a length"
        )
    is_seq = isinstance(lengths, (list, tuple))
    if is_seq:  # numpy would silently turn True into 1
        where = _first_bool(lengths)
        if where is not None:
            item = lengths
            for i in where:
                item = item[i]
            raise TypeError(
                f"{name} must hold integer lengths, got {item!r} at index {_fmt(where)}; "
                "convert booleans with int()"
            )
    try:
        arr = np.asarray(lengths)
        if is_seq and arr.dtype.kind == "f" and arr.size and np.abs(arr).max() >= 2**53:
            # numpy stores big Python ints mixed with floats as float64, rounding them: keep
            # the exact values and check them one by one below
            arr = np.asarray(lengths, dtype=object)
    except (ValueError, TypeError, OverflowError, RecursionError):
        hf = (  # a datasets Column of token lists (s19-user)
            "; a Hugging Face dataset's column: bucketloader.hf.lengths(dataset, column) reads "
            "them from Arrow, with no row scan"
            if type(lengths).__module__.split(".")[0] == "datasets"
            else ""
        )
        raise ValueError(
            f"{name} must be a rectangular array of non-negative ints (one per sample), got "
            f"a ragged or deeply nested {type(lengths).__name__}; give every sample one length "
            f"(rows of tokens or samples? pass their lengths, e.g. [len(x) for x in rows]){hf}"
        ) from None
    if arr.ndim == 0 and arr.dtype.kind == "O":  # an object numpy reads as one opaque item
        has = getattr(lengths, "lengths", None) is not None  # a sampler, a spec, a SplitDataset
        raise TypeError(
            f"{name} must be a list, numpy array or torch tensor of non-negative ints, got a "
            f"{type(lengths).__name__}"
            + (f"; pass its lengths ({name}=<the {type(lengths).__name__}>.lengths)" if has else "")
        )
    if arr.ndim not in allowed:
        want = " or ".join(f"{d}-D" for d in allowed)
        hint = ", or (N, D)" if 2 in allowed else ""
        raise ValueError(
            f"{name} must be {want} (one length per sample{hint}), "
            f"got an array of shape {arr.shape}"
        )
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got {name} of shape {arr.shape}")
    if arr.dtype == np.bool_:
        raise TypeError(
            f"{name} must hold integer lengths, got booleans; convert with .astype(int)"
        )
    if arr.dtype.kind == "O":
        return _from_objects(arr, name)
    if arr.dtype.kind not in "iuf":
        raise TypeError(_not_numbers(name, arr, lengths))
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            idx = np.unravel_index(int(np.argmax(bad)), arr.shape)
            raise ValueError(
                f"{name} must be whole numbers, got {arr[idx].item()!r} at index {_fmt(idx)}; "
                + _whole_hint(arr[idx].item(), name)
            )
    if arr.dtype.kind != "u" and arr.min() < 0:  # min/max: one pass each, no temporary
        idx = np.unravel_index(int(np.argmax(arr < 0)), arr.shape)
        raise ValueError(
            f"{name} must be non-negative, got {_num(arr[idx])} at index {_fmt(idx)}; "
            "lengths count elements, so drop or fix that sample"
        )
    if (arr.dtype.itemsize >= 4 and arr.dtype.kind == "f") or arr.dtype.itemsize >= 8:
        # 2.0**62 is exact in every float dtype of 4 bytes or more (float16 cannot reach it)
        if arr.max() >= 2.0**62 if arr.dtype.kind == "f" else arr.max() > MAX_LENGTH:
            too_big = arr >= 2.0**62 if arr.dtype.kind == "f" else arr > MAX_LENGTH
            idx = np.unravel_index(int(np.argmax(too_big)), arr.shape)
            _raise_too_big(name, _num(arr[idx]), idx)
    return arr if arr.dtype.kind in "iu" else arr.astype(np.int64)  # (as_lengths widens)


_TO_INTS = (
    "convert them to integers first, e.g. {name} = [int(x) for x in {name}] (or "
    "np.asarray({name}, dtype=np.int64))"
)


def _not_numbers(name: str, arr: np.ndarray, given: Any) -> str:
    """The error for an array whose dtype holds no numbers (strings read from a file, dates,
    complex values), naming the first value (the first string of a list mixing numbers and
    strings, which numpy turns into strings) and, for strings, the conversion."""
    first = arr.reshape(-1)[0].item()
    if arr.dtype.kind in "US":
        where = (0,) * arr.ndim
        if isinstance(given, (list, tuple)) and arr.ndim == 1:
            i = next((i for i, x in enumerate(given) if isinstance(x, (str, bytes))), 0)
            where, first = (i,), given[i]
        digits = np.char.isdigit(np.char.strip(arr.astype(str))).all()
        fix = (
            _TO_INTS.format(name=name)
            if digits
            else "lengths are numbers: for texts, count their tokens (or characters: "
            "[len(t) for t in texts]) and pass those"
        )
        return (
            f"{name} must hold integer lengths, got strings (numpy dtype {arr.dtype}), e.g. "
            f"{first!r} at index {_fmt(where)}; {fix}"
        )
    return f"{name} must hold integer lengths, got dtype {arr.dtype} (e.g. {first!r})"


def _whole_hint(value: float, name: str = "lengths") -> str:
    """The fix for a length that is not a whole number: np.ceil cannot repair a NaN or an inf;
    a fraction of lengths below an hour may be seconds, which np.ceil would pad to whole ones."""
    if math.isfinite(value):
        if abs(value) < 3600 and "length" in name:  # (s30-first: Lhotse cut durations)
            return (
                "round lengths up with np.ceil before bucketing; durations in seconds go in as "
                "audio samples or frames, e.g. np.ceil(seconds * 16_000) or np.ceil(seconds * "
                "100) for 10 ms frames (np.ceil of seconds pads every sample to a whole second)"
            )
        return "round lengths up with np.ceil before bucketing"
    return "a missing (NaN) or infinite length cannot be bucketed: drop or fix that sample"


def _is_tensor(value: Any) -> bool:
    """A torch tensor, without importing torch (no torch imported: no tensor can exist)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _is_torch_dataset(value: Any) -> bool:
    """A ``torch.utils.data.Dataset`` (without importing torch: no torch, no such dataset)."""
    import sys

    data = getattr(getattr(sys.modules.get("torch"), "utils", None), "data", None)
    return data is not None and isinstance(value, data.Dataset)


def _item_length(dataset: Any) -> tuple[str, str]:
    """How an item of ``dataset`` is measured, as code (``len(dataset[i][0])``) and a note, read
    from its first item by the sampler's own rule (NOTE [ The length of a sample ]): an
    ``(input, label)`` tuple or a ``TensorDataset``'s item by its first element, a dict by its
    one sequence (s31-rev: ``len(dataset[i])`` was named for every dataset, the number of fields
    of a tuple item: 2 for every sample). ``len(dataset[i])`` where the item cannot be read."""
    from bucketloader._samples import is_number, measured, measured_code

    try:
        sample = dataset[0]
    except Exception:  # (an item that cannot be read here)
        return "len(dataset[i])", ""
    try:
        value, what = measured(sample)
    except Exception:  # (a dict of several sequences: which is the length is the user's call)
        keys = list(sample)[:8] if isinstance(sample, Mapping) else []
        return (
            ("len(dataset[i][key])", f" with key one of {keys}")
            if keys
            else ("len(dataset[i])", "")
        )
    item = measured_code(what, "dataset[i]") or "dataset[i]"
    return (f"int({item})" if is_number(value) else f"len({item})"), ""


def _is_hf_dataset(value: Any) -> bool:
    """A Hugging Face ``datasets.Dataset`` (by its class, without importing ``datasets``)."""
    return hasattr(value, "column_names") and any(
        c.__name__ == "Dataset" and c.__module__.split(".")[0] == "datasets"
        for c in type(value).__mro__
    )


def _tensor_to_numpy(t: Any, name: str) -> np.ndarray:
    """A CPU numpy copy of any tensor: detached, dense, in a dtype numpy has (bf16 -> float64)."""
    import torch

    try:
        t = t.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_complex():
            raise TypeError(f"{name} must hold integer lengths, got {describe(t)}")
        if t.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer lengths, got booleans; convert with .long()")
        if t.dtype.is_floating_point and t.dtype not in (torch.float16, torch.float32):
            t = t.to(torch.float64)  # bfloat16, float8: exact in float64
        elif t.is_quantized:
            t = t.dequantize().to(torch.float64)
        return t.cpu().numpy()
    except (RuntimeError, NotImplementedError) as exc:
        raise TypeError(
            f"{name} must be a tensor whose values can be read on the CPU, got {describe(t)} "
            f"({exc}); pass lengths.cpu() or a list of ints"
        ) from None


def _sized(item: Any) -> bool:
    """Whether an object array's ``item`` is a sequence (a list, a 1-D array or tensor): a
    sample, not a length. A 0-d array or tensor has ``__len__`` but no length."""
    if isinstance(item, numbers.Real) or not hasattr(item, "__len__"):
        return False
    try:
        len(item)
    except TypeError:
        return False
    return True


def _from_objects(arr: np.ndarray, name: str) -> np.ndarray:
    """Exact int64 lengths from an object array (big Python ints, mixed ints and floats)."""
    out = np.empty(arr.shape, dtype=np.int64)
    flat = out.reshape(-1)
    for i, item in enumerate(arr.reshape(-1).tolist()):
        idx = np.unravel_index(i, arr.shape)
        if isinstance(item, (str, bytes, np.str_, np.bytes_)):
            raise TypeError(
                f"{name} must hold integer lengths, got the string {item!r} at index "
                f"{_fmt(idx)}; {_TO_INTS.format(name=name)}"
            )
        if isinstance(item, Mapping):  # a dataset's sample (a Hugging Face Dataset's rows)
            raise TypeError(
                f"{name} must hold integer lengths, got a sample at index {_fmt(idx)} (a "
                f"{type(item).__name__} with keys {list(item)[:8]}): {name} holds one length per "
                f"sample, not the samples; measure them first, e.g. "
                f"bucketloader.hf.lengths(dataset, 'input_ids') for a Hugging Face dataset, or "
                f"[len(sample['input_ids']) for sample in dataset]"
            )
        if _sized(item):  # (a pandas column of token lists, df["input_ids"].values: it
            # printed the whole array and no way on, s28-user)
            raise TypeError(
                f"{name} must hold integer lengths, got a {type(item).__name__} of "
                f"{len(item):,} elements at index {_fmt(idx)} (a sample's tokens?): {name} holds "
                f"one length per sample, not the samples; pass their lengths, e.g. "
                f"[len(x) for x in rows]"
            )
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Real):
            raise TypeError(f"{name} must hold integer lengths, got {item!r} at index {_fmt(idx)}")
        if not isinstance(item, numbers.Integral):
            try:
                f = float(item)
            except OverflowError:
                _raise_too_big(name, item, idx)
            if not (math.isfinite(f) and f == math.floor(f)):
                raise ValueError(
                    f"{name} must be whole numbers, got {item!r} at index {_fmt(idx)}; "
                    + _whole_hint(f, name)
                )
            item = int(f)
        value = int(item)
        if value < 0:
            raise ValueError(
                f"{name} must be non-negative, got {value} at index {_fmt(idx)}; "
                "lengths count elements, so drop or fix that sample"
            )
        if value > MAX_LENGTH:
            _raise_too_big(name, value, idx)
        flat[i] = value
    return out


def _num(x: Any) -> Any:
    """A numpy scalar as a Python number (ints for integral values, for messages)."""
    v = x.item() if hasattr(x, "item") else x
    return int(v) if isinstance(v, float) and math.isfinite(v) and v == int(v) else v


def _raise_too_big(name: str, value: Any, idx: Any) -> None:
    raise ValueError(
        f"{name} must be < {_LIMIT_TEXT}, got {value} at index {_fmt(idx)}; bucketloader "
        "supports lengths up to 2**62 - 1 (so padded sizes stay exact in int64): fix or drop "
        "that sample"
    )


def _first_bool(seq: Any) -> tuple[int, ...] | None:
    """Index path of the first bool in nested lists/tuples, or None."""
    if not {bool, np.bool_, list, tuple} & set(map(type, seq)):  # fast path, C speed
        return None
    for i, item in enumerate(seq):
        if isinstance(item, (bool, np.bool_)):
            return (i,)
        if isinstance(item, (list, tuple)):
            inner = _first_bool(item)
            if inner is not None:
                return (i, *inner)
    return None


def _fmt(idx: tuple[Any, ...]) -> str:
    return str(int(idx[0])) if len(idx) == 1 else str(tuple(int(i) for i in idx))
