"""The one safe opener of files that hold pickled data (compile caches, serving bundles): checked, opened once, no link followed.

A compile-cache file or serving bundle holds torch's cache artifacts, pickled data, i.e. code.  So the
file is opened once, without following a symbolic link as its last component (``O_NOFOLLOW``); its
ownership and mode are read from that descriptor (``fstat``), and the caller reads from the same
descriptor, so nothing can be swapped in between.  Every directory on the way (the one holding the
name, its ancestors up to ``/``, the targets of any symbolic links among them) must belong to root or
the current user and not be writable by others unless sticky (OpenSSH's ``StrictModes``;
:func:`inductor_knobs.ext.unsafe_directories`).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NoReturn

from ..ext import unsafe_directories
from ..ext import who as _who
from .errors import CompileCacheRefused


def open_checked(path: str, allow_unsafe: bool, label: str | None = None) -> int:
    """Open ``path`` for reading once and return the descriptor, after the ownership checks.

    Args:
        path (str): the cache file, as the caller named it.
        allow_unsafe (bool): skip the checks; the name is then opened as ``open()`` would,
            following a symbolic link (the behaviour before these checks existed).
        label (str | None): who asks, starting every message (default ``"load_compile_cache('<path>')"``).

    Returns:
        int: a descriptor open for reading (``O_CLOEXEC``) on the file that was checked; the caller
        reads header and payload from it, so nothing can be swapped in after the check.

    Raises:
        CompileCacheRefused: no such file, or one of the problems
            :func:`~inductor_knobs.serving.compile_cache.load_compile_cache` lists.
    """
    label = label or f"load_compile_cache({path!r})"
    if allow_unsafe or not hasattr(os, "getuid"):  # no getuid: Windows, no POSIX ownership to check
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    uid = os.geteuid()  # the identity the file is opened (and later unpickled) with
    absolute = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    # The directory holding the given name, not the one holding whatever it resolves to: the name's
    # own directory decides who can replace the name.  dirname, not abspath/normpath: those fold
    # ``link/..`` textually, while the kernel goes to the parent of the link's target.
    problems = unsafe_code_directories(os.path.dirname(absolute) or os.sep, uid, path, label)
    if problems:
        _refuse(label, problems)
    # O_NOFOLLOW: a symbolic link as the last component fails with ELOOP instead of being followed,
    # so the descriptor is on the very file the directory holds.  O_NONBLOCK: a FIFO planted under
    # the name must not hang the open (fstat then refuses it); it is harmless on a regular file.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as err:
        raise CompileCacheRefused(f"{label}: no such file") from err
    except OSError as err:
        # ELOOP on Linux; EMLINK on FreeBSD; lstat tells a link apart from a too-long chain of them.
        if err.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            try:
                target = repr(os.readlink(path))
            except OSError:
                target = "an unreadable target"
            raise CompileCacheRefused(
                f"{label} refused: the file holds pickled data, i.e. code, and {path!r} is a "
                f"symbolic link (to {target}), whose target can be swapped between the check and the read; allowed: "
                "a regular file named directly. Pass the real path, or allow_unsafe=True for a file you trust"
            ) from err
        raise
    try:
        st = os.fstat(fd)
        problems = []
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"it is not a regular file (mode {st.st_mode:o})")
        if st.st_uid != uid:
            problems.append(f"the file is owned by {_who(st.st_uid)}, not by you, {_who(uid)}")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problems.append(f"the file is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
        if problems:
            _refuse(label, problems)
    except BaseException:
        os.close(fd)
        raise
    # The file was opened non-blocking only for the FIFO case; reads of a regular file never block,
    # but clear the flag anyway so the buffered reader sees ordinary semantics.
    os.set_blocking(fd, True)
    return fd


def unsafe_code_directories(directory: str, uid: int, path: str, label: str | None = None) -> list[str]:
    """Problems with the directories the kernel walks through to reach ``directory``; ``[]`` if none.

    The rule and the walk are :func:`inductor_knobs.ext.unsafe_directories` (shared with
    :mod:`inductor_knobs.core.cutlass`); this adds the ``load_compile_cache(path)`` label and error class.

    Args:
        directory (str): an absolute path.
        uid (int): the current (effective) user.
        path (str): the name the caller gave, for messages.
        label (str | None): who asks (default ``"load_compile_cache('<path>')"``).

    Returns:
        list[str]: one sentence per problem, naming the directory or link.

    Raises:
        CompileCacheRefused: a directory on the way does not exist or is not a directory, or the
            walk meets more than 40 symbolic links.
    """
    return unsafe_directories(directory, uid, label=label or f"load_compile_cache({path!r})", error=CompileCacheRefused)


def _refuse(label: str, problems: list[str]) -> NoReturn:
    raise CompileCacheRefused(
        f"{label} refused: the file holds pickled data, i.e. code, and {'; '.join(problems)}. "
        "Fix the ownership/permissions (chmod 600 the file, chmod go-w the directories), "
        "or pass allow_unsafe=True for a file you trust"
    )
