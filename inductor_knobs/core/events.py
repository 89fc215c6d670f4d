"""The one compile-event channel: what happened in a compile, published once, delivered to every live consumer.

Torch reports a compile through several hooks (Dynamo's compile callbacks, Inductor's feedback
savers, the compile interception's attestation, timing wrappers of first-call costs; see
:mod:`inductor_knobs.core.observe` and :mod:`inductor_knobs.core.interception`).  Each hook calls
:func:`publish` with one event: an :class:`~inductor_knobs.core.records.AutotuneRecord` (``"autotune"``),
a :class:`~inductor_knobs.core.records.CompileEvent` (``"compile"``), a
:class:`~inductor_knobs.core.records.RuntimeEvent` (``"runtime"``) or a
:class:`~inductor_knobs.core.attestation.CompileAttestation` (``"attestation"``).  It reaches each
live consumer that has a method ``on_<kind>``.

Consumers are live while a :class:`Subscribe` undo record holds them: a recorder's or guard's
block, ``ik.compile``'s backend around each compile.  The registry is process-wide and a record
removes exactly its own entry, so an exit out of order cannot revive an ended consumer or drop a
live one.  Which compiles a consumer hears of is its scope:

- ``"context"`` (recorders, ``ik.compile``): compiles that run in the thread or asyncio task that
  subscribed, and in tasks and copied contexts started from it.  The subscriber's mark is put in a
  ``ContextVar`` that children inherit; a backward that AOTAutograd compiles lazily, after the
  block or on another thread, carries the marks its forward's compile had.
- ``"process"`` (serving guards): compiles on every thread; each event is published on the thread
  that compiled, so a consumer can tell them apart with ``threading.get_ident()``.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
from collections.abc import Iterable
from typing import Any

from ._undo import SAFE_EXIT, Change

KINDS = ("autotune", "compile", "runtime", "attestation")
SCOPES = ("context", "process")


class Subscriber:
    """One live consumer: the object whose ``on_<kind>`` methods receive events, and its scope."""

    __slots__ = ("consumer", "handlers", "mark", "scope")

    def __init__(self, consumer: Any, scope: str) -> None:
        self.consumer = consumer
        self.scope = scope
        #: Unique for the process's life (an ``id`` could be reused by a later subscriber, and a child
        #: context may still hold an ended one's mark).
        self.mark = next(_MARK_NUMBERS)
        #: kind -> the bound method, or None when the consumer does not take that kind.
        self.handlers = {kind: getattr(consumer, f"on_{kind}", None) for kind in KINDS}

    def hears(self, marks: frozenset[int]) -> bool:
        return self.scope == "process" or self.mark in marks


_MARK_NUMBERS = itertools.count(1)
_LIVE: tuple[Subscriber, ...] = ()  # replaced whole under the lock, read without it
_LOCK = threading.RLock()  # an RLock only so a test can tell this thread holds it (_is_owned)
_MARKS: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("inductor_knobs.event_marks", default=frozenset())


def current_marks() -> frozenset[int]:
    """The scope marks of the running thread/task (a compile keeps them for its lazily compiled backward)."""
    return _MARKS.get()


def listeners(marks: frozenset[int] | None = None) -> tuple[Subscriber, ...]:
    """The live subscribers that hear events published under ``marks`` (default: the running context's)."""
    live = _LIVE
    if not live:
        return ()
    marks = _MARKS.get() if marks is None else marks
    return tuple(s for s in live if s.hears(marks))


def publish(kind: str, event: Any, marks: frozenset[int] | None = None) -> None:
    """Deliver ``event`` to every live subscriber that hears ``marks`` (default: the running context's).

    Synchronous, on the publishing thread: what a consumer raises propagates into the compile
    (a guard's ``on="raise"``).
    """
    if _LIVE:
        deliver(listeners(marks), kind, event)


def deliver(subscribers: Iterable[Subscriber], kind: str, event: Any) -> None:
    """Deliver ``event`` to ``subscribers`` (those a compile addressed when it started)."""
    for subscriber in subscribers:
        handler = subscriber.handlers[kind]
        if handler is not None:
            handler(event)


def _add(subscriber: Subscriber) -> None:
    global _LIVE
    with _LOCK, SAFE_EXIT:
        if subscriber not in _LIVE:
            _LIVE = (*_LIVE, subscriber)


def _remove(subscriber: Subscriber) -> None:
    global _LIVE
    with _LOCK, SAFE_EXIT:
        _LIVE = tuple(s for s in _LIVE if s is not subscriber)


class Subscribe(Change):
    """Undo record: ``consumer`` receives compile events while the record is applied.

    Args:
        consumer: any object with some of ``on_autotune``, ``on_compile``, ``on_runtime``,
            ``on_attestation`` (each takes the event).
        scope: ``"context"`` or ``"process"`` (see the module docstring).

    Apply adds a fresh subscriber (and, for ``"context"``, its mark in the running context); revert
    removes that subscriber and that mark only.  Both are idempotent.  A hook that a consumer needs
    (the interception, the observer hooks) is held by its own record before this one.
    """

    __slots__ = ("_subscriber", "consumer", "scope")

    def __init__(self, consumer: Any, scope: str = "context") -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope={scope!r}: allowed {', '.join(SCOPES)}")
        self.consumer = consumer
        self.scope = scope
        self._subscriber: Subscriber | None = None

    @property
    def description(self) -> str:
        return f"deliver compile events ({self.scope}) to {type(self.consumer).__name__}"

    def apply(self) -> None:
        subscriber = Subscriber(self.consumer, self.scope)
        self._subscriber = subscriber  # first: revert takes back whatever part of the rest happened
        if self.scope == "context":
            _MARKS.set(_MARKS.get() | {subscriber.mark})
        _add(subscriber)

    def revert(self) -> None:
        subscriber = self._subscriber
        if subscriber is None:
            return
        _remove(subscriber)
        marks = _MARKS.get()
        if subscriber.mark in marks:
            _MARKS.set(marks - {subscriber.mark})
        self._subscriber = None  # last: a revert interrupted before it runs again in full
