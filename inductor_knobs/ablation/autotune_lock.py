"""One autotune benchmark at a time per GPU, across the workers of an ablation.

Why: with several workers compiling on one GPU, one worker's autotune benchmarks ran beside another's,
so it timed its candidates on a shared GPU and picked differently.  On an H200 (torch 2.11.0, main job,
run r of ``docs/measurements.md``) the A/A control's repeat-0 processes, which compiled while the
forced arms of the emulated T4 and L4 autotuned on the same GPU, picked GEMM kernels that took 0.77
and 0.81 ms per iteration against 0.52-0.53 ms for the other processes of their arms, and the A/A
interval came out [0.68-1.55].

How: the runner gives every worker on a GPU the same lock file (in the ablation's own temporary
directory, one per physical GPU).  While the worker compiles it holds :func:`benchmarks_in_turn`: every
call of a torch function that times on the GPU (the installed torch's hooks in ``patches/``: before 2.8
``CachingAutotuner.bench``, a Triton config of a runtime autotune or a coordinate-descent step; from 2.8
the ``benchmark_gpu`` of Inductor's benchmarkers, which every GPU timing goes through: a GEMM choice, ATen
or template, a Triton config, and the epilogue-fusion benchmarks that decide which of the best GEMM
choices each layer finally runs) first takes an exclusive ``flock`` on that file.  So the workers take
turns per timing; their compiling, code generation and Triton compiles (CPU work) overlap.

**What happens lazily at a candidate's first call is outside the turn** (2.8+, ``autotune_timing_hooks``):
the wrapper runs the timed callable once, and waits for the GPU, before it takes the lock.  On an H100
(torch 2.11, the main job) a GEMM template's first call compiled its Triton kernel on the worker's main
thread (``CachingAutotuner.run`` -> ``precompile`` -> ``make_cubin``): 15-18 s inside one GEMM shape's
``benchmark_choices``; a lock held for a whole shape's choices (one turn per shape) made five other workers
wait for it (194-211 s of waiting in a run, 182-212 s of wall time against 142 s with turns per timing).  The
extra call is one more warm-up of the candidate, which the benchmarker makes anyway.

Outside the lock: the timings torch takes with ``do_bench_using_profiling`` directly (only with
``profile_bandwidth_with_do_bench_using_profiling`` on), candidates torch times in its autotune subprocess
(``autotune_in_subproc``, ``select_algorithm.py benchmark_in_sub_process``: the Triton and CUTLASS ones; the
lock file is closed on exec and no hook is installed there), and pipelined autotuning's.  The first call of a
candidate is one launch (microseconds of GPU work) that may land beside another worker's timing.  Also not
covered: another worker's eager reference pass or first compiled iteration (milliseconds of GPU work) may still
run beside a benchmark.  (torch 2.13+ also offers ``runtime/benchmarking.py``'s ``set_gpu_benchmark_lock_context``;
the wrappers serve every release from 2.8 alike.)

The lock is the kernel's: it goes with the process however the process ends (a crash, a kill at its
timeout), so a dead worker never holds it.  It is opened ``O_CLOEXEC``, so Inductor's compile
subprocesses do not inherit it.  In a worker it is re-entrant (a benchmark inside a benchmark takes it
once) and serialises the worker's own threads.  The time spent waiting for it is counted
(:attr:`GpuLock.waited_seconds`); it is part of the worker's compile time, and the record says how much.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..ext import SharedPatch, present, torch_compat, wrap_attribute
from .queued_timing import queued_pairs


class GpuLock:
    """An exclusive ``flock`` on one file, re-entrant within the process, that counts its waiting.

    Args:
        path (str): the lock file (created if missing, never followed if a symlink).
        clock (Callable[[], float] | None): read at the start of every turn (the GPU's SM clock in MHz,
            ``torch.cuda.clock_rate``), kept in :attr:`clocks`; a failing read is skipped.  None: not read.

    Raises:
        OSError: the file cannot be opened or created (a symlink at ``path`` included).

    Attributes:
        waited_seconds (float): seconds spent waiting for the lock, in total.
        turns (int): how many times the lock was taken (outermost holds only).
        held_seconds (float): seconds the lock was held, in total (what the other workers waited behind).
        longest_hold_seconds (float): the longest single hold.
        longest_hold_what (str): the torch function of the longest hold (``InductorBenchmarker.benchmark_gpu``).
        clocks (list[float]): what ``clock`` read at the start of each turn.
    """

    def __init__(self, path: str, clock: Callable[[], float] | None = None) -> None:
        self.path = path
        self._clock = clock
        self.clocks: list[float] = []
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._mutex = threading.RLock()  # one thread of this process at a time; re-entrant for nesting
        self._depth = 0
        self.waited_seconds = 0.0
        self.turns = 0
        self.held_seconds = 0.0
        self.longest_hold_seconds = 0.0
        self.longest_hold_what = ""
        self._taken_at = 0.0

    @contextlib.contextmanager
    def held(self, what: str = "") -> Iterator[None]:
        """Hold the lock for the block (a nested hold in the same thread takes it once); ``what`` names
        the timed function for :attr:`longest_hold_what`."""
        with self._mutex:
            outermost = self._depth == 0
            if outermost:
                start = time.perf_counter()
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            # From here every exit (an interrupt in the accounting or the clock read included) releases the flock.
            self._depth += 1
            try:
                if outermost:
                    self._taken_at = time.perf_counter()
                    self.waited_seconds += self._taken_at - start
                    self.turns += 1
                    if self._clock is not None:
                        with contextlib.suppress(Exception):  # no NVML: the clock is optional
                            self.clocks.append(float(self._clock()))
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    hold = time.perf_counter() - self._taken_at
                    self.held_seconds += hold
                    if hold > self.longest_hold_seconds:
                        self.longest_hold_seconds, self.longest_hold_what = hold, what

    def mine(self) -> bool:
        """Whether the calling thread holds the lock now (inside :meth:`held`)."""
        if not self._mutex.acquire(blocking=False):
            return False  # another thread of this process holds it
        try:
            return self._depth > 0
        finally:
            self._mutex.release()

    def close(self) -> None:
        """Close the file (which releases the lock if held)."""
        os.close(self._fd)


#: What the wrappers use while :func:`benchmarks_in_turn` is active (one per process: a worker runs one job):
#: the GPU's lock (None: no turns, one worker alone) and the spin queued before each timing's start, in
#: microseconds (0: torch's own timing; :mod:`.queued_timing`).
_CURRENT: list[tuple[GpuLock | None, float]] = []


def _in_turn(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    lock = _CURRENT[-1][0] if _CURRENT else None
    if lock is None:  # no turns (or installed but not held: another holder of the shared patch has gone)
        return wrapped(*args, **kwargs)
    with lock.held(getattr(wrapped, "__qualname__", "")):
        return wrapped(*args, **kwargs)


def _first_call_then_turn(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``benchmark_gpu(_callable, ...)``: run ``_callable`` once and wait for the GPU, then time it in turn.

    The first call is one launch of the candidate (microseconds of GPU work), which may land beside another
    worker's timing: at most one of that timing's iterations, of which torch keeps the fastest.  Not made where
    torch would refuse the timing (``config.deterministic`` without ``is_vetted_benchmarking``).  A first call that
    fails leaves the candidate to torch's own handling outside the turn: its second try would compile again.
    """
    lock = _CURRENT[-1][0] if _CURRENT else None
    timed = args[0] if args else kwargs.get("_callable")
    if lock is None or lock.mine() or not callable(timed) or _benchmarking_banned(kwargs):
        return _in_turn(wrapped, instance, args, kwargs)  # no turns, nested in this thread's own turn, or not ours
    import torch

    try:
        timed()
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - torch meets the same error in its own call and handles it (inf, skipped)
        return wrapped(*args, **kwargs)
    return _in_turn(wrapped, instance, args, kwargs)


