"""What the observer hooks do when torch calls them: turn torch's calls into events on the compile-event channel.

Each callback publishes through :mod:`inductor_knobs.core.events`, on the thread that compiles (or
runs), and costs nothing when no consumer listens.  :mod:`inductor_knobs.core.observe` installs them
and says where each is hooked per torch release; the records come from
:mod:`inductor_knobs.core.autotune_reader` and :mod:`inductor_knobs.core.records`.  Facts torch reports
just before the event they belong to (``log_results``' seconds, Dynamo's recompile reasons, a compile's
start) are kept per thread (:data:`_THREAD`).  Whether timings came from a cache is read from torch's
own counter ``counters["inductor"]["select_algorithm_autotune"]``, which torch bumps only when it
benchmarks.  Timed events read ``time.perf_counter`` through this module's ``time`` (tests replace it).

Triton tells a real compile from a hit in its own cache only to its compilation listener
(``triton.knobs.compilation.listener``, called with ``cache_hit``; Triton 3.4+, torch 2.8+): the
listener here counts both (:func:`triton_compiles`), and a timed ``CachingAutotuner.precompile`` in
which Triton compiled nothing on this thread is named ``triton_load`` instead of ``triton_compile``.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import DriftWarning
from . import events, torch_compat
from ._undo import SAFE_EXIT
from .autotune_reader import _record
from .records import CompileEvent, RuntimeEvent, current_compile_id

#: A timed hook event shorter than this (seconds) is not a first-call cost: it is not delivered.
MIN_EVENT_SECONDS = 1e-4
#: A collection shorter than this (seconds) is not named: young generations take microseconds.
MIN_GC_SECONDS = 1e-3
_GC_STARTED: list[float] = []  # the running collection's start (collections do not nest)


class _ThreadState(threading.local):
    """Facts torch reports just before the event they belong to, on the same thread."""

    timing: tuple[str, float, float] | None = None  # log_results(name, elapse, precompile_elapse)
    reasons: tuple[list[str], str | None, dict[str, str]] | None = None  # the recompile about to start
    compiling: list[tuple[float, CompileEvent | None]] | None = None  # started compiles (start time, event)
    triton_compiled = 0  # real Triton compiles on this thread (the listener's cache_hit=False calls)


_THREAD = _ThreadState()


class _Hooks:
    """What the hooks share: the counter baseline and the saver arity of the installed torch."""

    autotune_count = 0
    arity = 0


_HOOKS = _Hooks()


class _TritonCounts:
    """Triton's compilation-listener calls, process-wide: real compiles and hits in Triton's own cache."""

    listening = False  # whether the listener is installed (Triton 3.4+ and the hooks held)
    waiting = False  # whether the hooks wait for an installed Triton's import (it compiled nothing yet)
    compiled = 0
    cache_hits = 0


_TRITON = _TritonCounts()
_TRITON_LOCK = threading.Lock()


def triton_compiles() -> tuple[int, int] | None:
    """``(real compiles, Triton cache hits)`` Triton reported in this process while the hooks were held.

    None while Triton's compilation listener is not installed (Triton < 3.4, no Triton, or no observer
    hooks held): then a Triton compile cannot be told from a load of a compiled kernel.  While the hooks
    wait for an installed Triton's first import, the counts (which move only under the listener) hold:
    a Triton not imported compiled nothing.  A compile in
    one of Inductor's compile-worker processes is reported there, not here.
    """
    with _TRITON_LOCK, SAFE_EXIT:
        # waiting holds only while Triton is not imported: an install that never fired must not vouch for it
        waiting = _TRITON.waiting and "triton" not in sys.modules
        return (_TRITON.compiled, _TRITON.cache_hits) if _TRITON.listening or waiting else None


def _triton_listener(previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """Triton's compilation listener that counts each compile by ``cache_hit``, then calls ``previous``.

    Triton calls it with keywords only (``src, metadata, metadata_group, times, cache_hit``;
    ``triton/compiler/compiler.py`` ``compile``, 3.4+) after each ``triton.compile``.
    """

    def listener(**kwargs: Any) -> None:
        hit = bool(kwargs.get("cache_hit"))
        with _TRITON_LOCK, SAFE_EXIT:
            if hit:
                _TRITON.cache_hits += 1
            else:
                _TRITON.compiled += 1
        if not hit:
            _THREAD.triton_compiled += 1
        if previous is not None:
            previous(**kwargs)

    return listener


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _GC_STARTED[:] = [time.perf_counter()]
        return
    if not _GC_STARTED:
        return
    started = _GC_STARTED.pop()
    seconds = time.perf_counter() - started
    if seconds >= MIN_GC_SECONDS and events.listeners():
        detail = f"generation {info.get('generation')} collection, {info.get('collected')} objects freed"
        events.publish("runtime", RuntimeEvent("python_gc", seconds, detail, started))


def _timed_wrapper(kind: str) -> Callable[..., Any]:
    """A wrapt wrapper that delivers a timed :class:`RuntimeEvent` of ``kind`` for a call of the wrapped method."""

    def timed(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not events.listeners():
            return wrapped(*args, **kwargs)
        started = time.perf_counter()
        compiled = _THREAD.triton_compiled
        try:
            return wrapped(*args, **kwargs)
        finally:
            seconds = time.perf_counter() - started
            if seconds >= MIN_EVENT_SECONDS:  # torch < 2.9 calls the descent hook on every template launch
                named = kind
                if kind == "triton_compile" and _TRITON.listening and _THREAD.triton_compiled == compiled:
                    named = "triton_load"  # Triton compiled nothing here: kernels from its cache or a worker
                events.publish("runtime", RuntimeEvent(named, seconds, _what(instance, args), started))

    return timed


def _what(instance: object, args: tuple[Any, ...]) -> str:
    """The kernel a CachingAutotuner hook ran for, or the CUDA graph tree's compile id."""
    fn = getattr(instance, "fn", None)
    name = getattr(fn, "__name__", None) or getattr(instance, "inductor_meta", {}).get("kernel_name")
    if name:
        return str(name)
    compile_id = getattr(instance, "compile_id", None)
    return f"compile {compile_id}" if compile_id is not None else type(instance).__name__


