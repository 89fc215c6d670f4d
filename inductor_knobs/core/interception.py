"""The one interception of Inductor's compile entry: the precedence rule, and proof of what compiled.

Every path that sets knobs pushes an :class:`AskChange` (scoped like Inductor config: per thread/task on
2.12+, per process before) and holds :data:`INTERCEPTION`, a wrapper of ``compile_fx``.  It applies
**emulation > knob > options > mode > default** through ``config_patches``, sets the cache salt
(``torch.compiler.config.cache_key_tag``, 2.6+) around the compile, and wraps ``inner_compile`` to re-apply
what a lazily compiled backward lost and to attest each graph (:mod:`inductor_knobs.core.attestation`).

Relies on ``compile_fx(model_, example_inputs_, inner_compile=compile_fx_inner, config_patches=None, ...)``
recursing through the module global with ``inner_compile=config.patch(config_patches)(inner_compile)``
(``_inductor/compile_fx.py``: 2.4 :1254, 2.13 :2685, 2.15 :3128) and on ``torch.compile`` looking it up at
call time (``torch/__init__.py`` ``_TorchCompileInductorWrapper.__call__``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import DriftWarning, InvalidKnobValue, torch_version
from ..patches.torch_2_4 import TorchPatches
from . import events, gate
from .attestation import (
    CACHE_SALT,
    CHOICES_HANDLER,
    INDUCTOR_CONFIG,
    PROCESS_ASKED,
    PROCESS_ASKED_LOCK,
    SCOPED_ASKED,
    Asked,
    Snapshot,
    attest,
    attest_cache_hit,
    choices_for,
    effective_asked,
    enforce,
    merge_asked,
    served_from_cache,
)
from .changes import SETTINGS_MODULE, ConfigChange, SettingChange, read_setting, setting_matches
from .knobs import config_key
from .lookup_table import warn_unused_table
from .patching import SharedPatch, on_import, warn_import_hook_failures, wrap_attribute
from .scope import Life, Lived
from .undo import SAFE_EXIT, Change, apply_all, revert_all

COMPILE_FX_MODULE = "torch._inductor.compile_fx"


class _Depth(threading.local):
    value = 0


_DEPTH = _Depth()
_HOLDERS_PATCHES: list[TorchPatches | None] = [None]  # the latest holder's patch module
_PENDING: list[BaseException] = []  # a bad INDUCTOR_KNOBS_* from the startup hook, raised once
_PENDING_HOLDERS: list[InterceptionUse] = []  # their holds on the interception, for the process's life


def raise_at_first_compile(err: BaseException, patches: TorchPatches) -> None:
    """Raise ``err`` from the next Inductor compile (once): an import hook must not raise."""
    _PENDING.append(err)
    holder = InterceptionUse(patches)
    _PENDING_HOLDERS.append(holder)  # kept alive: the shared patch counts holders by id, which a freed one frees
    holder.apply()  # held for the process's life: it only raises, then passes through


def _intercept(wrapped: Callable[..., Any], instance: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``compile_fx`` with the precedence rule applied and ``inner_compile`` attesting."""
    if _PENDING and not _DEPTH.value:
        raise _PENDING.pop()
    patches = _HOLDERS_PATCHES[0]
    # torch's own recursion, or no holder left (a foreign patch over compile_fx keeps ours inside it: inert)
    if _DEPTH.value or not INTERCEPTION.users or patches is None:
        return wrapped(*args, **kwargs)
    asked = effective_asked(patches)
    override = gate.current_override()
    marks = events.current_marks()
    addressed = events.listeners(marks)
    if not asked and override is None and not addressed:
        return wrapped(*args, **kwargs)
    bound = inspect.signature(wrapped).bind(*args, **kwargs)
    given = bound.arguments.get("config_patches")
    if given is not None and not isinstance(given, Mapping):
        keys = ", ".join(sorted(a.label for a in asked.values())) or "the is_big_gpu override"
        raise InvalidKnobValue(
            f"compile_fx(config_patches={given!r}) is not a dict of Inductor config keys, so the knobs ({keys}) "
            f"cannot be given precedence over it on torch {torch_version()}; nothing was compiled"
        )
    config_patches = dict(given or {})
    requested, asked = asked, _with_salt(patches, asked)
    overrode = _apply_precedence(patches, asked, config_patches)
    snapshot = Snapshot(patches, asked, override, overrode, marks, addressed, requested=requested)
    inner = bound.arguments.get("inner_compile")
    if inner is None:
        inner = inspect.signature(wrapped).parameters["inner_compile"].default
    bound.arguments["inner_compile"] = _attesting(inner, snapshot)
    if config_patches:
        bound.arguments["config_patches"] = config_patches
    # Keys outside Inductor's config (the cache salt) are set around the whole compile, which computes the
    # AOTAutograd and FX graph cache keys.
    applied: list[Any] = []
    depth = _DEPTH.value
    try:  # the depth is set back to what it was, even after an interrupt between these two lines
        _DEPTH.value = depth + 1
        apply_all(_config_changes(snapshot, outside_inductor=True), applied)
        aot_hits = _cache_hits("aot_autograd", "autograd_cache_hit")
        compiled = wrapped(*bound.args, **bound.kwargs)
        if not snapshot.attested and _cache_hits("aot_autograd", "autograd_cache_hit") > aot_hits:
            attest_cache_hit(snapshot, config_patches, bound.args)
        return compiled
    finally:
        _DEPTH.value = depth
        revert_all(applied)


