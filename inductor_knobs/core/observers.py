"""Process-wide hooks that publish autotuning, Dynamo compilations and first-call costs on the compile-event channel.

Every event goes through :func:`inductor_knobs.core.events.publish`, on the thread that compiles, to the
consumers that hear it (recorders, guards, ``ik.serving.warmup``).  The hooks exist while at least one
:class:`HooksUse` record holds them, anywhere in the process, and are removed when the last one
leaves:

- a feedback saver (``select_algorithm.add_feedback_saver``, torch 2.5+), called positionally with
  4, 5 or 6 arguments depending on the release (see each patch module's
  ``feedback_saver_arity_by_release``); removed from ``_ALGORITHM_SELECTOR_CACHE.feedback_saver_fns``
  by identity, since ``clear_feedback_savers`` (2.9+) would drop other people's savers too;
- a wrapt wrapper of the static ``AlgorithmSelectorCache.log_results``, which receives the
  benchmarking and precompile seconds torch measured (``(name, input_nodes, timings, elapse,
  precompile_elapse, ...)`` in every release 2.4–2.15); torch calls it, before the savers, only
  when it really benchmarked or logs at DEBUG;
- a wrapt wrapper of the recompile-reason function ``_dynamo/convert_frame.py`` imported by name
  (``patches.recompile_reasons_name``), which returns Dynamo's guard-failure reasons; on 2.4-2.5,
  which ask for them after the compile-start callbacks ran (``patches.reasons_after_start_callbacks``),
  a wrapper of ``convert_frame._compile`` that reads them before it starts instead;
- a Dynamo compile-start and compile-end callback (``torch._dynamo.callback_handler``, 2.4+), which
  also time each compile.  ``torch._dynamo.reset()`` clears every callback, so entering an observer
  registers them again when they went missing;
- timing wrappers (wrapt) of the first-call costs Inductor pays at run time, each delivered as a
  :class:`~inductor_knobs.core.events.RuntimeEvent`: ``CachingAutotuner.benchmark_all_configs`` (runtime
  benchmark of Triton configs), ``CachingAutotuner.coordinate_descent_tuning``,
  ``CachingAutotuner.precompile`` (Triton compile) and ``CUDAGraphTreeManager.record_function`` (a
  CUDA graph recording); the patch module lists them (``runtime_hooks``).  They cost nothing on
  the steady-state path: torch calls them only when it pays that cost (for the descent from 2.9 on;
  before, ``run`` calls it on every launch of a template kernel, and an event under 0.1 ms is dropped);
- Triton's compilation listener (``triton.knobs.compilation.listener``, Triton 3.4+), which tells a real
  Triton compile from a hit in Triton's cache (see :func:`triton_compiles`).

This module installs and removes them (:data:`OBSERVER_HOOKS`, one :class:`HooksUse` record per
holder); what each does when torch calls it is below, in this module.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import DriftWarning
from . import events, torch_compat
from .events import CompileEvent, RuntimeEvent, current_compile_id, record_event
from .patching import (
    SharedPatch,
    initializing,
    on_import,
    remove_by_identity,
    resolve,
    warn_import_hook_failures,
    wrap_attribute,
)
from .undo import SAFE_EXIT, Change, Step, Undo

SELECT_ALGORITHM = "torch._inductor.select_algorithm"
CONVERT_FRAME = "torch._dynamo.convert_frame"
DYNAMO = "torch._dynamo"


def _hook_steps() -> list[Step]:
    """The install steps, each deferred to its module's import (:func:`~.patching.on_import`): entering an
    observer imports neither Inductor nor Dynamo nor Triton, and a process that never imports them (one
    serving an AOT bundle) never pays for them; nothing of a module can run before its import installs
    the hooks there."""
    import torch

    patches = torch_compat.installed()
    release = torch_compat.release_of(torch.__version__)
    _HOOKS.arity = patches.feedback_saver_arity(release)
    steps: list[Step] = []
    if _HOOKS.arity:
        steps.append(on_import(SELECT_ALGORITHM, lambda: [_read_autotune_count, _add_feedback_saver, _wrap_log_results]))
    if patches.reasons_after_start_callbacks:  # 2.4-2.5: read them as _compile starts
        steps.append(on_import(CONVERT_FRAME, lambda: [wrap_attribute(f"{CONVERT_FRAME}:_compile", _compile_wrapper)]))
    else:
        steps.append(on_import(CONVERT_FRAME, lambda: [_wrap_recompile_reasons(patches.recompile_reasons_name)]))
    steps.append(on_import(DYNAMO, lambda: [_add_compile_callback]))
    for kind, path in patches.runtime_hooks(release):
        steps.append(on_import(path.partition(":")[0], functools.partial(_timed_steps, path, kind)))
    steps += [_add_gc_callback, _await_triton, on_import("triton", lambda: [_add_triton_listener])]
    return steps


def _timed_steps(path: str, kind: str) -> list[Step]:
    return [_wrap_timed(path, kind)]


def _read_autotune_count(push: Callable[[Undo], None]) -> None:
    """Start from torch's autotune counter as it is (the feedback saver tells a fresh benchmark by its rise)."""
    counters = sys.modules["torch._dynamo.utils"].counters  # imported by select_algorithm (steps do not import)
    _HOOKS.autotune_count = counters["inductor"]["select_algorithm_autotune"]


