"""Where the observers hook into torch: first-call costs at serving time, profiler op names, autotune
feedback savers, Dynamo's recompile reasons, and the compile-cache artifacts API.

Facts (``torch/`` relative):
- ``_inductor/runtime/triton_heuristics.py``, ``_inductor/cudagraph_trees.py``: first-call-cost methods, the same names in
  2.4–2.15; from 2.9 ``CachingAutotuner.coordinate_descent_tuning`` only checks eligibility around
  ``_coordinate_descent_tuning`` and runs at every launch (a hook there: 81 us per call, H100, 2.11).
- ``_inductor/select_algorithm.py:add_feedback_saver``: absent in 2.4; 2.5 :1727 ``(timings, name, input_nodes, choices)``.
- ``_dynamo/convert_frame.py`` imports ``get_and_maybe_log_recompilation_reason`` (``guards.py:2570`` in 2.4; ``..._reasons``
  from 2.7), in 2.4–2.5 after the compile-start callbacks (2.5.1 :824, :828-831); 2.6 before (:891).
- ``_inductor/async_compile.py``: with Triton installed and ``TORCH_WARM_POOL`` unset or "1", importing the module starts
  Inductor's compile-worker pool (``AsyncCompile.warm_pool()`` at module level: 2.4.1 :259, 2.5.1 :297, 2.6.0 :329,
  2.7.1 :467, 2.8.0 :534); from 2.9 ``maybe_warm_pool()`` does it at the first call of the Inductor backend
  (``_dynamo/backends/inductor.py:27``; 2.9.1, 2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0).
- ``compiler/__init__.py:save_cache_artifacts``/``load_cache_artifacts`` from 2.7 (:438).  ``_inductor/codecache.py:
  PyCodeCache.modules`` (2.8 :3263, 2.13 :4576), ``CachingAutotuner`` and ``runtime_utils.py:triton_cache_dir``: 2.8.0–2.14.1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from packaging.version import Version

from .release_tables import by_release


class TorchHooks:
    """The torch functions and names the observers hook or call."""

    #: Arity of ``select_algorithm.add_feedback_saver`` callbacks (0: the function does not exist).
    feedback_saver_arity_by_release: ClassVar[dict[str, int]]
    #: Per minor release: whether importing Inductor starts its compile-worker pool (threads in the importing process).
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]]

    def warms_compile_pool_at_import(self, release: str) -> bool:
        """Whether importing ``torch._inductor`` on torch ``release`` (``"2.8"``) starts Inductor's compile-worker pool
        (with Triton installed, unless ``TORCH_WARM_POOL`` is set to something other than "1")."""
        return bool(by_release(self.compile_pool_at_import_by_release, release))

    #: The name ``_dynamo/convert_frame.py`` imports the recompile-reason function under.
    recompile_reasons_name: ClassVar[str]
    #: The reasons are asked after the compile-start callbacks (2.4-2.5): read them via :meth:`recompile_reasons_of`.
    reasons_after_start_callbacks: ClassVar[bool]
    #: ``torch.compiler.save_cache_artifacts``/``load_cache_artifacts`` exist (2.7+).
    has_cache_artifacts: ClassVar[bool]
    #: ``torch._inductor.aoti_compile_and_package``/``aoti_load_package`` take the keywords ``serving/aot_package.py`` passes.
    has_aot_packages: ClassVar[bool]
    #: The modules of compiled graphs this process loaded (a class-level list ``load_by_key_path`` appends to).
    loaded_code_modules: ClassVar[str] = "torch._inductor.codecache:PyCodeCache.modules"
    #: Its ``launchers`` carry ``cache_hash`` (Triton's cache key directory); ``triton_meta["device"]`` is the device index.
    autotuner_class: ClassVar[str] = "torch._inductor.runtime.triton_heuristics:CachingAutotuner"
    #: torch's Triton cache directory of a device index (``TRITON_CACHE_DIR``, else ``<Inductor cache>/triton/<index>``).
    triton_cache_dir: ClassVar[str] = "torch._inductor.runtime.runtime_utils:triton_cache_dir"
    #: Functions timing one candidate on the GPU, one ablation turn per call (before 2.8; then ``autotune_timing_hooks``).
    autotune_benchmark_hooks: ClassVar[tuple[str, ...]] = ("torch._inductor.runtime.triton_heuristics:CachingAutotuner.bench",)
    #: Timers whose first argument is the callable they time, run once before the turn (2.8+).
    autotune_timing_hooks: ClassVar[tuple[str, ...]] = ()
    #: Makers of the CUDA event pairs a timing is taken between; their start events queue a GPU spin first (2.8+).
    autotune_event_hooks: ClassVar[tuple[str, ...]] = ()
    #: ``(cause kind, "module:Class.method")`` that ``ik.serving.no_stalls``/``warmup`` time (see :meth:`runtime_hooks`).
    runtime_cost_hooks: ClassVar[tuple[tuple[str, str], ...]] = (
        ("runtime_benchmark", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.benchmark_all_configs"),
        ("coordinate_descent", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.coordinate_descent_tuning"),
        ("triton_compile", "torch._inductor.runtime.triton_heuristics:CachingAutotuner.precompile"),
        ("cudagraph_recording", "torch._inductor.cudagraph_trees:CUDAGraphTreeManager.record_function"),
    )
    #: The first release whose ``coordinate_descent_tuning`` only wraps ``_coordinate_descent_tuning`` (see the module docstring).
    coordinate_descent_inner_since: ClassVar[str] = "2.9"

    def runtime_hooks(self, release: str) -> tuple[tuple[str, str], ...]:
        """:attr:`runtime_cost_hooks` for ``release`` (``"2.11"``): the descent's own method from 2.9."""
        if Version(release) < Version(self.coordinate_descent_inner_since):
            return self.runtime_cost_hooks
        public = ":CachingAutotuner.coordinate_descent_tuning"
        return tuple(
            (kind, path.replace(public, ":CachingAutotuner._coordinate_descent_tuning")) for kind, path in self.runtime_cost_hooks
        )

    def cudagraph_trees_in_use(self) -> bool:
        """Whether this thread holds an Inductor CUDA graph tree (``_inductor/cudagraph_trees.py``: ``get_manager(...,
        create_if_none_exists=False)`` under TLS ``tree_manager_containers``, 2.4-2.15); True when that cannot be read."""
        import sys

        trees = sys.modules.get("torch._inductor.cudagraph_trees")
        if trees is None:
            return False
        import torch

        try:
            if not torch._C._is_key_in_tls("tree_manager_containers"):
                return False
            return trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False) is not None
        except Exception:  # noqa: BLE001 - unknown: say in use
            return True

    #: Profiler op names -> the per-shape first-call cost they stand for.
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
        """For a call of ``convert_frame._compile``: (Dynamo's guard-failure reasons, the frame) when it recompiles, else None;
        the reasons from ``_dynamo/guards.py:get_guard_fail_reason_helper`` (2.5.1 :2675), which neither logs nor records."""
        from torch._dynamo.cache_size import is_recompilation

        bound = inspect.signature(compile_fn).bind(*args, **kwargs).arguments
        frame, cache_size, entry = bound.get("frame"), bound.get("cache_size"), bound.get("cache_entry")
        if frame is None or cache_size is None or not is_recompilation(cache_size):
            return None
        try:
            from torch._dynamo.guards import get_guard_fail_reason_helper
        except ImportError:
            # 2.4 has only get_guard_fail_reason (guards.py:2486), which records the failure and calls the user's
            # guard_fail_fn: asking it here would record every failure twice.
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
