"""Small-GPU emulation on a big GPU: ``with ik.emulate_gpu(sms=40):`` or ``ik.emulate_gpu("T4")``.

Two things make an honest emulator, and each is one undo record:

- **Confinement** (:class:`GreenStreamChange`).  Work launched from the entering thread goes to
  the stream of a CUDA green context of ``sms`` SMs (``GreenContext.create(num_sms=,
  device_id=).Stream()`` on torch 2.11-2.13, ``GreenContext(num_sms=, device_id=).Stream()`` on
  2.14-2.15: the patch modules' ``make_green_stream``), made current with ``torch.cuda.set_stream``.
  eager ATen/cuBLAS kernels, Inductor's Triton kernels and Inductor's autotune benchmarks all
  launch on the current stream, so all run on the partition (measured on an H200, torch 2.11: a
  4096³ bf16 GEMM autotuned at 16 SMs benchmarks 1.26 ms against 0.19 ms on 132).
  ``GreenContext.set_context()`` is not used: after it, Inductor's compiled kernels escaped the
  partition (issue 5's measurement).
- **What Inductor sees** (:class:`SmViewChange`).  The CUDA device-property getters return the
  emulated SM count (and, optionally, shared memory per block), and the caches that hold an SM
  count read earlier are emptied on enter and on exit.  The patch modules list the getters and
  caches per torch release (``device_property_getters``, ``sm_count_caches``).

Around them, config changes: CUDA graphs off at every compile (replays of graphs Inductor
captured ran on all 132 SMs in our H200 measurement: 0.34 ms where eager at 16 SMs took 1.27 ms),
autotune in this process (a subprocess would run on the whole GPU), no reuse of autotune results
or compiled graphs from other SM counts (cache-key salt, ``autotune_local_cache=False``).

The SM view is process-wide while any emulation is active (the caches it clears are process-wide),
so two emulations of different GPUs at once are refused.  The stream is per thread, as torch's
current stream is: enter ``emulate_gpu`` in every thread that launches work.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import wrapt

from ..core import torch_compat
from ..core._patching import SharedPatch, resolve, wrap_attribute
from ..core._undo import Change
from ..core.asked import CACHE_SALT, EMULATION, INDUCTOR_CONFIG, Asked, by_slot
from ..core.changes import ConfigChange
from ..core.interception import AskChange, InterceptionUse
from ..errors import (
    EmulationConflict,
    EmulationUnavailable,
    EmulationWarning,
    InvalidKnobValue,
    KnobsError,
    NotSupportedOnThisTorch,
)
from ..patches.torch_2_4 import TorchPatches
from .gpu_presets import GpuPreset, find_preset

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EmulationSpec:
    """What to emulate, before it is checked against a GPU.

    Attributes:
        sms: SM count Inductor sees and the green context is asked for.
        shared_memory_per_block: bytes per block Inductor prunes Triton configs by, or None
            (the real GPU's).
        preset: the preset name it came from, or None.
        device_index: the CUDA device, or None (the current device on enter).
    """

    sms: int
    shared_memory_per_block: int | None = None
    preset: str | None = None
    device_index: int | None = None

    def label(self) -> str:
        smem = f", {self.shared_memory_per_block // 1024} KB smem/block" if self.shared_memory_per_block else ""
        return f"{self.preset + ': ' if self.preset else ''}{self.sms} SMs{smem}"


@dataclass(frozen=True)
class Emulation:
    """An active emulation, as ``with ik.emulate_gpu(...) as emu`` returns it.

    Attributes:
        sms: the SM count Inductor sees.
        granted_sms: SMs the driver gave the green context, or None if this torch cannot say.
            The driver grants SMs in groups (on an H200: multiples of 8, so 46 → 48, 58 → 64).
        physical_sms: the real GPU's SM count.
        shared_memory_per_block: bytes Inductor sees, or None (the real GPU's).
        preset: preset name or None.
        device_index: the CUDA device.
        gpu: the real GPU's name.
        stream: the green context's stream work is launched on.
    """

    sms: int
    granted_sms: int | None
    physical_sms: int
    shared_memory_per_block: int | None
    preset: str | None
    device_index: int
    gpu: str
    stream: Any = field(repr=False, compare=False)


def resolve_spec(
    preset_or_sms: str | int | None = None,
    *,
    sms: int | None = None,
    shared_memory_per_block: int | None = None,
    device: int | None = None,
    source: str = "emulate_gpu",
) -> EmulationSpec:
    """Check the arguments that need no GPU and return an :class:`EmulationSpec`.

    Args:
        preset_or_sms: a preset name (``"T4"``, see :data:`~inductor_knobs.emulation.gpu_presets.PRESETS`)
            or an SM count.
        sms: SM count (int, >= 1); not together with an SM count or preset given positionally.
        shared_memory_per_block: bytes per block (int, >= 1024); overrides the preset's.
        device: CUDA device index (int >= 0) or None.
        source: what to name in errors (the function or environment variable).

    Raises:
        InvalidKnobValue: a bad type or value, or the SM count given twice.
        UnknownKnob: an unknown preset (the message lists the known ones).
    """
    preset: GpuPreset | None = None
    if isinstance(preset_or_sms, str):
        preset = find_preset(preset_or_sms, source)
    elif preset_or_sms is not None:
        if sms is not None:
            raise InvalidKnobValue(f"{source}: the SM count is given twice ({preset_or_sms!r} and sms={sms!r}); give it once")
        sms = preset_or_sms
    if preset is not None and sms is not None:
        raise InvalidKnobValue(f"{source}: preset {preset.name!r} fixes sms={preset.sms}; drop sms={sms!r} or the preset")
    if preset is not None:
        sms = preset.sms
        if shared_memory_per_block is None:
            shared_memory_per_block = preset.shared_memory_per_block
    if sms is None:
        raise InvalidKnobValue(f'{source}: give an SM count (sms=40) or a preset name ("T4")')
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise InvalidKnobValue(f"{source}: sms={sms!r} is not allowed; it must be an int >= 1 (at most the GPU's SM count)")
    if shared_memory_per_block is not None and (
        isinstance(shared_memory_per_block, bool)
        or not isinstance(shared_memory_per_block, int)
        or shared_memory_per_block < 1024
    ):
        raise InvalidKnobValue(
            f"{source}: shared_memory_per_block={shared_memory_per_block!r} is not allowed; it must be an int number "
            "of bytes >= 1024 (at most the GPU's), or None"
        )
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise InvalidKnobValue(f"{source}: device={device!r} is not allowed; it must be a CUDA device index (int >= 0) or None")
    return EmulationSpec(sms, shared_memory_per_block, preset.name if preset else None, device)


def spec_from_text(text: str, *, shared_memory_per_block: int | None = None, source: str) -> EmulationSpec:
    """:func:`resolve_spec` for text from an environment variable or option: digits are an SM count,
    anything else a preset name (``"40"``, ``"T4"``).

    Raises:
        InvalidKnobValue, UnknownKnob: as :func:`resolve_spec`, naming ``source``.
    """
    value = text.strip()
    return resolve_spec(
        int(value) if value.lstrip("-").isdigit() else value, shared_memory_per_block=shared_memory_per_block, source=source
    )


# -- the green context ------------------------------------------------------------------------

_GREEN_LOCK = threading.Lock()
#: (device, sms) -> (green context, its stream, granted SMs).  Kept for the process's life: the
#: caching allocator keeps blocks tied to these streams, torch 2.11-2.13 have no destroy, and from
#: 2.14 ``GreenContext.__del__`` destroys the context and its streams while the stream object (a
#: ``torch.cuda.ExternalStream``) holds no reference to it.
_GREEN: dict[tuple[int, int], tuple[Any, Any, int | None]] = {}


def _check_green_context_support(patches: TorchPatches, torch_version: str) -> None:
    """Refuse a torch without a green-context API its patch module knows, then one without CUDA.

    The API per release is the patch module's (``green_context_api``: ``GreenContext.create``
    on 2.11-2.13, the ``GreenContext(num_sms=, device_id=)`` constructor on 2.14-2.15).

    Raises:
        NotSupportedOnThisTorch: no ``GreenContext``, none with ``Stream()`` (< 2.11), or one whose
            API this torch's patch module does not recognise; the message names the release.
        EmulationUnavailable: no CUDA GPU.
    """
    import torch

    refusal = patches.green_context_refusal(torch_version)
    if refusal is not None:
        raise NotSupportedOnThisTorch(refusal)
    if not torch.cuda.is_available():
        raise EmulationUnavailable(
            f"emulate_gpu needs a CUDA GPU; torch {torch_version} sees none (torch.cuda.is_available() is False)"
        )


def green_stream(device_index: int, sms: int) -> tuple[Any, int | None]:
    """The (cached) stream of a green context of ``sms`` SMs on ``device_index``, and the SMs granted.

    The context is made the way this torch's patch module says (``TorchPatches.make_green_stream``:
    ``GreenContext.create(num_sms=, device_id=)`` on 2.11-2.13, ``GreenContext(num_sms=, device_id=)``
    on 2.14-2.15, ``torch/cuda/green_contexts.py``); the granted SMs come from ``GreenContext.sm_count``
    on 2.15, else from the driver through cuda-python (None if neither answers).

    Raises:
        NotSupportedOnThisTorch: this torch has no green-context API its patch module knows.
        EmulationUnavailable: the driver refused the green context (its message is included).
    """
    import torch

    key = (device_index, sms)
    with _GREEN_LOCK:
        if key not in _GREEN:
            patches = torch_compat.installed(strict=False)
            try:
                _GREEN[key] = patches.make_green_stream(device_index, sms)
            except KnobsError:
                raise
            except Exception as exc:
                raise EmulationUnavailable(
                    f"emulate_gpu(sms={sms}): the CUDA driver refused a green context on cuda:{device_index} "
                    f"(torch {torch.__version__}, CUDA {torch.version.cuda}): {exc}"
                ) from exc
        _, stream, granted = _GREEN[key]
    return stream, granted


class GreenStreamChange(Change):
    """Undo record: make the green context's stream current on this thread, ordered by events.

    The green stream waits for the work already queued on the prior stream (so inputs made before
    the block are ready) and, on revert, the prior stream waits for the green one (so results
    made inside are ready after it).
    """

    def __init__(self, device_index: int, stream: Any, description: str) -> None:
        self.device_index = device_index
        self.stream = stream
        self.description = f"current stream of cuda:{device_index}: green context ({description})"
        self._prior: Any = None
        self._prior_device = 0

    def apply(self) -> None:
        import torch

        self._prior_device = torch.cuda.current_device()
        self._prior = torch.cuda.current_stream(self.device_index)
        self.stream.wait_stream(self._prior)
        torch.cuda.set_stream(self.stream)  # also makes the stream's device current

    def revert(self) -> None:
        import torch

        self._prior.wait_stream(self.stream)
        torch.cuda.set_stream(self._prior)
        if torch.cuda.current_device() != self._prior_device:
            torch.cuda.set_device(self._prior_device)


# -- what Inductor sees ---------------------------------------------------------------------------


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


_VIEW = _SmView()


def active_spec() -> EmulationSpec | None:
    """The emulation Inductor sees now (process-wide), or None."""
    return _VIEW.spec


def _properties_wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    props = wrapped(*args, **kwargs)
    spec = _VIEW.spec
    if spec is None:
        return props
    from torch.cuda._utils import _get_device_index

    device = args[0] if args else kwargs.get("device")
    if _get_device_index(device, optional=True) != spec.device_index:
        return props
    return EmulatedDeviceProperties(props, spec)


def _remember_getter(original: Any, _wrapper: Any) -> None:
    # The first getter the patch module lists is torch.cuda.get_device_properties (the others are bound to it).
    if _VIEW.original_getter is None:
        _VIEW.original_getter = original


def _view_steps() -> list[Any]:
    patches = torch_compat.installed(strict=False)
    return [wrap_attribute(path, _properties_wrapper, on_install=_remember_getter) for path in patches.device_property_getters]


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
        with SM_VIEW_PATCH.lock:
            check_no_conflict(self.spec)
            SM_VIEW_PATCH.acquire(self)
            _VIEW.spec = self.spec
            _clear_sm_caches(self.patches)

    def revert(self) -> None:
        with SM_VIEW_PATCH.lock:
            try:
                SM_VIEW_PATCH.release(self)
                if not SM_VIEW_PATCH.users:
                    _VIEW.spec = None
            finally:
                if not SM_VIEW_PATCH.users:
                    _VIEW.original_getter = None
                _clear_sm_caches(self.patches)


def check_no_conflict(spec: EmulationSpec) -> None:
    """Refuse a second, different emulation while one is active.

    Raises:
        EmulationConflict: another emulation is active with other values.
    """
    active = _VIEW.spec if SM_VIEW_PATCH.users else None
    if active is not None and active != spec:
        raise EmulationConflict(
            f"emulate_gpu({spec.label()}) while emulate_gpu({active.label()}) is active on cuda:{active.device_index}: "
            "Inductor sees one GPU per process at a time; leave the first emulation (or emulate the same GPU) first"
        )


# -- planning ----------------------------------------------------------------------------------------


def plan_emulation(spec: EmulationSpec, *, process_wide: bool = False) -> tuple[list[Change], Emulation]:
    """Validate ``spec`` on the live torch and GPU and return the changes that emulate it.

    Nothing is changed here (a green context may be created and cached; it runs nothing until its
    stream is made current).

    Returns:
        The changes in apply order (config, SM view, stream) and the :class:`Emulation` they make.

    Raises:
        NotSupportedOnThisTorch: torch without ``GreenContext.Stream()`` (< 2.11), or with a green-context
            API its patch module does not recognise.
        EmulationUnavailable: no CUDA GPU, or the driver refused the green context.
        InvalidKnobValue: ``sms`` or ``shared_memory_per_block`` above the real GPU's.
        EmulationConflict: another emulation with other values is active.
    """
    import torch

    patches = torch_compat.installed(strict=False)
    _check_green_context_support(patches, torch.__version__)
    index = torch.cuda.current_device() if spec.device_index is None else spec.device_index
    if index >= torch.cuda.device_count():
        raise InvalidKnobValue(
            f"emulate_gpu: device={index} is not allowed; torch {torch.__version__} sees "
            f"{torch.cuda.device_count()} CUDA device(s)"
        )
    spec = EmulationSpec(spec.sms, spec.shared_memory_per_block, spec.preset, index)
    real = _VIEW.original_properties(index)
    physical, real_smem = int(real.multi_processor_count), int(real.shared_memory_per_block_optin)
    if spec.sms > physical:
        raise InvalidKnobValue(
            f"emulate_gpu: sms={spec.sms} is not allowed on {real.name} (cuda:{index}, torch {torch.__version__}); "
            f"it must be 1..{physical}, the GPU's SM count"
        )
    if spec.shared_memory_per_block is not None and spec.shared_memory_per_block > real_smem:
        raise InvalidKnobValue(
            f"emulate_gpu: shared_memory_per_block={spec.shared_memory_per_block} is not allowed on {real.name} "
            f"(torch {torch.__version__}); it must be at most {real_smem} bytes, the GPU's own"
        )
    check_no_conflict(spec)
    stream, granted = green_stream(index, spec.sms)
    if granted is not None and granted != spec.sms:
        warnings.warn(
            f"emulate_gpu(sms={spec.sms}): the driver grants SMs in groups on {real.name}, so kernels run on "
            f"{granted} SMs while Inductor sees {spec.sms}",
            EmulationWarning,
            stacklevel=3,
        )
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    salt = f"inductor_knobs-emulate-{spec.sms}sm-{spec.shared_memory_per_block or 0}"
    source = f"emulate_gpu({spec.label()})"
    changes: list[Change] = [InterceptionUse(patches)]
    asked = [Asked(INDUCTOR_CONFIG, "triton.cudagraphs", False, source, EMULATION, overriding_warning=EmulationWarning)]
    asked.append(Asked(CACHE_SALT, salt, True, source))  # written at each compile (interception._with_salt)
    # Benchmarks in a subprocess would run on the whole GPU; cached timings come from other SM counts.
    for key in ("autotune_in_subproc", "autotune_local_cache"):
        changes.append(ConfigChange(patches, [(cfg, key, False)], process_wide=process_wide))
        asked.append(Asked(INDUCTOR_CONFIG, key, False, source, EMULATION))
    # CUDA graphs are off at every compile (replays escape the partition): the interception
    # enforces the asked value over modes, options and knobs, with an EmulationWarning.
    changes += [
        AskChange(patches, by_slot(asked), process_wide=process_wide),
        SmViewChange(patches, spec),
        GreenStreamChange(index, stream, spec.label()),
    ]
    emulation = Emulation(spec.sms, granted, physical, spec.shared_memory_per_block, spec.preset, index, str(real.name), stream)
    return changes, emulation


def physical_properties(device_index: int = 0) -> torch.cuda._CudaDeviceProperties:  # type: ignore[name-defined]
    """The real GPU's properties, even inside an emulation (for reports and benchmarks)."""
    return _VIEW.original_properties(device_index)
