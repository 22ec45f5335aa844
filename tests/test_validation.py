"""The one voice for argument errors: every bad input gets one clear message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bucketloader._validation import (
    ALIASES,
    as_lengths,
    check_choice,
    check_float,
    check_int,
    check_options,
    keyword_options,
)


def test_check_int():
    assert check_int("n", np.int32(3), minimum=1) == 3
    with pytest.raises(ValueError, match=r"^batch_size must be an int >= 1, got batch_size=0$"):
        check_int("batch_size", 0, minimum=1)
    with pytest.raises(TypeError, match=r"^n must be an int >= 1, got n=True$"):
        check_int("n", True, minimum=1)
    with pytest.raises(TypeError, match=r"^n must be an int, got n=2.0$"):
        check_int("n", 2.0)
    with pytest.raises(ValueError, match=r"^n must be an int >= 0 and <= 5, got n=6$"):
        check_int("n", 6, minimum=0, maximum=5)


def test_check_float():
    assert check_float("f", 1, minimum=0.0, maximum=1.0) == 1.0
    with pytest.raises(ValueError, match=r"^f must be a number in \[0.0, 1.0\], got f=nan$"):
        check_float("f", float("nan"), minimum=0.0, maximum=1.0)
    with pytest.raises(TypeError, match=r"got f=False"):
        check_float("f", False, minimum=0.0, maximum=1.0)
    with pytest.raises(TypeError, match=r"got f='0.5'"):
        check_float("f", "0.5", minimum=0.0, maximum=1.0)


def test_check_choice_lists_every_option():
    assert check_choice("cost", "linear", ["quadratic", "linear"]) == "linear"
    with pytest.raises(
        ValueError, match=r"^cost must be one of 'linear', 'quadratic', got cost='cubic'$"
    ):
        check_choice("cost", "cubic", ["quadratic", "linear"])


@pytest.mark.parametrize(
    "good",
    [[3, 0, 5], (3, 0, 5), np.array([3, 0, 5], dtype=np.uint16), np.array([3.0, 0.0, 5.0]),
     torch.tensor([3, 0, 5]), [np.int64(3), 0, 5.0]],
)  # fmt: skip
def test_as_lengths_accepts(good):
    out = as_lengths(good)
    assert out.dtype == np.int64 and out.tolist() == [3, 0, 5]


def test_as_lengths_2d_when_allowed():
    assert as_lengths([[1, 2], [3, 4]], ndim=(1, 2)).shape == (2, 2)
    with pytest.raises(ValueError, match=r"must be 1-D or 2-D .*, or \(N, D\)"):
        as_lengths(np.zeros((2, 2, 2), dtype=int), ndim=(1, 2))


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield 3


@pytest.mark.parametrize(
    ("bad", "kind", "message"),
    [
        ([3, -1, 5], ValueError, r"lengths must be non-negative, got -1 at index 1; .*drop or fix"),
        ([3.0, float("nan")], ValueError, r"whole numbers, got nan at index 1; .*drop or fix"),
        (np.array([3, None, 5], dtype=float), ValueError, r"got nan at index 1; .*drop or fix"),
        ([3.0, 2.5], ValueError, r"whole numbers, got 2.5 at index 1; round lengths up"),
        # s30-first: the dataset itself, as torch's samplers take it: a TensorDataset's (x,)
        # items were read as lengths, other datasets read whole through __getitem__
        (
            torch.utils.data.TensorDataset(torch.arange(3)),
            TypeError,
            r"got the dataset itself \(TensorDataset, a torch Dataset\); .*sampler\.dataloader",
        ),
        (torch.utils.data.Subset([[1, 2], [3]], [0, 1]), TypeError, r"itself \(Subset, a torch"),
        # s31-rev: the measure named is the sampler's own, read from the first item: it named
        # len(dataset[i]) for every dataset, the number of fields of an (input, label) item
        (
            torch.utils.data.TensorDataset(torch.zeros(3, 7), torch.zeros(3)),
            TypeError,
            r"lengths = \[len\(dataset\[i\]\[0\]\) for i in range\(len\(dataset\)\)\], ",
        ),
        (
            torch.utils.data.Subset([{"input_ids": [1, 2], "label": 0}], [0]),
            TypeError,
            r"lengths = \[len\(dataset\[i\]\['input_ids'\]\) for i",
        ),
        (
            torch.utils.data.Subset([{"a": [1], "b": [2, 3]}], [0]),
            TypeError,
            r"\[len\(dataset\[i\]\[key\]\) for i in range\(len\(dataset\)\)\] with key one",
        ),
        # s30-first: Lhotse's cut durations were told to np.ceil their seconds (buckets of whole
        # seconds); now the unit a duration goes in, in both paths (array and object array)
        ([1.53, 2.1], ValueError, r"got 1.53 .*np\.ceil\(seconds \* 16_000\)"),
        (np.array([1.53, 2], dtype=object), ValueError, r"got 1.53 .*np\.ceil\(seconds \* 100\)"),
        (
            [4_000.5],
            ValueError,
            r"4000.5 at index 0; round lengths up with np\.ceil before bucketing$",
        ),
        ([1.0, float("inf")], ValueError, r"whole numbers, got inf at index 1; .*drop or fix"),
        (np.array([2, np.nan], dtype=object), ValueError, r"got nan at index 1; .*drop or fix"),
        ([True, False], TypeError, r"must hold integer lengths, got True at index 0; convert"),
        (np.array([True]), TypeError, r"must hold integer lengths, got booleans; .*astype\(int\)"),
        ([[1, 2], (3, False)], TypeError, r"got False at index \(1, 1\)"),
        ([3, True], TypeError, r"must hold integer lengths, got True at index 1"),
        ([3, None], TypeError, r"must hold integer lengths, got None at index 1"),
        ([], ValueError, r"lengths must not be empty, got lengths of shape \(0,\)"),
        ([[1, 2], [3, 4]], ValueError, r"lengths must be 1-D \(one length per sample\)"),
        (5, TypeError, r"lengths must be a list, numpy array or torch tensor .*got int"),
        ("123", TypeError, r"got str"),
        ([[1, 2], [3]], ValueError, r"rectangular array"),
        (
            np.array(["a"]),
            TypeError,
            r"integer lengths, got strings \(numpy dtype <U1\), e.g. 'a' "
            r"at index 0; lengths are numbers: for texts, count their tokens",
        ),
        (np.array([2**64 - 1], dtype=np.uint64), ValueError, r"must be < 2\*\*62, got 1844674"),
        (torch.tensor([1, -2]), ValueError, r"non-negative, got -2 at index 1"),
        # (were "must be 1-D ..., got an array of shape ()": numpy reads them as one object)
        ({3, 5}, TypeError, r"got a set; a set has no order: pass a list in sample order"),
        ({0: 3, 1: 5}, TypeError, r"got a dict; pass a list .*\(list\(lengths\.values\(\)\)"),
        (  # session 21: an image's height and width, as BucketSampler takes them
            {"height": [3, 5], "width": [4, 6]},
            TypeError,
            r"length array per input \['height', 'width'\], .*max_shapes=K",
        ),
        # s19-user: a generator or a stream was named with no way forward
        ((n for n in [3, 5]), TypeError, r"got generator; an iterator .*, list\(lengths\) or np"),
        (_Stream(), TypeError, r"got _Stream; an iterable without len\(\) .*BucketIterable"),
    ],
)
def test_as_lengths_rejects(bad, kind, message):
    with pytest.raises(kind, match=message):
        as_lengths(bad)


def test_as_lengths_names_the_argument_and_2d_index():
    with pytest.raises(ValueError, match=r"^max_tokens must be non-negative, got -3 at index"):
        as_lengths([-3], name="max_tokens")
    with pytest.raises(ValueError, match=r"got -1 at index \(1, 0\)"):
        as_lengths([[1, 2], [-1, 4]], ndim=2)


# -- unknown options: one voice, another library's name suggests ours (s10-user) ---------------


def test_an_unknown_option_suggests_the_alias_or_the_closest_name():
    from bucketloader import BucketSampler

    sampler = BucketSampler([3, 5, 8, 8], num_buckets=2, batch_size=2)
    with pytest.raises(
        TypeError,
        match=r"^BucketSampler\.collator\(\) got an unexpected option padding_side='left'; "
        r"did you mean side=\? \(transformers' padding_side\); its options: fields, group_key, "
        r"mask_dtype, pad_value, side$",
    ):
        sampler.collator(padding_side="left")
    with pytest.raises(TypeError, match=r"drop_last=True; did you mean last_batch=\? \(torch's"):
        BucketSampler([3, 5], num_buckets=2, batch_size=2, drop_last=True)
    # s23-joint: the joint solver's options given to the sampler listed its options only
    with pytest.raises(TypeError, match=r"time_limit=2; did you mean strategy=\? \(the joint pl"):
        BucketSampler([[3, 4], [5, 2]], max_shapes=2, batch_size=2, time_limit=2)
    # ... but not where strategy is a 1-D one (no max_shapes): stream.estimate's
    with pytest.raises(TypeError, match=r"time_limit=2; its options"):
        check_options("estimate", {"time_limit": 2}, ["strategy", "num_buckets"])
    with pytest.raises(TypeError, match=r"tokens_per_batch=64; did you mean max_tokens=\?"):
        BucketSampler([3, 5], num_buckets=2, tokens_per_batch=64)
    with pytest.raises(TypeError, match=r"did you mean batch_size=\?"):  # difflib
        BucketSampler([3, 5], num_buckets=2, max_batch_size=2)
    for peer in ("max_sentences", "max_cuts"):  # alone a batch size; beside a budget, a cap
        with pytest.raises(
            TypeError,
            match=rf"{peer}=8; did you mean batch_size=\? \(.*beside .* it is "
            r"max_tokens=TokenBudget\(n, max_batch_size=m\)\)",
        ):
            BucketSampler([3, 5], num_buckets=2, max_tokens=64, **{peer: 8})


def test_an_alias_suggests_only_an_option_the_entry_point_takes():
    from bucketloader import BucketSampler
    from bucketloader.pack import PackSampler

    with pytest.raises(TypeError, match=r"max_seq_len=8; did you mean row_length=\?"):
        PackSampler([3, 5], row_length=8, batch_size=2, max_seq_len=8)
    with pytest.raises(TypeError, match=r"max_seq_len=8; did you mean max_length=\?"):
        BucketSampler([3, 5], num_buckets=2, batch_size=2, max_seq_len=8)
    with pytest.raises(TypeError) as exc:  # EvalSampler takes no seed: no alias to offer
        check_options("EvalSampler", {"random_seed": 1}, ["batch_size", "num_buckets"])
    assert "did you mean" not in str(exc.value)


def test_every_alias_names_a_real_option_of_a_public_entry_point():
    from bucketloader import BucketIterable, BucketSampler, EvalSampler, PadCollator
    from bucketloader.hf import for_audio, for_packing, for_text
    from bucketloader.pack import PackSampler, PackSpec
    from bucketloader.plan import BucketSpec
    from bucketloader.sampler import sampler_options

    options = {
        *sampler_options(BucketSampler, BucketSpec),
        *sampler_options(EvalSampler, BucketSpec),
        *sampler_options(PackSampler, PackSpec),
        *keyword_options(PadCollator.__init__, BucketIterable.__init__),
        *keyword_options(for_text, for_audio, for_packing),
    }
    for alias, (targets, note) in ALIASES.items():
        # (PackSampler's row_length; SplitDataset's and BucketSampler's max_length)
        assert alias not in options or alias in ("max_length", "row_length"), alias
        assert targets and set(targets) <= options, (alias, targets)
        assert note


def test_every_entry_point_refuses_options_in_one_voice():
    from bucketloader import BucketIterable
    from bucketloader.sharded import ShardedSampler
    from bucketloader.solve import compute_boundaries
    from bucketloader.strategies.joint import solve_joint

    cases = [
        (lambda: compute_boundaries([1, 2, 3], 2, tol=1), "strategy 'optimal'", "cost"),
        (lambda: solve_joint([[1, 2], [3, 4]], 1, timelimit=3), "solve_joint", "time_limit"),
        (
            lambda: ShardedSampler([3, 4], num_replicas=1, rank=0, world_size=1),
            "ShardedSampler",
            "shard_indices",
        ),
        (lambda: BucketIterable([[1]], boundaries=[4], batchsize=2), "BucketIterable", "seed"),
    ]
    for call, owner, own in cases:
        with pytest.raises(
            TypeError, match=rf"^{owner} got an unexpected option .*; its options: "
        ):
            call()
        with pytest.raises(TypeError, match=rf"; its options: .*\b{own}\b"):
            call()


def _public_keyword_entry_points():
    """The public constructors and functions whose options are declared in their own signature
    (no ``**options`` parsed by check_options): the ones :func:`checks_options` guards."""
    from bucketloader import (
        BucketCache,
        LengthHistogram,
        PadCollator,
        TokenBudget,
        analyze,
        calibrate,
    )
    from bucketloader.compile import CompileCache, ExampleBatches
    from bucketloader.engines import parquet_histogram
    from bucketloader.hf import ModelInputs, PackedInputs, add_lengths, lengths
    from bucketloader.pack import PackCollator, PackSpec, SplitDataset, plan_pack_epoch
    from bucketloader.plan import BucketSpec, plan_epoch
    from bucketloader.stream import PackIterable
    from bucketloader.stream.arrow import ArrowRows

    return [
        (PadCollator, "PadCollator", {"padding_side": "left"}, "did you mean side=?"),
        (PadCollator, "PadCollator", {"padding_value": -1}, "did you mean pad_value=?"),
        (PackCollator, "PackCollator", {"pad_id": 0}, "did you mean pad_token_id=?"),
        (PackCollator, "PackCollator", {"drop_last": True}, "its options: key"),
        (PackIterable, "PackIterable", {"drop_last": True}, "did you mean last_batch=?"),
        (PackIterable, "PackIterable", {"max_seq_len": 64}, "did you mean row_length=?"),
        (BucketCache, "BucketCache", {"maxsize": 1}, "did you mean max_size=?"),
        (CompileCache, "CompileCache", {"maxsize": 1}, "its options: "),
        (ExampleBatches, "ExampleBatches", {"padding_side": "left"}, "its options: "),
        (SplitDataset, "SplitDataset", {"max_seq_len": 8}, "did you mean max_length=?"),
        # s14: the packing guide's word for it; it suggested lengths= (difflib's closest)
        (SplitDataset, "SplitDataset", {"row_length": 8}, "did you mean max_length=?"),
        (ModelInputs, "ModelInputs", {"padding_side": "left"}, "its options: "),
        (PackedInputs, "PackedInputs", {"pad_id": 0}, "its options: "),
        (analyze, "analyze", {"n_bins": 8}, "did you mean num_buckets=?"),
        (calibrate, "calibrate", {"repeat": 3}, "did you mean repeats=?"),
        (parquet_histogram, "parquet_histogram", {"columns": "x"}, "did you mean column=?"),
        (lengths, "lengths", {"num_workers": 2}, "its options: "),
        (TokenBudget, "TokenBudget", {"max_batch": 8}, "did you mean max_batch_size=?"),
        (
            LengthHistogram.from_lengths,
            "LengthHistogram.from_lengths",
            {"binwidth": 8},
            "did you mean bin_width=?",
        ),
        (plan_epoch, "plan_epoch", {"seeds": 1}, "did you mean seed=?"),
        (BucketSpec.build, "BucketSpec.build", {"num_bucket": 2}, "did you mean num_buckets=?"),
        (PackSpec.build, "PackSpec.build", {"drop_last": True}, "did you mean last_batch=?"),
        (ArrowRows, "ArrowRows", {"column": ["a"]}, "did you mean columns=?"),
        (plan_pack_epoch, "plan_pack_epoch", {"seeds": 1}, "did you mean seed=?"),
        (add_lengths, "add_lengths", {"num_workers": 2}, "its options: "),
    ]


def test_public_constructors_refuse_an_unknown_keyword_in_one_voice():
    """PadCollator(padding_side="left") built directly gave Python's bare ``__init__() got an
    unexpected keyword argument`` while sampler.collator(padding_side=...) named side=."""
    for entry, owner, options, hint in _public_keyword_entry_points():
        with pytest.raises(TypeError, match=rf"^{owner} got an unexpected option ") as info:
            entry(**options)
        assert hint in str(info.value), (owner, str(info.value))
        assert "unexpected keyword argument" not in str(info.value)


def test_checks_options_keeps_the_signature_and_the_valid_calls():
    import inspect

    from bucketloader import PadCollator
    from bucketloader._validation import checks_options
    from bucketloader.plan import BucketSpec

    assert "side" in keyword_options(PadCollator.__init__)  # (the options, declared once)
    assert "shape_table" in inspect.signature(PadCollator).parameters
    table = BucketSpec.build([3, 4, 9], num_buckets=1, batch_size=2).shape_table()
    assert PadCollator(table, side="left").side == "left"
    assert PadCollator(shape_table=table).side == "right"  # (positional-or-keyword by name)

    def takes_all(x, **rest): ...

    with pytest.raises(TypeError, match=r"takes \*\*kwargs"):
        checks_options(takes_all)

    class Sub(PadCollator):  # (a subclass's own options are its own business)
        def __init__(self, shape_table, *, extra=1, **kwargs):
            super().__init__(shape_table, **kwargs)
            self.extra = extra

    assert Sub(table, extra=2, side="left").extra == 2
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(PadCollator(table, side="left"))).side == "left"
    assert copy.deepcopy(PadCollator(table, side="left")).side == "left"


# -- lengths given as strings (s10-user) ---------------------------------------------------------


@pytest.mark.parametrize(
    "lengths, shown",
    [
        (["5", "17"], r"'5' at index 0"),
        (np.array(["5", "17"]), r"'5' at index 0"),
        ([5, "17", 3], r"'17' at index 1"),
        (np.array([b"5", b"17"]), r"b'5' at index 0"),
    ],
)
def test_lengths_given_as_strings_name_the_conversion(lengths, shown):
    with pytest.raises(
        TypeError,
        match=r"^lengths must hold integer lengths, got strings \(numpy dtype [<|][US]\d+\), "
        + r"e\.g\. "
        + shown
        + r"; convert them to integers first, e\.g\. lengths = \[int\(x\) for x in lengths\]",
    ):
        as_lengths(lengths)
    with pytest.raises(TypeError, match=r"^shard_lengths must hold integer lengths, got strings"):
        as_lengths(lengths, name="shard_lengths")


def test_every_public_entry_taking_lengths_refuses_strings_the_same_way():
    """One validator behind every entry point (s10-user: "got dtype <U2" named no fix)."""
    from bucketloader import (
        BucketSampler,
        EvalSampler,
        LengthHistogram,
        PackSampler,
        analyze,
        compute_boundaries,
        recommend_num_buckets,
    )
    from bucketloader.boundaries import assign_buckets, padding_cost
    from bucketloader.plan import BucketSpec
    from bucketloader.sharded import ShardedSampler

    text = ["5", "17", "3"]
    calls = {
        "BucketSampler": lambda: BucketSampler(text, num_buckets=2, batch_size=2),
        "EvalSampler": lambda: EvalSampler(text, num_buckets=2, batch_size=2),
        "PackSampler": lambda: PackSampler(text, row_length=32, batch_size=2),
        "ShardedSampler": lambda: ShardedSampler(text, num_replicas=1, rank=0, batch_size=2),
        "BucketSpec": lambda: BucketSpec.build(text, num_buckets=2, batch_size=2),
        "compute_boundaries": lambda: compute_boundaries(text, 2),
        "padding_cost": lambda: padding_cost(text, [20]),
        "assign_buckets": lambda: assign_buckets(text, [20]),
        "LengthHistogram": lambda: LengthHistogram.from_lengths(text),
        "analyze": lambda: analyze(text, num_buckets=[2]),  # (not texts of 1-2 characters)
        "recommend_num_buckets": lambda: recommend_num_buckets(text, num_buckets=(1, 2)),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError, match=r"lengths must hold integer lengths, got strings"):
            call()
            pytest.fail(f"{name} accepted lengths given as strings")


def test_a_path_given_as_lengths_says_to_read_the_file():
    from pathlib import Path

    from bucketloader import BucketSampler

    for path in ("lengths.txt", Path("lengths.txt")):
        with pytest.raises(
            TypeError,
            match=r"^lengths must be a list, numpy array or torch tensor of non-negative ints, got "
            r"\w+ 'lengths\.txt'; to bucket the lengths in a file, read them first \(e\.g\. "
            r"np\.loadtxt\(path, dtype=np\.int64\)",
        ):
            BucketSampler(path, num_buckets=2, batch_size=2)
    # np.loadtxt reads no .jsonl, .csv header or Parquet: the hint follows the suffix (s31-user2)
    hints = {
        "train.jsonl": r"np\.array\(\[json\.loads\(line\)\['length'\] for line in open",
        "train.tsv": r"pandas\.read_csv\(path, sep='\\t'\)\['length'\]",
        "train.parquet": r"pyarrow\.parquet\.read_table\(path, columns=\['length'\]\)",
        "train.npy": r"np\.load\(path\) for a \.npy file",
    }
    for path, hint in hints.items():
        with pytest.raises(TypeError, match=hint + r".*`bucketloader report FILE` reads"):
            BucketSampler(path, num_buckets=2, batch_size=2)


def test_a_directory_given_as_lengths_says_to_read_it_with_datasets(tmp_path):
    # s32-rev: a save_to_disk directory (which `bucketloader report` reads) was told to read it
    # with np.loadtxt(path, dtype=np.int64), which fails there (IsADirectoryError)
    datasets = pytest.importorskip("datasets")
    from bucketloader import BucketSampler, hf

    rows = {"input_ids": [[1] * n for n in (3, 1, 4, 1, 5)]}
    path = str(tmp_path / "tokenised")
    datasets.Dataset.from_dict(rows).save_to_disk(path)
    with pytest.raises(TypeError) as err:
        BucketSampler(path, num_buckets=2, batch_size=2)
    said = str(err.value)
    how = "bucketloader.hf.lengths(datasets.load_from_disk(path), 'input_ids')"
    assert f"(e.g. {how} for a directory saved by datasets.Dataset.save_to_disk; " in said
    assert "np.loadtxt" not in said
    scope = {"hf": hf, "datasets": datasets, "path": path}
    followed = eval(how.replace("bucketloader.", ""), scope)
    assert followed.tolist() == [3, 1, 4, 1, 5]


def test_every_producers_collator_refuses_options_in_one_voice():
    """The neighbours of ``BucketSampler.collator()``: the other producers' collators passed a
    typo on to the collator's ``__init__`` (Python's "unexpected keyword argument", no closest
    name; s11-rev1)."""
    from bucketloader import BucketIterable, EvalSampler
    from bucketloader.pack import PackSampler
    from bucketloader.stream import PackIterable

    producers = {
        "EvalSampler": (EvalSampler([3, 5, 8], num_buckets=2, batch_size=2), "side"),
        "PackSampler": (PackSampler([3, 5, 8], row_length=8, batch_size=2), "pad_token_id"),
        "BucketIterable": (BucketIterable([[1]], boundaries=[4], batch_size=2), "side"),
        "PackIterable": (PackIterable([[1] * 3], row_length=8, batch_size=2), "pad_token_id"),
    }
    for owner, (producer, meant) in producers.items():
        typo = "padding_side" if meant == "side" else "padding_value"
        with pytest.raises(
            TypeError,
            match=rf"^{owner}\.collator\(\) got an unexpected option {typo}=0; did you mean "
            rf"{meant}=\?.*; its options: ",
        ):
            producer.collator(**{typo: 0})


def test_evaluation_refuses_drop_last_with_its_reason_not_a_hint_to_last_batch():
    """EvalSampler(drop_last=True) suggested last_batch=, which it then refused (s11-rev1)."""
    import datasets

    from bucketloader import EvalSampler, hf

    for name, value in (("drop_last", True), ("last_batch", "drop")):
        with pytest.raises(
            TypeError, match=rf"^EvalSampler takes no {name}: it keeps every sample exactly once"
        ):
            EvalSampler([3, 5, 8], num_buckets=2, batch_size=2, **{name: value})
        ds = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 5, 8)]})
        with pytest.raises(TypeError, match=rf"evaluation batches are deterministic.*drop {name}="):
            hf.for_text(ds, pad_token_id=0, evaluation=True, batch_size=2, **{name: value})


def test_strings_in_an_object_array_name_the_conversion_too():
    """The object-array path (a pandas column of str, ``dtype=object``) had no test: removing
    its branch left every test green (s11-rev1)."""
    with pytest.raises(
        TypeError,
        match=r"^lengths must hold integer lengths, got the string '17' at index 1; convert them "
        r"to integers first",
    ):
        as_lengths(np.array([5, "17"], dtype=object))


def test_samples_in_an_object_array_say_to_pass_their_lengths():
    """s28-user: a pandas column of token lists (``df["input_ids"].values``, an object array of
    lists) was told "got [0, 1, 2, ...] at index 0", the whole sample and no way on; a 0-d
    array or tensor in such an array (no length) keeps its message."""
    column = np.empty(3, dtype=object)
    column[:] = [list(range(n)) for n in (3, 5, 700)]
    for samples, kind in (
        (column, "list"),
        (np.array([np.arange(4), np.arange(2)], object), "ndarray"),
    ):
        with pytest.raises(
            TypeError,
            match=rf"^lengths must hold integer lengths, got a {kind} of \d+ elements at index 0 "
            r"\(a sample's tokens\?\): lengths holds one length per sample, not the samples; pass "
            r"their lengths, e.g. \[len\(x\) for x in rows\]$",
        ):
            as_lengths(samples)
    with pytest.raises(TypeError, match=r"^lengths must hold integer lengths, got tensor\(3\) at"):
        as_lengths(np.array([torch.tensor(3), torch.tensor(4)], dtype=object))


def test_pack_sampler_without_row_length_names_the_alias_given_instead():
    """PackSampler(max_seq_len=2048) said only "needs row_length=", ignoring the option the user
    gave for it (s11-rev1)."""
    from bucketloader.pack import PackSampler

    with pytest.raises(
        TypeError,
        match=r"^PackSampler needs row_length=<tokens per row> .*; got max_seq_len=8: did you "
        r"mean row_length=8\?",
    ):
        PackSampler([3, 5], max_seq_len=8, batch_size=2)


def test_a_packing_plan_without_a_batch_rule_speaks_of_rows():
    """PackSampler(lengths, row_length=...) without batch_size or max_tokens was told of a bucket
    plan's "padded size" (before 05129ec, "the same batch size for every bucket"); a packing
    plan (sampler, spec or stream) now names rows of row_length tokens, with an example at its
    row length (s28-user). Both given keeps the TokenBudget way out; buckets keep their words."""
    from bucketloader import BucketSampler
    from bucketloader.pack import PackSampler, PackSpec
    from bucketloader.stream import PackIterable

    rows = r"^pass exactly one of batch_size \(rows of row_length tokens per batch\) or max_tokens "
    rows += r"\(rows = max_tokens // row length\), got batch_size=None and max_tokens=None; "
    for build, length in [
        (lambda: PackSampler([3, 5], row_length=(8, 2048)), "2,048"),
        (lambda: PackSpec.build([3, 5], row_length=2048), "2,048"),
        (lambda: PackIterable([[1, 2]], row_length=16), "16"),
    ]:
        example = rf"e\.g\. batch_size=8 \(8 rows of {length} tokens a batch\) or max_tokens="
        with pytest.raises(ValueError, match=rows + example) as err:
            build()
        assert "padded" not in str(err.value) and "bucket" not in str(err.value)
    with pytest.raises(ValueError, match=r"// row length\), got batch_size=2 and max_tokens=64; "):
        PackSampler([3, 5], row_length=8, batch_size=2, max_tokens=64)
    with pytest.raises(ValueError, match=r"\(rows = max_tokens // padded size\), got batch_size"):
        BucketSampler([3, 5], num_buckets=1)


def test_a_histogram_where_sample_lengths_are_needed_names_the_way_to_plan_from_it():
    """An engine's histogram handed to a sampler (the natural next step after ray_histogram)
    was refused as 'got LengthHistogram', with no way forward."""
    import numpy as np

    from bucketloader import BucketSampler, LengthHistogram, compute_boundaries
    from bucketloader.histogram import JointHistogram
    from bucketloader.sharded import ShardedSampler

    lengths = np.array([3, 4, 5, 9, 9, 12])
    hist = LengthHistogram.from_lengths(lengths)
    joint = JointHistogram.from_lengths(np.stack([lengths, lengths + 1], axis=1))
    calls = [
        lambda: BucketSampler(hist, num_buckets=2, batch_size=2),
        lambda: BucketSampler(joint, max_shapes=2, batch_size=2),
        lambda: ShardedSampler(
            hist, shard_histograms=[hist], num_replicas=1, rank=0, num_buckets=2, batch_size=2
        ),
        lambda: compute_boundaries(joint, 2),
    ]
    for call in calls:
        with pytest.raises(
            TypeError,
            match=r"got a (Length|Joint)Histogram of 6 samples, .*"
            r"no sample order.*compute_boundaries\(hist, k\).*boundaries=",
        ):
            call()
    sampler = BucketSampler(lengths, boundaries=compute_boundaries(hist, 2), batch_size=2)
    assert sampler.boundaries.tolist() == compute_boundaries(lengths, 2).tolist()


def test_an_option_error_pickles_as_the_plain_error_it_also_is():
    """s31: OptionTypeError and OptionKeyError (for_text's column fixes) are TypeError and
    MissingKeyError too, and pickle as those, with their Python text, as OptionError does."""
    import pickle

    from bucketloader._validation import (
        MissingKeyError,
        OptionError,
        OptionKeyError,
        OptionTypeError,
    )

    for kind, plain in (
        (OptionError, ValueError),
        (OptionTypeError, TypeError),
        (OptionKeyError, MissingKeyError),
    ):
        err = kind(lambda o: f"name it with {o('column', '...')}")
        assert isinstance(err, plain) and kind.plain() is plain
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is plain and str(back) == "name it with column=..."
