"""torch 2.4–2.5: the base adapter, and what is true of Inductor in these releases.

Facts (torch 2.4.0 / 2.5.0 wheels, ``torch/`` relative):
- ``_inductor/utils.py:972`` (2.4) / ``:1043`` (2.5): ``@functools.lru_cache(None) def is_big_gpu(index)``,
  CUDA only, ``min_sms = 68``, SM count from ``torch.cuda.get_device_properties(index)``.
- ``utils/_config_module.py``: config values live in a plain dict ``module._config`` (no
  override/default split), process-global.
- ``torch.compiler.config.cache_key_tag`` does not exist, so the FX graph cache is switched
  off (``fx_graph_cache=False``) while a gate override is active.
- GEMM backends listed in ``_inductor/config.py`` (2.4: ATen, Triton, CUTLASS, CPP; 2.5: + CK);
  CUTLASS is found through ``cuda.cutlass_dir``.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from packaging.specifiers import SpecifierSet
from packaging.version import Version

if TYPE_CHECKING:
    import torch


@functools.cache
def _type_names(kind: type) -> frozenset[str]:
    """Every attribute name ``kind`` and its bases define (see :meth:`TorchPatches.read_config`)."""
    return frozenset(name for klass in kind.__mro__ for name in vars(klass))


class TorchPatches:
    """What the knobs need to know about one range of torch releases.

    Subclasses override class attributes (facts) and the few methods whose behaviour
    differs.  Instances hold no state; every method takes what it works on.
    """

    name: ClassVar[str] = "torch_2_4"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.4,<2.6")

    #: ``is_big_gpu``'s parameters as ``(name, default)`` pairs (``inspect.Parameter.empty``: none).
    gate_parameters: ClassVar[tuple[tuple[str, object], ...]] = (("index", inspect.Parameter.empty),)
    #: Fingerprints (see :mod:`inductor_knobs._drift`) of ``is_big_gpu`` seen in this range's releases.
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"0c2a1ad415c3f2a6"})  # 2.4.0-2.5.1
    #: torch's own SM threshold for CUDA devices.
    torch_min_sms: ClassVar[int] = 68
    #: Inductor config overrides are per thread (ContextVar) from 2.12; process-global before.
    config_is_thread_local: ClassVar[bool] = False
    #: GEMM backend names per minor release, from the comment above ``max_autotune_gemm_backends``.
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.4": frozenset({"ATEN", "TRITON", "CUTLASS", "CPP"}),
        "2.5": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"}),
    }
    #: The Inductor config key codegen reads the CUTLASS checkout from, per minor release.
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.4": "cuda.cutlass_dir", "2.5": "cuda.cutlass_dir"}
    #: Arity of ``select_algorithm.add_feedback_saver`` callbacks (0: the function does not exist).
    #: 2.5 ``select_algorithm.py:1727`` adds it with ``(timings, name, input_nodes, choices)``.
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.4": 0, "2.5": 4}
    #: The name ``_dynamo/convert_frame.py`` imports the recompile-reason function under
    #: (``guards.py:2570`` in 2.4; renamed to ``..._reasons`` in 2.7).
    recompile_reasons_name: ClassVar[str] = "get_and_maybe_log_recompilation_reason"
    #: ``_dynamo/convert_frame.py:_compile`` runs the compile-start callbacks before it asks for the
    #: recompile reasons (2.5.1 ``:824`` ``run_start_callbacks()``, then ``:828-831``), so the reasons
    #: function answers after the compile's start event was made; the observer then reads the reasons
    #: itself when ``_compile`` is called (:meth:`recompile_reasons_of`).  2.6 asks first (``:891``, the
    #: callbacks are installed in ``compile_inner``, ``:713``/``:986``).
    reasons_after_start_callbacks: ClassVar[bool] = True
    #: ``torch.compiler.save_cache_artifacts``/``load_cache_artifacts`` exist (2.7+).
    has_cache_artifacts: ClassVar[bool] = False

    # -- first-call costs at serving time (``ik.no_stalls``, ``ik.warmup``) --
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

    def recompile_reasons_of(
        self, compile_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[list[str], Any] | None:
        """For a call of ``convert_frame._compile`` (``compile_fn``): (Dynamo's guard-failure reasons, the frame)
        when it recompiles, else None (see :attr:`reasons_after_start_callbacks`).

        The reasons ``get_and_maybe_log_recompilation_reason`` returns (2.5.1 ``_dynamo/guards.py:2777-2787``),
        from ``get_guard_fail_reason_helper`` (``:2675``), which neither logs nor records the failure.
        """
        from torch._dynamo.cache_size import is_recompilation
        from torch._dynamo.guards import get_guard_fail_reason_helper

        bound = inspect.signature(compile_fn).bind(*args, **kwargs).arguments
        frame, cache_size, entry = bound.get("frame"), bound.get("cache_size"), bound.get("cache_entry")
        if frame is None or cache_size is None or not is_recompilation(cache_size):
            return None
        reasons: list[str] = []
        while entry is not None:
            # The 2.4-2.5 signature (only called there; 2.6+ added arguments, which the type stubs checked here have).
            reason = get_guard_fail_reason_helper(entry.check_fn, frame.f_locals, entry.compile_id)  # type: ignore[call-arg]
            if reason:
                reasons.append(reason)
            entry = entry.next
        return reasons, frame

    # -- where Inductor reads the SM count (small-GPU emulation wraps and clears these) --
    #: ``module:attribute`` getters of CUDA device properties.  ``torch.cuda.get_device_properties``
    #: serves ``is_big_gpu`` (2.4–2.5), ``get_max_num_sms`` (→ ``NUM_SMS`` of persistent/TMA
    #: templates), flex decoding and the shared-memory pruning of GEMM configs;
    #: ``CudaInterface.get_device_properties`` is a staticmethod bound to it at import
    #: (``_dynamo/device_interface.py:194`` in 2.4, ``:341`` in 2.15), read by
    #: ``DeviceProperties.create`` (the 2.6+ gate, ``triton_heuristics``, split reductions in
    #: ``choices.py``/``ir.py``/``simd.py``) and, on 2.15, ``get_multi_processor_count``.
    device_property_getters: ClassVar[tuple[str, ...]] = (
        "torch.cuda:get_device_properties",
        "torch._dynamo.device_interface:CudaInterface.get_device_properties",
    )
    #: ``functools`` caches that hold an SM count read earlier (``_inductor/utils.py:972`` in 2.4).
    sm_count_caches: ClassVar[tuple[str, ...]] = ("torch._inductor.utils:is_big_gpu",)
    #: The first release whose ``torch.cuda.GreenContext`` has ``Stream()`` (``torch/cuda/green_contexts.py:45``
    #: in 2.11; 2.10 has ``create`` only).  Emulation needs it and feature-checks it at run time.
    green_stream_since: ClassVar[str] = "2.11"
    #: How this range makes the green context small-GPU emulation runs on: None (torch 2.4-2.10 have
    #: no ``GreenContext`` with ``Stream()``), ``"create"`` (2.11-2.13: ``GreenContext.create(num_sms=,
    #: device_id=)``, C++-backed), ``"constructor"`` (2.14: ``GreenContext(num_sms=, device_id=)``, Python
    #: over ``cuda.bindings``; ``create`` is "kept for compatibility"), ``"constructor+sm_count"`` (2.15:
    #: the same constructor, and ``.sm_count`` says how many SMs the driver granted).
    green_context_api: ClassVar[str | None] = None
    #: The dict in which compile workers cache every device's properties.
    device_properties_dict_cache: ClassVar[str] = "torch._dynamo.device_interface:caching_worker_device_properties"

    # -- which GEMM backends the SM gate governs (``inductor-knobs doctor``) --
    #: Backends whose template check calls ``is_big_gpu`` (through ``_use_template_for_cuda`` in
    #: 2.4-2.6, ``_use_template_for_gpu`` from 2.7), per minor release: ``use_triton_template`` and
    #: ``use_cutlass_template`` in every release (``_inductor/utils.py``).  ATEN, CPP, CK and CKTILE
    #: (``use_ck_template``: its own ROCm arch rule) never ask the gate.
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.4": frozenset({"TRITON", "CUTLASS"}),
        "2.5": frozenset({"TRITON", "CUTLASS"}),
    }
    #: Whether ``use_triton_template``/``use_cutlass_template`` call the gate last (2.15), so its
    #: "Not enough SMs" warning and cached verdict appear only under max-autotune with TRITON or
    #: CUTLASS selected.  Before 2.15 the gate is asked first, at every GEMM lowering.
    gate_checked_last: ClassVar[bool] = False
    #: Modules ``use_nv_universal_gemm_template`` needs for the NVGEMM backend (``ensure_cute_available``
    #: and ``ensure_nv_universal_gemm_available``), per minor release; empty: no NVGEMM backend.
    #: NVGEMM never calls ``is_big_gpu``.
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.4": (), "2.5": ()}
    #: PyPI distributions that provide the modules above (where torch's source names one).
    module_distributions: ClassVar[dict[str, str]] = {
        "cutlass": "nvidia-cutlass-dsl",
        "cutlass.operators": "nvidia-cutlass-operators",  # torch 2.15 kernel/vendored_templates/cutedsl/dense_gemm_efc.py:40
    }
    #: ``torch._inductor.config.patch(...)`` restores a key it found unset to "unset" on exit (2.15:
    #: ``_ImplicationConfigPatch``); before 2.15 its exit writes back the value it read, which pins
    #: it as a user override.
    config_patch_restores_unset: ClassVar[bool] = False

    # -- the SM gate ------------------------------------------------------------------

    def gate_device(self, index: Any) -> torch.device:
        """Turn ``is_big_gpu``'s argument (an int in 2.4–2.5) into a ``torch.device``."""
        import torch

        if isinstance(index, torch.device):
            return index
        return torch.device("cuda", index)

    def sm_count(self, device: torch.device) -> int:
        """Read the SM count of ``device`` the way this torch's ``is_big_gpu`` reads it."""
        import torch

        return int(torch.cuda.get_device_properties(device.index or 0).multi_processor_count)

    def uses_vendor_rule(self, device: torch.device) -> bool:
        """Whether torch gates ``device`` by a rule other than the CUDA SM count (ROCm, XPU)."""
        import torch

        return bool(torch.version.hip) or device.type == "xpu"

    def gate_prerequisites(self) -> list[str]:
        """Dotted names the gate wrapper reads; each must exist for the wrapper to work."""
        return ["torch.cuda.get_device_properties"]

    # -- config storage -----------------------------------------------------------------

    def read_config(self, cfg: ModuleType, key: str) -> object:
        """``getattr(cfg, key)``: the value Inductor reads (overrides, forcing env vars, aliases and all).

        A config key is not an attribute of the module object: ``ConfigModule.__getattr__``
        (``utils/_config_module.py``) answers it, which Python calls only after the generic lookup
        failed and built its ``AttributeError``.  So that method is called directly (half the cost,
        read at every enter), unless the generic lookup could find something (a name in the module's
        ``__dict__`` or on its type, or a module-level ``__getattr__``) or the type has no
        ``__getattr__``: then plain ``getattr`` runs.  The type's names are cached per type.
        """
        found = cfg.__dict__
        kind: type = type(cfg)
        names = _type_names(kind)
        if key in found or key in names or "__getattr__" in found or "__getattr__" not in names:
            return getattr(cfg, key)
        return kind.__getattr__(cfg, key)  # type: ignore[attr-defined,no-any-return]

    def read_override(self, cfg: ModuleType, key: str) -> object:
        """Return the stored state of ``cfg.key`` that :meth:`write_override` can put back exactly."""
        return cfg._config[key]  # type: ignore[attr-defined]

    def write_override(self, cfg: ModuleType, key: str, raw: object) -> None:
        """Put back state from :meth:`read_override` (one key; see :meth:`write_overrides`)."""
        self.write_overrides(cfg, {key: raw})

    def write_overrides(self, cfg: ModuleType, raw: Mapping[str, object]) -> Callable[[], None]:
        """Write states from :meth:`read_override` (or values) now; return torch's revert of this write."""
        return self.overrides_writer(cfg, raw)()

    def overrides_writer(self, cfg: ModuleType, raw: Mapping[str, object]) -> Callable[[], Callable[[], None]]:
        """A function that writes ``raw`` with one call of torch's own raw patcher and returns its exact undo.

        ``_make_closure_patcher`` exists in every release 2.4–2.15 and writes the raw stored value
        (including "unset"), unlike ``config.patch`` whose exit writes the value it read and so
        pins it as a user override.  The patcher writes the same values every time it is called, so
        a cached plan makes its writers once and a block's write is one call.

        Returns:
            ``write()``, which writes and returns ``undo()``; ``undo()`` puts back exactly the
            stored states that write replaced (cheaper than a second write).
        """
        patcher: Callable[[], Callable[[], None]] = cfg._make_closure_patcher(**raw)  # type: ignore[attr-defined]
        if "_is_dirty" not in cfg._bypass_keys:  # type: ignore[attr-defined]
            return patcher  # 2.13+: the patcher marks get_hash()'s cache dirty itself (_hash_dirty_var)

        # 2.4-2.12: torch's raw patcher leaves get_hash()'s cache flag alone, so both ways set it, in the
        # module's own namespace, where ConfigModule.__setattr__ puts its bypass keys (without running
        # that Python method, or a foreign one, at every enter and exit).
        namespace = cfg.__dict__

        def write() -> Callable[[], None]:
            undo = patcher()
            namespace["_is_dirty"] = True

            def revert() -> None:
                undo()
                namespace["_is_dirty"] = True

            return revert

        return write

    def read_value(self, cfg: ModuleType, key: str) -> object:
        """``getattr(cfg, key)`` without side effects.

        From 2.6 reading a key whose default is mutable (a dict, a list) through ``getattr``
        makes torch store a deep copy as the user override; that copy is removed again here,
        so a read never turns "unset" into a pinned value.
        """
        before = self.read_override(cfg, key)
        value = self.read_config(cfg, key)
        if self.read_override(cfg, key) is not before:
            self.write_override(cfg, key, before)
        return value

    def declared_types(self, cfg: ModuleType, key: str) -> tuple[Any, ...] | None:
        """The values ``key`` accepts, as a tuple of types and ``Literal`` values, or None (unknown).

        2.4–2.5 declare no types: the default's type (None when the default is None: unchecked).
        """
        default = cfg._config[key]  # type: ignore[attr-defined]
        return None if default is None else _as_types(type(default))  # type: ignore[arg-type,no-any-return]

    def value_allowed(self, value: object, allowed: tuple[Any, ...]) -> bool:
        """Whether ``value`` fits ``allowed`` (bools are not ints; ints are floats)."""
        for option in allowed:
            if isinstance(option, type):
                if option is float and isinstance(value, int) and not isinstance(value, bool):
                    return True
                if option is int and isinstance(value, bool):
                    continue
                if isinstance(value, option):
                    return True
            elif type(value) is type(option) and value == option:  # a Literal value
                return True
        return False

    def describe_types(self, allowed: tuple[Any, ...]) -> str:
        """``a bool``, ``a str or None``, ``an int``, ``'strict' or 'strict_pointwise'`` for an error message."""
        words = []
        for option in allowed:
            if option is type(None):
                words.append("None")
            elif isinstance(option, type):
                words.append(("an " if option.__name__[0] in "aeiou" else "a ") + option.__name__)
            else:
                words.append(repr(option))
        return " or ".join(words)

    def implied_by(self, cfg: ModuleType, key: str) -> str | None:
        """The active config implication that forces ``key`` (``numerics='strict'``), if any (2.15+)."""
        return None

    def process_default_state(self, cfg: ModuleType, key: str) -> object:
        """The state :meth:`set_process_default` changes, for :meth:`restore_process_default`."""
        return self.read_override(cfg, key)

    def set_process_default(self, cfg: ModuleType, key: str, value: object) -> None:
        """Make ``value`` what every thread sees unless it overrides ``key`` itself.

        Config is process-global before 2.12, so a plain set is process-wide.
        """
        self.write_override(cfg, key, value)

    def restore_process_default(self, cfg: ModuleType, key: str, prior: object) -> None:
        """Undo :meth:`set_process_default` exactly."""
        self.write_override(cfg, key, prior)

    def config_keys(self, cfg: ModuleType) -> list[str]:
        """Every dotted key the config module knows."""
        return list(cfg._config)  # type: ignore[attr-defined]

    def forcing_env_var(self, cfg: ModuleType, key: str) -> str | None:
        """The environment variable that forces ``key`` and beats any override, if one is set."""
        return None  # env_name_force arrived in 2.7

    def resolve_alias(self, cfg: ModuleType, key: str) -> tuple[ModuleType, str]:
        """Follow a config alias to the module and key that really store the value."""
        return cfg, key  # aliases arrived in 2.7

    # -- cache hygiene -----------------------------------------------------------------

    def cache_salt(self, tag: str) -> list[tuple[str, str, object]]:
        """Config changes that keep kernels built under a gate override out of other caches.

        Args:
            tag: a short string naming the override (its digest).

        Returns:
            ``(config module, key, value)`` triples to apply while the override is active.
            2.4–2.5 have no ``cache_key_tag``, so the FX graph cache is switched off.
        """
        return [("torch._inductor.config", "fx_graph_cache", False)]

    # -- green contexts (small-GPU emulation) -------------------------------------------------

    def green_context_problem(self) -> str | None:
        """Why emulation cannot make a confining green context on this torch, or None when it can.

        Reads ``torch.cuda.GreenContext``: it must exist, have ``Stream()`` (2.11+; 2.10 has
        ``create`` and ``set_context`` only, ``torch/cuda/green_contexts.py``) and have the shape
        :attr:`green_context_api` names (:meth:`_green_api_problem`).  Returns a phrase that
        completes "torch X has …".
        """
        import torch

        green = getattr(torch.cuda, "GreenContext", None)
        if green is None:
            return "no GreenContext"
        if not callable(getattr(green, "Stream", None)):
            return "GreenContext without Stream()"
        if self.green_context_api is None:
            return f"a GreenContext whose API patches.{self.name} does not know"
        return self._green_api_problem(green)

    def _green_api_problem(self, green: Any) -> str | None:
        """Whether ``green`` (the ``GreenContext`` class) has this range's API; None when it does."""
        return f"a GreenContext whose API patches.{self.name} does not know"

    def green_context_refusal(self, torch_version: str) -> str | None:
        """The ``NotSupportedOnThisTorch`` message for :meth:`green_context_problem`, or None."""
        problem = self.green_context_problem()
        if problem is None:
            return None
        return (
            f"emulate_gpu needs torch.cuda.GreenContext with Stream() (torch >= {self.green_stream_since}); torch "
            f"{torch_version} has {problem}. GreenContext.set_context() alone does not confine Inductor's compiled "
            "kernels, so no emulator is offered here"
        )

    def make_green_stream(self, device_index: int, sms: int) -> tuple[Any, Any, int | None]:
        """Create a green context of ``sms`` SMs on ``device_index`` and one stream of it.

        Returns:
            ``(context, stream, granted SMs or None)``.  The caller must keep ``context`` alive as
            long as ``stream`` may be used: from 2.14 ``GreenContext.__del__`` destroys the context
            and its streams, and the stream (a ``torch.cuda.ExternalStream``) holds no reference to it.

        Raises:
            NotSupportedOnThisTorch: this torch has no green-context API this range knows.
            Exception: whatever torch or the driver raises when it refuses the context.
        """
        import torch

        refusal = self.green_context_refusal(torch.__version__)
        if refusal is not None:
            from inductor_knobs.errors import NotSupportedOnThisTorch

            raise NotSupportedOnThisTorch(refusal)
        context = self._new_green_context(torch.cuda.GreenContext, device_index, sms)
        stream = context.Stream()
        return context, stream, self.granted_sms(context, device_index, sms)

    def _new_green_context(self, green: Any, device_index: int, sms: int) -> Any:
        """Create the green context; overridden by the ranges that have an API (2.11+)."""
        raise NotImplementedError(f"patches.{self.name} has no green-context API")  # refused above

    def granted_sms(self, context: Any, device_index: int, sms: int) -> int | None:
        """SMs the driver granted ``context`` (it rounds requests up to its SM groups), or None if unknown."""
        return None

    # -- process-global torch settings outside Inductor's config (``sdpa_backends``, ``tunableop``) --
    #: ``torch.nn.attention.SDPBackend`` name -> the word of torch's ``torch._C._get_<word>_sdp_enabled`` /
    #: ``_set_sdp_use_<word>`` pair (``torch/nn/attention/__init__.py`` ``_backend_names``, 2.4-2.15).
    #: A backend whose getter the installed torch lacks (OVERRIDEABLE before it existed) is not offered.
    sdpa_backend_words: ClassVar[dict[str, str]] = {
        "FLASH_ATTENTION": "flash",
        "EFFICIENT_ATTENTION": "mem_efficient",
        "CUDNN_ATTENTION": "cudnn",
        "MATH": "math",
        "OVERRIDEABLE": "overrideable",
    }

    def sdpa_backends_here(self) -> list[str]:
        """The SDPA backend names the installed torch can switch (its ``torch._C`` has their getter)."""
        import torch

        return [name for name, word in self.sdpa_backend_words.items() if hasattr(torch._C, f"_get_{word}_sdp_enabled")]

    def read_sdpa(self) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
        """The SDPA state to restore exactly: (enabled backend names, torch's priority order or None).

        The priority order is ``torch._C._get_sdp_priority_order()`` where torch has it (what
        ``sdpa_kernel(..., set_priority=True)`` changes); enabled names are listed in that order.
        """
        import torch

        enabled = [
            name for name in self.sdpa_backends_here() if getattr(torch._C, f"_get_{self.sdpa_backend_words[name]}_sdp_enabled")()
        ]
        getter = getattr(torch._C, "_get_sdp_priority_order", None)
        if getter is None:
            return tuple(enabled), None
        order = tuple(int(v) for v in getter())
        ids = self._sdpa_ids()
        rank = {name: order.index(ids[name]) if ids[name] in order else len(order) for name in enabled}
        return tuple(sorted(enabled, key=rank.__getitem__)), order

    def _sdpa_ids(self) -> dict[str, int]:
        """``SDPBackend`` name -> the int torch's priority order lists it by."""
        import torch

        members: dict[str, Any] = dict(torch.nn.attention.SDPBackend.__members__)
        return {name: int(member) for name, member in members.items()}

    def sdpa_matches(self, found: object, asked: object) -> bool:
        """Whether the SDPA backends read back (``",".join(read_sdpa()[0])``) are the knob's ``asked``.

        The same names in the same order; on a torch without a priority order (2.4-2.5: no
        ``torch._C._get_sdp_priority_order``, which 2.6 adds, ``torch/_C/__init__.pyi:1203``) only which
        backends are enabled exists, and :meth:`read_sdpa` lists them in its own order, so the same names.
        """
        import torch

        if type(found) is not type(asked):
            return False
        if found == asked:
            return True
        if not isinstance(found, str) or not isinstance(asked, str) or hasattr(torch._C, "_get_sdp_priority_order"):
            return False
        return sorted(found.split(",")) == sorted(asked.split(","))

    def write_sdpa(self, enabled: tuple[str, ...], order: tuple[int, ...] | None) -> None:
        """Enable exactly ``enabled``; set the priority order to ``order``, or (None) to ``enabled`` first, then
        the others as they were, as ``sdpa_kernel(backends, set_priority=True)`` does."""
        import torch

        for name in self.sdpa_backends_here():
            getattr(torch._C, f"_set_sdp_use_{self.sdpa_backend_words[name]}")(name in enabled)
        setter = getattr(torch._C, "_set_sdp_priority_order", None)
        if setter is None:
            return
        if order is None:
            ids = self._sdpa_ids()
            first = [ids[name] for name in enabled]
            order = (*first, *(int(v) for v in torch._C._get_sdp_priority_order() if int(v) not in first))
        setter(list(order))

    def tunableop_problem(self) -> str | None:
        """Why ``torch.cuda.tunable`` cannot be switched here (a build without CUDA/ROCm), or None."""
        import torch

        if not hasattr(torch._C, "_cuda_tunableop_enable"):
            return "this build of torch has no TunableOp (torch._C._cuda_tunableop_enable is missing: a CPU-only build)"
        return None

    def read_tunableop(self) -> bool:
        """``torch.cuda.tunable.is_enabled()`` (``torch/cuda/tunable.py``, 2.3+)."""
        import torch.cuda.tunable

        return bool(torch.cuda.tunable.is_enabled())

    def write_tunableop(self, enabled: bool) -> None:
        """``torch.cuda.tunable.enable(enabled)``: TunableOp tunes each new GEMM shape on first use while enabled."""
        import torch.cuda.tunable

        torch.cuda.tunable.enable(enabled)

    # -- facts by release ----------------------------------------------------------------

    def gemm_backends(self, release: str) -> frozenset[str]:
        """GEMM backend names torch ``release`` (``"2.13"``) accepts; the newest known if unlisted."""
        return _by_release(self.gemm_backends_by_release, release)

    def gate_checked_backends(self, release: str) -> frozenset[str]:
        """GEMM backends whose templates torch ``release`` offers only when ``is_big_gpu`` says yes."""
        return _by_release(self.gate_checked_backends_by_release, release)

    def nvgemm_modules(self, release: str) -> tuple[str, ...]:
        """Modules NVGEMM needs in ``release`` (empty: that release has no NVGEMM backend)."""
        return tuple(_by_release(self.nvgemm_modules_by_release, release))

    def cutlass_dir_key(self, release: str) -> str:
        """The config key Inductor reads the CUTLASS directory from in ``release``."""
        return _by_release(self.cutlass_dir_key_by_release, release)

    def feedback_saver_arity(self, release: str) -> int:
        """Positional arguments torch passes to feedback savers in ``release`` (0: no savers)."""
        return int(_by_release(self.feedback_saver_arity_by_release, release))

    def cutlass_available(self, cfg: ModuleType, release: str, cutlass_dir: str | None = None) -> tuple[bool, str]:
        """Whether Inductor would find CUTLASS, and the directory it looks in.

        Mirrors ``try_import_cutlass``: the CUTLASS checkout's ``python/cutlass_library``
        must exist under ``cutlass_dir`` (default: the configured one).
        """
        cutlass_dir = cutlass_dir or str(getattr(cfg, self.cutlass_dir_key(release)))
        found = os.path.isdir(os.path.join(cutlass_dir, "python", "cutlass_library"))
        return found, cutlass_dir


@functools.lru_cache(maxsize=None)  # noqa: UP033 - declared types are few and fixed per torch
def _as_types(declared: Any) -> tuple[Any, ...] | None:
    """Flatten a declared type (``str | None``, ``Optional[int]``, ``Literal["a", "b"]``) into types
    and literal values; None when it is something that cannot be checked (``Any``, a callable)."""
    import types as _types
    import typing

    origin = typing.get_origin(declared)
    union_type = getattr(_types, "UnionType", None)  # ``X | Y`` (Python 3.10+)
    if origin is typing.Union or (union_type is not None and isinstance(declared, union_type)):
        parts = [_as_types(a) for a in typing.get_args(declared)]
        return None if any(p is None for p in parts) else tuple(x for p in parts for x in p or ())
    if origin is typing.Literal:
        return tuple(typing.get_args(declared))
    if declared is type(None):
        return (type(None),)
    if origin is not None:
        return (origin,) if isinstance(origin, type) else None
    return (declared,) if isinstance(declared, type) and declared is not object else None


def _by_release(table: dict[str, Any], release: str) -> Any:
    """``table[release]``, or the newest release's entry when ``release`` is not listed (lenient mode)."""
    if release in table:
        return table[release]
    return table[max(table, key=lambda r: tuple(int(p) for p in r.split(".")))]


PATCHES = TorchPatches()
