"""analyze(): statistics, strategy table, recommendation rule, DataLoader shape scan, plot."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from conftest import load_real

from bucketloader import LengthHistogram, compute_boundaries
from bucketloader.analysis.report import DEFAULT_STRATEGIES, analyze
from bucketloader.boundaries import padding_ratio

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_statistics_and_table_on_real_data(librispeech):
    r = analyze(librispeech, num_buckets=[4, 16], batch_size=32)
    h = r.histogram
    assert h.num_samples == 28539 and h.num_values == 3409
    assert (h.min, int(h.quantile(0.5)), h.max) == (22560, 223920, 392400)
    assert len(r.rows) == 2 * len(DEFAULT_STRATEGIES)
    for k in (4, 16):
        best = r.row("optimal", k)
        assert best.boundaries == tuple(compute_boundaries(librispeech, k))
        assert best.padding_ratio == pytest.approx(padding_ratio(librispeech, best.boundaries))
        for name in DEFAULT_STRATEGIES:  # the exact DP is the oracle no heuristic beats
            row = r.row(name, k)
            assert row.padding_ratio >= best.padding_ratio - 1e-12
            assert 1 <= row.num_shapes <= k
    assert r.row("pad_to_max", 16).boundaries == (392400,)
    text = str(r)
    for needle in ("28,539", "3,409", "22,560", "223,920", "392,400", "recommended", "rule:"):
        assert needle in text
    json.dumps(r.to_dict())


def test_recommendation_rule():
    lengths = [3, 4, 4, 9, 10, 31] * 10
    r = analyze(lengths, num_buckets=[1, 2, 3, 4], padding_target=0.05)
    best_at = {k: min(r.row(s, k).padding_ratio for s in DEFAULT_STRATEGIES) for k in (1, 2, 3, 4)}
    first_ok = next(k for k in (1, 2, 3, 4) if best_at[k] <= 0.05)
    assert r.recommended.num_buckets == first_ok
    assert r.recommended.padding_ratio == best_at[first_ok]
    assert r.recommended.strategy == "optimal"
    strict = analyze(lengths, num_buckets=[1, 2], padding_target=0.0)
    assert strict.recommended.num_buckets == 2 and "no k meets the target" in strict.rule


def test_dynamic_padding_baseline_matches_a_direct_count():
    r = analyze([1, 2, 3, 4], num_buckets=[1], batch_size=4)
    assert r.dynamic == {
        "batch_size": 4,
        "padding_ratio": 6 / 10,
        "num_shapes": 1,
        "num_batches": 1,
    }
    lengths = np.random.default_rng(0).integers(1, 50, size=103)
    d = analyze(lengths, num_buckets=[2], batch_size=10).dynamic
    assert d["num_batches"] == 11 and 1 <= d["num_shapes"] <= 11
    # random batches padded to their own max: at least the sorted (best-case) batching's padding
    srt = np.sort(lengths)
    best_case = sum(
        int(b.max() * b.size - b.sum()) for b in np.array_split(srt, range(10, 103, 10))
    )
    assert d["padding_ratio"] >= best_case / lengths.sum()


def test_dynamic_padding_baseline_does_not_depend_on_the_input_order():
    """The baseline drew its random batches from the input's order: the same lengths from a file
    and from a histogram of them (its Parquet shards, an engine) reported different paddings."""
    lengths = load_real("gsm8k")[:3000, 0]
    want = analyze(lengths, num_buckets=[2], batch_size=16).dynamic
    for other in (lengths[::-1], np.sort(lengths), LengthHistogram.from_lengths(lengths)):
        assert analyze(other, num_buckets=[2], batch_size=16).dynamic == want
    # still a count over random batches: a direct count of the same draw
    perm = np.sort(lengths)
    np.random.default_rng(np.random.SeedSequence([0, 0])).shuffle(perm)
    full = perm[: perm.size // 16 * 16].reshape(-1, 16)
    rest = perm[full.size :]
    pad = int((full.max(axis=1)[:, None] - full).sum()) + int((rest.max() - rest).sum())
    assert want["padding_ratio"] == pad / lengths.sum()


def test_dynamic_padding_baseline_holds_one_array_of_the_samples():
    """Its docstring says one array of the samples; the padding of the full batches was counted
    through a second one (``longest[:, None] - full``), a MemoryError inside numpy when only
    the first fits."""
    import tracemalloc

    from bucketloader.analysis.report import _dynamic_padding

    lengths = np.random.default_rng(3).integers(1, 5000, 1_000_000)
    hist = LengthHistogram.from_lengths(lengths)
    tracemalloc.start()
    try:
        got = _dynamic_padding(hist, 32)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * lengths.nbytes
    perm = np.sort(lengths)
    np.random.default_rng(np.random.SeedSequence([0, 0])).shuffle(perm)
    full = perm.reshape(-1, 32)  # (1,000,000 = 31,250 batches of 32)
    assert got["padding_ratio"] == int((full.max(axis=1)[:, None] - full).sum()) / lengths.sum()


class _Toy:
    """A map-style dataset of dict items with a variable-length tensor."""

    def __init__(self, lengths):
        self.lengths = list(lengths)

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        import torch

        return {"x": torch.zeros(self.lengths[i], 3), "label": i % 2}


class _Items:
    """A dataset over a list of items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _pad_collate(items):
    import torch

    longest = max(it["x"].shape[0] for it in items)
    x = torch.zeros(len(items), longest, 3)
    for j, it in enumerate(items):
        x[j, : it["x"].shape[0]] = it["x"]
    return {"x": x, "label": torch.tensor([it["label"] for it in items])}


