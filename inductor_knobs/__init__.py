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
import types

# Not ``from typing import ...``: typing costs a bare interpreter start about as much again, and this
# module is imported by the startup hook of every process that sets an INDUCTOR_KNOBS_* variable.
TYPE_CHECKING = False

__version__ = "0.1.0"

#: Public name -> the submodule that defines it.
_PUBLIC = {
    "AutotuneDuringServing": "errors",
    "AutotuneRecord": "records",
    "CompileAttestation": "attestation",
    "CompileCacheRefused": "errors",
    "CompileEvent": "records",
    "CapturedGraphs": "graphs",
    "ConcurrentKnobsError": "errors",
    "EmulateGpuContext": "emulation_context",
    "EmulationConflict": "errors",
    "EmulationUnavailable": "errors",
    "GraphCallRefused": "errors",
    "GraphCaptureFailed": "errors",
    "KnobNotApplied": "errors",
    "KnobNotAppliedWarning": "errors",
    "Knobs": "knobs",
    "KnobsBackend": "compile_backend",
    "KnobsContext": "knob_blocks",
    "KnobsError": "errors",
    "NotBlockOwner": "errors",
    "NotSupportedOnThisTorch": "errors",
    "PRESETS": "knobs",
    "PatchTargetChanged": "errors",
    "RuntimeEvent": "records",
    "Stall": "stalls",
    "StallDuringServing": "errors",
    "StallReport": "stalls",
    "StallWarning": "errors",
    "UnsupportedTorchVersion": "errors",
    "activate_from_env": "env",
    "bucket_for": "buckets",
    "active_env_knobs": "env",
    "capture_cuda_graphs": "graphs",
    "compile": "compile_backend",
    "deactivate_env": "env",
    "emulate_gpu": "emulation_context",
    "force_gemm_autotune": "knob_blocks",
    "knobs": "knob_blocks",
    "knobs_report": "compile_backend",
    "load_compile_cache": "compile_cache",
    "no_autotune": "serving",
    "no_stalls": "stalls",
    "pad_to_bucket": "buckets",
    "record_autotune": "recorder",
    "record_compiles": "recorder",
    "save_compile_cache": "compile_cache",
    "suggest_buckets": "buckets",
    "warmup": "serving",
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


class _Package(types.ModuleType):
    """The import system binds each imported submodule on its package; ``inductor_knobs.knobs`` (the
    module) must not hide ``inductor_knobs.knobs`` (the public function), so such a binding is skipped
    (``import inductor_knobs.knobs`` still works through ``sys.modules``)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load lazily
    from .attestation import CompileAttestation as CompileAttestation
    from .buckets import bucket_for as bucket_for
    from .buckets import pad_to_bucket as pad_to_bucket
    from .buckets import suggest_buckets as suggest_buckets
    from .compile_backend import KnobsBackend as KnobsBackend
    from .compile_backend import compile as compile
    from .compile_backend import knobs_report as knobs_report
    from .compile_cache import load_compile_cache as load_compile_cache
    from .compile_cache import save_compile_cache as save_compile_cache
    from .emulation_context import EmulateGpuContext as EmulateGpuContext
    from .emulation_context import emulate_gpu as emulate_gpu
    from .env import activate_from_env as activate_from_env
    from .env import active_env_knobs as active_env_knobs
    from .env import deactivate_env as deactivate_env
    from .errors import AutotuneDuringServing as AutotuneDuringServing
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
    from .errors import StallDuringServing as StallDuringServing
    from .errors import StallWarning as StallWarning
    from .errors import UnsupportedTorchVersion as UnsupportedTorchVersion
    from .graphs import CapturedGraphs as CapturedGraphs
    from .graphs import capture_cuda_graphs as capture_cuda_graphs
    from .knob_blocks import KnobsContext as KnobsContext
    from .knob_blocks import force_gemm_autotune as force_gemm_autotune
    from .knob_blocks import knobs as knobs
    from .knobs import PRESETS as PRESETS
    from .knobs import Knobs as Knobs
    from .recorder import record_autotune as record_autotune
    from .recorder import record_compiles as record_compiles
    from .records import AutotuneRecord as AutotuneRecord
    from .records import CompileEvent as CompileEvent
    from .records import RuntimeEvent as RuntimeEvent
    from .serving import no_autotune as no_autotune
    from .serving import warmup as warmup
    from .stalls import Stall as Stall
    from .stalls import StallReport as StallReport
    from .stalls import no_stalls as no_stalls
