"""Static, sync-free subsampling for use inside models (and under ``torch.compile``).

Output shapes depend only on the arguments, never on the data: see
:mod:`bucketloader.static.subsample` for the functions and the NOTEs on randomness and compile.
The package's public names are that module's (its ``__all__``, listed once there).
"""

from bucketloader.static import subsample
from bucketloader.static.subsample import *  # noqa: F403

__all__ = subsample.__all__
