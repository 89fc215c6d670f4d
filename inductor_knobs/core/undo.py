"""The one undo mechanism: every change to torch is a :data:`Step` that registers its :data:`Undo`.

Interrupt safety (a ``KeyboardInterrupt`` may arrive at any line): a step pushes its undo before it changes
anything, and every undo is idempotent and safe on a change that stopped part-way (it puts back only what it
captured), so running the list (:func:`revert_all`) puts torch back exactly, and can simply run again.
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
#: One change: registers its undo through the callback *before* it changes anything.
Step = Callable[[Callable[[Undo], None]], None]
#: The second item of every ``with`` that holds a lock on an undo path: ``with lock, SAFE_EXIT:``.
#: On CPython 3.11-3.13 ``with lock:`` emits a line event for its own line after the body, at an instruction
#: outside the statement's exception range: an exception raised there (by a ``sys.settrace`` function, as the
#: interrupt tests do) skips ``lock.__exit__`` and leaves the lock held for good.  With a second item that
#: event comes before the inner exit, inside the lock's exception range.  (A signal's interrupt cannot split
#: a ``with`` on a C lock from its release.)  The body holds no ``try`` of its own: on 3.11 the line event of
#: a ``try:`` line fires at a ``NOP`` outside every exception range.  A ``nullcontext`` is stateless: one serves all.
SAFE_EXIT = contextlib.nullcontext()
#: How many times an undo interrupted by a ``KeyboardInterrupt`` is run (a tuple: no ``range`` built per undo).
TRIES = (1, 2, 3)


class _Deferred(threading.local):
    """This thread's warnings from undos, held while a revert runs (``outer`` is the outermost one's frame)."""

    outer: FrameType | None = None

    def __init__(self) -> None:
        self.pending: list[tuple[str, type[Warning]]] = []


_DEFERRED = _Deferred()


def _reverting_now() -> bool:
    """Whether a revert runs on this thread: its frame is on the stack (a counter could be left raised by an interrupt)."""
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
    """Warn now, or once the revert running on this thread has put everything back (under ``-W error`` a warning
    raised mid-revert would stop it)."""
    if _reverting_now():
        _DEFERRED.pending.append((message, category))
    else:
        warnings.warn(message, category, stacklevel=3)


def reverting(revert: Callable[[], None], stacklevel: int) -> None:
    """Run ``revert`` holding its undos' warnings back; the outermost issues them after, ``stacklevel`` frames up,
    and when ``revert`` raised, a warning raised as an error does not replace that exception."""
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
    """A step that keeps state: called with ``push``, it pushes its idempotent ``revert``, then applies."""

    __slots__ = ()

    def __call__(self, push: Callable[[Undo], None]) -> None:
        push(self.revert)  # first: revert is safe on a change whose apply did not finish
        self.apply()

    def apply(self) -> None:
        raise NotImplementedError

    def revert(self) -> None:
        raise NotImplementedError


def apply_all(steps: Sequence[Step], undos: list[Undo] | None = None) -> list[Undo]:
    """Run ``steps`` onto ``undos`` (the caller's own list, so an interrupt here leaves every undo on it) and return it;
    on any failure (``KeyboardInterrupt`` too) undo them and re-raise."""
    undos = [] if undos is None else undos
    try:
        push = undos.append
        for step in steps:
            step(push)
    except BaseException as failure:
        try:
            revert_all(undos)
        except BaseException as err:  # noqa: BLE001 - keep the original error primary
            note = f"while unwinding a failed apply: {type(err).__name__}: {err}"
            if hasattr(failure, "add_note"):  # Python 3.11+: on the error itself, which -W error cannot replace
                failure.add_note(note)
            else:
                with contextlib.suppress(Warning):  # under -W error the original error stays the one raised
                    warnings.warn(note, ExternalChangeWarning, stacklevel=2)
        raise
    return undos


class Applied:
    """``steps`` applied for a ``with`` block: all or nothing on enter, every undo run on exit however it ends.

    Args:
        steps (Sequence[Step]): the changes in apply order (a :class:`Change` is a step).

    ``__enter__`` runs :func:`apply_all` (a failed step undoes the steps before it and raises: nothing stays applied);
    ``__exit__`` runs :func:`revert_all` and re-raises what it raises (``RevertError``, an interrupt).  An exit
    interrupted between two undos leaves :attr:`active` True, and running ``__exit__`` again finishes it: every undo
    is idempotent.  Not re-entrant: one ``with`` per object.
    """

    __slots__ = ("_steps", "_undos")

    def __init__(self, steps: Sequence[Step]) -> None:
        self._steps = steps
        self._undos: list[Undo] = []

    @property
    def active(self) -> bool:
        """Whether an undo is still to run."""
        return bool(self._undos)

    def __enter__(self) -> Applied:
        try:  # an interrupt even at the return: ``with`` would not call ``__exit__``
            apply_all(self._steps, self._undos)
            return self
        except BaseException:
            revert_all(self._undos)
            raise

    def __exit__(self, *exc: object) -> None:
        revert_all(self._undos)


def revert_all(undos: list[Undo]) -> None:
    """Pop and run every undo, last first, each popped after it ran; then issue their warnings, then raise the
    first ``KeyboardInterrupt``/``SystemExit``, else one ``RevertError`` for the undos that failed."""
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
