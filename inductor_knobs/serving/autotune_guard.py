"""``ik.serving.no_autotune``: a block that catches autotune benchmarking or a (re)compilation during serving traffic.

It hears the compile-event channel (:mod:`inductor_knobs.core.observers`'s hooks, through
:class:`~inductor_knobs.core.recorder.ObservedBlock`): a compile event, or an autotune record that
was not read from Inductor's cache, is a violation, and ``on`` says whether it raises (from inside
torch, before Dynamo compiles), warns or is recorded.
"""

from __future__ import annotations

import logging
import warnings

from .. import AutotuneRecord, CompileEvent
from ..errors import InvalidKnobValue, torch_version
from ..ext import ObservedBlock
from .errors import AutotuneDuringServing, AutotuneDuringServingWarning
from .stalls import REACTIONS

# The logger's name is the module's before the guard had one of its own: logging configurations name it.
log = logging.getLogger("inductor_knobs.serving.warmup")


class no_autotune(ObservedBlock):
    """Detect autotune benchmarking or (re)compilation inside the block, i.e. during serving traffic.

    Args:
        on: the vocabulary of every guard (``ik.serving.no_stalls`` too). ``"raise"`` (default): raise
            :class:`~inductor_knobs.serving.errors.AutotuneDuringServing` at once, from inside torch, before
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
            f"{event.describe()} during serving (inside ik.serving.no_autotune). Warm this input up before traffic "
            "with ik.serving.warmup(...), or mark the varying dimension dynamic (torch._dynamo.mark_dynamic)",
            event,
        )

    def on_autotune(self, record: AutotuneRecord) -> None:
        if record.from_cache:
            return
        seconds = f" in {record.benchmark_seconds:.3f} s" if record.benchmark_seconds is not None else ""
        cause = self._last_compile.describe() if self._last_compile else "a compilation that started before this block"
        self._violate(
            f"autotune benchmarking during serving (inside ik.serving.no_autotune): {record.signature} benchmarked "
            f"{len(record.choices)} choices{seconds}, winner {record.winner}; caused by {cause}. Warm this "
            "shape up before traffic with ik.serving.warmup(...)",
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
