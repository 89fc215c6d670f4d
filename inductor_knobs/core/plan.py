"""Turn :class:`~inductor_knobs.core.knobs.Knobs` into undo records, validating against the live torch.

Nothing here changes torch, so every check (config keys and declared types in ``torch._inductor.config``,
GEMM backends, CUTLASS, drift of ``torch._inductor.utils.is_big_gpu``) runs before the first change.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import (
    InvalidKnobValue,
    NoFallbackWarning,
    NotSupportedOnThisTorch,
    PipCutlassUnavailable,
    UnknownKnob,
    unknown_message,
)
from ..patches.torch_2_4 import TorchPatches
from . import torch_compat
from .attestation import CACHE_SALT, CHOICES_HANDLER, INDUCTOR_CONFIG, Asked, by_slot
from .changes import SETTINGS, SETTINGS_MODULE, ConfigChange, Groups, SettingChange, Writers, config_groups, config_writers
from .gate import GATE_MODULE, GATE_NAME, GateChange, Override, original_gate
from .interception import AskChange
from .knobs import CACHE_BYPASS_KEY, CONFIG_KEYS, KNOBS, Gate, Knobs, ProcessSetting, cache_rule, knob_config, value_digest
from .undo import Change


def config_values(knobs: Knobs) -> dict[str, Any]:
    """The Inductor config ``{dotted key: value}`` that ``knobs`` (Knobs) sets (not the gate or process settings),
    with the cache bypass while a ``bypass`` key is on.

    Raises:
        InvalidKnobValue: ``config`` sets a key a named knob sets too, or ``force_disable_caches=False`` while a
            knob that needs the caches off is on.
    """
    values: dict[str, Any] = {}
    for name in CONFIG_KEYS:
        if getattr(knobs, name) is not None:
            values.update(knob_config(name, getattr(knobs, name)))
    for key, value in dict(knobs.config).items():
        if key in values:
            raise InvalidKnobValue(
                f"config={{{key!r}: {value!r}}} conflicts with a named knob that sets {key} "
                f"to {values[key]!r}; set it one way only"
            )
        values[key] = value
    bypassing = sorted(key for key, value in values.items() if cache_rule(key) == "bypass" and value)
    if bypassing and values.get(CACHE_BYPASS_KEY, True) is not True:
        raise InvalidKnobValue(
            f"{', '.join(f'{key}={values[key]!r}' for key in bypassing)} needs Inductor's caches off while it is on "
            f"(it acts only while code is generated), but config sets {CACHE_BYPASS_KEY}={values[CACHE_BYPASS_KEY]!r}; "
            f"leave {CACHE_BYPASS_KEY} out"
        )
    if bypassing:
        values[CACHE_BYPASS_KEY] = True
    return values


@dataclass(frozen=True)
class _Validated:
    """What :func:`plan` checks and derives for one ``Knobs`` on one torch, cached; records are built fresh from it."""

    values: dict[str, Any]
    settings: tuple[tuple[str, Any], ...]  # process-global torch settings (changes.SETTINGS), in knob order
    asked: dict[tuple[str, str], Asked]
    override: Override | None
    warn_no_fallback: bool
    cfg: ModuleType  # the config module ``groups`` holds (a reloaded one is validated again)
    groups: Groups  # ``values`` grouped for ConfigChange (aliases followed)
    writers: Writers  # ``groups``' writers (overrides only)


#: (id of the Knobs, arguments, patch module, torch version, id of the gate) -> (knobs, gate, validated).
#: The Knobs and gate objects are kept in the value so their ids cannot be reused while cached.
_VALIDATED: dict[tuple[Any, ...], tuple[Knobs, object, _Validated]] = {}
_VALIDATED_MAX = 256


def plan(
    knobs: Knobs, *, process_wide: bool = False, source: str = "knobs", sources: Mapping[str, str] | None = None
) -> list[Change]:
    """Validate ``knobs`` against the installed torch (cached per ``knobs`` object, arguments, torch version and
    ``is_big_gpu``, but for CUTLASS, which reads files) and return the changes to apply, in order.

    Args:
        knobs (Knobs): what to change.
        process_wide (bool): process-wide defaults (env activation), not overrides for this thread (2.12+) or process.
        source (str): who asks, as attestations name it (``knobs``, ``env``, ``ik.compile``).
        sources (Mapping[str, str] | None): per config key, a more precise source (``mode:max-autotune``).

    Returns:
        list[Change]: the config, gate and settings' changes, and the ``AskChange`` that enforces, salts and attests
        them in every compile (:mod:`inductor_knobs.core.interception`).

    Raises:
        UnsupportedTorchVersion: torch outside the supported range (strict mode).
        PatchTargetChanged: ``is_big_gpu`` is not what the patch module expects (strict mode).
        NotSupportedOnThisTorch: a knob or setting the installed release does not have.
        UnknownKnob: a config key the installed Inductor does not have.
        InvalidKnobValue: a value of the wrong type, or CUTLASS requested but not found.
    """
    patches = torch_compat.installed(strict=knobs.strict)  # imports torch
    version = sys.modules["torch"].__version__
    gate_fn = None
    if knobs.min_sms is not None:  # torch's original, also while our wrapper is installed
        gate_fn = original_gate() or getattr(
            sys.modules.get(GATE_MODULE) or importlib.import_module(GATE_MODULE), GATE_NAME, None
        )
    cfg = sys.modules.get(INDUCTOR_CONFIG) or importlib.import_module(INDUCTOR_CONFIG)
    key = (id(knobs), process_wide, source, tuple(sorted(sources.items())) if sources else (), id(patches), version, id(gate_fn))
    cached = _VALIDATED.get(key)
    if cached is not None and cached[0] is knobs and cached[1] is gate_fn and cached[2].cfg is cfg:
        checked = cached[2]
    else:
        checked = _validate(knobs, patches, cfg, source, sources or {}, version, gate_fn)
        if not (knobs.gemm_backends is not None and "CUTLASS" in knobs.gemm_backends.split(",")):  # reads files
            if len(_VALIDATED) >= _VALIDATED_MAX:
                _VALIDATED.clear()
            _VALIDATED[key] = (knobs, gate_fn, checked)
    if checked.warn_no_fallback:
        warnings.warn(
            f"gemm_backends={knobs.gemm_backends!r} leaves out ATEN: a GEMM for which no template fits "
            "(for example when the SM gate stays closed) has no fallback and compilation can fail "
            "with NoValidChoicesError",
            NoFallbackWarning,
            stacklevel=3,
        )
    changes: list[Change] = []
    if checked.groups:
        changes.append(ConfigChange(patches, process_wide=process_wide, groups=checked.groups, writers=checked.writers))
    if checked.override is not None:
        changes.append(GateChange(patches, checked.override, process_wide=process_wide))
    for name, value in checked.settings:
        changes.append(SettingChange(patches, name, value))
    changes.append(AskChange(patches, checked.asked, process_wide=process_wide))
    return changes


def _validate(
    knobs: Knobs, patches: TorchPatches, cfg: ModuleType, source: str, sources: Mapping[str, str], version: str, gate_fn: object
) -> _Validated:
    """Every check of :func:`plan` that reads torch but changes nothing; raises as :func:`plan` documents."""
    values = config_values(knobs)
    release = torch_compat.release_of(version)
    for name, row in KNOBS.items():
        if not row.on(release) and (getattr(knobs, name) is not None or CONFIG_KEYS.get(name) in values):
            raise NotSupportedOnThisTorch(
                f"{name} needs {row.releases()} (the releases that have it); the installed torch {version} does not. "
                "Nothing was applied"
            )
    for key, value in values.items():
        _check_key(patches, cfg, key, value, version)
    backends = knobs.gemm_backends
    if backends is not None and "CUTLASS" in backends.split(","):
        key = patches.cutlass_dir_key(release)
        found, where = patches.cutlass_available(cfg, release, str(values[key]) if key in values else None)
        if not found:  # set and attested like any key
            values[key] = _cutlass_from_pip(patches, cfg, backends, key, where, key in values, version)
    warn_no_fallback = backends is not None and "ATEN" not in backends.split(",")
    policy = knobs.on_mismatch or "raise"
    settings = tuple(
        (name, getattr(knobs, name))
        for name, row in KNOBS.items()
        if isinstance(row.changes, ProcessSetting) and getattr(knobs, name) is not None
    )
    for key, value in settings:
        setting = SETTINGS[key]
        problem = setting.problem(patches, value)
        if problem is not None and setting.missing_feature:
            raise NotSupportedOnThisTorch(f"{key}={value!r} cannot be set on torch {version}: {problem}")
        if problem is not None:
            raise InvalidKnobValue(f"{key}={value!r} is invalid on torch {version}: {problem}")
    asked = by_slot(
        [
            *(Asked(INDUCTOR_CONFIG, k, v, sources.get(k, source), on_mismatch=policy) for k, v in values.items()),
            *(Asked(SETTINGS_MODULE, k, v, source, on_mismatch=policy) for k, v in settings),
        ]
    )
    if values.get(LOOKUP_TABLE_KEY) is not None:
        # torch reads the table only through LookupTableChoices, which the interception makes the choices handler
        who = sources.get(LOOKUP_TABLE_KEY, source)
        asked[(CHOICES_HANDLER, "V.choices")] = Asked(CHOICES_HANDLER, "V.choices", "LookupTableChoices", who, on_mismatch=policy)
    override = None
    if knobs.min_sms is not None:
        torch_compat.enforce(torch_compat.check_gate(patches, gate_fn), strict=knobs.strict, torch_version=version)
        override = Override(knobs.min_sms, bool(knobs.gate_rocm_xpu))
    for salt in cache_salts(knobs, values):
        asked[(CACHE_SALT, salt)] = Asked(CACHE_SALT, salt, True, source, on_mismatch=policy)
    groups = config_groups(patches, [(cfg, key, value) for key, value in values.items()])
    writers = config_writers(patches, groups)
    return _Validated(values, settings, asked, override, warn_no_fallback, cfg, groups, writers)


#: The Inductor config key of the ``lookup_table`` knob.
LOOKUP_TABLE_KEY = CONFIG_KEYS["lookup_table"]


def cache_salts(knobs: Knobs, values: Mapping[str, Any]) -> list[str]:
    """The cache-key salts, in table order: ``inductor_knobs-gate-<digest>`` while ``min_sms`` is set, and
    ``inductor_knobs-<knob>-<digest>`` per other ``salted`` knob set by name or in ``values`` (:func:`config_values`)."""
    salts = []
    if knobs.min_sms is not None:
        gate = Knobs(min_sms=knobs.min_sms, gate_rocm_xpu=knobs.gate_rocm_xpu or None)
        salts.append(f"inductor_knobs-gate-{gate.digest()[:8]}")
    for name, row in KNOBS.items():
        if row.cache != "salted" or isinstance(row.changes, Gate):
            continue
        value = values.get(CONFIG_KEYS[name]) if name in CONFIG_KEYS else getattr(knobs, name)
        if value is not None:
            salts.append(f"inductor_knobs-{name}-{value_digest(value)}")
    return salts


def _check_key(patches: TorchPatches, cfg: ModuleType, key: str, value: object, version: str) -> None:
    """Check a config value against the type the installed config declares for ``key`` (its value may be None)."""
    if key not in cfg._config:  # type: ignore[attr-defined]  # every release keeps its entries in _config
        keys = patches.config_keys(cfg)
        raise UnknownKnob(unknown_message(f"Inductor config key ({INDUCTOR_CONFIG})", key, keys).split(" Known:")[0])
    allowed = patches.declared_types(cfg, key)
    if allowed is None or patches.value_allowed(value, allowed):
        return
    raise InvalidKnobValue(
        f"{INDUCTOR_CONFIG}.{key}={value!r} is invalid on torch {version}: allowed {patches.describe_types(allowed)}"
    )


def _cutlass_from_pip(
    patches: TorchPatches, cfg: ModuleType, backends: str, key: str, where: str, explicit: bool, version: str
) -> str:
    """The directory made from ``nvidia-cutlass`` for ``key`` (torch reads none at ``where``); changes nothing in torch.

    Raises ``InvalidKnobValue`` when the knobs' own ``config`` names ``where`` (``explicit``) or CUTLASS cannot come
    from ``nvidia-cutlass`` (the cause: ``PipCutlassUnavailable``), saying how to fix it.
    """
    from . import cutlass

    needs = f"it needs {where}/python/cutlass_library"
    checkout = (
        f"git clone https://github.com/NVIDIA/cutlass and pass config={{{key!r}: '/path/to/cutlass'}} "
        "(or export TORCHINDUCTOR_CUTLASS_DIR=/path/to/cutlass before importing torch)"
    )
    if explicit:
        raise InvalidKnobValue(
            f"gemm_backends={backends!r} with config={{{key!r}: {where!r}}}: torch {version} finds no CUTLASS checkout "
            f"there ({needs}). The knobs name that directory, so it is not replaced by one made from "
            f"{cutlass.DISTRIBUTION}. Fix: point {key} at a CUTLASS checkout ({checkout}), or leave {key} out and "
            f"{cutlass.INSTALL_HINT}, or drop CUTLASS"
        )
    try:
        found = cutlass.resolve()
    except PipCutlassUnavailable as err:
        fix = (
            f"Fix: {cutlass.INSTALL_HINT} (inductor_knobs then points {key} at a directory of links to it), or"
            if err.missing
            else "Fix that, or"
        )
        raise InvalidKnobValue(
            f"gemm_backends={backends!r} asks for CUTLASS, but torch {version} finds no CUTLASS checkout at "
            f"{key}={where!r} ({needs}), and CUTLASS cannot come from {cutlass.DISTRIBUTION}: {err}. "
            f"{fix} {checkout}, or drop CUTLASS"
        ) from err
    _check_key(patches, cfg, key, found.directory, version)
    return found.directory
