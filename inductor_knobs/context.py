"""``knobs(...)`` and ``force_gemm_autotune(...)``: one object that is a context manager,
a decorator (sync and async functions) and ``start()``/``stop()``.

Thread semantics follow the installed torch's config (see the patch module's
``config_is_thread_local``): from 2.12 each thread has its own knobs, as it has its own
Inductor config; before 2.12 config is process-global, so knobs are too, and a second
thread entering while another thread holds knobs gets :class:`ConcurrentKnobsError`
instead of interleaving two undo stacks.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from . import torch_compat
from ._undo import Change, apply_all, revert_all
from .emulate import Emulation, EmulationSpec, plan_emulation, resolve_spec
from .errors import ConcurrentKnobsError, KnobsError
from .interception import unwrap_not_applied
from .knobs import Knobs
from .plan import plan

F = TypeVar("F", bound=Callable[..., Any])


class _ProcessOwner:
    """Which thread holds knobs while config is process-global (torch < 2.12)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: int | None = None
        self.depth = 0

    def enter(self) -> None:
        me = threading.get_ident()
        with self.lock:
            if self.depth and self.thread != me:
                raise ConcurrentKnobsError(
                    f"knobs entered on thread {threading.current_thread().name} while thread id "
                    f"{self.thread} holds knobs; on this torch ({_torch_version()}) Inductor config is "
                    "process-global, so knobs from two threads would undo each other. Enter knobs on one "
                    "thread (or use torch >= 2.12, where config is per thread)"
                )
            self.thread, self.depth = me, self.depth + 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if not self.depth:
                self.thread = None


_OWNER = _ProcessOwner()


def _torch_version() -> str:
    import torch

    return torch.__version__


