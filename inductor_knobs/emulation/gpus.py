"""Real GPUs that ``ik.emulate_gpu("T4")`` can stand for: SM count and shared memory per block.

Sources:
- SM counts: NVIDIA's product specifications and architecture whitepapers (Turing: T4;
  Ampere GA102/GA104/GA106: RTX 3060/3070/3080, A10; Ada AD104/AD107: L4, RTX 4060/4070;
  Blackwell GB205: RTX 5070; DGX Spark: GB10; Jetson AGX Orin module data sheet): T4 40,
  L4 58, RTX 3060 28, 3070 46, 4060 24, 4070 46, 5070 48, GB10 48, Jetson Orin 16.
- Shared memory per block: the opt-in maximum per thread block of the GPU's compute
  capability, from the CUDA C++ Programming Guide table "Technical Specifications per
  Compute Capability": 7.5 → 64 KB; 8.6, 8.9, 12.x → 99 KB; 8.7 → 163 KB.  That is the value
  ``torch.cuda.get_device_properties(i).shared_memory_per_block_optin`` reports and the one
  Inductor prunes Triton GEMM configs by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob

KB = 1024


@dataclass(frozen=True)
class GpuPreset:
    """A real GPU to emulate.

    Attributes:
        name: the preset name (``"T4"``).
        sms: its SM count.
        shared_memory_per_block: its opt-in maximum shared memory per block, in bytes.
        compute_capability: ``(major, minor)``, for information only: emulation does not change
            the instruction set Inductor compiles for.
        description: the product, in words.
    """

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
    """Look a preset up by name, ignoring case, spaces and dashes (``"rtx-3070"`` is ``RTX3070``).

    ``source`` is what the error names (the function, option or environment variable).

    Raises:
        UnknownKnob: no such preset; the message lists every known one.
    """
    preset = _BY_KEY.get(_normalize(name))
    if preset is None:
        known = ", ".join(f"{p.name} ({p.sms} SMs)" for p in PRESETS.values())
        raise UnknownKnob(f"{source}: unknown GPU preset {name!r}; known presets: {known}")
    return preset


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
        preset_or_sms: a preset name (``"T4"``, see :data:`~inductor_knobs.emulation.gpus.PRESETS`)
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
