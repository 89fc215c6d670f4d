"""Process-global torch settings outside Inductor's config: SDPA backends and TunableOp
(the knobs ``sdpa_backends`` and ``tunableop``).

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  What :class:`ProcessSettings`
encodes holds in every release 2.4–2.15, read through feature checks (``torch/`` relative):

- ``nn/attention/__init__.py`` ``_backend_names``: each ``SDPBackend`` has a
  ``torch._C._get_<word>_sdp_enabled``/``_set_sdp_use_<word>`` pair; OVERRIDEABLE only where torch has it.
- ``torch._C._get_sdp_priority_order``/``_set_sdp_priority_order`` (what ``sdpa_kernel(...,
  set_priority=True)`` changes) arrive in 2.6 (``_C/__init__.pyi:1203``); 2.4–2.5 have only which
  backends are enabled.
- ``cuda/tunable.py`` (2.3+): ``torch.cuda.tunable.is_enabled()``/``enable()``; a CPU-only build has
  no ``torch._C._cuda_tunableop_enable``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ProcessSettings:
    """Read and write SDPA backends and TunableOp exactly (see the module docstring)."""

    #: ``torch.nn.attention.SDPBackend`` name -> the word of torch's ``torch._C._get_<word>_sdp_enabled`` /
    #: ``_set_sdp_use_<word>`` pair (``torch/nn/attention/__init__.py`` ``_backend_names``, 2.4-2.15).
    #: A backend whose getter the installed torch lacks (OVERRIDEABLE before it existed) is not offered.
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
        """The SDPA state to restore exactly: (enabled backend names, torch's priority order or None).

        The priority order is ``torch._C._get_sdp_priority_order()`` where torch has it (what
        ``sdpa_kernel(..., set_priority=True)`` changes); enabled names are listed in that order.
        """
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
        """``SDPBackend`` name -> the int torch's priority order lists it by."""
        import torch

        members: dict[str, Any] = dict(torch.nn.attention.SDPBackend.__members__)
        return {name: int(member) for name, member in members.items()}

    def sdpa_matches(self, found: object, asked: object) -> bool:
        """Whether the SDPA backends read back (``",".join(read_sdpa()[0])``) are the knob's ``asked``.

        The same names in the same order; on a torch without a priority order (2.4-2.5: no
        ``torch._C._get_sdp_priority_order``, which 2.6 adds, ``torch/_C/__init__.pyi:1203``) only which
        backends are enabled exists, and :meth:`read_sdpa` lists them in its own order, so the same names.
        """
        import torch

        if type(found) is not type(asked):
            return False
        if found == asked:
            return True
        if not isinstance(found, str) or not isinstance(asked, str) or hasattr(torch._C, "_get_sdp_priority_order"):
            return False
        return sorted(found.split(",")) == sorted(asked.split(","))

    def write_sdpa(self, enabled: tuple[str, ...], order: tuple[int, ...] | None) -> None:
        """Enable exactly ``enabled``; set the priority order to ``order``, or (None) to ``enabled`` first, then
        the others as they were, as ``sdpa_kernel(backends, set_priority=True)`` does."""
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
