"""How a slow call's time is divided among its causes: hook intervals counted once, other causes summed,
and TunableOp's state (whether a first cuBLAS call at a shape was TunableOp tuning it)."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from .. import RuntimeEvent


def _covered(events: Iterable[RuntimeEvent]) -> float:
    """Seconds covered by the union of the events' intervals (nested hooks are counted once)."""
    spans = sorted((e.started, e.started + e.seconds) for e in events if e.started is not None)
    total, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def explained(causes: list[RuntimeEvent], seconds: float) -> float:
    """Seconds of a call that its causes account for: hook intervals once (they nest), other causes summed."""
    timed = _covered(c for c in causes if c.started is not None)
    return min(seconds, timed + sum(c.seconds for c in causes if c.started is None))


def tunableop_tuning() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch.cuda.tunable.is_enabled() and torch.cuda.tunable.tuning_is_enabled())  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):  # a build without TunableOp (CPU)
        return False
