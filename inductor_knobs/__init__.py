"""inductor_knobs: safe, reversible knobs for TorchInductor (torch 2.4–2.15).

Importing this package imports nothing else: each public name loads from its submodule on first use (PEP 562).
"""

import importlib
import os
import sys

# Not ``from typing import ...``: typing costs a bare interpreter start about as much again, and this
# module is imported by the startup hook of every process that sets an INDUCTOR_KNOBS_* variable.
TYPE_CHECKING = False

__version__ = "0.1.0"

#: Public name -> the submodule that defines it.  Serving is ``inductor_knobs.serving``, the exceptions
#: ``inductor_knobs.errors``, the extension API ``inductor_knobs.ext``; each loads on first use.
_PUBLIC = {
    "CompileAttestation": "core.attestation",
    "knobs": "core.blocks",
    "force_gemm_autotune": "core.blocks",
    "KnobsContext": "core.blocks",
    "compile": "core.compile_backend",
    "KnobsBackend": "core.compile_backend",
    "knobs_report": "core.compile_backend",
    "AutotuneRecord": "core.events",
    "CompileEvent": "core.events",
    "RuntimeEvent": "core.events",
    "Knobs": "core.knobs",
    "PRESETS": "core.knobs",
    "record_autotune": "core.recorder",
    "record_compiles": "core.recorder",
    "emulate_gpu": "emulation.block",
    "EmulateGpuContext": "emulation.block",
    "activate_from_env": "env",
    "active_env_knobs": "env",
    "deactivate_env": "env",
    "KnobsError": "errors",
    "KnobNotApplied": "errors",
}
#: Subpackages and modules reached as attributes (``ik.serving.warmup``, ``ik.errors.InvalidKnobValue``).
_SUBMODULES = ("errors", "serving")

__all__ = sorted([*_PUBLIC, *_SUBMODULES])


class _CheckoutPatches:
    """Serves ``inductor_knobs.patches`` from the top-level ``patches/`` folder of a source checkout on ``sys.path``
    (installs map it with setuptools' ``package-dir``; a checkout has no ``inductor_knobs/patches``)."""

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
    # Test for __init__.py, not the folder: a leftover inductor_knobs/patches/__pycache__ is no package.
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


if TYPE_CHECKING:  # for type checkers and IDEs; at run time names load lazily (a test keeps this equal to _PUBLIC)
    from . import errors as errors
    from . import serving as serving
    from .core.attestation import CompileAttestation as CompileAttestation
    from .core.blocks import KnobsContext as KnobsContext
    from .core.blocks import force_gemm_autotune as force_gemm_autotune
    from .core.blocks import knobs as knobs
    from .core.compile_backend import KnobsBackend as KnobsBackend
    from .core.compile_backend import compile as compile
    from .core.compile_backend import knobs_report as knobs_report
    from .core.events import AutotuneRecord as AutotuneRecord
    from .core.events import CompileEvent as CompileEvent
    from .core.events import RuntimeEvent as RuntimeEvent
    from .core.knobs import PRESETS as PRESETS
    from .core.knobs import Knobs as Knobs
    from .core.recorder import record_autotune as record_autotune
    from .core.recorder import record_compiles as record_compiles
    from .emulation.block import EmulateGpuContext as EmulateGpuContext
    from .emulation.block import emulate_gpu as emulate_gpu
    from .env import activate_from_env as activate_from_env
    from .env import active_env_knobs as active_env_knobs
    from .env import deactivate_env as deactivate_env
    from .errors import KnobNotApplied as KnobNotApplied
    from .errors import KnobsError as KnobsError
