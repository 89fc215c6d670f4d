"""Process-wide hooks that publish autotuning, Dynamo compilations and first-call costs on the compile-event channel.

Every event goes through :func:`inductor_knobs.core.events.publish`, on the thread that compiles, to the
consumers that hear it (recorders, guards, ``ik.warmup``).  The hooks exist while at least one
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
  :class:`~inductor_knobs.core.records.RuntimeEvent`: ``CachingAutotuner.benchmark_all_configs`` (runtime
  benchmark of Triton configs), ``CachingAutotuner.coordinate_descent_tuning``,
  ``CachingAutotuner.precompile`` (Triton compile) and ``CUDAGraphTreeManager.record_function`` (a
  CUDA graph recording); the patch module lists them (``runtime_hooks``).  They cost nothing on
  the steady-state path: torch calls them only when it pays that cost (for the descent from 2.9 on;
  before, ``run`` calls it on every launch of a template kernel, and an event under 0.1 ms is dropped);
- Triton's compilation listener (``triton.knobs.compilation.listener``, Triton 3.4+), which tells a real
  Triton compile from a hit in Triton's cache (see :func:`~inductor_knobs.core.hook_callbacks.triton_compiles`).

This module installs and removes them (:data:`OBSERVER_HOOKS`, one :class:`HooksUse` record per
holder); what each does when torch calls it is :mod:`inductor_knobs.core.hook_callbacks`.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import DriftWarning
from . import torch_compat
from ._patching import (
    SharedPatch,
    initializing,
    on_import,
    remove_by_identity,
    resolve,
    warn_import_hook_failures,
    wrap_attribute,
)
from ._undo import SAFE_EXIT, Change, Step, Undo
from .hook_callbacks import (
    _HOOKS,
    _THREAD,
    _TRITON,
    _compile_ended,
    _compile_started,
    _compile_wrapper,
    _feedback_saver,
    _gc_callback,
    _log_results_wrapper,
    _reasons_wrapper,
    _timed_wrapper,
    _triton_listener,
)

SELECT_ALGORITHM = "torch._inductor.select_algorithm"
CONVERT_FRAME = "torch._dynamo.convert_frame"
DYNAMO = "torch._dynamo"


def _hook_steps() -> list[Step]:
    """The install steps, each deferred to its module's import (:func:`~._patching.on_import`): entering an
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
    from :func:`~.hook_callbacks.triton_compiles`) until its import installs the listener."""
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
    compilation = _triton_compilation(sys.modules["triton"])
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


def _triton_compilation(triton: Any = None) -> Any:
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
