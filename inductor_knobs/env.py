"""Process-wide activation from ``INDUCTOR_KNOBS_*`` environment variables.

:func:`activate_from_env` applies the knobs the variables describe as process-wide
defaults: every thread sees them (on torch 2.12+ they become the config entries' defaults,
since user overrides there are per thread), and child processes see them through the
inherited environment and the startup hook (:mod:`inductor_knobs._startup`).  A thread's
own ``with ik.knobs(...)`` still wins inside its block.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from ._undo import Undo, apply_all, revert_all
from .emulate import EmulationSpec, plan_emulation, spec_from_text
from .errors import InvalidKnobValue, KnobsError, StaleConfigHashWarning
from .knobs import EMULATE_SHARED_MEMORY_VAR, EMULATE_SMS_VAR, ENV_PREFIX, Knobs
from .plan import plan

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
    from . import torch_compat
    from .interception import raise_at_first_compile

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
    global _active, _activating
    if not env_requests_knobs(environ):
        return None
    try:
        knobs = Knobs.from_env(environ)
        emulation = emulation_from_env(environ)
    except KnobsError as err:
        raise type(err)(f"{err}; {DISABLE_HINT}") from None
    _warn_if_other_threads_compiled("activate_from_env()")
    with _lock:
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
        _activating = True
        try:
            changes = plan_emulation(emulation, process_wide=True)[0] if emulation else []
            _active = ((knobs, emulation), apply_all(changes + plan(knobs, process_wide=True, source="env")))
        finally:
            _activating = False
    return knobs


def active_env_knobs() -> Knobs | None:
    """The knobs :func:`activate_from_env` applied, or None."""
    return _active[0][0] if _active else None


def deactivate_env() -> None:
    """Revert :func:`activate_from_env` exactly (for tests and long-lived tools)."""
    global _active
    with _lock:
        if _active is not None:
            _warn_if_other_threads_compiled("deactivate_env()")
            changes, _active = _active[1], None
            revert_all(changes)


def _warn_if_other_threads_compiled(what: str) -> None:
    """torch 2.12+ caches ``get_hash`` and the cache-key dict per thread: threads that already
    compiled would compile with the new process defaults under their old cache key."""
    import sys
    import warnings

    from . import torch_compat

    if "torch._inductor.compile_fx" not in sys.modules or threading.active_count() < 2:
        return
    if not torch_compat.installed(strict=False).config_is_thread_local:
        return
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    warnings.warn(
        f"{what} changes process-wide Inductor defaults while other threads are alive ({', '.join(others[:5])}); "
        "on this torch each thread caches its config hash, so a thread that has already compiled would compile "
        "with the new values under its old cache key. Activate before starting threads that compile, or restart them",
        StaleConfigHashWarning,
        stacklevel=3,
    )
