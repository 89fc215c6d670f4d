"""First-call costs: the timing hooks that name what torch pays inside a served call, and what each cost is.

The hooks are one :class:`~inductor_knobs.core.patching.SharedPatch` (:data:`FIRST_CALL_HOOKS`), held by every
block whose ``patches`` lists it (``ik.serving.no_stalls``, the cold-start recorder) next to the core's observer
hooks, and each delivers a :class:`~inductor_knobs.core.events.RuntimeEvent` on the compile-event channel:

- wrapt timing wrappers of what the patch module lists (``runtime_hooks``): ``CachingAutotuner.benchmark_all_configs``,
  ``.coordinate_descent_tuning``, ``.precompile`` and ``CUDAGraphTreeManager.record_function``; torch calls them
  only when it pays that cost (the descent before 2.9 on every template launch: an event under 0.1 ms is dropped);
- Python's ``gc.callbacks``, as ``python_gc``;
- Triton's compilation listener (``triton.knobs.compilation.listener``, Triton 3.4+), which tells a Triton compile
  from a hit in Triton's cache (:func:`triton_compiles`).

The core times Dynamo's compiles itself (``dynamo_compile``); :data:`CAUSES` says what every cause is.
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

from .. import RuntimeEvent
from ..errors import DriftWarning
from ..ext import SAFE_EXIT, SharedPatch, events, on_import, remove_by_identity, resolve, torch_compat, wrap_attribute

#: Every cause a stall can be attributed to, with what it is (the guard's report and ``doctor`` use these words).
CAUSES = {
    "dynamo_compile": "Dynamo (re)compile and Inductor compile of the graph",
    "gemm_autotune": "Inductor GEMM autotune (select_algorithm benchmarking)",
    "runtime_benchmark": "Inductor runtime benchmark of Triton configs (CachingAutotuner.benchmark_all_configs)",
    "coordinate_descent": "Inductor coordinate-descent tuning (CachingAutotuner.coordinate_descent_tuning)",
    "triton_compile": "Triton kernel compile (CachingAutotuner.precompile; with Triton 3.4+, one in which Triton compiled)",
    "triton_load": "Inductor loaded Triton kernels compiled before (Triton's cache, the FX graph cache's bundle or a compile "
    "worker): CachingAutotuner.precompile in which Triton compiled nothing (Triton 3.4+)",
    "cudagraph_recording": "CUDA graph recording of a new shape (CUDAGraphTreeManager.record_function, or a capture "
    "of ik.serving.capture_cuda_graphs)",
    "cudnn_sdpa_plan": "cuDNN SDPA execution-plan build (one per exact input shape)",
    "cublas_first_call": "cuBLAS/cuBLASLt first call at a new GEMM shape (heuristics, handles, workspace)",
    "tunableop": "TunableOp GEMM tuning (torch.cuda.tunable)",
    "cudnn_conv": "cuDNN convolution algorithm search at a new shape",
    "aten_first_call": "an ATen op slow at a new shape (named in the detail)",
    "python_gc": "Python's cyclic garbage collector (gc.callbacks): a collection walks the objects the process holds",
    "thread_off_cpu": "the serving thread was off the CPU (time.thread_time): waiting for the GIL, preempted, a CPU quota",
    "profiler": "the guard's own sampled torch.profiler on a new-shape call (its cost measured by ik.serving.warmup)",
    "host_slower": "the call's host part (Python, kernel launches) ran longer at a warm shape with no hook or profiled op "
    "in it: a slower or shared CPU, not a first-call cost",
    "gpu_slower": "the call waited longer for the GPU after its last launch: clocks, power or thermal limits, another "
    "process on the GPU; not a first-call cost",
    "queued": "waited for another thread's call of the same CUDA graphs (capture_cuda_graphs' lock)",
    "concurrent_calls": "other threads' calls of the guard ran at the same time: their GPU work and Python came first",
    "unattributed": "no hook or profiled op accounts for the time",
}

#: A timed hook event shorter than this (seconds) is not a first-call cost: it is not delivered.
MIN_EVENT_SECONDS = 1e-4
#: A collection shorter than this (seconds) is not named: young generations take microseconds.
MIN_GC_SECONDS = 1e-3
_GC_STARTED: list[float] = []  # the running collection's start (collections do not nest)


class _TritonCounts:
    """Triton's compilation-listener calls, process-wide: real compiles and hits in Triton's own cache."""

    listening = False  # whether the listener is installed (Triton 3.4+ and the hooks held)
    waiting = False  # whether the hooks wait for an installed Triton's import (it compiled nothing yet)
    compiled = 0
    cache_hits = 0


class _ThreadCounts(threading.local):
    triton_compiled = 0  # real Triton compiles on this thread (the listener's cache_hit=False calls)


_TRITON = _TritonCounts()
_TRITON_LOCK = threading.Lock()
_THREAD = _ThreadCounts()


def _steps() -> list[Any]:
    """Each timing wrapper waits for its module's import (:func:`~inductor_knobs.core.patching.on_import`)."""
    import torch

    release = torch_compat.release_of(torch.__version__)
    steps = [
        on_import(path.partition(":")[0], functools.partial(_timed_steps, path, kind))
        for kind, path in torch_compat.installed().runtime_hooks(release)
    ]
    return [*steps, _add_gc_callback, _await_triton, on_import("triton", lambda: [_add_triton_listener])]


