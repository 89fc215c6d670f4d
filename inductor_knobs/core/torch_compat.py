"""Pick the patch module for the installed torch, and check its targets for drift.

Selection is by ``major.minor`` (``2.13.0+cpu``, nightlies, ``2.14.0a0+git…`` count as their minor release); the drift
check of ``torch/_inductor/utils.py:is_big_gpu`` catches a nightly whose internals moved.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import io
import pkgutil
import sys
import textwrap
import tokenize
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..errors import DriftWarning, PatchTargetChanged, UnsupportedTorchVersion
from ..patches.torch_2_4 import TorchPatches

#: The module that holds Inductor's config (every release 2.4-2.15).
INDUCTOR_CONFIG = "torch._inductor.config"


@functools.cache
def all_patch_modules() -> tuple[TorchPatches, ...]:
    """Every ``PATCHES`` object of the ``torch_*`` modules of :mod:`inductor_knobs.patches`, oldest range first."""
    package = importlib.import_module("inductor_knobs.patches")
    names = [info.name for info in pkgutil.iter_modules(package.__path__) if info.name.startswith("torch_")]
    found = [importlib.import_module(f"{package.__name__}.{name}").PATCHES for name in names]
    return tuple(sorted(found, key=lambda p: _lowest(p.torch_range)))


def _lowest(spec: SpecifierSet) -> Version:
    return min(Version(s.version) for s in spec if s.operator in (">=", "=="))


def supported_range() -> str:
    """The union of all modules' ranges as text, e.g. ``">=2.4,<2.16"``."""
    mods = all_patch_modules()
    upper = max(Version(s.version) for p in mods for s in p.torch_range if s.operator == "<")
    return f">={_lowest(mods[0].torch_range)},<{upper}"


def release_of(torch_version: str) -> str:
    """``"2.13"`` for ``"2.13.0+cpu"``, ``"2.16.0.dev20261101"`` → ``"2.16"``.

    Raises:
        UnsupportedTorchVersion: the string is not a PEP 440 version.
    """
    try:
        major, minor = Version(torch_version).release[:2]
    except (InvalidVersion, ValueError) as err:
        raise UnsupportedTorchVersion(
            f"torch.__version__={torch_version!r} is not a PEP 440 version; inductor_knobs supports torch {supported_range()}"
        ) from err
    return f"{major}.{minor}"


def select(torch_version: str, *, strict: bool = True) -> TorchPatches:
    """The patch module for ``torch_version`` (a ``torch.__version__`` string); with ``strict=False`` a release outside every
    range gets the nearest module and a :class:`~inductor_knobs.errors.DriftWarning`.

    Raises:
        UnsupportedTorchVersion: no module covers the release and ``strict`` is True.
    """
    module, outside = _select(torch_version)
    if outside:
        if strict:
            raise UnsupportedTorchVersion(
                f"torch {torch_version} is not supported: inductor_knobs supports torch {supported_range()} "
                "(set INDUCTOR_KNOBS_STRICT=0 or strict=False to run the nearest patch module anyway)"
            )
        warnings.warn(
            f"torch {torch_version} is outside {supported_range()}; lenient mode uses "
            f"patches.{module.name}, whose facts may not hold",
            DriftWarning,
            stacklevel=2,
        )
    return module


@functools.cache
def _select(torch_version: str) -> tuple[TorchPatches, bool]:
    """(the module covering the release or the nearest one, whether the release is outside every range); cached."""
    release = Version(release_of(torch_version))
    modules = all_patch_modules()
    for module in modules:
        if module.torch_range.contains(release):
            return module, False
    return (modules[0] if release < _lowest(modules[0].torch_range) else modules[-1]), True


def installed(*, strict: bool = True) -> TorchPatches:
    """The patch module for the torch that is importable here (imports torch)."""
    torch = sys.modules.get("torch") or importlib.import_module("torch")  # asked at every enter and exit: no import statement
    version = torch.__version__
    module, outside = _select(version)  # select() only when it warns or raises
    return select(version, strict=strict) if outside else module


@dataclass(frozen=True)
class DriftReport:
    """What the drift check saw of ``torch._inductor.utils.is_big_gpu``: ``ok`` (every check passed), ``problems`` (one
    sentence per failed check) and the ``fingerprint`` of the function found (None without source)."""

    ok: bool
    problems: tuple[str, ...]
    fingerprint: str | None


