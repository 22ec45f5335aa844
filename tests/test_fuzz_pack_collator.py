"""Fuzzing ``PackCollator`` (issue 21) with the fuzz suite's contract (tests/fuzzing.py): any batch
(documents as lists, tuples, arrays or tensors of any dtype, nested, empty, dicts with or without
their labels, huge ids, a planned shape) under any options gives exactly the layout an independent
reference computes, or one ValueError / TypeError naming the argument.

The reference below is written without the collator's code: each document's ids as Python ints
(integers and bools only, every value an int64 can hold), the row length the table promises for
the longest document, next-fit rows in the order given, and every field of NOTE [ Packed batch
layout ] rebuilt token by token.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import pytest
import torch
from fuzzing import FUZZ, HUGE_INTS, call
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.pack import IGNORE_INDEX, PackCollator, PackTable
from bucketloader.plan import PlannedBatch

pytestmark = pytest.mark.timeout(120)

INT64 = (-(2**63), 2**63 - 1)
BUILD_NAMES = ["table", "key", "labels_key", "pad_token_id", "max_seqlen", "seq_idx"]
CALL_NAMES = ["samples", "sample", "document", "token", "labels", "planned_shape", "max_seqlen",
              "batch"]  # fmt: skip

TORCH_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
                torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
                torch.uint64]  # fmt: skip
NUMPY_DTYPES = ["int8", "uint8", "int32", "int64", ">i8", "uint32", "uint64", "bool", "float32",
                "float64", "complex64", "object", "U3"]  # fmt: skip


# --- adversarial batches ----------------------------------------------------------------------
@st.composite
def token_values(draw, length):
    """``length`` ids: small ones, sometimes a huge or negative one."""
    small = st.integers(-3, 300)
    odd = st.sampled_from([*HUGE_INTS, -(2**63), -(2**63) - 1, 2**63 - 1])
    values = draw(st.lists(small, min_size=length, max_size=length))
    if values and draw(st.integers(0, 9)) == 0:
        values[draw(st.integers(0, length - 1))] = draw(odd)
    return values


@st.composite
def document(draw, length):
    """One document's token sequence in any container and dtype (mostly valid)."""
    kind = draw(st.sampled_from(["list"] * 3 + ["tensor"] * 3 + ["numpy"] * 2 + ["tuple", "odd"]))
    values = draw(token_values(length))
    if kind == "list":
        if values and draw(st.integers(0, 7)) == 0:  # a bool, a numpy int, a float, a nested list
            values[0] = draw(st.sampled_from([True, np.int32(7), np.uint64(2**64 - 1), 2.0, 2.5,
                                              np.float32(1.0), [1], None, "1"]))  # fmt: skip
        return values
    if kind == "tuple":
        return tuple(values)
    if kind == "odd":
        return draw(st.sampled_from([
            None, 5, "abc", b"ab", {1, 2}, range(length), iter(values), np.int64(3),
            torch.tensor(3), torch.zeros((2, 3), dtype=torch.int64), np.zeros((0, 3), np.int64),
            torch.arange(2 * length, dtype=torch.int64).reshape(2, length), [[1, 2], [3]],
            torch.arange(8)[::2],
        ]))  # fmt: skip
    safe = [min(max(v, 0), 127) for v in values]  # representable in every dtype drawn
    if kind == "tensor":
        dtype = draw(st.sampled_from(TORCH_DTYPES))
        if dtype == torch.uint64 and draw(st.booleans()):
            return torch.tensor([2**63 + v for v in safe], dtype=torch.uint64)
        if dtype == torch.int64:
            return torch.tensor([min(max(v, INT64[0]), INT64[1]) for v in values])
        return torch.tensor(safe, dtype=dtype)
    dtype = np.dtype(draw(st.sampled_from(NUMPY_DTYPES)))
    if dtype.kind == "U":
        return np.array([str(v) for v in safe], dtype=dtype)
    if dtype == np.uint64 and draw(st.booleans()):
        return np.array([2**64 - 1 - v for v in safe], dtype=np.uint64)
    return np.array(safe, dtype=dtype)


