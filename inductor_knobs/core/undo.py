"""The one undo mechanism: every change to torch is a :data:`Step` that registers its :data:`Undo`.

A step is called with ``push``; it pushes the undo *before* it changes anything, then makes the
change.  :func:`apply_all` runs steps in order onto one undo list and, if one fails (a
``KeyboardInterrupt`` too), runs the undos pushed so far before re-raising; :func:`revert_all` is
the one loop that undoes, last first: every undo runs even when one fails, then one
:class:`~inductor_knobs.errors.RevertError` lists the failures.  A block's config keys, its gate,
its interception, its cache salt, its settings and an emulation's getters are steps on the block's
list; the process-wide patches the blocks share (:class:`~inductor_knobs.core.patching.SharedPatch`:
the gate wrapper, the compile interception, the observers' hooks, the emulator's getters) keep
their install steps' undos on a list of their own, with the same two functions.

Interrupt safety (a ``KeyboardInterrupt`` may arrive at any line): an undo is on the list before
its change starts, and every undo is idempotent and safe on a change that stopped part-way (it
captures what it found first, and puts back only what it captured).  So whatever line an
interrupt hits, running the list puts torch back exactly, and a revert that was itself
interrupted can simply run again.

:class:`Change` is the step of a change that keeps state (what it found): ``apply`` and ``revert``
methods, and ``__call__(push)`` pushes ``revert`` then applies.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import FrameType

from ..errors import ExternalChangeWarning, RevertError

#: Undoes one step; safe to call whether or not the step got as far as changing anything, and again.
Undo = Callable[[], None]
#: One change: registers its undo through the callback *before* it changes anything, so an interrupt
#: at any line of the step leaves an undo that puts back whatever part happened.
Step = Callable[[Callable[[Undo], None]], None]
#: The second item of every ``with`` that holds a lock on an undo path: ``with lock, SAFE_EXIT:``.
#:
#: Why: on CPython 3.11-3.13 a ``with lock:`` statement emits one more line event, for its own line, after
#: the body and just before it calls ``lock.__exit__``, and that instruction lies outside the statement's
#: exception range.  An exception raised at that event (by a ``sys.settrace`` function: the model of the
#: interrupt tests, which raise ``KeyboardInterrupt`` at every line) skips ``__exit__``: the lock stays held
#: for good, and a retried exit (:func:`revert_all` runs an interrupted undo again) then blocks on a
#: ``Lock`` forever, or every other thread does on an ``RLock``.  With a second item the two exits share
#: that line, so its one line event comes before the inner item's exit, which lies inside the lock's
#: exception range: the lock's own ``__exit__`` runs for whatever is raised there.
#:
#: An interrupt from a signal is raised only where CPython checks for pending calls (a function's entry,
#: a backward jump, the end of a call): ``with`` acquires a C lock in one instruction (``BEFORE_WITH``)
#: whose exception range starts right after it, and releases it in one call, so a ``with`` on a C lock
#: cannot be split from its release there, with or without this item.  A flag set at the end of the body
#: and released by a handler instead would release twice after a signal at the end of the ``__exit__``
#: call; a re-entrant lock would let only the leaking thread through.  A ``nullcontext`` has no state:
#: one instance serves every thread and nesting.
#:
#: The body holds no ``try`` statement of its own (call a function that has it): on 3.11 the line event of a
#: ``try:`` line, and of a ``try``/``finally`` that ends the body, fires at a ``NOP`` that lies outside every
#: exception range, so nothing in the frame, ``__exit__`` included, runs for an exception raised there.
SAFE_EXIT = contextlib.nullcontext()
#: How many times an undo interrupted by a ``KeyboardInterrupt`` is run again (a tuple to iterate: no
#: ``range`` object is built for every undo of every block).
TRIES = (1, 2, 3)


class _Deferred(threading.local):
    """This thread's warnings from undos, held while a revert runs (``outer`` is the outermost one's frame)."""

    outer: FrameType | None = None

    def __init__(self) -> None:
        self.pending: list[tuple[str, type[Warning]]] = []


_DEFERRED = _Deferred()


def _reverting_now() -> bool:
    """Whether a revert runs on this thread: its frame is still on the call stack.

    A frame, not a counter: an interrupt that lands before a revert put its marker back leaves a
    frame that has returned, which the next revert sees as gone (a counter would stay raised and hold
    every later warning back).
    """
    outer = _DEFERRED.outer
    if outer is None:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame is outer:
            return True
        frame = frame.f_back
    return False


def warn_after_restore(message: str, category: type[Warning]) -> None:
    """Warn now, or, while a revert runs on this thread, once it has put everything back.

    Undos call this instead of ``warnings.warn``: under ``-W error`` (pytest's ``filterwarnings =
    error``) a warning is an exception, and one raised in the middle of a revert would stop it.
    """
    if _reverting_now():
        _DEFERRED.pending.append((message, category))
    else:
        warnings.warn(message, category, stacklevel=3)


def reverting(revert: Callable[[], None], stacklevel: int) -> None:
    """Run ``revert`` with the warnings of its undos held back; the outermost revert issues them after it.

    Each warning points ``stacklevel`` frames above this function.  When ``revert`` raises, the
    warnings are still issued, but one raised as an error does not replace the exception in flight.
    """
    nested = _reverting_now()
    failed = True
    try:
        if not nested:
            _DEFERRED.outer = sys._getframe()
        revert()
        failed = False
    finally:
        if not nested:
            _DEFERRED.outer = None
            _issue_pending(stacklevel + 1, quiet=failed)


def _issue_pending(stacklevel: int, *, quiet: bool) -> None:
    pending = _DEFERRED.pending
    while pending:
        message, category = pending.pop(0)
        try:
            warnings.warn(message, category, stacklevel=stacklevel + 1)
        except Exception:
            if not quiet:
                raise


class Change:
    """A step that keeps state: ``apply`` raises if the change could not be made (and leaves nothing);
    ``revert`` is idempotent.  Calling it with ``push`` pushes ``revert``, then applies."""

    __slots__ = ()

    def __call__(self, push: Callable[[Undo], None]) -> None:
        push(self.revert)  # first: revert is safe on a change whose apply did not finish
        self.apply()

    def apply(self) -> None:
        raise NotImplementedError

    def revert(self) -> None:
        raise NotImplementedError


def apply_all(steps: Sequence[Step], undos: list[Undo] | None = None) -> list[Undo]:
    """Run ``steps`` in order onto ``undos``; on any failure (``KeyboardInterrupt`` too) undo them and re-raise.

    Args:
        steps: the changes, in apply order.
        undos: the list the steps push onto (a block's frame passes its own, so an interrupt
            between two lines of this function still leaves every touched change's undo on it).

    Returns:
        ``undos``, last to undo at the end (pass it to :func:`revert_all`).
    """
    undos = [] if undos is None else undos
    try:
        push = undos.append
        for step in steps:
            step(push)
    except BaseException:
        try:
            revert_all(undos)
        except BaseException as err:  # noqa: BLE001 - keep the original error primary
            warnings.warn(f"while unwinding a failed apply: {err}", ExternalChangeWarning, stacklevel=2)
        raise
    return undos


def revert_all(undos: list[Undo]) -> None:
    """Pop and run every undo, last first; all run even if some fail (``BaseException`` too).

    An undo is popped only after it ran, so an interrupted call can run again and carry on where it
    stopped (undos are idempotent).

    Warnings of the undos (:func:`warn_after_restore`) are issued after every undo ran.

    Raises:
        RevertError: one or more undos failed (all others ran).
        KeyboardInterrupt, SystemExit: re-raised after every undo was attempted.
    """
    reverting(lambda: _revert_each(undos), stacklevel=2)


def _revert_each(undos: list[Undo]) -> None:
    errors: list[BaseException] = []
    interrupted: BaseException | None = None
    while undos:
        for _ in TRIES:  # an interrupt inside an undo: run that (idempotent) undo again
            try:
                undos[-1]()
                break
            except Exception as err:  # noqa: BLE001 - collected and re-raised below
                errors.append(err)
                break
            except BaseException as err:  # noqa: BLE001 - finish every undo, re-raise below
                interrupted = interrupted or err
        undos.pop()
    if interrupted is not None:
        raise interrupted
    if errors:
        raise RevertError(
            f"{len(errors)} change(s) could not be reverted: " + "; ".join(f"{type(e).__name__}: {e}" for e in errors),
            errors,
        )
