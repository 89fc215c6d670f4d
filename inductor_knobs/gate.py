"""The SM-gate override: a wrapt wrapper around ``torch._inductor.utils.is_big_gpu``.

One wrapper object is installed while at least one override is active anywhere in the
process (a reference count), and the original function object is put back, by identity,
when the last one ends.  Which ``min_sms`` applies is read at call time:

- from a ``ContextVar`` when the installed torch keeps Inductor config per thread (2.12+),
  so other threads see torch's own gate, exactly as they see torch's own config;
- from one process-global slot before 2.12, where config is process-global too;
- else from the process-wide default set by env activation, if any;
- else the wrapper calls torch's original (with its cache).

Every module whose globals bind ``is_big_gpu`` by that name (``from torch._inductor.utils
import is_big_gpu``) is swept on install and uninstall, so those callers see the override too.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import wrapt

from .patches.torch_2_4 import TorchPatches

log = logging.getLogger(__name__)

GATE_MODULE = "torch._inductor.utils"
GATE_NAME = "is_big_gpu"


@dataclass(frozen=True)
class Override:
    """An active gate override: open for CUDA devices with ``>= min_sms`` SMs."""

    min_sms: int
    gate_rocm_xpu: bool = False


class _GlobalSlot:
    """A process-global stand-in for a ContextVar (torch < 2.12, where config is global too)."""

    def __init__(self) -> None:
        self.value: Override | None = None

    def get(self) -> Override | None:
        return self.value

    def set(self, value: Override | None) -> Override | None:
        prior, self.value = self.value, value
        return prior

    def reset(self, token: Override | None) -> None:
        self.value = token


class _GateState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.patches: TorchPatches | None = None
        self.original: Callable[..., bool] | None = None
        self.wrapper: wrapt.FunctionWrapper | None = None
        self.signature: inspect.Signature | None = None
        self.users = 0
        self.process_default: Override | None = None
        self.scoped_var: contextvars.ContextVar[Override | None] = contextvars.ContextVar("inductor_knobs.gate", default=None)
        self.scoped_global = _GlobalSlot()

    def scoped(self) -> Any:
        thread_local = self.patches is not None and self.patches.config_is_thread_local
        return self.scoped_var if thread_local else self.scoped_global


_STATE = _GateState()


def current_override() -> Override | None:
    """The override that applies on this thread now, or None (torch's own gate)."""
    return _STATE.scoped().get() or _STATE.process_default


def is_installed() -> bool:
    """Whether the wrapper is in place of ``torch._inductor.utils.is_big_gpu``."""
    return _STATE.wrapper is not None


def original_gate() -> Callable[..., bool] | None:
    """The original ``is_big_gpu`` while the wrapper is installed, else None."""
    return _STATE.original


def _gate(wrapped: Callable[..., bool], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    override = current_override()
    patches, signature = _STATE.patches, _STATE.signature
    if override is None or patches is None or signature is None:
        return wrapped(*args, **kwargs)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    device = patches.gate_device(next(iter(bound.arguments.values())))
    if patches.uses_vendor_rule(device) and not override.gate_rocm_xpu:
        return wrapped(*args, **kwargs)
    sms = patches.sm_count(device)
    verdict = sms >= override.min_sms
    log.debug("is_big_gpu(%s): %d SMs, min_sms=%d (inductor_knobs) -> %s", device, sms, override.min_sms, verdict)
    return verdict


def _sweep(find: object, replace: object) -> int:
    """Rebind every module global named ``is_big_gpu`` that is ``find`` to ``replace``."""
    swept = 0
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(GATE_NAME) is find:
            namespace[GATE_NAME] = replace
            swept += 1
    return swept


def _install(patches: TorchPatches, utils: Any) -> None:
    original = getattr(utils, GATE_NAME)
    _STATE.patches = patches
    _STATE.original = original
    _STATE.signature = inspect.signature(original)
    _STATE.wrapper = wrapt.FunctionWrapper(original, _gate)
    swept = _sweep(original, _STATE.wrapper)
    log.debug("installed the is_big_gpu wrapper in %d module(s)", swept)


def _uninstall() -> None:
    swept = _sweep(_STATE.wrapper, _STATE.original)
    log.debug("restored the original is_big_gpu in %d module(s)", swept)
    _STATE.wrapper = _STATE.original = _STATE.signature = None


def _clear_cache() -> None:
    if _STATE.original is not None:
        _STATE.original.cache_clear()  # type: ignore[attr-defined]


class GateChange:
    """Undo record: make ``min_sms`` the gate for this thread (2.12+) or process (< 2.12).

    ``process_wide`` sets the default every thread sees (env activation).
    Apply clears ``is_big_gpu``'s cache before and revert clears it after, so no verdict
    computed under one gate survives into another.
    """

    def __init__(self, patches: TorchPatches, override: Override, *, process_wide: bool = False) -> None:
        self.patches = patches
        self.override = override
        self.process_wide = process_wide
        self.description = f"{GATE_MODULE}.{GATE_NAME}: open at >= {override.min_sms} SMs"
        self._token: Any = None
        self._prior_default: Override | None = None

    def apply(self) -> None:
        import importlib

        utils = importlib.import_module(GATE_MODULE)
        with _STATE.lock:
            if _STATE.users == 0:
                _install(self.patches, utils)
            _STATE.users += 1
            _clear_cache()
            if self.process_wide:
                self._prior_default, _STATE.process_default = _STATE.process_default, self.override
            else:
                self._token = _STATE.scoped().set(self.override)

    def revert(self) -> None:
        with _STATE.lock:
            if self.process_wide:
                _STATE.process_default = self._prior_default
            else:
                _STATE.scoped().reset(self._token)
            _clear_cache()
            _STATE.users -= 1
            if _STATE.users == 0:
                _uninstall()
