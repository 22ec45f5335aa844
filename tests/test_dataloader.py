"""Real torch DataLoaders (worker processes included) over real length distributions.

Sampler + PadCollator end to end, no mocks: every batch takes one of ``sampler.shapes``, masks and
lengths match the samples, and every index is seen as the ``last_batch`` policy documents.
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import load_real
from torch.utils.data import DataLoader, Dataset

from bucketloader.boundaries import assign_buckets
from bucketloader.sampler import BucketSampler, GroupedDataset


class Frames(Dataset):
    """Sample ``i`` is ``{"audio": (n_i,) float of value i + 1, "index": i, "name": str}``."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = np.asarray(lengths)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict:
        n = int(self.lengths[i])
        return {"audio": torch.full((n,), float(i + 1)), "index": i, "name": f"utt{i}"}


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    # 2,000 LibriSpeech utterances as 10 ms frames (samples // 160): 141..2452 frames
    return load_real("librispeech")[:2000] // 160


def check_batch(out: dict, sampler: BucketSampler) -> list[int]:
    """Assert one collated batch is planned and self-consistent; return its real indices."""
    assert tuple(out["audio"].shape) in sampler.shapes
    # checked in numpy: torch's multi-threaded kernels crawl on this shared 2-core machine
    audio, mask, lens, real, index = (
        out[k].numpy() for k in ("audio", "attention_mask", "lengths", "sample_mask", "index")
    )
    assert mask.shape == audio.shape and lens.shape == real.shape == audio.shape[:1]
    assert lens[real].tolist() == sampler.lengths[index[real]].tolist()
    assert (mask.sum(1) == lens).all() and not mask[~real].any()
    assert (np.where(mask, audio, index[:, None] + 1) == index[:, None] + 1).all()
    assert (audio[~mask] == 0).all()
    assert out["name"] == [f"utt{i}" for i in index[real].tolist()]
    return index[real].tolist()


def test_two_workers_two_epochs_every_index_exactly_once(frames):
    sampler = BucketSampler(frames, num_buckets=6, max_tokens=40_000, last_batch="pad", seed=7)
    loader = DataLoader(
        Frames(frames),
        batch_sampler=sampler,
        collate_fn=sampler.collator(),
        num_workers=2,
        persistent_workers=True,
        pin_memory=True,
    )
    orders = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")  # CPU-only torch
        for epoch in range(2):
            sampler.set_epoch(epoch)
            seen: list[int] = []
            for out in loader:
                seen.extend(check_batch(out, sampler))
            assert sorted(seen) == list(range(len(frames)))
            assert len(loader) == len(sampler)
            orders.append(seen)
    assert orders[0] != orders[1]  # reshuffled per epoch


def _bucket_sizes(sampler: BucketSampler):
    """Per sample bucket, and the full batch size of each bucket (from the promised shapes)."""
    b = sampler.boundaries
    full = {length: max(s[0] for s in sampler.shapes if s[1] == length) for length in b.tolist()}
    return assign_buckets(sampler.lengths, b), np.array([full[x] for x in b.tolist()])


@pytest.mark.parametrize("last_batch", ["fill", "drop", "keep"])
def test_last_batch_policies_account_for_every_index(frames, last_batch):
    sampler = BucketSampler(frames, num_buckets=6, max_tokens=40_000, last_batch=last_batch)
    loader = DataLoader(Frames(frames), batch_sampler=sampler, collate_fn=sampler.collator())
    bucket, full = _bucket_sizes(sampler)
    n_c = np.bincount(bucket, minlength=len(full))
    seen: list[int] = []
    for out in loader:
        index = check_batch(out, sampler)
        assert out["sample_mask"].all()  # only "pad" adds rows
        assert len(set(bucket[index].tolist())) == 1  # repeats stay in their bucket
        seen.extend(index)
    counts = Counter(seen)
    if last_batch == "keep":
        assert sorted(seen) == list(range(len(frames)))
    elif last_batch == "drop":
        assert max(counts.values()) == 1
        assert len(frames) - len(seen) == int((n_c % full).sum())
    else:  # fill: everything at least once, topped up to full batches
        assert set(seen) == set(range(len(frames)))
        assert len(seen) == int((-(-n_c // full) * full).sum())


def test_ranks_get_equal_shapes_at_every_step(frames):
    loaders = [
        DataLoader(
            Frames(frames),
            batch_sampler=(s := BucketSampler(frames, max_tokens=40_000, num_replicas=2, rank=r)),
            collate_fn=s.collator(),
        )
        for r in range(2)
    ]
    assert len(loaders[0]) == len(loaders[1])
    seen: list[int] = []
    for a, b in zip(*loaders, strict=True):
        assert a["audio"].shape == b["audio"].shape
        seen += a["index"][a["sample_mask"]].tolist() + b["index"][b["sample_mask"]].tolist()
    assert set(seen) == set(range(len(frames)))
    assert len(seen) - len(frames) <= len(loaders[0].batch_sampler.shapes)  # <= R-1 per bucket


def test_per_dataset_groups_through_a_worker():
    speech = load_real("commonvoice")[:600] // 100
    protein = load_real("ecoli")[:400]
    datasets = [Frames(speech), Frames(protein)]
    data = GroupedDataset(datasets)
    sampler = BucketSampler(
        np.concatenate([speech, protein]),
        groups=data.groups,
        num_buckets=3,
        max_tokens=8000,
        seed=1,
    )
    loader = DataLoader(data, batch_sampler=sampler, collate_fn=sampler.collator(), num_workers=1)
    seen = []
    for out in loader:
        real = out["sample_mask"]
        groups = set(out["dataset"][real].tolist())
        assert len(groups) == 1 and tuple(out["audio"].shape) in sampler.shapes
        offset = 0 if groups == {0} else len(speech)
        seen += (out["index"][real] + offset).tolist()
        lens = (speech, protein)[groups.pop()][out["index"][real].numpy()]
        assert out["lengths"][real].tolist() == lens.tolist()
    assert sorted(seen) == list(range(len(speech) + len(protein)))


def test_seq2seq_token_lists_through_a_dataloader():
    pairs = load_real("europarl")[:1500]
    pairs = pairs[(pairs > 0).all(1)]
    sampler = BucketSampler({"source": pairs[:, 0], "target": pairs[:, 1]}, max_tokens=2048)

    class Pairs(Dataset):
        def __len__(self):
            return len(pairs)

        def __getitem__(self, i):
            return {"source": [i] * int(pairs[i, 0]), "target": [-i] * int(pairs[i, 1]), "i": i}

    collate = sampler.collator(pad_value={"source": 0, "target": -100})
    seen = []
    for out in DataLoader(Pairs(), batch_sampler=sampler, collate_fn=collate):
        b, ls = out["source"].shape
        assert (b, ls, out["target"].shape[1]) in sampler.shapes
        real = out["sample_mask"]
        assert out["lengths"][real].tolist() == pairs[out["i"][real].numpy()].tolist()
        assert (out["target"][~out["attention_mask"]["target"]] == -100).all()
        seen += out["i"][real].tolist()
    assert sorted(seen) == list(range(len(pairs)))
