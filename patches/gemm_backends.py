"""GEMM backends: which ones a release accepts, which ones the SM gate governs, CUTLASS and NVGEMM.

Tables per minor release, set by every era module (``torch/`` relative):
- Names: the comment above ``_inductor/config.py:max_autotune_gemm_backends`` (2.4: ATEN, TRITON, CUTLASS, CPP; 2.5: + CK)
  and ``_inductor/utils.py:_use_autotune_backend("…")`` calls (CKTILE 2.8, CUTEDSL 2.10, NVGEMM 2.11, FLYDSL 2.15).
- ``_inductor/utils.py:use_triton_template``/``use_cutlass_template`` ask the gate via ``_use_template_for_cuda``
  (2.4–2.6) / ``_use_template_for_gpu`` (2.7+), first until 2.14, last from 2.15; ATEN, CPP, CK, CKTILE, NVGEMM never do.
- CUTLASS: ``cuda.cutlass_dir`` (``cutlass.cutlass_dir`` from 2.11) and ``try_import_cutlass`` (needs ``python/cutlass_library``).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import ClassVar

from .release_tables import by_release


class GemmBackends:
    """Facts about GEMM backends, per minor release."""

    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]]
    #: The Inductor config key codegen reads the CUTLASS checkout from, per minor release.
    cutlass_dir_key_by_release: ClassVar[dict[str, str]]
    #: Backends whose template check calls ``is_big_gpu``, per minor release (``inductor-knobs doctor``).
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]]
    #: Whether the template checks ask the gate last (2.15: its warning and verdict only under max-autotune), not first.
    gate_checked_last: ClassVar[bool]
    #: Modules NVGEMM needs (``ensure_cute_available``, ``ensure_nv_universal_gemm_available``); empty: no NVGEMM.
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]]
    #: PyPI distributions that provide the modules above (where torch's source names one).
    module_distributions: ClassVar[dict[str, str]] = {
        "cutlass": "nvidia-cutlass-dsl",
        "cutlass.operators": "nvidia-cutlass-operators",  # torch 2.15 kernel/vendored_templates/cutedsl/dense_gemm_efc.py:40
    }

    def gemm_backends(self, release: str) -> frozenset[str]:
        """GEMM backend names torch ``release`` (``"2.13"``) accepts; the newest known if unlisted."""
        return by_release(self.gemm_backends_by_release, release)

    def gate_checked_backends(self, release: str) -> frozenset[str]:
        """GEMM backends whose templates torch ``release`` offers only when ``is_big_gpu`` says yes."""
        return by_release(self.gate_checked_backends_by_release, release)

    def nvgemm_modules(self, release: str) -> tuple[str, ...]:
        """Modules NVGEMM needs in ``release`` (empty: that release has no NVGEMM backend)."""
        return tuple(by_release(self.nvgemm_modules_by_release, release))

    def cutlass_dir_key(self, release: str) -> str:
        """The config key Inductor reads the CUTLASS directory from in ``release``."""
        return by_release(self.cutlass_dir_key_by_release, release)

    def cutlass_available(self, cfg: ModuleType, release: str, cutlass_dir: str | None = None) -> tuple[bool, str]:
        """(whether ``try_import_cutlass`` would find ``python/cutlass_library`` under ``cutlass_dir``, that directory);
        ``cutlass_dir`` defaults to the configured one."""
        cutlass_dir = cutlass_dir or str(getattr(cfg, self.cutlass_dir_key(release)))
        found = os.path.isdir(os.path.join(cutlass_dir, "python", "cutlass_library"))
        return found, cutlass_dir
