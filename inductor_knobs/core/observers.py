"""Observer hooks: process-wide hooks that publish autotuning and Dynamo's compiles on the compile-event channel.

Installed while a :class:`HooksUse` record holds :data:`OBSERVER_HOOKS`; each event is published on the compiling
thread.  Torch facts:

- ``select_algorithm.add_feedback_saver`` (2.5+; 4/5/6 positional arguments by release: ``feedback_saver_arity``);
  removed by identity (``clear_feedback_savers``, 2.9+, would drop others' savers);
- static ``AlgorithmSelectorCache.log_results(name, input_nodes, timings, elapse, precompile_elapse, ...)`` (2.4–2.15);
- Dynamo's recompile-reason function (``patches.recompile_reasons_name``), or on 2.4–2.5 ``convert_frame._compile``;
- ``torch._dynamo.callback_handler`` start/end callbacks (``dynamo_compile`` runtime events); ``torch._dynamo.reset()``
  drops them, so a new holder registers them again.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ..errors import DriftWarning
from . import events, torch_compat
from .events import CompileEvent, RuntimeEvent, current_compile_id, record_event
from .patching import (
    SharedPatch,
    initializing,
    on_import,
    remove_by_identity,
    warn_import_hook_failures,
    wrap_attribute,
)
from .undo import SAFE_EXIT, Change, Step, Undo

SELECT_ALGORITHM = "torch._inductor.select_algorithm"
CONVERT_FRAME = "torch._dynamo.convert_frame"
DYNAMO = "torch._dynamo"


def _hook_steps() -> list[Step]:
    """The install steps, each deferred to its module's import: entering an observer imports no torch submodule."""
    import torch

    patches = torch_compat.installed()
    release = torch_compat.release_of(torch.__version__)
    _HOOKS.arity = patches.feedback_saver_arity(release)
    steps: list[Step] = []
    if _HOOKS.arity:
        steps.append(on_import(SELECT_ALGORITHM, lambda: [_add_feedback_saver, _wrap_log_results]))
    if patches.reasons_after_start_callbacks:  # 2.4-2.5: read them as _compile starts
        steps.append(on_import(CONVERT_FRAME, lambda: [wrap_attribute(f"{CONVERT_FRAME}:_compile", _compile_wrapper)]))
    else:
        steps.append(on_import(CONVERT_FRAME, lambda: [_wrap_recompile_reasons(patches.recompile_reasons_name)]))
    steps.append(on_import(DYNAMO, lambda: [_add_compile_callback]))
    return steps


def _add_feedback_saver(push: Callable[[Undo], None]) -> None:
    """Add the saver, from a baseline of torch's autotune counter (its rise tells a fresh benchmark)."""
    counters = sys.modules["torch._dynamo.utils"].counters  # imported by select_algorithm (steps do not import)
    _HOOKS.autotune_count = counters["inductor"]["select_algorithm_autotune"]
    sa = sys.modules[SELECT_ALGORITHM]

    def undo() -> None:  # safe when add_feedback_saver failed before it made the selector cache
        cache = getattr(sa, "_ALGORITHM_SELECTOR_CACHE", None)
        if cache is not None:
            remove_by_identity(cache.feedback_saver_fns, _feedback_saver)

    push(undo)
    sa.add_feedback_saver(_feedback_saver)


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
        handler = getattr(sys.modules.get(DYNAMO), "callback_handler", None)
        if handler is not None:
            remove_by_identity(handler.start_callbacks, _compile_started)
            remove_by_identity(handler.end_callbacks, _compile_ended)
        _THREAD.timing = _THREAD.reasons = _THREAD.compiling = None

    push(undo)
    _register_compile_callback()


def _register_compile_callback() -> None:
    handler = sys.modules[DYNAMO].callback_handler  # imported (steps do not import: see on_import)
    if not any(cb is _compile_started for cb in handler.start_callbacks):
        handler.register_start_callback(_compile_started)
    if not any(cb is _compile_ended for cb in handler.end_callbacks):
        handler.register_end_callback(_compile_ended)


OBSERVER_HOOKS = SharedPatch("autotune/compile observer hooks", _hook_steps)


