"""recommend_num_buckets / calibrate: the plan totals are exact, the choice is the argmin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bucketloader.analysis import Calibration, calibrate, recommend_num_buckets
from bucketloader.analysis.recommend import epoch_cost
from bucketloader.boundaries import assign_buckets
from bucketloader.plan import TokenBudget
from bucketloader.sampler import BucketSampler
from bucketloader.solve import compute_boundaries
from tests.conftest import load_real


def simulate_epoch(lengths, boundaries, *, batch_size=None, max_tokens=None, last_batch="pad"):
    """Reference: cut each bucket's samples into batches one by one, as a sampler would."""
    lengths = np.asarray(lengths)
    b = np.asarray(boundaries)
    bucket = assign_buckets(lengths, b)
    shapes, steps, padded, real = set(), 0, 0, 0
    # NOTE [ The batch-size rule ]: an empty bucket batches like the shortest non-empty one
    sized = [max_tokens // w for w in b.tolist() if w > 0] if max_tokens else []
    for i, width in enumerate(b.tolist()):
        members = lengths[bucket == i].tolist()
        if batch_size is not None:
            rows = batch_size
        else:
            rows = max_tokens // width if width else max(sized, default=max_tokens)
            if last_batch in ("pad", "fill") and members:
                # NOTE [ Even batches ]: the fewest rows that keep ceil(n / rows) batches
                rows = -(-len(members) // -(-len(members) // rows))
        for start in range(0, len(members), rows):
            chunk = members[start : start + rows]
            if len(chunk) < rows and last_batch == "drop":
                continue
            shape_rows = rows if last_batch in ("pad", "fill") else len(chunk)
            shapes.add((shape_rows, width))
            steps += 1
            padded += shape_rows * width
            real += sum(chunk)
    return sorted(shapes), steps, padded, real


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=80),
    k=st.integers(1, 6),
    rows=st.integers(1, 9),
    by_tokens=st.booleans(),
    last_batch=st.sampled_from(["pad", "fill", "keep"]),
)
def test_epoch_cost_matches_batch_by_batch_simulation(lengths, k, rows, by_tokens, last_batch):
    b = compute_boundaries(lengths, k)
    kw = {"max_tokens": rows * max(int(b[-1]), 1)} if by_tokens else {"batch_size": rows}
    even = {"max_tokens": TokenBudget(kw["max_tokens"], promote=False)} if by_tokens else kw
    got = epoch_cost(np.array(lengths), b, last_batch=last_batch, **even)  # the reference's plan
    shapes, steps, padded, real = simulate_epoch(lengths, b, last_batch=last_batch, **kw)
    assert list(got.shapes) == shapes
    assert (got.steps, got.padded_tokens, got.real_tokens) == (steps, padded, real)


def test_epoch_cost_drop_counts_full_batches_only():
    lengths = [5] * 7 + [9] * 2
    got = epoch_cost(np.array(lengths), np.array([5, 9]), batch_size=3, last_batch="drop")
    shapes, steps, padded, _ = simulate_epoch(lengths, [5, 9], batch_size=3, last_batch="drop")
    assert (list(got.shapes), got.steps, got.padded_tokens) == (shapes, steps, padded)
    assert got.real_tokens == 30  # the 6 kept samples of length 5


@pytest.mark.parametrize("last_batch", ["pad", "keep", "drop"])
@pytest.mark.parametrize("kw", [{"batch_size": 24}, {"max_tokens": 1000}])
def test_epoch_cost_matches_the_sampler_batches(kw, last_batch):
    lengths = np.asarray(load_real("europarl")[:3000, 0])
    lengths = lengths[lengths > 0]
    sampler = BucketSampler(lengths, num_buckets=6, last_batch=last_batch, seed=3, **kw)
    got = epoch_cost(lengths, sampler.boundaries, last_batch=last_batch, **kw)
    assert list(got.shapes) == sampler.shapes
    batches = list(sampler)
    assert got.steps == len(sampler) == len(batches)
    table = sampler.shape_table
    shapes = [
        table.target(lengths[b]) if last_batch != "keep" else (len(b), table.target(lengths[b])[1])
        for b in batches
    ]
    assert got.padded_tokens == sum(r * w for r, w in shapes)
    if last_batch != "drop":
        assert got.real_tokens == sum(int(lengths[b].sum()) for b in batches)


