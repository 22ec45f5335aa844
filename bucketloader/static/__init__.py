"""Static, sync-free subsampling for use inside models (and under ``torch.compile``).

Output shapes depend only on the arguments, never on the data: see
:mod:`bucketloader.static.subsample` for the functions and the NOTEs on randomness and compile.
"""

from bucketloader.static.subsample import (
    BalancedSubsampler,
    Selection,
    Subsample,
    balanced_subsample,
    masked_mean,
    masked_select_k,
    masked_sum,
)

__all__ = [
    "BalancedSubsampler",
    "Selection",
    "Subsample",
    "balanced_subsample",
    "masked_mean",
    "masked_select_k",
    "masked_sum",
]
