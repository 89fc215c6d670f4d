"""Who can change where a path leads: the ancestor checks shared by the compile cache and the CUTLASS cache.

:mod:`inductor_knobs.serving.compile_cache` refuses to unpickle a file that someone else could have
swapped, and :mod:`inductor_knobs.core.cutlass_pip` refuses to hand torch a directory of symbolic links
that someone else could repoint; both need to know that every directory on the way there belongs
to root or the current user and is not writable by anyone else (OpenSSH's ``StrictModes`` rule,
``safe_path`` in OpenSSH's ``misc.c``).  Each caller names itself in the messages (``label``) and
raises its own error class.
"""

from __future__ import annotations

import os
import stat

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
