"""SIGINT and SIGTERM during an ablation: one exception for both, and a way to ignore them while cleaning up.

By default SIGINT is a ``KeyboardInterrupt`` wherever the main thread happens to be, and SIGTERM ends
the process with no cleanup at all.  Under :func:`signals_raise` both raise :class:`Interrupted` in the
main thread, so the command can stop the workers (or cancel the Slurm jobs), keep the finished runs
and exit 128 + the signal's number; under :func:`signals_ignored` a second Ctrl-C cannot cut that
cleanup short.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

#: The signals that stop an ablation cleanly (the exit status is 128 + the signal number).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived during an ablation (raised under :func:`signals_raise`).

    A ``BaseException``, like ``KeyboardInterrupt``, so that no ``except Exception`` on the way (in
    torch, in a user's workload) swallows it.

    Attributes:
        signum: the signal's number.
        runs: the records of the runs that finished before it, by job index (empty when it arrived
            outside an executor).
        planned: how many runs this shard planned (0 outside an executor).
    """

    def __init__(self, signum: int, runs: list[dict[str, Any]] | None = None, planned: int = 0) -> None:
        super().__init__(signum)
        self.signum = signum
        self.runs = runs or []
        self.planned = planned

    @property
    def name(self) -> str:
        """The signal's name.

        Returns:
            str: e.g. ``SIGINT``.
        """
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """The conventional exit status of a process stopped by this signal.

        Returns:
            int: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
        """
        return 128 + self.signum


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def _handlers(handler: Any) -> Iterator[None]:
    # Handlers can only be set from the main thread; elsewhere (an embedding application's thread)
    # the process keeps its own.  A signal ignored on entry stays ignored: a shell starts background
    # jobs with SIGINT ignored so that Ctrl-C reaches only the foreground job.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, old in previous.items():
        if old is not signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, old in previous.items():
            if old is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(s, old)


def signals_raise() -> contextlib.AbstractContextManager[None]:
    """Inside the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread.

    The previous handlers are restored on exit.

    Returns:
        contextlib.AbstractContextManager[None]: the block.
    """
    return _handlers(_raise_interrupted)


def signals_ignored() -> contextlib.AbstractContextManager[None]:
    """Inside the block, SIGINT and SIGTERM are ignored (main thread only), so that the cleanup after
    an interruption finishes when Ctrl-C is pressed again.  Start no worker inside: it would inherit
    the ignored signals.

    Returns:
        contextlib.AbstractContextManager[None]: the block.
    """
    return _handlers(signal.SIG_IGN)
