"""The sampler's state dict: small, JSON-serialisable and strict."""

from __future__ import annotations

from typing import Any

STATE_VERSION = 1


def make_state(epoch: int, batches_yielded: int, config: dict[str, Any]) -> dict[str, Any]:
    """``{"version", "epoch", "batches_yielded", "config"}`` with plain JSON types only."""
    return {
        "version": STATE_VERSION,
        "epoch": int(epoch),
        "batches_yielded": int(batches_yielded),
        "config": dict(config),
    }


def check_state(state: Any, config: dict[str, Any]) -> tuple[int, int]:
    """Validate ``state`` against this sampler's ``config``; return ``(epoch, batches_yielded)``.

    Every mismatch names the key, the saved value and the current one.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from BucketSampler.state_dict(), got {state!r}")
    missing = [k for k in ("version", "epoch", "batches_yielded", "config") if k not in state]
    if missing:
        raise ValueError(
            f"state is missing {missing}; pass a dict from BucketSampler.state_dict(), "
            f"got keys {sorted(state)}"
        )
    if state["version"] != STATE_VERSION:
        raise ValueError(
            f"state has version={state['version']!r} but this BucketSampler reads "
            f"version={STATE_VERSION}"
        )
    saved = state["config"]
    if not isinstance(saved, dict):
        raise ValueError(f"state['config'] must be a dict, got {saved!r}")
    for key, value in config.items():
        if key not in saved:
            raise ValueError(f"state['config'] has no {key!r}; it was saved by another version")
        if saved[key] != value:
            hint = (
                " (the lengths, boundaries, batch sizes or last_batch differ)"
                if key == "plan_digest"
                else ""
            )
            raise ValueError(
                f"state is from a different configuration: {key}={saved[key]!r} in the state "
                f"but {key}={value!r} in this sampler{hint}; build the sampler exactly as when "
                "the state was saved"
            )
    epoch, pos = state["epoch"], state["batches_yielded"]
    for name, val in (("epoch", epoch), ("batches_yielded", pos)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 0:
            raise ValueError(f"state[{name!r}] must be an int >= 0, got {val!r}")
    if pos > config["num_batches"]:
        raise ValueError(
            f"state['batches_yielded']={pos} exceeds the epoch's {config['num_batches']} batches"
        )
    return epoch, pos
