"""Files written whole or not at all (a temporary file in the same directory, then :func:`os.replace`),
and the ownership checks of the directories leading to one (:func:`unsafe_directories`).
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
    """This process's umask, read without changing it where Linux has ``/proc/self/status``."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK, SAFE_EXIT:  # set and restore it: process-wide, hence the lock
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, binary: bool = False, newline: str | None = None, mode: int | None = None
) -> Iterator[IO[Any]]:
    """Write ``path`` all at once: a temporary file that replaces it only when the block ends without an exception.

    Args:
        path (str | os.PathLike[str]): the file; its directory must exist.
        binary (bool): ``"wb"``; else text, UTF-8.
        newline (str | None): ``open``'s ``newline`` in text mode (``""`` for :mod:`csv`).
        mode (int | None): permission bits (None: ``0o666`` less the umask, as ``open``).

    Yields:
        IO[Any]: the temporary file, open for writing.

    Raises:
        OSError: making, writing or renaming failed; ``path`` is unchanged and the temporary file removed.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    try:
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        handle: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline=newline)
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
    """Write ``data`` (Any; non-JSON values as ``str``) to ``path`` with :func:`atomic_write`; ``**dump`` goes to
    :func:`json.dump` (``indent``).  Raises OSError as :func:`atomic_write`."""
    with atomic_write(path) as dst:
        json.dump(data, dst, default=str, **dump)


MAX_SYMLINKS = 40  # Linux's limit of links followed on a walk


def unsafe_directories(directory: str, uid: int, *, label: str, error: type[Exception]) -> list[str]:
    """Why others could change where the walk to ``directory`` leads: each directory from ``/`` down and each
    symbolic link (resolved component by component, as the kernel does) must belong to root or ``uid``, and
    directories must not be writable by group or others unless sticky.

    Args:
        directory (str): an absolute path.
        uid (int): the effective user.
        label (str): starts every raised message (``"load_compile_cache('/x/y')"``).
        error (type[Exception]): raised when a component is missing or not a directory, or past
            :data:`MAX_SYMLINKS` links.

    Returns:
        list[str]: one sentence per problem; ``[]`` if none.
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
            resolved = os.path.dirname(resolved)  # ``resolved`` holds no links: its textual parent is real
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
    """Append to ``problems`` why ``directory`` (``lstat`` ``st``) is unsafe to pass through."""
    if st.st_uid not in (uid, 0):
        problems.append(f"the directory {directory} is owned by {who(st.st_uid)} (allowed: root or you, {who(uid)})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        problems.append(
            f"the directory {directory} is writable by group or others without the sticky bit (mode {mode:o}; "
            "allowed: chmod go-w, or +t as on /tmp)"
        )


def who(uid: int) -> str:
    """``"uid 65534 (nobody)"`` for ``uid`` (int): the name where the password database has one."""
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"
