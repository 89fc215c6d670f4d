"""How ``ik.serving.no_stalls`` judges a call that was not fast: its per-shape baseline, whether it stalled, and its causes.

A call is judged against ``threshold_ms``, or ``factor`` x a baseline: ``baseline_ms``, else the
running median of its shape's calls that were not stalls (at a shape not seen before, the slowest
shape's), and must also exceed the baseline by ``min_excess_ms``.  A call over it is a
:class:`~inductor_knobs.serving.stall_report.Stall`, and its causes come from torch's own signals:

- hooks that cost nothing on the steady-state path (:mod:`inductor_knobs.core.observers`): Dynamo
  (re)compiles with Dynamo's reason, Inductor GEMM autotuning (feedback savers), Inductor's runtime
  benchmark of Triton configs and coordinate descent, Triton compiles, CUDA graph recordings;
- the per-shape ATen costs of a call the guard profiled (:mod:`inductor_knobs.serving.sampled_profiler`),
  by the op names the patch module lists (``per_shape_ops``), and the profiler's own cost when
  ``ik.serving.warmup`` measured it;
- the thread's CPU time (``time.thread_time``) beside its wall time: a call whose thread was off the
  CPU for longer than usual (waiting for the GIL another thread holds, preempted by the OS or a
  container's CPU quota) names ``thread_off_cpu``;
- where a call at a warm shape spent the rest: the guard reads the clock when the callable returns
  (its last kernel launched) as well as after the CUDA synchronize, so the time beyond the steady
  call splits into the host part (``host_slower``: Python and kernel launches ran longer, and no hook
  or profiled op names why) and the wait for the GPU after the last launch (``gpu_slower``).  On H100
  hosts, bursts of 3-16 ms calls of a 1 ms Llama at warm shapes were host time with the thread on the
  CPU (they returned 0.1-0.5 ms before the call ended), not GPU time; CUDA events around such calls
  were as long as the calls because the GPU waited for the launches.  Calls of other threads that ran
  at the same time name ``concurrent_calls`` instead.

What none of them accounts for is reported as ``unattributed`` with its time, never dropped.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from .. import RuntimeEvent
from ..ext import torch_compat
from .attribution import explained, tunableop_tuning
from .latency import Latencies, ShapeMedian
from .signature import describe_inputs, on_cuda
from .stall_report import Stall

#: A profiled op below this many seconds of self CPU time is not named as a cause.
MIN_OP_SECONDS = 2e-4


class StallJudge:
    """The part of :class:`~inductor_knobs.serving.stalls.no_stalls` that judges a call and keeps the per-shape medians.

    :meth:`_judge` and the bookkeeping it calls run under the guard's lock; :meth:`shape_seconds` takes it.
    """

    # Set by no_stalls.__init__: the guard's record of every call, its lock, and the state it shares with the call path.
    latencies: Latencies
    _lock: threading.Lock
    _quiet: int  # profiled new-shape calls in a row that were fast (the sampled profiler's)
    _clock_warm: bool  # the thread clock is read at warm shapes too

    def _init_judge(
        self,
        threshold_ms: float | None,
        factor: float,
        baseline_ms: float | None,
        min_calls: int,
        min_excess_ms: float,
        window: int,
        max_shapes: int,
        history: int | None,
        warmup: Any,
    ) -> None:
        """The judgement's settings (in seconds) and records, seeded with a warm-up report's shapes and medians."""
        self.threshold_s = None if threshold_ms is None else threshold_ms / 1000
        self.factor = float(factor)
        self.baseline_s = None if baseline_ms is None else baseline_ms / 1000
        self.min_calls = min_calls
        self.min_excess_s = min_excess_ms / 1000
        self._stalls: collections.deque[Stall] = collections.deque(maxlen=history)
        self.stall_count = 0
        self._unattributed = 0
        self._totals: dict[str, list[Any]] = {}  # cause kind -> [stalls, seconds], over every stall
        self.last_causes: list[RuntimeEvent] = []  # the latest judged call's causes, stall or not (``ik.serving.warmup``)
        self.last_host_seconds: float | None = None  # the latest judged call's host part (``ik.serving.warmup``)
        # What the sampled profiler adds to a call of this model (measured by ``ik.serving.warmup``), named in profiled stalls.
        self.profiler_seconds: float | None = getattr(warmup, "profiler_seconds", None)
        self._window = window
        self._max_shapes = max_shapes
        #: Per signature seen, in least-recently-judged order: its median (calls that were not stalls) and limit.
        self._shapes: collections.OrderedDict[tuple[Any, ...], _Shape] = collections.OrderedDict()
        self._slowest = 0.0  # the largest per-shape median so far: the reference at a new shape
        self._steady_calls = 0  # calls that were not stalls (min_calls)
        self._off_cpu = ShapeMedian(window)  # off-CPU seconds of the calls that were not stalls
        for signature in warmup.signatures if warmup is not None else ():
            self._shape(signature)
        if warmup is not None:
            self._steady_calls = min_calls  # the report's medians are the steady state from the first call
        for signature, seconds in warmup.shape_seconds.items() if warmup is not None else ():
            self._add_steady(signature, seconds)

    def _judge(
        self,
        seconds: float,
        events: list[RuntimeEvent],
        profile: Any,
        new: bool,
        profiled: bool,
        signature: tuple[Any, ...],
        off_cpu: float | None = 0.0,
        host_seconds: float | None = None,
        overlapped: bool = False,
    ) -> Stall | None:
        """Judge a call that was not fast (under the lock): the :class:`Stall` to react to, or None."""
        index = max(self.latencies.count - 1, 0)
        self.last_host_seconds = host_seconds
        baseline = self._baseline(signature)
        threshold = self.threshold_s if self.threshold_s is not None else None if baseline is None else self.factor * baseline
        causes = sorted(events, key=lambda e: -e.seconds)
        if profile is not None and (threshold is None or seconds > threshold) and on_cuda(signature):
            # Parsed only when it may matter (about 10 ms for a Llama call): a fast call's profile is dropped.
            # CUDA only: there an op's self CPU time is host work (a plan build, a heuristic query); on the
            # CPU it is the op's computation, not a first-call cost.
            causes += self._profiled_causes(profile, seconds)
        if profiled and self.profiler_seconds and threshold is not None and seconds > threshold:
            detail = (
                f"the guard profiled this call (a new shape); during ik.serving.warmup a profiled call of this model took "
                f"{1000 * self.profiler_seconds:.2f} ms more than a plain one (pass profile='off' to spare it)"
            )
            causes.append(RuntimeEvent("profiler", min(self.profiler_seconds, seconds), detail, None))
        if off_cpu is not None and threshold is not None and seconds > threshold and len(self._off_cpu) >= self.min_calls:
            # Off-CPU time beyond the usual (a CUDA sync that spins keeps the thread on the CPU while
            # the GPU works, so the usual is small): the thread waited for the GIL or was not scheduled.
            usual = max(0.0, self._off_cpu.value())  # wall less CPU time can read below 0 (clock granularity)
            # Only what other causes leave: off-CPU time inside a hook (a compile waiting on its workers)
            # is already in that hook's time, so the causes never add up to more than the call.
            extra = min(off_cpu - usual, seconds - explained(causes, seconds))
            if extra >= MIN_OP_SECONDS:
                detail = f"the thread was off the CPU {1000 * off_cpu:.2f} ms (usually {1000 * usual:.2f} ms)"
                causes.append(RuntimeEvent("thread_off_cpu", extra, detail, None))
        if overlapped and baseline is not None and threshold is not None and seconds > threshold:
            # Other threads' calls ran at the same time: on one GPU their kernels, and on one interpreter their
            # Python, come before this call's, so the time beyond the steady call is theirs, not a slower host or GPU.
            rest = seconds - baseline - explained(causes, seconds)
            if rest >= MIN_OP_SECONDS:
                detail = "other threads' calls of this guard ran at the same time (their GPU work and Python came first)"
                causes.append(RuntimeEvent("concurrent_calls", rest, detail, None))
        elif host_seconds is not None and not new and baseline is not None and threshold is not None and seconds > threshold:
            causes += self._host_or_gpu(seconds, host_seconds, baseline, explained(causes, seconds), off_cpu)
        self.last_causes = causes
        if threshold is not None:
            stalled = seconds > threshold and seconds - (baseline or 0.0) >= self.min_excess_s
        else:  # no steady state known yet: a hook's event, or profiled per-shape costs that dominate the call
            named = sum(c.seconds for c in causes)
            stalled = any(c.started is not None for c in causes) or (named > 0 and named >= 0.5 * seconds)
        if not stalled:
            self._add_steady(signature, seconds, off_cpu)
            if new and profiled:
                self._quiet += 1
            return None
        return self._record_stall(index, seconds, baseline, threshold, signature, new, profiled, causes)

    def _refusal(self, seconds: float, signature: tuple[Any, ...], new: bool, profiled: bool, cause: RuntimeEvent) -> Stall:
        """Record a call torch refused to compile (under the lock): a stall whatever its time, caused by ``cause``."""
        index = max(self.latencies.count - 1, 0)
        self.last_causes = [cause]
        baseline = self._baseline(signature)
        threshold = self.threshold_s if self.threshold_s is not None else None if baseline is None else self.factor * baseline
        return self._record_stall(index, seconds, baseline, threshold, signature, new, profiled, [cause])

    def _record_stall(
        self,
        index: int,
        seconds: float,
        baseline: float | None,
        threshold: float | None,
        signature: tuple[Any, ...],
        new: bool,
        profiled: bool,
        causes: list[RuntimeEvent],
    ) -> Stall:
        """Keep a stall (under the lock): its shape seen from now on, its causes in the totals."""
        self._shape(signature)  # seen from now on (a stall's time joins no median)
        self._quiet = 0
        excess = seconds - (baseline or 0.0)
        missing = excess - explained(causes, seconds)
        # Without a baseline the steady part of the call is unknown: named causes are then the answer.
        if not causes or (baseline is not None and missing > 0.5 * excess):
            causes.append(RuntimeEvent("unattributed", max(missing, 0.0), "no hook or profiled op accounts for this time", None))
            self._clock_warm = True  # from now on the thread clock names time off the CPU (a system call a call)
        causes.sort(key=lambda e: -e.seconds)
        stall = Stall(index, seconds, baseline, threshold, describe_inputs(signature), new, profiled, causes)
        self._stalls.append(stall)
        self.stall_count += 1
        self._unattributed += not stall.attributed
        for kind in dict.fromkeys(c.kind for c in causes):
            self._totals.setdefault(kind, [0, 0.0])[0] += 1
        for cause in causes:
            self._totals.setdefault(cause.kind, [0, 0.0])[1] += cause.seconds
        return stall

    def _host_or_gpu(
        self, seconds: float, host_seconds: float, baseline: float, named: float, off_cpu: float | None
    ) -> list[RuntimeEvent]:
        """Where a stall at a warm shape spent what the other causes leave: the host part or the wait for the GPU.

        The steady call's wall time bounds both of its parts from above, so each part's time beyond the
        whole steady call is a lower bound of how much longer that part took.  The host part's bound
        less what other causes named (all host-side: hooks, profiled ops, time off the CPU) is
        ``host_slower``; the wait's is ``gpu_slower``.
        """
        found = []
        steady = f"the whole call's steady time is {1000 * baseline:.2f} ms"
        host = host_seconds - baseline - named
        if host >= MIN_OP_SECONDS:
            if off_cpu is None:  # not read on this call: read from now on, to tell off-CPU time from a slower CPU
                self._clock_warm = True
                how = "; the thread clock was not read on this call (it is from now on)"
            else:
                how = ", with the thread on the CPU (time.thread_time): the same host work ran slower"
            detail = f"the call returned after {1000 * host_seconds:.2f} ms of host work (Python, kernel launches); {steady}{how}"
            found.append(RuntimeEvent("host_slower", host, detail, None))
        wait = seconds - host_seconds
        if wait - baseline >= MIN_OP_SECONDS:
            detail = f"after its last launch returned, the call waited {1000 * wait:.2f} ms for the GPU; {steady}"
            found.append(RuntimeEvent("gpu_slower", wait - baseline, detail, None))
        return found

    def _baseline(self, signature: tuple[Any, ...]) -> float | None:
        if self.baseline_s is not None:
            return self.baseline_s
        if self._steady_calls < self.min_calls:
            return None
        shape = self._shapes.get(signature)
        return shape.median.value() if shape is not None and shape.median is not None else self._slowest

    def _shape(self, signature: tuple[Any, ...]) -> _Shape:
        """The record of ``signature`` (made if new, the least recently judged one dropped past ``max_shapes``)."""
        shapes = self._shapes
        shape = shapes.get(signature)
        if shape is None:
            shape = shapes[signature] = _Shape()
            if len(shapes) > self._max_shapes:
                shapes.popitem(last=False)
        else:
            shapes.move_to_end(signature)
        return shape

    def _add_steady(self, signature: tuple[Any, ...], seconds: float, off_cpu: float | None = None) -> None:
        shape = self._shape(signature)
        if shape.median is None:
            shape.median = ShapeMedian(self._window)
        shape.median.add(seconds)
        if off_cpu is not None:
            self._off_cpu.add(off_cpu)
        self._steady_calls += 1
        self._slowest = max(self._slowest, shape.median.value())
        baseline = self._baseline(signature)
        if baseline is not None:  # not a stall below its threshold or below baseline + min_excess
            threshold = self.threshold_s if self.threshold_s is not None else self.factor * baseline
            shape.limit = max(threshold, baseline + self.min_excess_s)

    def shape_seconds(self) -> dict[tuple[Any, ...], float]:
        """Per input signature, the median seconds of its calls that were not stalls (``ik.serving.warmup``)."""
        with self._lock:
            return {signature: shape.median.value() for signature, shape in self._shapes.items() if shape.median is not None}

    def _profiled_causes(self, profile: Any, seconds: float) -> list[RuntimeEvent]:
        """Per-shape ATen costs in a profiled call: the ops the patch module names, and the top op if it dominates."""
        ops = torch_compat.installed(strict=False).per_shape_ops
        totals: dict[str, list[Any]] = {}
        for event in profile.events():
            name = event.name
            entry = totals.setdefault(name, [0.0, None])
            entry[0] += event.self_cpu_time_total / 1e6
            if entry[1] is None and getattr(event, "input_shapes", None):
                entry[1] = event.input_shapes
        found = []
        for name, (self_seconds, shapes) in totals.items():
            kind = ops.get(name)
            if kind is None and self_seconds >= 0.5 * seconds and name.startswith("aten::"):
                kind = "aten_first_call"
            if kind is None or self_seconds < MIN_OP_SECONDS:
                continue
            if kind == "cublas_first_call" and tunableop_tuning():
                kind = "tunableop"
            shapes_text = f" {shapes}" if shapes else ""
            found.append(RuntimeEvent(kind, self_seconds, f"{name}{shapes_text} (profiled, self CPU time)", None))
        return found


class _Shape:
    """What the guard keeps of one input signature: its running median and the limit below which a call is fine."""

    __slots__ = ("limit", "median")

    def __init__(self) -> None:
        self.median: ShapeMedian | None = None
        self.limit: float | None = None
