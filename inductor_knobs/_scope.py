"""Where a block's state lives: per thread/task where Inductor config is (torch 2.12+), else per process.

torch keeps Inductor config overrides in ``ContextVar`` s from 2.12 and in one process-global
dict before; state that must follow config (the gate override, the values a block asked for)
uses :class:`ScopedSlot`, which picks the same scope from the patch module's
``config_is_thread_local``.
"""

from __future__ import annotations

import contextvars
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


class ScopedSlot(Generic[T]):
    """A value scoped like Inductor config: a ``ContextVar`` on 2.12+, process-global before.

    ``set`` returns a token for ``reset``: the scope it wrote and the value it found there, so a
    reset puts back exactly that value, and resetting twice is harmless (an interrupted revert can
    run again).
    """

    def __init__(self, name: str, default: T) -> None:
        self._var: contextvars.ContextVar[T] = contextvars.ContextVar(name, default=default)
        self._global: _GlobalVar[T] = _GlobalVar(default)

    def _pick(self, thread_local: bool | None) -> Any:
        if thread_local is None:
            from . import torch_compat

            thread_local = torch_compat.installed(strict=False).config_is_thread_local
        return self._var if thread_local else self._global

    def get(self, thread_local: bool | None = None) -> T:
        return self._pick(thread_local).get()  # type: ignore[no-any-return]

    def capture(self, thread_local: bool | None = None) -> Any:
        """A token for :meth:`reset`: the scope and the value it holds now.  Changes nothing, so a record
        can keep the token *before* it changes the slot (an interrupt in between leaves a working undo)."""
        scope = self._pick(thread_local)
        return (scope, scope.get())

    def put(self, token: Any, value: T) -> None:
        """Set ``value`` in the scope of ``token`` (from :meth:`capture`)."""
        token[0].set(value)

    def set(self, value: T, thread_local: bool | None = None) -> Any:
        token = self.capture(thread_local)
        token[0].set(value)
        return token

    def reset(self, token: Any) -> None:
        if token is not None:
            scope, prior = token
            scope.set(prior)
