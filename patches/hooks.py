"""Where the observers hook into torch: first-call costs at serving time, profiler op names, autotune
feedback savers, Dynamo's recompile reasons, and the compile-cache artifacts API.

A base module of :mod:`inductor_knobs.patches.torch_2_4` (``_``-prefixed: no ``PATCHES``, so
:func:`inductor_knobs.core.torch_compat.all_patch_modules` skips it).  What :class:`TorchHooks` encodes
(``torch/`` relative):

- ``_inductor/runtime/triton_heuristics.py`` and ``_inductor/cudagraph_trees.py``: the methods torch
  calls only when it pays a first-call cost, the same names in 2.4–2.15, except that from 2.9
  ``CachingAutotuner.coordinate_descent_tuning`` is an eligibility check around
  ``_coordinate_descent_tuning``.
- ``select_algorithm.add_feedback_saver``: absent in 2.4; 2.5 ``select_algorithm.py:1727`` calls savers
  with ``(timings, name, input_nodes, choices)``; 2.8 and 2.11 add arguments (:mod:`.torch_2_8`).
- ``_dynamo/convert_frame.py`` imports the recompile-reason function as
  ``get_and_maybe_log_recompilation_reason`` (``guards.py:2570`` in 2.4; ``..._reasons`` from 2.7) and,
  in 2.4–2.5, asks it only after the compile-start callbacks ran (2.5.1 ``:824``, then ``:828-831``).
- ``torch.compiler.save_cache_artifacts``/``load_cache_artifacts`` exist from 2.7 (``compiler/__init__.py:438``).
- What autotuning times on the GPU, a candidate or a GEMM shape's candidates per call
  (:attr:`TorchHooks.autotune_benchmark_hooks`), which an ablation's workers take turns at per GPU
  (:mod:`inductor_knobs.ablation.autotune_lock`).
- The Triton kernels a serving bundle carries (:mod:`inductor_knobs.serving.triton_kernels`): where torch keeps
  the modules of compiled graphs and which directory its Triton cache is, the same names in the 2.8.0, 2.9.1,
  2.10.0, 2.11.0, 2.12.0, 2.13.0 and 2.14.1 sources.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from packaging.version import Version

from .release_tables import by_release


class TorchHooks:
    """The torch functions and names the observers hook or call (see the module docstring)."""

    #: Arity of ``select_algorithm.add_feedback_saver`` callbacks (0: the function does not exist).
    feedback_saver_arity_by_release: ClassVar[dict[str, int]]
    #: The name ``_dynamo/convert_frame.py`` imports the recompile-reason function under
    #: (``guards.py:2570`` in 2.4; renamed to ``..._reasons`` in 2.7).
    recompile_reasons_name: ClassVar[str]
    #: ``_dynamo/convert_frame.py:_compile`` runs the compile-start callbacks before it asks for the
    #: recompile reasons (2.5.1 ``:824`` ``run_start_callbacks()``, then ``:828-831``), so the reasons
    #: function answers after the compile's start event was made; the observer then reads the reasons
    #: itself when ``_compile`` is called (:meth:`recompile_reasons_of`).  2.6 asks first (``:891``, the
    #: callbacks are installed in ``compile_inner``, ``:713``/``:986``).
    reasons_after_start_callbacks: ClassVar[bool]
    #: ``torch.compiler.save_cache_artifacts``/``load_cache_artifacts`` exist (2.7+).
    has_cache_artifacts: ClassVar[bool]
    #: ``torch._inductor.aoti_compile_and_package``/``aoti_load_package`` exist with the keywords
    #: ``serving/aot_package.py`` passes (2.7+; ``package_path``/``inductor_configs`` keyword-only).
    has_aot_packages: ClassVar[bool]

    # -- the Triton kernels a serving bundle carries (``serving/triton_kernels.py``) --
    #: The Python modules of compiled graphs this process loaded: a class-level list that
    #: ``PyCodeCache.load_by_key_path`` appends to in the top-level process (2.13 ``_inductor/codecache.py:4576``,
    #: 2.8 ``:3263``); after ``async_compile.wait(globals())`` their globals hold the ``CachingAutotuner`` s.
    loaded_code_modules: ClassVar[str] = "torch._inductor.codecache:PyCodeCache.modules"
    #: The autotuner class whose ``launchers`` carry ``cache_hash`` (``triton_hash_to_path_key(binary.hash)``,
    #: Triton's cache key directory; 2.13 ``_inductor/runtime/triton_heuristics.py:2651``/``:2851``) and whose
    #: ``triton_meta["device"]`` is the device index (``:454``).
    autotuner_class: ClassVar[str] = "torch._inductor.runtime.triton_heuristics:CachingAutotuner"
    #: torch's Triton cache directory of a device index: ``TRITON_CACHE_DIR``, else
    #: ``<Inductor cache>/triton/<index>``, which ``CachingAutotuner.__init__`` exports as ``TRITON_CACHE_DIR``
    #: when unset (2.13 ``_inductor/runtime/cache_dir_utils.py:37``, ``triton_heuristics.py:492``); the
    #: directory ``TritonBundler`` reads and writes (``_inductor/triton_bundler.py``).
    triton_cache_dir: ClassVar[str] = "torch._inductor.runtime.runtime_utils:triton_cache_dir"

    # -- one autotune benchmark at a time per GPU (``ablation/autotune_lock.py``) --
    #: The functions that time one candidate on the GPU, each call one turn: before 2.8 ``CachingAutotuner.bench``
    #: (one Triton config, for a runtime autotune or a coordinate-descent step).  From 2.8 (:mod:`.torch_2_8`)
    #: none: every GPU timing goes through the benchmarkers' ``benchmark_gpu`` (``autotune_timing_hooks``).
    autotune_benchmark_hooks: ClassVar[tuple[str, ...]] = ("torch._inductor.runtime.triton_heuristics:CachingAutotuner.bench",)
    #: Timers whose first argument is the callable they time (``benchmark_gpu(self, _callable, ...)``, 2.8+):
    #: the lock runs that callable once before the turn, so what its first call does lazily (a GEMM template's
    #: Triton compile, its module load) happens outside the turn.  None before 2.8.
    autotune_timing_hooks: ClassVar[tuple[str, ...]] = ()
    #: Makers of the CUDA event pairs a timing is taken between (``InductorBenchmarker.get_event_pairs``, 2.8+):
    #: their start events queue a GPU spin first (``ablation/queued_timing.py``).  None before 2.8.
    autotune_event_hooks: ClassVar[tuple[str, ...]] = ()

    # -- first-call costs at serving time (``ik.serving.no_stalls``, ``ik.serving.warmup``) --
    #: ``(cause kind, "module:Class.method")`` that the observer hooks time: the methods torch calls only
    #: when it pays that cost.  The same names in every release 2.4-2.15
    #: (``_inductor/runtime/triton_heuristics.py``, ``_inductor/cudagraph_trees.py``), except the
    #: descent: see :meth:`runtime_hooks`.
    runtime_cost_hooks: ClassVar[tuple[tuple[str, str], ...]] = (
        ("runtime_benchmark", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.benchmark_all_configs"),
        ("coordinate_descent", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.coordinate_descent_tuning"),
        ("triton_compile", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.precompile"),
        ("cudagraph_recording", "torch._inductor.cudagraph_trees:CUDAGraphTreeManager.record_function"),
    )
    #: The first release whose ``CachingAutotuner.coordinate_descent_tuning`` is only an eligibility
    #: check around ``_coordinate_descent_tuning``, the descent itself (2.9.1, 2.10.0, 2.11.0, 2.13.0
    #: wheels; 2.8.0 has no ``_coordinate_descent_tuning``).  ``CachingAutotuner.run`` calls the check
    #: on every launch of a template kernel, which never gets ``found_by_coordesc``: a hook there
    #: cost 81 us per call of a 2-layer Llama (H100, torch 2.11), so from 2.9 the hook is on the inner one.
    coordinate_descent_inner_since: ClassVar[str] = "2.9"

    def runtime_hooks(self, release: str) -> tuple[tuple[str, str], ...]:
        """:attr:`runtime_cost_hooks` for ``release`` (``"2.11"``): the descent's own method from 2.9."""
        if Version(release) < Version(self.coordinate_descent_inner_since):
            return self.runtime_cost_hooks
        public = ":CachingAutotuner.coordinate_descent_tuning"
        return tuple(
            (kind, path.replace(public, ":CachingAutotuner._coordinate_descent_tuning")) for kind, path in self.runtime_cost_hooks
        )

    #: Profiler op names (``torch.profiler`` CPU events) -> the per-shape first-call cost they stand for.
    #: cuDNN attention appears as the op the compiled graph calls (``_scaled_dot_product_cudnn_attention``)
    #: and, from 2.9, as the inner ``_cudnn_attention_forward`` that builds the plan (seen on 2.11, H100).
    per_shape_ops: ClassVar[dict[str, str]] = {
        "aten::_scaled_dot_product_cudnn_attention": "cudnn_sdpa_plan",
        "aten::_scaled_dot_product_cudnn_attention_backward": "cudnn_sdpa_plan",
        "aten::_cudnn_attention_forward": "cudnn_sdpa_plan",
        "aten::_cudnn_attention_backward": "cudnn_sdpa_plan",
        "aten::mm": "cublas_first_call",
        "aten::addmm": "cublas_first_call",
        "aten::bmm": "cublas_first_call",
        "aten::baddbmm": "cublas_first_call",
        "aten::_scaled_mm": "cublas_first_call",
        "aten::_addmm_activation": "cublas_first_call",
        "aten::cudnn_convolution": "cudnn_conv",
        "aten::_convolution": "cudnn_conv",
    }

    def feedback_saver_arity(self, release: str) -> int:
        """Positional arguments torch passes to feedback savers in ``release`` (0: no savers)."""
        return int(by_release(self.feedback_saver_arity_by_release, release))

    def recompile_reasons_of(
        self, compile_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[str], Any] | None:
        """For a call of ``convert_frame._compile`` (``compile_fn``): (Dynamo's guard-failure reasons, the frame)
        when it recompiles, else None (see :attr:`reasons_after_start_callbacks`).

        The reasons ``get_and_maybe_log_recompilation_reason`` returns (2.5.1 ``_dynamo/guards.py:2777-2787``),
        from ``get_guard_fail_reason_helper`` (``:2675``), which neither logs nor records the failure.  On 2.4,
        which has no such helper, one text saying so (the frame still names the code and its inputs).
        """
        from torch._dynamo.cache_size import is_recompilation

        bound = inspect.signature(compile_fn).bind(*args, **kwargs).arguments
        frame, cache_size, entry = bound.get("frame"), bound.get("cache_size"), bound.get("cache_entry")
        if frame is None or cache_size is None or not is_recompilation(cache_size):
            return None
        try:
            from torch._dynamo.guards import get_guard_fail_reason_helper
        except ImportError:
            # 2.4 has only get_guard_fail_reason (2.4 guards.py:2486), which appends to guard_failures and calls
            # the user's guard_fail_fn: asking it here would record every failure twice.  The frame still names
            # the code and its inputs.
            import torch

            return [f"a recompile (torch {torch.__version__} gives no side-effect-free guard-failure reason)"], frame
        reasons: list[str] = []
        while entry is not None:
            # The 2.4-2.5 signature (only called there; 2.6+ added arguments, which the type stubs checked here have).
            reason = get_guard_fail_reason_helper(entry.check_fn, frame.f_locals, entry.compile_id)  # type: ignore[call-arg]
            if reason:
                reasons.append(reason)
            entry = entry.next
        return reasons, frame