def check_gate(patches: TorchPatches, gate: object) -> DriftReport:
    """Check ``gate`` against ``patches`` (cached per patch module and gate object: see :func:`_check_gate`)."""
    try:
        return _check_gate_cached(patches, gate)
    except TypeError:  # an unhashable gate object: check it every time
        return _check_gate(patches, gate)


def _check_gate(patches: TorchPatches, gate: object) -> DriftReport:
    """Whether ``gate`` (the original ``is_big_gpu``) is callable, functools-cached, and has ``patches``' parameters,
    a known fingerprint and the prerequisites the wrapper reads."""
    problems: list[str] = []
    if not callable(gate):
        return DriftReport(False, (f"is_big_gpu is {type(gate).__name__}, not callable",), None)
    if not callable(getattr(gate, "cache_clear", None)):
        problems.append("is_big_gpu is not functools-cached (no cache_clear)")
    try:
        params = tuple((p.name, p.default) for p in inspect.signature(gate).parameters.values())
    except (TypeError, ValueError):
        params = ()
    if params != patches.gate_parameters:
        problems.append(f"is_big_gpu parameters are {params}, expected {patches.gate_parameters}")
    fp = fingerprint(gate)  # type: ignore[arg-type]
    if fp not in patches.gate_fingerprints:
        problems.append(
            f"is_big_gpu fingerprint {fp} is not one patches.{patches.name} knows "
            f"({', '.join(sorted(patches.gate_fingerprints))})"
        )
    problems += [f"{dotted} does not exist" for dotted in patches.gate_prerequisites() if _resolve(dotted) is None]
    return DriftReport(not problems, tuple(problems), fp)


_check_gate_cached = functools.lru_cache(maxsize=32)(_check_gate)


def enforce(report: DriftReport, *, strict: bool, torch_version: str) -> None:
    """Raise (strict) or warn (lenient) when ``report`` found drift.

    Raises:
        PatchTargetChanged: drift was found and ``strict`` is True.
    """
    if report.ok:
        return
    message = (
        f"torch._inductor.utils.is_big_gpu on torch {torch_version} is not what inductor_knobs expects: "
        f"{'; '.join(report.problems)}. Nothing was patched. If torch changed, inductor_knobs needs a patch module update; "
        "strict=False (INDUCTOR_KNOBS_STRICT=0) patches it anyway"
    )
    if strict:
        raise PatchTargetChanged(message)
    warnings.warn(message.replace("Nothing was patched. ", ""), DriftWarning, stacklevel=3)


def _resolve(dotted: str) -> object | None:
    try:
        return pkgutil.resolve_name(dotted)  # type: ignore[no-any-return]
    except (ImportError, AttributeError, ValueError):
        return None


__all__: list[str] = [
    "DriftReport",
    "all_patch_modules",
    "check_gate",
    "enforce",
    "installed",
    "release_of",
    "select",
    "supported_range",
]


def fingerprint_source(source: str) -> str:
    """16 lowercase hex digits of the first function in ``source``, ignoring comments, decorators and layout.

    Raises:
        ValueError: ``source`` defines no function.
    """
    source = textwrap.dedent(source)
    defs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        raise ValueError("no function definition in source")
    body = "\n".join(source.splitlines()[defs[0].lineno - 1 : defs[0].end_lineno]) + "\n"
    layout = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    kept = [tok.string for tok in tokenize.generate_tokens(io.StringIO(body).readline) if tok.type not in layout]
    normalised = " ".join(" ".join(kept).split())
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


def fingerprint(fn: Callable[..., object]) -> str | None:
    """The fingerprint of a live function (unwrapped through ``__wrapped__``), or ``None`` when its source is unavailable."""
    target = inspect.unwrap(fn)
    return _fingerprint_of(getattr(target, "__code__", target))


@functools.cache  # every enter checks the gate; tokenizing its source costs ~0.9 ms (H200), so once per code object
def _fingerprint_of(code_or_object: object) -> str | None:
    try:
        return fingerprint_source(inspect.getsource(code_or_object))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
