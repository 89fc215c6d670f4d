"""Observer hooks: process-wide hooks that publish autotuning and Dynamo's compiles on the compile-event channel.

Each event goes through :func:`inductor_knobs.core.events.publish`, on the compiling thread.  The hooks exist
while at least one :class:`HooksUse` record holds them (:data:`OBSERVER_HOOKS`):

- a feedback saver (``select_algorithm.add_feedback_saver``, 2.5+; 4, 5 or 6 positional arguments by release:
  ``feedback_saver_arity``), removed by identity (``clear_feedback_savers``, 2.9+, would drop others' savers);
- a wrapt wrapper of the static ``AlgorithmSelectorCache.log_results`` (benchmarking and precompile seconds,
  ``(name, input_nodes, timings, elapse, precompile_elapse, ...)`` in 2.4–2.15);
- a wrapper of Dynamo's recompile-reason function (``patches.recompile_reasons_name``), or on 2.4–2.5 of
  ``convert_frame._compile``, which asks for them after the start callbacks ran;
- Dynamo's compile-start and -end callbacks (``torch._dynamo.callback_handler``), which time each compile as a
  ``dynamo_compile`` :class:`~inductor_knobs.core.events.RuntimeEvent`; ``torch._dynamo.reset()`` drops them, so
  entering an observer registers them again.
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
    return steps


def _read_autotune_count(push: Callable[[Undo], None]) -> None:
    """Start from torch's autotune counter as it is (the feedback saver tells a fresh benchmark by its rise)."""
    counters = sys.modules["torch._dynamo.utils"].counters  # imported by select_algorithm (steps do not import)
    _HOOKS.autotune_count = counters["inductor"]["select_algorithm_autotune"]


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


class _ThreadState(threading.local):
    """Facts torch reports just before the event they belong to, on the same thread."""

    timing: tuple[str, float, float] | None = None  # log_results(name, elapse, precompile_elapse)
    reasons: tuple[list[str], str | None, dict[str, str]] | None = None  # the recompile about to start
    compiling: list[tuple[float, CompileEvent | None]] | None = None  # started compiles (start time, event)


_THREAD = _ThreadState()


class _Hooks:
    """What the hooks share: the counter baseline and the saver arity of the installed torch."""

    autotune_count = 0
    arity = 0


_HOOKS = _Hooks()


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
