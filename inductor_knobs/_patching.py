"""The one patching primitive: install once, count users, restore by identity, BaseException-safe.

Every process-wide patch inductor_knobs makes to torch (the ``is_big_gpu`` gate wrapper, the
compile interception, the autotune observers' hooks, the emulator's SM view) is a
:class:`SharedPatch`: a list of install steps that runs when the first user arrives and is
undone, last step first, when the last user leaves.  Each step returns its own undo, so a step
that fails (or a ``KeyboardInterrupt`` between two steps) unwinds exactly the steps before it.
An undo that fails does not stop the others: all run, then the first error is re-raised.

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

from .errors import ExternalChangeWarning

#: Undoes one install step.
Undo = Callable[[], None]
#: One install step: makes one change and returns how to undo it.
Step = Callable[[], Undo]


def run_all(undos: Sequence[Undo]) -> None:
    """Call every undo, last first; all run even if some raise; then re-raise the first error.

    ``BaseException`` too: a ``KeyboardInterrupt`` in one undo does not skip the rest.
    """
    first: BaseException | None = None
    for undo in reversed(undos):
        try:
            undo()
        except BaseException as err:  # noqa: BLE001 - finish every undo, then re-raise below
            first = first or err
    if first is not None:
        raise first


class SharedPatch:
    """A process-wide patch shared by reference count.

    Args:
        name: what it patches, for messages.
        steps: called at the first :meth:`acquire`; returns the install steps, in order.

    Thread-safe (one re-entrant lock).  ``users`` only changes after the install finished,
    so an interrupted first ``acquire`` leaves ``users == 0`` and nothing installed.
    """

    def __init__(self, name: str, steps: Callable[[], Sequence[Step]]) -> None:
        self.name = name
        self._steps = steps
        self._undos: list[Undo] = []
        self.lock = threading.RLock()
        self.users = 0

    @property
    def installed(self) -> bool:
        return bool(self._undos) or self.users > 0

    def acquire(self) -> None:
        """Add a user; the first one installs every step (all or nothing)."""
        with self.lock:
            if self.users == 0:
                undos: list[Undo] = []
                try:
                    for step in self._steps():
                        undos.append(step())
                except BaseException:
                    run_all(undos)
                    raise
                self._undos = undos
            self.users += 1

    def release(self) -> None:
        """Drop a user; the last one undoes every step (all run, then the first error is raised)."""
        with self.lock:
            if self.users <= 0:
                return
            self.users -= 1
            if self.users == 0:
                undos, self._undos = self._undos, []
                run_all(undos)


class Use:
    """Undo record: hold one user of a :class:`SharedPatch` for as long as it is applied."""

    def __init__(self, patch: SharedPatch) -> None:
        self.patch = patch
        self.description = f"use {patch.name}"

    def apply(self) -> None:
        self.patch.acquire()

    def revert(self) -> None:
        self.patch.release()


def resolve(path: str) -> tuple[Any, str]:
    """``"pkg.mod:Class.attr"`` -> (the object owning ``attr``, ``"attr"``); imports ``pkg.mod``."""
    module_name, _, dotted = path.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, name = dotted.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


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

    def step() -> Undo:
        owner, name = resolve(path)
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        function = raw.__func__ if isinstance(raw, staticmethod) else raw
        wrapped = wrapt.FunctionWrapper(function, wrapper)
        replacement: Any = staticmethod(wrapped) if isinstance(raw, staticmethod) else wrapped
        setattr(owner, name, replacement)
        swept = _sweep(name, function, wrapped) if sweep else []
        if on_install is not None:
            on_install(function, wrapped)

        def undo() -> None:
            try:
                current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
                if current is replacement:
                    setattr(owner, name, raw)
                else:
                    warnings.warn(
                        f"{path} was replaced by {current!r} while inductor_knobs' wrapper was installed; "
                        "leaving that replacement in place (inductor_knobs' wrapper inside it passes calls through)",
                        ExternalChangeWarning,
                        stacklevel=2,
                    )
            finally:
                if sweep:
                    for namespace in swept:
                        if namespace.get(name) is wrapped:
                            namespace[name] = function
                    _sweep(name, wrapped, function)

        return undo

    return step


def _sweep(name: str, find: object, replace: object) -> list[dict[str, Any]]:
    """Rebind every module global ``name`` that is ``find`` to ``replace``; return their namespaces."""
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get(name) is find:
            namespace[name] = replace
            found.append(namespace)
    return found
