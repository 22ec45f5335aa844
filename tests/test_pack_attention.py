"""Packed batches reach attention kernels compile-clean: static varlen metadata, seq_idx against a
reference causal conv, and three attention paths (SDPA + document mask, FlexAttention + BlockMask,
a varlen op with flash-attention's signature) compiled with fullgraph=True, dynamic=False over
>= 150 batches of real text lengths: one graph per planned shape, each document's logits equal to
the document run alone. Also PackCollator's contract for token dtypes (issue 21, item 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import load_real

from bucketloader.pack import (
    IGNORE_INDEX,
    PackCollator,
    PackIterable,
    PackSampler,
    PackTable,
    document_block_mask,
    document_mask,
)

VOCAB, DIM, HEADS = 64, 16, 2


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread (two threads on a busy 2-core machine made each SDPA
    call ~200x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- a stand-in varlen kernel: flash-attention's varlen signature, a reference implementation --
@torch.library.custom_op("bucketloader_test::varlen_attn", mutates_args=())
def varlen_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool,
) -> torch.Tensor:
    """``flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    max_seqlen_k, causal=...)`` on ``(total, heads, dim)`` tensors, by masked SDPA. Like the real
    kernel it trusts ``max_seqlen`` to bound every segment; unlike it, it checks."""
    total = q.shape[0]
    longest = int(cu_seqlens_q.diff().max())
    if longest > max_seqlen_q or longest > max_seqlen_k:
        raise ValueError(f"a segment of {longest} tokens exceeds max_seqlen={max_seqlen_q}")
    pos = torch.arange(total, device=q.device)
    seg = torch.searchsorted(cu_seqlens_q, pos, right=True)
    mask = seg[:, None] == seg[None, :]
    if causal:
        mask &= pos[:, None] >= pos[None, :]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask
    )
    return out.transpose(0, 1).contiguous()


@varlen_attn.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
    return torch.empty_like(q)


class TinyLM(torch.nn.Module):
    """One causal attention layer over token + position embeddings, ``path`` picking the kernel:
    ``"sdpa"`` (document mask built in the compiled region), ``"flex"`` (BlockMask built in the
    compiled region) or ``"varlen"`` (cu_seqlens + max_seqlen)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.path = path
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.pos = torch.nn.Embedding(256, DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, position_ids, document_ids=None, cu_seqlens=None, max_seqlen=0):
        b, n = input_ids.shape
        x = self.emb(input_ids) + self.pos(position_ids)
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, DIM // HEADS).unbind(2)
        if self.path == "varlen":
            flat = [t.reshape(b * n, HEADS, -1) for t in (q, k, v)]
            y = varlen_attn(*flat, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, True)
            y = y.view(b, n, DIM)
        else:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            if self.path == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(document_ids))
            else:
                from torch.nn.attention.flex_attention import flex_attention

                block = document_block_mask(document_ids, block_size=16)
                y = flex_attention(q, k, v, block_mask=block)
            y = y.transpose(1, 2).reshape(b, n, DIM)
        return self.head(x + y)

    def alone(self, doc: list[int]) -> torch.Tensor:
        """Logits of one document run alone (eager)."""
        n = len(doc)
        with torch.no_grad():
            return self(
                torch.tensor([doc]),
                torch.arange(n)[None],
                torch.zeros(1, n, dtype=torch.int32),
                torch.tensor([0, n], dtype=torch.int32),
                n,
            )[0]


def _docs(column, n, seed=0, cap=32, long_every=0):
    lengths = np.minimum(column[:n], cap)
    if long_every:
        lengths[::long_every] = 30  # a few long documents: a second row length
    rng = np.random.default_rng(seed)
    return lengths, [rng.integers(1, VOCAB, int(k)).tolist() for k in lengths]


def _run(model, batches, *, check=3):
    """Compile ``model`` (fullgraph, dynamic=False), feed every batch; return (graphs, shapes,
    batches). The first ``check`` batches' documents are compared with each run alone."""
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting, fullgraph=True, dynamic=False)
    shapes, count = set(), 0
    for docs, out in batches:
        shapes.add(tuple(out["input_ids"].shape))
        with torch.no_grad():
            logits = compiled(
                out["input_ids"],
                out["position_ids"],
                out.get("document_ids"),
                out["cu_seqlens"],
                out["max_seqlen"],
            )
        if count < check:
            for d, doc in enumerate(docs):
                where = out["document_ids"] == d
                torch.testing.assert_close(logits[where], model.alone(doc), atol=1e-5, rtol=0)
        count += 1
    torch._dynamo.reset()
    return len(graphs), shapes, count