@functools.cache
def _triton_installed() -> bool:
    """Whether Triton can be imported here (a search of ``sys.path``: once per process, not per block)."""
    return importlib.util.find_spec("triton") is not None


def _await_triton(push: Callable[[Undo], None]) -> None:
    """While an installed Triton is not imported yet, it has compiled nothing here: say so (``(0, 0)`` counts
    from :func:`triton_compiles`) until its import installs the listener."""
    if "triton" in sys.modules or not _triton_installed():
        return

    def undo() -> None:
        _TRITON.waiting = False

    push(undo)
    _TRITON.waiting = True


def _add_triton_listener(push: Callable[[Undo], None]) -> None:
    """Count Triton's compiles by whether its own cache served them (``triton.knobs.compilation.listener``).

    Triton has one listener slot (3.4+; absent before, and then nothing is installed): ours calls the
    listener that was there.  The undo puts that one back only while ours is still installed; a
    listener installed after ours stays (it may call ours, which then only counts).
    """
    compilation = triton_compilation(sys.modules["triton"])
    _TRITON.waiting = False  # imported: from now on only the listener can say
    if compilation is None:
        return
    previous = compilation.listener
    ours = _triton_listener(previous)

    def undo() -> None:
        _TRITON.listening = False
        if compilation.listener is ours:
            compilation.listener = previous

    push(undo)
    compilation.listener = ours
    _TRITON.listening = True


def _add_gc_callback(push: Callable[[Undo], None]) -> None:
    """Time Python's garbage collections (``gc.callbacks``, Python 3.3+) as ``python_gc`` events.

    A collection pauses every thread (it holds the GIL), so it lands on the call running in the
    thread that triggered it.  A full (generation 2) collection walks every tracked object: in a
    process that holds a model, its compiled graphs and transformers, tens of milliseconds.
    """
    push(lambda: remove_by_identity(gc.callbacks, _gc_callback))
    gc.callbacks.append(_gc_callback)


def _wrap_timed(path: str, kind: str) -> Step:
    """A step that wraps ``path`` (``module:Class.method``) to deliver a timed ``RuntimeEvent`` of ``kind``."""
    timed = _timed_wrapper(kind)

    def step(push: Callable[[Undo], None]) -> None:
        try:
            owner, name = resolve(path)
            found = getattr(owner, name, None)
        except (ImportError, AttributeError):
            found = None
        if not callable(found):
            warnings.warn(
                f"{path.replace(':', '.')} does not exist on this torch; {kind} costs will show as a slow op or "
                "'unattributed' (inductor-knobs doctor lists the hooks)",
                DriftWarning,
                stacklevel=4,
            )
            return
        wrap_attribute(path, timed)(push)

    return step


def triton_compilation(triton: Any = None) -> Any:
    """``triton.knobs.compilation`` of ``triton`` (None: import it, for ``doctor``) when it has the ``listener``
    slot (Triton 3.4+), else None (older, or no Triton)."""
    if triton is None:
        try:
            triton = importlib.import_module("triton")
        except ImportError:
            return None
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    return compilation if compilation is not None and hasattr(compilation, "listener") else None


def runtime_hook_status() -> list[tuple[str, str, bool]]:
    """``(cause kind, dotted path, exists on this torch)`` for every timing hook the patch module lists (``doctor``)."""
    import torch

    patches = torch_compat.installed(strict=False)
    status = []
    for kind, path in patches.runtime_hooks(torch_compat.release_of(torch.__version__)):
        try:
            owner, name = resolve(path)
            exists = callable(getattr(owner, name, None))
        except (ImportError, AttributeError):
            exists = False
        status.append((kind, path.replace(":", "."), exists))
    return status


def _add_feedback_saver(push: Callable[[Undo], None]) -> None:
    sa = sys.modules[SELECT_ALGORITHM]
    # By identity: clear_feedback_savers (2.9+) would drop other people's savers too.
    push(lambda: _remove_feedback_saver(sa))
    sa.add_feedback_saver(_feedback_saver)


