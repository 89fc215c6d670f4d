"""A started worker process, however it was started: its handle, how it is killed, and its output.

A worker is a new interpreter (:class:`Started`, around ``subprocess.Popen``) or a child of the
ablation's fork server (:class:`.forkserver.Forked`); both lead their own session and offer ``pid``,
``returncode``, ``wait(timeout)`` and ``poll()``, and both write their stdout and stderr to
:data:`OUTPUT_FILES` in the job's directory (files, not pipes: a process the worker started that
outlives it cannot hold the parent's read waiting).
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

#: The files in the job directory that take the worker's stdout and stderr.
OUTPUT_FILES = ("worker.out", "worker.err")


class Started:
    """A worker started as a new interpreter: ``subprocess.Popen`` with :class:`.forkserver.Forked`'s
    ``wait``.

    Args:
        proc (subprocess.Popen[bytes]): the process.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc, self.pid = proc, proc.pid
        self.start: dict[str, Any] = {}  # how it started, for the record (set by Workers.start)

    @property
    def returncode(self) -> int | None:
        """Its exit status once known (``-N``: killed by signal N)."""
        return self.proc.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit status, or None if it still runs after ``timeout`` seconds (None: no limit)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def poll(self) -> int | None:
        """The exit status if it has exited, else None."""
        return self.proc.poll()


#: A started worker, however it was started.
Handle = Any  # Started | Forked


def kill_group(proc: Handle) -> None:
    """SIGKILL the process group that ``proc`` leads (its own session), unless it is known to have exited.

    This also ends what it started, such as Inductor's compile workers.

    Args:
        proc (Started | Forked): a worker.
    """
    if proc.returncode is not None:  # reaped: its pid may belong to another process by now
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has exited already


def reap(proc: Handle) -> None:
    """Kill ``proc``'s process group and wait (up to 30 s) for its exit status.

    Args:
        proc (Started | Forked): a worker.
    """
    kill_group(proc)
    proc.wait(30)


def read_output(cache: str) -> tuple[str, str]:
    """A worker's stdout and stderr, from the files in its directory.

    Args:
        cache (str): the job's directory.

    Returns:
        tuple[str, str]: the two texts (empty where a file is missing).
    """
    texts = []
    for name in OUTPUT_FILES:
        try:
            with open(os.path.join(cache, name), errors="replace") as src:
                texts.append(src.read())
        except OSError:
            texts.append("")
    return texts[0], texts[1]
