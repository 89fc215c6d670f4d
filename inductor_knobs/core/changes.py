"""The undo records of torch's own state: Inductor config keys, process-global settings, and claims on them.

Each is a :class:`~inductor_knobs.core.undo.Change` whose idempotent revert restores first and warns
after (:func:`~inductor_knobs.core.undo.warn_after_restore`).
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
    """``(config module, key, value)`` triples grouped by the module that stores each key (aliases, 2.7+, followed)."""
    groups: dict[int, tuple[ModuleType, dict[str, object]]] = {}
    for cfg, key, value in settings:
        module, real = patches.resolve_alias(cfg, key)
        groups.setdefault(id(module), (module, {}))[1][real] = value
    return tuple(groups.values())


def config_writers(patches: TorchPatches, groups: Groups) -> Writers:
    """The writer of each group (made once per cached plan: one call of torch's patcher per group)."""
    return tuple(patches.overrides_writer(cfg, values) for cfg, values in groups)


class ConfigChange(Change):
    """Set keys of torch ``ConfigModule`` s (overrides, or process defaults with ``process_wide``); apply
    reads each back (``KnobNotApplied``); revert restores the raw stored state, "unset" included, and warns
    (``ExternalChangeWarning``) for each key other code changed meanwhile."""

    __slots__ = ("_priors", "_restored", "groups", "patches", "process_wide", "writers")

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
        self.groups = config_groups(patches, settings) if groups is None else groups
        if writers is None and not process_wide:
            writers = config_writers(patches, self.groups)
        self.writers = writers or ()
        self.process_wide = process_wide
        #: Per group written so far, ``[module, states found before the write, torch's revert once the write
        #: returned]``: one list, so an interrupt cannot leave them out of step (no revert: states written back).
        self._priors: list[list[Any]] = []
        self._restored = False

    def apply(self) -> None:
        # Written through torch's raw patcher, not setattr: a foreign __setattr__ on the config
        # module (Unsloth's rewrites the process default) would make the revert inexact.
        patches, process_wide, writers = self.patches, self.process_wide, self.writers
        read = patches.process_default_state if process_wide else patches.read_override
        for index, (cfg, values) in enumerate(self.groups):
            found_before = [cfg, {key: read(cfg, key) for key in values}, None]
            self._priors.append(found_before)  # before the write: revert puts back only what was captured
            if process_wide:
                for key, value in values.items():
                    patches.set_process_default(cfg, key, value)
            else:
                found_before[2] = writers[index]()
            for key, value in values.items():
                found = patches.read_value(cfg, key) if process_wide else patches.read_config(cfg, key)
                if found != value:
                    cause = diagnose(patches, cfg, key)
                    self._restore()
                    raise KnobNotApplied(
                        f"{cfg.__name__}.{key}={value!r} did not take: it reads back {found!r}, because {cause}. "
                        "Remove that cause or leave this knob out."
                    )

    def revert(self) -> None:
        """Idempotent; restores first, then warns, so a warning raised as an error cannot stop a restore."""
        changed: list[str] = []
        if not self._restored:
            process_wide, read_override = self.process_wide, self.patches.read_override
            for (cfg, values), (_, prior, undo) in zip(self.groups, self._priors):
                if not process_wide and undo is None:
                    continue  # an interrupt before its write returned: nothing of this block's to check
                for key in prior:
                    value = values[key]
                    # Every write to an override (setattr, config.patch, torch's raw patcher) replaces the stored
                    # override, so comparing it is exact and cheaper than getattr's whole ConfigModule lookup.
                    if process_wide:
                        is_changed = not self.patches.process_default_holds(cfg, key, value)
                    else:
                        stored = read_override(cfg, key)
                        is_changed = stored is not value and stored != value
                    if is_changed:
                        now = self.patches.read_value(cfg, key) if process_wide else self.patches.read_config(cfg, key)
                        changed.append(
                            f"{cfg.__name__}.{key} was changed to {now!r} inside the knobs block "
                            f"(the block set {value!r}); restored the value from before the block"
                        )
        self._restore()
        for message in changed:
            warn_after_restore(message, ExternalChangeWarning)

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


#: Process-global resource -> its holds: (owner (thread id, asyncio task id), the Claim holding it), so a
#: revert releases its own hold and no other (a nested block of the same owner holds it too).
_HOLDERS: dict[str, list[tuple[tuple[int, int | None], Claim]]] = {}
_HOLDERS_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)


