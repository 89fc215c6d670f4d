"""torch 2.12–2.13: Inductor config overrides are per thread.

Facts (torch 2.12.0 and 2.13.0 wheels):
- ``utils/_config_module.py:334`` (2.12): ``_ConfigEntry.user_override`` is a ``ContextVar``;
  "User overrides are thread-local" (:53).  A value patched on one thread is invisible in a new
  ``threading.Thread``, so the gate override is per thread (per context) too.
- ``_inductor/utils.py:1697`` (2.12) / ``:1933`` (2.13): ``is_big_gpu(index_or_device: int |
  torch.device = 0)``.
- ``max_autotune_gemm_backends`` comment lists CUTEDSL and NVGEMM (2.12 ``config.py:605``); NVGEMM
  needs the modules ``cutlass`` and ``cutlass_api`` (``ensure_nv_universal_gemm_available``,
  2.13 ``utils.py:2315``) and never asks the gate (``use_nv_universal_gemm_template``, :2468).
  ``use_triton_template``/``use_cutlass_template`` ask ``_use_template_for_gpu`` (the gate) first.
- ``torch/cuda/green_contexts.py``: ``GreenContext.create(*, num_sms=None, workqueue_scope=None,
  workqueue_concurrency_limit=None, device_id=None)`` takes keywords only; still the C++-backed shim
  with ``Stream()``, as in 2.11.
"""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar, cast

from packaging.specifiers import SpecifierSet

from .torch_2_8 import Torch28

_BACKENDS = frozenset({"ATEN", "TRITON", "CUTLASS", "CUTEDSL", "NVGEMM", "CK", "CKTILE", "CPP"})
_GATED = frozenset({"TRITON", "CUTLASS", "CUTEDSL"})


class Torch212(Torch28):
    """Facts and operations for torch 2.12-2.13 (see the module docstring)."""

    name: ClassVar[str] = "torch_2_12"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.12,<2.14")
    config_is_thread_local: ClassVar[bool] = True
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"d29598369aaebd20"})  # 2.12.0-2.13.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.12": _BACKENDS, "2.13": _BACKENDS}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {r: "cutlass.cutlass_dir" for r in ("2.12", "2.13")}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {r: 6 for r in ("2.12", "2.13")}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {r: _GATED for r in ("2.12", "2.13")}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {r: ("cutlass", "cutlass_api") for r in ("2.12", "2.13")}

    def read_override(self, cfg: ModuleType, key: str) -> object:
        return cfg._config[key].user_override.get()  # type: ignore[attr-defined]

    def process_default_state(self, cfg: ModuleType, key: str) -> object:
        return (cfg._config[key].default, self.read_override(cfg, key))  # type: ignore[attr-defined]

    def set_process_default(self, cfg: ModuleType, key: str, value: object) -> None:
        """Overrides are per thread from 2.12, so a process-wide value must be the entry's default.

        If the calling thread already holds an override of ``key`` (torch's own ``config.patch``
        leaves one behind, pinned to the value it read), that override is set too, so this
        thread sees the value as well.  Rewriting the override makes torch drop its cached
        ``get_hash``/``_get_dict`` results for this key.
        """
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = cfg._config[key]  # type: ignore[attr-defined]
        override = self.read_override(cfg, key)
        entry.default = value
        self.write_override(cfg, key, value if override is not _UNSET_SENTINEL else override)

    def restore_process_default(self, cfg: ModuleType, key: str, prior: object) -> None:
        default, override = cast("tuple[object, object]", prior)
        cfg._config[key].default = default  # type: ignore[attr-defined]
        self.write_override(cfg, key, override)


PATCHES = Torch212()
