"""Real GPUs that ``ik.emulate_gpu("T4")`` can stand for: SM count and shared memory per block.

SM counts: NVIDIA product specifications, whitepapers and data sheets.  Shared memory per block: the opt-in
maximum per compute capability (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"),
``get_device_properties(i).shared_memory_per_block_optin``, which Inductor prunes Triton GEMM configs by.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob

KB = 1024


@dataclass(frozen=True)
class GpuPreset:
    """A real GPU to emulate: ``name`` (``"T4"``), ``sms``, ``shared_memory_per_block`` (opt-in maximum, bytes),
    ``compute_capability`` (information only: emulation keeps the real instruction set) and ``description``."""

    name: str
    sms: int
    shared_memory_per_block: int
    compute_capability: tuple[int, int]
    description: str


PRESETS: dict[str, GpuPreset] = {
    p.name: p
    for p in (
        GpuPreset("T4", 40, 64 * KB, (7, 5), "NVIDIA T4 (Turing TU104)"),
        GpuPreset("L4", 58, 99 * KB, (8, 9), "NVIDIA L4 (Ada AD104)"),
        GpuPreset("A10", 72, 99 * KB, (8, 6), "NVIDIA A10 (Ampere GA102); above the 68-SM gate"),
        GpuPreset("RTX3060", 28, 99 * KB, (8, 6), "GeForce RTX 3060 (Ampere GA106)"),
        GpuPreset("RTX3070", 46, 99 * KB, (8, 6), "GeForce RTX 3070 (Ampere GA104)"),
        GpuPreset("RTX3080", 68, 99 * KB, (8, 6), "GeForce RTX 3080 (Ampere GA102); torch's gate sits here"),
        GpuPreset("RTX4060", 24, 99 * KB, (8, 9), "GeForce RTX 4060 (Ada AD107)"),
        GpuPreset("RTX4070", 46, 99 * KB, (8, 9), "GeForce RTX 4070 (Ada AD104)"),
        GpuPreset("RTX5070", 48, 99 * KB, (12, 0), "GeForce RTX 5070 (Blackwell GB205)"),
        GpuPreset("GB10", 48, 99 * KB, (12, 1), "NVIDIA GB10 (DGX Spark)"),
        GpuPreset("JetsonOrin", 16, 163 * KB, (8, 7), "Jetson AGX Orin 64GB (Ampere GA10B)"),
    )
}


def _normalize(name: str) -> str:
    return "".join(ch for ch in name.upper() if ch.isalnum())


_BY_KEY = {_normalize(name): preset for name, preset in PRESETS.items()}


def find_preset(name: str, source: str = "emulate_gpu") -> GpuPreset:
    """The preset ``name``, ignoring case, spaces and dashes; raises :class:`UnknownKnob` naming ``source``."""
    preset = _BY_KEY.get(_normalize(name))
    if preset is None:
        known = ", ".join(f"{p.name} ({p.sms} SMs)" for p in PRESETS.values())
        raise UnknownKnob(f"{source}: unknown GPU preset {name!r}; known presets: {known}")
    return preset


@dataclass(frozen=True)
class EmulationSpec:
    """What to emulate, before it is checked against a GPU: ``sms`` (what Inductor sees and the green context is
    asked for), ``shared_memory_per_block`` (bytes Inductor prunes Triton configs by, or None: the real GPU's),
    ``preset`` (the name it came from, or None) and ``device_index`` (or None: the current device on enter)."""

    sms: int
    shared_memory_per_block: int | None = None
    preset: str | None = None
    device_index: int | None = None

    def cache_tag(self) -> str:
        """The FX graph cache salt and autotune timings file suffix that keep this emulation apart from other GPUs."""
        return f"inductor_knobs-emulate-{self.sms}sm-{self.shared_memory_per_block or 0}"

    def label(self) -> str:
        smem = f", {self.shared_memory_per_block // 1024} KB smem/block" if self.shared_memory_per_block else ""
        return f"{self.preset + ': ' if self.preset else ''}{self.sms} SMs{smem}"


@dataclass(frozen=True)
class Emulation:
    """An active emulation, as ``with ik.emulate_gpu(...) as emu`` returns it: ``sms`` (what Inductor sees),
    ``granted_sms`` (what the driver gave, in groups: multiples of 8 on an H200; or None), ``physical_sms``,
    ``shared_memory_per_block`` (bytes, or None: the real GPU's), ``preset``, ``device_index``, ``gpu`` (the real
    name), ``stream`` (work runs on it) and ``capture_stream`` (CUDA graphs are captured on it)."""

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
    """Check the ``emulate_gpu`` arguments that need no GPU: raises InvalidKnobValue (bad type or value, SM count
    given twice) or UnknownKnob (unknown preset), naming ``source``."""
    smem = shared_memory_per_block
    preset = None
    if isinstance(preset_or_sms, str):
        preset = find_preset(preset_or_sms, source)
        if sms is not None:
            raise InvalidKnobValue(f"{source}: preset {preset.name!r} fixes sms={preset.sms}; drop sms={sms!r} or the preset")
        sms = preset.sms
        smem = preset.shared_memory_per_block if smem is None else smem
    elif preset_or_sms is not None:
        if sms is not None:
            raise InvalidKnobValue(f"{source}: the SM count is given twice ({preset_or_sms!r} and sms={sms!r}); give it once")
        sms = preset_or_sms
    if sms is None:
        raise InvalidKnobValue(f'{source}: give an SM count (sms=40) or a preset name ("T4")')
    if isinstance(sms, bool) or not isinstance(sms, int) or sms < 1:
        raise InvalidKnobValue(f"{source}: sms={sms!r} is not allowed; it must be an int >= 1 (at most the GPU's SM count)")
    if smem is not None and (isinstance(smem, bool) or not isinstance(smem, int) or smem < 1024):
        raise InvalidKnobValue(
            f"{source}: shared_memory_per_block={smem!r} is not allowed; it must be an int number "
            "of bytes >= 1024 (at most the GPU's), or None"
        )
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise InvalidKnobValue(f"{source}: device={device!r} is not allowed; it must be a CUDA device index (int >= 0) or None")
    return EmulationSpec(sms, smem, preset.name if preset else None, device)


def spec_from_text(text: str, *, shared_memory_per_block: int | None = None, source: str) -> EmulationSpec:
    """:func:`resolve_spec` for ``text`` (digits: an SM count, else a preset name) and bytes per block.

    Raises:
        InvalidKnobValue, UnknownKnob: as :func:`resolve_spec`, naming ``source``.
    """
    value = text.strip()
    return resolve_spec(
        int(value) if re.fullmatch(r"-?[0-9]+", value) else value, shared_memory_per_block=shared_memory_per_block, source=source
    )
