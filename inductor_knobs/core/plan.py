"""Turn :class:`~inductor_knobs.core.knobs.Knobs` into undo records, validating against the live torch.

Nothing here changes torch: :func:`plan` only reads, so every check (config keys and value
types, GEMM backends, CUTLASS, drift of ``is_big_gpu``) runs before the first change.
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
from .knobs import (
    CACHE_BYPASS_KEY,
    CONFIG_KEYS,
    KNOBS,
    Config,
    Gate,
    Knobs,
    ProcessSetting,
    cache_rule,
    knob_config,
    value_digest,
)
from .undo import Change


def config_values(knobs: Knobs) -> dict[str, Any]:
    """The Inductor config ``{dotted key: value}`` that ``knobs`` sets (not the gate), with the cache bypass of every
    key whose knob's cache rule is ``bypass`` and that is on (``trace=True``, ``config={"trace.enabled": True}``).

    Raises:
        InvalidKnobValue: ``config`` sets a key that a named knob sets too, or turns the caches back on
            (``force_disable_caches=False``) while a knob that needs them off is on.
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
    """What :func:`plan` derives from one ``Knobs`` on one torch: all that can be checked without changing anything.

    It depends only on the knobs, the torch version and (for ``min_sms``) the identity of the gate
    function, so it is cached under exactly those (the key in :func:`plan`).  Records are built fresh
    from it at every plan (they hold the state of one application).
    """

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
        The config change, the gate change, the settings' changes, and the record of what was
        asked (the cache salt of a gate override included), which holds the compile interception
        that enforces, salts and attests it in every compile (:mod:`inductor_knobs.core.interception`).

    Raises:
        UnsupportedTorchVersion: torch outside the supported range (strict mode).
        PatchTargetChanged: ``is_big_gpu`` is not what the patch module expects (strict mode).
        UnknownKnob: a config key the installed Inductor does not have.
        InvalidKnobValue: a value of the wrong type, or CUTLASS requested but not found.

    The validation is cached per (``knobs`` object, torch version, gate function identity); a
    request that involves the file system (CUTLASS) is validated every time.
    """
    patches = torch_compat.installed(strict=knobs.strict)  # imports torch
    version = sys.modules["torch"].__version__
    gate_fn = _gate_function() if knobs.min_sms is not None else None
    cfg = sys.modules.get(INDUCTOR_CONFIG) or importlib.import_module(INDUCTOR_CONFIG)
    key = (id(knobs), process_wide, source, tuple(sorted(sources.items())) if sources else (), id(patches), version, id(gate_fn))
    cached = _VALIDATED.get(key)
    if cached is not None and cached[0] is knobs and cached[1] is gate_fn and cached[2].cfg is cfg:
        checked = cached[2]
    else:
        checked = _validate(knobs, patches, cfg, source, sources or {}, version, gate_fn)
        if not _on_disk(knobs):  # so a request that is never stored is never found either
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
    # One record writes every config key; the interception is held by the AskChange at the end
    # (nothing compiles in between).  The cache salt is an asked value that the interception writes
    # at each compile (interception._with_salt), not a config write here.
    changes: list[Change] = []
    if checked.groups:
        changes.append(ConfigChange(patches, process_wide=process_wide, groups=checked.groups, writers=checked.writers))
    if checked.override is not None:
        changes.append(GateChange(patches, checked.override, process_wide=process_wide))
    for name, value in checked.settings:
        changes.append(SettingChange(patches, name, value))
    changes.append(AskChange(patches, checked.asked, process_wide=process_wide))
    return changes


def _gate_function() -> object:
    """The gate function the drift check is about: torch's original, also while our wrapper is installed."""
    return original_gate() or getattr(sys.modules.get(GATE_MODULE) or importlib.import_module(GATE_MODULE), GATE_NAME, None)


def _validate(
    knobs: Knobs,
    patches: TorchPatches,
    cfg: ModuleType,
    source: str,
    sources: Mapping[str, str],
    version: str,
    gate_fn: object,
) -> _Validated:
    """Every check of :func:`plan` that reads torch but changes nothing; raises as :func:`plan` documents."""
    values = config_values(knobs)
    _check_release(knobs, patches, values, version)
    for key, value in values.items():
        _check_key(patches, cfg, key, value, version)
    warn_no_fallback = False
    if knobs.gemm_backends is not None:
        warn_no_fallback = _find_cutlass_for(patches, cfg, knobs.gemm_backends, values, version)
    policy = knobs.on_mismatch or "raise"
    settings = tuple(
        (name, getattr(knobs, name))
        for name, row in KNOBS.items()
        if isinstance(row.changes, ProcessSetting) and getattr(knobs, name) is not None
    )
    for key, value in settings:
        _check_setting(patches, key, value, version)
    asked = by_slot(
        [
            *(Asked(INDUCTOR_CONFIG, k, v, sources.get(k, source), on_mismatch=policy) for k, v in values.items()),
            *(Asked(SETTINGS_MODULE, k, v, source, on_mismatch=policy) for k, v in settings),
        ]
    )
    if values.get(LOOKUP_TABLE_KEY) is not None:
        # torch reads the table only through LookupTableChoices, which the interception makes the choices handler
        # inside each compile (the table's row salts the cache keys, below).
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
    """The cache-key salts of ``knobs``: one per knob whose row says torch's cache keys do not cover it (``salted``).

    The gate's two knobs salt as one (``inductor_knobs-gate-<digest>``, only while ``min_sms`` is set); every other
    salted knob, set by name or as its ``config=`` key (``values``), salts as ``inductor_knobs-<knob>-<digest>``
    of its value, so a compile under one value never shares a cache entry with a compile under another or none.

    Args:
        knobs (Knobs): the knobs.
        values (Mapping[str, Any]): their Inductor config values (:func:`config_values`).

    Returns:
        list[str]: the salts, in table order.
    """
    salts = []
    if knobs.min_sms is not None:
        gate = Knobs(min_sms=knobs.min_sms, gate_rocm_xpu=knobs.gate_rocm_xpu or None)
        salts.append(f"inductor_knobs-gate-{gate.digest()[:8]}")
    for name, row in KNOBS.items():
        if row.cache != "salted" or isinstance(row.changes, Gate):
            continue
        value = values.get(row.changes.key) if isinstance(row.changes, Config) else getattr(knobs, name)
        if value is not None:
            salts.append(f"inductor_knobs-{name}-{value_digest(value)}")
    return salts


