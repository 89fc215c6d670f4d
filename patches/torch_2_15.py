"""torch 2.15: config implications, the gate asked last, FLYDSL, ``SMPartition`` and ``GreenContext.sm_count``.

Facts (torch 2.15.0 wheel):
- ``utils/_config_module.py:64`` (docstring) and ``_ImplicationConfigModule`` (:1347): a config
  entry may ``implies`` values of other keys; Inductor's config is such a module
  (``numerics="strict"``/``"strict_pointwise"`` force ``emulate_precision_casts`` and
  ``eager_numerics.*``).  An active implication beats assignment, ``patch()`` and
  ``env_name_force`` alike; ``module._implications`` maps each target to its
  ``(source, condition, value)`` rules (:1348).
- On implication modules ``patch()`` restores the stored override ("unset") on exit instead of
  pinning the value it read (``_ImplicationConfigPatch``, :1515-1534), and
  ``_make_closure_patcher`` becomes ``_set_raw_values`` (:1469), which validates implications.
- ``_inductor/utils.py:2269`` ``use_triton_template`` and ``:3073`` ``use_cutlass_template`` ask
  ``_use_template_for_gpu`` (the gate) last, after max-autotune and the backend selection ("Keep
  _use_template_for_gpu last", :3088), so the "Not enough SMs" warning and the cached verdict
  appear only under max-autotune with TRITON or CUTLASS selected.
- New GEMM backend FLYDSL (``config.py:690``, ROCm, experimental): ``use_flydsl_gemm_template``
  (``utils.py:2982``) asks the gate, whose ROCm rule is by arch, not SMs.  NVGEMM (``:3108``,
  modules ``cutlass`` and ``cutlass.operators``) still never asks it.
- ``cuda/green_contexts.py``: ``SMPartition`` (:271; ``from_device``, ``split``, ``sm_count``) and
  ``GreenContext(..., sm_partition=None, ...)`` (:523), ``GreenContext.split``, and the properties
  ``sm_count`` (:760, the SMs the driver granted), ``sm_partition`` and ``device_id``; ``create``
  (:776) is still "kept for compatibility".  Emulation keeps ``GreenContext(num_sms=, device_id=)``
  rather than ``SMPartition.split``: the split needs a 13.1+ driver and cuda.bindings and does not
  round counts ("counts are not automatically rounded", :356), while ``num_sms`` works from 12.8 and
  rounds up to the driver's SM groups as 2.11–2.14 did.
- Everything else the toolkit relies on is as in 2.14 (see :mod:`.torch_2_14`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_12 import BACKENDS, GATED
from .torch_2_14 import Torch214


class Torch215(Torch214):
    """Facts and operations for torch 2.15 (see the module docstring)."""

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

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        # _inductor/package/package.py:148: a sixth argument, use_stream_affinity (False in load_package).
        return (path, "model", True, 1, -1, False)

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """``GreenContext.sm_count`` (``torch/cuda/green_contexts.py:760``): the SMs of the context's
        own resource, as the driver granted them; the cuda-python query if it is unreadable."""
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