def test_dataloader_shapes_are_counted_exactly():
    torch = pytest.importorskip("torch")
    lengths = [5, 7, 7, 2, 9, 9, 9, 1, 4, 4, 4, 4, 8]
    loader = torch.utils.data.DataLoader(_Toy(lengths), batch_size=3, collate_fn=_pad_collate)
    expected: dict[tuple[int, int, int], int] = {}
    for s in range(0, len(lengths), 3):
        chunk = lengths[s : s + 3]
        shape = (len(chunk), max(chunk), 3)
        expected[shape] = expected.get(shape, 0) + 1
    r = analyze(loader, column="x")
    assert r.num_batches == 5
    assert dict(r.batch_shapes["x"]) == expected
    assert dict(r.batch_shapes["label"]) == {(3,): 4, (1,): 1}
    assert r.histogram.num_samples == len(lengths)  # column= also measured the items
    limited = analyze(loader, max_batches=2)
    assert limited.num_batches == 2 and limited.histogram is None
    assert dict(limited.batch_shapes["x"]) == {(3, 7, 3): 1, (3, 9, 3): 1}
    assert "DataLoader: 2 batches scanned" in str(limited)
    # s30-first: without lengths the report ended there; it names the option that adds them
    hint = "pass column= to measure the DataLoader's dataset (column='input_ids', or column=len"
    assert str(limited).endswith(hint + " for items that are sequences)")
    assert "no per-sample lengths" not in str(r)


def test_default_collate_tuple_batches():
    torch = pytest.importorskip("torch")
    data = torch.utils.data.TensorDataset(torch.zeros(10, 4), torch.arange(10))
    r = analyze(torch.utils.data.DataLoader(data, batch_size=4))
    assert dict(r.batch_shapes["[0]"]) == {(4, 4): 2, (2, 4): 1}
    assert dict(r.batch_shapes["[1]"]) == {(4,): 2, (2,): 1}


