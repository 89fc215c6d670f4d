"""The SM-gate override: a wrapt wrapper around ``torch._inductor.utils.is_big_gpu`` (torch 2.4+).

A :class:`~inductor_knobs.core.patching.SharedPatch`, installed while any override is active (module globals
bound to the function are rebound too).  It answers for the innermost live override of this thread/task (2.12+)
or process, else the process-wide default (env activation), else calls torch's original (with its cache).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..patches.torch_2_4 import TorchPatches
from .patching import SharedPatch, wrap_attribute
from .scope import Life, Lived, ScopedSlot
from .undo import Change

log = logging.getLogger(__name__)

GATE_MODULE = "torch._inductor.utils"
GATE_NAME = "is_big_gpu"
_NOT_SET = object()


@dataclass(frozen=True)
class Override:
    """An active gate override: open for CUDA devices with ``>= min_sms`` SMs."""

    min_sms: int
    gate_rocm_xpu: bool = False


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for ``device`` (``"cuda:0"``): the SM count read (emulation included) and the threshold,
    both None when torch's own rule decided (ROCm/XPU)."""

    device: str
    sms: int | None
    min_sms: int | None
    verdict: bool


class _GateState:
    def __init__(self) -> None:
        self.patches: TorchPatches | None = None
        self.original: Callable[..., bool] | None = None
        self.wrapper: Any = None
        self.signature: inspect.Signature | None = None
        self.process_default: Override | None = None
        #: The overrides of this thread's/task's blocks with their lives, innermost last.
        self.scoped: ScopedSlot[tuple[tuple[Life, Override], ...]] = ScopedSlot("inductor_knobs.core.gate", ())

    def on_install(self, original: Any, wrapper: Any) -> None:
        if original is not self.original or self.signature is None:  # the signature is costly: once per original
            self.signature = inspect.signature(original)
        self.original, self.wrapper = original, wrapper


_STATE = _GateState()


@functools.cache  # one step for the process: it reuses its wrapper while torch's original is the same object
def _steps() -> tuple[Any, ...]:
    return (wrap_attribute(f"{GATE_MODULE}:{GATE_NAME}", _gate, sweep=True, on_install=_STATE.on_install),)


GATE_PATCH = SharedPatch(f"{GATE_MODULE}.{GATE_NAME} wrapper", _steps)


def current_override() -> Override | None:
    """The innermost live override of this thread/task, else the process default (env activation), else None."""
    if _STATE.patches is not None:
        for life, override in reversed(_STATE.scoped.scopes[_STATE.patches.config_is_thread_local].get()):
            if life.alive:
                return override
    return _STATE.process_default


def is_installed() -> bool:
    """Whether the wrapper is in place of ``torch._inductor.utils.is_big_gpu``."""
    return GATE_PATCH.users > 0


def original_gate() -> Callable[..., bool] | None:
    """The original ``is_big_gpu`` while the wrapper is installed, else None."""
    return _STATE.original if GATE_PATCH.users else None


def installed_wrapper() -> Any:
    """The wrapper object while installed, else None (attestation compares bindings to it)."""
    return _STATE.wrapper if is_installed() else None


def verdict(device: Any, override: Override) -> Verdict:
    """What the installed wrapper answers for ``device`` (an index or ``torch.device``); bypasses torch's cache."""
    patches = _STATE.patches
    if patches is None:
        raise RuntimeError("the is_big_gpu wrapper is not installed")
    dev = patches.gate_device(device)
    if patches.uses_vendor_rule(dev) and not override.gate_rocm_xpu:
        return Verdict(str(dev), None, None, bool(_STATE.original(device)))  # type: ignore[misc]
    sms = patches.sm_count(dev)
    return Verdict(str(dev), sms, override.min_sms, sms >= override.min_sms)


def _gate(wrapped: Callable[..., bool], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    override = current_override()
    signature = _STATE.signature
    if override is None or signature is None:
        return wrapped(*args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    answer = verdict(next(iter(bound.arguments.values())), override)
    log.debug(
        "is_big_gpu(%s): %s SMs, min_sms=%s (inductor_knobs) -> %s", answer.device, answer.sms, answer.min_sms, answer.verdict
    )
    return answer.verdict


class GateChange(Change, Lived):
    """Undo record: the override for this thread (2.12+) or process (< 2.12) while its life lasts, or the default.

    Apply and revert clear ``is_big_gpu``'s cache, so no verdict made under one gate survives into another.
    """

    __slots__ = ("_prior_default", "_token", "life", "override", "own_life", "patches", "process_wide")

    def __init__(self, patches: TorchPatches, override: Override, *, process_wide: bool = False) -> None:
        self.patches = patches
        self.override = override
        self.process_wide = process_wide
        self._token: Any = None
        self._prior_default: object = _NOT_SET
        self.life = self.own_life = Life()

    def apply(self) -> None:
        _STATE.patches = self.patches  # the step imports torch._inductor.utils if needed
        GATE_PATCH.acquire(self)
        _STATE.original.cache_clear()  # type: ignore[union-attr]  # set by the acquire (on_install)
        if self.process_wide:
            if self._prior_default is _NOT_SET:
                self._prior_default = _STATE.process_default
            _STATE.process_default = self.override
        elif self._token is None:
            scope = _STATE.scoped.scopes[self.patches.config_is_thread_local]
            below = scope.get()
            self._token = (scope, below)  # the undo first
            scope.set((*below, (self.life, self.override)))

    def revert(self) -> None:
        try:
            self.own_life.end()  # first: no context that copied the override acts on it from here on
            if self.process_wide:
                if self._prior_default is not _NOT_SET:
                    _STATE.process_default = self._prior_default  # type: ignore[assignment]
            elif self._token is not None:
                self._token[0].set(self._token[1])
            if _STATE.original is not None:
                _STATE.original.cache_clear()  # type: ignore[attr-defined]
        finally:
            GATE_PATCH.release(self)
