"""``Knobs``: the frozen, validated description of what to change in Inductor.

A ``Knobs`` value is pure data.  Building one validates everything that can be checked
without importing ``torch._inductor`` (types, ranges, GEMM backend names for the installed
torch release: :mod:`inductor_knobs.core.knobs`); :func:`inductor_knobs.core.plan.plan`
checks the rest against the live config before anything is changed.  ``None`` always means
"leave torch's value alone".  This module also defines what makes two knobs the same
(:meth:`Knobs.identity`), how two are layered (:meth:`Knobs.merged`), and how they are read from
``INDUCTOR_KNOBS_*`` variables (:meth:`Knobs.from_env`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from ..errors import InvalidKnobValue, UnknownKnob, torch_version, unknown_message

ENV_PREFIX = "INDUCTOR_KNOBS_"

#: Named bundles of knob defaults, for ``INDUCTOR_KNOBS_PRESET``; explicit knobs win over them.
PRESETS: dict[str, dict[str, Any]] = {
    "force_gemm_autotune": {"min_sms": 1, "max_autotune_gemm": True, "gemm_backends": "ATEN,TRITON"},
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: The Inductor config key that makes a compile bypass the FX graph and AOTAutograd caches (a knob whose row
#: says ``cache="bypass"`` sets it while it is on): ``force_disable_caches`` (``_inductor/config.py``; an alias of
#: ``torch.compiler.config.force_disable_caches`` from 2.6), read by ``FxGraphCache`` and ``AOTAutogradCache``.
CACHE_BYPASS_KEY = "force_disable_caches"

#: What a cache hit does to a knob (a row's ``cache``):
#: ``keyed``: torch's own cache keys cover its config keys, so a hit was built with the same value;
#: ``salted``: the keys do not cover it, so inductor_knobs adds a salt naming its value to every compile's keys;
#: ``bypass``: its effect happens only while Inductor generates code (trace files), so the caches are off while it is on;
#: ``runtime``: torch reads it when the compiled code runs, so a cached artifact gets it too;
#: ``none``: not a setting of torch (how the other knobs are applied).
CACHE_RULES = ("keyed", "salted", "bypass", "runtime", "none")


SEARCH_SPACES = ("DEFAULT", "EXHAUSTIVE")
#: ``torch.nn.attention.SDPBackend`` names a knob may list (the installed torch may lack some: checked when applied).
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH", "OVERRIDEABLE")
MAX_SMS = 1024


def fail(label: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")


def check_bool(label: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise fail(label, value, "True or False")
    return value


def check_min_sms(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SMS:
        raise fail(label, value, f"an int SM count from 1 to {MAX_SMS}")
    return value


def check_backends(label: str, value: object) -> str:
    names: list[str]
    if isinstance(value, str):
        names = [n.strip().upper() for n in value.split(",")]
    elif isinstance(value, Iterable):
        names = [str(n).strip().upper() for n in value]
    else:
        raise fail(label, value, "a comma-separated string or a list of backend names")
    names = list(dict.fromkeys(n for n in names if n))
    known = _known_backends()
    unknown = [n for n in names if known and n not in known]
    if not names or unknown:
        raise fail(label, value, f"a non-empty subset of {', '.join(sorted(known))}")
    return ",".join(names)


def _known_backends() -> frozenset[str]:
    from .torch_compat import release_of, select

    version = torch_version()
    if version == "not installed":
        return frozenset()
    return select(version, strict=False).gemm_backends(release_of(version))


def check_sdpa_backends(label: str, value: object) -> str:
    """SDPA backend names in priority order (``SDPBackend`` members or their names, any case), comma-joined."""
    if isinstance(value, str):
        items: list[object] = list(value.split(","))
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        items = [value]
    names = [str(getattr(i, "name", i)).strip().upper() for i in items]
    names = list(dict.fromkeys(n for n in names if n))
    if not names or any(n not in SDPA_BACKENDS for n in names):
        raise fail(label, value, f"a non-empty list of {', '.join(SDPA_BACKENDS)} (in priority order)")
    return ",".join(names)


def check_search_space(label: str, value: object) -> str:
    if not isinstance(value, str) or value.upper() not in SEARCH_SPACES:
        raise fail(label, value, " or ".join(SEARCH_SPACES))
    return value.upper()


def check_directory(label: str, value: object) -> str:
    """An absolute directory path that exists and is writable, or can be created (its nearest
    existing ancestor is a writable directory)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise fail(label, value, "a directory path")
    path = os.path.abspath(os.fspath(value))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    what = "is not a directory" if not os.path.isdir(probe) else None
    if what is None:
        import tempfile

        try:  # os.access says yes to root even on /proc: make (and remove) a directory to know
            os.rmdir(tempfile.mkdtemp(prefix=".inductor_knobs-probe-", dir=probe))
        except OSError as err:
            what = f"is not writable ({err.strerror})"
    if what is not None:
        raise fail(label, value, f"a directory that exists and is writable or can be created ({probe} {what})")
    return path


