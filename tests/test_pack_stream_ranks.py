"""A packing stream split over ranks (NOTE [ A packing stream split over ranks ] in
bucketloader/stream/_rows.py): exactly ``steps_per_epoch`` batches of the one planned shape on
every rank whatever the shards hold, padding-only steps once a shard runs dry, every document
at most once, the counters from the main process, exact resume behind DataLoader workers,
validation at the call, and one real 2-process gloo run under DDP.

Ranks are simulated in one process (no schedule to agree on: packing has one shape); the gloo
run is this file started as a script (``python test_pack_stream_ranks.py worker ...``) with
hard timeouts, as in ``tests/test_distributed.py``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import free_port, load_real, run_ranks
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.pack import PackCollator, PackTable
from bucketloader.plan import PlannedBatch
from bucketloader.stream import PackIterable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

TIMEOUT_S = 300  # a loaded 2-core machine starts two Python+torch processes slowly
ROW, BATCH = 512, 4


@pytest.fixture(scope="module")
def gsm8k():
    return load_real("gsm8k").sum(1)[:1500] + 2  # prompt + response + 2 special tokens


def _docs(lengths, offset=0):
    return [{"id": offset + i, "input_ids": [1 + i % 5] * int(n)} for i, n in enumerate(lengths)]


def _ids(batches):
    return [[(d["id"], len(d["input_ids"])) for d in b] for b in batches]


def _streams(shards, steps, **kw):
    options = {"row_length": ROW, "batch_size": BATCH, "open_rows": 16, **kw}
    return [
        PackIterable(
            shard,
            length_fn="input_ids",
            num_replicas=len(shards),
            rank=r,
            steps_per_epoch=steps,
            **options,
        )
        for r, shard in enumerate(shards)
    ]


def check_in_step(streams, runs, steps, shards, *, fill=False):
    """Every rank: exactly ``steps`` PlannedBatches of the one shape, collated to it; each
    document at most once (``"pad"``); the counters add up."""
    b, length = streams[0].shapes[0]
    collate = streams[0].collator()
    assert [len(r) for r in runs] == [steps] * len(runs)
    for stream, run, shard in zip(streams, runs, shards, strict=True):
        tokens = 0
        for batch in run:
            assert isinstance(batch, PlannedBatch) and batch.planned_shape == (b, length)
            assert batch.num_real == len(batch)
            out = collate(batch)
            assert tuple(out["input_ids"].shape) == (b, length)
            assert out["cu_seqlens"].shape == (stream.max_documents + b + 1,)
            tokens += int((out["document_ids"] >= 0).sum())
            if not batch:  # a padding-only step: no target, no document
                assert (out["labels"] == -100).all() and (out["document_ids"] == -1).all()
        st_ = stream.stats
        assert st_["batches"] == steps
        assert st_["padded_rows"] == b * steps - st_["rows"] - st_["repeated_rows"]
        assert st_["padded_rows"] >= b * sum(not batch for batch in run)
        seen = Counter(d["id"] for batch in run for d in batch)
        if not fill:
            assert all(c == 1 for c in seen.values()), "a document twice on one rank"
            assert st_["read"] - st_["left_over"] == len(seen)  # no overflow here
            assert st_["repeated_rows"] == 0 and st_["tokens"] == tokens
        assert st_["read"] <= len(shard)
    if not fill:
        every = [d["id"] for run in runs for batch in run for d in batch]
        assert len(every) == len(set(every)), "a document on two ranks"


@pytest.mark.parametrize("layout", ["round_robin", "sorted", "uneven"])
@pytest.mark.parametrize("num_replicas", [2, 4])
def test_ranks_make_equal_steps_of_the_one_shape(gsm8k, layout, num_replicas):
    docs = _docs(gsm8k)
    if layout == "round_robin":
        shards = [docs[r::num_replicas] for r in range(num_replicas)]
    elif layout == "sorted":  # each rank holds one band of lengths: very different token counts
        order = sorted(docs, key=lambda d: len(d["input_ids"]))
        shards = [list(c) for c in np.array_split(np.array(order, dtype=object), num_replicas)]
    else:  # one rank has a tenth of the others' data
        cut = len(docs) // (10 * num_replicas)
        shards = [docs[:cut]] + [docs[cut + r :: num_replicas] for r in range(num_replicas - 1)]
    steps = int(gsm8k.sum()) // (num_replicas * BATCH * ROW)  # tokens per rank / (B * L)
    streams = _streams(shards, steps)
    runs = [list(s) for s in streams]
    check_in_step(streams, runs, steps, shards)
    stats = [s.stats for s in streams]
    if layout == "round_robin":  # balanced shards: tight rows, little left over, no dry step
        assert all(not any(len(b) == 0 for b in run) for run in runs)
        for s in stats:
            assert s["padded_rows"] <= BATCH
            assert s["tokens"] > 0.97 * steps * BATCH * ROW
        assert sum(s["read"] - s["left_over"] for s in stats) > 0.9 * len(docs)
    if layout == "sorted":  # the short-document rank runs dry, the long one leaves documents
        assert sum(len(b) == 0 for b in runs[0]) > 0
        assert stats[-1]["left_over"] > 0 or stats[-1]["read"] < len(shards[-1])
    if layout == "uneven":  # the small shard runs dry: padding-only steps, still in step
        assert sum(len(b) == 0 for b in runs[0]) > steps // 2
        assert stats[0]["read"] == len(shards[0]) and stats[0]["left_over"] == 0


def test_fill_repeats_instead_of_padding(gsm8k):
    docs = _docs(gsm8k[:600])
    shards = [docs[:40], docs[40:]]  # rank 0 runs dry after a few steps
    streams = _streams(shards, 20, last_batch="fill")
    runs = [list(s) for s in streams]
    check_in_step(streams, runs, 20, shards, fill=True)
    dry = runs[0]
    stats = streams[0].stats
    assert stats["padded_rows"] == 0 and stats["repeated_rows"] > BATCH
    alone = _ids(
        PackIterable(
            shards[0],
            length_fn="input_ids",
            row_length=ROW,
            batch_size=BATCH,
            open_rows=16,
            last_batch="fill",
        )
    )
    assert 1 < len(alone) < 20 and _ids(dry[: len(alone)]) == alone
    # the dry steps take the least seen of the rows handed out last (NOTE [ What a stream's fill
    # repeats ], fill version 2), its last two batches' 8 rows of the shard's 9: each about
    # 80 / 8 times; the lane's last batch again made its 6 documents 72 times each
    seen = Counter(d["id"] for b in dry for d in b)
    assert set(seen) == {d["id"] for d in shards[0]} and max(seen.values()) == 10


@settings(max_examples=25, deadline=None)
@given(
    shard_sizes=st.lists(st.integers(0, 60), min_size=2, max_size=4),
    steps=st.integers(1, 25),
    batch=st.integers(1, 3),
    rows=st.integers(1, 4),
    last_batch=st.sampled_from(["pad", "fill"]),
    overflow=st.sampled_from(["split", "drop", "truncate"]),
    seed=st.integers(0, 10),
    cut=st.floats(0, 1),
)
def test_any_shards_any_steps_stay_in_step(
    shard_sizes, steps, batch, rows, last_batch, overflow, seed, cut
):
    """Equal steps and shape on every rank, the one-pass batches first (the same outputs),
    then padding-only steps or repeats, and an exact resume at any step."""
    rng = np.random.default_rng(seed)
    shards, start = [], 0
    for n in shard_sizes:
        shards.append(_docs(rng.integers(1, 50, n), start))
        start += n
    kw = {"row_length": 32, "batch_size": batch, "open_rows": rows, "overflow": overflow}
    streams = _streams(shards, steps, last_batch=last_batch, **kw)
    runs = [list(s) for s in streams]
    table = streams[0].table
    collate = PackCollator(table)
    for shard, run in zip(shards, runs, strict=True):
        assert len(run) == steps
        alone = _ids(PackIterable(shard, length_fn="input_ids", last_batch=last_batch, **kw))
        n = min(steps, len(alone))
        assert _ids(run[:n]) == alone[:n], "the same batches as one pass over the shard"
        tail = _ids(run[n:])
        if last_batch == "pad" or not alone:
            assert all(not b for b in tail)
        else:  # the least seen of the rows handed out last (fill version 2): those of its
            # last two full batches and of a short last one
            last = {i for b in alone[-3:] for i, _ in b}
            assert all(i in last for b in tail for i, _ in b)
        for b in run:
            assert tuple(collate(b)["input_ids"].shape) == (batch, 32)
    for s in streams:
        t = s.stats
        assert t["batches"] == steps
        assert t["padded_rows"] + t["rows"] + t["repeated_rows"] == batch * steps
    if last_batch == "pad":  # every document (every piece of one) at most once
        tokens, lengths = Counter(), {d["id"]: len(d["input_ids"]) for s in shards for d in s}
        for run in runs:
            for b in run:
                for d in b:
                    tokens[d["id"]] += len(d["input_ids"])
        assert all(n <= min(lengths[i], 32) or overflow == "split" for i, n in tokens.items())
        assert all(n <= lengths[i] for i, n in tokens.items())
    r = int(rng.integers(len(shards)))
    k = int(cut * steps)
    first = _streams(shards, steps, last_batch=last_batch, **kw)[r]
    it = iter(first)
    head = [next(it) for _ in range(k)]
    state = json.loads(json.dumps(first.state_dict()))
    if k:  # a list shard seeks: positions, the step reached (NOTE [ Seeking a source ])
        assert state["format"] == 1 and state["source"]["seek"] and state["batches"] == k
    else:  # before the first batch: the replay state
        assert state["format"] == 2 and state["skip"] == []
    again = _streams(shards, steps, last_batch=last_batch, **kw)[r]
    again.load_state_dict(state)
    rest = list(again)
    assert _ids(head + rest) == _ids(runs[r]) and len(head) + len(rest) == steps
    assert again.stats["skipped"] == 0 and again.stats["batches"] == steps


def _loader(stream, workers=2):
    return torch.utils.data.DataLoader(
        stream, batch_size=None, num_workers=workers, collate_fn=lambda b: b
    )


def _hf(docs, shards=4):
    datasets = pytest.importorskip("datasets")
    table = datasets.Dataset.from_dict(
        {"id": [d["id"] for d in docs], "input_ids": [d["input_ids"] for d in docs]}
    )
    return table.to_iterable_dataset(num_shards=shards)


@pytest.mark.parametrize(
    ("kind", "steps", "k"),
    [("list", 30, 7), ("hf", 30, 12), ("list", None, 5)],
    ids=["split-list", "split-hf", "one-pass-list"],
)
def test_resume_behind_two_workers(gsm8k, kind, steps, k):
    """Behind 2 DataLoader workers the main process owns the state (the batches each worker
    handed out, from the shared counters); a resume replays and hands out exactly the rest."""
    docs = _docs(gsm8k[:400])  # about 19 batches: a split stream of 30 steps runs dry

    def make():
        source = _hf(docs) if kind == "hf" else docs
        return PackIterable(
            source,
            length_fn="input_ids",
            row_length=ROW,
            batch_size=BATCH,
            open_rows=8,
            num_replicas=2 if steps else 1,
            rank=1 if steps else 0,
            steps_per_epoch=steps,
        )

    stream = make()
    raw = list(_loader(stream))
    full = _ids(raw)
    st_ = stream.stats  # the main process never iterated
    assert st_["batches"] == len(full) and st_["read"] == len(docs)
    assert st_["rows"] * ROW >= st_["tokens"] == int(gsm8k[:400].sum())
    assert sorted(i for b in full for i, _ in b) == list(range(len(docs)))
    if steps:
        assert len(full) == steps == len(make()) and full[-1] == []
        assert all(b.planned_shape == (BATCH, ROW) for b in raw)  # pickled out of the workers
        assert st_["padded_rows"] >= BATCH
    first = make()
    head = []
    for i, batch in enumerate(_loader(first)):
        head.append(batch)
        if i + 1 == k:
            break
    state = json.loads(json.dumps(first.state_dict(batches_consumed=k)))
    assert state["format"] == 2 and state["workers"] == 2
    if steps:
        assert state["skip"] == [len(range(0, k, 2)), len(range(1, k, 2))]
    again = make()
    again.load_state_dict(state)
    assert _ids(head) + _ids(_loader(again)) == full
    if kind == "hf":  # k - 1 (odd): never more than the workers handed out, however slow
        # they prefetch (k + 1 raced them under load: "must be <= 12, got 13")
        with pytest.raises(ValueError, match="save the state after a multiple of num_workers"):
            first.state_dict(batches_consumed=k - 1)
    with pytest.raises(ValueError, match="resume with the same num_workers"):
        again = make()
        again.load_state_dict(state)
        list(_loader(again, workers=0))


def test_validation_at_the_call():
    docs = _docs([5, 9, 3])
    kw = {"length_fn": "input_ids", "row_length": 16, "batch_size": 2}
    with pytest.raises(ValueError, match="needs steps_per_epoch"):
        PackIterable(docs, num_replicas=2, rank=0, **kw)
    with pytest.raises(ValueError, match=r"rank must be an int >= 0 and < num_replicas=2"):
        PackIterable(docs, num_replicas=2, rank=2, steps_per_epoch=3, **kw)
    with pytest.raises(ValueError, match="steps_per_epoch must be an int >= 1"):
        PackIterable(docs, steps_per_epoch=0, **kw)
    with pytest.raises(ValueError, match="last_batch must be 'pad'"):
        PackIterable(docs, steps_per_epoch=3, last_batch="drop", **kw)
    with pytest.raises(TypeError, match=r"source must be an iterable of samples .* got int 5"):
        PackIterable(5, **kw)
    with pytest.raises(TypeError, match=r"got function .*whose __iter__ calls it"):  # (s21)
        PackIterable(lambda: iter(docs), **kw)
    with pytest.raises(TypeError, match="pass steps_per_epoch for a length"):
        len(PackIterable(docs, **kw))
    split = PackIterable(docs, num_replicas=2, rank=0, steps_per_epoch=3, **kw)
    good = split.state_dict()
    assert good["format"] == 2 and good["skip"] == []
    one = PackIterable(docs, **kw)
    for bad, exc, match in [
        ([1], TypeError, "state must be a dict"),
        ({}, ValueError, "with format 1 or 2, got format None"),
        ({"format": 2}, ValueError, "state is missing 'config'"),
        ({**good, "epoch": -1}, ValueError, r"state\['epoch'\] must be an int >= 0, got -1"),
        ({**good, "workers": 2, "skip": [1]}, ValueError, r"state\['skip'\]"),
        ({**good, "workers": 2, "skip": [1, 1], "first": 2}, ValueError, r"state\['first'\]"),
        (good, ValueError, "configuration keys"),  # a split stream's state, a one-pass stream
    ]:
        with pytest.raises(exc, match=match):
            one.load_state_dict(bad)
    other = PackIterable(docs, num_replicas=2, rank=0, steps_per_epoch=4, **kw)
    with pytest.raises(ValueError, match=r"steps_per_epoch=3, but this PackIterable has .*=4"):
        other.load_state_dict(good)
    # (s21: a job restarted on other ranks was told only to build the stream as before; s29:
    # and `good`, saved before epoch 0's first batch, was told set_epoch(1), skipping epoch 0)
    wider = PackIterable(docs, num_replicas=4, rank=0, steps_per_epoch=3, **kw)
    with pytest.raises(ValueError, match=r"num_replicas=2, .* own shard.*run epoch 0 whole"):
        wider.load_state_dict(good)
    with pytest.raises(ValueError, match="batches_consumed must be an int"):
        split.state_dict(batches_consumed=1)  # nothing was handed out yet
    collate = split.collator()
    with pytest.raises(ValueError, match=r"planned_shape \(3, 16\) is not one of"):
        collate(PlannedBatch([], planned_shape=(3, 16)))
    with pytest.raises(ValueError, match="non-empty list"):
        collate([])
    with pytest.raises(ValueError, match="longer than the batch's planned row length 16"):
        collate(PlannedBatch([[1] * 17], planned_shape=(2, 16)))
    out = PackCollator(PackTable(row_lengths=(4,), batch_sizes=(2,), max_documents=(3,)))(
        PlannedBatch([], planned_shape=(2, 4), num_real=0)
    )
    assert out["position_ids"].tolist() == [[0, 1, 2, 3]] * 2
    assert out["cu_seqlens"].tolist() == [0, 4, 8, 8, 8, 8] and out["max_seqlen"] == 4


def test_an_empty_shard_takes_its_steps_as_padding():
    """Packing needs no stand-in sample: a rank (or worker) with nothing still keeps step."""
    empty = PackIterable([], row_length=8, batch_size=2, num_replicas=2, rank=1, steps_per_epoch=3)
    batches = list(empty)
    assert [len(b) for b in batches] == [0, 0, 0]
    assert empty.stats["padded_rows"] == 6 and empty.stats["read"] == 0
    assert tuple(empty.collator()(batches[0])["input_ids"].shape) == (2, 8)


# -- a real process group ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT_S)
def test_ddp_packed_stream_keeps_step_on_uneven_shards(tmp_path, gsm8k):
    """Two gloo processes, uneven shards (rank 1 runs dry half way), 2 DataLoader workers each,
    num_replicas / rank from the process group, DDP training on the packed batches: every rank
    makes steps_per_epoch steps of the one shape (no hang at the end), the parameters stay
    equal, each document is used at most once, a mid-epoch state resumes to exactly the rest,
    and without steps_per_epoch the stream refuses to start."""
    world = 2
    np.save(tmp_path / "lengths.npy", np.asarray(gsm8k[:900]))
    port = free_port()
    run_ranks(
        lambda r: [__file__, "worker", str(r), str(world), str(port), str(tmp_path)],
        world,
        timeout=TIMEOUT_S,
    )
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    steps = runs[0]["steps"]
    assert [len(r["shapes"]) for r in runs] == [steps, steps]
    assert {tuple(s) for r in runs for s in r["shapes"]} == {(BATCH, ROW)}
    assert all(r["gathered_equal"] and r["resumed_equal"] and r["refused"] for r in runs)
    assert len({r["param_sum"] for r in runs}) == 1 and np.isfinite(runs[0]["param_sum"])
    ids = [i for r in runs for i in r["ids"]]
    assert len(ids) == len(set(ids)), "each document at most once over the ranks"
    assert runs[1]["dry_steps"] > 0 and runs[0]["dry_steps"] == 0
    assert all(r["stats_batches"] == steps for r in runs), "the counters from the main process"


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=240),
    )
    lengths = np.load(Path(out_dir) / "lengths.npy")
    docs = _docs(lengths)
    shard = docs[:600] if rank == 0 else docs[600:]  # rank 1 holds half as much
    steps = int(0.9 * lengths[:600].sum()) // (BATCH * ROW)  # rank 0 never runs dry
    try:
        PackIterable(shard, length_fn="input_ids", row_length=ROW, batch_size=BATCH)
        refused = False
    except ValueError as exc:
        refused = "num_replicas=2 ranks needs steps_per_epoch" in str(exc)

    def make():
        return PackIterable(
            shard, length_fn="input_ids", row_length=ROW, batch_size=BATCH, steps_per_epoch=steps
        )

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Embedding(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(stream, limit=None):
        loader = torch.utils.data.DataLoader(
            stream, batch_size=None, num_workers=2, collate_fn=stream.collator()
        )
        shapes, ids, equal, dry = [], [], True, 0
        for i, batch in enumerate(loader):
            x, labels = batch["input_ids"], batch["labels"]
            shape = torch.tensor(x.shape)
            everyone = [torch.zeros_like(shape) for _ in range(world)]
            dist.all_gather(everyone, shape)
            equal &= all(torch.equal(s, shape) for s in everyone)
            target = labels != -100
            count = target.sum().reshape(1).float()
            dist.all_reduce(count)  # the step's target tokens over ranks: no 0/0 when dry
            per_token = model(x).squeeze(-1) ** 2
            loss = (per_token * target).sum() / count.clamp(min=1) * world
            opt.zero_grad()
            loss.backward()
            opt.step()
            shapes.append(list(x.shape))
            dry += int(not target.any())
            ids.append([int(batch["document_ids"].max()) + 1, int(x.sum())])  # a fingerprint
            if limit is not None and i + 1 == limit:
                break
        return shapes, ids, equal, dry

    stream = make()
    assert (stream.num_replicas, stream.rank) == (world, rank)
    shapes, counts, equal, dry = train(stream)
    first = make()
    head = train(first, limit=5)
    state = json.loads(json.dumps(first.state_dict(batches_consumed=5)))
    again = make()
    again.load_state_dict(state)
    rest = train(again)
    used = [d["id"] for b in _loader(make()) for d in b]
    out = {
        "steps": steps,
        "shapes": shapes,
        "ids": used,
        "gathered_equal": bool(equal and head[2] and rest[2]),
        "resumed_equal": head[1] + rest[1] == counts and head[0] + rest[0] == shapes,
        "refused": refused,
        "dry_steps": dry,
        "param_sum": round(float(sum(p.sum() for p in model.parameters())), 6),
        "stats_batches": stream.stats["batches"],
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(out))
    # DDP's reducer released while the group is still registered: were it the group's last
    # holder, its dealloc would destroy the group holding the GIL, joining gloo's thread,
    # which may need the GIL to free a finished work's tensors (a rank hung so once;
    # pytorch/pytorch#56297)
    model = opt = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    sys.path.insert(0, str(Path(__file__).parent))
    _worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
