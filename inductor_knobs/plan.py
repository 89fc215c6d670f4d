"""Turn :class:`~inductor_knobs.knobs.Knobs` into undo records, validating against the live torch.

Nothing here changes torch: :func:`plan` only reads, so every check (config keys and value
types, GEMM backends, CUTLASS, drift of ``is_big_gpu``) runs before the first change.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from . import torch_compat
from ._undo import Change, ConfigChange
from .errors import InvalidKnobValue, NoFallbackWarning, UnknownKnob
from .gate import GATE_MODULE, GATE_NAME, GateChange, Override, original_gate
from .interception import AskChange, Asked, InterceptionUse
from .knobs import Knobs, _unknown_message
from .patches.torch_2_4 import TorchPatches

INDUCTOR_CONFIG = "torch._inductor.config"

#: Knob name -> the Inductor config key it sets.
CONFIG_KEYS = {
    "max_autotune": "max_autotune",
    "max_autotune_gemm": "max_autotune_gemm",
    "gemm_backends": "max_autotune_gemm_backends",
    "gemm_search_space": "max_autotune_gemm_search_space",
    "coordinate_descent_tuning": "coordinate_descent_tuning",
    "cudagraphs": "triton.cudagraphs",
}


def config_values(knobs: Knobs) -> dict[str, Any]:
    """The Inductor config ``{dotted key: value}`` that ``knobs`` sets (not the gate).

    Raises:
        InvalidKnobValue: ``config`` sets a key that a named knob sets too.
    """
    values = {key: getattr(knobs, name) for name, key in CONFIG_KEYS.items() if getattr(knobs, name) is not None}
    if knobs.trace is not None:
        values["trace.enabled"] = bool(knobs.trace)
        if isinstance(knobs.trace, str):
            values["trace.debug_dir"] = knobs.trace
    for key, value in dict(knobs.config).items():
        if key in values:
            raise InvalidKnobValue(
                f"config={{{key!r}: {value!r}}} conflicts with a named knob that sets {key} "
                f"to {values[key]!r}; set it one way only"
            )
        values[key] = value
    return values


def plan(
    knobs: Knobs,
    *,
    process_wide: bool = False,
    source: str = "knobs",
    sources: Mapping[str, str] | None = None,
) -> list[Change]:
    """Validate ``knobs`` against the installed torch and return the changes to apply, in order.

    Args:
        knobs: what to change.
        process_wide: make the changes process-wide defaults (env activation) instead of
            overrides on the calling thread (2.12+) / the process (< 2.12).
        source: who asks, as attestations name it (``knobs``, ``env``, ``ik.compile``).
        sources: per config key, a more precise source (``mode:max-autotune``, ``options``).

    Returns:
        The compile interception, config changes, cache-salting changes, the gate change, and
        the record of what was asked (which the interception enforces and attests in every
        compile, :mod:`inductor_knobs.interception`).

    Raises:
        UnsupportedTorchVersion: torch outside the supported range (strict mode).
        PatchTargetChanged: ``is_big_gpu`` is not what the patch module expects (strict mode).
        UnknownKnob: a config key the installed Inductor does not have.
        InvalidKnobValue: a value of the wrong type, or CUTLASS requested but not found.
    """
    import torch

    patches = torch_compat.installed(strict=knobs.strict)
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    values = config_values(knobs)
    for key, value in values.items():
        _check_key(patches, cfg, key, value, torch.__version__)
    if knobs.gemm_backends is not None:
        _check_backends(patches, cfg, knobs.gemm_backends, values, torch.__version__)
    policy = knobs.on_mismatch or "raise"
    sources = sources or {}
    asked = [Asked(INDUCTOR_CONFIG, key, value, sources.get(key, source), on_mismatch=policy) for key, value in values.items()]
    changes: list[Change] = [InterceptionUse(patches)]
    changes += [ConfigChange(patches, cfg, key, value, process_wide=process_wide) for key, value in values.items()]
    if knobs.min_sms is not None:
        _check_gate(patches, knobs.strict, torch.__version__)
        override = Override(knobs.min_sms, bool(knobs.gate_rocm_xpu))
        for module_name, key, value in patches.cache_salt(f"inductor_knobs-gate-{_gate_digest(override)}"):
            changes.append(ConfigChange(patches, importlib.import_module(module_name), key, value, process_wide=process_wide))
            asked.append(Asked(module_name, key, value, source, on_mismatch=policy))
        changes.append(GateChange(patches, override, process_wide=process_wide))
    changes.append(AskChange(patches, asked, process_wide=process_wide))
    return changes


def _gate_digest(override: Override) -> str:
    return Knobs(min_sms=override.min_sms, gate_rocm_xpu=override.gate_rocm_xpu or None).digest()[:8]


def _check_gate(patches: TorchPatches, strict: bool, version: str) -> None:
    utils = importlib.import_module(GATE_MODULE)
    gate = original_gate() or getattr(utils, GATE_NAME, None)
    torch_compat.enforce(torch_compat.check_gate(patches, gate), strict=strict, torch_version=version)


def _check_key(patches: TorchPatches, cfg: ModuleType, key: str, value: object, version: str) -> None:
    """The one type check of a config value, for named knobs and ``config=`` alike: against the type the
    installed config declares for ``key`` (not the type of its current value, which may be None)."""
    if key not in cfg._config:  # type: ignore[attr-defined]  # every release keeps its entries in _config
        keys = patches.config_keys(cfg)
        raise UnknownKnob(_unknown_message(f"Inductor config key ({INDUCTOR_CONFIG})", key, keys).split(" Known:")[0])
    allowed = patches.declared_types(cfg, key)
    if allowed is None or patches.value_allowed(value, allowed):
        return
    raise InvalidKnobValue(
        f"{INDUCTOR_CONFIG}.{key}={value!r} is invalid on torch {version}: allowed {patches.describe_types(allowed)}"
    )


def _check_backends(patches: TorchPatches, cfg: ModuleType, backends: str, values: dict[str, Any], version: str) -> None:
    names = backends.split(",")
    if "CUTLASS" in names:
        release = torch_compat.release_of(version)
        key = patches.cutlass_dir_key(release)
        found, where = patches.cutlass_available(cfg, release, str(values[key]) if key in values else None)
        if not found:
            raise InvalidKnobValue(
                f"gemm_backends={backends!r} asks for CUTLASS, but torch {version} finds no CUTLASS "
                f"at {key}={where!r} (it needs {where}/python/cutlass_library). Fix: git clone "
                f"https://github.com/NVIDIA/cutlass and pass config={{{key!r}: '/path/to/cutlass'}} "
                "(or export TORCHINDUCTOR_CUTLASS_DIR before importing torch), or drop CUTLASS"
            )
    if "ATEN" not in names:
        warnings.warn(
            f"gemm_backends={backends!r} leaves out ATEN: a GEMM for which no template fits "
            "(for example when the SM gate stays closed) has no fallback and compilation can fail "
            "with NoValidChoicesError",
            NoFallbackWarning,
            stacklevel=4,
        )
