"""Process-wide patches shared by blocks: install once, count users, restore by identity.

Every process-wide patch inductor_knobs makes to torch (the ``is_big_gpu`` gate wrapper, the
compile interception, the autotune observers' hooks, the emulator's SM view) is a
:class:`SharedPatch`: install steps (:data:`~inductor_knobs.core.undo.Step`) run by
:func:`~inductor_knobs.core.undo.apply_all` when the first user arrives, and undone by
:func:`~inductor_knobs.core.undo.revert_all` when the last user leaves: the same undo mechanism as a
block's own changes, so a step that fails (or a ``KeyboardInterrupt`` between two steps) unwinds
exactly the steps before it, and an undo that fails does not stop the others.

Attribute steps (:func:`wrap_attribute`) put back the *original object* (by identity) and only
when the attribute still holds the replacement; if something else replaced it meanwhile, that
foreign patch is left alone and an :class:`~inductor_knobs.errors.ExternalChangeWarning` says so
(the replacement stays inside it, and is inert without users).  With ``sweep=True`` every module
global bound to the original under the same name (``from torch._inductor.utils import
is_big_gpu``) is rebound too, and put back on undo: modules imported while the patch was active
bound the replacement, so they are found by identity as well.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import wrapt

from ..errors import ExternalChangeWarning
from .undo import SAFE_EXIT, Step, Undo, apply_all, revert_all


class SharedPatch:
    """A process-wide patch shared by its holders.

    Args:
        name: what it patches, for messages.
        steps: called when the first holder arrives; returns the install steps, in order.

    Holders are objects (undo records), kept in a set: :meth:`acquire` and :meth:`release` are
    idempotent per holder, so a record whose apply or revert was interrupted and is run again
    cannot count twice.  The patch is installed while the set is non-empty.  Thread-safe (one
    re-entrant lock).
    """

    def __init__(self, name: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.name = name
        self._steps = steps
        self._undos: list[Undo] = []
        self._holders: set[int] = set()
        #: How many holders hold the patch now (an attribute, not a property: read at every block).
        self.users = 0
        self.lock = threading.RLock()

    def acquire(self, holder: object) -> None:
        """Add ``holder``; the first one installs every step (all or nothing)."""
        with self.lock, SAFE_EXIT:
            holders = self._holders
            if not holders and not self._undos:
                apply_all(self._steps(), self._undos)
            holders.add(id(holder))  # a set: a holder already in it is not counted twice
            self.users = len(holders)

    def release(self, holder: object) -> None:
        """Drop ``holder``; when none is left every step is undone (all run, then the first error is raised)."""
        with self.lock, SAFE_EXIT:
            holders = self._holders
            holders.discard(id(holder))
            self.users = len(holders)
            if not holders and self._undos:
                revert_all(self._undos)


def resolve(path: str) -> tuple[Any, str]:
    """``"pkg.mod:Class.attr"`` -> (the object owning ``attr``, ``"attr"``); imports ``pkg.mod``."""
    module_name, parents, name = _parse(path)
    return _owner(module_name, parents), name


def on_import(module: str, steps: Callable[[], Sequence[Step]]) -> Step:
    """A step that runs ``steps()`` (all or nothing) once ``module`` is imported: at once if it is, else
    right after its import, in the importing thread, if the patch still holds then.

    Why: a hook's target module is imported only to install the hook otherwise, and Inductor's and
    Dynamo's modules cost seconds to import (``torch._inductor.select_algorithm`` imports Dynamo and
    1,400 modules: 1.4 s on this project's CI machine, several on a GPU host without bytecode), which
    a process that never compiles (one loading an AOT bundle) need not pay.  Nothing of a module can run
    before its import ends, so a hook installed then misses nothing.

    How: one ``wrapt.register_post_import_hook`` per module name and import (not one per install, so
    installs that come and go while the module is never imported hold no memory); it runs the steps of
    every install still waiting.  Nothing here waits for an import while a lock is held (the install runs
    under its :class:`SharedPatch`'s lock, which the importing thread may need: the startup hook activates
    ``INDUCTOR_KNOBS_*`` inside ``compile_fx``'s import, once its code has run): the steps read modules from
    ``sys.modules``, and an install that finds its module still being imported (:func:`initializing`) is
    handed to one polling thread per module, which fires every install waiting once that import ends (the
    steps never run on a half-imported module: its own code could still overwrite what they patched).
    The steps must not import.  The undo drops a waiting install, or undoes its steps.

    The hook never raises an error into the user's import: a step that fails leaves nothing of its install,
    :func:`import_hook_failures` keeps the error and the next block entry reports it
    (:func:`warn_import_hook_failures`).  An interrupt is re-raised after the other installs fired, and every
    install goes back to waiting (Python drops the module whose import failed; an import run again within
    milliseconds gets the hooks from the poller, just after its code ran).  Blind spot: an import that
    another thread began before the hook was registered and that had not yet put the module in
    ``sys.modules`` (between its ``find_spec`` and ``module_from_spec``) goes unseen until the next install
    of a hook on that module, which then fires every install waiting for it.
    """

    def step(push: Callable[[Undo], None]) -> None:
        found = sys.modules.get(module)
        if found is not None and not initializing(found):  # imported: the plain steps, on the caller's undo list
            for each in steps():
                each(push)
            if _WAITING.get(module):  # installs left by an import no hook saw: theirs too, now
                _fire_waiting(found)
            return
        waiting = _OnImport(module, steps)
        push(waiting.cancel)
        waiting.wait()

    return step


def initializing(module: Any) -> bool:
    """Whether ``module`` is still being imported (``__spec__._initializing``, which importlib sets until its
    loader returns), unless its code has run and the startup hook activates inside its import
    (``inductor_knobs.startup.executed``)."""
    if getattr(getattr(module, "__spec__", None), "_initializing", False) is not True:
        return False
    startup = sys.modules.get("inductor_knobs.startup")
    return startup is None or getattr(startup, "executed", None) is not module


class _OnImport:
    """One install of :func:`on_import`: waiting for ``module``, then holding the undos of its steps."""

    def __init__(self, module: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.module = module
        self.steps = steps
        self.lock = threading.Lock()
        self.undos: list[Undo] = []
        self.live = True
        self.fired = False

    def wait(self) -> None:
        """Queue for the module's import (or for the end of another thread's import of it)."""
        with _WAITING_LOCK, SAFE_EXIT:
            _WAITING.setdefault(self.module, []).append(self)
        _notify_when_imported(self.module)

    def fire(self) -> None:
        """Run the steps (all or nothing) unless undone or done; the module's code has run."""
        with self.lock, SAFE_EXIT:
            if self.live and not self.fired:
                apply_all(self.steps(), self.undos)
                self.fired = True

    def reset(self) -> None:
        """Undo the steps and wait again (the module they patched was dropped: its import failed)."""
        with self.lock, SAFE_EXIT:
            revert_all(self.undos)
            self.fired = False

    def cancel(self) -> None:
        with self.lock, SAFE_EXIT:
            self.live = False
            with _WAITING_LOCK, SAFE_EXIT:
                remove_by_identity(_WAITING.get(self.module, []), self)
            revert_all(self.undos)
            self.fired = False