def _benchmarking_banned(kwargs: dict[str, Any]) -> bool:
    """Whether torch's ``may_ban_benchmarking()`` will refuse this timing: ``config.deterministic`` where the release
    has it (2.11.0 ``runtime/benchmarking.py:64``; 2.8.0 has neither)."""
    from torch._inductor import config

    return bool(getattr(config, "deterministic", False)) and not kwargs.get("is_vetted_benchmarking", False)


def _queued_events(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``get_event_pairs(iters, ...)``: torch's pairs, each start event queueing a spin first (:mod:`.queued_timing`)."""
    pairs = wrapped(*args, **kwargs)
    queue_us = _CURRENT[-1][1] if _CURRENT else 0.0
    return queued_pairs(pairs, queue_us) if queue_us > 0 else pairs


@functools.cache  # one step object per hook for the process: it reuses its wrapper while torch's original is the same
def _steps() -> tuple[Any, ...]:
    patches = torch_compat.installed(strict=False)  # imports torch
    # A build without one of them (an older release's GEMM autotuning) benchmarks nothing there to order.
    plain = tuple(wrap_attribute(path, _in_turn) for path in patches.autotune_benchmark_hooks if present(path))
    timing = tuple(wrap_attribute(path, _first_call_then_turn) for path in patches.autotune_timing_hooks if present(path))
    return plain + timing + tuple(wrap_attribute(path, _queued_events) for path in patches.autotune_event_hooks if present(path))


AUTOTUNE_TURNS = SharedPatch("one autotune benchmark at a time per GPU (ablation/autotune_lock.py)", _steps)


@contextlib.contextmanager
def benchmarks_in_turn(
    path: str | None, clock: Callable[[], float] | None = None, queue_us: float = 0.0
) -> Iterator[GpuLock | None]:
    """Inside the block, every autotune timing of this process first takes the lock at ``path``, and with
    ``queue_us`` starts its clock only once the candidate's launch is queued (:mod:`.queued_timing`).

    Args:
        path (str | None): the GPU's lock file (the same for every worker on that GPU); None: no turns (one
            worker at a time, or on CPU).
        clock (Callable[[], float] | None): passed to :class:`GpuLock` (read at every turn's start).
        queue_us (float): microseconds of GPU spin queued before each timing's start event (torch 2.8+,
            ``InductorBenchmarker``); 0: torch's own timing.

    Yields:
        GpuLock | None: the lock, for its ``waited_seconds`` and ``turns``; None when ``path`` is None.

    Raises:
        OSError: the lock file cannot be opened (nothing is installed then).

    Relies on the installed torch's ``autotune_benchmark_hooks``, ``autotune_timing_hooks`` and
    ``autotune_event_hooks`` (``patches/hooks.py``, ``patches/torch_2_8.py``), each installed only where it
    exists (imports torch and its Inductor).  Nothing is installed when ``path`` is None and ``queue_us`` 0.
    """
    if path is None and queue_us <= 0:
        yield None
        return
    lock = GpuLock(path, clock) if path is not None else None
    current = (lock, max(0.0, queue_us))
    holder = object()
    try:
        # release() is idempotent per holder, so an interrupt anywhere in here still leaves nothing installed.
        AUTOTUNE_TURNS.acquire(holder)
        _CURRENT.append(current)
        yield lock
    finally:
        with contextlib.suppress(ValueError):  # not appended: acquire failed or was interrupted
            _CURRENT.remove(current)
        try:
            AUTOTUNE_TURNS.release(holder)
        finally:
            if lock is not None:
                lock.close()
