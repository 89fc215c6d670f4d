"""Where a block's state lives: per thread/task where Inductor config is (torch 2.12+), else per process.

torch keeps Inductor config overrides in ``ContextVar`` s from 2.12 and in one process-global
dict before; state that must follow config (the block stack, the gate override, the values a
block asked for) uses :class:`ScopedSlot`, which picks the same scope from the patch module's
``config_is_thread_local``.

A child asyncio task or a thread run in a copied context keeps its copy of a ``ContextVar`` after
the block that set it exits: the block's revert puts the slot back in the block's own context
only.  So each entry in a slot carries the :class:`Life` of the block that made it, ended first
thing at the block's exit, and readers skip ended entries: a block acts from its enter to its
exit, in every context that saw it.  Before 2.12 the slot is one process-global value, which the
exit puts back for everyone.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _GlobalVar(Generic[T]):
    """A process-global stand-in for a ``ContextVar`` (``get``/``set``)."""

    def __init__(self, default: T) -> None:
        self.value = default

    def get(self) -> T:
        return self.value

    def set(self, value: T) -> None:
        self.value = value


class Life:
    """Whether a block holds: ``alive`` from its enter to its exit, read by every context that copied its records."""

    __slots__ = ("alive",)

    def __init__(self) -> None:
        self.alive = True

    def end(self) -> None:
        """Idempotent; readers skip the records of an ended life from then on."""
        self.alive = False


class Lived:
    """Marker of an undo record whose entries in a :class:`ScopedSlot` carry a :class:`Life`.

    ``life`` is what its entries carry; ``own_life`` is the record's own, made with it and ended
    first thing by its revert, so a record applied outside a block (a lazily compiled backward's)
    lasts while it is applied.  A block sets each of its records' ``life`` to the block's
    (:mod:`inductor_knobs.core.blocks`), which ends at the block's exit only: reverting the block
    to unwind one entered before it, then applying it again, leaves it alive in contexts that copied
    it.  Subclasses declare both slots.
    """

    __slots__ = ()
    life: Life
    own_life: Life


class ScopedSlot(Generic[T]):
    """A value scoped like Inductor config: a ``ContextVar`` on 2.12+, process-global before.

    ``scopes[thread_local]`` is the scope itself (``get()``/``set()``), indexed by the patch
    module's ``config_is_thread_local``: a tuple index, not a method call, because blocks read
    and write their slots at every enter and exit.  An undo record keeps ``(scope, scope.get())``
    *before* it changes the slot, and puts that value back into that scope on revert, so a
    revert is exact, idempotent, and safe after an interrupt at any line.
    """

    def __init__(self, name: str, default: T) -> None:
        self.scopes: tuple[Any, Any] = (_GlobalVar(default), contextvars.ContextVar(name, default=default))

    def get(self, thread_local: bool | None = None) -> T:
        """The value in the scope of ``thread_local`` (None: the installed torch's)."""
        if thread_local is None:
            from . import torch_compat

            thread_local = torch_compat.installed(strict=False).config_is_thread_local
        return self.scopes[thread_local].get()  # type: ignore[no-any-return]


def current_owner() -> tuple[int, int | None]:
    """(thread id, id of the running asyncio task or None): who holds process-global state."""
    task = None
    asyncio = sys.modules.get("asyncio")  # no tasks exist unless asyncio was imported
    # Asked at every enter before torch 2.12: current_task() raises (and builds a RuntimeError) when
    # no loop runs in this thread, so the loop is asked first, which returns None instead.
    if asyncio is not None and asyncio._get_running_loop() is not None:
        task = asyncio.current_task()
    return threading.get_ident(), None if task is None else id(task)


def describe_owner(owner: tuple[int, int | None]) -> str:
    """``thread MainThread, asyncio task 0x7f…`` for messages."""
    names = {t.ident: t.name for t in threading.enumerate()}
    task = f", asyncio task {owner[1]:#x}" if owner[1] is not None else ""
    return f"thread {names.get(owner[0], owner[0])}{task}"