#: The first-call cost hooks, held by the serving blocks that list it in ``patches``.
FIRST_CALL_HOOKS = SharedPatch("first-call cost hooks", _steps)


def _timed_steps(path: str, kind: str) -> list[Any]:
    return [_wrap_timed(path, kind)]


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def _await_triton(push: Callable[[Callable[[], None]], None]) -> None:
    """An installed Triton not imported yet compiled nothing: ``(0, 0)`` counts until its import installs the listener."""
    if "triton" in sys.modules or not _triton_installed():
        return

    def undo() -> None:
        _TRITON.waiting = False

    push(undo)
    _TRITON.waiting = True


def _add_triton_listener(push: Callable[[Callable[[], None]], None]) -> None:
    """Count Triton's compiles by whether its own cache served them; Triton has one listener slot (3.4+), so
    ours calls the one that was there, and the undo puts it back only while ours is still installed."""
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


def _add_gc_callback(push: Callable[[Callable[[], None]], None]) -> None:
    """Time Python's collections as ``python_gc``: a full one pauses every thread for tens of ms in a process
    that holds a model and its compiled graphs."""
    push(lambda: remove_by_identity(gc.callbacks, _gc_callback))
    gc.callbacks.append(_gc_callback)


def _wrap_timed(path: str, kind: str) -> Callable[[Callable[[Callable[[], None]], None]], None]:
    """A step that wraps ``path`` (``module:Class.method``) to deliver a timed ``RuntimeEvent`` of ``kind``."""
    timed = _timed_wrapper(kind)

    def step(push: Callable[[Callable[[], None]], None]) -> None:
        if not _callable_at(path):
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
    """``triton.knobs.compilation`` of ``triton`` (None: import it) when it has the ``listener`` slot (Triton 3.4+),
    else None (older, or no Triton)."""
    if triton is None:
        try:
            triton = importlib.import_module("triton")
        except ImportError:
            return None
    compilation = getattr(getattr(triton, "knobs", None), "compilation", None)
    return compilation if compilation is not None and hasattr(compilation, "listener") else None


def runtime_hook_status() -> list[tuple[str, str, bool]]:
    """``(cause, dotted path, exists on this torch)`` for every timing hook the patch module lists."""
    import torch

    status = []
    for kind, path in torch_compat.installed(strict=False).runtime_hooks(torch_compat.release_of(torch.__version__)):
        status.append((kind, path.replace(":", "."), _callable_at(path)))
    return status


def _callable_at(path: str) -> bool:
    """Whether ``module:Class.method`` resolves to something callable here."""
    try:
        owner, name = resolve(path)
    except (ImportError, AttributeError):
        return False
    return callable(getattr(owner, name, None))