def _sampler_batches(lengths, docs, **options):
    sampler = PackSampler(lengths, seed=3, **options)
    collate = sampler.collator()
    for idx in sampler:
        chosen = [docs[i] for i in idx]
        yield chosen, collate(chosen)


# the counting backend runs each graph as traced: flex_attention's note that it is not fused
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("path", ["sdpa", "flex", "varlen"])
def test_attention_paths_compile_once_per_planned_shape(path):
    """>= 100 packed batches of two planned shapes: graphs == shapes, logits == alone."""
    lengths, docs = _docs(load_real("multi30k")[:, 0] + 2, 270, cap=20, long_every=29)
    sampler = PackSampler(lengths, row_length=(24, 32), batch_size=2, seed=3)
    assert len(sampler.shapes) == 2 and len(sampler) >= 100
    graphs, shapes, count = _run(
        TinyLM(path), _sampler_batches(lengths, docs, row_length=(24, 32), batch_size=2)
    )
    assert count >= 100 and shapes == set(sampler.shapes)
    assert graphs == len(sampler.shapes)


def test_varlen_step_compiles_once_per_shape_fed_by_every_producer():
    """The issue's acceptance: the stand-in varlen step, fed by PackCollator (PackSampler),
    PackIterable and hf.for_packing(attention="flash"), >= 150 batches of held-out text
    lengths each, fullgraph=True: one graph per planned shape."""
    model = TinyLM("varlen")
    held_out = load_real("multi30k")[:, 1] + 2
    lengths, docs = _docs(held_out, 680, seed=1)
    # PackSampler + PackCollator
    graphs, shapes, count = _run(
        model, _sampler_batches(lengths, docs, row_length=32, batch_size=2)
    )
    assert count >= 150 and graphs == len(shapes) == 1
    # PackIterable: an online stream over documents it has never planned on
    stream = PackIterable(docs, row_length=32, batch_size=2)
    collate = stream.collator()
    graphs, shapes, count = _run(model, ((b, collate(b)) for b in stream))
    assert count >= 150 and shapes == set(stream.shapes) and graphs == 1
    # hf.for_packing(attention="flash"): the keys a transformers model takes
    datasets = pytest.importorskip("datasets")
    from bucketloader.hf import for_packing

    ds = datasets.Dataset.from_dict({"input_ids": docs})
    sampler, collate, data = for_packing(
        ds, pad_token_id=0, attention="flash", row_length=32, batch_size=2, seed=1
    )

    def hf_batches():
        for idx in sampler:
            chosen = [data[i]["input_ids"] for i in idx]
            batch = collate([data[i] for i in idx])
            assert batch["max_length_q"] == batch["max_length_k"] == 32
            inner = collate.collator(chosen)  # document_ids, to compare with each doc alone
            yield (
                chosen,
                {
                    "input_ids": batch["input_ids"],
                    "position_ids": batch["position_ids"],
                    "document_ids": inner["document_ids"],
                    "cu_seqlens": batch["cu_seq_lens_q"],
                    "max_seqlen": batch["max_length_q"],
                },
            )

    graphs, shapes, count = _run(model, hf_batches())
    assert count >= 150 and graphs == len(shapes) == 1


