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

The operations live in one base module per concern beside this one (``_``-prefixed, no ``PATCHES``):
:mod:`._gate` (the SM gate), :mod:`._config_storage` (config overrides, defaults, types, cache salt),
:mod:`._gemm_backends` (backends, CUTLASS, NVGEMM), :mod:`._emulation` (SM-count read sites, green
contexts), :mod:`._process_settings` (SDPA, TunableOp), :mod:`._hooks` (runtime hooks, feedback
savers, recompile reasons), :mod:`._fixes` (torch bugs fixed in a later release) and :mod:`._features`
(knobs only some releases have: CUDA graph capture sizes, the GEMM lookup table, cuDNN attention's
avoid-recompile) and :mod:`.native_floors` (the recompile stance, deterministic mode's bans, ignored config
keys, the profiler's stderr markers).  This module sets the 2.4–2.5 facts they read.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .config_storage import ConfigStorage
from .emulation import SmallGpuEmulation
from .features import KnobFeatures
from .fixes import TorchFixes
from .gate import SmGate
from .gemm_backends import GemmBackends
from .hooks import TorchHooks
from .native_floors import NativeFloors
from .process_settings import ProcessSettings


class TorchPatches(
    SmGate, ConfigStorage, GemmBackends, SmallGpuEmulation, ProcessSettings, TorchHooks, KnobFeatures, TorchFixes, NativeFloors
):
    """What the knobs need to know about one range of torch releases.

    Each concern's operations come from its base class (see the module docstring); this class sets
    the facts of torch 2.4–2.5.  Subclasses override class attributes (facts) and the few methods
    whose behaviour differs.  Instances hold no state; every method takes what it works on.
    """

    name: ClassVar[str] = "torch_2_4"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.4,<2.6")

    # -- the SM gate (:class:`._gate.SmGate`) --
    gate_parameters: ClassVar[tuple[tuple[str, object], ...]] = (("index", inspect.Parameter.empty),)
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"0c2a1ad415c3f2a6"})  # 2.4.0-2.5.1
    torch_min_sms: ClassVar[int] = 68

    # -- config storage (:class:`._config_storage.ConfigStorage`) --
    config_is_thread_local: ClassVar[bool] = False
    config_patch_restores_unset: ClassVar[bool] = False

    # -- GEMM backends (:class:`._gemm_backends.GemmBackends`) --
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.4": frozenset({"ATEN", "TRITON", "CUTLASS", "CPP"}),
        "2.5": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"}),
    }
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.4": "cuda.cutlass_dir", "2.5": "cuda.cutlass_dir"}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.4": frozenset({"TRITON", "CUTLASS"}),
        "2.5": frozenset({"TRITON", "CUTLASS"}),
    }
    gate_checked_last: ClassVar[bool] = False
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.4": (), "2.5": ()}

    # -- small-GPU emulation (:class:`._emulation.SmallGpuEmulation`) --
    sm_count_caches: ClassVar[tuple[str, ...]] = ("torch._inductor.utils:is_big_gpu",)  # _inductor/utils.py:972
    green_context_api: ClassVar[str | None] = None  # no GreenContext with Stream() before 2.11

    # -- hooks (:class:`._hooks.TorchHooks`) --
    #: 2.5 ``select_algorithm.py:1727`` adds ``add_feedback_saver`` with ``(timings, name, input_nodes, choices)``.
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.4": 0, "2.5": 4}
    recompile_reasons_name: ClassVar[str] = "get_and_maybe_log_recompilation_reason"  # guards.py:2570
    reasons_after_start_callbacks: ClassVar[bool] = True  # 2.5.1 convert_frame.py:824, then :828-831
    has_cache_artifacts: ClassVar[bool] = False
    has_aot_packages: ClassVar[bool] = False  # from 2.7 (torch_2_7.py)

    # -- Dynamo's per-frame recompile limit, which ``ik.serving.warmup(per_bucket=...)`` raises to hold a graph per bucket --
    #: The ``torch._dynamo.config`` key that stores it: ``cache_size_limit`` (default 8) before 2.7;
    #: pytorch#143709 (merged 2024-12-22, first in 2.7) renamed it ``recompile_limit`` and kept
    #: ``cache_size_limit`` as a ``Config(alias=...)`` of it (torch_2_7.py).
    recompile_limit_key: ClassVar[str] = "cache_size_limit"

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        """The positional arguments of ``torch._C._aoti.AOTIModelPackageLoader`` for the package at ``path``: its
        model ``"model"``, run single-threaded, as torch's own ``load_package`` passes them (2.7+ only)."""
        raise NotImplementedError(f"torch {self.torch_range} has no AOTInductor packages")

    # -- release-dependent knobs (:class:`._features.KnobFeatures`): none before 2.8 --

    # -- fixes of torch bugs (:class:`._fixes.TorchFixes`): no recheck_autotune_cache before 2.8 --
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.4": False, "2.5": False}


PATCHES = TorchPatches()
