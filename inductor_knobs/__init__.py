"""inductor_knobs: safe, reversible knobs for TorchInductor (torch 2.4–2.15).

>>> import inductor_knobs as ik
>>> with ik.force_gemm_autotune(min_sms=40):          # doctest: +SKIP
...     y = torch.compile(model, mode="max-autotune")(x)

Importing this package imports nothing else: every public name is loaded from its submodule
on first use (PEP 562), and neither torch nor ``torch._inductor`` is imported until knobs are
entered.
"""

import importlib
import os
import sys

# Not ``from typing import ...``: typing costs a bare interpreter start about as much again, and this
# module is imported by the startup hook of every process that sets an INDUCTOR_KNOBS_* variable.
TYPE_CHECKING = False

__version__ = "0.1.0"

#: Public name -> the submodule that defines it.
_PUBLIC = {
    "AutotuneDuringServing": "errors",
    "AutotuneRecord": "core.records",
    "BundleInputRefused": "errors",
    "CompileAttestation": "core.attestation",
    "CompileCacheRefused": "errors",
    "CompileEvent": "core.records",
    "CapturedGraphs": "serving.graphs",
    "ColdStartCompiled": "errors",
    "ColdStartProof": "serving.cold_start",
    "ColdStartWarning": "errors",
    "ConcurrentKnobsError": "errors",
    "EmulateGpuContext": "emulation.context",
    "EmulationConflict": "errors",
    "EmulationUnavailable": "errors",
    "GraphCallRefused": "errors",
    "GraphCaptureFailed": "errors",
    "KnobNotApplied": "errors",
    "KnobNotAppliedWarning": "errors",
    "Knobs": "core.knobs",
    "KnobsBackend": "core.compile_backend",
    "KnobsContext": "core.knob_blocks",
    "KnobsError": "errors",
    "NotBlockOwner": "errors",
    "NotSupportedOnThisTorch": "errors",
    "PRESETS": "core.knobs",
    "PatchTargetChanged": "errors",
    "RuntimeEvent": "core.records",
    "SettingAlreadyRead": "errors",
    "Stall": "serving.stall_report",
    "StallDuringServing": "errors",
    "StallReport": "serving.stall_report",
    "StallWarning": "errors",
    "UnsupportedTorchVersion": "errors",
    "activate_from_env": "env",
    "bucket_for": "serving.buckets",
    "active_env_knobs": "env",
    "capture_cuda_graphs": "serving.graphs",
    "compile": "core.compile_backend",
    "deactivate_env": "env",
    "emulate_gpu": "emulation.context",
    "force_gemm_autotune": "core.knob_blocks",
    "knobs": "core.knob_blocks",
    "knobs_report": "core.compile_backend",
    "load_compile_cache": "serving.compile_cache",
    "load_serving_bundle": "serving.bundle",
    "no_autotune": "serving.autotune_guard",
    "no_stalls": "serving.stalls",
    "pad_to_bucket": "serving.buckets",
    "record_autotune": "core.recorder",
    "record_compiles": "core.recorder",
    "save_compile_cache": "serving.compile_cache",
    "save_serving_bundle": "serving.bundle",
    "ServingBundle": "serving.bundle",
    "suggest_buckets": "serving.buckets",
    "warmup": "serving.warmup",
}

__all__ = sorted(_PUBLIC)


class _CheckoutPatches:
    """Serves ``inductor_knobs.patches`` from the top-level ``patches/`` folder of a source checkout.

    Installs (wheel and editable) map that folder to ``inductor_knobs.patches`` themselves (setuptools'
    ``package-dir``).  A checkout on ``sys.path`` ahead of them (``python -m inductor_knobs`` in the
    repository, which puts the current directory first) has no ``inductor_knobs/patches``, so this
    finder (a ``sys.meta_path`` entry) makes its spec the way the editable finder does, when it is
    first imported: a process that never needs the patch modules never loads them.
    """

    def __init__(self, init: str) -> None:
        self.init = init

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name != f"{__name__}.patches":
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(name, self.init, submodule_search_locations=[os.path.dirname(self.init)])