def test_hf_llama_takes_the_flash_arguments_and_compiles_once():
    """hf.for_packing(attention="flash") into a tiny transformers Llama whose attention is the
    varlen stand-in (registered as an attention implementation, the way flash-attention is):
    one graph under fullgraph=True, dynamic=False, and each document's logits equal those of
    the same model with SDPA on the document alone."""
    transformers = pytest.importorskip("transformers")
    datasets = pytest.importorskip("datasets")
    from bucketloader.hf import for_packing

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        b, h, n, d = query.shape
        rep = h // key.shape[1]
        q = query.transpose(1, 2).reshape(b * n, h, d)
        k, v = (
            t.repeat_interleave(rep, 1).transpose(1, 2).reshape(b * n, h, d) for t in (key, value)
        )
        cu, m = kw["cu_seq_lens_q"], kw["max_length_q"]
        return varlen_attn(q, k, v, cu, cu, m, m, True).view(b, n, h, d), None

    transformers.AttentionInterface.register("bucketloader_test_varlen", attention)

    def llama(attn):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            attn_implementation=attn,
            use_cache=False,
        )
        return transformers.LlamaForCausalLM(config).eval()

    model, ref = llama("bucketloader_test_varlen"), llama("sdpa")
    _, docs = _docs(load_real("multi30k")[:, 0] + 2, 150)
    ds = datasets.Dataset.from_dict({"input_ids": docs})
    sampler, collate, data = for_packing(
        ds, pad_token_id=0, attention="flash", row_length=32, batch_size=2
    )
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting, fullgraph=True, dynamic=False)
    for n, idx in enumerate(sampler):
        batch = collate([data[i] for i in idx])
        del batch["labels"]
        with torch.no_grad():
            logits = compiled(**batch).logits
        if n < 2:
            ids = collate.collator([docs[i] for i in idx])["document_ids"]
            for d, i in enumerate(idx):
                with torch.no_grad():
                    alone = ref(input_ids=torch.tensor([docs[i]])).logits[0]
                torch.testing.assert_close(logits[ids == d], alone, atol=1e-5, rtol=0)
    assert n + 1 >= 30 and len(graphs) == 1
    torch._dynamo.reset()