def test_map_style_dataset_lengths():
    pytest.importorskip("torch")
    ds = _Toy([3, 1, 4, 1, 5])
    assert analyze(ds, column="x").histogram.num_samples == 5
    r = analyze(ds, column=lambda item: item["x"].shape[0] * 2, num_buckets=[1])
    assert r.histogram.max == 10
    assert analyze(ds).histogram.max == 5  # the only sized field of a dict item
    pairs = _Items([{"src": [1, 2], "tgt": [1, 2, 3]}] * 3)
    with pytest.raises(ValueError, match="pass column="):
        analyze(pairs)
    assert analyze(pairs, column="tgt").histogram.max == 3
    with pytest.raises(ValueError, match=r"column='nope' is not in the samples"):
        analyze(ds, column="nope")
    with pytest.raises(TypeError, match=r"one input's lengths: .*max_shapes=K"):
        analyze({"height": [3, 5], "width": [4, 6]})  # (session 21: an image's two sizes)


def test_channel_first_items_are_not_measured_by_their_channels():
    # s30-first: (1, T) waveforms and (3, H, W) images were measured by their first dim, the
    # channel count: one length, "0% padding, 1 shape", where the batches take one per length
    sizes = [(40, 60), (60, 40), (80, 20), (20, 80)]
    images = [torch.zeros(3, h, w) for h, w in sizes]
    audio = _Items([{"audio": torch.zeros(1, h * w), "label": 0} for h, w in sizes])
    with pytest.raises(ValueError, match=r"column=None .* is 3 in all 4 items .*BucketSampler"):
        analyze(images)
    for column in (None, "audio"):
        with pytest.raises(ValueError, match=r"lambda item: item\['audio'\]\.shape\[-1\]"):
            analyze(audio, column=column)
    with pytest.raises(ValueError, match="the column callable measures"):
        analyze(audio, column=lambda item: item["audio"])
    assert analyze(audio, column=lambda item: item["audio"].shape[-1]).histogram.num_values == 2
    # time-major (T, F) features and images of one size are what they were
    assert analyze([torch.zeros(n, 80) for n in (5, 9, 7)]).histogram.max == 9
    assert analyze([torch.zeros(3, 32, 32)] * 3).histogram.max == 3


def test_one_height_images_are_told_the_dim_that_varies():
    # s31-rev: text-line images of one height, channel-last (32, W, 3) as PIL -> numpy gives
    # them, were told to measure item.shape[-1], their 3 channels: followed, the report said
    # one length and no padding. The error names the dim that varies, shape[1]
    lines = [np.zeros((32, w, 3), np.uint8) for w in (40, 90, 200, 120)]
    with pytest.raises(ValueError, match=r"measure dim 1, .*column=lambda item: item\.shape\[1\]$"):
        analyze(lines)
    assert analyze(lines, column=lambda item: item.shape[1]).histogram.num_values == 4


def test_pandas_columns_are_read_by_position_not_label():
    # s30-first: a filtered frame's column (df[df.n > 5]["n"]: labels 1, 3, ...) and a frame
    # with column= were read item by item as data[0], data[1]: `KeyError: 0`, naming nothing
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"n": [2, 9, 4, 12, 7], "text": ["ab", "x" * 9, "abcd", "y" * 12, "z" * 7]})
    long = df[df.n > 5]  # index 1, 3, 4
    want = analyze([9, 12, 7], num_buckets=[1, 2]).rows
    for data, column in [(long["n"], None), (long["text"], None), (long, "n"), (long, "text")]:
        assert analyze(data, column=column, num_buckets=[1, 2]).rows == want
    assert analyze(long, column=lambda row: row["n"], num_buckets=[1, 2]).rows == want
    for column, got in [(None, "got no column"), ("nope", "got column='nope', which it does")]:
        with pytest.raises(ValueError, match=rf"DataFrame with columns \['n', 'text'\], {got}"):
            analyze(df, column=column)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_buckets": [0]}, "num_buckets must be an int >= 1, got num_buckets=0"),
        ({"num_buckets": []}, "at least one k"),
        ({"strategy": ["nope"]}, "strategy must be one of"),
        ({"batch_size": 0}, "batch_size must be an int >= 1"),
        ({"padding_target": -0.1}, "padding_target must be a number"),
        ({"max_batches": 0}, "max_batches must be an int >= 1"),
        ({"progress": "no"}, "progress must be a bool, got progress='no'"),  # (was ignored)
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        analyze([1, 2, 3], **kwargs)