class Claim(Change):
    """Hold a process-global ``resource`` for the calling thread/task (nested holds allowed); apply raises
    ``ConcurrentKnobsError`` while another owner holds it; revert releases this record's hold only.

    Args:
        resource (str): what is held, e.g. ``"torch._inductor.config"`` where Inductor's config is process-global.
        what (str): why it is process-global, for the refusal's message.
        asked (str): what the caller entered (a knob, a block), for the refusal's message.

    Raises (``apply``):
        ConcurrentKnobsError: another thread or asyncio task holds ``resource``; nothing is held then.
    """

    __slots__ = ("_owner", "asked", "resource", "what")

    def __init__(self, resource: str, what: str, asked: str) -> None:
        self.resource = resource
        self.what = what
        self.asked = asked
        self._owner: tuple[int, int | None] | None = None

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
    """Set the process-global setting ``SETTINGS[key]`` under a :class:`Claim` and put back the exact state found.

    A ``read_once`` setting is refused once torch may have read it (``SettingAlreadyRead``) and warned about
    (``SettingKeptWarning``) when read inside the block; ``in_compile`` (a lazy backward) skips both.
    """

    __slots__ = ("_changed", "_claim", "_outside", "_prior", "_set", "in_compile", "key", "patches", "setting", "value")

    def __init__(self, patches: TorchPatches, key: str, value: object, *, in_compile: bool = False) -> None:
        self.patches = patches
        self.key = key
        self.value = value
        self.in_compile = in_compile
        self.setting = SETTINGS[key]
        self._changed = False  # a read_once setting this record changed before torch could have read it
        self._prior: Any = _NOT_READ
        self._set = False  # the value was written (an interrupted write is not someone else's change)
        self._outside: tuple[Any, ...] | None = None  # (what someone else set,) or (): read once, before the restore
        self._claim = Claim(key, f"torch keeps it once per process ({self.setting.what})", f"{key}={value!r}")

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
        self._set = True
        found = setting.value(self.patches)
        if not setting.matches(self.patches, found, self.value):
            self.revert()
            raise KnobNotApplied(f"{self.key}={self.value!r} did not take: it reads back {found!r} ({setting.what})")

    def revert(self) -> None:
        try:
            if self._prior is not _NOT_READ:
                if self._outside is None:
                    found = self.setting.value(self.patches) if self._set else self.value
                    self._outside = () if self.setting.matches(self.patches, found, self.value) else (found,)
                self.setting.restore(self.patches, self._prior)
                self._prior = _NOT_READ  # only once restored: a revert interrupted before that restores on its retry
                outside, self._outside, self._set = self._outside, None, False
                if self._changed and self.setting.maybe_read(self.patches):
                    self._changed = False
                    warn_after_restore(
                        f"{self.key}={self.value!r}: CUDA started inside the block, so torch may have read "
                        f"{self.setting.what} there ({self.setting.read_once}); the block's exit restored the "
                        "variable, but torch keeps what it read",
                        SettingKeptWarning,
                    )
                if outside:
                    warn_after_restore(
                        f"{self.key} was changed to {outside[0]!r} inside the knobs block (the block set {self.value!r}); "
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

    ``missing_feature``: a ``problem`` means this build lacks the feature (``NotSupportedOnThisTorch``), not a
    bad value.  ``read_once``: when torch reads it once per process and keeps it (None: read at every use);
    ``maybe_read`` says whether that may have happened.  ``env_var``: the variable that is the setting.
    """

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
        state=lambda patches: patches.read_sdpa(),
        restore=lambda patches, state: patches.write_sdpa(*state),
        set=lambda patches, value: patches.write_sdpa(tuple(value.split(",")), None),
        value=lambda patches: ",".join(patches.read_sdpa()[0]),
        problem=_sdpa_problem,
        matches=lambda patches, found, asked: patches.sdpa_matches(found, asked),
        what="torch.backends.cuda.enable_*_sdp / torch._C._set_sdp_priority_order (what torch.nn.attention.sdpa_kernel sets)",
    ),
    "tunableop": Setting(
        state=lambda patches: patches.read_tunableop(),
        restore=lambda patches, state: patches.write_tunableop(state),
        set=lambda patches, value: patches.write_tunableop(value),
        value=lambda patches: patches.read_tunableop(),
        problem=lambda patches, value: patches.tunableop_problem(),
        what="torch.cuda.tunable.enable",
        missing_feature=True,  # a CPU-only build has no TunableOp, whatever the value
    ),
    # Its releases are its knob row's since= (plan refuses it elsewhere); on a CPU-only build nothing reads it.
    "cudnn_sdpa_avoid_recompile": Setting(
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
#: outermost first.
_ENV_FOUND: dict[str, list[tuple[object, str | None]]] = {}
_ENV_LOCK = threading.Lock()


def hold_env(var: str, token: object, found: str | None) -> None:
    """Record that the block of ``token`` set ``var``, which was ``found`` before it."""
    with _ENV_LOCK, SAFE_EXIT:
        _ENV_FOUND.setdefault(var, []).append((token, found))


def env_held_only_by(var: str, token: object) -> bool:
    """Whether :func:`hold_env`'s records of ``var`` are ``token``'s alone (no live block set it since)."""
    with _ENV_LOCK, SAFE_EXIT:
        return all(entry[0] is token for entry in _ENV_FOUND.get(var, []))


def release_env(var: str, token: object) -> None:
    """Forget :func:`hold_env`'s record of ``token`` (idempotent)."""
    with _ENV_LOCK, SAFE_EXIT:
        held = [entry for entry in _ENV_FOUND.get(var, []) if entry[0] is not token]
        if held:
            _ENV_FOUND[var] = held
        else:
            _ENV_FOUND.pop(var, None)


def environ_before_knobs() -> dict[str, str]:
    """A copy of ``os.environ`` as it was before the live knobs blocks set their variables
    (``cudnn_sdpa_avoid_recompile``), for launching fresh processes that choose their own settings.

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
