"""torch 2.8–2.11: ``@functools.cache`` on the gate; new backends; ``cutlass.cutlass_dir`` in 2.11.

Facts (torch 2.8.0–2.11.0 wheels, ``torch/`` relative):
- ``_inductor/utils.py:is_big_gpu`` (2.8 :1415 … 2.11 :1710): ``@functools.cache``, body as 2.7 (same fingerprint).
- ``force_disable_caches`` gets ``env_name_force`` (2.8), then aliases ``torch.compiler.config.force_disable_caches`` (2.9).
- ``_inductor/config.py:cutlass.cutlass_dir`` (2.11 :2041) replaces ``cuda.cutlass_dir`` for codegen.
- ``_inductor/select_algorithm.py`` feedback savers: a 5th argument (2.8 :2101), a 6th, ``precompile_times`` (2.11 :2757).
- ``_inductor/utils.py`` backends: CKTILE 2.8; CUTEDSL 2.10 (``use_blackwell_cutedsl_grouped_mm`` asks the gate, :1985); NVGEMM
  2.11 (``use_nv_universal_gemm_template``, :2182, never asks it; needs ``cutlass`` and ``cutlass_api``).
- ``cuda/green_contexts.py:GreenContext``: ``create(num_sms, device_id=0)`` 2.10, ``Stream()`` 2.11 (:45); no granted-SM count.
- ``_inductor/runtime/benchmarking.py``: every GPU timing goes through a benchmarker's own ``benchmark_gpu`` (2.8.0 :148/:208,
  2.13.0 :492/:592/:721, 2.15.0 :531/:662/:815) and ``InductorBenchmarker.get_event_pairs`` (2.8.0 :184, 2.15.0 :610): the
  ablation's turns, not ``benchmark_choices``, which would also hold a template's Triton compile (15-18 s, H100, 2.11).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .torch_2_7 import Torch27

_CK = frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"})
_GATED = frozenset({"TRITON", "CUTLASS"})

log = logging.getLogger(__name__)


class Torch28(Torch27):
    """Facts and operations for torch 2.8-2.11."""

    name: ClassVar[str] = "torch_2_8"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.8,<2.12")
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"005b0eeebdc4037d"})  # 2.8.0-2.11.0
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.8": _CK | {"CKTILE"},
        "2.9": _CK | {"CKTILE"},
        "2.10": _CK | {"CKTILE", "CUTEDSL"},
        "2.11": _CK | {"CKTILE", "CUTEDSL", "NVGEMM"},
    }
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {
        "2.8": "cuda.cutlass_dir",
        "2.9": "cuda.cutlass_dir",
        "2.10": "cuda.cutlass_dir",
        "2.11": "cutlass.cutlass_dir",
    }
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.8": 5, "2.9": 5, "2.10": 5, "2.11": 6}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.8": _GATED,
        "2.9": _GATED,
        "2.10": _GATED | {"CUTEDSL"},
        "2.11": _GATED | {"CUTEDSL"},
    }
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {
        "2.8": (),
        "2.9": (),
        "2.10": (),
        "2.11": ("cutlass", "cutlass_api"),
    }
    green_context_api: ClassVar[str | None] = "create"
    autotune_benchmark_hooks: ClassVar[tuple[str, ...]] = ()
    autotune_timing_hooks: ClassVar[tuple[str, ...]] = (
        "torch._inductor.runtime.benchmarking:TritonBenchmarker.benchmark_gpu",
        "torch._inductor.runtime.benchmarking:InductorBenchmarker.benchmark_gpu",
        "torch._inductor.runtime.benchmarking:TorchProfilerBenchmarker.benchmark_gpu",
    )
    autotune_event_hooks: ClassVar[tuple[str, ...]] = (
        "torch._inductor.runtime.benchmarking:InductorBenchmarker.get_event_pairs",
    )
    #: pytorch#172819: see :mod:`.fixes`.
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {r: True for r in ("2.8", "2.9", "2.10", "2.11")}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {r: True for r in ("2.8", "2.9", "2.10", "2.11")}
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {r: True for r in ("2.8", "2.9", "2.10", "2.11")}
    # Inductor warms its compile-worker pool at import in 2.8, at the first compile from 2.9 (hooks.py).
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.8": True, "2.9": False, "2.10": False, "2.11": False}
    #: 2.9.0 has no ``use_mmap_weights_external``; 2.8 not checked (see aot_headers.py).
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.8": False, "2.9": False, "2.10": True, "2.11": True}

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        # (path, model_name, run_single_threaded, num_runners, device_index): _inductor/package/package.py
        # :129 in 2.8.0-2.12.0, :138 in 2.14.1 (exactly five in 2.13.0).
        return (path, "model", True, 1, -1)

    def _green_api_problem(self, green: Any) -> str | None:
        """``torch/cuda/green_contexts.py:GreenContext.create(num_sms=, device_id=)`` (keyword-only from 2.12)."""
        if takes_keywords(getattr(green, "create", None), "num_sms", "device_id"):
            return None
        return "a GreenContext without create(num_sms=, device_id=)"

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        return green.create(num_sms=sms, device_id=device_index)

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """A ``sm_count`` the context reports, else the driver's answer to the same split request."""
        count = getattr(context, "sm_count", None)
        if isinstance(count, int) and not isinstance(count, bool):
            return count
        return driver_split_sms(device_index, sms)


def takes_keywords(fn: Any, *names: str) -> bool:
    """Whether ``fn`` is callable with each of ``names`` as a keyword argument (named, not ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # not callable, or a C++ callable without a signature
        return False
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return all(name in params and params[name].kind in kinds for name in names)


def driver_split_sms(device_index: int, sms: int) -> int | None:
    """SMs the CUDA driver grants a one-group split of ``sms`` on ``device_index`` (cuda-python; None if unanswered), by
    the request torch makes (``cuDevSmResourceSplitByCount(1, resource, 0, sms)``; 2.14-2.15 ``GreenContext.__init__``)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        driver.cuInit(0)
        _, cu_device = driver.cuDeviceGet(device_index)
        _, resource = driver.cuDeviceGetDevResource(cu_device, driver.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM)
        answer = driver.cuDevSmResourceSplitByCount(1, resource, 0, sms)  # (status, groups, count, remaining)
        return int(answer[1][0].sm.smCount) if answer[2] else None
    except Exception:  # the driver's answer is information only
        log.debug("could not ask the driver how many SMs it granted", exc_info=True)
        return None


PATCHES = Torch28()