def test_a_padding_target_above_one_is_said_once_as_a_percentage(tmp_path, capsys):
    """s19-user: padding_target=5 (meaning 5 %) was read as 500 % without a word."""
    from bucketloader.analysis import recommend_num_buckets
    from bucketloader.cli import main

    say = r"padding_target=5 is 500% padding .*; for 5% pass padding_target=0\.05"
    with pytest.warns(UserWarning, match=say) as caught:
        analyze([1, 2, 3], num_buckets=[1], padding_target=5)
    assert len(caught) == 1 and caught[0].filename == __file__  # (once, at the caller's line)
    with pytest.warns(UserWarning, match=say):
        recommend_num_buckets([1, 2, 3], num_buckets=(1,), padding_target=5)
    (tmp_path / "l.txt").write_text("1\n2\n3\n")
    assert main(["report", str(tmp_path / "l.txt"), "-k", "1", "--padding-target", "5"]) == 0
    err = capsys.readouterr().err
    assert (
        "bucketloader: warning: --padding-target 5 is 500%" in err
        and "pass --padding-target 0.05" in err
    )


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 600
    assert img[..., :3].std() > 0.05  # not a blank canvas


def test_plot_writes_a_valid_png(tmp_path, librispeech):
    pytest.importorskip("matplotlib")
    r = analyze(librispeech, num_buckets=[4, 8], batch_size=16)
    _assert_png(r.plot(tmp_path / "report.png"))
    with pytest.raises(  # (created silently, as a typo would be: s10-user)
        FileNotFoundError,
        match=r"path='.*sub/report\.png': the directory .*sub does not exist \(nothing creates "
        r"it\); create it first \(os\.makedirs\('.*sub'\)\)",
    ):
        r.plot(tmp_path / "sub" / "report.png")
    assert not (tmp_path / "sub").exists()


def test_plot_refuses_a_path_that_is_not_an_image_file(tmp_path, monkeypatch):
    """plot("out") wrote out.png, plot(folder) wrote folder.png beside it and plot("") a hidden
    ./.png, each returning the path it was given; "p.txt" was matplotlib's error after the
    drawing (s8-polish). Refused before anything is drawn or written."""
    monkeypatch.chdir(tmp_path)
    r = analyze([3, 5, 7, 9], num_buckets=[2])
    images = r"path must name an image file ending in one of \.png, .*got path="
    for bad in ["out", "", "p.txt", str(tmp_path)]:
        with pytest.raises(ValueError, match=images + re.escape(repr(bad))):
            r.plot(bad)
    with pytest.raises(TypeError, match=r"path must be a file path .*got path=None"):
        r.plot(None)
    assert not list(tmp_path.iterdir()) and not (tmp_path.parent / f"{tmp_path.name}.png").exists()


def test_plot_with_dataloader_shapes(tmp_path):
    pytest.importorskip("matplotlib")
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(
        _Toy([5, 7, 2, 9, 1, 4]), batch_size=2, collate_fn=_pad_collate
    )
    _assert_png(analyze(loader, column="x", num_buckets=[2]).plot(tmp_path / "a.png"))
    _assert_png(analyze(loader).plot(tmp_path / "b.png"))  # shapes only


