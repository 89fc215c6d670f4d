"""``ik.no_stalls``: time every call of a served callable, and name what made a slow call slow.

A serving promise is about what a request costs, so the guard times each call (synchronising CUDA
at its end, as a response would) and judges it against a threshold: ``threshold_ms`` if given,
else ``factor`` x a baseline (``baseline_ms``, e.g. ``ik.warmup``'s steady state, or the running
median of calls at shapes already seen).  A call over it is a :class:`Stall`, and its causes come
from torch's own signals:

- hooks that cost nothing on the steady-state path (:mod:`inductor_knobs.core.observe`): Dynamo
  (re)compiles with Dynamo's reason, Inductor GEMM autotuning (feedback savers), Inductor's runtime
  benchmark of Triton configs and coordinate descent, Triton compiles, CUDA graph recordings;
- for what no hook sees (a cuDNN SDPA plan built per exact shape, cuBLAS/cuBLASLt first calls,
  TunableOp tuning, cuDNN convolution search), ``torch.profiler`` in a sampled mode: a call at a
  shape not seen before is profiled (CPU activity only) until 8 such calls in a row were fast, and
  new shapes again after any stall.  A profiled call costs a few ms more (2.4-3.7 ms on a 1 ms
  Llama request, H100, torch 2.11), so a shape already seen is never profiled (profiling the call
  after a stall at a seen shape made that call a stall in turn, H100).  That cost is the guard's own:
  ``ik.warmup`` measures it (``profiler_seconds``) and a guard seeded with it names it ``profiler``;
- the thread's CPU time (``time.thread_time``) beside its wall time: a call whose thread was off the
  CPU for longer than usual (waiting for the GIL another thread holds, preempted by the OS or a
  container's CPU quota) names ``thread_off_cpu``.  Read for every call that is judged anyway (new
  shapes, the first calls), and for calls at warm shapes only from the first stall that no hook or
  profiled op explains on (a system call of about 5 us on an H100 host, paid by every request otherwise);
- where a call at a warm shape spent the rest: the guard reads the clock when the callable returns
  (its last kernel launched) as well as after the CUDA synchronize, so the time beyond the steady
  call splits into the host part (``host_slower``: Python and kernel launches ran longer, and no hook
  or profiled op names why) and the wait for the GPU after the last launch (``gpu_slower``).  On H100
  hosts, bursts of 3-16 ms calls of a 1 ms Llama at warm shapes were host time with the thread on the
  CPU (they returned 0.1-0.5 ms before the call ended), not GPU time; CUDA events around such calls
  were as long as the calls because the GPU waited for the launches.

What none of them accounts for is reported as ``unattributed`` with its time, never dropped.

A call at a warm shape that finishes below its limit (the larger of ``factor`` x its median and its
median + ``min_excess_ms``) is only recorded: one in :data:`SAMPLE_EVERY` such calls goes into the
medians, with its off-CPU time (once the thread clock is on), because on a real model every
Python frame and system call between two requests costs microseconds (a 1 ms Llama call on an H100 host: the signature
about 10 us, the two thread-clock reads about 10 us, where ``timeit`` gives 0.75 and 0.4 us).
"""

from __future__ import annotations

import collections
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..core import torch_compat
from ..core.knobs import torch_version
from ..core.recorder import ObservedBlock, Subscription
from ..core.records import AutotuneRecord, CompileEvent, RuntimeEvent
from ..errors import InvalidKnobValue, KnobsError, StallDuringServing, StallWarning
from .attribution import _explained, _sampling_profiler, _tunableop_tuning
from .latency import Latencies, ShapeMedian
from .signature import _describe, _on_cuda, _signature
from .stall_report import Stall, StallReport

REACTIONS = ("raise", "warn", "record")
PROFILE_MODES = ("new-shapes", "all", "off")
#: Profiled new-shape calls in a row that must be fast before new shapes stop being profiled.
QUIET_AFTER = 8
#: One in this many calls at warm shapes below their limit is added to the running medians (a sample
#: serves a median; a median update per request costs microseconds on a real model's host).
SAMPLE_EVERY = 16
#: A profiled op below this many seconds of self CPU time is not named as a cause.
MIN_OP_SECONDS = 2e-4
#: With ``on="warn"``, every this many stalls one more warning sums them up by cause.
SUMMARY_EVERY = 100
#: Held while a guard's sampled profiler runs, by whichever thread's call it profiles.
_PROFILING = threading.Lock()

