"""The serving satellite's exceptions and warnings, in the package's one hierarchy.

Errors derive from :class:`inductor_knobs.errors.KnobsError` and warnings from
:class:`inductor_knobs.errors.KnobsWarning`, so ``except ik.errors.KnobsError`` catches these too.
"""

from __future__ import annotations

from ..errors import InvalidKnobValue, KnobsError, KnobsWarning


class AutotuneDuringServing(KnobsError, RuntimeError):
    """Autotune benchmarking or a (re)compilation happened inside ``ik.serving.no_autotune()``.

    Attributes:
        event: the :class:`~inductor_knobs.core.events.AutotuneRecord` or
            :class:`~inductor_knobs.core.events.CompileEvent` that violated the guard.
    """

    def __init__(self, message: str, event: object) -> None:
        super().__init__(message)
        self.event = event


class StallDuringServing(KnobsError, RuntimeError):
    """A call inside ``ik.serving.no_stalls(on="raise")`` took longer than its threshold.

    Attributes:
        stall: the :class:`~inductor_knobs.serving.stall_report.Stall`: the call's seconds, its baseline and the
            causes torch's hooks and the profiler named.
    """

    def __init__(self, message: str, stall: object) -> None:
        super().__init__(message)
        self.stall = stall


class GraphCaptureFailed(KnobsError, RuntimeError):
    """``ik.serving.capture_cuda_graphs`` could not capture a shape (no CUDA, a CPU input, an op that synchronises)."""


class GraphCallRefused(KnobsError, RuntimeError):
    """A call of ``capture_cuda_graphs(..., outputs="static")`` from a thread other than its one caller; nothing replayed."""


class BundleInputRefused(InvalidKnobValue):
    """A call of an AOT serving bundle with an input its package was not compiled for (another dtype, device,
    layout, size, a size the export ties to another input's, or another value of an argument the package fixes);
    nothing ran.  The message names the input, what the package expects and what came."""


class CompileCacheRefused(KnobsError, RuntimeError):
    """A compile-cache file was built under other knobs, another torch or GPU, or is not safe to load."""


class ColdStartCompiled(KnobsError, RuntimeError):
    """``ik.serving.load_serving_bundle(on_cold="raise")``: loading the bundle compiled, autotuned or Triton-compiled something
    cold.

    The bundle was accepted and loaded, and the model is compiled and ready, but the bundle did not
    cover it (another model or input, another grad mode, an artifact torch could not use); the
    message names each cold compile, autotune benchmark and Triton compile.

    Attributes:
        proof: the :class:`~inductor_knobs.serving.cold_start.ColdStartProof` of the load.
        bundle: the loaded :class:`~inductor_knobs.serving.bundle.ServingBundle` (serve it anyway at your risk).
    """

    def __init__(self, message: str, proof: object, bundle: object = None) -> None:
        super().__init__(message)
        self.proof = proof
        self.bundle = bundle


class StallWarning(KnobsWarning):
    """``ik.serving.no_stalls(on="warn")``: a call took longer than its threshold (the message names the causes)."""


class ColdStartWarning(KnobsWarning):
    """``ik.serving.load_serving_bundle(on_cold="warn")``: loading the bundle compiled something cold (see
    :class:`ColdStartCompiled`)."""


class AutotuneDuringServingWarning(KnobsWarning):
    """``no_autotune(on="warn")`` saw autotune benchmarking or a compilation."""
