"""Process-wide patches shared by blocks: install once, count users, restore by identity.

A :class:`SharedPatch` applies its steps (``undo.apply_all``) for the first holder and reverts them after the
last, so a failed step or an interrupt unwinds exactly the steps before it.  :func:`wrap_attribute` restores
the original by identity, only while the attribute still holds the replacement (else
:class:`~inductor_knobs.errors.ExternalChangeWarning`); :func:`replace_attribute` does the same for data.
:func:`on_import` defers steps until a module's import
ends (``wrapt`` post-import hooks), so a process that never compiles never imports Inductor; an import hook
never raises (the next block entry warns instead).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import wrapt

from ..errors import ExternalChangeWarning
from .undo import SAFE_EXIT, Step, Undo, apply_all, revert_all, warn_after_restore


class SharedPatch:
    """A process-wide patch, installed while it has holders.  Thread-safe (one re-entrant lock).

    Args:
        name (str): what it patches, for messages.
        steps (Callable[[], Sequence[Step]]): called when the first holder arrives; the install steps, in order.

    :meth:`acquire` and :meth:`release` are idempotent per holder (an undo record run again after an
    interrupt cannot count twice).
    """

    def __init__(self, name: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.name = name
        self._steps = steps
        self._undos: list[Undo] = []
        self._holders: set[int] = set()
        self.users = 0  # an attribute, not a property: read at every block
        self.lock = threading.RLock()

    def acquire(self, holder: object) -> None:
        """Add ``holder``; the first one installs every step (all or nothing)."""
        with self.lock, SAFE_EXIT:
            if not self._holders and not self._undos:
                apply_all(self._steps(), self._undos)
            self._holders.add(id(holder))
            self.users = len(self._holders)

    def release(self, holder: object) -> None:
        """Drop ``holder``; when none is left every step is undone (all run, then the first error is raised)."""
        with self.lock, SAFE_EXIT:
            self._holders.discard(id(holder))
            self.users = len(self._holders)
            if not self._holders and self._undos:
                revert_all(self._undos)


def resolve(path: str) -> tuple[Any, str]:
    """``"pkg.mod:Class.attr"`` -> (the object owning ``attr``, ``"attr"``); imports ``pkg.mod``.

    Raises ImportError or AttributeError when the module or a parent attribute is missing.
    """
    module_name, parents, name = _parse(path)
    return _owner(module_name, parents), name


def on_import(module: str, steps: Callable[[], Sequence[Step]]) -> Step:
    """A step running ``steps()`` (all or nothing; they must not import) once ``module``'s import has ended.

    No lock is held while waiting (the startup hook activates inside ``compile_fx``'s import); an import under
    way in another thread goes to a poller thread, one not yet in ``sys.modules`` is seen at the next install.
    """

    def step(push: Callable[[Undo], None]) -> None:
        found = sys.modules.get(module)
        if found is not None and not initializing(found):  # imported: the steps, on the caller's undo list
            for each in steps():
                each(push)
            if _WAITING.get(module):  # installs left by an import no hook saw: theirs too, now
                _fire_waiting(found)
            return
        waiting = _OnImport(module, steps)
        push(waiting.cancel)
        with _WAITING_LOCK, SAFE_EXIT:
            _WAITING.setdefault(module, []).append(waiting)
        _notify_when_imported(module)

    return step


def initializing(module: Any) -> bool:
    """Whether ``module`` is still being imported (importlib's ``__spec__._initializing``), unless its code
    has run and the startup hook activates inside its import (``inductor_knobs.startup.executed``)."""
    if getattr(getattr(module, "__spec__", None), "_initializing", False) is not True:
        return False
    startup = sys.modules.get("inductor_knobs.startup")
    return startup is None or getattr(startup, "executed", None) is not module


class _OnImport:
    """One install of :func:`on_import`: waiting for ``module``, then holding its steps' undos."""

    def __init__(self, module: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.module = module
        self.steps = steps
        self.lock = threading.Lock()
        self.undos: list[Undo] = []
        self.live = True
        self.fired = False

    def fire(self) -> None:
        with self.lock, SAFE_EXIT:
            if self.live and not self.fired:
                apply_all(self.steps(), self.undos)
                self.fired = True

    def reset(self) -> None:
        """Undo the steps: the module was dropped (its import failed)."""
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


_WAITING: dict[str, list[_OnImport]] = {}  # by module name
_HOOKED: set[str] = set()  # module names with a wrapt post-import hook not yet called
_POLLING: set[str] = set()  # module names a poller thread watches
_WAITING_LOCK = threading.Lock()
_IMPORT_HOOK_FAILURES: list[str] = []
_REPORTED = [0]  # how many of the failures a block entry has warned of


def _notify_when_imported(name: str) -> None:
    """Fire the installs waiting for ``name`` when its import ends (a wrapt hook, or a poller thread)."""
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
    module = sys.modules.get(name)
    if module is None:
        return
    if not initializing(module):
        _fire_waiting(module)
        return
    with _WAITING_LOCK, SAFE_EXIT:
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
    """Wait, holding no lock, for another thread's import of ``name`` to end; then fire what waits for it."""
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
    """wrapt's post-import hook; when called from ``register_post_import_hook`` on a module another thread is
    half importing, :func:`_notify_when_imported` hands it to a poller instead."""
    if not (getattr(_REGISTERING, "active", False) and initializing(module)):
        _fire_waiting(module)


_REGISTERING = threading.local()  # .active: this thread is inside wrapt.register_post_import_hook


def _fire_waiting(module: Any) -> None:
    """Fire every install waiting for ``module``; errors are kept, not raised into the import.  An interrupt is
    re-raised after the others fired, every install waiting again (Python drops the module)."""
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
    if interrupted is not None:
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
    """Errors of :func:`on_import` hooks run from an import, oldest first."""
    return list(_IMPORT_HOOK_FAILURES)


def warn_import_hook_failures(category: type[Warning]) -> None:
    """Warn (``category``) of each import hook failure not warned of yet (``-W error`` refuses the block)."""
    if _REPORTED[0] == len(_IMPORT_HOOK_FAILURES):  # every block entry asks: no lock when nothing is new
        return
    with _WAITING_LOCK, SAFE_EXIT:
        fresh, _REPORTED[0] = _IMPORT_HOOK_FAILURES[_REPORTED[0] :], len(_IMPORT_HOOK_FAILURES)
    for failure in fresh:
        warnings.warn(
            f"a hook inductor_knobs installs when torch imports a module failed there: {failure}", category, stacklevel=3
        )


def remove_by_identity(items: list[Any], item: object) -> None:
    """Delete the first element of ``items`` that is ``item`` (not merely equal), if any."""
    for i, candidate in enumerate(items):
        if candidate is item:
            del items[i]
            return


def present(path: str) -> bool:
    """Whether ``path`` (str, ``"pkg.mod:Class.attr"``) exists here: its module imports and has the attribute."""
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


def _replaced_meanwhile(path: str, current: Any, ours: str, note: str) -> None:
    """Warn that ``path`` holds ``current``, set by someone else while inductor_knobs' ``ours`` was installed."""
    warn_after_restore(  # an undo's warning: issued once the whole revert is done
        f"{path} was replaced by {current!r} while inductor_knobs' {ours} was installed; leaving that value in place"
        + (f" {note}" if note else ""),
        ExternalChangeWarning,
    )


def wrap_attribute(
    path: str,
    wrapper: Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any],
    *,
    sweep: bool = False,
    on_install: Callable[[Any, Any], None] | None = None,
) -> Step:
    """A step that replaces ``path`` with ``wrapt.FunctionWrapper(original, wrapper)`` (torch-independent).

    Args:
        path (str): ``"pkg.mod:Class.attr"``; a staticmethod stays one.
        wrapper (Callable): wrapt's ``wrapper(wrapped, instance, args, kwargs)``.
        sweep (bool): also rebind module globals of the same name bound to the original, and back on undo.
        on_install (Callable[[Any, Any], None] | None): called with ``(original, replacement)`` after the swap.

    Returns a :class:`Step` for :class:`SharedPatch`; its undo restores by identity (module docstring).
    """
    # Reused while the same original is found: blocks install at every enter, so an install is one setattr.
    made: list[Any] = []  # [owner, raw, function, wrapped, replacement, undo]
    module_name, parents, name = _parse(path)
    binders = _BINDERS.setdefault(name, _Binders(name)) if sweep else None  # one per name in the process

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
                    _replaced_meanwhile(path, current, "wrapper", "(inductor_knobs' wrapper inside it passes calls through)")
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


_UNSET = object()


def replace_attribute(path: str, value: Any, *, only_if: Any = _UNSET) -> Step:
    """A step that sets ``path`` to ``value`` (data, where :func:`wrap_attribute` wraps a function).

    Args:
        path (str): ``"pkg.mod:Class.attr"``.
        value (Any): the replacement, an object nobody else would set (its undo restores the original only while
            the attribute still holds this very object: an interned string or a small int another party set
            would pass for it); else :class:`~inductor_knobs.errors.ExternalChangeWarning`, and what is there stays.
        only_if (Any): where given, the step changes nothing unless the attribute equals it (``==``) at each
            install: data someone else changed is left alone.

    Returns a :class:`Step` for :class:`SharedPatch`.  An attribute a class inherits is set on the class and
    deleted again on undo.
    """
    module_name, parents, name = _parse(path)

    def step(push: Callable[[Undo], None]) -> None:
        owner = (not parents and sys.modules.get(module_name)) or _owner(module_name, parents)
        own = owner.__dict__ if isinstance(owner, type) else None
        inherited = own is not None and name not in own

        def raw() -> Any:  # a class's own entry as stored (a staticmethod stays one), else what the owner gives
            return own[name] if own is not None and name in own else getattr(owner, name, None)

        original = raw()
        if only_if is not _UNSET and original != only_if:
            return

        def undo() -> None:
            current = raw()
            if current is value:
                if inherited:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            elif current is not original:
                _replaced_meanwhile(path, current, "replacement", "")

        push(undo)  # before the change: an interrupt below still leaves a working undo
        setattr(owner, name, value)

    return step


class _Binders:
    """The module namespaces binding one function by name, found incrementally: a full scan of ``sys.modules``
    costs ~1 ms per block, so only modules appended since the last scan are looked at."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found: dict[int, dict[str, Any]] = {}
        self.scanned = 0  # len(sys.modules) at the last scan
        self.last_key: str | None = None  # the newest module name at the last scan

    def rebind(self, find: object, replace: object) -> None:
        modules = sys.modules
        if self.scanned != len(modules) or next(reversed(modules), None) != self.last_key:
            self._scan(modules, find, replace)
        name = self.name
        for namespace in self.found.values():
            if namespace.get(name) is find:
                namespace[name] = replace

    def _scan(self, modules: dict[str, Any], *candidates: object) -> None:
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
