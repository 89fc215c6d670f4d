"""``ik.compile``: ``torch.compile`` whose knobs are active during every compilation of it, and only then.

A ``with ik.knobs(...)`` block around the first call does not cover the recompile at request
10,000.  ``ik.compile`` instead hands Dynamo a backend that enters the knobs around Inductor's
compile entry (``torch._inductor.compile_fx.compile_fx``).  The compile interception
(:mod:`inductor_knobs.interception`) then carries them into every graph of that compile,
including a backward that AOTAutograd compiles lazily after the backend returned, and attests
what each graph compiled with.  So the knobs hold on the compiling thread for the first
compile, every recompile and the backward, and nowhere else; on torch 2.12+ that is literally
per thread (Inductor config is thread-local there), before 2.12 the process-global rules of
:class:`~inductor_knobs.context.KnobsContext` apply while a compilation runs.

Each ``ik.compile`` call makes its own backend object, and Dynamo guards each cache entry on the
backend that built it, so two models compiled with different knobs keep their own settings.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import torch_compat
from ._undo import Change
from .context import KnobsContext, UndoContext
from .errors import InvalidKnobValue, UnknownKnob
from .events import Subscribe
from .interception import CompileAttestation, InterceptionUse
from .knobs import Knobs, _unknown_message, torch_version
from .plan import config_values, plan

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
        settings: each merged setting and its source.
        knobs: the merged :class:`Knobs` the backend enters.
        attestations: one :class:`~inductor_knobs.interception.CompileAttestation` per graph
            Inductor compiled so far (forward, backward, each recompile), read inside the compile.
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
    Relies on ``compile_fx(model, example_inputs, ...)`` (same parameters in torch 2.4–2.15,
    ``_inductor/compile_fx.py``: 2.4 :1254, 2.15 :3128).
    """

    def __init__(self, knobs: Knobs, report: KnobsReport | None = None) -> None:
        self.knobs = knobs
        self.report = report or KnobsReport(_settings(knobs, set(config_values(knobs)), {}), knobs)
        sources = {s.key: s.source for s in self.report.settings if s.source != "knobs"}
        self.context = KnobsContext(knobs, source="ik.compile", sources=sources)

    def __repr__(self) -> str:
        return f"KnobsBackend({self.context!r})"

    def __call__(self, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        from torch._inductor import compile_fx as compile_fx_module

        if self.context.active:  # re-entered on this thread: the knobs already hold
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)
        with _Receiving(self.report), self.context:
            return compile_fx_module.compile_fx(gm, example_inputs, **kwargs)


class _Receiving(UndoContext):
    """A block whose one record subscribes ``report`` to the attestations of the compiles inside it
    (and of their lazily compiled backwards), holding the compile interception."""

    changes_config = False

    def __init__(self, report: KnobsReport) -> None:
        self.report = report

    def _plan(self) -> tuple[list[Change], None]:
        return [InterceptionUse(torch_compat.installed(strict=False)), Subscribe(self.report)], None


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
        knobs: a :class:`~inductor_knobs.knobs.Knobs` (e.g. ``ik.Knobs(min_sms=40,
            max_autotune_gemm=True)``); None: only ``mode``/``options``.
        mode: a ``torch.compile`` mode (``"max-autotune"`` …), expanded with the installed torch's
            own table (``torch._inductor.list_mode_options(mode, dynamic)``).  Unlike
            ``torch.compile``, ``mode`` and ``options`` may be given together.
        options: Inductor config keys and values (``-`` in keys reads as ``_``, as in torch); they
            win over the mode's, and ``knobs`` win over both.
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
            raise UnknownKnob(_unknown_message("torch.compile argument", name, allowed))
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
    plan(merged)  # validate everything against the live torch now; plan changes nothing
    report = KnobsReport(_settings(merged, own, sources), merged)
    backend = KnobsBackend(merged, report)
    compiled: Any = torch.compile(model, backend=backend, **torch_compile_kwargs)
    try:
        compiled.knobs_report = lambda: backend.report
        compiled._inductor_knobs_backend = backend
    except AttributeError:  # pragma: no cover - a result that takes no attributes
        pass
    return compiled


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
        raise UnknownKnob(_unknown_message("torch.compile mode", mode, known))
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
            raise UnknownKnob(_unknown_message("ik.compile options key (torch._inductor.config)", key, keys).split(" Known:")[0])
        out[name] = value
    return out


def _settings(knobs: Knobs, own: set[str], sources: Mapping[str, str]) -> tuple[Setting, ...]:
    """Every config key ``knobs`` sets, with its source (the user's knobs win, then options, then mode)."""
    settings = [Setting(k, v, "knobs" if k in own else sources.get(k, "knobs")) for k, v in config_values(knobs).items()]
    if knobs.min_sms is not None:
        settings.append(Setting("is_big_gpu", f"open for >= {knobs.min_sms} SMs", "knobs"))
    return tuple(sorted(settings, key=lambda s: s.key))