def _feedback_saver(timings: dict[Any, float], name: str, input_nodes: list[Any], choices: list[Any], *rest: Any) -> None:
    from torch._dynamo.utils import counters

    count = counters["inductor"]["select_algorithm_autotune"]
    fresh, _HOOKS.autotune_count = count > _HOOKS.autotune_count, count
    timing, _THREAD.timing = _THREAD.timing, None
    subscribers = events.listeners()
    if not subscribers:
        return
    precompile_times = rest[1] if _HOOKS.arity >= 6 else {}  # 2.11+: (…, profiler_bench_fn, precompile_times)
    try:
        record = _record(timings, name, input_nodes, precompile_times, fresh, timing)
    except Exception as err:  # noqa: BLE001 - telemetry must never break a compilation
        warnings.warn(f"inductor_knobs could not read an autotune result of {name}: {err!r}", DriftWarning, stacklevel=2)
        return
    events.deliver(subscribers, "autotune", record)


def _log_results_wrapper(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) >= 5:
        _THREAD.timing = (str(args[0]), float(args[3]), float(args[4]))
    return wrapped(*args, **kwargs)


def _reasons_wrapper(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    reasons = wrapped(*args, **kwargs)
    if not kwargs.get("skip_logging"):
        frame = args[1] if len(args) > 1 else kwargs.get("frame")
        texts = [str(r) for r in reasons or []] or ["Dynamo found no guard-failure reason"]
        _THREAD.reasons = (texts, *_describe_frame(frame))
    return reasons


def _compile_wrapper(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """2.4-2.5: Dynamo's recompile reasons, read before ``_compile`` runs the start callbacks."""
    try:
        found = torch_compat.installed().recompile_reasons_of(wrapped, args, kwargs)
    except Exception as err:  # noqa: BLE001 - telemetry must never break a compilation
        warnings.warn(f"inductor_knobs could not read Dynamo's recompile reasons: {err!r}", DriftWarning, stacklevel=2)
        found = None
    if found is not None:
        reasons, frame = found
        _THREAD.reasons = ([str(r) for r in reasons] or ["Dynamo found no guard-failure reason"], *_describe_frame(frame))
    return wrapped(*args, **kwargs)


def _describe_frame(frame: Any) -> tuple[str | None, dict[str, str]]:
    """``name (file:line)`` and the tensor arguments of the frame Dynamo is about to recompile."""
    import torch

    code = getattr(frame, "f_code", None)
    if code is None:
        return None, {}
    where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    tensors = {}
    for name, value in list(getattr(frame, "f_locals", {}).items())[:16]:
        # nn.Module calls reach Dynamo through a wrapper whose frame holds ``args``.
        items = enumerate(value) if isinstance(value, (tuple, list)) else [(None, value)]
        for index, item in list(items)[:8]:
            if isinstance(item, torch.Tensor):
                tensors[name if index is None else f"{name}[{index}]"] = f"{item.dtype}{list(item.shape)}"
    return where, tensors


def _compile_started(*args: Any) -> None:
    recompile, _THREAD.reasons = _THREAD.reasons, None
    subscribers = events.listeners()
    if _THREAD.compiling is None:
        _THREAD.compiling = []
    if not subscribers:
        _THREAD.compiling.append((time.perf_counter(), None))  # its end callback pops it
        return
    trigger = getattr(getattr(args[0], "callback_trigger", None), "name", "DYNAMO").lower() if args else "dynamo"
    compile_id = getattr(args[0], "compile_id", None) if args else None
    reasons, code, inputs = recompile or ([], None, {})
    event = CompileEvent(
        compile_id=str(compile_id) if compile_id is not None else current_compile_id(),
        recompile=recompile is not None,
        reasons=reasons,
        trigger=trigger,
        code=code,
        inputs=inputs,
    )
    _THREAD.compiling.append((time.perf_counter(), event))
    events.deliver(subscribers, "compile", event)


def _compile_ended(*args: Any) -> None:
    """Deliver how long the compile that just ended took (CUDA graph recordings are timed by their own hook)."""
    if not _THREAD.compiling:
        return
    started, event = _THREAD.compiling.pop()
    if event is None or event.trigger == "cudagraph_recording" or not events.listeners():
        return
    events.publish("runtime", RuntimeEvent("dynamo_compile", time.perf_counter() - started, event.describe(), started))