class UndoContext:
    """Plans on enter, applies all or nothing, reverts every change last first on exit.

    One object is a context manager, a decorator (sync and async) and ``start()``/``stop()``.
    Re-entrant (a recursive decorated function nests), usable from several threads on torch
    2.12+, reverted on exceptions and ``KeyboardInterrupt`` too.  Nothing is resolved until
    enter, so creating one (or decorating with one) imports no torch.  Subclasses say what to
    plan (:meth:`_plan`).
    """

    strict = False

    def __init__(self) -> None:
        self._stack: contextvars.ContextVar[tuple[tuple[list[Change], bool], ...]] = contextvars.ContextVar(
            f"inductor_knobs.{type(self).__name__}[{id(self)}]", default=()
        )

    def _plan(self) -> tuple[list[Change], Any]:
        """Validate and return (changes in apply order, what ``__enter__`` returns); change nothing."""
        raise NotImplementedError

    def __enter__(self) -> Any:
        global_config = not torch_compat.installed(strict=self.strict).config_is_thread_local
        if global_config:
            _OWNER.enter()
        try:
            changes, value = self._plan()
            applied = apply_all(changes)
        except BaseException:
            if global_config:
                _OWNER.exit()
            raise
        self._stack.set((*self._stack.get(), (applied, global_config)))
        return value

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        stack = self._stack.get()
        if not stack:
            raise KnobsError(f"{self!r} exited more times than it was entered")
        applied, global_config = stack[-1]
        self._stack.set(stack[:-1])
        try:
            revert_all(applied)
        finally:
            if global_config:
                _OWNER.exit()
        # torch wraps what a backend raises (BackendCompilerFailed); hand the user ours.
        not_applied = unwrap_not_applied(exc)
        if not_applied is not None and not_applied is not exc:
            raise not_applied.with_traceback(None) from exc

    @property
    def active(self) -> bool:
        """Whether this context is entered in the current thread/task."""
        return bool(self._stack.get())

    def start(self) -> Any:
        """Apply now (like ``__enter__``); pair with :meth:`stop`."""
        return self.__enter__()

    def stop(self) -> None:
        """Revert the most recent :meth:`start` on this thread; a no-op if none is active."""
        if self._stack.get():
            self.__exit__(None, None, None)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` (sync or async) so every call runs inside this context."""
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class KnobsContext(UndoContext):
    """Applies a :class:`Knobs` on enter (returning it) and reverts every change on exit.

    Raises (on enter):
        KnobsError subclasses from :func:`inductor_knobs.plan.plan`; nothing stays applied.
    """

    def __init__(self, knobs: Knobs, *, source: str = "knobs", sources: dict[str, str] | None = None) -> None:
        super().__init__()
        self.knobs = knobs
        self.strict = bool(knobs.strict)
        self.source = source
        self.sources = sources

    def __repr__(self) -> str:
        return f"knobs({', '.join(f'{k}={v!r}' for k, v in self.knobs.to_dict().items())})"

    def _plan(self) -> tuple[list[Change], Knobs]:
        return plan(self.knobs, source=self.source, sources=self.sources), self.knobs


class EmulateGpuContext(UndoContext):
    """Emulates a smaller GPU on enter (returning an :class:`~inductor_knobs.emulate.Emulation`).

    Raises (on enter):
        The errors of :func:`inductor_knobs.emulate.plan_emulation`; nothing stays applied.
    """

    def __init__(self, spec: EmulationSpec) -> None:
        super().__init__()
        self.spec = spec

    def __repr__(self) -> str:
        return f"emulate_gpu({self.spec.label()})"

    def _plan(self) -> tuple[list[Change], Emulation]:
        return plan_emulation(self.spec)


def knobs(spec: Knobs | None = None, /, **kwargs: Any) -> KnobsContext:
    """Return a context manager / decorator that applies knobs to TorchInductor.

    Args:
        spec: a prebuilt :class:`Knobs` (e.g. ``Knobs.from_env()``); keywords override it.
        **kwargs: any :class:`Knobs` field: ``min_sms`` (int SMs), ``max_autotune``,
            ``max_autotune_gemm``, ``gemm_backends``, ``gemm_search_space``,
            ``coordinate_descent_tuning``, ``cudagraphs``, ``trace``, ``config``, ``strict``.

    Returns:
        A :class:`KnobsContext`.  ``torch.compile`` compiles at the first call of the
        compiled function, so that call (and any recompile) must happen inside it.

    Raises:
        UnknownKnob: an unknown keyword ("did you mean" included).
        InvalidKnobValue: a bad value.  Torch-dependent checks happen on enter.
    """
    extra = Knobs.from_kwargs(**kwargs)
    return KnobsContext(spec.merged(extra) if spec is not None else extra)


def force_gemm_autotune(min_sms: int = 1, backends: str = "ATEN,TRITON", **kwargs: Any) -> KnobsContext:
    """Open the SM gate and turn GEMM autotuning on: ``knobs(min_sms=…, max_autotune_gemm=True, gemm_backends=…)``.

    Args:
        min_sms: open the gate for CUDA devices with at least this many SMs (default 1: every GPU).
        backends: ``max_autotune_gemm_backends`` (default ``"ATEN,TRITON"``, keeping the ATen fallback).
        **kwargs: further knobs, as for :func:`knobs`; they win over the two above.
    """
    return knobs(**{"min_sms": min_sms, "max_autotune_gemm": True, "gemm_backends": backends, **kwargs})


def emulate_gpu(
    preset_or_sms: str | int | None = None,
    /,
    *,
    sms: int | None = None,
    shared_memory_per_block: int | None = None,
    device: int | None = None,
) -> EmulateGpuContext:
    """Run everything inside on ``sms`` SMs of this GPU, and make Inductor see a GPU of that size.

    Work launched from the entering thread (eager ATen/cuBLAS, Inductor's Triton kernels and its
    autotune benchmarks) runs on a CUDA green context's stream of ``sms`` SMs; every place
    Inductor reads the SM count (the ``is_big_gpu`` gate, ``DeviceProperties``, ``NUM_SMS`` of
    persistent/TMA templates, split-reduction heuristics) sees ``sms``; with
    ``shared_memory_per_block`` Inductor prunes Triton GEMM configs as on that GPU.  CUDA graphs
    are off inside (their replays escape the partition).  Memory bandwidth, L2 size, clocks and
    the instruction set stay the real GPU's.  Composes with :func:`knobs`, :func:`force_gemm_autotune`
    and ``ik.compile`` in either nesting order; reverts exactly.

    Args:
        preset_or_sms: a preset name (``"T4"``, ``"L4"``, ``"RTX3070"``, ``"RTX4060"``, ``"GB10"``,
            … see ``inductor_knobs.gpu_presets.PRESETS``) or an SM count (int).
        sms: SM count (int, 1..the GPU's SM count), instead of the positional argument.
        shared_memory_per_block: bytes per block Inductor sees (int, <= the GPU's), or None for
            the real GPU's; a preset supplies its own unless this is given.
        device: CUDA device index (default: the current device at enter).

    Returns:
        An :class:`EmulateGpuContext` (context manager, decorator, ``start()``/``stop()``);
        entering returns an :class:`~inductor_knobs.emulate.Emulation` (``sms``, ``granted_sms``,
        ``physical_sms``, ``stream``, …).

    Raises:
        InvalidKnobValue: a bad value (at once), or one above the real GPU's (on enter).
        UnknownKnob: an unknown preset; the message lists the known ones.
        NotSupportedOnThisTorch: on enter, torch < 2.11 (``GreenContext.Stream()`` is missing).
        EmulationUnavailable: on enter, no CUDA GPU or the driver refused the green context.
        EmulationConflict: on enter, another emulation with other values is active.

    Relies on ``torch.cuda.GreenContext.create(num_sms=, device_id=)`` and ``.Stream()``
    (``torch/cuda/green_contexts.py``, 2.11+) and on the getters and caches each patch module
    lists (``device_property_getters``, ``sm_count_caches``).
    """
    return EmulateGpuContext(resolve_spec(preset_or_sms, sms=sms, shared_memory_per_block=shared_memory_per_block, device=device))
