"""What a serving guard found: each :class:`Stall` with its causes, and the :class:`StallReport` over all calls."""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field
from typing import Any

from .. import RuntimeEvent
from .first_call_costs import CAUSES
from .latency import RELATIVE_ERROR, Latencies


@dataclass(frozen=True)
class Stall:
    """One call over the guard's threshold, and what it paid for.

    Attributes:
        index: the call's number in the guard (0-based).
        seconds: wall seconds of the call (CUDA synchronised at its end).
        baseline_seconds: the steady state it was judged against, or None when none was known yet.
        threshold_seconds: the threshold, or None (then the call was judged by its causes alone).
        inputs: the call's tensor arguments as ``"torch.bfloat16[1, 901]"``.
        new_shape: the call's input shapes had not been seen by this guard before.
        profiled: the call ran under ``torch.profiler``.
        causes: what torch's hooks and the profiler named, largest first; an ``unattributed`` entry
            holds the time nothing accounts for (when that is over half of the excess).
    """

    index: int
    seconds: float
    baseline_seconds: float | None
    threshold_seconds: float | None
    inputs: list[str]
    new_shape: bool
    profiled: bool
    causes: list[RuntimeEvent] = field(default_factory=list)

    @property
    def attributed(self) -> bool:
        """Whether named causes account for the stall (no ``unattributed`` entry)."""
        return bool(self.causes) and all(c.kind != "unattributed" for c in self.causes)

    @property
    def primary(self) -> str:
        """The kind of the largest cause."""
        return self.causes[0].kind if self.causes else "unattributed"

    def describe(self) -> str:
        """One paragraph: the call, its time against the baseline, and each cause with its time."""
        base = f" (steady state {1000 * self.baseline_seconds:.2f} ms)" if self.baseline_seconds else ""
        shape = ", a new shape" if self.new_shape else ""
        lines = [f"call {self.index} [{', '.join(self.inputs) or 'no tensors'}{shape}] took {1000 * self.seconds:.2f} ms{base}"]
        for cause in self.causes:
            detail = f": {cause.detail}" if cause.detail else ""
            lines.append(f"  {1000 * cause.seconds:9.2f} ms  {cause.kind} ({CAUSES.get(cause.kind, cause.kind)}){detail}")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the call, its time against the baseline, and each cause with its time."""
        base = f" (steady {1000 * self.baseline_seconds:.2f} ms)" if self.baseline_seconds else ""
        causes = ", ".join(f"{c.kind} {1000 * c.seconds:.2f} ms" for c in self.causes) or "no cause named"
        return f"call {self.index} [{', '.join(self.inputs) or 'no tensors'}] took {1000 * self.seconds:.2f} ms{base}: {causes}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "seconds": self.seconds,
            "baseline_seconds": self.baseline_seconds,
            "threshold_seconds": self.threshold_seconds,
            "inputs": self.inputs,
            "new_shape": self.new_shape,
            "profiled": self.profiled,
            "attributed": self.attributed,
            "causes": [c.to_dict() for c in self.causes],
        }


@dataclass(frozen=True)
class StallReport:
    """A guard's calls and stalls: exact counts and totals, quantiles within 1%, and the recent history.

    Attributes:
        seconds: the recent calls' wall seconds, in call order (the guard's ``history``; all of them
            with ``history=None``).
        stalls: the recent stalls, with their causes (as many as ``seconds`` keeps).
        latencies: every call's time, summarised (:class:`~inductor_knobs.serving.latency.Latencies`), or None
            for a report made from ``seconds`` alone.
        totals: per cause kind, ``(stalls it appears in, its seconds)`` over every stall, or None.
        stall_count: stalls in all (None: ``len(stalls)``).
        unattributed_count: stalls with an ``unattributed`` cause in all (None: counted from ``stalls``).
    """

    seconds: list[float]
    stalls: list[Stall]
    latencies: Latencies | None = None
    totals: dict[str, tuple[int, float]] | None = None
    stall_count: int | None = None
    unattributed_count: int | None = None

    @property
    def calls(self) -> int:
        return self.latencies.count if self.latencies is not None else len(self.seconds)

    def percentile_ms(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) of call times in ms: within 1% of the exact order statistic over
        every call (the guard's log-bucket histogram), or exact over ``seconds`` without one."""
        if self.latencies is not None:
            value = self.latencies.quantile(q / 100)
            return None if value is None else 1000 * value
        if not self.seconds:
            return None
        if len(self.seconds) == 1:
            return 1000 * self.seconds[0]
        cuts = statistics.quantiles(self.seconds, n=1000, method="inclusive")
        return 1000 * ([min(self.seconds), *cuts, max(self.seconds)][round(q * 10)])

    @property
    def unattributed(self) -> list[Stall]:
        """The recent stalls with an ``unattributed`` cause."""
        return [s for s in self.stalls if not s.attributed]

    def by_cause(self) -> dict[str, tuple[int, float]]:
        """Per cause kind: (stalls it appears in, its seconds over all stalls), largest first."""
        if self.totals is not None:
            return dict(sorted(self.totals.items(), key=lambda kv: -kv[1][1]))
        found: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])  # type: ignore[arg-type,return-value]
        for stall in self.stalls:
            for kind in dict.fromkeys(c.kind for c in stall.causes):
                found[kind][0] += 1
            for cause in stall.causes:
                found[cause.kind][1] += cause.seconds
        return {k: (int(v[0]), v[1]) for k, v in sorted(found.items(), key=lambda kv: -kv[1][1])}

    def _counts(self) -> tuple[int, int]:
        stalls = len(self.stalls) if self.stall_count is None else self.stall_count
        unattributed = len(self.unattributed) if self.unattributed_count is None else self.unattributed_count
        return stalls, unattributed

    def table(self) -> str:
        """Calls, p50/p99/max, then one line per cause: stalls, total ms, what it is."""
        p50, p99, top = self.percentile_ms(50), self.percentile_ms(99), self.percentile_ms(100)
        stalls, unattributed = self._counts()
        lines = [
            f"{self.calls} calls: p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(top)}; {stalls} stalls, {unattributed} unattributed",
        ]
        if stalls:
            lines.append(f"{'cause':<22} {'stalls':>6} {'total ms':>10}  what")
            for kind, (count, seconds) in self.by_cause().items():
                lines.append(f"{kind:<22} {count:>6} {1000 * seconds:>10.1f}  {CAUSES.get(kind, kind)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        stalls, unattributed = self._counts()
        return {
            "calls": self.calls,
            "p50_ms": self.percentile_ms(50),
            "p99_ms": self.percentile_ms(99),
            "max_ms": self.percentile_ms(100),
            "quantile_relative_error": RELATIVE_ERROR if self.latencies is not None else 0.0,
            "stall_count": stalls,
            "stalls": [s.to_dict() for s in self.stalls],
            "unattributed": unattributed,
            "by_cause": {k: {"stalls": c, "seconds": s} for k, (c, s) in self.by_cause().items()},
        }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"
