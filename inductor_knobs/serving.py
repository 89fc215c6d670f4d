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
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import AutotuneDuringServing, InvalidKnobValue
from .knobs import torch_version
from .observe import ObservedBlock
from .recorder import Collector
from .records import AutotuneRecord, CompileEvent, format_table

log = logging.getLogger("inductor_knobs.serving")

REACTIONS = ("raise", "warn", "log")


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
    """

    index: int
    inputs: list[str]
    first_call_seconds: float
    last_call_seconds: float
    autotune: list[AutotuneRecord] = field(default_factory=list)
    compiles: list[CompileEvent] = field(default_factory=list)


@dataclass(frozen=True)
class WarmupReport:
    """All warm-up steps, in input order."""

    steps: list[WarmupStep]

    @property
    def records(self) -> list[AutotuneRecord]:
        return [r for s in self.steps for r in s.autotune]

    @property
    def compiles(self) -> list[CompileEvent]:
        return [e for s in self.steps for e in s.compiles]

    def table(self) -> str:
        """One line per input (seconds, compiles, autotuned ops), then the compile reasons and autotune tables."""
        lines = [f"{'#':>3}  {'inputs':<40} {'first call s':>12} {'warm call s':>11} {'compiles':>8} {'autotuned':>9}"]
        for s in self.steps:
            fresh = sum(not r.from_cache for r in s.autotune)
            lines.append(
                f"{s.index:>3}  {', '.join(s.inputs)[:40]:<40} {s.first_call_seconds:>12.4f} {s.last_call_seconds:>11.4f} "
                f"{len(s.compiles):>8} {fresh:>9}"
            )
            lines += [f"       {e.describe()}" for e in s.compiles]
        if self.records:
            lines += ["", format_table(self.records, top=3)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [
                {
                    "index": s.index,
                    "inputs": s.inputs,
                    "first_call_seconds": s.first_call_seconds,
                    "last_call_seconds": s.last_call_seconds,
                    "autotune": [r.to_dict() for r in s.autotune],
                    "compiles": [e.to_dict() for e in s.compiles],
                }
                for s in self.steps
            ]
        }


def warmup(
    fn: Callable[..., Any],
    inputs: Iterable[Any] | None = None,
    *,
    shapes: Iterable[Any] | None = None,
    factory: Callable[[Any], Any] | None = None,
    calls_per_input: int = 2,
) -> WarmupReport:
    """Run a compiled callable over representative inputs so that serving traffic compiles and autotunes nothing.

    Args:
        fn: the compiled callable (``torch.compile``/``ik.compile`` result).
        inputs: one item per call: a tuple/list of positional arguments, a mapping of keyword
            arguments, or a single argument.
        shapes: instead of ``inputs``: one item per call, passed to ``factory``, which returns
            the call's inputs as above (for example ``lambda n: torch.randn(n, 3420, device="cuda")``).
            Inputs are made one at a time, so only one lives at once.
        factory: see ``shapes``.
        calls_per_input: calls per input (default 2: CUDA graph trees record on the second call,
            so ``mode="reduce-overhead"`` is warm too).

    Returns:
        A :class:`WarmupReport`: per input, the first and last call's seconds, the autotune
        records and the Dynamo (re)compilations with their reasons.  Autotune records need
        torch 2.5+; on 2.4 only compilations are reported.

    Raises:
        InvalidKnobValue: neither or both of ``inputs`` and ``shapes``/``factory``, or
            ``calls_per_input`` < 1.
        Anything ``fn`` raises.
    """
    if (inputs is None) == (shapes is None) or (shapes is not None and factory is None):
        raise InvalidKnobValue(
            f"warmup needs either inputs=... or shapes=... with factory=... (got inputs={inputs is not None}, "
            f"shapes={shapes is not None}, factory={factory is not None}) on torch {torch_version()}"
        )
    if isinstance(calls_per_input, bool) or not isinstance(calls_per_input, int) or calls_per_input < 1:
        raise InvalidKnobValue(f"warmup calls_per_input={calls_per_input!r} is invalid: allowed an int >= 1")
    items: Iterable[Any] = inputs if inputs is not None else (factory(s) for s in shapes)  # type: ignore[misc,union-attr]
    steps = []
    for index, item in enumerate(items):
        args, kwargs = _as_call(item)
        with Collector(need_autotune=False) as seen:  # on torch 2.4 a warmup still reports compilations
            seconds = [_timed_call(fn, args, kwargs) for _ in range(calls_per_input)]
        steps.append(WarmupStep(index, _describe(args, kwargs), seconds[0], seconds[-1], seen.records, seen.compiles))
    return WarmupReport(steps)


def _as_call(item: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(item, Mapping):
        return (), dict(item)
    if isinstance(item, (tuple, list)):
        return tuple(item), {}
    return (item,), {}


def _timed_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    import torch

    on_cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in (*args, *kwargs.values()))
    start = time.perf_counter()
    fn(*args, **kwargs)
    if on_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    import torch

    values = [*args, *kwargs.values()]
    return [f"{v.dtype}{list(v.shape)}" for v in values if isinstance(v, torch.Tensor)]


# -- the guard --------------------------------------------------------------------------------


class no_autotune(ObservedBlock):
    """Detect autotune benchmarking or (re)compilation inside the block, i.e. during serving traffic.

    Args:
        on: ``"raise"`` (default): raise :class:`~inductor_knobs.errors.AutotuneDuringServing`
            at once, from inside torch, before Dynamo compiles (so the stall does not happen) or
            right after Inductor benchmarked; the block's exit re-raises it unwrapped from
            torch's ``BackendCompilerFailed``/``InternalTorchDynamoError``.  ``"warn"``: an
            ``AutotuneDuringServingWarning`` per event.  ``"log"``: a WARNING on the
            ``inductor_knobs.serving`` logger.  The message names the op and input shapes (or the
            recompiled function and its tensor inputs) and Dynamo's recompile reason.
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
        InvalidKnobValue: ``on`` is not one of raise, warn, log.
        AutotuneDuringServing: see ``on``.
    """

    def __init__(self, on: str = "raise", *, allow_cudagraph_recording: bool = True) -> None:
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