def brute_force_totals(lengths, *, compile_s, per_token, per_step, epochs, ks, strategies, **kw):
    out = {}
    for s in strategies:
        for k in ks:
            b = compute_boundaries(lengths, k, strategy=s)
            shapes, steps, padded, _ = simulate_epoch(lengths, b, **kw)
            out[(s, k)] = len(shapes) * compile_s + epochs * (steps * per_step + padded * per_token)
    return out


@pytest.mark.parametrize(
    ("compile_s", "epochs", "kw"),
    [
        (30.0, 1, {"batch_size": 32}),
        (30.0, 20, {"batch_size": 32}),
        (2.0, 50, {"max_tokens": 4096}),
    ],
)
def test_recommendation_is_the_argmin_on_real_lengths(compile_s, epochs, kw):
    lengths = load_real("multi30k")[:, 0]
    ks, strategies = (1, 2, 4, 8, 16, 32), ("optimal", "percentile", "linear")
    # the reference simulates even batches: the recommender plans them with promote=False
    even = (
        {"max_tokens": TokenBudget(kw["max_tokens"], promote=False)} if "max_tokens" in kw else kw
    )
    rec = recommend_num_buckets(
        lengths,
        costs={
            "compile_seconds_per_shape": compile_s,
            "seconds_per_token": 2e-6,
            "seconds_per_step": 1e-3,
        },
        num_epochs=epochs,
        num_buckets=ks,
        strategy=strategies,
        **even,
    )
    ref = brute_force_totals(
        lengths,
        compile_s=compile_s,
        per_token=2e-6,
        per_step=1e-3,
        epochs=epochs,
        ks=ks,
        strategies=strategies,
        **kw,
    )
    assert len(rec.table) == len(ref)
    for c in rec.table:
        assert c.total_seconds == pytest.approx(ref[(c.strategy, c.num_buckets)], rel=1e-9)
    best = min(ref.values())
    assert rec.predicted_seconds == pytest.approx(best, rel=1e-9)
    assert ref[(rec.strategy, rec.num_buckets)] == pytest.approx(best, rel=1e-9)


def test_compile_cost_drives_k_down_and_compute_drives_it_up():
    lengths = load_real("librispeech") // 320
    common = {"batch_size": 16, "num_buckets": (1, 2, 4, 8, 16, 32)}
    cheap = {"compile_seconds_per_shape": 0.01, "seconds_per_token": 1e-6}
    dear = {"compile_seconds_per_shape": 1e4, "seconds_per_token": 1e-6}
    cheap_compile = recommend_num_buckets(lengths, costs=cheap, num_epochs=50, **common)
    dear_compile = recommend_num_buckets(lengths, costs=dear, num_epochs=1, **common)
    assert dear_compile.num_buckets == 1
    assert cheap_compile.num_buckets >= 16
    shapes = [c.num_shapes for c in cheap_compile.table]
    assert shapes == sorted(shapes) and shapes[-1] <= 32


def test_num_shapes_counts_planned_shapes_not_k():
    lengths = [3] * 10 + [7] * 10  # two distinct lengths: k = 8 still gives two shapes
    costs = {"compile_seconds_per_shape": 1.0, "seconds_per_token": 0.0}
    rec = recommend_num_buckets(lengths, costs=costs, batch_size=4, num_buckets=(8,))
    assert rec.table[0].num_shapes == 2
    keep = recommend_num_buckets(
        lengths, costs=costs, batch_size=4, num_buckets=(8,), last_batch="keep"
    )
    assert keep.table[0].num_shapes == 4  # (4, 3), (2, 3), (4, 7), (2, 7)


def test_num_steps_scales_each_candidate_by_its_own_steps():
    lengths = [10] * 90 + [100] * 10
    rec = recommend_num_buckets(
        lengths,
        costs={"compile_seconds_per_shape": 0.0, "seconds_per_token": 1.0},
        num_steps=1000,
        batch_size=10,
        num_buckets=(1, 2),
    )
    one, two = rec.table
    assert one.steps == pytest.approx(1000) and two.steps == pytest.approx(1000)
    assert one.padded_tokens == pytest.approx(1000 * 10 * 100)
    assert two.padded_tokens == pytest.approx(1000 * 1900 / 10)
    assert math.isclose(one.batch_padding_ratio, (100 - 19) / 19)
    assert math.isclose(one.padding_ratio, (100 - 19) / 19)  # no filler rows here: the same


