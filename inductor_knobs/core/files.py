"""Files written whole or not at all: a temporary file in the same directory, then :func:`os.replace`.

A reader (or a rerun after a crash, Ctrl-C or a full disk) sees the old file or the new one, never
part of one, and no temporary file is left behind.  :func:`atomic_write` is the one way the package
writes its files (the ablation's run store and results, compile caches and serving bundles).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

from .undo import SAFE_EXIT

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """This process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK, SAFE_EXIT:  # elsewhere: set and restore it (process-wide, hence the lock)
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, binary: bool = False, newline: str | None = None, mode: int | None = None
) -> Iterator[IO[Any]]:
    """Write ``path`` all at once: the block writes to a temporary file in the same directory, which
    replaces ``path`` (:func:`os.replace`) only when the block ends without an exception.

    Args:
        path (str | os.PathLike[str]): the file; its directory must exist.
        binary (bool): open the temporary file in binary mode (``"wb"``); else text, UTF-8.
        newline (str | None): ``open``'s ``newline`` in text mode (``""`` for :mod:`csv`).
        mode (int | None): the file's permission bits (None: what ``open`` would give, ``0o666`` less
            the umask).

    Yields:
        IO[Any]: the temporary file, open for writing.

    Raises:
        OSError: the temporary file cannot be made or written, or the rename failed; ``path`` is then
            unchanged and the temporary file removed.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        if binary:
            handle: IO[Any] = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding="utf-8", newline=newline)
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike[str], data: Any, **dump: Any) -> None:
    """Write ``data`` as JSON to ``path`` with :func:`atomic_write`.

    Args:
        path (str | os.PathLike[str]): the file.
        data (Any): JSON-ready data (anything else is written as ``str``).
        **dump (Any): more :func:`json.dump` arguments (``indent``).

    Raises:
        OSError: as :func:`atomic_write`.
    """
    with atomic_write(path) as dst:
        json.dump(data, dst, default=str, **dump)


#: Longest chain of symbolic links followed while checking a path (Linux's MAXSYMLINKS).
MAX_SYMLINKS = 40


def unsafe_directories(directory: str, uid: int, *, label: str, error: type[Exception]) -> list[str]:
    """Problems with the directories the kernel walks through to reach ``directory``; ``[]`` if none.

    Each directory from ``/`` down must be owned by root or ``uid`` and not writable by group or
    others unless sticky (then only an entry's owner can remove or rename it, and every entry on
    the walk is checked to belong to root or ``uid``).  Symbolic links among the components are
    resolved here, component by component as the kernel does, rather than with ``realpath`` and a
    check of the result (OpenSSH's way): that way the link itself must be owned by root or
    ``uid`` (in a sticky directory its owner can replace it with a link elsewhere), the directory
    holding it is checked like any other, and so is every directory its target passes through,
    including ones a ``..`` in the target leaves again.  After that, no one but root and ``uid``
    can change where the walk leads, so a later ``open`` reaches the directory checked here.

    Args:
        directory (str): an absolute path.
        uid (int): the current (effective) user.
        label (str): who asks, starting every raised message (``"load_compile_cache('/x/y')"``).
        error (type[Exception]): the class raised for a walk that cannot be completed.

    Returns:
        list[str]: one sentence per problem, naming the directory or link.

    Raises:
        error: a directory on the way does not exist or is not a directory, or the walk meets
            more than :data:`MAX_SYMLINKS` symbolic links.
    """
    problems: list[str] = []
    pending = [part for part in reversed(directory.split(os.sep)) if part]  # a stack: next component last
    resolved = os.sep
    check_directory(resolved, os.lstat(resolved), uid, problems)
    links = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)  # ``resolved`` holds no links, so its textual parent is real
            continue
        candidate = os.path.join(resolved, part)
        try:
            st = os.lstat(candidate)
        except FileNotFoundError as err:
            raise error(f"{label}: no such directory {candidate}") from err
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (uid, 0):
                problems.append(
                    f"the path goes through the symbolic link {candidate}, owned by {who(st.st_uid)} "
                    f"(allowed: root or you, {who(uid)}), who can point it elsewhere"
                )
            links += 1
            if links > MAX_SYMLINKS:
                raise error(f"{label}: more than {MAX_SYMLINKS} symbolic links")
            target = os.readlink(candidate)
            if os.path.isabs(target):
                resolved = os.sep
            pending.extend(p for p in reversed(target.split(os.sep)) if p)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise error(f"{label}: {candidate} is not a directory")
        resolved = candidate
        check_directory(resolved, st, uid, problems)
    return problems


def check_directory(directory: str, st: os.stat_result, uid: int, problems: list[str]) -> None:
    """Append to ``problems`` why ``directory`` (whose ``lstat`` is ``st``) is unsafe to pass through.

    Allowed: owned by root or ``uid``, and not writable by group or others unless sticky.
    """
    if st.st_uid not in (uid, 0):
        problems.append(f"the directory {directory} is owned by {who(st.st_uid)} (allowed: root or you, {who(uid)})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        problems.append(
            f"the directory {directory} is writable by group or others without the sticky bit (mode {mode:o}; "
            "allowed: chmod go-w, or +t as on /tmp)"
        )


def who(uid: int) -> str:
    """``uid 65534 (nobody)``: the number always, the name where the password database has one."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"
