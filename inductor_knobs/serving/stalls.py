"""``ik.serving.no_stalls``: time every call of a served callable, and name what made a slow call slow.

A serving promise is about what a request costs, so the guard times each call (synchronising CUDA
at its end, as a response would) and judges it against a threshold: ``threshold_ms`` if given,
else ``factor`` x a baseline (``baseline_ms``, e.g. ``ik.serving.warmup``'s steady state, or the running
median of calls at shapes already seen).  A call over it is a :class:`Stall`; its causes come from
torch's own signals (:mod:`inductor_knobs.serving.stall_judge`): the hooks of
:mod:`inductor_knobs.core.observers` and :mod:`~inductor_knobs.serving.first_call_costs`, the profiler the
guard samples new shapes with (:mod:`inductor_knobs.serving.sampled_profiler`), the thread's CPU time, and the split of the call
into its host part and its wait for the GPU.  What none of them accounts for is reported as
``unattributed`` with its time, never dropped.

This module is the guard's call path: the clocks (the wall clock when the callable returns, its last
kernel launched, and after the CUDA synchronize), the thread clock (``time.thread_time``: read for every
call that is judged anyway, new shapes and the first calls, and for calls at warm shapes only from the
first stall that no hook or profiled op explains on, since it is a system call of about 5 us on an H100
host, paid by every request otherwise), the hooks' events of the running call, and the reaction.

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

from .. import AutotuneRecord, CompileEvent, RuntimeEvent
from ..errors import InvalidKnobValue, KnobsError, torch_version
from ..ext import ObservedBlock, SharedPatch, Subscription, torch_compat
from .errors import StallDuringServing, StallWarning
from .first_call_costs import FIRST_CALL_HOOKS
from .latency import Latencies
from .sampled_profiler import QUIET_AFTER, SampledProfiler, sampling_profiler
from .signature import input_signature
from .stall_judge import StallJudge
from .stall_report import Stall, StallReport

REACTIONS = ("raise", "warn", "record")
PROFILE_MODES = ("new-shapes", "all", "off")
#: One in this many calls at warm shapes below their limit is added to the running medians (a sample
#: serves a median; a median update per request costs microseconds on a real model's host).
SAMPLE_EVERY = 16
#: With ``on="warn"``, every this many stalls one more warning sums them up by cause.
SUMMARY_EVERY = 100

# The clocks the guard (and so ``ik.serving.warmup``) reads: wall time and the thread's CPU time.  Module
# attributes so that tests can drive them with a fake clock instead of sleeping.
_clock = time.perf_counter
_thread_clock = time.thread_time


def _refuse_compiles_steps() -> list[Callable[[Callable[[Callable[[], None]], None]], None]]:
    return [torch_compat.installed(strict=False).refuse_compiles]


#: ``torch.compiler.set_stance("fail_on_recompile")``, held while any ``on="raise"`` guard serves a call or has its
#: block open: the stance is one global of the process, so the first holder sets it and the last one puts back the
#: stance it found (patches/native_floors.py).
REFUSE_COMPILES = SharedPatch("torch.compiler.set_stance('fail_on_recompile')", _refuse_compiles_steps)


class no_stalls(StallJudge, SampledProfiler, ObservedBlock):
    """Time every call of a served callable; report, warn or raise on a call over the threshold, naming its causes.

    Use it as the callable (``served = ik.serving.no_stalls(model)``, then ``served(x)``), around a block of
    calls (``with ik.serving.no_stalls(model) as served:``; the hooks are installed once for the block instead
    of at every call), or wrap another callable with :meth:`wrap`.

    Args:
        fn: the compiled callable to serve (``torch.compile``/``ik.compile`` result, or any callable).
        on: ``"raise"`` (default): :class:`~inductor_knobs.serving.errors.StallDuringServing` after the call
            (its result is lost); ``"warn"``: a :class:`~inductor_knobs.serving.errors.StallWarning`;
            ``"record"``: only :attr:`stalls`.  With ``"raise"`` on torch 2.6+, torch's own floor holds too:
            ``torch.compiler.set_stance("fail_on_recompile")`` while the guard's block is open or one of its
            calls runs (the stance found is put back on every exit).  A call that would (re)compile then
            compiles nothing: torch refuses it, and the guard raises :class:`StallDuringServing` at once, its
            cause ``dynamo_compile`` with torch's message (the guard failures), chained from torch's
            ``RuntimeError``.  The stance is one setting of the whole process (``_dynamo/eval_frame.py``
            ``_stance``), not of a thread: meanwhile every ``torch.compile`` d function on every thread refuses
            to compile, a first compile too, so warm up before serving (``ik.serving.warmup``) and compile nothing
            else while a guard serves.  On torch 2.4-2.5 (no such stance) nothing is set.
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
        warmup: an ``ik.serving.warmup`` report (:class:`~inductor_knobs.serving.warm_up_report.WarmupReport`): the shapes
            it warmed count as seen, with their steady-state times as medians, so the sampled
            profiler (a few ms a call) profiles only shapes warm-up never met.  This, not the
            report's ``steady_state_ms`` (a median over shapes), is the baseline to give a guard.
        history: how many recent calls' seconds and stalls to keep (int >= 1; default 1000), or None
            for every one (a full record that grows with the traffic).  Counts, totals per cause and
            p50/p99 always cover every call.
        max_shapes: input shapes with their own median and limit (int >= 1; default 1024).  Past it the
            least recently judged shape is forgotten: its next call is judged as a new shape.
        quiet_after: profiled new-shape calls in a row that must be fast before new shapes stop being
            profiled (default 8; ``math.inf``: profile every new shape, as ``ik.serving.warmup`` does).

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

    Relies on the hooks of :mod:`inductor_knobs.core.observers` and :mod:`~.first_call_costs` (torch 2.4-2.15;
    GEMM autotune records need 2.5+), ``torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True)``
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
        # Held as undo records of the guard's block or call: an interrupt or an exit out of order puts them back.
        self.patches = (FIRST_CALL_HOOKS, REFUSE_COMPILES) if on == "raise" else (FIRST_CALL_HOOKS,)
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
            raise _invalid("warmup", warmup, "the report ik.serving.warmup(...) returned, or None")
        if fn is not None and not callable(fn):
            raise _invalid("fn", fn, "a callable (the compiled model or function to serve)")
        self.fn = fn
        self.on = on
        self.synchronize = synchronize
        self.profile = profile
        self._seconds: collections.deque[float] = collections.deque(maxlen=history)  # maxlen None: every call
        self.latencies = Latencies()
        self._fast_calls = 0  # calls at warm shapes below their limit (one in SAMPLE_EVERY joins the medians)
        self._lock = threading.Lock()  # the bookkeeping, after each call's clock stopped
        self._active = 0  # calls running now, on any thread
        self._starts = 0  # calls started so far (a call overlapped another if more started while it ran)
        self._running = threading.local()  # per thread: the running call's events and profiler
        self._quiet = 0  # profiled new-shape calls in a row that were fast
        self.quiet_after = quiet_after
        self._sync: Callable[[], None] | None = None  # torch's C synchronize, once CUDA is initialised
        self._clock_warm = False  # thread clock on calls at warm shapes, from the first stall that needs it on
        self._init_judge(threshold_ms, factor, baseline_ms, min_calls, min_excess_ms, window, max_shapes, history, warmup)

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
        # Not inside ``with guard``: the hooks (and, with on="raise", the stance: ``patches``) are held for this
        # call only, hearing this thread (several threads may call at once, each with its own subscription).
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
        signature = input_signature(args, kwargs)
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
        except RuntimeError as err:
            if self.on != "raise" or not torch_compat.installed(strict=False).refused_compile(err):
                self._ended_by_exception()
                raise
            self._refused(err, _clock() - started, signature, new, profiled)
        except BaseException:
            self._ended_by_exception()
            raise
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

    def _ended_by_exception(self) -> None:
        """A call that raised ends here: it no longer runs (later calls must not count it as overlapping them)."""
        with self._lock:
            self._active -= 1

    def _refused(self, err: RuntimeError, seconds: float, signature: tuple[Any, ...], new: bool, profiled: bool) -> None:
        """Raise :class:`StallDuringServing` for a call torch refused to compile (the ``fail_on_recompile`` stance)."""
        detail = f"torch.compiler.set_stance('fail_on_recompile') refused the compile, so nothing was compiled: {err}"
        with self._lock:
            self._active -= 1  # the call ends here (what follows the call's finally does not run)
            self.latencies.add(seconds)
            self._seconds.append(seconds)
            stall = self._refusal(seconds, signature, new, profiled, RuntimeEvent("dynamo_compile", seconds, detail, None))
        raise StallDuringServing(f"stall during serving (inside ik.serving.no_stalls): {stall.describe()}", stall) from err

    def _find_sync(self) -> Callable[[], None] | None:
        self._sync = _cuda_synchronize()  # kept once found: CUDA stays initialised
        return self._sync

    def _react(self, stall: Stall) -> None:
        if self.on == "record":
            return
        message = f"stall during serving (inside ik.serving.no_stalls): {stall.summary()}"
        if self.on == "raise":
            raise StallDuringServing(f"stall during serving (inside ik.serving.no_stalls): {stall.describe()}", stall)
        warnings.warn(message, StallWarning, stacklevel=5)  # one line a stall
        if stall.index and self.stall_count % SUMMARY_EVERY == 0:
            totals = ", ".join(f"{kind} {count}" for kind, (count, _) in self.report().by_cause().items())
            summary = f"{self.stall_count} stalls in {self.calls} calls so far, by cause: {totals}"
            warnings.warn(summary, StallWarning, stacklevel=5)


def profiler_cost(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rounds: int = 3) -> float | None:
    """Seconds the guard's sampling profiler adds to a call of ``fn`` at a warm shape (``ik.serving.warmup``).

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
        with sampling_profiler():
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