#: Installs waiting for their module, by module name.
_WAITING: dict[str, list[_OnImport]] = {}
#: Module names with a wrapt post-import hook registered and not yet called.
_HOOKED: set[str] = set()
#: Module names a poller thread watches (another thread is importing them).
_POLLING: set[str] = set()
_WAITING_LOCK = threading.Lock()
_IMPORT_HOOK_FAILURES: list[str] = []
_REPORTED = [0]  # how many of the failures a block entry has warned of


def _notify_when_imported(name: str) -> None:
    """Make the installs waiting for ``name`` fire when its import ends: a wrapt post-import hook, or, for a
    module another thread is importing now (its loader was found before any hook existed), a poller."""
    if sys.modules.get(name) is None:
        with _WAITING_LOCK, SAFE_EXIT:
            register = name not in _HOOKED
        if register:  # outside the lock: wrapt calls _imported at once if the module appeared meanwhile
            _REGISTERING.active = True  # such a call may see another thread's import half done
            try:
                wrapt.register_post_import_hook(_imported, name)
            finally:
                _REGISTERING.active = False
            with _WAITING_LOCK, SAFE_EXIT:
                _HOOKED.add(name)
        if sys.modules.get(name) is None:
            return
    module = sys.modules.get(name)
    if module is None or not initializing(module):
        if module is not None:
            _fire_waiting(module)
        return
    with _WAITING_LOCK, SAFE_EXIT:  # one poller per module: it fires every install waiting when the import ends
        if name in _POLLING:
            return
        _POLLING.add(name)
    try:
        threading.Thread(target=_poll_import, args=(name,), name="inductor_knobs import waiter", daemon=True).start()
    except BaseException:
        with _WAITING_LOCK, SAFE_EXIT:
            _POLLING.discard(name)
        raise