def test_plot_draws_the_reports_numbers():
    """What each panel draws is the report's own figures: the recommended boundaries and the
    percentile rule's at the same k, each strategy's padding (in %) at every k on a log scale,
    the target and the dynamic baseline at their heights, the most common batch shape; labels
    and axes say them in the report's words (pct, the count formatter)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt
    import torch

    from bucketloader.analysis._plot import _count_formatter, _frontier, _histogram, _shapes, pct

    assert [pct(x) for x in (0.0, 0.0483, 0.0999, 0.391)] == ["0%", "4.83%", "9.99%", "39.1%"]
    fmt = _count_formatter()
    assert [fmt(v, None) for v in (900, 5000, 20000, 3e6)] == ["900", "5000", "20k", "3M"]
    ks = [2, 4, 8]  # k = 4 is recommended: its percentile row is drawn, not k = 8's
    r = analyze([3, 5, 7, 9, 12, 40, 41, 90], num_buckets=ks, batch_size=2)
    best, tick = r.recommended, r.row("percentile", 4)
    assert (best.strategy, best.num_buckets) == ("optimal", 4) and r.padding_target == 0.05
    loader = torch.utils.data.DataLoader(
        _Toy([5, 5, 5, 5, 9, 1]), batch_size=2, collate_fn=_pad_collate
    )
    flat = analyze([512] * 6, num_buckets=[1, 2])  # no padding at any k: a linear scale
    fig, (hist, front, shapes, zero) = plt.subplots(1, 4)
    try:
        _histogram(hist, r)
        lines, ticks = ([s[0][0] for s in c.get_segments()] for c in hist.collections)
        assert lines == list(best.boundaries) and ticks == list(tick.boundaries)
        assert [t.get_text() for t in hist.get_legend().get_texts()] == [
            f"optimal, k=4: {pct(best.padding_ratio)} padding",
            f"percentile, k=4: {pct(tick.padding_ratio)} (top ticks)",
        ]
        _frontier(front, r)
        drawn = {line.get_label(): line.get_ydata() for line in front.lines}
        for name in dict.fromkeys(row.strategy for row in r.rows):
            pad = np.array([r.row(name, k).padding_ratio for k in ks])
            # in %; no padding is a gap on the log scale (optimal at k = 8)
            np.testing.assert_allclose(drawn[name], np.where(pad > 0, 100 * pad, np.nan))
        assert np.isnan(drawn["optimal"][-1])
        heights = [line.get_ydata()[0] for line in front.lines if line.get_label()[0] == "_"]
        assert heights == pytest.approx([5.0, 100 * r.dynamic["padding_ratio"]])
        target = next(t for t in front.texts if t.get_text().startswith("target"))
        assert target.get_text() == "target 5.00%" and target.xy == (2, pytest.approx(5.0))
        assert front.get_yscale() == "log"
        _frontier(zero, flat)
        assert zero.get_yscale() == "linear"
        _shapes(shapes, analyze(loader, column="x", num_buckets=[2]))
        assert shapes.texts[0].get_text() == "2  (most common (2, 5, 3) x2)"
    finally:
        plt.close(fig)


def test_plot_bars_hold_whole_lengths():
    """s34-user: the histogram's bins were the range cut into up to 120 equal parts, so a bin
    held one integer length and the next two: Europarl's token counts (91 distinct over 0..121,
    smooth: 825, 909, 900, 874, 983 at 8..12) were drawn as a sawtooth of ~900 and ~1,800.
    Every bar now holds the same number of whole lengths (NOTE [ Whole lengths per bar ])."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from bucketloader.analysis._plot import _histogram

    def bars(lengths):
        fig, ax = plt.subplots()
        try:
            _histogram(ax, analyze(lengths, num_buckets=[4]))
            (container,) = ax.containers
            got = [(p.get_x(), p.get_width(), p.get_height()) for p in container.patches]
            return got, sorted(s[0][0] for s in ax.collections[0].get_segments())
        finally:
            plt.close(fig)

    # every length 1..150 ten times: 75 bars of two lengths, all 20 high (10 and 20 before)
    got, _ = bars(np.repeat(np.arange(1, 151), 10))
    assert {w for _, w, _ in got} == {2} and {h for _, _, h in got} == {20}
    assert [x for x, _, _ in got] == list(range(0, 150, 2))  # bar k: lengths 2k+1, 2k+2
    # few lengths: a bar per length, over (L - 1, L], so a boundary is its bucket's right edge
    lengths = np.repeat(np.arange(3, 41), np.arange(38) % 5 + 1)
    got, boundaries = bars(lengths)
    assert {w for _, w, _ in got} == {1} and sum(h for _, _, h in got) == lengths.size
    values, counts = np.unique(lengths, return_counts=True)
    assert {x + 1: h for x, _, h in got} == dict(zip(values.tolist(), counts.tolist(), strict=True))
    assert set(boundaries) <= {x + w for x, w, _ in got}