def test_tight_max_seqlen_warns_and_recompiles():
    """The opt-in tight value changes per batch: it recompiles (which the default avoids)."""
    lengths, docs = _docs(load_real("gsm8k").sum(1) // 4 + 2, 60)
    sampler = PackSampler(lengths, row_length=64, batch_size=1, seed=0)
    with pytest.warns(UserWarning, match="recompiles"):
        collate = sampler.collator(max_seqlen="tight")

    def batches():
        for idx in list(sampler)[:6]:
            chosen = [docs[i] for i in idx]
            yield chosen, collate(chosen)

    graphs, _, _ = _run(TinyLM("varlen"), batches(), check=0)
    assert graphs > 1


# --- max_seqlen -------------------------------------------------------------------------------
def test_max_seqlen_options():
    table = PackTable(row_lengths=(8,), batch_sizes=(2,), max_documents=(4,), longest=(5,))
    docs = [[1] * 5, [2] * 2, [3] * 1]
    assert PackCollator(table)(docs)["max_seqlen"] == 8  # the row length
    out = PackCollator(table, max_seqlen=5)(docs)
    cu = out["cu_seqlens"]
    # row 0 is full; row 1's 8 padding tokens are cut into pieces of <= 5: 3 docs + 2 pieces
    assert cu.shape == (4 + 2 * 2 + 1,) and out["max_seqlen"] == 5
    assert cu.tolist() == [0, 5, 7, 8, 13, 16, 16, 16, 16]
    assert int(cu.diff().max()) <= 5
    # (s31-user2) a bound a position table needs cannot be raised: the error names the cut
    cut = r"cut or split the documents to 4 tokens .*SplitDataset"
    with pytest.raises(
        ValueError, match=r"max_seqlen=4 is smaller than the longest document.*" + cut
    ):
        PackCollator(table, max_seqlen=4)
    stream_table = PackTable(row_lengths=(8,), batch_sizes=(2,), max_documents=(4,))
    with pytest.raises(
        ValueError, match=r"document of 5 tokens .* longer than max_seqlen=4.*" + cut
    ):
        PackCollator(stream_table, max_seqlen=4)(docs)
    with pytest.raises(ValueError, match="max_seqlen must be None"):
        PackCollator(table, max_seqlen="loose")
    with pytest.raises(ValueError, match="max_seqlen must be an int >= 1"):
        PackCollator(table, max_seqlen=0)
    with pytest.raises(TypeError, match="max_seqlen must be an int"):
        PackCollator(table, max_seqlen=True)
    # streams pass the options through stream.collator(...)
    stream = PackIterable(docs, row_length=8, batch_size=2)
    out = stream.collator(max_seqlen=5, seq_idx=True)(next(iter(stream)))
    assert out["max_seqlen"] == 5 and int(out["cu_seqlens"].diff().max()) <= 5
    assert out["seq_idx"].shape == (2, 8) and (out["seq_idx"].diff(dim=1) >= 0).all()
    with pytest.warns(UserWarning, match="recompiles"):
        tight = PackCollator(table, max_seqlen="tight")
    assert tight(docs)["max_seqlen"] == 8  # the all-padding row is the longest segment
    sampler = PackSampler([30, 7, 9, 3], row_length=32, batch_size=1)
    assert sampler.table.longest == (30,)
    with pytest.raises(ValueError, match="rows of 32 tokens"):
        sampler.collator(max_seqlen=16)


# --- seq_idx against a causal depthwise conv with sequence boundaries ------------------------
def causal_conv(x: torch.Tensor, weight: torch.Tensor, seq_idx: torch.Tensor | None = None):
    """Reference causal depthwise conv1d, ``x`` ``(B, L, D)``, ``weight`` ``(D, K)``: output
    ``t`` is ``sum_k weight[:, K-1-k] * x[t-k]`` over taps ``x[t-k]`` of the same sequence
    (``seq_idx[t-k] == seq_idx[t]``; what ``causal_conv1d_fn(..., seq_idx=...)`` computes)."""
    n, width = x.shape[1], weight.shape[1]
    out = torch.zeros_like(x)
    for k in range(width):
        tap = F.pad(x, (0, 0, k, 0))[:, :n]
        if seq_idx is not None:
            same = seq_idx == F.pad(seq_idx, (k, 0), value=-1)[:, :n]
            tap = tap * same[..., None]
        out += tap * weight[:, width - 1 - k]
    return out


def test_seq_idx_keeps_a_causal_conv_within_each_document():
    torch.manual_seed(0)
    d, width = 3, 4
    weight = torch.randn(d, width)
    x = torch.randn(2, 9, d)
    # the reference without boundaries is torch's causal depthwise conv1d
    want = F.conv1d(F.pad(x.transpose(1, 2), (width - 1, 0)), weight[:, None], groups=d)
    torch.testing.assert_close(causal_conv(x, weight), want.transpose(1, 2))
    lengths, docs = _docs(load_real("gsm8k")[:, 0] // 3 + 2, 40, seed=2)
    sampler = PackSampler(lengths, row_length=48, batch_size=2, last_batch="pad")
    collate = sampler.collator(seq_idx=True)
    emb = torch.randn(VOCAB, d)
    leaked = 0
    for idx in sampler:
        chosen = [docs[i] for i in idx]
        out = collate(chosen)
        seq = out["seq_idx"]
        assert seq.dtype == torch.int32 and seq.shape == out["input_ids"].shape
        assert (seq.diff(dim=1) >= 0).all()  # non-decreasing along every row
        pad = out["document_ids"] == -1
        # a padding token never shares its number with a document token
        assert not set(seq[pad].tolist()) & set(seq[~pad].tolist())
        packed = causal_conv(emb[out["input_ids"]], weight, seq)
        plain = causal_conv(emb[out["input_ids"]], weight)
        for j, doc in enumerate(chosen):
            where = out["document_ids"] == j
            alone = causal_conv(emb[torch.tensor([doc])], weight)[0]
            torch.testing.assert_close(packed[where], alone)
            leaked += not torch.allclose(plain[where], alone)
    assert leaked > 0  # without seq_idx the conv joins documents: the test can fail


# --- PackCollator's dtype contract (issue 21, item 5) ------------------------------------------
def _collate(**kw):
    return PackCollator(PackTable(row_lengths=(8,), batch_sizes=(2,), max_documents=(6,)), **kw)


def test_token_ids_are_never_rounded_and_always_int64():
    collate = _collate()
    for bad in ([[1.5, 2.0]], [torch.tensor([1.0, 2.0])], [np.array([1.0, 2.0])]):
        with pytest.raises(TypeError, match=r"token ids must be integers.*batch position 0"):
            collate(bad)
    with pytest.raises(TypeError, match=r"batch position 1 is a tensor of dtype torch.float32"):
        collate([torch.tensor([1, 2]), torch.tensor([3.0])])  # a mixed batch is not float32
    with pytest.raises(TypeError, match=r"batch position 1 holds 2\.5"):
        collate([[1, 2], [3, 2.5]])
    mixed = [torch.tensor([1, 2], dtype=torch.int32), [3, 4], np.array([5], dtype=np.uint8)]
    out = collate(mixed)
    assert out["input_ids"].dtype == torch.int64
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5, 0, 0, 0], [0] * 8]
    big = 2**62 + 1  # exact: never through a float
    assert collate([[big, 1]])["input_ids"][0, 0].item() == big
    with pytest.raises(ValueError, match="int64 cannot hold"):
        collate([[2**63, 1]])
    with pytest.raises(ValueError, match="int64 cannot hold"):
        collate([np.array([2**63], dtype=np.uint64)])
    with pytest.raises(TypeError, match="field 'labels'"):
        collate([{"input_ids": [1, 2], "labels": [0.5, 1.0]}])
    for bad, kind in ((2**63, ValueError), (-(2**63) - 1, ValueError), (1.0, TypeError)):
        with pytest.raises(kind) as err:
            _collate(pad_token_id=bad)
        assert str(err.value) == (  # one message for PackCollator, for_text and for_packing
            "pad_token_id must be an int that int64 can hold (-2**63 to 2**63 - 1), got "
            f"pad_token_id={bad!r}; pass the tokenizer's pad id (tokenizer.pad_token_id)"
        )
    assert _collate(pad_token_id=-(2**63))([[1]])["input_ids"][0, 1].item() == -(2**63)
    assert _collate(pad_token_id=2**63 - 1)([[1]])["input_ids"][0, 1].item() == 2**63 - 1