def _cache_hits(group: str, name: str) -> int:
    """torch's own count of cache hits (``counters``); Dynamo compiles one frame at a time (its compile lock)."""
    from torch._dynamo.utils import counters

    return int(counters[group][name])


def _with_salt(patches: TorchPatches, asked: dict[tuple[str, str], Asked]) -> dict[tuple[str, str], Asked]:
    """``asked`` with its :data:`CACHE_SALT` tags replaced by config values salting the cache keys (which do not
    see the gate override or an emulated GPU); nested blocks' tags join in the order asked."""
    salts = [a for (module, _), a in asked.items() if module == CACHE_SALT]
    if not salts:
        return asked
    source = "+".join(dict.fromkeys(a.source for a in salts))
    policy = "raise" if any(a.on_mismatch == "raise" for a in salts) else "warn"  # the strictest block's
    salted = {slot: a for slot, a in asked.items() if slot[0] != CACHE_SALT}
    for module, key, value in patches.cache_salt("+".join(a.key for a in salts)):
        salted[(module, key)] = Asked(module, key, value, source, on_mismatch=policy)
    return salted


def _apply_precedence(
    patches: TorchPatches, asked: Mapping[tuple[str, str], Asked], config_patches: dict[str, Any]
) -> dict[str, Any]:
    """Write each asked Inductor key into ``config_patches`` where it would not hold; returns what lost."""
    cfg = importlib.import_module(INDUCTOR_CONFIG)
    overrode: dict[str, Any] = {}
    for (module, key), want in asked.items():
        if module != INDUCTOR_CONFIG:
            continue
        spelled = next((k for k in config_patches if config_key(k) == key), None)
        if spelled is not None:
            theirs = config_patches.pop(spelled)
            if theirs != want.value:
                overrode[key] = theirs
                _warn_overriding(want, f"torch.compile's mode/options asked {key}={theirs!r}")
            config_patches[key] = want.value
            continue
        current = patches.read_value(cfg, key)
        if current != want.value:
            _warn_overriding(want, f"{key}={current!r} was set")
            config_patches[key] = want.value
    return overrode


def _warn_overriding(want: Asked, what: str) -> None:
    if want.overriding_warning is not None:
        warnings.warn(
            f"{what}, but {want.source} needs {want.key}={want.value!r} and wins (precedence: emulation > knob > "
            "options > mode > default)",
            want.overriding_warning,
            stacklevel=4,
        )


def _attesting(inner: Callable[..., Any], snapshot: Snapshot) -> Callable[..., Any]:
    """``inner`` (``compile_fx_inner``) with the snapshot re-applied if needed, attested."""

    def attested_inner_compile(*args: Any, **kwargs: Any) -> Any:
        applied: list[Any] = []
        token = None
        try:
            apply_all(_reapply_changes(snapshot), applied)
            # This graph's events (autotuning, Triton compiles) go where its forward's went.
            token = events.MARKS.set(snapshot.marks | events.current_marks())
            with choices_for(snapshot):  # the lookup table's handler, for this graph only
                attestation = attest(snapshot, args, kwargs)
                snapshot.attested += 1
                hits = _cache_hits("inductor", "fxgraph_cache_hit")
                enforce(snapshot, attestation)  # raises before compiling when a knob did not take
                warn_unused_table(snapshot, args, kwargs)
                try:
                    compiled = inner(*args, **kwargs)
                except BaseException:
                    events.deliver(snapshot.addressed, "attestation", attestation)
                    raise
                if _cache_hits("inductor", "fxgraph_cache_hit") > hits:
                    hit = served_from_cache(attestation, "fx_graph")
                    events.deliver(snapshot.addressed, "attestation", hit)
                    new = [m for m in hit.mismatches if m not in attestation.mismatches]
                    if new:  # what the hit did not apply (the others were told before the compile)
                        enforce(snapshot, dataclasses.replace(hit, settings=tuple(new), gate_problem=None))
                else:
                    events.deliver(snapshot.addressed, "attestation", attestation)
                return compiled
        finally:
            if token is not None:
                events.MARKS.reset(token)
            if applied:
                revert_all(applied)

    return attested_inner_compile


