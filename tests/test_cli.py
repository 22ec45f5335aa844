"""The ``bucketloader`` console script, run for real in subprocesses; and the file readers."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from bucketloader import analyze, compute_boundaries
from bucketloader.cli.files import LengthFileError, default_lengths, read_lengths

SCRIPT = Path(sys.executable).with_name("bucketloader")
LENGTHS = [5, 17, 3, 3, 40, 12, 9, 9, 9, 28, 33, 6]


def _cmd(*args: str) -> list[str]:
    if SCRIPT.exists():
        return [str(SCRIPT), *args]
    return [sys.executable, "-m", "bucketloader.cli", *args]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "BUCKETLOADER_CACHE_DIR": str(tmp_path / "cache"), "MPLBACKEND": "Agg"}


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cmd(*args), capture_output=True, text=True, env=_env(tmp_path), timeout=120
    )


@pytest.fixture
def files(tmp_path):
    """The same lengths in every supported format."""
    d = tmp_path / "in"
    d.mkdir()
    (d / "one.txt").write_text("\n".join(map(str, LENGTHS)) + "\n")
    (d / "two.txt").write_text("".join(f"{x}\t{2 * x}\n" for x in LENGTHS))
    np.save(d / "one.npy", np.array(LENGTHS, dtype=np.int32))
    (d / "t.csv").write_text("id,n\n" + "".join(f"u{i},{x}\n" for i, x in enumerate(LENGTHS)))
    (d / "t.tsv").write_text("n\tid\n" + "".join(f"{x}\tu{i}\n" for i, x in enumerate(LENGTHS)))
    (d / "t.jsonl").write_text(
        "".join(json.dumps({"n": x, "ids": list(range(x))}) + "\n" for x in LENGTHS)
    )
    return d


def test_readers_agree_on_every_format(files):
    want = LENGTHS
    assert read_lengths(files / "one.txt").tolist() == want
    assert read_lengths(files / "two.txt", "0").tolist() == want
    assert read_lengths(files / "two.txt", 1).tolist() == [2 * x for x in want]
    assert read_lengths(files / "one.npy").tolist() == want
    assert read_lengths(files / "t.csv", "n").tolist() == want
    assert read_lengths(files / "t.tsv", "n").tolist() == want
    assert read_lengths(files / "t.jsonl", "n").tolist() == want
    assert read_lengths(files / "t.jsonl", "ids").tolist() == want  # list column: its lengths
    # the first index past the last column is refused as the others are (not an IndexError)
    with pytest.raises(LengthFileError, match=r"column 2 does not exist; the file has 2 column"):
        read_lengths(files / "two.txt", 2)
    with pytest.raises(LengthFileError, match=r"expected a 1-D array .* got shape \(12,\)"):
        read_lengths(files / "one.npy", 1)  # (a column of a 1-D array: refused, not ignored)
    np.save(files / "two.npy", np.array([[3, 4], [5, 6]]))
    with pytest.raises(LengthFileError, match=r"column 2 does not exist; the file has 2 column"):
        read_lengths(files / "two.npy", 2)


def test_a_jsonl_file_of_one_key_needs_no_column(tmp_path):
    """s31: a .jsonl file whose objects hold one key asked for --column (a one-column .csv or
    Parquet file is read as it is), and said "line 1" of a file whose first line is blank; the
    key is now read as the column, several keys are named with the line that has them, and a
    later object without the key says where the column came from."""
    one = tmp_path / "one.jsonl"
    one.write_text('\n{"ids": [1, 2, 3]}\n{"ids": [4]}\n')
    assert read_lengths(one).tolist() == [3, 1]
    two = tmp_path / "two.jsonl"
    two.write_text('\n{"n": 3, "ids": [1]}\n')
    with pytest.raises(LengthFileError, match=r"two.jsonl line 2 has keys \['ids', 'n'\]; choose"):
        read_lengths(two)
    assert read_lengths(two, "n").tolist() == [3]
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"n": 3}\n{"m": 5}\n')
    with pytest.raises(LengthFileError, match=r"line 2: unknown column 'n'.*only key of line 1"):
        read_lengths(odd)


def test_a_file_of_one_length_per_line_is_parsed_whole(tmp_path, monkeypatch):
    # NOTE [ One length per line ]: split per line it held ~400 bytes a length (788 MB for 2 M)
    import bucketloader.cli.files as cli_files

    p = tmp_path / "l.txt"
    np.savetxt(p, LENGTHS, fmt="%d")
    real = cli_files._parse_text
    monkeypatch.setattr(cli_files, "_parse_text", None)  # (not called: parsed whole)
    assert read_lengths(p).tolist() == read_lengths(p, 0).tolist() == LENGTHS
    monkeypatch.setattr(cli_files, "_parse_text", real)
    for text, error in (  # anything else is read (or named by its line) as before
        ("5 6\n\n", "has 2 whitespace-separated columns"),
        ("3\n-4\n", "line 2: lengths must be non-negative"),
        ("3\n\n7.5\n", "line 3: expected a whole number"),
    ):
        p.write_text(text)
        with pytest.raises(LengthFileError, match=error):
            read_lengths(p)
    p.write_text("# n\n3\n\n1e3\n")
    assert read_lengths(p).tolist() == [3, 1000]


def test_arrow_formats(files):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"n": LENGTHS, "ids": [list(range(x)) for x in LENGTHS]})
    pq.write_table(table, files / "t.parquet")
    assert read_lengths(files / "t.parquet", "ids").tolist() == LENGTHS
    assert read_lengths(files / "t.parquet", "n").tolist() == LENGTHS
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"ids": [list(range(x)) for x in LENGTHS]}).save_to_disk(
        str(files / "saved")
    )
    assert read_lengths(files / "saved", "ids").tolist() == LENGTHS
    assert read_lengths(files / "saved").tolist() == LENGTHS  # the only column
    with pytest.raises(LengthFileError, match="unknown column 'nope'"):
        read_lengths(files / "saved", "nope")
    with pytest.raises(LengthFileError, match="unknown column 'nope'"):
        read_lengths(files / "t.parquet", "nope")
    from bucketloader.cli import main

    assert main(["report", str(files / "saved"), "-k", "2"]) == 0  # (not read as Parquet shards)
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"ids": [[1, 2]]})})
    splits.save_to_disk(str(files / "splits"))
    with pytest.raises(LengthFileError, match=r"holds a DatasetDict with splits \['train'\]; "):
        read_lengths(files / "splits", "ids")
    # s28: a null named a fix of Python's only ("or pass fn= to measure them")
    datasets.Dataset.from_dict({"n": [3, None]}).save_to_disk(str(files / "holes"))
    with pytest.raises(LengthFileError) as info:
        read_lengths(files / "holes", "n")
    assert "has a null at physical row 1; fill or filter" in str(info.value)
    assert "fn=" not in str(info.value) and "then save it again" in str(info.value)


def test_default_lengths_match_the_shared_copy(librispeech):
    assert np.array_equal(default_lengths(), librispeech)


def test_report_end_to_end(tmp_path, files):
    out = run(
        tmp_path,
        "report",
        str(files / "t.csv"),
        "--column",
        "n",
        "-k",
        "2",
        "4",
        "--batch-size",
        "4",
        "--plot",
        str(tmp_path / "r.png"),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    assert "samples 12 | distinct lengths 9 | min 3 | median 9 | max 40" in out.stdout
    assert "dynamic padding (random batches of 4" in out.stdout
    assert "recommended (*)" in out.stdout and "rule:" in out.stdout
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    body = json.loads((tmp_path / "r.json").read_text())
    optimal4 = next(r for r in body["rows"] if r["strategy"] == "optimal" and r["num_buckets"] == 4)
    assert optimal4["boundaries"] == compute_boundaries(LENGTHS, 4).tolist()


def test_precompute_miss_then_hit_and_shapes_match_the_sampler(tmp_path, files):
    torch = pytest.importorskip("torch")  # noqa: F841  (the sampler needs it)
    from bucketloader.sampler import BucketSampler

    args = ["precompute", str(files / "one.txt"), "--strategy", "optimal", "-k", "3"]
    first = run(tmp_path, *args, "--max-tokens", "100", "--json", str(tmp_path / "p.json"))
    assert first.returncode == 0, first.stderr
    assert "cache: miss" in first.stdout
    second = run(tmp_path, *args, "--max-tokens", "100", "--cache-dir", str(tmp_path / "cache"))
    assert second.returncode == 0 and "cache: hit" in second.stdout
    body = json.loads((tmp_path / "p.json").read_text())
    want = compute_boundaries(LENGTHS, 3).tolist()
    assert body["solution"]["boundaries"] == want
    assert f"boundaries: {want}" in first.stdout
    sampler = BucketSampler(LENGTHS, num_buckets=3, max_tokens=100)
    assert [tuple(s) for s in body["shapes"]] == sampler.shapes
    assert Path(body["cache_entry"]).exists()
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def test_samples_of_length_0_are_warned_about_by_report_and_precompute(tmp_path, capsys):
    """s28-user: precompute planned a (2, 0) shape for samples of length 0 without a word, where
    report (and the samplers) warn with the count and the fix (NOTE [ Samples of length 0 ])."""
    from bucketloader.cli.main import main

    data = tmp_path / "zeros.txt"
    data.write_text("0\n0\n5\n6\n7\n")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for argv in (
        ["report", str(data), "-k", "2"],
        ["precompute", str(data), "-k", "2", "--batch-size", "2", *cache],
    ):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\nwarning: 2 of 5 samples of length 0: each is a real row" in out, argv
    data.write_text("4\n5\n6\n7\n")
    assert main(["precompute", str(data), "-k", "2", *cache]) == 0
    assert "length 0" not in capsys.readouterr().out


def test_the_json_outputs_carry_the_length_0_warning(tmp_path, capsys):
    """s31-user2: `report --json` (and `precompute --json`) wrote no word of samples of length 0,
    which the text prints as a warning: a script reading the JSON did not learn of them. Each
    JSON now has "zero_length": {"count", "message"} (the printed warning; None for none)."""
    import json

    from bucketloader.cli.main import main

    data = tmp_path / "zeros.tsv"
    data.write_text("src\ttgt\n0\t3\n0\t4\n5\t0\n6\t2\n7\t3\n")
    cache = ["--cache-dir", str(tmp_path / "cache")]
    out = str(tmp_path / "out.json")
    for argv, count in (
        (["report", str(data), "--column", "src", "-k", "2"], 2),
        (["precompute", str(data), "--column", "tgt", "-k", "2", *cache], 1),
        (
            [
                "precompute",
                str(data),
                "--column",
                "src,tgt",
                "--max-shapes",
                "2",
                "--batch-size",
                "2",
                *cache,
            ],
            3,
        ),
    ):
        assert main([*argv, "--json", out]) == 0
        said = json.loads(Path(out).read_text())["zero_length"]
        text = capsys.readouterr()
        assert said["count"] == count, argv
        assert said["message"].startswith(f"{count} of 5 samples of length 0: each is"), argv
        assert said["message"] in text.out + text.err, argv  # (the words the text prints)
    data = tmp_path / "none.txt"
    data.write_text("4\n5\n6\n7\n")
    for argv in (["report", str(data), "-k", "2"], ["precompute", str(data), "-k", "2", *cache]):
        assert main([*argv, "--json", out]) == 0
        assert json.loads(Path(out).read_text())["zero_length"] == {"count": 0, "message": None}
    capsys.readouterr()


def test_precompute_a_joint_plan_that_the_sampler_reads(tmp_path, capsys):
    """s27: a joint plan (source and target lengths, K cells) was precomputed only from Python;
    `--column src,tgt --max-shapes K` solves and stores what BucketSampler(pairs,
    max_shapes=K, ...) with the same options reads, and says the plan's bound and gap."""
    from conftest import load_real

    from bucketloader import BucketSampler
    from bucketloader.cache import BucketCache
    from bucketloader.cli.main import main

    pairs = load_real("multi30k")[:3000]
    data = tmp_path / "pairs.tsv"
    data.write_text("src\ttgt\n" + "".join(f"{a}\t{b}\n" for a, b in pairs))
    cache, out = tmp_path / "cache", tmp_path / "plan.json"
    cache.mkdir()
    args = ["precompute", str(data), "--column", "src,tgt", "--max-shapes", "6"]
    args += ["--max-tokens", "1024", "--cache-dir", str(cache)]
    assert main([*args, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cache: miss; stored in" in printed and "6 cells, padding" in printed
    assert "certified bound" in printed
    body = json.loads(out.read_text())
    assert body["columns"] == ["src", "tgt"] and body["joint"][0]["cells"] == 6
    reader = BucketCache(cache)
    sampler = BucketSampler(pairs, max_shapes=6, max_tokens=1024, cache=reader)
    assert reader.hits >= 1  # the sampler solved nothing
    assert [tuple(s) for s in body["shapes"]] == sampler.shapes
    assert main(args) == 0 and "cache: hit" in capsys.readouterr().out
    # one clear line for what does not fit a joint plan, before any reading or solving
    for bad, said in [
        (["--column", "src", "--max-shapes", "4"], "name their columns, --column src,tgt"),
        (["--column", "src,tgt", "-k", "4"], "needs --max-shapes K (the number of cells)"),
        (
            ["--column", "src,tgt", "--max-shapes", "4", "--engine", "ray", "--batch-size", "4"],
            "--engine ray reads Pa",
        ),
        # s28: read (or the shards scanned), then the sampler's "got batch_size=None and
        # max_tokens=None", naming no flag
        (["--column", "src,tgt", "--max-shapes", "4"], "pass --max-tokens T or --batch-size B"),
        (["--column", "src,src", "--max-shapes", "4"], "must name distinct columns"),
        (["--column", "src", "--size", "prod", "-k", "3"], "--size prod sizes a joint plan's"),
    ]:
        assert main(["precompute", str(tmp_path / "gone.tsv"), *bad]) == 2, bad
        assert said in capsys.readouterr().err, bad
    # ... and, after the read, a batch rule that no device or no bucket holds, in the flags
    # (s29: "batch_size=10**20 ...; lower batch_size", "Raise max_tokens ... TokenBudget(...)")
    for bad, said in [
        (["--batch-size", str(10**20)], f"error: --batch-size {10**20} plans batches of shape"),
        (["--max-tokens", str(2**62)], "any device can hold; lower --max-tokens\n"),
        (["--max-tokens", "20"], "error: --max-tokens 20 is below the padded size "),
        (["--max-tokens", "20"], ". Raise --max-tokens to at least "),
    ]:
        assert (
            main(["precompute", str(data), "--column", "src,tgt", "--max-shapes", "4", *bad]) == 2
        )
        err = capsys.readouterr().err
        assert said in err and "_" not in err.split("error: ")[1].split(" of shape")[0], err
    assert main(["report", str(data), "--column", "src,tgt"]) == 2  # (it said unknown column)
    assert "report measures one column" in capsys.readouterr().err


def test_every_budget_error_of_a_joint_precompute_names_the_flags(tmp_path, capsys):
    """s29-left left it: the CLI rewrote four known texts by pattern, and a joint plan's other
    budget errors named Python options ("max_tokens=299 leaves no plan of max_shapes=2 cells
    ... Pass max_shapes=3 or more, or raise max_tokens"). The errors now say themselves in the
    caller's words (OptionError): the flags, and no fix the command line has no flag for."""
    from conftest import load_real

    from bucketloader.cli.main import main

    pairs = load_real("gsm8k")[:2000]
    data = tmp_path / "pairs.tsv"
    data.write_text("src\ttgt\n" + "".join(f"{a}\t{b}\n" for a, b in pairs))
    args = ["precompute", str(data), "--column", "src,tgt", "--cache-dir", str(tmp_path)]
    for bad, said in [
        (
            ["--max-shapes", "2", "--max-tokens", "299"],
            "--max-tokens 299 leaves no plan of --max-shapes 2 cells: a cell pads every input "
            "to the longest of its samples there, and covering every sample takes at least 3 "
            "cells within --max-tokens. Pass --max-shapes 3 or more, or raise --max-tokens\n",
        ),
        (
            ["--max-shapes", "2", "--max-tokens", "200"],
            "error: --max-tokens 200 is below the padded size 363 of the largest bucket; its "
            "longest sample is index 399 with length {'src': 141, 'tgt': 158}. Raise "
            "--max-tokens to at least 363\n",
        ),
    ]:
        assert main([*args, *bad]) == 2
        err = capsys.readouterr().err
        assert said in err and "_" not in err.split("error: ")[1], err
    # the same errors in Python name the keywords and every fix
    from bucketloader import BucketSampler

    with pytest.raises(ValueError, match=r"max_tokens=299 leaves no plan of max_shapes=2 cells"):
        BucketSampler(pairs, max_shapes=2, max_tokens=299)
    with pytest.raises(ValueError, match=r"filter the longest samples \(max_length=\.\.\., "):
        BucketSampler(pairs, max_shapes=2, max_tokens=200)


def test_a_joint_plan_without_scipy_names_the_flag_that_solves_without_it(
    tmp_path, capsys, monkeypatch
):
    """s28-rev: without SciPy, precompute --max-shapes said the solver's fix as a sampler's user
    passes it ("pass exact=False (strategy=Joint(exact=False) to a sampler: ..."), which the
    command line has no place for; it says --option exact=False, and that solves."""
    from bucketloader.cli.main import main

    data = tmp_path / "pairs.tsv"
    data.write_text("src\ttgt\n3\t4\n4\t3\n10\t12\n12\t10\n11\t11\n")
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    args = ["precompute", str(data), "--column", "src,tgt", "--max-shapes", "2"]
    args += ["--batch-size", "2", "--cache-dir", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "pip install 'scipy>=1.11', or pass --option exact=False (the search and its" in err
    assert "Joint(" not in err and err.count("\n") == 1, err
    assert main([*args, "--option", "exact=False"]) == 0
    assert "2 cells, padding" in capsys.readouterr().out


def _bad_cases(tmp_path: Path, files: Path) -> dict[str, tuple[list[str], str]]:
    d = tmp_path / "bad"
    d.mkdir()
    (d / "frac.txt").write_text("4\n5\n3.5\n7\n")
    (d / "word.txt").write_text("4\nfive\n")
    (d / "neg.txt").write_text("4\n5\n6\n-2\n")
    (d / "empty.txt").write_text("")
    (d / "blank.txt").write_text("\n\n  \n")
    (d / "ragged.txt").write_text("4\t5\n6\n")
    (d / "bad.csv").write_text("n\n4\n5\nx\n")
    (d / "gap.csv").write_text("id,n\na,4\nb,\nc,5\n")  # (a missing value)
    (d / "nohdr.csv").write_text("4\n5\n6\n")  # np.savetxt(path, lengths, fmt="%d")
    (d / "hdr.txt").write_text("length\n4\n5\n")
    np.savetxt(d / "floats.csv", [512, 7, 9])  # (its default fmt: 5.120000000000000000e+02)
    (d / "bad.jsonl").write_text('{"n": 4}\n{"n": 5\n')
    (d / "strs.jsonl").write_text('{"n": "a"}\n')
    (d / "null.jsonl").write_text('{"n": 3}\n{"n": null}\n')
    np.save(d / "strs.npy", np.array(["3", "4"]))
    (d / "lengths.xyz").write_text("4\n")
    np.save(d / "objects.npy", np.array([[1], "x"], dtype=object), allow_pickle=True)
    (d / "notads").mkdir()
    (d / "file").write_text("x")
    (d / "huge.txt").write_text(f"5\n{2**70}\n")
    (d / "huge.csv").write_text(f"n\n5\n{2**63}\n")
    (d / "huge.jsonl").write_text('{"n": 5}\n{"n": 1e400}\n')
    (d / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    one, two = str(files / "one.txt"), str(files / "two.txt")
    pre = ["precompute", one, "-k", "2"]
    return {
        "missing file": (["report", str(d / "nope.txt")], "no such file"),
        "unknown csv column": (["report", str(files / "t.csv"), "--column", "x"], "unknown column"),
        "unknown txt column": (["report", two, "--column", "5"], "column 5 does not exist"),
        "txt column not an index": (["report", two, "--column", "n"], "must be an index"),
        "two columns, none chosen": (["report", two], "choose one with --column"),
        "fraction": (["report", str(d / "frac.txt")], "line 3: expected a whole number, got '3.5'"),
        "word": (["report", str(d / "word.txt")], "line 2: expected a non-negative integer"),
        "negative": (["report", str(d / "neg.txt")], "line 4: lengths must be non-negative"),
        "empty file": (["report", str(d / "empty.txt")], "holds no lengths"),
        "blank file": (["report", str(d / "blank.txt")], "holds no lengths"),
        "ragged": (["report", str(d / "ragged.txt"), "--column", "0"], "line 2: expected 2"),
        "csv bad value": (["report", str(d / "bad.csv"), "--column", "n"], "line 4"),
        "csv empty cell": (  # (s28: "expected a non-negative integer, got ''")
            ["report", str(d / "gap.csv"), "--column", "n"],
            "line 3: an empty field where a length belongs (a missing value); fill in",
        ),
        "csv without header": (["report", str(d / "nohdr.csv")], "['4'] holds numbers, not"),
        "csv of floats without header": (["report", str(d / "floats.csv")], "e+02'] holds numbers"),
        "txt with a header": (["report", str(d / "hdr.txt")], "'length'; a .txt file has no h"),
        "jsonl bad line": (["report", str(d / "bad.jsonl"), "--column", "n"], "line 2: not valid"),
        "jsonl strings": (["report", str(d / "strs.jsonl"), "--column", "n"], "ints) or lists"),
        "jsonl null": (  # (s28: "must hold lengths (ints) or lists, got None")
            ["report", str(d / "null.jsonl"), "--column", "n"],
            "line 2: column 'n' is null (a missing value, no length); fill in",
        ),
        "npy of strings": (  # (s28: the fix was "strs.npy = [int(x) for x in strs.npy]")
            ["report", str(d / "strs.npy")],
            "holds strings (numpy dtype <U1), e.g. '3', not integer lengths; save the lengths",
        ),
        "unknown suffix": (["report", str(d / "lengths.xyz")], "unknown file type '.xyz'"),
        "pickled npy": (["report", str(d / "objects.npy")], "not a readable .npy"),
        "not a saved dataset": (["report", str(d / "notads")], "save_to_disk"),
        "unknown strategy": ([*pre, "--strategy", "magic"], "strategy must be one of"),
        "unknown report strategy": (["report", one, "--strategy", "magic"], "must be one of"),
        "k zero": (["report", one, "-k", "0"], "num_buckets must be an int >= 1"),
        "precompute k zero": (["precompute", one, "-k", "0"], "num_buckets must be an int >= 1"),
        "bad cost": ([*pre, "--cost", "cubic"], "--cost: cost must be one of"),
        "multiple of zero": (  # (s25-user: each flag named as typed)
            [*pre, "--pad-to-multiple-of", "0"],
            "--pad-to-multiple-of: pad_to_multiple_of must be an int >= 1",
        ),
        "max tokens too small": ([*pre, "--max-tokens", "10"], "raise --max-tokens to at least 40"),
        "both batch options": ([*pre, "--max-tokens", "99", "--batch-size", "2"], "not allowed"),
        "k missing": (["precompute", one], "precompute needs -k/--num-buckets K"),
        "not an int": (["report", one, "-k", "four"], "invalid int value"),
        "plot unwritable": (["report", one, "--plot", str(d / "file" / "x.png")], "file"),
        "plot in a missing directory": (  # (was created silently; s10-user)
            ["report", one, "--plot", str(d / "typo" / "sub" / "x.png")],
            f"the directory {d / 'typo' / 'sub'} does not exist (nothing creates it); create it "
            f"first (mkdir -p {d / 'typo' / 'sub'})",
        ),
        "json in a missing directory": (
            [*pre, "--json", str(d / "typo" / "x.json")],
            f"--json {d / 'typo' / 'x.json'}: the directory {d / 'typo'} does not exist",
        ),
        "demo plot in a missing directory": (
            ["demo", "--plot", str(d / "typo" / "demo.png")],
            "does not exist (nothing creates it)",
        ),
        "a glob of lengths files": (
            ["report", str(files / "*.txt")],
            f"the glob {files / '*.txt'} matches 2 lengths files ({files / 'one.txt'}, "
            f"{files / 'two.txt'}), but a glob or a directory names Parquet shards; pass one "
            f"lengths file at a time (bucketloader report {files / 'one.txt'})",
        ),
        "a directory of neither shards nor a saved dataset": (
            ["report", str(files)],
            f"{files}: the directory holds no Parquet file; it holds 6 other files: one.npy, "
            "one.txt, t.csv, t.jsonl, t.tsv, ...; a directory is read as the Parquet files",
        ),
        "plot not an image": (["report", one, "--plot", str(d / "x.txt")], "must name an image"),
        "json is a directory": (["report", one, "--json", str(d)], "must name a file"),
        "json is the input": (["report", one, "--json", one], "is the input file, which the"),
        "precompute json is the input": ([*pre, "--json", one], "is the input file"),
        "json is a shard of the glob": (  # (replaced the shard; s8-rev1)
            ["report", str(files / "*.csv"), "--json", str(files / "t.csv")],
            "is one of the files the input",
        ),
        "json is the plot": (
            ["report", one, "--json", str(d / "r.png"), "--plot", str(d / "r.png")],
            "name the same file",
        ),
        "cache dir empty": ([*pre, "--cache-dir", ""], "--cache-dir must be a folder, got"),
        "demo batch of 37 GiB": (  # (s29: it said "batch_size=100000 ... batch_size=2734")
            ["demo", "--batch-size", "100000"],
            "error: --batch-size 100000 makes demo batches of up to 100,000 x 1227 frames x 80 "
            "features, 36.6 GiB of float32 each; use at most --batch-size 2734",
        ),
        "demo no batch": (["demo", "--max-batches", "0"], "--max-batches: max_batches must be"),
        "demo k zero": (["demo", "-k", "0"], "-k/--num-buckets: num_buckets must be an int >= 1"),
        "length 2**70": (["report", str(d / "huge.txt")], "line 2: lengths must be < 2**62"),
        "csv length 2**63": (["report", str(d / "huge.csv")], "line 3: lengths must be < 2**62"),
        "jsonl 1e400": (["report", str(d / "huge.jsonl"), "--column", "n"], "must be < 2**62"),
        "jsonl nested": (["report", str(d / "deep.jsonl"), "--column", "n"], "nested too deep"),
        "batch size zero": ([*pre, "--batch-size", "0"], "--batch-size: batch_size must be an"),
        "a batch no device holds": (  # (s29: "batch_size=10**20 ...; lower batch_size")
            [*pre, "--batch-size", str(10**20)],
            f"error: --batch-size {10**20} plans batches of shape ({10**20}, ",
        ),
        "a budget no device holds": (  # (and "lower max_tokens, or ... TokenBudget(...)")
            [*pre, "--max-tokens", str(2**62)],
            "padded elements, more than the 1099511627776 (2**40) any device can hold; lower "
            "--max-tokens",
        ),
        "max tokens past int64": (  # (s28-user: the flag was not named)
            [*pre, "--max-tokens", str(2**64)],
            "--max-tokens: max_tokens must be an int >= 1 and <= 9223372036854775807",
        ),
        "no command": ([], ""),
    }


#: The bad inputs the issue names, run through the real console script (all at once: each is a
#: short-lived process that mostly waits on imports). The rest run in-process through main().
SUBPROCESS_CASES = (
    "missing file",
    "length 2**70",
    "unknown csv column",
    "fraction",
    "negative",
    "empty file",
    "unknown strategy",
    "max tokens too small",
    "k missing",
    "no command",
)


def _check_failure(name: str, code: int, stdout: str, stderr: str, want: str) -> None:
    assert code == 2, (name, stdout, stderr)
    assert "Traceback" not in stderr, (name, stderr)
    if name == "no command":
        assert "usage:" in stdout
        return
    lines = [x for x in stderr.strip().splitlines() if not x.startswith("solving (")]
    assert len(lines) == 1 and lines[0].startswith("bucketloader: error: "), (name, stderr)
    assert want in lines[0], (name, lines[0])


def test_a_reader_that_stops_early_is_no_error(tmp_path, files):
    # `bucketloader precompute ... | head`: the pipe's reader is gone before the first write
    read, write = os.pipe()
    os.close(read)
    args = ["precompute", str(files / "one.txt"), "-k", "3"]
    try:
        proc = subprocess.run(
            _cmd(*args), stdout=write, stderr=subprocess.PIPE, text=True, env=_env(tmp_path),
            timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")  # 128 + SIGPIPE, as git, nothing told
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1  # what was asked is done


class _ClosedAfter:
    """A standard output whose reader leaves after its first write (``| head -1``) and that runs
    unbuffered (``PYTHONUNBUFFERED=1``): the next write raises BrokenPipeError."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        if self.writes > 1:
            raise BrokenPipeError(32, "Broken pipe")
        return len(text)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise OSError("no file descriptor")


@pytest.mark.parametrize("command", ["precompute", "report"])
def test_a_reader_that_stops_early_still_gets_the_json_written(
    tmp_path, files, monkeypatch, command
):
    # `bucketloader precompute ... --json out.json | head -1` under PYTHONUNBUFFERED=1 exited
    # 141 with no out.json: the first print past the reader came before the file was written
    from bucketloader.cli import main

    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "stdout", _ClosedAfter())
    out = tmp_path / "out.json"
    args = [command, str(files / "one.txt"), "-k", "3", "--json", str(out)]
    assert main(args) == 141
    assert json.loads(out.read_text())  # the file asked for, whole


def test_ctrl_c_is_one_line_and_status_130_not_a_traceback(tmp_path, files, capsys, monkeypatch):
    import bucketloader.cli.files as cli_files
    from bucketloader.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_files, "read_lengths", interrupted)
    try:
        status = main(["report", str(files / "one.txt")])
    except KeyboardInterrupt:  # (caught: it would stop the whole test run)
        pytest.fail("Ctrl-C escaped main(): the command printed a traceback")
    assert status == 130  # 128 + SIGINT, as a shell reports it
    assert capsys.readouterr().err == "\nbucketloader: interrupted\n"


def test_bad_inputs_exit_2_with_one_clear_line_in_a_real_process(tmp_path, files):
    cases = _bad_cases(tmp_path, files)
    env = _env(tmp_path)
    procs = {
        name: subprocess.Popen(
            _cmd(*cases[name][0]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in SUBPROCESS_CASES
    }
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        _check_failure(name, proc.returncode, stdout, stderr, cases[name][1])


def test_every_bad_input_exits_2_with_one_clear_line(tmp_path, files, capsys, monkeypatch):
    from bucketloader.cli import main

    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "cache"))
    inputs = {p: p.read_bytes() for p in files.iterdir() if p.is_file()}
    for name, (args, want) in _bad_cases(tmp_path, files).items():
        code = main(args)
        out = capsys.readouterr()
        _check_failure(name, code, out.out, out.err, want)
    assert inputs == {p: p.read_bytes() for p in inputs}  # (--json one.txt replaced it; s8-polish)


def test_bad_options_fail_before_any_work(tmp_path, files, capsys):
    """precompute validates every option before it reads, solves or writes the cache."""
    from bucketloader.cli import main

    cache = tmp_path / "cache"
    one = str(files / "one.txt")
    bads = [
        ["--batch-size", "0"],
        ["--max-tokens", "-1"],
        ["--pad-to-multiple-of", "0"],
        ["--cost", "cubic"],
        ["--max-tokens", "39"],
        ["--json", str(tmp_path)],
        ["--option", "max_values"],  # (NAME=VALUE)
        ["--option", "max_values=9"],  # (not an option of strategy 'optimal')
        ["--option", "cost=quadratic"],  # (its own flag)
        ["--strategy", "lp", "--option", "max_values=9", "--option", "max_values=8"],
    ]
    bads += [  # s23: a strategy's option values, before the lengths are read
        ["--strategy", "lp", "--option", "time_limit=-1"],
        ["--strategy", "lp", "--option", "solver='nope'"],
    ]
    for bad in bads:
        assert main(["precompute", one, "-k", "2", "--cache-dir", str(cache), *bad]) == 2, bad
        assert "solving" not in capsys.readouterr().err
        assert not cache.exists(), bad  # no solve, no entry written
    # ... and before the lengths are read (an engine's scan can take minutes): an input that
    # does not exist is not what the error names, the flag and its value are
    gone = str(tmp_path / "gone.txt")
    for bad, said in [
        (["-k", "0"], "-k/--num-buckets: num_buckets must be an int >= 1"),
        (["-k", "2", "--strategy", "nope"], "--strategy: strategy must be one of"),
        (["-k", "2", "--strategy", "lp", "--option", "time_limit=-1"], "--option time_limit=-1"),
        # session 23: 'joint' was "not one of" the names, with no word of where it runs; s27:
        # it runs here, over several columns
        (["-k", "2", "--strategy", "joint"], "--column A,B --max-shapes K"),
    ]:
        assert main(["precompute", gone, "--cache-dir", str(cache), *bad]) == 2, bad
        assert said in capsys.readouterr().err, bad
    for bad, said in [
        (["-k", "4", "0"], "-k/--num-buckets: num_buckets must be an int >= 1"),
        (["--strategy", "nope"], "--strategy: strategy must be one of"),
        (["--batch-size", "0"], "--batch-size: batch_size must be an int >= 1"),
        (["--padding-target", "-1"], "--padding-target: padding_target must be a number"),
    ]:
        assert main(["report", gone, *bad]) == 2, bad
        assert said in capsys.readouterr().err, bad
    # s19: a strategy's own options from the command line (the LP's coarsening warning says
    # "raise max_values", which the CLI could not)
    lp = ["--strategy", "lp", "--option", "max_values=3", "--option", "warm_start=False"]
    out = tmp_path / "lp.json"
    assert (
        main(["precompute", one, "-k", "2", "--cache-dir", str(cache), *lp, "--json", str(out)])
        == 0
    )
    params = json.loads(out.read_text())["solution"]["params"]
    assert (params["max_values"], params["warm_start"]) == (3, False)
    assert "max_values=3" in capsys.readouterr().err  # (the warning, one line)
    # the check of --option values runs the strategy on three lengths: its warnings are not the
    # data's (s23-rev: "lp: 3 distinct lengths exceed max_values=2" printed by Python)
    lp = ["--strategy", "lp", "--option", "max_values=2"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["precompute", one, "-k", "2", "--cache-dir", str(cache), *lp]) == 0
    said = [str(w.message) for w in caught] + [capsys.readouterr().err]
    assert not any("3 distinct lengths" in x for x in said), said


def test_report_plot_of_a_single_distinct_length(tmp_path):
    """Pre-packed 512-token blocks: no padding at any k; the plot is drawn on a linear scale."""
    path = tmp_path / "blocks.txt"
    path.write_text("512\n" * 200)
    from bucketloader.cli import main

    assert main(["report", str(path), "--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_module_entry_point_and_help(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bucketloader.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "report" in out.stdout and "precompute" in out.stdout


_NO_TORCH = r"""
import sys
import bucketloader
from bucketloader.cli import main
for argv in (["--help"], ["report", "--help"], ["precompute", "--help"], ["demo", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
assert "torch" not in sys.modules, "--help imported torch"
from bucketloader.histogram import LengthHistogram
assert bucketloader.LengthHistogram is LengthHistogram and "BucketSampler" in dir(bucketloader)
assert bucketloader.plan.BucketSpec is bucketloader.BucketSpec  # subpackages on first access
assert "torch" not in sys.modules
print("ok")
"""


def test_help_and_import_leave_torch_unimported():
    """``bucketloader --help`` took ~2 CPU s importing torch (NOTE [ Lazy public names ])."""
    out = subprocess.run(
        [sys.executable, "-c", _NO_TORCH], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.endswith("ok\n"), out.stderr[-2000:]


@pytest.mark.slow
def test_demo_runs_on_the_shipped_data(tmp_path, capsys, monkeypatch):
    """In this process (``main(argv)``, as the console script calls it): a subprocess would add
    only its interpreter start and imports (~3 CPU-s); the script itself is run for real by
    the report, precompute and bad-input tests above, ``python -m`` by the entry-point test."""
    pytest.importorskip("matplotlib")
    from bucketloader.cli import main

    monkeypatch.chdir(tmp_path)  # the shipped data is found from any directory
    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "cache"))
    code = main(["demo", "--max-batches", "2", "--plot", str(tmp_path / "demo.png")])
    out = capsys.readouterr()
    assert code == 0, out.err
    text = out.out
    assert "28,539 utterances, 100.6 h of 16 kHz audio" in text and "recommended (*)" in text
    assert "bucketloader, optimal k=16" in text and "all planned" in text
    assert "dynamic padding, batch 32" in text
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the report has a column for the demo's own k; the closing line says the table's figures
    assert re.search(r"strategy +k=4 +k=8 +k=16 +k=32\n", text)
    ours, rule = (
        float(re.search(rf"bucketloader, {name} k=16 +16 +([\d.]+)%", text)[1])
        for name in ("optimal", "percentile")
    )
    assert ours < rule  # (each loader plans with its own strategy)
    summary = f"bucketloader pads {ours:.2f}% with 16 shapes; the percentile rule pads {rule:.2f}%"
    more = re.search(rf"{re.escape(summary)} with 16 \(([\d.]+)x more\)", text)
    assert more and abs(float(more[1]) - rule / ours) < 0.06  # (of the unrounded figures)


def test_demo_without_matplotlib_skips_its_default_plot(tmp_path, capsys, monkeypatch):
    """A core install ('pip install bucketloader', no plot extra): the demo ran to its end,
    then failed on the default plot (exit 2, 'report.plot() needs matplotlib'). It now skips
    the default plot and says how to get it; an explicit --plot is refused before any work."""
    import bucketloader.cli.demo as demo
    from bucketloader.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # 'import matplotlib' fails
    monkeypatch.chdir(tmp_path)
    asked = []
    monkeypatch.setattr(demo, "run_demo", lambda **kw: asked.append(kw["plot"]) or 0)
    assert main(["demo"]) == 0
    assert asked == [None] and not list(tmp_path.iterdir())
    assert "(no plot: pip install 'bucketloader[plot]' to draw" in capsys.readouterr().out
    assert main(["demo", "--plot", "mine.png"]) == 2 and asked == [None]
    err = capsys.readouterr().err
    assert "--plot mine.png needs matplotlib: pip install 'bucketloader[plot]'" in err


def test_a_matplotlib_that_fails_to_import_is_told_before_any_work(
    tmp_path, files, capsys, monkeypatch
):
    """s28-rev: an installed matplotlib whose pyplot fails to import (a missing shared library)
    passed the check ('import matplotlib'), so the demo ran to its end and then failed on its
    default plot (exit 2, "report.plot() needs matplotlib: pip install ...", which changes
    nothing there). The check imports what the plot imports, and the message keeps the cause."""
    import bucketloader.cli.demo as demo
    from bucketloader.cli import main

    pytest.importorskip("matplotlib")
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # (installed, fails to import)
    (here := tmp_path / "here").mkdir()
    monkeypatch.chdir(here)
    asked = []
    monkeypatch.setattr(demo, "run_demo", lambda **kw: asked.append(kw["plot"]) or 0)
    assert main(["demo"]) == 0
    assert asked == [None] and not list(here.iterdir())
    out = capsys.readouterr().out
    assert "(no plot: matplotlib is installed but failed to import (" in out, out
    assert "matplotlib.pyplot" in out and "repair it to draw bucketloader-demo.png)" in out
    for argv in (["demo"], ["report", str(files / "one.txt")]):
        assert main([*argv, "--plot", "mine.png"]) == 2 and asked == [None]
        stdout, err = capsys.readouterr()
        assert stdout == "" and err.startswith(
            "bucketloader: error: --plot mine.png needs matplotlib, which is installed but "
            "failed to import ("
        ), err
        assert err.endswith("): repair its install, or leave out --plot\n"), err


def test_only_a_package_not_installed_is_told_to_be_installed(monkeypatch):
    """s28-rev: every ImportError naming an optional package got "install it with pip install
    'bucketloader[...]'", also from an installed package that fails to import, where installing
    changes nothing; and SciPy, a core dependency now, was sent to the old joint extra."""
    from bucketloader.cli.main import _missing_package

    pytest.importorskip("pyarrow")
    pytest.importorskip("scipy")
    kept = [
        ImportError("cannot import name 'milp' from 'scipy.optimize'", name="scipy.optimize"),
        ModuleNotFoundError("No module named 'pyarrow._parquet'", name="pyarrow._parquet"),
        ImportError("libarrow.so.1400: cannot open shared object file", name="pyarrow.lib"),
        ModuleNotFoundError("No module named 'six'", name="six"),  # (not an optional one)
        ImportError("no name"),  # (exc.name is None)
        ModuleNotFoundError("already says: pip install 'bucketloader[hf]'", name="datasets"),
    ]
    for exc in kept:
        assert _missing_package(exc) == str(exc)
    for name in ("pyarrow", "scipy"):
        monkeypatch.setitem(sys.modules, name, None)  # (not installed)
    told = {
        "pyarrow": "this needs 'pyarrow' (No module named 'pyarrow'); install it with pip "
        "install 'bucketloader[arrow]'",
        "scipy.sparse": "this needs 'scipy' (No module named 'scipy.sparse'); install it with "
        "pip install 'scipy>=1.11'",
    }
    for name, message in told.items():
        assert _missing_package(ModuleNotFoundError(f"No module named {name!r}", name=name)) == (
            message
        )


def test_demo_counts_its_epoch_and_builds_its_batches():
    """The demo's pieces, cheaply: one epoch's distinct shapes and padded / real frames of its
    index batches, the lazy items (seeded by their index) and the dynamic-padding collate
    (batch, time, features)."""
    from bucketloader.cli.demo import SyntheticFeatures, epoch_stats, pad_to_longest

    frames = np.array([3, 5, 4, 2])
    stats = epoch_stats([[0, 1], [2], [3, 0]], frames, lambda n: (n.size, int(n.max())))
    # shapes (2, 5), (1, 4), (2, 3): 10 + 4 + 6 padded frames for 3 + 5 + 4 + 2 + 3 real
    assert stats == {"shapes": 3, "padding": (20 - 17) / 17, "batches": 3}
    data = SyntheticFeatures(frames, dim=2)
    assert len(data) == 4 and data[1]["features"].shape == (5, 2)
    assert data[0]["features"].equal(data[0]["features"])
    assert not data[0]["features"].equal(data[2]["features"][:3])
    batch = pad_to_longest([data[0], data[1]])["features"]
    assert batch.shape == (2, 5, 2) and batch[0, 3:].abs().sum() == 0
    assert batch[1].equal(data[1]["features"])


# -- issue 22, trap 7: what a newcomer's files look like ----------------------------------------
def test_txt_columns_written_by_np_savetxt_are_read(tmp_path):
    table = np.array([[x, 2 * x] for x in LENGTHS])
    np.savetxt(tmp_path / "sp.txt", table, fmt="%d")  # space-separated, the default delimiter
    assert read_lengths(tmp_path / "sp.txt", 1).tolist() == [2 * x for x in LENGTHS]
    with pytest.raises(LengthFileError, match="2 whitespace-separated columns; choose one"):
        read_lengths(tmp_path / "sp.txt")
    with pytest.raises(LengthFileError, match=r"planned jointly in Python: BucketSampler"):
        read_lengths(tmp_path / "sp.txt")  # (session 21: an image's width and height)
    np.savetxt(tmp_path / "tab.txt", table, fmt="%d", delimiter="\t")
    assert read_lengths(tmp_path / "tab.txt", "0").tolist() == LENGTHS


def test_a_2d_npy_is_not_called_tab_separated(tmp_path):
    np.save(tmp_path / "two.npy", np.array([[x, 2 * x] for x in LENGTHS]))
    with pytest.raises(LengthFileError, match=r"columns \(a 2-D array of shape \(12, 2\)\)") as e:
        read_lengths(tmp_path / "two.npy")
    assert "tab" not in str(e.value)


def _entry_taken(tmp_path, text="3\n5\n5\n9\n12\n", *options):
    """``precompute``'s argv over a lengths file of ``text``, and its cache entry, stored once
    and then taken by a directory (the user's: a CacheWarning says a solve is not stored)."""
    from bucketloader.cli import main

    lengths = tmp_path / "l.txt"
    lengths.write_text(text)
    cache = tmp_path / "c"
    argv = ["precompute", str(lengths), "-k", "2", *options, "--cache-dir", str(cache)]
    assert main(argv) == 0
    (entry,) = cache.glob("*.json")
    entry.unlink()
    entry.mkdir()
    return argv, entry


def test_warning_options_of_the_user_decide_what_the_command_prints(tmp_path, capsys, monkeypatch):
    """``precompute`` prints each warning of its solve as one ``bucketloader: warning:`` line;
    under ``PYTHONWARNINGS=ignore`` (or ``-W ignore``) it printed them all the same."""
    from bucketloader.cli import main

    argv, entry = _entry_taken(tmp_path)
    capsys.readouterr()
    assert main(argv) == 2
    assert "bucketloader: warning: cache entry path" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        monkeypatch.setattr(sys, "warnoptions", ["ignore"])
        assert main(argv) == 2  # (what happened is still said: "(not stored)", exit 2)
    out, err = capsys.readouterr()
    assert "(not stored)" in out and "bucketloader: warning" not in err
    assert f"at its entry {entry}; the warning that says why was filtered out by -W" in err


def test_warnings_made_errors_by_the_user_are_one_error_line(tmp_path, capsys, monkeypatch):
    """Under ``-W error`` (``PYTHONWARNINGS=error``) the solve's CacheWarning and a read's
    characters note are raised: ``main`` ended in a traceback (status 1)."""
    from bucketloader.cli import main

    argv, entry = _entry_taken(tmp_path)
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setattr(sys, "warnoptions", ["error"])
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bucketloader: error: cache entry path {entry} is a directory")
    assert "(CacheWarning, an error under -W / PYTHONWARNINGS)" in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_the_not_stored_error_points_at_a_warning_only_when_one_says_why(tmp_path, capsys):
    """With the CacheWarning filtered out but another warning of the solve printed (lp's
    coarsening), the error said "the warning above says why" of a warning that does not."""
    from bucketloader.cache import CacheWarning
    from bucketloader.cli import main

    text = "\n".join(str(x) for x in range(1, 1003)) + "\n"
    argv, entry = _entry_taken(tmp_path, text, "--strategy", "lp")
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        mp.setattr(sys, "warnoptions", ["ignore::bucketloader.cache.CacheWarning"])
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bucketloader: warning: lp: 1002 distinct lengths exceed max_values=1000" in err
    assert "the warning above" not in err
    assert f"at its entry {entry}; the warning that says why was filtered out by -W" in err


def test_a_text_column_says_it_measures_characters(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bucketloader.cli.main import main

    words = ["a" * x for x in LENGTHS]
    pq.write_table(pa.table({"text": words}), tmp_path / "t.parquet")
    with pytest.warns(UserWarning, match="measured in characters, not tokens"):
        assert read_lengths(tmp_path / "t.parquet", "text").tolist() == LENGTHS
    assert main(["report", str(tmp_path / "t.parquet"), "--column", "text", "-k", "2"]) == 0
    assert "bucketloader: note: " in capsys.readouterr().err
    # the file's only column, measured without --column: the same note (it was silent)
    assert main(["report", str(tmp_path / "t.parquet"), "-k", "2"]) == 0
    assert "column 'text' holds text: its lengths are measured in characters" in (
        capsys.readouterr().err
    )
    # a dictionary-encoded text column (a pandas category), now measured: the same note
    pq.write_table(pa.table({"text": pa.array(words).dictionary_encode()}), tmp_path / "d.parquet")
    assert main(["report", str(tmp_path / "d.parquet"), "--column", "text", "-k", "2"]) == 0
    out, err = capsys.readouterr()
    assert "column 'text' holds text: its lengths are measured in characters" in err
    assert "samples 12 |" in out
    # a datasets save_to_disk directory: the same note (it was silent)
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"text": words}).save_to_disk(tmp_path / "saved")
    assert main(["report", str(tmp_path / "saved"), "--column", "text", "-k", "2"]) == 0
    out, err = capsys.readouterr()
    assert "saved column 'text' holds text: its lengths are measured in characters" in err
    assert "samples 12 |" in out


def test_a_csv_with_a_byte_order_mark_reads_by_column_name(tmp_path):
    p = tmp_path / "excel.csv"
    p.write_bytes("\ufeffq,a\n12,40\n7,3\n".encode())  # Excel's "CSV UTF-8" starts with a BOM
    assert read_lengths(p, "q").tolist() == [12, 7]


def test_precompute_under_a_file_fails_before_reading_or_solving(tmp_path, files, capsys):
    """A cache directory that can never exist (a file stands at or above it): precompute's one
    job is the entry, so it stops before the read and the solve (it solved, then failed)."""
    from bucketloader.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    with warnings.catch_warnings():  # one error, no CacheWarning saying it again
        warnings.simplefilter("error")
        code = main(["precompute", str(files / "one.txt"), "-k", "2",
                     "--cache-dir", str(blocker / "cache")])  # fmt: skip
    assert code == 2
    out, err = capsys.readouterr()
    assert "boundaries:" not in out and "were solved" not in err  # (no read, no solve)
    assert "is not usable" in err and "--cache-dir" in err
    assert blocker.read_text() == "mine"


def test_precompute_refuses_max_tokens_below_the_rounded_longest_before_solving(
    tmp_path, files, capsys
):
    """The longest sample's bucket is its length rounded up to --pad-to-multiple-of (40 -> 48):
    --max-tokens 45 fits the sample but not its bucket, and is refused before the solve, so
    nothing reaches the cache."""
    from bucketloader.cli import main

    cache = tmp_path / "cache"
    argv = ["precompute", str(files / "one.txt"), "-k", "2", "--pad-to-multiple-of", "16",
            "--max-tokens", "45", "--cache-dir", str(cache)]  # fmt: skip
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "the bucket length 48 of the longest sample" in err and "at least 48" in err
    assert "boundaries:" not in out and not list(cache.glob("*.json"))


def test_precompute_table_padding_is_over_the_real_elements():
    """The table's padding is (padded - real) / real, the ratio the report and the solution
    use: bucket 4 holds 3 and 4 (1 padded element over 7 real), bucket 10 holds 9, 10, 10."""
    from bucketloader.cli.main import bucket_table

    rows = bucket_table(np.array([3, 4, 9, 10, 10]), [4, 10], 2, None)
    assert [r["padding_ratio"] for r in rows] == [pytest.approx(1 / 7), pytest.approx(1 / 29)]


def test_precompute_table_counts_the_shapes_of_occupied_buckets_only():
    """An empty bucket has no batch and no shape: the table says '-' and the count of planned
    shapes leaves it out (3 buckets, 2 shapes)."""
    from bucketloader.cli.main import bucket_table, format_table

    rows = bucket_table(np.array([3, 4, 9, 10]), [4, 6, 10], 2, None)
    assert [r["shape"] for r in rows] == [[2, 4], None, [2, 10]]
    assert "planned shapes (batch_size=2, last_batch='pad'): 2;" in format_table(rows, 2, None)


def test_report_on_a_hub_layout_reads_the_shards_and_notes_the_rest(tmp_path, capsys):
    """A README.md beside the shards (every Hub download) failed as 'not readable as Parquet',
    and so did any file in a subdirectory (s10-user D4)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bucketloader.cli import main

    d = tmp_path / "hub"
    (d / "data").mkdir(parents=True)
    pq.write_table(pa.table({"length": LENGTHS[:6]}), d / "data" / "train-0.parquet")
    pq.write_table(pa.table({"length": LENGTHS[6:]}), d / "data" / "train-1.parquet")
    (d / "README.md").write_text("---\nlicense: mit\n---\n")
    (d / ".gitattributes").write_text("*.parquet filter=lfs\n")
    want = compute_boundaries(LENGTHS, 3).tolist()
    argv = ["precompute", str(d), "--column", "length", "-k", "3"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 0
    out, err = capsys.readouterr()
    assert f"boundaries: {want}" in out
    assert err.splitlines() == [
        f"bucketloader: note: {d}: read 2 Parquet files; skipped 1 other file (README.md)"
    ]
    glob = str(d / "**" / "*")  # an explicit glob names every file it matches as Parquet
    assert main(["report", glob, "--column", "length", "-k", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bucketloader: error: the glob {glob} matched {d / 'README.md'}, which")
    assert "is not a Parquet file" in err


@pytest.mark.parametrize("option, name", [("--json", "r.json"), ("--plot", "r.png")])
def test_a_full_disk_leaves_the_previous_output_whole(
    tmp_path, files, capsys, monkeypatch, option, name
):
    # write_text / savefig truncated the file first: a rerun on a full disk left the previous
    # report empty, and the error (`[Errno 28] No space left on device`) named no file
    pytest.importorskip("matplotlib")
    from bucketloader.cli import main

    previous = tmp_path / name
    previous.write_bytes(b"the previous report")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["report", str(files / "one.txt"), "-k", "2", option, str(previous)]) == 2
    err = capsys.readouterr().err
    said = {
        "--json": f"--json {previous}: could not write it",
        "--plot": f"--plot: cannot write the plot to {previous}",
    }[option]
    assert f"error: {said} (No space left on device); any file there is left as it was" in err
    assert previous.read_bytes() == b"the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "in"])  # (no temp file)


@pytest.mark.skipif(not Path("/dev/stdout").exists(), reason="needs /dev/stdout")
def test_json_to_a_device_or_pipe_is_written_and_a_private_file_stays_private(
    tmp_path, files, capfd, monkeypatch
):
    # s21-rev: the all-or-nothing write refused what write_text did: '--json /dev/stdout'
    # (resolved to a missing 'pipe:[...]' or a tty) and '--json /dev/null' (a character device),
    # it made a 0600 report 0644 (a new file at 0666 less the umask), and it refused a file the
    # user may write in a folder where they may not create one
    from bucketloader.cli import main

    for device in ("/dev/stdout", "/dev/null"):
        assert main(["report", str(files / "one.txt"), "-k", "2", "--json", device]) == 0
        out, err = capfd.readouterr()
        assert "error" not in err and ('"boundaries"' in out) == (device == "/dev/stdout")
    private = tmp_path / "r.json"
    private.write_text("the previous report")
    private.chmod(0o600)
    assert (
        main(
            [
                "precompute",
                str(files / "one.txt"),
                "-k",
                "2",
                "--json",
                str(private),
                "--cache-dir",
                str(tmp_path / "c"),
            ]
        )
        == 0
    )
    assert json.loads(private.read_text()) and stat.S_IMODE(private.stat().st_mode) == 0o600
    import bucketloader._files as files_module

    def no_new_file(directory):  # (a folder the user may not create a file in)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files_module, "create_temp", no_new_file)
    private.write_text("the previous report")  # (a file they may write: written in place)
    assert main(["report", str(files / "one.txt"), "-k", "2", "--json", str(private)]) == 0
    assert json.loads(private.read_text())


def test_json_under_a_tilde_is_written_in_the_home_directory(tmp_path, files, monkeypatch):
    # its directory was checked with ~ expanded, and the write then failed on '~/r.json' (as
    # --plot and --cache-dir expand it)
    from bucketloader.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BUCKETLOADER_CACHE_DIR", str(tmp_path / "cache"))
    for command in ("report", "precompute"):
        assert main([command, str(files / "one.txt"), "-k", "2", "--json", "~/r.json"]) == 0
        assert json.loads((tmp_path / "r.json").read_text())
        (tmp_path / "r.json").unlink()
    (tmp_path / "one.txt").write_text("3\n5\n")  # an input under ~, and --json naming it
    assert main(["report", "~/one.txt", "-k", "1"]) == 0
    assert main(["report", str(tmp_path / "one.txt"), "--json", "~/one.txt"]) == 2
    assert (tmp_path / "one.txt").read_text() == "3\n5\n"


def test_plot_without_matplotlib_fails_before_any_work(tmp_path, files, capsys, monkeypatch):
    from bucketloader.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (import matplotlib: ImportError)
    out = tmp_path / "r.png"
    assert main(["report", str(files / "one.txt"), "--plot", str(out)]) == 2
    stdout, err = capsys.readouterr()
    assert stdout == ""
    assert err == (
        f"bucketloader: error: --plot {out} needs matplotlib: pip install 'bucketloader[plot]', "
        "or leave out --plot\n"
    )


def test_a_missing_optional_package_names_its_extra(tmp_path, capsys, monkeypatch):
    """A core install reading Parquet shards said only "No module named 'pyarrow'"; a saved
    dataset needs bucketloader.hf (datasets), whose own error names its extra."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bucketloader.cli import main

    pq.write_table(pa.table({"n": [3, 5, 8]}), tmp_path / "a.parquet")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"n": [3, 5, 8]}).save_to_disk(str(tmp_path / "saved"))
    for name in ("pyarrow", "datasets"):
        monkeypatch.setitem(sys.modules, name, None)  # (import: ModuleNotFoundError)
    monkeypatch.delitem(sys.modules, "bucketloader.hf", raising=False)  # (its own error)
    for source, extra in ((str(tmp_path / "*.parquet"), "arrow"), (tmp_path / "saved", "hf")):
        assert main(["report", str(source), "--column", "n"]) == 2
        err = capsys.readouterr().err
        assert f"install it with pip install 'bucketloader[{extra}]'" in err, err


def test_plot_and_json_write_into_existing_directories_only(tmp_path, files, capsys):
    from bucketloader.cli import main

    one = str(files / "one.txt")
    out = tmp_path / "out"
    for option, name in (("--json", "r.json"), ("--plot", "r.png")):
        assert main(["report", one, option, str(out / name)]) == 2
        stdout, err = capsys.readouterr()
        assert stdout == ""  # refused before any work (--json failed after the report)
        assert f"{option} {out / name}: the directory {out} does not exist" in err
        assert not out.exists()  # (--plot made the directory tree of a typo; s10-user)
    out.mkdir()
    assert main(["report", one, "-k", "2", "--json", str(out / "r.json")]) == 0
    assert json.loads((out / "r.json").read_text())["recommended"]
    # s34-user: a file where the directory goes was told "the directory notes is not a
    # directory; create it first (mkdir -p notes)", a fix that fails (the file exists)
    notes = tmp_path / "notes"
    notes.write_text("mine\n")
    for option, path in (("--plot", notes / "r.png"), ("--json", notes / "sub" / "r.json")):
        assert main(["report", one, option, str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{option} {path}: {notes} is a file, not a directory" in err, err
        assert "mkdir" not in err and notes.read_text() == "mine\n"
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        analyze([3, 5, 9], num_buckets=[2]).plot(notes / "r.png")


def test_null_rows_name_the_commands_own_option_and_skipping_them_is_counted(tmp_path, capsys):
    """The null-row error told a command-line user to "pass nulls='skip'", an option only the
    Python API had; ``--nulls skip`` now leaves them out and says how many."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bucketloader.cli import main

    d = tmp_path / "shards"
    d.mkdir()
    pq.write_table(pa.table({"n": pa.array([*LENGTHS[:6], None], pa.int64())}), d / "a.parquet")
    pq.write_table(pa.table({"n": pa.array([None, *LENGTHS[6:]], pa.int64())}), d / "b.parquet")
    assert main(["report", str(d), "--column", "n", "-k", "2"]) == 2
    err = capsys.readouterr().err
    assert "has 2 null row(s) out of 14" in err and "pass --nulls skip" in err
    assert "nulls='skip'" not in err and "ScanResult" not in err
    argv = ["precompute", str(d), "--column", "n", "-k", "3", "--nulls", "skip"]
    assert main([*argv, "--cache-dir", str(tmp_path / "c")]) == 0
    out, err = capsys.readouterr()
    assert f"boundaries: {compute_boundaries(LENGTHS, 3).tolist()}" in out
    assert "--nulls skip left out 2 null row(s) of 14 (14.29%)" in err
    assert main(["report", str(d), "--column", "n", "--nulls", "drop"]) == 2
    assert "--nulls: invalid choice: 'drop'" in capsys.readouterr().err


def test_a_txt_written_by_savetxt_with_a_header_reads_as_np_loadtxt_reads_it(tmp_path, capsys):
    """``np.savetxt(path, lengths, fmt="%d", header="lengths")`` writes ``# lengths`` first:
    the command said the file 'has 2 whitespace-separated columns' (the comment's two words)."""
    from bucketloader.cli import main

    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    np.savetxt(one, LENGTHS, fmt="%d", header="lengths, one per sample")
    np.savetxt(two, np.c_[LENGTHS, LENGTHS], fmt="%d", header="src tgt", comments="# ")
    assert one.read_text().startswith("# lengths")
    assert read_lengths(one).tolist() == np.loadtxt(one, dtype=np.int64).tolist() == LENGTHS
    assert read_lengths(two, 1).tolist() == LENGTHS
    (tmp_path / "inline.txt").write_text("5 # a comment\n# 7\n17\n")
    assert read_lengths(tmp_path / "inline.txt").tolist() == [5, 17]
    assert main(["report", str(one), "-k", "2"]) == 0
    assert "samples 12 |" in capsys.readouterr().out
    (tmp_path / "only.txt").write_text("# nothing but a header\n")
    assert main(["report", str(tmp_path / "only.txt")]) == 2
    assert "holds no lengths" in capsys.readouterr().err


def test_a_csv_of_pandas_numbered_columns_keeps_its_header(tmp_path):
    """``DataFrame(lengths).to_csv(index=False)`` names its column ``0``: a header, while a first
    row of other numbers is data with no header (s19-user), refused."""
    (tmp_path / "pd.csv").write_text("0\n5\n7\n")
    assert read_lengths(tmp_path / "pd.csv").tolist() == [5, 7]
    (tmp_path / "pd2.csv").write_text("0,1\n5,6\n")
    assert read_lengths(tmp_path / "pd2.csv", "1").tolist() == [6]
    (tmp_path / "data.csv").write_text("3,4\n5,6\n")
    with pytest.raises(LengthFileError, match=r"first row \['3', '4'\] holds numbers"):
        read_lengths(tmp_path / "data.csv", "0")


def test_a_csv_written_by_savetxt_with_a_header_names_its_columns(tmp_path):
    """``np.savetxt(path, a, delimiter=",", header="src,tgt")`` writes ``# src,tgt`` first:
    the first column was named ``# src`` (``--column src``: unknown column)."""
    p = tmp_path / "pairs.csv"
    np.savetxt(p, np.c_[LENGTHS, LENGTHS[::-1]], fmt="%d", delimiter=",", header="src,tgt")
    assert p.read_text().startswith("# src,tgt")
    assert read_lengths(p, "src").tolist() == LENGTHS
    assert read_lengths(p, "tgt").tolist() == LENGTHS[::-1]
    (tmp_path / "hash.csv").write_text("#id,n\nu0,5\n")  # (a name that starts with #: kept)
    assert read_lengths(tmp_path / "hash.csv", "n").tolist() == [5]
    with pytest.raises(LengthFileError, match=r"the file has columns \['#id', 'n'\]"):
        read_lengths(tmp_path / "hash.csv", "id")


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_csv_written_by_savetxt_with_header_lines_and_a_footer_reads(tmp_path, suffix):
    """np.savetxt writes each line of ``header=`` and ``footer=`` after ``# ``: a header of
    several lines named the columns by its first (``unknown column 'src'; the file has columns
    ['made by x']``) and a footer was read as a length (``got '# end'``)."""
    p = tmp_path / f"pairs{suffix}"
    sep = "\t" if suffix == ".tsv" else ","
    table = np.c_[LENGTHS, LENGTHS[::-1]]
    np.savetxt(p, table, fmt="%d", delimiter=sep, header=f"made by x\n\nsrc{sep}tgt\n")
    np.savetxt(
        p.with_name(f"f{suffix}"),
        table,
        fmt="%d",
        delimiter=sep,
        header=f"src{sep}tgt",
        footer="end\ntotal 0",
    )
    for path in (p, p.with_name(f"f{suffix}")):
        assert read_lengths(path, "src").tolist() == LENGTHS
        assert read_lengths(path, "tgt").tolist() == LENGTHS[::-1]
    p.write_text(p.read_text().replace(f"\n3{sep}", f"\nx{sep}", 1))  # (the 3rd row)
    with pytest.raises(LengthFileError, match=rf"pairs\{suffix} line 7: .*got 'x'"):
        read_lengths(p, "src")  # (lines keep their numbers)
    (tmp_path / "q.csv").write_text('# made by "x\n# "n"\n5\n')  # (a quote spans no line)
    assert read_lengths(tmp_path / "q.csv").tolist() == [5]


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_precompute_never_claims_an_entry_that_something_else_occupies(tmp_path, capsys, kind):
    """A directory or a symbolic link at the entry's path is the user's (never replaced), so
    nothing is stored; precompute said 'at <path>', exit 0 and "cache_entry" in --json, because
    the path existed."""
    from bucketloader.cli import main

    lengths = tmp_path / "l.txt"
    lengths.write_text("3\n5\n5\n9\n12\n")
    cache = tmp_path / "c"
    argv = ["precompute", str(lengths), "-k", "2", "--cache-dir", str(cache)]
    assert main(argv) == 0
    assert "at " in capsys.readouterr().out
    (entry,) = cache.glob("*.json")
    entry.unlink()
    mine = tmp_path / "mine.txt"
    mine.write_text("precious")
    if kind == "directory":
        entry.mkdir()
    else:
        entry.symlink_to(mine)
    assert main([*argv, "--json", str(tmp_path / "out.json")]) == 2
    out, err = capsys.readouterr()
    assert "(not stored)" in out and f"at {entry}" not in out
    assert f"bucketloader: warning: cache entry path {entry} is a " in err
    assert "solved but not stored" in err and "Traceback" not in err and "store.py" not in err
    assert json.loads((tmp_path / "out.json").read_text())["cache_entry"] is None
    assert mine.read_text() == "precious" and (entry.is_dir() or entry.is_symlink())


@pytest.mark.parametrize("command", ["report", "precompute"])
def test_nulls_on_a_file_that_is_not_parquet_is_refused_not_ignored(tmp_path, capsys, command):
    """``--nulls skip`` was accepted and ignored on a .jsonl / .txt file: the null row was still
    refused, with an error that never said the option had no effect."""
    from bucketloader.cli import main

    (tmp_path / "a.jsonl").write_text('{"n": 3}\n{"n": null}\n{"n": 5}\n')
    k = ["-k", "2", "--cache-dir", str(tmp_path / "c")] if command == "precompute" else []
    argv = [command, str(tmp_path / "a.jsonl"), "--column", "n", *k, "--nulls", "skip"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--nulls skip applies to Parquet shards (a directory of .parquet files, a quoted " in err
    assert f"got {tmp_path / 'a.jsonl'}; leave out --nulls" in err
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").glob("*.json"))


def test_precompute_a_joint_plan_of_parquet_shards(tmp_path, capsys, monkeypatch):
    """s28: a joint plan of Parquet shards (a directory) was refused ("solve it in Python");
    it is read as the one-column precompute reads them (the local engine by default)."""
    from conftest import check_joint_precompute_of_shards

    from bucketloader.cli.main import main

    check_joint_precompute_of_shards(tmp_path, capsys)
    # the pairs are held in memory, as the sampler holds them: past the limit, said at once
    monkeypatch.setattr(sys.modules["bucketloader.cli.main"], "MAX_BASELINE_SAMPLES", 100)
    argv = ["precompute", str(tmp_path / "shards"), "--column", "src,tgt", "--max-shapes", "3"]
    assert main([*argv, "--batch-size", "4", "--nulls", "skip", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "the shards hold 301 samples" in err and "BucketSampler(lengths, max_shapes=K" in err
