"""torch 2.8–2.11: ``@functools.cache`` on the gate; new backends; ``cutlass.cutlass_dir`` in 2.11.

Facts (torch 2.8.0–2.11.0 wheels):
- ``_inductor/utils.py:1415`` (2.8) … ``:1710`` (2.11): ``@functools.cache`` replaces
  ``lru_cache(None)``; the body is unchanged from 2.7 (same fingerprint).
- ``force_disable_caches`` gets ``env_name_force`` (2.8) and becomes an alias of
  ``torch.compiler.config.force_disable_caches`` (2.9).
- 2.11 moves the CUTLASS directory to ``cutlass.cutlass_dir`` (config.py:2041); ``cuda.cutlass_dir``
  still exists but codegen no longer reads it.
- Feedback savers get a fifth argument, a profiler re-benchmark thunk (2.8 ``select_algorithm.py:2101``),
  and a sixth, ``precompile_times`` (2.11 ``:2757``).
- ``torch/cuda/green_contexts.py``: ``GreenContext.create(num_sms, device_id=0)`` arrives in 2.10
  without ``Stream()``; 2.11 adds ``Stream()`` (:45), which small-GPU emulation needs (feature-checked
  at run time).
"""

from __future__ import annotations

from typing import ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_7 import Torch27

_CK = frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"})


class Torch28(Torch27):
    """Facts and operations for torch 2.8-2.11 (see the module docstring)."""

    name: ClassVar[str] = "torch_2_8"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.8,<2.12")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"005b0eeebdc4037d"})  # 2.8.0-2.11.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.8": _CK | {"CKTILE"},
        "2.9": _CK | {"CKTILE"},
        "2.10": _CK | {"CKTILE"},
        "2.11": _CK | {"CKTILE", "CUTEDSL", "NVGEMM"},
    }
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {
        "2.8": "cuda.cutlass_dir",
        "2.9": "cuda.cutlass_dir",
        "2.10": "cuda.cutlass_dir",
        "2.11": "cutlass.cutlass_dir",
    }
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.8": 5, "2.9": 5, "2.10": 5, "2.11": 6}


PATCHES = Torch28()