@st.composite
def batches(draw, key, labels_key):
    """A batch: bare documents or dicts (``key``, sometimes ``labels_key``), 0-7 of them, some
    empty; sometimes a mixed or malformed batch, a tuple, or a batch with a planned shape."""
    n = draw(st.integers(0, 7))
    lengths = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 13]), min_size=n, max_size=n))
    style = draw(st.sampled_from(["bare"] * 3 + ["dict"] * 2 + ["mixed"]))
    docs = []
    for i, length in enumerate(lengths):
        doc = draw(document(length))
        as_dict = style == "dict" or (style == "mixed" and draw(st.booleans()))
        if as_dict:
            sample = {key: doc, "id": i}
            if labels_key is not None and draw(st.integers(0, 2)) == 0:
                shift = draw(st.sampled_from([0] * 6 + [-1, 1]))  # labels that do not align
                sample[labels_key] = draw(document(max(length + shift, 0)))
            if draw(st.integers(0, 19)) == 0:
                del sample[key]
            doc = sample
        docs.append(doc)
    wrap = draw(st.sampled_from(["list"] * 6 + ["tuple", "planned", "odd"]))
    if wrap == "tuple":
        return tuple(docs)
    if wrap == "planned":
        shape = draw(st.tuples(st.integers(1, 3), st.sampled_from([1, 4, 6, 8, 13])))
        return PlannedBatch(docs, planned_shape=shape)
    if wrap == "odd":
        return draw(st.sampled_from([None, "abc", {"input_ids": [1]}, np.array([1, 2]),
                                     torch.tensor([[1, 2]]), iter(docs)]))  # fmt: skip
    return docs


@st.composite
def tables(draw):
    widths = sorted(draw(st.sets(st.sampled_from([1, 4, 6, 8, 13]), min_size=1, max_size=3)))
    rows = [draw(st.integers(1, 3)) for _ in widths]
    docs = [draw(st.integers(r, 3 * r + 4)) for r in rows]
    truncate = draw(st.booleans())
    longest = None
    if draw(st.booleans()):
        longest = tuple(draw(st.integers(1, w)) for w in widths)
    return PackTable(row_lengths=tuple(widths), batch_sizes=tuple(rows),
                     max_documents=tuple(docs), truncate=truncate, longest=longest)  # fmt: skip


def odd_option(valid):
    return st.one_of(
        valid, st.sampled_from([True, 2.5, "1", None, -1, 0, 2**63, -(2**63) - 1, np.int64(3)])
    )


# --- the independent reference ----------------------------------------------------------------
class Refused(Exception):
    """The reference says the collator must refuse the batch."""


def ids_of(value):
    """A document's ids as Python ints (flattened), or :class:`Refused`."""
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype.is_complex:
            raise Refused("float ids")
        out = [int(x) for x in value.reshape(-1).tolist()]
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "biu":
            raise Refused("not an integer array")
        out = [int(x) for x in value.reshape(-1).tolist()]
    elif isinstance(value, (list, tuple)):
        out = []
        for x in value:
            if isinstance(x, (bool, np.bool_)):
                out.append(int(x))
            elif isinstance(x, numbers.Integral):
                out.append(int(x))
            else:
                raise Refused(f"an id {x!r}")
    else:
        raise Refused(f"a document of type {type(value).__name__}")
    if any(not INT64[0] <= x <= INT64[1] for x in out):
        raise Refused("an id past int64")
    return out


