"""Serving without autotune stalls: ``ik.warmup`` before traffic, ``ik.no_autotune`` during it.

Why a new shape can stall: Dynamo guards on what it specialised (a static size, or the range
and 0/1-specialisation of a dynamic one); a guard failure recompiles the frame, and Inductor then
lowers every GEMM again and autotunes any ``op(shapes)`` whose timings are not in its autotune
cache.  ``warmup`` runs the compiled callable over representative inputs so that all of that
happens before traffic, and reports what each input caused; ``no_autotune`` proves it during
traffic.
"""

from __future__ import annotations

import logging
import statistics
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.knobs import torch_version
from ..core.recorder import Collector, ObservedBlock
from ..core.records import AutotuneRecord, CompileEvent, RuntimeEvent, format_table
from ..errors import AutotuneDuringServing, InvalidKnobValue
from .buckets import suggest_buckets
from .signature import _on_cuda
from .stalls import REACTIONS, no_stalls, profiler_cost

log = logging.getLogger("inductor_knobs.serving.warmup")


class AutotuneDuringServingWarning(UserWarning):
    """``no_autotune(on="warn")`` saw autotune benchmarking or a compilation."""


# -- warmup -------------------------------------------------------------------------------


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
        causes: the first call's first-call costs, timed (:class:`~inductor_knobs.core.records.RuntimeEvent`:
            compiles, autotuning, Triton compiles, CUDA graph recordings, profiled per-shape ATen costs
            such as a cuDNN SDPA plan build).
        shape: the item passed to ``factory`` (``shapes=``), or None for ``inputs=``.
        last_call_host_seconds: of the last call, the seconds until the callable returned (its host
            part: Python and kernel launches), before the CUDA synchronize.
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
        signatures: the input signatures warm-up called (``ik.no_stalls(warmup=report)`` treats them
            as seen, so its sampled profiler leaves warmed shapes alone).
        shape_seconds: per signature, the median seconds of its warm calls (the guard's per-shape
            steady state).
        host_share: the median over inputs of the last call's host part (until the callable
            returned) as a fraction of the whole call, or None with ``calls_per_input=1``.  Near 1,
            the GPU waits for the host: see the ``ik.capture_cuda_graphs`` fix.
        profiler_seconds: what ``torch.profiler`` (as ``ik.no_stalls`` samples new shapes) adds to a
            call at the first input's shape: the median of 3 profiled calls less the median of 3
            plain ones, interleaved (at least 0), or None without inputs.  ``ik.no_stalls(warmup=...)``
            names it ``profiler`` in a profiled stall.
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
            lines.append(f"profiling a call (ik.no_stalls does at new shapes) adds {1000 * self.profiler_seconds:.2f} ms")
        lines += [f"COLD: {c.text}" for c in self.cold]
        if self.probes and not self.cold:
            lines.append("no per-shape cost at the probes: shapes between the warmed ones cost what warm ones do")
        lines += [f"fix{' (recommended)' if i == 0 else ''}: {fix}" for i, fix in enumerate(self.fixes)]
        if self.records:
            lines += ["", format_table(self.records, top=3)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [s.to_dict() for s in self.steps],
            "probes": [s.to_dict() for s in self.probes],
            "steady_state_ms": self.steady_state_ms,
            "host_share": self.host_share,
            "profiler_seconds": self.profiler_seconds,
            "cold": [vars(c) for c in self.cold],
            "fixes": self.fixes,
            "recommended_buckets": list(self.recommended_buckets) if self.recommended_buckets else None,
        }


