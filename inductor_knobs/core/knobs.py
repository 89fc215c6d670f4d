"""``Knobs``: the frozen, validated description of what to change in Inductor.

Owns the knob table (:data:`KNOBS`): each knob's check (without importing ``torch._inductor``; ``plan``
checks the rest), its ``INDUCTOR_KNOBS_*`` parsing, its cache rule, and equality and layering of ``Knobs``.
``None`` means "leave torch's value alone".  GEMM backend names per release: ``patches/gemm_backends.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
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

#: The config key that makes a compile bypass the FX graph and AOTAutograd caches (``_inductor/config.py``;
#: an alias of ``torch.compiler.config.force_disable_caches`` from 2.6).
CACHE_BYPASS_KEY = "force_disable_caches"

#: What a cache hit does to a knob (a row's ``cache``): ``keyed``: torch's cache keys cover it; ``salted``:
#: they do not, so a salt naming its value is added to every compile's keys; ``bypass``: it acts only while
#: code is generated, so the caches are off while it is on; ``runtime``: read when compiled code runs;
#: ``none``: not a torch setting.
CACHE_RULES = ("keyed", "salted", "bypass", "runtime", "none")


SEARCH_SPACES = ("DEFAULT", "EXHAUSTIVE")
#: ``torch.nn.attention.SDPBackend`` names a knob may list (the installed torch may lack some: checked when applied).
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH", "OVERRIDEABLE")
MAX_SMS = 1024


def fail(label: str, value: object, allowed: str) -> InvalidKnobValue:
    return InvalidKnobValue(f"{label}={value!r} is invalid on torch {torch_version()}: allowed {allowed}")


def _checker(ok: Callable[[Any], bool], allowed: str, normal: Callable[[Any], Any] = lambda v: v) -> Callable[[str, object], Any]:
    """A knob check: ``normal(value)`` when ``ok(value)``, else :func:`fail` with ``allowed``."""

    def check(label: str, value: object) -> Any:
        if not ok(value):
            raise fail(label, value, allowed)
        return normal(value)

    return check


def _positive(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool) and item >= 1


check_bool = _checker(lambda v: isinstance(v, bool), "True or False")
check_min_sms = _checker(lambda v: _positive(v) and v <= MAX_SMS, f"an int SM count from 1 to {MAX_SMS}")
check_positive_int = _checker(_positive, "a positive int")
check_search_space = _checker(lambda v: isinstance(v, str) and v.upper() in SEARCH_SPACES, " or ".join(SEARCH_SPACES), str.upper)
check_on_mismatch = _checker(
    lambda v: isinstance(v, str) and v.strip().lower() in ("raise", "warn"),
    "'raise' (KnobNotApplied) or 'warn' (KnobNotAppliedWarning)",
    lambda v: v.strip().lower(),
)


def _names(value: Iterable[Any], name: Callable[[Any], object] = str) -> list[str]:
    """Upper-case names from a comma-separated string or an iterable, deduplicated, blanks dropped."""
    items = value.split(",") if isinstance(value, str) else value
    return list(dict.fromkeys(n for n in (str(name(i)).strip().upper() for i in items) if n))


def check_backends(label: str, value: object) -> str:
    if not isinstance(value, Iterable):
        raise fail(label, value, "a comma-separated string or a list of backend names")
    names = _names(value)
    from .torch_compat import release_of, select

    version = torch_version()
    known = frozenset() if version == "not installed" else select(version, strict=False).gemm_backends(release_of(version))
    unknown = [n for n in names if known and n not in known]
    if not names or unknown:
        raise fail(label, value, f"a non-empty subset of {', '.join(sorted(known))}")
    return ",".join(names)


def check_sdpa_backends(label: str, value: object) -> str:
    """SDPA backend names in priority order (``SDPBackend`` members or their names, any case), comma-joined."""
    names = _names(value if isinstance(value, Iterable) else [value], lambda i: getattr(i, "name", i))
    if not names or any(n not in SDPA_BACKENDS for n in names):
        raise fail(label, value, f"a non-empty list of {', '.join(SDPA_BACKENDS)} (in priority order)")
    return ",".join(names)


def check_directory(label: str, value: object) -> str:
    """An absolute directory path that exists and is writable, or whose nearest existing ancestor is."""
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
    """Ints >= 1 (one dynamic int input) or tuples of them (several), a list read as a tuple, duplicates dropped."""
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


def check_lookup_table(label: str, value: object) -> dict[str, list[dict[str, Any]]]:
    from .lookup_table import load_table

    return load_table(label, value)


def config_key(key: str) -> str:
    """An Inductor config key as torch spells it: ``-`` read as ``_``, as ``torch.compile(options=)`` does."""
    return key.replace("-", "_")


def check_config(label: str, value: object) -> tuple[tuple[str, Any], ...]:
    """``config=`` as sorted ``(key, value)`` pairs, a key a knob sets checked by that knob's check (:data:`VALUE_CHECKS`)."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already normalised (e.g. re-validated)
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        raise fail(label, value, "a mapping of dotted Inductor config keys to values")
    out = {}
    for key, item in value.items():
        name = config_key(key)
        if isinstance(item, float) and math.isnan(item):  # NaN != NaN: it could never read back as set
            raise fail(f"{label}[{name!r}]", item, "a number (not NaN)")
        check = VALUE_CHECKS.get(name)
        out[name] = check(f"{label}[{name!r}]", item) if check is not None and item is not None else item
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Config:
    """A knob that sets Inductor config ``key`` to its value, or the keys ``extra(value)`` returns."""

    key: str
    extra: Callable[[Any], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Gate:
    """A knob of the ``torch._inductor.utils.is_big_gpu`` override (:mod:`inductor_knobs.core.gate`)."""


@dataclass(frozen=True)
class ProcessSetting:
    """A knob that is a process-global torch setting (:data:`inductor_knobs.core.changes.SETTINGS`)."""


@dataclass(frozen=True)
class Policy:
    """A knob that sets nothing in torch: how the other knobs are applied and checked."""


def _parse_bool(var: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise fail(var, raw, "one of " + "/".join(sorted(_TRUE | _FALSE)))


def _parse_text(var: str, raw: str) -> str:
    return raw.strip()


def _int_parser(allowed: str) -> Callable[[str, str], int]:
    def parse(var: str, raw: str) -> int:
        text = raw.strip()
        if not re.fullmatch(r"[+-]?[0-9]+", text):  # int() would also take "4_0" and other scripts' digits
            raise fail(var, raw, allowed)
        return int(text)

    return parse


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a key given twice: {sorted({key for key in keys if keys.count(key) > 1})}")
    return dict(pairs)


def _parse_json(var: str, raw: str) -> Any:
    try:
        value = json.loads(raw.strip(), object_pairs_hook=_unique_keys)
        if isinstance(value, dict) and len({config_key(key) for key in value}) != len(value):
            raise ValueError("a config key given twice, spelled with '-' and with '_'")
        return value
    except (ValueError, RecursionError) as err:  # JSONDecodeError, an int past Python's digit limit, deep nesting
        raise fail(var, raw, f'a JSON object such as {{"epilogue_fusion": false}} ({type(err).__name__}: {err})') from None


def _parse_trace(var: str, raw: str) -> bool | str:
    lowered = raw.strip().lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else raw.strip()


def _parse_sizes(var: str, raw: str) -> Any:
    text = raw.strip()
    try:  # "1,2,4,8", or JSON for tuples: "[[1, 2], [4, 8]]"
        return json.loads(text) if text.startswith("[") else [int(v) for v in text.split(",")]
    except (ValueError, RecursionError):
        raise fail(var, raw, "comma-separated positive ints, or a JSON list such as [[1, 2], [4, 8]]") from None


@dataclass(frozen=True)
class Knob:
    """One row of the knob table: what it ``changes`` in torch, ``summary`` and ``values`` for the reference table,
    ``check(label, value)`` (normalises or raises ``InvalidKnobValue``), ``parse(variable, text)`` for its variable,
    the first and last releases that have it (``since``, ``until``), its :data:`CACHE_RULES` entry, its ``default``."""

    changes: Config | Gate | ProcessSetting | Policy
    summary: str
    check: Callable[[str, object], Any] = check_bool
    parse: Callable[[str, str], Any] = _parse_bool
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


def _trace_keys(value: Any) -> dict[str, Any]:
    return {"trace.enabled": bool(value), **({"trace.debug_dir": value} if isinstance(value, str) else {})}


def _check_debug_dir(label: str, value: object) -> str | None:
    return None if value is None else check_directory(label, value)


#: The knob table, in the order ``Knobs`` lists them; nothing else lists knobs.
KNOBS: dict[str, Knob] = {
    "min_sms": Knob(
        Gate(),
        "the GEMM-template SM gate `is_big_gpu` opens at this many SMs (CUDA)",
        check_min_sms,
        _int_parser(f"an int SM count from 1 to {MAX_SMS}"),
        cache="salted",
        values="int SMs, 1..1024 (torch: 68)",
    ),
    "gate_rocm_xpu": Knob(Gate(), "`min_sms` applies to ROCm CUs and XPU subslices too", cache="salted"),
    "max_autotune": Knob(Config("max_autotune"), "`max_autotune`"),
    "max_autotune_gemm": Knob(Config("max_autotune_gemm"), "`max_autotune_gemm`"),
    "gemm_backends": Knob(
        Config("max_autotune_gemm_backends"),
        "`max_autotune_gemm_backends`",
        check_backends,
        _parse_text,
        values="names the installed torch knows: ATEN, TRITON, CUTLASS, CPP, CK, ... (by release)",
    ),
    "gemm_search_space": Knob(
        Config("max_autotune_gemm_search_space"),
        "`max_autotune_gemm_search_space`",
        check_search_space,
        _parse_text,
        values="DEFAULT or EXHAUSTIVE",
    ),
    "coordinate_descent_tuning": Knob(Config("coordinate_descent_tuning"), "`coordinate_descent_tuning`"),
    "cudagraphs": Knob(Config("triton.cudagraphs"), "`triton.cudagraphs`"),
    "trace": Knob(
        Config("trace.enabled", extra=_trace_keys),
        "`trace.enabled` (a path also sets `trace.debug_dir`); compiles bypass the caches while it is on",
        check_trace,
        _parse_trace,
        cache="bypass",
        values="bool or a directory",
    ),
    "sdpa_backends": Knob(
        ProcessSetting(),
        "the SDPA backends and their priority order (`torch.backends.cuda.enable_*_sdp`; process-wide)",
        check_sdpa_backends,
        _parse_text,
        cache="salted",
        values="torch.nn.attention.SDPBackend names in priority order, e.g. FLASH_ATTENTION,MATH",
    ),
    "tunableop": Knob(ProcessSetting(), "`torch.cuda.tunable.enable` (process-wide; CUDA/ROCm builds)", cache="runtime"),
    "cudnn_sdpa_avoid_recompile": Knob(
        ProcessSetting(),
        "the variable `TORCH_CUDNN_SDPA_AVOID_RECOMPILE` (read once per process by cuDNN attention)",
        since="2.9",
        cache="runtime",
    ),
    "cudagraph_capture_sizes": Knob(
        Config("triton.cudagraph_capture_sizes"),
        "`triton.cudagraph_capture_sizes` (read at every call)",
        check_capture_sizes,
        _parse_sizes,
        since="2.8",
        values="a tuple of positive ints, or of int tuples",
    ),
    "cudagraph_dynamic_shape_rerecord_limit": Knob(
        Config("triton.cudagraph_dynamic_shape_rerecord_limit"),
        "`triton.cudagraph_dynamic_shape_rerecord_limit`: CUDA graphs recorded per function (read at every call)",
        check_positive_int,
        _int_parser("a positive int"),
        since="2.15",
        values="a positive int",
    ),
    "keep_static_cubin_raw": Knob(
        Config("keep_static_cubin_raw"),
        "`keep_static_cubin_raw`: statically launched Triton kernels keep their cubin in cache entries, so a cache "
        "restored on another host loads them without compiling (CUDA)",
        since="2.13",
    ),
    "lookup_table": Knob(
        Config("lookup_table.table"),
        "`lookup_table.table`, with torch's `LookupTableChoices` as the choices handler inside each compile (CUDA only)",
        check_lookup_table,
        _parse_text,
        since="2.10",
        cache="salted",
        values="torch's table: a mapping or a JSON file path",
    ),
    "config": Knob(
        Policy(),
        "any other Inductor config key (a key a knob sets gets that knob's check and cache rule)",
        check_config,
        _parse_json,
        cache="none",
        default=(),
        values='`{"dotted.key": value}`, type-checked against the installed config',
    ),
    "on_mismatch": Knob(
        Policy(),
        "what a knob that did not take effect does: `KnobNotApplied` or `KnobNotAppliedWarning`",
        check_on_mismatch,
        _parse_text,
        cache="none",
        values="raise (default) or warn",
    ),
    "strict": Knob(
        Policy(), "refuse (True) or warn on an unsupported torch or a drifted `is_big_gpu`", cache="none", default=True
    ),
}

#: Knob name -> the Inductor config key it sets (knobs of one key).
CONFIG_KEYS = {name: row.changes.key for name, row in KNOBS.items() if isinstance(row.changes, Config)}
#: Inductor config key -> the knob that sets it, so ``config={key: ...}`` gets the knob's check and cache rule.
KNOB_OF_KEY = {key: name for name, key in CONFIG_KEYS.items()}

#: Config keys whose ``config=`` values get the check of the knob that sets them, beyond torch's declared type.
VALUE_CHECKS: dict[str, Callable[[str, object], Any]] = {
    **{row.changes.key: row.check for row in KNOBS.values() if isinstance(row.changes, Config) and row.check is not check_bool},
    "trace.debug_dir": _check_debug_dir,
}
del VALUE_CHECKS["trace.enabled"]  # trace's check admits a path, which only the named knob turns into two keys


def knob_config(name: str, value: Any) -> dict[str, Any]:
    """The Inductor ``{dotted key: value}`` the knob ``name`` sets to ``value`` (not None); empty for a non-config knob.

    The cache bypass of a ``bypass`` row is added by :func:`inductor_knobs.core.plan.config_values`.
    """
    changes = KNOBS[name].changes
    if not isinstance(changes, Config):
        return {}
    return {changes.key: value} if changes.extra is None else changes.extra(value)


def reference_table() -> str:
    """The knob table as the Markdown table of ``docs/reference.md`` (a test keeps the two equal)."""
    lines = ["| knob | sets | values | torch | cache hit | variable |", "|---|---|---|---|---|---|"]
    for name, row in KNOBS.items():
        releases = f"{row.since or '2.4'}–{row.until}" if row.until else f"{row.since}+" if row.since else "all"
        var = f"`{ENV_PREFIX}{name.upper()}`"
        lines.append(f"| `{name}` | {row.summary} | {row.values} | {releases} | {row.cache} | {var} |")
    return "\n".join(lines)


def cache_rule(key: str) -> str:
    """The cache rule (:data:`CACHE_RULES`) of an Inductor config key: its knob's, else ``keyed``."""
    return KNOBS[KNOB_OF_KEY[key]].cache if key in KNOB_OF_KEY else "keyed"


class Knobs:
    """What to change in TorchInductor: keyword arguments only, validated on construction, immutable, hashable.

    A knob left out is None: torch's value stays.  ``==``, ``hash()`` and :meth:`digest` follow :meth:`identity`,
    which keeps value types apart.  :func:`reference_table` says what each knob sets and accepts, and since when.

    Attributes:
        min_sms (int, 1..1024): open the GEMM-template SM gate ``is_big_gpu`` (torch: 68) at this many CUDA SMs.
        gate_rocm_xpu (bool): apply ``min_sms`` to ROCm CUs and XPU subslices too (else torch's own rule).
        max_autotune, max_autotune_gemm, coordinate_descent_tuning (bool): those Inductor config keys.
        cudagraphs (bool): ``triton.cudagraphs``.
        gemm_backends (str or list): ``max_autotune_gemm_backends`` names the installed torch knows (``"ATEN,TRITON"``).
        gemm_search_space (str): ``max_autotune_gemm_search_space``: ``"DEFAULT"`` or ``"EXHAUSTIVE"``.
        trace (bool or path): ``trace.enabled``; a path also sets ``trace.debug_dir``.
        sdpa_backends (str or list): ``SDPBackend`` names, the only ones enabled, tried in this order (2.6+; process-wide).
        tunableop (bool): ``torch.cuda.tunable.enable`` (process-wide; CUDA/ROCm builds).
        cudnn_sdpa_avoid_recompile (bool): ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` (2.9+), read once per process: refused
            once CUDA is initialised (``SettingAlreadyRead``); ``SettingKeptWarning`` on exit if torch may have read it.
        cudagraph_capture_sizes (tuple of ints or of int tuples): ``triton.cudagraph_capture_sizes`` (2.8+), read
            at every call of the compiled function on the calling thread: hold it around the calls too.
        cudagraph_dynamic_shape_rerecord_limit (int >= 1): that ``triton`` key (2.15+), read at every call.
        keep_static_cubin_raw (bool): that key (2.13+): statically launched kernels keep their cubin in cache entries.
        lookup_table (mapping or JSON path): ``lookup_table.table`` (2.10+, CUDA), ``LookupTableChoices`` made the
            choices handler in each compile; Triton entries need max-autotune, TRITON and the gate open.
        config (mapping): other Inductor config, ``{"dotted.key": value}``, type-checked when applied.
        on_mismatch (str): a knob that did not take effect: ``"raise"`` (default; ``KnobNotApplied``) or ``"warn"``.
        strict (bool): refuse (True, default) or warn on an unrecognised torch or patched function.

    Raises:
        UnknownKnob: an unknown keyword (with "did you mean").
        InvalidKnobValue: a positional argument, or a value of the wrong type or outside its range.
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
        """The sorted-key JSON of :meth:`to_dict` (tuples, sets, other objects tagged by type): same in any process."""
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
        # Checked here, before __init__, so a typo gets "did you mean", not a bare TypeError.
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
        """``Knobs(**kwargs)``: raises ``UnknownKnob`` (with "did you mean") or ``InvalidKnobValue``."""
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
        """These knobs under ``other`` (Knobs), layered per Inductor config key; ``ik.knobs(spec, **keywords)`` uses it.

        A key ``other`` sets wins, by named knob or ``config=``; a named knob of ``self`` that loses a key keeps its
        other keys as ``config`` entries; non-config knobs are replaced; ``strict`` is True only when both are.
        So ``config_values(a.merged(b)) == {**config_values(a), **config_values(b)}`` but for the cache bypass.
        Returns the merged ``Knobs``, validated again (``InvalidKnobValue`` cannot arise from two valid knobs).
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
        """Read ``INDUCTOR_KNOBS_<KNOB>`` variables and ``INDUCTOR_KNOBS_PRESET`` (defaults that variables override).

        Booleans accept 1/0/true/false/yes/no/on/off (any case); ``..._TRACE`` also a directory; ``..._CONFIG``
        is a JSON object; an empty value means unset.

        Args:
            environ (Mapping[str, str] | None): the variables; None reads ``os.environ``.

        Raises:
            UnknownKnob: an ``INDUCTOR_KNOBS_*`` variable or preset that does not exist.
            InvalidKnobValue: a value that does not parse or is out of range (the message names the variable).
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        preset = env.get(ENV_PREFIX + "PRESET", "").strip()
        if preset and preset not in PRESETS:
            raise UnknownKnob(unknown_message(f"preset ({ENV_PREFIX}PRESET)", preset, PRESETS))
        names = {ENV_PREFIX + n.upper(): n for n in cls.fields()}
        for var, raw in env.items():
            if not var.startswith(ENV_PREFIX) or var in _NON_KNOB_VARS or not raw.strip():
                continue
            if var not in names:
                raise UnknownKnob(unknown_message("variable", var, [*names, *_NON_KNOB_VARS]))
            name = names[var]
            values[name] = _checked_as_written(var, raw, KNOBS[name].parse(var, raw), KNOBS[name].check)
        explicit = cls(**values)
        # The preset under the explicit variables, per Inductor config key (a CONFIG key beats the preset's knob).
        return cls(**PRESETS[preset]).merged(explicit) if preset else explicit


#: Variables under the prefix that are not knobs.
EMULATE_SMS_VAR = ENV_PREFIX + "EMULATE_SMS"
EMULATE_SHARED_MEMORY_VAR = ENV_PREFIX + "EMULATE_SHARED_MEMORY"
_NON_KNOB_VARS = (ENV_PREFIX + "PRESET", ENV_PREFIX + "DISABLE", EMULATE_SMS_VAR, EMULATE_SHARED_MEMORY_VAR)


def _checked_as_written(var: str, raw: str, value: Any, check: Callable[[str, object], Any]) -> Any:
    """``check(var, value)``; its refusal names the variable's text as written where the parsed value reads otherwise
    (``INDUCTOR_KNOBS_MIN_SMS='-0' (read as 0)``)."""
    try:
        return check(var, value)
    except InvalidKnobValue as err:
        said, written = f"{var}={value!r}", raw.strip()
        text = str(err)
        if not text.startswith(said) or written in (str(value), repr(value)):
            raise
        raise InvalidKnobValue(f"{var}={written!r} (read as {value!r}){text[len(said) :]}") from None


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
