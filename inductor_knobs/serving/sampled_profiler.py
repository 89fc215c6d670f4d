"""The sampled profiler of ``ik.serving.no_stalls``: which calls run under ``torch.profiler``, one at a time per process.

For what no hook sees (a cuDNN SDPA plan built per exact shape, cuBLAS/cuBLASLt first calls, TunableOp
tuning, cuDNN convolution search), the guard profiles calls in a sampled mode: a call at a shape not
seen before is profiled (CPU activity only) until :data:`QUIET_AFTER` such calls in a row were fast,
and new shapes again after any stall.  A profiled call costs a few ms more (2.4-3.7 ms on a 1 ms Llama
request, H100, torch 2.11), so a shape already seen is never profiled (profiling the call after a stall
at a seen shape made that call a stall in turn, H100).  That cost is the guard's own: ``ik.serving.warmup``
measures it (:func:`~inductor_knobs.serving.stalls.profiler_cost`) and a guard seeded with it names it
``profiler``.

Relies on ``torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True)`` and
``torch.autograd._profiler_enabled()`` (torch 2.4-2.15).  torch 2.13's libkineto prints ``USDT: ...
profiler_start`` and ``profiler_stop`` to stderr at each start and stop (``SyncActivityProfilerHandler.cpp``);
the guard's starts and stops print nothing (the patch module's ``quiet_profiler_markers``).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from ..ext import torch_compat
from .errors import StallWarning

#: Profiled new-shape calls in a row that must be fast before new shapes stop being profiled.
QUIET_AFTER = 8
#: Held while a guard's sampled profiler runs, by whichever thread's call it profiles.
_PROFILING = threading.Lock()


def sampling_profiler() -> Any:
    """The profiler the guard samples new shapes with: CPU activity and input shapes (the per-shape ops' detail)."""
    from torch.profiler import ProfilerActivity, profile

    return _Quiet(profile(activities=[ProfilerActivity.CPU], record_shapes=True))


class _Quiet:
    """A profiler whose start and stop print nothing: libkineto's ``USDT: ... profiler_start`` and ``profiler_stop``
    stderr lines (torch 2.13, two per profiled call) are off while it starts and stops, and only then
    (``quiet_profiler_markers`` of the patch module: libkineto's log severity, put back after)."""

    def __init__(self, profiler: Any) -> None:
        self.profiler = profiler

    def __enter__(self) -> _Quiet:
        with torch_compat.installed(strict=False).quiet_profiler_markers():
            self.profiler.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        with torch_compat.installed(strict=False).quiet_profiler_markers():
            self.profiler.__exit__(*exc)

    def events(self) -> Any:
        return self.profiler.events()


class SampledProfiler:
    """The part of :class:`~inductor_knobs.serving.stalls.no_stalls` that starts and stops the profiler around a call."""

    # Set by no_stalls.__init__ (and _quiet by its judgement: fast profiled calls in a row, 0 after a stall).
    profile: str
    quiet_after: float
    _quiet: int
    _running: threading.local

    def _wants_profile(self, new: bool) -> bool:
        if self.profile == "off":
            return False
        if self.profile == "all":
            return True
        return new and self._quiet < self.quiet_after

    def _start_profiler(self) -> bool:
        import torch

        # One profiled call at a time in the process: torch's profiler is one per process (two threads
        # starting it at once crash it), so a call on another thread meanwhile is simply not profiled.
        if not _PROFILING.acquire(blocking=False):
            return False
        if torch.autograd._profiler_enabled():  # the user's own profiler: leave it alone
            _PROFILING.release()
            return False
        profiler = sampling_profiler()
        try:
            profiler.__enter__()
        except Exception as err:  # noqa: BLE001 - no profiler here: hooks still name what they see
            _PROFILING.release()
            warnings.warn(
                f"no_stalls could not start torch.profiler ({err!r}); per-shape ATen costs will be unattributed",
                StallWarning,
                stacklevel=5,
            )
            self.profile = "off"
            return False
        self._running.profiler = profiler
        return True

    def _stop_profiler(self) -> Any:
        profiler = getattr(self._running, "profiler", None)
        self._running.profiler = None
        if profiler is not None:
            try:
                profiler.__exit__(None, None, None)
            finally:
                _PROFILING.release()
        return profiler
