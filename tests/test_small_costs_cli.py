"""benchmarks/small_costs.py: the check options never write a partial results file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "small_costs.py"


@pytest.mark.parametrize(
    "argv",
    [
        ["--kinds", "audio", "--rows", "8,16"],  # no --only: the whole file would be written
        ["--only", "collation", "--write", "--rows", "8"],
        ["--only", "packing", "--kinds", "audio"],
    ],
)
def test_narrowed_collation_runs_refuse_to_write(argv, monkeypatch, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("small_costs_cli", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "small_costs.md"
    out.write_text("untouched\n")
    monkeypatch.setattr(module, "OUT", out)
    for name in ("collation", "packing", "streaming"):  # never run a section here
        monkeypatch.setattr(module, name, lambda *a, n=name: pytest.fail(f"{n} ran"))
    monkeypatch.setattr(sys, "argv", ["small_costs.py", *argv])
    with pytest.raises(SystemExit) as exc:
        module.main()
    assert exc.value.code == 2
    assert "--only collation" in capsys.readouterr().err
    assert out.read_text() == "untouched\n"