def test_markdown_marks_the_recommendation():
    rec = recommend_num_buckets(
        [1, 2, 3, 50],
        costs={"compile_seconds_per_shape": 1.0, "seconds_per_token": 1.0},
        batch_size=1,
        num_buckets=(1, 2),
    )
    md = rec.to_markdown()
    assert md.count(" *") == 1 and f"| optimal * | {rec.num_buckets} |" in md


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1, got batch_size=0"),
        ({"batch_size": True}, TypeError, "batch_size must be an int"),
        ({}, ValueError, "costs need the batch size the model trains with"),
        ({"batch_size": 4, "max_tokens": 64}, ValueError, "exactly one of batch_size"),
        ({"max_tokens": 5}, ValueError, "max_tokens=5 is below the padded size 9"),
        ({"batch_size": 4, "num_buckets": ()}, ValueError, "num_buckets must list at least one"),
        ({"batch_size": 4, "num_buckets": "4"}, TypeError, "num_buckets must be an int >= 1 or"),
        ({"batch_size": 4, "num_buckets": (2, 0)}, ValueError, "num_buckets must be an int >= 1"),
        ({"batch_size": 4, "strategy": "nope"}, ValueError, "strategy must be one of"),
        ({"batch_size": 4, "strategy": ()}, TypeError, "non-empty sequence"),
        ({"batch_size": 4, "last_batch": "x"}, ValueError, "last_batch must be one of"),
        ({"batch_size": 4, "num_epochs": 1, "num_steps": 3}, ValueError, "not both"),
        ({"batch_size": 4, "num_steps": 0}, ValueError, "num_steps must be an int >= 1"),
        ({"batch_size": 4, "seconds_per_step": -1.0}, ValueError, "seconds_per_step'\\] must be"),
        ({"batch_size": 4, "seconds_per_token": float("nan")}, ValueError, "seconds_per_token"),
        ({"batch_size": 4, "speed": 1.0}, TypeError, "costs has unknown key 'speed'"),
        ({"batch_size": 4, "compile_seconds_per_shape": None}, ValueError, "costs needs"),
    ],
)
def test_invalid_arguments_raise_one_clear_error(kwargs, error, match):
    kwargs = dict(kwargs)
    costs = {"compile_seconds_per_shape": 1.0, "seconds_per_token": 1.0}
    for key in ("seconds_per_step", "seconds_per_token", "speed", "compile_seconds_per_shape"):
        if key in kwargs:
            costs[key] = kwargs.pop(key)
    costs = {k: v for k, v in costs.items() if v is not None}
    with pytest.raises(error, match=match):
        recommend_num_buckets([1, 5, 9], costs=costs, **kwargs)


def test_drop_with_no_full_batch_is_an_error_not_a_zero_cost():
    with pytest.raises(ValueError, match="no candidate yields a single full batch"):
        recommend_num_buckets(
            [1, 5, 9],
            costs={"compile_seconds_per_shape": 1.0, "seconds_per_token": 1.0},
            batch_size=4,
            last_batch="drop",
        )


