"""torch 2.14: green contexts rewritten in Python over ``cuda.bindings``; NVGEMM via ``cutlass.operators``.

Facts (torch 2.14.1 wheel, ``torch/`` relative):
- ``cuda/green_contexts.py:GreenContext`` (:81): Python over ``cuda.bindings``; ``GreenContext(*, num_sms=None, ...,
  device_id=None)`` (:102) splits SMs as 2.11–2.13's C++ did; ``create`` (:259) "Kept for compatibility"; ``Stream()``: an
  ``ExternalStream`` from a pool of 32; ``__del__`` destroys the context and its streams.  No ``sm_count``.
- ``_inductor/utils.py:is_big_gpu`` (:1785): ``raise AssertionError`` for the ROCm ``assert`` (new fingerprint); the template
  checks (:1919, :2288) ask the gate first; NVGEMM needs ``cutlass.operators`` (:2168); backends as 2.13 (``config.py:638``).
- ``_inductor/config.py:autotune_cudagraph_benchmarking`` (:562) captures each candidate on its own stream
  (``runtime/benchmarking.py:376``), escaping an emulated GPU's green context, so emulation asks it off.
- ``utils/_config_module.py:ConfigPatch.__exit__`` (:937) still pins the value it read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_8 import takes_keywords
from .torch_2_12 import BACKENDS, GATED, Torch212


class Torch214(Torch212):
    """Facts and operations for torch 2.14."""

    name: ClassVar[str] = "torch_2_14"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.14,<2.15")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"e9e500a1f4feee94"})  # 2.14.0-2.14.1
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.14": BACKENDS}
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.14": "cutlass.cutlass_dir"}
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.14": 6}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {"2.14": GATED}
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.14": ("cutlass", "cutlass.operators")}
    green_context_api: ClassVar[str | None] = "constructor"
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.14": False}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.14": False}
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.14": True}
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.14": False}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.14": True}  # see aot_headers.py
    emulation_capture_config: ClassVar[tuple[tuple[str, Any], ...]] = (
        *Torch212.emulation_capture_config,
        ("autotune_cudagraph_benchmarking", False),
    )

    def _green_api_problem(self, green: Any) -> str | None:
        """``torch/cuda/green_contexts.py:GreenContext.__init__(num_sms=, device_id=)`` (2.14+)."""
        if isinstance(green, type) and takes_keywords(green, "num_sms", "device_id"):
            return None
        return "a GreenContext without the GreenContext(num_sms=, device_id=) constructor"

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        """The constructor, not ``create()`` ("kept for compatibility" from 2.14)."""
        return green(num_sms=sms, device_id=device_index)


PATCHES = Torch214()
