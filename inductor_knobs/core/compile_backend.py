"""``ik.compile``: ``torch.compile`` whose knobs are active during every compilation of it, and only then.

Dynamo gets a :class:`KnobsBackend` that enters the knobs around ``compile_fx`` (recompiles and a lazy backward
included) and passes the mode's and options' keys as ``config_patches`` as ``torch.compile`` does
(``torch/__init__.py:_TorchCompileInductorWrapper.__call__``, 2.4–2.15): knob > env > options > mode > default.
Dynamo guards each cache entry on its backend object, so results compiled with other knobs keep theirs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob, torch_version, unknown_message
from . import torch_compat
from .attestation import INDUCTOR_CONFIG, AttestedSetting, CompileAttestation, diagnose
from .blocks import KnobsContext
from .knobs import Knobs, config_key
from .plan import config_values, plan
from .recorder import Subscription

_OWN_ARGUMENTS = ("model", "backend", "mode", "options")


@dataclass(frozen=True)
class Setting:
    """One Inductor setting of a compiled callable.

    Attributes:
        key (str): an Inductor config key (``triton.cudagraphs``), or ``is_big_gpu`` for the SM gate override.
        value (Any): what it is set to during compilation.
        source (str): ``mode:<name>``, ``options`` or ``knobs``.
    """

    key: str
    value: Any
    source: str


@dataclass
class KnobsReport:
    """The merged settings of an ``ik.compile`` result (knobs > options > mode), and what compiled.

    Attributes:
        settings (tuple[Setting, ...]): what this ``ik.compile`` asked for, each with its source.
        knobs (Knobs): the user's knobs plus the mode's and options' keys.
        attestations (list[CompileAttestation]): one per graph compiled so far, read inside the compile.
    """

    settings: tuple[Setting, ...]
    knobs: Knobs
    attestations: list[CompileAttestation] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``{key: value}`` of every setting."""
        return {s.key: s.value for s in self.settings}

    def compiled_with(self) -> dict[str, Any]:
        """``{key: value}`` as the latest compile read them inside Inductor (empty before the first)."""
        if not self.attestations:
            return {}
        latest = self.attestations[-1]
        values = {s.key: s.compiled_with for s in latest.settings}
        for v in latest.gate:
            values[f"is_big_gpu({v.device})"] = v.verdict
        return values

    def __str__(self) -> str:
        seen = self.compiled_with()
        width = max([len(s.key) for s in self.settings] + [3])
        rows = [f"{'key':<{width}}  {'value':<20}  {'source':<22}  compiled with"]
        for s in self.settings:
            compiled = repr(seen[s.key]) if s.key in seen else ("(not compiled yet)" if not self.attestations else "-")
            rows.append(f"{s.key:<{width}}  {s.value!r:<20}  {s.source:<22}  {compiled}")
        for key, value in seen.items():
            if key.startswith("is_big_gpu("):
                rows.append(f"{key:<{width}}  {'':<20}  {'knobs':<22}  {value!r}")
        return "\n".join(rows)

    def on_attestation(self, attestation: CompileAttestation) -> None:
        """Compile-event channel: keep the attestation of each graph compiled (or served from a cache)."""
        self.attestations.append(attestation)