#: A probe whose first call costs more than this multiple of the steady state paid a per-shape cost.
COLD_RATIO = 2.0
#: A steady call whose host part (until the callable returned) is at least this share of it is host-bound.
HOST_BOUND = 0.8
#: What each per-shape cost is, for the report (``records.CAUSES`` says what the hook is).
PER_SHAPE = {
    "cudnn_sdpa_plan": "cuDNN SDPA builds an execution plan per exact sequence length",
    "dynamo_compile": "Dynamo recompiles for shapes outside its guards",
    "gemm_autotune": "Inductor autotunes GEMMs for shapes it has not benchmarked",
    "cudagraph_recording": "CUDA graph trees record one graph per shape",
    "cublas_first_call": "cuBLAS/cuBLASLt pays a first call per GEMM shape",
    "tunableop": "TunableOp tunes each new GEMM shape",
    "cudnn_conv": "cuDNN searches convolution algorithms per shape",
    "runtime_benchmark": "Inductor benchmarks Triton configs at a kernel's first run",
    "coordinate_descent": "Inductor's coordinate descent tunes at a kernel's first run",
    "triton_compile": "Triton compiles a kernel for a new specialisation",
    "aten_first_call": "an ATen op is slow at its first call per shape",
    "unattributed": "a first call at a new shape is slow for a reason no hook names",
}


def warmup(
    fn: Callable[..., Any],
    inputs: Iterable[Any] | None = None,
    *,
    shapes: Iterable[Any] | None = None,
    factory: Callable[[Any], Any] | None = None,
    calls_per_input: int = 2,
    probes: Iterable[Any] | str | None = "auto",
) -> WarmupReport:
    """Run a compiled callable over representative inputs so that traffic pays no first-call cost; say what is still cold.

    Args:
        fn: the compiled callable (``torch.compile``/``ik.compile`` result).
        inputs: one item per call: a tuple/list of positional arguments, a mapping of keyword
            arguments, or a single argument.
        shapes: instead of ``inputs``: one item per call, passed to ``factory``, which returns
            the call's inputs as above (for example ``lambda n: torch.randn(n, 3420, device="cuda")``).
            Inputs are made one at a time, so only one lives at once.
        factory: see ``shapes``.
        calls_per_input: calls per input (default 2: CUDA graph trees record on the second call,
            so ``mode="reduce-overhead"`` is warm too; the last call is the steady state).
        probes: shapes *not* warmed, passed to ``factory`` after warm-up to measure what a first call
            at an unseen shape costs.  ``"auto"`` (default): with int ``shapes``, the midpoints of the
            three largest gaps between warmed shapes; otherwise none.  None or ``[]``: no probes.

    Returns:
        A :class:`WarmupReport`: per input, the first and last call's seconds, the autotune
        records, the Dynamo (re)compilations with their reasons and the first call's timed causes
        (see :class:`~inductor_knobs.serving.stalls.no_stalls`); per probe the same; the steady state;
        the per-shape costs still cold and the fixes (pad to buckets with
        :func:`~inductor_knobs.serving.buckets.pad_to_bucket`, warm the whole range, or, for cuDNN SDPA
        plans, an SDPA backend without per-shape plans via ``ik.knobs(sdpa_backends=...)``).
        Autotune records need torch 2.5+; on 2.4 only compilations are reported.

    Raises:
        InvalidKnobValue: neither or both of ``inputs`` and ``shapes``/``factory``, ``calls_per_input``
            < 1, or probes without ``factory``.
        Anything ``fn`` raises.
    """
    if (inputs is None) == (shapes is None) or (shapes is not None and factory is None):
        raise InvalidKnobValue(
            f"warmup needs either inputs=... or shapes=... with factory=... (got inputs={inputs is not None}, "
            f"shapes={shapes is not None}, factory={factory is not None}) on torch {torch_version()}"
        )
    if isinstance(calls_per_input, bool) or not isinstance(calls_per_input, int) or calls_per_input < 1:
        raise InvalidKnobValue(f"warmup calls_per_input={calls_per_input!r} is invalid: allowed an int >= 1")
    shape_list = list(shapes) if shapes is not None else None
    probe_list = _probe_shapes(probes, shape_list)
    if probe_list and factory is None:
        raise InvalidKnobValue(f"warmup probes={probes!r} needs shapes=... with factory=... on torch {torch_version()}")
    # Warm-up diagnoses every new shape (quiet_after=inf) and keeps every call it makes (history=None).
    guard = no_stalls(on="record", profile="new-shapes", min_calls=10**9, quiet_after=float("inf"), history=None)
    items: Iterable[tuple[Any, Any]] = (
        ((None, item) for item in inputs) if inputs is not None else ((s, factory(s)) for s in shape_list or ())  # type: ignore[misc]
    )
    steps = [_warm(guard, fn, index, shape, item, calls_per_input) for index, (shape, item) in enumerate(items)]
    profiler_seconds = guard.profiler_seconds
    warm = [s.last_call_seconds for s in steps] if calls_per_input > 1 else []
    steady = 1000 * statistics.median(warm) if warm else None
    probed = [_warm(guard, fn, index, shape, factory(shape), 2) for index, shape in enumerate(probe_list)]  # type: ignore[misc]
    cold, fixes, buckets = _cold(steps, probed, steady)
    if any(c.kind == "python_gc" for s in steps + probed for c in s.causes):
        fixes.append(
            "gc.freeze() once warm-up is done: Python's full collections then skip everything the model, "
            "its compile and warm-up allocated (a collection paused a warm-up call; see the python_gc lines)"
        )
    shares = [s.last_call_host_seconds / s.last_call_seconds for s in steps if s.last_call_host_seconds and s.last_call_seconds]
    host_share = statistics.median(shares) if shares and calls_per_input > 1 else None
    if host_share is not None and host_share >= HOST_BOUND and any(_on_cuda(sig) for sig in guard.seen_shapes()):
        fixes.append(
            f"capture one CUDA graph per bucket and serve by replay (ik.capture_cuda_graphs(fn, shapes=buckets, "
            f"factory=...), fn compiled without CUDA graphs): {100 * host_share:.0f}% of a steady call is host work "
            "(Python, kernel launches), so the GPU waits for the host and any host slowdown reaches the response"
        )
    seen = guard.seen_shapes()
    return WarmupReport(steps, probed, steady, cold, fixes, buckets, seen, guard.shape_seconds(), host_share, profiler_seconds)