def reference(batch, table, *, key, labels_key, pad, max_seqlen, seq_idx):
    """Every output field as Python lists, or :class:`Refused`."""
    if not isinstance(batch, (list, tuple)):
        raise Refused("not a list")
    planned = getattr(batch, "planned_shape", None)
    if planned is not None and tuple(planned) not in table.shapes:
        raise Refused("planned shape not in the table")
    if not batch and planned is None:
        raise Refused("empty batch")
    docs, labels = [], None
    if batch:
        dicts = [isinstance(s, dict) for s in batch]
        if any(dicts) and not all(dicts):
            raise Refused("dicts and bare documents mixed")
        if all(dicts):
            if any(key not in s for s in batch):
                raise Refused("a dict without its token field")
            docs = [ids_of(s[key]) for s in batch]
            with_labels = [labels_key is not None and labels_key in s for s in batch]
            if any(with_labels) and not all(with_labels):
                raise Refused("labels on some documents only")
            if all(with_labels):
                labels = [ids_of(s[labels_key]) for s in batch]
                if [len(x) for x in labels] != [len(x) for x in docs]:
                    raise Refused("labels do not align")
        else:
            docs = [ids_of(s) for s in batch]
    lens = [len(d) for d in docs]
    longest = max(lens, default=0)
    if planned is not None:
        shape = table.shapes.index(tuple(planned))
        if longest > table.row_lengths[shape] and not table.truncate:
            raise Refused("longer than the planned row")
    elif longest > table.row_lengths[-1]:
        if not table.truncate:
            raise Refused("longer than every row")
        shape = len(table.row_lengths) - 1
    else:
        shape = next(i for i, w in enumerate(table.row_lengths) if longest <= w)
    rows, width = table.shapes[shape]
    docs = [d[:width] for d in docs]
    labels = None if labels is None else [x[:width] for x in labels]
    lens = [len(d) for d in docs]
    if isinstance(max_seqlen, int) and max(lens, default=0) > max_seqlen:
        raise Refused("longer than max_seqlen")
    if len(docs) > table.max_documents[shape]:
        raise Refused("too many documents")
    spans, row, used = [], [], 0  # next-fit, in the order given
    for i, n in enumerate(lens):
        if row and used + n > width:
            spans.append(row)
            row, used = [], 0
        row.append(i)
        used += n
    if docs:
        spans.append(row)
    if len(spans) > rows:
        raise Refused("more rows than planned")
    spans += [[] for _ in range(rows - len(spans))]
    piece = max_seqlen if isinstance(max_seqlen, int) and max_seqlen < width else width
    out = {k: [] for k in ("input_ids", "labels", "position_ids", "document_ids", "seq_idx")}
    segments = []  # lengths, in order
    for members in spans:
        r_ids, r_lab, r_pos, r_doc, r_seq = [], [], [], [], []
        for i in members:
            own = docs[i] if labels is None else labels[i]
            r_ids += docs[i]
            r_lab += [IGNORE_INDEX if t == 0 else own[t] for t in range(lens[i])]
            r_pos += list(range(lens[i]))
            r_doc += [i] * lens[i]
            r_seq += [len(segments)] * lens[i]
            segments.append(lens[i])
        run = width - len(r_ids)
        while run > 0:
            n = min(run, piece)
            r_ids += [pad] * n
            r_lab += [IGNORE_INDEX] * n
            r_pos += list(range(n))
            r_doc += [-1] * n
            r_seq += [len(segments)] * n
            segments.append(n)
            run -= n
        for k, v in zip(out, (r_ids, r_lab, r_pos, r_doc, r_seq), strict=True):
            out[k].append(v)
    total = table.max_documents[shape] + rows * math.ceil(width / piece)
    cu = [0]
    for n in segments:
        cu.append(cu[-1] + n)
    out["cu_seqlens"] = cu + [rows * width] * (total + 1 - len(cu))
    out["max_seqlen"] = (
        max(segments) if max_seqlen == "tight" else (max_seqlen if max_seqlen else width)
    )
    if not seq_idx:
        del out["seq_idx"]
    return out


