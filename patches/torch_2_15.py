"""torch 2.15: config implications, the gate asked last, FLYDSL, ``SMPartition`` and ``GreenContext.sm_count``.

Facts (torch 2.15.0 wheel, ``torch/`` relative); otherwise as 2.14:
- ``utils/_config_module.py:_ImplicationConfigModule`` (:1347): ``implies`` (Inductor's ``numerics="strict"``) beats assignment,
  ``patch()`` and ``env_name_force``; ``module._implications``: target -> ``(source, condition, value)`` (:1348).
  ``_ImplicationConfigPatch`` (:1515-1534) restores "unset" on exit; the raw patcher is ``_set_raw_values`` (:1469).
- ``_inductor/utils.py:use_triton_template`` (:2269), ``use_cutlass_template`` (:3073) ask the gate last (:3088).  FLYDSL
  (``config.py:690``, ROCm): ``use_flydsl_gemm_template`` (:2982) asks it; NVGEMM (:3108) does not.
- ``cuda/green_contexts.py:GreenContext.sm_count`` (:760, SMs granted).  ``SMPartition.split`` (:271) needs a 13.1+ driver
  and does not round (:356), so emulation keeps ``GreenContext(num_sms=, device_id=)`` (12.8+, rounds up to SM groups).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_12 import BACKENDS, GATED
from .torch_2_14 import Torch214


class Torch215(Torch214):
    """Facts and operations for torch 2.15."""

    name: ClassVar[str] = "torch_2_15"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.15,<2.16")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"e9e500a1f4feee94"})  # 2.15.0 (as 2.14)
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.15": BACKENDS | {"FLYDSL"}}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.15": "cutlass.cutlass_dir"}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.15": 6}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.15": GATED | {"FLYDSL"}}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.15": ("cutlass", "cutlass.operators")}
    gate_checked_last: ClassVar[bool] = True
    config_patch_restores_unset: ClassVar[bool] = True
    green_context_api: ClassVar[str | None] = "constructor+sm_count"
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.15": False}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.15": False}
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.15": True}
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.15": False}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.15": True}  # see aot_headers.py

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        # _inductor/package/package.py:148: a sixth argument, use_stream_affinity (False in load_package).
        return (path, "model", True, 1, -1, False)

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """``torch/cuda/green_contexts.py:GreenContext.sm_count`` (:760), else the cuda-python query."""
        try:
            return int(context.sm_count)
        except (AttributeError, RuntimeError, TypeError, ValueError):  # destroyed or unreadable: ask the driver
            return super().granted_sms(context, device_index, sms)

    def implied_by(self, cfg: ModuleType, key: str) -> str | None:
        for source, condition, value in getattr(cfg, "_implications", {}).get(key, ()):
            current = self.read_value(cfg, source)
            if type(current) is type(condition) and current == condition:
                return f"{source}={condition!r} (which forces {key}={value!r})"
        return None


PATCHES = Torch215()
