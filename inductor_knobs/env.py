"""Process-wide activation from ``INDUCTOR_KNOBS_*`` environment variables.

The variables' knobs become process-wide defaults (every thread; child processes through the environment and
:mod:`inductor_knobs.startup`).  Precedence: knob > env > ``torch.compile`` options > mode > torch's default.
On 2.12+ overrides are per thread (``torch/utils/_config_module.py``), so activation sets the entries' defaults:
it beats ``TORCHINDUCTOR_<KEY>_DEFAULT``, and ``env_name_force`` beats it (named in the error).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .core.knobs import EMULATE_SHARED_MEMORY_VAR, EMULATE_SMS_VAR, ENV_PREFIX, KNOBS, Knobs
from .core.undo import SAFE_EXIT
from .emulation.gpus import EmulationSpec, spec_from_text
from .errors import InvalidKnobValue, KnobsError, KnobsWarning, StaleConfigHashWarning, torch_version

if TYPE_CHECKING:
    from .core.undo import Undo

DISABLE_VAR = ENV_PREFIX + "DISABLE"
DISABLE_HINT = f"fix the variable, or set {DISABLE_VAR}=1 to run without inductor_knobs"
_T = TypeVar("_T")

# Re-entrant: an explicit activate_from_env() before torch._inductor.utils exists imports it
# while planning, and the startup hook's activation then runs inside the outer one.
_lock = threading.RLock()
_active: tuple[tuple[Knobs, EmulationSpec | None], list[Undo]] | None = None
_activating = False


def activation_disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``INDUCTOR_KNOBS_DISABLE`` is set to a true word (1, true, yes, on) in ``environ`` (default
    ``os.environ``)."""
    env = os.environ if environ is None else environ
    return env.get(DISABLE_VAR, "").strip().lower() in ("1", "true", "yes", "on")