# The clocks the guard (and so ``ik.warmup``) reads: wall time and the thread's CPU time.  Module
# attributes so that tests can drive them with a fake clock instead of sleeping.
_clock = time.perf_counter
_thread_clock = time.thread_time


class no_stalls(ObservedBlock):
    """Time every call of a served callable; report, warn or raise on a call over the threshold, naming its causes.

    Use it as the callable (``served = ik.no_stalls(model)``, then ``served(x)``), around a block of
    calls (``with ik.no_stalls(model) as served:``; the hooks are installed once for the block instead
    of at every call), or wrap another callable with :meth:`wrap`.

    Args:
        fn: the compiled callable to serve (``torch.compile``/``ik.compile`` result, or any callable).
        on: ``"raise"`` (default): :class:`~inductor_knobs.errors.StallDuringServing` after the call
            (its result is lost); ``"warn"``: a :class:`~inductor_knobs.errors.StallWarning`;
            ``"record"``: only :attr:`stalls`.
        threshold_ms: a call over this many milliseconds is a stall (float > 0).  Default: ``factor``
            x the baseline.
        factor: the threshold as a multiple of the baseline (float > 1; default 3.0).
        baseline_ms: one steady-state call time in ms for every shape.  Default: per shape, the
            running median of its last ``window`` calls that were not stalls; at a shape not seen
            before, the slowest shape's (a model whose time grows with the input, BERT at 128 vs
            2048 tokens, is not slow at a long input, only slow for it).
        min_calls: calls that were not stalls needed before medians are used (int >= 1; default 5;
            ``warmup=`` provides them).  Until then, a call is a stall when a hook or a profiled
            per-shape op names a cost.
        min_excess_ms: a call is a stall only if it also exceeds the baseline by this many ms (float
            >= 0; default 1.0), so timer noise on a sub-millisecond call is not a stall.
        synchronize: ``torch.cuda.synchronize()`` at the end of each call, so the time is what a
            response sees (default True; only when CUDA is initialised).
        profile: ``"new-shapes"`` (default, the sampled mode above), ``"all"`` (every call; a few ms
            each) or ``"off"`` (hooks only: per-shape ATen costs are then ``unattributed``).
        window: calls in each shape's running median (int >= 1; default 31).
        warmup: an ``ik.warmup`` report (:class:`~inductor_knobs.serving.warmup.WarmupReport`): the shapes
            it warmed count as seen, with their steady-state times as medians, so the sampled
            profiler (a few ms a call) profiles only shapes warm-up never met.  This, not the
            report's ``steady_state_ms`` (a median over shapes), is the baseline to give a guard.
        history: how many recent calls' seconds and stalls to keep (int >= 1; default 1000), or None
            for every one (a full record that grows with the traffic).  Counts, totals per cause and
            p50/p99 always cover every call.
        max_shapes: input shapes with their own median and limit (int >= 1; default 1024).  Past it the
            least recently judged shape is forgotten: its next call is judged as a new shape.
        quiet_after: profiled new-shape calls in a row that must be fast before new shapes stop being
            profiled (default 8; ``math.inf``: profile every new shape, as ``ik.warmup`` does).

    Attributes:
        stalls: the recent :class:`Stall` s, in call order (``history`` of them).
        seconds: the recent calls' wall seconds (``history`` of them).
        latencies: every call's time (:class:`~inductor_knobs.serving.latency.Latencies`: exact count, total
            and max; p50/p99 within 1%).
        calls, stall_count: calls and stalls in all.
        last_causes: the causes of the latest judged call (stall or not), on any thread.
        last_host_seconds: the host part of the latest judged call.

    Threads: one guard serves calls from any number of threads at once.  With ``with guard:`` (the
    block entered on any thread) it hears compiles, autotuning and first calls of every thread and
    gives each to the call running on the thread where torch reported it; a call outside such a block
    hears its own thread.  Its bookkeeping is under a lock taken after the call's clock stopped.
    Memory is bounded: O(1) per call, and per shape a median of ``window`` doubles, up to ``max_shapes``.

    Raises:
        InvalidKnobValue: at construction, for a bad argument (the message names it, what is allowed
            and the torch version).
        StallDuringServing: ``on="raise"`` and a call stalled.

    Relies on the hooks of :mod:`inductor_knobs.core.observe` (torch 2.4-2.15; GEMM autotune records
    need 2.5+), ``torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True)``
    and the patch module's ``per_shape_ops`` (profiler op names per release).
    """

    need_autotune = False
    event_scope = "process"

    def __init__(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        on: str = "raise",
        threshold_ms: float | None = None,
        factor: float = 3.0,
        baseline_ms: float | None = None,
        min_calls: int = 5,
        min_excess_ms: float = 1.0,
        synchronize: bool = True,
        profile: str = "new-shapes",
        window: int = 31,
        warmup: Any = None,
        history: int | None = 1000,
        max_shapes: int = 1024,
        quiet_after: float = QUIET_AFTER,
    ) -> None:
        _check_choice("on", on, REACTIONS)
        _check_choice("profile", profile, PROFILE_MODES)
        checks = (("threshold_ms", threshold_ms, 0.0), ("baseline_ms", baseline_ms, 0.0), ("factor", factor, 1.0))
        for name, value, low in checks:
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > low):
                raise _invalid(name, value, f"a number > {low:g}" + (" or None" if name != "factor" else ""))
        if isinstance(min_excess_ms, bool) or not isinstance(min_excess_ms, (int, float)) or not min_excess_ms >= 0:
            raise _invalid("min_excess_ms", min_excess_ms, "a number >= 0")
        for name, value in (("min_calls", min_calls), ("window", window), ("max_shapes", max_shapes), ("history", history)):
            if (name != "history" or value is not None) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise _invalid(name, value, "an int >= 1" + (" or None" if name == "history" else ""))
        if isinstance(quiet_after, bool) or not isinstance(quiet_after, (int, float)) or not quiet_after >= 1:
            raise _invalid("quiet_after", quiet_after, "a number >= 1 (math.inf: profile every new shape)")
        if not isinstance(synchronize, bool):
            raise _invalid("synchronize", synchronize, "True or False")
        if warmup is not None and not isinstance(getattr(warmup, "shape_seconds", None), Mapping):
            raise _invalid("warmup", warmup, "the report ik.warmup(...) returned, or None")
        if fn is not None and not callable(fn):
            raise _invalid("fn", fn, "a callable (the compiled model or function to serve)")
        self.fn = fn
        self.on = on
        self.threshold_s = None if threshold_ms is None else threshold_ms / 1000
        self.factor = float(factor)
        self.baseline_s = None if baseline_ms is None else baseline_ms / 1000
        self.min_calls = min_calls
        self.min_excess_s = min_excess_ms / 1000
        self.synchronize = synchronize
        self.profile = profile
        self._seconds: collections.deque[float] = collections.deque(maxlen=history)  # maxlen None: every call
        self._stalls: collections.deque[Stall] = collections.deque(maxlen=history)
        self.latencies = Latencies()
        self.stall_count = 0
        self._unattributed = 0
        self._totals: dict[str, list[Any]] = {}  # cause kind -> [stalls, seconds], over every stall
        self.last_causes: list[RuntimeEvent] = []  # the latest judged call's causes, stall or not (``ik.warmup``)
        self.last_host_seconds: float | None = None  # the latest judged call's host part (``ik.warmup``)
        # What the sampled profiler adds to a call of this model (measured by ``ik.warmup``), named in profiled stalls.
        self.profiler_seconds: float | None = getattr(warmup, "profiler_seconds", None)
        self._window = window
        self._max_shapes = max_shapes
        #: Per signature seen, in least-recently-judged order: its median (calls that were not stalls) and limit.
        self._shapes: collections.OrderedDict[tuple[Any, ...], _Shape] = collections.OrderedDict()
        self._slowest = 0.0  # the largest per-shape median so far: the reference at a new shape
        self._steady_calls = 0  # calls that were not stalls (min_calls)
        self._off_cpu = ShapeMedian(window)  # off-CPU seconds of the calls that were not stalls
        self._fast_calls = 0  # calls at warm shapes below their limit (one in SAMPLE_EVERY joins the medians)
        self._lock = threading.Lock()  # the bookkeeping, after each call's clock stopped
        self._active = 0  # calls running now, on any thread
        self._starts = 0  # calls started so far (a call overlapped another if more started while it ran)
        self._running = threading.local()  # per thread: the running call's events and profiler
        for signature in warmup.signatures if warmup is not None else ():
            self._shape(signature)
        if warmup is not None:
            self._steady_calls = min_calls  # the report's medians are the steady state from the first call
        for signature, seconds in warmup.shape_seconds.items() if warmup is not None else ():
            self._add_steady(signature, seconds)
        self._quiet = 0  # profiled new-shape calls in a row that were fast
        self.quiet_after = quiet_after
        self._sync: Callable[[], None] | None = None  # torch's C synchronize, once CUDA is initialised
        self._clock_warm = False  # thread clock on calls at warm shapes, from the first stall that needs it on

    @property
    def calls(self) -> int:
        """Calls timed in all."""
        return self.latencies.count

    @property
    def seconds(self) -> list[float]:
        """The recent calls' wall seconds, in call order (``history`` of them; a copy)."""
        return list(self._seconds)

    @property
    def stalls(self) -> list[Stall]:
        """The recent stalls, in call order (``history`` of them; a copy)."""
        return list(self._stalls)

    def seen_shapes(self) -> frozenset[tuple[Any, ...]]:
        """The input signatures this guard has a record of (warmed or served; at most ``max_shapes``)."""
        with self._lock:
            return frozenset(self._shapes)

    # -- serving --------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` under the guard.

        Raises:
            KnobsError: the guard was created without ``fn`` (use :meth:`wrap`).
            StallDuringServing: see ``on``.
        """
        if self.fn is None:
            raise KnobsError("no_stalls() was created without a callable: pass it (no_stalls(model)) or use guard.wrap(fn)")
        if self._block:  # the serving loop's path: one Python frame fewer than call()
            return self._timed(self.fn, args, kwargs)
        return self.call(self.fn, *args, **kwargs)

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with every call timed and judged by this guard (its stalls land in this guard)."""

        def guarded(*args: Any, **kwargs: Any) -> Any:
            return self.call(fn, *args, **kwargs)

        return guarded

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` under the guard (what ``__call__`` and :meth:`wrap` do)."""
        if self._block:
            return self._timed(fn, args, kwargs)
        # Not inside ``with guard``: the hooks are held for this call only, hearing this thread (several
        # threads may call at once, each with its own subscription).
        with Subscription(self, hooks=True):
            return self._timed(fn, args, kwargs)

    def report(self) -> StallReport:
        """Counts, totals per cause and p50/p99 over every call; the recent calls and stalls."""
        with self._lock:
            totals = {kind: (int(v[0]), float(v[1])) for kind, v in self._totals.items()}
            return StallReport(
                list(self._seconds), list(self._stalls), self.latencies, totals, self.stall_count, self._unattributed
            )

    # -- the observer protocol: what torch reports during the running call ------------------------

    def on_runtime(self, event: RuntimeEvent) -> None:
        events = getattr(self._running, "events", None)  # the call running on the thread torch reported from
        if events is not None:
            events.append(event)

    def on_autotune(self, record: AutotuneRecord) -> None:
        events = getattr(self._running, "events", None)
        if events is not None and not record.from_cache:
            seconds = (record.benchmark_seconds or 0.0) + (record.precompile_seconds or 0.0)
            detail = f"{record.signature}: {len(record.choices)} choices, winner {record.winner}"
            events.append(RuntimeEvent("gemm_autotune", seconds, detail, None))

    def on_compile(self, event: CompileEvent) -> None:
        # A compile under the profiler would record every op of tracing and autotuning (millions, and
        # seconds to collect): stop it; the compile is timed by its own hook.
        if getattr(self._running, "profiler", None) is not None and event.trigger != "cudagraph_recording":
            self._stop_profiler()

    # -- one call ---------------------------------------------------------------------------------

    def _timed(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        signature = _signature(args, kwargs)
        # A warm shape's time below which a call cannot be a stall: such a call is only recorded (one in
        # SAMPLE_EVERY joins the medians), so a steady serving loop pays three clock reads, a dict lookup
        # and the lock.  On a real model each of these costs microseconds, and the thread clock is a system
        # call (about 5 us on an H100 host): warm calls read it only after a stall no hook or op explains.
        shape = self._shapes.get(signature)  # a read without the lock: a dict lookup is atomic
        limit = shape.limit if shape is not None else None
        new = shape is None
        profiled = (new or self.profile == "all") and self._wants_profile(new) and self._start_profiler()
        running = self._running
        events: list[RuntimeEvent] = []
        running.events = events
        with self._lock:
            others_running = self._active
            self._active += 1
            self._starts += 1
            start_number = self._starts
        on_cpu = _thread_clock() if limit is None or self._clock_warm else None
        started = _clock()
        try:
            out = fn(*args, **kwargs)
            launched = _clock()  # the host part ends here; the rest is the wait for the GPU
            if self.synchronize:
                sync = self._sync or self._find_sync()
                if sync is not None:
                    sync()
        finally:
            seconds = _clock() - started
            running.events = None
            fast = limit is not None and seconds < limit and not events and not profiled
            # A fast call joins the medians one time in SAMPLE_EVERY, and every time while the usual off-CPU
            # time has fewer than min_calls values; the thread clock's end is read for those and judged calls.
            keep = fast and (self._fast_calls % SAMPLE_EVERY == 0 or (on_cpu is not None and len(self._off_cpu) < self.min_calls))
            on_cpu_end = _thread_clock() if on_cpu is not None and (keep or not fast) else None
            profile = self._stop_profiler() if profiled else None
        off_cpu = None if on_cpu_end is None or on_cpu is None else seconds - (on_cpu_end - on_cpu)
        with self._lock:
            self._active -= 1
            overlapped = bool(others_running) or self._starts > start_number
            self.latencies.add(seconds)
            self._seconds.append(seconds)
            if fast:
                self._fast_calls += 1
                if keep:
                    self._add_steady(signature, seconds, off_cpu)
                return out
            stall = self._judge(seconds, events, profile, new, profiled, signature, off_cpu, launched - started, overlapped)
        if stall is not None:
            self._react(stall)  # outside the lock: a warning filter or the raise runs the user's code
        return out

    def _find_sync(self) -> Callable[[], None] | None:
        self._sync = _cuda_synchronize()  # kept once found: CUDA stays initialised
        return self._sync

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
        profiler = _sampling_profiler()
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
        if profile is not None and (threshold is None or seconds > threshold) and _on_cuda(signature):
            # Parsed only when it may matter (about 10 ms for a Llama call): a fast call's profile is dropped.
            # CUDA only: there an op's self CPU time is host work (a plan build, a heuristic query); on the
            # CPU it is the op's computation, not a first-call cost.
            causes += self._profiled_causes(profile, seconds)
        if profiled and self.profiler_seconds and threshold is not None and seconds > threshold:
            detail = (
                f"the guard profiled this call (a new shape); during ik.warmup a profiled call of this model took "
                f"{1000 * self.profiler_seconds:.2f} ms more than a plain one (pass profile='off' to spare it)"
            )
            causes.append(RuntimeEvent("profiler", min(self.profiler_seconds, seconds), detail, None))
        if off_cpu is not None and threshold is not None and seconds > threshold and len(self._off_cpu) >= self.min_calls:
            # Off-CPU time beyond the usual (a CUDA sync that spins keeps the thread on the CPU while
            # the GPU works, so the usual is small): the thread waited for the GIL or was not scheduled.
            usual = max(0.0, self._off_cpu.value())  # wall less CPU time can read below 0 (clock granularity)
            # Only what other causes leave: off-CPU time inside a hook (a compile waiting on its workers)
            # is already in that hook's time, so the causes never add up to more than the call.
            extra = min(off_cpu - usual, seconds - _explained(causes, seconds))
            if extra >= MIN_OP_SECONDS:
                detail = f"the thread was off the CPU {1000 * off_cpu:.2f} ms (usually {1000 * usual:.2f} ms)"
                causes.append(RuntimeEvent("thread_off_cpu", extra, detail, None))
        if overlapped and baseline is not None and threshold is not None and seconds > threshold:
            # Other threads' calls ran at the same time: on one GPU their kernels, and on one interpreter their
            # Python, come before this call's, so the time beyond the steady call is theirs, not a slower host or GPU.
            rest = seconds - baseline - _explained(causes, seconds)
            if rest >= MIN_OP_SECONDS:
                detail = "other threads' calls of this guard ran at the same time (their GPU work and Python came first)"
                causes.append(RuntimeEvent("concurrent_calls", rest, detail, None))
        elif host_seconds is not None and not new and baseline is not None and threshold is not None and seconds > threshold:
            causes += self._host_or_gpu(seconds, host_seconds, baseline, _explained(causes, seconds), off_cpu)
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
        self._shape(signature)  # seen from now on (a stall's time joins no median)
        self._quiet = 0
        excess = seconds - (baseline or 0.0)
        missing = excess - _explained(causes, seconds)
        # Without a baseline the steady part of the call is unknown: named causes are then the answer.
        if not causes or (baseline is not None and missing > 0.5 * excess):
            causes.append(RuntimeEvent("unattributed", max(missing, 0.0), "no hook or profiled op accounts for this time", None))
            self._clock_warm = True  # from now on the thread clock names time off the CPU (a system call a call)
        causes.sort(key=lambda e: -e.seconds)
        stall = Stall(index, seconds, baseline, threshold, _describe(signature), new, profiled, causes)
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
        """Per input signature, the median seconds of its calls that were not stalls (``ik.warmup``)."""
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
            if kind == "cublas_first_call" and _tunableop_tuning():
                kind = "tunableop"
            shapes_text = f" {shapes}" if shapes else ""
            found.append(RuntimeEvent(kind, self_seconds, f"{name}{shapes_text} (profiled, self CPU time)", None))
        return found

    def _react(self, stall: Stall) -> None:
        if self.on == "record":
            return
        message = f"stall during serving (inside ik.no_stalls): {stall.summary()}"
        if self.on == "raise":
            raise StallDuringServing(f"stall during serving (inside ik.no_stalls): {stall.describe()}", stall)
        warnings.warn(message, StallWarning, stacklevel=5)  # one line a stall
        if stall.index and self.stall_count % SUMMARY_EVERY == 0:
            totals = ", ".join(f"{kind} {count}" for kind, (count, _) in self.report().by_cause().items())
            summary = f"{self.stall_count} stalls in {self.calls} calls so far, by cause: {totals}"
            warnings.warn(summary, StallWarning, stacklevel=5)


class _Shape:
    """What the guard keeps of one input signature: its running median and the limit below which a call is fine."""

    __slots__ = ("limit", "median")

    def __init__(self) -> None:
        self.median: ShapeMedian | None = None
        self.limit: float | None = None


def profiler_cost(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rounds: int = 3) -> float | None:
    """Seconds the guard's sampling profiler adds to a call of ``fn`` at a warm shape (``ik.warmup``).

    Interleaved rounds of one plain and one profiled call, each timed from the call to the CUDA
    synchronize (the profiler's enter and exit stay outside, as in the guard); the median of the
    profiled less the median of the plain, at least 0.  Under Inductor, a profiled call also takes
    the slow launch path and records a range per Triton kernel, so the cost grows with the kernels.

    Returns:
        Seconds (float >= 0), or None while another profiler runs (the guard leaves it alone too).
    """
    import torch

    if torch.autograd._profiler_enabled():
        return None
    sync = _cuda_synchronize() or (lambda: None)

    def timed() -> float:
        start = _clock()
        fn(*args, **kwargs)
        sync()
        return _clock() - start

    plain, profiled = [], []
    for _ in range(rounds):
        plain.append(timed())
        with _sampling_profiler():
            profiled.append(timed())
    return max(0.0, statistics.median(profiled) - statistics.median(plain))


def _cuda_synchronize() -> Callable[[], None] | None:
    """What ``torch.cuda.synchronize()`` runs for the current device, once CUDA is initialised.

    ``torch.cuda.synchronize(None)`` is ``_lazy_init()`` and a no-op ``torch.cuda.device(None)`` around
    ``torch._C._cuda_synchronize()`` (torch/cuda/__init__.py, 2.4-2.15): the C function alone spares a
    serving loop those Python frames.  None before CUDA is initialised (nothing to wait for).
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise _invalid(name, value, ", ".join(allowed))


def _invalid(name: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"no_stalls({name}={value!r}) is invalid on torch {torch_version()}: allowed {allowed}")