def check_trace(label: str, value: object) -> bool | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, os.PathLike)):
        return check_directory(label, value)
    raise fail(label, value, "True, False or a directory path for trace files")


def check_capture_sizes(label: str, value: object) -> tuple[int | tuple[int, ...], ...]:
    """``triton.cudagraph_capture_sizes``: the int keys CUDA graph trees record (one symbolic int input: an int
    each; several: a tuple of ints each), all >= 1; a list is read as a tuple, duplicates dropped."""
    allowed = "a non-empty tuple of positive ints (or of tuples of positive ints, one per dynamic int input)"
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise fail(label, value, allowed)
    sizes: list[int | tuple[int, ...]] = []
    for item in value:
        if _positive(item):
            size: int | tuple[int, ...] = item  # type: ignore[assignment]
        elif isinstance(item, (tuple, list)) and item and all(_positive(i) for i in item):
            size = tuple(item)
        else:
            raise fail(label, value, allowed)
        if size not in sizes:
            sizes.append(size)
    if not sizes:
        raise fail(label, value, allowed)
    return tuple(sizes)


def _positive(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool) and item >= 1


def check_lookup_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    from .lookup_table import load_table

    return load_table(label, value)


def check_on_mismatch(label: str, value: object) -> str:
    if not isinstance(value, str) or value.strip().lower() not in ("raise", "warn"):
        raise fail(label, value, "'raise' (KnobNotApplied) or 'warn' (KnobNotAppliedWarning)")
    return value.strip().lower()


def config_key(key: str) -> str:
    """An Inductor config key as torch spells it: ``-`` read as ``_``, as ``torch.compile(options=)`` does."""
    return key.replace("-", "_")


