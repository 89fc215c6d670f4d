"""The SM gate: ``torch._inductor.utils.is_big_gpu``, its argument, the SM count it reads, its vendor rule.

:class:`SmGate` encodes torch 2.4–2.5; the era modules override what changed (``torch/`` relative):
- ``_inductor/utils.py:is_big_gpu`` (2.4 :972, 2.5 :1043): ``lru_cache(None)``, ``(index)``, CUDA only, ``min_sms = 68``,
  SMs from ``torch.cuda.get_device_properties(index)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch


class SmGate:
    """How this torch's ``is_big_gpu`` is called and what it reads."""

    #: ``is_big_gpu``'s parameters as ``(name, default)`` pairs (``inspect.Parameter.empty``: none).
    gate_parameters: ClassVar[tuple[tuple[str, object], ...]]
    #: Fingerprints (:func:`inductor_knobs.core.torch_compat.fingerprint`) of ``is_big_gpu`` in this range.
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
