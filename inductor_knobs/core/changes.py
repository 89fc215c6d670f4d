"""The undo records of torch's own state: Inductor config keys, process-global settings, and claims on them.

Each is a :class:`~inductor_knobs.core.undo.Change` (apply, then an idempotent revert that restores
first and warns after, through :func:`~inductor_knobs.core.undo.warn_after_restore`), run by the one
loop of :mod:`inductor_knobs.core.undo`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import ConcurrentKnobsError, ExternalChangeWarning, KnobNotApplied, SettingAlreadyRead, SettingKeptWarning
from ..patches.features import CUDNN_SDPA_AVOID_RECOMPILE_VAR
from ..patches.torch_2_4 import TorchPatches
from .scope import current_owner, describe_owner
from .undo import SAFE_EXIT, Change, warn_after_restore

_NOT_READ = object()  # a SettingChange that has not read the state it replaces (nothing to restore)


#: Config keys grouped by the module that stores them: ``((module, {key: value}), ...)``.
Groups = tuple[tuple[ModuleType, dict[str, object]], ...]
#: Per group, the function that writes it and returns the undo (``TorchPatches.overrides_writer``).
Writers = tuple[Callable[[], Callable[[], None]], ...]


def config_groups(patches: TorchPatches, settings: Sequence[tuple[ModuleType, str, object]]) -> Groups:
    """``(config module, key, value)`` triples grouped by the module that stores each key.

    Aliases (2.7+) are followed to the module that stores the value; the keys of one module are
    written with one call of torch's raw patcher (a block's keys cost one write, not one each).
    """
    groups: dict[int, tuple[ModuleType, dict[str, object]]] = {}
    for cfg, key, value in settings:
        module, real = patches.resolve_alias(cfg, key)
        groups.setdefault(id(module), (module, {}))[1][real] = value
    return tuple(groups.values())


def config_writers(patches: TorchPatches, groups: Groups) -> Writers:
    """The writer of each group (made once per cached plan: a block's write is then one call of torch's patcher)."""
    return tuple(patches.overrides_writer(cfg, values) for cfg, values in groups)


class ConfigChange(Change):
    """Set keys of torch ``ConfigModule`` s and put back their stored overrides on revert.

    Args:
        patches: the installed torch's patch module.
        settings: ``(config module, key, value)`` triples, grouped by :func:`config_groups`.
        process_wide: set process defaults (env activation) instead of overrides.
        groups: the settings already grouped (instead of ``settings``).
        writers: ``groups``' writers from :func:`config_writers` (made here if not given; unused with
            ``process_wide``, which sets process defaults).

    Revert restores the raw stored state (including "unset"), not the value read before,
    so a key that was at its default is at its default again afterwards (torch's own
    ``config.patch`` pins it instead).  Apply reads every value back and raises
    :class:`~inductor_knobs.errors.KnobNotApplied` (restoring everything) if one did not take;
    revert warns with :class:`~inductor_knobs.errors.ExternalChangeWarning` for every key that
    code outside inductor_knobs changed meanwhile.
    """

    __slots__ = ("_priors", "_restored", "_undos", "groups", "patches", "process_wide", "writers")

    def __init__(
        self,
        patches: TorchPatches,
        settings: Sequence[tuple[ModuleType, str, object]] = (),
        *,
        process_wide: bool = False,
        groups: Groups | None = None,
        writers: Writers | None = None,
    ) -> None:
        self.patches = patches
        #: ``groups``: ``settings`` already passed through :func:`config_groups` (a cached plan's; never changed).
        self.groups = config_groups(patches, settings) if groups is None else groups
        if writers is None and not process_wide:  # the process layer writes defaults, not overrides
            writers = config_writers(patches, self.groups)
        self.writers = writers or ()
        self.process_wide = process_wide
        #: Per group written so far, ``[module, the states found before the write, torch's revert of the
        #: write once it returned]`` (an interrupt inside the write leaves no revert: the captured states
        #: are written back instead).  One list, so an interrupt cannot leave the two out of step.
        self._priors: list[list[Any]] = []
        self._restored = False

    @property
    def description(self) -> str:  # built when read (messages only), not at every plan
        return ", ".join(f"{cfg.__name__}.{key}={value!r}" for cfg, values in self.groups for key, value in values.items())

    def apply(self) -> None:
        # Written through torch's raw patcher, not setattr: a foreign __setattr__ on the config
        # module (Unsloth's rewrites the process default) would make the revert inexact.
        patches = self.patches
        process_wide = self.process_wide
        writers = self.writers
        for index, (cfg, values) in enumerate(self.groups):
            read = patches.process_default_state if process_wide else patches.read_override
            prior = {}
            for key in values:
                prior[key] = read(cfg, key)
            found_before = [cfg, prior, None]
            self._priors.append(found_before)  # before the write: revert puts back only what was captured
            if process_wide:
                for key, value in values.items():
                    patches.set_process_default(cfg, key, value)
            else:
                found_before[2] = writers[index]()
            for key, value in values.items():
                # What Inductor reads now (see _read); inlined, as every block reads each key back.
                found = patches.read_value(cfg, key) if process_wide else patches.read_config(cfg, key)
                if found != value:
                    cause = diagnose(patches, cfg, key)
                    self._restore()
                    raise KnobNotApplied(
                        f"{cfg.__name__}.{key}={value!r} did not take: it reads back {found!r}, because {cause}. "
                        "Remove that cause or leave this knob out."
                    )

    def revert(self) -> None:
        """Idempotent: a revert interrupted part-way can run again.  Restores first, then warns
        (through :func:`warn_after_restore`), so a warning raised as an error cannot stop a restore."""
        changed: list[str] = []
        if not self._restored:
            process_wide, read_override = self.process_wide, self.patches.read_override
            for (cfg, values), (_, prior, undo) in zip(self.groups, self._priors):
                if not process_wide and undo is None:
                    continue  # an interrupt before its write returned: nothing of this block's to check
                for key in prior:
                    value = values[key]
                    # Whether something else set the key since apply read ``value`` back.  Every write to an
                    # override (setattr, config.patch, torch's raw patcher) replaces the stored override, so
                    # comparing that is exact and costs one dictionary read where getattr on a ConfigModule
                    # runs its whole lookup; the process layer (env activation) compares what Inductor reads.
                    if process_wide:
                        is_changed = not self.patches.process_default_holds(cfg, key, value)
                    else:
                        stored = read_override(cfg, key)
                        is_changed = stored is not value and stored != value
                    if is_changed:
                        changed.append(
                            f"{cfg.__name__}.{key} was changed to {self._read(cfg, key)!r} inside the knobs block "
                            f"(the block set {value!r}); restored the value from before the block"
                        )
        self._restore()
        for message in changed:
            warn_after_restore(message, ExternalChangeWarning)

    def _read(self, cfg: ModuleType, key: str) -> object:
        """The value Inductor reads now (implications and aliases included).

        A block's own override is in place whenever this runs (just written, or about to be
        rewritten by the revert), so a plain read cannot pin a copy of a mutable default, which is
        what :meth:`TorchPatches.read_value` guards against (and costs two more reads).
        """
        if self.process_wide:
            return self.patches.read_value(cfg, key)
        return self.patches.read_config(cfg, key)

    def _restore(self) -> None:
        self._restored = True
        for found_before in reversed(self._priors):
            cfg, prior, undo = found_before
            if self.process_wide:
                for key, state in prior.items():
                    self.patches.restore_process_default(cfg, key, state)
            elif undo is not None:
                found_before[2] = None  # used once: run again (after an interrupt), the states are written back
                undo()
            else:
                self.patches.write_overrides(cfg, prior)


#: Process-global resource -> the owners (thread id, asyncio task id) of the blocks that hold it now.
#: resource -> its holds: (owner, the Claim that holds it), so a revert releases its own hold and no other
#: (a nested block of the same owner holds the same resource too).
_HOLDERS: dict[str, list[tuple[tuple[int, int | None], Claim]]] = {}
_HOLDERS_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)


class Claim(Change):
    """Undo record: hold a process-global resource for the calling thread/task, or refuse.

    Args:
        resource: what is held (``"torch._inductor.config"`` before torch 2.12, a setting's key).
        what: why it is process-global, for the message.
        asked: what the block asks of it, for the message.

    Apply raises :class:`~inductor_knobs.errors.ConcurrentKnobsError` (holding nothing) when a block
    of another thread or asyncio task holds ``resource``: two owners of one process-wide value would
    undo each other's changes.  The same owner may hold it any number of times (nested blocks).
    Revert releases this record's hold only; idempotent.
    """

    __slots__ = ("_owner", "asked", "resource", "what")

    def __init__(self, resource: str, what: str, asked: str) -> None:
        self.resource = resource
        self.what = what
        self.asked = asked
        self._owner: tuple[int, int | None] | None = None

    @property
    def description(self) -> str:
        return f"hold {self.resource}"

    def apply(self) -> None:
        owner = current_owner()
        with _HOLDERS_LOCK, SAFE_EXIT:
            others = [o for o, _ in _HOLDERS.get(self.resource, ()) if o != owner]
            if others:
                raise ConcurrentKnobsError(
                    f"{self.asked} entered on {describe_owner(owner)} while {describe_owner(others[0])} holds "
                    f"{self.resource}: {self.what}, so two threads or asyncio tasks would undo each other. "
                    "Hold it in one thread/task at a time"
                )
            self._owner = owner  # the undo first: revert releases this Claim's own hold, if any was taken
            _HOLDERS.setdefault(self.resource, []).append((owner, self))

    def revert(self) -> None:
        if self._owner is not None:
            with _HOLDERS_LOCK, SAFE_EXIT:
                _HOLDERS[self.resource] = [hold for hold in _HOLDERS.get(self.resource, []) if hold[1] is not self]
            self._owner = None  # last: a revert interrupted before it runs again in full


class SettingChange(Change):
    """Set a process-global torch setting (:mod:`inductor_knobs.core.changes`) and put back the exact state it found.

    Apply refuses (:class:`~inductor_knobs.errors.ConcurrentKnobsError`, nothing changed) when a block of
    another thread or asyncio task holds the same setting (a :class:`Claim`): torch has one value per
    process.  For a setting torch reads once per process (``Setting.read_once``), apply refuses a change
    once torch may have read it (:class:`~inductor_knobs.errors.SettingAlreadyRead`, nothing changed),
    and revert warns (:class:`~inductor_knobs.errors.SettingKeptWarning`) when torch may have read the
    block's value inside the block: it keeps that value after the variable is restored.  Apply reads the
    value back and raises :class:`~inductor_knobs.errors.KnobNotApplied` (restoring) if it did not take;
    revert restores it, then warns with :class:`~inductor_knobs.errors.ExternalChangeWarning` when code
    outside inductor_knobs changed it inside the block.  Revert is idempotent.

    Args:
        patches: the installed torch's patch module.
        key: the setting (a key of :data:`~inductor_knobs.core.changes.SETTINGS`).
        value: the knob's value.
        in_compile: re-applied inside one Inductor compile (a lazily compiled backward), which never runs
            what reads a ``read_once`` setting: neither refused nor warned about.
    """

    __slots__ = ("_changed", "_claim", "_prior", "in_compile", "key", "patches", "setting", "value")

    def __init__(self, patches: TorchPatches, key: str, value: object, *, in_compile: bool = False) -> None:
        self.patches = patches
        self.key = key
        self.value = value
        self.in_compile = in_compile
        self.setting = SETTINGS[key]
        self._changed = False  # a read_once setting that this record changed while torch could not have read it yet
        self._prior: Any = _NOT_READ
        self._claim = Claim(key, f"torch keeps it once per process ({self.setting.what})", f"{key}={value!r}")

    @property
    def description(self) -> str:
        return f"{self.key}={self.value!r} ({self.setting.what})"

    def apply(self) -> None:
        self._claim.apply()
        setting = self.setting
        if setting.read_once is not None and not self.in_compile:
            differs = not setting.matches(self.patches, setting.value(self.patches), self.value)
            if differs and setting.maybe_read(self.patches):
                raise SettingAlreadyRead(
                    f"{self.key}={self.value!r} cannot take effect now: {setting.read_once}, and CUDA is already "
                    f"initialised in this process, so that read may have happened. Set it before the first CUDA call "
                    f"(INDUCTOR_KNOBS_{self.key.upper()}=1 or {setting.what} exported before the process starts, or a "
                    "block entered before CUDA starts); nothing was changed"
                )
            self._changed = differs
        self._prior = setting.state(self.patches)
        if setting.env_var is not None:
            hold_env(setting.env_var, self, self._prior)
        setting.set(self.patches, self.value)
        found = self.setting.value(self.patches)
        if not self.setting.matches(self.patches, found, self.value):
            self.revert()
            raise KnobNotApplied(f"{self.key}={self.value!r} did not take: it reads back {found!r} ({self.setting.what})")

    def revert(self) -> None:
        try:
            if self._prior is not _NOT_READ:
                prior, self._prior = self._prior, _NOT_READ
                found = self.setting.value(self.patches)
                changed = not self.setting.matches(self.patches, found, self.value)
                self.setting.restore(self.patches, prior)
                if self._changed and self.setting.maybe_read(self.patches):
                    self._changed = False
                    warn_after_restore(
                        f"{self.key}={self.value!r}: CUDA started inside the block, so torch may have read "
                        f"{self.setting.what} there ({self.setting.read_once}); the block's exit restored the "
                        "variable, but torch keeps what it read",
                        SettingKeptWarning,
                    )
                if changed:
                    warn_after_restore(
                        f"{self.key} was changed to {found!r} inside the knobs block (the block set {self.value!r}); "
                        "restored the value from before the block",
                        ExternalChangeWarning,
                    )
        finally:
            if self.setting.env_var is not None:
                release_env(self.setting.env_var, self)
            self._claim.revert()


#: ``Asked.module`` of these settings: they live in torch's global context, not in a config module.
SETTINGS_MODULE = "torch"


@dataclass(frozen=True)
class Setting:
    """How to read, set and restore one process-global setting through the patch module.

    Attributes:
        key: the knob's name (``sdpa_backends``, ``tunableop``).
        state: the exact state to put back later.
        restore: puts a ``state`` back.
        set: sets the knob's value.
        value: the value now, comparable with the knob's (what attestation reads).
        problem: why the knob's value cannot be set on this torch, or None.
        what: the torch API, for messages.
        missing_feature: a problem means this torch build lacks the feature (``NotSupportedOnThisTorch``)
            rather than that the value is wrong for it (``InvalidKnobValue``).
        matches: whether a ``value`` read back is the knob's value (equal, unless this torch cannot tell
            them apart).
        read_once: for a setting torch reads once per process and keeps, when it reads it (for messages);
            None when torch reads it at every use.
        maybe_read: for a ``read_once`` setting, whether torch may have read it already in this process.
        env_var: the environment variable that is the setting, or None: every process started inside the
            block inherits it, so a launcher of fresh processes asks :func:`environ_before_knobs`.
    """

    key: str
    state: Callable[[TorchPatches], Any]
    restore: Callable[[TorchPatches, Any], None]
    set: Callable[[TorchPatches, Any], None]
    value: Callable[[TorchPatches], Any]
    problem: Callable[[TorchPatches, Any], str | None]
    what: str
    missing_feature: bool = False
    matches: Callable[[TorchPatches, Any, Any], bool] = lambda patches, found, asked: (
        type(found) is type(asked) and found == asked
    )
    read_once: str | None = None
    maybe_read: Callable[[TorchPatches], bool] = lambda patches: False
    env_var: str | None = None


def _sdpa_problem(patches: TorchPatches, value: str) -> str | None:
    here = patches.sdpa_backends_here()
    missing = [name for name in value.split(",") if name not in here]
    return f"{', '.join(missing)} not in this torch's SDPA backends ({', '.join(here)})" if missing else None


SETTINGS = {
    "sdpa_backends": Setting(
        key="sdpa_backends",
        state=lambda patches: patches.read_sdpa(),
        restore=lambda patches, state: patches.write_sdpa(*state),
        set=lambda patches, value: patches.write_sdpa(tuple(value.split(",")), None),
        value=lambda patches: ",".join(patches.read_sdpa()[0]),
        problem=_sdpa_problem,
        matches=lambda patches, found, asked: patches.sdpa_matches(found, asked),
        what="torch.backends.cuda.enable_*_sdp / torch._C._set_sdp_priority_order (what torch.nn.attention.sdpa_kernel sets)",
    ),
    "tunableop": Setting(
        key="tunableop",
        state=lambda patches: patches.read_tunableop(),
        restore=lambda patches, state: patches.write_tunableop(state),
        set=lambda patches, value: patches.write_tunableop(value),
        value=lambda patches: patches.read_tunableop(),
        problem=lambda patches, value: patches.tunableop_problem(),
        what="torch.cuda.tunable.enable",
        missing_feature=True,  # a CPU-only build has no TunableOp, whatever the value
    ),
    # Which releases have it is its knob row's since= (plan refuses it elsewhere); on a CPU-only build nothing reads it.
    "cudnn_sdpa_avoid_recompile": Setting(
        key="cudnn_sdpa_avoid_recompile",
        state=lambda patches: patches.read_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR),
        restore=lambda patches, state: patches.write_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR, state),
        set=lambda patches, value: patches.write_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR, "1" if value else "0"),
        value=lambda patches: patches.read_env(CUDNN_SDPA_AVOID_RECOMPILE_VAR) == "1",  # c10::utils::check_env: "1" only
        problem=lambda patches, value: None,
        what=f"the environment variable {CUDNN_SDPA_AVOID_RECOMPILE_VAR}",
        read_once=(
            f"torch reads {CUDNN_SDPA_AVOID_RECOMPILE_VAR} once per process, at its first dense cuDNN attention call "
            "(a static in at::native::use_ragged_in_dense, aten/src/ATen/native/cudnn/MHA.cpp, torch 2.9+), and keeps "
            "that value for the life of the process"
        ),
        maybe_read=lambda patches: patches.cuda_started(),
        env_var=CUDNN_SDPA_AVOID_RECOMPILE_VAR,
    ),
}

#: Environment variables that live blocks have set: variable -> the value each block found (None: unset),
#: outermost first.  Written by :class:`~inductor_knobs.core.changes.SettingChange`.
_ENV_FOUND: dict[str, list[tuple[object, str | None]]] = {}
_ENV_LOCK = threading.Lock()


def hold_env(var: str, token: object, found: str | None) -> None:
    """Record that the block of ``token`` set ``var``, which was ``found`` before it."""
    with _ENV_LOCK, SAFE_EXIT:
        _ENV_FOUND.setdefault(var, []).append((token, found))


def release_env(var: str, token: object) -> None:
    """Forget :func:`hold_env`'s record of ``token`` (idempotent)."""
    with _ENV_LOCK, SAFE_EXIT:
        held = [entry for entry in _ENV_FOUND.get(var, []) if entry[0] is not token]
        if held:
            _ENV_FOUND[var] = held
        else:
            _ENV_FOUND.pop(var, None)