def test_an_empty_document_keeps_its_number():
    out = _collate(seq_idx=True)([[5, 6], [], [7, 8, 9]])
    assert out["document_ids"].tolist()[0] == [0, 0, 2, 2, 2, -1, -1, -1]
    assert out["labels"].tolist()[0] == [IGNORE_INDEX, 6, IGNORE_INDEX, 8, 9] + [IGNORE_INDEX] * 3
    assert out["position_ids"].tolist()[0] == [0, 1, 0, 1, 2, 0, 1, 2]
    # the empty document is an empty segment: cu_seqlens repeats an offset there
    assert out["cu_seqlens"].tolist() == [0, 2, 2, 5, 8, 16, 16, 16, 16]
    assert out["seq_idx"].tolist()[0] == [0, 0, 2, 2, 2, 3, 3, 3]
    end = _collate()([[1] * 8, []])  # an empty document after a full row
    assert end["document_ids"].tolist() == [[0] * 8, [-1] * 8]
    assert end["labels"][1].tolist() == [IGNORE_INDEX] * 8


def test_hf_seq_idx_and_static_flash_arguments():
    datasets = pytest.importorskip("datasets")
    from bucketloader.hf import for_packing
    from bucketloader.hf.packing import PackedInputs

    ds = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in (3, 5, 2, 6)]})
    sampler, collate, data = for_packing(
        ds, pad_token_id=0, attention="flash", return_seq_idx=True, row_length=8, batch_size=2
    )
    batch = collate([data[1], data[0], data[3], data[2]])
    assert batch["max_length_q"] == 8 and batch["seq_idx"].dtype == torch.int32
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [2] * 6 + [3] * 2]
    with pytest.raises(ValueError, match=r"return_seq_idx=True .* attention='mask'"):
        for_packing(ds, pad_token_id=0, attention="mask", return_seq_idx=True, row_length=8)
    with pytest.raises(ValueError, match="seq_idx=True"):
        PackedInputs(sampler.collator(), return_seq_idx=True)
    with pytest.raises(TypeError, match="return_seq_idx must be a bool"):
        PackedInputs(sampler.collator(), return_seq_idx=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="PyTorch's varlen_attn needs CUDA")
def test_pytorch_varlen_attn_matches_the_stand_in_and_compiles_once():  # pragma: no cover
    """On a GPU: torch.nn.attention.varlen.varlen_attn fed by PackCollator equals the stand-in
    op, and a compiled step over 20 batches builds one graph."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn as torch_varlen

    causal = (
        {"window_size": (-1, 0)}
        if "window_size" in inspect.signature(torch_varlen).parameters
        else {"is_causal": True}  # torch releases before 2.13
    )

    lengths, docs = _docs(load_real("multi30k")[:, 0] + 2, 200)
    sampler = PackSampler(lengths, row_length=32, batch_size=2, seed=0)
    collate = sampler.collator()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def attend(q, k, v, cu, max_seqlen):
        return torch_varlen(q, k, v, cu, cu, max_seqlen, max_seqlen, **causal)

    torch._dynamo.reset()
    step = torch.compile(attend, backend=counting, fullgraph=True, dynamic=False)
    torch.manual_seed(0)
    for n, idx in enumerate(sampler):
        if n == 20:
            break
        out = collate([docs[i] for i in idx])
        cu = out["cu_seqlens"].cuda()
        q, k, v = (torch.randn(64, 2, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        got = step(q, k, v, cu, out["max_seqlen"])
        want = varlen_attn(q.float(), k.float(), v.float(), cu, cu, 32, 32, True)
        torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
    assert len(graphs) == 1
    torch._dynamo.reset()