def can_record_autotune() -> bool:
    """Whether the installed torch reports autotuning to feedback savers (2.5+)."""
    import torch

    return bool(torch_compat.installed().feedback_saver_arity(torch_compat.release_of(torch.__version__)))


class PatchUse(Change):
    """Undo record: hold a :class:`~inductor_knobs.core.patching.SharedPatch` (idempotent both ways)."""

    __slots__ = ("patch",)

    def __init__(self, patch: SharedPatch) -> None:
        self.patch = patch

    @property
    def description(self) -> str:
        return f"use {self.patch.name}"

    def apply(self) -> None:
        self.patch.acquire(self)

    def revert(self) -> None:
        self.patch.release(self)


class HooksUse(PatchUse):
    """Hold the observer hooks; with ``need_autotune``, apply raises NotSupportedOnThisTorch on torch < 2.5.
    Apply registers Dynamo's callbacks again when ``torch._dynamo.reset()`` dropped them."""

    __slots__ = ("need_autotune",)

    def __init__(self, *, need_autotune: bool = True) -> None:
        super().__init__(OBSERVER_HOOKS)
        self.need_autotune = need_autotune

    def apply(self) -> None:
        import torch

        from ..errors import NotSupportedOnThisTorch

        if not can_record_autotune() and self.need_autotune:  # installed() raises on an unsupported torch either way
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


def hooks_installed() -> bool:
    """Whether any observer hook is installed now."""
    return OBSERVER_HOOKS.users > 0


class _ThreadState(threading.local):
    """Facts torch reports just before the event they belong to, on the same thread."""

    timing: tuple[str, float, float] | None = None  # log_results(name, elapse, precompile_elapse)
    reasons: tuple[list[str], str | None, dict[str, str]] | None = None  # the recompile about to start
    compiling: list[tuple[float, CompileEvent | None]] | None = None  # started compiles (start time, event)


_THREAD = _ThreadState()


_HOOKS = SimpleNamespace(autotune_count=0, arity=0)  # the autotune counter baseline; this torch's saver arity


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
        _THREAD.reasons = _recompile(reasons, args[1] if len(args) > 1 else kwargs.get("frame"))
    return reasons


def _compile_wrapper(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """2.4-2.5: read Dynamo's recompile reasons before ``_compile`` runs the start callbacks."""
    try:
        found = torch_compat.installed().recompile_reasons_of(wrapped, args, kwargs)
    except Exception as err:  # noqa: BLE001 - telemetry must never break a compilation
        warnings.warn(f"inductor_knobs could not read Dynamo's recompile reasons: {err!r}", DriftWarning, stacklevel=2)
        found = None
    if found is not None:
        _THREAD.reasons = _recompile(*found)
    return wrapped(*args, **kwargs)


def _recompile(reasons: Any, frame: Any) -> tuple[list[str], str | None, dict[str, str]]:
    """The reasons, ``name (file:line)`` and tensor arguments of the frame Dynamo is about to recompile."""
    import torch

    texts = [str(r) for r in reasons or []] or ["Dynamo found no guard-failure reason"]
    code = getattr(frame, "f_code", None)
    if code is None:
        return texts, None, {}
    where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    tensors = {}
    for name, value in list(getattr(frame, "f_locals", {}).items())[:16]:
        # nn.Module calls reach Dynamo through a wrapper whose frame holds ``args``
        items = enumerate(value) if isinstance(value, (tuple, list)) else [(None, value)]
        for index, item in list(items)[:8]:
            if isinstance(item, torch.Tensor):
                tensors[name if index is None else f"{name}[{index}]"] = f"{item.dtype}{list(item.shape)}"
    return texts, where, tensors


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
    """Publish the ended compile's time (CUDA graph recordings are timed by their own hook)."""
    if not _THREAD.compiling:
        return
    started, event = _THREAD.compiling.pop()
    if event is None or event.trigger == "cudagraph_recording" or not events.listeners():
        return
    events.publish("runtime", RuntimeEvent("dynamo_compile", time.perf_counter() - started, event.describe(), started))
