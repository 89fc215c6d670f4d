"""The proof of what a compile compiled with: :class:`CompileAttestation`, one per graph, read inside Inductor.

Made by the compile interception (:mod:`inductor_knobs.core.interception`) and delivered on the compile-event
channel (:mod:`inductor_knobs.core.events`) to ``ik.record_compiles``, ``ik.compile(...).knobs_report()``
and the ablation worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import KnobNotApplied
from . import gate


@dataclass(frozen=True)
class AttestedSetting:
    """One asked value as Inductor saw it inside a compile.

    Attributes:
        key: the config key (``triton.cudagraphs``; keys outside Inductor's config are prefixed
            with their module, e.g. ``torch.compiler.config.cache_key_tag``).
        asked: the value inductor_knobs set.
        compiled_with: the value read inside the compile.
        source: who asked for it (``knobs``, ``env``, ``emulate_gpu``, ``mode:max-autotune`` …).
        overrode: the different value torch.compile's mode/options asked for, which lost
            (precedence rule), or None.
        cause: why ``compiled_with`` differs from ``asked`` (None when it does not).
    """

    key: str
    asked: Any
    compiled_with: Any
    source: str
    overrode: Any = None
    cause: str | None = None

    @property
    def ok(self) -> bool:
        return self.cause is None

    @property
    def came_from(self) -> str:
        """Where ``compiled_with`` came from: ``source``, or the cause's kind."""
        return self.source if self.cause is None else self.cause.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "asked": _plain(self.asked),
            "compiled_with": _plain(self.compiled_with),
            "source": self.source,
            "overrode": _plain(self.overrode),
            "cause": self.cause,
        }


@dataclass(frozen=True)
class CompileAttestation:
    """What one Inductor graph compile (forward, backward or inference) compiled with.

    Attributes:
        compile_id: Dynamo's compile id (``"0/1"``), or None outside Dynamo.
        graph: ``"forward"``, ``"backward"`` or ``"inference"``.
        settings: every asked value, read inside the compile.
        gate: the ``is_big_gpu`` verdict per CUDA device of the graph under the active
            override (empty without an override or without CUDA inputs).
        gate_problem: why the override could not hold (``is_big_gpu`` replaced by something
            else), or None.
        cache: None when Inductor compiled the graph; ``"fx_graph"`` when Inductor's FX graph cache
            served it; ``"aot_autograd"`` when AOTAutograd's cache served the whole compile (every
            graph of it: ``graph`` is then ``"cached"``).  On a hit the values are read inside the
            compile as torch hashed them into the cache key, so the artifact was built with them
            (torch leaves a few keys out of the key: ``_cache_config_ignore_prefix`` in
            ``_inductor/config.py``, such as ``trace.*``).
    """

    compile_id: str | None
    graph: str
    settings: tuple[AttestedSetting, ...]
    gate: tuple[gate.Verdict, ...] = ()
    gate_problem: str | None = None
    cache: str | None = None

    @property
    def cache_hit(self) -> bool:
        """Whether a cache served this compile (see ``cache``)."""
        return self.cache is not None

    @property
    def ok(self) -> bool:
        return self.gate_problem is None and all(s.ok for s in self.settings)

    @property
    def mismatches(self) -> list[AttestedSetting]:
        return [s for s in self.settings if not s.ok]

    def value(self, key: str) -> Any:
        """The value ``key`` compiled with. Raises KeyError when it was not asked for."""
        for setting in self.settings:
            if setting.key == key:
                return setting.compiled_with
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compile_id": self.compile_id,
            "graph": self.graph,
            "ok": self.ok,
            "settings": [s.to_dict() for s in self.settings],
            "gate": [vars(v) for v in self.gate],
            "gate_problem": self.gate_problem,
            "cache": self.cache,
        }


def _plain(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)


def unwrap_not_applied(exc: BaseException | None) -> KnobNotApplied | None:
    """The :class:`KnobNotApplied` inside torch's wrapping of ``exc`` (BackendCompilerFailed …), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KnobNotApplied):
            return exc
        seen.add(id(exc))
        exc = getattr(exc, "inner_exception", None) or exc.__cause__ or exc.__context__
    return None
