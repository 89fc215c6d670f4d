"""torch 2.7: XPU threshold, ``get_gpu_type``, config aliases and forcing env vars.

Facts (torch 2.7.0 wheel):
- ``_inductor/utils.py:1229``: ``min_sms = 16 if device.type == "xpu" else 68``; an int argument
  becomes ``torch.device(get_gpu_type(), idx)``.
- ``utils/_config_module.py:84-85``: ``_Config`` gains ``env_name_force`` (the env var beats any
  override, so ``config.patch`` silently loses: ``fx_graph_cache`` from 2.7) and ``alias`` (the
  value lives in another config module).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_6 import Torch26

if TYPE_CHECKING:
    import torch


class Torch27(Torch26):
    """Facts and operations for torch 2.7 (see the module docstring)."""

    name: ClassVar[str] = "torch_2_7"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.7,<2.8")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"005b0eeebdc4037d"})  # 2.7.0-2.7.1
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.7": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"}),
    }
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.7": "cuda.cutlass_dir"}

    def gate_device(self, index: Any) -> torch.device:
        import torch
        from torch._inductor.utils import get_gpu_type

        if isinstance(index, torch.device):
            return index
        return torch.device(get_gpu_type(), index)

    def forcing_env_var(self, cfg: ModuleType, key: str) -> str | None:
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = cfg._config[key]  # type: ignore[attr-defined]
        if entry.env_value_force is _UNSET_SENTINEL:
            return None
        # The entry keeps the forced value but not the variable's name: name the set
        # variables that spell the key (TORCHINDUCTOR_FX_GRAPH_CACHE for fx_graph_cache).
        stem = key.rsplit(".", 1)[-1].upper()
        names = sorted(n for n in os.environ if n.endswith(stem) and n.startswith(("TORCHINDUCTOR_", "TORCH_")))
        return ", ".join(names) or f"an env_name_force variable of {key}"

    def resolve_alias(self, cfg: ModuleType, key: str) -> tuple[ModuleType, str]:
        import importlib

        alias = cfg._config[key].alias  # type: ignore[attr-defined]
        if alias is None:
            return cfg, key
        module_name, _, target = alias.rpartition(".")
        return importlib.import_module(module_name), target


PATCHES = Torch27()
