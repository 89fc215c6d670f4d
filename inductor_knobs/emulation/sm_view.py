"""What Inductor sees: the CUDA device-property getters report the emulated SM count (and shared memory).

The getters the patch modules list per torch release (``device_property_getters``), and the path of
Inductor's GEMM autotune timings file (``autotune_local_cache_path``: the emulated GPU gets a file of its own, as a
real GPU of another name has; before, emulation turned that cache off, and every GEMM of a model was benchmarked
again: 1,989 choices against 146 on the whole GPU for BERT-base's 96 autotuned GEMMs, H100, torch 2.11), are wrapped while
any emulation is active (:data:`SM_VIEW_PATCH`, installed for the first user and restored by identity
after the last), and the caches that hold an SM count read earlier (``sm_count_caches``,
``device_properties_dict_cache``) are emptied on enter and on exit.  The view is process-wide, so two
emulations of different GPUs at once are refused (:func:`check_no_conflict`).
"""

from __future__ import annotations

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


class _SmView:
    """Process-wide state of the SM view: the spec Inductor sees while the getters are wrapped."""

    def __init__(self) -> None:
        self.spec: EmulationSpec | None = None
        self.original_getter: Any = None

    def original_properties(self, device_index: int) -> Any:
        """The real device properties, whether or not the view is installed."""
        import torch

        getter = self.original_getter if SM_VIEW_PATCH.users else torch.cuda.get_device_properties
        return getter(device_index)


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
    if _get_device_index(device, optional=True) != spec.device_index:
        return props
    return EmulatedDeviceProperties(props, spec)


def _local_cache_path_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Inductor's GEMM autotune timings file, one of the emulated GPU's own while an emulation is active
    (``<file>-<spec.cache_tag()>``: the same directory, so torch's clean-ups find it)."""
    path = wrapped(*args, **kwargs)
    spec = SM_VIEW.spec
    if spec is None:
        return path
    return path.with_name(f"{path.name}-{spec.cache_tag()}")


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
    """Undo record: Inductor sees ``spec``'s SM count (and shared memory per block) on its device.

    The first user wraps the property getters (:data:`SM_VIEW_PATCH`); the last one puts the
    original objects back by identity.  Both ends empty the caches of SM counts read earlier.
    """

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
    """Refuse a second, different emulation while one is active.

    Raises:
        EmulationConflict: another emulation is active with other values.
    """
    active = SM_VIEW.spec if SM_VIEW_PATCH.users else None
    if active is not None and active != spec:
        raise EmulationConflict(
            f"emulate_gpu({spec.label()}) while emulate_gpu({active.label()}) is active on cuda:{active.device_index}: "
            "Inductor sees one GPU per process at a time; leave the first emulation (or emulate the same GPU) first"
        )


def physical_properties(device_index: int = 0) -> torch.cuda._CudaDeviceProperties:  # type: ignore[name-defined]
    """The real GPU's properties, even inside an emulation (for reports and benchmarks)."""
    return SM_VIEW.original_properties(device_index)