def test_hugging_face_dataset_is_measured_from_arrow():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"ids": [[1] * n for n in (3, 1, 4, 1, 5)], "y": [0] * 5})
    r = analyze(ds.select([4, 2, 0]), column="ids", num_buckets=[1])
    assert r.histogram.values.tolist() == [3, 4, 5] and r.row("optimal", 1).boundaries == (5,)


def test_dataloader_over_a_bucket_sampler_has_planned_shapes_only():
    torch = pytest.importorskip("torch")
    from bucketloader.sampler import BucketSampler

    lengths = np.random.default_rng(1).integers(1, 60, size=200)
    sampler = BucketSampler(lengths, num_buckets=4, batch_size=8, seed=0)
    loader = torch.utils.data.DataLoader(
        _Toy(lengths), batch_sampler=sampler, collate_fn=_pad_collate_to(sampler)
    )
    r = analyze(loader, num_buckets=[4])
    assert r.num_batches == len(sampler)
    assert {s[:2] for s in r.batch_shapes["x"]} <= set(sampler.shapes)
    assert r.histogram.num_samples == 200  # the sampler's own lengths
    assert r.row("optimal", 4).boundaries == tuple(sampler.boundaries)


def _pad_collate_to(sampler):
    from bucketloader.collate import Field

    collate = sampler.collator(fields={"x": Field(dims=-2)})
    return lambda items: {"x": collate(items)["x"]}


@pytest.mark.parametrize("compile_s, per_token", [(30.0, 2e-6), (0.5, 2e-4)])
def test_costs_pick_the_recommenders_choice(compile_s, per_token):
    from bucketloader.analysis import recommend_num_buckets

    lengths = load_real("multi30k")[:, 0]
    costs = {"compile_seconds_per_shape": compile_s, "seconds_per_token": per_token}
    report = analyze(lengths, batch_size=32, costs={**costs, "num_epochs": 10})
    rec = recommend_num_buckets(
        lengths,
        batch_size=32,
        num_epochs=10,
        num_buckets=(4, 8, 16, 32),
        strategy=[r.strategy for r in report.rows if r.num_buckets == 4],
        costs=costs,
    )
    assert (report.recommended.strategy, report.recommended.num_buckets) == (
        rec.strategy,
        rec.num_buckets,
    )
    assert "least predicted time" in report.rule


def test_costs_need_a_batch_size_and_a_mapping():
    with pytest.raises(ValueError, match="costs needs the batch size"):
        analyze([3, 4, 9], costs={"compile_seconds_per_shape": 1.0, "seconds_per_token": 1e-6})
    with pytest.raises(TypeError, match="costs must be a Calibration"):
        analyze([3, 4, 9], batch_size=2, costs=3.0)


def test_plot_legends_hide_no_label_and_no_tick():
    # s4-user defect 5: the frontier's legend hid the "target" label, the histogram's legend
    # covered the percentile top ticks (`bucketloader report commonvoice... -k 4 8 --plot`).
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from bucketloader.analysis._plot import _frontier, _histogram

    r = analyze(load_real("commonvoice"), num_buckets=[4, 8], batch_size=32)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.9))
    try:
        _histogram(left, r)
        _frontier(right, r)
        fig.tight_layout()
        fig.canvas.draw()
        box = left.get_legend().get_window_extent()
        top = left.get_ylim()[1]
        tallest = min(max(s[1][1] for s in c.get_segments()) for c in left.collections)
        y_ticks = left.transData.transform((0, top * 0.93))[1]  # the top ticks' band starts
        y_lines = left.transData.transform((0, tallest))[1]  # the boundary lines end
        assert y_lines < box.y0 and box.y1 < y_ticks
        target = next(t for t in right.texts if t.get_text().startswith("target"))
        assert not right.get_legend().get_window_extent().overlaps(target.get_window_extent())
    finally:
        plt.close(fig)