def _poll_import(name: str, interval: float = 0.005) -> None:
    """Wait, without any lock, until another thread's import of ``name`` ends; then fire what waits for it."""
    import time

    module = sys.modules.get(name)
    while module is not None and initializing(module):
        time.sleep(interval)
        module = sys.modules.get(name)
    with _WAITING_LOCK, SAFE_EXIT:  # before firing: an install queued from now on starts a poller or fires itself
        _POLLING.discard(name)
    if module is None:  # that import failed: wait for the next one
        _notify_when_imported(name)
    else:
        _fire_waiting(module)


def _imported(module: Any) -> None:
    """wrapt's post-import hook: called as ``module``'s import ends (its code has run), or at once from
    ``register_post_import_hook`` when the module is in ``sys.modules`` already, maybe half imported by
    another thread (then :func:`_notify_when_imported`, after the register, hands it to a poller)."""
    if not (_REGISTERING.active and initializing(module)):
        _fire_waiting(module)


class _Registering(threading.local):
    active = False


_REGISTERING = _Registering()


def _fire_waiting(module: Any) -> None:
    """Fire every install waiting for ``module``.

    Never raises an error into the import (see :func:`on_import`); an interrupt is re-raised once the
    other installs fired, with every install waiting again for the next import.
    """
    name = getattr(module, "__name__", None)
    with _WAITING_LOCK, SAFE_EXIT:
        _HOOKED.discard(str(name))
        waiting = _WAITING.pop(str(name), [])
    again: list[_OnImport] = []
    interrupted: BaseException | None = None
    for install in waiting:
        try:
            install.fire()
        except Exception as err:  # noqa: BLE001 - an import hook must not fail the import
            _IMPORT_HOOK_FAILURES.append(f"{name}: {type(err).__name__}: {err}")
        except BaseException as err:  # noqa: BLE001 - the user's interrupt: re-raised below
            interrupted = interrupted or err
            again.append(install)
    if interrupted is not None:  # Python drops the module: every install waits for the next import
        for install in waiting:
            install.reset()
        again = waiting
    live = [install for install in again if install.live]
    if live:
        with _WAITING_LOCK, SAFE_EXIT:
            _WAITING.setdefault(str(name), []).extend(live)
        try:
            _notify_when_imported(str(name))
        except Exception as err:  # noqa: BLE001 - as above
            _IMPORT_HOOK_FAILURES.append(f"{name}: {type(err).__name__}: {err}")
    if interrupted is not None:
        raise interrupted


def import_hook_failures() -> list[str]:
    """Errors of hooks that :func:`on_import` installed from an import, oldest first (for ``doctor`` and tests)."""
    return list(_IMPORT_HOOK_FAILURES)


def warn_import_hook_failures(category: type[Warning]) -> None:
    """Warn (``category``) of each hook failure no block entry has warned of yet: an import hook cannot raise
    (:func:`on_import`), so a block entry says it, and under ``-W error`` refuses to enter."""
    if _REPORTED[0] == len(_IMPORT_HOOK_FAILURES):  # every block entry asks: no lock when nothing is new
        return
    with _WAITING_LOCK, SAFE_EXIT:
        fresh, _REPORTED[0] = _IMPORT_HOOK_FAILURES[_REPORTED[0] :], len(_IMPORT_HOOK_FAILURES)
    for failure in fresh:
        warnings.warn(
            f"a hook inductor_knobs installs when torch imports a module failed there: {failure}", category, stacklevel=3
        )


def remove_by_identity(items: list[Any], item: object) -> None:
    """Delete the first element of ``items`` that is ``item`` (not one that merely equals it), if any."""
    for i, candidate in enumerate(items):
        if candidate is item:
            del items[i]
            return


def present(path: str) -> bool:
    """Whether ``path`` (``module:Class.attr``) can be found here: its module imports and has the attribute."""
    try:
        owner, name = resolve(path)
        return hasattr(owner, name)
    except (ImportError, AttributeError):
        return False


def _parse(path: str) -> tuple[str, list[str], str]:
    module_name, _, dotted = path.partition(":")
    *parents, name = dotted.split(".")
    return module_name, parents, name


def _owner(module_name: str, parents: list[str]) -> Any:
    owner: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
    for parent in parents:
        owner = getattr(owner, parent)
    return owner


