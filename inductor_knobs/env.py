"""Process-wide activation from ``INDUCTOR_KNOBS_*`` environment variables.

:func:`activate_from_env` applies the knobs the variables describe as process-wide
defaults: every thread sees them (on torch 2.12+ they become the config entries' defaults,
since user overrides there are per thread), and child processes see them through the
inherited environment and the startup hook (:mod:`inductor_knobs.startup`).  A thread's
own ``with ik.knobs(...)`` still wins inside its block.

Precedence: knob > env > ``torch.compile``/``ik.compile`` options > mode > torch's default, and on
2.12+ env activation also beats a ``TORCHINDUCTOR_<KEY>_DEFAULT`` variable (which only sets a
default); a forcing variable (``env_name_force``) beats it and is named in the error.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .core.knobs import EMULATE_SHARED_MEMORY_VAR, EMULATE_SMS_VAR, ENV_PREFIX, KNOBS, Knobs
from .core.undo import SAFE_EXIT
from .emulation.gpus import EmulationSpec, spec_from_text
from .errors import InvalidKnobValue, KnobsError, KnobsWarning, StaleConfigHashWarning

if TYPE_CHECKING:
    from .core.undo import Undo

DISABLE_VAR = ENV_PREFIX + "DISABLE"

# Re-entrant: an explicit activate_from_env() before torch._inductor.utils exists imports it
# while planning, and the startup hook's activation then runs inside the outer one.
_lock = threading.RLock()
_active: tuple[tuple[Knobs, EmulationSpec | None], list[Undo]] | None = None
_activating = False


def env_requests_knobs(environ: Mapping[str, str] | None = None) -> bool:
    """Whether any ``INDUCTOR_KNOBS_*`` variable other than ``DISABLE`` has a non-empty value, and activation is not disabled.

    An empty value means unset (``INDUCTOR_KNOBS_MIN_SMS=`` in a launch script does nothing).
    """
    env = os.environ if environ is None else environ
    if env.get(DISABLE_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    return any(k.startswith(ENV_PREFIX) and k != DISABLE_VAR and v.strip() for k, v in env.items())


DISABLE_HINT = f"fix the variable, or set {DISABLE_VAR}=1 to run without inductor_knobs"


def defer_error(err: BaseException) -> None:
    """Keep a bad ``INDUCTOR_KNOBS_*`` for the first Inductor compile, which raises it once.

    Called by the startup hook instead of raising inside ``import torch._inductor.compile_fx``.
    """
    from .core import torch_compat
    from .core.interception import raise_at_first_compile

    raise_at_first_compile(err, torch_compat.installed(strict=False))


def emulation_from_env(environ: Mapping[str, str] | None = None) -> EmulationSpec | None:
    """Read ``INDUCTOR_KNOBS_EMULATE_SMS`` (an SM count or a preset name such as ``T4``) and
    ``INDUCTOR_KNOBS_EMULATE_SHARED_MEMORY`` (bytes per block); None when the first is unset.

    Raises:
        InvalidKnobValue, UnknownKnob: a bad value; the message names the variable.
    """
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
    smem: int | None = None
    if raw_smem:
        try:
            smem = int(raw_smem)
        except ValueError:
            raise InvalidKnobValue(
                f"{EMULATE_SHARED_MEMORY_VAR}={raw_smem!r} is not allowed; it must be an int number of bytes"
            ) from None
    return spec_from_text(raw, shared_memory_per_block=smem, source=source)


def start_up() -> list[str]:
    """What the startup hook does at interpreter start, before torch is imported: check the ``INDUCTOR_KNOBS_*``
    variables and set the environment variables of the process settings torch reads from its environment at or
    before its first CUDA call (``Setting.env_var`` in :mod:`inductor_knobs.core.changes`:
    ``TORCH_CUDNN_SDPA_AVOID_RECOMPILE`` for ``cudnn_sdpa_avoid_recompile``).  Everything else waits for the
    first Inductor compile (:func:`activate_from_env`).

    Such a variable is set in ``os.environ`` only when every ``INDUCTOR_KNOBS_*`` variable is good, the installed
    torch has the knob (its row's ``since``; the version from package metadata) and the variable is
    unset; one already set to the knob's value is the user's, one set to another value is left as it is and
    reported.  Activation at the first compile then finds the value in force: its
    :class:`~inductor_knobs.core.changes.SettingChange` changes nothing (no
    :class:`~inductor_knobs.errors.SettingAlreadyRead` when CUDA has started) and attests the setting with source
    env.  A variable set here counts as set by knobs for :func:`~inductor_knobs.core.changes.environ_before_knobs`
    (processes an ablation starts do not inherit it).  Imports neither torch nor Inductor.

    Returns:
        list[str]: one line per problem, for stderr; empty when all is well.

    Raises:
        UnknownKnob, InvalidKnobValue: a variable or value is bad (nothing is set; the startup hook says it on
            stderr, and the first compile raises it).
    """
    import warnings

    from .core import torch_compat
    from .core.changes import SETTINGS, hold_env
    from .errors import torch_version

    knobs = env_knobs()
    emulation_or_hint(None)
    version = torch_version()
    if knobs is None or version == "not installed":
        return []
    with warnings.catch_warnings():  # a torch outside the supported range is the first compile's to report
        warnings.simplefilter("ignore")
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
        return lines  # the first compile applies nothing, so nothing is set now either
    for key, setting in SETTINGS.items():
        value = getattr(knobs, key)
        if setting.env_var is None or value is None or not KNOBS[key].on(release):
            continue
        if setting.state(patches) is None:
            setting.set(patches, value)
            hold_env(setting.env_var, start_up, None)  # the outermost find: unset
        elif not setting.matches(patches, setting.value(patches), value):
            lines.append(
                f"{ENV_PREFIX}{key.upper()} asks for {key}={value!r}, but {setting.env_var}="
                f"{setting.state(patches)!r} is set in the environment: left as it is (unset one of the two)"
            )
    return lines


def emulation_or_hint(environ: Mapping[str, str] | None) -> EmulationSpec | None:
    """:func:`emulation_from_env`, whose error also names ``INDUCTOR_KNOBS_DISABLE=1``."""
    try:
        return emulation_from_env(environ)
    except KnobsError as err:
        raise type(err)(f"{err}; {DISABLE_HINT}") from None


def activate_from_env(environ: Mapping[str, str] | None = None) -> Knobs | None:
    """Apply ``INDUCTOR_KNOBS_*`` as process-wide defaults; idempotent.

    Args:
        environ: the variables to read (default ``os.environ``).

    Returns:
        The knobs applied, or None when no variable is set or ``INDUCTOR_KNOBS_DISABLE=1``.
        A second call with the same variables returns the active knobs and changes nothing.

    Raises:
        UnknownKnob, InvalidKnobValue: a variable or value is bad (the message names it).
        KnobsError: a variable asks for different knobs than are already active
            (call :func:`deactivate_env` first).  Nothing is applied on any error.
    """
    global _active
    knobs = env_knobs(environ)
    if knobs is None:
        return None
    emulation = emulation_or_hint(environ)
    _warn_if_other_threads_compiled("activate_from_env()")
    with _lock, SAFE_EXIT:
        if _activating:  # re-entered from the import hook while this thread plans; the outer call applies
            return knobs
        if _active is not None:
            if _active[0] == (knobs, emulation):
                return knobs
            raise KnobsError(
                f"INDUCTOR_KNOBS_* already activated {_active[0][0].to_dict()} (emulation: {_active[0][1]}); "
                f"refusing to stack {knobs.to_dict()} (emulation: {emulation}) on top "
                "(call inductor_knobs.deactivate_env() first)"
            )
        _active = ((knobs, emulation), _apply(knobs, emulation))  # a call: no try in the locked body (SAFE_EXIT)
    return knobs


def _apply(knobs: Knobs, emulation: EmulationSpec | None) -> list[Undo]:
    """Plan and apply env activation process-wide, marking this thread as activating meanwhile (under ``_lock``)."""
    global _activating
    _activating = True
    try:
        from .core.plan import plan
        from .core.undo import apply_all
        from .emulation.block import plan_emulation

        changes = plan_emulation(emulation, process_wide=True)[0] if emulation else []
        return apply_all(changes + plan(knobs, process_wide=True, source="env"))
    finally:
        _activating = False


def env_knobs(environ: Mapping[str, str] | None = None) -> Knobs | None:
    """The knobs the ``INDUCTOR_KNOBS_*`` variables ask for: what :func:`activate_from_env` applies.

    A function of the environment alone: the same before and after activation (which happens at the
    first Inductor compile, and never in a process that only loads an AOT package).

    Args:
        environ: the variables to read (default ``os.environ``).

    Returns:
        The knobs (``Knobs.from_env``, presets expanded), or None when no variable is set or
        ``INDUCTOR_KNOBS_DISABLE=1``.  The ``INDUCTOR_KNOBS_EMULATE_*`` variables are not knobs
        (:func:`emulation_from_env`).

    Raises:
        UnknownKnob, InvalidKnobValue: a variable or value is bad (the message names it, what is allowed,
            the torch version and ``INDUCTOR_KNOBS_DISABLE=1``).
    """
    if not env_requests_knobs(environ):
        return None
    try:
        return Knobs.from_env(environ)
    except KnobsError as err:
        raise type(err)(f"{err}; {DISABLE_HINT}") from None


def active_env_knobs() -> Knobs | None:
    """The knobs :func:`activate_from_env` applied, or None (before activation, see :func:`env_knobs`)."""
    return _active[0][0] if _active else None


def deactivate_env() -> None:
    """Revert :func:`activate_from_env` (for tests and long-lived tools); callable from any thread.

    Process-wide state (config defaults, the gate override, what the interception enforces) is
    restored exactly from any thread.  On torch 2.12+, where overrides are per thread, no thread's
    own override is written, except the override of a key that activation itself changed in the
    activating thread's context (it clears a pin of the old default that torch's ``config.patch``
    left there, or rewrites an override set on purpose): that one is put back when deactivation
    runs in that context.  From another thread a cleared pin reads the old value again anyway; a
    rewritten override keeps the knob's value (see :mod:`inductor_knobs.patches.torch_2_12`).

    Raises:
        KnobsError: before torch 2.12, a knobs block that changes config is active (its exit would put
            activation's values back in process-global config); nothing is reverted.

    Warns:
        StaleConfigHashWarning: another thread or task holds config caches (torch's per-thread
            ``get_hash``/cache-key config) that the change leaves stale.
        KnobsWarning: deactivation ran on another thread than the one whose own override activation
            rewrote; that thread keeps the knob's value in it (call this on that thread instead).
        Both are issued after everything is restored.
    """
    global _active
    import warnings

    from .core import torch_compat
    from .core.undo import revert_all

    with _lock, SAFE_EXIT:
        if _active is None:
            return
        _refuse_under_a_process_global_block()
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


def _refuse_under_a_process_global_block() -> None:
    """Before torch 2.12 a knobs block and env activation write the same process-global config value, so
    reverting activation under a live block would be undone by the block's own exit (it restores what it
    found: activation's value).  Refuse instead, changing nothing; from 2.12 the block's value is its own
    thread's override and activation is reverted under it exactly."""
    from .core import torch_compat
    from .core.blocks import live_blocks
    from .errors import torch_version

    if torch_compat.installed(strict=False).config_is_thread_local:
        return
    blocks = [block for block in live_blocks() if block.changes_config]
    if blocks:
        raise KnobsError(
            f"deactivate_env() while {blocks[-1]!r} is active: on this torch ({torch_version()}) Inductor config is "
            "process-global, so the block's exit would put activation's values back. Exit the block first (nothing "
            "was reverted)"
        )


def _warn_if_other_threads_compiled(what: str) -> None:
    """Warn (:class:`StaleConfigHashWarning`) when :func:`_stale_caches_message` finds stale caches."""
    import warnings

    message = _stale_caches_message(what)
    if message is not None:
        warnings.warn(message, StaleConfigHashWarning, stacklevel=3)


def _stale_caches_message(what: str) -> str | None:
    """Why another thread or task holds Inductor config caches that new process defaults leave stale, or None.

    torch 2.12+ caches ``get_hash()`` and the cache-key dict (``_get_dict``) per thread/context,
    and a change of an entry's default marks none of them dirty, so a thread that already compiled
    would compile with the new values under its old cache key.  The signal is torch's own: the
    adapter's ``stale_config_caches`` (2.12+) counts other contexts holding such caches; a thread
    that merely exists holds none.  Where the adapter cannot tell (None), any other live thread
    counts, as before.  Costs nothing with one thread alive.
    """
    import sys

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
