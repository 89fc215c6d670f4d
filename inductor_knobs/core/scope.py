"""Where a block's state lives: per thread/task where Inductor config is (torch 2.12+), else per process.

torch keeps Inductor config overrides in ``ContextVar`` s from 2.12 and in one process-global dict before
(the patch module's ``config_is_thread_local``).  A child task or copied context keeps its copy of a
``ContextVar`` after the block that set it exits, so each slot entry carries its block's :class:`Life`,
ended first thing at the block's exit, and readers skip ended entries.
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
    """An undo record whose slot entries carry ``life``: its block's, else ``own_life``, which its revert ends.

    A block's life ends at its exit only, so a block reverted to unwind an older one and applied again stays
    alive in contexts that copied it.  Subclasses declare both slots.
    """

    __slots__ = ()
    life: Life
    own_life: Life


class ScopedSlot(Generic[T]):
    """A value scoped like Inductor config: ``scopes[config_is_thread_local]`` (a ``ContextVar`` on 2.12+).

    An undo record keeps ``(scope, scope.get())`` before it changes the slot and sets that back on revert,
    so a revert is exact, idempotent, and safe after an interrupt at any line.
    """

    def __init__(self, name: str, default: T) -> None:
        self.scopes: tuple[Any, Any] = (_GlobalVar(default), contextvars.ContextVar(name, default=default))

    def get(self, thread_local: bool) -> T:
        return self.scopes[thread_local].get()  # type: ignore[no-any-return]


def current_owner() -> tuple[int, int | None]:
    """(thread id, id of the running asyncio task or None): who holds process-global state."""
    task = None
    asyncio = sys.modules.get("asyncio")  # no tasks exist unless asyncio was imported
    # current_task() raises (a costly RuntimeError) when no loop runs in this thread; the loop getter returns None
    if asyncio is not None and asyncio._get_running_loop() is not None:
        task = asyncio.current_task()
    return threading.get_ident(), None if task is None else id(task)


def describe_owner(owner: tuple[int, int | None]) -> str:
    """``owner`` (:func:`current_owner`) for messages: ``thread MainThread, asyncio task 0x7f…``."""
    names = {t.ident: t.name for t in threading.enumerate()}
    task = f", asyncio task {owner[1]:#x}" if owner[1] is not None else ""
    return f"thread {names.get(owner[0], owner[0])}{task}"
