"""torch 2.4–2.5: the base adapter, and what is true of Inductor in these releases.

The facts (torch 2.4.0 / 2.5.0 wheels) are those the base modules beside this one encode (:mod:`.gate`,
:mod:`.config_storage`, :mod:`.gemm_backends`, ...); the tables below set them per release.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from packaging.specifiers import SpecifierSet

from .aot_headers import AotHeaders
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
    SmGate,
    ConfigStorage,
    GemmBackends,
    SmallGpuEmulation,
    ProcessSettings,
    TorchHooks,
    KnobFeatures,
    TorchFixes,
    NativeFloors,
    AotHeaders,
):
    """What the knobs need to know about one range of torch releases (2.4–2.5 here; subclasses override facts); stateless."""

    name: ClassVar[str] = "torch_2_4"
    torch_range: ClassVar[SpecifierSet] = SpecifierSet(">=2.4,<2.6")

    gate_parameters: ClassVar[tuple[tuple[str, object], ...]] = (("index", inspect.Parameter.empty),)
    gate_fingerprints: ClassVar[frozenset[str]] = frozenset({"0c2a1ad415c3f2a6"})  # 2.4.0-2.5.1
    torch_min_sms: ClassVar[int] = 68
    config_is_thread_local: ClassVar[bool] = False
    config_patch_restores_unset: ClassVar[bool] = False
    gemm_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        "2.4": frozenset({"ATEN", "TRITON", "CUTLASS", "CPP"}),
        "2.5": frozenset({"ATEN", "TRITON", "CUTLASS", "CK", "CPP"}),
    }
    cutlass_dir_key_by_release: ClassVar[dict[str, str]] = {"2.4": "cuda.cutlass_dir", "2.5": "cuda.cutlass_dir"}
    gate_checked_backends_by_release: ClassVar[dict[str, frozenset[str]]] = {
        r: frozenset({"TRITON", "CUTLASS"}) for r in ("2.4", "2.5")
    }
    gate_checked_last: ClassVar[bool] = False
    nvgemm_modules_by_release: ClassVar[dict[str, tuple[str, ...]]] = {"2.4": (), "2.5": ()}
    sm_count_caches: ClassVar[tuple[str, ...]] = ("torch._inductor.utils:is_big_gpu",)  # _inductor/utils.py:972
    green_context_api: ClassVar[str | None] = None  # no GreenContext with Stream() before 2.11
    feedback_saver_arity_by_release: ClassVar[dict[str, int]] = {"2.4": 0, "2.5": 4}  # 2.5 select_algorithm.py:1727
    recompile_reasons_name: ClassVar[str] = "get_and_maybe_log_recompilation_reason"  # guards.py:2570
    reasons_after_start_callbacks: ClassVar[bool] = True  # 2.5.1 convert_frame.py:824, then :828-831
    has_cache_artifacts: ClassVar[bool] = False
    has_aot_packages: ClassVar[bool] = False  # from 2.7 (torch_2_7.py)
    #: The ``torch._dynamo.config`` key of the per-frame recompile limit (pytorch#143709 renames it in 2.7).
    recompile_limit_key: ClassVar[str] = "cache_size_limit"
    coordesc_recheck_fix_by_release: ClassVar[dict[str, bool]] = {"2.4": False, "2.5": False}
    vec_isa_probe_fix_by_release: ClassVar[dict[str, bool]] = {"2.4": False, "2.5": True}  # pytorch#140970: see fixes
    coordesc_pickle_fix_by_release: ClassVar[dict[str, bool]] = {"2.4": False, "2.5": False}  # not checked
    compile_pool_at_import_by_release: ClassVar[dict[str, bool]] = {"2.4": True, "2.5": True}  # see hooks.py
    aot_headers_by_release: ClassVar[dict[str, bool]] = {"2.4": False, "2.5": False}  # no AOT packages

    def aot_loader_args(self, path: str) -> tuple[Any, ...]:
        """``torch._C._aoti.AOTIModelPackageLoader``'s arguments for ``path``, as torch's ``load_package`` passes them (2.7+)."""
        raise NotImplementedError(f"torch {self.torch_range} has no AOTInductor packages")


PATCHES = TorchPatches()
