"""What ``ik.serving.warmup`` found: one :class:`WarmupStep` per input and probe, what is still cold, and the
:class:`WarmupReport`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import AutotuneRecord, CompileEvent, RuntimeEvent
from ..ext import format_table
from .per_bucket import BucketTuning
from .sdpa_trial import TrialVerdict


@dataclass(frozen=True)
class WarmupStep:
    """What one warm-up input caused.

    Attributes:
        index: position in the inputs.
        inputs: the tensor arguments as ``"torch.bfloat16[560, 3420]"``.
        first_call_seconds: wall seconds of the first call (compilation and autotuning included;
            CUDA synchronised).
        last_call_seconds: wall seconds of the last of ``calls_per_input`` calls.
        autotune: the autotune records the input caused (torch 2.5+).
        compiles: the Dynamo compilations it caused, with recompile reasons.
        causes: the first call's first-call costs, timed (:class:`~inductor_knobs.core.events.RuntimeEvent`:
            compiles, autotuning, Triton compiles, CUDA graph recordings, profiled per-shape ATen costs
            such as a cuDNN SDPA plan build).
        shape: the item passed to ``factory`` (``shapes=``), or None for ``inputs=``.
        last_call_host_seconds: of the last call, the seconds until the callable returned (its host
            part: Python and kernel launches), before the CUDA synchronize.
        signature: the input signature of the calls (tensor dtypes, shapes and devices).
    """

    index: int
    inputs: list[str]
    first_call_seconds: float
    last_call_seconds: float
    autotune: list[AutotuneRecord] = field(default_factory=list)
    compiles: list[CompileEvent] = field(default_factory=list)
    causes: list[RuntimeEvent] = field(default_factory=list)
    shape: Any = None
    last_call_host_seconds: float | None = None
    signature: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "shape": self.shape if isinstance(self.shape, (int, float, str, type(None))) else repr(self.shape),
            "inputs": self.inputs,
            "first_call_seconds": self.first_call_seconds,
            "last_call_seconds": self.last_call_seconds,
            "last_call_host_seconds": self.last_call_host_seconds,
            "autotune": [r.to_dict() for r in self.autotune],
            "compiles": [e.to_dict() for e in self.compiles],
            "causes": [c.to_dict() for c in self.causes],
        }


@dataclass(frozen=True)
class ColdCause:
    """A first-call cost that warmup did not cover: a probe at an unseen shape paid it.

    Attributes:
        kind: the cause (``cudnn_sdpa_plan``, ``dynamo_compile``, …; see ``records.CAUSES``).
        probes: ``(shape, first-call ms, ratio to its own warm call)`` of each probe that paid it.
        cold_shapes: how many shapes in the warmed range are still cold (int shapes only), else None.
        text: one sentence for people.
    """

    kind: str
    probes: list[tuple[Any, float, float]]
    cold_shapes: int | None
    text: str


@dataclass(frozen=True)
class WarmupReport:
    """All warm-up steps in input order, the probes at unseen shapes, and what is still cold.

    Attributes:
        steps: one per warm-up input.
        probes: one per probe shape, measured after warm-up (first call at an unseen shape).
        steady_state_ms: the median over inputs of the last call's ms, or None with ``calls_per_input=1``:
            a summary for reading, not a baseline (a model whose time grows with its input would
            "stall" at every call at its largest shape); give a guard ``warmup=report`` instead,
            whose per-shape medians are the baseline of each shape.
        cold: the per-shape costs the probes paid.
        fixes: the standard fixes for them, the recommended one first.
        recommended_buckets: the bucket sizes of the first fix, when it is padding to buckets.
        signatures: the input signatures warm-up called (``ik.serving.no_stalls(warmup=report)`` treats them
            as seen, so its sampled profiler leaves warmed shapes alone).
        shape_seconds: per signature, the median seconds of its warm calls (the guard's per-shape
            steady state).
        host_share: the median over inputs of the last call's host part (until the callable
            returned) as a fraction of the whole call, or None with ``calls_per_input=1``.  Near 1,
            the GPU waits for the host: see the ``ik.serving.capture_cuda_graphs`` fix.
        profiler_seconds: what ``torch.profiler`` (as ``ik.serving.no_stalls`` samples new shapes) adds to a
            call at the first input's shape: the median of 3 profiled calls less the median of 3
            plain ones, interleaved (at least 0), or None without inputs.  ``ik.serving.no_stalls(warmup=...)``
            names it ``profiler`` in a profiled stall.
        trials: fixes measured on this model both ways (``ik.serving.warmup(cudnn_sdpa_trial=...)``): each with its
            gain, its cost and whether ``fixes`` recommends it (only where it measured a gain).
        buckets: with ``per_bucket=``: per bucket, its own graph's compile seconds, ms per call of it and of
            ``dynamic_fn``'s one graph, the gain and whether it is kept
            (:class:`~inductor_knobs.serving.per_bucket.BucketTuning`).
        serving_fn: what to serve with: ``fn``, or with ``dynamic_fn`` a
            :class:`~inductor_knobs.serving.per_bucket.BucketRouter` (kept buckets to ``fn``, the rest to ``dynamic_fn``).
    """

    steps: list[WarmupStep]
    probes: list[WarmupStep] = field(default_factory=list)
    steady_state_ms: float | None = None
    cold: list[ColdCause] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    recommended_buckets: tuple[int, ...] | None = None
    signatures: frozenset[tuple[Any, ...]] = field(default=frozenset(), repr=False, compare=False)
    shape_seconds: Mapping[tuple[Any, ...], float] = field(default_factory=dict, repr=False, compare=False)
    host_share: float | None = None
    profiler_seconds: float | None = None
    trials: list[TrialVerdict] = field(default_factory=list)
    buckets: list[BucketTuning] = field(default_factory=list)
    serving_fn: Any = field(default=None, repr=False, compare=False)

    @property
    def records(self) -> list[AutotuneRecord]:
        return [r for s in self.steps for r in s.autotune]

    @property
    def compiles(self) -> list[CompileEvent]:
        return [e for s in self.steps for e in s.compiles]

    def table(self) -> str:
        """One line per input and probe (seconds, compiles, autotuned ops, first-call costs), then what is cold and the fixes."""
        lines = [f"{'#':>3}  {'inputs':<40} {'first call s':>12} {'warm call s':>11} {'compiles':>8} {'autotuned':>9}"]
        for label, steps in (("", self.steps), ("probe ", self.probes)):
            for s in steps:
                fresh = sum(not r.from_cache for r in s.autotune)
                lines.append(
                    f"{s.index:>3}  {(label + ', '.join(s.inputs))[:40]:<40} {s.first_call_seconds:>12.4f} "
                    f"{s.last_call_seconds:>11.4f} {len(s.compiles):>8} {fresh:>9}"
                )
                lines += [f"       {e.describe()}" for e in s.compiles]
                costs = [c for c in s.causes if c.kind != "dynamo_compile"]  # compiles are listed above
                lines += [f"       {1000 * c.seconds:9.2f} ms {c.kind}: {c.detail}" for c in costs]
        if self.steady_state_ms is not None:
            host = "" if self.host_share is None else f", {100 * self.host_share:.0f}% of it host work (Python, kernel launches)"
            lines.append(f"steady state: {self.steady_state_ms:.3f} ms per call (median of the warm calls){host}")
        if self.profiler_seconds is not None:
            lines.append(f"profiling a call (ik.serving.no_stalls does at new shapes) adds {1000 * self.profiler_seconds:.2f} ms")
        lines += self._bucket_lines()
        lines += [f"COLD: {c.text}" for c in self.cold]
        if self.probes and not self.cold:
            lines.append("no per-shape cost at the probes: shapes between the warmed ones cost what warm ones do")
        lines += [f"fix{' (recommended)' if i == 0 else ''}: {fix}" for i, fix in enumerate(self.fixes)]
        lines += [f"measured, not recommended: {t.text}" for t in self.trials if not t.recommended]
        if self.records:
            lines += ["", format_table(self.records, top=3)]
        return "\n".join(lines)

    def _bucket_lines(self) -> list[str]:
        if not self.buckets:
            return []
        lines = [f"{'bucket':>8} {'compile s':>9} {'own graph ms':>12} {'dynamic ms':>10} {'gain':>6}  decision"]
        for r in self.buckets:
            dynamic = "-" if r.dynamic_ms is None else f"{r.dynamic_ms:.4f}"
            gain = "-" if r.gain is None else f"{r.gain:.2f}x"
            decision = "own graph" if r.kept else "dynamic graph"
            lines.append(
                f"{r.bucket!s:>8} {r.compile_seconds:>9.3f} {r.per_bucket_ms:>12.4f} {dynamic:>10} {gain:>6}  {decision}"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "buckets": [r.to_dict() for r in self.buckets],
            "steps": [s.to_dict() for s in self.steps],
            "probes": [s.to_dict() for s in self.probes],
            "steady_state_ms": self.steady_state_ms,
            "host_share": self.host_share,
            "profiler_seconds": self.profiler_seconds,
            "cold": [vars(c) for c in self.cold],
            "fixes": self.fixes,
            "recommended_buckets": list(self.recommended_buckets) if self.recommended_buckets else None,
            "trials": [
                {
                    "fix": t.fix,
                    "off": vars(t.off),
                    "on": vars(t.on),
                    "gain_ms": t.gain_ms,
                    "cost_ms": t.cost_ms,
                    "recommended": t.recommended,
                    "text": t.text,
                }
                for t in self.trials
            ],
        }