def test_calibrate_measures_every_shape_past_the_recompile_limit():
    import torch._dynamo
    from torch._dynamo.utils import counters

    counters.clear()
    shapes = [(2, n) for n in range(4, 4 + 2 * 9, 2)]  # 9 shapes > default recompile_limit 8
    assert torch._dynamo.config.recompile_limit < len(shapes)  # else this test proves nothing
    cal = calibrate(
        lambda x: torch.nn.functional.gelu(x).sum(),
        example_shapes=shapes,
        repeats=1,
        compile_kwargs={"backend": "eager"},
    )
    assert isinstance(cal, Calibration)
    assert [(r, n) for r, n, _, _ in cal.measurements] == shapes
    # warm-up + the cold pass + the warm pass (dynamo reset, caches kept); no eager fallback
    assert counters["stats"]["unique_graphs"] == 2 * len(shapes) + 1
    assert (
        cal.warm_compile_seconds_per_shape is not None and cal.warm_compile_seconds_per_shape >= 0
    )
    assert cal.warm().compile_seconds_per_shape == cal.warm_compile_seconds_per_shape
    assert all(s > 0 for *_, s in cal.measurements)  # every shape's steady step was timed
    tokens = np.array([r * n for r, n, _, _ in cal.measurements], dtype=np.float64)
    steps = np.array([s for *_, s in cal.measurements])
    slope, intercept = np.polyfit(tokens, steps, 1)
    if slope >= 0 and intercept >= 0:  # unclamped: the costs are the least-squares line
        assert cal.seconds_per_token == pytest.approx(slope, rel=1e-6, abs=1e-15)
        assert cal.seconds_per_step == pytest.approx(intercept, rel=1e-6, abs=1e-15)
    compiles = sorted(c for _, _, c, _ in cal.measurements)
    assert cal.compile_seconds_per_shape == pytest.approx(compiles[len(compiles) // 2])
    rec = recommend_num_buckets([4, 8, 30], batch_size=2, costs=cal)
    assert rec.num_buckets >= 1
    torch._dynamo.reset()


class _StepClock:
    """A ``perf_counter`` that only ``after_call`` advances, by a time model of each shape:
    ``per_step + per_token * rows * length`` a step, plus ``cold[i]`` on the first call of
    shape ``i`` and ``warm[i]`` on its first call again after the cold pass (the calls of one
    shape come in that order: 1 + repeats cold, then 2 warm)."""

    def __init__(self, shapes, per_step, per_token, cold, warm, repeats):
        self.now, self.calls = 0.0, {}
        self.shapes, self.repeats = [tuple(s) for s in shapes], repeats
        self.per_step, self.per_token, self.cold, self.warm = per_step, per_token, cold, warm

    def perf_counter(self):
        return self.now

    def after_call(self, out):
        shape = tuple(out.shape)
        if shape not in self.shapes:  # the warm-up shape: not measured
            return
        i, n = self.shapes.index(shape), self.calls.get(shape, 0)
        self.calls[shape] = n + 1
        self.now += self.per_step + self.per_token * shape[0] * shape[1]
        self.now += self.cold[i] if n == 0 else self.warm[i] if n == 1 + self.repeats else 0.0


@pytest.mark.parametrize(
    ("per_step", "per_token", "want_step", "want_token"),
    [
        (0.5, 0.01, 0.5, 0.01),  # the least-squares line through the steps
        (2.0, -0.01, None, 0.0),  # steps that shrink with tokens: all of it per step (the mean)
        (-0.1, 0.01, 0.0, 0.01),  # a negative intercept is no cost
    ],
)
def test_calibrate_reads_the_time_model_off_its_clock(
    monkeypatch, per_step, per_token, want_step, want_token
):
    """What calibrate computes from its timings, on a clock that only the timed calls advance:
    each shape's compile excess (clamped at 0) and its median, the steady steps (``after_call``
    timed with the call), the fitted line and its clamps, the warm excess."""
    import torch

    from bucketloader.analysis import calibration

    shapes, repeats = [(2, 8), (4, 16), (8, 16)], 3

    def on_clock(clock, **options):
        monkeypatch.setattr(calibration, "time", clock)
        return calibrate(
            torch.nn.Identity(),
            example_shapes=shapes,
            repeats=repeats,
            compile_kwargs={"backend": "eager"},
            after_call=clock.after_call,
            **options,
        )

    clock = _StepClock(shapes, per_step, per_token, [3.0, 7.0, -0.5], [0.25, 1.5, 0.5], repeats)
    cal = on_clock(clock)
    steps = [per_step + per_token * r * n for r, n in shapes]
    assert [m[:2] for m in cal.measurements] == shapes
    assert [m[2] for m in cal.measurements] == pytest.approx([3.0, 7.0, 0.0])  # clamped at 0
    assert [m[3] for m in cal.measurements] == pytest.approx(steps)
    assert cal.compile_seconds_per_shape == pytest.approx(3.0)  # the median, not the mean
    assert cal.warm_compile_seconds_per_shape == pytest.approx(0.5)
    assert cal.seconds_per_token == pytest.approx(want_token, abs=1e-12)
    want_step = float(np.mean(steps)) if want_step is None else want_step
    assert cal.seconds_per_step == pytest.approx(want_step, abs=1e-12)
    assert clock.calls == {s: 1 + repeats + 2 for s in shapes}  # every timed call ran after_call
    if per_step == 0.5:  # warm=False: no warm pass, no warm cost (and none to pass on)
        clock = _StepClock(shapes, per_step, per_token, [3.0, 7.0, 1.0], [0.0] * 3, repeats)
        cold = on_clock(clock, warm=False)
        assert cold.warm_compile_seconds_per_shape is None
        assert clock.calls == {s: 1 + repeats for s in shapes}
        assert sorted(cold.as_kwargs()) == [
            "compile_seconds_per_shape",
            "seconds_per_step",
            "seconds_per_token",
        ]
        with pytest.raises(ValueError, match="has no warm cost; measure it with calibrate"):
            cold.warm()
    # the compiled nn.Identity traced an empty graph, and dynamo then skips the code object every
    # torch.nn module's compiled call shares: a torch.compile(nn.Embedding) later in the process
    # traced nothing (precompile's doctest saw 0 graphs after this test, s22-compile)
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "shapes", [[(2, 8)], [(2, 8), (4, 4)], [(0, 8), (2, 4)], "ab", [(2,)], [(2.5, 8), (4, 16)]]
)
def test_calibrate_rejects_bad_example_shapes(shapes):
    with pytest.raises(ValueError, match="example_shapes must be"):
        calibrate(lambda x: x, example_shapes=shapes)


def test_calibrate_rejects_a_non_callable():
    with pytest.raises(TypeError, match="model_fn must be callable"):
        calibrate(3, example_shapes=[(1, 2), (1, 3)])
    with pytest.raises(TypeError, match="after_call must be callable or None, got after_call=3"):
        calibrate(abs, example_shapes=[(1, 2), (1, 3)], after_call=3)
    with pytest.raises(ValueError, match="repeats must be an int >= 1, got repeats=0"):
        calibrate(abs, example_shapes=[(1, 2), (1, 3)], repeats=0)
    # s25-user: Python's "dictionary update sequence element #0 has length 1"; dynamic=True
    # measured one dynamic graph as a graph per shape; a bare tensor was unpacked into model_fn
    with pytest.raises(TypeError, match=r"compile_kwargs must be a dict .*got compile_kwargs='"):
        calibrate(abs, example_shapes=[(1, 2), (1, 3)], compile_kwargs="eager")
    with pytest.raises(ValueError, match=r"one static graph per shape .*\['dynamic'\]=True"):
        calibrate(abs, example_shapes=[(1, 2), (1, 3)], compile_kwargs={"dynamic": True})
    with pytest.raises(TypeError, match=r"make_inputs\(1, 3\) must return a tuple .* got ndarray"):
        calibrate(abs, example_shapes=[(1, 2), (1, 3)], make_inputs=lambda r, n: np.ones((r, n)))


def test_a_k_that_pads_exactly_the_target_meets_it():
    """The rule is "pads at most padding_target": k=1 pads [1, 2] by 1/3 exactly, which meets
    a target of 1/3, so k=1 (not 2) is recommended."""
    rec = recommend_num_buckets([1, 2], num_buckets=[1, 2], padding_target=1 / 3)
    assert [c.padding_ratio for c in rec.table] == [1 / 3, 0.0] and rec.num_buckets == 1
    # the k values are a set, tried from the smallest whatever order they come in
    again = recommend_num_buckets([1, 2], num_buckets=[2, 1, 2], padding_target=1 / 3)
    assert [c.num_buckets for c in again.table] == [1, 2] and again.num_buckets == 1


def test_shapes_already_compiled_cost_the_warm_compile():
    """``compiled_shapes``: a planned shape already compiled costs the warm compile (1 s), the
    others the cold one (10 s): shapes (2, 4) and (2, 12), one warm, 11 s."""
    costs = {"compile_seconds_per_shape": 10.0, "warm_compile_seconds_per_shape": 1.0,
             "seconds_per_step": 0.0, "seconds_per_token": 0.0}  # fmt: skip
    lengths = [3, 4, 9, 10, 10, 12]
    cold = recommend_num_buckets(lengths, num_buckets=[2], costs=costs, batch_size=2).best
    warm = recommend_num_buckets(
        lengths, num_buckets=[2], costs=costs, batch_size=2, compiled_shapes=[(2, 4)]
    ).best
    assert cold.boundaries == warm.boundaries == (4, 12)
    assert (cold.warm_shapes, cold.compile_seconds) == (0, 20.0)
    assert (warm.warm_shapes, warm.compile_seconds) == (1, 11.0)