def _check_release(knobs: Knobs, patches: TorchPatches, values: Mapping[str, Any], version: str) -> None:
    """Refuse a knob the installed torch release does not have (its row's ``since``/``until``), naming the releases
    that have it.

    Raises:
        NotSupportedOnThisTorch: such a knob is set, by name or as its ``config=`` key.
    """
    release = torch_compat.release_of(version)
    for name, row in KNOBS.items():
        if row.on(release):
            continue
        asked = getattr(knobs, name) is not None or (isinstance(row.changes, Config) and row.changes.key in values)
        if asked:
            raise NotSupportedOnThisTorch(
                f"{name} needs {row.releases()} (the releases that have it); the installed torch {version} does not. "
                "Nothing was applied"
            )


def _check_setting(patches: TorchPatches, key: str, value: object, version: str) -> None:
    """Whether this torch can set the process-global setting ``key`` to ``value`` (see changes.SETTINGS)."""
    setting = SETTINGS[key]
    problem = setting.problem(patches, value)
    if problem is None:
        return
    if setting.missing_feature:
        raise NotSupportedOnThisTorch(f"{key}={value!r} cannot be set on torch {version}: {problem}")
    raise InvalidKnobValue(f"{key}={value!r} is invalid on torch {version}: {problem}")


def _check_key(patches: TorchPatches, cfg: ModuleType, key: str, value: object, version: str) -> None:
    """The one type check of a config value, for named knobs and ``config=`` alike: against the type the
    installed config declares for ``key`` (not the type of its current value, which may be None)."""
    if key not in cfg._config:  # type: ignore[attr-defined]  # every release keeps its entries in _config
        keys = patches.config_keys(cfg)
        raise UnknownKnob(unknown_message(f"Inductor config key ({INDUCTOR_CONFIG})", key, keys).split(" Known:")[0])
    allowed = patches.declared_types(cfg, key)
    if allowed is None or patches.value_allowed(value, allowed):
        return
    raise InvalidKnobValue(
        f"{INDUCTOR_CONFIG}.{key}={value!r} is invalid on torch {version}: allowed {patches.describe_types(allowed)}"
    )


def _find_cutlass_for(patches: TorchPatches, cfg: ModuleType, backends: str, values: dict[str, Any], version: str) -> bool:
    """Find CUTLASS when the backends ask for it; return whether ATEN, the fallback, is left out.

    When CUTLASS is asked for and the configured directory holds no checkout, the CUTLASS directory
    key and a directory generated from ``nvidia-cutlass`` are added to ``values`` (see
    :func:`_cutlass_from_pip`), so the plan sets it like any other key.
    """
    names = backends.split(",")
    if "CUTLASS" in names:
        release = torch_compat.release_of(version)
        key = patches.cutlass_dir_key(release)
        found, where = patches.cutlass_available(cfg, release, str(values[key]) if key in values else None)
        if not found:
            # Added to ``values``: _validate builds both the ConfigChange (an undo record, reverted
            # exactly on exit) and the Asked record (enforced and attested inside every compile) from it.
            values[key] = _cutlass_from_pip(patches, cfg, backends, key, where, key in values, version)
    return "ATEN" not in names  # no fallback: plan() warns at every plan


def _cutlass_from_pip(
    patches: TorchPatches, cfg: ModuleType, backends: str, key: str, where: str, explicit: bool, version: str
) -> str:
    """The CUTLASS directory generated from an installed ``nvidia-cutlass``, for a plan that found no checkout.

    Changes nothing in torch (it may make the generated directory in the user's cache,
    :func:`inductor_knobs.core.cutlass.resolve`), so the check stays before the first change.

    Args:
        patches: the installed torch's patch module.
        cfg: ``torch._inductor.config``.
        backends: the ``gemm_backends`` knob's value, for messages.
        key: the config key torch reads the CUTLASS directory from (``cuda.cutlass_dir`` before 2.11,
            ``cutlass.cutlass_dir`` from 2.11: ``TorchPatches.cutlass_dir_key``).
        where: the directory torch would read now, which holds no checkout.
        explicit: the knobs' own ``config`` names ``where``; it is then never replaced.
        version: ``torch.__version__``, for messages.

    Returns:
        str: the generated directory, the value for ``key``.

    Raises:
        InvalidKnobValue: ``explicit``, or CUTLASS cannot come from ``nvidia-cutlass`` (not installed,
            incomplete, shadowed, or an unsafe cache: :class:`~inductor_knobs.errors.PipCutlassUnavailable`
            is the cause); the message says how to install it or point ``key`` at a checkout.
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
        # Not installed: say how to install it.  Installed but unusable: ``err`` says how to fix that.
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


def _on_disk(knobs: Knobs) -> bool:
    """Whether validating ``knobs`` looks at the file system (CUTLASS): such a plan is never cached."""
    return knobs.gemm_backends is not None and "CUTLASS" in knobs.gemm_backends.split(",")
