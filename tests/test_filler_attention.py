"""Filler rows attend one position: plain torch attention stays finite on them, so the documented
loss recipe never turns a filler row into NaN weights."""

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bucketloader import BucketSampler


def _train(sampler, dataset, steps=None):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(100, 16)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        num_layers=1,
        enable_nested_tensor=False,
    )
    head = torch.nn.Linear(16, 100)
    params = [*emb.parameters(), *mha.parameters(), *enc.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    fillers = 0
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=sampler.collator())
    for step, batch in enumerate(loader):
        x = emb(batch["inputs"])
        pad = ~batch["attention_mask"].bool()
        x, _ = mha(x, x, x, key_padding_mask=pad)
        x = enc(x, src_key_padding_mask=pad)
        tok = torch.nn.functional.cross_entropy(
            head(x).flatten(0, 1), batch["inputs"].flatten(), reduction="none"
        ).view(batch["inputs"].shape)
        per_row = (tok * batch["attention_mask"]).sum(1)
        loss = (per_row * batch["sample_mask"]).sum()  # the recipe of docs/loops.md
        fillers += int((~batch["sample_mask"]).sum())
        loss.backward()
        opt.step()
        opt.zero_grad()
        assert torch.isfinite(loss), f"step {step}: loss {loss}"
        if steps is not None and step + 1 == steps:
            break
    bad = [i for i, p in enumerate(params) if not torch.isfinite(p).all()]
    assert not bad, f"non-finite weights in parameters {bad}"
    return fillers


@pytest.mark.parametrize("kind", ["tensor", "list", "dict"])
def test_filler_rows_train_finite_with_torch_attention(kind):
    lengths = np.random.default_rng(0).integers(5, 40, size=101)  # buckets end short
    data = [torch.randint(1, 100, (int(n),)) for n in lengths]
    if kind == "list":
        data = [t.tolist() for t in data]
    elif kind == "dict":
        data = [{"inputs": t} for t in data]
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=8, seed=0)
    assert _train(sampler, data) > 0  # the run saw filler rows


@pytest.mark.parametrize("side", ["right", "left"])
def test_filler_rows_attend_one_pad_position(side):
    sampler = BucketSampler([3, 3, 3], num_buckets=1, batch_size=4, seed=0)
    collate = sampler.collator(side=side)
    batch = collate([torch.tensor([1, 2, 3]), torch.tensor([4, 5])])
    mask = batch["attention_mask"]
    assert batch["sample_mask"].tolist() == [True, True, False, False]
    assert batch["lengths"].tolist() == [3, 2, 0, 0]  # lengths stay 0 on filler rows
    pos = 0 if side == "right" else -1
    assert mask[2:].sum(1).tolist() == [1, 1] and mask[2:, pos].all()
    assert (batch["inputs"][2:] == 0).all()  # the attended position holds the pad value
    real = [3, 2]
    assert mask[:2].sum(1).tolist() == real  # real rows unchanged


def test_eval_sampler_filler_rows_attend_one_position():
    """EvalSampler's padding rows (and a rank's all-filler last step) go through the general path
    with stand-in samples: those rows attend one position too."""
    from bucketloader import EvalSampler

    lengths = np.random.default_rng(1).integers(1, 30, size=37)
    data = [torch.randint(1, 100, (int(n),)) for n in lengths]
    seen = 0
    for rank in range(4):
        s = EvalSampler(lengths, num_buckets=3, batch_size=4, num_replicas=4, rank=rank)
        for batch in s.dataloader(data):
            sm, mask = batch["sample_mask"], batch["attention_mask"]
            assert (mask[~sm].sum(1) == 1).all() and (batch["lengths"][~sm] == 0).all()
            assert (mask[sm].sum(1) == batch["lengths"][sm]).all()
            seen += int((~sm).sum())
    assert seen > 0