class KnobsBackend:
    """A Dynamo backend: ``compile_fx(gm, inputs, inner_compile=..., config_patches=...)`` with ``knobs`` entered
    around it (``_inductor/compile_fx.py``: 2.4 :1254, 2.13 :2685, 2.15 :3128).

    Args:
        knobs (Knobs): entered around every compile as asked values.
        report (KnobsReport | None): the report to fill; None: built from ``knobs`` and ``config_patches``.
        config_patches (Mapping[str, Any] | None): Inductor config keys for ``compile_fx``; asked values win.

    Attributes:
        knobs (Knobs): ``knobs`` plus the ``config_patches`` keys they do not set; ``own_knobs``: as given.
        config_patches (dict[str, Any]): as given, keys spelled as torch does.
        recipe (dict[str, Any] | None): ``ik.compile``'s ``mode``, ``options`` and ``torch_compile`` keywords
            (for ``ik.serving.save_serving_bundle``); None for a backend made directly.
    """

    recipe: dict[str, Any] | None = None

    def __init__(
        self, knobs: Knobs, report: KnobsReport | None = None, *, config_patches: Mapping[str, Any] | None = None
    ) -> None:
        self.config_patches = {config_key(k): v for k, v in (config_patches or {}).items()}
        own = set(config_values(knobs))
        patched = {k: v for k, v in self.config_patches.items() if k not in own}
        self.knobs = knobs.merged(Knobs(config=patched)) if patched else knobs
        self.own_knobs = knobs
        self.report = report or KnobsReport(_settings(self.knobs, own, {k: "options" for k in patched}), self.knobs)
        self.context = KnobsContext(knobs, source="ik.compile")
        self._reads = threading.local()  # what _reading read inside this thread's graph compile

    def __repr__(self) -> str:
        return f"KnobsBackend({self.context!r}, config_patches={self.config_patches!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> KnobsBackend:
        """The backend itself: torch 2.4's ``torch/_dynamo/utils.py:deepcopy_to_fake_tensor`` reaches it through
        the result's attributes, and a copy would fail on its ``threading.local``."""
        return self

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        from torch._inductor import compile_fx as compile_fx_module

        inner = kwargs.get("inner_compile")
        if inner is None:
            inner = inspect.signature(compile_fx_module.compile_fx).parameters["inner_compile"].default
        kwargs["inner_compile"] = self._reading(inner)
        if self.config_patches:
            kwargs["config_patches"] = {**self.config_patches, **(kwargs.get("config_patches") or {})}
        self._reads.__dict__.pop("values", None)  # nothing left over from a compile that failed
        # compile_fx is looked up when called: entering the block installs the interception over it
        if self.context.active:  # re-entered on this thread
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)
        with Subscription(self, hooks=False), self.context:
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)

    def _reading(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (``compile_fx_inner``) that first reads the report's keys, as Inductor compiles this graph."""
        keys = [s.key for s in self.report.settings if s.key != "is_big_gpu"]

        def inner_compile(*args: Any, **kwargs: Any) -> Any:
            self._reads.values = _read(keys)
            return inner(*args, **kwargs)

        return inner_compile

    def on_attestation(self, attestation: CompileAttestation) -> None:
        """Compile-event channel: a graph's attestation, completed with the report's unattested keys as
        :meth:`_reading` read them (or, for an AOTAutograd cache hit, read under ``config_patches``)."""
        attested = {s.key for s in attestation.settings}
        missing = [s for s in self.report.settings if s.key not in attested and s.key != "is_big_gpu"]
        if missing:
            reads: dict[str, Any] | None = self._reads.__dict__.pop("values", None)
            if reads is None:  # an AOTAutograd cache hit: read under config_patches written raw, restored exactly
                keys = [s.key for s in missing]
                cfg = importlib.import_module(INDUCTOR_CONFIG)
                patched = {k: v for k, v in self.config_patches.items() if k in keys}
                revert = torch_compat.installed(strict=False).write_overrides(cfg, patched)
                try:
                    reads = _read(keys)
                finally:
                    revert()
            extra = tuple(_attested(s, reads[s.key]) for s in missing)
            attestation = dataclasses.replace(attestation, settings=(*attestation.settings, *extra))
        self.report.on_attestation(attestation)


def _read(keys: list[str]) -> dict[str, Any]:
    """What Inductor reads for ``keys`` now."""
    patches = torch_compat.installed(strict=False)
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    return {key: patches.read_value(cfg, key) for key in keys}


def _attested(setting: Setting, seen: Any) -> AttestedSetting:
    """``setting`` as read inside a compile, with the cause when it did not hold (nothing raises)."""
    same = (type(seen) is type(setting.value) and seen == setting.value) or (
        isinstance(seen, (int, float)) and not isinstance(seen, bool) and seen == setting.value
    )
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    cause = None if same else diagnose(torch_compat.installed(strict=False), cfg, setting.key)
    return AttestedSetting(setting.key, setting.value, seen, setting.source, None, cause)


def compile(
    model: Callable[..., Any],
    knobs: Knobs | None = None,
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    **torch_compile_kwargs: Any,
) -> Any:
    """``torch.compile`` with knobs that follow every compilation of the result.

    Args:
        model (nn.Module | Callable): as for ``torch.compile``.
        knobs (Knobs | None): e.g. ``ik.Knobs(min_sms=40)``; None: only ``mode``/``options``.
        mode (str | None): a ``torch.compile`` mode, expanded by ``torch._inductor.list_mode_options(mode,
            dynamic)``; may be given with ``options``.
        options (Mapping[str, Any] | None): Inductor config keys (``-`` reads as ``_``); they win over the
            mode's, and knobs, blocks and ``INDUCTOR_KNOBS_*`` win over both.
        **torch_compile_kwargs: ``fullgraph``, ``dynamic``, ``disable`` … for ``torch.compile``.

    Returns:
        What ``torch.compile`` returns, with a ``knobs_report()`` method (:func:`knobs_report`).

    Raises:
        UnknownKnob: an unknown mode, options key or ``torch.compile`` argument.
        InvalidKnobValue: ``backend=`` given, or a bad value.
        UnsupportedTorchVersion, PatchTargetChanged: as for ``ik.knobs``; all checks run before compiling.
    """
    import torch

    allowed = [p for p in inspect.signature(torch.compile).parameters if p not in _OWN_ARGUMENTS]
    for name in torch_compile_kwargs:
        if name in _OWN_ARGUMENTS:
            raise InvalidKnobValue(
                f"ik.compile({name}=...) is not accepted on torch {torch.__version__}: ik.compile supplies the backend"
            )
        if name not in allowed:
            raise UnknownKnob(unknown_message("torch.compile argument", name, allowed))
    knobs = knobs if knobs is not None else Knobs()
    if not isinstance(knobs, Knobs):
        raise InvalidKnobValue(
            f"ik.compile(knobs={knobs!r}) is invalid on torch {torch.__version__}: allowed an ik.Knobs or None"
        )
    base = mode_options(mode, torch_compile_kwargs.get("dynamic"))
    sources = {key: f"mode:{mode}" for key in base}
    for key, value in _normalise(options).items():
        base[key], sources[key] = value, "options"
    own = set(config_values(knobs))
    merged = knobs.merged(Knobs(config={k: v for k, v in base.items() if k not in own}))
    plan(merged)  # validates against the live torch; changes nothing
    report = KnobsReport(_settings(merged, own, sources), merged)
    # Only the user's knobs are asked values: a block or env activation wins over the config_patches.
    backend = KnobsBackend(knobs, report, config_patches=base)
    backend.recipe = {"mode": mode, "options": dict(options) if options else None, "torch_compile": dict(torch_compile_kwargs)}
    compiled: Any = torch.compile(model, backend=backend, **torch_compile_kwargs)
    with contextlib.suppress(AttributeError):  # a result that takes no attributes
        compiled.knobs_report = lambda: backend.report
        compiled._inductor_knobs_backend = backend
    return compiled


def knobs_report(compiled: Any) -> KnobsReport:
    """The :class:`KnobsReport` of ``compiled``, an ``ik.compile`` result (else InvalidKnobValue)."""
    backend = getattr(compiled, "_inductor_knobs_backend", None)
    if not isinstance(backend, KnobsBackend):
        raise InvalidKnobValue(f"knobs_report({compiled!r}): not an ik.compile result")
    return backend.report


def mode_options(mode: str | None, dynamic: bool | None = None) -> dict[str, Any]:
    """The Inductor config (dict) a ``torch.compile`` mode (str | None) sets, from the installed torch's
    ``torch._inductor.list_mode_options``; raises UnknownKnob for a mode this torch does not know."""
    if mode is None or mode == "default":
        return {}
    from torch._inductor import list_mode_options

    known = list(list_mode_options())
    if not isinstance(mode, str) or mode not in known:
        raise UnknownKnob(unknown_message("torch.compile mode", mode, known))
    return dict(list_mode_options(mode, dynamic))


def _normalise(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidKnobValue(
            f"ik.compile(options={options!r}) is invalid on torch {torch_version()}: allowed a mapping of Inductor config keys"
        )
    import torch._inductor.config as cfg

    keys = list(cfg.get_config_copy())
    out = {}
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name not in keys:
            raise UnknownKnob(unknown_message("ik.compile options key (torch._inductor.config)", key, keys).split(" Known:")[0])
        out[name] = value
    return out


def _settings(knobs: Knobs, own: set[str], sources: Mapping[str, str]) -> tuple[Setting, ...]:
    """Every config key ``knobs`` sets, with its source."""
    settings = [Setting(k, v, "knobs" if k in own else sources.get(k, "knobs")) for k, v in config_values(knobs).items()]
    if knobs.min_sms is not None:
        settings.append(Setting("is_big_gpu", f"open for >= {knobs.min_sms} SMs", "knobs"))
    return tuple(sorted(settings, key=lambda s: s.key))
