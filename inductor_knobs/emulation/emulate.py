"""What to emulate: an :class:`EmulationSpec` from a preset name or an SM count, checked without a GPU.

``ik.emulate_gpu("T4")``, ``ik.emulate_gpu(sms=40)``, ``INDUCTOR_KNOBS_EMULATE_SMS`` and the ablation
command's ``--emulate`` all end here (:func:`resolve_spec`, :func:`spec_from_text`); the checks that need
the live GPU, and the changes that emulate it, are :func:`inductor_knobs.emulation.plan.plan_emulation`'s,
which returns the :class:`Emulation` a ``with ik.emulate_gpu(...) as emu`` block gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue
from .gpu_presets import GpuPreset, find_preset


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

    def cache_tag(self) -> str:
        """What keeps this emulation's compiled graphs and autotune timings apart from another GPU's (the FX graph
        cache key's salt, the suffix of Inductor's autotune timings file)."""
        return f"inductor_knobs-emulate-{self.sms}sm-{self.shared_memory_per_block or 0}"

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
        capture_stream: the green context's stream CUDA graphs are captured on (pass it as
            ``torch.cuda.graph(..., stream=)`` to capture on the emulated SMs with a stream of your choice).
    """

    sms: int
    granted_sms: int | None
    physical_sms: int
    shared_memory_per_block: int | None
    preset: str | None
    device_index: int
    gpu: str
    stream: Any = field(repr=False, compare=False)
    capture_stream: Any = field(default=None, repr=False, compare=False)


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
