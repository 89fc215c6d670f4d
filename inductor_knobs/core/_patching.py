"""Process-wide patches shared by blocks: install once, count users, restore by identity.

Every process-wide patch inductor_knobs makes to torch (the ``is_big_gpu`` gate wrapper, the
compile interception, the autotune observers' hooks, the emulator's SM view) is a
:class:`SharedPatch`: install steps (:data:`~inductor_knobs.core._undo.Step`) run by
:func:`~inductor_knobs.core._undo.apply_all` when the first user arrives, and undone by
:func:`~inductor_knobs.core._undo.revert_all` when the last user leaves: the same undo mechanism as a
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
from ._undo import Step, Undo, apply_all, revert_all


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
        with self.lock:
            holders = self._holders
            if not holders and not self._undos:
                apply_all(self._steps(), self._undos)
            holders.add(id(holder))  # a set: a holder already in it is not counted twice
            self.users = len(holders)

    def release(self, holder: object) -> None:
        """Drop ``holder``; when none is left every step is undone (all run, then the first error is raised)."""
        with self.lock:
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

    How: one ``wrapt.register_post_import_hook`` per module name for the process (not one per install,
    so installs that come and go while the module is never imported hold no memory); it runs the steps of
    every install still waiting.  A module that another thread is importing now is waited for
    (``importlib.import_module``).  The undo drops a waiting install, or undoes its steps.  The hook
    never raises (an exception in it would fail the user's import): a step that fails leaves nothing of
    its install, and :func:`import_hook_failures` keeps the error.  Blind spot: an import that another
    thread began before the hook was registered and that had not yet put the module in ``sys.modules``
    (between its ``find_spec`` and ``module_from_spec``) goes unseen until the next install.
    """

    def step(push: Callable[[Undo], None]) -> None:
        waiting = _OnImport(module, steps)
        push(waiting.cancel)
        waiting.arm()

    return step


class _OnImport:
    """One install of :func:`on_import`: waiting for ``module``, then holding the undos of its steps."""

    def __init__(self, module: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.module = module
        self.steps = steps
        self.lock = threading.Lock()
        self.undos: list[Undo] = []
        self.live = True
        self.fired = False

    def arm(self) -> None:
        with _WAITING_LOCK:
            imported = self.module in sys.modules
            if not imported:
                first = self.module not in _WAITING
                _WAITING.setdefault(self.module, []).append(self)
        if imported:  # or being imported by another thread: wait for it (never under a lock of ours)
            self.fire(importlib.import_module(self.module))
            return
        if first:
            wrapt.register_post_import_hook(_imported, self.module)  # may call _imported at once (a race)
        if self.module in sys.modules:  # imported meanwhile by an import wrapt's finder did not see
            _imported(importlib.import_module(self.module))

    def fire(self, module: Any) -> None:
        with self.lock:
            if self.live and not self.fired:
                self.fired = True
                apply_all(self.steps(), self.undos)

    def cancel(self) -> None:
        with self.lock:
            self.live = False
            with _WAITING_LOCK:
                _remove_by_identity(_WAITING.get(self.module, []), self)
            revert_all(self.undos)


#: Installs waiting for their module, by module name (one wrapt hook each while the list exists).
_WAITING: dict[str, list[_OnImport]] = {}
_WAITING_LOCK = threading.Lock()
_IMPORT_HOOK_FAILURES: list[str] = []


def _imported(module: Any) -> None:
    """wrapt's post-import hook: fire every install waiting for ``module``; never raises (see :func:`on_import`)."""
    try:
        name = module.__name__
        # From the importing thread (wrapt calls this as the import ends) this returns at once; from
        # another (wrapt's register saw a module still being imported) it waits for that import.
        module = importlib.import_module(name)
        with _WAITING_LOCK:
            waiting = _WAITING.pop(name, [])
        for install in waiting:
            try:
                install.fire(module)
            except Exception as err:  # noqa: BLE001 - an import hook must not fail the import
                _IMPORT_HOOK_FAILURES.append(f"{name}: {type(err).__name__}: {err}")
    except Exception as err:  # noqa: BLE001 - as above
        _IMPORT_HOOK_FAILURES.append(f"{getattr(module, '__name__', module)!r}: {type(err).__name__}: {err}")


def import_hook_failures() -> list[str]:
    """Errors of hooks that :func:`on_import` installed from an import, oldest first (for ``doctor`` and tests)."""
    return list(_IMPORT_HOOK_FAILURES)


def _remove_by_identity(items: list[Any], item: object) -> None:
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