def _remove_feedback_saver(sa: Any) -> None:
    """Undo of :func:`_add_feedback_saver`, safe when ``add_feedback_saver`` failed before it made the selector cache."""
    cache = getattr(sa, "_ALGORITHM_SELECTOR_CACHE", None)
    if cache is not None:
        remove_by_identity(cache.feedback_saver_fns, _feedback_saver)


def _wrap_log_results(push: Callable[[Undo], None]) -> None:
    cls = sys.modules[SELECT_ALGORITHM].AlgorithmSelectorCache
    if not isinstance(cls.__dict__.get("log_results"), staticmethod):
        warnings.warn(
            "AlgorithmSelectorCache.log_results is not a staticmethod on this torch; autotune records "
            "will not have benchmarking seconds",
            DriftWarning,
            stacklevel=4,
        )
        return
    wrap_attribute(f"{SELECT_ALGORITHM}:AlgorithmSelectorCache.log_results", _log_results_wrapper)(push)


def _wrap_recompile_reasons(name: str) -> Step:
    def step(push: Callable[[Undo], None]) -> None:
        if not callable(getattr(sys.modules[CONVERT_FRAME], name, None)):
            warnings.warn(
                f"{CONVERT_FRAME}.{name} does not exist on this torch; compile events will not carry Dynamo's recompile reasons",
                DriftWarning,
                stacklevel=4,
            )
            return
        wrap_attribute(f"{CONVERT_FRAME}:{name}", _reasons_wrapper)(push)

    return step


def _add_compile_callback(push: Callable[[Undo], None]) -> None:
    def undo() -> None:
        _drop_compile_callback()
        _THREAD.timing = _THREAD.reasons = _THREAD.compiling = None

    push(undo)
    _register_compile_callback()


def _register_compile_callback() -> None:
    handler = sys.modules[DYNAMO].callback_handler  # imported (steps do not import: see on_import)
    if not any(cb is _compile_started for cb in handler.start_callbacks):
        handler.register_start_callback(_compile_started)
    if not any(cb is _compile_ended for cb in handler.end_callbacks):
        handler.register_end_callback(_compile_ended)


def _drop_compile_callback() -> None:
    handler = getattr(sys.modules.get(DYNAMO), "callback_handler", None)
    if handler is not None:
        remove_by_identity(handler.start_callbacks, _compile_started)
        remove_by_identity(handler.end_callbacks, _compile_ended)


OBSERVER_HOOKS = SharedPatch("autotune/compile observer hooks", _hook_steps)


def can_record_autotune() -> bool:
    """Whether the installed torch reports autotuning to feedback savers (2.5+)."""
    import torch

    return bool(torch_compat.installed().feedback_saver_arity(torch_compat.release_of(torch.__version__)))


class HooksUse(Change):
    """Undo record: hold the observer hooks (installed for the first holder, removed after the last).

    Args:
        need_autotune: refuse on a torch that cannot report autotuning (no feedback savers).

    Apply raises :class:`~inductor_knobs.errors.NotSupportedOnThisTorch` with ``need_autotune`` on
    torch < 2.5 (``add_feedback_saver`` arrived in 2.5), and registers Dynamo's callbacks again when
    ``torch._dynamo.reset()`` dropped them.  Idempotent both ways (a holder counts once).
    """

    __slots__ = ("need_autotune",)

    def __init__(self, *, need_autotune: bool = True) -> None:
        self.need_autotune = need_autotune

    @property
    def description(self) -> str:
        return f"use {OBSERVER_HOOKS.name}"

    def apply(self) -> None:
        import torch

        from ..errors import NotSupportedOnThisTorch

        patches = torch_compat.installed()
        if self.need_autotune and not patches.feedback_saver_arity(torch_compat.release_of(torch.__version__)):
            raise NotSupportedOnThisTorch(
                f"autotune records need torch.{SELECT_ALGORITHM}.add_feedback_saver, which torch "
                f"{torch.__version__} does not have (it arrived in torch 2.5)"
            )
        warn_import_hook_failures(DriftWarning)  # an import hook cannot raise: its failures are told here
        with OBSERVER_HOOKS.lock, SAFE_EXIT:
            dynamo = sys.modules.get(DYNAMO)
            if OBSERVER_HOOKS.users and dynamo is not None and not initializing(dynamo):
                _register_compile_callback()  # again, if torch._dynamo.reset() dropped it
            OBSERVER_HOOKS.acquire(self)

    def revert(self) -> None:
        OBSERVER_HOOKS.release(self)


def hooks_installed() -> bool:
    """Whether any observer hook is installed now (for tests and ``doctor``)."""
    return OBSERVER_HOOKS.users > 0


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
        record = record_event(timings, name, input_nodes, precompile_times, fresh, timing)
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
