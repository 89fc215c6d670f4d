"""``Knobs``: the frozen, validated description of what to change in Inductor.

A ``Knobs`` value is pure data.  Building one validates everything that can be checked
without importing ``torch._inductor`` (types, ranges, GEMM backend names for the installed
torch release: :mod:`inductor_knobs.core.knob_values`); :func:`inductor_knobs.core.plan.plan`
checks the rest against the live config before anything is changed.  ``None`` always means
"leave torch's value alone".  This module also defines what makes two knobs the same
(:meth:`Knobs.identity`), how two are layered (:meth:`Knobs.merged`), and how they are read from
``INDUCTOR_KNOBS_*`` variables (:meth:`Knobs.from_env`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob
from .knob_values import CHECKS, MAX_SMS, _fail
from .messages import _unknown_message, torch_version

ENV_PREFIX = "INDUCTOR_KNOBS_"

#: Named bundles of knob defaults, for ``INDUCTOR_KNOBS_PRESET``; explicit knobs win over them.
PRESETS: dict[str, dict[str, Any]] = {
    "force_gemm_autotune": {"min_sms": 1, "max_autotune_gemm": True, "gemm_backends": "ATEN,TRITON"},
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Knob name -> the Inductor config key it sets.
CONFIG_KEYS = {
    "max_autotune": "max_autotune",
    "max_autotune_gemm": "max_autotune_gemm",
    "gemm_backends": "max_autotune_gemm_backends",
    "gemm_search_space": "max_autotune_gemm_search_space",
    "coordinate_descent_tuning": "coordinate_descent_tuning",
    "cudagraphs": "triton.cudagraphs",
    "cudagraph_capture_sizes": "triton.cudagraph_capture_sizes",
    "lookup_table": "lookup_table.table",
}


@dataclass(frozen=True, eq=False)
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
            torch's own setting (see :mod:`inductor_knobs.core.torch_settings`).
        tunableop: ``torch.cuda.tunable.enable`` (TunableOp tunes each new GEMM shape on first use).
            Process-wide; CUDA/ROCm builds only.
        cudnn_sdpa_avoid_recompile: ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` (torch 2.9+): cuDNN attention
            rounds sequence lengths up to powers of two in its plan cache, so a new length rarely builds a
            plan, at some cost per steady call.  torch reads the variable once per process, at its first
            dense cuDNN attention call, and keeps it: a block refuses to change it once CUDA is initialised
            (:class:`~inductor_knobs.errors.SettingAlreadyRead`) and warns on exit if torch may have read the
            block's value (:class:`~inductor_knobs.errors.SettingKeptWarning`).  Only calls without an
            attention bias on BSHD q/k/v take the path.  Process-wide (see
            :mod:`inductor_knobs.core.torch_settings`).
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

    min_sms: int | None = None
    gate_rocm_xpu: bool | None = None
    max_autotune: bool | None = None
    max_autotune_gemm: bool | None = None
    gemm_backends: str | None = None
    gemm_search_space: str | None = None
    coordinate_descent_tuning: bool | None = None
    cudagraphs: bool | None = None
    trace: bool | str | None = None
    sdpa_backends: str | None = None
    tunableop: bool | None = None
    cudnn_sdpa_avoid_recompile: bool | None = None
    cudagraph_capture_sizes: tuple[int | tuple[int, ...], ...] | None = None
    lookup_table: Any = None
    config: tuple[tuple[str, Any], ...] | Mapping[str, Any] = field(default=())
    on_mismatch: str | None = None
    strict: bool = True

    def __post_init__(self) -> None:
        if self.config is None:  # "no extra config", like the default
            object.__setattr__(self, "config", ())
        for name, check in CHECKS.items():
            value = getattr(self, name)
            if value is None or (name == "config" and value == ()):
                continue
            object.__setattr__(self, name, check(name, value))

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
        cached = self.__dict__.get("_identity")
        if cached is None:
            cached = json.dumps(_canonical(self.to_dict()), sort_keys=True)
            object.__setattr__(self, "_identity", cached)  # a cache, not a field: frozen data stays frozen
        return cached  # type: ignore[no-any-return]

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
                raise UnknownKnob(_unknown_message("knob", name, cls.fields()))
        return super().__new__(cls)

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The knob names, in declaration order."""
        return _field_names(cls)  # type: ignore[arg-type]

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Knobs:
        """Like ``Knobs(**kwargs)`` but an unknown name gets "did you mean" help.

        Raises:
            UnknownKnob: a keyword is not a knob.
            InvalidKnobValue: a value is invalid.
        """
        for name in kwargs:
            if name not in cls.fields():
                raise UnknownKnob(_unknown_message("knob", name, cls.fields()))
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The knobs that are set (not None), with ``config`` as a dict; ``strict`` only when False."""
        out: dict[str, Any] = {}
        for name in self.fields():
            value = getattr(self, name)
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
        (:func:`inductor_knobs.core.plan.config_values`).

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
            taken.update(_knob_config(name, value))
        named: dict[str, Any] = {}
        config: dict[str, Any] = {}
        for name, value in mine.items():
            keys = _knob_config(name, value)
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
                raise UnknownKnob(_unknown_message(f"preset ({ENV_PREFIX}PRESET)", preset, PRESETS))
            values.update(PRESETS[preset])
        names = {ENV_PREFIX + n.upper(): n for n in cls.fields()}
        for var, raw in env.items():
            if not var.startswith(ENV_PREFIX) or var in _NON_KNOB_VARS or not raw.strip():
                continue  # an empty value means unset
            if var not in names:
                raise UnknownKnob(_unknown_message("variable", var, [*names, *_NON_KNOB_VARS]))
            name = names[var]
            values[name] = CHECKS[name](var, _parse_env(var, name, raw))
        return cls(**values)


#: Variables under the prefix that are not knobs.
EMULATE_SMS_VAR = ENV_PREFIX + "EMULATE_SMS"
EMULATE_SHARED_MEMORY_VAR = ENV_PREFIX + "EMULATE_SHARED_MEMORY"
_NON_KNOB_VARS = (ENV_PREFIX + "PRESET", ENV_PREFIX + "DISABLE", EMULATE_SMS_VAR, EMULATE_SHARED_MEMORY_VAR)


def _parse_env(var: str, name: str, raw: str) -> Any:
    text = raw.strip()
    if name == "min_sms":
        try:
            return int(text)
        except ValueError:
            raise _fail(var, raw, f"an int SM count from 1 to {MAX_SMS}") from None
    if name == "config":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise _fail(var, raw, f'a JSON object such as {{"epilogue_fusion": false}} ({err})') from None
    if name in ("gemm_backends", "gemm_search_space", "on_mismatch", "sdpa_backends", "lookup_table"):
        return text  # a lookup table: the path of its JSON file
    if name == "cudagraph_capture_sizes":
        try:  # "1,2,4,8", or JSON for tuples: "[[1, 2], [4, 8]]"
            return json.loads(text) if text.startswith("[") else [int(v) for v in text.split(",")]
        except ValueError:
            raise _fail(var, raw, "comma-separated positive ints, or a JSON list such as [[1, 2], [4, 8]]") from None
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    if name == "trace":
        return text
    raise _fail(var, raw, "one of " + "/".join(sorted(_TRUE | _FALSE)))


def _knob_config(name: str, value: Any) -> dict[str, Any]:
    """The Inductor config keys the named knob ``name`` sets to ``value`` (as :func:`inductor_knobs.core.plan.config_values`)."""

    if name in CONFIG_KEYS:
        return {CONFIG_KEYS[name]: value}
    if name == "trace":
        return {"trace.enabled": bool(value), **({"trace.debug_dir": value} if isinstance(value, str) else {})}
    return {}


#: Prefix of the type tags in :func:`_canonical`; no config key starts with it (a dict key that does is tagged).
_TAG = "\x00"


def _canonical(value: Any) -> Any:
    """``value`` as JSON data that keeps every type apart (see :meth:`Knobs.identity`)."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):  # JSON writes True, 1 and 1.0 differently
        return value
    if kind is list:
        return [_canonical(v) for v in value]
    if kind is dict and all(type(k) is str and not k.startswith(_TAG) for k in value):
        return {k: _canonical(v) for k, v in value.items()}
    if kind is tuple:
        return {_TAG + "tuple": [_canonical(v) for v in value]}
    if kind is dict:
        items = [[_canonical(k), _canonical(v)] for k, v in value.items()]
        return {_TAG + "dict": sorted(items, key=lambda kv: json.dumps(kv, sort_keys=True))}
    if kind in (set, frozenset):
        return {_TAG + kind.__name__: sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))}
    return {_TAG + f"{kind.__module__}.{kind.__qualname__}": repr(value)}


@functools.lru_cache(maxsize=None)  # noqa: UP033 - keyed by the class; asked at every construction
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))