def _patches_from_checkout() -> None:
    """Install :class:`_CheckoutPatches` when this package is a source checkout's."""
    here = os.path.dirname(__file__)
    init = os.path.join(os.path.dirname(here), "patches", "__init__.py")
    # The test is for the package's __init__.py, not the folder: after a pull that moved the modules to
    # patches/, a leftover inductor_knobs/patches/__pycache__ (git keeps ignored files) would otherwise
    # make an empty namespace package of it (seen on the H200 machine's checkout).
    if os.path.isfile(os.path.join(here, "patches", "__init__.py")) or not os.path.isfile(init):
        return
    if not any(isinstance(finder, _CheckoutPatches) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CheckoutPatches(init))  # type: ignore[arg-type]  # duck-typed finder: no typing import at start-up


_patches_from_checkout()


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        try:  # a submodule, e.g. inductor_knobs.errors
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load lazily
    from .core.attestation import CompileAttestation as CompileAttestation
    from .core.compile_backend import KnobsBackend as KnobsBackend
    from .core.compile_backend import compile as compile
    from .core.compile_backend import knobs_report as knobs_report
    from .core.knob_blocks import KnobsContext as KnobsContext
    from .core.knob_blocks import force_gemm_autotune as force_gemm_autotune
    from .core.knob_blocks import knobs as knobs
    from .core.knobs import PRESETS as PRESETS
    from .core.knobs import Knobs as Knobs
    from .core.recorder import record_autotune as record_autotune
    from .core.recorder import record_compiles as record_compiles
    from .core.records import AutotuneRecord as AutotuneRecord
    from .core.records import CompileEvent as CompileEvent
    from .core.records import RuntimeEvent as RuntimeEvent
    from .emulation.context import EmulateGpuContext as EmulateGpuContext
    from .emulation.context import emulate_gpu as emulate_gpu
    from .env import activate_from_env as activate_from_env
    from .env import active_env_knobs as active_env_knobs
    from .env import deactivate_env as deactivate_env
    from .errors import AutotuneDuringServing as AutotuneDuringServing
    from .errors import BundleInputRefused as BundleInputRefused
    from .errors import ColdStartCompiled as ColdStartCompiled
    from .errors import ColdStartWarning as ColdStartWarning
    from .errors import CompileCacheRefused as CompileCacheRefused
    from .errors import ConcurrentKnobsError as ConcurrentKnobsError
    from .errors import EmulationConflict as EmulationConflict
    from .errors import EmulationUnavailable as EmulationUnavailable
    from .errors import GraphCallRefused as GraphCallRefused
    from .errors import GraphCaptureFailed as GraphCaptureFailed
    from .errors import KnobNotApplied as KnobNotApplied
    from .errors import KnobNotAppliedWarning as KnobNotAppliedWarning
    from .errors import KnobsError as KnobsError
    from .errors import NotBlockOwner as NotBlockOwner
    from .errors import NotSupportedOnThisTorch as NotSupportedOnThisTorch
    from .errors import PatchTargetChanged as PatchTargetChanged
    from .errors import SettingAlreadyRead as SettingAlreadyRead
    from .errors import StallDuringServing as StallDuringServing
    from .errors import StallWarning as StallWarning
    from .errors import UnsupportedTorchVersion as UnsupportedTorchVersion
    from .serving.autotune_guard import no_autotune as no_autotune
    from .serving.buckets import bucket_for as bucket_for
    from .serving.buckets import pad_to_bucket as pad_to_bucket
    from .serving.buckets import suggest_buckets as suggest_buckets
    from .serving.bundle import ServingBundle as ServingBundle
    from .serving.bundle import load_serving_bundle as load_serving_bundle
    from .serving.bundle import save_serving_bundle as save_serving_bundle
    from .serving.cold_start import ColdStartProof as ColdStartProof
    from .serving.compile_cache import load_compile_cache as load_compile_cache
    from .serving.compile_cache import save_compile_cache as save_compile_cache
    from .serving.graphs import CapturedGraphs as CapturedGraphs
    from .serving.graphs import capture_cuda_graphs as capture_cuda_graphs
    from .serving.stall_report import Stall as Stall
    from .serving.stall_report import StallReport as StallReport
    from .serving.stalls import no_stalls as no_stalls
    from .serving.warmup import warmup as warmup
