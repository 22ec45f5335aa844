"""The cost of masked-LM masking in the packing collator (``MLMMasking``, ``PackCollator(mlm=)``).

One batch of 8 rows of 2,048 tokens, filled to ~90% with documents of 50-349 tokens (uniform,
``numpy`` seed 0; ids in [5, 30000), specials 0-4), repeated: ``MLMMasking.apply`` on the
batch's flat layout (its documents' 16k tokens), and ``PackCollator`` on the batch's samples
(lists of ids) without and with ``mlm=MLMMasking(...)`` (BERT's 0.15 / 0.8 / 0.1); and the
batch's bidirectional ``document_mask`` (bool), without and with ``window=64`` (a ModernBERT
sliding layer's, NOTE [ Sliding-window layers in packed rows ]; ``hf.PackedInputs(
sliding_window=)`` builds both each batch). Times in us: CPU time of the thread
(``torch.set_num_threads(1)``, as in DataLoader workers), the best of 7 rounds of 100 calls
(of 3 for the masks). And the two masks of a model with both layer kinds (``hf.PackedInputs(
sliding_window=64).document_masks``, bool and float32): as built up to s32 (two
``document_mask`` calls, the windowed one rebuilt from the ids) and now (one, the window derived
by ``sliding_window_mask``); the same masks (checked here).

Run: ``PYTHONPATH=$PWD python benchmarks/mlm_masking.py`` (a few seconds). Writes
``benchmarks/results/mlm_masking.md``.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bucketloader.pack import (  # noqa: E402
    MLMMasking,
    PackCollator,
    PackTable,
    document_mask,
    sliding_window_mask,
)

OUT = ROOT / "benchmarks" / "results" / "mlm_masking.md"
ROWS, WIDTH = 8, 2048


def best_of(fn, rounds: int = 7, calls: int = 100) -> float:
    """The best of ``rounds`` rounds' mean CPU time of one call, in us."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t) / calls)
    return best * 1e6


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    docs: list[list[int]] = []
    total = 0
    while True:
        n = int(rng.integers(50, 350))
        if total + n > ROWS * WIDTH * 0.9:
            break
        docs.append(rng.integers(5, 30000, size=n).tolist())
        total += n
    masking = MLMMasking(mask_token_id=4, vocab_size=30000, special_ids=(0, 1, 2, 3, 4))
    sizes = np.array([len(d) for d in docs], dtype=np.int64)
    starts = np.cumsum(sizes) - sizes
    flat = np.concatenate([np.asarray(d, dtype=np.int64) for d in docs])
    table = PackTable(row_lengths=(WIDTH,), batch_sizes=(ROWS,), max_documents=(len(docs),))
    samples = [{"input_ids": d} for d in docs]
    plain = PackCollator(table, pad_token_id=0)
    masked = PackCollator(table, pad_token_id=0, mlm=masking)
    apply_us = best_of(lambda: masking.apply(flat, starts, sizes, epoch=0))
    plain_us = best_of(lambda: plain(samples))
    masked_us = best_of(lambda: masked(samples))
    document_ids = masked(samples)["document_ids"]
    full_us = best_of(lambda: document_mask(document_ids, causal=False), calls=3)
    window_us = best_of(lambda: document_mask(document_ids, causal=False, window=64), calls=3)
    pairs = []
    for causal in (True, False):
        for dtype in (torch.bool, torch.float32):

            def rebuilt(causal=causal, dtype=dtype):
                full = document_mask(document_ids, causal=causal, dtype=dtype)
                return full, document_mask(document_ids, causal=causal, dtype=dtype, window=64)

            def derived(causal=causal, dtype=dtype):
                full = document_mask(document_ids, causal=causal, dtype=dtype)
                return full, sliding_window_mask(full, 64, causal=causal)

            assert all(torch.equal(a, b) for a, b in zip(rebuilt(), derived(), strict=True))
            pairs.append((causal, dtype, best_of(rebuilt, calls=3), best_of(derived, calls=3)))
    text = (
        "# Masked-LM masking in the packing collator (benchmarks/mlm_masking.py)\n\n"
        f"Command: `PYTHONPATH=$PWD python benchmarks/mlm_masking.py`. {platform.machine()}, "
        f"torch {torch.__version__}, numpy {np.__version__}, a shared machine. One batch of "
        f"{ROWS} x {WIDTH} tokens: {len(docs)} documents, {total} tokens. CPU time of the "
        "thread, the best of 7 rounds of 100 calls, us.\n\n"
        "| MLMMasking.apply | PackCollator | PackCollator(mlm=) | mlm's share | "
        "document_mask | document_mask(window=64) |\n"
        "|---:|---:|---:|---:|---:|---:|\n"
        f"| {apply_us:.0f} | {plain_us:.0f} | {masked_us:.0f} | "
        f"{(masked_us - plain_us) / masked_us:.0%} | {full_us:.0f} | {window_us:.0f} |\n\n"
        "Both masks of a model with full and sliding-window layers (PackedInputs(sliding_window="
        "64).document_masks), us: rebuilt = two document_mask calls (up to s32), derived = "
        "one, the window by sliding_window_mask (s33); equal masks.\n\n"
        "| rows | mask dtype | rebuilt | derived | saved |\n|---|---|---:|---:|---:|\n"
        + "".join(
            f"| {'causal' if c else 'masked-LM'} | {str(d).removeprefix('torch.')} | {a:.0f} | "
            f"{b:.0f} | {1 - b / a:.0%} |\n"
            for c, d, a, b in pairs
        )
    )
    print(text)
    OUT.write_text(text)


if __name__ == "__main__":
    main()
