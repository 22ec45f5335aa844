"""Bucketing strategies, registered by name (see :data:`STRATEGIES`)."""

from bucketloader.strategies import batched, heuristics, lp, optimal  # noqa: F401  (registration)
from bucketloader.strategies._registry import (
    STRATEGIES,
    StrategyResult,
    register_strategy,
    resolve_strategy,
    strategy_defaults,
)

__all__ = [
    "STRATEGIES",
    "StrategyResult",
    "register_strategy",
    "resolve_strategy",
    "strategy_defaults",
]