def wrap_attribute(
    path: str,
    wrapper: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any],
    *,
    sweep: bool = False,
    on_install: Callable[[Any, Any], None] | None = None,
) -> Step:
    """A step that replaces ``path`` with a ``wrapt.FunctionWrapper(original, wrapper)``.

    Staticmethods stay staticmethods.  ``on_install(original, replacement)`` is called after the
    swap (the gate remembers its original there).  Undo restores by identity (see the module
    docstring); with ``sweep`` module globals of the same name are rebound both ways.
    """

    # The wrapper (and its undo) made for the last original found, reused while that original is the
    # one found: blocks install and remove the patch at every enter and exit, so an install is one
    # setattr.  A different original (torch reloaded, someone else's patch) gets a new one.
    made: list[Any] = []  # [owner, raw, function, wrapped, replacement, undo]

    module_name, parents, name = _parse(path)  # once: the step runs at every first holder
    binders = _binders(name) if sweep else None  # rebinds module globals of that name (see _Binders)

    def make(owner: Any, raw: Any) -> list[Any]:
        function = raw.__func__ if isinstance(raw, staticmethod) else raw
        wrapped = wrapt.FunctionWrapper(function, wrapper)
        replacement = staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped

        def undo() -> None:  # acts on what it finds: idempotent, and safe to reuse for every install
            try:
                current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
                if current is replacement:
                    setattr(owner, name, raw)
                elif current is not raw:
                    warnings.warn(
                        f"{path} was replaced by {current!r} while inductor_knobs' wrapper was installed; "
                        "leaving that replacement in place (inductor_knobs' wrapper inside it passes calls through)",
                        ExternalChangeWarning,
                        stacklevel=2,
                    )
            finally:
                if binders is not None:
                    binders.rebind(wrapped, function)

        return [owner, raw, function, wrapped, replacement, undo]

    def step(push: Callable[[Undo], None]) -> None:
        owner = (not parents and sys.modules.get(module_name)) or _owner(module_name, parents)
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if not made or made[0] is not owner or made[1] is not raw:
            made[:] = make(owner, raw)
        _, _, function, wrapped, replacement, undo = made
        push(undo)  # before the change: an interrupt below still leaves a working undo
        setattr(owner, name, replacement)
        if binders is not None:
            binders.rebind(function, wrapped)
        if on_install is not None:
            on_install(function, wrapped)

    return step


class _Binders:
    """The module namespaces that bind one function by name, found incrementally.

    A full scan of ``sys.modules`` costs about a millisecond with a few thousand modules loaded, and
    the gate is installed and removed at every block; so the scan remembers how far it got (modules
    are appended to ``sys.modules`` in import order) and later sweeps only look at modules imported
    since, plus the namespaces already known to bind the name.  Modules imported while the patch
    was active bound the replacement and are found the same way.  If ``sys.modules`` shrank or was
    reordered (a module deleted), the scan starts over.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.found: dict[int, dict[str, Any]] = {}
        self.scanned = 0  # len(sys.modules) at the last scan
        self.last_key: str | None = None  # the newest module name at the last scan

    def rebind(self, find: object, replace: object) -> None:
        """Rebind every module global ``self.name`` that is ``find`` to ``replace``."""
        modules = sys.modules
        if self.scanned != len(modules) or next(reversed(modules), None) != self.last_key:
            self._scan(modules, find, replace)
        name = self.name
        for namespace in self.found.values():
            if namespace.get(name) is find:
                namespace[name] = replace

    def _scan(self, modules: dict[str, Any], *candidates: object) -> None:
        """Add the namespaces imported since the last scan that bind one of ``candidates``."""
        try:
            fresh = []
            for key in reversed(modules):  # newest first, back to the last module scanned
                if key == self.last_key:
                    break
                fresh.append(key)
            else:  # the last module scanned is gone: scan everything again
                self.found.clear()
        except RuntimeError:  # another thread imported meanwhile: scan everything again
            self.found.clear()
            fresh = list(modules)
        for key in fresh:
            namespace = getattr(modules.get(key), "__dict__", None)
            if isinstance(namespace, dict) and any(namespace.get(self.name) is c for c in candidates):
                self.found[id(namespace)] = namespace
        self.scanned, self.last_key = len(modules), next(reversed(modules), None)


_BINDERS: dict[str, _Binders] = {}


def _binders(name: str) -> _Binders:
    """The one :class:`_Binders` of ``name`` for the process (shared by every patch of that name).

    Undo rebinds for the replacement again, so modules imported while the patch was active (which
    bound the replacement) are put back too.
    """
    return _BINDERS.get(name) or _BINDERS.setdefault(name, _Binders(name))