def test_the_padding_axis_has_labels_over_many_decades():
    # s30-first: ratios from 1e-9 (geometric, one element short of exact on 1e9) to 100% gave a
    # log axis with no tick at all (LogLocator with subs skips nothing or draws nothing)
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from bucketloader.analysis._plot import _frontier

    fig, axes = plt.subplots(1, 2, figsize=(5.4, 4.9))
    try:
        for ax, lengths in zip(axes, ([1, 10**9], [3, 5, 7, 9, 12, 40, 41, 90]), strict=True):
            _frontier(ax, analyze(lengths, batch_size=4))
            fig.canvas.draw()
            low, high = ax.get_ylim()
            shown = [y for y in ax.get_yticks() if low <= y <= high]
            assert len(shown) >= 3, (lengths, ax.get_ylim(), ax.get_yticks())
        assert 5.0 in list(axes[1].get_yticks())  # a few decades: 1-2-5 ticks still
    finally:
        plt.close(fig)


def test_no_padding_is_drawn_on_the_axis_with_the_recommendation():
    # s30-first: on a log scale a k without padding was a gap: on 3 lengths every optimal point
    # and the recommendation's star (k=4, 0%) were not drawn at all
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from bucketloader.analysis._plot import _frontier

    r = analyze([3, 5, 7], num_buckets=[1, 2, 4], batch_size=4)
    assert r.recommended.num_buckets == 4 and r.recommended.padding_ratio == 0
    fig, ax = plt.subplots()
    try:
        _frontier(ax, r)
        assert ax.get_yscale() == "log"
        star = [c for c in ax.collections if c.get_label() == "recommended: k=4"]
        assert len(star) == 1 and star[0].get_offsets().tolist() == [[4.0, 0.0]]
        assert star[0].get_offset_transform() == ax.get_xaxis_transform()  # y 0: the x axis
        on_axis = sorted(
            tuple(xy) for c in ax.collections if c not in star for xy in c.get_offsets().tolist()
        )
        zero = sorted(
            (k, 0.0) for row in r.rows if row.padding_ratio == 0 for k in [row.num_buckets]
        )
        assert on_axis == zero and "no padding (0%)" in ax.get_xlabel()
    finally:
        plt.close(fig)


def test_the_summary_says_one_shape_not_one_shapes():
    # s4-user defect 6: "1 shapes", "1 distinct lengths"
    text = analyze([7, 7, 7], num_buckets=[2], batch_size=2).summary()
    assert "unbucketed: 1 distinct length, so up to 1 distinct shape (" in text
    assert "1 shapes" not in text and "1 distinct lengths" not in text
    assert "0% padding, 1 shape" in text
    text = analyze([3, 4, 5], num_buckets=[2], batch_size=2).summary()
    assert "unbucketed: 3 distinct lengths, so up to 3 distinct shapes (" in text
    # s27: a scanned DataLoader's field of one shape said "1 distinct shapes"
    loader = torch.utils.data.DataLoader([torch.ones(3)] * 4, batch_size=2)
    assert "    batch: 1 distinct shape; (2, 3) x2" in analyze(loader).summary()


