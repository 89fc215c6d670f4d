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
- GEMM backends (``_use_autotune_backend("…")`` calls in ``_inductor/utils.py``; the config comment
  lags): CKTILE from 2.8; CUTEDSL from 2.10 (``use_blackwell_cutedsl_grouped_mm``, which asks
  ``_use_template_for_gpu`` and so the gate: 2.10 ``utils.py:1985``); NVGEMM from 2.11
  (``use_nv_universal_gemm_template``, ``utils.py:2182``, which never asks the gate and needs the
  modules ``cutlass`` and ``cutlass_api``: ``ensure_cute_available``/``ensure_nv_universal_gemm_available``).
- Knobs that arrive in this range (:mod:`._features`): ``triton.cudagraph_capture_sizes`` (2.8),
  cuDNN attention's ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` (2.9), ``lookup_table.table`` and
  ``inductor_choices_class`` (2.10).
- ``torch/cuda/green_contexts.py``: no file in 2.8–2.9; ``GreenContext.create(num_sms, device_id=0)``
  arrives in 2.10 without ``Stream()``; 2.11 adds ``Stream()`` (:45), which small-GPU emulation
  needs.  The class is a Python shim over the C++ ``torch._C._CUDAGreenContext`` and has no way to
  ask how many SMs the driver granted; emulation asks the driver through cuda-python instead.
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
    """Facts and operations for torch 2.8-2.11 (see the module docstring)."""

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
    #: From 2.8 every GPU timing of Inductor goes through the ``benchmark_gpu`` of the benchmarker it uses
    #: (``runtime/benchmarking.py``'s ``benchmarker`` is a ``TritonBenchmarker`` or, with
    #: ``use_experimental_benchmarker``, an ``InductorBenchmarker``, whose method does not call its parent's;
    #: 2.13+ adds ``TorchProfilerBenchmarker`` with ``use_torch_profiler_benchmarker``): a GEMM choice, ATen or
    #: template (``AlgorithmSelectorCache.benchmark_choice`` -> ``choice.benchmark`` -> ``do_bench``), a Triton
    #: config of a runtime autotune or a coordinate-descent step (``CachingAutotuner.bench`` ->
    #: ``benchmarker.benchmark_gpu``), and the epilogue-fusion benchmarks that pick each layer's final kernel
    #: (``codegen/triton.py`` ``benchmark_codegened_module`` and ``scheduler.py``).  So those methods are the
    #: turns, and nothing around them: a GEMM template's first call compiles its Triton kernel on the main
    #: thread (``CachingAutotuner.run`` -> ``precompile``, seen on an H100 with torch 2.11: 15-18 s of one
    #: process's ``benchmark_choices`` in ``make_cubin``), which a turn around ``benchmark_choices`` held while
    #: every other worker waited.  Own methods of those classes: 2.8.0 ``:148``/``:208``, 2.10.0
    #: ``:255``/``:324``, 2.12.0 ``:350``/``:431``, 2.13.0 ``:492``/``:592``/``:721``, 2.14.1
    #: ``:513``/``:635``/``:788``, 2.15.0 ``:531``/``:662``/``:815``.
    autotune_benchmark_hooks: ClassVar[tuple[str, ...]] = ()
    autotune_timing_hooks: ClassVar[tuple[str, ...]] = (
        "torch._inductor.runtime.benchmarking:TritonBenchmarker.benchmark_gpu",
        "torch._inductor.runtime.benchmarking:InductorBenchmarker.benchmark_gpu",
        "torch._inductor.runtime.benchmarking:TorchProfilerBenchmarker.benchmark_gpu",
    )
    #: ``InductorBenchmarker.get_event_pairs(iters)`` (``iters, device_type`` in 2.13.0 and 2.15.0), which its ``benchmark_gpu``
    #: calls for the estimate and for the timed loop: 2.8.0 ``runtime/benchmarking.py:184``, 2.11.0 ``:305``,
    #: 2.15.0 ``:610``.
    autotune_event_hooks: ClassVar[tuple[str, ...]] = (
        "torch._inductor.runtime.benchmarking:InductorBenchmarker.get_event_pairs",
    )
    #: ``recheck_autotune_cache`` tunes a cached coordinate-descent winner again (pytorch#172819): see :mod:`._fixes`.
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {r: True for r in ("2.8", "2.9", "2.10", "2.11")}

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        # (path, model_name, run_single_threaded, num_runners, device_index): _inductor/package/package.py
        # :129 in 2.8.0-2.12.0, :138 in 2.14.1 (the binding takes exactly five in 2.13.0).
        return (path, "model", True, 1, -1)

    def _green_api_problem(self, green: Any) -> str | None:
        """2.11-2.13: ``GreenContext.create`` takes ``num_sms`` and ``device_id`` (positional-or-keyword
        in 2.11, keyword-only from 2.12: ``torch/cuda/green_contexts.py:GreenContext.create``)."""
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
    if not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a C++ callable without a signature
        return False
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return all(name in params and params[name].kind in kinds for name in names)


def driver_split_sms(device_index: int, sms: int) -> int | None:
    """SMs the CUDA driver grants a one-group split of ``sms`` on ``device_index``, via cuda-python.

    The same request torch's green contexts make (``cuDevSmResourceSplitByCount(1, resource, 0,
    sms)``: C++ in 2.11-2.13, ``torch/cuda/green_contexts.py:GreenContext.__init__`` in 2.14-2.15),
    so the same rounding.  None when cuda-python is missing or the driver does not answer.
    """
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
