"""What Inductor sees: the CUDA device-property getters report the emulated SM count (and shared memory).

While any emulation is active, the patch module's ``device_property_getters`` and ``autotune_local_cache_path``
(the emulated GPU gets a timings file of its own) are wrapped (:data:`SM_VIEW_PATCH`, restored by identity after
the last user), and the caches of SM counts read earlier (``sm_count_caches``, ``device_properties_dict_cache``)
are emptied on enter and exit.  The view is process-wide: :func:`check_no_conflict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wrapt

from ..core import torch_compat
from ..core.patching import SharedPatch, resolve, wrap_attribute
from ..core.undo import SAFE_EXIT, Change
from ..errors import EmulationConflict
from ..patches.torch_2_4 import TorchPatches
from .gpus import EmulationSpec

if TYPE_CHECKING:
    import torch


class EmulatedDeviceProperties(wrapt.ObjectProxy):  # type: ignore[misc]
    """``torch.cuda.get_device_properties(i)`` with the emulated SM count and shared memory per block."""

    def __init__(self, wrapped: Any, spec: EmulationSpec) -> None:
        super().__init__(wrapped)
        self._self_spec = spec

    @property
    def multi_processor_count(self) -> int:
        return self._self_spec.sms

    @property
    def shared_memory_per_block_optin(self) -> int:
        limit = self._self_spec.shared_memory_per_block
        return limit if limit is not None else self.__wrapped__.shared_memory_per_block_optin

    @property
    def shared_memory_per_block(self) -> int:
        limit = self._self_spec.shared_memory_per_block
        real = self.__wrapped__.shared_memory_per_block
        return min(real, limit) if limit is not None else real

    def __repr__(self) -> str:
        return f"<emulated {self._self_spec.label()} on {self.__wrapped__!r}>"


@dataclass
class _SmView:
    """Process-wide state: the spec Inductor sees while the getters are wrapped, and the real getter."""

    spec: EmulationSpec | None = None
    original_getter: Any = None


SM_VIEW = _SmView()


def active_spec() -> EmulationSpec | None:
    """The emulation Inductor sees now (process-wide), or None."""
    return SM_VIEW.spec


def _properties_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    props = wrapped(*args, **kwargs)
    spec = SM_VIEW.spec
    if spec is None:
        return props
    from torch.cuda._utils import _get_device_index

    device = args[0] if args else kwargs.get("device")
    return props if _get_device_index(device, optional=True) != spec.device_index else EmulatedDeviceProperties(props, spec)


def _local_cache_path_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``<file>-<spec.cache_tag()>`` while an emulation is active: same directory, so torch's clean-ups find it."""
    path = wrapped(*args, **kwargs)
    spec = SM_VIEW.spec
    return path if spec is None else path.with_name(f"{path.name}-{spec.cache_tag()}")


def _remember_getter(original: Any, _wrapper: Any) -> None:
    # The first getter the patch module lists is torch.cuda.get_device_properties (the others are bound to it).
    if SM_VIEW.original_getter is None:
        SM_VIEW.original_getter = original


def _view_steps() -> list[Any]:
    patches = torch_compat.installed(strict=False)
    steps = [wrap_attribute(path, _properties_wrapper, on_install=_remember_getter) for path in patches.device_property_getters]
    return [*steps, wrap_attribute(patches.autotune_local_cache_path, _local_cache_path_wrapper)]


SM_VIEW_PATCH = SharedPatch("CUDA device-property getters (emulated SM view)", _view_steps)


def _clear_sm_caches(patches: TorchPatches) -> None:
    for path in patches.sm_count_caches:
        owner, name = resolve(path)
        getattr(owner, name).cache_clear()
    owner, name = resolve(patches.device_properties_dict_cache)
    getattr(owner, name).pop("cuda", None)


class SmViewChange(Change):
    """Undo record: Inductor sees ``spec``'s SM count (and shared memory per block) on its device."""

    def __init__(self, patches: TorchPatches, spec: EmulationSpec) -> None:
        self.patches = patches
        self.spec = spec
        self.description = f"Inductor sees cuda:{spec.device_index} as {spec.label()}"

    def apply(self) -> None:
        with SM_VIEW_PATCH.lock, SAFE_EXIT:
            check_no_conflict(self.spec)
            SM_VIEW_PATCH.acquire(self)
            SM_VIEW.spec = self.spec
            _clear_sm_caches(self.patches)

    def revert(self) -> None:
        with SM_VIEW_PATCH.lock, SAFE_EXIT:  # a call, not a try statement, in the body: see SAFE_EXIT
            self._release()

    def _release(self) -> None:
        try:
            SM_VIEW_PATCH.release(self)
            if not SM_VIEW_PATCH.users:
                SM_VIEW.spec = None
        finally:
            if not SM_VIEW_PATCH.users:
                SM_VIEW.original_getter = None
            _clear_sm_caches(self.patches)


def check_no_conflict(spec: EmulationSpec) -> None:
    """Raise :class:`EmulationConflict` when another emulation with other values is active."""
    active = SM_VIEW.spec if SM_VIEW_PATCH.users else None
    if active is not None and active != spec:
        raise EmulationConflict(
            f"emulate_gpu({spec.label()}) while emulate_gpu({active.label()}) is active on cuda:{active.device_index}: "
            "Inductor sees one GPU per process at a time; leave the first emulation (or emulate the same GPU) first"
        )


def physical_properties(device_index: int = 0) -> torch.cuda._CudaDeviceProperties:  # type: ignore[name-defined]
    """The real GPU's properties, even inside an emulation (for reports and benchmarks)."""
    import torch

    getter = SM_VIEW.original_getter if SM_VIEW_PATCH.users else torch.cuda.get_device_properties
    return getter(device_index)