def triton_compiles() -> tuple[int, int] | None:
    """``(real compiles, Triton cache hits)`` Triton reported in this process while the hooks were held.

    None while Triton's compilation listener is not installed (Triton < 3.4, no Triton, or no hooks held): a
    Triton compile then cannot be told from a load.  A compile in one of Inductor's compile-worker processes is
    reported there, not here.
    """
    with _TRITON_LOCK, SAFE_EXIT:
        # waiting holds only while Triton is not imported: an install that never fired must not vouch for it
        waiting = _TRITON.waiting and "triton" not in sys.modules
        return (_TRITON.compiled, _TRITON.cache_hits) if _TRITON.listening or waiting else None


def _triton_listener(previous: Callable[..., Any] | None) -> Callable[..., Any]:
    """Count each compile by ``cache_hit`` (keywords ``src, metadata, metadata_group, times, cache_hit``;
    ``triton/compiler/compiler.py`` ``compile``, 3.4+), then call ``previous``."""

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


def doctor_section() -> dict[str, Any]:
    """What ``ik.serving.no_stalls`` can see on this torch, for ``inductor-knobs doctor``: each first-call cost,
    the hook that names it and whether it exists, the causes the sampled profiler names, SDPA and TunableOp."""
    from ..ext import can_record_autotune

    patches = torch_compat.installed(strict=False)
    hooks: list[dict[str, Any]] = [
        {"cause": "dynamo_compile", "hook": "torch._dynamo.callback_handler start/end callbacks", "available": True},
        {
            "cause": "gemm_autotune",
            "hook": "torch._inductor.select_algorithm.add_feedback_saver",
            "available": can_record_autotune(),
        },
    ]
    hooks += [{"cause": kind, "hook": path, "available": ok} for kind, path, ok in runtime_hook_status()]
    hooks.append(
        {
            "cause": "triton_load",
            "hook": "triton.knobs.compilation.listener (Triton 3.4+: tells a Triton compile from a hit in Triton's cache)",
            "available": triton_compilation() is not None,
            "missing": "MISSING (no Triton, or Triton < 3.4): every timed precompile is named triton_compile",
        }
    )
    by_profiler = sorted(set(patches.per_shape_ops.values()) | {"tunableop", "aten_first_call"})
    try:
        enabled, order = patches.read_sdpa()
        sdpa: dict[str, Any] = {"enabled": list(enabled), "priority_order": list(order) if order else None}
    except Exception as err:  # noqa: BLE001 - doctor reports, it does not fail
        sdpa = {"error": repr(err)}
    return {
        "hooks": hooks,
        "profiled": [{"cause": kind, "what": CAUSES[kind]} for kind in by_profiler],
        "sdpa": sdpa,
        "tunableop": patches.tunableop_problem() or ("enabled" if patches.read_tunableop() else "disabled"),
    }


def render_doctor_section(section: dict[str, Any]) -> list[str]:
    """The lines ``doctor`` prints for :func:`doctor_section`."""
    lines = ["", "serving guard (ik.serving.no_stalls) names these first-call costs on this torch:"]
    for hook in section["hooks"]:
        missing = hook.get("missing", "MISSING on this torch: shows as a slow op or 'unattributed'")
        lines.append(f"  {hook['cause']:20} {hook['hook']}: {'hook present' if hook['available'] else missing}")
    lines += [f"  {p['cause']:20} torch.profiler, on calls at new shapes (sampled): {p['what']}" for p in section["profiled"]]
    sdpa = section["sdpa"]
    if "error" in sdpa:
        lines.append(f"  SDPA backends: could not be read ({sdpa['error']})")
    else:
        lines.append(f"  SDPA backends enabled, in priority order: {', '.join(sdpa['enabled'])} (knob: sdpa_backends)")
    lines.append(f"  TunableOp: {section['tunableop']} (knob: tunableop)")
    return lines