def check_positive_int(label: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(label, value, "a positive int")
    return value


def check_config(
    label: str, value: object, value_checks: Mapping[str, Callable[[str, object], Any]]
) -> tuple[tuple[str, Any], ...]:
    """``config=``: a mapping of dotted Inductor config keys to values, each key that a named knob sets checked by
    that knob's check (``value_checks``), sorted into pairs; types are checked against the installed config in plan."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already normalised (e.g. re-validated)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise fail(label, value, "a mapping of dotted Inductor config keys to values")
    out = {}
    for key, item in value.items():
        name = config_key(key)
        check = value_checks.get(name)
        out[name] = check(f"{label}[{name!r}]", item) if check is not None and item is not None else item
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Config:
    """A knob that sets Inductor config keys: ``key`` to the knob's value, plus what ``extra`` derives from it."""

    key: str
    extra: Callable[[Any], dict[str, Any]] | None = None

    def values(self, value: Any) -> dict[str, Any]:
        """The ``{dotted key: value}`` this knob sets for ``value``."""
        if self.extra is None:
            return {self.key: value}
        return self.extra(value)


@dataclass(frozen=True)
class Gate:
    """A knob of the ``torch._inductor.utils.is_big_gpu`` override (:mod:`inductor_knobs.core.gate`)."""


@dataclass(frozen=True)
class ProcessSetting:
    """A knob that is a process-global torch setting (:data:`inductor_knobs.core.changes.SETTINGS`)."""


@dataclass(frozen=True)
class Policy:
    """A knob that sets nothing in torch: how the other knobs are applied and checked."""


@dataclass(frozen=True)
class Knob:
    """One row of the knob table: everything the package knows about one knob.

    Attributes:
        check: ``(label, value) -> normalised value``; raises :class:`~inductor_knobs.errors.InvalidKnobValue`.
        changes: what it changes in torch: :class:`Config` keys, the :class:`Gate`, a :class:`ProcessSetting`, or
            nothing (:class:`Policy`).
        parse: ``(variable, text) -> value`` for its ``INDUCTOR_KNOBS_<NAME>`` variable (then ``check`` runs).
        since: the first torch release that has it (``"2.10"``), or None for every supported release.
        until: the last torch release that has it, or None.
        cache: what a cache hit does to it (:data:`CACHE_RULES`); the same rule is used for salting,
            attestation, a bundle's identity and a measurement's fingerprint.
        default: its value when not given (None: leave torch's value alone).
        summary: what it sets, one line for ``doctor`` and the reference table.
        values: what it accepts, for the reference table.
    """

    check: Callable[[str, object], Any]
    changes: Config | Gate | ProcessSetting | Policy
    parse: Callable[[str, str], Any]
    summary: str
    values: str = "bool"
    since: str | None = None
    until: str | None = None
    cache: str = "keyed"
    default: Any = None

    def on(self, release: str) -> bool:
        """Whether torch ``release`` (``"2.13"``) has this knob."""
        version = Version(release)
        return (self.since is None or version >= Version(self.since)) and (self.until is None or version <= Version(self.until))

    def releases(self) -> str:
        """The releases that have this knob, for messages: ``"torch 2.15 or newer"``, ``"torch 2.4 to 2.11"``."""
        return f"torch {self.since} or newer" if self.until is None else f"torch {self.since or '2.4'} to {self.until}"


def _parse_bool(var: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise fail(var, raw, "one of " + "/".join(sorted(_TRUE | _FALSE)))


def _parse_text(var: str, raw: str) -> str:
    return raw.strip()


def _parse_int(var: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise fail(var, raw, f"an int SM count from 1 to {MAX_SMS}") from None


def _parse_json(var: str, raw: str) -> Any:
    try:
        return json.loads(raw.strip())
    except json.JSONDecodeError as err:
        raise fail(var, raw, f'a JSON object such as {{"epilogue_fusion": false}} ({err})') from None


def _parse_trace(var: str, raw: str) -> bool | str:
    lowered = raw.strip().lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else raw.strip()


def _parse_sizes(var: str, raw: str) -> Any:
    text = raw.strip()
    try:  # "1,2,4,8", or JSON for tuples: "[[1, 2], [4, 8]]"
        return json.loads(text) if text.startswith("[") else [int(v) for v in text.split(",")]
    except ValueError:
        raise fail(var, raw, "comma-separated positive ints, or a JSON list such as [[1, 2], [4, 8]]") from None


def _parse_count(var: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise fail(var, raw, "a positive int") from None


def _trace_keys(value: Any) -> dict[str, Any]:
    keys: dict[str, Any] = {"trace.enabled": bool(value)}
    if isinstance(value, str):
        keys["trace.debug_dir"] = value
    return keys


def _check_config(label: str, value: object) -> tuple[tuple[str, Any], ...]:
    return check_config(label, value, VALUE_CHECKS)


def _check_debug_dir(label: str, value: object) -> str | None:
    return None if value is None else check_directory(label, value)


#: The knob table: one row per knob, in the order ``Knobs`` lists them.  Validation, apply and revert,
#: precedence, cache salting, attestation, ``INDUCTOR_KNOBS_*`` parsing, ``doctor`` and the reference table
#: all read these rows; nothing else lists knobs.  Release facts are in ``patches/features.py``.
KNOBS: dict[str, Knob] = {
    "min_sms": Knob(
        check_min_sms,
        Gate(),
        _parse_int,
        "the GEMM-template SM gate `is_big_gpu` opens at this many SMs (CUDA)",
        cache="salted",
        values="int SMs, 1..1024 (torch: 68)",
    ),
    "gate_rocm_xpu": Knob(check_bool, Gate(), _parse_bool, "`min_sms` applies to ROCm CUs and XPU subslices too", cache="salted"),
    "max_autotune": Knob(check_bool, Config("max_autotune"), _parse_bool, "`max_autotune`"),
    "max_autotune_gemm": Knob(check_bool, Config("max_autotune_gemm"), _parse_bool, "`max_autotune_gemm`"),
    "gemm_backends": Knob(
        check_backends,
        Config("max_autotune_gemm_backends"),
        _parse_text,
        "`max_autotune_gemm_backends`",
        values="names the installed torch knows: ATEN, TRITON, CUTLASS, CPP, CK, ... (by release)",
    ),
    "gemm_search_space": Knob(
        check_search_space,
        Config("max_autotune_gemm_search_space"),
        _parse_text,
        "`max_autotune_gemm_search_space`",
        values="DEFAULT or EXHAUSTIVE",
    ),
    "coordinate_descent_tuning": Knob(
        check_bool, Config("coordinate_descent_tuning"), _parse_bool, "`coordinate_descent_tuning`"
    ),
    "cudagraphs": Knob(check_bool, Config("triton.cudagraphs"), _parse_bool, "`triton.cudagraphs`"),
    "trace": Knob(
        check_trace,
        Config("trace.enabled", extra=_trace_keys),
        _parse_trace,
        "`trace.enabled` (a path also sets `trace.debug_dir`); compiles bypass the caches while it is on",
        cache="bypass",
        values="bool or a directory",
    ),
    "sdpa_backends": Knob(
        check_sdpa_backends,
        ProcessSetting(),
        _parse_text,
        "the SDPA backends and their priority order (`torch.backends.cuda.enable_*_sdp`; process-wide)",
        cache="salted",
        values="torch.nn.attention.SDPBackend names in priority order, e.g. FLASH_ATTENTION,MATH",
    ),
    "tunableop": Knob(
        check_bool,
        ProcessSetting(),
        _parse_bool,
        "`torch.cuda.tunable.enable` (process-wide; CUDA/ROCm builds)",
        cache="runtime",
    ),
    "cudnn_sdpa_avoid_recompile": Knob(
        check_bool,
        ProcessSetting(),
        _parse_bool,
        "the variable `TORCH_CUDNN_SDPA_AVOID_RECOMPILE` (read once per process by cuDNN attention)",
        since="2.9",
        cache="runtime",
    ),
    "cudagraph_capture_sizes": Knob(
        check_capture_sizes,
        Config("triton.cudagraph_capture_sizes"),
        _parse_sizes,
        "`triton.cudagraph_capture_sizes` (read at every call)",
        since="2.8",
        values="a tuple of positive ints, or of int tuples",
    ),
    "cudagraph_dynamic_shape_rerecord_limit": Knob(
        check_positive_int,
        Config("triton.cudagraph_dynamic_shape_rerecord_limit"),
        _parse_count,
        "`triton.cudagraph_dynamic_shape_rerecord_limit`: CUDA graphs recorded per function (read at every call)",
        since="2.15",
        values="a positive int",
    ),
    "lookup_table": Knob(
        check_lookup_table,
        Config("lookup_table.table"),
        _parse_text,
        "`lookup_table.table`, with torch's `LookupTableChoices` as the choices handler inside each compile (CUDA only)",
        since="2.10",
        cache="salted",
        values="torch's table: a mapping or a JSON file path",
    ),
    "config": Knob(
        _check_config,
        Policy(),
        _parse_json,
        "any other Inductor config key (a key a knob sets gets that knob's check and cache rule)",
        cache="none",
        default=(),
        values='`{"dotted.key": value}`, type-checked against the installed config',
    ),
    "on_mismatch": Knob(
        check_on_mismatch,
        Policy(),
        _parse_text,
        "what a knob that did not take effect does: `KnobNotApplied` or `KnobNotAppliedWarning`",
        cache="none",
        values="raise (default) or warn",
    ),
    "strict": Knob(
        check_bool,
        Policy(),
        _parse_bool,
        "refuse (True) or warn on an unsupported torch or a drifted `is_big_gpu`",
        cache="none",
        default=True,
    ),
}

#: Knob name -> the Inductor config key it sets (knobs of one key).
CONFIG_KEYS = {name: row.changes.key for name, row in KNOBS.items() if isinstance(row.changes, Config)}
#: Inductor config key -> the knob that sets it, so ``config={key: ...}`` gets the knob's check and cache rule.
KNOB_OF_KEY = {key: name for name, key in CONFIG_KEYS.items()}


#: Inductor config keys whose ``config=`` values get a check beyond torch's declared type: the check of the
#: knob that sets the key (``config={"max_autotune_gemm_backends": ...}`` is checked like ``gemm_backends=``).
VALUE_CHECKS: dict[str, Callable[[str, object], Any]] = {
    **{row.changes.key: row.check for row in KNOBS.values() if isinstance(row.changes, Config) and row.check is not check_bool},
    "trace.debug_dir": _check_debug_dir,
}
del VALUE_CHECKS["trace.enabled"]  # trace's check admits a path, which only the named knob turns into two keys


def knob_config(name: str, value: Any) -> dict[str, Any]:
    """The Inductor config keys the knob ``name`` sets to ``value`` (the cache bypass of a ``bypass`` row is added by
    :func:`inductor_knobs.core.plan.config_values`, for the knob and its ``config=`` spelling alike).

    Args:
        name (str): a knob of :data:`KNOBS`.
        value (Any): its (checked) value, not None.

    Returns:
        dict[str, Any]: ``{dotted key: value}``; empty for a knob that sets no config key.
    """
    row = KNOBS[name]
    if not isinstance(row.changes, Config):
        return {}
    return row.changes.values(value)


def reference_table() -> str:
    """The knob table as the Markdown table of ``docs/reference.md`` (a test keeps the two equal).

    Returns:
        str: one line per row: the knob, what it sets, what it accepts, the releases that have it, its cache rule,
        and its ``INDUCTOR_KNOBS_*`` variable.
    """
    lines = ["| knob | sets | values | torch | cache hit | variable |", "|---|---|---|---|---|---|"]
    for name, row in KNOBS.items():
        releases = f"{row.since or '2.4'}–{row.until}" if row.until else f"{row.since}+" if row.since else "all"
        var = f"`{ENV_PREFIX}{name.upper()}`"
        lines.append(f"| `{name}` | {row.summary} | {row.values} | {releases} | {row.cache} | {var} |")
    return "\n".join(lines)


def cache_rule(key: str) -> str:
    """The cache rule (:data:`CACHE_RULES`) of an Inductor config key: its knob's, else ``keyed``."""
    name = KNOB_OF_KEY.get(key)
    return KNOBS[name].cache if name is not None else "keyed"


class Knobs:
    """What to change in TorchInductor; validated on construction, immutable, hashable.

    Equality, ``hash()`` and :meth:`digest` have one definition, :meth:`identity`: the knobs that
    are set (:meth:`to_dict`), each value with its type, so ``config={"k": 1}``, ``{"k": True}``
    and ``{"k": 1.0}`` are three different knobs (torch's config types tell them apart too), as
    are a list and a tuple.  :meth:`merged` (what ``ik.knobs(spec, **keywords)`` uses) layers the
    same data per Inductor config key.

    Attributes:
        min_sms: open the GEMM-template SM gate (``torch._inductor.utils.is_big_gpu``) for
            CUDA devices with at least this many SMs (int, 1..1024).  torch's own threshold
            is 68 (2.4+).  None leaves the gate alone.
        gate_rocm_xpu: apply ``min_sms`` to ROCm (compute units) and XPU (subslices) too;
            by default they keep torch's own rule (ROCm: by arch, 2.6+; XPU: 16, 2.7+).
        max_autotune: ``torch._inductor.config.max_autotune``.
        max_autotune_gemm: ``max_autotune_gemm`` (GEMM autotuning without the rest of max-autotune).
        gemm_backends: ``max_autotune_gemm_backends``, e.g. ``"ATEN,TRITON"``; names must be
            ones the installed torch knows (ATEN, TRITON, CUTLASS, CPP, CK, …).
        gemm_search_space: ``max_autotune_gemm_search_space``: ``"DEFAULT"`` or ``"EXHAUSTIVE"``.
        coordinate_descent_tuning: ``coordinate_descent_tuning``.
        cudagraphs: ``triton.cudagraphs``.
        trace: ``trace.enabled``; a path also sets ``trace.debug_dir``.
        sdpa_backends: the scaled-dot-product-attention backends torch may use, in priority order
            (``"FLASH_ATTENTION,EFFICIENT_ATTENTION,MATH"``; names of ``torch.nn.attention.SDPBackend``):
            exactly these are enabled and tried in this order, as ``sdpa_kernel(..., set_priority=True)``
            does (the order from torch 2.6, where torch has a priority order).  Leaving out
            ``CUDNN_ATTENTION`` avoids cuDNN's execution plan per exact input shape.  Process-wide, like
            torch's own setting (see :mod:`inductor_knobs.core.changes`).
        tunableop: ``torch.cuda.tunable.enable`` (TunableOp tunes each new GEMM shape on first use).
            Process-wide; CUDA/ROCm builds only.
        cudnn_sdpa_avoid_recompile: ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` (torch 2.9+): cuDNN attention
            rounds sequence lengths up to powers of two in its plan cache, so a new length rarely builds a
            plan, at some cost per steady call.  torch reads the variable once per process, at its first
            dense cuDNN attention call, and keeps it: a block refuses to change it once CUDA is initialised
            (:class:`~inductor_knobs.errors.SettingAlreadyRead`) and warns on exit if torch may have read the
            block's value (:class:`~inductor_knobs.errors.SettingKeptWarning`).  Only calls without an
            attention bias on BSHD q/k/v take the path.  Process-wide (see
            :mod:`inductor_knobs.core.changes`).
        cudagraph_capture_sizes: ``triton.cudagraph_capture_sizes`` (torch 2.8+): the dynamic int sizes
            CUDA graph trees record (a tuple of ints, or of int tuples for several dynamic ints); others run
            without a graph.  Inductor reads it at every *call* of the compiled function, on the calling
            thread, so hold it around the calls (or set it process-wide), not only the compile.
        lookup_table: ``lookup_table.table`` (torch 2.10+): torch's GEMM lookup table, a mapping or a JSON
            file path (what ``ik.record_autotune(...).write_lookup_table`` writes).  Inside each compile
            ``LookupTableChoices`` is made Inductor's choices handler, so the table is used.  CUDA only; an
            entry applies only to a template in use, so Triton entries need max-autotune(-gemm), TRITON
            among the backends and the SM gate open (below 68 SMs: ``min_sms``).
        config: any other Inductor config, ``{"dotted.key": value}``, type-checked against
            the installed config when applied.
        on_mismatch: what happens when a knob did not take effect inside a compile (a forcing
            env var, a torch 2.15 config implication, a foreign ``__setattr__``): ``"raise"``
            (None, the default: :class:`~inductor_knobs.errors.KnobNotApplied`) or ``"warn"``
            (:class:`~inductor_knobs.errors.KnobNotAppliedWarning`).
        strict: refuse (True, default) or warn (False) when the installed torch or a patched
            function is not one inductor_knobs recognises.

    Raises:
        InvalidKnobValue: a value of the wrong type or outside its range.
    """

    __slots__ = ("_identity", "_values")

    def __init__(self, **kwargs: Any) -> None:
        values = {}
        for name, row in KNOBS.items():
            value = kwargs.get(name, row.default)
            if name == "config" and value is None:
                value = ()  # "no extra config", like the default
            if value is not None and not (name == "config" and value == ()):
                value = row.check(name, value)
            values[name] = value
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_identity", None)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(unknown_message("knob", name, KNOBS)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to knob {name!r}: Knobs are immutable (build new ones)")

    def __repr__(self) -> str:
        return f"Knobs({', '.join(f'{k}={v!r}' for k, v in self.to_dict().items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.to_dict(),))

    def identity(self) -> str:
        """The canonical text of these knobs, on which ``==``, ``hash()`` and :meth:`digest` are all defined.

        It is the JSON of :meth:`to_dict` with sorted keys, where every value keeps its type:
        JSON already tells ``true``, ``1`` and ``1.0`` apart; a tuple, a set, a dict with
        non-string keys and any other object are tagged with their type (other objects by their
        ``repr``).  For knobs whose values are JSON's own types the text, and so :meth:`digest`,
        is unchanged from earlier releases (only tuples and other tagged values digest differently).

        Returns:
            str: the same text for equal knobs in any process.
        """
        cached: str | None = object.__getattribute__(self, "_identity")
        if cached is None:
            cached = json.dumps(canonical_json(self.to_dict()), sort_keys=True)
            object.__setattr__(self, "_identity", cached)  # a cache, not a field: frozen data stays frozen
        return cached

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Knobs):
            return NotImplemented
        return self is other or self.identity() == other.identity()

    def __hash__(self) -> int:
        return hash(self.identity())

    def __new__(cls, *args: Any, **kwargs: Any) -> Knobs:
        # Checked here, before the dataclass __init__, so a typo gets "did you mean", not a bare TypeError.
        if args:
            raise InvalidKnobValue(
                f"Knobs{args!r}: knobs are keyword arguments only on torch {torch_version()}, "
                f"e.g. Knobs(min_sms=40); the knobs are {', '.join(cls.fields())}"
            )
        for name in kwargs:
            if name not in cls.fields():
                raise UnknownKnob(unknown_message("knob", name, cls.fields()))
        return super().__new__(cls)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The knob names, in declaration order."""
        return tuple(KNOBS)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Knobs:
        """Like ``Knobs(**kwargs)`` but an unknown name gets "did you mean" help.

        Raises:
            UnknownKnob: a keyword is not a knob.
            InvalidKnobValue: a value is invalid.
        """
        for name in kwargs:
            if name not in cls.fields():
                raise UnknownKnob(unknown_message("knob", name, cls.fields()))
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The knobs that are set (not None), with ``config`` as a dict; ``strict`` only when False."""
        out: dict[str, Any] = {}
        for name, value in object.__getattribute__(self, "_values").items():
            if name == "config":
                if value:
                    out[name] = dict(value)
            elif name == "strict":
                if not value:
                    out[name] = False
            elif value is not None:
                out[name] = value
        return out

    def digest(self) -> str:
        """16 hex digits that identify these knobs (stable across processes and runs): the SHA-256 of :meth:`identity`."""
        return hashlib.sha256(self.identity().encode()).hexdigest()[:16]

    def merged(self, other: Knobs) -> Knobs:
        """These knobs with everything ``other`` sets taken from ``other``, layered per Inductor config key.

        A key ``other`` sets wins however either side spells it: a named knob
        (``max_autotune=False``, ``gemm_backends=...``) or ``config={"max_autotune": ...}``.  A named
        knob of ``self`` whose key ``other`` sets is dropped (the keys of it that ``other`` leaves
        alone are kept as ``config`` entries: ``trace="/dir"`` under ``trace=True`` keeps
        ``trace.debug_dir``); knobs that set no config key (``min_sms``, ``on_mismatch`` …) are
        replaced by ``other``'s; ``strict`` is True only when both are.  So for two valid knobs,
        ``config_values(a.merged(b)) == {**config_values(a), **config_values(b)}``
        (:func:`inductor_knobs.core.plan.config_values`) but for the cache bypass, which follows the merged
        value of the key that asks for it (``trace=False`` over ``trace=True``: the caches are on).

        Args:
            other (Knobs): the knobs that win (``ik.knobs(spec, **keywords)``: the keywords).

        Returns:
            Knobs: the merged knobs, validated again.

        Raises:
            InvalidKnobValue: a merged value is invalid (it cannot be, for two valid knobs).
        """
        mine, theirs = self.to_dict(), other.to_dict()
        my_config, their_config = mine.pop("config", {}), theirs.pop("config", {})
        mine.pop("strict", None)
        theirs.pop("strict", None)
        taken = set(their_config)
        for name, value in theirs.items():
            taken.update(knob_config(name, value))
        named: dict[str, Any] = {}
        config: dict[str, Any] = {}
        for name, value in mine.items():
            keys = knob_config(name, value)
            if name in theirs or taken.intersection(keys):
                config.update((key, v) for key, v in keys.items() if key not in taken)
            else:
                named[name] = value
        config.update((key, v) for key, v in my_config.items() if key not in taken)
        config.update(their_config)
        return Knobs(**named, **theirs, config=config, strict=self.strict and other.strict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Knobs:
        """Read ``INDUCTOR_KNOBS_<KNOB>`` variables (and ``INDUCTOR_KNOBS_PRESET``).

        Booleans accept 1/0/true/false/yes/no/on/off (any case); ``INDUCTOR_KNOBS_TRACE`` also
        accepts a directory; ``INDUCTOR_KNOBS_CONFIG`` is a JSON object.  A preset supplies
        defaults that explicit variables override.

        Raises:
            UnknownKnob: an ``INDUCTOR_KNOBS_*`` variable or preset that does not exist.
            InvalidKnobValue: a value that does not parse or is out of range; the message
                names the variable.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        preset = env.get(ENV_PREFIX + "PRESET", "").strip()
        if preset:
            if preset not in PRESETS:
                raise UnknownKnob(unknown_message(f"preset ({ENV_PREFIX}PRESET)", preset, PRESETS))
            values.update(PRESETS[preset])
        names = {ENV_PREFIX + n.upper(): n for n in cls.fields()}
        for var, raw in env.items():
            if not var.startswith(ENV_PREFIX) or var in _NON_KNOB_VARS or not raw.strip():
                continue  # an empty value means unset
            if var not in names:
                raise UnknownKnob(unknown_message("variable", var, [*names, *_NON_KNOB_VARS]))
            name = names[var]
            values[name] = KNOBS[name].check(var, KNOBS[name].parse(var, raw))
        return cls(**values)


#: Variables under the prefix that are not knobs.
EMULATE_SMS_VAR = ENV_PREFIX + "EMULATE_SMS"
EMULATE_SHARED_MEMORY_VAR = ENV_PREFIX + "EMULATE_SHARED_MEMORY"
_NON_KNOB_VARS = (ENV_PREFIX + "PRESET", ENV_PREFIX + "DISABLE", EMULATE_SMS_VAR, EMULATE_SHARED_MEMORY_VAR)


def _rebuild(values: dict[str, Any]) -> Knobs:
    return Knobs(**values)


def value_digest(value: Any) -> str:
    """8 hex digits that name one knob value, from the same canonical JSON as :meth:`Knobs.identity`."""
    return hashlib.sha256(json.dumps(canonical_json(value), sort_keys=True).encode()).hexdigest()[:8]


#: Prefix of the type tags in :func:`canonical_json`; no config key starts with it (a dict key that does is tagged).
_TAG = "\x00"


def canonical_json(value: Any) -> Any:
    """``value`` as JSON data that keeps every type apart (see :meth:`Knobs.identity`)."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):  # JSON writes True, 1 and 1.0 differently
        return value
    if kind is list:
        return [canonical_json(v) for v in value]
    if kind is dict and all(type(k) is str and not k.startswith(_TAG) for k in value):
        return {k: canonical_json(v) for k, v in value.items()}
    if kind is tuple:
        return {_TAG + "tuple": [canonical_json(v) for v in value]}
    if kind is dict:
        items = [[canonical_json(k), canonical_json(v)] for k, v in value.items()]
        return {_TAG + "dict": sorted(items, key=lambda kv: json.dumps(kv, sort_keys=True))}
    if kind in (set, frozenset):
        return {_TAG + kind.__name__: sorted((canonical_json(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))}
    return {_TAG + f"{kind.__module__}.{kind.__qualname__}": repr(value)}