def env_requests_knobs(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a non-empty ``INDUCTOR_KNOBS_*`` other than ``DISABLE`` is set and activation is not disabled."""
    env = os.environ if environ is None else environ
    if activation_disabled(env):
        return False
    return any(k.startswith(ENV_PREFIX) and k != DISABLE_VAR and v.strip() for k, v in env.items())


def emulation_from_env(environ: Mapping[str, str] | None = None) -> EmulationSpec | None:
    """``INDUCTOR_KNOBS_EMULATE_SMS`` (SM count or preset) and ``_EMULATE_SHARED_MEMORY`` (bytes); None when unset.
    Raises InvalidKnobValue or UnknownKnob naming the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(EMULATE_SMS_VAR, "").strip()
    raw_smem = env.get(EMULATE_SHARED_MEMORY_VAR, "").strip()
    if not raw:
        if raw_smem:
            raise InvalidKnobValue(
                f"{EMULATE_SHARED_MEMORY_VAR}={raw_smem!r} needs {EMULATE_SMS_VAR} (an SM count or a GPU preset)"
            )
        return None
    source = f"{EMULATE_SMS_VAR}={raw!r}" + (f", {EMULATE_SHARED_MEMORY_VAR}={raw_smem!r}" if raw_smem else "")
    try:
        smem = int(raw_smem) if raw_smem else None
    except ValueError:
        raise InvalidKnobValue(
            f"{EMULATE_SHARED_MEMORY_VAR}={raw_smem!r} is not allowed; it must be an int number of bytes"
        ) from None
    return spec_from_text(raw, shared_memory_per_block=smem, source=source)


def start_up() -> list[str]:
    """The startup hook's check, without torch: raise on a bad ``INDUCTOR_KNOBS_*`` (nothing set), else set each
    unset ``Setting.env_var`` torch reads by its first CUDA call when all knobs exist on this torch; returns the
    problems, one line each, for stderr (a variable set to another value is left and reported; an
    ``INDUCTOR_KNOBS_DISABLE`` that is neither a true nor a false word is named)."""
    raw = os.environ.get(DISABLE_VAR, "").strip()
    unread = raw and not activation_disabled() and raw.lower() not in ("0", "false", "no", "off")
    lines = [f"{DISABLE_VAR}={raw!r} is neither 1/true/yes/on nor 0/false/no/off: the variables apply as if it were unset"]
    return (lines if unread else []) + _start_up_checked()


def _start_up_checked() -> list[str]:
    from .core import torch_compat
    from .core.changes import SETTINGS, hold_env

    with warnings.catch_warnings():  # a torch outside the supported range is the first compile's to report
        warnings.simplefilter("ignore")
        knobs = env_knobs()  # a backends check selects the patch module too
        _hinted(emulation_from_env, None)
        version = torch_version()
        if knobs is None or version == "not installed":
            return []
        patches = torch_compat.select(version, strict=False)
    release = torch_compat.release_of(version)
    lines = []
    config = dict(knobs.config)
    for name, row in KNOBS.items():
        key = getattr(row.changes, "key", None)
        if not row.on(release) and (getattr(knobs, name) is not None or key in config):
            var = ENV_PREFIX + (name if getattr(knobs, name) is not None else "config").upper()
            lines.append(
                f"{var} asks for {name}, which needs {row.releases()}; the installed torch {version} does not have it: "
                f"the first compile refuses it, with nothing applied; {DISABLE_HINT}"
            )
    if lines:
        return lines
    kept = _set_otherwise(knobs, patches, release)
    for key, setting in SETTINGS.items():
        value = getattr(knobs, key)
        if setting.env_var is None or value is None or not KNOBS[key].on(release):
            continue
        if key in kept:
            lines.append(
                f"{ENV_PREFIX}{key.upper()} asks for {key}={value!r}, but {setting.env_var}="
                f"{kept[key]!r} is set in the environment: left as it is (unset one of the two)"
            )
        elif setting.state(patches) is None:
            setting.set(patches, value)
            hold_env(setting.env_var, start_up, None)  # the outermost find: unset
            _SET_AT_START_UP[setting.env_var] = str(os.environ.get(setting.env_var))
    return lines


def _set_otherwise(knobs: Knobs, patches: Any, release: str) -> dict[str, Any]:
    """The settings of ``knobs`` (on ``release``) whose torch variable the environment sets to another value than
    the knob asks, with that variable's state: start-up reports them and leaves them, and activation leaves them."""
    from .core.changes import SETTINGS

    found = {}
    for key, setting in SETTINGS.items():
        value = getattr(knobs, key)
        if setting.env_var is None or value is None or not KNOBS[key].on(release):
            continue
        if setting.state(patches) is not None and not setting.matches(patches, setting.value(patches), value):
            found[key] = setting.state(patches)
    return found


#: The variables :func:`start_up` set (variable -> the value it wrote); an activation that fails takes them back.
_SET_AT_START_UP: dict[str, str] = {}


def knobs_to_apply(knobs: Knobs) -> Knobs:
    """``knobs`` as activation applies them: without a setting whose torch variable the environment already sets
    to another value (``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=0`` beside ``INDUCTOR_KNOBS_CUDNN_SDPA_AVOID_RECOMPILE=1``),
    which :func:`start_up` reports as left as it is.  A knob the installed torch lacks stays, for the activation to
    refuse.  Imports torch."""
    from .core import torch_compat

    patches = torch_compat.installed(strict=False)
    dropped = _set_otherwise(knobs, patches, torch_compat.release_of(torch_version()))
    return Knobs(**{name: value for name, value in knobs.to_dict().items() if name not in dropped}) if dropped else knobs


def activation_plan(knobs: Knobs, emulation: EmulationSpec | None) -> list[Any]:
    """The changes activation applies for ``knobs`` (as :func:`knobs_to_apply` leaves them) and ``emulation``,
    process-wide, in apply order; validated, nothing changed.  ``inductor-knobs doctor`` plans the variables so.

    Raises:
        KnobsError: what the first compile's activation would raise (a key or value torch refuses, a knob this torch
            lacks, emulation without a GPU).
    """
    from .core.plan import plan
    from .emulation.block import plan_emulation

    changes = plan_emulation(emulation, process_wide=True)[0] if emulation else []
    return changes + plan(knobs, process_wide=True, source="env")


def _take_back_start_up(knobs: Knobs, environ: Mapping[str, str] | None) -> None:
    """Unset what :func:`start_up` set for ``knobs`` (an activation of the process's own variables failed), where
    start-up alone holds it (no live block set it since) and it still holds what start-up wrote."""
    from .core.changes import SETTINGS, env_held_only_by, release_env

    if environ is not None and environ is not os.environ:
        return  # another mapping's failure says nothing of the process's own variables
    for key, setting in SETTINGS.items():
        var = setting.env_var
        if var is None or getattr(knobs, key) is None or var not in _SET_AT_START_UP:
            continue
        if env_held_only_by(var, start_up) and os.environ.get(var) == _SET_AT_START_UP[var]:
            os.environ.pop(var, None)
            release_env(var, start_up)
            _SET_AT_START_UP.pop(var, None)


def _named(err: KnobsError, environ: Mapping[str, str] | None) -> KnobsError:
    """``err``, raised while planning or applying the variables' knobs, its message naming the variables set and the
    way out (the same object: its type and attributes stay)."""
    env = os.environ if environ is None else environ
    names = sorted(var for var, raw in env.items() if var.startswith(ENV_PREFIX) and var != DISABLE_VAR and raw.strip())
    err.args = (f"{err} (from {', '.join(names)}); {DISABLE_HINT}", *err.args[1:])
    return err


def _hinted(read: Callable[[Mapping[str, str] | None], _T], environ: Mapping[str, str] | None) -> _T:
    """``read(environ)``, whose error also names ``INDUCTOR_KNOBS_DISABLE=1``."""
    try:
        return read(environ)
    except KnobsError as err:
        raise type(err)(f"{err}; {DISABLE_HINT}") from None


def activate_from_env(environ: Mapping[str, str] | None = None) -> Knobs | None:
    """Apply ``INDUCTOR_KNOBS_*`` from ``environ`` (default ``os.environ``) as process-wide defaults; idempotent.

    Returns:
        The knobs applied, or None when no variable is set or ``INDUCTOR_KNOBS_DISABLE=1``.

    Raises (nothing is applied):
        UnknownKnob, InvalidKnobValue: a bad variable or value (the message names it).
        KnobsError: other knobs are already active (call :func:`deactivate_env` first).
    """
    global _active
    knobs = env_knobs(environ)
    if knobs is None:
        return None
    knobs = knobs_to_apply(knobs)  # what is applied is what is returned and compared
    emulation = _hinted(emulation_from_env, environ)
    stale = _stale_caches_message("activate_from_env()")
    if stale is not None:
        warnings.warn(stale, StaleConfigHashWarning, stacklevel=2)
    with _lock, SAFE_EXIT:
        if _activating:  # the import hook, re-entered while this thread plans: the outer call applies
            return knobs
        if _active is not None:
            if _active[0] == (knobs, emulation):
                return knobs
            raise KnobsError(
                f"INDUCTOR_KNOBS_* already activated {_active[0][0].to_dict()} (emulation: {_active[0][1]}); "
                f"refusing to stack {knobs.to_dict()} (emulation: {emulation}) on top "
                "(call inductor_knobs.deactivate_env() first)"
            )
        _active = ((knobs, emulation), _apply(knobs, emulation, environ))  # a call: no try in the locked body (SAFE_EXIT)
    return knobs


def _apply(knobs: Knobs, emulation: EmulationSpec | None, environ: Mapping[str, str] | None) -> list[Undo]:
    """Plan and apply env activation process-wide, flagged as activating meanwhile (under ``_lock``)."""
    global _activating
    _activating = True
    try:
        from .core.undo import apply_all

        return apply_all(activation_plan(knobs, emulation))
    except KnobsError as err:
        _take_back_start_up(knobs, environ)
        raise _named(err, environ) from None
    except BaseException:
        _take_back_start_up(knobs, environ)
        raise
    finally:
        _activating = False


def env_knobs(environ: Mapping[str, str] | None = None) -> Knobs | None:
    """The knobs ``INDUCTOR_KNOBS_*`` ask for (``Knobs.from_env``), or None: a function of ``environ`` alone."""
    return _hinted(Knobs.from_env, environ) if env_requests_knobs(environ) else None


def active_env_knobs() -> Knobs | None:
    """The knobs :func:`activate_from_env` applied, or None (before activation, see :func:`env_knobs`)."""
    return _active[0][0] if _active else None


def deactivate_env() -> None:
    """Revert :func:`activate_from_env`, restoring process-wide state exactly; callable from any thread (on 2.12+
    an override activation rewrote in the activating thread's context is put back only from that context).

    Raises:
        KnobsError: before torch 2.12, a config-changing knobs block is active; nothing is reverted.

    Warns (after everything is restored):
        StaleConfigHashWarning: another thread or task holds per-thread config caches left stale.
        KnobsWarning: run off the activating thread, whose rewritten override keeps the knob's value.
    """
    global _active
    from .core import torch_compat
    from .core.undo import revert_all

    with _lock, SAFE_EXIT:
        if _active is None:
            return
        # Before 2.12 a block and activation write the same process-global config: the block's exit would undo this.
        if not torch_compat.installed(strict=False).config_is_thread_local:
            from .core.blocks import live_blocks

            blocks = [block for block in live_blocks() if block.changes_config]
            if blocks:
                raise KnobsError(
                    f"deactivate_env() while {blocks[-1]!r} is active: on this torch ({torch_version()}) Inductor config is "
                    "process-global, so the block's exit would put activation's values back. Exit the block first (nothing "
                    "was reverted)"
                )
        stale = _stale_caches_message("deactivate_env()")
        out_of_reach: list[str] = getattr(torch_compat.installed(strict=False), "overrides_out_of_reach", list)()
        changes, _active = _active[1], None
        revert_all(changes)
    if stale is not None:  # warnings only once everything is restored (-W error cannot cut a restore short)
        warnings.warn(stale, StaleConfigHashWarning, stacklevel=2)
    if out_of_reach:
        warnings.warn(
            f"deactivate_env() ran on thread {threading.current_thread().name!r}; the override that activation "
            f"rewrote in the activating thread's own context cannot be restored from here and keeps the knob's "
            f"value: {', '.join(out_of_reach)}. Call deactivate_env() on the thread that called activate_from_env()",
            KnobsWarning,
            stacklevel=2,
        )


def _stale_caches_message(what: str) -> str | None:
    """Why other contexts' config caches go stale under new defaults, or None: 2.12+ caches ``get_hash()``/``_get_dict``
    per context and a default change marks none dirty (``torch/utils/_config_module.py``)."""
    from .core import torch_compat

    if threading.active_count() < 2 or "torch._inductor.config" not in sys.modules:
        return None
    patches = torch_compat.installed(strict=False)
    if not patches.config_is_thread_local:
        return None
    count = getattr(patches, "stale_config_caches", lambda cfg: None)(sys.modules["torch._inductor.config"])
    if count == 0:
        return None
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    held = "other threads are alive" if count is None else f"{count} other thread(s) or task(s) hold cached Inductor config"
    return (
        f"{what} changes process-wide Inductor defaults while {held} (alive: {', '.join(others[:5])}); "
        "on this torch each thread caches its config hash and cache-key config, so a thread that has already "
        "compiled would compile with the new values under its old cache key. Activate before starting threads "
        "that compile, or restart them"
    )
