"""Old code vs new code: the digests of 300 stream and 150 sampler cases (tests/differential.py)
recorded before the streams' renovation (issue 20) must be reproduced exactly, except the cases
listed in CHANGED, each a deliberate change named with its reason."""

from __future__ import annotations

import json

import differential
import pytest

#: Cases whose behaviour changed on purpose: case -> why.
CHANGED: dict[str, str] = {}


@pytest.fixture(scope="module")
def golden() -> dict[str, str]:
    return json.loads(differential.GOLDEN.read_text())


def test_the_harness_covers_enough_cases(golden):
    assert sum(k.startswith("stream-") for k in golden) >= 200
    assert sum(k.startswith("sampler-") for k in golden) >= 100


def test_streams_and_samplers_behave_as_before(golden):
    records = differential.run_all()
    got = {name: differential.digest(rec) for name, rec in records.items()}
    assert set(got) == set(golden)
    differ = sorted(n for n in golden if got[n] != golden[n] and n not in CHANGED)
    assert not differ, f"{len(differ)} cases changed: {differ[:20]}"
    unchanged = sorted(n for n in CHANGED if got[n] == golden[n])
    assert not unchanged, f"listed as changed but identical: {unchanged}"
