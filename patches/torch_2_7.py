"""torch 2.7: XPU threshold, ``get_gpu_type``, config aliases and forcing env vars.

Facts (torch 2.7.0 wheel, ``torch/`` relative):
- ``_inductor/utils.py:is_big_gpu`` (:1229): ``min_sms = 16 if device.type == "xpu" else 68``; an int becomes
  ``torch.device(get_gpu_type(), idx)``.
- ``utils/_config_module.py:_Config.alias`` (:85); ``fx_graph_cache`` uses ``env_name_force`` (``TORCHINDUCTOR_FX_GRAPH_CACHE``).
- ``_dynamo/guards.py:get_and_maybe_log_recompilation_reasons`` (:2953); ``compiler/__init__.py:save_cache_artifacts`` (:438).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_6 import Torch26

if TYPE_CHECKING:
    import torch


class Torch27(Torch26):
    """Facts and operations for torch 2.7."""

    name: ClassVar[str] = "torch_2_7"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.7,<2.8")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"005b0eeebdc4037d"})  # 2.7.0-2.7.1
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.7": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"})}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.7": "cuda.cutlass_dir"}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.7": frozenset({"TRITON", "CUTLASS"})}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.7": ()}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.7": 4}  # select_algorithm.py:2348
    recompile_reasons_name: ClassVar[str] = "get_and_maybe_log_recompilation_reasons"  # guards.py:2953
    has_cache_artifacts: ClassVar[bool] = True  # compiler/__init__.py:438
    #: ``_dynamo/config.py:recompile_limit``; ``cache_size_limit`` is its alias (2.13 and 2.14.1 :121/:137).
    recompile_limit_key: ClassVar[str] = "recompile_limit"
    #: ``_inductor/__init__.py:aoti_compile_and_package(ep, ..., *, package_path, inductor_configs)``/``aoti_load_package``
    #: (2.7 :51/:235, 2.13 :57/:241, 2.15 :64/:257); 2.6 unchecked, 2.5 takes ``(ep, args, kwargs)``.
    has_aot_packages: ClassVar[bool] = True
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.7": False}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.7": True}
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.7": False}  # not checked
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.7": True}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.7": False}  # not checked
    #: ``_inductor/utils.py:get_max_num_sms`` (:1258, lru_cached) sizes ``NUM_SMS`` from 2.7.
    sm_count_caches: ClassVar[tuple[str, ...]] = (*Torch26.sm_count_caches, "torch._inductor.utils:get_max_num_sms")

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        # _inductor/package/package.py:307: (path, model_name, run_single_threaded).
        return (path, "model", True)

    def gate_device(self, index: Any) -> torch.device:
        import torch
        from torch._inductor.utils import get_gpu_type

        if isinstance(index, torch.device):
            return index
        return torch.device(get_gpu_type(), index)

    def resolve_alias(self, cfg: ModuleType, key: str) -> tuple[ModuleType, str]:
        alias = cfg._config[key].alias  # type: ignore[attr-defined]
        if alias is None:
            return cfg, key
        module_name, _, target = alias.rpartition(".")
        return importlib.import_module(module_name), target


PATCHES = Torch27()
