"""The ranks of a job: from the arguments, else from ``torch.distributed``, in one place.

Every sampler and stream takes ``num_replicas`` / ``rank``; when they are left out, an
initialised default process group supplies them (as ``torch.utils.data.DistributedSampler``
does), else the job is one process.
"""

from __future__ import annotations

from typing import Any

from bucketloader._validation import check_int


def default_ranks() -> tuple[int, int]:
    """``(world size, rank)`` of the default process group, or ``(1, 0)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def resolve_ranks(num_replicas: Any, rank: Any) -> tuple[int, int]:
    """``(num_replicas, rank)`` from the arguments, else from ``torch.distributed``, checked.

    Example:
        >>> resolve_ranks(4, 3)
        (4, 3)
        >>> resolve_ranks(None, None)  # no process group: one process
        (1, 0)
    """
    world, me = default_ranks()
    replicas = check_int("num_replicas", world if num_replicas is None else num_replicas, minimum=1)
    rank = check_int("rank", me if rank is None else rank)
    if not 0 <= rank < replicas:
        raise ValueError(
            f"rank must be an int >= 0 and < num_replicas={replicas}, got rank={rank}; give "
            f"each process its own rank in 0..{replicas - 1}"
        )
    return replicas, rank
