"""benchmarks/pack_bound.py: the configuration LP it reports is the LP, and what it reports as a
bracket holds the LP, against the LP over every configuration on small histograms."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import quick_examples
from scipy.optimize import linprog

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "pack_bound.py"


@pytest.fixture(scope="module")
def pack_bound():
    spec = importlib.util.spec_from_file_location("pack_bound_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up there)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _configurations(sizes: np.ndarray, counts: np.ndarray, length: int) -> np.ndarray:
    """Every non-empty row content: ``a_i <= min(n_i, L // s_i)`` with ``sum a_i s_i <= L``."""
    ranges = [range(min(int(n), length // int(s)) + 1) for s, n in zip(sizes, counts, strict=True)]
    rows = [a for a in itertools.product(*ranges) if any(a) and np.dot(a, sizes) <= length]
    return np.array(rows, dtype=np.int64)


def _lp(sizes: np.ndarray, counts: np.ndarray, length: int) -> float:
    a = _configurations(sizes, counts, length)
    res = linprog(
        np.ones(len(a)), A_ub=-a.T.astype(float), b_ub=-counts.astype(float), method="highs"
    )
    assert res.status == 0
    return float(res.fun)


def _histograms(count: int):
    rng = np.random.default_rng(5)
    for _ in range(count):
        length = int(rng.integers(8, 41))
        k = int(rng.integers(1, 6))
        sizes = np.sort(rng.choice(np.arange(1, length + 1), k, replace=False)).astype(np.int64)
        yield sizes, rng.integers(1, 9, k).astype(np.int64), length


class _Clock:
    """``time.perf_counter`` that advances one second a call: a budget of ``k`` seconds stops
    column generation after a few rounds, whatever the machine's speed."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def test_the_lp_by_column_generation_is_the_lp_over_every_configuration(pack_bound, monkeypatch):
    """Its master, its duals' sign (HiGHS's marginals of ``-A x <= -n``), the bounded knapsack
    pricing and the stop: the value it reports as finished is the LP's. Blocks of one to three
    pieces make the kept-row tables recompute within and across blocks."""
    for case, (sizes, counts, length) in enumerate(_histograms(quick_examples(80))):
        monkeypatch.setattr(pack_bound, "BLOCK", (1, 2, 3, 64)[case % 4])
        want = _lp(sizes, counts, length)
        got = pack_bound.configuration_lp(
            sizes, counts, length, budget_s=1e9, most=(1, 1000)[case % 2]
        )
        assert got.done and got.lower == got.upper
        assert got.lower == pytest.approx(want, abs=1e-7), (sizes, counts, length)


def test_a_bracket_stopped_early_holds_the_lp(pack_bound, monkeypatch):
    """Stopped by the budget, the lower end (the best Farley bound) is at most the LP and the
    upper end (the restricted master) at least it."""
    for sizes, counts, length in _histograms(quick_examples(40)):
        want = _lp(sizes, counts, length)
        for budget in (1.5, 2.5, 4.5):
            monkeypatch.setattr(pack_bound.time, "perf_counter", _Clock())
            got = pack_bound.configuration_lp(sizes, counts, length, budget_s=budget)
            assert got.lower <= want + 1e-7 <= got.upper + 2e-7, (sizes, counts, length, got)


def test_pricing_finds_the_best_column_and_only_rows_that_fit(pack_bound, monkeypatch):
    """The Farley bound divides by the best column's value: it must be the best (with duals of
    either sign: the thirds' function is negative on short documents), and every column it
    returns a row content within the counts."""
    rng = np.random.default_rng(6)
    for case, (sizes, counts, length) in enumerate(_histograms(quick_examples(80))):
        monkeypatch.setattr(pack_bound, "BLOCK", (1, 2, 3, 64)[case % 4])
        bounds = np.minimum(counts, length // sizes)
        duals = rng.uniform(-0.3, 0.7, sizes.size)
        best = max(0.0, float((_configurations(sizes, counts, length) @ duals).max()))
        found = pack_bound._price(sizes, bounds, duals, length)
        assert found[0][0] == pytest.approx(best, abs=1e-12)
        assert pack_bound._best_value(sizes, bounds, duals, length) == pytest.approx(best)
        for value, a in found:
            assert a @ sizes <= length and (0 <= a).all() and (a <= bounds).all()
            assert value == pytest.approx(float(a @ duals))
