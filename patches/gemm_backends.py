"""GEMM backends: which ones a release accepts, which ones the SM gate governs, CUTLASS and NVGEMM.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  The facts are tables per minor
release, which every era module sets for each release of its range (``torch/`` relative):

- Backend names from the comment above ``max_autotune_gemm_backends`` in ``_inductor/config.py`` (2.4:
  ATen, Triton, CUTLASS, CPP; 2.5: + CK) and, where the comment lags, the ``_use_autotune_backend("…")``
  calls in ``_inductor/utils.py`` (CKTILE 2.8, CUTEDSL 2.10, NVGEMM 2.11, FLYDSL 2.15).
- ``use_triton_template`` and ``use_cutlass_template`` ask the gate through ``_use_template_for_cuda``
  (2.4–2.6) / ``_use_template_for_gpu`` (2.7+), first until 2.15 and last from 2.15; ATEN, CPP, CK and
  CKTILE never ask it, nor does NVGEMM.
- CUTLASS is found through ``cuda.cutlass_dir`` (``cutlass.cutlass_dir`` from 2.11) and
  ``try_import_cutlass``, which needs the checkout's ``python/cutlass_library``.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import ClassVar

from .release_tables import by_release


class GemmBackends:
    """Facts about GEMM backends, per minor release (see the module docstring)."""

    #: GEMM backend names per minor release, from the comment above ``max_autotune_gemm_backends``.
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]]
    #: The Inductor config key codegen reads the CUTLASS checkout from, per minor release.
    cutlass_dir_key_by_release: ClassVar[dict[str, str]]

    # -- which GEMM backends the SM gate governs (``inductor-knobs doctor``) --
    #: Backends whose template check calls ``is_big_gpu`` (through ``_use_template_for_cuda`` in
    #: 2.4-2.6, ``_use_template_for_gpu`` from 2.7), per minor release: ``use_triton_template`` and
    #: ``use_cutlass_template`` in every release (``_inductor/utils.py``).  ATEN, CPP, CK and CKTILE
    #: (``use_ck_template``: its own ROCm arch rule) never ask the gate.
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]]
    #: Whether ``use_triton_template``/``use_cutlass_template`` call the gate last (2.15), so its
    #: "Not enough SMs" warning and cached verdict appear only under max-autotune with TRITON or
    #: CUTLASS selected.  Before 2.15 the gate is asked first, at every GEMM lowering.
    gate_checked_last: ClassVar[bool]
    #: Modules ``use_nv_universal_gemm_template`` needs for the NVGEMM backend (``ensure_cute_available``
    #: and ``ensure_nv_universal_gemm_available``), per minor release; empty: no NVGEMM backend.
    #: NVGEMM never calls ``is_big_gpu``.
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
        """Whether Inductor would find CUTLASS, and the directory it looks in.

        Mirrors ``try_import_cutlass``: the CUTLASS checkout's ``python/cutlass_library``
        must exist under ``cutlass_dir`` (default: the configured one).
        """
        cutlass_dir = cutlass_dir or str(getattr(cfg, self.cutlass_dir_key(release)))
        found = os.path.isdir(os.path.join(cutlass_dir, "python", "cutlass_library"))
        return found, cutlass_dir
