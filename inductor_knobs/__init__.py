"""inductor_knobs: safe, reversible knobs for TorchInductor (torch 2.4–2.15).

>>> import inductor_knobs as ik
>>> with ik.force_gemm_autotune(min_sms=40):          # doctest: +SKIP
...     y = torch.compile(model, mode="max-autotune")(x)

Importing this package imports neither torch nor ``torch._inductor``; everything is
resolved when knobs are entered.
"""

from __future__ import annotations

from .compile_backend import KnobsBackend as KnobsBackend
from .compile_backend import compile as compile
from .compile_backend import knobs_report as knobs_report
from .compile_cache import load_compile_cache as load_compile_cache
from .compile_cache import save_compile_cache as save_compile_cache
from .context import EmulateGpuContext as EmulateGpuContext
from .context import KnobsContext as KnobsContext
from .context import emulate_gpu as emulate_gpu
from .context import force_gemm_autotune as force_gemm_autotune
from .context import knobs as knobs
from .env import activate_from_env as activate_from_env
from .env import active_env_knobs as active_env_knobs
from .env import deactivate_env as deactivate_env
from .errors import (
    AutotuneDuringServing as AutotuneDuringServing,
)
from .errors import (
    CompileCacheRefused as CompileCacheRefused,
)
from .errors import (
    ConcurrentKnobsError as ConcurrentKnobsError,
)
from .errors import (
    EmulationConflict as EmulationConflict,
)
from .errors import (
    EmulationUnavailable as EmulationUnavailable,
)
from .errors import (
    KnobNotApplied as KnobNotApplied,
)
from .errors import (
    KnobNotAppliedWarning as KnobNotAppliedWarning,
)
from .errors import (
    KnobsError as KnobsError,
)
from .errors import (
    NotSupportedOnThisTorch as NotSupportedOnThisTorch,
)
from .errors import (
    PatchTargetChanged as PatchTargetChanged,
)
from .errors import (
    UnsupportedTorchVersion as UnsupportedTorchVersion,
)
from .interception import CompileAttestation as CompileAttestation
from .knobs import PRESETS as PRESETS
from .knobs import Knobs as Knobs
from .recorder import record_autotune as record_autotune
from .recorder import record_compiles as record_compiles
from .records import AutotuneRecord as AutotuneRecord
from .records import CompileEvent as CompileEvent
from .serving import no_autotune as no_autotune
from .serving import warmup as warmup

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AutotuneDuringServing",
    "AutotuneRecord",
    "CompileCacheRefused",
    "CompileEvent",
    "ConcurrentKnobsError",
    "EmulateGpuContext",
    "EmulationConflict",
    "EmulationUnavailable",
    "emulate_gpu",
    "KnobsBackend",
    "NotSupportedOnThisTorch",
    "compile",
    "knobs_report",
    "load_compile_cache",
    "no_autotune",
    "record_autotune",
    "record_compiles",
    "CompileAttestation",
    "save_compile_cache",
    "warmup",
    "KnobNotApplied",
    "KnobNotAppliedWarning",
    "Knobs",
    "KnobsContext",
    "KnobsError",
    "PatchTargetChanged",
    "UnsupportedTorchVersion",
    "activate_from_env",
    "active_env_knobs",
    "deactivate_env",
    "force_gemm_autotune",
    "knobs",
]
