"""Files written whole or not at all: a temporary file in the same directory, then :func:`os.replace`.

A reader (or a rerun after a crash, Ctrl-C or a full disk) sees the old file or the new one, never
part of one, and no temporary file is left behind.  :func:`atomic_write` is the one way the package
writes its files (the ablation's run store and results, compile caches and serving bundles).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

from ._undo import SAFE_EXIT

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
