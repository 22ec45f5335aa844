"""Where a tiny ``Wav2Vec2ForCTC`` breaks dynamo's graph in training, by configuration.

docs/trainer-compile.md says which options make a speech model compile to one graph per planned
shape. This measures it: a config-built ``Wav2Vec2ForCTC`` (hidden 32, 1 layer) in train mode,
compiled ``dynamic=False`` on the ``eager`` backend (dynamo's graphs and breaks, no inductor),
one forward and one backward on a padded batch of 4 x 4,000 samples, called two ways: with CTC
``labels`` (the model's own loss, as a plain loop calls it) and without (as ``BucketTrainer``
calls a CTC head: its loss computed outside the model, here a sum of the log-probabilities);
for each of transformers' defaults (``layerdrop=0.1``, the feature encoder trainable),
``layerdrop=0``, the feature encoder frozen (``freeze_feature_encoder()``), and both. Per run:
dynamo graphs, graph breaks, and the first line of each break's reason. Run:

    .venv/bin/python benchmarks/wav2vec2_breaks.py   # writes benchmarks/results/wav2vec2_breaks.md
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "defaults (layerdrop 0.1, feature encoder trained)": {"layerdrop": 0.1, "freeze": False},
    "layerdrop=0": {"layerdrop": 0.0, "freeze": False},
    "feature encoder frozen": {"layerdrop": 0.1, "freeze": True},
    "layerdrop=0 and feature encoder frozen": {"layerdrop": 0.0, "freeze": True},
}


def measure(layerdrop: float, freeze: bool, labels: bool = True) -> dict:
    import transformers

    config = transformers.Wav2Vec2Config(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 4),
        num_feat_extract_layers=2,
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer",
        do_stable_layer_norm=True,
        pad_token_id=0,
        mask_time_prob=0.0,
        layerdrop=layerdrop,
    )
    torch.manual_seed(0)
    model = transformers.Wav2Vec2ForCTC(config).train()
    if freeze:
        model.freeze_feature_encoder()
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = torch.compile(model, dynamic=False, backend="eager")
    x = torch.randn(4, 4000)
    mask = torch.ones(4, 4000, dtype=torch.long)
    mask[1, 3000:] = 0
    if labels:
        ids = torch.randint(1, 32, (4, 10))
        compiled(input_values=x, attention_mask=mask, labels=ids).loss.backward()
    else:
        logits = compiled(input_values=x, attention_mask=mask).logits
        logits.log_softmax(-1).sum().backward()
    reasons = sorted({k.splitlines()[0][:110] for k in counters["graph_break"]})
    return {
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": int(sum(counters["graph_break"].values())),
        "reasons": reasons,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "wav2vec2_breaks.md"))
    args = p.parse_args(argv)
    import transformers

    start, load0 = time.perf_counter(), os.getloadavg()[0]
    rows = []
    for labels in (True, False):
        for name, opts in CONFIGS.items():
            r = measure(**opts, labels=labels)
            rows.append((name, "yes" if labels else "no (as BucketTrainer)", r))
            print(name, labels, r, flush=True)
    lines = [
        "# Wav2Vec2ForCTC's graph breaks in training, by configuration",
        "",
        f"Command: `python benchmarks/wav2vec2_breaks.py` ({time.perf_counter() - start:.0f} s, "
        f"load average {load0:.1f} at the start).",
        "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, torch "
        f"{torch.__version__}, transformers {transformers.__version__}. One forward and "
        "backward of a tiny config-built model in train mode on a padded 4 x 4,000 batch, "
        "`torch.compile(dynamic=False, backend='eager')`, with CTC labels in the forward (the "
        "model's own loss) or without (as BucketTrainer calls a CTC head: the loss outside).",
        "",
        "| configuration | labels in forward | dynamo graphs | graph breaks | break reasons "
        "(first line) |",
        "|---|---|---:|---:|---|",
    ]
    for name, labels, r in rows:
        reasons = "<br>".join(x.replace("|", "/") for x in r["reasons"]) or "-"
        lines.append(f"| {name} | {labels} | {r['graphs']} | {r['breaks']} | {reasons} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
