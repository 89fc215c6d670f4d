"""The exceptions and warnings of inductor_knobs, and how their messages name the installed torch and a close name.

Every error raised on purpose derives from :class:`KnobsError` and from the builtin a caller expects (unknown
names are ``ValueError``, not ``KeyError``, so ``str(err)`` is the message, not a quoted key)."""

from __future__ import annotations

import sys
from collections.abc import Iterable


class KnobsError(Exception):
    """Base class of every error raised by inductor_knobs."""


class InvalidKnobValue(KnobsError, ValueError):
    """A knob or ``INDUCTOR_KNOBS_*`` variable has a value outside what is allowed."""


class UnknownKnob(KnobsError, ValueError):
    """A knob, Inductor config key or preset name that does not exist."""


class UnsupportedTorchVersion(KnobsError, RuntimeError):
    """The installed torch is outside the range any patch module covers."""


class PatchTargetChanged(KnobsError, RuntimeError):
    """A torch internal that would be patched no longer looks as its patch module expects."""


class KnobNotApplied(KnobsError, RuntimeError):
    """A knob read back, or read in Inductor's compile, as another value; the message names key, values and cause."""


class SettingAlreadyRead(KnobNotApplied):
    """A setting torch reads once per process (``TORCH_CUDNN_SDPA_AVOID_RECOMPILE``) may be read; nothing applied."""


class ConcurrentKnobsError(KnobsError, RuntimeError):
    """Knobs were entered from a second thread while torch's config is process-global."""


class NotBlockOwner(KnobsError, RuntimeError):
    """A block was stopped or exited by a thread or asyncio task that did not enter it; nothing was reverted."""


class RevertError(KnobsError, RuntimeError):
    """One or more changes could not be reverted; ``errors`` holds each underlying exception."""

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        super().__init__(message)
        self.errors = errors


class NotSupportedOnThisTorch(KnobsError, RuntimeError):
    """The feature needs a torch release newer (or older) than the installed one."""


class EmulationUnavailable(KnobsError, RuntimeError):
    """``emulate_gpu`` cannot run here: no CUDA GPU, or the driver refused the green context."""


class EmulationConflict(KnobsError, RuntimeError):
    """A second ``emulate_gpu`` with other values while one is active (Inductor sees one GPU at a time)."""


class KnobsWarning(UserWarning):
    """Base class of warnings issued by inductor_knobs."""


class ExternalChangeWarning(KnobsWarning):
    """Something else changed a value inside a knobs block; the block's exit restores it anyway."""


class DriftWarning(KnobsWarning):
    """Lenient mode patched a torch internal or version it does not recognise."""


class NoFallbackWarning(KnobsWarning):
    """``gemm_backends`` leaves out ATEN, so a GEMM with no valid template has no fallback."""


class PipCutlassUnavailable(KnobsError, RuntimeError):
    """CUTLASS cannot come from ``nvidia-cutlass``: not installed (``missing``), incomplete, shadowed, unsafe cache."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


class SettingKeptWarning(KnobsWarning):
    """A block changed a once-per-process setting torch may have read inside it, and keeps after the block's exit."""


class LookupTableUnusedWarning(KnobsWarning):
    """A compile under ``lookup_table`` where torch cannot use (some of) the table: not a CUDA graph (the table
    is CUDA-only), or Triton entries without Inductor's Triton GEMM template (max-autotune off, no TRITON, gate shut)."""


class KnobNotAppliedWarning(KnobsWarning):
    """``on_mismatch="warn"``: a knob did not take effect in a compile (see :class:`KnobNotApplied`)."""


class EmulationWarning(KnobsWarning):
    """``emulate_gpu`` changed something the caller asked for (CUDA graph trees on, SMs rounded by the driver)."""


class StaleConfigHashWarning(KnobsWarning):
    """Env activation changed process defaults after other threads compiled (2.12+ caches a config hash per thread)."""


def torch_version() -> str:
    """The installed torch's ``__version__`` without importing it: an imported torch's, else ``torch/version.py`` as text
    (every build since 1.0), else package metadata (slower to import, and it can lack the local tag ``+cu130``)."""
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    import importlib.util

    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            with open(f"{folder}/version.py", encoding="utf-8") as file:
                for line in file:
                    if line.startswith("__version__"):
                        return line.split("=", 1)[1].strip().strip("'\"")
        except OSError:
            continue
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def unknown_message(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown <kind> <name> on torch <version>; did you mean ...? Known: ...``: the message of an unknown name."""
    import difflib

    known = list(known)
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown {kind} {name!r} on torch {torch_version()}{hint} Known: {', '.join(sorted(known))}"