def test_zero_length_samples_warn_once_with_the_count_and_fix():
    lengths = np.array([0, 0, 3, 5, 7, 9, 11, 4])  # the zeros share a bucket with 3 and 4
    with pytest.warns(UserWarning, match=r"plans 2 of 8 samples of length 0.*min_length=1") as rec:
        BucketSampler(lengths, num_buckets=2, batch_size=2)
    assert sum("length 0" in str(w.message) for w in rec) == 1  # one warning, not two
    assert "NaN in softmax attention" in str(rec[0].message)
    with warnings.catch_warnings(record=True) as rec:  # dropped: only the loss count is said
        warnings.simplefilter("always")
        BucketSampler(lengths, num_buckets=2, batch_size=2, min_length=1, overflow="drop")
        BucketSampler(lengths + 1, num_buckets=2, batch_size=2)
    assert [str(w.message) for w in rec if "length 0" in str(w.message)] == []
    assert any("2 by min_length" in str(w.message) for w in rec)


def _zero_warnings(rec):
    return [str(w.message) for w in rec if "length 0" in str(w.message)]


@pytest.mark.parametrize("joint", [False, True])
def test_a_stream_warns_at_its_first_zero_length_sample_and_counts_them(joint):
    """s10 left alone: the streams said nothing about samples of length 0 (the samplers warn at
    planning). A BucketIterable sees lengths as it reads them: one warning when a pass keeps the
    first, in the samplers' words (consequence and fix), and the count in report() and the
    state, which a resume carries on."""
    from bucketloader.plan.limits import ZERO_LENGTH_HARM
    from bucketloader.stream import BucketIterable

    lengths = [3, 0, 5, 0, 7, 4, 0, 2, 6, 1]
    samples = [{"a": [1] * n, "b": [2] * max(n, 1)} for n in lengths]

    def make(**options):
        if joint:  # (several inputs: the general path; a sample with any input of length 0)
            return BucketIterable(
                samples, length_fn=("a", "b"), boundaries={"a": [4, 8], "b": [4, 8]},
                batch_size=2, **options,
            )  # fmt: skip
        return BucketIterable(samples, length_fn="a", boundaries=[4, 8], batch_size=2, **options)

    stream = make()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        full = list(stream)
    (said,) = _zero_warnings(rec)  # one, at the first of three
    assert said.startswith("this BucketIterable keeps samples of length 0") and said.endswith(
        ZERO_LENGTH_HARM
    )
    assert stream.report().totals["zero_length"] == 3
    again, resumed = make(), make()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        it = iter(again)
        head = [next(it) for _ in range(2)]
        state = again.state_dict()
        assert 0 < state["stats"]["zero_length"] < 3  # (the state counts what it read)
        resumed.load_state_dict(state)
        assert head + list(resumed) == full
    assert resumed.report().totals["zero_length"] == 3
    dropped = make(min_length=1, overflow="drop")  # the fix: no warning, no count
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        list(dropped)
    assert _zero_warnings(rec) == []
    totals = dropped.report().totals
    assert "zero_length" not in totals and totals["too_short"] == 3


def test_zero_length_samples_in_the_cli_report(tmp_path, capsys):
    from bucketloader.cli.main import main

    path = tmp_path / "zeros.txt"
    path.write_text("0\n0\n3\n5\n7\n9\n")
    assert main(["report", str(path), "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "warning: 2 of 6 samples of length 0" in out and "min_length=1" in out
    path.write_text("1\n3\n5\n")
    assert main(["report", str(path), "-k", "2"]) == 0
    assert "length 0" not in capsys.readouterr().out


def test_zero_length_samples_of_parquet_shards_are_counted_per_sample(tmp_path, capsys):
    """Parquet shards reach the report as a histogram: the note counts samples, not distinct
    lengths (three rows of length 0 are three)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(pa.table({"n": [0, 0, 3, 5]}), shards / "a.parquet")
    pq.write_table(pa.table({"n": [0, 7, 9]}), shards / "b.parquet")
    assert main(["report", str(shards), "--column", "n", "-k", "2"]) == 0
    assert "warning: 3 of 7 samples of length 0" in capsys.readouterr().out
