"""How a slow call's time is divided among its causes: hook intervals counted once, the guard's sampled
profiler, and TunableOp's state (what ``ik.no_stalls`` names beside torch's hooks)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from ..core.records import RuntimeEvent


def _covered(events: Iterable[RuntimeEvent]) -> float:
    """Seconds covered by the union of the events' intervals (nested hooks are counted once)."""
    spans = sorted((e.started, e.started + e.seconds) for e in events if e.started is not None)
    total, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def _explained(causes: list[RuntimeEvent], seconds: float) -> float:
    """Seconds of a call that its causes account for: hook intervals once (they nest), other causes summed."""
    timed = _covered(c for c in causes if c.started is not None)
    return min(seconds, timed + sum(c.seconds for c in causes if c.started is None))


def _sampling_profiler() -> Any:
    """The profiler the guard samples new shapes with: CPU activity and input shapes (the per-shape ops' detail)."""
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU], record_shapes=True)


def _tunableop_tuning() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch.cuda.tunable.is_enabled() and torch.cuda.tunable.tuning_is_enabled())  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):  # a build without TunableOp (CPU)
        return False
