"""torch 2.15: config implications.

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
- Everything else the toolkit relies on is as in 2.12–2.14 (see :mod:`.torch_2_12`).
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_12 import _BACKENDS, Torch212


class Torch215(Torch212):
    """Facts and operations for torch 2.15 (see the module docstring)."""

    name: ClassVar[str] = "torch_2_15"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.15,<2.16")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"e9e500a1f4feee94"})  # 2.15.0 (as 2.14)
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.15": _BACKENDS | {"FLYDSL"}}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.15": "cutlass.cutlass_dir"}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.15": 6}

    def implied_by(self, cfg: ModuleType, key: str) -> str | None:
        for source, condition, value in getattr(cfg, "_implications", {}).get(key, ()):
            current = self.read_value(cfg, source)
            if type(current) is type(condition) and current == condition:
                return f"{source}={condition!r} (which forces {key}={value!r})"
        return None


PATCHES = Torch215()
