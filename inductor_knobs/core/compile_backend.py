"""``ik.compile``: ``torch.compile`` whose knobs are active during every compilation of it, and only then.

A ``with ik.knobs(...)`` block around the first call does not cover the recompile at request
10,000.  ``ik.compile`` instead hands Dynamo a backend that enters the knobs around Inductor's
compile entry (``torch._inductor.compile_fx.compile_fx``), and hands the ``mode``/``options``
keys to it as ``config_patches``, exactly as ``torch.compile`` does
(``torch/__init__.py`` ``_TorchCompileInductorWrapper.__call__``, 2.4-2.15).  So the precedence is
torch.compile's plus the knobs: **knob > env (INDUCTOR_KNOBS_*) > options > mode > default**; the
compile interception gives every asked value (a block's, env activation's, these knobs') precedence
over ``config_patches`` and records the mode/options value that lost (``overrode``).

The compile interception (:mod:`inductor_knobs.core.interception`) carries the knobs into every graph of a compile,
including a backward that AOTAutograd compiles lazily after the backend returned, and attests
what each graph compiled with.  So the knobs hold on the compiling thread for the first
compile, every recompile and the backward, and nowhere else; on torch 2.12+ that is literally
per thread (Inductor config is thread-local there), before 2.12 the process-global rules of
:class:`~inductor_knobs.core.blocks.KnobsContext` apply while a compilation runs.

Each ``ik.compile`` call makes its own backend object, and Dynamo guards each cache entry on the
backend that built it, so two models compiled with different knobs keep their own settings.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidKnobValue, UnknownKnob, torch_version, unknown_message
from . import torch_compat
from .attestation import INDUCTOR_CONFIG, AttestedSetting, CompileAttestation
from .blocks import KnobsContext
from .knobs import Knobs, config_key
from .plan import config_values, plan
from .recorder import Subscription

#: torch.compile arguments that ik.compile supplies itself.
_OWN_ARGUMENTS = ("model", "backend", "mode", "options")


@dataclass(frozen=True)
class Setting:
    """One Inductor setting of a compiled callable: its value and who asked for it.

    Attributes:
        key: the Inductor config key (``max_autotune``, ``triton.cudagraphs``) or ``is_big_gpu``
            for the SM gate override.
        value: what it is set to during compilation.
        source: ``mode:<name>``, ``options`` or ``knobs``.
    """

    key: str
    value: Any
    source: str


@dataclass
class KnobsReport:
    """The merged settings of an ``ik.compile`` result (knobs > options > mode), and what compiled.

    Attributes:
        settings: each merged setting and its source (``knobs``, ``options``, ``mode:<name>``): what
            this ``ik.compile`` asked for.  Where something with precedence (a ``with ik.knobs``
            block, ``INDUCTOR_KNOBS_*``) set a key differently, ``attestations`` say so: the
            setting's ``source`` names the winner and ``overrode`` the mode/options value that lost.
        knobs: the merged :class:`Knobs` (the user's knobs plus the mode's and options' keys).
        attestations: one :class:`~inductor_knobs.core.attestation.CompileAttestation` per graph
            Inductor compiled so far (forward, backward, each recompile), read inside the compile:
            what the interception attests (every asked value), plus each key of ``settings`` it
            did not attest, read inside the same graph's compile.
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
    """A Dynamo backend: Inductor's ``compile_fx`` with ``knobs`` entered around it.

    Also usable directly: ``torch.compile(model, backend=KnobsBackend(ik.Knobs(...)))``.
    Relies on ``compile_fx(model, example_inputs, inner_compile=..., config_patches=...)`` (same
    parameters in torch 2.4–2.15, ``_inductor/compile_fx.py``: 2.4 :1254, 2.13 :2685, 2.15 :3128),
    which applies ``config_patches`` with ``config.patch`` around the compile and around every
    ``inner_compile`` call (a lazily compiled backward included), as for ``torch.compile``'s mode.

    Args:
        knobs (Knobs): the user's knobs, entered around every compile as asked values (rank "knob").
        report (KnobsReport | None): the report to fill (``ik.compile`` builds one); None: built from
            ``knobs`` and ``config_patches`` (their source: ``options``).
        config_patches (Mapping[str, Any] | None): Inductor config keys handed to ``compile_fx`` as
            ``config_patches`` (``ik.compile``: the mode's and the options' keys).  Every asked value
            wins over them: ``knobs``, an enclosing ``with ik.knobs(...)``, ``INDUCTOR_KNOBS_*``.

    Attributes:
        knobs (Knobs): everything this backend compiles with as one value (``knobs`` plus the
            ``config_patches`` keys they do not set); what ``ik.serving.save_compile_cache`` records.
        own_knobs (Knobs): ``knobs`` as given: the only values entered.
        config_patches (dict[str, Any]): as given, keys spelled as torch does.
        recipe (dict[str, Any] | None): the arguments ``ik.compile`` was called with besides the model
            (``mode``, ``options``, ``torch_compile``: the ``torch.compile`` keywords), so that
            ``ik.serving.save_serving_bundle`` can compile the same way in another process; None for a
            backend made directly.
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
        #: Per thread: what :meth:`_reading` read inside each graph compile, for :meth:`on_attestation`.
        self._reads = threading.local()

    def __repr__(self) -> str:
        return f"KnobsBackend({self.context!r}, config_patches={self.config_patches!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> KnobsBackend:
        """The backend itself: one per ``ik.compile`` result, shared by every copy of the model.

        torch 2.4's Dynamo deep-copies a called module to fake tensors
        (``torch/_dynamo/utils.py:deepcopy_to_fake_tensor``), which reaches this backend through the
        ``ik.compile`` result's attributes; a copy would fail on its ``threading.local``.
        """
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
        # compile_fx is looked up when called: entering the blocks installs the interception over it
        if self.context.active:  # re-entered on this thread: the knobs already hold
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)
        with Subscription(self, hooks=False), self.context:
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)

    def _unattested(self, attestation: CompileAttestation) -> list[Setting]:
        attested = {s.key for s in attestation.settings}
        return [s for s in self.report.settings if s.key not in attested and s.key != "is_big_gpu"]

    def _reading(self, inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (``compile_fx_inner``) that first reads every key of the report.

        Torch calls it inside ``config.patch(config_patches)`` and inside the interception's
        attesting wrapper, so it reads what Inductor compiles this graph with; the interception
        delivers the graph's attestation after it returns, on this thread (:meth:`on_attestation`).
        """
        keys = [s.key for s in self.report.settings if s.key != "is_big_gpu"]

        def inner_compile(*args: Any, **kwargs: Any) -> Any:
            self._reads.values = _read(keys)
            return inner(*args, **kwargs)

        return inner_compile

    def on_attestation(self, attestation: CompileAttestation) -> None:
        """Compile-event channel: the interception's attestation of a graph, completed with the report's other keys.

        The keys the interception did not attest (the mode's and options' keys that nobody asked
        for) are taken from what :meth:`_reading` read inside the same graph's compile; for a
        compile that AOTAutograd's cache served whole (no inner compile ran) they are read under
        ``config_patches`` as torch applied them to compute the cache key.
        """
        missing = self._unattested(attestation)
        if missing:
            reads: dict[str, Any] | None = self._reads.__dict__.pop("values", None)
            if reads is None:
                reads = self._read_patched([s.key for s in missing])
            extra = tuple(_attested(s, reads[s.key]) for s in missing)
            attestation = dataclasses.replace(attestation, settings=(*attestation.settings, *extra))
        self.report.on_attestation(attestation)

    def _read_patched(self, keys: list[str]) -> dict[str, Any]:
        """``keys`` read under ``config_patches`` written raw (restored exactly after: no pinned values)."""
        patches = torch_compat.installed(strict=False)
        cfg = importlib.import_module(INDUCTOR_CONFIG)
        revert = patches.write_overrides(cfg, {k: v for k, v in self.config_patches.items() if k in keys})
        try:
            return _read(keys)
        finally:
            revert()


def _read(keys: list[str]) -> dict[str, Any]:
    """What Inductor reads for ``keys`` now (reads that leave no pinned override behind)."""
    patches = torch_compat.installed(strict=False)
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    return {key: patches.read_value(cfg, key) for key in keys}


def _attested(setting: Setting, seen: Any) -> AttestedSetting:
    """``setting`` as read inside a compile; the cause when it did not hold (the report's own record: nothing raises)."""
    from .attestation import diagnose

    same = (type(seen) is type(setting.value) and seen == setting.value) or (
        isinstance(seen, (int, float)) and not isinstance(seen, bool) and seen == setting.value
    )
    cause = None
    if not same:
        cause = diagnose(torch_compat.installed(strict=False), importlib.import_module(INDUCTOR_CONFIG), setting.key)
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
        model: an ``nn.Module`` or function, as for ``torch.compile``.
        knobs: a :class:`~inductor_knobs.core.knobs.Knobs` (e.g. ``ik.Knobs(min_sms=40,
            max_autotune_gemm=True)``); None: only ``mode``/``options``.
        mode: a ``torch.compile`` mode (``"max-autotune"`` …), expanded with the installed torch's
            own table (``torch._inductor.list_mode_options(mode, dynamic)``).  Unlike
            ``torch.compile``, ``mode`` and ``options`` may be given together.
        options: Inductor config keys and values (``-`` in keys reads as ``_``, as in torch); they
            win over the mode's, and ``knobs`` win over both.  The mode's and options' keys reach
            Inductor as ``compile_fx``'s ``config_patches`` (as in ``torch.compile``), so an enclosing
            ``with ik.knobs(...)`` block and ``INDUCTOR_KNOBS_*`` win over them too: knob > env >
            options > mode > default.
        **torch_compile_kwargs: ``fullgraph``, ``dynamic``, ``disable`` … passed to ``torch.compile``.

    Returns:
        What ``torch.compile`` returns (an ``OptimizedModule`` or a function), with a
        ``knobs_report()`` method showing each merged setting and its source; also readable
        for any result via :func:`knobs_report`.

    Raises:
        UnknownKnob: an unknown mode, options key or ``torch.compile`` argument.
        InvalidKnobValue: ``backend=`` given (ik.compile supplies it), or a bad value.
        UnsupportedTorchVersion, PatchTargetChanged: as for ``ik.knobs``.  All checks run now,
        before anything is compiled or changed.
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
    merged, base, sources = _recipe(knobs, mode, options, torch_compile_kwargs.get("dynamic"))
    own = set(config_values(knobs))
    report = KnobsReport(_settings(merged, own, sources), merged)
    # Only the user's knobs are entered as asked values; the mode's and options' keys reach compile_fx
    # as config_patches, as torch.compile hands them, so a block or env activation wins over them.
    backend = KnobsBackend(knobs, report, config_patches=base)
    backend.recipe = {"mode": mode, "options": dict(options) if options else None, "torch_compile": dict(torch_compile_kwargs)}
    compiled: Any = torch.compile(model, backend=backend, **torch_compile_kwargs)
    try:
        compiled.knobs_report = lambda: backend.report
        compiled._inductor_knobs_backend = backend
    except AttributeError:  # pragma: no cover - a result that takes no attributes
        pass
    return compiled


def _recipe(
    knobs: Knobs, mode: str | None, options: Mapping[str, Any] | None, dynamic: Any
) -> tuple[Knobs, dict[str, Any], dict[str, str]]:
    """The merged knobs (validated against the live torch; ``plan`` changes nothing), the mode's and
    options' config keys, and each key's source."""
    base = mode_options(mode, dynamic)
    sources = {key: f"mode:{mode}" for key in base}
    for key, value in _normalise(options).items():
        base[key], sources[key] = value, "options"
    own = set(config_values(knobs))
    merged = knobs.merged(Knobs(config={k: v for k, v in base.items() if k not in own}))
    plan(merged)
    return merged, base, sources


def knobs_report(compiled: Any) -> KnobsReport:
    """The merged settings of an ``ik.compile`` result.

    Raises:
        InvalidKnobValue: ``compiled`` did not come from ``ik.compile``.
    """
    backend = getattr(compiled, "_inductor_knobs_backend", None)
    if not isinstance(backend, KnobsBackend):
        raise InvalidKnobValue(f"knobs_report({compiled!r}): not an ik.compile result")
    return backend.report


def mode_options(mode: str | None, dynamic: bool | None = None) -> dict[str, Any]:
    """The Inductor config a ``torch.compile`` mode sets, from the installed torch's own table.

    Raises:
        UnknownKnob: a mode this torch does not know ("did you mean" included).
    """
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
    """Every config key ``knobs`` sets, with its source (the user's knobs win, then options, then mode)."""
    settings = [Setting(k, v, "knobs" if k in own else sources.get(k, "knobs")) for k, v in config_values(knobs).items()]
    if knobs.min_sms is not None:
        settings.append(Setting("is_big_gpu", f"open for >= {knobs.min_sms} SMs", "knobs"))
    return tuple(sorted(settings, key=lambda s: s.key))
