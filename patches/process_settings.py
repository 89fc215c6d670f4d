"""Process-global torch settings outside Inductor's config: SDPA backends and TunableOp (knobs ``sdpa_backends``, ``tunableop``).

Read through feature checks, true of 2.4–2.15 (``torch/`` relative):
- ``nn/attention/__init__.py:_backend_names``: each ``SDPBackend`` has a ``torch._C._get_<word>_sdp_enabled``/
  ``_set_sdp_use_<word>`` pair; OVERRIDEABLE only where torch has it.
- ``torch._C._get_sdp_priority_order``/``_set_sdp_priority_order`` (what ``sdpa_kernel(..., set_priority=True)`` changes)
  from 2.6 (``_C/__init__.pyi:1203``); 2.4–2.5 have only which backends are enabled.
- ``cuda/tunable.py:is_enabled``/``enable`` (2.3+); a CPU-only build has no ``torch._C._cuda_tunableop_enable``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ProcessSettings:
    """Read and write SDPA backends and TunableOp exactly."""

    #: ``SDPBackend`` name -> the ``<word>`` of its ``torch._C`` getter/setter pair; offered only where the getter exists.
    sdpa_backend_words: ClassVar[dict[str, str]] = {
        "FLASH_ATTENTION": "flash",
        "EFFICIENT_ATTENTION": "mem_efficient",
        "CUDNN_ATTENTION": "cudnn",
        "MATH": "math",
        "OVERRIDEABLE": "overrideable",
    }

    def sdpa_backends_here(self) -> list[str]:
        """The SDPA backend names the installed torch can switch (its ``torch._C`` has their getter)."""
        import torch

        return [name for name, word in self.sdpa_backend_words.items() if hasattr(torch._C, f"_get_{word}_sdp_enabled")]

    def read_sdpa(self) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
        """(enabled backend names in priority order, ``torch._C._get_sdp_priority_order()`` or None where absent)."""
        import torch

        enabled = [
            name for name in self.sdpa_backends_here() if getattr(torch._C, f"_get_{self.sdpa_backend_words[name]}_sdp_enabled")()
        ]
        getter = getattr(torch._C, "_get_sdp_priority_order", None)
        if getter is None:
            return tuple(enabled), None
        order = tuple(int(v) for v in getter())
        ids = self._sdpa_ids()
        rank = {name: order.index(ids[name]) if ids[name] in order else len(order) for name in enabled}
        return tuple(sorted(enabled, key=rank.__getitem__)), order

    def _sdpa_ids(self) -> dict[str, int]:
        import torch

        members: dict[str, Any] = dict(torch.nn.attention.SDPBackend.__members__)
        return {name: int(member) for name, member in members.items()}

    def sdpa_matches(self, found: object, asked: object) -> bool:
        """Whether the backends read back (``",".join(read_sdpa()[0])``) are the knob's ``asked``: the same names in the
        same order, or in any order where torch has no priority order (2.4-2.5)."""
        import torch

        if type(found) is not type(asked):
            return False
        if found == asked:
            return True
        if not isinstance(found, str) or not isinstance(asked, str) or hasattr(torch._C, "_get_sdp_priority_order"):
            return False
        return sorted(found.split(",")) == sorted(asked.split(","))

    def write_sdpa(self, enabled: tuple[str, ...], order: tuple[int, ...] | None) -> None:
        """Enable exactly ``enabled``; set the priority order to ``order``, or (None) to ``enabled`` first, then the
        others as they were, as ``sdpa_kernel(backends, set_priority=True)`` does."""
        import torch

        for name in self.sdpa_backends_here():
            getattr(torch._C, f"_set_sdp_use_{self.sdpa_backend_words[name]}")(name in enabled)
        setter = getattr(torch._C, "_set_sdp_priority_order", None)
        if setter is None:
            return
        if order is None:
            ids = self._sdpa_ids()
            first = [ids[name] for name in enabled]
            order = (*first, *(int(v) for v in torch._C._get_sdp_priority_order() if int(v) not in first))
        setter(list(order))

    def tunableop_problem(self) -> str | None:
        """Why ``torch.cuda.tunable`` cannot be switched here (a build without CUDA/ROCm), or None."""
        import torch

        if not hasattr(torch._C, "_cuda_tunableop_enable"):
            return "this build of torch has no TunableOp (torch._C._cuda_tunableop_enable is missing: a CPU-only build)"
        return None

    def read_tunableop(self) -> bool:
        """``torch.cuda.tunable.is_enabled()`` (``torch/cuda/tunable.py``, 2.3+)."""
        import torch.cuda.tunable

        return bool(torch.cuda.tunable.is_enabled())

    def write_tunableop(self, enabled: bool) -> None:
        """``torch.cuda.tunable.enable(enabled)``: TunableOp tunes each new GEMM shape on first use while enabled."""
        import torch.cuda.tunable

        torch.cuda.tunable.enable(enabled)
