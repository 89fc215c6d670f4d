"""torch 2.14: green contexts rewritten in Python over ``cuda.bindings``; NVGEMM via ``cutlass.operators``.

Facts (torch 2.14.1 wheel, ``torch/`` relative):
- ``cuda/green_contexts.py:81``: ``class GreenContext`` is plain Python over ``cuda.bindings``
  (it needs that package and a 12.8+ driver, ``_ensure_supported``).  Its constructor
  ``GreenContext(*, num_sms=None, workqueue_scope=None, workqueue_concurrency_limit=None,
  device_id=None)`` (:102) splits the device's SMs with ``cuDevSmResourceSplitByCount(1, resource, 0,
  num_sms)``, as the C++ class of 2.11–2.13 did; ``create(...)`` (:259) is "Kept for compatibility,
  see ``GreenContext`` constructor"; ``set_context``/``pop_context`` are ``@deprecated``
  (``FutureWarning``).  ``Stream()`` returns a ``torch.cuda.ExternalStream`` of a pool of 32
  non-blocking green streams; ``__del__`` destroys the context and its streams.  No ``sm_count`` yet.
- ``_inductor/utils.py:1785``: ``is_big_gpu`` turns the ROCm ``assert`` into ``raise AssertionError``
  (new fingerprint); otherwise as 2.12–2.13.  ``use_triton_template`` (:1919) and
  ``use_cutlass_template`` (:2288) still ask the gate first.
- ``_inductor/utils.py:2168``: NVGEMM needs ``cutlass.operators`` (PyPI ``nvidia-cutlass-operators``)
  instead of ``cutlass_api``; the backend list is unchanged (``config.py:638``).
- ``_inductor/config.py:562``: ``autotune_cudagraph_benchmarking`` (off unless
  ``TORCHINDUCTOR_AUTOTUNE_CUDAGRAPH_BENCHMARKING=1``): under max-autotune each candidate is captured
  and timed as a CUDA graph on a ``torch.cuda.Stream()`` of its own (``runtime/benchmarking.py:376``),
  whose replays escape an emulated GPU's green context, so emulation asks it off.
- Config overrides stay per thread, and ``config.patch`` still pins the value it read on exit
  (``utils/_config_module.py:937`` ``ConfigPatch.__exit__`` writes it back with ``__setattr__``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_8 import takes_keywords
from .torch_2_12 import BACKENDS, GATED, Torch212


class Torch214(Torch212):
    """Facts and operations for torch 2.14 (see the module docstring)."""

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
    emulation_capture_config: ClassVar[tuple[tuple[str, Any], ...]] = (
        *Torch212.emulation_capture_config,
        ("autotune_cudagraph_benchmarking", False),
    )

    def _green_api_problem(self, green: Any) -> str | None:
        """2.14+: the class itself is the constructor, ``GreenContext(num_sms=, device_id=)``
        (``torch/cuda/green_contexts.py:GreenContext.__init__``)."""
        if isinstance(green, type) and takes_keywords(green, "num_sms", "device_id"):
            return None
        return "a GreenContext without the GreenContext(num_sms=, device_id=) constructor"

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        """The constructor, not ``create()`` ("kept for compatibility" from 2.14)."""
        return green(num_sms=sms, device_id=device_index)


PATCHES = Torch214()
