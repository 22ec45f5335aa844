"""Fuzzing the packing and evaluation samplers (issue 12's contract over the public API added by
issues 13 and 15): any input gives a valid plan that keeps its promises, or one ValueError /
TypeError naming the argument.

Invariants: ``PackSampler`` yields every document that fits exactly once per epoch on one rank
(policies aside), equal ``len`` on every rank, every collated batch at a promised shape, rows
holding whole documents with labels -100 at every document start; ``EvalSampler`` yields every
sample exactly once over its ranks, equal steps per rank, every batch within its planned shape.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fuzzing import FUZZ, call, lengths_inputs, mostly, odd_ints, reference_lengths
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader import EvalSampler
from bucketloader.pack import IGNORE_INDEX, PackSampler

pytestmark = pytest.mark.timeout(120)

PACK_NAMES = ["lengths", "row_length", "batch_size", "max_tokens", "overflow", "last_batch",
              "num_replicas", "rank", "seed", "shuffle"]  # fmt: skip
EVAL_NAMES = ["lengths", "num_buckets", "batch_size", "max_tokens", "num_replicas", "rank",
              "balance", "strategy", "boundaries", "last_batch"]  # fmt: skip


@st.composite
def pack_options(draw):
    options = {"row_length": draw(mostly(st.integers(1, 64), odd_ints()))}
    if draw(st.integers(0, 2)) == 0 and isinstance(options["row_length"], int):
        options["row_length"] = (options["row_length"], options["row_length"] + draw(
            st.integers(-2, 64)))  # fmt: skip
    budget = draw(mostly(st.sampled_from(["batch_size", "max_tokens"]), st.just("both")))
    if budget in ("batch_size", "both"):
        options["batch_size"] = draw(mostly(st.integers(1, 5), odd_ints()))
    if budget in ("max_tokens", "both"):
        options["max_tokens"] = draw(mostly(st.integers(32, 512), odd_ints()))
    options["overflow"] = draw(mostly(st.sampled_from(["error", "drop", "truncate"]),
                                      st.sampled_from(["", None, "split"])))  # fmt: skip
    options["last_batch"] = draw(mostly(st.sampled_from(["pad", "fill", "drop"]),
                                        st.sampled_from(["keep", "", 0])))  # fmt: skip
    return options


@settings(FUZZ, max_examples=300)
@pytest.mark.filterwarnings("ignore:this PackSampler leaves out:UserWarning")  # on purpose
@given(
    lengths=lengths_inputs(max_size=30, max_length=80),
    options=pack_options(),
    replicas=mostly(st.integers(1, 3), st.sampled_from([0, True, 2.5])),
    seed=mostly(st.integers(0, 3), st.sampled_from([-1, None])),
)
def test_pack_sampler_any_input(lengths, options, replicas, seed):
    ref = reference_lengths(lengths)
    ranks = range(replicas) if isinstance(replicas, int) and replicas >= 1 else [0]
    made = [
        call(
            lambda r=r: PackSampler(lengths, num_replicas=replicas, rank=r, seed=seed, **options),
            PACK_NAMES,
        )
        for r in ranks
    ]
    if not made[0].ok:
        assert all(not m.ok for m in made)
        return
    assert ref is not None, f"accepted invalid lengths {lengths!r}"
    samplers = [m.value for m in made]
    lens = np.array(ref)
    longest = max(np.atleast_1d(samplers[0].spec.row_lengths))
    seen = []
    for sampler in samplers:
        batches = list(sampler)
        assert len(batches) == len(sampler) == len(samplers[0])
        collate = sampler.collator()
        for batch in batches:
            seen.extend(batch)
            docs = [torch.arange(1, int(lens[i]) + 1) for i in batch]
            out = collate(docs)
            shape = tuple(out["input_ids"].shape)
            assert shape in sampler.shapes
            starts = out["position_ids"] == 0
            real = out["document_ids"] >= 0
            assert (out["labels"][starts & real] == IGNORE_INDEX).all()  # no cross-document target
            assert int(real.sum()) == int(np.minimum(lens[batch], longest).sum())
    fits = [i for i, n in enumerate(ref) if n <= longest]
    if options.get("overflow") != "drop" or len(fits) == len(ref):
        if samplers[0].spec.last_batch == "pad" and len(samplers) == 1:
            assert sorted(seen) == list(range(len(ref)))  # every document exactly once


@settings(FUZZ, max_examples=200)
@pytest.mark.filterwarnings("ignore:this EvalSampler plans .* of length 0:UserWarning")
@given(
    lengths=lengths_inputs(max_size=30),
    k=mostly(st.integers(1, 4), odd_ints()),
    budget=mostly(
        st.sampled_from([{"batch_size": 3}, {"max_tokens": 400}, {"batch_size": 1}]),
        st.sampled_from([{}, {"batch_size": 0}, {"last_batch": "drop"}]),
    ),
    replicas=mostly(st.integers(1, 4), st.sampled_from([0, True, 2.5])),
    balance=mostly(st.booleans(), st.sampled_from([1, None])),
)
def test_eval_sampler_any_input(lengths, k, budget, replicas, balance):
    ref = reference_lengths(lengths)
    ranks = range(replicas) if isinstance(replicas, int) and replicas >= 1 else [0]
    made = [
        call(
            lambda r=r: EvalSampler(
                lengths, num_buckets=k, num_replicas=replicas, rank=r, balance=balance, **budget
            ),
            EVAL_NAMES,
        )
        for r in ranks
    ]
    if not made[0].ok:
        assert all(not m.ok for m in made)
        return
    assert ref is not None, f"accepted invalid lengths {lengths!r}"
    samplers = [m.value for m in made]
    steps = {len(s) for s in samplers}
    assert len(steps) == 1  # equal steps on every rank
    seen = []
    for sampler in samplers:
        table = sampler.shape_table
        for batch in sampler:
            rows = [i for i in batch.rows.tolist() if i >= 0]
            assert rows == list(batch)
            seen.extend(rows)
            if rows:
                b, *planned = table.target(np.array(ref)[rows])
                assert len(batch.rows) == b and max(np.array(ref)[rows]) <= planned[0]
    assert sorted(seen) == list(range(len(ref)))  # every sample exactly once, over all ranks
