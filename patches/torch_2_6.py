"""torch 2.6: ``is_big_gpu(index_or_device=0)``, ``DeviceProperties``, the ROCm rule, ``cache_key_tag``.

Facts (torch 2.6.0 wheel, ``torch/`` relative):
- ``_inductor/utils.py:is_big_gpu`` (:1116): ``lru_cache(None)``, ``(index_or_device=0)``, an int becomes ``torch.device("cuda",
  idx)``, SMs from ``runtime/hints.py:DeviceProperties.create`` (:128, lru_cached); ROCm small when arch major < 9 or == 10.
- ``utils/_config_module.py:_ConfigEntry`` (:214): ``user_override`` (``_UNSET_SENTINEL`` when unset), process-global;
  ``_Config.env_name_force`` (:57) beats any override.
- ``compiler/config.py:cache_key_tag`` (:58), hashed into the FX graph, AOTAutograd and autotune cache keys.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_4 import TorchPatches

if TYPE_CHECKING:
    import torch

_COMPILER_CONFIG = "torch.compiler.config"


class Torch26(TorchPatches):
    """Facts and operations for torch 2.6."""

    name: ClassVar[str] = "torch_2_6"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.6,<2.7")
    sm_count_caches: ClassVar[tuple[str, ...]] = (
        "torch._inductor.utils:is_big_gpu",
        "torch._inductor.runtime.hints:DeviceProperties.create",
    )
    gate_parameters: ClassVar[tuple[tuple[str, object], ...]] = (("index_or_device", 0),)
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"866ddf0080c36d59"})  # 2.6.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.6": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"})}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.6": "cuda.cutlass_dir"}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.6": frozenset({"TRITON", "CUTLASS"})}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.6": ()}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.6": 4}  # select_algorithm.py:1912
    reasons_after_start_callbacks: ClassVar[bool] = False  # convert_frame.py:891, callbacks from :986
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.6": False}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.6": True}
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.6": False}  # not checked
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.6": True}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.6": False}  # not checked
    recompile_stance: ClassVar[str | None] = "fail_on_recompile"  # torch.compiler.set_stance (patches/native_floors.py)

    def sm_count(self, device: torch.device) -> int:
        from torch._inductor.runtime.hints import DeviceProperties

        return int(DeviceProperties.create(device).multi_processor_count)

    def gate_prerequisites(self) -> list[str]:
        return ["torch._inductor.runtime.hints.DeviceProperties.create"]

    def read_override(self, cfg: ModuleType, key: str) -> object:
        return cfg._config[key].user_override  # type: ignore[attr-defined]

    def declared_types(self, cfg: ModuleType, key: str) -> tuple[Any, ...] | None:
        """The entry's ``value_type`` (from the annotation, else the default's type)."""
        from .config_storage import as_types

        entry = cfg._config[key]  # type: ignore[attr-defined]
        declared = getattr(entry, "value_type", None)
        if declared is None or declared is type(None):  # no annotation and a None default: unchecked
            return None
        return as_types(declared)

    def forcing_env_var(self, cfg: ModuleType, key: str) -> str | None:
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = cfg._config[key]  # type: ignore[attr-defined]
        if entry.env_value_force is _UNSET_SENTINEL:
            return None
        # The entry keeps the forced value but not the variable's name: name the set variables that spell the key.
        stem = key.rsplit(".", 1)[-1].upper()
        names = sorted(n for n in os.environ if n.endswith(stem) and n.startswith(("TORCHINDUCTOR_", "TORCH_")))
        return ", ".join(names) or f"an env_name_force variable of {key}"

    def cache_salt(self, tag: str) -> list[tuple[str, str, object]]:
        """Append ``tag`` to ``torch.compiler.config.cache_key_tag`` (kept if the user set one)."""
        compiler_config = sys.modules.get(_COMPILER_CONFIG) or importlib.import_module(_COMPILER_CONFIG)  # read at every enter
        prior = str(self.read_config(compiler_config, "cache_key_tag"))
        return [(_COMPILER_CONFIG, "cache_key_tag", f"{prior}+{tag}" if prior else tag)]


PATCHES = Torch26()
