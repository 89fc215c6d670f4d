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

from dataclasses import dataclass

from ..errors import UnknownKnob

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