def test_a_histogram_of_more_samples_than_memory_is_analysed_from_its_counts():
    """An engine's histogram (here 10**12 samples per length: 800 TB as int64) is reported from
    its counts; only the options that plan batches sample by sample need every length, and they
    name themselves instead of failing in numpy (before: MemoryError from np.repeat, even
    without batch_size)."""
    from bucketloader import LengthHistogram, recommend_num_buckets

    values = np.arange(1, 101)
    hist = LengthHistogram.from_counts(values, np.full(values.size, 10**12))
    small = LengthHistogram.from_counts(values, np.ones(values.size, dtype=np.int64))
    r = analyze(hist, num_buckets=[4, 8])
    same = analyze(small, num_buckets=[4, 8])  # the same shape of histogram, 100 samples
    assert r.recommended.boundaries == same.recommended.boundaries
    assert r.recommended.padding_ratio == pytest.approx(same.recommended.padding_ratio)
    assert recommend_num_buckets(hist, num_buckets=[4]).boundaries == (25, 50, 75, 100)
    with pytest.raises(ValueError, match=r"batch_size=32 .*100,000,000,000,000 samples.*None"):
        analyze(hist, num_buckets=[4], batch_size=32)
    with pytest.raises(ValueError, match=r"batch_size / max_tokens .*leave out batch_size"):
        recommend_num_buckets(hist, num_buckets=[4], max_tokens=4096)
    costs = {"compile_seconds_per_shape": 5.0, "seconds_per_token": 1e-6}
    with pytest.raises(ValueError, match=r"leave out batch_size and max_tokens, and costs \("):
        analyze(hist, num_buckets=[4], batch_size=32, costs=costs)  # (costs need batch_size)


def test_plot_refuses_a_resolution_no_canvas_holds_before_drawing(tmp_path):
    """dpi=10**6 failed inside matplotlib ('Image size of 13230000x4900000 pixels is too
    large'), without naming dpi; 20,000 asked for a canvas of ~150 GB."""
    r = analyze([3, 4, 4, 9, 10, 31], num_buckets=[2])
    for dpi in (20_000, 10**6):
        with pytest.raises(
            ValueError, match=rf"^dpi must be an int >= 10 and <= 1200, got dpi={dpi}$"
        ):
            r.plot(tmp_path / "r.png", dpi=dpi)
    assert not (tmp_path / "r.png").exists()


def test_an_iterable_dataset_names_the_dataloader_that_scans_it():
    """A streaming dataset (torch or Hugging Face) was refused as 'lengths must be a list,
    numpy array or torch tensor of non-negative ints, got It'."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter([torch.zeros(3), torch.zeros(5), torch.zeros(5)])

    with pytest.raises(TypeError, match=r"iterable dataset \(Stream\).*DataLoader\(data, batch_s"):
        analyze(Stream())
    r = analyze(DataLoader(Stream(), batch_size=1))  # the fix, as named
    assert sorted(r.batch_shapes["batch"]) == [(1, 3), (1, 5)]
    datasets = pytest.importorskip("datasets")
    hub = datasets.Dataset.from_dict({"ids": [[1, 2], [3]]}).to_iterable_dataset()
    with pytest.raises(TypeError, match=r"iterable dataset \(IterableDataset\)"):
        analyze(hub, column="ids")
    # a bucketloader stream yields batches: its fix is batch_size=None and its collator (the
    # named batch_size=... was refused by the stream itself; s25-user)
    from bucketloader import BucketIterable

    stream = BucketIterable([[1] * n for n in (3, 5, 5)], boundaries=[5], batch_size=2)
    with pytest.raises(TypeError, match=r"batch_size=None, collate_fn=data\.collator\(\)"):
        analyze(stream)
    r = analyze(DataLoader(stream, batch_size=None, collate_fn=stream.collator()))
    assert sorted(r.batch_shapes["inputs"]) == [(2, 5)]


def test_samples_of_length_0_are_noted_as_the_command_line_notes_them():
    """s31: analyze() said nothing of samples of length 0 (NaN in softmax attention), which
    `bucketloader report` printed after its report and the samplers warn; the report's text now
    ends with the note in the same words (one helper, zero_lengths_note), from lengths, a
    histogram or a dataset, and never for lengths without a 0."""
    from bucketloader.plan.limits import zero_length_note

    said = "\n\nwarning: " + zero_length_note(2, 5)
    for data in ([0, 0, 5, 6, 7], LengthHistogram.from_lengths([7, 0, 5, 0, 6])):
        assert str(analyze(data, num_buckets=[2])).endswith(said)
    items = [[1] * n for n in (0, 0, 5, 6, 7)]
    assert str(analyze(items, column=len, num_buckets=[2])).endswith(said)
    assert "length 0" not in str(analyze([1, 5, 6, 7], num_buckets=[2]))