def _warm(guard: no_stalls, fn: Callable[..., Any], index: int, shape: Any, item: Any, calls: int) -> WarmupStep:
    args, kwargs = _as_call(item)
    with Collector(need_autotune=False) as seen:  # on torch 2.4 a warmup still reports compilations
        first = guard.call(fn, *args, **kwargs)
        del first
        causes = list(guard.last_causes)
        for _ in range(calls - 1):
            guard.call(fn, *args, **kwargs)
    seconds = guard.seconds[-calls:]
    if index == 0 and guard.profiler_seconds is None and calls > 1:  # at the first warm shape, once
        guard.profiler_seconds = profiler_cost(fn, args, kwargs)
    host = guard.last_host_seconds
    return WarmupStep(index, _describe(args, kwargs), seconds[0], seconds[-1], seen.records, seen.compiles, causes, shape, host)


def _as_call(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(item, Mapping):
        return (), dict(item)
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    return (item,), {}


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    import torch

    values = [*args, *kwargs.values()]
    return [f"{v.dtype}{list(v.shape)}" for v in values if isinstance(v, torch.Tensor)]


def _probe_shapes(probes: Iterable[Any] | str | None, shapes: list[Any] | None) -> list[Any]:
    if probes is None:
        return []
    if isinstance(probes, str):
        if probes != "auto":
            raise InvalidKnobValue(
                f"warmup probes={probes!r} is invalid on torch {torch_version()}: allowed 'auto', None or shapes"
            )
        ints = sorted({s for s in shapes or () if isinstance(s, int) and not isinstance(s, bool)})
        if len(ints) < 2 or len(ints) != len(shapes or ()):
            return []
        gaps = sorted(zip(ints, ints[1:]), key=lambda g: -(g[1] - g[0]))[:3]
        return sorted({(a + b) // 2 + 1 for a, b in gaps if b - a > 1})
    return list(probes)


def _cold(
    steps: list[WarmupStep], probes: list[WarmupStep], steady_ms: float | None
) -> tuple[list[ColdCause], list[str], tuple[int, ...] | None]:
    """What the probes paid, per cause, and the standard fixes for it."""
    if not probes or not steady_ms:
        return [], [], None
    paid: dict[str, list[tuple[Any, float, float]]] = {}
    for probe in probes:
        # Against the probe's own warm call where there is one: a model whose time grows with the
        # input (BERT) is slower at a long probe without paying any first-call cost.
        warm_ms = 1000 * probe.last_call_seconds if probe.last_call_seconds > 0 else steady_ms
        ratio = 1000 * probe.first_call_seconds / warm_ms
        if ratio < COLD_RATIO:
            continue
        kinds = [c.kind for c in sorted(probe.causes, key=lambda c: -c.seconds)] or ["unattributed"]
        for kind in dict.fromkeys(kinds):
            paid.setdefault(kind, []).append((probe.shape, round(1000 * probe.first_call_seconds, 3), round(ratio, 1)))
    warmed = [s.shape for s in steps if isinstance(s.shape, int) and not isinstance(s.shape, bool)]
    low_high = (min(warmed), max(warmed)) if warmed and len(warmed) == len(steps) else None
    cold_count = None if low_high is None else low_high[1] - low_high[0] + 1 - len(set(warmed))
    cold = []
    for kind, seen in paid.items():
        where = f"{cold_count:,} shapes in [{low_high[0]}, {low_high[1]}] are cold" if low_high else "unseen shapes are cold"  # type: ignore[index]
        at = ", ".join(f"{shape}: {ms:.1f} ms = {ratio:.1f}x" for shape, ms, ratio in seen)
        cold.append(
            ColdCause(
                kind,
                seen,
                cold_count,
                f"{PER_SHAPE.get(kind, kind)}: {where} (first calls at unseen shapes: {at} the second call there)",
            )
        )
    if not cold:
        return [], [], None
    fixes: list[str] = []
    buckets = None
    if low_high is not None:
        buckets = suggest_buckets(*low_high)
        step = buckets[1] - buckets[0] if len(buckets) > 1 else 0
        fixes.append(
            f"pad each request to a bucket (ik.pad_to_bucket(x, buckets, dim=...)) with buckets={list(buckets)} and warm "
            f"those {len(buckets)} shapes: every request then meets a warm shape, with fewer than {step} padded positions"
        )
        fixes.append(f"warm every shape in [{low_high[0]}, {low_high[1]}] ({cold_count:,} more calls of ik.warmup)")
    else:
        fixes.append("pad each request to a few bucket sizes (ik.pad_to_bucket) and warm those sizes")
    kinds = [c.kind for c in cold]
    if "cudnn_sdpa_plan" in kinds:
        fixes.append(
            "an SDPA backend without per-shape plans: compile and warm under "
            "ik.knobs(sdpa_backends='FLASH_ATTENTION,EFFICIENT_ATTENTION,MATH') (torch.compiler.reset() first); "
            "its steady state can be slower than cuDNN's: measure it"
        )
    if "dynamo_compile" in kinds:
        fixes.append("mark the varying dimension dynamic (torch._dynamo.mark_dynamic or torch.compile(dynamic=True))")
    return cold, fixes, buckets


# -- the guard --------------------------------------------------------------------------------


class no_autotune(ObservedBlock):
    """Detect autotune benchmarking or (re)compilation inside the block, i.e. during serving traffic.

    Args:
        on: the vocabulary of every guard (``ik.no_stalls`` too). ``"raise"`` (default): raise
            :class:`~inductor_knobs.errors.AutotuneDuringServing` at once, from inside torch, before
            Dynamo compiles (so the stall does not happen) or right after Inductor benchmarked; the
            block's exit re-raises it unwrapped from torch's ``BackendCompilerFailed``/
            ``InternalTorchDynamoError``.  ``"warn"``: an ``AutotuneDuringServingWarning`` per event.
            ``"record"``: kept in :attr:`violations` and logged at WARNING on the
            ``inductor_knobs.serving.warmup`` logger.  ``"log"`` is the deprecated spelling of ``"record"``.
            The message names the op and input shapes (or the recompiled function and its tensor
            inputs) and Dynamo's recompile reason.
        allow_cudagraph_recording: do not count CUDA graph recordings (torch 2.8+ reports them as
            compile events when ``mode="reduce-overhead"``/``"max-autotune"`` meets a new shape);
            they cost milliseconds, not seconds, and are neither autotuning nor recompilation.

    Attributes:
        violations: every event seen, as :class:`AutotuneRecord`/:class:`CompileEvent`.

    Autotune results read from Inductor's cache do not count: they cost no benchmarking.
    Observes the thread (and tasks) that entered it, like ``record_autotune``.  Autotune detection
    needs torch 2.5+; on 2.4 compilations are still caught (GEMM autotuning only happens inside one).
    ``torch._dynamo.reset()`` inside the block drops Dynamo's callbacks; entering again restores them.

    Raises:
        InvalidKnobValue: ``on`` is not one of raise, warn, record.
        AutotuneDuringServing: see ``on``.
    """

    def __init__(self, on: str = "raise", *, allow_cudagraph_recording: bool = True) -> None:
        if on == "log":
            warnings.warn("no_autotune(on='log') is deprecated: use on='record' (the same)", DeprecationWarning, stacklevel=2)
            on = "record"
        if on not in REACTIONS:
            raise InvalidKnobValue(
                f"no_autotune(on={on!r}) is invalid on torch {torch_version()}: allowed {', '.join(REACTIONS)}"
            )
        self.on = on
        self.allow_cudagraph_recording = allow_cudagraph_recording
        self.violations: list[AutotuneRecord | CompileEvent] = []
        self._last_compile: CompileEvent | None = None
        self._error: AutotuneDuringServing | None = None

    def on_compile(self, event: CompileEvent) -> None:
        if event.trigger == "cudagraph_recording" and self.allow_cudagraph_recording:
            return
        self._last_compile = event
        self._violate(
            f"{event.describe()} during serving (inside ik.no_autotune). Warm this input up before traffic "
            "with ik.warmup(...), or mark the varying dimension dynamic (torch._dynamo.mark_dynamic)",
            event,
        )

    def on_autotune(self, record: AutotuneRecord) -> None:
        if record.from_cache:
            return
        seconds = f" in {record.benchmark_seconds:.3f} s" if record.benchmark_seconds is not None else ""
        cause = self._last_compile.describe() if self._last_compile else "a compilation that started before this block"
        self._violate(
            f"autotune benchmarking during serving (inside ik.no_autotune): {record.signature} benchmarked "
            f"{len(record.choices)} choices{seconds}, winner {record.winner}; caused by {cause}. Warm this "
            "shape up before traffic with ik.warmup(...)",
            record,
        )

    def _violate(self, message: str, event: AutotuneRecord | CompileEvent) -> None:
        self.violations.append(event)
        if self.on == "raise":
            self._error = AutotuneDuringServing(message, event)
            raise self._error
        if self.on == "warn":
            warnings.warn(message, AutotuneDuringServingWarning, stacklevel=2)
        else:
            log.warning("%s", message)

    need_autotune = False  # on torch 2.4 compilations are still caught

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        super().__exit__(exc_type, exc, tb)
        error, self._error = self._error, None
        if error is None or exc is error:
            return
        # torch wraps exceptions raised inside compilation; hand the user ours.  If torch
        # swallowed it (suppress_errors fell back to eager), raise it now.
        raise error from exc