def environ_before_knobs() -> dict[str, str]:
    """A copy of ``os.environ`` as it was before the live knobs blocks set their environment variables.

    A knob that is an environment variable (``cudnn_sdpa_avoid_recompile``) would otherwise reach every
    process started inside its block, such as an ablation's runs, whose arms choose their own settings.

    Returns:
        dict[str, str]: the environment, each variable a live block set put back to what the outermost
        such block found (removed where it was unset).
    """
    env = dict(os.environ)
    with _ENV_LOCK, SAFE_EXIT:
        for var, held in _ENV_FOUND.items():
            found = held[0][1]
            if found is None:
                env.pop(var, None)
            else:
                env[var] = found
    return env


def read_setting(patches: TorchPatches, key: str) -> Any:
    """The value of setting ``key`` now, as the knob spells it."""
    return SETTINGS[key].value(patches)


def setting_matches(patches: TorchPatches, key: str, found: Any, asked: Any) -> bool:
    """Whether setting ``key`` read back as ``found`` is the knob's value ``asked``."""
    return SETTINGS[key].matches(patches, found, asked)


def diagnose(patches: TorchPatches, cfg: Any, key: str) -> str:
    """Why ``cfg.key`` does not hold the value set, as ``"<kind>: <details>"``."""
    forcing = patches.forcing_env_var(cfg, key)
    if forcing:
        return f"env-forced: the environment variable {forcing} forces it (torch's env_name_force beats every override)"
    implied = patches.implied_by(cfg, key)
    if implied:
        return f"implication: {implied} implies it (torch 2.15 config implications beat every override)"
    foreign = foreign_setattr(cfg)
    if foreign:
        return f"foreign __setattr__: {foreign}"
    return "changed: code outside inductor_knobs changed it inside the compile"


def foreign_setattr(cfg: Any) -> str | None:
    """A description of a replaced ``__setattr__`` on ``cfg``'s class (Unsloth does this), or None."""
    setter = getattr(type(cfg), "__setattr__", None)
    code = getattr(setter, "__code__", None)
    if code is None or code.co_filename.replace("\\", "/").endswith("torch/utils/_config_module.py"):
        return None
    where = f"{code.co_filename}:{code.co_firstlineno}"
    return f"{getattr(cfg, '__name__', cfg)}.__setattr__ is {getattr(setter, '__qualname__', setter)} from {where}, not torch's"