# --- the test ---------------------------------------------------------------------------------
@settings(FUZZ, max_examples=400)
@given(
    data=st.data(),
    table=st.one_of(tables(), st.sampled_from([None, (4, 8), {"row_lengths": (4,)}])),
    key=st.sampled_from(["input_ids", "tokens"]),
    labels_key=st.sampled_from(["labels", "labels", None]),
    pad=st.one_of(st.integers(-2, 5), st.sampled_from(INT64), odd_option(st.just(0))),
    max_seqlen=st.one_of(
        st.none(), st.just("tight"), st.integers(1, 14), st.sampled_from([0, -1, "loose", 2.5])
    ),
    seq_idx=odd_option(st.booleans()),
)
def test_pack_collator_lays_out_any_batch_or_says_why(
    data, table, key, labels_key, pad, max_seqlen, seq_idx
):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # max_seqlen="tight" warns, on purpose
        made = call(
            lambda: PackCollator(
                table,
                key=key,
                labels_key=labels_key,
                pad_token_id=pad,
                max_seqlen=max_seqlen,
                seq_idx=seq_idx,
            ),
            BUILD_NAMES,
        )
    valid_options = (
        isinstance(table, PackTable)
        and isinstance(pad, numbers.Integral)
        and not isinstance(pad, (bool, np.bool_))
        and INT64[0] <= pad <= INT64[1]
        and (max_seqlen in (None, "tight") or (type(max_seqlen) is int and max_seqlen >= 1))
        and isinstance(seq_idx, (bool, np.bool_))
    )
    if isinstance(max_seqlen, int) and valid_options and table.longest:
        valid_options = max(table.longest) <= max_seqlen  # refused up front
    assert made.ok == valid_options, (made.error, table, pad, max_seqlen, seq_idx)
    if not made.ok:
        return
    collate = made.value
    batch = data.draw(batches(key, labels_key))
    try:
        expected = reference(batch, table, key=key, labels_key=labels_key, pad=int(pad),
                             max_seqlen=max_seqlen, seq_idx=bool(seq_idx))  # fmt: skip
    except Refused as why:
        expected = why
    got = call(lambda: collate(batch), CALL_NAMES)
    if isinstance(expected, Refused):
        assert not got.ok, f"accepted a batch the reference refuses ({expected}): {batch!r}"
        return
    assert got.ok, f"refused a valid batch {batch!r}: {got.error}"
    out = got.value
    assert set(out) == set(expected)
    rows, width = np.array(expected["input_ids"]).shape
    assert (rows, width) in table.shapes
    dtypes = {
        "input_ids": torch.int64,
        "labels": torch.int64,
        "position_ids": torch.int64,
        "document_ids": torch.int32,
        "cu_seqlens": torch.int32,
        "seq_idx": torch.int32,
    }
    for name, dtype in dtypes.items():
        if name in expected:
            assert out[name].dtype == dtype, name
            assert out[name].tolist() == expected[name], name
    assert out["max_seqlen"] == expected["max_seqlen"] and type(out["max_seqlen"]) is int


# --- what the fuzzing found (each failed before the fix) --------------------------------------
TABLE = PackTable(row_lengths=(4, 8), batch_sizes=(2, 1), max_documents=(6, 6))


@pytest.mark.parametrize(
    "batch",
    [
        [torch.tensor([1, 2]), torch.tensor([[3, 4], [5, 6]])],  # torch.cat's RuntimeError
        [torch.tensor([1]), torch.tensor(3)],  # a 0-d tensor after a 1-D one
        [np.array([[1, 2]], dtype=np.int32), [3]],
    ],
)
def test_documents_of_any_dims_count_every_element(batch):
    out = PackCollator(TABLE)(batch)
    flat = [int(x) for doc in batch for x in np.asarray(doc).reshape(-1)]
    assert out["input_ids"][out["document_ids"] >= 0].tolist() == flat


def test_a_truncated_two_dim_document_is_cut_by_elements_not_rows():
    table = PackTable(row_lengths=(4,), batch_sizes=(1,), max_documents=(2,), truncate=True)
    out = PackCollator(table)([torch.arange(1, 11).reshape(2, 5)])
    assert out["input_ids"].tolist() == [[1, 2, 3, 4]]


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        ([{"x": [1]}], ValueError, "batch position 0 has no field key='input_ids'"),
        ([{"input_ids": [1]}, {"x": [1]}], ValueError, "batch position 1 has no field key="),
        ([{"input_ids": None}], TypeError, "field 'input_ids' of the sample at batch position 0"),
        ([{"input_ids": [1], "labels": None}], TypeError, "field 'labels' of the sample"),
        ([{"input_ids": [1], "labels": [1]}, {"input_ids": [2]}], ValueError, "lacks the labels"),
        ([{"input_ids": [1]}, {"input_ids": [2], "labels": [2]}], ValueError, "has the labels"),
        ([{"input_ids": [1]}, [2]], TypeError, "samples mix dicts and lists"),
        ([[1], {2, 3}], TypeError, "batch position 1 is set"),
        ([[1], range(3)], TypeError, "batch position 1 is range"),
        ([[1], np.int64(3)], TypeError, "batch position 1 is int64"),
        ([[1, None, 2]], TypeError, "holds None"),
        ([torch.tensor([2**63], dtype=torch.uint64)], ValueError, "int64 cannot hold"),
    ],
)
def test_malformed_batches_get_one_clear_error(batch, error, match):
    with pytest.raises(error, match=match):
        PackCollator(TABLE)(batch)


def test_small_uint64_tensors_are_exact():
    out = PackCollator(TABLE)([torch.tensor([7, 2**40], dtype=torch.uint64)])
    assert out["input_ids"][0, :2].tolist() == [7, 2**40]
