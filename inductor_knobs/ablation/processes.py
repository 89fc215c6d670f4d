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
import time
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


def end_group(proc: Handle, wait_s: float = 10.0) -> None:
    """SIGKILL what is left of the process group of ``proc``, which has exited, and wait until none of it runs.

    Why: a process the worker started outlives a worker that dies, and may write into the job's directory after
    the runner removed it, leaving it in ``$TMPDIR``.  Inductor's compile workers are such processes: torch's
    ``SubprocPool`` starts them in the worker's process group, and their watchdog notices a dead parent only
    every 60 s (``torch/_inductor/compile_worker/utils.py``, ``_async_compile_initializer``, checked in torch 2.13).
    The worker has been reaped, so its number may have been given to a new process (the fork server's children
    and other workers lead their own groups).  Linux keeps the number reserved while any process of the old group
    lives, so a process holding it now means the old group is gone: nothing is signalled then.  What is left
    open is a new process taking the number, leading its own group and exiting, all between the worker's exit
    and this call, with that group's other processes still running.

    Args:
        proc (Started | Forked): a worker whose exit status is known (else nothing is done).
        wait_s (float): seconds to wait, at most, for the killed processes to go (a hang guard; they go at once).
    """
    if proc.returncode is None or os.path.exists(f"/proc/{proc.pid}"):
        return  # still running (not ours to end here), or its number is another process's now
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return  # nothing of the group is left
    deadline = time.monotonic() + wait_s
    while _group_runs(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie writes nothing: it is not counted); False where
    ``/proc`` cannot say."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return False
    for entry in entries:
        fields = stat_fields(int(entry))
        if fields is not None and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (field 3 on: state, ppid, pgrp, session, …), or
    None if the process is gone or ``/proc`` cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


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