def _reapply_changes(snapshot: Snapshot) -> list[Any]:
    """Changes restoring the snapshot for a backward compiled after the block exited (or on another thread);
    while the block still asks the same, a value that does not hold is left for the attestation to name."""
    # Compared before the salt is expanded: inside compile_fx, cache_key_tag already holds the salt.
    same = effective_asked(snapshot.patches) == (snapshot.asked if snapshot.requested is None else snapshot.requested)
    changes = _config_changes(snapshot, outside_inductor=same)
    if changes and not same:
        changes.insert(0, AskChange(snapshot.patches, snapshot.asked))
    if snapshot.override is not None and gate.current_override() != snapshot.override:
        changes.append(gate.GateChange(snapshot.patches, snapshot.override))
    return changes


def _config_changes(snapshot: Snapshot, *, outside_inductor: bool) -> list[Any]:
    """A change per asked value that does not hold; ``outside_inductor``: only keys config_patches cannot set."""
    patches = snapshot.patches
    changes: list[Any] = []
    for (module, key), asked in snapshot.asked.items():
        if module == SETTINGS_MODULE:
            if not outside_inductor and not setting_matches(patches, key, read_setting(patches, key), asked.value):
                changes.append(SettingChange(patches, key, asked.value, in_compile=True))
        elif module == CHOICES_HANDLER:
            continue  # installed around each graph's compile (attestation.choices_for)
        elif not (outside_inductor and module == INDUCTOR_CONFIG):
            cfg = importlib.import_module(module)
            if patches.read_value(cfg, key) != asked.value:
                changes.append(ConfigChange(patches, [(cfg, key, asked.value)]))
    return changes


# No sweep: torch reaches compile_fx through the module attribute at call time.  One cached step reuses
# its wrapper at every block; installed on compile_fx's import, so a process that never compiles skips it.
@functools.cache
def _steps() -> tuple[Any, ...]:
    wrapper = wrap_attribute(f"{COMPILE_FX_MODULE}:compile_fx", _intercept)
    return (on_import(COMPILE_FX_MODULE, lambda: [wrapper]),)


INTERCEPTION = SharedPatch(f"{COMPILE_FX_MODULE}.compile_fx interception", _steps)


class InterceptionUse(Change):
    """Undo record: hold the interception with this torch's patch module (idempotent: one count per holder)."""

    __slots__ = ("patches",)

    def __init__(self, patches: TorchPatches) -> None:
        self.patches = patches

    @property
    def description(self) -> str:
        return f"use {INTERCEPTION.name}"

    def apply(self) -> None:
        warn_import_hook_failures(DriftWarning)
        _HOLDERS_PATCHES[0] = self.patches
        INTERCEPTION.acquire(self)

    def revert(self) -> None:
        INTERCEPTION.release(self)


class AskChange(InterceptionUse, Lived):
    """Undo record: add ``values`` to what the interception enforces, as a layer of the calling scope with the
    record's life, or (``process_wide``, env activation) to the process layer.  Revert is idempotent."""

    __slots__ = ("_prior", "_token", "life", "own_life", "process_wide", "values")

    def __init__(self, patches: TorchPatches, values: Mapping[tuple[str, str], Asked], *, process_wide: bool = False) -> None:
        self.patches = patches
        self.values = values  # never changed: a cached plan's mapping is shared
        self.process_wide = process_wide
        self._token: Any = None
        self._prior: dict[tuple[str, str], Asked] | None = None
        self.life = self.own_life = Life()

    @property
    def description(self) -> str:
        return f"ask {', '.join(a.label for a in self.values.values())}"

    def apply(self) -> None:
        InterceptionUse.apply(self)  # the interception is in place before anything is asked of it
        if self.process_wide:
            with PROCESS_ASKED_LOCK, SAFE_EXIT:
                self._prior = dict(PROCESS_ASKED)
                PROCESS_ASKED.update(merge_asked(PROCESS_ASKED, self.values))
        else:
            scope = SCOPED_ASKED.scopes[self.patches.config_is_thread_local]
            below = scope.get()
            self._token = (scope, below)  # the undo first
            scope.set((*below, (self.life, self.values)))

    def revert(self) -> None:
        try:
            self.own_life.end()  # first: no context that copied the layer acts on it from here on
            if self.process_wide:
                if self._prior is not None:
                    with PROCESS_ASKED_LOCK, SAFE_EXIT:
                        PROCESS_ASKED.clear()
                        PROCESS_ASKED.update(self._prior)
            elif self._token is not None:
                self._token[0].set(self._token[1])
        finally:
            InterceptionUse.revert(self)
