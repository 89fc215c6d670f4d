"""The SM gate: ``torch._inductor.utils.is_big_gpu``, its argument, the SM count it reads, its vendor rule.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  What :class:`SmGate` encodes is
true of torch 2.4–2.5 (``torch/`` relative); the era modules override what changed:

- ``_inductor/utils.py:972`` (2.4) / ``:1043`` (2.5): ``@functools.lru_cache(None) def is_big_gpu(index)``,
  CUDA only, ``min_sms = 68``, SM count from ``torch.cuda.get_device_properties(index)``.
- 2.6 (:mod:`.torch_2_6`): ``is_big_gpu(index_or_device=0)``, the SM count from
  ``DeviceProperties.create(device)``, ROCm gated by arch; 2.7 (:mod:`.torch_2_7`): XPU gated at 16
  SMs, an int argument becomes ``torch.device(get_gpu_type(), idx)``.
- The drift check (:func:`inductor_knobs.core.torch_compat.check_gate`) compares the gate found with
  ``gate_parameters``, ``gate_fingerprints`` and :meth:`SmGate.gate_prerequisites`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


class SmGate:
    """How this torch's ``is_big_gpu`` is called and what it reads (see the module docstring)."""

    #: ``is_big_gpu``'s parameters as ``(name, default)`` pairs (``inspect.Parameter.empty``: none).
    gate_parameters: ClassVar[tuple[tuple[str, object], ...]]
    #: Fingerprints (see :mod:`inductor_knobs.core.torch_compat`) of ``is_big_gpu`` seen in this range's releases.
    gate_fingerprints: ClassVar[frozenset[str]]
    #: torch's own SM threshold for CUDA devices.
    torch_min_sms: ClassVar[int]

    def gate_device(self, index: Any) -> torch.device:
        """Turn ``is_big_gpu``'s argument (an int in 2.4–2.5) into a ``torch.device``."""
        import torch

        if isinstance(index, torch.device):
            return index
        return torch.device("cuda", index)

    def sm_count(self, device: torch.device) -> int:
        """Read the SM count of ``device`` the way this torch's ``is_big_gpu`` reads it."""
        import torch

        return int(torch.cuda.get_device_properties(device.index or 0).multi_processor_count)

    def uses_vendor_rule(self, device: torch.device) -> bool:
        """Whether torch gates ``device`` by a rule other than the CUDA SM count (ROCm, XPU)."""
        import torch

        return bool(torch.version.hip) or device.type == "xpu"

    def gate_prerequisites(self) -> list[str]:
        """Dotted names the gate wrapper reads; each must exist for the wrapper to work."""
        return ["torch.cuda.get_device_properties"]
